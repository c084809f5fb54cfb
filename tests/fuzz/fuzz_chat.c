/* fuzz_chat.c — fuzz entry for chat template detection and rendering.
 *
 * Input: a template text, then messages, separated by NUL bytes. The first byte says
 * where the template comes from (detected from the input's template text, or one of the
 * three names) and whether to add the generation prompt; each message is one role byte
 * (system, user, assistant, or an invalid role) and a content up to the next NUL.
 * Checked: detection succeeds or fails with a message; rendering succeeds (a NUL-
 * terminated string whose length is *out_len and that holds every plain-ASCII message
 * content, trimmed, except a Gemma system message with no turn to fold into) or
 * fails with a message and nothing allocated; an invalid role is always refused. Every
 * piece sits in a buffer of exactly its size, so the ASan build catches a read one byte
 * past the end. Built by `make fuzz`; the unit tests replay its corpus. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "text/chat.h"

#define FUZZ_CHAT_MAX_MSGS 64

int fuzz_chat_one(const uint8_t *data, size_t size);

static char *fuzz_chat_dup(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

int fuzz_chat_one(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    const uint8_t mode = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *z = memchr(p, 0, (size_t)(end - p));
    const size_t tlen = z ? (size_t)(z - p) : (size_t)(end - p);
    /* the template text in a buffer of exactly its length (no NUL after it) */
    char *tmpl = malloc(tlen ? tlen : 1);
    if (!tmpl) abort();
    memcpy(tmpl, p, tlen);
    cn_chat_template *t = NULL;
    cn_error err = {0};
    static const char *const names[] = {"chatml", "gemma", "llama3"};
    cn_status st = (mode & 3) == 3 ? cn_chat_template_detect(tmpl, tlen, &t, &err)
                                   : cn_chat_template_from_name(names[mode & 3], &t, &err);
    free(tmpl);
    if (st != CN_STATUS_OK) {
        if (t || !err.msg[0]) abort();
        return -1;
    }
    if (!cn_chat_template_name(t) || !cn_chat_template_end_of_turn(t)) abort();

    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    cn_chat_msg msgs[FUZZ_CHAT_MAX_MSGS];
    char *owned[FUZZ_CHAT_MAX_MSGS];
    size_t n = 0;
    bool bad_role = false;
    p = z ? z + 1 : end;
    while (p < end && n < FUZZ_CHAT_MAX_MSGS) {
        const uint8_t role = *p++;
        z = memchr(p, 0, (size_t)(end - p));
        const size_t clen = z ? (size_t)(z - p) : (size_t)(end - p);
        owned[n] = fuzz_chat_dup(p, clen);
        msgs[n].role = roles[role & 3];
        msgs[n].content = owned[n];
        bad_role |= (role & 3) == 3;
        n++;
        p = z ? z + 1 : end;
    }
    char *out = NULL;
    size_t out_len = 0;
    st = cn_chat_render(t, n ? msgs : NULL, n, mode & 4, &out, &out_len, &err);
    if (st == CN_STATUS_OK) {
        if (!out || bad_role || n == 0 || strlen(out) != out_len) abort();
        /* every plain-ASCII content appears (trimmed families drop outer whitespace only) */
        for (size_t i = 0; i < n; i++) {
            const char *c = msgs[i].content;
            size_t a = 0, b = strlen(c);
            bool plain = true;
            for (size_t k = 0; k < b; k++)
                plain &= (c[k] >= 0x20 && c[k] < 0x7f) || c[k] == '\t' || c[k] == '\n' || c[k] == '\r';
            /* Gemma folds a leading system message into the first user turn: alone, it is dropped */
            if (!plain ||
                (cn_chat_template_family(t) == CN_CHAT_GEMMA && i == 0 && n == 1 && !strcmp(msgs[i].role, "system")))
                continue;
            while (a < b && (c[a] == ' ' || c[a] == '\n' || c[a] == '\t' || c[a] == '\r')) a++;
            while (b > a && (c[b - 1] == ' ' || c[b - 1] == '\n' || c[b - 1] == '\t' || c[b - 1] == '\r')) b--;
            if (b > a && !memmem(out, out_len, c + a, b - a)) abort();
        }
        free(out);
    } else {
        if (out || !err.msg[0]) abort();
        if (n > 0 && bad_role && st != CN_STATUS_INVALID_ARG) abort();
    }
    for (size_t i = 0; i < n; i++) free(owned[i]);
    cn_chat_template_free(t);
    return st == CN_STATUS_OK ? 0 : -1;
}

FUZZ_ENTRY(fuzz_chat_one)
