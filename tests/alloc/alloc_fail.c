/* alloc_fail.c — allocation-failure injection (issue 17), run by scripts/test.sh in the
 * ASan + UBSan build.
 *
 * Linked with -Wl,--wrap for malloc, calloc, realloc, strdup, strndup and aligned_alloc,
 * so every allocation the library makes (and jansson's: the server gives it an allocator
 * of its own) goes through one counter. inject_arm(N) makes the Nth allocation from then on return
 * NULL; a sweep runs one scenario for N = 1, 2, ... until a run makes fewer than N
 * allocations, so every allocation of the scenario has failed once. After each run:
 *   - the failing call returned an error status with a message (never OK with a hole);
 *   - LeakSanitizer finds nothing left unreachable (__lsan_do_recoverable_leak_check);
 *   - what survives still works: the next request on the same engine / server gives the
 *     same text as a run with no failure (the reference).
 * Scenarios: model load (stories260K), the tokenizer (SentencePiece and byte-level BPE
 * vocabularies from ../shared/testdata: load, encode with special tokens, decode), engine
 * create, submit and steps (n = 2, stop strings, logprobs), an engine's embedder
 * (create, embed two texts; after a failed pass the same embedder embeds again), a chat
 * template run by the Jinja interpreter (parse, render a tool-calling conversation), the
 * public context API (create, then a greedy request with logprobs), and HTTP requests
 * to an in-process server (a completion with n = 2 and logprobs, a streamed one, /tokenize,
 * Anthropic's /v1/messages streamed with a stop sequence, /v1/responses whole and
 * streamed), and a server of several models (--models-dir, --models-max 1) where the
 * request names the model that is not loaded: the loaded one is unloaded, the named one
 * loaded, then the request runs. Over HTTP the rule is: a 200 is the reference reply,
 * else a 503 that says why, or, for a stream whose headers are out, its API's error
 * event.
 *
 *   build-san/tests/alloc_fail [--shard K/S] [TESTDATA]    exit 0 when every sweep holds
 *
 * With --shard, S processes run side by side, each failing every S-th allocation of each
 * scenario (scripts/test.sh runs two): the same allocations fail once in all. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cinder.h"
#include "core/core.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "serve/server.h"
#include "text/tokenizer.h"

int __lsan_do_recoverable_leak_check(void);

/* ---- the counter ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

static long g_count;   /* allocations since inject_arm (atomic) */
static long g_fail_at; /* 0: off; else the allocation that fails */
static int g_failed;   /* it happened */

static bool should_fail(void) {
    if (!__atomic_load_n(&g_fail_at, __ATOMIC_RELAXED)) return false;
    const long k = __atomic_add_fetch(&g_count, 1, __ATOMIC_RELAXED);
    if (k != __atomic_load_n(&g_fail_at, __ATOMIC_RELAXED)) return false;
    __atomic_store_n(&g_failed, 1, __ATOMIC_RELAXED);
    return true;
}

void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return should_fail() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return should_fail() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return should_fail() ? NULL : __real_strndup(s, n); }
void *__wrap_aligned_alloc(size_t align, size_t n) { return should_fail() ? NULL : __real_aligned_alloc(align, n); }

static void inject_arm(long n) {
    __atomic_store_n(&g_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_failed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_fail_at, n, __ATOMIC_RELAXED);
}

/* Disarms; true if the armed allocation was reached (so the sweep goes on). */
static bool inject_disarm(void) {
    __atomic_store_n(&g_fail_at, 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&g_failed, __ATOMIC_RELAXED);
}

/* ---- reporting ---- */

static int g_errors;
static const char *g_scenario = "";
static long g_n;

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "alloc_fail: %s, allocation %ld failing: ", g_scenario, g_n);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_errors++;
}

/* An error must say what failed. */
static void check_error(cn_status st, const cn_error *err, const char *what) {
    if (st == CN_STATUS_OK) return;
    if (!err->msg[0]) bad("%s returned status %d with no message", what, (int)st);
}

static void check_leaks(void) {
    if (__lsan_do_recoverable_leak_check()) bad("LeakSanitizer found leaked memory (above)");
}

typedef bool (*scenario_fn)(void *ctx); /* one run; returns false to stop (broken) */

/* --shard K/S: this process fails allocations N = K+1, K+1+S, K+1+2S, ... of each
 * scenario, so S processes side by side fail every allocation once between them (the
 * setup and the reference runs are done by each). Default 0/1: all of them. */
static long g_shard, g_n_shards = 1;

/* Runs fn with allocation N failing, for N = 1, 2, ... (this shard's) until a run
 * reaches no failure. */
static void sweep(const char *name, scenario_fn fn, void *ctx, long max_n) {
    g_scenario = name;
    const int errors0 = g_errors;
    const double t0 = cn_time_ms();
    long n = 1 + g_shard, runs = 0;
    for (;; n += g_n_shards) {
        g_n = n;
        inject_arm(n);
        const bool go_on = fn(ctx);
        const bool reached = inject_disarm();
        check_leaks();
        runs += reached;
        if (!go_on || !reached || g_errors > errors0 + 5 || n >= max_n) break;
    }
    printf("  %-42s %5ld allocations failed one at a time%s (%.1f s): %s\n", name, runs,
           g_n_shards > 1 ? " (this shard's)" : "", (cn_time_ms() - t0) / 1e3, g_errors == errors0 ? "ok" : "FAILED");
    fflush(stdout);
}

/* ---- scenarios ---- */

static char g_testdata[4096];

static const char *data_path(const char *rel) {
    static char p[8192];
    snprintf(p, sizeof p, "%s/%s", g_testdata, rel);
    return p;
}

static bool run_model_load(void *ctx) {
    (void)ctx;
    cn_model_params mp = cn_model_default_params();
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    cn_error err = {0};
    cn_status st = cn_model_load(data_path("models/stories260K.gguf"), &mp, &m, &err);
    check_error(st, &err, "cn_model_load");
    if (st == CN_STATUS_OK) {
        st = cn_tokenizer_load(cn_model_gguf(m), &tok, &err);
        check_error(st, &err, "cn_tokenizer_load");
    }
    if ((st == CN_STATUS_OK) != (m && tok) && st == CN_STATUS_OK) bad("OK without a model and a tokenizer");
    cn_tokenizer_free(tok);
    cn_model_free(m);
    return true;
}

typedef struct {
    const cn_tokenizer *tok;
    const char *text;
    int32_t ref[512];
    size_t n_ref;
    char ref_text[2048];
} tok_case;

/* encode (two-pass), then decode through the incremental detokenizer */
static cn_status encode_decode(const tok_case *c, int32_t *ids, size_t *n, char *out, size_t cap, cn_error *err) {
    cn_status st = cn_tokenize(c->tok, c->text, strlen(c->text), true, true, ids, 512, n, err);
    if (st != CN_STATUS_OK) return st;
    if (*n > 512) return cn_err(err, CN_STATUS_LIMIT, "test: too many tokens");
    char *text = NULL;
    if ((st = cn_detokenize(c->tok, ids, *n, false, &text, NULL, err)) != CN_STATUS_OK) return st;
    snprintf(out, cap, "%s", text);
    free(text);
    return CN_STATUS_OK;
}

static bool run_tokenize(void *ctx) {
    tok_case *c = ctx;
    int32_t ids[512];
    size_t n = 0;
    char out[2048];
    cn_error err = {0};
    const cn_status st = encode_decode(c, ids, &n, out, sizeof out, &err);
    check_error(st, &err, "tokenize/detokenize");
    if (st == CN_STATUS_OK && (n != c->n_ref || memcmp(ids, c->ref, n * sizeof *ids) || strcmp(out, c->ref_text)))
        bad("OK but not the reference tokens or text");
    return true;
}

static bool run_tokenizer_load(void *ctx) {
    cn_tokenizer *t = NULL;
    cn_error err = {0};
    const cn_status st = cn_tokenizer_load((const cn_gguf *)ctx, &t, &err);
    check_error(st, &err, "cn_tokenizer_load");
    if (st == CN_STATUS_OK && !t) bad("OK without a tokenizer");
    cn_tokenizer_free(t);
    return true;
}

static void tokenizer_sweeps(void) {
    static const struct {
        const char *file, *name;
    } vocabs[] = {
        {"tokenizer/ggml-vocab-llama-spm.gguf", "tokenizer: SentencePiece (llama-spm)"},
        {"tokenizer/ggml-vocab-gpt-2.gguf", "tokenizer: byte-level BPE (gpt-2)"},
    };
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        cn_gguf *g = NULL;
        cn_tokenizer *tok = NULL;
        cn_error err = {0};
        if (cn_gguf_open(data_path(vocabs[v].file), &g, &err) != CN_STATUS_OK ||
            cn_tokenizer_load(g, &tok, &err) != CN_STATUS_OK) {
            fprintf(stderr, "alloc_fail: %s: %s\n", vocabs[v].file, err.msg);
            g_errors++;
            cn_gguf_close(g);
            continue;
        }
        static tok_case c;
        memset(&c, 0, sizeof c);
        c.tok = tok;
        c.text = "Hello world! Ünïcödé  spaces\t\n <s> and </s>, 3.14159 — 日本語テキスト 🦙 done.";
        if (encode_decode(&c, c.ref, &c.n_ref, c.ref_text, sizeof c.ref_text, &err) != CN_STATUS_OK) {
            fprintf(stderr, "alloc_fail: %s: reference run: %s\n", vocabs[v].file, err.msg);
            g_errors++;
        } else {
            sweep(vocabs[v].name, run_tokenize, &c, 100000);
        }
        /* loading the vocabulary, a failing allocation at a time */
        char name[128];
        snprintf(name, sizeof name, "%.60s: load", vocabs[v].name);
        cn_tokenizer_free(tok);
        sweep(name, run_tokenizer_load, g, 100000);
        cn_gguf_close(g);
    }
}

/* ---- the engine ---- */

#define N_REQS 2

typedef struct {
    char text[N_REQS][2][1024];
    size_t n_text[N_REQS][2];
    int32_t n_tokens[N_REQS][2];
    cn_finish_reason finish[N_REQS][2];
    int finished[N_REQS][2];
    int which[N_REQS];
} collect;

typedef struct {
    collect *c;
    int req;
} collect_ref;

static void on_text(void *user, uint64_t id, int32_t index, const char *text, size_t n) {
    (void)id;
    collect_ref *r = user;
    size_t *len = &r->c->n_text[r->req][index];
    if (*len + n < sizeof r->c->text[0][0]) {
        memcpy(r->c->text[r->req][index] + *len, text, n);
        *len += n;
        r->c->text[r->req][index][*len] = 0;
    }
}

static void on_token(void *user, uint64_t id, int32_t index, const cn_gen_token *t) {
    (void)id;
    (void)t;
    collect_ref *r = user;
    r->c->n_tokens[r->req][index]++;
}

static void on_finish(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *tm) {
    (void)id;
    (void)tm;
    collect_ref *r = user;
    r->c->finish[r->req][index] = reason;
    r->c->finished[r->req][index]++;
}

static const char *const STOPS[] = {"park", "\n\n"};

static cn_engine_request make_request(int k) {
    cn_engine_request r = cn_engine_request_default_params();
    r.prompt = k == 0 ? "Once upon a time" : "The little dog";
    r.gen.max_tokens = 24;
    r.n = k == 0 ? 1 : 2;
    if (k == 0) {
        r.gen.sampling.temperature = 0;
        r.gen.stop = STOPS;
        r.gen.n_stop = 2;
    } else {
        r.gen.sampling.temperature = 0.8f;
        r.gen.sampling.seed = 7;
        r.gen.sampling.n_logprobs = 3;
    }
    return r;
}

typedef struct {
    const cn_model *m;
    collect ref;
    cn_engine *e; /* the engine for the submit/step scenario (created without injection) */
} engine_case;

/* Submits both requests and steps to the end. Injection may hit any of it; afterwards
 * (disarmed) the engine finishes what it kept. Each completion that ends "stop" or
 * "length" must equal the reference. */
static bool run_requests(cn_engine *e, collect *out, bool armed_check, const collect *ref) {
    memset(out, 0, sizeof *out);
    collect_ref refs[N_REQS];
    bool submitted[N_REQS] = {false};
    for (int k = 0; k < N_REQS; k++) {
        refs[k] = (collect_ref){out, k};
        cn_engine_request r = make_request(k);
        cn_engine_callbacks cb = {.on_text = on_text, .on_token = on_token, .on_finish = on_finish, .user = &refs[k]};
        uint64_t id = 0;
        cn_error err = {0};
        const cn_status st = cn_engine_submit(e, &r, &cb, &id, &err);
        check_error(st, &err, "cn_engine_submit");
        submitted[k] = st == CN_STATUS_OK;
    }
    for (int guard = 0; guard < 10000; guard++) {
        int32_t rows = 0;
        cn_error err = {0};
        const cn_status st = cn_engine_step(e, &rows, &err);
        check_error(st, &err, "cn_engine_step");
        if (st != CN_STATUS_OK) inject_disarm(); /* the step is retried, as the contract allows */
        else if (rows == 0) break;
    }
    for (int k = 0; k < N_REQS; k++) {
        if (!submitted[k]) continue;
        const int n = k == 0 ? 1 : 2;
        for (int i = 0; i < n; i++) {
            if (out->finished[k][i] != 1) {
                bad("request %d completion %d finished %d times", k, i, out->finished[k][i]);
                continue;
            }
            const cn_finish_reason f = out->finish[k][i];
            if (!armed_check || !ref) continue;
            if ((f == CN_FINISH_STOP || f == CN_FINISH_LENGTH) &&
                (f != ref->finish[k][i] || strcmp(out->text[k][i], ref->text[k][i])))
                bad("request %d completion %d ended normally with another text: '%s' (want '%s')", k, i,
                    out->text[k][i], ref->text[k][i]);
        }
    }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    if (st.n_requests || st.n_running || st.n_waiting || st.kv_blocks_used)
        bad("left in the engine: %d requests, %d running, %d waiting, %lld blocks", st.n_requests, st.n_running,
            st.n_waiting, (long long)st.kv_blocks_used);
    return true;
}

static bool run_engine_steps(void *ctx) {
    engine_case *c = ctx;
    collect got;
    run_requests(c->e, &got, true, &c->ref);
    inject_disarm();
    /* the same engine serves the next requests as if nothing happened */
    run_requests(c->e, &got, false, NULL);
    for (int k = 0; k < N_REQS; k++)
        for (int i = 0; i < (k == 0 ? 1 : 2); i++)
            if (strcmp(got.text[k][i], c->ref.text[k][i]) || got.finish[k][i] != c->ref.finish[k][i])
                bad("after the failure, request %d completion %d gave '%s' (want '%s')", k, i, got.text[k][i],
                    c->ref.text[k][i]);
    return true;
}

static cn_engine_params engine_params(void) {
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 1;
    p.kv_tokens = 1024;
    p.max_running = 4;
    p.n_ctx = 256;
    return p;
}

static bool run_engine_create(void *ctx) {
    engine_case *c = ctx;
    cn_engine_params p = engine_params();
    cn_engine *e = NULL;
    cn_error err = {0};
    const cn_status st = cn_engine_create(c->m, &p, &e, &err);
    check_error(st, &err, "cn_engine_create");
    if (st == CN_STATUS_OK) {
        inject_disarm();
        collect got;
        run_requests(e, &got, false, NULL);
        for (int k = 0; k < N_REQS; k++)
            for (int i = 0; i < (k == 0 ? 1 : 2); i++)
                if (strcmp(got.text[k][i], c->ref.text[k][i]))
                    bad("an engine created under injection gave another text for request %d", k);
    }
    cn_engine_free(e);
    return true;
}

/* ---- an engine's embedder ---- */

typedef struct {
    cn_engine *e;
    float *ref; /* (2, n_embd) the vectors with no failure */
    float *out; /* (2, n_embd) a run's, allocated before the sweep */
    size_t n_bytes;
} embed_case;

static const char *const EMBED_TEXTS[] = {"Once upon a time", "The little dog"};

/* An engine's embedder embeds the two texts into out; a pass that ran out of memory keeps
 * nothing, so the same embedder (injection off) embeds again. */
static cn_status engine_embed(cn_engine *e, float *out, cn_error *err) {
    cn_embedder_params p = cn_embedder_default_params();
    p.n_batch = 32;
    cn_embedder *emb = NULL;
    cn_status st = cn_engine_embedder(e, &p, &emb, err);
    if (st == CN_STATUS_OK) st = cn_embedder_embed_texts(emb, EMBED_TEXTS, 2, out, err);
    if (st == CN_STATUS_NO_MEMORY && emb) {
        check_error(st, err, "cn_embedder_embed_texts");
        inject_disarm();
        st = cn_embedder_embed_texts(emb, EMBED_TEXTS, 2, out, err);
        if (st != CN_STATUS_OK) bad("an embedder that ran out of memory once failed again: %s", err->msg);
    }
    cn_embedder_free(emb);
    return st;
}

static bool run_engine_embed(void *ctx) {
    embed_case *c = ctx;
    memset(c->out, 0, c->n_bytes);
    cn_error err = {0};
    const cn_status st = engine_embed(c->e, c->out, &err);
    check_error(st, &err, "cn_engine_embedder");
    if (st == CN_STATUS_OK && memcmp(c->out, c->ref, c->n_bytes))
        bad("an engine's embedder under injection gave other vectors");
    return true;
}

/* ---- the public one-request API ---- */

typedef struct {
    const cn_model *m;
    char ref[1024];
} context_case;

static cn_status context_run(const cn_model *m, char *out, size_t cap, cn_error *err) {
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = 1;
    cp.n_ctx = 128;
    cn_context *c = NULL;
    cn_status st = cn_context_create(m, &cp, &c, err);
    if (st != CN_STATUS_OK) return st;
    cn_gen_params gp = cn_gen_default_params();
    gp.max_tokens = 12;
    gp.sampling.temperature = 0;
    gp.sampling.n_logprobs = 2;
    cn_prompt pr = {.text = "Once upon a time"};
    cn_result r;
    st = cn_context_generate(c, &pr, &gp, &r, err);
    if (st == CN_STATUS_OK) {
        snprintf(out, cap, "%s", r.text);
        cn_result_free(&r);
    }
    cn_context_free(c);
    return st;
}

static bool run_context(void *ctx) {
    context_case *c = ctx;
    char got[1024] = "";
    cn_error err = {0};
    const cn_status st = context_run(c->m, got, sizeof got, &err);
    check_error(st, &err, "cn_context_create / cn_context_generate");
    if (st == CN_STATUS_OK && strcmp(got, c->ref)) bad("OK but '%s', not '%s'", got, c->ref);
    return true;
}

/* ---- HTTP ---- */

#define N_HTTP 6

typedef struct {
    int port;
    int which; /* the request of HTTP_BODIES that the sweep runs */
    char ref[N_HTTP][8192];
} http_case;

/* path, body, and for a stream the start of the error event that may end it */
static const char *const HTTP_BODIES[N_HTTP][3] = {
    {"/v1/completions",
     "{\"prompt\": \"Once upon a time\", \"max_tokens\": 6, \"temperature\": 0, \"n\": 2, "
     "\"logprobs\": 2, \"stop\": [\"park\"]}",
     NULL},
    {"/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 6, \"temperature\": 0, \"stream\": true}",
     "data: {\"error\":{\"message\":"},
    {"/tokenize", "{\"content\": \"Once upon a time\", \"with_pieces\": true}", NULL},
    {"/v1/messages",
     "{\"max_tokens\": 6, \"temperature\": 0, \"stream\": true, \"stop_sequences\": [\"park\"],"
     " \"system\": \"Tell a story.\", \"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}]}",
     "event: error\ndata: {\"type\":\"error\",\"error\":{"},
    {"/v1/responses", "{\"max_output_tokens\": 6, \"temperature\": 0, \"input\": \"Once upon a time\"}", NULL},
    {"/v1/responses",
     "{\"max_output_tokens\": 6, \"temperature\": 0, \"stream\": true, \"input\": \"Once upon a time\"}",
     "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\""},
};

/* A chunked body joined in place (where the chunks fall depends on timing: a chunk
 * line inside a field would hide it from essence). */
static void dechunk(char *resp) {
    char *body = strstr(resp, "\r\n\r\n");
    if (!body || !strstr(resp, "Transfer-Encoding: chunked")) return;
    body += 4;
    char *r = body, *w = body;
    for (;;) {
        char *end = NULL;
        const unsigned long n = strtoul(r, &end, 16);
        if (end == r || strncmp(end, "\r\n", 2)) break; /* cut short: keep what was joined */
        r = end + 2;
        if (n == 0 || strlen(r) < n) {
            if (n) { /* a last chunk that did not all arrive */
                memmove(w, r, strlen(r));
                w += strlen(r);
            }
            break;
        }
        memmove(w, r, n);
        w += n;
        r += n;
        if (strncmp(r, "\r\n", 2)) break;
        r += 2;
    }
    *w = 0;
}

static int http_post(int port, const char *path, const char *body, char *out, size_t cap);

/* The response to HTTP_BODIES[which]: status and body (chunks joined). */
static int http_call(int port, int which, char *out, size_t cap) {
    return http_post(port, HTTP_BODIES[which][0], HTTP_BODIES[which][1], out, cap);
}

static int http_post(int port, const char *path, const char *body, char *out, size_t cap) {
    out[0] = 0;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[2048];
    const int n = snprintf(req, sizeof req,
                           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                           path, strlen(body), body);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t used = 0;
    for (;;) {
        const ssize_t k = read(fd, out + used, cap - 1 - used);
        if (k <= 0) break;
        used += (size_t)k;
        if (used + 1 >= cap) break;
    }
    out[used] = 0;
    close(fd);
    int status = -1;
    if (sscanf(out, "HTTP/1.1 %d", &status) != 1) return -1;
    dechunk(out);
    return status;
}

/* The parts of a response that must not change between runs: the text of every
 * "text":"..." / "tokens":[...] field, in order. */
static void essence(const char *resp, char *out, size_t cap) {
    size_t used = 0;
    out[0] = 0;
    const char *keys[] = {
        "\"text\":", "\"tokens\":", "\"finish_reason\":", "\"stop_reason\":", "\"stop_sequence\":", "\"status\":"};
    for (const char *p = resp; *p; p++) {
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const size_t kl = strlen(keys[k]);
            if (strncmp(p, keys[k], kl)) continue;
            const char *q = p + kl;
            const char *end = q;
            while (*end && *end != ',' && *end != '}' && *end != ']') end += *end == '\\' && end[1] ? 2 : 1;
            if (*q == '"') { /* a string: to its closing quote */
                end = q + 1;
                while (*end && *end != '"') end += *end == '\\' && end[1] ? 2 : 1;
            }
            const size_t len = (size_t)(end - p);
            if (used + len + 2 < cap) {
                memcpy(out + used, p, len);
                used += len;
                out[used++] = '|';
                out[used] = 0;
            }
        }
    }
}

static bool run_http(void *ctx) {
    http_case *c = ctx;
    const int w = c->which;
    static char resp[65536], ess[8192];
    const int st = http_call(c->port, w, resp, sizeof resp);
    if (st == 200) {
        essence(resp, ess, sizeof ess);
        /* a 200 reply is whole and right; a stream whose headers were out may end in an
         * error event instead */
        if (strcmp(ess, c->ref[w]) && !(HTTP_BODIES[w][2] && strstr(resp, HTTP_BODIES[w][2])))
            bad("%s: a 200 that is not the reference:\n  got  %s\n  want %s", HTTP_BODIES[w][0], ess, c->ref[w]);
    } else if (st == 503) {
        if (!strstr(resp, "out of memory") && !strstr(resp, "could not finish"))
            bad("%s: a 503 that does not say why: %.300s", HTTP_BODIES[w][0], resp);
    } else if (st != -1 || !HTTP_BODIES[w][2]) {
        /* -1: the connection was closed without a reply; only allowed for a stream whose
         * headers went out before the failure */
        bad("%s: status %d: %.300s", HTTP_BODIES[w][0], st, resp);
    }
    inject_disarm();
    /* the server still serves: the same request again gives the reference */
    const int st2 = http_call(c->port, w, resp, sizeof resp);
    essence(resp, ess, sizeof ess);
    if (st2 != 200 || strcmp(ess, c->ref[w])) bad("the next request %s got %d: %.300s", HTTP_BODIES[w][0], st2, resp);
    return true;
}

/* Several models: "a" and "b" are the same file (stories260K) under two names, at most
 * one loaded. Each run starts with "b" loaded and asks "a" with allocation N failing,
 * which unloads "b" and loads "a" (model, engine) before the completion runs; then, with
 * no failure, "a" must answer the reference and "b" too (loaded again). */
typedef struct {
    int port;
    char ref[8192];
} multi_case;

static const char MULTI_A[] = "{\"model\": \"a\", \"prompt\": \"Once upon a time\", \"max_tokens\": 6, "
                              "\"temperature\": 0}";
static const char MULTI_B[] = "{\"model\": \"b\", \"prompt\": \"Once upon a time\", \"max_tokens\": 6, "
                              "\"temperature\": 0}";

static cn_status multi_load(void *user, const char *path, cn_model **m, cn_engine **e, cn_embedder **emb,
                            cn_error *err) {
    const cn_engine_params *ep = user;
    cn_model_params mp = cn_model_default_params();
    *e = NULL;
    *emb = NULL;
    cn_status st = cn_model_load(path, &mp, m, err);
    if (st == CN_STATUS_OK) st = cn_engine_create(*m, ep, e, err);
    if (st == CN_STATUS_OK) st = cn_engine_start(*e, err);
    if (st == CN_STATUS_OK) st = cn_engine_embedder(*e, NULL, emb, err); /* as cinder serve's loader */
    if (st != CN_STATUS_OK) {
        cn_engine_free(*e);
        *e = NULL;
        cn_model_free(*m);
        *m = NULL;
    }
    return st;
}

static bool run_multi(void *ctx) {
    multi_case *c = ctx;
    static char resp[65536], ess[8192];
    const int st = http_post(c->port, "/v1/completions", MULTI_A, resp, sizeof resp);
    if (st == 200) {
        essence(resp, ess, sizeof ess);
        if (strcmp(ess, c->ref))
            bad("several models: a 200 that is not the reference:\n  got  %s\n  want %s", ess, c->ref);
    } else if (st != 503 || (!strstr(resp, "out of memory") && !strstr(resp, "could not"))) {
        bad("several models: status %d: %.300s", st, resp);
    }
    inject_disarm();
    const char *const next[2] = {MULTI_A, MULTI_B};
    for (int k = 0; k < 2; k++) {
        const int st2 = http_post(c->port, "/v1/completions", next[k], resp, sizeof resp);
        essence(resp, ess, sizeof ess);
        if (st2 != 200 || strcmp(ess, c->ref)) bad("several models: the next request got %d: %.300s", st2, resp);
    }
    return true;
}

/* A chat template run by the Jinja interpreter: parsed from text, then a conversation
 * with tools, a tool call (its arguments as JSON text) and its result rendered through
 * macros, loops, a namespace, filters and tojson. */
static const char JINJA_TEMPLATE[] =
    "{%- macro show(m) -%}{{ m.role }}: {{ m.content|trim if m.content is string else '' }}{%- endmacro -%}"
    "{%- set ns = namespace(n=0, last='') -%}"
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function|tojson(indent=1) }}{% endfor %}</tools>\n{% endif -%}"
    "{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}{%- set ns.last = m.role -%}"
    "{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}<call>{{ c.function.name }} {{ c.function.arguments|tojson }}"
    "{{ c.function.arguments.items()|list|length }}</call>{%- endfor -%}"
    "{%- else -%}{{ show(m) }}{{ ' [' ~ loop.index ~ '/' ~ loop.length ~ ']' }}{%- endif %}\n{% endfor -%}"
    "{{ ns.n }} {{ ns.last|upper }} {{ messages|map(attribute='role')|unique|list|join(',') }}"
    "{{ '%s:%d'|format('x', 7) }}{% if add_generation_prompt %}\nassistant:{% endif %}";
static const char JINJA_MESSAGES[] =
    "[{\"role\": \"user\", \"content\": \"  weather in Paris?  \"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"sunny\"}]";
static const char JINJA_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";

typedef struct {
    char ref[4096];
} jinja_case;

static cn_status jinja_run(char *out, size_t cap, cn_error *err) {
    cn_chat_template *t = NULL;
    char *text = NULL;
    cn_status st = cn_chat_template_from_jinja(JINJA_TEMPLATE, strlen(JINJA_TEMPLATE), &t, err);
    if (st == CN_STATUS_OK) st = cn_chat_render_json(t, JINJA_MESSAGES, JINJA_TOOLS, true, NULL, &text, NULL, err);
    if (st == CN_STATUS_OK) snprintf(out, cap, "%s", text);
    free(text);
    cn_chat_template_free(t);
    return st;
}

static bool run_jinja(void *ctx) {
    const jinja_case *c = ctx;
    char out[4096];
    cn_error err = {0};
    const cn_status st = jinja_run(out, sizeof out, &err);
    check_error(st, &err, "chat template render");
    if (st == CN_STATUS_OK && strcmp(out, c->ref) != 0) bad("OK but not the reference text: %s", out);
    return true;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    const char *td = getenv("CINDER_TESTDATA");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            if (sscanf(argv[++i], "%ld/%ld", &g_shard, &g_n_shards) != 2 || g_n_shards < 1 || g_shard < 0 ||
                g_shard >= g_n_shards) {
                fprintf(stderr, "alloc_fail: --shard K/S with 0 <= K < S, not '%s'\n", argv[i]);
                return 2;
            }
        } else {
            td = argv[i];
        }
    }
    snprintf(g_testdata, sizeof g_testdata, "%s", td ? td : "../shared/testdata");
    printf("allocation-failure injection (every allocation of each scenario fails once)");
    if (g_n_shards > 1) printf(", shard %ld of %ld", g_shard + 1, g_n_shards);
    printf(":\n");

    sweep("model load (stories260K)", run_model_load, NULL, 100000);
    tokenizer_sweeps();
    static jinja_case jc;
    cn_error jerr = {0};
    if (jinja_run(jc.ref, sizeof jc.ref, &jerr) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: chat template reference: %s\n", jerr.msg);
        return 1;
    }
    sweep("chat template (Jinja) parse + render", run_jinja, &jc, 100000);

    cn_model_params mp = cn_model_default_params();
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    cn_error err = {0};
    if (cn_model_load(data_path("models/stories260K.gguf"), &mp, &m, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(m), &tok, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: stories260K: %s\n", err.msg);
        return 1;
    }
    static engine_case ec;
    ec.m = m;
    cn_engine_params ep = engine_params();
    if (cn_engine_create(m, &ep, &ec.e, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: engine: %s\n", err.msg);
        return 1;
    }
    g_scenario = "engine reference";
    run_requests(ec.e, &ec.ref, false, NULL);
    sweep("engine create", run_engine_create, &ec, 100000);
    sweep("engine submit + steps", run_engine_steps, &ec, 100000);
    static embed_case emc;
    emc.e = ec.e;
    emc.n_bytes = 2 * (size_t)cn_model_hparams(m)->n_embd * sizeof(float);
    emc.ref = malloc(emc.n_bytes);
    emc.out = malloc(emc.n_bytes);
    if (!emc.ref || !emc.out || engine_embed(ec.e, emc.ref, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: embedder reference: %s\n", err.msg);
        return 1;
    }
    sweep("engine embedder create + embed", run_engine_embed, &emc, 100000);
    free(emc.ref);
    free(emc.out);
    static context_case cc;
    cc.m = m;
    if (context_run(m, cc.ref, sizeof cc.ref, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: context reference: %s\n", err.msg);
        return 1;
    }
    sweep("context create + generate (public API)", run_context, &cc, 100000);
    cn_engine_free(ec.e);

    /* HTTP: an in-process server on a free port, its engine's run loop started */
    cn_engine *e = NULL;
    cn_server *srv = NULL;
    cn_server_params sp = cn_server_default_params();
    sp.port = 0;
    sp.model_id = "stories260K";
    ep.chat_template = "chatml"; /* stories260K has none; /v1/messages and /v1/responses need one */
    if (cn_engine_create(m, &ep, &e, &err) != CN_STATUS_OK || cn_engine_start(e, &err) != CN_STATUS_OK ||
        cn_server_start(&sp, &srv, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: server: %s\n", err.msg);
        return 1;
    }
    cn_server_set_engine(srv, e);
    static http_case hc;
    hc.port = cn_server_port(srv);
    static char resp[65536];
    for (int w = 0; w < N_HTTP; w++) {
        if (http_call(hc.port, w, resp, sizeof resp) != 200) {
            fprintf(stderr, "alloc_fail: reference %s: %.300s\n", HTTP_BODIES[w][0], resp);
            return 1;
        }
        essence(resp, hc.ref[w], sizeof hc.ref[w]);
    }
    static const char *const names[N_HTTP] = {
        "HTTP: completions (n = 2, logprobs)",          "HTTP: completions, streamed", "HTTP: /tokenize",
        "HTTP: /v1/messages, streamed, stop_sequences", "HTTP: /v1/responses",         "HTTP: /v1/responses, streamed"};
    for (hc.which = 0; hc.which < N_HTTP; hc.which++) sweep(names[hc.which], run_http, &hc, 100000);
    cn_server_drain(srv, 5);
    cn_server_free(srv);

    /* several models: a folder of two links to stories260K */
    char dir[] = "/tmp/cinder-alloc-XXXXXX", a_path[4200], b_path[4200], target[4096];
    if (!mkdtemp(dir) || !realpath(data_path("models/stories260K.gguf"), target)) {
        fprintf(stderr, "alloc_fail: several models: no folder\n");
        return 1;
    }
    snprintf(a_path, sizeof a_path, "%s/a.gguf", dir);
    snprintf(b_path, sizeof b_path, "%s/b.gguf", dir);
    if (symlink(target, a_path) || symlink(target, b_path)) {
        fprintf(stderr, "alloc_fail: several models: cannot link %s\n", target);
        return 1;
    }
    cn_server_params mp2 = cn_server_default_params();
    mp2.port = 0;
    mp2.models_dir = dir;
    mp2.models_max = 1;
    mp2.load = multi_load;
    mp2.load_user = &ep;
    static multi_case mc;
    if (cn_server_start(&mp2, &srv, &err) != CN_STATUS_OK) {
        fprintf(stderr, "alloc_fail: several models: %s\n", err.msg);
        return 1;
    }
    mc.port = cn_server_port(srv);
    if (http_post(mc.port, "/v1/completions", MULTI_B, resp, sizeof resp) != 200 ||
        http_post(mc.port, "/v1/completions", MULTI_A, resp, sizeof resp) != 200) {
        fprintf(stderr, "alloc_fail: several models: reference: %.300s\n", resp);
        return 1;
    }
    essence(resp, mc.ref, sizeof mc.ref);
    http_post(mc.port, "/v1/completions", MULTI_B, resp, sizeof resp); /* "b" loaded, "a" not */
    sweep("HTTP: several models, load on request", run_multi, &mc, 100000);
    cn_server_drain(srv, 5);
    cn_server_free(srv);
    unlink(a_path);
    unlink(b_path);
    rmdir(dir);
    cn_engine_free(e);
    cn_tokenizer_free(tok);
    cn_model_free(m);
    check_leaks();
    if (g_errors) printf("alloc_fail: %d problems\n", g_errors);
    else printf("alloc_fail: every sweep held\n");
    return g_errors ? 1 : 0;
}
