/* logits_file.c — llama-perplexity's log-probability file (--kl-divergence-base), written
 * and compared with (cn_logits_file in cinder.h), so `cinder perplexity --save-logits`
 * makes a file llama-perplexity --kl-divergence reads and `--kl-base` reads the one
 * llama-perplexity writes. The arithmetic follows tools/perplexity/perplexity.cpp
 * expression for expression (float where it uses float, double where it sums in double),
 * so a file cinder writes is the file llama-perplexity would write for the same logits,
 * and the figures it reports are computed the same way. It never runs a model: the
 * caller hands it each chunk's logits.
 *
 * Layout (little-endian, no padding): "_logits_", uint32 n_ctx, int32 n_vocab, int32
 * n_chunk, int32 tokens[n_chunk * n_ctx], then for every chunk and each of its scored
 * positions i in [n_ctx/2, n_ctx - 1) one row of nv = 2*((n_vocab+1)/2) + 4 uint16: float
 * scale, float min_log_prob (in the first four), then n_vocab quantized log-probabilities:
 * log p = scale * q + min_log_prob, where min_log_prob is the log-probability 16 nats
 * below the top (or the smallest, if nearer) and q = 0 for everything below it.
 *
 * A file being written goes through core/outfile.h: renamed over its name only by
 * cn_logits_file_commit, so a failed run leaves no partial file and an existing one as
 * it was. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/outfile.h"

#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 20)
#define MAX_TOKENS ((uint64_t)1 << 30) /* n_chunk * n_ctx */

/* The running sums of llama-perplexity's kl_divergence_result (writing uses the nll ones). */
typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    int64_t n_same_top, count;
} kl_sums;

struct cn_logits_file {
    char *path;
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    int32_t *tokens; /* (n_chunk, n_ctx) */
    int32_t next;    /* the chunk add_chunk takes next */
    uint16_t *rows;  /* (n_ctx - 1 - n_ctx/2, row_len) one chunk's rows */
    cn_outfile out;  /* writing: out.f open until commit */
    FILE *in;        /* comparing: positioned at chunk `next`'s rows */
    kl_sums s;
    float *kld, *p_diff; /* comparing: (s.count) per position, for the percentiles */
    size_t cap;          /* of kld and p_diff */
};

/* uint16 per row of the file. */
static size_t row_len(int32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

static int32_t rows_per_chunk(uint32_t n_ctx) { return (int32_t)(n_ctx - 1 - n_ctx / 2); }

void cn_logits_file_free(cn_logits_file *f) {
    if (!f) return;
    cn_outfile_abort(&f->out);
    if (f->in) fclose(f->in);
    free(f->path);
    free(f->tokens);
    free(f->rows);
    free(f->kld);
    free(f->p_diff);
    free(f);
}

/* A handle naming path (its own copy); NULL: out of memory. */
static cn_logits_file *new_handle(const char *path) {
    cn_logits_file *f = calloc(1, sizeof *f);
    if (f && !(f->path = strdup(path))) {
        free(f);
        return NULL;
    }
    return f;
}

/* The tokens and one chunk's rows, for the shape in f. */
static cn_status alloc_buffers(cn_logits_file *f, cn_error *err) {
    f->tokens = malloc((size_t)f->n_chunk * f->n_ctx * sizeof *f->tokens);
    f->rows = malloc((size_t)rows_per_chunk(f->n_ctx) * row_len(f->n_vocab) * sizeof *f->rows);
    if (!f->tokens || !f->rows) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    return CN_STATUS_OK;
}

static bool shape_ok(uint32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
    return n_ctx >= 8 && n_ctx <= MAX_CTX && n_vocab >= 1 && n_vocab <= MAX_VOCAB && n_chunk >= 1 &&
           (uint64_t)n_chunk * n_ctx <= MAX_TOKENS;
}

/* ---- writing ---- */

cn_status cn_logits_file_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                                const int32_t *tokens, cn_logits_file **out, cn_error *err) {
    *out = NULL;
    if (!path || !tokens || n_ctx < 0 || !shape_ok((uint32_t)n_ctx, n_vocab, n_chunk))
        return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: n_ctx %d, n_vocab %d, n_chunk %d out of range", n_ctx,
                      n_vocab, n_chunk);
    cn_logits_file *f = new_handle(path);
    if (!f) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    f->n_ctx = (uint32_t)n_ctx;
    f->n_vocab = n_vocab;
    f->n_chunk = n_chunk;
    cn_status st = alloc_buffers(f, err);
    if (!st) st = cn_outfile_open(&f->out, path, err);
    if (st) {
        cn_logits_file_free(f);
        return st;
    }
    const size_t n = (size_t)n_chunk * (size_t)n_ctx;
    memcpy(f->tokens, tokens, n * sizeof *tokens);
    FILE *o = f->out.f;
    if (fwrite("_logits_", 1, 8, o) != 8 || fwrite(&f->n_ctx, 4, 1, o) != 1 || fwrite(&f->n_vocab, 4, 1, o) != 1 ||
        fwrite(&f->n_chunk, 4, 1, o) != 1 || fwrite(tokens, sizeof *tokens, n, o) != n) {
        st = cn_err(err, CN_STATUS_IO, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
        cn_logits_file_free(f);
        return st;
    }
    *out = f;
    return CN_STATUS_OK;
}

/* Round to nearest by the 1.5 * 2^23 trick, as llama-perplexity's nearest_int. */
static int nearest(float v) {
    float b = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &b, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Fills one row (row_len) from the logits; returns the token's negative log-likelihood,
 * as llama-perplexity computes it. */
static double pack_row(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row) {
    float max_logit = logits[0], min_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        max_logit = logits[i] > max_logit ? logits[i] : max_logit;
        min_logit = logits[i] < min_logit ? logits[i] : min_logit;
    }
    min_logit = min_logit > max_logit - 16 ? min_logit : max_logit - 16;
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    const float min_log_prob = min_logit - max_logit - log_sum_exp;
    const float scale = (max_logit - min_logit) / 65535.f;
    memcpy(row, &scale, 4);
    memcpy(row + 2, &min_log_prob, 4);
    uint16_t *q = row + 4;
    if (scale != 0) {
        const float inv_scale = 1 / scale;
        for (int32_t i = 0; i < n_vocab; i++)
            q[i] = logits[i] > min_logit ? (uint16_t)nearest(inv_scale * (logits[i] - min_logit)) : 0;
    } else {
        memset(q, 0, (size_t)n_vocab * sizeof *q);
    }
    if (n_vocab % 2) q[n_vocab] = 0; /* the row's padding element */
    return max_logit + log_sum_exp - logits[tok];
}

static cn_status write_chunk(cn_logits_file *f, const float *logits, cn_error *err) {
    const int32_t n_rows = rows_per_chunk(f->n_ctx), first = (int32_t)(f->n_ctx / 2);
    const size_t nv = row_len(f->n_vocab), V = (size_t)f->n_vocab;
    const int32_t *chunk = f->tokens + (size_t)f->next * f->n_ctx;
    for (int32_t r = 0; r < n_rows; r++) {
        const double v = pack_row(logits + (size_t)r * V, f->n_vocab, chunk[first + r + 1], f->rows + (size_t)r * nv);
        f->s.sum_nll += v;
        f->s.sum_nll2 += v * v;
        f->s.count++;
    }
    if (fwrite(f->rows, sizeof *f->rows, (size_t)n_rows * nv, f->out.f) != (size_t)n_rows * nv)
        return cn_err(err, CN_STATUS_IO, "cannot write %s: %s", f->path, strerror(errno ? errno : EIO));
    return CN_STATUS_OK;
}

cn_status cn_logits_file_commit(cn_logits_file *f, cn_error *err) {
    if (!f->out.f) return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: %s is not being written", f->path);
    if (f->next < f->n_chunk) {
        cn_outfile_abort(&f->out);
        return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: %d of %d chunks given for %s", f->next, f->n_chunk,
                      f->path);
    }
    return cn_outfile_commit(&f->out, err);
}

/* ---- comparing ---- */

static cn_status read_header(cn_logits_file *f, FILE *in, const char *path, cn_error *err) {
    char magic[8];
    if (fread(magic, 1, 8, in) != 8 || memcmp(magic, "_logits_", 8) != 0)
        return cn_err(err, CN_STATUS_CORRUPT, "%s is not a log-probability file (no \"_logits_\" header)", path);
    if (fread(&f->n_ctx, 4, 1, in) != 1 || fread(&f->n_vocab, 4, 1, in) != 1 || fread(&f->n_chunk, 4, 1, in) != 1)
        return cn_err(err, CN_STATUS_CORRUPT, "%s: truncated header", path);
    if (!shape_ok(f->n_ctx, f->n_vocab, f->n_chunk))
        return cn_err(err, CN_STATUS_CORRUPT, "%s: implausible header (n_ctx %u, n_vocab %d, n_chunk %d)", path,
                      f->n_ctx, f->n_vocab, f->n_chunk);
    cn_status st = alloc_buffers(f, err);
    if (st) return st;
    const size_t n = (size_t)f->n_chunk * f->n_ctx;
    if (fread(f->tokens, sizeof *f->tokens, n, in) != n)
        return cn_err(err, CN_STATUS_CORRUPT, "%s: truncated token list", path);
    for (size_t i = 0; i < n; i++)
        if (f->tokens[i] < 0 || f->tokens[i] >= f->n_vocab)
            return cn_err(err, CN_STATUS_CORRUPT, "%s: token %d at %zu is outside the vocabulary of %d", path,
                          f->tokens[i], i, f->n_vocab);
    return CN_STATUS_OK;
}

cn_status cn_logits_file_open(const char *path, cn_logits_file **out, cn_error *err) {
    *out = NULL;
    cn_logits_file *f = new_handle(path);
    if (!f) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    cn_status st = (f->in = fopen(path, "rb")) ? read_header(f, f->in, path, err)
                                               : cn_err(err, CN_STATUS_IO, "cannot open %s: %s", path, strerror(errno));
    if (st) {
        cn_logits_file_free(f);
        return st;
    }
    *out = f;
    return CN_STATUS_OK;
}

/* One position: logits of the model under test against a base row; adds to s and
 * returns the KL divergence, *p_diff the change in the correct token's probability. */
static double row_kl(const float *logits, int32_t n_vocab, const uint16_t *base, int32_t tok, kl_sums *s,
                     float *p_diff_out) {
    float max_logit = logits[0];
    int32_t imax = 0;
    for (int32_t i = 1; i < n_vocab; i++) {
        if (logits[i] > max_logit) {
            max_logit = logits[i];
            imax = i;
        }
    }
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    float scale, min_log_prob;
    memcpy(&scale, base, 4);
    memcpy(&min_log_prob, base + 2, 4);
    const uint16_t *q = base + 4;

    const float nll = max_logit + log_sum_exp - logits[tok];
    s->sum_nll += nll;
    s->sum_nll2 += nll * nll;
    const float nll_base = -(scale * q[tok] + min_log_prob);
    s->sum_nll_base += nll_base;
    s->sum_nll_base2 += nll_base * nll_base;
    s->sum_nll_nll_base += nll * nll_base;

    max_logit += log_sum_exp;
    double sum = 0;
    int32_t imax_base = -1;
    float p_log_base_max = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float p_log_base = scale * q[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            sum += p_base * (p_log_base - logits[i] + max_logit);
        }
    }
    s->sum_kld += sum;
    s->sum_kld2 += sum * sum;
    s->count++;
    s->n_same_top += imax == imax_base;

    const float p_diff = expf(-nll) - expf(-nll_base);
    s->sum_p_diff += p_diff;
    const double p_diff2 = p_diff * p_diff;
    s->sum_p_diff2 += p_diff2;
    s->sum_p_diff4 += p_diff2 * p_diff2;
    s->max_p_diff = fabsf(p_diff) > s->max_p_diff ? fabsf(p_diff) : s->max_p_diff;
    *p_diff_out = p_diff;
    return sum;
}

/* kld and p_diff (one capacity) hold at least need positions. */
static bool grow_positions(cn_logits_file *f, size_t need) {
    if (need <= f->cap) return true;
    const size_t cap = cn_grow_cap(f->cap, need, sizeof(float));
    float *kld = cap ? realloc(f->kld, cap * sizeof *kld) : NULL;
    if (kld) f->kld = kld;
    float *p_diff = kld ? realloc(f->p_diff, cap * sizeof *p_diff) : NULL;
    if (!p_diff) return false;
    f->p_diff = p_diff;
    f->cap = cap;
    return true;
}

static cn_status compare_chunk(cn_logits_file *f, const float *logits, cn_error *err) {
    const int32_t n_rows = rows_per_chunk(f->n_ctx), first = (int32_t)(f->n_ctx / 2);
    const size_t nv = row_len(f->n_vocab), V = (size_t)f->n_vocab;
    if (fread(f->rows, sizeof *f->rows, (size_t)n_rows * nv, f->in) != (size_t)n_rows * nv)
        return cn_err(err, CN_STATUS_CORRUPT, "%s: truncated at chunk %lld", f->path, (long long)f->next + 1);
    const size_t n = (size_t)f->s.count;
    if (!grow_positions(f, n + (size_t)n_rows))
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for %zu positions", n + (size_t)n_rows);
    const int32_t *chunk = f->tokens + (size_t)f->next * f->n_ctx;
    for (int32_t r = 0; r < n_rows; r++)
        f->kld[n + (size_t)r] = (float)row_kl(logits + (size_t)r * V, f->n_vocab, f->rows + (size_t)r * nv,
                                              chunk[first + r + 1], &f->s, &f->p_diff[n + (size_t)r]);
    return CN_STATUS_OK;
}

/* ---- either way ---- */

const int32_t *cn_logits_file_tokens(const cn_logits_file *f, int32_t *n_ctx, int32_t *n_vocab, int32_t *n_chunk) {
    if (n_ctx) *n_ctx = (int32_t)f->n_ctx;
    if (n_vocab) *n_vocab = f->n_vocab;
    if (n_chunk) *n_chunk = f->n_chunk;
    return f->tokens;
}

static void get_stats(const cn_logits_file *f, cn_logits_stats *out) {
    const kl_sums *s = &f->s;
    const double n = (double)s->count;
    *out = (cn_logits_stats){.n_scored = s->count};
    if (s->count < 1) return;
    const double mean = s->sum_nll / n, var = s->sum_nll2 / n - mean * mean;
    out->ppl = exp(mean);
    out->ppl_unc = s->count > 1 && var > 0 ? out->ppl * sqrt(var / (n - 1)) : 0;
    if (f->in) {
        out->mean_kld = s->sum_kld / n;
        out->same_top_pct = 100.0 * (double)s->n_same_top / n;
    }
}

cn_status cn_logits_file_add_chunk(cn_logits_file *f, const float *logits, cn_logits_stats *stats, cn_error *err) {
    if (!f->in && !f->out.f) return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: %s is already committed", f->path);
    if (f->next >= f->n_chunk)
        return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: %s holds %d chunks, no more", f->path, f->n_chunk);
    cn_status st = f->in ? compare_chunk(f, logits, err) : write_chunk(f, logits, err);
    if (st) return st;
    f->next++;
    if (stats) get_stats(f, stats);
    return CN_STATUS_OK;
}

/* ---- the closing report ---- */

static void mean_unc(double sum, double sum2, int64_t count, double *mean, double *unc) {
    *mean = *unc = 0;
    if (count < 1) return;
    *mean = sum / (double)count;
    double df = sum2 / (double)count - *mean * *mean;
    *unc = df > 0 && count > 10 ? sqrt(df / (double)(count - 1)) : 0.;
}

static double covariance(double a, double b, double ab, int64_t count) {
    if (count < 10) return 0.0;
    double var = ab / (double)count - (a / (double)count) * (b / (double)count);
    return var / (double)(count - 1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float percentile(const float *v, int64_t n, float fraction) {
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    float p = fraction * (float)(n - 1);
    size_t ip = (size_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < (size_t)n ? ip + 1 : (size_t)n - 1];
}

static float median(const float *v, int64_t n) { return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2]; }

static void report_ppl(cn_buf *b, const kl_sums *s) {
    const int64_t n = s->count;
    double lp, lpu, lb, lbu;
    mean_unc(s->sum_nll, s->sum_nll2, n, &lp, &lpu);
    mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &lb, &lbu);
    const double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    const double ppl = exp(lp), ppl_base = exp(lb);
    const double ratio_unc = sqrt(lpu * lpu + lbu * lbu - 2.0 * cov);
    cn_buf_printf(b, "====== Perplexity statistics ======\n");
    cn_buf_printf(b, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl * lpu);
    cn_buf_printf(b, "Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_base, ppl_base * lbu);
    cn_buf_printf(b, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cov / (lpu * lbu));
    cn_buf_printf(b, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lp - lb, ratio_unc);
    cn_buf_printf(b, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lp - lb), exp(lp - lb) * ratio_unc);
    cn_buf_printf(b, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", ppl - ppl_base,
                  sqrt(ppl * lpu * ppl * lpu + ppl_base * lbu * ppl_base * lbu - 2.0 * ppl * ppl_base * cov));
}

/* kld sorted */
static void report_kld(cn_buf *b, const kl_sums *s, const float *kld) {
    const int64_t n = s->count;
    double km, ku;
    mean_unc(s->sum_kld, s->sum_kld2, n, &km, &ku);
    cn_buf_printf(b, "\n====== KL divergence statistics ======\n");
    cn_buf_printf(b, "Mean    KLD: %10.6f ± %10.6f\n", km, ku);
    cn_buf_printf(b, "Maximum KLD: %10.6f\n", kld[n - 1]);
    cn_buf_printf(b, "99.9%%   KLD: %10.6f\n", percentile(kld, n, 0.999f));
    cn_buf_printf(b, "99.0%%   KLD: %10.6f\n", percentile(kld, n, 0.990f));
    cn_buf_printf(b, "95.0%%   KLD: %10.6f\n", percentile(kld, n, 0.950f));
    cn_buf_printf(b, "90.0%%   KLD: %10.6f\n", percentile(kld, n, 0.900f));
    cn_buf_printf(b, "Median  KLD: %10.6f\n", median(kld, n));
    cn_buf_printf(b, "10.0%%   KLD: %10.6f\n", percentile(kld, n, 0.100f));
    cn_buf_printf(b, "Minimum KLD: %10.6f\n", kld[0]);
}

/* p_diff sorted */
static void report_p_diff(cn_buf *b, const kl_sums *s, const float *p_diff) {
    const int64_t n = s->count;
    double pm, pu;
    mean_unc(s->sum_p_diff, s->sum_p_diff2, n, &pm, &pu);
    cn_buf_printf(b, "\n====== Token probability statistics ======\n");
    cn_buf_printf(b, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * pm, 100.0 * pu);
    cn_buf_printf(b, "Maximum Δp: %6.3f%%\n", 100.0 * p_diff[n - 1]);
    cn_buf_printf(b, "99.0%%   Δp: %6.3f%%\n", 100.0 * percentile(p_diff, n, 0.990f));
    cn_buf_printf(b, "Median  Δp: %6.3f%%\n", 100.0 * median(p_diff, n));
    cn_buf_printf(b, " 1.0%%   Δp: %6.3f%%\n", 100.0 * percentile(p_diff, n, 0.010f));
    cn_buf_printf(b, "Minimum Δp: %6.3f%%\n", 100.0 * p_diff[0]);
    double mse, mseu;
    mean_unc(s->sum_p_diff2, s->sum_p_diff4, n, &mse, &mseu);
    const double rms = sqrt(mse);
    cn_buf_printf(b, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * rms, rms > 0 ? 100.0 * 0.5 / rms * mseu : 0.0);
    const double same = (double)s->n_same_top / (double)n;
    cn_buf_printf(b, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * same,
                  100.0 * sqrt(same * (1.0 - same) / (double)(n - 1)));
}

cn_status cn_logits_file_report(cn_logits_file *f, char **out, cn_error *err) {
    *out = NULL;
    if (!f->in) return cn_err(err, CN_STATUS_INVALID_ARG, "logits file: %s was not opened for comparing", f->path);
    const int64_t n = f->s.count;
    cn_buf b = {0};
    if (n < 2) {
        cn_buf_printf(&b, "too few positions (%lld) for statistics\n", (long long)n);
    } else {
        qsort(f->kld, (size_t)n, sizeof *f->kld, cmp_float);
        qsort(f->p_diff, (size_t)n, sizeof *f->p_diff, cmp_float);
        report_ppl(&b, &f->s);
        report_kld(&b, &f->s, f->kld);
        report_p_diff(&b, &f->s, f->p_diff);
    }
    if (!(*out = cn_buf_take(&b, NULL))) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    return CN_STATUS_OK;
}
