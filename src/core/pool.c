/* pool.c — persistent worker threads woken per parallel region.
 *
 * Design: a generation counter announces new work; workers spin briefly on it (a
 * decode step issues hundreds of small regions per token, and a futex round trip per
 * region would dominate), then fall back to sleeping on a condition variable. Each
 * worker reports completion through an atomic counter the caller spins on. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CN_RELAX() _mm_pause()
#else
#define CN_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000
/* On an oversubscribed machine the thread we wait for may be descheduled: spinning
 * then burns our time slice while it waits for a core, so hand the core over now and
 * then. */
#define YIELD_EVERY 256

struct cn_pool {
    int n_threads;
    pthread_t *threads;
    cn_pool_fn fn;
    void *ctx;
    atomic_uint gen;   /* bumped once per region */
    atomic_int n_done; /* workers finished with the current region */
    atomic_int n_sleeping;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    cn_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *argp) {
    worker_arg *arg = argp;
    cn_pool *p = arg->pool;
    int ith = arg->ith;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                CN_RELAX();
                if (spins % YIELD_EVERY == 0) sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        p->fn(p->ctx, ith, p->n_threads);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
    return NULL;
}

cn_status cn_threads_check(int32_t n, const char *who, cn_error *err) {
    if (n >= 0 && n <= CN_MAX_THREADS) return CN_STATUS_OK;
    return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_threads",
                        "%s: n_threads = %d is out of range [0, %d] (0 = every CPU)", who, n, CN_MAX_THREADS);
}

int32_t cn_threads_resolve(int32_t n) {
    if (n > 0) return CN_MIN(n, CN_MAX_THREADS);
    const long c = sysconf(_SC_NPROCESSORS_ONLN);
    return (int32_t)CN_MAX(1L, CN_MIN(c, (long)CN_MAX_THREADS));
}

cn_status cn_pool_create(int n_threads, cn_pool **out, cn_error *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > CN_MAX_THREADS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "thread count %d out of range [1, %d]", n_threads, CN_MAX_THREADS);
    cn_pool *p = calloc(1, sizeof *p);
    if (!p) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            cn_pool_free(p);
            return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating thread pool");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a || pthread_create(&p->threads[i - 1], NULL, worker_main, a ? (a->pool = p, a->ith = i, a) : NULL) != 0) {
            free(a);
            p->n_threads = i; /* join only those started */
            cn_pool_free(p);
            return cn_err(err, CN_STATUS_NO_MEMORY, "cannot start worker thread %d", i);
        }
    }
    *out = p;
    return CN_STATUS_OK;
}

void cn_pool_free(cn_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->threads)
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int cn_pool_size(const cn_pool *p) { return p ? p->n_threads : 1; }

void cn_pool_run(cn_pool *p, cn_pool_fn fn, void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n_threads);
    for (unsigned spins = 1; atomic_load_explicit(&p->n_done, memory_order_acquire) < p->n_threads - 1; spins++) {
        CN_RELAX();
        if (spins % YIELD_EVERY == 0) sched_yield();
    }
}
