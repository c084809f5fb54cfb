/* openai.h — the OpenAI API mapping: a JSON request body to engine requests, and the
 * response shapes (errors, completions, chunks, usage). Pure translation: no sockets,
 * no threads, no engine calls; the server (server.c) owns those. A request that
 * oai_parse accepts is valid for the engine as it is: the boundary where a served
 * request is checked, field by field, against the model it will run on. */
#ifndef CN_SERVE_OPENAI_H
#define CN_SERVE_OPENAI_H

#include <jansson.h>

#include "cinder.h"
#include "core/buf.h"
#include "serve/gcache.h"

#define OAI_MAX_PROMPTS 16    /* prompts in one completions request (array form) */
#define OAI_MAX_MESSAGES 1024 /* messages in one chat request */

/* An error as OpenAI returns it: HTTP status and {"error": {message, type, param, code}}. */
typedef struct {
    int http_status;  /* 400, 401, 404, 405, 413, 429, 503, 504 */
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    char param[64];   /* the field at fault, "" if none */
    const char *code; /* "model_not_found", "context_length_exceeded", or NULL */
    char message[512];
} oai_error;

/* Fills e and returns false, for `return oai_fail(e, ...)`. */
bool oai_fail(oai_error *e, int http_status, const char *type, const char *param, const char *code, const char *fmt,
              ...) __attribute__((format(printf, 6, 7)));
/* {"error": {...}}; caller json_decref's. */
json_t *oai_error_json(const oai_error *e);

typedef enum { OAI_CHAT, OAI_COMPLETION } oai_kind;

/* ---- API dialects ----
 * Anthropic's Messages API, the Responses API and llama-server's /infill bring their
 * requests to oai_parse in OpenAI's shape, and name some of its fields otherwise. A
 * dialect is an API's table of those names: every error oai_parse (and oai_tools.c)
 * makes names the field as the client's API does, spelled from the table when the error
 * is made. A path's indices are written [] in the table ("tools[].function" is
 * "tools[]" in Anthropic's); a path the table lacks is spelled by its longest prefix
 * that it holds, cut at a '.' ("response_format.json_schema.schema" is
 * "text.format.schema" in the Responses API), and otherwise as OpenAI spells it. */
typedef struct {
    const char *openai; /* "max_tokens", "response_format.json_schema", "tools[].function" */
    const char *client; /* "max_output_tokens", "text.format", "tools[]" */
} oai_name;

typedef struct {
    oai_kind kind;         /* the OpenAI request the body becomes */
    const char *endpoint;  /* named in "unsupported field '...' for ENDPOINT" */
    const oai_name *names; /* the fields and paths it spells otherwise */
    size_t n_names;
} oai_dialect;

extern const oai_dialect OAI_CHAT_API, OAI_COMPLETIONS_API;

/* A field of OpenAI's (a plain name: "stop") as d spells it. */
const char *oai_field(const oai_dialect *d, const char *openai);
/* A path in OpenAI's shape ("tools[2].function.name") as d spells it, into out (n bytes). */
const char *oai_path(const oai_dialect *d, const char *openai, char *out, size_t n);
/* An error the library made (cn_chat_turn_prepare, cn_gen_validate, a tools grammar)
 * about the OpenAI field `param` (NULL or "": none), spelled in d's names; false. */
bool oai_lib_fail(const oai_dialect *d, oai_error *e, int http_status, const char *code, const char *param,
                  const char *msg);

/* What the server needs to map a request: the engine's parts (cn_engine_tokenizer, ...). */
typedef struct {
    const cn_tokenizer *tok;      /* borrowed */
    const cn_chat_template *chat; /* borrowed; NULL: chat requests get 400 */
    const char *eot_stop;         /* a chat reply's end-of-turn stop string, or NULL
                                     (cn_engine_end_of_turn_stop) */
    const char *model_id;         /* the served name */
    bool routed;                  /* the server chose the model by the request's "model"
                                     already (several models): it is not compared here */
    int32_t n_ctx;                /* positions per sequence */
    int32_t n_vocab;
    int32_t max_n;                 /* the most completions per request (0: CN_ENGINE_MAX_N) */
    int32_t lookup_n, max_draft;   /* the server's speculation default (0: off) */
    bool has_draft;                /* a draft model is loaded (and is the default) */
    gcache *grammars;              /* borrowed; NULL: every grammar is compiled afresh */
    size_t grammar_max_states;     /* compile budget (cn_grammar_params); 0: the library's */
    double grammar_max_compile_ms; /* 0: the library's */
} oai_ctx;

/* One parsed request: n_prompts engine requests of n completions each (choice index
 * = prompt * n + completion). Owns every buffer; oai_request_free releases them. */
typedef struct {
    oai_kind kind;
    int32_t n_prompts;
    int32_t *prompt[OAI_MAX_PROMPTS]; /* token ids (BOS as the model's rule says) */
    int32_t n_prompt[OAI_MAX_PROMPTS];
    char *echo_text[OAI_MAX_PROMPTS]; /* the prompt text when echo (completions) */
    int32_t n;
    cn_gen_params gen; /* sampling, max_tokens, stops (owned copies) */
    char *stops[CN_GEN_MAX_STOP];
    cn_logit_bias *bias;
    bool stream, include_usage, echo;
    int32_t n_logprobs; /* -1 none; chat: top_logprobs; completions: logprobs */
    bool max_tokens_given;
    int32_t lookup_n, max_draft; /* speculation (cn_engine_request's fields) */
    bool draft;
    cn_grammar *grammar;       /* structured output (gen.grammar): a reference, or NULL */
    const char *grammar_field; /* the field it came from ("response_format", ...) */
    bool grammar_cached;       /* it came from c->grammars without compiling */
    /* tools (oai_tools.c) */
    json_t *tools;   /* the request's tools array (a reference), or NULL */
    bool tools_none; /* tool_choice "none": tools shown, never called */
    cn_tool_choice tool_choice;
    char *tool_name; /* CN_TOOL_CHOICE_NAMED */
    bool parallel_tool_calls;
    int tool_format;      /* the format the reply is read in */
    bool think, in_think; /* the reply is read for <think> (and starts inside one) */
} oai_request;

/* Parses and validates body for kind, cn_gen_validate included (against c->n_vocab): the
 * result is what cn_engine_submit accepts. Structured output (response_format json_object /
 * json_schema, json_schema, grammar, guided_json / _regex / _choice / _grammar; at most
 * one) is compiled here, through c->grammars, against c->tok. On failure: false and e
 * filled (status 400 or 404; 503 when memory ran out), e->param naming the field at
 * fault. */
bool oai_parse(const oai_ctx *c, oai_kind kind, json_t *body, oai_request *out, oai_error *e);
/* The same for a body another API made in OpenAI's shape (d->kind): errors in d's names. */
bool oai_parse_as(const oai_ctx *c, const oai_dialect *d, json_t *body, oai_request *out, oai_error *e);

/* ---- tools (oai_tools.c) ----
 * The chat side of oai_parse (every chat-shaped API comes through it); errors in d's
 * names. */

/* tools, tool_choice, parallel_tool_calls of body into r (checked; the tools kept). */
bool oai_parse_tools(const oai_dialect *d, json_t *body, oai_request *r, oai_error *e);
/* Checks messages (roles, tool_calls, tool results answering earlier calls) and renders
 * them with r's tools and the template variables vars (a JSON object, or NULL) into
 * *prompt (malloc'ed, *len bytes); sets r->think / r->in_think. */
bool oai_render_chat(const oai_ctx *c, const oai_dialect *d, json_t *msgs, json_t *vars, oai_request *r, char **prompt,
                     size_t *len, oai_error *e);
/* The calls' grammar into r->grammar when r has tools (400 with another grammar). */
bool oai_tools_grammar(const oai_ctx *c, const oai_dialect *d, oai_request *r, oai_error *e);

/* One choice's reply read back: content, reasoning and calls. rd is NULL when the
 * request has neither tools nor thinking (the text is the content as it comes). */
typedef struct {
    char id[32];
    char *name;
    cn_buf args; /* the arguments' JSON text, as the model wrote it */
    bool broken; /* the reply ended inside it: its text went to content */
} oai_call;

typedef struct {
    cn_tool_reader *rd;
    cn_buf content, reasoning;
    oai_call *calls;
    int32_t n_calls;
    size_t cap_calls;
} oai_reply;

/* Whether s[0..n) is only whitespace: such content beside calls is no content (the
 * message's and every other API's rule). */
bool oai_blank(const char *s, size_t n);

bool oai_reply_init(oai_reply *rp, const oai_request *r, oai_error *e);
void oai_reply_free(oai_reply *rp);
/* Reads the next text of the reply (final: it ended). deltas (a JSON array, or NULL when
 * not streaming) gets one chat-completion "delta" object per event. false: no memory. */
bool oai_reply_feed(oai_reply *rp, const char *text, size_t n, bool final, json_t *deltas);
int32_t oai_reply_n_calls(const oai_reply *rp); /* whole calls */
/* The non-streamed "message": content (null beside calls when it is only whitespace),
 * reasoning_content, tool_calls. */
json_t *oai_reply_message(const oai_reply *rp);
void oai_request_free(oai_request *r);

/* Appends to a JSON array the OpenAI logprobs entries of a token (chat form:
 * {token, logprob, bytes, top_logprobs}). */
json_t *oai_chat_logprob(const cn_tokenizer *tok, const cn_gen_token *t);
/* A token's text as a valid UTF-8 JSON string (invalid bytes as U+FFFD). */
json_t *oai_piece(const cn_tokenizer *tok, int32_t id);

/* The "timings" object of one choice (cn_gen_timings, milliseconds and tok/s). */
json_t *oai_timings_json(const cn_gen_timings *t);

/* "stop" / "length"; a cancelled completion (timeout, shutdown) reports "cancelled". */
const char *oai_finish_str(cn_finish_reason r);

#endif
