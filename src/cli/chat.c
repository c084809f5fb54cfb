/* chat.c — `cinder chat`: an interactive conversation. Each line read from stdin is a
 * user turn; the whole conversation goes to the context as messages, which renders it
 * with the chat template, prefills only what follows the part its cache already holds
 * (the previous turns), and ends the reply at the end of the assistant's turn. The reply
 * streams to stdout; EOF ends the chat. One line per turn on stderr says how many prompt
 * tokens were reused and the timings.
 *
 * With --tools FILE (OpenAI tools, a JSON array) the conversation is kept as OpenAI
 * messages and each turn is prepared by the library (cn_chat_turn_prepare: the tools in
 * the template), constrained by the tools grammar and read back by a cn_tool_reader: text
 * streams to stdout, each call is shown on stderr and its result is the next line read
 * (the reply then goes on from it).
 *
 * Turn loop and conversation bookkeeping only; rendering, tokenizing, prefix reuse and
 * generating are the library's (cn_context_generate). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "core/buf.h"
#include "genopts.h"

/* -p, --json, --chat and --beams are parsed (so their message says why) and refused. */
#define CHAT_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_RUN | CLI_G_CHAT | CLI_G_GEN | CLI_G_SAMPLING | CLI_G_SPEC)

static const char k_usage[] =
    "usage: cinder chat [-m MODEL] [--system TEXT] [--chat-template NAME] [--tools FILE] [options]\n"
    "  reads one user message per line from stdin and streams each reply to stdout;\n"
    "  EOF (Ctrl-D) ends the chat, Ctrl-C stops a reply (-p, --json, --chat, --beams: run only);\n"
    "  with --tools, each call the model makes is shown on stderr and the next line read is its result\n\n";

typedef struct {
    cn_chat_msg *msgs; /* (n) each content an owned copy */
    size_t n, cap;
} conversation;

static bool conv_add(conversation *c, const char *role, const char *content, size_t len) {
    if (!CN_GROW(c->msgs, c->cap, c->n + 1)) return false;
    char *copy = strndup(content, len);
    if (!copy) return false;
    c->msgs[c->n++] = (cn_chat_msg){role, copy};
    return true;
}

static void conv_free(conversation *c) {
    while (c->n) free((char *)c->msgs[--c->n].content);
    free(c->msgs);
}

/* ---- --tools ---- */

/* One reply read as it streams: content to stdout (and kept), calls collected. */
typedef struct {
    cn_tool_reader *rd;
    json_t *calls; /* [{"id", "type", "function": {"name", "arguments"}}] */
    cn_buf content;
    bool oom;
} tool_state;

static void ts_content(tool_state *t, const char *s, size_t n) {
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    if (!cn_buf_put(&t->content, s, n)) t->oom = true;
}

static void ts_events(tool_state *t, const cn_tool_event *ev, size_t n_ev) {
    static unsigned long counter;
    for (size_t i = 0; i < n_ev; i++) {
        const cn_tool_event *e = &ev[i];
        if (e->kind == CN_TOOL_EV_CONTENT || e->kind == CN_TOOL_EV_BROKEN) {
            ts_content(t, e->text, e->len);
        } else if (e->kind == CN_TOOL_EV_REASONING) {
            fwrite(e->text, 1, e->len, stderr);
        } else if (e->kind == CN_TOOL_EV_CALL) {
            char id[32];
            snprintf(id, sizeof id, "call_%lu", ++counter);
            json_array_append_new(t->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function",
                                                      "name", e->name, "arguments", ""));
        } else if (e->kind == CN_TOOL_EV_ARGS) {
            json_t *fn = json_object_get(json_array_get(t->calls, (size_t)e->index), "function");
            json_t *a = json_object_get(fn, "arguments");
            if (!a) continue;
            size_t old = json_string_length(a);
            char *both = malloc(old + e->len + 1);
            if (!both) {
                t->oom = true;
                continue;
            }
            memcpy(both, json_string_value(a), old);
            memcpy(both + old, e->text, e->len);
            both[old + e->len] = 0;
            json_object_set_new(fn, "arguments", json_stringn(both, old + e->len));
            free(both);
        }
    }
}

static void tool_text(void *user, const char *text, size_t n) {
    tool_state *t = user;
    const cn_tool_event *ev;
    size_t n_ev;
    if (cn_tool_reader_feed(t->rd, text, n, false, &ev, &n_ev, NULL) == CN_STATUS_OK) ts_events(t, ev, n_ev);
    else t->oom = true;
}

/* The chat with --tools: OpenAI messages, each turn prepared, constrained and read. */
static int chat_tools(cli_session *s, cli_gen_opts *o, const char *tools_path) {
    size_t n_tools_text = 0;
    char *tools_text = cn_cli_read_file(tools_path, &n_tools_text);
    if (!tools_text) return 1; /* read_file said why */
    json_error_t je;
    json_t *tools = json_loadb(tools_text, n_tools_text, 0, &je);
    json_t *msgs = json_array();
    char *line = NULL, *prompt = NULL;
    size_t line_cap = 0;
    cn_grammar *g = NULL;
    int rc = 1;
    if (!json_is_array(tools)) {
        cn_cli_errorf("chat: --tools %s: not a JSON array of tools%s%s (line %d)", tools_path, tools ? "" : ": ",
                      tools ? "" : je.text, je.line);
        goto done;
    }
    if (o->system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", o->system));
    const cn_chat_template *tmpl = cn_context_chat_template(s->ctx);
    if (!tmpl) {
        cn_cli_errorf("chat: this model has no chat template (try --chat-template NAME)");
        goto done;
    }
    const bool tty = isatty(STDIN_FILENO);
    bool need_user = true;
    for (int turn = 1;; turn++) {
        if (need_user) {
            if (tty) {
                fputs("> ", stderr);
                fflush(stderr);
            }
            ssize_t len = getline(&line, &line_cap, stdin);
            if (len < 0) break;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            if (!line[strspn(line, " \t\n\v\f\r")]) {
                turn--;
                continue;
            }
            json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "user", "content", line, (size_t)len));
        }
        char *ms = json_dumps(msgs, JSON_COMPACT);
        cn_chat_turn ct = {ms, tools_text, NULL};
        cn_chat_turn_info info;
        cn_error err = {0};
        size_t n_prompt = 0;
        free(prompt);
        prompt = NULL;
        cn_status st = ms ? cn_chat_turn_prepare(tmpl, &ct, &prompt, &n_prompt, &info, &err) : CN_STATUS_NO_MEMORY;
        free(ms);
        if (st != CN_STATUS_OK) {
            cn_cli_errorf("chat: %s%s%s", err.param[0] ? err.param : "", err.param[0] ? ": " : "", err.msg);
            goto done;
        }
        if (!g) {
            cn_grammar_params gp = cn_grammar_default_params();
            gp.kind = CN_GRAMMAR_TOOLS;
            gp.source = tools_text;
            gp.source_len = n_tools_text;
            gp.tool_format = info.format;
            gp.tool_choice = CN_TOOL_CHOICE_AUTO;
            gp.parallel_tool_calls = true;
            if (cn_grammar_compile(cn_context_tokenizer(s->ctx), &gp, &g, &err) != CN_STATUS_OK) {
                cn_cli_errorf("chat: --tools %s: %s", tools_path, err.msg);
                goto done;
            }
        }
        tool_state ts = {.calls = json_array()};
        if (cn_tool_reader_new(info.format, info.think, info.in_think, &ts.rd, &err) != CN_STATUS_OK || !ts.calls) {
            cn_cli_errorf("chat: %s", err.msg[0] ? err.msg : "out of memory");
            json_decref(ts.calls);
            goto done;
        }
        cn_gen_params gp = o->gp;
        gp.grammar = g;
        gp.on_text = tool_text;
        gp.user = &ts;
        const cn_prompt pr = {.text = prompt};
        cn_result r;
        st = cli_generate(s->ctx, &pr, &gp, &r, &err);
        if (st == CN_STATUS_OK) {
            const cn_tool_event *ev;
            size_t n_ev;
            if (cn_tool_reader_feed(ts.rd, NULL, 0, true, &ev, &n_ev, &err) == CN_STATUS_OK) ts_events(&ts, ev, n_ev);
        }
        cn_tool_reader_free(ts.rd);
        if (st != CN_STATUS_OK || ts.oom) {
            cn_cli_errorf("chat: %s", st != CN_STATUS_OK ? err.msg : "out of memory");
            json_decref(ts.calls);
            cn_buf_free(&ts.content);
            goto done;
        }
        fputc('\n', stdout);
        fflush(stdout);
        const cn_gen_timings *t = &r.timings;
        size_t n_calls = json_array_size(ts.calls);
        fprintf(
            stderr,
            "cinder: turn %d: prompt %d tokens (%d reused), generated %d tokens, decode %.1f tok/s, %zu call%s, finish %s\n",
            turn, t->n_prompt_tokens, t->n_cached_tokens, t->n_generated_tokens, t->decode_tok_s, n_calls,
            n_calls == 1 ? "" : "s", cn_finish_reason_str(r.finish_reason));
        cn_result_free(&r);
        json_t *am = json_pack("{s:s,s:s%}", "role", "assistant", "content", ts.content.p ? ts.content.p : "",
                               ts.content.n);
        if (n_calls) json_object_set(am, "tool_calls", ts.calls);
        json_array_append_new(msgs, am);
        cn_buf_free(&ts.content);
        /* each call's result is the next line */
        need_user = n_calls == 0;
        for (size_t i = 0; i < n_calls; i++) {
            json_t *c = json_array_get(ts.calls, i), *fn = json_object_get(c, "function");
            /* one line: the arguments as compact JSON (the model may have spread them out) */
            const char *raw = json_string_value(json_object_get(fn, "arguments"));
            json_t *args = json_loads(raw ? raw : "", JSON_DECODE_ANY, NULL);
            char *flat = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            fprintf(stderr, "call %s %s(%s)\n", json_string_value(json_object_get(c, "id")),
                    json_string_value(json_object_get(fn, "name")),
                    flat  ? flat
                    : raw ? raw
                          : "");
            free(flat);
            json_decref(args);
            if (tty) {
                fprintf(stderr, "result of %s> ", json_string_value(json_object_get(fn, "name")));
                fflush(stderr);
            }
            ssize_t len = getline(&line, &line_cap, stdin);
            if (len < 0) {
                json_decref(ts.calls);
                rc = 0;
                goto done;
            }
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id",
                                                  json_object_get(c, "id"), "content", line, (size_t)len));
        }
        json_decref(ts.calls);
    }
    rc = 0;
done:
    cn_grammar_free(g);
    free(prompt);
    free(line);
    free(tools_text);
    json_decref(tools);
    json_decref(msgs);
    return rc;
}

int cn_cli_chat(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "chat");
    o.gp.max_tokens = 1024;
    const char *tools_path = NULL;
    const cli_flag own[] = {
        CLI_F_STR("--tools", NULL, &tools_path, "FILE", "OpenAI tools (a JSON array) the model may call"),
    };
    const cli_flag_group tools_group = CLI_GROUP("tools", own);
    size_t n_groups;
    const cli_flag_group *groups = cli_gen_groups(&o, CHAT_GROUPS, &tools_group, &n_groups);
    const int pr = cli_flags_parse("chat", k_usage, groups, n_groups, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);
    const char *bad = o.prompt                 ? "-p"
                      : o.json                 ? "--json"
                      : o.chat                 ? "--chat"
                      : o.gp.beam.n_beams != 1 ? "--beams"
                                               : NULL;
    if (bad) {
        cn_cli_errorf("chat: %s is unsupported in chat (see 'cinder chat --help')", bad);
        return 2;
    }
    if (cli_gen_opts_check(&o, NULL, NULL)) return 2;

    cli_session s;
    conversation conv = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int rc = cli_session_open(&s, &o);
    if (rc) goto done;
    if (tools_path) {
        rc = chat_tools(&s, &o, tools_path);
        goto done;
    }
    rc = 1;
    if (o.system && !conv_add(&conv, "system", o.system, strlen(o.system))) goto oom;
    o.gp.on_text = cli_stream_text;
    const bool tty = isatty(STDIN_FILENO);

    for (int turn = 1;; turn++) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!line[strspn(line, " \t\n\v\f\r")]) { /* a blank line (isspace's set) */
            turn--;
            continue;
        }
        if (!conv_add(&conv, "user", line, (size_t)len)) goto oom;
        const cn_prompt prompt = {.messages = conv.msgs, .n_messages = conv.n};
        cn_result r;
        cn_error err = {0};
        const cn_status st = cli_generate(s.ctx, &prompt, &o.gp, &r, &err);
        if (st != CN_STATUS_OK) {
            cn_cli_errorf("chat: %s", err.msg);
            goto done;
        }
        fputc('\n', stdout);
        fflush(stdout);
        const cn_gen_timings *t = &r.timings;
        fprintf(stderr,
                "cinder: turn %d: prompt %d tokens (%d reused), prefill %.1f tok/s, generated %d tokens, "
                "decode %.1f tok/s, finish %s\n",
                turn, t->n_prompt_tokens, t->n_cached_tokens, t->prefill_tok_s, t->n_generated_tokens, t->decode_tok_s,
                cn_finish_reason_str(r.finish_reason));
        const bool ok = conv_add(&conv, "assistant", r.text, r.n_text);
        cn_result_free(&r);
        if (!ok) goto oom;
    }
    rc = 0;
    goto done;
oom:
    cn_cli_errorf("chat: out of memory");
done:
    free(line);
    conv_free(&conv);
    cli_session_close(&s);
    return rc;
}
