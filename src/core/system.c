/* system.c — the machine as cinder.h reports it (cn_system_get_info: CPU count and the
 * features detection found) and its measured memory bandwidth
 * (cn_system_measure_bandwidth), for tools that set speed against what the hardware
 * allows. It measures and reports; it chooses nothing (kernels are chosen from cpu.c). */
#include <math.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core.h"
#include "cpu.h"
#include "pool.h"

#define BW_MIN_BYTES ((size_t)64 << 20)

void cn_system_get_info(cn_system_info *out) {
    memset(out, 0, sizeof *out);
    out->n_cpus = cn_threads_resolve(0); /* what n_threads = 0 means everywhere */
    const cn_cpu_features *f = cn_cpu_get();
    out->avx2 = f->avx2;
    out->avx512f = f->avx512f;
    out->avx512vnni = f->avx512vnni;
    out->amx_int8 = f->amx_int8;
    out->neon = f->neon;
}

typedef struct {
    const uint64_t *src;
    uint64_t *dst;
    size_t n_words;
    uint64_t sink[64];
} bw_task;

/* This thread's slice as 4 interleaved streams with prefetch 8 KiB ahead: more memory
 * parallelism than one stream (measured), as the matmul's 16-row tiles have; 16-byte
 * vector loads (GCC vectors: SSE2 / NEON) so the loop is not instruction-bound. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));
static void bw_read(void *p, int ith, int nth) {
    bw_task *t = p;
    int64_t i0, i1;
    cn_split((int64_t)t->n_words / 32, ith, nth, &i0, &i1);
    const int64_t per = (i1 - i0) * 8; /* words per stream */
    const u64x2 *s[4];
    for (int k = 0; k < 4; k++) s[k] = (const u64x2 *)(const void *)(t->src + i0 * 32 + k * per);
    u64x2 a = {0, 0}, b = {0, 0};
    for (int64_t i = 0; i < per / 2; i += 4)
        for (int k = 0; k < 4; k++) {
            const u64x2 *q = s[k] + i;
            __builtin_prefetch(q + 512, 0, 2);
            a += q[0] ^ q[2];
            b += q[1] ^ q[3];
        }
    t->sink[ith % 64] = a[0] + a[1] + b[0] + b[1];
}

/* This thread's slice as one forward stream with no software prefetch, which the
 * hardware prefetchers follow best on some machines (Zen 4: the packed weight tiles
 * stream this way faster than the 4 prefetched streams above read): the probe reports
 * the better of the two patterns. */
static void bw_read_fwd(void *p, int ith, int nth) {
    bw_task *t = p;
    int64_t i0, i1;
    cn_split((int64_t)t->n_words / 8, ith, nth, &i0, &i1);
    const u64x2 *q = (const u64x2 *)(const void *)(t->src + i0 * 8);
    u64x2 a = {0, 0}, b = {0, 0}, c = {0, 0}, d = {0, 0};
    for (int64_t i = 0; i < (i1 - i0) * 4; i += 4) {
        a += q[i];
        b += q[i + 1];
        c += q[i + 2];
        d += q[i + 3];
    }
    a += b ^ c ^ d;
    t->sink[ith % 64] = a[0] + a[1];
}

static void bw_copy(void *p, int ith, int nth) {
    bw_task *t = p;
    int64_t i0, i1;
    cn_split((int64_t)t->n_words, ith, nth, &i0, &i1);
    memcpy(t->dst + i0, t->src + i0, (size_t)(i1 - i0) * 8);
}

cn_status cn_system_measure_bandwidth(int32_t n_threads, uint64_t n_bytes, double *read_gb_s, double *copy_gb_s,
                                      cn_error *err) {
    *read_gb_s = *copy_gb_s = 0;
    if (n_threads < 1 || n_threads > 1024)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_threads",
                            "bandwidth: n_threads = %d is out of range [1, 1024]", n_threads);
    if (n_bytes > SIZE_MAX / 2)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_bytes", "bandwidth: n_bytes = %llu is too large",
                            (unsigned long long)n_bytes);
    const size_t n = (CN_MAX((size_t)n_bytes, BW_MIN_BYTES) + 63) & ~(size_t)63;
    cn_pool *pool = NULL;
    cn_status st = cn_pool_create(n_threads, &pool, err);
    if (st != CN_STATUS_OK) return st;
    uint64_t *buf = cn_alloc_aligned(n);
    if (!buf) {
        cn_pool_free(pool);
        return cn_err(err, CN_STATUS_NO_MEMORY, "bandwidth: out of memory for %zu bytes", n);
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* the same 2 MiB pages the weights get with prefault (model.c), for a fair ratio */
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)buf + huge - 1) & ~(huge - 1);
    if (a < (uintptr_t)buf + n) madvise((void *)a, ((uintptr_t)buf + n - a) & ~(huge - 1), MADV_HUGEPAGE);
#endif
    memset(buf, 1, n);
    bw_task t = {.src = buf, .n_words = n / 8};
    for (int rep = 0; rep < 6; rep++) {
        const double t0 = cn_time_ms();
        cn_pool_run(pool, rep % 2 ? bw_read_fwd : bw_read, &t);
        *read_gb_s = fmax(*read_gb_s, n / (cn_time_ms() - t0) / 1e6);
    }
    bw_task c = {.src = buf, .dst = buf + n / 16, .n_words = n / 16};
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = cn_time_ms();
        cn_pool_run(pool, bw_copy, &c);
        *copy_gb_s = fmax(*copy_gb_s, n / (cn_time_ms() - t0) / 1e6);
    }
    cn_free_aligned(buf);
    cn_pool_free(pool);
    return CN_STATUS_OK;
}
