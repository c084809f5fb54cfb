/* spec.c — speculative decoding for one request (spec.h): the drafters (n-gram lookup
 * over the request's history, a draft model's greedy continuation) and the loop that
 * verifies their guesses against the target in one batched forward pass. Owns no model:
 * it borrows the runners; the request's sampler and stop logic stay in cn_gen. */
#include "spec.h"

#include <stdlib.h>
#include <string.h>

cn_spec_params cn_spec_default_params(void) {
    return (cn_spec_params){.draft = NULL, .draft_seq = 0, .lookup_n = 0, .n_draft_max = 8, .adaptive = true};
}

cn_spec_rate cn_spec_rate_prior(void) { return (cn_spec_rate){.hit = 1.2, .try = 2}; }

void cn_spec_rate_update(cn_spec_rate *r, int32_t drafted, int32_t accepted) {
    r->hit = 0.9 * r->hit + accepted;
    r->try = 0.9 * r->try + (accepted < drafted ? accepted + 1 : drafted);
}

double cn_spec_rate_value(const cn_spec_rate *r) { return r->hit / r->try; }

cn_status cn_spec_validate(const cn_spec_params *p, cn_error *err) {
    if (!p) return cn_err(err, CN_STATUS_INVALID_ARG, "speculation: NULL parameters");
    if (p->n_draft_max < 1 || p->n_draft_max > CN_SPEC_MAX_DRAFT)
        return cn_err(err, CN_STATUS_INVALID_ARG, "draft length %d is out of range: must be in [1, %d]",
                      (int)p->n_draft_max, CN_SPEC_MAX_DRAFT);
    if (p->lookup_n < 0 || p->lookup_n > 8)
        return cn_err(err, CN_STATUS_INVALID_ARG, "lookup n-gram length %d is out of range: must be in [0, 8]",
                      (int)p->lookup_n);
    if (!p->draft) return CN_STATUS_OK;
    if (!p->draft->model || !p->draft->fwd || !p->draft->kv || p->draft->n_batch < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "speculation: incomplete draft runner");
    return CN_STATUS_OK;
}

cn_status cn_spec_check_vocab(const cn_tokenizer *target, const cn_tokenizer *draft, cn_error *err) {
    if (!target || !draft) return cn_err(err, CN_STATUS_INVALID_ARG, "speculation: NULL tokenizer");
    const int32_t nt = cn_tokenizer_n_vocab(target), nd = cn_tokenizer_n_vocab(draft);
    if (nt != nd)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "the draft model's vocabulary has %d tokens, the target's %d: a draft must share the "
                      "target's vocabulary",
                      (int)nd, (int)nt);
    for (int32_t id = 0; id < nt; id++) {
        size_t la = 0, lb = 0;
        const char *a = cn_tokenizer_token_text(target, id, &la), *b = cn_tokenizer_token_text(draft, id, &lb);
        if (la != lb || (la && memcmp(a, b, la)))
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "the draft model's vocabulary differs from the target's at token %d ('%.*s' vs '%.*s')",
                          (int)id, (int)CN_MIN(lb, (size_t)40), b ? b : "", (int)CN_MIN(la, (size_t)40), a ? a : "");
    }
    return CN_STATUS_OK;
}

int32_t cn_spec_lookup(const int32_t *hist, size_t n, int32_t max_n, int32_t k, int32_t *out) {
    if (!hist || k < 1 || max_n < 1) return 0;
    for (int32_t m = CN_MIN(max_n, (int32_t)CN_MIN(n, (size_t)INT32_MAX) - 1); m >= 1; m--) {
        const int32_t *suf = hist + n - (size_t)m;
        /* the most recent earlier occurrence with at least one token after it */
        for (size_t j = n - (size_t)m; j-- > 0;) {
            if (memcmp(hist + j, suf, (size_t)m * sizeof *hist)) continue;
            const size_t from = j + (size_t)m, cnt = CN_MIN((size_t)k, n - from);
            memcpy(out, hist + from, cnt * sizeof *out);
            return (int32_t)cnt;
        }
    }
    return 0;
}

/* The draft model's state: how much of the request's history its cache holds. */
typedef struct {
    const cn_gen_runner *r;
    int32_t seq;
    int32_t len;   /* history tokens in the draft cache (positions 0..len) */
    float *logits; /* (n_vocab) */
    double ms;     /* time of the last draft_propose */
} draft_state;

/* The adaptive draft length. A verify pass of 1 + k rows costs more than a one-row
 * decode step (by how much depends on the model and the CPU: on a small CPU prefill is
 * only a few times faster per row than decode), a draft model adds k passes of its own,
 * and a step makes 1 + (accepted drafts) tokens: with per-draft acceptance a, 1 + a +
 * ... + a^k on average. So the length planned is the k in 0..kmax with the most tokens
 * per millisecond under the costs and the rate measured so far in this request; k = 0 is
 * plain decoding, which is how speculation turns itself off when it does not pay. After
 * 16 plain steps in a row one speculative step is tried again (the text may have
 * changed), so the estimates stay current. */
typedef struct {
    double t1;      /* ms of a one-row target pass (smoothed); 0 until measured */
    double per_row; /* ms each further row adds (smoothed); < 0 until measured */
    double t_draft; /* ms per drafted token spent drafting (smoothed) */
    cn_spec_rate rate;
    int32_t plain_run;
} planner;

static double tokens_per_ms(const planner *pl, int32_t k) {
    const double a = cn_spec_rate_value(&pl->rate);
    double e = 0, ai = 1;
    for (int32_t i = 0; i <= k; i++, ai *= a) e += ai;
    return e / (pl->t1 + (pl->per_row + pl->t_draft) * k);
}

static int32_t plan(planner *pl, int32_t kmax) {
    if (pl->t1 <= 0) return 0;                   /* measure a plain step first */
    if (pl->per_row < 0) return CN_MIN(kmax, 4); /* then a speculative one */
    int32_t best = 0, best_pos = 1;
    double f_best = tokens_per_ms(pl, 0), f_pos = 0;
    for (int32_t k = 1; k <= kmax; k++) {
        const double f = tokens_per_ms(pl, k);
        if (f > f_best) best = k, f_best = f;
        if (f > f_pos) best_pos = k, f_pos = f;
    }
    if (best == 0 && ++pl->plain_run >= 16) {
        pl->plain_run = 0;
        return best_pos;
    }
    if (best > 0) pl->plain_run = 0;
    return best;
}

static void smooth(double *x, double v) { *x = *x <= 0 ? v : 0.8 * *x + 0.2 * v; }

/* A verify pass of rows rows took ms; nd drafts of which acc were kept (the first miss
 * ends the judging, so acc < nd means acc + 1 judged). */
static void planner_update(planner *pl, int32_t rows, double ms, int32_t nd, int32_t acc, double draft_ms) {
    if (rows == 1) {
        smooth(&pl->t1, ms);
        return;
    }
    if (pl->t1 > 0) {
        const double pr = CN_MAX(0.0, (ms - pl->t1) / (rows - 1));
        pl->per_row = pl->per_row < 0 ? pr : 0.8 * pl->per_row + 0.2 * pr;
    }
    if (nd > 0) {
        smooth(&pl->t_draft, draft_ms / nd + 1e-6);
        cn_spec_rate_update(&pl->rate, nd, acc);
    }
}

/* Up to k greedy tokens from the draft model continuing hist[0..n): it first takes in
 * the history it lacks (one batch), then one token per pass. Under g's grammar each is
 * the best the grammar allows after the ones before it (cn_gen_guess_next; the guesses
 * are rolled back before returning), and drafting ends early when it allows nothing. */
static cn_status draft_propose(draft_state *d, cn_gen *g, const int32_t *hist, int32_t n, int32_t k, int32_t *out,
                               int32_t *n_out, cn_spec_stats *st, cn_error *err) {
    *n_out = 0;
    const double t0 = cn_time_ms();
    const int32_t V = cn_model_hparams(d->r->model)->n_vocab;
    cn_status s = cn_gen_prefill(d->r, d->seq, hist, n, d->len, d->logits, err);
    if (s != CN_STATUS_OK) return s;
    st->draft_evals++;
    d->len = n;
    cn_batch b = {0};
    s = cn_batch_init(&b, 1, err);
    for (int32_t j = 0; s == CN_STATUS_OK && j < k; j++) {
        out[j] = cn_gen_guess_next(g, d->logits, V);
        if (out[j] < 0) break;
        *n_out = j + 1;
        if (j + 1 == k) break;
        cn_batch_clear(&b);
        cn_batch_add(&b, out[j], n + j, d->seq, true);
        s = cn_forward(d->r->model, d->r->fwd, &b, d->r->kv, d->logits, err);
        st->draft_evals++;
    }
    cn_batch_free(&b);
    cn_gen_guess_undo(g);
    d->ms = cn_time_ms() - t0;
    return s;
}

cn_status cn_generate_spec(const cn_gen_runner *r, const cn_spec_params *p, int32_t seq, const int32_t *prompt,
                           int32_t n_prompt, int32_t n_reuse, cn_gen *g, cn_spec_stats *stats, cn_error *err) {
    if (!p || (!p->draft && p->lookup_n == 0)) return cn_generate(r, seq, prompt, n_prompt, n_reuse, g, err);
    cn_spec_stats dummy;
    cn_spec_stats *st = stats ? stats : &dummy;
    memset(st, 0, sizeof *st);
    if (!r || !r->model || !r->fwd || !r->kv || !g)
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_generate_spec: NULL argument");
    cn_status s = cn_spec_validate(p, err);
    if (s != CN_STATUS_OK) return s;
    const int32_t V = cn_model_hparams(r->model)->n_vocab, n_ctx = cn_fwd_n_ctx(r->fwd);
    if (p->draft && cn_model_hparams(p->draft->model)->n_vocab != V)
        return cn_err(err, CN_STATUS_INVALID_ARG, "the draft model has %d logits, the target %d",
                      (int)cn_model_hparams(p->draft->model)->n_vocab, (int)V);
    if (p->draft && cn_fwd_n_ctx(p->draft->fwd) < n_ctx)
        return cn_err(err, CN_STATUS_INVALID_ARG, "the draft context holds %d tokens, the target's %d",
                      (int)cn_fwd_n_ctx(p->draft->fwd), (int)n_ctx);
    const int32_t kmax = CN_MIN(p->n_draft_max, r->n_batch - 1); /* a verify pass is one cn_forward */
    if (kmax < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "speculation needs n_batch >= 2 (it is %d)", (int)r->n_batch);
    s = cn_gen_check_prompt(r, seq, prompt, n_prompt, &n_reuse, err);
    if (s != CN_STATUS_OK) return s;
    s = cn_gen_begin(g, prompt, n_prompt, n_reuse, err);
    if (s != CN_STATUS_OK) return s;
    cn_kv_seq_truncate(r->kv, seq, n_reuse);
    float *logits = malloc((size_t)(kmax + 1) * (size_t)V * sizeof *logits);
    draft_state d = {.r = p->draft, .seq = p->draft_seq};
    planner pl = {.per_row = -1, .rate = cn_spec_rate_prior()};
    if (p->draft) {
        cn_kv_seq_truncate(p->draft->kv, p->draft_seq, 0);
        d.logits = malloc((size_t)V * sizeof *d.logits);
    }
    cn_batch b = {0};
    if (!logits || (p->draft && !d.logits)) s = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for logits");
    if (s == CN_STATUS_OK) s = cn_batch_init(&b, kmax + 1, err);
    if (s == CN_STATUS_OK) s = cn_gen_prefill(r, seq, prompt, n_prompt, n_reuse, logits, err);
    cn_gen_step step = {0};
    if (s == CN_STATUS_OK) s = cn_gen_push_logits(g, logits, &step, err);
    int32_t draft[CN_SPEC_MAX_DRAFT];
    while (s == CN_STATUS_OK && !step.done) {
        /* step.token is chosen (in g's history) but not yet in the target's cache */
        size_t n_hist = 0;
        const int32_t *hist = cn_gen_history(g, &n_hist);
        const int32_t P = (int32_t)n_hist - 1; /* step.token's position */
        if (P + 1 >= n_ctx) {
            cn_gen_finish(g, CN_FINISH_LENGTH);
            break;
        }
        const cn_gen_params *gp = cn_gen_params_of(g);
        /* drafted tokens must fit the context and be worth making (max_tokens) */
        const int32_t left = gp->max_tokens - cn_gen_n_generated(g);
        int32_t k = CN_MIN(p->adaptive ? plan(&pl, kmax) : kmax, CN_MIN(n_ctx - 2 - P, left - 1));
        int32_t nd = 0;
        d.ms = 0;
        if (k > 0 && p->draft) {
            s = draft_propose(&d, g, hist, (int32_t)n_hist, k, draft, &nd, st, err);
        } else if (k > 0) {
            /* guesses the grammar refuses would only cost verify rows */
            nd = cn_spec_lookup(hist, n_hist, p->lookup_n, k, draft);
            nd = cn_gen_guess_filter(g, draft, nd);
        }
        if (s != CN_STATUS_OK) break;
        const double t_pass = cn_time_ms();
        /* the verify pass: step.token and the drafts, every row's logits */
        cn_batch_clear(&b);
        cn_batch_add(&b, step.token, P, seq, true);
        for (int32_t j = 0; j < nd; j++) cn_batch_add(&b, draft[j], P + 1 + j, seq, true);
        s = cn_forward(r->model, r->fwd, &b, r->kv, logits, err);
        if (s != CN_STATUS_OK) break;
        const double ms_pass = cn_time_ms() - t_pass;
        st->steps++;
        st->drafted += nd;
        if (nd == 0) st->plain_steps++;
        int32_t acc = 0;
        for (int32_t i = 0; i <= nd; i++) {
            s = cn_gen_push_logits(g, logits + (size_t)i * (size_t)V, &step, err);
            if (s != CN_STATUS_OK || step.done) break;
            if (P + 1 + i + 1 >= n_ctx) { /* the token just chosen took the last position */
                cn_gen_finish(g, CN_FINISH_LENGTH);
                step.done = true;
                break;
            }
            if (i < nd && step.token == draft[i]) {
                acc++;
                continue;
            }
            break;
        }
        st->accepted += acc;
        /* the cache keeps step.token's predecessors: the old pending token and the kept drafts */
        cn_kv_seq_truncate(r->kv, seq, P + 1 + acc);
        if (p->draft && nd > 0) {
            /* the draft cache holds the history and drafts 1..nd-1; keep what was accepted */
            d.len = CN_MIN((int32_t)n_hist + acc, (int32_t)n_hist + nd - 1);
            cn_kv_seq_truncate(p->draft->kv, p->draft_seq, d.len);
        }
        planner_update(&pl, nd + 1, ms_pass, nd, acc, d.ms);
    }
    cn_batch_free(&b);
    free(logits);
    free(d.logits);
    return s;
}
