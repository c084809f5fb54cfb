/* fim.c — fill-in-the-middle prompts: the FIM marker tokens a tokenizer found
 * (tokenizer.c's set_fim) and the token layout of a hole with its repository context,
 * exactly as llama-server's format_prompt_infill builds it (tools/server/server-common.cpp
 * in llama.cpp), budget included, so a served /infill and llama-server's agree token for
 * token. It only lays out tokens: no model, no generation. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "text/tokenizer_impl.h"

int32_t cn_tokenizer_fim(const cn_tokenizer *t, cn_fim_token which) {
    if (!t || (int)which < 0 || which >= CN_FIM_N_TOKENS) return -1;
    return t->fim[which];
}

cn_fim_params cn_fim_default_params(void) { return (cn_fim_params){.n_batch = 2048, .n_extra_max = -1}; }

/* Appends text's tokens (no BOS/EOS) to v. */
static cn_status push_text(const cn_tokenizer *t, cn_tok_vec *v, const char *text, size_t n, bool parse_special,
                           cn_error *err) {
    if (n == 0) return CN_STATUS_OK;
    int32_t *ids = NULL;
    size_t k = 0;
    cn_status st = cn_tokenize_alloc(t, text, n, false, parse_special, &ids, &k, err);
    for (size_t i = 0; st == CN_STATUS_OK && i < k; i++)
        if (!cn_tok_vec_push(v, ids[i])) st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    free(ids);
    return st;
}

static cn_status push_id(cn_tok_vec *v, int32_t id, cn_error *err) {
    return cn_tok_vec_push(v, id) ? CN_STATUS_OK : cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
}

static cn_status push_ids(cn_tok_vec *v, const int32_t *ids, size_t n, cn_error *err) {
    for (size_t i = 0; i < n; i++)
        if (!cn_tok_vec_push(v, ids[i])) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    return CN_STATUS_OK;
}

static cn_status push_str(const cn_tokenizer *t, cn_tok_vec *v, const char *s, cn_error *err) {
    return push_text(t, v, s, strlen(s), false, err);
}

/* The repository context: REP "myproject\n", each chunk after SEP "filename\n" (or the
 * snippet separator), then SEP "filename\n" for the file being filled. */
static cn_status extra_tokens(const cn_tokenizer *t, const cn_fim_params *p, cn_tok_vec *v, cn_error *err) {
    const int32_t rep = t->fim[CN_FIM_REP], sep = t->fim[CN_FIM_SEP];
    cn_status st = CN_STATUS_OK;
    if (rep >= 0 && (st = push_id(v, rep, err)) == CN_STATUS_OK) st = push_str(t, v, "myproject\n", err);
    for (size_t i = 0; st == CN_STATUS_OK && i < p->n_extra; i++) {
        const cn_fim_chunk *c = &p->extra[i];
        if (sep >= 0) {
            const char *fn = c->filename ? c->filename : "tmp";
            const size_t n = strlen(fn);
            char *line = malloc(n + 2);
            if (!line) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
            memcpy(line, fn, n);
            line[n] = '\n';
            line[n + 1] = 0;
            if ((st = push_id(v, sep, err)) == CN_STATUS_OK) st = push_text(t, v, line, n + 1, false, err);
            free(line);
        } else {
            st = push_str(t, v, "\n\n--- snippet ---\n\n", err);
        }
        if (st == CN_STATUS_OK && c->text) st = push_str(t, v, c->text, err);
    }
    if (st == CN_STATUS_OK && sep >= 0 && (st = push_id(v, sep, err)) == CN_STATUS_OK)
        st = push_str(t, v, "filename\n", err);
    return st;
}

cn_status cn_fim_prompt(const cn_tokenizer *t, const cn_fim_params *p, int32_t **ids, size_t *n_ids, cn_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!t || !p) return cn_err(err, CN_STATUS_INVALID_ARG, "no tokenizer or parameters");
    const int32_t pre = t->fim[CN_FIM_PRE], suf = t->fim[CN_FIM_SUF], mid = t->fim[CN_FIM_MID];
    if (pre < 0 || suf < 0 || mid < 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "this model has no fill-in-the-middle tokens (missing:%s%s%s)",
                      pre < 0 ? " prefix" : "", suf < 0 ? " suffix" : "", mid < 0 ? " middle" : "");
    if (p->n_batch < 4 || p->n_batch > (1 << 20))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_batch", "n_batch = %d is out of range: must be in [4, %d]",
                            p->n_batch, 1 << 20);
    if (p->n_extra_max < -1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_extra_max",
                            "n_extra_max = %d is out of range: must be >= 0, or -1 for all", p->n_extra_max);
    if (p->n_extra && !p->extra) return cn_err_param(err, CN_STATUS_INVALID_ARG, "extra", "n_extra > 0 without extra");

    cn_tok_vec prefix = {0}, suffix = {0}, prompt = {0}, extra = {0}, out = {0};
    const char *ps = p->prefix ? p->prefix : "", *ss = p->suffix ? p->suffix : "";
    cn_status st = push_text(t, &prefix, ps, strlen(ps), false, err);
    if (st == CN_STATUS_OK) st = push_text(t, &suffix, ss, strlen(ss), false, err);
    if (st == CN_STATUS_OK && p->prompt) st = push_text(t, &prompt, p->prompt, strlen(p->prompt), true, err);
    if (st == CN_STATUS_OK) st = extra_tokens(t, p, &extra, err);
    if (st != CN_STATUS_OK) goto done;

    /* llama-server's budget: prefix:suffix = 3:1 of one batch; extra context fills the rest */
    const int64_t q = p->n_batch / 4;
    const size_t n_pre = CN_MIN(prefix.n, (size_t)(3 * q));
    const int64_t suf_room = q - (2 + (int64_t)prompt.n);
    const size_t n_suf = CN_MIN(suffix.n, (size_t)(suf_room > 0 ? suf_room : 0));
    const size_t n_ext = p->n_extra_max < 0 ? extra.n : CN_MIN(extra.n, (size_t)p->n_extra_max);
    const int32_t *pre_ids = prefix.v + (prefix.n - n_pre); /* the prefix's end: nearest the hole */

    st = push_ids(&out, extra.v + (extra.n - n_ext), n_ext, err);
    if (st == CN_STATUS_OK && cn_tokenizer_add_bos(t)) st = push_id(&out, t->bos, err);
    for (int part = 0; part < 2 && st == CN_STATUS_OK; part++) {
        if ((part == 0) != p->spm) { /* PRE prefix prompt */
            if ((st = push_id(&out, pre, err)) == CN_STATUS_OK &&
                (st = push_ids(&out, pre_ids, n_pre, err)) == CN_STATUS_OK)
                st = push_ids(&out, prompt.v, prompt.n, err);
        } else { /* SUF suffix */
            if ((st = push_id(&out, suf, err)) == CN_STATUS_OK) st = push_ids(&out, suffix.v, n_suf, err);
        }
    }
    if (st == CN_STATUS_OK) st = push_id(&out, mid, err);
    if (st == CN_STATUS_OK) {
        *ids = out.v;
        *n_ids = out.n;
        out.v = NULL;
    }
done:
    free(prefix.v);
    free(suffix.v);
    free(prompt.v);
    free(extra.v);
    free(out.v);
    return st;
}
