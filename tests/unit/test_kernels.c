/* test_kernels.c — the ref kernel family against plain double-precision math: the
 * quantized matmul for every weight format (weights and activations dequantized with
 * tensor/'s independent row functions, then dotted in double), the activation
 * quantizers' block invariants, RMS norm, both RoPE pairings, softmax, the gated
 * activations and attention over paged blocks; and bit-identical results for any
 * thread split and any batch composition. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tensor/tensor.h"

static uint32_t g_st = 12345;
static float urand(void) {
    g_st = g_st * 1664525u + 1013904223u;
    return (float)(g_st >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static const uint32_t k_types[] = {CN_TYPE_F32,  CN_TYPE_F16,  CN_TYPE_BF16, CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0,
                                   CN_TYPE_Q5_1, CN_TYPE_Q8_0, CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};

Test(kernels, act_formats) {
    cr_assert_eq(cn_matmul_act_type(CN_TYPE_Q4_0), CN_TYPE_Q8_0);
    cr_assert_eq(cn_matmul_act_type(CN_TYPE_Q4_1), CN_TYPE_Q8_1);
    cr_assert_eq(cn_matmul_act_type(CN_TYPE_Q5_1), CN_TYPE_Q8_1);
    cr_assert_eq(cn_matmul_act_type(CN_TYPE_Q6_K), CN_TYPE_Q8_K);
    cr_assert_eq(cn_matmul_act_type(CN_TYPE_F16), CN_TYPE_F16);
    cr_assert(!cn_matmul_supports(CN_TYPE_Q2_K));
    cr_assert_eq(cn_act_row_bytes(CN_TYPE_Q8_K, 100), 0);
    cr_assert_eq(cn_act_row_bytes(CN_TYPE_Q8_0, 64), 68);
}

/* y = x · Wᵀ for n_tok rows: the kernel's result vs double sums of the dequantized
 * weight and dequantized activation (so only float accumulation order differs). */
static void check_matmul(uint32_t wt, int64_t k, int64_t n_out, int64_t n_tok) {
    const cn_kernels *K = cn_kernels_ref();
    const cn_type_traits *tr = cn_type_traits_get(wt);
    const uint32_t at = cn_matmul_act_type(wt);
    const cn_type_traits *atr = cn_type_traits_get(at);
    cr_assert(tr && atr && tr->from_float_ref && atr->to_float);
    const size_t wrb = cn_type_row_bytes(wt, k), arb = cn_act_row_bytes(at, k);
    cr_assert_eq(arb, cn_type_row_bytes(at, k), "activation rows are tensor/'s %s rows", atr->name);
    float *wf = malloc((size_t)(n_out * k) * 4), *xf = malloc((size_t)(n_tok * k) * 4);
    float *wd = malloc((size_t)(n_out * k) * 4), *xd = malloc((size_t)(n_tok * k) * 4);
    uint8_t *w = malloc(wrb * (size_t)n_out), *xq = malloc(arb * (size_t)n_tok);
    float *y = malloc((size_t)(n_tok * n_out) * 4), *y2 = malloc((size_t)(n_tok * n_out) * 4);
    for (int64_t i = 0; i < n_out * k; i++) wf[i] = urand() * (1.0f + (float)(i % 7));
    for (int64_t i = 0; i < n_tok * k; i++) xf[i] = urand() * 3.0f;
    for (int64_t r = 0; r < n_out; r++) {
        tr->from_float_ref(wf + r * k, w + (size_t)r * wrb, k);
        tr->to_float(w + (size_t)r * wrb, wd + r * k, k);
    }
    K->quantize_rows(at, xf, k, n_tok, xq, arb, 0, 1);
    for (int64_t t = 0; t < n_tok; t++) {
        atr->to_float(xq + (size_t)t * arb, xd + t * k, k);
        for (int64_t i = 0; i < k; i++) /* the activation format keeps each value near x */
            cr_assert(fabsf(xd[t * k + i] - xf[t * k + i]) <= 3.0f * 0.01f + 1e-6f, "%s: activation %lld off by %g",
                      atr->name, (long long)i, xd[t * k + i] - xf[t * k + i]);
    }
    cn_matmul_args a = {.w_type = wt,
                        .w = w,
                        .w_row_bytes = wrb,
                        .xq = xq,
                        .xq_row_bytes = arb,
                        .y = y,
                        .ldy = n_out,
                        .n_out = n_out,
                        .k = k,
                        .n_tok = n_tok};
    K->matmul(&a, 0, 1);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_out; o++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                ref += (double)wd[o * k + i] * xd[t * k + i];
                mag += fabs((double)wd[o * k + i] * xd[t * k + i]);
            }
            if (at == CN_TYPE_Q8_1) /* the min term uses the block's stored s = f16(d * sum(qs)) */
                for (int64_t b = 0; b < k / 32; b++) {
                    const cn_block_q8_1 *ab = (const cn_block_q8_1 *)(xq + (size_t)t * arb) + b;
                    const uint8_t *wb = w + (size_t)o * wrb + (size_t)b * (wrb / (size_t)(k / 32));
                    uint16_t mh;
                    memcpy(&mh, wb + 2, 2); /* Q4_1 and Q5_1 keep m right after d */
                    int sum = 0;
                    for (int j = 0; j < 32; j++) sum += ab->qs[j];
                    ref += (double)cn_f16_to_f32(mh) *
                           ((double)cn_f16_to_f32(ab->s) - (double)cn_f16_to_f32(ab->d) * sum);
                }
            const double got = y[t * n_out + o];
            cr_assert(fabs(got - ref) <= 1e-5 * mag + 1e-6, "%s k=%lld: y[%lld][%lld] = %.7g, want %.7g", tr->name,
                      (long long)k, (long long)t, (long long)o, got, ref);
        }
    /* any thread split gives the same bits; so does each token alone */
    for (int nth = 2; nth <= 3; nth++) {
        a.y = y2;
        for (int ith = nth - 1; ith >= 0; ith--) K->matmul(&a, ith, nth);
        cr_assert(memcmp(y, y2, (size_t)(n_tok * n_out) * 4) == 0, "%s: %d threads differ", tr->name, nth);
    }
    cn_matmul_args one = a;
    one.n_tok = 1;
    one.xq = xq + (size_t)(n_tok - 1) * arb;
    one.y = y2;
    K->matmul(&one, 0, 1);
    cr_assert(memcmp(y + (n_tok - 1) * n_out, y2, (size_t)n_out * 4) == 0, "%s: batch changes a row", tr->name);
    free(wf), free(xf), free(wd), free(xd), free(w), free(xq), free(y), free(y2);
}

Test(kernels, matmul_every_format) {
    for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
        const cn_type_traits *tr = cn_type_traits_get(k_types[i]);
        const int64_t k = tr->block_size == 256 ? 512 : 96;
        check_matmul(k_types[i], k, 13, 5);
        if (tr->block_size == 1) check_matmul(k_types[i], 37, 5, 3); /* tails */
    }
}

Test(kernels, quantizer_blocks) {
    const cn_kernels *K = cn_kernels_ref();
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = urand() * (i == 77 ? 9.0f : 1.0f);
    cn_block_q8_1 b1[8];
    K->quantize_rows(CN_TYPE_Q8_1, x, 256, 1, b1, sizeof b1, 0, 1);
    for (int b = 0; b < 8; b++) {
        int sum = 0, amax = 0;
        for (int j = 0; j < 32; j++) {
            sum += b1[b].qs[j];
            amax = CN_MAX(amax, abs(b1[b].qs[j]));
        }
        cr_assert_eq(amax, 127, "block %d uses the full range", b);
        const double ds = (double)cn_f16_to_f32(b1[b].d) * sum; /* s = f16(d * sum), d unrounded */
        cr_assert_float_eq(cn_f16_to_f32(b1[b].s), ds, 2e-3 * fabs(ds) + 1e-6);
    }
    cn_block_q8_K bk;
    K->quantize_rows(CN_TYPE_Q8_K, x, 256, 1, &bk, sizeof bk, 0, 1);
    cr_assert_eq(bk.qs[77], -127, "the largest magnitude maps to -127 (d takes its sign)");
    cr_assert_float_eq(bk.d * -127.0f, x[77], 1e-5);
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += bk.qs[16 * j + i];
        cr_assert_eq(bk.bsums[j], s);
    }
    memset(x, 0, sizeof x);
    K->quantize_rows(CN_TYPE_Q8_K, x, 256, 1, &bk, sizeof bk, 0, 1);
    cr_assert_eq(bk.d, 0.0f);
}

Test(kernels, rmsnorm) {
    const cn_kernels *K = cn_kernels_ref();
    float x[50], w[50], y[50];
    for (int i = 0; i < 50; i++) x[i] = urand() * 4, w[i] = 1 + urand() * 0.5f;
    K->rmsnorm(x, w, y, 50, 1e-5f);
    double ss = 0;
    for (int i = 0; i < 50; i++) ss += (double)x[i] * x[i];
    for (int i = 0; i < 50; i++) cr_assert_float_eq(y[i], x[i] / sqrt(ss / 50 + 1e-5) * w[i], 1e-5 * (1 + fabs(y[i])));
}

Test(kernels, rope_pairings) {
    const cn_kernels *K = cn_kernels_ref();
    const int H = 2, hd = 16, rot = 12, pos = 37;
    float cs[12], x[32], xn[32], xx[32];
    K->rope_cache(pos, rot, 10000.0f, 0.5f, NULL, cs);
    for (int i = 0; i < 32; i++) x[i] = urand();
    memcpy(xn, x, sizeof x);
    memcpy(xx, x, sizeof x);
    K->rope(xn, H, hd, rot, cs, CN_ROPE_NORMAL);
    K->rope(xx, H, hd, rot, cs, CN_ROPE_NEOX);
    for (int h = 0; h < H; h++) {
        const float *v = x + h * hd;
        for (int i = 0; i < rot / 2; i++) {
            const double th = 0.5 * pos * pow(10000.0, -2.0 * i / rot);
            const double c = cos(th), s = sin(th);
            cr_assert_float_eq(xn[h * hd + 2 * i], v[2 * i] * c - v[2 * i + 1] * s, 1e-5);
            cr_assert_float_eq(xn[h * hd + 2 * i + 1], v[2 * i] * s + v[2 * i + 1] * c, 1e-5);
            cr_assert_float_eq(xx[h * hd + i], v[i] * c - v[i + rot / 2] * s, 1e-5);
            cr_assert_float_eq(xx[h * hd + i + rot / 2], v[i] * s + v[i + rot / 2] * c, 1e-5);
        }
        for (int i = rot; i < hd; i++) {
            cr_assert_eq(xn[h * hd + i], v[i], "dims past n_rot pass through");
            cr_assert_eq(xx[h * hd + i], v[i]);
        }
    }
    float ff[6] = {1, 2, 4, 1, 1, 8}, cs2[12];
    K->rope_cache(pos, rot, 10000.0f, 1.0f, ff, cs2);
    for (int i = 0; i < 6; i++) cr_assert_float_eq(cs2[2 * i], cos(pos * pow(10000.0, -2.0 * i / rot) / ff[i]), 1e-5);
}

Test(kernels, softmax_and_activations) {
    const cn_kernels *K = cn_kernels_ref();
    float x[40], g[40], u[40], o[40];
    for (int i = 0; i < 40; i++) x[i] = urand() * 20, g[i] = urand() * 12, u[i] = urand();
    float p[40];
    memcpy(p, x, sizeof x);
    K->softmax(p, 40);
    double mx = -1e9, sum = 0, tot = 0;
    for (int i = 0; i < 40; i++) mx = fmax(mx, x[i]);
    for (int i = 0; i < 40; i++) sum += exp(x[i] - mx);
    for (int i = 0; i < 40; i++) {
        cr_assert_float_eq(p[i], exp(x[i] - mx) / sum, 1e-6);
        tot += p[i];
    }
    cr_assert_float_eq(tot, 1.0, 1e-5);

    K->gated_act(CN_ACT_SILU, g, u, o, 40);
    for (int i = 0; i < 40; i++) cr_assert_float_eq(o[i], g[i] / (1 + exp(-g[i])) * u[i], 1e-6);
    K->gated_act(CN_ACT_GELU_TANH, g, u, o, 40);
    for (int i = 0; i < 40; i++) {
        const double gv = g[i];
        const double want = 0.5 * gv * (1 + tanh(sqrt(2 / M_PI) * (gv + 0.044715 * gv * gv * gv))) * u[i];
        if (gv <= -10) cr_assert_eq(o[i], 0.0f);
        else if (gv >= 10) cr_assert_eq(o[i], g[i] * u[i]);
        else cr_assert_float_eq(o[i], want, 2e-3 * fabs(gv) + 1e-4, "gelu(%g) through f16", gv);
    }
}

/* Attention over blocks of 3 positions, with a sliding range, vs double math. */
static void check_attention(uint32_t kv_type) {
    const cn_kernels *K = cn_kernels_ref();
    enum { H = 4, HKV = 2, HD = 32, BT = 3, NPOS = 11, NB = 4, KVD = HKV * HD, ROWS = 2 };
    float kf[NPOS][KVD], vf[NPOS][KVD], q[ROWS][H * HD], out[ROWS][H * HD], out2[ROWS][H * HD];
    static uint8_t kblk[NB][BT * KVD * 4], vblk[NB][BT * KVD * 4];
    for (int p = 0; p < NPOS; p++)
        for (int i = 0; i < KVD; i++) kf[p][i] = urand(), vf[p][i] = urand();
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < H * HD; i++) q[r][i] = urand() * 2;
    const cn_type_traits *tr = cn_type_traits_get(kv_type);
    const size_t rb = cn_type_row_bytes(kv_type, KVD);
    for (int p = 0; p < NPOS; p++) {
        tr->from_float_ref(kf[p], kblk[p / BT] + (p % BT) * rb, KVD);
        tr->from_float_ref(vf[p], vblk[p / BT] + (p % BT) * rb, KVD);
        tr->to_float(kblk[p / BT] + (p % BT) * rb, kf[p], KVD); /* compare against what is stored */
        tr->to_float(vblk[p / BT] + (p % BT) * rb, vf[p], KVD);
    }
    const void *kb[NB], *vb[NB];
    for (int b = 0; b < NB; b++) kb[b] = kblk[b], vb[b] = vblk[b];
    const void *const *kr[ROWS] = {kb, kb}, *const * vr[ROWS] = {vb, vb};
    int32_t lo[ROWS] = {0, 4}, hi[ROWS] = {10, 9};
    float scratch[3 * CN_ATTN_SCRATCH(16)]; /* 3 threads */
    cn_attn_args a = {.n_rows = ROWS,
                      .n_head = H,
                      .n_head_kv = HKV,
                      .head_dim = HD,
                      .q = &q[0][0],
                      .out = &out[0][0],
                      .pos_lo = lo,
                      .pos_hi = hi,
                      .k_blocks = kr,
                      .v_blocks = vr,
                      .block_tokens = BT,
                      .kv_dim = KVD,
                      .kv_type = kv_type,
                      .scale = 0.3f,
                      .scratch = scratch,
                      .scratch_stride = CN_ATTN_SCRATCH(16)};
    K->attention(&a, 0, 1);
    const double tol = kv_type == CN_TYPE_F16 ? 2e-3 : 1e-5;
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < H; h++) {
            const int kh = h / (H / HKV);
            double s[NPOS], mx = -1e300, sum = 0;
            for (int p = lo[r]; p <= hi[r]; p++) {
                s[p] = 0;
                for (int i = 0; i < HD; i++) s[p] += (double)q[r][h * HD + i] * kf[p][kh * HD + i];
                s[p] *= 0.3;
                mx = fmax(mx, s[p]);
            }
            for (int p = lo[r]; p <= hi[r]; p++) sum += exp(s[p] - mx);
            for (int i = 0; i < HD; i++) {
                double acc = 0;
                for (int p = lo[r]; p <= hi[r]; p++) acc += exp(s[p] - mx) / sum * vf[p][kh * HD + i];
                cr_assert_float_eq(out[r][h * HD + i], acc, tol, "%s row %d head %d dim %d", tr->name, r, h, i);
            }
        }
    a.out = &out2[0][0];
    for (int ith = 0; ith < 3; ith++) K->attention(&a, ith, 3);
    cr_assert(memcmp(out, out2, sizeof out) == 0, "%s: 3 threads differ", tr->name);
}

Test(kernels, attention_paged) {
    check_attention(CN_TYPE_F32);
    check_attention(CN_TYPE_F16);
    check_attention(CN_TYPE_Q8_0);
}
