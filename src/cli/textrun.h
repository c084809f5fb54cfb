/* textrun.h — what the tools that run a model over a text file share (perplexity,
 * imatrix): the model, one context on it, a batch and the text's tokens, opened by one
 * call that prints its own error. The chunking, and what is measured, stay each tool's. */
#ifndef CN_CLI_TEXTRUN_H
#define CN_CLI_TEXTRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinder.h"

typedef struct {
    cn_model *model;
    cn_context *ctx;
    cn_batch batch;  /* cp->n_batch rows */
    int32_t *tokens; /* (n_tokens) the text's, BOS first when the model adds one; NULL without a text */
    size_t n_tokens;
} cli_text_run;

/* Loads model_path, makes a context on it with cp and a batch of cp->n_batch rows, and
 * tokenizes text[0..n_text) when text is not NULL (special tokens parsed when
 * parse_special). 0, or 1 after the message "cmd: <why>"; close r either way. */
int cli_text_run_open(cli_text_run *r, const char *cmd, const char *model_path, const cn_context_params *cp,
                      const char *text, size_t n_text, bool parse_special);
void cli_text_run_close(cli_text_run *r); /* a zeroed or half-opened r too */

#endif
