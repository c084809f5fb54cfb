/* test_tensor.c — element formats (src/tensor): the traits table and row sizes, half and
 * bfloat conversions (checked exhaustively or against an independent double-precision
 * model of round-to-nearest-even), and quantize -> dequantize round trips of every
 * quantized format on seeded Gaussian data, each element held to a bound derived from
 * the format (see the comment above each bound). Bit-exactness of the decoders against
 * gguf-py lives in tests/py/test_quants.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor/quants.h"
#include "tensor/tensor.h"

/* ---- helpers ------------------------------------------------------------------- */

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { /* (0, 1) */
    return ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
}

static double rng_gauss(uint64_t *s) { /* Box-Muller */
    return sqrt(-2.0 * log(rng_unit(s))) * cos(6.283185307179586 * rng_unit(s));
}

/* The value of a finite binary16 pattern, computed from the definition in double. */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

typedef struct {
    uint32_t type;
    const char *name;
    int64_t block_size;
    size_t type_size;
} type_row;

/* Expected values from the GGUF / ggml spec (ggml-common.h block structs). */
static const type_row k_types[] = {
    {CN_TYPE_F32, "f32", 1, 4},       {CN_TYPE_F16, "f16", 1, 2},       {CN_TYPE_BF16, "bf16", 1, 2},
    {CN_TYPE_Q4_0, "q4_0", 32, 18},   {CN_TYPE_Q4_1, "q4_1", 32, 20},   {CN_TYPE_Q5_0, "q5_0", 32, 22},
    {CN_TYPE_Q5_1, "q5_1", 32, 24},   {CN_TYPE_Q8_0, "q8_0", 32, 34},   {CN_TYPE_Q8_1, "q8_1", 32, 36},
    {CN_TYPE_Q2_K, "q2_K", 256, 84},  {CN_TYPE_Q3_K, "q3_K", 256, 110}, {CN_TYPE_Q4_K, "q4_K", 256, 144},
    {CN_TYPE_Q5_K, "q5_K", 256, 176}, {CN_TYPE_Q6_K, "q6_K", 256, 210}, {CN_TYPE_Q8_K, "q8_K", 256, 292},
};

/* ---- traits and sizes ---------------------------------------------------------- */

Test(tensor, traits_table_matches_gguf_spec) {
    for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
        const cn_type_traits *t = cn_type_traits_get(k_types[i].type);
        cr_assert_not_null(t, "type %u", k_types[i].type);
        cr_assert_str_eq(t->name, k_types[i].name);
        cr_assert_eq(t->block_size, k_types[i].block_size, "%s", t->name);
        cr_assert_eq(t->type_size, k_types[i].type_size, "%s", t->name);
        cr_assert_not_null(t->to_float, "%s", t->name);
        cr_assert_not_null(t->from_float_ref, "%s", t->name);
        uint32_t back;
        cr_assert(cn_type_from_name(k_types[i].name, &back));
        cr_assert_eq(back, k_types[i].type);
    }
}

Test(tensor, unknown_types_are_null) {
    uint32_t n_known = 0;
    for (uint32_t ty = 0; ty < 1000; ty++) {
        bool known = false;
        for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) known |= k_types[i].type == ty;
        if (known) {
            n_known++;
            continue;
        }
        cr_assert_null(cn_type_traits_get(ty), "type %u", ty);
        cr_assert_eq(cn_type_row_bytes(ty, 256), 0, "type %u", ty);
    }
    cr_assert_eq(n_known, CN_ARRAY_LEN(k_types));
    cr_assert_null(cn_type_traits_get(CN_TYPE_COUNT));
    cr_assert_null(cn_type_traits_get(UINT32_MAX));
    uint32_t out = 77;
    cr_assert(!cn_type_from_name("q9_9", &out));
    cr_assert(!cn_type_from_name("", &out));
    cr_assert(!cn_type_from_name(NULL, &out));
    cr_assert_eq(out, 77);
    cr_assert(cn_type_from_name("Q4_K", &out));
    cr_assert_eq(out, CN_TYPE_Q4_K);
}

Test(tensor, row_bytes_multiples_and_rejections) {
    for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
        const type_row *r = &k_types[i];
        cr_assert_eq(cn_type_row_bytes(r->type, 0), 0);
        for (int64_t k = 1; k <= 5; k++)
            cr_assert_eq(cn_type_row_bytes(r->type, k * r->block_size), (uint64_t)k * r->type_size, "%s x%ld", r->name,
                         (long)k);
        cr_assert_eq(cn_type_row_bytes(r->type, 4096 * r->block_size), 4096u * r->type_size);
        if (r->block_size > 1) {
            cr_assert_eq(cn_type_row_bytes(r->type, 1), 0, "%s", r->name);
            cr_assert_eq(cn_type_row_bytes(r->type, r->block_size - 1), 0, "%s", r->name);
            cr_assert_eq(cn_type_row_bytes(r->type, r->block_size + 1), 0, "%s", r->name);
            cr_assert_eq(cn_type_row_bytes(r->type, 3 * r->block_size + r->block_size / 2), 0);
        }
        cr_assert_eq(cn_type_row_bytes(r->type, -r->block_size), 0, "%s", r->name);
        cr_assert_eq(cn_type_row_bytes(r->type, INT64_MIN), 0, "%s", r->name);
    }
    /* 2^62 f32 elements are 2^64 bytes: one past UINT64_MAX. */
    cr_assert_eq(cn_type_row_bytes(CN_TYPE_F32, INT64_C(1) << 62), 0);
    cr_assert_eq(cn_type_row_bytes(CN_TYPE_F32, (INT64_C(1) << 62) - 1), UINT64_MAX - 3);
    cr_assert_eq(cn_type_row_bytes(CN_TYPE_F32, INT64_MAX), 0);
    cr_assert_eq(cn_type_row_bytes(CN_TYPE_F16, INT64_MAX), (uint64_t)INT64_MAX * 2);
}

/* ---- half precision ------------------------------------------------------------ */

Test(tensor, f16_to_f32_exhaustive_against_definition) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cn_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            if (h & 1023) cr_assert(isnan(f), "0x%04x", h);
            else cr_assert(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0), "0x%04x", h);
            continue;
        }
        cr_assert_eq((double)f, f16_value((uint16_t)h), "0x%04x: %a", h, f);
        cr_assert_eq(signbit(f) != 0, (h & 0x8000) != 0, "0x%04x sign", h);
        /* and every half converts back to itself */
        cr_assert_eq(cn_f32_to_f16(f), h, "round trip 0x%04x", h);
    }
}

/* The row conversion (F16C where present, CINDER_ISA=ref forces the scalar loop) gives
 * cn_f32_to_f16's bits for every float class: all 2^32 patterns in a stride that hits
 * ties, subnormals, the Inf threshold and NaN payloads, plus odd tails. */
Test(tensor, f16_row_matches_scalar) {
    enum { N = 4099 };
    static float x[N];
    static uint16_t h[N];
    uint64_t checked = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)N * 2459) {
        for (int i = 0; i < N; i++) {
            const uint32_t u = (uint32_t)(base + (uint64_t)i * 2459u);
            memcpy(&x[i], &u, 4);
        }
        cn_f32_to_f16_row(x, h, N - (int)(base % 7));
        for (int i = 0; i < N - (int)(base % 7); i++, checked++)
            cr_assert_eq(h[i], cn_f32_to_f16(x[i]), "%a: row 0x%04x scalar 0x%04x", x[i], h[i], cn_f32_to_f16(x[i]));
    }
    const float edge[] = {65504.0f,        65519.99f, 65520.0f, 0x1p-25f, 0x1.000002p-25f,
                          1.0f + 0x1p-11f, -0.0f,     INFINITY, -NAN};
    for (size_t i = 0; i < CN_ARRAY_LEN(edge); i++) x[i] = edge[i];
    cn_f32_to_f16_row(x, h, CN_ARRAY_LEN(edge));
    for (size_t i = 0; i < CN_ARRAY_LEN(edge); i++) cr_assert_eq(h[i], cn_f32_to_f16(edge[i]), "%a", edge[i]);
    cr_assert_gt(checked, 1000000u);
}

Test(tensor, f16_edge_values) {
    cr_assert_eq(cn_f16_to_f32(0x3c00), 1.0f);
    cr_assert_eq(cn_f16_to_f32(0xc000), -2.0f);
    cr_assert_eq(cn_f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(cn_f16_to_f32(0x0001), 0x1p-24f);        /* smallest subnormal */
    cr_assert_eq(cn_f16_to_f32(0x03ff), 1023 * 0x1p-24f); /* largest subnormal */
    cr_assert_eq(cn_f16_to_f32(0x0400), 0x1p-14f);        /* smallest normal */

    /* ties round to even */
    cr_assert_eq(cn_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);            /* 1.0 | 1+2^-10: to 1.0 */
    cr_assert_eq(cn_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);        /* to 1+2^-9 */
    cr_assert_eq(cn_f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01); /* just past a tie */
    cr_assert_eq(cn_f32_to_f16(-(1.0f + 0x1p-11f)), 0xbc00);
    /* subnormal results and their ties */
    cr_assert_eq(cn_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(cn_f32_to_f16(0x1p-25f), 0x0000); /* tie with 0: even */
    cr_assert_eq(cn_f32_to_f16(0x1.000002p-25f), 0x0001);
    cr_assert_eq(cn_f32_to_f16(3 * 0x1p-25f), 0x0002);       /* 1.5 ulp: to 2 */
    cr_assert_eq(cn_f32_to_f16(5 * 0x1p-25f), 0x0002);       /* 2.5 ulp: to 2 */
    cr_assert_eq(cn_f32_to_f16(1023.5f * 0x1p-24f), 0x0400); /* up into the normals */
    cr_assert_eq(cn_f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);
    cr_assert_eq(cn_f32_to_f16(1e-30f), 0x0000);
    cr_assert_eq(cn_f32_to_f16(-1e-30f), 0x8000);
    cr_assert_eq(cn_f32_to_f16(0x1p-149f), 0x0000); /* a float subnormal */
    cr_assert_eq(cn_f32_to_f16(-0.0f), 0x8000);
    /* overflow: 65520 is the tie between 65504 and 2^16, odd mantissa: up to Inf */
    cr_assert_eq(cn_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(cn_f32_to_f16(65519.996f), 0x7bff);
    cr_assert_eq(cn_f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(cn_f32_to_f16(1e10f), 0x7c00);
    cr_assert_eq(cn_f32_to_f16(-1e10f), 0xfc00);
    cr_assert_eq(cn_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(cn_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert(isinf(cn_f16_to_f32(0x7c00)) && cn_f16_to_f32(0x7c00) > 0);
    cr_assert(isinf(cn_f16_to_f32(0xfc00)) && cn_f16_to_f32(0xfc00) < 0);
    /* NaN stays NaN (never Inf), keeps its sign, comes back quiet */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < CN_ARRAY_LEN(nans); i++) {
        uint16_t h = cn_f32_to_f16(u2f(nans[i]));
        cr_assert_eq(h & 0x7c00, 0x7c00, "nan 0x%08x -> 0x%04x", nans[i], h);
        cr_assert(h & 0x0200, "quiet bit, nan 0x%08x -> 0x%04x", nans[i], h);
        cr_assert_eq((h & 0x8000) != 0, (nans[i] >> 31) != 0);
        cr_assert(isnan(cn_f16_to_f32(h)));
    }
    cr_assert_eq(cn_f32_to_f16(u2f(0x7fc00000u)), 0x7e00);
}

/* Every f32 -> f16 result is the nearest half (ties to even), checked in double against
 * the neighbouring halves, for random bit patterns spread over the whole f16 range. */
Test(tensor, f32_to_f16_is_nearest_even) {
    uint64_t s = 42;
    for (int i = 0; i < 400000; i++) {
        /* exponents from below the subnormal range to past the overflow threshold */
        uint32_t exp = 100 + (uint32_t)(rng_next(&s) % 45);
        uint32_t bits = (uint32_t)(rng_next(&s) & 0x807fffffu) | exp << 23;
        if (i % 4 == 0) /* land exactly on or next to half-way points */
            bits = (bits & ~0xfffu) | (uint32_t[]){0x1000, 0xfff, 0x1001, 0}[i % 16 / 4];
        float f = u2f(bits);
        double x = fabs((double)f);
        uint16_t h = cn_f32_to_f16(f);
        cr_assert_eq((h & 0x8000) != 0, (bits >> 31) != 0, "sign of %a", f);
        uint16_t a = h & 0x7fff;
        if (a == 0x7c00) { /* Inf only from 65520 up */
            cr_assert(x >= 65520.0, "%a became Inf", f);
            continue;
        }
        cr_assert(a < 0x7c00, "%a -> 0x%04x", f, h);
        double v = f16_value(a);
        double up = a == 0x7bff ? 65536.0 : f16_value(a + 1);
        double down = a == 0 ? -f16_value(1) : f16_value(a - 1);
        double err = fabs(x - v);
        cr_assert(err <= fabs(up - x) && err <= fabs(x - down), "%a -> 0x%04x not nearest", f, h);
        if (err == fabs(up - x) || (a > 0 && err == fabs(x - down)))
            cr_assert_eq(a & 1, 0, "%a tie -> odd 0x%04x", f, h);
    }
}

Test(tensor, bf16_conversions) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cn_bf16_to_f32((uint16_t)h);
        cr_assert_eq(f2u(f), h << 16);
        if (!isnan(f)) cr_assert_eq(cn_f32_to_bf16(f), h, "round trip 0x%04x", h);
    }
    cr_assert_eq(cn_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even below */
    cr_assert_eq(cn_f32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, even above */
    cr_assert_eq(cn_f32_to_bf16(u2f(0x3f808001u)), 0x3f81);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x3f807fffu)), 0x3f80);
    cr_assert_eq(cn_f32_to_bf16(u2f(0xbf818000u)), 0xbf82);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x00008000u)), 0x0000); /* subnormal tie */
    cr_assert_eq(cn_f32_to_bf16(u2f(0x00018000u)), 0x0002);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to Inf */
    cr_assert_eq(cn_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(cn_f32_to_bf16(-INFINITY), 0xff80);
    cr_assert_eq(cn_f32_to_bf16(-0.0f), 0x8000);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x7f800001u)), 0x7fc0); /* sNaN: quiet, not Inf */
    cr_assert_eq(cn_f32_to_bf16(u2f(0xffc00000u)), 0xffc0);
    cr_assert_eq(cn_f32_to_bf16(u2f(0x7fffffffu)), 0x7fff); /* no carry into the sign */
}

/* ---- quantize -> dequantize round trips ------------------------------------------ */

#define N_ROWS 64
#define ROW_LEN 1024 /* 4 K-quant super-blocks, 32 blocks of 32 */

/* Test data: N_ROWS rows of Gaussian values, each row with its own scale 2^-3 .. 2^3,
 * plus rows that stress the formats: all positive, all negative, a row whose first
 * half is 1000x smaller than the second (tiny sub-blocks beside large ones), one large
 * outlier per block. */
static float *gaussian_rows(uint64_t seed) {
    float *x = cn_alloc_aligned(sizeof(float) * N_ROWS * ROW_LEN);
    cr_assert_not_null(x);
    uint64_t s = seed;
    for (int r = 0; r < N_ROWS; r++) {
        double scale = ldexp(1.0, (int)(rng_next(&s) % 7) - 3);
        for (int j = 0; j < ROW_LEN; j++) x[r * ROW_LEN + j] = (float)(rng_gauss(&s) * scale);
    }
    for (int j = 0; j < ROW_LEN; j++) {
        x[0 * ROW_LEN + j] = fabsf(x[0 * ROW_LEN + j]) + 0.5f;
        x[1 * ROW_LEN + j] = -fabsf(x[1 * ROW_LEN + j]) - 0.5f;
        if (j < ROW_LEN / 2) x[2 * ROW_LEN + j] *= 1e-3f;
        if (j % 32 == 7) x[3 * ROW_LEN + j] *= 20.0f;
    }
    return x;
}

static double max_abs(const float *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Rounding error of storing v as an f16 (nearest even): half an ulp, 2^-11 relative for
 * normal halves and 2^-25 absolute for subnormal ones. */
static double f16_err(double v) { return fmax(fabs(v) * 0x1p-11, 0x1p-25); }

/* The largest value the K-quantizers' round-up of v >= 0 to an f16 can give. */
static double f16_up(double v) { return v + fmax(v * 0x1p-10, 0x1p-24); }

/* Per-element bound for x[i] (index within its row) of the given format. Each formula is
 * the worst case of the quantizer's algorithm (see quants_legacy.c, quants_k.c), with
 * the rounding of the scales stored as f16; eps covers float32 arithmetic. */
static double elem_bound(uint32_t type, const float *row, int i) {
    const int b32 = i / 32 * 32, b256 = i / 256 * 256;
    const double eps = 2e-6 * max_abs(row + b256, 256);
    double mn = INFINITY, mx = -INFINITY;
    for (int j = b32; j < b32 + 32; j++) {
        mn = fmin(mn, row[j]);
        mx = fmax(mx, row[j]);
    }
    const double amax32 = max_abs(row + b32, 32), x = fabs((double)row[i]);
    switch (type) {
    case CN_TYPE_F16: /* half an ulp, subnormal halves included (row 2 has some) */ return f16_err(x);
    case CN_TYPE_BF16: /* half an ulp of an 8-bit significand */ return x * 0x1p-8;
    case CN_TYPE_Q8_0:
    case CN_TYPE_Q8_1: /* d = amax/127: half a step, plus |q| <= 127 times d's f16 error */
        return amax32 / 127 / 2 + 127 * f16_err(amax32 / 127) + eps;
    case CN_TYPE_Q4_0: /* d = -extreme/8: the opposite side clips at +7, one full step */
        return amax32 / 8 + 8 * f16_err(amax32 / 8) + eps;
    case CN_TYPE_Q5_0: return amax32 / 16 + 16 * f16_err(amax32 / 16) + eps;
    case CN_TYPE_Q4_1: /* d = range/15: half a step; d and the min each rounded to f16 */
        return (mx - mn) / 15 / 2 + 15 * f16_err((mx - mn) / 15) + f16_err(mn) + eps;
    case CN_TYPE_Q5_1: return (mx - mn) / 31 / 2 + 31 * f16_err((mx - mn) / 31) + f16_err(mn) + eps;
    case CN_TYPE_Q8_K: /* d = extreme/-127 kept as a float: half a step */
        return max_abs(row + b256, 256) / 127 / 2 + eps;
    case CN_TYPE_Q3_K:
    case CN_TYPE_Q6_K: { /* one full step (clip at +Q), step <= amax_sub/(Q+1) + d */
        const int qn = type == CN_TYPE_Q3_K ? 4 : 32, smax = type == CN_TYPE_Q3_K ? 31 : 127;
        const double d = f16_up(max_abs(row + b256, 256) / qn / smax);
        return max_abs(row + i / 16 * 16, 16) / qn + d + eps;
    }
    default: { /* Q2_K, Q4_K, Q5_K: half a step of a grid that covers [min(0, lo), hi] */
        const int n_sub = type == CN_TYPE_Q2_K ? 16 : 8, len = 256 / n_sub;
        const int qmax = type == CN_TYPE_Q2_K ? 3 : type == CN_TYPE_Q4_K ? 15 : 31;
        const int smax = type == CN_TYPE_Q2_K ? 15 : 63;
        double mneed_max = 0, range_max = 0, range_i = 0;
        for (int s = 0; s < n_sub; s++) {
            const float *xs = row + b256 + s * len;
            double lo = 0, hi = xs[0];
            for (int j = 0; j < len; j++) {
                lo = fmin(lo, xs[j]);
                hi = fmax(hi, xs[j]);
            }
            mneed_max = fmax(mneed_max, -lo);
            range_max = fmax(range_max, hi - lo);
            if (s == (i - b256) / len) range_i = hi - lo;
        }
        const double dmin = f16_up(mneed_max / smax);
        const double d = f16_up((range_max + dmin) / qmax / smax);
        return ((range_i + dmin) / qmax + d) / 2 + eps;
    }
    }
}

/* Round-trip each row; check every element against its bound and the RMSE relative to
 * the RMS of the data against rmse_max. */
static void check_round_trip(uint32_t type, double rmse_max) {
    const cn_type_traits *t = cn_type_traits_get(type);
    cr_assert_not_null(t);
    float *x = gaussian_rows(1000 + type);
    uint8_t *q = cn_alloc_aligned(cn_type_row_bytes(type, ROW_LEN));
    float *y = cn_alloc_aligned(sizeof(float) * ROW_LEN);
    cr_assert(q && y);
    double err2 = 0, sig2 = 0;
    for (int r = 0; r < N_ROWS; r++) {
        const float *row = x + r * ROW_LEN;
        t->from_float_ref(row, q, ROW_LEN);
        t->to_float(q, y, ROW_LEN);
        double row_err2 = 0, row_sig2 = 0;
        for (int i = 0; i < ROW_LEN; i++) {
            double e = fabs((double)y[i] - row[i]);
            double b = elem_bound(type, row, i);
            cr_assert(e <= b, "%s row %d elem %d: x=%a y=%a err=%.3g > bound %.3g", t->name, r, i, row[i], y[i], e, b);
            row_err2 += e * e;
            row_sig2 += (double)row[i] * row[i];
        }
        if (r >= 4) { /* RMSE over the plain Gaussian rows, each normalized to its scale */
            err2 += row_err2 / row_sig2;
            sig2 += 1;
        }
    }
    double rel_rmse = sqrt(err2 / sig2);
    cr_log_info("%s relative RMSE %.5f (bound %.5f)", t->name, rel_rmse, rmse_max);
    cr_assert(rel_rmse <= rmse_max, "%s relative RMSE %.5f > %.5f", t->name, rel_rmse, rmse_max);
    cn_free_aligned(x);
    cn_free_aligned(q);
    cn_free_aligned(y);
}

/* RMSE bounds (relative to each row's sigma). Uniform rounding noise of step D has RMS
 * D/sqrt(12). For N(0,1) data the expected extreme of 32 values is ~2.1 sigma and the
 * expected range ~4.1 sigma (16 values: ~1.8 and ~3.5; 256 values: extreme ~3). So:
 *   format  step D             estimate  measured  bound
 *   Q8_0    2.1/127            0.0048    0.0054    0.0065
 *   Q8_K    3/127              0.0068    0.0070    0.0090
 *   Q6_K    1.8/32 (+ scales)  0.016     0.019     0.024
 *   Q5_0    2.1/16 (+ clip)    0.038     0.043     0.050
 *   Q5_1    4.1/31             0.038     0.038     0.048
 *   Q5_K    4.1/31 (+ min)     0.038     0.039     0.050
 *   Q4_0    2.1/8 (+ clip)     0.076     0.086     0.100
 *   Q4_1    4.1/15             0.079     0.078     0.099
 *   Q4_K    4.1/15 (+ min)     0.079     0.080     0.100
 *   Q3_K    1.8/4 (+ clip)     0.13      0.157     0.19
 *   Q2_K    3.5/3 (+ min)      0.34      0.356     0.43
 * "+ clip": the side opposite the extreme loses its last level; "+ min": the grid's
 * range also grows by the rounded-up min and scales. Bounds are ~20% above the measured
 * values (the data is seeded, so they do not flake); a quantizer change that loses
 * more than that fails here. --verbose prints the measured values. */
Test(tensor, round_trip_f16) { check_round_trip(CN_TYPE_F16, 0x1p-11); }
Test(tensor, round_trip_bf16) { check_round_trip(CN_TYPE_BF16, 0x1p-8); }
Test(tensor, round_trip_q8_0) { check_round_trip(CN_TYPE_Q8_0, 0.0065); }
Test(tensor, round_trip_q8_1) { check_round_trip(CN_TYPE_Q8_1, 0.0065); }
Test(tensor, round_trip_q8_K) { check_round_trip(CN_TYPE_Q8_K, 0.0090); }
Test(tensor, round_trip_q5_0) { check_round_trip(CN_TYPE_Q5_0, 0.050); }
Test(tensor, round_trip_q5_1) { check_round_trip(CN_TYPE_Q5_1, 0.048); }
Test(tensor, round_trip_q4_0) { check_round_trip(CN_TYPE_Q4_0, 0.100); }
Test(tensor, round_trip_q4_1) { check_round_trip(CN_TYPE_Q4_1, 0.099); }
Test(tensor, round_trip_q6_K) { check_round_trip(CN_TYPE_Q6_K, 0.024); }
Test(tensor, round_trip_q5_K) { check_round_trip(CN_TYPE_Q5_K, 0.050); }
Test(tensor, round_trip_q4_K) { check_round_trip(CN_TYPE_Q4_K, 0.100); }
Test(tensor, round_trip_q3_K) { check_round_trip(CN_TYPE_Q3_K, 0.19); }
Test(tensor, round_trip_q2_K) { check_round_trip(CN_TYPE_Q2_K, 0.43); }

/* ---- special inputs ------------------------------------------------------------ */

Test(tensor, zeros_round_trip_exactly) {
    float x[512] = {0}, y[512];
    uint8_t q[2048];
    for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
        const cn_type_traits *t = cn_type_traits_get(k_types[i].type);
        memset(y, 0x55, sizeof y);
        t->from_float_ref(x, q, 512);
        t->to_float(q, y, 512);
        for (int j = 0; j < 512; j++) cr_assert_eq(y[j], 0.0f, "%s elem %d: %a", t->name, j, y[j]);
    }
}

/* The activation formats' extra fields: Q8_K's bsums are the sums of its 16-element
 * groups, Q8_1's s is d * sum(qs). */
Test(tensor, q8_K_block_sums_and_q8_1_sum) {
    float x[256];
    uint64_t s = 7;
    for (int j = 0; j < 256; j++) x[j] = (float)rng_gauss(&s);
    cn_block_q8_K b;
    cn_quant_row_q8_K(x, &b, 256);
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) sum += b.qs[g * 16 + j];
        cr_assert_eq(b.bsums[g], sum, "group %d", g);
    }
    cn_block_q8_1 c;
    cn_quant_row_q8_1(x, &c, 32);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += c.qs[j];
    /* s is d * sum with d before its f16 rounding (as ggml); compare within f16 precision */
    double want = sum * (max_abs(x, 32) / 127);
    cr_assert(fabs(cn_f16_to_f32(c.s) - want) <= fabs(want) * 0x1p-10 + 1e-6, "s %g vs %g", cn_f16_to_f32(c.s), want);
}

/* Non-finite inputs give some block, never undefined behaviour (run under UBSan), and
 * reach no other block: a block whose inputs are all finite quantizes to the same bytes
 * as it does with the non-finite values replaced by zeros; the formats of one element
 * per block keep NaN and the infinities. Arbitrary bytes decode without faults, and block
 * by block as the GGUF layout (k_types) says: output block k (block_size elements) reads
 * bytes [k * type_size, (k + 1) * type_size) of the row and nothing past its end. */
Test(tensor, non_finite_and_random_bytes_stay_in_their_block) {
    enum { N = 1024, N_BYTES = 4 * N }; /* 4 super-blocks; f32 is the largest row */
    static float x[N], x_clean[N], y[N], y2[N];
    static uint8_t q[N_BYTES], q_clean[N_BYTES];
    uint64_t s = 3;
    for (int j = 0; j < N; j++) x[j] = x_clean[j] = (float)rng_gauss(&s);
    /* super-blocks 0 and 1 get non-finite values, 2 and 3 stay finite */
    const int bad[] = {3, 40, 300, 301};
    x[3] = NAN;
    x[40] = INFINITY;
    x[300] = -INFINITY;
    x[301] = -NAN;
    for (size_t i = 0; i < CN_ARRAY_LEN(bad); i++) x_clean[bad[i]] = 0.0f;
    for (size_t i = 0; i < CN_ARRAY_LEN(k_types); i++) {
        const type_row *r = &k_types[i];
        const cn_type_traits *t = cn_type_traits_get(r->type);
        const int64_t n_blocks = N / r->block_size;
        const size_t row_bytes = (size_t)n_blocks * r->type_size;
        cr_assert_eq(cn_type_row_bytes(r->type, N), row_bytes, "%s", r->name);

        memset(q, 0, sizeof q);
        memset(q_clean, 0, sizeof q_clean);
        t->from_float_ref(x, q, N);
        t->from_float_ref(x_clean, q_clean, N);
        int n_compared = 0;
        for (int64_t b = 0; b < n_blocks; b++) {
            bool finite = true;
            for (int64_t j = 0; j < r->block_size; j++) finite &= isfinite(x[b * r->block_size + j]) != 0;
            if (!finite) continue;
            cr_assert(!memcmp(q + b * r->type_size, q_clean + b * r->type_size, r->type_size),
                      "%s block %ld: non-finite input elsewhere changed it", r->name, (long)b);
            n_compared++;
        }
        cr_assert_geq(n_compared, n_blocks / 2, "%s", r->name);
        t->to_float(q, y, N);
        if (r->block_size == 1)
            cr_assert(isnan(y[3]) && y[40] == INFINITY && y[300] == -INFINITY && isnan(y[301]), "%s: %a %a %a %a",
                      r->name, y[3], y[40], y[300], y[301]);

        for (size_t j = 0; j < sizeof q; j++) q[j] = (uint8_t)rng_next(&s);
        t->to_float(q, y, N);
        const int64_t k = (int64_t)(rng_next(&s) % (uint64_t)n_blocks);
        for (size_t j = 0; j < r->type_size; j++) q[k * r->type_size + j] ^= 0xff;
        for (size_t j = row_bytes; j < sizeof q; j++) q[j] ^= 0xff;
        t->to_float(q, y2, N);
        bool block_k_changed = false;
        for (int e = 0; e < N; e++) {
            const bool same = !memcmp(&y[e], &y2[e], sizeof(float));
            if (e / r->block_size == k) block_k_changed |= !same;
            else
                cr_assert(same, "%s elem %d changed with the bytes of block %ld: %a -> %a", r->name, e, (long)k, y[e],
                          y2[e]);
        }
        cr_assert(block_k_changed, "%s: block %ld ignores its own bytes", r->name, (long)k);
    }
}

/* Hand-built blocks, decoded by the layout documented in quants.h. */
Test(tensor, hand_built_blocks_decode_per_layout) {
    float y[256];

    cn_block_q4_0 a = {.d = cn_f32_to_f16(0.5f)};
    a.qs[3] = 0x9f; /* element 3: 15 - 8 = 7, element 19: 9 - 8 = 1 */
    cn_dequant_row_q4_0(&a, y, 32);
    cr_assert_eq(y[3], 3.5f);
    cr_assert_eq(y[19], 0.5f);
    cr_assert_eq(y[0], -4.0f);

    cn_block_q5_0 b = {.d = cn_f32_to_f16(1.0f), .qh = {0x00, 0x00, 0x02, 0x00}};
    b.qs[1] = 0x30; /* element 17: high nibble 3, qh bit 17 set: 16 + 3 - 16 = 3 */
    cn_dequant_row_q5_0(&b, y, 32);
    cr_assert_eq(y[17], 3.0f);
    cr_assert_eq(y[1], -16.0f);

    cn_block_q4_K c = {.d = cn_f32_to_f16(1.0f), .dmin = cn_f32_to_f16(0.25f)};
    /* sub-block 5: sc = (scales[9] & 15) | (scales[1] >> 6) << 4 = 3 | 2 << 4 = 35,
     * m = (scales[9] >> 4) | (scales[5] >> 6) << 4 = 1 | 1 << 4 = 17 */
    c.scales[9] = 0x13;
    c.scales[1] = 0x80;
    c.scales[5] = 0x40;
    c.qs[2 * 32 + 4] = 0x70; /* sub-block 5 = pair 2 high nibble, element 5 * 32 + 4 */
    cn_dequant_row_q4_K(&c, y, 256);
    cr_assert_eq(y[5 * 32 + 4], 35.0f * 7 - 0.25f * 17);
    cr_assert_eq(y[4 * 32 + 4], 0.0f);       /* sub-block 4: sc = 0, m = 0 */
    cr_assert_eq(y[1 * 32 + 0], -0.25f * 0); /* sub-block 1: m = scales[5] & 63 = 0 */

    cn_block_q6_K e = {.d = cn_f32_to_f16(2.0f)};
    /* element 128 + 96 + 5 = 229: h = 1, k = 3: low = high nibble of ql[64 + 5 + 32],
     * high = (qh[32 + 5] >> 6) & 3, scale 229 / 16 = 14 */
    e.ql[101] = 0xa0;
    e.qh[37] = 0x80;
    e.scales[14] = -3;
    cn_dequant_row_q6_K(&e, y, 256);
    cr_assert_eq(y[229], 2.0f * -3 * ((0xa | 2 << 4) - 32));

    cn_block_q3_K f = {.d = cn_f32_to_f16(1.0f)};
    /* sub-block 13: low 4 bits = scales[5] >> 4, high 2 bits = (scales[9] >> 6) & 3 */
    f.scales[5] = 0x70;
    f.scales[9] = 0x80; /* 6-bit scale 7 | 2 << 4 = 39 -> 39 - 32 = 7 */
    /* element 13 * 16 + 3 = 211: h = 1, k = 2, l = 19; low 2 bits 3, hmask bit 6 set */
    f.qs[32 + 19] = 3 << 4;
    f.hmask[19] = 1 << 6;
    cn_dequant_row_q3_K(&f, y, 256);
    cr_assert_eq(y[211], 7.0f * 3);
    cr_assert_eq(y[210], 7.0f * -4); /* hmask bit clear, low bits 0: q = -4 */
}
