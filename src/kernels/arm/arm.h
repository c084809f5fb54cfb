/* arm.h — the NEON kernel family for arm64 (baseline armv8-a Advanced SIMD: no dotprod,
 * i8mm or fp16 arithmetic, so no -march flag and no run-time feature check beyond
 * being on aarch64). Every entry is bit-identical to ref (kernels/ref): the integer
 * parts are exact and the float operations are ref's, in ref's order, lane by lane.
 * Like ref, these files rely on -std=c11, which turns FP contraction off in GCC: a fused
 * multiply-add would change the bits. Internal to src/kernels. */
#ifndef CN_KERNELS_ARM_H
#define CN_KERNELS_ARM_H

#include "kernels/kernels.h"

const cn_kernels *cn_kernels_neon(void);

/* matmul_neon.c */
void cn_neon_quantize_rows(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst,
                           size_t dst_row_bytes, int ith, int nth);
void cn_neon_matmul(const cn_matmul_args *a, int ith, int nth);
/* attn_neon.c */
void cn_neon_attention(const cn_attn_args *a, int ith, int nth);

#endif
