/* stop.c — stop strings over a stream of decoded text, with hold-back and flush.
 *
 * State is one buffer, the held-back text: bytes pushed but not yet emitted. After every
 * push it starts at the earliest offset where a stop string could still complete, so it
 * is always shorter than the longest stop string. A push appends the new bytes and scans
 * the buffer once: at each offset, each stop string is compared against the bytes that
 * are there. The first offset that holds a complete stop string ends the stream; the
 * first offset that holds only a proper prefix of one bounds what may be emitted. The
 * cost of a push is therefore (held + new bytes) x (total stop-string bytes), with held
 * bounded by the longest stop string, never the whole generated text.
 *
 * Why the emitted text never splits a UTF-8 character: the buffer is cut only at offsets
 * where a stop string starts, stop strings are validated as UTF-8 at creation, so their
 * first byte is never a continuation byte, and the pieces pushed are whole characters. */
#include "gen/stop.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/utf8.h"

struct cn_stop_filter {
    char **stops;     /* (n_stops) copies, NUL-terminated */
    size_t *stop_len; /* (n_stops) bytes, excluding the NUL */
    size_t n_stops;
    cn_stream_fn emit;
    void *user;
    char *held; /* (held_cap) bytes; [0, n_held) pushed but not yet emitted */
    size_t n_held;
    size_t held_cap;
    cn_finish_reason reason;
    int stop_index;
};

const char *cn_finish_reason_str(cn_finish_reason r) {
    switch (r) {
    case CN_FINISH_NONE: return "none";
    case CN_FINISH_STOP: return "stop";
    case CN_FINISH_LENGTH: return "length";
    case CN_FINISH_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* Strict UTF-8 (core/utf8.h): no overlong forms, no surrogates, nothing above U+10FFFF,
 * nothing cut short. */
static bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0, bad; i < n;) {
        const int len = cn_utf8_check((const uint8_t *)s + i, n - i, &bad);
        if (len <= 0) return false;
        i += (size_t)len;
    }
    return true;
}

cn_status cn_stop_filter_new(const char *const *stops, size_t n_stops, cn_stream_fn emit, void *user,
                             cn_stop_filter **out, cn_error *err) {
    if (out) *out = NULL;
    if (!out || !emit) return cn_err(err, CN_STATUS_INVALID_ARG, "stop filter: NULL argument");
    if (n_stops > CN_STOP_MAX_STRINGS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "%zu stop strings (at most %d)", n_stops, CN_STOP_MAX_STRINGS);
    if (n_stops > 0 && !stops) return cn_err(err, CN_STATUS_INVALID_ARG, "stop filter: NULL stop list");
    for (size_t k = 0; k < n_stops; k++) {
        if (!stops[k]) return cn_err(err, CN_STATUS_INVALID_ARG, "stop string %zu is NULL", k);
        size_t len = strnlen(stops[k], CN_STOP_MAX_LEN + 1);
        if (len == 0) return cn_err(err, CN_STATUS_INVALID_ARG, "stop string %zu is empty", k);
        if (len > CN_STOP_MAX_LEN)
            return cn_err(err, CN_STATUS_INVALID_ARG, "stop string %zu is longer than %d bytes", k, CN_STOP_MAX_LEN);
        if (!utf8_valid(stops[k], len))
            return cn_err(err, CN_STATUS_INVALID_ARG, "stop string %zu is not valid UTF-8", k);
    }

    cn_stop_filter *f = calloc(1, sizeof *f);
    if (!f) goto oom;
    f->emit = emit;
    f->user = user;
    f->stop_index = -1;
    if (n_stops > 0) {
        f->stops = calloc(n_stops, sizeof *f->stops);
        f->stop_len = calloc(n_stops, sizeof *f->stop_len);
        if (!f->stops || !f->stop_len) goto oom;
        f->n_stops = n_stops; /* after the arrays exist, so free() can walk them */
        for (size_t k = 0; k < n_stops; k++) {
            f->stop_len[k] = strlen(stops[k]);
            f->stops[k] = malloc(f->stop_len[k] + 1);
            if (!f->stops[k]) goto oom;
            memcpy(f->stops[k], stops[k], f->stop_len[k] + 1);
        }
    }
    *out = f;
    return CN_STATUS_OK;
oom:
    cn_stop_filter_free(f);
    return cn_err(err, CN_STATUS_NO_MEMORY, "stop filter: out of memory");
}

void cn_stop_filter_free(cn_stop_filter *f) {
    if (!f) return;
    for (size_t k = 0; k < f->n_stops; k++) free(f->stops[k]);
    free(f->stops);
    free(f->stop_len);
    free(f->held);
    free(f);
}

/* The first offset of the held text where a stop string is complete or, unless at_end,
 * could still complete with more text. *idx: the complete stop string there (the
 * shortest, then the lowest index, when several are), or -1 for a partial match or none.
 * Returns n_held when there is neither. */
static size_t scan(const cn_stop_filter *f, bool at_end, int *idx) {
    const char *h = f->held;
    for (size_t i = 0; i < f->n_held; i++) {
        size_t rest = f->n_held - i;
        int best = -1;
        bool partial = false;
        for (size_t k = 0; k < f->n_stops; k++) {
            size_t len = f->stop_len[k];
            if (f->stops[k][0] != h[i]) continue;
            if (len <= rest) {
                if (memcmp(h + i, f->stops[k], len) == 0 && (best < 0 || len < f->stop_len[best])) best = (int)k;
            } else if (!at_end && memcmp(h + i, f->stops[k], rest) == 0) {
                partial = true;
            }
        }
        if (best >= 0 || partial) {
            *idx = best;
            return i;
        }
    }
    *idx = -1;
    return f->n_held;
}

static void emit(const cn_stop_filter *f, const char *text, size_t n) {
    if (n > 0) f->emit(f->user, text, n);
}

/* Emits held[0, cut) and either ends the stream at cut (idx >= 0) or keeps the rest. */
static void release(cn_stop_filter *f, size_t cut, int idx) {
    emit(f, f->held, cut);
    if (idx >= 0) {
        f->n_held = 0;
        f->reason = CN_FINISH_STOP;
        f->stop_index = idx;
        return;
    }
    if (cut > 0 && cut < f->n_held) memmove(f->held, f->held + cut, f->n_held - cut);
    f->n_held -= cut;
}

cn_status cn_stop_filter_push(cn_stop_filter *f, const char *text, size_t n_bytes, bool *stopped, cn_error *err) {
    if (stopped) *stopped = false;
    if (!f || (n_bytes > 0 && !text)) return cn_err(err, CN_STATUS_INVALID_ARG, "stop filter push: NULL argument");
    if (f->reason != CN_FINISH_NONE)
        return cn_err(err, CN_STATUS_INVALID_ARG, "stop filter push after the stream ended (%s)",
                      cn_finish_reason_str(f->reason));
    if (n_bytes == 0) return CN_STATUS_OK;
    if (f->n_stops == 0) {
        emit(f, text, n_bytes);
        return CN_STATUS_OK;
    }

    uint64_t need;
    if (!cn_add_ok(f->n_held, n_bytes, &need) || need > SIZE_MAX)
        return cn_err(err, CN_STATUS_LIMIT, "stop filter: piece of %zu bytes too large", n_bytes);
    if (!CN_GROW(f->held, f->held_cap, need)) return cn_err(err, CN_STATUS_NO_MEMORY, "stop filter: out of memory");
    memcpy(f->held + f->n_held, text, n_bytes);
    f->n_held += n_bytes;

    int idx;
    size_t cut = scan(f, false, &idx);
    release(f, cut, idx);
    if (stopped) *stopped = idx >= 0;
    return CN_STATUS_OK;
}

void cn_stop_filter_finish(cn_stop_filter *f, cn_finish_reason reason) {
    assert(reason == CN_FINISH_STOP || reason == CN_FINISH_LENGTH || reason == CN_FINISH_CANCELLED);
    if (!f || f->reason != CN_FINISH_NONE) return;
    int idx;
    size_t cut = scan(f, true, &idx); /* at the end, cut is n_held unless a match is there */
    release(f, cut, idx);
    if (idx < 0) f->reason = reason;
}

cn_finish_reason cn_stop_filter_reason(const cn_stop_filter *f) { return f->reason; }
int cn_stop_filter_stop_index(const cn_stop_filter *f) { return f->stop_index; }
size_t cn_stop_filter_held(const cn_stop_filter *f) { return f->n_held; }
