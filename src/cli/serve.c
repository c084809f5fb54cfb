/* serve.c — `cinder serve`: the OpenAI-compatible HTTP server on the batched engine.
 * Parses flags, starts listening at once (/health answers 503 while the model loads),
 * loads the model, starts the engine's run loop, and waits for SIGINT/SIGTERM; then
 * drains (running requests may finish until --shutdown-timeout), cancels the rest and
 * exits 0. The server itself is src/serve/. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cinder.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "serve/server.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "cli/genopts.h"
#include "engine/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cinder serve [-m MODEL] [options]\n"
            "  an OpenAI-compatible HTTP server (POST /v1/chat/completions, /v1/completions,\n"
            "  /tokenize, /detokenize; GET /v1/models, /health, /metrics) on the batched engine\n"
            "  -m, --model PATH       GGUF model (default $CINDER_MODELS or ~/.cache/cinder/models/\n"
            "                         " CLI_DEFAULT_MODEL ")\n"
            "  --host ADDR            IPv4 address to listen on (default 127.0.0.1: loopback only)\n"
            "  --port N               TCP port (default 8080; 0 = any free port, printed)\n"
            "  -t, --threads N        compute threads (default: all CPUs)\n"
            "  --parallel N           sequences decoding at once (default 16)\n"
            "  --kv-mem MiB           KV cache budget in MiB (default: --parallel full contexts)\n"
            "  --kv-type T            f16 (default) or q8_0\n"
            "  -c, --ctx N            positions per sequence (default: the model's, at most 4096)\n"
            "  --max-queue N          requests waiting for a slot before 429 (default 256)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' (default: none;\n"
            "                         also read from $CINDER_API_KEY)\n"
            "  --timeout S            cancel a completion running longer than S seconds (default 600)\n"
            "  --idle-timeout S       close an idle keep-alive connection after S seconds (default 30)\n"
            "  --max-body BYTES       larger request bodies get 413 (default 8388608)\n"
            "  --max-connections N    connections at once; more get 503 (default 256)\n"
            "  --alias NAME           the model name clients use (default: the file name without .gguf)\n"
            "  --chat-template NAME   chatml, gemma or llama3 (default: from the model)\n"
            "  --no-prefix-cache      do not reuse cached prompt blocks\n"
            "  --lookup N             speculative decoding by n-gram lookup (n-grams of up to N\n"
            "                         tokens, 1..8) for requests that do not set \"speculative\";\n"
            "                         the same tokens, drafted only while it pays (default: off)\n"
            "  --draft MODEL          a draft model with the same vocabulary: speculation with its\n"
            "                         guesses becomes the default for requests that do not say\n"
            "  --draft-max K          guesses per step and sequence, 1..16 (default 8)\n"
            "  --shutdown-timeout S   on SIGINT/SIGTERM, let running requests finish this long (default 10)\n");
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int cn_cli_serve(int argc, char **argv) {
    const char *model = NULL, *tmpl_name = NULL, *alias = NULL, *draft_path = NULL;
    cn_server_params sp = cn_server_default_params();
    cn_engine_params ep = cn_engine_default_params();
    long n_threads = sysconf(_SC_NPROCESSORS_ONLN), kv_mem = 0, n_ctx = 0, shutdown_s = 10;
    sp.api_key = getenv("CINDER_API_KEY");
    if (sp.api_key && !*sp.api_key) sp.api_key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
#define NEED_VALUE()                                                  \
    do {                                                              \
        if (!v) {                                                     \
            cn_cli_errorf("serve: %s needs a value", a);              \
            return 2;                                                 \
        }                                                             \
        i++;                                                          \
    } while (0)
#define INT_FLAG(lo, hi)                                                                     \
    do {                                                                                     \
        NEED_VALUE();                                                                        \
        if (!parse_long(v, lo, hi, &x)) {                                                    \
            cn_cli_errorf("serve: %s '%s' is not an integer in [%ld, %ld]", a, v, (long)(lo), (long)(hi)); \
            return 2;                                                                        \
        }                                                                                    \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEED_VALUE();
            model = v;
        } else if (!strcmp(a, "--host")) {
            NEED_VALUE();
            sp.host = v;
        } else if (!strcmp(a, "--port")) {
            INT_FLAG(0, 65535);
            sp.port = (int)x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            INT_FLAG(1, 1024);
            n_threads = x;
        } else if (!strcmp(a, "--parallel")) {
            INT_FLAG(1, CN_ENGINE_MAX_RUNNING);
            ep.max_running = (int32_t)x;
        } else if (!strcmp(a, "--kv-mem")) {
            INT_FLAG(1, 1L << 20);
            kv_mem = x;
        } else if (!strcmp(a, "--kv-type")) {
            NEED_VALUE();
            if (!strcmp(v, "f16")) ep.kv_type = CN_TYPE_F16;
            else if (!strcmp(v, "q8_0")) ep.kv_type = CN_TYPE_Q8_0;
            else {
                cn_cli_errorf("serve: --kv-type '%s': must be f16 or q8_0", v);
                return 2;
            }
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            INT_FLAG(8, 1L << 20);
            n_ctx = x;
        } else if (!strcmp(a, "--max-queue")) {
            INT_FLAG(1, 1L << 20);
            ep.max_queue = (int32_t)x;
        } else if (!strcmp(a, "--api-key")) {
            NEED_VALUE();
            sp.api_key = *v ? v : NULL;
        } else if (!strcmp(a, "--timeout")) {
            INT_FLAG(1, 86400 * 7);
            sp.request_timeout_s = (int)x;
        } else if (!strcmp(a, "--idle-timeout")) {
            INT_FLAG(1, 86400);
            sp.idle_timeout_s = (int)x;
        } else if (!strcmp(a, "--max-body")) {
            INT_FLAG(1, 1L << 30);
            sp.max_body_bytes = (size_t)x;
        } else if (!strcmp(a, "--max-connections")) {
            INT_FLAG(1, 65536);
            sp.max_connections = (int)x;
        } else if (!strcmp(a, "--alias")) {
            NEED_VALUE();
            alias = v;
        } else if (!strcmp(a, "--chat-template")) {
            NEED_VALUE();
            tmpl_name = v;
        } else if (!strcmp(a, "--no-prefix-cache")) {
            ep.prefix_cache = false;
        } else if (!strcmp(a, "--lookup")) {
            INT_FLAG(0, 8);
            sp.lookup_n = (int32_t)x;
        } else if (!strcmp(a, "--draft")) {
            NEED_VALUE();
            draft_path = v;
        } else if (!strcmp(a, "--draft-max")) {
            INT_FLAG(1, CN_ENGINE_MAX_DRAFT);
            sp.max_draft = (int32_t)x;
        } else if (!strcmp(a, "--shutdown-timeout")) {
            INT_FLAG(0, 3600);
            shutdown_s = x;
        } else {
            cn_cli_errorf("serve: unknown option '%s' (see cinder serve --help)", a);
            return 2;
        }
#undef INT_FLAG
#undef NEED_VALUE
    }

    char path[PATH_MAX];
    if (model) {
        snprintf(path, sizeof path, "%s", model);
    } else {
        const cli_gen_opts go = {.model = NULL};
        cli_model_path(&go, path, sizeof path);
        if (access(path, R_OK) != 0) {
            cn_cli_errorf("serve: the default model %s is missing: run scripts/fetch_models.sh, or give -m MODEL",
                          path);
            return 1;
        }
    }
    /* the served name: --alias, else the file name without .gguf */
    char model_id[256];
    const char *base = strrchr(path, '/');
    snprintf(model_id, sizeof model_id, "%.255s", alias ? alias : base ? base + 1 : path);
    const size_t idl = strlen(model_id);
    if (!alias && idl > 5 && !strcmp(model_id + idl - 5, ".gguf")) model_id[idl - 5] = 0;
    sp.model_id = model_id;

    /* SIGINT/SIGTERM go to sigwait below; every thread started from here inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    cn_error err = {0};
    cn_server *srv = NULL;
    cn_model *m = NULL, *dm = NULL;
    cn_tokenizer *tok = NULL;
    cn_chat_template *chat = NULL;
    cn_engine *e = NULL;
    int rc = 1;
    sp.draft = draft_path != NULL;
    if (cn_server_start(&sp, &srv, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        return 1;
    }
    fprintf(stderr, "cinder: listening on http://%s:%d (loading %s)\n", sp.host, cn_server_port(srv), path);
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    if (cn_model_load(path, &mp, &m, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(m), &tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        goto done;
    }
    if (tmpl_name) {
        if (cn_chat_template_from_name(tmpl_name, &chat, &err) != CN_STATUS_OK) {
            cn_cli_errorf("serve: %s", err.msg);
            rc = 2;
            goto done;
        }
    } else {
        cn_gguf_str js = {0};
        const bool has = cn_gguf_get_str(cn_model_gguf(m), "tokenizer.chat_template", &js);
        if (cn_chat_template_detect(has ? js.ptr : NULL, has ? js.len : 0, &chat, &err) != CN_STATUS_OK) {
            fprintf(stderr, "cinder: serve: %s; /v1/chat/completions will answer 400\n", err.msg);
            chat = NULL;
        }
    }
    if (draft_path && cn_model_load(draft_path, &mp, &dm, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: the draft model: %s", err.msg);
        goto done;
    }
    ep.draft = dm;
    const cn_hparams *hp = cn_model_hparams(m);
    ep.n_threads = (int32_t)n_threads;
    ep.n_ctx = (int32_t)(n_ctx ? n_ctx : CN_MIN(hp->n_ctx_train, 4096));
    ep.step_tokens = CN_MAX(ep.step_tokens, ep.max_running);
    if (ep.max_queue < 1) ep.max_queue = 1;
    if (kv_mem) ep.kv_mem_mib = kv_mem;
    else ep.kv_tokens = (int64_t)ep.max_running * ep.n_ctx;
    if (cn_engine_create(m, &ep, &e, &err) != CN_STATUS_OK || cn_engine_start(e, &err) != CN_STATUS_OK) {
        cn_cli_errorf("serve: %s", err.msg);
        goto done;
    }
    {
        
        cn_server_set_engine(srv, e, tok, chat, cn_engine_n_ctx(e), hp->n_vocab);
        cn_engine_stats st;
        cn_engine_get_stats(e, &st);
        fprintf(stderr,
                "cinder: serving %s at http://%s:%d/v1 (context %d, %d parallel, KV %lld blocks of %d tokens, "
                "chat template %s%s%s%s)\n",
                model_id, sp.host, cn_server_port(srv), cn_engine_n_ctx(e), ep.max_running,
                (long long)st.kv_blocks_total, st.kv_block_tokens, chat ? cn_chat_template_name(chat) : "none",
                sp.api_key ? ", API key required" : "", dm ? ", speculation: draft model " : "",
                dm ? draft_path : sp.lookup_n ? ", speculation: n-gram lookup" : "");
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "cinder: %s: draining (up to %ld s), then exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            shutdown_s);
    cn_server_drain(srv, (double)shutdown_s);
    rc = 0;
done:
    cn_server_free(srv);
    cn_engine_free(e);
    cn_chat_template_free(chat);
    cn_tokenizer_free(tok);
    cn_model_free(dm);
    cn_model_free(m);
    return rc;
}
