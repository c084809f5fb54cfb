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
CN_INLINE vi vi_gather32(const uint8_t *base, vi idx) {
    return _mm512_i32gather_epi32(idx, (const void *)base, 1);
}
CN_INLINE vi vi_lane_index(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

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
        z[g] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p[g] + off))),
            _mm_loadu_si128((const __m128i *)(p[g + 4] + off)), 1);
    const vi t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const vi t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
    v[0] = _mm256_unpacklo_epi64(t0, t2);
    v[1] = _mm256_unpackhi_epi64(t0, t2);
    v[2] = _mm256_unpacklo_epi64(t1, t3);
    v[3] = _mm256_unpackhi_epi64(t1, t3);
}

#endif

#endif
