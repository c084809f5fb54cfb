/* tensor.h — element formats: the type-traits table (block size, bytes per block, row
 * dequantize, reference row quantize) and half/bfloat conversions. Pure functions, no
 * allocation; the block layouts are GGUF's (ggml's) so files are used in place. The block
 * structs and the per-type row functions are in tensor/quants.h. */
#ifndef CN_TENSOR_H
#define CN_TENSOR_H

#include "core/core.h"

typedef void (*cn_to_float_fn)(const void *src, float *dst, int64_t n_elem);
typedef void (*cn_from_float_fn)(const float *src, void *dst, int64_t n_elem);

typedef struct {
    const char *name;                /* "q4_K", as GGUF tools spell it */
    int64_t block_size;              /* elements per block (1 for F32/F16/BF16) */
    size_t type_size;                /* bytes per block */
    cn_to_float_fn to_float;         /* n_elem a multiple of block_size */
    cn_from_float_fn from_float_ref; /* reference quantizer; NULL if not provided */
} cn_type_traits;

/* NULL for a value that is not a known type. */
const cn_type_traits *cn_type_traits_get(uint32_t type);
/* Bytes of a row of n_elem elements; 0 if n_elem is not a multiple of the block size or
 * the type is unknown or the size overflows. */
uint64_t cn_type_row_bytes(uint32_t type, int64_t n_elem);
/* The type whose traits name is `name` ("q4_K", case-insensitive); false if none. */
bool cn_type_from_name(const char *name, uint32_t *out);

/* The quantizer a model file is written with (`cinder quantize`): for every type it
 * returns, the bytes equal ggml's (llama-quantize's, without an importance matrix).
 * F32/F16/BF16 and the 32-blocks are the traits' reference quantizers; Q4_K/Q5_K/Q6_K
 * ggml's search (quants_search.c), not the bounded ones of the traits. NULL otherwise. */
cn_from_float_fn cn_type_quantizer(uint32_t type);
/* With an importance matrix: ggml's quantize_row_<type>_impl bytes (llama-quantize
 * --imatrix). Quantizes exactly one row of n_elem; qw (n_elem) the column weights. */
typedef void (*cn_from_float_w_fn)(const float *src, void *dst, int64_t n_elem, const float *qw);
/* Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; NULL for a type that takes no weights (Q8_0,
 * F16, ...: ggml ignores them there). */
cn_from_float_w_fn cn_type_quantizer_weighted(uint32_t type);

float cn_f16_to_f32(uint16_t h);
uint16_t cn_f32_to_f16(float f); /* round to nearest even, as numpy's astype(float16) */
/* h[i] = cn_f32_to_f16(x[i]), the same bits; F16C where the CPU has it. */
void cn_f32_to_f16_row(const float *x, uint16_t *h, int64_t n);
float cn_bf16_to_f32(uint16_t h);
uint16_t cn_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

#endif
