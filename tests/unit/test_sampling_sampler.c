/* test_sampling_sampler.c — cn_sampler as the generation loop will use it: parameter
 * defaults and validation (each bad value named with its range), chain specs, seeded
 * draws (a chi-square check of 100k draws, same seed same sequence), greedy, penalties over
 * a history window, bans, logprobs, the stage observer, and errors that consume nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/rng.h"
#include "gen/sampling.h"

enum { BLUE, GRAY, CLEAR, DARK };

static void colour_logits(float *l) {
    const double p[4] = {0.50, 0.25, 0.15, 0.10};
    for (int i = 0; i < 4; i++) l[i] = (float)log(p[i]);
}

static cn_sampler *make(const cn_sampling_params *p, int32_t n_vocab) {
    cn_sampler *s = NULL;
    cn_error err = {0};
    cn_status st = cn_sampler_create(p, n_vocab, &s, &err);
    cr_assert_eq(st, CN_STATUS_OK, "create: %s", err.msg);
    return s;
}

static int32_t sample1(cn_sampler *s, const float *l, int32_t n, const int32_t *h, size_t nh, cn_sample_info *info) {
    int32_t tok = -1;
    cn_error err = {0};
    cn_status st = cn_sampler_sample(s, l, n, h, nh, &tok, info, &err);
    cr_assert_eq(st, CN_STATUS_OK, "sample: %s", err.msg);
    return tok;
}

/* ---- parameters ---- */

Test(sampling_params, defaults_are_neutral_and_valid) {
    cn_sampling_params p = cn_sampling_default_params();
    cr_assert_eq(p.temperature, 1.0f);
    cr_assert_eq(p.top_k, 0);
    cr_assert_eq(p.top_p, 1.0f);
    cr_assert_eq(p.min_p, 0.0f);
    cr_assert_eq(p.typical_p, 1.0f);
    cr_assert_eq(p.repetition_penalty, 1.0f);
    cr_assert_eq(p.presence_penalty, 0.0f);
    cr_assert_eq(p.frequency_penalty, 0.0f);
    cr_assert_eq(p.penalty_last_n, -1);
    cr_assert_eq(p.n_logit_bias, 0);
    cr_assert_eq(p.seed, CN_SAMPLING_SEED_RANDOM);
    cr_assert_eq(p.n_logprobs, -1);
    cr_assert_not(p.ignore_eos);
    const cn_sampler_stage want[] = {CN_SAMPLER_LOGIT_BIAS, CN_SAMPLER_PENALTIES, CN_SAMPLER_TEMPERATURE,
                                     CN_SAMPLER_TOP_K,      CN_SAMPLER_TOP_P,     CN_SAMPLER_MIN_P,
                                     CN_SAMPLER_TYPICAL};
    cr_assert_eq(p.n_chain, 7);
    for (int i = 0; i < 7; i++) cr_assert_eq(p.chain[i], want[i]);
    cr_assert_eq(cn_sampling_validate(&p, 32000, NULL), CN_STATUS_OK);
}

typedef struct {
    const char *field; /* must appear in the message */
    const char *range; /* and so must this */
    void (*set)(cn_sampling_params *);
} bad_case;

static const cn_logit_bias bias_bad_token[1] = {{32000, 1.0f}};
static const cn_logit_bias bias_neg_token[1] = {{-1, 1.0f}};
static const cn_logit_bias bias_nan[1] = {{5, NAN}};
static const cn_logit_bias bias_pinf[1] = {{5, INFINITY}};

static void s_top_p_17(cn_sampling_params *p) { p->top_p = 1.7f; }
static void s_top_p_0(cn_sampling_params *p) { p->top_p = 0.0f; }
static void s_top_p_nan(cn_sampling_params *p) { p->top_p = NAN; }
static void s_temp_m1(cn_sampling_params *p) { p->temperature = -1.0f; }
static void s_temp_nan(cn_sampling_params *p) { p->temperature = NAN; }
static void s_temp_inf(cn_sampling_params *p) { p->temperature = INFINITY; }
static void s_top_k_m3(cn_sampling_params *p) { p->top_k = -3; }
static void s_min_p_15(cn_sampling_params *p) { p->min_p = 1.5f; }
static void s_min_p_nan(cn_sampling_params *p) { p->min_p = NAN; }
static void s_typ_0(cn_sampling_params *p) { p->typical_p = 0.0f; }
static void s_typ_nan(cn_sampling_params *p) { p->typical_p = NAN; }
static void s_rep_0(cn_sampling_params *p) { p->repetition_penalty = 0.0f; }
static void s_rep_nan(cn_sampling_params *p) { p->repetition_penalty = NAN; }
static void s_pres_3(cn_sampling_params *p) { p->presence_penalty = 3.0f; }
static void s_pres_nan(cn_sampling_params *p) { p->presence_penalty = NAN; }
static void s_freq_m3(cn_sampling_params *p) { p->frequency_penalty = -3.0f; }
static void s_freq_nan(cn_sampling_params *p) { p->frequency_penalty = NAN; }
static void s_last_n(cn_sampling_params *p) { p->penalty_last_n = -2; }
static void s_logprobs(cn_sampling_params *p) { p->n_logprobs = 21; }
static void s_nbias_neg(cn_sampling_params *p) { p->n_logit_bias = -1; }
static void s_bias_null(cn_sampling_params *p) { p->n_logit_bias = 1; }
static void s_bias_tok(cn_sampling_params *p) { p->logit_bias = bias_bad_token, p->n_logit_bias = 1; }
static void s_bias_neg(cn_sampling_params *p) { p->logit_bias = bias_neg_token, p->n_logit_bias = 1; }
static void s_bias_nan(cn_sampling_params *p) { p->logit_bias = bias_nan, p->n_logit_bias = 1; }
static void s_bias_pinf(cn_sampling_params *p) { p->logit_bias = bias_pinf, p->n_logit_bias = 1; }
static void s_chain_dup(cn_sampling_params *p) { p->chain[1] = CN_SAMPLER_TOP_P; }
static void s_chain_bad(cn_sampling_params *p) { p->chain[0] = (cn_sampler_stage)99; }
static void s_chain_n(cn_sampling_params *p) { p->n_chain = 8; }
static void s_not_in_chain(cn_sampling_params *p) {
    p->n_chain = 2;
    p->chain[0] = CN_SAMPLER_LOGIT_BIAS, p->chain[1] = CN_SAMPLER_TOP_K;
    p->top_p = 0.9f;
}

Test(sampling_params, validate_names_each_bad_value_and_its_range) {
    const bad_case cases[] = {
        {"top_p = 1.7", "(0, 1]", s_top_p_17},
        {"top_p = 0", "(0, 1]", s_top_p_0},
        {"top_p = nan", "(0, 1]", s_top_p_nan},
        {"temperature = -1", "[0, 100]", s_temp_m1},
        {"temperature = nan", "[0, 100]", s_temp_nan},
        {"temperature = inf", "[0, 100]", s_temp_inf},
        {"top_k = -3", ">= 0", s_top_k_m3},
        {"min_p = 1.5", "[0, 1]", s_min_p_15},
        {"min_p = nan", "[0, 1]", s_min_p_nan},
        {"typical_p = 0", "(0, 1]", s_typ_0},
        {"typical_p = nan", "(0, 1]", s_typ_nan},
        {"repetition_penalty = 0", "(0, 10]", s_rep_0},
        {"repetition_penalty = nan", "(0, 10]", s_rep_nan},
        {"presence_penalty = 3", "[-2, 2]", s_pres_3},
        {"presence_penalty = nan", "[-2, 2]", s_pres_nan},
        {"frequency_penalty = -3", "[-2, 2]", s_freq_m3},
        {"frequency_penalty = nan", "[-2, 2]", s_freq_nan},
        {"penalty_last_n = -2", ">= -1", s_last_n},
        {"n_logprobs = 21", "[-1, 20]", s_logprobs},
        {"n_logit_bias = -1", "[0, 65536]", s_nbias_neg},
        {"logit_bias is NULL", "n_logit_bias = 1", s_bias_null},
        {"token 32000", "[0, 32000)", s_bias_tok},
        {"token -1", "[0, 32000)", s_bias_neg},
        {"logit_bias[0] (token 5) = nan", "finite or -inf", s_bias_nan},
        {"logit_bias[0] (token 5) = inf", "finite or -inf", s_bias_pinf},
        {"'top_p' appears twice", "sampler chain", s_chain_dup},
        {"chain[0] = 99", "not a sampler stage", s_chain_bad},
        {"n_chain = 8", "[0, 7]", s_chain_n},
        {"top_p is set", "not in the sampler chain (logit_bias;top_k)", s_not_in_chain},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cn_sampling_params p = cn_sampling_default_params();
        cases[i].set(&p);
        cn_error err = {0};
        cr_assert_eq(cn_sampling_validate(&p, 32000, &err), CN_STATUS_INVALID_ARG, "case %zu (%s) passed", i,
                     cases[i].field);
        cr_assert_eq(err.status, CN_STATUS_INVALID_ARG);
        cr_assert(strstr(err.msg, cases[i].field) && strstr(err.msg, cases[i].range),
                  "case %zu: message '%s' lacks '%s' or '%s'", i, err.msg, cases[i].field, cases[i].range);
        cr_assert_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
        /* and the sampler refuses the same params, allocating nothing */
        cn_sampler *s = (cn_sampler *)&p;
        cr_assert_eq(cn_sampler_create(&p, 32000, &s, NULL), CN_STATUS_INVALID_ARG);
        cr_assert_null(s);
    }
    /* the boundaries themselves are valid */
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = 0, p.top_p = 1, p.min_p = 1, p.typical_p = 1, p.repetition_penalty = 10;
    p.presence_penalty = -2, p.frequency_penalty = 2, p.penalty_last_n = -1, p.n_logprobs = 20;
    cn_logit_bias ban[1] = {{31999, -INFINITY}};
    p.logit_bias = ban, p.n_logit_bias = 1;
    cr_assert_eq(cn_sampling_validate(&p, 32000, NULL), CN_STATUS_OK);
    /* n_vocab 0 = unknown: ids are only checked to be >= 0 */
    p = cn_sampling_default_params();
    s_bias_tok(&p);
    cr_assert_eq(cn_sampling_validate(&p, 0, NULL), CN_STATUS_OK);
}

Test(sampling_params, chain_specs_and_presets) {
    cn_sampling_params p = cn_sampling_default_params();
    cn_error err = {0};
    cr_assert_eq(cn_sampling_set_chain(&p, "llama.cpp", &err), CN_STATUS_OK, "%s", err.msg);
    const cn_sampler_stage llama[] = {CN_SAMPLER_LOGIT_BIAS, CN_SAMPLER_PENALTIES, CN_SAMPLER_TOP_K,
                                      CN_SAMPLER_TYPICAL,    CN_SAMPLER_TOP_P,     CN_SAMPLER_MIN_P,
                                      CN_SAMPLER_TEMPERATURE};
    cr_assert_eq(p.n_chain, 7);
    for (int i = 0; i < 7; i++) cr_assert_eq(p.chain[i], llama[i], "llama.cpp chain[%d]", i);

    cr_assert_eq(cn_sampling_set_chain(&p, " penalties; top_k ;top_p,min_p;typical;temp ", &err), CN_STATUS_OK, "%s",
                 err.msg);
    const cn_sampler_stage custom[] = {CN_SAMPLER_LOGIT_BIAS, CN_SAMPLER_PENALTIES, CN_SAMPLER_TOP_K,
                                       CN_SAMPLER_TOP_P,      CN_SAMPLER_MIN_P,     CN_SAMPLER_TYPICAL,
                                       CN_SAMPLER_TEMPERATURE};
    cr_assert_eq(p.n_chain, 7);
    for (int i = 0; i < 7; i++) cr_assert_eq(p.chain[i], custom[i], "custom chain[%d]", i);

    cr_assert_eq(cn_sampling_set_chain(&p, "top_k;logit_bias", &err), CN_STATUS_OK);
    cr_assert_eq(p.n_chain, 2);
    cr_assert_eq(p.chain[0], CN_SAMPLER_TOP_K, "an explicit logit_bias keeps its place");

    cr_assert_eq(cn_sampling_set_chain(&p, "default", &err), CN_STATUS_OK);
    cr_assert_eq(p.n_chain, 7);
    cr_assert_eq(p.chain[2], CN_SAMPLER_TEMPERATURE);

    const struct {
        const char *spec, *msg;
    } bad[] = {{"top_k;mirostat", "unknown stage 'mirostat'"},
               {"top_k;top_p;top_k", "'top_k' appears twice"},
               {"top_k;;top_p", "empty stage name"},
               {"top_k;", "empty stage name"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cn_sampling_params q = cn_sampling_default_params();
        cr_assert_eq(cn_sampling_set_chain(&q, bad[i].spec, &err), CN_STATUS_INVALID_ARG, "%s", bad[i].spec);
        cr_assert(strstr(err.msg, bad[i].msg), "'%s': %s", bad[i].spec, err.msg);
        cr_assert_eq(q.n_chain, 7, "params unchanged on error");
        cr_assert_eq(q.chain[2], CN_SAMPLER_TEMPERATURE);
    }
    for (int s = 0; s < CN_SAMPLER_N_STAGES; s++) {
        cn_sampling_params q = cn_sampling_default_params();
        cr_assert_eq(cn_sampling_set_chain(&q, cn_sampler_stage_name((cn_sampler_stage)s), NULL), CN_STATUS_OK);
    }
    cr_assert_str_eq(cn_sampler_stage_name(CN_SAMPLER_N_STAGES), "?");
}

/* ---- draws ---- */

/* 100k draws from the top-p 0.7 set {blue 2/3, gray 1/3} with seed 42. Pearson chi-square
 * with 1 degree of freedom must stay below 10.83 (p = 0.001); the seed is fixed, so the
 * result is the same on every run. */
Test(sampling_draws, top_p_07_frequencies_pass_chi_square) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    p.top_p = 0.7f;
    p.seed = 42;
    cn_sampler *s = make(&p, 4);
    long counts[4] = {0};
    const long n = 100000;
    for (long i = 0; i < n; i++) counts[sample1(s, l, 4, NULL, 0, NULL)]++;
    cr_assert_eq(counts[CLEAR] + counts[DARK], 0, "top-p 0.7 drew clear %ld, dark %ld times", counts[CLEAR],
                 counts[DARK]);
    double e0 = n * 2.0 / 3, e1 = n * 1.0 / 3;
    double chi2 = (counts[BLUE] - e0) * (counts[BLUE] - e0) / e0 + (counts[GRAY] - e1) * (counts[GRAY] - e1) / e1;
    fprintf(stderr, "[sampling] top-p 0.7, seed 42, 100k draws: blue %ld gray %ld, chi2 %.3f\n", counts[BLUE],
            counts[GRAY], chi2);
    cr_assert(chi2 < 10.83, "chi2 = %.3f (blue %ld, gray %ld)", chi2, counts[BLUE], counts[GRAY]);
    cn_sampler_free(s);
}

/* Changing logits every step, as in generation. */
static void step_logits(cn_rng *r, float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)(6.0 * cn_rng_uniform(r));
}

static void run_sequence(uint64_t seed, int32_t *out, int steps) {
    cn_sampling_params p = cn_sampling_default_params();
    p.seed = seed;
    p.temperature = 0.9f;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    cn_sampler *s = make(&p, 1000);
    cn_rng lr;
    cn_rng_seed(&lr, 99);
    float l[1000];
    for (int i = 0; i < steps; i++) {
        step_logits(&lr, l, 1000);
        out[i] = sample1(s, l, 1000, out, (size_t)i, NULL);
    }
    cn_sampler_free(s);
}

Test(sampling_draws, same_seed_same_sequence) {
    int32_t a[300], b[300], c[300];
    run_sequence(1234, a, 300);
    run_sequence(1234, b, 300);
    run_sequence(1235, c, 300);
    int same = 0;
    for (int i = 0; i < 300; i++) {
        cr_assert_eq(a[i], b[i], "step %d: %d vs %d", i, a[i], b[i]);
        same += a[i] == c[i];
    }
    cr_assert_lt(same, 100, "seeds 1234 and 1235 agree on %d of 300 tokens", same);
}

Test(sampling_draws, random_seed_is_reported_and_reproducible) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    cn_sampler *s = make(&p, 4);
    uint64_t seed = cn_sampler_seed(s);
    cr_assert_neq(seed, CN_SAMPLING_SEED_RANDOM);
    cr_assert_eq(cn_sampler_params(s)->seed, seed);
    p.seed = seed;
    cn_sampler *t = make(&p, 4);
    for (int i = 0; i < 200; i++) cr_assert_eq(sample1(s, l, 4, NULL, 0, NULL), sample1(t, l, 4, NULL, 0, NULL));
    /* reseed restarts the stream */
    int32_t first[50];
    cn_sampler_reseed(t, 77);
    for (int i = 0; i < 50; i++) first[i] = sample1(t, l, 4, NULL, 0, NULL);
    cn_sampler_reseed(t, 77);
    for (int i = 0; i < 50; i++) cr_assert_eq(sample1(t, l, 4, NULL, 0, NULL), first[i]);
    cn_sampler_free(s);
    cn_sampler_free(t);
}

Test(sampling_draws, greedy_ignores_the_draw) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = 0;
    p.seed = 5;
    cn_sampler *s = make(&p, 4);
    for (int i = 0; i < 1000; i++) {
        cn_sample_info info;
        cr_assert_eq(sample1(s, l, 4, NULL, 0, &info), BLUE);
        cr_assert_eq(info.token, BLUE);
        cr_assert_eq(info.p, 1.0f);
        cr_assert_eq(info.n_kept, 1);
        cr_assert(info.u >= 0 && info.u < 1);
        cr_assert_not(info.has_logprob);
    }
    cn_sampler_free(s);
}

/* Greedy takes a one-pass shortcut unless an observer wants the stages; both ways must
 * pick the same token (largest logit, lowest id on ties, -inf skipped) and report the
 * same info, with top-k/top-p/min-p on, over random logits full of ties. */
static void noop_observer(void *user, cn_sampler_stage stage, const cn_candidate *c, size_t n) {
    (void)user, (void)stage, (void)c, (void)n;
}

Test(sampling_draws, greedy_shortcut_matches_the_chain) {
    enum { V = 300 };
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = 0;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.seed = 11;
    /* bans, a boost, a cut, and a bias that can tie with an unbiased logit */
    const cn_logit_bias bias[] = {{3, -INFINITY}, {40, 2.5f}, {41, -3.0f}, {200, 1.0f}, {299, -INFINITY}};
    p.logit_bias = bias;
    p.n_logit_bias = (int32_t)(sizeof bias / sizeof bias[0]);
    cn_sampler *fast = make(&p, V), *slow = make(&p, V);
    cn_sampler_set_observer(slow, noop_observer, NULL);
    uint64_t st = 7;
    for (int rep = 0; rep < 500; rep++) {
        float l[V];
        for (int i = 0; i < V; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const int v = (int)(st >> 58); /* 0..63: many ties */
            l[i] = v == 0 ? -INFINITY : (float)(v % 9) - 4.0f;
        }
        if (rep % 50 == 0) /* a single finite logit, which the bias bans */
            for (int i = 0; i < V - 1; i++) l[i] = -INFINITY;
        int32_t want = -1;
        float wl = -INFINITY;
        for (int i = 0; i < V; i++) {
            float v = l[i];
            for (size_t k = 0; k < (sizeof bias / sizeof bias[0]); k++)
                if (bias[k].token == i) v += bias[k].bias;
            if (v != -INFINITY && (want < 0 || v > wl)) want = i, wl = v;
        }
        if (rep % 50 == 0) {
            if (want < 0) { /* the bias banned the only finite logit: both report it */
                int32_t tok = -1;
                cn_error e1 = {0}, e2 = {0};
                cr_assert_eq(cn_sampler_sample(fast, l, V, NULL, 0, &tok, NULL, &e1), CN_STATUS_INVALID_ARG);
                cr_assert_eq(cn_sampler_sample(slow, l, V, NULL, 0, &tok, NULL, &e2), CN_STATUS_INVALID_ARG);
                cr_assert_str_eq(e1.msg, e2.msg);
            }
            l[V - 2] = 0.5f; /* a finite one past the ban */
            want = V - 2;
        }
        cn_sample_info a, b;
        const int32_t ta = sample1(fast, l, V, NULL, 0, &a), tb = sample1(slow, l, V, NULL, 0, &b);
        cr_assert_eq(ta, tb, "rep %d", rep);
        cr_assert_eq(ta, want, "rep %d", rep);
        cr_assert_eq(a.p, b.p);
        cr_assert_eq(a.n_kept, b.n_kept);
        cr_assert_eq(a.u, b.u); /* the same draws consumed */
    }
    float bad[V];
    for (int i = 0; i < V; i++) bad[i] = 0.0f;
    bad[5] = 1.0f; /* an unbiased maximum, so only the NaN check can refuse */
    bad[17] = NAN;
    int32_t tok = -1;
    cn_error e1 = {0}, e2 = {0};
    cr_assert_eq(cn_sampler_sample(fast, bad, V, NULL, 0, &tok, NULL, &e1), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_sample(slow, bad, V, NULL, 0, &tok, NULL, &e2), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(e1.msg, e2.msg);
    bad[17] = 0.0f;
    bad[V - 3] = INFINITY; /* in the tail past the last whole vector step */
    cr_assert_eq(cn_sampler_sample(fast, bad, V, NULL, 0, &tok, NULL, &e1), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_sample(slow, bad, V, NULL, 0, &tok, NULL, &e2), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(e1.msg, e2.msg);
    for (int i = 0; i < V; i++) bad[i] = -INFINITY;
    cr_assert_eq(cn_sampler_sample(fast, bad, V, NULL, 0, &tok, NULL, &e1), CN_STATUS_INVALID_ARG);
    cn_sampler_free(fast);
    cn_sampler_free(slow);
}

/* ---- observer, order, penalties, bans, logprobs ---- */

typedef struct {
    int n;
    cn_sampler_stage stage[8];
    size_t n_cand[8];
    cn_candidate top[8][8]; /* probabilities after each stage, canonical order */
    size_t n_top[8];
} trace;

static void observe(void *user, cn_sampler_stage stage, const cn_candidate *c, size_t n) {
    trace *t = user;
    cr_assert_lt(t->n, 8);
    t->stage[t->n] = stage;
    t->n_cand[t->n] = n;
    t->n_top[t->n] = cn_cands_top(c, n, 8, t->top[t->n]);
    double sum = 0;
    for (size_t i = 0; i < t->n_top[t->n]; i++) sum += t->top[t->n][i].p;
    if (n <= 8) cr_assert(fabs(sum - 1) < 1e-5, "after %s: sum %.7f", cn_sampler_stage_name(stage), sum);
    t->n++;
}

static void assert_probs(const trace *t, int k, size_t n, const int *ids, const double *ps) {
    cr_assert_eq(t->n_cand[k], n, "stage %d keeps %zu, want %zu", k, t->n_cand[k], n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(t->top[k][i].id, ids[i]);
        cr_assert(fabs(t->top[k][i].p - ps[i]) < 2e-6, "stage %d token %d: %.7f want %.7f", k, ids[i], t->top[k][i].p,
                  ps[i]);
    }
}

/* Temperature 2 and min-p 0.25 in both orders. HF order: flatten first
 * (.370, .262, .203, .166), then min-p keeps p >= .25 * .370 = .0925: all four. llama.cpp
 * order: min-p on the raw p keeps p >= .125 (blue, gray, clear), then temperature 2 over
 * them: sqrt(p) / sum = .443493, .313597, .242911 (numpy). */
Test(sampling_chain, order_changes_the_result) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = 2.0f;
    p.min_p = 0.25f;
    p.seed = 1;
    trace t = {0};
    cn_sampler *s = make(&p, 4);
    cn_sampler_set_observer(s, observe, &t);
    sample1(s, l, 4, NULL, 0, NULL);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.stage[0], CN_SAMPLER_TEMPERATURE);
    cr_assert_eq(t.stage[1], CN_SAMPLER_MIN_P);
    assert_probs(&t, 1, 4, (int[]){BLUE, GRAY, CLEAR, DARK}, (double[]){0.370090, 0.261693, 0.202707, 0.165509});
    cn_sampler_free(s);

    cr_assert_eq(cn_sampling_set_chain(&p, "llama.cpp", NULL), CN_STATUS_OK);
    memset(&t, 0, sizeof t);
    s = make(&p, 4);
    cn_sampler_set_observer(s, observe, &t);
    sample1(s, l, 4, NULL, 0, NULL);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.stage[0], CN_SAMPLER_MIN_P);
    cr_assert_eq(t.stage[1], CN_SAMPLER_TEMPERATURE);
    assert_probs(&t, 1, 3, (int[]){BLUE, GRAY, CLEAR}, (double[]){0.443493, 0.313597, 0.242911});
    cn_sampler_free(s);
}

/* Every stage on, each observed in chain order with probabilities summing to 1. */
Test(sampling_chain, all_stages_observed_in_order) {
    float l[6] = {3.0f, 2.5f, 2.0f, 1.0f, 0.5f, -1.0f};
    cn_sampling_params p = cn_sampling_default_params();
    cn_logit_bias b[1] = {{5, 1.0f}};
    p.logit_bias = b, p.n_logit_bias = 1;
    p.repetition_penalty = 1.2f;
    p.temperature = 0.8f, p.top_k = 5, p.top_p = 0.99f, p.min_p = 0.01f, p.typical_p = 0.99f;
    p.seed = 3;
    trace t = {0};
    cn_sampler *s = make(&p, 6);
    cn_sampler_set_observer(s, observe, &t);
    int32_t hist[2] = {0, 1};
    sample1(s, l, 6, hist, 2, NULL);
    cr_assert_eq(t.n, 7);
    for (int i = 0; i < 7; i++) cr_assert_eq(t.stage[i], p.chain[i], "observed stage %d", i);
    cr_assert_eq(t.n_cand[3], 5, "top_k 5");
    /* the penalties stage without history does not run, so it is not observed */
    memset(&t, 0, sizeof t);
    sample1(s, l, 6, NULL, 0, NULL);
    cr_assert_eq(t.n, 6);
    cr_assert_eq(t.stage[1], CN_SAMPLER_TEMPERATURE);
    cn_sampler_free(s);
}

/* logits {2, -1, 0.5, 3, 0}, history {3, 3, 0, 1} with last_n 2: only tokens 0 and 1
 * are penalized (2 / 1.5 = 1.333333, -1 * 1.5 = -1.5), so token 3 stays the argmax. With
 * last_n -1 and frequency .9, token 3 (seen twice) drops to 3 / 1.5 - 1.8 = .2 and token
 * 0 to 2 / 1.5 - .9 = .433; the untouched token 2 (.5) wins. */
Test(sampling_chain, penalties_use_the_last_n_window) {
    const float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    const int32_t hist[4] = {3, 3, 0, 1};
    cn_sampling_params p = cn_sampling_default_params();
    p.repetition_penalty = 1.5f;
    p.penalty_last_n = 2;
    p.temperature = 0;
    cn_sampler *s = make(&p, 5);
    cr_assert_eq(sample1(s, l, 5, hist, 4, NULL), 3, "token 3 is outside the window");
    cn_sampler_free(s);
    p.penalty_last_n = -1;
    p.frequency_penalty = 0.9f;
    s = make(&p, 5);
    cr_assert_eq(sample1(s, l, 5, hist, 4, NULL), 2);
    cn_sampler_free(s);
    p.penalty_last_n = 0; /* off: penalties ignored even with a history */
    s = make(&p, 5);
    cr_assert_eq(sample1(s, l, 5, hist, 4, NULL), 3);
    cn_sampler_free(s);
}

Test(sampling_chain, bans_are_absolute) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    cn_logit_bias dup[3] = {{GRAY, 2.0f}, {BLUE, -INFINITY}, {GRAY, -1.5f}}; /* gray: +0.5 */
    p.logit_bias = dup, p.n_logit_bias = 3;
    p.seed = 8;
    cn_sampler *s = make(&p, 4);
    cr_assert_eq(cn_sampler_params(s)->n_logit_bias, 2, "repeats merged");
    cr_assert_eq(cn_sampler_params(s)->logit_bias[1].bias, 0.5f);
    for (int i = 0; i < 20000; i++) cr_assert_neq(sample1(s, l, 4, NULL, 0, NULL), BLUE);
    /* ignore_eos as the loop will do it: ban an end token after creation */
    cn_error err;
    cr_assert_eq(cn_sampler_add_bias(s, GRAY, -INFINITY, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_sampler_add_bias(s, DARK, 0.25f, &err), CN_STATUS_OK, "%s", err.msg);
    for (int i = 0; i < 20000; i++) {
        int32_t tok = sample1(s, l, 4, NULL, 0, NULL);
        cr_assert(tok == CLEAR || tok == DARK, "drew %d", tok);
    }
    cr_assert_eq(cn_sampler_add_bias(s, 4, 1.0f, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_add_bias(s, 1, NAN, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_add_bias(s, CLEAR, -INFINITY, &err), CN_STATUS_OK);
    cr_assert_eq(cn_sampler_add_bias(s, DARK, -INFINITY, &err), CN_STATUS_OK);
    int32_t tok = 7;
    cr_assert_eq(cn_sampler_sample(s, l, 4, NULL, 0, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "bans every token"), "%s", err.msg);
    cr_assert_eq(tok, 7, "no token on error");
    cn_sampler_free(s);

    p = cn_sampling_default_params();
    cr_assert_eq(cn_sampling_set_chain(&p, "top_k;logit_bias", NULL), CN_STATUS_OK);
    p.n_chain = 1; /* top_k only */
    s = make(&p, 4);
    cr_assert_eq(cn_sampler_add_bias(s, GRAY, -INFINITY, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "not in the sampler chain"), "%s", err.msg);
    cn_sampler_free(s);
}

Test(sampling_chain, logprobs_are_the_raw_distribution) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    p.top_p = 0.7f;
    p.n_logprobs = 3;
    p.seed = 11;
    cn_sampler *s = make(&p, 4);
    cn_sample_info info;
    int32_t tok = sample1(s, l, 4, NULL, 0, &info);
    cr_assert(info.has_logprob);
    cr_assert_eq(info.n_top, 3);
    const double want[3] = {log(0.5), log(0.25), log(0.15)};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(info.top[i].id, i);
        cr_assert(fabs(info.top[i].logprob - want[i]) < 1e-6, "top %d: %.7f", i, info.top[i].logprob);
    }
    cr_assert(fabs(info.logprob - log(tok == BLUE ? 0.5 : 0.25)) < 1e-6);
    cr_assert(fabs(info.p - (tok == BLUE ? 2.0 / 3 : 1.0 / 3)) < 1e-6, "p in the kept set");
    cr_assert_eq(info.n_kept, 2);
    cn_sampler_free(s);
    p.n_logprobs = 0;
    p.top_p = 1;
    s = make(&p, 4);
    sample1(s, l, 4, NULL, 0, &info);
    cr_assert(info.has_logprob);
    cr_assert_eq(info.n_top, 0);
    cn_sampler_free(s);
}

Test(sampling_chain, errors_consume_no_randomness) {
    float l[4];
    colour_logits(l);
    cn_sampling_params p = cn_sampling_default_params();
    p.seed = 21;
    p.presence_penalty = 0.5f;
    cn_sampler *s = make(&p, 4), *ref = make(&p, 4);
    cn_error err;
    int32_t tok;
    float bad[4] = {0, 0, NAN, 0};
    int32_t hist_bad[2] = {1, 4};
    cr_assert_eq(cn_sampler_sample(s, l, 5, NULL, 0, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "n_vocab = 5"), "%s", err.msg);
    cr_assert_eq(cn_sampler_sample(s, bad, 4, NULL, 0, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "token 2 is nan"), "%s", err.msg);
    cr_assert_eq(cn_sampler_sample(s, l, 4, hist_bad, 2, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "history[1] = token 4"), "%s", err.msg);
    cr_assert_eq(cn_sampler_sample(s, l, 4, NULL, 3, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_sample(s, NULL, 4, NULL, 0, &tok, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_sample(s, l, 4, NULL, 0, NULL, NULL, &err), CN_STATUS_INVALID_ARG);
    for (int i = 0; i < 100; i++) cr_assert_eq(sample1(s, l, 4, NULL, 0, NULL), sample1(ref, l, 4, NULL, 0, NULL));
    cn_sampler_free(s);
    cn_sampler_free(ref);
    cn_sampler_free(NULL);
    cr_assert_eq(cn_sampler_create(&p, 0, &s, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_sampler_create(&p, 4, NULL, &err), CN_STATUS_INVALID_ARG);
}
