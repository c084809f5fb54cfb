/* test_chat_fuzz.c — chat templates under random input: template texts of random bytes
 * with the family markers and default-system fragments spliced in (detection must agree
 * with a plain search and never read past len), and message contents of random bytes
 * (whitespace of every width, malformed UTF-8) whose trimmed rendering is checked against
 * an independent reference that decodes the whole content forward. Every input sits in a
 * buffer of exactly its size, so the ASan build catches a read one byte past the end. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

static const char *const TEMPLATE_PARTS[] = {
    "<|im_start|>",
    "<|im_start|>system",
    "<|im_start|>system\n",
    "<|im_start|>system\\n",
    "<start_of_turn>",
    "<|start_header_id|>",
    "<|im_end|>",
    "Be nice.",
    "'",
    "{{",
    "}}",
    "\\",
    "<|im_start",
    "<start_of",
    "x",
    "\n",
    "\xff",
    "\xe6\x97",
};

static char *random_template(size_t *len) {
    char tmp[512];
    size_t n = 0, parts = rnd(12);
    for (size_t i = 0; i < parts; i++) {
        const char *p = TEMPLATE_PARTS[rnd(CN_ARRAY_LEN(TEMPLATE_PARTS))];
        memcpy(tmp + n, p, strlen(p));
        n += strlen(p);
    }
    char *buf = malloc(n ? n : 1); /* exactly n bytes: no NUL to lean on */
    memcpy(buf, tmp, n);
    *len = n;
    return buf;
}

static bool contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0) return true;
    return false;
}

Test(chat_fuzz, detection_matches_plain_search) {
    rng_state = 0x1234567887654321ull;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len;
        char *j = random_template(&len);
        cn_chat_template *t = NULL;
        cn_error e;
        cn_status st = cn_chat_template_detect(j, len, &t, &e);
        int want = contains(j, len, "<|im_start|>")          ? CN_CHAT_CHATML
                   : contains(j, len, "<start_of_turn>")     ? CN_CHAT_GEMMA
                   : contains(j, len, "<|start_header_id|>") ? CN_CHAT_LLAMA3
                                                             : -1;
        if (want < 0) {
            cr_assert_eq(st, CN_STATUS_UNSUPPORTED, "iter %d", iter);
        } else {
            cr_assert_eq(st, CN_STATUS_OK, "iter %d: %s", iter, e.msg);
            cr_assert_eq((int)cn_chat_template_family(t), want, "iter %d", iter);
            const char *sys = cn_chat_template_default_system(t);
            if (sys) { /* a literal found in the text, clean of Jinja syntax */
                cr_assert(*sys && contains(j, len, sys), "iter %d", iter);
                cr_assert(!strpbrk(sys, "'\"{}\\"), "iter %d: %s", iter, sys);
                cr_assert(!strstr(sys, "<|im_end|>"), "iter %d", iter);
            }
            static const cn_chat_msg hi[] = {{"user", "hi"}};
            char *out = NULL;
            cr_assert_eq(cn_chat_render(t, hi, 1, true, &out, NULL, &e), CN_STATUS_OK);
            free(out);
        }
        cn_chat_template_free(t);
        free(j);
    }
}

/* Content material: every Python whitespace width, its fragments, and plain bytes. */
static const char *const CONTENT_PARTS[] = {
    " ",
    "\t",
    "\n",
    "\r",
    "\v",
    "\f",
    "\x1c",
    "\x1f",
    "\xc2\x85",
    "\xc2\xa0",
    "\xe1\x9a\x80",
    "\xe2\x80\x80",
    "\xe2\x80\x8a",
    "\xe2\x80\x8b" /* ZWSP: not whitespace */,
    "\xe2\x80\xa8",
    "\xe2\x80\xaf",
    "\xe2\x81\x9f",
    "\xe3\x80\x80",
    "a",
    "é",
    "日",
    "🎉",
    "\x80",
    "\xe3\x80",
    "\xc2",
    "\xff",
    "\xf0\x9f\x8e",
    "\xc0\xa0" /* overlong space: not whitespace */,
};

/* The reference: decode the whole content left to right into characters (an undecodable
 * byte is a character of its own that is not whitespace), then drop whitespace
 * characters at both ends. */
static size_t decode_one(const unsigned char *s, size_t n, uint32_t *cp) {
    static const struct {
        unsigned char mask, bits;
        size_t len;
        uint32_t min;
    } forms[] = {{0xE0, 0xC0, 2, 0x80}, {0xF0, 0xE0, 3, 0x800}, {0xF8, 0xF0, 4, 0x10000}};
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    for (size_t f = 0; f < 3; f++) {
        if ((s[0] & forms[f].mask) != forms[f].bits) continue;
        if (n < forms[f].len) break;
        uint32_t c = s[0] & (0x7F >> forms[f].len);
        size_t k = 1;
        for (; k < forms[f].len && (s[k] & 0xC0) == 0x80; k++) c = (c << 6) | (s[k] & 0x3F);
        if (k < forms[f].len || c < forms[f].min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) break;
        *cp = c;
        return forms[f].len;
    }
    *cp = 0xFFFFFFFF; /* undecodable: one byte, not whitespace */
    return 1;
}

static bool is_space(uint32_t c) { /* Python's str.isspace() set, as a table */
    static const uint32_t sp[] = {9,      10,     11,     12,     13,     0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                                  0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                  0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
    for (size_t i = 0; i < CN_ARRAY_LEN(sp); i++)
        if (sp[i] == c) return true;
    return false;
}

static void reference_trim(const char *s, size_t n, size_t *from, size_t *to) {
    size_t starts[600], n_chars = 0;
    bool space[600];
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t len = decode_one((const unsigned char *)s + i, n - i, &c);
        starts[n_chars] = i;
        space[n_chars++] = is_space(c);
        i += len;
    }
    size_t a = 0, b = n_chars;
    while (a < b && space[a]) a++;
    while (b > a && space[b - 1]) b--;
    *from = a < n_chars ? starts[a] : n;
    *to = b < n_chars ? starts[b] : n;
    if (a == b) *from = *to = n;
}

Test(chat_fuzz, trim_matches_forward_decoding_reference) {
    rng_state = 0xC0FFEE1234ull;
    cn_chat_template *t = NULL;
    cr_assert_eq(cn_chat_template_from_name("llama3", &t, NULL), CN_STATUS_OK);
    static const char head[] = "<|start_header_id|>user<|end_header_id|>\n\n";
    static const char tail[] = "<|eot_id|>";
    for (int iter = 0; iter < 20000; iter++) {
        char tmp[512];
        size_t n = 0, parts = rnd(10);
        for (size_t i = 0; i < parts; i++) {
            const char *p = CONTENT_PARTS[rnd(CN_ARRAY_LEN(CONTENT_PARTS))];
            memcpy(tmp + n, p, strlen(p));
            n += strlen(p);
        }
        char *content = malloc(n + 1); /* exact size plus the NUL the API requires */
        memcpy(content, tmp, n);
        content[n] = 0;
        size_t from, to;
        reference_trim(content, n, &from, &to);

        cn_chat_msg m = {"user", content};
        char *out = NULL;
        size_t len = 0;
        cr_assert_eq(cn_chat_render(t, &m, 1, false, &out, &len, NULL), CN_STATUS_OK);
        size_t want = strlen(head) + (to - from) + strlen(tail);
        cr_assert_eq(len, want, "iter %d: trimmed to %zu bytes, want %zu (content %zu bytes)", iter,
                     len - strlen(head) - strlen(tail), to - from, n);
        cr_assert_eq(memcmp(out + strlen(head), content + from, to - from), 0, "iter %d", iter);
        free(out);
        free(content);
    }
    cn_chat_template_free(t);
}
