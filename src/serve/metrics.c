/* metrics.c — counters and histograms for GET /metrics (Prometheus text format 0.0.4).
 *
 * Names follow vLLM's (prefixed cinder:), so existing dashboards map over: request
 * counts by endpoint and status, prompt and generation tokens, finished requests by
 * reason, prefix-cache queries and hits, preemptions; gauges of running and waiting
 * sequences and KV blocks; histograms of TTFT, inter-token latency, end-to-end latency,
 * queue, prefill and decode time; the compiled-grammar cache's hits, misses and compile
 * time. Everything under one mutex: a metric update is a few
 * additions, far below a decode step. */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ENDPOINTS 13
#define N_STATUS 16
#define MAX_BUCKETS 24

static const char *const ENDPOINTS[N_ENDPOINTS] = {
    "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
    "/v1/models", "/health", "/metrics",
    "/tokenize", "/detokenize", "/", "other", NULL};

typedef struct {
    const char *name, *help;
    int n_buckets;
    const double *le;
    uint64_t count[MAX_BUCKETS + 1]; /* cumulative is computed on render */
    uint64_t n;
    double sum;
} histogram;

static const double LAT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                     0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double ITL_BUCKETS[] = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                     0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};

enum { H_TTFT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, N_HIST };

struct cn_metrics {
    pthread_mutex_t mu;
    uint64_t requests[N_ENDPOINTS][N_STATUS];
    int status_code[N_STATUS];
    uint64_t prompt_tokens, generation_tokens, cached_tokens;
    uint64_t finished[4];      /* by cn_finish_reason */
    uint64_t disconnects;
    histogram h[N_HIST];
};

static void hist_init(histogram *h, const char *name, const char *help, const double *le, int n) {
    h->name = name;
    h->help = help;
    h->le = le;
    h->n_buckets = n;
}

cn_metrics *cn_metrics_new(void) {
    cn_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    const int nl = (int)(sizeof LAT_BUCKETS / sizeof *LAT_BUCKETS), ni = (int)(sizeof ITL_BUCKETS / sizeof *ITL_BUCKETS);
    hist_init(&m->h[H_TTFT], "cinder:time_to_first_token_seconds", "Time from arrival to the first token.",
              LAT_BUCKETS, nl);
    hist_init(&m->h[H_ITL], "cinder:inter_token_latency_seconds", "Time between consecutive tokens.",
              ITL_BUCKETS, ni);
    hist_init(&m->h[H_E2E], "cinder:e2e_request_latency_seconds", "Time from arrival to finish.", LAT_BUCKETS, nl);
    hist_init(&m->h[H_QUEUE], "cinder:request_queue_time_seconds", "Time from arrival to prefill start.",
              LAT_BUCKETS, nl);
    hist_init(&m->h[H_PREFILL], "cinder:request_prefill_time_seconds", "Time from prefill start to first token.",
              LAT_BUCKETS, nl);
    hist_init(&m->h[H_DECODE], "cinder:request_decode_time_seconds", "Time from first to last token.",
              LAT_BUCKETS, nl);
    return m;
}

void cn_metrics_free(cn_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(histogram *h, double v) {
    int b = 0;
    while (b < h->n_buckets && v > h->le[b]) b++;
    h->count[b]++;
    h->n++;
    h->sum += v;
}

void cn_metrics_request(cn_metrics *m, const char *endpoint, int status) {
    int e = 0;
    while (ENDPOINTS[e] && strcmp(ENDPOINTS[e], endpoint) && strcmp(ENDPOINTS[e], "other")) e++;
    if (!ENDPOINTS[e]) return;
    pthread_mutex_lock(&m->mu);
    int s = 0;
    while (s < N_STATUS && m->status_code[s] && m->status_code[s] != status) s++;
    if (s < N_STATUS) {
        m->status_code[s] = status;
        m->requests[e][s]++;
    }
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_finish(cn_metrics *m, const cn_gen_timings *t, cn_finish_reason r) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)t->n_prompt_tokens;
    m->cached_tokens += (uint64_t)t->n_cached_tokens;
    m->generation_tokens += (uint64_t)t->n_generated_tokens;
    if ((unsigned)r < 4) m->finished[r]++;
    if (t->n_generated_tokens > 0) {
        observe(&m->h[H_TTFT], t->ttft_ms / 1e3);
        observe(&m->h[H_PREFILL], t->prefill_ms / 1e3);
        observe(&m->h[H_DECODE], t->decode_ms / 1e3);
    }
    observe(&m->h[H_QUEUE], t->queue_ms / 1e3);
    observe(&m->h[H_E2E], t->total_ms / 1e3);
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_itl(cn_metrics *m, double s) {
    pthread_mutex_lock(&m->mu);
    observe(&m->h[H_ITL], s);
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_disconnect(cn_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->disconnects++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        const size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void counter(sbuf *b, const char *name, const char *help, const char *model, uint64_t v) {
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s{model_name=\"%s\"} %llu\n", name, help, name, name, model,
        (unsigned long long)v);
}

static void gauge(sbuf *b, const char *name, const char *help, const char *model, double v) {
    put(b, "# HELP %s %s\n# TYPE %s gauge\n%s{model_name=\"%s\"} %.17g\n", name, help, name, name, model, v);
}

char *cn_metrics_render(cn_metrics *m, const cn_engine_stats *st, const gcache_stats *gs, const char *model) {
    sbuf b = {malloc(16384), 0, 16384, false};
    if (!b.p) return NULL;
    b.p[0] = 0;
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP cinder:http_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE cinder:http_requests_total counter\n");
    for (int e = 0; ENDPOINTS[e]; e++)
        for (int s = 0; s < N_STATUS && m->status_code[s]; s++)
            if (m->requests[e][s])
                put(&b, "cinder:http_requests_total{model_name=\"%s\",endpoint=\"%s\",status=\"%d\"} %llu\n", model,
                    ENDPOINTS[e], m->status_code[s], (unsigned long long)m->requests[e][s]);
    counter(&b, "cinder:prompt_tokens_total", "Prompt tokens of finished completions.", model, m->prompt_tokens);
    counter(&b, "cinder:prompt_tokens_cached_total", "Of them, reused from the prefix cache.", model,
            m->cached_tokens);
    counter(&b, "cinder:generation_tokens_total", "Generated tokens of finished completions.", model,
            m->generation_tokens);
    put(&b, "# HELP cinder:request_success_total Finished completions, by finish reason.\n"
            "# TYPE cinder:request_success_total counter\n");
    static const char *const REASON[4] = {"none", "stop", "length", "cancelled"};
    for (int r = 1; r < 4; r++)
        put(&b, "cinder:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n", model, REASON[r],
            (unsigned long long)m->finished[r]);
    counter(&b, "cinder:client_disconnects_total", "Requests whose client went away before they finished.", model,
            m->disconnects);
    for (int h = 0; h < N_HIST; h++) {
        const histogram *x = &m->h[h];
        put(&b, "# HELP %s %s\n# TYPE %s histogram\n", x->name, x->help, x->name);
        uint64_t cum = 0;
        for (int i = 0; i < x->n_buckets; i++) {
            cum += x->count[i];
            put(&b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", x->name, model, x->le[i],
                (unsigned long long)cum);
        }
        put(&b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n%s_sum{model_name=\"%s\"} %.17g\n"
                "%s_count{model_name=\"%s\"} %llu\n",
            x->name, model, (unsigned long long)x->n, x->name, model, x->sum, x->name, model,
            (unsigned long long)x->n);
    }
    pthread_mutex_unlock(&m->mu);
    if (st) {
        gauge(&b, "cinder:num_requests_running", "Sequences in the running batch.", model, st->n_running);
        gauge(&b, "cinder:num_requests_waiting", "Sequences waiting for admission.", model, st->n_waiting);
        gauge(&b, "cinder:num_requests_open", "Requests submitted and not finished.", model, st->n_requests);
        gauge(&b, "cinder:kv_blocks_used", "KV cache blocks in use.", model, (double)st->kv_blocks_used);
        gauge(&b, "cinder:kv_blocks_total", "KV cache blocks in the pool.", model, (double)st->kv_blocks_total);
        gauge(&b, "cinder:kv_blocks_cached", "Unreferenced blocks kept by the prefix cache.", model,
              (double)st->kv_blocks_cached);
        gauge(&b, "cinder:kv_cache_usage_perc", "Fraction of KV blocks in use.", model,
              st->kv_blocks_total ? (double)st->kv_blocks_used / (double)st->kv_blocks_total : 0.0);
        counter(&b, "cinder:prefix_cache_queries_total", "Full prompt blocks looked up in the prefix cache.", model,
                (uint64_t)st->prefix_queried_blocks);
        counter(&b, "cinder:prefix_cache_hits_total", "Of them, found cached.", model,
                (uint64_t)st->prefix_hit_blocks);
        counter(&b, "cinder:num_preemptions_total", "Sequences preempted for KV space.", model,
                (uint64_t)st->n_preemptions);
        counter(&b, "cinder:engine_steps_total", "Forward passes run by the engine.", model, (uint64_t)st->n_steps);
        counter(&b, "cinder:spec_draft_tokens_total", "Speculative guesses checked (n-gram lookup).", model,
                (uint64_t)st->n_drafted);
        counter(&b, "cinder:spec_accepted_tokens_total", "Of them, confirmed by the model.", model,
                (uint64_t)st->n_accepted);
        counter(&b, "cinder:spec_steps_total", "Decode rows that carried guesses.", model,
                (uint64_t)st->n_spec_steps);
    }
    if (gs) {
        counter(&b, "cinder:grammar_cache_hits_total", "Structured-output grammars found compiled in the cache.",
                model, gs->hits);
        counter(&b, "cinder:grammar_cache_misses_total", "Structured-output grammars compiled (not in the cache).",
                model, gs->misses);
        counter(&b, "cinder:grammar_compile_errors_total", "Grammars that failed to compile (400s).", model,
                gs->errors);
        counter(&b, "cinder:grammar_cache_evictions_total", "Compiled grammars evicted from the cache.", model,
                gs->evictions);
        gauge(&b, "cinder:grammar_cache_entries", "Compiled grammars in the cache.", model, (double)gs->n_entries);
        put(&b, "# HELP cinder:grammar_compile_seconds Time spent compiling grammars.\n"
                "# TYPE cinder:grammar_compile_seconds summary\n"
                "cinder:grammar_compile_seconds_sum{model_name=\"%s\"} %.17g\n"
                "cinder:grammar_compile_seconds_count{model_name=\"%s\"} %llu\n",
            model, gs->compile_s_sum, model, (unsigned long long)gs->n_compiles);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
