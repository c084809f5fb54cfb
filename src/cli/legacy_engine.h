/* legacy_engine.h — TRANSITIONAL, for perplexity.c alone: the old model loader on internal
 * handles (cn_ctx, cn_kv) that run, chat, explain and bench --spec no longer use (they
 * stand on cn_context). perplexity.c is being rewritten on the public low tier
 * (cn_context_decode) in another branch; delete this file and its .c when that lands.
 * Nothing new may use it. */
#ifndef CN_CLI_LEGACY_ENGINE_H
#define CN_CLI_LEGACY_ENGINE_H

#include "core/core.h"
#include "kv/kv.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct {
    cn_model *model;
    cn_tokenizer *tok;
    cn_ctx *ctx;
    cn_kv *kv;
    int32_t n_vocab, n_ctx;
} cli_engine;

int cli_engine_load(cli_engine *e, const cli_gen_opts *o);
int cli_engine_start(cli_engine *e, const cli_gen_opts *o, int32_t n_batch, int32_t n_seqs, int64_t n_blocks);
void cli_engine_close(cli_engine *e);
int32_t *cli_tokenize(const cli_engine *e, const char *text, int32_t *n);

#endif
