/* test_sampling_vocab.c — the chain on a 262,144-token vocabulary (Gemma 3's size): for
 * each common configuration the token and the number of candidates kept are checked
 * against a full sort of the vocabulary in double precision (the independent reference).
 * How long each configuration takes is bench/sampling.c's business, not a test's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "gen/rng.h"
#include "gen/sampling.h"

#define NV 262144

static float logits[NV];
static cn_candidate ref[NV];

static int cmp_canon(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Logits shaped like a language model's: a broad normal-ish bulk plus a few strong
 * candidates, so that top-p 0.95 needs tens to thousands of tokens, not all.
 * (bench/sampling.c times the chain on the same shape.) */
static void lm_like(uint64_t seed) {
    cn_rng r;
    cn_rng_seed(&r, seed);
    for (int i = 0; i < NV; i++) {
        double g = 0;
        for (int k = 0; k < 4; k++) g += cn_rng_uniform(&r) - 0.5;
        logits[i] = (float)(g * 4.0);
    }
    for (int k = 0; k < 20; k++) logits[cn_rng_next(&r) % NV] = 12.0f + (float)k * 0.3f;
}

typedef struct {
    const char *name;
    float temperature, top_p, min_p, typical_p;
    int32_t top_k;
    const char *chain;
} config;

/* One sample with configuration cf: the token drawn and the candidates kept. */
static void sample_once(const config *cf, int32_t *tok, int32_t *n_kept) {
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = cf->temperature;
    p.top_k = cf->top_k;
    p.top_p = cf->top_p;
    p.min_p = cf->min_p;
    p.typical_p = cf->typical_p;
    p.seed = 1;
    if (cf->chain) cr_assert_eq(cn_sampling_set_chain(&p, cf->chain, NULL), CN_STATUS_OK);
    cn_sampler *s = NULL;
    cn_error err;
    cr_assert_eq(cn_sampler_create(&p, NV, &s, &err), CN_STATUS_OK, "%s", err.msg);
    cn_sample_info info;
    cr_assert_eq(cn_sampler_sample(s, logits, NV, NULL, 0, tok, &info, &err), CN_STATUS_OK, "%s: %s", cf->name,
                 err.msg);
    *n_kept = info.n_kept;
    cn_sampler_free(s);
}

Test(sampling_vocab, vocab_262k_matches_full_sort, .timeout = 120) {
    lm_like(2024);
    for (int i = 0; i < NV; i++) ref[i] = (cn_candidate){i, logits[i], 0};
    qsort(ref, NV, sizeof *ref, cmp_canon);

    /* reference probabilities (double) in canonical order */
    static double rp[NV];
    double sum = 0;
    for (int i = 0; i < NV; i++) sum += rp[i] = exp((double)ref[i].logit - ref[0].logit);
    for (int i = 0; i < NV; i++) rp[i] /= sum;
    int32_t nucleus = 0;
    for (double c = 0; nucleus < NV && c < 0.95; nucleus++) c += rp[nucleus];
    int32_t above_min_p = 0;
    while (above_min_p < NV && rp[above_min_p] >= 0.05 * rp[0]) above_min_p++;

    const config cfs[] = {
        {"greedy (temperature 0)", 0.0f, 1.0f, 0.0f, 1.0f, 0, NULL},
        {"pure sampling (temperature 1)", 1.0f, 1.0f, 0.0f, 1.0f, 0, NULL},
        {"top_k 40", 1.0f, 1.0f, 0.0f, 1.0f, 40, NULL},
        {"top_p 0.95", 1.0f, 0.95f, 0.0f, 1.0f, 0, NULL},
        {"min_p 0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0, NULL},
        {"llama.cpp defaults (k40 p.95 minp.05 t.8)", 0.8f, 0.95f, 0.05f, 1.0f, 40, "llama.cpp"},
        {"hf order t.8 k40 p.95", 0.8f, 0.95f, 0.0f, 1.0f, 40, NULL},
        {"typical 0.95", 1.0f, 1.0f, 0.0f, 0.95f, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cfs / sizeof cfs[0]; i++) {
        int32_t tok = -1, kept = -1;
        sample_once(&cfs[i], &tok, &kept);
        switch (i) {
        case 0:
            cr_assert_eq(tok, ref[0].id, "greedy must be the argmax");
            cr_assert_eq(kept, 1);
            break;
        case 1: cr_assert_eq(kept, NV); break;
        case 2: cr_assert_eq(kept, 40); break; /* and the draw is in the top 40: below */
        case 3:
            /* float vs double probabilities can move the boundary by a token at most */
            cr_assert(abs(kept - nucleus) <= 1, "top-p kept %d, reference %d", kept, nucleus);
            break;
        case 4: cr_assert_eq(kept, above_min_p, "min-p kept %d, reference %d", kept, above_min_p); break;
        default: cr_assert(kept >= 1 && kept <= NV, "%s kept %d", cfs[i].name, kept); break;
        }
        if (cfs[i].top_k > 0) { /* whatever else the chain does, it draws from the top k */
            int found = 0;
            for (int j = 0; j < cfs[i].top_k; j++) found |= ref[j].id == tok;
            cr_assert(kept <= cfs[i].top_k && found, "%s: kept %d, drew %d", cfs[i].name, kept, tok);
        }
    }
}
