/* apis.h — the APIs agents speak besides chat completions: Anthropic's Messages API
 * (POST /v1/messages, /v1/messages/count_tokens) and OpenAI's Responses API (POST
 * /v1/responses, stateless).
 *
 * In: each request body is turned into an OpenAI chat-completions body (messages, tools,
 * tool_choice, stop, ...) and parsed by oai_parse_as, so one path checks every value and
 * renders the chat; only what the other API's shape itself says (roles, block and item
 * types, a tool result answering an earlier call) is checked here. Every error names the
 * field in that API's terms: oai_parse_as spells its own from the API's table of names
 * (oai_dialect, beside each mapping: anthropic.c, responses.c).
 *
 * Out: a reply is read as oai_reply reads a chat reply (content, reasoning, calls, as chat
 * deltas); api_items turns those deltas into a sequence of items (reasoning, text, calls)
 * that begin, grow and end; the writer of each API turns those into its stream events
 * (Anthropic's content blocks, the Responses output items) and, at the end, its response
 * object. Streamed and whole responses come from the same items, so they agree.
 *
 * Pure translation like openai.c: no sockets, no threads, no engine calls. */
#ifndef CN_SERVE_APIS_H
#define CN_SERVE_APIS_H

#include "serve/openai.h"

/* The dialect a job answers in (API_INFILL: llama-server's /infill, infill.h). */
typedef enum { API_CHAT, API_COMPLETION, API_ANTHROPIC, API_RESPONSES, API_INFILL } api_kind;

/* What an Anthropic or Responses request keeps besides its oai_request. */
typedef struct {
    api_kind kind;
    char *stops[CN_GEN_MAX_STOP]; /* Anthropic's stop_sequences (to say which one ended it) */
    int32_t n_stops;
    int64_t max_tokens; /* the limit asked for (0: none) */
    json_t *echo;       /* Responses: the request's fields the response repeats */
} api_request;

void api_request_free(api_request *ar);

/* The names each API gives OpenAI's fields (anthropic.c, responses.c; openai.h). */
extern const oai_dialect ANT_API, RESP_API;

/* Anthropic body to r (through oai_parse_as). count_only: /v1/messages/count_tokens (no
 * max_tokens needed). Errors in Anthropic's terms (params as Anthropic names them). */
bool ant_parse(const oai_ctx *c, json_t *body, bool count_only, oai_request *r, api_request *ar, oai_error *e);
/* Responses body to r (through oai_parse_as); previous_response_id and other state refused. */
bool resp_parse(const oai_ctx *c, json_t *body, oai_request *r, api_request *ar, oai_error *e);

/* {"type": "error", "error": {"type", "message"}}: Anthropic's error, its type from the
 * HTTP status. */
json_t *ant_error_json(const oai_error *e);

/* Which of Anthropic's stop_sequences the generated tokens' text (their pieces joined)
 * holds first: its index, or -1. The engine cuts the stop from the text it streams, so
 * the tokens are where it can still be seen. */
int32_t ant_stop_match(const api_request *ar, const char *tok_text, size_t n);

/* ---- a reply as items ---- */

typedef enum { API_ITEM_TEXT, API_ITEM_REASONING, API_ITEM_CALL } api_item_kind;

typedef struct {
    api_item_kind kind;
    cn_buf text;        /* the text, the reasoning, or the call's arguments */
    char *name;         /* a call's function */
    char call_id[32];   /* a call's id as oai_reply made it ("call_...") */
    int32_t call_index; /* a call's index in the reply */
    bool broken;        /* a call the reply ended inside */
} api_item;

/* Everything a writer needs to know of its job. */
typedef struct {
    const char *id; /* "msg_..." / "resp_..." */
    const char *model;
    long long created;
    int32_t n_prompt, n_cached, n_generated;
    cn_finish_reason finish; /* CN_FINISH_NONE while running */
    int32_t stop_index;      /* Anthropic: the stop sequence that ended it, or -1 */
    const cn_tokenizer *tok; /* to count reasoning tokens (Responses' usage) */
} api_meta;

typedef struct {
    const api_request *ar; /* borrowed */
    api_item *items;
    int32_t n_items;
    size_t cap_items;
    bool open;   /* the last item still grows */
    cn_buf ws;   /* content that is only whitespace, not yet in an item */
    int64_t seq; /* Responses: the next event's sequence_number */
    bool pinged; /* Anthropic: the ping is sent */
    bool oom;
} api_writer;

void api_writer_init(api_writer *w, const api_request *ar);
void api_writer_free(api_writer *w);
/* The stream's first events into events (a JSON array; each event's "type" is its SSE
 * event name). */
void api_writer_open(api_writer *w, const api_meta *m, json_t *events);
/* One chat delta of the reply (as oai_reply_feed makes them: content, reasoning_content
 * or tool_calls); events NULL when not streaming. rp: the reply the deltas come from (a
 * call it marks broken ends, its text not turned into content), or NULL. */
void api_writer_feed(api_writer *w, const api_meta *m, json_t *delta, const oai_reply *rp, json_t *events);
/* The reply is over (m->finish set): the last items end, and the closing events. */
void api_writer_close(api_writer *w, const api_meta *m, json_t *events);
/* The whole, non-streamed response. */
json_t *api_writer_response(api_writer *w, const api_meta *m);

/* ---- each API's writer (anthropic.c, responses.c), driven by api_writer (items.c) ---- */

typedef enum { API_ITEM_BEGIN, API_ITEM_GROW, API_ITEM_END } api_item_ev;

/* Appends ev (its reference taken) to events, unless events is NULL; an event that could
 * not be made (ev NULL: no memory) marks w->oom. */
void api_event(api_writer *w, json_t *events, json_t *ev);

void ant_open(api_writer *w, const api_meta *m, json_t *events);
void ant_item(api_writer *w, const api_meta *m, api_item_ev ev, int32_t i, const char *text, size_t n, json_t *events);
void ant_close(api_writer *w, const api_meta *m, json_t *events);
json_t *ant_response(api_writer *w, const api_meta *m);

void resp_open(api_writer *w, const api_meta *m, json_t *events);
void resp_item(api_writer *w, const api_meta *m, api_item_ev ev, int32_t i, const char *text, size_t n, json_t *events);
void resp_close(api_writer *w, const api_meta *m, json_t *events);
json_t *resp_response(api_writer *w, const api_meta *m);

/* A call's arguments as a JSON object ({} when they are not one: a broken call). */
json_t *api_call_input(const api_item *it);

#endif
