/* fuzz_schema.c — fuzz entry for the JSON Schema front end (src/grammar/json_schema*.c):
 * the input is a schema's text, compiled in both whitespace modes under a small budget.
 * Bad schemas must be refused with a message (never a crash, a hang or a leak); a schema
 * that compiles must give a grammar whose byte-level matcher runs on a few documents.
 * Built by `make fuzz`; tests/unit/test_json_schema.c replays the corpus. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fuzz_util.h"
#include "grammar/grammar.h"

int fuzz_schema_one(const uint8_t *data, size_t size);

int fuzz_schema_one(const uint8_t *data, size_t size) {
    static const char *const docs[] = {"{}", "[]", "null", "0", "\"a\"", "{\"a\": [1, 2.5, true]}"};
    int compiled = 0;
    for (int flex = 0; flex < 2; flex++) {
        gr_builder *b = gr_builder_new();
        if (!b) abort();
        gr_builder_set_deadline(b, cn_time_ms() + 20);
        int32_t root = gr_json_schema(b, (const char *)data, size, flex);
        if (root < 0) {
            if (gr_builder_error(b)->msg[0] == 0) abort(); /* a refusal says why */
            gr_builder_free(b);
            continue;
        }
        gr_limits lim = {.max_states = 5000, .max_compile_ms = 20};
        gr_grammar *g = NULL;
        cn_error err = {0};
        if (gr_compile(b, root, &lim, &g, &err) == CN_STATUS_OK) {
            for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) (void)gr_matches(g, docs[i], strlen(docs[i]));
            gr_grammar_free(g);
            compiled = 1;
        } else if (err.msg[0] == 0) abort();
        gr_builder_free(b);
    }
    return compiled ? 0 : -1;
}

FUZZ_ENTRY(fuzz_schema_one)
