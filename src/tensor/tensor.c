/* tensor.c — the type-traits table (one static const row per format, indexed by the
 * GGUF type number), row sizes with checked arithmetic, and the rows of the plain float
 * formats. The quantized rows live in quants_legacy.c and quants_k.c. */
#include <string.h>
#include <strings.h>

#include "tensor/quants.h"
#include "tensor/tensor.h"

static const cn_type_traits k_traits[CN_TYPE_COUNT] = {
    /* clang-format off */
    [CN_TYPE_F32]  = {"f32",  1,          4,                     cn_dequant_row_f32,  cn_quant_row_f32},
    [CN_TYPE_F16]  = {"f16",  1,          2,                     cn_dequant_row_f16,  cn_quant_row_f16},
    [CN_TYPE_BF16] = {"bf16", 1,          2,                     cn_dequant_row_bf16, cn_quant_row_bf16},
    [CN_TYPE_Q4_0] = {"q4_0", CN_QK4_0,   sizeof(cn_block_q4_0), cn_dequant_row_q4_0, cn_quant_row_q4_0},
    [CN_TYPE_Q4_1] = {"q4_1", CN_QK4_1,   sizeof(cn_block_q4_1), cn_dequant_row_q4_1, cn_quant_row_q4_1},
    [CN_TYPE_Q5_0] = {"q5_0", CN_QK5_0,   sizeof(cn_block_q5_0), cn_dequant_row_q5_0, cn_quant_row_q5_0},
    [CN_TYPE_Q5_1] = {"q5_1", CN_QK5_1,   sizeof(cn_block_q5_1), cn_dequant_row_q5_1, cn_quant_row_q5_1},
    [CN_TYPE_Q8_0] = {"q8_0", CN_QK8_0,   sizeof(cn_block_q8_0), cn_dequant_row_q8_0, cn_quant_row_q8_0},
    [CN_TYPE_Q8_1] = {"q8_1", CN_QK8_1,   sizeof(cn_block_q8_1), cn_dequant_row_q8_1, cn_quant_row_q8_1},
    [CN_TYPE_Q2_K] = {"q2_K", CN_QK_K,    sizeof(cn_block_q2_K), cn_dequant_row_q2_K, cn_quant_row_q2_K},
    [CN_TYPE_Q3_K] = {"q3_K", CN_QK_K,    sizeof(cn_block_q3_K), cn_dequant_row_q3_K, cn_quant_row_q3_K},
    [CN_TYPE_Q4_K] = {"q4_K", CN_QK_K,    sizeof(cn_block_q4_K), cn_dequant_row_q4_K, cn_quant_row_q4_K},
    [CN_TYPE_Q5_K] = {"q5_K", CN_QK_K,    sizeof(cn_block_q5_K), cn_dequant_row_q5_K, cn_quant_row_q5_K},
    [CN_TYPE_Q6_K] = {"q6_K", CN_QK_K,    sizeof(cn_block_q6_K), cn_dequant_row_q6_K, cn_quant_row_q6_K},
    [CN_TYPE_Q8_K] = {"q8_K", CN_QK_K,    sizeof(cn_block_q8_K), cn_dequant_row_q8_K, cn_quant_row_q8_K},
    /* clang-format on */
};

const cn_type_traits *cn_type_traits_get(uint32_t type) {
    if (type >= CN_TYPE_COUNT || k_traits[type].name == NULL) return NULL;
    return &k_traits[type];
}

const char *cn_type_name(cn_type t) {
    const cn_type_traits *tr = cn_type_traits_get((uint32_t)t);
    return tr ? tr->name : NULL;
}

uint64_t cn_type_row_bytes(uint32_t type, int64_t n_elem) {
    const cn_type_traits *t = cn_type_traits_get(type);
    if (t == NULL || n_elem < 0 || n_elem % t->block_size != 0) return 0;
    uint64_t n_bytes;
    if (!cn_mul_ok((uint64_t)(n_elem / t->block_size), t->type_size, &n_bytes)) return 0;
    return n_bytes;
}

bool cn_type_from_name(const char *name, uint32_t *out) {
    if (name == NULL) return false;
    for (uint32_t i = 0; i < CN_TYPE_COUNT; i++) {
        if (k_traits[i].name != NULL && strcasecmp(k_traits[i].name, name) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

void cn_dequant_row_f32(const void *src, float *dst, int64_t n_elem) {
    memcpy(dst, src, (size_t)n_elem * sizeof(float));
}

void cn_quant_row_f32(const float *src, void *dst, int64_t n_elem) { memcpy(dst, src, (size_t)n_elem * sizeof(float)); }

/* The half rows go through memcpy per element: a row inside a mapped file need not be
 * 2-byte aligned. */
void cn_dequant_row_f16(const void *src, float *dst, int64_t n_elem) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n_elem; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = cn_f16_to_f32(h);
    }
}

void cn_quant_row_f16(const float *src, void *dst, int64_t n_elem) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n_elem; i++) {
        uint16_t h = cn_f32_to_f16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void cn_dequant_row_bf16(const void *src, float *dst, int64_t n_elem) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n_elem; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = cn_bf16_to_f32(h);
    }
}

void cn_quant_row_bf16(const float *src, void *dst, int64_t n_elem) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n_elem; i++) {
        uint16_t h = cn_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}
