/* beam.h — beam search for one request: keeps the n_beams best partial continuations by
 * summed log-probability, advances all of them in one forward batch per step, and hands
 * the best finished sequence to the request's cn_gen (text, stop strings, logprobs,
 * timings, finish reason come out exactly as for sampling).
 *
 * Scoring follows HF transformers: a step's candidates are the 2 * n_beams best (beam,
 * token) pairs by sum_logprob + log p_raw(token) + logit_bias(token); an end-of-generation
 * token (unless ignore_eos) or a completed stop string among the first n_beams finishes a
 * hypothesis, scored sum_logprob / max(n_tokens, 1)^length_penalty (n_tokens without the
 * end-of-generation token); the first n_beams other candidates become the next beams.
 * Temperature, top-k/p, min-p, typical and penalties do not apply (beam search is
 * deterministic); logit_bias and ignore_eos do. Logprobs reported are raw.
 *
 * Beams share their common prefix in the KV cache: a child takes its parent's sequence
 * (the first child) or a cn_kv_seq_fork of it (no copy; only a partly filled last block
 * is copied, on write). */
#ifndef CN_GEN_BEAM_H
#define CN_GEN_BEAM_H

#include "gen/generate.h"

typedef struct {
    int32_t n_tokens;        /* of the best sequence (an ending end-of-generation token
                                not counted) */
    double sum_logprob;      /* its summed raw log-probability (including that token) */
    double score;            /* sum_logprob / max(n_tokens, 1)^length_penalty */
    cn_finish_reason finish; /* how it ended (before the replay through g) */
    int32_t n_steps;         /* forward passes after the prefill */
    int32_t n_finished;      /* finished hypotheses kept (<= n_beams) */
} cn_beam_result;

/* Runs beam search with g's parameters (g created for the model's n_vocab, not begun;
 * g's beam.n_beams may be 1: then it is greedy search on the raw distribution, ending at
 * the first end-of-generation token if early_stopping). Uses sequences
 * [seq_base, seq_base + n_beams) of r->kv (all emptied first and freed on return): the
 * prompt is prefilled into seq_base. The best sequence is replayed into g (on_token,
 * on_text, cn_gen_text, timings with each token's time being its step's time); out (may
 * be NULL) gets its score. Errors: as cn_generate, and CN_STATUS_INVALID_ARG when the
 * sequences do not fit the cache's max_seqs. */
cn_status cn_beam_search(const cn_gen_runner *r, int32_t seq_base, const int32_t *prompt, int32_t n_prompt, cn_gen *g,
                         cn_beam_result *out, cn_error *err);

#endif
