/* test_metrics.c — the server's Prometheus exposition (src/serve/metrics.c) with one
 * series per model.
 *
 * Truth: the text exposition format 0.0.4 (each family's HELP and TYPE once, before all
 * its samples; label values with \\, " and newline escaped), and the counts fed in. The
 * format as a whole is also parsed by prometheus_client in tests/py/test_serve*.py. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "serve/metrics.h"

static int count(const char *text, const char *needle) {
    int k = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) k++;
    return k;
}

Test(metrics, one_series_per_model_and_families_once) {
    cn_metrics *m = cn_metrics_new();
    cr_assert(m);
    cn_metrics_series *a = cn_metrics_series_get(m, "a"), *b = cn_metrics_series_get(m, "b");
    cr_assert(a && b && a != b);
    cr_assert_eq(cn_metrics_series_get(m, "a"), a, "the same name is the same series");
    cn_metrics_series *server = cn_metrics_series_get(m, "");
    cn_metrics_request(m, a, "/v1/chat/completions", 200);
    cn_metrics_request(m, a, "/v1/chat/completions", 200);
    cn_metrics_request(m, b, "/v1/completions", 500);
    cn_metrics_request(m, server, "/health", 200);
    cn_metrics_request(m, NULL, "/health", 200); /* no series (no memory for it): dropped */
    cn_gen_timings t = {.n_prompt_tokens = 5, .n_generated_tokens = 3, .ttft_ms = 20};
    cn_metrics_finish(m, a, &t, CN_FINISH_LENGTH);
    cn_metrics_model_load(m, a, 0.5, true);
    cn_metrics_model_load(m, b, 0.0, false);
    cn_metrics_model_unload(m, a);
    cn_engine_stats st = {.kv_blocks_total = 8, .kv_blocks_used = 2};
    const cn_metrics_model models[2] = {{a, true, &st}, {b, false, NULL}};
    char *text = cn_metrics_render(m, models, 2, true, NULL, "");
    cr_assert(text);
    cr_assert_eq(count(text, "# TYPE cinder:prompt_tokens_total counter"), 1);
    cr_assert_eq(count(text, "# TYPE cinder:time_to_first_token_seconds histogram"), 1);
    cr_assert(strstr(
        text, "cinder:http_requests_total{model_name=\"a\",endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    cr_assert(
        strstr(text, "cinder:http_requests_total{model_name=\"b\",endpoint=\"/v1/completions\",status=\"500\"} 1\n"));
    cr_assert(strstr(text, "cinder:http_requests_total{model_name=\"\",endpoint=\"/health\",status=\"200\"} 1\n"));
    cr_assert(strstr(text, "cinder:prompt_tokens_total{model_name=\"a\"} 5\n"));
    cr_assert(strstr(text, "cinder:prompt_tokens_total{model_name=\"b\"} 0\n"));
    cr_assert(!strstr(text, "cinder:prompt_tokens_total{model_name=\"\"}"), "the server's series has requests only");
    cr_assert(strstr(text, "cinder:models_loaded 1\n"));
    cr_assert(strstr(text, "cinder:model_loaded{model_name=\"a\"} 1\n"));
    cr_assert(strstr(text, "cinder:model_loaded{model_name=\"b\"} 0\n"));
    cr_assert(strstr(text, "cinder:model_loads_total{model_name=\"a\"} 1\n"));
    cr_assert(strstr(text, "cinder:model_load_failures_total{model_name=\"b\"} 1\n"));
    cr_assert(strstr(text, "cinder:model_unloads_total{model_name=\"a\"} 1\n"));
    cr_assert(strstr(text, "cinder:kv_blocks_total{model_name=\"a\"} 8\n"));
    cr_assert(!strstr(text, "cinder:kv_blocks_total{model_name=\"b\"}"), "no engine gauges for a model not loaded");
    free(text);
    /* one model: no load families */
    text = cn_metrics_render(m, models, 1, false, NULL, "a");
    cr_assert(text && !strstr(text, "cinder:models_loaded") && !strstr(text, "model_loads_total"));
    free(text);
    cn_metrics_free(m);
}

Test(metrics, label_values_are_escaped) {
    cn_metrics *m = cn_metrics_new();
    cn_metrics_series *x = cn_metrics_series_get(m, "we\"ird\\na\nme");
    cr_assert(x);
    const cn_metrics_model one = {x, false, NULL};
    char *text = cn_metrics_render(m, &one, 1, true, NULL, "");
    cr_assert(text);
    cr_assert(strstr(text, "cinder:model_loaded{model_name=\"we\\\"ird\\\\na\\nme\"} 0\n"), "%s", text);
    free(text);
    cn_metrics_free(m);
}
