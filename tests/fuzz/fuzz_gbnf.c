/* fuzz_gbnf.c — fuzz entry for the GBNF front end (src/grammar/gbnf.c) through compile
 * and the byte-level matcher.
 *
 * Input: the grammar text up to the first NUL (start rule "root"), then a text (at most
 * 64 bytes used). A grammar is either refused with a message (INVALID_ARG or NO_MEMORY;
 * a syntax error's message names its line and column) or compiled under a small budget (2,000
 * states, 10 ms: small, so that a million executions take minutes; running out is a
 * refusal too). A compiled grammar must give
 * gr_matches's verdict again when the text is fed one byte at a time. Built by
 * `make fuzz`; the unit tests replay its corpus. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "grammar/grammar.h"

int fuzz_gbnf_one(const uint8_t *data, size_t size);

static void fuzz_gbnf_check_text(const gr_grammar *g, const uint8_t *text, size_t n) {
    const bool whole = gr_matches(g, (const char *)text, n);
    gr_state *st = gr_state_new(g);
    if (!st) return;
    size_t i = 0;
    while (i < n && gr_state_feed(st, text + i, 1)) i++;
    const bool fed = i == n && gr_state_can_end(st);
    gr_state_free(st);
    if (fed != whole) abort();
}

int fuzz_gbnf_one(const uint8_t *data, size_t size) {
    const uint8_t *z = memchr(data, 0, size);
    const size_t src_n = z ? (size_t)(z - data) : size;
    const uint8_t *text = z ? z + 1 : data + size;
    size_t text_n = (size_t)(data + size - text);
    if (text_n > 64) text_n = 64;

    gr_builder *b = gr_builder_new();
    if (!b) return -1;
    const int32_t root = gr_gbnf(b, size ? (const char *)data : "", src_n, "root");
    const cn_error *be = gr_builder_error(b);
    if (root < 0) {
        if (be->status == CN_STATUS_OK || !be->msg[0]) abort();
        /* every GBNF error but the missing start rule and memory points into the text */
        if (be->status == CN_STATUS_INVALID_ARG && !strstr(be->msg, "line ") && !strstr(be->msg, "no rule named"))
            abort();
        gr_builder_free(b);
        return -1;
    }
    gr_grammar *g = NULL;
    cn_error err = {0};
    const gr_limits lim = {.max_states = 2000, .max_compile_ms = 10};
    const cn_status st = gr_compile(b, root, &lim, &g, &err);
    gr_builder_free(b);
    if (st != CN_STATUS_OK) {
        if (g || !err.msg[0]) abort();
        return -1;
    }
    fuzz_gbnf_check_text(g, text, text_n);
    gr_grammar_free(g);
    return 0;
}

FUZZ_ENTRY(fuzz_gbnf_one)
