/* kv.h — the KV cache as storage: one pool of fixed-size blocks allocated once from a
 * budget, a block table per sequence, reference-counted blocks (shared prefixes, forks
 * for beams and n > 1) with copy-on-write. Mechanism only: which sequence gets blocks,
 * and who is preempted when none are left, is the scheduler's policy. Knows no
 * architecture: only layers × kv width. */
#ifndef CN_KV_H
#define CN_KV_H

#include "core/core.h"

#define CN_KV_BLOCK_TOKENS_DEFAULT 16
#define CN_KV_MAX_SEQ (1 << 16)

typedef struct {
    int32_t n_layer;
    int32_t kv_dim;       /* n_kv_head × head_dim, the same for K and V and every layer */
    int32_t block_tokens; /* tokens per block (default 16) */
    int64_t n_blocks;     /* pool size; see cn_kv_blocks_for_bytes */
    cn_type type;         /* CN_TYPE_F16 (default), CN_TYPE_F32, or CN_TYPE_Q8_0 */
    int32_t max_seqs;     /* sequence ids are 0 .. max_seqs-1 */
} cn_kv_params;

typedef struct cn_kv cn_kv;

/* Bytes one block takes for these params (all layers, K and V). */
uint64_t cn_kv_block_bytes(const cn_kv_params *p);
/* How many blocks a byte budget buys. */
int64_t cn_kv_blocks_for_bytes(const cn_kv_params *p, uint64_t n_bytes);

cn_status cn_kv_create(const cn_kv_params *p, cn_kv **out, cn_error *err);
void cn_kv_free(cn_kv *kv); /* NULL is a no-op */
const cn_kv_params *cn_kv_params_of(const cn_kv *kv);

/* Makes sequence seq hold at least n_tokens positions [0, n_tokens), allocating blocks
 * as needed (all or nothing). CN_STATUS_LIMIT if the pool has too few free blocks. A
 * sequence exists once it has been reserved. */
cn_status cn_kv_seq_reserve(cn_kv *kv, int32_t seq, int64_t n_tokens, cn_error *err);
/* Number of positions written (one past the highest position written; tracked by
 * cn_kv_write). */
int64_t cn_kv_seq_len(const cn_kv *kv, int32_t seq);
/* Drops positions >= n_tokens (releasing whole blocks past it). */
void cn_kv_seq_truncate(cn_kv *kv, int32_t seq, int64_t n_tokens);
/* Releases all of seq's blocks (refcounts drop; a block is free at zero). */
void cn_kv_seq_free(cn_kv *kv, int32_t seq);
/* dst (must be empty) shares all of src's blocks (refcounts rise, no copy). */
cn_status cn_kv_seq_fork(cn_kv *kv, int32_t src, int32_t dst, cn_error *err);

/* Stores one position's K and V rows (kv_dim floats each) for one layer, converting to
 * the pool's type. The block holding pos must be reserved; if it is shared (refcount >
 * 1) it is first copied (copy-on-write), which needs a free block: CN_STATUS_LIMIT if
 * none. */
cn_status cn_kv_write(cn_kv *kv, int32_t layer, int32_t seq, int64_t pos, const float *k, const float *v,
                      cn_error *err);

/* Read access for attention: the block ids of seq in position order, and a block's
 * K or V data for one layer, laid out (block_tokens, kv_dim) in the pool's type
 * (for Q8_0: rows of kv_dim/32 blocks). The block_ids view is valid until the next call
 * that changes the cache; block data pointers are fixed for the cache's lifetime (their
 * contents change with writes). A block is zeroed when it is handed to a sequence, so
 * positions not yet written read as 0 (never stale data).
 *
 * Not thread-safe: calls that change the cache (cn_kv_write included: it may copy a
 * block and moves the length) must not overlap each other or reads. */
int64_t cn_kv_seq_blocks(const cn_kv *kv, int32_t seq, const int32_t **block_ids);
const void *cn_kv_block_k(const cn_kv *kv, int32_t layer, int32_t block);
const void *cn_kv_block_v(const cn_kv *kv, int32_t layer, int32_t block);

typedef struct {
    int64_t n_blocks, n_free, n_shared; /* shared: refcount > 1; free: a reserve can take
                                           it (the free list plus n_cached) */
    int32_t n_seqs;
    int64_t n_cached;         /* unreferenced blocks kept for the prefix cache */
    int64_t n_prefix_queried; /* full blocks asked for by cn_kv_seq_prefix_attach */
    int64_t n_prefix_hits;    /* of those, found in the cache and shared */
    int64_t n_evicted;        /* cached blocks reclaimed for new allocations */
} cn_kv_stats;
void cn_kv_get_stats(const cn_kv *kv, cn_kv_stats *out);

/* Hard limits on cn_kv_params (beyond them cn_kv_create says INVALID_ARG; a pool over
 * CN_KV_MAX_POOL_BYTES, or one the allocator refuses, is NO_MEMORY). Block ids are
 * int32, so n_blocks <= INT32_MAX. */
#define CN_KV_MAX_LAYERS 4096
#define CN_KV_MAX_DIM (1 << 20)
#define CN_KV_MAX_BLOCK_TOKENS 4096
#define CN_KV_MAX_POOL_BYTES (1ull << 40)

/* block_tokens 16, type F16, max_seqs 1; n_layer, kv_dim and n_blocks are 0 and must be
 * set. */
cn_kv_params cn_kv_params_default(void);

/* How many block tables hold block (0 when free or only cached); -1 for a bad id. */
int32_t cn_kv_block_refcount(const cn_kv *kv, int32_t block);
/* Checks every internal invariant (refcounts equal table references, free list, LRU
 * list and hash chains consistent, counters exact). For tests and debugging: O(n_blocks
 * + all tables). CN_STATUS_CORRUPT with the first violation, NO_MEMORY if scratch
 * space cannot be had. */
cn_status cn_kv_check(const cn_kv *kv, cn_error *err);

/* Prefix cache. A full block whose tokens are known can be published: it is then keyed
 * by (the cached block before it, its tokens), so a key names a whole prefix exactly.
 * Published blocks that no table holds stay cached (LRU) and are reclaimed only when the
 * free list is empty; writing into a published block unpublishes it.
 *
 * cn_kv_prefix_lookup: how many leading full blocks of tokens (n_tokens / block_tokens
 * at most, and at most max_blocks) are cached; their ids go to block_ids (may be NULL
 * to count only). Changes nothing; 0 on bad input.
 *
 * cn_kv_seq_prefix_attach: seq (must be empty) takes the cached leading blocks of
 * tokens, shared (refcounts rise), and its length becomes *n_reused = blocks ×
 * block_tokens. To still compute logits for the last prompt token, pass n_tokens - 1.
 *
 * cn_kv_seq_prefix_publish: publishes seq's full blocks whose positions are all below
 * both n_tokens and cn_kv_seq_len(seq), tokens being seq's tokens from position 0. Call
 * it after every layer of those positions was written. Where another block already holds
 * the same prefix, seq's copy stays unpublished and the chain goes on through the other;
 * publishing stops at a block already published with other tokens. Never allocates. */
int64_t cn_kv_prefix_lookup(const cn_kv *kv, const int32_t *tokens, int64_t n_tokens, int32_t *block_ids,
                            int64_t max_blocks);
cn_status cn_kv_seq_prefix_attach(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t n_tokens, int64_t *n_reused,
                                  cn_error *err);
cn_status cn_kv_seq_prefix_publish(cn_kv *kv, int32_t seq, const int32_t *tokens, int64_t n_tokens, cn_error *err);

#endif
