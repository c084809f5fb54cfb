/* imatrix.c — `cinder imatrix`: the importance matrix of a model over a text, in the file
 * llama-imatrix writes, for `cinder quantize --imatrix` (or llama-quantize --imatrix).
 *
 * The text is chunked as llama-imatrix chunks it: tokenized with BOS (when the model uses
 * one), cut every --ctx tokens, each chunk's first token replaced by BOS, each chunk a
 * fresh sequence. Every matmul of a `blk.*` weight (and output.weight with
 * --process-output, which then asks for every row's logits) adds its input rows'
 * squared values to that weight's sums (cn_context_observe_matmuls,
 * cn_imatrix_stats_add). Unlike llama-imatrix it does not also compute the text's
 * perplexity (`cinder perplexity` does), so it asks for no logits otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"
#include "textrun.h"

typedef struct {
    cn_imatrix_stats *stats;
    bool process_output;
    cn_error err; /* the first failure inside the observer */
    bool failed;
} collect;

static void observe(void *user, const char *weight, const float *x, int64_t n_rows, int64_t k) {
    collect *c = user;
    if (c->failed) return;
    if (strncmp(weight, "blk.", 4) != 0 && !(c->process_output && !strcmp(weight, "output.weight"))) return;
    if (cn_imatrix_stats_add(c->stats, weight, x, n_rows, k, &c->err) != CN_STATUS_OK) c->failed = true;
}

/* Chunks [0, n_chunks) of r's tokens, each a fresh sequence with BOS first, in batches of
 * r's capacity, with a progress line; the observer collects as they run. */
static cn_status run_chunks(cli_text_run *r, collect *col, int32_t n_ctx, int64_t n_chunks, cn_error *err) {
    const cn_tokenizer *tk = cn_context_tokenizer(r->ctx);
    const int32_t bos = cn_tokenizer_add_bos(tk) ? cn_tokenizer_bos(tk) : -1;
    const int32_t batch = r->batch.cap;
    const double t0 = cli_now_ms();
    cn_status st = CN_STATUS_OK;
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *chunk = r->tokens + c * n_ctx;
        cn_context_seq_keep(r->ctx, 0);
        if ((st = cn_context_seq_rm(r->ctx, 0, 0, err)) != CN_STATUS_OK) break;
        for (int32_t i0 = 0; i0 < n_ctx && st == CN_STATUS_OK; i0 += batch) {
            cn_batch_clear(&r->batch);
            for (int32_t i = i0; i < n_ctx && i < i0 + batch; i++)
                cn_batch_add(&r->batch, i == 0 && bos >= 0 ? bos : chunk[i], i, 0, col->process_output);
            st = cn_context_decode(r->ctx, &r->batch, err);
            if (col->failed) {
                *err = col->err;
                st = col->err.status;
            }
        }
        if (st != CN_STATUS_OK) break;
        const double s = (cli_now_ms() - t0) / 1000.0;
        fprintf(stderr, "\rimatrix: chunk %lld/%lld, %.1f s, %.0f tok/s, %.0f s left ", (long long)c + 1,
                (long long)n_chunks, s, (double)(c + 1) * n_ctx / s, s / (double)(c + 1) * (double)(n_chunks - c - 1));
    }
    fputc('\n', stderr);
    return st;
}

int cn_cli_imatrix(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *out = "imatrix.gguf";
    int32_t n_ctx = 512, n_threads = 0, max_chunks = -1;
    bool process_output = false;
    const cli_flag flags[] = {
        CLI_F_MODEL(&model),
        CLI_F_STR("--file", "-f", &file, "PATH", "the text (UTF-8); its path is recorded as the dataset"),
        CLI_F_STR("--output", "-o", &out, "PATH", "the importance matrix to write (default imatrix.gguf)"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &n_ctx, 8, 65536, "N", "tokens per chunk (default 512, as llama-imatrix)"),
        CLI_F_NUM("--chunks", NULL, CLI_INT, &max_chunks, 1, INT32_MAX, "N", "most chunks to run (default: all)"),
        CLI_F_THREADS(&n_threads),
        CLI_F_BOOL("--process-output", NULL, &process_output,
                   "collect output.weight's statistics too (every row's logits are computed)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int fst = cli_flags_parse("imatrix",
                                    "usage: cinder imatrix [-m MODEL] -f TEXT_FILE [-o imatrix.gguf] [options]\n"
                                    "  the mean squared activation entering every weight, over the text, in\n"
                                    "  llama-imatrix's GGUF file: for `cinder quantize --imatrix FILE`\n",
                                    groups, 1, argc, argv, NULL, 0, &n_pos);
    if (fst) return CLI_FLAGS_EXIT(fst);
    if (!file) {
        cn_cli_errorf("imatrix: -f TEXT_FILE is required (see --help)");
        return 2;
    }
    char mpath[4096];
    if (!(model = cli_model_path("imatrix", model, mpath, sizeof mpath))) return 1;
    size_t n_text = 0;
    char *text = cn_cli_read_file(file, &n_text);
    if (!text) return 1;

    cn_error err = {0};
    collect col = {.process_output = process_output};
    /* batches of at most 512 rows, split evenly so none is a lone row (those are not observed) */
    const int32_t n_batches = (n_ctx + 511) / 512, batch = (n_ctx + n_batches - 1) / n_batches;
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = n_threads;
    cp.n_ctx = n_ctx;
    cp.n_batch = batch;
    cli_text_run r;
    int rc = cli_text_run_open(&r, "imatrix", model, &cp, text, n_text, false);
    free(text);
    if (rc) goto done;
    rc = 1;
    cn_status st = cn_imatrix_stats_create(&col.stats, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("imatrix: %s", err.msg);
        goto done;
    }
    const size_t n_tok = r.n_tokens;
    int64_t n_chunks = (int64_t)(n_tok / (size_t)n_ctx);
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        cn_cli_errorf("imatrix: the text has %zu tokens, fewer than one chunk of %d (-c)", n_tok, n_ctx);
        goto done;
    }
    cn_context_observe_matmuls(r.ctx, observe, &col);
    fprintf(stderr, "imatrix: %zu tokens, %lld chunks of %d, %s\n", n_tok, (long long)n_chunks, n_ctx,
            process_output ? "blk.* and output.weight" : "blk.* weights");
    st = run_chunks(&r, &col, n_ctx, n_chunks, &err);
    if (st == CN_STATUS_OK) st = cn_imatrix_stats_save(col.stats, out, file, (int32_t)n_chunks, n_ctx, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("imatrix: %s", err.msg);
        goto done;
    }
    fprintf(stderr, "imatrix: %lld weights over %lld chunks written to %s\n",
            (long long)cn_imatrix_stats_n_weights(col.stats), (long long)n_chunks, out);
    rc = 0;
done:
    cn_imatrix_stats_free(col.stats);
    cli_text_run_close(&r);
    return rc;
}
