/* matmul.c — scalar reference of the quantized matmul, as llama.cpp's CPU backend does
 * it: each activation row is quantized once per matmul to the weight type's 8-bit
 * partner format (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants;
 * F16/BF16 weights take the activation rounded to their own type), then every block
 * is an exact integer dot scaled in float, and blocks are summed in order. The 32-element
 * formats add a block with fused multiply-adds, sum = fma(dot, d * da, sum) (after
 * sum = fma(m, s, sum) for Q4_1/Q5_1): exact products of f16 scales, one rounding per
 * term. In the SIMD kernels that is four vector operations per block and token for
 * Q4_1 (scale product, conversion, two fused multiply-adds) where separate multiplies
 * and adds took six, three where they took four for the others; those operations bound
 * the batched kernels (8-token AMX tiles 10% faster, VNNI 6-9%, measured). Float
 * weights use 8 partial sums reduced in a fixed tree. Each output element is computed by
 * one call in one fixed order: no dependence on threads or on the other rows.
 *
 * Weight block layouts are GGUF's (ggml's); fields are read with memcpy since blocks
 * of 18, 20, 22 or 210 bytes leave them unaligned. */
#include "ref.h"

#include <math.h>
#include <string.h>

#include "core/pool.h"
#include "tensor/tensor.h"

static inline uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

/* ---- activation quantizers (x86 ggml's formulas: id = 127/amax, round half even) ---- */

static void quantize_q8_0(const float *x, cn_block_q8_0 *y, int64_t k) {
    for (int64_t b = 0; b < k / CN_QK8_0; b++, x += CN_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < CN_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = cn_f32_to_f16(d);
        for (int j = 0; j < CN_QK8_0; j++) y[b].qs[j] = (int8_t)nearbyintf(x[j] * id);
    }
}

static void quantize_q8_1(const float *x, cn_block_q8_1 *y, int64_t k) {
    for (int64_t b = 0; b < k / CN_QK8_0; b++, x += CN_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < CN_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < CN_QK8_0; j++) {
            y[b].qs[j] = (int8_t)nearbyintf(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].d = cn_f32_to_f16(d);
        y[b].s = cn_f32_to_f16(d * (float)sum);
    }
}

/* Q8_K keeps the sign of the largest-magnitude value: scale -127/max. */
static void quantize_q8_K(const float *x, cn_block_q8_K *y, int64_t k) {
    for (int64_t b = 0; b < k / CN_QK_K; b++, x += CN_QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < CN_QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < CN_QK_K; j++) {
            const int v = (int)nearbyintf(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < CN_QK_K / 16; j++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[j * 16 + i];
            y[b].bsums[j] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

static void quantize_row(uint32_t act_type, const float *x, void *dst, int64_t k) {
    switch (act_type) {
    case CN_TYPE_F32: memcpy(dst, x, (size_t)k * sizeof(float)); break;
    case CN_TYPE_F16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < k; i++) h[i] = cn_f32_to_f16(x[i]);
    } break;
    case CN_TYPE_BF16: {
        uint16_t *h = dst;
        for (int64_t i = 0; i < k; i++) h[i] = cn_f32_to_bf16(x[i]);
    } break;
    case CN_TYPE_Q8_0: quantize_q8_0(x, dst, k); break;
    case CN_TYPE_Q8_1: quantize_q8_1(x, dst, k); break;
    case CN_TYPE_Q8_K: quantize_q8_K(x, dst, k); break;
    default: break;
    }
}

void cn_ref_quantize_rows(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst, size_t dst_row_bytes,
                          int ith, int nth) {
    int64_t r0, r1;
    cn_split(n_rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) quantize_row(act_type, x + r * k, (uint8_t *)dst + (size_t)r * dst_row_bytes, k);
}

/* ---- float rows ---- */

#define LANES 8
static float reduce_lanes(const float *acc) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_f32(const float *w, const float *x, int64_t k) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= k; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += w[i + l] * x[i + l];
    for (; i < k; i++) acc[i % LANES] += w[i] * x[i];
    return reduce_lanes(acc);
}

static float dot_f16(const uint16_t *w, const uint16_t *x, int64_t k) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= k; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += cn_ref_f16(w[i + l]) * cn_ref_f16(x[i + l]);
    for (; i < k; i++) acc[i % LANES] += cn_ref_f16(w[i]) * cn_ref_f16(x[i]);
    return reduce_lanes(acc);
}

static inline float bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float dot_bf16(const uint16_t *w, const uint16_t *x, int64_t k) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= k; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += bf16(w[i + l]) * bf16(x[i + l]);
    for (; i < k; i++) acc[i % LANES] += bf16(w[i]) * bf16(x[i]);
    return reduce_lanes(acc);
}

/* ---- 32-element blocks against Q8_0 / Q8_1 ---- */

static float dot_q4_0(const uint8_t *w, const cn_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < nb; b++, w += 18) {
        const uint8_t *qs = w + 2;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((qs[j] & 0x0F) - 8);
            q[j + 16] = (int8_t)((qs[j] >> 4) - 8);
        }
        sum = fmaf((float)idot(q, a[b].qs, 32), cn_ref_f16(rd16(w)) * cn_ref_f16(a[b].d), sum);
    }
    return sum;
}

static float dot_q4_1(const uint8_t *w, const cn_block_q8_1 *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < nb; b++, w += 20) {
        const uint8_t *qs = w + 4;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(qs[j] & 0x0F);
            q[j + 16] = (int8_t)(qs[j] >> 4);
        }
        const float d = cn_ref_f16(rd16(w)), m = cn_ref_f16(rd16(w + 2));
        sum = fmaf((float)idot(q, a[b].qs, 32), d * cn_ref_f16(a[b].d), fmaf(m, cn_ref_f16(a[b].s), sum));
    }
    return sum;
}

/* g_bit16[b] holds, in byte i, 16 if bit i of b is set: spreads 8 fifth bits at once. */
static uint64_t g_bit16[256];
void cn_ref_matmul_init(void) {
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            if (b >> i & 1) v |= (uint64_t)16 << (8 * i);
        g_bit16[b] = v;
    }
}

/* Q5 block: element j (< 16) is the low nibble of qs[j] plus bit j of qh as 16, element
 * j + 16 the high nibble plus bit j + 16. */
static void unpack_q5(const uint8_t *qs, const uint8_t *qh, int offset, int8_t *q) {
    uint8_t hb[32];
    for (int i = 0; i < 4; i++) memcpy(hb + 8 * i, &g_bit16[qh[i]], 8);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0F) | hb[j]) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | hb[j + 16]) - offset);
    }
}

static float dot_q5_0(const uint8_t *w, const cn_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < nb; b++, w += 22) {
        unpack_q5(w + 6, w + 2, 16, q);
        sum = fmaf((float)idot(q, a[b].qs, 32), cn_ref_f16(rd16(w)) * cn_ref_f16(a[b].d), sum);
    }
    return sum;
}

static float dot_q5_1(const uint8_t *w, const cn_block_q8_1 *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < nb; b++, w += 24) {
        unpack_q5(w + 8, w + 4, 0, q);
        const float d = cn_ref_f16(rd16(w)), m = cn_ref_f16(rd16(w + 2));
        sum = fmaf((float)idot(q, a[b].qs, 32), d * cn_ref_f16(a[b].d), fmaf(m, cn_ref_f16(a[b].s), sum));
    }
    return sum;
}

static float dot_q8_0(const uint8_t *w, const cn_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[32];
    for (int64_t b = 0; b < nb; b++, w += 34) {
        memcpy(q, w + 2, 32);
        sum = fmaf((float)idot(q, a[b].qs, 32), cn_ref_f16(rd16(w)) * cn_ref_f16(a[b].d), sum);
    }
    return sum;
}

/* ---- 256-element super-blocks against Q8_K ---- */

/* The 6-bit scale and min of sub-block j (of 8) packed in 12 bytes. */
static void scale_min_k4(int j, const uint8_t *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K (144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176: d, dmin, scales[12],
 * qh[32], qs[128]); x = d*sc*q - dmin*m per 32-element sub-block. The min term uses the
 * activation's 16-element sums, so the whole super-block costs two float terms. */
static float dot_q45_k(const uint8_t *w, const cn_block_q8_K *a, int64_t nb, bool five) {
    const size_t bytes = five ? 176 : 144;
    float sum = 0.0f;
    int8_t q[CN_QK_K];
    for (int64_t b = 0; b < nb; b++, w += bytes) {
        const uint8_t *scales = w + 4;
        const uint8_t *qh = w + 16;
        const uint8_t *qs = w + (five ? 48 : 16);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = (int8_t)(qs[32 * c + l] & 0x0F);
                q[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
            }
        if (five)
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) {
                    q[64 * c + l] |= (int8_t)(((qh[l] >> (2 * c)) & 1) << 4);
                    q[64 * c + 32 + l] |= (int8_t)(((qh[l] >> (2 * c + 1)) & 1) << 4);
                }
        int32_t sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            scale_min_k4(j, scales, &sc, &m);
            sum_q += sc * idot(q + 32 * j, a[b].qs + 32 * j, 32);
            sum_m += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        const float d = cn_ref_f16(rd16(w)) * a[b].d;
        const float dmin = cn_ref_f16(rd16(w + 2)) * a[b].d;
        sum += d * (float)sum_q - dmin * (float)sum_m;
    }
    return sum;
}

/* Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): x = d*sc*(q-32) per 16. */
static float dot_q6_k(const uint8_t *w, const cn_block_q8_K *a, int64_t nb) {
    float sum = 0.0f;
    int8_t q[CN_QK_K];
    for (int64_t b = 0; b < nb; b++, w += 210) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        for (int n = 0; n < 2; n++) {
            const uint8_t *l4 = ql + 64 * n, *h2 = qh + 32 * n;
            int8_t *o = q + 128 * n;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((l4[l] & 0x0F) | (((h2[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((l4[l + 32] & 0x0F) | (((h2[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((l4[l] >> 4) | (((h2[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((l4[l + 32] >> 4) | (((h2[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int32_t sum_q = 0;
        for (int j = 0; j < 16; j++) sum_q += sc[j] * idot(q + 16 * j, a[b].qs + 16 * j, 16);
        sum += (cn_ref_f16(rd16(w + 208)) * a[b].d) * (float)sum_q;
    }
    return sum;
}

float cn_ref_vec_dot(uint32_t w_type, const void *w, const void *xq, int64_t k) {
    switch (w_type) {
    case CN_TYPE_F32: return dot_f32(w, xq, k);
    case CN_TYPE_F16: return dot_f16(w, xq, k);
    case CN_TYPE_BF16: return dot_bf16(w, xq, k);
    case CN_TYPE_Q4_0: return dot_q4_0(w, xq, k / 32);
    case CN_TYPE_Q4_1: return dot_q4_1(w, xq, k / 32);
    case CN_TYPE_Q5_0: return dot_q5_0(w, xq, k / 32);
    case CN_TYPE_Q5_1: return dot_q5_1(w, xq, k / 32);
    case CN_TYPE_Q8_0: return dot_q8_0(w, xq, k / 32);
    case CN_TYPE_Q4_K: return dot_q45_k(w, xq, k / 256, false);
    case CN_TYPE_Q5_K: return dot_q45_k(w, xq, k / 256, true);
    case CN_TYPE_Q6_K: return dot_q6_k(w, xq, k / 256);
    default: return NAN;
    }
}

void cn_ref_matmul(const cn_matmul_args *a, int ith, int nth) {
    int64_t i0, i1;
    cn_split(a->n_out, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const uint8_t *wrow = (const uint8_t *)a->w + (size_t)i * a->w_row_bytes;
        for (int64_t t = 0; t < a->n_tok; t++)
            a->y[t * a->ldy + i] = cn_ref_vec_dot(a->w_type, wrow, (const uint8_t *)a->xq + (size_t)t * a->xq_row_bytes,
                                                  a->k);
    }
}
