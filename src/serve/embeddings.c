/* embeddings.c — POST /v1/embeddings (see embeddings.h). Text inputs are tokenized as
 * llama-server tokenizes its embedding inputs (BOS/EOS as the model says, special-token
 * texts parsed). `dimensions` is OpenAI's option for models trained to be cut short
 * (text-embedding-3); these models are not, so as OpenAI answers for its other models, a
 * value other than the model's own width is a 400. */
#include "serve/embeddings.h"

#include <stdlib.h>
#include <string.h>

#include "serve/validate.h"

static const char *const FIELDS[] = {"input", "model", "encoding_format", "dimensions", "user"};

void emb_request_free(emb_request *r) {
    if (!r) return;
    for (size_t i = 0; r->ids && i < r->n; i++) free(r->ids[i]);
    free(r->ids);
    free(r->n_ids);
    memset(r, 0, sizeof *r);
}

/* Input i from a JSON string or an array of token ids. */
static bool one_input(const oai_ctx *c, json_t *x, size_t i, emb_request *r, oai_error *e) {
    if (json_is_string(x)) {
        if (json_string_length(x) == 0) return val_bad(e, "input", "input[%zu] is empty", i);
        size_t k = 0;
        cn_error err = {0};
        const cn_status st = cn_tokenize_alloc(c->tok, json_string_value(x), json_string_length(x), true, true,
                                               &r->ids[i], &k, &err);
        if (st == CN_STATUS_NO_MEMORY) return val_oom(e);
        if (st != CN_STATUS_OK) return val_bad(e, "input", "input[%zu]: %s", i, err.msg);
        if (k == 0 || k > (size_t)INT32_MAX / 2)
            return val_bad(e, "input", "input[%zu] gives %s", i, k ? "too many tokens" : "no tokens");
        r->n_ids[i] = (int32_t)k;
        return true;
    }
    if (!json_is_array(x) || json_array_size(x) == 0)
        return val_bad(e, "input", "input[%zu] must be a non-empty string or a non-empty array of token ids", i);
    const size_t k = json_array_size(x);
    if (k > (size_t)INT32_MAX / 2) return val_bad(e, "input", "an input is too long");
    if (!(r->ids[i] = malloc(k * sizeof *r->ids[i]))) return val_oom(e);
    for (size_t j = 0; j < k; j++) {
        json_t *t = json_array_get(x, j);
        const json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (v < 0 || v >= c->n_vocab)
            return val_bad(e, "input", "input[%zu][%zu] is not a token id in [0, %d)", i, j, c->n_vocab);
        r->ids[i][j] = (int32_t)v;
    }
    r->n_ids[i] = (int32_t)k;
    return true;
}

bool emb_parse(const oai_ctx *c, int32_t n_embd, int32_t n_batch, json_t *body, emb_request *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    const char *k = val_unknown_key(body, FIELDS, ARRAY_LEN(FIELDS));
    if (k)
        return oai_fail(e, 400, "invalid_request_error", k, "unsupported_parameter",
                        "unsupported field '%s' for /v1/embeddings", k);
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return val_bad(e, "model", "'model' must be a string");
        if (strcmp(json_string_value(model), c->model_id))
            return oai_fail(e, 404, "invalid_request_error", "model", "model_not_found",
                            "The model '%.200s' does not exist: this server serves '%.200s'", json_string_value(model),
                            c->model_id);
    }
    json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        if (strcmp(f, "float") && strcmp(f, "base64"))
            return val_bad(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(f, "base64");
    }
    json_t *dim = json_object_get(body, "dimensions");
    if (dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1)
            return val_bad(e, "dimensions", "'dimensions' must be a positive integer");
        if (json_integer_value(dim) != n_embd)
            return oai_fail(e, 400, "invalid_request_error", "dimensions", NULL,
                            "This model does not support specifying dimensions: its embeddings have %d (cutting them "
                            "short is only meaningful for models trained for it)",
                            n_embd);
    }
    json_t *user = json_object_get(body, "user");
    if (user && !json_is_null(user) && !json_is_string(user)) return val_bad(e, "user", "'user' must be a string");
    json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in)) return val_bad(e, "input", "'input' is required");
    /* one input (a string, or one list of ids), or a list of them */
    const bool many = json_is_array(in) && json_array_size(in) > 0 && !json_is_integer(json_array_get(in, 0));
    if (!json_is_string(in) && !json_is_array(in))
        return val_bad(e, "input",
                       "'input' must be a string, an array of strings, an array of token ids, or an array of "
                       "arrays of token ids");
    if (json_is_array(in) && json_array_size(in) == 0) return val_bad(e, "input", "'input' is an empty array");
    r->n = many ? json_array_size(in) : 1;
    if (r->n > EMB_MAX_INPUTS) return val_bad(e, "input", "at most %d inputs per request", EMB_MAX_INPUTS);
    r->ids = calloc(r->n, sizeof *r->ids);
    r->n_ids = calloc(r->n, sizeof *r->n_ids);
    if (!r->ids || !r->n_ids) {
        r->n = 0;
        return val_oom(e);
    }
    for (size_t i = 0; i < r->n; i++) {
        if (!one_input(c, many ? json_array_get(in, i) : in, i, r, e)) return false;
        if (r->n_ids[i] > n_batch)
            return oai_fail(e, 400, "invalid_request_error", "input", "context_length_exceeded",
                            "input[%zu] has %d tokens: the most one input may have is %d (serve --embd-batch)", i,
                            r->n_ids[i], n_batch);
    }
    return true;
}

static json_t *base64_of(const float *v, int32_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4, n_out = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb);
    char *o = malloc(n_out + 1);
    json_t *s = NULL;
    if (b && o) {
        for (int32_t i = 0; i < n; i++) { /* little-endian float32, as numpy's frombuffer reads it */
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t j = 0;
        for (size_t i = 0; i < nb; i += 3) {
            const uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                               (i + 2 < nb ? b[i + 2] : 0);
            o[j++] = tab[w >> 18 & 63];
            o[j++] = tab[w >> 12 & 63];
            o[j++] = i + 1 < nb ? tab[w >> 6 & 63] : '=';
            o[j++] = i + 2 < nb ? tab[w & 63] : '=';
        }
        s = json_stringn(o, j);
    }
    free(b);
    free(o);
    return s;
}

json_t *emb_response(const emb_request *r, const char *model, const float *vec, int32_t n_embd) {
    json_t *data = json_array();
    int64_t n_tok = 0;
    for (size_t i = 0; data && i < r->n; i++) {
        const float *v = vec + i * (size_t)n_embd;
        json_t *emb;
        if (r->base64) {
            emb = base64_of(v, n_embd);
        } else {
            emb = json_array();
            for (int32_t j = 0; emb && j < n_embd; j++) json_array_append_new(emb, json_real(v[j]));
        }
        if (!emb || json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object", "embedding", "index",
                                                          (json_int_t)i, "embedding", emb))) {
            json_decref(data);
            return NULL;
        }
        n_tok += r->n_ids[i];
    }
    if (!data) return NULL;
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", model, "usage",
                     "prompt_tokens", (json_int_t)n_tok, "total_tokens", (json_int_t)n_tok);
}
