/* matmul_tmpl.h — the quantized matmul and the activation quantizers of the x86
 * families, written once over simd.h and compiled twice (kernels_avx2.c: 8 lanes,
 * kernels_avx512.c: 16 lanes + VNNI). Pure kernels: pointers, sizes, (ith, nth).
 *
 * Shape of the matmul: output rows are taken VL at a time (one row per lane, see
 * simd.h) and tokens TMAX at a time; for each weight block the VL rows are decoded once
 * into 8-bit codes (u8, so vpdpbusd applies) and dotted with each token's activation
 * block, so a weight block is reused across the token tile from registers (the
 * register-tiled GEMM of prefill; decode is the same loop with one token). Offsets of
 * the unsigned codes (Q4_0's 8, Q5_0's 16, Q8_0's 128, Q6_K's 32) come back out
 * exactly through the activation block sums.
 *
 * Results are bit-identical to the scalar reference (kernels/ref/matmul.c): per block
 * the integer dot is exact, and each lane then does the reference's float operations
 * in the reference's order: a fused multiply-add exactly where the reference calls fmaf
 * (vf_fmadd), and none anywhere else (this file must not be compiled with FP
 * contraction, which -std=c11 turns off in GCC; clang gets the pragma below). So an
 * output element does not depend on the tile it fell in, on n_tok, or on the thread
 * split.
 *
 * The including file defines CN_X86_AVX512 and CN_X86_SUFFIX(name), and CN_X86_AMX for
 * the AMX family (kernels_amx.c: the AVX-512 code plus AMX tiles for token tiles). */
#ifndef CN_X86_SUFFIX
#error "define CN_X86_SUFFIX before including matmul_tmpl.h"
#endif

#include "simd.h"

#ifndef CN_X86_AMX
#define CN_X86_AMX 0
#endif

#include <math.h>

#include "core/pool.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tensor/tensor.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Tokens per register tile (tails take 8, 4, 1), and legacy blocks per K-chunk of precomputed activation
 * terms (8192 elements; longer rows keep their partial sums in y between chunks, which
 * changes no bit: a float stored and reloaded is the same float). */
#define TMAX (VL == 16 ? 16 : 4)
/* The K-quants' widest token tile: on AVX2 8 (tile_q45k's half sub-blocks), so that a
 * decoded code vector serves twice the tokens of the 32-element formats' tiles. Packed
 * weights take at most 8 on every family (mmk says why). */
#define TKMAX (VL == 16 ? 16 : 8)
#define CN_UNROLL _Pragma("GCC unroll 16")
#define KCH 256

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* F16C's conversion: round to nearest even, the same bits as cn_f32_to_f16. */
static inline uint16_t f2h(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline uint16_t rd_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* ---------------------------------------------------------------- quantize_rows */

/* max |x| over n (multiple of 8) floats. */
static inline float amax8(const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* q[i] = round-half-even(x[i] * s) for 8 values, as int32. */
static inline __m256i round8(const float *x, float s) {
    return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(s)));
}

/* 32 int32 (in 4 vectors, values in [-128, 127]) to 32 int8 in order. */
static inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i p = _mm256_packs_epi16(ab, cd);
    /* packs interleave 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline int32_t hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Sum of 32 int8. */
static inline int32_t sum_i8x32(const int8_t *q) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)q),
                                       _mm256_set1_epi8((char)0x80));
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256()); /* sums of (q + 128) */
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    return (int32_t)_mm_cvtsi128_si32(t) - 32 * 128;
}

static void q8_0_row(const float *x, cn_block_q8_0 *y, int64_t k, bool with_sum, cn_block_q8_1 *y1) {
    for (int64_t b = 0; b < k / 32; b++, x += 32) {
        const float amax = amax8(x, 32);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m256i q = pack32(round8(x, id), round8(x + 8, id), round8(x + 16, id), round8(x + 24, id));
        if (with_sum) {
            _mm256_storeu_si256((__m256i *)(void *)y1[b].qs, q);
            y1[b].d = f2h(d);
            y1[b].s = f2h(d * (float)sum_i8x32(y1[b].qs));
        } else {
            _mm256_storeu_si256((__m256i *)(void *)y[b].qs, q);
            y[b].d = f2h(d);
        }
    }
}

static void q8_K_row(const float *x, cn_block_q8_K *y, int64_t k) {
    for (int64_t b = 0; b < k / CN_QK_K; b++, x += CN_QK_K) {
        const float amax = amax8(x, CN_QK_K);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        int j = 0; /* the first element of largest magnitude gives the sign, as the reference */
        while (fabsf(x[j]) != amax) j++;
        const float iscale = -127.0f / x[j];
        const __m256i hi = _mm256_set1_epi32(127);
        for (int i = 0; i < CN_QK_K; i += 32) {
            const __m256i q = pack32(
                _mm256_min_epi32(round8(x + i, iscale), hi), _mm256_min_epi32(round8(x + i + 8, iscale), hi),
                _mm256_min_epi32(round8(x + i + 16, iscale), hi), _mm256_min_epi32(round8(x + i + 24, iscale), hi));
            _mm256_storeu_si256((__m256i *)(void *)(y[b].qs + i), q);
        }
        for (int s = 0; s < CN_QK_K / 16; s++) {
            const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(y[b].qs + 16 * s)));
            y[b].bsums[s] = (int16_t)hsum_i32x8(_mm256_madd_epi16(w, _mm256_set1_epi16(1)));
        }
        y[b].d = 1.0f / iscale;
    }
}

static void f16_row(const float *x, uint16_t *h, int64_t k) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < k; i++) h[i] = cn_f32_to_f16(x[i]);
}

/* Round to nearest even; NaN keeps its sign and top payload bits and turns quiet. */
static void bf16_row(const float *x, uint16_t *h, int64_t k) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
        const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
        const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
        const __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        r = _mm256_blendv_epi8(r, qn, nan);
        const __m256i p = _mm256_packus_epi32(r, r); /* values < 65536: exact */
        _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08)));
    }
    for (; i < k; i++) h[i] = cn_f32_to_bf16(x[i]);
}

static void CN_X86_SUFFIX(quantize_rows)(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst,
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
        case CN_TYPE_Q8_0: q8_0_row(xr, d, k, false, NULL); break;
        case CN_TYPE_Q8_1: q8_0_row(xr, NULL, k, true, d); break;
        case CN_TYPE_Q8_K: q8_K_row(xr, d, k); break;
        default: break;
        }
    }
}

/* ---------------------------------------------------------------- matmul: shared */

typedef struct {
    const cn_matmul_args *a;
    int64_t t0;      /* first token of the tile */
    int64_t b0, nbc; /* block range of this K-chunk */
    /* per token of the tile and block of the chunk (legacy formats) */
    const float *da;     /* activation scale */
    const int32_t *corr; /* offset * sum of the activation block's qs */
    const float *sa;     /* Q8_1 s */
} mm_ctx;

typedef struct {
    const uint8_t *rp[VL]; /* row pointers, the tail clamped to the last row */
    vi ridx;               /* rp[r] - rp[0], for gathers */
    int64_t row0;
    int n; /* valid rows */
} tile_rows;

static inline void tile_setup(const cn_matmul_args *a, int64_t tile, tile_rows *R) {
    R->row0 = tile * VL;
    R->n = (int)CN_MIN((int64_t)VL, a->n_out - R->row0);
    int32_t idx[VL];
    CN_UNROLL
    for (int r = 0; r < VL; r++) {
        const int64_t rr = R->row0 + CN_MIN(r, R->n - 1);
        R->rp[r] = (const uint8_t *)a->w + (size_t)rr * a->w_row_bytes;
        idx[r] = (int32_t)((size_t)CN_MIN(r, R->n - 1) * a->w_row_bytes);
    }
    memcpy(&R->ridx, idx, sizeof idx);
}

/* Decode streams the weights once, and a tile touches VL rows at once, which the
 * hardware prefetchers follow poorly: while a tile is computed, a later tile's bytes
 * (contiguous: VL whole rows) are prefetched into L2, a block's share per block step. */
typedef struct {
    const uint8_t *base; /* the next tile's first row */
    size_t step;         /* bytes per block step, 0: off */
} prefetcher;

#define PF_TILES 2 /* how many tiles ahead (measured: 2 beats 1 and 3 from DRAM) */
/* On the AVX-512 family a packed tile is one forward run that the hardware prefetchers
 * follow by themselves, and below 8 tokens (decode) the software prefetches only get in
 * their way: on Zen 4, one thread, the 151936 x 1536 head streamed Q4_K at 13-17 GB/s
 * with them and 19-23 without, Q6_K 12-14 against 17-19, and the 1.5B decoded 16.6 tok/s
 * against 26 (2026-12-05). From 8 tokens on (prefill, batched decode) they pay: 9.7
 * against 6.4 GB/s at 8. The AVX2 family keeps them, and so do weights read as stored
 * (the AMX family's K-quants); the AMX family's packed 32-element formats follow this
 * rule unmeasured on an AMX machine. */
#define PF_MIN_TOK 8
static inline prefetcher pf_setup(const cn_matmul_args *a, const tile_rows *R, int64_t n_blocks) {
    prefetcher p = {R->rp[0] + (size_t)PF_TILES * VL * a->w_row_bytes, 0};
    if (CN_X86_AVX512 && a->w_packed && a->n_tok < PF_MIN_TOK) return p; /* see PF_MIN_TOK */
    if (R->row0 + PF_TILES * VL < a->n_out && n_blocks > 0)
        p.step = ((size_t)VL * a->w_row_bytes + (size_t)n_blocks - 1) / (size_t)n_blocks;
    return p;
}

CN_INLINE void pf_block(const prefetcher *p, int64_t b) {
    const uint8_t *q = p->base + (size_t)b * p->step, *end = q + p->step;
    _Pragma("GCC unroll 4") for (; q < end; q += 64) _mm_prefetch((const char *)q, _MM_HINT_T1);
}

CN_INLINE const uint8_t *act_row(const cn_matmul_args *a, int64_t t) {
    return (const uint8_t *)a->xq + (size_t)t * a->xq_row_bytes;
}

CN_INLINE void acc_init(const mm_ctx *c, const tile_rows *R, const int T, vf *acc, bool resume) {
    CN_UNROLL
    for (int t = 0; t < T; t++)
        acc[t] = resume ? vf_load_n(c->a->y + (c->t0 + t) * c->a->ldy + R->row0, R->n) : vf_zero();
}

CN_INLINE void acc_store(const mm_ctx *c, const tile_rows *R, const int T, const vf *acc) {
    CN_UNROLL
    for (int t = 0; t < T; t++) vf_store_n(c->a->y + (c->t0 + t) * c->a->ldy + R->row0, acc[t], R->n);
}

/* ---------------------------------------------------------------- 32-element blocks */

typedef struct {
    vi w[8]; /* w[c] lane r: codes of elements 4c .. 4c+3 of row r's block */
    vf d, m; /* row scales (and Q4_1/Q5_1 offsets) as float */
} blk32;

static size_t blk32_bytes(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_0: return 18;
    case CN_TYPE_Q4_1: return 20;
    case CN_TYPE_Q5_0: return 22;
    case CN_TYPE_Q5_1: return 24;
    default: return 34; /* Q8_0 */
    }
}

/* qs[16] nibbles at off: low nibbles are elements 0..15, high nibbles 16..31. */
CN_INLINE void unpack_nibbles(const tile_rows *R, size_t off, vi *w) {
    const vi lo4 = vi_set1_8(0x0F);
    vi v[4];
    vi_load_t4(R->rp, off, v);
    CN_UNROLL
    for (int c = 0; c < 4; c++) {
        w[c] = vi_and(v[c], lo4);
        w[c + 4] = vi_and(vi_srli(v[c], 4), lo4);
    }
}

/* Bit 4 of element j is bit j of qh (one uint32 per lane). */
CN_INLINE void add_q5_bits(vi qh, vi *w) {
    CN_UNROLL
    for (int c = 0; c < 8; c++) {
        const int8_t s = (int8_t)(c / 2);
        /* clang-format off */
        const vi idx = vi_bcast128(_mm_setr_epi8(s, s, s, s, (int8_t)(4 + s), (int8_t)(4 + s), (int8_t)(4 + s), (int8_t)(4 + s),
                                                 (int8_t)(8 + s), (int8_t)(8 + s), (int8_t)(8 + s), (int8_t)(8 + s),
                                                 (int8_t)(12 + s), (int8_t)(12 + s), (int8_t)(12 + s), (int8_t)(12 + s)));
        /* clang-format on */
        const vi m = vi_set1(c % 2 ? (int32_t)0x80402010 : 0x08040201);
        w[c] = vi_or_bit4_where(w[c], vi_shuffle8(qh, idx), m);
    }
}

CN_INLINE void unpack32(const uint32_t type, const tile_rows *R, size_t off, blk32 *o) {
    const uint8_t *base = R->rp[0] + off;
    switch (type) {
    case CN_TYPE_Q4_0:
        o->d = vf_h2f_lo(vi_gather32(base, R->ridx));
        unpack_nibbles(R, off + 2, o->w);
        break;
    case CN_TYPE_Q4_1: {
        const vi h = vi_gather32(base, R->ridx);
        o->d = vf_h2f_lo(h);
        o->m = vf_h2f_hi(h);
        unpack_nibbles(R, off + 4, o->w);
    } break;
    case CN_TYPE_Q5_0:
        o->d = vf_h2f_lo(vi_gather32(base, R->ridx));
        unpack_nibbles(R, off + 6, o->w);
        add_q5_bits(vi_gather32(base + 2, R->ridx), o->w);
        break;
    case CN_TYPE_Q5_1: {
        const vi h = vi_gather32(base, R->ridx);
        o->d = vf_h2f_lo(h);
        o->m = vf_h2f_hi(h);
        unpack_nibbles(R, off + 8, o->w);
        add_q5_bits(vi_gather32(base + 4, R->ridx), o->w);
    } break;
    default: { /* Q8_0: signed codes; AVX-512 shifts them to u8 (+128) */
        o->d = vf_h2f_lo(vi_gather32(base, R->ridx));
        vi_load_t4(R->rp, off + 2, o->w);
        vi_load_t4(R->rp, off + 18, o->w + 4);
#if CN_X86_AVX512
        CN_UNROLL
        for (int c = 0; c < 8; c++) o->w[c] = vi_xor(o->w[c], vi_set1_8((int8_t)0x80));
#endif
    } break;
    }
}

/* The packed layout of the 32-element formats (pack() below): tile t of VL rows (the
 * last one padded with copies of the last row) stores its blocks in order, and block
 * b of the tile holds, lane r = row t*VL + r: d[VL] (f16), then m[VL] (f16, _1 types),
 * qh[VL] (u32, Q5 types), then the codes as the vectors the tile loop wants, dword c
 * of every row together (VL dwords each: 4 vectors of nibbles, or 8 of Q8_0 bytes).
 * Same bytes as the stored rows, so a tile's blocks are one contiguous run: decoding
 * is plain loads, with no transposes or gathers. */
typedef struct {
    size_t m, qh, qs; /* byte offsets inside a packed block of VL rows; 0: absent */
} pk_off;

static pk_off pk_layout(uint32_t type) {
    switch (type) {
    case CN_TYPE_Q4_0: return (pk_off){0, 0, 2 * VL};
    case CN_TYPE_Q4_1: return (pk_off){2 * VL, 0, 4 * VL};
    case CN_TYPE_Q5_0: return (pk_off){0, 2 * VL, 6 * VL};
    case CN_TYPE_Q5_1: return (pk_off){2 * VL, 4 * VL, 8 * VL};
    default: return (pk_off){0, 0, 2 * VL}; /* Q8_0 */
    }
}

CN_INLINE vi vi_loadu(const uint8_t *p) {
#if CN_X86_AVX512
    return _mm512_loadu_si512((const void *)p);
#else
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
#endif
}

CN_INLINE void unpack32p(const uint32_t type, const uint8_t *p, blk32 *o) {
    const pk_off L = pk_layout(type);
    const vi lo4 = vi_set1_8(0x0F);
    o->d = vf_load_h((const uint16_t *)(const void *)p);
    if (type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1) o->m = vf_load_h((const uint16_t *)(const void *)(p + L.m));
    if (type == CN_TYPE_Q8_0) {
        CN_UNROLL
        for (int c = 0; c < 8; c++) {
            o->w[c] = vi_loadu(p + L.qs + (size_t)c * 4 * VL);
#if CN_X86_AVX512
            o->w[c] = vi_xor(o->w[c], vi_set1_8((int8_t)0x80));
#endif
        }
        return;
    }
    CN_UNROLL
    for (int c = 0; c < 4; c++) {
        const vi v = vi_loadu(p + L.qs + (size_t)c * 4 * VL);
        o->w[c] = vi_and(v, lo4);
        o->w[c + 4] = vi_and(vi_srli(v, 4), lo4);
    }
    if (type == CN_TYPE_Q5_0 || type == CN_TYPE_Q5_1) add_q5_bits(vi_loadu(p + L.qh), o->w);
}

static bool pack_type(uint32_t type) {
    return type == CN_TYPE_Q4_0 || type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_0 || type == CN_TYPE_Q5_1 ||
           type == CN_TYPE_Q8_0;
}

/* The K-quants' packed layout (kq_tile, below), in every x86 family (measured on the
 * 1.5B Q4_K_M model at AVX-512: decode +6-9%, pp512 +5-10%). The AMX family's K-quant
 * code is the AVX-512 family's plus its tiles, which the tests run with software tiles
 * where there is no AMX (tests/unit/amx_emu_avx512.c). */
/* Q6_K's packed block holds its 13 groups of 4 dwords (ql 0..7, qh 8..11, scales 12) in
 * the order tile_q6k reads them (scales; then per half and pass: two ql groups and their
 * qh group), so a tile streams forward through memory, as Q4_K's does, instead of
 * jumping to the scales at the block's end and back: from DRAM the jumps cost the
 * prefetchers (measured on Zen 4, one thread: the 151936 x 1536 head 10.9 -> see
 * bench/history/one-request.md). Stored dword c is packed dword q6_dw(c); d stays last. */
static const int8_t Q6_SLOT[13] = {1, 4, 2, 5, 7, 10, 8, 11, 3, 6, 9, 12, 0};
CN_INLINE int q6_dw(int c) { return 4 * Q6_SLOT[c / 4] + c % 4; }

static bool pack_k_type(uint32_t type) { return type == CN_TYPE_Q4_K || type == CN_TYPE_Q5_K || type == CN_TYPE_Q6_K; }

static size_t CN_X86_SUFFIX(packed_size)(uint32_t type, int64_t n_out, int64_t k) {
    const int64_t bs = pack_k_type(type) ? CN_QK_K : 32;
    if (!(pack_type(type) || pack_k_type(type)) || n_out < 1 || k < bs || k % bs) return 0;
    const uint64_t rb = cn_type_row_bytes(type, k), tiles = (uint64_t)(n_out + VL - 1) / VL;
    uint64_t n;
    if (rb > (uint64_t)INT32_MAX / VL || !cn_mul_ok(tiles, (uint64_t)VL * rb, &n) || n > SIZE_MAX) return 0;
    return (size_t)n;
}

/* Row r's block s into its tile's packed block o: kq_tile's layout for the K-quants
 * (dword c of every row's block together), pk_layout's for the 32-element formats. */
static void pack_row_block(uint32_t type, const uint8_t *s, int r, uint8_t *o) {
    if (pack_k_type(type)) {
        const size_t bb = cn_type_traits_get(type)->type_size, n_dw = bb / 4;
        for (size_t c = 0; c < n_dw; c++)
            memcpy(o + (size_t)(type == CN_TYPE_Q6_K ? q6_dw((int)c) : (int)c) * 4 * VL + 4 * (size_t)r, s + 4 * c, 4);
        if (bb % 4) memcpy(o + n_dw * 4 * VL + 2 * (size_t)r, s + 4 * n_dw, 2); /* Q6_K's d */
        return;
    }
    const size_t qs_src = type == CN_TYPE_Q4_0   ? 2
                          : type == CN_TYPE_Q4_1 ? 4
                          : type == CN_TYPE_Q5_0 ? 6
                          : type == CN_TYPE_Q5_1 ? 8
                                                 : 2;
    const int n_dw = type == CN_TYPE_Q8_0 ? 8 : 4;
    const pk_off L = pk_layout(type);
    memcpy(o + 2 * r, s, 2);
    if (L.m) memcpy(o + L.m + 2 * r, s + 2, 2);
    if (L.qh) memcpy(o + L.qh + 4 * r, s + qs_src - 4, 4);
    for (int c = 0; c < n_dw; c++) memcpy(o + L.qs + (size_t)c * 4 * VL + 4 * r, s + qs_src + 4 * c, 4);
}

static void CN_X86_SUFFIX(pack)(uint32_t type, const void *w, size_t w_row_bytes, int64_t n_out, int64_t k, void *dst) {
    const cn_type_traits *tr = cn_type_traits_get(type);
    const size_t bb = tr->type_size;
    const int64_t nb = k / tr->block_size, n_tiles = (n_out + VL - 1) / VL;
    uint8_t *o = dst;
    for (int64_t t = 0; t < n_tiles; t++)
        for (int64_t b = 0; b < nb; b++, o += VL * bb)
            for (int r = 0; r < VL; r++) {
                const int64_t row = CN_MIN(t * VL + r, n_out - 1);
                pack_row_block(type, (const uint8_t *)w + (size_t)row * w_row_bytes + (size_t)b * bb, r, o);
            }
}

/* acc + this block's contribution for one token, from s: the integer dot of the block's
 * codes (as unpack32 makes them) with the token's activation codes, per lane. The float
 * steps of every path (VNNI and AMX), so they give the same bits. */
CN_INLINE vf tok32_finish(const uint32_t type, vf d, vf m, vi s, vf acc, int32_t corr, float da, float sa) {
    if (type == CN_TYPE_Q4_0 || type == CN_TYPE_Q5_0 || (CN_X86_AVX512 && type == CN_TYPE_Q8_0))
        s = vi_sub(s, vi_set1(corr));
    const vf p = vf_mul(d, vf_set1(da));
    if (type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1) acc = vf_fmadd(m, vf_set1(sa), acc);
    return vf_fmadd(vf_cvt(s), p, acc);
}

/* acc + this block's contribution for one token; aqs is the activation block's qs. */
CN_INLINE vf tok32(const uint32_t type, const blk32 *B, const int8_t *aqs, vf acc, int32_t corr, float da, float sa) {
    vi s0 = vi_zero(), s1 = vi_zero();
    CN_UNROLL
    for (int c = 0; c < 8; c += 2) {
#if !CN_X86_AVX512
        if (type == CN_TYPE_Q8_0) { /* vpmaddubsw would saturate on 255 * 127: |w| * sign(a, w) */
            s0 = vi_dp4(s0, _mm256_abs_epi8(B->w[c]), _mm256_sign_epi8(vi_bcast32(aqs + 4 * c), B->w[c]));
            s1 = vi_dp4(s1, _mm256_abs_epi8(B->w[c + 1]), _mm256_sign_epi8(vi_bcast32(aqs + 4 * c + 4), B->w[c + 1]));
            continue;
        }
#endif
        s0 = vi_dp4(s0, B->w[c], vi_bcast32(aqs + 4 * c));
        s1 = vi_dp4(s1, B->w[c + 1], vi_bcast32(aqs + 4 * c + 4));
    }
    return tok32_finish(type, B->d, B->m, vi_add(s0, s1), acc, corr, da, sa);
}

CN_INLINE void tile32(const uint32_t type, const int T, const mm_ctx *c, int64_t tile) {
    const cn_matmul_args *a = c->a;
    const size_t bb = blk32_bytes(type);
    const bool q81 = type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1;
    const size_t ab = q81 ? sizeof(cn_block_q8_1) : sizeof(cn_block_q8_0), aoff = q81 ? 4 : 2;
    tile_rows R;
    tile_setup(a, tile, &R);
    vf acc[TMAX];
    acc_init(c, &R, T, acc, c->b0 > 0);
    const uint8_t *arow[TMAX];
    CN_UNROLL
    for (int t = 0; t < T; t++) arow[t] = act_row(a, c->t0 + t) + (size_t)c->b0 * ab + aoff;
    prefetcher pf = pf_setup(a, &R, c->nbc == a->k / 32 ? c->nbc : 0);
    const uint8_t *pk = (const uint8_t *)a->w + (size_t)tile * VL * a->w_row_bytes; /* packed tile (contiguous,
                                                                                     * so pf's address fits it too) */
    for (int64_t b = 0; b < c->nbc; b++) {
        pf_block(&pf, b);
        blk32 B;
        if (a->w_packed) unpack32p(type, pk + (size_t)(c->b0 + b) * VL * bb, &B);
        else unpack32(type, &R, (size_t)(c->b0 + b) * bb, &B);
        CN_UNROLL
        for (int t = 0; t < T; t++)
            acc[t] = tok32(type, &B, (const int8_t *)(arow[t] + (size_t)b * ab), acc[t], c->corr[t * KCH + b],
                           c->da[t * KCH + b], c->sa[t * KCH + b]);
    }
    acc_store(c, &R, T, acc);
}

#if CN_X86_AMX
/* The same tile on AMX (kernels_amx.c), for token tiles of 8 or more (at 4 the VNNI loop
 * is faster, measured): per block, one tile multiply makes all T × VL integer dots.
 * A (tmm4/5) = the T activation rows' 32 codes, read in place (stride: the activation
 * row); B (tmm6/7) = the 8 code vectors unpack32 makes, which already are B's layout
 * (row c, dword r = row r's codes 4c..4c+3, the elements that A's columns 4c..4c+3
 * hold); C (tmm0..3) = the T × VL int32 dots, then tok32_finish per token, as the VNNI
 * loop does. tdpbsud: signed activation codes times unsigned weight codes, the operands
 * vpdpbusd had, so the same offsets come back out. */
typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* C tiles 0..3: T tokens × VL int32; A tiles 4, 5: T tokens × kb activation bytes; B
 * tiles 6, 7: kb / 4 rows of VL weight rows × 4 codes (kb: 32, or Q6_K's 16). */
static void amx_config(int T, int kb) {
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) {
        cfg.rows[i] = (uint8_t)T; /* C: T tokens × VL int32 */
        cfg.colsb[i] = VL * 4;
    }
    for (int i = 4; i < 6; i++) {
        cfg.rows[i] = (uint8_t)T; /* A: T tokens × kb codes */
        cfg.colsb[i] = (uint16_t)kb;
    }
    for (int i = 6; i < 8; i++) {
        cfg.rows[i] = (uint8_t)(kb / 4); /* B: kb / 4 × (VL rows × 4 codes) */
        cfg.colsb[i] = VL * 4;
    }
    /* GCC's ldtilecfg asm names only 8 bytes of its operand: without this barrier the
     * stores to rows/colsb may be dropped as dead (then every tile use traps). */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

CN_INLINE void amx_unpack(const uint32_t type, const cn_matmul_args *a, const tile_rows *R, const uint8_t *pk,
                          int64_t b, size_t bb, blk32 *B, vi *bv) {
    /* B->w's codes go to memory for the tile load; only d, m stay in B */
    if (a->w_packed) unpack32p(type, pk + (size_t)b * VL * bb, B);
    else unpack32(type, R, (size_t)b * bb, B);
    CN_UNROLL
    for (int c = 0; c < 8; c++) _mm512_store_si512((void *)&bv[c], B->w[c]);
}

/* The pipeline, one step per block s: issue block s's multiply on C tile s % 4 (A, B
 * tiles 4 + s % 2, 6 + s % 2); unpack block s + AMX_U into bv; store block s - 2's dots
 * from its C tile; finish block s - 4. Tiles are not renamed, and tile loads and vector
 * loads wait for the stores they read to commit, so every buffer and tile is reused
 * only steps after its last use (measured against a two-tile-set, one-step-apart
 * pipeline: 8-token tiles 10-15% faster, 16-token ones unchanged). */
#define AMX_U 3
#define AMX_UNPACK(b)                                                                                        \
    do {                                                                                                     \
        pf_block(&pf, (b));                                                                                  \
        if (direct) {                                                                                        \
            sd[(b) % 8] = vf_load_h((const uint16_t *)(const void *)(pk + (size_t)(c->b0 + (b)) * VL * bb)); \
        } else {                                                                                             \
            blk32 B_;                                                                                        \
            amx_unpack(type, a, &R, pk, c->b0 + (b), bb, &B_, bv[(b) % 4]);                                  \
            sd[(b) % 8] = B_.d;                                                                              \
            sm[(b) % 8] = B_.m;                                                                              \
        }                                                                                                    \
    } while (0)
#define AMX_FINISH(b)                                                                                              \
    do {                                                                                                           \
        CN_UNROLL                                                                                                  \
        for (int t = 0; t < T; t++)                                                                                \
            acc[t] = tok32_finish(type, sd[(b) % 8], sm[(b) % 8], _mm512_load_si512((const void *)cv[(b) % 4][t]), \
                                  acc[t], direct ? 0 : c->corr[t * KCH + (b)], c->da[t * KCH + (b)],               \
                                  c->sa[t * KCH + (b)]);                                                           \
    } while (0)
/* clang-format off */
#define AMX_STEP(s, TC, TA, TB, TS)                                                       \
    do {                                                                                  \
        if ((s) < n) {                                                                    \
            _tile_loadd(TB, direct ? (const void *)(pk + (size_t)(c->b0 + (s)) * VL * bb + 2 * VL) \
                                   : (const void *)bv[(s) % 4], 64);                      \
            _tile_loadd(TA, a0 + (size_t)(s) * ab, as);                                   \
            _tile_zero(TC);                                                               \
            if (direct) _tile_dpbssd(TC, TA, TB);                                         \
            else _tile_dpbsud(TC, TA, TB);                                                \
        }                                                                                 \
        if ((s) + AMX_U < n) AMX_UNPACK((s) + AMX_U);                                     \
        if ((s) >= 2 && (s) - 2 < n) _tile_stored(TS, cv[((s) - 2) % 4], VL * 4);        \
        if ((s) >= 4 && (s) - 4 < n) AMX_FINISH((s) - 4);                                 \
    } while (0)
/* clang-format on */

CN_INLINE void tile32_amx(const uint32_t type, const int T, const mm_ctx *c, int64_t tile) {
    const cn_matmul_args *a = c->a;
    const size_t bb = blk32_bytes(type);
    const bool q81 = type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1;
    const size_t ab = q81 ? sizeof(cn_block_q8_1) : sizeof(cn_block_q8_0), aoff = q81 ? 4 : 2;
    const long as = (long)a->xq_row_bytes;
    tile_rows R;
    tile_setup(a, tile, &R);
    vf acc[TMAX];
    acc_init(c, &R, T, acc, c->b0 > 0);
    const uint8_t *a0 = act_row(a, c->t0) + (size_t)c->b0 * ab + aoff;
    const uint8_t *pk = (const uint8_t *)a->w + (size_t)tile * VL * a->w_row_bytes;
    const prefetcher pf = pf_setup(a, &R, c->nbc == a->k / 32 ? c->nbc : 0);
    _Alignas(64) vi bv[4][8];
    _Alignas(64) int32_t cv[4][TMAX][VL];
    vf sd[8], sm[8]; /* row scales of the blocks in flight */
    /* Packed Q8_0 codes already are B's layout and signed like the activations: the
     * tile loads them in place (tdpbssd), with no unpacking, no +128 shift and so no
     * correction; the integer dots are the same numbers. */
    const bool direct = type == CN_TYPE_Q8_0 && a->w_packed;
    const int64_t n = c->nbc;
    for (int64_t b = 0; b < AMX_U && b < n; b++) AMX_UNPACK(b);
    for (int64_t s = 0; s < n + 4; s += 4) {
        AMX_STEP(s, 0, 4, 6, 2);
        AMX_STEP(s + 1, 1, 5, 7, 3);
        AMX_STEP(s + 2, 2, 4, 6, 0);
        AMX_STEP(s + 3, 3, 5, 7, 1);
    }
    acc_store(c, &R, T, acc);
}
#undef AMX_U
#undef AMX_UNPACK
#undef AMX_FINISH
#undef AMX_STEP
#define TILE32_WIDE tile32_amx
#else
#define TILE32_WIDE tile32
#endif

/* Activation terms of the token tile for the chunk's blocks. */
static void prep32(uint32_t type, mm_ctx *c, int T, float *da, int32_t *corr, float *sa) {
    const bool q81 = type == CN_TYPE_Q4_1 || type == CN_TYPE_Q5_1;
    const int32_t off = type == CN_TYPE_Q4_0 ? 8 : type == CN_TYPE_Q5_0 ? 16 : type == CN_TYPE_Q8_0 ? 128 : 0;
    CN_UNROLL
    for (int t = 0; t < T; t++) {
        const uint8_t *row = act_row(c->a, c->t0 + t);
        for (int64_t b = 0; b < c->nbc; b++) {
            if (q81) {
                const cn_block_q8_1 *ab = (const cn_block_q8_1 *)(const void *)row + c->b0 + b;
                da[t * KCH + b] = h2f(rd_u16(&ab->d));
                sa[t * KCH + b] = h2f(rd_u16(&ab->s));
                corr[t * KCH + b] = 0;
            } else {
                const cn_block_q8_0 *ab = (const cn_block_q8_0 *)(const void *)row + c->b0 + b;
                da[t * KCH + b] = h2f(rd_u16(&ab->d));
                sa[t * KCH + b] = 0.0f;
                corr[t * KCH + b] = off ? off * sum_i8x32(ab->qs) : 0;
            }
        }
    }
}

#define TILE32_FN(NAME, TYPE)                                       \
    static void NAME(const mm_ctx *c, int T, int64_t tile) {        \
        if (T == TMAX) TILE32_WIDE(TYPE, TMAX, c, tile);            \
        else if (TMAX > 8 && T == 8) TILE32_WIDE(TYPE, 8, c, tile); \
        else if (T == 4) tile32(TYPE, 4, c, tile);                  \
        else tile32(TYPE, 1, c, tile);                              \
    }
TILE32_FN(tile_q4_0, CN_TYPE_Q4_0)
TILE32_FN(tile_q4_1, CN_TYPE_Q4_1)
TILE32_FN(tile_q5_0, CN_TYPE_Q5_0)
TILE32_FN(tile_q5_1, CN_TYPE_Q5_1)
TILE32_FN(tile_q8_0, CN_TYPE_Q8_0)

typedef void (*tile_fn)(const mm_ctx *c, int T, int64_t tile);

/* The token tile for left tokens, at most tmax (TMAX or TKMAX): tmax, 8, 4 or 1. */
static inline int tok_tile(int64_t left, int tmax) {
    return left >= tmax ? tmax : left >= 8 && tmax > 8 ? 8 : left >= 4 ? 4 : 1;
}

static void mm32(uint32_t type, tile_fn fn, const cn_matmul_args *a, int64_t tile0, int64_t tile1) {
    const int64_t nb = a->k / 32;
    float da[TMAX * KCH], sa[TMAX * KCH];
    int32_t corr[TMAX * KCH];
#if CN_X86_AMX
    int cfg_T = 0; /* the token-tile height the AMX tiles are configured for */
#endif
    for (int64_t t0 = 0; t0 < a->n_tok;) {
        const int T = tok_tile(a->n_tok - t0, TMAX);
#if CN_X86_AMX
        if (T >= 8 && T != cfg_T) {
            amx_config(T, 32);
            cfg_T = T;
        }
#endif
        for (int64_t b0 = 0; b0 < nb; b0 += KCH) {
            mm_ctx c = {
                .a = a, .t0 = t0, .b0 = b0, .nbc = CN_MIN((int64_t)KCH, nb - b0), .da = da, .corr = corr, .sa = sa};
            prep32(type, &c, T, da, corr, sa);
            for (int64_t tile = tile0; tile < tile1; tile++) fn(&c, T, tile);
        }
        t0 += T;
    }
#if CN_X86_AMX
    if (cfg_T) _tile_release();
#endif
}

/* ---------------------------------------------------------------- K-quants: shared */

/* The packed K-quant layout (pack() below): a 256-element block transposed at dword
 * granularity. Block b of tile t (VL rows, the last tile padded with copies of the last
 * row) is one run of VL * block bytes in which vector c holds dword c (bytes 4c .. 4c+3)
 * of every row's stored block, lane r = row t*VL + r. Q6_K's 210 bytes end in a lone f16
 * d: its 52 dwords, then d[VL]. A tile's dwords c .. c+3 are then 4 plain loads instead
 * of vi_load_t4's 8 loads and 8 shuffles, and a tile's blocks are one contiguous run. */
typedef struct {
    tile_rows R;
    const uint8_t *pk; /* the tile's packed blocks; NULL: the stored rows */
    size_t bb;         /* bytes of one row's block */
} kq_tile;

CN_INLINE void kq_setup(const cn_matmul_args *a, int64_t tile, size_t bb, kq_tile *K) {
    tile_setup(a, tile, &K->R);
    K->pk = a->w_packed ? (const uint8_t *)a->w + (size_t)tile * VL * a->w_row_bytes : NULL;
    K->bb = bb;
}

/* Dwords c .. c+3 of block b, one vector each. */
CN_INLINE void kq_load4(const kq_tile *K, int64_t b, int c, vi v[4]) {
    if (K->pk) {
        const uint8_t *p = K->pk + (size_t)b * VL * K->bb + (size_t)c * 4 * VL;
        CN_UNROLL
        for (int i = 0; i < 4; i++) v[i] = vi_loadu(p + (size_t)i * 4 * VL);
    } else {
        vi_load_t4(K->R.rp, (size_t)b * K->bb + 4 * (size_t)c, v);
    }
}

CN_INLINE vi kq_dword(const kq_tile *K, int64_t b, int c) {
    if (K->pk) return vi_loadu(K->pk + (size_t)b * VL * K->bb + (size_t)c * 4 * VL);
    return vi_gather32(K->R.rp[0] + (size_t)b * K->bb + 4 * (size_t)c, K->R.ridx);
}

/* What every K-quant tile sets up: its rows, zeroed accumulators (acc), the T tokens'
 * activation rows, and the prefetcher of its weights. */
typedef struct {
    mm_ctx c;
    kq_tile K;
    const cn_block_q8_K *arow[TKMAX];
    prefetcher pf;
    int64_t nb; /* 256-element blocks of a row */
} kq_run;

CN_INLINE void kq_begin(const cn_matmul_args *a, int64_t t0, int64_t tile, size_t bb, const int T, kq_run *r, vf *acc) {
    r->nb = a->k / CN_QK_K;
    r->c = (mm_ctx){.a = a, .t0 = t0};
    kq_setup(a, tile, bb, &r->K);
    acc_init(&r->c, &r->K.R, T, acc, false);
    CN_UNROLL
    for (int t = 0; t < T; t++) r->arow[t] = (const cn_block_q8_K *)(const void *)act_row(a, t0 + t);
    r->pf = pf_setup(a, &r->K.R, r->nb);
}

/* A lane's sub-block scale (int32, |s| < 128) as kq_dot takes it. */
CN_INLINE vi kq_scale(vi s) {
#if CN_X86_AVX512
    return s;
#else
    return vi_or(vi_and(s, vi_set1(0xFFFF)), vi_slli(s, 16));
#endif
}

/* Per lane: scale * sum over n code dwords w[0..n) (4 unsigned codes each) of the codes
 * times the activation's bytes aq[0 .. 4n). With VNNI: vpdpbusd sums, one 32-bit
 * multiply. On AVX2 the vpmaddubsw pair sums are added in 16 bits, g dwords at a time,
 * and vpmaddwd by the scale (in both halves of each dword, kq_scale) makes and adds the
 * 32-bit products, which saves a widening vpmaddwd per dword and the vpmulld. Exact as
 * long as g dwords of pair sums fit int16: |a| <= 127 (Q8_K), so a pair is at most
 * 2 * 127 * code; callers pick g = 8 for codes <= 15 (30480), 4 for <= 31 (31496) and
 * 2 for <= 63 (32004). */
CN_INLINE vi kq_dot(const vi *w, const int8_t *aq, const int n, const int g, vi sc, const int T) {
#if CN_X86_AVX512
    (void)g;
    /* Short sums over several tokens (Q6_K's 16-element sub-blocks): the tokens' chains side
     * by side hide vpdpbusd's latency, so one chain each, which saves an add (Zen 4, packed
     * Q6_K at 8 tokens: 132 against 119 GMAC/s). Q4_K's 8-dword sums lost 2-3% that way. */
    if (T >= 4 && n <= 4) {
        vi s = vi_zero();
        CN_UNROLL
        for (int c = 0; c < n; c++) s = vi_dp4(s, w[c], vi_bcast32(aq + 4 * c));
        return vi_mullo(s, sc);
    }
    vi s0 = vi_zero(), s1 = vi_zero();
    CN_UNROLL
    for (int c = 0; c < n; c += 2) {
        s0 = vi_dp4(s0, w[c], vi_bcast32(aq + 4 * c));
        s1 = vi_dp4(s1, w[c + 1], vi_bcast32(aq + 4 * c + 4));
    }
    return vi_mullo(vi_add(s0, s1), sc);
#else
    (void)T;
    vi r = vi_zero();
    CN_UNROLL
    for (int c0 = 0; c0 < n; c0 += g) {
        __m256i p = _mm256_maddubs_epi16(w[c0], vi_bcast32(aq + 4 * c0));
        CN_UNROLL
        for (int c = c0 + 1; c < c0 + g; c++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[c], vi_bcast32(aq + 4 * c)));
        r = vi_dp2w(r, p, sc);
    }
    return r;
#endif
}

/* ---------------------------------------------------------------- Q4_K, Q5_K */

/* The 6-bit scales and mins of the 8 sub-blocks, one byte each, from scales[12]
 * (s[0..2]: its dwords per lane): sc[0] = bytes sc0..sc3, sc[1] = sc4..sc7, and mn the
 * same. Bytewise masks after 32-bit shifts: a shift moves bits across bytes only into
 * bits the mask clears. */
CN_INLINE void k4_scales(const vi *s, vi *sc, vi *mn) {
    const vi m6 = vi_set1(0x3F3F3F3F), m4 = vi_set1(0x0F0F0F0F), hi2 = vi_set1(0x30303030);
    sc[0] = vi_and(s[0], m6);
    mn[0] = vi_and(s[1], m6);
    sc[1] = vi_or(vi_and(s[2], m4), vi_and(vi_srli(s[0], 2), hi2));
    mn[1] = vi_or(vi_and(vi_srli(s[2], 4), m4), vi_and(vi_srli(s[1], 2), hi2));
}

/* Byte i of each dword, zero-extended to the 16-bit halves given by pattern: lo (half 0
 * only) or both. */
CN_INLINE vi byte_to_halves(vi v, int i, bool both) {
    const int8_t z = (int8_t)0x80, b0 = (int8_t)i, b1 = both ? (int8_t)i : z;
    return vi_shuffle8(v, vi_bcast128(_mm_setr_epi8(b0, z, b1, z, (int8_t)(4 + b0), z, (int8_t)(both ? 4 + i : 0x80), z,
                                                    (int8_t)(8 + b0), z, (int8_t)(both ? 8 + i : 0x80), z,
                                                    (int8_t)(12 + b0), z, (int8_t)(both ? 12 + i : 0x80), z)));
}

/* Bytes i and i+1 of each dword as the dword's two 16-bit halves. */
CN_INLINE vi bytes_to_pair(vi v, int i) {
    const int8_t z = (int8_t)0x80;
    return vi_shuffle8(v, vi_bcast128(_mm_setr_epi8((int8_t)i, z, (int8_t)(i + 1), z, (int8_t)(4 + i), z,
                                                    (int8_t)(5 + i), z, (int8_t)(8 + i), z, (int8_t)(9 + i), z,
                                                    (int8_t)(12 + i), z, (int8_t)(13 + i), z)));
}

/* Byte i of each dword into the high byte of both 16-bit halves (low bytes zero). */
CN_INLINE vi byte_to_high16(vi v, int i) {
    const int8_t z = (int8_t)0x80, b = (int8_t)i;
    return vi_shuffle8(v,
                       vi_bcast128(_mm_setr_epi8(z, b, z, b, z, (int8_t)(4 + b), z, (int8_t)(4 + b), z, (int8_t)(8 + b),
                                                 z, (int8_t)(8 + b), z, (int8_t)(12 + b), z, (int8_t)(12 + b))));
}

/* Sub-block j's scale (one of k4_scales' bytes) as kq_dot takes it. */
CN_INLINE vi k4_scale(const vi *sc, int j) { return byte_to_halves(sc[j / 4], j % 4, !CN_X86_AVX512); }

/* Sub-block j's codes from a qs dword vector v (low nibbles for even j, high for odd)
 * and, for Q5_K, bit j of each byte of the matching qh dword vector as bit 4. */
CN_INLINE vi k45_codes(vi v, vi qh, int j, bool five) {
    const vi w = j % 2 ? vi_and(vi_srli(v, 4), vi_set1_8(0x0F)) : vi_and(v, vi_set1_8(0x0F));
    if (!five) return w;
    return vi_or(w, vi_and(j <= 4 ? vi_sllv(qh, vi_set1(4 - j)) : vi_srlv(qh, vi_set1(j - 4)), vi_set1_8(0x10)));
}

/* Block b's float step for T tokens from the integer sums sq[t] = sum_j sc_j * dot_j:
 * acc[t] += d * ad * sq - dmin * ad * sum_j m_j * bsum_j, ref's operations in ref's
 * order. h: the block's d | dmin << 16 per lane; mn: k4_scales' mins. */
CN_INLINE void k45_finish(const int T, vi h, const vi *mn, const vi *sq, const cn_block_q8_K *const *arow, int64_t b,
                          vf *acc) {
    const vf dv = vf_h2f_lo(h), dmv = vf_h2f_hi(h);
    vi mp[4]; /* (m_2i, m_2i+1) as 16-bit halves */
    CN_UNROLL
    for (int i = 0; i < 4; i++) mp[i] = bytes_to_pair(mn[i / 2], 2 * (i % 2));
    CN_UNROLL
    for (int t = 0; t < T; t++) {
        /* sum_j m_j * (bsums[2j] + bsums[2j+1]): the pair sums (|.| <= 4064) as int16,
         * then int16 pair dots with (m_2i, m_2i+1) */
        const int16_t *bs = arow[t][b].bsums;
        int32_t ps[4];
        _mm_storeu_si128((__m128i *)(void *)ps,
                         _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs),
                                        _mm_loadu_si128((const __m128i *)(const void *)(bs + 8))));
        vi sm = vi_zero();
        CN_UNROLL
        for (int i = 0; i < 4; i++) sm = vi_dp2w(sm, mp[i], vi_set1(ps[i]));
        const vf ad = vf_set1(arow[t][b].d);
        const vf d = vf_mul(dv, ad), dmin = vf_mul(dmv, ad);
        acc[t] = vf_add(acc[t], vf_sub(vf_mul(d, vf_cvt(sq[t])), vf_mul(dmin, vf_cvt(sm))));
    }
}

/* Block dwords: d | dmin << 16 (0), scales (1..3), Q5_K's qh (4..11), qs (Q4_K 4..35,
 * Q5_K 12..43). */
CN_INLINE void tile_q45k(const bool five, const int T, const cn_matmul_args *a, int64_t t0, int64_t tile) {
    vf acc[TKMAX];
    kq_run r;
    kq_begin(a, t0, tile, five ? sizeof(cn_block_q5_K) : sizeof(cn_block_q4_K), T, &r, acc);
    const int qs = five ? 12 : 4;
    for (int64_t b = 0; b < r.nb; b++) {
        pf_block(&r.pf, b);
        const vi h = kq_dword(&r.K, b, 0);
        vi s[4], sc[2], mn[2], qh[8];
        kq_load4(&r.K, b, 1, s); /* scales[12] and the dword past them */
        k4_scales(s, sc, mn);
        const bool wide = !CN_X86_AVX512 && T == 8;
        if (five && !wide) {
            kq_load4(&r.K, b, 4, qh);
            kq_load4(&r.K, b, 8, qh + 4);
        }
        vi sq[TKMAX];
        CN_UNROLL
        for (int t = 0; t < T; t++) sq[t] = vi_zero();
        /* AVX2, 8 tokens: half a sub-block at a time (4 code vectors, with their qh
         * dwords loaded again from L1), which with 8 sums fits 16 registers */
        CN_UNROLL
        for (int j = 0; wide && j < 8; j++) {
            const vi scj = k4_scale(sc, j);
            CN_UNROLL
            for (int q = 0; q < 2; q++) {
                vi w[4], qh4[4];
                kq_load4(&r.K, b, qs + 8 * (j / 2) + 4 * q, w);
                if (five) kq_load4(&r.K, b, 4 + 4 * q, qh4);
                CN_UNROLL
                for (int cc = 0; cc < 4; cc++) w[cc] = k45_codes(w[cc], five ? qh4[cc] : w[cc], j, five);
                CN_UNROLL
                for (int t = 0; t < T; t++)
                    sq[t] = vi_add(sq[t], kq_dot(w, r.arow[t][b].qs + 32 * j + 16 * q, 4, 4, scj, T));
            }
        }
        CN_UNROLL
        for (int p = 0; !wide && p < 4; p++) {
            vi v[8];
            kq_load4(&r.K, b, qs + 8 * p, v);
            kq_load4(&r.K, b, qs + 8 * p + 4, v + 4);
            CN_UNROLL
            for (int half = 0; half < 2; half++) {
                const int j = 2 * p + half;
#if !CN_X86_AVX512
                /* 16 registers: the codes are loaded again for the high nibbles (from L1,
                 * plain loads when packed) rather than kept, which spills */
                if (half) {
                    kq_load4(&r.K, b, qs + 8 * p, v);
                    kq_load4(&r.K, b, qs + 8 * p + 4, v + 4);
                }
#endif
                vi w[8];
                CN_UNROLL
                for (int cc = 0; cc < 8; cc++) w[cc] = k45_codes(v[cc], five ? qh[cc] : v[cc], j, five);
                const vi scj = k4_scale(sc, j);
                CN_UNROLL
                for (int t = 0; t < T; t++)
                    sq[t] = vi_add(sq[t], kq_dot(w, r.arow[t][b].qs + 32 * j, 8, five ? 4 : 8, scj, T));
            }
        }
        k45_finish(T, h, mn, sq, r.arow, b, acc);
    }
    acc_store(&r.c, &r.K.R, T, acc);
}

/* ---------------------------------------------------------------- Q6_K */

/* kq_load4 of stored dwords c .. c+3 (c a multiple of 4), through Q6_SLOT when packed. */
CN_INLINE void q6_load4(const kq_tile *K, int64_t b, int c, vi v[4]) { kq_load4(K, b, K->pk ? q6_dw(c) : c, v); }

/* Sub-block j's 4 code vectors (6-bit, unsigned), kk = (j / 2) % 4: the low nibbles of
 * src (kk < 2) or its high ones, | bits 2kk, 2kk+1 of qh at 4, 5. */
CN_INLINE void q6_codes(const vi *src, const vi *qh, const int kk, vi *w) {
    const vi lo4 = vi_set1_8(0x0F), hi2 = vi_set1_8(0x30);
    CN_UNROLL
    for (int cc = 0; cc < 4; cc++) {
        const vi lo = kk < 2 ? vi_and(src[cc], lo4) : vi_and(vi_srli(src[cc], 4), lo4);
        const vi hi = kk == 0   ? vi_slli(qh[cc], 4)
                      : kk == 1 ? vi_slli(qh[cc], 2)
                      : kk == 2 ? qh[cc]
                                : vi_srli(qh[cc], 2);
        w[cc] = vi_or(lo, vi_and(hi, hi2));
    }
}

#if CN_X86_AVX512
/* Sub-block j's scale (int8 byte j of the scales dwords sv), sign-extended per lane. */
CN_INLINE vi q6_scale(const vi *sv, const int j) { return vi_srai(vi_sllv(sv[j / 4], vi_set1(24 - 8 * (j % 4))), 24); }
#endif

/* Block b's float step for T tokens from sq[t] = sum_j sc_j * dot_j (unsigned codes):
 * the -32 offset, 32 * sum_j sc_j * bsums[j], as int16 pair dots (sc_2i, sc_2i+1), then
 * acc[t] += d * ad * (sq - offset). sv: the block's scales dwords (48..51). */
CN_INLINE void q6k_finish(const int T, const kq_tile *K, int64_t b, const vi *sv, const vi *sq,
                          const cn_block_q8_K *const *arow, vf *acc) {
    vi pr[8];
    CN_UNROLL
    for (int q = 0; q < 4; q++) {
        const vi ev = vi_srai16(vi_slli16(sv[q], 8), 8), od = vi_srai16(sv[q], 8); /* (b0, b2), (b1, b3) */
        pr[2 * q] = vi_or(vi_and(ev, vi_set1(0xFFFF)), vi_slli(od, 16));
        pr[2 * q + 1] = vi_or(vi_srli(ev, 16), vi_and(od, vi_set1((int32_t)0xFFFF0000)));
    }
    const vf dv = K->pk ? vf_load_h((const uint16_t *)(const void *)(K->pk + (size_t)b * VL * K->bb + 208 * VL))
                        : vf_h2f_hi(vi_gather32(K->R.rp[0] + (size_t)b * K->bb + 206, K->R.ridx));
    CN_UNROLL
    for (int t = 0; t < T; t++) {
        vi cs = vi_zero();
        CN_UNROLL
        for (int q = 0; q < 8; q++) cs = vi_dp2w(cs, pr[q], vi_bcast32(&arow[t][b].bsums[2 * q]));
        const vi s = vi_sub(sq[t], vi_slli(cs, 5));
        acc[t] = vf_add(acc[t], vf_mul(vf_mul(dv, vf_set1(arow[t][b].d)), vf_cvt(s)));
    }
}

/* Block dwords: ql (0..31), qh (32..47), scales (48..51, int8); then d (f16, byte 208). */
CN_INLINE void tile_q6k(const int T, const cn_matmul_args *a, int64_t t0, int64_t tile) {
    vf acc[TKMAX];
    kq_run r;
    kq_begin(a, t0, tile, sizeof(cn_block_q6_K), T, &r, acc);
    for (int64_t b = 0; b < r.nb; b++) {
        pf_block(&r.pf, b);
        vi sv[4];
        q6_load4(&r.K, b, 48, sv); /* scales[16], int8 */
        vi sq[TKMAX];
        CN_UNROLL
        for (int t = 0; t < T; t++) sq[t] = vi_zero();
        /* clang-format off */
        CN_UNROLL
        for (int hh = 0; hh < 2; hh++)
            CN_UNROLL
            for (int lp = 0; lp < 2; lp++) {
                vi qa[4], qb[4], qh[4];
#if CN_X86_AVX512
                q6_load4(&r.K, b, 16 * hh + 4 * lp, qa);     /* k = 0 low, 2 high */
                q6_load4(&r.K, b, 16 * hh + 8 + 4 * lp, qb); /* k = 1 low, 3 high */
                q6_load4(&r.K, b, 32 + 8 * hh + 4 * lp, qh);
#endif
                CN_UNROLL
                for (int kk = 0; kk < 4; kk++) {
                    const int j = 8 * hh + 2 * kk + lp; /* sub-block of 16 */
#if !CN_X86_AVX512 /* 16 registers: loaded for each kk (from L1) rather than kept, which spills */
                    q6_load4(&r.K, b, kk & 1 ? 16 * hh + 8 + 4 * lp : 16 * hh + 4 * lp, kk & 1 ? qb : qa);
                    q6_load4(&r.K, b, 32 + 8 * hh + 4 * lp, qh);
#endif
                    vi w[4];
                    q6_codes(kk & 1 ? qb : qa, qh, kk, w);
#if CN_X86_AVX512
                    const vi scj = q6_scale(sv, j);
#else /* the int16 (sc, sc) pair kq_dot takes: the byte into the high half of both int16, then an arithmetic shift */
                    const vi scj = vi_srai16(byte_to_high16(r.K.pk ? kq_dword(&r.K, b, q6_dw(48 + j / 4)) : sv[j / 4], j % 4), 8);
#endif
                    CN_UNROLL
                    for (int t = 0; t < T; t++) sq[t] = vi_add(sq[t], kq_dot(w, r.arow[t][b].qs + 16 * j, 4, 2, scj, T));
                }
            }
        /* clang-format on */
        if (r.K.pk) q6_load4(&r.K, b, 48, sv);
        q6k_finish(T, &r.K, b, sv, sq, r.arow, acc);
    }
    acc_store(&r.c, &r.K.R, T, acc);
}

#if CN_X86_AMX
/* The K-quant tiles on AMX (kernels_amx.c), for 16-token tiles: per sub-block j, one
 * tile multiply makes its T × VL integer dots, as tile32_amx does per 32-element block.
 * A (tmm4/5) = the T activation rows' elements of sub-block j, read in place (stride:
 * the activation row); B (tmm6/7) = sub-block j's code vectors as k45_block / q6k_block
 * make them (vector c, lane r = row r's codes 4c .. 4c+3: already B's layout), stored
 * to bv; C (tmm0..3) = dot_j[t][r], stored to cv, then sq[t] += dot_j * sc_j per lane
 * (vpmulld): the integers the VNNI loop makes, then the same k45_finish / q6k_finish.
 * Tiles are not renamed, and tile loads and vector loads wait for the stores they read
 * to commit, so a block's steps are spread out: its multiplies are issued (four
 * sub-blocks at a time on C tiles 0..3, A and B alternating between two tiles, each
 * group's dots to its own cv buffer), then the next block's codes are made (to the other
 * bv buffer), and only then are this block's dots read back. Checked bit for bit against
 * ref with software tiles (tests/unit/amx_emu_avx512.c); not yet timed on an AMX
 * machine. */
#define KQ_AMX_MUL(TC, TA, TB, bptr, aptr) \
    do {                                   \
        _tile_loadd(TB, (bptr), VL * 4);   \
        _tile_loadd(TA, (aptr), as);       \
        _tile_zero(TC);                    \
        _tile_dpbsud(TC, TA, TB);          \
    } while (0)
/* Sub-blocks j0 .. j0+3 of block b (n code dwords each) into cv[j0 .. j0+3]. */
/* clang-format off */
#define KQ_AMX_ISSUE(bvb, j0, n)                                                          \
    do {                                                                                  \
        const int8_t *a0_ = r.arow[0][b].qs + (j0) * 4 * (n);                             \
        KQ_AMX_MUL(0, 4, 6, (bvb)[(j0) + 0], a0_);                                        \
        KQ_AMX_MUL(1, 5, 7, (bvb)[(j0) + 1], a0_ + 4 * (n));                              \
        KQ_AMX_MUL(2, 4, 6, (bvb)[(j0) + 2], a0_ + 8 * (n));                              \
        KQ_AMX_MUL(3, 5, 7, (bvb)[(j0) + 3], a0_ + 12 * (n));                             \
        _tile_stored(0, cv[(j0) + 0], VL * 4);                                            \
        _tile_stored(1, cv[(j0) + 1], VL * 4);                                            \
        _tile_stored(2, cv[(j0) + 2], VL * 4);                                            \
        _tile_stored(3, cv[(j0) + 3], VL * 4);                                            \
    } while (0)
/* clang-format on */
/* sq[t] = sum over the nj sub-blocks of dot_j * sc(j). */
#define KQ_AMX_READ(nj, SC)                                                                       \
    do {                                                                                          \
        CN_UNROLL                                                                                 \
        for (int t = 0; t < T; t++) sq[t] = vi_zero();                                            \
        CN_UNROLL                                                                                 \
        for (int j_ = 0; j_ < (nj); j_++) {                                                       \
            const vi sc_ = SC(j_);                                                                \
            CN_UNROLL                                                                             \
            for (int t = 0; t < T; t++)                                                           \
                sq[t] = vi_add(sq[t], vi_mullo(_mm512_load_si512((const void *)cv[j_][t]), sc_)); \
        }                                                                                         \
    } while (0)

/* Block b's 8 sub-blocks' code vectors (k45_block's) into B layout. */
CN_INLINE void k45_amx_codes(const bool five, const kq_tile *K, int64_t b, vi (*bv)[8]) {
    const int qs = five ? 12 : 4;
    vi qh[8];
    if (five) {
        kq_load4(K, b, 4, qh);
        kq_load4(K, b, 8, qh + 4);
    }
    CN_UNROLL
    for (int p = 0; p < 4; p++) {
        vi v[8];
        kq_load4(K, b, qs + 8 * p, v);
        kq_load4(K, b, qs + 8 * p + 4, v + 4);
        CN_UNROLL
        for (int cc = 0; cc < 8; cc++) {
            bv[2 * p][cc] = k45_codes(v[cc], five ? qh[cc] : v[cc], 2 * p, five);
            bv[2 * p + 1][cc] = k45_codes(v[cc], five ? qh[cc] : v[cc], 2 * p + 1, five);
        }
    }
}

CN_INLINE void tile_q45k_amx(const bool five, const int T, const cn_matmul_args *a, int64_t t0, int64_t tile) {
    vf acc[TKMAX];
    kq_run r;
    kq_begin(a, t0, tile, five ? sizeof(cn_block_q5_K) : sizeof(cn_block_q4_K), T, &r, acc);
    const long as = (long)a->xq_row_bytes;
    _Alignas(64) vi bv[2][8][8];           /* B: two blocks' 8 sub-blocks' code vectors */
    _Alignas(64) int32_t cv[8][TKMAX][VL]; /* C: a block's 8 sub-blocks' dots */
    k45_amx_codes(five, &r.K, 0, bv[0]);
    for (int64_t b = 0; b < r.nb; b++) {
        pf_block(&r.pf, b);
        KQ_AMX_ISSUE(bv[b & 1], 0, 8);
        KQ_AMX_ISSUE(bv[b & 1], 4, 8);
        if (b + 1 < r.nb) k45_amx_codes(five, &r.K, b + 1, bv[(b + 1) & 1]);
        const vi h = kq_dword(&r.K, b, 0);
        vi s[4], sc[2], mn[2], sq[TKMAX];
        kq_load4(&r.K, b, 1, s);
        k4_scales(s, sc, mn);
#define K45_SC(j) k4_scale(sc, (j))
        KQ_AMX_READ(8, K45_SC);
#undef K45_SC
        k45_finish(T, h, mn, sq, r.arow, b, acc);
    }
    acc_store(&r.c, &r.K.R, T, acc);
}

/* Block b's 16 sub-blocks' code vectors (q6k_block's) into B layout. */
CN_INLINE void q6k_amx_codes(const kq_tile *K, int64_t b, vi (*bv)[4]) {
    /* clang-format off */
    CN_UNROLL
    for (int hh = 0; hh < 2; hh++)
        CN_UNROLL
        for (int lp = 0; lp < 2; lp++) {
            vi qa[4], qb[4], qh[4];
            q6_load4(K, b, 16 * hh + 4 * lp, qa);     /* k = 0 low, 2 high */
            q6_load4(K, b, 16 * hh + 8 + 4 * lp, qb); /* k = 1 low, 3 high */
            q6_load4(K, b, 32 + 8 * hh + 4 * lp, qh);
            CN_UNROLL
            for (int kk = 0; kk < 4; kk++) q6_codes(kk & 1 ? qb : qa, qh, kk, bv[8 * hh + 2 * kk + lp]);
        }
    /* clang-format on */
}

CN_INLINE void tile_q6k_amx(const int T, const cn_matmul_args *a, int64_t t0, int64_t tile) {
    vf acc[TKMAX];
    kq_run r;
    kq_begin(a, t0, tile, sizeof(cn_block_q6_K), T, &r, acc);
    const long as = (long)a->xq_row_bytes;
    _Alignas(64) vi bv[2][16][4];           /* B: two blocks' 16 sub-blocks' code vectors */
    _Alignas(64) int32_t cv[16][TKMAX][VL]; /* C: a block's 16 sub-blocks' dots */
    q6k_amx_codes(&r.K, 0, bv[0]);
    for (int64_t b = 0; b < r.nb; b++) {
        pf_block(&r.pf, b);
        KQ_AMX_ISSUE(bv[b & 1], 0, 4);
        KQ_AMX_ISSUE(bv[b & 1], 4, 4);
        KQ_AMX_ISSUE(bv[b & 1], 8, 4);
        KQ_AMX_ISSUE(bv[b & 1], 12, 4);
        if (b + 1 < r.nb) q6k_amx_codes(&r.K, b + 1, bv[(b + 1) & 1]);
        vi sv[4], sq[TKMAX];
        q6_load4(&r.K, b, 48, sv); /* scales[16], int8 */
#define Q6_SC(j) q6_scale(sv, (j))
        KQ_AMX_READ(16, Q6_SC);
#undef Q6_SC
        q6k_finish(T, &r.K, b, sv, sq, r.arow, acc);
    }
    acc_store(&r.c, &r.K.R, T, acc);
}
#undef KQ_AMX_MUL
#undef KQ_AMX_ISSUE
#undef KQ_AMX_READ
#endif

#define TILEK_FN(NAME, CALL)                                                     \
    static void NAME(const cn_matmul_args *a, int64_t t0, int T, int64_t tile) { \
        if (T == TKMAX) CALL(TKMAX, a, t0, tile);                                \
        else if (T == 8) CALL(8, a, t0, tile);                                   \
        else if (T == 4) CALL(4, a, t0, tile);                                   \
        else CALL(1, a, t0, tile);                                               \
    }
#if CN_X86_AMX /* 16-token tiles on AMX (mmk configures it), the rest as AVX-512's */
#define Q4K_CALL(T, a, t0, tile) \
    ((T) == TKMAX ? tile_q45k_amx(false, T, a, t0, tile) : tile_q45k(false, T, a, t0, tile))
#define Q5K_CALL(T, a, t0, tile) ((T) == TKMAX ? tile_q45k_amx(true, T, a, t0, tile) : tile_q45k(true, T, a, t0, tile))
#define Q6K_CALL(T, a, t0, tile) ((T) == TKMAX ? tile_q6k_amx(T, a, t0, tile) : tile_q6k(T, a, t0, tile))
#else
#define Q4K_CALL(T, a, t0, tile) tile_q45k(false, T, a, t0, tile)
#define Q5K_CALL(T, a, t0, tile) tile_q45k(true, T, a, t0, tile)
#define Q6K_CALL(T, a, t0, tile) tile_q6k(T, a, t0, tile)
#endif
TILEK_FN(tilek_q4_k, Q4K_CALL)
TILEK_FN(tilek_q5_k, Q5K_CALL)
TILEK_FN(tilek_q6_k, Q6K_CALL)

typedef void (*tilek_fn)(const cn_matmul_args *a, int64_t t0, int T, int64_t tile);

/* Every token tile reads all of the thread's weight tiles, which for a real model's
 * matrix (megabytes) means from L3 or memory each time: the tiles are taken a panel
 * that fits in L2 at a time, and each panel is done for every token tile before the
 * next, so prefill re-reads weights from L2. Decode (one token tile) is unchanged.
 * Each (panel, token tile) also reads the token tile's activations, T rows of K, from
 * L3: per MAC that traffic grows with K over the panel's bytes, so the panel must not
 * be small against long rows (ffn_down: K = 8960, 5 KB a Q4_K row, 80 KB a 16-row
 * tile). One thread, 512 tokens, GMAC/s at 64 -> 256 KB (Zen 4, 2026-12-05): AVX-512
 * Q4_K 1536 x 8960 153 -> 159, Q6_K 130 -> 133, 17920 x 1536 154 -> 157; AVX2 Q4_K
 * 92 -> 105, Q6_K 69 -> 81, 17920 x 1536 equal (104); 512 KB and 1 MB no better. The
 * 1.5B's pp512: AVX-512 +7% at one thread, +10% at two, AVX2 +5% / +7%. It is half of
 * Zen 3's L2 (512 KB), beside at most 164 KB of activations (16 tokens x 8960). */
#ifndef KQ_PANEL_BYTES
#define KQ_PANEL_BYTES (256 << 10)
#endif
/* The token tile: TKMAX over weights read as stored (when packing is off), whose
 * gathers a taller tile amortizes, and on AMX (its tiles take 16 tokens), but 8 over
 * packed ones in the vector loops, whose loads are cheap: there 16 tokens' sums and
 * accumulators fill all 32 registers and spill. Zen 4, one thread,
 * 512 tokens, GMAC/s at 8 / 16 tokens (2026-12-05): packed Q4_K 155 / 140, Q6_K 121 /
 * 100, Q5_K 133 / 133, and the 1.5B's pp512 +5-7%; stored Q4_K 127 / 139, Q6_K 100 /
 * 102, Q5_K 120 / 128. */
static int kq_tok_max(const cn_matmul_args *a) {
    if (!a->w_packed) return TKMAX;
    /* AVX-512 Q6_K over a batch of at most 8 tokens (the batched engine's decode step,
     * weights from DRAM): two passes of 4 over each panel, the second from L2. An 8-token
     * tile computes too long per byte for the hardware prefetchers to keep ahead, and the
     * software prefetches (PF_MIN_TOK) peak near 10 GB/s a core, under the 13.6 it needs; a
     * 4-token tile's rate leaves the hardware prefetchers room to help them. Zen 4, one
     * thread, 8 tokens, GMAC/s: 30720 x 8960 from DRAM 93 -> 103-106, 151936 x 1536 equal
     * (94-96), 1536 x 8960 in cache 133 -> 119; the 1.5B's 8-way decode +8% at two threads,
     * +10% at one (2026-12-05). The passes keep the software prefetches (PF_MIN_TOK counts
     * the call's tokens, not the pass's): switched off by the pass's 4 tokens, 30720 x 8960
     * fell to 98 against 105 GMAC/s and the head stayed equal (2026-12-05, later). Q4_K needs
     * 10.3 GB/s at 8 tokens, which the prefetches give (146 GMAC/s from DRAM against 158-164
     * in cache); split the same way, 8-way decode lost 5-13%. */
    if (CN_X86_AVX512 && a->w_type == CN_TYPE_Q6_K && a->n_tok <= 8) return 4;
    return CN_X86_AMX ? TKMAX : 8; /* AMX: 16-token tiles on the tile unit */
}

static void mmk(tilek_fn fn, const cn_matmul_args *a, int64_t tile0, int64_t tile1) {
    const int tkmax = kq_tok_max(a);
#if CN_X86_AMX
    const bool amx = tkmax == TKMAX && a->n_tok >= TKMAX && tile0 < tile1;
    if (amx) amx_config(TKMAX, a->w_type == CN_TYPE_Q6_K ? 16 : 32);
#endif
    const int64_t per = CN_MAX((int64_t)1, (int64_t)(KQ_PANEL_BYTES / ((size_t)VL * a->w_row_bytes)));
    for (int64_t p0 = tile0; p0 < tile1; p0 += per) {
        const int64_t p1 = CN_MIN(tile1, p0 + per);
        for (int64_t t0 = 0; t0 < a->n_tok;) {
            const int T = tok_tile(a->n_tok - t0, tkmax);
            for (int64_t tile = p0; tile < p1; tile++) fn(a, t0, T, tile);
            t0 += T;
        }
    }
#if CN_X86_AMX
    if (amx) _tile_release();
#endif
}

/* ---------------------------------------------------------------- float weights */

/* The reference's 8 lanes (element i in lane i % 8, no FMA) and its reduction tree. */
static inline float reduce8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* a0+a4 .. a3+a7 */
    const __m128 t = _mm_add_ps(s, _mm_movehdup_ps(s));                                  /* (s0+s1), -, (s2+s3), - */
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehl_ps(t, t)));
}

static inline __m256 load8(uint32_t type, const void *p, int64_t i) {
    switch (type) {
    case CN_TYPE_F32: return _mm256_loadu_ps((const float *)p + i);
    case CN_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i)));
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i))), 16));
    }
}

static inline float load1(uint32_t type, const void *p, int64_t i) {
    switch (type) {
    case CN_TYPE_F32: return ((const float *)p)[i];
    case CN_TYPE_F16: return h2f(((const uint16_t *)p)[i]);
    default: return cn_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* 4 rows against one activation row. */
CN_INLINE void dot_float4(const uint32_t type, const void *const *w, const void *x, int64_t k, float *out, int nr) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        const __m256 xv = load8(type, x, i);
        CN_UNROLL
        for (int r = 0; r < 4; r++)
            if (r < nr) acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(load8(type, w[r], i), xv));
    }
    CN_UNROLL
    for (int r = 0; r < nr; r++) {
        float l[8];
        _mm256_storeu_ps(l, acc[r]);
        for (int64_t j = i; j < k; j++) l[j - i] += load1(type, w[r], j) * load1(type, x, j);
        out[r] = reduce8(_mm256_loadu_ps(l));
    }
}

static void mm_float(uint32_t type, const cn_matmul_args *a, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r += 4) {
        const int nr = (int)CN_MIN((int64_t)4, r1 - r);
        const void *w[4];
        CN_UNROLL
        for (int q = 0; q < 4; q++) w[q] = (const uint8_t *)a->w + (size_t)(r + CN_MIN(q, nr - 1)) * a->w_row_bytes;
        for (int64_t t = 0; t < a->n_tok; t++) {
            float out[4] = {0};
            dot_float4(type, w, act_row(a, t), a->k, out, nr);
            CN_UNROLL
            for (int q = 0; q < nr; q++) a->y[t * a->ldy + r + q] = out[q];
        }
    }
}

/* ---------------------------------------------------------------- entry */

static void CN_X86_SUFFIX(matmul)(const cn_matmul_args *a, int ith, int nth) {
    const int64_t n_tiles = (a->n_out + VL - 1) / VL;
    int64_t t0, t1;
    /* gathers index rows by int32 byte offsets from the tile's first row */
    if (a->w_row_bytes > (size_t)INT32_MAX / VL) {
        cn_ref_matmul(a, ith, nth);
        return;
    }
    switch (a->w_type) {
    case CN_TYPE_F32:
    case CN_TYPE_F16:
    case CN_TYPE_BF16: {
        int64_t r0, r1;
        cn_split(a->n_out, ith, nth, &r0, &r1);
        mm_float(a->w_type, a, r0, r1);
        return;
    }
    default: break;
    }
    cn_split(n_tiles, ith, nth, &t0, &t1);
    switch (a->w_type) {
    case CN_TYPE_Q4_0: mm32(CN_TYPE_Q4_0, tile_q4_0, a, t0, t1); break;
    case CN_TYPE_Q4_1: mm32(CN_TYPE_Q4_1, tile_q4_1, a, t0, t1); break;
    case CN_TYPE_Q5_0: mm32(CN_TYPE_Q5_0, tile_q5_0, a, t0, t1); break;
    case CN_TYPE_Q5_1: mm32(CN_TYPE_Q5_1, tile_q5_1, a, t0, t1); break;
    case CN_TYPE_Q8_0: mm32(CN_TYPE_Q8_0, tile_q8_0, a, t0, t1); break;
    case CN_TYPE_Q4_K: mmk(tilek_q4_k, a, t0, t1); break;
    case CN_TYPE_Q5_K: mmk(tilek_q5_k, a, t0, t1); break;
    case CN_TYPE_Q6_K: mmk(tilek_q6_k, a, t0, t1); break;
    default: cn_ref_matmul(a, ith, nth); break;
    }
}

#if CN_X86_AMX
/* The AMX family's table (kernels_amx.c, and the tests' software-tile build): the
 * AVX-512 family's, with this file's matmul, quantizer and packing. */
static cn_kernels CN_X86_SUFFIX(table)(const char *name) {
    cn_kernels k = *cn_kernels_avx512();
    k.name = name;
    k.matmul = CN_X86_SUFFIX(matmul);
    k.quantize_rows = CN_X86_SUFFIX(quantize_rows);
    k.packed_size = CN_X86_SUFFIX(packed_size);
    k.pack = CN_X86_SUFFIX(pack);
    return k;
}
#endif
