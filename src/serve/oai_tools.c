/* oai_tools.c — the chat side of the OpenAI mapping that tools need: `tools`,
 * `tool_choice` and `parallel_tool_calls` in; messages with `tool_calls`, `tool` results
 * and reasoning checked and rendered through the model's template (with the tools in
 * it, or, for a template that renders none, a system note describing them in Hermes'
 * tags, as llama.cpp's generic format does); the calls' grammar (CN_GRAMMAR_TOOLS,
 * through the server's grammar cache); and each reply read back (cn_tool_reader) into
 * content, reasoning_content and tool_calls, or into the deltas of a stream.
 *
 * Pure translation like openai.c: no sockets, no threads. The Anthropic and Responses
 * mappings bring their requests here as OpenAI messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/json_mem.h"
#include "serve/openai.h"

#define OAI_MAX_TOOLS 128

static bool fail400(oai_error *e, const char *param, const char *fmt, const char *a) {
    return oai_fail(e, 400, "invalid_request_error", param, NULL, fmt, a);
}

static bool oom(oai_error *e) { return oai_fail(e, 503, "server_error", NULL, NULL, "out of memory"); }

/* ---- tools and tool_choice ---- */

static bool valid_name(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

bool oai_parse_tools(const oai_ctx *c, json_t *body, oai_request *r, oai_error *e) {
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice");
    json_t *par = json_object_get(body, "parallel_tool_calls");
    r->tool_choice = CN_TOOL_CHOICE_AUTO;
    r->parallel_tool_calls = true;
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par)) return oai_fail(e, 400, "invalid_request_error", "parallel_tool_calls", NULL,
                                                   "'parallel_tool_calls' must be a boolean");
        r->parallel_tool_calls = json_is_true(par);
    }
    bool have = tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0);
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return fail400(e, "tools", "'%s' must be an array of {\"type\": \"function\", \"function\": {...}}", "tools");
    if (have && json_array_size(tools) > OAI_MAX_TOOLS)
        return oai_fail(e, 400, "invalid_request_error", "tools", NULL, "at most %d tools", OAI_MAX_TOOLS);
    size_t i;
    json_t *t;
    if (have) json_array_foreach(tools, i, t) {
            char param[64];
            snprintf(param, sizeof param, "tools[%zu]", i);
            json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
            if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0 ||
                !json_is_object(fn))
                return fail400(e, param, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
            json_t *nm = json_object_get(fn, "name"), *ps = json_object_get(fn, "parameters"),
                   *desc = json_object_get(fn, "description");
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            if (!json_is_string(nm) || !valid_name(json_string_value(nm), json_string_length(nm)))
                return fail400(e, param, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, _, - and .", param);
            for (size_t j = 0; j < i; j++)
                if (json_equal(json_object_get(json_object_get(json_array_get(tools, j), "function"), "name"), nm))
                    return fail400(e, param, "two tools are called '%s'", json_string_value(nm));
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (ps && !json_is_null(ps) && !json_is_object(ps)) return fail400(e, param, "'%s' must be a JSON Schema object", param);
            snprintf(param, sizeof param, "tools[%zu].function.description", i);
            if (desc && !json_is_null(desc) && !json_is_string(desc)) return fail400(e, param, "'%s' must be a string", param);
        }
    if (choice && !json_is_null(choice)) {
        if (json_is_string(choice)) {
            const char *s = json_string_value(choice);
            if (!strcmp(s, "none")) r->tools_none = true;
            else if (!strcmp(s, "required")) r->tool_choice = CN_TOOL_CHOICE_REQUIRED;
            else if (strcmp(s, "auto"))
                return fail400(e, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
        } else {
            json_t *fn = json_object_get(choice, "function"), *nm = json_object_get(fn, "name");
            if (!json_is_object(choice) || !json_is_string(nm))
                return fail400(e, "tool_choice", "'%s' must be \"none\", \"auto\", \"required\" or "
                                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                               "tool_choice");
            bool found = false;
            if (have) json_array_foreach(tools, i, t) found |= json_equal(json_object_get(json_object_get(t, "function"), "name"), nm);
            if (!found) return fail400(e, "tool_choice", "tool_choice names '%.100s', which is not among the tools", json_string_value(nm));
            r->tool_choice = CN_TOOL_CHOICE_NAMED;
            r->tool_name = strdup(json_string_value(nm));
            if (!r->tool_name) return oom(e);
        }
    }
    if (!have) {
        if (r->tool_choice != CN_TOOL_CHOICE_AUTO)
            return fail400(e, "tool_choice", "'%s' needs 'tools'", "tool_choice");
        return true;
    }
    r->tools = json_incref(tools);
    r->tool_format = c->tool_format;
    return true;
}

/* ---- messages ---- */

static bool text_content(json_t *ct, const char *param, bool nullable, oai_error *e) {
    if (!ct || json_is_null(ct)) return nullable ? true : fail400(e, param, "'%s' is required", param);
    if (json_is_string(ct)) return true;
    if (!json_is_array(ct)) return fail400(e, param, "'%s' must be a string or an array of text parts", param);
    size_t j;
    json_t *part;
    json_array_foreach(ct, j, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text))
            return oai_fail(e, 400, "invalid_request_error", param, "unsupported_content",
                            "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported in '%s'", param);
    }
    return true;
}

/* A string of content: the string, or the text parts joined by newlines (vLLM's rule). */
static char *joined(json_t *ct) {
    if (!ct || json_is_null(ct)) return strdup("");
    if (json_is_string(ct)) return strndup(json_string_value(ct), json_string_length(ct));
    size_t total = 1, j;
    json_t *part;
    json_array_foreach(ct, j, part) total += json_string_length(json_object_get(part, "text")) + 1;
    char *s = malloc(total), *w = s;
    if (!s) return NULL;
    json_array_foreach(ct, j, part) {
        json_t *text = json_object_get(part, "text");
        if (j > 0) *w++ = '\n';
        memcpy(w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    *w = 0;
    return s;
}

/* Checks the messages; fills *uses_tools when any holds calls, results or reasoning. */
static bool check_messages(json_t *msgs, bool *uses_tools, oai_error *e) {
    if (!msgs) return fail400(e, "messages", "'%s' is required", "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail400(e, "messages", "'%s' must be a non-empty array of messages", "messages");
    if (json_array_size(msgs) > OAI_MAX_MESSAGES)
        return oai_fail(e, 400, "invalid_request_error", "messages", NULL, "at most %d messages", OAI_MAX_MESSAGES);
    *uses_tools = false;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return fail400(e, param, "'%s' must be an object", param);
        json_t *role = json_object_get(m, "role");
        const char *rs = json_is_string(role) ? json_string_value(role) : "";
        snprintf(param, sizeof param, "messages[%zu].role", i);
        bool sys = !strcmp(rs, "system") || !strcmp(rs, "developer"), user = !strcmp(rs, "user"),
             asst = !strcmp(rs, "assistant"), tool = !strcmp(rs, "tool");
        if (!sys && !user && !asst && !tool)
            return fail400(e, param, "'%s' must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"", param);
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) {
            bool ok = !strcmp(k, "role") || !strcmp(k, "content") || !strcmp(k, "name") ||
                      (asst && (!strcmp(k, "tool_calls") || !strcmp(k, "reasoning_content") || !strcmp(k, "refusal"))) ||
                      (tool && !strcmp(k, "tool_call_id"));
            if (!ok) {
                snprintf(param, sizeof param, "messages[%zu].%.40s", i, k);
                return oai_fail(e, 400, "invalid_request_error", param, "unsupported_parameter",
                                "unsupported message field '%s'", param);
            }
        }
        json_t *calls = json_object_get(m, "tool_calls");
        bool has_calls = json_is_array(calls) && json_array_size(calls) > 0;
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!text_content(json_object_get(m, "content"), param, asst && has_calls, e)) return false;
        if (asst && calls && !json_is_null(calls)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(calls)) return fail400(e, param, "'%s' must be an array", param);
            size_t j;
            json_t *tc;
            json_array_foreach(calls, j, tc) {
                json_t *fn = json_object_get(tc, "function");
                json_t *id = json_object_get(tc, "id"), *nm = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
                snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
                if (!json_is_object(tc) || !json_is_string(id) || !json_is_string(nm) || !(json_is_string(args) || json_is_object(args)))
                    return fail400(e, param, "'%s' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                                   param);
            }
            *uses_tools |= has_calls;
        }
        json_t *rc = json_object_get(m, "reasoning_content");
        if (rc && !json_is_null(rc)) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            if (!json_is_string(rc)) return fail400(e, param, "'%s' must be a string", param);
            *uses_tools = true;
        }
        if (tool) {
            json_t *id = json_object_get(m, "tool_call_id");
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(id)) return fail400(e, param, "'%s' is required for a tool message", param);
            /* it answers a call an earlier assistant message made */
            bool found = false;
            for (size_t p = 0; p < i && !found; p++) {
                json_t *pm = json_array_get(msgs, p), *pc = json_object_get(pm, "tool_calls");
                size_t q;
                json_t *tc;
                if (json_is_array(pc)) json_array_foreach(pc, q, tc) found |= json_equal(json_object_get(tc, "id"), id);
            }
            if (!found)
                return fail400(e, param, "'%s' answers no tool call of an earlier assistant message", param);
            *uses_tools = true;
        }
    }
    return true;
}

/* The messages as the template sees them: developer as system, arguments parsed into
 * objects (as Hugging Face passes them); for a template without tools (GENERIC), calls
 * and results written out in Hermes' tags inside plain turns. */
static json_t *template_messages(json_t *msgs, bool generic) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *c = json_deep_copy(m);
        if (!c || !out) {
            json_decref(c);
            json_decref(out);
            return NULL;
        }
        const char *role = json_string_value(json_object_get(c, "role"));
        if (!strcmp(role, "developer")) json_object_set_new(c, "role", json_string("system"));
        json_t *calls = json_object_get(c, "tool_calls");
        size_t j;
        json_t *tc;
        if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
                json_t *fn = json_object_get(tc, "function"), *args = json_object_get(fn, "arguments");
                if (!json_is_object(tc)) continue;
                if (!json_object_get(tc, "type")) json_object_set_new(tc, "type", json_string("function"));
                if (json_is_string(args)) {
                    json_t *parsed = json_mem_load(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
                    if (parsed) json_object_set_new(fn, "arguments", parsed);
                }
            }
        if (generic) {
            /* plain turns: the template may know no tool role and no calls */
            char *text = joined(json_object_get(c, "content"));
            size_t tl = text ? strlen(text) : 0, cap = tl + 64;
            if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
                    char *a = json_dumps(json_object_get(json_object_get(tc, "function"), "arguments"), JSON_ENCODE_ANY | JSON_COMPACT);
                    cap += 64 + (a ? strlen(a) : 0) + strlen(json_string_value(json_object_get(json_object_get(tc, "function"), "name")));
                    free(a);
                }
            char *s = malloc(cap + 64);
            if (!text || !s) {
                free(text);
                free(s);
                json_decref(c);
                json_decref(out);
                return NULL;
            }
            size_t n = 0;
            if (!strcmp(role, "tool")) n += (size_t)sprintf(s, "<tool_response>\n%s\n</tool_response>", text);
            else n += (size_t)sprintf(s, "%s", text);
            if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
                    json_t *fn = json_object_get(tc, "function");
                    char *a = json_dumps(json_object_get(fn, "arguments"), JSON_ENCODE_ANY | JSON_COMPACT);
                    n += (size_t)sprintf(s + n, "%s<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>", n ? "\n" : "",
                                         json_string_value(json_object_get(fn, "name")), a ? a : "{}");
                    free(a);
                }
            json_t *plain = json_pack("{s:s,s:s}", "role", !strcmp(role, "tool") ? "user" : role, "content", s);
            free(text);
            free(s);
            json_decref(c);
            if (!plain) {
                json_decref(out);
                return NULL;
            }
            c = plain;
        }
        json_array_append_new(out, c);
    }
    return out;
}

/* The system note that describes the tools to a template that renders none. */
static char *generic_note(json_t *tools) {
    static const char head[] =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    static const char tail[] =
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call>";
    size_t cap = sizeof head + sizeof tail, n = 0;
    char **lines = calloc(json_array_size(tools) + 1, sizeof *lines);
    if (!lines) return NULL;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        lines[i] = json_dumps(t, JSON_COMPACT | JSON_ENSURE_ASCII);
        cap += (lines[i] ? strlen(lines[i]) : 0) + 1;
    }
    char *s = malloc(cap);
    if (s) {
        n += (size_t)sprintf(s, "%s", head);
        for (size_t k = 0; k < json_array_size(tools); k++) n += (size_t)sprintf(s + n, "\n%s", lines[k] ? lines[k] : "{}");
        sprintf(s + n, "%s", tail);
    }
    for (size_t k = 0; k < json_array_size(tools); k++) free(lines[k]);
    free(lines);
    return s;
}

bool oai_render_chat(const oai_ctx *c, json_t *msgs, json_t *vars, oai_request *r, char **prompt, size_t *len,
                     oai_error *e) {
    *prompt = NULL;
    bool uses_tools = false;
    if (!c->chat)
        return oai_fail(e, 400, "invalid_request_error", "messages", NULL,
                        "this model has no chat template cinder can render: use /v1/completions "
                        "or start the server with --chat-template NAME");
    if (!check_messages(msgs, &uses_tools, e)) return false;
    json_t *tools = r->tools && !r->tools_none ? r->tools : NULL;
    bool generic = c->tool_format == CN_TOOL_FORMAT_GENERIC;
    json_t *tm = template_messages(msgs, generic && (tools || uses_tools));
    if (!tm) return oom(e);
    if (generic && tools) {
        /* the note goes first into the system turn (a new one when there is none) */
        char *note = generic_note(tools);
        json_t *first = json_array_get(tm, 0);
        bool sys = !strcmp(json_string_value(json_object_get(first, "role")), "system");
        char *old = sys ? joined(json_object_get(first, "content")) : NULL;
        char *both = note ? malloc(strlen(note) + (old ? strlen(old) : 0) + 3) : NULL;
        if (!both) {
            free(note);
            free(old);
            json_decref(tm);
            return oom(e);
        }
        sprintf(both, "%s%s%s", old ? old : "", old ? "\n\n" : "", note);
        if (sys) json_object_set_new(first, "content", json_string(both));
        else json_array_insert_new(tm, 0, json_pack("{s:s,s:s}", "role", "system", "content", both));
        free(note);
        free(old);
        free(both);
    }
    cn_error err = { 0 };
    cn_status st;
    bool plain = generic || (!tools && !uses_tools && !vars);
    if (plain) {
        /* role and content only: every template renders that */
        size_t n = json_array_size(tm);
        cn_chat_msg *cm = calloc(n, sizeof *cm);
        char **texts = calloc(n, sizeof *texts);
        bool ok = cm && texts;
        for (size_t i = 0; ok && i < n; i++) {
            json_t *m = json_array_get(tm, i);
            texts[i] = joined(json_object_get(m, "content"));
            cm[i].role = json_string_value(json_object_get(m, "role"));
            cm[i].content = texts[i];
            ok = texts[i] != NULL;
        }
        st = ok ? cn_chat_render(c->chat, cm, n, true, prompt, len, &err) : CN_STATUS_NO_MEMORY;
        for (size_t i = 0; texts && i < n; i++) free(texts[i]);
        free(texts);
        free(cm);
    } else {
        char *ms = json_dumps(tm, JSON_COMPACT);
        char *ts = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
        char *vs = vars ? json_dumps(vars, JSON_COMPACT) : NULL;
        st = ms && (!tools || ts) && (!vars || vs) ? cn_chat_render_json(c->chat, ms, ts, true, vs, prompt, len, &err)
                                                    : CN_STATUS_NO_MEMORY;
        free(ms);
        free(ts);
        free(vs);
    }
    json_decref(tm);
    if (st == CN_STATUS_NO_MEMORY) return oom(e);
    if (st != CN_STATUS_OK) return oai_fail(e, 400, "invalid_request_error", "messages", NULL, "%s", err.msg);
    /* thinking: a template that writes <think> has its reply read for one */
    r->think = c->think;
    if (r->think && *len >= 7) {
        const char *p = *prompt + *len;
        size_t k = 0;
        while (k < *len && (p[-1 - (long)k] == '\n' || p[-1 - (long)k] == ' ')) k++;
        r->in_think = *len - k >= 7 && memcmp(p - k - 7, "<think>", 7) == 0;
    }
    return true;
}

/* ---- the calls' grammar ---- */

bool oai_tools_grammar(const oai_ctx *c, oai_request *r, oai_error *e) {
    if (!r->tools || r->tools_none) return true;
    if (r->grammar)
        return oai_fail(e, 400, "invalid_request_error", "tools", NULL,
                        "'tools' together with '%s' is not supported", r->grammar_field);
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = CN_GRAMMAR_TOOLS;
    p.tool_format = r->tool_format;
    p.tool_choice = r->tool_choice;
    p.tool_name = r->tool_name;
    p.parallel_tool_calls = r->parallel_tool_calls;
    p.max_states = c->grammar_max_states;
    p.max_compile_ms = c->grammar_max_compile_ms;
    char *src = json_dumps(r->tools, JSON_COMPACT);
    if (!src) return oom(e);
    p.source = src;
    p.source_len = strlen(src);
    /* the cache's key: the tools and everything else that changes the grammar */
    size_t kl = strlen(src) + 160 + (r->tool_name ? strlen(r->tool_name) : 0);
    char *key = malloc(kl);
    if (!key) {
        free(src);
        return oom(e);
    }
    snprintf(key, kl, "tools %d %d %d %s\n%s", r->tool_format, (int)r->tool_choice, r->parallel_tool_calls,
             r->tool_name ? r->tool_name : "", src);
    cn_error err = { 0 };
    cn_status st = gcache_get(c->grammars, c->tok, &p, key, strlen(key), &r->grammar, &r->grammar_cached, &err);
    free(src);
    free(key);
    if (st == CN_STATUS_NO_MEMORY) return oom(e);
    if (st != CN_STATUS_OK) return oai_fail(e, 400, "invalid_request_error", "tools", NULL, "invalid 'tools': %s", err.msg);
    r->grammar_field = "tools";
    r->gen.grammar = r->grammar;
    return true;
}

/* ---- replies ---- */

bool oai_reply_init(oai_reply *rp, const oai_request *r, oai_error *e) {
    memset(rp, 0, sizeof *rp);
    bool tools = r->tools && !r->tools_none;
    if (!tools && !r->think) return true;
    cn_error err = { 0 };
    if (cn_tool_reader_new(tools ? (cn_tool_format)r->tool_format : CN_TOOL_FORMAT_NONE, r->think, r->in_think, &rp->rd,
                           &err) != CN_STATUS_OK)
        return oom(e);
    return true;
}

void oai_reply_free(oai_reply *rp) {
    if (!rp) return;
    cn_tool_reader_free(rp->rd);
    free(rp->content);
    free(rp->reasoning);
    for (int32_t i = 0; i < rp->n_calls; i++) {
        free(rp->calls[i].name);
        free(rp->calls[i].args);
    }
    free(rp->calls);
    memset(rp, 0, sizeof *rp);
}

static bool grow_add(char **p, size_t *n, size_t *cap, const char *s, size_t len) {
    if (*n + len + 1 > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (nc < *n + len + 1) nc *= 2;
        char *q = realloc(*p, nc);
        if (!q) return false;
        *p = q;
        *cap = nc;
    }
    memcpy(*p + *n, s, len);
    *n += len;
    (*p)[*n] = 0;
    return true;
}

/* "call_" and 24 letters and digits, from a per-process generator (ids need only be
 * unique within a conversation). */
static void call_id(char out[32]) {
    static uint64_t state;
    uint64_t s = __atomic_add_fetch(&state, 0x9E3779B97F4A7C15ull, __ATOMIC_RELAXED) ^ (uint64_t)time(NULL) * 0xBF58476D1CE4E5B9ull;
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) {
        s ^= s >> 31;
        s *= 0x94D049BB133111EBull;
        s ^= s >> 29;
        out[5 + i] = al[s % 62];
    }
    out[29] = 0;
}

static json_t *tool_delta(int32_t index, const char *id, const char *name, const char *args, size_t n_args) {
    json_t *fn = json_object();
    if (name) json_object_set_new(fn, "name", json_string(name));
    json_object_set_new(fn, "arguments", json_stringn(args ? args : "", n_args));
    json_t *tc = json_pack("{s:i}", "index", index);
    if (id) {
        json_object_set_new(tc, "id", json_string(id));
        json_object_set_new(tc, "type", json_string("function"));
    }
    json_object_set_new(tc, "function", fn);
    return json_pack("{s:[o]}", "tool_calls", tc);
}

bool oai_reply_feed(oai_reply *rp, const char *text, size_t n, bool final, json_t *deltas) {
    const cn_tool_event *ev;
    size_t n_ev;
    cn_error err = { 0 };
    if (cn_tool_reader_feed(rp->rd, text, n, final, &ev, &n_ev, &err) != CN_STATUS_OK) return false;
    for (size_t i = 0; i < n_ev; i++) {
        const cn_tool_event *x = &ev[i];
        switch (x->kind) {
        case CN_TOOL_EV_CONTENT:
        case CN_TOOL_EV_BROKEN:
            if (!grow_add(&rp->content, &rp->n_content, &rp->cap_content, x->text, x->len)) return false;
            if (deltas) json_array_append_new(deltas, json_pack("{s:s%}", "content", x->text, x->len));
            if (x->kind == CN_TOOL_EV_BROKEN && x->index < rp->n_calls) rp->calls[x->index].broken = true;
            break;
        case CN_TOOL_EV_REASONING:
            if (!grow_add(&rp->reasoning, &rp->n_reasoning, &rp->cap_reasoning, x->text, x->len)) return false;
            if (deltas) json_array_append_new(deltas, json_pack("{s:s%}", "reasoning_content", x->text, x->len));
            break;
        case CN_TOOL_EV_CALL: {
            oai_call *q = realloc(rp->calls, (size_t)(rp->n_calls + 1) * sizeof *q);
            if (!q) return false;
            rp->calls = q;
            oai_call *cl = &rp->calls[rp->n_calls++];
            memset(cl, 0, sizeof *cl);
            call_id(cl->id);
            cl->name = strdup(x->name);
            if (!cl->name) return false;
            if (deltas) json_array_append_new(deltas, tool_delta(x->index, cl->id, cl->name, "", 0));
            break;
        }
        case CN_TOOL_EV_ARGS: {
            if (x->index >= rp->n_calls) break;
            oai_call *cl = &rp->calls[x->index];
            if (!grow_add(&cl->args, &cl->n_args, &cl->cap_args, x->text, x->len)) return false;
            if (deltas) json_array_append_new(deltas, tool_delta(x->index, NULL, NULL, x->text, x->len));
            break;
        }
        }
    }
    return true;
}

int32_t oai_reply_n_calls(const oai_reply *rp) {
    int32_t n = 0;
    for (int32_t i = 0; i < rp->n_calls; i++) n += !rp->calls[i].broken;
    return n;
}

/* Whether s is all whitespace. */
static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return false;
    return true;
}

json_t *oai_reply_message(const oai_reply *rp) {
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (!m) return NULL;
    int32_t n = oai_reply_n_calls(rp);
    /* with calls, text that is only whitespace around them is no content */
    if (rp->n_content && !(n && blank(rp->content, rp->n_content)))
        json_object_set_new(m, "content", json_stringn(rp->content, rp->n_content));
    else
        json_object_set_new(m, "content", n ? json_null() : json_string(""));
    if (rp->n_reasoning) json_object_set_new(m, "reasoning_content", json_stringn(rp->reasoning, rp->n_reasoning));
    if (n) {
        json_t *a = json_array();
        for (int32_t i = 0; i < rp->n_calls; i++) {
            const oai_call *cl = &rp->calls[i];
            if (cl->broken) continue;
            json_array_append_new(a, json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", cl->id, "type", "function", "function", "name",
                                               cl->name, "arguments", cl->args ? cl->args : "", cl->n_args));
        }
        json_object_set_new(m, "tool_calls", a);
    }
    return m;
}
