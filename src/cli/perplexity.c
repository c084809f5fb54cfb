/* perplexity.c — `cinder perplexity`: the quality cost of a choice, measured.
 *
 * Runs a text through the model in chunks of --ctx tokens (each chunk a fresh sequence
 * starting with BOS when the model uses one) and reports perplexity over the second half
 * of every chunk (the first half only gives context, as llama.cpp's perplexity tool
 * does). With --kv-type T it also runs the same chunks with an F16 KV cache and reports
 * the next-token KL divergence KL(P_f16 ‖ P_T) at every scored position and how often
 * the top token agrees: the cost of storing the cache in T, on a fixed text.
 *
 * --save-logits FILE and --kl-base FILE speak llama-perplexity's log-probability file
 * (logits_file.h): the text is chunked as llama-perplexity chunks it (the tokens with BOS,
 * cut every --ctx tokens, each chunk's first token replaced by BOS), --save-logits writes
 * every scored position's log-probabilities, and --kl-base reads such a file (written by
 * cinder or by llama-perplexity --kl-divergence-base), runs the model on the very tokens
 * stored in it and reports PPL, KL divergence, Δp and top-1 agreement under
 * llama-perplexity's labels. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"
#include "logits_file.h"

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

/* The logits of chunk c of llama-perplexity's chunking (tokens[c * n_ctx ...], first
 * token BOS), rows [n_ctx / 2, n_ctx) into lg. */
static int llama_chunk(cn_context *ctx, cn_batch *b, const int32_t *tokens, int32_t n_ctx, int64_t c, int32_t bos,
                       int32_t *chunk, float *lg) {
    memcpy(chunk, tokens + (size_t)c * (size_t)n_ctx, (size_t)n_ctx * sizeof *chunk);
    if (bos >= 0) chunk[0] = bos;
    return chunk_logits(ctx, b, chunk, n_ctx, n_ctx / 2, lg);
}

/* --save-logits / --kl-base (exactly one of them set). */
static int perplexity_llama_file(const char *model, const char *file, const char *save_path, const char *base_path,
                                 int32_t n_ctx, int32_t max_chunks, int32_t n_threads, cn_type kv_type) {
    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_context *ctx = NULL;
    cn_batch b = {0};
    char *text = NULL;
    int32_t *tokens = NULL, *chunk = NULL;
    float *lg = NULL, *kld = NULL, *pdiff = NULL;
    uint16_t *rows = NULL;
    FILE *io = NULL;
    logits_header h = {0};
    bool wrote = false;
    size_t n_tok = 0;
    if (base_path) {
        if (!(io = fopen(base_path, "rb"))) {
            cn_cli_errorf("perplexity: cannot open %s: %s", base_path, strerror(errno));
            return 1;
        }
        if (!logits_file_read_header(io, base_path, &h, &tokens)) goto done;
        n_ctx = (int32_t)h.n_ctx;
    } else {
        if (!(text = cn_cli_read_file(file, &n_tok))) return 1;
    }
    cn_status st = cn_cli_model_load(model, &m, &err);
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx < 512 ? n_ctx : 512;
    cp.kv_type = kv_type;
    if (st == CN_STATUS_OK) st = cn_context_create(m, &cp, &ctx, &err);
    if (st == CN_STATUS_OK) st = cn_batch_init(&b, cp.n_batch, &err);
    const cn_tokenizer *tk = ctx ? cn_context_tokenizer(ctx) : NULL;
    if (st == CN_STATUS_OK && text) st = cn_tokenize_alloc(tk, text, n_tok, true, true, &tokens, &n_tok, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        goto done;
    }
    const int32_t n_vocab = cn_context_n_vocab(ctx);
    const int32_t bos = cn_tokenizer_add_bos(tk) ? cn_tokenizer_bos(tk) : -1;
    if (base_path && h.n_vocab != n_vocab) {
        cn_cli_errorf("perplexity: %s was made with a vocabulary of %d tokens, the model has %d", base_path, h.n_vocab,
                      n_vocab);
        goto done;
    }
    if (!base_path) {
        h.n_ctx = (uint32_t)n_ctx;
        h.n_vocab = n_vocab;
        const int64_t n_all = (int64_t)n_tok / n_ctx;
        h.n_chunk = n_all > INT32_MAX ? INT32_MAX : (int32_t)n_all;
    }
    int64_t n_chunks = h.n_chunk;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        cn_cli_errorf("perplexity: the text has %zu tokens, fewer than one chunk of %d", n_tok, n_ctx);
        goto done;
    }
    if (!base_path) {
        h.n_chunk = (int32_t)n_chunks;
        if (!(io = fopen(save_path, "wb")) || !logits_file_write_header(io, &h, tokens)) {
            cn_cli_errorf("perplexity: cannot write %s: %s", save_path, strerror(errno));
            goto done;
        }
        wrote = true;
    }
    const int32_t first = n_ctx / 2, n_rows = n_ctx - 1 - first;
    const size_t nv = logits_row_len(n_vocab), V = (size_t)n_vocab;
    chunk = malloc((size_t)n_ctx * sizeof *chunk);
    lg = malloc((size_t)(n_ctx - first) * V * sizeof *lg);
    rows = malloc((size_t)n_rows * nv * sizeof *rows);
    kld = malloc((size_t)n_chunks * (size_t)n_rows * sizeof *kld);
    pdiff = malloc((size_t)n_chunks * (size_t)n_rows * sizeof *pdiff);
    if (!chunk || !lg || !rows || !kld || !pdiff) {
        cn_cli_errorf("perplexity: out of memory for %d × %d logits", n_ctx, n_vocab);
        goto done;
    }
    fprintf(stderr, "perplexity: %lld chunks of %d (llama-perplexity's chunking), %s %s\n", (long long)n_chunks, n_ctx,
            base_path ? "against" : "saving log-probabilities to", base_path ? base_path : save_path);
    double nll = 0, nll2 = 0;
    kl_sums ks = {0};
    int64_t n_scored = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        if (llama_chunk(ctx, &b, tokens, n_ctx, c, bos, chunk, lg)) goto done;
        if (base_path && fread(rows, sizeof *rows, (size_t)n_rows * nv, io) != (size_t)n_rows * nv) {
            cn_cli_errorf("perplexity: %s: truncated at chunk %lld", base_path, (long long)c + 1);
            goto done;
        }
        for (int32_t r = 0; r < n_rows; r++, n_scored++) {
            const float *row = lg + (size_t)r * V;
            const int32_t next = chunk[first + r + 1];
            if (base_path) {
                kld[n_scored] = (float)logits_row_kl(row, n_vocab, rows + (size_t)r * nv, next, &ks, &pdiff[n_scored]);
            } else {
                const double v = logits_row_pack(row, n_vocab, next, rows + (size_t)r * nv);
                nll += v;
                nll2 += v * v;
            }
        }
        if (!base_path && fwrite(rows, sizeof *rows, (size_t)n_rows * nv, io) != (size_t)n_rows * nv) {
            cn_cli_errorf("perplexity: cannot write %s: %s", save_path, strerror(errno));
            goto done;
        }
        if (base_path)
            fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f, mean KLD %.6f, same top %.2f%%\n", (long long)c + 1,
                    (long long)n_chunks, exp(ks.sum_nll / (double)ks.count), ks.sum_kld / (double)ks.count,
                    100.0 * (double)ks.n_same_top / (double)ks.count);
        else
            fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f\n", (long long)c + 1, (long long)n_chunks,
                    exp(nll / (double)n_scored));
    }
    if (base_path) {
        kl_report(stdout, &ks, kld, pdiff);
    } else {
        if (fclose(io) != 0) {
            io = NULL;
            cn_cli_errorf("perplexity: cannot write %s: %s", save_path, strerror(errno));
            goto done;
        }
        io = NULL;
        const double mean = nll / (double)n_scored, var = nll2 / (double)n_scored - mean * mean;
        const double unc = n_scored > 1 && var > 0 ? sqrt(var / (double)(n_scored - 1)) : 0;
        printf("scored positions: %lld\n", (long long)n_scored);
        printf("Final estimate: PPL = %.4f +/- %.5f\n", exp(mean), exp(mean) * unc);
    }
    rc = 0;
done:
    if (io) fclose(io);
    if (rc && wrote) remove(save_path); /* no half-written file */
    free(text);
    free(tokens);
    free(chunk);
    free(lg);
    free(rows);
    free(kld);
    free(pdiff);
    cn_batch_free(&b);
    cn_context_free(ctx);
    cn_model_free(m);
    return rc;
}

int cn_cli_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int32_t n_ctx = 256, n_threads = 0;
    int32_t max_chunks = -1;
    kv_choice kvc = {CN_TYPE_F16, "f16"};
    const char *save_logits = NULL, *kl_base = NULL;
    const cli_flag flags[] = {
        CLI_F_MODEL(&model),
        CLI_F_STR("--file", "-f", &file, "PATH", "the text (UTF-8)"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &n_ctx, 8, 65536, "N", "tokens per chunk (default 256)"),
        CLI_F_NUM("--chunks", NULL, CLI_INT, &max_chunks, 1, INT32_MAX, "N", "most chunks to score (default: all)"),
        CLI_F_THREADS(&n_threads),
        CLI_F_CUSTOM("--kv-type", NULL, &kvc, parse_kv_type, "T",
                     "f16 (default), f32 or q8_0; other than f16 also reports\nthe KL divergence from the f16 cache at each position"),
        CLI_F_STR("--save-logits", NULL, &save_logits, "FILE",
                  "write every scored position's log-probabilities in llama-perplexity's\n"
                  "--kl-divergence-base format (llama-perplexity's chunking)"),
        CLI_F_STR("--kl-base", NULL, &kl_base, "FILE",
                  "KL divergence, Δp and top-1 agreement against a base file (from --save-logits\n"
                  "or llama-perplexity --kl-divergence-base); its tokens and -c are used, -f is not needed"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int fst = cli_flags_parse("perplexity",
                                    "usage: cinder perplexity [-m MODEL] -f TEXT_FILE [options]\n"
                                    "  perplexity of the model over the text, in chunks of --ctx tokens\n",
                                    groups, 1, argc, argv, NULL, 0, &n_pos);
    if (fst) return CLI_FLAGS_EXIT(fst);
    if (save_logits && kl_base) {
        cn_cli_errorf("perplexity: give --save-logits or --kl-base, not both");
        return 2;
    }
    if (kl_base || save_logits) {
        if (save_logits && !file) {
            cn_cli_errorf("perplexity: --save-logits needs -f TEXT_FILE");
            return 2;
        }
        char mpath[4096];
        if (!(model = cli_model_path("perplexity", model, mpath, sizeof mpath))) return 1;
        /* here --kv-type is simply the cache's type: the comparison is with the file */
        return perplexity_llama_file(model, file, save_logits, kl_base, n_ctx, max_chunks, n_threads, kvc.type);
    }
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
