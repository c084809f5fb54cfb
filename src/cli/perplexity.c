/* perplexity.c — `cinder perplexity`: the quality cost of a choice, measured.
 *
 * Runs a text through the model in chunks of --ctx tokens (each chunk a fresh sequence
 * starting with BOS when the model uses one) and reports perplexity over the second half
 * of every chunk (the first half only gives context, as llama.cpp's perplexity tool
 * does). With --kv-type T it also runs the same chunks with an F16 KV cache and reports
 * the next-token KL divergence KL(P_f16 ‖ P_T) at every scored position and how often
 * the top token agrees: the cost of storing the cache in T, on a fixed text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"

typedef struct {
    cn_type type;
    const char *name;
} kv_choice;

static int parse_kv_type(void *dst, const char *v, const char *cmd, const char *name) {
    kv_choice *kv = dst;
    (void)name;
    kv->name = v;
    if (!strcmp(v, "f16")) kv->type = CN_TYPE_F16;
    else if (!strcmp(v, "f32")) kv->type = CN_TYPE_F32;
    else if (!strcmp(v, "q8_0")) kv->type = CN_TYPE_Q8_0;
    else {
        cn_cli_errorf("%s: --kv-type must be f16, f32 or q8_0, not '%s'", cmd, v);
        return -1;
    }
    return 0;
}

/* log-softmax of one row into out (double, for sums over many positions). */
static void log_softmax(const float *x, int32_t n, double *out) {
    double mx = x[0];
    for (int32_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    double lse = mx + log(s);
    for (int32_t i = 0; i < n; i++) out[i] = (double)x[i] - lse;
}

/* Logits (n - from, n_vocab) of rows [from, n) of one chunk of tokens, run as sequence 0
 * of c from an empty cache, in batches of at most the batch's capacity: only the rows
 * that are scored ask for logits, so the LM head runs for them alone. */
static int chunk_logits(cn_context *c, cn_batch *b, const int32_t *tok, int32_t n, int32_t from, float *logits) {
    const size_t V = (size_t)cn_context_n_vocab(c);
    cn_error err;
    cn_status st = cn_context_seq_rm(c, 0, 0, &err);
    for (int32_t i0 = 0; i0 < n && st == CN_STATUS_OK; i0 += b->cap) {
        cn_batch_clear(b);
        for (int32_t i = i0; i < n && i < i0 + b->cap; i++) cn_batch_add(b, tok[i], i, 0, i >= from);
        if ((st = cn_context_decode(c, b, &err)) != CN_STATUS_OK) break;
        const int32_t first = i0 > from ? i0 : from;
        for (int32_t r = 0; r < cn_batch_n_logits(b); r++)
            memcpy(logits + (size_t)(first - from + r) * V, cn_context_logits_row(c, r), V * sizeof *logits);
    }
    if (st != CN_STATUS_OK) cn_cli_errorf("perplexity: %s", err.msg);
    return st != CN_STATUS_OK;
}

int cn_cli_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int32_t n_ctx = 256, n_threads = 0;
    int32_t max_chunks = -1;
    kv_choice kvc = {CN_TYPE_F16, "f16"};
    const cli_flag flags[] = {
        CLI_F_MODEL(&model),
        CLI_F_STR("--file", "-f", &file, "PATH", "the text (UTF-8)"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &n_ctx, 8, 65536, "N", "tokens per chunk (default 256)"),
        CLI_F_NUM("--chunks", NULL, CLI_INT, &max_chunks, 1, INT32_MAX, "N", "most chunks to score (default: all)"),
        CLI_F_THREADS(&n_threads),
        CLI_F_CUSTOM("--kv-type", NULL, &kvc, parse_kv_type, "T",
                     "f16 (default), f32 or q8_0; other than f16 also reports\nthe KL divergence from the f16 cache at each position"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int fst = cli_flags_parse("perplexity",
                                    "usage: cinder perplexity [-m MODEL] -f TEXT_FILE [options]\n"
                                    "  perplexity of the model over the text, in chunks of --ctx tokens\n",
                                    groups, 1, argc, argv, NULL, 0, &n_pos);
    if (fst) return CLI_FLAGS_EXIT(fst);
    if (!file) {
        cn_cli_errorf("perplexity: -f TEXT_FILE is required (see --help)");
        return 2;
    }
    const bool compare = kvc.type != CN_TYPE_F16;
    const int n_runs = compare ? 2 : 1; /* run 0: the f16 reference; run 1: --kv-type */

    size_t n_text = 0;
    char *text = cn_cli_read_file(file, &n_text);
    if (!text) return 1;

    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_context *ctx[2] = {NULL, NULL};
    cn_batch b = {0};
    int32_t *tok = NULL, *chunk = NULL;
    size_t n_tok = 0;
    float *lg[2] = {NULL, NULL};   /* (n_ctx, n_vocab) per run */
    double *lp[2] = {NULL, NULL}; /* (n_vocab) log-probabilities at one position */
    char path[4096];
    if (!(model = cli_model_path("perplexity", model, path, sizeof path))) goto done;
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx < 128 ? n_ctx : 128;
    cn_status st = cn_cli_model_load(model, &m, &err);
    for (int k = 0; k < n_runs && st == CN_STATUS_OK; k++) {
        if (k) cp.kv_type = kvc.type;
        st = cn_context_create(m, &cp, &ctx[k], &err);
    }
    if (st == CN_STATUS_OK) st = cn_batch_init(&b, cp.n_batch, &err);
    const cn_tokenizer *tk = ctx[0] ? cn_context_tokenizer(ctx[0]) : NULL;
    if (st == CN_STATUS_OK) st = cn_tokenize_alloc(tk, text, n_text, true, true, &tok, &n_tok, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        goto done;
    }
    const int32_t bos = cn_tokenizer_bos(tk);
    const bool with_bos = cn_tokenizer_add_bos(tk) && bos >= 0;
    /* Each chunk: BOS (if the model uses one) + (n_ctx - 1) text tokens. */
    const int32_t body = n_ctx - (with_bos ? 1 : 0);
    const int32_t first = with_bos ? 1 : 0; /* text tokens start after the tokenizer's BOS */
    int64_t n_chunks = ((int64_t)n_tok - first) / body;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        cn_cli_errorf("perplexity: the text has %zu tokens, fewer than one chunk of %d", n_tok, n_ctx);
        goto done;
    }
    const int32_t n_vocab = cn_context_n_vocab(ctx[0]);
    const size_t V = (size_t)n_vocab;
    bool oom = !(chunk = malloc((size_t)n_ctx * sizeof *chunk));
    for (int k = 0; k < n_runs; k++) {
        lg[k] = malloc((size_t)(n_ctx - n_ctx / 2) * V * sizeof *lg[k]);
        lp[k] = malloc(V * sizeof *lp[k]);
        oom |= !lg[k] || !lp[k];
    }
    if (oom) {
        cn_cli_errorf("perplexity: out of memory for %d × %zu logits", n_ctx, V);
        goto done;
    }

    fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %d, scoring the second half of each\n", n_tok,
            (long long)n_chunks, n_ctx);
    double nll[2] = {0, 0}, kl_sum = 0, kl_max = 0;
    int64_t n_scored = 0, n_agree = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        int32_t k = 0;
        if (with_bos) chunk[k++] = bos;
        memcpy(chunk + k, tok + first + c * body, (size_t)body * sizeof *chunk);
        for (int k = 0; k < n_runs; k++)
            if (chunk_logits(ctx[k], &b, chunk, n_ctx, n_ctx / 2, lg[k])) goto done;
        for (int32_t i = n_ctx / 2; i < n_ctx - 1; i++) {
            const size_t row = (size_t)(i - n_ctx / 2) * V;
            for (int k = 0; k < n_runs; k++) {
                log_softmax(lg[k] + row, n_vocab, lp[k]);
                nll[k] -= lp[k][chunk[i + 1]];
            }
            if (compare) {
                double kl = 0;
                for (size_t v = 0; v < V; v++) kl += exp(lp[0][v]) * (lp[0][v] - lp[1][v]);
                kl_sum += kl;
                kl_max = kl > kl_max ? kl : kl_max;
                n_agree += cn_cli_argmax(lg[0] + row, n_vocab) == cn_cli_argmax(lg[1] + row, n_vocab);
            }
            n_scored++;
        }
        fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f\n", (long long)c + 1, (long long)n_chunks,
                exp(nll[0] / (double)n_scored));
    }
    printf("scored positions: %lld\n", (long long)n_scored);
    printf("perplexity (f16 KV): %.4f\n", exp(nll[0] / (double)n_scored));
    if (compare) {
        printf("perplexity (%s KV): %.4f\n", kvc.name, exp(nll[1] / (double)n_scored));
        printf("KL(f16 KV || %s KV): mean %.3e, max %.3e nats\n", kvc.name, kl_sum / (double)n_scored, kl_max);
        printf("top-1 agreement: %.2f%% (%lld/%lld)\n", 100.0 * (double)n_agree / (double)n_scored,
               (long long)n_agree, (long long)n_scored);
    }
    rc = 0;
done:
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        free(lp[k]);
        cn_context_free(ctx[k]);
    }
    free(chunk);
    free(tok);
    free(text);
    cn_batch_free(&b);
    cn_model_free(m);
    return rc;
}
