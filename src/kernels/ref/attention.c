/* attention.c — scalar reference of causal attention over paged K/V blocks, one
 * (row, head) pair at a time: scores q·k for the row's position range, softmax (max,
 * exp, sum in double), then the probability-weighted sum of V rows in position order.
 * With an F16 cache it rounds q and the probabilities to f16 as llama.cpp's CPU path
 * does (its K·Q and V·P matmuls convert the f32 side to the cache's f16). The result for
 * a pair depends only on that row's q and its sequence's cache, never on the batch. */
#include "ref.h"

#include <math.h>
#include <string.h>

#include "core/pool.h"
#include "tensor/tensor.h"

/* n values starting at element `first` of slot `slot` in a block of (block_tokens,
 * kv_dim) values of `type`. For Q8_0, first and n are multiples of 32. */
static void load_kv(const void *block, uint32_t type, int32_t kv_dim, int32_t slot, int32_t first, int32_t n,
                    float *dst) {
    const int64_t e = (int64_t)slot * kv_dim + first;
    switch (type) {
    case CN_TYPE_F32: memcpy(dst, (const float *)block + e, (size_t)n * sizeof(float)); break;
    case CN_TYPE_F16: {
        const uint16_t *h = (const uint16_t *)block + e;
        for (int32_t i = 0; i < n; i++) dst[i] = cn_ref_f16(h[i]);
    } break;
    case CN_TYPE_Q8_0: {
        const cn_block_q8_0 *b = (const cn_block_q8_0 *)block + e / CN_QK8_0;
        for (int32_t i = 0; i < n; i++) {
            const cn_block_q8_0 *bb = &b[i / CN_QK8_0];
            dst[i] = cn_ref_f16(bb->d) * (float)bb->qs[i % CN_QK8_0];
        }
    } break;
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;
    }
}

static inline float round_f16(float x) { return cn_ref_f16(cn_f32_to_f16(x)); }

void cn_ref_attention(const cn_attn_args *a, int ith, int nth) {
    const int32_t hd = a->head_dim;
    const int32_t group = a->n_head / a->n_head_kv;
    const int32_t bt = a->block_tokens;
    const bool half = a->kv_type == CN_TYPE_F16;
    float *s = a->scratch + (int64_t)ith * a->scratch_stride;
    float qv[CN_MAX_HEAD_DIM], kv[CN_MAX_HEAD_DIM], acc[CN_MAX_HEAD_DIM];

    int64_t t0, t1;
    cn_split((int64_t)a->n_rows * a->n_head, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const int32_t r = (int32_t)(t / a->n_head), h = (int32_t)(t % a->n_head);
        const int32_t first = (h / group) * hd;
        const float *q = a->q + ((int64_t)r * a->n_head + h) * hd;
        const void *const *kb = a->k_blocks[r];
        const void *const *vb = a->v_blocks[r];
        const int32_t lo = a->pos_lo[r], hi = a->pos_hi[r];
        for (int32_t d = 0; d < hd; d++) qv[d] = half ? round_f16(q[d]) : q[d];

        float max = -INFINITY;
        for (int32_t p = lo; p <= hi; p++) {
            load_kv(kb[p / bt], a->kv_type, a->kv_dim, p % bt, first, hd, kv);
            float dot = 0.0f;
            for (int32_t d = 0; d < hd; d++) dot += qv[d] * kv[d];
            s[p - lo] = dot * a->scale;
            max = s[p - lo] > max ? s[p - lo] : max;
        }
        double sum = 0.0;
        for (int32_t p = lo; p <= hi; p++) {
            s[p - lo] = expf(s[p - lo] - max);
            sum += (double)s[p - lo];
        }
        const float inv = (float)(1.0 / sum);

        memset(acc, 0, (size_t)hd * sizeof(float));
        for (int32_t p = lo; p <= hi; p++) {
            const float w = half ? round_f16(s[p - lo] * inv) : s[p - lo] * inv;
            load_kv(vb[p / bt], a->kv_type, a->kv_dim, p % bt, first, hd, kv);
            for (int32_t d = 0; d < hd; d++) acc[d] += w * kv[d];
        }
        memcpy(a->out + ((int64_t)r * a->n_head + h) * hd, acc, (size_t)hd * sizeof(float));
    }
}
