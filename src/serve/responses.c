/* responses.c — OpenAI's Responses API (stateless) over the chat mapping.
 *
 * In: input (a string, or items: messages with string or input_text / output_text
 * content, function_call {call_id, name, arguments}, function_call_output {call_id,
 * output}, reasoning {content or summary}), instructions (a system message first),
 * function tools {"type": "function", name, description, parameters, strict}, tool_choice,
 * parallel_tool_calls, max_output_tokens, temperature, top_p, stream, text.format
 * (response_format), metadata (repeated back), user, safety_identifier and
 * prompt_cache_key (no effect), store (accepted; nothing is ever stored). State the server
 * would have to keep (previous_response_id, conversation, background, item references) is
 * refused with a 400 that says so. A function_call_output must answer a function_call of
 * an earlier item.
 *
 * Out: the response object {id "resp_...", object, created_at, status (completed,
 * incomplete at the token limit), model, output [reasoning, message, function_call
 * items], usage, and the request's settings}, or its stream of events, each with its
 * sequence_number. Pure translation: no sockets, no threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "serve/apis.h"
#include "serve/validate.h"

/* The OpenAI fields the Responses API names otherwise (openai.h: errors are spelled from
 * it). */
static const oai_name RESP_NAMES[] = {
    {"max_tokens", "max_output_tokens"}, {"messages", "input"},
    {"response_format", "text.format"},  {"response_format.json_schema", "text.format"},
    {"tools[].function", "tools[]"},
};
const oai_dialect RESP_API = {OAI_CHAT, "/v1/responses", RESP_NAMES, ARRAY_LEN(RESP_NAMES)};

/* ---- input ---- */

/* Message content: a string, or parts of text (input_text, output_text, refusal), joined
 * by newlines. */
static bool content_text(json_t *ct, const char *param, json_t **out, oai_error *e) {
    if (json_is_string(ct)) {
        *out = json_incref(ct);
        return true;
    }
    if (!json_is_array(ct)) return val_bad(e, param, "'%s' must be a string or an array of input_text parts", param);
    json_t *parts = json_array();
    if (!parts) return val_oom(e);
    size_t i;
    json_t *p;
    json_array_foreach(ct, i, p) {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%zu]", param, i);
        const char *t = val_str(p, "type");
        json_t *text = json_object_get(p, !strcmp(t, "refusal") ? "refusal" : "text");
        if (!json_is_object(p) || !(!strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "refusal")) ||
            !json_is_string(text)) {
            json_decref(parts);
            return oai_fail(e, 400, "invalid_request_error", pp, "unsupported_content",
                            "'%s' must be a text part ({\"type\": \"input_text\", \"text\": ...}): this server reads "
                            "text only",
                            pp);
        }
        json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
    }
    *out = parts;
    return true;
}

/* The assistant message the next calls join (the last one, if it is an assistant's with no
 * tool result after it), or a new one. */
static json_t *assistant_for_calls(json_t *out) {
    json_t *last = json_array_get(out, json_array_size(out) - 1);
    if (last && !strcmp(val_str(last, "role"), "assistant")) return last;
    json_t *m = json_pack("{s:s,s:n}", "role", "assistant", "content");
    json_array_append_new(out, m);
    return m;
}

/* What the items of input make, as they are read in order. */
typedef struct {
    json_t *out;      /* the OpenAI messages */
    json_t *calls;    /* the function_call ids so far */
    cn_buf reasoning; /* a reasoning item's text, for the next assistant turn */
    json_t *added;    /* the assistant message the last item made or joined, or NULL */
} input_state;

static bool item_message(json_t *it, const char *p, input_state *st, oai_error *e) {
    static const char *const keys[] = {"type", "role", "content", "id", "status", "phase"};
    if (!val_only_keys(it, p, keys, ARRAY_LEN(keys), e)) return false;
    const char *role = val_str(it, "role");
    char pr[80], pc[80];
    snprintf(pr, sizeof pr, "%s.role", p);
    snprintf(pc, sizeof pc, "%s.content", p);
    if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer"))
        return val_bad(e, pr, "'%s' must be \"user\", \"assistant\", \"system\" or \"developer\"", pr);
    json_t *ct = NULL;
    if (!content_text(json_object_get(it, "content"), pc, &ct, e)) return false;
    json_t *m = json_pack("{s:s,s:o}", "role", role, "content", ct);
    json_array_append_new(st->out, m);
    if (!strcmp(role, "assistant")) st->added = m;
    return true;
}

static bool item_function_call(json_t *it, const char *p, input_state *st, oai_error *e) {
    static const char *const keys[] = {"type", "call_id", "name", "arguments", "id", "status"};
    if (!val_only_keys(it, p, keys, ARRAY_LEN(keys), e)) return false;
    json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    json_t *args = json_object_get(it, "arguments");
    if (!json_is_string(id) || !json_string_length(id) || !json_is_string(name) || !json_is_string(args))
        return val_bad(e, p,
                       "'%s' must be {\"type\": \"function_call\", \"call_id\", \"name\", \"arguments\": \"...\"}", p);
    json_t *m = assistant_for_calls(st->out);
    json_t *tcs = json_object_get(m, "tool_calls");
    if (!tcs) json_object_set_new(m, "tool_calls", tcs = json_array());
    json_array_append_new(tcs, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name",
                                         name, "arguments", args));
    json_object_set_new(st->calls, json_string_value(id), json_true());
    st->added = m;
    return true;
}

static bool item_function_call_output(json_t *it, const char *p, input_state *st, oai_error *e) {
    static const char *const keys[] = {"type", "call_id", "output", "id", "status"};
    if (!val_only_keys(it, p, keys, ARRAY_LEN(keys), e)) return false;
    json_t *id = json_object_get(it, "call_id");
    char pid[80], po[80];
    snprintf(pid, sizeof pid, "%s.call_id", p);
    snprintf(po, sizeof po, "%s.output", p);
    if (!json_is_string(id)) return val_bad(e, pid, "'%s' must be a string", pid);
    if (!json_object_get(st->calls, json_string_value(id)))
        return val_bad(e, pid,
                       "'%s' ('%.64s') answers no function_call of an earlier item (this server is stateless: send the "
                       "whole conversation)",
                       pid, json_string_value(id));
    json_t *ct = NULL;
    if (!content_text(json_object_get(it, "output"), po, &ct, e)) return false;
    json_array_append_new(st->out, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", ct));
    return true;
}

/* Its text (the content's reasoning_text parts, else the summary's summary_text parts),
 * kept for the next assistant turn. */
static bool item_reasoning(json_t *it, const char *p, input_state *st, oai_error *e) {
    static const char *const keys[] = {"type", "id", "summary", "content", "encrypted_content", "status"};
    if (!val_only_keys(it, p, keys, ARRAY_LEN(keys), e)) return false;
    json_t *enc = json_object_get(it, "encrypted_content");
    if (enc && !json_is_null(enc)) return val_bad(e, p, "'%s': encrypted reasoning cannot be read by this server", p);
    json_t *parts = json_object_get(it, "content");
    const char *want = "reasoning_text";
    if (!json_is_array(parts) || !json_array_size(parts)) parts = json_object_get(it, "summary"), want = "summary_text";
    size_t j;
    json_t *x;
    json_array_foreach(parts, j, x) {
        json_t *t = json_object_get(x, "text");
        if (strcmp(val_str(x, "type"), want) || !json_is_string(t))
            return val_bad(e, p, "'%s' must hold reasoning_text (content) or summary_text (summary) parts", p);
        if (st->reasoning.n) cn_buf_putc(&st->reasoning, '\n');
        if (!cn_buf_puts(&st->reasoning, json_string_value(t))) return val_oom(e);
    }
    return true;
}

static bool item_reference(json_t *it, const char *p, input_state *st, oai_error *e) {
    (void)it, (void)st;
    return val_bad(e, p, "'%s': item references need stored items; this server is stateless (send the items)", p);
}

static const struct {
    const char *type;
    bool (*read)(json_t *it, const char *p, input_state *st, oai_error *e);
} ITEMS[] = {{"message", item_message},
             {"function_call", item_function_call},
             {"function_call_output", item_function_call_output},
             {"reasoning", item_reasoning},
             {"item_reference", item_reference}};

/* input[i] (at p) into st; a reasoning text kept so far goes with the assistant message it
 * made or joined. */
static bool map_item(json_t *it, const char *p, input_state *st, oai_error *e) {
    if (!json_is_object(it)) return val_bad(e, p, "'%s' must be an item object", p);
    const char *type = json_object_get(it, "type") ? val_str(it, "type") : "message";
    st->added = NULL;
    size_t k = 0;
    while (k < ARRAY_LEN(ITEMS) && strcmp(type, ITEMS[k].type)) k++;
    if (k == ARRAY_LEN(ITEMS))
        return val_bad(e, p,
                       "'%s': items of type '%.40s' are not supported (message, function_call, function_call_output, "
                       "reasoning)",
                       p, type);
    if (!ITEMS[k].read(it, p, st, e)) return false;
    if (st->added && st->reasoning.p) {
        json_object_set_new(st->added, "reasoning_content", json_string(st->reasoning.p));
        cn_buf_free(&st->reasoning);
    }
    return true;
}

static bool map_input(json_t *input, json_t *instructions, json_t *out, oai_error *e) {
    if (instructions && !json_is_null(instructions)) {
        if (!json_is_string(instructions)) return val_bad(e, "instructions", "'%s' must be a string", "instructions");
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "system", "content", instructions));
    }
    if (!input || json_is_null(input)) return val_bad(e, "input", "'%s' is required", "input");
    if (json_is_string(input)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", "user", "content", input));
        return true;
    }
    if (!json_is_array(input) || !json_array_size(input))
        return val_bad(e, "input", "'%s' must be a string or a non-empty array of items", "input");
    if (json_array_size(input) > OAI_MAX_MESSAGES) return val_bad(e, "input", "at most %d items", OAI_MAX_MESSAGES);
    input_state st = {.out = out, .calls = json_object()};
    bool ok = st.calls ? true : val_oom(e);
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        if (!ok) break;
        char p[64];
        snprintf(p, sizeof p, "input[%zu]", i);
        ok = map_item(it, p, &st, e);
    }
    cn_buf_free(&st.reasoning);
    json_decref(st.calls);
    return ok;
}

/* ---- tools, tool_choice, text ---- */

static bool map_tools(json_t *tools, json_t *out, oai_error *e) {
    if (!json_is_array(tools)) return val_bad(e, "tools", "'%s' must be an array of function tools", "tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t) || strcmp(val_str(t, "type"), "function"))
            return oai_fail(e, 400, "invalid_request_error", p, NULL,
                            "'%s': only function tools ({\"type\": \"function\", \"name\", \"parameters\"}) are "
                            "supported, not '%.60s'",
                            p, json_is_object(t) ? val_str(t, "type") : "?");
        static const char *const keys[] = {"type", "name", "description", "parameters", "strict"};
        if (!val_only_keys(t, p, keys, ARRAY_LEN(keys), e)) return false;
        json_t *strict = json_object_get(t, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
            snprintf(p, sizeof p, "tools[%zu].strict", i);
            return val_bad(e, p, "'%s' must be a boolean (the arguments always follow the parameters)", p);
        }
        json_t *fn = json_pack("{s:O*,s:O*,s:O*}", "name", json_object_get(t, "name"), "description",
                               json_object_get(t, "description"), "parameters", json_object_get(t, "parameters"));
        if (!fn) return val_oom(e);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return true;
}

static bool map_tool_choice(json_t *tc, json_t *out, oai_error *e) {
    if (json_is_string(tc)) {
        json_object_set(out, "tool_choice", tc); /* none, auto, required: oai_parse checks */
        return true;
    }
    if (json_is_object(tc) && !strcmp(val_str(tc, "type"), "function") && json_is_string(json_object_get(tc, "name"))) {
        static const char *const keys[] = {"type", "name"};
        if (!val_only_keys(tc, "tool_choice", keys, ARRAY_LEN(keys), e)) return false;
        json_object_set_new(
            out, "tool_choice",
            json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", json_object_get(tc, "name")));
        return true;
    }
    return val_bad(e, "tool_choice",
                   "'%s' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}",
                   "tool_choice");
}

/* text.format into response_format. */
static bool map_text(json_t *text, json_t *out, oai_error *e) {
    if (!json_is_object(text)) return val_bad(e, "text", "'%s' must be an object {\"format\": {...}}", "text");
    static const char *const keys[] = {"format"};
    if (!val_only_keys(text, "text", keys, ARRAY_LEN(keys), e)) return false;
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return true;
    const char *t = val_str(f, "type");
    if (!json_is_object(f)) return val_bad(e, "text.format", "'%s' must be an object", "text.format");
    if (!strcmp(t, "json_schema")) {
        static const char *const fk[] = {"type", "name", "schema", "strict", "description"};
        if (!val_only_keys(f, "text.format", fk, ARRAY_LEN(fk), e)) return false;
        json_t *js = json_deep_copy(f);
        if (!js) return val_oom(e);
        json_object_del(js, "type");
        json_object_set_new(out, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    } else {
        json_object_set(out, "response_format", f); /* text, json_object: oai_parse checks */
    }
    return true;
}

/* Fields that ask the server to keep state, or for features it lacks: refused unless
 * absent or at their neutral value. */
static bool refuse_state(json_t *body, oai_error *e) {
    json_t *v;
    if ((v = json_object_get(body, "previous_response_id")) && !json_is_null(v))
        return val_bad(e, "previous_response_id",
                       "'%s' is not supported: this server is stateless and stores no response; send the whole "
                       "conversation as 'input' items",
                       "previous_response_id");
    if ((v = json_object_get(body, "conversation")) && !json_is_null(v))
        return val_bad(e, "conversation", "'%s' is not supported: this server is stateless (send 'input' items)",
                       "conversation");
    if ((v = json_object_get(body, "background")) && !json_is_null(v) && !json_is_false(v))
        return val_bad(e, "background", "'%s' is not supported: a response is answered while the request waits",
                       "background");
    if ((v = json_object_get(body, "store")) && !json_is_null(v) && !json_is_boolean(v))
        return val_bad(e, "store", "'%s' must be a boolean", "store");
    if ((v = json_object_get(body, "include")) && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
        return val_bad(e, "include", "'%s' is not supported (only [] is accepted)", "include");
    if ((v = json_object_get(body, "truncation")) && !json_is_null(v) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return val_bad(e, "truncation",
                       "'%s' must be \"disabled\": a conversation longer than the context gets a 400, nothing is cut",
                       "truncation");
    if ((v = json_object_get(body, "reasoning")) && !json_is_null(v))
        return val_bad(e, "reasoning",
                       "'%s' is not supported: a model that thinks does so as its chat template says, and its thinking "
                       "comes back as a reasoning item",
                       "reasoning");
    if ((v = json_object_get(body, "metadata")) && !json_is_null(v) && !json_is_object(v))
        return val_bad(e, "metadata", "'%s' must be an object of strings", "metadata");
    static const char *const strs[] = {"user", "safety_identifier", "prompt_cache_key"};
    for (size_t i = 0; i < ARRAY_LEN(strs); i++)
        if ((v = json_object_get(body, strs[i])) && !json_is_null(v) && !json_is_string(v))
            return val_bad(e, strs[i], "'%s' must be a string", strs[i]);
    return true;
}

bool resp_parse(const oai_ctx *c, json_t *body, oai_request *r, api_request *ar, oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(ar, 0, sizeof *ar);
    ar->kind = API_RESPONSES;
    if (!json_is_object(body)) return val_bad(e, "body", "the %s must be a JSON object", "body");
    static const char *const keys[] = {"model",
                                       "input",
                                       "instructions",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "max_output_tokens",
                                       "temperature",
                                       "top_p",
                                       "stream",
                                       "store",
                                       "previous_response_id",
                                       "conversation",
                                       "background",
                                       "include",
                                       "truncation",
                                       "reasoning",
                                       "metadata",
                                       "user",
                                       "safety_identifier",
                                       "prompt_cache_key",
                                       "text"};
    if (!val_only_keys(body, "", keys, ARRAY_LEN(keys), e) || !refuse_state(body, e)) return false;
    json_t *out = json_object();
    if (!out) return val_oom(e);
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls"};
    for (size_t i = 0; i < ARRAY_LEN(same); i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v) json_object_set(out, same[i], v);
    }
    json_t *mt = json_object_get(body, "max_output_tokens");
    if (mt) json_object_set(out, "max_tokens", mt);
    json_t *msgs = json_array();
    bool ok = msgs ? map_input(json_object_get(body, "input"), json_object_get(body, "instructions"), msgs, e)
                   : val_oom(e);
    json_object_set_new(out, "messages", msgs ? msgs : json_null());
    json_t *tools = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice"),
           *text = json_object_get(body, "text");
    if (ok && tools && !json_is_null(tools)) {
        json_t *ot = json_array();
        ok = ot ? map_tools(tools, ot, e) : val_oom(e);
        json_object_set_new(out, "tools", ot ? ot : json_null());
    }
    if (ok && tc && !json_is_null(tc)) ok = map_tool_choice(tc, out, e);
    if (ok && text && !json_is_null(text)) ok = map_text(text, out, e);
    if (ok) ok = oai_parse_as(c, &RESP_API, out, r, e);
    json_decref(out);
    if (!ok) return false;
    if (json_is_integer(mt)) ar->max_tokens = json_integer_value(mt);
    /* what the response object repeats */
    json_t *md = json_object_get(body, "metadata"), *ins = json_object_get(body, "instructions");
    json_t *user = json_object_get(body, "user");
    ar->echo = json_object();
    json_t *x = ar->echo;
    json_object_set(x, "instructions", ins ? ins : json_null());
    json_object_set_new(x, "tools", json_is_array(tools) ? json_incref(tools) : json_array());
    json_object_set_new(x, "tool_choice", tc && !json_is_null(tc) ? json_incref(tc) : json_string("auto"));
    json_object_set_new(x, "parallel_tool_calls", json_boolean(r->parallel_tool_calls));
    json_object_set_new(x, "temperature", json_real(r->gen.sampling.temperature));
    json_object_set_new(x, "top_p", json_real(r->gen.sampling.top_p));
    json_object_set(x, "max_output_tokens", mt ? mt : json_null());
    json_object_set_new(x, "metadata", md && !json_is_null(md) ? json_incref(md) : json_object());
    json_object_set_new(
        x, "text", text && !json_is_null(text) ? json_incref(text) : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(x, "truncation", json_string("disabled"));
    json_object_set_new(x, "previous_response_id", json_null());
    json_object_set_new(x, "reasoning", json_null());
    json_object_set(x, "user", user ? user : json_null());
    if (!ar->echo) return val_oom(e);
    return true;
}

/* ---- the response and its stream ---- */

/* "msg_<hex>_<i>" / "rs_<hex>_<i>" from the response id; a call's "fc_" + its id's letters. */
static void item_id(const api_meta *m, const api_item *it, int32_t i, char out[64]) {
    const char *hex = !strncmp(m->id, "resp_", 5) ? m->id + 5 : m->id;
    if (it->kind == API_ITEM_CALL)
        snprintf(out, 64, "fc_%s", !strncmp(it->call_id, "call_", 5) ? it->call_id + 5 : it->call_id);
    else snprintf(out, 64, "%s_%.40s_%d", it->kind == API_ITEM_TEXT ? "msg" : "rs", hex, (int)i);
}

static const char *item_status(const api_writer *w, const api_meta *m, int32_t i, bool done) {
    if (!done) return "in_progress";
    const api_item *it = &w->items[i];
    if (it->broken || (i == w->n_items - 1 && m->finish == CN_FINISH_LENGTH)) return "incomplete";
    return "completed";
}

static json_t *text_part(const api_item *it, bool done) {
    const char *s = done && it->text.p ? it->text.p : "";
    const size_t n = done ? it->text.n : 0;
    if (it->kind == API_ITEM_REASONING) return json_pack("{s:s,s:s%}", "type", "reasoning_text", "text", s, n);
    return json_pack("{s:s,s:s%,s:[]}", "type", "output_text", "text", s, n, "annotations");
}

static json_t *item_json(const api_writer *w, const api_meta *m, int32_t i, bool done) {
    const api_item *it = &w->items[i];
    char id[64];
    item_id(m, it, i, id);
    const char *st = item_status(w, m, i, done);
    switch (it->kind) {
    case API_ITEM_TEXT:
        return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", st, "role", "assistant",
                         "content", done ? json_pack("[o]", text_part(it, true)) : json_array());
    case API_ITEM_REASONING:
        return json_pack("{s:s,s:s,s:[],s:o,s:s}", "type", "reasoning", "id", id, "summary", "content",
                         done ? json_pack("[o]", text_part(it, true)) : json_array(), "status", st);
    default:
        return json_pack("{s:s,s:s,s:s,s:s,s:s%,s:s}", "type", "function_call", "id", id, "call_id", it->call_id,
                         "name", it->name, "arguments", done && it->text.p ? it->text.p : "", done ? it->text.n : 0,
                         "status", st);
    }
}

/* Tokens of the reasoning items (the usage's reasoning_tokens): their text tokenized. */
static int32_t reasoning_tokens(const api_writer *w, const api_meta *m) {
    int32_t n = 0;
    for (int32_t i = 0; m->tok && i < w->n_items; i++) {
        if (w->items[i].kind != API_ITEM_REASONING || !w->items[i].text.n) continue;
        int32_t *ids = NULL;
        size_t cnt = 0;
        cn_error err = {0};
        if (cn_tokenize_alloc(m->tok, w->items[i].text.p, w->items[i].text.n, false, false, &ids, &cnt, &err) ==
            CN_STATUS_OK)
            n += (int32_t)cnt;
        free(ids);
    }
    return n < m->n_generated ? n : m->n_generated;
}

static json_t *response_json(const api_writer *w, const api_meta *m, bool done) {
    const char *status = !done ? "in_progress" : m->finish == CN_FINISH_LENGTH ? "incomplete" : "completed";
    json_t *out = json_array();
    for (int32_t i = 0; done && i < w->n_items; i++) json_array_append_new(out, item_json(w, m, i, true));
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:n}", "id", m->id, "object", "response", "created_at",
                          (json_int_t)m->created, "status", status, "model", m->model, "output", out, "error");
    if (!r) return NULL;
    json_object_update(r, w->ar->echo);
    json_object_set_new(r, "incomplete_details",
                        !strcmp(status, "incomplete") ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                      : json_null());
    if (done)
        json_object_set_new(r, "usage",
                            json_pack("{s:i,s:{s:i,s:i},s:i,s:{s:i},s:i}", "input_tokens", m->n_prompt,
                                      "input_tokens_details", "cached_tokens", m->n_cached, "cache_write_tokens", 0,
                                      "output_tokens", m->n_generated, "output_tokens_details", "reasoning_tokens",
                                      reasoning_tokens(w, m), "total_tokens", m->n_prompt + m->n_generated));
    else json_object_set_new(r, "usage", json_null());
    return r;
}

/* Appends event ev with the next sequence_number. */
static void emit(api_writer *w, json_t *events, json_t *ev) {
    if (ev) json_object_set_new(ev, "sequence_number", json_integer(w->seq++));
    api_event(w, events, ev);
}

void resp_open(api_writer *w, const api_meta *m, json_t *events) {
    emit(w, events, json_pack("{s:s,s:o}", "type", "response.created", "response", response_json(w, m, false)));
    emit(w, events, json_pack("{s:s,s:o}", "type", "response.in_progress", "response", response_json(w, m, false)));
}

void resp_item(api_writer *w, const api_meta *m, api_item_ev ev, int32_t i, const char *text, size_t n,
               json_t *events) {
    if (!events) return;
    const api_item *it = &w->items[i];
    char id[64];
    item_id(m, it, i, id);
    const bool call = it->kind == API_ITEM_CALL, reasoning = it->kind == API_ITEM_REASONING;
    if (ev == API_ITEM_BEGIN) {
        emit(w, events,
             json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index", i, "item",
                       item_json(w, m, i, false)));
        if (!call)
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:i,s:o}", "type", "response.content_part.added", "item_id", id,
                           "output_index", i, "content_index", 0, "part", text_part(it, false)));
    } else if (ev == API_ITEM_GROW) {
        if (call)
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:s%}", "type", "response.function_call_arguments.delta", "item_id", id,
                           "output_index", i, "delta", text, n));
        else if (reasoning)
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:i,s:s%}", "type", "response.reasoning_text.delta", "item_id", id,
                           "output_index", i, "content_index", 0, "delta", text, n));
        else
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:i,s:s%,s:[]}", "type", "response.output_text.delta", "item_id", id,
                           "output_index", i, "content_index", 0, "delta", text, n, "logprobs"));
    } else {
        const char *all = it->text.p ? it->text.p : "";
        if (call) {
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:s,s:s%}", "type", "response.function_call_arguments.done", "item_id", id,
                           "output_index", i, "name", it->name, "arguments", all, it->text.n));
        } else {
            json_t *done = reasoning
                               ? json_pack("{s:s,s:s,s:i,s:i,s:s%}", "type", "response.reasoning_text.done", "item_id",
                                           id, "output_index", i, "content_index", 0, "text", all, it->text.n)
                               : json_pack("{s:s,s:s,s:i,s:i,s:s%,s:[]}", "type", "response.output_text.done",
                                           "item_id", id, "output_index", i, "content_index", 0, "text", all,
                                           it->text.n, "logprobs");
            emit(w, events, done);
            emit(w, events,
                 json_pack("{s:s,s:s,s:i,s:i,s:o}", "type", "response.content_part.done", "item_id", id, "output_index",
                           i, "content_index", 0, "part", text_part(it, true)));
        }
        emit(w, events,
             json_pack("{s:s,s:i,s:o}", "type", "response.output_item.done", "output_index", i, "item",
                       item_json(w, m, i, true)));
    }
}

void resp_close(api_writer *w, const api_meta *m, json_t *events) {
    if (!events || m->finish == CN_FINISH_CANCELLED) return; /* the stream ends with an error event instead */
    json_t *r = response_json(w, m, true);
    emit(w, events,
         json_pack("{s:s,s:o}", "type", m->finish == CN_FINISH_LENGTH ? "response.incomplete" : "response.completed",
                   "response", r));
}

json_t *resp_response(api_writer *w, const api_meta *m) { return response_json(w, m, true); }
