/* test_openai_grammar.c — structured output in the request mapping (src/serve/openai.c)
 * and the compiled-grammar cache (src/serve/gcache.c), on stories260K's vocabulary.
 *
 * The truth for the fields is the APIs that define them: OpenAI's response_format
 * (platform.openai.com/docs/api-reference/chat/create: {"type": "text" | "json_object" |
 * "json_schema", "json_schema": {name, description, schema, strict}}), llama-server's
 * json_schema and grammar (tools/server/README.md of llama.cpp), vLLM's guided_json,
 * guided_regex, guided_choice and guided_grammar (its OpenAI-compatible server docs). What
 * a compiled grammar accepts is checked on texts whose membership is worked by hand from
 * the JSON, JSON Schema and regex specifications (cn_grammar_check_text: bytes, not
 * tokens), never against cinder's own output. Cinder's own choices (at most one
 * constraint per request, 400 naming both; "" grammar is none, as in llama-server) are
 * said where they are tested. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "serve/gcache.h"
#include "serve/openai.h"
#include "test_engine_util.h"

#define N_CTX 256

static cn_model *model;
static cn_engine *engine;
static gcache *cache;
static oai_ctx ctx;

static void setup(void) {
    model = te_load_stories();
    cn_engine_params p = cn_engine_default_params();
    p.n_ctx = N_CTX;
    p.max_running = 4;
    p.kv_tokens = 4 * N_CTX;
    p.chat_template = "chatml";
    cn_error err = {0};
    cr_assert_eq(cn_engine_create(model, &p, &engine, &err), CN_STATUS_OK, "%s", err.msg);
    cache = gcache_new(8, 0);
    cr_assert(cache);
    ctx = (oai_ctx){.tok = cn_engine_tokenizer(engine),
                    .chat = cn_engine_chat_template(engine),
                    .eot_stop = cn_engine_end_of_turn_stop(engine),
                    .model_id = "stories",
                    .n_ctx = cn_engine_n_ctx(engine),
                    .n_vocab = cn_engine_n_vocab(engine),
                    .max_n = cn_engine_max_running(engine),
                    .max_draft = 8,
                    .grammars = cache};
}

static void teardown(void) {
    gcache_free(cache);
    cn_engine_free(engine);
    cn_model_free(model);
}

TestSuite(openai_grammar, .init = setup, .fini = teardown, .timeout = 120);

static bool parse(oai_kind kind, const char *text, oai_request *r, oai_error *e) {
    json_error_t je;
    /* NUL allowed here (the server's parser refuses it): the mapping must not rely on that */
    json_t *body = json_loads(text, JSON_ALLOW_NUL, &je);
    cr_assert(body, "test body is not JSON: %s", je.text);
    memset(e, 0, sizeof *e);
    const bool ok = oai_parse(&ctx, kind, body, r, e);
    json_decref(body);
    return ok;
}

/* A chat request whose extra fields are `fields` (JSON members, no braces). */
static bool chat(const char *fields, oai_request *r, oai_error *e) {
    char body[8192];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 8, %s}",
             fields);
    return parse(OAI_CHAT, body, r, e);
}

static bool completion(const char *fields, oai_request *r, oai_error *e) {
    char body[8192];
    snprintf(body, sizeof body, "{\"prompt\": \"Once\", \"max_tokens\": 8, %s}", fields);
    return parse(OAI_COMPLETION, body, r, e);
}

static bool accepts(const oai_request *r, const char *text) {
    return cn_grammar_check_text(r->grammar, text, strlen(text));
}

/* A 400 naming param, its message containing want (NULL: any). */
static void refused(const char *fields, const char *param, const char *want) {
    oai_request r;
    oai_error e;
    cr_assert_not(chat(fields, &r, &e), "accepted: %s", fields);
    cr_assert_eq(e.http_status, 400, "%s: status %d (%s)", fields, e.http_status, e.message);
    cr_assert_str_eq(e.type, "invalid_request_error");
    cr_assert_str_eq(e.param, param, "%s: param '%s' (%s)", fields, e.param, e.message);
    if (want) cr_assert(strstr(e.message, want), "%s: message '%s' lacks '%s'", fields, e.message, want);
    oai_request_free(&r);
}

Test(openai_grammar, text_is_no_constraint) {
    oai_request r;
    oai_error e;
    cr_assert(chat("\"response_format\": {\"type\": \"text\"}", &r, &e), "%s", e.message);
    cr_assert_null(r.grammar);
    cr_assert_null(r.gen.grammar);
    oai_request_free(&r);
    /* llama-server: an empty grammar is no grammar */
    cr_assert(chat("\"grammar\": \"\"", &r, &e), "%s", e.message);
    cr_assert_null(r.gen.grammar);
    oai_request_free(&r);
    cr_assert(chat("\"response_format\": null, \"guided_json\": null", &r, &e), "%s", e.message);
    cr_assert_null(r.gen.grammar);
    oai_request_free(&r);
}

Test(openai_grammar, json_object_is_any_object) {
    oai_request r;
    oai_error e;
    cr_assert(chat("\"response_format\": {\"type\": \"json_object\"}", &r, &e), "%s", e.message);
    cr_assert_not_null(r.grammar);
    cr_assert_eq(r.gen.grammar, r.grammar);
    cr_assert_str_eq(r.grammar_field, "response_format");
    /* RFC 8259 objects, with whitespace between tokens */
    cr_assert(accepts(&r, "{}"));
    cr_assert(accepts(&r, "{\"a\": [1, 2.5e3, true, null], \"b\": {\"c\": \"d\\u00e9\"}}"));
    cr_assert(accepts(&r, "{ \"x\" : -0 }"));
    /* not objects, or not JSON */
    cr_assert_not(accepts(&r, "[1]"));
    cr_assert_not(accepts(&r, "\"s\""));
    cr_assert_not(accepts(&r, "{\"a\": 01}"));
    cr_assert_not(accepts(&r, "{\"a\" 1}"));
    cr_assert_not(accepts(&r, "{'a': 1}"));
    cr_assert_not(accepts(&r, "{\"a\": 1"));
    oai_request_free(&r);
}

static const char *PERSON =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"}},"
    " \"required\": [\"name\", \"age\"], \"additionalProperties\": false}";

/* What PERSON allows (JSON Schema 2020-12 validation, worked by hand). */
static void check_person(const oai_request *r) {
    cr_assert(accepts(r, "{\"name\": \"Ann\", \"age\": 31}"));
    cr_assert(accepts(r, "{\"name\":\"\",\"age\":-4}"));
    cr_assert_not(accepts(r, "{\"name\": \"Ann\"}"));                     /* age is required */
    cr_assert_not(accepts(r, "{\"name\": \"Ann\", \"age\": 3.5}"));       /* not an integer */
    cr_assert_not(accepts(r, "{\"name\": 7, \"age\": 3}"));               /* not a string */
    cr_assert_not(accepts(r, "{\"name\": \"A\", \"age\": 3, \"x\": 1}")); /* additionalProperties */
}

Test(openai_grammar, every_spelling_of_a_schema_compiles_it) {
    char f[2048];
    const char *spellings[] = {
        "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"person\", \"strict\": true,"
        " \"schema\": %s}}",
        "\"response_format\": {\"type\": \"json_object\", \"schema\": %s}", /* llama-server */
        "\"json_schema\": %s",                                              /* llama-server */
        "\"guided_json\": %s",                                              /* vLLM */
    };
    const char *fields[] = {"response_format", "response_format", "json_schema", "guided_json"};
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        snprintf(f, sizeof f, spellings[i], PERSON);
        oai_request r;
        oai_error e;
        cr_assert(chat(f, &r, &e), "%s: %s (param %s)", f, e.message, e.param);
        cr_assert_str_eq(r.grammar_field, fields[i]);
        check_person(&r);
        oai_request_free(&r);
    }
    /* vLLM: guided_json may be the schema's JSON text */
    json_t *s = json_string(PERSON);
    char *quoted = json_dumps(s, JSON_ENCODE_ANY);
    snprintf(f, sizeof f, "\"guided_json\": %s", quoted);
    free(quoted);
    json_decref(s);
    oai_request r;
    oai_error e;
    cr_assert(chat(f, &r, &e), "%s (param %s)", e.message, e.param);
    check_person(&r);
    oai_request_free(&r);
}

Test(openai_grammar, completions_take_the_same_fields) {
    oai_request r;
    oai_error e;
    char f[2048];
    snprintf(f, sizeof f,
             "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", "
             "\"schema\": %s}}",
             PERSON);
    cr_assert(completion(f, &r, &e), "%s (param %s)", e.message, e.param);
    check_person(&r);
    oai_request_free(&r);
    cr_assert(completion("\"guided_choice\": [\"yes\", \"no\"]", &r, &e), "%s", e.message);
    cr_assert(accepts(&r, "no"));
    oai_request_free(&r);
}

Test(openai_grammar, regex_choice_and_gbnf) {
    oai_request r;
    oai_error e;
    /* ECMAScript semantics, matched in full */
    cr_assert(chat("\"guided_regex\": \"[0-9]{3}-[a-z]+(\\\\.[a-z]+)?\"", &r, &e), "%s", e.message);
    cr_assert_str_eq(r.grammar_field, "guided_regex");
    cr_assert(accepts(&r, "123-abc"));
    cr_assert(accepts(&r, "000-a.b"));
    cr_assert_not(accepts(&r, "12-abc"));
    cr_assert_not(accepts(&r, "123-abc."));
    cr_assert_not(accepts(&r, "x123-abc"));
    oai_request_free(&r);

    cr_assert(chat("\"guided_choice\": [\"yes\", \"no\", \"not sure\"]", &r, &e), "%s", e.message);
    cr_assert(accepts(&r, "yes") && accepts(&r, "no") && accepts(&r, "not sure"));
    cr_assert_not(accepts(&r, "ye"));
    cr_assert_not(accepts(&r, "yesno"));
    cr_assert_not(accepts(&r, "not"));
    oai_request_free(&r);

    /* llama.cpp's GBNF: a letter, then digits */
    const char *gbnf[] = {"grammar", "guided_grammar"};
    for (int i = 0; i < 2; i++) {
        char f[256];
        snprintf(f, sizeof f, "\"%s\": \"root ::= [a-c] digit+\\ndigit ::= [0-9]\"", gbnf[i]);
        cr_assert(chat(f, &r, &e), "%s: %s", f, e.message);
        cr_assert_str_eq(r.grammar_field, gbnf[i]);
        cr_assert(accepts(&r, "a1") && accepts(&r, "c0099"));
        cr_assert_not(accepts(&r, "d1"));
        cr_assert_not(accepts(&r, "a"));
        cr_assert_not(accepts(&r, "a1x"));
        oai_request_free(&r);
    }
}

/* cinder's rule: two constraints are a 400 naming both, the second as param. */
Test(openai_grammar, two_constraints_are_refused_naming_both) {
    refused("\"response_format\": {\"type\": \"json_object\"}, \"guided_regex\": \"a\"", "guided_regex",
            "'response_format' and 'guided_regex'");
    refused("\"grammar\": \"root ::= \\\"a\\\"\", \"guided_choice\": [\"a\"]", "guided_choice",
            "'grammar' and 'guided_choice'");
    refused("\"json_schema\": {}, \"guided_json\": {}", "guided_json", "'json_schema' and 'guided_json'");
    /* "text" and "" constrain nothing: the other one stands */
    oai_request r;
    oai_error e;
    cr_assert(chat("\"response_format\": {\"type\": \"text\"}, \"guided_choice\": [\"x\"]", &r, &e), "%s", e.message);
    cr_assert_str_eq(r.grammar_field, "guided_choice");
    cr_assert(accepts(&r, "x"));
    oai_request_free(&r);
    cr_assert(chat("\"grammar\": \"\", \"guided_regex\": \"b+\"", &r, &e), "%s", e.message);
    cr_assert_str_eq(r.grammar_field, "guided_regex");
    oai_request_free(&r);
}

Test(openai_grammar, malformed_fields_are_400s_naming_them) {
    refused("\"response_format\": \"json\"", "response_format", NULL);
    refused("\"response_format\": {\"type\": \"xml\"}", "response_format", "json_schema");
    refused("\"response_format\": {}", "response_format", NULL);
    refused("\"response_format\": {\"type\": \"json_schema\"}", "response_format", "json_schema");
    refused("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}", "response_format",
            "schema");
    refused("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": 5}}", "response_format",
            "schema");
    refused("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {}, \"strict\": 1}}",
            "response_format", "strict");
    refused("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {}, \"extra\": 1}}",
            "response_format", "extra");
    refused("\"response_format\": {\"type\": \"text\", \"schema\": {}}", "response_format", "schema");
    refused("\"guided_json\": \"{not json\"", "guided_json", "line 1");
    refused("\"guided_json\": 12", "guided_json", NULL);
    refused("\"json_schema\": [1]", "json_schema", NULL);
    refused("\"guided_regex\": 5", "guided_regex", NULL);
    refused("\"guided_choice\": []", "guided_choice", NULL);
    refused("\"guided_choice\": [\"a\", 1]", "guided_choice", NULL);
    refused("\"guided_choice\": \"a\"", "guided_choice", NULL);
    refused("\"guided_choice\": [\"a\\u0000b\"]", "guided_choice", "NUL");
    refused("\"grammar\": {\"root\": 1}", "grammar", NULL);
    refused("\"guided_grammar\": 1", "guided_grammar", NULL);
    /* vLLM's other knobs are not silently ignored */
    refused("\"guided_whitespace_pattern\": \" \"", "guided_whitespace_pattern", NULL);
}

/* What the compilers refuse comes back as a 400 carrying their message. */
Test(openai_grammar, compile_errors_carry_the_compilers_message) {
    const struct {
        const char *fields, *param;
    } cases[] = {
        {"\"guided_regex\": \"(ab\"", "guided_regex"},
        {"\"guided_regex\": \"a{3,1}\"", "guided_regex"},
        {"\"grammar\": \"root ::= (\\\"a\\\"\"", "grammar"},
        {"\"grammar\": \"root ::= undefined-rule\"", "grammar"},
        {"\"guided_grammar\": \"start ::= \\\"a\\\"\"", "guided_grammar"}, /* no root */
        {"\"guided_json\": {\"type\": \"no-such-type\"}", "guided_json"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": "
         "{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/$defs/missing\"}}, \"required\": [\"a\"]}}}",
         "response_format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        oai_request r;
        oai_error e;
        cr_assert_not(chat(cases[i].fields, &r, &e), "accepted: %s", cases[i].fields);
        cr_assert_eq(e.http_status, 400, "%s: %d %s", cases[i].fields, e.http_status, e.message);
        cr_assert_str_eq(e.param, cases[i].param, "%s: param %s", cases[i].fields, e.param);
        char head[64];
        snprintf(head, sizeof head, "invalid '%s': ", cases[i].param);
        cr_assert(!strncmp(e.message, head, strlen(head)) && strlen(e.message) > strlen(head) + 4, "%s: message '%s'",
                  cases[i].fields, e.message);
        oai_request_free(&r);
    }
    /* the JSON pointer of the unsupported or wrong part is named */
    oai_request r;
    oai_error e;
    cr_assert_not(
        chat("\"guided_json\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"wat\"}}}", &r, &e));
    cr_assert(strstr(e.message, "/properties/a"), "%s", e.message);
    oai_request_free(&r);
}

Test(openai_grammar, the_compile_budget_is_a_400) {
    oai_ctx saved = ctx;
    ctx.grammar_max_states = 64;
    ctx.grammars = NULL;
    refused("\"guided_regex\": \"[a-z]{200}\"", "guided_regex", "budget");
    ctx = saved;
}

static uint64_t hits(void) {
    gcache_stats st;
    gcache_get_stats(cache, &st);
    return st.hits;
}

Test(openai_grammar, one_schema_is_compiled_once) {
    oai_request a, b, c, d;
    oai_error e;
    const uint64_t h0 = hits();
    cr_assert(chat("\"guided_json\": {\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"boolean\"}}}", &a, &e),
              "%s", e.message);
    cr_assert_not(a.grammar_cached);
    /* the same schema spelled otherwise (spacing, an escape, another field) is a hit */
    cr_assert(chat("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"schema\":"
                   "{\"type\":\"object\",\"properties\":{\"\\u006b\":{\"type\":\"boolean\"}}}}}",
                   &b, &e),
              "%s", e.message);
    cr_assert(b.grammar_cached);
    cr_assert_eq(a.grammar, b.grammar, "one compiled grammar, shared");
    cr_assert_eq(hits(), h0 + 1);
    /* property order orders the output: another grammar */
    cr_assert(chat("\"guided_json\": {\"properties\": {\"k\": {\"type\": \"boolean\"}}, \"type\": \"object\"}", &c, &e),
              "%s", e.message);
    cr_assert_not(c.grammar_cached);
    /* the same text as a regex is another kind: another grammar */
    cr_assert(chat("\"guided_regex\": \"{\\\"type\\\":\\\"object\\\"}\"", &d, &e), "%s", e.message);
    cr_assert_not(d.grammar_cached);
    cr_assert_neq(d.grammar, a.grammar);
    cr_assert(accepts(&b, "{\"k\": true}"));
    oai_request_free(&a);
    oai_request_free(&b);
    oai_request_free(&c);
    oai_request_free(&d);
}

/* ---- the cache itself ---- */

static cn_grammar *regex_grammar(gcache *g, const char *re, bool *hit) {
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = CN_GRAMMAR_REGEX;
    p.source = re;
    cn_grammar *out = NULL;
    cn_error err = {0};
    cr_assert_eq(gcache_get(g, ctx.tok, &p, re, strlen(re), &out, hit, &err), CN_STATUS_OK, "%s", err.msg);
    return out;
}

Test(openai_grammar, the_cache_evicts_the_least_recently_used) {
    gcache *g = gcache_new(2, 0);
    bool hit;
    cn_grammar *a = regex_grammar(g, "a+", &hit);
    cr_assert_not(hit);
    cn_grammar *b = regex_grammar(g, "b+", &hit);
    cn_grammar *a2 = regex_grammar(g, "a+", &hit); /* a is now the most recent */
    cr_assert(hit);
    cr_assert_eq(a, a2);
    cn_grammar *c = regex_grammar(g, "c+", &hit); /* evicts b */
    cr_assert_not(hit);
    gcache_stats st;
    gcache_get_stats(g, &st);
    cr_assert_eq(st.n_entries, 2);
    cr_assert_eq(st.evictions, 1);
    cr_assert_eq(st.hits, 1);
    cr_assert_eq(st.misses, 3);
    cn_grammar *a3 = regex_grammar(g, "a+", &hit);
    cr_assert(hit);
    cn_grammar *b2 = regex_grammar(g, "b+", &hit);
    cr_assert_not(hit, "b was evicted");
    /* an evicted grammar lives on in its holders (ASan would see a use after free) */
    cr_assert(cn_grammar_check_text(b, "bbb", 3));
    cr_assert_not(cn_grammar_check_text(b, "ab", 2));
    gcache_free(g);
    cr_assert(cn_grammar_check_text(a, "aa", 2)); /* and past the cache's end */
    cn_grammar *all[] = {a, b, a2, c, a3, b2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) cn_grammar_free(all[i]);
}

Test(openai_grammar, failed_compiles_are_counted_not_cached) {
    gcache *g = gcache_new(4, 0);
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = CN_GRAMMAR_REGEX;
    p.source = "(";
    for (int i = 0; i < 2; i++) {
        cn_grammar *out = (cn_grammar *)1;
        cn_error err = {0};
        cr_assert_eq(gcache_get(g, ctx.tok, &p, "(", 1, &out, NULL, &err), CN_STATUS_INVALID_ARG);
        cr_assert_null(out);
        cr_assert(err.msg[0]);
    }
    gcache_stats st;
    gcache_get_stats(g, &st);
    cr_assert_eq(st.errors, 2);
    cr_assert_eq(st.misses, 2);
    cr_assert_eq(st.n_entries, 0);
    gcache_free(g);
}

typedef struct {
    gcache *g;
    int id;
    bool ok;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    static const struct {
        const char *re, *sample;
    } cases[] = {{"x[0-9]+", "x12"}, {"y[a-f]*z", "yabz"}, {"(ab|cd){2,4}", "abcd"}};
    w->ok = true;
    for (int i = 0; i < 30; i++) {
        const char *re = cases[(i + w->id) % 3].re, *sample = cases[(i + w->id) % 3].sample;
        cn_grammar_params p = cn_grammar_default_params();
        p.kind = CN_GRAMMAR_REGEX;
        p.source = re;
        cn_grammar *out = NULL;
        cn_error err = {0};
        if (gcache_get(w->g, ctx.tok, &p, re, strlen(re), &out, NULL, &err) != CN_STATUS_OK) w->ok = false;
        if (out && !cn_grammar_check_text(out, sample, strlen(sample))) w->ok = false;
        cn_grammar_free(out);
    }
    return NULL;
}

Test(openai_grammar, the_cache_is_thread_safe) {
    gcache *g = gcache_new(2, 0); /* fewer entries than keys: evictions race with lookups */
    enum { N = 6 };
    pthread_t t[N];
    worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (worker){g, i, false};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) cr_assert(w[i].ok, "worker %d", i);
    gcache_stats st;
    gcache_get_stats(g, &st);
    cr_assert_eq(st.hits + st.misses, N * 30);
    cr_assert_leq(st.n_entries, 2);
    gcache_free(g);
}
