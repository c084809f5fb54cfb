/* model.c — loading: the architecture table, hyperparameters from `<arch>.*` metadata
 * and weight views into the mapped GGUF, each checked for presence, shape and type
 * before the forward pass may touch it. Nothing is dequantized here; with prefault the
 * weights are copied once into 2 MiB pages (weights_to_hugepages below).
 *
 * The per-architecture facts below were checked against llama.cpp (llama-model.cpp,
 * the graph builders, gguf-py): Llama's converter permutes Q/K rows so RoPE pairs
 * adjacent dims (NORMAL), Qwen2/Qwen3/Gemma3 pair halves (NEOX); Gemma3's converter
 * already adds 1 to its norm weights, scales queries by 1/sqrt(head_dim) before q·k,
 * uses RoPE base 10000 on sliding layers, and makes every 6th layer global. */
#include "model.h"

#include <math.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "tensor/tensor.h"

static const cn_arch_desc g_arches[] = {
    /* clang-format off */
    {.name = "llama", .norm = CN_NORM_RMS, .act = CN_ACT_SILU, .rope = CN_ROPE_NORMAL,
     .tied_output = true},
    {.name = "qwen2", .norm = CN_NORM_RMS, .act = CN_ACT_SILU, .rope = CN_ROPE_NEOX,
     .qkv_bias = true, .tied_output = true},
    {.name = "qwen3", .norm = CN_NORM_RMS, .act = CN_ACT_SILU, .rope = CN_ROPE_NEOX,
     .qk_norm = true, .tied_output = true},
    {.name = "gemma3", .norm = CN_NORM_RMS, .act = CN_ACT_GELU_TANH, .rope = CN_ROPE_NEOX,
     .qk_norm = true, .post_norms = true, .embd_scale = true, .q_prescale = true,
     .swa_pattern = 6, .rope_base_swa = 10000.0f, .tied_output = true},
    /* clang-format on */
};

const cn_arch_desc *cn_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < CN_ARRAY_LEN(g_arches); i++)
        if (strlen(g_arches[i].name) == len && memcmp(g_arches[i].name, name, len) == 0) return &g_arches[i];
    return NULL;
}

struct cn_model {
    cn_gguf *g;
    const cn_arch_desc *arch;
    cn_hparams hp;
    cn_weight tok_embd, output_norm, output, rope_freqs;
    cn_layer *layers; /* (n_layer) */
    void *hp_mem;     /* the weights' 2 MiB-page copy, or NULL */
    size_t hp_bytes;
};

cn_model_params cn_model_default_params(void) {
    cn_model_params p = {.prefault = false};
    return p;
}

/* ---- metadata ---- */

typedef struct {
    const cn_gguf *g;
    const char *arch;
    char key[160];
} meta;

static const char *mkey(meta *mt, const char *suffix) {
    snprintf(mt->key, sizeof mt->key, "%s.%s", mt->arch, suffix);
    return mt->key;
}

static cn_status wrong_kind(meta *mt, const char *want, cn_error *err) {
    int64_t i = cn_gguf_find_key(mt->g, mt->key);
    return cn_err(err, CN_STATUS_CORRUPT, "metadata key %s is a %s, want %s", mt->key,
                  cn_gguf_vtype_name(cn_gguf_kv_type(mt->g, i)), want);
}

/* Points mt->key at <arch>.suffix and says whether the file has it: when it has not,
 * *st is what the reader returns (NOT_FOUND if required, else OK with *present false). */
static bool meta_find(meta *mt, const char *suffix, bool required, bool *present, cn_status *st, cn_error *err) {
    mkey(mt, suffix);
    if (present) *present = false;
    if (cn_gguf_find_key(mt->g, mt->key) >= 0) return true;
    *st = required ? cn_err(err, CN_STATUS_NOT_FOUND, "missing metadata key %s", mt->key) : CN_STATUS_OK;
    return false;
}

/* Reads a positive integer that fits int32. *present=false if absent and optional. */
static cn_status meta_i32(meta *mt, const char *suffix, bool required, int32_t *out, bool *present, cn_error *err) {
    cn_status st;
    if (!meta_find(mt, suffix, required, present, &st, err)) return st;
    uint32_t v;
    if (!cn_gguf_get_u32(mt->g, mt->key, &v)) return wrong_kind(mt, "an unsigned integer", err);
    if (v == 0 || v > INT32_MAX)
        return cn_err(err, CN_STATUS_CORRUPT, "metadata key %s = %u is out of range", mt->key, v);
    *out = (int32_t)v;
    if (present) *present = true;
    return CN_STATUS_OK;
}

static cn_status meta_f32(meta *mt, const char *suffix, bool required, float *out, bool *present, cn_error *err) {
    cn_status st;
    if (!meta_find(mt, suffix, required, present, &st, err)) return st;
    float v;
    if (!cn_gguf_get_f32(mt->g, mt->key, &v)) return wrong_kind(mt, "a float", err);
    if (!isfinite(v)) return cn_err(err, CN_STATUS_CORRUPT, "metadata key %s is not finite", mt->key);
    *out = v;
    if (present) *present = true;
    return CN_STATUS_OK;
}

#define TRY(expr)                          \
    do {                                   \
        cn_status s_ = (expr);             \
        if (s_ != CN_STATUS_OK) return s_; \
    } while (0)

static cn_status read_hparams(cn_model *m, const char *arch, cn_error *err) {
    meta mt = {.g = m->g, .arch = arch};
    cn_hparams *hp = &m->hp;
    bool has;
    TRY(meta_i32(&mt, "block_count", true, &hp->n_layer, NULL, err));
    TRY(meta_i32(&mt, "embedding_length", true, &hp->n_embd, NULL, err));
    TRY(meta_i32(&mt, "feed_forward_length", true, &hp->n_ff, NULL, err));
    TRY(meta_i32(&mt, "attention.head_count", true, &hp->n_head, NULL, err));
    TRY(meta_i32(&mt, "context_length", true, &hp->n_ctx_train, NULL, err));
    TRY(meta_f32(&mt, "attention.layer_norm_rms_epsilon", true, &hp->norm_eps, NULL, err));
    if (hp->norm_eps <= 0.0f) return cn_err(err, CN_STATUS_CORRUPT, "metadata key %s must be positive", mt.key);

    if (hp->n_layer > CN_MODEL_MAX_LAYERS)
        return cn_err(err, CN_STATUS_LIMIT, "%s.block_count = %d exceeds %d", arch, hp->n_layer, CN_MODEL_MAX_LAYERS);
    if (hp->n_embd > CN_MODEL_MAX_EMBD || hp->n_ff > 16 * CN_MODEL_MAX_EMBD)
        return cn_err(err, CN_STATUS_LIMIT, "%s: embedding_length %d or feed_forward_length %d too large", arch,
                      hp->n_embd, hp->n_ff);

    hp->n_head_kv = hp->n_head;
    TRY(meta_i32(&mt, "attention.head_count_kv", false, &hp->n_head_kv, NULL, err));
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        return cn_err(err, CN_STATUS_CORRUPT, "%s.attention.head_count_kv = %d does not divide head_count = %d", arch,
                      hp->n_head_kv, hp->n_head);

    TRY(meta_i32(&mt, "attention.key_length", false, &hp->head_dim, &has, err));
    if (!has) {
        if (hp->n_embd % hp->n_head != 0)
            return cn_err(err, CN_STATUS_CORRUPT, "%s.attention.head_count = %d does not divide embedding_length = %d",
                          arch, hp->n_head, hp->n_embd);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    int32_t head_dim_v = hp->head_dim;
    TRY(meta_i32(&mt, "attention.value_length", false, &head_dim_v, NULL, err));
    if (head_dim_v != hp->head_dim)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "%s.attention.value_length = %d differs from key_length = %d", arch,
                      head_dim_v, hp->head_dim);
    if (hp->head_dim > CN_MAX_HEAD_DIM || hp->head_dim % 2 != 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "%s: head dimension %d (want even, <= %d)", arch, hp->head_dim,
                      CN_MAX_HEAD_DIM);
    if ((int64_t)hp->n_head * hp->head_dim > 4 * (int64_t)CN_MODEL_MAX_EMBD)
        return cn_err(err, CN_STATUS_LIMIT, "%s: %d heads of %d too large", arch, hp->n_head, hp->head_dim);

    hp->n_rot = hp->head_dim;
    TRY(meta_i32(&mt, "rope.dimension_count", false, &hp->n_rot, NULL, err));
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return cn_err(err, CN_STATUS_CORRUPT, "%s.rope.dimension_count = %d (want even, <= head dimension %d)", arch,
                      hp->n_rot, hp->head_dim);

    hp->rope_base = 10000.0f;
    TRY(meta_f32(&mt, "rope.freq_base", false, &hp->rope_base, NULL, err));
    if (hp->rope_base <= 0.0f) return cn_err(err, CN_STATUS_CORRUPT, "%s.rope.freq_base must be positive", arch);

    /* Linear scaling divides positions by the factor; llama.cpp takes a missing type as
     * linear. YaRN and the other schemes change the angles differently; such files are refused (UNSUPPORTED). */
    cn_gguf_str st;
    if (cn_gguf_find_key(m->g, mkey(&mt, "rope.scaling.type")) >= 0) {
        if (!cn_gguf_get_str(m->g, mt.key, &st)) return wrong_kind(&mt, "a string", err);
        if (!cn_gguf_str_eq(st, "none") && !cn_gguf_str_eq(st, "linear"))
            return cn_err(err, CN_STATUS_UNSUPPORTED, "%s.rope.scaling.type '%.*s' is not supported", arch,
                          (int)CN_MIN(st.len, 40), st.ptr);
    }
    float factor = 0.0f;
    TRY(meta_f32(&mt, "rope.scaling.factor", false, &factor, NULL, err));
    if (factor < 0.0f) return cn_err(err, CN_STATUS_CORRUPT, "%s.rope.scaling.factor < 0", arch);
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;

    hp->rope_base_swa = m->arch->rope_base_swa > 0.0f ? m->arch->rope_base_swa : hp->rope_base;
    TRY(meta_f32(&mt, "rope.freq_base_swa", false, &hp->rope_base_swa, NULL, err));
    if (m->arch->swa_pattern > 0) TRY(meta_i32(&mt, "attention.sliding_window", true, &hp->n_swa, NULL, err));

    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    TRY(meta_f32(&mt, "attention.scale", false, &hp->attn_scale, NULL, err));
    hp->final_softcap = 0.0f;
    TRY(meta_f32(&mt, "final_logit_softcapping", false, &hp->final_softcap, NULL, err));
    if (hp->final_softcap < 0.0f) return cn_err(err, CN_STATUS_CORRUPT, "%s.final_logit_softcapping < 0", arch);
    return CN_STATUS_OK;
}

/* ---- tensors ---- */

typedef enum { W_MATRIX, W_VECTOR, W_EMBD } wkind;

static cn_status get_weight(cn_model *m, const char *name, int64_t ne0, int64_t ne1, wkind kind, bool required,
                            cn_weight *w, cn_error *err) {
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", name);
    int64_t i = cn_gguf_find_tensor(m->g, name);
    if (i < 0) return required ? cn_err(err, CN_STATUS_NOT_FOUND, "missing tensor %s", name) : CN_STATUS_OK;
    const cn_gguf_tensor_info *ti = cn_gguf_tensor(m->g, i);
    if (ti->ne[2] != 1 || ti->ne[3] != 1 || ti->ne[0] != ne0 || ti->ne[1] != ne1)
        return cn_err(err, CN_STATUS_CORRUPT, "tensor %s has shape [%lld, %lld, %lld, %lld], want [%lld, %lld]", name,
                      (long long)ti->ne[0], (long long)ti->ne[1], (long long)ti->ne[2], (long long)ti->ne[3],
                      (long long)ne0, (long long)ne1);
    const cn_type_traits *tr = cn_type_traits_get(ti->type);
    if (!tr || !ti->data) return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %s has unknown type %u", name, ti->type);
    if (kind == W_VECTOR && ti->type != CN_TYPE_F32)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %s has type %s, want f32", name, tr->name);
    if (kind == W_MATRIX && !cn_matmul_supports(ti->type))
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %s has type %s, which the matmul does not support", name,
                      tr->name);
    if (kind == W_EMBD && !tr->to_float)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %s has type %s, which cannot be dequantized", name, tr->name);
    uint64_t rb = cn_type_row_bytes(ti->type, ne0), total;
    if (rb == 0 || !cn_mul_ok(rb, (uint64_t)ne1, &total) || total > ti->n_bytes)
        return cn_err(err, CN_STATUS_CORRUPT, "tensor %s: rows of %lld do not fit type %s", name, (long long)ne0,
                      tr->name);
    if (kind == W_MATRIX && cn_act_row_bytes(cn_matmul_act_type(ti->type), ne0) == 0)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor %s: row length %lld does not fit the %s matmul", name,
                      (long long)ne0, tr->name);
    w->type = ti->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = (size_t)rb;
    w->data = ti->data;
    return CN_STATUS_OK;
}

static cn_status layer_weight(cn_model *m, int il, const char *suffix, int64_t ne0, int64_t ne1, wkind kind,
                              bool required, cn_weight *w, cn_error *err) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return get_weight(m, name, ne0, ne1, kind, required, w, err);
}

static cn_status load_weights(cn_model *m, cn_error *err) {
    const cn_hparams *hp = &m->hp;
    const cn_arch_desc *a = m->arch;
    int64_t i = cn_gguf_find_tensor(m->g, "token_embd.weight");
    if (i < 0) return cn_err(err, CN_STATUS_NOT_FOUND, "missing tensor token_embd.weight");
    int64_t n_vocab = cn_gguf_tensor(m->g, i)->ne[1];
    if (n_vocab < 1 || n_vocab > CN_MODEL_MAX_VOCAB)
        return cn_err(err, CN_STATUS_CORRUPT, "tensor token_embd.weight: %lld tokens is out of range",
                      (long long)n_vocab);
    m->hp.n_vocab = (int32_t)n_vocab;
    const int64_t E = hp->n_embd, F = hp->n_ff, V = n_vocab;
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KVD = (int64_t)hp->n_head_kv * hp->head_dim;

    TRY(get_weight(m, "token_embd.weight", E, V, W_EMBD, true, &m->tok_embd, err));
    TRY(get_weight(m, "output_norm.weight", E, 1, W_VECTOR, true, &m->output_norm, err));
    TRY(get_weight(m, "output.weight", E, V, W_MATRIX, !a->tied_output, &m->output, err));
    if (!m->output.data) {
        if (!cn_matmul_supports(m->tok_embd.type))
            return cn_err(err, CN_STATUS_UNSUPPORTED,
                          "tensor token_embd.weight serves as the output but its type is not supported by the matmul");
        m->output = m->tok_embd;
    }
    TRY(get_weight(m, "rope_freqs.weight", hp->n_rot / 2, 1, W_VECTOR, false, &m->rope_freqs, err));

    for (int il = 0; il < hp->n_layer; il++) {
        cn_layer *L = &m->layers[il];
        TRY(layer_weight(m, il, "attn_norm.weight", E, 1, W_VECTOR, true, &L->attn_norm, err));
        TRY(layer_weight(m, il, "attn_q.weight", E, QD, W_MATRIX, true, &L->wq, err));
        TRY(layer_weight(m, il, "attn_k.weight", E, KVD, W_MATRIX, true, &L->wk, err));
        TRY(layer_weight(m, il, "attn_v.weight", E, KVD, W_MATRIX, true, &L->wv, err));
        TRY(layer_weight(m, il, "attn_output.weight", QD, E, W_MATRIX, true, &L->wo, err));
        if (a->qkv_bias) {
            TRY(layer_weight(m, il, "attn_q.bias", QD, 1, W_VECTOR, true, &L->bq, err));
            TRY(layer_weight(m, il, "attn_k.bias", KVD, 1, W_VECTOR, true, &L->bk, err));
            TRY(layer_weight(m, il, "attn_v.bias", KVD, 1, W_VECTOR, true, &L->bv, err));
        }
        if (a->qk_norm) {
            TRY(layer_weight(m, il, "attn_q_norm.weight", hp->head_dim, 1, W_VECTOR, true, &L->q_norm, err));
            TRY(layer_weight(m, il, "attn_k_norm.weight", hp->head_dim, 1, W_VECTOR, true, &L->k_norm, err));
        }
        if (a->post_norms) {
            TRY(layer_weight(m, il, "post_attention_norm.weight", E, 1, W_VECTOR, true, &L->post_attn_norm, err));
            TRY(layer_weight(m, il, "post_ffw_norm.weight", E, 1, W_VECTOR, true, &L->post_ffn_norm, err));
        }
        TRY(layer_weight(m, il, "ffn_norm.weight", E, 1, W_VECTOR, true, &L->ffn_norm, err));
        TRY(layer_weight(m, il, "ffn_gate.weight", E, F, W_MATRIX, true, &L->w_gate, err));
        TRY(layer_weight(m, il, "ffn_up.weight", E, F, W_MATRIX, true, &L->w_up, err));
        TRY(layer_weight(m, il, "ffn_down.weight", F, E, W_MATRIX, true, &L->w_down, err));
        L->swa = a->swa_pattern > 0 && il % a->swa_pattern < a->swa_pattern - 1;
    }
    return CN_STATUS_OK;
}

/* Every decoded token streams all the weights once, and with 4 KiB pages that costs a
 * TLB miss every 4 KiB: copied into memory backed by 2 MiB pages (transparent huge
 * pages, madvise mode), single-thread streaming reads went from ~9 GB/s on the file
 * mapping to ~13 GB/s on the benchmark machine. The matrices are written in the kernel
 * family's packed layout when it has one (cn_kernels.pack: the same bytes regrouped so
 * a tile of rows is one contiguous run; same results), which removes the transposes
 * from every decoded block. Costs: one copy of the weights in anonymous memory (the
 * file pages copied are dropped from our mapping; the embedding table, read a row at a
 * time, stays in the file) and its time at load, mostly the kernel zeroing the fresh
 * huge pages, so the copy is split over every CPU by destination bytes (Qwen2.5 1.5B:
 * 1.0-2.3 s in one thread, 0.4-0.5 s on two). Best effort: on any failure (or off
 * Linux) the weights stay in the file mapping. Read-only once written. */
#if defined(__linux__) && defined(MADV_HUGEPAGE)
typedef struct {
    const cn_kernels *K;
    cn_weight **ws;
    const bool *mat;
    const size_t *bytes;
    size_t n_ws;
    uint8_t **dst; /* (n_ws) where each weight goes */
    size_t total;  /* bytes over all weights, the work to split */
    long page;
} hp_copy;

static bool hp_packed(const hp_copy *c, size_t i) {
    const cn_weight *w = c->ws[i];
    return c->mat[i] && c->K->packed_size && c->K->packed_size(w->type, w->ne1, w->ne0) != 0;
}

/* Thread ith of nth copies the weights that start in its share of the bytes, each
 * whole (the split is by position in the destination, so each weight has one owner). */
static void hp_copy_run(void *ctx, int ith, int nth) {
    const hp_copy *c = ctx;
    const uint8_t *base = NULL;
    for (size_t i = 0; i < c->n_ws && !base; i++)
        if (c->bytes[i]) base = c->dst[i];
    const size_t lo = c->total / (size_t)nth * (size_t)ith,
                 hi = ith == nth - 1 ? SIZE_MAX : c->total / (size_t)nth * (size_t)(ith + 1);
    for (size_t i = 0; i < c->n_ws; i++) {
        if (!c->bytes[i]) continue;
        const size_t at = (size_t)(c->dst[i] - base);
        if (at < lo || at >= hi) continue;
        const cn_weight *w = c->ws[i];
        const void *src = w->data;
        const size_t n = w->row_bytes * (size_t)w->ne1;
        if (hp_packed(c, i)) c->K->pack(w->type, src, w->row_bytes, w->ne1, w->ne0, c->dst[i]);
        else memcpy(c->dst[i], src, n);
        /* our mapping of the file pages just copied is no longer needed (the embedding
         * table's rows, if it shares them, fault back in one page at a time) */
        if (c->page > 0) {
            const uintptr_t a = ((uintptr_t)src + (uintptr_t)c->page - 1) & ~((uintptr_t)c->page - 1);
            const uintptr_t b = ((uintptr_t)src + n) & ~((uintptr_t)c->page - 1);
            if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
        }
    }
}
#endif

static void weights_to_hugepages(cn_model *m) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)2 << 20;
    const cn_kernels *K = cn_kernels_get();
    size_t n_ws = 3 + 16 * (size_t)m->hp.n_layer;
    cn_weight **ws = malloc(n_ws * sizeof *ws);
    bool *mat = malloc(n_ws * sizeof *mat);
    size_t *bytes = malloc(n_ws * sizeof *bytes);
    if (!ws || !mat || !bytes) goto out;
    n_ws = 0;
    cn_weight *top[] = {&m->output, &m->output_norm, &m->rope_freqs};
    for (size_t i = 0; i < CN_ARRAY_LEN(top); i++) mat[n_ws] = i == 0, ws[n_ws++] = top[i];
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        cn_layer *L = &m->layers[il];
        cn_weight *lw[] = {
            &L->wq,        &L->wk,           &L->wv, &L->wo, &L->w_gate, &L->w_up,   &L->w_down, /* matrices */
            &L->attn_norm, &L->bq,           &L->bk, &L->bv, &L->q_norm, &L->k_norm, &L->post_attn_norm,
            &L->ffn_norm,  &L->post_ffn_norm};
        for (size_t i = 0; i < CN_ARRAY_LEN(lw); i++) mat[n_ws] = i < 7, ws[n_ws++] = lw[i];
    }
    size_t total = 0;
    for (size_t i = 0; i < n_ws; i++) {
        const cn_weight *w = ws[i];
        bytes[i] = 0;
        if (!w->data) continue;
        bool seen = false; /* views sharing data are written once */
        for (size_t j = 0; j < i && !seen; j++) seen = ws[j]->data == w->data && mat[j] == mat[i];
        if (seen) continue;
        const size_t pk = mat[i] && K->packed_size ? K->packed_size(w->type, w->ne1, w->ne0) : 0;
        bytes[i] = pk ? pk : w->row_bytes * (size_t)w->ne1;
        total += (bytes[i] + 63) & ~(size_t)63;
    }
    const size_t len = (total + huge - 1) / huge * huge + huge; /* room to align to 2 MiB */
    uint8_t *raw = total ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (raw == MAP_FAILED) goto out;
    uint8_t *dst = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(dst, len - (size_t)(dst - raw), MADV_HUGEPAGE);
    /* every weight's place first, then the copies on all CPUs (the kernel zeroes each
     * fresh huge page in the thread that first writes it, so one thread alone spends
     * most of a big model's load there), then the views pointed at their copies */
    hp_copy cp = {.K = K,
                  .ws = ws,
                  .mat = mat,
                  .bytes = bytes,
                  .n_ws = n_ws,
                  .dst = malloc(n_ws * sizeof *cp.dst),
                  .total = total,
                  .page = sysconf(_SC_PAGESIZE)};
    if (!cp.dst) {
        munmap(raw, len);
        goto out;
    }
    for (size_t i = 0; i < n_ws; i++) {
        cp.dst[i] = dst;
        if (bytes[i]) dst += (bytes[i] + 63) & ~(size_t)63;
    }
    cn_pool *pool = NULL;
    if (cn_pool_create(CN_MIN(cn_threads_resolve(0), 8), &pool, NULL) != CN_STATUS_OK) pool = NULL;
    cn_pool_run(pool, hp_copy_run, &cp); /* a NULL pool copies on this thread */
    cn_pool_free(pool);
    for (size_t i = 0; i < n_ws; i++) {
        if (!bytes[i]) continue;
        const void *src = ws[i]->data;
        const bool packed = hp_packed(&cp, i);
        for (size_t j = i; j < n_ws; j++)
            if (ws[j]->data == src && mat[j] == mat[i]) ws[j]->data = cp.dst[i], ws[j]->packed = packed;
    }
    free(cp.dst);
    mprotect(raw, len, PROT_READ);
    m->hp_mem = raw;
    m->hp_bytes = len;
out:
    free(ws);
    free(mat);
    free(bytes);
#else
    (void)m;
#endif
}

static void prefault(const cn_model *m) {
    volatile uint8_t sink = 0;
    for (int64_t i = 0; i < cn_gguf_n_tensors(m->g); i++) {
        const cn_gguf_tensor_info *ti = cn_gguf_tensor(m->g, i);
        const uint8_t *p = ti->data;
        if (!p) continue;
        for (uint64_t o = 0; o < ti->n_bytes; o += 4096) sink ^= p[o];
    }
    (void)sink;
}

cn_status cn_model_from_gguf(cn_gguf *g, const cn_model_params *p, cn_model **out, cn_error *err) {
    *out = NULL;
    cn_model *m = calloc(1, sizeof *m);
    if (!m) {
        cn_gguf_close(g);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory loading model");
    }
    m->g = g;
    cn_status s;
    cn_gguf_str an;
    if (!cn_gguf_get_str(g, "general.architecture", &an)) {
        s = cn_err(err, CN_STATUS_NOT_FOUND, "missing metadata key general.architecture (a string)");
        goto fail;
    }
    m->arch = cn_arch_find(an.ptr, an.len);
    if (!m->arch) {
        s = cn_err(err, CN_STATUS_UNSUPPORTED, "unknown architecture '%.*s' (supported: llama, qwen2, qwen3, gemma3)",
                   (int)CN_MIN(an.len, 64), an.ptr);
        goto fail;
    }
    if ((s = read_hparams(m, m->arch->name, err)) != CN_STATUS_OK) goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        s = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory loading model");
        goto fail;
    }
    if ((s = load_weights(m, err)) != CN_STATUS_OK) goto fail;
    if (p && p->prefault) {
        weights_to_hugepages(m); /* the copy touches every weight page */
        if (!m->hp_mem) prefault(m);
    }
    *out = m;
    return CN_STATUS_OK;
fail:
    cn_model_free(m);
    return s;
}

cn_status cn_model_load(const char *path, const cn_model_params *p, cn_model **out, cn_error *err) {
    *out = NULL;
    cn_gguf *g = NULL;
    cn_status s = cn_gguf_open(path, &g, err);
    if (s != CN_STATUS_OK) return s;
    return cn_model_from_gguf(g, p, out, err);
}

void cn_model_free(cn_model *m) {
    if (!m) return;
#if defined(__linux__)
    if (m->hp_mem) munmap(m->hp_mem, m->hp_bytes);
#endif
    cn_gguf_close(m->g);
    free(m->layers);
    free(m);
}

const cn_hparams *cn_model_hparams(const cn_model *m) { return &m->hp; }
const cn_arch_desc *cn_model_arch(const cn_model *m) { return m->arch; }
const cn_gguf *cn_model_gguf(const cn_model *m) { return m->g; }
const cn_layer *cn_model_layer(const cn_model *m, int32_t il) { return &m->layers[il]; }

const cn_weight *cn_model_tok_embd(const cn_model *m) { return &m->tok_embd; }
const cn_weight *cn_model_output(const cn_model *m) { return &m->output; }
const cn_weight *cn_model_output_norm(const cn_model *m) { return &m->output_norm; }
const cn_weight *cn_model_rope_freqs(const cn_model *m) { return m->rope_freqs.data ? &m->rope_freqs : NULL; }

cn_kv_params cn_model_kv_params(const cn_model *m) {
    cn_kv_params p = {
        .n_layer = m->hp.n_layer,
        .kv_dim = m->hp.n_head_kv * m->hp.head_dim,
        .block_tokens = CN_KV_BLOCK_TOKENS_DEFAULT,
        .n_blocks = 0,
        .type = CN_TYPE_F16,
        .max_seqs = 1,
    };
    return p;
}

/* ---- the public metadata queries ---- */

void cn_model_get_info(const cn_model *m, cn_model_info *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", m->arch->name);
    cn_gguf_str s = {0};
    if (cn_gguf_get_str(m->g, "general.name", &s))
        snprintf(out->name, sizeof out->name, "%.*s", (int)CN_MIN(s.len, sizeof out->name - 1), s.ptr);
    out->n_vocab = m->hp.n_vocab;
    out->n_ctx_train = m->hp.n_ctx_train;
    out->n_embd = m->hp.n_embd;
    out->n_layer = m->hp.n_layer;
    out->n_head = m->hp.n_head;
    out->n_head_kv = m->hp.n_head_kv;
    out->n_ff = m->hp.n_ff;
    for (int64_t i = 0; i < cn_gguf_n_tensors(m->g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(m->g, i);
        int64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
        out->n_params += n;
    }
    out->file_bytes = cn_gguf_file_size(m->g);
}

bool cn_model_meta_str(const cn_model *m, const char *key, const char **s, size_t *len) {
    cn_gguf_str v = {0};
    if (!key || !cn_gguf_get_str(m->g, key, &v)) return false;
    *s = v.ptr;
    *len = (size_t)v.len;
    return true;
}

bool cn_model_meta_int(const cn_model *m, const char *key, int64_t *out) {
    const int64_t i = key ? cn_gguf_find_key(m->g, key) : -1;
    return i >= 0 && cn_gguf_kv_i64(m->g, i, out);
}

bool cn_model_meta_float(const cn_model *m, const char *key, double *out) {
    const int64_t i = key ? cn_gguf_find_key(m->g, key) : -1;
    return i >= 0 && cn_gguf_kv_f64(m->g, i, out);
}
