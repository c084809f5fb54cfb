/* stubs.c — TEMPORARY: the front ends (json_schema.c, regex.c, gbnf.c, choice.c) are
 * being written on their own branches; until they merge, these report that the front end
 * is missing. Each merge deletes its stubs. */
#include "grammar/grammar_impl.h"

static int32_t missing(gr_builder *b, const char *what) {
    gr_builder_fail(b, CN_STATUS_INVALID_ARG, "the %s front end is not built yet", what);
    return -1;
}
int32_t gr_gbnf(gr_builder *b, const char *s, size_t n, const char *root) { (void)s; (void)n; (void)root; return missing(b, "GBNF"); }
int32_t gr_regex_expr(gr_builder *b, const char *s, size_t n) { (void)s; (void)n; return missing(b, "regex"); }
int32_t gr_regex_expr_unanchored(gr_builder *b, const char *s, size_t n) { (void)s; (void)n; return missing(b, "regex"); }
int32_t gr_choice(gr_builder *b, const char *const *c, size_t n) { (void)c; (void)n; return missing(b, "choice"); }
