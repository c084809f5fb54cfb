/* test_apis.c — the Anthropic Messages and OpenAI Responses mappings (src/serve/
 * anthropic.c, responses.c) and their writers (items.c), on stories260K with the ChatML
 * template.
 *
 * Truth: a request of either API must reach the engine as the same conversation written
 * by hand in OpenAI's chat shape does (the same prompt tokens, sampling, stops, limits);
 * errors name the field in the request's own API; the writers' events follow the orders
 * Anthropic's and OpenAI's API references give (message_start, content_block_start, ping,
 * deltas, content_block_stop, message_delta, message_stop; response.created ...
 * response.completed with sequence numbers from 0), and the whole response holds what the
 * stream said. Replies come from the real reply reader (oai_reply) fed text a thinking,
 * calling model would write, since no model the tests load thinks. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "serve/apis.h"
#include "test_engine_util.h"

#define N_CTX 2048

static cn_model *model;
static cn_engine *engine;
static oai_ctx ctx;

static void setup(void) {
    model = te_load_stories();
    cn_engine_params p = cn_engine_default_params();
    p.n_ctx = N_CTX;
    p.max_running = 2;
    p.kv_tokens = 2 * N_CTX;
    p.chat_template = "chatml";
    cn_error err = {0};
    cr_assert_eq(cn_engine_create(model, &p, &engine, &err), CN_STATUS_OK, "%s", err.msg);
    const cn_chat_template *chat = cn_engine_chat_template(engine);
    ctx = (oai_ctx){.tok = cn_engine_tokenizer(engine),
                    .chat = chat,
                    .eot_stop = cn_engine_end_of_turn_stop(engine),
                    .model_id = "stories",
                    .n_ctx = cn_engine_n_ctx(engine),
                    .n_vocab = cn_engine_n_vocab(engine),
                    .max_n = 2,
                    .max_draft = 8};
}

static void teardown(void) {
    cn_engine_free(engine);
    cn_model_free(model);
}

TestSuite(apis, .init = setup, .fini = teardown, .timeout = 120);

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert(j, "test JSON: %s (%s)", je.text, text);
    return j;
}

/* The chat request the hand-written OpenAI body makes. */
static void openai_of(const char *text, oai_request *r) {
    json_t *b = load(text);
    oai_error e = {0};
    cr_assert(oai_parse(&ctx, OAI_CHAT, b, r, &e), "openai body refused: %s (%s)", e.message, e.param);
    json_decref(b);
}

static void same_request(const oai_request *a, const oai_request *b) {
    cr_assert_eq(a->n_prompts, 1);
    cr_assert_eq(a->n_prompt[0], b->n_prompt[0], "prompt: %d tokens vs %d", a->n_prompt[0], b->n_prompt[0]);
    cr_assert_arr_eq(a->prompt[0], b->prompt[0], (size_t)a->n_prompt[0] * sizeof(int32_t));
    cr_assert_eq(a->gen.max_tokens, b->gen.max_tokens);
    cr_assert_eq(a->gen.n_stop, b->gen.n_stop);
    for (int i = 0; i < a->gen.n_stop; i++) cr_assert_str_eq(a->gen.stop[i], b->gen.stop[i]);
    cr_assert_float_eq(a->gen.sampling.temperature, b->gen.sampling.temperature, 1e-7);
    cr_assert_float_eq(a->gen.sampling.top_p, b->gen.sampling.top_p, 1e-7);
    cr_assert_eq(a->gen.sampling.top_k, b->gen.sampling.top_k);
    cr_assert_eq(a->stream, b->stream);
    cr_assert_eq(!!a->tools, !!b->tools);
    if (a->tools) cr_assert(json_equal(a->tools, b->tools));
    cr_assert_eq(a->tool_choice, b->tool_choice);
    cr_assert_eq(a->tools_none, b->tools_none);
    cr_assert_eq(a->parallel_tool_calls, b->parallel_tool_calls);
}

#define WEATHER_SCHEMA \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}"

Test(apis, anthropic_is_the_same_conversation_in_openai_shape) {
    json_t *b = load(
        "{\"model\": \"stories\", \"max_tokens\": 20, \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 7,"
        " \"stop_sequences\": [\"END\"], \"stream\": true, \"metadata\": {\"user_id\": \"u\"},"
        " \"system\": [{\"type\": \"text\", \"text\": \"Be brief.\", \"cache_control\": {\"type\": \"ephemeral\"}}],"
        " \"tools\": [{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": " WEATHER_SCHEMA "}],"
        " \"tool_choice\": {\"type\": \"any\", \"disable_parallel_tool_use\": true},"
        " \"messages\": ["
        "  {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        "  {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"hm\", \"signature\": \"\"},"
        "    {\"type\": \"text\", \"text\": \"Let me look.\"},"
        "    {\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}]},"
        "  {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\","
        "    \"content\": [{\"type\": \"text\", \"text\": \"21 C\"}]}, {\"type\": \"text\", \"text\": \"Thanks!\"}]}]}");
    oai_request r, want;
    api_request ar;
    oai_error e = {0};
    cr_assert(ant_parse(&ctx, b, false, &r, &ar, &e), "%s (%s)", e.message, e.param);
    openai_of(
        "{\"max_tokens\": 20, \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 7, \"stop\": [\"END\"], \"stream\": true,"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
        "   \"parameters\": " WEATHER_SCHEMA "}}],"
        " \"tool_choice\": \"required\", \"parallel_tool_calls\": false,"
        " \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        "  {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        "  {\"role\": \"assistant\", \"content\": \"Let me look.\", \"reasoning_content\": \"hm\","
        "   \"tool_calls\": [{\"id\": \"toolu_1\", \"type\": \"function\","
        "     \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "  {\"role\": \"tool\", \"tool_call_id\": \"toolu_1\", \"content\": \"21 C\"},"
        "  {\"role\": \"user\", \"content\": \"Thanks!\"}]}",
        &want);
    same_request(&r, &want);
    cr_assert_eq(ar.kind, API_ANTHROPIC);
    cr_assert_eq(ar.n_stops, 1);
    cr_assert_str_eq(ar.stops[0], "END");
    cr_assert_eq(ar.max_tokens, 20);
    oai_request_free(&r);
    oai_request_free(&want);
    api_request_free(&ar);
    /* count_tokens: the same prompt, no max_tokens needed */
    json_object_del(b, "max_tokens");
    cr_assert(ant_parse(&ctx, b, true, &r, &ar, &e), "%s (%s)", e.message, e.param);
    openai_of("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &want);
    cr_assert_gt(r.n_prompt[0], want.n_prompt[0]);
    oai_request_free(&r);
    oai_request_free(&want);
    api_request_free(&ar);
    json_decref(b);
}

Test(apis, responses_is_the_same_conversation_in_openai_shape) {
    json_t *b = load(
        "{\"model\": \"stories\", \"max_output_tokens\": 30, \"temperature\": 0.25, \"store\": false,"
        " \"instructions\": \"Be brief.\", \"metadata\": {\"k\": \"v\"}, \"user\": \"me\","
        " \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": " WEATHER_SCHEMA ","
        "   \"strict\": true}],"
        " \"tool_choice\": {\"type\": \"function\", \"name\": \"get_weather\"},"
        " \"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"Weather in Paris?\"}]},"
        "  {\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"content\": [{\"type\": \"reasoning_text\", \"text\": \"hm\"}]},"
        "  {\"type\": \"function_call\", \"call_id\": \"call_1\", \"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"},"
        "  {\"type\": \"function_call_output\", \"call_id\": \"call_1\", \"output\": \"21 C\"},"
        "  {\"type\": \"message\", \"role\": \"user\", \"content\": \"Thanks!\"}]}");
    oai_request r, want;
    api_request ar;
    oai_error e = {0};
    cr_assert(resp_parse(&ctx, b, &r, &ar, &e), "%s (%s)", e.message, e.param);
    openai_of(
        "{\"max_tokens\": 30, \"temperature\": 0.25,"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": " WEATHER_SCHEMA
        "}}],"
        " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}},"
        " \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        "  {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        "  {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"hm\","
        "   \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
        "     \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "  {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21 C\"},"
        "  {\"role\": \"user\", \"content\": \"Thanks!\"}]}",
        &want);
    same_request(&r, &want);
    cr_assert_eq(ar.kind, API_RESPONSES);
    cr_assert_eq(ar.max_tokens, 30);
    /* the response repeats the request's settings */
    cr_assert_str_eq(json_string_value(json_object_get(ar.echo, "instructions")), "Be brief.");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(ar.echo, "metadata"), "k")), "v");
    cr_assert(json_equal(json_object_get(ar.echo, "tools"), json_object_get(b, "tools")));
    cr_assert_eq(json_integer_value(json_object_get(ar.echo, "max_output_tokens")), 30);
    oai_request_free(&r);
    oai_request_free(&want);
    api_request_free(&ar);
    json_decref(b);
}

/* body must be refused: status, the param, a message that mentions `mentions`. */
static void refused(api_kind kind, const char *body, int status, const char *param, const char *mentions) {
    json_t *b = load(body);
    oai_request r;
    api_request ar;
    oai_error e = {0};
    const bool ok = kind == API_ANTHROPIC ? ant_parse(&ctx, b, false, &r, &ar, &e) : resp_parse(&ctx, b, &r, &ar, &e);
    cr_assert_not(ok, "accepted: %s", body);
    cr_expect_eq(e.http_status, status, "%s: %d (%s)", body, e.http_status, e.message);
    cr_expect_str_eq(e.param, param, "%s: param '%s' (%s)", body, e.param, e.message);
    cr_expect(strstr(e.message, mentions), "%s: message '%s' does not mention '%s'", body, e.message, mentions);
    if (kind == API_ANTHROPIC) {
        json_t *j = ant_error_json(&e), *o = json_object_get(j, "error");
        cr_expect_str_eq(json_string_value(json_object_get(j, "type")), "error");
        cr_expect_str_eq(json_string_value(json_object_get(o, "type")),
                         status == 404 ? "not_found_error" : "invalid_request_error");
        cr_expect_str_eq(json_string_value(json_object_get(o, "message")), e.message);
        json_decref(j);
    }
    oai_request_free(&r);
    api_request_free(&ar);
    json_decref(b);
}

#define HI "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"

Test(apis, errors_name_the_field_in_the_request_api) {
    const api_kind A = API_ANTHROPIC, R = API_RESPONSES;
    refused(A, "{" HI "}", 400, "max_tokens", "required");
    refused(A, "{\"max_tokens\": 0, " HI "}", 400, "max_tokens", "max_tokens");
    refused(A, "{\"max_tokens\": 5, \"model\": \"claude\", " HI "}", 404, "model", "claude");
    refused(A, "{\"max_tokens\": 5, \"stop_sequences\": [\"\"], " HI "}", 400, "stop_sequences", "stop");
    refused(A, "{\"max_tokens\": 5, \"top_p\": 7, " HI "}", 400, "top_p", "top_p");
    refused(A, "{\"max_tokens\": 5, \"n\": 2, " HI "}", 400, "n", "unsupported");
    refused(A, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400, "messages[0].role",
            "user");
    refused(A, "{\"max_tokens\": 5, \"tools\": [{\"name\": \"a b\", \"input_schema\": {}}], " HI "}", 400,
            "tools[0].name", "tools[0].name");
    refused(
        A,
        "{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\", \"input_schema\": {}}, {\"name\": \"f\", \"input_schema\": {}}], " HI
        "}",
        400, "tools[1].name", "f");
    refused(A, "{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\"}], " HI "}", 400, "tools[0].input_schema", "required");
    refused(A, "{\"max_tokens\": 5, \"tools\": [{\"type\": \"bash_20250124\", \"name\": \"bash\"}], " HI "}", 400,
            "tools[0]", "bash_20250124");
    refused(A, "{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"some\"}, " HI "}", 400, "tool_choice", "auto");
    refused(
        A,
        "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t\"}]}]}",
        400, "messages[0].content[0].tool_use_id", "no tool_use");
    refused(A, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": []}]}", 400, "messages[0].content",
            "non-empty");
    refused(
        A,
        "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
        400, "messages[1]", "prefill");
    refused(A, "{\"max_tokens\": 5, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 0}, " HI "}", 400,
            "thinking.budget_tokens", "positive");
    refused(R, "{\"input\": \"hi\", \"max_output_tokens\": 0}", 400, "max_output_tokens", "max_output_tokens");
    refused(R, "{\"input\": \"hi\", \"previous_response_id\": \"resp_1\"}", 400, "previous_response_id", "stateless");
    refused(R, "{\"input\": \"hi\", \"tools\": [{\"type\": \"function\", \"name\": \"a b\"}]}", 400, "tools[0].name",
            "tools[0].name");
    refused(R, "{\"input\": \"hi\", \"tools\": [{\"type\": \"file_search\"}]}", 400, "tools[0]", "file_search");
    refused(R, "{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"yaml\"}}}", 400, "text.format", "text.format");
    refused(R, "{\"input\": [{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": \"1\"}]}", 400,
            "input[0].call_id", "no function_call");
    refused(R, "{\"input\": []}", 400, "input", "non-empty");
    refused(R, "{\"input\": \"hi\", \"truncation\": \"auto\"}", 400, "truncation", "disabled");
}

/* ---- every error oai_parse makes, in the client's names ----
 * The Anthropic and Responses mappings hand their requests to oai_parse_as in OpenAI's
 * shape; the errors it makes (and those of the library under it) must name the field as
 * the client sent it, and no name that only OpenAI's shape has. */

/* The OpenAI names an Anthropic / a Responses error must never hold (in param or
 * message): the fields each API spells otherwise. */
static const char *const ANT_FORBIDDEN[] = {"'stop'",         ".function",           "/function/",
                                            "parameters",     "parallel_tool_calls", "chat_template_kwargs",
                                            "response_format"};
static const char *const RESP_FORBIDDEN[] = {"max_tokens", ".function", "/function/", "response_format", "'messages'"};

static void names_no_openai_field(api_kind kind, const oai_error *e, const char *body) {
    const char *const *bad = kind == API_ANTHROPIC ? ANT_FORBIDDEN : RESP_FORBIDDEN;
    const size_t n = kind == API_ANTHROPIC ? sizeof ANT_FORBIDDEN / sizeof *bad : sizeof RESP_FORBIDDEN / sizeof *bad;
    for (size_t i = 0; i < n; i++) {
        cr_expect_null(strstr(e->param, bad[i]), "%s: param '%s' holds '%s'", body, e->param, bad[i]);
        cr_expect_null(strstr(e->message, bad[i]), "%s: message '%s' holds '%s'", body, e->message, bad[i]);
    }
    const char *own = kind == API_ANTHROPIC ? "stop" : "messages"; /* OpenAI's whole field name */
    cr_expect_str_neq(e->param, own, "%s: param '%s'", body, e->param);
}

typedef struct {
    api_kind kind;
    const char *body;
    const char *param;    /* as the client's API names the field */
    const char *mentions; /* in the message */
} named_error;

#define TOOL_A(x) "\"tools\": [{\"name\": \"f\", \"input_schema\": {}" x "}]"
#define TOOL_R(x) "\"tools\": [{\"type\": \"function\", \"name\": \"f\"" x "}]"
#define FMT_R(x) "{\"input\": \"hi\", \"text\": {\"format\": " x "}}"

static const named_error NAMED_ERRORS[] = {
    /* Anthropic: stop_sequences is OpenAI's stop */
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"stop_sequences\": [3], " HI "}", "stop_sequences",
     "'stop_sequences' must be a string or an array of strings"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"stop_sequences\": [\"\"], " HI "}", "stop_sequences",
     "stop strings must be 1 to"},
    {API_ANTHROPIC,
     "{\"max_tokens\": 5, \"stop_sequences\": [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\","
     " \"j\", \"k\", \"l\", \"m\", \"n\", \"o\", \"p\", \"q\"], " HI "}",
     "stop_sequences", "at most"},
    /* the values Anthropic shares with OpenAI */
    {API_ANTHROPIC, "{\"max_tokens\": \"x\", " HI "}", "max_tokens", "'max_tokens' must be an integer"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"temperature\": -1, " HI "}", "temperature", "temperature = -1"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"top_k\": \"x\", " HI "}", "top_k", "'top_k' must be an integer"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"stream\": 3, " HI "}", "stream", "'stream' must be a boolean"},
    /* Anthropic's tools have no "function" and call the schema input_schema */
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"tools\": [{\"name\": \"a b\", \"input_schema\": {}}], " HI "}",
     "tools[0].name", "'tools[0].name' must be"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, " TOOL_A(", \"description\": 3") ", " HI "}", "tools[0].description",
     "'tools[0].description' must be a string"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, " TOOL_A(", \"x\": 1") ", " HI "}", "tools[0].x",
     "unsupported field 'tools[0].x'"},
    {API_ANTHROPIC,
     "{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\", \"input_schema\": {\"type\": \"strin\"}}], " HI "}", "tools",
     "at /tools/0/input_schema"},
    {API_ANTHROPIC,
     "{\"max_tokens\": 5, \"tools\": [{\"name\": \"f\","
     " \"input_schema\": {\"properties\": {\"a\": {\"type\": \"strin\"}}}}], " HI "}",
     "tools", "at /tools/0/input_schema/properties/a"},
    {API_ANTHROPIC,
     "{\"max_tokens\": 5, " TOOL_A("") ", \"tool_choice\": {\"type\": \"tool\", \"name\": \"g\"}, " HI "}",
     "tool_choice", "tool_choice names 'g'"},
    {API_ANTHROPIC, "{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"any\"}, " HI "}", "tool_choice",
     "'tool_choice' needs 'tools'"},
    /* output_config.format is OpenAI's response_format */
    /* clang-format off */
    {API_ANTHROPIC,
     "{\"max_tokens\": 5, " TOOL_A("") ","
     " \"output_config\": {\"format\": {\"type\": \"json_schema\", \"schema\": {}}}, " HI "}",
     "tools", "'tools' together with 'output_config.format'"},
    /* clang-format on */
    {API_ANTHROPIC,
     "{\"max_tokens\": 5,"
     " \"output_config\": {\"format\": {\"type\": \"json_schema\", \"schema\": {\"type\": \"strin\"}}}, " HI "}",
     "output_config.format", "invalid 'output_config.format'"},
    /* Responses: max_output_tokens is OpenAI's max_tokens */
    {API_RESPONSES, "{\"input\": \"hi\", \"max_output_tokens\": \"x\"}", "max_output_tokens",
     "'max_output_tokens' must be an integer"},
    {API_RESPONSES, "{\"input\": \"hi\", \"max_output_tokens\": 0}", "max_output_tokens",
     "'max_output_tokens' = 0 is out of range"},
    {API_RESPONSES, "{\"input\": \"hi\", \"top_p\": 7}", "top_p", "top_p = 7"},
    {API_RESPONSES, "{\"input\": \"hi\", \"parallel_tool_calls\": 3}", "parallel_tool_calls",
     "'parallel_tool_calls' must be a boolean"},
    /* the Responses API's tools are flat: no "function" */
    {API_RESPONSES, "{\"input\": \"hi\", \"tools\": [{\"type\": \"function\", \"name\": \"a b\"}]}", "tools[0].name",
     "'tools[0].name' must be"},
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R(", \"parameters\": 3") "}", "tools[0].parameters",
     "'tools[0].parameters' must be a JSON Schema object"},
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R(", \"description\": 3") "}", "tools[0].description",
     "'tools[0].description' must be a string"},
    {API_RESPONSES,
     "{\"input\": \"hi\","
     " \"tools\": [{\"type\": \"function\", \"name\": \"f\"}, {\"type\": \"function\", \"name\": \"f\"}]}",
     "tools[1].name", "two tools are called 'f'"},
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R(", \"parameters\": {\"type\": \"strin\"}") "}", "tools",
     "at /tools/0/parameters"},
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R("") ", \"tool_choice\": {\"type\": \"function\", \"name\": \"g\"}}",
     "tool_choice", "tool_choice names 'g'"},
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R("") ", \"tool_choice\": \"some\"}", "tool_choice",
     "'tool_choice' must be"},
    {API_RESPONSES, "{\"input\": \"hi\", \"tool_choice\": \"required\"}", "tool_choice", "'tool_choice' needs 'tools'"},
    /* text.format is OpenAI's response_format, and holds what its json_schema holds */
    {API_RESPONSES, "{\"input\": \"hi\", " TOOL_R("") ", \"text\": {\"format\": {\"type\": \"json_object\"}}}", "tools",
     "'tools' together with 'text.format'"},
    {API_RESPONSES, FMT_R("{\"type\": \"yaml\"}"), "text.format", "'text.format.type' must be"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_object\", \"schema\": 3}"), "text.format",
     "'text.format' must be an object whose 'schema' is a JSON Schema object"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_object\", \"x\": 3}"), "text.format", "unsupported field 'text.format.x'"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_schema\", \"name\": 3, \"schema\": {}}"), "text.format",
     "'text.format.name' and '.description' must be strings"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_schema\", \"strict\": 3, \"schema\": {}}"), "text.format",
     "'text.format.strict' must be a boolean"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_schema\"}"), "text.format", "'text.format.schema' is required"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_schema\", \"schema\": 3}"), "text.format",
     "'text.format.schema' must be a JSON Schema"},
    {API_RESPONSES, FMT_R("{\"type\": \"json_schema\", \"schema\": {\"type\": \"strin\"}}"), "text.format",
     "invalid 'text.format'"},
};

Test(apis, every_mapped_error_names_the_field_as_the_client_sent_it) {
    for (size_t i = 0; i < sizeof NAMED_ERRORS / sizeof *NAMED_ERRORS; i++) {
        const named_error *x = &NAMED_ERRORS[i];
        json_t *b = load(x->body);
        oai_request r;
        api_request ar;
        oai_error e = {0};
        const bool ok = x->kind == API_ANTHROPIC ? ant_parse(&ctx, b, false, &r, &ar, &e)
                                                 : resp_parse(&ctx, b, &r, &ar, &e);
        cr_expect_not(ok, "accepted: %s", x->body);
        if (!ok) {
            cr_expect_str_eq(e.param, x->param, "%s: param '%s' (%s)", x->body, e.param, e.message);
            cr_expect(strstr(e.message, x->mentions), "%s: message '%s' does not say '%s'", x->body, e.message,
                      x->mentions);
            names_no_openai_field(x->kind, &e, x->body);
        }
        oai_request_free(&r);
        api_request_free(&ar);
        json_decref(b);
    }
}

/* A conversation longer than the context is named as the client sent it. */
Test(apis, a_prompt_too_long_names_the_input) {
    cn_buf long_input = {0};
    for (int i = 0; i < N_CTX; i++) cn_buf_puts(&long_input, "hi hi ");
    json_t *b = json_pack("{s:s}", "input", long_input.p);
    cn_buf_free(&long_input);
    oai_request r;
    api_request ar;
    oai_error e = {0};
    cr_assert_not(resp_parse(&ctx, b, &r, &ar, &e));
    cr_expect_str_eq(e.param, "input");
    cr_expect_str_eq(e.code, "context_length_exceeded");
    cr_expect(strstr(e.message, "your input resulted in"), "%s", e.message);
    names_no_openai_field(API_RESPONSES, &e, "a long input");
    json_decref(b);
}

/* What oai_parse refuses of an OpenAI-shaped body is named in the dialect's terms, even
 * where the Anthropic and Responses mappings never let such a value through: whatever
 * check oai_parse has, it spells the field from the dialect's table. */
Test(apis, oai_parse_spells_every_error_in_the_dialect) {
    static const char *const BODIES[] = {
        "{" HI ", \"max_tokens\": 0}",
        "{" HI ", \"max_completion_tokens\": 0}",
        "{" HI ", \"stop\": 3}",
        "{" HI ", \"stop\": [\"\"]}",
        "{" HI ", \"parallel_tool_calls\": 3}",
        "{" HI ", \"chat_template_kwargs\": 3}",
        "{" HI ", \"tools\": 3}",
        "{" HI ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
        "{" HI ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]}",
        "{" HI ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
        " \"parameters\": {\"type\": \"x\"}}}]}",
        "{" HI ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
        " \"response_format\": {\"type\": \"json_object\"}}",
        "{" HI ", \"response_format\": 3}",
        "{" HI ", \"response_format\": {\"type\": \"yaml\"}}",
        "{" HI ", \"response_format\": {\"type\": \"text\", \"x\": 1}}",
        "{" HI ", \"response_format\": {\"type\": \"json_schema\"}}",
        "{" HI ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"x\": 1}}}",
        "{" HI ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": 3}}}",
        "{" HI ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"x\"}}}}",
        "{" HI ", \"response_format\": {\"type\": \"json_object\"}, \"grammar\": \"root ::= \\\"a\\\"\"}",
        "{\"messages\": 3}",
        "{}",
    };
    const struct {
        api_kind kind;
        const oai_dialect *d;
    } apis[] = {{API_ANTHROPIC, &ANT_API}, {API_RESPONSES, &RESP_API}};
    for (size_t a = 0; a < 2; a++) {
        for (size_t i = 0; i < sizeof BODIES / sizeof *BODIES; i++) {
            json_t *b = load(BODIES[i]);
            oai_request r;
            oai_error e = {0};
            const bool ok = oai_parse_as(&ctx, apis[a].d, b, &r, &e);
            cr_expect_not(ok, "accepted: %s", BODIES[i]);
            if (!ok) names_no_openai_field(apis[a].kind, &e, BODIES[i]);
            oai_request_free(&r);
            json_decref(b);
        }
    }
}

/* ---- the writers, fed by the real reply reader ---- */

typedef struct {
    oai_request r;
    api_request ar;
    oai_reply rp;
    api_writer w;
    api_meta m;
    json_t *events;
} reply_run;

/* A request of kind with one tool, read as a Hermes reply that thinks; text is fed in
 * pieces of 3 bytes; finish ends it with n_generated tokens. */
static void run_reply(reply_run *x, api_kind kind, const char *text, cn_finish_reason finish, int32_t n_generated) {
    memset(x, 0, sizeof *x);
    json_t *b =
        kind == API_ANTHROPIC
            ? load("{\"max_tokens\": 50, \"tools\": [{\"name\": \"get_weather\", \"input_schema\": " WEATHER_SCHEMA
                   "}], " HI "}")
            : load("{\"max_output_tokens\": 50, \"input\": \"hi\","
                   " \"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": " WEATHER_SCHEMA
                   "}]}");
    oai_error e = {0};
    const bool ok = kind == API_ANTHROPIC ? ant_parse(&ctx, b, false, &x->r, &x->ar, &e)
                                          : resp_parse(&ctx, b, &x->r, &x->ar, &e);
    cr_assert(ok, "%s", e.message);
    json_decref(b);
    x->r.tool_format = CN_TOOL_FORMAT_HERMES;
    x->r.think = true;
    cr_assert(oai_reply_init(&x->rp, &x->r, &e));
    api_writer_init(&x->w, &x->ar);
    x->m = (api_meta){.id = kind == API_ANTHROPIC ? "msg_0123" : "resp_0123",
                      .model = "stories",
                      .created = 1700000000,
                      .n_prompt = x->r.n_prompt[0],
                      .stop_index = -1,
                      .tok = ctx.tok};
    x->events = json_array();
    api_writer_open(&x->w, &x->m, x->events);
    const size_t n = strlen(text);
    for (size_t i = 0; i <= n; i += 3) {
        const size_t k = n - i < 3 ? n - i : 3;
        const bool final = i + 3 > n;
        json_t *deltas = json_array();
        cr_assert(oai_reply_feed(&x->rp, text + i, k, final, deltas));
        size_t j;
        json_t *d;
        json_array_foreach(deltas, j, d) api_writer_feed(&x->w, &x->m, d, &x->rp, x->events);
        json_decref(deltas);
    }
    x->m.finish = finish;
    x->m.n_generated = n_generated;
    api_writer_close(&x->w, &x->m, x->events);
    cr_assert_not(x->w.oom);
}

static void free_run(reply_run *x) {
    json_decref(x->events);
    api_writer_free(&x->w);
    oai_reply_free(&x->rp);
    oai_request_free(&x->r);
    api_request_free(&x->ar);
}

static const char *ev_type(json_t *events, size_t i) {
    return json_string_value(json_object_get(json_array_get(events, i), "type"));
}

#define THINK_AND_CALL                                                                                              \
    "<think>The user wants weather.</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": " \
    "\"Paris\"}}\n</tool_call>"

Test(apis, anthropic_stream_and_message_of_a_reply_that_thinks_and_calls) {
    reply_run x;
    run_reply(&x, API_ANTHROPIC, THINK_AND_CALL, CN_FINISH_STOP, 30);
    const char *order[] = {"message_start",       "content_block_start", "ping",
                           "content_block_delta", "content_block_stop",  "content_block_start",
                           "content_block_delta", "content_block_stop",  "message_delta",
                           "message_stop"};
    /* deltas repeat: compare the sequence with runs of deltas collapsed */
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(x.events); i++) {
        const char *t = ev_type(x.events, i);
        if (i > 0 && !strcmp(t, "content_block_delta") && !strcmp(t, ev_type(x.events, i - 1))) continue;
        cr_assert(k < sizeof order / sizeof *order, "extra event %s", t);
        cr_assert_str_eq(t, order[k], "event %zu: %s, want %s", k, t, order[k]);
        k++;
    }
    cr_assert_eq(k, sizeof order / sizeof *order);
    /* the blocks: thinking (index 0), then the call (index 1); the whitespace between is no text */
    json_t *b0 = json_object_get(json_array_get(x.events, 1), "content_block");
    cr_assert_str_eq(json_string_value(json_object_get(b0, "type")), "thinking");
    json_t *m = api_writer_response(&x.w, &x.m);
    json_t *content = json_object_get(m, "content");
    cr_assert_eq(json_array_size(content), 2);
    json_t *th = json_array_get(content, 0), *tu = json_array_get(content, 1);
    cr_assert_str_eq(json_string_value(json_object_get(th, "thinking")), "The user wants weather.");
    cr_assert_str_eq(json_string_value(json_object_get(tu, "type")), "tool_use");
    cr_assert_str_eq(json_string_value(json_object_get(tu, "name")), "get_weather");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(tu, "input"), "city")), "Paris");
    const char *id = json_string_value(json_object_get(tu, "id"));
    cr_assert(!strncmp(id, "toolu_", 6) && strlen(id) == 30, "%s", id);
    cr_assert_str_eq(id + 6, x.rp.calls[0].id + 5, "the toolu_ id is the call's");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    cr_assert(json_is_null(json_object_get(m, "stop_sequence")));
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(m, "usage"), "output_tokens")), 30);
    /* what streamed is what the message holds */
    char thinking[256] = "", args[256] = "";
    for (size_t i = 0; i < json_array_size(x.events); i++) {
        json_t *d = json_object_get(json_array_get(x.events, i), "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (dt && !strcmp(dt, "thinking_delta")) strcat(thinking, json_string_value(json_object_get(d, "thinking")));
        if (dt && !strcmp(dt, "input_json_delta")) strcat(args, json_string_value(json_object_get(d, "partial_json")));
    }
    cr_assert_str_eq(thinking, "The user wants weather.");
    json_t *parsed = json_loads(args, 0, NULL);
    cr_assert(json_equal(parsed, json_object_get(tu, "input")), "streamed input %s", args);
    json_decref(parsed);
    json_t *md = json_array_get(x.events, json_array_size(x.events) - 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_reason")), "tool_use");
    json_decref(m);
    free_run(&x);
}

Test(apis, anthropic_text_stop_reasons) {
    reply_run x;
    /* leading whitespace of a reply without calls is text */
    run_reply(&x, API_ANTHROPIC, "\n\nHello END there", CN_FINISH_STOP, 5);
    json_t *m = api_writer_response(&x.w, &x.m);
    json_t *content = json_object_get(m, "content");
    cr_assert_eq(json_array_size(content), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(content, 0), "text")), "\n\nHello END there");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
    json_decref(m);
    /* a stop sequence seen in the tokens: stop_sequence and which */
    x.ar.stops[0] = strdup("THERE");
    x.ar.stops[1] = strdup("END");
    x.ar.stops[2] = strdup("EN");
    x.ar.n_stops = 3;
    const char *toks = "\n\nHello END there";
    x.m.stop_index = ant_stop_match(&x.ar, toks, strlen(toks));
    cr_assert_eq(x.m.stop_index, 1, "the earliest, and of two there the longest");
    m = api_writer_response(&x.w, &x.m);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_sequence")), "END");
    json_decref(m);
    cr_assert_eq(ant_stop_match(&x.ar, "nothing", 7), -1);
    /* max_tokens: the limit asked for; below it, the context ran out */
    x.m.finish = CN_FINISH_LENGTH;
    x.m.n_generated = 50;
    m = api_writer_response(&x.w, &x.m);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "max_tokens");
    json_decref(m);
    x.m.n_generated = 7;
    m = api_writer_response(&x.w, &x.m);
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "model_context_window_exceeded");
    json_decref(m);
    free_run(&x);
}

Test(apis, a_call_the_reply_ended_inside_stays_a_call) {
    reply_run x;
    run_reply(&x, API_ANTHROPIC, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", CN_FINISH_LENGTH, 50);
    json_t *m = api_writer_response(&x.w, &x.m);
    json_t *content = json_object_get(m, "content");
    cr_assert_eq(json_array_size(content), 1, "the call's text is not turned into a text block");
    json_t *tu = json_array_get(content, 0);
    cr_assert_str_eq(json_string_value(json_object_get(tu, "type")), "tool_use");
    cr_assert_eq(json_object_size(json_object_get(tu, "input")), 0, "input that does not parse is {}");
    cr_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "max_tokens");
    json_decref(m);
    free_run(&x);
    run_reply(&x, API_RESPONSES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", CN_FINISH_LENGTH, 50);
    json_t *r = api_writer_response(&x.w, &x.m);
    json_t *out = json_object_get(r, "output");
    cr_assert_eq(json_array_size(out), 1);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, 0), "status")), "incomplete");
    cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "incomplete");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "incomplete_details"), "reason")),
                     "max_output_tokens");
    json_decref(r);
    free_run(&x);
}

Test(apis, responses_stream_and_object_of_a_reply_that_thinks_and_calls) {
    reply_run x;
    run_reply(&x, API_RESPONSES,
              "<think>Weather.</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
              "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
              CN_FINISH_STOP, 20);
    const char *order[] = {"response.created", "response.in_progress",
                           /* reasoning */
                           "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                           "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                           /* message */
                           "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                           "response.output_text.done", "response.content_part.done", "response.output_item.done",
                           /* call */
                           "response.output_item.added", "response.function_call_arguments.delta",
                           "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(x.events); i++) {
        json_t *ev = json_array_get(x.events, i);
        cr_assert_eq(json_integer_value(json_object_get(ev, "sequence_number")), (json_int_t)i);
        const char *t = ev_type(x.events, i);
        if (i > 0 && strstr(t, ".delta") && !strcmp(t, ev_type(x.events, i - 1))) continue;
        cr_assert(k < sizeof order / sizeof *order, "extra event %s", t);
        cr_assert_str_eq(t, order[k], "event %zu: %s, want %s", k, t, order[k]);
        k++;
    }
    cr_assert_eq(k, sizeof order / sizeof *order);
    json_t *r = api_writer_response(&x.w, &x.m);
    json_t *last = json_object_get(json_array_get(x.events, json_array_size(x.events) - 1), "response");
    cr_assert(json_equal(r, last), "response.completed holds the whole response");
    json_t *out = json_object_get(r, "output");
    cr_assert_eq(json_array_size(out), 3);
    json_t *rs = json_array_get(out, 0), *msg = json_array_get(out, 1), *fc = json_array_get(out, 2);
    cr_assert_str_eq(json_string_value(json_object_get(rs, "type")), "reasoning");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(rs, "content"), 0), "text")),
                     "Weather.");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "type")), "message");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text")),
                     "\n\nChecking.\n"); /* as chat completions give it: the content as it came */
    cr_assert_str_eq(json_string_value(json_object_get(fc, "type")), "function_call");
    cr_assert_str_eq(json_string_value(json_object_get(fc, "call_id")), x.rp.calls[0].id);
    cr_assert_str_eq(json_string_value(json_object_get(fc, "arguments")), x.rp.calls[0].args.p);
    cr_assert_str_eq(json_string_value(json_object_get(r, "status")), "completed");
    /* reasoning tokens: the reasoning text's tokens */
    int32_t *ids = NULL;
    size_t n = 0;
    cn_error err = {0};
    cr_assert_eq(cn_tokenize_alloc(ctx.tok, "Weather.", 8, false, false, &ids, &n, &err), CN_STATUS_OK);
    free(ids);
    json_t *u = json_object_get(r, "usage");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")),
                 (json_int_t)n);
    cr_assert_eq(json_integer_value(json_object_get(u, "total_tokens")), x.m.n_prompt + 20);
    json_decref(r);
    free_run(&x);
}

Test(apis, error_types_follow_the_status) {
    const struct {
        int status;
        const char *type;
    } want[] = {{400, "invalid_request_error"},
                {401, "authentication_error"},
                {404, "not_found_error"},
                {413, "request_too_large"},
                {429, "rate_limit_error"},
                {503, "overloaded_error"},
                {504, "api_error"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        oai_error e = {0};
        oai_fail(&e, want[i].status, "x", NULL, NULL, "bad \xff byte");
        json_t *j = ant_error_json(&e);
        json_t *o = json_object_get(j, "error");
        cr_assert_str_eq(json_string_value(json_object_get(o, "type")), want[i].type);
        cr_assert_str_eq(json_string_value(json_object_get(o, "message")), "bad \xEF\xBF\xBD byte");
        json_decref(j);
    }
}
