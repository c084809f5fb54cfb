/* test_kv.c — the KV cache's block pool against a naive model. The property test drives
 * thousands of random reserve / write / fork / truncate / free operations (fixed seeds)
 * on a small pool and, after every one, compares the cache with a plain per-sequence
 * array of rows and an expected block table per sequence: statuses, block tables,
 * refcounts, free counts, and every written row read back through the block tables
 * (exact for f32, within f16 rounding, within the q8_0 bound). Edge tests cover a full
 * pool (LIMIT, nothing changed), copy-on-write, bad ids and absurd params. The stored
 * formats are decoded here by hand, not through the tensor layer. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"

/* ---- independent decoding of the stored formats ---- */

static float half_to_float(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), e - 25);
    return sign ? -v : v;
}

static uint64_t row_bytes_of(cn_type t, int32_t d) {
    return t == CN_TYPE_F32 ? 4ull * d : t == CN_TYPE_F16 ? 2ull * d : (uint64_t)d / 32 * 34;
}

static void decode_row(cn_type t, const uint8_t *src, float *dst, int32_t d) {
    for (int32_t i = 0; i < d; i++) {
        if (t == CN_TYPE_F32) {
            memcpy(&dst[i], src + 4 * i, 4);
        } else if (t == CN_TYPE_F16) {
            dst[i] = half_to_float((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        } else {
            const uint8_t *blk = src + (i / 32) * 34;
            float scale = half_to_float((uint16_t)(blk[0] | blk[1] << 8));
            dst[i] = scale * (float)(int8_t)blk[2 + i % 32];
        }
    }
}

/* The first element where got is not want as stored in type t, or -1: exact (f32), one
 * f16 rounding, or the q8_0 bound (half a step of amax/127, plus the f16 rounding of the
 * scale). */
static int32_t row_mismatch(cn_type t, const float *got, const float *want, int32_t d) {
    for (int32_t i = 0; i < d; i++) {
        double tol = 0;
        if (t == CN_TYPE_F16) {
            tol = fabs(want[i]) * 0x1p-11 + 0x1p-24;
        } else if (t == CN_TYPE_Q8_0) {
            double amax = 0;
            for (int32_t j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmax(amax, fabs(want[j]));
            tol = amax * (0.5 / 127 + 0x1p-11) * 1.001 + 1e-7;
        }
        if (!(fabs((double)got[i] - want[i]) <= tol)) return i;
    }
    return -1;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int64_t rng_below(uint64_t *s, int64_t n) { return (int64_t)(rng_next(s) % (uint64_t)n); }
static float rng_float(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) * 0x1p-53 * 6 - 3); }

/* ---- the naive model ---- */

#define M_MAXB 64

typedef struct {
    bool live;
    int64_t len, nblk;
    int32_t ids[M_MAXB]; /* the block table we expect */
    float *rows;         /* (cap_tok, n_layer, 2, kv_dim) */
    uint8_t *written;    /* (cap_tok, n_layer) */
} mseq;

typedef struct {
    cn_kv *kv;
    cn_kv_params p;
    mseq *s; /* (max_seqs) */
    int64_t cap_tok;
    int32_t *ref; /* (n_blocks) expected refcounts, recomputed from the tables */
    uint64_t rng;
    long op;                                  /* for messages */
    long n_limit, n_cow, n_cow_limit, n_fork; /* how often the interesting cases came up */
    float *k, *v, *got;                       /* (kv_dim) scratch */
} model;

static void model_init(model *m, cn_kv_params p, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->p = p;
    cn_error e;
    cr_assert_eq(cn_kv_create(&p, &m->kv, &e), CN_STATUS_OK, "%s", e.msg);
    m->cap_tok = p.n_blocks * p.block_tokens;
    cr_assert_leq(p.n_blocks, M_MAXB);
    m->s = calloc((size_t)p.max_seqs, sizeof(mseq));
    for (int32_t q = 0; q < p.max_seqs; q++) {
        m->s[q].rows = calloc((size_t)(m->cap_tok * p.n_layer * 2 * p.kv_dim), sizeof(float));
        m->s[q].written = calloc((size_t)(m->cap_tok * p.n_layer), 1);
    }
    m->ref = calloc((size_t)p.n_blocks, sizeof(int32_t));
    m->k = malloc((size_t)p.kv_dim * sizeof(float));
    m->v = malloc((size_t)p.kv_dim * sizeof(float));
    m->got = malloc((size_t)p.kv_dim * sizeof(float));
    m->rng = seed;
}

static void model_fini(model *m) {
    for (int32_t q = 0; q < m->p.max_seqs; q++) {
        free(m->s[q].rows);
        free(m->s[q].written);
    }
    free(m->s);
    free(m->ref);
    free(m->k);
    free(m->v);
    free(m->got);
    cn_kv_free(m->kv);
}

static void model_refs(model *m, int64_t *n_free, int64_t *n_shared) {
    memset(m->ref, 0, (size_t)m->p.n_blocks * sizeof(int32_t));
    for (int32_t q = 0; q < m->p.max_seqs; q++)
        for (int64_t i = 0; i < m->s[q].nblk; i++) m->ref[m->s[q].ids[i]]++;
    *n_free = *n_shared = 0;
    for (int64_t b = 0; b < m->p.n_blocks; b++) {
        *n_free += m->ref[b] == 0;
        *n_shared += m->ref[b] > 1;
    }
}

static float *mrow(model *m, int32_t q, int64_t pos, int32_t layer, int kvi) {
    return m->s[q].rows + ((pos * m->p.n_layer + layer) * 2 + kvi) * m->p.kv_dim;
}

/* Every invariant, after every operation. */
static void model_check(model *m) {
    cn_error e;
    cr_assert_eq(cn_kv_check(m->kv, &e), CN_STATUS_OK, "op %ld: %s", m->op, e.msg);
    int64_t n_free, n_shared;
    model_refs(m, &n_free, &n_shared);
    cn_kv_stats st;
    cn_kv_get_stats(m->kv, &st);
    int32_t live = 0;
    for (int32_t q = 0; q < m->p.max_seqs; q++) live += m->s[q].live;
    cr_assert_eq(st.n_blocks, m->p.n_blocks);
    cr_assert_eq(st.n_free, n_free, "op %ld: n_free %lld, expected %lld", m->op, (long long)st.n_free,
                 (long long)n_free);
    cr_assert_eq(st.n_shared, n_shared, "op %ld: n_shared", m->op);
    cr_assert_eq(st.n_seqs, live, "op %ld: n_seqs %d, expected %d", m->op, st.n_seqs, live);
    int64_t used = 0;
    for (int32_t b = 0; b < m->p.n_blocks; b++) {
        int32_t rc = cn_kv_block_refcount(m->kv, b);
        cr_assert_eq(rc, m->ref[b], "op %ld: block %d refcount %d, expected %d", m->op, b, rc, m->ref[b]);
        used += rc > 0;
    }
    cr_assert_eq(st.n_free + used, m->p.n_blocks, "op %ld: free + used != n_blocks", m->op);

    int32_t bt = m->p.block_tokens, d = m->p.kv_dim;
    uint64_t rb = row_bytes_of(m->p.type, d);
    for (int32_t q = 0; q < m->p.max_seqs; q++) {
        mseq *s = &m->s[q];
        const int32_t *ids;
        int64_t n = cn_kv_seq_blocks(m->kv, q, &ids);
        cr_assert_eq(n, s->nblk, "op %ld: seq %d has %lld blocks, expected %lld", m->op, q, (long long)n,
                     (long long)s->nblk);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(ids[i], s->ids[i], "op %ld: seq %d table[%lld] = %d, expected %d", m->op, q, (long long)i,
                         ids[i], s->ids[i]);
        cr_assert_eq(cn_kv_seq_len(m->kv, q), s->len, "op %ld: seq %d len", m->op, q);
        for (int64_t pos = 0; pos < s->len; pos++)
            for (int32_t l = 0; l < m->p.n_layer; l++) {
                if (!s->written[pos * m->p.n_layer + l]) continue;
                for (int kvi = 0; kvi < 2; kvi++) {
                    const uint8_t *base = kvi ? cn_kv_block_v(m->kv, l, ids[pos / bt])
                                              : cn_kv_block_k(m->kv, l, ids[pos / bt]);
                    cr_assert_not_null(base);
                    decode_row(m->p.type, base + (uint64_t)(pos % bt) * rb, m->got, d);
                    const float *want = mrow(m, q, pos, l, kvi);
                    int32_t i = row_mismatch(m->p.type, m->got, want, d);
                    cr_assert_eq(i, -1, "op %ld seq %d pos %lld layer %d %s[%d]: read %.9g, wrote %.9g", m->op, q,
                                 (long long)pos, l, kvi ? "V" : "K", i, i >= 0 ? m->got[i] : 0, i >= 0 ? want[i] : 0);
                }
            }
    }
}

/* Takes new block ids from the cache's table at [from, to): each must have been free. */
static void model_take_new(model *m, int32_t q, int64_t from, int64_t to) {
    const int32_t *ids;
    cr_assert_eq(cn_kv_seq_blocks(m->kv, q, &ids), to, "op %ld", m->op);
    for (int64_t i = from; i < to; i++) {
        cr_assert_eq(m->ref[ids[i]], 0, "op %ld: seq %d got block %d, which was held", m->op, q, ids[i]);
        m->ref[ids[i]] = -1; /* taken: a second use in this op would fail the check above */
        m->s[q].ids[i] = ids[i];
    }
}

static void op_reserve(model *m, int32_t q, int64_t n_tok) {
    int64_t n_free, n_shared;
    model_refs(m, &n_free, &n_shared);
    cn_error e;
    cn_status st = cn_kv_seq_reserve(m->kv, q, n_tok, &e);
    int32_t bt = m->p.block_tokens;
    int64_t need = (n_tok + bt - 1) / bt - m->s[q].nblk;
    if (need > n_free) {
        cr_assert_eq(st, CN_STATUS_LIMIT, "op %ld: reserve %lld with %lld free", m->op, (long long)n_tok,
                     (long long)n_free);
        cr_assert(strstr(e.msg, "cache full") != NULL, "%s", e.msg);
        m->n_limit++;
        return;
    }
    cr_assert_eq(st, CN_STATUS_OK, "op %ld: %s", m->op, e.msg);
    if (need > 0) {
        model_take_new(m, q, m->s[q].nblk, m->s[q].nblk + need);
        m->s[q].nblk += need;
    }
    m->s[q].live = true;
}

static void op_write(model *m, int32_t q, int64_t pos, int32_t layer) {
    for (int32_t i = 0; i < m->p.kv_dim; i++) {
        m->k[i] = rng_float(&m->rng);
        m->v[i] = rng_float(&m->rng);
    }
    if (rng_below(&m->rng, 8) == 0) memset(m->k, 0, (size_t)m->p.kv_dim * sizeof(float));
    int64_t n_free, n_shared;
    model_refs(m, &n_free, &n_shared);
    cn_error e;
    cn_status st = cn_kv_write(m->kv, layer, q, pos, m->k, m->v, &e);
    mseq *s = &m->s[q];
    int32_t bt = m->p.block_tokens;
    if (pos < 0 || pos >= s->nblk * bt) {
        cr_assert_eq(st, CN_STATUS_INVALID_ARG, "op %ld: write past the reserved positions", m->op);
        return;
    }
    int64_t bi = pos / bt;
    if (m->ref[s->ids[bi]] > 1) {
        if (n_free == 0) {
            cr_assert_eq(st, CN_STATUS_LIMIT, "op %ld: copy-on-write with no free block", m->op);
            cr_assert(strstr(e.msg, "cache full") != NULL, "%s", e.msg);
            m->n_cow_limit++;
            return;
        }
        cr_assert_eq(st, CN_STATUS_OK, "op %ld: %s", m->op, e.msg);
        /* Only table[bi] changes, to a block that was free. */
        const int32_t *ids;
        cr_assert_eq(cn_kv_seq_blocks(m->kv, q, &ids), s->nblk);
        cr_assert_eq(m->ref[ids[bi]], 0, "op %ld: copy went to held block %d", m->op, ids[bi]);
        s->ids[bi] = ids[bi];
        m->n_cow++;
    } else {
        cr_assert_eq(st, CN_STATUS_OK, "op %ld: %s", m->op, e.msg);
    }
    memcpy(mrow(m, q, pos, layer, 0), m->k, (size_t)m->p.kv_dim * sizeof(float));
    memcpy(mrow(m, q, pos, layer, 1), m->v, (size_t)m->p.kv_dim * sizeof(float));
    s->written[pos * m->p.n_layer + layer] = 1;
    if (s->len <= pos) s->len = pos + 1;
}

static void op_fork(model *m, int32_t src, int32_t dst) {
    cn_error e;
    cn_status st = cn_kv_seq_fork(m->kv, src, dst, &e);
    mseq *a = &m->s[src], *b = &m->s[dst];
    if (src == dst || !a->live || b->nblk > 0 || b->len > 0) {
        cr_assert_eq(st, CN_STATUS_INVALID_ARG, "op %ld: fork %d -> %d should fail", m->op, src, dst);
        return;
    }
    cr_assert_eq(st, CN_STATUS_OK, "op %ld: %s", m->op, e.msg);
    m->n_fork += a->nblk > 0;
    b->live = true;
    b->len = a->len;
    b->nblk = a->nblk;
    memcpy(b->ids, a->ids, sizeof a->ids);
    memcpy(b->rows, a->rows, (size_t)(m->cap_tok * m->p.n_layer * 2 * m->p.kv_dim) * sizeof(float));
    memcpy(b->written, a->written, (size_t)(m->cap_tok * m->p.n_layer));
}

static void op_truncate(model *m, int32_t q, int64_t n_tok) {
    cn_kv_seq_truncate(m->kv, q, n_tok);
    mseq *s = &m->s[q];
    int32_t bt = m->p.block_tokens;
    s->nblk = CN_MIN(s->nblk, (n_tok + bt - 1) / bt);
    s->len = CN_MIN(s->len, n_tok);
    for (int64_t pos = n_tok; pos < m->cap_tok; pos++) memset(s->written + pos * m->p.n_layer, 0, (size_t)m->p.n_layer);
}

static void op_free(model *m, int32_t q) {
    cn_kv_seq_free(m->kv, q);
    mseq *s = &m->s[q];
    s->live = false;
    s->len = s->nblk = 0;
    memset(s->written, 0, (size_t)(m->cap_tok * m->p.n_layer));
}

static void op_invalid(model *m) {
    int32_t bad[] = {-1, m->p.max_seqs, INT32_MAX, INT32_MIN};
    int32_t q = bad[rng_below(&m->rng, 4)];
    cn_error e;
    cr_assert_eq(cn_kv_seq_reserve(m->kv, q, 4, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(m->kv, 0, q, 0, m->k, m->v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_fork(m->kv, 0, q, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_fork(m->kv, q, 0, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(m->kv, m->p.n_layer, 0, 0, m->k, m->v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(m->kv, -1, 0, 0, m->k, m->v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_reserve(m->kv, 0, -1, &e), CN_STATUS_INVALID_ARG);
    const int32_t *ids = (const int32_t *)&e;
    cr_assert_eq(cn_kv_seq_blocks(m->kv, q, &ids), 0);
    cr_assert_null(ids);
    cr_assert_eq(cn_kv_seq_len(m->kv, q), 0);
    cn_kv_seq_truncate(m->kv, q, 0);
    cn_kv_seq_free(m->kv, q);
    cn_kv_seq_truncate(m->kv, 0, -5); /* a negative length is ignored */
}

static void run_property(cn_type type, int32_t kv_dim, uint64_t seed, int n_ops) {
    cn_kv_params p = cn_kv_params_default();
    p.n_layer = 2;
    p.kv_dim = kv_dim;
    p.block_tokens = 4;
    p.n_blocks = 16;
    p.type = type;
    p.max_seqs = 5;
    model m;
    model_init(&m, p, seed);
    int32_t bt = p.block_tokens;
    for (m.op = 0; m.op < n_ops; m.op++) {
        int32_t q = (int32_t)rng_below(&m.rng, p.max_seqs);
        mseq *s = &m.s[q];
        int64_t r = rng_below(&m.rng, 100);
        if (r < 24) {
            op_reserve(&m, q, rng_below(&m.rng, s->len + 3 * bt + 1));
        } else if (r < 27) {
            op_reserve(&m, q, rng_below(&m.rng, m.cap_tok + 8));
        } else if (r < 62) {
            int64_t cap = s->nblk * bt;
            int64_t pos = rng_below(&m.rng, 3) ? CN_MIN(s->len + rng_below(&m.rng, 3) - 1, cap)
                                               : rng_below(&m.rng, cap + 2) - 1;
            op_write(&m, q, pos < -1 ? -1 : pos, (int32_t)rng_below(&m.rng, p.n_layer));
        } else if (r < 74) {
            op_fork(&m, q, (int32_t)rng_below(&m.rng, p.max_seqs));
        } else if (r < 86) {
            op_truncate(&m, q, rng_below(&m.rng, s->len + bt + 1));
        } else if (r < 95) {
            op_free(&m, q);
        } else {
            op_invalid(&m);
        }
        model_check(&m);
    }
    /* The run must have reached the interesting states, or it proves little. */
    cr_assert_gt(m.n_limit, 10, "the pool never ran out (%ld)", m.n_limit);
    cr_assert_gt(m.n_cow, 10, "copy-on-write happened %ld times", m.n_cow);
    cr_assert_gt(m.n_cow_limit, 0, "copy-on-write never met a full pool");
    cr_assert_gt(m.n_fork, 10, "few forks of non-empty sequences (%ld)", m.n_fork);
    for (int32_t q = 0; q < p.max_seqs; q++) op_free(&m, q);
    model_check(&m);
    cn_kv_stats st;
    cn_kv_get_stats(m.kv, &st);
    cr_assert_eq(st.n_free, p.n_blocks, "blocks leaked");
    cr_assert_eq(st.n_seqs, 0);
    model_fini(&m);
}

Test(kv, property_f32) {
    run_property(CN_TYPE_F32, 24, 1, 5000);
    run_property(CN_TYPE_F32, 8, 2, 5000);
}
Test(kv, property_f16) { run_property(CN_TYPE_F16, 40, 3, 5000); }
Test(kv, property_q8_0) { run_property(CN_TYPE_Q8_0, 64, 4, 5000); }

/* ---- edge cases ---- */

static cn_kv *make_kv(cn_type type, int32_t kv_dim, int32_t bt, int64_t n_blocks, int32_t max_seqs) {
    cn_kv_params p = cn_kv_params_default();
    p.n_layer = 2;
    p.kv_dim = kv_dim;
    p.block_tokens = bt;
    p.n_blocks = n_blocks;
    p.type = type;
    p.max_seqs = max_seqs;
    cn_kv *kv = NULL;
    cn_error e;
    cr_assert_eq(cn_kv_create(&p, &kv, &e), CN_STATUS_OK, "%s", e.msg);
    return kv;
}

static void fill(float *x, int32_t n, float base) {
    for (int32_t i = 0; i < n; i++) x[i] = base + 0.25f * (float)i;
}

/* Row pos of seq for layer, K (kvi 0) or V, as f32 (the cache must be f32). */
static const float *f32_row(cn_kv *kv, int32_t layer, int kvi, int32_t seq, int64_t pos) {
    const int32_t *ids;
    int64_t n = cn_kv_seq_blocks(kv, seq, &ids);
    const cn_kv_params *p = cn_kv_params_of(kv);
    cr_assert_lt(pos / p->block_tokens, n);
    int32_t b = ids[pos / p->block_tokens];
    const float *base = kvi ? cn_kv_block_v(kv, layer, b) : cn_kv_block_k(kv, layer, b);
    return base + (pos % p->block_tokens) * p->kv_dim;
}

Test(kv, params_default) {
    cn_kv_params p = cn_kv_params_default();
    cr_assert_eq(p.block_tokens, CN_KV_BLOCK_TOKENS_DEFAULT);
    cr_assert_eq(p.type, CN_TYPE_F16);
    cr_assert_eq(p.max_seqs, 1);
}

Test(kv, limit_when_exhausted_changes_nothing) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 4, 3);
    cn_error e;
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 9, &e), CN_STATUS_OK); /* 3 blocks */
    cn_kv_stats a, b;
    cn_kv_get_stats(kv, &a);
    cr_assert_eq(a.n_free, 1);
    cr_assert_eq(cn_kv_seq_reserve(kv, 1, 5, &e), CN_STATUS_LIMIT); /* needs 2 */
    cr_assert(strstr(e.msg, "cache full") && strstr(e.msg, "2 more blocks"), "%s", e.msg);
    cn_kv_get_stats(kv, &b);
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0, "a failed reserve changed the stats");
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, NULL), 0);
    cr_assert_eq(b.n_seqs, 1, "a failed reserve created the sequence");
    /* Growing an existing sequence past the pool also fails whole. */
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 100, &e), CN_STATUS_LIMIT);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 3);
    cr_assert_eq(cn_kv_seq_reserve(kv, 1, 4, &e), CN_STATUS_OK); /* exactly the last one */
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 1, &e), CN_STATUS_LIMIT);
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 0, &e), CN_STATUS_OK); /* needs nothing */
    cn_kv_get_stats(kv, &b);
    cr_assert_eq(b.n_free, 0);
    cr_assert_eq(b.n_seqs, 3);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv, reserve_is_idempotent_and_never_shrinks) {
    cn_kv *kv = make_kv(CN_TYPE_F16, 8, 4, 8, 1);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 7, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 8, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 2);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 1, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 2);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 9, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 3);
    cr_assert_eq(cn_kv_seq_len(kv, 0), 0, "reserving writes nothing");
    cn_kv_free(kv);
}

Test(kv, write_tracks_len_and_layout) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 8, 1);
    const cn_kv_params *p = cn_kv_params_of(kv);
    cr_assert_eq(p->kv_dim, 8);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 12, NULL), CN_STATUS_OK);
    float k[8], v[8];
    for (int64_t pos = 0; pos < 12; pos++)
        for (int32_t l = 0; l < 2; l++) {
            fill(k, 8, (float)(pos * 100 + l * 10));
            fill(v, 8, (float)(-pos * 100 - l * 10));
            cr_assert_eq(cn_kv_write(kv, l, 0, pos, k, v, NULL), CN_STATUS_OK);
        }
    cr_assert_eq(cn_kv_seq_len(kv, 0), 12);
    /* One block of one layer is a contiguous (block_tokens, kv_dim) slab. */
    const int32_t *ids;
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, &ids), 3);
    const float *slab = cn_kv_block_k(kv, 1, ids[2]);
    cr_assert_eq((uintptr_t)slab % CN_ALIGN, 0);
    for (int32_t t = 0; t < 4; t++)
        for (int32_t i = 0; i < 8; i++) cr_assert_eq(slab[t * 8 + i], (float)((8 + t) * 100 + 10) + 0.25f * (float)i);
    const float *vs = cn_kv_block_v(kv, 0, ids[0]);
    cr_assert_eq(vs[3 * 8 + 1], -300.0f + 0.25f);
    /* Writing below the length keeps the length. */
    cr_assert_eq(cn_kv_write(kv, 0, 0, 2, k, v, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_len(kv, 0), 12);
    /* Beyond what is reserved, bad layer, missing data. */
    cn_error e;
    cr_assert_eq(cn_kv_write(kv, 0, 0, 12, k, v, &e), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(e.msg, "not reserved"), "%s", e.msg);
    cr_assert_eq(cn_kv_write(kv, 0, 0, -1, k, v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(kv, 2, 0, 0, k, v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(kv, 0, 0, 0, NULL, v, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_write(kv, 0, 0, 0, k, NULL, &e), CN_STATUS_INVALID_ARG);
    cr_assert_null(cn_kv_block_k(kv, 0, 8));
    cr_assert_null(cn_kv_block_k(kv, 0, -1));
    cr_assert_null(cn_kv_block_v(kv, 2, 0));
    cr_assert_null(cn_kv_block_v(NULL, 0, 0));
    cn_kv_free(kv);
}

Test(kv, fresh_blocks_read_as_zero) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 2, 1);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 8, NULL), CN_STATUS_OK);
    float k[8], v[8];
    fill(k, 8, 1);
    fill(v, 8, 2);
    for (int64_t pos = 0; pos < 8; pos++)
        for (int32_t l = 0; l < 2; l++) cr_assert_eq(cn_kv_write(kv, l, 0, pos, k, v, NULL), CN_STATUS_OK);
    cn_kv_seq_free(kv, 0);
    /* The same blocks come back (the pool has only two), zeroed in every layer. */
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 8, NULL), CN_STATUS_OK);
    for (int64_t pos = 0; pos < 8; pos++)
        for (int32_t l = 0; l < 2; l++)
            for (int kvi = 0; kvi < 2; kvi++)
                for (int32_t i = 0; i < 8; i++) cr_assert_eq(f32_row(kv, l, kvi, 0, pos)[i], 0.0f);
    cn_kv_free(kv);
}

Test(kv, copy_on_write_keeps_the_other_sequence) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 4, 2);
    float k[8], v[8], k2[8], v2[8];
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 6, NULL), CN_STATUS_OK);
    for (int64_t pos = 0; pos < 6; pos++)
        for (int32_t l = 0; l < 2; l++) {
            fill(k, 8, (float)(pos + 10 * l));
            fill(v, 8, (float)(-pos - 10 * l));
            cr_assert_eq(cn_kv_write(kv, l, 0, pos, k, v, NULL), CN_STATUS_OK);
        }
    cn_error e;
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(cn_kv_seq_len(kv, 1), 6);
    const int32_t *a, *b;
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &b), 2);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, &a), 2);
    cr_assert_eq(a[0], b[0]);
    cr_assert_eq(a[1], b[1]);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_shared, 2);
    cr_assert_eq(st.n_free, 2);
    cr_assert_eq(cn_kv_block_refcount(kv, a[1]), 2);
    int32_t old = a[1];
    /* seq 1 writes layer 1 at position 5: its block 1 is copied, all layers. */
    fill(k2, 8, 99);
    fill(v2, 8, -99);
    cr_assert_eq(cn_kv_write(kv, 1, 1, 5, k2, v2, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &b), 2);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, &a), 2);
    cr_assert_eq(a[1], old);
    cr_assert_neq(b[1], old);
    cr_assert_eq(b[0], a[0]);
    cr_assert_eq(cn_kv_block_refcount(kv, old), 1);
    cr_assert_eq(cn_kv_block_refcount(kv, b[1]), 1);
    for (int64_t pos = 0; pos < 6; pos++)
        for (int32_t l = 0; l < 2; l++) {
            fill(k, 8, (float)(pos + 10 * l));
            fill(v, 8, (float)(-pos - 10 * l));
            cr_assert_arr_eq(f32_row(kv, l, 0, 0, pos), k, sizeof k, "seq 0 changed at %lld", (long long)pos);
            cr_assert_arr_eq(f32_row(kv, l, 1, 0, pos), v, sizeof v);
            bool mine = pos == 5 && l == 1;
            cr_assert_arr_eq(f32_row(kv, l, 0, 1, pos), mine ? k2 : k, sizeof k, "seq 1 at %lld", (long long)pos);
            cr_assert_arr_eq(f32_row(kv, l, 1, 1, pos), mine ? v2 : v, sizeof v);
        }
    /* A second write into the now private block copies nothing. */
    cn_kv_get_stats(kv, &st);
    int64_t free_before = st.n_free;
    cr_assert_eq(cn_kv_write(kv, 0, 1, 4, k2, v2, NULL), CN_STATUS_OK);
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_free, free_before);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv, copy_on_write_limit_changes_nothing) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 2, 2);
    float k[8], v[8], z[8];
    fill(k, 8, 5);
    fill(v, 8, 6);
    fill(z, 8, 77);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 4, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_write(kv, 0, 0, 0, k, v, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 8, NULL), CN_STATUS_OK); /* takes the last block */
    const int32_t *ids;
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &ids), 1);
    int32_t shared = ids[0];
    cn_error e;
    cr_assert_eq(cn_kv_write(kv, 0, 1, 1, z, z, &e), CN_STATUS_LIMIT);
    cr_assert(strstr(e.msg, "cache full") && strstr(e.msg, "shared"), "%s", e.msg);
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &ids), 1);
    cr_assert_eq(ids[0], shared);
    cr_assert_eq(cn_kv_block_refcount(kv, shared), 2);
    cr_assert_eq(cn_kv_seq_len(kv, 1), 1);
    cr_assert_arr_eq(f32_row(kv, 0, 0, 0, 0), k, sizeof k);
    for (int32_t i = 0; i < 8; i++) cr_assert_eq(f32_row(kv, 0, 0, 1, 1)[i], 0.0f);
    /* Once seq 0 lets go, seq 1 owns the block alone and writes in place. */
    cn_kv_seq_free(kv, 0);
    cr_assert_eq(cn_kv_write(kv, 0, 1, 1, z, z, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &ids), 1);
    cr_assert_eq(ids[0], shared);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv, fork_rules) {
    cn_kv *kv = make_kv(CN_TYPE_F16, 8, 4, 8, 3);
    cn_error e;
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_INVALID_ARG, "fork from nothing");
    cr_assert(strstr(e.msg, "does not exist"), "%s", e.msg);
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 5, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_reserve(kv, 1, 1, NULL), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(e.msg, "not empty"), "%s", e.msg);
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 0, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 3, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_fork(kv, -1, 2, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_block_refcount(kv, 0), 1, "a rejected fork shared something");
    /* Truncated to nothing, a sequence is empty again and can be forked into. */
    cn_kv_seq_truncate(kv, 1, 0);
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, NULL), 2);
    /* An existing empty sequence forks into an empty one. */
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 0, NULL), CN_STATUS_OK);
    cn_kv_seq_free(kv, 1);
    cr_assert_eq(cn_kv_seq_fork(kv, 2, 1, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_seqs, 3);
    cr_assert_eq(st.n_free, 6);
    cn_kv_free(kv);
}

Test(kv, truncate_releases_whole_blocks) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 8, 1);
    float k[8] = {0}, v[8] = {0};
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 20, NULL), CN_STATUS_OK); /* 5 blocks */
    for (int64_t pos = 0; pos < 10; pos++) cr_assert_eq(cn_kv_write(kv, 0, 0, pos, k, v, NULL), CN_STATUS_OK);
    cn_kv_seq_truncate(kv, 0, 13); /* past the length: length stays, blocks past 4 go */
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 4);
    cr_assert_eq(cn_kv_seq_len(kv, 0), 10);
    cn_kv_seq_truncate(kv, 0, 5);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 2);
    cr_assert_eq(cn_kv_seq_len(kv, 0), 5);
    cn_kv_seq_truncate(kv, 0, 4);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 1);
    cn_kv_seq_truncate(kv, 0, INT64_MAX);
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, NULL), 1);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_free, 7);
    cr_assert_eq(st.n_seqs, 1, "a truncated sequence still exists");
    cn_kv_seq_free(kv, 0);
    cn_kv_seq_free(kv, 0); /* twice is fine */
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_free, 8);
    cr_assert_eq(st.n_seqs, 0);
    cn_kv_free(kv);
}

Test(kv, null_handles) {
    cn_kv_free(NULL);
    cr_assert_null(cn_kv_params_of(NULL));
    cr_assert_eq(cn_kv_seq_len(NULL, 0), 0);
    cr_assert_eq(cn_kv_seq_blocks(NULL, 0, NULL), 0);
    cr_assert_eq(cn_kv_block_refcount(NULL, 0), -1);
    cn_kv_seq_truncate(NULL, 0, 0);
    cn_kv_seq_free(NULL, 0);
    cn_kv_stats st = {.n_blocks = 5};
    cn_kv_get_stats(NULL, &st);
    cr_assert_eq(st.n_blocks, 0);
    cn_kv_get_stats(NULL, NULL);
    cr_assert_eq(cn_kv_seq_reserve(NULL, 0, 1, NULL), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_check(NULL, NULL), CN_STATUS_INVALID_ARG);
}

static cn_status try_create(cn_kv_params p, cn_error *e) {
    cn_kv *kv = (cn_kv *)&p; /* must be reset to NULL on failure */
    cn_status st = cn_kv_create(&p, &kv, e);
    if (st != CN_STATUS_OK) cr_assert_null(kv);
    cn_kv_free(kv);
    return st;
}

Test(kv, absurd_params) {
    cn_kv_params ok = cn_kv_params_default();
    ok.n_layer = 2;
    ok.kv_dim = 64;
    ok.n_blocks = 4;
    cn_error e;
    cr_assert_eq(try_create(ok, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_params p;
#define EXPECT(field, value, status)                                                \
    do {                                                                            \
        p = ok;                                                                     \
        p.field = value;                                                            \
        cr_assert_eq(try_create(p, &e), status, #field " = " #value ": %s", e.msg); \
        cr_assert_eq(cn_kv_block_bytes(&p) != 0, !strcmp(#field, "n_blocks"));      \
    } while (0)
    EXPECT(n_blocks, 0, CN_STATUS_INVALID_ARG);
    EXPECT(n_blocks, -1, CN_STATUS_INVALID_ARG);
    EXPECT(n_blocks, (int64_t)1 << 62, CN_STATUS_INVALID_ARG);
    EXPECT(n_blocks, (int64_t)INT32_MAX + 1, CN_STATUS_INVALID_ARG);
    EXPECT(n_blocks, INT64_MIN, CN_STATUS_INVALID_ARG);
    EXPECT(kv_dim, 0, CN_STATUS_INVALID_ARG);
    EXPECT(kv_dim, -64, CN_STATUS_INVALID_ARG);
    EXPECT(kv_dim, INT32_MAX, CN_STATUS_INVALID_ARG);
    EXPECT(block_tokens, 0, CN_STATUS_INVALID_ARG);
    EXPECT(block_tokens, -16, CN_STATUS_INVALID_ARG);
    EXPECT(block_tokens, INT32_MAX, CN_STATUS_INVALID_ARG);
    EXPECT(n_layer, 0, CN_STATUS_INVALID_ARG);
    EXPECT(n_layer, INT32_MAX, CN_STATUS_INVALID_ARG);
    EXPECT(max_seqs, 0, CN_STATUS_INVALID_ARG);
    EXPECT(max_seqs, CN_KV_MAX_SEQ + 1, CN_STATUS_INVALID_ARG);
    EXPECT(type, CN_TYPE_Q4_0, CN_STATUS_UNSUPPORTED);
    EXPECT(type, (cn_type)77, CN_STATUS_UNSUPPORTED);
#undef EXPECT
    /* q8_0 needs whole 32-element blocks per row. */
    p = ok;
    p.type = CN_TYPE_Q8_0;
    p.kv_dim = 48;
    cr_assert_eq(try_create(p, &e), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(e.msg, "q8_0"), "%s", e.msg);
    p.kv_dim = 96;
    cr_assert_eq(try_create(p, &e), CN_STATUS_OK, "%s", e.msg);
    /* Every field at its limit: a pool far past CN_KV_MAX_POOL_BYTES, refused before any
     * allocation. */
    p = ok;
    p.n_layer = CN_KV_MAX_LAYERS;
    p.kv_dim = CN_KV_MAX_DIM;
    p.block_tokens = CN_KV_MAX_BLOCK_TOKENS;
    p.n_blocks = INT32_MAX;
    p.type = CN_TYPE_F32;
    cr_assert_eq(try_create(p, &e), CN_STATUS_NO_MEMORY);
    cr_assert(strstr(e.msg, "limit"), "%s", e.msg);
    p = ok;
    p.kv_dim = 4096;
    p.n_layer = 32;
    p.n_blocks = 1 << 20;
    cr_assert_eq(try_create(p, &e), CN_STATUS_NO_MEMORY);
    cr_assert_eq(cn_kv_create(NULL, &(cn_kv *){NULL}, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_create(&ok, NULL, &e), CN_STATUS_INVALID_ARG);
}

Test(kv, budget_helpers) {
    cn_kv_params p = cn_kv_params_default();
    p.n_layer = 2;
    p.kv_dim = 64;
    /* f16: a row is 128 bytes, a 16-token slab 2048, K and V of 2 layers 8192. */
    cr_assert_eq(cn_kv_block_bytes(&p), 8192);
    p.type = CN_TYPE_F32;
    cr_assert_eq(cn_kv_block_bytes(&p), 16384);
    p.type = CN_TYPE_Q8_0; /* 2 × 34-byte blocks a row, 16 rows = 1088 = 17 cache lines */
    cr_assert_eq(cn_kv_block_bytes(&p), 4 * 1088);
    p.kv_dim = 32; /* 544 bytes a slab, rounded up to 576 */
    cr_assert_eq(cn_kv_block_bytes(&p), 4 * 576);
    p.kv_dim = 33;
    cr_assert_eq(cn_kv_block_bytes(&p), 0);
    cr_assert_eq(cn_kv_blocks_for_bytes(&p, 1 << 30), 0);
    cr_assert_eq(cn_kv_block_bytes(NULL), 0);
    cr_assert_eq(cn_kv_blocks_for_bytes(NULL, 1 << 30), 0);

    p.kv_dim = 1024;
    p.n_layer = 32;
    p.type = CN_TYPE_F16;
    uint64_t bb = cn_kv_block_bytes(&p);
    cr_assert_eq(bb, 2ull * 32 * 16 * 1024 * 2);
    uint64_t budget = 1ull << 30;
    int64_t n = cn_kv_blocks_for_bytes(&p, budget);
    cr_assert_leq((uint64_t)n * bb, budget);
    cr_assert_geq((double)n, 0.99 * (double)(budget / bb), "bookkeeping ate the budget: %lld", (long long)n);
    cr_assert_eq(cn_kv_blocks_for_bytes(&p, bb - 1), 0);
    /* A huge budget is capped so that the pool can still be created. */
    n = cn_kv_blocks_for_bytes(&p, UINT64_MAX);
    cr_assert_leq(n, INT32_MAX);
    cr_assert_leq((uint64_t)n * bb, CN_KV_MAX_POOL_BYTES);
    p.n_layer = 1;
    p.kv_dim = 1;
    p.block_tokens = 1;
    cr_assert_eq(cn_kv_blocks_for_bytes(&p, UINT64_MAX), INT32_MAX);
    /* A created pool of blocks_for_bytes blocks works. */
    p = cn_kv_params_default();
    p.n_layer = 2;
    p.kv_dim = 64;
    p.n_blocks = cn_kv_blocks_for_bytes(&p, 100000);
    cr_assert_eq(p.n_blocks, 12, "12 blocks of 8192 bytes fit, with under 140 bytes of bookkeeping each");
    cn_kv *kv = NULL;
    cr_assert_eq(cn_kv_create(&p, &kv, NULL), CN_STATUS_OK);
    cn_kv_free(kv);
}

/* ---- prefix cache ----
 * Rows are a pure function of the whole prefix up to their position (as real K/V are),
 * so any block a lookup or attach returns can be checked against the tokens it was
 * found for. */

static uint64_t prefix_hash_at(const int32_t *tokens, int64_t pos) {
    uint64_t h = 0x243f6a8885a308d3ull;
    for (int64_t i = 0; i <= pos; i++) {
        uint64_t s = h ^ (uint32_t)tokens[i];
        h = rng_next(&s);
    }
    return h;
}

static float prefix_value(uint64_t h, int32_t layer, int kvi, int32_t i) {
    uint64_t s = h ^ ((uint64_t)layer << 40) ^ ((uint64_t)kvi << 36) ^ (uint64_t)i;
    return rng_float(&s);
}

/* Writes every layer of tokens[pos] at pos of seq (f32 cache, kv_dim <= 64). */
static cn_status prefix_write(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t pos) {
    const cn_kv_params *p = cn_kv_params_of(kv);
    uint64_t h = prefix_hash_at(tokens, pos);
    float k[64], v[64];
    for (int32_t l = 0; l < p->n_layer; l++) {
        for (int32_t i = 0; i < p->kv_dim; i++) {
            k[i] = prefix_value(h, l, 0, i);
            v[i] = prefix_value(h, l, 1, i);
        }
        cn_status st = cn_kv_write(kv, l, seq, pos, k, v, NULL);
        if (st != CN_STATUS_OK) return st;
    }
    return CN_STATUS_OK;
}

/* Fails unless block holds tokens[from .. from + block_tokens) after tokens[0 .. from). */
static void expect_block(cn_kv *kv, int32_t block, const int32_t *tokens, int64_t from, const char *what) {
    const cn_kv_params *p = cn_kv_params_of(kv);
    for (int32_t t = 0; t < p->block_tokens; t++) {
        uint64_t h = prefix_hash_at(tokens, from + t);
        for (int32_t l = 0; l < p->n_layer; l++)
            for (int kvi = 0; kvi < 2; kvi++) {
                const float *row = (const float *)(kvi ? cn_kv_block_v(kv, l, block) : cn_kv_block_k(kv, l, block)) +
                                   (int64_t)t * p->kv_dim;
                for (int32_t i = 0; i < p->kv_dim; i++)
                    cr_assert_eq(row[i], prefix_value(h, l, kvi, i),
                                 "%s: block %d position %lld layer %d %s[%d] is not this prefix's", what, block,
                                 (long long)(from + t), l, kvi ? "V" : "K", i);
            }
    }
}

/* A sequence that computed tokens[0 .. n) itself and published them. */
static void prefill(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t n) {
    cn_error e;
    cr_assert_eq(cn_kv_seq_reserve(kv, seq, n, &e), CN_STATUS_OK, "%s", e.msg);
    for (int64_t pos = cn_kv_seq_len(kv, seq); pos < n; pos++)
        cr_assert_eq(prefix_write(kv, seq, tokens, pos), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, seq, tokens, n, &e), CN_STATUS_OK, "%s", e.msg);
}

static const int32_t PA[12] = {5, 9, 2, 7, 1, 1, 8, 3, 4, 6, 2, 9};
static const int32_t PB[12] = {5, 9, 2, 7, 1, 1, 8, 0, 4, 6, 2, 9}; /* differs at 7 */

Test(kv_prefix, publish_lookup_attach) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 8, 4);
    cn_error e;
    prefill(kv, 0, PA, 10); /* blocks 0 and 1 are full and written; block 2 is not */
    const int32_t *own;
    cr_assert_eq(cn_kv_seq_blocks(kv, 0, &own), 3);
    int32_t ids[4] = {-1, -1, -1, -1};
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 12, ids, 4), 2);
    cr_assert_eq(ids[0], own[0]);
    cr_assert_eq(ids[1], own[1]);
    cr_assert_eq(ids[2], -1);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 7, NULL, 4), 1, "only whole blocks match");
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 12, NULL, 1), 1);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PB, 12, NULL, 4), 1, "a different token ends the match");
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA + 4, 8, NULL, 4), 0, "a block is keyed by its whole prefix");
    cr_assert_eq(cn_kv_prefix_lookup(kv, NULL, 8, NULL, 4), 0);
    cr_assert_eq(cn_kv_prefix_lookup(NULL, PA, 8, NULL, 4), 0);

    int64_t reused = -1;
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 1, PB, 11, &reused, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(reused, 4);
    cr_assert_eq(cn_kv_seq_len(kv, 1), 4);
    cr_assert_eq(cn_kv_block_refcount(kv, own[0]), 2);
    prefill(kv, 1, PB, 11);
    const int32_t *b1;
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &b1), 3);
    cr_assert_eq(b1[0], own[0]);
    expect_block(kv, b1[1], PB, 4, "seq 1's own block");
    expect_block(kv, own[1], PA, 4, "seq 0's block after seq 1 computed beside it");
    cr_assert_eq(cn_kv_prefix_lookup(kv, PB, 12, ids, 4), 2);
    cr_assert_eq(ids[1], b1[1]);

    /* Attach needs an empty, valid sequence and tokens. */
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 1, PA, 8, &reused, &e), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(e.msg, "not empty"), "%s", e.msg);
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 4, PA, 8, &reused, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 2, NULL, 8, &reused, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 2, PA, -1, &reused, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, -1, PA, 8, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, 0, NULL, 8, &e), CN_STATUS_INVALID_ARG);
    /* A miss still makes the sequence exist, empty. */
    int32_t other[4] = {1, 2, 3, 4};
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 2, other, 4, &reused, &e), CN_STATUS_OK);
    cr_assert_eq(reused, 0);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_seqs, 3);
    cr_assert_eq(st.n_prefix_queried, 2 + 1);
    cr_assert_eq(st.n_prefix_hits, 1);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv_prefix, freed_blocks_stay_cached_until_needed) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 4, 3);
    cn_error e;
    prefill(kv, 0, PA, 8);
    cn_kv_seq_free(kv, 0);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_cached, 2);
    cr_assert_eq(st.n_free, 4, "cached blocks still count as free");
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 2);
    /* Attaching takes them back out of the cache, with their data. */
    int64_t reused;
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 1, PA, 8, &reused, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(reused, 8);
    const int32_t *ids;
    cr_assert_eq(cn_kv_seq_blocks(kv, 1, &ids), 2);
    expect_block(kv, ids[0], PA, 0, "reattached block 0");
    expect_block(kv, ids[1], PA, 4, "reattached block 1");
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_cached, 0);
    cr_assert_eq(st.n_free, 2);
    cn_kv_seq_free(kv, 1);
    /* The free list goes first: 2 new blocks leave the cache whole... */
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 8, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 2);
    /* ...a third takes the least recently used cached block: the prefix's tail, so the
     * head still matches. A fourth takes the rest. */
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 12, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 1);
    cr_assert_eq(cn_kv_seq_reserve(kv, 2, 16, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 0);
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_evicted, 2);
    cr_assert_eq(st.n_free, 0);
    cr_assert_eq(cn_kv_seq_reserve(kv, 1, 1, &e), CN_STATUS_LIMIT);
    /* Evicted blocks come back zeroed. */
    cr_assert_eq(cn_kv_seq_blocks(kv, 2, &ids), 4);
    for (int32_t i = 0; i < 16; i++) cr_assert_eq(((const float *)cn_kv_block_k(kv, 1, ids[3]))[i], 0.0f);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv_prefix, lru_keeps_the_recently_used) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 4, 3);
    cn_error e;
    static const int32_t PC[8] = {3, 3, 3, 3, 4, 4, 4, 4};
    prefill(kv, 0, PA, 8);
    prefill(kv, 1, PC, 8);
    cn_kv_seq_free(kv, 0); /* PA released first: older */
    cn_kv_seq_free(kv, 1);
    int64_t reused;
    cr_assert_eq(cn_kv_seq_prefix_attach(kv, 2, PA, 8, &reused, &e), CN_STATUS_OK);
    cr_assert_eq(reused, 8);
    cn_kv_seq_free(kv, 2); /* PA used again: now PC is older */
    cr_assert_eq(cn_kv_seq_reserve(kv, 0, 8, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PC, 8, NULL, 4), 0);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 2);
    cn_kv_free(kv);
}

Test(kv_prefix, writing_unpublishes) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 6, 3);
    cn_error e;
    prefill(kv, 0, PA, 12);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 12, NULL, 4), 3);
    /* Rewrite position 5 with another token: block 1 (held once) is changed in place and
     * leaves the cache, and block 2 under it cannot be reached any more. */
    int32_t t[12];
    memcpy(t, PA, sizeof t);
    t[5] = 42;
    cn_kv_seq_truncate(kv, 0, 5);
    cr_assert_eq(prefix_write(kv, 0, t, 5), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 12, NULL, 4), 1);
    cr_assert_eq(cn_kv_prefix_lookup(kv, t, 12, NULL, 4), 1);
    for (int64_t pos = 6; pos < 8; pos++) cr_assert_eq(prefix_write(kv, 0, t, pos), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, 0, t, 12, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, t, 12, NULL, 4), 2, "publish stops at the length");
    /* A shared published block is copied on write instead; the cache keeps the original. */
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_OK);
    cr_assert_eq(prefix_write(kv, 1, PB, 1), CN_STATUS_OK);
    int32_t ids[4];
    cr_assert_eq(cn_kv_prefix_lookup(kv, t, 12, ids, 4), 2);
    expect_block(kv, ids[0], t, 0, "the cached original");
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv_prefix, republish_after_parent_rewrite) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 6, 2);
    cn_error e;
    prefill(kv, 0, PA, 8);
    /* Rewrite block 0 with the same tokens: it is unpublished, block 1 orphaned... */
    cr_assert_eq(prefix_write(kv, 0, PA, 0), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 0);
    /* ...and publishing again restores both, block 1 under its parent's new key. */
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, 0, PA, 8, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 2);
    /* A parent rewritten with other tokens must not keep its old children: seq 1 shares
     * block 0, seq 0 lets go (block 1 stays cached), then seq 1 rewrites block 0 with
     * new tokens and publishes it. Block 1 was computed after PA's first block, not
     * after the new one, so [new block 0, PA's block 1] must miss. */
    cr_assert_eq(cn_kv_seq_fork(kv, 0, 1, &e), CN_STATUS_OK);
    cn_kv_seq_truncate(kv, 1, 4);
    cn_kv_seq_free(kv, 0);
    int32_t t[8] = {7, 7, 7, 7, PA[4], PA[5], PA[6], PA[7]};
    for (int64_t pos = 0; pos < 4; pos++) cr_assert_eq(prefix_write(kv, 1, t, pos), CN_STATUS_OK);
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, 1, t, 4, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, t, 4, NULL, 4), 1);
    cr_assert_eq(cn_kv_prefix_lookup(kv, t, 8, NULL, 4), 1, "an orphan was matched");
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 0);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_cached, 1, "the orphan stays cached until it ages out");
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_seq_free(kv, 1);
    prefill(kv, 0, PA, 8);
    /* Publishing other tokens over published blocks changes nothing. */
    cr_assert_eq(cn_kv_seq_prefix_publish(kv, 0, PB, 8, &e), CN_STATUS_OK);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PB, 8, NULL, 4), 1);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 8, NULL, 4), 2);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv_prefix, duplicate_prefixes_share_one_entry) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 16, 4, 8, 2);
    cn_error e;
    prefill(kv, 0, PA, 12);
    prefill(kv, 1, PA, 12); /* computed again without attach */
    int32_t ids[4];
    const int32_t *own0;
    cn_kv_seq_blocks(kv, 0, &own0);
    cr_assert_eq(cn_kv_prefix_lookup(kv, PA, 12, ids, 4), 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(ids[i], own0[i]);
    cn_kv_seq_free(kv, 0);
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_cached, 3);
    cn_kv_seq_free(kv, 1);
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_cached, 3, "the unpublished copies went to the free list");
    cr_assert_eq(st.n_free, 8);
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

/* Random requests over a few shared prompts: attach, prefill, publish, decode, fork,
 * truncate, free on a small pool. After every step the cache must be consistent, every
 * sequence's rows must be its own prefix's, and every block a lookup returns must hold
 * the prefix it was found for. */
#define PP_SEQS 6
#define PP_CAP 64

typedef struct {
    bool live;
    int64_t len;
    int32_t tokens[PP_CAP];
} pseq;

static void prefix_check_all(cn_kv *kv, pseq *s, const int32_t (*base)[PP_CAP], long op) {
    cn_error e;
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "op %ld: %s", op, e.msg);
    const cn_kv_params *p = cn_kv_params_of(kv);
    int32_t bt = p->block_tokens;
    for (int32_t q = 0; q < PP_SEQS; q++) {
        cr_assert_eq(cn_kv_seq_len(kv, q), s[q].len, "op %ld: seq %d length", op, q);
        const int32_t *ids;
        int64_t n = cn_kv_seq_blocks(kv, q, &ids);
        cr_assert_geq(n * bt, s[q].len);
        for (int64_t pos = 0; pos < s[q].len; pos++) {
            uint64_t h = prefix_hash_at(s[q].tokens, pos);
            for (int32_t l = 0; l < p->n_layer; l++) {
                const float *k = (const float *)cn_kv_block_k(kv, l, ids[pos / bt]) + (pos % bt) * p->kv_dim;
                for (int32_t i = 0; i < p->kv_dim; i++)
                    cr_assert_eq(k[i], prefix_value(h, l, 0, i),
                                 "op %ld: seq %d position %lld layer %d holds another prefix", op, q, (long long)pos,
                                 l);
            }
        }
    }
    for (int b = 0; b < 3; b++) {
        int32_t ids[PP_CAP];
        int64_t n = cn_kv_prefix_lookup(kv, base[b], PP_CAP, ids, PP_CAP);
        for (int64_t i = 0; i < n; i++) expect_block(kv, ids[i], base[b], i * bt, "lookup hit");
    }
}

static void prefix_property(uint64_t seed, int n_ops) {
    cn_kv *kv = make_kv(CN_TYPE_F32, 8, 4, 24, PP_SEQS);
    int32_t bt = 4;
    uint64_t rng = seed;
    int32_t base[3][PP_CAP];
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < PP_CAP; i++) base[b][i] = (int32_t)rng_below(&rng, 1000);
    pseq s[PP_SEQS];
    memset(s, 0, sizeof s);
    cn_error e;
    long n_reused = 0;
    for (long op = 0; op < n_ops; op++) {
        int32_t q = (int32_t)rng_below(&rng, PP_SEQS);
        int64_t r = rng_below(&rng, 100);
        pseq *x = &s[q];
        if (r < 30) { /* a new request on seq q */
            cn_kv_seq_free(kv, q);
            x->live = false;
            x->len = 0;
            const int32_t *src = base[rng_below(&rng, 3)];
            int64_t n = 1 + rng_below(&rng, 28);
            memcpy(x->tokens, src, sizeof x->tokens);
            for (int64_t i = n - rng_below(&rng, 3); i < n; i++)
                if (i >= 0) x->tokens[i] = (int32_t)rng_below(&rng, 4);
            int64_t expect = cn_kv_prefix_lookup(kv, x->tokens, n - 1, NULL, PP_CAP) * bt, reused;
            cr_assert_eq(cn_kv_seq_prefix_attach(kv, q, x->tokens, n - 1, &reused, &e), CN_STATUS_OK, "%s", e.msg);
            cr_assert_eq(reused, expect, "op %ld", op);
            x->live = true;
            x->len = reused;
            n_reused += reused > 0;
            if (cn_kv_seq_reserve(kv, q, n, &e) != CN_STATUS_OK) {
                cr_assert_eq(e.status, CN_STATUS_LIMIT);
            } else {
                for (int64_t pos = reused; pos < n; pos++)
                    cr_assert_eq(prefix_write(kv, q, x->tokens, pos), CN_STATUS_OK, "op %ld", op);
                x->len = n;
                cr_assert_eq(cn_kv_seq_prefix_publish(kv, q, x->tokens, n, &e), CN_STATUS_OK);
            }
        } else if (r < 60) { /* decode one token */
            if (!x->live || x->len >= PP_CAP) continue;
            x->tokens[x->len] = rng_below(&rng, 2) ? base[0][x->len] : (int32_t)rng_below(&rng, 4);
            if (cn_kv_seq_reserve(kv, q, x->len + 1, &e) == CN_STATUS_OK &&
                prefix_write(kv, q, x->tokens, x->len) == CN_STATUS_OK) {
                x->len++;
                if (rng_below(&rng, 3) == 0)
                    cr_assert_eq(cn_kv_seq_prefix_publish(kv, q, x->tokens, x->len, &e), CN_STATUS_OK);
            }
        } else if (r < 72) {
            int32_t d = (int32_t)rng_below(&rng, PP_SEQS);
            if (cn_kv_seq_fork(kv, q, d, &e) == CN_STATUS_OK) s[d] = *x;
        } else if (r < 85) {
            int64_t n = rng_below(&rng, x->len + 1);
            cn_kv_seq_truncate(kv, q, n);
            x->len = n;
        } else {
            cn_kv_seq_free(kv, q);
            x->live = false;
            x->len = 0;
        }
        prefix_check_all(kv, s, (const int32_t(*)[PP_CAP])base, op);
    }
    cn_kv_stats st;
    cn_kv_get_stats(kv, &st);
    cr_assert_gt(n_reused, 20, "prefixes were rarely reused (%ld)", n_reused);
    cr_assert_gt(st.n_evicted, 20, "the cache rarely filled (%lld evictions)", (long long)st.n_evicted);
    for (int32_t q = 0; q < PP_SEQS; q++) cn_kv_seq_free(kv, q);
    cn_kv_get_stats(kv, &st);
    cr_assert_eq(st.n_free, 24, "blocks leaked");
    cr_assert_eq(cn_kv_check(kv, &e), CN_STATUS_OK, "%s", e.msg);
    cn_kv_free(kv);
}

Test(kv_prefix, property) {
    prefix_property(11, 3000);
    prefix_property(12, 3000);
}
