/* model.h — a transformer loaded from GGUF, and its forward pass over a batch.
 *
 * A model is hyperparameters from `<arch>.*` metadata, weights used in place in the
 * memory-mapped file (never copied to float), and an architecture description as DATA
 * (cn_arch_desc): one forward function reads the description, there is no per-family
 * code path. A forward scratch (cn_fwd: not cinder.h's one-request cn_context) owns the
 * buffers sized once for the largest batch, and a thread pool (or borrows one).
 * cn_forward runs a batch of (token, pos, seq, want_logits) rows — a whole prompt, one
 * decode token per sequence, or a mix — reading and appending K/V through the paged
 * cache. Every output element is reduced in a fixed order, so logits do not depend on
 * the thread count or on what else is in the batch. */
#ifndef CN_MODEL_H
#define CN_MODEL_H

#include "core/pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv.h"

#define CN_MODEL_MAX_LAYERS 512
#define CN_MODEL_MAX_EMBD (1 << 16)
#define CN_MODEL_MAX_VOCAB (1 << 22)

typedef enum { CN_NORM_RMS = 0 } cn_norm_kind;

/* What distinguishes one architecture family from another. */
typedef struct {
    const char *name; /* general.architecture */
    cn_norm_kind norm;
    cn_act act;          /* of the gated FFN */
    cn_rope_mode rope;   /* NORMAL: adjacent pairs (llama); NEOX: halves */
    bool qk_norm;        /* RMS norm of each q/k head before RoPE */
    bool qkv_bias;       /* attn_{q,k,v}.bias present */
    bool post_norms;     /* post_attention_norm and post_ffw_norm on branch outputs */
    bool embd_scale;     /* embeddings × sqrt(n_embd) */
    bool q_prescale;     /* q × attention scale before q·k (gemma); else scores × scale */
    int32_t swa_pattern; /* 0: all layers global; N: layer il is global iff il % N == N-1 */
    float rope_base_swa; /* RoPE base of sliding layers unless metadata says (0: global's) */
    bool tied_output;    /* output.weight may be absent: token_embd is the LM head */
} cn_arch_desc;

/* NULL if cinder does not know the architecture. */
const cn_arch_desc *cn_arch_find(const char *name, size_t len);

typedef struct {
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot, n_vocab;
    int32_t n_ctx_train;
    int32_t n_swa; /* sliding window in tokens (0: none) */
    float norm_eps;
    float rope_base, rope_base_swa, rope_freq_scale; /* freq_scale = 1 / linear factor */
    float attn_scale;                                /* 1/sqrt(head_dim) unless the arch or metadata says */
    float final_softcap;                             /* 0: none */
} cn_hparams;

/* A weight matrix (ne1 rows of ne0) or vector (ne1 = 1): a view into the mapping. */
typedef struct {
    char name[64]; /* the tensor's name, for messages */
    uint32_t type;
    int64_t ne0, ne1;
    size_t row_bytes;
    const void *data;
    bool packed; /* data is in cn_kernels_get()'s pack() layout (model.c) */
} cn_weight;

typedef struct {
    cn_weight attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, post_attn_norm;
    cn_weight ffn_norm, w_gate, w_up, w_down, post_ffn_norm;
    bool swa; /* sliding-window layer */
} cn_layer;

/* cn_model, cn_model_params, cn_model_load, cn_model_free and the metadata queries are
 * public (include/cinder.h). */

/* Builds a model from an already-open GGUF; takes g (closed by cn_model_free, and on
 * failure). */
cn_status cn_model_from_gguf(cn_gguf *g, const cn_model_params *p, cn_model **out, cn_error *err);

const cn_hparams *cn_model_hparams(const cn_model *m);
const cn_arch_desc *cn_model_arch(const cn_model *m);
const cn_gguf *cn_model_gguf(const cn_model *m); /* view valid until cn_model_free */
const cn_layer *cn_model_layer(const cn_model *m, int32_t il);
const cn_weight *cn_model_tok_embd(const cn_model *m);
const cn_weight *cn_model_output(const cn_model *m); /* token_embd when tied */
const cn_weight *cn_model_output_norm(const cn_model *m);
const cn_weight *cn_model_rope_freqs(const cn_model *m); /* NULL if absent */
/* Fills n_layer and kv_dim for this model, the rest with defaults (F16, 16-token
 * blocks, 1 sequence, no blocks: set n_blocks from a budget). */
cn_kv_params cn_model_kv_params(const cn_model *m);

/* ---- batches: cn_batch and its functions are public (cinder.h, the low tier) ---- */

/* ---- forward ---- */

typedef struct cn_fwd cn_fwd;

typedef struct {
    int32_t n_threads;   /* >= 1; with pool: ignored, the pool's size is used */
    int32_t n_batch_max; /* most rows one cn_forward takes */
    int32_t n_ctx;       /* most positions per sequence; 0: the model's context */
    cn_pool *pool;       /* borrowed (must outlive the scratch), so that scratches
                            that never run at once share one set of threads (the
                            engine's target and draft models, its embedder); NULL
                            (default): the scratch makes its own of n_threads */
} cn_fwd_params;
cn_fwd_params cn_fwd_default_params(void);

/* Borrows m, which must outlive the scratch. */
cn_status cn_fwd_create(const cn_model *m, const cn_fwd_params *p, cn_fwd **out, cn_error *err);
void cn_fwd_free(cn_fwd *c); /* NULL is a no-op */
int32_t cn_fwd_n_ctx(const cn_fwd *c);

/* Runs batch b. For each sequence in b, reserves cache blocks through the highest
 * position, writes every row's K/V, and attends causally (positions <= the row's, and
 * within the window on sliding layers). A sequence's new positions must continue it
 * without gaps (rows may also rewrite positions it already holds). logits_out gets
 * (cn_batch_n_logits(b), n_vocab) floats, the wanting rows in batch order. The KV cache
 * must have been created with cn_model_kv_params' n_layer and kv_dim. */
cn_status cn_forward(const cn_model *m, cn_fwd *c, const cn_batch *b, cn_kv *kv, float *logits_out, cn_error *err);
/* As cn_forward, but embd_out gets (cn_batch_n_logits(b), n_embd) floats instead of
 * logits: the wanting rows' final hidden states after the output norm (what the LM head
 * would read; llama.cpp's "result_norm", which its embeddings pool). */
cn_status cn_forward_embd(const cn_model *m, cn_fwd *c, const cn_batch *b, cn_kv *kv, float *embd_out, cn_error *err);

/* The per-step profile of cn_forward (cinder.h's cn_context_profile): false when out of
 * memory turning it on. */
bool cn_fwd_profile(cn_fwd *c, bool on);
int32_t cn_fwd_profile_read(const cn_fwd *c, cn_profile_op *out, int32_t max);
/* cn_context_observe_matmuls's observer, for the batch path (two or more rows). */
void cn_fwd_observe(cn_fwd *c, cn_matmul_observer fn, void *user);

#endif
