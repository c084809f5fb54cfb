/* quants.h — the block layouts of GGUF's (ggml's) quantized formats and the scalar row
 * functions for each: dequantize (bit-exact with ggml and gguf-py) and a reference
 * quantizer. This is the spec that SIMD kernels are compared with, so it stays plain C:
 * no allocation, no I/O, no dispatch. Kernels may include it for the block structs.
 *
 * Conventions: a "row" is n_elem consecutive elements, n_elem a multiple of the block
 * size (callers check; cn_type_row_bytes says how many bytes a row takes). Half-precision
 * fields are stored as raw IEEE binary16 bits (uint16_t). Inputs to the quantizers are
 * assumed finite; NaN or Inf produce an unspecified block but never undefined behaviour.
 *
 * Dequantization is written as ggml writes it, operation for operation in float32
 * (e.g. (d * sc) * q, then - m), because the tests require bit-exact equality. The
 * tensor files must therefore not be compiled with FP contraction (GCC in -std=c11 mode
 * does not contract; for clang the .c files switch it off with a pragma). */
#ifndef CN_TENSOR_QUANTS_H
#define CN_TENSOR_QUANTS_H

#include <stdint.h>

#define CN_QK4_0 32
#define CN_QK4_1 32
#define CN_QK5_0 32
#define CN_QK5_1 32
#define CN_QK8_0 32
#define CN_QK8_1 32
#define CN_QK_K 256        /* elements per K-quant super-block */
#define CN_K_SCALE_SIZE 12 /* packed 6-bit scales+mins of Q4_K / Q5_K */

/* Q4_0: 32 elements; x[j] = d * (q[j] - 8), q in [0, 15].
 * qs[j] holds element j in its low nibble and element j + 16 in its high nibble. */
typedef struct {
    uint16_t d;               /* f16 scale */
    uint8_t qs[CN_QK4_0 / 2]; /* (16) nibbles */
} cn_block_q4_0;

/* Q4_1: 32 elements; x[j] = d * q[j] + m, q in [0, 15]; nibbles as Q4_0. */
typedef struct {
    uint16_t d;               /* f16 scale */
    uint16_t m;               /* f16 offset (the block minimum) */
    uint8_t qs[CN_QK4_1 / 2]; /* (16) nibbles */
} cn_block_q4_1;

/* Q5_0: 32 elements; x[j] = d * (q[j] - 16), q in [0, 31]. Low 4 bits as Q4_0; bit 4 of
 * element j is bit j of qh read as a little-endian uint32. */
typedef struct {
    uint16_t d;               /* f16 scale */
    uint8_t qh[4];            /* (32 bits) fifth bits */
    uint8_t qs[CN_QK5_0 / 2]; /* (16) low nibbles */
} cn_block_q5_0;

/* Q5_1: 32 elements; x[j] = d * q[j] + m, q in [0, 31]; bits as Q5_0. */
typedef struct {
    uint16_t d;               /* f16 scale */
    uint16_t m;               /* f16 offset */
    uint8_t qh[4];            /* (32 bits) fifth bits */
    uint8_t qs[CN_QK5_1 / 2]; /* (16) low nibbles */
} cn_block_q5_1;

/* Q8_0: 32 elements; x[j] = d * qs[j]. */
typedef struct {
    uint16_t d;          /* f16 scale */
    int8_t qs[CN_QK8_0]; /* (32) */
} cn_block_q8_0;

/* Q8_1: 32 elements; x[j] = d * qs[j]; s = d * sum(qs) (f16), used by dot products
 * against _1 formats. */
typedef struct {
    uint16_t d;          /* f16 scale */
    uint16_t s;          /* f16 d * sum(qs) */
    int8_t qs[CN_QK8_1]; /* (32) */
} cn_block_q8_1;

/* Q2_K: 256 elements in 16 sub-blocks of 16; x = d * sc * q - dmin * m, q in [0, 3],
 * sc = scales[s] & 15, m = scales[s] >> 4 for sub-block s = element / 16.
 * Element e: half h = e / 128, r = e % 128, k = r / 32, l = r % 32;
 * q = (qs[h * 32 + l] >> (2 * k)) & 3. */
typedef struct {
    uint8_t scales[CN_QK_K / 16]; /* (16) 4-bit scale | 4-bit min << 4 */
    uint8_t qs[CN_QK_K / 4];      /* (64) 2-bit quants */
    uint16_t d;                   /* f16 super-block scale of the scales */
    uint16_t dmin;                /* f16 super-block scale of the mins */
} cn_block_q2_K;

/* Q3_K: 256 elements in 16 sub-blocks of 16; x = d * (sc - 32) * q, q in [-4, 3].
 * Element e (h, k, l as Q2_K): low 2 bits (qs[h * 32 + l] >> (2 * k)) & 3; q = low - 4
 * when bit (4 * h + k) of hmask[l] is 0, q = low when it is 1.
 * 6-bit sc of sub-block s: low 4 bits are the low nibble of scales[s] (s < 8) or the
 * high nibble of scales[s - 8] (s >= 8); high 2 bits are (scales[8 + s % 4] >> (2 * (s / 4))) & 3. */
typedef struct {
    uint8_t hmask[CN_QK_K / 8]; /* (32) high bits, see above */
    uint8_t qs[CN_QK_K / 4];    /* (64) low 2 bits */
    uint8_t scales[12];         /* 16 packed 6-bit scales */
    uint16_t d;                 /* f16 super-block scale */
} cn_block_q3_K;

/* Q4_K: 256 elements in 8 sub-blocks of 32; x = d * sc * q - dmin * m, q in [0, 15].
 * Element e: pair p = e / 64, l = e % 32; q = qs[p * 32 + l] low nibble for sub-block
 * 2p, high nibble for 2p + 1. The 6-bit sc/m of sub-block s are packed in scales[12]:
 * s < 4: sc = scales[s] & 63, m = scales[s + 4] & 63;
 * s >= 4: sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4,
 *         m  = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4. */
typedef struct {
    uint16_t d;                      /* f16 super-block scale of the scales */
    uint16_t dmin;                   /* f16 super-block scale of the mins */
    uint8_t scales[CN_K_SCALE_SIZE]; /* 8 packed (sc, m) pairs */
    uint8_t qs[CN_QK_K / 2];         /* (128) nibbles */
} cn_block_q4_K;

/* Q5_K: as Q4_K with q in [0, 31]; bit 4 of element e is bit (e / 32) of qh[e % 32]. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[CN_K_SCALE_SIZE];
    uint8_t qh[CN_QK_K / 8]; /* (32) fifth bits */
    uint8_t qs[CN_QK_K / 2]; /* (128) low nibbles */
} cn_block_q5_K;

/* Q6_K: 256 elements in 16 sub-blocks of 16; x = d * scales[e / 16] * (q - 32), q in
 * [0, 63]. Element e: h = e / 128, k = (e % 128) / 32, l = e % 32;
 * low 4 bits: ql[h * 64 + l + 32 * (k & 1)], low nibble for k < 2, high for k >= 2;
 * high 2 bits: (qh[h * 32 + l] >> (2 * k)) & 3. */
typedef struct {
    uint8_t ql[CN_QK_K / 2];     /* (128) low 4 bits */
    uint8_t qh[CN_QK_K / 4];     /* (64) high 2 bits */
    int8_t scales[CN_QK_K / 16]; /* (16) signed 8-bit sub-block scales */
    uint16_t d;                  /* f16 super-block scale */
} cn_block_q6_K;

/* Q8_K: 256 elements; x[j] = d * qs[j]; bsums[i] = sum of qs[16 i .. 16 i + 15].
 * The activation format for K-quant dot products; d is a plain float. */
typedef struct {
    float d;
    int8_t qs[CN_QK_K];          /* (256) */
    int16_t bsums[CN_QK_K / 16]; /* (16) */
} cn_block_q8_K;

_Static_assert(sizeof(cn_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(cn_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(cn_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(cn_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(cn_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(cn_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(cn_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(cn_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(cn_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(cn_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(cn_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(cn_block_q8_K) == 292, "q8_K block");

/* Row functions: src/dst are rows of n_elem elements (a multiple of the block size).
 * Signatures match cn_to_float_fn / cn_from_float_fn so the traits table points at them.
 * Blocks need no alignment beyond their struct's (2 bytes; 4 for Q8_K). */
void cn_dequant_row_f32(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_f16(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_bf16(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q4_0(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q4_1(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q5_0(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q5_1(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q8_0(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q8_1(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q2_K(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q3_K(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q4_K(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q5_K(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q6_K(const void *src, float *dst, int64_t n_elem);
void cn_dequant_row_q8_K(const void *src, float *dst, int64_t n_elem);

/* Reference quantizers. F16/BF16/Q8_0/Q8_1/Q4_0/Q4_1/Q5_0/Q5_1/Q8_K reproduce ggml's
 * reference quantizers byte for byte; the other K-quants are cinder's own (see
 * quants_k.c for the algorithm and its error bound). */
void cn_quant_row_f32(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_f16(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_bf16(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q4_0(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q4_1(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q5_0(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q5_1(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q8_0(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q8_1(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q2_K(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q3_K(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q4_K(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q5_K(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q6_K(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q8_K(const float *src, void *dst, int64_t n_elem);

/* ggml's search-based reference quantizers (quantize_row_q{4,5,6}_K_ref), byte for byte:
 * what `cinder quantize` writes, so its output matches llama-quantize (quants_search.c). */
void cn_quant_row_q4_K_search(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q5_K_search(const float *src, void *dst, int64_t n_elem);
void cn_quant_row_q6_K_search(const float *src, void *dst, int64_t n_elem);

/* Unpack the 6-bit (scale, min) of sub-block s (0..7) of a Q4_K/Q5_K block. */
static inline void cn_k4_scale_min(const uint8_t *scales, int s, uint8_t *sc, uint8_t *m) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *m = scales[s + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4));
        *m = (uint8_t)((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
    }
}

/* The 6-bit unsigned scale (0..63, stored with +32 bias) of sub-block s (0..15) of Q3_K. */
static inline int cn_q3_K_scale(const uint8_t *scales, int s) {
    int lo = s < 8 ? (scales[s] & 15) : (scales[s - 8] >> 4);
    int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | hi << 4;
}

#endif
