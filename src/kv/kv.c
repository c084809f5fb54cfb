/* kv.c — the KV cache as storage: a pool of fixed-size blocks allocated once, block
 * tables per sequence, reference counts with copy-on-write, and a prefix cache. It
 * decides nothing about who gets blocks (the scheduler does) and knows no architecture.
 *
 * Layout. One allocation (2 MiB aligned, on transparent huge pages) holds the blocks one
 * after another, each (n_layer, K then V, block_tokens, kv_dim) in the pool's type: block
 * b's K for layer l is one contiguous (block_tokens, kv_dim) slab, so attention over a
 * sequence reads one slab per block, and all of a block's slabs sit together, so the
 * blocks a sequence uses share few huge pages (decode reads them all every token: few TLB
 * misses) and a fresh block faults in at most one page (a layer-major layout put every
 * layer's slab in a different huge page: the first token of `cinder run` zeroed 120 MB).
 * Each slab's stride is rounded up to CN_ALIGN so every slab starts on a cache line. A
 * block taken from the free list is zeroed (every layer), so positions never written
 * read as 0, not as stale data: attention that touches a whole block stays finite.
 *
 * Ownership. A block is in exactly one state: on the free list (ref 0), held (ref > 0 =
 * the number of block tables that contain it), or cached (ref 0, published, on the LRU
 * list). Forks share blocks; cn_kv_write copies a shared block first (all layers, K and
 * V) so the other holders never see the write. Releasing a table walks it tail first, so
 * a prefix's later blocks become least recently used before its earlier ones.
 *
 * Prefix cache. A published block carries a key: the cached block before it (its parent,
 * -1 at the root) with that parent's generation, and its own block_tokens tokens. The
 * key's 64-bit hash only picks a bucket; a lookup compares parent, generation and tokens
 * exactly, so a hash collision costs a comparison, never a wrong prefix. Walking from the
 * root, a match at depth i thus means the whole prefix up to block i is equal. When a
 * block stops being published (evicted, or written into) its generation rises, which
 * orphans its children without touching them; orphans are never matched and age out of
 * the LRU list. Cached blocks are reclaimed (oldest first) only when the free list is
 * empty, so the cache costs no capacity: n_free counts them as free. */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

#include "tensor/tensor.h"

typedef struct {
    int32_t ref;                /* block tables holding this block */
    int32_t lru_prev, lru_next; /* links while cached, else -1 */
    int32_t hash_next;          /* bucket chain while published */
    int32_t parent;             /* published: the cached block before it, -1 at the root */
    uint32_t parent_gen;        /* the parent's generation when this block was published */
    uint32_t gen;               /* rises each time the block stops being published */
    bool published;
    uint64_t key; /* hash of (parent, parent_gen, tokens) */
} kv_block;

typedef struct {
    int32_t *blocks; /* (cap) block ids in position order; n in use */
    int64_t n;
    size_t cap;
    int64_t len; /* one past the highest position written */
    bool live;   /* reserved (or forked/attached) and not freed since */
} kv_seq;

struct cn_kv {
    cn_kv_params p;
    uint64_t row_bytes;        /* one position of one layer, K or V */
    uint64_t slab_bytes;       /* (block_tokens, kv_dim) rounded up to CN_ALIGN */
    uint8_t *data;             /* (n_blocks, n_layer, 2, slab_bytes) */
    cn_from_float_fn quantize; /* Q8_0 only */

    kv_block *blocks;  /* (n_blocks) */
    int32_t *free_ids; /* (n_blocks) stack; n_free_list on it */
    int64_t n_free_list;
    int32_t *tokens;  /* (n_blocks, block_tokens) of published blocks */
    int32_t *buckets; /* (n_buckets) heads of hash chains, -1 when empty */
    uint64_t bucket_mask;
    int32_t lru_head, lru_tail; /* head = least recently released */

    kv_seq *seqs; /* (max_seqs) */
    int32_t n_seqs;
    int64_t n_shared, n_cached, n_prefix_queried, n_prefix_hits, n_evicted;
};

/* Per-block bookkeeping beside the data, for budgeting. */
static uint64_t meta_bytes_per_block(int32_t block_tokens) {
    return sizeof(kv_block) + sizeof(int32_t) /* free list */ + 2 * sizeof(int32_t) /* buckets */ +
           (uint64_t)block_tokens * sizeof(int32_t);
}

cn_kv_params cn_kv_params_default(void) {
    cn_kv_params p = {0};
    p.block_tokens = CN_KV_BLOCK_TOKENS_DEFAULT;
    p.type = CN_TYPE_F16;
    p.max_seqs = 1;
    return p;
}

/* Validates everything but n_blocks and computes the per-block geometry. */
static cn_status check_shape(const cn_kv_params *p, uint64_t *row_bytes, uint64_t *slab_bytes, cn_error *err) {
    if (!p) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: params are NULL");
    if (p->n_layer < 1 || p->n_layer > CN_KV_MAX_LAYERS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: n_layer %d is outside 1..%d", p->n_layer, CN_KV_MAX_LAYERS);
    if (p->kv_dim < 1 || p->kv_dim > CN_KV_MAX_DIM)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: kv_dim %d is outside 1..%d", p->kv_dim, CN_KV_MAX_DIM);
    if (p->block_tokens < 1 || p->block_tokens > CN_KV_MAX_BLOCK_TOKENS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: block_tokens %d is outside 1..%d", p->block_tokens,
                      CN_KV_MAX_BLOCK_TOKENS);
    if (p->max_seqs < 1 || p->max_seqs > CN_KV_MAX_SEQ)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: max_seqs %d is outside 1..%d", p->max_seqs, CN_KV_MAX_SEQ);
    if (p->type != CN_TYPE_F16 && p->type != CN_TYPE_F32 && p->type != CN_TYPE_Q8_0)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "kv: cache type %d is not supported (f16, f32 or q8_0)",
                      (int)p->type);
    uint64_t rb = cn_type_row_bytes(p->type, p->kv_dim);
    if (rb == 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: kv_dim %d is not a whole number of q8_0 blocks (32)", p->kv_dim);
    /* Both factors are capped above, so these products fit in 64 bits. */
    uint64_t slab = rb * (uint64_t)p->block_tokens;
    slab = (slab + CN_ALIGN - 1) / CN_ALIGN * CN_ALIGN;
    *row_bytes = rb;
    *slab_bytes = slab;
    return CN_STATUS_OK;
}

uint64_t cn_kv_block_bytes(const cn_kv_params *p) {
    uint64_t rb, slab;
    if (check_shape(p, &rb, &slab, NULL) != CN_STATUS_OK) return 0;
    return slab * 2 * (uint64_t)p->n_layer;
}

int64_t cn_kv_blocks_for_bytes(const cn_kv_params *p, uint64_t n_bytes) {
    uint64_t bb = cn_kv_block_bytes(p);
    if (bb == 0) return 0;
    uint64_t n = n_bytes / (bb + meta_bytes_per_block(p->block_tokens));
    uint64_t cap = CN_KV_MAX_POOL_BYTES / bb;
    if (cap > INT32_MAX) cap = INT32_MAX;
    return (int64_t)CN_MIN(n, cap);
}

void cn_kv_free(cn_kv *kv) {
    if (!kv) return;
    if (kv->seqs)
        for (int32_t s = 0; s < kv->p.max_seqs; s++) free(kv->seqs[s].blocks);
    free(kv->seqs);
    free(kv->blocks);
    free(kv->free_ids);
    free(kv->tokens);
    free(kv->buckets);
    cn_free_aligned(kv->data);
    free(kv);
}

/* malloc of count × size, NULL on overflow. */
static void *alloc_array(uint64_t count, uint64_t size) {
    uint64_t n;
    if (!cn_mul_ok(count, size, &n) || n > SIZE_MAX) return NULL;
    return malloc(n ? n : 1);
}

cn_status cn_kv_create(const cn_kv_params *p, cn_kv **out, cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: out is NULL");
    *out = NULL;
    uint64_t row_bytes, slab_bytes;
    cn_status st = check_shape(p, &row_bytes, &slab_bytes, err);
    if (st != CN_STATUS_OK) return st;
    if (p->n_blocks < 1 || p->n_blocks > INT32_MAX)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: n_blocks %lld is outside 1..%d", (long long)p->n_blocks,
                      INT32_MAX);
    uint64_t data_bytes;
    if (!cn_mul_ok(slab_bytes * 2 * (uint64_t)p->n_layer, (uint64_t)p->n_blocks, &data_bytes) ||
        data_bytes > CN_KV_MAX_POOL_BYTES || data_bytes > SIZE_MAX)
        return cn_err(err, CN_STATUS_NO_MEMORY, "kv: %lld blocks of %llu bytes exceed the pool limit of %llu bytes",
                      (long long)p->n_blocks, (unsigned long long)(slab_bytes * 2 * p->n_layer),
                      (unsigned long long)CN_KV_MAX_POOL_BYTES);

    cn_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return cn_err(err, CN_STATUS_NO_MEMORY, "kv: out of memory");
    kv->p = *p;
    kv->row_bytes = row_bytes;
    kv->slab_bytes = slab_bytes;
    if (p->type == CN_TYPE_Q8_0) {
        const cn_type_traits *t = cn_type_traits_get(CN_TYPE_Q8_0);
        kv->quantize = t ? t->from_float_ref : NULL;
        if (!kv->quantize) {
            cn_kv_free(kv);
            return cn_err(err, CN_STATUS_UNSUPPORTED, "kv: no q8_0 quantizer available");
        }
    }
    int64_t n = p->n_blocks;
    uint64_t n_buckets = 1;
    while (n_buckets < (uint64_t)n) n_buckets <<= 1;
    kv->bucket_mask = n_buckets - 1;
    kv->data = cn_alloc_huge((size_t)data_bytes);
    kv->blocks = alloc_array((uint64_t)n, sizeof(kv_block));
    kv->free_ids = alloc_array((uint64_t)n, sizeof(int32_t));
    kv->tokens = alloc_array((uint64_t)n * (uint64_t)p->block_tokens, sizeof(int32_t));
    kv->buckets = alloc_array(n_buckets, sizeof(int32_t));
    kv->seqs = calloc((size_t)p->max_seqs, sizeof(kv_seq));
    if (!kv->data || !kv->blocks || !kv->free_ids || !kv->tokens || !kv->buckets || !kv->seqs) {
        cn_kv_free(kv);
        return cn_err(err, CN_STATUS_NO_MEMORY, "kv: cannot allocate %lld blocks (%llu bytes of cache)", (long long)n,
                      (unsigned long long)data_bytes);
    }
    for (int64_t b = 0; b < n; b++) {
        kv->blocks[b] = (kv_block){.lru_prev = -1, .lru_next = -1, .hash_next = -1, .parent = -1};
        /* Stacked so that block 0 is handed out first. */
        kv->free_ids[b] = (int32_t)(n - 1 - b);
    }
    kv->n_free_list = n;
    for (uint64_t i = 0; i < n_buckets; i++) kv->buckets[i] = -1;
    kv->lru_head = kv->lru_tail = -1;
    *out = kv;
    return CN_STATUS_OK;
}

const cn_kv_params *cn_kv_params_of(const cn_kv *kv) { return kv ? &kv->p : NULL; }

static bool seq_ok(const cn_kv *kv, int32_t seq) { return kv && seq >= 0 && seq < kv->p.max_seqs; }

static uint8_t *slab(const cn_kv *kv, int32_t layer, int kv_index, int32_t block) {
    uint64_t i = ((uint64_t)block * (uint64_t)kv->p.n_layer + (uint64_t)layer) * 2 + (uint64_t)kv_index;
    return kv->data + i * kv->slab_bytes;
}

/* A whole block (every layer's K and V slab) is one run: its bytes. */
static size_t block_bytes(const cn_kv *kv) { return (size_t)kv->slab_bytes * 2 * (size_t)kv->p.n_layer; }

/* ---- prefix keys and the hash table ---- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t prefix_key(int32_t parent, uint32_t parent_gen, const int32_t *tokens, int32_t n) {
    uint64_t h = mix64(((uint64_t)(uint32_t)parent << 32 | parent_gen) ^ 0x6b76636163686531ull);
    for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint32_t)tokens[i]) + (uint64_t)i;
    return h;
}

/* The published block with exactly this parent, generation and tokens, or -1. */
static int32_t prefix_find(const cn_kv *kv, uint64_t key, int32_t parent, uint32_t parent_gen, const int32_t *tokens) {
    int32_t bt = kv->p.block_tokens;
    for (int32_t b = kv->buckets[key & kv->bucket_mask]; b >= 0; b = kv->blocks[b].hash_next) {
        const kv_block *m = &kv->blocks[b];
        if (m->key == key && m->parent == parent && m->parent_gen == parent_gen &&
            memcmp(kv->tokens + (int64_t)b * bt, tokens, (size_t)bt * sizeof(int32_t)) == 0)
            return b;
    }
    return -1;
}

static void prefix_insert(cn_kv *kv, int32_t b, uint64_t key, int32_t parent, uint32_t parent_gen,
                          const int32_t *tokens) {
    kv_block *m = &kv->blocks[b];
    int32_t bt = kv->p.block_tokens;
    memcpy(kv->tokens + (int64_t)b * bt, tokens, (size_t)bt * sizeof(int32_t));
    m->key = key;
    m->parent = parent;
    m->parent_gen = parent_gen;
    m->published = true;
    int32_t *head = &kv->buckets[key & kv->bucket_mask];
    m->hash_next = *head;
    *head = b;
}

static void prefix_remove(cn_kv *kv, int32_t b) {
    kv_block *m = &kv->blocks[b];
    int32_t *link = &kv->buckets[m->key & kv->bucket_mask];
    while (*link != b) link = &kv->blocks[*link].hash_next;
    *link = m->hash_next;
    m->hash_next = -1;
    m->parent = -1;
    m->published = false;
    m->gen++; /* orphans the blocks published under this one */
}

/* ---- the LRU list of cached blocks ---- */

static void lru_push(cn_kv *kv, int32_t b) {
    kv_block *m = &kv->blocks[b];
    m->lru_prev = kv->lru_tail;
    m->lru_next = -1;
    if (kv->lru_tail >= 0) kv->blocks[kv->lru_tail].lru_next = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

static void lru_remove(cn_kv *kv, int32_t b) {
    kv_block *m = &kv->blocks[b];
    if (m->lru_prev >= 0) kv->blocks[m->lru_prev].lru_next = m->lru_next;
    else kv->lru_head = m->lru_next;
    if (m->lru_next >= 0) kv->blocks[m->lru_next].lru_prev = m->lru_prev;
    else kv->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = -1;
    kv->n_cached--;
}

/* ---- block ownership ---- */

static int64_t n_available(const cn_kv *kv) { return kv->n_free_list + kv->n_cached; }

/* A block with ref 1, zeroed unless the caller overwrites it at once: from the free
 * list, else the least recently cached one. The caller has checked n_available(kv) > 0. */
static int32_t block_take(cn_kv *kv, bool zero) {
    int32_t b;
    if (kv->n_free_list > 0) {
        b = kv->free_ids[--kv->n_free_list];
    } else {
        b = kv->lru_head;
        lru_remove(kv, b);
        prefix_remove(kv, b);
        kv->n_evicted++;
    }
    if (zero) memset(slab(kv, 0, 0, b), 0, block_bytes(kv));
    kv->blocks[b].ref = 1;
    return b;
}

static void block_acquire(cn_kv *kv, int32_t b) {
    kv_block *m = &kv->blocks[b];
    if (m->ref == 0) lru_remove(kv, b); /* a held block is never free-listed, only cached */
    if (++m->ref == 2) kv->n_shared++;
}

static void block_release(cn_kv *kv, int32_t b) {
    kv_block *m = &kv->blocks[b];
    if (m->ref-- == 2) kv->n_shared--;
    if (m->ref > 0) return;
    if (m->published) lru_push(kv, b);
    else kv->free_ids[kv->n_free_list++] = b;
}

static cn_status seq_grow(kv_seq *s, int64_t need, cn_error *err) {
    if (!CN_GROW(s->blocks, s->cap, (size_t)need))
        return cn_err(err, CN_STATUS_NO_MEMORY, "kv: cannot grow a block table");
    return CN_STATUS_OK;
}

static void seq_mark_live(cn_kv *kv, kv_seq *s) {
    if (!s->live) kv->n_seqs++;
    s->live = true;
}

/* Drops the table's blocks from index keep on, last first (see the LRU note on top). */
static void seq_release_from(cn_kv *kv, kv_seq *s, int64_t keep) {
    while (s->n > keep) block_release(kv, s->blocks[--s->n]);
}

/* ---- sequences ---- */

cn_status cn_kv_seq_reserve(cn_kv *kv, int32_t seq, int64_t n_tokens, cn_error *err) {
    if (!seq_ok(kv, seq)) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: sequence id %d is out of range", seq);
    if (n_tokens < 0) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: cannot reserve %lld tokens", (long long)n_tokens);
    kv_seq *s = &kv->seqs[seq];
    int32_t bt = kv->p.block_tokens;
    int64_t want = n_tokens / bt + (n_tokens % bt != 0);
    int64_t need = want - s->n;
    if (need > n_available(kv))
        return cn_err(err, CN_STATUS_LIMIT,
                      "kv: cache full: sequence %d needs %lld more blocks for %lld tokens, %lld free", seq,
                      (long long)need, (long long)n_tokens, (long long)n_available(kv));
    if (need > 0) {
        cn_status st = seq_grow(s, want, err);
        if (st != CN_STATUS_OK) return st;
        while (s->n < want) s->blocks[s->n++] = block_take(kv, true);
    }
    seq_mark_live(kv, s);
    return CN_STATUS_OK;
}

int64_t cn_kv_seq_len(const cn_kv *kv, int32_t seq) { return seq_ok(kv, seq) ? kv->seqs[seq].len : 0; }

void cn_kv_seq_truncate(cn_kv *kv, int32_t seq, int64_t n_tokens) {
    if (!seq_ok(kv, seq) || n_tokens < 0) return;
    kv_seq *s = &kv->seqs[seq];
    int32_t bt = kv->p.block_tokens;
    seq_release_from(kv, s, n_tokens / bt + (n_tokens % bt != 0));
    if (s->len > n_tokens) s->len = n_tokens;
}

void cn_kv_seq_free(cn_kv *kv, int32_t seq) {
    if (!seq_ok(kv, seq)) return;
    kv_seq *s = &kv->seqs[seq];
    seq_release_from(kv, s, 0);
    s->len = 0;
    if (s->live) kv->n_seqs--;
    s->live = false;
}

cn_status cn_kv_seq_fork(cn_kv *kv, int32_t src, int32_t dst, cn_error *err) {
    if (!seq_ok(kv, src) || !seq_ok(kv, dst))
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: fork %d -> %d: sequence id out of range", src, dst);
    if (src == dst) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: cannot fork sequence %d into itself", src);
    kv_seq *s = &kv->seqs[src], *d = &kv->seqs[dst];
    if (!s->live) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: fork from sequence %d, which does not exist", src);
    if (d->n > 0 || d->len > 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: fork into sequence %d, which is not empty (%lld blocks)", dst,
                      (long long)d->n);
    cn_status st = seq_grow(d, s->n, err);
    if (st != CN_STATUS_OK) return st;
    for (int64_t i = 0; i < s->n; i++) {
        d->blocks[i] = s->blocks[i];
        block_acquire(kv, s->blocks[i]);
    }
    d->n = s->n;
    d->len = s->len;
    seq_mark_live(kv, d);
    return CN_STATUS_OK;
}

/* ---- data ---- */

static void store_row(const cn_kv *kv, const float *x, uint8_t *dst) {
    int32_t n = kv->p.kv_dim;
    switch (kv->p.type) {
    case CN_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case CN_TYPE_F16: {
        cn_f32_to_f16_row(x, (uint16_t *)(void *)dst, n);
        break;
    }
    default: /* Q8_0, the only other type create accepts */ kv->quantize(x, dst, n); break;
    }
}

cn_status cn_kv_write(cn_kv *kv, int32_t layer, int32_t seq, int64_t pos, const float *k, const float *v,
                      cn_error *err) {
    if (!seq_ok(kv, seq)) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: sequence id %d is out of range", seq);
    if (layer < 0 || layer >= kv->p.n_layer)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: layer %d is outside 0..%d", layer, kv->p.n_layer - 1);
    if (!k || !v) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: write without K or V data");
    kv_seq *s = &kv->seqs[seq];
    int32_t bt = kv->p.block_tokens;
    if (pos < 0 || pos >= s->n * bt)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "kv: position %lld of sequence %d is not reserved (%lld positions are)", (long long)pos, seq,
                      (long long)(s->n * bt));
    int64_t i = pos / bt;
    int32_t b = s->blocks[i];
    if (kv->blocks[b].ref > 1) {
        if (n_available(kv) == 0)
            return cn_err(err, CN_STATUS_LIMIT,
                          "kv: cache full: writing sequence %d position %lld must copy shared "
                          "block %d and no block is free",
                          seq, (long long)pos, b);
        int32_t c = block_take(kv, false);
        memcpy(slab(kv, 0, 0, c), slab(kv, 0, 0, b), block_bytes(kv));
        block_release(kv, b);
        s->blocks[i] = c;
        b = c;
    } else if (kv->blocks[b].published) {
        prefix_remove(kv, b); /* its contents stop matching its key */
    }
    uint64_t off = (uint64_t)(pos % bt) * kv->row_bytes;
    store_row(kv, k, slab(kv, layer, 0, b) + off);
    store_row(kv, v, slab(kv, layer, 1, b) + off);
    if (s->len <= pos) s->len = pos + 1;
    return CN_STATUS_OK;
}

int64_t cn_kv_seq_blocks(const cn_kv *kv, int32_t seq, const int32_t **block_ids) {
    if (!seq_ok(kv, seq) || kv->seqs[seq].n == 0) {
        if (block_ids) *block_ids = NULL;
        return 0;
    }
    if (block_ids) *block_ids = kv->seqs[seq].blocks;
    return kv->seqs[seq].n;
}

static const void *block_data(const cn_kv *kv, int32_t layer, int kv_index, int32_t block) {
    if (!kv || layer < 0 || layer >= kv->p.n_layer || block < 0 || block >= kv->p.n_blocks) return NULL;
    return slab(kv, layer, kv_index, block);
}

const void *cn_kv_block_k(const cn_kv *kv, int32_t layer, int32_t block) { return block_data(kv, layer, 0, block); }

const void *cn_kv_block_v(const cn_kv *kv, int32_t layer, int32_t block) { return block_data(kv, layer, 1, block); }

int32_t cn_kv_block_refcount(const cn_kv *kv, int32_t block) {
    if (!kv || block < 0 || block >= kv->p.n_blocks) return -1;
    return kv->blocks[block].ref;
}

void cn_kv_get_stats(const cn_kv *kv, cn_kv_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!kv) return;
    out->n_blocks = kv->p.n_blocks;
    out->n_free = n_available(kv);
    out->n_shared = kv->n_shared;
    out->n_seqs = kv->n_seqs;
    out->n_cached = kv->n_cached;
    out->n_prefix_queried = kv->n_prefix_queried;
    out->n_prefix_hits = kv->n_prefix_hits;
    out->n_evicted = kv->n_evicted;
}

/* ---- prefix cache ---- */

/* Walks the cached chain for tokens' leading full blocks, up to max_blocks. */
static int64_t prefix_walk(const cn_kv *kv, const int32_t *tokens, int64_t n_tokens, int32_t *block_ids,
                           int64_t max_blocks) {
    int32_t bt = kv->p.block_tokens;
    int64_t n_full = CN_MIN(n_tokens / bt, max_blocks);
    int32_t parent = -1;
    uint32_t parent_gen = 0;
    int64_t i = 0;
    for (; i < n_full; i++) {
        const int32_t *t = tokens + i * bt;
        int32_t b = prefix_find(kv, prefix_key(parent, parent_gen, t, bt), parent, parent_gen, t);
        if (b < 0) break;
        if (block_ids) block_ids[i] = b;
        parent = b;
        parent_gen = kv->blocks[b].gen;
    }
    return i;
}

int64_t cn_kv_prefix_lookup(const cn_kv *kv, const int32_t *tokens, int64_t n_tokens, int32_t *block_ids,
                            int64_t max_blocks) {
    if (!kv || !tokens || n_tokens <= 0 || max_blocks <= 0) return 0;
    return prefix_walk(kv, tokens, n_tokens, block_ids, max_blocks);
}

cn_status cn_kv_seq_prefix_attach(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t n_tokens, int64_t *n_reused,
                                  cn_error *err) {
    if (n_reused) *n_reused = 0;
    if (!seq_ok(kv, seq)) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: sequence id %d is out of range", seq);
    if (n_tokens < 0 || (n_tokens > 0 && !tokens))
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: prefix of %lld tokens without tokens", (long long)n_tokens);
    kv_seq *s = &kv->seqs[seq];
    if (s->n > 0 || s->len > 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: prefix attach into sequence %d, which is not empty", seq);
    int32_t bt = kv->p.block_tokens;
    int64_t n_full = CN_MIN(n_tokens / bt, kv->p.n_blocks);
    cn_status st = seq_grow(s, n_full, err);
    if (st != CN_STATUS_OK) return st;
    int64_t found = n_full > 0 ? prefix_walk(kv, tokens, n_tokens, s->blocks, n_full) : 0;
    for (int64_t i = 0; i < found; i++) block_acquire(kv, s->blocks[i]);
    s->n = found;
    s->len = found * bt;
    seq_mark_live(kv, s);
    kv->n_prefix_queried += n_tokens / bt;
    kv->n_prefix_hits += found;
    if (n_reused) *n_reused = s->len;
    return CN_STATUS_OK;
}

cn_status cn_kv_seq_prefix_publish(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t n_tokens, cn_error *err) {
    if (!seq_ok(kv, seq)) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: sequence id %d is out of range", seq);
    if (n_tokens < 0 || (n_tokens > 0 && !tokens))
        return cn_err(err, CN_STATUS_INVALID_ARG, "kv: prefix of %lld tokens without tokens", (long long)n_tokens);
    kv_seq *s = &kv->seqs[seq];
    int32_t bt = kv->p.block_tokens;
    int64_t n_full = CN_MIN(CN_MIN(n_tokens, s->len) / bt, s->n);
    int32_t parent = -1;
    uint32_t parent_gen = 0;
    for (int64_t i = 0; i < n_full; i++) {
        const int32_t *t = tokens + i * bt;
        uint64_t key = prefix_key(parent, parent_gen, t, bt);
        int32_t b = prefix_find(kv, key, parent, parent_gen, t);
        if (b < 0) {
            b = s->blocks[i];
            if (kv->blocks[b].published) {
                /* Same tokens under a stale parent (the parent was rewritten and
                 * republished): re-key it. Other tokens: the caller's tokens are not
                 * what this block holds, so the chain ends. */
                if (memcmp(kv->tokens + (int64_t)b * bt, t, (size_t)bt * sizeof(int32_t)) != 0) break;
                prefix_remove(kv, b);
            }
            prefix_insert(kv, b, key, parent, parent_gen, t);
        }
        /* When another block already holds this prefix (same tokens, so the same K/V),
         * the chain continues through it and seq's own copy stays unpublished. */
        parent = b;
        parent_gen = kv->blocks[b].gen;
    }
    return CN_STATUS_OK;
}

/* ---- self-check ---- */

cn_status cn_kv_check(const cn_kv *kv, cn_error *err) {
    if (!kv) return cn_err(err, CN_STATUS_INVALID_ARG, "kv: NULL");
    int64_t n = kv->p.n_blocks;
    int32_t *refs = calloc((size_t)n, sizeof(int32_t));
    uint8_t *seen = calloc((size_t)n, 1); /* bit 1: free list, bit 2: LRU list */
    if (!refs || !seen) {
        free(refs);
        free(seen);
        return cn_err(err, CN_STATUS_NO_MEMORY, "kv check: out of memory");
    }
    cn_status st = CN_STATUS_CORRUPT;
    int32_t bt = kv->p.block_tokens;
    int32_t live = 0;
    for (int32_t q = 0; q < kv->p.max_seqs; q++) {
        const kv_seq *s = &kv->seqs[q];
        live += s->live;
        if (!s->live && (s->n || s->len)) {
            cn_err(err, st, "kv check: freed sequence %d holds blocks", q);
            goto done;
        }
        if ((size_t)s->n > s->cap || s->len > s->n * bt) {
            cn_err(err, st, "kv check: sequence %d: len %lld past its %lld blocks", q, (long long)s->len,
                   (long long)s->n);
            goto done;
        }
        for (int64_t i = 0; i < s->n; i++) {
            if (s->blocks[i] < 0 || s->blocks[i] >= n) {
                cn_err(err, st, "kv check: sequence %d holds bad block id %d", q, s->blocks[i]);
                goto done;
            }
            refs[s->blocks[i]]++;
        }
    }
    if (live != kv->n_seqs) {
        cn_err(err, st, "kv check: n_seqs %d, but %d sequences are live", kv->n_seqs, live);
        goto done;
    }
    for (int64_t i = 0; i < kv->n_free_list; i++) {
        int32_t b = kv->free_ids[i];
        if (b < 0 || b >= n || seen[b]) {
            cn_err(err, st, "kv check: free list entry %lld (block %d) is bad or repeated", (long long)i, b);
            goto done;
        }
        seen[b] |= 1;
    }
    int64_t n_lru = 0;
    for (int32_t b = kv->lru_head, prev = -1; b >= 0; prev = b, b = kv->blocks[b].lru_next) {
        if (seen[b] || kv->blocks[b].lru_prev != prev || ++n_lru > n) {
            cn_err(err, st, "kv check: LRU list is broken at block %d", b);
            goto done;
        }
        seen[b] |= 2;
        if (kv->blocks[b].lru_next < 0 && kv->lru_tail != b) {
            cn_err(err, st, "kv check: LRU tail is not the list's last block");
            goto done;
        }
    }
    if (n_lru != kv->n_cached) {
        cn_err(err, st, "kv check: n_cached %lld, LRU list holds %lld", (long long)kv->n_cached, (long long)n_lru);
        goto done;
    }
    int64_t n_shared = 0;
    for (int32_t b = 0; b < n; b++) {
        const kv_block *m = &kv->blocks[b];
        if (m->ref != refs[b]) {
            cn_err(err, st, "kv check: block %d has refcount %d but %d tables hold it", b, m->ref, refs[b]);
            goto done;
        }
        n_shared += m->ref > 1;
        bool want_free = m->ref == 0 && !m->published, want_lru = m->ref == 0 && m->published;
        if ((seen[b] & 1) != want_free || ((seen[b] & 2) != 0) != want_lru) {
            cn_err(err, st, "kv check: block %d (ref %d, published %d) is %s", b, m->ref, m->published,
                   seen[b] ? "on the wrong list" : "lost (on no list)");
            goto done;
        }
        if (m->published) {
            if (m->key != prefix_key(m->parent, m->parent_gen, kv->tokens + (int64_t)b * bt, bt) ||
                prefix_find(kv, m->key, m->parent, m->parent_gen, kv->tokens + (int64_t)b * bt) != b) {
                cn_err(err, st, "kv check: published block %d is not findable by its key", b);
                goto done;
            }
        }
    }
    if (n_shared != kv->n_shared) {
        cn_err(err, st, "kv check: n_shared %lld, counted %lld", (long long)kv->n_shared, (long long)n_shared);
        goto done;
    }
    int64_t chained = 0;
    for (uint64_t h = 0; h <= kv->bucket_mask; h++)
        for (int32_t b = kv->buckets[h]; b >= 0; b = kv->blocks[b].hash_next) {
            if (!kv->blocks[b].published || (kv->blocks[b].key & kv->bucket_mask) != h || ++chained > n) {
                cn_err(err, st, "kv check: hash bucket %llu is broken at block %d", (unsigned long long)h, b);
                goto done;
            }
        }
    int64_t n_published = 0;
    for (int32_t b = 0; b < n; b++) n_published += kv->blocks[b].published;
    if (chained != n_published) {
        cn_err(err, st, "kv check: %lld blocks published, %lld in hash chains", (long long)n_published,
               (long long)chained);
        goto done;
    }
    st = CN_STATUS_OK;
done:
    free(refs);
    free(seen);
    return st;
}
