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

/* Each 16-token block's rows lie elsewhere in the pool, where the hardware prefetchers
 * do not follow, so pass 1 of both kernels below prefetches the K rows KV_PF positions
 * ahead and the V rows of its chunk, which pass 3 then finds in cache. Measured on
 * SmolLM2 shapes, 30 layers, one thread: 8 sequences of 1000 positions 39 -> 23 ms a
 * step; `cinder bench --parallel 8 -n 128` 537-556 -> 612-615 tok/s. */
#define KV_PF 32

/* A walk over a sequence's positions in order, block by block, without dividing (K and
 * V share block numbers, so one walk serves both lists). */
typedef struct {
    int32_t blk, slot, pos;
} kv_walk;

static inline kv_walk kv_walk_at(int32_t pos, int32_t bt) { return (kv_walk){pos / bt, pos % bt, pos}; }

/* The row at the walk's position in `blocks` (at byte `off` of its slot). */
CN_INLINE const uint8_t *kv_row(const void *const *blocks, const kv_walk *w, int64_t off, int64_t slot_bytes) {
    return (const uint8_t *)blocks[w->blk] + off + w->slot * slot_bytes;
}

CN_INLINE void kv_step(kv_walk *w, int32_t bt) {
    if (++w->slot == bt) w->slot = 0, w->blk++;
    w->pos++;
}

/* Prefetches into L1 the n bytes at p. */
CN_INLINE void prefetch_row(const uint8_t *p, int64_t n) {
    for (uintptr_t x = (uintptr_t)p & ~(uintptr_t)63; x < (uintptr_t)p + (uintptr_t)n; x += 64)
        _mm_prefetch((const char *)x, _MM_HINT_T0);
}

/* The rows of one chunk's positions (from the walk's, n of them) in kb, and V's rows
 * for the same positions prefetched; the walk steps past them. `ahead` runs KV_PF
 * positions past the chunk (up to `end`), prefetching K's rows. */
CN_INLINE void kv_chunk(const void *const *kb, const void *const *vb, kv_walk *w, kv_walk *ahead, int n, int32_t end,
                        int32_t bt, int64_t off, int64_t slot_bytes, int64_t row_bytes, const uint8_t **row) {
    for (const int32_t to = CN_MIN(end, w->pos + n + KV_PF); ahead->pos < to; kv_step(ahead, bt))
        prefetch_row(kv_row(kb, ahead, off, slot_bytes), row_bytes);
    for (int j = 0; j < n; j++, kv_step(w, bt)) {
        row[j] = kv_row(kb, w, off, slot_bytes);
        prefetch_row(kv_row(vb, w, off, slot_bytes), row_bytes);
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
    const int64_t row_bytes = kv_off(type, kvd, hd, 0); /* one head's part of a position */
    kv_walk walk = kv_walk_at(lo, bt), ahead = walk;
    for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
        kv_chunk(kb, vb, &walk, &ahead, n, lo + n_pos, bt, first_off, slot_bytes, row_bytes, krow);
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
    walk = kv_walk_at(lo, bt);
    for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
        for (int j = 0; j < n; j++) {
            vrow[j] = kv_row(vb, &walk, first_off, slot_bytes);
            kv_step(&walk, bt);
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

/* Scores of up to GMAX heads over SMAX positions live on the stack; longer ranges keep
 * them in the caller's scratch (per-head arithmetic is the same). */
#define SMAX 2048

#define ATTN_NG(T, NAME)                                                                         \
    static void NAME(const cn_attn_args *a, int32_t r, int32_t h0, int32_t ng, float *scratch) { \
        _Alignas(64) float sc[GMAX * SMAX];                                                      \
        const int32_t n_pos = a->pos_hi[r] - a->pos_lo[r] + 1;                                   \
        float *buf = sc;                                                                         \
        int64_t st = SMAX;                                                                       \
        int32_t per = GMAX;                                                                      \
        if (n_pos > SMAX) {                                                                      \
            buf = scratch;                                                                       \
            st = (int64_t)n_pos + VL;                                                            \
            per = (int32_t)CN_MAX(1, CN_MIN((int64_t)GMAX, a->scratch_stride / st));             \
        }                                                                                        \
        for (int32_t g = 0; g < ng; g += per) {                                                  \
            const int32_t k = CN_MIN(ng - g, per);                                               \
            if (k == 4) attn_heads(T, 4, a, r, h0 + g, buf, st);                                 \
            else if (k == 3) attn_heads(T, 3, a, r, h0 + g, buf, st);                            \
            else if (k == 2) attn_heads(T, 2, a, r, h0 + g, buf, st);                            \
            else attn_heads(T, 1, a, r, h0 + g, buf, st);                                        \
        }                                                                                        \
    }
ATTN_NG(CN_TYPE_Q8_0, attn_q8_0)

/* ---- F16 and F32 caches: K read transposed (one lane per position), tiles of rows ----
 *
 * Up to QRMAX consecutive rows of one sequence (prefill) share each transposed K chunk
 * and each converted V row. A row's arithmetic is the same in a tile of one (decode) as
 * in a tile of four: its scores are lane-wise d-ordered FMA chains, its softmax runs
 * over its own range in chunks from its own first position, and its V sum adds every
 * position in order, positions outside its range with weight exactly 0. */
#define QRMAX (VL == 16 ? 4 : 2)
#define TSMAX 1024 /* positions per row whose scores fit the stack buffer */

/* Dims [d0, d0 + 8) (F16) or [d0, d0 + 4) (F32) of VL positions' K rows, lane = position. */
CN_INLINE void k_cols(const uint32_t type, const uint8_t *const *krow, size_t off, vf *kt) {
    vi v[4];
    vi_load_t4(krow, off, v);
    CN_UNROLL
    for (int c = 0; c < 4; c++) {
        if (type == CN_TYPE_F16) {
            kt[2 * c] = vf_h2f_lo(v[c]);
            kt[2 * c + 1] = vf_h2f_hi(v[c]);
        } else {
            kt[c] = vf_from_bits(v[c]);
        }
    }
}

/* Rows r0 .. r0+QR-1 (sharing their block lists), heads h0 .. h0+NG-1 of one KV head.
 * sc: QR * NG rows of sc_stride floats; row (r, g) keeps position p's score at
 * [pad + p - lo_r] (pad >= VL - 1 when rows may start at different positions). */
CN_INLINE void attn_tile(const uint32_t type, const int QR, const int NG, const cn_attn_args *a, int32_t r0, int32_t h0,
                         float *sc, int64_t sc_stride, int pad) {
    const int32_t hd = a->head_dim, nv = hd / VL, DG = type == CN_TYPE_F16 ? 8 : 4;
    const size_t esz = type == CN_TYPE_F16 ? 2 : 4;
    const int32_t first = (h0 / (a->n_head / a->n_head_kv)) * hd;
    const int32_t bt = a->block_tokens, kvd = a->kv_dim;
    const void *const *kb = a->k_blocks[r0], *const *vb = a->v_blocks[r0];
    _Alignas(64) float q[QRMAX][GMAX][CN_MAX_HEAD_DIM];
    _Alignas(64) float acc[QRMAX][GMAX][CN_MAX_HEAD_DIM];
    _Alignas(64) float w[QRMAX][GMAX][VL];
    int32_t lo[QRMAX], hi[QRMAX], plo = INT32_MAX, phi = -1;
    vf vmax[QRMAX][GMAX];
    CN_UNROLL
    for (int r = 0; r < QR; r++) {
        lo[r] = a->pos_lo[r0 + r];
        hi[r] = a->pos_hi[r0 + r];
        plo = CN_MIN(plo, lo[r]);
        phi = CN_MAX(phi, hi[r]);
        CN_UNROLL
        for (int g = 0; g < NG; g++) {
            const float *qs = a->q + ((int64_t)(r0 + r) * a->n_head + h0 + g) * hd;
            for (int32_t i = 0; i < nv; i++) {
                const vf x = vf_loadu(qs + VL * i);
                vf_storeu(&q[r][g][VL * i], type == CN_TYPE_F16 ? vf_round_h(x) : x);
                vf_storeu(&acc[r][g][VL * i], vf_zero());
            }
            vmax[r][g] = vf_set1(-INFINITY);
        }
    }
    const int64_t slot_bytes = (int64_t)kvd * (int64_t)esz, first_off = (int64_t)first * (int64_t)esz;
    const uint8_t *row[VL];
    /* clang-format off */
#define SC(r, g) (sc + ((r) * NG + (g)) * sc_stride + pad)
    /* clang-format on */

    /* pass 1: scores */
    const int64_t row_bytes = (int64_t)hd * (int64_t)esz; /* one head's part of a position */
    kv_walk walk = kv_walk_at(plo, bt), ahead = walk;
    for (int32_t p0 = plo; p0 <= phi; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, phi - p0 + 1);
        kv_chunk(kb, vb, &walk, &ahead, n, phi + 1, bt, first_off, slot_bytes, row_bytes, row);
        for (int j = n; j < VL; j++) row[j] = row[n - 1];
        vf s[QRMAX][GMAX];
        CN_UNROLL
        for (int r = 0; r < QR; r++) {
            CN_UNROLL
            for (int g = 0; g < NG; g++) s[r][g] = vf_zero();
        }
        for (int32_t d0 = 0; d0 < hd; d0 += DG) {
            vf kt[8];
            k_cols(type, row, (size_t)d0 * esz, kt);
            CN_UNROLL
            for (int e = 0; e < 8; e++) {
                if (type != CN_TYPE_F16 && e >= 4) break;
                CN_UNROLL
                for (int r = 0; r < QR; r++) {
                    CN_UNROLL
                    for (int g = 0; g < NG; g++) s[r][g] = vf_fmadd(vf_set1(q[r][g][d0 + e]), kt[e], s[r][g]);
                }
            }
        }
        CN_UNROLL
        for (int r = 0; r < QR; r++) {
            const int from = lo[r] - p0, to = CN_MIN(hi[r] - p0 + 1, n);
            if (to <= CN_MAX(from, 0)) continue;
            CN_UNROLL
            for (int g = 0; g < NG; g++) {
                const vf x = vf_mul(s[r][g], vf_set1(a->scale));
                vf_store_range(SC(r, g) + (p0 - lo[r]), x, from, to);
                vmax[r][g] = vf_max(vmax[r][g], vf_keep_range(x, from, to, -INFINITY));
            }
        }
    }

    /* pass 2, per row and head over its own range: e = exp(s - max), sum in double */
    float inv[QRMAX][GMAX];
    CN_UNROLL
    for (int r = 0; r < QR; r++) {
        const int32_t n_pos = hi[r] - lo[r] + 1;
        CN_UNROLL
        for (int g = 0; g < NG; g++) {
            float *sg = SC(r, g);
            const vf mx = vf_set1(vf_hmax(vmax[r][g]));
            double sum = 0.0;
            for (int32_t p0 = 0; p0 < n_pos; p0 += VL) {
                const int n = (int)CN_MIN((int32_t)VL, n_pos - p0);
                const vf e = vf_keep_n(vf_exp(vf_sub(vf_load_n(sg + p0, n), mx)), n, 0.0f);
                vf_store_n(sg + p0, e, n);
                sum += vf_hsum_d(e);
            }
            inv[r][g] = (float)(1.0 / sum);
        }
    }

    /* pass 3: weights (rounded to f16 for an F16 cache) times V rows, in position order */
    walk = kv_walk_at(plo, bt);
    for (int32_t p0 = plo; p0 <= phi; p0 += VL) {
        const int n = (int)CN_MIN((int32_t)VL, phi - p0 + 1);
        for (int j = 0; j < n; j++) {
            row[j] = kv_row(vb, &walk, first_off, slot_bytes);
            kv_step(&walk, bt);
        }
        for (int j = n; j < VL; j++) row[j] = row[n - 1];
        CN_UNROLL
        for (int r = 0; r < QR; r++) {
            const int from = lo[r] - p0, to = CN_MIN(hi[r] - p0 + 1, n);
            CN_UNROLL
            for (int g = 0; g < NG; g++) {
                vf x = vf_zero();
                if (to > CN_MAX(from, 0))
                    x = vf_mul(vf_load_range(SC(r, g) + (p0 - lo[r]), from, to), vf_set1(inv[r][g]));
                vf_storeu(w[r][g], type == CN_TYPE_F16 ? vf_round_h(x) : x);
            }
        }
        for (int32_t i = 0; i < nv; i++) {
            vf v[VL];
            CN_UNROLL
            for (int j = 0; j < VL; j++) v[j] = kv_vec(type, row[j], i);
            CN_UNROLL
            for (int r = 0; r < QR; r++) {
                CN_UNROLL
                for (int g = 0; g < NG; g++) {
                    vf o = vf_loadu(&acc[r][g][VL * i]);
                    CN_UNROLL
                    for (int j = 0; j < VL; j++) o = vf_fmadd(vf_set1(w[r][g][j]), v[j], o);
                    vf_storeu(&acc[r][g][VL * i], o);
                }
            }
        }
    }
#undef SC
    CN_UNROLL
    for (int r = 0; r < QR; r++) {
        CN_UNROLL
        for (int g = 0; g < NG; g++) {
            float *out = a->out + ((int64_t)(r0 + r) * a->n_head + h0 + g) * hd;
            for (int32_t i = 0; i < nv; i++) vf_storeu(out + VL * i, vf_loadu(&acc[r][g][VL * i]));
        }
    }
}

/* A tile of qr rows (1 or QRMAX) and ng heads. Scores live on the stack for rows of up
 * to TSMAX positions, else in the caller's scratch, which holds a whole tile's (with less
 * scratch than the contract gives, rows go alone, as many heads at once as fit). Long
 * rows used to go alone and one head at a time, reading every K and V row once per row
 * and query head: a 2000-position decode step took 9.1 ms instead of 4.8, and prefill
 * attention at 2000 positions ran at 20 GMAC/s instead of 33. */
#define ATTN_TILE(T, NAME)                                                                                          \
    static void NAME(const cn_attn_args *a, int32_t r0, int32_t qr, int32_t h0, int32_t ng, float *scratch) {       \
        _Alignas(64) float sc[QRMAX * GMAX * (TSMAX + 2 * VL)];                                                     \
        float *buf = sc;                                                                                            \
        int64_t st = TSMAX + 2 * VL, span = 0;                                                                      \
        for (int32_t r = r0; r < r0 + qr; r++) span = CN_MAX(span, (int64_t)(a->pos_hi[r] - a->pos_lo[r] + 1));     \
        if (span > TSMAX) {                                                                                         \
            buf = scratch;                                                                                          \
            st = span + 2 * VL;                                                                                     \
        }                                                                                                           \
        const bool whole = qr == QRMAX && (buf == sc || a->scratch_stride >= (int64_t)QRMAX * GMAX * st);           \
        const int32_t per = whole || buf == sc ? GMAX                                                               \
                                               : (int32_t)CN_MAX(1, CN_MIN((int64_t)GMAX, a->scratch_stride / st)); \
        for (int32_t g = 0; g < ng; g += per) {                                                                     \
            const int32_t k = CN_MIN(ng - g, per);                                                                  \
            if (whole) {                                                                                            \
                if (k == 4) attn_tile(T, QRMAX, 4, a, r0, h0 + g, buf, st, VL);                                     \
                else if (k == 3) attn_tile(T, QRMAX, 3, a, r0, h0 + g, buf, st, VL);                                \
                else if (k == 2) attn_tile(T, QRMAX, 2, a, r0, h0 + g, buf, st, VL);                                \
                else attn_tile(T, QRMAX, 1, a, r0, h0 + g, buf, st, VL);                                            \
            } else {                                                                                                \
                for (int32_t r = r0; r < r0 + qr; r++) {                                                            \
                    if (k == 4) attn_tile(T, 1, 4, a, r, h0 + g, buf, st, 0);                                       \
                    else if (k == 3) attn_tile(T, 1, 3, a, r, h0 + g, buf, st, 0);                                  \
                    else if (k == 2) attn_tile(T, 1, 2, a, r, h0 + g, buf, st, 0);                                  \
                    else attn_tile(T, 1, 1, a, r, h0 + g, buf, st, 0);                                              \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }
ATTN_TILE(CN_TYPE_F32, attn_tile_f32)
ATTN_TILE(CN_TYPE_F16, attn_tile_f16)

/* One past the last row of the tile starting at row r: up to QRMAX consecutive rows
 * with the same block lists (F16/F32 caches; Q8_0 takes rows one by one). */
static inline int32_t tile_end(const cn_attn_args *a, int32_t r, bool tiled) {
    int32_t e = r + 1;
    while (tiled && e < a->n_rows && e - r < QRMAX && a->k_blocks[e] == a->k_blocks[r] &&
           a->v_blocks[e] == a->v_blocks[r])
        e++;
    return e;
}

/* Rows [r, e) (one tile), heads h0 .. h0+ng-1 of one KV head. */
static inline void attn_item(const cn_attn_args *a, int32_t r, int32_t e, int32_t h0, int32_t ng, float *scratch) {
    switch (a->kv_type) {
    case CN_TYPE_F32: attn_tile_f32(a, r, e - r, h0, ng, scratch); break;
    case CN_TYPE_F16: attn_tile_f16(a, r, e - r, h0, ng, scratch); break;
    default: attn_q8_0(a, r, h0, ng, scratch); break;
    }
}

/* Work items are (tile of rows, group of query heads of one KV head); whatever the
 * grouping, each (row, head)'s arithmetic is the same. With few tiles (decode) the
 * (tile, head) pairs are cut into contiguous runs (below); otherwise items are dealt
 * round-robin: under a causal mask later rows attend more positions, so contiguous
 * slices would give the last thread most of the work. */
static void CN_X86_SUFFIX(attention)(const cn_attn_args *a, int ith, int nth) {
    const int32_t G = a->n_head / a->n_head_kv;
    if (a->head_dim % VL || a->head_dim > CN_MAX_HEAD_DIM || a->n_head % a->n_head_kv ||
        (a->kv_type == CN_TYPE_Q8_0 && a->head_dim % 32) ||
        (a->kv_type != CN_TYPE_F32 && a->kv_type != CN_TYPE_F16 && a->kv_type != CN_TYPE_Q8_0)) {
        cn_ref_attention(a, ith, nth);
        return;
    }
    const bool tiled = a->kv_type != CN_TYPE_Q8_0;
    /* tile t covers rows [tstart(t), tstart(t + 1)): counted the same way by every thread */
    int64_t n_tiles = 0;
    for (int32_t r = 0; r < a->n_rows; r = tile_end(a, r, tiled)) n_tiles++;
    /* Few tiles (decode): the (tile, query head) pairs are cut into nth contiguous
     * runs, and a thread takes the heads of one KV head in its run together: each thread
     * then reads the K/V rows of as few KV heads as it can, and one load of a row serves
     * all its heads (a round-robin deal had every thread read every KV head; measured on
     * SmolLM2 decode at 2 threads: 7.0 -> 5.6 us per layer). */
    float *scratch = a->scratch + (int64_t)ith * a->scratch_stride;
    if (n_tiles * a->n_head_kv < 2 * (int64_t)nth) {
        int64_t i0, i1;
        cn_split(n_tiles * a->n_head, ith, nth, &i0, &i1);
        int64_t i = i0, tile = 0;
        for (int32_t r = 0; r < a->n_rows && i < i1;) {
            const int32_t e = tile_end(a, r, tiled);
            while (i < i1 && i / a->n_head == tile) {
                const int32_t h0 = (int32_t)(i % a->n_head);
                const int32_t grp_end = (h0 / G + 1) * G; /* first head of the next KV head */
                const int32_t ng = (int32_t)CN_MIN((int64_t)CN_MIN(GMAX, grp_end - h0), i1 - i);
                attn_item(a, r, e, h0, ng, scratch);
                i += ng;
            }
            tile++;
            r = e;
        }
        return;
    }
    /* a KV head's G query heads in n_sub groups of near-equal size: 6 as 3 + 3, not 4 + 2,
     * which dealt to two threads gave one of them twice the other's heads (the 1.5B's
     * prefill attention scaled 1.48x from one thread to two) */
    const int32_t n_sub = (G + GMAX - 1) / GMAX;
    const int32_t per = (G + n_sub - 1) / n_sub;
    const int64_t per_tile = (int64_t)a->n_head_kv * n_sub;
    int64_t item = 0;
    for (int32_t r = 0; r < a->n_rows;) {
        const int32_t e = tile_end(a, r, tiled);
        for (int64_t k = 0; k < per_tile; k++, item++) {
            if (item % nth != ith) continue;
            const int32_t kvh = (int32_t)(k / n_sub), sub = (int32_t)(k % n_sub);
            const int32_t h0 = kvh * G + sub * per, ng = CN_MIN(per, G - sub * per);
            attn_item(a, r, e, h0, ng, scratch);
        }
        r = e;
    }
}
