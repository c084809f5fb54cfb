/* logits_file.h — llama-perplexity's log-probability file (--kl-divergence-base), read and
 * written, and the KL statistics it is compared with, as llama-perplexity computes them:
 * so `cinder perplexity --save-logits` makes a file llama-perplexity --kl-divergence can
 * read, and `--kl-base` reads the one llama-perplexity writes.
 *
 * Layout (little-endian, no padding): "_logits_", uint32 n_ctx, int32 n_vocab, int32
 * n_chunk, int32 tokens[n_chunk * n_ctx] (the text's tokens, BOS first when the model
 * adds one; each chunk is evaluated with its first token replaced by BOS), then for every
 * chunk and each of its scored positions i in [n_ctx/2, n_ctx - 1) one row of
 * nv = 2*((n_vocab+1)/2) + 4 uint16: float scale, float min_log_prob (in the first four),
 * then n_vocab quantized log-probabilities: log p = scale * q + min_log_prob, where
 * min_log_prob is the log-probability 16 nats below the top (or the smallest, if nearer)
 * and q = 0 for everything below it. */
#ifndef CN_CLI_LOGITS_FILE_H
#define CN_CLI_LOGITS_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
} logits_header;

/* uint16 per row of the file. */
static inline size_t logits_row_len(int32_t n_vocab) { return 2 * (((size_t)n_vocab + 1) / 2) + 4; }

/* Reads and checks the header; tokens (n_chunk * n_ctx, malloc'd) into *tokens. False
 * after printing an error naming the file. */
bool logits_file_read_header(FILE *f, const char *path, logits_header *h, int32_t **tokens);
bool logits_file_write_header(FILE *f, const logits_header *h, const int32_t *tokens);

/* Fills one row (logits_row_len) from the logits; returns the token's negative
 * log-likelihood, as llama-perplexity computes it. */
double logits_row_pack(const float *logits, int32_t n_vocab, int32_t tok, uint16_t *row);

/* The running sums of llama-perplexity's kl_divergence_result. */
typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    int64_t n_same_top, count;
} kl_sums;

/* One position: logits of the model under test against a base row; adds to s and
 * returns the KL divergence, *p_diff the change in the correct token's probability. */
double logits_row_kl(const float *logits, int32_t n_vocab, const uint16_t *base, int32_t tok, kl_sums *s,
                     float *p_diff);

/* The closing report under llama-perplexity's labels ("Mean PPL(Q)", "Mean    KLD",
 * "Median  KLD", "Same top p", ...), to out. kld and p_diff (count values each) are sorted. */
void kl_report(FILE *out, const kl_sums *s, float *kld, float *p_diff);

#endif
