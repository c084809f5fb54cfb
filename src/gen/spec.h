/* spec.h — speculative decoding for one request: a drafter guesses the next few tokens
 * cheaply, the target model checks them all in one batched forward pass (which reads its
 * weights once for every row), and as many as it agrees with are kept.
 *
 * Two drafters: a smaller draft model with the target's vocabulary (its own runner:
 * model, context, KV cache), and n-gram prompt lookup (the continuation of the longest
 * recent n-gram that occurred earlier in the prompt or the output; no model at all).
 *
 * Exactness. Both drafters propose deterministic guesses (the draft model its greedy
 * choice), and the target row for each drafted position goes through the request's own
 * sampler exactly as plain decoding would (cn_gen_push_logits: the same chain, the same
 * uniform draw from the same seeded stream); a guess is kept while it equals the token
 * chosen. For a drafted token x with proposal q = δ_x this is the standard rejection
 * rule: accept with probability min(1, p(x)/q(x)) = p(x), else draw from norm(max(0, p -
 * q)) = p without x. Since the target's rows are bit-identical whatever the batch (the
 * kernels' batch invariance), the tokens are the same as without speculation, greedy or
 * seeded sampling alike, and so are stop strings, max_tokens and the context limit. Only
 * the work per token changes.
 *
 * Under a grammar (cn_gen_params.grammar) the same holds: each row goes through
 * cn_gen_push_logits, whose mask comes from the matcher advanced along the tokens
 * confirmed before it, and a rejected guess never reaches the matcher. The drafters guess
 * under the grammar (cn_gen_guess_*, rolled back before the verify pass): lookup's guesses
 * are cut at the first one the grammar refuses, the draft model's are its best allowed
 * token at each step.
 *
 * KV: the target's cache gets the drafted positions in the verify pass, and the rejected
 * ones are truncated away (cn_kv_seq_truncate); the draft model's cache likewise keeps
 * only what the target accepted. Adaptive: the draft length grows while every guess is
 * kept and shrinks on a miss; a drafter whose guesses keep missing is switched off for
 * 32 tokens, then tried again (every drafted row costs the target a row of its verify
 * pass, and a draft model its own passes); lookup costs nothing when it finds no match. */
#ifndef CN_GEN_SPEC_H
#define CN_GEN_SPEC_H

#include "gen/generate.h"

#define CN_SPEC_MAX_DRAFT 16 /* the longest draft one step proposes */

typedef struct {
    const cn_gen_runner *draft; /* the draft model's runner (same vocabulary), or NULL */
    int32_t draft_seq;          /* the sequence the draft uses in its own cache */
    int32_t lookup_n;           /* without a draft model: n-gram lookup with n-grams of up to this
                                 * many tokens (1..8); 0 with no draft model: plain decoding */
    int32_t n_draft_max;        /* [1, CN_SPEC_MAX_DRAFT], default 8: the longest draft */
    bool adaptive;              /* default true: see above; false: always n_draft_max */
} cn_spec_params;

cn_spec_params cn_spec_default_params(void);

/* What speculation did for one request. */
typedef struct {
    int64_t steps;       /* verify passes of the target (each makes at least one token) */
    int64_t drafted;     /* tokens proposed */
    int64_t accepted;    /* of them, kept */
    int64_t draft_evals; /* draft-model forward passes */
    int64_t plain_steps; /* steps with no draft (no lookup match, or speculation off) */
} cn_spec_stats;

/* A drafter's acceptance, decayed (each update weighs the past by 0.9): drafts kept over
 * drafts judged, where a step's first miss ends the judging (acc < drafted: acc + 1
 * judged). Starts at a prior of 0.6. Shared by this file's planner and the engine's. */
typedef struct {
    double hit, try;
} cn_spec_rate;

cn_spec_rate cn_spec_rate_prior(void);
void cn_spec_rate_update(cn_spec_rate *r, int32_t drafted, int32_t accepted);
double cn_spec_rate_value(const cn_spec_rate *r);

/* Checks p: lookup_n and n_draft_max in range, a draft runner complete. */
cn_status cn_spec_validate(const cn_spec_params *p, cn_error *err);

/* Whether a draft model may serve a target: the same vocabulary, token for token (else
 * an error naming the first token that differs). */
cn_status cn_spec_check_vocab(const cn_tokenizer *target, const cn_tokenizer *draft, cn_error *err);

/* cn_generate with speculation: the same contract (seq, prompt, n_reuse, g; the tokens
 * are the ones cn_generate would make), plus stats (may be NULL). A verify pass is one
 * cn_forward, so drafts are at most r->n_batch - 1 long (n_batch 1: an error). The draft
 * sequence is truncated to 0 and prefilled with the prompt first. */
cn_status cn_generate_spec(const cn_gen_runner *r, const cn_spec_params *p, int32_t seq, const int32_t *prompt,
                           int32_t n_prompt, int32_t n_reuse, cn_gen *g, cn_spec_stats *stats, cn_error *err);

/* The lookup drafter, exposed for tests: up to k tokens continuing hist[0..n) — after the
 * most recent earlier occurrence of its longest suffix of 1..max_n tokens (the longest n
 * that matches wins; ties: the most recent occurrence). Returns how many (0: no match). */
int32_t cn_spec_lookup(const int32_t *hist, size_t n, int32_t max_n, int32_t k, int32_t *out);

#endif
