/* genopts.c — the generation and sampling flags, defined once for every command that
 * generates (see genopts.h), and opening a model's context. Values are parsed strictly
 * by the flag parser; the ranges of generation and sampling parameters are checked by the
 * library (cn_gen_validate), so the CLI and the API give the same message, naming the
 * field, for the same mistake. */
#include "genopts.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

void cli_gen_opts_init(cli_gen_opts *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->gp = cn_gen_default_params();
    o->gp.sampling.temperature = 0.8f;
    o->gp.sampling.top_k = 40;
    o->gp.sampling.top_p = 0.95f;
    o->gp.sampling.min_p = 0.05f;
    o->gp.stop = o->stops;
    o->sampling_title = "sampling (defaults as llama.cpp: temp 0.8, top-k 40, top-p 0.95, min-p 0.05)";
}

static int parse_seed(void *dst, const char *val, const char *cmd, const char *name) {
    int64_t v;
    if (!cli_parse_i64(val, &v) || v < 0) {
        cn_cli_errorf("%s: %s wants an integer in [0, 2^63), got '%s'", cmd, name, val);
        return -1;
    }
    *(uint64_t *)dst = (uint64_t)v;
    return 0;
}

/* The library checks these ranges (cn_gen_validate): no range here. */
#define F_NUM(n, a, k, d, m, h) CLI_F_NUM(n, a, k, d, 1, 0, m, h)

const cli_flag_group *cli_gen_groups(cli_gen_opts *o, unsigned which, const cli_flag_group *extra, size_t *n) {
    cn_gen_params *g = &o->gp;
    cn_sampling_params *s = &g->sampling;
    const cli_flag model[] = {
        CLI_F_MODEL(&o->model),
        CLI_F_THREADS(&o->n_threads),
        CLI_F_NUM("--ctx", "-c", CLI_INT, &o->n_ctx, 0, 1 << 24, "N",
                  "context length (default: the model's, at most 4096)"),
    };
    const cli_flag prompt[] = {
        CLI_F_STR("--prompt", "-p", &o->prompt, "TEXT", "the prompt"),
        F_NUM("--max-tokens", "-n", CLI_INT, &g->max_tokens, "N",
              "most tokens to generate (default 256; chat 1024; explain: steps, 8)"),
    };
    const cli_flag run[] = {
        CLI_F_BOOL("--json", NULL, &o->json, "print one JSON object (text, finish_reason, timings)"),
        CLI_F_BOOL("--chat", NULL, &o->chat, "apply the model's chat template to PROMPT as a user message"),
    };
    const cli_flag chat[] = {
        CLI_F_STR("--system", NULL, &o->system, "TEXT", "system message (chat template)"),
        CLI_F_STR("--chat-template", NULL, &o->chat_template, "NAME",
                  "chatml, gemma or llama3 (default: from the model)"),
    };
    const cli_flag gen[] = {
        {.name = "--stop",
         .kind = CLI_STRS,
         .dst = o->stops,
         .max = CN_GEN_MAX_STOP,
         .count = &g->n_stop,
         .metavar = "STR",
         .help = "stop string, cut from the output (repeatable)"},
        CLI_F_BOOL("--ignore-eos", NULL, &s->ignore_eos, "keep going past end-of-generation tokens"),
        F_NUM("--logprobs", NULL, CLI_INT, &s->n_logprobs, "N",
              "report each token's log-probability and N alternatives"),
        CLI_F_BOOL("--logprobs-after-chain", NULL, &g->logprobs_after_chain,
                   "... under the sampled distribution (default: raw model)"),
        F_NUM("--beams", NULL, CLI_INT, &g->beam.n_beams, "N", "beam search with N beams (1 = sampling)"),
        F_NUM("--length-penalty", NULL, CLI_FLOAT, &g->beam.length_penalty, "X",
              "beam score = logprob / length^X (default 1)"),
        CLI_F_BOOL("--early-stopping", NULL, &g->beam.early_stopping,
                   "beam search stops once N sequences have finished"),
    };
    const cli_flag sampling[] = {
        F_NUM("--temp", NULL, CLI_FLOAT, &s->temperature, "T", "temperature; 0 = greedy"),
        F_NUM("--top-k", NULL, CLI_INT, &s->top_k, "K", "keep the K most probable (0 = off)"),
        F_NUM("--top-p", NULL, CLI_FLOAT, &s->top_p, "P", "keep the smallest set with mass >= P (1 = off)"),
        F_NUM("--min-p", NULL, CLI_FLOAT, &s->min_p, "P", "keep p >= P * p_max (0 = off)"),
        F_NUM("--typical", NULL, CLI_FLOAT, &s->typical_p, "P", "locally typical sampling (1 = off)"),
        F_NUM("--repeat-penalty", NULL, CLI_FLOAT, &s->repetition_penalty, "R", "repetition penalty (1 = off)"),
        F_NUM("--repeat-last-n", NULL, CLI_INT, &s->penalty_last_n, "N",
              "penalize the last N tokens of the history (-1 = all)"),
        F_NUM("--presence-penalty", NULL, CLI_FLOAT, &s->presence_penalty, "X", "OpenAI presence penalty (0 = off)"),
        F_NUM("--frequency-penalty", NULL, CLI_FLOAT, &s->frequency_penalty, "X", "OpenAI frequency penalty (0 = off)"),
        {.name = "--logit-bias",
         .kind = CLI_STRS,
         .dst = o->bias_args,
         .max = CLI_MAX_LOGIT_BIAS,
         .count = &o->n_bias_args,
         .metavar = "ID=BIAS",
         .help = "add BIAS to a token's logit; -inf bans it (repeatable, or joined by ',')"},
        {.name = "--seed",
         .kind = CLI_CUSTOM,
         .dst = &s->seed,
         .parse = parse_seed,
         .metavar = "N",
         .help = "random seed in [0, 2^63) (default: random, reported)"},
        CLI_F_STR("--samplers", NULL, &o->samplers, "ORDER",
                  "stage order: 'default' (HF/vLLM), 'llama.cpp', or names\n"
                  "joined by ';' (logit_bias;penalties;temperature;top_k;...)"),
    };
    const cli_flag spec[] = {
        CLI_F_STR("--draft", NULL, &o->draft, "MODEL", "a smaller model with the same vocabulary drafts tokens"),
        F_NUM("--lookup", NULL, CLI_INT, &g->lookup_n, "N",
              "draft from the longest earlier match of the last 1..N tokens\n"
              "in the prompt and output (n-gram lookup; no draft model)"),
        F_NUM("--draft-max", NULL, CLI_INT, &g->max_draft, "K",
              "the longest draft per step, 1..16 (default 8; adapts)"),
    };
    const struct {
        unsigned bit;
        const char *title;
        const cli_flag *f;
        size_t n;
    } all[] = {
        {CLI_G_MODEL, "model and context", model, LEN(model)},
        {CLI_G_PROMPT, "prompt", prompt, LEN(prompt)},
        {CLI_G_RUN, "output", run, LEN(run)},
        {CLI_G_CHAT, "chat", chat, LEN(chat)},
        {CLI_G_GEN, "generation", gen, LEN(gen)},
        {CLI_G_SAMPLING, o->sampling_title, sampling, LEN(sampling)},
        {CLI_G_SPEC, "speculative decoding (the same tokens as without it, fewer target passes)", spec, LEN(spec)},
    };
    size_t k = 0;
    for (size_t i = 0; i < LEN(all); i++) {
        if (!(which & all[i].bit)) continue;
        memcpy(o->tables[i], all[i].f, all[i].n * sizeof *all[i].f);
        o->groups[k++] = (cli_flag_group){all[i].title, o->tables[i], all[i].n};
    }
    if (extra) o->groups[k++] = *extra;
    *n = k;
    return o->groups;
}

static uint64_t random_seed(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
        x = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15u ^ (uint64_t)getpid();
    return x >> 1;
}

/* One --logit-bias argument: NAME=BIAS items joined by ','. */
static int add_bias(cli_gen_opts *o, const char *arg, cli_token_find_fn find, void *user) {
    cn_sampling_params *s = &o->gp.sampling;
    for (const char *item = arg; *item;) {
        const size_t len = strcspn(item, ",");
        const char *eq = memchr(item, '=', len);
        char name[32], num[64];
        int64_t id = -1;
        float b;
        if (eq && snprintf(num, sizeof num, "%.*s", (int)(len - (size_t)(eq - item) - 1), eq + 1) < (int)sizeof num) {
            if (find) id = find(user, item, (size_t)(eq - item));
            else if (snprintf(name, sizeof name, "%.*s", (int)(eq - item), item) >= (int)sizeof name ||
                     !cli_parse_i64(name, &id) || id > INT32_MAX)
                id = -1;
        }
        if (id < 0 || !cli_parse_float(num, &b)) {
            cn_cli_errorf("%s: --logit-bias wants ID=BIAS (a token %s and a number or -inf), got '%.*s'", o->cmd,
                          find ? "name" : "id", (int)len, item);
            return 2;
        }
        if (s->n_logit_bias == CLI_MAX_LOGIT_BIAS) {
            cn_cli_errorf("%s: more than %d --logit-bias entries", o->cmd, CLI_MAX_LOGIT_BIAS);
            return 2;
        }
        o->bias[s->n_logit_bias++] = (cn_logit_bias){(int32_t)id, b};
        item += len + (item[len] == ',');
    }
    return 0;
}

int cli_gen_opts_check(cli_gen_opts *o, cli_token_find_fn find, void *user) {
    cn_error err = {0};
    cn_gen_params *g = &o->gp;
    if (g->sampling.seed == CN_SAMPLING_SEED_RANDOM) g->sampling.seed = random_seed();
    if (o->samplers && cn_sampling_set_chain(&g->sampling, o->samplers, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: --samplers: %s", o->cmd, err.msg);
        return 2;
    }
    g->sampling.logit_bias = o->bias;
    for (int32_t i = 0; i < o->n_bias_args; i++)
        if (add_bias(o, o->bias_args[i], find, user)) return 2;
    g->draft = o->draft != NULL;
    if (g->draft && g->lookup_n > 0) {
        cn_cli_errorf("%s: --draft and --lookup are two drafters: give one", o->cmd);
        return 2;
    }
    if ((g->draft || g->lookup_n > 0) && g->beam.n_beams > 1) {
        cn_cli_errorf("%s: speculative decoding (--draft, --lookup) does not combine with --beams", o->cmd);
        return 2;
    }
    if (cn_gen_validate(g, 0, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 2;
    }
    return 0;
}

const char *cli_model_path(const char *cmd, const char *model, char *buf, size_t n) {
    if (model) return model;
    const char *d = getenv("CINDER_MODELS");
    if (d && *d) snprintf(buf, n, "%s/%s", d, CLI_DEFAULT_MODEL);
    else snprintf(buf, n, "%s/.cache/cinder/models/%s", getenv("HOME") ? getenv("HOME") : ".", CLI_DEFAULT_MODEL);
    if (access(buf, R_OK) == 0) return buf;
    cn_cli_errorf("%s: the default model %s is missing: run scripts/fetch_models.sh, or give -m MODEL", cmd, buf);
    return NULL;
}

int cli_session_open(cli_session *s, const cli_gen_opts *o) {
    memset(s, 0, sizeof *s);
    char buf[4096];
    const char *path = cli_model_path(o->cmd, o->model, buf, sizeof buf);
    if (!path) return 1;
    cn_error err = {0};
    if (cn_cli_model_load(path, &s->model, &err) != CN_STATUS_OK ||
        (o->draft && cn_cli_model_load(o->draft, &s->draft, &err) != CN_STATUS_OK)) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 1;
    }
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = o->n_ctx;
    cp.chat_template = o->chat_template;
    cp.draft = s->draft;
    if (cn_context_create(s->model, &cp, &s->ctx, &err) != CN_STATUS_OK ||
        cn_gen_validate(&o->gp, cn_context_n_vocab(s->ctx), &err) != CN_STATUS_OK) { /* ids against the vocabulary */
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return err.status == CN_STATUS_INVALID_ARG ? 2 : 1;
    }
    return 0;
}

void cli_session_close(cli_session *s) {
    cn_context_free(s->ctx);
    cn_model_free(s->draft);
    cn_model_free(s->model);
    memset(s, 0, sizeof *s);
}

void cli_stream_text(void *user, const char *text, size_t n) {
    if (user) *(bool *)user = true;
    fwrite(text, 1, n, stdout);
    fflush(stdout);
}

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig) {
    (void)sig;
    if (++sigint_count > 1) _exit(130);
}

static void sigint_arm(void) {
    sigint_count = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

static void sigint_disarm(void) { signal(SIGINT, SIG_DFL); }

static bool sigint_cancel(void *user) {
    (void)user;
    return sigint_count > 0;
}

cn_status cli_generate(cn_context *c, const cn_prompt *p, cn_gen_params *gp, cn_result *r, cn_error *err) {
    gp->should_cancel = sigint_cancel;
    sigint_arm();
    const cn_status st = cn_context_generate(c, p, gp, r, err);
    sigint_disarm();
    return st;
}

void cli_print_timings(const cn_result *r) {
    const cn_gen_timings *t = &r->timings;
    fprintf(stderr,
            "cinder: prompt %d tokens (%d reused), prefill %.1f tok/s (%.1f ms), time to first token %.1f ms\n"
            "cinder: generated %d tokens, decode %.1f tok/s, inter-token latency mean %.2f ms, p90 %.2f ms; "
            "finish %s\n",
            t->n_prompt_tokens, t->n_cached_tokens, t->prefill_tok_s, t->prefill_ms, t->ttft_ms, t->n_generated_tokens,
            t->decode_tok_s, t->itl_mean_ms, t->itl_p90_ms, cn_finish_reason_str(r->finish_reason));
}

void cli_print_spec(const cn_result *r) {
    const int64_t passes = r->spec_target_passes, made = passes + r->spec_accepted;
    fprintf(stderr,
            "cinder: speculation: %lld target passes for %lld tokens (%.2f per pass); drafted %lld, accepted %lld "
            "(%.1f%%); %lld passes with no draft, %lld draft-model passes\n",
            (long long)passes, (long long)made, passes ? (double)made / (double)passes : 0.0,
            (long long)r->spec_drafted, (long long)r->spec_accepted,
            r->spec_drafted ? 100.0 * (double)r->spec_accepted / (double)r->spec_drafted : 0.0,
            (long long)r->spec_plain_passes, (long long)r->spec_draft_passes);
}
