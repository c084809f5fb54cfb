/* test_spec.c — speculative decoding (src/gen/spec.c) against plain decoding, which is
 * the independent truth here: the same request run by cn_generate and by
 * cn_generate_spec must give the same tokens, text and finish reason, greedy and with a
 * seeded sampler, with either drafter (n-gram lookup; a draft model: stories260K drafting
 * for itself, whose guesses are mostly right, so verify passes with accepted and
 * rejected drafts and the KV truncation after them are all exercised). Also: the lookup
 * drafter on worked examples, the distribution of a token chosen in a verify pass
 * against the target's exact softmax (chi-square over many seeds), the limits
 * (max_tokens, a full context), the vocabulary check, and the caches left consistent.
 * The real models (SmolLM2, gemma-3, the Qwen2.5-Coder pair) are covered by the
 * spec_models and golden_qwen suites below (optimized build only). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/spec.h"
#include "test_generate_util.h"

Test(spec, lookup_worked_examples) {
    int32_t out[16];
    const int32_t h1[] = {1, 2, 3, 4, 9, 1, 2, 3};
    /* the suffix 1 2 3 occurred at 0: its continuation, up to k, up to the end */
    cr_assert_eq(cn_spec_lookup(h1, 8, 3, 3, out), 3);
    cr_assert(out[0] == 4 && out[1] == 9 && out[2] == 1);
    cr_assert_eq(cn_spec_lookup(h1, 8, 3, 16, out), 5);
    cr_assert(out[3] == 2 && out[4] == 3);
    /* ties go to the most recent occurrence; the longest n that matches wins */
    const int32_t h2[] = {5, 7, 5, 8, 5};
    cr_assert_eq(cn_spec_lookup(h2, 5, 1, 4, out), 2);
    cr_assert(out[0] == 8 && out[1] == 5);
    const int32_t h3[] = {6, 5, 1, 0, 5, 2, 6, 5};
    cr_assert_eq(cn_spec_lookup(h3, 8, 2, 1, out), 1);
    cr_assert_eq(out[0], 1); /* "6 5" -> 1, not "5" -> 2 */
    /* nothing to match */
    const int32_t h4[] = {1, 2, 3};
    cr_assert_eq(cn_spec_lookup(h4, 3, 4, 4, out), 0);
    cr_assert_eq(cn_spec_lookup(h4, 1, 4, 4, out), 0);
    cr_assert_eq(cn_spec_lookup(h4, 3, 4, 0, out), 0);
}

typedef struct {
    int32_t tokens[1024];
    int32_t n;
    char text[8192];
    cn_finish_reason finish;
    cn_spec_stats st;
} outcome;

/* One request on env e (sequence 0), plain (sp NULL) or speculative. */
static void run_one(gt_env *e, const cn_spec_params *sp, const char *prompt, const cn_gen_params *gp, outcome *o) {
    cn_error err = {0};
    cn_gen *g = NULL;
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, gp, &g, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t n = 0;
    int32_t *ids = gt_tokenize(e->tok, prompt, true, &n);
    memset(o, 0, sizeof *o);
    const cn_status s = sp ? cn_generate_spec(&e->run, sp, 0, ids, n, 0, g, &o->st, &err)
                           : cn_generate(&e->run, 0, ids, n, 0, g, &err);
    cr_assert_eq(s, CN_STATUS_OK, "%s", err.msg);
    const int32_t *t = cn_gen_tokens(g, &o->n);
    cr_assert_leq(o->n, 1024);
    memcpy(o->tokens, t, (size_t)o->n * sizeof *t);
    size_t nb = 0;
    const char *txt = cn_gen_text(g, &nb);
    cr_assert_lt(nb, sizeof o->text);
    memcpy(o->text, txt, nb);
    o->finish = cn_gen_finish_reason(g);
    cr_assert_eq(cn_kv_check(e->kv, &err), CN_STATUS_OK, "%s", err.msg);
    /* the cache holds the prompt and every generated token fed back, nothing drafted */
    if (o->finish != CN_FINISH_CANCELLED) cr_assert_leq(cn_kv_seq_len(e->kv, 0), n + o->n);
    cn_gen_free(g);
    free(ids);
}

static void same(const outcome *a, const outcome *b, const char *what) {
    cr_assert_eq(a->n, b->n, "%s: %d tokens with speculation, %d without", what, b->n, a->n);
    for (int32_t i = 0; i < a->n; i++)
        cr_assert_eq(a->tokens[i], b->tokens[i], "%s: token %d is %d with speculation, %d without", what, i,
                     b->tokens[i], a->tokens[i]);
    cr_assert_str_eq(a->text, b->text, "%s: text differs", what);
    cr_assert_eq(a->finish, b->finish, "%s: finish reason differs", what);
}

static const char *const k_prompts[] = {"Once upon a time", "Lily and Tom went to the park. Lily and Tom",
                                        "The cat sat. The cat sat. The cat", "One day, a little bird"};

static cn_gen_params greedy(int32_t max_tokens) {
    cn_gen_params p = cn_gen_default_params();
    p.sampling.temperature = 0.0f;
    p.max_tokens = max_tokens;
    return p;
}

Test(spec, greedy_identical_lookup, .timeout = 120) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    for (size_t i = 0; i < CN_ARRAY_LEN(k_prompts); i++)
        for (int32_t n = 1; n <= 4; n += 3)
            for (int32_t kmax = 1; kmax <= 16; kmax *= 4) {
                cn_gen_params gp = greedy(120);
                outcome plain, sp;
                run_one(&e, NULL, k_prompts[i], &gp, &plain);
                cn_spec_params p = cn_spec_default_params();
                p.lookup_n = n;
                p.n_draft_max = kmax;
                p.adaptive = false; /* the adaptive planner reads the clock: fixed lengths here */
                run_one(&e, &p, k_prompts[i], &gp, &sp);
                same(&plain, &sp, k_prompts[i]);
                cr_assert_gt(sp.st.drafted, 0, "lookup never drafted on '%s'", k_prompts[i]);
                cr_assert_lt(sp.st.steps, plain.n, "'%s': %lld passes for %d tokens", k_prompts[i],
                             (long long)sp.st.steps, plain.n);
            }
    gt_close(&e);
}

/* stories260K as target and as its own draft, fixed draft lengths. */
static cn_spec_params self_draft(gt_env *e, gt_env *d, int32_t n_ctx, int32_t n_batch) {
    gt_open_stories(e, n_ctx, n_batch, 1);
    gt_open_stories(d, n_ctx, n_batch, 1);
    cn_spec_params p = cn_spec_default_params();
    p.draft = &d->run;
    p.adaptive = false;
    return p;
}

/* stories260K drafting for stories260K: the draft's greedy guess is the target's choice
 * whenever the target is greedy, so with sampling some guesses miss. */
Test(spec, identical_with_a_draft_model, .timeout = 300) {
    gt_env e, d;
    cn_spec_params p = self_draft(&e, &d, 256, 64);
    cn_error err = {0};
    cr_assert_eq(cn_spec_check_vocab(e.tok, d.tok, &err), CN_STATUS_OK, "%s", err.msg);
    int64_t rejected = 0, accepted = 0;
    for (size_t i = 0; i < CN_ARRAY_LEN(k_prompts); i++)
        for (int mode = 0; mode < 4; mode++) {
            cn_gen_params gp = greedy(100);
            if (mode > 0) { /* seeded sampling, three seeds */
                gp.sampling.temperature = 0.9f;
                gp.sampling.top_k = 40;
                gp.sampling.top_p = 0.95f;
                gp.sampling.seed = 1000 + (uint64_t)mode * 7 + i;
            }
            outcome plain, sp;
            run_one(&e, NULL, k_prompts[i], &gp, &plain);
            run_one(&e, &p, k_prompts[i], &gp, &sp);
            same(&plain, &sp, k_prompts[i]);
            cr_assert_gt(sp.st.draft_evals, 0);
            cr_assert_leq(cn_kv_seq_len(d.kv, 0), cn_kv_seq_len(e.kv, 0) + CN_SPEC_MAX_DRAFT);
            cr_assert_eq(cn_kv_check(d.kv, &err), CN_STATUS_OK, "%s", err.msg);
            if (mode == 0) cr_assert_eq(sp.st.accepted, sp.st.drafted, "greedy self-draft: every guess is right");
            accepted += sp.st.accepted;
            rejected += sp.st.drafted - sp.st.accepted;
        }
    cr_assert_gt(accepted, 0);
    cr_assert_gt(rejected, 0, "no guess was ever rejected: the rollback went untested");
    gt_close(&d);
    gt_close(&e);
}

Test(spec, seeded_sampling_identical_lookup, .timeout = 120) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    cn_spec_params p = cn_spec_default_params();
    p.lookup_n = 3;
    for (uint64_t seed = 1; seed <= 24; seed++) {
        p.adaptive = seed % 2; /* adaptive: lengths by the clock, the tokens all the same */
        cn_gen_params gp = cn_gen_default_params();
        gp.sampling.temperature = seed % 3 ? 0.7f : 1.3f;
        gp.sampling.top_k = seed % 2 ? 0 : 20;
        gp.sampling.min_p = 0.02f;
        gp.sampling.repetition_penalty = seed % 4 ? 1.0f : 1.2f;
        gp.sampling.seed = seed;
        gp.max_tokens = 80;
        outcome plain, sp;
        run_one(&e, NULL, k_prompts[seed % CN_ARRAY_LEN(k_prompts)], &gp, &plain);
        run_one(&e, &p, k_prompts[seed % CN_ARRAY_LEN(k_prompts)], &gp, &sp);
        same(&plain, &sp, "seeded sampling");
    }
    gt_close(&e);
}

/* Stops, max_tokens and the context limit land on the same token. */
Test(spec, limits_identical, .timeout = 120) {
    for (int32_t n_ctx = 24; n_ctx <= 40; n_ctx += 16) {
        gt_env e, d;
        gt_open_stories(&e, n_ctx, 32, 1);
        gt_open_stories(&d, n_ctx, 32, 1);
        for (int32_t max = 1; max <= 30; max += 7)
            for (int kind = 0; kind < 2; kind++) {
                cn_gen_params gp = greedy(max);
                const char *stops[] = {"park"};
                if (max > 20) gp.stop = stops, gp.n_stop = 1;
                cn_spec_params p = cn_spec_default_params();
                if (kind) p.draft = &d.run;
                else p.lookup_n = 2;
                outcome plain, sp;
                run_one(&e, NULL, k_prompts[1], &gp, &plain);
                run_one(&e, &p, k_prompts[1], &gp, &sp);
                same(&plain, &sp, "limits");
            }
        gt_close(&d);
        gt_close(&e);
    }
}

/* The token chosen at a drafted position in a verify pass (the second one) follows the
 * target's own distribution: 4000 seeds with a self-draft, the second token's counts given the most common first token,
 * against softmax of the target's logits for that history, by Pearson's chi-square (bins of expected count
 * >= 5, the rest pooled; the 0.999 quantile of chi-square for the bins' degrees of
 * freedom by the Wilson-Hilferty approximation). */
Test(spec, verified_token_follows_the_target_distribution, .timeout = 300) {
    gt_env e, d;
    cn_spec_params p = self_draft(&e, &d, 64, 16);
    p.n_draft_max = 1;
    const char *prompt = "Once upon a time";
    const int32_t V = e.n_vocab;
    enum { N = 4000 };
    static int32_t first[N], second[N];
    for (int i = 0; i < N; i++) {
        cn_gen_params gp = cn_gen_default_params();
        gp.sampling.temperature = 1.0f;
        gp.sampling.seed = 777 + (uint64_t)i;
        gp.max_tokens = 3; /* the first token from prefill, the second checked against a draft */
        outcome o;
        run_one(&e, &p, prompt, &gp, &o);
        cr_assert_geq(o.n, 2);
        cr_assert_eq(o.st.drafted, 1, "the second token must come from a verify pass with one draft");
        first[i] = o.tokens[0];
        second[i] = o.tokens[1];
    }
    int32_t *cnt = calloc((size_t)V, sizeof *cnt);
    int32_t t1 = 0;
    for (int i = 0; i < N; i++)
        if (++cnt[first[i]] > cnt[t1]) t1 = first[i];
    int32_t n1 = cnt[t1];
    cr_assert_gt(n1, 500, "the most common first token came %d times", n1);
    memset(cnt, 0, (size_t)V * sizeof *cnt);
    for (int i = 0; i < N; i++)
        if (first[i] == t1) cnt[second[i]]++;
    /* the target's distribution after prompt + t1 */
    int32_t n = 0;
    int32_t *ids = gt_tokenize(e.tok, prompt, true, &n);
    ids = realloc(ids, (size_t)(n + 1) * sizeof *ids);
    ids[n] = t1;
    float *lg = malloc((size_t)V * sizeof *lg);
    cn_error err = {0};
    cn_kv_seq_truncate(e.kv, 0, 0);
    cr_assert_eq(cn_gen_prefill(&e.run, 0, ids, n + 1, 0, lg, &err), CN_STATUS_OK, "%s", err.msg);
    double mx = -INFINITY, z = 0;
    for (int32_t v = 0; v < V; v++) mx = fmax(mx, lg[v]);
    for (int32_t v = 0; v < V; v++) z += exp(lg[v] - mx);
    double chi2 = 0, pool_e = 0, pool_o = 0;
    int bins = 0;
    for (int32_t v = 0; v < V; v++) {
        const double ex = n1 * exp(lg[v] - mx) / z;
        if (ex >= 5) {
            chi2 += (cnt[v] - ex) * (cnt[v] - ex) / ex;
            bins++;
        } else {
            pool_e += ex;
            pool_o += cnt[v];
        }
    }
    if (pool_e > 0) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    cr_assert_geq(bins, 3, "too few bins (%d) for a meaningful test", bins);
    const double k = bins - 1, zq = 3.090; /* the standard normal's 0.999 quantile */
    const double crit = k * pow(1 - 2 / (9 * k) + zq * sqrt(2 / (9 * k)), 3);
    cr_assert_lt(chi2, crit,
                 "chi-square %.1f over %d bins (critical %.1f at 0.001): the verified token's distribution "
                 "is not the target's",
                 chi2, bins, crit);
    free(lg);
    free(ids);
    free(cnt);
    gt_close(&d);
    gt_close(&e);
}

Test(spec, bad_parameters_and_vocabularies) {
    cn_error err = {0};
    cn_spec_params p = cn_spec_default_params();
    p.n_draft_max = 0;
    cr_assert_eq(cn_spec_validate(&p, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "draft length"), "%s", err.msg);
    p = cn_spec_default_params();
    p.lookup_n = 99;
    cr_assert_eq(cn_spec_validate(&p, &err), CN_STATUS_INVALID_ARG);
    p.n_draft_max = CN_SPEC_MAX_DRAFT + 1;
    cr_assert_eq(cn_spec_validate(&p, &err), CN_STATUS_INVALID_ARG);
    /* stories260K (512-token SentencePiece) cannot draft for the default SmolLM2 model */
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    char path[1024];
    const char *m = getenv("CINDER_MODELS");
    if (m && *m) snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", m);
    else
        snprintf(path, sizeof path, "%s/.cache/cinder/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "");
    cn_model *sm = NULL;
    cn_tokenizer *st = NULL;
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &sm, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_tokenizer_load(cn_model_gguf(sm), &st, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_spec_check_vocab(st, e.tok, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "vocabulary"), "%s", err.msg);
    cr_assert_eq(cn_spec_check_vocab(st, st, &err), CN_STATUS_OK);
    cn_tokenizer_free(st);
    cn_model_free(sm);
    gt_close(&e);
}

/* ---- the shipped models (optimized build only: scripts/test.sh leaves spec_models out
 * of the sanitized and forced-ISA runs, as it does the Qwen goldens) ---- */

static void open_model(gt_env *e, const char *file, int32_t n_ctx) {
    memset(e, 0, sizeof *e);
    char path[1024];
    const char *d = getenv("CINDER_MODELS");
    if (d && *d) snprintf(path, sizeof path, "%s/%s", d, file);
    else snprintf(path, sizeof path, "%s/.cache/cinder/models/%s", getenv("HOME") ? getenv("HOME") : "", file);
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true; /* as the CLI loads them: huge pages, packed matrices */
    cr_assert_eq(cn_model_load(path, &mp, &e->model, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_tokenizer_load(cn_model_gguf(e->model), &e->tok, &err), CN_STATUS_OK, "%s", err.msg);
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = 2;
    cp.n_batch_max = 64;
    cp.n_ctx = n_ctx;
    cr_assert_eq(cn_fwd_create(e->model, &cp, &e->fwd, &err), CN_STATUS_OK, "%s", err.msg);
    cn_kv_params kp = cn_model_kv_params(e->model);
    kp.max_seqs = 1;
    kp.n_blocks = n_ctx / kp.block_tokens + 2;
    cr_assert_eq(cn_kv_create(&kp, &e->kv, &err), CN_STATUS_OK, "%s", err.msg);
    e->n_vocab = cn_model_hparams(e->model)->n_vocab;
    e->run = (cn_gen_runner){e->model, e->fwd, e->kv, 64};
}

static const char *const k_model_prompts[] = {
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colours are red, yellow and blue. The three primary colours are",
    "int max(int a, int b) { return a > b ? a : b; }\nint min(int a, int b) {"};

/* Greedy and one seeded sampling run per prompt, plain vs lookup vs a draft model
 * (draft_file, or the target itself when NULL). */
static void models_identical(const char *target_file, const char *draft_file, int32_t n_tokens) {
    gt_env e, d;
    open_model(&e, target_file, 512);
    open_model(&d, draft_file ? draft_file : target_file, 512);
    cn_error err = {0};
    cr_assert_eq(cn_spec_check_vocab(e.tok, d.tok, &err), CN_STATUS_OK, "%s", err.msg);
    int64_t accepted = 0;
    for (size_t i = 0; i < CN_ARRAY_LEN(k_model_prompts); i++)
        for (int sampled = 0; sampled < 2; sampled++) {
            cn_gen_params gp = greedy(n_tokens);
            if (sampled) {
                gp.sampling.temperature = 0.8f;
                gp.sampling.top_k = 40;
                gp.sampling.seed = 42 + i;
            }
            outcome plain, lk, dm;
            run_one(&e, NULL, k_model_prompts[i], &gp, &plain);
            cn_spec_params p = cn_spec_default_params();
            p.lookup_n = 3;
            p.adaptive = false;
            run_one(&e, &p, k_model_prompts[i], &gp, &lk);
            same(&plain, &lk, "n-gram lookup");
            p = cn_spec_default_params();
            p.draft = &d.run;
            p.adaptive = sampled; /* fixed lengths greedy, the planner with sampling */
            run_one(&e, &p, k_model_prompts[i], &gp, &dm);
            same(&plain, &dm, "draft model");
            accepted += lk.st.accepted + dm.st.accepted;
        }
    cr_assert_gt(accepted, 0, "%s: no draft was ever accepted", target_file);
    gt_close(&d);
    gt_close(&e);
}

Test(spec_models, smollm2_135m_identical, .timeout = 300) {
    models_identical("SmolLM2-135M-Instruct.Q4_1.gguf", NULL, 48);
}
Test(spec_models, gemma3_270m_identical, .timeout = 300) { models_identical("gemma-3-270m-q4_k_m.gguf", NULL, 48); }
Test(spec_models, qwen25_coder_05b_identical, .timeout = 600) {
    models_identical("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", NULL, 32);
}
/* the real pair: Qwen2.5-Coder 0.5B drafting for 1.5B */
Test(spec_models, qwen25_coder_15b_with_05b_draft_identical, .timeout = 900) {
    models_identical("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 32);
}
