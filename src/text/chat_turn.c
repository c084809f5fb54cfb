/* chat_turn.c — a chat turn that may call tools, made ready to generate: the messages
 * (OpenAI's shapes) checked, then rendered through the model's template with the tools
 * in it, or, for a template that renders no tools, with a system note describing them
 * in Hermes' tags and calls / results written as tags in plain turns (llama.cpp's
 * "generic" format); plus how the reply is to be read (its tool format, whether it
 * thinks). The server, the CLI and the Python package all prepare turns here, so a
 * conversation renders the same everywhere.
 *
 * It must not generate or compile: the caller compiles CN_GRAMMAR_TOOLS (the server
 * through its grammar cache) and reads the reply with cn_tool_reader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/core.h"
#include "cinder.h"

#define CN_CHAT_TURN_MAX_MESSAGES 4096
#define CN_CHAT_TURN_MAX_TOOLS 128

/* ---- checks ---- */

static cn_status bad(cn_error *err, const char *param, const char *fmt, const char *a) {
    return cn_err_param(err, CN_STATUS_INVALID_ARG, param, fmt, a);
}

static cn_status text_content(json_t *ct, const char *param, bool nullable, cn_error *err) {
    if (!ct || json_is_null(ct)) return nullable ? CN_STATUS_OK : bad(err, param, "'%s' is required", param);
    if (json_is_string(ct)) return CN_STATUS_OK;
    if (!json_is_array(ct)) return bad(err, param, "'%s' must be a string or an array of text parts", param);
    size_t j;
    json_t *part;
    json_array_foreach(ct, j, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
            !json_is_string(text))
            return bad(err, param,
                       "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported in '%s'", param);
    }
    return CN_STATUS_OK;
}

/* The messages' roles and fields; *uses_tools when any holds calls, results or reasoning. */
static cn_status check_messages(json_t *msgs, bool *uses_tools, cn_error *err) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(err, "messages", "'%s' must be a non-empty array of messages", "messages");
    if (json_array_size(msgs) > CN_CHAT_TURN_MAX_MESSAGES)
        return cn_err_param(err, CN_STATUS_LIMIT, "messages", "at most %d messages", CN_CHAT_TURN_MAX_MESSAGES);
    *uses_tools = false;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char param[96];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return bad(err, param, "'%s' must be an object", param);
        json_t *role = json_object_get(m, "role");
        const char *rs = json_is_string(role) ? json_string_value(role) : "";
        snprintf(param, sizeof param, "messages[%zu].role", i);
        bool sys = !strcmp(rs, "system") || !strcmp(rs, "developer"), user = !strcmp(rs, "user"),
             asst = !strcmp(rs, "assistant"), tool = !strcmp(rs, "tool");
        if (!sys && !user && !asst && !tool)
            return bad(err, param, "'%s' must be \"system\", \"developer\", \"user\", \"assistant\" or \"tool\"",
                       param);
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) {
            bool ok = !strcmp(k, "role") || !strcmp(k, "content") || !strcmp(k, "name") ||
                      (asst &&
                       (!strcmp(k, "tool_calls") || !strcmp(k, "reasoning_content") || !strcmp(k, "refusal"))) ||
                      (tool && !strcmp(k, "tool_call_id"));
            if (!ok) {
                snprintf(param, sizeof param, "messages[%zu].%.40s", i, k);
                return bad(err, param, "unsupported message field '%s'", param);
            }
        }
        json_t *calls = json_object_get(m, "tool_calls");
        bool has_calls = json_is_array(calls) && json_array_size(calls) > 0;
        snprintf(param, sizeof param, "messages[%zu].content", i);
        cn_status st = text_content(json_object_get(m, "content"), param, asst && has_calls, err);
        if (st != CN_STATUS_OK) return st;
        if (asst && calls && !json_is_null(calls)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(calls)) return bad(err, param, "'%s' must be an array", param);
            size_t j;
            json_t *tc;
            json_array_foreach(calls, j, tc) {
                json_t *fn = json_object_get(tc, "function");
                json_t *id = json_object_get(tc, "id"), *nm = json_object_get(fn, "name"),
                       *args = json_object_get(fn, "arguments");
                snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
                if (!json_is_object(tc) || !json_is_string(id) || !json_is_string(nm) ||
                    !(json_is_string(args) || json_is_object(args)))
                    return bad(err, param,
                               "'%s' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                               param);
            }
            *uses_tools |= has_calls;
        }
        json_t *rc = json_object_get(m, "reasoning_content");
        if (rc && !json_is_null(rc)) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            if (!json_is_string(rc)) return bad(err, param, "'%s' must be a string", param);
            *uses_tools = true;
        }
        if (tool) {
            json_t *id = json_object_get(m, "tool_call_id");
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(id)) return bad(err, param, "'%s' is required for a tool message", param);
            /* it answers a call an earlier assistant message made */
            bool found = false;
            for (size_t p = 0; p < i && !found; p++) {
                json_t *pc = json_object_get(json_array_get(msgs, p), "tool_calls");
                size_t q;
                json_t *tc;
                if (json_is_array(pc)) json_array_foreach(pc, q, tc) found |= json_equal(json_object_get(tc, "id"), id);
            }
            if (!found) return bad(err, param, "'%s' answers no tool call of an earlier assistant message", param);
            *uses_tools = true;
        }
    }
    return CN_STATUS_OK;
}

/* OpenAI's rule for a function's name. */
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

static cn_status check_tools(json_t *tools, cn_error *err) {
    if (!json_is_array(tools))
        return bad(err, "tools", "'%s' must be an array of {\"type\": \"function\", \"function\": {...}}", "tools");
    if (json_array_size(tools) > CN_CHAT_TURN_MAX_TOOLS)
        return cn_err_param(err, CN_STATUS_LIMIT, "tools", "at most %d tools", CN_CHAT_TURN_MAX_TOOLS);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char param[64];
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0 ||
            !json_is_object(fn))
            return bad(err, param, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
        json_t *nm = json_object_get(fn, "name"), *ps = json_object_get(fn, "parameters"),
               *desc = json_object_get(fn, "description");
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        if (!json_is_string(nm) || !valid_name(json_string_value(nm), json_string_length(nm)))
            return bad(err, param, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, _, - and .", param);
        for (size_t j = 0; j < i; j++)
            if (json_equal(json_object_get(json_object_get(json_array_get(tools, j), "function"), "name"), nm))
                return bad(err, param, "two tools are called '%s'", json_string_value(nm));
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        if (ps && !json_is_null(ps) && !json_is_object(ps))
            return bad(err, param, "'%s' must be a JSON Schema object", param);
        snprintf(param, sizeof param, "tools[%zu].function.description", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return bad(err, param, "'%s' must be a string", param);
    }
    return CN_STATUS_OK;
}

/* ---- rendering ---- */

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

/* A plain turn for a template that knows no tools: a result inside <tool_response> tags
 * (as a user turn), calls as <tool_call> tags after the text. */
static json_t *plain_turn(json_t *m, const char *role) {
    json_t *calls = json_object_get(m, "tool_calls");
    char *text = joined(json_object_get(m, "content"));
    if (!text) return NULL;
    size_t cap = strlen(text) + 64, n = 0, j;
    json_t *tc;
    char **args = calloc(json_is_array(calls) ? json_array_size(calls) + 1 : 1, sizeof *args);
    if (!args) {
        free(text);
        return NULL;
    }
    if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
            json_t *fn = json_object_get(tc, "function");
            args[j] = json_dumps(json_object_get(fn, "arguments"), JSON_ENCODE_ANY | JSON_COMPACT);
            cap += 64 + (args[j] ? strlen(args[j]) : 2) + json_string_length(json_object_get(fn, "name"));
        }
    char *s = malloc(cap);
    json_t *out = NULL;
    if (s) {
        if (!strcmp(role, "tool")) n += (size_t)sprintf(s, "<tool_response>\n%s\n</tool_response>", text);
        else n += (size_t)sprintf(s, "%s", text);
        if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
                json_t *fn = json_object_get(tc, "function");
                n += (size_t)sprintf(s + n, "%s<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
                                     n ? "\n" : "", json_string_value(json_object_get(fn, "name")),
                                     args[j] ? args[j] : "{}");
            }
        out = json_pack("{s:s,s:s}", "role", !strcmp(role, "tool") ? "user" : role, "content", s);
    }
    if (json_is_array(calls))
        for (size_t k = 0; k < json_array_size(calls); k++) free(args[k]);
    free(args);
    free(text);
    free(s);
    return out;
}

/* The messages as the template sees them: developer as system, call arguments parsed into
 * objects (as Hugging Face passes them); plain turns for a template without tools. */
static json_t *template_messages(json_t *msgs, bool plain) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *c = out ? json_deep_copy(m) : NULL;
        if (!c) {
            json_decref(out);
            return NULL;
        }
        const char *role = json_string_value(json_object_get(c, "role"));
        if (!strcmp(role, "developer")) {
            json_object_set_new(c, "role", json_string("system"));
            role = "system";
        }
        json_t *calls = json_object_get(c, "tool_calls");
        size_t j;
        json_t *tc;
        if (json_is_array(calls)) json_array_foreach(calls, j, tc) {
                json_t *fn = json_object_get(tc, "function"), *args = json_object_get(fn, "arguments");
                if (!json_object_get(tc, "type")) json_object_set_new(tc, "type", json_string("function"));
                if (json_is_string(args)) {
                    json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY,
                                                NULL);
                    if (parsed) json_object_set_new(fn, "arguments", parsed);
                }
            }
        if (plain) {
            json_t *p = plain_turn(c, role);
            json_decref(c);
            c = p;
            if (!c) {
                json_decref(out);
                return NULL;
            }
        }
        json_array_append_new(out, c);
    }
    return out;
}

/* The system note that describes the tools to a template that renders none. */
static char *generic_note(json_t *tools) {
    static const char head[] = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    static const char tail[] =
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call>";
    size_t cap = sizeof head + sizeof tail, n = 0, nt = json_array_size(tools);
    char **lines = calloc(nt + 1, sizeof *lines);
    if (!lines) return NULL;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        lines[i] = json_dumps(t, JSON_COMPACT | JSON_ENSURE_ASCII);
        cap += (lines[i] ? strlen(lines[i]) : 2) + 1;
    }
    char *s = malloc(cap);
    if (s) {
        n += (size_t)sprintf(s, "%s", head);
        for (size_t k = 0; k < nt; k++) n += (size_t)sprintf(s + n, "\n%s", lines[k] ? lines[k] : "{}");
        sprintf(s + n, "%s", tail);
    }
    for (size_t k = 0; k < nt; k++) free(lines[k]);
    free(lines);
    return s;
}

/* Puts the note first into the system turn (a new one when there is none). */
static bool add_note(json_t *tm, json_t *tools) {
    char *note = generic_note(tools);
    json_t *first = json_array_get(tm, 0);
    bool sys = !strcmp(json_string_value(json_object_get(first, "role")), "system");
    char *old = sys ? joined(json_object_get(first, "content")) : NULL;
    char *both = note && (!sys || old) ? malloc(strlen(note) + (old ? strlen(old) : 0) + 3) : NULL;
    bool ok = both != NULL;
    if (ok) {
        sprintf(both, "%s%s%s", old ? old : "", old ? "\n\n" : "", note);
        if (sys) ok = json_object_set_new(first, "content", json_string(both)) == 0;
        else ok = json_array_insert_new(tm, 0, json_pack("{s:s,s:s}", "role", "system", "content", both)) == 0;
    }
    free(note);
    free(old);
    free(both);
    return ok;
}

static cn_status render_plain(const cn_chat_template *t, json_t *tm, char **out, size_t *len, cn_error *err) {
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
    cn_status st = ok ? cn_chat_render(t, cm, n, true, out, len, err)
                      : cn_err(err, CN_STATUS_NO_MEMORY, "out of memory rendering the chat");
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
    return st;
}

cn_status cn_chat_turn_prepare(const cn_chat_template *t, const cn_chat_turn *turn, char **prompt, size_t *len,
                               cn_chat_turn_info *info, cn_error *err) {
    *prompt = NULL;
    if (len) *len = 0;
    memset(info, 0, sizeof *info);
    if (!t || !turn || !turn->messages_json)
        return cn_err(err, CN_STATUS_INVALID_ARG, "a chat turn needs a template and messages");
    const char *src = cn_chat_template_source(t);
    json_error_t je;
    json_t *msgs = json_loads(turn->messages_json, JSON_DECODE_ANY, &je);
    json_t *tools = turn->tools_json ? json_loads(turn->tools_json, 0, &je) : NULL;
    json_t *vars = turn->vars_json ? json_loads(turn->vars_json, 0, &je) : NULL;
    json_t *tm = NULL;
    char *ms = NULL, *ts = NULL, *vs = NULL;
    size_t n_out = 0;
    bool uses_tools = false;
    cn_status st = CN_STATUS_OK;
    if (!msgs) st = bad(err, "messages", "'%s' must be a JSON array of messages", "messages");
    else if (turn->tools_json && !tools) st = bad(err, "tools", "'%s' must be a JSON array", "tools");
    else if (tools) st = check_tools(tools, err);
    if (st == CN_STATUS_OK && turn->vars_json && !json_is_object(vars))
        st = bad(err, "vars", "'%s' must be a JSON object", "vars");
    if (st == CN_STATUS_OK) st = check_messages(msgs, &uses_tools, err);
    if (st != CN_STATUS_OK) goto out;
    bool has_tools = tools && json_array_size(tools) > 0;
    info->format = has_tools ? cn_tool_format_detect(src) : CN_TOOL_FORMAT_NONE;
    bool generic = cn_tool_format_detect(src) == CN_TOOL_FORMAT_GENERIC;
    tm = template_messages(msgs, generic && (has_tools || uses_tools));
    if (!tm || (generic && has_tools && !add_note(tm, tools))) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory rendering the chat");
        goto out;
    }
    if (generic || (!has_tools && !uses_tools && !vars)) {
        /* role and content only: every template renders that */
        st = render_plain(t, tm, prompt, &n_out, err);
    } else {
        ms = json_dumps(tm, JSON_COMPACT);
        ts = has_tools ? json_dumps(tools, JSON_COMPACT) : NULL;
        vs = vars ? json_dumps(vars, JSON_COMPACT) : NULL;
        st = ms && (!has_tools || ts) && (!vars || vs)
                 ? cn_chat_render_json(t, ms, ts, true, vs, prompt, &n_out, err)
                 : cn_err(err, CN_STATUS_NO_MEMORY, "out of memory rendering the chat");
    }
    if (st != CN_STATUS_OK) goto out;
    /* thinking: a template that writes <think> has its reply read for one, and the reply
     * starts inside it when the prompt ends with the opening tag */
    info->think = src && strstr(src, "<think>");
    if (info->think) {
        size_t k = n_out;
        while (k > 0 && ((*prompt)[k - 1] == '\n' || (*prompt)[k - 1] == ' ')) k--;
        info->in_think = k >= 7 && memcmp(*prompt + k - 7, "<think>", 7) == 0;
    }
    if (len) *len = n_out;
out:
    if (st != CN_STATUS_OK) {
        free(*prompt);
        *prompt = NULL;
    }
    json_decref(msgs);
    json_decref(tools);
    json_decref(vars);
    json_decref(tm);
    free(ms);
    free(ts);
    free(vs);
    return st;
}
