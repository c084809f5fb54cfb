/* buf.h — the one growable buffer of the tree: arrays that grow by doubling
 * (CN_GROW) and a byte string that grows as it is written (cn_buf).
 *
 * Every size is checked: a capacity that would overflow size_t is refused like an
 * allocation that fails, and on any failure the array or string is left as it was (the
 * caller still owns it and frees it as usual). Growth is geometric (twice the old
 * capacity, at least what is needed, at least 8 elements), so appending n elements one
 * at a time costs O(n) copies.
 *
 * Header-only (static inline) on purpose: it links nothing, so every layer may use it,
 * the server and the CLI too, without reaching into the library (tools/layers.txt lists
 * it as public). */
#ifndef CN_CORE_BUF_H
#define CN_CORE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The capacity an array of cap elements (elem_size bytes each) grows to so that it holds
 * need: need itself when cap already does; 0 when the bytes would overflow size_t. */
static inline size_t cn_grow_cap(size_t cap, size_t need, size_t elem_size) {
    if (need <= cap) return cap;
    size_t c = cap < 8 ? 8 : (cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2);
    if (c < need) c = need;
    return c > SIZE_MAX / elem_size ? 0 : c;
}

/* Makes *items (an array of *cap elements of elem_size bytes, may be NULL) hold at least
 * need elements: realloc'd to cn_grow_cap's capacity. False, nothing changed, when the size
 * overflows or memory runs out. */
static inline bool cn_grow_(void **items, size_t *cap, size_t need, size_t elem_size) {
    if (need <= *cap) return true;
    const size_t c = cn_grow_cap(*cap, need, elem_size);
    void *p = c ? realloc(*items, c * elem_size) : NULL;
    if (!p) return false;
    *items = p;
    *cap = c;
    return true;
}

/* CN_GROW(arr, cap, need): arr a T * (NULL or from malloc), cap its size_t capacity in
 * elements; true when arr holds at least need elements. */
#define CN_GROW(arr, cap, need) cn_grow_((void **)&(arr), &(cap), (size_t)(need), sizeof *(arr))

/* A byte string that grows as it is written; p[0..n) the bytes, and p[n] is always 0
 * once anything was written. A zeroed struct is an empty buffer. After a failed write
 * (no memory) `failed` stays set and every later write is refused, so a caller may write
 * a whole message and check once. */
typedef struct {
    char *p;
    size_t n, cap;
    bool failed;
} cn_buf;

static inline bool cn_buf_put(cn_buf *b, const void *s, size_t n) {
    if (b->failed) return false;
    if (n > SIZE_MAX - 1 - b->n || !cn_grow_((void **)&b->p, &b->cap, b->n + n + 1, 1)) {
        b->failed = true;
        return false;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static inline bool cn_buf_puts(cn_buf *b, const char *s) { return cn_buf_put(b, s, strlen(s)); }

static inline bool cn_buf_putc(cn_buf *b, char c) { return cn_buf_put(b, &c, 1); }

static inline bool cn_buf_vprintf(cn_buf *b, const char *fmt, va_list ap) {
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    const int k = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (k < 0) return b->failed = true, false;
    if ((size_t)k < sizeof small) return cn_buf_put(b, small, (size_t)k);
    if (b->failed || (size_t)k > SIZE_MAX - 1 - b->n || !cn_grow_((void **)&b->p, &b->cap, b->n + (size_t)k + 1, 1))
        return b->failed = true, false;
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    b->n += (size_t)k;
    return true;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline bool
cn_buf_printf(cn_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const bool ok = cn_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ok;
}

/* Hands the bytes over: a NUL-terminated malloc'd string (an empty one when nothing was
 * written) the caller frees, its length in *n (may be NULL); NULL when a write failed or
 * memory runs out. The buffer is empty afterwards, either way. */
static inline char *cn_buf_take(cn_buf *b, size_t *n) {
    char *p = b->failed ? NULL : b->p ? b->p : calloc(1, 1);
    if (!p) free(b->p);
    if (n) *n = p ? b->n : 0;
    *b = (cn_buf){0};
    return p;
}

static inline void cn_buf_free(cn_buf *b) {
    free(b->p);
    *b = (cn_buf){0};
}

#endif
