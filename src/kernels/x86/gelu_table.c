/* gelu_table.c — GELU-tanh of every f16 value, rounded to f16 and widened to float,
 * for the x86 families' gated activation (ops_tmpl.h gathers from it). Built once, on
 * first use of a family, with exactly ref's formula and roundings (kernels/ref/ops.c
 * gelu_tanh / gelu_tanh_f16: keep the two in step), so the lookup equals ref. Plain C:
 * compiled for the baseline ISA like everything outside the *_avx*.c files. */
#include <math.h>
#include <pthread.h>

#include "tensor/tensor.h"
#include "x86.h"

float cn_x86_gelu_f16[1 << 16];

static float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

static void fill(void) {
    for (uint32_t h = 0; h < (1u << 16); h++)
        cn_x86_gelu_f16[h] = cn_f16_to_f32(cn_f32_to_f16(gelu_tanh(cn_f16_to_f32((uint16_t)h))));
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
void cn_x86_gelu_init(void) { pthread_once(&g_once, fill); }
