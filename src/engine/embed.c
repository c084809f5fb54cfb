/* embed.c — embeddings: inputs packed into forward passes (one sequence each), their
 * final hidden states pooled (mean, first token, last token) and L2-normalized.
 *
 * Why beside the scheduler and not in it: an embedding is one prefill with no sampling
 * and no cache that outlives it, so the scheduler (admission, chunked prefill that splits
 * a prompt across steps, preemption, the prefix cache, decode rows) would only get in the
 * way, and pooling over a prompt split across steps would need state the engine does not
 * keep. Here a call packs whole inputs, in order, into passes of at most n_batch tokens
 * and max_seqs inputs, runs cn_forward_embd with every row wanting its hidden state,
 * pools each input's rows, and empties the cache. Each input's rows attend only to its
 * own sequence, so a vector does not depend on what it was packed with (rows are
 * computed with the batch-invariant kernels).
 *
 * Threads and locking: a standalone embedder (cn_embedder_create) has a pool of its own
 * and a lock of its own; an engine's (cn_engine_embedder) runs on the engine's pool and
 * borrows its tokenizer, and takes the engine's lock, which the engine holds for a whole
 * step: the pool is not reentrant, so each pass runs between two steps and generation
 * and embeddings interleave pass by pass. Either way the lock is held for one pass (the
 * pass's buffers are filled, pooled into the caller's output and the cache emptied
 * before it is let go), so concurrent calls interleave pass by pass too. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "core/pool.h"
#include "engine/engine_impl.h"
#include "model/model.h"

struct cn_embedder {
    const cn_model *m;
    cn_embedder_params p;
    cn_tokenizer *tok;      /* owned, or the engine's */
    cn_engine *engine;      /* borrowed: its pool and lock; NULL when standalone */
    pthread_mutex_t own_mu; /* standalone: the lock */
    pthread_mutex_t *mu;    /* own_mu, or the engine's */
    cn_fwd *fwd;
    cn_kv *kv;
    cn_batch batch;
    float *hidden; /* (n_batch, n_embd) one pass's hidden states */
    int32_t n_embd, n_vocab;
};

static const char *const POOL_NAMES[] = {"none", "mean", "cls", "last"};

const char *cn_pooling_name(cn_pooling p) {
    if (p == CN_POOLING_DEFAULT) return "default";
    return (int)p >= 0 && (int)p < (int)CN_ARRAY_LEN(POOL_NAMES) ? POOL_NAMES[p] : NULL;
}

cn_status cn_pooling_from_name(const char *name, cn_pooling *out, cn_error *err) {
    for (int i = 0; name && i < (int)CN_ARRAY_LEN(POOL_NAMES); i++)
        if (!strcasecmp(name, POOL_NAMES[i])) {
            *out = (cn_pooling)i;
            return CN_STATUS_OK;
        }
    return cn_err_param(err, CN_STATUS_INVALID_ARG, "pooling", "pooling '%.40s': must be mean, cls, last or none",
                        name ? name : "(null)");
}

cn_status cn_embd_pool(const float *h, int32_t n_rows, int32_t n_embd, cn_pooling p, bool normalize, float *out,
                       cn_error *err) {
    if (!h || !out || n_rows < 1 || n_embd < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "embd_pool: %d rows of %d floats", n_rows, n_embd);
    if (p == CN_POOLING_MEAN) {
        for (int32_t j = 0; j < n_embd; j++) {
            double s = 0;
            for (int32_t r = 0; r < n_rows; r++) s += h[(int64_t)r * n_embd + j];
            out[j] = (float)(s / n_rows);
        }
    } else if (p == CN_POOLING_CLS || p == CN_POOLING_LAST) {
        const int64_t r = p == CN_POOLING_CLS ? 0 : n_rows - 1;
        memcpy(out, h + r * n_embd, (size_t)n_embd * sizeof *out);
    } else {
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "pooling", "embd_pool: pooling %d is not mean, cls or last",
                            (int)p);
    }
    if (normalize) {
        double ss = 0;
        for (int32_t j = 0; j < n_embd; j++) ss += (double)out[j] * out[j];
        const double norm = sqrt(ss);
        if (norm > 0)
            for (int32_t j = 0; j < n_embd; j++) out[j] = (float)(out[j] / norm);
    }
    return CN_STATUS_OK;
}

cn_embedder_params cn_embedder_default_params(void) {
    return (cn_embedder_params){
        .n_threads = 0, .n_batch = 512, .max_seqs = 64, .pooling = CN_POOLING_DEFAULT, .normalize = true};
}

/* <arch>.pooling_type: mean, cls or last; anything else (none, rank, absent) is last. */
static cn_pooling model_pooling(const cn_model *m) {
    cn_model_info info;
    cn_model_get_info(m, &info);
    char key[64];
    snprintf(key, sizeof key, "%s.pooling_type", info.arch);
    int64_t v = -1;
    if (cn_model_meta_int(m, key, &v) && v >= CN_POOLING_MEAN && v <= CN_POOLING_LAST) return (cn_pooling)v;
    return CN_POOLING_LAST;
}

void cn_embedder_free(cn_embedder *e) {
    if (!e) return;
    cn_batch_free(&e->batch);
    free(e->hidden);
    cn_kv_free(e->kv);
    cn_fwd_free(e->fwd);
    if (!e->engine) {
        cn_tokenizer_free(e->tok);
        pthread_mutex_destroy(&e->own_mu);
    }
    free(e);
}

/* Every parameter but n_threads (an engine's embedder runs on the engine's threads). */
static cn_status check_params(const cn_embedder_params *p, cn_error *err) {
    if (p->n_batch < 8 || p->n_batch > 65536)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_batch", "embedder: n_batch = %d is out of range [8, 65536]",
                            p->n_batch);
    if (p->max_seqs < 1 || p->max_seqs > 256)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "max_seqs", "embedder: max_seqs = %d is out of range [1, 256]",
                            p->max_seqs);
    if (p->pooling != CN_POOLING_DEFAULT && (p->pooling < CN_POOLING_MEAN || p->pooling > CN_POOLING_LAST))
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "pooling",
                            "embedder: pooling %s gives a vector per token: choose mean, cls or last",
                            cn_pooling_name(p->pooling) ? cn_pooling_name(p->pooling) : "(unknown)");
    return CN_STATUS_OK;
}

/* An embedder of m with p (checked), its n_threads left as they are. */
static cn_embedder *embedder_new(const cn_model *m, const cn_embedder_params *p) {
    cn_embedder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->m = m;
    e->p = *p;
    if (e->p.pooling == CN_POOLING_DEFAULT) e->p.pooling = model_pooling(m);
    const cn_hparams *hp = cn_model_hparams(m);
    e->n_embd = hp->n_embd;
    e->n_vocab = hp->n_vocab;
    return e;
}

cn_status cn_embedder_create(const cn_model *m, const cn_embedder_params *p, cn_embedder **out, cn_error *err) {
    *out = NULL;
    const cn_embedder_params d = cn_embedder_default_params();
    if (!p) p = &d;
    if (!m) return cn_err(err, CN_STATUS_INVALID_ARG, "embedder: no model");
    if (cn_threads_check(p->n_threads, "embedder", err) != CN_STATUS_OK) return CN_STATUS_INVALID_ARG;
    cn_status st = check_params(p, err);
    if (st != CN_STATUS_OK) return st;
    cn_embedder *e = embedder_new(m, p);
    if (!e) return cn_err(err, CN_STATUS_NO_MEMORY, "embedder: out of memory");
    pthread_mutex_init(&e->own_mu, NULL);
    e->mu = &e->own_mu;
    e->p.n_threads = cn_threads_resolve(p->n_threads);
    if ((st = cn_tokenizer_from_model(m, &e->tok, err)) != CN_STATUS_OK) {
        cn_embedder_free(e);
        return st;
    }
    *out = e;
    return CN_STATUS_OK;
}

cn_status cn_engine_embedder(cn_engine *eng, const cn_embedder_params *p, cn_embedder **out, cn_error *err) {
    *out = NULL;
    const cn_embedder_params d = cn_embedder_default_params();
    if (!p) p = &d;
    if (!eng) return cn_err(err, CN_STATUS_INVALID_ARG, "embedder: no engine");
    const cn_status st = check_params(p, err);
    if (st != CN_STATUS_OK) return st;
    cn_embedder *e = embedder_new(eng->m, p);
    if (!e) return cn_err(err, CN_STATUS_NO_MEMORY, "embedder: out of memory");
    e->engine = eng;
    e->mu = &eng->mu;
    e->p.n_threads = cn_pool_size(eng->pool);
    e->tok = eng->tok;
    *out = e;
    return CN_STATUS_OK;
}

int32_t cn_embedder_n_embd(const cn_embedder *e) { return e->n_embd; }
int32_t cn_embedder_n_batch(const cn_embedder *e) { return e->p.n_batch; }
cn_pooling cn_embedder_pooling(const cn_embedder *e) { return e->p.pooling; }
const cn_tokenizer *cn_embedder_tokenizer(const cn_embedder *e) { return e->tok; }

/* The pass's scratch, cache, batch and hidden rows, made by the first embed (lock held):
 * a server that loads a model for chat pays nothing for embeddings it is never asked
 * for. On failure nothing is kept, so a later call tries again. */
static cn_status ensure_pass(cn_embedder *e, cn_error *err) {
    if (e->hidden) return CN_STATUS_OK;
    cn_fwd_params cp = cn_fwd_default_params();
    cp.n_threads = e->p.n_threads;
    cp.pool = e->engine ? e->engine->pool : NULL;
    cp.n_batch_max = e->p.n_batch;
    cp.n_ctx = e->p.n_batch;
    cn_status st = cn_fwd_create(e->m, &cp, &e->fwd, err);
    if (st == CN_STATUS_OK) {
        cn_kv_params kp = cn_model_kv_params(e->m);
        kp.max_seqs = e->p.max_seqs;
        /* one pass: its tokens, plus a partly filled block per sequence */
        kp.n_blocks = (e->p.n_batch + kp.block_tokens - 1) / kp.block_tokens + e->p.max_seqs;
        st = cn_kv_create(&kp, &e->kv, err);
    }
    if (st == CN_STATUS_OK) st = cn_batch_init(&e->batch, e->p.n_batch, err);
    if (st == CN_STATUS_OK && !(e->hidden = malloc((size_t)e->p.n_batch * (size_t)e->n_embd * sizeof(float))))
        st = cn_err(err, CN_STATUS_NO_MEMORY, "embedder: out of memory");
    if (st != CN_STATUS_OK) {
        cn_batch_free(&e->batch);
        memset(&e->batch, 0, sizeof e->batch);
        cn_kv_free(e->kv);
        cn_fwd_free(e->fwd);
        e->kv = NULL;
        e->fwd = NULL;
    }
    return st;
}

/* Inputs [i0, i1) in one pass: their vectors into out. */
static cn_status run_pass(cn_embedder *e, const int32_t *const *tokens, const int32_t *n_tokens, size_t i0, size_t i1,
                          float *out, cn_error *err) {
    cn_batch_clear(&e->batch);
    for (size_t i = i0; i < i1; i++)
        for (int32_t t = 0; t < n_tokens[i]; t++) cn_batch_add(&e->batch, tokens[i][t], t, (int32_t)(i - i0), true);
    cn_status st = cn_forward_embd(e->m, e->fwd, &e->batch, e->kv, e->hidden, err);
    for (size_t i = i0; i < i1; i++) cn_kv_seq_free(e->kv, (int32_t)(i - i0));
    if (st != CN_STATUS_OK) return st;
    int64_t row = 0;
    for (size_t i = i0; i < i1 && st == CN_STATUS_OK; i++) {
        st = cn_embd_pool(e->hidden + row * e->n_embd, n_tokens[i], e->n_embd, e->p.pooling, e->p.normalize,
                          out + i * (size_t)e->n_embd, err);
        row += n_tokens[i];
    }
    return st;
}

cn_status cn_embedder_embed(cn_embedder *e, const int32_t *const *tokens, const int32_t *n_tokens, size_t n_inputs,
                            float *out, cn_error *err) {
    if (!e || (n_inputs && (!tokens || !n_tokens || !out)))
        return cn_err(err, CN_STATUS_INVALID_ARG, "embed: no embedder, tokens or output");
    for (size_t i = 0; i < n_inputs; i++) {
        if (n_tokens[i] < 1 || !tokens[i])
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "input", "input %zu is empty", i);
        if (n_tokens[i] > e->p.n_batch)
            return cn_err_param(err, CN_STATUS_LIMIT, "input",
                                "input %zu has %d tokens: the most one input may have is %d (the embedding batch)", i,
                                n_tokens[i], e->p.n_batch);
        for (int32_t t = 0; t < n_tokens[i]; t++)
            if (tokens[i][t] < 0 || tokens[i][t] >= e->n_vocab)
                return cn_err_param(err, CN_STATUS_INVALID_ARG, "input",
                                    "input %zu: token %d is %d, not an id in [0, %d)", i, t, tokens[i][t], e->n_vocab);
    }
    cn_status st = CN_STATUS_OK;
    for (size_t i0 = 0; i0 < n_inputs && st == CN_STATUS_OK;) {
        size_t i1 = i0;
        int64_t rows = 0;
        while (i1 < n_inputs && i1 - i0 < (size_t)e->p.max_seqs && rows + n_tokens[i1] <= e->p.n_batch)
            rows += n_tokens[i1++];
        pthread_mutex_lock(e->mu); /* one pass: between two of the engine's steps */
        st = ensure_pass(e, err);
        if (st == CN_STATUS_OK) st = run_pass(e, tokens, n_tokens, i0, i1, out, err);
        pthread_mutex_unlock(e->mu);
        i0 = i1;
    }
    return st;
}

cn_status cn_embedder_embed_texts(cn_embedder *e, const char *const *texts, size_t n_texts, float *out, cn_error *err) {
    if (!e || (n_texts && !texts)) return cn_err(err, CN_STATUS_INVALID_ARG, "embed: no embedder or texts");
    int32_t **ids = calloc(n_texts ? n_texts : 1, sizeof *ids);
    int32_t *n = calloc(n_texts ? n_texts : 1, sizeof *n);
    cn_status st = ids && n ? CN_STATUS_OK : cn_err(err, CN_STATUS_NO_MEMORY, "embed: out of memory");
    for (size_t i = 0; st == CN_STATUS_OK && i < n_texts; i++) {
        size_t k = 0;
        if (!texts[i]) {
            st = cn_err_param(err, CN_STATUS_INVALID_ARG, "input", "text %zu is NULL", i);
            break;
        }
        st = cn_tokenize_alloc(e->tok, texts[i], strlen(texts[i]), true, true, &ids[i], &k, err);
        if (st == CN_STATUS_OK && k > (size_t)INT32_MAX / 2)
            st = cn_err_param(err, CN_STATUS_LIMIT, "input", "text %zu is too long", i);
        n[i] = (int32_t)k;
    }
    if (st == CN_STATUS_OK) st = cn_embedder_embed(e, (const int32_t *const *)ids, n, n_texts, out, err);
    for (size_t i = 0; ids && i < n_texts; i++) free(ids[i]);
    free(ids);
    free(n);
    return st;
}
