/* forward.c — the one forward pass, driven by the model's cn_arch_desc, over a batch of
 * rows; plus its scratch (cn_fwd: thread pool, buffers) and batch helpers.
 *
 * Shape of a step: every row's hidden state goes through the layers together, so each
 * matmul is (rows × in) · Wᵀ and reads each weight row once per batch. Per-row work
 * (norms, RoPE, K/V writes) runs on the caller's thread; matmuls, activation
 * quantization and attention run on the pool, split over independent outputs. The
 * activation quantized for one matmul is reused by the next one on the same input
 * (Q/K/V, gate/up) when their weights take the same format. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "core/buf.h"
#include "tensor/tensor.h"

struct cn_fwd {
    const cn_model *m;
    const cn_kernels *kern;
    cn_pool *pool;
    bool own_pool; /* made here (cn_fwd_params.pool was NULL) */
    int32_t n_batch_max, n_ctx;
    float *x, *xb, *tmp;                         /* (B, n_embd) */
    float *q, *att;                              /* (B, n_head * head_dim) */
    float *k, *v;                                /* (B, kv_dim) */
    float *hg, *hu;                              /* (B, n_ff) */
    float *cs_global, *cs_swa;                   /* (B, n_rot) RoPE cos/sin per row */
    void *xq, *xq_alt[2];                        /* (B, act row bytes <= 4 * max width): activations
                                                  * quantized for the next matmuls, one per format */
    float *attn_scratch;                         /* (n_threads, CN_ATTN_SCRATCH(n_ctx)) */
    float *thr_f;                                /* (n_threads, 3, W) one row's residual, branch, norm */
    uint8_t *thr_q;                              /* (n_threads, 3, 4 W) that row quantized, per format */
    int64_t thr_w;                               /* W: the widest row */
    int32_t *pos_lo, *pos_hi;                    /* (B) */
    int32_t *row_useq;                           /* (B) index of the row's sequence in useq */
    int32_t *useq;                               /* (B) distinct sequences of the batch */
    int64_t *useq_len;                           /* (B) their lengths before the batch */
    const void *const **k_rows, *const **v_rows; /* (B) a row's block pointers */
    const void *const **useq_k, *const **useq_v; /* (B) */
    const void **blk;                            /* block pointers of all distinct sequences, grown as needed */
    size_t blk_cap;
    int32_t *want_rows;     /* (B) */
    struct prof *prof;      /* NULL: not profiling; else prof_data */
    struct prof *prof_data; /* the counts, kept when profiling stops */
    cn_matmul_observer obs; /* NULL: none (cn_fwd_observe) */
    void *obs_user;
};

/* ---- the per-step profile (cn_fwd_profile) ----
 * A step is one call of the forward pass's step helpers (embed_rows, norm_matmuls,
 * rope_qk, attend, quant_matmul, act_matmul), each timing itself, so the layer loop
 * reads as the math; its ops are keyed by step and the formats and shape of the weights
 * it reads, so the layers a mixed quantization gives more bits to come out as rows of
 * their own. */
enum { PROF_MAX = 48 };
typedef enum { ST_EMBED, ST_QKV, ST_ROPE, ST_ATTN, ST_WO, ST_GATE_UP, ST_DOWN, ST_HEAD } prof_step;
static const char *const STEP_NAME[] = {"embed + rope angles", "attn_norm + q,k,v", "q/k norm + rope",
                                        "attention",           "attn_output",       "ffn_norm + gate,up",
                                        "act + down",          "output_norm + head"};
typedef struct {
    prof_step step;
    uint32_t type[3];
    int64_t in, out;
} prof_key;
struct prof {
    prof_key key[PROF_MAX];
    cn_profile_op op[PROF_MAX];
    int32_t n;
};

static double prof_start(const cn_fwd *c) { return c->prof ? cn_time_ms() : 0.0; }

/* Adds the step that began at t0 (prof_start) and read nw weights plus extra bytes. */
static void prof_add(cn_fwd *c, double t0, prof_step step, const cn_weight *const *w, int nw, uint64_t extra) {
    struct prof *p = c->prof;
    if (!p) return;
    const double ms = cn_time_ms() - t0;
    prof_key k = {.step = step};
    uint64_t bytes = extra;
    for (int i = 0; i < nw; i++) {
        k.type[i] = w[i]->type + 1;
        bytes += (uint64_t)w[i]->row_bytes * (uint64_t)w[i]->ne1;
        k.out += w[i]->ne1;
        k.in = w[i]->ne0;
    }
    int32_t j = 0;
    while (j < p->n && memcmp(&p->key[j], &k, sizeof k) != 0) j++;
    if (j == p->n) {
        if (p->n == PROF_MAX) j = PROF_MAX - 1; /* more kinds than rows: the last row takes the rest */
        else {
            p->key[p->n++] = k;
            cn_profile_op *o = &p->op[j];
            int at = snprintf(o->op, sizeof o->op, "%s", STEP_NAME[step]);
            for (int i = 0; i < nw && at > 0 && (size_t)at < sizeof o->op; i++)
                at += snprintf(o->op + at, sizeof o->op - (size_t)at, "%s%s", i ? "," : " ",
                               cn_type_traits_get(w[i]->type)->name);
            if (nw && at > 0 && (size_t)at < sizeof o->op)
                snprintf(o->op + at, sizeof o->op - (size_t)at, " %lld->%lld", (long long)k.in, (long long)k.out);
        }
    }
    p->op[j].calls++;
    p->op[j].ms += ms;
    p->op[j].bytes += bytes;
}

bool cn_fwd_profile(cn_fwd *c, bool on) {
    c->prof = NULL;
    if (!on) return true;
    if (!c->prof_data && !(c->prof_data = malloc(sizeof *c->prof_data))) return false;
    memset(c->prof_data, 0, sizeof *c->prof_data);
    c->prof = c->prof_data;
    return true;
}

int32_t cn_fwd_profile_read(const cn_fwd *c, cn_profile_op *out, int32_t max) {
    const struct prof *p = c->prof_data;
    if (!p) return 0;
    for (int32_t i = 0; i < p->n && i < max; i++) out[i] = p->op[i];
    return p->n;
}

void cn_fwd_observe(cn_fwd *c, cn_matmul_observer fn, void *user) {
    c->obs = fn;
    c->obs_user = user;
}

/* Shows the observer the rows x (n of k) that enter weights w[0..nw). */
static void observe(const cn_fwd *c, const cn_weight *const *w, int nw, const float *x, int64_t n, int64_t k) {
    if (!c->obs) return;
    for (int i = 0; i < nw; i++) c->obs(c->obs_user, w[i]->name, x, n, k);
}

cn_fwd_params cn_fwd_default_params(void) {
    cn_fwd_params p = {.n_threads = 1, .n_batch_max = 512, .n_ctx = 0, .pool = NULL};
    return p;
}

void cn_fwd_free(cn_fwd *c) {
    if (!c) return;
    if (c->own_pool) cn_pool_free(c->pool);
    float *fl[] = {c->x, c->xb, c->tmp, c->q,         c->att,    c->k,
                   c->v, c->hg, c->hu,  c->cs_global, c->cs_swa, c->attn_scratch};
    for (size_t i = 0; i < CN_ARRAY_LEN(fl); i++) cn_free_aligned(fl[i]);
    cn_free_aligned(c->xq);
    cn_free_aligned(c->thr_f);
    cn_free_aligned(c->thr_q);
    cn_free_aligned(c->xq_alt[0]);
    cn_free_aligned(c->xq_alt[1]);
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
    free(c->prof_data);
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

cn_status cn_fwd_create(const cn_model *m, const cn_fwd_params *p, cn_fwd **out, cn_error *err) {
    *out = NULL;
    const cn_hparams *hp = cn_model_hparams(m);
    if (!p->pool && (p->n_threads < 1 || p->n_threads > 1024))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_threads = %d out of range [1, 1024]", p->n_threads);
    const int32_t n_threads = p->pool ? cn_pool_size(p->pool) : p->n_threads; /* per-thread scratch */
    if (p->n_batch_max < 1 || p->n_batch_max > (1 << 20))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_batch_max = %d out of range [1, 2^20]", p->n_batch_max);
    if (p->n_ctx < 0 || p->n_ctx > (1 << 24))
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_ctx = %d out of range [0, 2^24]", p->n_ctx);
    cn_fwd *c = calloc(1, sizeof *c);
    if (!c) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating context");
    c->m = m;
    c->kern = cn_kernels_get();
    c->n_batch_max = p->n_batch_max;
    c->n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    c->pool = p->pool;
    if (!c->pool) {
        c->own_pool = true;
        const cn_status s = cn_pool_create(n_threads, &c->pool, err);
        if (s != CN_STATUS_OK) {
            cn_fwd_free(c);
            return s;
        }
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
    c->xq_alt[0] = falloc(B, W, &ok);
    c->xq_alt[1] = falloc(B, W, &ok);
    c->attn_scratch = falloc(n_threads, CN_ATTN_SCRATCH(c->n_ctx), &ok);
    c->thr_w = W;
    c->thr_f = falloc(n_threads, 3 * W, &ok);
    c->thr_q = (uint8_t *)falloc(n_threads, 3 * W, &ok); /* 4 bytes per element per format */
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
    if (!ok || !c->pos_lo || !c->pos_hi || !c->row_useq || !c->useq || !c->useq_len || !c->k_rows || !c->v_rows ||
        !c->useq_k || !c->useq_v || !c->want_rows) {
        cn_fwd_free(c);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for a context of %d rows", p->n_batch_max);
    }
    *out = c;
    return CN_STATUS_OK;
}

int32_t cn_fwd_n_ctx(const cn_fwd *c) { return c->n_ctx; }

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
    if (!b) return;
    free(b->rows);
    memset(b, 0, sizeof *b);
}

bool cn_batch_add(cn_batch *b, int32_t token, int32_t pos, int32_t seq, bool want_logits) {
    if (!b || b->n_rows >= b->cap) return false;
    b->rows[b->n_rows++] = (cn_batch_row){token, pos, seq, want_logits};
    return true;
}

void cn_batch_clear(cn_batch *b) { b->n_rows = 0; }

int32_t cn_batch_n_logits(const cn_batch *b) {
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_rows; i++) n += b->rows[i].want_logits;
    return n;
}

/* ---- pool tasks ----
 * A layer is a handful of parallel regions: each per-row step (residual add, norm,
 * gated activation) runs split over rows and quantizes its own rows for the next
 * matmuls, and the matmuls that read one input run in one region, each split over its
 * output rows. Every row's arithmetic is the same as done one by one, so results do not
 * depend on the thread count; fewer regions means fewer barriers per token. */

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* The activation formats a group of matmuls on one input needs: one buffer each. */
typedef struct {
    int n;
    uint32_t act[3];
    void *buf[3];
    size_t rb[3];
} quant_set;

/* Plans ws[0..nw) (same input width): which[i] is weight i's buffer in qs. */
static void quant_plan(cn_fwd *c, const cn_weight *const *ws, int nw, quant_set *qs, int *which) {
    void *bufs[3] = {c->xq, c->xq_alt[0], c->xq_alt[1]};
    qs->n = 0;
    for (int i = 0; i < nw; i++) {
        const uint32_t act = cn_matmul_act_type(ws[i]->type);
        int j = 0;
        while (j < qs->n && qs->act[j] != act) j++;
        if (j == qs->n) {
            qs->act[j] = act;
            qs->buf[j] = bufs[j];
            qs->rb[j] = cn_act_row_bytes(act, ws[i]->ne0);
            qs->n++;
        }
        which[i] = j;
    }
}

static void quant_row(const cn_kernels *K, const quant_set *qs, const float *x, int64_t k, int64_t r) {
    for (int j = 0; j < qs->n; j++)
        K->quantize_rows(qs->act[j], x, k, 1, (uint8_t *)qs->buf[j] + (size_t)r * qs->rb[j], qs->rb[j], 0, 1);
}

/* One row: [a = add_norm(add) into a_out (may be add itself); x += a]; xb = norm(x).
 * The batch path and the decode path both take this. */
static void resid_norm_row(const cn_kernels *K, const cn_hparams *hp, float *x, const float *add, float *a_out,
                           const cn_weight *add_norm, const cn_weight *norm, float *xb) {
    const int64_t E = hp->n_embd;
    if (add) {
        if (add_norm) {
            K->rmsnorm(add, add_norm->data, a_out, E, hp->norm_eps);
            add = a_out;
        }
        add_rows(x, add, E);
    }
    K->rmsnorm(x, norm->data, xb, E, hp->norm_eps);
}

/* The per-row step before a group of matmuls: x += add_norm(add) (add NULL: no branch;
 * add_norm NULL: added as is, else normed in place first); xb = norm(x). */
typedef struct {
    float *add;
    const cn_weight *add_norm, *norm;
} resid_norm;

/* Rows r: [add_norm(add_r); x_r += add_r]; xb_r = norm(x_r); quantize xb_r. With
 * `want`, row i works on batch row want[i] and writes xb / quantized row i. */
typedef struct {
    cn_fwd *c;
    int64_t n;
    resid_norm rn;       /* rn.add: (n, E) or NULL, its rows normed in place */
    const int32_t *want; /* NULL: row i is batch row i */
    quant_set qs;
} resid_norm_task;
static void resid_norm_run(void *p, int ith, int nth) {
    resid_norm_task *t = p;
    cn_fwd *c = t->c;
    const cn_kernels *K = c->kern;
    const cn_hparams *hp = cn_model_hparams(c->m);
    const int64_t E = hp->n_embd;
    int64_t i0, i1;
    cn_split(t->n, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t r = t->want ? t->want[i] : i;
        float *ar = t->rn.add ? t->rn.add + r * E : NULL; /* normed in place */
        resid_norm_row(K, hp, c->x + r * E, ar, ar, t->rn.add_norm, t->rn.norm, c->xb + i * E);
        quant_row(K, &t->qs, c->xb + i * E, E, i);
    }
}

/* Rows: hg_r = act(hg_r) * hu_r, quantized for w_down. */
typedef struct {
    cn_fwd *c;
    int64_t n;
    cn_act act;
    quant_set qs;
} act_task;
static void act_run(void *p, int ith, int nth) {
    act_task *t = p;
    const int64_t F = cn_model_hparams(t->c->m)->n_ff;
    int64_t r0, r1;
    cn_split(t->n, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        float *g = t->c->hg + r * F;
        t->c->kern->gated_act(t->act, g, t->c->hu + r * F, g, F);
        quant_row(t->c->kern, &t->qs, g, F, r);
    }
}

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

/* Up to three matmuls on one quantized input, in one region. */
typedef struct {
    const cn_kernels *k;
    int n;
    cn_matmul_args a[3];
} mm_group;
static void mm_group_run(void *p, int ith, int nth) {
    mm_group *g = p;
    for (int i = 0; i < g->n; i++) g->k->matmul(&g->a[i], ith, nth);
}

static cn_matmul_args mm_args(const cn_weight *w, const quant_set *qs, int which, int64_t n, float *y, int64_t ldy) {
    return (cn_matmul_args){.w_type = w->type,
                            .w = w->data,
                            .w_row_bytes = w->row_bytes,
                            .w_packed = w->packed,
                            .xq = qs->buf[which],
                            .xq_row_bytes = qs->rb[which],
                            .y = y,
                            .ldy = ldy,
                            .n_out = w->ne1,
                            .k = w->ne0,
                            .n_tok = n};
}

typedef struct {
    const cn_kernels *k;
    cn_attn_args a;
} attn_task;
static void attn_run(void *p, int ith, int nth) {
    attn_task *t = p;
    t->k->attention(&t->a, ith, nth);
}

/* Per row, before the K/V write: biases, q/k norms, RoPE, q pre-scale. */
typedef struct {
    cn_fwd *c;
    const cn_layer *L;
    const float *cs;
    int64_t n;
} qk_task;
static void qk_row(cn_fwd *c, const cn_layer *L, const float *cs, int64_t r) {
    const cn_hparams *hp = cn_model_hparams(c->m);
    const cn_arch_desc *arch = cn_model_arch(c->m);
    const cn_kernels *K = c->kern;
    const int64_t hd = hp->head_dim, QD = (int64_t)hp->n_head * hd, KVD = (int64_t)hp->n_head_kv * hd;
    float *qr = c->q + r * QD, *kr = c->k + r * KVD, *vr = c->v + r * KVD;
    if (arch->qkv_bias) {
        add_rows(qr, L->bq.data, QD);
        add_rows(kr, L->bk.data, KVD);
        add_rows(vr, L->bv.data, KVD);
    }
    if (arch->qk_norm) {
        for (int32_t h = 0; h < hp->n_head; h++) K->rmsnorm(qr + h * hd, L->q_norm.data, qr + h * hd, hd, hp->norm_eps);
        for (int32_t h = 0; h < hp->n_head_kv; h++)
            K->rmsnorm(kr + h * hd, L->k_norm.data, kr + h * hd, hd, hp->norm_eps);
    }
    K->rope(qr, hp->n_head, (int32_t)hd, hp->n_rot, cs + r * hp->n_rot, arch->rope);
    K->rope(kr, hp->n_head_kv, (int32_t)hd, hp->n_rot, cs + r * hp->n_rot, arch->rope);
    if (arch->q_prescale)
        for (int64_t i = 0; i < QD; i++) qr[i] *= hp->attn_scale;
}
static void qk_run(void *p, int ith, int nth) {
    qk_task *t = p;
    int64_t r0, r1;
    cn_split(t->n, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) qk_row(t->c, t->L, t->cs, r);
}

/* Decode (one row): every thread repeats the row's cheap steps (residual add, norm,
 * activation, quantization) in its own buffers, then takes its share of the matmuls
 * that read it, so a step and its matmuls are one region instead of two. The per-row
 * arithmetic is the batch path's. */
typedef enum { DEC_RESID_NORM, DEC_QUANT, DEC_ACT } dec_mode;
typedef struct {
    cn_fwd *c;
    dec_mode mode;
    int64_t row;      /* DEC_RESID_NORM: the batch row (x, add) */
    resid_norm rn;    /* DEC_RESID_NORM (rn.add is read only: the branch is normed
                       * into this thread's buffer) */
    const float *src; /* DEC_QUANT: the row */
    cn_act act;       /* DEC_ACT (hg, hu row 0) */
    int64_t k;        /* width quantized */
    int n_mm;
    const cn_weight *w[3];
    float *y[3];
} dec_task;
static void dec_run(void *p, int ith, int nth) {
    dec_task *t = p;
    cn_fwd *c = t->c;
    const cn_kernels *K = c->kern;
    const cn_hparams *hp = cn_model_hparams(c->m);
    float *f = c->thr_f + (int64_t)ith * 3 * c->thr_w; /* row, branch, normed */
    uint8_t *q = c->thr_q + (size_t)ith * 3 * 4 * (size_t)c->thr_w;
    const float *in = t->src;
    if (t->mode == DEC_RESID_NORM) {
        /* on this thread's copies: every thread runs it, so the shared rows stay unwritten */
        const int64_t E = hp->n_embd;
        float *xr = f, *br = f + c->thr_w, *xb = f + 2 * c->thr_w;
        memcpy(xr, c->x + t->row * E, (size_t)E * sizeof(float));
        resid_norm_row(K, hp, xr, t->rn.add ? t->rn.add + t->row * E : NULL, br, t->rn.add_norm, t->rn.norm, xb);
        in = xb;
    } else if (t->mode == DEC_ACT) {
        K->gated_act(t->act, c->hg, c->hu, f, t->k);
        in = f;
    }
    quant_set qs;
    int which[3];
    quant_plan(c, t->w, t->n_mm, &qs, which);
    for (int j = 0; j < qs.n; j++) qs.buf[j] = q + (size_t)j * 4 * (size_t)c->thr_w;
    quant_row(K, &qs, in, t->k, 0);
    for (int i = 0; i < t->n_mm; i++) {
        const cn_matmul_args a = mm_args(t->w[i], &qs, which[i], 1, t->y[i], t->w[i]->ne1);
        K->matmul(&a, ith, nth);
    }
}

/* x row `row` = the residual computed by the caller's thread (thread 0) in dec_run. */
static void dec_keep_x(cn_fwd *c, int64_t row) {
    const int64_t E = cn_model_hparams(c->m)->n_embd;
    memcpy(c->x + row * E, c->thr_f, (size_t)E * sizeof(float));
}

/* ---- the steps of a layer: each picks the one-row (decode) region or the batch's
 * regions itself, so the layer loop is the model's math, one call per step ---- */

/* The batch path's matmuls on one quantized input, in one region: y[i] = (rows of qs
 * buffer wi[i]) · w[i]ᵀ. */
static void run_matmuls(cn_fwd *c, const quant_set *qs, const int *wi, int64_t rows, int nw, const cn_weight *const *w,
                        float *const *y) {
    mm_group g = {c->kern, nw, {{0}}};
    for (int i = 0; i < nw; i++) g.a[i] = mm_args(w[i], qs, wi[i], rows, y[i], w[i]->ne1);
    cn_pool_run(c->pool, mm_group_run, &g);
}

/* resid_norm over the batch's rows, then y[i] = xb · w[i]ᵀ for nw matmuls on it. With
 * want, only those n_want rows go on to the matmuls (row i of y is batch row want[i]).
 * Profiled as `step`, like each step below. */
static void norm_matmuls(cn_fwd *c, prof_step step, int64_t n, const int32_t *want, int64_t n_want, resid_norm rn,
                         int nw, const cn_weight *const *w, float *const *y) {
    const double t0 = prof_start(c);
    if (n == 1) {
        dec_task d = {
            .c = c, .mode = DEC_RESID_NORM, .row = 0, .rn = rn, .k = cn_model_hparams(c->m)->n_embd, .n_mm = nw};
        for (int i = 0; i < nw; i++) d.w[i] = w[i], d.y[i] = y[i];
        cn_pool_run(c->pool, dec_run, &d);
        dec_keep_x(c, 0);
    } else {
        const int64_t rows = want ? n_want : n;
        int wi[3];
        resid_norm_task t = {c, rows, rn, want, {0}};
        quant_plan(c, w, nw, &t.qs, wi);
        cn_pool_run(c->pool, resid_norm_run, &t);
        observe(c, w, nw, c->xb, rows, cn_model_hparams(c->m)->n_embd);
        run_matmuls(c, &t.qs, wi, rows, nw, w, y);
    }
    prof_add(c, t0, step, w, nw, 0);
}

/* y = src · wᵀ for n rows of width k (src quantized first). */
static void quant_matmul(cn_fwd *c, prof_step step, int64_t n, const float *src, int64_t k, const cn_weight *w,
                         float *y) {
    const double t0 = prof_start(c);
    if (n == 1) {
        dec_task d = {.c = c, .mode = DEC_QUANT, .src = src, .k = k, .n_mm = 1, .w = {w}, .y = {y}};
        cn_pool_run(c->pool, dec_run, &d);
    } else {
        int wi;
        quant_set qs;
        quant_plan(c, &w, 1, &qs, &wi);
        quant_task qt = {c->kern, qs.act[0], src, k, n, qs.buf[0], qs.rb[0]};
        cn_pool_run(c->pool, quant_run, &qt);
        observe(c, &w, 1, src, n, k);
        run_matmuls(c, &qs, &wi, n, 1, &w, &y);
    }
    prof_add(c, t0, step, &w, 1, 0);
}

/* hg = act(hg) * hu, then y = hg · wᵀ. */
static void act_matmul(cn_fwd *c, prof_step step, int64_t n, cn_act act, const cn_weight *w, float *y) {
    const double t0 = prof_start(c);
    if (n == 1) {
        dec_task d = {
            .c = c, .mode = DEC_ACT, .act = act, .k = cn_model_hparams(c->m)->n_ff, .n_mm = 1, .w = {w}, .y = {y}};
        cn_pool_run(c->pool, dec_run, &d);
    } else {
        int wi;
        act_task t = {c, n, act, {0}};
        quant_plan(c, &w, 1, &t.qs, &wi);
        cn_pool_run(c->pool, act_run, &t);
        observe(c, &w, 1, c->hg, n, cn_model_hparams(c->m)->n_ff);
        run_matmuls(c, &t.qs, &wi, n, 1, &w, &y);
    }
    prof_add(c, t0, step, &w, 1, 0);
}

/* Biases, q/k norms, RoPE and the q pre-scale of every row (one row: on this thread). */
static void rope_qk(cn_fwd *c, const cn_layer *L, const float *cs, int64_t n) {
    const double t0 = prof_start(c);
    if (n == 1) {
        qk_row(c, L, cs, 0);
    } else {
        qk_task t = {c, L, cs, n};
        cn_pool_run(c->pool, qk_run, &t);
    }
    prof_add(c, t0, ST_ROPE, NULL, 0, 0);
}

/* Checks rows, finds the batch's sequences, checks each continues its cache without
 * gaps, and reserves the blocks. */
static cn_status prepare_batch(cn_fwd *c, const cn_batch *b, cn_kv *kv, int32_t *n_useq, int32_t *n_want,
                               cn_error *err) {
    const cn_hparams *hp = cn_model_hparams(c->m);
    const cn_kv_params *kp = cn_kv_params_of(kv);
    int32_t nu = 0, nw = 0;
    for (int32_t r = 0; r < b->n_rows; r++) {
        const cn_batch_row *row = &b->rows[r];
        if (row->token < 0 || row->token >= hp->n_vocab)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: token %d outside the vocabulary [0, %d)", r,
                          row->token, hp->n_vocab);
        if (row->pos < 0)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: position %d is negative", r, row->pos);
        if (row->pos >= c->n_ctx)
            return cn_err(err, CN_STATUS_LIMIT, "batch row %d: position %d outside the context [0, %d)", r, row->pos,
                          c->n_ctx);
        if (row->seq < 0 || row->seq >= kp->max_seqs)
            return cn_err(err, CN_STATUS_INVALID_ARG, "batch row %d: sequence %d outside [0, %d)", r, row->seq,
                          kp->max_seqs);
        int32_t u = 0;
        while (u < nu && c->useq[u] != row->seq) u++;
        if (u == nu) c->useq[nu++] = row->seq;
        c->row_useq[r] = u;
        for (int32_t r2 = 0; r2 < r; r2++)
            if (c->row_useq[r2] == u && b->rows[r2].pos == row->pos)
                return cn_err(err, CN_STATUS_INVALID_ARG, "batch rows %d and %d: both sequence %d position %d", r2, r,
                              row->seq, row->pos);
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
static cn_status gather_blocks(cn_fwd *c, const cn_batch *b, cn_kv *kv, int32_t il, int32_t nu, cn_error *err) {
    int64_t need = 0;
    for (int32_t u = 0; u < nu; u++) {
        const int32_t *ids;
        need += 2 * cn_kv_seq_blocks(kv, c->useq[u], &ids);
    }
    if (!CN_GROW(c->blk, c->blk_cap, (size_t)need))
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for KV block tables");
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

/* The bytes attention reads from the cache in one layer: each sequence's K and V rows
 * up to its last new position. */
static uint64_t kv_bytes_read(const cn_fwd *c, const cn_kv_params *kp, int32_t nu, int64_t n, int64_t kv_dim) {
    const double per = kp->type == CN_TYPE_F32 ? 4.0 : kp->type == CN_TYPE_F16 ? 2.0 : 34.0 / 32.0;
    int64_t positions = n; /* the new rows */
    for (int32_t u = 0; u < nu; u++) positions += c->useq_len[u];
    return (uint64_t)((double)positions * (double)kv_dim * 2.0 * per);
}

/* Writes the batch's K, V rows into the cache for layer il and attends: att = each row's
 * attention over its sequence's cached positions (a sliding window on SWA layers). */
static cn_status attend(cn_fwd *c, const cn_batch *b, cn_kv *kv, int32_t il, const cn_layer *L, int32_t nu,
                        cn_error *err) {
    const cn_hparams *hp = cn_model_hparams(c->m);
    const cn_arch_desc *arch = cn_model_arch(c->m);
    const cn_kv_params *kp = cn_kv_params_of(kv);
    const int64_t n = b->n_rows, hd = hp->head_dim, KVD = (int64_t)hp->n_head_kv * hd;
    const double t0 = prof_start(c);
    cn_status s;
    for (int64_t r = 0; r < n; r++) {
        s = cn_kv_write(kv, il, b->rows[r].seq, b->rows[r].pos, c->k + r * KVD, c->v + r * KVD, err);
        if (s != CN_STATUS_OK) return s;
        c->pos_hi[r] = b->rows[r].pos;
        c->pos_lo[r] = L->swa && hp->n_swa > 0 ? CN_MAX(0, b->rows[r].pos - hp->n_swa + 1) : 0;
    }
    s = gather_blocks(c, b, kv, il, nu, err);
    if (s != CN_STATUS_OK) return s;
    attn_task at = {c->kern,
                    {.n_rows = (int32_t)n,
                     .n_head = hp->n_head,
                     .n_head_kv = hp->n_head_kv,
                     .head_dim = (int32_t)hd,
                     .q = c->q,
                     .out = c->att,
                     .pos_lo = c->pos_lo,
                     .pos_hi = c->pos_hi,
                     .k_blocks = c->k_rows,
                     .v_blocks = c->v_rows,
                     .block_tokens = kp->block_tokens,
                     .kv_dim = kp->kv_dim,
                     .kv_type = kp->type,
                     .scale = arch->q_prescale ? 1.0f : hp->attn_scale,
                     .scratch = c->attn_scratch,
                     .scratch_stride = CN_ATTN_SCRATCH(c->n_ctx)}};
    cn_pool_run(c->pool, attn_run, &at);
    if (c->prof) prof_add(c, t0, ST_ATTN, NULL, 0, kv_bytes_read(c, kp, nu, n, KVD));
    return CN_STATUS_OK;
}

/* x = each row's token embedding (scaled when the arch says); its RoPE angles for global
 * and sliding layers. */
static void embed_rows(cn_fwd *c, const cn_batch *b) {
    const cn_hparams *hp = cn_model_hparams(c->m);
    const cn_arch_desc *arch = cn_model_arch(c->m);
    const cn_kernels *K = c->kern;
    const int64_t n = b->n_rows, E = hp->n_embd;
    const cn_weight *te = cn_model_tok_embd(c->m);
    const cn_type_traits *tr = cn_type_traits_get(te->type);
    const float embd_scale = sqrtf((float)E);
    const cn_weight *ff = cn_model_rope_freqs(c->m);
    const float *freqs = ff ? ff->data : NULL;
    const double t0 = prof_start(c);
    for (int64_t r = 0; r < n; r++) {
        float *xr = c->x + r * E;
        tr->to_float((const uint8_t *)te->data + (size_t)b->rows[r].token * te->row_bytes, xr, E);
        if (arch->embd_scale)
            for (int64_t i = 0; i < E; i++) xr[i] *= embd_scale;
        K->rope_cache(b->rows[r].pos, hp->n_rot, hp->rope_base, hp->rope_freq_scale, freqs,
                      c->cs_global + r * hp->n_rot);
        if (arch->swa_pattern > 0)
            K->rope_cache(b->rows[r].pos, hp->n_rot, hp->rope_base_swa, 1.0f, freqs, c->cs_swa + r * hp->n_rot);
    }
    prof_add(c, t0, ST_EMBED, NULL, 0, (uint64_t)n * te->row_bytes);
}

/* cn_forward, or cn_forward_embd when embd_out is given (logits_out unused then). */
static cn_status forward(const cn_model *m, cn_fwd *c, const cn_batch *b, cn_kv *kv, float *logits_out, float *embd_out,
                         cn_error *err) {
    const cn_hparams *hp = cn_model_hparams(m);
    const cn_arch_desc *arch = cn_model_arch(m);
    const cn_kernels *K = c->kern;
    if (c->m != m) return cn_err(err, CN_STATUS_INVALID_ARG, "context was created for another model");
    if (b->n_rows < 1 || b->n_rows > c->n_batch_max)
        return cn_err(err, CN_STATUS_INVALID_ARG, "batch of %d rows (context takes 1 to %d)", b->n_rows,
                      c->n_batch_max);
    const int64_t n = b->n_rows, E = hp->n_embd, hd = hp->head_dim;
    const int64_t QD = (int64_t)hp->n_head * hd, KVD = (int64_t)hp->n_head_kv * hd;
    const cn_kv_params *kp = cn_kv_params_of(kv);
    if (kp->n_layer != hp->n_layer || kp->kv_dim != KVD)
        return cn_err(err, CN_STATUS_INVALID_ARG, "KV cache has %d layers of width %d, the model needs %d of %lld",
                      kp->n_layer, kp->kv_dim, hp->n_layer, (long long)KVD);
    if (kp->type != CN_TYPE_F32 && kp->type != CN_TYPE_F16 && !(kp->type == CN_TYPE_Q8_0 && hd % CN_QK8_0 == 0))
        return cn_err(err, CN_STATUS_UNSUPPORTED, "KV cache type %u with head dimension %lld", kp->type, (long long)hd);

    int32_t nu = 0, n_want = 0;
    cn_status s = prepare_batch(c, b, kv, &nu, &n_want, err);
    if (s != CN_STATUS_OK) return s;

    embed_rows(c, b); /* x = embeddings; RoPE angles */
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const cn_layer *L = cn_model_layer(m, il);
        const cn_layer *prev = il > 0 ? cn_model_layer(m, il - 1) : NULL;
        const float *cs = L->swa ? c->cs_swa : c->cs_global;

        /* attention: x (+ the previous layer's FFN branch) → norm → Q, K, V → RoPE */
        const resid_norm attn_in = {prev ? c->tmp : NULL, prev && arch->post_norms ? &prev->post_ffn_norm : NULL,
                                    &L->attn_norm};
        norm_matmuls(c, ST_QKV, n, NULL, n, attn_in, 3, (const cn_weight *[]){&L->wq, &L->wk, &L->wv},
                     (float *[]){c->q, c->k, c->v});
        rope_qk(c, L, cs, n);
        s = attend(c, b, kv, il, L, nu, err); /* K, V into the cache; att = attention over it */
        if (s != CN_STATUS_OK) return s;
        quant_matmul(c, ST_WO, n, c->att, QD, &L->wo, c->tmp);

        /* feed-forward: x += attention branch → norm → gate, up → act → down */
        const resid_norm ffn_in = {c->tmp, arch->post_norms ? &L->post_attn_norm : NULL, &L->ffn_norm};
        norm_matmuls(c, ST_GATE_UP, n, NULL, n, ffn_in, 2, (const cn_weight *[]){&L->w_gate, &L->w_up},
                     (float *[]){c->hg, c->hu});
        act_matmul(c, ST_DOWN, n, arch->act, &L->w_down, c->tmp);
    }

    /* the last FFN branch, the output norm and the LM head, for the rows that want logits */
    if (n_want == 0) return CN_STATUS_OK;
    const cn_weight *last_post = arch->post_norms ? &cn_model_layer(m, hp->n_layer - 1)->post_ffn_norm : NULL;
    if (embd_out) { /* the same rows' final hidden state, after the output norm; no head */
        for (int32_t i = 0; i < n_want; i++) {
            const int64_t r = c->want_rows[i];
            resid_norm_row(K, hp, c->x + r * E, c->tmp + r * E, c->tmp + r * E, last_post, cn_model_output_norm(m),
                           embd_out + (int64_t)i * E);
        }
        return CN_STATUS_OK;
    }
    const resid_norm out_in = {c->tmp, last_post, cn_model_output_norm(m)};
    norm_matmuls(c, ST_HEAD, n, c->want_rows, n_want, out_in, 1, (const cn_weight *[]){cn_model_output(m)},
                 (float *[]){logits_out});
    if (hp->final_softcap > 0.0f) {
        const float cap = hp->final_softcap;
        for (int64_t i = 0; i < (int64_t)n_want * hp->n_vocab; i++) logits_out[i] = tanhf(logits_out[i] / cap) * cap;
    }
    return CN_STATUS_OK;
}

cn_status cn_forward(const cn_model *m, cn_fwd *c, const cn_batch *b, cn_kv *kv, float *logits_out, cn_error *err) {
    return forward(m, c, b, kv, logits_out, NULL, err);
}

cn_status cn_forward_embd(const cn_model *m, cn_fwd *c, const cn_batch *b, cn_kv *kv, float *embd_out, cn_error *err) {
    return forward(m, c, b, kv, NULL, embd_out, err);
}
