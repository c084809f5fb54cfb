/* server.c — HTTP (libmicrohttpd) to the engine: routing, auth, bodies, jobs, SSE.
 *
 * Four APIs share one job: OpenAI's chat completions and completions, Anthropic's
 * Messages and OpenAI's Responses. A job knows its dialect (api_kind): it decides only
 * how the request is parsed (oai_parse, ant_parse, resp_parse: all end in oai_parse) and
 * how the engine's callbacks write the output (OpenAI chunks here; the other two through
 * their writers, apis.h) and the errors; submit, cancel, timeouts, disconnects and
 * metrics are the same code for all.
 *
 * DESIGN. One thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a request may
 * block its own thread: a non-streaming completion waits in the access handler, a
 * streaming one in its content-reader callback. A completion is a *job*: n_prompts
 * engine requests of n completions each. The engine's callbacks (on its run-loop thread)
 * only append to the job under the job's mutex and signal its condition variable; the
 * connection thread takes what is there and writes it. The rule that keeps this free of
 * deadlocks: no engine call is ever made while a job mutex is held (the engine thread
 * holds the engine lock when it takes a job mutex).
 *
 * A waiting connection thread wakes every 50 ms to look at its socket (recv MSG_PEEK:
 * 0 bytes means the client closed it) and at its deadline; a client that went away gets
 * its requests cancelled, which frees their KV blocks before cn_engine_cancel returns.
 *
 * Lifetimes: a non-streaming job lives in its access-handler call; a streaming job is
 * owned by its MHD response and freed by the response's free callback, after cancelling
 * whatever of it is still open. Every job is on the server's list while alive, so a
 * shutdown can cancel them all.
 *
 * Models (models.h): a request is routed to its model before it is parsed (one model:
 * that one, "model" checked by the parser as before; several: "model" chooses, and a
 * model not loaded is loaded on this connection's thread while other requests go on).
 * The route and every job hold their model, so an idle-model unload never frees an
 * engine a request still uses; each model has its own engine, oai_ctx and metrics
 * series. */
#include "serve/server.h"

#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "serve/apis.h"
#include "serve/embeddings.h"
#include "serve/gcache.h"
#include "serve/infill.h"
#include "serve/json_mem.h"
#include "serve/metrics.h"
#include "serve/models.h"
#include "serve/openai.h"
#include "serve/page.h"

#define WAKE_MS 50

cn_server_params cn_server_default_params(void) {
    return (cn_server_params){.host = "127.0.0.1",
                              .port = 8080,
                              .request_timeout_s = 600,
                              .idle_timeout_s = 30,
                              .max_body_bytes = 8u << 20,
                              .max_connections = 256,
                              .max_draft = 8,
                              .grammar_cache_entries = GCACHE_DEFAULT_ENTRIES,
                              .grammar_compile_ms = 5000};
}

typedef struct job job;

struct cn_server {
    struct MHD_Daemon *d;
    cn_server_params p;
    int port;
    cn_metrics *metrics;
    gcache *grammars;       /* compiled grammars shared by requests (gcache.h) */
    pthread_mutex_t mu;     /* ready, draining, the job list */
    pthread_cond_t idle_cv; /* a job left the list */
    models *models;         /* what requests are routed to (models.h) */
    bool ready, draining;
    job *jobs;
    int n_jobs;
    uint64_t next_id;
    int n_conns; /* open connections (atomic): over p.max_connections get 503 */
};

/* MHD itself drops connections at accept past this many beyond max_connections; up to
 * there, the extra ones get a 503 that says why. */
#define CONN_MARGIN 64

/* jansson's allocations go through json_mem (json_mem.h): a failure marks the thread. */
static bool json_failed(void) { return json_mem_failed(); }

/* ---- jobs ---- */

typedef struct {
    job *j;
    int32_t prompt; /* which prompt of the job */
    uint64_t id;    /* the engine's request id; 0 until submitted */
    bool submitted;
} job_sub;

typedef struct {
    cn_buf text;        /* final text so far */
    cn_gen_token *toks; /* (n_toks) for logprobs */
    int32_t n_toks, n_toks_sent;
    size_t cap_toks;
    cn_finish_reason finish;
    cn_gen_timings timings;
    double t_last_token;
    oai_reply reply;    /* read for tool calls and reasoning (reply.rd NULL: not) */
    api_writer w;       /* Anthropic / Responses: the reply as items */
    cn_buf tok_text;    /* Anthropic with stop_sequences: the tokens' text */
    int32_t stop_index; /* the stop sequence that ended it, or -1 */
    int32_t n_gen;      /* tokens generated so far (/infill's chunks count them) */
} job_choice;

struct job {
    cn_server *s;
    smodel *m; /* the model it runs on (held while the job lives) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    api_kind api; /* the dialect its output is written in */
    oai_request r;
    api_request ar; /* Anthropic / Responses: what the request keeps besides r */
    job_sub subs[OAI_MAX_PROMPTS];
    job_choice *ch; /* (n_prompts * n) */
    int32_t n_choices, n_open;
    bool oom;           /* a buffer could not grow: the job is cancelled */
    bool cancelling;    /* the server cancelled it (client gone, timeout, oom, shutdown) */
    bool engine_failed; /* a completion ended "cancelled" when the server had not asked */
    cn_buf out;         /* streaming: SSE bytes not yet written */
    size_t out_sent;
    bool stream_done; /* out is all there is; then the tail (sse_tail) */
    size_t tail_sent; /* bytes of that tail sent */
    char tail[320];   /* a tail made for this job (Responses' error event) */
    bool gone;        /* the reader saw the client go (counted once) */
    int fd;           /* the client's socket, to notice a disconnect */
    double t_deadline;
    char id[48];
    long long created;
    job *next;
};

static void job_register(cn_server *s, job *j) {
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    s->jobs = j;
    s->n_jobs++;
    pthread_mutex_unlock(&s->mu);
}

static void job_unregister(cn_server *s, job *j) {
    pthread_mutex_lock(&s->mu);
    for (job **pp = &s->jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            s->n_jobs--;
            break;
        }
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Cancels every open engine request of j (no job lock held: see DESIGN). After it
 * returns every completion has had its on_finish. */
static void job_cancel(job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelling = true;
    pthread_mutex_unlock(&j->mu);
    for (int p = 0; p < j->r.n_prompts; p++)
        if (j->subs[p].submitted) cn_engine_cancel(j->m->e, j->subs[p].id, NULL);
}

static void job_free(job *j) {
    if (!j) return;
    if (j->m) models_release(j->s->models, j->m);
    for (int32_t i = 0; j->ch && i < j->n_choices; i++) {
        cn_buf_free(&j->ch[i].text);
        free(j->ch[i].toks);
        cn_buf_free(&j->ch[i].tok_text);
        oai_reply_free(&j->ch[i].reply);
        api_writer_free(&j->ch[i].w);
    }
    free(j->ch);
    cn_buf_free(&j->out);
    oai_request_free(&j->r);
    api_request_free(&j->ar);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ---- streaming chunks (job lock held) ---- */

/* Appends one event: "event: NAME" (when named: Anthropic and Responses name each
 * event by its type) and "data: JSON". Once memory ran out the stream sends nothing more
 * but, at its end, an error event (sse_tail). */
static void sse_event(job *j, const char *name, json_t *chunk) {
    char *s = chunk && !j->oom ? json_dumps(chunk, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    if (json_failed() || !s) j->oom = true;
    const size_t n0 = j->out.n;
    if (!j->oom) {
        if (name) cn_buf_printf(&j->out, "event: %s\n", name);
        cn_buf_printf(&j->out, "data: %s\n\n", s);
        if (j->out.failed) {
            j->oom = true;
            j->out.n = n0; /* no half event */
        }
    }
    free(s);
    json_decref(chunk);
}

static void sse_emit(job *j, json_t *chunk) { sse_event(j, NULL, chunk); }

/* Every event of a writer's array (NULL: none), each named by its type. */
static void sse_events(job *j, json_t *events) {
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) sse_event(j, json_string_value(json_object_get(ev, "type")), json_incref(ev));
    json_decref(events);
}

/* The stream's last bytes, sent by stream_reader after out (static, so they need no
 * memory): an OpenAI error event if memory ran out, then [DONE]. */
static const char SSE_DONE[] = "data: [DONE]\n\n";
static const char SSE_OOM_DONE[] = "data: {\"error\":{\"message\":\"out of memory: the reply is incomplete\","
                                   "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n";
static const char SSE_FAILED_DONE[] =
    "data: {\"error\":{\"message\":\"the engine could not finish the request (out of memory, or a failed step: "
    "see the server log)\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\ndata: [DONE]\n\n";

/* Anthropic's stream has no [DONE]: a failed one ends with an error event. */
static const char ANT_OOM[] = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"
                              "\"out of memory: the reply is incomplete\"}}\n\n";
static const char ANT_FAILED[] =
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the engine could not "
    "finish the request (out of memory, or a failed step: see the server log)\"}}\n\n";
static const char ANT_CANCELLED[] =
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the request was "
    "cancelled: it ran past the server's request timeout, or the server is shutting down\"}}\n\n";

static void sse_end(job *j) { j->stream_done = true; }

/* The stream's last bytes (they need no memory): [DONE] for OpenAI's chunks, after an
 * error event when the reply is incomplete; Anthropic's and the Responses stream end
 * with their last event, or an error event. */
static const char *sse_tail(job *j, size_t *n) {
    const char *t;
    const bool cancelled = j->n_choices > 0 && j->ch[0].finish == CN_FINISH_CANCELLED;
    if (j->api == API_INFILL) { /* llama-server's stream: objects only, no [DONE] */
        t = j->oom ? SSE_OOM_DONE : j->engine_failed ? SSE_FAILED_DONE : "";
        if (j->oom || j->engine_failed) *n = strlen(t) - (sizeof SSE_DONE - 1); /* the error, without [DONE] */
        else *n = 0;
        return t;
    }
    if (j->api == API_ANTHROPIC) {
        t = j->oom ? ANT_OOM : j->engine_failed ? ANT_FAILED : cancelled ? ANT_CANCELLED : "";
    } else if (j->api == API_RESPONSES) {
        const char *msg = j->oom             ? "out of memory: the reply is incomplete"
                          : j->engine_failed ? "the engine could not finish the request (see the server log)"
                          : cancelled ? "the request was cancelled: it ran past the server's request timeout, or "
                                        "the server is shutting down"
                                      : NULL;
        if (msg)
            snprintf(j->tail, sizeof j->tail,
                     "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"%s\","
                     "\"param\":null,\"sequence_number\":%lld}\n\n",
                     msg, (long long)j->ch[0].w.seq);
        else j->tail[0] = 0;
        t = j->tail;
    } else {
        t = j->oom ? SSE_OOM_DONE : j->engine_failed ? SSE_FAILED_DONE : SSE_DONE;
    }
    *n = strlen(t);
    return t;
}

static json_t *chunk_base(const job *j) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", j->id, "object",
                     j->r.kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)j->created, "model", j->m->oc.model_id, "system_fingerprint", "cinder-" CN_VERSION);
}

/* The tokens of choice c not yet sent, as a logprobs object (NULL when none asked). */
static json_t *pending_logprobs(job *j, job_choice *c) {
    if (j->r.n_logprobs < 0) return json_null();
    const cn_tokenizer *tok = j->m->oc.tok;
    json_t *lp;
    if (j->r.kind == OAI_CHAT) {
        json_t *content = json_array();
        for (int32_t i = c->n_toks_sent; i < c->n_toks; i++)
            json_array_append_new(content, oai_chat_logprob(tok, &c->toks[i]));
        lp = json_pack("{s:o}", "content", content);
    } else {
        json_t *tokens = json_array(), *tlp = json_array(), *top = json_array(), *off = json_array();
        for (int32_t i = c->n_toks_sent; i < c->n_toks; i++) {
            const cn_gen_token *t = &c->toks[i];
            json_array_append_new(tokens, oai_piece(tok, t->id));
            json_array_append_new(tlp, json_real(isfinite(t->logprob) ? t->logprob : -9999.0));
            json_t *m = json_object();
            for (int32_t k = 0; k < t->n_top; k++) {
                json_t *piece = oai_piece(tok, t->top[k].id);
                json_object_set_new(m, json_string_value(piece),
                                    json_real(isfinite(t->top[k].logprob) ? t->top[k].logprob : -9999.0));
                json_decref(piece);
            }
            json_array_append_new(top, m);
            json_array_append_new(off, json_integer(0));
        }
        lp = json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", tlp, "top_logprobs", top, "text_offset",
                       off);
    }
    c->n_toks_sent = c->n_toks;
    return lp;
}

static void stream_delta(job *j, int32_t idx, const char *text, size_t n, bool role, const char *finish) {
    job_choice *c = &j->ch[idx];
    json_t *chunk = chunk_base(j), *choice;
    json_t *content = json_stringn(text ? text : "", n);
    if (!content) content = json_string("");
    if (j->r.kind == OAI_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text || role) json_object_set_new(delta, "content", content);
        else json_decref(content);
        choice = json_pack("{s:i,s:o,s:o,s:s?}", "index", idx, "delta", delta, "logprobs",
                           role ? json_null() : pending_logprobs(j, c), "finish_reason", finish);
    } else {
        choice = json_pack("{s:i,s:o,s:o,s:s?}", "index", idx, "text", content, "logprobs", pending_logprobs(j, c),
                           "finish_reason", finish);
    }
    if (finish) json_object_set_new(choice, "timings", oai_timings_json(&c->timings));
    json_object_set_new(chunk, "choices", json_pack("[o]", choice));
    if (j->r.include_usage) json_object_set_new(chunk, "usage", json_null());
    sse_emit(j, chunk);
}

/* A chunk with one chat delta object (a tool call's, reasoning's or content's). */
static void stream_delta_obj(job *j, int32_t idx, json_t *delta, const char *finish) {
    job_choice *c = &j->ch[idx];
    json_t *chunk = chunk_base(j);
    json_t *choice = json_pack("{s:i,s:O,s:o,s:s?}", "index", idx, "delta", delta, "logprobs", pending_logprobs(j, c),
                               "finish_reason", finish);
    if (finish) json_object_set_new(choice, "timings", oai_timings_json(&c->timings));
    json_object_set_new(chunk, "choices", json_pack("[o]", choice));
    if (j->r.include_usage) json_object_set_new(chunk, "usage", json_null());
    sse_emit(j, chunk);
}

/* Reads text of choice idx for calls and reasoning; streaming, sends what it completed. */
static void reply_feed(job *j, int32_t idx, const char *text, size_t n, bool final) {
    json_t *deltas = j->r.stream ? json_array() : NULL;
    if (!oai_reply_feed(&j->ch[idx].reply, text, n, final, deltas)) j->oom = true;
    size_t i;
    json_t *d;
    if (deltas) json_array_foreach(deltas, i, d) stream_delta_obj(j, idx, d, NULL);
    json_decref(deltas);
}

/* What the Anthropic and Responses writers know of choice c. */
static api_meta job_meta(const job *j, const job_choice *c) {
    return (api_meta){.id = j->id,
                      .model = j->m->oc.model_id,
                      .created = j->created,
                      .n_prompt = j->r.n_prompt[0],
                      .n_cached = c->timings.n_cached_tokens,
                      .n_generated = c->timings.n_generated_tokens,
                      .finish = c->finish,
                      .stop_index = c->stop_index,
                      .tok = j->m->oc.tok};
}

/* Anthropic / Responses: text of choice idx read (for calls and reasoning when the reply
 * has a reader) into the writer's items; streaming, their events go out. */
static void api_feed(job *j, int32_t idx, const char *text, size_t n, bool final) {
    job_choice *c = &j->ch[idx];
    json_t *deltas = json_array();
    if (!deltas) {
        j->oom = true;
        return;
    }
    if (c->reply.rd) {
        if (!oai_reply_feed(&c->reply, text, n, final, deltas)) j->oom = true;
    } else if (n) {
        json_array_append_new(deltas, json_pack("{s:s%}", "content", text, n));
    }
    json_t *events = j->r.stream ? json_array() : NULL;
    const api_meta m = job_meta(j, c);
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) api_writer_feed(&c->w, &m, d, c->reply.rd ? &c->reply : NULL, events);
    if (c->w.oom || json_failed()) j->oom = true; /* a delta or an event may be missing */
    sse_events(j, events);
    json_decref(deltas);
}

/* The finish_reason of choice c: "tool_calls" when a reply that made calls stopped. */
static const char *finish_of(const job_choice *c) {
    if (c->reply.rd && c->finish == CN_FINISH_STOP && oai_reply_n_calls(&c->reply) > 0) return "tool_calls";
    return oai_finish_str(c->finish);
}

static json_t *usage_json(const job *j) {
    int64_t prompt = 0, gen = 0, cached = 0;
    for (int p = 0; p < j->r.n_prompts; p++) {
        prompt += j->r.n_prompt[p];
        cached += j->ch[p * j->r.n].timings.n_cached_tokens;
    }
    for (int32_t i = 0; i < j->n_choices; i++) gen += j->ch[i].timings.n_generated_tokens;
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens", (json_int_t)gen,
                     "total_tokens", (json_int_t)(prompt + gen), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached);
}

/* /infill's object for choice idx: a streamed chunk (text) or, once it finished, the
 * whole response (the text so far when not streaming). */
static json_t *infill_of(job *j, int32_t idx, const char *text, size_t n) {
    const job_choice *c = &j->ch[idx];
    const bool done = c->finish != CN_FINISH_NONE;
    const bool whole = done && !j->r.stream;
    const infill_out o = {.model = j->m->oc.model_id,
                          .content = whole ? c->text.p : text,
                          .n_content = whole ? c->text.n : n,
                          .n_prompt = j->r.n_prompt[0],
                          .done = done,
                          .finish = c->finish,
                          .stop_index = c->stop_index,
                          .ar = &j->ar,
                          .timings = done ? &c->timings : NULL,
                          .n_predicted = c->n_gen};
    return infill_json(&o);
}

static void infill_emit(job *j, int32_t idx, const char *text, size_t n) { sse_emit(j, infill_of(j, idx, text, n)); }

/* ---- engine callbacks (engine thread, engine lock held) ---- */

static void on_token(void *user, uint64_t id, int32_t index, const cn_gen_token *tok) {
    (void)id;
    job_sub *sub = user;
    job *j = sub->j;
    const double t = serve_now_s();
    pthread_mutex_lock(&j->mu);
    job_choice *c = &j->ch[sub->prompt * j->r.n + index];
    if (c->t_last_token > 0) cn_metrics_itl(j->s->metrics, j->m->ms, t - c->t_last_token);
    c->t_last_token = t;
    c->n_gen++;
    if (j->ar.n_stops > 0) {
        char piece[256];
        const size_t n = cn_token_to_piece(j->m->oc.tok, tok->id, false, piece, sizeof piece);
        if (n <= sizeof piece && !cn_buf_put(&c->tok_text, piece, n)) j->oom = true;
    }
    if (j->r.n_logprobs >= 0) {
        if (CN_GROW(c->toks, c->cap_toks, (size_t)c->n_toks + 1)) c->toks[c->n_toks++] = *tok;
        else j->oom = true;
    }
    pthread_mutex_unlock(&j->mu);
}

static void on_text(void *user, uint64_t id, int32_t index, const char *text, size_t n) {
    (void)id;
    job_sub *sub = user;
    job *j = sub->j;
    pthread_mutex_lock(&j->mu);
    json_failed(); /* a mark left by another job's JSON work is not this one's */
    const int32_t idx = sub->prompt * j->r.n + index;
    if (j->api == API_INFILL && j->r.stream) infill_emit(j, idx, text, n);
    else if (j->api == API_INFILL) {
        if (!cn_buf_put(&j->ch[idx].text, text, n)) j->oom = true;
    } else if (j->api >= API_ANTHROPIC) api_feed(j, idx, text, n, false);
    else if (j->ch[idx].reply.rd) reply_feed(j, idx, text, n, false);
    else if (j->r.stream) stream_delta(j, idx, text, n, false, NULL);
    else if (!cn_buf_put(&j->ch[idx].text, text, n)) j->oom = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void on_finish(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *t) {
    (void)id;
    job_sub *sub = user;
    job *j = sub->j;
    cn_metrics_finish(j->s->metrics, j->m->ms, t, reason);
    pthread_mutex_lock(&j->mu);
    json_failed(); /* as in on_text */
    const int32_t idx = sub->prompt * j->r.n + index;
    job_choice *c = &j->ch[idx];
    c->finish = reason;
    c->timings = *t;
    j->n_open--;
    if (reason == CN_FINISH_CANCELLED && !j->cancelling) j->engine_failed = true;
    if (j->api == API_INFILL) {
        if (reason == CN_FINISH_STOP && j->ar.n_stops > 0)
            c->stop_index = ant_stop_match(&j->ar, c->tok_text.p ? c->tok_text.p : "", c->tok_text.n);
        if (j->r.stream) {
            infill_emit(j, idx, NULL, 0);
            sse_end(j);
        }
    } else if (j->api >= API_ANTHROPIC) {
        if (c->reply.rd) api_feed(j, idx, NULL, 0, true);
        if (reason == CN_FINISH_STOP && j->ar.n_stops > 0)
            c->stop_index = ant_stop_match(&j->ar, c->tok_text.p ? c->tok_text.p : "", c->tok_text.n);
        json_t *events = j->r.stream ? json_array() : NULL;
        const api_meta m = job_meta(j, c);
        api_writer_close(&c->w, &m, events);
        if (c->w.oom || json_failed()) j->oom = true;
        sse_events(j, events);
        if (j->r.stream) sse_end(j);
    } else if (c->reply.rd) {
        reply_feed(j, idx, NULL, 0, true);
    }
    if (j->r.stream && j->api < API_ANTHROPIC) { /* chat and completions */
        stream_delta(j, idx, NULL, 0, false, finish_of(c));
        if (j->n_open == 0) {
            if (j->r.include_usage) {
                json_t *chunk = chunk_base(j);
                json_object_set_new(chunk, "choices", json_array());
                json_object_set_new(chunk, "usage", usage_json(j));
                sse_emit(j, chunk);
            }
            sse_end(j);
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ---- answering ---- */

/* The API a URL belongs to (its errors take that API's shape). */
static api_kind api_of_url(const char *url) {
    return !strncmp(url, "/v1/messages", 12) ? API_ANTHROPIC : !strcmp(url, "/v1/responses") ? API_RESPONSES : API_CHAT;
}

static const char *endpoint_of(const char *url) {
    static const char *const known[] = {"/v1/chat/completions",
                                        "/v1/completions",
                                        "/v1/messages",
                                        "/v1/messages/count_tokens",
                                        "/v1/responses",
                                        "/v1/models",
                                        "/health",
                                        "/metrics",
                                        "/tokenize",
                                        "/detokenize",
                                        "/",
                                        "/infill",
                                        "/v1/embeddings"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(url, known[i])) return known[i];
    return "other";
}

/* The metrics series the answer on this thread counts under: the model the request was
 * routed to, else the server's own (MHD_USE_THREAD_PER_CONNECTION: a request is answered
 * on its connection's thread; route sets and clears it). */
static __thread cn_metrics_series *tl_series;
static __thread bool tl_routed;

static cn_metrics_series *answer_series(cn_server *s) {
    return tl_routed ? tl_series : models_server_series(s->models);
}

static enum MHD_Result send_bytes(cn_server *s, struct MHD_Connection *conn, const char *url, int status,
                                  const char *type, const char *body, size_t n, const char *extra_hdr,
                                  const char *extra_val) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    if (extra_hdr) MHD_add_response_header(resp, extra_hdr, extra_val);
    const enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    cn_metrics_request(s->metrics, answer_series(s), endpoint_of(url), status);
    return r;
}

static enum MHD_Result send_json(cn_server *s, struct MHD_Connection *conn, const char *url, int status, json_t *j,
                                 const char *extra_hdr, const char *extra_val) {
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (json_failed() || !body) { /* some of it may be missing: say so instead */
        free(body);
        static const char oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        static const char ant_oom[] =
            "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"out of memory\"}}";
        const bool ant = api_of_url(url) == API_ANTHROPIC;
        return send_bytes(s, conn, url, 503, "application/json", ant ? ant_oom : oom,
                          ant ? sizeof ant_oom - 1 : sizeof oom - 1, "Retry-After", "1");
    }
    const enum MHD_Result r = send_bytes(s, conn, url, status, "application/json", body, strlen(body), extra_hdr,
                                         extra_val);
    free(body);
    return r;
}

/* An error in the shape of the API the URL belongs to. */
static enum MHD_Result send_error(cn_server *s, struct MHD_Connection *conn, const char *url, const oai_error *e) {
    const char *hdr = NULL, *val = NULL;
    if (e->http_status == 429 || e->http_status == 503) hdr = "Retry-After", val = "1";
    if (e->http_status == 401) hdr = "WWW-Authenticate", val = "Bearer";
    return send_json(s, conn, url, e->http_status,
                     api_of_url(url) == API_ANTHROPIC ? ant_error_json(e) : oai_error_json(e), hdr, val);
}

static enum MHD_Result fail(cn_server *s, struct MHD_Connection *conn, const char *url, int status, const char *type,
                            const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
static enum MHD_Result fail(cn_server *s, struct MHD_Connection *conn, const char *url, int status, const char *type,
                            const char *param, const char *code, const char *fmt, ...) {
    oai_error e = {0};
    e.http_status = status;
    e.type = type;
    e.code = code;
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(s, conn, url, &e);
}

/* True when the peer has closed its end (or the socket failed). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    char c;
    const ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0) return true;
    return k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* The whole non-streaming response of a finished job. */
static json_t *completion_json(job *j) {
    if (j->api == API_INFILL) return infill_of(j, 0, NULL, 0);
    if (j->api >= API_ANTHROPIC) {
        const api_meta m = job_meta(j, &j->ch[0]);
        return api_writer_response(&j->ch[0].w, &m);
    }
    json_t *choices = json_array();
    for (int32_t i = 0; i < j->n_choices; i++) {
        job_choice *c = &j->ch[i];
        json_t *text;
        if (j->r.echo) {
            cn_buf b = {0};
            const char *et = j->r.echo_text[i / j->r.n];
            if (et) cn_buf_put(&b, et, strlen(et));
            cn_buf_put(&b, c->text.p ? c->text.p : "", c->text.n);
            text = json_stringn(b.p ? b.p : "", b.n);
            cn_buf_free(&b);
        } else {
            text = json_stringn(c->text.p ? c->text.p : "", c->text.n);
        }
        if (!text) text = json_string("");
        json_t *lp = pending_logprobs(j, c);
        json_t *choice;
        if (j->r.kind == OAI_CHAT && c->reply.rd) {
            json_decref(text);
            choice = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message", oai_reply_message(&c->reply), "logprobs", lp,
                               "finish_reason", finish_of(c));
        } else if (j->r.kind == OAI_CHAT)
            choice = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", i, "message", "role", "assistant", "content", text,
                               "logprobs", lp, "finish_reason", oai_finish_str(c->finish));
        else
            choice = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "text", text, "logprobs", lp, "finish_reason",
                               oai_finish_str(c->finish));
        json_object_set_new(choice, "timings", oai_timings_json(&c->timings));
        json_array_append_new(choices, choice);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", j->id, "object",
                     j->r.kind == OAI_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)j->created,
                     "model", j->m->oc.model_id, "system_fingerprint", "cinder-" CN_VERSION, "choices", choices,
                     "usage", usage_json(j));
}

/* Streaming: MHD asks for bytes; wait for them (see DESIGN). */
/* MHD closes a connection that sent nothing for --idle-timeout, even while our reader
 * waits: a stream queued or preempted that long gets an SSE comment (ignored by clients)
 * every third of it, which also keeps proxies from timing out. */
static const char SSE_KEEPALIVE[] = ": keep-alive\n\n";

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    job *j = cls;
    const double keepalive_s = j->s->p.idle_timeout_s / 3.0, t_called = serve_now_s(); /* MHD just sent the last */
    for (;;) {
        /* checked on every call: a stream that always has bytes waiting must time out too */
        if (serve_now_s() > j->t_deadline) {
            pthread_mutex_lock(&j->mu);
            const bool cancelling = j->cancelling;
            pthread_mutex_unlock(&j->mu);
            if (!cancelling) job_cancel(j); /* its finish chunks follow */
        }
        pthread_mutex_lock(&j->mu);
        if (j->out_sent < j->out.n) {
            size_t k = j->out.n - j->out_sent;
            if (k > max) k = max;
            memcpy(out, j->out.p + j->out_sent, k);
            j->out_sent += k;
            if (j->out_sent == j->out.n) j->out_sent = j->out.n = 0;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)k;
        }
        if (j->stream_done) {
            size_t n;
            const char *tail = sse_tail(j, &n);
            size_t k = n - j->tail_sent;
            if (k > max) k = max;
            memcpy(out, tail + j->tail_sent, k);
            j->tail_sent += k;
            pthread_mutex_unlock(&j->mu);
            return k ? (ssize_t)k : MHD_CONTENT_READER_END_OF_STREAM;
        }
        serve_timed_wait(&j->cv, &j->mu, WAKE_MS);
        const bool has = j->out_sent < j->out.n || j->stream_done, oom = j->oom;
        pthread_mutex_unlock(&j->mu);
        if (has) continue;
        if (client_gone(j->fd)) {
            cn_metrics_disconnect(j->s->metrics, j->m->ms);
            pthread_mutex_lock(&j->mu);
            j->gone = true;
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (oom) job_cancel(j); /* its finish chunks follow */
        else if (serve_now_s() - t_called > keepalive_s && max >= sizeof SSE_KEEPALIVE - 1) {
            memcpy(out, SSE_KEEPALIVE, sizeof SSE_KEEPALIVE - 1);
            return (ssize_t)(sizeof SSE_KEEPALIVE - 1);
        }
    }
}

static void stream_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&j->mu);
    const bool cut = !j->stream_done && !j->gone; /* MHD gave up on the socket first */
    pthread_mutex_unlock(&j->mu);
    if (cut) cn_metrics_disconnect(j->s->metrics, j->m->ms);
    job_cancel(j);
    job_unregister(j->s, j);
    job_free(j);
}

/* The key in 'Authorization: Bearer KEY', or in 'x-api-key: KEY' (Anthropic's
 * clients), compared in constant time. */
static bool authorized(cn_server *s, struct MHD_Connection *conn) {
    if (!s->p.api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
    const char *k = h && !strncmp(h, "Bearer ", 7) ? h + 7 : x;
    if (!k) return false;
    const char *want = s->p.api_key;
    const size_t nk = strlen(k), nw = strlen(want);
    unsigned diff = (unsigned)(nk != nw);
    for (size_t i = 0; i < nw; i++)
        diff |= (unsigned)(unsigned char)want[i] ^ (unsigned)(unsigned char)(i < nk ? k[i] : 0);
    return diff == 0;
}

/* A completion request runs in four steps: parse (the body becomes a job of validated
 * engine requests), submit (every prompt to the engine), then stream (the response is the
 * job's SSE bytes, read by stream_reader) or collect (wait here for every choice) and
 * respond. Each step that fails answers with the error and frees what it made. */

/* Parse: a job for body, registered, its stream opened (role or echo chunks); NULL with
 * *oe filled. */
static job *job_parse(cn_server *s, smodel *sm, struct MHD_Connection *conn, json_t *body, api_kind api, uint64_t seq,
                      oai_error *oe) {
    job *j = calloc(1, sizeof *j);
    if (!j) return oai_fail(oe, 503, "server_error", NULL, NULL, "out of memory"), NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->s = s;
    j->m = sm;
    models_hold(s->models, sm);
    j->api = api;
    const oai_ctx *oc = &sm->oc;
    const bool ok = api == API_INFILL      ? infill_parse(oc, body, &j->r, &j->ar, oe)
                    : api == API_ANTHROPIC ? ant_parse(oc, body, false, &j->r, &j->ar, oe)
                    : api == API_RESPONSES
                        ? resp_parse(oc, body, &j->r, &j->ar, oe)
                        : oai_parse(oc, api == API_CHAT ? OAI_CHAT : OAI_COMPLETION, body, &j->r, oe);
    if (ok && json_failed()) { /* the mapping's JSON may have lost a field */
        job_free(j);
        return oai_fail(oe, 503, "server_error", NULL, NULL, "out of memory"), NULL;
    }
    if (!ok) {
        job_free(j);
        return NULL;
    }
    j->n_choices = j->r.n_prompts * j->r.n;
    j->n_open = j->n_choices;
    j->ch = calloc((size_t)j->n_choices, sizeof *j->ch);
    if (!j->ch) {
        job_free(j);
        return oai_fail(oe, 503, "server_error", NULL, NULL, "out of memory"), NULL;
    }
    for (int32_t i = 0; i < j->n_choices; i++) {
        j->ch[i].stop_index = -1;
        api_writer_init(&j->ch[i].w, &j->ar);
        if (api != API_COMPLETION && api != API_INFILL && !oai_reply_init(&j->ch[i].reply, &j->r, oe)) {
            job_free(j);
            return NULL;
        }
    }
    static const char *const prefix[] = {"chatcmpl-", "cmpl-", "msg_", "resp_", "cmpl-"};
    snprintf(j->id, sizeof j->id, "%s%016llx%08llx", prefix[api],
             (unsigned long long)time(NULL) * 2654435761ull ^ (unsigned long long)(uintptr_t)j,
             (unsigned long long)seq);
    j->created = (long long)time(NULL);
    j->t_deadline = serve_now_s() + s->p.request_timeout_s;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    for (int32_t i = 0; j->r.stream && i < j->n_choices; i++) {
        const char *et = j->r.echo ? j->r.echo_text[i / j->r.n] : NULL;
        if (api == API_INFILL) {
            /* llama-server's stream opens with the first token's object */
        } else if (api >= API_ANTHROPIC) {
            json_t *events = json_array();
            const api_meta m = job_meta(j, &j->ch[i]);
            api_writer_open(&j->ch[i].w, &m, events);
            if (j->ch[i].w.oom || json_failed()) j->oom = true;
            sse_events(j, events);
        } else if (api == API_CHAT) {
            stream_delta(j, i, NULL, 0, true, NULL);
        } else if (et) {
            stream_delta(j, i, et, strlen(et), false, NULL);
        }
    }
    job_register(s, j);
    return j;
}

/* The names the API of a job's request gives OpenAI's fields. */
static const oai_dialect *api_dialect(api_kind api) {
    switch (api) {
    case API_CHAT: return &OAI_CHAT_API;
    case API_COMPLETION: return &OAI_COMPLETIONS_API;
    case API_ANTHROPIC: return &ANT_API;
    case API_RESPONSES: return &RESP_API;
    default: return &INFILL_API;
    }
}

/* The answer to a submit that failed with st. */
static void submit_error(const job *j, cn_status st, const cn_error *err, oai_error *oe) {
    if (st == CN_STATUS_BUSY)
        oai_fail(oe, 429, "rate_limit_error", NULL, "queue_full", "the request queue is full: retry later (%s)",
                 err->msg);
    else if (st == CN_STATUS_LIMIT)
        oai_fail(oe, 400, "invalid_request_error",
                 oai_field(api_dialect(j->api), j->r.kind == OAI_CHAT ? "messages" : "prompt"),
                 "context_length_exceeded", "%s", err->msg);
    else if (st == CN_STATUS_NO_MEMORY) oai_fail(oe, 503, "server_error", NULL, NULL, "%s", err->msg);
    else oai_fail(oe, 400, "invalid_request_error", NULL, NULL, "%s", err->msg);
}

/* Submit: one engine request per prompt. False with *oe filled after cancelling what was
 * submitted (the job stays registered: the caller frees it). */
static bool job_submit(job *j, oai_error *oe) {
    cn_engine_callbacks cb = {on_text, on_token, on_finish, NULL};
    for (int p = 0; p < j->r.n_prompts; p++) {
        cn_engine_request er = cn_engine_request_default_params();
        er.prompt_tokens = j->r.prompt[p];
        er.n_prompt_tokens = j->r.n_prompt[p];
        er.gen = j->r.gen;
        er.n = j->r.n;
        er.lookup_n = j->r.lookup_n;
        er.max_draft = j->r.max_draft;
        er.draft = j->r.draft;
        j->subs[p].j = j;
        j->subs[p].prompt = p;
        cb.user = &j->subs[p];
        cn_error err = {0};
        const cn_status st = cn_engine_submit(j->m->e, &er, &cb, &j->subs[p].id, &err);
        if (st != CN_STATUS_OK) {
            job_cancel(j);
            submit_error(j, st, &err, oe);
            return false;
        }
        pthread_mutex_lock(&j->mu);
        j->subs[p].submitted = true;
        pthread_mutex_unlock(&j->mu);
    }
    return true;
}

/* Stream: the response reads the job as it fills; it owns the job from here. */
static enum MHD_Result respond_stream(cn_server *s, struct MHD_Connection *conn, const char *url, job *j) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, j,
                                                                  stream_free);
    if (!resp) {
        stream_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    const enum MHD_Result r = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    cn_metrics_request(s->metrics, j->m->ms, endpoint_of(url), 200);
    return r;
}

/* Collect: waits until every choice has finished, cancelling the job when the client
 * goes, memory runs out or the deadline passes; then answers and frees the job. */
static enum MHD_Result respond_whole(cn_server *s, struct MHD_Connection *conn, const char *url, job *j) {
    bool gone = false, timed_out = false;
    pthread_mutex_lock(&j->mu);
    while (j->n_open > 0) {
        serve_timed_wait(&j->cv, &j->mu, WAKE_MS);
        if (j->n_open == 0) break;
        const bool oom = j->oom;
        pthread_mutex_unlock(&j->mu);
        if (!gone && client_gone(j->fd)) {
            gone = true;
            cn_metrics_disconnect(s->metrics, j->m->ms);
            job_cancel(j);
        } else if (!timed_out && (oom || serve_now_s() > j->t_deadline)) {
            timed_out = true;
            job_cancel(j);
        }
        pthread_mutex_lock(&j->mu);
    }
    const bool oom = j->oom, engine_cancelled = j->engine_failed;
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result r;
    if (gone) r = MHD_NO;
    else if (oom) r = fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
    else if (engine_cancelled)
        r = fail(s, conn, url, 503, "server_error", NULL, NULL,
                 "the engine could not finish the request (out of memory, or a failed step: see the server log)");
    else if (timed_out)
        r = fail(s, conn, url, 504, "timeout_error", NULL, "timeout", "the request ran longer than %d s",
                 s->p.request_timeout_s);
    else r = send_json(s, conn, url, 200, completion_json(j), NULL, NULL);
    job_unregister(s, j);
    job_free(j);
    return r;
}

static enum MHD_Result handle_completion(cn_server *s, smodel *sm, struct MHD_Connection *conn, const char *url,
                                         json_t *body, api_kind api) {
    pthread_mutex_lock(&s->mu);
    const bool ready = s->ready, draining = s->draining;
    const uint64_t seq = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    if (!ready) return fail(s, conn, url, 503, "server_error", NULL, "model_loading", "the model is still loading");
    if (draining) return fail(s, conn, url, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    oai_error oe = {0};
    job *j = job_parse(s, sm, conn, body, api, seq, &oe);
    if (!j) return send_error(s, conn, url, &oe);
    if (!job_submit(j, &oe)) {
        job_unregister(s, j);
        job_free(j);
        return send_error(s, conn, url, &oe);
    }
    return j->r.stream ? respond_stream(s, conn, url, j) : respond_whole(s, conn, url, j);
}

/* Anthropic's count_tokens: the prompt the same /v1/messages body would make. */
static enum MHD_Result handle_count_tokens(cn_server *s, smodel *sm, struct MHD_Connection *conn, const char *url,
                                           json_t *body) {
    oai_request r;
    api_request ar;
    oai_error oe = {0};
    bool ok = ant_parse(&sm->oc, body, true, &r, &ar, &oe);
    if (ok && json_failed()) ok = oai_fail(&oe, 503, "server_error", NULL, NULL, "out of memory");
    const int32_t n = r.n_prompt[0];
    oai_request_free(&r);
    api_request_free(&ar);
    if (!ok) return send_error(s, conn, url, &oe);
    return send_json(s, conn, url, 200, json_pack("{s:i}", "input_tokens", n), NULL, NULL);
}

static enum MHD_Result handle_tokenize(cn_server *s, smodel *sm, struct MHD_Connection *conn, const char *url,
                                       json_t *body) {
    json_t *content = json_object_get(body, "content");
    if (!content) content = json_object_get(body, "prompt");
    if (!json_is_string(content))
        return fail(s, conn, url, 400, "invalid_request_error", "content", NULL, "'content' must be a string");
    bool add_special = true, parse_special = true, with_pieces = false;
    json_t *x;
    if ((x = json_object_get(body, "add_special"))) add_special = json_is_true(x);
    if ((x = json_object_get(body, "parse_special"))) parse_special = json_is_true(x);
    if ((x = json_object_get(body, "with_pieces"))) with_pieces = json_is_true(x);
    const char *text = json_string_value(content);
    const size_t len = json_string_length(content);
    size_t cnt = 0;
    int32_t *ids = NULL;
    cn_error err = {0};
    const cn_status st = cn_tokenize_alloc(sm->oc.tok, text, len, add_special, parse_special, &ids, &cnt, &err);
    if (st == CN_STATUS_NO_MEMORY) return fail(s, conn, url, 503, "server_error", NULL, NULL, "%s", err.msg);
    if (st != CN_STATUS_OK) return fail(s, conn, url, 400, "invalid_request_error", "content", NULL, "%s", err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; i < cnt; i++)
        json_array_append_new(arr, with_pieces
                                       ? json_pack("{s:i,s:o}", "id", ids[i], "piece", oai_piece(sm->oc.tok, ids[i]))
                                       : json_integer(ids[i]));
    free(ids);
    return send_json(s, conn, url, 200,
                     json_pack("{s:o,s:I,s:i}", "tokens", arr, "count", (json_int_t)cnt, "max_model_len", sm->oc.n_ctx),
                     NULL, NULL);
}

static enum MHD_Result handle_detokenize(cn_server *s, smodel *sm, struct MHD_Connection *conn, const char *url,
                                         json_t *body) {
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks))
        return fail(s, conn, url, 400, "invalid_request_error", "tokens", NULL,
                    "'tokens' must be an array of token ids");
    const size_t n_ids = json_array_size(toks);
    int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
    if (!ids) return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
    size_t i;
    json_t *x;
    json_array_foreach(toks, i, x) {
        const json_int_t v = json_is_integer(x) ? json_integer_value(x) : -1;
        if (v < 0 || v >= sm->oc.n_vocab) {
            free(ids);
            return fail(s, conn, url, 400, "invalid_request_error", "tokens", NULL,
                        "tokens[%zu] is not a token id in [0, %d)", i, sm->oc.n_vocab);
        }
        ids[i] = (int32_t)v;
    }
    char *text = NULL;
    size_t n_text = 0;
    cn_error err = {0};
    const cn_status st = cn_detokenize(sm->oc.tok, ids, n_ids, true, &text, &n_text, &err);
    free(ids);
    json_t *js = st == CN_STATUS_OK ? json_stringn(text, n_text) : NULL;
    free(text);
    if (!js) return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
    return send_json(s, conn, url, 200, json_pack("{s:o}", "content", js), NULL, NULL);
}

/* /v1/embeddings: parsed (embeddings.c), embedded on this connection's thread by the
 * embedder (its own threads; one request at a time, its inputs batched together), and
 * answered. */
static enum MHD_Result handle_embeddings(cn_server *s, smodel *sm, struct MHD_Connection *conn, const char *url,
                                         json_t *body) {
    pthread_mutex_lock(&s->mu);
    cn_embedder *emb = sm->emb; /* stable while the request holds sm */
    const bool draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (draining) return fail(s, conn, url, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    if (!emb) return fail(s, conn, url, 503, "server_error", NULL, NULL, "this server has no embedder");
    const int32_t dim = cn_embedder_n_embd(emb);
    emb_request r;
    oai_error oe = {0};
    if (!emb_parse(&sm->oc, dim, cn_embedder_n_batch(emb), body, &r, &oe)) {
        emb_request_free(&r);
        return send_error(s, conn, url, &oe);
    }
    float *vec = malloc(r.n * (size_t)dim * sizeof *vec);
    cn_error err = {0};
    const cn_status st = vec ? cn_embedder_embed(emb, (const int32_t *const *)r.ids, r.n_ids, r.n, vec, &err)
                             : CN_STATUS_NO_MEMORY;
    enum MHD_Result res;
    if (st == CN_STATUS_OK) res = send_json(s, conn, url, 200, emb_response(&r, sm->oc.model_id, vec, dim), NULL, NULL);
    else if (st == CN_STATUS_INVALID_ARG || st == CN_STATUS_LIMIT)
        res = fail(s, conn, url, 400, "invalid_request_error", "input", NULL, "%s", err.msg);
    else res = fail(s, conn, url, 503, "server_error", NULL, NULL, "%s", vec ? err.msg : "out of memory");
    free(vec);
    emb_request_free(&r);
    return res;
}

/* ---- the access handler ---- */

static bool fd_gone(void *arg) { return client_gone(*(int *)arg); }

/* The /metrics text: every model's series, the loaded ones with their engines' gauges. */
static char *render_metrics(cn_server *s) {
    enum { MAX_SHOWN = 1024 };
    smodel **sm = malloc(MAX_SHOWN * sizeof *sm);
    bool *held = malloc(MAX_SHOWN * sizeof *held);
    cn_engine_stats *st = malloc(MAX_SHOWN * sizeof *st);
    cn_metrics_model *view = malloc(MAX_SHOWN * sizeof *view);
    char *text = NULL;
    if (sm && held && st && view) {
        const int n = models_snapshot(s->models, sm, held, MAX_SHOWN);
        for (int i = 0; i < n; i++) {
            if (held[i]) cn_engine_get_stats(sm[i]->e, &st[i]);
            view[i] = (cn_metrics_model){sm[i]->ms, held[i], held[i] ? &st[i] : NULL};
        }
        gcache_stats gs;
        gcache_get_stats(s->grammars, &gs);
        const bool multi = models_multi(s->models);
        text = cn_metrics_render(s->metrics, view, n, multi, &gs, multi ? "" : s->p.model_id);
        for (int i = 0; i < n; i++)
            if (held[i]) models_release(s->models, sm[i]);
    }
    free(sm);
    free(held);
    free(st);
    free(view);
    return text;
}

typedef struct {
    cn_buf body;
    bool oom; /* the body could not be kept: 503 */
    bool too_large;
} conn_state;

static enum MHD_Result route(cn_server *s, struct MHD_Connection *conn, const char *url, const char *method,
                             conn_state *cs) {
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    struct {
        const char *path;
        bool post;
    } routes[] = {{"/v1/chat/completions", true},
                  {"/v1/completions", true},
                  {"/v1/messages", true},
                  {"/v1/messages/count_tokens", true},
                  {"/v1/responses", true},
                  {"/tokenize", true},
                  {"/detokenize", true},
                  {"/infill", true},
                  {"/v1/embeddings", true},
                  {"/v1/models", false},
                  {"/health", false},
                  {"/metrics", false},
                  {"/", false}};
    int r = -1;
    for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]); i++)
        if (!strcmp(url, routes[i].path)) r = i;
    if (r < 0)
        return fail(s, conn, url, 404, "invalid_request_error", NULL, "not_found", "no route %.200s %.200s", method,
                    url);
    if ((routes[r].post && !post) || (!routes[r].post && !get)) {
        oai_error e = {0};
        oai_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "%s does not accept %s (use %s)", url,
                 method, routes[r].post ? "POST" : "GET");
        return send_json(s, conn, url, 405, api_of_url(url) == API_ANTHROPIC ? ant_error_json(&e) : oai_error_json(&e),
                         "Allow", routes[r].post ? "POST" : "GET, HEAD");
    }
    pthread_mutex_lock(&s->mu);
    const bool ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    if (!strcmp(url, "/health"))
        return send_json(s, conn, url, ready ? 200 : 503, json_pack("{s:s}", "status", ready ? "ok" : "loading"),
                         ready ? NULL : "Retry-After", "1");
    if (!strcmp(url, "/")) {
        size_t n = 0;
        const char *page = cn_serve_page(&n);
        struct MHD_Response *resp = MHD_create_response_from_buffer(n, (void *)page, MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
        /* nothing outside this server may be loaded or contacted by the page */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        const enum MHD_Result res = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        cn_metrics_request(s->metrics, answer_series(s), "/", 200);
        return res;
    }
    if (!strcmp(url, "/metrics")) {
        char *text = render_metrics(s);
        if (!text) return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
        const enum MHD_Result res = send_bytes(s, conn, url, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                                               strlen(text), NULL, NULL);
        free(text);
        return res;
    }
    if (!authorized(s, conn))
        return fail(s, conn, url, 401, "authentication_error", NULL, "invalid_api_key",
                    "a valid API key is required: 'Authorization: Bearer KEY' (or 'x-api-key: KEY')");
    if (!strcmp(url, "/v1/models")) {
        json_t *data = models_list(s->models);
        return send_json(s, conn, url, 200, data ? json_pack("{s:s,s:o}", "object", "list", "data", data) : NULL, NULL,
                         NULL);
    }
    if (cs->oom) return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
    if (cs->too_large)
        return fail(s, conn, url, 413, "invalid_request_error", NULL, "body_too_large",
                    "the request body is larger than %zu bytes", s->p.max_body_bytes);
    if (!ready) return fail(s, conn, url, 503, "server_error", NULL, "model_loading", "the model is still loading");
    json_error_t je;
    json_failed();
    json_t *body = json_mem_load(cs->body.p ? cs->body.p : "", cs->body.n, 0, &je);
    if (json_failed() || (!body && json_error_code(&je) == json_error_out_of_memory)) {
        json_decref(body);
        return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
    }
    if (!body)
        return fail(s, conn, url, 400, "invalid_request_error", NULL, "invalid_json",
                    "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    if (!json_is_object(body)) {
        json_decref(body);
        return fail(s, conn, url, 400, "invalid_request_error", NULL, "invalid_json", "the body must be a JSON object");
    }
    /* the model it names: with one model, "model" is checked by the API's parser (404
       when it differs); with several it chooses, loading it if it must */
    json_t *mj = json_object_get(body, "model");
    if (models_multi(s->models) && mj && !json_is_null(mj) && !json_is_string(mj)) {
        json_decref(body);
        return fail(s, conn, url, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
    }
    smodel *sm = NULL;
    oai_error oe = {0};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = ci ? ci->connect_fd : -1;
    cn_metrics_series *ms = NULL;
    const int got = models_acquire(s->models, json_string_value(mj), serve_now_s() + s->p.request_timeout_s, fd_gone,
                                   &fd, &sm, &ms, &oe);
    tl_series = ms;
    tl_routed = true;
    if (got <= 0) {
        json_decref(body);
        enum MHD_Result res = MHD_NO; /* got < 0: the client left while its model loaded */
        if (got == 0) res = send_error(s, conn, url, &oe);
        tl_routed = false;
        return res;
    }
    enum MHD_Result res;
    if (!strcmp(url, "/v1/chat/completions")) res = handle_completion(s, sm, conn, url, body, API_CHAT);
    else if (!strcmp(url, "/v1/completions")) res = handle_completion(s, sm, conn, url, body, API_COMPLETION);
    else if (!strcmp(url, "/v1/messages")) res = handle_completion(s, sm, conn, url, body, API_ANTHROPIC);
    else if (!strcmp(url, "/v1/messages/count_tokens")) res = handle_count_tokens(s, sm, conn, url, body);
    else if (!strcmp(url, "/v1/responses")) res = handle_completion(s, sm, conn, url, body, API_RESPONSES);
    else if (!strcmp(url, "/infill")) res = handle_completion(s, sm, conn, url, body, API_INFILL);
    else if (!strcmp(url, "/v1/embeddings")) res = handle_embeddings(s, sm, conn, url, body);
    else if (!strcmp(url, "/tokenize")) res = handle_tokenize(s, sm, conn, url, body);
    else res = handle_detokenize(s, sm, conn, url, body);
    tl_routed = false;
    tl_series = NULL;
    models_release(s->models, sm);
    json_decref(body);
    return res;
}

/* A request whose state could not be allocated: it got its 503 at once. */
static conn_state no_conn_state;

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                      const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    cn_server *s = cls;
    conn_state *cs = *con_cls;
    if (cs == &no_conn_state) { /* answered 503 already: the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) {
            *con_cls = &no_conn_state;
            return fail(s, conn, url, 503, "server_error", NULL, NULL, "out of memory");
        }
        *con_cls = cs;
        if (__atomic_load_n(&s->n_conns, __ATOMIC_RELAXED) > s->p.max_connections) {
            MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
            return fail(s, conn, url, 503, "server_error", NULL, "too_many_connections",
                        "the server has %d connections open (--max-connections): retry later", s->p.max_connections);
        }
        /* a declared length over the limit is refused before its body is read */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->p.max_body_bytes)
            return fail(s, conn, url, 413, "invalid_request_error", NULL, "body_too_large",
                        "the request body is larger than %zu bytes", s->p.max_body_bytes);
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_large && cs->body.n + *upload_size > s->p.max_body_bytes) cs->too_large = true;
        if (!cs->too_large && !cs->oom && !cn_buf_put(&cs->body, upload, *upload_size)) cs->oom = true;
        *upload_size = 0;
        return MHD_YES;
    }
    return route(s, conn, url, method, cs);
}

static void request_done(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)conn;
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs || cs == &no_conn_state) return;
    cn_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

static void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    (void)conn;
    (void)socket_context;
    cn_server *s = cls;
    __atomic_add_fetch(&s->n_conns, code == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1, __ATOMIC_RELAXED);
}

cn_status cn_server_start(const cn_server_params *p, cn_server **out, cn_error *err) {
    *out = NULL;
    const bool multi = p->models_dir != NULL;
    if ((!multi && !p->model_id) || (multi && !p->load) || p->models_max < 0 || p->n_aliases < 0 || p->port < 0 ||
        p->port > 65535 || p->max_connections < 1 || p->request_timeout_s < 1 || p->idle_timeout_s < 1 ||
        p->max_body_bytes < 1 || p->grammar_cache_entries < 1 || !(p->grammar_compile_ms > 0))
        return serve_err(err, CN_STATUS_INVALID_ARG, "server: bad parameters");
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)p->port);
    if (inet_pton(AF_INET, p->host ? p->host : "127.0.0.1", &addr.sin_addr) != 1)
        return serve_err(err, CN_STATUS_INVALID_ARG, "server: --host '%.64s' is not an IPv4 address", p->host);
    json_mem_init();
    cn_server *s = calloc(1, sizeof *s);
    if (!s) return serve_err(err, CN_STATUS_NO_MEMORY, "server: out of memory");
    s->p = *p;
    s->metrics = cn_metrics_new();
    s->grammars = gcache_new((size_t)p->grammar_cache_entries, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    const oai_ctx base = {.lookup_n = p->lookup_n,
                          .max_draft = p->max_draft,
                          .grammars = s->grammars,
                          .grammar_max_compile_ms = p->grammar_compile_ms};
    if (!s->metrics || !s->grammars) {
        cn_server_free(s);
        return serve_err(err, CN_STATUS_NO_MEMORY, "server: out of memory");
    }
    if (multi) {
        const cn_status st = models_new_dir(p, &base, s->metrics, s->grammars, &s->models, err);
        if (st != CN_STATUS_OK) {
            cn_server_free(s);
            return st;
        }
        s->ready = true; /* nothing to load before answering */
    } else if (!(s->models = models_new_single(p->model_id, &base, s->metrics))) {
        cn_server_free(s);
        return serve_err(err, CN_STATUS_NO_MEMORY, "server: out of memory");
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)p->port, NULL,
                            NULL, access_handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_connections + CONN_MARGIN,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                            request_done, s, MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_END);
    if (!s->d) {
        const int port = p->port;
        cn_server_free(s);
        return serve_err(err, CN_STATUS_IO, "server: cannot listen on %s:%d (in use, or not an address here)",
                         p->host ? p->host : "127.0.0.1", port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    *out = s;
    return CN_STATUS_OK;
}

int cn_server_port(const cn_server *s) { return s->port; }

void cn_server_set_engine(cn_server *s, cn_engine *e) {
    if (models_multi(s->models)) return; /* several models: the server loads them */
    models_set_engine(s->models, e);
    pthread_mutex_lock(&s->mu);
    s->ready = true;
    pthread_mutex_unlock(&s->mu);
}

void cn_server_set_embedder(cn_server *s, cn_embedder *emb) {
    if (models_multi(s->models)) return; /* several models: their loader makes them */
    models_set_embedder(s->models, emb);
}

void cn_server_drain(cn_server *s, double deadline_s) {
    if (!s) return;
    const double end = serve_now_s() + deadline_s;
    models_drain(s->models); /* requests waiting for a model load stop waiting */
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    while (s->n_jobs > 0 && serve_now_s() < end) serve_timed_wait(&s->idle_cv, &s->mu, WAKE_MS);
    for (job *j = s->jobs; j; j = j->next) job_cancel(j);
    const double end2 = serve_now_s() + 5.0;
    while (s->n_jobs > 0 && serve_now_s() < end2) serve_timed_wait(&s->idle_cv, &s->mu, WAKE_MS);
    pthread_mutex_unlock(&s->mu);
}

void cn_server_free(cn_server *s) {
    if (!s) return;
    if (s->d) MHD_stop_daemon(s->d);
    models_free(s->models);   /* after the jobs: the engines it loaded */
    gcache_free(s->grammars); /* after the jobs (their references) are gone */
    cn_metrics_free(s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}
