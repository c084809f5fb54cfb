/* serve.c — `cinder serve`: the OpenAI-compatible HTTP server on the batched engine.
 * Parses flags, starts listening at once (/health answers 503 while the model loads),
 * loads the model (and a draft model) and makes the engine, which owns the tokenizer,
 * chat template and threads the server asks it for (its embedder for /v1/embeddings runs
 * on them too: one compute pool per model); starts the engine's run loop and
 * waits for SIGINT/SIGTERM; then drains (running requests may finish until
 * --shutdown-timeout), cancels the rest and exits 0. With --models-dir the server serves
 * every GGUF file of a folder and loads each on its first request through load_engine
 * here, with the same engine flags for every model. The server itself is src/serve/;
 * everything here goes through the public API (cinder.h). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"
#include "serve/server.h"

/* The engine flags every served model gets. */
typedef struct {
    cn_engine_params ep;
    int32_t n_ctx;          /* 0: the model's, at most 4096 */
    int64_t kv_mem;         /* MiB; 0: --parallel full contexts */
    cn_embedder_params emp; /* /v1/embeddings */
} engine_cfg;

/* An engine for m with its run loop started. */
static cn_status make_engine(const engine_cfg *c, const cn_model *m, cn_engine **out, cn_error *err) {
    cn_model_info info;
    cn_model_get_info(m, &info);
    cn_engine_params ep = c->ep;
    ep.n_ctx = c->n_ctx ? c->n_ctx : info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
    if (ep.step_tokens < ep.max_running) ep.step_tokens = ep.max_running;
    if (c->kv_mem) ep.kv_mem_mib = c->kv_mem;
    else ep.kv_tokens = (int64_t)ep.max_running * ep.n_ctx;
    *out = NULL;
    cn_status st = cn_engine_create(m, &ep, out, err);
    if (st == CN_STATUS_OK) st = cn_engine_start(*out, err);
    if (st != CN_STATUS_OK) {
        cn_engine_free(*out);
        *out = NULL;
    }
    return st;
}

/* The server's loader (several models): the file's model and a started engine. */
static cn_status load_engine(void *user, const char *path, cn_model **m, cn_engine **e, cn_embedder **emb,
                             cn_error *err) {
    const engine_cfg *ec = user;
    *e = NULL;
    *emb = NULL;
    cn_status st = cn_cli_model_load(path, m, err);
    if (st == CN_STATUS_OK) st = make_engine(ec, *m, e, err);
    if (st == CN_STATUS_OK) st = cn_engine_embedder(*e, &ec->emp, emb, err);
    if (st != CN_STATUS_OK) {
        cn_engine_free(*e);
        *e = NULL;
        cn_model_free(*m);
        *m = NULL;
        fprintf(stderr, "cinder: serve: loading %s failed: %s\n", path, err->msg);
    } else {
        fprintf(stderr, "cinder: serve: loaded %s\n", path);
    }
    return st;
}

/* The served name: --alias, else the file name without .gguf. */
static void served_name(const char *path, const char *alias, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    snprintf(out, n, "%.255s", alias ? alias : base ? base + 1 : path);
    const size_t len = strlen(out);
    if (!alias && len > 5 && !strcmp(out + len - 5, ".gguf")) out[len - 5] = 0;
}

/* SIGINT/SIGTERM go to sigwait (wait_and_drain); every thread started after this
 * inherits the mask. */
static sigset_t block_signals(void) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return sigs;
}

static void wait_and_drain(cn_server *srv, sigset_t *sigs, int shutdown_s) {
    int sig = 0;
    sigwait(sigs, &sig);
    fprintf(stderr, "cinder: %s: draining (up to %d s), then exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            shutdown_s);
    cn_server_drain(srv, (double)shutdown_s);
}

/* What `cinder serve` was asked for: the flags, read into the server's and the engine's
 * parameters. */
enum { MAX_ALIASES = 64 };
typedef struct {
    cn_server_params sp;
    engine_cfg ec;
    const char *model, *draft_path, *models_dir;
    const char *aliases[MAX_ALIASES], *model_aliases[MAX_ALIASES], *all_aliases[2 * MAX_ALIASES];
    int32_t n_alias, n_model_alias;
    int32_t shutdown_s, models_max;
    char dir_buf[4096];
} serve_opts;

/* Reads the flags into o; -1 to go on, else the exit code (help printed, or a usage error). */
static int parse_opts(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.sp = cn_server_default_params(), .shutdown_s = 10};
    o->ec = (engine_cfg){.ep = cn_engine_default_params(), .emp = cn_embedder_default_params()};
    cn_server_params *sp = &o->sp;
    cn_engine_params *const epp = &o->ec.ep;
    const char *api_key = getenv("CINDER_API_KEY"), *pooling = NULL;
    int32_t n_threads = 0; /* every CPU */
    int64_t max_body = (int64_t)sp->max_body_bytes;
    bool no_prefix_cache = false;
    const cli_flag flags[] = {
        CLI_F_MODEL(&o->model),
        CLI_F_STR("--host", NULL, &sp->host, "ADDR", "IPv4 address to listen on (default 127.0.0.1: loopback only)"),
        CLI_F_NUM("--port", NULL, CLI_INT, &sp->port, 0, 65535, "N",
                  "TCP port (default 8080; 0 = any free port, printed)"),
        CLI_F_THREADS(&n_threads),
        CLI_F_NUM("--parallel", NULL, CLI_INT, &epp->max_running, 1, CN_ENGINE_MAX_RUNNING, "N",
                  "sequences decoding at once (default 16)"),
        CLI_F_NUM("--kv-mem", NULL, CLI_I64, &o->ec.kv_mem, 1, 1 << 20, "MiB",
                  "KV cache budget in MiB (default: --parallel full contexts)"),
        CLI_F_CUSTOM("--kv-type", NULL, &epp->kv_type, cli_parse_kv_type, "T", "f16 (default) or q8_0"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &o->ec.n_ctx, 8, 1 << 20, "N",
                  "positions per sequence (default: the model's, at most 4096)"),
        CLI_F_NUM("--max-queue", NULL, CLI_INT, &epp->max_queue, 1, 1 << 20, "N",
                  "requests waiting for a slot before 429 (default 256)"),
        CLI_F_STR("--api-key", NULL, &api_key, "KEY",
                  "require 'Authorization: Bearer KEY' (default: none;\nalso read from $CINDER_API_KEY)"),
        CLI_F_NUM("--timeout", NULL, CLI_INT, &sp->request_timeout_s, 1, 86400 * 7, "S",
                  "cancel a completion running longer than S seconds (default 600)"),
        CLI_F_NUM("--idle-timeout", NULL, CLI_INT, &sp->idle_timeout_s, 1, 86400, "S",
                  "close an idle keep-alive connection after S seconds (default 30)"),
        CLI_F_NUM("--max-body", NULL, CLI_I64, &max_body, 1, 1 << 30, "BYTES",
                  "larger request bodies get 413 (default 8388608)"),
        CLI_F_NUM("--max-connections", NULL, CLI_INT, &sp->max_connections, 1, 65536, "N",
                  "connections at once; more get 503 (default 256)"),
        {.name = "--alias",
         .kind = CLI_STRS,
         .dst = o->aliases,
         .max = MAX_ALIASES,
         .count = &o->n_alias,
         .metavar = "NAME",
         .help = "the model name clients use (default: the file name without .gguf);\nwith --models-dir: NAME=FILE, "
                 "as --model-alias"},
        CLI_F_STR(
            "--models-dir", NULL, &o->models_dir, "DIR",
            "serve every *.gguf of DIR (named by the file name without\n.gguf), each loaded by the first request "
            "for it;\ninstead of -m. --models-max or --model-alias without -m:\nthe models cache ($CINDER_MODELS or "
            "~/.cache/cinder/models)"),
        CLI_F_NUM("--models-max", NULL, CLI_INT, &o->models_max, 1, 1024, "N",
                  "with --models-dir: at most N models loaded; the least\nrecently used idle one is unloaded (default: "
                  "no limit)"),
        {.name = "--model-alias",
         .kind = CLI_STRS,
         .dst = o->model_aliases,
         .max = MAX_ALIASES,
         .count = &o->n_model_alias,
         .metavar = "NAME=FILE",
         .help = "with --models-dir: NAME also names FILE (repeatable)"},
        CLI_F_STR("--chat-template", NULL, &epp->chat_template, "NAME",
                  "chatml, gemma or llama3 (default: from the model)"),
        CLI_F_BOOL("--no-prefix-cache", NULL, &no_prefix_cache, "do not reuse cached prompt blocks"),
        CLI_F_NUM("--lookup", NULL, CLI_INT, &sp->lookup_n, 0, 8, "N",
                  "speculative decoding by n-gram lookup (n-grams of up to N\ntokens) for requests that do not set "
                  "\"speculative\";\nthe same tokens, drafted only while it pays (default: off)"),
        CLI_F_STR("--draft", NULL, &o->draft_path, "MODEL",
                  "a draft model with the same vocabulary: speculation with its\nguesses becomes the default for "
                  "requests that do not say"),
        CLI_F_NUM("--draft-max", NULL, CLI_INT, &sp->max_draft, 1, CN_ENGINE_MAX_DRAFT, "K",
                  "guesses per step and sequence (default 8)"),
        CLI_F_NUM("--shutdown-timeout", NULL, CLI_INT, &o->shutdown_s, 0, 3600, "S",
                  "on SIGINT/SIGTERM, let running requests finish this long (default 10)"),
        CLI_F_STR("--pooling", NULL, &pooling, "KIND",
                  "/v1/embeddings: mean, cls or last (default: the model's\n<arch>.pooling_type, else last)"),
        CLI_F_NUM("--embd-batch", NULL, CLI_INT, &o->ec.emp.n_batch, 8, 65536, "N",
                  "/v1/embeddings: tokens per pass, and so the longest input (default 512)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int pr = cli_flags_parse("serve",
                                   "usage: cinder serve [-m MODEL | --models-dir DIR] [options]\n"
                                   "  an HTTP server on the batched engine that speaks OpenAI's, Anthropic's and\n"
                                   "  llama-server's APIs:\n"
                                   "    POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings\n"
                                   "         /v1/messages, /v1/messages/count_tokens\n"
                                   "         /infill, /tokenize, /detokenize\n"
                                   "    GET  /v1/models, /health, /metrics, / (a chat page)\n",
                                   groups, 1, argc, argv, NULL, 0, &n_pos);
    if (pr) return CLI_FLAGS_EXIT(pr);
    cn_error err = {0};
    if (pooling && cn_pooling_from_name(pooling, &o->ec.emp.pooling, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: --pooling: %s", err.msg);
        return 2;
    }
    sp->max_body_bytes = (size_t)max_body;
    sp->api_key = api_key && *api_key ? api_key : NULL;
    epp->prefix_cache = !no_prefix_cache;
    epp->n_threads = n_threads; /* the embedders run on the engine's threads */
    /* several models: --models-dir, or --models-max / --model-alias without -m */
    if (!o->models_dir && !o->model && (o->models_max > 0 || o->n_model_alias > 0)) {
        const char *d = getenv("CINDER_MODELS");
        if (d && *d) snprintf(o->dir_buf, sizeof o->dir_buf, "%s", d);
        else snprintf(o->dir_buf, sizeof o->dir_buf, "%s/.cache/cinder/models", getenv("HOME") ? getenv("HOME") : ".");
        o->models_dir = o->dir_buf;
    }
    if (o->models_dir && (o->model || o->draft_path)) {
        cn_cli_errorf("serve: --models-dir serves the models of a folder: it does not take %s",
                      o->model ? "-m" : "--draft (each model would need its own)");
        return 2;
    }
    if (!o->models_dir && (o->models_max > 0 || o->n_model_alias > 0 || o->n_alias > 1 ||
                           (o->n_alias == 1 && strchr(o->aliases[0], '=')))) {
        cn_cli_errorf("serve: --models-max, --model-alias and NAME=FILE aliases are for --models-dir; with -m, "
                      "--alias NAME names the one model");
        return 2;
    }
    return -1;
}

/* Several models: the server loads them (load_engine) as requests ask. */
static int serve_dir(serve_opts *o) {
    cn_server_params *sp = &o->sp;
    int k = 0;
    for (int i = 0; i < o->n_alias; i++) o->all_aliases[k++] = o->aliases[i];
    for (int i = 0; i < o->n_model_alias; i++) o->all_aliases[k++] = o->model_aliases[i];
    sp->models_dir = o->models_dir;
    sp->models_max = o->models_max;
    sp->aliases = o->all_aliases;
    sp->n_aliases = k;
    sp->load = load_engine;
    sp->load_user = &o->ec;
    sigset_t sigs = block_signals();
    cn_error err = {0};
    cn_server *srv = NULL;
    if (cn_server_start(sp, &srv, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        return err.status == CN_STATUS_INVALID_ARG ? 2 : 1;
    }
    char most[48] = "";
    if (sp->models_max) snprintf(most, sizeof most, ", at most %d loaded at once", sp->models_max);
    fprintf(stderr, "cinder: serving the models of %s at http://%s:%d/v1 (each loaded on its first request%s)\n",
            sp->models_dir, sp->host, cn_server_port(srv), most);
    wait_and_drain(srv, &sigs, o->shutdown_s);
    cn_server_free(srv);
    return 0;
}

/* The one line that says what is served, once it is. */
static void print_serving(const serve_opts *o, const cn_server *srv, cn_engine *e, const cn_embedder *emb, bool draft) {
    const cn_chat_template *chat = cn_engine_chat_template(e);
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    fprintf(stderr,
            "cinder: serving %s at http://%s:%d/v1 (context %d, %d parallel, KV %lld blocks of %d tokens, "
            "chat template %s%s%s%s; embeddings: pooling %s)\n",
            o->sp.model_id, o->sp.host, cn_server_port(srv), cn_engine_n_ctx(e), o->ec.ep.max_running,
            (long long)st.kv_blocks_total, st.kv_block_tokens, chat ? cn_chat_template_name(chat) : "none",
            o->sp.api_key ? ", API key required" : "", draft ? ", speculation: draft model " : "",
            draft            ? o->draft_path
            : o->sp.lookup_n ? ", speculation: n-gram lookup"
                             : "",
            cn_pooling_name(cn_embedder_pooling(emb)));
}

/* One model: listening at once (/health says 503 while it loads), then the model, its
 * draft, the engine and its embedder. */
static int serve_model(serve_opts *o) {
    char buf[4096], model_id[256];
    const char *path = cli_model_path("serve", o->model, buf, sizeof buf);
    if (!path) return 1;
    served_name(path, o->n_alias ? o->aliases[0] : NULL, model_id, sizeof model_id);
    o->sp.model_id = model_id;

    sigset_t sigs = block_signals();
    cn_error err = {0};
    cn_server *srv = NULL;
    cn_model *m = NULL, *dm = NULL;
    cn_engine *e = NULL;
    cn_embedder *emb = NULL;
    int rc = 1;
    if (cn_server_start(&o->sp, &srv, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        return 1;
    }
    fprintf(stderr, "cinder: listening on http://%s:%d (loading %s)\n", o->sp.host, cn_server_port(srv), path);
    if (cn_cli_model_load(path, &m, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        goto done;
    }
    if (o->draft_path && cn_cli_model_load(o->draft_path, &dm, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: the draft model: %s", err.msg);
        goto done;
    }
    o->ec.ep.draft = dm;
    if (make_engine(&o->ec, m, &e, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        if (!strcmp(err.param, "chat_template")) rc = 2;
        goto done;
    }
    if (!cn_engine_chat_template(e))
        fprintf(stderr, "cinder: serve: the model has no chat template cinder renders (--chat-template NAME "
                        "chooses one); /v1/chat/completions will answer 400\n");
    if (cn_engine_embedder(e, &o->ec.emp, &emb, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: the embedder: %s", err.msg);
        goto done;
    }
    cn_server_set_engine(srv, e);
    cn_server_set_embedder(srv, emb);
    print_serving(o, srv, e, emb, dm != NULL);
    wait_and_drain(srv, &sigs, o->shutdown_s);
    rc = 0;
done:
    cn_server_free(srv);
    cn_embedder_free(emb);
    cn_engine_free(e);
    cn_model_free(dm);
    cn_model_free(m);
    return rc;
}

int cn_cli_serve(int argc, char **argv) {
    static serve_opts o; /* 12 KB of paths and aliases: off the stack */
    const int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) return rc;
    return o.models_dir ? serve_dir(&o) : serve_model(&o);
}
