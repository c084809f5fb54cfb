/* bench.c — `cinder bench`: llama-bench's two figures for a model, plus what a user
 * feels and what the hardware allows, on cinder.h's low tier (a context per thread
 * count, cn_batch + cn_context_decode) as llama-bench stands on llama_decode.
 *
 *   pp  prompt processing: -p random tokens at positions 0.. in one decode (n_batch
 *       chunks past the context's 8192 rows) (tok/s)
 *   tg  token generation: -n random tokens decoded one at a time from position 0
 *   both as mean ± sample stddev over -r repetitions after one warm-up run of each,
 *   from an empty sequence each time (llama-bench's pp512 / tg128);
 *   TTFT and inter-token latency (p50, p90) of a realistic prompt (an English paragraph
 *   through the model's tokenizer) prefilled and then greedily continued for -n tokens;
 *   decode GB/s = cn_model_decode_bytes × tg tok/s, and that as a fraction of the
 *   machine's read bandwidth (cn_system_measure_bandwidth, as many bytes, the same
 *   thread count); a copy test is reported beside it.
 *
 * Output: a table on stdout (it is this command's product), progress on stderr; --json
 * prints one JSON object per (model, threads) line instead. Every figure is wall time
 * on a machine others may be using: the 1-minute load average is printed with it. It
 * measures only: kernel-level benchmarks live in bench/ (bench/matmul.c).
 *
 * --profile adds, per thread count, one more tg and pp run with the context's profile on
 * (cn_context_profile) and prints where a token's time goes: each step of the forward
 * pass by weight formats and shape, its ms per token, the bytes it read and so its GB/s,
 * against the read bandwidth measured beside it; "other" is the run's wall time outside
 * the steps (batch setup, the caller's loop). A third profile is the batched engine's
 * decode step: PROF_SEQS sequences advanced one token each per forward pass, per step. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_parallel.h"
#include "cinder.h"
#include "cli.h"
#include "flags.h"

#define MAX_THREADS_LIST 16
#define MAX_MODELS 16
#define MAX_ROWS 8192 /* the most rows cn_context_params.n_batch allows */

static const char k_prompt[] = "The lighthouse keeper had kept the same routine for thirty years. Every evening, just "
                               "before the sun touched the water, he climbed the one hundred and twelve steps of the "
                               "tower, wiped the salt from the great lens, trimmed the wick and lit the lamp. Ships "
                               "passing in the night never saw him, but they saw his light, and that was enough for "
                               "him. One winter a storm came that was worse than any he remembered. The wind tore "
                               "shingles from the roof of his cottage and the waves climbed higher than the rocks at "
                               "the foot of the tower. Near midnight he noticed that the light had begun to flicker. "
                               "Explain, step by step, what he should check first, what tools he would need, and how "
                               "he could keep the light burning until morning without putting himself in danger.";

void cli_print_json(json_t *j, size_t flags) {
    char *s = j ? json_dumps(j, flags) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
    fflush(stdout);
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double cli_load1(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

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

/* ---- runs: sequence 0 of one context, emptied before each ---- */

typedef struct {
    cn_context *c;
    cn_batch b;
    int32_t n_vocab;
    uint64_t rng;
} runner;

static int32_t rand_token(runner *r) {
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((r->rng >> 33) % (uint64_t)r->n_vocab);
}

/* tok[0..n) at positions pos0.. in batches of the batch's capacity, the last row's
 * logits wanted. */
static cn_status feed(runner *r, const int32_t *tok, int32_t n, int32_t pos0, cn_error *err) {
    for (int32_t i0 = 0; i0 < n; i0 += r->b.cap) {
        const int32_t i1 = i0 + r->b.cap < n ? i0 + r->b.cap : n;
        cn_batch_clear(&r->b);
        for (int32_t i = i0; i < i1; i++) cn_batch_add(&r->b, tok[i], pos0 + i, 0, i == n - 1);
        const cn_status s = cn_context_decode(r->c, &r->b, err);
        if (s != CN_STATUS_OK) return s;
    }
    return CN_STATUS_OK;
}

/* pp: n_p random tokens (drawn before the clock starts); returns the wall time in ms. */
static cn_status run_pp(runner *r, int32_t *tok, int32_t n_p, double *ms, cn_error *err) {
    for (int32_t i = 0; i < n_p; i++) tok[i] = rand_token(r);
    cn_status s = cn_context_seq_rm(r->c, 0, 0, err);
    const double t0 = cli_now_ms();
    if (s == CN_STATUS_OK) s = feed(r, tok, n_p, 0, err);
    *ms = cli_now_ms() - t0;
    return s;
}

/* tg: n_g random tokens one at a time from position 0. */
static cn_status run_tg(runner *r, int32_t n_g, double *ms, cn_error *err) {
    cn_status s = cn_context_seq_rm(r->c, 0, 0, err);
    const double t0 = cli_now_ms();
    for (int32_t i = 0; i < n_g && s == CN_STATUS_OK; i++) {
        const int32_t id = rand_token(r);
        s = feed(r, &id, 1, i, err);
    }
    *ms = cli_now_ms() - t0;
    return s;
}

/* The realistic prompt, then n_g greedy tokens: TTFT and the n_g - 1 gaps. */
static cn_status run_chat(runner *r, const int32_t *prompt, int32_t n_prompt, int32_t n_g, double *ttft_ms,
                          double *itl_ms, cn_error *err) {
    cn_status s = cn_context_seq_rm(r->c, 0, 0, err);
    const double t0 = cli_now_ms();
    if (s != CN_STATUS_OK || (s = feed(r, prompt, n_prompt, 0, err)) != CN_STATUS_OK) return s;
    int32_t id = cn_cli_argmax(cn_context_logits_row(r->c, 0), r->n_vocab);
    double prev = cli_now_ms();
    *ttft_ms = prev - t0;
    for (int32_t i = 1; i < n_g; i++) {
        if ((s = feed(r, &id, 1, n_prompt + i - 1, err)) != CN_STATUS_OK) return s;
        id = cn_cli_argmax(cn_context_logits_row(r->c, 0), r->n_vocab);
        const double now = cli_now_ms();
        itl_ms[i - 1] = now - prev;
        prev = now;
    }
    return CN_STATUS_OK;
}

/* ---- command ---- */

typedef struct {
    int32_t v[MAX_THREADS_LIST];
    int n;
} int_list;

typedef struct {
    const char *models[MAX_MODELS];
    int32_t n_models;
    int32_t n_p, n_g, reps;
    int_list threads;
    bool json, profile;
} opts;

enum { MAX_PROF = 48, PROF_SEQS = 8 };
typedef struct {
    cn_profile_op op[MAX_PROF];
    int32_t n;
    double ms;      /* the run's wall time */
    int32_t tokens; /* tokens it ran (steps, for the PROF_SEQS-row profile) */
} profile;

typedef struct {
    int threads;
    stat pp, tg;
    double ttft_p50, ttft_p90, itl_p50, itl_p90;
    double read_gb_s, copy_gb_s, load;
    profile prof_tg, prof_pp, prof_tg8;
} result;

static int parse_threads(void *dst, const char *v, const char *cmd, const char *name) {
    int_list *l = dst;
    if (cn_cli_parse_int_list(v, 1, 1024, l->v, MAX_THREADS_LIST, &l->n)) return 0;
    cn_cli_errorf("%s: %s wants up to %d thread counts 1..1024 separated by commas, got '%s'", cmd, name,
                  MAX_THREADS_LIST, v);
    return -1;
}

static json_t *profile_json(const profile *p);

static void print_json(const char *path, const cn_model_info *mi, const opts *o, const result *res, uint64_t wb) {
    const double gb = (double)wb * res->tg.mean / 1e9;
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                          "s:f, s:f, s:f, s:f}",
                          "model", path, "arch", mi->arch, "isa", cn_kernels_family(), "weight_bytes", (json_int_t)wb,
                          "n_layer", mi->n_layer, "threads", res->threads, "n_prompt", o->n_p, "n_gen", o->n_g, "reps",
                          o->reps, "pp_tok_s", res->pp.mean, "pp_tok_s_sd", res->pp.sd, "tg_tok_s", res->tg.mean,
                          "tg_tok_s_sd", res->tg.sd, "ttft_ms", res->ttft_p50, "ttft_p90_ms", res->ttft_p90,
                          "itl_p50_ms", res->itl_p50, "itl_p90_ms", res->itl_p90, "decode_gb_s", gb, "mem_read_gb_s",
                          res->read_gb_s, "mem_copy_gb_s", res->copy_gb_s, "decode_bw_frac",
                          res->read_gb_s > 0 ? gb / res->read_gb_s : 0.0, "load1", res->load);
    if (j && o->profile) {
        json_object_set_new(j, "profile_tg", profile_json(&res->prof_tg));
        json_object_set_new(j, "profile_pp", profile_json(&res->prof_pp));
        json_object_set_new(j, "profile_tg8", profile_json(&res->prof_tg8));
    }
    cli_print_json(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
}

static void print_row(const char *path, const result *r, uint64_t wb, bool header) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (header)
        printf("| %-34s | %3s | %7s | %16s | %16s | %8s | %8s | %8s | %14s |\n", "model", "t", "isa", "pp tok/s",
               "tg tok/s", "TTFT ms", "ITL p50", "ITL p90", "decode GB/s");
    const double gb = (double)wb * r->tg.mean / 1e9;
    char pp[32], tg[32], bw[32];
    snprintf(pp, sizeof pp, "%.1f ± %.1f", r->pp.mean, r->pp.sd);
    snprintf(tg, sizeof tg, "%.1f ± %.1f", r->tg.mean, r->tg.sd);
    snprintf(bw, sizeof bw, "%.1f (%.0f%%)", gb, r->read_gb_s > 0 ? 100 * gb / r->read_gb_s : 0);
    printf("| %-34.34s | %3d | %7s | %16s | %16s | %8.1f | %8.2f | %8.2f | %14s |\n", base, r->threads,
           cn_kernels_family(), pp, tg, r->ttft_p50, r->itl_p50, r->itl_p90, bw);
    fflush(stdout);
}

/* n steps of PROF_SEQS rows, sequence q at position i in step i, every row's logits
 * wanted: the batched engine's decode step. */
static cn_status run_tg_seqs(runner *r, int32_t n, double *ms, cn_error *err) {
    cn_status s = CN_STATUS_OK;
    for (int32_t q = 0; q < PROF_SEQS && s == CN_STATUS_OK; q++) s = cn_context_seq_rm(r->c, q, 0, err);
    const double t0 = cli_now_ms();
    for (int32_t i = 0; i < n && s == CN_STATUS_OK; i++) {
        cn_batch_clear(&r->b);
        for (int32_t q = 0; q < PROF_SEQS; q++) cn_batch_add(&r->b, rand_token(r), i, q, true);
        s = cn_context_decode(r->c, &r->b, err);
    }
    *ms = cli_now_ms() - t0;
    return s;
}

typedef enum { PROF_TG, PROF_PP, PROF_TG_SEQS } prof_kind;

/* One run of n tokens (steps, for PROF_TG_SEQS) with the profile on. */
static cn_status profile_run(runner *r, int32_t *tok, int32_t n, prof_kind kind, profile *p, cn_error *err) {
    cn_context_profile(r->c, true);
    const cn_status s = kind == PROF_TG_SEQS ? run_tg_seqs(r, n, &p->ms, err)
                        : kind == PROF_PP    ? run_pp(r, tok, n, &p->ms, err)
                                             : run_tg(r, n, &p->ms, err);
    cn_context_profile(r->c, false);
    p->tokens = n;
    p->n = cn_context_profile_read(r->c, p->op, MAX_PROF);
    if (p->n > MAX_PROF) p->n = MAX_PROF;
    return s;
}

static void print_profile(const char *what, const profile *p, double read_gb_s, const char *unit) {
    if (p->tokens <= 0 || p->ms <= 0) return;
    const double per = 1.0 / p->tokens;
    char ms_u[16], mb_u[16];
    snprintf(ms_u, sizeof ms_u, "ms/%s", unit);
    snprintf(mb_u, sizeof mb_u, "MB/%s", unit);
    printf("\n%s: %d %ss, %.2f ms a %s\n\n", what, p->tokens, unit, p->ms * per, unit);
    printf("| %-52s | %6s | %9s | %6s | %9s | %7s | %7s |\n", "step (weights, in->out)", "calls", ms_u, "share", mb_u,
           "GB/s", "of bw");
    printf("| %.52s | -----: | --------: | -----: | --------: | ------: | ------: |\n",
           "-----------------------------------------------------");
    double sum = 0, bytes = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const cn_profile_op *o = &p->op[i];
        const double gb_s = o->ms > 0 ? (double)o->bytes / (o->ms * 1e6) : 0;
        sum += o->ms;
        bytes += (double)o->bytes;
        printf("| %-52.52s | %6.1f | %9.3f | %5.1f%% | %9.2f | %7.1f | %6.0f%% |\n", o->op, (double)o->calls * per,
               o->ms * per, 100 * o->ms / p->ms, (double)o->bytes * per / 1e6, gb_s,
               read_gb_s > 0 ? 100 * gb_s / read_gb_s : 0);
    }
    const double other = p->ms - sum;
    printf("| %-52s | %6s | %9.3f | %5.1f%% | %9s | %7s | %7s |\n", "other (outside the steps)", "", other * per,
           100 * other / p->ms, "", "", "");
    printf("| %-52s | %6s | %9.3f | %5.1f%% | %9.2f | %7.1f | %6.0f%% |\n", "total", "", p->ms * per, 100.0,
           bytes * per / 1e6, bytes / (p->ms * 1e6), read_gb_s > 0 ? 100 * bytes / (p->ms * 1e6) / read_gb_s : 0);
    printf("\n(read bandwidth measured: %.1f GB/s)\n", read_gb_s);
    fflush(stdout);
}

static json_t *profile_json(const profile *p) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < p->n; i++)
        json_array_append_new(a,
                              json_pack("{s:s, s:I, s:f, s:I}", "op", p->op[i].op, "calls", (json_int_t)p->op[i].calls,
                                        "ms", p->op[i].ms, "bytes", (json_int_t)p->op[i].bytes));
    return json_pack("{s:i, s:f, s:o}", "tokens", p->tokens, "ms", p->ms, "ops", a ? a : json_null());
}

/* One thread count on a fresh context: bandwidth, warm-up, -r repetitions. */
static cn_status bench_threads(const cn_model *m, const opts *o, const int32_t *prompt, int32_t n_prompt, int32_t n_ctx,
                               uint64_t wb, double *buf, result *res, cn_error *err) {
    runner r = {.rng = 42};
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = res->threads;
    cp.n_ctx = n_ctx;
    cp.n_batch = o->n_p > n_prompt ? o->n_p : n_prompt;
    if (cp.n_batch > MAX_ROWS) cp.n_batch = MAX_ROWS;
    if (o->profile && cp.n_batch < PROF_SEQS) cp.n_batch = PROF_SEQS;
    if (o->profile) cp.n_seq_max = PROF_SEQS;
    double *pp = buf, *tg = pp + o->reps, *ttft = tg + o->reps, *itl = ttft + o->reps;
    int32_t *tok = malloc(((size_t)o->n_p + 1) * sizeof *tok);
    cn_status s = tok ? cn_context_create(m, &cp, &r.c, err) : CN_STATUS_NO_MEMORY;
    if (s == CN_STATUS_OK) s = cn_batch_init(&r.b, cp.n_batch, err);
    if (s == CN_STATUS_OK) s = cn_system_measure_bandwidth(res->threads, wb, &res->read_gb_s, &res->copy_gb_s, err);
    if (s != CN_STATUS_OK) goto done;
    r.n_vocab = cn_context_n_vocab(r.c);
    fprintf(stderr, "warm-up");
    double ms;
    if ((o->n_p > 0 && (s = run_pp(&r, tok, o->n_p, &ms, err)) != CN_STATUS_OK) ||
        (o->n_g > 0 && (s = run_tg(&r, o->n_g, &ms, err)) != CN_STATUS_OK))
        goto done;
    int n_itl = 0;
    for (int rep = 0; rep < o->reps; rep++) {
        fprintf(stderr, ", %d", rep + 1);
        if (o->n_p > 0) {
            if ((s = run_pp(&r, tok, o->n_p, &ms, err)) != CN_STATUS_OK) goto done;
            pp[rep] = o->n_p * 1000.0 / ms;
        }
        if (o->n_g > 0) {
            if ((s = run_tg(&r, o->n_g, &ms, err)) != CN_STATUS_OK) goto done;
            tg[rep] = o->n_g * 1000.0 / ms;
            if ((s = run_chat(&r, prompt, n_prompt, o->n_g, &ttft[rep], itl + n_itl, err)) != CN_STATUS_OK) goto done;
            n_itl += o->n_g - 1;
        }
    }
    if (o->profile) {
        fprintf(stderr, ", profile");
        if (o->n_g > 0 && (s = profile_run(&r, tok, o->n_g, PROF_TG, &res->prof_tg, err)) != CN_STATUS_OK) goto done;
        if (o->n_p > 0 && (s = profile_run(&r, tok, o->n_p, PROF_PP, &res->prof_pp, err)) != CN_STATUS_OK) goto done;
        if (o->n_g > 0 && (s = profile_run(&r, tok, o->n_g, PROF_TG_SEQS, &res->prof_tg8, err)) != CN_STATUS_OK)
            goto done;
    }
    res->load = cli_load1();
    res->pp = stats(pp, o->n_p > 0 ? o->reps : 0);
    res->tg = stats(tg, o->n_g > 0 ? o->reps : 0);
    const size_t n_ttft = o->n_g > 0 ? (size_t)o->reps : 0;
    res->ttft_p50 = cn_gen_percentile(ttft, n_ttft, 0.5);
    res->ttft_p90 = cn_gen_percentile(ttft, n_ttft, 0.9);
    res->itl_p50 = cn_gen_percentile(itl, (size_t)n_itl, 0.5);
    res->itl_p90 = cn_gen_percentile(itl, (size_t)n_itl, 0.9);
done:
    fprintf(stderr, "\n");
    if (!tok) snprintf(err->msg, sizeof err->msg, "bench: out of memory for %d tokens", o->n_p);
    free(tok);
    cn_batch_free(&r.b);
    cn_context_free(r.c);
    return s;
}

static int bench_model(const char *path, const opts *o, bool first) {
    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    double *buf = NULL;
    if (cn_cli_model_load(path, &m, &err) != CN_STATUS_OK || cn_tokenizer_from_model(m, &tok, &err) != CN_STATUS_OK ||
        cn_tokenize_alloc(tok, k_prompt, strlen(k_prompt), true, false, &prompt, &n_prompt, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    cn_model_info mi;
    cn_model_get_info(m, &mi);
    const int64_t need = (o->n_p > (int64_t)n_prompt + o->n_g ? o->n_p : (int64_t)n_prompt + o->n_g) + 1;
    if (need > mi.n_ctx_train) {
        cn_cli_errorf("bench: %lld positions needed, the model was trained for %d", (long long)need, mi.n_ctx_train);
        goto done;
    }
    /* pp, tg and TTFT per repetition, then every repetition's inter-token gaps */
    if (!(buf = malloc((size_t)o->reps * (3 + (size_t)(o->n_g > 1 ? o->n_g : 1)) * sizeof *buf))) {
        cn_cli_errorf("bench: out of memory");
        goto done;
    }
    const uint64_t wb = cn_model_decode_bytes(m);
    for (int ti = 0; ti < o->threads.n; ti++) {
        result res = {.threads = o->threads.v[ti]};
        fprintf(stderr, "cinder bench: %s, %d thread(s): ", path, res.threads);
        if (bench_threads(m, o, prompt, (int32_t)n_prompt, (int32_t)need, wb, buf, &res, &err) != CN_STATUS_OK) {
            cn_cli_errorf("%s", err.msg);
            goto done;
        }
        if (o->json) print_json(path, &mi, o, &res, wb);
        else {
            print_row(path, &res, wb, first && ti == 0);
            if (o->profile) {
                char what[160];
                snprintf(what, sizeof what, "decode profile, %s, %d thread(s), %s", path, res.threads,
                         cn_kernels_family());
                print_profile(what, &res.prof_tg, res.read_gb_s, "token");
                snprintf(what, sizeof what, "prefill profile (pp%d), %s, %d thread(s), %s", o->n_p, path, res.threads,
                         cn_kernels_family());
                print_profile(what, &res.prof_pp, res.read_gb_s, "token");
                snprintf(what, sizeof what,
                         "batched decode profile (%d sequences, a token each per step), %s, %d thread(s), %s",
                         PROF_SEQS, path, res.threads, cn_kernels_family());
                print_profile(what, &res.prof_tg8, res.read_gb_s, "step");
            }
        }
    }
    if (!o->json)
        fprintf(stderr,
                "cinder bench: %s: %s, %d layers, %.1f MB of weights per decoded token, prompt %zu tokens, load %.2f\n",
                path, mi.arch, mi.n_layer, wb / 1e6, n_prompt, cli_load1());
    rc = 0;
done:
    free(buf);
    free(prompt);
    cn_tokenizer_free(tok);
    cn_model_free(m);
    return rc;
}

int cn_cli_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* the batched engine's benchmark: bench_parallel.c */
        if (!strcmp(argv[i], "--parallel")) return cn_cli_bench_parallel(argc, argv);
    for (int i = 1; i < argc; i++) /* speculative vs plain decoding: bench_spec.c */
        if (!strcmp(argv[i], "--spec")) return cn_cli_bench_spec(argc, argv);
    cn_system_info si;
    cn_system_get_info(&si);
    opts o = {.n_p = 512, .n_g = 128, .reps = 5, .threads = {.v = {si.n_cpus}, .n = 1}};
    const cli_flag flags[] = {
        {.name = "--model",
         .alias = "-m",
         .kind = CLI_STRS,
         .dst = o.models,
         .metavar = "PATH",
         .help = "a GGUF model (repeat for several)",
         .max = MAX_MODELS,
         .count = &o.n_models},
        CLI_F_NUM("--n-prompt", "-p", CLI_INT, &o.n_p, 0, 1 << 16, "N", "pp: random tokens in one batch (default 512)"),
        CLI_F_NUM("--n-gen", "-n", CLI_INT, &o.n_g, 0, 1 << 16, "N", "tg: tokens decoded one by one (default 128)"),
        CLI_F_CUSTOM("--threads", "-t", &o.threads, parse_threads, "T,T,...", "thread counts (default: every CPU)"),
        CLI_F_NUM("--repetitions", "-r", CLI_INT, &o.reps, 1, 1000, "N", "runs after one warm-up (default 5)"),
        CLI_F_BOOL("--json", NULL, &o.json, "one JSON object per (model, threads) line"),
        CLI_F_BOOL("--profile", NULL, &o.profile, "where a token's time goes, step by step (one more tg and pp run)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int st = cli_flags_parse("bench", NULL, groups, 1, argc, argv, NULL, 0, &n_pos);
    if (st == CLI_FLAGS_HELP || (st == 0 && o.n_models == 0)) {
        FILE *f = st == CLI_FLAGS_HELP ? stdout : stderr;
        fprintf(f, "usage: cinder bench -m MODEL [-m MODEL ...] [options]\n"
                   "  pp and tg tok/s (mean ± sd over -r runs), TTFT and inter-token latency p50/p90 of a\n"
                   "  built-in prompt continued greedily for -n tokens, decode GB/s (weight bytes × tg tok/s)\n"
                   "  and its share of the measured memory read bandwidth.\n");
        cli_flags_help(f, groups, 1);
        fprintf(f, "cinder bench --parallel 1,4,8 -m MODEL ...: the batched engine (--parallel --help)\n"
                   "cinder bench --spec -m MODEL (--draft DRAFT | --lookup N) ...: speculative vs plain decoding\n");
        return st == CLI_FLAGS_HELP ? 0 : 2;
    }
    if (st) return st;
    if (!o.json)
        fprintf(stderr, "cinder bench: kernels %s (avx2 %d, avx512f %d, avx512vnni %d), load %.2f\n",
                cn_kernels_family(), si.avx2, si.avx512f, si.avx512vnni, cli_load1());
    for (int i = 0; i < o.n_models; i++)
        if (bench_model(o.models[i], &o, i == 0) != 0) return 1;
    return 0;
}
