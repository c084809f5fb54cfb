/* quants_search.c — the quantizers `cinder quantize` writes Q4_K, Q5_K and Q6_K with
 * (and, given an importance matrix, every 4/5/6-bit type):
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
 * With an importance matrix (cinder quantize --imatrix) the same searches run with the
 * imatrix's column weights (ggml's quantize_row_<type>_impl, below: cn_type_quantizer_weighted).
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

static void k4_reround(const float *x, int nmax, uint16_t d16, uint16_t dmin16, const uint8_t *packed, uint8_t *q);

/* Asymmetric fit of n values to q in [0, nmax]: returns the scale, *neg_min the offset
 * to subtract (x ~ scale * q - *neg_min). q gets the chosen levels; scratch is n bytes. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *q, float *neg_min,
                           uint8_t *scratch, float rmin, float rdelta, int nstep) {
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
        if (!(det > 0)) continue;
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

/* Symmetric fit of n values to q in [-nmax, nmax-1], weights qw (NULL: x^2); q gets
 * level + nmax. Returns the scale (signed: the extreme maps to -nmax). */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *q, const float *qw) {
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
        float w = qw ? qw[i] : x[i] * x[i];
        sum_xl += w * x[i] * (float)l;
        sum_l2 += w * (float)l * (float)l;
    }
    float scale = sum_l2 != 0 ? sum_xl / sum_l2 : 0.0f;
    float best = scale * sum_xl;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)k) / ext;
        sum_xl = sum_l2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
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
static void quant_k4_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out, uint16_t *dmin_out,
                           uint8_t *packed, uint8_t *q) {
    float scales[8], mins[8], w[32];
    uint8_t scratch[32];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = rms + fabsf(xs[l]);
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
    k4_reround(x, nmax, *d_out, *dmin_out, packed, q);
}

/* Every element re-rounded to the grid the stored (f16 d, dmin; 6-bit scale, min) give. */
static void k4_reround(const float *x, int nmax, uint16_t d16, uint16_t dmin16, const uint8_t *packed, uint8_t *q) {
    const float d_all = cn_f16_to_f32(d16), dmin_all = cn_f16_to_f32(dmin16);
    for (int s = 0; s < 8; s++) {
        uint8_t ss, ms;
        cn_k4_scale_min(packed, s, &ss, &ms);
        const float d = d_all * (float)ss;
        if (d == 0) continue; /* the fit's levels stay, as ggml leaves them */
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
            for (int l = 0; l < 32; l++) b[i].qs[p * 32 + l] = (uint8_t)(q[p * 64 + l] | q[p * 64 + 32 + l] << 4);
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

/* qw: (n_elem) importance weights, or NULL for ggml's x^2 */
static void q6_K_row(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q6_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        int8_t q[CN_QK_K]; /* level + 32, 0..63 */
        float scales[16];
        float max_scale = 0, max_abs = 0;
        for (int s = 0; s < 16; s++) {
            scales[s] = fit_scale_sym(16, 32, src + 16 * s, q + 16 * s, qw ? qw + CN_QK_K * i + 16 * s : NULL);
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
            if (d == 0) continue;
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

void cn_quant_row_q6_K_search(const float *src, void *dst, int64_t n_elem) { q6_K_row(src, dst, n_elem, NULL); }

/* ---- with an importance matrix: ggml's quantize_row_<type>_impl, which llama-quantize
 * runs for a tensor the imatrix has an entry for. qw is one weight per column of the
 * row (the imatrix's mean squared activation); each function quantizes ONE row, since
 * the 32-block types scale the weights by the row's own mean square. ---- */

/* Fit of n non-negative values to q in [0, nmax] (a super-block's 8 scales or 8 mins,
 * weighted by their sub-blocks' summed weights): the best of 9 grids near max/nmax,
 * then up to 5 passes that move one level at a time while the weighted fit gains.
 * Returns the scale. ggml's make_qp_quants. */
static float fit_scale_pos(int n, int nmax, const float *x, uint8_t *q, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < ALL_ZERO_EPS) {
        memset(q, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) q[i] = (uint8_t)round_nearest(iscale * x[i]);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * (float)q[i];
        best += w[i] * diff * diff;
    }
    for (int k = -4; k <= 4; k++) {
        if (k == 0) continue;
        float iscale_k = (0.1f * (float)k + (float)nmax) / max;
        float scale_k = 1 / iscale_k;
        float err = 0;
        for (int i = 0; i < n; i++) {
            int l = round_nearest(iscale_k * x[i]);
            l = l < nmax ? l : nmax;
            float diff = x[i] - scale_k * (float)l;
            err += w[i] * diff * diff;
        }
        if (err < best) {
            best = err;
            iscale = iscale_k;
        }
    }
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        int l = round_nearest(iscale * x[i]);
        l = l < nmax ? l : nmax;
        q[i] = (uint8_t)l;
        sum_lx += w[i] * x[i] * (float)q[i];
        sum_l2 += w[i] * (float)q[i] * (float)q[i];
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sum_lx - w[i] * x[i] * (float)q[i];
            float sl2 = sum_l2 - w[i] * (float)q[i] * (float)q[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            int l = round_nearest(x[i] * sl2 / slx);
            l = l < nmax ? l : nmax;
            if (l == q[i]) continue;
            slx += w[i] * x[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            /* the fit's gain sum_lx^2 / sum_l2 grows: take the move */
            if (slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
                q[i] = (uint8_t)l;
                sum_lx = slx;
                sum_l2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

/* Q4_K / Q5_K with weights: per sub-block of 32 a (scale, min) fit weighted by
 * qw * sqrt(sigma2 + x^2) (sigma2 = twice the super-block's mean square) over a wider
 * grid than the unweighted search (rmin -0.9, step 0.05, 37 grids); the 8 scales and 8
 * mins are then fitted to 6 bits by fit_scale_pos rather than against their maxima. */
static void quant_k4_block_w(const float *x, const float *qw, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                             uint8_t *packed, uint8_t *q) {
    float scales[8], mins[8], sw[8], w[32];
    uint8_t scratch[32], ls[8], lm[8];
    float sum_x2 = 0;
    for (int l = 0; l < CN_QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / CN_QK_K;
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        for (int l = 0; l < 32; l++) w[l] = qw[32 * s + l] * sqrtf(sigma2 + xs[l] * xs[l]);
        float sum_w = 0;
        for (int l = 0; l < 32; l++) sum_w += w[l];
        sw[s] = sum_w;
        scales[s] = fit_scale_min(32, nmax, xs, w, q + 32 * s, &mins[s], scratch, -0.9f, 0.05f, 36);
    }
    const float d_block = fit_scale_pos(8, 63, scales, ls, sw);
    const float m_block = fit_scale_pos(8, 63, mins, lm, sw);
    for (int s = 0; s < 8; s++) {
        ls[s] = ls[s] < 63 ? ls[s] : 63;
        lm[s] = lm[s] < 63 ? lm[s] : 63;
    }
    for (int s = 0; s < 4; s++) {
        packed[s] = (uint8_t)(ls[s] | (ls[s + 4] >> 4) << 6);
        packed[s + 4] = (uint8_t)(lm[s] | (lm[s + 4] >> 4) << 6);
        packed[s + 8] = (uint8_t)((ls[s + 4] & 15) | (lm[s + 4] & 15) << 4);
    }
    *d_out = cn_f32_to_f16(d_block);
    *dmin_out = cn_f32_to_f16(m_block);
    k4_reround(x, nmax, *d_out, *dmin_out, packed, q);
}

static void q4_K_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q4_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K, qw += CN_QK_K) {
        uint8_t q[CN_QK_K];
        quant_k4_block_w(src, qw, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) b[i].qs[p * 32 + l] = (uint8_t)(q[p * 64 + l] | q[p * 64 + 32 + l] << 4);
    }
}

static void q5_K_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q5_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K, qw += CN_QK_K) {
        uint8_t q[CN_QK_K];
        quant_k4_block_w(src, qw, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int q0 = q[p * 64 + l], q1 = q[p * 64 + 32 + l];
                b[i].qs[p * 32 + l] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
                b[i].qh[l] |= (uint8_t)((q0 >> 4) << (2 * p) | (q1 >> 4) << (2 * p + 1));
            }
    }
}

/* Q6_K takes the imatrix's weights as they are, in place of x^2. */
static void q6_K_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) { q6_K_row(src, dst, n_elem, qw); }

/* The 32-blocks: w = qw * sqrt(sigma2 + x^2), sigma2 the whole row's mean square. */
static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / (float)n;
}

static void block_weights(const float *xb, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < 32; j++) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

static void q4_0_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q4_0 *b = dst;
    const float sigma2 = row_sigma2(src, n_elem);
    for (int64_t i = 0; i < n_elem / 32; i++) {
        float w[32];
        int8_t q[32];
        block_weights(src + 32 * i, qw + 32 * i, sigma2, w);
        b[i].d = cn_f32_to_f16(fit_scale_sym(32, 8, src + 32 * i, q, w));
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

static void q5_0_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q5_0 *b = dst;
    const float sigma2 = row_sigma2(src, n_elem);
    for (int64_t i = 0; i < n_elem / 32; i++) {
        float w[32];
        int8_t q[32];
        block_weights(src + 32 * i, qw + 32 * i, sigma2, w);
        b[i].d = cn_f32_to_f16(fit_scale_sym(32, 16, src + 32 * i, q, w));
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            b[i].qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            qh |= (uint32_t)((q[j] >> 4) & 1) << j | (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

static void q4_1_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q4_1 *b = dst;
    const float sigma2 = row_sigma2(src, n_elem);
    for (int64_t i = 0; i < n_elem / 32; i++) {
        float w[32], neg_min;
        uint8_t q[32], scratch[32];
        block_weights(src + 32 * i, qw + 32 * i, sigma2, w);
        const float d = fit_scale_min(32, 15, src + 32 * i, w, q, &neg_min, scratch, -0.9f, 0.05f, 36);
        b[i].d = cn_f32_to_f16(d);
        b[i].m = cn_f32_to_f16(-neg_min);
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

static void q5_1_row_w(const float *src, void *dst, int64_t n_elem, const float *qw) {
    cn_block_q5_1 *b = dst;
    const float sigma2 = row_sigma2(src, n_elem);
    for (int64_t i = 0; i < n_elem / 32; i++) {
        float w[32], neg_min;
        uint8_t q[32], scratch[32];
        block_weights(src + 32 * i, qw + 32 * i, sigma2, w);
        const float d = fit_scale_min(32, 31, src + 32 * i, w, q, &neg_min, scratch, -0.9f, 0.05f, 36);
        b[i].d = cn_f32_to_f16(d);
        b[i].m = cn_f32_to_f16(-neg_min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            b[i].qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            qh |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + 16] >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

cn_from_float_w_fn cn_type_quantizer_weighted(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_0: return q4_0_row_w;
    case CN_TYPE_Q4_1: return q4_1_row_w;
    case CN_TYPE_Q5_0: return q5_0_row_w;
    case CN_TYPE_Q5_1: return q5_1_row_w;
    case CN_TYPE_Q4_K: return q4_K_row_w;
    case CN_TYPE_Q5_K: return q5_K_row_w;
    case CN_TYPE_Q6_K: return q6_K_row_w;
    default: return NULL;
    }
}

cn_from_float_fn cn_type_quantizer(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_K: return cn_quant_row_q4_K_search;
    case CN_TYPE_Q5_K: return cn_quant_row_q5_K_search;
    case CN_TYPE_Q6_K: return cn_quant_row_q6_K_search;
    /* clang-format off */
    case CN_TYPE_F32: case CN_TYPE_F16: case CN_TYPE_BF16:
    case CN_TYPE_Q4_0: case CN_TYPE_Q4_1: case CN_TYPE_Q5_0: case CN_TYPE_Q5_1: case CN_TYPE_Q8_0: {
        const cn_type_traits *t = cn_type_traits_get(type);
        return t ? t->from_float_ref : NULL;
    }
    /* clang-format on */
    default: return NULL;
    }
}
