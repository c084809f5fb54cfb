/* test_generate_util.h — helpers for the generation and beam-search tests: stories260K
 * (model, tokenizer, a runner with its context and KV cache), one-hot logits rows, and a
 * recorder for the streaming callbacks. */
#ifndef TEST_GENERATE_UTIL_H
#define TEST_GENERATE_UTIL_H

#include "gen/generate.h"

/* A loaded model with its tokenizer and a runner (forward scratch + KV) over max_seqs sequences. */
typedef struct {
    cn_model *model;
    cn_tokenizer *tok;
    cn_fwd *fwd;
    cn_kv *kv;
    cn_gen_runner run;
    int32_t n_vocab;
} gt_env;

/* stories260K from $CINDER_TESTDATA or ../shared/testdata. */
void gt_open_stories(gt_env *e, int32_t n_ctx, int32_t n_batch, int32_t max_seqs);
/* A model already parsed from GGUF bytes (takes g). */
void gt_open_gguf(gt_env *e, cn_gguf *g, int32_t n_ctx, int32_t n_batch, int32_t max_seqs);
void gt_close(gt_env *e);

/* Tokenizes text (add_special: BOS as the model says); *n gets the count; free() it. */
int32_t *gt_tokenize(const cn_tokenizer *t, const char *text, bool add_special, int32_t *n);

/* Streaming recorder: the concatenation of on_text pieces, how many, whether each was
 * valid UTF-8 on its own, and the tokens on_token saw. */
typedef struct {
    char text[8192];
    size_t n_text;
    int n_pieces;
    bool all_valid;
    int32_t tokens[1024];
    int n_tokens;
    int cancel_after; /* should_cancel returns true once this many tokens were seen (-1: never) */
    int n_cancel_asks;
} gt_rec;
void gt_rec_init(gt_rec *r);
/* Points p's callbacks at r. */
void gt_rec_attach(gt_rec *r, cn_gen_params *p);
bool gt_utf8_valid(const char *s, size_t n);

/* A logits row (n) of -100 with 10 at id: the chain picks id whatever its settings. */
void gt_onehot(float *row, int32_t n, int32_t id);

/* PCRE2 as the independent check of a regex grammar's output, on the whole text: 1 a
 * full match, 0 a valid prefix (a partial match: the output was cut short), -1 neither. */
int gt_pcre_verdict(const char *re, const char *text, size_t n);

#endif
