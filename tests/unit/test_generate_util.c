/* test_generate_util.c — see test_generate_util.h. */
#include "test_generate_util.h"

#include <criterion/criterion.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void open_runner(gt_env *e, int32_t n_ctx, int32_t n_batch, int32_t max_seqs) {
    cn_error err = {0};
    cr_assert_eq(cn_tokenizer_load(cn_model_gguf(e->model), &e->tok, &err), CN_STATUS_OK, "%s", err.msg);
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = 1;
    cp.n_batch_max = n_batch;
    cp.n_ctx = n_ctx;
    cr_assert_eq(cn_fwd_create(e->model, &cp, &e->fwd, &err), CN_STATUS_OK, "%s", err.msg);
    cn_kv_params kp = cn_model_kv_params(e->model);
    kp.max_seqs = max_seqs;
    kp.block_tokens = 4; /* small blocks: beams share and copy many of them */
    kp.n_blocks = (int64_t)max_seqs * (n_ctx / kp.block_tokens + 2);
    cr_assert_eq(cn_kv_create(&kp, &e->kv, &err), CN_STATUS_OK, "%s", err.msg);
    e->n_vocab = cn_model_hparams(e->model)->n_vocab;
    e->run = (cn_gen_runner){e->model, e->fwd, e->kv, n_batch};
}

void gt_open_stories(gt_env *e, int32_t n_ctx, int32_t n_batch, int32_t max_seqs) {
    memset(e, 0, sizeof *e);
    const char *d = getenv("CINDER_TESTDATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", d && *d ? d : "../shared/testdata");
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &e->model, &err), CN_STATUS_OK, "%s", err.msg);
    open_runner(e, n_ctx, n_batch, max_seqs);
}

void gt_open_gguf(gt_env *e, cn_gguf *g, int32_t n_ctx, int32_t n_batch, int32_t max_seqs) {
    memset(e, 0, sizeof *e);
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_from_gguf(g, &mp, &e->model, &err), CN_STATUS_OK, "%s", err.msg);
    open_runner(e, n_ctx, n_batch, max_seqs);
}

void gt_close(gt_env *e) {
    cn_kv_free(e->kv);
    cn_fwd_free(e->fwd);
    cn_tokenizer_free(e->tok);
    cn_model_free(e->model);
    memset(e, 0, sizeof *e);
}

int32_t *gt_tokenize(const cn_tokenizer *t, const char *text, bool add_special, int32_t *n) {
    size_t cnt = 0, again = 0;
    cn_error err = {0};
    cr_assert_eq(cn_tokenize(t, text, strlen(text), add_special, false, NULL, 0, &cnt, &err), CN_STATUS_OK, "%s",
                 err.msg);
    int32_t *ids = malloc((cnt + 1) * sizeof *ids);
    cr_assert(ids);
    cr_assert_eq(cn_tokenize(t, text, strlen(text), add_special, false, ids, cnt, &again, &err), CN_STATUS_OK, "%s",
                 err.msg);
    *n = (int32_t)cnt;
    return ids;
}

bool gt_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
        else return false;
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

static void rec_text(void *user, const char *text, size_t n) {
    gt_rec *r = user;
    cr_assert(n > 0, "on_text with an empty piece");
    if (!gt_utf8_valid(text, n)) r->all_valid = false;
    cr_assert(r->n_text + n < sizeof r->text);
    memcpy(r->text + r->n_text, text, n);
    r->n_text += n;
    r->text[r->n_text] = '\0';
    r->n_pieces++;
}

static void rec_token(void *user, const cn_gen_token *t) {
    gt_rec *r = user;
    cr_assert_eq(t->index, r->n_tokens);
    if (r->n_tokens < (int)(sizeof r->tokens / sizeof r->tokens[0])) r->tokens[r->n_tokens] = t->id;
    r->n_tokens++;
}

static bool rec_cancel(void *user) {
    gt_rec *r = user;
    r->n_cancel_asks++;
    return r->cancel_after >= 0 && r->n_tokens >= r->cancel_after;
}

void gt_rec_init(gt_rec *r) {
    memset(r, 0, sizeof *r);
    r->all_valid = true;
    r->cancel_after = -1;
}

void gt_rec_attach(gt_rec *r, cn_gen_params *p) {
    p->on_text = rec_text;
    p->on_token = rec_token;
    p->should_cancel = rec_cancel;
    p->user = r;
}

void gt_onehot(float *row, int32_t n, int32_t id) {
    for (int32_t i = 0; i < n; i++) row[i] = -100.0f;
    row[id] = 10.0f;
}

int gt_pcre_verdict(const char *re, const char *text, size_t n) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    cr_assert(code, "PCRE2 cannot compile %s", re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int rc = pcre2_match(code, (PCRE2_SPTR)text, n, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL);
    int v = rc >= 0 ? 1 : -1;
    if (v < 0) {
        rc = pcre2_match(code, (PCRE2_SPTR)text, n, 0, PCRE2_ANCHORED | PCRE2_PARTIAL_HARD, md, NULL);
        v = rc == PCRE2_ERROR_PARTIAL || rc >= 0 ? 0 : -1;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return v;
}
