/* textrun.c — a model, a context, a batch and a text's tokens for perplexity and imatrix
 * (textrun.h). */
#include "textrun.h"

#include <stdlib.h>

#include "cli.h"

int cli_text_run_open(cli_text_run *r, const char *cmd, const char *model_path, const cn_context_params *cp,
                      const char *text, size_t n_text, bool parse_special) {
    *r = (cli_text_run){0};
    cn_error err = {0};
    cn_status st = cn_cli_model_load(model_path, &r->model, &err);
    if (st == CN_STATUS_OK) st = cn_context_create(r->model, cp, &r->ctx, &err);
    if (st == CN_STATUS_OK) st = cn_batch_init(&r->batch, cp->n_batch, &err);
    if (st == CN_STATUS_OK && text)
        st = cn_tokenize_alloc(cn_context_tokenizer(r->ctx), text, n_text, true, parse_special, &r->tokens,
                               &r->n_tokens, &err);
    if (st == CN_STATUS_OK) return 0;
    cn_cli_errorf("%s: %s", cmd, err.msg);
    return 1;
}

void cli_text_run_close(cli_text_run *r) {
    free(r->tokens);
    cn_batch_free(&r->batch);
    cn_context_free(r->ctx);
    cn_model_free(r->model);
    *r = (cli_text_run){0};
}
