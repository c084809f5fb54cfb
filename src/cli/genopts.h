/* genopts.h — what `cinder run` and `cinder chat` share: the generation flags (sampling,
 * stopping, logprobs, beams) parsed into a cn_gen_params, the default model path, loading
 * a model with its tokenizer, context and KV cache, chat-template choice, and the timing
 * summary. Parsing only: every decision about tokens is the library's. */
#ifndef CN_CLI_GENOPTS_H
#define CN_CLI_GENOPTS_H

#include <signal.h>
#include <stdio.h>

#include "gen/generate.h"
#include "gen/spec.h"
#include "text/chat.h"

#define CLI_MAX_LOGIT_BIAS 1024
#define CLI_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"

typedef struct {
    const char *cmd;           /* "run" or "chat", for messages */
    const char *model;         /* -m; NULL: the default model */
    const char *prompt;        /* -p */
    const char *system;        /* --system */
    const char *chat_template; /* --chat-template */
    const char *samplers;      /* --samplers */
    const char *draft;         /* --draft MODEL */
    cn_spec_params spec;       /* --lookup N, --draft-max K; .draft set by cli_spec_start */
    long n_threads, n_ctx;     /* -t, -c/--ctx (0: the model's, at most 4096) */
    bool json, chat;           /* --json, --chat */
    cn_gen_params gp;          /* stop and logit_bias point into the arrays below */
    cn_logit_bias bias[CLI_MAX_LOGIT_BIAS];
    const char *stops[CN_GEN_MAX_STOP];
} cli_gen_opts;

/* Defaults: the library's neutral sampling except the CLI's (llama.cpp's) temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05; max_tokens 256; threads = online CPUs (at most 64). */
void cli_gen_opts_init(cli_gen_opts *o, const char *cmd);

/* Tries argv[*i] (with its value in the next argument or after '='): returns 1 and
 * advances *i past the value when it is a generation flag, 0 when it is not one, -1 after
 * printing a one-line error for a bad value. Flags: -m -p -n/--max-tokens -t -c/--ctx
 * --temp --top-k --top-p --min-p --typical --repeat-penalty --repeat-last-n
 * --presence-penalty --frequency-penalty --logit-bias ID=BIAS --seed --stop STR
 * --ignore-eos --logprobs N --logprobs-after-chain --beams N --length-penalty X
 * --early-stopping --samplers ORDER --json --chat --system S --chat-template NAME
 * --draft MODEL --draft-max K --lookup N. */
int cli_gen_opts_parse(cli_gen_opts *o, int argc, char **argv, int *i);

/* Help text for the flags above. */
void cli_gen_opts_help(FILE *f);

/* Picks a random seed (in [0, 2^63)) unless --seed gave one, applies --samplers and
 * validates everything that needs no model (n_vocab 0). 0 or 2 (message printed). */
int cli_gen_opts_check(cli_gen_opts *o);

/* The model path: -m, else $CINDER_MODELS/<default>, else ~/.cache/cinder/models/<default>. */
const char *cli_model_path(const cli_gen_opts *o, char *buf, size_t n);

/* A loaded model, its tokenizer, and (after cli_engine_start) a context and KV cache. */
typedef struct {
    cn_model *model;
    cn_tokenizer *tok;
    cn_ctx *ctx;
    cn_kv *kv;
    cn_gen_runner run;
    int32_t n_vocab, n_ctx;
} cli_engine;

/* Loads the model and tokenizer and fixes n_ctx. 0 or 1 (message printed). */
int cli_engine_load(cli_engine *e, const cli_gen_opts *o);
/* Context with n_batch rows and a KV cache of n_seqs sequences and n_blocks blocks
 * (0: n_seqs full contexts). 0 or 1 (message printed). */
int cli_engine_start(cli_engine *e, const cli_gen_opts *o, int32_t n_batch, int32_t n_seqs, int64_t n_blocks);
void cli_engine_close(cli_engine *e);

/* Speculative decoding from --draft / --lookup: checks the flags, loads the draft model
 * into d (same context size, one sequence; its vocabulary must be e's) and points
 * o->spec.draft at it. After cli_engine_start(e). 0, 1 or 2 (message printed); close d
 * with cli_engine_close either way. */
int cli_spec_start(cli_engine *e, cli_engine *d, cli_gen_opts *o);

/* The chat template: --chat-template NAME, else detected from tokenizer.chat_template.
 * NULL after printing the error. */
cn_chat_template *cli_chat_template(const cli_engine *e, const cli_gen_opts *o);
/* Adds the template's end-of-turn text as a stop string unless the tokenizer already
 * ends generation on it. 0 or 2 (message printed). */
int cli_add_end_of_turn_stop(cli_gen_opts *o, const cli_engine *e, const cn_chat_template *t);

/* Tokenizes text with the model's BOS rule, parsing special tokens. NULL after printing
 * an error; *n gets the count. Caller frees. */
int32_t *cli_tokenize(const cli_engine *e, const char *text, int32_t *n);

/* Ctrl-C during generation: the first press cancels the request (should_cancel sees it),
 * a second one ends the process. */
void cli_sigint_arm(void);
void cli_sigint_disarm(void);
bool cli_sigint_cancel(void *user); /* a cn_gen_cancel_fn */

/* Two lines on stderr: prompt tokens, prefill tok/s, time to first token; generated
 * tokens, decode tok/s, inter-token latency mean and p90, finish reason. */
void cli_print_timings(const cn_gen_timings *t, cn_finish_reason r);
/* One line on stderr: verify passes, drafted and accepted tokens, acceptance rate and
 * tokens per target pass. */
void cli_print_spec(const cn_spec_stats *s);

#endif
