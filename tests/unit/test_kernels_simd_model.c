/* test_kernels_simd_model.c — the fast paths seen from the forward pass: a model loaded
 * with prefault (its weights copied into 2 MiB pages, model.c) gives logits bit-identical
 * to the same model read from the file mapping, for a prefill batch and for decode steps
 * (the one-row path of forward.c), at 1 and 2 threads. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static const char *testdata(void) {
    const char *d = getenv("CINDER_TESTDATA");
    return d && *d ? d : "../shared/testdata";
}

/* Logits of a 9-token prompt as one batch, then 4 decode steps: (13, n_vocab). */
static float *run(bool prefault, int threads) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", testdata());
    cn_error err = {0};
    cn_model *m = NULL;
    cn_model_params mp = cn_model_default_params();
    mp.prefault = prefault;
    cr_assert_eq(cn_model_load(path, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    const int V = cn_model_hparams(m)->n_vocab;
    cr_assert_eq(V, 512);
#if defined(__linux__)
    /* with prefault the layers read a copy, not the file mapping */
    const cn_gguf_tensor_info *ti = cn_gguf_tensor(cn_model_gguf(m), cn_gguf_find_tensor(cn_model_gguf(m), "blk.0.attn_q.weight"));
    cr_assert_eq(cn_model_layer(m, 0)->wq.data != ti->data, prefault);
#endif
    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = 4;
    cn_kv *kv = NULL;
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK, "%s", err.msg);
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = threads;
    cp.n_batch_max = 16;
    cp.n_ctx = 64;
    cn_ctx *c = NULL;
    cr_assert_eq(cn_ctx_create(m, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
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
    cn_ctx_free(c);
    cn_kv_free(kv);
    cn_model_free(m);
    return lg;
}

Test(kernels_simd_model, hugepage_weights_same_logits) {
    for (int t = 1; t <= 2; t++) {
        float *a = run(false, t), *b = run(true, t);
        cr_assert(memcmp(a, b, (size_t)13 * 512 * sizeof(float)) == 0, "%d threads: logits differ", t);
        free(a);
        free(b);
    }
}
