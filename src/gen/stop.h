/* stop.h — the stream filter between the detokenizer and the caller's output: stop
 * strings matched on the decoded text across token boundaries, with hold-back of text
 * that may still turn into a stop string, and the final flush.
 *
 * The generation loop pushes each token's newly final bytes (cn_detok_push output) and
 * the filter hands text to a callback as soon as no stop string can claim it. The result
 * does not depend on how the text was split into pieces: the output is always the text
 * before the first occurrence (smallest start offset) of any stop string in the whole
 * generated text, or all of it if none occurs. To keep that promise a complete match is
 * accepted only once no earlier-starting partial match is still pending, so stopping may
 * come a few bytes (fewer than the longest stop string) after the match completed.
 *
 * Knows nothing about tokens or models: bytes in, bytes out. */
#ifndef CN_STOP_H
#define CN_STOP_H

#include "core/core.h"

#define CN_STOP_MAX_STRINGS 16 /* stop strings per request (OpenAI allows 4) */
#define CN_STOP_MAX_LEN 256    /* bytes per stop string */

/* Receives text that is final: never retracted, never repeated. text is a view valid
 * only during the call; n_bytes > 0; the text never ends inside a UTF-8 character
 * (given UTF-8-complete input pieces). */
typedef void (*cn_stream_fn)(void *user, const char *text, size_t n_bytes);

typedef struct cn_stop_filter cn_stop_filter;

/* stops[0..n_stops): NUL-terminated, non-empty, valid UTF-8, at most CN_STOP_MAX_LEN
 * bytes each, n_stops <= CN_STOP_MAX_STRINGS (stops may be NULL when n_stops is 0).
 * The strings are copied. emit must not be NULL; user is passed back to it. */
cn_status cn_stop_filter_new(const char *const *stops, size_t n_stops, cn_stream_fn emit, void *user,
                             cn_stop_filter **out, cn_error *err);
void cn_stop_filter_free(cn_stop_filter *f); /* NULL is a no-op */

/* Feeds text[0..n_bytes) (the next decoded bytes; n_bytes may be 0). Emits what became
 * final. Sets *stopped (may be NULL) to true when a stop string matched: the text before
 * it has been emitted, the stop string and everything after it are dropped, and the
 * filter is done (finish reason CN_FINISH_STOP). Pushing into a done filter is
 * CN_STATUS_INVALID_ARG. */
cn_status cn_stop_filter_push(cn_stop_filter *f, const char *text, size_t n_bytes, bool *stopped, cn_error *err);

/* Ends the stream for reason (CN_FINISH_STOP for an end-of-generation token,
 * CN_FINISH_LENGTH for max_tokens or a full context, CN_FINISH_CANCELLED): emits all
 * held-back text, except that a stop string already complete in it still cuts the text
 * (then the reason becomes CN_FINISH_STOP with its index). Calling it again, or after a
 * stop string matched, does nothing: held text is released exactly once. */
void cn_stop_filter_finish(cn_stop_filter *f, cn_finish_reason reason);

/* CN_FINISH_NONE while the stream is open, else why it ended. */
cn_finish_reason cn_stop_filter_reason(const cn_stop_filter *f);
/* Index into the stops given to cn_stop_filter_new of the string that ended the stream;
 * -1 if none did. */
int cn_stop_filter_stop_index(const cn_stop_filter *f);
/* Bytes currently held back (waiting to see whether a stop string forms). */
size_t cn_stop_filter_held(const cn_stop_filter *f);

#endif
