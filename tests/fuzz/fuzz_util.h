/* fuzz_util.h — what the harnesses in tests/fuzz share: a growable byte buffer for the
 * output they check, and the libFuzzer entry (left out with CN_FUZZ_NO_ENTRY, so the
 * unit tests can include several harnesses into one binary). */
#ifndef CN_FUZZ_UTIL_H
#define CN_FUZZ_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
} fuzz_buf;

static inline void fuzz_buf_add(fuzz_buf *b, const char *s, size_t n) {
    if (n == 0) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

#ifndef CN_FUZZ_NO_ENTRY
#define FUZZ_ENTRY(one)                                            \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { \
        one(data, size);                                           \
        return 0;                                                  \
    }
#else
#define FUZZ_ENTRY(one)
#endif

#endif
