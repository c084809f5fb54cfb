/* genopts.h — what the generating subcommands (run, chat, explain, bench --spec) share:
 * the one table of generation and sampling flags (each command picks its groups), the
 * default model path, opening a model and its cn_context, Ctrl-C, and the timing and
 * speculation summaries. Parsing and printing only: tokenizing, templates, stops and
 * every decision about tokens are the library's (cn_context). */
#ifndef CN_CLI_GENOPTS_H
#define CN_CLI_GENOPTS_H

#include <stdio.h>

#include "cinder.h"
#include "flags.h"

#define CLI_MAX_LOGIT_BIAS 1024

/* Flag groups a command takes (or'ed). */
enum {
    CLI_G_MODEL = 1,     /* -m -t -c */
    CLI_G_PROMPT = 2,    /* -p -n */
    CLI_G_RUN = 4,       /* --json --chat */
    CLI_G_CHAT = 8,      /* --system --chat-template */
    CLI_G_GEN = 16,      /* --stop --ignore-eos --logprobs ... --beams ... */
    CLI_G_SAMPLING = 32, /* --temp --top-k ... --logit-bias --seed --samplers */
    CLI_G_SPEC = 64,     /* --draft --lookup --draft-max */
};

typedef struct {
    const char *cmd; /* for messages */
    const char *model, *prompt, *system, *chat_template, *samplers, *draft;
    int32_t n_threads, n_ctx; /* 0: every CPU / the model's */
    bool json, chat;
    cn_gen_params gp; /* stop and logit_bias point into the arrays below */
    const char *stops[CN_GEN_MAX_STOP];
    const char *bias_args[CLI_MAX_LOGIT_BIAS]; /* --logit-bias as given */
    int32_t n_bias_args;
    cn_logit_bias bias[CLI_MAX_LOGIT_BIAS];
    const char *sampling_title; /* the help heading, which states the defaults */
    cli_flag tables[7][12];     /* the flag groups, pointing into this struct */
    cli_flag_group groups[8];
} cli_gen_opts;

/* Defaults: the library's, with the CLI's (llama.cpp's) sampling: temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05; threads 0 (every CPU). */
void cli_gen_opts_init(cli_gen_opts *o, const char *cmd);

/* The groups named by which, then extra (a command's own flags, may be NULL); *n gets
 * their count. The view lives in o. */
const cli_flag_group *cli_gen_groups(cli_gen_opts *o, unsigned which, const cli_flag_group *extra, size_t *n);

/* Looks a token up by name for --logit-bias NAME=BIAS: its id, or -1. */
typedef int32_t (*cli_token_find_fn)(void *user, const char *name, size_t len);

/* After parsing: picks a random seed in [0, 2^63) unless --seed gave one (JSON integers
 * are int64), applies --samplers, resolves --logit-bias (ID=BIAS, or NAME=BIAS with find;
 * comma lists too), checks the flag combinations and validates everything that needs no
 * model. 0 or 2 (message printed). */
int cli_gen_opts_check(cli_gen_opts *o, cli_token_find_fn find, void *user);

/* The model path: model (-m), else $CINDER_MODELS/<default>, else
 * ~/.cache/cinder/models/<default>; NULL, after a message naming cmd, when that default
 * file is missing. */
const char *cli_model_path(const char *cmd, const char *model, char *buf, size_t n);

/* A model (and --draft's) with a context on it. */
typedef struct {
    cn_model *model, *draft;
    cn_context *ctx;
} cli_session;

/* Loads -m (and --draft), makes the context (-t, -c, --chat-template, the draft) and
 * validates the generation flags against its vocabulary. 0, 1 or 2 (message printed);
 * close s either way. */
int cli_session_open(cli_session *s, const cli_gen_opts *o);
void cli_session_close(cli_session *s);

/* on_text for streaming to stdout; user (may be NULL) is a bool set once text came. */
void cli_stream_text(void *user, const char *text, size_t n);

/* cn_context_generate with gp->should_cancel set to Ctrl-C: the first press cancels the
 * request, a second one ends the process. */
cn_status cli_generate(cn_context *c, const cn_prompt *p, cn_gen_params *gp, cn_result *r, cn_error *err);

/* Two lines on stderr: prompt tokens, prefill tok/s, time to first token; generated
 * tokens, decode tok/s, inter-token latency mean and p90, finish reason. */
void cli_print_timings(const cn_result *r);
/* One line on stderr: verify passes, drafted and accepted tokens, acceptance rate and
 * tokens per target pass. */
void cli_print_spec(const cn_result *r);

#endif
