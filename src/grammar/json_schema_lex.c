/* json_schema_lex.c — the lexical half of the JSON Schema front end: whitespace, the
 * shared rules every schema calls (string, number, integer, boolean, null and the generic
 * value / object / array), strings constrained by length, pattern or format, exact
 * decimal ranges for minimum / maximum, the complement of a set of property names, and
 * JSON literals for enum and const. It builds expressions only; which schema keyword
 * asks for what is json_schema.c's business.
 *
 * Spelling: a value of enum / const / a property name is spelled as Python's
 * json.dumps(ensure_ascii=False) writes it (the form MaskBench and most clients send);
 * other spellings of the same string (\u0061 for "a") are not offered. Strings and
 * numbers that the schema does not pin down accept every JSON spelling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "grammar/json_schema_impl.h"

struct js_strc {
    uint32_t min, max;
    int32_t rule;
};

static void oom(js_lex *x) { gr_builder_fail(x->b, CN_STATUS_NO_MEMORY, "out of memory compiling the JSON schema"); }

static int32_t set_chars(js_lex *x, const char *chars) {
    uint8_t set[32] = {0};
    for (const unsigned char *p = (const unsigned char *)chars; *p; p++) set[*p >> 3] |= (uint8_t)(1u << (*p & 7));
    return gr_byteset(x->b, set);
}

/* A set given as ranges "az09" (pairs of bytes, inclusive) */
static int32_t set_ranges(js_lex *x, const char *pairs) {
    uint8_t set[32] = {0};
    for (const unsigned char *p = (const unsigned char *)pairs; p[0] && p[1]; p += 2)
        for (unsigned c = p[0]; c <= p[1]; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
    return gr_byteset(x->b, set);
}

/* A rule defined once on first use; *slot keeps its id. */
static int32_t shared(js_lex *x, int32_t *slot, const char *name, int32_t (*body)(js_lex *)) {
    if (*slot < 0) {
        int32_t r = gr_rule(x->b, name);
        if (r < 0) return -1;
        *slot = r; /* set before the body: value calls itself through object and array */
        if (gr_rule_define(x->b, r, body(x)) < 0) return -1;
    }
    return gr_ref(x->b, *slot);
}

int32_t js_lit(js_lex *x, const char *s) { return gr_literal(x->b, s, strlen(s)); }

static int32_t body_ws(js_lex *x) { return gr_repeat(x->b, set_chars(x, " \t\n\r"), 0, CN_GRAMMAR_MAX_WS); }

int32_t js_ws(js_lex *x) {
    if (!x->flex) return gr_empty(x->b);
    /* a rule of its own: inlined, its 21 counting states multiply the states of every
     * rule around it (a 16-property object compiled 6x slower); called, it is one
     * shared leaf whose masks the matcher caches across grammars */
    return shared(x, &x->r_ws, "ws", body_ws);
}

int32_t js_sep(js_lex *x) {
    if (!x->flex) return js_lit(x, ",");
    return gr_seq(x->b, (int32_t[]){js_ws(x), js_lit(x, ","), js_ws(x)}, 3);
}

static int32_t hex(js_lex *x) { return set_ranges(x, "09afAF"); }
static int32_t digit(js_lex *x) { return gr_byte_range(x->b, '0', '9'); }

/* A character of a JSON string, any spelling: unescaped (no ", \ or control), or an
 * escape (\uXXXX may be any code unit, as JSON allows). */
static int32_t string_char(js_lex *x) {
    static const uint32_t raw[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    gr_builder *b = x->b;
    int32_t esc = gr_alt2(b, set_chars(x, "\"\\/bfnrt"), gr_seq2(b, js_lit(x, "u"), gr_repeat(b, hex(x), 4, 4)));
    return gr_alt2(b, gr_codepoints(b, raw, 3, false), gr_seq2(b, js_lit(x, "\\"), esc));
}

/* One character (code point) of a JSON string for counting: a surrogate pair escape is
 * one, a lone surrogate is refused (it is no character). */
static int32_t counted_char(js_lex *x) {
    static const uint32_t raw[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    gr_builder *b = x->b;
    int32_t h = hex(x);
    int32_t bmp = gr_alt2(b, gr_seq(b, (int32_t[]){set_ranges(x, "09acACefEF"), h, hex(x), hex(x)}, 4),
                          gr_seq(b, (int32_t[]){set_chars(x, "dD"), gr_byte_range(b, '0', '7'), hex(x), hex(x)}, 4));
    int32_t pair = gr_seq(b,
                          (int32_t[]){set_chars(x, "dD"), set_chars(x, "89abAB"), hex(x), hex(x), js_lit(x, "\\u"),
                                      set_chars(x, "dD"), set_ranges(x, "cfCF"), hex(x), hex(x)},
                          9);
    int32_t esc = gr_alt(b, (int32_t[]){set_chars(x, "\"\\/bfnrt"), gr_seq2(b, js_lit(x, "u"), gr_alt2(b, bmp, pair))},
                         2);
    return gr_alt2(b, gr_codepoints(b, raw, 3, false), gr_seq2(b, js_lit(x, "\\"), esc));
}

static int32_t body_string(js_lex *x) {
    gr_builder *b = x->b;
    return gr_seq(b, (int32_t[]){js_lit(x, "\""), gr_repeat(b, string_char(x), 0, GR_INF), js_lit(x, "\"")}, 3);
}

/* 0 | [1-9][0-9]* */
static int32_t uint_digits(js_lex *x) {
    gr_builder *b = x->b;
    return gr_alt2(b, js_lit(x, "0"), gr_seq2(b, gr_byte_range(b, '1', '9'), gr_repeat(b, digit(x), 0, GR_INF)));
}

static int32_t body_integer(js_lex *x) {
    gr_builder *b = x->b;
    return gr_seq2(b, gr_repeat(b, js_lit(x, "-"), 0, 1), uint_digits(x));
}

static int32_t body_number(js_lex *x) {
    gr_builder *b = x->b;
    int32_t frac = gr_repeat(b, gr_seq2(b, js_lit(x, "."), gr_repeat(b, digit(x), 1, GR_INF)), 0, 1);
    int32_t exp = gr_repeat(b,
                            gr_seq(b,
                                   (int32_t[]){set_chars(x, "eE"), gr_repeat(b, set_chars(x, "+-"), 0, 1),
                                               gr_repeat(b, digit(x), 1, GR_INF)},
                                   3),
                            0, 1);
    return gr_seq(b, (int32_t[]){gr_repeat(b, js_lit(x, "-"), 0, 1), uint_digits(x), frac, exp}, 4);
}

static int32_t body_bool(js_lex *x) { return gr_alt2(x->b, js_lit(x, "true"), js_lit(x, "false")); }
static int32_t body_null(js_lex *x) { return js_lit(x, "null"); }

static int32_t body_object(js_lex *x) {
    gr_builder *b = x->b;
    int32_t member = gr_seq(b, (int32_t[]){js_string(x), js_ws(x), js_lit(x, ":"), js_ws(x), js_value(x)}, 5);
    int32_t more = gr_repeat(b, gr_seq2(b, js_sep(x), member), 0, GR_INF);
    int32_t members = gr_repeat(b, gr_seq2(b, member, more), 0, 1);
    return gr_seq(b, (int32_t[]){js_lit(x, "{"), js_ws(x), members, js_ws(x), js_lit(x, "}")}, 5);
}

static int32_t body_array(js_lex *x) {
    gr_builder *b = x->b;
    int32_t more = gr_repeat(b, gr_seq2(b, js_sep(x), js_value(x)), 0, GR_INF);
    int32_t items = gr_repeat(b, gr_seq2(b, js_value(x), more), 0, 1);
    return gr_seq(b, (int32_t[]){js_lit(x, "["), js_ws(x), items, js_ws(x), js_lit(x, "]")}, 5);
}

static int32_t body_value(js_lex *x) {
    return gr_alt(
        x->b, (int32_t[]){js_any_object(x), js_any_array(x), js_string(x), js_number(x), js_boolean(x), js_null(x)}, 6);
}

int32_t js_string(js_lex *x) { return shared(x, &x->r_string, "string", body_string); }
int32_t js_number(js_lex *x) { return shared(x, &x->r_number, "number", body_number); }
int32_t js_integer(js_lex *x) { return shared(x, &x->r_integer, "integer", body_integer); }
int32_t js_boolean(js_lex *x) { return shared(x, &x->r_bool, "boolean", body_bool); }
int32_t js_null(js_lex *x) { return shared(x, &x->r_null, "null", body_null); }
int32_t js_value(js_lex *x) { return shared(x, &x->r_value, "value", body_value); }
int32_t js_any_object(js_lex *x) { return shared(x, &x->r_object, "object", body_object); }
int32_t js_any_array(js_lex *x) { return shared(x, &x->r_array, "array", body_array); }

int32_t js_string_len(js_lex *x, uint32_t min, uint32_t max) {
    if (min == 0 && max == GR_INF) return js_string(x);
    for (size_t i = 0; i < x->n_strc; i++)
        if (x->strc[i].min == min && x->strc[i].max == max) return gr_ref(x->b, x->strc[i].rule);
    if (!CN_GROW(x->strc, x->cap_strc, x->n_strc + 1)) {
        oom(x);
        return -1;
    }
    char name[64];
    if (max == GR_INF) snprintf(name, sizeof name, "string-%u-", min);
    else snprintf(name, sizeof name, "string-%u-%u", min, max);
    int32_t r = gr_rule_fresh(x->b, name);
    gr_builder *b = x->b;
    int32_t body = gr_seq(b, (int32_t[]){js_lit(x, "\""), gr_repeat(b, counted_char(x), min, max), js_lit(x, "\"")}, 3);
    if (gr_rule_define(b, r, body) < 0) return -1;
    x->strc[x->n_strc++] = (js_strc){min, max, r};
    return gr_ref(b, r);
}

/* ---- formats ----
 * Each regex accepts a subset of what the format's RFC allows (and of what Python's
 * jsonschema format checker accepts), never more: a date is a real calendar date (leap
 * years included), times are RFC 3339's, a URI has a scheme and RFC 3986's characters
 * in its parts (no IP literal hosts), e-mail is the dot-atom form. */

#define RX_DATE                                                                                         \
    "(([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" \
    "(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|"                                     \
    "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29)"
#define RX_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RX_DURTIME "T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
#define RX_H16 "[0-9a-fA-F]{1,4}"
#define RX_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define RX_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define RX_UNRES "\\-A-Za-z0-9._~!$&'()*+,;="
#define RX_PCHAR "([" RX_UNRES ":@]|%[0-9A-Fa-f]{2})"
#define RX_ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"

static const struct {
    const char *name, *re;
} formats[] = {
    {"date", RX_DATE},
    {"time", RX_TIME},
    {"date-time", RX_DATE "[Tt]" RX_TIME},
    {"duration", "P(([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M([0-9]+D)?)?)(" RX_DURTIME ")?|" RX_DURTIME "|[0-9]+W)"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", RX_ATEXT "(\\." RX_ATEXT ")*@" RX_LABEL "(\\." RX_LABEL ")*"},
    {"ipv4", RX_OCTET "(\\." RX_OCTET "){3}"},
    {"ipv6", "((" RX_H16 ":){7}" RX_H16 "|(" RX_H16 ":){1,7}:|(" RX_H16 ":){1,6}:" RX_H16 "|(" RX_H16 ":){1,5}(:" RX_H16
             "){1,2}|(" RX_H16 ":){1,4}(:" RX_H16 "){1,3}|(" RX_H16 ":){1,3}(:" RX_H16 "){1,4}|(" RX_H16
             ":){1,2}(:" RX_H16 "){1,5}|" RX_H16 ":(:" RX_H16 "){1,6}|:((:" RX_H16 "){1,7}|:))"},
    {"hostname", RX_LABEL "(\\." RX_LABEL ")*"},
    {"uri", "[A-Za-z][A-Za-z0-9+.-]*:(//(([" RX_UNRES ":]|%[0-9A-Fa-f]{2})*@)?([" RX_UNRES "]|%[0-9A-Fa-f]{2})*"
            "(:[0-9]*)?(/" RX_PCHAR "*)*|/(" RX_PCHAR "+(/" RX_PCHAR "*)*)?|" RX_PCHAR "+(/" RX_PCHAR "*)*)?"
            "(\\?(" RX_PCHAR "|[/?])*)?(#(" RX_PCHAR "|[/?])*)?"},
};

static const char *format_regex(const char *fmt) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(fmt, formats[i].name) == 0) return formats[i].re;
    return NULL;
}

bool js_format_known(const char *fmt) { return format_regex(fmt) != NULL; }

int32_t js_string_constrained(js_lex *x, uint32_t min, uint32_t max, const char *re, size_t n_re, const char *fmt) {
    gr_builder *b = x->b;
    const char *fre = fmt ? format_regex(fmt) : NULL;
    bool len = min > 0 || max != GR_INF;
    if (!re && !fre) return js_string_len(x, min, max);
    /* the format's and the pattern's languages (formats never need escapes), then the
     * count of characters: each a DFA, intersected (compile.c) */
    int32_t content = -2;
    if (fre) content = gr_regex_expr(b, fre, strlen(fre));
    if (re) {
        int32_t p = gr_regex_expr_unanchored(b, re, n_re);
        content = content == -2 ? p : gr_and(b, content, p);
    }
    if (len) content = gr_and(b, content, gr_repeat(b, counted_char(x), min, max));
    char name[48];
    if (fre && !re && !len) snprintf(name, sizeof name, "format-%.32s", fmt);
    else snprintf(name, sizeof name, "%s", re ? "pattern" : "format");
    int32_t r = gr_rule_fresh(b, name);
    int32_t body = gr_seq(b, (int32_t[]){js_lit(x, "\""), content, js_lit(x, "\"")}, 3);
    if (gr_rule_define(b, r, body) < 0) return -1;
    return gr_ref(b, r);
}

/* ---- spelling JSON values ---- */

static int buf_add(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (n > SIZE_MAX - 1 - *len || !CN_GROW(*buf, *cap, *len + n + 1)) return -1;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

int js_spell_string(const char *s, size_t n, char **buf, size_t *len, size_t *cap) {
    if (buf_add(buf, len, cap, "\"", 1) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        const char *p = e;
        size_t k = 2;
        switch (c) {
        case '"': p = "\\\""; break;
        case '\\': p = "\\\\"; break;
        case '\n': p = "\\n"; break;
        case '\r': p = "\\r"; break;
        case '\t': p = "\\t"; break;
        case '\b': p = "\\b"; break;
        case '\f': p = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", c);
                k = 6;
            } else {
                e[0] = (char)c;
                k = 1;
            }
        }
        if (buf_add(buf, len, cap, p, k) < 0) return -1;
    }
    return buf_add(buf, len, cap, "\"", 1);
}

/* The shortest decimal digits that read back as v (finite): dig[0..*nd) (NUL-terminated,
 * no trailing zeros but a lone "0"), the sign, and decpt: the decimal point comes after
 * decpt digits (decpt <= 0: -decpt zeros after "0."). */
static void shortest_digits(double v, char dig[24], size_t *nd, bool *neg, long *decpt) {
    char e[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    const char *q = e;
    *neg = *q == '-';
    if (*neg) q++;
    size_t n = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.' && n < 23) dig[n++] = *q;
    while (n > 1 && dig[n - 1] == '0') n--;
    dig[n] = 0;
    *nd = n;
    *decpt = (*q == 'e' ? strtol(q + 1, NULL, 10) : 0) + 1;
}

void js_py_float(double v, char *out, size_t cap) {
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char dig[24];
    size_t nd;
    bool neg;
    long decpt;
    shortest_digits(v, dig, &nd, &neg, &decpt);
    if (v == 0) decpt = 1;
    char o[400];
    size_t n = 0;
    if (neg) o[n++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            o[n++] = '0';
            o[n++] = '.';
            for (int i = 0; i < -decpt; i++) o[n++] = '0';
            for (size_t i = 0; i < nd; i++) o[n++] = dig[i];
        } else if ((size_t)decpt >= nd) {
            for (size_t i = 0; i < nd; i++) o[n++] = dig[i];
            for (size_t i = nd; i < (size_t)decpt; i++) o[n++] = '0';
            o[n++] = '.';
            o[n++] = '0';
        } else {
            for (size_t i = 0; i < nd; i++) {
                if (i == (size_t)decpt) o[n++] = '.';
                o[n++] = dig[i];
            }
        }
        o[n] = 0;
    } else {
        o[n++] = dig[0];
        if (nd > 1) {
            o[n++] = '.';
            for (size_t i = 1; i < nd; i++) o[n++] = dig[i];
        }
        int ex = (int)(decpt - 1);
        snprintf(o + n, sizeof o - n, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(out, cap, "%s", o);
}

int32_t js_json_literal(js_lex *x, const json_t *v) {
    gr_builder *b = x->b;
    char num[64];
    switch (json_typeof(v)) {
    case JSON_NULL: return js_lit(x, "null");
    case JSON_TRUE: return js_lit(x, "true");
    case JSON_FALSE: return js_lit(x, "false");
    case JSON_INTEGER: {
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        char alt[72];
        snprintf(alt, sizeof alt, "%s.0", num);
        return gr_alt2(b, js_lit(x, num), js_lit(x, alt));
    }
    case JSON_REAL: {
        double d = json_real_value(v);
        js_py_float(d, num, sizeof num);
        int32_t e = js_lit(x, num);
        if (d == floor(d) && fabs(d) < 1e16) {
            char i[64];
            snprintf(i, sizeof i, "%.0f", d);
            if (strcmp(i, "-0") == 0) snprintf(i, sizeof i, "0");
            e = gr_alt2(b, e, js_lit(x, i));
        }
        return e;
    }
    case JSON_STRING: {
        char *s = NULL;
        size_t len = 0, cap = 0;
        if (js_spell_string(json_string_value(v), json_string_length(v), &s, &len, &cap) < 0) {
            free(s);
            oom(x);
            return -1;
        }
        int32_t e = gr_literal(b, s, len);
        free(s);
        return e;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) return gr_seq(b, (int32_t[]){js_lit(x, "["), js_ws(x), js_lit(x, "]")}, 3);
        int32_t acc = js_lit(x, "[");
        acc = gr_seq2(b, acc, js_ws(x));
        for (size_t i = 0; i < n; i++) {
            if (i) acc = gr_seq2(b, acc, js_sep(x));
            acc = gr_seq2(b, acc, js_json_literal(x, json_array_get(v, i)));
        }
        return gr_seq(b, (int32_t[]){acc, js_ws(x), js_lit(x, "]")}, 3);
    }
    case JSON_OBJECT: {
        int32_t acc = gr_seq2(b, js_lit(x, "{"), js_ws(x));
        const char *k;
        json_t *val;
        bool first = true;
        json_object_foreach((json_t *)v, k, val) {
            char *s = NULL;
            size_t len = 0, cap = 0;
            if (js_spell_string(k, strlen(k), &s, &len, &cap) < 0) {
                free(s);
                oom(x);
                return -1;
            }
            if (!first) acc = gr_seq2(b, acc, js_sep(x));
            first = false;
            acc = gr_seq(
                b, (int32_t[]){acc, gr_literal(b, s, len), js_ws(x), js_lit(x, ":"), js_ws(x), js_json_literal(x, val)},
                6);
            free(s);
        }
        return gr_seq(b, (int32_t[]){acc, js_ws(x), js_lit(x, "}")}, 3);
    }
    }
    return gr_nothing(b);
}

/* ---- property names other than the listed ones ----
 * A trie of the names' code points; at each node: end here (unless a name ends here),
 * go on into a child, or take any other character and then anything. In the canonical
 * spelling each string has one spelling, so the complement of the spellings is the
 * complement of the strings. */

typedef struct {
    uint32_t cp;
    int32_t child; /* trie node */
    int32_t next;  /* sibling */
} js_edge;

typedef struct {
    int32_t first; /* edge list */
    bool term;
} js_tnode;

typedef struct {
    js_tnode *n;
    size_t nn, capn;
    js_edge *e;
    size_t ne, cape;
} js_trie;

static int32_t trie_node(js_trie *t) {
    if (!CN_GROW(t->n, t->capn, t->nn + 1)) return -1;
    t->n[t->nn] = (js_tnode){-1, false};
    return (int32_t)t->nn++;
}

static int32_t trie_child(js_trie *t, int32_t at, uint32_t cp) {
    for (int32_t e = t->n[at].first; e >= 0; e = t->e[e].next)
        if (t->e[e].cp == cp) return t->e[e].child;
    int32_t c = trie_node(t);
    if (c < 0) return -1;
    if (!CN_GROW(t->e, t->cape, t->ne + 1)) return -1;
    t->e[t->ne] = (js_edge){cp, c, t->n[at].first};
    t->n[at].first = (int32_t)t->ne++;
    return c;
}

static bool cp_escaped(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

static int32_t spell_cp(js_lex *x, uint32_t c) {
    char u[8];
    char *s = NULL;
    size_t len = 0, cap = 0;
    size_t n = cn_utf8_encode(c, u);
    if (js_spell_string(u, n, &s, &len, &cap) < 0) {
        free(s);
        oom(x);
        return -1;
    }
    int32_t e = gr_literal(x->b, s + 1, len - 2); /* without the quotes */
    free(s);
    return e;
}

/* The canonical escapes: \" \\ \b \f \n \r \t and \u00xx (lower case) for the rest of
 * the control characters. */
static int32_t canon_escape(js_lex *x) {
    gr_builder *b = x->b;
    int32_t u = gr_seq2(b, js_lit(x, "u00"),
                        gr_alt2(b, gr_seq2(b, js_lit(x, "0"), set_chars(x, "01234567bef")),
                                gr_seq2(b, js_lit(x, "1"), set_ranges(x, "09af"))));
    return gr_seq2(b, js_lit(x, "\\"), gr_alt2(b, set_chars(x, "\"\\bfnrt"), u));
}

static int32_t canon_char(js_lex *x) {
    static const uint32_t raw[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    return gr_alt2(x->b, gr_codepoints(x->b, raw, 3, false), canon_escape(x));
}

/* The shared tails of a name that left the trie: any canonical characters. */
static int32_t body_krest(js_lex *x) { return gr_repeat(x->b, canon_char(x), 0, GR_INF); }

static int32_t krest(js_lex *x) { return shared(x, &x->r_krest, "name-rest", body_krest); }

static int32_t body_kna(js_lex *x) {
    static const uint32_t na[] = {0x80, 0x10FFFF};
    return gr_seq2(x->b, gr_codepoints(x->b, na, 1, false), krest(x));
}

static int32_t body_kesc(js_lex *x) { return gr_seq2(x->b, canon_escape(x), krest(x)); }

static int32_t not_in_node(js_lex *x, const js_trie *t, int32_t at, int depth) {
    gr_builder *b = x->b;
    if (depth > 4096) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "a property name longer than 4096 characters");
        return -1;
    }
    bool esc_kid = false, na_kid = false;
    uint8_t ascii[32] = {0};
    for (unsigned c = 0x20; c < 0x80; c++)
        if (c != '"' && c != '\\') ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
    size_t n_na = 0;
    for (int32_t e = t->n[at].first; e >= 0; e = t->e[e].next) {
        uint32_t c = t->e[e].cp;
        esc_kid |= cp_escaped(c);
        if (c >= 0x80) {
            na_kid = true;
            n_na++;
        } else ascii[c >> 3] &= (uint8_t) ~(1u << (c & 7));
    }
    /* leave the trie: another ASCII character, escape or non-ASCII character, then anything */
    int32_t r = gr_seq2(b, gr_byteset(b, ascii), krest(x));
    if (!esc_kid) {
        r = gr_alt2(b, r, shared(x, &x->r_kesc, "name-escape-rest", body_kesc));
    } else {
        for (uint32_t c = 0; c < 0x80; c++) {
            if (!cp_escaped(c)) continue;
            bool kid = false;
            for (int32_t e = t->n[at].first; e >= 0; e = t->e[e].next) kid |= t->e[e].cp == c;
            if (!kid) r = gr_alt2(b, r, gr_seq2(b, spell_cp(x, c), krest(x)));
        }
    }
    if (!na_kid) {
        r = gr_alt2(b, r, shared(x, &x->r_kna, "name-nonascii-rest", body_kna));
    } else {
        uint32_t *rng = malloc((2 * n_na + 2) * sizeof *rng);
        if (!rng) {
            oom(x);
            return -1;
        }
        size_t nr = 0;
        rng[nr++] = 0;
        rng[nr++] = 0x7F;
        for (int32_t e = t->n[at].first; e >= 0; e = t->e[e].next)
            if (t->e[e].cp >= 0x80) {
                rng[nr++] = t->e[e].cp;
                rng[nr++] = t->e[e].cp;
            }
        r = gr_alt2(b, r, gr_seq2(b, gr_codepoints(b, rng, nr / 2, true), krest(x)));
        free(rng);
    }
    if (!t->n[at].term) r = gr_alt2(b, r, gr_empty(b));
    for (int32_t e = t->n[at].first; e >= 0; e = t->e[e].next)
        r = gr_alt2(b, r, gr_seq2(b, spell_cp(x, t->e[e].cp), not_in_node(x, t, t->e[e].child, depth + 1)));
    return r;
}

int32_t js_key_not_in(js_lex *x, const char *const *names, const size_t *lens, size_t n) {
    if (n == 0) return krest(x);
    js_trie t = {0};
    int32_t root = trie_node(&t);
    bool ok = root >= 0;
    for (size_t k = 0; ok && k < n; k++) {
        int32_t at = root;
        for (size_t i = 0; ok && i < lens[k];) {
            uint32_t c;
            i += cn_utf8_decode(names[k] + i, lens[k] - i, &c); /* jansson's strings are valid UTF-8 */
            at = trie_child(&t, at, c);
            ok = at >= 0;
        }
        if (ok) t.n[at].term = true;
    }
    int32_t r = -1;
    if (!ok) oom(x);
    else r = not_in_node(x, &t, root, 0);
    free(t.n);
    free(t.e);
    return r;
}

/* The content of a property name kept to patterns: any canonical characters, none of
 * the names, and for each pattern i (JSON spelling, unanchored) matching it (want[i] 1),
 * not matching it (0), or either (2). Intersections of call-free expressions: compile.c
 * makes the product DFA. */
int32_t js_key_content(js_lex *x, const char *const *names, const size_t *lens, size_t n, const char *const *re,
                       const size_t *n_re, const uint8_t *want, size_t n_pat) {
    gr_builder *b = x->b;
    int32_t r = gr_repeat(b, canon_char(x), 0, GR_INF);
    if (n) {
        int32_t *alts = malloc(n * sizeof *alts);
        if (!alts) {
            oom(x);
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            char *ks = NULL;
            size_t kl = 0, kc = 0;
            if (js_spell_string(names[i], lens[i], &ks, &kl, &kc) < 0) {
                free(ks);
                free(alts);
                oom(x);
                return -1;
            }
            alts[i] = gr_literal(b, ks + 1, kl - 2); /* without the quotes */
            free(ks);
        }
        r = gr_and(b, r, gr_not(b, gr_alt(b, alts, n)));
        free(alts);
    }
    for (size_t i = 0; i < n_pat; i++) {
        if (want[i] == 2) continue;
        int32_t p = gr_regex_expr_unanchored(b, re[i], n_re[i]);
        r = gr_and(b, r, want[i] ? p : gr_not(b, p));
    }
    return r;
}

/* ---- decimal ranges ---- */

void js_dec_free(js_dec *d) {
    if (!d) return;
    free(d->ip);
    free(d->fp);
    d->ip = d->fp = NULL;
}

static int dec_set(js_lex *x, js_dec *d, bool neg, const char *ip, size_t nip, const char *fp, size_t nfp) {
    while (nip > 1 && ip[0] == '0') {
        ip++;
        nip--;
    }
    while (nfp > 0 && fp[nfp - 1] == '0') nfp--;
    if (nip == 0) {
        ip = "0";
        nip = 1;
    }
    if (nip + nfp > JS_MAX_DIGITS) {
        gr_builder_fail(x->b, CN_STATUS_INVALID_ARG, "a numeric bound with more than %d digits at %s", JS_MAX_DIGITS,
                        x->n_path ? x->path : "the schema's root");
        return -1;
    }
    d->ip = strndup(ip, nip);
    d->fp = strndup(fp, nfp);
    if (!d->ip || !d->fp) {
        js_dec_free(d);
        oom(x);
        return -1;
    }
    d->neg = neg && !(nip == 1 && ip[0] == '0' && nfp == 0);
    return 0;
}

int js_dec_from_json(js_lex *x, const json_t *v, js_dec *out) {
    *out = (js_dec){0};
    char s[64];
    if (json_is_integer(v)) {
        snprintf(s, sizeof s, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        bool neg = s[0] == '-';
        return dec_set(x, out, neg, s + neg, strlen(s + neg), "", 0);
    }
    double d = json_number_value(v);
    if (!isfinite(d)) {
        gr_builder_fail(x->b, CN_STATUS_INVALID_ARG, "a numeric bound that is not finite at %s",
                        x->n_path ? x->path : "the schema's root");
        return -1;
    }
    /* shortest digits that give d back, then placed by the decimal exponent */
    char dig[24];
    size_t nd;
    bool neg;
    long decpt;
    shortest_digits(d, dig, &nd, &neg, &decpt);
    if (decpt > JS_MAX_DIGITS || decpt < -JS_MAX_DIGITS) {
        gr_builder_fail(x->b, CN_STATUS_INVALID_ARG, "a numeric bound with more than %d digits at %s", JS_MAX_DIGITS,
                        x->n_path ? x->path : "the schema's root");
        return -1;
    }
    char buf[2 * JS_MAX_DIGITS + 64];
    size_t n = 0, at_point;
    if (decpt <= 0) {
        buf[n++] = '0';
        at_point = n;
        for (long i = 0; i < -decpt; i++) buf[n++] = '0';
        for (size_t i = 0; i < nd; i++) buf[n++] = dig[i];
    } else {
        for (long i = 0; i < decpt; i++) buf[n++] = (size_t)i < nd ? dig[i] : '0';
        at_point = n;
        for (size_t i = (size_t)decpt; i < nd; i++) buf[n++] = dig[i];
    }
    return dec_set(x, out, neg, buf, at_point, buf + at_point, n - at_point);
}

static int ucmp(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na != nb) return na < nb ? -1 : 1;
    int c = strcmp(a, b);
    return (c > 0) - (c < 0);
}

static int mag_cmp(const js_dec *a, const js_dec *b) {
    int c = ucmp(a->ip, b->ip);
    if (c) return c;
    c = strcmp(a->fp, b->fp);
    return (c > 0) - (c < 0);
}

int js_dec_cmp(const js_dec *a, const js_dec *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = mag_cmp(a, b);
    return a->neg ? -c : c;
}

/* Digit strings +1 / -1 (s > 0 for dec); malloc'd, NULL on no memory. */
static char *uinc(const char *s) {
    size_t n = strlen(s);
    char *r = malloc(n + 2);
    if (!r) return NULL;
    memcpy(r + 1, s, n + 1);
    r[0] = '0';
    size_t i = n;
    while (r[i] == '9') r[i--] = '0';
    r[i]++;
    if (r[0] == '0') memmove(r, r + 1, n + 1);
    return r;
}

static char *udec(const char *s) {
    size_t n = strlen(s);
    char *r = strdup(s);
    if (!r) return NULL;
    size_t i = n - 1;
    while (r[i] == '0') r[i--] = '9';
    r[i]--;
    if (r[0] == '0' && n > 1) memmove(r, r + 1, n);
    return r;
}

static int32_t any_digits(js_lex *x, size_t n) { return gr_repeat(x->b, digit(x), (uint32_t)n, (uint32_t)n); }

static bool all_of(const char *s, size_t n, char c) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

static int32_t dlit(js_lex *x, char c) { return gr_byte_range(x->b, (uint8_t)c, (uint8_t)c); }

/* n-digit strings >= s[0..n) / <= s[0..n) */
static int32_t ge_tail(js_lex *x, const char *s, size_t n) {
    if (n == 0) return gr_empty(x->b);
    if (all_of(s, n, '0')) return any_digits(x, n);
    int32_t r = gr_seq2(x->b, dlit(x, s[0]), ge_tail(x, s + 1, n - 1));
    if (s[0] < '9')
        r = gr_alt2(x->b, r, gr_seq2(x->b, gr_byte_range(x->b, (uint8_t)(s[0] + 1), '9'), any_digits(x, n - 1)));
    return r;
}

static int32_t le_tail(js_lex *x, const char *s, size_t n) {
    if (n == 0) return gr_empty(x->b);
    if (all_of(s, n, '9')) return any_digits(x, n);
    int32_t r = gr_seq2(x->b, dlit(x, s[0]), le_tail(x, s + 1, n - 1));
    if (s[0] > '0')
        r = gr_alt2(x->b, r, gr_seq2(x->b, gr_byte_range(x->b, '0', (uint8_t)(s[0] - 1)), any_digits(x, n - 1)));
    return r;
}

/* n-digit strings in [lo, hi] (lo <= hi) */
static int32_t same_len(js_lex *x, const char *lo, const char *hi, size_t n) {
    gr_builder *b = x->b;
    if (n == 0) return gr_empty(b);
    if (lo[0] == hi[0]) return gr_seq2(b, dlit(x, lo[0]), same_len(x, lo + 1, hi + 1, n - 1));
    if (all_of(lo + 1, n - 1, '0') && all_of(hi + 1, n - 1, '9'))
        return gr_seq2(b, gr_byte_range(b, (uint8_t)lo[0], (uint8_t)hi[0]), any_digits(x, n - 1));
    int32_t r = gr_alt2(b, gr_seq2(b, dlit(x, lo[0]), ge_tail(x, lo + 1, n - 1)),
                        gr_seq2(b, dlit(x, hi[0]), le_tail(x, hi + 1, n - 1)));
    if (lo[0] + 1 <= hi[0] - 1)
        r = gr_alt2(b, r,
                    gr_seq2(b, gr_byte_range(b, (uint8_t)(lo[0] + 1), (uint8_t)(hi[0] - 1)), any_digits(x, n - 1)));
    return r;
}

/* Canonical decimal integers (no leading zeros) in [lo, hi]; hi NULL: unbounded. */
static int32_t uint_range(js_lex *x, const char *lo, const char *hi) {
    gr_builder *b = x->b;
    if (hi && ucmp(lo, hi) > 0) return gr_nothing(b);
    size_t nl = strlen(lo), nh = hi ? strlen(hi) : nl;
    char *a = malloc(nh + 1), *z = malloc(nh + 1);
    if (!a || !z) {
        free(a);
        free(z);
        oom(x);
        return -1;
    }
    int32_t r = gr_nothing(b);
    for (size_t L = nl; L <= nh; L++) {
        if (L == nl) memcpy(a, lo, L);
        else {
            a[0] = '1';
            memset(a + 1, '0', L - 1);
        }
        if (hi && L == nh) memcpy(z, hi, L);
        else memset(z, '9', L);
        r = gr_alt2(b, r, same_len(x, a, z, L));
    }
    free(a);
    free(z);
    if (!hi) r = gr_alt2(b, r, gr_seq2(b, gr_byte_range(b, '1', '9'), gr_repeat(b, digit(x), (uint32_t)nl, GR_INF)));
    return r;
}

/* Fraction digits f (non-empty) after a prefix of k digits, such that 0.f is >= L (when
 * tl: the prefix equals L's so far) and <= U (when tu). */
static int32_t frac_tail(js_lex *x, const char *L, bool lx, const char *U, bool ux, size_t k, bool tl, bool tu);

static bool frac_empty_ok(const char *L, bool lx, const char *U, bool ux, size_t k, bool tl, bool tu) {
    bool lo_ok = !tl || (k >= strlen(L) && !lx);
    bool hi_ok = !tu || k < strlen(U) || !ux;
    return lo_ok && hi_ok;
}

static int32_t frac_cont(js_lex *x, const char *L, bool lx, const char *U, bool ux, size_t k, bool tl, bool tu) {
    int32_t t = frac_tail(x, L, lx, U, ux, k, tl, tu);
    return frac_empty_ok(L, lx, U, ux, k, tl, tu) ? gr_alt2(x->b, gr_empty(x->b), t) : t;
}

static int32_t frac_tail(js_lex *x, const char *L, bool lx, const char *U, bool ux, size_t k, bool tl, bool tu) {
    gr_builder *b = x->b;
    size_t nL = strlen(L), nU = strlen(U);
    if (tl && k >= nL && !lx) tl = false;
    if (!tl && !tu) return gr_repeat(b, digit(x), 1, GR_INF);
    if (tl && tu && k >= nL && k >= nU) return gr_nothing(b);
    if (tl && !tu && k >= nL) /* strictly above: some nonzero digit */
        return gr_seq(b,
                      (int32_t[]){gr_repeat(b, digit(x), 0, GR_INF), gr_byte_range(b, '1', '9'),
                                  gr_repeat(b, digit(x), 0, GR_INF)},
                      3);
    if (tu && !tl && k >= nU) return ux ? gr_nothing(b) : gr_repeat(b, dlit(x, '0'), 1, GR_INF);
    char l = tl ? (k < nL ? L[k] : '0') : '0';
    char u = tu ? (k < nU ? U[k] : '0') : '9';
    if (l > u) return gr_nothing(b);
    int32_t r = gr_nothing(b);
    if (tl && tu && l == u) return gr_seq2(b, dlit(x, l), frac_cont(x, L, lx, U, ux, k + 1, true, true));
    if (tl) r = gr_alt2(b, r, gr_seq2(b, dlit(x, l), frac_cont(x, L, lx, U, ux, k + 1, true, false)));
    if (tu) r = gr_alt2(b, r, gr_seq2(b, dlit(x, u), frac_cont(x, L, lx, U, ux, k + 1, false, true)));
    char m0 = tl ? (char)(l + 1) : l, m1 = tu ? (char)(u - 1) : u;
    if (m0 <= m1)
        r = gr_alt2(b, r, gr_seq2(b, gr_byte_range(b, (uint8_t)m0, (uint8_t)m1), gr_repeat(b, digit(x), 0, GR_INF)));
    return r;
}

/* The optional fraction part ("" or "." digits) of a magnitude whose integer part is
 * fixed, bounded below by 0.L (tl) and above by 0.U (tu). */
static int32_t frac_part(js_lex *x, const char *L, bool lx, const char *U, bool ux, bool tl, bool tu) {
    gr_builder *b = x->b;
    int32_t dotted = gr_seq2(b, js_lit(x, "."), frac_tail(x, L, lx, U, ux, 0, tl, tu));
    return frac_empty_ok(L, lx, U, ux, 0, tl, tu) ? gr_alt2(b, gr_empty(b), dotted) : dotted;
}

/* Magnitudes m >= 0 spelled int("." digits)? with lo <= m <= hi (lo NULL: 0 included;
 * hi NULL: none); lo and hi are non-negative. */
static int32_t mag_range(js_lex *x, const js_dec *lo, bool lx, const js_dec *hi, bool hx) {
    gr_builder *b = x->b;
    if (lo && hi) {
        int c = mag_cmp(lo, hi);
        if (c > 0 || (c == 0 && (lx || hx))) return gr_nothing(b);
    }
    const char *IL = lo ? lo->ip : "0", *FL = lo ? lo->fp : "";
    bool tl = lo != NULL;
    if (!lo) lx = false;
    if (hi && strcmp(IL, hi->ip) == 0) return gr_seq2(b, js_lit(x, IL), frac_part(x, FL, lx, hi->fp, hx, tl, true));
    int32_t r = gr_seq2(b, js_lit(x, IL), frac_part(x, FL, lx, "", false, tl, false));
    char *i1 = uinc(IL);
    char *i2 = hi ? udec(hi->ip) : NULL;
    if (!i1 || (hi && !i2)) {
        free(i1);
        free(i2);
        oom(x);
        return -1;
    }
    int32_t any_frac = frac_part(x, "", false, "", false, false, false);
    if (!hi || ucmp(i1, i2) <= 0) r = gr_alt2(b, r, gr_seq2(b, uint_range(x, i1, i2), any_frac));
    if (hi) r = gr_alt2(b, r, gr_seq2(b, js_lit(x, hi->ip), frac_part(x, "", false, hi->fp, hx, false, true)));
    free(i1);
    free(i2);
    return r;
}

static js_dec dec_abs(const js_dec *d) { return (js_dec){false, d->ip, d->fp}; }

/* Signed integer bounds from decimal ones: ceil of lo (+1 when exclusive and integral),
 * floor of hi (-1 likewise). The results own their digits. */
static int int_bound(js_lex *x, const js_dec *d, bool excl, bool upper, js_dec *out) {
    *out = (js_dec){0};
    bool frac = d->fp[0] != 0;
    /* the magnitude moves up when (rounding away from zero) */
    bool neg = d->neg;
    char *m;
    if (frac) {
        bool away = upper ? neg : !neg; /* ceil of a positive, floor of a negative */
        m = away ? uinc(d->ip) : strdup(d->ip);
    } else if (!excl) {
        m = strdup(d->ip);
    } else {
        bool up = upper ? neg : !neg; /* lo+1 on a positive, hi-1 on a negative grow |x| */
        /* clang-format off */
        if (up)
            m = uinc(d->ip);
        else if (strcmp(d->ip, "0") == 0) { /* 0 exclusive: -1 or 1 */
            m = strdup("1");
            neg = upper;
        } else
            m = udec(d->ip);
        /* clang-format on */
    }
    if (!m) {
        oom(x);
        return -1;
    }
    int rc = dec_set(x, out, neg, m, strlen(m), "", 0);
    free(m);
    return rc;
}

int32_t js_num_range(js_lex *x, const js_dec *lo, bool lo_excl, const js_dec *hi, bool hi_excl, bool integer_only) {
    gr_builder *b = x->b;
    if (integer_only) {
        js_dec l = {0}, h = {0};
        if ((lo && int_bound(x, lo, lo_excl, false, &l) < 0) || (hi && int_bound(x, hi, hi_excl, true, &h) < 0)) {
            js_dec_free(&l);
            js_dec_free(&h);
            return -1;
        }
        int32_t r = gr_nothing(b);
        if (!(lo && hi && js_dec_cmp(&l, &h) > 0)) {
            if (!hi || !h.neg) /* non-negative part */
                r = gr_alt2(b, r, uint_range(x, lo && !l.neg ? l.ip : "0", hi ? h.ip : NULL));
            if (!lo || l.neg) /* negative part: -m, m in [max(1, -hi), -lo] */
                r = gr_alt2(b, r,
                            gr_seq2(b, js_lit(x, "-"), uint_range(x, hi && h.neg ? h.ip : "1", lo ? l.ip : NULL)));
        }
        js_dec_free(&l);
        js_dec_free(&h);
        return r;
    }
    if (lo && hi) {
        int c = js_dec_cmp(lo, hi);
        if (c > 0 || (c == 0 && (lo_excl || hi_excl))) return gr_nothing(b);
    }
    int32_t r = gr_nothing(b);
    /* x >= 0, spelled without a sign */
    bool hi_nonneg = !hi || !hi->neg;
    if (hi_nonneg) {
        js_dec la, ha;
        if (lo && !lo->neg) la = dec_abs(lo);
        if (hi) ha = dec_abs(hi);
        r = gr_alt2(b, r,
                    mag_range(x, lo && !lo->neg ? &la : NULL, lo && !lo->neg && lo_excl, hi ? &ha : NULL, hi_excl));
    }
    /* x < 0 (or -0), spelled "-" m: m <= -lo, m >= -hi */
    if (!lo || lo->neg) {
        js_dec mlo = {false, "0", ""}, mhi;
        bool mlo_x = false;
        const js_dec *pl = NULL;
        if (hi && hi->neg) {
            mlo = dec_abs(hi);
            mlo_x = hi_excl;
            pl = &mlo;
        } else if (hi && hi_excl && strcmp(hi->ip, "0") == 0 && hi->fp[0] == 0) {
            mlo_x = true; /* x < 0: -0 is not below 0 */
            pl = &mlo;
        }
        if (lo) mhi = dec_abs(lo);
        r = gr_alt2(b, r, gr_seq2(b, js_lit(x, "-"), mag_range(x, pl, mlo_x, lo ? &mhi : NULL, lo_excl)));
    }
    return r;
}

void js_lex_free(js_lex *x) {
    free(x->strc);
    x->strc = NULL;
    x->n_strc = x->cap_strc = 0;
}
