/* jinja_str.c — text as Python's str sees it, over UTF-8 bytes: code points, Unicode
 * whitespace (str.isspace, str.strip, regex \s), printability (repr), case mappings
 * (upper, lower, title, capitalize) and the growable byte buffer everything writes into.
 *
 * Templates meet text in any language, but their own logic compares ASCII (roles, type
 * names). So whitespace and printability follow Python exactly; case mappings cover
 * Latin, Greek (final sigma included), Cyrillic, Armenian and fullwidth Latin, and leave
 * other scripts unchanged (most have no case). Bytes that are not valid UTF-8 (possible
 * only in a template's own text) count as one code point each and are copied through
 * untouched, so nothing here reads outside [s, s + n). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "jinja/jinja_impl.h"

/* ---- buffers ---- */

bool jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->over || b->oom) return false;
    if (n > b->limit || b->n > b->limit - n) {
        b->over = true;
        return false;
    }
    if (!CN_GROW(b->p, b->cap, b->n + n + 1)) {
        b->oom = true;
        return false;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool jbuf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return false;
    return jbuf_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

void jbuf_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- UTF-8 ---- */

/* The core codec, with Python's view of invalid bytes: each one is a code point of its own
 * value (cn_utf8_decode would make it U+FFFD), so text that is not UTF-8 passes through. */
size_t ju8_next(const char *s, size_t n, uint32_t *cp, bool *valid) {
    const unsigned char b0 = (unsigned char)s[0];
    const size_t len = cn_utf8_decode(s, n, cp);
    *valid = len > 1 || b0 < 0x80;
    if (!*valid) *cp = b0;
    return len;
}

size_t ju8_prev(const char *s, size_t n) {
    /* the longest valid sequence ending at n, else one byte */
    for (size_t len = 2; len <= 4 && len <= n; len++) {
        uint32_t cp;
        bool ok;
        if (ju8_next(s + n - len, len, &cp, &ok) == len && ok) return len;
    }
    return 1;
}

void ju8_put(jbuf *b, uint32_t c) {
    char t[4];
    jbuf_put(b, t, cn_utf8_encode(c, t));
}

size_t ju8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; k++) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s + i, n - i, &cp, &ok);
    }
    return k;
}

size_t jstr_ncp(jstr *s) {
    if (s->ncp != SIZE_MAX) return s->ncp;
    size_t n = 0;
    bool ascii = true;
    for (size_t i = 0; i < s->len; n++) {
        uint32_t cp;
        bool ok;
        const size_t k = ju8_next(s->b + i, s->len - i, &cp, &ok);
        if (cp >= 0x80 || !ok) ascii = false;
        i += k;
    }
    if (s->h.rc != JOBJ_IMMORTAL) { /* template constants are counted when made */
        s->ncp = n;
        s->ascii = ascii;
    }
    return n;
}

size_t ju8_offset(jstr *s, size_t i) {
    jstr_ncp(s);
    if (s->ascii || s->ncp == s->len) return i;
    size_t off = 0;
    for (size_t k = 0; k < i && off < s->len; k++) {
        uint32_t cp;
        bool ok;
        off += ju8_next(s->b + off, s->len - off, &cp, &ok);
    }
    return off;
}

/* ---- character classes ---- */

bool jpy_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's str.isprintable: not a control, format, surrogate, private-use, unassigned or
 * separator character (the space excepted). The ranges below are the ones of those
 * categories that real text can hold; most unassigned code points are not listed. */
bool jpy_isprintable(uint32_t c) {
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    static const uint32_t no[][2] = {
        {0x80, 0xA0},       {0xAD, 0xAD},        {0x378, 0x379},     {0x380, 0x383},     {0x38B, 0x38B},
        {0x38D, 0x38D},     {0x3A2, 0x3A2},      {0x530, 0x530},     {0x600, 0x605},     {0x61C, 0x61C},
        {0x6DD, 0x6DD},     {0x70F, 0x70F},      {0x890, 0x891},     {0x8E2, 0x8E2},     {0x1680, 0x1680},
        {0x180E, 0x180E},   {0x2000, 0x200F},    {0x2028, 0x202F},   {0x205F, 0x2064},   {0x2065, 0x206F},
        {0x3000, 0x3000},   {0xD800, 0xF8FF},    {0xFEFF, 0xFEFF},   {0xFFF0, 0xFFFB},   {0xFFFE, 0xFFFF},
        {0x110BD, 0x110BD}, {0x110CD, 0x110CD},  {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A},
        {0xE0000, 0xE0FFF}, {0xF0000, 0x10FFFF},
    };
    for (size_t i = 0; i < CN_ARRAY_LEN(no); i++)
        if (c >= no[i][0] && c <= no[i][1]) return false;
    return true;
}

bool jpy_isdigit(uint32_t c) {
    return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0x660 && c <= 0x669) ||
           (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) ||
           (c >= 0x2070 && c <= 0x2079 && c != 0x2071 && c != 0x2072 && c != 0x2073) || (c >= 0x2080 && c <= 0x2089) ||
           (c >= 0xFF10 && c <= 0xFF19);
}

/* ---- case mappings ---- */

/* The Latin digraphs with three forms (Ǆ ǅ ǆ, Ǉ ǈ ǉ, Ǌ ǋ ǌ, Ǳ ǲ ǳ): the upper form's code
 * point, 0 for any other. */
static uint32_t digraph(uint32_t c) {
    if (c >= 0x1C4 && c <= 0x1CC) return 0x1C4 + (c - 0x1C4) / 3 * 3;
    if (c >= 0x1F1 && c <= 0x1F3) return 0x1F1;
    return 0;
}

/* Single code point lower -> upper; 0 when it has none. */
static uint32_t up1(uint32_t c) {
    const uint32_t dg = digraph(c);
    if (dg) return c != dg ? dg : 0;
    if (c >= 'a' && c <= 'z') return c - 32;
    if (c < 0x80) return 0;
    if (c == 0xB5) return 0x39C;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0x131) return 'I';
    if (c >= 0x100 && c <= 0x137 && (c & 1) && c != 0x131) return c - 1;
    if (c >= 0x139 && c <= 0x148 && !(c & 1)) return c - 1;
    if (c >= 0x14A && c <= 0x177 && (c & 1)) return c - 1;
    if (c >= 0x179 && c <= 0x17E && !(c & 1)) return c - 1;
    if (c == 0x17F) return 'S';
    if (c == 0x180) return 0x243;
    if (c >= 0x1CD && c <= 0x1DC && !(c & 1)) return c - 1;
    if (((c >= 0x1DE && c <= 0x1EF) || (c >= 0x1F4 && c <= 0x1F5) || (c >= 0x1F8 && c <= 0x21F)) && (c & 1))
        return c - 1;
    if (c == 0x1DD) return 0x18E;
    if (c >= 0x222 && c <= 0x233 && (c & 1)) return c - 1;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c >= 0x3B1 && c <= 0x3C1) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x3C3 && c <= 0x3CB) return c - 32;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (((c >= 0x461 && c <= 0x481) || (c >= 0x48B && c <= 0x4BF)) && (c & 1)) return c - 1;
    if (c >= 0x4C2 && c <= 0x4CE && !(c & 1)) return c - 1;
    if (c == 0x4CF) return 0x4C0;
    if (c >= 0x4D1 && c <= 0x52F && (c & 1)) return c - 1;
    if (c >= 0x561 && c <= 0x586) return c - 48;
    if (((c >= 0x1E01 && c <= 0x1E95) || (c >= 0x1EA1 && c <= 0x1EFF)) && (c & 1)) return c - 1;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return 0;
}

/* Single code point upper -> lower; 0 when it has none. */
static uint32_t low1(uint32_t c) {
    const uint32_t dg = digraph(c);
    if (dg) return c != dg + 2 && !(dg == 0x1F1 && c == 0x1F3) ? (dg == 0x1F1 ? 0x1F3 : dg + 2) : 0;
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return 0;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x100 && c <= 0x137 && !(c & 1) && c != 0x130) return c + 1;
    if (c >= 0x139 && c <= 0x148 && (c & 1)) return c + 1;
    if (c >= 0x14A && c <= 0x177 && !(c & 1)) return c + 1;
    if (c >= 0x179 && c <= 0x17E && (c & 1)) return c + 1;
    if (c == 0x243) return 0x180;
    if (c >= 0x1CD && c <= 0x1DC && (c & 1)) return c + 1;
    if (((c >= 0x1DE && c <= 0x1EF) || (c >= 0x1F4 && c <= 0x1F5) || (c >= 0x1F8 && c <= 0x21F)) && !(c & 1))
        return c + 1;
    if (c == 0x18E) return 0x1DD;
    if (c >= 0x222 && c <= 0x233 && !(c & 1)) return c + 1;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (((c >= 0x460 && c <= 0x480) || (c >= 0x48A && c <= 0x4BE)) && !(c & 1)) return c + 1;
    if (c == 0x4C0) return 0x4CF;
    if (c >= 0x4C1 && c <= 0x4CD && (c & 1)) return c + 1;
    if (c >= 0x4D0 && c <= 0x52E && !(c & 1)) return c + 1;
    if (c >= 0x531 && c <= 0x556) return c + 48;
    if (((c >= 0x1E00 && c <= 0x1E94) || (c >= 0x1EA0 && c <= 0x1EFE)) && !(c & 1)) return c + 1;
    if (c == 0x1E9E) return 0xDF;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return 0;
}

/* Upper and lower as Python's str.isupper / islower see a character: the title forms of
 * the digraphs (ǅ) are neither, though cased. */
bool jpy_isupper(uint32_t c) {
    const uint32_t dg = digraph(c);
    return dg ? c == dg : low1(c) != 0 || c == 0x130;
}
bool jpy_islower(uint32_t c) {
    const uint32_t dg = digraph(c);
    return dg ? c == (dg == 0x1F1 ? 0x1F3 : dg + 2) : up1(c) != 0 || c == 0xDF || c == 0x149 || c == 0x138;
}
static bool cased(uint32_t c) { return digraph(c) || jpy_isupper(c) || jpy_islower(c); }
bool jpy_istitle_char(uint32_t c) {
    const uint32_t dg = digraph(c);
    return dg && c == dg + 1;
}

bool jpy_isalpha(uint32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (cased(c)) return true;
    return c == 0xAA || c == 0xBA || (c >= 0x250 && c <= 0x2AF) || (c >= 0x5D0 && c <= 0x5EA) ||
           (c >= 0x620 && c <= 0x64A) || (c >= 0x904 && c <= 0x939) || (c >= 0xE01 && c <= 0xE30) ||
           (c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x20000 && c <= 0x2FA1F);
}

int jpy_upper(uint32_t c, uint32_t out[3]) {
    if (c == 0xDF) {
        out[0] = 'S';
        out[1] = 'S';
        return 2;
    }
    if (c == 0x149) {
        out[0] = 0x2BC;
        out[1] = 'N';
        return 2;
    }
    const uint32_t u = up1(c);
    out[0] = u ? u : c;
    return 1;
}

int jpy_lower(uint32_t c, uint32_t out[3]) {
    if (c == 0x130) {
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    const uint32_t l = low1(c);
    out[0] = l ? l : c;
    return 1;
}

int jpy_title(uint32_t c, uint32_t out[3]) {
    const uint32_t dg = digraph(c);
    if (dg) {
        out[0] = dg + 1;
        return 1;
    }
    if (c == 0xDF) {
        out[0] = 'S';
        out[1] = 's';
        return 2;
    }
    if (c == 0x149) {
        out[0] = 0x2BC;
        out[1] = 'N';
        return 2;
    }
    return jpy_upper(c, out);
}

/* Python's final-sigma rule: a capital sigma lowers to ς when a cased letter comes
 * before it and none after it (case-ignorable characters such as apostrophes skipped;
 * here: the neighbouring letters). */
static bool final_sigma(const char *s, size_t n, size_t at, size_t len) {
    bool before = false, after = false;
    for (size_t i = at; i > 0;) {
        const size_t k = ju8_prev(s, i);
        uint32_t cp;
        bool ok;
        ju8_next(s + i - k, k, &cp, &ok);
        i -= k;
        if (cp == '\'' || cp == 0x2019 || cp == '.' || cp == ':' || cp == 0xAD) continue;
        before = cased(cp);
        break;
    }
    for (size_t i = at + len; i < n;) {
        uint32_t cp;
        bool ok;
        i += ju8_next(s + i, n - i, &cp, &ok);
        if (cp == '\'' || cp == 0x2019 || cp == '.' || cp == ':' || cp == 0xAD) continue;
        after = cased(cp);
        break;
    }
    return before && !after;
}

bool jpy_case(jbuf *b, const char *s, size_t n, jcase how) {
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp, m[3];
        bool ok;
        const size_t k = ju8_next(s + i, n - i, &cp, &ok);
        if (!ok) {
            jbuf_put(b, s + i, k);
            i += k;
            prev_cased = false;
            first = false;
            continue;
        }
        int nm;
        switch (how) {
        case JCASE_UPPER: nm = jpy_upper(cp, m); break;
        case JCASE_LOWER:
            if (cp == 0x3A3 && final_sigma(s, n, i, k)) {
                m[0] = 0x3C2;
                nm = 1;
            } else nm = jpy_lower(cp, m);
            break;
        case JCASE_CAPITALIZE:
            if (first) nm = jpy_title(cp, m);
            else if (cp == 0x3A3 && final_sigma(s, n, i, k)) {
                m[0] = 0x3C2;
                nm = 1;
            } else nm = jpy_lower(cp, m);
            break;
        case JCASE_TITLE_WORDS:
            if (prev_cased) {
                if (cp == 0x3A3 && final_sigma(s, n, i, k)) {
                    m[0] = 0x3C2;
                    nm = 1;
                } else nm = jpy_lower(cp, m);
            } else {
                nm = jpy_title(cp, m);
            }
            break;
        default: /* JCASE_SWAP */
            if (cp == 0x3A3 && final_sigma(s, n, i, k)) {
                m[0] = 0x3C2;
                nm = 1;
            } else if (jpy_isupper(cp)) nm = jpy_lower(cp, m);
            else if (jpy_islower(cp)) nm = jpy_upper(cp, m);
            else {
                m[0] = cp;
                nm = 1;
            }
            break;
        }
        prev_cased = cased(cp);
        first = false;
        for (int j = 0; j < nm; j++) ju8_put(b, m[j]);
        i += k;
    }
    return !b->over && !b->oom;
}

/* ---- strip ---- */

static bool in_chars(uint32_t cp, bool ok, const char *chars, size_t nchars, const char *raw, size_t rawlen) {
    if (!chars) return ok && jpy_isspace(cp);
    for (size_t i = 0; i < nchars;) {
        uint32_t c;
        bool cok;
        const size_t k = ju8_next(chars + i, nchars - i, &c, &cok);
        if (cok == ok && (ok ? c == cp : (k == rawlen && memcmp(chars + i, raw, k) == 0))) return true;
        i += k;
    }
    return false;
}

void jpy_strip(const char *s, size_t n, const char *chars, size_t nchars, int which, size_t *a, size_t *z) {
    size_t lo = 0, hi = n;
    if (which & 1)
        while (lo < hi) {
            uint32_t cp;
            bool ok;
            const size_t k = ju8_next(s + lo, hi - lo, &cp, &ok);
            if (!in_chars(cp, ok, chars, nchars, s + lo, k)) break;
            lo += k;
        }
    if (which & 2)
        while (hi > lo) {
            const size_t k = ju8_prev(s + lo, hi - lo);
            uint32_t cp;
            bool ok;
            ju8_next(s + hi - k, k, &cp, &ok);
            if (!in_chars(cp, ok, chars, nchars, s + hi - k, k)) break;
            hi -= k;
        }
    *a = lo;
    *z = hi;
}
