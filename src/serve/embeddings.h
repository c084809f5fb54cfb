/* embeddings.h — OpenAI's POST /v1/embeddings: the request (input as a string, strings,
 * token ids or lists of token ids; encoding_format; dimensions; model; user) to token
 * lists for cn_embedder_embed, and the vectors to OpenAI's list response. Pure
 * translation like openai.c: no sockets, no threads, no library calls but tokenizing. */
#ifndef CN_SERVE_EMBEDDINGS_H
#define CN_SERVE_EMBEDDINGS_H

#include "serve/openai.h"

#define EMB_MAX_INPUTS 2048 /* inputs per request (OpenAI's limit) */

typedef struct {
    int32_t **ids;  /* (n) each input's tokens */
    int32_t *n_ids; /* (n) */
    size_t n;
    bool base64; /* encoding_format "base64": little-endian float32 bytes */
} emb_request;

/* body to r. c gives the tokenizer, model name and n_vocab; n_embd and n_batch are the
 * embedder's (dimensions must equal n_embd; an input longer than n_batch is a 400). */
bool emb_parse(const oai_ctx *c, int32_t n_embd, int32_t n_batch, json_t *body, emb_request *r, oai_error *e);
void emb_request_free(emb_request *r);

/* {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
 * "usage": {"prompt_tokens", "total_tokens"}}; vec is (r->n, n_embd). NULL: no memory. */
json_t *emb_response(const emb_request *r, const char *model, const float *vec, int32_t n_embd);

#endif
