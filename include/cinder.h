/* cinder.h — the public C API of cinder.
 *
 * Opaque handles, status codes, parameter structs. Every fallible call returns a
 * cn_status and, when given a cn_error, fills it with a one-line message naming what
 * went wrong. The library never exits, aborts on bad input, or prints to stdout. */
#ifndef CINDER_H
#define CINDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CN_VERSION "0.1.0"

typedef enum {
    CN_STATUS_OK = 0,
    CN_STATUS_INVALID_ARG,   /* a parameter out of its valid range */
    CN_STATUS_IO,            /* open/read/write/mmap failed */
    CN_STATUS_CORRUPT,       /* a file or message is malformed */
    CN_STATUS_UNSUPPORTED,   /* well-formed, but not something cinder handles */
    CN_STATUS_NO_MEMORY,
    CN_STATUS_NOT_FOUND,     /* a key, tensor or token that should be there is not */
    CN_STATUS_LIMIT,         /* a hard limit (context, KV budget, sizes) would be exceeded */
    CN_STATUS_BUSY,          /* queue full: try later */
    CN_STATUS_CANCELLED,
} cn_status;

#define CN_ERROR_MSG_LEN 256

/* A status plus a human-readable, single-line message. */
typedef struct {
    cn_status status;
    char msg[CN_ERROR_MSG_LEN];
} cn_error;

/* A short constant name for a status ("ok", "corrupt", ...). */
const char *cn_status_str(cn_status s);

/* Tensor element formats. The numbering is GGUF's (ggml_type), so a type read from a
 * file maps to this enum directly. */
typedef enum {
    CN_TYPE_F32  = 0,
    CN_TYPE_F16  = 1,
    CN_TYPE_Q4_0 = 2,
    CN_TYPE_Q4_1 = 3,
    CN_TYPE_Q5_0 = 6,
    CN_TYPE_Q5_1 = 7,
    CN_TYPE_Q8_0 = 8,
    CN_TYPE_Q8_1 = 9,
    CN_TYPE_Q2_K = 10,
    CN_TYPE_Q3_K = 11,
    CN_TYPE_Q4_K = 12,
    CN_TYPE_Q5_K = 13,
    CN_TYPE_Q6_K = 14,
    CN_TYPE_Q8_K = 15,
    CN_TYPE_BF16 = 30,
    CN_TYPE_COUNT = 40,      /* one past the largest value; not a type */
} cn_type;

/* ---- finish reasons (implemented in src/gen/stop.c) ---- */
/* Why a generation ended; the names are OpenAI's finish_reason values. */
typedef enum {
    CN_FINISH_NONE = 0,      /* still running (OpenAI: null) */
    CN_FINISH_STOP,          /* a stop string or an end-of-generation token */
    CN_FINISH_LENGTH,        /* max_tokens reached or the context is full */
    CN_FINISH_CANCELLED,     /* the caller or the client gave up */
} cn_finish_reason;

/* "stop", "length", "cancelled"; "none" for CN_FINISH_NONE, "unknown" out of range. */
const char *cn_finish_reason_str(cn_finish_reason r);
/* ---- end finish reasons ---- */

/* ==== sampling ============================================================================
 * The sampler chain's parameters (implementation: src/gen/sampling.c; the chain order and
 * the top-p rule are documented there and in docs/sampling.md). */

/* One stage of the sampler chain. A chain is an ordered list of distinct stages; after its
 * last stage the sampler always takes the softmax of what is left and draws one token. */
typedef enum {
    CN_SAMPLER_LOGIT_BIAS = 0, /* add per-token biases; a bias of -inf bans the token */
    CN_SAMPLER_PENALTIES,      /* repetition (CTRL), then presence and frequency (OpenAI) */
    CN_SAMPLER_TEMPERATURE,    /* logits / T; T = 0 keeps only the argmax (lowest id on ties) */
    CN_SAMPLER_TOP_K,          /* keep the k most probable (ties: lowest id) */
    CN_SAMPLER_TOP_P,          /* keep the smallest most-probable set with mass >= p */
    CN_SAMPLER_MIN_P,          /* keep tokens with p >= min_p * p_max */
    CN_SAMPLER_TYPICAL,        /* locally typical sampling (Meister et al. 2022) */
    CN_SAMPLER_N_STAGES        /* the number of stages; not a stage */
} cn_sampler_stage;

/* One logit bias: logits[token] += bias. */
typedef struct {
    int32_t token;
    float bias; /* finite, or -INFINITY to ban the token */
} cn_logit_bias;

#define CN_SAMPLING_SEED_RANDOM UINT64_MAX /* seed: let the sampler pick one (and report it) */
#define CN_SAMPLING_MAX_LOGPROBS 20        /* the most n_logprobs can ask for */
#define CN_SAMPLING_MAX_LOGIT_BIAS 65536   /* the most logit_bias entries one request may carry */

/* Sampling parameters of one request. Get defaults from cn_sampling_default() and set
 * fields; the defaults are neutral (sample from the model's own distribution), as in the
 * OpenAI API and vLLM. Each comment gives the valid range and the value that turns the
 * stage off. */
typedef struct {
    float temperature;        /* [0, 100]; 0 = greedy; 1 = off (default) */
    int32_t top_k;            /* >= 0; 0 = off (default) */
    float top_p;              /* (0, 1]; 1 = off (default) */
    float min_p;              /* [0, 1]; 0 = off (default) */
    float typical_p;          /* (0, 1]; 1 = off (default) */
    float repetition_penalty; /* (0, 10]; 1 = off (default) */
    float presence_penalty;   /* [-2, 2]; 0 = off (default) */
    float frequency_penalty;  /* [-2, 2]; 0 = off (default) */
    int32_t penalty_last_n;   /* >= -1: penalize the last n tokens of the history;
                                 -1 = all of it (default), 0 = no penalties */
    const cn_logit_bias *logit_bias; /* borrowed: n_logit_bias entries, copied by the sampler;
                                        a token listed twice gets the sum of its biases */
    int32_t n_logit_bias;     /* [0, CN_SAMPLING_MAX_LOGIT_BIAS]; default 0 */
    uint64_t seed;            /* any value; CN_SAMPLING_SEED_RANDOM (default) = pick one */
    int32_t n_logprobs;       /* [-1, CN_SAMPLING_MAX_LOGPROBS]: -1 = none (default); 0 = the
                                 chosen token's log-probability; n = also the n most likely
                                 tokens' (both under the model's raw distribution) */
    bool ignore_eos;          /* for the generation loop: keep going past end-of-generation
                                 tokens by banning them (the sampler knows no token ids) */
    int32_t n_chain;          /* [1, CN_SAMPLER_N_STAGES] stages in chain[] */
    cn_sampler_stage chain[CN_SAMPLER_N_STAGES]; /* the order the stages run in; each at
                                 most once. Default: logit_bias, penalties, temperature,
                                 top_k, top_p, min_p, typical (HF transformers / vLLM) */
} cn_sampling_params;

cn_sampling_params cn_sampling_default(void);

/* Checks every field against its range, and that every stage that is not off is in the
 * chain. n_vocab > 0 also checks logit_bias token ids against [0, n_vocab); 0 skips that.
 * On failure: CN_STATUS_INVALID_ARG and a message naming the field, its value and its
 * valid range ("top_p = 1.7 is out of range: must be in (0, 1], 1 = off"). */
cn_status cn_sampling_validate(const cn_sampling_params *p, int32_t n_vocab, cn_error *err);

/* Sets p->chain from a spec: stage names separated by ';' or ',' (logit_bias, penalties,
 * temperature|temp, top_k, top_p, min_p, typical|typical_p|typ_p), or a preset: "default"
 * (= "hf" = "vllm") or "llama.cpp" (penalties;top_k;typical;top_p;min_p;temperature, i.e.
 * temperature last). logit_bias goes first unless the spec places it. p is unchanged on
 * error (an unknown or repeated name). */
cn_status cn_sampling_set_chain(cn_sampling_params *p, const char *spec, cn_error *err);

/* The spec name of a stage ("top_p"), or "?" for a value out of range. */
const char *cn_sampler_stage_name(cn_sampler_stage s);

/* ==== end of sampling ===================================================================== */

/* ==== generation ==========================================================================
 * One request: what to generate (cn_gen_params), what each generated token was
 * (cn_gen_token) and how long it took (cn_gen_timings). The functions that run a request
 * take the engine's internal handles and live in src/gen/generate.h (the per-request step
 * machine and the single-request loop) and src/gen/beam.h (beam search). */

#define CN_GEN_MAX_STOP 16           /* stop strings per request */
#define CN_GEN_MAX_STOP_LEN 256      /* bytes per stop string */
#define CN_GEN_MAX_TOKENS (1 << 24)  /* the largest max_tokens */
#define CN_GEN_MAX_BEAMS 64

/* A token and a log-probability. */
typedef struct {
    int32_t id;
    float logprob;
} cn_gen_logprob;

/* One generated token, as on_token receives it and the result keeps it.
 *
 * Log-probabilities (when sampling.n_logprobs >= 0): by default under the model's RAW
 * distribution, log_softmax of the logits before any stage of the chain (what vLLM reports
 * by default and what beam search scores). With logprobs_after_chain they are under the
 * distribution the token was actually drawn from: after every stage (bias, penalties,
 * temperature, truncation), renormalized; tokens the chain dropped are not listed there,
 * and greedy gives the chosen token logprob 0. End-of-generation tokens that end the
 * request are not reported as tokens. */
typedef struct {
    int32_t id;
    int32_t index;                 /* 0, 1, ... among the request's generated tokens */
    bool has_logprob;              /* sampling.n_logprobs >= 0 */
    float logprob;                 /* the token's log-probability */
    int32_t n_top;                 /* entries in top[] (<= n_logprobs) */
    cn_gen_logprob top[CN_SAMPLING_MAX_LOGPROBS]; /* most likely first (ties: lowest id) */
} cn_gen_token;

/* Callbacks; user is cn_gen_params.user. on_text gets final text only (never retracted,
 * never repeated, valid UTF-8, stop strings removed); the view is valid during the call.
 * should_cancel is asked before each token is chosen; returning true ends the request
 * with finish reason "cancelled" (text already final stays emitted; held text is
 * flushed). */
typedef void (*cn_gen_text_fn)(void *user, const char *text, size_t n_bytes);
typedef void (*cn_gen_token_fn)(void *user, const cn_gen_token *tok);
typedef bool (*cn_gen_cancel_fn)(void *user);

/* Beam search (used when n_beams > 1 by the callers that support it): keeps the n_beams
 * best partial sequences by summed raw log-probability; a finished sequence scores
 * sum_logprob / n_tokens^length_penalty (HF transformers' convention; n_tokens excludes
 * the end-of-generation token). early_stopping: stop as soon as n_beams sequences have
 * finished; otherwise stop only when no live beam can still beat the finished ones. */
typedef struct {
    int32_t n_beams;               /* [1, CN_GEN_MAX_BEAMS]; 1 = no beam search (default) */
    float length_penalty;          /* [-10, 10]; default 1 */
    bool early_stopping;           /* default false */
} cn_beam_params;

/* What to generate. Get defaults from cn_gen_default() and set fields. */
typedef struct {
    cn_sampling_params sampling;   /* the sampler chain; sampling.ignore_eos and
                                      sampling.n_logprobs are honoured here */
    int32_t max_tokens;            /* [1, CN_GEN_MAX_TOKENS], default 256: the most tokens to
                                      generate. An output limit: the context size may end
                                      the request sooner (finish reason "length" either way) */
    const char *const *stop;       /* borrowed until create returns (copied): n_stop stop
                                      strings, each non-empty valid UTF-8 of at most
                                      CN_GEN_MAX_STOP_LEN bytes, matched on the decoded text
                                      across token boundaries and cut from the output */
    int32_t n_stop;                /* [0, CN_GEN_MAX_STOP] */
    bool logprobs_after_chain;     /* see cn_gen_token; default false (raw) */
    cn_beam_params beam;
    cn_gen_text_fn on_text;        /* may be NULL */
    cn_gen_token_fn on_token;      /* may be NULL */
    cn_gen_cancel_fn should_cancel;/* may be NULL */
    void *user;
} cn_gen_params;

cn_gen_params cn_gen_default(void);

/* Checks every field (the sampling params with n_vocab as cn_sampling_validate does; 0
 * skips the token-id checks). CN_STATUS_INVALID_ARG with a message naming the field, its
 * value and its valid range ("max_tokens = 0 is out of range: must be in [1, 16777216]"). */
cn_status cn_gen_validate(const cn_gen_params *p, int32_t n_vocab, cn_error *err);

/* Timings of one request, in milliseconds unless named otherwise. Arrival is when the
 * request was created (or set by the server); prefill starts when its prompt first goes
 * into a forward pass. */
typedef struct {
    int32_t n_prompt_tokens;       /* the prompt's length */
    int32_t n_cached_tokens;       /* of them, reused from the KV cache (not prefilled) */
    int32_t n_generated_tokens;    /* tokens generated (an ending end-of-generation token
                                      not counted) */
    double queue_ms;               /* arrival -> prefill start */
    double prefill_ms;             /* prefill start -> first token chosen */
    double ttft_ms;                /* arrival -> first token chosen (time to first token) */
    double decode_ms;              /* first token -> last token */
    double total_ms;               /* arrival -> finish */
    double itl_mean_ms, itl_p50_ms, itl_p90_ms, itl_p99_ms; /* inter-token latency: the gaps
                                      between consecutive tokens; percentiles by linear
                                      interpolation between order statistics (numpy's
                                      default); all 0 with fewer than 2 tokens */
    double prefill_tok_s;          /* (n_prompt - n_cached) / prefill_ms */
    double decode_tok_s;           /* (n_generated - 1) / decode_ms; 0 below 2 tokens */
} cn_gen_timings;

/* ==== end of generation =================================================================== */

/* ==== engine ==============================================================================
 * The batched engine (src/engine/engine.c): many requests share one forward pass per step.
 * Requests join the running batch at the next step and leave when done (continuous
 * batching); a step packs one decode row per running sequence plus chunks of waiting
 * prompts up to a token budget (chunked prefill); the KV cache is one pool of blocks from
 * a fixed budget, with a prefix cache (a prompt's cached full blocks are not recomputed)
 * and n > 1 completions forking the prompt's blocks. When the cache runs out, the newest
 * running sequence is preempted and recomputed later.
 *
 * Batch invariance: with a fixed seed a request gets bit-identical tokens and logprobs
 * whether it runs alone or beside others, with or without prefix-cache hits or
 * preemption, at any thread count.
 *
 * Threads: every call may come from any thread; they are serialized by one lock, held
 * for a whole step (a call from another thread waits for the step to end). Callbacks run
 * inside cn_engine_step (on the run loop's thread after cn_engine_start), or inside
 * cn_engine_cancel; they may call cn_engine_submit, cn_engine_cancel and
 * cn_engine_get_stats (a cancel from a callback takes effect when the callback returns),
 * but not cn_engine_step, cn_engine_stop or cn_engine_free. */

typedef struct cn_model cn_model;   /* src/model/model.h */
typedef struct cn_engine cn_engine;

#define CN_ENGINE_MAX_N 16           /* completions per request */
#define CN_ENGINE_MAX_RUNNING 1024   /* sequences in the running batch */
#define CN_ENGINE_MAX_DRAFT 16       /* speculative guesses per sequence and step */

typedef struct {
    int32_t n_threads;     /* [1, 1024]; default 1 */
    int64_t kv_mem_mib;    /* KV budget in MiB (all layers, K and V); 0 = use kv_tokens */
    int64_t kv_tokens;     /* KV budget in token positions over all sequences, when
                              kv_mem_mib is 0; default 4096 */
    cn_type kv_type;       /* CN_TYPE_F16 (default), CN_TYPE_Q8_0 or CN_TYPE_F32 */
    int32_t block_tokens;  /* tokens per KV block; default 16 */
    int32_t max_running;   /* [1, CN_ENGINE_MAX_RUNNING] sequences decoding at once (each
                              completion of an n > 1 request counts); default 16 */
    int32_t step_tokens;   /* rows per forward pass (decode rows + prompt chunks),
                              >= max_running; default 512 */
    int32_t max_queue;     /* requests waiting for admission before submit says BUSY; >= 1;
                              default 256 */
    int32_t n_ctx;         /* most positions per sequence; 0 (default) = the model's
                              training context; never more than the KV budget */
    bool prefix_cache;     /* reuse cached prompt blocks; default true */
    bool spec_fixed;       /* speculation: every guess found runs (lookup) or the longest
                              draft is made (draft model), without the cost model; default
                              false */
    const cn_model *draft; /* a draft model with the same vocabulary (checked token by
                              token), for requests that set draft; borrowed, must outlive
                              the engine; NULL (default) = none. It gets a KV cache of its
                              own with as many positions as the engine's */
} cn_engine_params;

cn_engine_params cn_engine_default_params(void);

/* One request. The prompt is text (prompt != NULL: tokenized with the model's BOS rule,
 * special-token texts parsed) or tokens. gen's callbacks, user and should_cancel are not
 * used (the engine's callbacks carry the request id and completion index; cancel with
 * cn_engine_cancel); beam search (gen.beam.n_beams > 1) is not supported here. */
typedef struct {
    const char *prompt;            /* NUL-terminated; borrowed during submit */
    const int32_t *prompt_tokens;  /* used when prompt is NULL; borrowed during submit */
    int32_t n_prompt_tokens;
    cn_gen_params gen;             /* sampling, max_tokens, stop strings, logprobs */
    int32_t n;                     /* [1, CN_ENGINE_MAX_N] completions; completion i samples
                                      with seed + i (with CN_SAMPLING_SEED_RANDOM: one picked
                                      seed, then + i), so it equals an n = 1 request with
                                      that seed */
    int32_t lookup_n;              /* speculative decoding by n-gram lookup: each step may
                                      guess the continuation of the longest recent repeat
                                      of the last 1..lookup_n tokens in the prompt and
                                      output, and the pass checks the guesses with the
                                      decode row. [0, 8]; 0 (default) = off. The tokens are
                                      the ones made without it (greedy or seeded); the
                                      engine drafts only while its measured step costs and
                                      the request's acceptance say it pays, so at a large
                                      batch it stops by itself */
    int32_t max_draft;             /* the most guesses per step, [1, CN_ENGINE_MAX_DRAFT];
                                      0 = 8 */
    bool draft;                    /* speculative decoding with the engine's draft model
                                      (cn_engine_params.draft; INVALID_ARG if it has none):
                                      its greedy guesses, made for every such completion in
                                      one batched draft pass per guess, checked as above;
                                      takes precedence over lookup_n */
} cn_engine_request;

cn_engine_request cn_engine_request_default(void); /* n = 1, gen = cn_gen_default() */

/* What a request hears. id: from submit; index: the completion [0, n). Text is final
 * (stop strings cut); a token comes before its text. on_finish comes exactly once per
 * completion, last; after the last completion's on_finish the id is gone. Any may be
 * NULL. */
typedef struct {
    void (*on_text)(void *user, uint64_t id, int32_t index, const char *text, size_t n_bytes);
    void (*on_token)(void *user, uint64_t id, int32_t index, const cn_gen_token *tok);
    void (*on_finish)(void *user, uint64_t id, int32_t index, cn_finish_reason reason,
                      const cn_gen_timings *timings);
    void *user;
} cn_engine_callbacks;

/* Borrows m (must outlive the engine). Sizes the KV pool from the budget once. Errors: a
 * parameter out of range (INVALID_ARG, naming it), a budget below one block per running
 * sequence (LIMIT), no memory. */
cn_status cn_engine_create(const cn_model *m, const cn_engine_params *p, cn_engine **out,
                           cn_error *err);
/* Stops the run loop if started, drops every request without callbacks, frees all. NULL
 * is a no-op. */
void cn_engine_free(cn_engine *e);

/* Queues a request; *id names it. The request is copied (cb too). Errors: a bad request
 * (INVALID_ARG: empty prompt, a token out of the vocabulary, generation parameters out of
 * range); a prompt the context cannot hold, or prompt + max_tokens beyond the whole KV
 * budget (LIMIT: it could never run); max_queue requests already waiting (BUSY: try
 * later). Nothing is kept on error. */
cn_status cn_engine_submit(cn_engine *e, const cn_engine_request *r, const cn_engine_callbacks *cb,
                           uint64_t *id, cn_error *err);

/* Runs one step: admits, packs and runs one batch, samples, streams, finishes. *n_rows
 * (may be NULL) gets the batch's rows; 0 means there was nothing to run. Errors come from
 * the forward pass (the engine stays consistent: every request is still there and the
 * step can be retried or the requests cancelled). A completion whose logits the sampler
 * refuses (NaN) ends "cancelled" with a logged warning; the step goes on. Not while the
 * run loop is started. */
cn_status cn_engine_step(cn_engine *e, int32_t *n_rows, cn_error *err);

/* Steps on a thread of its own until cn_engine_stop, sleeping while there is no request.
 * A failing step cancels every request (their on_finish says "cancelled") and logs the
 * error. */
cn_status cn_engine_start(cn_engine *e, cn_error *err);
void cn_engine_stop(cn_engine *e); /* no-op if not started */
/* Waits (run loop started) until no request is left. */
void cn_engine_wait_idle(cn_engine *e);

/* Ends request id now: its completions finish with "cancelled" (on_finish called before
 * this returns, or when the calling callback returns) and its KV blocks are released.
 * CN_STATUS_NOT_FOUND if no such request is open. */
cn_status cn_engine_cancel(cn_engine *e, uint64_t id, cn_error *err);

typedef struct {
    int32_t n_requests;            /* submitted and not finished */
    int32_t n_running;             /* sequences in the running batch */
    int32_t n_waiting;             /* sequences waiting for admission (new or preempted) */
    int64_t kv_blocks_total, kv_blocks_used, kv_blocks_free; /* free includes cached */
    int64_t kv_blocks_cached;      /* unreferenced blocks kept by the prefix cache */
    int64_t kv_blocks_peak;        /* most blocks used at once */
    int32_t kv_block_tokens;
    uint64_t kv_block_bytes;       /* one block, all layers, K and V */
    int64_t prefix_queried_blocks; /* full prompt blocks looked up at admission */
    int64_t prefix_hit_blocks;     /* of those, found cached (their prefill skipped) */
    int64_t n_preemptions;
    int64_t n_steps, n_rows;       /* forward passes and the rows they ran */
    int64_t n_generated;           /* tokens generated over all requests */
    int64_t n_drafted;             /* speculative guesses checked (rows beyond decode rows) */
    int64_t n_accepted;            /* of them, confirmed (tokens made without a row of their own) */
    int64_t n_spec_steps;          /* decode rows that carried guesses */
    int64_t n_draft_passes;        /* forward passes of the draft model */
} cn_engine_stats;

void cn_engine_get_stats(cn_engine *e, cn_engine_stats *out);

/* ==== end of engine ======================================================================= */

#ifdef __cplusplus
}
#endif
#endif /* CINDER_H */
