/* quants_legacy.c — the 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1):
 * dequantize as ggml does, float for float, and quantize exactly as ggml's reference
 * quantizers (quantize_row_*_ref) do, so gguf-py's numpy quantizers produce the same
 * bytes. Only the float->int conversions are guarded (NaN, out of range) so that a
 * non-finite input cannot reach undefined behaviour; for finite input they give ggml's
 * values. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "tensor/quants.h"
#include "tensor/tensor.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* (int)v for v in [0, hi], saturating: ggml's MIN(hi, (int8_t)v) where v >= 0. */
static int trunc_sat(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf (half away from zero) into int8, saturating, NaN -> 0. Written with a truncating
 * conversion and the exact remainder v - trunc(v) instead of calling roundf: the same
 * result for every float, without a libm call per element (quantizing a 1.5B model to
 * Q8_0 spends its time here). */
static int8_t round_i8(float v) {
    if (v != v) return 0;
    if (v <= -128.0f) return -128;
    if (v >= 127.0f) return 127;
    int i = (int)v;
    const float frac = v - (float)i; /* exact: |v| < 2^7 */
    if (frac >= 0.5f) i++;
    else if (frac <= -0.5f) i--;
    return (int8_t)i;
}

/* The element of largest magnitude, first one on ties (sign kept). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* ---- Q4_0 ---------------------------------------------------------------------- */

void cn_dequant_row_q4_0(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q4_0 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK4_0; i++, dst += CN_QK4_0) {
        const float d = cn_f16_to_f32(b[i].d);
        for (int j = 0; j < CN_QK4_0 / 2; j++) {
            dst[j] = (float)((b[i].qs[j] & 15) - 8) * d;
            dst[j + CN_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* d = (signed extreme) / -8, so the extreme maps to q = 0 (value -8 d); q = trunc(x/d + 8.5). */
void cn_quant_row_q4_0(const float *src, void *dst, int64_t n_elem) {
    cn_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK4_0; i++, src += CN_QK4_0) {
        const float d = signed_absmax(src, CN_QK4_0) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        for (int j = 0; j < CN_QK4_0 / 2; j++) {
            int q0 = trunc_sat(src[j] * id + 8.5f, 15);
            int q1 = trunc_sat(src[j + CN_QK4_0 / 2] * id + 8.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ---- Q4_1 ---------------------------------------------------------------------- */

void cn_dequant_row_q4_1(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q4_1 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK4_1; i++, dst += CN_QK4_1) {
        const float d = cn_f16_to_f32(b[i].d);
        const float m = cn_f16_to_f32(b[i].m);
        for (int j = 0; j < CN_QK4_1 / 2; j++) {
            dst[j] = (float)(b[i].qs[j] & 15) * d + m;
            dst[j + CN_QK4_1 / 2] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* d = (max - min) / 15, m = min; q = trunc((x - min) / d + 0.5). */
void cn_quant_row_q4_1(const float *src, void *dst, int64_t n_elem) {
    cn_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK4_1; i++, src += CN_QK4_1) {
        float mn, mx;
        min_max(src, CN_QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        b[i].m = cn_f32_to_f16(mn);
        for (int j = 0; j < CN_QK4_1 / 2; j++) {
            int q0 = trunc_sat((src[j] - mn) * id + 0.5f, 15);
            int q1 = trunc_sat((src[j + CN_QK4_1 / 2] - mn) * id + 0.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* ---- Q5_0 ---------------------------------------------------------------------- */

void cn_dequant_row_q5_0(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q5_0 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK5_0; i++, dst += CN_QK5_0) {
        const float d = cn_f16_to_f32(b[i].d);
        const uint32_t qh = load_le32(b[i].qh);
        for (int j = 0; j < CN_QK5_0 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)(((b[i].qs[j] & 15) | h0) - 16) * d;
            dst[j + CN_QK5_0 / 2] = (float)(((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

/* As Q4_0 with 32 levels: d = (signed extreme) / -16, q = trunc(x/d + 16.5). */
void cn_quant_row_q5_0(const float *src, void *dst, int64_t n_elem) {
    cn_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK5_0; i++, src += CN_QK5_0) {
        const float d = signed_absmax(src, CN_QK5_0) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < CN_QK5_0 / 2; j++) {
            int q0 = trunc_sat(src[j] * id + 16.5f, 31);
            int q1 = trunc_sat(src[j + CN_QK5_0 / 2] * id + 16.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_le32(b[i].qh, qh);
    }
}

/* ---- Q5_1 ---------------------------------------------------------------------- */

void cn_dequant_row_q5_1(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q5_1 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK5_1; i++, dst += CN_QK5_1) {
        const float d = cn_f16_to_f32(b[i].d);
        const float m = cn_f16_to_f32(b[i].m);
        const uint32_t qh = load_le32(b[i].qh);
        for (int j = 0; j < CN_QK5_1 / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            dst[j] = (float)((b[i].qs[j] & 15) | h0) * d + m;
            dst[j + CN_QK5_1 / 2] = (float)((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

/* As Q4_1 with 32 levels: d = (max - min) / 31. */
void cn_quant_row_q5_1(const float *src, void *dst, int64_t n_elem) {
    cn_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK5_1; i++, src += CN_QK5_1) {
        float mn, mx;
        min_max(src, CN_QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        b[i].m = cn_f32_to_f16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < CN_QK5_1 / 2; j++) {
            int q0 = trunc_sat((src[j] - mn) * id + 0.5f, 31);
            int q1 = trunc_sat((src[j + CN_QK5_1 / 2] - mn) * id + 0.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_le32(b[i].qh, qh);
    }
}

/* ---- Q8_0 / Q8_1 --------------------------------------------------------------- */

void cn_dequant_row_q8_0(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q8_0 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK8_0; i++, dst += CN_QK8_0) {
        const float d = cn_f16_to_f32(b[i].d);
        for (int j = 0; j < CN_QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

static float absmax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = CN_MAX(amax, fabsf(x[j]));
    return amax;
}

/* roundf for |v| <= 128 without branches (the comparisons become flag moves, so the
 * block's loop runs straight); equal to roundf on that range (checked for every float). */
static int8_t round_small(float v) {
    const float a = fabsf(v);
    const int t = (int)a;
    const int r = t + (a - (float)t >= 0.5f);
    return (int8_t)(v < 0 ? -r : r);
}

static bool all_finite(const float *x, int n) {
    bool ok = true;
    for (int j = 0; j < n; j++) ok &= fabsf(x[j]) <= FLT_MAX; /* false for NaN and Inf */
    return ok;
}

/* d = max|x| / 127, q = roundf(x / d). A block of finite values has every x / d in
 * [-127.01, 127.01]: the branch-free rounding; otherwise the saturating one. */
void cn_quant_row_q8_0(const float *src, void *dst, int64_t n_elem) {
    cn_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK8_0; i++, src += CN_QK8_0) {
        const float d = absmax(src, CN_QK8_0) / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        if (all_finite(src, CN_QK8_0)) {
            for (int j = 0; j < CN_QK8_0; j++) b[i].qs[j] = round_small(src[j] * id);
        } else {
            for (int j = 0; j < CN_QK8_0; j++) b[i].qs[j] = round_i8(src[j] * id);
        }
    }
}

void cn_dequant_row_q8_1(const void *src, float *dst, int64_t n_elem) {
    const cn_block_q8_1 *b = src;
    for (int64_t i = 0; i < n_elem / CN_QK8_1; i++, dst += CN_QK8_1) {
        const float d = cn_f16_to_f32(b[i].d);
        for (int j = 0; j < CN_QK8_1; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* As Q8_0, plus s = d * sum(q). */
void cn_quant_row_q8_1(const float *src, void *dst, int64_t n_elem) {
    cn_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n_elem / CN_QK8_1; i++, src += CN_QK8_1) {
        const float d = absmax(src, CN_QK8_1) / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cn_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < CN_QK8_1; j++) {
            b[i].qs[j] = round_i8(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = cn_f32_to_f16((float)sum * d);
    }
}
