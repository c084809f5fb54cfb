/* server.h — `cinder serve`'s HTTP server: the OpenAI API (and Anthropic's Messages and
 * OpenAI's Responses API) over the batched engine.
 *
 * It owns the HTTP side only (libmicrohttpd, one thread per connection), and talks to the
 * engine through the public engine API: submit, cancel, stats, and the engine's own
 * tokenizer, chat template and limits. The model is loaded by the caller while the server
 * already answers (/health says 503 until cn_server_set_engine). */
#ifndef CN_SERVE_SERVER_H
#define CN_SERVE_SERVER_H

#include <stddef.h>

#include "cinder.h"

/* Several models: loads the GGUF file at path into a model and an engine with its run
 * loop started (the caller's engine parameters), and optionally an embedder of the same
 * model for /v1/embeddings (*emb may stay NULL: 503 there), or fails with err filled. The
 * server frees them with cn_embedder_free, cn_engine_free, then cn_model_free. Called
 * from any connection thread, several at once for different files. */
typedef cn_status (*cn_server_load_fn)(void *user, const char *path, cn_model **m, cn_engine **e, cn_embedder **emb,
                                       cn_error *err);

typedef struct {
    const char *host;          /* address to bind; default "127.0.0.1" (loopback only) */
    int port;                  /* default 8080; 0 = any free port (see cn_server_port) */
    const char *model_id;      /* the served model name (required with one model) */
    const char *api_key;       /* NULL = no authentication */
    int request_timeout_s;     /* a completion running longer is cancelled; default 600 */
    int idle_timeout_s;        /* an idle keep-alive connection is closed; default 30 */
    size_t max_body_bytes;     /* larger bodies get 413; default 8 MiB */
    int max_connections;       /* more get 503 too_many_connections (64 past it: dropped at accept); default 256 */
    int32_t lookup_n;          /* speculation by n-gram lookup for requests that do not say
                                  ("speculative"): n-grams of up to this many tokens; 0
                                  (default) = off */
    int32_t max_draft;         /* guesses per step (1..16); default 8. When the engine has a
                                  draft model, requests that do not say get speculation with
                                  it; "speculative": {"draft": ...} chooses */
    int grammar_cache_entries; /* compiled grammars kept for reuse (structured output);
                                  default 64; the cache is also bounded to 64 MiB of keys */
    double grammar_compile_ms; /* one grammar's compile budget (a request over it gets 400);
                                  default 5000 */
    /* Several models: every *.gguf of models_dir is served by its file name without
       .gguf, loaded by the first request that names it with load (required). NULL
       (default): the one model of cn_server_set_engine. */
    const char *models_dir;
    cn_server_load_fn load;
    void *load_user;
    int models_max;             /* at most this many loaded at once (0, default: no limit);
                                   the least recently used idle one is unloaded first */
    const char *const *aliases; /* "NAME=FILE": NAME also serves FILE (a file name of the
                                  folder, with or without .gguf) */
    int n_aliases;
} cn_server_params;

cn_server_params cn_server_default_params(void);

typedef struct cn_server cn_server;

/* Binds and starts answering (one model: 503 on model endpoints until an engine is set;
 * several: ready at once, nothing loaded). Borrows the strings in p until cn_server_free.
 * Errors: IO (cannot bind, the folder cannot be read), INVALID_ARG (an alias naming no
 * file). */
cn_status cn_server_start(const cn_server_params *p, cn_server **out, cn_error *err);
/* The bound port (useful with port 0). */
int cn_server_port(const cn_server *s);
/* Makes the server ready: it serves e, with e's tokenizer, chat template (none: chat
 * requests get 400), end-of-turn stop and context size. Borrows e until cn_server_free;
 * e's run loop must be started. */
void cn_server_set_engine(cn_server *s, cn_engine *e);
/* Serves POST /v1/embeddings with emb (its tokens from the engine's tokenizer: emb must
 * be made from the engine's model). Borrows emb until cn_server_free. Without one,
 * /v1/embeddings answers 503. */
void cn_server_set_embedder(cn_server *s, cn_embedder *emb);
/* Graceful stop: new completion requests get 503, running ones may finish until
 * deadline_s from now, then the rest are cancelled; returns when none is left. */
void cn_server_drain(cn_server *s, double deadline_s);
/* Stops the HTTP daemon (closes connections), unloads the models it loaded and frees.
 * NULL is a no-op. Call cn_server_drain first, then this, then free the engine. */
void cn_server_free(cn_server *s);

#endif
