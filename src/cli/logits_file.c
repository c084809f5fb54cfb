/* logits_file.c — llama-perplexity's log-probability file and KL statistics (see
 * logits_file.h). The arithmetic follows tools/perplexity/perplexity.cpp expression for
 * expression (float where it uses float, double where it sums in double), so a file
 * cinder writes is the file llama-perplexity would write for the same logits, and the
 * figures it reports are computed the same way. */
#include "logits_file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_VOCAB (1 << 24)
#define MAX_CTX (1 << 20)

bool logits_file_read_header(FILE *f, const char *path, logits_header *h, int32_t **tokens) {
    char magic[8];
    *tokens = NULL;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "_logits_", 8) != 0) {
        cn_cli_errorf("perplexity: %s is not a log-probability file (no \"_logits_\" header)", path);
        return false;
    }
    if (fread(&h->n_ctx, 4, 1, f) != 1 || fread(&h->n_vocab, 4, 1, f) != 1 || fread(&h->n_chunk, 4, 1, f) != 1) {
        cn_cli_errorf("perplexity: %s: truncated header", path);
        return false;
    }
    if (h->n_ctx < 8 || h->n_ctx > MAX_CTX || h->n_vocab < 1 || h->n_vocab > MAX_VOCAB || h->n_chunk < 1 ||
        (uint64_t)h->n_chunk * h->n_ctx > (1u << 30)) {
        cn_cli_errorf("perplexity: %s: implausible header (n_ctx %u, n_vocab %d, n_chunk %d)", path, h->n_ctx,
                      h->n_vocab, h->n_chunk);
        return false;
    }
    const size_t n = (size_t)h->n_chunk * h->n_ctx;
    *tokens = malloc(n * sizeof **tokens);
    if (!*tokens || fread(*tokens, sizeof **tokens, n, f) != n) {
        cn_cli_errorf("perplexity: %s: %s", path, *tokens ? "truncated token list" : "out of memory");
        free(*tokens);
        *tokens = NULL;
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if ((*tokens)[i] < 0 || (*tokens)[i] >= h->n_vocab) {
            cn_cli_errorf("perplexity: %s: token %d at %zu is outside the vocabulary of %d", path, (*tokens)[i], i,
                          h->n_vocab);
            free(*tokens);
            *tokens = NULL;
            return false;
        }
    }
    return true;
}

bool logits_file_write_header(FILE *f, const logits_header *h, const int32_t *tokens) {
    const size_t n = (size_t)h->n_chunk * h->n_ctx;
    return fwrite("_logits_", 1, 8, f) == 8 && fwrite(&h->n_ctx, 4, 1, f) == 1 && fwrite(&h->n_vocab, 4, 1, f) == 1 &&
           fwrite(&h->n_chunk, 4, 1, f) == 1 && fwrite(tokens, sizeof *tokens, n, f) == n;
}

/* Round to nearest by the 1.5 * 2^23 trick, as llama-perplexity's nearest_int. */
static int nearest(float v) {
    float b = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &b, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

double logits_row_pack(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row) {
    float max_logit = logits[0], min_logit = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) {
        max_logit = logits[i] > max_logit ? logits[i] : max_logit;
        min_logit = logits[i] < min_logit ? logits[i] : min_logit;
    }
    min_logit = min_logit > max_logit - 16 ? min_logit : max_logit - 16;
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
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
    if (n_vocab % 2)
        q[n_vocab] = 0; /* the row's padding element */
    return max_logit + log_sum_exp - logits[tok];
}

double logits_row_kl(const float *logits, int32_t n_vocab, const uint16_t *base, int32_t tok, kl_sums *s,
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
    for (int32_t i = 0; i < n_vocab; i++)
        sum_exp += expf(logits[i] - max_logit);
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

void kl_report(FILE *out, const kl_sums *s, float *kld, float *p_diff) {
    const int64_t n = s->count;
    if (n < 2) {
        fprintf(out, "too few positions (%lld) for statistics\n", (long long)n);
        return;
    }
    qsort(kld, (size_t)n, sizeof *kld, cmp_float);
    qsort(p_diff, (size_t)n, sizeof *p_diff, cmp_float);
    double lp, lpu, lb, lbu;
    mean_unc(s->sum_nll, s->sum_nll2, n, &lp, &lpu);
    mean_unc(s->sum_nll_base, s->sum_nll_base2, n, &lb, &lbu);
    const double cov = covariance(s->sum_nll, s->sum_nll_base, s->sum_nll_nll_base, n);
    const double ppl = exp(lp), ppl_base = exp(lb);
    const double ratio_unc = sqrt(lpu * lpu + lbu * lbu - 2.0 * cov);
    fprintf(out, "====== Perplexity statistics ======\n");
    fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl * lpu);
    fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_base, ppl_base * lbu);
    fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cov / (lpu * lbu));
    fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lp - lb, ratio_unc);
    fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lp - lb), exp(lp - lb) * ratio_unc);
    fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", ppl - ppl_base,
            sqrt(ppl * lpu * ppl * lpu + ppl_base * lbu * ppl_base * lbu - 2.0 * ppl * ppl_base * cov));
    fprintf(out, "\n====== KL divergence statistics ======\n");
    double km, ku;
    mean_unc(s->sum_kld, s->sum_kld2, n, &km, &ku);
    fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", km, ku);
    fprintf(out, "Maximum KLD: %10.6f\n", kld[n - 1]);
    fprintf(out, "99.9%%   KLD: %10.6f\n", percentile(kld, n, 0.999f));
    fprintf(out, "99.0%%   KLD: %10.6f\n", percentile(kld, n, 0.990f));
    fprintf(out, "95.0%%   KLD: %10.6f\n", percentile(kld, n, 0.950f));
    fprintf(out, "90.0%%   KLD: %10.6f\n", percentile(kld, n, 0.900f));
    fprintf(out, "Median  KLD: %10.6f\n", median(kld, n));
    fprintf(out, "10.0%%   KLD: %10.6f\n", percentile(kld, n, 0.100f));
    fprintf(out, "Minimum KLD: %10.6f\n", kld[0]);
    fprintf(out, "\n====== Token probability statistics ======\n");
    double pm, pu;
    mean_unc(s->sum_p_diff, s->sum_p_diff2, n, &pm, &pu);
    fprintf(out, "Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * pm, 100.0 * pu);
    fprintf(out, "Maximum Δp: %6.3f%%\n", 100.0 * p_diff[n - 1]);
    fprintf(out, "99.0%%   Δp: %6.3f%%\n", 100.0 * percentile(p_diff, n, 0.990f));
    fprintf(out, "Median  Δp: %6.3f%%\n", 100.0 * median(p_diff, n));
    fprintf(out, " 1.0%%   Δp: %6.3f%%\n", 100.0 * percentile(p_diff, n, 0.010f));
    fprintf(out, "Minimum Δp: %6.3f%%\n", 100.0 * p_diff[0]);
    double mse, mseu;
    mean_unc(s->sum_p_diff2, s->sum_p_diff4, n, &mse, &mseu);
    const double rms = sqrt(mse);
    fprintf(out, "RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * rms, rms > 0 ? 100.0 * 0.5 / rms * mseu : 0.0);
    const double same = (double)s->n_same_top / (double)n;
    fprintf(out, "Same top p: %6.3f ± %5.3f %%\n", 100.0 * same, 100.0 * sqrt(same * (1.0 - same) / (double)(n - 1)));
}
