/* core.h — errors, checked size arithmetic, aligned allocation, file mapping, clock,
 * logging. The bottom layer: it knows nothing of models, only libc and the OS.
 * Nothing here prints to stdout; logging goes to stderr and only when enabled. */
#ifndef CN_CORE_H
#define CN_CORE_H

#include "cinder.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define CN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CN_UNUSED __attribute__((unused))
#else
#define CN_PRINTF(a, b)
#define CN_UNUSED
#endif

#define CN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Sets err (may be NULL) and returns s, so callers write `return cn_err(err, ...)`.
 * The message is truncated to fit; never fails. */
cn_status cn_err(cn_error *err, cn_status s, const char *fmt, ...) CN_PRINTF(3, 4);
/* As cn_err, and names the parameter at fault (err->param). */
cn_status cn_err_param(cn_error *err, cn_status s, const char *param, const char *fmt, ...) CN_PRINTF(4, 5);
void cn_err_clear(cn_error *err);

/* Checked size arithmetic: return false on overflow, leaving *out untouched. */
static inline bool cn_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}
static inline bool cn_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* Index of the largest of x[0..n) (n >= 1), the first on ties: greedy's choice. */
static inline int32_t cn_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Aligned allocation (64 bytes, a cache line and an AVX-512 register). Returns NULL on
 * failure or n == 0 overflow; cn_free_aligned(NULL) is a no-op. */
#define CN_ALIGN 64
void *cn_alloc_aligned(size_t n_bytes);
void *cn_calloc_aligned(size_t n_bytes);
void cn_free_aligned(void *p);
/* Like cn_alloc_aligned (free with cn_free_aligned), for large buffers read all over on
 * every token (the KV cache): 2 MiB aligned and, on Linux, asked for transparent huge
 * pages, so reading it costs far fewer TLB misses. Pages still fill on first touch. */
void *cn_alloc_huge(size_t n_bytes);

/* A read-only mapping of a whole file. */
typedef struct {
    const uint8_t *data;
    size_t n_bytes;
} cn_mapped_file;

cn_status cn_map_file(const char *path, cn_mapped_file *out, cn_error *err);
void cn_unmap_file(cn_mapped_file *m); /* accepts a zeroed struct */

/* Monotonic clock. */
double cn_time_ms(void);
int64_t cn_time_us(void);

/* A message to the log (cinder.h: cn_log_set, cn_log_set_level): to stderr, or to the
 * program's callback, when lvl passes the level. */
void cn_log(cn_log_level lvl, const char *fmt, ...) CN_PRINTF(2, 3);

#endif
