/* quants_k.c — the K-quant super-block formats (Q2_K .. Q6_K, Q8_K): dequantize as ggml
 * does, float for float (bit-exact with gguf-py), and cinder's own reference quantizers.
 *
 * The quantizers are deliberately simple and carry a proof of their error, because this
 * file is the spec the SIMD kernels and the `quantize` tool are checked against:
 *
 *  Asymmetric formats (Q2_K, Q4_K, Q5_K: x ~ D_s * q - M_s, q in [0, Q], D_s = d * sc_s,
 *  M_s = dmin * m_s with sc, m unsigned integers up to S = 15 or 63). For sub-block s
 *  let lo = min(0, min x), hi = max x. The mins are chosen first and rounded *up*:
 *  dmin = f16 rounded up of max(-lo) / S, m_s = ceil(-lo / dmin), so M_s >= -lo. Then the
 *  needed step D_s >= (hi + M_s) / Q is rounded up the same way (d = f16-ceil of
 *  max needed step / S, sc_s = ceil). The grid {-M_s + D_s q} then covers [lo, hi], so
 *  every element is within D_s / 2 of its nearest grid point, and
 *      |x - x'| <= D_s / 2 < ((hi - lo + dmin) / Q + d) / 2.
 *
 *  Symmetric formats (Q3_K, Q6_K: x ~ D_s * q, q in [-Q-1, Q], D_s = d * sc_s, sc signed
 *  up to S = 31 or 127 in magnitude): as ggml's Q4_0, the element of largest magnitude
 *  maps to the extra negative level -Q-1 (D_s = -extreme / (Q+1), magnitude rounded up
 *  to a multiple of d = f16-ceil(max |D_s| / S)). Elements of the opposite sign may
 *  reach +Q+1 and are clamped to +Q, so |x - x'| <= |D_s| < amax_s / (Q+1) + d.
 *
 * Rounding up costs a little RMSE against ggml's search-based quantizers (it never clips
 * or shrinks a range) and buys a bound a test can check per element. The bounds assume
 * the f16 scales stay in f16's normal range (|x| between about 1e-2 and 1e6 for the
 * largest element of a super-block); outside it the scales saturate or lose precision.
 * Q8_K follows ggml's quantize_row_q8_K_ref exactly (d = max / -127, round to nearest
 * even, clamp at 127), since activations quantized for dot products should match. */
#include <math.h>
#include <string.h>

#include "tensor/quants.h"
#include "tensor/tensor.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- helpers ------------------------------------------------------------------- */

/* The smallest finite f16 >= v, for v >= 0 (saturates at 65504; NaN gives 0). */
static uint16_t f16_ceil(float v) {
    if (!(v > 0.0f)) return 0;
    uint16_t h = cn_f32_to_f16(v);
    if (h >= 0x7c00u) return 0x7bffu;
    if (cn_f16_to_f32(h) < v && h < 0x7bffu) h++;
    return h;
}

/* The smallest k in [0, hi] with unit * k >= target (unit > 0), or hi. */
static int ceil_multiple(float target, float unit, int hi) {
    float v = target / unit;
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    int k = (int)ceilf(v);
    while (k < hi && unit * (float)k < target) k++;
    return k;
}

/* Round to nearest (ties to even), clamped to [lo, hi]; NaN gives lo. */
static int nearest_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)rintf(v);
}

/* One asymmetric super-block: n_sub sub-blocks of sub_len elements (n_sub <= 16).
 * Out: f16 d and dmin, per sub-block sc[s], m[s] in [0, smax], q[e] in [0, qmax]. */
static void quant_asym(const float *x, int n_sub, int sub_len, int qmax, int smax, uint16_t *d_out, uint16_t *dmin_out,
                       uint8_t *sc, uint8_t *m, uint8_t *q) {
    float hi[16], mneed[16], step[16];
    float mneed_max = 0.0f, step_max = 0.0f;
    for (int s = 0; s < n_sub; s++) {
        const float *xs = x + s * sub_len;
        float lo = 0.0f, h = xs[0];
        for (int j = 0; j < sub_len; j++) {
            lo = xs[j] < lo ? xs[j] : lo;
            h = xs[j] > h ? xs[j] : h;
        }
        hi[s] = h;
        mneed[s] = -lo;
        mneed_max = CN_MAX(mneed_max, mneed[s]);
    }
    *dmin_out = f16_ceil(mneed_max / (float)smax);
    const float dmin = cn_f16_to_f32(*dmin_out);
    float mins[16]; /* (n_sub) M_s, the exact float the dequantizer computes */
    for (int s = 0; s < n_sub; s++) {
        m[s] = (uint8_t)(dmin > 0.0f ? ceil_multiple(mneed[s], dmin, smax) : 0);
        mins[s] = dmin * (float)m[s];
        step[s] = (hi[s] + mins[s]) / (float)qmax;
        step_max = CN_MAX(step_max, step[s]);
    }
    *d_out = f16_ceil(step_max / (float)smax);
    const float d = cn_f16_to_f32(*d_out);
    for (int s = 0; s < n_sub; s++) {
        sc[s] = (uint8_t)(d > 0.0f ? ceil_multiple(step[s], d, smax) : 0);
        const float dl = d * (float)sc[s];
        for (int j = 0; j < sub_len; j++) {
            int e = s * sub_len + j;
            q[e] = (uint8_t)(dl > 0.0f ? nearest_clamp((x[e] + mins[s]) / dl, 0, qmax) : 0);
        }
    }
}

/* One symmetric super-block: q[e] in [-qmax-1, qmax], sc[s] in [-smax, smax]. */
static void quant_sym(const float *x, int n_sub, int sub_len, int qmax, int smax, uint16_t *d_out, int *sc, int *q) {
    float step[16]; /* (n_sub) signed ideal step: -extreme / (qmax + 1) */
    float step_max = 0.0f;
    for (int s = 0; s < n_sub; s++) {
        const float *xs = x + s * sub_len;
        float amax = 0.0f, ext = 0.0f;
        for (int j = 0; j < sub_len; j++) {
            if (fabsf(xs[j]) > amax) {
                amax = fabsf(xs[j]);
                ext = xs[j];
            }
        }
        step[s] = -ext / (float)(qmax + 1);
        step_max = CN_MAX(step_max, fabsf(step[s]));
    }
    *d_out = f16_ceil(step_max / (float)smax);
    const float d = cn_f16_to_f32(*d_out);
    for (int s = 0; s < n_sub; s++) {
        int k = d > 0.0f ? ceil_multiple(fabsf(step[s]), d, smax) : 0;
        sc[s] = step[s] < 0.0f ? -k : k;
        const float dl = d * (float)sc[s];
        for (int j = 0; j < sub_len; j++) {
            int e = s * sub_len + j;
            q[e] = dl != 0.0f ? nearest_clamp(x[e] / dl, -qmax - 1, qmax) : 0;
        }
    }
}

/* ---- Q2_K ---------------------------------------------------------------------- */

void cn_dequant_row_q2_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q2_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K) {
        const float d = cn_f16_to_f32(b[i].d);
        const float dmin = cn_f16_to_f32(b[i].dmin);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)(b[i].scales[s] & 15);
            const float ml = dmin * (float)(b[i].scales[s] >> 4);
            for (int j = 0; j < 16; j++) {
                int e = s * 16 + j, h = e / 128, k = e % 128 / 32, l = e % 32;
                int q = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
                dst[e] = dl * (float)q - ml;
            }
        }
    }
}

void cn_quant_row_q2_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q2_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        uint8_t sc[16], m[16], q[CN_QK_K];
        quant_asym(src, 16, 16, 3, 15, &b[i].d, &b[i].dmin, sc, m, q);
        for (int s = 0; s < 16; s++) b[i].scales[s] = (uint8_t)(sc[s] | m[s] << 4);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int e = 0; e < CN_QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32;
            b[i].qs[h * 32 + l] |= (uint8_t)(q[e] << (2 * k));
        }
    }
}

/* ---- Q3_K ---------------------------------------------------------------------- */

void cn_dequant_row_q3_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q3_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K) {
        const float d = cn_f16_to_f32(b[i].d);
        for (int s = 0; s < 16; s++) {
            const float dl = d * (float)(cn_q3_K_scale(b[i].scales, s) - 32);
            for (int j = 0; j < 16; j++) {
                int e = s * 16 + j, h = e / 128, k = e % 128 / 32, l = e % 32;
                int low = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
                int high = (b[i].hmask[l] >> (4 * h + k)) & 1;
                dst[e] = dl * (float)(low - (high ? 0 : 4));
            }
        }
    }
}

void cn_quant_row_q3_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q3_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        int sc[16], q[CN_QK_K];
        quant_sym(src, 16, 16, 3, 31, &b[i].d, sc, q);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int s = 0; s < 16; s++) {
            int u = sc[s] + 32; /* 1 .. 63 */
            b[i].scales[s % 8] |= (uint8_t)((u & 15) << (s < 8 ? 0 : 4));
            b[i].scales[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int e = 0; e < CN_QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32;
            int u = q[e] + 4; /* 0 .. 7: low 2 bits in qs, bit 2 in hmask */
            b[i].qs[h * 32 + l] |= (uint8_t)((u & 3) << (2 * k));
            b[i].hmask[l] |= (uint8_t)((u >> 2) << (4 * h + k));
        }
    }
}

/* ---- Q4_K / Q5_K --------------------------------------------------------------- */

void cn_dequant_row_q4_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q4_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K) {
        const float d = cn_f16_to_f32(b[i].d);
        const float dmin = cn_f16_to_f32(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            cn_k4_scale_min(b[i].scales, s, &sc, &m);
            const float dl = d * (float)sc;
            const float ml = dmin * (float)m;
            const uint8_t *qs = b[i].qs + (s / 2) * 32;
            for (int l = 0; l < 32; l++) {
                int q = (s & 1) ? qs[l] >> 4 : qs[l] & 15;
                dst[s * 32 + l] = dl * (float)q - ml;
            }
        }
    }
}

static void pack_k4_scales(const uint8_t *sc, const uint8_t *m, uint8_t *out /* (12) */) {
    for (int s = 0; s < 4; s++) {
        out[s] = (uint8_t)(sc[s] | (sc[s + 4] >> 4) << 6);
        out[s + 4] = (uint8_t)(m[s] | (m[s + 4] >> 4) << 6);
        out[s + 8] = (uint8_t)((sc[s + 4] & 15) | (m[s + 4] & 15) << 4);
    }
}

void cn_quant_row_q4_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q4_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        uint8_t sc[8], m[8], q[CN_QK_K];
        quant_asym(src, 8, 32, 15, 63, &b[i].d, &b[i].dmin, sc, m, q);
        pack_k4_scales(sc, m, b[i].scales);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) b[i].qs[p * 32 + l] = (uint8_t)(q[p * 64 + l] | q[p * 64 + 32 + l] << 4);
    }
}

void cn_dequant_row_q5_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q5_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K) {
        const float d = cn_f16_to_f32(b[i].d);
        const float dmin = cn_f16_to_f32(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            cn_k4_scale_min(b[i].scales, s, &sc, &m);
            const float dl = d * (float)sc;
            const float ml = dmin * (float)m;
            const uint8_t *qs = b[i].qs + (s / 2) * 32;
            for (int l = 0; l < 32; l++) {
                int q = ((s & 1) ? qs[l] >> 4 : qs[l] & 15) | ((b[i].qh[l] >> s) & 1) << 4;
                dst[s * 32 + l] = dl * (float)q - ml;
            }
        }
    }
}

void cn_quant_row_q5_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q5_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        uint8_t sc[8], m[8], q[CN_QK_K];
        quant_asym(src, 8, 32, 31, 63, &b[i].d, &b[i].dmin, sc, m, q);
        pack_k4_scales(sc, m, b[i].scales);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 32; l++) {
                int q0 = q[p * 64 + l], q1 = q[p * 64 + 32 + l];
                b[i].qs[p * 32 + l] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
                b[i].qh[l] |= (uint8_t)((q0 >> 4) << (2 * p) | (q1 >> 4) << (2 * p + 1));
            }
    }
}

/* ---- Q6_K ---------------------------------------------------------------------- */

void cn_dequant_row_q6_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q6_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K) {
        const float d = cn_f16_to_f32(b[i].d);
        for (int e = 0; e < CN_QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32;
            int lowbyte = b[i].ql[h * 64 + l + 32 * (k & 1)];
            int low = k < 2 ? lowbyte & 15 : lowbyte >> 4;
            int high = (b[i].qh[h * 32 + l] >> (2 * k)) & 3;
            dst[e] = d * (float)b[i].scales[e / 16] * (float)((low | high << 4) - 32);
        }
    }
}

void cn_quant_row_q6_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q6_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        int sc[16], q[CN_QK_K];
        quant_sym(src, 16, 16, 31, 127, &b[i].d, sc, q);
        for (int s = 0; s < 16; s++) b[i].scales[s] = (int8_t)sc[s];
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < CN_QK_K; e++) {
            int h = e / 128, k = e % 128 / 32, l = e % 32;
            int u = q[e] + 32; /* 0 .. 63 */
            b[i].ql[h * 64 + l + 32 * (k & 1)] |= (uint8_t)((u & 15) << (k < 2 ? 0 : 4));
            b[i].qh[h * 32 + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
    }
}

/* ---- Q8_K ---------------------------------------------------------------------- */

void cn_dequant_row_q8_K(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q8_K *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, dst += CN_QK_K)
        for (int j = 0; j < CN_QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}

void cn_quant_row_q8_K(const float *src, void *dst, int64_t n_elem) {
    cn_block_q8_K *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK_K; i++, src += CN_QK_K) {
        float amax = 0.0f, ext = 0.0f;
        for (int j = 0; j < CN_QK_K; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                ext = src[j];
            }
        }
        memset(b[i].bsums, 0, sizeof b[i].bsums);
        if (amax == 0.0f) {
            b[i].d = 0.0f;
            memset(b[i].qs, 0, sizeof b[i].qs);
            continue;
        }
        const float iscale = -127.0f / ext;
        for (int j = 0; j < CN_QK_K; j++) {
            b[i].qs[j] = (int8_t)nearest_clamp(iscale * src[j], -128, 127);
            b[i].bsums[j / 16] = (int16_t)(b[i].bsums[j / 16] + b[i].qs[j]);
        }
        b[i].d = 1.0f / iscale;
    }
}
