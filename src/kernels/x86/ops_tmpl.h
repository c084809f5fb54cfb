/* ops_tmpl.h — the gated activations and the RMS norm of the x86 families (compiled
 * twice, like matmul_tmpl.h). The activations are elementwise, the same vector code for
 * every element (tails go through masked loads), so an element's value never depends
 * on where it sits; the norm depends only on its own row.
 *
 * SiLU: ref's g / (1 + e^-g) * up with a polynomial exp (~2 ulp from expf), so results
 * may differ from ref in the last bits. GELU-tanh: ref rounds the input and the result
 * through f16 (ggml's table); here that is a 65536-entry table built once from the same
 * formula (gelu_table.c) and gathered, which is exactly ref's value. RoPE is ref's
 * arithmetic lane for lane, so its bits are ref's. */

static inline void act_vec(const cn_act act, const float *gate, const float *up, float *out, int n) {
    const vf g = vf_load_n(gate, n), u = vf_load_n(up, n);
    vf y;
    if (act == CN_ACT_SILU) {
        y = vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_zero(), g))));
    } else {
        y = vf_lookup_h(cn_x86_gelu_f16, g);
        y = vf_if_le(g, -10.0f, vf_zero(), vf_if_ge(g, 10.0f, g, y));
    }
    vf_store_n(out, vf_mul(y, u), n);
}

static void CN_X86_SUFFIX(gated_act)(cn_act act, const float *gate, const float *up, float *out, int64_t n) {
    int64_t i = 0;
    if (act == CN_ACT_SILU) {
        for (; i + VL <= n; i += VL) act_vec(CN_ACT_SILU, gate + i, up + i, out + i, VL);
        if (i < n) act_vec(CN_ACT_SILU, gate + i, up + i, out + i, (int)(n - i));
    } else {
        for (; i + VL <= n; i += VL) act_vec(CN_ACT_GELU_TANH, gate + i, up + i, out + i, VL);
        if (i < n) act_vec(CN_ACT_GELU_TANH, gate + i, up + i, out + i, (int)(n - i));
    }
}

/* RMS norm: ref's float squares summed in double (8 double lanes here, so the order of
 * the double sum differs from ref's: a last-bit difference of the float mean is
 * possible but rare); then ref's exact elementwise (x * scale) * w. */
static void CN_X86_SUFFIX(rmsnorm)(const float *x, const float *w, float *y, int64_t n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i), sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    const __m256d s = _mm256_add_pd(s0, s1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 sc = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

/* RoPE, as ref: x0 c - x1 s and x0 s + x1 c, each product rounded, then one subtract or
 * add (the odd lane adds x1 c + x0 s, the same sum). NORMAL pairs are adjacent, so a
 * vector holds VL/2 whole pairs beside their (cos, sin) pairs in cs; NEOX pairs are
 * half a rotation apart, with cs split into cos and sin once per call. */
static void CN_X86_SUFFIX(rope)(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, const float *cs,
                                cn_rope_mode mode) {
    const int32_t half = n_rot / 2, nr = 2 * half;
    if (half <= 0 || n_rot > head_dim || head_dim > CN_MAX_HEAD_DIM) {
        cn_ref_rope(x, n_head, head_dim, n_rot, cs, mode);
        return;
    }
    if (mode == CN_ROPE_NEOX) {
        float c[CN_MAX_HEAD_DIM / 2], s[CN_MAX_HEAD_DIM / 2];
        for (int32_t i = 0; i < half; i++) c[i] = cs[2 * i], s[i] = cs[2 * i + 1];
        for (int32_t h = 0; h < n_head; h++) {
            float *v = x + (int64_t)h * head_dim;
            for (int32_t i = 0; i < half; i += VL) {
                const int n = (int)CN_MIN((int32_t)VL, half - i);
                const vf x0 = vf_load_n(v + i, n), x1 = vf_load_n(v + half + i, n);
                const vf cv = vf_load_n(c + i, n), sv = vf_load_n(s + i, n);
                vf_store_n(v + i, vf_sub(vf_mul(x0, cv), vf_mul(x1, sv)), n);
                vf_store_n(v + half + i, vf_add(vf_mul(x0, sv), vf_mul(x1, cv)), n);
            }
        }
        return;
    }
    for (int32_t h = 0; h < n_head; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < nr; i += VL) {
            const int n = (int)CN_MIN((int32_t)VL, nr - i);
            const vf xv = vf_load_n(v + i, n), csv = vf_load_n(cs + i, n);
            const vf p1 = vf_mul(xv, vf_dup_even(csv)), p2 = vf_mul(vf_swap_pairs(xv), vf_dup_odd(csv));
            vf_store_n(v + i, vf_subadd(p1, p2), n);
        }
    }
}
