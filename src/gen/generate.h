/* generate.h — one request's generation: a step machine (cn_gen) and a single-request loop
 * (cn_generate) that drives it.
 *
 * cn_gen is everything about a request except the model: its sampler, token history,
 * end-of-generation / stop-string / max_tokens checks, the detokenizer and stop filter that
 * turn tokens into streamed text, logprobs and timings. It never runs a forward pass: a
 * driver hands it one logits row per step (cn_gen_push_logits) and feeds the token it
 * returns back into the model, so one forward pass over a batch can advance many requests
 * (the batched engine) and the single-request loop below is just the simplest driver:
 *
 *     cn_gen_create(tok, n_vocab, &params, &g, &err);
 *     cn_gen_begin(g, prompt, n_prompt, n_cached, &err);  // prefill starts
 *     ... forward(prompt) -> logits
 *     for (;;) {
 *         cn_gen_push_logits(g, logits, &step, &err);       // sample, check, stream
 *         if (step.done) break;
 *         if (no room in the context) { cn_gen_finish(g, CN_FINISH_LENGTH); break; }
 *         ... forward(step.token at the next position) -> logits
 *     }
 *     cn_gen_text(g, ...), cn_gen_finish_reason(g), cn_gen_get_timings(g, ...)
 *
 * A cn_gen belongs to one thread at a time; callbacks run on that thread, inside the call
 * that produced them. */
#ifndef CN_GEN_GENERATE_H
#define CN_GEN_GENERATE_H

#include "cinder.h"
#include "gen/sampling.h"
#include "model/model.h"
#include "text/tokenizer.h"

typedef struct cn_gen cn_gen;

/* Validates p (cn_gen_validate with n_vocab) and builds the request's state. tok is
 * borrowed and must outlive g. n_vocab: the width of the logits rows that will be pushed
 * (the model's vocabulary; ids at or past the tokenizer's vocabulary are banned). With
 * p->sampling.ignore_eos every end-of-generation token gets a -inf bias (so the chain
 * must contain logit_bias). The arrival time (queue time starts) is now. With
 * p->grammar (compiled with tok's vocabulary, else INVALID_ARG naming "grammar"), g owns
 * a matcher on it (which holds a reference to the grammar until cn_gen_free): every
 * push is masked to what the grammar allows, every accepted token must be allowed, and
 * the request ends with "stop" when the matcher is done or an end-of-generation token
 * comes once the text is complete. Logprobs stay the raw model's (before the mask). */
cn_status cn_gen_create(const cn_tokenizer *tok, int32_t n_vocab, const cn_gen_params *p, cn_gen **out, cn_error *err);
/* As cn_gen_create for a p that already passed cn_gen_validate(p, n_vocab) (tok non-NULL,
 * n_vocab > 0), which it trusts: a caller that validated a request once at its boundary
 * (the engine's submit, for every completion of it) does not check it again. */
cn_status cn_gen_create_valid(const cn_tokenizer *tok, int32_t n_vocab, const cn_gen_params *p, cn_gen **out,
                              cn_error *err);
void cn_gen_free(cn_gen *g); /* NULL is a no-op */

/* Marks the start of prefill (queue time ends) and gives the prompt: prompt[0..n_prompt)
 * is copied as the start of the token history (penalties see prompt and output, as HF
 * transformers and llama.cpp do); n_cached of its leading tokens were reused from the KV
 * cache, not prefilled (for prefill tok/s). Once per request, before the first push. */
cn_status cn_gen_begin(cn_gen *g, const int32_t *prompt, int32_t n_prompt, int32_t n_cached, cn_error *err);

/* What one step did. */
typedef struct {
    int32_t token;           /* the token chosen (also when it ended the request as an
                                end-of-generation token); -1 when cancelled before choosing */
    bool done;               /* the request is over: do not feed token to the model */
    cn_finish_reason finish; /* why, when done; CN_FINISH_NONE otherwise */
} cn_gen_step;

/* One step from a logits row (n_vocab floats, borrowed, not modified): asks
 * should_cancel (true: finish "cancelled"), samples the next token, and accepts it as
 * cn_gen_accept does. Errors (the request stays open): a bad logits row (NaN, every token
 * banned), a push before cn_gen_begin or after done (CN_STATUS_INVALID_ARG). */
cn_status cn_gen_push_logits(cn_gen *g, const float *logits, cn_gen_step *out, cn_error *err);

/* Accepts a token chosen elsewhere (beam search, explain): tok->id, with its logprob
 * fields as they should be reported (tok->index is ignored). An end-of-generation token
 * (unless ignore_eos) ends the request with "stop" and is not part of the output;
 * otherwise the token is appended, on_token called, its text pushed through the
 * detokenizer and the stop filter (on_text gets what is final), and the request ends on a
 * stop string ("stop") or at max_tokens ("length"). t_ms: when the token was chosen
 * (cn_time_ms clock), or < 0 for now. */
cn_status cn_gen_accept(cn_gen *g, const cn_gen_token *tok, double t_ms, cn_gen_step *out, cn_error *err);

/* Ends the request for reason (the driver's reasons: CN_FINISH_LENGTH when the context is
 * full, CN_FINISH_CANCELLED, CN_FINISH_STOP): flushes the detokenizer and every held-back
 * byte through the stop filter to on_text (a stop string completed by the flush still
 * cuts the text and makes the reason "stop"). No-op once done. */
void cn_gen_finish(cn_gen *g, cn_finish_reason reason);

bool cn_gen_done(const cn_gen *g);
cn_finish_reason cn_gen_finish_reason(const cn_gen *g); /* CN_FINISH_NONE while open */
/* Index of the stop string that ended the request, -1 if none did. */
int cn_gen_stop_index(const cn_gen *g);

/* Everything emitted through on_text so far, NUL-terminated; view valid until the next
 * call on g. *n_bytes may be NULL. */
const char *cn_gen_text(const cn_gen *g, size_t *n_bytes);
/* The generated tokens (an ending end-of-generation token excluded); view valid until the
 * next call on g. */
const int32_t *cn_gen_tokens(const cn_gen *g, int32_t *n_tokens);
/* Per generated token: id and logprobs (has_logprob false when n_logprobs < 0). */
const cn_gen_token *cn_gen_token_info(const cn_gen *g, int32_t *n_tokens);
/* Prompt then generated tokens: what the penalties look at. */
const int32_t *cn_gen_history(const cn_gen *g, size_t *n_tokens);
/* Generated tokens so far. */
int32_t cn_gen_n_generated(const cn_gen *g);
/* The validated parameters (stop strings point at g's copies). */
const cn_gen_params *cn_gen_params_of(const cn_gen *g);
/* The request's sampler (explain drives it directly, then calls cn_gen_accept). */
cn_sampler *cn_gen_sampler(cn_gen *g);
const cn_tokenizer *cn_gen_tokenizer(const cn_gen *g);

void cn_gen_get_timings(const cn_gen *g, cn_gen_timings *out);

/* ---- guessing under the request's grammar (speculative decoding) ----
 * A drafter's guesses are only worth a verify row while the grammar allows them: the
 * sampler masks the row, so a refused guess is never confirmed. These let a drafter
 * guess under the grammar; without one they change nothing. Guesses are committed to the
 * matcher while they are made and must be undone (cn_gen_guess_undo) before the next
 * cn_gen_push_logits / cn_gen_accept, which refuse to run while guesses are pending. */
/* How many of draft[0..n) the grammar allows, in order, after the output so far (n
 * without a grammar): the ones after the first refused cannot be confirmed. The matcher
 * is left as it was. */
int32_t cn_gen_guess_filter(cn_gen *g, const int32_t *draft, int32_t n);
/* A draft model's greedy guess from its logits row (n_vocab): the largest logit (the
 * first on ties, as cn_argmax) among the tokens the grammar allows after the output and
 * the guesses made since the last undo, which it commits as one more guess; cn_argmax
 * without a grammar; -1 when the grammar allows nothing more (done) or the mask fails. */
int32_t cn_gen_guess_next(cn_gen *g, const float *logits, int32_t n_vocab);
/* Rolls the guesses back: the matcher is at the output again. */
void cn_gen_guess_undo(cn_gen *g);

/* ---- the single-request loop ---- */

/* Where a request runs: borrowed handles. n_batch: the most rows one cn_forward takes
 * (the context's n_batch_max); longer prompts are prefilled in chunks of n_batch. */
typedef struct {
    const cn_model *model;
    cn_fwd *fwd;
    cn_kv *kv;
    int32_t n_batch;
} cn_gen_runner;

/* Runs request g (created for the model's n_vocab, not yet begun) on sequence seq:
 * prompt[0..n_prompt) is the whole prompt, of which the first n_reuse tokens are already
 * in seq's cache at positions [0, n_reuse) (a conversation's common prefix; 0 for a fresh
 * sequence). seq is truncated to n_reuse, the rest of the prompt prefilled (at least its
 * last token, so n_reuse is lowered to n_prompt - 1 if needed), then one token is decoded
 * at a time until g is done. Prompt and output together fit in the context (n_ctx tokens,
 * as vLLM counts them): the token that takes the last position finishes the request with
 * "length". On return seq
 * holds the prompt and every generated token that was fed back (all but the last).
 * Returns CN_STATUS_OK when the request ran to a finish reason, whatever it was.
 * Errors: an empty prompt or bad n_reuse (CN_STATUS_INVALID_ARG); a prompt of n_ctx tokens
 * or more (CN_STATUS_LIMIT: no room to generate); a failed forward pass (its status; g is
 * left open). */
cn_status cn_generate(const cn_gen_runner *r, int32_t seq, const int32_t *prompt, int32_t n_prompt, int32_t n_reuse,
                      cn_gen *g, cn_error *err);

/* The checks every single-request loop makes before it begins: a non-empty prompt that
 * leaves room to generate in r's context, and (n_reuse not NULL) *n_reuse within what
 * seq holds, lowered to n_prompt - 1 so the last prompt token is always prefilled. */
cn_status cn_gen_check_prompt(const cn_gen_runner *r, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                              int32_t *n_reuse, cn_error *err);

/* Prefills tokens[from..n) of seq (positions from..n-1) in chunks of r->n_batch, and
 * writes the last row's logits (n_vocab) to logits. For cn_generate and beam search. */
cn_status cn_gen_prefill(const cn_gen_runner *r, int32_t seq, const int32_t *tokens, int32_t n, int32_t from,
                         float *logits, cn_error *err);

#endif
