/* test_openai.c — the OpenAI request mapping (src/serve/openai.c) and the server's
 * answer to a body that is not JSON, on stories260K with the ChatML template.
 *
 * The truth is the OpenAI API reference (https://platform.openai.com/docs/api-reference,
 * chat/create and completions/create), not cinder's output: each field a client sends
 * lands in the engine request it names (temperature, top_p, seed, stop, n, logit_bias,
 * logprobs ...), and a request the API calls invalid is a 4xx whose error object has the
 * reference's shape {message, type, param, code} with param the offending field. Where
 * cinder chooses within what the reference leaves open (max_tokens when absent, its
 * own range limits), the comment says so. The context the mapping sees is built from
 * an engine's getters, as the server builds it. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/apis.h"
#include "serve/openai.h"
#include "serve/server.h"
#include "test_engine_util.h"

#define N_CTX 256

static cn_model *model;
static cn_engine *engine;
static oai_ctx ctx;

static void setup(void) {
    model = te_load_stories();
    cn_engine_params p = cn_engine_default_params();
    p.n_ctx = N_CTX;
    p.max_running = 4;
    p.kv_tokens = 4 * N_CTX;
    p.chat_template = "chatml"; /* stories260K has none of its own */
    cn_error err = {0};
    cr_assert_eq(cn_engine_create(model, &p, &engine, &err), CN_STATUS_OK, "%s", err.msg);
    ctx = (oai_ctx){.tok = cn_engine_tokenizer(engine),
                    .chat = cn_engine_chat_template(engine),
                    .eot_stop = cn_engine_end_of_turn_stop(engine),
                    .model_id = "stories",
                    .n_ctx = cn_engine_n_ctx(engine),
                    .n_vocab = cn_engine_n_vocab(engine),
                    .max_n = cn_engine_max_running(engine),
                    .max_draft = 8};
}

static void teardown(void) {
    cn_engine_free(engine);
    cn_model_free(model);
}

TestSuite(openai, .init = setup, .fini = teardown, .timeout = 60);

/* Maps text (JSON) for kind; the result and the error both come back. */
static bool parse(oai_kind kind, const char *text, oai_request *r, oai_error *e) {
    json_error_t je;
    json_t *body = json_loads(text, 0, &je);
    cr_assert(body, "test body is not JSON: %s", je.text);
    memset(e, 0, sizeof *e);
    const bool ok = oai_parse(&ctx, kind, body, r, e);
    json_decref(body);
    return ok;
}

/* The reference's tokenization of a prompt: the model's BOS rule, special tokens parsed. */
static int32_t *tokens_of(const char *text, size_t *n) {
    int32_t *ids = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_tokenize_alloc(ctx.tok, text, strlen(text), true, true, &ids, n, &err), CN_STATUS_OK);
    return ids;
}

static const cn_logit_bias *bias_of(const cn_sampling_params *sp, int32_t token) {
    for (int32_t i = 0; i < sp->n_logit_bias; i++)
        if (sp->logit_bias[i].token == token) return &sp->logit_bias[i];
    return NULL;
}

Test(openai, completion_fields_map_into_the_request) {
    oai_request r;
    oai_error e;
    cr_assert(parse(OAI_COMPLETION,
                    "{\"model\": \"stories\", \"prompt\": \"Once upon a time\", \"temperature\": 0.5, \"top_p\": 0.9,"
                    " \"seed\": 7, \"n\": 2, \"stop\": [\"\\n\", \"The end\"], \"presence_penalty\": 0.5,"
                    " \"frequency_penalty\": -0.25, \"logprobs\": 3, \"logit_bias\": {\"5\": -100, \"7\": 2.5}}",
                    &r, &e),
              "%s (param %s)", e.message, e.param);
    cr_assert_eq(r.kind, OAI_COMPLETION);
    /* prompt: a string is one prompt, tokenized as the model does */
    size_t n = 0;
    int32_t *want = tokens_of("Once upon a time", &n);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.n_prompt[0], (int32_t)n);
    cr_assert_arr_eq(r.prompt[0], want, n * sizeof *want);
    free(want);
    const cn_sampling_params *sp = &r.gen.sampling;
    cr_assert_float_eq(sp->temperature, 0.5f, 1e-7);
    cr_assert_float_eq(sp->top_p, 0.9f, 1e-7);
    cr_assert_float_eq(sp->presence_penalty, 0.5f, 1e-7);
    cr_assert_float_eq(sp->frequency_penalty, -0.25f, 1e-7);
    cr_assert_eq(sp->seed, 7);
    /* n: completions per prompt */
    cr_assert_eq(r.n, 2);
    /* stop: up to the reference's sequences, each ends the text before it */
    cr_assert_eq(r.gen.n_stop, 2);
    cr_assert_str_eq(r.gen.stop[0], "\n");
    cr_assert_str_eq(r.gen.stop[1], "The end");
    /* logprobs (completions): the log-probabilities of that many most likely tokens */
    cr_assert_eq(r.n_logprobs, 3);
    cr_assert_eq(sp->n_logprobs, 3);
    /* logit_bias: token id -> bias added to its logit; -100 "should result in a ban" */
    cr_assert_eq(sp->n_logit_bias, 2);
    const cn_logit_bias *b5 = bias_of(sp, 5), *b7 = bias_of(sp, 7);
    cr_assert(b5 && b7);
    cr_assert(isinf(b5->bias) && b5->bias < 0, "-100 bans: %g", (double)b5->bias);
    cr_assert_float_eq(b7->bias, 2.5f, 1e-7);
    /* max_tokens absent: the reference bounds the output by the context only; cinder
     * makes that explicit as the room the prompt leaves (OpenAI's legacy completions
     * endpoint would use 16 here; cinder follows the chat rule on both endpoints) */
    cr_assert(!r.max_tokens_given);
    cr_assert_eq(r.gen.max_tokens, ctx.n_ctx - r.n_prompt[0]);
    cr_assert(!r.stream && !r.echo);
    oai_request_free(&r);
}

Test(openai, chat_messages_render_with_the_template_and_stop_at_end_of_turn) {
    oai_request r;
    oai_error e;
    cr_assert(parse(OAI_CHAT,
                    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}],"
                    " \"max_tokens\": 10, \"max_completion_tokens\": 12, \"logprobs\": true, \"top_logprobs\": 2,"
                    " \"stop\": \"zzz\", \"stream\": true, \"stream_options\": {\"include_usage\": true}}",
                    &r, &e),
              "%s (param %s)", e.message, e.param);
    cr_assert_eq(r.kind, OAI_CHAT);
    /* the conversation as the template renders it, with the assistant's turn opened */
    const cn_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *text = NULL;
    size_t len = 0, n = 0;
    cn_error err = {0};
    cr_assert_eq(cn_chat_render(ctx.chat, msgs, 2, true, &text, &len, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t *want = tokens_of(text, &n);
    free(text);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.n_prompt[0], (int32_t)n);
    cr_assert_arr_eq(r.prompt[0], want, n * sizeof *want);
    free(want);
    /* max_completion_tokens is the newer name of max_tokens: given both, the smaller bound holds */
    cr_assert(r.max_tokens_given);
    cr_assert_eq(r.gen.max_tokens, 10);
    /* logprobs: true with top_logprobs: 2 -> two alternatives per token */
    cr_assert_eq(r.n_logprobs, 2);
    /* a single stop string is a list of one; the reply also ends at the end of its turn,
     * which stories260K's vocabulary has no token for: a stop string */
    cr_assert_str_eq(ctx.eot_stop, "<|im_end|>");
    cr_assert_eq(r.gen.n_stop, 2);
    cr_assert_str_eq(r.gen.stop[0], "zzz");
    cr_assert_str_eq(r.gen.stop[1], "<|im_end|>");
    cr_assert(r.stream && r.include_usage);
    cr_assert_eq(r.n, 1); /* n: defaults to 1 */
    oai_request_free(&r);
}

/* body for kind must be refused with this status, error type, param and code (NULL: none). */
static void refused(oai_kind kind, const char *body, int status, const char *type, const char *param,
                    const char *code) {
    oai_request r;
    oai_error e;
    cr_assert_not(parse(kind, body, &r, &e), "accepted: %s", body);
    cr_expect_eq(e.http_status, status, "%s: status %d (%s)", body, e.http_status, e.message);
    cr_expect_str_eq(e.type, type, "%s", body);
    cr_expect_str_eq(e.param, param, "%s: param '%s' (%s)", body, e.param, e.message);
    if (code) cr_expect(e.code && !strcmp(e.code, code), "%s: code %s", body, e.code ? e.code : "null");
    else cr_expect_null(e.code, "%s: code %s", body, e.code);
    cr_expect(e.message[0], "%s: no message", body);
    /* the error object has the reference's four fields */
    json_t *j = oai_error_json(&e), *o = json_object_get(j, "error");
    cr_assert(json_is_object(o));
    cr_expect(json_is_string(json_object_get(o, "message")) && json_is_string(json_object_get(o, "type")));
    cr_expect(json_object_get(o, "param") && json_object_get(o, "code"));
    json_decref(j);
    oai_request_free(&r);
}

/* A field name longer than the error's param buffer, cut inside a character (the fuzzer's
 * find): the param keeps whole characters, and both error shapes still build (json_pack
 * refuses invalid UTF-8, which had turned the 400 into a 503 "out of memory"). */
Test(openai, error_param_cut_at_a_character) {
    char name[80];
    memset(name, 'a', 62);
    /* clang-format off */
    memcpy(name + 62, "\xE2\x80\x9C" "b", 5); /* U+201C across bytes 62..64 of a 64-byte buffer */
    /* clang-format on */
    oai_error e;
    oai_fail(&e, 400, "invalid_request_error", name, NULL, "unsupported field '%s'", name);
    cr_assert_eq(strlen(e.param), 62, "%s", e.param);
    json_t *j = oai_error_json(&e), *o = json_object_get(j, "error");
    cr_assert_str_eq(json_string_value(json_object_get(o, "param")), e.param);
    /* clang-format off */
    cr_assert(strstr(json_string_value(json_object_get(o, "message")), "\xE2\x80\x9C" "b'"));
    /* clang-format on */
    json_decref(j);
    j = ant_error_json(&e);
    cr_assert(j && strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "unsupported"));
    json_decref(j);
}

Test(openai, bad_fields_are_refused_by_name) {
    const char *inv = "invalid_request_error";
    /* top_p is a probability mass: (0, 1] */
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 7}", 400, inv, "top_p", NULL);
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_p\": 7}", 400, inv, "top_p",
            NULL);
    /* messages and prompt are required */
    refused(OAI_CHAT, "{\"max_tokens\": 5}", 400, inv, "messages", NULL);
    refused(OAI_COMPLETION, "{\"max_tokens\": 5}", 400, inv, "prompt", NULL);
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, inv, "messages[0].content", NULL);
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400, inv, "messages[0].role",
            NULL);
    /* a wrong type is named too */
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"temperature\": \"hot\"}", 400, inv, "temperature", NULL);
    /* max_tokens and n count at least one */
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 0}", 400, inv, "max_tokens", NULL);
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"n\": 0}", 400, inv, "n", NULL);
    /* logit_bias values are in [-100, 100], keys token ids */
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 200}}", 400, inv, "logit_bias", NULL);
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"999999\": 1}}", 400, inv, "logit_bias", NULL);
    /* top_logprobs needs logprobs: true; stream_options only with stream: true */
    refused(OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400, inv,
            "top_logprobs", NULL);
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 400, inv,
            "stream_options", NULL);
    /* a model this server does not serve: 404 model_not_found */
    refused(OAI_COMPLETION, "{\"model\": \"gpt-9\", \"prompt\": \"x\"}", 404, inv, "model", "model_not_found");
    /* a field cinder would have to ignore is refused, not dropped */
    refused(OAI_COMPLETION, "{\"prompt\": \"x\", \"frobnicate\": 1}", 400, inv, "frobnicate", "unsupported_parameter");
}

Test(openai, a_prompt_the_context_cannot_hold_is_context_length_exceeded) {
    /* the reference: 400 invalid_request_error, code context_length_exceeded, param the
     * prompt (completions) or messages (chat); one position must stay for the reply */
    char body[4096];
    int k = snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < N_CTX; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s1", i ? ", " : "");
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    refused(OAI_COMPLETION, body, 400, "invalid_request_error", "prompt", "context_length_exceeded");
    k = snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"");
    for (int i = 0; i < 200; i++) k += snprintf(body + k, sizeof body - (size_t)k, "once upon a time ");
    snprintf(body + k, sizeof body - (size_t)k, "\"}]}");
    refused(OAI_CHAT, body, 400, "invalid_request_error", "messages", "context_length_exceeded");
    /* just inside: n_ctx - 1 prompt tokens leave max_tokens 1 */
    k = snprintf(body, sizeof body, "{\"prompt\": [");
    for (int i = 0; i < N_CTX - 1; i++) k += snprintf(body + k, sizeof body - (size_t)k, "%s1", i ? ", " : "");
    snprintf(body + k, sizeof body - (size_t)k, "]}");
    oai_request r;
    oai_error e;
    cr_assert(parse(OAI_COMPLETION, body, &r, &e), "%s", e.message);
    cr_assert_eq(r.gen.max_tokens, 1);
    oai_request_free(&r);
}

static const char *str_of(json_t *x) { return json_is_string(x) ? json_string_value(x) : ""; }

/* The server, made from the engine: a POST whose body is not JSON is a 400
 * invalid_request_error (the body cannot be read as the reference's request object). */
static int post(int port, const char *path, const char *body, char *resp, size_t cap) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[1024];
    const int n = snprintf(req, sizeof req,
                           "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n%s",
                           path, strlen(body), body);
    cr_assert_eq(write(fd, req, (size_t)n), n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(fd, resp + got, cap - 1 - got)) > 0) got += (size_t)k;
    resp[got] = 0;
    close(fd);
    int status = 0;
    sscanf(resp, "HTTP/1.1 %d", &status);
    return status;
}

Test(openai, malformed_json_is_invalid_json) {
    cn_server_params sp = cn_server_default_params();
    sp.port = 0;
    sp.model_id = "stories";
    cn_server *srv = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_server_start(&sp, &srv, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_engine_start(engine, &err), CN_STATUS_OK, "%s", err.msg);
    cn_server_set_engine(srv, engine);
    static char resp[8192];
    const char *bad[] = {"{\"prompt\": \"x\",", "not json", "[1, 2]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect_eq(post(cn_server_port(srv), "/v1/completions", bad[i], resp, sizeof resp), 400, "%s", resp);
        const char *js = strstr(resp, "\r\n\r\n");
        json_t *j = js ? json_loads(js + 4, 0, NULL) : NULL, *o = json_object_get(j, "error");
        cr_expect(json_is_object(o), "%s", resp);
        cr_expect_str_eq(str_of(json_object_get(o, "type")), "invalid_request_error");
        cr_expect_str_eq(str_of(json_object_get(o, "code")), "invalid_json");
        json_decref(j);
    }
    /* and a good one is served by the engine the server was made from */
    cr_expect_eq(
        post(cn_server_port(srv), "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 3}", resp, sizeof resp),
        200, "%s", resp);
    cn_server_drain(srv, 5);
    cn_server_free(srv);
    cn_engine_stop(engine);
}
