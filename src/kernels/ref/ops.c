/* ops.c — scalar reference of the elementwise and per-row kernels: RMS norm, RoPE (both
 * pairings), softmax, gated activations. Each follows ggml's CPU arithmetic where the
 * order of operations changes the result (double sums in norms and softmax, RoPE angles
 * by repeated multiplication, GELU through f16), so our logits track llama.cpp's. */
#include "ref.h"

#include <math.h>
#include <pthread.h>

#include "tensor/tensor.h"

float cn_ref_f16_table[1 << 16];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void fill_table(void) {
    for (uint32_t h = 0; h < (1u << 16); h++) cn_ref_f16_table[h] = cn_f16_to_f32((uint16_t)h);
    cn_ref_matmul_init();
}

void cn_ref_init(void) { pthread_once(&g_table_once, fill_table); }

void cn_ref_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

/* The angle for pair i is built by multiplying by base^(-2/n_rot) once per pair, in
 * float, as ggml's rope cache does: computing each power afresh differs in the last
 * bits, and those bits grow with the position. */
void cn_ref_rope_cache(int64_t pos, int32_t n_rot, float base, float freq_scale, const float *freq_factors, float *cs) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float t = freq_scale * (theta / ff);
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

/* NORMAL rotates adjacent pairs (x[2i], x[2i+1]) — Llama's GGUF Q/K rows were permuted
 * by the converter for this; NEOX rotates (x[i], x[i + n_rot/2]). Dims past n_rot pass
 * through. */
void cn_ref_rope(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, const float *cs, cn_rope_mode mode) {
    const int32_t half = n_rot / 2;
    for (int32_t h = 0; h < n_head; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int32_t a = mode == CN_ROPE_NEOX ? i : 2 * i;
            const int32_t b = mode == CN_ROPE_NEOX ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void cn_ref_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static float gelu_tanh(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    const float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

/* ggml evaluates GELU on f16(x) and stores the result as f16 (a 64K table); outside
 * (-10, 10) it is 0 or x exactly. */
static float gelu_tanh_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = cn_ref_f16(cn_f32_to_f16(x));
    return cn_ref_f16(cn_f32_to_f16(gelu_tanh(xh)));
}

void cn_ref_gated_act(cn_act act, const float *gate, const float *up, float *out, int64_t n) {
    if (act == CN_ACT_SILU) {
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i];
            out[i] = (g / (1.0f + expf(-g))) * up[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = gelu_tanh_f16(gate[i]) * up[i];
    }
}
