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

/* The version of these declarations; cn_version() is the library's (they differ when a
 * program runs against another build than it was compiled with). */
#define CN_VERSION_MAJOR 0
#define CN_VERSION_MINOR 1
#define CN_VERSION_PATCH 0
#define CN_VERSION "0.1.0"

/* What libcinder.so exports: the declarations of this header and nothing else. */
#if defined(__GNUC__)
#define CN_API __attribute__((visibility("default")))
#else
#define CN_API
#endif

typedef enum {
    CN_STATUS_OK = 0,
    CN_STATUS_INVALID_ARG, /* a parameter out of its valid range */
    CN_STATUS_IO,          /* open/read/write/mmap failed */
    CN_STATUS_CORRUPT,     /* a file or message is malformed */
    CN_STATUS_UNSUPPORTED, /* well-formed, but not something cinder handles */
    CN_STATUS_NO_MEMORY,
    CN_STATUS_NOT_FOUND, /* a key, tensor or token that should be there is not */
    CN_STATUS_LIMIT,     /* a hard limit (context, KV budget, sizes) would be exceeded */
    CN_STATUS_BUSY,      /* queue full: try later */
    CN_STATUS_CANCELLED,
} cn_status;

#define CN_ERROR_MSG_LEN 256
#define CN_ERROR_PARAM_LEN 64

/* A status plus a human-readable, single-line message. param names the parameter at
 * fault when one is ("top_p", "max_tokens", "logit_bias", "n_ctx"), as the struct field or
 * API field spells it, and is "" otherwise: a server maps it to its error's "param"
 * without parsing the message. */
typedef struct {
    cn_status status;
    char msg[CN_ERROR_MSG_LEN];
    char param[CN_ERROR_PARAM_LEN];
} cn_error;

/* A short constant name for a status ("ok", "corrupt", ...): static, valid for ever. */
CN_API const char *cn_status_str(cn_status s);

/* The library's version, "MAJOR.MINOR.PATCH" (CN_VERSION of the build); static. */
CN_API const char *cn_version(void);

/* ---- logging ----
 * The library's diagnostics (warnings about a model file, a failed engine step, debug
 * traces). By default they go to stderr, one line each ("cinder warn: ..."), at the level
 * CINDER_LOG sets (unset: none; 1: errors and warnings; 2: info; 3: debug). A program
 * may take them instead: cn_log_set(fn, user) sends every message that passes the level
 * to fn (NULL restores stderr). fn may be called from any of the library's threads, at
 * once from several; msg (no trailing newline) is valid during the call. */
typedef enum { CN_LOG_ERROR = 0, CN_LOG_WARN, CN_LOG_INFO, CN_LOG_DEBUG } cn_log_level;
typedef void (*cn_log_fn)(void *user, cn_log_level level, const char *msg);
CN_API void cn_log_set(cn_log_fn fn, void *user);
/* Messages above lvl are dropped (overrides CINDER_LOG). */
CN_API void cn_log_set_level(cn_log_level lvl);

/* The kernel family this CPU runs ("amx", "avx512", "avx2", "neon", "ref"): the best its
 * features allow, capped by CINDER_ISA (CINDER_REF=1: "ref"); chosen once per process;
 * static. */
CN_API const char *cn_kernels_family(void);

/* sizeof one of this header's structs by its name ("cn_gen_params"), 0 for a name it does
 * not know: bindings that mirror the structs (the Python package) check their layout. */
CN_API size_t cn_abi_size(const char *type_name);

/* Tensor element formats. The numbering is GGUF's (ggml_type), so a type read from a
 * file maps to this enum directly. */
typedef enum {
    CN_TYPE_F32 = 0,
    CN_TYPE_F16 = 1,
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
    CN_TYPE_COUNT = 40, /* one past the largest value; not a type */
} cn_type;

/* "q4_K", as GGUF tools spell it, for a type cinder computes with; NULL for any other
 * value (a ggml type it cannot run, a number no ggml knows); static. */
CN_API const char *cn_type_name(cn_type t);

/* Handles the tiers below hand to each other: a model's tokenizer (low tier) is what a
 * context, an engine and a grammar are made with or give back. */
typedef struct cn_tokenizer cn_tokenizer;
typedef struct cn_grammar cn_grammar;

/* ---- finish reasons (implemented in src/gen/stop.c) ---- */
/* Why a generation ended; the names are OpenAI's finish_reason values. */
typedef enum {
    CN_FINISH_NONE = 0,  /* still running (OpenAI: null) */
    CN_FINISH_STOP,      /* a stop string or an end-of-generation token */
    CN_FINISH_LENGTH,    /* max_tokens reached or the context is full */
    CN_FINISH_CANCELLED, /* the caller or the client gave up */
} cn_finish_reason;

/* "stop", "length", "cancelled"; "none" for CN_FINISH_NONE, "unknown" out of range;
 * static. */
CN_API const char *cn_finish_reason_str(cn_finish_reason r);
/* ---- end finish reasons ---- */

/* ########################################################################################
 * THE HIGH TIER: run a model
 * Load a model, render a conversation with its chat template, and generate: one request at
 * a time (cn_context) or many users batched (cn_engine); constrain the output (grammars, tool
 * calls); embed texts. What an application needs, and all the CLI's run, chat and serve use.
 ######################################################################################## */

/* ==== model ================================================================================
 * A GGUF file's weights and metadata (src/model). The file is always memory-mapped and
 * its weights used in place (prefault below decides when pages are read); threads and
 * the context size belong to what runs the model (cn_context_params, cn_engine_params).
 * A model is read-only once loaded: any number of contexts and engines may share it from
 * any threads. It must outlive everything made from it. */

typedef struct cn_model cn_model;

typedef struct {
    bool prefault; /* touch every weight page at load (a steady first-token
                      time); on Linux the weights are then copied into 2 MiB
                      pages, matrices in the kernels' packed layout where there
                      is one, which decodes faster. Default false: pages are
                      read from the mapping as they are first used */
} cn_model_params;

CN_API cn_model_params cn_model_default_params(void);

/* Opens, maps and validates a model file. Errors: the file cannot be read (IO), it is not
 * a well-formed GGUF or a tensor is missing or misshapen (CORRUPT, naming the key or
 * tensor), an architecture or format cinder does not run (UNSUPPORTED). Thread-safe. */
CN_API cn_status cn_model_load(const char *path, const cn_model_params *p, cn_model **out, cn_error *err);
CN_API void cn_model_free(cn_model *m); /* NULL is a no-op */

/* What a model is. Strings are NUL-terminated copies. */
typedef struct {
    char arch[32];  /* general.architecture: "llama", "qwen2", "qwen3", "gemma3" */
    char name[128]; /* general.name, "" if absent */
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff;
    int64_t n_params; /* weight elements over all tensors */
    uint64_t file_bytes;
} cn_model_info;

CN_API void cn_model_get_info(const cn_model *m, cn_model_info *out);

/* Any metadata value by GGUF key. A string: *s points into the mapping (not
 * NUL-terminated; valid while m lives), *len its length. A number: any integer or bool
 * type that fits int64 / any numeric type as double. False if absent or of another kind. */
CN_API bool cn_model_meta_str(const cn_model *m, const char *key, const char **s, size_t *len);
CN_API bool cn_model_meta_int(const cn_model *m, const char *key, int64_t *out);
CN_API bool cn_model_meta_float(const cn_model *m, const char *key, double *out); /* norm epsilons,
                                  rope scaling factors: the three read any scalar the file holds */

/* ==== end of model ====================================================================== */

/* ==== chat templates =======================================================================
 * A conversation rendered into the prompt text a chat model was trained on
 * (src/text/chat.c): the model's own tokenizer.chat_template run by cinder's Jinja
 * interpreter, byte for byte as Hugging Face's apply_chat_template renders it with jinja2
 * (src/jinja/jinja.h); or, for files without one and by name, hand-written renderers of
 * three families (ChatML, Gemma, Llama-3). The rendered text never contains the BOS the
 * tokenizer adds: tokenize it with add_special and parse_special (the BOS rule in full:
 * src/text/chat.h). Immutable once made (set_clock aside); thread-safe. */

typedef struct {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* NUL-terminated text */
} cn_chat_msg;

typedef struct cn_chat_template cn_chat_template;

/* The model's template (tokenizer.chat_template), rendered by the Jinja interpreter; a
 * template it cannot parse falls back to the hand-written renderer of its family when
 * one is recognized. UNSUPPORTED when the model has none, or one that neither parses nor
 * is recognized (the message says why and suggests a name). */
CN_API cn_status cn_chat_template_from_model(const cn_model *m, cn_chat_template **out, cn_error *err);
/* By name: "chatml", "gemma", "llama3" (any case). INVALID_ARG lists the names. */
CN_API cn_status cn_chat_template_from_name(const char *name, cn_chat_template **out, cn_error *err);
/* A Jinja template from its text src[0..n) (borrowed; copied), as a model's would be but
 * with no tokenizer: bos_token and eos_token are "" unless the variables of
 * cn_chat_render_json give them. Errors: a syntax error ("line N: ...", INVALID_ARG), a
 * template over 4 MiB (LIMIT). */
CN_API cn_status cn_chat_template_from_jinja(const char *src, size_t n, cn_chat_template **out, cn_error *err);
CN_API void cn_chat_template_free(cn_chat_template *t); /* NULL is a no-op */
/* "jinja" for the model's own or a text template; "chatml", "gemma", "llama3" for the
 * hand-written ones. View valid until cn_chat_template_free. */
CN_API const char *cn_chat_template_name(const cn_chat_template *t);
/* The text that ends a turn ("<|im_end|>", "<end_of_turn>", "<|eot_id|>"; for a Jinja
 * template of another family the EOS text, or "" when there is none). View valid until
 * cn_chat_template_free. */
CN_API const char *cn_chat_template_end_of_turn(const cn_chat_template *t);
/* The template's source text when it is the model's Jinja template, else NULL (a front end
 * shows it; cn_tool_format_detect reads it). View valid until free. */
CN_API const char *cn_chat_template_source(const cn_chat_template *t);
/* strftime_now's clock for this template: unix_seconds since the epoch, read as UTC; 0
 * (the default) is the real clock in local time, as Hugging Face's. For reproducible
 * renders (tests, `cinder template render --now`). Set it before the template is shared
 * between threads. */
CN_API void cn_chat_template_set_clock(cn_chat_template *t, int64_t unix_seconds);

/* Renders msgs[0..n_msgs) and, if add_generation_prompt, the opening of an assistant
 * turn. *out is NUL-terminated, freed by the caller with free(); *out_len (may be NULL)
 * its length. Errors (nothing allocated): no messages, a NULL field (INVALID_ARG); for
 * the hand-written templates an unknown role or Gemma turns that do not alternate
 * (INVALID_ARG); for a Jinja template whatever it raises (INVALID_ARG, with its message
 * and line); too many or too long (LIMIT). */
CN_API cn_status cn_chat_render(const cn_chat_template *t, const cn_chat_msg *msgs, size_t n_msgs,
                                bool add_generation_prompt, char **out, size_t *out_len, cn_error *err);

/* Renders an OpenAI-style conversation: messages_json is a JSON array of messages (role
 * "system" | "user" | "assistant" | "tool"; content a string, null, or a list of parts
 * {"type":"text","text":...}; assistant "tool_calls": [{"id","type":"function","function":{"name","arguments"}}]
 * with arguments a JSON string or an object; tool "tool_call_id" and "name";
 * "reasoning_content"); tools_json a JSON array of OpenAI tools or NULL; vars_json a JSON
 * object of extra template variables (e.g. {"enable_thinking": false}) or NULL. Tool-call
 * arguments given as JSON strings are parsed into objects before rendering, as Hugging
 * Face passes them. Hand-written templates render role/content only and refuse tools
 * (UNSUPPORTED). Errors name the field or the template line. */
CN_API cn_status cn_chat_render_json(const cn_chat_template *t, const char *messages_json, const char *tools_json,
                                     bool add_generation_prompt, const char *vars_json, char **out, size_t *out_len,
                                     cn_error *err);

/* ==== end of chat templates ============================================================= */

/* ==== sampling =============================================================================
 * The sampler chain's parameters (implementation: src/gen/sampling*.c; the chain order and
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

/* Sampling parameters of one request. Get defaults from cn_sampling_default_params() and set
 * fields; the defaults are neutral (sample from the model's own distribution), as in the
 * OpenAI API and vLLM. Each comment gives the valid range and the value that turns the
 * stage off. */
typedef struct {
    float temperature;                           /* [0, 100]; 0 = greedy; 1 = off (default) */
    int32_t top_k;                               /* >= 0; 0 = off (default) */
    float top_p;                                 /* (0, 1]; 1 = off (default) */
    float min_p;                                 /* [0, 1]; 0 = off (default) */
    float typical_p;                             /* (0, 1]; 1 = off (default) */
    float repetition_penalty;                    /* (0, 10]; 1 = off (default) */
    float presence_penalty;                      /* [-2, 2]; 0 = off (default) */
    float frequency_penalty;                     /* [-2, 2]; 0 = off (default) */
    int32_t penalty_last_n;                      /* >= -1: penalize the last n tokens of the history;
                                                    -1 = all of it (default), 0 = no penalties */
    const cn_logit_bias *logit_bias;             /* borrowed: n_logit_bias entries, copied by the sampler;
                                                    a token listed twice gets the sum of its biases */
    int32_t n_logit_bias;                        /* [0, CN_SAMPLING_MAX_LOGIT_BIAS]; default 0 */
    uint64_t seed;                               /* any value; CN_SAMPLING_SEED_RANDOM (default) = pick one */
    int32_t n_logprobs;                          /* [-1, CN_SAMPLING_MAX_LOGPROBS]: -1 = none (default); 0 = the
                                                    chosen token's log-probability; n = also the n most likely
                                                    tokens' (both under the model's raw distribution) */
    bool ignore_eos;                             /* for the generation loop: keep going past end-of-generation
                                                    tokens by banning them (the sampler knows no token ids) */
    int32_t n_chain;                             /* [1, CN_SAMPLER_N_STAGES] stages in chain[] */
    cn_sampler_stage chain[CN_SAMPLER_N_STAGES]; /* the order the stages run in; each at
                                 most once. Default: logit_bias, penalties, temperature,
                                 top_k, top_p, min_p, typical (HF transformers / vLLM) */
} cn_sampling_params;

CN_API cn_sampling_params cn_sampling_default_params(void);

/* Checks every field against its range, and that every stage that is not off is in the
 * chain. n_vocab > 0 also checks logit_bias token ids against [0, n_vocab); 0 skips that.
 * On failure: CN_STATUS_INVALID_ARG and a message naming the field, its value and its
 * valid range ("top_p = 1.7 is out of range: must be in (0, 1], 1 = off"). */
CN_API cn_status cn_sampling_validate(const cn_sampling_params *p, int32_t n_vocab, cn_error *err);

/* Sets p->chain from a spec: stage names separated by ';' or ',' (logit_bias, penalties,
 * temperature|temp, top_k, top_p, min_p, typical|typical_p|typ_p), or a preset: "default"
 * (= "hf" = "vllm") or "llama.cpp" (penalties;top_k;typical;top_p;min_p;temperature, i.e.
 * temperature last). logit_bias goes first unless the spec places it. p is unchanged on
 * error (an unknown or repeated name). */
CN_API cn_status cn_sampling_set_chain(cn_sampling_params *p, const char *spec, cn_error *err);

/* The spec name of a stage ("top_p"), or "?" for a value out of range; static. */
CN_API const char *cn_sampler_stage_name(cn_sampler_stage s);

/* ==== end of sampling =================================================================== */

/* ==== generation ===========================================================================
 * One request: what to generate (cn_gen_params), what each generated token was
 * (cn_gen_token) and how long it took (cn_gen_timings). A context runs one request at a
 * time (cn_context_generate, below); the batched engine runs many (further below). */

#define CN_GEN_MAX_STOP 16          /* stop strings per request */
#define CN_GEN_MAX_STOP_LEN 256     /* bytes per stop string */
#define CN_GEN_MAX_TOKENS (1 << 24) /* the largest max_tokens */
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
    int32_t index;                                /* 0, 1, ... among the request's generated tokens */
    bool has_logprob;                             /* sampling.n_logprobs >= 0 */
    float logprob;                                /* the token's log-probability */
    int32_t n_top;                                /* entries in top[] (<= n_logprobs) */
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
    int32_t n_beams;      /* [1, CN_GEN_MAX_BEAMS]; 1 = no beam search (default) */
    float length_penalty; /* [-10, 10]; default 1 */
    bool early_stopping;  /* default false */
} cn_beam_params;

/* What to generate. Get defaults from cn_gen_default_params() and set fields. */
typedef struct {
    cn_sampling_params sampling; /* the sampler chain; sampling.ignore_eos and
                                    sampling.n_logprobs are honoured here */
    int32_t max_tokens;          /* [1, CN_GEN_MAX_TOKENS], default 256: the most tokens to
                                    generate. An output limit: the context size may end
                                    the request sooner (finish reason "length" either way) */
    const char *const *stop;     /* borrowed until create returns (copied): n_stop stop
                                    strings, each non-empty valid UTF-8 of at most
                                    CN_GEN_MAX_STOP_LEN bytes, matched on the decoded text
                                    across token boundaries and cut from the output */
    int32_t n_stop;              /* [0, CN_GEN_MAX_STOP] */
    bool logprobs_after_chain;   /* see cn_gen_token; default false (raw) */
    cn_beam_params beam;
    /* Speculative decoding (cn_context_generate; the same tokens as without it, fewer target
       passes; not with beam search). The names are cn_engine_request's. */
    int32_t lookup_n;               /* n-gram lookup: guess the continuation of the longest
                                       earlier repeat of the last 1..lookup_n tokens of the
                                       prompt and output; [0, 8], 0 (default) = off */
    int32_t max_draft;              /* the longest guess per step, [1, 16] when speculating;
                                       default 8 (the length adapts below it) */
    bool draft;                     /* guesses from the context's draft model
                                       (cn_context_params.draft); takes precedence over
                                       lookup_n; default false */
    cn_grammar *grammar;            /* may be NULL: output constrained to this grammar
                                       (include a reference for as long as the request
                                       runs; a matcher per sequence is made from it); an
                                       end-of-generation token once it is complete */
    cn_gen_text_fn on_text;         /* may be NULL */
    cn_gen_token_fn on_token;       /* may be NULL */
    cn_gen_cancel_fn should_cancel; /* may be NULL */
    void *user;
} cn_gen_params;

CN_API cn_gen_params cn_gen_default_params(void);

/* Checks every field (the sampling params with n_vocab as cn_sampling_validate does; 0
 * skips the token-id checks). CN_STATUS_INVALID_ARG with a message naming the field, its
 * value and its valid range ("max_tokens = 0 is out of range: must be in [1, 16777216]"). */
CN_API cn_status cn_gen_validate(const cn_gen_params *p, int32_t n_vocab, cn_error *err);

/* Timings of one request, in milliseconds unless named otherwise. Arrival is when the
 * request was created (or set by the server); prefill starts when its prompt first goes
 * into a forward pass. */
typedef struct {
    int32_t n_prompt_tokens;                                /* the prompt's length */
    int32_t n_cached_tokens;                                /* of them, reused from the KV cache (not prefilled) */
    int32_t n_generated_tokens;                             /* tokens generated (an ending end-of-generation token
                                                               not counted) */
    double queue_ms;                                        /* arrival -> prefill start */
    double prefill_ms;                                      /* prefill start -> first token chosen */
    double ttft_ms;                                         /* arrival -> first token chosen (time to first token) */
    double decode_ms;                                       /* first token -> last token */
    double total_ms;                                        /* arrival -> finish */
    double itl_mean_ms, itl_p50_ms, itl_p90_ms, itl_p99_ms; /* inter-token latency: the gaps
                                      between consecutive tokens; percentiles by linear
                                      interpolation between order statistics (numpy's
                                      default); all 0 with fewer than 2 tokens */
    double prefill_tok_s;                                   /* (n_prompt - n_cached) / prefill_ms */
    double decode_tok_s;                                    /* (n_generated - 1) / decode_ms; 0 below 2 tokens */
} cn_gen_timings;

/* ==== end of generation ================================================================= */

/* ==== context: one request at a time =======================================================
 * A context runs one request after another on a model (src/gen/context.c): its own KV
 * cache for one sequence, its threads, the model's tokenizer and chat template. Each
 * request keeps what it can of the last one's cache: a prompt that starts with the
 * previous prompt and reply (the next turn of a conversation) prefills only what is new.
 *
 * Threads: a context is used by one thread at a time (calls on one context must not
 * overlap); different contexts on one model run in parallel. Callbacks (on_text, on_token,
 * should_cancel) run on the calling thread, inside cn_context_generate. */

typedef struct cn_context cn_context;

typedef struct {
    int32_t n_threads;         /* [1, 1024] compute threads; 0 (default) = every CPU */
    int32_t n_ctx;             /* positions (prompt and reply); 0 (default) = the model's
                                  training context, at most 4096 */
    int32_t n_batch;           /* prompt tokens per forward pass, [1, 8192]; default 512 */
    cn_type kv_type;           /* CN_TYPE_F16 (default), CN_TYPE_Q8_0 or CN_TYPE_F32 */
    int32_t n_seq_max;         /* sequences the low tier (cn_context_decode) may use, each holding
                                  up to n_ctx positions, [1, 64]; default 1 */
    const char *chat_template; /* a template by name ("chatml", "gemma", "llama3"; borrowed
                                  during create), or NULL (default): the model's own */
    const cn_model *draft;     /* a smaller model with the same vocabulary (checked token by
                                  token at create) that drafts for gen.draft; borrowed, must
                                  outlive the context; NULL (default) = none. It gets a KV
                                  cache of n_ctx positions of its own */
} cn_context_params;

CN_API cn_context_params cn_context_default_params(void);

/* Borrows m (it must outlive the context). Loads the tokenizer and the chat template
 * (p->chat_template, else the model's when it has one cinder renders). Errors: a
 * parameter out of range, an unknown chat_template name (INVALID_ARG, the message lists
 * the names), a draft model whose vocabulary is not m's (INVALID_ARG, param "draft"), the
 * tokenizer (as cn_tokenizer_from_model), no memory. */
CN_API cn_status cn_context_create(const cn_model *m, const cn_context_params *p, cn_context **out, cn_error *err);
CN_API void cn_context_free(cn_context *c); /* NULL is a no-op */

/* The context's tokenizer. View valid until cn_context_free. */
CN_API const cn_tokenizer *cn_context_tokenizer(const cn_context *c);
/* The context's chat template; NULL when the model has no template cinder renders (chat prompts are then refused,
 * with the reason). Views valid until cn_context_free. */
CN_API const cn_chat_template *cn_context_chat_template(const cn_context *c);
CN_API int32_t cn_context_n_ctx(const cn_context *c);
CN_API int32_t cn_context_n_threads(const cn_context *c); /* what n_threads = 0 became */

/* What a request starts from: exactly one of text, tokens or messages. */
typedef struct {
    const char *text;      /* NUL-terminated; tokenized with BOS as the model says and
                              special-token texts parsed */
    const int32_t *tokens; /* or token ids, used as they are */
    int32_t n_tokens;
    const cn_chat_msg *messages; /* or a conversation: rendered with the chat template and
                                  an assistant turn opened; generation also stops at the
                                  template's end of turn */
    size_t n_messages;
} cn_prompt;

/* What a request produced; free with cn_result_free. */
typedef struct {
    char *text; /* NUL-terminated: the reply, stop strings cut */
    size_t n_text;
    cn_gen_token *tokens; /* (n_tokens) every generated token, with its log-probabilities
                             when gen.sampling.n_logprobs >= 0 */
    int32_t n_tokens;
    int32_t n_prompt_tokens;
    cn_finish_reason finish_reason;
    int32_t stop_index; /* the stop string that ended it, or -1 */
    uint64_t seed;      /* the seed the sampler used (a picked one for SEED_RANDOM) */
    cn_gen_timings timings;
    double beam_score;       /* beam search: the best sequence's score (see cn_beam_params) */
    double beam_sum_logprob; /* ... its summed raw log-probability */
    int32_t beam_n_finished; /* ... finished hypotheses kept (<= n_beams) */
    /* Speculative decoding (gen.lookup_n or gen.draft; all 0 otherwise): */
    int64_t spec_target_passes; /* verify passes of the target (each makes at least one token) */
    int64_t spec_drafted;       /* tokens guessed */
    int64_t spec_accepted;      /* of them, kept (tokens made without a pass of their own) */
    int64_t spec_plain_passes;  /* passes that carried no guess */
    int64_t spec_draft_passes;  /* forward passes of the draft model */
} cn_result;

/* Runs one request to its finish: prefill (reusing the cached prefix), then a token at a
 * time, with gen's sampling, stops and callbacks. gen.beam.n_beams > 1 runs beam search
 * (the best sequence is the result; on_text/on_token see it once it is chosen);
 * gen.lookup_n or gen.draft speculate (the same tokens, fewer target passes; the spec_
 * fields of the result say how it went). out is
 * filled on OK (and zeroed on error). Errors: a bad prompt (INVALID_ARG: none or two
 * given, an empty one, an id out of the vocabulary, messages without a chat template:
 * the message says why the model has none), gen.draft without a draft model (INVALID_ARG),
 * a prompt that leaves no room to generate in n_ctx (LIMIT), bad gen params
 * (INVALID_ARG, naming the field), a failed forward pass or no memory. A request that
 * should_cancel ended is OK with finish reason "cancelled". */
CN_API cn_status cn_context_generate(cn_context *c, const cn_prompt *prompt, const cn_gen_params *gen, cn_result *out,
                                     cn_error *err);
CN_API void cn_result_free(cn_result *r); /* frees what r holds and zeroes it; NULL is a no-op */

/* The next-token logits after prompt (n_vocab floats into logits): one step of the model,
 * for explaining or scoring. Reuses and updates the cache as generate does. */
CN_API cn_status cn_context_logits(cn_context *c, const cn_prompt *prompt, float *logits, cn_error *err);

/* ==== end of context ==================================================================== */

/* ==== engine ===============================================================================
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

typedef struct cn_engine cn_engine;

#define CN_ENGINE_MAX_N 16         /* completions per request */
#define CN_ENGINE_MAX_RUNNING 1024 /* sequences in the running batch */
#define CN_ENGINE_MAX_DRAFT 16     /* speculative guesses per sequence and step */

typedef struct {
    int32_t n_threads;         /* [1, 1024]; 0 = every CPU (as for a context); default 1 */
    int64_t kv_mem_mib;        /* KV budget in MiB (all layers, K and V); 0 = use kv_tokens */
    int64_t kv_tokens;         /* KV budget in token positions over all sequences, when
                                  kv_mem_mib is 0; default 4096 */
    cn_type kv_type;           /* CN_TYPE_F16 (default), CN_TYPE_Q8_0 or CN_TYPE_F32 */
    int32_t block_tokens;      /* tokens per KV block; default 16 */
    int32_t max_running;       /* [1, CN_ENGINE_MAX_RUNNING] sequences decoding at once (each
                                  completion of an n > 1 request counts); default 16 */
    int32_t step_tokens;       /* rows per forward pass (decode rows + prompt chunks),
                                  >= max_running; default 512 */
    int32_t max_queue;         /* requests waiting for admission before submit says BUSY; >= 1;
                                  default 256 */
    int32_t n_ctx;             /* most positions per sequence; 0 (default) = the model's
                                  training context; never more than the KV budget */
    bool prefix_cache;         /* reuse cached prompt blocks; default true */
    bool spec_fixed;           /* speculation: every guess found runs (lookup) or the longest
                                  draft is made (draft model), without the cost model; default
                                  false */
    const cn_model *draft;     /* a draft model with the same vocabulary (checked token by
                                  token), for requests that set draft; borrowed, must outlive
                                  the engine; NULL (default) = none. It gets a KV cache of its
                                  own with as many positions as the engine's */
    const char *chat_template; /* a chat template by name ("chatml", "gemma", "llama3")
                              instead of the model's; NULL (default) = the model's (none
                              is no error: see cn_engine_chat_template); borrowed during
                              create; an unknown name is INVALID_ARG, param "chat_template" */
} cn_engine_params;

CN_API cn_engine_params cn_engine_default_params(void);

/* One request. The prompt is text (prompt != NULL: tokenized with the model's BOS rule,
 * special-token texts parsed) or tokens. gen's callbacks, user and should_cancel are not
 * used (the engine's callbacks carry the request id and completion index; cancel with
 * cn_engine_cancel); beam search (gen.beam.n_beams > 1) is not supported here. */
typedef struct {
    const char *prompt;           /* NUL-terminated; borrowed during submit */
    const int32_t *prompt_tokens; /* used when prompt is NULL; borrowed during submit */
    int32_t n_prompt_tokens;
    cn_gen_params gen; /* sampling, max_tokens, stop strings, logprobs */
    int32_t n;         /* [1, CN_ENGINE_MAX_N] completions; completion i samples
                          with seed + i (with CN_SAMPLING_SEED_RANDOM: one picked
                          seed, then + i), so it equals an n = 1 request with
                          that seed */
    int32_t lookup_n;  /* speculative decoding by n-gram lookup: each step may
                          guess the continuation of the longest recent repeat
                          of the last 1..lookup_n tokens in the prompt and
                          output, and the pass checks the guesses with the
                          decode row. [0, 8]; 0 (default) = off. The tokens are
                          the ones made without it (greedy or seeded); the
                          engine drafts only while its measured step costs and
                          the request's acceptance say it pays, so at a large
                          batch it stops by itself */
    int32_t max_draft; /* the most guesses per step, [1, CN_ENGINE_MAX_DRAFT];
                          0 = 8 */
    bool draft;        /* speculative decoding with the engine's draft model
                          (cn_engine_params.draft; INVALID_ARG if it has none):
                          its greedy guesses, made for every such completion in
                          one batched draft pass per guess, checked as above;
                          takes precedence over lookup_n */
} cn_engine_request;

CN_API cn_engine_request cn_engine_request_default_params(void); /* n = 1, gen = cn_gen_default_params() */

/* What a request hears. id: from submit; index: the completion [0, n). Text is final
 * (stop strings cut); a token comes before its text. on_finish comes exactly once per
 * completion, last; after the last completion's on_finish the id is gone. Any may be
 * NULL. */
typedef struct {
    void (*on_text)(void *user, uint64_t id, int32_t index, const char *text, size_t n_bytes);
    void (*on_token)(void *user, uint64_t id, int32_t index, const cn_gen_token *tok);
    void (*on_finish)(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *timings);
    void *user;
} cn_engine_callbacks;

/* Borrows m (must outlive the engine). Sizes the KV pool from the budget once. Errors: a
 * parameter out of range (INVALID_ARG, naming it), a budget below one block per running
 * sequence (LIMIT), no memory. */
CN_API cn_status cn_engine_create(const cn_model *m, const cn_engine_params *p, cn_engine **out, cn_error *err);
/* Stops the run loop if started, drops every request without callbacks, frees all. NULL
 * is a no-op. */
CN_API void cn_engine_free(cn_engine *e);

/* Queues a request; *id names it. The request is copied (cb too). Errors: a bad request
 * (INVALID_ARG: empty prompt, a token out of the vocabulary, generation parameters out of
 * range); a prompt the context cannot hold, or prompt + max_tokens beyond the whole KV
 * budget (LIMIT: it could never run); max_queue requests already waiting (BUSY: try
 * later). Nothing is kept on error. */
CN_API cn_status cn_engine_submit(cn_engine *e, const cn_engine_request *r, const cn_engine_callbacks *cb, uint64_t *id,
                                  cn_error *err);

/* Runs one step: admits, packs and runs one batch, samples, streams, finishes. *n_rows
 * (may be NULL) gets the batch's rows; 0 means there was nothing to run. Errors come from
 * the forward pass (the engine stays consistent: every request is still there and the
 * step can be retried or the requests cancelled). A completion whose logits the sampler
 * refuses (NaN) ends "cancelled" with a logged warning; the step goes on. Not while the
 * run loop is started. */
CN_API cn_status cn_engine_step(cn_engine *e, int32_t *n_rows, cn_error *err);

/* Steps on a thread of its own until cn_engine_stop, sleeping while there is no request.
 * A failing step cancels every request (their on_finish says "cancelled") and logs the
 * error. */
CN_API cn_status cn_engine_start(cn_engine *e, cn_error *err);
CN_API void cn_engine_stop(cn_engine *e); /* no-op if not started */
/* Waits (run loop started) until no request is left. */
CN_API void cn_engine_wait_idle(cn_engine *e);

/* Ends request id now: its completions finish with "cancelled" (on_finish called before
 * this returns, or when the calling callback returns) and its KV blocks are released.
 * CN_STATUS_NOT_FOUND if no such request is open. */
CN_API cn_status cn_engine_cancel(cn_engine *e, uint64_t id, cn_error *err);

typedef struct {
    int32_t n_requests;                                      /* submitted and not finished */
    int32_t n_running;                                       /* sequences in the running batch */
    int32_t n_waiting;                                       /* sequences waiting for admission (new or preempted) */
    int64_t kv_blocks_total, kv_blocks_used, kv_blocks_free; /* free includes cached */
    int64_t kv_blocks_cached;                                /* unreferenced blocks kept by the prefix cache */
    int64_t kv_blocks_peak;                                  /* most blocks used at once */
    int32_t kv_block_tokens;
    uint64_t kv_block_bytes;       /* one block, all layers, K and V */
    int64_t prefix_queried_blocks; /* full prompt blocks looked up at admission */
    int64_t prefix_hit_blocks;     /* of those, found cached (their prefill skipped) */
    int64_t n_preemptions;
    int64_t n_steps, n_rows; /* forward passes and the rows they ran */
    int64_t n_generated;     /* tokens generated over all requests */
    int64_t n_drafted;       /* speculative guesses checked (rows beyond decode rows) */
    int64_t n_accepted;      /* of them, confirmed (tokens made without a row of their own) */
    int64_t n_spec_steps;    /* decode rows that carried guesses */
    int64_t n_draft_passes;  /* forward passes of the draft model */
} cn_engine_stats;

CN_API void cn_engine_get_stats(cn_engine *e, cn_engine_stats *out);

/* ---- what an engine owns ----
 * An engine owns its model's tokenizer, its chat template and the end-of-turn stop that
 * template needs, and one thread pool of n_threads that the draft model's passes and its
 * embedders' (cn_engine_embedder) share:
 * a server or a program built on an engine asks it for them rather than loading its own
 * (src/engine/engine.c). Every call may come from any thread at any time. */

/* The model's tokenizer. View valid until cn_engine_free. */
CN_API const cn_tokenizer *cn_engine_tokenizer(const cn_engine *e);
/* cn_engine_params.chat_template's, else the model's; NULL when the model has none that
 * cinder renders. View valid until cn_engine_free. */
CN_API const cn_chat_template *cn_engine_chat_template(const cn_engine *e);
/* The chat template's end-of-turn text when a chat reply must stop on it as a stop string
 * (the tokenizer does not end generation on it by itself); NULL when it need not, or
 * without a template. View valid until cn_engine_free. */
CN_API const char *cn_engine_end_of_turn_stop(const cn_engine *e);
/* The most positions one sequence may reach (cn_engine_params.n_ctx within the KV budget):
 * a prompt must be shorter. */
CN_API int32_t cn_engine_n_ctx(const cn_engine *e);
CN_API int32_t cn_engine_n_vocab(const cn_engine *e);     /* logits per row; token ids are below it */
CN_API int32_t cn_engine_max_running(const cn_engine *e); /* cn_engine_params.max_running */
CN_API bool cn_engine_has_draft(const cn_engine *e);      /* made with cn_engine_params.draft */

/* ==== end of engine ===================================================================== */

/* ==== structured output: grammars ==========================================================
 * Output constrained token by token to a JSON Schema, json_object (any JSON object), a GBNF
 * grammar (llama.cpp's syntax), a regular expression or a list of choices (src/grammar/).
 * A grammar is compiled once against a tokenizer's vocabulary and then shared: a
 * cn_grammar is immutable and may be used by many matchers on many threads at once (its
 * mask caches are internally locked); a cn_grammar_matcher belongs to one sequence and one
 * thread. Generating with one: cn_gen_params.grammar. */

typedef struct cn_grammar_matcher cn_grammar_matcher;

typedef enum {
    CN_GRAMMAR_JSON_SCHEMA = 0, /* source: a JSON Schema (draft 2020-12 and older drafts) */
    CN_GRAMMAR_JSON_OBJECT,     /* any JSON object; source unused */
    CN_GRAMMAR_GBNF,            /* source: llama.cpp's GBNF; start rule "root" */
    CN_GRAMMAR_REGEX,           /* source: a regular expression matched in full */
    CN_GRAMMAR_CHOICE,          /* choices[0..n_choices): exactly one of the strings */
    CN_GRAMMAR_TOOLS,           /* source: an OpenAI tools array; a reply in tool_format that
                                   may (auto), must (required) or must call tool_name: the
                                   calls' arguments follow each tool's parameters schema, free
                                   text before them (auto) holds no call trigger */
} cn_grammar_kind;

typedef enum {
    CN_TOOL_CHOICE_AUTO = 0, /* text, or text then calls */
    CN_TOOL_CHOICE_REQUIRED, /* one or more calls, nothing else */
    CN_TOOL_CHOICE_NAMED,    /* calls of tool_name only */
} cn_tool_choice;

typedef struct {
    cn_grammar_kind kind;
    const char *source;         /* borrowed during compile; JSON text, GBNF or regex */
    size_t source_len;          /* 0: strlen(source) */
    const char *const *choices; /* CN_GRAMMAR_CHOICE: borrowed during compile */
    size_t n_choices;
    bool flexible_whitespace; /* JSON: any [ \t\n\r]* between tokens (at most
                                 CN_GRAMMAR_MAX_WS bytes each) instead of the compact
                                 form ("," and ":" with no spaces); default false */
    size_t max_states;        /* compile budget in automaton states; 0: 1,000,000 */
    double max_compile_ms;    /* compile budget in milliseconds; 0: 10,000 */
    int tool_format;          /* CN_GRAMMAR_TOOLS: a cn_tool_format (tool calls, below) */
    cn_tool_choice tool_choice;
    const char *tool_name;    /* CN_TOOL_CHOICE_NAMED: borrowed during compile */
    bool parallel_tool_calls; /* more than one call in a reply */
} cn_grammar_params;

#define CN_GRAMMAR_MAX_WS 20

CN_API cn_grammar_params cn_grammar_default_params(void);

/* Compiles p against tok's vocabulary (tok must outlive the grammar). Errors:
 * INVALID_ARG with a message naming what is wrong (a JSON Schema's unsupported keyword
 * and its JSON pointer, a GBNF line:column, a regex offset), "compile budget" when
 * max_states or max_compile_ms ran out; NO_MEMORY. */
CN_API cn_status cn_grammar_compile(const cn_tokenizer *tok, const cn_grammar_params *p, cn_grammar **out,
                                    cn_error *err);
/* Another reference (the grammar lives until its last cn_grammar_free). */
CN_API cn_grammar *cn_grammar_ref(cn_grammar *g);
CN_API void cn_grammar_free(cn_grammar *g); /* NULL: no-op */
/* The vocabulary size its masks cover ((n + 31) / 32 words): for sizing a mask. */
CN_API int32_t cn_grammar_n_vocab(const cn_grammar *g);

/* Whether text[0..n) is a complete sentence of g (bytes, not tokens). */
CN_API bool cn_grammar_check_text(const cn_grammar *g, const char *text, size_t n);

/* A matcher: for a program that samples by itself (its own sampler or speculation, as
 * llguidance's and XGrammar's users drive theirs): mask, accept, roll back. cinder's own
 * generation takes the grammar whole (cn_gen_params.grammar); tests/api/api_test.c drives
 * one as such a program would. */

/* A matcher at the grammar's start. Holds a reference to g. */
CN_API cn_status cn_grammar_matcher_new(cn_grammar *g, cn_grammar_matcher **out, cn_error *err);
CN_API void cn_grammar_matcher_free(cn_grammar_matcher *m); /* NULL: no-op */
/* The tokens allowed next: bit (i % 32) of mask[i / 32] set when token i is; n_words >=
 * (n_vocab + 31) / 32. End-of-generation tokens are allowed exactly when the text so far
 * is complete. Errors: INVALID_ARG (n_words too small), NO_MEMORY. */
CN_API cn_status cn_grammar_matcher_mask(cn_grammar_matcher *m, uint32_t *mask, size_t n_words, cn_error *err);
/* Commits one token; false (and no change) when the grammar does not allow it. An
 * end-of-generation token is accepted when the text is complete and ends the matcher. */
CN_API bool cn_grammar_matcher_accept(cn_grammar_matcher *m, int32_t token);
/* Commits bytes (as one step for rollback); false and no change when not allowed. */
CN_API bool cn_grammar_matcher_accept_text(cn_grammar_matcher *m, const char *s, size_t n);
/* The text so far is a complete sentence (end-of-generation would be allowed). */
CN_API bool cn_grammar_matcher_is_complete(const cn_grammar_matcher *m);
/* Complete and nothing else can follow, or an end-of-generation token was accepted. */
CN_API bool cn_grammar_matcher_is_done(const cn_grammar_matcher *m);
/* Undoes the last n accepted steps (tokens or texts); n > steps kept: INVALID_ARG. The
 * matcher keeps every step since its start or the last reset. */
CN_API cn_status cn_grammar_matcher_rollback(cn_grammar_matcher *m, size_t n, cn_error *err);
CN_API size_t cn_grammar_matcher_n_steps(const cn_grammar_matcher *m);
CN_API void cn_grammar_matcher_reset(cn_grammar_matcher *m);

/* ==== end of structured output ========================================================== */

/* ==== tool calls ===========================================================================
 * How a chat model writes a function call, and reading calls back out of its reply as it
 * streams (src/text/toolcall.c). A format names the text that starts a call and the shape
 * of the call: a JSON object {"name": ..., "arguments": {...}} ("parameters" for Llama 3).
 * The same table builds the grammar that constrains calls (CN_GRAMMAR_TOOLS), so what the
 * grammar lets a model write, the reader reads. */

typedef enum {
    CN_TOOL_FORMAT_NONE = 0, /* no tools */
    CN_TOOL_FORMAT_HERMES,   /* <tool_call>{"name": ..., "arguments": {...}}</tool_call>, anywhere
                                in the reply, one or more (Qwen2.5, Qwen3, Hermes) */
    CN_TOOL_FORMAT_LLAMA3,   /* {"name": ..., "parameters": {...}} as the whole reply, or after
                                <|python_tag|> (Llama 3.1-3.3) */
    CN_TOOL_FORMAT_MISTRAL,  /* [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] */
    CN_TOOL_FORMAT_GENERIC,  /* a template that renders no tools: the prompt gets a system
                                note describing them and asking for Hermes' tags, and the
                                reply is read as Hermes */
} cn_tool_format;

/* For a program that renders its own tool prompts and reads replies with a cn_tool_reader
 * (cn_chat_turn_prepare does both for a cn_chat_turn_info):
 * the format a chat template's source text implies (its markers: "<tool_call>",
 * "<|python_tag|>" or a "parameters" call shape, "[TOOL_CALLS]"); GENERIC when it
 * mentions none, or when src is NULL. */
CN_API cn_tool_format cn_tool_format_detect(const char *template_src);
/* "none", "hermes", "llama3", "mistral", "generic"; NULL for an unknown value. */
CN_API const char *cn_tool_format_name(cn_tool_format f);

typedef struct cn_tool_reader cn_tool_reader;

typedef enum {
    CN_TOOL_EV_CONTENT = 0, /* text for the user */
    CN_TOOL_EV_REASONING,   /* text between <think> and </think> */
    CN_TOOL_EV_CALL,        /* a call starts: index, name */
    CN_TOOL_EV_ARGS,        /* the next bytes of call index's arguments, as JSON text */
    CN_TOOL_EV_BROKEN,      /* the reply ended inside call index: text is all of that
                               call's text, trigger included (give it to the user as text) */
} cn_tool_event_kind;

typedef struct {
    cn_tool_event_kind kind;
    int32_t index;    /* the call's number in the reply, from 0 (CALL, ARGS, BROKEN) */
    const char *name; /* CALL: the function's name, NUL-terminated */
    const char *text; /* CONTENT, REASONING, ARGS, BROKEN: text[0..len) */
    size_t len;
} cn_tool_event;

/* A reader for one reply in format f. think: split <think>...</think> at the reply's
 * start into REASONING; in_think: the reply starts inside a thought (the generation
 * prompt ended with "<think>"). Text that may still become a trigger is held back until
 * it cannot. */
CN_API cn_status cn_tool_reader_new(cn_tool_format f, bool think, bool in_think, cn_tool_reader **out, cn_error *err);
CN_API void cn_tool_reader_free(cn_tool_reader *r); /* NULL is a no-op */
/* Feeds the reply's next text (any split, even inside a UTF-8 character); final: the
 * reply ended, so everything held back comes out. *ev / *n_ev: the events this text
 * completed, in order; views valid until the next feed or free. Adjacent CONTENT (or
 * ARGS) events may come split. Errors: a call longer than 1 MiB (LIMIT), NO_MEMORY. */
CN_API cn_status cn_tool_reader_feed(cn_tool_reader *r, const char *text, size_t n, bool final,
                                     const cn_tool_event **ev, size_t *n_ev, cn_error *err);

/* A chat turn that may call tools, made ready to generate (src/text/chat_turn.c): the
 * messages checked (roles, fields, a tool result must answer a call an earlier
 * assistant message made: INVALID_ARG with err->param such as
 * "messages[3].tool_call_id") and rendered with the template, the tools in it; a
 * template that renders no tools (GENERIC) gets a system note describing them and asking
 * for Hermes' tags, with calls and results written as tags in plain turns. Constrain the
 * reply with CN_GRAMMAR_TOOLS in info.format and read it with a cn_tool_reader. */
typedef struct {
    const char *messages_json; /* OpenAI chat messages (JSON array); borrowed */
    const char *tools_json;    /* OpenAI tools (JSON array) or NULL */
    const char *vars_json;     /* extra template variables (JSON object) or NULL */
} cn_chat_turn;

typedef struct {
    cn_tool_format format; /* how calls are written; NONE when the turn has no tools */
    bool think, in_think;  /* read the reply for <think>; it starts inside one */
} cn_chat_turn_info;

/* *prompt: the rendered text (malloc'ed, *len bytes, may be NULL), with the generation
 * prompt; tokenize it with add_special and parse_special. */
CN_API cn_status cn_chat_turn_prepare(const cn_chat_template *t, const cn_chat_turn *turn, char **prompt, size_t *len,
                                      cn_chat_turn_info *info, cn_error *err);

/* ==== end of tool calls ================================================================= */

/* ==== embeddings ===========================================================================
 * One vector per input text (src/engine/embed.c): the model's final hidden states (after the
 * output norm, what its LM head would read: llama.cpp's embeddings) pooled over the
 * input's tokens, then L2-normalized. An embedder is a path of its own beside the
 * engine's scheduler: an input is one prefill and no token is sampled, so it needs neither
 * the scheduler nor a KV cache that outlives the call; it packs many inputs into each
 * forward pass (one sequence each, up to n_batch tokens per pass) on a cache sized for
 * one pass. Threads: calls may come from any thread; their passes run one at a time (an
 * internal lock), on the embedder's own n_threads, or, for an engine's embedder
 * (cn_engine_embedder), on the engine's threads between two of its steps. */

/* How token vectors become one: numbered as GGUF's <arch>.pooling_type (llama.cpp's). */
typedef enum {
    CN_POOLING_DEFAULT = -1, /* the model's <arch>.pooling_type (mean, cls or last); last
                                when it has none or says none (decoder models) */
    CN_POOLING_NONE = 0,     /* one vector per token: not offered (cn_embedder_create
                                refuses it) */
    CN_POOLING_MEAN = 1,     /* the mean of every token's vector */
    CN_POOLING_CLS = 2,      /* the first token's */
    CN_POOLING_LAST = 3,     /* the last token's */
} cn_pooling;

/* "mean", "cls", "last", "none"; "default" for CN_POOLING_DEFAULT; NULL out of range. */
CN_API const char *cn_pooling_name(cn_pooling p);
/* By name ("mean", "cls", "last", "none", any case); INVALID_ARG lists the names. */
CN_API cn_status cn_pooling_from_name(const char *name, cn_pooling *out, cn_error *err);

/* Pools h (n_rows token vectors of n_embd floats, row-major) into out (n_embd floats) and,
 * if normalize, scales it to unit L2 norm (a zero vector stays zero). Sums run in double,
 * in row order. Pure: for bindings and tests. NONE / DEFAULT, n_rows < 1 or n_embd < 1:
 * INVALID_ARG, out untouched. */
CN_API cn_status cn_embd_pool(const float *h, int32_t n_rows, int32_t n_embd, cn_pooling p, bool normalize, float *out,
                              cn_error *err);

typedef struct cn_embedder cn_embedder;

typedef struct {
    int32_t n_threads;  /* [1, 1024]; 0 (default) = every CPU; an engine's embedder
                           ignores it (the engine's threads) */
    int32_t n_batch;    /* tokens per forward pass, [8, 65536], and so the longest input;
                           default 512 (llama-server's default physical batch, which
                           bounds its embedding inputs the same way) */
    int32_t max_seqs;   /* inputs packed into one pass, [1, 256]; default 64 */
    cn_pooling pooling; /* default CN_POOLING_DEFAULT (see there) */
    bool normalize;     /* L2-normalize each vector; default true */
} cn_embedder_params;

CN_API cn_embedder_params cn_embedder_default_params(void);

/* Borrows m (it must outlive the embedder). Errors: a parameter out of range or pooling
 * NONE (INVALID_ARG, param named), the tokenizer's errors, no memory. */
CN_API cn_status cn_embedder_create(const cn_model *m, const cn_embedder_params *p, cn_embedder **out, cn_error *err);
/* An embedder of e's model on e's thread pool and tokenizer (a server then runs one set
 * of compute threads per model, not two). Each forward pass takes the engine's lock, so
 * it runs between two steps: generation and embeddings interleave pass by pass, and a
 * vector is bit-identical to a standalone embedder's. Borrows e: free the embedder before
 * the engine. Errors as cn_embedder_create's (n_threads is not read), INVALID_ARG
 * without an engine. */
CN_API cn_status cn_engine_embedder(cn_engine *e, const cn_embedder_params *p, cn_embedder **out, cn_error *err);
CN_API void cn_embedder_free(cn_embedder *e); /* NULL is a no-op */

CN_API int32_t cn_embedder_n_embd(const cn_embedder *e);     /* floats per vector */
CN_API int32_t cn_embedder_n_batch(const cn_embedder *e);    /* the longest input, in tokens */
CN_API cn_pooling cn_embedder_pooling(const cn_embedder *e); /* what DEFAULT became */
/* The model's tokenizer (an engine's embedder: the engine's), to count or cut an input
 * before it is embedded (the longest is cn_embedder_n_batch tokens). View valid until
 * cn_embedder_free. */
CN_API const cn_tokenizer *cn_embedder_tokenizer(const cn_embedder *e);

/* Embeds n_inputs token sequences: tokens[i][0..n_tokens[i]) into out[i * n_embd ..]
 * (n_inputs * n_embd floats). Errors (out unspecified): an empty input, an id outside the
 * vocabulary, an input longer than n_batch (INVALID_ARG; LIMIT for the length, param
 * "input" and the message naming its index), a failed forward pass, no memory. */
CN_API cn_status cn_embedder_embed(cn_embedder *e, const int32_t *const *tokens, const int32_t *n_tokens,
                                   size_t n_inputs, float *out, cn_error *err);
/* As cn_embedder_embed, for texts tokenized as llama-server tokenizes its embedding inputs
 * (BOS/EOS as the model's metadata says, special-token texts parsed). */
CN_API cn_status cn_embedder_embed_texts(cn_embedder *e, const char *const *texts, size_t n_texts, float *out,
                                         cn_error *err);

/* ==== end of embeddings ================================================================= */

/* ########################################################################################
 * THE LOW TIER: drive the model yourself
 * Tokens in and out, batches through the model with their logits read back by row, sequences
 * of the KV cache kept, copied and cut, one sampling step by hand: what tools that run the
 * model themselves stand on (perplexity, bench, a custom sampler), as llama.cpp's stand on
 * llama_batch + llama_decode.
 ######################################################################################## */

/* ==== tokenizer ============================================================================
 * SentencePiece-style and byte-level BPE vocabularies from the model's GGUF metadata
 * (src/text). A tokenizer is immutable: every call may come from any thread at once. */

/* The model's tokenizer; the model must outlive it. Errors: no or a malformed vocabulary
 * (CORRUPT), a tokenizer model cinder does not know (UNSUPPORTED). */
CN_API cn_status cn_tokenizer_from_model(const cn_model *m, cn_tokenizer **out, cn_error *err);
CN_API void cn_tokenizer_free(cn_tokenizer *t); /* NULL is a no-op */

CN_API int32_t cn_tokenizer_n_vocab(const cn_tokenizer *t);
CN_API int32_t cn_tokenizer_bos(const cn_tokenizer *t); /* -1 if none */
CN_API int32_t cn_tokenizer_eos(const cn_tokenizer *t); /* -1 if none */
CN_API int32_t cn_tokenizer_eot(const cn_tokenizer *t); /* end-of-turn id, -1 if none */
/* True for every end-of-generation token (EOS, EOT, <|im_end|>, <end_of_turn>, ...). */
CN_API bool cn_tokenizer_is_eog(const cn_tokenizer *t, int32_t id);
/* Whether cn_tokenize(add_special = true) prepends BOS / appends EOS. */
CN_API bool cn_tokenizer_add_bos(const cn_tokenizer *t);
CN_API bool cn_tokenizer_add_eos(const cn_tokenizer *t);
/* Looks up a token by its exact text as the vocabulary stores it; -1 if absent. */
CN_API int32_t cn_tokenizer_find(const cn_tokenizer *t, const char *text);

/* Tokenizes text[0..len). add_special: add BOS/EOS as the metadata says
 * (tokenizer.ggml.add_bos_token / add_eos_token). parse_special: match the text of
 * control/user-defined special tokens in the input. Writes up to cap ids; *n_out is the
 * full count (if > cap, call again with a larger buffer; ids may be NULL when cap is 0). */
CN_API cn_status cn_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                             int32_t *ids, size_t cap, size_t *n_out, cn_error *err);

/* As cn_tokenize, in one pass: *ids (malloc'd, freed by the caller with free(); NULL when
 * the text gives no tokens) gets all *n_ids ids. */
CN_API cn_status cn_tokenize_alloc(const cn_tokenizer *t, const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t **ids, size_t *n_ids, cn_error *err);

/* The raw bytes a token stands for (byte tokens decoded, SentencePiece ▁ as space, BPE
 * byte-to-unicode undone). Control tokens render as their text only if render_special.
 * Returns the byte count written (may exceed cap: then nothing useful was written). */
CN_API size_t cn_token_to_piece(const cn_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* ids[0..n) as text, valid UTF-8 (bytes that cannot become UTF-8 are U+FFFD), with
 * SentencePiece's leading space of the first piece dropped as the tokenizer added it.
 * *out is NUL-terminated, freed by the caller with free(); *n_out (may be NULL) its
 * length. Errors: an id out of the vocabulary (INVALID_ARG), no memory. */
CN_API cn_status cn_detokenize(const cn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
                               size_t *n_out, cn_error *err);

/* ---- fill-in-the-middle (src/text/fim.c) ----
 * Code models trained to fill a hole take the text before it (prefix) and after it
 * (suffix) between marker tokens and generate the middle. The markers come from the
 * metadata (tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id, then the older
 * prefix/suffix/middle_token_id), else from their known texts (Qwen's <|fim_prefix|> ...
 * <|repo_name|> <|file_sep|>, StarCoder's <fim_prefix> ..., CodeLlama's ▁<PRE> ...,
 * DeepSeek's, as llama.cpp looks them up). */
typedef enum {
    /* clang-format off */
    CN_FIM_PRE = 0, CN_FIM_SUF, CN_FIM_MID, /* required to fill a hole */
    CN_FIM_PAD, CN_FIM_REP, CN_FIM_SEP,     /* padding; repository name; file separator */
    /* clang-format on */
    CN_FIM_N_TOKENS
} cn_fim_token;

/* The id of a FIM token, -1 if the vocabulary has none (or which is out of range). */
CN_API int32_t cn_tokenizer_fim(const cn_tokenizer *t, cn_fim_token which);

/* One file of repository context: filename NULL is "tmp" (as llama-server). */
typedef struct {
    const char *filename;
    const char *text;
} cn_fim_chunk;

/* A FIM prompt, laid out as llama-server's /infill lays it out (format_prompt_infill):
 *
 *   [extra: REP "myproject\n" (SEP filename "\n" text)... SEP "filename\n"] BOS?
 *   PRE prefix prompt SUF suffix MID          (spm: BOS? SUF suffix PRE prefix prompt MID)
 *
 * (without a SEP token each chunk is led by "\n\n--- snippet ---\n\n"; without a
 * REP token the repository line is left out). The budget is llama-server's: the prefix
 * keeps its last 3*(n_batch/4) tokens, the suffix its first n_batch/4 - 2 - n_prompt
 * tokens (none when that is negative), and the extra context its last n_extra_max tokens. */
typedef struct {
    const char *prefix, *suffix; /* NUL-terminated text before and after the hole (NULL:
                                    ""); special-token texts are not parsed */
    const char *prompt;          /* NULL or text that continues the prefix (the middle's
                                    start); special-token texts parsed */
    const cn_fim_chunk *extra;   /* borrowed: n_extra files of context */
    size_t n_extra;
    int32_t n_batch;     /* the prefix + suffix budget, [4, 1 << 20]; default 2048
                            (llama-server's default --batch-size) */
    int32_t n_extra_max; /* tokens of extra context kept, >= 0; -1 (default) all */
    bool spm;            /* suffix-prefix-middle order (llama-server --spm-infill) */
} cn_fim_params;

CN_API cn_fim_params cn_fim_default_params(void);

/* The token ids of p's FIM prompt for t. *ids is malloc'ed (free()), *n_ids its length.
 * Errors: the vocabulary has no PRE, SUF or MID token (UNSUPPORTED: the message names the
 * missing ones), a parameter out of range (INVALID_ARG, param named), no memory. */
CN_API cn_status cn_fim_prompt(const cn_tokenizer *t, const cn_fim_params *p, int32_t **ids, size_t *n_ids,
                               cn_error *err);

/* The tokenizer of a GGUF file, loadable model or not (a vocabulary-only file will do);
 * the file is closed before it returns. Errors: those of cn_gguf_open, then those of
 * cn_tokenizer_from_model (the message names the file). */
CN_API cn_status cn_tokenizer_load_file(const char *path, cn_tokenizer **out, cn_error *err);

/* ==== end of tokenizer ================================================================== */

/* ==== batches, decode, logits rows, sequences ==============================================
 * What tools that drive the model themselves stand on (perplexity, bench; llama.cpp's
 * llama_batch + llama_decode): a batch is a flat list of rows (token, position, sequence,
 * whether its logits are wanted); cn_context_decode runs it through the model on a context's
 * cache, appending each row's keys and values to its sequence; the logits of the rows
 * that wanted them are read back by index. Sequences are numbered [0, n_seq_max).
 * cn_context_generate / cn_context_logits use sequence 0 and keep its cache between
 * requests; a cn_context_decode (or a sequence operation) makes them forget what sequence 0
 * held, so the next request prefills again; a beam search empties every sequence.
 * Threads: as the context. */

typedef struct {
    int32_t token;
    int32_t pos; /* position in its sequence: rows continue what the sequence
                    holds without gaps (they may also rewrite held positions) */
    int32_t seq;
    bool want_logits;
} cn_batch_row;

typedef struct {
    cn_batch_row *rows; /* (cap) */
    int32_t n_rows, cap;
} cn_batch;

/* Room for cap rows. INVALID_ARG for cap < 1, NO_MEMORY. */
CN_API cn_status cn_batch_init(cn_batch *b, int32_t cap, cn_error *err);
CN_API void cn_batch_free(cn_batch *b); /* a zeroed struct is fine */
CN_API void cn_batch_clear(cn_batch *b);
/* Appends a row; false (nothing added) when the batch is full. */
CN_API bool cn_batch_add(cn_batch *b, int32_t token, int32_t pos, int32_t seq, bool want_logits);
CN_API int32_t cn_batch_n_logits(const cn_batch *b); /* rows that want logits */

/* Runs b (1 to n_batch rows; with beams, at least CN_GEN_MAX_BEAMS). Errors, the cache
 * unchanged: a token outside the vocabulary, a negative position, a sequence outside
 * [0, n_seq_max), two rows for one position, a gap (INVALID_ARG); a position at or past
 * n_ctx (LIMIT); no memory. */
CN_API cn_status cn_context_decode(cn_context *c, const cn_batch *b, cn_error *err);
/* The logits (n_vocab floats) of the i-th row of the last cn_context_decode that wanted them (in
 * batch order); NULL for i out of range. View valid until the next call on c. */
CN_API const float *cn_context_logits_row(const cn_context *c, int32_t i);
CN_API int32_t cn_context_n_vocab(const cn_context *c);

/* Positions seq holds (0 for an empty or out-of-range sequence). */
CN_API int64_t cn_context_seq_len(const cn_context *c, int32_t seq);
/* Keeps positions [0, p0) of seq and drops the rest (p0 = 0 empties it; p0 at or past its
 * length changes nothing). INVALID_ARG for a bad seq or p0 < 0. */
CN_API cn_status cn_context_seq_rm(cn_context *c, int32_t seq, int64_t p0, cn_error *err);
/* Makes dst hold the first n positions of src (n = -1: all of them), sharing src's cache
 * blocks (copied only when one of them writes). dst's old contents are dropped.
 * INVALID_ARG for a bad sequence, src == dst, or n past src's length; NO_MEMORY. */
CN_API cn_status cn_context_seq_cp(cn_context *c, int32_t src, int32_t dst, int64_t n, cn_error *err);
/* Empties every sequence but seq. */
CN_API void cn_context_seq_keep(cn_context *c, int32_t seq);

/* ==== end of batches ==================================================================== */

/* ==== explain: the sampler chain stage by stage ============================================
 * One sampling step over a logits row, as the generation loop takes it, with every stage's
 * candidates shown (src/gen/sampling.c). Pure: no model needed. */

typedef struct {
    int32_t id;
    float logit;
    float p; /* probability within the set (renormalized) */
} cn_candidate;

/* After each stage that ran (stages at their off value are skipped): the candidates it
 * kept, most probable first (ties: lowest id), p renormalized; the view is valid during
 * the call. */
typedef void (*cn_explain_fn)(void *user, cn_sampler_stage stage, const cn_candidate *cand, size_t n_cand);

typedef struct {
    int32_t greedy; /* the token temperature 0 picks under the same bias and
                       penalties */
    int32_t token;  /* the token drawn */
    float p;        /* its probability in the final set */
    int32_t n_kept; /* candidates left after the chain */
    double u;       /* the uniform draw in [0, 1) */
    uint64_t seed;  /* the seed used */
} cn_explain_result;

/* logits: n_vocab floats (-inf: the token cannot be drawn; for probabilities, pass their
 * logs). history: the tokens penalties see (may be NULL when n_history is 0). Errors:
 * INVALID_ARG (a bad parameter, a NaN logit, no finite logit, a history id out of range). */
CN_API cn_status cn_explain(const float *logits, int32_t n_vocab, const cn_sampling_params *p, const int32_t *history,
                            size_t n_history, cn_explain_fn on_stage, void *user, cn_explain_result *out,
                            cn_error *err);

/* ==== end of explain ==================================================================== */

/* ########################################################################################
 * THE TOOLS TIER: measure, and make model files
 * Profiling, the machine's bandwidth, what a token costs; quantize, importance matrices,
 * drafts and perplexity logits files. Most have one caller in the tree (a `cinder` subcommand);
 * each section says why it is public. The GGUF reader is its own header, cinder_gguf.h.
 ######################################################################################## */

/* ==== profiling a forward pass, watching its matmuls =======================================
 * What `cinder bench --profile` and `cinder imatrix` stand on, as llama.cpp's tools stand
 * on its eval callback: reasons for these to be public, where no other caller is. */

/* The forward pass's time by step (`cinder bench --profile`): with profiling on, every
 * cn_context_decode adds each step's wall time and the bytes it read, per kind of step
 * and weight formats, summed over layers. Off by default; it costs two clock reads per
 * step when on. */
typedef struct {
    char op[96];    /* the step, its weights' formats and shape: "ffn gate+up q4_K,q4_K 1536->8960" */
    uint64_t calls; /* times it ran (layers × passes) */
    double ms;      /* wall time inside it, the wait for the slowest thread included */
    uint64_t bytes; /* bytes it read: weights, or the KV cache for attention */
} cn_profile_op;
/* on: clears the counts and starts counting; off: stops (the counts stay readable). */
CN_API void cn_context_profile(cn_context *c, bool on);
/* Copies up to max ops into out (in the order first met); returns how many there are. */
CN_API int32_t cn_context_profile_read(const cn_context *c, cn_profile_op *out, int32_t max);

/* The rows that enter each matrix multiplication (`cinder imatrix`): with an observer set,
 * every cn_context_decode of two or more rows calls fn on the calling thread, once per
 * weight it multiplies, with the weight's GGUF name ("blk.0.attn_q.weight") and the f32
 * rows (n_rows of k, row-major) as they are before being quantized for the kernel: the
 * normed hidden state for the q/k/v and gate/up weights (one call each, the same rows),
 * the attention output for attn_output, act(gate)·up for ffn_down, and for the LM head
 * only the rows that want logits. One-row decodes are not observed. x is valid during the
 * call only. fn NULL: off. */
typedef void (*cn_matmul_observer)(void *user, const char *weight, const float *x, int64_t n_rows, int64_t k);
CN_API void cn_context_observe_matmuls(cn_context *c, cn_matmul_observer fn, void *user);

/* ==== end of profiling ================================================================== */

/* ==== measuring: the machine, and what a decoded token costs ===============================
 * For tools that report speed against what the hardware allows (cinder bench; a program
 * printing its system line, as llama.cpp's llama_print_system_info). Implemented in
 * src/core/system.c and src/model/decode_bytes.c. Thread-safe. */

typedef struct {
    int32_t n_cpus;                                 /* online CPUs: what n_threads = 0 ("every CPU") means */
    bool avx2, avx512f, avx512vnni, amx_int8, neon; /* CPU features, after the CINDER_ISA
                                  cap (cn_kernels_family() names the kernels they chose) */
} cn_system_info;

CN_API void cn_system_get_info(cn_system_info *out);

/* The machine's memory bandwidth as n_threads see it, in GB/s (1e9 bytes): the best of 3
 * passes reading n_bytes (at least 64 MiB; as many as a decoded token reads makes cache
 * effects alike: cn_model_decode_bytes) in 2 MiB pages like prefaulted weights, and of 3
 * copies of half as many (bytes read + written). Takes a few passes over n_bytes of
 * memory it allocates and frees. INVALID_ARG for n_threads outside [1, 1024], NO_MEMORY. */
CN_API cn_status cn_system_measure_bandwidth(int32_t n_threads, uint64_t n_bytes, double *read_gb_s, double *copy_gb_s,
                                             cn_error *err);

/* The weight bytes one decoded token reads: every matrix, bias and norm of every layer,
 * the output norm and the LM head; not the embedding table (one row of it is read) unless
 * it is the tied LM head. Decode tok/s times this is the weight traffic per second. */
CN_API uint64_t cn_model_decode_bytes(const cn_model *m);

/* The q-quantile (q in [0, 1]) of v[0..n) by linear interpolation between order
 * statistics (numpy's default, as the timings' percentiles are taken): sorts v in place.
 * 0 when n == 0. For tools that report latency percentiles of their own. */
CN_API double cn_gen_percentile(double *v, size_t n, double q);

/* ==== end of measuring ================================================================== */

/* ==== text helpers =========================================================================
 * Bytes made safe to show or to put in JSON (src/core/utf8.c). */

/* s[0..n) as valid UTF-8: each maximal ill-formed subsequence becomes one U+FFFD (as
 * Python's decode(errors="replace") does). *out is NUL-terminated, freed by the caller
 * with free(); *n_out (may be NULL) its length. Errors: NO_MEMORY. */
CN_API cn_status cn_text_utf8_clean(const char *s, size_t n, char **out, size_t *n_out, cn_error *err);

/* ==== end of text helpers =============================================================== */

/* ==== model files: quantize, importance matrices, drafts, perplexity logits ================
 * GGUF-to-GGUF tools and the files that measure a quantization's cost (src/quant): what
 * `cinder quantize`, `imatrix`, `draft-from` and `perplexity` stand on, so that another
 * front end (a script, a model hub's converter) gets llama.cpp's files from the library
 * as cinder does. Every file is written through a temporary file beside its name and
 * renamed at the end: a failure leaves no partial file, and an existing one as it was. */

/* Writes out_path: a draft model for speculative decoding cut from the model at path,
 * for models with no smaller partner: its first n_layers layers, the final norm and the
 * head, every other tensor and all metadata as they are (block_count = n_layers,
 * general.name marked), so its vocabulary is the model's. No model is run. *n_layer_model
 * (may be NULL) gets the model's layer count. INVALID_ARG (param "n_layers") when
 * n_layers < 1 or it keeps every layer; CORRUPT when the file is not a model's (no
 * general.architecture or block_count); IO when out_path cannot be written (it is written
 * through a temporary file renamed at the end: a failure leaves no partial file, and an
 * existing out_path as it was). */
CN_API cn_status cn_model_write_draft(const char *path, const char *out_path, int32_t n_layers, int32_t *n_layer_model,
                                      cn_error *err);

/* Importance matrices (src/quant/imatrix_stats.c): `cinder imatrix`, llama-imatrix's statistics
 * and its GGUF file. Per weight, the sum over every observed row of each column's squared
 * activation, and the number of rows: llama-quantize --imatrix and `cinder quantize
 * --imatrix` spend a quantized row's precision where these are large. Not thread-safe:
 * one thread adds (the observer's calling thread). */
typedef struct cn_imatrix_stats cn_imatrix_stats;
CN_API cn_status cn_imatrix_stats_create(cn_imatrix_stats **out, cn_error *err);
CN_API void cn_imatrix_stats_free(cn_imatrix_stats *s); /* NULL is a no-op */
/* Adds n_rows rows of k columns for weight. Errors: INVALID_ARG when the weight was seen
 * before with another k, or a value is not finite (named); NO_MEMORY. */
CN_API cn_status cn_imatrix_stats_add(cn_imatrix_stats *s, const char *weight, const float *x, int64_t n_rows,
                                      int64_t k, cn_error *err);
CN_API int64_t cn_imatrix_stats_n_weights(const cn_imatrix_stats *s);
/* Writes llama-imatrix's GGUF file (general.type "imatrix"; imatrix.datasets [dataset],
 * imatrix.chunk_count, imatrix.chunk_size; per weight, in name order, "<name>.in_sum2"
 * F32 [k, 1] and "<name>.counts" F32 [1, 1]) through a temporary file renamed at the end,
 * so a failure leaves no partial file, and an existing file at path as it was. Errors:
 * INVALID_ARG when nothing was added; IO. */
CN_API cn_status cn_imatrix_stats_save(const cn_imatrix_stats *s, const char *path, const char *dataset,
                                       int32_t chunk_count, int32_t chunk_size, cn_error *err);

/* Quantizing a model file (src/quant/quantize.c): `cinder quantize`, llama-quantize's
 * rules. type is a file type as llama-quantize spells it (case-insensitive): Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q6_K, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, and Q4_K / Q5_K, which are
 * llama-quantize's aliases of Q4_K_M / Q5_K_M (with pure, every tensor the one type). */
typedef struct {
    int32_t n_threads;           /* 0: every CPU */
    bool allow_requantize;       /* a quantized input may be dequantized and quantized again */
    bool pure;                   /* no mix: every quantizable tensor gets the type's base type */
    const char *output_type;     /* "q8_0", ... for output.weight; NULL: the mix's rule */
    const char *token_embd_type; /* as output_type, for token_embd.weight */
    /* an importance matrix from llama-imatrix (its GGUF or legacy .dat file): tensors it
     * has an entry for are quantized with its column weights, as llama-quantize --imatrix
     * does; the path is recorded in the output (quantize.imatrix.file). NULL: none */
    const char *imatrix_path;
    /* llama-quantize's --include-weights / --exclude-weights: keep only the imatrix entries
     * whose name contains one of include[0..n_include), or drop those that contain one of
     * exclude[0..n_exclude) (not both; the rest are quantized unweighted). Borrowed. */
    const char *const *include_weights;
    int32_t n_include;
    const char *const *exclude_weights;
    int32_t n_exclude;
    /* called after each tensor (and once with n_done 0): tensors done of n_tensors, bytes
     * of the input read so far; NULL: none */
    void (*progress)(void *user, int64_t n_done, int64_t n_tensors, uint64_t n_bytes_in);
    void *progress_user;
} cn_quantize_params;

typedef struct {
    int64_t n_tensors, n_quantized, n_fallback; /* n_fallback: tensors given a 32-block type
                                                   because their rows do not fit 256 */
    uint64_t n_bytes_in, n_bytes_out;           /* tensor data */
    int64_t n_elem;                             /* weights, for bits per weight */
    uint32_t file_type;                         /* general.file_type written */
    int64_t n_imatrix;                          /* tensors quantized with importance weights */
} cn_quantize_stats;

CN_API cn_quantize_params cn_quantize_default_params(void);
/* Writes out_path (through a temporary file in its folder, renamed at the end: on any
 * failure nothing is left behind and an existing out_path is as it was). Metadata is copied, with general.file_type
 * and general.quantization_version set. stats may be NULL. Errors: INVALID_ARG for an
 * unknown type or tensor type (message names it), a type a tensor's rows cannot take, a
 * quantized input without allow_requantize, in_path == out_path, or an imatrix entry whose
 * size is not its tensor's columns; CORRUPT / IO / UNSUPPORTED from reading the input or
 * the imatrix (the message names which); IO when the output cannot be written (full disk). */
CN_API cn_status cn_model_quantize(const char *in_path, const char *out_path, const char *type,
                                   const cn_quantize_params *p, cn_quantize_stats *stats, cn_error *err);

/* llama-perplexity's log-probability file (its --kl-divergence-base; src/quant/logits_file.c):
 * `cinder perplexity --save-logits` writes one, `--kl-base` measures a model against one
 * (cinder's or llama-perplexity's) with llama-perplexity's arithmetic, so each tool reads
 * the other's files and reports the same figures. A file holds n_chunk chunks of n_ctx
 * tokens (the text's, BOS first when the model adds one); a chunk is evaluated from an
 * empty sequence with its first token replaced by BOS, and each of its positions i in
 * [n_ctx/2, n_ctx - 1) is scored against token i + 1: one row of quantized
 * log-probabilities per position. No model is run here: the caller gives each chunk's
 * logits, in order. Not thread-safe. */
typedef struct cn_logits_file cn_logits_file;

typedef struct {
    int64_t n_scored;    /* positions given so far */
    double ppl, ppl_unc; /* perplexity of the logits given, and ppl × the standard error of
                            the mean log-likelihood (0 under 2 positions) */
    double mean_kld;     /* comparing: mean KL divergence from the file's distributions */
    double same_top_pct; /* comparing: % of positions whose most likely token is the file's */
} cn_logits_stats;

/* Starts writing path: the header and tokens[0 .. n_chunk * n_ctx) (borrowed during the
 * call). The file is built beside path and renamed over it by cn_logits_file_commit; until
 * then, and after any failure, an existing file at path is as it was. Errors: INVALID_ARG
 * for n_ctx outside [8, 2^20], n_vocab outside [1, 2^24], n_chunk < 1 or more than 2^30
 * tokens; IO (naming path); NO_MEMORY. */
CN_API cn_status cn_logits_file_create(const char *path, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk,
                                       const int32_t *tokens, cn_logits_file **out, cn_error *err);
/* Opens path for comparing, its header and tokens read and checked. Errors: IO when it
 * cannot be opened; CORRUPT (naming path) for a file that is not one, is truncated, has
 * implausible sizes or a token outside its vocabulary; NO_MEMORY. */
CN_API cn_status cn_logits_file_open(const char *path, cn_logits_file **out, cn_error *err);
/* The file's tokens (n_chunk * n_ctx; view valid until cn_logits_file_free) and its shape
 * (each pointer may be NULL). */
CN_API const int32_t *cn_logits_file_tokens(const cn_logits_file *f, int32_t *n_ctx, int32_t *n_vocab,
                                            int32_t *n_chunk);
/* The next chunk: logits (n_ctx - 1 - n_ctx/2, n_vocab), row r for position n_ctx/2 + r
 * (borrowed during the call). A file being written gets its rows; a file opened for
 * comparing has its rows read and measured against them. *stats (may be NULL) gets the
 * figures so far. Errors: INVALID_ARG past the last chunk or after commit; CORRUPT when
 * the file ends before the chunk's rows (message "PATH: truncated at chunk N"); IO. */
CN_API cn_status cn_logits_file_add_chunk(cn_logits_file *f, const float *logits, cn_logits_stats *stats,
                                          cn_error *err);
/* Writing: syncs the file and renames it over path. INVALID_ARG when fewer than n_chunk
 * chunks were given or f is not being written; IO. Either way nothing is left beside path. */
CN_API cn_status cn_logits_file_commit(cn_logits_file *f, cn_error *err);
/* Comparing: llama-perplexity's closing statistics under its labels ("Mean PPL(Q)",
 * "Mean    KLD", "Median  KLD", "Same top p", ...) as lines of text; *out is freed by the
 * caller with free(). INVALID_ARG for a file being written; NO_MEMORY. */
CN_API cn_status cn_logits_file_report(cn_logits_file *f, char **out, cn_error *err);
/* NULL is a no-op. A file written and not committed is removed, path left as it was. */
CN_API void cn_logits_file_free(cn_logits_file *f);

/* ==== end of model files ================================================================ */

#ifdef __cplusplus
}
#endif
#endif /* CINDER_H */
