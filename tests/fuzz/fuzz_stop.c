/* fuzz_stop.c — fuzz entry for the streaming stop-string filter (src/gen/stop.c), the
 * step between decoded text and what a client is sent (SSE chunks or the final text).
 *
 * Input: a count byte, that many NUL-terminated stop strings, then the stream, cut into
 * pieces whose lengths come from the bytes themselves (pieces of 0..15 bytes, so a stop
 * string spans pieces at every offset). Invalid stop lists (empty, malformed UTF-8, too
 * long) must be refused with a message. Otherwise the text emitted must be, against an
 * independent search of the whole stream: everything before the occurrence of a stop
 * string that starts first, or the whole stream if none occurs (stop.h's promise); the
 * reason and the stop index agree; nothing is held back after finish. Built by `make fuzz`; the unit
 * tests replay its corpus. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gen/stop.h"

int fuzz_stop_one(const uint8_t *data, size_t size);

static void fuzz_stop_emit(void *user, const char *text, size_t n) {
    if (n == 0) abort(); /* the contract: never an empty piece */
    fuzz_buf_add(user, text, n);
}

int fuzz_stop_one(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    const size_t n_stops = data[0] % 6;
    const char *stops[8];
    size_t i = 1;
    for (size_t k = 0; k < n_stops; k++) {
        const uint8_t *z = i < size ? memchr(data + i, 0, size - i) : NULL;
        if (!z) return -1;
        stops[k] = (const char *)data + i;
        i = (size_t)(z - data) + 1;
    }
    const char *text = (const char *)data + i;
    const size_t len = size - i;

    fuzz_buf out = {0};
    cn_stop_filter *f = NULL;
    cn_error err = {0};
    if (cn_stop_filter_new(n_stops ? stops : NULL, n_stops, fuzz_stop_emit, &out, &f, &err) != CN_STATUS_OK) {
        if (f || !err.msg[0]) abort();
        return -1;
    }
    bool stopped = false;
    size_t pos = 0;
    while (pos < len && !stopped) {
        const size_t piece = CN_MIN((size_t)((uint8_t)text[pos] % 16), len - pos);
        if (cn_stop_filter_push(f, text + pos, piece, &stopped, &err) != CN_STATUS_OK) abort();
        pos += piece;
        if (piece == 0) { /* an empty push is allowed; then take one byte */
            if (cn_stop_filter_push(f, text + pos, 1, &stopped, &err) != CN_STATUS_OK) abort();
            pos++;
        }
    }
    if (!stopped) cn_stop_filter_finish(f, CN_FINISH_LENGTH);
    if (cn_stop_filter_held(f) != 0) abort();

    /* the reference (stop.h's promise): the text before the occurrence of any stop
     * string with the smallest start offset in the whole stream */
    size_t first = SIZE_MAX;
    for (size_t at = 0; at < len && first == SIZE_MAX; at++)
        for (size_t k = 0; k < n_stops; k++) {
            const size_t sl = strlen(stops[k]);
            if (sl <= len - at && !memcmp(text + at, stops[k], sl)) first = at;
        }
    if (first == SIZE_MAX) {
        if (out.n != len || (len && memcmp(out.p, text, len))) abort();
        if (cn_stop_filter_reason(f) != CN_FINISH_LENGTH || cn_stop_filter_stop_index(f) != -1) abort();
    } else {
        if (out.n != first || (out.n && memcmp(out.p, text, out.n))) abort();
        const int idx = cn_stop_filter_stop_index(f);
        if (cn_stop_filter_reason(f) != CN_FINISH_STOP || idx < 0 || (size_t)idx >= n_stops) abort();
        const size_t sl = strlen(stops[idx]);
        if (sl > len - first || memcmp(text + first, stops[idx], sl)) abort();
    }
    cn_stop_filter_free(f);
    free(out.p);
    return 0;
}

FUZZ_ENTRY(fuzz_stop_one)
