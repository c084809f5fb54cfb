/* sampling.h — the sampler chain: candidate arrays, the stage functions that transform
 * them, and cn_sampler, which owns one request's parameters, RNG and scratch buffers and
 * turns a logits row into a token. The parameter struct and the stage enum are public
 * (include/cinder.h); this header is the engine-internal API used by the generation loop,
 * explain and the tests. Nothing here knows a model or a tokenizer: tokens are ids in
 * [0, n_vocab). The chain order is described atop sampling_params.c, the canonical order
 * and the top-p rule atop sampling_stages.c; sampling.c is the sampler. */
#ifndef CN_GEN_SAMPLING_H
#define CN_GEN_SAMPLING_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "cinder.h"

/* cn_candidate (public, include/cinder.h): one candidate token; here its p is only
 * meaningful while the owning cn_cands is normalized. */

/* The working set a chain transforms: a view over a caller-owned buffer. The canonical
 * order of candidates is logit descending, then id ascending (a strict total order, so
 * every selection below has one answer whatever the physical order of data[]).
 * Invariants between stages: n >= 1, every logit is finite (stages that can produce -inf
 * drop those candidates), data[0..n_sorted) are the n_sorted first candidates in canonical
 * order and in that order, and every later candidate ranks after them. */
typedef struct {
    cn_candidate *data; /* (n), borrowed */
    size_t n;
    size_t n_sorted;
    bool normalized; /* p = softmax(logit) over data[0..n) */
    bool by_id;      /* data[i].id == i for all i: the full vocabulary, untouched */
} cn_cands;

/* Fills buf (n_vocab entries) with (i, logits[i]) and points c at it. -inf logits are
 * dropped (the token cannot be drawn). NaN or +inf logits, or no finite logit at all:
 * CN_STATUS_INVALID_ARG. */
cn_status cn_cands_init(cn_cands *c, cn_candidate *buf, const float *logits, int32_t n_vocab, cn_error *err);

/* The stages. Each is a pure function of the candidate set and its parameters (plus
 * scratch the caller owns); each keeps the cn_cands invariants. A stage at its "off"
 * value returns without touching c. */

/* bias: sorted by token ascending, tokens unique. Tokens whose logit becomes -inf are
 * dropped; c->n may become 0 (every token banned), which the caller must treat as an
 * error. */
void cn_stage_logit_bias(cn_cands *c, const cn_logit_bias *bias, size_t n_bias);

/* window: the recent tokens (n_window, ids in [0, n_vocab)). counts: n_vocab zeros of
 * scratch, left zeroed on return. For each token seen in the window, count times:
 * logit = logit > 0 ? logit / repetition : logit * repetition   (CTRL, llama.cpp)
 * logit -= presence * (count > 0) + frequency * count            (OpenAI)
 * Tokens whose logit becomes -inf are dropped (c->n may become 0, as above). */
void cn_stage_penalties(cn_cands *c, const int32_t *window, size_t n_window, float repetition, float presence,
                        float frequency, int32_t *counts);

/* t > 0: logit /= t. t == 0: keep only the best candidate (greedy), p = 1. If dividing
 * would overflow the float range, the limit t -> 0 is taken (greedy) as well. */
void cn_stage_temperature(cn_cands *c, float t);
void cn_stage_top_k(cn_cands *c, int32_t k);   /* k <= 0 or k >= n: off */
void cn_stage_top_p(cn_cands *c, float top_p); /* top_p >= 1: off */
void cn_stage_min_p(cn_cands *c, float min_p); /* min_p <= 0: off */
/* scratch: c->n entries. */
void cn_stage_typical(cn_cands *c, float typical_p, cn_candidate *scratch); /* >= 1: off */

/* p = softmax(logit), computed as exp(l - l_max) / sum with the sum in double. */
void cn_stage_softmax(cn_cands *c);

/* Inverse CDF in canonical order: the first candidate whose cumulative probability
 * exceeds u * (total mass), found by partitioning, not sorting. u in [0, 1). Returns the
 * index into c->data. */
size_t cn_stage_draw(cn_cands *c, double u);

/* Puts the min(m, n) canonically-first candidates, in order, at the front of c->data
 * (partial selection; no full sort unless m >= n). */
void cn_cands_sort_prefix(cn_cands *c, size_t m);

/* The relative slack of the top-p and typical cumulative-mass comparison (see
 * sampling_stages.c): a prefix whose mass is >= p * (1 - CN_TOP_P_REL_EPS) reaches p. */
#define CN_TOP_P_REL_EPS 1e-6

/* ---- the sampler: one per request ---- */

typedef struct cn_sampler cn_sampler;

/* Called after each stage that ran (stages at their off value are skipped) with a view of
 * the candidates, valid only during the call, in no particular order; their p may be
 * stale: use cn_cands_top to read probabilities. */
typedef void (*cn_sampler_observer)(void *user, cn_sampler_stage stage, const cn_candidate *cand, size_t n_cand);

/* What one draw produced. */
typedef struct {
    int32_t id;
    float logprob; /* log-probability under the model's raw distribution (before the chain) */
} cn_token_logprob;

typedef struct {
    int32_t token;                                  /* the chosen token (also returned through out_token) */
    float p;                                        /* its probability in the final, renormalized candidate set */
    int32_t n_kept;                                 /* candidates left after the chain, before the draw */
    double u;                                       /* the uniform draw in [0, 1) used (consumed even when greedy) */
    bool has_logprob;                               /* n_logprobs >= 0 */
    float logprob;                                  /* the chosen token's raw log-probability */
    int32_t n_top;                                  /* = min(n_logprobs, tokens with finite logits) */
    cn_token_logprob top[CN_SAMPLING_MAX_LOGPROBS]; /* raw top tokens, most likely first */
} cn_sample_info;

/* Validates p (cn_sampling_validate with n_vocab), copies it (logit_bias included: p's
 * array is borrowed only during the call), seeds the RNG and allocates the scratch
 * buffers for n_vocab once. */
cn_status cn_sampler_create(const cn_sampling_params *p, int32_t n_vocab, cn_sampler **out, cn_error *err);
/* As cn_sampler_create for a p that already passed cn_sampling_validate(p, n_vocab) with
 * n_vocab > 0 (cn_gen_create validated it with the rest of the request). */
cn_status cn_sampler_create_valid(const cn_sampling_params *p, int32_t n_vocab, cn_sampler **out, cn_error *err);
void cn_sampler_free(cn_sampler *s); /* NULL: no-op */

/* The parameters in use (logit_bias points at the sampler's merged copy, sorted by token);
 * view valid until the sampler is freed or cn_sampler_add_bias is called. */
const cn_sampling_params *cn_sampler_params(const cn_sampler *s);

/* The seed actually used (a picked one when the params said CN_SAMPLING_SEED_RANDOM). */
uint64_t cn_sampler_seed(const cn_sampler *s);

/* Restarts the random stream from seed (CN_SAMPLING_SEED_RANDOM picks a new one). */
void cn_sampler_reseed(cn_sampler *s, uint64_t seed);

/* Adds one more bias (merged with an existing one for the same token), e.g. -INFINITY on
 * each end-of-generation token when params.ignore_eos. Requires logit_bias in the chain. */
cn_status cn_sampler_add_bias(cn_sampler *s, int32_t token, float bias, cn_error *err);

/* Sets (or clears, with mask NULL) the token mask: bit (i % 32) of mask[i / 32] set when
 * token i may be drawn; ids >= n_bits may not. It is the chain's first stage, always,
 * whatever the order of the others: a token outside it cannot be drawn, and logit bias,
 * penalties, temperature and the truncations see only the tokens inside it. Logprobs
 * (cn_sample_info) stay those of the raw model (before the mask); an observer sees the
 * candidates after it. Borrowed: mask must stay valid and unchanged until the sampler
 * is given another one or NULL. A mask that, with the rest of the chain, leaves no token
 * makes cn_sampler_sample fail (INVALID_ARG), like a bias that bans every token. */
void cn_sampler_set_mask(cn_sampler *s, const uint32_t *mask, int32_t n_bits);

/* Sets (or clears, with fn NULL) the per-stage observer. */
void cn_sampler_set_observer(cn_sampler *s, cn_sampler_observer fn, void *user);

/* Chooses the next token from one row of logits (n_vocab, borrowed, not modified).
 * history: the tokens that penalties look at (n_history, may be NULL when 0), oldest
 * first; the last penalty_last_n of them are used (all when -1). Consumes exactly one
 * uniform from the RNG per call that returns OK (none on error), so the k-th successful
 * call of a seeded sampler always uses the k-th draw. info may be NULL. Errors (CN_STATUS_INVALID_ARG): n_vocab differs
 * from creation, a NaN/+inf logit, a history token out of range, every token banned (by the mask, the bias or the
 * penalties). */
cn_status cn_sampler_sample(cn_sampler *s, const float *logits, int32_t n_vocab, const int32_t *history,
                            size_t n_history, int32_t *out_token, cn_sample_info *info, cn_error *err);

/* The token temperature 0 would pick under p's logit bias and penalties (every other
 * stage off, the default chain): what explain calls "greedy". Errors as cn_sampler_sample. */
cn_status cn_sampler_greedy(const cn_sampling_params *p, const float *logits, int32_t n_vocab, const int32_t *history,
                            size_t n_history, int32_t *out_token, cn_error *err);

/* Read-only: the min(k, n) canonically-first candidates of cand[0..n) into out, with
 * out[i].p = their softmax probability over all n candidates. Returns the count. */
size_t cn_cands_top(const cn_candidate *cand, size_t n, size_t k, cn_candidate *out);

#endif
