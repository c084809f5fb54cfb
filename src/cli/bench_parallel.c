/* bench_parallel.c — `cinder bench --parallel 1,4,8,16`: the batched engine under N
 * concurrent requests. bench.c hands its arguments here when --parallel is present.
 *
 * For each level N a fresh engine (max_running = N, prefix cache on, a KV budget that
 * holds every request unless --kv-mem says otherwise) gets N requests at once, each with
 * its own prompt, greedy with end-of-generation ignored so every request generates
 * exactly -n tokens. Reported: aggregate generated tokens per second (all requests' tokens
 * / wall time from submission to the last finish), time to first token over requests and
 * inter-token latency over every gap of every request (p50, p90, p99; numpy's linear
 * interpolation), the peak KV memory in use, and preemptions.
 *
 * Variants (--variant): "distinct" (default) — prompts that differ from their first
 * token, so nothing is shared; "shared" — one common system prompt of about
 * --system-tokens (500) tokens, then a distinct question. For "shared", one request runs
 * alone first (as an earlier user would have), so the N measured requests are "later
 * requests": with the prefix cache they skip the system prompt's prefill; the same run
 * with --no-prefix-cache shows what that is worth.
 *
 * --prompt-file F: every request's prompt is "Request i." and the file's text (input-
 * grounded work such as "rewrite this code", where n-gram lookup pays). --lookup N: each
 * request asks for speculation by n-gram lookup (cn_engine_request.lookup_n); the engine
 * decides per step how many guesses run, and the guesses checked and confirmed are
 * reported (the tokens are the same as without it); --draft MODEL: the same with a draft
 * model's guesses.
 *
 * Output: a table on stdout (progress on stderr), or one JSON object per level with
 * --json. Every figure is wall time on a machine others may use: the 1-minute load
 * average is printed with it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_parallel.h"
#include "cinder.h"
#include "cli.h"
#include "flags.h"

#define MAX_LEVELS 16
#define MAX_PARALLEL 1024
#define MAX(a, b) ((a) > (b) ? (a) : (b))

typedef struct {
    const char *model;
    int32_t levels[MAX_LEVELS];
    int n_levels;
    int32_t n_gen, n_threads, system_tokens;
    int64_t kv_mem_mib;
    cn_type kv_type;
    bool shared, no_prefix_cache, json;
    int32_t lookup_n;
    const char *draft;       /* --draft: a draft model for every request */
    const char *prompt_file; /* --prompt-file */
    char *file_text;         /* its contents, or NULL */
} popts;

/* ---- prompts ---- */

static const char *k_topics[] = {
    "a lighthouse keeper",     "a lost dog",       "the first snow",    "a broken clock",
    "a dragon who hates fire", "two rival bakers", "a robot gardener",  "a secret library",
    "a storm at sea",          "an old violin",    "a city of bridges", "a shy giant",
    "the last train home",     "a talking crow",   "a desert well",     "a paper boat",
};

static const char k_system_sentence[] =
    "You are a careful, friendly assistant for a small public library. You answer questions "
    "about books, opening hours, events and local history in plain language, you keep your "
    "answers short unless asked for detail, you never invent facts, and when you are not "
    "sure you say so and suggest who could help. ";

static char *prompt_for(const popts *o, const char *system, int i) {
    const char *topic = k_topics[i % (int)(sizeof k_topics / sizeof k_topics[0])];
    const size_t n = strlen(system) + (o->file_text ? strlen(o->file_text) : 0) + 256;
    char *p = malloc(n);
    if (!p) return NULL;
    if (o->file_text) snprintf(p, n, "Request %d.\n%s", i + 1, o->file_text);
    else if (o->shared)
        snprintf(p, n, "%sQuestion %d: please tell me a very short story about %s.\nAnswer:", system, i + 1, topic);
    else
        snprintf(p, n, "Story %d, about %s. Once upon a time, in a place not far from here, there lived", i + 1, topic);
    return p;
}

/* A system prompt of at least `tokens` tokens (repeated sentences, numbered so blocks
 * differ). */
static char *system_prompt(const cn_tokenizer *tok, int32_t tokens) {
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (int k = 1;; k++) {
        size_t n = 0;
        if (cn_tokenize(tok, s, len, true, true, NULL, 0, &n, NULL) != CN_STATUS_OK || (int32_t)n >= tokens) break;
        int w = snprintf(s + len, cap - len, "Rule %d. %s", k, k_system_sentence);
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
    }
    return s;
}

/* ---- one level ---- */

typedef struct {
    double t_last; /* when the last token came (cli_now_ms), 0 before the first */
    double ttft_ms;
    int32_t n_tokens, n_cached;
    bool done;
} preq;

typedef struct {
    preq *reqs;
    double *gaps; /* every inter-token gap of every request */
    size_t n_gaps, cap_gaps;
} precord;

static void on_token(void *user, uint64_t id, int32_t index, const cn_gen_token *tok) {
    (void)index;
    (void)tok;
    precord *r = user;
    preq *q = &r->reqs[id];
    const double now = cli_now_ms();
    if (q->t_last > 0 && r->n_gaps < r->cap_gaps) r->gaps[r->n_gaps++] = now - q->t_last;
    q->t_last = now;
    q->n_tokens++;
}

static void on_finish(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *t) {
    (void)index;
    (void)reason;
    precord *r = user;
    r->reqs[id].ttft_ms = t->ttft_ms;
    r->reqs[id].n_cached = t->n_cached_tokens;
    r->reqs[id].done = true;
}

typedef struct {
    int32_t parallel, n_prompt_mean;
    double gen_tok_s, decode_tok_s, wall_s;
    double ttft[3], itl[3]; /* ms: p50, p90, p99 */
    double kv_mib;
    int64_t n_gen, n_cached, preemptions;
    int64_t drafted, accepted;
    double load;
} presult;

/* Steps until every request in reqs[lo..hi) has finished. */
static cn_status drain(cn_engine *e, const preq *reqs, uint64_t lo, uint64_t hi, cn_error *err) {
    for (;;) {
        bool all = true;
        for (uint64_t i = lo; i < hi; i++) all &= reqs[i].done;
        if (all) return CN_STATUS_OK;
        cn_status st = cn_engine_step(e, NULL, err);
        if (st != CN_STATUS_OK) return st;
    }
}

static int run_level(const cn_model *m, int32_t n_ctx_train, const cn_model *dm, const cn_tokenizer *tok,
                     const popts *o, int32_t N, const char *system, presult *res) {
    int rc = 1;
    cn_error err = {0};
    char **prompts = calloc((size_t)N + 1, sizeof *prompts);
    precord rec = {0};
    rec.reqs = calloc((size_t)N + 2, sizeof *rec.reqs);
    rec.cap_gaps = (size_t)(N + 1) * (size_t)(o->n_gen + 1);
    rec.gaps = malloc(rec.cap_gaps * sizeof *rec.gaps);
    double *ttft = malloc((size_t)N * sizeof *ttft);
    cn_engine *e = NULL;
    if (!prompts || !rec.reqs || !rec.gaps || !ttft) {
        cn_cli_errorf("bench: out of memory");
        goto done;
    }
    int64_t total_prompt = 0, max_prompt = 0;
    for (int32_t i = 0; i <= N; i++) {
        /* prompt N is the warm-up request of the shared variant */
        prompts[i] = prompt_for(o, system, i);
        size_t n = 0;
        if (!prompts[i] ||
            cn_tokenize(tok, prompts[i], strlen(prompts[i]), true, true, NULL, 0, &n, &err) != CN_STATUS_OK) {
            cn_cli_errorf("bench: cannot tokenize a prompt: %s", err.msg);
            goto done;
        }
        if (i < N) total_prompt += (int64_t)n;
        max_prompt = MAX(max_prompt, (int64_t)n);
    }
    cn_engine_params ep = cn_engine_default_params();
    ep.n_threads = o->n_threads;
    ep.max_running = N;
    ep.step_tokens = MAX(512, N);
    ep.kv_type = o->kv_type;
    ep.prefix_cache = !o->no_prefix_cache;
    ep.max_queue = N + 1;
    ep.draft = dm;
    if (o->kv_mem_mib > 0) {
        ep.kv_mem_mib = o->kv_mem_mib;
    } else {
        /* room for every request at once (and the warm-up), each rounded up to blocks */
        ep.kv_tokens = (int64_t)(N + 1) * ((max_prompt + o->n_gen + 15) / 16 * 16 + 16);
    }
    ep.n_ctx = (int32_t)(n_ctx_train < max_prompt + o->n_gen + 16 ? n_ctx_train : max_prompt + o->n_gen + 16);
    if (cn_engine_create(m, &ep, &e, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    cn_engine_callbacks cb = {NULL, on_token, on_finish, &rec};
    cn_engine_request r = cn_engine_request_default_params();
    r.gen.max_tokens = o->n_gen;
    r.gen.sampling.temperature = 0.0f;
    r.gen.sampling.seed = 1;
    r.gen.sampling.ignore_eos = true;
    r.lookup_n = o->lookup_n;
    r.draft = dm != NULL;
    uint64_t id = 0;
    /* ids are 1, 2, ... in submission order: they index rec.reqs */
    uint64_t first_id = 1;
    if (o->shared) {
        r.prompt = prompts[N];
        if (cn_engine_submit(e, &r, &cb, &id, &err) != CN_STATUS_OK ||
            drain(e, rec.reqs, id, id + 1, &err) != CN_STATUS_OK) {
            cn_cli_errorf("bench: warm-up: %s", err.msg);
            goto done;
        }
        first_id = 2;
    }
    rec.n_gaps = 0;
    cn_engine_stats st0;
    cn_engine_get_stats(e, &st0);
    const double t0 = cli_now_ms();
    for (int32_t i = 0; i < N; i++) {
        r.prompt = prompts[i];
        if (cn_engine_submit(e, &r, &cb, &id, &err) != CN_STATUS_OK) {
            cn_cli_errorf("bench: submit: %s", err.msg);
            goto done;
        }
    }
    if (drain(e, rec.reqs, first_id, first_id + (uint64_t)N, &err) != CN_STATUS_OK) {
        cn_cli_errorf("bench: step: %s", err.msg);
        goto done;
    }
    const double wall_ms = cli_now_ms() - t0;
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    memset(res, 0, sizeof *res);
    res->parallel = N;
    res->n_prompt_mean = (int32_t)(total_prompt / N);
    double ttft_max = 0;
    for (int32_t i = 0; i < N; i++) {
        const preq *q = &rec.reqs[first_id + (uint64_t)i];
        ttft[i] = q->ttft_ms;
        ttft_max = MAX(ttft_max, q->ttft_ms);
        res->n_gen += q->n_tokens;
        res->n_cached += q->n_cached;
    }
    res->wall_s = wall_ms / 1000.0;
    /* decode alone: the tokens after each request's first, over the time after the
     * last first token (llama-batched-bench's S_TG when every prompt fits one step) */
    res->decode_tok_s = wall_ms > ttft_max ? (double)(res->n_gen - N) * 1000.0 / (wall_ms - ttft_max) : 0;
    res->gen_tok_s = wall_ms > 0 ? (double)res->n_gen * 1000.0 / wall_ms : 0;
    static const double q[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        res->ttft[k] = cn_gen_percentile(ttft, (size_t)N, q[k]);
        res->itl[k] = cn_gen_percentile(rec.gaps, rec.n_gaps, q[k]);
    }
    res->kv_mib = (double)st.kv_blocks_peak * (double)st.kv_block_bytes / (1024.0 * 1024.0);
    res->preemptions = st.n_preemptions - st0.n_preemptions;
    res->drafted = st.n_drafted - st0.n_drafted;
    res->accepted = st.n_accepted - st0.n_accepted;
    res->load = cli_load1();
    rc = 0;
done:
    cn_engine_free(e);
    if (prompts)
        for (int32_t i = 0; i <= N; i++) free(prompts[i]);
    free(prompts);
    free(rec.reqs);
    free(rec.gaps);
    free(ttft);
    return rc;
}

/* ---- output ---- */

static void print_json(const popts *o, const presult *r) {
    json_t *j = json_pack(
        "{s:s, s:s, s:b, s:i, s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:i, s:I, s:I}",
        "model", o->model, "variant", o->shared ? "shared" : "distinct", "prefix_cache", !o->no_prefix_cache,
        "parallel", r->parallel, "threads", o->n_threads, "prompt_tokens", r->n_prompt_mean, "gen_tokens",
        (json_int_t)r->n_gen, "gen_tok_s", r->gen_tok_s, "decode_tok_s", r->decode_tok_s, "ttft_p50_ms", r->ttft[0],
        "ttft_p90_ms", r->ttft[1], "ttft_p99_ms", r->ttft[2], "itl_p50_ms", r->itl[0], "itl_p90_ms", r->itl[1],
        "itl_p99_ms", r->itl[2], "kv_mib", r->kv_mib, "cached_prompt_tokens", (json_int_t)r->n_cached, "preemptions",
        (json_int_t)r->preemptions, "wall_s", r->wall_s, "load1", r->load, "lookup", o->lookup_n, "drafted",
        (json_int_t)r->drafted, "accepted", (json_int_t)r->accepted);
    cli_print_json(j, JSON_COMPACT);
}

static int parse_levels(void *dst, const char *v, const char *cmd, const char *name) {
    popts *o = dst;
    if (cn_cli_parse_int_list(v, 1, MAX_PARALLEL, o->levels, MAX_LEVELS, &o->n_levels)) return 0;
    cn_cli_errorf("%s: %s wants up to %d counts 1..%d separated by commas, got '%s'", cmd, name, MAX_LEVELS,
                  MAX_PARALLEL, v);
    return -1;
}

static int parse_variant(void *dst, const char *v, const char *cmd, const char *name) {
    if (strcmp(v, "distinct") && strcmp(v, "shared")) {
        cn_cli_errorf("%s: %s is 'distinct' or 'shared', got '%s'", cmd, name, v);
        return -1;
    }
    *(bool *)dst = !strcmp(v, "shared");
    return 0;
}

int cn_cli_bench_parallel(int argc, char **argv) {
    cn_system_info si;
    cn_system_get_info(&si);
    popts o = {.n_gen = 64, .n_threads = si.n_cpus, .system_tokens = 500, .kv_type = CN_TYPE_F16};
    const cli_flag flags[] = {
        CLI_F_CUSTOM("--parallel", NULL, &o, parse_levels, "N,N,...", "concurrent requests per level"),
        CLI_F_STR("--model", "-m", &o.model, "PATH", "the GGUF model"),
        CLI_F_NUM("--n-gen", "-n", CLI_INT, &o.n_gen, 1, 1 << 16, "N", "tokens per request (default 64)"),
        CLI_F_THREADS(&o.n_threads),
        CLI_F_CUSTOM("--variant", NULL, &o.shared, parse_variant, "distinct|shared",
                     "'shared': one common system prompt (after a warm-up\nrequest), to measure the prefix cache"),
        CLI_F_NUM("--system-tokens", NULL, CLI_INT, &o.system_tokens, 1, 1 << 16, "N",
                  "the shared system prompt (default 500)"),
        CLI_F_BOOL("--no-prefix-cache", NULL, &o.no_prefix_cache, "turn the prefix cache off"),
        CLI_F_NUM("--kv-mem", NULL, CLI_I64, &o.kv_mem_mib, 1, 1 << 20, "MiB",
                  "KV budget (default: every request at once)"),
        CLI_F_CUSTOM("--kv-type", NULL, &o.kv_type, cli_parse_kv_type, "f16|q8_0", "KV cache type (default f16)"),
        CLI_F_STR("--prompt-file", NULL, &o.prompt_file, "F", "every prompt is 'Request i.' and F's text"),
        CLI_F_NUM("--lookup", NULL, CLI_INT, &o.lookup_n, 0, 8, "N", "speculation by n-gram lookup (up to N-grams)"),
        CLI_F_STR("--draft", NULL, &o.draft, "MODEL", "speculation with a draft model"),
        CLI_F_BOOL("--json", NULL, &o.json, "one JSON object per level"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int st = cli_flags_parse("bench", NULL, groups, 1, argc, argv, NULL, 0, &n_pos);
    if (st == CLI_FLAGS_HELP || (st == 0 && (!o.model || o.n_levels == 0))) {
        cli_flags_usage(st == CLI_FLAGS_HELP ? stdout : stderr,
                        "usage: cinder bench --parallel 1,4,8,16 -m MODEL [options]\n"
                        "  N concurrent requests per level on the batched engine, greedy, -n tokens each: aggregate\n"
                        "  generated tok/s, TTFT and inter-token latency p50/p90/p99, peak KV MiB; with --lookup or\n"
                        "  --draft, the guesses checked and confirmed.\n",
                        groups, 1);
        return st == CLI_FLAGS_HELP ? 0 : 2;
    }
    if (st) return st;
    size_t len = 0;
    if (o.prompt_file && !(o.file_text = cn_cli_read_file(o.prompt_file, &len))) return 2;
    cn_error err = {0};
    cn_model *m = NULL, *dm = NULL;
    cn_tokenizer *tok = NULL;
    char *system = NULL;
    int rc = 1;
    if (cn_cli_model_load(o.model, &m, &err) != CN_STATUS_OK ||
        cn_tokenizer_from_model(m, &tok, &err) != CN_STATUS_OK ||
        (o.draft && cn_cli_model_load(o.draft, &dm, &err) != CN_STATUS_OK)) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    cn_model_info mi;
    cn_model_get_info(m, &mi);
    system = o.shared ? system_prompt(tok, o.system_tokens) : calloc(1, 1);
    if (!system) {
        cn_cli_errorf("bench: out of memory");
        goto done;
    }
    const char *cache = o.no_prefix_cache ? "off" : "on";
    if (!o.json)
        printf("%-8s %-6s %4s %6s %9s %9s %10s %10s %10s %9s %9s %9s %8s %7s %5s %8s %8s\n", "variant", "prefix", "N",
               "prompt", "gen tok/s", "dec tok/s", "ttft p50", "ttft p90", "ttft p99", "itl p50", "itl p90", "itl p99",
               "kv MiB", "preempt", "load", "drafted", "accepted");
    for (int32_t l = 0; l < o.n_levels; l++) {
        fprintf(stderr, "cinder bench: parallel %d (%s prompts, prefix cache %s, %d threads)...\n", o.levels[l],
                o.shared ? "shared" : "distinct", cache, o.n_threads);
        presult res;
        if (run_level(m, mi.n_ctx_train, dm, tok, &o, o.levels[l], system, &res) != 0) goto done;
        if (o.json) {
            print_json(&o, &res);
        } else {
            printf("%-8s %-6s %4d %6d %9.1f %9.1f %8.1fms %8.1fms %8.1fms %7.2fms %7.2fms %7.2fms %8.2f %7lld %5.2f "
                   "%8lld %8lld\n",
                   o.file_text ? "file"
                   : o.shared  ? "shared"
                               : "distinct",
                   cache, res.parallel, res.n_prompt_mean, res.gen_tok_s, res.decode_tok_s, res.ttft[0], res.ttft[1],
                   res.ttft[2], res.itl[0], res.itl[1], res.itl[2], res.kv_mib, (long long)res.preemptions, res.load,
                   (long long)res.drafted, (long long)res.accepted);
        }
        fflush(stdout);
    }
    rc = 0;
done:
    free(system);
    free(o.file_text);
    cn_tokenizer_free(tok);
    cn_model_free(dm);
    cn_model_free(m);
    return rc;
}
