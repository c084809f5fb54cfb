/* choice.c — the choice front end (grammar.h: gr_choice): exactly one of a list of
 * strings, as bytes. It builds one rule, the alternatives of the literals; compile's
 * subset construction turns them into a trie-shaped DFA, so shared prefixes cost
 * nothing here. Duplicates and the empty string are allowed (the empty string makes the
 * grammar complete at once). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_impl.h"

int32_t gr_choice(gr_builder *b, const char *const *choices, size_t n) {
    if (gr_builder_error(b)->status != CN_STATUS_OK) return -1;
    if (!choices || n == 0) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "a choice grammar needs at least one choice");
        return -1;
    }
    int32_t *alts = malloc(n * sizeof *alts);
    if (!alts) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!choices[i]) {
            free(alts);
            gr_builder_fail(b, CN_STATUS_INVALID_ARG, "choice %zu is NULL", i);
            return -1;
        }
        alts[i] = gr_literal(b, choices[i], strlen(choices[i]));
    }
    int32_t root = gr_rule_fresh(b, "choice");
    int32_t r = gr_rule_define(b, root, gr_alt(b, alts, n));
    free(alts);
    return r;
}
