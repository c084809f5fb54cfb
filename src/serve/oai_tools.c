/* oai_tools.c — the chat side of the OpenAI mapping that tools need: `tools`,
 * `tool_choice` and `parallel_tool_calls` in; messages with `tool_calls`, `tool` results
 * and reasoning rendered by the library (cn_chat_turn_prepare: the template with the
 * tools, or a generic note); the calls' grammar (CN_GRAMMAR_TOOLS, through the server's
 * grammar cache); and each reply read back (cn_tool_reader) into content,
 * reasoning_content and tool_calls, or into the deltas of a stream.
 *
 * Pure translation like openai.c: no sockets, no threads. The Anthropic and Responses
 * mappings bring their requests here as OpenAI messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/json_mem.h"
#include "serve/openai.h"
#include "serve/validate.h"

/* ---- tools and tool_choice ---- */

/* tool_choice (not null) into r; have: the request has tools. */
static bool parse_tool_choice(const oai_dialect *d, json_t *choice, json_t *tools, bool have, oai_request *r,
                              oai_error *e) {
    const char *f = oai_field(d, "tool_choice");
    if (json_is_string(choice)) {
        const char *s = json_string_value(choice);
        if (!strcmp(s, "none")) r->tools_none = true;
        else if (!strcmp(s, "required")) r->tool_choice = CN_TOOL_CHOICE_REQUIRED;
        else if (strcmp(s, "auto"))
            return val_bad(e, f, "'%s' must be \"none\", \"auto\", \"required\" or a function", f);
        return true;
    }
    json_t *fn = json_object_get(choice, "function"), *nm = json_object_get(fn, "name");
    if (!json_is_object(choice) || !json_is_string(nm))
        return val_bad(e, f,
                       "'%s' must be \"none\", \"auto\", \"required\" or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                       f);
    bool found = false;
    size_t i;
    json_t *t;
    if (have)
        json_array_foreach(tools, i, t)
            found |= json_equal(json_object_get(json_object_get(t, "function"), "name"), nm);
    if (!found) return val_bad(e, f, "%s names '%.100s', which is not among the tools", f, json_string_value(nm));
    r->tool_choice = CN_TOOL_CHOICE_NAMED;
    r->tool_name = strdup(json_string_value(nm));
    return r->tool_name ? true : val_oom(e);
}

bool oai_parse_tools(const oai_dialect *d, json_t *body, oai_request *r, oai_error *e) {
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice");
    json_t *par = json_object_get(body, "parallel_tool_calls");
    r->tool_choice = CN_TOOL_CHOICE_AUTO;
    r->parallel_tool_calls = true;
    if (par && !json_is_null(par)) {
        const char *f = oai_field(d, "parallel_tool_calls");
        if (!json_is_boolean(par)) return val_bad(e, f, "'%s' must be a boolean", f);
        r->parallel_tool_calls = json_is_true(par);
    }
    bool have = tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0);
    const char *ft = oai_field(d, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return val_bad(e, ft, "'%s' must be an array of {\"type\": \"function\", \"function\": {...}}", ft);
    /* the tools themselves are checked where the turn is rendered (cn_chat_turn_prepare) */
    if (choice && !json_is_null(choice) && !parse_tool_choice(d, choice, tools, have, r, e)) return false;
    if (!have) {
        const char *f = oai_field(d, "tool_choice");
        if (r->tool_choice != CN_TOOL_CHOICE_AUTO) return val_bad(e, f, "'%s' needs '%s'", f, ft);
        return true;
    }
    r->tools = json_incref(tools);
    return true;
}

/* ---- messages (cn_chat_turn_prepare checks and renders them) ---- */

bool oai_render_chat(const oai_ctx *c, const oai_dialect *d, json_t *msgs, json_t *vars, oai_request *r, char **prompt,
                     size_t *len, oai_error *e) {
    *prompt = NULL;
    const char *f = oai_field(d, "messages");
    if (!c->chat)
        return val_bad(e, f,
                       "this model has no chat template cinder can render: use /v1/completions "
                       "or start the server with --chat-template NAME");
    if (!msgs) return val_bad(e, f, "'%s' is required", f);
    if (json_is_array(msgs) && json_array_size(msgs) > OAI_MAX_MESSAGES)
        return val_bad(e, f, "at most %d messages", OAI_MAX_MESSAGES);
    char *ms = json_dumps(msgs, JSON_COMPACT | JSON_ENCODE_ANY);
    char *ts = r->tools ? json_dumps(r->tools, JSON_COMPACT) : NULL;
    char *vs = vars ? json_dumps(vars, JSON_COMPACT) : NULL;
    cn_error err = {0};
    cn_chat_turn_info info;
    cn_status st = CN_STATUS_NO_MEMORY;
    if (ms && (!r->tools || ts) && (!vars || vs)) {
        cn_chat_turn turn = {ms, ts, vs};
        st = cn_chat_turn_prepare(c->chat, &turn, prompt, len, &info, &err);
    }
    free(ms);
    free(ts);
    free(vs);
    if (st == CN_STATUS_NO_MEMORY) return val_oom(e);
    if (st != CN_STATUS_OK) return oai_lib_fail(d, e, 400, NULL, err.param[0] ? err.param : "messages", err.msg);
    r->tool_format = info.format;
    r->think = info.think;
    r->in_think = info.in_think;
    return true;
}

/* ---- the calls' grammar ---- */

bool oai_tools_grammar(const oai_ctx *c, const oai_dialect *d, oai_request *r, oai_error *e) {
    if (!r->tools || r->tools_none) return true;
    const char *ft = oai_field(d, "tools");
    if (r->grammar)
        return val_bad(e, ft, "'%s' together with '%s' is not supported", ft, oai_field(d, r->grammar_field));
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = CN_GRAMMAR_TOOLS;
    p.tool_format = r->tool_format;
    p.tool_choice = r->tool_choice;
    p.tool_name = r->tool_name;
    p.parallel_tool_calls = r->parallel_tool_calls;
    p.max_states = c->grammar_max_states;
    p.max_compile_ms = c->grammar_max_compile_ms;
    char *src = json_dumps(r->tools, JSON_COMPACT);
    if (!src) return val_oom(e);
    p.source = src;
    p.source_len = strlen(src);
    /* the cache's key: the tools and everything else that changes the grammar */
    size_t kl = strlen(src) + 160 + (r->tool_name ? strlen(r->tool_name) : 0);
    char *key = malloc(kl);
    if (!key) {
        free(src);
        return val_oom(e);
    }
    snprintf(key, kl, "tools %d %d %d %s\n%s", r->tool_format, (int)r->tool_choice, r->parallel_tool_calls,
             r->tool_name ? r->tool_name : "", src);
    cn_error err = {0};
    cn_status st = gcache_get(c->grammars, c->tok, &p, key, strlen(key), &r->grammar, &r->grammar_cached, &err);
    free(src);
    free(key);
    if (st == CN_STATUS_NO_MEMORY) return val_oom(e);
    if (st != CN_STATUS_OK) {
        char msg[sizeof e->message];
        snprintf(msg, sizeof msg, "invalid 'tools': %s", err.msg);
        return oai_lib_fail(d, e, 400, NULL, "tools", msg);
    }
    r->grammar_field = "tools";
    r->gen.grammar = r->grammar;
    return true;
}

/* ---- replies ---- */

bool oai_reply_init(oai_reply *rp, const oai_request *r, oai_error *e) {
    memset(rp, 0, sizeof *rp);
    bool tools = r->tools && !r->tools_none && r->tool_format != CN_TOOL_FORMAT_NONE;
    if (!tools && !r->think) return true;
    cn_error err = {0};
    if (cn_tool_reader_new(tools ? (cn_tool_format)r->tool_format : CN_TOOL_FORMAT_NONE, r->think, r->in_think, &rp->rd,
                           &err) != CN_STATUS_OK)
        return val_oom(e);
    return true;
}

void oai_reply_free(oai_reply *rp) {
    if (!rp) return;
    cn_tool_reader_free(rp->rd);
    cn_buf_free(&rp->content);
    cn_buf_free(&rp->reasoning);
    for (int32_t i = 0; i < rp->n_calls; i++) {
        free(rp->calls[i].name);
        cn_buf_free(&rp->calls[i].args);
    }
    free(rp->calls);
    memset(rp, 0, sizeof *rp);
}

/* "call_" and 24 letters and digits, from a per-process generator (ids need only be
 * unique within a conversation). */
static void call_id(char out[32]) {
    static uint64_t state;
    uint64_t s = __atomic_add_fetch(&state, 0x9E3779B97F4A7C15ull, __ATOMIC_RELAXED) ^
                 (uint64_t)time(NULL) * 0xBF58476D1CE4E5B9ull;
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
    cn_error err = {0};
    if (cn_tool_reader_feed(rp->rd, text, n, final, &ev, &n_ev, &err) != CN_STATUS_OK) return false;
    for (size_t i = 0; i < n_ev; i++) {
        const cn_tool_event *x = &ev[i];
        switch (x->kind) {
        case CN_TOOL_EV_CONTENT:
        case CN_TOOL_EV_BROKEN:
            if (!cn_buf_put(&rp->content, x->text, x->len)) return false;
            if (deltas) json_array_append_new(deltas, json_pack("{s:s%}", "content", x->text, x->len));
            if (x->kind == CN_TOOL_EV_BROKEN && x->index < rp->n_calls) rp->calls[x->index].broken = true;
            break;
        case CN_TOOL_EV_REASONING:
            if (!cn_buf_put(&rp->reasoning, x->text, x->len)) return false;
            if (deltas) json_array_append_new(deltas, json_pack("{s:s%}", "reasoning_content", x->text, x->len));
            break;
        case CN_TOOL_EV_CALL: {
            if (!CN_GROW(rp->calls, rp->cap_calls, (size_t)rp->n_calls + 1)) return false;
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
            if (!cn_buf_put(&cl->args, x->text, x->len)) return false;
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

bool oai_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return false;
    return true;
}

json_t *oai_reply_message(const oai_reply *rp) {
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (!m) return NULL;
    int32_t n = oai_reply_n_calls(rp);
    /* with calls, text that is only whitespace around them is no content */
    if (rp->content.n && !(n && oai_blank(rp->content.p, rp->content.n)))
        json_object_set_new(m, "content", json_stringn(rp->content.p, rp->content.n));
    else json_object_set_new(m, "content", n ? json_null() : json_string(""));
    if (rp->reasoning.n) json_object_set_new(m, "reasoning_content", json_stringn(rp->reasoning.p, rp->reasoning.n));
    if (n) {
        json_t *a = json_array();
        for (int32_t i = 0; i < rp->n_calls; i++) {
            const oai_call *cl = &rp->calls[i];
            if (cl->broken) continue;
            json_array_append_new(a,
                                  json_pack("{s:s,s:s,s:{s:s,s:s%}}", "id", cl->id, "type", "function", "function",
                                            "name", cl->name, "arguments", cl->args.p ? cl->args.p : "", cl->args.n));
        }
        json_object_set_new(m, "tool_calls", a);
    }
    return m;
}
