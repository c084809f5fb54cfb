/* forward.c — the one forward pass, driven by the model's cn_arch_desc, over a batch of
 * rows; plus the context (thread pool, scratch) and batch helpers.
 *
 * Shape of a step: every row's hidden state goes through the layers together, so each
 * matmul is (rows × in) · Wᵀ and reads each weight row once per batch. Per-row work
 * (norms, RoPE, K/V writes) runs on the caller's thread; matmuls, activation
 * quantization and attention run on the pool, split over independent outputs. The
 * activation quantized for one matmul is reused by the next one on the same input
 * (Q/K/V, gate/up) when their weights take the same format. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "tensor/tensor.h"

struct cn_ctx {
    const cn_model *m;
    const cn_kernels *kern;
    cn_pool *pool;
    int32_t n_batch_max, n_ctx;
    float *x, *xb, *tmp;          /* (B, n_embd) */
    float *q, *att;               /* (B, n_head * head_dim) */
    float *k, *v;                 /* (B, kv_dim) */
    float *hg, *hu;               /* (B, n_ff) */
    float *cs_global, *cs_swa;    /* (B, n_rot) RoPE cos/sin per row */
    void *xq;                     /* (B, act row bytes <= 4 * max width) */
    const float *xq_src;          /* what xq holds: source, format, shape (NULL: nothing) */
    uint32_t xq_type;
    int64_t xq_k, xq_n;
    float *attn_scratch;          /* (n_threads, n_ctx) */
    int32_t *pos_lo, *pos_hi;     /* (B) */
    int32_t *row_useq;            /* (B) index of the row's sequence in useq */
    int32_t *useq;                /* (B) distinct sequences of the batch */
    int64_t *useq_len;            /* (B) their lengths before the batch */
    const void *const **k_rows, *const **v_rows; /* (B) a row's block pointers */
    const void *const **useq_k, *const **useq_v; /* (B) */
    const void **blk;             /* block pointers of all distinct sequences, grown as needed */
    int64_t blk_cap;
    int32_t *want_rows;           /* (B) */
};

cn_ctx_params cn_ctx_default_params(void) {
    cn_ctx_params p = {.n_threads = 1, .n_batch_max = 512, .n_ctx = 0};
    return p;
}

void cn_ctx_free(cn_ctx *c) {
    if (!c) return;
    cn_pool_free(c->pool);
    float *fl[] = {c->x, c->xb, c->tmp, c->q, c->att, c->k, c->v, c->hg, c->hu,
                   c->cs_global, c->cs_swa, c->attn_scratch};
    for (size_t i = 0; i < CN_ARRAY_LEN(fl); i++) cn_free_aligned(fl[i]);
    cn_free_aligned(c->xq);
    free(c->pos_lo);
    free(c->pos_hi);
    free(c->row_useq);
    free(c->useq);
    free(c->useq_len);
    free(c->k_rows);
    free(c->v_rows);
    free(c->useq_k);
    free(c->useq_v);
    free(c->blk);
    free(c->want_rows);
    free(c);
}

static float *falloc(int64_t n_rows, int64_t n_cols, bool *ok) {
    uint64_t n;
    if (!cn_mul_ok((uint64_t)n_rows, (uint64_t)n_cols, &n) || !cn_mul_ok(n, sizeof(float), &n)) {
        *ok = false;
        return NULL;
    }
    float *p = cn_calloc_aligned((size_t)n);
    if (!p) *ok = false;
    return p;
}

cn_status cn_ctx_create(const cn_model *m, const cn_ctx_params *p, cn_ctx **out, cn_error *err) {
    *out = NULL;
    const cn_hparams *hp = cn_model_hparams(m);
    if (p->n_threads < 1 || p->n_threads > 1024)
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_threads = %d out of range [1, 1024]", p->n_threads);
    if (p->n_batch_max < 1 || p->n_batch_max > (1 << 20))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_batch_max = %d out of range [1, 2^20]", p->n_batch_max);
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_ctx = %d out of range [0, 2^24]", p->n_ctx);
    cn_ctx *c = calloc(1, sizeof *c);
    if (!c) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating context");
    c->m = m;
    c->kern = cn_kernels_get();
    c->n_batch_max = p->n_batch_max;
    c->n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    cn_status s = cn_pool_create(p->n_threads, &c->pool, err);
    if (s != CN_STATUS_OK) {
        cn_ctx_free(c);
        return s;
    }
    const int64_t B = p->n_batch_max, E = hp->n_embd, F = hp->n_ff;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t W = CN_MAX(CN_MAX(E, QD), F);
    bool ok = true;
    c->x = falloc(B, E, &ok);
    c->xb = falloc(B, CN_MAX(E, QD), &ok);
    c->tmp = falloc(B, E, &ok);
    c->q = falloc(B, QD, &ok);
    c->att = falloc(B, QD, &ok);
    c->k = falloc(B, KVD, &ok);
    c->v = falloc(B, KVD, &ok);
    c->hg = falloc(B, F, &ok);
    c->hu = falloc(B, F, &ok);
    c->cs_global = falloc(B, hp->n_rot, &ok);
    c->cs_swa = falloc(B, hp->n_rot, &ok);
    c->xq = falloc(B, W, &ok); /* 4 bytes per element bounds every activation format */
    c->attn_scratch = falloc(p->n_threads, c->n_ctx, &ok);
    c->pos_lo = calloc((size_t)B, sizeof *c->pos_lo);
    c->pos_hi = calloc((size_t)B, sizeof *c->pos_hi);
    c->row_useq = calloc((size_t)B, sizeof *c->row_useq);
    c->useq = calloc((size_t)B, sizeof *c->useq);
    c->useq_len = calloc((size_t)B, sizeof *c->useq_len);
    c->k_rows = calloc((size_t)B, sizeof *c->k_rows);
    c->v_rows = calloc((size_t)B, sizeof *c->v_rows);
    c->useq_k = calloc((size_t)B, sizeof *c->useq_k);
    c->useq_v = calloc((size_t)B, sizeof *c->useq_v);
    c->want_rows = calloc((size_t)B, sizeof *c->want_rows);
    if (!ok || !c->pos_lo || !c->pos_hi || !c->row_useq || !c->useq || !c->useq_len ||
        !c->k_rows || !c->v_rows || !c->useq_k || !c->useq_v || !c->want_rows) {
        cn_ctx_free(c);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for a context of %d rows", p->n_batch_max);
    }
    *out = c;
    return CN_STATUS_OK;
}

int32_t cn_ctx_n_ctx(const cn_ctx *c) { return c->n_ctx; }

/* ---- batches ---- */

cn_status cn_batch_init(cn_batch *b, int32_t cap, cn_error *err) {
    memset(b, 0, sizeof *b);
    if (cap < 1) return cn_err(err, CN_STATUS_INVALID_ARG, "batch capacity %d < 1", cap);
    b->rows = calloc((size_t)cap, sizeof *b->rows);
    if (!b->rows) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for a batch of %d", cap);
    b->cap = cap;
    return CN_STATUS_OK;
}

void cn_batch_free(cn_batch *b) {
    free(b->rows);
    memset(b, 0, sizeof *b);
}

bool cn_batch_add(cn_batch *b, int32_t token, int32_t pos, int32_t seq, bool want_logits) {
    if (b->n_rows >= b->cap) return false;
    b->rows[b->n_rows++] = (cn_batch_row){token, pos, seq, want_logits};
    return true;
}

int32_t cn_batch_n_logits(const cn_batch *b) {
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_rows; i++) n += b->rows[i].want_logits;
    return n;
}

/* ---- pool tasks ---- */

typedef struct {
    const cn_kernels *k;
    uint32_t act;
    const float *x;
    int64_t kdim, n;
    void *dst;
    size_t rb;
} quant_task;
static void quant_run(void *p, int ith, int nth) {
    quant_task *t = p;
    t->k->quantize_rows(t->act, t->x, t->kdim, t->n, t->dst, t->rb, ith, nth);
}

typedef struct {
    const cn_kernels *k;
    cn_matmul_args a;
} matmul_task;
static void matmul_run(void *p, int ith, int nth) {
    matmul_task *t = p;
    t->k->matmul(&t->a, ith, nth);
}

typedef struct {
    const cn_kernels *k;
    cn_attn_args a;
} attn_task;
static void attn_run(void *p, int ith, int nth) {
    attn_task *t = p;
    t->k->attention(&t->a, ith, nth);
}

/* y (n, ldy) = x (n, w->ne0) · Wᵀ. x is quantized unless xq already holds it. */
static void matmul(cn_ctx *c, const cn_weight *w, const float *x, int64_t n, float *y, int64_t ldy) {
    const uint32_t act = cn_matmul_act_type(w->type);
    const size_t rb = cn_act_row_bytes(act, w->ne0);
    if (c->xq_src != x || c->xq_type != act || c->xq_k != w->ne0 || c->xq_n != n) {
        quant_task qt = {c->kern, act, x, w->ne0, n, c->xq, rb};
        cn_pool_run(c->pool, quant_run, &qt);
        c->xq_src = x;
        c->xq_type = act;
        c->xq_k = w->ne0;
        c->xq_n = n;
    }
    matmul_task mt = {c->kern,
                      {.w_type = w->type, .w = w->data, .w_row_bytes = w->row_bytes, .xq = c->xq,
                       .xq_row_bytes = rb, .y = y, .ldy = ldy, .n_out = w->ne1, .k = w->ne0,
                       .n_tok = n}};
    cn_pool_run(c->pool, matmul_run, &mt);
}

/* dst rows = rmsnorm(src rows) * w; dst may be src. Marks xq stale. */
static void norm_rows(cn_ctx *c, const float *src, const cn_weight *w, float *dst, int64_t n,
                      int64_t width) {
    const float eps = cn_model_hparams(c->m)->norm_eps;
    for (int64_t r = 0; r < n; r++)
        c->kern->rmsnorm(src + r * width, w->data, dst + r * width, width, eps);
    c->xq_src = NULL;
}

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* Checks rows, finds the batch's sequences, checks each continues its cache without
 * gaps, and reserves the blocks. */
static cn_status prepare_batch(cn_ctx *c, const cn_batch *b, cn_kv *kv, int32_t *n_useq,
                               int32_t *n_want, cn_error *err) {
    const cn_hparams *hp = cn_model_hparams(c->m);
    const cn_kv_params *kp = cn_kv_params_of(kv);
    int32_t nu = 0, nw = 0;
    for (int32_t r = 0; r < b->n_rows; r++) {
        const cn_batch_row *row = &b->rows[r];
        if (row->token < 0 || row->token >= hp->n_vocab)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: token %d outside the vocabulary [0, %d)",
                          r, row->token, hp->n_vocab);
        if (row->pos < 0)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: position %d is negative", r, row->pos);
        if (row->pos >= c->n_ctx)
            return cn_err(err, CN_STATUS_LIMIT, "batch row %d: position %d outside the context [0, %d)", r,
                          row->pos, c->n_ctx);
        if (row->seq < 0 || row->seq >= kp->max_seqs)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: sequence %d outside [0, %d)", r,
                          row->seq, kp->max_seqs);
        int32_t u = 0;
        while (u < nu && c->useq[u] != row->seq) u++;
        if (u == nu) c->useq[nu++] = row->seq;
        c->row_useq[r] = u;
        for (int32_t r2 = 0; r2 < r; r2++)
            if (c->row_useq[r2] == u && b->rows[r2].pos == row->pos)
                return cn_err(err, CN_STATUS_INVALID_ARG, "batch rows %d and %d: both sequence %d position %d",
                              r2, r, row->seq, row->pos);
        if (row->want_logits) c->want_rows[nw++] = r;
    }
    for (int32_t u = 0; u < nu; u++) {
        const int64_t len = cn_kv_seq_len(kv, c->useq[u]);
        int64_t max_pos = -1, n_new = 0;
        for (int32_t r = 0; r < b->n_rows; r++) {
            if (c->row_useq[r] != u) continue;
            max_pos = CN_MAX(max_pos, (int64_t)b->rows[r].pos);
            n_new += b->rows[r].pos >= len;
        }
        if (max_pos >= len && n_new != max_pos - len + 1)
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "batch: sequence %d holds %lld positions, and its new positions up to %lld leave a gap",
                          c->useq[u], (long long)len, (long long)max_pos);
        c->useq_len[u] = len;
        cn_status s = cn_kv_seq_reserve(kv, c->useq[u], max_pos + 1, err);
        if (s != CN_STATUS_OK) return s;
    }
    *n_useq = nu;
    *n_want = nw;
    return CN_STATUS_OK;
}

/* Block pointers of layer il for every sequence of the batch, and per-row views. */
static cn_status gather_blocks(cn_ctx *c, const cn_batch *b, cn_kv *kv, int32_t il, int32_t nu,
                               cn_error *err) {
    int64_t need = 0;
    for (int32_t u = 0; u < nu; u++) {
        const int32_t *ids;
        need += 2 * cn_kv_seq_blocks(kv, c->useq[u], &ids);
    }
    if (need > c->blk_cap) {
        const void **nb = realloc(c->blk, (size_t)need * sizeof *nb);
        if (!nb) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for KV block tables");
        c->blk = nb;
        c->blk_cap = need;
    }
    int64_t off = 0;
    for (int32_t u = 0; u < nu; u++) {
        const int32_t *ids;
        const int64_t n = cn_kv_seq_blocks(kv, c->useq[u], &ids);
        for (int64_t i = 0; i < n; i++) {
            c->blk[off + i] = cn_kv_block_k(kv, il, ids[i]);
            c->blk[off + n + i] = cn_kv_block_v(kv, il, ids[i]);
        }
        c->useq_k[u] = c->blk + off;
        c->useq_v[u] = c->blk + off + n;
        off += 2 * n;
    }
    for (int32_t r = 0; r < b->n_rows; r++) {
        c->k_rows[r] = c->useq_k[c->row_useq[r]];
        c->v_rows[r] = c->useq_v[c->row_useq[r]];
    }
    return CN_STATUS_OK;
}

cn_status cn_forward(const cn_model *m, cn_ctx *c, const cn_batch *b, cn_kv *kv,
                     float *logits_out, cn_error *err) {
    const cn_hparams *hp = cn_model_hparams(m);
    const cn_arch_desc *arch = cn_model_arch(m);
    const cn_kernels *K = c->kern;
    if (c->m != m) return cn_err(err, CN_STATUS_INVALID_ARG, "context was created for another model");
    if (b->n_rows < 1 || b->n_rows > c->n_batch_max)
        return cn_err(err, CN_STATUS_INVALID_ARG, "batch of %d rows (context takes 1 to %d)", b->n_rows,
                      c->n_batch_max);
    const int64_t n = b->n_rows, E = hp->n_embd, F = hp->n_ff, hd = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * hd, KVD = (int64_t)hp->n_head_kv * hd;
    const cn_kv_params *kp = cn_kv_params_of(kv);
    if (kp->n_layer != hp->n_layer || kp->kv_dim != KVD)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "KV cache has %d layers of width %d, the model needs %d of %lld", kp->n_layer,
                      kp->kv_dim, hp->n_layer, (long long)KVD);
    if (kp->type != CN_TYPE_F32 && kp->type != CN_TYPE_F16 &&
        !(kp->type == CN_TYPE_Q8_0 && hd % CN_QK8_0 == 0))
        return cn_err(err, CN_STATUS_UNSUPPORTED, "KV cache type %u with head dimension %lld", kp->type,
                      (long long)hd);

    int32_t nu = 0, n_want = 0;
    cn_status s = prepare_batch(c, b, kv, &nu, &n_want, err);
    if (s != CN_STATUS_OK) return s;

    /* Embeddings; RoPE angles for each row, for global and sliding layers. */
    const cn_weight *te = cn_model_tok_embd(m);
    const cn_type_traits *tr = cn_type_traits_get(te->type);
    const float embd_scale = sqrtf((float)E);
    const cn_weight *ff = cn_model_rope_freqs(m);
    const float *freqs = ff ? ff->data : NULL;
    for (int64_t r = 0; r < n; r++) {
        float *xr = c->x + r * E;
        tr->to_float((const uint8_t *)te->data + (size_t)b->rows[r].token * te->row_bytes, xr, E);
        if (arch->embd_scale)
            for (int64_t i = 0; i < E; i++) xr[i] *= embd_scale;
        K->rope_cache(b->rows[r].pos, hp->n_rot, hp->rope_base, hp->rope_freq_scale, freqs,
                      c->cs_global + r * hp->n_rot);
        if (arch->swa_pattern > 0)
            K->rope_cache(b->rows[r].pos, hp->n_rot, hp->rope_base_swa, 1.0f, freqs,
                          c->cs_swa + r * hp->n_rot);
    }
    c->xq_src = NULL;

    for (int32_t il = 0; il < hp->n_layer; il++) {
        const cn_layer *L = cn_model_layer(m, il);
        const float *cs = L->swa ? c->cs_swa : c->cs_global;

        /* attention */
        norm_rows(c, c->x, &L->attn_norm, c->xb, n, E);
        matmul(c, &L->wq, c->xb, n, c->q, QD);
        matmul(c, &L->wk, c->xb, n, c->k, KVD);
        matmul(c, &L->wv, c->xb, n, c->v, KVD);
        for (int64_t r = 0; r < n; r++) {
            float *qr = c->q + r * QD, *kr = c->k + r * KVD, *vr = c->v + r * KVD;
            if (arch->qkv_bias) {
                add_rows(qr, L->bq.data, QD);
                add_rows(kr, L->bk.data, KVD);
                add_rows(vr, L->bv.data, KVD);
            }
            if (arch->qk_norm) {
                for (int32_t h = 0; h < hp->n_head; h++)
                    K->rmsnorm(qr + h * hd, L->q_norm.data, qr + h * hd, hd, hp->norm_eps);
                for (int32_t h = 0; h < hp->n_head_kv; h++)
                    K->rmsnorm(kr + h * hd, L->k_norm.data, kr + h * hd, hd, hp->norm_eps);
            }
            K->rope(qr, hp->n_head, (int32_t)hd, hp->n_rot, cs + r * hp->n_rot, arch->rope);
            K->rope(kr, hp->n_head_kv, (int32_t)hd, hp->n_rot, cs + r * hp->n_rot, arch->rope);
            if (arch->q_prescale)
                for (int64_t i = 0; i < QD; i++) qr[i] *= hp->attn_scale;
            s = cn_kv_write(kv, il, b->rows[r].seq, b->rows[r].pos, kr, vr, err);
            if (s != CN_STATUS_OK) return s;
            c->pos_hi[r] = b->rows[r].pos;
            c->pos_lo[r] = L->swa && hp->n_swa > 0 ? CN_MAX(0, b->rows[r].pos - hp->n_swa + 1) : 0;
        }
        s = gather_blocks(c, b, kv, il, nu, err);
        if (s != CN_STATUS_OK) return s;
        attn_task at = {K,
                        {.n_rows = (int32_t)n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                         .head_dim = (int32_t)hd, .q = c->q, .out = c->att, .pos_lo = c->pos_lo,
                         .pos_hi = c->pos_hi, .k_blocks = c->k_rows, .v_blocks = c->v_rows,
                         .block_tokens = kp->block_tokens, .kv_dim = kp->kv_dim,
                         .kv_type = kp->type, .scale = arch->q_prescale ? 1.0f : hp->attn_scale,
                         .scratch = c->attn_scratch, .scratch_stride = c->n_ctx}};
        cn_pool_run(c->pool, attn_run, &at);
        matmul(c, &L->wo, c->att, n, c->tmp, E);
        if (arch->post_norms) norm_rows(c, c->tmp, &L->post_attn_norm, c->tmp, n, E);
        add_rows(c->x, c->tmp, n * E);

        /* feed-forward */
        norm_rows(c, c->x, &L->ffn_norm, c->xb, n, E);
        matmul(c, &L->w_gate, c->xb, n, c->hg, F);
        matmul(c, &L->w_up, c->xb, n, c->hu, F);
        K->gated_act(arch->act, c->hg, c->hu, c->hg, n * F);
        c->xq_src = NULL;
        matmul(c, &L->w_down, c->hg, n, c->tmp, E);
        if (arch->post_norms) norm_rows(c, c->tmp, &L->post_ffn_norm, c->tmp, n, E);
        add_rows(c->x, c->tmp, n * E);
    }

    if (n_want == 0) return CN_STATUS_OK;
    for (int32_t i = 0; i < n_want; i++)
        memcpy(c->xb + (int64_t)i * E, c->x + (int64_t)c->want_rows[i] * E, (size_t)E * sizeof(float));
    norm_rows(c, c->xb, cn_model_output_norm(m), c->xb, n_want, E);
    matmul(c, cn_model_output(m), c->xb, n_want, logits_out, hp->n_vocab);
    if (hp->final_softcap > 0.0f) {
        const float cap = hp->final_softcap;
        for (int64_t i = 0; i < (int64_t)n_want * hp->n_vocab; i++)
            logits_out[i] = tanhf(logits_out[i] / cap) * cap;
    }
    return CN_STATUS_OK;
}
