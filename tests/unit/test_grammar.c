/* test_grammar.c — the grammar engine core (src/grammar: builder, compile, the stack
 * machine, the token matcher). Truth in layers: the byte-level machine against direct
 * checkers written here (balanced brackets counted, a code point decoded), every string
 * up to a length; the token masks (trie walks, cached entries, suffix tries) against the
 * byte-level machine fed each token on its own; rollback against masks taken before.
 * Plus the compile errors (left recursion, undefined rules, empty languages, budgets). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

static gr_grammar *compile_ok(gr_builder *b, int32_t root) {
    gr_grammar *g = NULL;
    cn_error err = {0};
    cn_status st = gr_compile(b, root, NULL, &g, &err);
    cr_assert_eq(st, CN_STATUS_OK, "compile: %s", err.msg);
    gr_builder_free(b);
    return g;
}

/* S ::= ( "(" S ")" | "[" S "]" )* : nested brackets, recursion through a nullable rule */
static gr_grammar *brackets(void) {
    gr_builder *b = gr_builder_new();
    int32_t s = gr_rule(b, "S");
    int32_t par = gr_seq(b, (int32_t[]){gr_literal(b, "(", 1), gr_ref(b, s), gr_literal(b, ")", 1)}, 3);
    int32_t sq = gr_seq(b, (int32_t[]){gr_literal(b, "[", 1), gr_ref(b, s), gr_literal(b, "]", 1)}, 3);
    gr_rule_define(b, s, gr_repeat(b, gr_alt2(b, par, sq), 0, GR_INF));
    return compile_ok(b, s);
}

static bool balanced(const char *s, size_t n) {
    char st[64];
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '(' || s[i] == '[') {
            st[d++] = s[i];
        } else {
            char want = s[i] == ')' ? '(' : '[';
            if (!d || st[d - 1] != want) return false;
            d--;
        }
    }
    return d == 0;
}

Test(grammar, brackets_match_every_string_up_to_8) {
    gr_grammar *g = brackets();
    const char alpha[] = "()[]";
    char s[16];
    int n_ok = 0;
    for (int len = 0; len <= 8; len++) {
        long total = 1;
        for (int i = 0; i < len; i++) total *= 4;
        for (long x = 0; x < total; x++) {
            long y = x;
            for (int i = 0; i < len; i++, y /= 4) s[i] = alpha[y % 4];
            bool want = balanced(s, (size_t)len);
            n_ok += want;
            cr_assert_eq(gr_matches(g, s, (size_t)len), want, "'%.*s': want %d", len, s, want);
        }
    }
    cr_assert_gt(n_ok, 100);
    gr_grammar_free(g);
}

Test(grammar, codepoint_classes_follow_utf8) {
    gr_builder *b = gr_builder_new();
    int32_t r = gr_rule(b, "root");
    /* Greek lower case and CJK, negated: everything else that is a scalar value */
    uint32_t ranges[] = {0x3B1, 0x3C9, 0x4E00, 0x9FFF};
    gr_rule_define(b, r, gr_codepoints(b, ranges, 2, true));
    gr_grammar *g = compile_ok(b, r);
    uint32_t probes[] = {0,      0x41,   0x7F,   0x80,   0x3B0,  0x3B1,  0x3C9,  0x3CA,  0x7FF,   0x800,   0x4DFF,
                         0x4E00, 0x9FFF, 0xA000, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        uint32_t c = probes[i];
        char u[4];
        size_t n;
        if (c < 0x80) {
            u[0] = (char)c;
            n = 1;
        } else if (c < 0x800) {
            u[0] = (char)(0xC0 | c >> 6);
            u[1] = (char)(0x80 | (c & 63));
            n = 2;
        } else if (c < 0x10000) {
            u[0] = (char)(0xE0 | c >> 12);
            u[1] = (char)(0x80 | ((c >> 6) & 63));
            u[2] = (char)(0x80 | (c & 63));
            n = 3;
        } else {
            u[0] = (char)(0xF0 | c >> 18);
            u[1] = (char)(0x80 | ((c >> 12) & 63));
            u[2] = (char)(0x80 | ((c >> 6) & 63));
            u[3] = (char)(0x80 | (c & 63));
            n = 4;
        }
        bool in = (c >= 0x3B1 && c <= 0x3C9) || (c >= 0x4E00 && c <= 0x9FFF);
        bool surrogate = c >= 0xD800 && c <= 0xDFFF;
        cr_assert_eq(gr_matches(g, u, n), !in && !surrogate, "U+%04X", c);
    }
    /* no overlong or stray bytes */
    cr_assert(!gr_matches(g, "\xC0\x80", 2));
    cr_assert(!gr_matches(g, "\x80", 1));
    cr_assert(!gr_matches(g, "\xF4\x90\x80\x80", 4)); /* above U+10FFFF */
    gr_grammar_free(g);
}

Test(grammar, repeats_bounded_and_alternatives) {
    gr_builder *b = gr_builder_new();
    int32_t r = gr_rule(b, "root");
    /* ("ab" | "a"){2,3} "c"? */
    int32_t item = gr_alt2(b, gr_literal(b, "ab", 2), gr_literal(b, "a", 1));
    gr_rule_define(b, r, gr_seq2(b, gr_repeat(b, item, 2, 3), gr_repeat(b, gr_literal(b, "c", 1), 0, 1)));
    gr_grammar *g = compile_ok(b, r);
    const char *yes[] = {"aa", "aba", "abab", "aab", "aaa", "ababab", "aac", "abababc", "aabac"};
    const char *no[] = {"", "a", "ab", "c", "aaaa", "abababab", "aacc", "ba", "abb"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
        cr_assert(gr_matches(g, yes[i], strlen(yes[i])), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) cr_assert(!gr_matches(g, no[i], strlen(no[i])), "%s", no[i]);
    gr_grammar_free(g);
}

static void compile_fails(gr_builder *b, int32_t root, const char *needle) {
    gr_grammar *g = NULL;
    cn_error err = {0};
    gr_limits lim = {.max_states = 500};
    cn_status st = gr_compile(b, root, &lim, &g, &err);
    cr_assert_neq(st, CN_STATUS_OK);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    gr_builder_free(b);
}

Test(grammar, compile_errors_name_the_problem) {
    gr_builder *b = gr_builder_new();
    int32_t e = gr_rule(b, "expr");
    /* expr ::= expr "+" "1" | "1": left recursive */
    gr_rule_define(b, e,
                   gr_alt2(b, gr_seq(b, (int32_t[]){gr_ref(b, e), gr_literal(b, "+1", 2)}, 2), gr_literal(b, "1", 1)));
    compile_fails(b, e, "left recursion: rule 'expr'");

    /* through a nullable prefix: a ::= b? a "x" | "y" */
    b = gr_builder_new();
    int32_t a = gr_rule(b, "a"), bb = gr_rule(b, "b");
    gr_rule_define(b, bb, gr_literal(b, "z", 1));
    gr_rule_define(
        b, a,
        gr_alt2(b, gr_seq(b, (int32_t[]){gr_repeat(b, gr_ref(b, bb), 0, 1), gr_ref(b, a), gr_literal(b, "x", 1)}, 3),
                gr_literal(b, "y", 1)));
    compile_fails(b, a, "left recursion: rule 'a'");

    b = gr_builder_new();
    int32_t r = gr_rule(b, "root");
    gr_rule_define(b, r, gr_ref(b, gr_rule(b, "missing")));
    compile_fails(b, r, "rule 'missing' is used but not defined");

    /* x ::= "(" x ")": no base case */
    b = gr_builder_new();
    int32_t x = gr_rule(b, "x");
    gr_rule_define(b, x, gr_seq(b, (int32_t[]){gr_literal(b, "(", 1), gr_ref(b, x), gr_literal(b, ")", 1)}, 3));
    compile_fails(b, x, "matches no text");

    b = gr_builder_new();
    r = gr_rule(b, "root");
    gr_rule_define(b, r, gr_repeat(b, gr_byte_range(b, 'a', 'z'), 0, 100000));
    {
        gr_grammar *g = NULL;
        cn_error err = {0};
        gr_limits lim = {.max_states = 500};
        cr_assert_neq(gr_compile(b, r, &lim, &g, &err), CN_STATUS_OK);
        cr_assert(strstr(err.msg, "compile budget"), "%s", err.msg);
        cr_assert_null(g);
        /* chunked (200,001 unrolled states are over 65,536: 256 items a chunk), it fits
         * the default budget and counts exactly */
        cr_assert_eq(gr_compile(b, r, NULL, &g, &err), CN_STATUS_OK, "%s", err.msg);
        char *s = malloc(100001);
        memset(s, 'q', 100001);
        const size_t yes[] = {0, 1, 255, 256, 257, 99839, 99840, 99841, 99999, 100000};
        for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) cr_assert(gr_matches(g, s, yes[i]), "%zu", yes[i]);
        cr_assert(!gr_matches(g, s, 100001));
        free(s);
        gr_grammar_free(g);
        gr_builder_free(b);
    }

    b = gr_builder_new();
    r = gr_rule(b, "root");
    gr_repeat(b, gr_literal(b, "a", 1), 3, 2);
    compile_fails(b, r, "min > max");
}

/* ---- token masks ---- */

typedef struct {
    int32_t n;
    char **tok;
    size_t *len;
} toyvocab;

/* Every string of length 1-3 over alpha, plus a few longer ones: a vocabulary with deep
 * shared prefixes, as a real one has. Token ids are scrambled against trie order. */
static toyvocab toy(const char *alpha) {
    toyvocab v = {0};
    size_t na = strlen(alpha);
    size_t cap = na + na * na + na * na * na + 16;
    v.tok = calloc(cap, sizeof *v.tok);
    v.len = calloc(cap, sizeof *v.len);
    for (size_t len = 1; len <= 3; len++) {
        size_t total = len == 1 ? na : len == 2 ? na * na : na * na * na;
        for (size_t x = 0; x < total; x++) {
            char *s = malloc(8);
            size_t y = x;
            for (size_t i = 0; i < len; i++, y /= na) s[i] = alpha[y % na];
            v.tok[v.n] = s;
            v.len[v.n] = len;
            v.n++;
        }
    }
    const char *extra[] = {"(((())))", "[[]]", "()()()", "([])", "]]]]"};
    for (size_t i = 0; i < 5; i++) {
        v.tok[v.n] = strdup(extra[i]);
        v.len[v.n] = strlen(extra[i]);
        v.n++;
    }
    v.tok[v.n] = NULL; /* a "control" token: never allowed */
    v.n++;
    /* scramble ids */
    for (int32_t i = v.n - 1; i > 0; i--) {
        int32_t j = (int32_t)((uint32_t)(i * 2654435761u) % (uint32_t)(i + 1));
        char *t = v.tok[i];
        v.tok[i] = v.tok[j];
        v.tok[j] = t;
        size_t l = v.len[i];
        v.len[i] = v.len[j];
        v.len[j] = l;
    }
    return v;
}

static void toy_free(toyvocab *v) {
    for (int32_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->len);
}

/* When set, the walk automaton's state budget for the matchers the checks make. */
static uint32_t walk_states_for_tests;

/* The mask by brute force: each token fed alone to the byte-level matcher. */
static void brute_mask(gr_matcher *m, const toyvocab *tv, int32_t eog, uint32_t *mask) {
    memset(mask, 0, ((size_t)tv->n + 32) / 32 * 4);
    for (int32_t i = 0; i < tv->n; i++) {
        bool ok;
        if (i == eog) ok = gr_matcher_is_complete(m);
        else ok = tv->tok[i] && gr_matcher_accept_bytes(m, (const uint8_t *)tv->tok[i], tv->len[i]);
        if (ok && i != eog) gr_matcher_rollback(m, 1, NULL);
        if (ok) mask[i >> 5] |= 1u << (i & 31);
    }
}

static void check_masks_along_random_walks(gr_grammar *g, const toyvocab *tv, int32_t eog, int walks, int steps) {
    gr_vocab *v;
    cn_error err = {0};
    cr_assert_eq(gr_vocab_new(tv->n, (const char *const *)tv->tok, tv->len, &eog, 1, &v, &err), CN_STATUS_OK, "%s",
                 err.msg);
    gr_matcher *m;
    cr_assert_eq(gr_matcher_new(g, v, &m, &err), CN_STATUS_OK);
    if (walk_states_for_tests) gr_matcher_set_walk_states(m, walk_states_for_tests);
    size_t nw = ((size_t)tv->n + 31) / 32;
    uint32_t *mask = calloc(nw + 1, 4), *want = calloc(nw + 1, 4);
    uint64_t rng = 12345;
    for (int w = 0; w < walks; w++) {
        gr_matcher_reset(m);
        for (int s = 0; s < steps; s++) {
            cr_assert_eq(gr_matcher_mask(m, mask, &err), CN_STATUS_OK, "%s", err.msg);
            brute_mask(m, tv, eog, want);
            for (int32_t i = 0; i < tv->n; i++) {
                bool a = (mask[i >> 5] >> (i & 31)) & 1, b = (want[i >> 5] >> (i & 31)) & 1;
                cr_assert_eq(a, b, "walk %d step %d token %d '%.*s': mask %d, byte-level %d", w, s, i, (int)tv->len[i],
                             tv->tok[i] ? tv->tok[i] : "", a, b);
            }
            /* pick a random allowed token (not EOG) */
            int32_t cand[4096];
            int nc = 0;
            for (int32_t i = 0; i < tv->n && nc < 4096; i++)
                if (i != eog && ((mask[i >> 5] >> (i & 31)) & 1)) cand[nc++] = i;
            if (!nc) break;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            cr_assert(gr_matcher_accept(m, cand[(rng >> 33) % (uint64_t)nc]));
        }
    }
    free(mask);
    free(want);
    gr_matcher_free(m);
    gr_vocab_free(v);
}

Test(grammar, masks_equal_brute_force_brackets) {
    gr_grammar *g = brackets();
    toyvocab tv = toy("()[]x");
    check_masks_along_random_walks(g, &tv, tv.n - 1, 20, 12);
    toy_free(&tv);
    gr_grammar_free(g);
}

/* A JSON-like grammar: value ::= number | "[" (value ("," value)*)? "]"; number is a
 * leaf rule (its entries go to the shared cache), so suffix tries and escapes across
 * rules are exercised. */
static gr_grammar *lists(void) {
    gr_builder *b = gr_builder_new();
    int32_t val = gr_rule(b, "value"), num = gr_rule(b, "number");
    gr_rule_define(
        b, num,
        gr_seq2(b, gr_repeat(b, gr_literal(b, "-", 1), 0, 1), gr_repeat(b, gr_byte_range(b, '0', '9'), 1, GR_INF)));
    int32_t more = gr_repeat(b, gr_seq2(b, gr_literal(b, ",", 1), gr_ref(b, val)), 0, GR_INF);
    int32_t inner = gr_repeat(b, gr_seq2(b, gr_ref(b, val), more), 0, 1);
    int32_t list = gr_seq(b, (int32_t[]){gr_literal(b, "[", 1), inner, gr_literal(b, "]", 1)}, 3);
    gr_rule_define(b, val, gr_alt2(b, gr_ref(b, num), list));
    return compile_ok(b, val);
}

Test(grammar, masks_equal_brute_force_lists) {
    gr_grammar *g = lists();
    toyvocab tv = toy("[]1,-");
    check_masks_along_random_walks(g, &tv, tv.n - 1, 30, 16);
    /* a second grammar with the same number rule reuses the shared entries */
    gr_grammar *g2 = lists();
    check_masks_along_random_walks(g2, &tv, tv.n - 1, 10, 16);
    toy_free(&tv);
    gr_grammar_free(g);
    gr_grammar_free(g2);
}

Test(grammar, rollback_restores_masks_and_done) {
    gr_grammar *g = lists();
    toyvocab tv = toy("[]1,-");
    int32_t eog = tv.n - 1;
    gr_vocab *v;
    cr_assert_eq(gr_vocab_new(tv.n, (const char *const *)tv.tok, tv.len, &eog, 1, &v, NULL), CN_STATUS_OK);
    gr_matcher *m;
    cr_assert_eq(gr_matcher_new(g, v, &m, NULL), CN_STATUS_OK);
    size_t nw = ((size_t)tv.n + 31) / 32;
    uint32_t *m0 = calloc(nw, 4), *m1 = calloc(nw, 4);
    cr_assert(gr_matcher_accept_bytes(m, (const uint8_t *)"[1,", 3));
    cr_assert_eq(gr_matcher_mask(m, m0, NULL), CN_STATUS_OK);
    cr_assert(gr_matcher_accept_bytes(m, (const uint8_t *)"[-2", 3));
    cr_assert(gr_matcher_accept_bytes(m, (const uint8_t *)"]]", 2));
    cr_assert(gr_matcher_is_complete(m));
    cr_assert(gr_matcher_is_done(m));
    cr_assert(!gr_matcher_accept_bytes(m, (const uint8_t *)",", 1));
    cr_assert(gr_matcher_accept(m, eog));
    cr_assert_eq(gr_matcher_n_steps(m), 4);
    cr_assert_eq(gr_matcher_rollback(m, 3, NULL), CN_STATUS_OK);
    cr_assert(!gr_matcher_is_complete(m));
    cr_assert_eq(gr_matcher_mask(m, m1, NULL), CN_STATUS_OK);
    cr_assert_eq(memcmp(m0, m1, nw * 4), 0);
    cn_error err = {0};
    cr_assert_eq(gr_matcher_rollback(m, 2, &err), CN_STATUS_INVALID_ARG);
    /* a bare number is complete but not done: more digits may follow */
    gr_matcher_reset(m);
    cr_assert(gr_matcher_accept_bytes(m, (const uint8_t *)"12", 2));
    cr_assert(gr_matcher_is_complete(m));
    cr_assert(!gr_matcher_is_done(m));
    free(m0);
    free(m1);
    gr_matcher_free(m);
    gr_vocab_free(v);
    toy_free(&tv);
    gr_grammar_free(g);
}

/* Long bounded repeats are cut into chunk rules (builder.c); forced here to chunks of 3
 * items so that every count crosses chunk borders. Truth: the count of items, decoded by
 * hand from the text ("a" and "bc" are the items), against {min,max}. */
static gr_grammar *chunked(uint32_t min, uint32_t max, bool tail_c) {
    gr_builder *b = gr_builder_new();
    b->repeat_chunk_at = 1;
    b->repeat_chunk_k = 3;
    int32_t r = gr_rule(b, "root");
    int32_t item = gr_alt2(b, gr_literal(b, "a", 1), gr_literal(b, "bc", 2));
    int32_t body = gr_repeat(b, item, min, max);
    if (tail_c) body = gr_seq2(b, body, gr_literal(b, "c", 1));
    gr_rule_define(b, r, body);
    return compile_ok(b, r);
}

Test(grammar, chunked_repeats_count_exactly) {
    const uint32_t bounds[][2] = {{0, 0}, {0, 1}, {0, 2}, {0, 3},  {0, 4}, {0, 5},  {0, 6},      {0, 7},     {1, 7},
                                  {2, 9}, {3, 3}, {4, 4}, {5, 11}, {6, 6}, {7, 12}, {0, GR_INF}, {4, GR_INF}};
    for (size_t t = 0; t < sizeof bounds / sizeof *bounds; t++) {
        uint32_t lo = bounds[t][0], hi = bounds[t][1];
        gr_grammar *g = chunked(lo, hi, false);
        char s[64];
        /* every sequence of up to 13 items, as a bit pattern: bit i set = "bc" */
        for (uint32_t n = 0; n <= 13; n++)
            for (uint32_t bits = 0; bits < (1u << n); bits += 1 + (n > 9) * 7) {
                size_t len = 0;
                for (uint32_t i = 0; i < n; i++) {
                    if ((bits >> i) & 1) {
                        s[len++] = 'b';
                        s[len++] = 'c';
                    } else s[len++] = 'a';
                }
                bool want = n >= lo && n <= hi;
                cr_assert_eq(gr_matches(g, s, len), want, "{%u,%u} '%.*s' (%u items)", lo, hi, (int)len, s, n);
            }
        gr_grammar_free(g);
    }
}

Test(grammar, masks_equal_brute_force_chunked_repeats) {
    toyvocab tv = toy("abc");
    gr_grammar *g = chunked(2, 10, true);
    check_masks_along_random_walks(g, &tv, tv.n - 1, 30, 10);
    gr_grammar_free(g);
    g = chunked(0, 17, false);
    check_masks_along_random_walks(g, &tv, tv.n - 1, 30, 10);
    gr_grammar_free(g);
    toy_free(&tv);
}

/* JSON Schema text through every walk path: the slice (string interiors and property
 * names take every plain text token at once, walk.c), its length bound (a maxLength
 * string near its end), escapes out of strings, merged states (minimize), masks from
 * parents copied into the walks' pda, and the walk automaton kept to its path when its
 * state budget is tiny. The vocabulary mixes plain text with quotes, backslashes,
 * multi-byte and partial UTF-8, and slice-like tokens past the slice's length bound. */
static toyvocab json_vocab(void) {
    toyvocab v = toy("\"\\{}:, ab1");
    const char *extra[] = {"name",
                           "nam",
                           "e\"",
                           "\": \"",
                           "é",
                           "中文",
                           "😀",
                           "\xC3",
                           "\xA9",
                           "\xE4\xB8",
                           "\xAD",
                           "aaaaaaaaaaaaaaaaaaaaaaaa",
                           "abababababababababab\"",
                           " \"name\": \"",
                           "\\u00e9",
                           "\\n",
                           "ab\\",
                           "\x7F",
                           "\t",
                           "\"}",
                           "\"},",
                           "null",
                           "true",
                           "12",
                           "-3",
                           "e5",
                           ".5",
                           "aaaaaaaaaaaaa",
                           "bbbbbbbbbbbbbb",
                           "ab ab ab ab ab",
                           "abababababababab",
                           "中中中中中",
                           "é1é1é1é1é1é",
                           "aaaaaaaaaaaaaaaaa"};
    size_t ne = sizeof extra / sizeof *extra;
    char **t = realloc(v.tok, (v.n + ne + 1) * sizeof *t);
    size_t *l = realloc(v.len, (v.n + ne + 1) * sizeof *l);
    cr_assert(t && l);
    v.tok = t;
    v.len = l;
    /* the control token stays last (the EOG id the checks use) */
    char *ctl = v.tok[v.n - 1];
    size_t ctl_len = v.len[v.n - 1];
    for (size_t i = 0; i < ne; i++) {
        v.tok[v.n - 1 + i] = strdup(extra[i]);
        v.len[v.n - 1 + i] = strlen(extra[i]);
    }
    v.n += (int32_t)ne;
    v.tok[v.n - 1] = ctl;
    v.len[v.n - 1] = ctl_len;
    return v;
}

static gr_grammar *schema_grammar(const char *schema) {
    gr_builder *b = gr_builder_new();
    int32_t root = gr_json_schema(b, schema, strlen(schema), true);
    cr_assert_geq(root, 0, "%s", gr_builder_error(b)->msg);
    return compile_ok(b, root);
}

Test(grammar, masks_equal_brute_force_json_strings) {
    const char *schema =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
        "\"nab\": {\"type\": \"string\", \"maxLength\": 5}, \"a1\": {\"type\": \"integer\"}}, "
        "\"required\": [\"name\"], \"additionalProperties\": {\"type\": \"string\", \"maxLength\": 20}}";
    toyvocab tv = json_vocab();
    gr_grammar *g = schema_grammar(schema);
    check_masks_along_random_walks(g, &tv, tv.n - 1, 60, 24);
    gr_grammar_free(g);
    /* strings alone, long and bounded: whole walks inside a string */
    g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"string\", \"maxLength\": 18}}");
    check_masks_along_random_walks(g, &tv, tv.n - 1, 40, 24);
    gr_grammar_free(g);
    toy_free(&tv);
}

Test(grammar, masks_equal_brute_force_tiny_walk_budget) {
    toyvocab tv = json_vocab();
    gr_grammar *g = schema_grammar("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
                                   "\"ab\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}}}");
    walk_states_for_tests = 3;
    check_masks_along_random_walks(g, &tv, tv.n - 1, 30, 24);
    walk_states_for_tests = 0;
    gr_grammar_free(g);
    toy_free(&tv);
}

/* Intersections and complements (compile.c lays the operands' product DFA into the
 * rule), against direct checkers on every string over "abc" up to length 7. */
static bool even_ab(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == 'c') return false;
    return n % 2 == 0;
}

static bool a_star_b(const char *s, size_t n) {
    if (n == 0 || s[n - 1] != 'b') return false;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] != 'a') return false;
    return true;
}

static bool no_c_not_a_star_b_len_2_5(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] == 'c') return false;
    return !a_star_b(s, n) && n >= 2 && n <= 5;
}

static void check_all_strings(gr_grammar *g, bool (*want)(const char *, size_t), const char *what) {
    char s[8];
    int n_yes = 0;
    for (size_t len = 0; len <= 7; len++) {
        long total = 1;
        for (size_t i = 0; i < len; i++) total *= 3;
        for (long x = 0; x < total; x++) {
            long y = x;
            for (size_t i = 0; i < len; i++, y /= 3) s[i] = "abc"[y % 3];
            bool w = want(s, len);
            n_yes += w;
            cr_assert_eq(gr_matches(g, s, len), w, "%s: '%.*s' want %d", what, (int)len, s, w);
        }
    }
    cr_assert_gt(n_yes, 3, "%s", what);
}

Test(grammar, intersections_and_complements) {
    gr_builder *b = gr_builder_new();
    int32_t r = gr_rule(b, "root");
    int32_t ab = gr_byte_range(b, 'a', 'b');
    int32_t two = gr_repeat(b, gr_seq2(b, gr_byte_range(b, 'a', 'c'), gr_byte_range(b, 'a', 'c')), 0, GR_INF);
    gr_rule_define(b, r, gr_and(b, gr_repeat(b, ab, 0, GR_INF), two));
    gr_grammar *g = compile_ok(b, r);
    check_all_strings(g, even_ab, "[ab]* & (..)*");
    gr_grammar_free(g);

    /* [ab]{2,5} minus a*b, as NOT nested in AND, inside a sequence */
    b = gr_builder_new();
    r = gr_rule(b, "root");
    int32_t astar_b = gr_seq2(b, gr_repeat(b, gr_literal(b, "a", 1), 0, GR_INF), gr_literal(b, "b", 1));
    int32_t inner = gr_and(b, gr_repeat(b, gr_byte_range(b, 'a', 'b'), 2, 5), gr_not(b, astar_b));
    gr_rule_define(b, r, gr_seq2(b, inner, gr_empty(b)));
    g = compile_ok(b, r);
    check_all_strings(g, no_c_not_a_star_b_len_2_5, "[ab]{2,5} & !(a*b)");
    gr_grammar_free(g);

    /* an operand that calls a rule is refused, naming it */
    b = gr_builder_new();
    r = gr_rule(b, "root");
    int32_t leaf = gr_rule(b, "leaf");
    gr_rule_define(b, leaf, gr_literal(b, "a", 1));
    gr_rule_define(b, r, gr_and(b, gr_ref(b, leaf), gr_literal(b, "a", 1)));
    compile_fails(b, r, "cannot call a rule ('leaf')");
}

Test(grammar, masks_equal_brute_force_intersections) {
    /* a leaf rule made of an intersection, called from a list: masks through the product */
    gr_builder *b = gr_builder_new();
    int32_t val = gr_rule(b, "value"), word = gr_rule(b, "word");
    int32_t body = gr_and(b, gr_repeat(b, gr_byte_range(b, 'a', 'c'), 1, 6), gr_not(b, gr_literal(b, "abc", 3)));
    gr_rule_define(b, word, body);
    int32_t more = gr_repeat(b, gr_seq2(b, gr_literal(b, ",", 1), gr_ref(b, word)), 0, GR_INF);
    gr_rule_define(b, val,
                   gr_seq(b, (int32_t[]){gr_literal(b, "[", 1), gr_ref(b, word), more, gr_literal(b, "]", 1)}, 4));
    gr_grammar *g = compile_ok(b, val);
    toyvocab tv = toy("abc,[]");
    check_masks_along_random_walks(g, &tv, tv.n - 1, 30, 12);
    toy_free(&tv);
    gr_grammar_free(g);
}

/* Minimization (compile.c, Hopcroft): rule DFAs have the textbook minimal state counts
 * (no dead state: prune removed it), and the languages are unchanged (the byte-level
 * checks above run on minimized automata). */
static uint32_t states_of(const char *re) {
    gr_builder *b = gr_builder_new();
    int32_t r = gr_rule(b, "root");
    gr_rule_define(b, r, gr_regex_expr(b, re, strlen(re)));
    gr_grammar *g = compile_ok(b, r);
    uint32_t n = g->rules[g->root].n_states;
    gr_grammar_free(g);
    return n;
}

Test(grammar, minimized_state_counts) {
    cr_assert_eq(states_of("xab|yab|zab"), 4); /* start, mid, after a, accept */
    cr_assert_eq(states_of("(a|b)*abb"), 4);   /* the dragon book's example */
    cr_assert_eq(states_of("a*|aa*"), 1);
    cr_assert_eq(states_of("(a|b)*a(a|b)"), 4); /* the second-to-last byte is a */
    cr_assert_eq(states_of("(ab|ab)(c|c)(dd|d{2})"), 6);
    /* a call is a symbol: the same call to the same return merges, another return does not */
    gr_builder *b = gr_builder_new();
    int32_t r = gr_rule(b, "root"), q = gr_rule(b, "q");
    gr_rule_define(b, q, gr_literal(b, "q", 1));
    int32_t x = gr_seq(b, (int32_t[]){gr_literal(b, "x", 1), gr_ref(b, q), gr_literal(b, "!", 1)}, 3);
    int32_t y = gr_seq(b, (int32_t[]){gr_literal(b, "y", 1), gr_ref(b, q), gr_literal(b, "!", 1)}, 3);
    int32_t z = gr_seq(b, (int32_t[]){gr_literal(b, "z", 1), gr_ref(b, q), gr_literal(b, "?", 1)}, 3);
    gr_rule_define(b, r, gr_alt(b, (int32_t[]){x, y, z}, 3));
    gr_grammar *g = compile_ok(b, r);
    /* start; after x|y; after z; after x|y q; after z q; accept */
    cr_assert_eq(g->rules[g->root].n_states, 6);
    const char *yes[] = {"xq!", "yq!", "zq?"}, *no[] = {"xq?", "zq!", "q!", "xq"};
    for (int i = 0; i < 3; i++) cr_assert(gr_matches(g, yes[i], 3), "%s", yes[i]);
    for (int i = 0; i < 4; i++) cr_assert(!gr_matches(g, no[i], strlen(no[i])), "%s", no[i]);
    gr_grammar_free(g);
}

/* The tool-call grammar (tools.c): free text inline in the root (any text without the
 * trigger), calls after it; and a required call from the first byte. */
Test(grammar, masks_equal_brute_force_tool_calls) {
    toyvocab tv = json_vocab();
    const char *extra[] = {"<tool_call>",      "</tool_call>",  "<tool",    "_call>",  "</",
                           "\"name\"",         "\"arguments\"", "ab\"",     "\": {\"", "\n",
                           "<tool_call>\n{\"", "ping",          "\"ping\"", "call>",   "<"};
    size_t ne = sizeof extra / sizeof *extra;
    tv.tok = realloc(tv.tok, (tv.n + ne) * sizeof *tv.tok);
    tv.len = realloc(tv.len, (tv.n + ne) * sizeof *tv.len);
    char *ctl = tv.tok[tv.n - 1];
    size_t ctl_len = tv.len[tv.n - 1];
    for (size_t i = 0; i < ne; i++) {
        tv.tok[tv.n - 1 + i] = strdup(extra[i]);
        tv.len[tv.n - 1 + i] = strlen(extra[i]);
    }
    tv.n += (int32_t)ne;
    tv.tok[tv.n - 1] = ctl;
    tv.len[tv.n - 1] = ctl_len;
    const char *tools =
        "[{\"type\": \"function\", \"function\": {\"name\": \"ab\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"a\": {\"type\": \"string\", \"maxLength\": 3}, \"b\": {\"type\": \"integer\"}}}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]";
    for (int choice = 0; choice < 2; choice++) {
        gr_builder *b = gr_builder_new();
        int32_t root = gr_tools(b, CN_TOOL_FORMAT_HERMES, tools, strlen(tools), choice, NULL, true);
        cr_assert_geq(root, 0, "%s", gr_builder_error(b)->msg);
        gr_grammar *g = compile_ok(b, root);
        check_masks_along_random_walks(g, &tv, tv.n - 1, 40, 30);
        gr_grammar_free(g);
    }
    toy_free(&tv);
}

/* A grammar whose parse stacks multiply with each byte (a nullable rule repeated under a
 * recursion): within 64 bytes either a byte is refused or a mask fails with LIMIT and a
 * message naming the ambiguity, in well under the minutes it took before the limit; the
 * matcher then works again after a reset. */
Test(grammar_mask, ambiguity_limit_is_an_error_not_a_hang, .timeout = 120) {
    const char *src = "root ::= [a-z] root? x{600}\nx ::= [a-z] | \"\"";
    gr_builder *b = gr_builder_new();
    const int32_t root = gr_gbnf(b, src, strlen(src), "root");
    gr_grammar *g = NULL;
    cn_error err = {0};
    cr_assert_eq(gr_compile(b, root, NULL, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gr_builder_free(b);
    toyvocab tv = toy("ab");
    int32_t eog = tv.n - 1;
    gr_vocab *v;
    cr_assert_eq(gr_vocab_new(tv.n, (const char *const *)tv.tok, tv.len, &eog, 1, &v, NULL), CN_STATUS_OK);
    gr_matcher *m;
    cr_assert_eq(gr_matcher_new(g, v, &m, NULL), CN_STATUS_OK);
    uint32_t *mask = calloc(((size_t)tv.n + 31) / 32, 4);
    int i = 0;
    bool limited = false;
    for (; i < 64; i++) {
        const cn_status st = gr_matcher_mask(m, mask, &err);
        if (st != CN_STATUS_OK) {
            cr_assert_eq(st, CN_STATUS_LIMIT, "%s", err.msg);
            cr_assert(strstr(err.msg, "too ambiguous"), "%s", err.msg);
            limited = true;
            break;
        }
        if (!gr_matcher_accept_bytes(m, (const uint8_t *)"a", 1)) break;
    }
    cr_assert(limited || i < 64, "64 bytes went by with no limit");
    cr_assert_gt(i, 0, "the first byte is taken");
    gr_matcher_reset(m);
    cr_assert_eq(gr_matcher_mask(m, mask, &err), CN_STATUS_OK, "%s", err.msg);
    free(mask);
    gr_matcher_free(m);
    gr_vocab_free(v);
    toy_free(&tv);
    gr_grammar_free(g);
}
