/* test_engine_util.c — see test_engine_util.h. */
#include "test_engine_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void te_req_init(te_req *q, int32_t n) {
    memset(q, 0, sizeof *q);
    q->n = n;
    q->cancel_after = -1;
}

static void rec_text(void *user, uint64_t id, int32_t index, const char *text, size_t n_bytes) {
    te_req *q = user;
    cr_assert_eq(id, q->id);
    cr_assert(index >= 0 && index < q->n);
    te_result *r = &q->r[index];
    cr_assert_eq(r->n_finish, 0, "text after on_finish");
    cr_assert_lt(r->n_text + n_bytes, sizeof r->text);
    memcpy(r->text + r->n_text, text, n_bytes);
    r->n_text += n_bytes;
}

static void rec_token(void *user, uint64_t id, int32_t index, const cn_gen_token *tok) {
    te_req *q = user;
    cr_assert_eq(id, q->id);
    cr_assert(index >= 0 && index < q->n);
    te_result *r = &q->r[index];
    cr_assert_eq(r->n_finish, 0, "token after on_finish");
    cr_assert_lt(r->n_tok, TE_MAX_TOK);
    r->tok[r->n_tok++] = *tok;
    if (index == 0 && q->cancel_after >= 0 && r->n_tok == q->cancel_after && q->e)
        q->cancel_status = cn_engine_cancel(q->e, q->id, NULL);
}

static void rec_finish(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *t) {
    te_req *q = user;
    cr_assert_eq(id, q->id);
    cr_assert(index >= 0 && index < q->n);
    te_result *r = &q->r[index];
    r->n_finish++;
    r->reason = reason;
    r->t = *t;
}

cn_engine_callbacks te_callbacks(te_req *q) {
    cn_engine_callbacks cb = {rec_text, rec_token, rec_finish, q};
    return cb;
}

bool te_req_done(const te_req *q) {
    for (int32_t i = 0; i < q->n; i++)
        if (q->r[i].n_finish == 0) return false;
    return true;
}

static cn_model *load(const char *path) {
    cn_model *m = NULL;
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    return m;
}

cn_model *te_load_stories(void) {
    const char *d = getenv("CINDER_TESTDATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", d && *d ? d : "../shared/testdata");
    return load(path);
}

cn_model *te_load_default(void) {
    const char *d = getenv("CINDER_MODELS"), *home = getenv("HOME");
    char path[1024];
    if (d && *d) snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", d);
    else snprintf(path, sizeof path, "%s/.cache/cinder/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    cr_assert_eq(access(path, R_OK), 0, "the default model is missing: %s (run the setup script)", path);
    return load(path);
}

/* ---- the reference: cn_generate on a cache of its own ---- */

static void ref_text(void *user, const char *text, size_t n_bytes) {
    te_result *r = user;
    cr_assert_lt(r->n_text + n_bytes, sizeof r->text);
    memcpy(r->text + r->n_text, text, n_bytes);
    r->n_text += n_bytes;
}

static void ref_token(void *user, const cn_gen_token *tok) {
    te_result *r = user;
    cr_assert_lt(r->n_tok, TE_MAX_TOK);
    r->tok[r->n_tok++] = *tok;
}

void te_reference(const cn_model *m, const cn_engine_request *r, int32_t choice, int32_t n_threads, cn_type kv_type,
                  te_result *out) {
    memset(out, 0, sizeof *out);
    cn_error err = {0};
    cn_tokenizer *tok = NULL;
    cr_assert_eq(cn_tokenizer_load(cn_model_gguf(m), &tok, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t *prompt = NULL;
    int32_t n_prompt = 0;
    if (r->prompt) {
        size_t n = 0, n2 = 0;
        cr_assert_eq(cn_tokenize(tok, r->prompt, strlen(r->prompt), true, true, NULL, 0, &n, &err), CN_STATUS_OK);
        prompt = malloc((n + 1) * sizeof *prompt);
        cr_assert_eq(cn_tokenize(tok, r->prompt, strlen(r->prompt), true, true, prompt, n, &n2, &err), CN_STATUS_OK);
        n_prompt = (int32_t)n;
    } else {
        prompt = malloc((size_t)r->n_prompt_tokens * sizeof *prompt);
        memcpy(prompt, r->prompt_tokens, (size_t)r->n_prompt_tokens * sizeof *prompt);
        n_prompt = r->n_prompt_tokens;
    }
    const int32_t n_ctx = n_prompt + r->gen.max_tokens + 1;
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = n_threads;
    cp.n_batch_max = n_prompt;
    cp.n_ctx = n_ctx;
    cn_fwd *fwd = NULL;
    cr_assert_eq(cn_fwd_create(m, &cp, &fwd, &err), CN_STATUS_OK, "%s", err.msg);
    cn_kv_params kp = cn_model_kv_params(m);
    kp.type = kv_type;
    kp.n_blocks = n_ctx / kp.block_tokens + 2;
    cn_kv *kv = NULL;
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK, "%s", err.msg);

    cn_gen_params gp = r->gen;
    gp.on_text = ref_text;
    gp.on_token = ref_token;
    gp.should_cancel = NULL;
    gp.user = out;
    uint64_t seed = gp.sampling.seed;
    cr_assert_neq(seed, CN_SAMPLING_SEED_RANDOM, "the reference needs a fixed seed");
    gp.sampling.seed = seed + (uint64_t)choice;
    cn_gen *g = NULL;
    cr_assert_eq(cn_gen_create(tok, cn_model_hparams(m)->n_vocab, &gp, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gen_runner run = {m, fwd, kv, n_prompt};
    cr_assert_eq(cn_generate(&run, 0, prompt, n_prompt, 0, g, &err), CN_STATUS_OK, "%s", err.msg);
    out->reason = cn_gen_finish_reason(g);
    out->n_finish = 1;
    cn_gen_get_timings(g, &out->t);
    cn_gen_free(g);
    cn_kv_free(kv);
    cn_fwd_free(fwd);
    cn_tokenizer_free(tok);
    free(prompt);
}

void te_run(cn_engine *e, const cn_engine_request *reqs, te_req *out, int n) {
    cn_error err = {0};
    for (int i = 0; i < n; i++) {
        te_req_init(&out[i], reqs[i].n);
        out[i].e = e;
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        cr_assert_eq(cn_engine_submit(e, &reqs[i], &cb, &out[i].id, &err), CN_STATUS_OK, "request %d: %s", i, err.msg);
    }
    for (int guard = 0;; guard++) {
        bool all = true;
        for (int i = 0; i < n; i++) all &= te_req_done(&out[i]);
        if (all) break;
        cr_assert_lt(guard, 100000, "the engine stopped making progress");
        int32_t rows = 0;
        cr_assert_eq(cn_engine_step(e, &rows, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_gt(rows, 0, "a step ran nothing while requests were open");
    }
}

void te_expect_same(const te_result *got, const te_result *want, const char *what) {
    cr_assert_eq(got->n_finish, 1, "%s: on_finish called %d times", what, got->n_finish);
    int32_t n = CN_MIN(got->n_tok, want->n_tok);
    for (int32_t i = 0; i < n; i++) {
        const cn_gen_token *a = &got->tok[i], *b = &want->tok[i];
        cr_assert_eq(a->id, b->id, "%s: token %d is %d, alone it is %d", what, i, a->id, b->id);
        cr_assert_eq(a->index, b->index, "%s: token %d index", what, i);
        cr_assert_eq(a->has_logprob, b->has_logprob, "%s: token %d has_logprob", what, i);
        cr_assert(memcmp(&a->logprob, &b->logprob, sizeof a->logprob) == 0,
                  "%s: token %d logprob %.9g, alone %.9g (not bit-identical)", what, i, a->logprob, b->logprob);
        cr_assert_eq(a->n_top, b->n_top, "%s: token %d n_top", what, i);
        for (int32_t k = 0; k < a->n_top; k++)
            cr_assert(a->top[k].id == b->top[k].id &&
                          memcmp(&a->top[k].logprob, &b->top[k].logprob, sizeof(float)) == 0,
                      "%s: token %d top %d differs: %d %.9g vs %d %.9g", what, i, k, a->top[k].id, a->top[k].logprob,
                      b->top[k].id, b->top[k].logprob);
    }
    cr_assert_eq(got->n_tok, want->n_tok, "%s: %d tokens, alone %d", what, got->n_tok, want->n_tok);
    cr_assert_eq(got->n_text, want->n_text, "%s: %zu text bytes, alone %zu", what, got->n_text, want->n_text);
    cr_assert(memcmp(got->text, want->text, got->n_text) == 0, "%s: text differs", what);
    cr_assert_eq(got->reason, want->reason, "%s: finish %s, alone %s", what, cn_finish_reason_str(got->reason),
                 cn_finish_reason_str(want->reason));
}

cn_engine *te_engine(const cn_model *m, cn_engine_params p) {
    cn_engine *e = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_engine_create(m, &p, &e, &err), CN_STATUS_OK, "%s", err.msg);
    return e;
}
