/* chat.c — `cinder chat`: an interactive conversation. Each line read from stdin is a
 * user turn; the whole conversation goes to the context as messages, which renders it
 * with the chat template, prefills only what follows the part its cache already holds
 * (the previous turns), and ends the reply at the end of the assistant's turn. The reply
 * streams to stdout; EOF ends the chat. One line per turn on stderr says how many prompt
 * tokens were reused and the timings.
 *
 * Turn loop and conversation bookkeeping only; rendering, tokenizing, prefix reuse and
 * generating are the library's (cn_context_generate). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "genopts.h"

/* -p, --json, --chat and --beams are parsed (so their message says why) and refused. */
#define CHAT_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_RUN | CLI_G_CHAT | CLI_G_GEN | CLI_G_SAMPLING | CLI_G_SPEC)

static const char k_usage[] =
    "usage: cinder chat [-m MODEL] [--system TEXT] [--chat-template NAME] [options]\n"
    "  reads one user message per line from stdin and streams each reply to stdout;\n"
    "  EOF (Ctrl-D) ends the chat, Ctrl-C stops a reply (-p, --json, --chat, --beams: run only)\n\n";

typedef struct {
    cn_chat_msg *msgs; /* (n) each content an owned copy */
    size_t n, cap;
} conversation;

static bool conv_add(conversation *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        cn_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return false;
        c->msgs = m;
        c->cap = cap;
    }
    char *copy = strndup(content, len);
    if (!copy) return false;
    c->msgs[c->n++] = (cn_chat_msg){role, copy};
    return true;
}

static void conv_free(conversation *c) {
    while (c->n) free((char *)c->msgs[--c->n].content);
    free(c->msgs);
}

int cn_cli_chat(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "chat");
    o.gp.max_tokens = 1024;
    size_t n_groups;
    const cli_flag_group *groups = cli_gen_groups(&o, CHAT_GROUPS, NULL, &n_groups);
    const int pr = cli_flags_parse("chat", k_usage, groups, n_groups, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);
    const char *bad = o.prompt ? "-p" : o.json ? "--json" : o.chat ? "--chat" : o.gp.beam.n_beams != 1 ? "--beams" : NULL;
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
                turn, t->n_prompt_tokens, t->n_cached_tokens, t->prefill_tok_s, t->n_generated_tokens,
                t->decode_tok_s, cn_finish_reason_str(r.finish_reason));
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
