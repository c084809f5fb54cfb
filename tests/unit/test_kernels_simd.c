/* test_kernels_simd.c — every SIMD kernel family this CPU runs (cn_cpu_get() decides;
 * with CINDER_ISA=ref there is none and the checks pass vacuously on ref alone), and
 * wherever the AVX-512 family runs the AMX family with software tiles (amx_emu_avx512.c),
 * against the scalar reference, kernels/ref:
 *  - matmul for every weight format on random weight bytes and random activations, odd
 *    block counts, n_out off the lane tile, n_tok 1..17, rows longer than the kernels'
 *    K-chunk, a y stride wider than n_out: the SIMD result must be BIT-IDENTICAL to ref
 *    (the families do ref's integer dot exactly and then ref's float operations in ref's
 *    order, so the bound is 0 ulp, not a tolerance);
 *  - batch invariance and thread invariance inside each family: an output row computed
 *    alone (n_tok 1) or inside a batch of 17, by any (ith, nth), has the same bits;
 *  - quantize_rows for every activation format, byte-identical to ref, including
 *    all-zero blocks, ties in magnitude with opposite signs, and tails of F16/BF16 rows. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/kernels.h"
#include "tensor/tensor.h"
#if defined(__x86_64__)
#include "amx_emu.h"
#include "kernels/x86/x86.h"
#endif
#if defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float frnd(void) { return (float)(rnd() & 0xFFFFFF) / (float)(1 << 23) - 1.0f; } /* [-1, 1) */

/* The SIMD families this CPU can run: at most 4 (FAM_MAX leaves room for ref). */
enum { FAM_MAX = 5 };
static int simd_families(const cn_kernels **out) {
    int n = 0;
#if defined(__x86_64__)
    const cn_cpu_features *f = cn_cpu_get();
    if (f->avx2 && f->fma && f->f16c) out[n++] = cn_kernels_avx2();
    const bool avx512 = f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
    if (avx512) out[n++] = cn_kernels_avx512();
    if (f->amx_int8) out[n++] = cn_kernels_amx();
    /* the AMX family's tile code with software tiles, wherever its vector code runs */
    if (avx512) out[n++] = cn_test_kernels_amx_emu();
#elif defined(__aarch64__)
    out[0] = cn_kernels_neon(); /* baseline arm64; counted unless CINDER_ISA=ref took it away */
    n = cn_cpu_get()->neon ? 1 : 0;
#else
    (void)out;
#endif
    return n;
}

static const uint32_t k_types[] = {CN_TYPE_F32,  CN_TYPE_F16,  CN_TYPE_BF16, CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0,
                                   CN_TYPE_Q5_1, CN_TYPE_Q8_0, CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};

static uint16_t f16_of(float x) { return cn_f32_to_f16(x); }

/* Extreme inputs for check_one: every code byte 0xFF (the largest codes, scales and
 * mins of each format) and activations all equal (every code at magnitude 127), the
 * case where 16-bit partial sums in a family would overflow first. */
static bool g_extreme;

/* Random weight rows: random code bytes, finite random scales (f16 fields rewritten). */
static void fill_weights(uint32_t type, uint8_t *w, size_t n_bytes, int64_t n_rows, int64_t k) {
    for (size_t i = 0; i < n_bytes; i++) w[i] = g_extreme ? 0xFF : (uint8_t)rnd();
    const cn_type_traits *tr = cn_type_traits_get(type);
    const size_t rb = cn_type_row_bytes(type, k);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (type == CN_TYPE_F32) {
            for (int64_t i = 0; i < k; i++) ((float *)(void *)row)[i] = frnd() * 2;
            continue;
        }
        if (type == CN_TYPE_F16 || type == CN_TYPE_BF16) {
            for (int64_t i = 0; i < k; i++) {
                const uint16_t h = type == CN_TYPE_F16 ? f16_of(frnd() * 2) : cn_f32_to_bf16(frnd() * 2);
                memcpy(row + 2 * i, &h, 2);
            }
            continue;
        }
        for (int64_t b = 0; b < k / tr->block_size; b++) {
            uint8_t *blk = row + (size_t)b * tr->type_size;
            const uint16_t d = f16_of(frnd() * 0.05f), m = f16_of(frnd() * 0.05f);
            switch (type) {
            case CN_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
            case CN_TYPE_Q4_1:
            case CN_TYPE_Q5_1:
            case CN_TYPE_Q4_K:
            case CN_TYPE_Q5_K:
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &m, 2);
                break;
            default: memcpy(blk, &d, 2); break;
            }
        }
    }
}

/* y = x · Wᵀ by ref and by family K on the same bytes; compares every element bit for
 * bit and checks the padding of y past n_out is untouched. */
static void check_one(const cn_kernels *K, uint32_t type, int64_t k, int64_t n_out, int64_t n_tok) {
    const cn_kernels *R = cn_kernels_ref();
    const uint32_t at = cn_matmul_act_type(type);
    const size_t wrb = cn_type_row_bytes(type, k), arb = cn_act_row_bytes(at, k);
    const int64_t ldy = n_out + 3;
    uint8_t *w = malloc(wrb * (size_t)n_out + 64);
    float *x = malloc((size_t)(n_tok * k) * sizeof(float));
    uint8_t *xq = malloc(arb * (size_t)n_tok);
    float *y0 = malloc((size_t)(n_tok * ldy) * sizeof(float)), *y1 = malloc((size_t)(n_tok * ldy) * sizeof(float));
    cr_assert(w && x && xq && y0 && y1);
    fill_weights(type, w, wrb * (size_t)n_out, n_out, k);
    for (int64_t i = 0; i < n_tok * k; i++)
        x[i] = g_extreme ? (i / k % 2 ? 0.75f : -0.5f) : frnd() * (1.0f + (float)(i % 5));
    R->quantize_rows(at, x, k, n_tok, xq, arb, 0, 1);
    for (int64_t i = 0; i < n_tok * ldy; i++) y0[i] = y1[i] = -7.5f;
    cn_matmul_args a = {.w_type = type,
                        .w = w,
                        .w_row_bytes = wrb,
                        .xq = xq,
                        .xq_row_bytes = arb,
                        .y = y0,
                        .ldy = ldy,
                        .n_out = n_out,
                        .k = k,
                        .n_tok = n_tok};
    R->matmul(&a, 0, 1);
    const char *tn = cn_type_traits_get(type)->name;
    /* the stored layout, then the family's packed layout if it has one for this type */
    const size_t pb = K->packed_size ? K->packed_size(type, n_out, k) : 0;
    uint8_t *pw = pb ? malloc(pb) : NULL;
    if (pw) K->pack(type, w, wrb, n_out, k, pw);
    for (int packed = 0; packed <= (pw != NULL); packed++) {
        for (int64_t i = 0; i < n_tok * ldy; i++) y1[i] = -7.5f;
        cn_matmul_args ak = a;
        ak.y = y1;
        if (packed) ak.w = pw, ak.w_packed = true;
        K->matmul(&ak, 0, 1);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = 0; o < ldy; o++) {
                const float r = y0[t * ldy + o], g = y1[t * ldy + o];
                cr_assert(memcmp(&r, &g, 4) == 0,
                          "%s %s%s k=%lld n_out=%lld n_tok=%lld: y[%lld][%lld] = %.9g, ref %.9g", K->name, tn,
                          packed ? " packed" : "", (long long)k, (long long)n_out, (long long)n_tok, (long long)t,
                          (long long)o, g, r);
            }
    }
    free(pw), free(w), free(x), free(xq), free(y0), free(y1);
}

static int64_t block_of(uint32_t type) { return cn_type_traits_get(type)->block_size; }

Test(kernels_simd, matmul_bit_identical_to_ref, .timeout = 300) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    for (int f = 0; f < nf; f++)
        for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
            const uint32_t type = k_types[i];
            const int64_t bs = block_of(type);
            const int64_t unit = bs == 1 ? 1 : bs;
            /* fixed edges: one block, one row, one token; odd tails */
            check_one(fam[f], type, unit * (bs == 1 ? 37 : 1), 1, 1);
            check_one(fam[f], type, unit * (bs == 256 ? 3 : 19), 17, 17);
            /* every token-tile height in one call: 16 + 8 + 4 + 1, and two full tiles */
            check_one(fam[f], type, unit * (bs == 256 ? 2 : 7), 33, 29);
            check_one(fam[f], type, unit * (bs == 256 ? 2 : 5), 16, 32);
            /* few blocks under each token-tile height (the AMX pipeline's prologue and tail) */
            if (bs == 32)
                for (int64_t nblk = 1; nblk <= 6; nblk++) check_one(fam[f], type, 32 * nblk, 20, 24);
            /* random shapes */
            for (int rep = 0; rep < 12; rep++) {
                const int64_t nblk = bs == 256 ? 1 + rnd() % 6 : bs == 32 ? 1 + rnd() % 40 : 1 + rnd() % 300;
                const int64_t n_out = 1 + rnd() % 70, n_tok = 1 + rnd() % 17;
                check_one(fam[f], type, unit * nblk, n_out, n_tok);
            }
            /* rows longer than a K-chunk (8192 elements) */
            check_one(fam[f], type, bs == 256 ? 256 * 35 : bs == 32 ? 32 * 269 : 8200, 19, 9);
            /* the K-quants' long rows over several weight panels (mmk: 256 KB a panel, 48
             * Q4_K rows of 8960), the last one partial, each for several token tiles */
            if (bs == 256) check_one(fam[f], type, 256 * 35, 100, 17);
        }
}

Test(kernels_simd, matmul_extreme_codes_bit_identical_to_ref, .timeout = 60) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    g_extreme = true;
    for (int f = 0; f < nf; f++)
        for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
            const int64_t bs = block_of(k_types[i]);
            if (bs == 1) continue; /* float formats: 0xFF bytes are NaNs */
            check_one(fam[f], k_types[i], bs * (bs == 256 ? 3 : 9), 19, 6);
            check_one(fam[f], k_types[i], bs * (bs == 256 ? 2 : 5), 17, 17); /* 16-token tiles (AMX) */
        }
    g_extreme = false;
}

/* Within a family: each token alone, and any thread split, give the batch's bits. */
Test(kernels_simd, batch_and_thread_invariance, .timeout = 120) {
    const cn_kernels *fam[FAM_MAX];
    int nf = simd_families(fam);
    fam[nf++] = cn_kernels_ref();
    const int64_t n_tok = 17, n_out = 45;
    for (int f = 0; f < nf; f++)
        for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
            const cn_kernels *K = fam[f];
            const uint32_t type = k_types[i], at = cn_matmul_act_type(type);
            const int64_t k = block_of(type) == 256 ? 512 : 160;
            const size_t wrb = cn_type_row_bytes(type, k), arb = cn_act_row_bytes(at, k);
            uint8_t *w = malloc(wrb * (size_t)n_out), *xq = malloc(arb * (size_t)n_tok);
            float *x = malloc((size_t)(n_tok * k) * 4), *yb = malloc((size_t)(n_tok * n_out) * 4);
            float *y1 = malloc((size_t)n_out * 4), *yt = malloc((size_t)(n_tok * n_out) * 4);
            fill_weights(type, w, wrb * (size_t)n_out, n_out, k);
            for (int64_t j = 0; j < n_tok * k; j++) x[j] = frnd() * 3;
            K->quantize_rows(at, x, k, n_tok, xq, arb, 0, 1);
            cn_matmul_args a = {.w_type = type,
                                .w = w,
                                .w_row_bytes = wrb,
                                .xq = xq,
                                .xq_row_bytes = arb,
                                .y = yb,
                                .ldy = n_out,
                                .n_out = n_out,
                                .k = k,
                                .n_tok = n_tok};
            const size_t pb = K->packed_size ? K->packed_size(type, n_out, k) : 0;
            uint8_t *pw = pb ? malloc(pb) : NULL;
            if (pw) { /* the packed layout where the family has one: it must give the same bits */
                K->pack(type, w, wrb, n_out, k, pw);
                a.w = pw;
                a.w_packed = true;
            }
            K->matmul(&a, 0, 1);
            for (int64_t t = 0; t < n_tok; t++) {
                cn_matmul_args one = a;
                one.n_tok = 1;
                one.xq = xq + (size_t)t * arb;
                one.y = y1;
                K->matmul(&one, 0, 1);
                cr_assert(memcmp(y1, yb + t * n_out, (size_t)n_out * 4) == 0, "%s %s: token %lld alone differs",
                          K->name, cn_type_traits_get(type)->name, (long long)t);
            }
            for (int nth = 2; nth <= 5; nth++) {
                memset(yt, 0, (size_t)(n_tok * n_out) * 4);
                a.y = yt;
                for (int ith = nth - 1; ith >= 0; ith--) K->matmul(&a, ith, nth);
                cr_assert(memcmp(yt, yb, (size_t)(n_tok * n_out) * 4) == 0, "%s %s: %d threads differ", K->name,
                          cn_type_traits_get(type)->name, nth);
                a.y = yb;
            }
            free(pw), free(w), free(xq), free(x), free(yb), free(y1), free(yt);
        }
}

static void check_quant(const cn_kernels *K, uint32_t at, const float *x, int64_t k, int64_t n_rows) {
    const cn_kernels *R = cn_kernels_ref();
    const size_t rb = cn_act_row_bytes(at, k);
    uint8_t *q0 = calloc(n_rows, rb), *q1 = calloc(n_rows, rb);
    R->quantize_rows(at, x, k, n_rows, q0, rb, 0, 1);
    for (int ith = 0; ith < 3; ith++) K->quantize_rows(at, x, k, n_rows, q1, rb, ith, 3);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++)
        cr_assert_eq(q0[i], q1[i], "%s quantize to %s k=%lld: byte %zu is %u, ref %u", K->name,
                     cn_type_traits_get(at)->name, (long long)k, i, q1[i], q0[i]);
    free(q0), free(q1);
}

Test(kernels_simd, quantize_rows_byte_identical_to_ref) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    enum { K = 1024, ROWS = 5 };
    static float x[ROWS * K];
    for (int i = 0; i < ROWS * K; i++) x[i] = frnd() * (i % 3 ? 1.0f : 30.0f);
    for (int i = 0; i < 256; i++) x[K + i] = 0.0f;                      /* row 1 starts with zero blocks */
    x[2 * K + 5] = 4.0f, x[2 * K + 9] = -4.0f, x[2 * K + 200] = 4.0f;   /* magnitude ties of both signs */
    for (int i = 0; i < 32; i++) x[3 * K + i] = (float)(i - 16) * 0.5f; /* codes land on .5 ties */
    x[4 * K + 3] = 1e-30f, x[4 * K + 300] = 70000.0f;                   /* tiny and f16-overflowing */
    const uint32_t acts[] = {CN_TYPE_F32, CN_TYPE_F16, CN_TYPE_BF16, CN_TYPE_Q8_0, CN_TYPE_Q8_1, CN_TYPE_Q8_K};
    for (int f = 0; f < nf; f++)
        for (size_t i = 0; i < CN_ARRAY_LEN(acts); i++) {
            check_quant(fam[f], acts[i], x, K, ROWS);
            if (acts[i] == CN_TYPE_F16 || acts[i] == CN_TYPE_BF16 || acts[i] == CN_TYPE_F32)
                check_quant(fam[f], acts[i], x, 37, 7); /* tails past the 8-wide loop */
        }
}

/* The chooser hands out a family this CPU can run, and ref when CINDER_ISA=ref. */
Test(kernels_simd, chooser_respects_cpu) {
    const cn_kernels *K = cn_kernels_get();
    const cn_isa isa = cn_cpu_isa();
    if (isa == CN_ISA_REF) cr_assert_str_eq(K->name, "ref");
    if (!strcmp(K->name, "avx512")) cr_assert(cn_cpu_get()->avx512vnni);
    if (!strcmp(K->name, "amx")) cr_assert(cn_cpu_get()->amx_int8 && cn_cpu_get()->avx512vnni);
    if (!strcmp(K->name, "avx2")) cr_assert(cn_cpu_get()->avx2);
}

/* ---- attention ---- */

typedef struct {
    int32_t n_rows, n_head, n_head_kv, head_dim, block_tokens, n_pos;
    uint32_t kv_type;
} attn_case;

/* Fills a cache of n_pos positions (random blocks order), runs ref and K on rows with
 * various ranges; SIMD vs ref within tol (relative to the largest |v|), and within K:
 * every thread split and every row computed alone give the same bits. */
static void check_attn(const cn_kernels *K, attn_case c) {
    const cn_kernels *R = cn_kernels_ref();
    const int32_t kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    const int32_t nb = (c.n_pos + c.block_tokens - 1) / c.block_tokens;
    const size_t rb = cn_type_row_bytes(c.kv_type, kvd), blk_bytes = rb * (size_t)c.block_tokens;
    uint8_t *kmem = calloc((size_t)nb, blk_bytes), *vmem = calloc((size_t)nb, blk_bytes);
    const void **kb = malloc((size_t)nb * sizeof *kb), **vb = malloc((size_t)nb * sizeof *vb);
    float *row = malloc((size_t)kvd * 4);
    const cn_type_traits *tr = cn_type_traits_get(c.kv_type);
    for (int32_t b = 0; b < nb; b++) { /* block table order != memory order */
        const int32_t slot = (b * 5 + 3) % nb;
        kb[b] = kmem + (size_t)slot * blk_bytes;
        vb[b] = vmem + (size_t)slot * blk_bytes;
    }
    float vmax = 0;
    for (int32_t p = 0; p < c.n_pos; p++) {
        for (int32_t i = 0; i < kvd; i++) row[i] = frnd() * 2;
        tr->from_float_ref(row, (uint8_t *)kb[p / c.block_tokens] + (size_t)(p % c.block_tokens) * rb, kvd);
        for (int32_t i = 0; i < kvd; i++) row[i] = frnd() * 3, vmax = fmaxf(vmax, fabsf(row[i]));
        tr->from_float_ref(row, (uint8_t *)vb[p / c.block_tokens] + (size_t)(p % c.block_tokens) * rb, kvd);
    }
    float *q = malloc((size_t)c.n_rows * qd * 4), *o0 = malloc((size_t)c.n_rows * qd * 4);
    float *o1 = malloc((size_t)c.n_rows * qd * 4), *o2 = malloc((size_t)c.n_rows * qd * 4);
    int32_t *lo = malloc((size_t)c.n_rows * 4), *hi = malloc((size_t)c.n_rows * 4);
    const void *const **kr = malloc((size_t)c.n_rows * sizeof *kr), *const **vr = malloc((size_t)c.n_rows * sizeof *vr);
    for (int32_t r = 0; r < c.n_rows; r++) {
        hi[r] = c.n_pos - 1 - (int32_t)(rnd() % (uint32_t)CN_MIN(c.n_pos, 5));
        lo[r] = r % 3 == 2 ? (int32_t)(rnd() % (uint32_t)(hi[r] + 1)) : 0; /* some sliding windows */
        kr[r] = kb;
        vr[r] = vb;
    }
    for (int64_t i = 0; i < (int64_t)c.n_rows * qd; i++) q[i] = frnd() * 1.5f;
    float *scratch = malloc((size_t)4 * (size_t)CN_ATTN_SCRATCH(c.n_pos) * 4);
    cn_attn_args a = {.n_rows = c.n_rows,
                      .n_head = c.n_head,
                      .n_head_kv = c.n_head_kv,
                      .head_dim = c.head_dim,
                      .q = q,
                      .out = o0,
                      .pos_lo = lo,
                      .pos_hi = hi,
                      .k_blocks = kr,
                      .v_blocks = vr,
                      .block_tokens = c.block_tokens,
                      .kv_dim = kvd,
                      .kv_type = c.kv_type,
                      .scale = 1.0f / sqrtf((float)c.head_dim),
                      .scratch = scratch,
                      .scratch_stride = CN_ATTN_SCRATCH(c.n_pos)};
    R->attention(&a, 0, 1);
    a.out = o1;
    K->attention(&a, 0, 1);
    const double tol = (c.kv_type == CN_TYPE_F16 ? 1e-4 : 1e-6) * vmax;
    for (int64_t i = 0; i < (int64_t)c.n_rows * qd; i++)
        cr_assert(fabs((double)o1[i] - o0[i]) <= tol,
                  "%s attention %s hd=%d heads %d/%d bt=%d: out[%lld] = %.7g, ref %.7g", K->name, tr->name, c.head_dim,
                  c.n_head, c.n_head_kv, c.block_tokens, (long long)i, o1[i], o0[i]);
    for (int nth = 2; nth <= 4; nth++) {
        a.out = o2;
        for (int ith = 0; ith < nth; ith++) K->attention(&a, ith, nth);
        cr_assert(memcmp(o1, o2, (size_t)c.n_rows * qd * 4) == 0, "%s attention: %d threads differ", K->name, nth);
    }
    { /* with scratch for one head's scores only, long rows go alone, a head at a time */
        cn_attn_args small = a;
        small.out = o2;
        small.scratch_stride = c.n_pos + 64;
        K->attention(&small, 0, 1);
        cr_assert(memcmp(o1, o2, (size_t)c.n_rows * qd * 4) == 0, "%s attention: less scratch differs", K->name);
    }
    for (int32_t r = 0; r < c.n_rows; r++) { /* each row alone */
        cn_attn_args one = a;
        one.n_rows = 1;
        one.q = q + (int64_t)r * qd;
        one.out = o2;
        one.pos_lo = lo + r;
        one.pos_hi = hi + r;
        one.k_blocks = kr + r;
        one.v_blocks = vr + r;
        K->attention(&one, 0, 1);
        cr_assert(memcmp(o2, o1 + (int64_t)r * qd, (size_t)qd * 4) == 0, "%s attention: row %d alone differs", K->name,
                  r);
    }
    free(kmem), free(vmem), free(kb), free(vb), free(row), free(q), free(o0), free(o1), free(o2);
    free(lo), free(hi), free(kr), free(vr), free(scratch);
}

Test(kernels_simd, attention_close_to_ref_and_invariant, .timeout = 120) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    const attn_case cases[] = {
        {5, 9, 3, 64, 16, 77, CN_TYPE_F16},   /* SmolLM2's heads */
        {3, 4, 1, 256, 16, 40, CN_TYPE_F16},  /* gemma3's */
        {4, 8, 8, 32, 3, 23, CN_TYPE_F32},    /* no grouping, odd blocks */
        {2, 14, 2, 64, 5, 50, CN_TYPE_Q8_0},  /* 7 heads per KV head */
        {2, 20, 2, 128, 16, 35, CN_TYPE_F16}, /* 10 per KV head: more than one group */
        {6, 2, 1, 32, 4, 1, CN_TYPE_F16},     /* a single position */
        {1, 9, 3, 64, 16, 300, CN_TYPE_Q8_0},
        {3, 4, 2, 64, 16, 1100, CN_TYPE_F16},  /* rows longer than the stack tile */
        {5, 9, 3, 64, 16, 1100, CN_TYPE_F16},  /* and a whole tile of them */
        {6, 3, 1, 32, 16, 1030, CN_TYPE_F32},  /* windows make some rows short, some long */
        {2, 9, 3, 64, 16, 2100, CN_TYPE_Q8_0}, /* Q8_0 rows longer than its stack buffer */
    };
    for (int f = 0; f < nf; f++)
        for (size_t i = 0; i < CN_ARRAY_LEN(cases); i++) check_attn(fam[f], cases[i]);
}

/* ---- gated activations ---- */

/* GELU (through f16, as ggml) equals ref bit for bit; SiLU (polynomial exp) within a few
 * ulp; and an element's value does not depend on the array's length or its place. */
Test(kernels_simd, gated_act_vs_ref) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    enum { N = 4099 };
    static float g[N], u[N], r[N], o[N], o2[N];
    for (int i = 0; i < N; i++) {
        g[i] = i < 2000 ? (float)(i - 1000) * 0.0125f : frnd() * 30.0f; /* dense over (-12.5, 12.5), then wide */
        u[i] = 1.0f + frnd();
    }
    g[7] = -10.0f, g[8] = 10.0f, g[9] = -9.999f, g[10] = 9.999f, g[11] = -100.0f, g[12] = 100.0f, g[13] = 0.0f;
    const cn_kernels *R = cn_kernels_ref();
    for (int f = 0; f < nf; f++) {
        R->gated_act(CN_ACT_GELU_TANH, g, u, r, N);
        fam[f]->gated_act(CN_ACT_GELU_TANH, g, u, o, N);
        for (int i = 0; i < N; i++)
            cr_assert(memcmp(&r[i], &o[i], 4) == 0, "%s gelu(%.9g) = %.9g, ref %.9g", fam[f]->name, g[i], o[i], r[i]);
        R->gated_act(CN_ACT_SILU, g, u, r, N);
        fam[f]->gated_act(CN_ACT_SILU, g, u, o, N);
        for (int i = 0; i < N; i++)
            cr_assert(fabsf(o[i] - r[i]) <= 4e-7f * fabsf(r[i]) + 1e-37f, "%s silu(%.9g) = %.9g, ref %.9g",
                      fam[f]->name, g[i], o[i], r[i]);
        for (int a = 0; a < 2; a++) { /* in pieces of odd lengths: the same bits */
            const cn_act act = a ? CN_ACT_GELU_TANH : CN_ACT_SILU;
            fam[f]->gated_act(act, g, u, o, N);
            for (int i = 0, len = 1; i < N; i += len, len = len % 23 + 2)
                fam[f]->gated_act(act, g + i, u + i, o2 + i, CN_MIN(len, N - i));
            cr_assert(memcmp(o, o2, sizeof o) == 0, "%s: act %d depends on the array split", fam[f]->name, a);
        }
    }
}

/* RMS norm: ref's float squares are summed in double in another order, so the scale may
 * differ in its last bit: within 2 ulp of ref; in place and with or without weights. */
Test(kernels_simd, rmsnorm_vs_ref) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    const cn_kernels *R = cn_kernels_ref();
    static float x[1100], w[1100], r[1100], o[1100];
    const int ns[] = {1, 7, 8, 64, 576, 640, 1031};
    for (int f = 0; f < nf; f++)
        for (size_t k = 0; k < CN_ARRAY_LEN(ns); k++)
            for (int weighted = 0; weighted < 2; weighted++) {
                const int n = ns[k];
                for (int i = 0; i < n; i++) x[i] = frnd() * (i % 9 ? 1.0f : 40.0f), w[i] = 1.0f + frnd();
                R->rmsnorm(x, weighted ? w : NULL, r, n, 1e-6f);
                memcpy(o, x, sizeof(float) * (size_t)n);
                fam[f]->rmsnorm(o, weighted ? w : NULL, o, n, 1e-6f); /* y aliases x */
                for (int i = 0; i < n; i++)
                    cr_assert(fabsf(o[i] - r[i]) <= 2.4e-7f * fabsf(r[i]), "%s rmsnorm n=%d: y[%d] = %.9g, ref %.9g",
                              fam[f]->name, n, i, o[i], r[i]);
            }
}

/* RoPE: ref's arithmetic lane for lane, so the same bits, in both pair layouts, with
 * n_rot below head_dim (the rest passes through), odd n_rot (the last dim passes
 * through), and rotations shorter or longer than a vector. */
Test(kernels_simd, rope_bit_identical_to_ref) {
    const cn_kernels *fam[FAM_MAX];
    const int nf = simd_families(fam);
    const cn_kernels *R = cn_kernels_ref();
    static float x[9 * 256], r[9 * 256], o[9 * 256], cs[256];
    const int32_t shapes[][2] = {{64, 64}, {64, 32}, {128, 128}, {80, 80},   {64, 46},
                                 {96, 64}, {6, 6},   {64, 63},   {256, 256}, {4, 2}};
    for (int f = 0; f < nf; f++)
        for (int mode = 0; mode < 2; mode++)
            for (size_t k = 0; k < CN_ARRAY_LEN(shapes); k++) {
                const int32_t hd = shapes[k][0], n_rot = shapes[k][1], nh = 1 + (int32_t)(k % 9);
                R->rope_cache(17 + 301 * (int64_t)k, n_rot, 10000.0f, 1.0f, NULL, cs);
                for (int32_t i = 0; i < nh * hd; i++) x[i] = frnd() * 3.0f;
                memcpy(r, x, sizeof(float) * (size_t)(nh * hd));
                memcpy(o, x, sizeof(float) * (size_t)(nh * hd));
                R->rope(r, nh, hd, n_rot, cs, (cn_rope_mode)mode);
                fam[f]->rope(o, nh, hd, n_rot, cs, (cn_rope_mode)mode);
                cr_assert(memcmp(o, r, sizeof(float) * (size_t)(nh * hd)) == 0, "%s rope mode %d head_dim %d n_rot %d",
                          fam[f]->name, mode, hd, n_rot);
                cr_assert(memcmp(r, x, sizeof(float) * (size_t)(nh * hd)) != 0, "ref rotated nothing");
            }
}
