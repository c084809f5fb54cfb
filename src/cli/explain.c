/* explain.c — `cinder explain`: shows what the sampler chain does to one next-token
 * distribution, stage by stage: the input, the greedy choice, the candidates each active
 * stage keeps (renormalized, dropped tokens marked '-'), and a seeded draw at the end.
 *
 * The distribution comes from the command line (--probs name=p,... or --logits
 * name=l,...), or, in the model mode (`-m MODEL -p PROMPT -n 8`), from a model: the
 * context's next-token logits (cn_context_logits, which reuses the cached prefix, so each
 * step runs one token) after the prompt and the tokens drawn so far; the draw of step k
 * uses seed + k - 1 (so any step can be replayed alone), an end-of-generation token ends
 * the run, as do -n steps and a full context. Every sampling decision is the library's
 * (cn_explain); this file parses flags and prints. The sampling flags are run's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "genopts.h"

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

static void print_label(FILE *out, const char *label) { fprintf(out, "%-*s ", EXPLAIN_LABEL_W - 1, label); }

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

/* "name 0.123  name 0.045 ..." for the first candidates of a set (most probable first),
 * then the shown tokens that are no longer in it as "name -", then "(kept k of n)". */
static void print_set(explain_ctx *x, const cn_candidate *cand, size_t n, bool mark_dropped) {
    char nb[64];
    for (size_t i = 0; i < n && i < EXPLAIN_SHOW; i++)
        fprintf(x->out, "%s%s %.3f", i ? "  " : "", x->name(x->user, cand[i].id, nb, sizeof nb), cand[i].p);
    if (!mark_dropped) {
        fprintf(x->out, "  (%zu tokens)\n", n);
        return;
    }
    for (size_t k = 0; k < x->n_shown; k++) {
        bool present = false;
        for (size_t i = 0; i < n && !present; i++) present = cand[i].id == x->shown[k];
        if (!present) fprintf(x->out, "  %s -", x->name(x->user, x->shown[k], nb, sizeof nb));
    }
    fprintf(x->out, "  (kept %zu of %d)\n", n, (int)x->n_vocab);
}

static void on_stage(void *user, cn_sampler_stage st, const cn_candidate *cand, size_t n) {
    explain_ctx *x = user;
    char label[64];
    stage_label(x->p, st, label, sizeof label);
    print_label(x->out, label);
    print_set(x, cand, n, true);
}

/* The input line: the EXPLAIN_SHOW most probable of the finite logits (ties: lowest id),
 * p = softmax over all of them, as the chain's stages report theirs. */
static size_t input_top(const float *logits, int32_t n_vocab, cn_candidate *top, size_t *n_finite) {
    size_t m = 0;
    float mx = -INFINITY;
    *n_finite = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const float l = logits[i];
        if (l == -INFINITY) continue;
        ++*n_finite;
        if (l > mx) mx = l;
        if (m == EXPLAIN_SHOW && !(l > top[m - 1].logit)) continue; /* ids ascend: a tie loses */
        size_t j = m < EXPLAIN_SHOW ? m++ : EXPLAIN_SHOW - 1;
        for (; j > 0 && l > top[j - 1].logit; j--) top[j] = top[j - 1];
        top[j] = (cn_candidate){i, l, 0.0f};
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] != -INFINITY) sum += expf(logits[i] - mx);
    for (size_t i = 0; i < m; i++) top[i].p = (float)(expf(top[i].logit - mx) / sum);
    return m;
}

static void print_chain(const cn_sampling_params *p) {
    print_label(stdout, "chain");
    for (int32_t k = 0; k < p->n_chain; k++) printf("%s%s", k ? " > " : "", cn_sampler_stage_name(p->chain[k]));
    printf("%sdraw\n", p->n_chain ? " > " : "");
}

/* One explained sampling step over a logits row (n_vocab, borrowed): prints the input,
 * the greedy choice, each active stage and the draw, and returns the drawn token. hist
 * is the token history the penalties see. The stages are written to a buffer first: the
 * greedy line, which cn_explain reports at the end, comes before them. */
static cn_status explain_step(const cn_sampling_params *p, const float *logits, int32_t n_vocab, const int32_t *hist,
                              size_t n_hist, explain_name_fn name, void *user, int32_t *out_token, cn_error *err) {
    char *stages = NULL;
    size_t n_stages = 0;
    FILE *mem = open_memstream(&stages, &n_stages);
    if (!mem) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return err->status = CN_STATUS_NO_MEMORY;
    }
    explain_ctx x = {mem, name, user, p, n_vocab, {0}, 0};
    cn_candidate top[EXPLAIN_SHOW];
    size_t n_finite;
    x.n_shown = input_top(logits, n_vocab, top, &n_finite);
    for (size_t i = 0; i < x.n_shown; i++) x.shown[i] = top[i].id;
    cn_explain_result r;
    const cn_status st = cn_explain(logits, n_vocab, p, hist, n_hist, on_stage, &x, &r, err);
    fclose(mem);
    if (st == CN_STATUS_OK) {
        char nb[64];
        x.out = stdout;
        print_label(stdout, "input");
        print_set(&x, top, n_finite, false);
        print_label(stdout, "greedy");
        printf("%s\n", name(user, r.greedy, nb, sizeof nb));
        fwrite(stages, 1, n_stages, stdout);
        print_label(stdout, "draw");
        printf("%s %.3f  (seed %llu, u %.6f)\n", name(user, r.token, nb, sizeof nb), r.p, (unsigned long long)r.seed,
               r.u);
        *out_token = r.token;
    }
    free(stages);
    return st;
}

/* ---- the toy vocabulary of --probs / --logits ---- */

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

static int32_t toy_find(void *user, const char *name, size_t len) {
    const toy_vocab *v = user;
    for (int32_t i = 0; i < v->n; i++)
        if (strlen(v->names[i]) == len && !strncmp(v->names[i], name, len)) return i;
    return -1;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    const double v = strtod(s, &end);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

/* --probs blue=0.5,gray=0.25 or --logits blue=2,gray=1: names are unique, non-empty, free
 * of spaces; probabilities finite and >= 0 (logit ln p; 0 = never), logits finite or -inf. */
static int parse_vocab(toy_vocab *v, const char *flag, const char *arg, bool probs) {
    if (!(v->text = strdup(arg))) {
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

/* ---- the model mode ---- */

/* A token as text on one line without spaces: its piece (special tokens as their text)
 * escaped as `cinder tokenize` shows it (cn_cli_escape_char), with ' ' shown as U+2423. */
static const char *model_token_name(void *user, int32_t id, char *buf, size_t n) {
    const cn_tokenizer *tok = user;
    char piece[64];
    size_t len = cn_token_to_piece(tok, id, true, piece, sizeof piece);
    if (len > sizeof piece) len = 0;
    size_t k = 0;
    for (size_t i = 0; i < len && k + 8 < n;) {
        char esc[8] = "\xE2\x90\xA3";
        i += piece[i] == ' ' ? 1 : cn_cli_escape_char(piece + i, len - i, '\\', esc);
        k += (size_t)snprintf(buf + k, n - k, "%s", esc);
    }
    if (k == 0) snprintf(buf, n, "#%d", (int)id);
    return buf;
}

/* Up to o->gp.max_tokens steps from the prompt, explaining each draw. */
static int explain_model(const cli_gen_opts *o) {
    cli_session s;
    int rc = cli_session_open(&s, o);
    int32_t *hist = NULL;
    float *logits = NULL;
    char *all = NULL, *pre = NULL;
    cn_error err = {0};
    if (rc) goto out;
    rc = 1;
    const cn_tokenizer *tok = cn_context_tokenizer(s.ctx);
    const int32_t V = cn_context_n_vocab(s.ctx), n_ctx = cn_context_n_ctx(s.ctx),
                  n_tok_vocab = cn_tokenizer_n_vocab(tok);
    size_t n_prompt = 0;
    if (cn_tokenize_alloc(tok, o->prompt, strlen(o->prompt), true, true, &hist, &n_prompt, &err) != CN_STATUS_OK)
        goto fail;
    if (n_prompt == 0 || n_prompt >= (size_t)n_ctx) {
        cn_cli_errorf("explain: the prompt is %zu tokens; it must be at least 1 and less than the context (%d)",
                      n_prompt, (int)n_ctx);
        goto out;
    }
    int32_t *h = realloc(hist, (n_prompt + (size_t)o->gp.max_tokens) * sizeof *h);
    if (!h || !(logits = malloc((size_t)V * sizeof *logits))) {
        if (h) hist = h;
        cn_cli_errorf("explain: out of memory");
        goto out;
    }
    hist = h;
    print_chain(&o->gp.sampling);
    printf("%-*s %zu tokens, vocabulary %d\n", EXPLAIN_LABEL_W - 1, "prompt", n_prompt, (int)V);
    size_t n_hist = n_prompt;
    cn_finish_reason finish = CN_FINISH_LENGTH;
    for (int32_t step = 1;; step++) {
        const int32_t pos = (int32_t)n_hist;
        printf("\nstep %d (position %d)\n", (int)step, (int)pos);
        const cn_prompt pr = {.tokens = hist, .n_tokens = (int32_t)n_hist};
        if (cn_context_logits(s.ctx, &pr, logits, &err) != CN_STATUS_OK) goto fail;
        for (int32_t id = n_tok_vocab; id < V; id++) logits[id] = -INFINITY; /* padding rows: no token */
        cn_sampling_params p = o->gp.sampling;
        p.seed += (uint64_t)(step - 1);
        int32_t t;
        if (explain_step(&p, logits, V, hist, n_hist, model_token_name, (void *)tok, &t, &err) != CN_STATUS_OK)
            goto fail;
        if (cn_tokenizer_is_eog(tok, t)) {
            finish = CN_FINISH_STOP;
            break;
        }
        hist[n_hist++] = t;
        if ((int32_t)(n_hist - n_prompt) == o->gp.max_tokens || pos + 1 >= n_ctx) break;
    }
    size_t n_all = 0, n_pre = 0;
    if (cn_detokenize(tok, hist, n_hist, false, &all, &n_all, &err) != CN_STATUS_OK ||
        cn_detokenize(tok, hist, n_prompt, false, &pre, &n_pre, &err) != CN_STATUS_OK)
        goto fail;
    const size_t from = n_pre <= n_all && !memcmp(all, pre, n_pre) ? n_pre : 0;
    printf("\n%-*s %d tokens, finish %s\n", EXPLAIN_LABEL_W - 1, "generated", (int)(n_hist - n_prompt),
           cn_finish_reason_str(finish));
    printf("%-*s %s%s\n", EXPLAIN_LABEL_W - 1, "text", from ? o->prompt : "", all + from);
    rc = 0;
    goto out;
fail: /* a library call failed: err says why */
    cn_cli_errorf("explain: %s", err.msg);
out:
    free(all);
    free(pre);
    free(hist);
    free(logits);
    cli_session_close(&s);
    return rc;
}

/* ---- the command line ---- */

static const char k_usage[] = "usage: cinder explain --probs NAME=P,... [options]\n"
                              "       cinder explain --logits NAME=L,... [options]\n"
                              "       cinder explain -m MODEL -p PROMPT [options]\n\n"
                              "Shows the sampler chain stage by stage on one distribution: the input, the\n"
                              "greedy choice, what each active stage keeps (renormalized; '-' = dropped), and a\n"
                              "seeded draw. With a model, once per generated token (default 8 steps; tokens are\n"
                              "shown as their text, a space as '\xE2\x90\xA3'); --logit-bias then takes token ids.\n\n";

int cn_cli_explain(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "explain");
    o.gp.sampling = cn_sampling_default_params();
    o.gp.max_tokens = 8;
    o.n_threads = 1;
    o.sampling_title = "sampling (default: every stage off, temperature 1)";
    const char *probs = NULL, *logits = NULL, *history = NULL;
    const cli_flag own[] = {
        CLI_F_STR("--probs", NULL, &probs, "NAME=P,...", "the distribution"),
        CLI_F_STR("--logits", NULL, &logits, "NAME=L,...", "... as logits"),
        CLI_F_STR("--history", NULL, &history, "NAME,...", "tokens generated so far, oldest first (for the penalties)"),
    };
    const cli_flag_group extra = CLI_GROUP("explain", own);
    size_t n_groups;
    const cli_flag_group *groups = cli_gen_groups(&o, CLI_G_MODEL | CLI_G_PROMPT | CLI_G_SAMPLING, &extra, &n_groups);
    const int pr = cli_flags_parse("explain", k_usage, groups, n_groups, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);

    if (o.model || o.prompt) {
        if (!o.model || !o.prompt || probs || logits || history) {
            cn_cli_errorf("explain: the model mode takes -m MODEL and -p PROMPT, and no --probs, --logits or "
                          "--history (see 'cinder explain --help')");
            return 2;
        }
        return cli_gen_opts_check(&o, NULL, NULL) ? 2 : explain_model(&o);
    }
    if (!probs == !logits) {
        cn_cli_errorf("explain: give exactly one of --probs or --logits (see 'cinder explain --help')");
        return 2;
    }
    toy_vocab v = {0};
    int32_t hist[EXPLAIN_MAX_TOKENS];
    size_t n_hist = 0;
    int rc = parse_vocab(&v, probs ? "--probs" : "--logits", probs ? probs : logits, probs != NULL);
    if (rc || (rc = cli_gen_opts_check(&o, toy_find, &v))) goto out;
    rc = 2;
    for (const char *h = history; h && *h;) {
        const size_t len = strcspn(h, ",");
        const int32_t id = toy_find(&v, h, len);
        if (id < 0 || n_hist == EXPLAIN_MAX_TOKENS) {
            cn_cli_errorf("explain: --history: %s '%.*s'", id < 0 ? "unknown token" : "too many tokens at", (int)len,
                          h);
            goto out;
        }
        hist[n_hist++] = id;
        h += len + (h[len] == ',');
    }
    cn_error err = {0};
    if (cn_sampling_validate(&o.gp.sampling, v.n, &err) != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        goto out;
    }
    print_chain(&o.gp.sampling);
    int32_t tok;
    const cn_status st = explain_step(&o.gp.sampling, v.logits, v.n, hist, n_hist, toy_name, &v, &tok, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("explain: %s", err.msg);
        rc = st == CN_STATUS_INVALID_ARG ? 2 : 1; /* e.g. --logit-bias banning every token */
        goto out;
    }
    rc = 0;
out:
    free(v.text);
    return rc;
}
