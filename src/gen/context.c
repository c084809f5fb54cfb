/* context.c — the public one-request-at-a-time API (include/cinder.h, "context"): a model's
 * tokenizer, chat template, forward context and a KV cache for one sequence (and, with a
 * draft model, the draft's context and cache), driving cn_generate / cn_generate_spec /
 * cn_beam_search (generate.c, spec.c, beam.c). It adds no generation logic of its own:
 * prompts become token ids, the cached prefix of the last request is found, the request
 * runs, and its state is copied out into a cn_result.
 *
 * The cache: sequence 0 holds kv_tokens[0..n_kv) (the last prompt and the reply tokens
 * fed back). A new prompt reuses the longest common prefix. Beam search needs one
 * sequence per beam: the cache is rebuilt with room for them when a request asks for
 * more than it has, and a beam search leaves the cache empty (beam.c frees its
 * sequences). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "core/core.h"
#include "core/pool.h"
#include "gen/beam.h"
#include "gen/generate.h"
#include "gen/sampling.h"
#include "gen/spec.h"
#include "kv/kv.h"
#include "model/model.h"
#include "text/chat.h"
#include "text/tokenizer.h"

struct cn_context {
    const cn_model *m;
    cn_context_params p;
    cn_tokenizer *tok;
    cn_chat_template *chat;         /* NULL: none cinder renders */
    char no_chat[CN_ERROR_MSG_LEN]; /* why chat is NULL */
    cn_fwd *fwd;
    cn_fwd *draft_fwd; /* the draft model's (NULL: none) */
    cn_kv *draft_kv;   /* one sequence of n_ctx positions */
    cn_kv *kv;
    int32_t kv_seqs; /* sequences kv was made for */
    int32_t n_ctx, n_vocab;
    int32_t *kv_tokens; /* (n_ctx) what sequence 0 holds */
    int64_t n_kv;
    float *logits; /* (logits_cap, n_vocab): the low tier's last wanted rows */
    int32_t n_logits, logits_cap;
};

cn_context_params cn_context_default_params(void) {
    return (cn_context_params){.n_threads = 0,
                               .n_ctx = 0,
                               .n_batch = 512,
                               .kv_type = CN_TYPE_F16,
                               .n_seq_max = 1,
                               .chat_template = NULL,
                               .draft = NULL};
}

cn_status cn_tokenizer_from_model(const cn_model *m, cn_tokenizer **out, cn_error *err) {
    *out = NULL;
    if (!m) return cn_err(err, CN_STATUS_INVALID_ARG, "tokenizer: no model");
    return cn_tokenizer_load(cn_model_gguf(m), out, err);
}

cn_status cn_chat_template_from_model(const cn_model *m, cn_chat_template **out, cn_error *err) {
    *out = NULL;
    if (!m) return cn_err(err, CN_STATUS_INVALID_ARG, "chat template: no model");
    /* the tokenizer gives bos_token / eos_token and whether BOS is added; a file whose
     * tokenizer does not load still has its template, without them */
    cn_tokenizer *tok = NULL;
    cn_error ignored = {0};
    if (cn_tokenizer_from_model(m, &tok, &ignored) != CN_STATUS_OK) tok = NULL;
    const cn_status st = cn_chat_template_for_model(cn_model_gguf(m), tok, out, err);
    cn_tokenizer_free(tok);
    return st;
}

/* A KV cache of n_seqs sequences: one full context each when n_seqs is 1; for beam
 * search, the prompt once and each beam's reply (plus a block copied on write). */
static cn_status make_kv(cn_context *c, int32_t n_seqs, cn_error *err) {
    cn_kv_params kp = cn_model_kv_params(c->m);
    kp.type = c->p.kv_type;
    kp.max_seqs = n_seqs;
    const int64_t bt = kp.block_tokens, per_ctx = (c->n_ctx + bt - 1) / bt;
    kp.n_blocks = n_seqs == 1 ? per_ctx : per_ctx + (int64_t)n_seqs * (per_ctx + 2);
    cn_kv *kv = NULL;
    const cn_status st = cn_kv_create(&kp, &kv, err);
    if (st != CN_STATUS_OK) return st;
    cn_kv_free(c->kv);
    c->kv = kv;
    c->kv_seqs = n_seqs;
    c->n_kv = 0;
    return CN_STATUS_OK;
}

/* The draft model's context and a cache of one full sequence, after checking that its
 * vocabulary is the target's token for token. */
static cn_status make_draft(cn_context *c, const cn_model *d, const cn_fwd_params *cp, cn_error *err) {
    cn_tokenizer *dtok = NULL;
    cn_status st = cn_tokenizer_from_model(d, &dtok, err);
    if (st == CN_STATUS_OK) st = cn_spec_check_vocab(c->tok, dtok, err);
    cn_tokenizer_free(dtok);
    if (st == CN_STATUS_INVALID_ARG && err) {
        char msg[CN_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return cn_err_param(err, st, "draft", "draft: %.*s", CN_ERROR_MSG_LEN - 8, msg);
    }
    if (st == CN_STATUS_OK) st = cn_fwd_create(d, cp, &c->draft_fwd, err);
    if (st != CN_STATUS_OK) return st;
    cn_kv_params kp = cn_model_kv_params(d);
    kp.type = c->p.kv_type;
    kp.max_seqs = 1;
    kp.n_blocks = (c->n_ctx + kp.block_tokens - 1) / kp.block_tokens;
    return cn_kv_create(&kp, &c->draft_kv, err);
}

cn_status cn_context_create(const cn_model *m, const cn_context_params *p, cn_context **out, cn_error *err) {
    *out = NULL;
    cn_context_params d = cn_context_default_params();
    if (!p) p = &d;
    if (!m) return cn_err(err, CN_STATUS_INVALID_ARG, "context: no model");
    if (cn_threads_check(p->n_threads, "context", err) != CN_STATUS_OK) return CN_STATUS_INVALID_ARG;
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_ctx",
                            "context: n_ctx = %d is out of range [0, 2^24] (0 = the model's)", p->n_ctx);
    if (p->n_batch < 1 || p->n_batch > 8192)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_batch", "context: n_batch = %d is out of range [1, 8192]",
                            p->n_batch);
    if (p->kv_type != CN_TYPE_F16 && p->kv_type != CN_TYPE_Q8_0 && p->kv_type != CN_TYPE_F32)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "kv_type", "context: kv_type %d is not F16, Q8_0 or F32",
                            (int)p->kv_type);
    if (p->n_seq_max < 1 || p->n_seq_max > 64)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_seq_max", "context: n_seq_max = %d is out of range [1, 64]",
                            p->n_seq_max);
    cn_context *c = calloc(1, sizeof *c);
    if (!c) return cn_err(err, CN_STATUS_NO_MEMORY, "context: out of memory");
    c->m = m;
    c->p = *p;
    const cn_hparams *hp = cn_model_hparams(m);
    c->n_vocab = hp->n_vocab;
    c->n_ctx = p->n_ctx ? p->n_ctx : CN_MIN(hp->n_ctx_train, 4096);
    c->p.n_threads = cn_threads_resolve(p->n_threads);
    cn_status st = cn_tokenizer_from_model(m, &c->tok, err);
    if (st == CN_STATUS_OK && p->chat_template) {
        st = cn_chat_template_from_name(p->chat_template, &c->chat, err);
        if (st != CN_STATUS_OK && err) {
            char msg[CN_ERROR_MSG_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            cn_err_param(err, st, "chat_template", "%s", msg);
        }
    } else if (st == CN_STATUS_OK) {
        cn_error why = {0};
        if (cn_chat_template_for_model(cn_model_gguf(m), c->tok, &c->chat, &why) != CN_STATUS_OK) c->chat = NULL;
        if (why.status == CN_STATUS_NO_MEMORY) st = cn_err(err, CN_STATUS_NO_MEMORY, "context: out of memory");
        snprintf(c->no_chat, sizeof c->no_chat, "%s", why.msg);
    }
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = c->p.n_threads;
    cp.n_batch_max = CN_MAX(c->p.n_batch, CN_GEN_MAX_BEAMS);
    cp.n_ctx = c->n_ctx;
    if (st == CN_STATUS_OK) st = cn_fwd_create(m, &cp, &c->fwd, err);
    if (st == CN_STATUS_OK) st = make_kv(c, p->n_seq_max, err);
    if (st == CN_STATUS_OK && p->draft) st = make_draft(c, p->draft, &cp, err);
    if (st == CN_STATUS_OK && !(c->kv_tokens = malloc((size_t)c->n_ctx * sizeof *c->kv_tokens)))
        st = cn_err(err, CN_STATUS_NO_MEMORY, "context: out of memory");
    if (st != CN_STATUS_OK) {
        cn_context_free(c);
        return st;
    }
    *out = c;
    return CN_STATUS_OK;
}

void cn_context_free(cn_context *c) {
    if (!c) return;
    free(c->logits);
    free(c->kv_tokens);
    cn_kv_free(c->kv);
    cn_fwd_free(c->fwd);
    cn_kv_free(c->draft_kv);
    cn_fwd_free(c->draft_fwd);
    cn_chat_template_free(c->chat);
    cn_tokenizer_free(c->tok);
    free(c);
}

const cn_tokenizer *cn_context_tokenizer(const cn_context *c) { return c->tok; }
const cn_chat_template *cn_context_chat_template(const cn_context *c) { return c->chat; }
int32_t cn_context_n_ctx(const cn_context *c) { return c->n_ctx; }
int32_t cn_context_n_threads(const cn_context *c) { return c->p.n_threads; }

/* The prompt as token ids (*ids malloc'd). *eot: the chat template's end of turn when the
 * prompt is a conversation and the tokenizer does not end generation there by itself. */
static cn_status prompt_ids(const cn_context *c, const cn_prompt *pr, int32_t **ids, int32_t *n, const char **eot,
                            cn_error *err) {
    *ids = NULL;
    *n = 0;
    *eot = NULL;
    if (!pr) return cn_err(err, CN_STATUS_INVALID_ARG, "prompt: none given");
    const int given = (pr->text != NULL) + (pr->tokens != NULL) + (pr->messages != NULL);
    if (given != 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "prompt: give exactly one of text, tokens or messages (%d given)",
                      given);
    if (pr->tokens) {
        if (pr->n_tokens < 1) return cn_err(err, CN_STATUS_INVALID_ARG, "prompt: n_tokens = %d (empty)", pr->n_tokens);
        for (int32_t i = 0; i < pr->n_tokens; i++)
            if (pr->tokens[i] < 0 || pr->tokens[i] >= c->n_vocab)
                return cn_err(err, CN_STATUS_INVALID_ARG, "prompt: token %d is %d, outside the vocabulary [0, %d)", i,
                              pr->tokens[i], c->n_vocab);
        if (!(*ids = malloc((size_t)pr->n_tokens * sizeof **ids)))
            return cn_err(err, CN_STATUS_NO_MEMORY, "prompt: out of memory");
        memcpy(*ids, pr->tokens, (size_t)pr->n_tokens * sizeof **ids);
        *n = pr->n_tokens;
        return CN_STATUS_OK;
    }
    char *rendered = NULL;
    const char *text = pr->text;
    size_t len = text ? strlen(text) : 0;
    if (pr->messages) {
        if (!c->chat)
            return cn_err(err, CN_STATUS_INVALID_ARG, "prompt: messages need a chat template: %s", c->no_chat);
        cn_status st = cn_chat_render(c->chat, pr->messages, pr->n_messages, true, &rendered, &len, err);
        if (st != CN_STATUS_OK) return st;
        text = rendered;
        *eot = cn_chat_end_of_turn_stop(c->chat, c->tok);
    }
    size_t cnt = 0;
    cn_status st = cn_tokenize_alloc(c->tok, text, len, true, true, ids, &cnt, err);
    if (st == CN_STATUS_OK && cnt == 0) st = cn_err(err, CN_STATUS_INVALID_ARG, "prompt: empty (no tokens)");
    if (st == CN_STATUS_OK && cnt >= (size_t)INT32_MAX)
        st = cn_err(err, CN_STATUS_LIMIT, "prompt: %zu tokens is too long", cnt);
    free(rendered);
    if (st != CN_STATUS_OK) {
        free(*ids);
        *ids = NULL;
        return st;
    }
    *n = (int32_t)cnt;
    return CN_STATUS_OK;
}

static int32_t common_prefix(const cn_context *c, const int32_t *ids, int32_t n) {
    int32_t k = 0;
    while (k < c->n_kv && k < n && c->kv_tokens[k] == ids[k]) k++;
    return k;
}

static cn_status copy_result(cn_gen *g, int32_t n_prompt, const cn_beam_result *beam, const cn_spec_stats *spec,
                             cn_result *out, cn_error *err) {
    size_t n_text = 0;
    const char *text = cn_gen_text(g, &n_text);
    int32_t n_tok = 0;
    const cn_gen_token *info = cn_gen_token_info(g, &n_tok);
    out->text = malloc(n_text + 1);
    out->tokens = malloc((size_t)CN_MAX(n_tok, 1) * sizeof *out->tokens);
    if (!out->text || !out->tokens) {
        cn_result_free(out);
        return cn_err(err, CN_STATUS_NO_MEMORY, "generate: out of memory for the result");
    }
    memcpy(out->text, text, n_text);
    out->text[n_text] = 0;
    out->n_text = n_text;
    if (n_tok) memcpy(out->tokens, info, (size_t)n_tok * sizeof *out->tokens);
    out->n_tokens = n_tok;
    out->n_prompt_tokens = n_prompt;
    out->finish_reason = cn_gen_finish_reason(g);
    out->stop_index = cn_gen_stop_index(g);
    out->seed = cn_sampler_seed(cn_gen_sampler(g));
    cn_gen_get_timings(g, &out->timings);
    if (beam) {
        out->beam_score = beam->score;
        out->beam_sum_logprob = beam->sum_logprob;
        out->beam_n_finished = beam->n_finished;
    }
    if (spec) {
        out->spec_target_passes = spec->steps;
        out->spec_drafted = spec->drafted;
        out->spec_accepted = spec->accepted;
        out->spec_plain_passes = spec->plain_steps;
        out->spec_draft_passes = spec->draft_evals;
    }
    return CN_STATUS_OK;
}

/* Adds the chat end of turn as a stop string (a copy of gen with its own stop array). */
static cn_status with_eot_stop(const cn_gen_params *gen, const char *eot, cn_gen_params *out, const char **stops,
                               cn_error *err) {
    *out = *gen;
    if (!eot) return CN_STATUS_OK;
    if (gen->n_stop < 0 || gen->n_stop >= CN_GEN_MAX_STOP)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "generate: n_stop = %d leaves no room for the chat template's end of turn (at most %d)",
                      gen->n_stop, CN_GEN_MAX_STOP - 1);
    for (int32_t i = 0; i < gen->n_stop; i++) stops[i] = gen->stop[i];
    stops[gen->n_stop] = eot;
    out->stop = stops;
    out->n_stop = gen->n_stop + 1;
    return CN_STATUS_OK;
}

cn_status cn_context_generate(cn_context *c, const cn_prompt *prompt, const cn_gen_params *gen, cn_result *out,
                              cn_error *err) {
    memset(out, 0, sizeof *out);
    if (!gen) return cn_err(err, CN_STATUS_INVALID_ARG, "generate: no gen params");
    int32_t *ids = NULL, n = 0;
    const char *eot = NULL;
    cn_status st = prompt_ids(c, prompt, &ids, &n, &eot, err);
    if (st != CN_STATUS_OK) return st;
    if (n >= c->n_ctx) {
        free(ids);
        return cn_err(err, CN_STATUS_LIMIT,
                      "generate: the prompt is %d tokens and the context holds %d: no room to "
                      "generate",
                      n, c->n_ctx);
    }
    cn_gen_params gp;
    const char *stops[CN_GEN_MAX_STOP];
    st = with_eot_stop(gen, eot, &gp, stops, err);
    const int32_t k = gp.beam.n_beams;
    if (st == CN_STATUS_OK && gp.draft && !c->draft_fwd)
        st = cn_err_param(err, CN_STATUS_INVALID_ARG, "draft",
                          "generate: draft is set but the context has no draft "
                          "model (cn_context_params.draft)");
    if (st == CN_STATUS_OK && k > 1 && k > c->kv_seqs && k <= CN_GEN_MAX_BEAMS) st = make_kv(c, k, err);
    cn_gen *g = NULL;
    if (st == CN_STATUS_OK) st = cn_gen_create(c->tok, c->n_vocab, &gp, &g, err);
    if (st != CN_STATUS_OK) {
        free(ids);
        return st;
    }
    const cn_gen_runner run = {c->m, c->fwd, c->kv, CN_MAX(c->p.n_batch, k)};
    cn_beam_result beam;
    cn_spec_stats spec = {0};
    const bool speculate = gp.draft || gp.lookup_n > 0;
    if (k > 1) {
        c->n_kv = 0;
        st = cn_beam_search(&run, 0, ids, n, g, &beam, err);
    } else {
        const int32_t reuse = common_prefix(c, ids, n);
        c->n_kv = 0; /* unknown until it succeeds */
        const cn_gen_runner draft = {c->p.draft, c->draft_fwd, c->draft_kv, run.n_batch};
        cn_spec_params sp = cn_spec_default_params();
        sp.draft = gp.draft ? &draft : NULL;
        sp.lookup_n = gp.draft ? 0 : gp.lookup_n;
        sp.n_draft_max = gp.max_draft;
        st = speculate ? cn_generate_spec(&run, &sp, 0, ids, n, reuse, g, &spec, err)
                       : cn_generate(&run, 0, ids, n, reuse, g, err);
        if (st == CN_STATUS_OK) { /* what sequence 0 holds now: the prompt, then the reply fed back */
            int32_t n_gen = 0;
            const int32_t *gt = cn_gen_tokens(g, &n_gen);
            const int64_t held = CN_MIN(cn_kv_seq_len(c->kv, 0), (int64_t)c->n_ctx);
            for (int64_t i = 0; i < held; i++) c->kv_tokens[i] = i < n ? ids[i] : gt[i - n];
            c->n_kv = held;
        }
    }
    if (st == CN_STATUS_OK) st = copy_result(g, n, k > 1 ? &beam : NULL, speculate ? &spec : NULL, out, err);
    cn_gen_free(g);
    free(ids);
    return st;
}

void cn_result_free(cn_result *r) {
    if (!r) return;
    free(r->text);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

cn_status cn_context_logits(cn_context *c, const cn_prompt *prompt, float *logits, cn_error *err) {
    int32_t *ids = NULL, n = 0;
    const char *eot = NULL;
    cn_status st = prompt_ids(c, prompt, &ids, &n, &eot, err);
    if (st != CN_STATUS_OK) return st;
    if (n > c->n_ctx) {
        free(ids);
        return cn_err(err, CN_STATUS_LIMIT, "logits: the prompt is %d tokens and the context holds %d", n, c->n_ctx);
    }
    const cn_gen_runner run = {c->m, c->fwd, c->kv, c->p.n_batch};
    int32_t reuse = common_prefix(c, ids, n);
    if (reuse == n) reuse = n - 1; /* the last token is run again for its logits */
    c->n_kv = 0;
    cn_kv_seq_truncate(c->kv, 0, reuse);
    st = cn_gen_prefill(&run, 0, ids, n, reuse, logits, err);
    if (st == CN_STATUS_OK) {
        memcpy(c->kv_tokens, ids, (size_t)n * sizeof *ids);
        c->n_kv = n;
    }
    free(ids);
    return st;
}

/* ---- the low tier ---- */

cn_status cn_context_decode(cn_context *c, const cn_batch *b, cn_error *err) {
    if (!c || !b) return cn_err(err, CN_STATUS_INVALID_ARG, "decode: no context or no batch");
    c->n_kv = 0; /* sequence 0 no longer holds a request generate knows */
    c->n_logits = 0;
    const int32_t nl = cn_batch_n_logits(b);
    if (nl > c->logits_cap) {
        float *l = realloc(c->logits, (size_t)nl * (size_t)c->n_vocab * sizeof *l);
        if (!l) return cn_err(err, CN_STATUS_NO_MEMORY, "decode: out of memory for %d logits rows", nl);
        c->logits = l;
        c->logits_cap = nl;
    }
    const cn_status st = cn_forward(c->m, c->fwd, b, c->kv, c->logits, err);
    if (st == CN_STATUS_OK) c->n_logits = nl;
    return st;
}

void cn_context_profile(cn_context *c, bool on) {
    if (c) (void)cn_fwd_profile(c->fwd, on); /* out of memory: it stays off */
}

int32_t cn_context_profile_read(const cn_context *c, cn_profile_op *out, int32_t max) {
    return c && (out || max == 0) ? cn_fwd_profile_read(c->fwd, out, max) : 0;
}

void cn_context_observe_matmuls(cn_context *c, cn_matmul_observer fn, void *user) {
    if (c) cn_fwd_observe(c->fwd, fn, user);
}

const float *cn_context_logits_row(const cn_context *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits) return NULL;
    return c->logits + (size_t)i * (size_t)c->n_vocab;
}

int32_t cn_context_n_vocab(const cn_context *c) { return c->n_vocab; }

static bool seq_ok(const cn_context *c, int32_t seq) { return seq >= 0 && seq < c->kv_seqs; }

int64_t cn_context_seq_len(const cn_context *c, int32_t seq) {
    return c && seq_ok(c, seq) ? cn_kv_seq_len(c->kv, seq) : 0;
}

cn_status cn_context_seq_rm(cn_context *c, int32_t seq, int64_t p0, cn_error *err) {
    if (!seq_ok(c, seq))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "seq", "seq_rm: sequence %d outside [0, %d)", seq, c->kv_seqs);
    if (p0 < 0) return cn_err_param(err, CN_STATUS_INVALID_ARG, "p0", "seq_rm: p0 = %lld is negative", (long long)p0);
    if (seq == 0 && p0 < c->n_kv) c->n_kv = p0;
    if (p0 == 0) cn_kv_seq_free(c->kv, seq);
    else if (p0 < cn_kv_seq_len(c->kv, seq)) cn_kv_seq_truncate(c->kv, seq, p0);
    return CN_STATUS_OK;
}

cn_status cn_context_seq_cp(cn_context *c, int32_t src, int32_t dst, int64_t n, cn_error *err) {
    if (!seq_ok(c, src) || !seq_ok(c, dst) || src == dst)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "seq", "seq_cp: sequences %d -> %d (each in [0, %d), distinct)",
                            src, dst, c->kv_seqs);
    const int64_t len = cn_kv_seq_len(c->kv, src);
    if (n < -1 || n > len)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n", "seq_cp: n = %lld, and sequence %d holds %lld",
                            (long long)n, src, (long long)len);
    if (dst == 0) c->n_kv = 0;
    cn_kv_seq_free(c->kv, dst);
    const cn_status st = cn_kv_seq_fork(c->kv, src, dst, err);
    if (st == CN_STATUS_OK && n >= 0 && n < len) cn_kv_seq_truncate(c->kv, dst, n);
    return st;
}

void cn_context_seq_keep(cn_context *c, int32_t seq) {
    for (int32_t s = 0; s < c->kv_seqs; s++)
        if (s != seq) {
            if (s == 0) c->n_kv = 0;
            cn_kv_seq_free(c->kv, s);
        }
}

/* ---- for bindings ---- */

size_t cn_abi_size(const char *type_name) {
    /* clang-format off */
#define ABI(T) {#T, sizeof(T)}
    /* clang-format on */
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        ABI(cn_error),           ABI(cn_logit_bias),     ABI(cn_sampling_params),  ABI(cn_beam_params),
        ABI(cn_gen_params),      ABI(cn_gen_logprob),    ABI(cn_gen_token),        ABI(cn_gen_timings),
        ABI(cn_model_params),    ABI(cn_model_info),     ABI(cn_chat_msg),         ABI(cn_context_params),
        ABI(cn_prompt),          ABI(cn_result),         ABI(cn_candidate),        ABI(cn_explain_result),
        ABI(cn_engine_params),   ABI(cn_engine_request), ABI(cn_engine_callbacks), ABI(cn_engine_stats),
        ABI(cn_batch_row),       ABI(cn_batch),          ABI(cn_grammar_params),   ABI(cn_chat_turn),
        ABI(cn_chat_turn_info),  ABI(cn_tool_event),     ABI(cn_fim_chunk),        ABI(cn_fim_params),
        ABI(cn_embedder_params),
    };
#undef ABI
    for (size_t i = 0; type_name && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(type_name, types[i].name)) return types[i].size;
    return 0;
}

/* ---- explain ---- */

typedef struct {
    cn_explain_fn fn;
    void *user;
    cn_candidate *sorted; /* (n_vocab) */
} explain_obs;

static void explain_stage(void *user, cn_sampler_stage stage, const cn_candidate *cand, size_t n) {
    explain_obs *x = user;
    const size_t m = cn_cands_top(cand, n, n, x->sorted);
    x->fn(x->user, stage, x->sorted, m);
}

cn_status cn_explain(const float *logits, int32_t n_vocab, const cn_sampling_params *p, const int32_t *history,
                     size_t n_history, cn_explain_fn on_stage, void *user, cn_explain_result *out, cn_error *err) {
    memset(out, 0, sizeof *out);
    if (!logits || !p || n_vocab < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "explain: no logits, or n_vocab = %d < 1", n_vocab);
    cn_sampler *s = NULL;
    cn_status st = cn_sampler_create(p, n_vocab, &s, err);
    if (st == CN_STATUS_OK) st = cn_sampler_greedy(p, logits, n_vocab, history, n_history, &out->greedy, err);
    explain_obs x = {on_stage, user, NULL};
    if (st == CN_STATUS_OK && on_stage) {
        if (!(x.sorted = malloc((size_t)n_vocab * sizeof *x.sorted)))
            st = cn_err(err, CN_STATUS_NO_MEMORY, "explain: out of memory");
        else cn_sampler_set_observer(s, explain_stage, &x);
    }
    cn_sample_info info;
    if (st == CN_STATUS_OK) st = cn_sampler_sample(s, logits, n_vocab, history, n_history, &out->token, &info, err);
    if (st == CN_STATUS_OK) {
        out->p = info.p;
        out->n_kept = info.n_kept;
        out->u = info.u;
        out->seed = cn_sampler_seed(s);
    }
    free(x.sorted);
    cn_sampler_free(s);
    return st;
}
