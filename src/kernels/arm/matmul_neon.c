/* matmul_neon.c — the quantized matmul and the activation quantizers of the NEON family
 * (arm.h). Pure kernels: pointers, sizes, (ith, nth); nothing else.
 *
 * Shape of the matmul: the thread's output rows (ref's split of n_out) are taken 4 at a
 * time, one row per float lane, and tokens TT at a time. For each weight block the 4
 * rows are decoded once into the int8 codes ref's unpack gives, and reused for every
 * token of the tile. A row's integer dot with an activation block is vmull_s8 +
 * vpadalq_s16 (exact: |code * act| <= 128 * 127 fits int16, pair sums fit int32) left
 * as 4 partial lanes; vpaddq folds the 4 rows' partials into one vector, lane = row.
 * From there each lane does ref's float operations for its row in ref's order (block by
 * block, the same products and sums, no FMA: kernels/ref/matmul.c), so y is
 * bit-identical to ref whatever the tile, n_tok or thread split. A tail tile of fewer
 * rows repeats its last row and stores only the real ones. F32/F16/BF16 weights keep
 * ref's 8 lanes as two vectors and ref's reduction tree.
 *
 * The activation quantizers are ref's formulas with vector arithmetic: max |x| is order
 * free, vcvtnq rounds half to even as nearbyintf does, and the f16 conversion of
 * armv8-a rounds as cn_f32_to_f16. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "arm.h"
#include "core/pool.h"
#include "kernels/ref/ref.h"
#include "tensor/tensor.h"

#define TT 4 /* tokens per register tile */
#define INL static inline __attribute__((always_inline))

static inline uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* ---------------------------------------------------------------- quantize_rows */

/* max |x| over n (a multiple of 4) floats; maxNum like ref's fmaxf (a NaN is skipped). */
static float amax4(const float *x, int n) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < n; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
    return vmaxnmvq_f32(m);
}

/* 16 codes min(round-half-even(x[i] * s), hi) narrowed to int8 as ref's casts do. */
static int8x16_t round16(const float *x, float s, int32_t hi) {
    const float32x4_t sv = vdupq_n_f32(s);
    int32x4_t q[4];
    for (int i = 0; i < 4; i++) q[i] = vminq_s32(vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * i), sv)), vdupq_n_s32(hi));
    const int16x8_t a = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
    const int16x8_t b = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
    return vcombine_s8(vmovn_s16(a), vmovn_s16(b));
}

/* Q8_0 (q81 false, y0) or Q8_1 (q81 true, y1) blocks of one row: ref's quantize_q8_0/_1. */
static void q8_row(const float *x, cn_block_q8_0 *y0, cn_block_q8_1 *y1, int64_t k, bool q81) {
    for (int64_t b = 0; b < k / CN_QK8_0; b++, x += CN_QK8_0) {
        const float amax = amax4(x, CN_QK8_0);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const int8x16_t q0 = round16(x, id, INT32_MAX), q1 = round16(x + 16, id, INT32_MAX);
        if (q81) {
            vst1q_s8(y1[b].qs, q0);
            vst1q_s8(y1[b].qs + 16, q1);
            y1[b].d = cn_f32_to_f16(d);
            y1[b].s = cn_f32_to_f16(d * (float)(vaddlvq_s8(q0) + vaddlvq_s8(q1)));
        } else {
            vst1q_s8(y0[b].qs, q0);
            vst1q_s8(y0[b].qs + 16, q1);
            y0[b].d = cn_f32_to_f16(d);
        }
    }
}

/* Q8_K: the sign of the first element of largest magnitude sets the scale (-127/max). */
static void q8_K_row(const float *x, cn_block_q8_K *y, int64_t k) {
    for (int64_t b = 0; b < k / CN_QK_K; b++, x += CN_QK_K) {
        const float amax = amax4(x, CN_QK_K);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        int j = 0;
        while (fabsf(x[j]) != amax) j++;
        const float iscale = -127.0f / x[j];
        for (int i = 0; i < CN_QK_K; i += 16) {
            const int8x16_t q = round16(x + i, iscale, 127);
            vst1q_s8(y[b].qs + i, q);
            y[b].bsums[i / 16] = vaddlvq_s8(q);
        }
        y[b].d = 1.0f / iscale;
    }
}

static void f16_row(const float *x, uint16_t *h, int64_t k) {
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) vst1_u16(h + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < k; i++) h[i] = cn_f32_to_f16(x[i]);
}

/* cn_f32_to_bf16 in integer lanes: round to nearest even; NaN keeps sign and top
 * payload and turns quiet. */
static void bf16_row(const float *x, uint16_t *h, int64_t k) {
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) {
        const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i));
        const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        const uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFF)), lsb), 16);
        const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7FFFFFFF)), vdupq_n_u32(0x7F800000));
        const uint32x4_t qnan = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40));
        vst1_u16(h + i, vmovn_u32(vbslq_u32(nan, qnan, r)));
    }
    for (; i < k; i++) h[i] = cn_f32_to_bf16(x[i]);
}

void cn_neon_quantize_rows(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst,
                           size_t dst_row_bytes, int ith, int nth) {
    int64_t r0, r1;
    cn_split(n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * k;
        void *d = (uint8_t *)dst + (size_t)r * dst_row_bytes;
        switch (act_type) {
        case CN_TYPE_F32: memcpy(d, xr, (size_t)k * sizeof(float)); break;
        case CN_TYPE_F16: f16_row(xr, d, k); break;
        case CN_TYPE_BF16: bf16_row(xr, d, k); break;
        case CN_TYPE_Q8_0: q8_row(xr, d, NULL, k, false); break;
        case CN_TYPE_Q8_1: q8_row(xr, NULL, d, k, true); break;
        case CN_TYPE_Q8_K: q8_K_row(xr, d, k); break;
        default: break;
        }
    }
}

/* ---------------------------------------------------------------- matmul: shared */

typedef struct {
    const uint8_t *rp[4]; /* the tile's weight rows; a tail tile repeats its last row */
    int64_t row0;
    int n; /* real rows, 1..4 */
} rows4;

INL const uint8_t *act_row(const cn_matmul_args *a, int64_t t) {
    return (const uint8_t *)a->xq + (size_t)t * a->xq_row_bytes;
}

/* The f16 field at byte off of each row's block, widened by ref's table. */
INL float32x4_t f16_rows(const rows4 *R, size_t off) {
    const float v[4] = {cn_ref_f16(rd16(R->rp[0] + off)), cn_ref_f16(rd16(R->rp[1] + off)),
                        cn_ref_f16(rd16(R->rp[2] + off)), cn_ref_f16(rd16(R->rp[3] + off))};
    return vld1q_f32(v);
}

/* 4 int32 lanes whose sum is the dot of 16 int8 pairs. */
INL int32x4_t dot16(int8x16_t w, int8x16_t a) {
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a))), vmull_high_s8(w, a));
}

/* Lane r = the sum of p[r]'s lanes. */
INL int32x4_t fold4(const int32x4_t *p) { return vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3])); }

INL void store_rows(const cn_matmul_args *a, const rows4 *R, int64_t t, float32x4_t v) {
    float o[4];
    vst1q_f32(o, v);
    for (int r = 0; r < R->n; r++) a->y[t * a->ldy + R->row0 + r] = o[r];
}

/* ---------------------------------------------------------------- 32-element blocks */

static const uint8_t k_bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};

static size_t blk32_bytes(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_0: return sizeof(cn_block_q4_0);
    case CN_TYPE_Q4_1: return sizeof(cn_block_q4_1);
    case CN_TYPE_Q5_0: return sizeof(cn_block_q5_0);
    case CN_TYPE_Q5_1: return sizeof(cn_block_q5_1);
    default: return sizeof(cn_block_q8_0);
    }
}

/* A block's 32 codes as ref's unpack gives them: c[0] elements 0..15, c[1] 16..31
 * (low / high nibbles of qs; Q5's bit 4 of element j is bit j of the 4 qh bytes). */
INL void decode32(const uint32_t type, const uint8_t *blk, int8x16_t c[2]) {
    if (type == CN_TYPE_Q8_0) {
        c[0] = vld1q_s8((const int8_t *)(blk + 2));
        c[1] = vld1q_s8((const int8_t *)(blk + 18));
        return;
    }
    const size_t qs = type == CN_TYPE_Q4_0 ? 2 : type == CN_TYPE_Q4_1 ? 4 : type == CN_TYPE_Q5_0 ? 6 : 8;
    const uint8x16_t v = vld1q_u8(blk + qs);
    uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(v, 4);
    if (type == CN_TYPE_Q5_0 || type == CN_TYPE_Q5_1) {
        const uint8_t *qh = blk + qs - 4;
        const uint8x16_t bit = vld1q_u8(k_bit), b4 = vdupq_n_u8(0x10);
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit), b4));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit), b4));
    }
    const int8x16_t off = vdupq_n_s8(type == CN_TYPE_Q4_0 ? 8 : type == CN_TYPE_Q5_0 ? 16 : 0);
    c[0] = vsubq_s8(vreinterpretq_s8_u8(lo), off);
    c[1] = vsubq_s8(vreinterpretq_s8_u8(hi), off);
}

/* Tokens t0 .. t0+T-1 against the 4 rows of R; ref: sum += (float)idot * (d * da),
 * plus m * s for the _1 types (their Q8_1 activations carry s = da * sum(qs)). */
INL void tile32(const uint32_t type, const int T, const cn_matmul_args *a, const rows4 *R, int64_t t0) {
    const size_t bb = blk32_bytes(type);
    const bool q81 = type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1;
    float32x4_t acc[TT]; /* acc[t] lane r: y[t0 + t][row0 + r] */
    for (int t = 0; t < T; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < a->k / 32; b++) {
        const size_t off = (size_t)b * bb;
        int8x16_t c[4][2]; /* (row, half of the block) */
        for (int r = 0; r < 4; r++) decode32(type, R->rp[r] + off, c[r]);
        const float32x4_t d = f16_rows(R, off), m = q81 ? f16_rows(R, off + 2) : vdupq_n_f32(0.0f);
        for (int t = 0; t < T; t++) {
            const int8_t *aq;
            float da, sa = 0.0f;
            if (q81) {
                const cn_block_q8_1 *ab = (const cn_block_q8_1 *)act_row(a, t0 + t) + b;
                aq = ab->qs, da = cn_ref_f16(ab->d), sa = cn_ref_f16(ab->s);
            } else {
                const cn_block_q8_0 *ab = (const cn_block_q8_0 *)act_row(a, t0 + t) + b;
                aq = ab->qs, da = cn_ref_f16(ab->d);
            }
            const int8x16_t a0 = vld1q_s8(aq), a1 = vld1q_s8(aq + 16);
            int32x4_t p[4];
            for (int r = 0; r < 4; r++) p[r] = vaddq_s32(dot16(c[r][0], a0), dot16(c[r][1], a1));
            if (q81) acc[t] = vfmaq_f32(acc[t], m, vdupq_n_f32(sa));
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(fold4(p)), vmulq_f32(d, vdupq_n_f32(da)));
        }
    }
    for (int t = 0; t < T; t++) store_rows(a, R, t0 + t, acc[t]);
}

/* ---------------------------------------------------------------- Q4_K, Q5_K */

/* The 6-bit scale and min of sub-block j (of 8) from the 12 packed bytes, as ref. */
static inline void k4_scale_min(int j, const uint8_t *s, int32_t *sc, int16_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = (int16_t)(s[j + 4] & 63);
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (int16_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* ref: sum_q = sum_j sc_j * idot_j, sum_m = sum_j m_j * (bsums[2j] + bsums[2j+1]) (exact
 * integers), then sum += (dw * ad) * sum_q - (dminw * ad) * sum_m. */
INL void tile_q45k(const bool five, const int T, const cn_matmul_args *a, const rows4 *R, int64_t t0) {
    const size_t bb = five ? sizeof(cn_block_q5_K) : sizeof(cn_block_q4_K), qs_off = five ? 48 : 16;
    float32x4_t acc[TT];
    for (int t = 0; t < T; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < a->k / CN_QK_K; b++) {
        const size_t off = (size_t)b * bb;
        int32_t sc[4][8];
        int16x8_t mn[4];
        for (int r = 0; r < 4; r++) {
            int16_t m[8];
            for (int j = 0; j < 8; j++) k4_scale_min(j, R->rp[r] + off + 4, &sc[r][j], &m[j]);
            mn[r] = vld1q_s16(m);
        }
        int32x4_t sq[TT][4]; /* (token, row): lanes summing to sum_q */
        for (int t = 0; t < T; t++)
            for (int r = 0; r < 4; r++) sq[t][r] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) { /* sub-block j: nibbles of qs[32 (j/2) ..], low for even j */
            int8x16_t c[4][2];
            for (int r = 0; r < 4; r++) {
                const uint8_t *qs = R->rp[r] + off + qs_off + 32 * (j / 2);
                uint8x16_t lo = vld1q_u8(qs), hi = vld1q_u8(qs + 16);
                if (j % 2) lo = vshrq_n_u8(lo, 4), hi = vshrq_n_u8(hi, 4);
                else lo = vandq_u8(lo, vdupq_n_u8(0x0F)), hi = vandq_u8(hi, vdupq_n_u8(0x0F));
                if (five) { /* bit 4: bit j of qh[l] */
                    const uint8_t *qh = R->rp[r] + off + 16;
                    const uint8x16_t bj = vdupq_n_u8((uint8_t)(1u << j)), b4 = vdupq_n_u8(0x10);
                    lo = vorrq_u8(lo, vandq_u8(vtstq_u8(vld1q_u8(qh), bj), b4));
                    hi = vorrq_u8(hi, vandq_u8(vtstq_u8(vld1q_u8(qh + 16), bj), b4));
                }
                c[r][0] = vreinterpretq_s8_u8(lo);
                c[r][1] = vreinterpretq_s8_u8(hi);
            }
            for (int t = 0; t < T; t++) {
                const int8_t *aq = ((const cn_block_q8_K *)act_row(a, t0 + t))[b].qs + 32 * j;
                const int8x16_t a0 = vld1q_s8(aq), a1 = vld1q_s8(aq + 16);
                for (int r = 0; r < 4; r++)
                    sq[t][r] = vmlaq_n_s32(sq[t][r], vaddq_s32(dot16(c[r][0], a0), dot16(c[r][1], a1)), sc[r][j]);
            }
        }
        const float32x4_t dw = f16_rows(R, off), dmw = f16_rows(R, off + 2);
        for (int t = 0; t < T; t++) {
            const cn_block_q8_K *ab = (const cn_block_q8_K *)act_row(a, t0 + t) + b;
            const int16x8_t bs = vpaddq_s16(vld1q_s16(ab->bsums), vld1q_s16(ab->bsums + 8)); /* lane j: pair j */
            int32x4_t pm[4];
            for (int r = 0; r < 4; r++)
                pm[r] = vmlal_high_s16(vmull_s16(vget_low_s16(mn[r]), vget_low_s16(bs)), mn[r], bs);
            const float32x4_t ad = vdupq_n_f32(ab->d);
            const float32x4_t d = vmulq_f32(dw, ad), dmin = vmulq_f32(dmw, ad);
            acc[t] = vaddq_f32(acc[t], vsubq_f32(vmulq_f32(d, vcvtq_f32_s32(fold4(sq[t]))),
                                                 vmulq_f32(dmin, vcvtq_f32_s32(fold4(pm)))));
        }
    }
    for (int t = 0; t < T; t++) store_rows(a, R, t0 + t, acc[t]);
}

/* ---------------------------------------------------------------- Q6_K */

/* ref: codes q - 32 (q: 4 low bits from ql, 2 high from qh), sum_q = sum over the 16
 * sub-blocks of 16 of sc_j * idot_j, then sum += (dw * ad) * sum_q. */
INL void tile_q6k(const int T, const cn_matmul_args *a, const rows4 *R, int64_t t0) {
    const size_t bb = sizeof(cn_block_q6_K);
    float32x4_t acc[TT];
    for (int t = 0; t < T; t++) acc[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < a->k / CN_QK_K; b++) {
        const size_t off = (size_t)b * bb;
        int32x4_t sq[TT][4];
        for (int t = 0; t < T; t++)
            for (int r = 0; r < 4; r++) sq[t][r] = vdupq_n_s32(0);
        /* half n of 128 elements, l in [16 lh, 16 lh + 16): group g holds elements
         * 128 n + 32 g + l, i.e. sub-block 8 n + 2 g + lh */
        for (int n = 0; n < 2; n++)
            for (int lh = 0; lh < 2; lh++) {
                int8x16_t c[4][4];
                for (int r = 0; r < 4; r++) {
                    const uint8_t *w = R->rp[r] + off;
                    const uint8x16_t la = vld1q_u8(w + 64 * n + 16 * lh), lb = vld1q_u8(w + 64 * n + 32 + 16 * lh);
                    const uint8x16_t h = vld1q_u8(w + 128 + 32 * n + 16 * lh);
                    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
                    const uint8x16_t q[4] = {
                        vorrq_u8(vandq_u8(la, m4), vshlq_n_u8(vandq_u8(h, m3), 4)),
                        vorrq_u8(vandq_u8(lb, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m3), 4)),
                        vorrq_u8(vshrq_n_u8(la, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m3), 4)),
                        vorrq_u8(vshrq_n_u8(lb, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4)),
                    };
                    for (int g = 0; g < 4; g++) c[r][g] = vsubq_s8(vreinterpretq_s8_u8(q[g]), vdupq_n_s8(32));
                }
                for (int t = 0; t < T; t++) {
                    const int8_t *aq = ((const cn_block_q8_K *)act_row(a, t0 + t))[b].qs;
                    for (int g = 0; g < 4; g++) {
                        const int j = 8 * n + 2 * g + lh;
                        const int8x16_t a16 = vld1q_s8(aq + 16 * j);
                        for (int r = 0; r < 4; r++)
                            sq[t][r] = vmlaq_n_s32(sq[t][r], dot16(c[r][g], a16), (int8_t)R->rp[r][off + 192 + j]);
                    }
                }
            }
        const float32x4_t dw = f16_rows(R, off + 208);
        for (int t = 0; t < T; t++) {
            const float ad = ((const cn_block_q8_K *)act_row(a, t0 + t))[b].d;
            acc[t] = vaddq_f32(acc[t], vmulq_f32(vmulq_f32(dw, vdupq_n_f32(ad)), vcvtq_f32_s32(fold4(sq[t]))));
        }
    }
    for (int t = 0; t < T; t++) store_rows(a, R, t0 + t, acc[t]);
}

/* ---------------------------------------------------------------- driver */

/* Each tile function is specialised for a full token tile and for one token (decode);
 * other tails take the generic count. */
#define TILE_FN(NAME, CALL)                                                        \
    static void NAME(const cn_matmul_args *a, const rows4 *R, int64_t t0, int T) { \
        if (T == TT) CALL(TT);                                                     \
        else if (T == 1) CALL(1);                                                  \
        else CALL(T);                                                              \
    }
#define C_Q4_0(T) tile32(CN_TYPE_Q4_0, T, a, R, t0)
#define C_Q4_1(T) tile32(CN_TYPE_Q4_1, T, a, R, t0)
#define C_Q5_0(T) tile32(CN_TYPE_Q5_0, T, a, R, t0)
#define C_Q5_1(T) tile32(CN_TYPE_Q5_1, T, a, R, t0)
#define C_Q8_0(T) tile32(CN_TYPE_Q8_0, T, a, R, t0)
#define C_Q4_K(T) tile_q45k(false, T, a, R, t0)
#define C_Q5_K(T) tile_q45k(true, T, a, R, t0)
#define C_Q6_K(T) tile_q6k(T, a, R, t0)
TILE_FN(tile_q4_0, C_Q4_0)
TILE_FN(tile_q4_1, C_Q4_1)
TILE_FN(tile_q5_0, C_Q5_0)
TILE_FN(tile_q5_1, C_Q5_1)
TILE_FN(tile_q8_0, C_Q8_0)
TILE_FN(tile_q4_k, C_Q4_K)
TILE_FN(tile_q5_k, C_Q5_K)
TILE_FN(tile_q6_k, C_Q6_K)

typedef void (*tile_fn)(const cn_matmul_args *a, const rows4 *R, int64_t t0, int T);

static void mm_quant(tile_fn fn, const cn_matmul_args *a, int64_t i0, int64_t i1) {
    for (int64_t row0 = i0; row0 < i1; row0 += 4) {
        rows4 R = {.row0 = row0, .n = (int)CN_MIN((int64_t)4, i1 - row0)};
        for (int r = 0; r < 4; r++)
            R.rp[r] = (const uint8_t *)a->w + (size_t)(row0 + CN_MIN(r, R.n - 1)) * a->w_row_bytes;
        for (int64_t t0 = 0; t0 < a->n_tok; t0 += TT) fn(a, &R, t0, (int)CN_MIN((int64_t)TT, a->n_tok - t0));
    }
}

/* ---------------------------------------------------------------- float weights */

INL float32x4_t ld4(const uint32_t type, const void *p, int64_t i) {
    switch (type) {
    case CN_TYPE_F32: return vld1q_f32((const float *)p + i);
    case CN_TYPE_F16: return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + i)));
    default: return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p + i), 16));
    }
}

INL float ld1(const uint32_t type, const void *p, int64_t i) {
    switch (type) {
    case CN_TYPE_F32: return ((const float *)p)[i];
    case CN_TYPE_F16: return cn_ref_f16(((const uint16_t *)p)[i]);
    default: return cn_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* ref's dot_f32/f16/bf16: element i adds into lane i % 8 (lanes 0-3 in lo, 4-7 in hi),
 * the tail into lanes 0.., then ((l0+l4) + (l1+l5)) + ((l2+l6) + (l3+l7)). */
INL float dot_float(const uint32_t type, const void *w, const void *x, int64_t k) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(ld4(type, w, i), ld4(type, x, i)));
        hi = vaddq_f32(hi, vmulq_f32(ld4(type, w, i + 4), ld4(type, x, i + 4)));
    }
    if (i < k) {
        float l[8];
        vst1q_f32(l, lo);
        vst1q_f32(l + 4, hi);
        for (int64_t j = i; j < k; j++) l[j - i] += ld1(type, w, j) * ld1(type, x, j);
        lo = vld1q_f32(l);
        hi = vld1q_f32(l + 4);
    }
    const float32x4_t s = vaddq_f32(lo, hi);
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}

INL void mm_float(const uint32_t type, const cn_matmul_args *a, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        const uint8_t *w = (const uint8_t *)a->w + (size_t)i * a->w_row_bytes;
        for (int64_t t = 0; t < a->n_tok; t++) a->y[t * a->ldy + i] = dot_float(type, w, act_row(a, t), a->k);
    }
}

/* ---------------------------------------------------------------- entry */

void cn_neon_matmul(const cn_matmul_args *a, int ith, int nth) {
    int64_t i0, i1;
    cn_split(a->n_out, ith, nth, &i0, &i1);
    switch (a->w_type) {
    case CN_TYPE_F32: mm_float(CN_TYPE_F32, a, i0, i1); break;
    case CN_TYPE_F16: mm_float(CN_TYPE_F16, a, i0, i1); break;
    case CN_TYPE_BF16: mm_float(CN_TYPE_BF16, a, i0, i1); break;
    case CN_TYPE_Q4_0: mm_quant(tile_q4_0, a, i0, i1); break;
    case CN_TYPE_Q4_1: mm_quant(tile_q4_1, a, i0, i1); break;
    case CN_TYPE_Q5_0: mm_quant(tile_q5_0, a, i0, i1); break;
    case CN_TYPE_Q5_1: mm_quant(tile_q5_1, a, i0, i1); break;
    case CN_TYPE_Q8_0: mm_quant(tile_q8_0, a, i0, i1); break;
    case CN_TYPE_Q4_K: mm_quant(tile_q4_k, a, i0, i1); break;
    case CN_TYPE_Q5_K: mm_quant(tile_q5_k, a, i0, i1); break;
    case CN_TYPE_Q6_K: mm_quant(tile_q6_k, a, i0, i1); break;
    default: cn_ref_matmul(a, ith, nth); break;
    }
}
