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
    int32_t kv_dim;        /* n_kv_head × head_dim, the same for K and V and every layer */
    int32_t block_tokens;  /* tokens per block (default 16) */
    int64_t n_blocks;      /* pool size; see cn_kv_blocks_for_bytes */
    cn_type type;          /* CN_TYPE_F16 (default), CN_TYPE_F32, or CN_TYPE_Q8_0 */
    int32_t max_seqs;      /* sequence ids are 0 .. max_seqs-1 */
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
cn_status cn_kv_write(cn_kv *kv, int32_t layer, int32_t seq, int64_t pos, const float *k,
                      const float *v, cn_error *err);

/* Read access for attention: the block ids of seq in position order, and a block's
 * K or V data for one layer, laid out (block_tokens, kv_dim) in the pool's type
 * (for Q8_0: rows of kv_dim/32 blocks). Views valid until the next reserve/free/write. */
int64_t cn_kv_seq_blocks(const cn_kv *kv, int32_t seq, const int32_t **block_ids);
const void *cn_kv_block_k(const cn_kv *kv, int32_t layer, int32_t block);
const void *cn_kv_block_v(const cn_kv *kv, int32_t layer, int32_t block);

typedef struct {
    int64_t n_blocks, n_free, n_shared; /* shared: refcount > 1 */
    int32_t n_seqs;
} cn_kv_stats;
void cn_kv_get_stats(const cn_kv *kv, cn_kv_stats *out);

#endif
