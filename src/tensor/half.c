/* half.c — IEEE binary16 and bfloat16 <-> binary32 conversions, in integer arithmetic
 * so the result never depends on the FPU's rounding mode or on F16C being present.
 * f32 -> f16 rounds to nearest even like numpy's astype(float16): subnormal halves are
 * produced exactly, values from 65520 up become Inf, NaN stays NaN (sign kept, payload
 * truncated, quiet bit set, as the F16C instruction does). f32 -> bf16 is ggml's rule. */
#include <string.h>

#include "core/cpu.h"
#include "tensor/tensor.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float cn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* Inf, NaN: payload moves up unchanged */
        return bits_f32(sign | 0x7f800000u | mant << 13);
    if (exp != 0) return bits_f32(sign | (exp + 112) << 23 | mant << 13);
    if (mant == 0) return bits_f32(sign);
    /* subnormal: mant * 2^-24; normalise so the leading 1 lands on bit 10 */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return bits_f32(sign | e << 23 | (mant & 0x3ffu) << 13);
}

uint16_t cn_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (halfway past 65504, ties to even = up): Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* a normal half: rebias, then round 13 dropped bits */
        uint32_t h = (ax >> 13) - (112u << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is the right answer */
        return (uint16_t)(sign | h);
    }
    /* below 2^-14: a subnormal half m * 2^-24, m = round(value * 2^24) */
    uint32_t exp = ax >> 23;
    if (exp < 102) /* value < 2^-25 (float subnormals included): rounds to zero */
        return sign;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u; /* value = mant * 2^(exp - 150) */
    uint32_t shift = 126 - exp;                   /* 14 .. 24 */
    uint32_t m = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) m++; /* m == 0x400 is the smallest normal half, encoded the same way */
    return (uint16_t)(sign | m);
}

float cn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t cn_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#if defined(__x86_64__)
/* 8 at a time with F16C (RNE, the same bits as cn_f32_to_f16, NaN included); only
 * called when cn_cpu_get() reports f16c. */
__attribute__((target("avx,f16c"))) static void f32_to_f16_row_f16c(const float *x, uint16_t *h, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) h[i] = cn_f32_to_f16(x[i]);
}
#endif

void cn_f32_to_f16_row(const float *x, uint16_t *h, int64_t n) {
#if defined(__x86_64__)
    if (cn_cpu_get()->f16c) {
        f32_to_f16_row_f16c(x, h, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) h[i] = cn_f32_to_f16(x[i]);
}
