/* jinja_lex.c — template source to tokens, as jinja2's lexer does it under Hugging
 * Face's settings (trim_blocks, lstrip_blocks, keep_trailing_newline off):
 *
 *  - newlines (\r\n, \r, \n) become \n and one trailing newline of the source is dropped;
 *  - text runs up to the first "{{", "{%" or "{#"; a "-" right after the opener strips
 *    all whitespace before it, "+" keeps it; otherwise a block or comment tag alone on
 *    its line (only whitespace before it on that line) takes that whitespace away
 *    (lstrip_blocks);
 *  - "-%}", "-}}", "-#}" strip all whitespace after; "%}" and "#}" eat one newline after
 *    them (trim_blocks), "+%}" does not; "}}" never does;
 *  - inside a tag: names, strings (Python escapes, decoded as unicode-escape after
 *    backslashreplace), integers (with _ separators, 0x / 0o / 0b), floats, operators;
 *    an end marker only counts when brackets are balanced;
 *  - {% raw %}...{% endraw %} is text.
 * Whitespace is Python's \s: Unicode whitespace. Every read is bounds-checked against the
 * source length; an error gives the line and jinja2's wording where it has one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "jinja/jinja_impl.h"

typedef struct {
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting;
    jarena *a;
    jtoks *out;
    int *err_line;
    char *msg;
    size_t msg_len;
} lexer;

static bool fail(lexer *L, const char *fmt, ...) CN_PRINTF(2, 3);
static bool fail(lexer *L, const char *fmt, ...) {
    *L->err_line = L->line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->msg, L->msg_len, fmt, ap);
    va_end(ap);
    return false;
}

static bool emit(lexer *L, jtok t) {
    if (!CN_GROW(L->out->v, L->out->cap, L->out->n + 1)) return fail(L, "%s", "out of memory");
    L->out->v[L->out->n++] = t;
    return true;
}

static size_t count_nl(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Length of the whitespace code point at s[i] (0 if none). */
static size_t ws_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    uint32_t cp;
    bool ok;
    const size_t k = ju8_next(s + i, n - i, &cp, &ok);
    return ok && jpy_isspace(cp) ? k : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = ws_at(s, n, i)) > 0) i += k;
    return i;
}

static bool at(const lexer *L, size_t i, const char *lit) {
    const size_t k = strlen(lit);
    return i <= L->n && L->n - i >= k && memcmp(L->s + i, lit, k) == 0;
}

/* The text before a tag with the tag's whitespace control applied (jinja2's
 * OptionalLStrip): sign '-' strips all trailing whitespace; otherwise, for a block or
 * comment tag (lstrip true), whitespace between the last newline (or the start of a
 * line) and the tag goes. Emits it as T_DATA. */
static bool text_before(lexer *L, size_t a, size_t z, char sign, bool lstrip) {
    size_t end = z, stripped_nl = 0;
    if (sign == '-') {
        while (end > a) {
            const size_t k = ju8_prev(L->s + a, end - a);
            if (ws_at(L->s, end, end - k) != k) break;
            end -= k;
        }
        stripped_nl = count_nl(L->s + end, z - end);
    } else if (sign != '+' && lstrip) {
        size_t l = z;
        while (l > a && L->s[l - 1] != '\n') l--;
        if ((l > a || L->line_starting) && l < z && skip_ws(L->s, z, l) == z) end = l;
    }
    if (end > a && !emit(L, (jtok){.kind = T_DATA, .line = L->line, .p = L->s + a, .n = end - a})) return false;
    L->line += (int)(count_nl(L->s + a, end - a) + stripped_nl);
    return true;
}

/* "%}" with trim_blocks, "-%}" plus whitespace, "+%}" at i (block_end) or "}}", "-}}"
 * (variable end); returns the length matched, 0 if none. */
static size_t end_at(const lexer *L, size_t i, char close) {
    const char c2[3] = {close, '}', 0};
    if (close == '%' && at(L, i, "+%}")) return 3;
    if (i < L->n && L->s[i] == '-' && at(L, i + 1, c2)) return skip_ws(L->s, L->n, i + 3) - i;
    if (at(L, i, c2)) return 2 + (close != '}' && i + 2 < L->n && L->s[i + 2] == '\n');
    return 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* (\d+_)*\d+ at i: its end, or i when absent. */
static size_t digits(const lexer *L, size_t i) {
    size_t j = i;
    while (j < L->n && is_digit(L->s[j])) {
        while (j < L->n && is_digit(L->s[j])) j++;
        if (j + 1 < L->n && L->s[j] == '_' && is_digit(L->s[j + 1])) j++;
    }
    return j;
}

/* jinja2's float_re at i (not after a '.'): digits, then '.' digits and/or an exponent. */
static size_t float_at(const lexer *L, size_t i) {
    if (i > 0 && L->s[i - 1] == '.') return 0;
    size_t j = digits(L, i);
    if (j == i) return 0;
    size_t frac = 0;
    if (j < L->n && L->s[j] == '.') {
        const size_t f = digits(L, j + 1);
        if (f > j + 1) frac = f;
    }
    size_t k = frac ? frac : j;
    if (k < L->n && (L->s[k] == 'e' || L->s[k] == 'E')) {
        size_t e = k + 1;
        if (e < L->n && (L->s[e] == '+' || L->s[e] == '-')) e++;
        const size_t d = digits(L, e);
        if (d > e) return d - i;
    }
    return frac ? frac - i : 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

/* jinja2's integer_re: 0b / 0o / 0x with optional single underscores, decimals. */
static size_t int_at(const lexer *L, size_t i, int64_t *val, bool *overflow) {
    const char *s = L->s;
    int base = 10;
    size_t j = i;
    *overflow = false;
    if (s[i] == '0' && i + 1 < L->n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        base = (s[i + 1] | 32) == 'b' ? 2 : (s[i + 1] | 32) == 'o' ? 8 : 16;
        j = i + 2;
        size_t k = j;
        while (k < L->n) {
            size_t m = k;
            if (s[m] == '_') m++;
            if (m >= L->n) break;
            const int d = hexval(s[m]);
            if (d < 0 || d >= base) break;
            k = m + 1;
        }
        if (k == j) base = 10; /* "0x" alone: just the 0 below */
        else j = k;
    }
    if (base == 10) {
        j = i;
        if (s[i] == '0') {
            j = i + 1;
            while (j < L->n && (s[j] == '0' || (s[j] == '_' && j + 1 < L->n && s[j + 1] == '0'))) j++;
        } else if (s[i] >= '1' && s[i] <= '9') {
            j = i + 1;
            while (j < L->n && (is_digit(s[j]) || (s[j] == '_' && j + 1 < L->n && is_digit(s[j + 1])))) j++;
        } else {
            return 0;
        }
    }
    uint64_t v = 0;
    for (size_t k = base == 10 ? i : i + 2; k < j; k++) {
        if (s[k] == '_') continue;
        const int d = hexval(s[k]);
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) *overflow = true;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (v > INT64_MAX) *overflow = true;
    *val = (int64_t)v;
    return j - i;
}

static bool name_start(unsigned char c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80; }
static bool name_char(unsigned char c) { return name_start(c) || is_digit((char)c); }

/* A Python string literal's body s[0..n) decoded like
 * body.encode("ascii", "backslashreplace").decode("unicode-escape"). */
static bool unescape(lexer *L, const char *s, size_t n, jbuf *b) {
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\') {
            size_t j = i;
            while (j < n && s[j] != '\\') j++;
            jbuf_put(b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 >= n) return fail(L, "%s", "\\ at end of string");
        const unsigned char c = (unsigned char)s[i + 1];
        i += 2;
        uint32_t cp;
        int need = 0;
        switch (c) {
        case '\\': jbuf_putc(b, '\\'); continue;
        case '\'': jbuf_putc(b, '\''); continue;
        case '"': jbuf_putc(b, '"'); continue;
        case 'a': jbuf_putc(b, 7); continue;
        case 'b': jbuf_putc(b, 8); continue;
        case 'f': jbuf_putc(b, 12); continue;
        case 'n': jbuf_putc(b, '\n'); continue;
        case 'r': jbuf_putc(b, '\r'); continue;
        case 't': jbuf_putc(b, '\t'); continue;
        case 'v': jbuf_putc(b, 11); continue;
        case '\n': continue;
        case 'x': need = 2; break;
        case 'u': need = 4; break;
        case 'U': need = 8; break;
        case 'N': return fail(L, "%s", "\\N{...} escapes are not supported");
        default:
            if (c >= '0' && c <= '7') {
                cp = c - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                ju8_put(b, cp);
            } else if (c >= 0x80) {
                /* backslashreplace turned the character into \xNN / \uNNNN / \UNNNNNNNN,
                 * whose backslash this one escapes: the escape's text stays */
                bool ok;
                const size_t k = ju8_next(s + i - 1, n - (i - 1), &cp, &ok);
                i = i - 1 + k;
                if (cp <= 0xFF) jbuf_printf(b, "\\x%02x", cp);
                else if (cp <= 0xFFFF) jbuf_printf(b, "\\u%04x", cp);
                else jbuf_printf(b, "\\U%08x", cp);
            } else {
                jbuf_putc(b, '\\');
                jbuf_putc(b, (char)c);
            }
            continue;
        }
        cp = 0;
        for (int k = 0; k < need; k++) {
            const int d = i < n ? hexval(s[i]) : -1;
            if (d < 0) {
                static const char *const why[] = {"truncated \\xXX escape", "truncated \\uXXXX escape",
                                                  "truncated \\UXXXXXXXX escape"};
                return fail(L, "%s", why[need == 2 ? 0 : need == 4 ? 1 : 2]);
            }
            cp = cp * 16 + (uint32_t)d;
            i++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail(L, "%s", "illegal Unicode character");
        ju8_put(b, cp);
    }
    return true;
}

static const struct {
    const char *s;
    jtok_op op;
} OPS[] = {
    {"//", TO_FLOORDIV}, {"**", TO_POW},      {"==", TO_EQ},    {"!=", TO_NE},    {">=", TO_GTEQ},  {"<=", TO_LTEQ},
    {"+", TO_ADD},       {"-", TO_SUB},       {"/", TO_DIV},    {"*", TO_MUL},    {"%", TO_MOD},    {"~", TO_TILDE},
    {"[", TO_LBRACKET},  {"]", TO_RBRACKET},  {"(", TO_LPAREN}, {")", TO_RPAREN}, {"{", TO_LBRACE}, {"}", TO_RBRACE},
    {">", TO_GT},        {"<", TO_LT},        {"=", TO_ASSIGN}, {".", TO_DOT},    {":", TO_COLON},  {"|", TO_PIPE},
    {",", TO_COMMA},     {";", TO_SEMICOLON},
};

#define LEX_MAX_BALANCE 256

/* The inside of a {{ }} or {% %} tag from L->pos to its end marker. */
static bool lex_tag(lexer *L, char close) {
    char balance[LEX_MAX_BALANCE];
    int nb = 0;
    for (;;) {
        const size_t i = L->pos;
        if (i >= L->n) return true; /* the parser reports the missing end */
        size_t k;
        if (nb == 0 && (k = end_at(L, i, close)) > 0) {
            if (!emit(L, (jtok){.kind = close == '%' ? T_BLOCK_END : T_VAR_END, .line = L->line})) return false;
            L->line += (int)count_nl(L->s + i, k);
            L->line_starting = L->s[i + k - 1] == '\n';
            L->pos = i + k;
            return true;
        }
        if ((k = skip_ws(L->s, L->n, i) - i) > 0) {
            L->line += (int)count_nl(L->s + i, k);
            L->line_starting = L->s[i + k - 1] == '\n';
            L->pos = i + k;
            continue;
        }
        const char c = L->s[i];
        jtok t = {.line = L->line};
        if ((k = float_at(L, i)) > 0) {
            char tmp[64];
            size_t m = 0;
            for (size_t j = i; j < i + k && m < sizeof tmp - 1; j++)
                if (L->s[j] != '_') tmp[m++] = L->s[j];
            tmp[m] = 0;
            t.kind = T_FLOAT;
            t.f = strtod(tmp, NULL);
        } else if (is_digit(c)) {
            bool overflow;
            k = int_at(L, i, &t.i, &overflow);
            if (overflow) return fail(L, "%s", "integer literal too large (cinder's integers are 64-bit)");
            t.kind = T_INT;
        } else if (name_start((unsigned char)c)) {
            k = 1;
            while (i + k < L->n && name_char((unsigned char)L->s[i + k]) && !ws_at(L->s, L->n, i + k)) k++;
            t.kind = T_NAME;
            t.p = L->s + i;
            t.n = k;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < L->n && L->s[j] != c) j += L->s[j] == '\\' ? 2 : 1;
            if (j >= L->n) return fail(L, "unexpected char '%c'", c);
            k = j + 1 - i;
            jbuf b = {.limit = SIZE_MAX};
            if (!unescape(L, L->s + i + 1, j - i - 1, &b)) {
                jbuf_free(&b);
                return false;
            }
            if (b.oom) return fail(L, "%s", "out of memory");
            t.kind = T_STRING;
            t.s = jarena_str(L->a, b.p ? b.p : "", b.n);
            jbuf_free(&b);
            if (!t.s) return fail(L, "%s", "out of memory");
        } else {
            size_t o;
            for (o = 0; o < CN_ARRAY_LEN(OPS); o++)
                if (at(L, i, OPS[o].s)) break;
            if (o == CN_ARRAY_LEN(OPS)) {
                char what[8];
                uint32_t cp;
                bool ok;
                const size_t w = ju8_next(L->s + i, L->n - i, &cp, &ok);
                snprintf(what, sizeof what, "%.*s", (int)w, L->s + i);
                return fail(L, "unexpected char '%s'", what);
            }
            k = strlen(OPS[o].s);
            t.kind = T_OP;
            t.op = (uint8_t)OPS[o].op;
            if (t.op == TO_LBRACE || t.op == TO_LPAREN || t.op == TO_LBRACKET) {
                if (nb == LEX_MAX_BALANCE) return fail(L, "%s", "brackets nested too deeply");
                balance[nb++] = t.op == TO_LBRACE ? '}' : t.op == TO_LPAREN ? ')' : ']';
            } else if (t.op == TO_RBRACE || t.op == TO_RPAREN || t.op == TO_RBRACKET) {
                const char got = OPS[o].s[0];
                if (nb == 0) {
                    const char g[2] = {got, 0};
                    return fail(L, "unexpected '%s'", g);
                }
                if (balance[nb - 1] != got) {
                    char m[48];
                    snprintf(m, sizeof m, "'%c', expected '%c'", got, balance[nb - 1]);
                    return fail(L, "unexpected %s", m);
                }
                nb--;
            }
        }
        if (!emit(L, t)) return false;
        L->line_starting = L->s[i + k - 1] == '\n';
        L->pos = i + k;
    }
}

/* {% raw %} at L->pos (already past the opener and sign): the rest of the opening tag,
 * then text up to {% endraw %}. */
static bool lex_raw(lexer *L, size_t after_open) {
    size_t i = skip_ws(L->s, L->n, after_open) + 3; /* "raw" */
    i = skip_ws(L->s, L->n, i);
    const size_t e = end_at(L, i, '%');
    /* the raw opener's end has no trim_blocks newline: only "-%}"+ws or "%}" */
    size_t k = at(L, i, "-%}") ? e : 2;
    L->line += (int)count_nl(L->s + L->pos, i + k - L->pos);
    L->line_starting = L->s[i + k - 1] == '\n';
    L->pos = i + k;
    for (size_t p = L->pos; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%') continue;
        size_t q = p + 2;
        const char sign = q < L->n && (L->s[q] == '-' || L->s[q] == '+') ? L->s[q] : 0;
        if (sign) q++;
        q = skip_ws(L->s, L->n, q);
        if (!at(L, q, "endraw")) continue;
        q = skip_ws(L->s, L->n, q + 6);
        const size_t ek = end_at(L, q, '%');
        if (!ek) continue;
        if (!text_before(L, L->pos, p, sign, true)) return false;
        L->line += (int)count_nl(L->s + p, q + ek - p);
        L->line_starting = L->s[q + ek - 1] == '\n';
        L->pos = q + ek;
        return true;
    }
    return fail(L, "%s", "Missing end of raw directive");
}

static bool lex_comment(lexer *L) {
    for (size_t p = L->pos; p < L->n; p++) {
        size_t k = 0;
        if (at(L, p, "+#}")) k = 3;
        else if (at(L, p, "-#}")) k = skip_ws(L->s, L->n, p + 3) - p;
        else if (at(L, p, "#}")) k = 2 + (p + 2 < L->n && L->s[p + 2] == '\n');
        if (!k) continue;
        L->line += (int)count_nl(L->s + L->pos, p + k - L->pos);
        L->line_starting = L->s[p + k - 1] == '\n';
        L->pos = p + k;
        return true;
    }
    return fail(L, "%s", "Missing end of comment tag");
}

/* Is "{% raw %}" (any sign, any whitespace) at i, the opener's position? */
static bool raw_at(const lexer *L, size_t after_sign) {
    size_t q = skip_ws(L->s, L->n, after_sign);
    if (!at(L, q, "raw")) return false;
    q = skip_ws(L->s, L->n, q + 3);
    return at(L, q, "-%}") || at(L, q, "%}");
}

bool jlex(const char *src, size_t n, jarena *a, jtoks *out, int *line, char *msg, size_t msg_len) {
    memset(out, 0, sizeof *out);
    /* newlines normalized, one trailing newline dropped (keep_trailing_newline off) */
    char *s = malloc(n + 1);
    if (!s) {
        *line = 0;
        snprintf(msg, msg_len, "out of memory");
        return false;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m > 0 && s[m - 1] == '\n') m--;
    s[m] = 0;
    out->src = s;
    lexer L = {.s = s,
               .n = m,
               .line = 1,
               .line_starting = true,
               .a = a,
               .out = out,
               .err_line = line,
               .msg = msg,
               .msg_len = msg_len};
    while (L.pos < L.n) {
        size_t t = L.pos;
        char kind = 0;
        for (; t + 1 < L.n; t++)
            if (s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')) {
                kind = s[t + 1];
                break;
            }
        if (!kind) {
            if (!emit(&L, (jtok){.kind = T_DATA, .line = L.line, .p = s + L.pos, .n = L.n - L.pos})) return false;
            L.line += (int)count_nl(s + L.pos, L.n - L.pos);
            break;
        }
        const char sign = t + 2 < L.n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        const size_t after = t + 2 + (sign ? 1 : 0);
        const bool raw = kind == '%' && raw_at(&L, after);
        if (!text_before(&L, L.pos, t, sign, kind != '{')) return false;
        L.line_starting = false;
        L.pos = after;
        if (raw) {
            if (!lex_raw(&L, after)) return false;
        } else if (kind == '#') {
            if (!lex_comment(&L)) return false;
        } else {
            if (!emit(&L, (jtok){.kind = kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, .line = L.line})) return false;
            if (!lex_tag(&L, kind == '%' ? '%' : '}')) return false;
        }
    }
    return emit(&L, (jtok){.kind = T_EOF, .line = L.line});
}

void jtoks_free(jtoks *t) {
    free(t->v);
    free(t->src);
    memset(t, 0, sizeof *t);
}
