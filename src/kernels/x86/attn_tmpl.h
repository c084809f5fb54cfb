/* attn_tmpl.h — attention over paged K/V blocks for the x86 families (compiled twice,
 * like matmul_tmpl.h). The query heads that share a KV head are computed together, so
 * each K and V row is loaded and converted once for all of them, VL positions at a time.
 *
 * The arithmetic is ref's (and llama.cpp's CPU path's): scores q·k (q rounded to f16 for
 * an F16 cache), then the exact max, e = exp(s - max), their sum in double, and weights
 * e / sum rounded to f16 before the weighted sum of V rows. An online (flash-style)
 * softmax was tried first: it skips the score buffer, but it cannot round the final
 * probabilities to f16 as llama.cpp does, and that rounding difference alone moved the
 * SmolLM2 golden logits enough to flip a greedy token; two passes over K then V (scores
 * kept in a small buffer) cost about the same here. Not bit-identical to ref: dot
 * products are summed in vector lanes with FMA and exp is a polynomial (~2 ulp), so
 * outputs differ by float rounding (tests bound it). Deterministic per (row, head): the
 * operations depend only on that row's q, position range and cache, never on the batch,
 * the thread split or which other heads are computed alongside. */

#define GMAX 4 /* query heads computed together */

/* Elements [VL i, VL i + VL) of a cached row (F32, F16, or Q8_0 block-aligned). */
CN_INLINE vf kv_vec(const uint32_t type, const uint8_t *row, int i) {
    switch (type) {
    case CN_TYPE_F32: return vf_loadu((const float *)(const void *)row + VL * i);
    case CN_TYPE_F16: return vf_load_h((const uint16_t *)(const void *)row + VL * i);
    default: {
        const cn_block_q8_0 *b = (const cn_block_q8_0 *)(const void *)row + (VL * i) / 32;
        return vf_mul(vf_load_i8(b->qs + (VL * i) % 32), vf_set1(h2f(rd_u16(&b->d))));
    }
    }
}

/* Byte offset of slot `slot`, element `first`, in a block. */
static inline int64_t kv_off(uint32_t type, int32_t kv_dim, int32_t first, int32_t slot) {
    const int64_t e = (int64_t)slot * kv_dim + first;
    switch (type) {
    case CN_TYPE_F32: return e * 4;
    case CN_TYPE_F16: return e * 2;
    default: return (e / 32) * (int64_t)sizeof(cn_block_q8_0);
    }
}

/* Heads h0 .. h0+NG-1 (one KV head) of row r; sc holds NG rows of sc_stride (>= the
 * range) floats for their scores. Positions past the range in the last VL-chunk reuse the last row with
 * weight 0, so every loop runs VL times. */
CN_INLINE void attn_heads(const uint32_t type, const int NG, const cn_attn_args *a, int32_t r, int32_t h0, float *sc,
                          int64_t sc_stride) {
    const int32_t hd = a->head_dim, nv = hd / VL;
    const int32_t first = (h0 / (a->n_head / a->n_head_kv)) * hd;
    const int32_t bt = a->block_tokens, kvd = a->kv_dim;
    const void *const *kb = a->k_blocks[r], *const *vb = a->v_blocks[r];
    const int32_t lo = a->pos_lo[r], hi = a->pos_hi[r], n_pos = hi - lo + 1;
    _Alignas(64) float q[GMAX][CN_MAX_HEAD_DIM];
    _Alignas(64) float acc[GMAX][CN_MAX_HEAD_DIM];
    _Alignas(64) float part[GMAX][VL][VL]; /* per head, per position: partial dot lanes */
    _Alignas(64) float w[GMAX][VL];        /* a chunk's weights */
    CN_UNROLL
    for (int g = 0; g < NG; g++) {
        const float *qs = a->q + ((int64_t)r * a->n_head + h0 + g) * hd;
        for (int32_t i = 0; i < nv; i++) {
            const vf x = vf_loadu(qs + VL * i);
            vf_storeu(&q[g][VL * i], type == CN_TYPE_F16 ? vf_round_h(x) : x);
            vf_storeu(&acc[g][VL * i], vf_zero());
        }
    }
    const int64_t slot_bytes = kv_off(type, kvd, 0, 1), first_off = kv_off(type, kvd, first, 0);
    const uint8_t *krow[VL], *vrow[VL];

    /* pass 1: scores, VL positions at a time */
    vf vmax[GMAX];
    CN_UNROLL
    for (int g = 0; g < NG; g++) vmax[g] = vf_set1(-INFINITY);
    int32_t blk = lo / bt, slot = lo % bt; /* positions walk blocks without dividing */
    for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
        for (int j = 0; j < n; j++) {
            krow[j] = (const uint8_t *)kb[blk] + first_off + slot * slot_bytes;
            if (++slot == bt) slot = 0, blk++;
        }
        for (int j = n; j < VL; j++) krow[j] = krow[n - 1];
        CN_UNROLL
        for (int j = 0; j < VL; j++) {
            vf s[GMAX];
            CN_UNROLL
            for (int g = 0; g < NG; g++) s[g] = vf_zero();
            for (int32_t i = 0; i < nv; i++) {
                const vf k = kv_vec(type, krow[j], i);
                CN_UNROLL
                for (int g = 0; g < NG; g++) s[g] = vf_fmadd(vf_loadu(&q[g][VL * i]), k, s[g]);
            }
            CN_UNROLL
            for (int g = 0; g < NG; g++) vf_storeu(part[g][j], s[g]);
        }
        CN_UNROLL
        for (int g = 0; g < NG; g++) {
            vf pv[VL];
            CN_UNROLL
            for (int j = 0; j < VL; j++) pv[j] = vf_loadu(part[g][j]);
            const vf x = vf_keep_n(vf_mul(vf_hsum16(pv), vf_set1(a->scale)), n, -INFINITY);
            vmax[g] = vf_max(vmax[g], x);
            vf_store_n(sc + g * sc_stride + p0, x, n);
        }
    }

    /* pass 2: e = exp(s - max), their sum in double as ref does; then inv */
    float inv[GMAX];
    CN_UNROLL
    for (int g = 0; g < NG; g++) {
        float *sg = sc + g * sc_stride;
        const vf mx = vf_set1(vf_hmax(vmax[g]));
        double sum = 0.0;
        for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
            const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
            const vf e = vf_keep_n(vf_exp(vf_sub(vf_load_n(sg + p0, n), mx)), n, 0.0f);
            vf_store_n(sg + p0, e, n);
            sum += vf_hsum_d(e);
        }
        inv[g] = (float)(1.0 / sum);
    }

    /* pass 3: weights rounded to f16 (F16 cache) as ref and llama.cpp, times V rows */
    blk = lo / bt, slot = lo % bt;
    for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
        for (int j = 0; j < n; j++) {
            vrow[j] = (const uint8_t *)vb[blk] + first_off + slot * slot_bytes;
            if (++slot == bt) slot = 0, blk++;
        }
        for (int j = n; j < VL; j++) vrow[j] = vrow[n - 1];
        CN_UNROLL
        for (int g = 0; g < NG; g++) {
            const vf x = vf_mul(vf_load_n(sc + g * sc_stride + p0, n), vf_set1(inv[g]));
            vf_storeu(w[g], type == CN_TYPE_F16 ? vf_round_h(x) : x);
        }
        for (int32_t i = 0; i < nv; i++) {
            vf v[VL];
            CN_UNROLL
            for (int j = 0; j < VL; j++) v[j] = kv_vec(type, vrow[j], i);
            CN_UNROLL
            for (int g = 0; g < NG; g++) {
                vf o = vf_loadu(&acc[g][VL * i]);
                CN_UNROLL
                for (int j = 0; j < VL; j++) o = vf_fmadd(vf_set1(w[g][j]), v[j], o);
                vf_storeu(&acc[g][VL * i], o);
            }
        }
    }
    CN_UNROLL
    for (int g = 0; g < NG; g++) {
        float *out = a->out + ((int64_t)r * a->n_head + h0 + g) * hd;
        for (int32_t i = 0; i < nv; i++) vf_storeu(out + VL * i, vf_loadu(&acc[g][VL * i]));
    }
}

/* Scores of up to GMAX heads over SMAX positions live on the stack; longer ranges take
 * one head at a time in the caller's scratch (per-head arithmetic is the same). */
#define SMAX 2048

#define ATTN_NG(T, NAME)                                                                          \
    static void NAME(const cn_attn_args *a, int32_t r, int32_t h0, int32_t ng, float *scratch) {  \
        _Alignas(64) float sc[GMAX * SMAX];                                                       \
        const int32_t n_pos = a->pos_hi[r] - a->pos_lo[r] + 1;                                    \
        if (n_pos > SMAX) {                                                                       \
            for (int32_t g = 0; g < ng; g++) attn_heads(T, 1, a, r, h0 + g, scratch, 0);          \
            return;                                                                               \
        }                                                                                         \
        for (int32_t g = 0; g < ng; g += GMAX) {                                                  \
            const int32_t k = CN_MIN(ng - g, GMAX);                                               \
            if (k == 4) attn_heads(T, 4, a, r, h0 + g, sc, SMAX);                            \
            else if (k == 3) attn_heads(T, 3, a, r, h0 + g, sc, SMAX);                       \
            else if (k == 2) attn_heads(T, 2, a, r, h0 + g, sc, SMAX);                       \
            else attn_heads(T, 1, a, r, h0 + g, sc, SMAX);                                   \
        }                                                                                         \
    }
ATTN_NG(CN_TYPE_F32, attn_f32)
ATTN_NG(CN_TYPE_F16, attn_f16)
ATTN_NG(CN_TYPE_Q8_0, attn_q8_0)

/* Work items are (row, group of query heads of one KV head); with few rows (decode) the
 * groups shrink so every thread gets some. Either way each head's arithmetic is the same. */
static void CN_X86_SUFFIX(attention)(const cn_attn_args *a, int ith, int nth) {
    const int32_t G = a->n_head / a->n_head_kv;
    if (a->head_dim % VL || a->head_dim > CN_MAX_HEAD_DIM || a->n_head % a->n_head_kv ||
        (a->kv_type == CN_TYPE_Q8_0 && a->head_dim % 32) ||
        (a->kv_type != CN_TYPE_F32 && a->kv_type != CN_TYPE_F16 && a->kv_type != CN_TYPE_Q8_0)) {
        cn_ref_attention(a, ith, nth);
        return;
    }
    int32_t per = CN_MIN(G, GMAX);
    while (per > 1 && (int64_t)a->n_rows * a->n_head_kv * ((G + per - 1) / per) < 2 * (int64_t)nth) per = (per + 1) / 2;
    const int32_t n_sub = (G + per - 1) / per;
    void (*fn)(const cn_attn_args *, int32_t, int32_t, int32_t, float *) =
        a->kv_type == CN_TYPE_F32 ? attn_f32 : a->kv_type == CN_TYPE_F16 ? attn_f16 : attn_q8_0;
    /* Items are dealt round-robin: under a causal mask later rows attend more positions,
     * so contiguous slices would give the last thread most of the work. */
    for (int64_t t = ith; t < (int64_t)a->n_rows * a->n_head_kv * n_sub; t += nth) {
        const int32_t r = (int32_t)(t / ((int64_t)a->n_head_kv * n_sub));
        const int32_t rest = (int32_t)(t % ((int64_t)a->n_head_kv * n_sub));
        const int32_t kvh = rest / n_sub, sub = rest % n_sub;
        const int32_t h0 = kvh * G + sub * per;
        fn(a, r, h0, CN_MIN(per, G - sub * per), a->scratch + (int64_t)ith * a->scratch_stride);
    }
}
