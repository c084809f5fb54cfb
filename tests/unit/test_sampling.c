/* test_sampling.c — the sampler chain's stages: the worked examples of issue 4 (expected
 * numbers computed by hand / numpy from the definitions, written here as literals), and
 * property tests of each stage against a naive full-sort reference on random
 * distributions. Sampler-level behaviour (seeds, draws, penalties through the sampler,
 * validation) is in test_sampling_sampler.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/rng.h"
#include "gen/sampling.h"

enum { BLUE, GRAY, CLEAR, DARK };
static const double colours[4] = {0.50, 0.25, 0.15, 0.10};

#define MAXV 8192

static cn_candidate buf[MAXV];
static cn_candidate scratch[MAXV];

/* logits = ln p, the way explain --probs builds them. */
static void from_probs(cn_cands *c, const double *p, int n) {
    float logits[64];
    cr_assert(n <= 64);
    for (int i = 0; i < n; i++) logits[i] = (float)log(p[i]);
    cn_error err;
    cr_assert_eq(cn_cands_init(c, buf, logits, n, &err), CN_STATUS_OK, "%s", err.msg);
}

static int cmp_id(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    return (a->id > b->id) - (a->id < b->id);
}

/* The kept set ordered by id, with probabilities (softmax first if the stage left none). */
static size_t kept(cn_cands *c, cn_candidate *out) {
    if (!c->normalized) cn_stage_softmax(c);
    memcpy(out, c->data, c->n * sizeof *out);
    qsort(out, c->n, sizeof *out, cmp_id);
    return c->n;
}

static void assert_kept(cn_cands *c, size_t n, const int *ids, const double *ps) {
    cn_candidate k[64];
    size_t m = kept(c, k);
    cr_assert_eq(m, n, "kept %zu candidates, want %zu", m, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(k[i].id, ids[i], "kept[%zu] is token %d, want %d", i, k[i].id, ids[i]);
        cr_assert(fabs(k[i].p - ps[i]) < 2e-6, "token %d: p = %.7f, want %.7f", ids[i], k[i].p, ps[i]);
    }
}

static void assert_3dp(float p, const char *want) {
    char got[16];
    snprintf(got, sizeof got, "%.3f", p);
    cr_assert_str_eq(got, want, "p = %.7f prints as %s, want %s", p, got, want);
}

/* ---- worked examples ---- */

Test(sampling_worked, greedy_picks_blue) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_stage_temperature(&c, 0.0f);
    cr_assert_eq(c.n, 1);
    cr_assert_eq(c.data[0].id, BLUE);
    cr_assert_eq(c.data[0].p, 1.0f);
    cr_assert_eq(c.data[cn_stage_draw(&c, 0.999)].id, BLUE);
}

Test(sampling_worked, top_p_07_keeps_blue_and_gray) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_stage_top_p(&c, 0.7f);
    assert_kept(&c, 2, (int[]){BLUE, GRAY}, (double[]){2.0 / 3, 1.0 / 3});
    cn_candidate k[4];
    kept(&c, k);
    assert_3dp(k[0].p, "0.667");
    assert_3dp(k[1].p, "0.333");
}

Test(sampling_worked, top_p_09_stops_exactly_at_clear) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_stage_top_p(&c, 0.9f);
    assert_kept(&c, 3, (int[]){BLUE, GRAY, CLEAR}, (double[]){0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9});
    cn_candidate k[4];
    kept(&c, k);
    assert_3dp(k[0].p, "0.556");
    assert_3dp(k[1].p, "0.278");
    assert_3dp(k[2].p, "0.167");
}

/* Probabilities whose float sum falls just short of 0.9 (0.8999997 < 0.9f): a naive
 * `sum >= top_p` would take dark too; the rule must still stop at clear. */
Test(sampling_worked, top_p_09_rounding_cannot_add_dark) {
    cn_candidate d[4] = {{BLUE, 0, 0.5f}, {GRAY, 0, 0.25f}, {CLEAR, 0, 0.15f - 3e-7f}, {DARK, 0, 0.1f}};
    d[0].logit = logf(d[0].p), d[1].logit = logf(d[1].p);
    d[2].logit = logf(d[2].p), d[3].logit = logf(d[3].p);
    double naive = (double)d[0].p + d[1].p + d[2].p;
    cr_assert(naive < (double)0.9f, "the case must be one a naive comparison gets wrong");
    cn_cands c = {d, 4, 0, true, true};
    cn_stage_top_p(&c, 0.9f);
    cr_assert_eq(c.n, 3, "kept %zu", c.n);
    for (size_t i = 0; i < c.n; i++) cr_assert_neq(c.data[i].id, DARK);

    /* A real shortfall (mass 0.89) is not rounding: dark is needed to reach 0.9. */
    cn_candidate e[4] = {{BLUE, 0, 0.5f}, {GRAY, 0, 0.25f}, {CLEAR, 0, 0.14f}, {DARK, 0, 0.11f}};
    for (int i = 0; i < 4; i++) e[i].logit = logf(e[i].p);
    cn_cands c2 = {e, 4, 0, true, true};
    cn_stage_top_p(&c2, 0.9f);
    cr_assert_eq(c2.n, 4, "kept %zu", c2.n);
}

Test(sampling_worked, top_k_2_keeps_blue_and_gray) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_stage_top_k(&c, 2);
    assert_kept(&c, 2, (int[]){BLUE, GRAY}, (double[]){2.0 / 3, 1.0 / 3});
}

/* Where top-k 2 and top-p 0.7 part ways: a flat head (top-p needs three tokens) and a
 * spike (top-p needs one). The 0.05 tie is broken by the lower id. */
Test(sampling_worked, top_k_and_top_p_keep_different_sets) {
    const double flat[4] = {0.3, 0.3, 0.2, 0.2};
    cn_cands c;
    from_probs(&c, flat, 4);
    cn_stage_top_k(&c, 2);
    assert_kept(&c, 2, (int[]){0, 1}, (double[]){0.5, 0.5});
    from_probs(&c, flat, 4);
    cn_stage_top_p(&c, 0.7f);
    assert_kept(&c, 3, (int[]){0, 1, 2}, (double[]){0.375, 0.375, 0.25});

    const double spike[3] = {0.9, 0.05, 0.05};
    from_probs(&c, spike, 3);
    cn_stage_top_k(&c, 2);
    assert_kept(&c, 2, (int[]){0, 1}, (double[]){0.9 / 0.95, 0.05 / 0.95});
    from_probs(&c, spike, 3);
    cn_stage_top_p(&c, 0.7f);
    assert_kept(&c, 1, (int[]){0}, (double[]){1.0});
}

/* p_i^(1/T) / sum_j p_j^(1/T), by numpy:
 * T = 0.5: .25/.345 = 0.724638, 0.181159, 0.065217, 0.028986
 * T = 2:   sqrt(p)/1.910623 = 0.370090, 0.261693, 0.202707, 0.165509 */
Test(sampling_worked, temperature_sharpens_and_flattens) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_stage_temperature(&c, 0.5f);
    assert_kept(&c, 4, (int[]){BLUE, GRAY, CLEAR, DARK}, (double[]){0.724638, 0.181159, 0.065217, 0.028986});
    from_probs(&c, colours, 4);
    cn_stage_temperature(&c, 2.0f);
    assert_kept(&c, 4, (int[]){BLUE, GRAY, CLEAR, DARK}, (double[]){0.370090, 0.261693, 0.202707, 0.165509});
}

/* The draw walks blue, gray, clear, dark (probability descending, then id). */
Test(sampling_worked, draw_is_inverse_cdf_in_canonical_order) {
    const struct {
        double u;
        int want;
    } cases[] = {{0.0, BLUE},     {0.4999, BLUE},  {0.5001, GRAY}, {0.7499, GRAY},
                 {0.7501, CLEAR}, {0.8999, CLEAR}, {0.9001, DARK}, {0.9999999, DARK}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cn_cands c;
        from_probs(&c, colours, 4);
        size_t at = cn_stage_draw(&c, cases[i].u);
        cr_assert_eq(c.data[at].id, cases[i].want, "u = %g drew %d, want %d", cases[i].u, c.data[at].id, cases[i].want);
    }
    /* Equal probabilities: the lower id owns the lower part of [0, 1). */
    const float tie[3] = {0.0f, 1.0f, 1.0f};
    cn_cands c;
    cr_assert_eq(cn_cands_init(&c, buf, tie, 3, NULL), CN_STATUS_OK);
    cr_assert_eq(c.data[cn_stage_draw(&c, 0.01)].id, 1);
    cn_cands_init(&c, buf, tie, 3, NULL);
    cr_assert_eq(c.data[cn_stage_draw(&c, 0.5)].id, 2);
}

/* ---- properties ---- */

static cn_rng trng;

/* Random logits: roughly normal with scale `scale`, and every third one rounded to a
 * multiple of 0.5 so that ties (broken by id) occur. */
static void random_logits(float *l, int n, float scale) {
    for (int i = 0; i < n; i++) {
        double g = 0;
        for (int k = 0; k < 4; k++) g += cn_rng_uniform(&trng) - 0.5;
        float v = (float)(g * scale);
        if (i % 3 == 0) v = roundf(v * 2) / 2;
        l[i] = v;
    }
}

static int cmp_canon(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static double psum(const cn_cands *c) {
    double s = 0;
    for (size_t i = 0; i < c->n; i++) s += c->data[i].p;
    return s;
}

static const int sizes[] = {1, 2, 3, 17, 100, 1000, 5000};
static const float scales[] = {0.3f, 2.0f, 8.0f};

#define FOR_CASES                                                  \
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) \
        for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++)

static float lg[MAXV];
static cn_candidate ref[MAXV];

static void setup_case(cn_cands *c, int n, float scale) {
    random_logits(lg, n, scale);
    cr_assert_eq(cn_cands_init(c, buf, lg, n, NULL), CN_STATUS_OK);
    memcpy(ref, c->data, (size_t)n * sizeof *ref);
    qsort(ref, (size_t)n, sizeof *ref, cmp_canon);
}

static void sorted_ids_equal(const cn_cands *c, const cn_candidate *want, size_t n, const char *what) {
    cn_candidate got[MAXV];
    cr_assert_eq(c->n, n, "%s: kept %zu, want %zu", what, c->n, n);
    memcpy(got, c->data, n * sizeof *got);
    qsort(got, n, sizeof *got, cmp_id);
    cn_candidate w[MAXV];
    memcpy(w, want, n * sizeof *w);
    qsort(w, n, sizeof *w, cmp_id);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i].id, w[i].id, "%s: kept set differs at %zu: %d vs %d", what, i, got[i].id, w[i].id);
}

Test(sampling_props, softmax_matches_double_reference_and_sums_to_one) {
    cn_rng_seed(&trng, 1);
    FOR_CASES {
        cn_cands c;
        int n = sizes[si];
        setup_case(&c, n, scales[sc]);
        cn_stage_softmax(&c);
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, lg[i]);
        for (int i = 0; i < n; i++) s += exp((double)lg[i] - mx);
        /* float logits: l - max is rounded to float (half an ulp of |l - max|), then
         * expf and the division add a few ulps; the bound follows. */
        for (size_t i = 0; i < c.n; i++) {
            double d = (double)c.data[i].logit - mx;
            double want = exp(d) / s;
            double tol = want * (4e-7 + 6e-8 * fabs(d)) + 1e-38;
            cr_assert(fabs(c.data[i].p - want) <= tol, "n %d token %d: %.9g vs %.9g", n, c.data[i].id, c.data[i].p,
                      want);
        }
        cr_assert(fabs(psum(&c) - 1) < 1e-5, "sum %.9f", psum(&c));
    }
}

Test(sampling_props, top_k_keeps_the_k_best) {
    cn_rng_seed(&trng, 2);
    const int ks[] = {1, 2, 5, 40, 999};
    FOR_CASES for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        cn_cands c;
        int n = sizes[si], k = ks[ki];
        setup_case(&c, n, scales[sc]);
        cn_stage_top_k(&c, k);
        size_t want = (size_t)(k < n ? k : n);
        cr_assert(c.n <= (size_t)k);
        sorted_ids_equal(&c, ref, want, "top_k");
        /* the kept prefix is in canonical order */
        if (c.n_sorted == c.n)
            for (size_t i = 0; i < c.n; i++) cr_assert_eq(c.data[i].id, ref[i].id);
        cn_stage_softmax(&c);
        cr_assert(fabs(psum(&c) - 1) < 1e-5);
    }
}

/* Reference top-p / typical rule over a full sort: shortest prefix with mass reaching m. */
static size_t ref_mass_prefix(const cn_candidate *sorted, size_t n, float m) {
    double cum = 0, th = (double)m * (1.0 - CN_TOP_P_REL_EPS);
    for (size_t i = 0; i < n; i++) {
        cum += sorted[i].p;
        if (cum >= th) return i + 1;
    }
    return n;
}

Test(sampling_props, top_p_matches_full_sort_reference) {
    cn_rng_seed(&trng, 3);
    const float ps[] = {0.05f, 0.5f, 0.9f, 0.95f, 0.999f};
    FOR_CASES for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        cn_cands c;
        int n = sizes[si];
        setup_case(&c, n, scales[sc]);
        cn_stage_softmax(&c);
        memcpy(ref, c.data, (size_t)n * sizeof *ref);
        qsort(ref, (size_t)n, sizeof *ref, cmp_canon);
        size_t want = ref_mass_prefix(ref, (size_t)n, ps[pi]);
        cn_stage_top_p(&c, ps[pi]);
        sorted_ids_equal(&c, ref, want, "top_p");
        cr_assert(c.normalized);
        cr_assert(fabs(psum(&c) - 1) < 1e-5, "sum %.9f", psum(&c));
    }
}

Test(sampling_props, min_p_keeps_p_at_least_min_p_times_max) {
    cn_rng_seed(&trng, 4);
    const float ms[] = {0.01f, 0.05f, 0.3f, 1.0f};
    FOR_CASES for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        cn_cands c;
        int n = sizes[si];
        setup_case(&c, n, scales[sc]);
        cn_stage_softmax(&c);
        float pmax = 0;
        for (size_t i = 0; i < c.n; i++) pmax = fmaxf(pmax, c.data[i].p);
        size_t m = 0;
        for (size_t i = 0; i < c.n; i++)
            if (c.data[i].p >= ms[mi] * pmax) ref[m++] = c.data[i];
        cn_stage_min_p(&c, ms[mi]);
        sorted_ids_equal(&c, ref, m, "min_p");
        cr_assert(fabs(psum(&c) - 1) < 1e-5);
    }
}

Test(sampling_props, temperature_zero_is_argmax_lowest_id_on_ties) {
    cn_rng_seed(&trng, 5);
    FOR_CASES {
        cn_cands c;
        setup_case(&c, sizes[si], scales[sc]);
        cn_stage_temperature(&c, 0.0f);
        cr_assert_eq(c.n, 1);
        cr_assert_eq(c.data[0].id, ref[0].id);
    }
    const float tied[5] = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
    cn_cands c;
    cn_cands_init(&c, buf, tied, 5, NULL);
    cn_stage_temperature(&c, 0.0f);
    cr_assert_eq(c.data[0].id, 1);
    /* A temperature so small that logit / t overflows (3 / 1e-39 > FLT_MAX) takes the
     * same limit. */
    cn_cands_init(&c, buf, tied, 5, NULL);
    cn_stage_temperature(&c, 1e-39f);
    cr_assert_eq(c.n, 1);
    cr_assert_eq(c.data[0].id, 1);
}

/* p = {.4, .15, .15, .15, .15}: entropy H = 1.5049 nats; -ln .4 = .916 is .589 from H,
 * -ln .15 = 1.897 only .392, so the four .15 tokens are the typical ones. typical_p .5
 * keeps them (cumulative .15, .30, .45, .60) and drops the most likely token. */
Test(sampling_props, typical_keeps_the_typical_set_by_hand) {
    const double p[5] = {0.4, 0.15, 0.15, 0.15, 0.15};
    cn_cands c;
    from_probs(&c, p, 5);
    cn_stage_typical(&c, 0.5f, scratch);
    assert_kept(&c, 4, (int[]){1, 2, 3, 4}, (double[]){0.25, 0.25, 0.25, 0.25});
    /* typical_p .65 needs one token more: the .4 one (0.60 < 0.65). */
    from_probs(&c, p, 5);
    cn_stage_typical(&c, 0.65f, scratch);
    cr_assert_eq(c.n, 5);
    /* On the colours, H = 1.2080 nats; distances |-ln p - H|: gray .178, blue .515,
     * clear .689, dark 1.095. Typical order: gray first, so typical_p .2 keeps gray alone. */
    from_probs(&c, colours, 4);
    cn_stage_typical(&c, 0.2f, scratch);
    assert_kept(&c, 1, (int[]){GRAY}, (double[]){1.0});
}

Test(sampling_props, typical_matches_full_sort_reference) {
    cn_rng_seed(&trng, 6);
    const float ts[] = {0.2f, 0.9f, 0.95f};
    FOR_CASES for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        cn_cands c;
        int n = sizes[si];
        setup_case(&c, n, scales[sc]);
        cn_stage_softmax(&c);
        double hd = 0;
        for (size_t i = 0; i < c.n; i++)
            if (c.data[i].p > 0) hd -= (double)c.data[i].p * logf(c.data[i].p);
        const float h = (float)hd;
        /* order by |-ln p - H| ascending, then id (in float, as the stage computes it);
         * mass rule as top-p */
        for (size_t i = 0; i < c.n; i++) {
            ref[i] = c.data[i];
            ref[i].logit = -fabsf(-logf(c.data[i].p) - h);
        }
        qsort(ref, c.n, sizeof *ref, cmp_canon);
        size_t want = ref_mass_prefix(ref, c.n, ts[ti]);
        cn_stage_typical(&c, ts[ti], scratch);
        sorted_ids_equal(&c, ref, want, "typical");
        cr_assert(fabs(psum(&c) - 1) < 1e-5);
    }
}

Test(sampling_props, logit_bias_bans_and_shifts) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_logit_bias b[2] = {{BLUE, -INFINITY}, {DARK, 0.5f}};
    cn_stage_logit_bias(&c, b, 2);
    cr_assert_eq(c.n, 3);
    for (size_t i = 0; i < c.n; i++) {
        cr_assert_neq(c.data[i].id, BLUE);
        if (c.data[i].id == DARK) cr_assert_eq(c.data[i].logit, logf(0.10f) + 0.5f);
    }
    /* greedy after a ban of the argmax: gray; and no u can draw blue */
    cn_stage_temperature(&c, 0.0f);
    cr_assert_eq(c.data[0].id, GRAY);
    for (double u = 0; u < 1; u += 0.01) {
        from_probs(&c, colours, 4);
        cn_stage_logit_bias(&c, b, 1);
        cr_assert_neq(c.data[cn_stage_draw(&c, u)].id, BLUE);
    }
    /* the same through the non-identity path (after top-k reordered the array) */
    from_probs(&c, colours, 4);
    cn_stage_top_k(&c, 3);
    cn_logit_bias b2[2] = {{GRAY, -INFINITY}, {CLEAR, 10.0f}};
    cn_stage_logit_bias(&c, b2, 2);
    cr_assert_eq(c.n, 2);
    cn_stage_temperature(&c, 0.0f);
    cr_assert_eq(c.data[0].id, CLEAR);
    /* banning everything leaves nothing: the sampler reports it */
    from_probs(&c, colours, 4);
    cn_logit_bias all[4] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
    cn_stage_logit_bias(&c, all, 4);
    cr_assert_eq(c.n, 0);
}

/* logits {2, -1, 0.5, 3, 0}, window {0, 1, 1, 3, 1}: counts 0:1, 1:3, 3:1.
 * repetition 1.5: 2 -> 1.333333, -1 -> -1.5, 3 -> 2; then presence .2, frequency .1:
 * token 0: 1.333333 - .2 - .1 = 1.033333; token 1: -1.5 - .2 - .3 = -2.0;
 * token 3: 2 - .2 - .1 = 1.7; tokens 2 and 4 unchanged. */
Test(sampling_props, penalties_as_defined) {
    const float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    const int32_t win[5] = {0, 1, 1, 3, 1};
    const double want[5] = {2.0 / 1.5 - 0.3, -1.5 - 0.5, 0.5, 2.0 - 0.3, 0.0};
    int32_t counts[5] = {0};
    for (int path = 0; path < 2; path++) {
        cn_cands c;
        cn_cands_init(&c, buf, l, 5, NULL);
        if (path == 1) { /* reorder first: the lookup path through counts[] */
            cn_stage_top_k(&c, 5);
            cn_cands_sort_prefix(&c, 5);
        }
        cn_stage_penalties(&c, win, 5, 1.5f, 0.2f, 0.1f, counts);
        cr_assert_eq(c.n, 5);
        for (size_t i = 0; i < c.n; i++) {
            int id = c.data[i].id;
            cr_assert(fabs(c.data[i].logit - want[id]) < 1e-6, "path %d token %d: %.7f want %.7f", path, id,
                      c.data[i].logit, want[id]);
        }
        for (int i = 0; i < 5; i++) cr_assert_eq(counts[i], 0, "counts must be left zeroed");
    }
}

Test(sampling_props, minus_inf_logits_are_dropped_and_nan_rejected) {
    const float l[4] = {-INFINITY, 1.0f, -INFINITY, 0.0f};
    cn_cands c;
    cr_assert_eq(cn_cands_init(&c, buf, l, 4, NULL), CN_STATUS_OK);
    cr_assert_eq(c.n, 2);
    cr_assert_not(c.by_id);
    const float bad[3] = {0.0f, NAN, 1.0f};
    cn_error err;
    cr_assert_eq(cn_cands_init(&c, buf, bad, 3, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "token 1") && strstr(err.msg, "nan"), "%s", err.msg);
    const float inf[2] = {INFINITY, 0.0f};
    cr_assert_eq(cn_cands_init(&c, buf, inf, 2, &err), CN_STATUS_INVALID_ARG);
    const float none[2] = {-INFINITY, -INFINITY};
    cr_assert_eq(cn_cands_init(&c, buf, none, 2, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "finite"), "%s", err.msg);
}

/* The partial sort: any prefix length gives the reference's first m, in order. */
Test(sampling_props, sort_prefix_matches_full_sort) {
    cn_rng_seed(&trng, 7);
    const size_t ms[] = {1, 7, 32, 100, 4999, 5000, 9000};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        cn_cands c;
        setup_case(&c, 5000, 3.0f);
        /* grow in two steps, as the walks do */
        cn_cands_sort_prefix(&c, ms[mi] / 3);
        cn_cands_sort_prefix(&c, ms[mi]);
        size_t m = ms[mi] < 5000 ? ms[mi] : 5000;
        cr_assert_eq(c.n_sorted, m);
        for (size_t i = 0; i < m; i++) cr_assert_eq(c.data[i].id, ref[i].id, "m %zu: position %zu", m, i);
    }
}

Test(sampling_props, top_of_a_view_is_read_only_and_normalized) {
    cn_cands c;
    from_probs(&c, colours, 4);
    cn_candidate before[4], top[4];
    memcpy(before, c.data, sizeof before);
    size_t m = cn_cands_top(c.data, c.n, 2, top);
    cr_assert_eq(m, 2);
    cr_assert_eq(top[0].id, BLUE);
    cr_assert_eq(top[1].id, GRAY);
    cr_assert(fabs(top[0].p - 0.5) < 1e-6 && fabs(top[1].p - 0.25) < 1e-6);
    cr_assert_eq(memcmp(before, c.data, sizeof before), 0);
    cr_assert_eq(cn_cands_top(c.data, c.n, 10, top), 4);
}

/* Partition-based searches on the inputs that break naive quickselects: all logits equal
 * (the order is then by id alone), already sorted, reverse sorted. A uniform distribution
 * over n tokens makes the answers exact: the draw at u = (k + .5) / n is token k in
 * canonical order, and top-p 0.5 keeps exactly the first n / 2. */
Test(sampling_props, searches_on_flat_and_presorted_inputs) {
    const int n = 5000;
    for (int shape = 0; shape < 3; shape++) {
        for (int i = 0; i < n; i++) lg[i] = shape == 0 ? 1.0f : shape == 1 ? (float)(n - i) * 1e-3f : (float)i * 1e-3f;
        for (int k = 0; k < n; k += 499) {
            int want = k; /* flat: canonical position k is token k */
            cn_cands c;
            cn_cands_init(&c, buf, lg, n, NULL);
            if (shape != 0) {
                /* sorted shapes: against a sequential walk over a full sort */
                cn_stage_softmax(&c);
                memcpy(ref, c.data, (size_t)n * sizeof *ref);
                qsort(ref, (size_t)n, sizeof *ref, cmp_canon);
                double cum = 0, u = (k + 0.5) / n, target;
                double total = 0;
                for (int i = 0; i < n; i++) total += c.data[i].p;
                target = u * total;
                int j = 0;
                for (; j < n; j++) {
                    cum += ref[j].p;
                    if (target < cum) break;
                }
                want = ref[j < n ? j : n - 1].id;
                size_t at = cn_stage_draw(&c, u);
                cr_assert_eq(c.data[at].id, want, "shape %d u %.6f: %d vs %d", shape, u, c.data[at].id, want);
            } else {
                size_t at = cn_stage_draw(&c, (k + 0.5) / n);
                cr_assert_eq(c.data[at].id, want, "flat: u=(%d+.5)/n drew %d", k, c.data[at].id);
            }
        }
        if (shape == 0) {
            cn_cands c;
            cn_cands_init(&c, buf, lg, n, NULL);
            cn_stage_top_p(&c, 0.5f);
            cr_assert_eq(c.n, (size_t)n / 2);
            for (size_t i = 0; i < c.n; i++) cr_assert_lt(c.data[i].id, n / 2);
            cn_cands_init(&c, buf, lg, n, NULL);
            cn_stage_top_k(&c, 123);
            for (size_t i = 0; i < c.n; i++) cr_assert_lt(c.data[i].id, 123);
        }
    }
}
