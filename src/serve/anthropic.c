/* anthropic.c — Anthropic's Messages API over the OpenAI mapping.
 *
 * In: system (a string or text blocks), messages of text, tool_use (assistant),
 * tool_result (user) and thinking blocks, tools {name, description, input_schema},
 * tool_choice {auto, any, tool, none} (disable_parallel_tool_use), stop_sequences,
 * max_tokens (required, as Anthropic requires it), temperature, top_p, top_k, stream,
 * thinking (the template's enable_thinking), metadata (ignored) become an OpenAI chat
 * body that oai_parse checks and renders. A tool_result must answer a tool_use of an
 * earlier message; ids pass through as the client sent them. cache_control on blocks,
 * tools and system blocks is accepted and ignored: the engine's prefix cache reuses a
 * repeated prefix by itself.
 *
 * Out: the message {id, type, role, model, content [thinking, text, tool_use blocks],
 * stop_reason, stop_sequence, usage}, or its stream (message_start, content_block_start,
 * ping, content_block_delta, content_block_stop, message_delta, message_stop). A call
 * made by the model gets the id "toolu_" and the 24 characters of its "call_" id.
 * Pure translation: no sockets, no threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "serve/apis.h"
#include "serve/validate.h"

/* The OpenAI fields Anthropic names otherwise (openai.h: errors are spelled from it). */
static const oai_name ANT_NAMES[] = {
    {"stop", "stop_sequences"},
    {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
    {"chat_template_kwargs", "thinking"},
    {"response_format", "output_config.format"},
    {"response_format.json_schema", "output_config.format"},
    {"tools[].function", "tools[]"},
    {"tools[].function.parameters", "tools[].input_schema"},
};
const oai_dialect ANT_API = {OAI_CHAT, "/v1/messages", ANT_NAMES, ARRAY_LEN(ANT_NAMES)};

/* The keys a text block may have. */
static const char *const TEXT_KEYS[] = {"type", "text", "cache_control", "citations"};

/* text blocks ({"type": "text", "text"}) or a string, joined by sep, into *out. */
static bool text_of(json_t *ct, const char *param, const char *sep, char **out, oai_error *e) {
    *out = NULL;
    if (json_is_string(ct)) {
        *out = strndup(json_string_value(ct), json_string_length(ct));
        return *out ? true : val_oom(e);
    }
    if (!json_is_array(ct)) return val_bad(e, param, "'%s' must be a string or an array of text blocks", param);
    size_t i;
    json_t *b;
    json_array_foreach(ct, i, b) {
        char p[96];
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        if (!json_is_object(b) || strcmp(val_str(b, "type"), "text") || !json_is_string(json_object_get(b, "text")))
            return val_bad(e, p, "'%s' must be a text block {\"type\": \"text\", \"text\": ...}", p);
        if (!val_only_keys(b, p, TEXT_KEYS, ARRAY_LEN(TEXT_KEYS), e)) return false;
    }
    cn_buf s = {0};
    json_array_foreach(ct, i, b) {
        json_t *t = json_object_get(b, "text");
        if (i) cn_buf_puts(&s, sep);
        cn_buf_put(&s, json_string_value(t), json_string_length(t));
    }
    *out = cn_buf_take(&s, NULL);
    return *out ? true : val_oom(e);
}

/* ---- messages ---- */

/* The string `key` of a text or thinking block b (at p, its keys from keys[]) appended to *to. */
static bool add_block_text(json_t *b, const char *p, const char *key, const char *const *keys, size_t n_keys,
                           cn_buf *to, oai_error *e) {
    json_t *x = json_object_get(b, key);
    if (!val_only_keys(b, p, keys, n_keys, e)) return false;
    if (!json_is_string(x)) return val_bad(e, p, "'%s.%s' must be a string", p, key);
    return cn_buf_put(to, json_string_value(x), json_string_length(x)) || val_oom(e);
}

/* A tool_use block b (at p) appended to calls as an OpenAI tool call; its id into seen. */
static bool add_tool_use(json_t *b, const char *p, json_t *seen, json_t *calls, oai_error *e) {
    static const char *const keys[] = {"type", "id", "name", "input", "cache_control", "caller"};
    json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
    if (!val_only_keys(b, p, keys, ARRAY_LEN(keys), e)) return false;
    if (!json_is_string(id) || !json_string_length(id) || !json_is_string(name) || !json_is_object(input))
        return val_bad(e, p, "'%s' must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": {...}}", p);
    if (json_object_get(seen, json_string_value(id)))
        return val_bad(e, p, "'%s': the tool_use id '%.64s' is used twice", p, json_string_value(id));
    char *args = json_dumps(input, JSON_COMPACT);
    if (!args) return val_oom(e);
    json_object_set_new(seen, json_string_value(id), json_true());
    json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name",
                                           name, "arguments", args));
    free(args);
    return true;
}

/* One assistant message of blocks: text, thinking, tool_use. */
static bool assistant_blocks(json_t *blocks, size_t i, json_t *seen, json_t *out, oai_error *e) {
    static const char *const thinking_keys[] = {"type", "thinking", "signature", "cache_control"};
    cn_buf text = {0}, thinking = {0};
    json_t *calls = json_array();
    bool ok = calls ? true : val_oom(e);
    size_t j;
    json_t *b;
    json_array_foreach(blocks, j, b) {
        if (!ok) break;
        char p[96];
        snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, j);
        const char *t = val_str(b, "type");
        if (!json_is_object(b)) ok = val_bad(e, p, "'%s' must be a content block", p);
        else if (!strcmp(t, "text")) ok = add_block_text(b, p, "text", TEXT_KEYS, ARRAY_LEN(TEXT_KEYS), &text, e);
        else if (!strcmp(t, "thinking"))
            ok = add_block_text(b, p, "thinking", thinking_keys, ARRAY_LEN(thinking_keys), &thinking, e);
        else if (!strcmp(t, "tool_use")) ok = add_tool_use(b, p, seen, calls, e);
        else if (!strcmp(t, "redacted_thinking"))
            ok = val_bad(e, p, "'%s': redacted_thinking blocks cannot be read here (they come from another model)", p);
        else
            ok = val_bad(e, p, "'%s': an assistant message may hold text, thinking and tool_use blocks, not '%.40s'", p,
                         t);
    }
    if (ok) {
        json_t *m = json_pack("{s:s}", "role", "assistant");
        if (json_array_size(calls)) {
            json_object_set_new(m, "content", text.p ? json_string(text.p) : json_null());
            json_object_set(m, "tool_calls", calls);
        } else {
            json_object_set_new(m, "content", json_string(text.p ? text.p : ""));
        }
        if (thinking.p) json_object_set_new(m, "reasoning_content", json_string(thinking.p));
        json_array_append_new(out, m);
    }
    cn_buf_free(&text);
    cn_buf_free(&thinking);
    json_decref(calls);
    return ok;
}

/* Text blocks gathered so far of a user message, as one user message. */
static bool flush_user(json_t *parts, json_t *out, oai_error *e) {
    if (!json_array_size(parts)) return true;
    json_t *m = json_pack("{s:s,s:o}", "role", "user", "content", json_copy(parts));
    if (!m) return val_oom(e);
    json_array_append_new(out, m);
    json_array_clear(parts);
    return true;
}

/* A tool_result block b (at p) as a tool message, after the user's text so far (parts). */
static bool add_tool_result(json_t *b, const char *p, json_t *seen, json_t *parts, json_t *out, oai_error *e) {
    static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", "cache_control"};
    json_t *id = json_object_get(b, "tool_use_id"), *ct = json_object_get(b, "content");
    json_t *err = json_object_get(b, "is_error");
    char pid[112], pc[112];
    snprintf(pid, sizeof pid, "%s.tool_use_id", p);
    snprintf(pc, sizeof pc, "%s.content", p);
    if (!val_only_keys(b, p, keys, ARRAY_LEN(keys), e)) return false;
    if (!json_is_string(id)) return val_bad(e, pid, "'%s' must be a string", pid);
    if (!json_object_get(seen, json_string_value(id)))
        return val_bad(e, pid, "'%s' ('%.64s') answers no tool_use block of an earlier assistant message", pid,
                       json_string_value(id));
    if (err && !json_is_null(err) && !json_is_boolean(err)) return val_bad(e, p, "'%s.is_error' must be a boolean", p);
    char *text = NULL;
    if (ct && !json_is_null(ct) && !text_of(ct, pc, "\n", &text, e)) return false;
    bool ok = flush_user(parts, out, e);
    /* the tool message has no error flag: the text says it */
    cn_buf s = {0};
    if (ok && !cn_buf_printf(&s, "%s%s", json_is_true(err) ? "Error: " : "", text ? text : "")) ok = val_oom(e);
    if (ok) json_array_append_new(out, json_pack("{s:s,s:O,s:s}", "role", "tool", "tool_call_id", id, "content", s.p));
    cn_buf_free(&s);
    free(text);
    return ok;
}

/* One user message of blocks: text and tool_result (each result a tool message). */
static bool user_blocks(json_t *blocks, size_t i, json_t *seen, json_t *out, oai_error *e) {
    json_t *parts = json_array();
    if (!parts) return val_oom(e);
    bool ok = true;
    size_t j;
    json_t *b;
    json_array_foreach(blocks, j, b) {
        if (!ok) break;
        char p[96];
        snprintf(p, sizeof p, "messages[%zu].content[%zu]", i, j);
        const char *t = val_str(b, "type");
        json_t *x = json_object_get(b, "text");
        if (!json_is_object(b)) {
            ok = val_bad(e, p, "'%s' must be a content block", p);
        } else if (!strcmp(t, "text")) {
            ok = val_only_keys(b, p, TEXT_KEYS, ARRAY_LEN(TEXT_KEYS), e) &&
                 (json_is_string(x) || val_bad(e, p, "'%s.text' must be a string", p));
            if (ok) json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", x));
        } else if (!strcmp(t, "tool_result")) {
            ok = add_tool_result(b, p, seen, parts, out, e);
        } else {
            ok = oai_fail(
                e, 400, "invalid_request_error", p, "unsupported_content",
                "'%s': a user message may hold text and tool_result blocks, not '%.40s' (this server reads text "
                "only)",
                p, t);
        }
    }
    if (ok) ok = flush_user(parts, out, e);
    json_decref(parts);
    return ok;
}

static bool map_messages(json_t *msgs, json_t *system, json_t *out, oai_error *e) {
    if (system && !json_is_null(system)) {
        char *s = NULL;
        if (!text_of(system, "system", "\n", &s, e)) return false;
        json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", s));
        free(s);
    }
    if (!msgs) return val_bad(e, "messages", "'%s' is required", "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return val_bad(e, "messages", "'%s' must be a non-empty array of messages", "messages");
    if (json_array_size(msgs) > OAI_MAX_MESSAGES)
        return oai_fail(e, 400, "invalid_request_error", "messages", NULL, "at most %d messages", OAI_MAX_MESSAGES);
    json_t *seen = json_object(); /* tool_use ids so far */
    if (!seen) return val_oom(e);
    bool ok = true;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char p[64];
        snprintf(p, sizeof p, "messages[%zu]", i);
        static const char *const keys[] = {"role", "content"};
        if (!json_is_object(m)) {
            ok = val_bad(e, p, "'%s' must be an object {\"role\", \"content\"}", p);
            break;
        }
        if (!(ok = val_only_keys(m, p, keys, ARRAY_LEN(keys), e))) break;
        json_t *role = json_object_get(m, "role"), *ct = json_object_get(m, "content");
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        const bool user = !strcmp(r, "user"), asst = !strcmp(r, "assistant");
        snprintf(p, sizeof p, "messages[%zu].role", i);
        if (!user && !asst) {
            ok = val_bad(e, p, "'%s' must be \"user\" or \"assistant\" (the system prompt is the top-level 'system')",
                         p);
            break;
        }
        snprintf(p, sizeof p, "messages[%zu].content", i);
        if (json_is_string(ct)) {
            json_array_append_new(out, json_pack("{s:s,s:O}", "role", r, "content", ct));
        } else if (!json_is_array(ct) || !json_array_size(ct)) {
            ok = val_bad(e, p, "'%s' must be a string or a non-empty array of content blocks", p);
        } else {
            ok = asst ? assistant_blocks(ct, i, seen, out, e) : user_blocks(ct, i, seen, out, e);
        }
        if (!ok) break;
        if (asst && i + 1 == json_array_size(msgs)) {
            snprintf(p, sizeof p, "messages[%zu]", i);
            ok = val_bad(e, p,
                         "'%s': a final assistant message (a prefill for the reply to continue) is not supported: "
                         "the last message must be the user's",
                         p);
        }
    }
    json_decref(seen);
    return ok;
}

/* ---- tools ---- */

static bool map_tools(json_t *tools, json_t *out, oai_error *e) {
    if (!json_is_array(tools))
        return val_bad(e, "tools", "'%s' must be an array of {\"name\", \"input_schema\"}", "tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return val_bad(e, p, "'%s' must be {\"name\", \"description\", \"input_schema\"}", p);
        json_t *type = json_object_get(t, "type");
        if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "custom")))
            return oai_fail(
                e, 400, "invalid_request_error", p, NULL,
                "'%s': only client tools ({\"name\", \"description\", \"input_schema\"}) are supported, not "
                "'%.60s'",
                p, json_is_string(type) ? json_string_value(type) : "?");
        /* strict: the input always follows the schema; eager_input_streaming: it always streams */
        static const char *const keys[] = {"type",          "name",   "description",          "input_schema",
                                           "cache_control", "strict", "eager_input_streaming"};
        if (!val_only_keys(t, p, keys, ARRAY_LEN(keys), e)) return false;
        static const char *const flags[] = {"strict", "eager_input_streaming"};
        for (size_t k = 0; k < ARRAY_LEN(flags); k++) {
            json_t *f = json_object_get(t, flags[k]);
            if (f && !json_is_null(f) && !json_is_boolean(f)) {
                snprintf(p, sizeof p, "tools[%zu].%s", i, flags[k]);
                return val_bad(e, p, "'%s' must be a boolean", p);
            }
        }
        json_t *schema = json_object_get(t, "input_schema");
        if (!json_is_object(schema)) {
            snprintf(p, sizeof p, "tools[%zu].input_schema", i);
            return val_bad(e, p, "'%s' is required: a JSON Schema object", p);
        }
        json_t *fn = json_pack("{s:O*,s:O*,s:O}", "name", json_object_get(t, "name"), "description",
                               json_object_get(t, "description"), "parameters", schema);
        if (!fn) return val_oom(e);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return true;
}

/* tool_choice into the OpenAI body (tool_choice, parallel_tool_calls). */
static bool map_tool_choice(json_t *tc, json_t *out, oai_error *e) {
    static const char *const F = "tool_choice";
    const char *type = json_is_string(tc) ? json_string_value(tc) : val_str(tc, "type");
    if (json_is_object(tc)) {
        static const char *const keys[] = {"type", "name", "disable_parallel_tool_use"};
        if (!val_only_keys(tc, F, keys, ARRAY_LEN(keys), e)) return false;
        json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
        if (dp && !json_is_null(dp)) {
            if (!json_is_boolean(dp))
                return val_bad(e, "tool_choice.disable_parallel_tool_use", "'%s' must be a boolean",
                               "tool_choice.disable_parallel_tool_use");
            json_object_set_new(out, "parallel_tool_calls", json_boolean(!json_is_true(dp)));
        }
    } else if (!json_is_string(tc)) {
        type = "?";
    }
    if (!strcmp(type, "auto")) json_object_set_new(out, F, json_string("auto"));
    else if (!strcmp(type, "any")) json_object_set_new(out, F, json_string("required"));
    else if (!strcmp(type, "none")) json_object_set_new(out, F, json_string("none"));
    else if (!strcmp(type, "tool") && json_is_object(tc)) {
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name)) return val_bad(e, "tool_choice.name", "'%s' must name a tool", "tool_choice.name");
        json_object_set_new(out, F, json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    } else
        return val_bad(e, F,
                       "'%s' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", \"name\": ...} or "
                       "{\"type\": \"none\"}",
                       F);
    return true;
}

/* thinking {"type": "enabled", "budget_tokens"} / {"type": "disabled"}: the template's
 * enable_thinking (templates that think read it; the budget is not enforced, max_tokens
 * bounds the whole reply); {"type": "adaptive"}: as the template decides by default.
 * display "omitted" would need signatures for hidden thinking: refused. */
static bool map_thinking(json_t *th, json_t *out, oai_error *e) {
    static const char *const F = "thinking";
    const char *t = val_str(th, "type");
    static const char *const keys[] = {"type", "budget_tokens", "display"};
    if (!json_is_object(th) || (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
        return val_bad(e, F,
                       "'%s' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} or "
                       "{\"type\": \"disabled\"}",
                       F);
    if (!val_only_keys(th, F, keys, ARRAY_LEN(keys), e)) return false;
    json_t *b = json_object_get(th, "budget_tokens"), *d = json_object_get(th, "display");
    if (b && !json_is_null(b) && (!json_is_integer(b) || json_integer_value(b) < 1))
        return val_bad(e, "thinking.budget_tokens", "'%s' must be a positive integer", "thinking.budget_tokens");
    if (d && !json_is_null(d) && !(json_is_string(d) && !strcmp(json_string_value(d), "summarized")))
        return val_bad(e, "thinking.display", "'%s' must be \"summarized\": the thinking is always shown as it is",
                       "thinking.display");
    if (strcmp(t, "adaptive"))
        json_object_set_new(out, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", !strcmp(t, "enabled")));
    return true;
}

/* output_config: format {"type": "json_schema", "schema"} is structured output
 * (response_format); effort has no effect here (a hint for Anthropic's models). */
static bool map_output_config(json_t *oc, json_t *out, oai_error *e) {
    static const char *const F = "output_config";
    static const char *const keys[] = {"effort", "format"};
    if (!json_is_object(oc)) return val_bad(e, F, "'%s' must be an object {\"format\", \"effort\"}", F);
    if (!val_only_keys(oc, F, keys, ARRAY_LEN(keys), e)) return false;
    json_t *ef = json_object_get(oc, "effort"), *f = json_object_get(oc, "format");
    if (ef && !json_is_null(ef) && !json_is_string(ef))
        return val_bad(e, "output_config.effort", "'%s' must be a string", "output_config.effort");
    if (!f || json_is_null(f)) return true;
    static const char *const fk[] = {"type", "schema"};
    if (!json_is_object(f) || strcmp(val_str(f, "type"), "json_schema") ||
        !json_is_object(json_object_get(f, "schema")))
        return val_bad(e, "output_config.format", "'%s' must be {\"type\": \"json_schema\", \"schema\": {...}}",
                       "output_config.format");
    if (!val_only_keys(f, "output_config.format", fk, ARRAY_LEN(fk), e)) return false;
    json_object_set_new(out, "response_format",
                        json_pack("{s:s,s:{s:s,s:O}}", "type", "json_schema", "json_schema", "name", "output", "schema",
                                  json_object_get(f, "schema")));
    return true;
}

bool ant_parse(const oai_ctx *c, json_t *body, bool count_only, oai_request *r, api_request *ar, oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(ar, 0, sizeof *ar);
    ar->kind = API_ANTHROPIC;
    if (!json_is_object(body)) return val_bad(e, "body", "the %s must be a JSON object", "body");
    /* cache_control (here and on blocks, tools, system blocks): a caching hint, no effect
     * needed: the engine's prefix cache reuses a repeated prefix by itself */
    static const char *const keys[] = {"model",       "messages",    "system",   "max_tokens",    "stop_sequences",
                                       "temperature", "top_p",       "top_k",    "stream",        "metadata",
                                       "tools",       "tool_choice", "thinking", "output_config", "cache_control"};
    if (!val_only_keys(body, "", keys, ARRAY_LEN(keys), e)) return false;
    json_t *out = json_object();
    if (!out) return val_oom(e);
    bool ok = true;
    /* the values oai_parse checks as they are */
    static const char *const same[] = {"model", "temperature", "top_p", "top_k", "max_tokens", "stream"};
    for (size_t i = 0; i < ARRAY_LEN(same); i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v && !(count_only && !strcmp(same[i], "stream"))) json_object_set(out, same[i], v);
    }
    json_t *mt = json_object_get(body, "max_tokens");
    if (!count_only && (!mt || json_is_null(mt)))
        ok = val_bad(e, "max_tokens", "'%s' is required (the most tokens the reply may have)", "max_tokens");
    if (count_only) json_object_del(out, "max_tokens");
    json_t *md = json_object_get(body, "metadata");
    if (ok && md && !json_is_null(md) && !json_is_object(md))
        ok = val_bad(e, "metadata", "'%s' must be an object", "metadata");
    json_t *ss = json_object_get(body, "stop_sequences");
    if (ok && ss && !json_is_null(ss)) {
        if (!json_is_array(ss)) ok = val_bad(e, "stop_sequences", "'%s' must be an array of strings", "stop_sequences");
        else json_object_set(out, "stop", ss);
    }
    json_t *msgs = json_array();
    if (ok && !msgs) ok = val_oom(e);
    if (ok) ok = map_messages(json_object_get(body, "messages"), json_object_get(body, "system"), msgs, e);
    json_object_set_new(out, "messages", msgs ? msgs : json_null());
    json_t *tools = json_object_get(body, "tools");
    if (ok && tools && !json_is_null(tools)) {
        json_t *ot = json_array();
        ok = ot ? map_tools(tools, ot, e) : val_oom(e);
        json_object_set_new(out, "tools", ot ? ot : json_null());
    }
    json_t *tc = json_object_get(body, "tool_choice");
    if (ok && tc && !json_is_null(tc)) ok = map_tool_choice(tc, out, e);
    json_t *th = json_object_get(body, "thinking"), *oc = json_object_get(body, "output_config");
    if (ok && th && !json_is_null(th)) ok = map_thinking(th, out, e);
    if (ok && oc && !json_is_null(oc)) ok = map_output_config(oc, out, e);
    if (ok) ok = oai_parse_as(c, &ANT_API, out, r, e);
    json_decref(out);
    if (!ok) return false;
    for (size_t i = 0; json_is_array(ss) && i < json_array_size(ss); i++) {
        json_t *x = json_array_get(ss, i);
        ar->stops[i] = strndup(json_string_value(x), json_string_length(x));
        if (!ar->stops[i]) return val_oom(e);
        ar->n_stops++;
    }
    if (json_is_integer(mt)) ar->max_tokens = json_integer_value(mt);
    return true;
}

json_t *ant_error_json(const oai_error *e) {
    const int s = e->http_status;
    const char *type = s == 400 || s == 405 ? "invalid_request_error"
                       : s == 401           ? "authentication_error"
                       : s == 403           ? "permission_error"
                       : s == 404           ? "not_found_error"
                       : s == 413           ? "request_too_large"
                       : s == 429           ? "rate_limit_error"
                       : s == 503           ? "overloaded_error"
                                            : "api_error";
    json_t *m = oai_error_json(e); /* its message made valid UTF-8 */
    json_t *msg = json_object_get(json_object_get(m, "error"), "message");
    json_t *out = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message",
                            json_is_string(msg) ? json_string_value(msg) : "error");
    json_decref(m);
    return out;
}

int32_t ant_stop_match(const api_request *ar, const char *tok_text, size_t n) {
    int32_t best = -1;
    size_t at = n;
    for (int32_t i = 0; i < ar->n_stops; i++) {
        const char *p = memmem(tok_text, n, ar->stops[i], strlen(ar->stops[i]));
        if (p && ((size_t)(p - tok_text) < at ||
                  ((size_t)(p - tok_text) == at && best >= 0 && strlen(ar->stops[i]) > strlen(ar->stops[best])))) {
            at = (size_t)(p - tok_text);
            best = i;
        }
    }
    return best;
}

/* ---- the message and its stream ---- */

static int32_t n_whole_calls(const api_writer *w) {
    int32_t n = 0;
    for (int32_t i = 0; i < w->n_items; i++) n += w->items[i].kind == API_ITEM_CALL && !w->items[i].broken;
    return n;
}

static const char *stop_reason(const api_writer *w, const api_meta *m) {
    if (m->finish == CN_FINISH_LENGTH)
        return w->ar->max_tokens > 0 && m->n_generated < w->ar->max_tokens ? "model_context_window_exceeded"
                                                                           : "max_tokens";
    if (n_whole_calls(w) > 0) return "tool_use";
    if (m->stop_index >= 0) return "stop_sequence";
    return "end_turn";
}

static void tool_id(const api_item *it, char out[40]) {
    snprintf(out, 40, "toolu_%s", !strncmp(it->call_id, "call_", 5) ? it->call_id + 5 : it->call_id);
}

/* A block as the message holds it (done) or as content_block_start opens it. */
static json_t *block_json(const api_item *it, bool done) {
    switch (it->kind) {
    case API_ITEM_TEXT:
        return json_pack("{s:s,s:s%}", "type", "text", "text", done && it->text.p ? it->text.p : "",
                         done ? it->text.n : 0);
    case API_ITEM_REASONING:
        return json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", done && it->text.p ? it->text.p : "",
                         done ? it->text.n : 0, "signature", "");
    default: {
        char id[40];
        tool_id(it, id);
        return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name", it->name, "input",
                         done ? api_call_input(it) : json_object());
    }
    }
}

static json_t *message_json(api_writer *w, const api_meta *m, bool done) {
    json_t *content = json_array();
    for (int32_t i = 0; done && i < w->n_items; i++) json_array_append_new(content, block_json(&w->items[i], true));
    const char *reason = done ? stop_reason(w, m) : NULL;
    const char *seq = done && reason && !strcmp(reason, "stop_sequence") ? w->ar->stops[m->stop_index] : NULL;
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s?,s:s?,s:{s:i,s:i}}", "id", m->id, "type", "message", "role", "assistant",
                     "model", m->model, "content", content, "stop_reason", reason, "stop_sequence", seq, "usage",
                     "input_tokens", m->n_prompt, "output_tokens", done ? m->n_generated : 0);
}

void ant_open(api_writer *w, const api_meta *m, json_t *events) {
    api_event(w, events, json_pack("{s:s,s:o}", "type", "message_start", "message", message_json(w, m, false)));
}

static void ping(api_writer *w, json_t *events) {
    if (w->pinged) return;
    w->pinged = true;
    api_event(w, events, json_pack("{s:s}", "type", "ping"));
}

void ant_item(api_writer *w, const api_meta *m, api_item_ev ev, int32_t i, const char *text, size_t n, json_t *events) {
    (void)m;
    if (!events) return;
    const api_item *it = &w->items[i];
    if (ev == API_ITEM_BEGIN) {
        api_event(w, events,
                  json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", i, "content_block",
                            block_json(it, false)));
        ping(w, events);
    } else if (ev == API_ITEM_GROW) {
        json_t *d = it->kind == API_ITEM_TEXT ? json_pack("{s:s,s:s%}", "type", "text_delta", "text", text, n)
                    : it->kind == API_ITEM_REASONING
                        ? json_pack("{s:s,s:s%}", "type", "thinking_delta", "thinking", text, n)
                        : json_pack("{s:s,s:s%}", "type", "input_json_delta", "partial_json", text, n);
        api_event(w, events, json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", i, "delta", d));
    } else {
        api_event(w, events, json_pack("{s:s,s:i}", "type", "content_block_stop", "index", i));
    }
}

void ant_close(api_writer *w, const api_meta *m, json_t *events) {
    if (!events) return;
    ping(w, events);
    if (m->finish == CN_FINISH_CANCELLED) return; /* the stream ends with an error event instead */
    const char *reason = stop_reason(w, m);
    const char *seq = !strcmp(reason, "stop_sequence") ? w->ar->stops[m->stop_index] : NULL;
    api_event(w, events,
              json_pack("{s:s,s:{s:s,s:s?},s:{s:i,s:i}}", "type", "message_delta", "delta", "stop_reason", reason,
                        "stop_sequence", seq, "usage", "input_tokens", m->n_prompt, "output_tokens", m->n_generated));
    api_event(w, events, json_pack("{s:s}", "type", "message_stop"));
}

json_t *ant_response(api_writer *w, const api_meta *m) { return message_json(w, m, true); }
