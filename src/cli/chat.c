/* chat.c — `cinder chat`: an interactive conversation. Each line read from stdin is a
 * user turn; the whole conversation is rendered with the model's chat template and
 * tokenized again, and only the tokens after the part the KV cache already holds (the
 * common prefix with what was computed last turn) are prefilled. The reply streams to
 * stdout and ends at the end of the assistant's turn (an end-of-generation token, or the
 * template's end-of-turn text as a stop string). EOF ends the chat. One line per turn on
 * stderr says how many prompt tokens were reused and the timings.
 *
 * Turn loop and conversation bookkeeping only; rendering, tokenizing and generating are
 * the library's. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"
#include "genopts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cinder chat [-m MODEL] [--system TEXT] [--chat-template NAME] [options]\n"
               "  reads one user message per line from stdin and streams each reply to stdout;\n"
               "  EOF (Ctrl-D) ends the chat, Ctrl-C stops a reply\n");
    cli_gen_opts_help(f);
}

static void stream_text(void *user, const char *text, size_t n) {
    (void)user;
    fwrite(text, 1, n, stdout);
    fflush(stdout);
}

typedef struct {
    cn_chat_msg *msgs;
    char **owned;      /* (n) the contents, owned */
    size_t n, cap;
} conversation;

static bool conv_add(conversation *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        cn_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (m) c->msgs = m;
        char **o = realloc(c->owned, cap * sizeof *o);
        if (o) c->owned = o;
        if (!m || !o) return false;
        c->cap = cap;
    }
    char *copy = strndup(content, len);
    if (!copy) return false;
    c->owned[c->n] = copy;
    c->msgs[c->n] = (cn_chat_msg){role, copy};
    c->n++;
    return true;
}

static void conv_pop(conversation *c) {
    if (c->n) free(c->owned[--c->n]);
}

static void conv_free(conversation *c) {
    while (c->n) conv_pop(c);
    free(c->msgs);
    free(c->owned);
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (!isspace((unsigned char)*s)) return false;
    return true;
}

int cn_cli_chat(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "chat");
    o.gp.max_tokens = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        const char *flag = argv[i];
        const int r = cli_gen_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0 || o.prompt || o.json || o.chat || o.gp.beam.n_beams != 1) {
            cn_cli_errorf("chat: %s option '%s' (see 'cinder chat --help')",
                          r == 0 ? "unknown" : "unsupported in chat:", flag);
            return 2;
        }
    }
    if (cli_gen_opts_check(&o)) return 2;

    int rc = 1;
    cli_engine e, de = {0};
    cn_chat_template *tmpl = NULL;
    conversation conv = {0};
    int32_t *kv_toks = NULL; /* the tokens whose K/V sequence 0 holds, in order */
    int64_t n_kv = 0;
    char *line = NULL;
    size_t line_cap = 0;
    cn_error err = {0};
    if (cli_engine_load(&e, &o)) goto done;
    if (cn_gen_validate(&o.gp, e.n_vocab, &err) != CN_STATUS_OK) {
        cn_cli_errorf("chat: %s", err.msg);
        rc = 2;
        goto done;
    }
    if (!(tmpl = cli_chat_template(&e, &o))) {
        rc = o.chat_template ? 2 : 1; /* a bad --chat-template NAME is a usage error */
        goto done;
    }
    if (cli_add_end_of_turn_stop(&o, &e, tmpl)) {
        rc = 2;
        goto done;
    }
    if (cli_engine_start(&e, &o, 512, 1, 0)) goto done;
    if ((rc = cli_spec_start(&e, &de, &o)) != 0) goto done;
    rc = 1;
    if (o.system && !conv_add(&conv, "system", o.system, strlen(o.system))) goto oom;
    o.gp.on_text = stream_text;
    o.gp.should_cancel = cli_sigint_cancel;
    const bool tty = isatty(STDIN_FILENO);

    for (int turn = 1;; turn++) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (blank(line)) {
            turn--;
            continue;
        }
        if (!conv_add(&conv, "user", line, (size_t)len)) goto oom;
        char *text = NULL;
        if (cn_chat_render(tmpl, conv.msgs, conv.n, true, &text, NULL, &err) != CN_STATUS_OK) {
            cn_cli_errorf("chat: %s", err.msg);
            goto done;
        }
        int32_t n_prompt = 0;
        int32_t *ids = cli_tokenize(&e, text, &n_prompt);
        free(text);
        if (!ids) goto done;
        if (n_prompt >= e.n_ctx) {
            cn_cli_errorf("chat: the conversation is %d tokens and the context holds %d: start a new chat or "
                          "use a larger --ctx",
                          (int)n_prompt, (int)e.n_ctx);
            free(ids);
            goto done;
        }
        int32_t n_reuse = 0;
        while (n_reuse < n_kv && n_reuse < n_prompt && kv_toks[n_reuse] == ids[n_reuse]) n_reuse++;

        cn_gen *g = NULL;
        cn_status st = cn_gen_create(e.tok, e.n_vocab, &o.gp, &g, &err);
        if (st == CN_STATUS_OK) {
            cli_sigint_arm();
            st = cn_generate_spec(&e.run, &o.spec, 0, ids, n_prompt, n_reuse, g, NULL, &err);
            cli_sigint_disarm();
        }
        if (st != CN_STATUS_OK) {
            cn_cli_errorf("chat: %s", err.msg);
            cn_gen_free(g);
            free(ids);
            goto done;
        }
        fputc('\n', stdout);
        fflush(stdout);

        /* what the cache holds now: the prompt, then the generated tokens fed back */
        int32_t n_gen;
        const int32_t *gen = cn_gen_tokens(g, &n_gen);
        const int64_t n_held = cn_kv_seq_len(e.kv, 0);
        int32_t *nk = realloc(kv_toks, (size_t)CN_MAX(n_held, 1) * sizeof *nk);
        if (!nk) {
            cn_gen_free(g);
            free(ids);
            goto oom;
        }
        kv_toks = nk;
        for (int64_t i = 0; i < n_held; i++) kv_toks[i] = i < n_prompt ? ids[i] : gen[i - n_prompt];
        n_kv = n_held;
        free(ids);

        size_t n_reply;
        const char *reply = cn_gen_text(g, &n_reply);
        cn_gen_timings t;
        cn_gen_get_timings(g, &t);
        fprintf(stderr,
                "cinder: turn %d: prompt %d tokens (%d reused), prefill %.1f tok/s, generated %d tokens, "
                "decode %.1f tok/s, finish %s\n",
                turn, t.n_prompt_tokens, t.n_cached_tokens, t.prefill_tok_s, t.n_generated_tokens, t.decode_tok_s,
                cn_finish_reason_str(cn_gen_finish_reason(g)));
        const bool ok = conv_add(&conv, "assistant", reply, n_reply);
        cn_gen_free(g);
        if (!ok) goto oom;
    }
    rc = 0;
    goto done;
oom:
    cn_cli_errorf("chat: out of memory");
done:
    free(line);
    free(kv_toks);
    conv_free(&conv);
    cn_chat_template_free(tmpl);
    cli_engine_close(&de);
    cli_engine_close(&e);
    return rc;
}
