/* test_model.c — the forward pass against an independent float reference
 * (test_model_ref.c) on stories260K and tiny random llama/qwen2/qwen3/gemma3 models;
 * batch-composition, prefill-vs-decode and thread-count invariance (bit-exact); and bad
 * model files and bad batches, which must fail with a message naming the culprit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test_model_ref.h"

static const char *testdata(void) {
    const char *d = getenv("CINDER_TESTDATA");
    return d && *d ? d : "../shared/testdata";
}

static cn_model *load_stories(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", testdata());
    cn_model *m = NULL;
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    return m;
}

/* A model from in-memory GGUF bytes (kept in *buf until the model is freed). */
static cn_status load_tiny(const tiny_spec *s, uint8_t **buf, cn_model **m, cn_error *err) {
    size_t n = 0;
    *buf = tiny_model_gguf(s, &n);
    cr_assert(*buf, "could not write the tiny %s model", s->arch);
    cn_gguf *g = NULL;
    cn_status st = cn_gguf_parse(*buf, n, &g, err);
    cr_assert_eq(st, CN_STATUS_OK, "%s", err->msg);
    cn_model_params mp = cn_model_default_params();
    return cn_model_from_gguf(g, &mp, m, err);
}

static cn_kv *make_kv(const cn_model *m, cn_type type, int32_t max_seqs, int64_t n_blocks) {
    cn_kv_params kp = cn_model_kv_params(m);
    kp.type = type;
    kp.max_seqs = max_seqs;
    kp.n_blocks = n_blocks;
    kp.block_tokens = 4; /* small blocks: attention crosses many of them */
    cn_kv *kv = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK, "%s", err.msg);
    return kv;
}

static cn_fwd *make_ctx(const cn_model *m, int threads, int batch) {
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = threads;
    cp.n_batch_max = batch;
    cp.n_ctx = 128;
    cn_fwd *c = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_fwd_create(m, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
    return c;
}

/* Prefill toks as one batch (all logits), then greedy-decode n_gen tokens one at a time,
 * comparing every step's logits with the reference within tol. */
static void check_vs_reference(const cn_model *m, const cn_gguf *g, const int32_t *toks, int n, int n_gen, float tol,
                               const char *what) {
    const int V = cn_model_hparams(m)->n_vocab;
    ref_model *r = ref_model_new(g, n + n_gen + 1);
    cr_assert(r, "%s: reference cannot run this model", what);
    cn_kv *kv = make_kv(m, CN_TYPE_F32, 1, 64);
    cn_fwd *c = make_ctx(m, 2, n);
    cn_batch b;
    cn_error err = {0};
    cr_assert_eq(cn_batch_init(&b, n, &err), CN_STATUS_OK);
    for (int i = 0; i < n; i++) cn_batch_add(&b, toks[i], i, 0, true);
    float *lg = malloc((size_t)n * V * sizeof(float)), *rl = malloc((size_t)V * sizeof(float));
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
    float worst = 0;
    int tok = 0;
    for (int i = 0; i < n + n_gen; i++) {
        const float *mine = lg;
        if (i < n) {
            mine = lg + (size_t)i * V;
            tok = toks[i];
        } else {
            cn_batch_clear(&b);
            cn_batch_add(&b, tok, i, 0, true);
            cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
        }
        ref_model_step(r, tok, i, rl);
        int am = 0, ar = 0;
        for (int v = 0; v < V; v++) {
            float d = fabsf(mine[v] - rl[v]);
            if (d > worst) worst = d;
            cr_assert(d <= tol, "%s: position %d token %d: logit %d is %.6f, reference %.6f", what, i, tok, v, mine[v],
                      rl[v]);
            if (mine[v] > mine[am]) am = v;
            if (rl[v] > rl[ar]) ar = v;
        }
        cr_assert_eq(am, ar, "%s: position %d: argmax %d, reference %d", what, i, am, ar);
        tok = am;
    }
    cr_log_info("%s: max |dlogit| vs float reference = %.3g over %d positions", what, worst, n + n_gen);
    free(lg);
    free(rl);
    cn_batch_free(&b);
    cn_fwd_free(c);
    cn_kv_free(kv);
    ref_model_free(r);
}

static const int32_t k_story[] = {1,   403, 407, 261, 378, 284, 261, 335, 350, 369,
                                  268, 288, 259, 299, 361, 283, 42,  355, 271, 322};

Test(model, stories260k_matches_float_reference) {
    cn_model *m = load_stories();
    const cn_hparams *hp = cn_model_hparams(m);
    cr_assert_eq(hp->n_layer, 5);
    cr_assert_eq(hp->n_embd, 64);
    cr_assert_eq(hp->n_head, 8);
    cr_assert_eq(hp->n_head_kv, 4);
    cr_assert_eq(hp->n_vocab, 512);
    cr_assert_str_eq(cn_model_arch(m)->name, "llama");
    check_vs_reference(m, cn_model_gguf(m), k_story, 20, 12, 1e-4f, "stories260K");
    cn_model_free(m);
}

static void tiny_vs_reference(tiny_spec s, float tol) {
    uint8_t *buf;
    cn_model *m = NULL;
    cn_error err = {0};
    cr_assert_eq(load_tiny(&s, &buf, &m, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t toks[14];
    for (int i = 0; i < 14; i++) toks[i] = (i * 37 + 5) % s.n_vocab;
    check_vs_reference(m, cn_model_gguf(m), toks, 14, 6, tol, s.arch);
    cn_model_free(m);
    free(buf);
}

Test(model, tiny_llama_matches_float_reference) {
    tiny_spec s = tiny_default("llama");
    s.n_rot = 8; /* partial rotary dims pass through */
    tiny_vs_reference(s, 1e-4f);
}
Test(model, tiny_llama_linear_rope_scaling_matches_float_reference) {
    tiny_spec s = tiny_default("llama");
    s.rope_scaling_type = "linear";
    s.rope_scaling_factor = 4.0f; /* positions divided by 4 */
    tiny_vs_reference(s, 1e-4f);
}
Test(model, tiny_qwen2_matches_float_reference) { tiny_vs_reference(tiny_default("qwen2"), 1e-4f); }
Test(model, tiny_qwen3_matches_float_reference) { tiny_vs_reference(tiny_default("qwen3"), 1e-4f); }
/* GELU goes through f16 as in ggml (relative error up to ~5e-4 per activation) while the
 * reference uses the exact formula: a looser bound. */
Test(model, tiny_gemma3_matches_float_reference) { tiny_vs_reference(tiny_default("gemma3"), 5e-3f); }

/* Logits of a prompt fed as one batch, token by token, or beside another sequence must
 * be bit-identical, at any thread count. */
static float *run_seq(const cn_model *m, cn_fwd *c, cn_kv *kv, const int32_t *toks, int n, int seq, bool one_by_one) {
    const int V = cn_model_hparams(m)->n_vocab;
    float *out = malloc((size_t)n * V * sizeof(float));
    cn_batch b;
    cn_error err = {0};
    cn_batch_init(&b, n, &err);
    if (one_by_one) {
        for (int i = 0; i < n; i++) {
            cn_batch_clear(&b);
            cn_batch_add(&b, toks[i], i, seq, true);
            cr_assert_eq(cn_forward(m, c, &b, kv, out + (size_t)i * V, &err), CN_STATUS_OK, "%s", err.msg);
        }
    } else {
        for (int i = 0; i < n; i++) cn_batch_add(&b, toks[i], i, seq, true);
        cr_assert_eq(cn_forward(m, c, &b, kv, out, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_batch_free(&b);
    return out;
}

static void assert_same(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&a[i], &b[i], sizeof(float)) == 0, "%s: first difference at %zu: %.9g vs %.9g", what, i, a[i],
                  b[i]);
}

static void invariance(cn_model *m) {
    const int V = cn_model_hparams(m)->n_vocab;
    const int nA = 13, nB = 7;
    int32_t A[13], B[7];
    for (int i = 0; i < nA; i++) A[i] = (i * 29 + 3) % V;
    for (int i = 0; i < nB; i++) B[i] = (i * 11 + 50) % V;

    cn_kv *kv = make_kv(m, CN_TYPE_F16, 4, 64);
    cn_fwd *c1 = make_ctx(m, 1, 32);
    float *alone = run_seq(m, c1, kv, A, nA, 0, false);
    float *alone_b = run_seq(m, c1, kv, B, nB, 1, false);
    float *steps = run_seq(m, c1, kv, A, nA, 2, true);
    assert_same(alone, steps, (size_t)nA * V, "prefill vs token-by-token");
    cn_kv_free(kv);

    /* A and B interleaved in one batch, at 2 and 3 threads. */
    for (int t = 2; t <= 3; t++) {
        cn_kv *kv2 = make_kv(m, CN_TYPE_F16, 4, 64);
        cn_fwd *c = make_ctx(m, t, 32);
        cn_batch b;
        cn_error err = {0};
        cn_batch_init(&b, nA + nB, &err);
        int ia = 0, ib = 0;
        int32_t where[20];
        for (int r = 0; r < nA + nB; r++) {
            if ((r % 3 == 1 && ib < nB) || ia == nA) {
                where[r] = 100 + ib;
                cn_batch_add(&b, B[ib], ib, 3, true);
                ib++;
            } else {
                where[r] = ia;
                cn_batch_add(&b, A[ia], ia, 1, true);
                ia++;
            }
        }
        float *mixed = malloc((size_t)(nA + nB) * V * sizeof(float));
        cr_assert_eq(cn_forward(m, c, &b, kv2, mixed, &err), CN_STATUS_OK, "%s", err.msg);
        for (int r = 0; r < nA + nB; r++) {
            const float *want = where[r] >= 100 ? alone_b + (size_t)(where[r] - 100) * V : alone + (size_t)where[r] * V;
            assert_same(mixed + (size_t)r * V, want, (size_t)V, "mixed batch vs alone");
        }
        /* Then one decode row per sequence in one batch vs the same rows alone. */
        cn_batch_clear(&b);
        cn_batch_add(&b, 7, nA, 1, true);
        cn_batch_add(&b, 9, nB, 3, true);
        float *two = malloc((size_t)2 * V * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
        cr_assert_eq(cn_forward(m, c, &b, kv2, two, &err), CN_STATUS_OK, "%s", err.msg);
        cn_batch_clear(&b);
        cn_batch_add(&b, 9, nB, 3, true);
        cn_kv_seq_truncate(kv2, 3, nB);
        cr_assert_eq(cn_forward(m, c1, &b, kv2, one, &err), CN_STATUS_OK, "%s", err.msg);
        assert_same(two + V, one, (size_t)V, "decode pair vs alone");
        free(two);
        free(one);
        free(mixed);
        cn_batch_free(&b);
        cn_fwd_free(c);
        cn_kv_free(kv2);
    }
    free(alone);
    free(alone_b);
    free(steps);
    cn_fwd_free(c1);
}

Test(model, stories260k_batch_and_thread_invariance) {
    cn_model *m = load_stories();
    invariance(m);
    cn_model_free(m);
}

Test(model, gemma3_tiny_batch_and_thread_invariance) {
    tiny_spec s = tiny_default("gemma3");
    uint8_t *buf;
    cn_model *m = NULL;
    cn_error err = {0};
    cr_assert_eq(load_tiny(&s, &buf, &m, &err), CN_STATUS_OK, "%s", err.msg);
    invariance(m);
    cn_model_free(m);
    free(buf);
}

/* An 8-bit KV cache: same bit-exact invariances, logits near the F32 cache's. */
Test(model, gemma3_tiny_q8_0_kv_cache) {
    tiny_spec s = tiny_default("gemma3");
    uint8_t *buf;
    cn_model *m = NULL;
    cn_error err = {0};
    cr_assert_eq(load_tiny(&s, &buf, &m, &err), CN_STATUS_OK, "%s", err.msg);
    const int V = cn_model_hparams(m)->n_vocab, n = 12;
    int32_t toks[12];
    for (int i = 0; i < n; i++) toks[i] = (i * 13 + 1) % V;
    cn_fwd *c = make_ctx(m, 2, 16);
    cn_kv *kq = make_kv(m, CN_TYPE_Q8_0, 2, 16), *kf = make_kv(m, CN_TYPE_F32, 1, 16);
    float *q8 = run_seq(m, c, kq, toks, n, 0, false), *steps = run_seq(m, c, kq, toks, n, 1, true);
    float *f32 = run_seq(m, c, kf, toks, n, 0, false);
    assert_same(q8, steps, (size_t)n * V, "q8_0 cache: prefill vs token-by-token");
    float worst = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) worst = fmaxf(worst, fabsf(q8[i] - f32[i]));
    cr_assert(worst > 0 && worst < 0.1f, "q8_0 vs f32 cache: max |dlogit| %g", worst);
    free(q8);
    free(steps);
    free(f32);
    cn_fwd_free(c);
    cn_kv_free(kq);
    cn_kv_free(kf);
    cn_model_free(m);
    free(buf);
}

Test(model_bad, q8_0_cache_needs_32_wide_heads) {
    cn_model *m = load_stories(); /* head_dim 8 */
    cn_kv *kv = make_kv(m, CN_TYPE_Q8_0, 1, 8);
    cn_fwd *c = make_ctx(m, 1, 4);
    cn_batch b;
    cn_error err = {0};
    cn_batch_init(&b, 1, &err);
    cn_batch_add(&b, 5, 0, 0, true);
    float lg[512];
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_UNSUPPORTED, "%s", err.msg);
    cn_batch_free(&b);
    cn_fwd_free(c);
    cn_kv_free(kv);
    cn_model_free(m);
}

Test(model, arch_table) {
    const cn_arch_desc *l = cn_arch_find("llama", 5), *g = cn_arch_find("gemma3", 6);
    const cn_arch_desc *q2 = cn_arch_find("qwen2", 5), *q3 = cn_arch_find("qwen3", 5);
    cr_assert(l && g && q2 && q3);
    cr_assert_null(cn_arch_find("gpt2", 4));
    cr_assert_eq(l->rope, CN_ROPE_NORMAL);
    cr_assert_eq(q2->rope, CN_ROPE_NEOX);
    cr_assert(q2->qkv_bias && !q3->qkv_bias && q3->qk_norm);
    cr_assert(g->qk_norm && g->post_norms && g->embd_scale && g->act == CN_ACT_GELU_TANH);
    cr_assert_eq(g->swa_pattern, 6);
}

Test(model, gemma3_layer_pattern_and_hparams) {
    tiny_spec s = tiny_default("gemma3");
    uint8_t *buf;
    cn_model *m = NULL;
    cn_error err = {0};
    cr_assert_eq(load_tiny(&s, &buf, &m, &err), CN_STATUS_OK, "%s", err.msg);
    for (int il = 0; il < 7; il++) cr_assert_eq(cn_model_layer(m, il)->swa, il != 5, "layer %d", il);
    const cn_hparams *hp = cn_model_hparams(m);
    cr_assert_eq(hp->head_dim, 32);
    cr_assert_float_eq(hp->rope_base_swa, 10000.0f, 0);
    cr_assert_float_eq(hp->rope_base, 1000000.0f, 0);
    cr_assert_eq(hp->n_swa, 5);
    cr_assert(cn_model_output(m)->data == cn_model_tok_embd(m)->data, "tied output");
    cn_model_free(m);
    free(buf);
}

/* ---- bad model files ---- */

static void expect_load_error(tiny_spec s, cn_status want, const char *needle) {
    uint8_t *buf;
    cn_model *m = NULL;
    cn_error err = {0};
    cn_status st = load_tiny(&s, &buf, &m, &err);
    cr_assert_eq(st, want, "status %s (%s), want %s", cn_status_str(st), err.msg, cn_status_str(want));
    cr_assert_null(m);
    cr_assert(strstr(err.msg, needle), "message '%s' does not name '%s'", err.msg, needle);
    free(buf);
}

Test(model_bad, unknown_architecture) { expect_load_error(tiny_default("mamba"), CN_STATUS_UNSUPPORTED, "mamba"); }
Test(model_bad, missing_tensor) {
    tiny_spec s = tiny_default("llama");
    s.omit_tensor = "blk.1.ffn_up.weight";
    expect_load_error(s, CN_STATUS_NOT_FOUND, "blk.1.ffn_up.weight");
}
Test(model_bad, missing_qwen2_bias) {
    tiny_spec s = tiny_default("qwen2");
    s.omit_tensor = "blk.0.attn_k.bias";
    expect_load_error(s, CN_STATUS_NOT_FOUND, "blk.0.attn_k.bias");
}
Test(model_bad, missing_gemma3_post_norm) {
    tiny_spec s = tiny_default("gemma3");
    s.omit_tensor = "blk.3.post_ffw_norm.weight";
    expect_load_error(s, CN_STATUS_NOT_FOUND, "blk.3.post_ffw_norm.weight");
}
Test(model_bad, wrong_shape) {
    tiny_spec s = tiny_default("qwen3");
    s.reshape_tensor = "blk.1.attn_v.weight";
    expect_load_error(s, CN_STATUS_CORRUPT, "blk.1.attn_v.weight");
}
Test(model_bad, norm_not_f32) {
    tiny_spec s = tiny_default("llama");
    s.f16_tensor = "blk.0.ffn_norm.weight";
    expect_load_error(s, CN_STATUS_UNSUPPORTED, "blk.0.ffn_norm.weight");
}
Test(model_bad, unsupported_matmul_type) {
    tiny_spec s = tiny_default("llama");
    s.n_embd = 256; /* Q2_K needs 256-element rows */
    s.q2k_tensor = "blk.1.attn_q.weight";
    expect_load_error(s, CN_STATUS_UNSUPPORTED, "blk.1.attn_q.weight");
}
Test(model_bad, missing_key) {
    tiny_spec s = tiny_default("qwen2");
    s.omit_key = "qwen2.attention.layer_norm_rms_epsilon";
    expect_load_error(s, CN_STATUS_NOT_FOUND, "qwen2.attention.layer_norm_rms_epsilon");
}
Test(model_bad, gemma3_missing_sliding_window) {
    tiny_spec s = tiny_default("gemma3");
    s.omit_key = "gemma3.attention.sliding_window";
    expect_load_error(s, CN_STATUS_NOT_FOUND, "gemma3.attention.sliding_window");
}
Test(model_bad, key_of_wrong_kind) {
    tiny_spec s = tiny_default("llama");
    s.str_key = "llama.block_count";
    expect_load_error(s, CN_STATUS_CORRUPT, "llama.block_count");
}
Test(model_bad, head_count_not_dividing_embedding) {
    tiny_spec s = tiny_default("llama");
    s.head_count_override = 5; /* 64 / 5 */
    s.head_count_kv_override = 5;
    expect_load_error(s, CN_STATUS_CORRUPT, "head_count");
}
Test(model_bad, kv_heads_not_dividing_heads) {
    tiny_spec s = tiny_default("llama");
    s.head_count_kv_override = 3; /* 4 heads */
    expect_load_error(s, CN_STATUS_CORRUPT, "head_count_kv");
}
Test(model_bad, unsupported_rope_scaling) {
    tiny_spec s = tiny_default("llama");
    s.rope_scaling_type = "yarn";
    expect_load_error(s, CN_STATUS_UNSUPPORTED, "yarn");
}
Test(model_bad, missing_file) {
    cn_model *m = NULL;
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_neq(cn_model_load("/nonexistent/model.gguf", &mp, &m, &err), CN_STATUS_OK);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, "/nonexistent/model.gguf"), "%s", err.msg);
}

/* ---- bad batches ---- */

Test(model_bad, batches) {
    cn_model *m = load_stories();
    cn_kv *kv = make_kv(m, CN_TYPE_F16, 2, 8);
    cn_fwd *c = make_ctx(m, 1, 4);
    float *lg = malloc((size_t)8 * 512 * sizeof(float));
    cn_batch b;
    cn_error err = {0};
    cn_batch_init(&b, 8, &err);
    struct {
        int32_t tok, pos, seq;
        cn_status want;
        const char *needle;
    } cases[] = {
        {600, 0, 0, CN_STATUS_INVALID_ARG, "token 600"}, {5, -1, 0, CN_STATUS_INVALID_ARG, "position -1"},
        {5, 128, 0, CN_STATUS_LIMIT, "position 128"},    {5, 0, 2, CN_STATUS_INVALID_ARG, "sequence 2"},
        {5, 3, 0, CN_STATUS_INVALID_ARG, "gap"},
    };
    for (size_t i = 0; i < CN_ARRAY_LEN(cases); i++) {
        cn_batch_clear(&b);
        cn_batch_add(&b, cases[i].tok, cases[i].pos, cases[i].seq, true);
        cn_status st = cn_forward(m, c, &b, kv, lg, &err);
        cr_assert_eq(st, cases[i].want, "case %zu: %s (%s)", i, cn_status_str(st), err.msg);
        cr_assert(strstr(err.msg, cases[i].needle), "case %zu: '%s'", i, err.msg);
    }
    /* a pool of 8 blocks of 4: sequence 0 takes all 32 positions, then sequence 1 finds none */
    for (int round = 0; round < 8; round++) {
        cn_batch_clear(&b);
        for (int p = 0; p < 4; p++) cn_batch_add(&b, 5, 4 * round + p, 0, false);
        cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_batch_clear(&b);
    cn_batch_add(&b, 5, 0, 1, true);
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_LIMIT, "%s", err.msg);
    /* two rows for one position */
    cn_kv_seq_free(kv, 0);
    cn_kv_seq_free(kv, 1);
    cn_batch_clear(&b);
    cn_batch_add(&b, 5, 0, 0, true);
    cn_batch_add(&b, 6, 0, 0, true);
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "position 0"), "%s", err.msg);
    /* more rows than the context takes */
    cn_batch_clear(&b);
    for (int p = 0; p < 5; p++) cn_batch_add(&b, 5, p, 0, true);
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_INVALID_ARG);
    /* a KV cache of the wrong width */
    cn_kv_params kp = cn_model_kv_params(m);
    kp.kv_dim = 48;
    kp.n_blocks = 4;
    cn_kv *bad = NULL;
    cr_assert_eq(cn_kv_create(&kp, &bad, &err), CN_STATUS_OK, "%s", err.msg);
    cn_batch_clear(&b);
    cn_batch_add(&b, 5, 0, 0, true);
    cr_assert_eq(cn_forward(m, c, &b, bad, lg, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "KV cache"), "%s", err.msg);
    cn_kv_free(bad);
    cn_batch_free(&b);
    free(lg);
    cn_fwd_free(c);
    cn_kv_free(kv);
    cn_model_free(m);
}
