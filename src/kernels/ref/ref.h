/* ref.h — the scalar reference kernel family (the spec the SIMD families must match).
 * Internal to src/kernels: the model reaches these only through the cn_kernels table. */
#ifndef CN_KERNELS_REF_H
#define CN_KERNELS_REF_H

#include "kernels/kernels.h"

/* f16 → f32 for every half value, filled once by cn_ref_init (thread-safe, idempotent). */
extern float cn_ref_f16_table[1 << 16];
void cn_ref_init(void);
void cn_ref_matmul_init(void); /* called by cn_ref_init */

static inline float cn_ref_f16(uint16_t h) { return cn_ref_f16_table[h]; }

void cn_ref_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);
void cn_ref_rope_cache(int64_t pos, int32_t n_rot, float base, float freq_scale, const float *freq_factors, float *cs);
void cn_ref_rope(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, const float *cs, cn_rope_mode mode);
void cn_ref_softmax(float *x, int64_t n);
void cn_ref_gated_act(cn_act act, const float *gate, const float *up, float *out, int64_t n);
void cn_ref_quantize_rows(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst, size_t dst_row_bytes,
                          int ith, int nth);
void cn_ref_matmul(const cn_matmul_args *a, int ith, int nth);
void cn_ref_attention(const cn_attn_args *a, int ith, int nth);

/* One row dot product of a weight row (w_type, k elements) with an activation row in
 * cn_matmul_act_type(w_type); exposed for tests of single formats. */
float cn_ref_vec_dot(uint32_t w_type, const void *w, const void *xq, int64_t k);

#endif
