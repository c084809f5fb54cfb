/* bench/matmul.c — one quantized matmul kernel on one thread: the dispatched family's
 * cn_kernels.matmul on a random weight matrix of a given type and shape (packed at "load"
 * as the model would be), against tokens quantized by the family's own quantizer.
 * Prints the best of -r runs as GMAC/s and weight GB/s, and with --check compares every
 * output bit with the scalar reference (ref, kernels/ref). --peak times the bare AVX2
 * int8 inner loop the x86 K-quant tiles are built of (8 tokens × 4 code vectors,
 * vpmaddubsw pair sums added in int16, one vpmaddwd by a scale per token), i.e. what
 * this core can do with no decoding, scales or memory traffic at all.
 *
 *     build/bench/matmul q4_k 8960 1536 1,8,64 [-r 10] [--check]
 *     build/bench/matmul --peak
 *
 * Not a test: it asserts nothing about speed (the machines are shared and noisy; take
 * the best of several runs, interleaved with whatever it is compared with). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "tensor/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static const struct {
    const char *name;
    uint32_t type;
} TYPES[] = {{"q4_0", CN_TYPE_Q4_0}, {"q4_1", CN_TYPE_Q4_1}, {"q5_0", CN_TYPE_Q5_0}, {"q5_1", CN_TYPE_Q5_1},
             {"q8_0", CN_TYPE_Q8_0}, {"q4_k", CN_TYPE_Q4_K}, {"q5_k", CN_TYPE_Q5_K}, {"q6_k", CN_TYPE_Q6_K}};

/* Random codes, with every block's f16 scales set to small normal values (random bytes
 * there would make infinities and NaNs, which compare unequal to themselves). */
static void fill_weights(uint32_t type, uint8_t *w, size_t row_bytes, int64_t n_out) {
    const cn_type_traits *tr = cn_type_traits_get(type);
    const uint16_t h = 0x2000; /* 2^-7 */
    for (size_t i = 0; i < row_bytes * (size_t)n_out; i++) w[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < n_out; r++)
        for (size_t o = 0; o + tr->type_size <= row_bytes; o += tr->type_size) {
            uint8_t *b = w + (size_t)r * row_bytes + o;
            switch (type) {
            case CN_TYPE_Q6_K: memcpy(b + 208, &h, 2); break;
            case CN_TYPE_Q4_K:
            case CN_TYPE_Q5_K:
            case CN_TYPE_Q4_1:
            case CN_TYPE_Q5_1:
                memcpy(b, &h, 2);
                memcpy(b + 2, &h, 2);
                break;
            default: memcpy(b, &h, 2); break;
            }
        }
}

static int run_one(uint32_t type, const char *name, int64_t n_out, int64_t k, int64_t n_tok, int reps, int check) {
    const cn_kernels *K = cn_kernels_get();
    const size_t rb = cn_type_row_bytes(type, k);
    const uint32_t at = cn_matmul_act_type(type);
    const size_t arb = cn_act_row_bytes(at, k);
    if (!rb || !arb) {
        fprintf(stderr, "matmul: k=%lld does not fit %s blocks\n", (long long)k, name);
        return 1;
    }
    /* the weights in 2 MiB pages where the kernel grants them, as the model's are
     * (model.c): from DRAM, 4 KiB pages cost a TLB walk every 4 KiB of the stream */
    uint8_t *w = cn_alloc_huge(rb * (size_t)n_out), *xq = malloc(arb * (size_t)n_tok);
    float *x = malloc(sizeof(float) * (size_t)(k * n_tok)), *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    const size_t ps = K->packed_size ? K->packed_size(type, n_out, k) : 0;
    void *wp = ps ? cn_alloc_huge((ps + 63) / 64 * 64) : NULL;
    if (!w || !xq || !x || !y || (ps && !wp)) {
        fprintf(stderr, "matmul: out of memory\n");
        return 1;
    }
    fill_weights(type, w, rb, n_out);
    if (ps) K->pack(type, w, rb, n_out, k, wp);
    for (int64_t i = 0; i < k * n_tok; i++) x[i] = (float)rnd() / 65536.0f / 32768.0f - 1.0f;
    K->quantize_rows(at, x, k, n_tok, xq, arb, 0, 1);
    cn_matmul_args a = {.w_type = type,
                        .w = ps ? wp : (const void *)w,
                        .w_row_bytes = rb,
                        .w_packed = ps != 0,
                        .xq = xq,
                        .xq_row_bytes = arb,
                        .y = y,
                        .ldy = n_out,
                        .n_out = n_out,
                        .k = k,
                        .n_tok = n_tok};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t = now();
        K->matmul(&a, 0, 1);
        const double dt = now() - t;
        if (dt < best) best = dt;
    }
    const double macs = (double)n_out * (double)k * (double)n_tok;
    printf("%-7s %-5s %6lld x %-6lld n_tok %-4lld %s  %9.3f ms  %7.1f GMAC/s  %6.2f GB/s of weights", K->name, name,
           (long long)n_out, (long long)k, (long long)n_tok, ps ? "packed" : "stored", best * 1e3, macs / best / 1e9,
           (double)rb * (double)n_out / best / 1e9);
    int bad = 0;
    if (check) {
        float *y0 = malloc(sizeof(float) * (size_t)(n_out * n_tok));
        cn_matmul_args r = a;
        r.w = w;
        r.w_packed = false;
        r.y = y0;
        cn_kernels_ref()->matmul(&r, 0, 1);
        bad = y0 && memcmp(y0, y, sizeof(float) * (size_t)(n_out * n_tok)) != 0;
        printf("  %s", !y0 ? "(no memory for the check)" : bad ? "DIFFERS from ref" : "= ref, bit for bit");
        free(y0);
    }
    printf("\n");
    cn_free_aligned(w);
    free(xq);
    free(x);
    free(y);
    cn_free_aligned(wp);
    return bad;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void peak(void) {
    _Alignas(64) int8_t act[8][64];
    _Alignas(64) uint8_t wc[4][32];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 64; j++) act[i][j] = (int8_t)(i * 7 + j);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 32; j++) wc[i][j] = (uint8_t)(j & 15);
    __m256i sq[8];
    for (int t = 0; t < 8; t++) sq[t] = _mm256_setzero_si256();
    const __m256i sc = _mm256_set1_epi16(3);
    const long n = 20000000;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now();
        for (long it = 0; it < n; it++) {
            __m256i w0 = _mm256_load_si256((const void *)wc[0]), w1 = _mm256_load_si256((const void *)wc[1]);
            __m256i w2 = _mm256_load_si256((const void *)wc[2]), w3 = _mm256_load_si256((const void *)wc[3]);
            __asm__ volatile("" : "+x"(w0), "+x"(w1), "+x"(w2), "+x"(w3)); /* reloaded each time */
            _Pragma("GCC unroll 8") for (int t = 0; t < 8; t++) {
                const int32_t *p = (const int32_t *)(const void *)act[t];
                __asm__ volatile("" : "+r"(p)); /* not hoisted out of the loop */
                __m256i s = _mm256_maddubs_epi16(w0, _mm256_set1_epi32(p[0]));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w1, _mm256_set1_epi32(p[1])));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w2, _mm256_set1_epi32(p[2])));
                s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w3, _mm256_set1_epi32(p[3])));
                sq[t] = _mm256_add_epi32(sq[t], _mm256_madd_epi16(s, sc));
            }
        }
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    __m256i s = sq[0];
    for (int t = 1; t < 8; t++) s = _mm256_add_epi32(s, sq[t]);
    int32_t o[8];
    _mm256_storeu_si256((void *)o, s);
    const double macs = (double)n * 8 * 4 * 32;
    printf("avx2 int8 inner loop, no decode/scales/memory: %.1f GMAC/s (best of 5; checksum %d)\n", macs / best / 1e9,
           o[0]);
}
#endif

static int usage(void) {
    fprintf(stderr, "usage: matmul TYPE N_OUT K N_TOK[,N_TOK...] [-r REPS] [--check]   (TYPE: q4_0 q4_1 q5_0 q5_1 "
                    "q8_0 q4_k q5_k q6_k)\n       matmul --peak\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--peak")) {
#if defined(__x86_64__)
        if (!__builtin_cpu_supports("avx2")) {
            fprintf(stderr, "matmul: --peak needs AVX2\n");
            return 1;
        }
        peak();
        return 0;
#else
        fprintf(stderr, "matmul: --peak is x86 only\n");
        return 1;
#endif
    }
    if (argc < 5) return usage();
    int reps = 10, check = 0;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else return usage();
    }
    uint32_t type = 0;
    const char *name = NULL;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(argv[1], TYPES[i].name)) type = TYPES[i].type, name = TYPES[i].name;
    const long long n_out = atoll(argv[2]), k = atoll(argv[3]);
    if (!name || n_out < 1 || n_out > (1 << 20) || k < 1 || k > (1 << 20) || reps < 1 || reps > 1000) return usage();
    int bad = 0;
    for (char *tok = strtok(argv[4], ","); tok; tok = strtok(NULL, ",")) {
        const long long nt = atoll(tok);
        if (nt < 1 || nt > 4096) return usage();
        bad |= run_one(type, name, n_out, k, nt, reps, check);
    }
    return bad;
}
