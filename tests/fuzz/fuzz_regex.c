/* fuzz_regex.c — fuzz entry for the regex front end (src/grammar/regex.c) through compile
 * and the byte-level matcher.
 *
 * Input: a flags byte (bit 0: the JSON-string search mode, gr_regex_expr_unanchored),
 * the pattern up to the first NUL, then a text (at most 64 bytes used). A pattern is
 * either refused with a message (INVALID_ARG or NO_MEMORY, never an empty one) or built
 * and compiled under a small budget (2,000 states, 10 ms; running out is a refusal
 * too). A compiled grammar must give gr_matches's verdict again when the text is fed to a
 * gr_state one byte at a time (no byte refused on the way to a match, and can_end at the
 * end exactly when it matches). Built by `make fuzz`; the unit tests replay its corpus. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "grammar/grammar.h"

int fuzz_regex_one(const uint8_t *data, size_t size);

/* The compiled grammar's verdict on text, checked against a byte-at-a-time feed. */
static void fuzz_regex_check_text(const gr_grammar *g, const uint8_t *text, size_t n) {
    const bool whole = gr_matches(g, (const char *)text, n);
    gr_state *st = gr_state_new(g);
    if (!st) return; /* out of memory: nothing to check */
    size_t i = 0;
    while (i < n && gr_state_feed(st, text + i, 1)) i++;
    const bool fed = i == n && gr_state_can_end(st);
    gr_state_free(st);
    if (fed != whole) abort();
    if (whole != gr_matches(g, (const char *)text, n)) abort();
}

int fuzz_regex_one(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    const bool json = data[0] & 1;
    const uint8_t *re = data + 1;
    const uint8_t *z = memchr(re, 0, size - 1);
    const size_t re_n = z ? (size_t)(z - re) : size - 1;
    const uint8_t *text = z ? z + 1 : data + size;
    size_t text_n = (size_t)(data + size - text);
    if (text_n > 64) text_n = 64;

    gr_builder *b = gr_builder_new();
    if (!b) return -1;
    const int32_t root = gr_rule(b, "root");
    const int32_t e = json ? gr_regex_expr_unanchored(b, (const char *)re, re_n)
                           : gr_regex_expr(b, (const char *)re, re_n);
    gr_rule_define(b, root, e);
    const cn_error *be = gr_builder_error(b);
    if (e < 0) {
        if (be->status == CN_STATUS_OK || !be->msg[0]) abort();
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
    fuzz_regex_check_text(g, text, text_n);
    gr_grammar_free(g);
    return 0;
}

FUZZ_ENTRY(fuzz_regex_one)
