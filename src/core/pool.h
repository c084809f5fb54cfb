/* pool.h — a thread pool created once (with the engine or the CLI run) and reused for
 * every parallel region. The caller's thread takes part as thread 0, so a pool of N
 * has N-1 workers. Work is split by the callee using (ith, nth); the pool never decides
 * how a reduction is ordered, so results do not depend on thread count if the callee
 * splits over independent outputs. */
#ifndef CN_POOL_H
#define CN_POOL_H

#include "core.h"

/* The one rule for a thread count, wherever one is asked for (contexts, engines,
 * embedders, quantize; cinder.h documents it as "0 = every CPU"): n in
 * [1, CN_MAX_THREADS] is used as it is, 0 means every online CPU (at most
 * CN_MAX_THREADS). cn_threads_check refuses anything else with the one message,
 * naming who asked ("context: n_threads = -1 is out of range [0, 1024] (0 = every CPU)",
 * param "n_threads"). */
#define CN_MAX_THREADS 1024
cn_status cn_threads_check(int32_t n, const char *who, cn_error *err);
int32_t cn_threads_resolve(int32_t n); /* n checked: n itself, or every CPU for 0 */

typedef struct cn_pool cn_pool;
typedef void (*cn_pool_fn)(void *ctx, int ith, int nth);

/* n_threads in [1, CN_MAX_THREADS] (resolved: cn_threads_resolve). */
cn_status cn_pool_create(int n_threads, cn_pool **out, cn_error *err);
void cn_pool_free(cn_pool *p);      /* NULL is a no-op; joins the workers */
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
