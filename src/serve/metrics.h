/* metrics.h — the server's Prometheus metrics: counters, latency histograms (vLLM's set:
 * time to first token, inter-token latency, end-to-end, queue, prefill, decode) and the
 * engine's gauges, rendered in the text exposition format. Thread-safe (one mutex). */
#ifndef CN_SERVE_METRICS_H
#define CN_SERVE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "cinder.h"
#include "serve/gcache.h"

typedef struct cn_metrics cn_metrics;

cn_metrics *cn_metrics_new(void); /* NULL on no memory */
void cn_metrics_free(cn_metrics *m);

/* One HTTP answer: endpoint ("/v1/chat/completions", or "other") and status code. */
void cn_metrics_request(cn_metrics *m, const char *endpoint, int status);
/* One finished completion: its timings and finish reason. */
void cn_metrics_finish(cn_metrics *m, const cn_gen_timings *t, cn_finish_reason r);
/* One inter-token gap, in seconds. */
void cn_metrics_itl(cn_metrics *m, double s);
/* A client that went away before its request finished. */
void cn_metrics_disconnect(cn_metrics *m);

/* The whole exposition; caller frees. stats may be NULL (engine not loaded yet); grammars
 * (the compiled-grammar cache's counters) may be NULL (none shown). */
char *cn_metrics_render(cn_metrics *m, const cn_engine_stats *stats, const gcache_stats *grammars, const char *model);

#endif
