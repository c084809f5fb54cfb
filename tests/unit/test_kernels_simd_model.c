/* test_kernels_simd_model.c — the fast paths seen from the forward pass: a model loaded
 * with prefault (its weights copied into 2 MiB pages, matrices in the kernel family's
 * packed layout, model.c) gives logits bit-identical to the same model read from the
 * file mapping, for a prefill batch and for decode steps (the one-row path of
 * forward.c), at 1 and 2 threads, and 1 and 2 threads give the same bits: stories260K
 * (F32, copied as stored), the default SmolLM2 Q4_1 model (Q4_1 layers and a tied Q8_0
 * LM head, packed) and gemma-3 270M Q4_K_M (Q4_K, Q5_0, Q6_K and Q8_0 matrices: the
 * K-quants in their own packed layout). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static const char *testdata(void) {
    const char *d = getenv("CINDER_TESTDATA");
    return d && *d ? d : "../shared/testdata";
}

static void model_path(const char *file, char *out, size_t cap) {
    if (!strcmp(file, "stories260K.gguf")) {
        snprintf(out, cap, "%s/models/%s", testdata(), file);
        return;
    }
    const char *d = getenv("CINDER_MODELS");
    if (d && *d) snprintf(out, cap, "%s/%s", d, file);
    else snprintf(out, cap, "%s/.cache/cinder/models/%s", getenv("HOME") ? getenv("HOME") : "", file);
}

/* Logits of a 9-token prompt as one batch, then 4 decode steps: (13, n_vocab). */
static float *run(const char *file, bool prefault, int threads, int *n_vocab) {
    char path[1024];
    model_path(file, path, sizeof path);
    cn_error err = {0};
    cn_model *m = NULL;
    cn_model_params mp = cn_model_default_params();
    mp.prefault = prefault;
    cr_assert_eq(cn_model_load(path, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    const int V = cn_model_hparams(m)->n_vocab;
    *n_vocab = V;
#if defined(__linux__)
    /* with prefault the layers read a copy, not the file mapping; quantized matrices are
     * packed where the kernel family has a layout for them */
    const cn_gguf_tensor_info *ti = cn_gguf_tensor(cn_model_gguf(m),
                                                   cn_gguf_find_tensor(cn_model_gguf(m), "blk.0.attn_q.weight"));
    const cn_weight *wq = &cn_model_layer(m, 0)->wq;
    cr_assert_eq(wq->data != ti->data, prefault);
    const cn_kernels *K = cn_kernels_get();
    cr_assert_eq(wq->packed, prefault && K->packed_size && K->packed_size(wq->type, wq->ne1, wq->ne0) != 0);
#endif
    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = 4;
    cn_kv *kv = NULL;
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK, "%s", err.msg);
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = threads;
    cp.n_batch_max = 16;
    cp.n_ctx = 64;
    cn_fwd *c = NULL;
    cr_assert_eq(cn_fwd_create(m, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
    cn_batch b;
    cr_assert_eq(cn_batch_init(&b, 16, &err), CN_STATUS_OK);
    float *lg = malloc((size_t)13 * V * sizeof(float));
    for (int i = 0; i < 9; i++) cn_batch_add(&b, (i * 37 + 11) % V, i, 0, true);
    cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
    for (int i = 9; i < 13; i++) {
        cn_batch_clear(&b);
        cn_batch_add(&b, (i * 53 + 7) % V, i, 0, true);
        cr_assert_eq(cn_forward(m, c, &b, kv, lg + (size_t)i * V, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_batch_free(&b);
    cn_fwd_free(c);
    cn_kv_free(kv);
    cn_model_free(m);
    return lg;
}

/* Packed/huge-page weights vs the file mapping at 1 and 2 threads, and 1 vs 2 threads. */
static void same_logits(const char *file) {
    int V = 0;
    float *one = NULL;
    for (int t = 1; t <= 2; t++) {
        float *a = run(file, false, t, &V), *b = run(file, true, t, &V);
        for (size_t i = 0; i < (size_t)13 * V; i++)
            cr_assert(memcmp(&a[i], &b[i], sizeof(float)) == 0, "%s, %d threads: logit %zu is %.9g, %.9g from the file",
                      file, t, i, b[i], a[i]);
        if (t == 1) one = b;
        else {
            cr_assert(memcmp(one, b, (size_t)13 * V * sizeof(float)) == 0, "%s: 1 and 2 threads differ", file);
            free(b);
        }
        free(a);
    }
    free(one);
}

Test(kernels_simd_model, hugepage_weights_same_logits_f32) { same_logits("stories260K.gguf"); }
Test(kernels_simd_model, packed_weights_same_logits_q4_1, .timeout = 300) {
    same_logits("SmolLM2-135M-Instruct.Q4_1.gguf");
}
Test(kernels_simd_model, packed_weights_same_logits_k_quants, .timeout = 300) {
    same_logits("gemma-3-270m-q4_k_m.gguf");
}
