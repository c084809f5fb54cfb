/* run.c — `cinder run`: one prompt, greedy decoding, text streamed to stdout as it is
 * generated, one timing summary on stderr. The prompt is tokenized as the model's
 * metadata says (BOS or not), evaluated as one prefill batch, then each new token is
 * decoded alone through the KV cache. The generation loop (generate_greedy) is kept apart
 * from argument handling so the sampler/stop machinery can replace it later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct {
    int32_t n_prompt, n_gen;
    double t_prefill_ms, t_first_ms; /* prefill alone; start to first token out */
    double *itl_ms;                  /* (n_gen - 1) gaps between generated tokens */
    int32_t n_itl;
} run_timings;

static int argmax(const float *x, int32_t n) {
    int a = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

/* Prefill `prompt`, then greedy-decode up to n_max tokens (stopping at an end-of-generation
 * token or a full context), writing text to out as it becomes final. */
static cn_status generate_greedy(const cn_model *m, cn_ctx *c, cn_kv *kv, const cn_tokenizer *tok,
                                 const int32_t *prompt, int32_t n_prompt, int32_t n_max, FILE *out,
                                 run_timings *tm, cn_error *err) {
    const int32_t V = cn_model_hparams(m)->n_vocab;
    cn_batch b;
    cn_detok *dt = NULL;
    float *logits = malloc((size_t)V * sizeof(float));
    cn_status s = cn_batch_init(&b, n_prompt, err);
    if (s == CN_STATUS_OK && !logits) s = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for logits");
    if (s == CN_STATUS_OK) s = cn_detok_new(tok, false, &dt);
    if (s != CN_STATUS_OK) goto done;

    const double t0 = cn_time_ms();
    for (int32_t i = 0; i < n_prompt; i++) cn_batch_add(&b, prompt[i], i, 0, i == n_prompt - 1);
    if ((s = cn_forward(m, c, &b, kv, logits, err)) != CN_STATUS_OK) goto done;
    tm->t_prefill_ms = cn_time_ms() - t0;
    double t_prev = 0;
    for (int32_t pos = n_prompt; tm->n_gen < n_max && pos < cn_ctx_n_ctx(c); pos++) {
        const int32_t id = argmax(logits, V);
        if (cn_tokenizer_is_eog(tok, id)) break;
        const double now = cn_time_ms();
        if (tm->n_gen == 0) tm->t_first_ms = now - t0;
        else tm->itl_ms[tm->n_itl++] = now - t_prev;
        t_prev = now;
        tm->n_gen++;
        const char *text;
        size_t n_text;
        if ((s = cn_detok_push(dt, id, &text, &n_text)) != CN_STATUS_OK) goto done;
        fwrite(text, 1, n_text, out);
        fflush(out);
        if (tm->n_gen == n_max || pos + 1 >= cn_ctx_n_ctx(c)) break;
        cn_batch_clear(&b);
        cn_batch_add(&b, id, pos, 0, true);
        if ((s = cn_forward(m, c, &b, kv, logits, err)) != CN_STATUS_OK) goto done;
    }
    const char *text;
    size_t n_text;
    if ((s = cn_detok_flush(dt, &text, &n_text)) == CN_STATUS_OK) fwrite(text, 1, n_text, out);
    fputc('\n', out);
    fflush(out);
done:
    cn_detok_free(dt);
    cn_batch_free(&b);
    free(logits);
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_timings(run_timings *tm) {
    double sum = 0;
    for (int32_t i = 0; i < tm->n_itl; i++) sum += tm->itl_ms[i];
    const double mean = tm->n_itl ? sum / tm->n_itl : 0;
    qsort(tm->itl_ms, (size_t)tm->n_itl, sizeof(double), cmp_double);
    const double p90 = tm->n_itl ? tm->itl_ms[(int32_t)(0.9 * (tm->n_itl - 1) + 0.5)] : 0;
    fprintf(stderr,
            "cinder: prompt %d tokens, prefill %.1f tok/s (%.1f ms), time to first token %.1f ms\n"
            "cinder: generated %d tokens, decode %.1f tok/s, inter-token latency mean %.2f ms, p90 %.2f ms\n",
            tm->n_prompt, tm->t_prefill_ms > 0 ? tm->n_prompt * 1000.0 / tm->t_prefill_ms : 0,
            tm->t_prefill_ms, tm->t_first_ms, tm->n_gen, mean > 0 ? 1000.0 / mean : 0, mean, p90);
}

static void usage(FILE *f) {
    fprintf(f, "usage: cinder run -m MODEL -p PROMPT [-n N] [-t THREADS] [-c CONTEXT]\n"
               "  greedy generation of up to N tokens (default 128); text to stdout, timings to stderr\n"
               "  -c: context length (default: the model's, at most 4096)\n");
}

int cn_cli_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    long n_gen = 128, n_threads = sysconf(_SC_NPROCESSORS_ONLN), n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        char *end = NULL;
        if (!strcmp(a, "-m")) model_path = argv[++i];
        else if (!strcmp(a, "-p")) prompt = argv[++i];
        else if (!strcmp(a, "-n")) n_gen = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-t")) n_threads = strtol(argv[++i], &end, 10);
        else if (!strcmp(a, "-c")) n_ctx = strtol(argv[++i], &end, 10);
        else {
            cn_cli_errorf("run: unknown option '%s'", a);
            usage(stderr);
            return 2;
        }
        if (end && (*end || end == argv[i])) {
            cn_cli_errorf("run: option %s wants a number, got '%s'", a, argv[i]);
            return 2;
        }
    }
    if (!model_path || !prompt) {
        usage(stderr);
        return 2;
    }
    if (n_gen < 0 || n_gen > (1 << 24) || n_threads < 1 || n_threads > 1024 || n_ctx < 0 || n_ctx > (1 << 24)) {
        cn_cli_errorf("run: -n, -t or -c out of range");
        return 2;
    }
    if (n_threads > 64) n_threads = 64;

    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    cn_ctx *c = NULL;
    cn_kv *kv = NULL;
    int32_t *ids = NULL;
    run_timings tm = {0};
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    if (cn_model_load(model_path, &mp, &m, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(m), &tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    const cn_hparams *hp = cn_model_hparams(m);
    if (n_ctx == 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;

    size_t n_prompt = 0, len = strlen(prompt);
    if (cn_tokenize(tok, prompt, len, true, true, NULL, 0, &n_prompt, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    if (n_prompt == 0) {
        cn_cli_errorf("run: the prompt is empty (no tokens)");
        goto done;
    }
    if (n_prompt >= (size_t)n_ctx) {
        cn_cli_errorf("run: the prompt is %zu tokens, the context holds %ld (use a shorter prompt or -c)",
                      n_prompt, n_ctx);
        goto done;
    }
    ids = malloc(n_prompt * sizeof *ids);
    size_t n_again = 0;
    if (!ids || cn_tokenize(tok, prompt, len, true, true, ids, n_prompt, &n_again, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", ids ? err.msg : "out of memory");
        goto done;
    }

    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = (n_ctx + kp.block_tokens - 1) / kp.block_tokens;
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = (int32_t)n_threads;
    cp.n_batch_max = (int32_t)n_prompt;
    cp.n_ctx = (int32_t)n_ctx;
    tm.itl_ms = malloc(((size_t)n_gen + 1) * sizeof(double));
    if (!tm.itl_ms || cn_kv_create(&kp, &kv, &err) != CN_STATUS_OK ||
        cn_ctx_create(m, &cp, &c, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", tm.itl_ms ? err.msg : "out of memory");
        goto done;
    }
    tm.n_prompt = (int32_t)n_prompt;
    if (generate_greedy(m, c, kv, tok, ids, (int32_t)n_prompt, (int32_t)n_gen, stdout, &tm, &err) !=
        CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    print_timings(&tm);
    rc = 0;
done:
    free(tm.itl_ms);
    free(ids);
    cn_ctx_free(c);
    cn_kv_free(kv);
    cn_tokenizer_free(tok);
    cn_model_free(m);
    return rc;
}
