/* test_gbnf.c — the GBNF front end (src/grammar/gbnf.c) and the choice front end
 * (choice.c). Truth: hand-worked strings for llama.cpp's documented example grammars
 * (arithmetic, list, chess) written from the documented syntax; a JSON grammar in GBNF
 * judged against jansson's parser on mutated JSON texts; random GBNF expressions judged
 * against PCRE2 on the same expression written as a regex, on every short string; and the
 * errors, each with its line and column. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"

static gr_grammar *gbnf_try(const char *src, cn_error *err) {
    gr_builder *b = gr_builder_new();
    cr_assert_not_null(b);
    int32_t root = gr_gbnf(b, src, strlen(src), "root");
    gr_grammar *g = NULL;
    memset(err, 0, sizeof *err);
    gr_limits lim = {.max_states = 200000, .max_compile_ms = 5000};
    cn_status st = gr_compile(b, root, &lim, &g, err);
    gr_builder_free(b);
    return st == CN_STATUS_OK ? g : NULL;
}

static gr_grammar *gbnf_ok(const char *src) {
    cn_error err;
    gr_grammar *g = gbnf_try(src, &err);
    cr_assert_not_null(g, "grammar refused: %s\n%s", err.msg, src);
    return g;
}

#define M(g, s) gr_matches(g, s, strlen(s))

static void must(gr_grammar *g, const char *const *yes, const char *const *no) {
    for (; *yes; yes++) cr_expect(M(g, *yes), "should match: \"%s\"", *yes);
    for (; *no; no++) cr_expect(!M(g, *no), "should not match: \"%s\"", *no);
}

/* ---- llama.cpp's example grammars ---- */

Test(grammar_gbnf, arithmetic) {
    gr_grammar *g = gbnf_ok("root  ::= (expr \"=\" ws term \"\\n\")+\n"
                            "expr  ::= term ([-+*/] term)*\n"
                            "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                            "ident ::= [a-z] [a-z0-9_]* ws\n"
                            "num   ::= [0-9]+ ws\n"
                            "ws    ::= [ \\t\\n]*\n");
    must(g, (const char *[]){"1+2=3\n", "x = 4\n", "(a+b)*c = d\ne=f\n", "( x1 )/2= 0\n", "a_b-7=x\n", NULL},
         (const char *[]){"", "1+2=3", "1+=3\n", "=3\n", "X=1\n", "1+2=3+4\n", "(a=b\n", NULL});
    gr_grammar_free(g);
}

Test(grammar_gbnf, list) {
    gr_grammar *g = gbnf_ok("root ::= item+\n"
                            "\n"
                            "# Excludes various line break characters\n"
                            "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n");
    must(g, (const char *[]){"- a\n", "- milk\n- eggs and ham\n", "- caf\xc3\xa9\n", NULL},
         (const char *[]){"", "- \n", "-a\n", "- a", "- a\rb\n", "- a\xc2\x85\n", "- \xe2\x80\xa8\n", NULL});
    gr_grammar_free(g);
}

Test(grammar_gbnf, chess) {
    gr_grammar *g = gbnf_ok(
        "# Specifies chess moves as a list in algebraic notation, using PGN conventions\n"
        "\n"
        "# Force first move to \"1. \", then any 1-2 digit number after, relying on model to follow the pattern\n"
        "root    ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
        "move    ::= (pawn | nonpawn | castle) [+#]?\n"
        "\n"
        "# piece type, optional file/rank, optional capture, dest file & rank\n"
        "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
        "\n"
        "# optional file & capture, dest file & rank, optional promotion\n"
        "pawn    ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
        "\n"
        "castle  ::= \"O-O\" \"-O\"?\n");
    must(
        g,
        (const char *[]){"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n",
                         "1. e4 e5\n10. exd8=Q+ Kxd8\n", NULL},
        (const char *[]){"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n", "1. e4 e5\n2. Pf3 Nc6\n", "2. e4 e5\n2. e4 e5\n", NULL});
    gr_grammar_free(g);
}

/* JSON, written from the JSON grammar (RFC 8259) in GBNF, the way llama.cpp's json.gbnf
 * is laid out: multi-line rules inside parentheses. */
static const char *json_gbnf = "root   ::= ws value ws\n"
                               "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
                               "object ::=\n"
                               "  \"{\" ws (\n"
                               "            string ws \":\" ws value\n"
                               "    (ws \",\" ws string ws \":\" ws value)*\n"
                               "  ws)? \"}\"\n"
                               "array  ::=\n"
                               "  \"[\" ws (\n"
                               "            value\n"
                               "    (ws \",\" ws value)*   # elements\n"
                               "  ws)? \"]\"\n"
                               "string ::=\n"
                               "  \"\\\"\" (\n"
                               "    [^\"\\\\\\x00-\\x1f] |\n"
                               "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
                               "  )* \"\\\"\"\n"
                               "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
                               "ws     ::= [ \\t\\n\\r]*\n";

static const char *const json_seeds[] = {
    "{\"a\": [1, 2.5, -3e2, true, false, null], \"b\": {\"c\": \"x\\n\\u00e9\"}}",
    "[]",
    "{}",
    "[ {\"k\" : \"v\" } , [ [ ] ] ]",
    "\"str\\\"\\\\\\/\\b\\f\\r\\t\"",
    "-0.0E+1",
    "0",
    "123",
    "  {\"caf\xc3\xa9\": \"\xe4\xb8\xad\"}\n",
    "[1,[2,[3,[4]]]]",
    "{\"a\":{\"b\":{\"c\":[]}}}",
};

Test(grammar_gbnf, json_agrees_with_jansson, .timeout = 120) {
    gr_grammar *g = gbnf_ok(json_gbnf);
    /* clang-format off */
    const char alpha[] = "{}[]\",:0123456789-+.eEtrufalsn \t\\/u\xc3\xa9" "ab";
    /* clang-format on */
    uint64_t r = 12345;
    long n = 0, pos = 0, mism = 0;
    char buf[512];
    for (size_t s = 0; s < sizeof json_seeds / sizeof json_seeds[0]; s++) {
        for (int k = 0; k < 3000; k++) {
            size_t len = strlen(json_seeds[s]);
            memcpy(buf, json_seeds[s], len);
            int edits = k == 0 ? 0 : 1 + (int)(k % 3);
            for (int e = 0; e < edits; e++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t x = (uint32_t)(r >> 33);
                size_t at = len ? x % (len + 1) : 0;
                char c = alpha[(x >> 8) % (sizeof alpha - 1)];
                int op = (int)((x >> 16) % 3);
                if (op == 0 && len < sizeof buf - 1) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = c;
                    len++;
                } else if (op == 1 && at < len) {
                    memmove(buf + at, buf + at + 1, len - at - 1);
                    len--;
                } else if (at < len) {
                    buf[at] = c;
                }
            }
            json_error_t je;
            json_t *j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            bool want = j != NULL;
            json_decref(j);
            if (!want && (strstr(je.text, "too big") || strstr(je.text, "overflow") || strstr(je.text, "surrogate") ||
                          strstr(je.text, "Unicode")))
                continue; /* jansson's own limits, not JSON's grammar */
            bool got = gr_matches(g, buf, len);
            n++;
            pos += want;
            if (want != got) {
                mism++;
                cr_log_error("\"%.*s\": jansson %d (%s), GBNF %d", (int)len, buf, want, want ? "" : je.text, got);
            }
        }
    }
    cr_log_info("json: %ld texts, %ld valid, %ld disagreements", n, pos, mism);
    cr_assert_eq(mism, 0);
    cr_assert_gt(pos, n / 20);
    gr_grammar_free(g);
}

/* ---- random expressions: GBNF and the same expression as a PCRE2 regex ---- */

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

typedef struct {
    char g[2048], r[2048];
    size_t ng, nr;
} two;
static void put(two *t, const char *g, const char *r) {
    size_t a = strlen(g), b = strlen(r);
    memcpy(t->g + t->ng, g, a);
    t->ng += a;
    memcpy(t->r + t->nr, r, b);
    t->nr += b;
}

static void gen(two *t, int depth) {
    int k = (int)rnd(depth > 2 ? 6 : 11);
    switch (k) {
    case 0: put(t, "\"a\" ", "a"); break;
    case 1: put(t, "\"ab\" ", "ab"); break;
    case 2: put(t, "[ab] ", "[ab]"); break;
    case 3: put(t, "[^a] ", "[^a]"); break;
    case 4: put(t, ". ", "[\\s\\S]"); break;
    case 5: put(t, "\"\\n\" ", "\\n"); break;
    case 6:
    case 7:
        gen(t, depth + 1);
        gen(t, depth + 1);
        break;
    case 8:
        put(t, "(\n ", "(?:");
        gen(t, depth + 1);
        put(t, "|\n ", "|");
        gen(t, depth + 1);
        put(t, ") ", ")");
        break;
    default: {
        static const char *q[] = {"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{ 1 , }"};
        static const char *qr[] = {"*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}", "{1,}"};
        int i = (int)rnd(8);
        put(t, "(", "(?:");
        gen(t, depth + 1);
        put(t, ")", ")");
        put(t, q[i], qr[i]);
        put(t, " ", "");
        break;
    }
    }
}

Test(grammar_gbnf, random_expressions_agree_with_pcre2, .timeout = 120) {
    long n = 0, pos = 0, mism = 0;
    for (int it = 0; it < 300; it++) {
        two t = {.ng = 0};
        put(&t, "root ::= x # start\nx ::= ", "");
        gen(&t, 0);
        put(&t, "\n", "");
        t.g[t.ng] = 0;
        t.r[t.nr] = 0;
        cn_error err;
        gr_grammar *g = gbnf_try(t.g, &err);
        cr_assert(g || strstr(err.msg, "matches no text"), "%s\n%s", err.msg, t.g);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *pc = pcre2_compile((PCRE2_SPTR)t.r, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
        cr_assert_not_null(pc, "PCRE2 refuses %s", t.r);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(pc, NULL);
        char s[8];
        for (int len = 0; len <= 6; len++) {
            int lim = 1;
            for (int i = 0; i < len; i++) lim *= 3;
            for (int x = 0; x < lim; x++) {
                int y = x;
                for (int i = 0; i < len; i++, y /= 3) s[i] = "ab\n"[y % 3];
                bool want = pcre2_match(pc, (PCRE2_SPTR)s, (size_t)len, 0, 0, md, NULL) >= 0;
                bool got = g && gr_matches(g, s, (size_t)len);
                n++;
                pos += want;
                if (want != got) {
                    mism++;
                    cr_log_error("/%s/ vs\n%s on \"%.*s\": PCRE2 %d, GBNF %d", t.r, t.g, len, s, want, got);
                }
            }
        }
        pcre2_match_data_free(md);
        pcre2_code_free(pc);
        gr_grammar_free(g);
    }
    cr_log_info("random GBNF: %ld strings, %ld matching, %ld disagreements", n, pos, mism);
    cr_assert_eq(mism, 0);
    cr_assert_gt(pos, n / 50);
}

/* ---- the syntax, piece by piece ---- */

Test(grammar_gbnf, escapes_classes_and_repeats) {
    gr_grammar *g = gbnf_ok(
        "root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\\[\\]\" [\\x30-\\x39\\u4e00] [^a-z\\n]? .{2} \"z\"{1,2}\n");
    must(g,
         (const char *[]){"A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]0..z",
                          "A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]\xe4\xb8\x80Q\n\nzz", NULL},
         (const char *[]){"A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]0a..z", "A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]0..zzzz",
                          "A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]0.z", NULL});
    gr_grammar_free(g);
    /* {m}, {m,}, [-] at the ends, empty class, [^] */
    g = gbnf_ok("root ::= [-a]{2} [a-]{3,} x\nx ::= [^] | []\n");
    must(g, (const char *[]){"-aaa-\n", "aa---q", NULL}, (const char *[]){"-aa-q", "-a---", NULL});
    gr_grammar_free(g);
}

Test(grammar_gbnf, layout_comments_and_continuations) {
    gr_grammar *g = gbnf_ok("# leading comment\n\n"
                            "root ::= # after ::=\n"
                            "   a-b |   # an alternative per line\n"
                            "   \"y\"\n"
                            "   | c_d   # a line starting with | continues the rule\n"
                            "a-b ::= ( \"x\"\n"
                            "   \"x\" # newlines inside parentheses\n"
                            " )\r\n"
                            "c_d ::= \"z\" \"\"\n");
    must(g, (const char *[]){"xx", "y", "z", NULL}, (const char *[]){"x", "xy", "", NULL});
    gr_grammar_free(g);
    g = gbnf_ok("root ::=\n| \"a\"\n");
    must(g, (const char *[]){"", "a", NULL}, (const char *[]){"b", NULL});
    gr_grammar_free(g);
}

Test(grammar_gbnf, start_rule_by_name) {
    gr_builder *b = gr_builder_new();
    const char *src = "root ::= \"r\"\nother ::= \"o\"\n";
    int32_t r = gr_gbnf(b, src, strlen(src), "other");
    gr_grammar *g = NULL;
    cn_error err = {0};
    cr_assert_eq(gr_compile(b, r, NULL, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gr_builder_free(b);
    cr_assert(M(g, "o"));
    cr_assert(!M(g, "r"));
    gr_grammar_free(g);
}

/* ---- errors ---- */

static void expect_error(const char *src, const char *part, const char *where) {
    cn_error err;
    gr_grammar *g = gbnf_try(src, &err);
    cr_assert_null(g, "should be refused:\n%s", src);
    cr_assert_eq(err.status, CN_STATUS_INVALID_ARG);
    cr_expect(strstr(err.msg, part), "message \"%s\" lacks \"%s\"", err.msg, part);
    if (where) cr_expect(strstr(err.msg, where), "message \"%s\" lacks \"%s\"", err.msg, where);
}

Test(grammar_gbnf, errors_have_line_and_column) {
    expect_error("root ::= \"a\" b\n", "undefined rule 'b'", "line 1, column 14");
    expect_error("root ::= \"a\"\nx ::= y\n\ny ::= z\n", "undefined rule 'z'", "line 4, column 7");
    expect_error("x ::= \"a\"\n", "no rule named 'root'", NULL);
    expect_error("", "no rule named 'root'", NULL);
    expect_error("root = \"a\"\n", "expected '::='", "line 1, column 6");
    expect_error("root ::= \"a\n", "unterminated literal", "line 1, column 10");
    expect_error("root ::= \"\\q\"\n", "unknown escape", "line 1, column 11");
    expect_error("root ::= \"\\x4\"\n", "hex digits", "line 1, column 11");
    expect_error("root ::= \"\\uD800\"\n", "Unicode", "line 1, column 11");
    expect_error("root ::= [ab\n", "unterminated character class", "line 1, column 10");
    expect_error("root ::= [z-a]\n", "out of order", "line 1, column 11");
    expect_error("\nroot ::= (\"a\" \n  \"b\"\n", "missing ')'", "line 2, column 10");
    expect_error("root ::= \"a\")\n", "unmatched ')'", "line 1, column 13");
    expect_error("root ::= * \"a\"\n", "no item before it", "line 1, column 10");
    expect_error("root ::= \"a\" | +\n", "no item before it", "line 1, column 16");
    expect_error("root ::= \"a\"{3,2}\n", "minimum is above the maximum", "line 1, column 13");
    expect_error("root ::= \"a\"{x}\n", "expected a number", "line 1, column 14");
    expect_error("root ::= \"a\"{2 3}\n", "expected ',' or '}'", "line 1, column 16");
    expect_error("root ::= <[123]>\n", "token references", "line 1, column 10");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice (first at line 1, column 1)", "line 2, column 1");
    expect_error("root ::= \"a\" @\n", "unexpected character '@'", "line 1, column 14");
    expect_error("root ::= \"a\"\n  ::= \"b\"\n", "expected a rule name", "line 2, column 3");
    expect_error("root ::= \"\xff\"\n", "UTF-8", "line 1, column 11");
    /* compile's own errors come through with the rule named */
    expect_error("root ::= root \"a\" | \"b\"\n", "root", NULL);
    expect_error("root ::= x\nx ::= \"a\" x\n", "no text", NULL);
}

Test(grammar_gbnf, deep_parentheses_are_refused) {
    char src[4096];
    size_t n = 0;
    n += (size_t)sprintf(src, "root ::= ");
    for (int i = 0; i < 1000; i++) src[n++] = '(';
    src[n++] = '"';
    src[n++] = 'a';
    src[n++] = '"';
    for (int i = 0; i < 1000; i++) src[n++] = ')';
    src[n] = 0;
    expect_error(src, "nested deeper", "line 1, column");
}

/* ---- choice ---- */

static gr_grammar *choice(const char *const *c, size_t n) {
    gr_builder *b = gr_builder_new();
    int32_t r = gr_choice(b, c, n);
    gr_grammar *g = NULL;
    cn_error err = {0};
    cr_assert_eq(gr_compile(b, r, NULL, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gr_builder_free(b);
    return g;
}

Test(grammar_choice, exactly_one_of_the_strings) {
    const char *c[] = {"yes", "no", "maybe", "may", "no", "caf\xc3\xa9"};
    gr_grammar *g = choice(c, 6);
    must(g, (const char *[]){"yes", "no", "maybe", "may", "caf\xc3\xa9", NULL},
         (const char *[]){"", "y", "ye", "yess", "mayb", "yesno", "caf", NULL});
    gr_grammar_free(g);
    const char *e[] = {"", "a"};
    g = choice(e, 2);
    must(g, (const char *[]){"", "a", NULL}, (const char *[]){"aa", "b", NULL});
    gr_grammar_free(g);
}

Test(grammar_choice, many_choices) {
    enum { N = 5000 };
    char(*s)[16] = malloc(N * sizeof *s);
    const char **c = malloc(N * sizeof *c);
    for (int i = 0; i < N; i++) {
        snprintf(s[i], sizeof s[i], "w%d", i * 7);
        c[i] = s[i];
    }
    gr_grammar *g = choice(c, N);
    cr_assert(M(g, "w0"));
    cr_assert(M(g, "w34993"));
    cr_assert(!M(g, "w1"));
    cr_assert(!M(g, "w"));
    gr_grammar_free(g);
    free(c);
    free(s);
}

Test(grammar_choice, errors) {
    gr_builder *b = gr_builder_new();
    cr_assert_lt(gr_choice(b, NULL, 0), 0);
    cr_assert(strstr(gr_builder_error(b)->msg, "at least one"));
    gr_builder_free(b);
    b = gr_builder_new();
    const char *c[] = {"a", NULL};
    cr_assert_lt(gr_choice(b, c, 2), 0);
    cr_assert(strstr(gr_builder_error(b)->msg, "choice 1 is NULL"));
    gr_builder_free(b);
}

/* A very ambiguous grammar: x is nullable and repeated 600 times under a recursion, so
 * the parse stacks multiply with each byte (the fuzzer's slow units took minutes for 64
 * bytes). Short texts still match; past GR_MAX_BYTE_STEPS steps or GR_MAX_TOPS stacks
 * for one byte, the byte is refused instead of the matcher running on for minutes. */
Test(grammar_gbnf, ambiguity_has_a_work_limit_per_byte, .timeout = 120) {
    gr_grammar *g = gbnf_ok("root ::= [a-z] root? x{600}\nx ::= [a-z] | \"\"");
    cr_expect(M(g, "a"));
    cr_expect(M(g, "ab"));
    cr_expect(!M(g, "A"));
    char s[65];
    memset(s, 'a', 64);
    s[64] = 0;
    gr_state *st = gr_state_new(g);
    cr_assert_not_null(st);
    size_t i = 0;
    while (i < 64 && gr_state_feed(st, (const uint8_t *)s + i, 1)) i++;
    cr_expect_lt(i, 64, "64 letters are past the limit: some byte is refused");
    cr_expect_gt(i, 1, "the first letters are taken");
    gr_state_free(st);
    cr_expect(!M(g, s));
    gr_grammar_free(g);
}
