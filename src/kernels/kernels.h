/* kernels.h — the hot loops behind one dispatch table: norms, rope, gated activations,
 * the quantized matmul (activations quantized once per matmul to an 8-bit block format,
 * integer dot per block) and attention over paged K/V blocks.
 *
 * A kernel family is a cn_kernels table chosen once from cn_cpu_isa(); `ref` (scalar,
 * src/kernels/ref) is the spec every other family must match. Kernels are pure: pointers,
 * sizes and (ith, nth) in; no allocation, locking, logging or model knowledge. A threaded
 * kernel splits its *outputs* with cn_split(…, ith, nth) and computes each output element
 * alone in a fixed order, so results are bit-identical for any thread count and any batch
 * composition. Layouts follow ggml's so GGUF weights are used in place. */
#ifndef CN_KERNELS_H
#define CN_KERNELS_H

#include "core/core.h"
#include "tensor/quants.h"

/* Longest attention head cinder handles (gemma3 uses 256). */
#define CN_MAX_HEAD_DIM 512

/* Activations are quantized to the formats of tensor/quants.h: Q8_1 carries
 * s = d * sum(qs) for the _1 weight types' min term; Q8_K carries 16-element partial
 * sums for the K-quants' mins. */

typedef enum { CN_ROPE_NORMAL = 0, CN_ROPE_NEOX } cn_rope_mode;
/* SiLU(gate) * up, or GELU-tanh(gate) * up evaluated as ggml does (input and result
 * rounded through f16, i.e. its 64K-entry table). */
typedef enum { CN_ACT_SILU = 0, CN_ACT_GELU_TANH } cn_act;

/* y (n_tok, n_out) = x (n_tok, k) · Wᵀ, W (n_out, k) in its stored type. */
typedef struct {
    uint32_t w_type;
    const void *w; /* n_out rows of w_row_bytes; or, with w_packed, this family's
                    * pack() layout of them */
    size_t w_row_bytes;
    bool w_packed;
    const void *xq; /* n_tok rows of xq_row_bytes, in cn_matmul_act_type(w_type) */
    size_t xq_row_bytes;
    float *y; /* (n_tok, ldy) */
    int64_t ldy;
    int64_t n_out, k, n_tok;
} cn_matmul_args;

/* Attention for n_rows query rows over each row's K/V blocks. For row r, positions
 * pos_lo[r] ..= pos_hi[r] are attended; position p lives in block p / block_tokens of
 * the row's block list, at slot p % block_tokens, as kv_dim values of kv_type (F32,
 * F16 or Q8_0). Query head h reads kv head h / (n_head / n_head_kv). */
typedef struct {
    int32_t n_rows, n_head, n_head_kv, head_dim;
    const float *q;                     /* (n_rows, n_head * head_dim) */
    float *out;                         /* (n_rows, n_head * head_dim) */
    const int32_t *pos_lo, *pos_hi;     /* (n_rows) */
    const void *const *const *k_blocks; /* (n_rows) → that row's block pointers */
    const void *const *const *v_blocks;
    int32_t block_tokens;
    int32_t kv_dim;
    uint32_t kv_type;
    float scale;            /* multiplies q·k */
    float *scratch;         /* (nth, scratch_stride) floats, one slice per thread */
    int64_t scratch_stride; /* >= CN_ATTN_SCRATCH(the longest attended range) */
} cn_attn_args;

/* Floats of scratch one thread's attention needs for ranges of up to n positions (a
 * family may keep the scores of a tile of rows and heads there, with some padding). */
#define CN_ATTN_SCRATCH(n) (16 * ((int64_t)(n) + 64))

typedef struct cn_kernels {
    const char *name;
    /* y[i] = x[i] / rms(x) * w[i] (w NULL: no weight). y may alias x. */
    void (*rmsnorm)(const float *x, const float *w, float *y, int64_t n, float eps);
    /* cos/sin for one position: cs (n_rot) as (cos, sin) pairs; theta_i = pos *
     * freq_scale * base^(-2i/n_rot) / freq_factors[i] (freq_factors may be NULL). */
    void (*rope_cache)(int64_t pos, int32_t n_rot, float base, float freq_scale, const float *freq_factors, float *cs);
    /* Rotates the first n_rot dims of each of n_head heads of x (n_head, head_dim). */
    void (*rope)(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, const float *cs, cn_rope_mode mode);
    /* In place, numerically stable; sums in double. */
    void (*softmax)(float *x, int64_t n);
    /* out[i] = act(gate[i]) * up[i]; out may alias gate or up. */
    void (*gated_act)(cn_act act, const float *gate, const float *up, float *out, int64_t n);
    /* Quantizes rows [split of n_rows] of x (n_rows, k) to dst (n_rows, dst_row_bytes)
     * in format act_type (cn_matmul_act_type of the weight). */
    void (*quantize_rows)(uint32_t act_type, const float *x, int64_t k, int64_t n_rows, void *dst, size_t dst_row_bytes,
                          int ith, int nth);
    /* The matmul, split over output rows (W rows): each W row is read once per call and
     * dotted with every token row. */
    void (*matmul)(const cn_matmul_args *a, int ith, int nth);
    /* Split over (row, head) pairs. */
    void (*attention)(const cn_attn_args *a, int ith, int nth);
    /* Optional (NULL: weights are always used as stored). A family may read a weight
     * matrix faster in its own layout: packed_size gives the bytes of w_type (n_out, k)
     * in it, 0 if it has none for that type and shape; pack writes it (dst: that many
     * bytes, no alignment needed). The model packs once at load and passes w_packed; the
     * results are the same bits as from the stored layout. */
    size_t (*packed_size)(uint32_t w_type, int64_t n_out, int64_t k);
    void (*pack)(uint32_t w_type, const void *w, size_t w_row_bytes, int64_t n_out, int64_t k, void *dst);
} cn_kernels;

/* The family for this CPU (chosen once; CINDER_REF=1 forces ref). */
const cn_kernels *cn_kernels_get(void);
const cn_kernels *cn_kernels_ref(void);

/* Whether a weight type can be multiplied, and the activation format it takes (F32,
 * F16, BF16, Q8_0, Q8_1 or Q8_K); false/0-size for unsupported types. */
bool cn_matmul_supports(uint32_t w_type);
uint32_t cn_matmul_act_type(uint32_t w_type);
/* Bytes of one activation row of k elements in act_type; 0 if k does not fit its blocks. */
size_t cn_act_row_bytes(uint32_t act_type, int64_t k);

#endif
