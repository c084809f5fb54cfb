/* spec_plan.c — how many guesses each engine step runs, and where they come from. It
 * owns the cost model (measured pass times by row count), the choice of guesses (n-gram
 * lookup over a completion's own tokens, cn_spec_lookup, or the draft model's passes)
 * and the draft model's cache. It must not run the target's forward pass or sample: the
 * step in engine.c does that, and confirms or drops the guesses.
 *
 * How many guesses run is one decision per step (cn_engine_plan_guesses): the engine
 * measures what steps of each row count cost, each completion's guesses are worth their
 * chance of being reached (a^j for the j-th with acceptance a), and the step takes the
 * number of guesses that maximizes expected tokens per millisecond. When the batch is
 * large enough that a row costs what a token is worth, that number is 0. Draft-model
 * guesses are chosen first (they cost passes of their own), lookup guesses against the
 * step those make. */
#include "engine/spec_plan.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"

/* ---- the cost model and the guesses ---- */

void cn_step_costs_add(step_costs *sc, int32_t rows, double ms, int64_t step) {
    int32_t i = 0;
    while (i < sc->n && sc->rows[i] != rows) i++;
    if (i == sc->n) {
        if (sc->n < COST_POINTS) {
            sc->n++;
        } else {
            i = 0;
            for (int32_t j = 1; j < sc->n; j++)
                if (sc->used[j] < sc->used[i]) i = j;
        }
        sc->rows[i] = rows;
        sc->ms[i] = ms;
    } else {
        sc->ms[i] = 0.8 * sc->ms[i] + 0.2 * ms;
    }
    sc->used[i] = step;
}

/* The estimated ms of a step of `rows` rows: linear between the measured points around
 * it; beyond the largest, the slope of the two largest (or, with one point, the same
 * time: an optimistic guess that the next steps measure); below the smallest, through
 * the origin. 0 with no point. */
static double costs_at(const step_costs *sc, int32_t rows) {
    int32_t lo = -1, hi = -1, lo2 = -1;
    for (int32_t i = 0; i < sc->n; i++) {
        if (sc->rows[i] <= rows && (lo < 0 || sc->rows[i] > sc->rows[lo])) lo2 = lo, lo = i;
        else if (sc->rows[i] <= rows && (lo2 < 0 || sc->rows[i] > sc->rows[lo2])) lo2 = i;
        if (sc->rows[i] >= rows && (hi < 0 || sc->rows[i] < sc->rows[hi])) hi = i;
    }
    if (lo >= 0 && sc->rows[lo] == rows) return sc->ms[lo];
    if (lo >= 0 && hi >= 0)
        return sc->ms[lo] + (sc->ms[hi] - sc->ms[lo]) * (rows - sc->rows[lo]) / (sc->rows[hi] - sc->rows[lo]);
    if (lo >= 0 && lo2 >= 0)
        return sc->ms[lo] +
               CN_MAX(0.0, (sc->ms[lo] - sc->ms[lo2]) / (sc->rows[lo] - sc->rows[lo2])) * (rows - sc->rows[lo]);
    if (lo >= 0) return sc->ms[lo];
    if (hi >= 0) return sc->ms[hi] * rows / sc->rows[hi];
    return 0;
}

typedef struct {
    double gain; /* the chance this guess is reached and confirmed */
    engine_choice *c;
} guess;

static int guess_cmp(const void *pa, const void *pb) {
    const guess *a = pa, *b = pb;
    return (a->gain < b->gain) - (a->gain > b->gain);
}

/* Guesses worth making for decoding completion c: within max_tokens and before the
 * context's last position, at most the request's max_draft. */
static int32_t guess_room(const cn_engine *e, const engine_choice *c) {
    const int64_t left = (int64_t)cn_gen_params_of(c->gen)->max_tokens - cn_gen_n_generated(c->gen) - 1;
    const int64_t room = e->n_ctx - 1 - c->seq.n_tokens;
    return (int32_t)CN_MAX(0, CN_MIN(CN_MIN(left, room), c->req->max_draft));
}

/* The chance that a completion's next guess is confirmed (1 for one kept plain 16 steps
 * in a row: it is tried again, its rate may have changed). */
static double guess_rate(const engine_choice *c) { return c->plain_run >= 16 ? 1.0 : cn_spec_rate_value(&c->rate); }

static bool decoding(const engine_choice *c) {
    return !c->done && !c->req->cancel_pending && c->seq.state == CN_SEQ_RUNNING &&
           c->seq.n_tokens - c->seq.n_computed == 1;
}

/* ---- the draft model ---- */

/* Draft slot s goes back empty; its owner (if any) keeps no guesses in it. */
static void draft_release(cn_engine *e, int32_t s) {
    cn_kv_seq_free(e->dkv, s);
    if (e->downer[s]) e->downer[s]->d_base = e->downer[s]->d_guesses = 0;
    e->downer[s] = NULL;
}

/* After a step: each drafting completion's cache keeps its history and the guesses the
 * model confirmed; a completion that lost its slot (finished, preempted) loses its
 * draft slot too. */
void cn_engine_draft_settle(cn_engine *e) {
    if (!e->dfwd) return;
    for (int32_t s = 0; s < e->p.max_running; s++) {
        engine_choice *c = e->downer[s];
        if (!c) continue;
        if (c->done || c->seq.state != CN_SEQ_RUNNING || c->seq.slot != s) {
            draft_release(e, s);
            continue;
        }
        if (c->d_base == 0) continue;
        const int64_t acc = CN_MAX(0, CN_MIN(c->seq.n_tokens - 1 - c->d_base, (int64_t)c->d_guesses));
        c->d_len = c->d_base + acc;
        cn_kv_seq_truncate(e->dkv, s, c->d_len);
        c->d_base = c->d_guesses = 0;
    }
}

/* finish_choice: c is going away */
void cn_engine_draft_forget(cn_engine *e, engine_choice *c) {
    if (!e->dfwd) return;
    for (int32_t s = 0; s < e->p.max_running; s++)
        if (e->downer[s] == c) draft_release(e, s);
}

static void draft_drop_all(cn_engine *e) {
    for (int32_t s = 0; s < e->p.max_running; s++)
        if (e->downer[s]) draft_release(e, s);
}

static cn_status draft_pass(cn_engine *e, cn_error *err) {
    const double t0 = cn_time_ms();
    cn_status st = cn_forward(e->dm, e->dfwd, &e->dbatch, e->dkv, e->dlogits, err);
    if (st == CN_STATUS_OK) cn_step_costs_add(&e->dcosts, e->dbatch.n_rows, cn_time_ms() - t0, e->n_draft_passes++);
    return st;
}

/* The draft model's guesses for the completions in dc[0..n): the history each one's
 * draft cache lacks (within the step's rows; a longer one catches up over several
 * steps and guesses once it has), then one batched pass per further guess, k[i] each
 * (the longest K). Sets seq.draft / n_draft. A completion under a grammar guesses the
 * best token its grammar allows after its guesses so far (cn_gen_guess_next) and stops
 * guessing when the grammar allows nothing; its matcher is rolled back at the end. */
static void draft_guesses(cn_engine *e, engine_choice **dc, const int32_t *k, int32_t n, int32_t K) {
    cn_error err = {0};
    cn_batch_clear(&e->dbatch);
    int64_t budget = e->p.step_tokens;
    bool active[CN_ENGINE_MAX_RUNNING];
    for (int32_t i = 0; i < n; i++) {
        engine_choice *c = dc[i];
        const int32_t s = c->seq.slot;
        if (e->downer[s] != c) {
            draft_release(e, s);
            e->downer[s] = c;
            c->d_len = 0;
        }
        const int64_t lack = c->seq.n_tokens - c->d_len, feed = CN_MIN(lack, budget);
        for (int64_t j = 0; j < feed; j++)
            cn_batch_add(&e->dbatch, c->seq.tokens[c->d_len + j], (int32_t)(c->d_len + j), s, j == lack - 1);
        budget -= feed;
        c->d_len += feed;
        active[i] = feed == lack;
    }
    if (e->dbatch.n_rows == 0) return;
    if (draft_pass(e, &err) != CN_STATUS_OK) goto fail;
    int32_t row = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!active[i]) continue;
        const int32_t t = cn_gen_guess_next(dc[i]->gen, e->dlogits + (size_t)row++ * (size_t)e->n_vocab, e->n_vocab);
        if (t < 0) {
            active[i] = false;
            continue;
        }
        dc[i]->seq.draft[0] = t;
        dc[i]->seq.n_draft = 1;
        dc[i]->d_base = dc[i]->seq.n_tokens;
    }
    for (int32_t j = 1; j < K; j++) {
        cn_batch_clear(&e->dbatch);
        for (int32_t i = 0; i < n; i++)
            if (active[i] && k[i] > j)
                cn_batch_add(&e->dbatch, dc[i]->seq.draft[j - 1], (int32_t)(dc[i]->seq.n_tokens - 1 + j),
                             dc[i]->seq.slot, true);
        if (e->dbatch.n_rows == 0) break;
        if (draft_pass(e, &err) != CN_STATUS_OK) goto fail;
        row = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!active[i] || k[i] <= j) continue;
            dc[i]->d_guesses = j; /* draft[0..j) are in its draft cache now */
            const int32_t t = cn_gen_guess_next(dc[i]->gen, e->dlogits + (size_t)row++ * (size_t)e->n_vocab,
                                                e->n_vocab);
            if (t < 0) {
                active[i] = false;
                continue;
            }
            dc[i]->seq.draft[j] = t;
            dc[i]->seq.n_draft = j + 1;
        }
    }
    for (int32_t i = 0; i < n; i++) cn_gen_guess_undo(dc[i]->gen);
    return;
fail:
    cn_log(CN_LOG_WARN, "engine: a draft pass failed, no guesses this step: %s", err.msg);
    for (int32_t i = 0; i < n; i++) {
        dc[i]->seq.n_draft = 0;
        cn_gen_guess_undo(dc[i]->gen);
    }
    draft_drop_all(e);
}

/* The number of draft-model guesses K for this step (0: none): the most expected tokens
 * per ms over the target's step and the draft passes, with rows decode rows besides. */
static int32_t draft_plan(cn_engine *e, engine_choice **dc, const int32_t *k, int32_t n, int32_t rows,
                          double *t_draft) {
    int32_t kmax = 0;
    int64_t catchup = 0;
    for (int32_t i = 0; i < n; i++) {
        kmax = CN_MAX(kmax, k[i]);
        const bool held = e->downer[dc[i]->seq.slot] == dc[i]; /* its draft slot holds its history */
        catchup += held ? dc[i]->seq.n_tokens - dc[i]->d_len : dc[i]->seq.n_tokens;
    }
    *t_draft = 0;
    if (e->p.spec_fixed) return kmax;
    /* unmeasured: a short first try (a draft pass is not free, unlike a lookup) */
    if (e->dcosts.n == 0) return CN_MIN(kmax, 2);
    int32_t best = 0;
    double best_rate = rows / CN_MAX(costs_at(&e->costs, rows), 1e-9);
    for (int32_t K = 1; K <= kmax; K++) {
        double tokens = rows, t = costs_at(&e->dcosts, (int32_t)CN_MIN(catchup, e->p.step_tokens));
        int32_t r = rows;
        for (int32_t j = 1; j <= K; j++) {
            int32_t m = 0;
            for (int32_t i = 0; i < n; i++) {
                if (k[i] < j) continue;
                /* one kept plain 16 steps is tried again with a single guess */
                tokens += dc[i]->plain_run >= 16 ? (j == 1) : pow(guess_rate(dc[i]), j);
                m++;
            }
            r += m;
            if (j > 1) t += costs_at(&e->dcosts, m);
        }
        const double rate = tokens / CN_MAX(costs_at(&e->costs, r) + t, 1e-9);
        if (rate > best_rate) best = K, best_rate = rate, *t_draft = t;
    }
    return best;
}

/* ---- planning a step's guesses ---- */

/* Sets every decoding completion's guesses (seq.n_draft) for the next step: the draft
 * model's first (they cost passes of their own), then lookup's, chosen against the
 * step that the first make. */
void cn_engine_plan_guesses(cn_engine *e) {
    cn_engine_draft_settle(e);
    int32_t rows = 0, n_guess = 0, n_dc = 0;
    engine_choice *dc[CN_ENGINE_MAX_RUNNING];
    int32_t dk[CN_ENGINE_MAX_RUNNING];
    for (engine_req *q = e->reqs; q; q = q->next)
        for (int32_t i = 0; i < q->n; i++) {
            engine_choice *c = &q->choices[i];
            c->seq.n_draft = c->n_found = 0;
            if (!decoding(c)) continue;
            rows++;
            const int32_t k = guess_room(e, c);
            if (k == 0) continue;
            if (q->use_draft) {
                dc[n_dc] = c;
                dk[n_dc++] = k;
                c->n_found = k;
            } else if (q->lookup_n > 0) {
                c->seq.n_draft = cn_spec_lookup(c->seq.tokens, (size_t)c->seq.n_tokens, q->lookup_n, k, c->seq.draft);
                /* under a grammar: only the guesses it allows can be confirmed */
                c->seq.n_draft = cn_gen_guess_filter(c->gen, c->seq.draft, c->seq.n_draft);
                c->n_found = c->seq.n_draft;
                n_guess += c->seq.n_draft;
            }
        }
    double t_draft = 0;
    int32_t base_rows = rows;
    double base_tokens = rows;
    if (n_dc > 0) {
        const int32_t K = draft_plan(e, dc, dk, n_dc, rows, &t_draft);
        if (K > 0) {
            for (int32_t i = 0; i < n_dc; i++) dk[i] = CN_MIN(dk[i], K);
            draft_guesses(e, dc, dk, n_dc, K);
        }
        for (int32_t i = 0; i < n_dc; i++) {
            engine_choice *c = dc[i];
            if (c->seq.n_draft > 0) c->plain_run = 0;
            else c->plain_run++;
            base_rows += c->seq.n_draft;
            for (int32_t j = 1; j <= c->seq.n_draft; j++) base_tokens += pow(guess_rate(c), j);
            n_guess += c->seq.n_draft;
        }
    }
    if (n_guess == 0) return;
    if (e->n_logit_rows < e->p.max_running + n_guess) {
        const int64_t want = (int64_t)e->p.max_running * (1 + CN_ENGINE_MAX_DRAFT);
        float *l = realloc(e->logits, (size_t)want * (size_t)e->n_vocab * sizeof *l);
        if (!l) {
            for (engine_req *q = e->reqs; q; q = q->next)
                for (int32_t i = 0; i < q->n; i++) q->choices[i].seq.n_draft = 0;
            return;
        }
        e->logits = l;
        e->n_logit_rows = want;
    }
    const int32_t n_lookup = n_guess - (base_rows - rows);
    if (e->p.spec_fixed || n_lookup == 0) return;
    guess *g = malloc((size_t)n_lookup * sizeof *g);
    if (!g) return; /* every guess stays: the cost model only trims them */
    int32_t n = 0;
    for (engine_req *q = e->reqs; q; q = q->next)
        for (int32_t i = 0; i < q->n; i++) {
            engine_choice *c = &q->choices[i];
            if (q->use_draft) continue;
            const double a = guess_rate(c);
            double p = 1;
            for (int32_t j = 0; j < c->seq.n_draft; j++) {
                p *= a;
                g[n++] = (guess){.gain = p, .c = c};
            }
            c->seq.n_draft = 0;
        }
    /* Take the d best guesses, the d that gives the most expected tokens per ms. Gains
     * fall along each completion's guesses, so the best d are a prefix of each one's. */
    qsort(g, (size_t)n, sizeof *g, guess_cmp);
    int32_t best = 0;
    double tokens = base_tokens, best_rate = tokens / CN_MAX(costs_at(&e->costs, base_rows) + t_draft, 1e-9);
    for (int32_t d = 1; d <= n; d++) {
        tokens += g[d - 1].gain;
        const double rate = tokens / CN_MAX(costs_at(&e->costs, base_rows + d) + t_draft, 1e-9);
        if (rate > best_rate) best = d, best_rate = rate;
    }
    for (int32_t d = 0; d < best; d++) g[d].c->seq.n_draft++;
    free(g);
    for (engine_req *q = e->reqs; q; q = q->next)
        for (int32_t i = 0; i < q->n; i++) {
            engine_choice *c = &q->choices[i];
            if (q->use_draft) continue;
            if (c->seq.n_draft > 0) c->plain_run = 0;
            else if (c->n_found > 0) c->plain_run++;
        }
}
