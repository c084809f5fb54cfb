/* gbnf.c — the GBNF front end (grammar.h: gr_gbnf): llama.cpp's grammar syntax parsed
 * into builder rules, one builder rule per GBNF rule. It owns the syntax and its error
 * messages (each with a line and column, columns counting bytes from 1); the meaning —
 * left recursion, rules that can never finish, budgets — is compile's.
 *
 * The syntax, as llama.cpp documents it: `name ::= alternatives`; alternatives split by
 * `|`; a sequence of items: "literal" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH
 * \UHHHHHHHH), [class] / [^class] with ranges and the same escapes, `.` (any character,
 * newline included), a rule name, ( group ); each item optionally followed by * + ? {m}
 * {m,} {m,n}. Characters are Unicode scalar values, matched as UTF-8. `#` starts a
 * comment to the end of the line. A rule ends at a newline, except inside parentheses,
 * right after `::=` or `|`, and (an allowance past llama.cpp, which would refuse it) when
 * the next line starts with `|`. Rule names are letters, digits and `-` (and `_`, also
 * an allowance). Errors: a syntax error where it is found, a rule defined twice, a rule
 * used but never defined (at its first use), no start rule. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "grammar/grammar_impl.h"

#define GB_MAX_DEPTH 200 /* nested parentheses */

typedef struct {
    gr_builder *b;
    const char *src;
    size_t n, pos;
    /* per builder rule id: where it was first used and where defined (SIZE_MAX: not) */
    size_t *used_at, *def_at;
    size_t n_ids;
} gb;

/* The line and column (from 1, columns in bytes) of src[at]. */
static void line_col(const gb *p, size_t at, size_t *line, size_t *col) {
    *line = *col = 1;
    for (size_t i = 0; i < at && i < p->n; i++) {
        if (p->src[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

static bool fail(gb *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(gb *p, size_t at, const char *fmt, ...) {
    size_t line, col;
    line_col(p, at, &line, &col);
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gr_builder_fail(p->b, CN_STATUS_INVALID_ARG, "GBNF line %zu, column %zu: %s", line, col, msg);
    return false;
}

static bool at(const gb *p, char c) { return p->pos < p->n && p->src[p->pos] == c; }

static bool oom(gb *p) {
    gr_builder_fail(p->b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
    return false;
}

static bool is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Blanks and comments; newlines too when nl. */
static void space(gb *p, bool nl) {
    while (p->pos < p->n) {
        char c = p->src[p->pos];
        if (c == ' ' || c == '\t') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->src[p->pos] != '\n' && p->src[p->pos] != '\r') p->pos++;
        } else if (nl && (c == '\n' || c == '\r')) {
            p->pos++;
        } else {
            break;
        }
    }
}

/* Room for rule ids below need in used_at and def_at (one capacity, n_ids; new slots
 * SIZE_MAX). */
static bool ids_grow(gb *p, size_t need) {
    const size_t nn = cn_grow_cap(p->n_ids, need, sizeof *p->used_at);
    size_t *u = nn ? realloc(p->used_at, nn * sizeof *u) : NULL;
    if (u) p->used_at = u;
    size_t *d = u ? realloc(p->def_at, nn * sizeof *d) : NULL;
    if (d) p->def_at = d;
    if (!u || !d) return oom(p);
    for (size_t i = p->n_ids; i < nn; i++) p->used_at[i] = p->def_at[i] = SIZE_MAX;
    p->n_ids = nn;
    return true;
}

/* The builder rule called src[s..e), its use/definition slots ready; -1 on error. */
static int32_t rule_id(gb *p, size_t s, size_t e) {
    char name[256];
    if (e - s >= sizeof name) return fail(p, s, "a rule name longer than %zu bytes", sizeof name - 1), -1;
    memcpy(name, p->src + s, e - s);
    name[e - s] = 0;
    int32_t id = gr_rule(p->b, name);
    if (id < 0) return -1;
    if ((size_t)id >= p->n_ids && !ids_grow(p, (size_t)id + 1)) return -1;
    return id;
}

static bool next_cp(gb *p, uint32_t *out) {
    return gr_utf8_next(p->src, p->n, &p->pos, out) || fail(p, p->pos, "invalid UTF-8");
}

/* One character of a literal or class: an escape or a UTF-8 scalar value. */
static bool parse_char(gb *p, uint32_t *out) {
    size_t start = p->pos;
    if (!at(p, '\\')) return next_cp(p, out);
    p->pos++;
    if (p->pos >= p->n) return fail(p, start, "the grammar ends inside an escape");
    char c = p->src[p->pos++];
    int digits = 0;
    switch (c) {
    case 'n': *out = '\n'; return true;
    case 'r': *out = '\r'; return true;
    case 't': *out = '\t'; return true;
    case '\\':
    case '"':
    case '[':
    case ']': *out = (uint32_t)(unsigned char)c; return true;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: return fail(p, start, "unknown escape '\\%c'", c);
    }
    uint64_t v = 0;
    for (int i = 0; i < digits; i++, p->pos++) {
        char h = p->pos < p->n ? p->src[p->pos] : 0;
        int d = h >= '0' && h <= '9' ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) return fail(p, start, "'\\%c' needs %d hex digits", c, digits);
        v = v * 16 + (uint64_t)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(p, start, "'\\%c' names no Unicode character", c);
    *out = (uint32_t)v;
    return true;
}

/* "..." with p->pos at the opening quote. */
static int32_t parse_literal(gb *p) {
    size_t start = p->pos++;
    cn_buf buf = {0};
    int32_t r = -1;
    for (;;) {
        if (p->pos >= p->n) {
            fail(p, start, "unterminated literal");
            goto out;
        }
        if (at(p, '"')) break;
        uint32_t c;
        char u[4];
        if (!parse_char(p, &c)) goto out;
        if (!cn_buf_put(&buf, u, cn_utf8_encode(c, u))) {
            oom(p);
            goto out;
        }
    }
    p->pos++;
    r = gr_literal(p->b, buf.p, buf.n);
out:
    cn_buf_free(&buf);
    return r;
}

/* [...] with p->pos at '['. */
static int32_t parse_class(gb *p) {
    size_t start = p->pos++;
    bool neg = at(p, '^');
    if (neg) p->pos++;
    uint32_t *r = NULL; /* (nr, 2) the ranges; cap counts uint32_t, two a range */
    size_t nr = 0, cap = 0;
    while (!at(p, ']')) {
        if (p->pos >= p->n) {
            free(r);
            return fail(p, start, "unterminated character class"), -1;
        }
        size_t item = p->pos;
        uint32_t lo, hi;
        if (!parse_char(p, &lo)) {
            free(r);
            return -1;
        }
        hi = lo;
        if (at(p, '-') && p->pos + 1 < p->n && p->src[p->pos + 1] != ']') {
            p->pos++;
            if (!parse_char(p, &hi)) {
                free(r);
                return -1;
            }
            if (hi < lo) {
                free(r);
                return fail(p, item, "range out of order in a character class"), -1;
            }
        }
        if (!CN_GROW(r, cap, 2 * nr + 2)) {
            free(r);
            return oom(p), -1;
        }
        r[2 * nr] = lo;
        r[2 * nr + 1] = hi;
        nr++;
    }
    p->pos++;
    int32_t x = nr || neg ? gr_codepoints(p->b, r, nr, neg) : gr_nothing(p->b);
    free(r);
    return x;
}

static bool parse_uint(gb *p, uint32_t *v) {
    if (!(p->pos < p->n && p->src[p->pos] >= '0' && p->src[p->pos] <= '9')) return fail(p, p->pos, "expected a number");
    size_t start = p->pos;
    uint64_t x = 0;
    while (p->pos < p->n && p->src[p->pos] >= '0' && p->src[p->pos] <= '9') {
        x = x * 10 + (uint64_t)(p->src[p->pos++] - '0');
        if (x >= GR_INF) return fail(p, start, "a repeat count past %u", GR_INF - 1);
    }
    *v = (uint32_t)x;
    return true;
}

static int32_t parse_alternates(gb *p, bool nested, int depth);

/* A sequence's items or a rule's alternatives as they are parsed. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} gb_list;

static bool push(gb *p, gb_list *l, int32_t x) {
    if (!CN_GROW(l->v, l->cap, l->n + 1)) return oom(p);
    l->v[l->n++] = x;
    return true;
}

/* Items up to '|', ')', a newline (outside parentheses) or the end. */
static int32_t parse_sequence(gb *p, bool nested, int depth) {
    gb_list items = {0};
    int32_t res = -1;
    for (;;) {
        if (p->pos >= p->n) break;
        char c = p->src[p->pos];
        size_t here = p->pos;
        int32_t item = -2; /* -2: not an item */
        if (c == '"') {
            item = parse_literal(p);
        } else if (c == '[') {
            item = parse_class(p);
        } else if (c == '.') {
            p->pos++;
            item = gr_codepoints(p->b, (const uint32_t[]){0, 0x10FFFF}, 1, false);
        } else if (c == '(') {
            if (depth >= GB_MAX_DEPTH) {
                fail(p, here, "parentheses nested deeper than %d", GB_MAX_DEPTH);
                goto out;
            }
            p->pos++;
            space(p, true);
            item = parse_alternates(p, true, depth + 1);
            if (item < 0) goto out;
            if (!at(p, ')')) {
                fail(p, here, "missing ')' for this '('");
                goto out;
            }
            p->pos++;
        } else if (is_name(c)) {
            size_t s = p->pos;
            while (p->pos < p->n && is_name(p->src[p->pos])) p->pos++;
            int32_t id = rule_id(p, s, p->pos);
            if (id < 0) goto out;
            if (p->used_at[id] == SIZE_MAX) p->used_at[id] = s;
            item = gr_ref(p->b, id);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (items.n == 0) {
                fail(p, here, "'%c' has no item before it to repeat", c);
                goto out;
            }
            uint32_t lo = 0, hi = GR_INF;
            p->pos++;
            if (c == '+') lo = 1;
            else if (c == '?') hi = 1;
            else if (c == '{') {
                space(p, nested);
                if (!parse_uint(p, &lo)) goto out;
                space(p, nested);
                if (at(p, '}')) {
                    hi = lo;
                } else if (at(p, ',')) {
                    p->pos++;
                    space(p, nested);
                    if (p->pos < p->n && p->src[p->pos] >= '0' && p->src[p->pos] <= '9' && !parse_uint(p, &hi))
                        goto out;
                    space(p, nested);
                    if (!at(p, '}')) {
                        fail(p, p->pos, "expected '}'");
                        goto out;
                    }
                } else {
                    fail(p, p->pos, "expected ',' or '}'");
                    goto out;
                }
                p->pos++;
                if (lo > hi) {
                    fail(p, here, "{%u,%u}: the minimum is above the maximum", lo, hi);
                    goto out;
                }
            }
            int32_t *last = &items.v[items.n - 1];
            if ((*last = gr_repeat(p->b, *last, lo, hi)) < 0) goto out;
            space(p, nested);
            continue;
        } else if (c == '<') {
            fail(p, here, "token references (<...>) are not supported");
            goto out;
        } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
            break;
        } else {
            fail(p, here, "unexpected character '%c'", c);
            goto out;
        }
        if (item < 0 || !push(p, &items, item)) goto out;
        space(p, nested);
    }
    res = gr_seq(p->b, items.v, items.n);
out:
    free(items.v);
    return res;
}

static int32_t parse_alternates(gb *p, bool nested, int depth) {
    gb_list alts = {0};
    int32_t res = -1;
    for (;;) {
        int32_t s = parse_sequence(p, nested, depth);
        if (s < 0 || !push(p, &alts, s)) goto out;
        if (!nested && !at(p, '|')) {
            /* a rule continued on a next line that starts with '|' */
            size_t save = p->pos;
            space(p, true);
            if (!at(p, '|')) p->pos = save;
        }
        if (!at(p, '|')) break;
        p->pos++;
        space(p, true);
    }
    res = gr_alt(p->b, alts.v, alts.n);
out:
    free(alts.v);
    return res;
}

static bool parse_rule(gb *p) {
    size_t s = p->pos;
    if (!is_name(p->src[p->pos])) return fail(p, s, "expected a rule name");
    while (p->pos < p->n && is_name(p->src[p->pos])) p->pos++;
    size_t e = p->pos;
    space(p, false);
    if (p->n - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3) != 0) return fail(p, p->pos, "expected '::='");
    p->pos += 3;
    int32_t id = rule_id(p, s, e);
    if (id < 0) return false;
    if (p->def_at[id] != SIZE_MAX) {
        size_t line, col;
        line_col(p, p->def_at[id], &line, &col);
        return fail(p, s, "rule '%s' is defined twice (first at line %zu, column %zu)", gr_rule_name(p->b, id), line,
                    col);
    }
    p->def_at[id] = s;
    space(p, true);
    int32_t body = parse_alternates(p, false, 0);
    if (body < 0) return false;
    if (p->pos < p->n) {
        if (at(p, ')')) return fail(p, p->pos, "unmatched ')'");
        if (!at(p, '\n') && !at(p, '\r')) return fail(p, p->pos, "expected a newline or the end of the rule");
    }
    if (gr_rule_define(p->b, id, body) < 0) return false;
    space(p, true);
    return true;
}

int32_t gr_gbnf(gr_builder *b, const char *src, size_t n, const char *root) {
    if (gr_builder_error(b)->status != CN_STATUS_OK) return -1;
    if ((!src && n) || !root) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "GBNF: the grammar text and the start rule name are required");
        return -1;
    }
    gb p = {.b = b, .src = src ? src : "", .n = n};
    int32_t res = -1;
    space(&p, true);
    while (p.pos < p.n)
        if (!parse_rule(&p)) goto out;
    for (size_t id = 0; id < p.n_ids; id++)
        if (p.used_at[id] != SIZE_MAX && p.def_at[id] == SIZE_MAX) {
            fail(&p, p.used_at[id], "undefined rule '%s'", gr_rule_name(b, (int32_t)id));
            goto out;
        }
    int32_t r = gr_rule(b, root);
    if (r < 0) goto out;
    if ((size_t)r >= p.n_ids || p.def_at[r] == SIZE_MAX) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "GBNF: the grammar has no rule named '%s' (its start rule)", root);
        goto out;
    }
    res = r;
out:
    free(p.used_at);
    free(p.def_at);
    return res;
}
