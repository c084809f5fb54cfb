/* serve.c — `cinder serve`: the OpenAI-compatible HTTP server on the batched engine.
 * Parses flags, starts listening at once (/health answers 503 while the model loads),
 * loads the model (and a draft model) and makes the engine, which owns the tokenizer,
 * chat template and threads the server asks it for; starts the engine's run loop and
 * waits for SIGINT/SIGTERM; then drains (running requests may finish until
 * --shutdown-timeout), cancels the rest and exits 0. The server itself is src/serve/;
 * everything here goes through the public API (cinder.h). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"
#include "genopts.h"
#include "serve/server.h"

/* The served name: --alias, else the file name without .gguf. */
static void served_name(const char *path, const char *alias, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    snprintf(out, n, "%.255s", alias ? alias : base ? base + 1 : path);
    const size_t len = strlen(out);
    if (!alias && len > 5 && !strcmp(out + len - 5, ".gguf")) out[len - 5] = 0;
}

int cn_cli_serve(int argc, char **argv) {
    const char *model = NULL, *alias = NULL, *draft_path = NULL, *api_key = getenv("CINDER_API_KEY");
    cn_server_params sp = cn_server_default_params();
    cn_engine_params ep = cn_engine_default_params();
    int32_t n_threads = (int32_t)sysconf(_SC_NPROCESSORS_ONLN), n_ctx = 0, shutdown_s = 10;
    int64_t kv_mem = 0, max_body = (int64_t)sp.max_body_bytes;
    bool no_prefix_cache = false;
    const char *pooling = NULL;
    cn_embedder_params emp = cn_embedder_default_params();
    const cli_flag flags[] = {
        CLI_F_MODEL(&model),
        CLI_F_STR("--host", NULL, &sp.host, "ADDR", "IPv4 address to listen on (default 127.0.0.1: loopback only)"),
        CLI_F_NUM("--port", NULL, CLI_INT, &sp.port, 0, 65535, "N", "TCP port (default 8080; 0 = any free port, printed)"),
        CLI_F_THREADS(&n_threads),
        CLI_F_NUM("--parallel", NULL, CLI_INT, &ep.max_running, 1, CN_ENGINE_MAX_RUNNING, "N",
                  "sequences decoding at once (default 16)"),
        CLI_F_NUM("--kv-mem", NULL, CLI_I64, &kv_mem, 1, 1 << 20, "MiB",
                  "KV cache budget in MiB (default: --parallel full contexts)"),
        CLI_F_CUSTOM("--kv-type", NULL, &ep.kv_type, cli_parse_kv_type, "T", "f16 (default) or q8_0"),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &n_ctx, 8, 1 << 20, "N", "positions per sequence (default: the model's, at most 4096)"),
        CLI_F_NUM("--max-queue", NULL, CLI_INT, &ep.max_queue, 1, 1 << 20, "N",
                  "requests waiting for a slot before 429 (default 256)"),
        CLI_F_STR("--api-key", NULL, &api_key, "KEY",
                  "require 'Authorization: Bearer KEY' (default: none;\nalso read from $CINDER_API_KEY)"),
        CLI_F_NUM("--timeout", NULL, CLI_INT, &sp.request_timeout_s, 1, 86400 * 7, "S",
                  "cancel a completion running longer than S seconds (default 600)"),
        CLI_F_NUM("--idle-timeout", NULL, CLI_INT, &sp.idle_timeout_s, 1, 86400, "S",
                  "close an idle keep-alive connection after S seconds (default 30)"),
        CLI_F_NUM("--max-body", NULL, CLI_I64, &max_body, 1, 1 << 30, "BYTES", "larger request bodies get 413 (default 8388608)"),
        CLI_F_NUM("--max-connections", NULL, CLI_INT, &sp.max_connections, 1, 65536, "N",
                  "connections at once; more get 503 (default 256)"),
        CLI_F_STR("--alias", NULL, &alias, "NAME", "the model name clients use (default: the file name without .gguf)"),
        CLI_F_STR("--chat-template", NULL, &ep.chat_template, "NAME", "chatml, gemma or llama3 (default: from the model)"),
        CLI_F_BOOL("--no-prefix-cache", NULL, &no_prefix_cache, "do not reuse cached prompt blocks"),
        CLI_F_NUM("--lookup", NULL, CLI_INT, &sp.lookup_n, 0, 8, "N",
                  "speculative decoding by n-gram lookup (n-grams of up to N\ntokens) for requests that do not set "
                  "\"speculative\";\nthe same tokens, drafted only while it pays (default: off)"),
        CLI_F_STR("--draft", NULL, &draft_path, "MODEL",
                  "a draft model with the same vocabulary: speculation with its\nguesses becomes the default for "
                  "requests that do not say"),
        CLI_F_NUM("--draft-max", NULL, CLI_INT, &sp.max_draft, 1, CN_ENGINE_MAX_DRAFT, "K",
                  "guesses per step and sequence (default 8)"),
        CLI_F_NUM("--shutdown-timeout", NULL, CLI_INT, &shutdown_s, 0, 3600, "S",
                  "on SIGINT/SIGTERM, let running requests finish this long (default 10)"),
        CLI_F_STR("--pooling", NULL, &pooling, "KIND",
                  "/v1/embeddings: mean, cls or last (default: the model's\n<arch>.pooling_type, else last)"),
        CLI_F_NUM("--embd-batch", NULL, CLI_INT, &emp.n_batch, 8, 65536, "N",
                  "/v1/embeddings: tokens per pass, and so the longest input (default 512)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    int n_pos = 0;
    const int pr = cli_flags_parse("serve",
                                   "usage: cinder serve [-m MODEL] [options]\n"
                                   "  an OpenAI-compatible HTTP server (POST /v1/chat/completions, /v1/completions,\n"
                                   "  /v1/embeddings, /infill, /tokenize, /detokenize; GET /v1/models, /health, /metrics)\n"
                                   "  on the batched engine\n",
                                   groups, 1, argc, argv, NULL, 0, &n_pos);
    if (pr) return CLI_FLAGS_EXIT(pr);
    cn_error err = {0};
    if (pooling && cn_pooling_from_name(pooling, &emp.pooling, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: --pooling: %s", err.msg);
        return 2;
    }
    sp.max_body_bytes = (size_t)max_body;
    sp.api_key = api_key && *api_key ? api_key : NULL;
    ep.prefix_cache = !no_prefix_cache;

    char buf[4096], model_id[256];
    const char *path = cli_model_path("serve", model, buf, sizeof buf);
    if (!path) return 1;
    served_name(path, alias, model_id, sizeof model_id);
    sp.model_id = model_id;

    /* SIGINT/SIGTERM go to sigwait below; every thread started from here inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    cn_server *srv = NULL;
    cn_model *m = NULL, *dm = NULL;
    cn_engine *e = NULL;
    cn_embedder *emb = NULL;
    int rc = 1;
    if (cn_server_start(&sp, &srv, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        return 1;
    }
    fprintf(stderr, "cinder: listening on http://%s:%d (loading %s)\n", sp.host, cn_server_port(srv), path);
    if (cn_cli_model_load(path, &m, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        goto done;
    }
    if (draft_path && cn_cli_model_load(draft_path, &dm, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: the draft model: %s", err.msg);
        goto done;
    }
    cn_model_info info;
    cn_model_get_info(m, &info);
    ep.draft = dm;
    ep.n_threads = n_threads;
    ep.n_ctx = n_ctx ? n_ctx : info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
    if (ep.step_tokens < ep.max_running) ep.step_tokens = ep.max_running;
    if (kv_mem) ep.kv_mem_mib = kv_mem;
    else ep.kv_tokens = (int64_t)ep.max_running * ep.n_ctx;
    if (cn_engine_create(m, &ep, &e, &err) != CN_STATUS_OK || cn_engine_start(e, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        if (!strcmp(err.param, "chat_template")) rc = 2;
        goto done;
    }
    const cn_chat_template *chat = cn_engine_chat_template(e);
    if (!chat)
        fprintf(stderr, "cinder: serve: the model has no chat template cinder renders (--chat-template NAME "
                        "chooses one); /v1/chat/completions will answer 400\n");
    emp.n_threads = n_threads;
    if (cn_embedder_create(m, &emp, &emb, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: the embedder: %s", err.msg);
        goto done;
    }
    cn_server_set_engine(srv, e);
    cn_server_set_embedder(srv, emb);
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    fprintf(stderr,
            "cinder: serving %s at http://%s:%d/v1 (context %d, %d parallel, KV %lld blocks of %d tokens, "
            "chat template %s%s%s%s; embeddings: pooling %s)\n",
            model_id, sp.host, cn_server_port(srv), cn_engine_n_ctx(e), ep.max_running,
            (long long)st.kv_blocks_total, st.kv_block_tokens, chat ? cn_chat_template_name(chat) : "none",
            sp.api_key ? ", API key required" : "", dm ? ", speculation: draft model " : "",
            dm ? draft_path : sp.lookup_n ? ", speculation: n-gram lookup" : "",
            cn_pooling_name(cn_embedder_pooling(emb)));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "cinder: %s: draining (up to %d s), then exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            shutdown_s);
    cn_server_drain(srv, (double)shutdown_s);
    rc = 0;
done:
    cn_server_free(srv);
    cn_embedder_free(emb);
    cn_engine_free(e);
    cn_model_free(dm);
    cn_model_free(m);
    return rc;
}
