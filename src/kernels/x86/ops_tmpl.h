/* ops_tmpl.h — the gated activations of the x86 families (compiled twice, like
 * matmul_tmpl.h). Elementwise, the same vector code for every element (tails go
 * through masked loads), so an element's value never depends on where it sits.
 *
 * SiLU: ref's g / (1 + e^-g) * up with a polynomial exp (~2 ulp from expf), so results
 * may differ from ref in the last bits. GELU-tanh: ref rounds the input and the result
 * through f16 (ggml's table); here that is a 65536-entry table built once from the same
 * formula (gelu_table.c) and gathered, which is exactly ref's value. */

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
