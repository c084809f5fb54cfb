/* bench.c — `cinder bench`: llama-bench's two figures for a model, plus what a user
 * feels and what the hardware allows.
 *
 *   pp  prompt processing: one batch of -p random tokens at positions 0.. (tok/s)
 *   tg  token generation: -n random tokens decoded one at a time from position 0
 *   both as mean ± sample stddev over -r repetitions after one warm-up run of each,
 *   from an empty KV cache each time (llama-bench's pp512 / tg128);
 *   TTFT and inter-token latency (p50, p90) of a realistic prompt (an English paragraph
 *   through the model's tokenizer) prefilled and then greedily continued for -n tokens;
 *   decode GB/s = bytes of the weights one token reads (every matmul and norm weight,
 *   the LM head; not the embedding table unless it is the tied LM head) × tg tok/s, and
 *   that as a fraction of the machine's read bandwidth, measured here by streaming once
 *   over as many bytes (at least 64 MiB, in 2 MiB pages like the weights, so caches
 *   help both alike) with the same thread count; a copy test is reported beside it.
 *
 * Output: a table on stdout (it is this command's product), progress on stderr; --json
 * prints one JSON object per (model, threads) line instead. Every figure is wall time
 * on a machine others may be using: the 1-minute load average is printed with it. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parallel.h"
#include "cli.h"
#include "core/core.h"
#include "core/cpu.h"
#include "core/pool.h"
#include "gen/generate.h"
#include "model/model.h"
#include "text/tokenizer.h"

#define MAX_THREADS_LIST 16
#define MAX_MODELS 16
#define BW_MIN_BYTES ((size_t)64 << 20)

static const char k_prompt[] =
    "The lighthouse keeper had kept the same routine for thirty years. Every evening, just "
    "before the sun touched the water, he climbed the one hundred and twelve steps of the "
    "tower, wiped the salt from the great lens, trimmed the wick and lit the lamp. Ships "
    "passing in the night never saw him, but they saw his light, and that was enough for "
    "him. One winter a storm came that was worse than any he remembered. The wind tore "
    "shingles from the roof of his cottage and the waves climbed higher than the rocks at "
    "the foot of the tower. Near midnight he noticed that the light had begun to flicker. "
    "Explain, step by step, what he should check first, what tools he would need, and how "
    "he could keep the light burning until morning without putting himself in danger.";

typedef struct {
    double mean, sd;
} stat;

static stat stats(const double *x, int n) {
    stat s = {0, 0};
    if (n < 1) return s;
    for (int i = 0; i < n; i++) s.mean += x[i];
    s.mean /= n;
    if (n > 1) {
        double v = 0;
        for (int i = 0; i < n; i++) v += (x[i] - s.mean) * (x[i] - s.mean);
        s.sd = sqrt(v / (n - 1));
    }
    return s;
}

static double load1(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

/* ---- memory bandwidth ---- */

typedef struct {
    const uint64_t *src;
    uint64_t *dst;
    size_t n_words;
    uint64_t sink[64];
} bw_task;

/* This thread's slice as 4 interleaved streams with prefetch 8 KiB ahead: more memory
 * parallelism than one stream (measured), as the matmul's 16-row tiles have; 16-byte
 * vector loads (GCC vectors: SSE2 / NEON) so the loop is not instruction-bound. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));
static void bw_read(void *p, int ith, int nth) {
    bw_task *t = p;
    int64_t i0, i1;
    cn_split((int64_t)t->n_words / 32, ith, nth, &i0, &i1);
    const int64_t per = (i1 - i0) * 8; /* words per stream */
    const u64x2 *s[4];
    for (int k = 0; k < 4; k++) s[k] = (const u64x2 *)(const void *)(t->src + i0 * 32 + k * per);
    u64x2 a = {0, 0}, b = {0, 0};
    for (int64_t i = 0; i < per / 2; i += 4)
        for (int k = 0; k < 4; k++) {
            const u64x2 *q = s[k] + i;
            __builtin_prefetch(q + 512, 0, 2);
            a += q[0] ^ q[2];
            b += q[1] ^ q[3];
        }
    t->sink[ith % 64] = a[0] + a[1] + b[0] + b[1];
}

static void bw_copy(void *p, int ith, int nth) {
    bw_task *t = p;
    int64_t i0, i1;
    cn_split((int64_t)t->n_words, ith, nth, &i0, &i1);
    memcpy(t->dst + i0, t->src + i0, (size_t)(i1 - i0) * 8);
}

/* Best of 3 passes (GB/s) reading n_bytes (as many as decoding reads per token, so
 * cache effects are alike) and copying half of it (read + written bytes). */
static cn_status measure_bw(cn_pool *pool, size_t n_bytes, double *read_gb_s, double *copy_gb_s, cn_error *err) {
    n_bytes = (CN_MAX(n_bytes, BW_MIN_BYTES) + 63) & ~(size_t)63;
    uint64_t *buf = cn_alloc_aligned(n_bytes);
    if (!buf) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for the bandwidth test");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* the same 2 MiB pages the weights get with prefault (model.c), for a fair ratio */
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)buf + huge - 1) & ~(huge - 1);
    if (a < (uintptr_t)buf + n_bytes) madvise((void *)a, ((uintptr_t)buf + n_bytes - a) & ~(huge - 1), MADV_HUGEPAGE);
#endif
    memset(buf, 1, n_bytes);
    bw_task t = {.src = buf, .n_words = n_bytes / 8};
    *read_gb_s = *copy_gb_s = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cn_time_ms();
        cn_pool_run(pool, bw_read, &t);
        double ms = cn_time_ms() - t0;
        *read_gb_s = fmax(*read_gb_s, n_bytes / ms / 1e6);
    }
    bw_task c = {.src = buf, .dst = buf + n_bytes / 16, .n_words = n_bytes / 16};
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cn_time_ms();
        cn_pool_run(pool, bw_copy, &c);
        double ms = cn_time_ms() - t0;
        *copy_gb_s = fmax(*copy_gb_s, n_bytes / ms / 1e6);
    }
    cn_free_aligned(buf);
    return CN_STATUS_OK;
}

/* ---- the model's per-token weight bytes ---- */

static uint64_t wbytes(const cn_weight *w) { return w && w->data ? (uint64_t)w->row_bytes * (uint64_t)w->ne1 : 0; }

static uint64_t decode_weight_bytes(const cn_model *m) {
    const cn_hparams *hp = cn_model_hparams(m);
    uint64_t n = wbytes(cn_model_output(m)) + wbytes(cn_model_output_norm(m));
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const cn_layer *L = cn_model_layer(m, il);
        const cn_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                 &L->q_norm, &L->k_norm, &L->post_attn_norm, &L->ffn_norm, &L->w_gate,
                                 &L->w_up, &L->w_down, &L->post_ffn_norm};
        for (size_t i = 0; i < CN_ARRAY_LEN(ws); i++) n += wbytes(ws[i]);
    }
    return n;
}

/* ---- runs ---- */

typedef struct {
    const cn_model *m;
    cn_ctx *c;
    cn_kv *kv;
    cn_batch b;
    float *logits;
    uint64_t rng;
} runner;

static int32_t rand_token(runner *r, int32_t n_vocab) {
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((r->rng >> 33) % (uint64_t)n_vocab);
}

/* pp: n_p random tokens in one batch; returns the wall time in ms. */
static cn_status run_pp(runner *r, int32_t n_p, double *ms, cn_error *err) {
    const int32_t V = cn_model_hparams(r->m)->n_vocab;
    cn_kv_seq_free(r->kv, 0);
    cn_batch_clear(&r->b);
    for (int32_t i = 0; i < n_p; i++) cn_batch_add(&r->b, rand_token(r, V), i, 0, i == n_p - 1);
    const double t0 = cn_time_ms();
    cn_status s = cn_forward(r->m, r->c, &r->b, r->kv, r->logits, err);
    *ms = cn_time_ms() - t0;
    return s;
}

/* tg: n_g random tokens one at a time from position 0. */
static cn_status run_tg(runner *r, int32_t n_g, double *ms, cn_error *err) {
    const int32_t V = cn_model_hparams(r->m)->n_vocab;
    cn_kv_seq_free(r->kv, 0);
    const double t0 = cn_time_ms();
    for (int32_t i = 0; i < n_g; i++) {
        cn_batch_clear(&r->b);
        cn_batch_add(&r->b, rand_token(r, V), i, 0, true);
        cn_status s = cn_forward(r->m, r->c, &r->b, r->kv, r->logits, err);
        if (s != CN_STATUS_OK) return s;
    }
    *ms = cn_time_ms() - t0;
    return CN_STATUS_OK;
}

/* The realistic prompt, then n_g greedy tokens: TTFT and the n_g - 1 gaps. */
static cn_status run_chat(runner *r, const int32_t *prompt, int32_t n_prompt, int32_t n_g, double *ttft_ms,
                          double *itl_ms, cn_error *err) {
    const int32_t V = cn_model_hparams(r->m)->n_vocab;
    cn_kv_seq_free(r->kv, 0);
    cn_batch_clear(&r->b);
    for (int32_t i = 0; i < n_prompt; i++) cn_batch_add(&r->b, prompt[i], i, 0, i == n_prompt - 1);
    const double t0 = cn_time_ms();
    cn_status s = cn_forward(r->m, r->c, &r->b, r->kv, r->logits, err);
    if (s != CN_STATUS_OK) return s;
    int32_t id = cn_argmax(r->logits, V);
    double prev = cn_time_ms();
    *ttft_ms = prev - t0;
    for (int32_t i = 1; i < n_g; i++) {
        cn_batch_clear(&r->b);
        cn_batch_add(&r->b, id, n_prompt + i - 1, 0, true);
        if ((s = cn_forward(r->m, r->c, &r->b, r->kv, r->logits, err)) != CN_STATUS_OK) return s;
        id = cn_argmax(r->logits, V);
        const double now = cn_time_ms();
        itl_ms[i - 1] = now - prev;
        prev = now;
    }
    return CN_STATUS_OK;
}

/* ---- command ---- */

typedef struct {
    const char *models[MAX_MODELS];
    int n_models;
    int32_t n_p, n_g, reps;
    int32_t threads[MAX_THREADS_LIST];
    int n_threads;
    bool json;
} opts;

typedef struct {
    int threads;
    stat pp, tg;
    double ttft_p50, ttft_p90, itl_p50, itl_p90;
    double read_gb_s, copy_gb_s, load;
} result;

static void usage(FILE *f) {
    fprintf(f, "usage: cinder bench -m MODEL [-m MODEL ...] [-p 512] [-n 128] [-t 1,2] [-r 5] [--json]\n"
               "  pp: -p random tokens in one batch; tg: -n tokens decoded one by one (tok/s, mean ± sd\n"
               "  over -r runs after a warm-up); TTFT and inter-token latency p50/p90 for a built-in\n"
               "  prompt continued greedily for -n tokens; decode GB/s (weight bytes × tg tok/s) and\n"
               "  its share of the measured memory read bandwidth. -t: comma-separated thread counts\n"
               "  (default: the number of CPUs). --json: one object per (model, threads) line.\n"
               "       cinder bench --spec -m MODEL (--draft DRAFT | --lookup N) [--task edit|code] [-n 128] [-t T] [-r 3]\n"
               "  speculative vs plain greedy decoding on a built-in prompt: tok/s of both, speedup,\n"
               "  accepted share of drafted tokens, tokens per target pass.\n");
}

static void print_json(const char *path, const cn_model *m, const opts *o, const result *res, uint64_t wb) {
    const cn_hparams *hp = cn_model_hparams(m);
    const double gb = (double)wb * res->tg.mean / 1e9;
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                          "s:f, s:f, s:f, s:f}",
                          "model", path, "arch", cn_model_arch(m)->name, "isa", cn_kernels_get()->name,
                          "weight_bytes", (json_int_t)wb, "n_layer", hp->n_layer, "threads", res->threads,
                          "n_prompt", o->n_p, "n_gen", o->n_g, "reps", o->reps, "pp_tok_s", res->pp.mean,
                          "pp_tok_s_sd", res->pp.sd, "tg_tok_s", res->tg.mean, "tg_tok_s_sd", res->tg.sd,
                          "ttft_ms", res->ttft_p50, "ttft_p90_ms", res->ttft_p90, "itl_p50_ms", res->itl_p50,
                          "itl_p90_ms", res->itl_p90, "decode_gb_s", gb, "mem_read_gb_s", res->read_gb_s,
                          "mem_copy_gb_s", res->copy_gb_s, "decode_bw_frac",
                          res->read_gb_s > 0 ? gb / res->read_gb_s : 0.0, "load1", res->load);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
    fflush(stdout);
}

static void print_row(const char *path, const opts *o, const result *r, uint64_t wb, bool header) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (header)
        printf("| %-34s | %3s | %7s | %16s | %16s | %8s | %8s | %8s | %14s |\n", "model", "t", "isa", "pp tok/s",
               "tg tok/s", "TTFT ms", "ITL p50", "ITL p90", "decode GB/s");
    const double gb = (double)wb * r->tg.mean / 1e9;
    char pp[32], tg[32], bw[32];
    snprintf(pp, sizeof pp, "%.1f ± %.1f", r->pp.mean, r->pp.sd);
    snprintf(tg, sizeof tg, "%.1f ± %.1f", r->tg.mean, r->tg.sd);
    snprintf(bw, sizeof bw, "%.1f (%.0f%%)", gb, r->read_gb_s > 0 ? 100 * gb / r->read_gb_s : 0);
    (void)o;
    printf("| %-34.34s | %3d | %7s | %16s | %16s | %8.1f | %8.2f | %8.2f | %14s |\n", base, r->threads,
           cn_kernels_get()->name, pp, tg, r->ttft_p50, r->itl_p50, r->itl_p90, bw);
    fflush(stdout);
}

static int bench_model(const char *path, const opts *o, bool first) {
    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    cn_kv *kv = NULL;
    int32_t *prompt = NULL;
    double *pp = NULL, *tg = NULL, *ttft = NULL, *itl = NULL;
    runner r = {.rng = 42};
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    if (cn_model_load(path, &mp, &m, &err) != CN_STATUS_OK || cn_tokenizer_load(cn_model_gguf(m), &tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    const cn_hparams *hp = cn_model_hparams(m);
    size_t n_prompt = 0, n2 = 0;
    if (cn_tokenize(tok, k_prompt, strlen(k_prompt), true, false, NULL, 0, &n_prompt, &err) != CN_STATUS_OK ||
        !(prompt = malloc(n_prompt * sizeof *prompt)) ||
        cn_tokenize(tok, k_prompt, strlen(k_prompt), true, false, prompt, n_prompt, &n2, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", prompt ? err.msg : "out of memory");
        goto done;
    }
    const int64_t n_ctx = CN_MAX((int64_t)o->n_p, (int64_t)n_prompt + o->n_g) + 1;
    if (n_ctx > hp->n_ctx_train) {
        cn_cli_errorf("bench: %lld positions needed, the model was trained for %d", (long long)n_ctx, hp->n_ctx_train);
        goto done;
    }
    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = (n_ctx + kp.block_tokens - 1) / kp.block_tokens;
    const int32_t n_batch = (int32_t)CN_MAX((int64_t)o->n_p, (int64_t)n_prompt);
    r.logits = malloc((size_t)hp->n_vocab * sizeof(float));
    pp = calloc((size_t)o->reps, sizeof *pp);
    tg = calloc((size_t)o->reps, sizeof *tg);
    ttft = calloc((size_t)o->reps, sizeof *ttft);
    itl = calloc((size_t)o->reps * (size_t)CN_MAX(o->n_g, 1), sizeof *itl);
    if (!r.logits || !pp || !tg || !ttft || !itl || cn_kv_create(&kp, &kv, &err) != CN_STATUS_OK ||
        cn_batch_init(&r.b, n_batch, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", r.logits && pp && tg && ttft && itl ? err.msg : "out of memory");
        goto done;
    }
    r.m = m;
    r.kv = kv;
    const uint64_t wb = decode_weight_bytes(m);
    for (int ti = 0; ti < o->n_threads; ti++) {
        result res = {.threads = o->threads[ti]};
        cn_ctx_params cp = cn_ctx_default_params();
        cp.n_threads = o->threads[ti];
        cp.n_batch_max = n_batch;
        cp.n_ctx = (int32_t)n_ctx;
        if (cn_ctx_create(m, &cp, &r.c, &err) != CN_STATUS_OK) {
            cn_cli_errorf("%s", err.msg);
            goto done;
        }
        cn_pool *pool = NULL;
        if (cn_pool_create(o->threads[ti], &pool, &err) != CN_STATUS_OK ||
            measure_bw(pool, (size_t)wb, &res.read_gb_s, &res.copy_gb_s, &err) != CN_STATUS_OK) {
            cn_pool_free(pool);
            cn_cli_errorf("%s", err.msg);
            goto done;
        }
        cn_pool_free(pool);
        fprintf(stderr, "cinder bench: %s, %d thread(s): warm-up", path, res.threads);
        double ms;
        if ((o->n_p > 0 && run_pp(&r, o->n_p, &ms, &err) != CN_STATUS_OK) ||
            (o->n_g > 0 && run_tg(&r, o->n_g, &ms, &err) != CN_STATUS_OK))
            goto fail;
        int n_itl = 0;
        for (int rep = 0; rep < o->reps; rep++) {
            fprintf(stderr, ", %d", rep + 1);
            if (o->n_p > 0) {
                if (run_pp(&r, o->n_p, &ms, &err) != CN_STATUS_OK) goto fail;
                pp[rep] = o->n_p * 1000.0 / ms;
            }
            if (o->n_g > 0) {
                if (run_tg(&r, o->n_g, &ms, &err) != CN_STATUS_OK) goto fail;
                tg[rep] = o->n_g * 1000.0 / ms;
                if (run_chat(&r, prompt, (int32_t)n_prompt, o->n_g, &ttft[rep], itl + n_itl, &err) != CN_STATUS_OK)
                    goto fail;
                n_itl += o->n_g - 1;
            }
        }
        fprintf(stderr, "\n");
        res.load = load1();
        res.pp = stats(pp, o->n_p > 0 ? o->reps : 0);
        res.tg = stats(tg, o->n_g > 0 ? o->reps : 0);
        const int n_ttft = o->n_g > 0 ? o->reps : 0;
        /* the same percentile definition as cinder run and bench --parallel report */
        res.ttft_p50 = cn_gen_percentile(ttft, (size_t)n_ttft, 0.5);
        res.ttft_p90 = cn_gen_percentile(ttft, (size_t)n_ttft, 0.9);
        res.itl_p50 = cn_gen_percentile(itl, (size_t)n_itl, 0.5);
        res.itl_p90 = cn_gen_percentile(itl, (size_t)n_itl, 0.9);
        if (o->json) print_json(path, m, o, &res, wb);
        else print_row(path, o, &res, wb, first && ti == 0);
        cn_ctx_free(r.c);
        r.c = NULL;
        continue;
    fail:
        fprintf(stderr, "\n");
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    if (!o->json)
        fprintf(stderr, "cinder bench: %s: %s, %d layers, %.1f MB of weights per decoded token, prompt %zu tokens, load %.2f\n",
                path, cn_model_arch(m)->name, hp->n_layer, wb / 1e6, n_prompt, load1());
    rc = 0;
done:
    cn_ctx_free(r.c);
    cn_batch_free(&r.b);
    free(r.logits);
    free(pp), free(tg), free(ttft), free(itl), free(prompt);
    cn_kv_free(kv);
    cn_tokenizer_free(tok);
    cn_model_free(m);
    return rc;
}

int cn_cli_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* the batched engine's benchmark: bench_parallel.c */
        if (!strcmp(argv[i], "--parallel")) return cn_cli_bench_parallel(argc, argv);
    for (int i = 1; i < argc; i++) /* speculative vs plain decoding: bench_spec.c */
        if (!strcmp(argv[i], "--spec")) return cn_cli_bench_spec(argc, argv);
    opts o = {.n_p = 512, .n_g = 128, .reps = 5};
    o.threads[0] = (int)CN_MAX(1L, CN_MIN(64L, sysconf(_SC_NPROCESSORS_ONLN)));
    o.n_threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        long n = 0;
        if (!strcmp(a, "-m")) {
            if (o.n_models == MAX_MODELS) {
                cn_cli_errorf("bench: at most %d models", MAX_MODELS);
                return 2;
            }
            o.models[o.n_models++] = v;
            continue;
        }
        if (!strcmp(a, "-t")) {
            if (!cn_cli_parse_int_list(v, 1, 1024, o.threads, MAX_THREADS_LIST, &o.n_threads)) {
                cn_cli_errorf("bench: -t wants thread counts 1..1024 separated by commas, got '%s'", v);
                return 2;
            }
            continue;
        }
        n = strtol(v, &end, 10);
        if (end == v || *end) {
            cn_cli_errorf("bench: option %s wants a number, got '%s'", a, v);
            return 2;
        }
        if (!strcmp(a, "-p") && n >= 0 && n <= (1 << 16)) o.n_p = (int32_t)n;
        else if (!strcmp(a, "-n") && n >= 0 && n <= (1 << 16)) o.n_g = (int32_t)n;
        else if (!strcmp(a, "-r") && n >= 1 && n <= 1000) o.reps = (int32_t)n;
        else {
            cn_cli_errorf("bench: unknown option '%s' or value %ld out of range", a, n);
            usage(stderr);
            return 2;
        }
    }
    if (o.n_models == 0) {
        usage(stderr);
        return 2;
    }
    if (!o.json) {
        const cn_cpu_features *f = cn_cpu_get();
        fprintf(stderr, "cinder bench: kernels %s (avx2 %d, avx512f %d, avx512vnni %d), load %.2f\n",
                cn_kernels_get()->name, f->avx2, f->avx512f, f->avx512vnni, load1());
    }
    for (int i = 0; i < o.n_models; i++)
        if (bench_model(o.models[i], &o, i == 0) != 0) return 1;
    return 0;
}
