/* quants_search.c — the quantizers `cinder quantize` writes Q4_K, Q5_K and Q6_K with:
 * the same search as ggml's reference quantizers (quantize_row_q{4,5,6}_K_ref, which
 * llama-quantize runs when no importance matrix is given), operation for operation in
 * float32, so the bytes are llama-quantize's bytes. quants_k.c keeps cinder's own,
 * simpler K quantizers: those carry a per-element error bound that the kernel tests
 * lean on, while these minimise a weighted squared error and promise no bound.
 *
 * The algorithm, per super-block of 256:
 *  - Q4_K / Q5_K (x ~ d*sc*q - dmin*m): each sub-block of 32 gets a (scale, min) pair
 *    from a least-squares fit weighted by w = rms(sub-block) + |x|: start from the
 *    min..max grid, then try nstep+1 stretched grids (iscale = (nmax + rmin + rdelta*k)
 *    / (max - min)), refit scale and min in closed form for the rounding each gives, and
 *    keep the one with the lowest weighted error. The 8 scales and 8 mins are then
 *    rounded to 6 bits against their maxima, and every element is re-rounded to the
 *    grid the stored (f16, 6-bit) values really give.
 *  - Q6_K (x ~ d*sc*(q-32)): each sub-block of 16 gets a symmetric scale by trying
 *    19 grids near max/-32 and keeping the one with the best x^2-weighted fit; the 16
 *    scales become int8 against the largest, and elements are re-rounded.
 * The clang/gcc build must not contract a*b+c into an FMA here (see quants.h). */
#include <math.h>
#include <string.h>

#include "tensor/quants.h"
#include "tensor/tensor.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Below this a group is treated as all zeros (ggml's GROUP_MAX_EPS). */
#define ALL_ZERO_EPS 1e-15f

/* Round to nearest, ties to even, by the 1.5 * 2^23 trick: exact for |v| <= 2^22, the
 * range the callers stay in for finite input; any other input gives some int, never UB. */
static int round_nearest(float v) {
    float biased = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Asymmetric fit of n values to q in [0, nmax]: returns the scale, *neg_min the offset
 * to subtract (x ~ scale * q - *neg_min). q gets the chosen levels; scratch is n bytes. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *q,
                           float *neg_min, uint8_t *scratch, float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(q, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        q[i] = (uint8_t)clamp_int(round_nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * (float)q[i] + lo - x[i];
        best_err += w[i] * (diff * diff);
    }
    /* As in ggml, a better fit's min replaces lo for the grids tried after it. */
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * (float)k + (float)nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_nearest(iscale * (x[i] - lo)), 0, nmax);
            scratch[i] = (uint8_t)l;
            float wl = w[i] * (float)l;
            sum_l += wl;
            sum_l2 += wl * (float)l;
            sum_xl += wl * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0))
            continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * (float)scratch[i] + this_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best_err) {
            memcpy(q, scratch, (size_t)n);
            best_err = err;
            scale = this_scale;
            lo = this_min;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* Symmetric fit of n values to q in [-nmax, nmax-1], weights x^2; q gets level + nmax.
 * Returns the scale (signed: the extreme maps to -nmax). */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *q) {
    float amax = 0, ext = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            ext = x[i];
        }
    }
    if (amax < ALL_ZERO_EPS) {
        memset(q, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / ext;
    float sum_xl = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
        q[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sum_xl += w * x[i] * (float)l;
        sum_l2 += w * (float)l * (float)l;
    }
    float scale = sum_l2 != 0 ? sum_xl / sum_l2 : 0.0f;
    float best = scale * sum_xl;
    for (int k = -9; k <= 9; k++) {
        if (k == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)k) / ext;
        sum_xl = sum_l2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sum_xl += w * x[i] * (float)l;
            sum_l2 += w * (float)l * (float)l;
        }
        if (sum_l2 > 0 && sum_xl * sum_xl > best * sum_l2) {
            for (int i = 0; i < n; i++)
                q[i] = (int8_t)(nmax + clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sum_xl / sum_l2;
            best = scale * sum_xl;
        }
    }
    return scale;
}

/* Q4_K and Q5_K share everything but nmax and the search range; q (256) gets the levels,
 * scales (12) the packed 6-bit pairs. */
static void quant_k4_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                           uint16_t *dmin_out, uint8_t *packed, uint8_t *q) {
    float scales[8], mins[8], w[32];
    uint8_t scratch[32];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = rms + fabsf(xs[l]);
        scales[s] = fit_scale_min(32, nmax, xs, w, q + 32 * s, &mins[s], scratch, rmin, 0.1f, nstep);
        if (scales[s] > max_scale) max_scale = scales[s];
        if (mins[s] > max_min) max_min = mins[s];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; s++) {
        /* ggml stores the int in a uint8_t before clamping: keep that wrap */
        uint8_t ls = (uint8_t)round_nearest(inv_scale * scales[s]);
        uint8_t lm = (uint8_t)round_nearest(inv_min * mins[s]);
        sc[s] = ls < 63 ? ls : 63;
        m[s] = lm < 63 ? lm : 63;
    }
    for (int s = 0; s < 4; s++) {
        packed[s] = (uint8_t)(sc[s] | (sc[s + 4] >> 4) << 6);
        packed[s + 4] = (uint8_t)(m[s] | (m[s + 4] >> 4) << 6);
        packed[s + 8] = (uint8_t)((sc[s + 4] & 15) | (m[s + 4] & 15) << 4);
    }
    *d_out = cn_f32_to_f16(max_scale / 63.0f);
    *dmin_out = cn_f32_to_f16(max_min / 63.0f);
    const float d_all = cn_f16_to_f32(*d_out), dmin_all = cn_f16_to_f32(*dmin_out);
    for (int s = 0; s < 8; s++) {
        uint8_t ss, ms;
        cn_k4_scale_min(packed, s, &ss, &ms);
        const float d = d_all * (float)ss;
        if (d == 0)
            continue; /* the fit's levels stay, as ggml leaves them */
        const float dm = dmin_all * (float)ms;
        for (int l = 0; l < 32; l++)
            q[32 * s + l] = (uint8_t)clamp_int(round_nearest((x[32 * s + l] + dm) / d), 0, nmax);
    }
}

void cn_quant_row_q4_K_search(const float *src, void *dst, int64_t n_elem) {
    cn_block_q4_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        uint8_t q[CN_QK_K];
        quant_k4_block(src, 15, -1.0f, 20, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++)
                b[i].qs[p * 32 + l] = (uint8_t)(q[p * 64 + l] | q[p * 64 + 32 + l] << 4);
    }
}

void cn_quant_row_q5_K_search(const float *src, void *dst, int64_t n_elem) {
    cn_block_q5_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        uint8_t q[CN_QK_K];
        quant_k4_block(src, 31, -0.5f, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int q0 = q[p * 64 + l], q1 = q[p * 64 + 32 + l];
                b[i].qs[p * 32 + l] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
                b[i].qh[l] |= (uint8_t)((q0 >> 4) << (2 * p) | (q1 >> 4) << (2 * p + 1));
            }
    }
}

void cn_quant_row_q6_K_search(const float *src, void *dst, int64_t n_elem) {
    cn_block_q6_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        int8_t q[CN_QK_K]; /* level + 32, 0..63 */
        float scales[16];
        float max_scale = 0, max_abs = 0;
        for (int s = 0; s < 16; s++) {
            scales[s] = fit_scale_sym(16, 32, src + 16 * s, q + 16 * s);
            if (fabsf(scales[s]) > max_abs) {
                max_abs = fabsf(scales[s]);
                max_scale = scales[s];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (max_abs < ALL_ZERO_EPS) {
            b[i].d = cn_f32_to_f16(0.0f);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        b[i].d = cn_f32_to_f16(1 / iscale);
        for (int s = 0; s < 16; s++) {
            int v = round_nearest(iscale * scales[s]);
            b[i].scales[s] = (int8_t)(v < 127 ? v : 127);
        }
        const float d_all = cn_f16_to_f32(b[i].d);
        for (int s = 0; s < 16; s++) {
            const float d = d_all * (float)b[i].scales[s];
            if (d == 0)
                continue;
            for (int l = 0; l < 16; l++)
                q[16 * s + l] = (int8_t)(clamp_int(round_nearest(src[16 * s + l] / d), -32, 31) + 32);
        }
        for (int e = 0; e < CN_QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32;
            int u = q[e];
            b[i].ql[h * 64 + l + 32 * (k & 1)] |= (uint8_t)((u & 15) << (k < 2 ? 0 : 4));
            b[i].qh[h * 32 + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
    }
}

cn_from_float_fn cn_type_quantizer(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_K: return cn_quant_row_q4_K_search;
    case CN_TYPE_Q5_K: return cn_quant_row_q5_K_search;
    case CN_TYPE_Q6_K: return cn_quant_row_q6_K_search;
    case CN_TYPE_F32: case CN_TYPE_F16: case CN_TYPE_BF16:
    case CN_TYPE_Q4_0: case CN_TYPE_Q4_1: case CN_TYPE_Q5_0: case CN_TYPE_Q5_1: case CN_TYPE_Q8_0: {
        const cn_type_traits *t = cn_type_traits_get(type);
        return t ? t->from_float_ref : NULL;
    }
    default: return NULL;
    }
}
