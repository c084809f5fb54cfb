/* test_regex.c — the regex front end (src/grammar/regex.c) against PCRE2, the independent
 * truth: the pattern compiled by PCRE2 in UTF mode with the options that make it speak
 * ECMAScript where the two differ (ALT_BSUX for \uHHHH and \xHH, ALLOW_EMPTY_CLASS for []
 * and [^], DOLLAR_ENDONLY so $ is the very end), matched anchored at both ends; each
 * pattern's verdicts compared with gr_matches on many strings: random strings over the
 * pattern's own characters plus a few others, strings our machine accepted (random walks
 * through gr_state, so positives are common) and their mutations. Patterns: hand-picked
 * ones for each feature, every pattern of the maskbench JSON Schemas, and random patterns
 * with anchors anywhere (checked on every short string). The JSON-string search mode
 * (gr_regex_expr_unanchored) against PCRE2's unanchored search on the decoded value, the
 * value spelled by jansson's encoder. Plus the errors (each names the construct and the
 * offset) and the budget on huge repeats. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"
#include "test_regex_patterns.h"

/* ---- helpers ---- */

static gr_grammar *rx_compile(const char *re, bool json, cn_error *err) {
    gr_builder *b = gr_builder_new();
    cr_assert_not_null(b);
    int32_t root = gr_rule(b, "root");
    int32_t e = json ? gr_regex_expr_unanchored(b, re, strlen(re)) : gr_regex_expr(b, re, strlen(re));
    gr_rule_define(b, root, e);
    gr_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    gr_limits lim = {.max_states = 200000, .max_compile_ms = 5000};
    cn_status st = gr_compile(b, root, &lim, &g, err);
    gr_builder_free(b);
    if (st != CN_STATUS_OK) return NULL;
    return g;
}

/* The pattern compiled; NULL when its language is empty (compile refuses a grammar that
 * matches no text: then every verdict is "no"). */
static gr_grammar *rx_compile_or_empty(const char *re) {
    cn_error err;
    gr_grammar *g = rx_compile(re, false, &err);
    cr_assert(g || strstr(err.msg, "matches no text"), "pattern /%s/: %s", re, err.msg);
    return g;
}

static pcre2_code *pc_compile(const char *re, bool anchored) {
    char *wrapped = malloc(strlen(re) + 8);
    sprintf(wrapped, "(?:%s)", re);
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_DOLLAR_ENDONLY;
    if (anchored) opt |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED, opt, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!c) {
        PCRE2_UCHAR msg[200];
        pcre2_get_error_message(ec, msg, sizeof msg);
        cr_assert_fail("PCRE2 refuses %s: %s", wrapped, (char *)msg);
    }
    free(wrapped);
    return c;
}

static bool pc_match(pcre2_code *c, const char *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match failed (%d)", rc);
    return rc >= 0;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* An alphabet: UTF-8 pieces, one character each. */
typedef struct {
    char c[64][5];
    int n;
} alpha;

static void alpha_add(alpha *a, const char *u, size_t len) {
    for (int i = 0; i < a->n; i++)
        if (strlen(a->c[i]) == len && !memcmp(a->c[i], u, len)) return;
    if (a->n == 64) return;
    memcpy(a->c[a->n], u, len);
    a->c[a->n][len] = 0;
    a->n++;
}

/* The characters the pattern spells literally, plus ones most patterns treat specially. */
static void alpha_of(alpha *a, const char *re, const char *extra) {
    a->n = 0;
    const char *sets[2] = {extra, re};
    for (int k = 0; k < 2; k++)
        for (const char *s = sets[k]; *s;) {
            unsigned c = (unsigned char)*s;
            size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            if (k == 1 && (c == '\\' || c == '(' || c == ')' || c == '|' || c == '*' || c == '+' || c == '?' ||
                           c == '^' || c == '$')) {
                s++;
                continue;
            }
            alpha_add(a, s, len);
            s += len;
        }
}

typedef struct {
    int ix[40];
    int n;
} word;

static size_t word_text(const alpha *a, const word *w, char *out) {
    size_t n = 0;
    for (int i = 0; i < w->n; i++) {
        size_t l = strlen(a->c[w->ix[i]]);
        memcpy(out + n, a->c[w->ix[i]], l);
        n += l;
    }
    out[n] = 0;
    return n;
}

typedef struct {
    long n, pos, mism;
} tally;

static void compare(const char *re, gr_grammar *g, pcre2_code *pc, const char *s, size_t n, tally *t) {
    bool want = pc_match(pc, s, n), got = g && gr_matches(g, s, n);
    t->n++;
    t->pos += want;
    if (want != got) {
        t->mism++;
        cr_log_error("pattern /%s/ on \"%.*s\": PCRE2 says %d, gr_matches %d", re, (int)n, s, want, got);
    }
}

/* A random walk our machine allows (the verdict still comes from PCRE2). */
static void walk(const alpha *a, gr_grammar *g, word *w) {
    gr_state *st = gr_state_new(g);
    cr_assert_not_null(st);
    w->n = 0;
    for (int step = 0; step < 200 && w->n < 30; step++) {
        if (gr_state_can_end(st) && rnd(4) == 0) break;
        int k = (int)rnd((uint32_t)a->n);
        if (gr_state_feed(st, (const uint8_t *)a->c[k], strlen(a->c[k]))) w->ix[w->n++] = k;
    }
    gr_state_free(st);
}

static void mutate(const alpha *a, word *w) {
    int op = (int)rnd(4);
    if (op == 0 && w->n > 0) {
        int at = (int)rnd((uint32_t)w->n);
        memmove(w->ix + at, w->ix + at + 1, (size_t)(w->n - at - 1) * sizeof *w->ix);
        w->n--;
    } else if (op == 1 && w->n < 39) {
        int at = (int)rnd((uint32_t)w->n + 1);
        memmove(w->ix + at + 1, w->ix + at, (size_t)(w->n - at) * sizeof *w->ix);
        w->ix[at] = (int)rnd((uint32_t)a->n);
        w->n++;
    } else if (op == 2 && w->n > 0) {
        w->ix[rnd((uint32_t)w->n)] = (int)rnd((uint32_t)a->n);
    } else if (w->n > 0 && w->n < 20) {
        int at = (int)rnd((uint32_t)w->n), len = 1 + (int)rnd((uint32_t)(w->n - at));
        for (int i = 0; i < len && w->n < 39; i++) w->ix[w->n++] = w->ix[at + i];
    }
}

static const char *extra_chars = "aZ09_- \n\t./@:é中😀";

/* Full-match differential for one pattern; returns the tally. */
static tally diff_full(const char *re, int n_random, int n_walks) {
    gr_grammar *g = rx_compile_or_empty(re);
    pcre2_code *pc = pc_compile(re, true);
    alpha a;
    alpha_of(&a, re, extra_chars);
    tally t = {0};
    char buf[256];
    word w;
    for (int i = 0; i < n_random; i++) {
        w.n = (int)rnd(12);
        for (int k = 0; k < w.n; k++) w.ix[k] = (int)rnd((uint32_t)a.n);
        size_t n = word_text(&a, &w, buf);
        compare(re, g, pc, buf, n, &t);
    }
    for (int i = 0; g && i < n_walks; i++) {
        walk(&a, g, &w);
        size_t n = word_text(&a, &w, buf);
        compare(re, g, pc, buf, n, &t);
        for (int m = 0; m < 6; m++) {
            word v = w;
            mutate(&a, &v);
            if (m & 1) mutate(&a, &v);
            n = word_text(&a, &v, buf);
            compare(re, g, pc, buf, n, &t);
        }
    }
    pcre2_code_free(pc);
    gr_grammar_free(g);
    return t;
}

/* ---- full match against PCRE2 ---- */

static const char *const feature_patterns[] = {
    "abc",
    "a|b|",
    "(ab|cd)*e?",
    "a+b*c?",
    "a{3}",
    "a{2,}b",
    "a{1,3}b{0,2}",
    "(?:ab){2,4}",
    "a*?b+?c??d{1,2}?",
    "[a-c]x[^a-c]",
    "[-a]|[a-]|[a\\-z]",
    "[\\d\\s]+",
    "\\w+\\W\\w*",
    "\\D\\S",
    "[^\\d]*",
    "[\\w.-]+@[\\w-]+\\.[a-z]{2,}",
    ".",
    ".*",
    ".+\n?",
    "[.]\\.",
    "\\/\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\",
    "\\t\\n\\r\\f",
    "\\x41\\u0042\\u{43}",
    "\\u00e9|\\u4e2d",
    "[\\u0041-\\u005A]+",
    "[é-ü]+",
    "中文?",
    "😀+",
    "[😀-😂]",
    "(?<year>\\d{4})-(?<m>\\d{2})",
    "(?P<x>a)b",
    "((a)|(b))+",
    "()",
    "(|a)b",
    "a{",
    "a{1",
    "a{x}",
    "x{2,3",
    "}",
    "]",
    "[]",
    "[^]",
    "a[]b|c",
    "[^]a",
    "\\cJ",
    "\\0",
    "[\\b]",
    "^abc$",
    "^a|b$",
    "^(a|b)$",
    "a^b",
    "a$b",
    "(a|$)+",
    "(a$|b)c?",
    "(^a|b)+",
    "(^)*a",
    "($|a)*",
    "x(^|a)y",
    "(a|^b)(c|$)",
    "^$",
    "$^",
    "^^a$$",
    "(?:^a)?b",
    "((^a)?(b$)?)*",
    "[\\^$.|?*+()]",
    "[a-a]",
    "[\\]]",
    "[\\-]",
    "a||b",
    "(a|)+",
    "(a*)*",
    "(a|b)*a(a|b){3}",
    "[0-9]{1,3}(\\.[0-9]{1,3}){3}",
    "\\s",
    "[\\S\\s]",
    "[\\W\\d]",
    "[^\\W]",
};

Test(grammar_regex, features_agree_with_pcre2) {
    long n = 0, pos = 0, mism = 0;
    for (size_t i = 0; i < sizeof feature_patterns / sizeof feature_patterns[0]; i++) {
        tally t = diff_full(feature_patterns[i], 300, 60);
        n += t.n;
        pos += t.pos;
        mism += t.mism;
    }
    cr_log_info("feature patterns: %ld strings, %ld matching, %ld disagreements", n, pos, mism);
    cr_assert_eq(mism, 0, "%ld disagreements with PCRE2 (logged above)", mism);
    cr_assert_gt(pos, n / 5, "too few matching strings (%ld of %ld): the test checks little", pos, n);
}

Test(grammar_regex, maskbench_patterns_agree_with_pcre2, .timeout = 300) {
    long n = 0, pos = 0, mism = 0;
    size_t n_pat = sizeof maskbench_patterns / sizeof maskbench_patterns[0];
    for (size_t i = 0; i < n_pat; i++) {
        tally t = diff_full(maskbench_patterns[i], 100, 40);
        n += t.n;
        pos += t.pos;
        mism += t.mism;
    }
    cr_log_info("%zu maskbench patterns: %ld strings, %ld matching, %ld disagreements", n_pat, n, pos, mism);
    cr_assert_eq(mism, 0, "%ld disagreements with PCRE2 (logged above)", mism);
    cr_assert_gt(pos, n / 10);
}

/* Random patterns over a, b with groups, classes, quantifiers and anchors anywhere; each
 * on every string over {a, b, c} up to length 6. */
static void gen_re(char *o, size_t *n, int depth) {
    int k = (int)rnd(depth > 2 ? 5 : 10);
    switch (k) {
    case 0: o[(*n)++] = 'a'; break;
    case 1: o[(*n)++] = 'b'; break;
    case 2: o[(*n)++] = "^$"[rnd(2)]; break;
    case 3:
        memcpy(o + *n, "[ab]", 4);
        *n += 4;
        break;
    case 4: o[(*n)++] = '.'; break;
    case 5:
    case 6:
        gen_re(o, n, depth + 1);
        gen_re(o, n, depth + 1);
        break;
    case 7:
        o[(*n)++] = '(';
        gen_re(o, n, depth + 1);
        o[(*n)++] = '|';
        gen_re(o, n, depth + 1);
        o[(*n)++] = ')';
        break;
    default: {
        o[(*n)++] = '(';
        gen_re(o, n, depth + 1);
        o[(*n)++] = ')';
        static const char *q[] = {"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0}"};
        const char *s = q[rnd(8)];
        memcpy(o + *n, s, strlen(s));
        *n += strlen(s);
        break;
    }
    }
}

Test(grammar_regex, random_patterns_with_anchors_agree_with_pcre2, .timeout = 300) {
    long mism = 0, pos = 0, total = 0;
    for (int r = 0; r < 400; r++) {
        char re[512];
        size_t n = 0;
        gen_re(re, &n, 0);
        re[n] = 0;
        gr_grammar *g = rx_compile_or_empty(re);
        pcre2_code *pc = pc_compile(re, true);
        char s[8];
        for (int len = 0; len <= 6; len++) {
            int lim = 1;
            for (int i = 0; i < len; i++) lim *= 3;
            for (int x = 0; x < lim; x++) {
                int y = x;
                for (int i = 0; i < len; i++, y /= 3) s[i] = "abc"[y % 3];
                tally t = {0};
                compare(re, g, pc, s, (size_t)len, &t);
                mism += t.mism;
                pos += t.pos;
                total++;
            }
        }
        pcre2_code_free(pc);
        gr_grammar_free(g);
    }
    cr_log_info("random patterns: %ld strings, %ld matching, %ld disagreements", total, pos, mism);
    cr_assert_eq(mism, 0);
    cr_assert_gt(pos, total / 50);
}

/* ---- hand-worked: where ECMAScript is the truth and PCRE2 differs ---- */

static bool full(const char *re, const char *s, size_t n) {
    cn_error err;
    gr_grammar *g = rx_compile(re, false, &err);
    cr_assert_not_null(g, "pattern /%s/: %s", re, err.msg);
    bool r = gr_matches(g, s, n);
    gr_grammar_free(g);
    return r;
}
#define FULL(re, s) full(re, s, sizeof(s) - 1)

Test(grammar_regex, ecmascript_specifics) {
    cr_assert(FULL("\\v", "\x0b")); /* ECMAScript \v is U+000B (PCRE: a class) */
    cr_assert(!FULL("\\v", "\n"));
    cr_assert(FULL("\\s", "\xc2\xa0"));      /* U+00A0 is ECMAScript whitespace */
    cr_assert(FULL("\\s", "\xe3\x80\x80"));  /* U+3000 */
    cr_assert(FULL("\\s", "\xef\xbb\xbf"));  /* U+FEFF */
    cr_assert(!FULL("\\S", "\xe2\x80\xa8")); /* U+2028 */
    cr_assert(!FULL("\\w", "\xc3\xa9"));     /* \w is ASCII: not é */
    cr_assert(!FULL("\\d", "\xd9\xa3"));     /* \d is ASCII: not Arabic-Indic 3 */
    cr_assert(FULL("\\x{1F600}", "\xf0\x9f\x98\x80"));
    cr_assert(FULL("\\uD83D\\uDE00", "\xf0\x9f\x98\x80")); /* a surrogate pair is one character */
    cr_assert(FULL("[^a]", "\xf4\x8f\xbf\xbf"));           /* U+10FFFF */
    cr_assert(!FULL(".", "\n"));
    cr_assert(FULL(".", "\r"));            /* the layer's choice: only \n (grammar.h) */
    cr_assert(!FULL(".", "\xed\xa0\x80")); /* an encoded surrogate is no character */
    cr_assert(!FULL(".", "\xff"));
    cr_assert(FULL("\\cA\\ca", "\x01\x01"));
    cr_assert(FULL("\\0", "\0"));
    cr_assert(FULL("a{,5}", "a{,5}"));         /* ECMAScript: not a quantifier */
    cr_assert_null(rx_compile_or_empty("[]")); /* ECMAScript: the empty class */
    cr_assert_null(rx_compile_or_empty("a^b"));
    cr_assert(FULL("a{1,10000}", "aaaa"));
}

/* ---- JSON-string search mode ---- */

static gr_grammar *json_re(const char *re) {
    cn_error err;
    gr_grammar *g = rx_compile(re, true, &err);
    cr_assert_not_null(g, "pattern /%s/: %s", re, err.msg);
    return g;
}
#define JM(g, s) gr_matches(g, s, sizeof(s) - 1)

Test(grammar_regex, json_spelling_hand_worked) {
    gr_grammar *g = json_re("^a\"b$");
    cr_assert(JM(g, "a\\\"b"));
    cr_assert(JM(g, "a\\u0022b"));
    cr_assert(!JM(g, "a\"b")); /* a bare quote would end the JSON string */
    cr_assert(!JM(g, "a\\\\\"b"));
    gr_grammar_free(g);
    g = json_re("^\\\\$");
    cr_assert(JM(g, "\\\\"));
    cr_assert(JM(g, "\\u005c"));
    cr_assert(JM(g, "\\u005C"));
    cr_assert(!JM(g, "\\"));
    gr_grammar_free(g);
    g = json_re("^x\\ny\\t\\u0001$");
    cr_assert(JM(g, "x\\ny\\t\\u0001"));
    cr_assert(JM(g, "x\\u000Ay\\u0009\\u0001"));
    cr_assert(!JM(g, "x\ny\t\\u0001")); /* raw controls are not JSON */
    cr_assert(!JM(g, "x\\ny\\t\x01"));
    gr_grammar_free(g);
    g = json_re("^[^a]$");
    cr_assert(JM(g, "\\\""));
    cr_assert(JM(g, "\\n"));
    cr_assert(JM(g, "\\u001f"));
    cr_assert(JM(g, "\xc3\xa9"));
    cr_assert(!JM(g, "\""));
    cr_assert(!JM(g, "\\"));
    cr_assert(!JM(g, "a"));
    cr_assert(!JM(g, "\\u0061")); /* ordinary characters only raw: one spelling */
    gr_grammar_free(g);
    g = json_re("b"); /* search: anywhere, in any JSON string text */
    cr_assert(JM(g, "b"));
    cr_assert(JM(g, "a\\\"b\\n"));
    cr_assert(!JM(g, "a\\\"c"));
    cr_assert(!JM(g, "a\"b"));
    gr_grammar_free(g);
    g = json_re("^ab|cd$");
    cr_assert(JM(g, "abx"));
    cr_assert(JM(g, "xcd"));
    cr_assert(!JM(g, "xab"));
    cr_assert(!JM(g, "cdx"));
    gr_grammar_free(g);
}

/* The value's JSON spelling by jansson (without the quotes). */
static size_t json_spell(const char *s, size_t n, char *out) {
    json_t *j = json_stringn(s, n);
    cr_assert_not_null(j);
    char *d = json_dumps(j, JSON_ENCODE_ANY);
    size_t len = strlen(d);
    cr_assert(len >= 2 && d[0] == '"' && d[len - 1] == '"');
    memcpy(out, d + 1, len - 2);
    out[len - 2] = 0;
    free(d);
    json_decref(j);
    return len - 2;
}

static const char *const search_patterns[] = {
    "a",   "^a",     "a$",      "^a$",    "\"", "\\\\", "\\n",         "^[^\"]*$",  "[\\x00-\\x1f]", "^\\s*$",
    "a.b", "^.{3}$", "(^x|y$)", "\\d{2}", "^$", "",     "^\"?\\\\\"$", "[\"\\\\]+", "^(a|\\n)+$",
};

Test(grammar_regex, json_search_agrees_with_pcre2_on_decoded_values) {
    long n = 0, pos = 0, mism = 0;
    for (size_t i = 0; i < sizeof search_patterns / sizeof search_patterns[0]; i++) {
        const char *re = search_patterns[i];
        gr_grammar *g = json_re(re);
        pcre2_code *pc = pc_compile(re, false);
        alpha a;
        alpha_of(&a, re, "ab\"\\\n\t\x01\x1f/x y1é");
        for (int k = 0; k < 800; k++) {
            word w;
            w.n = (int)rnd(8);
            for (int j = 0; j < w.n; j++) w.ix[j] = (int)rnd((uint32_t)a.n);
            char val[256], spelled[1024];
            size_t vn = word_text(&a, &w, val);
            size_t sn = json_spell(val, vn, spelled);
            bool want = pc_match(pc, val, vn), got = gr_matches(g, spelled, sn);
            n++;
            pos += want;
            if (want != got) {
                mism++;
                cr_log_error("pattern /%s/ on value spelled \"%s\": PCRE2 %d, ours %d", re, spelled, want, got);
            }
        }
        pcre2_code_free(pc);
        gr_grammar_free(g);
    }
    cr_log_info("search mode: %ld values, %ld matching, %ld disagreements", n, pos, mism);
    cr_assert_eq(mism, 0);
    cr_assert_gt(pos, n / 10);
}

/* ---- errors ---- */

static void expect_error(const char *re, const char *part, size_t offset) {
    gr_builder *b = gr_builder_new();
    int32_t e = gr_regex_expr(b, re, strlen(re));
    cr_assert_lt(e, 0, "/%s/ should be refused", re);
    const cn_error *err = gr_builder_error(b);
    cr_assert_eq(err->status, CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err->msg, part), "/%s/: message \"%s\" lacks \"%s\"", re, err->msg, part);
    char off[32];
    snprintf(off, sizeof off, "offset %zu", offset);
    cr_assert(strstr(err->msg, off), "/%s/: message \"%s\" lacks \"%s\"", re, err->msg, off);
    gr_builder_free(b);
}

Test(grammar_regex, errors_name_the_construct_and_offset) {
    expect_error("(a)\\1", "backreference \\1", 3);
    expect_error("(?<n>a)\\k<n>", "backreference", 7);
    expect_error("a(?=b)", "lookahead", 1);
    expect_error("a(?!b)", "lookahead", 1);
    expect_error("(?<=a)b", "lookbehind", 0);
    expect_error("(?<!a)b", "lookbehind", 0);
    expect_error("\\bword", "word boundary", 0);
    expect_error("x\\B", "\\B", 1);
    expect_error("(?i)a", "inline flags", 0);
    expect_error("(?>a)", "atomic", 0);
    expect_error("a*+", "possessive", 2);
    expect_error("*a", "nothing to repeat", 0);
    expect_error("a|?", "nothing to repeat", 2);
    expect_error("a**", "nothing to repeat", 2);
    expect_error("{2}", "nothing to repeat", 0);
    expect_error("^*a", "assertion", 1);
    expect_error("a$?", "assertion", 2);
    expect_error("a{3,2}", "out of order", 1);
    expect_error("(ab", "missing ')'", 0);
    expect_error("ab)", "unmatched ')'", 2);
    expect_error("[ab", "missing ']'", 0);
    expect_error("[z-a]", "out of order", 1);
    expect_error("[a-\\d]", "range", 1);
    expect_error("\\p{L}", "property", 0);
    expect_error("\\q", "\\q", 0);
    expect_error("ab\\", "lone", 2);
    expect_error("\\uD800", "surrogate", 0);
    expect_error("\\u12", "four hex", 0);
    expect_error("\\x4", "two hex", 0);
    expect_error("[[:alpha:]]", "POSIX", 1);
    expect_error("a\xff", "UTF-8", 1);
    expect_error("a{99999999999}", "repeat count", 1);
    expect_error("\\012", "octal", 0);
}

Test(grammar_regex, deep_nesting_is_refused_not_a_crash) {
    char re[2100];
    for (int i = 0; i < 1000; i++) re[i] = '(';
    re[1000] = 'a';
    for (int i = 0; i < 1000; i++) re[1001 + i] = ')';
    re[2001] = 0;
    gr_builder *b = gr_builder_new();
    cr_assert_lt(gr_regex_expr(b, re, strlen(re)), 0);
    cr_assert(strstr(gr_builder_error(b)->msg, "nested"), "%s", gr_builder_error(b)->msg);
    gr_builder_free(b);
}

/* ---- budgets ---- */

Test(grammar_regex, huge_repeats_hit_the_compile_budget) {
    /* the second: the classic 2^21-state DFA (the 21st letter from the end is an a) */
    const char *res[] = {"(a{1,1000}){1,1000}", "(a|b)*a(a|b){20}", "(.*a){20}x.{1,30}"};
    for (size_t i = 0; i < 3; i++) {
        gr_builder *b = gr_builder_new();
        int32_t root = gr_rule(b, "root");
        gr_rule_define(b, root, gr_regex_expr(b, res[i], strlen(res[i])));
        gr_grammar *g = NULL;
        cn_error err = {0};
        gr_limits lim = {.max_states = 50000, .max_compile_ms = 3000};
        cn_status st = gr_compile(b, root, &lim, &g, &err);
        gr_builder_free(b);
        cr_assert_eq(st, CN_STATUS_INVALID_ARG, "/%s/ compiled (%s)", res[i], err.msg);
        cr_assert(strstr(err.msg, "compile budget"), "/%s/: %s", res[i], err.msg);
        cr_assert_null(g);
    }
}

/* A repeat of something that matches only the empty string is that empty string, however
 * large the count: the fuzzer's slow unit `(|$2){04(|$2){0444304430}` spent seconds
 * expanding half a billion copies of nothing before the budget's clock was read. */
Test(grammar_regex, repeat_of_empty_is_empty_whatever_the_count) {
    const char *res[] = {"x(|$2){4,444304430}y", "x((|$2){3,9}){99999,400000000}y", "x(){4000000}y"};
    for (size_t i = 0; i < 3; i++) {
        cn_error err;
        gr_grammar *g = rx_compile(res[i], false, &err);
        cr_assert_not_null(g, "/%s/: %s", res[i], err.msg);
        cr_assert(gr_matches(g, "xy", 2), "/%s/", res[i]);
        cr_assert(!gr_matches(g, "x2y", 3), "/%s/", res[i]);
        gr_grammar_free(g);
    }
}

Test(grammar_regex, long_literal_does_not_nest) {
    size_t n = 5000;
    char *re = malloc(n + 1);
    for (size_t i = 0; i < n; i++) re[i] = (char)('a' + i % 26);
    re[n] = 0;
    cn_error err;
    gr_grammar *g = rx_compile(re, false, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert(gr_matches(g, re, n));
    cr_assert(!gr_matches(g, re, n - 1));
    gr_grammar_free(g);
    free(re);
}
