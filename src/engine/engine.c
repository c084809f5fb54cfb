/* engine.c — the batched engine: requests, one generation state (cn_gen) per completion,
 * the scheduler (sched.c) and one forward pass per step.
 *
 * A request of n completions is n scheduled sequences. The first carries the prompt
 * through prefill; when its prompt's logits arrive the other n - 1 fork its KV blocks
 * (no copy) and every completion samples its first token from that same row with its
 * own seeded sampler. From then on each completion is an independent sequence: its
 * sampled tokens are appended to its token list and computed by the next step.
 *
 * Why results do not depend on the batch: the forward pass computes each row the same
 * way whatever else is in the batch, every completion has its own sampler whose k-th
 * draw is used for its k-th token, and a token, once sampled, is never sampled again
 * (a preempted sequence recomputes only K/V). So what a request sees is a function of
 * its prompt, parameters and seed alone.
 *
 * Speculation (a request's lookup_n or the draft model): before a step, each decoding
 * completion that opted in may get guesses for its next tokens (spec_plan.c decides how
 * many); the scheduler gives them rows after the decode row, and the rows' logits go
 * through the completion's sampler in order for as long as the token chosen is the one
 * guessed (the rule of gen/spec.h, so the tokens are those made without it).
 *
 * Grammars (cn_gen_params.grammar): each completion's cn_gen owns a matcher of its own
 * (which holds a reference to the grammar for as long as the request lives), so n > 1
 * completions are constrained independently and the other requests of a step not at
 * all. A guessed row is masked by the matcher advanced along the guesses confirmed
 * before it (they are pushed in order); the guesses themselves are made under the
 * grammar and rolled back before the step (spec_plan.c).
 *
 * Concurrency (see the engine section of cinder.h): one recursive lock held for a whole
 * step, so callbacks may call back into the engine. A cancel that arrives during a step
 * (from a callback) is recorded and carried out when the callback returns, before the
 * step ends; requests that finish are freed at the end of the step, so nothing the step
 * still iterates over disappears under it. */
#include "engine/engine.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"
#include "gen/generate.h"
#include "gen/spec.h"
#include "model/model.h"
#include "engine/sched.h"
#include "text/chat.h"

#include "engine/engine_impl.h"
#include "engine/spec_plan.h"

cn_engine_params cn_engine_default_params(void) {
    cn_engine_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 1;
    p.kv_mem_mib = 0;
    p.kv_tokens = 4096;
    p.kv_type = CN_TYPE_F16;
    p.block_tokens = CN_KV_BLOCK_TOKENS_DEFAULT;
    p.max_running = 16;
    p.step_tokens = 512;
    p.max_queue = 256;
    p.n_ctx = 0;
    p.prefix_cache = true;
    return p;
}

cn_engine_request cn_engine_request_default_params(void) {
    cn_engine_request r;
    memset(&r, 0, sizeof r);
    r.gen = cn_gen_default_params();
    r.n = 1;
    return r;
}

const cn_tokenizer *cn_engine_tokenizer(const cn_engine *e) { return e->tok; }
const cn_chat_template *cn_engine_chat_template(const cn_engine *e) { return e->chat; }
const char *cn_engine_end_of_turn_stop(const cn_engine *e) { return e->eot_stop; }
const cn_kv *cn_engine_kv(const cn_engine *e) { return e->kv; }
const cn_kv *cn_engine_draft_kv(const cn_engine *e) { return e->dkv; }
int32_t cn_engine_n_ctx(const cn_engine *e) { return e->n_ctx; }
int32_t cn_engine_n_vocab(const cn_engine *e) { return e->n_vocab; }
int32_t cn_engine_max_running(const cn_engine *e) { return e->p.max_running; }
bool cn_engine_has_draft(const cn_engine *e) { return e->dfwd != NULL; }

/* ---- create / free ---- */

static cn_status check_params(const cn_engine_params *p, cn_error *err) {
    if (cn_threads_check(p->n_threads, "engine", err) != CN_STATUS_OK) return CN_STATUS_INVALID_ARG;
    if (p->kv_mem_mib < 0 || p->kv_mem_mib > (1 << 20))
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: kv_mem_mib = %lld is out of range [0, 2^20]",
                      (long long)p->kv_mem_mib);
    if (p->kv_mem_mib == 0 && (p->kv_tokens < 1 || p->kv_tokens > ((int64_t)1 << 32)))
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "engine: kv_tokens = %lld is out of range [1, 2^32] (or set kv_mem_mib)",
                      (long long)p->kv_tokens);
    if (p->kv_type != CN_TYPE_F16 && p->kv_type != CN_TYPE_Q8_0 && p->kv_type != CN_TYPE_F32)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: kv_type %d is not f16, q8_0 or f32", (int)p->kv_type);
    if (p->block_tokens < 1 || p->block_tokens > CN_KV_MAX_BLOCK_TOKENS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: block_tokens = %d is out of range [1, %d]", p->block_tokens,
                      CN_KV_MAX_BLOCK_TOKENS);
    if (p->max_running < 1 || p->max_running > CN_ENGINE_MAX_RUNNING)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: max_running = %d is out of range [1, %d]", p->max_running,
                      CN_ENGINE_MAX_RUNNING);
    if (p->step_tokens < p->max_running || p->step_tokens > (1 << 20))
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "engine: step_tokens = %d is out of range [max_running = %d, 2^20] (one decode row "
                      "per running sequence must fit)",
                      p->step_tokens, p->max_running);
    if (p->max_queue < 1 || p->max_queue > (1 << 24))
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: max_queue = %d is out of range [1, 2^24]", p->max_queue);
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: n_ctx = %d is out of range [0, 2^24]", p->n_ctx);
    return CN_STATUS_OK;
}

static void free_req(engine_req *r) {
    if (!r) return;
    if (r->choices)
        for (int32_t i = 0; i < r->n; i++) {
            cn_gen_free(r->choices[i].gen);
            cn_sched_seq_free(&r->choices[i].seq);
        }
    free(r->choices);
    free(r->prompt);
    free(r);
}

void cn_engine_free(cn_engine *e) {
    if (!e) return;
    cn_engine_stop(e);
    for (engine_req *r = e->reqs, *nx; r; r = nx) {
        nx = r->next;
        if (e->sched)
            for (int32_t i = 0; i < r->n; i++) cn_sched_remove(e->sched, &r->choices[i].seq);
        free_req(r);
    }
    cn_sched_free(e->sched);
    cn_fwd_free(e->dfwd);
    cn_kv_free(e->dkv);
    cn_batch_free(&e->dbatch);
    free(e->dlogits);
    free(e->downer);
    cn_fwd_free(e->fwd);
    cn_pool_free(e->pool); /* after both contexts that borrow it */
    cn_kv_free(e->kv);
    cn_chat_template_free(e->chat);
    cn_tokenizer_free(e->tok);
    cn_batch_free(&e->batch);
    free(e->logits);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* The draft model's runner: the same vocabulary, a cache with the engine's positions plus
 * room for every slot's guesses. */
static cn_status draft_create(cn_engine *e, const cn_model *dm, cn_error *err) {
    if (cn_model_hparams(dm)->n_vocab != e->n_vocab)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: the draft model has %d logits, the model %d",
                      (int)cn_model_hparams(dm)->n_vocab, (int)e->n_vocab);
    cn_tokenizer *dtok = NULL;
    cn_status st = cn_tokenizer_load(cn_model_gguf(dm), &dtok, err);
    if (st == CN_STATUS_OK) st = cn_spec_check_vocab(e->tok, dtok, err);
    cn_tokenizer_free(dtok);
    if (st != CN_STATUS_OK) return st;
    const cn_engine_params *p = &e->p;
    e->dm = dm;
    cn_kv_params kp = cn_model_kv_params(dm);
    kp.type = p->kv_type;
    kp.block_tokens = p->block_tokens;
    kp.max_seqs = p->max_running;
    const int64_t positions = e->kv_capacity + (int64_t)p->max_running * (CN_ENGINE_MAX_DRAFT + p->block_tokens);
    kp.n_blocks = CN_MIN((positions + p->block_tokens - 1) / p->block_tokens, (int64_t)INT32_MAX);
    if ((st = cn_kv_create(&kp, &e->dkv, err)) != CN_STATUS_OK) return st;
    cn_fwd_params cp = cn_fwd_default_params();
    cp.pool = e->pool;
    cp.n_batch_max = p->step_tokens;
    cp.n_ctx = e->n_ctx;
    if ((st = cn_fwd_create(dm, &cp, &e->dfwd, err)) != CN_STATUS_OK) return st;
    if ((st = cn_batch_init(&e->dbatch, p->step_tokens, err)) != CN_STATUS_OK) return st;
    e->dlogits = malloc((size_t)p->max_running * (size_t)e->n_vocab * sizeof *e->dlogits);
    e->downer = calloc((size_t)p->max_running, sizeof *e->downer);
    if (!e->dlogits || !e->downer) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for the draft model");
    return CN_STATUS_OK;
}

/* The chat template (by name, else the model's: none is no error, chat prompts are then
 * refused by whoever renders them) and the end-of-turn stop string it needs. */
static cn_status load_chat_template(cn_engine *e, const char *name, cn_error *err) {
    if (name) {
        const cn_status st = cn_chat_template_from_name(name, &e->chat, err);
        if (st != CN_STATUS_OK && err) snprintf(err->param, sizeof err->param, "chat_template"); /* keeps its message */
        if (st != CN_STATUS_OK) return st;
    } else {
        cn_error ignored = {0};
        if (cn_chat_template_for_model(cn_model_gguf(e->m), e->tok, &e->chat, &ignored) != CN_STATUS_OK) e->chat = NULL;
        if (ignored.status == CN_STATUS_NO_MEMORY) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory");
    }
    e->eot_stop = cn_chat_end_of_turn_stop(e->chat, e->tok);
    return CN_STATUS_OK;
}

cn_status cn_engine_create(const cn_model *m, const cn_engine_params *p, cn_engine **out, cn_error *err) {
    *out = NULL;
    if (!m || !p) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: no model or no params");
    cn_status st = check_params(p, err);
    if (st != CN_STATUS_OK) return st;
    cn_engine *e = calloc(1, sizeof *e);
    if (!e) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&e->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&e->cv, NULL);
    e->m = m;
    e->p = *p;
    e->p.n_threads = cn_threads_resolve(p->n_threads);
    e->next_id = 1;
    const cn_hparams *hp = cn_model_hparams(m);
    e->n_vocab = hp->n_vocab;

    cn_kv_params kp = cn_model_kv_params(m);
    kp.type = p->kv_type;
    kp.block_tokens = p->block_tokens;
    kp.max_seqs = p->max_running;
    if (p->kv_mem_mib > 0) {
        kp.n_blocks = cn_kv_blocks_for_bytes(&kp, (uint64_t)p->kv_mem_mib << 20);
        if (kp.n_blocks < 1) {
            st = cn_err(err, CN_STATUS_LIMIT, "engine: a KV budget of %lld MiB holds no block of %llu bytes",
                        (long long)p->kv_mem_mib, (unsigned long long)cn_kv_block_bytes(&kp));
            goto fail;
        }
    } else {
        kp.n_blocks = (p->kv_tokens + p->block_tokens - 1) / p->block_tokens;
    }
    if (kp.n_blocks > INT32_MAX) kp.n_blocks = INT32_MAX;
    if ((st = cn_kv_create(&kp, &e->kv, err)) != CN_STATUS_OK) goto fail;
    e->kv_capacity = kp.n_blocks * kp.block_tokens;
    int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    e->n_ctx = (int32_t)CN_MIN(n_ctx, CN_MIN(e->kv_capacity, (int64_t)1 << 24));
    if (e->n_ctx < 2) {
        st = cn_err(err, CN_STATUS_LIMIT, "engine: the context holds %d positions (KV budget %lld tokens)", e->n_ctx,
                    (long long)e->kv_capacity);
        goto fail;
    }

    /* one pool for the target and the draft model: their passes never run at once */
    if ((st = cn_pool_create(e->p.n_threads, &e->pool, err)) != CN_STATUS_OK) goto fail;
    cn_fwd_params cp = cn_fwd_default_params();
    cp.pool = e->pool;
    cp.n_batch_max = p->step_tokens;
    cp.n_ctx = e->n_ctx;
    if ((st = cn_fwd_create(m, &cp, &e->fwd, err)) != CN_STATUS_OK) goto fail;
    cn_sched_params sp = {
        .max_running = p->max_running, .step_tokens = p->step_tokens, .prefix_cache = p->prefix_cache};
    if ((st = cn_sched_create(&sp, e->kv, &e->sched, err)) != CN_STATUS_OK) goto fail;
    if ((st = cn_batch_init(&e->batch, p->step_tokens, err)) != CN_STATUS_OK) goto fail;
    e->n_logit_rows = p->max_running;
    e->logits = malloc((size_t)p->max_running * (size_t)e->n_vocab * sizeof(float));
    if (!e->logits) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for %d logits rows", p->max_running);
        goto fail;
    }
    if ((st = cn_tokenizer_load(cn_model_gguf(m), &e->tok, err)) != CN_STATUS_OK) goto fail;
    if ((st = load_chat_template(e, p->chat_template, err)) != CN_STATUS_OK) goto fail;
    e->p.chat_template = NULL; /* borrowed during create only */
    if (p->draft && (st = draft_create(e, p->draft, err)) != CN_STATUS_OK) goto fail;
    *out = e;
    return CN_STATUS_OK;
fail:
    cn_engine_free(e);
    return st;
}

/* ---- callbacks from the generation states ---- */

static void on_text(void *user, const char *text, size_t n_bytes) {
    engine_choice *c = user;
    if (c->req->cb.on_text) c->req->cb.on_text(c->req->cb.user, c->req->id, c->index, text, n_bytes);
}

static void on_token(void *user, const cn_gen_token *tok) {
    engine_choice *c = user;
    if (c->req->cb.on_token) c->req->cb.on_token(c->req->cb.user, c->req->id, c->index, tok);
}

/* ---- submit ---- */

static cn_status prompt_tokens(cn_engine *e, const cn_engine_request *r, engine_req *q, cn_error *err) {
    if (r->prompt) {
        const size_t len = strlen(r->prompt);
        size_t n = 0;
        cn_status st = cn_tokenize(e->tok, r->prompt, len, true, true, NULL, 0, &n, err);
        if (st != CN_STATUS_OK) return st;
        if (n == 0) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: the prompt is empty (no tokens)");
        if (n >= (size_t)e->n_ctx)
            return cn_err(err, CN_STATUS_LIMIT, "engine: the prompt is %zu tokens, the context holds %d", n, e->n_ctx);
        q->prompt = malloc(n * sizeof *q->prompt);
        if (!q->prompt) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for the prompt");
        size_t n2 = 0;
        st = cn_tokenize(e->tok, r->prompt, len, true, true, q->prompt, n, &n2, err);
        if (st != CN_STATUS_OK) return st;
        q->n_prompt = (int32_t)n;
        return CN_STATUS_OK;
    }
    if (!r->prompt_tokens || r->n_prompt_tokens < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: the request has no prompt (text or tokens)");
    if (r->n_prompt_tokens >= e->n_ctx)
        return cn_err(err, CN_STATUS_LIMIT, "engine: the prompt is %d tokens, the context holds %d", r->n_prompt_tokens,
                      e->n_ctx);
    for (int32_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] < 0 || r->prompt_tokens[i] >= e->n_vocab)
            return cn_err(err, CN_STATUS_INVALID_ARG, "engine: prompt token %d is %d, outside the vocabulary [0, %d)",
                          i, r->prompt_tokens[i], e->n_vocab);
    q->prompt = malloc((size_t)r->n_prompt_tokens * sizeof *q->prompt);
    if (!q->prompt) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for the prompt");
    memcpy(q->prompt, r->prompt_tokens, (size_t)r->n_prompt_tokens * sizeof *q->prompt);
    q->n_prompt = r->n_prompt_tokens;
    return CN_STATUS_OK;
}

static cn_status build_req(cn_engine *e, const cn_engine_request *r, const cn_engine_callbacks *cb, engine_req *q,
                           cn_error *err) {
    if (r->n < 1 || r->n > CN_ENGINE_MAX_N)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: n = %d is out of range [1, %d]", r->n, CN_ENGINE_MAX_N);
    if (r->n > e->p.max_running)
        return cn_err(err, CN_STATUS_LIMIT, "engine: n = %d completions, but at most %d sequences run at once", r->n,
                      e->p.max_running);
    if (r->gen.beam.n_beams > 1)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "engine: beam search (n_beams = %d) is not supported here",
                      r->gen.beam.n_beams);
    if (r->lookup_n < 0 || r->lookup_n > 8)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: lookup_n = %d is out of range [0, 8]", r->lookup_n);
    if (r->max_draft < 0 || r->max_draft > CN_ENGINE_MAX_DRAFT)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: max_draft = %d is out of range [0, %d]", r->max_draft,
                      CN_ENGINE_MAX_DRAFT);
    if (r->draft && !e->dfwd)
        return cn_err(err, CN_STATUS_INVALID_ARG, "engine: the request asks for the draft model, the engine has none");
    cn_status st = cn_gen_validate(&r->gen, e->n_vocab, err);
    if (st != CN_STATUS_OK) return st;
    if ((st = prompt_tokens(e, r, q, err)) != CN_STATUS_OK) return st;
    q->use_draft = r->draft;
    q->lookup_n = r->draft ? 0 : r->lookup_n;
    q->max_draft = r->max_draft > 0 ? r->max_draft : 8;
    if ((int64_t)q->n_prompt + r->gen.max_tokens > e->kv_capacity)
        return cn_err(err, CN_STATUS_LIMIT,
                      "engine: prompt (%d tokens) + max_tokens (%d) can never fit the KV budget of %lld tokens",
                      q->n_prompt, r->gen.max_tokens, (long long)e->kv_capacity);
    if (cb) q->cb = *cb;
    q->n = r->n;
    q->choices = calloc((size_t)r->n, sizeof *q->choices);
    if (!q->choices) return cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for %d completions", r->n);
    uint64_t seed = r->gen.sampling.seed;
    for (int32_t i = 0; i < r->n; i++) {
        engine_choice *c = &q->choices[i];
        c->req = q;
        c->index = i;
        c->rate = cn_spec_rate_prior();
        cn_sched_seq_init(&c->seq, 0, c);
        cn_gen_params gp = r->gen;
        gp.on_text = on_text;
        gp.on_token = on_token;
        gp.should_cancel = NULL;
        gp.user = c;
        if (i > 0) gp.sampling.seed = seed + (uint64_t)i;
        /* validated above, once for every completion: only the seed and callbacks differ */
        if ((st = cn_gen_create_valid(e->tok, e->n_vocab, &gp, &c->gen, err)) != CN_STATUS_OK) return st;
        if (i == 0) seed = cn_sampler_seed(cn_gen_sampler(c->gen));
    }
    st = cn_sched_seq_append(&q->choices[0].seq, q->prompt, q->n_prompt, err);
    if (st != CN_STATUS_OK) return st;
    q->choices[0].seq.n_fork = r->n - 1;
    q->n_open = r->n;
    return CN_STATUS_OK;
}

static uint64_t choice_key(uint64_t id, int32_t index) { return id << 8 | (uint64_t)index; }

cn_status cn_engine_submit(cn_engine *e, const cn_engine_request *r, const cn_engine_callbacks *cb, uint64_t *id,
                           cn_error *err) {
    if (id) *id = 0;
    if (!e || !r) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: submit without an engine or a request");
    pthread_mutex_lock(&e->mu);
    cn_status st;
    if (e->n_queued >= e->p.max_queue) {
        st = cn_err(err, CN_STATUS_BUSY, "engine: %d requests are already waiting (max_queue): try later", e->n_queued);
        goto out;
    }
    engine_req *q = calloc(1, sizeof *q);
    if (!q) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "engine: out of memory for a request");
        goto out;
    }
    if ((st = build_req(e, r, cb, q, err)) != CN_STATUS_OK) {
        free_req(q);
        goto out;
    }
    q->id = e->next_id++;
    for (int32_t i = 0; i < q->n; i++) q->choices[i].seq.key = choice_key(q->id, i);
    cn_sched_enqueue(e->sched, &q->choices[0].seq);
    engine_req **tail = &e->reqs;
    while (*tail) tail = &(*tail)->next;
    *tail = q;
    e->n_reqs++;
    e->n_queued++;
    if (id) *id = q->id;
    pthread_cond_broadcast(&e->cv);
out:
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- finishing and cancelling ---- */

/* Completion c is over (its cn_gen is done): release its blocks, tell the caller. */
static void finish_choice(cn_engine *e, engine_choice *c) {
    if (c->done) return;
    cn_engine_draft_forget(e, c);
    cn_sched_remove(e->sched, &c->seq);
    c->done = true;
    engine_req *q = c->req;
    q->n_open--;
    cn_gen_timings t;
    cn_gen_get_timings(c->gen, &t);
    e->n_generated += t.n_generated_tokens;
    if (q->n_open == 0) {
        q->dead = true;
        if (!q->admitted) e->n_queued--;
        q->admitted = true;
    }
    if (q->cb.on_finish) q->cb.on_finish(q->cb.user, q->id, c->index, cn_gen_finish_reason(c->gen), &t);
}

static void cancel_req(cn_engine *e, engine_req *q) {
    for (int32_t i = 0; i < q->n; i++) {
        engine_choice *c = &q->choices[i];
        if (c->done) continue;
        cn_sched_remove(e->sched, &c->seq); /* blocks go back before anyone hears of it */
        cn_gen_finish(c->gen, CN_FINISH_CANCELLED);
        finish_choice(e, c);
    }
}

/* Frees requests whose completions have all finished. */
static void reap(cn_engine *e) {
    for (engine_req **pp = &e->reqs; *pp;) {
        engine_req *q = *pp;
        if (q->dead) {
            *pp = q->next;
            e->n_reqs--;
            free_req(q);
        } else {
            pp = &q->next;
        }
    }
    if (e->n_reqs == 0) pthread_cond_broadcast(&e->cv);
}

static void run_cancels(cn_engine *e) {
    for (engine_req *q = e->reqs; q; q = q->next)
        if (q->cancel_pending && !q->dead) cancel_req(e, q);
}

cn_status cn_engine_cancel(cn_engine *e, uint64_t id, cn_error *err) {
    if (!e) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: cancel without an engine");
    pthread_mutex_lock(&e->mu);
    engine_req *q = e->reqs;
    while (q && (q->id != id || q->dead || q->cancel_pending)) q = q->next;
    cn_status st = CN_STATUS_OK;
    if (!q) {
        st = cn_err(err, CN_STATUS_NOT_FOUND, "engine: no open request %llu", (unsigned long long)id);
    } else if (e->stepping) {
        q->cancel_pending = true; /* from a callback: the step carries it out next */
    } else {
        e->stepping = true; /* its callbacks may re-enter */
        cancel_req(e, q);
        run_cancels(e);
        e->stepping = false;
        reap(e);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- the step ---- */

/* Samples completion c's next token from row; ends it if done or out of context. *tok
 * (may be NULL) gets the token appended, or -1 if none was. */
static cn_status push_row(cn_engine *e, engine_choice *c, const float *row, int32_t *tok, cn_error *err) {
    if (tok) *tok = -1;
    if (c->done || c->req->cancel_pending) return CN_STATUS_OK;
    cn_gen_step step;
    cn_status st = cn_gen_push_logits(c->gen, row, &step, err);
    if (st != CN_STATUS_OK) {
        /* A row the sampler refuses (NaN, every token banned) ends this completion. */
        cn_gen_finish(c->gen, CN_FINISH_CANCELLED);
        finish_choice(e, c);
        return st;
    }
    if (!step.done) {
        /* The token is fed back at position n_tokens: there must be room for it. */
        if (c->seq.n_tokens >= e->n_ctx) {
            cn_gen_finish(c->gen, CN_FINISH_LENGTH);
        } else if ((st = cn_sched_seq_append(&c->seq, &step.token, 1, err)) != CN_STATUS_OK) {
            cn_gen_finish(c->gen, CN_FINISH_CANCELLED);
            finish_choice(e, c);
            return st;
        } else if (tok) {
            *tok = step.token;
        }
    }
    if (cn_gen_done(c->gen)) finish_choice(e, c);
    return CN_STATUS_OK;
}

/* A decode row followed by nd guessed rows: the sampler takes them in order while the
 * token it chooses is the one guessed; the scheduler keeps the confirmed positions. */
static cn_status push_guessed_rows(cn_engine *e, engine_choice *c, const float *rows, int32_t nd, cn_error *err) {
    int32_t acc = 0, tok = -1;
    cn_status st = CN_STATUS_OK;
    for (int32_t i = 0; i <= nd; i++) {
        st = push_row(e, c, rows + (size_t)i * (size_t)e->n_vocab, &tok, err);
        if (st != CN_STATUS_OK || tok < 0 || i == nd || tok != c->seq.draft[i]) break;
        acc++;
    }
    cn_sched_accept(e->sched, &c->seq, acc);
    e->n_drafted += nd;
    e->n_accepted += acc;
    e->n_spec_steps++;
    cn_spec_rate_update(&c->rate, nd, acc);
    return st;
}

/* The prompt's logits reached completion 0 of q: fork the others, then every completion
 * samples its first token from the same row. */
static cn_status prompt_done(cn_engine *e, engine_choice *c0, const float *row, cn_error *err) {
    engine_req *q = c0->req;
    cn_status first = CN_STATUS_OK;
    for (int32_t i = 1; i < q->n; i++) {
        engine_choice *c = &q->choices[i];
        if (c->done || c->seq.state != CN_SEQ_IDLE || c0->seq.n_fork < 1) continue;
        cn_status st = cn_sched_fork(e->sched, &c0->seq, &c->seq, choice_key(q->id, i), err);
        if (st != CN_STATUS_OK) {
            cn_gen_finish(c->gen, CN_FINISH_CANCELLED);
            finish_choice(e, c);
            if (first == CN_STATUS_OK) first = st;
        }
    }
    for (int32_t i = 0; i < q->n; i++) {
        cn_error e2 = {0};
        cn_status st = push_row(e, &q->choices[i], row, NULL, first == CN_STATUS_OK ? err : &e2);
        if (st != CN_STATUS_OK && first == CN_STATUS_OK) first = st;
    }
    return first;
}

static void begin_req(cn_engine *e, engine_req *q, int64_t n_reused) {
    (void)e;
    q->begun = true;
    for (int32_t i = 0; i < q->n; i++) cn_gen_begin(q->choices[i].gen, q->prompt, q->n_prompt, (int32_t)n_reused, NULL);
}

static cn_status step_locked(cn_engine *e, int32_t *n_rows, cn_error *err) {
    run_cancels(e);
    reap(e);
    cn_engine_plan_guesses(e);
    cn_sched_plan plan;
    cn_status st = cn_sched_plan_step(e->sched, &e->batch, &plan, err);
    if (st != CN_STATUS_OK) return st;
    *n_rows = e->batch.n_rows;
    if (e->batch.n_rows == 0) return CN_STATUS_OK;
    for (int32_t i = 0; i < plan.n_seqs; i++) {
        engine_choice *c = plan.seqs[i]->owner;
        engine_req *q = c->req;
        if (!q->admitted) {
            q->admitted = true;
            e->n_queued--;
        }
        if (!q->begun) begin_req(e, q, c->seq.n_reused);
    }
    cn_kv_stats ks;
    cn_kv_get_stats(e->kv, &ks);
    e->kv_peak = CN_MAX(e->kv_peak, ks.n_blocks - ks.n_free);

    const double t0 = cn_time_ms();
    st = cn_forward(e->m, e->fwd, &e->batch, e->kv, e->logits, err);
    if (st != CN_STATUS_OK) return st;
    cn_step_costs_add(&e->costs, e->batch.n_rows, cn_time_ms() - t0, e->n_steps);
    e->n_steps++;
    e->n_rows += e->batch.n_rows;
    cn_sched_commit(e->sched, &plan);

    for (int32_t i = 0; i < plan.n_seqs; i++) {
        cn_sched_seq *s = plan.seqs[i];
        if (s->plan_logits < 0) continue;
        engine_choice *c = s->owner;
        const float *row = e->logits + (size_t)s->plan_logits * (size_t)e->n_vocab;
        cn_error e2 = {0};
        /* A completion the sampler or a fork failed has been finished "cancelled"; the
         * others go on, so this is the request's trouble, not the step's. */
        cn_status rs;
        if (c->index == 0 && c->seq.n_fork > 0) rs = prompt_done(e, c, row, &e2);
        else if (s->plan_draft > 0) rs = push_guessed_rows(e, c, row, s->plan_draft, &e2);
        else rs = push_row(e, c, row, NULL, &e2);
        if (rs != CN_STATUS_OK)
            cn_log(CN_LOG_WARN, "engine: request %llu ended: %s", (unsigned long long)c->req->id, e2.msg);
        run_cancels(e);
    }
    cn_engine_draft_settle(e);
    reap(e);
    return CN_STATUS_OK;
}

cn_status cn_engine_step(cn_engine *e, int32_t *n_rows, cn_error *err) {
    int32_t rows = 0;
    if (n_rows) *n_rows = 0;
    if (!e) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: step without an engine");
    pthread_mutex_lock(&e->mu);
    cn_status st;
    if (e->stepping) {
        st = cn_err(err, CN_STATUS_INVALID_ARG, "engine: cn_engine_step called from inside a step");
    } else {
        e->stepping = true;
        st = step_locked(e, &rows, err);
        e->stepping = false;
    }
    pthread_mutex_unlock(&e->mu);
    if (n_rows) *n_rows = rows;
    return st;
}

/* ---- run loop ---- */

static void *run_loop(void *arg) {
    cn_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        if (e->n_reqs == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        cn_error err = {0};
        int32_t rows = 0;
        e->stepping = true;
        cn_status st = step_locked(e, &rows, &err);
        e->stepping = false;
        if (st != CN_STATUS_OK) {
            cn_log(CN_LOG_ERROR, "engine: step failed, cancelling every request: %s", err.msg);
            e->stepping = true;
            for (engine_req *q = e->reqs; q; q = q->next)
                if (!q->dead) cancel_req(e, q);
            e->stepping = false;
            reap(e);
        }
        /* Let waiting submitters and cancellers in between steps. */
        pthread_mutex_unlock(&e->mu);
        sched_yield();
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

cn_status cn_engine_start(cn_engine *e, cn_error *err) {
    if (!e) return cn_err(err, CN_STATUS_INVALID_ARG, "engine: start without an engine");
    pthread_mutex_lock(&e->mu);
    cn_status st = CN_STATUS_OK;
    if (e->thread_started) {
        st = cn_err(err, CN_STATUS_INVALID_ARG, "engine: the run loop is already started");
    } else {
        e->stop = false;
        if (pthread_create(&e->thread, NULL, run_loop, e) != 0)
            st = cn_err(err, CN_STATUS_NO_MEMORY, "engine: cannot start the run loop thread");
        else e->thread_started = true;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void cn_engine_stop(cn_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    const bool started = e->thread_started;
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (started) pthread_join(e->thread, NULL);
    pthread_mutex_lock(&e->mu);
    e->thread_started = false;
    e->stop = false;
    pthread_mutex_unlock(&e->mu);
}

void cn_engine_wait_idle(cn_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    while (e->thread_started && e->n_reqs > 0) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

/* ---- stats ---- */

void cn_engine_get_stats(cn_engine *e, cn_engine_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    cn_sched_stats ss;
    cn_sched_get_stats(e->sched, &ss);
    cn_kv_stats ks;
    cn_kv_get_stats(e->kv, &ks);
    out->n_requests = e->n_reqs;
    out->n_running = ss.n_running;
    out->n_waiting = ss.n_waiting;
    out->kv_blocks_total = ks.n_blocks;
    out->kv_blocks_free = ks.n_free;
    out->kv_blocks_used = ks.n_blocks - ks.n_free;
    out->kv_blocks_cached = ks.n_cached;
    out->kv_blocks_peak = e->kv_peak;
    out->kv_block_tokens = cn_kv_params_of(e->kv)->block_tokens;
    out->kv_block_bytes = cn_kv_block_bytes(cn_kv_params_of(e->kv));
    out->prefix_queried_blocks = ks.n_prefix_queried;
    out->prefix_hit_blocks = ks.n_prefix_hits;
    out->n_preemptions = ss.n_preemptions;
    out->n_steps = e->n_steps;
    out->n_rows = e->n_rows;
    out->n_generated = e->n_generated;
    out->n_drafted = e->n_drafted;
    out->n_accepted = e->n_accepted;
    out->n_spec_steps = e->n_spec_steps;
    out->n_draft_passes = e->n_draft_passes;
    pthread_mutex_unlock(&e->mu);
}
