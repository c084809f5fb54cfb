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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

#define N_ENDPOINTS 15
#define N_STATUS 16
#define MAX_BUCKETS 24

static const char *const ENDPOINTS[N_ENDPOINTS] = {"/v1/chat/completions",
                                                   "/v1/completions",
                                                   "/v1/messages",
                                                   "/v1/messages/count_tokens",
                                                   "/v1/responses",
                                                   "/v1/models",
                                                   "/health",
                                                   "/metrics",
                                                   "/tokenize",
                                                   "/detokenize",
                                                   "/",
                                                   "/infill",
                                                   "/v1/embeddings",
                                                   "other",
                                                   NULL};

typedef struct {
    const char *name, *help;
    int n_buckets;
    const double *le;
    uint64_t count[MAX_BUCKETS + 1]; /* cumulative is computed on render */
    uint64_t n;
    double sum;
} histogram;

static const double LAT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double ITL_BUCKETS[] = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                     0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5};

enum { H_TTFT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, N_HIST };

struct cn_metrics_series {
    char *model;
    char *label;                              /* model as a label value (\\, \" and \n escaped) */
    uint64_t requests[N_ENDPOINTS][N_STATUS]; /* status by the index in status_code */
    uint64_t prompt_tokens, generation_tokens, cached_tokens;
    uint64_t finished[4]; /* by cn_finish_reason */
    uint64_t disconnects;
    uint64_t loads, load_failures, unloads;
    double load_s_sum;
    histogram h[N_HIST];
};

struct cn_metrics {
    pthread_mutex_t mu;
    int status_code[N_STATUS];
    cn_metrics_series **series;
    int n_series;
    size_t cap_series;
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
    return m;
}

void cn_metrics_free(cn_metrics *m) {
    if (!m) return;
    for (int i = 0; i < m->n_series; i++) {
        free(m->series[i]->model);
        free(m->series[i]->label);
        free(m->series[i]);
    }
    free(m->series);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static cn_metrics_series *series_new(const char *model) {
    cn_metrics_series *x = calloc(1, sizeof *x);
    const size_t n = strlen(model) + 1;
    char *name = x ? malloc(n) : NULL, *label = name ? malloc(2 * n) : NULL;
    if (!label) {
        free(name);
        free(x);
        return NULL;
    }
    memcpy(name, model, n);
    char *o = label;
    for (const char *c = model; *c; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') *o++ = '\\';
        *o++ = *c == '\n' ? 'n' : *c;
    }
    *o = 0;
    x->model = name;
    x->label = label;
    const int nl = (int)(sizeof LAT_BUCKETS / sizeof *LAT_BUCKETS),
              ni = (int)(sizeof ITL_BUCKETS / sizeof *ITL_BUCKETS);
    hist_init(&x->h[H_TTFT], "cinder:time_to_first_token_seconds", "Time from arrival to the first token.", LAT_BUCKETS,
              nl);
    hist_init(&x->h[H_ITL], "cinder:inter_token_latency_seconds", "Time between consecutive tokens.", ITL_BUCKETS, ni);
    hist_init(&x->h[H_E2E], "cinder:e2e_request_latency_seconds", "Time from arrival to finish.", LAT_BUCKETS, nl);
    hist_init(&x->h[H_QUEUE], "cinder:request_queue_time_seconds", "Time from arrival to prefill start.", LAT_BUCKETS,
              nl);
    hist_init(&x->h[H_PREFILL], "cinder:request_prefill_time_seconds", "Time from prefill start to first token.",
              LAT_BUCKETS, nl);
    hist_init(&x->h[H_DECODE], "cinder:request_decode_time_seconds", "Time from first to last token.", LAT_BUCKETS, nl);
    return x;
}

cn_metrics_series *cn_metrics_series_get(cn_metrics *m, const char *model) {
    pthread_mutex_lock(&m->mu);
    cn_metrics_series *x = NULL;
    for (int i = 0; i < m->n_series && !x; i++)
        if (!strcmp(m->series[i]->model, model)) x = m->series[i];
    if (!x && CN_GROW(m->series, m->cap_series, (size_t)m->n_series + 1) && (x = series_new(model)))
        m->series[m->n_series++] = x;
    pthread_mutex_unlock(&m->mu);
    return x;
}

static void observe(histogram *h, double v) {
    int b = 0;
    while (b < h->n_buckets && v > h->le[b]) b++;
    h->count[b]++;
    h->n++;
    h->sum += v;
}

void cn_metrics_request(cn_metrics *m, cn_metrics_series *ms, const char *endpoint, int status) {
    int e = 0;
    while (ENDPOINTS[e] && strcmp(ENDPOINTS[e], endpoint) && strcmp(ENDPOINTS[e], "other")) e++;
    if (!ENDPOINTS[e] || !ms) return;
    pthread_mutex_lock(&m->mu);
    int s = 0;
    while (s < N_STATUS && m->status_code[s] && m->status_code[s] != status) s++;
    if (s < N_STATUS) {
        m->status_code[s] = status;
        ms->requests[e][s]++;
    }
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_finish(cn_metrics *m, cn_metrics_series *ms, const cn_gen_timings *t, cn_finish_reason r) {
    if (!ms) return;
    pthread_mutex_lock(&m->mu);
    ms->prompt_tokens += (uint64_t)t->n_prompt_tokens;
    ms->cached_tokens += (uint64_t)t->n_cached_tokens;
    ms->generation_tokens += (uint64_t)t->n_generated_tokens;
    if ((unsigned)r < 4) ms->finished[r]++;
    if (t->n_generated_tokens > 0) {
        observe(&ms->h[H_TTFT], t->ttft_ms / 1e3);
        observe(&ms->h[H_PREFILL], t->prefill_ms / 1e3);
        observe(&ms->h[H_DECODE], t->decode_ms / 1e3);
    }
    observe(&ms->h[H_QUEUE], t->queue_ms / 1e3);
    observe(&ms->h[H_E2E], t->total_ms / 1e3);
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_itl(cn_metrics *m, cn_metrics_series *ms, double s) {
    if (!ms) return;
    pthread_mutex_lock(&m->mu);
    observe(&ms->h[H_ITL], s);
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_disconnect(cn_metrics *m, cn_metrics_series *ms) {
    if (!ms) return;
    pthread_mutex_lock(&m->mu);
    ms->disconnects++;
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_model_load(cn_metrics *m, cn_metrics_series *ms, double seconds, bool ok) {
    if (!ms) return;
    pthread_mutex_lock(&m->mu);
    if (ok) {
        ms->loads++;
        ms->load_s_sum += seconds;
    } else {
        ms->load_failures++;
    }
    pthread_mutex_unlock(&m->mu);
}

void cn_metrics_model_unload(cn_metrics *m, cn_metrics_series *ms) {
    if (!ms) return;
    pthread_mutex_lock(&m->mu);
    ms->unloads++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

/* The family's header, then one sample per model: value(i) of models[i]. */
#define FAMILY(b, kind, name, help, n, line)                                      \
    do {                                                                          \
        cn_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind); \
        for (int i = 0; i < (n); i++) line;                                       \
    } while (0)

#define COUNTER(b, name, help, models, n, field) \
    FAMILY(b, "counter", name, help, n,          \
           cn_buf_printf(b, "%s{model_name=\"%s\"} %llu\n", name, (models)[i].ms->label, (unsigned long long)(field)))

#define GAUGE(b, name, help, models, n, field) \
    FAMILY(b, "gauge", name, help, n,          \
           cn_buf_printf(b, "%s{model_name=\"%s\"} %.17g\n", name, (models)[i].ms->label, (double)(field)))

char *cn_metrics_render(cn_metrics *m, const cn_metrics_model *all, int n_all, bool multi, const gcache_stats *gs,
                        const char *label) {
    cn_buf b = {0}; /* a write that fails marks it: checked once, at the end */
    /* the models with a series (a series that could not be made has no samples) */
    cn_metrics_model *md = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *md);
    if (!md) return NULL;
    int n = 0;
    for (int i = 0; i < n_all; i++)
        if (all[i].ms) md[n++] = all[i];
    pthread_mutex_lock(&m->mu);
    cn_buf_printf(&b, "# HELP cinder:http_requests_total HTTP requests answered, by endpoint and status.\n"
                      "# TYPE cinder:http_requests_total counter\n");
    for (int x = 0; x < m->n_series; x++)
        for (int e = 0; ENDPOINTS[e]; e++)
            for (int s = 0; s < N_STATUS && m->status_code[s]; s++)
                if (m->series[x]->requests[e][s])
                    cn_buf_printf(&b,
                                  "cinder:http_requests_total{model_name=\"%s\",endpoint=\"%s\",status=\"%d\"} %llu\n",
                                  m->series[x]->label, ENDPOINTS[e], m->status_code[s],
                                  (unsigned long long)m->series[x]->requests[e][s]);
    COUNTER(&b, "cinder:prompt_tokens_total", "Prompt tokens of finished completions.", md, n, md[i].ms->prompt_tokens);
    COUNTER(&b, "cinder:prompt_tokens_cached_total", "Of them, reused from the prefix cache.", md, n,
            md[i].ms->cached_tokens);
    COUNTER(&b, "cinder:generation_tokens_total", "Generated tokens of finished completions.", md, n,
            md[i].ms->generation_tokens);
    cn_buf_printf(&b, "# HELP cinder:request_success_total Finished completions, by finish reason.\n"
                      "# TYPE cinder:request_success_total counter\n");
    static const char *const REASON[4] = {"none", "stop", "length", "cancelled"};
    for (int i = 0; i < n; i++)
        for (int r = 1; r < 4; r++)
            cn_buf_printf(&b, "cinder:request_success_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n",
                          md[i].ms->label, REASON[r], (unsigned long long)md[i].ms->finished[r]);
    COUNTER(&b, "cinder:client_disconnects_total", "Requests whose client went away before they finished.", md, n,
            md[i].ms->disconnects);
    for (int h = 0; h < N_HIST; h++) {
        const histogram *x0 = n ? &md[0].ms->h[h] : NULL;
        if (!x0) break;
        cn_buf_printf(&b, "# HELP %s %s\n# TYPE %s histogram\n", x0->name, x0->help, x0->name);
        for (int i = 0; i < n; i++) {
            const histogram *x = &md[i].ms->h[h];
            const char *model = md[i].ms->label;
            uint64_t cum = 0;
            for (int k = 0; k < x->n_buckets; k++) {
                cum += x->count[k];
                cn_buf_printf(&b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", x->name, model, x->le[k],
                              (unsigned long long)cum);
            }
            cn_buf_printf(&b,
                          "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n%s_sum{model_name=\"%s\"} %.17g\n"
                          "%s_count{model_name=\"%s\"} %llu\n",
                          x->name, model, (unsigned long long)x->n, x->name, model, x->sum, x->name, model,
                          (unsigned long long)x->n);
        }
    }
    if (multi) {
        int n_loaded = 0;
        for (int i = 0; i < n; i++) n_loaded += md[i].loaded;
        cn_buf_printf(&b,
                      "# HELP cinder:models_loaded Models loaded now.\n# TYPE cinder:models_loaded gauge\n"
                      "cinder:models_loaded %d\n",
                      n_loaded);
        GAUGE(&b, "cinder:model_loaded", "1 while the model is loaded.", md, n, md[i].loaded);
        COUNTER(&b, "cinder:model_loads_total", "Loads of the model (on a request for it).", md, n, md[i].ms->loads);
        COUNTER(&b, "cinder:model_load_failures_total", "Loads that failed (a corrupt or unsupported file).", md, n,
                md[i].ms->load_failures);
        COUNTER(&b, "cinder:model_unloads_total", "Unloads of the model (least recently used, idle).", md, n,
                md[i].ms->unloads);
        cn_buf_printf(&b, "# HELP cinder:model_load_seconds Time spent loading models.\n"
                          "# TYPE cinder:model_load_seconds summary\n");
        for (int i = 0; i < n; i++)
            cn_buf_printf(&b,
                          "cinder:model_load_seconds_sum{model_name=\"%s\"} %.17g\n"
                          "cinder:model_load_seconds_count{model_name=\"%s\"} %llu\n",
                          md[i].ms->label, md[i].ms->load_s_sum, md[i].ms->label, (unsigned long long)md[i].ms->loads);
    }
    pthread_mutex_unlock(&m->mu);
    /* engine gauges: the loaded models */
    int k = 0;
    for (int i = 0; i < n; i++)
        if (md[i].stats) md[k++] = md[i];
    if (k) {
#define ST(f) md[i].stats->f
        GAUGE(&b, "cinder:num_requests_running", "Sequences in the running batch.", md, k, ST(n_running));
        GAUGE(&b, "cinder:num_requests_waiting", "Sequences waiting for admission.", md, k, ST(n_waiting));
        GAUGE(&b, "cinder:num_requests_open", "Requests submitted and not finished.", md, k, ST(n_requests));
        GAUGE(&b, "cinder:kv_blocks_used", "KV cache blocks in use.", md, k, ST(kv_blocks_used));
        GAUGE(&b, "cinder:kv_blocks_total", "KV cache blocks in the pool.", md, k, ST(kv_blocks_total));
        GAUGE(&b, "cinder:kv_blocks_cached", "Unreferenced blocks kept by the prefix cache.", md, k,
              ST(kv_blocks_cached));
        GAUGE(&b, "cinder:kv_cache_usage_perc", "Fraction of KV blocks in use.", md, k,
              ST(kv_blocks_total) ? (double)ST(kv_blocks_used) / (double)ST(kv_blocks_total) : 0.0);
        COUNTER(&b, "cinder:prefix_cache_queries_total", "Full prompt blocks looked up in the prefix cache.", md, k,
                ST(prefix_queried_blocks));
        COUNTER(&b, "cinder:prefix_cache_hits_total", "Of them, found cached.", md, k, ST(prefix_hit_blocks));
        COUNTER(&b, "cinder:num_preemptions_total", "Sequences preempted for KV space.", md, k, ST(n_preemptions));
        COUNTER(&b, "cinder:engine_steps_total", "Forward passes run by the engine.", md, k, ST(n_steps));
        COUNTER(&b, "cinder:spec_draft_tokens_total", "Speculative guesses checked (n-gram lookup).", md, k,
                ST(n_drafted));
        COUNTER(&b, "cinder:spec_accepted_tokens_total", "Of them, confirmed by the model.", md, k, ST(n_accepted));
        COUNTER(&b, "cinder:spec_steps_total", "Decode rows that carried guesses.", md, k, ST(n_spec_steps));
#undef ST
    }
    free(md);
    if (gs) {
#define GC(name, help, v)                                                                                             \
    cn_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s{model_name=\"%s\"} %llu\n", name, help, name, name, label, \
                  (unsigned long long)(v))
        GC("cinder:grammar_cache_hits_total", "Structured-output grammars found compiled in the cache.", gs->hits);
        GC("cinder:grammar_cache_misses_total", "Structured-output grammars compiled (not in the cache).", gs->misses);
        GC("cinder:grammar_compile_errors_total", "Grammars that failed to compile (400s).", gs->errors);
        GC("cinder:grammar_cache_evictions_total", "Compiled grammars evicted from the cache.", gs->evictions);
#undef GC
        cn_buf_printf(
            &b,
            "# HELP cinder:grammar_cache_entries Compiled grammars in the cache.\n"
            "# TYPE cinder:grammar_cache_entries gauge\ncinder:grammar_cache_entries{model_name=\"%s\"} %.17g\n",
            label, (double)gs->n_entries);
        cn_buf_printf(&b,
                      "# HELP cinder:grammar_compile_seconds Time spent compiling grammars.\n"
                      "# TYPE cinder:grammar_compile_seconds summary\n"
                      "cinder:grammar_compile_seconds_sum{model_name=\"%s\"} %.17g\n"
                      "cinder:grammar_compile_seconds_count{model_name=\"%s\"} %llu\n",
                      label, gs->compile_s_sum, label, (unsigned long long)gs->n_compiles);
    }
    return cn_buf_take(&b, NULL);
}
