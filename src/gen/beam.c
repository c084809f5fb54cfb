/* beam.c — beam search (see beam.h for the scoring rules). Owns the beams' bookkeeping
 * and their KV sequences; sampling, stop filtering and text output stay with cn_gen, into
 * which the winner is replayed.
 *
 * One step:
 *   1. per live beam: log_softmax of its logits row (double), + bias; its 2k best tokens
 *   2. all (beam, token) candidates sorted by score (ties: lower beam, then lower id)
 *   3. walk them: EOG / stop string among the first k -> a finished hypothesis; other
 *      tokens -> next beams, until k of them
 *   4. done? (no live beam; k hypotheses and early_stopping; or no live beam can beat the
 *      worst kept hypothesis any more; or max length) else re-home the sequences
 *      (parents without children freed first, then first child keeps the parent's
 *      sequence, others fork it) and run one batch row per beam.
 * The "cannot beat" bound: later tokens only lower a sum (log p <= 0), so a live beam's
 * best final score is sum / max_len^lp for lp > 0 (longer divides more) and
 * sum / cur_len^lp otherwise: exact, so with enough beams the search is exhaustive. */
#include "gen/beam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/buf.h"

typedef struct {
    int32_t *tokens;    /* (cap) */
    cn_gen_token *info; /* (cap) or NULL without logprobs */
    double *t_ms;       /* (cap) step times: shared by all beams, see search.t_step */
    int32_t len;
    double sum;
    double score; /* hypotheses */
    cn_finish_reason reason;
    int32_t seq;    /* live beams */
    int32_t parent; /* next beams: index into live */
} beam;

typedef struct {
    double score;   /* parent sum + logprob + bias */
    double logprob; /* raw */
    int32_t beam, id;
} cand;

typedef struct {
    const cn_gen_runner *r;
    cn_gen *g;
    const cn_gen_params *p;
    const cn_tokenizer *tok;
    int32_t V, k, cap, n_prompt, max_len, seq_base;
    bool logprobs;
    float *bias; /* (V) dense logit bias, -inf = banned */
    beam *live, *next, *hyps;
    int32_t n_live, n_next, n_hyps;
    cand *cands; /* (k * 2k) */
    int32_t n_cands;
    cn_gen_token *top; /* (k) per live beam: its row's raw top alternatives */
    double *t_step;    /* (cap) when each step's choice was made */
    int32_t *free_seqs, n_free;
    bool stop_any;
} search;

static void beams_free(beam *b, int32_t n) {
    if (!b) return;
    for (int32_t i = 0; i < n; i++) {
        free(b[i].tokens);
        free(b[i].info);
    }
    free(b);
}

static beam *beams_new(int32_t n, int32_t cap, bool info) {
    beam *b = calloc((size_t)n, sizeof *b);
    if (!b) return NULL;
    for (int32_t i = 0; i < n; i++) {
        b[i].tokens = malloc((size_t)cap * sizeof *b[i].tokens);
        b[i].info = info ? malloc((size_t)cap * sizeof *b[i].info) : NULL;
        if (!b[i].tokens || (info && !b[i].info)) {
            beams_free(b, n);
            return NULL;
        }
    }
    return b;
}

static void copy_beam(const search *s, beam *dst, const beam *src) {
    memcpy(dst->tokens, src->tokens, (size_t)src->len * sizeof *src->tokens);
    if (s->logprobs) memcpy(dst->info, src->info, (size_t)src->len * sizeof *src->info);
    dst->len = src->len;
    dst->sum = src->sum;
}

static double norm_score(const search *s, double sum, int32_t len) {
    return sum / pow((double)CN_MAX(len, 1), (double)s->p->beam.length_penalty);
}

/* Keeps the n_beams best hypotheses; a new one must beat the worst strictly (the first of
 * equals stays, as in HF). */
static void add_hyp(search *s, const beam *b, cn_finish_reason reason) {
    const double score = norm_score(s, b->sum, b->len);
    int32_t at = s->n_hyps;
    if (s->n_hyps == s->k) {
        at = 0;
        for (int32_t i = 1; i < s->n_hyps; i++)
            if (s->hyps[i].score < s->hyps[at].score) at = i;
        if (!(score > s->hyps[at].score)) return;
    } else {
        s->n_hyps++;
    }
    copy_beam(s, &s->hyps[at], b);
    s->hyps[at].score = score;
    s->hyps[at].reason = reason;
}

static int cmp_cand(const void *x, const void *y) {
    const cand *a = x, *b = y;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->beam != b->beam) return a->beam < b->beam ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Candidates of live beam i from its logits row. */
static cn_status beam_cands(search *s, int32_t i, const float *row, cn_error *err) {
    const int32_t V = s->V, K = CN_MIN(2 * s->k, V);
    float mx = -INFINITY;
    for (int32_t j = 0; j < V; j++) {
        if (isnan(row[j]) || row[j] == INFINITY)
            return cn_err(err, CN_STATUS_INVALID_ARG, "beam search: logit %d of beam %d is %g", (int)j, (int)i,
                          (double)row[j]);
        if (row[j] > mx) mx = row[j];
    }
    if (mx == -INFINITY) return cn_err(err, CN_STATUS_INVALID_ARG, "beam search: no finite logit");
    double sum = 0;
    for (int32_t j = 0; j < V; j++) sum += exp((double)row[j] - mx);
    const double lse = (double)mx + log(sum);

    /* the K best by (logprob + bias, id): insertion into a short sorted list */
    cand *best = s->cands + s->n_cands;
    int32_t m = 0;
    for (int32_t j = 0; j < V; j++) {
        const double v = (double)row[j] - lse + (double)s->bias[j];
        if (v == -INFINITY) continue;
        if (m == K && !(v > best[m - 1].score)) continue;
        int32_t at = m < K ? m++ : K - 1;
        while (at > 0 && v > best[at - 1].score) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = (cand){v, (double)row[j] - lse, i, j};
    }
    for (int32_t c = 0; c < m; c++) best[c].score += s->live[i].sum;
    s->n_cands += m;

    if (s->logprobs) { /* the raw top alternatives reported with each child's token */
        cn_gen_token *t = &s->top[i];
        memset(t, 0, sizeof *t);
        t->has_logprob = true;
        const int32_t N = CN_MIN(s->p->sampling.n_logprobs, V);
        for (int32_t j = 0; j < V && N > 0; j++) {
            const double v = (double)row[j] - lse;
            if (v == -INFINITY) continue;
            if (t->n_top == N && !(v > t->top[N - 1].logprob)) continue;
            int32_t at = t->n_top < N ? t->n_top++ : N - 1;
            while (at > 0 && v > t->top[at - 1].logprob) {
                t->top[at] = t->top[at - 1];
                at--;
            }
            t->top[at] = (cn_gen_logprob){j, (float)v};
        }
    }
    return CN_STATUS_OK;
}

/* Whether b's decoded text holds a stop string. */
static cn_status has_stop(const search *s, const beam *b, bool *found, cn_error *err) {
    *found = false;
    cn_detok *d = NULL;
    if (cn_detok_new(s->tok, false, &d) != CN_STATUS_OK)
        return cn_err(err, CN_STATUS_NO_MEMORY, "beam search: out of memory");
    cn_detok_set_strip_space(d, false);
    cn_buf text = {0};
    cn_status st = CN_STATUS_OK;
    for (int32_t i = 0; i < b->len && st == CN_STATUS_OK; i++) {
        const char *piece;
        size_t np;
        st = cn_detok_push(d, b->tokens[i], &piece, &np);
        if (st == CN_STATUS_OK && !cn_buf_put(&text, piece, np))
            st = cn_err(err, CN_STATUS_NO_MEMORY, "beam search: out of memory");
    }
    for (int32_t k = 0; st == CN_STATUS_OK && k < s->p->n_stop && !*found; k++)
        *found = memmem(text.p ? text.p : "", text.n, s->p->stop[k], strlen(s->p->stop[k])) != NULL;
    cn_buf_free(&text);
    cn_detok_free(d);
    return st;
}

/* Steps 2-3: the next beams and new hypotheses from the sorted candidates. */
static cn_status select_beams(search *s, cn_error *err) {
    qsort(s->cands, (size_t)s->n_cands, sizeof *s->cands, cmp_cand);
    s->n_next = 0;
    for (int32_t rank = 0; rank < s->n_cands && s->n_next < s->k; rank++) {
        const cand *c = &s->cands[rank];
        const beam *parent = &s->live[c->beam];
        beam *child = &s->next[s->n_next];
        copy_beam(s, child, parent);
        child->sum = c->score;
        child->parent = c->beam;
        if (!s->p->sampling.ignore_eos && cn_tokenizer_is_eog(s->tok, c->id)) {
            if (rank < s->k) add_hyp(s, child, CN_FINISH_STOP);
            continue;
        }
        child->tokens[child->len] = c->id;
        if (s->logprobs) {
            cn_gen_token *t = &child->info[child->len];
            *t = s->top[c->beam];
            t->id = c->id;
            t->index = child->len;
            t->logprob = (float)c->logprob;
        }
        child->len++;
        if (s->stop_any) {
            bool stop;
            cn_status st = has_stop(s, child, &stop, err);
            if (st != CN_STATUS_OK) return st;
            if (stop) {
                if (rank < s->k) add_hyp(s, child, CN_FINISH_STOP);
                continue;
            }
        }
        s->n_next++;
    }
    return CN_STATUS_OK;
}

static bool search_done(const search *s, int32_t cur_len) {
    if (s->n_next == 0) return true;
    if (s->n_hyps < s->k) return false;
    if (s->p->beam.early_stopping) return true;
    double best = -INFINITY;
    for (int32_t i = 0; i < s->n_next; i++) best = CN_MAX(best, s->next[i].sum);
    const double lp = s->p->beam.length_penalty;
    const double bound = best / pow((double)(lp > 0 ? s->max_len : CN_MAX(cur_len, 1)), lp);
    double worst = INFINITY;
    for (int32_t i = 0; i < s->n_hyps; i++) worst = CN_MIN(worst, s->hyps[i].score);
    return worst >= bound;
}

/* Step 4: sequences for the next beams, and their batch rows. */
static cn_status rehome(search *s, cn_batch *b, int32_t pos, cn_error *err) {
    bool has_child[CN_GEN_MAX_BEAMS] = {false}, seq_taken[CN_GEN_MAX_BEAMS] = {false};
    for (int32_t j = 0; j < s->n_next; j++) has_child[s->next[j].parent] = true;
    for (int32_t i = 0; i < s->n_live; i++)
        if (!has_child[i]) {
            cn_kv_seq_free(s->r->kv, s->live[i].seq);
            s->free_seqs[s->n_free++] = s->live[i].seq;
        }
    cn_batch_clear(b);
    for (int32_t j = 0; j < s->n_next; j++) {
        beam *c = &s->next[j];
        const int32_t pseq = s->live[c->parent].seq;
        if (!seq_taken[c->parent]) {
            seq_taken[c->parent] = true;
            c->seq = pseq;
        } else {
            c->seq = s->free_seqs[--s->n_free];
            cn_status st = cn_kv_seq_fork(s->r->kv, pseq, c->seq, err);
            if (st != CN_STATUS_OK) return st;
        }
        cn_batch_add(b, c->tokens[c->len - 1], pos, c->seq, true);
    }
    return CN_STATUS_OK;
}

static void search_free(search *s) {
    beams_free(s->live, s->k);
    beams_free(s->next, s->k);
    beams_free(s->hyps, s->k);
    free(s->bias);
    free(s->cands);
    free(s->top);
    free(s->t_step);
    free(s->free_seqs);
}

cn_status cn_beam_search(const cn_gen_runner *r, int32_t seq_base, const int32_t *prompt, int32_t n_prompt, cn_gen *g,
                         cn_beam_result *out, cn_error *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!r || !r->model || !r->fwd || !r->kv || !g)
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_beam_search: NULL argument");
    const cn_gen_params *p = cn_gen_params_of(g);
    const int32_t V = cn_model_hparams(r->model)->n_vocab, n_ctx = cn_fwd_n_ctx(r->fwd);
    const int32_t k = p->beam.n_beams;
    if (k < 1 || k > CN_GEN_MAX_BEAMS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_beams = %d is out of range", (int)k);
    cn_status cs = cn_gen_check_prompt(r, seq_base, prompt, n_prompt, NULL, err);
    if (cs != CN_STATUS_OK) return cs;
    if (seq_base < 0 || seq_base + k > cn_kv_params_of(r->kv)->max_seqs)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "beam search needs sequences %d..%d but the KV cache has %d (raise max_seqs)", (int)seq_base,
                      (int)(seq_base + k - 1), (int)cn_kv_params_of(r->kv)->max_seqs);
    if (r->n_batch < k)
        return cn_err(err, CN_STATUS_INVALID_ARG, "beam search: %d beams need batches of %d rows, the runner takes %d",
                      (int)k, (int)k, (int)r->n_batch);

    search s = {0};
    s.r = r;
    s.g = g;
    s.p = p;
    s.tok = cn_gen_tokenizer(g);
    s.V = V;
    s.k = k;
    s.n_prompt = n_prompt;
    s.seq_base = seq_base;
    s.max_len = CN_MIN(p->max_tokens, n_ctx - n_prompt);
    s.cap = s.max_len + 1;
    s.logprobs = p->sampling.n_logprobs >= 0;
    s.stop_any = p->n_stop > 0;
    cn_status st = CN_STATUS_OK;
    float *logits = NULL;
    cn_batch b = {0};
    cn_finish_reason cut = CN_FINISH_NONE; /* live beams end as hypotheses for this reason */

    s.live = beams_new(k, s.cap, s.logprobs);
    s.next = beams_new(k, s.cap, s.logprobs);
    s.hyps = beams_new(k, s.cap, s.logprobs);
    s.bias = calloc((size_t)V, sizeof *s.bias);
    s.cands = malloc((size_t)k * (size_t)CN_MIN(2 * k, V) * sizeof *s.cands);
    s.top = calloc((size_t)k, sizeof *s.top);
    s.t_step = malloc((size_t)s.cap * sizeof *s.t_step);
    s.free_seqs = malloc((size_t)k * sizeof *s.free_seqs);
    logits = malloc((size_t)k * (size_t)V * sizeof *logits);
    if (!s.live || !s.next || !s.hyps || !s.bias || !s.cands || !s.top || !s.t_step || !s.free_seqs || !logits) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "beam search: out of memory for %d beams of %d tokens", (int)k,
                    (int)s.cap);
        goto done;
    }
    const cn_sampling_params *sp = cn_sampler_params(cn_gen_sampler(g));
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        const cn_logit_bias *lb = &sp->logit_bias[i];
        if (lb->token >= 0 && lb->token < V) s.bias[lb->token] += lb->bias;
    }
    for (int32_t i = 0; i < k; i++) {
        cn_kv_seq_free(r->kv, seq_base + i);
        if (i > 0) s.free_seqs[s.n_free++] = seq_base + i;
    }
    if ((st = cn_batch_init(&b, k, err)) != CN_STATUS_OK) goto done;
    if ((st = cn_gen_begin(g, prompt, n_prompt, 0, err)) != CN_STATUS_OK) goto done;
    if (p->should_cancel && p->should_cancel(p->user)) {
        cut = CN_FINISH_CANCELLED;
        goto finish;
    }
    if ((st = cn_gen_prefill(r, seq_base, prompt, n_prompt, 0, logits, err)) != CN_STATUS_OK) goto done;
    s.live[0].len = 0;
    s.live[0].sum = 0;
    s.live[0].seq = seq_base;
    s.n_live = 1;

    for (int32_t step = 0;; step++) {
        s.n_cands = 0;
        for (int32_t i = 0; i < s.n_live; i++)
            if ((st = beam_cands(&s, i, logits + (size_t)i * V, err)) != CN_STATUS_OK) goto done;
        if ((st = select_beams(&s, err)) != CN_STATUS_OK) goto done;
        s.t_step[step] = cn_time_ms();
        const int32_t cur_len = step + 1;
        if (search_done(&s, cur_len)) break;
        if (cur_len >= s.max_len) {
            cut = CN_FINISH_LENGTH;
        } else if (p->should_cancel && p->should_cancel(p->user)) {
            cut = CN_FINISH_CANCELLED;
        } else {
            if ((st = rehome(&s, &b, n_prompt + cur_len - 1, err)) != CN_STATUS_OK) goto done;
            if ((st = cn_forward(r->model, r->fwd, &b, r->kv, logits, err)) != CN_STATUS_OK) goto done;
            if (out) out->n_steps++;
        }
        beam *t = s.live;
        s.live = s.next;
        s.next = t;
        s.n_live = s.n_next;
        if (cut != CN_FINISH_NONE) break;
    }

finish:
    for (int32_t i = 0; cut != CN_FINISH_NONE && i < s.n_live; i++) add_hyp(&s, &s.live[i], cut);
    {
        int32_t best = -1;
        for (int32_t i = 0; i < s.n_hyps; i++)
            if (best < 0 || s.hyps[i].score > s.hyps[best].score) best = i;
        cn_finish_reason reason = cut == CN_FINISH_NONE ? CN_FINISH_STOP : cut;
        if (best >= 0) {
            const beam *h = &s.hyps[best];
            reason = h->reason;
            if (out) {
                out->n_tokens = h->len;
                out->sum_logprob = h->sum;
                out->score = h->score;
                out->finish = h->reason;
                out->n_finished = s.n_hyps;
            }
            for (int32_t i = 0; i < h->len && !cn_gen_done(g); i++) {
                cn_gen_token t;
                memset(&t, 0, sizeof t);
                if (s.logprobs) t = h->info[i];
                t.id = h->tokens[i];
                cn_gen_step gs;
                if ((st = cn_gen_accept(g, &t, s.t_step[i], &gs, err)) != CN_STATUS_OK) goto done;
            }
        } else if (out) {
            out->finish = reason;
        }
        cn_gen_finish(g, reason);
    }
done:
    for (int32_t i = 0; i < k; i++) cn_kv_seq_free(r->kv, seq_base + i);
    cn_batch_free(&b);
    free(logits);
    search_free(&s);
    return st;
}
