/* explain.c — `cinder explain`: shows what the sampler chain does to one next-token
 * distribution, stage by stage: the input, the greedy choice, the candidates each active
 * stage keeps (renormalized, dropped tokens marked '-'), and a seeded draw at the end.
 *
 * The distribution comes from the command line (--probs name=p,... or --logits
 * name=l,...), or, in the model mode (`-m MODEL -p PROMPT -n 8`), from a model: then
 * explain_step() runs once per generated token on the request's own sampler, and the
 * generation state (src/gen/generate.h) accepts the token it drew, so stopping and the
 * token history are exactly those of `cinder run`. explain_step takes one logits row, a
 * sampler and a token-name callback, and knows nothing about where the logits came from.
 * This file only parses flags and prints; every sampling decision is the library's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "core/core.h"
#include "gen/generate.h"
#include "gen/sampling.h"

#define EXPLAIN_MAX_TOKENS 1024 /* --probs / --logits entries */
#define EXPLAIN_SHOW 10         /* tokens listed per line */
#define EXPLAIN_LABEL_W 18

/* Writes a printable name of token id into buf and returns it (or another string that
 * lives at least until the next call). */
typedef const char *(*explain_name_fn)(void *user, int32_t id, char *buf, size_t n);

typedef struct {
    FILE *out;
    explain_name_fn name;
    void *user;
    const cn_sampling_params *p;
    int32_t n_vocab;
    int32_t shown[EXPLAIN_SHOW]; /* the input line's tokens: a stage that drops one marks it */
    size_t n_shown;
} explain_ctx;

static void print_label(FILE *out, const char *label) {
    fprintf(out, "%-*s", EXPLAIN_LABEL_W - 1, label);
    fputc(' ', out);
}

static void stage_label(const cn_sampling_params *p, cn_sampler_stage st, char *buf, size_t n) {
    switch (st) {
    case CN_SAMPLER_TEMPERATURE: snprintf(buf, n, "temperature %g", p->temperature); break;
    case CN_SAMPLER_TOP_K: snprintf(buf, n, "top_k %d", (int)p->top_k); break;
    case CN_SAMPLER_TOP_P: snprintf(buf, n, "top_p %g", p->top_p); break;
    case CN_SAMPLER_MIN_P: snprintf(buf, n, "min_p %g", p->min_p); break;
    case CN_SAMPLER_TYPICAL: snprintf(buf, n, "typical %g", p->typical_p); break;
    default: snprintf(buf, n, "%s", cn_sampler_stage_name(st)); break;
    }
}

/* "name 0.123  name 0.045 ..." for the first candidates of a set, then the shown tokens
 * that are no longer in it as "name -", then "(kept k of n)". */
static void print_set(explain_ctx *x, const cn_candidate *cand, size_t n, bool mark_dropped) {
    cn_candidate top[EXPLAIN_SHOW];
    size_t m = cn_cands_top(cand, n, EXPLAIN_SHOW, top);
    char nb[64];
    for (size_t i = 0; i < m; i++)
        fprintf(x->out, "%s%s %.3f", i ? "  " : "", x->name(x->user, top[i].id, nb, sizeof nb), top[i].p);
    if (mark_dropped) {
        bool present[EXPLAIN_SHOW] = {false};
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < x->n_shown; k++)
                if (cand[i].id == x->shown[k]) present[k] = true;
        for (size_t k = 0; k < x->n_shown; k++)
            if (!present[k]) fprintf(x->out, "  %s -", x->name(x->user, x->shown[k], nb, sizeof nb));
    }
    if (mark_dropped)
        fprintf(x->out, "  (kept %zu of %d)\n", n, (int)x->n_vocab);
    else
        fprintf(x->out, "  (%zu tokens)\n", n);
}

static void on_stage(void *user, cn_sampler_stage st, const cn_candidate *cand, size_t n) {
    explain_ctx *x = user;
    char label[64];
    stage_label(x->p, st, label, sizeof label);
    print_label(x->out, label);
    print_set(x, cand, n, true);
}

/* One explained sampling step over a logits row (n_vocab, borrowed): prints the input,
 * the greedy choice, each active stage and the draw to out, and returns the drawn token.
 * s is the request's sampler (its observer is set and cleared here); hist is the token
 * history the penalties see. */
static cn_status explain_step(FILE *out, cn_sampler *s, const float *logits, int32_t n_vocab,
                              const int32_t *hist, size_t n_hist, explain_name_fn name, void *user,
                              int32_t *out_token, cn_error *err) {
    const cn_sampling_params *p = cn_sampler_params(s);
    explain_ctx x = {out, name, user, p, n_vocab, {0}, 0};

    cn_candidate *cand = malloc((size_t)n_vocab * sizeof *cand);
    if (!cand) return cn_err(err, CN_STATUS_NO_MEMORY, "explain: out of memory");
    cn_cands c;
    cn_status st = cn_cands_init(&c, cand, logits, n_vocab, err);
    if (st != CN_STATUS_OK) {
        free(cand);
        return st;
    }
    cn_candidate top[EXPLAIN_SHOW];
    x.n_shown = cn_cands_top(c.data, c.n, EXPLAIN_SHOW, top);
    for (size_t i = 0; i < x.n_shown; i++) x.shown[i] = top[i].id;
    print_label(out, "input");
    print_set(&x, c.data, c.n, false);
    free(cand);

    int32_t g;
    st = cn_sampler_greedy(p, logits, n_vocab, hist, n_hist, &g, err);
    if (st != CN_STATUS_OK) return st;
    char nb[64];
    print_label(out, "greedy");
    fprintf(out, "%s\n", name(user, g, nb, sizeof nb));

    cn_sample_info info;
    cn_sampler_set_observer(s, on_stage, &x);
    st = cn_sampler_sample(s, logits, n_vocab, hist, n_hist, out_token, &info, err);
    cn_sampler_set_observer(s, NULL, NULL);
    if (st != CN_STATUS_OK) return st;
    print_label(out, "draw");
    fprintf(out, "%s %.3f  (seed %llu, u %.6f)\n", name(user, info.token, nb, sizeof nb), info.p,
            (unsigned long long)cn_sampler_seed(s), info.u);
    return CN_STATUS_OK;
}

/* ---- the command line ---- */

typedef struct {
    char *names[EXPLAIN_MAX_TOKENS]; /* point into text */
    float logits[EXPLAIN_MAX_TOKENS];
    int32_t n;
    char *text; /* owned copy of the --probs / --logits argument */
} toy_vocab;

static const char *toy_name(void *user, int32_t id, char *buf, size_t n) {
    const toy_vocab *v = user;
    (void)buf, (void)n;
    return v->names[id];
}

static int32_t toy_find(const toy_vocab *v, const char *name, size_t len) {
    for (int32_t i = 0; i < v->n; i++)
        if (strlen(v->names[i]) == len && !strncmp(v->names[i], name, len)) return i;
    return -1;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE) return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* --probs blue=0.5,gray=0.25 or --logits blue=2,gray=1: names are unique, non-empty, free
 * of spaces; probabilities finite and >= 0 (logit ln p; 0 = never), logits finite or -inf. */
static int parse_vocab(toy_vocab *v, const char *flag, const char *arg, bool probs) {
    v->text = strdup(arg);
    if (!v->text) {
        cn_cli_errorf("explain: out of memory");
        return 1;
    }
    double sum = 0.0;
    char *save = NULL;
    for (char *item = strtok_r(v->text, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) {
            cn_cli_errorf("explain: %s: '%s' is not name=value", flag, item);
            return 2;
        }
        *eq = '\0';
        if (strpbrk(item, " \t\n")) {
            cn_cli_errorf("explain: %s: token name '%s' contains a space", flag, item);
            return 2;
        }
        if (toy_find(v, item, strlen(item)) >= 0) {
            cn_cli_errorf("explain: %s: token '%s' appears twice", flag, item);
            return 2;
        }
        if (v->n == EXPLAIN_MAX_TOKENS) {
            cn_cli_errorf("explain: %s: more than %d tokens", flag, EXPLAIN_MAX_TOKENS);
            return 2;
        }
        double x;
        if (!parse_double(eq + 1, &x) || isnan(x) || (probs ? !(x >= 0 && x < INFINITY) : x == INFINITY)) {
            cn_cli_errorf("explain: %s: %s = '%s' must be %s", flag, item, eq + 1,
                          probs ? "a probability >= 0" : "a finite logit or -inf");
            return 2;
        }
        v->names[v->n] = item;
        v->logits[v->n] = probs ? (float)log(x) : (float)x;
        v->n++;
        sum += x;
    }
    if (v->n == 0) {
        cn_cli_errorf("explain: %s: no tokens given", flag);
        return 2;
    }
    if (probs && !(sum > 0)) {
        cn_cli_errorf("explain: %s: the probabilities sum to 0", flag);
        return 2;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: cinder explain --probs NAME=P,... [options]\n"
            "       cinder explain --logits NAME=L,... [options]\n"
            "       cinder explain -m MODEL -p PROMPT [-n STEPS] [-t THREADS] [--ctx N] [options]\n"
            "\n"
            "Shows the sampler chain stage by stage on one distribution: the input, the\n"
            "greedy choice, what each active stage keeps (renormalized; '-' = dropped), and a\n"
            "seeded draw. With a model, once per generated token (default 8 steps; tokens are\n"
            "shown as their text, a space as '\xE2\x90\xA3').\n"
            "\n"
            "options:\n"
            "  --temp T                temperature, 0 = greedy (default 1)\n"
            "  --top-k K               keep the K most probable (0 = off)\n"
            "  --top-p P               keep the smallest set with mass >= P (1 = off)\n"
            "  --min-p P               keep p >= P * p_max (0 = off)\n"
            "  --typical P             locally typical sampling (1 = off)\n"
            "  --repeat-penalty R      repetition penalty over --history (1 = off)\n"
            "  --presence-penalty X    OpenAI presence penalty (0 = off)\n"
            "  --frequency-penalty X   OpenAI frequency penalty (0 = off)\n"
            "  --last-n N              penalize the last N history tokens (-1 = all)\n"
            "  --history NAME,...      tokens generated so far, oldest first\n"
            "  --bias NAME=B,...       logit bias; B = -inf bans the token\n"
            "  --samplers SPEC         stage order: 'default', 'llama.cpp', or names joined\n"
            "                          by ';' (penalties;top_k;top_p;min_p;typical;temperature)\n"
            "  --seed N                seed of the draw (default: random, printed)\n");
}

/* ---- the model mode ---- */

/* A token as text on one line without spaces: its piece (special tokens as their text),
 * with ' ' shown as U+2423, \n and \t escaped, other control or stray bytes as \xNN. */
static const char *model_token_name(void *user, int32_t id, char *buf, size_t n) {
    const cn_tokenizer *tok = user;
    char piece[64];
    size_t len = cn_token_to_piece(tok, id, true, piece, sizeof piece);
    if (len > sizeof piece) len = 0;
    size_t k = 0;
    for (size_t i = 0; i < len && k + 8 < n;) {
        const unsigned char c = (unsigned char)piece[i];
        size_t cl = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        bool whole = cl > 0 && i + cl <= len && k + cl + 1 < n;
        for (size_t j = 1; whole && j < cl; j++) whole = ((unsigned char)piece[i + j] & 0xC0) == 0x80;
        if (c == ' ')
            k += (size_t)snprintf(buf + k, n - k, "\xE2\x90\xA3");
        else if (c == '\n')
            k += (size_t)snprintf(buf + k, n - k, "\\n");
        else if (c == '\t')
            k += (size_t)snprintf(buf + k, n - k, "\\t");
        else if (c < 0x20 || c == 0x7F || !whole) { /* a control byte, or part of a character */
            k += (size_t)snprintf(buf + k, n - k, "\\x%02X", c);
            cl = 1;
        } else {
            memcpy(buf + k, piece + i, cl);
            k += cl;
        }
        i += cl ? cl : 1;
    }
    if (k == 0) k = (size_t)snprintf(buf, n, "#%d", (int)id);
    buf[k < n ? k : n - 1] = '\0';
    return buf;
}

typedef struct {
    const char *model, *prompt;
    long n_steps, n_threads, n_ctx;
} model_args;

/* Generates up to a->n_steps tokens from the prompt, explaining each draw. */
static int explain_model(const model_args *a, const cn_sampling_params *p) {
    int rc = 1;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_tokenizer *tok = NULL;
    cn_ctx *c = NULL;
    cn_kv *kv = NULL;
    cn_gen *g = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    cn_batch b = {0};
    cn_model_params mp = cn_model_default_params();
    if (cn_model_load(a->model, &mp, &m, &err) != CN_STATUS_OK ||
        cn_tokenizer_load(cn_model_gguf(m), &tok, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    const int32_t V = cn_model_hparams(m)->n_vocab;
    const int32_t n_ctx = a->n_ctx ? (int32_t)a->n_ctx : CN_MIN(cn_model_hparams(m)->n_ctx_train, 4096);
    size_t n_prompt = 0, again = 0, len = strlen(a->prompt);
    if (cn_tokenize(tok, a->prompt, len, true, true, NULL, 0, &n_prompt, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    if (n_prompt == 0 || n_prompt >= (size_t)n_ctx) {
        cn_cli_errorf("explain: the prompt is %zu tokens; it must be at least 1 and less than the context (%d)",
                      n_prompt, (int)n_ctx);
        goto out;
    }
    ids = malloc(n_prompt * sizeof *ids);
    logits = malloc((size_t)V * sizeof *logits);
    if (!ids || !logits || cn_tokenize(tok, a->prompt, len, true, true, ids, n_prompt, &again, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", ids && logits ? err.msg : "out of memory");
        goto out;
    }
    cn_gen_params gp = cn_gen_default_params();
    gp.sampling = *p;
    gp.max_tokens = (int32_t)a->n_steps;
    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = (n_ctx + kp.block_tokens - 1) / kp.block_tokens;
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = (int32_t)a->n_threads;
    cp.n_batch_max = (int32_t)CN_MIN(n_prompt, 512);
    cp.n_ctx = n_ctx;
    if (cn_gen_create(tok, V, &gp, &g, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        rc = err.status == CN_STATUS_INVALID_ARG ? 2 : 1;
        goto out;
    }
    if (cn_kv_create(&kp, &kv, &err) != CN_STATUS_OK || cn_ctx_create(m, &cp, &c, &err) != CN_STATUS_OK ||
        cn_batch_init(&b, 1, &err) != CN_STATUS_OK || cn_gen_begin(g, ids, (int32_t)n_prompt, 0, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    const cn_gen_runner run = {m, c, kv, cp.n_batch_max};
    if (cn_gen_prefill(&run, 0, ids, (int32_t)n_prompt, 0, logits, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }

    cn_sampler *s = cn_gen_sampler(g);
    const cn_sampling_params *sp = cn_sampler_params(s);
    printf("%-*s ", EXPLAIN_LABEL_W - 1, "chain");
    for (int32_t k = 0; k < sp->n_chain; k++) printf("%s%s", k ? " > " : "", cn_sampler_stage_name(sp->chain[k]));
    printf("%sdraw\n", sp->n_chain ? " > " : "");
    printf("%-*s %zu tokens, vocabulary %d\n", EXPLAIN_LABEL_W - 1, "prompt", n_prompt, (int)V);
    for (int32_t step = 1; !cn_gen_done(g); step++) {
        const int32_t pos = (int32_t)n_prompt + step - 1;
        printf("\nstep %d (position %d)\n", (int)step, (int)pos);
        size_t n_hist;
        const int32_t *hist = cn_gen_history(g, &n_hist);
        cn_gen_token t;
        memset(&t, 0, sizeof t);
        if (explain_step(stdout, s, logits, V, hist, n_hist, model_token_name, tok, &t.id, &err) != CN_STATUS_OK) {
            cn_cli_errorf("explain: %s", err.msg);
            goto out;
        }
        cn_gen_step st;
        if (cn_gen_accept(g, &t, -1.0, &st, &err) != CN_STATUS_OK) {
            cn_cli_errorf("explain: %s", err.msg);
            goto out;
        }
        if (st.done) break;
        if (pos + 1 >= n_ctx) {
            cn_gen_finish(g, CN_FINISH_LENGTH);
            break;
        }
        cn_batch_clear(&b);
        cn_batch_add(&b, t.id, pos, 0, true);
        if (cn_forward(m, c, &b, kv, logits, &err) != CN_STATUS_OK) {
            cn_cli_errorf("explain: %s", err.msg);
            goto out;
        }
    }
    size_t n_text;
    const char *text = cn_gen_text(g, &n_text);
    printf("\n%-*s %d tokens, finish %s\n", EXPLAIN_LABEL_W - 1, "generated", (int)cn_gen_n_generated(g),
           cn_finish_reason_str(cn_gen_finish_reason(g)));
    printf("%-*s %s%.*s\n", EXPLAIN_LABEL_W - 1, "text", a->prompt, (int)n_text, text);
    rc = 0;
out:
    cn_batch_free(&b);
    cn_gen_free(g);
    free(ids);
    free(logits);
    cn_ctx_free(c);
    cn_kv_free(kv);
    cn_tokenizer_free(tok);
    cn_model_free(m);
    return rc;
}

typedef struct {
    const char *name;
    const char *value;
} flag_arg;

int cn_cli_explain(int argc, char **argv) {
    cn_sampling_params p = cn_sampling_default_params();
    toy_vocab v = {0};
    const char *probs = NULL, *logits = NULL, *history = NULL, *bias = NULL, *samplers = NULL;
    cn_logit_bias biases[EXPLAIN_MAX_TOKENS];
    int32_t hist[EXPLAIN_MAX_TOKENS];
    size_t n_hist = 0;
    int rc = 2;
    cn_sampler *s = NULL;
    model_args margs = {NULL, NULL, 8, 1, 0};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "-p") || !strcmp(a, "-n") || !strcmp(a, "-t") || !strcmp(a, "-c")) {
            if (i + 1 >= argc) {
                cn_cli_errorf("explain: %s needs a value", a);
                goto out;
            }
            const char *v = argv[++i];
            long long ln;
            if (a[1] == 'm') margs.model = v;
            else if (a[1] == 'p') margs.prompt = v;
            else if (!parse_int(v, a[1] == 'c' ? 0 : 1, a[1] == 'n' ? 1024 : a[1] == 't' ? 1024 : 1 << 24, &ln)) {
                cn_cli_errorf("explain: %s: '%s' is not an integer in range (%s)", a, v,
                              a[1] == 'n' ? "1..1024 steps" : a[1] == 't' ? "1..1024 threads" : "0..2^24, 0 = the model's");
                goto out;
            } else if (a[1] == 'n') margs.n_steps = (long)ln;
            else if (a[1] == 't') margs.n_threads = ln > 64 ? 64 : (long)ln;
            else margs.n_ctx = (long)ln;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            cn_cli_errorf("explain: unexpected argument '%s' (see 'cinder explain --help')", a);
            goto out;
        }
        /* --flag value or --flag=value */
        char name[32];
        const char *val;
        const char *eq = strchr(a, '=');
        if (eq) {
            size_t len = (size_t)(eq - a);
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, a, len);
            name[len] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
            if (i + 1 >= argc) {
                cn_cli_errorf("explain: %s needs a value", a);
                goto out;
            }
            val = argv[++i];
        }
        double d;
        long long ll;
        float *fp = NULL;
        if (!strcmp(name, "--model")) margs.model = val;
        else if (!strcmp(name, "--prompt")) margs.prompt = val;
        else if (!strcmp(name, "--ctx") || !strcmp(name, "--threads") || !strcmp(name, "--max-tokens")) {
            const bool steps = name[2] == 'm', thr = name[2] == 't';
            if (!parse_int(val, steps || thr ? 1 : 0, steps || thr ? 1024 : 1 << 24, &ll)) {
                cn_cli_errorf("explain: %s: '%s' is not an integer in range", name, val);
                goto out;
            }
            if (steps) margs.n_steps = (long)ll;
            else if (thr) margs.n_threads = ll > 64 ? 64 : (long)ll;
            else margs.n_ctx = (long)ll;
        } else if (!strcmp(name, "--probs")) probs = val;
        else if (!strcmp(name, "--logits")) logits = val;
        else if (!strcmp(name, "--history")) history = val;
        else if (!strcmp(name, "--bias")) bias = val;
        else if (!strcmp(name, "--samplers")) samplers = val;
        else if (!strcmp(name, "--temp") || !strcmp(name, "--temperature")) fp = &p.temperature;
        else if (!strcmp(name, "--top-p")) fp = &p.top_p;
        else if (!strcmp(name, "--min-p")) fp = &p.min_p;
        else if (!strcmp(name, "--typical")) fp = &p.typical_p;
        else if (!strcmp(name, "--repeat-penalty")) fp = &p.repetition_penalty;
        else if (!strcmp(name, "--presence-penalty")) fp = &p.presence_penalty;
        else if (!strcmp(name, "--frequency-penalty")) fp = &p.frequency_penalty;
        else if (!strcmp(name, "--top-k") || !strcmp(name, "--last-n")) {
            if (!parse_int(val, INT32_MIN, INT32_MAX, &ll)) {
                cn_cli_errorf("explain: %s: '%s' is not an integer", name, val);
                goto out;
            }
            if (!strcmp(name, "--top-k"))
                p.top_k = (int32_t)ll;
            else
                p.penalty_last_n = (int32_t)ll;
        } else if (!strcmp(name, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long sd = strtoull(val, &end, 10);
            if (end == val || *end || errno == ERANGE || val[0] == '-') {
                cn_cli_errorf("explain: --seed: '%s' is not an integer in [0, 2^64)", val);
                goto out;
            }
            p.seed = (uint64_t)sd;
        } else {
            cn_cli_errorf("explain: unknown option '%s' (see 'cinder explain --help')", name);
            goto out;
        }
        if (fp) {
            if (!parse_double(val, &d)) {
                cn_cli_errorf("explain: %s: '%s' is not a number", name, val);
                goto out;
            }
            *fp = (float)d;
        }
    }

    if (margs.model || margs.prompt) {
        cn_error merr = {0};
        if (!margs.model || !margs.prompt || probs || logits || history || bias) {
            cn_cli_errorf("explain: the model mode takes -m MODEL and -p PROMPT, and no --probs, --logits, "
                          "--history or --bias (see 'cinder explain --help')");
            goto out;
        }
        if (samplers && cn_sampling_set_chain(&p, samplers, &merr) != CN_STATUS_OK) {
            cn_cli_errorf("explain: %s", merr.msg);
            goto out;
        }
        if (cn_sampling_validate(&p, 0, &merr) != CN_STATUS_OK) {
            cn_cli_errorf("explain: %s", merr.msg);
            goto out;
        }
        rc = explain_model(&margs, &p);
        goto out;
    }
    if (!probs == !logits) {
        cn_cli_errorf("explain: give exactly one of --probs or --logits (see 'cinder explain --help')");
        goto out;
    }
    rc = parse_vocab(&v, probs ? "--probs" : "--logits", probs ? probs : logits, probs != NULL);
    if (rc) goto out;
    rc = 2;

    cn_error err = {0};
    if (samplers && cn_sampling_set_chain(&p, samplers, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    if (history) {
        const char *h = history;
        while (*h) {
            size_t len = strcspn(h, ",");
            int32_t id = toy_find(&v, h, len);
            if (id < 0 || n_hist == EXPLAIN_MAX_TOKENS) {
                cn_cli_errorf("explain: --history: %s '%.*s'", id < 0 ? "unknown token" : "too many tokens at",
                              (int)len, h);
                goto out;
            }
            hist[n_hist++] = id;
            h += len;
            if (*h == ',') h++;
        }
    }
    if (bias) {
        const char *b = bias;
        int32_t nb = 0;
        while (*b) {
            size_t len = strcspn(b, ",");
            const char *eq = memchr(b, '=', len);
            int32_t id = eq ? toy_find(&v, b, (size_t)(eq - b)) : -1;
            char num[64];
            size_t nlen = eq ? len - (size_t)(eq - b) - 1 : 0;
            if (id < 0 || nlen >= sizeof num || nb == EXPLAIN_MAX_TOKENS) {
                cn_cli_errorf("explain: --bias: '%.*s' is not KNOWN_TOKEN=BIAS", (int)len, b);
                goto out;
            }
            memcpy(num, eq + 1, nlen);
            num[nlen] = '\0';
            double bv;
            if (!parse_double(num, &bv)) {
                cn_cli_errorf("explain: --bias: '%s' is not a number", num);
                goto out;
            }
            biases[nb++] = (cn_logit_bias){id, (float)bv};
            b += len;
            if (*b == ',') b++;
        }
        p.logit_bias = biases;
        p.n_logit_bias = nb;
    }

    if (cn_sampling_validate(&p, v.n, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    rc = 1;
    if (cn_sampler_create(&p, v.n, &s, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }

    printf("%-*s ", EXPLAIN_LABEL_W - 1, "chain");
    const cn_sampling_params *sp = cn_sampler_params(s);
    for (int32_t k = 0; k < sp->n_chain; k++) printf("%s%s", k ? " > " : "", cn_sampler_stage_name(sp->chain[k]));
    printf("%sdraw\n", sp->n_chain ? " > " : "");
    int32_t tok;
    cn_status st = explain_step(stdout, s, v.logits, v.n, hist, n_hist, toy_name, &v, &tok, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        rc = st == CN_STATUS_INVALID_ARG ? 2 : 1; /* e.g. --bias banning every token */
        goto out;
    }
    rc = 0;
out:
    cn_sampler_free(s);
    free(v.text);
    return rc;
}
