/* bench/sampling.c — the sampler chain on a large vocabulary (default 262,144 tokens,
 * Gemma 3's size): for each common configuration, the CPU time of one cn_sampler_sample
 * (best of -r runs, this thread's CPU clock, so a busy shared machine skews it less than
 * wall time), beside a full qsort of the vocabulary for scale. The figures show that no
 * configuration sorts the whole vocabulary (docs/sampling.md quotes them); that the
 * results are right is tests/unit/test_sampling_vocab.c's job.
 *
 *     build/bench/sampling [-n VOCAB] [-r RUNS]
 *
 * Not a test: it asserts nothing about speed (machines and sanitizer builds differ). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/rng.h"
#include "gen/sampling.h"

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The canonical order (logit descending, then id), as a full sort would rank them. */
static int cmp_canon(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Logits shaped like a language model's: a broad normal-ish bulk plus a few strong
 * candidates, so that top-p 0.95 needs tens to thousands of tokens, not all (the same
 * shape as tests/unit/test_sampling_vocab.c). */
static void lm_like(float *logits, int32_t n_vocab, uint64_t seed) {
    cn_rng r;
    cn_rng_seed(&r, seed);
    for (int32_t i = 0; i < n_vocab; i++) {
        double g = 0;
        for (int k = 0; k < 4; k++) g += cn_rng_uniform(&r) - 0.5;
        logits[i] = (float)(g * 4.0);
    }
    for (int k = 0; k < 20; k++) logits[cn_rng_next(&r) % (uint64_t)n_vocab] = 12.0f + (float)k * 0.3f;
}

typedef struct {
    const char *name;
    float temperature, top_p, min_p, typical_p;
    int32_t top_k;
    const char *chain;
} config;

static const config CONFIGS[] = {
    {"greedy (temperature 0)", 0.0f, 1.0f, 0.0f, 1.0f, 0, NULL},
    {"pure sampling (temperature 1)", 1.0f, 1.0f, 0.0f, 1.0f, 0, NULL},
    {"top_k 40", 1.0f, 1.0f, 0.0f, 1.0f, 40, NULL},
    {"top_p 0.95", 1.0f, 0.95f, 0.0f, 1.0f, 0, NULL},
    {"min_p 0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0, NULL},
    {"llama.cpp defaults (k40 p.95 minp.05 t.8)", 0.8f, 0.95f, 0.05f, 1.0f, 40, "llama.cpp"},
    {"hf order t.8 k40 p.95", 0.8f, 0.95f, 0.0f, 1.0f, 40, NULL},
    {"typical 0.95", 1.0f, 1.0f, 0.0f, 0.95f, 0, NULL},
};

/* Best CPU ms of runs samples with configuration cf; *n_kept from the first. Returns
 * a negative value (message printed) if the sampler refuses. */
static double time_config(const config *cf, const float *logits, int32_t n_vocab, int runs, int32_t *n_kept) {
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = cf->temperature;
    p.top_k = cf->top_k;
    p.top_p = cf->top_p;
    p.min_p = cf->min_p;
    p.typical_p = cf->typical_p;
    p.seed = 1;
    cn_error err = {0};
    cn_sampler *s = NULL;
    if ((cf->chain && cn_sampling_set_chain(&p, cf->chain, &err) != CN_STATUS_OK) ||
        cn_sampler_create(&p, n_vocab, &s, &err) != CN_STATUS_OK) {
        fprintf(stderr, "sampling: %s: %s\n", cf->name, err.msg);
        return -1;
    }
    double best = 1e30;
    for (int i = 0; i < runs; i++) {
        cn_sample_info info;
        int32_t tok;
        const double t0 = cpu_ms();
        if (cn_sampler_sample(s, logits, n_vocab, NULL, 0, &tok, &info, &err) != CN_STATUS_OK) {
            fprintf(stderr, "sampling: %s: %s\n", cf->name, err.msg);
            cn_sampler_free(s);
            return -1;
        }
        const double dt = cpu_ms() - t0;
        if (dt < best) best = dt;
        if (i == 0) *n_kept = info.n_kept;
    }
    cn_sampler_free(s);
    return best;
}

static int usage(void) {
    fprintf(stderr, "usage: sampling [-n VOCAB (1000..16777216, default 262144)] [-r RUNS (1..1000, default 5)]\n");
    return 2;
}

int main(int argc, char **argv) {
    long n_vocab = 262144, runs = 5;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "-n") ? &n_vocab : !strcmp(argv[i], "-r") ? &runs : NULL;
        char *end;
        if (!dst || i + 1 >= argc) return usage();
        *dst = strtol(argv[++i], &end, 10);
        if (*end) return usage();
    }
    if (n_vocab < 1000 || n_vocab > 16777216 || runs < 1 || runs > 1000) return usage();

    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    cn_candidate *sorted = malloc(sizeof *sorted * (size_t)n_vocab);
    if (!logits || !sorted) {
        fprintf(stderr, "sampling: out of memory\n");
        return 1;
    }
    lm_like(logits, (int32_t)n_vocab, 2024);
    for (long i = 0; i < n_vocab; i++) sorted[i] = (cn_candidate){(int32_t)i, logits[i], 0};
    const double t0 = cpu_ms();
    qsort(sorted, (size_t)n_vocab, sizeof *sorted, cmp_canon);
    printf("vocab %ld: full qsort of the vocabulary (for scale) %.2f ms cpu\n", n_vocab, cpu_ms() - t0);
    int rc = 0;
    for (size_t i = 0; i < sizeof CONFIGS / sizeof CONFIGS[0]; i++) {
        int32_t kept = -1;
        const double ms = time_config(&CONFIGS[i], logits, (int32_t)n_vocab, (int)runs, &kept);
        if (ms < 0) {
            rc = 1;
            continue;
        }
        printf("%-44s %7.3f ms cpu/sample  (kept %d)\n", CONFIGS[i].name, ms, kept);
    }
    free(logits);
    free(sorted);
    return rc;
}
