/* metrics.h — the server's Prometheus metrics: counters, latency histograms (vLLM's set:
 * time to first token, inter-token latency, end-to-end, queue, prefill, decode) and the
 * engine's gauges, rendered in the text exposition format, every sample labelled with
 * its model (model_name). A server with several models keeps one series per model, and
 * counts their loads and unloads. Thread-safe (one mutex). */
#ifndef CN_SERVE_METRICS_H
#define CN_SERVE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "cinder.h"
#include "serve/gcache.h"

typedef struct cn_metrics cn_metrics;
/* One model's samples. Lives as long as its cn_metrics. */
typedef struct cn_metrics_series cn_metrics_series;

cn_metrics *cn_metrics_new(void); /* NULL on no memory */
void cn_metrics_free(cn_metrics *m);

/* The series of model (made on first use; the name is copied); NULL on no memory (then
 * updates to it are dropped: every update below accepts NULL). */
cn_metrics_series *cn_metrics_series_get(cn_metrics *m, const char *model);

/* One HTTP answer: endpoint ("/v1/chat/completions", or "other") and status code. */
void cn_metrics_request(cn_metrics *m, cn_metrics_series *ms, const char *endpoint, int status);
/* One finished completion: its timings and finish reason. */
void cn_metrics_finish(cn_metrics *m, cn_metrics_series *ms, const cn_gen_timings *t, cn_finish_reason r);
/* One inter-token gap, in seconds. */
void cn_metrics_itl(cn_metrics *m, cn_metrics_series *ms, double s);
/* A client that went away before its request finished. */
void cn_metrics_disconnect(cn_metrics *m, cn_metrics_series *ms);
/* A load of the model finished (ok or failed) after seconds; an unload. */
void cn_metrics_model_load(cn_metrics *m, cn_metrics_series *ms, double seconds, bool ok);
void cn_metrics_model_unload(cn_metrics *m, cn_metrics_series *ms);

/* What the render shows of one model besides its counters. */
typedef struct {
    cn_metrics_series *ms;
    bool loaded;
    const cn_engine_stats *stats; /* NULL: not loaded (no engine gauges) */
} cn_metrics_model;

/* The whole exposition; caller frees. models[0..n): the served models (their engine
 * gauges). multi: a server of several models (the load / unload families are shown).
 * grammars (the compiled-grammar cache's counters, labelled server_label) may be NULL.
 * Series never shown in models (the server's own requests, not routed to a model) appear
 * in the HTTP request counts only. */
char *cn_metrics_render(cn_metrics *m, const cn_metrics_model *models, int n, bool multi, const gcache_stats *grammars,
                        const char *server_label);

#endif
