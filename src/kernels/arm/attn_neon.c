/* attn_neon.c — attention over paged K/V blocks for the NEON family (arm.h), one
 * (row, head) pair at a time with ref's split, bit-identical to ref
 * (kernels/ref/attention.c). Pure kernel: pointers, sizes, (ith, nth).
 *
 * Ref sums each score q·k over d in order, so the vector lanes here are positions, not
 * dims: 4 positions' K rows are read 4 dims at a time and transposed, and lane j adds
 * q[d] * k_j[d] for d = 0, 1, ... exactly as ref's loop does for position j (product,
 * then add; no FMA). The softmax is ref's scalar code (expf, the sum in double). The
 * weighted sum of V runs over positions in order with a lane per dim, which is ref's
 * order for every output element. Cached values convert exactly (f16 by the hardware,
 * Q8_0 as d * q), and q and the weights are rounded through f16 for an F16 cache, as
 * ref does. Shapes ref does not define for vectors (head_dim not a multiple of 4, or of
 * 32 for Q8_0; other cache types) go to ref. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "arm.h"
#include "core/pool.h"
#include "kernels/ref/ref.h"
#include "tensor/tensor.h"

/* Bytes from a block's start to element `first` of slot `slot`. */
static inline size_t kv_off(uint32_t type, int32_t kv_dim, int32_t slot, int32_t first) {
    const size_t e = (size_t)slot * (size_t)kv_dim + (size_t)first;
    switch (type) {
    case CN_TYPE_F32: return e * 4;
    case CN_TYPE_F16: return e * 2;
    default: return e / CN_QK8_0 * sizeof(cn_block_q8_0);
    }
}

/* Elements [d, d + 4) of a cached row (which starts at a Q8_0 block for that type). */
static inline float32x4_t kv4(uint32_t type, const uint8_t *row, int32_t d) {
    switch (type) {
    case CN_TYPE_F32: return vld1q_f32((const float *)(const void *)row + d);
    case CN_TYPE_F16: return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)row + d)));
    default: {
        const cn_block_q8_0 *b = (const cn_block_q8_0 *)(const void *)row + d / CN_QK8_0;
        int32_t four;
        memcpy(&four, b->qs + d % CN_QK8_0, 4);
        const int16x8_t q = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
        return vmulq_f32(vdupq_n_f32(cn_ref_f16(b->d)), vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))));
    }
    }
}

static inline float round_f16(float x) { return cn_ref_f16(cn_f32_to_f16(x)); }

/* s[p - lo] = (q · k_p) * scale for p in [lo, hi], 4 positions per vector. */
static void scores(const cn_attn_args *a, const void *const *kb, const float *q, int32_t first, int32_t lo, int32_t hi,
                   float *s) {
    const int32_t hd = a->head_dim, bt = a->block_tokens;
    for (int32_t p0 = lo; p0 <= hi; p0 += 4) {
        const int n = (int)CN_MIN(4, hi - p0 + 1);
        const uint8_t *kr[4];
        for (int j = 0; j < 4; j++) { /* past hi: the last row again, not stored */
            const int32_t p = p0 + CN_MIN(j, n - 1);
            kr[j] = (const uint8_t *)kb[p / bt] + kv_off(a->kv_type, a->kv_dim, p % bt, first);
        }
        float32x4_t acc = vdupq_n_f32(0.0f);
        for (int32_t d = 0; d < hd; d += 4) {
            const float32x4x2_t t01 = vtrnq_f32(kv4(a->kv_type, kr[0], d), kv4(a->kv_type, kr[1], d));
            const float32x4x2_t t23 = vtrnq_f32(kv4(a->kv_type, kr[2], d), kv4(a->kv_type, kr[3], d));
            const float32x4_t c[4] = {
                /* c[e] lane j = k_j[d + e] */
                vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])),
                vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])),
                vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])),
                vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])),
            };
            for (int e = 0; e < 4; e++) acc = vaddq_f32(acc, vmulq_f32(vdupq_n_f32(q[d + e]), c[e]));
        }
        float o[4];
        vst1q_f32(o, vmulq_f32(acc, vdupq_n_f32(a->scale)));
        memcpy(s + (p0 - lo), o, (size_t)n * sizeof(float));
    }
}

void cn_neon_attention(const cn_attn_args *a, int ith, int nth) {
    const int32_t hd = a->head_dim;
    const uint32_t type = a->kv_type;
    if (hd <= 0 || hd % 4 || hd > CN_MAX_HEAD_DIM || (type == CN_TYPE_Q8_0 && hd % CN_QK8_0) ||
        (type != CN_TYPE_F32 && type != CN_TYPE_F16 && type != CN_TYPE_Q8_0)) {
        cn_ref_attention(a, ith, nth);
        return;
    }
    const int32_t group = a->n_head / a->n_head_kv;
    const int32_t bt = a->block_tokens;
    const bool half = type == CN_TYPE_F16;
    float *s = a->scratch + (int64_t)ith * a->scratch_stride; /* (hi - lo + 1) scores, then e */
    float qv[CN_MAX_HEAD_DIM];                                /* (head_dim) q, f16-rounded for an F16 cache */
    float acc[CN_MAX_HEAD_DIM];                               /* (head_dim) the weighted sum of V rows */

    int64_t t0, t1;
    cn_split((int64_t)a->n_rows * a->n_head, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const int32_t r = (int32_t)(t / a->n_head), h = (int32_t)(t % a->n_head);
        const int32_t first = (h / group) * hd;
        const float *q = a->q + ((int64_t)r * a->n_head + h) * hd;
        const int32_t lo = a->pos_lo[r], hi = a->pos_hi[r];
        for (int32_t d = 0; d < hd; d++) qv[d] = half ? round_f16(q[d]) : q[d];

        scores(a, a->k_blocks[r], qv, first, lo, hi, s);
        float max = -INFINITY;
        for (int32_t p = lo; p <= hi; p++) max = s[p - lo] > max ? s[p - lo] : max;
        double sum = 0.0;
        for (int32_t p = lo; p <= hi; p++) {
            s[p - lo] = expf(s[p - lo] - max);
            sum += (double)s[p - lo];
        }
        const float inv = (float)(1.0 / sum);

        memset(acc, 0, (size_t)hd * sizeof(float));
        const void *const *vb = a->v_blocks[r];
        for (int32_t p = lo; p <= hi; p++) {
            const float w = half ? round_f16(s[p - lo] * inv) : s[p - lo] * inv;
            const float32x4_t wv = vdupq_n_f32(w);
            const uint8_t *row = (const uint8_t *)vb[p / bt] + kv_off(type, a->kv_dim, p % bt, first);
            for (int32_t d = 0; d < hd; d += 4)
                vst1q_f32(acc + d, vaddq_f32(vld1q_f32(acc + d), vmulq_f32(wv, kv4(type, row, d))));
        }
        memcpy(a->out + ((int64_t)r * a->n_head + h) * hd, acc, (size_t)hd * sizeof(float));
    }
}
