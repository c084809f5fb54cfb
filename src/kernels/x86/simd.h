/* simd.h — the few vector operations the x86 kernel template (kern_tmpl.h) is written in,
 * for two widths: AVX-512 with VNNI (16 int32/float lanes, vpdpbusd/vpdpwssd) when the
 * including file defines CN_X86_AVX512 1, else AVX2 (8 lanes, the 8-bit dot emulated by
 * vpmaddubsw + vpmaddwd). Included only by kernels_avx2.c / kernels_avx512.c, which the
 * Makefile compiles with their ISA enabled; nothing here runs before dispatch has checked
 * the CPU.
 *
 * The layout idea: one vector lane per weight ROW. A "transposed load" takes 16 bytes
 * from each of VL rows and returns 4 vectors whose lane r holds bytes [4c, 4c+4) of row
 * r, so an 8-bit dot with one activation dword broadcast to all lanes advances VL output
 * rows by 4 elements each, and every lane reduces its own row in block order, exactly as
 * the scalar reference does (no horizontal sums, no reassociation). */
#ifndef CN_KERNELS_X86_SIMD_H
#define CN_KERNELS_X86_SIMD_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef CN_X86_AVX512
#error "define CN_X86_AVX512 (0 or 1) before including simd.h"
#endif

#define CN_INLINE static inline __attribute__((always_inline))

static inline int32_t rd_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if CN_X86_AVX512

#define VL 16
typedef __m512i vi;
typedef __m512 vf;

CN_INLINE vi vi_zero(void) { return _mm512_setzero_si512(); }
CN_INLINE vi vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
CN_INLINE vi vi_set1_8(int8_t x) { return _mm512_set1_epi8(x); }
CN_INLINE vi vi_bcast32(const void *p) { return _mm512_set1_epi32(rd_i32(p)); }
CN_INLINE vi vi_and(vi a, vi b) { return _mm512_and_si512(a, b); }
CN_INLINE vi vi_or(vi a, vi b) { return _mm512_or_si512(a, b); }
CN_INLINE vi vi_xor(vi a, vi b) { return _mm512_xor_si512(a, b); }
CN_INLINE vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
CN_INLINE vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
CN_INLINE vi vi_mullo(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
#define vi_srli(a, n) _mm512_srli_epi32((a), (n))
#define vi_slli(a, n) _mm512_slli_epi32((a), (n))
#define vi_srai(a, n) _mm512_srai_epi32((a), (n))
#define vi_srli16(a, n) _mm512_srli_epi16((a), (n))
#define vi_slli16(a, n) _mm512_slli_epi16((a), (n))
#define vi_srai16(a, n) _mm512_srai_epi16((a), (n))
/* acc + sum over each lane's 4 byte pairs of u8(u) * s8(s); exact, no saturation. */
CN_INLINE vi vi_dp4(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
/* acc + sum over each lane's 2 int16 pairs of a * b. */
CN_INLINE vi vi_dp2w(vi acc, vi a, vi b) { return _mm512_dpwssd_epi32(acc, a, b); }
/* Byte shuffle within 128-bit lanes. */
CN_INLINE vi vi_shuffle8(vi a, vi idx) { return _mm512_shuffle_epi8(a, idx); }
/* Bytes of a that have any bit of m set get 0x10 or'ed into w. */
CN_INLINE vi vi_or_bit4_where(vi w, vi a, vi m) {
    return _mm512_or_si512(w, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(a, m), _mm512_set1_epi8(0x10)));
}
CN_INLINE vi vi_bcast128(__m128i a) { return _mm512_broadcast_i32x4(a); }
CN_INLINE vi vi_sllv(vi a, vi n) { return _mm512_sllv_epi32(a, n); }
CN_INLINE vi vi_srlv(vi a, vi n) { return _mm512_srlv_epi32(a, n); }
CN_INLINE vi vi_gather32(const uint8_t *base, vi idx) { return _mm512_i32gather_epi32(idx, (const void *)base, 1); }
CN_INLINE vi vi_lane_index(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

CN_INLINE vf vf_zero(void) { return _mm512_setzero_ps(); }
CN_INLINE vf vf_set1(float x) { return _mm512_set1_ps(x); }
CN_INLINE vf vf_cvt(vi a) { return _mm512_cvtepi32_ps(a); }
CN_INLINE vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
CN_INLINE vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
CN_INLINE vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
/* f16 in the low / high 16 bits of each lane to f32 (exact). */
CN_INLINE vf vf_h2f_lo(vi a) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a)); }
CN_INLINE vf vf_h2f_hi(vi a) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(a, 16))); }
/* The first n (1..VL) lanes to / from y; other lanes read as 0. */
CN_INLINE void vf_store_n(float *y, vf v, int n) {
    if (n == VL) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << n) - 1), v);
}
CN_INLINE vf vf_load_n(const float *y, int n) {
    if (n == VL) return _mm512_loadu_ps(y);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), y);
}

/* 16 bytes at p[r] + off for r < VL, transposed: v[c] lane r = dword c of row r. */
CN_INLINE void vi_load_t4(const uint8_t *const *p, size_t off, vi v[4]) {
    vi z[4];
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {
        const __m256i a = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[g] + off))),
            _mm_loadu_si128((const __m128i *)(p[g + 4] + off)), 1);
        const __m256i b = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[g + 8] + off))),
            _mm_loadu_si128((const __m128i *)(p[g + 12] + off)), 1);
        z[g] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    }
    /* z[g] 128-bit lane i = row g + 4i; a 4x4 dword transpose inside each lane puts
     * row 4i + j at dword j of lane i, i.e. lane index = row. */
    const vi t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const vi t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    v[0] = _mm512_unpacklo_epi64(t0, t2);
    v[1] = _mm512_unpackhi_epi64(t0, t2);
    v[2] = _mm512_unpacklo_epi64(t1, t3);
    v[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* ---- float helpers for attention ---- */
CN_INLINE vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
CN_INLINE vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
CN_INLINE vf vf_from_bits(vi a) { return _mm512_castsi512_ps(a); }
/* Lanes [from, to) of (from may be < 0, to > VL): a mask, a masked store, a masked load
 * (other lanes 0); masked-off lanes are never accessed. */
CN_INLINE __mmask16 range_mask(int from, int to) {
    from = from < 0 ? 0 : from;
    to = to > VL ? VL : to;
    return to <= from ? 0 : (__mmask16)(((1u << to) - 1) & ~((1u << from) - 1));
}
CN_INLINE void vf_store_range(float *p, vf v, int from, int to) { _mm512_mask_storeu_ps(p, range_mask(from, to), v); }
CN_INLINE vf vf_load_range(const float *p, int from, int to) { return _mm512_maskz_loadu_ps(range_mask(from, to), p); }
CN_INLINE vf vf_keep_range(vf v, int from, int to, float x) {
    return _mm512_mask_blend_ps(range_mask(from, to), _mm512_set1_ps(x), v);
}
/* x > lim ? v : y */
CN_INLINE vf vf_if_gt(vf x, float lim, vf v, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_GT_OQ), y, v);
}
/* x >= lim ? v : y */
CN_INLINE vf vf_if_ge(vf x, float lim, vf v, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_GE_OQ), y, v);
}
/* x <= lim ? v : y */
CN_INLINE vf vf_if_le(vf x, float lim, vf v, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_LE_OQ), y, v);
}
/* table[f16 bits of x] (round to nearest even), a 65536-float table. */
CN_INLINE vf vf_lookup_h(const float *table, vf x) {
    return _mm512_i32gather_ps(_mm512_cvtepu16_epi32(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                               table, 4);
}
CN_INLINE vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
CN_INLINE vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
/* Lanes (2i, 2i+1) <- (a[2i], a[2i]), (a[2i+1], a[2i+1]), (a[2i+1], a[2i]); and even lanes
 * a - b, odd lanes a + b. */
CN_INLINE vf vf_dup_even(vf a) { return _mm512_moveldup_ps(a); }
CN_INLINE vf vf_dup_odd(vf a) { return _mm512_movehdup_ps(a); }
CN_INLINE vf vf_swap_pairs(vf a) { return _mm512_permute_ps(a, 0xB1); }
CN_INLINE vf vf_subadd(vf a, vf b) { return _mm512_mask_sub_ps(_mm512_add_ps(a, b), 0x5555, a, b); }
CN_INLINE vf vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
CN_INLINE void vf_storeu(float *p, vf v) { _mm512_storeu_ps(p, v); }
CN_INLINE vf vf_load_h(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
CN_INLINE vf vf_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
CN_INLINE float vf_hsum(vf v) { return _mm512_reduce_add_ps(v); }
CN_INLINE float vf_hmax(vf v) { return _mm512_reduce_max_ps(v); }
CN_INLINE double vf_hsum_d(vf v) {
    return _mm512_reduce_add_pd(
        _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                      _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))));
}
/* Lanes >= n (0..VL) replaced by x. */
CN_INLINE vf vf_keep_n(vf v, int n, float x) {
    return _mm512_mask_blend_ps((__mmask16)((1u << n) - 1), _mm512_set1_ps(x), v);
}
/* f32 -> f16 -> f32 (round to nearest even). */
CN_INLINE vf vf_round_h(vf v) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* y * 2^n for integral n. */
CN_INLINE vf vf_ldexp(vf y, vf n) { return _mm512_scalef_ps(y, n); }
CN_INLINE vf vf_round(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* v where x >= lim (NaN: 0), else 0. */
CN_INLINE vf vf_zero_below(vf x, float lim, vf v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_GE_OQ), v);
}

/* r[j] = sum of the lanes of v[j], j < 16. */
CN_INLINE vf vf_hsum16(const vf *v) {
    vf s1[8], s2[4], s3[2];
    for (int i = 0; i < 8; i++)
        s1[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        s2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0x88),
                              _mm512_shuffle_f32x4(s1[2 * i], s1[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        s3[i] = _mm512_add_ps(_mm512_unpacklo_ps(s2[2 * i], s2[2 * i + 1]),
                              _mm512_unpackhi_ps(s2[2 * i], s2[2 * i + 1]));
    const vf r = _mm512_add_ps(_mm512_unpacklo_ps(s3[0], s3[1]), _mm512_unpackhi_ps(s3[0], s3[1]));
    /* lane 4c + l of r holds v[c + {0, 8, 4, 12}[l]] */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15), r);
}

#else /* AVX2 */

#define VL 8
typedef __m256i vi;
typedef __m256 vf;

CN_INLINE vi vi_zero(void) { return _mm256_setzero_si256(); }
CN_INLINE vi vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
CN_INLINE vi vi_set1_8(int8_t x) { return _mm256_set1_epi8(x); }
CN_INLINE vi vi_bcast32(const void *p) { return _mm256_set1_epi32(rd_i32(p)); }
CN_INLINE vi vi_and(vi a, vi b) { return _mm256_and_si256(a, b); }
CN_INLINE vi vi_or(vi a, vi b) { return _mm256_or_si256(a, b); }
CN_INLINE vi vi_xor(vi a, vi b) { return _mm256_xor_si256(a, b); }
CN_INLINE vi vi_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
CN_INLINE vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
CN_INLINE vi vi_mullo(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
#define vi_srli(a, n) _mm256_srli_epi32((a), (n))
#define vi_slli(a, n) _mm256_slli_epi32((a), (n))
#define vi_srai(a, n) _mm256_srai_epi32((a), (n))
#define vi_srli16(a, n) _mm256_srli_epi16((a), (n))
#define vi_slli16(a, n) _mm256_slli_epi16((a), (n))
#define vi_srai16(a, n) _mm256_srai_epi16((a), (n))
/* vpmaddubsw saturates pair sums at ±32767: callers keep u <= 128 and |s| <= 127
 * (every unsigned weight code here is <= 63; Q8_0 goes through vi_dp4_signed). */
CN_INLINE vi vi_dp4(vi acc, vi u, vi s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
CN_INLINE vi vi_dp2w(vi acc, vi a, vi b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
CN_INLINE vi vi_shuffle8(vi a, vi idx) { return _mm256_shuffle_epi8(a, idx); }
CN_INLINE vi vi_or_bit4_where(vi w, vi a, vi m) {
    const vi hit = _mm256_cmpeq_epi8(_mm256_and_si256(a, m), m); /* m has one bit per byte */
    return _mm256_or_si256(w, _mm256_and_si256(hit, _mm256_set1_epi8(0x10)));
}
CN_INLINE vi vi_bcast128(__m128i a) { return _mm256_broadcastsi128_si256(a); }
CN_INLINE vi vi_sllv(vi a, vi n) { return _mm256_sllv_epi32(a, n); }
CN_INLINE vi vi_srlv(vi a, vi n) { return _mm256_srlv_epi32(a, n); }
CN_INLINE vi vi_gather32(const uint8_t *base, vi idx) {
    return _mm256_i32gather_epi32((const int *)(const void *)base, idx, 1);
}
CN_INLINE vi vi_lane_index(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }

CN_INLINE vf vf_zero(void) { return _mm256_setzero_ps(); }
CN_INLINE vf vf_set1(float x) { return _mm256_set1_ps(x); }
CN_INLINE vf vf_cvt(vi a) { return _mm256_cvtepi32_ps(a); }
CN_INLINE vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
CN_INLINE vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
CN_INLINE vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
CN_INLINE vf vf_h2f_lo(vi a) {
    const __m256i p = _mm256_packus_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256());
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08)));
}
CN_INLINE vf vf_h2f_hi(vi a) { return vf_h2f_lo(_mm256_srli_epi32(a, 16)); }
CN_INLINE __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
CN_INLINE void vf_store_n(float *y, vf v, int n) {
    if (n == VL) _mm256_storeu_ps(y, v);
    else _mm256_maskstore_ps(y, lane_mask(n), v);
}
CN_INLINE vf vf_load_n(const float *y, int n) {
    if (n == VL) return _mm256_loadu_ps(y);
    return _mm256_maskload_ps(y, lane_mask(n));
}

CN_INLINE void vi_load_t4(const uint8_t *const *p, size_t off, vi v[4]) {
    vi z[4];
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++)
        z[g] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[g] + off))),
                                       _mm_loadu_si128((const __m128i *)(p[g + 4] + off)), 1);
    const vi t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const vi t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    v[0] = _mm256_unpacklo_epi64(t0, t2);
    v[1] = _mm256_unpackhi_epi64(t0, t2);
    v[2] = _mm256_unpacklo_epi64(t1, t3);
    v[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* ---- float helpers for attention ---- */
CN_INLINE vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
CN_INLINE vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
CN_INLINE vf vf_from_bits(vi a) { return _mm256_castsi256_ps(a); }
CN_INLINE __m256i range_mask(int from, int to) {
    from = from < 0 ? 0 : from > VL ? VL : from;
    to = to < 0 ? 0 : to > VL ? VL : to;
    return _mm256_andnot_si256(lane_mask(from), lane_mask(to));
}
CN_INLINE void vf_store_range(float *p, vf v, int from, int to) { _mm256_maskstore_ps(p, range_mask(from, to), v); }
CN_INLINE vf vf_load_range(const float *p, int from, int to) { return _mm256_maskload_ps(p, range_mask(from, to)); }
CN_INLINE vf vf_keep_range(vf v, int from, int to, float x) {
    return _mm256_blendv_ps(_mm256_set1_ps(x), v, _mm256_castsi256_ps(range_mask(from, to)));
}
CN_INLINE vf vf_if_gt(vf x, float lim, vf v, vf y) {
    return _mm256_blendv_ps(y, v, _mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_GT_OQ));
}
CN_INLINE vf vf_if_ge(vf x, float lim, vf v, vf y) {
    return _mm256_blendv_ps(y, v, _mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_GE_OQ));
}
CN_INLINE vf vf_if_le(vf x, float lim, vf v, vf y) {
    return _mm256_blendv_ps(y, v, _mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_LE_OQ));
}
CN_INLINE vf vf_lookup_h(const float *table, vf x) {
    return _mm256_i32gather_ps(
        table, _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), 4);
}
CN_INLINE vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
CN_INLINE vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
CN_INLINE vf vf_dup_even(vf a) { return _mm256_moveldup_ps(a); }
CN_INLINE vf vf_dup_odd(vf a) { return _mm256_movehdup_ps(a); }
CN_INLINE vf vf_swap_pairs(vf a) { return _mm256_permute_ps(a, 0xB1); }
CN_INLINE vf vf_subadd(vf a, vf b) { return _mm256_addsub_ps(a, b); }
CN_INLINE vf vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
CN_INLINE void vf_storeu(float *p, vf v) { _mm256_storeu_ps(p, v); }
CN_INLINE vf vf_load_h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }
CN_INLINE vf vf_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
CN_INLINE float vf_hsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
CN_INLINE float vf_hmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
CN_INLINE double vf_hsum_d(vf v) {
    const __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                    _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
CN_INLINE vf vf_keep_n(vf v, int n, float x) {
    return _mm256_blendv_ps(_mm256_set1_ps(x), v, _mm256_castsi256_ps(lane_mask(n)));
}
CN_INLINE vf vf_round_h(vf v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
CN_INLINE vf vf_ldexp(vf y, vf n) {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
}
CN_INLINE vf vf_round(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
CN_INLINE vf vf_zero_below(vf x, float lim, vf v) {
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_GE_OQ), v);
}

CN_INLINE vf vf_hsum16(const vf *v) { /* 8 lanes here: r[j] = sum of v[j], j < 8 */
    vf s1[4], s2[2];
    for (int i = 0; i < 4; i++)
        s1[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                              _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++)
        s2[i] = _mm256_add_ps(_mm256_unpacklo_ps(s1[2 * i], s1[2 * i + 1]),
                              _mm256_unpackhi_ps(s1[2 * i], s1[2 * i + 1]));
    const vf r = _mm256_add_ps(_mm256_unpacklo_ps(s2[0], s2[1]), _mm256_unpackhi_ps(s2[0], s2[1]));
    /* lane 4c + l of r holds v[c + {0, 4, 2, 6}[l]] */
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7));
}

#endif

/* e^x to ~2 ulp (Cody-Waite reduction, Cephes' degree-6 polynomial); exactly 0 below
 * -87.3 (and for -inf), +inf above 88.72 (between 88.3 and 88.72: e^88.3). */
CN_INLINE vf vf_exp(vf x) {
    const vf xc = vf_min(vf_max(x, vf_set1(-87.3f)), vf_set1(88.3f)); /* 2^n stays finite */
    const vf n = vf_round(vf_mul(xc, vf_set1(1.44269504088896341f)));
    vf r = vf_fmadd(n, vf_set1(-0.693359375f), xc);
    r = vf_fmadd(n, vf_set1(2.12194440e-4f), r);
    vf p = vf_set1(1.9875691500e-4f);
    p = vf_fmadd(p, r, vf_set1(1.3981999507e-3f));
    p = vf_fmadd(p, r, vf_set1(8.3334519073e-3f));
    p = vf_fmadd(p, r, vf_set1(4.1665795894e-2f));
    p = vf_fmadd(p, r, vf_set1(1.6666665459e-1f));
    p = vf_fmadd(p, r, vf_set1(5.0000001201e-1f));
    const vf y = vf_add(vf_fmadd(vf_mul(p, r), r, r), vf_set1(1.0f));
    return vf_if_gt(x, 88.72f, vf_set1(INFINITY), vf_zero_below(x, -87.3f, vf_ldexp(y, n)));
}

#endif
