/* utf8.c — the UTF-8 rules of the tree: strict validation (what is a complete,
 * well-formed sequence; what is a valid prefix still waiting for bytes), replacement of
 * invalid input by U+FFFD, encode/decode of one code point. Strict means
 * no overlong forms, no surrogates, nothing above U+10FFFF (the rules PCRE2 enforces).
 * cn_text_utf8_clean is the public door to the replacement, so every caller (the CLI's
 * JSON, the server) cleans text the one same way. */
#include "core/utf8.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

int cn_utf8_check(const uint8_t *s, size_t n, size_t *bad) {
    *bad = 1;
    if (n == 0) return -1;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        else if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0; /* continuation byte, C0/C1, F5..FF */
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return -1;
        uint8_t b = s[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *bad = i;
            return 0;
        }
    }
    return (int)need;
}

bool cn_utf8_sanitize(const char *s, size_t n, char **out, size_t *n_out) {
    /* Worst case: every byte becomes 3 bytes of U+FFFD. */
    uint64_t cap;
    if (!cn_mul_ok(n, 3, &cap) || !cn_add_ok(cap, 1, &cap) || cap > SIZE_MAX) return false;
    char *o = malloc((size_t)cap);
    if (!o) return false;
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        size_t bad;
        int r = cn_utf8_check(p + i, n - i, &bad);
        if (r > 0) {
            memcpy(o + k, p + i, (size_t)r);
            k += (size_t)r;
            i += (size_t)r;
        } else {
            o[k++] = (char)0xEF;
            o[k++] = (char)0xBF;
            o[k++] = (char)0xBD;
            i += r < 0 ? n - i : bad;
        }
    }
    o[k] = 0;
    *out = o;
    *n_out = k;
    return true;
}

size_t cn_utf8_encode(uint32_t cp, char *b) {
    if (cp < 0x80) {
        b[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t cn_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *p = (const uint8_t *)s;
    size_t bad;
    int r = cn_utf8_check(p, n, &bad);
    if (r <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    switch (r) {
    case 1: *cp = p[0]; break;
    case 2: *cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F); break;
    case 3: *cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F); break;
    default:
        *cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
              (p[3] & 0x3F);
    }
    return (size_t)r;
}

cn_status cn_text_utf8_clean(const char *s, size_t n, char **out, size_t *n_out, cn_error *err) {
    size_t k = 0;
    *out = NULL;
    if (!cn_utf8_sanitize(s ? s : "", s ? n : 0, out, &k))
        return cn_err(err, CN_STATUS_NO_MEMORY, "utf8: out of memory");
    if (n_out) *n_out = k;
    return CN_STATUS_OK;
}
