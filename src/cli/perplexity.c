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
 * (cn_logits_file, which owns the format and its arithmetic): the text is chunked as
 * llama-perplexity chunks it (the tokens with BOS, cut every --ctx tokens, each chunk's
 * first token replaced by BOS), --save-logits writes every scored position's
 * log-probabilities, and --kl-base reads such a file (written by cinder or by
 * llama-perplexity --kl-divergence-base), runs the model on the very tokens stored in it
 * and reports PPL, KL divergence, Δp and top-1 agreement under llama-perplexity's labels.
 * This file runs the model and prints; the numbers are the library's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"
#include "textrun.h"

typedef struct {
    cn_type type;
    const char *name;
} kv_choice;

typedef struct {
    const char *model, *file, *save_logits, *kl_base;
    int32_t n_ctx, n_threads, max_chunks; /* max_chunks -1: all */
    kv_choice kv;
} ppl_opts;

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

/* ---- --save-logits / --kl-base: llama-perplexity's chunking, its file (cn_logits_file) ---- */

static cn_context_params file_context_params(const ppl_opts *o, int32_t n_ctx) {
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx < 512 ? n_ctx : 512;
    cp.kv_type = o->kv.type; /* here simply the cache's type: the comparison is with the file */
    return cp;
}

/* Chunks [0, n_chunks) of the file's tokens through the model, each one's scored logits
 * handed to lf (compared with it, or written to it), with a progress line per chunk; *s
 * the figures at the end. 0 or 1 (message printed). */
static int run_file_chunks(cli_text_run *r, cn_logits_file *lf, int64_t n_chunks, bool comparing, const char *path,
                           cn_logits_stats *s) {
    int32_t n_ctx;
    const int32_t *tokens = cn_logits_file_tokens(lf, &n_ctx, NULL, NULL);
    const int32_t n_vocab = cn_context_n_vocab(r->ctx);
    const cn_tokenizer *tk = cn_context_tokenizer(r->ctx);
    const int32_t bos = cn_tokenizer_add_bos(tk) ? cn_tokenizer_bos(tk) : -1;
    int32_t *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    float *lg = malloc((size_t)(n_ctx - n_ctx / 2) * (size_t)n_vocab * sizeof *lg);
    int rc = 1;
    if (!chunk || !lg) {
        cn_cli_errorf("perplexity: out of memory for %d × %d logits", n_ctx, n_vocab);
        goto done;
    }
    fprintf(stderr, "perplexity: %lld chunks of %d (llama-perplexity's chunking), %s %s\n", (long long)n_chunks, n_ctx,
            comparing ? "against" : "saving log-probabilities to", path);
    for (int64_t c = 0; c < n_chunks; c++) {
        memcpy(chunk, tokens + (size_t)c * (size_t)n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (bos >= 0) chunk[0] = bos;
        if (chunk_logits(r->ctx, &r->batch, chunk, n_ctx, n_ctx / 2, lg)) goto done;
        cn_error err;
        if (cn_logits_file_add_chunk(lf, lg, s, &err) != CN_STATUS_OK) {
            cn_cli_errorf("perplexity: %s", err.msg);
            goto done;
        }
        if (comparing)
            fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f, mean KLD %.6f, same top %.2f%%\n", (long long)c + 1,
                    (long long)n_chunks, s->ppl, s->mean_kld, s->same_top_pct);
        else fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f\n", (long long)c + 1, (long long)n_chunks, s->ppl);
    }
    rc = 0;
done:
    free(chunk);
    free(lg);
    return rc;
}

/* --save-logits: the text's chunks, written as llama-perplexity --kl-divergence-base does. */
static int save_logits(const ppl_opts *o, const char *model) {
    size_t n_text = 0;
    char *text = cn_cli_read_file(o->file, &n_text);
    if (!text) return 1;
    cli_text_run r;
    const cn_context_params cp = file_context_params(o, o->n_ctx);
    int rc = cli_text_run_open(&r, "perplexity", model, &cp, text, n_text, true);
    free(text);
    cn_logits_file *lf = NULL;
    cn_logits_stats s = {0};
    cn_error err = {0};
    if (rc) goto done;
    const int64_t n_all = (int64_t)r.n_tokens / o->n_ctx;
    int64_t n_chunks = n_all > INT32_MAX ? INT32_MAX : n_all;
    if (o->max_chunks > 0 && n_chunks > o->max_chunks) n_chunks = o->max_chunks;
    rc = 1;
    if (n_chunks < 1) {
        cn_cli_errorf("perplexity: the text has %zu tokens, fewer than one chunk of %d", r.n_tokens, o->n_ctx);
        goto done;
    }
    if (cn_logits_file_create(o->save_logits, o->n_ctx, cn_context_n_vocab(r.ctx), (int32_t)n_chunks, r.tokens, &lf,
                              &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        goto done;
    }
    if (run_file_chunks(&r, lf, n_chunks, false, o->save_logits, &s)) goto done;
    if (cn_logits_file_commit(lf, &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        goto done;
    }
    printf("scored positions: %lld\n", (long long)s.n_scored);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", s.ppl, s.ppl_unc);
    rc = 0;
done:
    cn_logits_file_free(lf); /* not committed: nothing is left, an existing file stays */
    cli_text_run_close(&r);
    return rc;
}

/* --kl-base: the model on the file's chunks, measured against the file's distributions. */
static int compare_with_file(const ppl_opts *o, const char *model) {
    cn_logits_file *lf = NULL;
    cn_error err = {0};
    if (cn_logits_file_open(o->kl_base, &lf, &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        return 1;
    }
    int32_t n_ctx, n_vocab, n_chunk;
    cn_logits_file_tokens(lf, &n_ctx, &n_vocab, &n_chunk);
    cli_text_run r;
    const cn_context_params cp = file_context_params(o, n_ctx);
    int rc = cli_text_run_open(&r, "perplexity", model, &cp, NULL, 0, true);
    cn_logits_stats s = {0};
    char *report = NULL;
    if (!rc && n_vocab != cn_context_n_vocab(r.ctx)) {
        cn_cli_errorf("perplexity: %s was made with a vocabulary of %d tokens, the model has %d", o->kl_base, n_vocab,
                      cn_context_n_vocab(r.ctx));
        rc = 1;
    }
    const int64_t n_chunks = o->max_chunks > 0 && n_chunk > o->max_chunks ? o->max_chunks : n_chunk;
    if (!rc) rc = run_file_chunks(&r, lf, n_chunks, true, o->kl_base, &s);
    if (!rc && cn_logits_file_report(lf, &report, &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        rc = 1;
    }
    if (!rc) fputs(report, stdout);
    free(report);
    cn_logits_file_free(lf);
    cli_text_run_close(&r);
    return rc;
}

/* ---- --kv-type: the same chunks with an F16 cache and with T, compared ---- */

/* Both runs' logits at the scored positions of one chunk, and what they add up to. */
typedef struct {
    int n_runs; /* 1, or 2 comparing: run 0 the f16 cache, run 1 --kv-type */
    int32_t n_ctx, n_vocab;
    int32_t bos;   /* each chunk's first token when with_bos */
    bool with_bos; /* the model uses one (and has one) */
    float *lg[2];  /* (n_ctx - n_ctx/2, n_vocab) per run */
    double *lp[2]; /* (n_vocab) log-probabilities at one position, per run */
    double nll[2], kl_sum, kl_max;
    int64_t n_scored, n_agree;
} kv_score;

/* log-softmax of one row into out (double, for sums over many positions). */
static void log_softmax(const float *x, int32_t n, double *out) {
    double mx = x[0];
    for (int32_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    double lse = mx + log(s);
    for (int32_t i = 0; i < n; i++) out[i] = (double)x[i] - lse;
}

static bool kv_score_alloc(kv_score *k) {
    const size_t V = (size_t)k->n_vocab;
    bool ok = true;
    for (int i = 0; i < k->n_runs; i++) {
        k->lg[i] = malloc((size_t)(k->n_ctx - k->n_ctx / 2) * V * sizeof *k->lg[i]);
        k->lp[i] = malloc(V * sizeof *k->lp[i]);
        ok &= k->lg[i] && k->lp[i];
    }
    return ok;
}

static void kv_score_free(kv_score *k) {
    for (int i = 0; i < 2; i++) {
        free(k->lg[i]);
        free(k->lp[i]);
    }
}

/* Positions [n_ctx/2, n_ctx - 1) of chunk: each run's NLL of the next token and, with two
 * runs, KL(run 0 ‖ run 1) and whether their top tokens agree. */
static void score_chunk(kv_score *k, const int32_t *chunk) {
    const size_t V = (size_t)k->n_vocab;
    for (int32_t i = k->n_ctx / 2; i < k->n_ctx - 1; i++) {
        const size_t row = (size_t)(i - k->n_ctx / 2) * V;
        for (int r = 0; r < k->n_runs; r++) {
            log_softmax(k->lg[r] + row, k->n_vocab, k->lp[r]);
            k->nll[r] -= k->lp[r][chunk[i + 1]];
        }
        if (k->n_runs == 2) {
            double kl = 0;
            for (size_t v = 0; v < V; v++) kl += exp(k->lp[0][v]) * (k->lp[0][v] - k->lp[1][v]);
            k->kl_sum += kl;
            k->kl_max = kl > k->kl_max ? kl : k->kl_max;
            k->n_agree += cn_cli_argmax(k->lg[0] + row, k->n_vocab) == cn_cli_argmax(k->lg[1] + row, k->n_vocab);
        }
        k->n_scored++;
    }
}

static void kv_report(const kv_score *k, const char *kv_name) {
    const double n = (double)k->n_scored;
    printf("scored positions: %lld\n", (long long)k->n_scored);
    printf("perplexity (f16 KV): %.4f\n", exp(k->nll[0] / n));
    if (k->n_runs < 2) return;
    printf("perplexity (%s KV): %.4f\n", kv_name, exp(k->nll[1] / n));
    printf("KL(f16 KV || %s KV): mean %.3e, max %.3e nats\n", kv_name, k->kl_sum / n, k->kl_max);
    printf("top-1 agreement: %.2f%% (%lld/%lld)\n", 100.0 * (double)k->n_agree / n, (long long)k->n_agree,
           (long long)k->n_scored);
}

/* Each chunk: BOS (if the model uses one) + (n_ctx - 1) text tokens, run through every
 * context of ctx[0..k->n_runs). 0 or 1 (message printed). */
static int kv_chunks(cli_text_run *r, cn_context *const ctx[2], kv_score *k, int64_t n_chunks) {
    const int32_t body = k->n_ctx - (k->with_bos ? 1 : 0);
    const int32_t first = k->with_bos ? 1 : 0; /* text tokens start after the tokenizer's BOS */
    int32_t *chunk = malloc((size_t)k->n_ctx * sizeof *chunk);
    int rc = 1;
    if (!chunk || !kv_score_alloc(k)) {
        cn_cli_errorf("perplexity: out of memory for %d × %zu logits", k->n_ctx, (size_t)k->n_vocab);
        goto done;
    }
    fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %d, scoring the second half of each\n", r->n_tokens,
            (long long)n_chunks, k->n_ctx);
    for (int64_t c = 0; c < n_chunks; c++) {
        int32_t j = 0;
        if (k->with_bos) chunk[j++] = k->bos;
        memcpy(chunk + j, r->tokens + first + c * body, (size_t)body * sizeof *chunk);
        for (int i = 0; i < k->n_runs; i++)
            if (chunk_logits(ctx[i], &r->batch, chunk, k->n_ctx, k->n_ctx / 2, k->lg[i])) goto done;
        score_chunk(k, chunk);
        fprintf(stderr, "perplexity: chunk %lld/%lld: ppl %.4f\n", (long long)c + 1, (long long)n_chunks,
                exp(k->nll[0] / (double)k->n_scored));
    }
    rc = 0;
done:
    free(chunk);
    return rc;
}

static int perplexity_kv(const ppl_opts *o) {
    size_t n_text = 0;
    char *text = cn_cli_read_file(o->file, &n_text);
    if (!text) return 1;
    char path[4096];
    const char *model = cli_model_path("perplexity", o->model, path, sizeof path);
    kv_score k = {.n_runs = o->kv.type != CN_TYPE_F16 ? 2 : 1, .n_ctx = o->n_ctx};
    cli_text_run r = {0};
    cn_context *ctx[2] = {NULL, NULL};
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_ctx < 128 ? o->n_ctx : 128;
    int rc = model ? cli_text_run_open(&r, "perplexity", model, &cp, text, n_text, true) : 1;
    free(text);
    if (rc) goto done;
    ctx[0] = r.ctx;
    cp.kv_type = o->kv.type;
    cn_error err;
    if (k.n_runs == 2 && cn_context_create(r.model, &cp, &ctx[1], &err) != CN_STATUS_OK) {
        cn_cli_errorf("perplexity: %s", err.msg);
        rc = 1;
        goto done;
    }
    const cn_tokenizer *tk = cn_context_tokenizer(r.ctx);
    k.bos = cn_tokenizer_bos(tk);
    k.with_bos = cn_tokenizer_add_bos(tk) && k.bos >= 0;
    const int32_t first = k.with_bos ? 1 : 0;
    int64_t n_chunks = ((int64_t)r.n_tokens - first) / (o->n_ctx - first);
    if (o->max_chunks > 0 && n_chunks > o->max_chunks) n_chunks = o->max_chunks;
    if (n_chunks < 1) {
        cn_cli_errorf("perplexity: the text has %zu tokens, fewer than one chunk of %d", r.n_tokens, o->n_ctx);
        rc = 1;
        goto done;
    }
    k.n_vocab = cn_context_n_vocab(r.ctx);
    rc = kv_chunks(&r, ctx, &k, n_chunks);
    if (!rc) kv_report(&k, o->kv.name);
done:
    kv_score_free(&k);
    cn_context_free(ctx[1]);
    cli_text_run_close(&r);
    return rc;
}

/* ---- the command ---- */

/* 0 to go on, else the exit code (message printed). */
static int parse_flags(ppl_opts *o, int argc, char **argv) {
    const cli_flag flags[] = {
        CLI_F_MODEL(&o->model),
        CLI_F_STR("--file", "-f", &o->file, "PATH", "the text (UTF-8)"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &o->n_ctx, 8, 65536, "N", "tokens per chunk (default 256)"),
        CLI_F_NUM("--chunks", NULL, CLI_INT, &o->max_chunks, 1, INT32_MAX, "N", "most chunks to score (default: all)"),
        CLI_F_THREADS(&o->n_threads),
        CLI_F_CUSTOM(
            "--kv-type", NULL, &o->kv, parse_kv_type, "T",
            "f16 (default), f32 or q8_0; other than f16 also reports\nthe KL divergence from the f16 cache at each position"),
        CLI_F_STR("--save-logits", NULL, &o->save_logits, "FILE",
                  "write every scored position's log-probabilities in llama-perplexity's\n"
                  "--kl-divergence-base format (llama-perplexity's chunking)"),
        CLI_F_STR("--kl-base", NULL, &o->kl_base, "FILE",
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
    if (o->save_logits && o->kl_base) {
        cn_cli_errorf("perplexity: give --save-logits or --kl-base, not both");
        return 2;
    }
    if (o->save_logits && !o->file) {
        cn_cli_errorf("perplexity: --save-logits needs -f TEXT_FILE");
        return 2;
    }
    if (!o->kl_base && !o->save_logits && !o->file) {
        cn_cli_errorf("perplexity: -f TEXT_FILE is required (see --help)");
        return 2;
    }
    return 0;
}

int cn_cli_perplexity(int argc, char **argv) {
    ppl_opts o = {.n_ctx = 256, .max_chunks = -1, .kv = {CN_TYPE_F16, "f16"}};
    const int rc = parse_flags(&o, argc, argv);
    if (rc) return rc;
    if (!o.kl_base && !o.save_logits) return perplexity_kv(&o);
    char path[4096];
    const char *model = cli_model_path("perplexity", o.model, path, sizeof path);
    if (!model) return 1;
    return o.kl_base ? compare_with_file(&o, model) : save_logits(&o, model);
}
