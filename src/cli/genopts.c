/* genopts.c — the generation flags and model setup shared by `cinder run` and
 * `cinder chat` (see genopts.h). Values are parsed strictly (the whole argument must be a
 * number); their ranges are checked by the library (cn_gen_validate), so the CLI and the
 * API give the same message for the same mistake. */
#include "genopts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"
#include "gen/rng.h"

void cli_gen_opts_init(cli_gen_opts *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = n < 1 ? 1 : n > 64 ? 64 : n;
    o->gp = cn_gen_default_params();
    o->gp.sampling.temperature = 0.8f;
    o->gp.sampling.top_k = 40;
    o->gp.sampling.top_p = 0.95f;
    o->gp.sampling.min_p = 0.05f;
    o->gp.stop = o->stops;
    o->gp.sampling.logit_bias = o->bias;
    o->spec = cn_spec_default_params();
}

void cli_gen_opts_help(FILE *f) {
    fprintf(f,
            "model and context:\n"
            "  -m, --model PATH          GGUF model (default $CINDER_MODELS or ~/.cache/cinder/models/\n"
            "                            " CLI_DEFAULT_MODEL ")\n"
            "  -t, --threads N           threads (default: all CPUs)\n"
            "  -c, --ctx N               context length (default: the model's, at most 4096)\n"
            "  --system TEXT             system message (chat template)\n"
            "  --chat-template NAME      chatml, gemma or llama3 (default: from the model)\n"
            "generation:\n"
            "  -n, --max-tokens N        most tokens to generate (default 256)\n"
            "  --stop STR                stop string, cut from the output (repeatable)\n"
            "  --ignore-eos              keep going past end-of-generation tokens\n"
            "  --logprobs N              report each token's log-probability and N alternatives\n"
            "  --logprobs-after-chain    ... under the sampled distribution (default: raw model)\n"
            "  --beams N                 beam search with N beams (1 = sampling)\n"
            "  --length-penalty X        beam score = logprob / length^X (default 1)\n"
            "  --early-stopping          beam search stops once N sequences have finished\n"
            "sampling (defaults as llama.cpp: temp 0.8, top-k 40, top-p 0.95, min-p 0.05):\n"
            "  --temp T                  temperature; 0 = greedy\n"
            "  --top-k K  --top-p P  --min-p P  --typical P\n"
            "  --repeat-penalty R  --repeat-last-n N  --presence-penalty X  --frequency-penalty X\n"
            "  --logit-bias ID=BIAS      add BIAS to token ID's logit; -inf bans it (repeatable)\n"
            "  --seed N                  random seed in [0, 2^63) (default: random, reported by --json)\n"
            "  --samplers ORDER          stage order: 'default' (HF/vLLM), 'llama.cpp', or names\n"
            "                            joined by ';' (logit_bias;penalties;temperature;top_k;...)\n"
            "speculative decoding (the same tokens as without it, fewer target passes):\n"
            "  --draft MODEL             a smaller model with the same vocabulary drafts tokens\n"
            "  --lookup N                draft from the longest earlier match of the last 1..N tokens\n"
            "                            in the prompt and output (n-gram lookup; no draft model)\n"
            "  --draft-max K             the longest draft per step, 1..16 (default 8; adapts)\n");
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || (errno == ERANGE && isfinite(v))) return false;
    *out = (float)v;
    return true;
}

static const char *const FLAGS_NOVAL[] = {"--ignore-eos", "--logprobs-after-chain", "--early-stopping", "--json",
                                          "--chat"};

int cli_gen_opts_parse(cli_gen_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    char name[48];
    const char *val = NULL;
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    if (eq) {
        snprintf(name, sizeof name, "%.*s", (int)CN_MIN((size_t)(eq - a), sizeof name - 1), a);
        val = eq + 1;
    } else {
        snprintf(name, sizeof name, "%s", a);
    }
    for (size_t k = 0; k < CN_ARRAY_LEN(FLAGS_NOVAL); k++) {
        if (strcmp(name, FLAGS_NOVAL[k])) continue;
        if (val) {
            cn_cli_errorf("%s: %s takes no value", o->cmd, name);
            return -1;
        }
        cn_gen_params *g = &o->gp;
        if (k == 0) g->sampling.ignore_eos = true;
        else if (k == 1) g->logprobs_after_chain = true;
        else if (k == 2) g->beam.early_stopping = true;
        else if (k == 3) o->json = true;
        else o->chat = true;
        return 1;
    }

    static const char *const WITH_VALUE[] = {
        "-m", "--model", "-p", "--prompt", "-n", "--max-tokens", "-t", "--threads", "-c", "--ctx",
        "--temp", "--temperature", "--top-k", "--top-p", "--min-p", "--typical", "--repeat-penalty",
        "--repeat-last-n", "--presence-penalty", "--frequency-penalty", "--logit-bias", "--seed", "--stop",
        "--logprobs", "--beams", "--length-penalty", "--samplers", "--system", "--chat-template", "--draft",
        "--draft-max", "--lookup"};
    bool known = false;
    for (size_t k = 0; k < CN_ARRAY_LEN(WITH_VALUE) && !known; k++) known = !strcmp(name, WITH_VALUE[k]);
    if (!known) return 0;
    if (!val) {
        if (*i + 1 >= argc) {
            cn_cli_errorf("%s: %s needs a value", o->cmd, name);
            return -1;
        }
        val = argv[++*i];
    }

    cn_sampling_params *s = &o->gp.sampling;
    long l;
    float *fp = NULL;
    if (!strcmp(name, "-m") || !strcmp(name, "--model")) o->model = val;
    else if (!strcmp(name, "-p") || !strcmp(name, "--prompt")) o->prompt = val;
    else if (!strcmp(name, "--system")) o->system = val;
    else if (!strcmp(name, "--chat-template")) o->chat_template = val;
    else if (!strcmp(name, "--samplers")) o->samplers = val;
    else if (!strcmp(name, "--draft")) o->draft = val;
    else if (!strcmp(name, "--temp") || !strcmp(name, "--temperature")) fp = &s->temperature;
    else if (!strcmp(name, "--top-p")) fp = &s->top_p;
    else if (!strcmp(name, "--min-p")) fp = &s->min_p;
    else if (!strcmp(name, "--typical")) fp = &s->typical_p;
    else if (!strcmp(name, "--repeat-penalty")) fp = &s->repetition_penalty;
    else if (!strcmp(name, "--presence-penalty")) fp = &s->presence_penalty;
    else if (!strcmp(name, "--frequency-penalty")) fp = &s->frequency_penalty;
    else if (!strcmp(name, "--length-penalty")) fp = &o->gp.beam.length_penalty;
    else if (!strcmp(name, "--stop")) {
        if (o->gp.n_stop == CN_GEN_MAX_STOP) {
            cn_cli_errorf("%s: more than %d --stop strings", o->cmd, CN_GEN_MAX_STOP);
            return -1;
        }
        o->stops[o->gp.n_stop++] = val;
    } else if (!strcmp(name, "--logit-bias")) {
        const char *e2 = strchr(val, '=');
        char idbuf[32];
        float b;
        if (!e2 || (size_t)(e2 - val) >= sizeof idbuf) {
            cn_cli_errorf("%s: --logit-bias wants ID=BIAS, got '%s'", o->cmd, val);
            return -1;
        }
        snprintf(idbuf, sizeof idbuf, "%.*s", (int)(e2 - val), val);
        if (!parse_long(idbuf, 0, INT32_MAX, &l) || !parse_float(e2 + 1, &b)) {
            cn_cli_errorf("%s: --logit-bias wants ID=BIAS (a token id and a number or -inf), got '%s'", o->cmd, val);
            return -1;
        }
        if (s->n_logit_bias == CLI_MAX_LOGIT_BIAS) {
            cn_cli_errorf("%s: more than %d --logit-bias entries", o->cmd, CLI_MAX_LOGIT_BIAS);
            return -1;
        }
        o->bias[s->n_logit_bias++] = (cn_logit_bias){(int32_t)l, b};
    } else if (!strcmp(name, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long sd = strtoull(val, &end, 10);
        if (end == val || *end || errno == ERANGE || val[0] == '-' || sd > INT64_MAX) {
            cn_cli_errorf("%s: --seed wants an integer in [0, 2^63), got '%s'", o->cmd, val);
            return -1;
        }
        s->seed = (uint64_t)sd;
    } else {
        /* integers; ranges beyond int32 are refused here, the rest by the library */
        if (!parse_long(val, INT32_MIN, INT32_MAX, &l)) {
            cn_cli_errorf("%s: %s wants an integer, got '%s'", o->cmd, name, val);
            return -1;
        }
        if (!strcmp(name, "-n") || !strcmp(name, "--max-tokens")) o->gp.max_tokens = (int32_t)l;
        else if (!strcmp(name, "--top-k")) s->top_k = (int32_t)l;
        else if (!strcmp(name, "--repeat-last-n")) s->penalty_last_n = (int32_t)l;
        else if (!strcmp(name, "--logprobs")) s->n_logprobs = (int32_t)l;
        else if (!strcmp(name, "--beams")) o->gp.beam.n_beams = (int32_t)l;
        else if (!strcmp(name, "--draft-max")) o->spec.n_draft_max = (int32_t)l;
        else if (!strcmp(name, "--lookup")) o->spec.lookup_n = (int32_t)l;
        else if (!strcmp(name, "-t") || !strcmp(name, "--threads")) {
            if (l < 1 || l > 1024) {
                cn_cli_errorf("%s: %s = %ld is out of range: must be in [1, 1024]", o->cmd, name, l);
                return -1;
            }
            o->n_threads = l > 64 ? 64 : l;
        } else { /* -c / --ctx */
            if (l < 0 || l > (1 << 24)) {
                cn_cli_errorf("%s: %s = %ld is out of range: must be in [0, 16777216] (0 = the model's)", o->cmd,
                              name, l);
                return -1;
            }
            o->n_ctx = l;
        }
    }
    if (fp && !parse_float(val, fp)) {
        cn_cli_errorf("%s: %s wants a number, got '%s'", o->cmd, name, val);
        return -1;
    }
    return 1;
}

int cli_gen_opts_check(cli_gen_opts *o) {
    cn_error err = {0};
    if (o->gp.sampling.seed == CN_SAMPLING_SEED_RANDOM) { /* pick it here: JSON integers are int64 */
        uint64_t x = (uint64_t)cn_time_us() ^ ((uint64_t)getpid() << 32);
        o->gp.sampling.seed = cn_splitmix64(&x) >> 1;
    }
    if (o->samplers && cn_sampling_set_chain(&o->gp.sampling, o->samplers, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: --samplers: %s", o->cmd, err.msg);
        return 2;
    }
    if (cn_gen_validate(&o->gp, 0, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 2;
    }
    return 0;
}

const char *cli_model_path(const cli_gen_opts *o, char *buf, size_t n) {
    if (o->model) return o->model;
    const char *d = getenv("CINDER_MODELS");
    if (d && *d)
        snprintf(buf, n, "%s/%s", d, CLI_DEFAULT_MODEL);
    else
        snprintf(buf, n, "%s/.cache/cinder/models/%s", getenv("HOME") ? getenv("HOME") : ".", CLI_DEFAULT_MODEL);
    return buf;
}

int cli_engine_load(cli_engine *e, const cli_gen_opts *o) {
    memset(e, 0, sizeof *e);
    char buf[4096];
    const char *path = cli_model_path(o, buf, sizeof buf);
    if (!o->model && access(path, R_OK) != 0) {
        cn_cli_errorf("%s: the default model %s is missing: run scripts/fetch_models.sh, or give -m MODEL", o->cmd,
                      path);
        return 1;
    }
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    if (cn_model_load(path, &mp, &e->model, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(e->model), &e->tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 1;
    }
    const cn_hparams *hp = cn_model_hparams(e->model);
    e->n_vocab = hp->n_vocab;
    e->n_ctx = o->n_ctx ? (int32_t)o->n_ctx : CN_MIN(hp->n_ctx_train, 4096);
    return 0;
}

int cli_engine_start(cli_engine *e, const cli_gen_opts *o, int32_t n_batch, int32_t n_seqs, int64_t n_blocks) {
    cn_error err = {0};
    cn_kv_params kp = cn_model_kv_params(e->model);
    kp.max_seqs = n_seqs;
    kp.n_blocks = n_blocks > 0 ? n_blocks : (int64_t)n_seqs * ((e->n_ctx + kp.block_tokens - 1) / kp.block_tokens);
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = (int32_t)o->n_threads;
    cp.n_batch_max = n_batch;
    cp.n_ctx = e->n_ctx;
    if (cn_kv_create(&kp, &e->kv, &err) != CN_STATUS_OK || cn_ctx_create(e->model, &cp, &e->ctx, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 1;
    }
    e->run = (cn_gen_runner){e->model, e->ctx, e->kv, n_batch};
    return 0;
}

int cli_spec_start(cli_engine *e, cli_engine *d, cli_gen_opts *o) {
    memset(d, 0, sizeof *d);
    cn_error err = {0};
    if (o->draft && o->spec.lookup_n > 0) {
        cn_cli_errorf("%s: --draft and --lookup are two drafters: give one", o->cmd);
        return 2;
    }
    if ((o->draft || o->spec.lookup_n > 0) && o->gp.beam.n_beams > 1) {
        cn_cli_errorf("%s: speculative decoding (--draft, --lookup) does not combine with --beams", o->cmd);
        return 2;
    }
    if (cn_spec_validate(&o->spec, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return 2;
    }
    if (!o->draft) return 0;
    cli_gen_opts od = *o;
    od.model = o->draft;
    od.n_ctx = e->n_ctx;
    if (cli_engine_load(d, &od)) return 1;
    if (cn_spec_check_vocab(e->tok, d->tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: --draft %s: %s", o->cmd, o->draft, err.msg);
        return 2;
    }
    d->n_ctx = e->n_ctx;
    if (cli_engine_start(d, &od, e->run.n_batch, 1, 0)) return 1;
    o->spec.draft = &d->run;
    o->spec.draft_seq = 0;
    return 0;
}

void cli_engine_close(cli_engine *e) {
    cn_ctx_free(e->ctx);
    cn_kv_free(e->kv);
    cn_tokenizer_free(e->tok);
    cn_model_free(e->model);
    memset(e, 0, sizeof *e);
}

cn_chat_template *cli_chat_template(const cli_engine *e, const cli_gen_opts *o) {
    cn_chat_template *t = NULL;
    cn_error err = {0};
    cn_status st;
    if (o->chat_template) {
        st = cn_chat_template_from_name(o->chat_template, &t, &err);
    } else {
        cn_gguf_str js = {0};
        const bool has = cn_gguf_get_str(cn_model_gguf(e->model), "tokenizer.chat_template", &js);
        st = cn_chat_template_detect(has ? js.ptr : NULL, has ? js.len : 0, &t, &err);
    }
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", o->cmd, err.msg);
        return NULL;
    }
    return t;
}

int cli_add_end_of_turn_stop(cli_gen_opts *o, const cli_engine *e, const cn_chat_template *t) {
    const char *eot = cn_chat_template_end_of_turn(t);
    const int32_t id = cn_tokenizer_find(e->tok, eot);
    if (id >= 0 && cn_tokenizer_is_eog(e->tok, id)) return 0;
    if (o->gp.n_stop == CN_GEN_MAX_STOP) {
        cn_cli_errorf("%s: no room for the end-of-turn stop string '%s' (at most %d --stop)", o->cmd, eot,
                      CN_GEN_MAX_STOP);
        return 2;
    }
    o->stops[o->gp.n_stop++] = eot;
    return 0;
}

int32_t *cli_tokenize(const cli_engine *e, const char *text, int32_t *n) {
    size_t cnt = 0, again = 0, len = strlen(text);
    cn_error err = {0};
    if (cn_tokenize(e->tok, text, len, true, true, NULL, 0, &cnt, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        return NULL;
    }
    if (cnt > INT32_MAX - 1) {
        cn_cli_errorf("the text is %zu tokens: too long", cnt);
        return NULL;
    }
    int32_t *ids = malloc((cnt + 1) * sizeof *ids);
    if (!ids || cn_tokenize(e->tok, text, len, true, true, ids, cnt, &again, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", ids ? err.msg : "out of memory");
        free(ids);
        return NULL;
    }
    *n = (int32_t)cnt;
    return ids;
}

static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig) {
    (void)sig;
    if (++sigint_count > 1) _exit(130);
}

void cli_sigint_arm(void) {
    sigint_count = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

void cli_sigint_disarm(void) {
    signal(SIGINT, SIG_DFL);
}

bool cli_sigint_cancel(void *user) {
    (void)user;
    return sigint_count > 0;
}

void cli_print_timings(const cn_gen_timings *t, cn_finish_reason r) {
    fprintf(stderr,
            "cinder: prompt %d tokens (%d reused), prefill %.1f tok/s (%.1f ms), time to first token %.1f ms\n"
            "cinder: generated %d tokens, decode %.1f tok/s, inter-token latency mean %.2f ms, p90 %.2f ms; "
            "finish %s\n",
            t->n_prompt_tokens, t->n_cached_tokens, t->prefill_tok_s, t->prefill_ms, t->ttft_ms,
            t->n_generated_tokens, t->decode_tok_s, t->itl_mean_ms, t->itl_p90_ms, cn_finish_reason_str(r));
}

void cli_print_spec(const cn_spec_stats *s) {
    const int64_t made = s->steps + s->accepted;
    fprintf(stderr,
            "cinder: speculation: %lld target passes for %lld tokens (%.2f per pass); drafted %lld, accepted %lld "
            "(%.1f%%); %lld passes with no draft, %lld draft-model passes\n",
            (long long)s->steps, (long long)made, s->steps ? (double)made / (double)s->steps : 0.0,
            (long long)s->drafted, (long long)s->accepted,
            s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0, (long long)s->plain_steps,
            (long long)s->draft_evals);
}
