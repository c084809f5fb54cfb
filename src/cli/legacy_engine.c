/* legacy_engine.c — TRANSITIONAL (see legacy_engine.h): perplexity.c's loader until it
 * stands on the public low tier. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "genopts.h"

int cli_engine_load(cli_engine *e, const cli_gen_opts *o) {
    memset(e, 0, sizeof *e);
    char buf[4096];
    const char *path = cli_model_path(o, buf, sizeof buf);
    if (!o->model && access(path, R_OK) != 0) {
        cn_cli_errorf("%s: the default model %s is missing: run scripts/fetch_models.sh, or give -m MODEL", o->cmd,
                      path);
        return 1;
    }
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    if (cn_model_load(path, &mp, &e->model, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(e->model), &e->tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 1;
    }
    const cn_hparams *hp = cn_model_hparams(e->model);
    e->n_vocab = hp->n_vocab;
    e->n_ctx = o->n_ctx ? o->n_ctx : CN_MIN(hp->n_ctx_train, 4096);
    return 0;
}

int cli_engine_start(cli_engine *e, const cli_gen_opts *o, int32_t n_batch, int32_t n_seqs, int64_t n_blocks) {
    cn_error err = {0};
    cn_kv_params kp = cn_model_kv_params(e->model);
    kp.max_seqs = n_seqs;
    kp.n_blocks = n_blocks > 0 ? n_blocks : (int64_t)n_seqs * ((e->n_ctx + kp.block_tokens - 1) / kp.block_tokens);
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = o->n_threads ? o->n_threads : (int32_t)CN_MAX(1, CN_MIN(sysconf(_SC_NPROCESSORS_ONLN), 64));
    cp.n_batch_max = n_batch;
    cp.n_ctx = e->n_ctx;
    if (cn_kv_create(&kp, &e->kv, &err) != CN_STATUS_OK || cn_ctx_create(e->model, &cp, &e->ctx, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 1;
    }
    return 0;
}

void cli_engine_close(cli_engine *e) {
    cn_ctx_free(e->ctx);
    cn_kv_free(e->kv);
    cn_tokenizer_free(e->tok);
    cn_model_free(e->model);
    memset(e, 0, sizeof *e);
}

int32_t *cli_tokenize(const cli_engine *e, const char *text, int32_t *n) {
    int32_t *ids = NULL;
    size_t cnt = 0;
    cn_error err = {0};
    if (cn_tokenize_alloc(e->tok, text, strlen(text), true, true, &ids, &cnt, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        return NULL;
    }
    if (!ids) ids = malloc(sizeof *ids); /* an empty text: a valid, empty array */
    *n = (int32_t)cnt;
    return ids;
}
