/* x86.h — the x86 kernel families: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, DQ, VNNI).
 * Their code is compiled with those instruction sets enabled, so a family may be taken
 * only after cn_cpu_get() reported its features (kernels.c's chooser and the tests
 * check); matmul and quantize_rows are SIMD and bit-identical to ref, the other entries
 * are ref's or SIMD versions documented in their files. */
#ifndef CN_KERNELS_X86_H
#define CN_KERNELS_X86_H

#include "kernels/kernels.h"

const cn_kernels *cn_kernels_avx2(void);   /* needs avx2, fma, f16c */
const cn_kernels *cn_kernels_avx512(void); /* needs those and avx512f/bw/vl/vnni (dq) */
const cn_kernels *cn_kernels_amx(void);    /* needs avx512's and amx_int8 (granted by the OS) */

/* GELU-tanh through f16 for every f16 input (gelu_table.c); filled by the getters. */
extern float cn_x86_gelu_f16[1 << 16];
void cn_x86_gelu_init(void);

#endif
