/* pool.h — a thread pool created once (with the engine or the CLI run) and reused for
 * every parallel region. The caller's thread takes part as thread 0, so a pool of N
 * has N-1 workers. Work is split by the callee using (ith, nth); the pool never decides
 * how a reduction is ordered, so results do not depend on thread count if the callee
 * splits over independent outputs. */
#ifndef CN_POOL_H
#define CN_POOL_H

#include "core.h"

typedef struct cn_pool cn_pool;
typedef void (*cn_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1. */
cn_status cn_pool_create(int n_threads, cn_pool **out, cn_error *err);
void cn_pool_free(cn_pool *p); /* NULL is a no-op; joins the workers */
int cn_pool_size(const cn_pool *p); /* 1 for NULL */

/* Runs fn(ctx, ith, nth) for ith in [0, nth) and returns when all have returned.
 * A NULL pool runs fn(ctx, 0, 1) on the caller. Not reentrant. */
void cn_pool_run(cn_pool *p, cn_pool_fn fn, void *ctx);

/* The [begin, end) slice of n items for thread ith of nth, in contiguous chunks. */
static inline void cn_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = n / nth, rem = n % nth;
    *begin = ith * per + (ith < rem ? ith : rem);
    *end = *begin + per + (ith < rem ? 1 : 0);
}

#endif
