/* fuzz_openai.c — fuzz entry for the HTTP request body → engine request mapping
 * (src/serve/openai.c, anthropic.c, responses.c): the bytes a client POSTs, parsed as JSON
 * and mapped for /v1/chat/completions or /v1/completions (bit 0 of the first byte), or,
 * when bits 1-2 say 1 or 2, for /v1/messages (bit 0: count_tokens) or /v1/responses, or when they
 * say 3, for /v1/embeddings (bit 0) or /infill (which stories260K, without FIM tokens, refuses
 * after checking the fields), with stories260K's
 * vocabulary (../shared/testdata/models) and the ChatML template, a 256-position context.
 *
 * Checked: a body that is not JSON is refused before mapping (as the server does); a
 * mapping either fails with an HTTP status in 400..404 and a message (and its error JSON
 * builds), or succeeds with a request the engine would accept: 1..16 prompts of token ids
 * in the vocabulary, each shorter than the context, max_tokens within what the context
 * leaves, generation parameters that cn_gen_validate accepts, a speculation setting in
 * range. Built by `make fuzz`; the unit tests replay its corpus. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "serve/apis.h"
#include "serve/embeddings.h"
#include "serve/infill.h"
#include "text/chat.h"
#include "text/tokenizer.h"

int fuzz_openai_one(const uint8_t *data, size_t size);

static oai_ctx fuzz_oai;
static cn_gguf *fuzz_oai_gguf;
static cn_tokenizer *fuzz_oai_tok;
static cn_chat_template *fuzz_oai_chat;

static const oai_ctx *fuzz_oai_ctx(void) {
    if (fuzz_oai.tok) return &fuzz_oai;
    const char *dir = getenv("CINDER_TESTDATA");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dir && *dir ? dir : "../shared/testdata");
    cn_error err = {0};
    if (cn_gguf_open(path, &fuzz_oai_gguf, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(fuzz_oai_gguf, &fuzz_oai_tok, &err) != CN_STATUS_OK ||
        cn_chat_template_from_name("chatml", &fuzz_oai_chat, &err) != CN_STATUS_OK) {
        fprintf(stderr, "fuzz_openai: %s: %s\n", path, err.msg);
        abort();
    }
    /* the end-of-turn stop as an engine decides it (cn_engine_end_of_turn_stop) */
    fuzz_oai = (oai_ctx){.tok = fuzz_oai_tok,
                         .chat = fuzz_oai_chat,
                         .model_id = "stories260K",
                         .n_ctx = 256,
                         .eot_stop = cn_chat_end_of_turn_stop(fuzz_oai_chat, fuzz_oai_tok),
                         .n_vocab = cn_tokenizer_n_vocab(fuzz_oai_tok),
                         .max_draft = 8};
    return &fuzz_oai;
}

int fuzz_openai_one(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    const oai_ctx *c = fuzz_oai_ctx();
    const oai_kind kind = data[0] & 1 ? OAI_CHAT : OAI_COMPLETION;
    const int api = (data[0] >> 1) & 3; /* 1: Anthropic, 2: Responses, 3: embeddings / infill, else OpenAI's */
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &jerr);
    if (!body) return -1;
    if (api == 3 && (data[0] & 1)) { /* /v1/embeddings, an embedder of 64 floats and 64 tokens */
        emb_request er;
        memset(&er, 0, sizeof er);
        oai_error e = {0};
        const bool is_obj = json_is_object(body), ok = is_obj && emb_parse(c, 64, 64, body, &er, &e);
        json_decref(body);
        if (ok) {
            if (er.n < 1 || er.n > EMB_MAX_INPUTS) abort();
            for (size_t i = 0; i < er.n; i++) {
                if (er.n_ids[i] < 1 || er.n_ids[i] > 64 || !er.ids[i]) abort();
                for (int32_t j = 0; j < er.n_ids[i]; j++)
                    if (er.ids[i][j] < 0 || er.ids[i][j] >= c->n_vocab) abort();
            }
            float *vec = calloc(er.n * 64, sizeof *vec);
            json_t *resp = vec ? emb_response(&er, c->model_id, vec, 64) : NULL;
            if (vec && !resp) abort();
            json_decref(resp);
            free(vec);
        } else if (is_obj && (e.http_status < 400 || e.http_status > 404 || !e.message[0])) {
            abort();
        }
        emb_request_free(&er);
        return ok ? 0 : -1;
    }
    oai_request r;
    api_request ar;
    memset(&ar, 0, sizeof ar);
    oai_error e = {0};
    const bool ok = api == 1   ? ant_parse(c, body, data[0] & 1, &r, &ar, &e)
                    : api == 2 ? resp_parse(c, body, &r, &ar, &e)
                    : api == 3 ? infill_parse(c, body, &r, &ar, &e)
                               : oai_parse(c, kind, body, &r, &e);
    json_decref(body);
    if (!ok) {
        if (e.http_status < 400 || e.http_status > 404 || !e.message[0]) abort();
        json_t *ej = api == 1 ? ant_error_json(&e) : oai_error_json(&e);
        if (!ej || !json_is_object(json_object_get(ej, "error"))) abort();
        json_decref(ej);
        oai_request_free(&r);
        api_request_free(&ar);
        return -1;
    }
    if (api == 2 && !json_is_object(ar.echo)) abort();
    api_request_free(&ar);
    if (r.n_prompts < 1 || r.n_prompts > OAI_MAX_PROMPTS || r.n < 1 || r.n > CN_ENGINE_MAX_N) abort();
    int32_t longest = 0;
    for (int32_t i = 0; i < r.n_prompts; i++) {
        if (r.n_prompt[i] < 1 || r.n_prompt[i] >= c->n_ctx || !r.prompt[i]) abort();
        for (int32_t j = 0; j < r.n_prompt[i]; j++)
            if (r.prompt[i][j] < 0 || r.prompt[i][j] >= c->n_vocab) abort();
        longest = r.n_prompt[i] > longest ? r.n_prompt[i] : longest;
    }
    if (r.gen.max_tokens < 1 || r.gen.max_tokens > c->n_ctx - longest) abort();
    cn_error err = {0};
    if (cn_gen_validate(&r.gen, c->n_vocab, &err) != CN_STATUS_OK) abort();
    if (r.lookup_n < 0 || r.lookup_n > 8 || r.max_draft < 1 || r.max_draft > CN_ENGINE_MAX_DRAFT || r.draft) abort();
    oai_request_free(&r);
    return 0;
}

FUZZ_ENTRY(fuzz_openai_one)
