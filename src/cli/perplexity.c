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

#include "cli.h"
#include "genopts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cinder perplexity [-m MODEL] -f TEXT_FILE [options]\n"
            "  perplexity of the model over the text, in chunks of --ctx tokens\n"
            "  -m, --model PATH     GGUF model (default: the default model)\n"
            "  -f, --file PATH      the text (UTF-8)\n"
            "  -c, --ctx N          tokens per chunk (default 256, at least 8)\n"
            "  --chunks N           most chunks to score (default: all)\n"
            "  -t, --threads N      threads (default: all CPUs)\n"
            "  --kv-type T          f16 (default), f32 or q8_0; other than f16 also reports\n"
            "                       the KL divergence from the f16 cache at each position\n");
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

/* Logits (n, n_vocab) for one chunk of tokens, run as one sequence through a fresh KV
 * cache of the given type, in batches of at most n_batch rows. */
static int chunk_logits(cli_engine *e, cn_kv *kv, const int32_t *tok, int32_t n, int32_t n_batch,
                        float *logits) {
    cn_batch b;
    cn_error err;
    if (cn_batch_init(&b, n_batch, &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        return 1;
    }
    cn_kv_seq_free(kv, 0);
    int rc = 0;
    for (int32_t i0 = 0; i0 < n && !rc; i0 += n_batch) {
        cn_batch_clear(&b);
        int32_t i1 = CN_MIN(n, i0 + n_batch);
        for (int32_t i = i0; i < i1; i++) cn_batch_add(&b, tok[i], i, 0, true);
        if (cn_forward(e->model, e->ctx, &b, kv, logits + (size_t)i0 * e->n_vocab, &err) != CN_STATUS_OK) {
            cn_cli_errorf("perplexity: %s", err.msg);
            rc = 1;
        }
    }
    cn_batch_free(&b);
    return rc;
}

static int make_kv(const cli_engine *e, cn_type type, int32_t n_ctx, cn_kv **out) {
    cn_kv_params kp = cn_model_kv_params(e->model);
    kp.type = type;
    kp.max_seqs = 1;
    kp.n_blocks = (n_ctx + kp.block_tokens - 1) / kp.block_tokens + 1;
    cn_error err;
    if (cn_kv_create(&kp, out, &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        return 1;
    }
    return 0;
}

int cn_cli_perplexity(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "perplexity");
    const char *file = NULL, *kv_name = "f16";
    long n_ctx = 256, max_chunks = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool has_val = i + 1 < argc;
        char *end = NULL;
        if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) o.model = argv[++i];
        else if (!strcmp(a, "--kv-type") && has_val) kv_name = argv[++i];
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx")) && has_val) {
            n_ctx = strtol(argv[++i], &end, 10);
            if (*end || n_ctx < 8 || n_ctx > 65536) {
                cn_cli_errorf("perplexity: --ctx must be an integer in [8, 65536]");
                return 2;
            }
        } else if (!strcmp(a, "--chunks") && has_val) {
            max_chunks = strtol(argv[++i], &end, 10);
            if (*end || max_chunks < 1) {
                cn_cli_errorf("perplexity: --chunks must be a positive integer");
                return 2;
            }
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has_val) {
            o.n_threads = strtol(argv[++i], &end, 10);
            if (*end || o.n_threads < 1 || o.n_threads > 1024) {
                cn_cli_errorf("perplexity: --threads must be an integer in [1, 1024]");
                return 2;
            }
        } else {
            cn_cli_errorf("perplexity: unknown or incomplete option '%s' (see --help)", a);
            return 2;
        }
    }
    if (!file) {
        cn_cli_errorf("perplexity: -f TEXT_FILE is required (see --help)");
        return 2;
    }
    cn_type kv_type;
    if (!strcmp(kv_name, "f16")) kv_type = CN_TYPE_F16;
    else if (!strcmp(kv_name, "f32")) kv_type = CN_TYPE_F32;
    else if (!strcmp(kv_name, "q8_0")) kv_type = CN_TYPE_Q8_0;
    else {
        cn_cli_errorf("perplexity: --kv-type must be f16, f32 or q8_0, not '%s'", kv_name);
        return 2;
    }
    const bool compare = kv_type != CN_TYPE_F16;

    size_t n_text = 0;
    char *text = cn_cli_read_file(file, &n_text);
    if (!text) return 1;

    int rc = 1;
    cli_engine e;
    memset(&e, 0, sizeof e);
    int32_t *tok = NULL;
    float *lg_ref = NULL, *lg = NULL;
    double *lp_ref = NULL, *lp = NULL;
    cn_kv *kv_ref = NULL, *kv = NULL;
    o.n_ctx = n_ctx;
    if (cli_engine_load(&e, &o)) goto done;
    if (n_ctx > e.n_ctx) {
        cn_cli_errorf("perplexity: --ctx %ld exceeds the model's context %d", n_ctx, e.n_ctx);
        goto done;
    }
    const int32_t n_batch = (int32_t)CN_MIN(n_ctx, 128);
    if (cli_engine_start(&e, &o, n_batch, 1, 1)) goto done;

    int32_t n_tok = 0;
    tok = cli_tokenize(&e, text, &n_tok);
    if (!tok) goto done;
    const int32_t bos = cn_tokenizer_bos(e.tok);
    const bool with_bos = cn_tokenizer_add_bos(e.tok) && bos >= 0;
    /* Each chunk: BOS (if the model uses one) + (n_ctx - 1) text tokens. */
    const int32_t body = (int32_t)n_ctx - (with_bos ? 1 : 0);
    const int32_t first = with_bos ? 1 : 0; /* text tokens start after cli_tokenize's BOS */
    int64_t n_chunks = (n_tok - first) / body;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        cn_cli_errorf("perplexity: the text has %d tokens, fewer than one chunk of %ld", n_tok, n_ctx);
        goto done;
    }
    const size_t V = (size_t)e.n_vocab;
    lg_ref = malloc((size_t)n_ctx * V * sizeof *lg_ref);
    lp_ref = malloc(V * sizeof *lp_ref);
    if (compare) {
        lg = malloc((size_t)n_ctx * V * sizeof *lg);
        lp = malloc(V * sizeof *lp);
    }
    if (!lg_ref || !lp_ref || (compare && (!lg || !lp))) {
        cn_cli_errorf("perplexity: out of memory for %ld × %zu logits", n_ctx, V);
        goto done;
    }
    if (make_kv(&e, CN_TYPE_F16, (int32_t)n_ctx, &kv_ref) || (compare && make_kv(&e, kv_type, (int32_t)n_ctx, &kv)))
        goto done;

    fprintf(stderr, "perplexity: %d tokens, %lld chunks of %ld, scoring the second half of each\n", n_tok,
            (long long)n_chunks, n_ctx);
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    if (!chunk) goto done;
    double nll_ref = 0, nll = 0, kl_sum = 0, kl_max = 0;
    int64_t n_scored = 0, n_agree = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        int32_t k = 0;
        if (with_bos) chunk[k++] = bos;
        memcpy(chunk + k, tok + first + c * body, (size_t)body * sizeof *chunk);
        if (chunk_logits(&e, kv_ref, chunk, (int32_t)n_ctx, n_batch, lg_ref)) {
            free(chunk);
            goto done;
        }
        if (compare && chunk_logits(&e, kv, chunk, (int32_t)n_ctx, n_batch, lg)) {
            free(chunk);
            goto done;
        }
        for (int32_t i = (int32_t)n_ctx / 2; i < n_ctx - 1; i++) {
            const float *r = lg_ref + (size_t)i * V;
            log_softmax(r, e.n_vocab, lp_ref);
            nll_ref -= lp_ref[chunk[i + 1]];
            if (compare) {
                const float *q = lg + (size_t)i * V;
                log_softmax(q, e.n_vocab, lp);
                nll -= lp[chunk[i + 1]];
                double kl = 0;
                for (size_t v = 0; v < V; v++) kl += exp(lp_ref[v]) * (lp_ref[v] - lp[v]);
                kl_sum += kl;
                kl_max = kl > kl_max ? kl : kl_max;
                n_agree += cn_argmax(r, e.n_vocab) == cn_argmax(q, e.n_vocab);
            }
            n_scored++;
        }
        fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f\n", (long long)c + 1, (long long)n_chunks,
                exp(nll_ref / (double)n_scored));
    }
    free(chunk);
    printf("scored positions: %lld\n", (long long)n_scored);
    printf("perplexity (f16 KV): %.4f\n", exp(nll_ref / (double)n_scored));
    if (compare) {
        printf("perplexity (%s KV): %.4f\n", kv_name, exp(nll / (double)n_scored));
        printf("KL(f16 KV || %s KV): mean %.3e, max %.3e nats\n", kv_name, kl_sum / (double)n_scored, kl_max);
        printf("top-1 agreement: %.2f%% (%lld/%lld)\n", 100.0 * (double)n_agree / (double)n_scored,
               (long long)n_agree, (long long)n_scored);
    }
    rc = 0;
done:
    cn_kv_free(kv_ref);
    cn_kv_free(kv);
    free(lg_ref);
    free(lg);
    free(lp_ref);
    free(lp);
    free(tok);
    free(text);
    cli_engine_close(&e);
    return rc;
}
