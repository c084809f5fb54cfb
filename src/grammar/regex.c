/* regex.c — the regular-expression front end (grammar.h: gr_regex_expr and
 * gr_regex_expr_unanchored): ECMAScript / PCRE pattern text parsed by recursive descent
 * straight into builder expressions. It owns the pattern syntax and the meaning of the
 * anchors; it builds no automata (compile.c does) and never matches text.
 *
 * Characters are Unicode scalar values (the pattern is UTF-8); sets of them become UTF-8
 * byte automata through gr_codepoints. \d \w are ASCII (as ECMAScript), \s is
 * ECMAScript's whitespace (ASCII blanks plus the Unicode spaces), and `.` is any scalar
 * value but \n (PCRE's default, and the choice the grammar layer documents).
 *
 * Anchors. ^ and $ are assertions, not characters, and may stand anywhere: each
 * subexpression is built as four languages, by whether the path through it passed a ^
 * (with nothing consumed before it) and whether it passed a $ (with nothing consumed
 * after it). Concatenation lets a ^ on the right through only where the left consumed
 * nothing, and a $ on the left only where the right consumes nothing; repeats follow the
 * same rule copy by copy (closed forms below). So `a^b` is empty, `(a|$)+` and
 * `^x|y$` mean what PCRE means, and in full-match mode the pattern is the union of the
 * four. Search mode (JSON Schema's "pattern") puts "any text" before the paths without
 * a ^ and after those without a $.
 *
 * JSON spelling (gr_regex_expr_unanchored). A JSON Schema pattern constrains a string's
 * decoded value, but the grammar matches the document's bytes, so every character is
 * emitted as JSON would spell it inside a string: raw, except the ones JSON requires
 * escaped — `"` and `\` and the controls U+0000..U+001F — which appear only escaped:
 * their short form (\" \\ \b \f \n \r \t) or \u00XX with hex digits in either case. Other
 * characters are accepted raw only (not as \uXXXX, nor / as \/): one canonical spelling,
 * so a model cannot wander into escapes the pattern never asked for. A character class
 * is split the same way (its raw part through gr_codepoints, its escaped members as
 * escapes), so [^a] admits `\"` but never a bare `"`.
 *
 * Not supported, each an error naming it and the byte offset: backreferences (\1, \k<n>),
 * lookaround ((?=, (?!, (?<=, (?<!), atomic groups and inline flags, possessive
 * quantifiers (they change the language), \b \B, \p{...}, POSIX [:classes:]. Large
 * bounded repeats are built as one gr_repeat; compile's state budget judges them. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "grammar/grammar_impl.h"

#define RX_MAX_DEPTH 200 /* nested groups */
#define RX_NONE (-2)     /* an empty language (never passed to the builder) */

/* ---- code point sets: sorted, merged inclusive ranges ---- */

typedef struct {
    uint32_t *r;   /* (n, 2) */
    size_t n, cap; /* cap: r's room in uint32_t, two a range */
    bool oom;
} cpset;

static void cs_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (!CN_GROW(s->r, s->cap, 2 * s->n + 2)) {
        s->oom = true;
        return;
    }
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

static void cs_norm(cpset *s) {
    if (!s->n) return;
    qsort(s->r, s->n, 2 * sizeof *s->r, cmp_pair);
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        if (m && lo <= s->r[2 * m - 1] + 1) {
            if (hi > s->r[2 * m - 1]) s->r[2 * m - 1] = hi;
        } else {
            s->r[2 * m] = lo;
            s->r[2 * m + 1] = hi;
            m++;
        }
    }
    s->n = m;
}

/* s := its complement in [0, 0x10FFFF] (s normalized). */
static void cs_negate(cpset *s) {
    cpset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next) cs_add(&o, next, s->r[2 * i] - 1);
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) cs_add(&o, next, 0x10FFFF);
    bool oom = s->oom || o.oom;
    free(s->r);
    *s = o;
    s->oom = oom;
}

static void cs_add_set(cpset *s, const cpset *t) {
    for (size_t i = 0; i < t->n; i++) cs_add(s, t->r[2 * i], t->r[2 * i + 1]);
    if (t->oom) s->oom = true;
}

static bool cs_has(const cpset *s, uint32_t c) {
    for (size_t i = 0; i < s->n; i++)
        if (c >= s->r[2 * i] && c <= s->r[2 * i + 1]) return true;
    return false;
}

/* ---- the parser ---- */

typedef struct {
    gr_builder *b;
    const char *src;
    size_t n, pos;
    bool json; /* spell characters as inside a JSON string */
} rx;

/* The four languages of a subexpression, x[s * 2 + e]: s, the path passed a ^; e, it
 * passed a $. eps bit i: x[i] holds the empty string. RX_NONE: the empty language. */
typedef struct {
    int32_t x[4];
    uint8_t eps;
} quad;

static quad q_none(void) { return (quad){{RX_NONE, RX_NONE, RX_NONE, RX_NONE}, 0}; }
static quad q_plain(int32_t e) {
    quad q = q_none();
    q.x[0] = e;
    return q;
}

static bool fail(rx *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(rx *p, size_t at, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gr_builder_fail(p->b, CN_STATUS_INVALID_ARG, "regex: %s at offset %zu", msg, at);
    return false;
}

static bool failed(const rx *p) { return gr_builder_error(p->b)->status != CN_STATUS_OK; }

static int32_t x_seq(rx *p, int32_t a, int32_t c) {
    if (a == RX_NONE || c == RX_NONE) return RX_NONE;
    return gr_seq2(p->b, a, c);
}

static int32_t x_rep(rx *p, int32_t a, uint32_t lo, uint32_t hi) {
    if (hi < lo) return RX_NONE;
    if (a == RX_NONE) return lo == 0 ? gr_empty(p->b) : RX_NONE;
    return gr_repeat(p->b, a, lo, hi);
}

/* The alternatives of v that are not RX_NONE. */
static int32_t x_alt(rx *p, int32_t *v, size_t n) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] != RX_NONE) v[m++] = v[i];
    return m ? gr_alt(p->b, v, m) : RX_NONE;
}

/* Marks hex digit v in set, in both cases. */
static void hexset_bits(uint8_t set[32], unsigned v) {
    const char *d = "0123456789abcdef";
    set[(uint8_t)d[v] >> 3] |= (uint8_t)(1u << (d[v] & 7));
    if (v >= 10) {
        uint8_t u = (uint8_t)(d[v] - 'a' + 'A');
        set[u >> 3] |= (uint8_t)(1u << (u & 7));
    }
}

static bool json_escaped(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

/* The characters of s (normalized) as an expression: raw, or in JSON spelling. */
static int32_t emit_set(rx *p, const cpset *s) {
    if (s->oom) {
        gr_builder_fail(p->b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
        return -1;
    }
    if (!p->json) return s->n ? gr_codepoints(p->b, s->r, s->n, false) : gr_nothing(p->b);
    /* raw part: s minus the escaped characters */
    static const uint32_t esc[] = {0x00, 0x1F, 0x22, 0x22, 0x5C, 0x5C};
    cpset raw = {0}, e = {0};
    for (size_t k = 0; k < 3; k++) cs_add(&e, esc[2 * k], esc[2 * k + 1]);
    cs_negate(&e);
    for (size_t i = 0; i < s->n; i++)
        for (size_t k = 0; k < e.n; k++) {
            uint32_t lo = s->r[2 * i] > e.r[2 * k] ? s->r[2 * i] : e.r[2 * k];
            uint32_t hi = s->r[2 * i + 1] < e.r[2 * k + 1] ? s->r[2 * i + 1] : e.r[2 * k + 1];
            if (lo <= hi) cs_add(&raw, lo, hi);
        }
    bool oom = raw.oom || e.oom;
    free(e.r);
    int32_t alts[2];
    size_t na = 0;
    if (raw.n && !oom) alts[na++] = gr_codepoints(p->b, raw.r, raw.n, false);
    free(raw.r);
    if (oom) {
        gr_builder_fail(p->b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
        return -1;
    }
    /* escaped part: \ then a short letter, or u00 and two hex digits */
    uint8_t shortset[32] = {0}, lo0[32] = {0}, lo1[32] = {0};
    static const struct {
        uint32_t c;
        char l;
    } shorts[] = {
        {0x08, 'b'}, {0x0C, 'f'}, {0x0A, 'n'}, {0x0D, 'r'}, {0x09, 't'}, {'"', '"'}, {'\\', '\\'},
    };
    bool any = false, any0 = false, any1 = false;
    for (size_t k = 0; k < sizeof shorts / sizeof shorts[0]; k++)
        if (cs_has(s, shorts[k].c)) {
            shortset[(uint8_t)shorts[k].l >> 3] |= (uint8_t)(1u << (shorts[k].l & 7));
            any = true;
        }
    for (uint32_t c = 0; c < 0x20; c++)
        if (cs_has(s, c)) {
            hexset_bits(c < 0x10 ? lo0 : lo1, c & 15);
            if (c < 0x10) any0 = true;
            else any1 = true;
        }
    bool q = cs_has(s, '"'), bs = cs_has(s, '\\');
    if (any || any0 || any1 || q || bs) {
        int32_t u[4];
        size_t nu = 0;
        if (any0) u[nu++] = gr_seq2(p->b, gr_literal(p->b, "0", 1), gr_byteset(p->b, lo0));
        if (any1) u[nu++] = gr_seq2(p->b, gr_literal(p->b, "1", 1), gr_byteset(p->b, lo1));
        if (q) u[nu++] = gr_literal(p->b, "22", 2);
        if (bs) {
            uint8_t cC[32] = {0};
            hexset_bits(cC, 12);
            u[nu++] = gr_seq2(p->b, gr_literal(p->b, "5", 1), gr_byteset(p->b, cC));
        }
        int32_t tail[2];
        size_t nt = 0;
        if (any) tail[nt++] = gr_byteset(p->b, shortset);
        if (nu) tail[nt++] = gr_seq2(p->b, gr_literal(p->b, "u00", 3), gr_alt(p->b, u, nu));
        alts[na++] = gr_seq2(p->b, gr_literal(p->b, "\\", 1), gr_alt(p->b, tail, nt));
    }
    return na ? gr_alt(p->b, alts, na) : gr_nothing(p->b);
}

static int32_t emit_char(rx *p, uint32_t c) {
    if (!p->json || !json_escaped(c)) {
        char u[4];
        return gr_literal(p->b, u, (size_t)cn_utf8_encode(c, u));
    }
    cpset s = {0};
    cs_add(&s, c, c);
    int32_t r = emit_set(p, &s);
    free(s.r);
    return r;
}

/* Decodes one UTF-8 scalar value at p->pos; false (error recorded) if malformed. */
static bool next_cp(rx *p, uint32_t *out) {
    return gr_utf8_next(p->src, p->n, &p->pos, out) || fail(p, p->pos, "invalid UTF-8");
}

static bool at(const rx *p, char c) { return p->pos < p->n && p->src[p->pos] == c; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* k hex digits at pos (k > 0), or digits up to '}' (k == 0); -1: not there. */
static int64_t hex_at(rx *p, size_t pos, int k, size_t *end) {
    int64_t v = 0;
    size_t i = pos;
    if (k > 0) {
        for (int j = 0; j < k; j++, i++) {
            int h = i < p->n ? hexval(p->src[i]) : -1;
            if (h < 0) return -1;
            v = v * 16 + h;
        }
    } else {
        while (i < p->n && hexval(p->src[i]) >= 0) {
            v = v * 16 + hexval(p->src[i]);
            if (v > 0x10FFFF) return -1;
            i++;
        }
        if (i == pos || i >= p->n || p->src[i] != '}') return -1;
        i++;
    }
    *end = i;
    return v;
}

static void set_digit(cpset *s) { cs_add(s, '0', '9'); }
static void set_word(cpset *s) {
    cs_add(s, '0', '9');
    cs_add(s, 'A', 'Z');
    cs_add(s, 'a', 'z');
    cs_add(s, '_', '_');
}
static void set_space(cpset *s) {
    static const uint32_t sp[] = {0x09,   0x0D,   0x20,   0x20,   0xA0,   0xA0,   0x1680, 0x1680, 0x2000, 0x200A,
                                  0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i += 2) cs_add(s, sp[i], sp[i + 1]);
}

/* The value of \xHH or \uHHHH (digits of them), or of the braced form \x{H...} (p->pos
 * at the letter; *end after the escape); -1 if malformed. */
static int64_t hex_escape(rx *p, int digits, size_t *end) {
    const bool braced = p->pos + 1 < p->n && p->src[p->pos + 1] == '{';
    return braced ? hex_at(p, p->pos + 2, 0, end) : hex_at(p, p->pos + 1, digits, end);
}

/* An escape after '\' (p->pos at the character after it). Either a class shorthand
 * (adds to *set, returns 1) or one code point (*cp, returns 0); -1 on error. */
static int parse_escape(rx *p, bool in_class, uint32_t *cp, cpset *set) {
    size_t start = p->pos - 1;
    if (p->pos >= p->n) return fail(p, start, "the pattern ends in a lone '\\'"), -1;
    char c = p->src[p->pos];
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S': {
        p->pos++;
        cpset t = {0};
        if (c == 'd' || c == 'D') set_digit(&t);
        else if (c == 'w' || c == 'W') set_word(&t);
        else set_space(&t);
        cs_norm(&t);
        if (c <= 'Z') cs_negate(&t);
        cs_add_set(set, &t);
        free(t.r);
        return 1;
    }
    /* clang-format off */
    case 'n': p->pos++; *cp = '\n'; return 0;
    case 't': p->pos++; *cp = '\t'; return 0;
    case 'r': p->pos++; *cp = '\r'; return 0;
    case 'f': p->pos++; *cp = '\f'; return 0;
    case 'v': p->pos++; *cp = '\v'; return 0;
    case 'b':
        if (in_class) { p->pos++; *cp = '\b'; return 0; }
        return fail(p, start, "the word boundary \\b is not supported"), -1;
    case 'B': return fail(p, start, "the non-word boundary \\B is not supported"), -1;
    case '0':
        if (p->pos + 1 < p->n && p->src[p->pos + 1] >= '0' && p->src[p->pos + 1] <= '9')
            return fail(p, start, "octal escapes are not supported"), -1;
        p->pos++;
        *cp = 0;
        return 0;
    case '1': case '2': case '3': case '4': case '5': case '6': case '7': case '8': case '9':
        return fail(p, start, "backreference \\%c is not supported", c), -1;
    case 'k': return fail(p, start, "the named backreference \\k is not supported"), -1;
    case 'p': case 'P': return fail(p, start, "Unicode property escapes (\\%c{...}) are not supported", c), -1;
    /* clang-format on */
    case 'c':
        if (p->pos + 1 < p->n && ((p->src[p->pos + 1] | 0x20) >= 'a' && (p->src[p->pos + 1] | 0x20) <= 'z')) {
            *cp = (uint32_t)(p->src[p->pos + 1] & 0x1F);
            p->pos += 2;
            return 0;
        }
        return fail(p, start, "\\c must be followed by a letter"), -1;
    case 'x': {
        size_t end;
        int64_t v = hex_escape(p, 2, &end);
        if (v < 0) return fail(p, start, "\\x needs two hex digits or {hex}"), -1;
        p->pos = end;
        *cp = (uint32_t)v;
        break;
    }
    case 'u': {
        size_t end;
        int64_t v = hex_escape(p, 4, &end);
        if (v < 0) return fail(p, start, "\\u needs four hex digits or {hex}"), -1;
        p->pos = end;
        if (v >= 0xD800 && v <= 0xDBFF && end + 1 < p->n && p->src[end] == '\\' && p->src[end + 1] == 'u') {
            size_t e2;
            int64_t w = hex_at(p, end + 2, 4, &e2);
            if (w >= 0xDC00 && w <= 0xDFFF) {
                v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                p->pos = e2;
            }
        }
        *cp = (uint32_t)v;
        break;
    }
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return fail(p, start, "the escape \\%c is not supported", c), -1;
        if (!next_cp(p, cp)) return -1;
        return 0;
    }
    if (*cp >= 0xD800 && *cp <= 0xDFFF)
        return fail(p, start, "a lone surrogate \\u%04X is not a character", (unsigned)*cp), -1;
    if (*cp > 0x10FFFF) return fail(p, start, "\\u{%X} is past U+10FFFF", (unsigned)*cp), -1;
    return 0;
}

/* [...] with p->pos just past '['. */
static bool parse_class(rx *p, cpset *out) {
    size_t start = p->pos - 1;
    bool neg = at(p, '^');
    if (neg) p->pos++;
    while (!at(p, ']')) {
        if (p->pos >= p->n) return fail(p, start, "missing ']'");
        uint32_t lo = 0;
        int k;
        size_t item = p->pos;
        if (at(p, '\\')) {
            p->pos++;
            k = parse_escape(p, true, &lo, out);
        } else if (at(p, '[') && p->pos + 1 < p->n &&
                   (p->src[p->pos + 1] == ':' || p->src[p->pos + 1] == '=' || p->src[p->pos + 1] == '.')) {
            return fail(p, p->pos, "POSIX classes ([:name:]) are not supported");
        } else {
            k = next_cp(p, &lo) ? 0 : -1;
        }
        if (k < 0) return false;
        if (k == 0 && at(p, '-') && p->pos + 1 < p->n && p->src[p->pos + 1] != ']') {
            p->pos++;
            uint32_t hi = 0;
            int k2;
            cpset junk = {0};
            if (at(p, '\\')) {
                p->pos++;
                k2 = parse_escape(p, true, &hi, &junk);
            } else {
                k2 = next_cp(p, &hi) ? 0 : -1;
            }
            free(junk.r);
            if (k2 < 0) return false;
            if (k2 == 1) return fail(p, item, "a range cannot end in a class shorthand");
            if (hi < lo) return fail(p, item, "range out of order in a character class");
            cs_add(out, lo, hi);
        } else if (k == 0) {
            cs_add(out, lo, lo);
        }
    }
    p->pos++;
    cs_norm(out);
    if (neg) cs_negate(out);
    return !out->oom || fail(p, start, "out of memory");
}

/* ---- quads: concatenation, union, repetition ---- */

static quad q_seq(rx *p, const quad *a, const quad *c) {
    int32_t pieces[4][16];
    size_t np[4] = {0};
    uint8_t eps = 0;
    for (int i = 0; i < 4; i++) {
        if (a->x[i] == RX_NONE) continue;
        int s1 = i >> 1, e1 = i & 1;
        for (int j = 0; j < 4; j++) {
            if (c->x[j] == RX_NONE) continue;
            int s2 = j >> 1, e2 = j & 1;
            bool ea = a->eps >> i & 1, ec = c->eps >> j & 1;
            /* a ^ on the right needs nothing consumed on the left; a $ on the left, nothing on the right */
            if (s2 && !ea) continue;
            if (e1 && !ec) continue;
            int32_t l = s2 ? gr_empty(p->b) : a->x[i];
            int32_t r = e1 ? gr_empty(p->b) : c->x[j];
            int k = (s1 | s2) << 1 | (e1 | e2);
            pieces[k][np[k]++] = x_seq(p, l, r);
            if (ea && ec) eps |= (uint8_t)(1u << k);
        }
    }
    quad q = q_none();
    for (int k = 0; k < 4; k++) q.x[k] = x_alt(p, pieces[k], np[k]);
    q.eps = eps;
    return q;
}

/* r{m,n} (n may be GR_INF). The four languages, copy by copy: a ^-path is ε-copies, the
 * copy with the last ^, then plain copies; a $-path mirrors it; a ^$-path is one copy
 * with both, or a ^-copy, plain copies, a $-copy. ε-copies pad the count where the
 * copies around allow the empty string. */
static quad q_repeat(rx *p, const quad *r, uint32_t m, uint32_t n) {
    quad q = q_none();
    if (n == 0) {
        q.x[0] = gr_empty(p->b);
        q.eps = 1;
        return q;
    }
    bool e00 = r->eps & 1, e01 = r->eps >> 1 & 1, e10 = r->eps >> 2 & 1;
    bool pad_before = e00 || e10, pad_after = e00 || e01, pad = pad_before || pad_after;
    uint32_t n1 = n == GR_INF ? GR_INF : n - 1;
    uint32_t n2 = n == GR_INF ? GR_INF : n - 2;
    uint32_t m1 = m > 0 ? m - 1 : 0, m2 = m > 1 ? m - 2 : 0;
    q.x[0] = x_rep(p, r->x[0], m, n);
    if (r->x[2] != RX_NONE) q.x[2] = x_seq(p, r->x[2], x_rep(p, r->x[0], pad_before ? 0 : m1, n1));
    if (r->x[1] != RX_NONE) q.x[1] = x_seq(p, x_rep(p, r->x[0], pad_after ? 0 : m1, n1), r->x[1]);
    int32_t both[2];
    size_t nb = 0;
    if (r->x[3] != RX_NONE && (pad || m <= 1)) both[nb++] = r->x[3];
    if (n >= 2 && r->x[2] != RX_NONE && r->x[1] != RX_NONE)
        both[nb++] = x_seq(p, x_seq(p, r->x[2], x_rep(p, r->x[0], pad ? 0 : m2, n2)), r->x[1]);
    q.x[3] = x_alt(p, both, nb);
    /* the empty string: the ORs of at most min(n, 4) ε-copies (any k >= m reaches them by
     * repeating a copy), plus no copies at all when m == 0 */
    uint8_t E = r->eps, S = 0;
    if (E && m <= n) {
        uint8_t cur = E;
        S = E;
        for (uint32_t k = 2; k <= 4 && k <= n; k++) {
            uint8_t nx = 0;
            for (int a = 0; a < 4; a++)
                if (cur >> a & 1)
                    for (int c = 0; c < 4; c++)
                        if (E >> c & 1) nx |= (uint8_t)(1u << (a | c));
            cur = nx;
            S |= cur;
        }
    }
    if (m == 0) S |= 1;
    for (int k = 0; k < 4; k++)
        if ((S >> k & 1) && q.x[k] == RX_NONE) q.x[k] = gr_empty(p->b);
    q.eps = S;
    return q;
}

/* ---- recursive descent ---- */

static bool parse_alt(rx *p, int depth, quad *out);

static bool quant_at(rx *p, size_t pos, uint32_t *lo, uint32_t *hi, size_t *end, bool *bad) {
    /* {n} {n,} {n,m}; anything else is a literal '{' (as ECMAScript's Annex B and PCRE) */
    size_t i = pos + 1;
    uint64_t a = 0, c;
    *bad = false;
    if (i >= p->n || p->src[i] < '0' || p->src[i] > '9') return false;
    while (i < p->n && p->src[i] >= '0' && p->src[i] <= '9') {
        a = a * 10 + (uint64_t)(p->src[i++] - '0');
        if (a >= GR_INF) *bad = true, a = GR_INF - 1;
    }
    c = a;
    if (i < p->n && p->src[i] == ',') {
        i++;
        if (i < p->n && p->src[i] >= '0' && p->src[i] <= '9') {
            c = 0;
            while (i < p->n && p->src[i] >= '0' && p->src[i] <= '9') {
                c = c * 10 + (uint64_t)(p->src[i++] - '0');
                if (c >= GR_INF) *bad = true, c = GR_INF - 1;
            }
        } else {
            c = GR_INF;
        }
    }
    if (i >= p->n || p->src[i] != '}') {
        *bad = false;
        return false;
    }
    *lo = (uint32_t)a;
    *hi = (uint32_t)c;
    *end = i + 1;
    return true;
}

static bool is_quant(rx *p) {
    if (p->pos >= p->n) return false;
    char c = p->src[p->pos];
    if (c == '*' || c == '+' || c == '?') return true;
    uint32_t lo, hi;
    size_t end;
    bool bad;
    return c == '{' && quant_at(p, p->pos, &lo, &hi, &end, &bad);
}

static bool parse_group(rx *p, int depth, quad *out) {
    size_t start = p->pos;
    p->pos++;
    if (at(p, '?')) {
        const char *s = p->src + p->pos;
        size_t left = p->n - p->pos;
        if (left >= 2 && s[1] == ':') {
            p->pos += 2;
        } else if (left >= 2 && (s[1] == '=' || s[1] == '!')) {
            return fail(p, start, "lookahead (?%c...) is not supported", s[1]);
        } else if (left >= 3 && s[1] == '<' && (s[2] == '=' || s[2] == '!')) {
            return fail(p, start, "lookbehind (?<%c...) is not supported", s[2]);
        } else if (left >= 2 && (s[1] == '<' || s[1] == '\'' || (s[1] == 'P' && left >= 3 && s[2] == '<'))) {
            char close = s[1] == '\'' ? '\'' : '>';
            p->pos += s[1] == 'P' ? 3 : 2;
            size_t name = p->pos;
            while (p->pos < p->n && (p->src[p->pos] == '_' || (p->src[p->pos] >= '0' && p->src[p->pos] <= '9') ||
                                     ((p->src[p->pos] | 0x20) >= 'a' && (p->src[p->pos] | 0x20) <= 'z')))
                p->pos++;
            if (p->pos == name || p->src[name] <= '9' || !at(p, close)) return fail(p, start, "a bad group name");
            p->pos++;
        } else if (left >= 2 && s[1] == '>') {
            return fail(p, start, "atomic groups (?>...) are not supported");
        } else {
            return fail(p, start, "inline flags and other (?...) groups are not supported");
        }
    }
    if (depth >= RX_MAX_DEPTH) return fail(p, start, "groups nested deeper than %d", RX_MAX_DEPTH);
    if (!parse_alt(p, depth + 1, out)) return false;
    if (!at(p, ')')) return fail(p, start, "missing ')'");
    p->pos++;
    return true;
}

/* One atom; false on error. */
static bool parse_atom(rx *p, int depth, quad *out) {
    size_t start = p->pos;
    char c = p->src[p->pos];
    *out = q_none();
    switch (c) {
    case '(': return parse_group(p, depth, out);
    case '*':
    case '+':
    case '?': return fail(p, start, "nothing to repeat before '%c'", c);
    case '^':
        p->pos++;
        out->x[2] = gr_empty(p->b);
        out->eps = 1u << 2;
        return true;
    case '$':
        p->pos++;
        out->x[1] = gr_empty(p->b);
        out->eps = 1u << 1;
        return true;
    case '.': {
        p->pos++;
        cpset s = {0};
        cs_add(&s, '\n', '\n');
        cs_negate(&s);
        out->x[0] = emit_set(p, &s);
        free(s.r);
        return true;
    }
    case '[': {
        p->pos++;
        cpset s = {0};
        bool ok = parse_class(p, &s);
        if (ok) out->x[0] = emit_set(p, &s);
        free(s.r);
        return ok;
    }
    case '{':
        if (is_quant(p)) return fail(p, start, "nothing to repeat before '{'");
        p->pos++;
        out->x[0] = emit_char(p, '{');
        return true;
    case '\\': {
        p->pos++;
        uint32_t cp = 0;
        cpset s = {0};
        int k = parse_escape(p, false, &cp, &s);
        if (k == 1) {
            cs_norm(&s);
            out->x[0] = emit_set(p, &s);
        } else if (k == 0) {
            out->x[0] = emit_char(p, cp);
        }
        free(s.r);
        return k >= 0;
    }
    default: {
        uint32_t cp;
        if (!next_cp(p, &cp)) return false;
        out->x[0] = emit_char(p, cp);
        return true;
    }
    }
}

static bool parse_quantified(rx *p, int depth, quad *out) {
    char first = p->src[p->pos];
    if (!parse_atom(p, depth, out)) return false;
    if (!is_quant(p)) return true;
    if (first == '^' || first == '$') return fail(p, p->pos, "nothing to repeat: '%c' is an assertion", first);
    size_t qpos = p->pos;
    uint32_t lo = 0, hi = GR_INF;
    char c = p->src[p->pos];
    if (c == '*') p->pos++;
    else if (c == '+') lo = 1, p->pos++;
    else if (c == '?') hi = 1, p->pos++;
    else {
        size_t end;
        bool bad;
        quant_at(p, p->pos, &lo, &hi, &end, &bad);
        if (bad) return fail(p, qpos, "a repeat count past %u", GR_INF - 1);
        if (lo > hi) return fail(p, qpos, "numbers out of order in a {m,n} quantifier");
        p->pos = end;
    }
    if (at(p, '?')) p->pos++; /* lazy: the same language */
    else if (at(p, '+')) return fail(p, p->pos, "possessive quantifiers are not supported");
    if (is_quant(p)) return fail(p, p->pos, "nothing to repeat (a quantifier after a quantifier)");
    quad r = *out;
    *out = q_repeat(p, &r, lo, hi);
    return true;
}

/* A sequence up to '|', ')' or the end. Runs of plain items (no anchors) are gathered
 * into one flat sequence, so a long literal does not nest. */
static bool parse_seq(rx *p, int depth, quad *out) {
    quad acc = q_plain(gr_empty(p->b));
    acc.eps = 1;
    int32_t *run = NULL;
    size_t n_run = 0, cap_run = 0;
    bool run_eps = true, ok = true;
    for (;;) {
        bool end = p->pos >= p->n || at(p, '|') || at(p, ')');
        quad it = q_none();
        if (!end) {
            if (!(ok = parse_quantified(p, depth, &it)) || failed(p)) {
                ok = false;
                break;
            }
        }
        bool plain = !end && it.x[1] == RX_NONE && it.x[2] == RX_NONE && it.x[3] == RX_NONE;
        if (plain) {
            if (!CN_GROW(run, cap_run, n_run + 1)) {
                ok = fail(p, p->pos, "out of memory");
                break;
            }
            run[n_run++] = it.x[0];
            run_eps = run_eps && (it.eps & 1);
            continue;
        }
        if (n_run) {
            bool none = false;
            for (size_t i = 0; i < n_run; i++) none = none || run[i] == RX_NONE;
            quad r = q_plain(none ? RX_NONE : gr_seq(p->b, run, n_run));
            r.eps = !none && run_eps;
            acc = q_seq(p, &acc, &r);
            n_run = 0;
            run_eps = true;
        }
        if (end) break;
        acc = q_seq(p, &acc, &it);
    }
    free(run);
    *out = acc;
    return ok && !failed(p);
}

/* One more entry's room in each of the four parallel lists of parse_alt (one capacity). */
static bool grow4(int32_t *v[4], size_t *cap) {
    const size_t nc = cn_grow_cap(*cap, *cap + 1, sizeof *v[0]);
    for (int k = 0; k < 4; k++) {
        int32_t *q = nc ? realloc(v[k], nc * sizeof *q) : NULL;
        if (!q) return false;
        v[k] = q;
    }
    *cap = nc;
    return true;
}

static bool parse_alt(rx *p, int depth, quad *out) {
    int32_t *v[4] = {NULL};
    size_t nv = 0, cap = 0;
    uint8_t eps = 0;
    bool ok = true;
    for (;;) {
        quad s;
        if (!parse_seq(p, depth, &s)) {
            ok = false;
            break;
        }
        if (nv == cap && !grow4(v, &cap)) {
            ok = fail(p, p->pos, "out of memory");
            goto done;
        }
        for (int k = 0; k < 4; k++) v[k][nv] = s.x[k];
        nv++;
        eps |= s.eps;
        if (!at(p, '|')) break;
        p->pos++;
    }
    *out = q_none();
    for (int k = 0; k < 4; k++) out->x[k] = x_alt(p, v[k], nv);
    out->eps = eps;
done:
    for (int k = 0; k < 4; k++) free(v[k]);
    return ok && !failed(p);
}

static int32_t parse_all(gr_builder *b, const char *re, size_t n, bool json, quad *q) {
    if (gr_builder_error(b)->status != CN_STATUS_OK) return -1;
    if (!re && n) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "regex: the pattern is NULL");
        return -1;
    }
    rx p = {.b = b, .src = re ? re : "", .n = n, .json = json};
    if (!parse_alt(&p, 0, q)) return -1;
    if (p.pos < p.n) {
        fail(&p, p.pos, "unmatched ')'");
        return -1;
    }
    return 0;
}

int32_t gr_regex_expr(gr_builder *b, const char *re, size_t n) {
    quad q;
    if (parse_all(b, re, n, false, &q) < 0) return -1;
    rx p = {.b = b};
    int32_t r = x_alt(&p, q.x, 4);
    return r == RX_NONE ? gr_nothing(b) : r;
}

int32_t gr_regex_expr_unanchored(gr_builder *b, const char *re, size_t n) {
    quad q;
    if (parse_all(b, re, n, true, &q) < 0) return -1;
    rx p = {.b = b, .json = true};
    cpset all = {0};
    cs_add(&all, 0, 0x10FFFF);
    int32_t anych = emit_set(&p, &all);
    free(all.r);
    int32_t any = gr_repeat(b, anych, 0, GR_INF);
    int32_t v[4] = {x_seq(&p, x_seq(&p, any, q.x[0]), any), x_seq(&p, any, q.x[1]), x_seq(&p, q.x[2], any), q.x[3]};
    int32_t r = x_alt(&p, v, 4);
    return r == RX_NONE ? gr_nothing(b) : r;
}
