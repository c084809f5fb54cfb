/* kernels_neon.c — the NEON family's table (arm.h), and its per-row kernels: RMS norm and
 * the gated activations. RoPE and softmax are ref's own functions (their cost is small
 * next to the matmuls, and their libm calls set the bits). Pure kernels, no state but
 * the GELU table built once by the getter.
 *
 * Bit-identity with ref (kernels/ref/ops.c) decides the shapes here: the norm's sum of
 * squares stays one double sum in element order (the squares are vector products, the
 * sum is not reassociated), and only the elementwise part is a plain vector loop. SiLU
 * keeps libm's expf per element (a vector polynomial would differ in the last bits);
 * the divide and multiplies are vector. GELU is ref's f16-rounded value of the f16 of
 * the input, so a table over all 65536 halves, filled from ref itself, gives it exactly. */
#include <arm_neon.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "arm.h"
#include "kernels/ref/ref.h"
#include "tensor/tensor.h"

/* ---------------------------------------------------------------- RMS norm */

static void neon_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float sq[4]; /* ref's float squares, added in order */
        vst1q_f32(sq, vmulq_f32(vld1q_f32(x + i), vld1q_f32(x + i)));
        sum += (double)sq[0];
        sum += (double)sq[1];
        sum += (double)sq[2];
        sum += (double)sq[3];
    }
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const float32x4_t sv = vdupq_n_f32(scale);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t v = vmulq_f32(vld1q_f32(x + i), sv);
        if (w) v = vmulq_f32(v, vld1q_f32(w + i));
        vst1q_f32(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

/* ---------------------------------------------------------------- gated activations */

/* g_gelu[h]: ref's GELU for inputs whose f16 is h (|h| <= 10 matters: outside (-10, 10)
 * the kernel takes 0 or x itself). Ref evaluates f16(gelu(f16(x))) for x strictly inside
 * (-10, 10), so each half is fed to ref as is, or, for h = ±10, as the float next to it
 * toward 0 (which rounds to h). */
static float g_gelu[1 << 16];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void fill_gelu(void) {
    const float one = 1.0f;
    for (uint32_t h = 0; h < (1u << 16); h++) {
        float x = cn_ref_f16((uint16_t)h);
        if (fabsf(x) == 10.0f) x = nextafterf(x, 0.0f);
        cn_ref_gated_act(CN_ACT_GELU_TANH, &x, &one, &g_gelu[h], 1);
    }
}

/* 4 elements: out = act(gate) * up, ref's operations. */
static inline void act4(cn_act act, const float *gate, const float *up, float *out) {
    const float32x4_t g = vld1q_f32(gate), u = vld1q_f32(up);
    float32x4_t y;
    if (act == CN_ACT_SILU) {
        const float e[4] = {expf(-gate[0]), expf(-gate[1]), expf(-gate[2]), expf(-gate[3])};
        y = vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), vld1q_f32(e)));
    } else {
        uint16_t h[4];
        vst1_u16(h, vreinterpret_u16_f16(vcvt_f16_f32(g)));
        const float t[4] = {g_gelu[h[0]], g_gelu[h[1]], g_gelu[h[2]], g_gelu[h[3]]};
        y = vld1q_f32(t);
        y = vbslq_f32(vcgeq_f32(g, vdupq_n_f32(10.0f)), g, y);
        y = vbslq_f32(vcleq_f32(g, vdupq_n_f32(-10.0f)), vdupq_n_f32(0.0f), y);
    }
    vst1q_f32(out, vmulq_f32(y, u));
}

/* out may alias gate or up: each group of 4 is read before it is written. */
static void neon_gated_act(cn_act act, const float *gate, const float *up, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) act4(act, gate + i, up + i, out + i);
    if (i < n) cn_ref_gated_act(act, gate + i, up + i, out + i, n - i);
}

/* ---------------------------------------------------------------- the family */

static const cn_kernels g_neon = {
    .name = "neon",
    .rmsnorm = neon_rmsnorm,
    .rope_cache = cn_ref_rope_cache,
    .rope = cn_ref_rope,
    .softmax = cn_ref_softmax,
    .gated_act = neon_gated_act,
    .quantize_rows = cn_neon_quantize_rows,
    .matmul = cn_neon_matmul,
    .attention = cn_neon_attention,
};

const cn_kernels *cn_kernels_neon(void) {
    cn_ref_init();
    pthread_once(&g_gelu_once, fill_gelu);
    return &g_neon;
}
