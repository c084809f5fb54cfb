/* generate.c — the per-request step machine (cn_gen) and the single-request loop
 * (cn_generate). See generate.h for the contract; this file must not know how logits are
 * batched: it sees one row per step.
 *
 * The path of a token through a step:
 *
 *   logits -> sampler (chain, seeded RNG) -> token
 *          -> end-of-generation?  yes: finish "stop" (token not output)
 *          -> history += token, on_token
 *          -> detokenizer (holds an incomplete UTF-8 character back)
 *          -> stop filter (holds back text that may still become a stop string)
 *          -> on_text, text buffer
 *          -> stop string matched? finish "stop"; grammar done? finish "stop";
 *             max_tokens reached? finish "length"
 *
 * With a grammar (p.grammar) the request owns one matcher: before each draw its mask
 * becomes the sampler's first stage, and every token accepted (sampled here or chosen
 * elsewhere) is committed to it; a token it refuses is an error, not output. An
 * end-of-generation token is allowed by the mask only once the text is complete, and
 * the request also ends ("stop") as soon as the matcher is done (nothing can follow).
 * The matcher follows the tokens of the output and nothing else, so speculation stays
 * exact for free: a verified row is masked after the tokens confirmed before it. What
 * speculation adds is guessing under the grammar (cn_gen_guess_*): the guesses are
 * committed to the matcher while they are made, so each is chosen among what the
 * grammar allows after the ones before it, then rolled back before any row is pushed.
 *
 * Finishing flushes both hold-backs in that order, once. Timings: each accepted token's
 * time is kept; the inter-token latencies are their differences. */
#include "gen/generate.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/buf.h"
#include "gen/stop.h"

struct cn_gen {
    const cn_tokenizer *tok;
    int32_t n_vocab;
    cn_gen_params p; /* p.stop points at stops below */
    char *stops[CN_GEN_MAX_STOP];
    cn_sampler *sampler;
    cn_grammar_matcher *gm; /* p.grammar's matcher, or NULL */
    uint32_t *mask;         /* (n_mask_words) its last mask */
    size_t n_mask_words;
    int32_t n_mask_bits; /* the grammar's vocabulary */
    size_t n_guessed;    /* guesses committed to gm (cn_gen_guess_next) */
    cn_detok *detok;
    cn_stop_filter *filter;

    int32_t *hist; /* (n_hist) prompt then generated tokens */
    size_t n_hist, cap_hist;
    int32_t n_prompt, n_cached, n_gen;
    cn_gen_token *info; /* (n_gen) per generated token */
    double *t_tok;      /* (n_gen) when each generated token was chosen */
    size_t cap_gen;

    cn_buf text; /* emitted text; text.failed: an append ran out of memory
                    (reported by the next call) */

    double t_arrival, t_begin, t_end;
    bool begun, done;
    cn_finish_reason reason;

    /* logprobs after the chain: the last stage's top candidates (set by the observer) */
    bool obs_seen;
    int32_t obs_n;
    cn_gen_logprob obs_top[CN_SAMPLING_MAX_LOGPROBS];
};

cn_gen_params cn_gen_default_params(void) {
    cn_gen_params p;
    memset(&p, 0, sizeof p);
    p.sampling = cn_sampling_default_params();
    p.max_tokens = 256;
    p.beam.n_beams = 1;
    p.beam.length_penalty = 1.0f;
    p.beam.early_stopping = false;
    p.max_draft = 8;
    return p;
}

cn_status cn_gen_validate(const cn_gen_params *p, int32_t n_vocab, cn_error *err) {
    if (!p) return cn_err(err, CN_STATUS_INVALID_ARG, "generation params are NULL");
    cn_status st = cn_sampling_validate(&p->sampling, n_vocab, err);
    if (st != CN_STATUS_OK) return st;
    if (p->max_tokens < 1 || p->max_tokens > CN_GEN_MAX_TOKENS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "max_tokens",
                            "max_tokens = %d is out of range: must be in [1, %d]", (int)p->max_tokens,
                            CN_GEN_MAX_TOKENS);
    if (p->n_stop < 0 || p->n_stop > CN_GEN_MAX_STOP)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_stop", "n_stop = %d is out of range: must be in [0, %d]",
                            (int)p->n_stop, CN_GEN_MAX_STOP);
    if (p->n_stop > 0 && !p->stop)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_stop", "n_stop = %d but the stop list is NULL",
                            (int)p->n_stop);
    for (int32_t i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0])
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "stop", "stop string %d is empty", (int)i);
        if (strlen(p->stop[i]) > CN_GEN_MAX_STOP_LEN)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "stop", "stop string %d is %zu bytes: at most %d", (int)i,
                                strlen(p->stop[i]), CN_GEN_MAX_STOP_LEN);
    }
    if (p->beam.n_beams < 1 || p->beam.n_beams > CN_GEN_MAX_BEAMS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_beams",
                            "n_beams = %d is out of range: must be in [1, %d], 1 = off", (int)p->beam.n_beams,
                            CN_GEN_MAX_BEAMS);
    if (!(p->beam.length_penalty >= -10.0f && p->beam.length_penalty <= 10.0f))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "length_penalty",
                            "length_penalty = %g is out of range: must be in [-10, 10]",
                            (double)p->beam.length_penalty);
    if (p->lookup_n < 0 || p->lookup_n > 8)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "lookup_n",
                            "lookup n-gram length %d is out of range: must be in [0, 8]", (int)p->lookup_n);
    const bool spec = p->lookup_n > 0 || p->draft;
    if (spec && (p->max_draft < 1 || p->max_draft > 16))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "max_draft",
                            "draft length %d is out of range: must be in [1, 16]", (int)p->max_draft);
    if (spec && p->beam.n_beams > 1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_beams",
                            "speculative decoding (lookup_n, draft) does not combine with beam search (n_beams = %d)",
                            (int)p->beam.n_beams);
    /* A beam would need a matcher of its own, copied when it forks: not supported. */
    if (p->grammar && p->beam.n_beams > 1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "grammar",
                            "a grammar does not combine with beam search (n_beams = %d): use sampling or greedy",
                            (int)p->beam.n_beams);
    if (p->grammar && n_vocab > 0 && cn_grammar_n_vocab(p->grammar) > n_vocab)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "grammar",
                            "the grammar was compiled for a vocabulary of %d tokens, the logits have %d",
                            (int)cn_grammar_n_vocab(p->grammar), (int)n_vocab);
    return CN_STATUS_OK;
}

/* ---- text out ---- */

static void emit_text(void *user, const char *text, size_t n) {
    cn_gen *g = user;
    cn_buf_put(&g->text, text, n); /* out of memory: keep streaming; the buffer stops growing */
    if (g->p.on_text) g->p.on_text(g->p.user, text, n);
}

/* ---- logprobs after the chain ---- */

static void observe_stage(void *user, cn_sampler_stage stage, const cn_candidate *cand, size_t n) {
    (void)stage;
    cn_gen *g = user;
    cn_candidate top[CN_SAMPLING_MAX_LOGPROBS];
    const size_t k = (size_t)g->p.sampling.n_logprobs;
    const size_t m = cn_cands_top(cand, n, k, top);
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (cand[i].logit > mx) mx = cand[i].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)cand[i].logit - mx);
    const double lse = (double)mx + log(sum);
    g->obs_seen = true;
    g->obs_n = (int32_t)m;
    for (size_t i = 0; i < m; i++) g->obs_top[i] = (cn_gen_logprob){top[i].id, (float)((double)top[i].logit - lse)};
}

/* ---- lifecycle ---- */

cn_status cn_gen_create(const cn_tokenizer *tok, int32_t n_vocab, const cn_gen_params *p, cn_gen **out, cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_gen_create: out is NULL");
    *out = NULL;
    if (!tok) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_gen_create: no tokenizer");
    if (n_vocab <= 0) return cn_err(err, CN_STATUS_INVALID_ARG, "n_vocab = %d: must be > 0", (int)n_vocab);
    const cn_status st = cn_gen_validate(p, n_vocab, err);
    if (st != CN_STATUS_OK) return st;
    return cn_gen_create_valid(tok, n_vocab, p, out, err);
}

cn_status cn_gen_create_valid(const cn_tokenizer *tok, int32_t n_vocab, const cn_gen_params *p, cn_gen **out,
                              cn_error *err) {
    *out = NULL;
    cn_status st;
    cn_gen *g = calloc(1, sizeof *g);
    if (!g) return cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory");
    g->tok = tok;
    g->n_vocab = n_vocab;
    g->p = *p;
    g->p.stop = (const char *const *)g->stops;
    for (int32_t i = 0; i < p->n_stop; i++) {
        g->stops[i] = strdup(p->stop[i]);
        if (!g->stops[i]) goto oom;
    }
    g->reason = CN_FINISH_NONE;
    g->t_arrival = cn_time_ms();

    if ((st = cn_sampler_create_valid(&p->sampling, n_vocab, &g->sampler, err)) != CN_STATUS_OK) goto fail;
    const int32_t n_tok_vocab = cn_tokenizer_n_vocab(tok);
    for (int32_t id = 0; id < n_vocab; id++) {
        const bool beyond = id >= n_tok_vocab;
        if (!beyond && !(p->sampling.ignore_eos && cn_tokenizer_is_eog(tok, id))) continue;
        if ((st = cn_sampler_add_bias(g->sampler, id, -INFINITY, err)) != CN_STATUS_OK) {
            if (!beyond)
                st = cn_err(err, st,
                            "ignore_eos needs 'logit_bias' in the sampler chain (it bans the "
                            "end-of-generation tokens)");
            goto fail;
        }
    }
    if (p->grammar) {
        g->n_mask_bits = cn_grammar_n_vocab(p->grammar);
        if (g->n_mask_bits != n_tok_vocab) {
            st = cn_err_param(err, CN_STATUS_INVALID_ARG, "grammar",
                              "the grammar was compiled for a vocabulary of %d tokens, the tokenizer has %d: "
                              "compile it with this model's tokenizer",
                              (int)g->n_mask_bits, (int)n_tok_vocab);
            goto fail;
        }
        if ((st = cn_grammar_matcher_new(p->grammar, &g->gm, err)) != CN_STATUS_OK) goto fail;
        g->n_mask_words = ((size_t)g->n_mask_bits + 31) / 32;
        g->mask = malloc(CN_MAX(g->n_mask_words, (size_t)1) * sizeof *g->mask);
        if (!g->mask) goto oom;
    }
    if (cn_detok_new(tok, false, &g->detok) != CN_STATUS_OK) goto oom;
    cn_detok_set_strip_space(g->detok, false); /* the output continues the prompt */
    if ((st = cn_stop_filter_new((const char *const *)g->stops, (size_t)p->n_stop, emit_text, g, &g->filter, err)) !=
        CN_STATUS_OK)
        goto fail;
    *out = g;
    return CN_STATUS_OK;
oom:
    st = cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory");
fail:
    cn_gen_free(g);
    return st;
}

void cn_gen_free(cn_gen *g) {
    if (!g) return;
    for (int i = 0; i < CN_GEN_MAX_STOP; i++) free(g->stops[i]);
    cn_sampler_free(g->sampler);
    cn_grammar_matcher_free(g->gm);
    free(g->mask);
    cn_detok_free(g->detok);
    cn_stop_filter_free(g->filter);
    free(g->hist);
    free(g->info);
    free(g->t_tok);
    cn_buf_free(&g->text);
    free(g);
}

cn_status cn_gen_begin(cn_gen *g, const int32_t *prompt, int32_t n_prompt, int32_t n_cached, cn_error *err) {
    if (g->begun) return cn_err(err, CN_STATUS_INVALID_ARG, "generation: begun twice");
    if (n_prompt < 0 || (n_prompt > 0 && !prompt) || n_cached < 0 || n_cached > n_prompt)
        return cn_err(err, CN_STATUS_INVALID_ARG, "generation: bad prompt (%d tokens, %d cached)", (int)n_prompt,
                      (int)n_cached);
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= g->n_vocab)
            return cn_err(err, CN_STATUS_INVALID_ARG, "prompt token %d = %d is outside the vocabulary [0, %d)", (int)i,
                          (int)prompt[i], (int)g->n_vocab);
    if (!CN_GROW(g->hist, g->cap_hist, (size_t)n_prompt + 16))
        return cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory for %d prompt tokens", (int)n_prompt);
    if (n_prompt > 0) memcpy(g->hist, prompt, (size_t)n_prompt * sizeof *prompt);
    g->n_hist = (size_t)n_prompt;
    g->n_prompt = n_prompt;
    g->n_cached = n_cached;
    g->t_begin = cn_time_ms();
    g->begun = true;
    return CN_STATUS_OK;
}

/* ---- steps ---- */

static void set_done(cn_gen *g, cn_finish_reason reason, cn_gen_step *out) {
    g->done = true;
    g->reason = reason;
    g->t_end = cn_time_ms();
    if (out) {
        out->done = true;
        out->finish = reason;
    }
}

void cn_gen_finish(cn_gen *g, cn_finish_reason reason) {
    if (!g || g->done) return;
    const char *text;
    size_t n = 0;
    bool stopped = false;
    if (cn_detok_flush(g->detok, &text, &n) == CN_STATUS_OK && n > 0)
        cn_stop_filter_push(g->filter, text, n, &stopped, NULL);
    cn_stop_filter_finish(g->filter, reason); /* no-op if the flush completed a stop string */
    set_done(g, cn_stop_filter_reason(g->filter), NULL);
}

static bool should_cancel(const cn_gen *g) { return g->p.should_cancel && g->p.should_cancel(g->p.user); }

/* info and t_tok, which share one capacity, hold at least need tokens. */
static bool grow_gen(cn_gen *g, size_t need) {
    if (need <= g->cap_gen) return true;
    const size_t cap = cn_grow_cap(g->cap_gen, need, sizeof *g->info); /* the wider of the two */
    cn_gen_token *info = cap ? realloc(g->info, cap * sizeof *info) : NULL;
    if (info) g->info = info;
    double *t = info ? realloc(g->t_tok, cap * sizeof *t) : NULL;
    if (t) g->t_tok = t;
    if (!t) return false;
    g->cap_gen = cap;
    return true;
}

cn_status cn_gen_accept(cn_gen *g, const cn_gen_token *tok, double t_ms, cn_gen_step *out, cn_error *err) {
    cn_gen_step step = {tok ? tok->id : -1, false, CN_FINISH_NONE};
    if (out) *out = step;
    if (!tok) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_gen_accept: no token");
    if (!g->begun || g->done)
        return cn_err(err, CN_STATUS_INVALID_ARG, "generation: token pushed %s",
                      g->done ? "after the request finished" : "before cn_gen_begin");
    const int32_t id = tok->id;
    if (id < 0 || id >= g->n_vocab || id >= cn_tokenizer_n_vocab(g->tok))
        return cn_err(err, CN_STATUS_INVALID_ARG, "token %d is outside the vocabulary [0, %d)", (int)id,
                      (int)CN_MIN(g->n_vocab, cn_tokenizer_n_vocab(g->tok)));
    if (t_ms < 0) t_ms = cn_time_ms();
    if (g->gm && g->n_guessed > 0)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "generation: a token accepted while %zu guesses are still "
                      "committed to the grammar (cn_gen_guess_undo first)",
                      g->n_guessed);
    const bool eog = cn_tokenizer_is_eog(g->tok, id);
    /* A refused token leaves the request as it was; so does a failure after the grammar
     * took it (it is rolled back). An end-of-generation token with ignore_eos is output
     * like any other and ends nothing: the grammar does not see it. */
    const bool to_grammar = g->gm && !(eog && g->p.sampling.ignore_eos);
    if (to_grammar && !cn_grammar_matcher_accept(g->gm, id))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "grammar", "token %d is not allowed by the grammar here%s",
                            (int)id, eog ? " (end of generation before the text is complete)" : "");

    if (!g->p.sampling.ignore_eos && eog) {
        cn_gen_finish(g, CN_FINISH_STOP);
        if (out) *out = (cn_gen_step){id, true, g->reason};
        return CN_STATUS_OK;
    }
    cn_status st = CN_STATUS_OK;
    if (!CN_GROW(g->hist, g->cap_hist, g->n_hist + 1))
        st = cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory for the token history");
    if (st == CN_STATUS_OK && !grow_gen(g, (size_t)g->n_gen + 1))
        st = cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory for token %d", (int)g->n_gen);
    const char *text = NULL;
    size_t n_text = 0;
    if (st == CN_STATUS_OK && (st = cn_detok_push(g->detok, id, &text, &n_text)) != CN_STATUS_OK)
        st = cn_err(err, st, "detokenizer failed on token %d", (int)id);
    if (st != CN_STATUS_OK) {
        if (to_grammar) cn_grammar_matcher_rollback(g->gm, 1, NULL);
        return st;
    }

    g->hist[g->n_hist++] = id;
    cn_gen_token *ti = &g->info[g->n_gen];
    *ti = *tok;
    ti->index = g->n_gen;
    g->t_tok[g->n_gen] = t_ms;
    g->n_gen++;
    if (g->p.on_token) g->p.on_token(g->p.user, ti);

    bool stopped = false;
    st = cn_stop_filter_push(g->filter, text, n_text, &stopped, err);
    if (st != CN_STATUS_OK) return st;
    if (g->text.failed) return cn_err(err, CN_STATUS_NO_MEMORY, "generation: out of memory for the output text");
    if (stopped) set_done(g, CN_FINISH_STOP, &step);
    else if (g->gm && cn_grammar_matcher_is_done(g->gm)) {
        cn_gen_finish(g, CN_FINISH_STOP); /* nothing can follow: not even a choice to stop */
        step.done = true;
        step.finish = g->reason;
    } else if (g->n_gen >= g->p.max_tokens) {
        cn_gen_finish(g, CN_FINISH_LENGTH);
        step.done = true;
        step.finish = g->reason;
    }
    if (out) *out = step;
    return CN_STATUS_OK;
}

cn_status cn_gen_push_logits(cn_gen *g, const float *logits, cn_gen_step *out, cn_error *err) {
    if (out) *out = (cn_gen_step){-1, false, CN_FINISH_NONE};
    if (!g->begun || g->done)
        return cn_err(err, CN_STATUS_INVALID_ARG, "generation: logits pushed %s",
                      g->done ? "after the request finished" : "before cn_gen_begin");
    if (!logits) return cn_err(err, CN_STATUS_INVALID_ARG, "generation: logits are NULL");
    if (should_cancel(g)) {
        cn_gen_finish(g, CN_FINISH_CANCELLED);
        if (out) *out = (cn_gen_step){-1, true, g->reason};
        return CN_STATUS_OK;
    }
    if (g->gm) {
        cn_status st = CN_STATUS_OK;
        if (g->n_guessed > 0)
            st = cn_err(err, CN_STATUS_INVALID_ARG,
                        "generation: logits pushed while guesses are "
                        "committed to the grammar");
        if (st == CN_STATUS_OK) st = cn_grammar_matcher_mask(g->gm, g->mask, g->n_mask_words, err);
        if (st != CN_STATUS_OK) return st;
        cn_sampler_set_mask(g->sampler, g->mask, g->n_mask_bits);
    }
    const bool after_chain = g->p.logprobs_after_chain && g->p.sampling.n_logprobs >= 0;
    g->obs_seen = false;
    if (after_chain) cn_sampler_set_observer(g->sampler, observe_stage, g);
    int32_t id;
    cn_sample_info si;
    cn_status st = cn_sampler_sample(g->sampler, logits, g->n_vocab, g->hist, g->n_hist, &id, &si, err);
    if (after_chain) cn_sampler_set_observer(g->sampler, NULL, NULL);
    cn_sampler_set_mask(g->sampler, NULL, 0);
    if (st != CN_STATUS_OK) return st;

    cn_gen_token tok;
    memset(&tok, 0, sizeof tok);
    tok.id = id;
    tok.has_logprob = si.has_logprob;
    if (si.has_logprob && after_chain && g->obs_seen) {
        tok.logprob = logf(si.p);
        tok.n_top = g->obs_n;
        for (int32_t i = 0; i < g->obs_n; i++) {
            tok.top[i] = g->obs_top[i];
            if (g->obs_top[i].id == id) tok.logprob = g->obs_top[i].logprob;
        }
    } else if (si.has_logprob) {
        tok.logprob = si.logprob;
        tok.n_top = si.n_top;
        for (int32_t i = 0; i < si.n_top; i++) tok.top[i] = (cn_gen_logprob){si.top[i].id, si.top[i].logprob};
    }
    return cn_gen_accept(g, &tok, -1.0, out, err);
}

/* ---- guessing under the grammar (speculation) ---- */

int32_t cn_gen_guess_filter(cn_gen *g, const int32_t *draft, int32_t n) {
    if (!g->gm || n <= 0) return CN_MAX(n, 0);
    int32_t k = 0;
    while (k < n && draft[k] >= 0 && draft[k] < g->n_mask_bits && cn_grammar_matcher_accept(g->gm, draft[k])) k++;
    g->n_guessed += (size_t)k;
    cn_gen_guess_undo(g);
    return k;
}

int32_t cn_gen_guess_next(cn_gen *g, const float *logits, int32_t n_vocab) {
    if (!g->gm) return cn_argmax(logits, n_vocab);
    if (cn_grammar_matcher_is_done(g->gm)) return -1;
    cn_error err = {0};
    if (cn_grammar_matcher_mask(g->gm, g->mask, g->n_mask_words, &err) != CN_STATUS_OK) return -1;
    /* the first id of the largest logit among the allowed ones, as cn_argmax picks */
    int32_t best = -1;
    const int32_t n = CN_MIN(n_vocab, g->n_mask_bits);
    for (int32_t w = 0; w * 32 < n; w++) {
        for (uint32_t bits = g->mask[w]; bits; bits &= bits - 1) {
            const int32_t id = w * 32 + __builtin_ctz(bits);
            if (id >= n) break;
            if (best < 0 || logits[id] > logits[best]) best = id;
        }
    }
    if (best < 0 || !cn_grammar_matcher_accept(g->gm, best)) return -1;
    g->n_guessed++;
    return best;
}

void cn_gen_guess_undo(cn_gen *g) {
    if (!g->gm || g->n_guessed == 0) return;
    cn_error err = {0};
    /* The steps were committed just now and the matcher keeps every step: rolling them
     * back cannot fail unless our own bookkeeping is wrong. */
    const cn_status st = cn_grammar_matcher_rollback(g->gm, g->n_guessed, &err);
    assert(st == CN_STATUS_OK);
    (void)st;
    g->n_guessed = 0;
}

/* ---- results ---- */

bool cn_gen_done(const cn_gen *g) { return g->done; }
cn_finish_reason cn_gen_finish_reason(const cn_gen *g) { return g->reason; }
int cn_gen_stop_index(const cn_gen *g) { return cn_stop_filter_stop_index(g->filter); }

const char *cn_gen_text(const cn_gen *g, size_t *n_bytes) {
    if (n_bytes) *n_bytes = g->text.n;
    return g->text.p ? g->text.p : "";
}

const int32_t *cn_gen_tokens(const cn_gen *g, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = g->n_gen;
    return g->hist ? g->hist + g->n_prompt : NULL;
}

const cn_gen_token *cn_gen_token_info(const cn_gen *g, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = g->n_gen;
    return g->info;
}

const int32_t *cn_gen_history(const cn_gen *g, size_t *n_tokens) {
    if (n_tokens) *n_tokens = g->n_hist;
    return g->hist;
}

int32_t cn_gen_n_generated(const cn_gen *g) { return g->n_gen; }
const cn_gen_params *cn_gen_params_of(const cn_gen *g) { return &g->p; }
cn_sampler *cn_gen_sampler(cn_gen *g) { return g->sampler; }
const cn_tokenizer *cn_gen_tokenizer(const cn_gen *g) { return g->tok; }

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cn_gen_percentile(double *v, size_t n, double q) {
    if (n == 0) return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    if (!(q > 0)) return v[0];
    if (q >= 1) return v[n - 1];
    const double at = q * (double)(n - 1);
    const size_t lo = (size_t)at;
    const double frac = at - (double)lo;
    return lo + 1 < n ? v[lo] + frac * (v[lo + 1] - v[lo]) : v[lo];
}

void cn_gen_get_timings(const cn_gen *g, cn_gen_timings *out) {
    memset(out, 0, sizeof *out);
    out->n_prompt_tokens = g->n_prompt;
    out->n_cached_tokens = g->n_cached;
    out->n_generated_tokens = g->n_gen;
    if (!g->begun) return;
    const double t_end = g->done ? g->t_end : cn_time_ms();
    out->queue_ms = g->t_begin - g->t_arrival;
    out->total_ms = t_end - g->t_arrival;
    if (g->n_gen == 0) return;
    const double t_first = g->t_tok[0], t_last = g->t_tok[g->n_gen - 1];
    out->prefill_ms = t_first - g->t_begin;
    out->ttft_ms = t_first - g->t_arrival;
    out->decode_ms = t_last - t_first;
    const int32_t n_prefilled = g->n_prompt - g->n_cached;
    if (out->prefill_ms > 0) out->prefill_tok_s = n_prefilled * 1000.0 / out->prefill_ms;
    if (g->n_gen < 2) return;
    if (out->decode_ms > 0) out->decode_tok_s = (g->n_gen - 1) * 1000.0 / out->decode_ms;
    const size_t n_itl = (size_t)g->n_gen - 1;
    double *itl = malloc(n_itl * sizeof *itl);
    if (!itl) return;
    double sum = 0;
    for (size_t i = 0; i < n_itl; i++) {
        itl[i] = g->t_tok[i + 1] - g->t_tok[i];
        sum += itl[i];
    }
    out->itl_mean_ms = sum / (double)n_itl;
    out->itl_p50_ms = cn_gen_percentile(itl, n_itl, 0.50);
    out->itl_p90_ms = cn_gen_percentile(itl, n_itl, 0.90);
    out->itl_p99_ms = cn_gen_percentile(itl, n_itl, 0.99);
    free(itl);
}

/* ---- the single-request loop ---- */

cn_status cn_gen_prefill(const cn_gen_runner *r, int32_t seq, const int32_t *tokens, int32_t n, int32_t from,
                         float *logits, cn_error *err) {
    if (from < 0 || from >= n)
        return cn_err(err, CN_STATUS_INVALID_ARG, "prefill: nothing to do (tokens %d..%d)", (int)from, (int)n);
    if (r->n_batch < 1) return cn_err(err, CN_STATUS_INVALID_ARG, "prefill: n_batch = %d", (int)r->n_batch);
    cn_batch b = {0};
    cn_status st = cn_batch_init(&b, CN_MIN(r->n_batch, n - from), err);
    for (int32_t i = from; st == CN_STATUS_OK && i < n; i += b.cap) {
        cn_batch_clear(&b);
        const int32_t end = CN_MIN(n, i + b.cap);
        for (int32_t j = i; j < end; j++) cn_batch_add(&b, tokens[j], j, seq, j == n - 1);
        st = cn_forward(r->model, r->fwd, &b, r->kv, logits, err);
    }
    cn_batch_free(&b);
    return st;
}

cn_status cn_gen_check_prompt(const cn_gen_runner *r, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                              int32_t *n_reuse, cn_error *err) {
    const int32_t n_ctx = cn_fwd_n_ctx(r->fwd);
    if (n_prompt < 1 || !prompt) return cn_err(err, CN_STATUS_INVALID_ARG, "the prompt is empty (no tokens)");
    if (n_prompt >= n_ctx)
        return cn_err(err, CN_STATUS_LIMIT,
                      "the prompt is %d tokens and the context holds %d: no room to generate "
                      "(shorten the prompt or enlarge the context)",
                      (int)n_prompt, (int)n_ctx);
    if (!n_reuse) return CN_STATUS_OK;
    if (*n_reuse < 0 || *n_reuse > cn_kv_seq_len(r->kv, seq))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_reuse = %d but sequence %d holds %lld positions", (int)*n_reuse,
                      (int)seq, (long long)cn_kv_seq_len(r->kv, seq));
    if (*n_reuse > n_prompt - 1) *n_reuse = n_prompt - 1;
    return CN_STATUS_OK;
}

cn_status cn_generate(const cn_gen_runner *r, int32_t seq, const int32_t *prompt, int32_t n_prompt, int32_t n_reuse,
                      cn_gen *g, cn_error *err) {
    if (!r || !r->model || !r->fwd || !r->kv || !g)
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_generate: NULL argument");
    const int32_t V = cn_model_hparams(r->model)->n_vocab, n_ctx = cn_fwd_n_ctx(r->fwd);
    if (g->n_vocab != V)
        return cn_err(err, CN_STATUS_INVALID_ARG, "the request was made for %d logits, the model has %d",
                      (int)g->n_vocab, (int)V);
    cn_status st = cn_gen_check_prompt(r, seq, prompt, n_prompt, &n_reuse, err);
    if (st != CN_STATUS_OK) return st;
    st = cn_gen_begin(g, prompt, n_prompt, n_reuse, err);
    if (st != CN_STATUS_OK) return st;
    cn_kv_seq_truncate(r->kv, seq, n_reuse);
    if (should_cancel(g)) {
        cn_gen_finish(g, CN_FINISH_CANCELLED);
        return CN_STATUS_OK;
    }
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!logits) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for logits");
    cn_batch b = {0};
    st = cn_batch_init(&b, 1, err);
    if (st == CN_STATUS_OK) st = cn_gen_prefill(r, seq, prompt, n_prompt, n_reuse, logits, err);
    while (st == CN_STATUS_OK) {
        cn_gen_step step;
        st = cn_gen_push_logits(g, logits, &step, err);
        if (st != CN_STATUS_OK || step.done) break;
        /* prompt + output fit in the context (as vLLM counts): stop when the token just
         * chosen took the last position, so no further token could have one */
        const int32_t pos = n_prompt + g->n_gen - 1; /* where step.token goes */
        if (pos + 1 >= n_ctx) {
            cn_gen_finish(g, CN_FINISH_LENGTH);
            break;
        }
        cn_batch_clear(&b);
        cn_batch_add(&b, step.token, pos, seq, true);
        st = cn_forward(r->model, r->fwd, &b, r->kv, logits, err);
    }
    cn_batch_free(&b);
    free(logits);
    return st;
}
