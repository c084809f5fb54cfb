/* test_embed.c — embeddings (src/engine/embed.c): the pooling math against a scalar
 * reference written here (plain loops, long double), the hidden state against the model's
 * own head (on stories260K, whose weights are F32: the last token's unnormalized vector
 * times output.weight must be the logits cn_context_logits gives), packing invariance
 * (a text's vector is bit-identical alone or packed with others, across pass
 * boundaries), and bad inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinder.h"
#include "model/model.h"
#include "test_engine_util.h"

static uint32_t rng_state = 12345;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* The reference: what each pooling means, in long double. */
static void ref_pool(const float *h, int rows, int E, cn_pooling p, bool norm, float *out) {
    for (int j = 0; j < E; j++) {
        long double v = 0;
        if (p == CN_POOLING_MEAN) {
            for (int r = 0; r < rows; r++) v += h[r * E + j];
            v /= rows;
        } else {
            v = h[(p == CN_POOLING_CLS ? 0 : rows - 1) * E + j];
        }
        out[j] = (float)v;
    }
    if (!norm) return;
    long double ss = 0;
    for (int j = 0; j < E; j++) ss += (long double)out[j] * out[j];
    if (ss > 0)
        for (int j = 0; j < E; j++) out[j] = (float)(out[j] / sqrtl(ss));
}

Test(embed, pooling_matches_the_scalar_reference) {
    const int shapes[][2] = {{1, 1}, {1, 7}, {3, 5}, {17, 64}, {64, 33}, {5, 896}, {200, 3}};
    const cn_pooling pools[] = {CN_POOLING_MEAN, CN_POOLING_CLS, CN_POOLING_LAST};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s][0], E = shapes[s][1];
        float *h = malloc((size_t)rows * E * sizeof *h), *got = malloc(E * sizeof *got),
              *want = malloc(E * sizeof *want);
        for (int i = 0; i < rows * E; i++) h[i] = frand() * 4;
        for (size_t p = 0; p < 3; p++)
            for (int norm = 0; norm < 2; norm++) {
                cn_error err = {0};
                cr_assert_eq(cn_embd_pool(h, rows, E, pools[p], norm, got, &err), CN_STATUS_OK, "%s", err.msg);
                ref_pool(h, rows, E, pools[p], norm, want);
                double ss = 0;
                for (int j = 0; j < E; j++) {
                    cr_assert(fabsf(got[j] - want[j]) <= 1e-6f * (1 + fabsf(want[j])),
                              "%s %dx%d norm=%d: [%d] %.9g vs %.9g", cn_pooling_name(pools[p]), rows, E, norm, j,
                              got[j], want[j]);
                    ss += (double)got[j] * got[j];
                }
                if (norm) cr_assert(fabs(sqrt(ss) - 1) < 1e-5, "norm %.9g", sqrt(ss));
            }
        free(h);
        free(got);
        free(want);
    }
}

Test(embed, pooling_edge_cases_and_names) {
    float zero[8] = {0}, out[4] = {9, 9, 9, 9};
    cn_error err = {0};
    cr_assert_eq(cn_embd_pool(zero, 2, 4, CN_POOLING_MEAN, true, out, &err), CN_STATUS_OK);
    for (int j = 0; j < 4; j++) cr_assert_eq(out[j], 0.0f); /* a zero vector stays zero, no NaN */
    cr_assert_eq(cn_embd_pool(zero, 2, 4, CN_POOLING_NONE, true, out, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_embd_pool(zero, 2, 4, CN_POOLING_DEFAULT, true, out, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_embd_pool(zero, 0, 4, CN_POOLING_MEAN, true, out, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_embd_pool(NULL, 1, 4, CN_POOLING_MEAN, true, out, &err), CN_STATUS_INVALID_ARG);
    const char *names[] = {"none", "mean", "cls", "last"};
    for (int i = 0; i < 4; i++) {
        cn_pooling p = CN_POOLING_DEFAULT;
        cr_assert_eq(cn_pooling_from_name(names[i], &p, &err), CN_STATUS_OK);
        cr_assert_eq((int)p, i);
        cr_assert_str_eq(cn_pooling_name(p), names[i]);
    }
    cn_pooling p;
    cr_assert_eq(cn_pooling_from_name("LAST", &p, &err), CN_STATUS_OK);
    cr_assert_eq(p, CN_POOLING_LAST);
    cr_assert_eq(cn_pooling_from_name("max", &p, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "pooling");
    cr_assert_eq(cn_pooling_from_name(NULL, &p, &err), CN_STATUS_INVALID_ARG);
    cr_assert_null(cn_pooling_name((cn_pooling)9));
}

static cn_model *model;

static void setup(void) {
    const char *d = getenv("CINDER_TESTDATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", d && *d ? d : "../shared/testdata");
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &model, &err), CN_STATUS_OK, "%s", err.msg);
}

static void teardown(void) { cn_model_free(model); }

static cn_embedder_params params(int32_t n_batch, int32_t max_seqs, cn_pooling p, bool norm) {
    cn_embedder_params ep = cn_embedder_default_params();
    ep.n_threads = 2;
    ep.n_batch = n_batch;
    ep.max_seqs = max_seqs;
    ep.pooling = p;
    ep.normalize = norm;
    return ep;
}

static cn_embedder *make(int32_t n_batch, int32_t max_seqs, cn_pooling p, bool norm) {
    const cn_embedder_params ep = params(n_batch, max_seqs, p, norm);
    cn_embedder *e = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_embedder_create(model, &ep, &e, &err), CN_STATUS_OK, "%s", err.msg);
    return e;
}

/* The last token's unnormalized vector is what the LM head reads: W · h = the logits. */
Test(embed, last_hidden_state_feeds_the_head, .init = setup, .fini = teardown) {
    cn_embedder *e = make(64, 4, CN_POOLING_LAST, false);
    cr_assert_eq(cn_embedder_pooling(e), CN_POOLING_LAST);
    const int32_t E = cn_embedder_n_embd(e);
    const cn_weight *w = cn_model_output(model);
    cr_assert_eq(w->type, CN_TYPE_F32, "stories260K's head is F32");
    const int32_t V = (int32_t)w->ne1;
    const int32_t ids[] = {1, 403, 407, 261, 378, 64};
    const int32_t *toks[] = {ids};
    const int32_t n[] = {6};
    float *h = malloc(E * sizeof *h), *logits = malloc(V * sizeof *logits);
    cn_error err = {0};
    cr_assert_eq(cn_embedder_embed(e, toks, n, 1, h, &err), CN_STATUS_OK, "%s", err.msg);
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = 1;
    cp.n_ctx = 64;
    cn_context *c = NULL;
    cr_assert_eq(cn_context_create(model, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
    const cn_prompt pr = {.tokens = ids, .n_tokens = 6};
    cr_assert_eq(cn_context_logits(c, &pr, logits, &err), CN_STATUS_OK, "%s", err.msg);
    double worst = 0;
    for (int32_t v = 0; v < V; v++) {
        const float *row = (const float *)((const uint8_t *)w->data + (size_t)v * w->row_bytes);
        double dot = 0;
        for (int32_t j = 0; j < E; j++) dot += (double)row[j] * h[j];
        worst = fmax(worst, fabs(dot - logits[v]) / (1 + fabs(logits[v])));
    }
    cr_assert(worst < 2e-2, "W . h differs from the logits by %.3g (relative)", worst);
    cn_context_free(c);
    free(h);
    free(logits);
    cn_embedder_free(e);
}

/* Nine inputs of 1 to 23 tokens, for the tests that compare embedders. */
enum { N_IN = 9 };
static void some_inputs(int32_t *ids[N_IN], int32_t n[N_IN]) {
    for (int i = 0; i < N_IN; i++) {
        n[i] = 1 + (i * 7) % 23;
        ids[i] = malloc(n[i] * sizeof *ids[i]);
        for (int t = 0; t < n[i]; t++) ids[i][t] = 1 + (i * 31 + t * 17) % 500;
    }
}

/* A text's vector is the same alone and packed with others, whatever the pass sizes. */
Test(embed, packing_does_not_change_a_vector, .init = setup, .fini = teardown) {
    enum { N = N_IN };
    int32_t *ids[N], n[N];
    some_inputs(ids, n);
    const cn_pooling pools[] = {CN_POOLING_MEAN, CN_POOLING_CLS, CN_POOLING_LAST};
    for (size_t p = 0; p < 3; p++) {
        cn_embedder *alone = make(32, 1, pools[p], true), *packed = make(40, 3, pools[p], true);
        const int32_t E = cn_embedder_n_embd(alone);
        float *a = malloc((size_t)N * E * sizeof *a), *b = malloc((size_t)N * E * sizeof *b);
        cn_error err = {0};
        for (int i = 0; i < N; i++)
            cr_assert_eq(cn_embedder_embed(alone, (const int32_t *const *)&ids[i], &n[i], 1, a + (size_t)i * E, &err),
                         CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(cn_embedder_embed(packed, (const int32_t *const *)ids, n, N, b, &err), CN_STATUS_OK, "%s",
                     err.msg);
        cr_assert(!memcmp(a, b, (size_t)N * E * sizeof *a), "%s: packed vectors differ", cn_pooling_name(pools[p]));
        free(a);
        free(b);
        cn_embedder_free(alone);
        cn_embedder_free(packed);
    }
    for (int i = 0; i < N; i++) free(ids[i]);
}

Test(embed, bad_inputs, .init = setup, .fini = teardown) {
    cn_embedder *e = make(16, 4, CN_POOLING_DEFAULT, true);
    cr_assert_eq(cn_embedder_pooling(e), CN_POOLING_LAST); /* stories260K (llama) has no pooling_type */
    const int32_t E = cn_embedder_n_embd(e);
    float *out = malloc(2 * E * sizeof *out);
    int32_t ok[] = {1, 2, 3}, big[17] = {0}, bad[] = {1, 99999};
    const int32_t *toks[] = {ok, big};
    int32_t n[] = {3, 17};
    cn_error err = {0};
    cr_assert_eq(cn_embedder_embed(e, toks, n, 2, out, &err), CN_STATUS_LIMIT);
    cr_assert(strstr(err.msg, "input 1"), "%s", err.msg);
    n[1] = 0;
    cr_assert_eq(cn_embedder_embed(e, toks, n, 2, out, &err), CN_STATUS_INVALID_ARG);
    toks[1] = bad;
    n[1] = 2;
    cr_assert_eq(cn_embedder_embed(e, toks, n, 2, out, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_embedder_embed(e, NULL, NULL, 0, NULL, &err), CN_STATUS_OK); /* nothing to do */
    const char *texts[] = {"Once upon a time", ""};
    cr_assert_eq(cn_embedder_embed_texts(e, texts, 1, out, &err), CN_STATUS_OK, "%s", err.msg);
    /* "" is BOS alone for this model (it adds one): one token, a vector */
    cr_assert_eq(cn_embedder_embed_texts(e, texts, 2, out, &err), CN_STATUS_OK, "%s", err.msg);
    free(out);
    cn_embedder_free(e);
    cn_embedder_params ep = cn_embedder_default_params();
    cn_embedder *x = NULL;
    ep.pooling = CN_POOLING_NONE;
    cr_assert_eq(cn_embedder_create(model, &ep, &x, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "pooling");
    ep = cn_embedder_default_params();
    ep.n_batch = 4;
    cr_assert_eq(cn_embedder_create(model, &ep, &x, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "n_batch");
    cr_assert_null(x);
    cn_embedder_free(NULL);
}

/* The inputs' vectors from a standalone embedder (n_batch 40, 3 inputs a pass, mean):
 * what an engine's embedder must give. *E: floats per vector. */
static float *reference_vectors(int32_t *const ids[N_IN], const int32_t n[N_IN], int32_t *E) {
    cn_embedder *alone = make(40, 3, CN_POOLING_MEAN, true);
    *E = cn_embedder_n_embd(alone);
    float *a = malloc((size_t)N_IN * *E * sizeof *a);
    cn_error err = {0};
    cr_assert_eq(cn_embedder_embed(alone, (const int32_t *const *)ids, n, N_IN, a, &err), CN_STATUS_OK, "%s", err.msg);
    cn_embedder_free(alone);
    return a;
}

static cn_embedder *engine_embedder(cn_engine *eng) {
    cn_embedder_params ep = params(40, 3, CN_POOLING_MEAN, true);
    ep.n_threads = 7; /* not read: the engine's threads */
    cn_embedder *e = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_engine_embedder(eng, &ep, &e, &err), CN_STATUS_OK, "%s", err.msg);
    return e;
}

/* An engine's embedder (the engine's pool and tokenizer) gives a standalone embedder's
 * vectors bit for bit, whatever the engine's thread count. */
Test(embed, engine_embedder_matches_standalone, .init = setup, .fini = teardown) {
    int32_t *ids[N_IN], n[N_IN], E = 0;
    some_inputs(ids, n);
    float *a = reference_vectors(ids, n, &E), *b = malloc((size_t)N_IN * E * sizeof *b);
    cn_error err = {0};
    const int32_t threads[] = {1, 3};
    for (size_t k = 0; k < 2; k++) {
        cn_engine_params p = cn_engine_default_params();
        p.n_threads = threads[k];
        p.kv_tokens = 256;
        cn_engine *eng = te_engine(model, p);
        cn_embedder *e = engine_embedder(eng);
        cr_assert_eq(cn_embedder_tokenizer(e), cn_engine_tokenizer(eng), "the engine's tokenizer, not a copy");
        cr_assert_eq(cn_embedder_n_embd(e), E);
        cr_assert_eq(cn_embedder_pooling(e), CN_POOLING_MEAN);
        memset(b, 0, (size_t)N_IN * E * sizeof *b);
        cr_assert_eq(cn_embedder_embed(e, (const int32_t *const *)ids, n, N_IN, b, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert(!memcmp(a, b, (size_t)N_IN * E * sizeof *a), "%d threads: the engine's vectors differ", threads[k]);
        cn_embedder_free(e);
        cn_engine_free(eng);
    }
    cn_embedder *x = NULL;
    cr_assert_eq(cn_engine_embedder(NULL, NULL, &x, &err), CN_STATUS_INVALID_ARG);
    cn_engine *eng = te_engine(model, cn_engine_default_params());
    cn_embedder_params ep = cn_embedder_default_params();
    ep.max_seqs = 0;
    cr_assert_eq(cn_engine_embedder(eng, &ep, &x, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "max_seqs");
    cr_assert_null(x);
    cn_engine_free(eng);
    free(a);
    free(b);
    for (int i = 0; i < N_IN; i++) free(ids[i]);
}

/* A request on the run loop whose every token takes a while, as a slow step would (the
 * callback runs with the engine's lock held). */
typedef struct {
    te_req q;
    cn_engine_callbacks rec;
    atomic_int n_tok;
    atomic_bool done;
} slow_req;
static void slow_text(void *user, uint64_t id, int32_t index, const char *text, size_t n) {
    slow_req *s = user;
    s->rec.on_text(s->rec.user, id, index, text, n);
}
static void slow_token(void *user, uint64_t id, int32_t index, const cn_gen_token *tok) {
    slow_req *s = user;
    s->rec.on_token(s->rec.user, id, index, tok);
    atomic_fetch_add(&s->n_tok, 1);
    usleep(2000);
}
static void slow_finish(void *user, uint64_t id, int32_t index, cn_finish_reason r, const cn_gen_timings *t) {
    slow_req *s = user;
    s->rec.on_finish(s->rec.user, id, index, r, t);
    atomic_store(&s->done, true);
}

/* Embeddings from this thread while the run loop streams a request: every vector is the
 * standalone one, passes run between steps, and the request's tokens are those it makes
 * alone. */
Test(embed, engine_embedder_while_the_engine_generates, .init = setup, .fini = teardown, .timeout = 120) {
    int32_t *ids[N_IN], n[N_IN], E = 0;
    some_inputs(ids, n);
    float *a = reference_vectors(ids, n, &E), *b = malloc((size_t)N_IN * E * sizeof *b);
    cn_error err = {0};

    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 2;
    p.kv_tokens = 512;
    cn_engine *eng = te_engine(model, p);
    cn_embedder *e = engine_embedder(eng);
    cr_assert_eq(cn_engine_start(eng, &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_request r = cn_engine_request_default_params();
    r.prompt = "Once upon a time";
    r.gen.max_tokens = 150;
    r.gen.sampling.seed = 3;
    r.gen.sampling.temperature = 0.7f;
    r.gen.sampling.n_logprobs = 2;
    r.gen.sampling.ignore_eos = true;
    static slow_req s;
    memset(&s, 0, sizeof s);
    te_req_init(&s.q, 1);
    s.rec = te_callbacks(&s.q);
    const cn_engine_callbacks cb = {slow_text, slow_token, slow_finish, &s};
    cr_assert_eq(cn_engine_submit(eng, &r, &cb, &s.q.id, &err), CN_STATUS_OK, "%s", err.msg);
    for (int guard = 0; atomic_load(&s.n_tok) < 1; guard++) {
        cr_assert_lt(guard, 20000, "the request never streamed");
        usleep(1000);
    }
    int while_open = 0;
    for (int round = 0; round < 1000 && !atomic_load(&s.done); round++) {
        memset(b, 0, (size_t)N_IN * E * sizeof *b);
        cr_assert_eq(cn_embedder_embed(e, (const int32_t *const *)ids, n, N_IN, b, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert(!memcmp(a, b, (size_t)N_IN * E * sizeof *a), "round %d: the vectors differ", round);
        while_open += !atomic_load(&s.done);
    }
    cr_assert_gt(while_open, 0, "no embedding finished while the request streamed");
    cn_engine_wait_idle(eng);
    te_result want;
    te_reference(model, &r, 0, 1, CN_TYPE_F16, &want);
    te_expect_same(&s.q.r[0], &want, "beside embeddings");
    cn_engine_stop(eng);
    cn_embedder_free(e);
    cn_engine_free(eng);
    free(a);
    free(b);
    for (int i = 0; i < N_IN; i++) free(ids[i]);
}
