/* check_kernels.c — the NEON kernel family (src/kernels/arm) against the scalar reference
 * (src/kernels/ref), bit for bit: the arm64 half of `make cross-arm64`, which builds this
 * file statically with aarch64-linux-gnu-gcc against core + tensor + kernels only and
 * runs it under qemu-aarch64 (an armv8.0 CPU model, so nothing past baseline NEON). Plain
 * C, since Criterion is not available for arm64 here: one line per check, the first
 * differing element with both values on a failure, exit status 1 if anything differs.
 *
 * What it compares (memcmp of the outputs, never a tolerance):
 *  - dispatch: cn_kernels_get() is NEON on arm64; `--dispatch NAME` checks only that the
 *    chooser gave NAME (make runs it under CINDER_ISA=ref and CINDER_ISA=avx2);
 *  - matmul, every weight type, three block counts each, n_out 1/6/13 (tails of the
 *    4-row tile), n_tok 1/3/6 (tails of the token tile), threads split 1 and 3 ways,
 *    with a y stride past n_out whose padding must stay untouched;
 *  - quantize_rows to every activation format (zero blocks, magnitude ties, .5 ties,
 *    tiny and f16-overflowing values, float rows with tails), split 1 and 3 ways;
 *  - rmsnorm (in place, with and without weights, lengths with tails);
 *  - gated_act, SiLU and GELU (dense over the table range, its ±10 edges, wide values);
 *  - attention over paged blocks with the block table out of memory order: F32, F16
 *    and Q8_0 caches, grouped heads, lengths 1..300, sliding windows, split 1 and 3 ways. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/arm/arm.h"
#include "kernels/kernels.h"
#include "tensor/tensor.h"

static int g_checks, g_failed;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float frnd(void) { return (float)(rnd() & 0xFFFFFF) / (float)(1 << 23) - 1.0f; } /* [-1, 1) */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "check_kernels: out of memory\n");
        exit(2);
    }
    return p;
}

/* One line per check; `bad` is the first difference found (NULL: none). */
static void report(const char *what, int cases, const char *bad) {
    g_checks++;
    if (bad) g_failed++;
    printf("%s %s (%d cases)%s%s\n", bad ? "FAIL" : "ok  ", what, cases, bad ? ": " : "", bad ? bad : "");
}

/* First float that differs in its bits, described into msg (false: none). */
static bool diff_f32(const float *ref, const float *got, int64_t n, char *msg, size_t cap, const char *ctx) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&ref[i], &got[i], 4)) {
            snprintf(msg, cap, "%s: [%lld] = %.9g, ref %.9g", ctx, (long long)i, got[i], ref[i]);
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- matmul */

static const uint32_t k_types[] = {CN_TYPE_F32,  CN_TYPE_F16,  CN_TYPE_BF16, CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0,
                                   CN_TYPE_Q5_1, CN_TYPE_Q8_0, CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};

/* Random code bytes with finite random f16 scales (and mins) in their fields. */
static void fill_weights(uint32_t type, uint8_t *w, int64_t n_rows, int64_t k) {
    const cn_type_traits *tr = cn_type_traits_get(type);
    const size_t rb = cn_type_row_bytes(type, k);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) w[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (tr->block_size == 1) {
            for (int64_t i = 0; i < k; i++) {
                const float v = frnd() * 2;
                if (type == CN_TYPE_F32) memcpy(row + 4 * i, &v, 4);
                else {
                    const uint16_t h = type == CN_TYPE_F16 ? cn_f32_to_f16(v) : cn_f32_to_bf16(v);
                    memcpy(row + 2 * i, &h, 2);
                }
            }
            continue;
        }
        for (int64_t b = 0; b < k / tr->block_size; b++) {
            uint8_t *blk = row + (size_t)b * tr->type_size;
            const uint16_t d = cn_f32_to_f16(frnd() * 0.05f), m = cn_f32_to_f16(frnd() * 0.05f);
            if (type == CN_TYPE_Q6_K) {
                memcpy(blk + 208, &d, 2);
                continue;
            }
            memcpy(blk, &d, 2);
            if (type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1 || type == CN_TYPE_Q4_K || type == CN_TYPE_Q5_K)
                memcpy(blk + 2, &m, 2);
        }
    }
}

/* Every (n_out, n_tok, split) for one type and k. */
static void check_matmul(const cn_kernels *N, uint32_t type, int64_t k) {
    const cn_kernels *R = cn_kernels_ref();
    const int64_t outs[] = {1, 6, 13}, toks[] = {1, 3, 6};
    const int nths[] = {1, 3};
    const uint32_t at = cn_matmul_act_type(type);
    const size_t wrb = cn_type_row_bytes(type, k), arb = cn_act_row_bytes(at, k);
    uint8_t *w = xmalloc(wrb * 13), *xq = xmalloc(arb * 6);
    float *x = xmalloc((size_t)(6 * k) * 4), *y0 = xmalloc(6 * 16 * 4), *y1 = xmalloc(6 * 16 * 4);
    char bad[256] = "", ctx[128];
    int cases = 0;
    for (size_t io = 0; io < 3; io++)
        for (size_t it = 0; it < 3; it++) {
            const int64_t n_out = outs[io], n_tok = toks[it], ldy = n_out + 3;
            fill_weights(type, w, n_out, k);
            for (int64_t i = 0; i < n_tok * k; i++) x[i] = frnd() * (1.0f + (float)(i % 5));
            if (n_tok > 1) memset(x + k, 0, (size_t)CN_MIN(k, 256) * 4); /* token 1 opens with a zero block */
            R->quantize_rows(at, x, k, n_tok, xq, arb, 0, 1);
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
            for (int64_t i = 0; i < n_tok * ldy; i++) y0[i] = -7.5f;
            R->matmul(&a, 0, 1);
            for (size_t in = 0; in < 2; in++) {
                a.y = y1;
                for (int64_t i = 0; i < n_tok * ldy; i++) y1[i] = -7.5f;
                for (int ith = nths[in] - 1; ith >= 0; ith--) N->matmul(&a, ith, nths[in]);
                snprintf(ctx, sizeof ctx, "n_out=%lld n_tok=%lld nth=%d y", (long long)n_out, (long long)n_tok,
                         nths[in]);
                cases++;
                if (!*bad) diff_f32(y0, y1, n_tok * ldy, bad, sizeof bad, ctx);
            }
        }
    char what[96];
    snprintf(what, sizeof what, "matmul %-5s k=%lld", cn_type_traits_get(type)->name, (long long)k);
    report(what, cases, *bad ? bad : NULL);
    free(w), free(xq), free(x), free(y0), free(y1);
}

/* ---------------------------------------------------------------- quantize_rows */

static void check_quant(const cn_kernels *N, uint32_t at, const float *x, int64_t k, int64_t n_rows) {
    const cn_kernels *R = cn_kernels_ref();
    const size_t rb = cn_act_row_bytes(at, k), n = rb * (size_t)n_rows;
    uint8_t *q0 = xmalloc(n), *q1 = xmalloc(n);
    char bad[256] = "";
    int cases = 0;
    memset(q0, 0xA5, n);
    R->quantize_rows(at, x, k, n_rows, q0, rb, 0, 1);
    for (int nth = 1; nth <= 3; nth += 2, cases++) {
        memset(q1, 0x5A, n);
        for (int ith = 0; ith < nth; ith++) N->quantize_rows(at, x, k, n_rows, q1, rb, ith, nth);
        for (size_t i = 0; i < n && !*bad; i++)
            if (q0[i] != q1[i])
                snprintf(bad, sizeof bad, "nth=%d: byte %zu (row %zu) is %u, ref %u", nth, i, i / rb, q1[i], q0[i]);
    }
    char what[96];
    snprintf(what, sizeof what, "quantize_rows to %-4s k=%lld rows=%lld", cn_type_traits_get(at)->name, (long long)k,
             (long long)n_rows);
    report(what, cases, *bad ? bad : NULL);
    free(q0), free(q1);
}

static void check_quantize(const cn_kernels *N) {
    enum { K = 1024, ROWS = 5 };
    static float x[ROWS * K];
    for (int i = 0; i < ROWS * K; i++) x[i] = frnd() * (i % 3 ? 1.0f : 30.0f);
    for (int i = 0; i < 256; i++) x[K + i] = 0.0f;                    /* row 1 opens with zero blocks */
    x[2 * K + 5] = 4.0f, x[2 * K + 9] = -4.0f, x[2 * K + 200] = 4.0f; /* magnitude ties of both signs */
    x[2 * K + 300] = -5.0f, x[2 * K + 301] = 5.0f;
    for (int i = 0; i < 32; i++) x[3 * K + i] = (float)(i - 16) * 0.5f;           /* codes land on .5 ties */
    x[4 * K + 3] = 1e-30f, x[4 * K + 300] = 70000.0f, x[4 * K + 301] = -65519.0f; /* tiny, past f16 */
    const uint32_t acts[] = {CN_TYPE_F32, CN_TYPE_F16, CN_TYPE_BF16, CN_TYPE_Q8_0, CN_TYPE_Q8_1, CN_TYPE_Q8_K};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        check_quant(N, acts[i], x, K, ROWS);
        if (acts[i] == CN_TYPE_F16 || acts[i] == CN_TYPE_BF16 || acts[i] == CN_TYPE_F32)
            check_quant(N, acts[i], x, 37, 7); /* tails past the 4-wide loop */
    }
}

/* ---------------------------------------------------------------- rmsnorm, gated_act */

static void check_rmsnorm(const cn_kernels *N) {
    const cn_kernels *R = cn_kernels_ref();
    static float x[1100], w[1100], r[1100], o[1100];
    const int ns[] = {1, 3, 4, 7, 8, 64, 576, 1031};
    char bad[256] = "", ctx[64];
    int cases = 0;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int weighted = 0; weighted < 2; weighted++, cases++) {
            const int n = ns[k];
            for (int i = 0; i < n; i++) x[i] = frnd() * (i % 9 ? 1.0f : 40.0f), w[i] = 1.0f + frnd();
            R->rmsnorm(x, weighted ? w : NULL, r, n, 1e-6f);
            memcpy(o, x, sizeof(float) * (size_t)n);
            N->rmsnorm(o, weighted ? w : NULL, o, n, 1e-6f); /* y aliases x */
            snprintf(ctx, sizeof ctx, "n=%d%s y", n, weighted ? " weighted" : "");
            if (!*bad) diff_f32(r, o, n, bad, sizeof bad, ctx);
        }
    report("rmsnorm", cases, *bad ? bad : NULL);
}

static void check_gated_act(const cn_kernels *N) {
    const cn_kernels *R = cn_kernels_ref();
    enum { NN = 4099 };
    static float g[NN], u[NN], r[NN], o[NN];
    for (int i = 0; i < NN; i++) {
        g[i] = i < 2000 ? (float)(i - 1000) * 0.0125f : frnd() * 30.0f; /* dense over (-12.5, 12.5), then wide */
        u[i] = 1.0f + frnd();
    }
    g[7] = -10.0f, g[8] = 10.0f, g[9] = -9.999f, g[10] = 9.999f, g[11] = -100.0f, g[12] = 100.0f, g[13] = 0.0f;
    g[14] = -9.9999f, g[15] = 9.9999f, g[16] = -0.0f, g[17] = 1e-30f, g[18] = -88.0f, g[19] = 89.0f;
    for (int a = 0; a < 2; a++) {
        const cn_act act = a ? CN_ACT_GELU_TANH : CN_ACT_SILU;
        char bad[256] = "";
        R->gated_act(act, g, u, r, NN);
        N->gated_act(act, g, u, o, NN);
        diff_f32(r, o, NN, bad, sizeof bad, "whole array out");
        if (!*bad) { /* in pieces of odd lengths, in place over gate: the same bits */
            memcpy(o, g, sizeof o);
            for (int i = 0, len = 1; i < NN; i += len, len = len % 23 + 2)
                N->gated_act(act, o + i, u + i, o + i, CN_MIN(len, NN - i));
            diff_f32(r, o, NN, bad, sizeof bad, "in pieces, in place out");
        }
        report(a ? "gated_act gelu-tanh" : "gated_act silu", 2, *bad ? bad : NULL);
    }
}

/* ---------------------------------------------------------------- attention */

typedef struct {
    int32_t n_rows, n_head, n_head_kv, head_dim, block_tokens, n_pos;
    uint32_t kv_type;
} attn_case;

static void check_attn(const cn_kernels *N, attn_case c) {
    const cn_kernels *R = cn_kernels_ref();
    const int32_t kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    const int32_t nb = (c.n_pos + c.block_tokens - 1) / c.block_tokens;
    const size_t rb = cn_type_row_bytes(c.kv_type, kvd), blk_bytes = rb * (size_t)c.block_tokens;
    const cn_type_traits *tr = cn_type_traits_get(c.kv_type);
    uint8_t *kmem = xmalloc((size_t)nb * blk_bytes), *vmem = xmalloc((size_t)nb * blk_bytes);
    const void **kb = xmalloc((size_t)nb * sizeof *kb), **vb = xmalloc((size_t)nb * sizeof *vb);
    float *row = xmalloc((size_t)kvd * 4);
    for (int32_t b = 0; b < nb; b++) { /* block table order != memory order */
        const int32_t slot = (b * 5 + 3) % nb;
        kb[b] = kmem + (size_t)slot * blk_bytes;
        vb[b] = vmem + (size_t)slot * blk_bytes;
    }
    for (int32_t p = 0; p < c.n_pos; p++) {
        for (int32_t i = 0; i < kvd; i++) row[i] = frnd() * 2;
        tr->from_float_ref(row, (uint8_t *)kb[p / c.block_tokens] + (size_t)(p % c.block_tokens) * rb, kvd);
        for (int32_t i = 0; i < kvd; i++) row[i] = frnd() * 3;
        tr->from_float_ref(row, (uint8_t *)vb[p / c.block_tokens] + (size_t)(p % c.block_tokens) * rb, kvd);
    }
    const size_t on = (size_t)c.n_rows * (size_t)qd;
    float *q = xmalloc(on * 4), *o0 = xmalloc(on * 4), *o1 = xmalloc(on * 4);
    int32_t *lo = xmalloc((size_t)c.n_rows * 4), *hi = xmalloc((size_t)c.n_rows * 4);
    const void *const **kr = xmalloc((size_t)c.n_rows * sizeof *kr), *const **vr = xmalloc((size_t)c.n_rows *
                                                                                           sizeof *vr);
    for (int32_t r = 0; r < c.n_rows; r++) {
        hi[r] = c.n_pos - 1 - (int32_t)(rnd() % (uint32_t)CN_MIN(c.n_pos, 5));
        lo[r] = r % 3 == 2 ? (int32_t)(rnd() % (uint32_t)(hi[r] + 1)) : 0; /* some sliding windows */
        kr[r] = kb;
        vr[r] = vb;
    }
    for (size_t i = 0; i < on; i++) q[i] = frnd() * 1.5f;
    float *scratch = xmalloc((size_t)3 * (size_t)CN_ATTN_SCRATCH(c.n_pos) * 4); /* nth <= 3 */
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
    char bad[256] = "", ctx[32];
    int cases = 0;
    for (int nth = 1; nth <= 3; nth += 2, cases++) {
        a.out = o1;
        memset(o1, 0, on * 4);
        for (int ith = 0; ith < nth; ith++) N->attention(&a, ith, nth);
        snprintf(ctx, sizeof ctx, "nth=%d out", nth);
        if (!*bad) diff_f32(o0, o1, (int64_t)on, bad, sizeof bad, ctx);
    }
    char what[128];
    snprintf(what, sizeof what, "attention %-4s hd=%d heads %d/%d bt=%d positions=%d rows=%d", tr->name, c.head_dim,
             c.n_head, c.n_head_kv, c.block_tokens, c.n_pos, c.n_rows);
    report(what, cases, *bad ? bad : NULL);
    free(kmem), free(vmem), free(kb), free(vb), free(row), free(q), free(o0), free(o1);
    free(lo), free(hi), free(kr), free(vr), free(scratch);
}

static void check_attention(const cn_kernels *N) {
    const attn_case cases[] = {
        {5, 9, 3, 64, 16, 77, CN_TYPE_F16},  /* SmolLM2's heads */
        {3, 4, 1, 256, 16, 40, CN_TYPE_F16}, /* gemma3's */
        {4, 8, 8, 32, 3, 23, CN_TYPE_F32},   /* no grouping, odd blocks */
        {3, 4, 2, 12, 7, 30, CN_TYPE_F32},   /* head_dim 12: one 4-dim step past 8 */
        {2, 14, 2, 64, 5, 50, CN_TYPE_Q8_0}, /* 7 heads per KV head */
        {6, 2, 1, 32, 4, 1, CN_TYPE_F16},    /* a single position */
        {2, 6, 2, 64, 16, 6, CN_TYPE_Q8_0},  /* fewer positions than a vector's 4 twice over */
        {1, 9, 3, 64, 16, 300, CN_TYPE_Q8_0}, {3, 6, 3, 128, 16, 130, CN_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_attn(N, cases[i]);
}

/* ---------------------------------------------------------------- main */

static void check_dispatch(const char *want) {
    const cn_kernels *K = cn_kernels_get();
    char bad[128] = "", what[128];
    if (strcmp(K->name, want)) snprintf(bad, sizeof bad, "chose %s (isa %s)", K->name, cn_isa_name(cn_cpu_isa()));
    const char *isa = getenv("CINDER_ISA");
    snprintf(what, sizeof what, "dispatch with CINDER_ISA=%s is %s", isa ? isa : "(unset)", want);
    report(what, 1, *bad ? bad : NULL);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dispatch")) {
        check_dispatch(argv[2]);
    } else if (argc == 1) {
        check_dispatch("neon");
        const cn_kernels *N = cn_kernels_neon();
        const bool full = N->rmsnorm && N->rope_cache && N->rope && N->softmax && N->gated_act && N->quantize_rows &&
                          N->matmul && N->attention && !N->packed_size && !N->pack;
        report("neon table complete (no packed layout)", 1, full ? NULL : "a missing entry");
        for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
            const uint32_t type = k_types[i];
            const int64_t bs = cn_type_traits_get(type)->block_size;
            const int64_t ks[3][3] = {{7, 40, 77}, {32, 96, 288}, {256, 512, 768}}; /* float / 32 / 256 blocks */
            for (int j = 0; j < 3; j++) check_matmul(N, type, ks[bs == 1 ? 0 : bs == 32 ? 1 : 2][j]);
        }
        check_quantize(N);
        check_rmsnorm(N);
        check_gated_act(N);
        check_attention(N);
    } else {
        fprintf(stderr, "usage: %s [--dispatch FAMILY]\n", argv[0]);
        return 2;
    }
    printf("check_kernels: %d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
