/* quantize.c — cn_model_quantize: a GGUF model written again in a smaller format, by
 * llama-quantize's rules, so that the file it writes is the one llama-quantize writes.
 *
 * What matches llama-quantize (llama.cpp's src/llama-quant.cpp, read for the rules; no
 * code taken): which tensors are quantized (2-D and up, names ending in "weight", no
 * norms, no MoE router, a few small named ones kept); the mixes, in the order tensors
 * come in the file (output.weight, and token_embd.weight when the head is tied, get Q6_K
 * unless the type is Q8_0, or Q8_0 when their rows do not fit the type's block; Q4_K_M /
 * Q5_K_M give Q6_K to attn_v and ffn_down of the layers use_more_bits picks: the first
 * and last eighth and every third between; Q4_K_S gives Q5_K to the first four attn_v
 * and the first eighth of ffn_down); the fallback for rows that are not a multiple of
 * 256 (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, F16 if even 32 does not divide them);
 * and the row quantizers (cn_type_quantizer: ggml's bytes). So every tensor's bytes are
 * llama-quantize's. What differs: the order of the metadata keys (file_type and
 * quantization_version are replaced where they stand; llama.cpp moves them last), and
 * the rules for models cinder does not run (MoE with 8 experts, Falcon, 70B) are left out.
 *
 * With an importance matrix (quant/imatrix.c reads llama-imatrix's files), as
 * llama-quantize --imatrix: a tensor being converted whose name has an entry is
 * quantized by the weighted row quantizers (cn_type_quantizer_weighted; Q8_0 and F16
 * take no weights), one without an entry unweighted; an entry whose size is not the
 * tensor's columns (times its experts) is an error, except for token_embd, which then
 * goes unweighted; Q4_0 / Q5_0 files give Q4_1 / Q5_1 to ffn_down in the first eighth of
 * the layers; and the output records quantize.imatrix.file (the path as given, at most
 * 127 bytes), .dataset, .entries_count and .chunks_count after file_type.
 *
 * Design: the output is streamed. The header (all metadata, every tensor's entry) goes
 * first into a temporary file next to out_path; each tensor is then converted in slabs
 * of rows — every row read as float (dequantized) and quantized again, rows split over
 * the thread pool — and written; the temporary file is renamed over out_path only when
 * every byte is written and synced, so a failure (full disk, bad input) leaves nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/pool.h"
#include "gguf/gguf.h"
#include "quant/imatrix.h"
#include "tensor/tensor.h"

/* llama.cpp's llama_ftype numbers (general.file_type). */
enum {
    FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q4_K_S = 14,
    FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18,
};

static const struct {
    const char *name;
    uint32_t ftype;
    cn_type base;
} k_ftypes[] = {
    {"Q4_0", FT_Q4_0, CN_TYPE_Q4_0},     {"Q4_1", FT_Q4_1, CN_TYPE_Q4_1},
    {"Q5_0", FT_Q5_0, CN_TYPE_Q5_0},     {"Q5_1", FT_Q5_1, CN_TYPE_Q5_1},
    {"Q8_0", FT_Q8_0, CN_TYPE_Q8_0},     {"Q6_K", FT_Q6_K, CN_TYPE_Q6_K},
    {"Q4_K_S", FT_Q4_K_S, CN_TYPE_Q4_K}, {"Q4_K_M", FT_Q4_K_M, CN_TYPE_Q4_K},
    {"Q4_K", FT_Q4_K_M, CN_TYPE_Q4_K},   {"Q5_K_S", FT_Q5_K_S, CN_TYPE_Q5_K},
    {"Q5_K_M", FT_Q5_K_M, CN_TYPE_Q5_K}, {"Q5_K", FT_Q5_K_M, CN_TYPE_Q5_K},
};

#define SLAB_BYTES ((size_t)64 << 20) /* output bytes converted per pool run */

typedef enum { CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN } category;

cn_quantize_params cn_quantize_default_params(void) {
    return (cn_quantize_params){0};
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* ggml_n_dims: trailing dimensions of 1 do not count. */
static int n_dims_used(const cn_gguf_tensor_info *t) {
    int n = CN_GGUF_MAX_DIMS;
    while (n > 1 && t->ne[n - 1] == 1)
        n--;
    return n;
}

/* llama-quantize's tensor_allows_quantization, for the architectures it names in
 * general terms (no per-architecture lists beyond these names). */
static bool allows_quantization(const char *name, const cn_gguf_tensor_info *t) {
    static const char *const keep[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "time_mix_first.weight",
        "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
        "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        "indexer.k_proj.weight", "indexer.q_proj.weight", ".position_embd", ".rel_pos", ".patch_embd",
    };
    if (n_dims_used(t) < 2 || !ends_with(name, "weight"))
        return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight"))
        return false;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i]))
            return false;
    return true;
}

static category category_of(const char *name) {
    if (!strcmp(name, "output.weight"))
        return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    /* attn_k/q/output and ffn_up/gate: no rule for the types here */
    if (!strstr(name, "ffn_up") && !strstr(name, "ffn_gate") && strstr(name, "ffn_down"))
        return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int64_t block_of(cn_type t) { return cn_type_traits_get((uint32_t)t)->block_size; }

typedef struct {
    uint32_t ftype;
    cn_type base;
    bool tied;              /* no output.weight: token_embd is the head too */
    int n_attn_v, i_attn_v; /* llama-quantize's counters, in file order */
    int n_layer, i_ffn_down;
    int64_t n_fallback;
    bool has_imatrix;
} plan_state;

/* llama_tensor_get_type_impl, for the file types above. */
static cn_type mix_type(plan_state *ps, category cat, const cn_gguf_tensor_info *t, int out_override) {
    cn_type nt = ps->base;
    const uint32_t ft = ps->ftype;
    if (cat == CAT_OUTPUT || (ps->tied && cat == CAT_TOKEN_EMBD)) {
        if (out_override >= 0)
            nt = (cn_type)out_override;
        else if (t->ne[0] % block_of(nt) != 0)
            nt = CN_TYPE_Q8_0;
        else if (nt != CN_TYPE_Q8_0)
            nt = CN_TYPE_Q6_K;
    } else if (cat == CAT_ATTN_V) {
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(ps->i_attn_v, ps->n_attn_v))
            nt = CN_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && ps->i_attn_v < 4)
            nt = CN_TYPE_Q5_K;
        ps->i_attn_v++;
    } else if (cat == CAT_FFN_DOWN) {
        int i = ps->i_ffn_down, n = ps->n_layer;
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, n))
            nt = CN_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < n / 8)
            nt = CN_TYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && ps->has_imatrix && i < n / 8)
            nt = ft == FT_Q4_0 ? CN_TYPE_Q4_1 : CN_TYPE_Q5_1; /* llama.cpp's guard for the first layers */
        ps->i_ffn_down++;
    }
    return nt;
}

/* tensor_type_fallback: a type whose block does not divide the rows. */
static cn_type fallback(plan_state *ps, const char *name, const cn_gguf_tensor_info *t, cn_type nt) {
    if (t->ne[0] % block_of(nt) == 0)
        return nt;
    cn_type fb = nt == CN_TYPE_Q4_K ? CN_TYPE_Q5_0 : nt == CN_TYPE_Q5_K ? CN_TYPE_Q5_1
               : nt == CN_TYPE_Q6_K ? CN_TYPE_Q8_0 : nt;
    if (t->ne[0] % block_of(fb) != 0)
        fb = CN_TYPE_F16;
    ps->n_fallback++;
    cn_log(CN_LOG_WARN, "%s: %lld columns not a multiple of %s's block of %lld: %s instead", name,
           (long long)t->ne[0], cn_type_name(nt), (long long)block_of(nt), cn_type_name(fb));
    return fb;
}

/* An explicit --output-type / --token-embedding-type: no fallback (as llama-quantize),
 * so rows it cannot take are an error. */
static cn_status parse_override(const char *s, const char *what, int *out, cn_error *err) {
    *out = -1; /* none */
    if (!s)
        return CN_STATUS_OK;
    uint32_t t;
    if (!cn_type_from_name(s, &t) || !cn_type_quantizer(t))
        return cn_err(err, CN_STATUS_INVALID_ARG, "%s '%s' is not a type cinder writes (f32, f16, bf16, "
                      "q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K)", what, s);
    *out = (int)t;
    return CN_STATUS_OK;
}

/* ---- conversion of one slab of rows, split over the pool ---- */

typedef struct {
    const uint8_t *src;      /* (n_rows, src_row_bytes) */
    uint8_t *dst;            /* (n_rows, dst_row_bytes) */
    int64_t n_rows, ne0;
    size_t src_row_bytes, dst_row_bytes;
    cn_to_float_fn to_float;
    cn_from_float_fn quant;
    cn_from_float_w_fn quant_w; /* with qw: the weighted quantizer */
    const float *qw;         /* (n_expert, ne0) importance weights, or NULL */
    int64_t row0, ne1;       /* the slab's first row in the tensor; rows per expert */
    float *scratch;          /* (n_threads, ne0) */
} slab_job;

static void convert_rows(void *ctx, int ith, int nth) {
    const slab_job *j = ctx;
    int64_t r0, r1;
    cn_split(j->n_rows, ith, nth, &r0, &r1);
    float *row = j->scratch + (size_t)ith * (size_t)j->ne0;
    for (int64_t r = r0; r < r1; r++) {
        j->to_float(j->src + (size_t)r * j->src_row_bytes, row, j->ne0);
        if (j->qw)
            j->quant_w(row, j->dst + (size_t)r * j->dst_row_bytes, j->ne0,
                       j->qw + (size_t)((j->row0 + r) / j->ne1) * (size_t)j->ne0);
        else
            j->quant(row, j->dst + (size_t)r * j->dst_row_bytes, j->ne0);
    }
}

static cn_status write_bytes(FILE *f, const void *p, size_t n, const char *path, cn_error *err) {
    if (n && fwrite(p, 1, n, f) != n)
        return cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", path, strerror(errno ? errno : EIO));
    return CN_STATUS_OK;
}

static cn_status write_pad(FILE *f, uint64_t n_bytes, uint32_t align, const char *path, cn_error *err) {
    static const uint8_t zeros[64];
    uint64_t pad = (align - n_bytes % align) % align;
    cn_status st = CN_STATUS_OK;
    while (pad > 0 && !st) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        st = write_bytes(f, zeros, k, path, err);
        pad -= k;
    }
    return st;
}

/* Converts (or copies) tensor t to type nt and appends it, padded, to f. */
static cn_status write_tensor(FILE *f, const char *path, const cn_gguf_tensor_info *t, const char *name,
                              cn_type nt, const float *qw, uint32_t align, cn_pool *pool, uint64_t *n_out,
                              cn_error *err) {
    if (t->type == (uint32_t)nt) {
        *n_out = t->n_bytes;
        cn_status st = write_bytes(f, t->data, (size_t)t->n_bytes, path, err);
        return st ? st : write_pad(f, t->n_bytes, align, path, err);
    }
    const cn_type_traits *src_tr = cn_type_traits_get(t->type);
    const int64_t ne0 = t->ne[0];
    const int64_t n_rows = ne0 ? (int64_t)(t->n_bytes / cn_type_row_bytes(t->type, ne0)) : 0;
    const size_t src_rb = (size_t)cn_type_row_bytes(t->type, ne0);
    const size_t dst_rb = (size_t)cn_type_row_bytes((uint32_t)nt, ne0);
    const int nth = cn_pool_size(pool);
    int64_t slab_rows = (int64_t)(SLAB_BYTES / dst_rb);
    if (slab_rows < 1)
        slab_rows = 1;
    if (slab_rows > n_rows)
        slab_rows = n_rows;
    uint8_t *dst = cn_alloc_aligned((size_t)slab_rows * dst_rb + 1);
    float *scratch = cn_alloc_aligned((size_t)nth * (size_t)ne0 * sizeof(float) + 1);
    cn_status st = CN_STATUS_OK;
    if (!dst || !scratch)
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory converting '%s'", name);
    for (int64_t r = 0; r < n_rows && !st; r += slab_rows) {
        slab_job j = {
            .src = (const uint8_t *)t->data + (size_t)r * src_rb, .dst = dst,
            .n_rows = CN_MIN(slab_rows, n_rows - r), .ne0 = ne0, .src_row_bytes = src_rb,
            .dst_row_bytes = dst_rb, .to_float = src_tr->to_float,
            .quant = cn_type_quantizer((uint32_t)nt), .quant_w = cn_type_quantizer_weighted((uint32_t)nt),
            .qw = qw, .row0 = r, .ne1 = CN_MAX(t->ne[1], (int64_t)1), .scratch = scratch,
        };
        if (!j.quant_w)
            j.qw = NULL;
        cn_pool_run(pool, convert_rows, &j);
        st = write_bytes(f, dst, (size_t)j.n_rows * dst_rb, path, err);
    }
    cn_free_aligned(dst);
    cn_free_aligned(scratch);
    *n_out = (uint64_t)n_rows * dst_rb;
    return st ? st : write_pad(f, *n_out, align, path, err);
}

/* ---- the order: llama-quantize's (the loader's map: layer number, non-layer tensors
 * first as -1, then the name), so that the counters and the file come out the same ---- */

typedef struct {
    int64_t index;
    long layer;
    char name[256];
} ordered;

static int cmp_ordered(const void *pa, const void *pb) {
    const ordered *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 ? -1 : v;
}

/* ---- the plan: every tensor's output type, checked before a byte is written ---- */

/* The importance weights for tensor name (being converted to nt), as llama-quantize
 * finds them; *qw stays NULL when there are none or nt takes none. */
static cn_status find_weights(const cn_imatrix *im, const char *name, const cn_gguf_tensor_info *t, cn_type nt,
                              const float **qw, cn_quantize_stats *stats, cn_error *err) {
    *qw = NULL;
    if (!im)
        return CN_STATUS_OK;
    const cn_imatrix_entry *e = cn_imatrix_find(im, name);
    if (!e) {
        cn_log(CN_LOG_INFO, "%s: no importance matrix entry: quantized unweighted", name);
        return CN_STATUS_OK;
    }
    if (t->ne[3] != 1) /* rows past the experts would index past the entry */
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor '%s': an imatrix for a 4-D tensor", name);
    const int64_t want = t->ne[0] * t->ne[2]; /* llama.cpp: columns times experts (dim 2) */
    if (e->n != want) {
        if (category_of(name) == CAT_TOKEN_EMBD) {
            cn_log(CN_LOG_WARN, "%s: importance matrix entry of %lld values for %lld: quantized unweighted", name,
                   (long long)e->n, (long long)want);
            return CN_STATUS_OK;
        }
        return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix entry '%s' has %lld values, the tensor %lld columns "
                      "(an imatrix made for another model?)", name, (long long)e->n, (long long)want);
    }
    if (cn_type_quantizer_weighted((uint32_t)nt)) {
        *qw = e->w;
        stats->n_imatrix++;
    }
    return CN_STATUS_OK;
}

static cn_status plan_types(const cn_gguf *g, const ordered *ord, const cn_quantize_params *p, plan_state *ps,
                            const cn_imatrix *im, cn_type *types, const float **qws, cn_quantize_stats *stats,
                            cn_error *err) {
    const int64_t n = cn_gguf_n_tensors(g);
    int out_t, emb_t;
    cn_status st = parse_override(p->output_type, "output type", &out_t, err);
    if (!st)
        st = parse_override(p->token_embd_type, "token embedding type", &emb_t, err);
    if (st)
        return st;
    ps->tied = cn_gguf_find_tensor(g, "output.weight") < 0;
    for (int64_t i = 0; i < n; i++)
        if (category_of(ord[i].name) == CAT_ATTN_V)
            ps->n_attn_v++;
    bool warned = false;
    for (int64_t i = 0; i < n; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, ord[i].index);
        const char *name = ord[i].name;
        const category cat = category_of(name);
        cn_type nt = (cn_type)t->type;
        if (allows_quantization(name, t)) {
            if (cat == CAT_TOKEN_EMBD && emb_t >= 0) {
                nt = (cn_type)emb_t;
            } else if (cat == CAT_OUTPUT && out_t >= 0) {
                nt = (cn_type)out_t;
            } else {
                nt = p->pure ? ps->base : mix_type(ps, cat, t, out_t);
                nt = fallback(ps, name, t, nt);
            }
        }
        types[i] = nt;
        if (nt == (cn_type)t->type)
            continue;
        if (t->ne[0] % block_of(nt) != 0)
            return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s': %lld columns cannot take %s (blocks of %lld)",
                          name, (long long)t->ne[0], cn_type_name(nt), (long long)block_of(nt));
        const cn_type_traits *src = cn_type_traits_get(t->type);
        if (!src || !src->to_float || t->data == NULL)
            return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor '%s': cannot read its type %u to quantize it again",
                          name, t->type);
        const bool src_quantized = t->type != CN_TYPE_F32 && t->type != CN_TYPE_F16 && t->type != CN_TYPE_BF16;
        if (src_quantized && !p->allow_requantize)
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "tensor '%s' is already %s: requantizing needs allow_requantize (--allow-requantize)",
                          name, cn_type_name((cn_type)t->type));
        if (src_quantized && !warned) {
            cn_log(CN_LOG_WARN, "requantizing: the input is already quantized (%s), so its error and the new "
                   "format's compound; quantize from F32/F16/BF16 where there is one", cn_type_name((cn_type)t->type));
            warned = true;
        }
        cn_status st = find_weights(im, name, t, nt, &qws[i], stats, err);
        if (st)
            return st;
        stats->n_quantized++;
    }
    return CN_STATUS_OK;
}

/* Every key but split.* (one file out) and the two the quantizer owns, which go last in
 * llama-quantize's order (its gguf_set_val removes a key and appends it). */
static bool is_imatrix_key(const char *key) {
    return !strcmp(key, "quantize.imatrix.file") || !strcmp(key, "quantize.imatrix.dataset") ||
           !strcmp(key, "quantize.imatrix.entries_count") || !strcmp(key, "quantize.imatrix.chunks_count");
}

/* llama-quantize keeps 127 bytes of a string it records (a fixed 128-byte field) */
static cn_status set_str127(cn_gguf_writer *w, const char *key, const char *v) {
    return cn_gguf_writer_set_strn(w, key, v, strnlen(v, 127));
}

static cn_status copy_meta(cn_gguf_writer *w, const cn_gguf *g, uint32_t ftype, const cn_imatrix *im,
                           const char *im_path, cn_error *err) {
    char key[512];
    cn_status st = CN_STATUS_OK;
    for (int64_t i = 0; i < cn_gguf_n_kv(g) && !st; i++) {
        const cn_gguf_str ks = cn_gguf_kv_key(g, i);
        if (ks.len >= sizeof key)
            return cn_err(err, CN_STATUS_UNSUPPORTED, "a metadata key of %llu bytes", (unsigned long long)ks.len);
        memcpy(key, ks.ptr, ks.len);
        key[ks.len] = 0;
        if (!strncmp(key, "split.", 6) || !strcmp(key, "general.file_type") ||
            !strcmp(key, "general.quantization_version") || (im && is_imatrix_key(key)))
            continue;
        st = cn_gguf_writer_copy_kv(w, g, i, key, err);
    }
    if (!st)
        st = cn_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!st)
        st = cn_gguf_writer_set_u32(w, "general.file_type", ftype);
    if (!st && im) {
        st = set_str127(w, "quantize.imatrix.file", im_path);
        if (!st && im->dataset)
            st = set_str127(w, "quantize.imatrix.dataset", im->dataset);
        if (!st)
            st = cn_gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n_entries);
        if (!st && im->chunk_count > 0)
            st = cn_gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", (uint32_t)im->chunk_count);
    }
    if (st && err && !err->msg[0])
        cn_err(err, st, "cannot copy the metadata");
    return st;
}

/* Any of names[0..n) a substring of name. */
static bool name_has_any(const char *name, const char *const *names, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (names[i] && strstr(name, names[i]))
            return true;
    return false;
}

/* --include-weights / --exclude-weights, as llama-quantize applies them: by substring. */
static void imatrix_select(cn_imatrix *im, const cn_quantize_params *p) {
    if (p->n_include <= 0 && p->n_exclude <= 0)
        return;
    int64_t k = 0;
    for (int64_t i = 0; i < im->n_entries; i++) {
        cn_imatrix_entry *e = &im->e[i];
        const bool keep = p->n_include > 0 ? name_has_any(e->name, p->include_weights, p->n_include)
                                           : !name_has_any(e->name, p->exclude_weights, p->n_exclude);
        if (keep) {
            im->e[k++] = *e;
        } else {
            free(e->name);
            free(e->w);
        }
    }
    im->n_entries = k; /* still sorted: the kept ones keep their order */
}

cn_status cn_model_quantize(const char *in_path, const char *out_path, const char *type,
                            const cn_quantize_params *pp, cn_quantize_stats *stats_out, cn_error *err) {
    const cn_quantize_params p = pp ? *pp : cn_quantize_default_params();
    cn_quantize_stats stats = {0};
    plan_state ps = {0};
    bool found = false;
    for (size_t i = 0; type && i < sizeof k_ftypes / sizeof k_ftypes[0] && !found; i++) {
        if (!strcasecmp(type, k_ftypes[i].name)) {
            ps.ftype = k_ftypes[i].ftype;
            ps.base = k_ftypes[i].base;
            found = true;
        }
    }
    if (!found)
        return cn_err(err, CN_STATUS_INVALID_ARG, "unknown type '%s' (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K, "
                      "Q4_K_S, Q4_K_M, Q4_K, Q5_K_S, Q5_K_M, Q5_K)", type ? type : "(null)");
    if (p.n_include < 0 || p.n_exclude < 0 || (p.n_include > 0 && !p.include_weights) ||
        (p.n_exclude > 0 && !p.exclude_weights))
        return cn_err(err, CN_STATUS_INVALID_ARG, "bad include/exclude weight lists");
    if (p.n_include > 0 && p.n_exclude > 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "give --include-weights or --exclude-weights, not both");
    if ((p.n_include > 0 || p.n_exclude > 0) && !p.imatrix_path)
        return cn_err(err, CN_STATUS_INVALID_ARG, "--include-weights / --exclude-weights select imatrix entries: "
                      "they need --imatrix");
    if (p.n_threads < 0 || p.n_threads > 1024)
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_threads %d is out of range [0, 1024]", p.n_threads);

    cn_gguf *g = NULL;
    cn_gguf_writer *w = NULL;
    cn_pool *pool = NULL;
    cn_type *types = NULL;
    const float **qws = NULL;
    cn_imatrix *im = NULL;
    ordered *ord = NULL;
    FILE *f = NULL;
    char *tmp = NULL;
    cn_status st = CN_STATUS_OK;
    if (p.imatrix_path && (st = cn_imatrix_load(p.imatrix_path, &im, err)))
        goto done;
    if (im)
        imatrix_select(im, &p);
    if (im && im->n_entries == 0) { /* every entry filtered out: no imatrix at all, as llama-quantize */
        cn_imatrix_free(im);
        im = NULL;
    }
    ps.has_imatrix = im != NULL;
    if ((st = cn_gguf_open(in_path, &g, err)))
        goto done;
    const int64_t n = cn_gguf_n_tensors(g);
    types = calloc((size_t)n + 1, sizeof *types);
    ord = calloc((size_t)n + 1, sizeof *ord);
    qws = calloc((size_t)n + 1, sizeof *qws);
    w = cn_gguf_writer_new();
    if (!types || !ord || !qws || !w) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
        goto done;
    }
    cn_gguf_str arch;
    char key[300];
    uint32_t n_layer = 0;
    if (cn_gguf_get_str(g, "general.architecture", &arch)) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)CN_MIN(arch.len, 200), arch.ptr);
        cn_gguf_get_u32(g, key, &n_layer);
    }
    ps.n_layer = (int)CN_MIN(n_layer, (uint32_t)INT32_MAX);
    stats.n_tensors = n;
    stats.file_type = ps.ftype;
    for (int64_t i = 0; i < n; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        if (t->name.len >= sizeof ord[i].name) {
            st = cn_err(err, CN_STATUS_UNSUPPORTED, "a tensor name of %llu bytes", (unsigned long long)t->name.len);
            goto done;
        }
        ord[i].index = i;
        memcpy(ord[i].name, t->name.ptr, t->name.len);
        ord[i].name[t->name.len] = 0;
        ord[i].layer = layer_of(ord[i].name);
    }
    qsort(ord, (size_t)n, sizeof *ord, cmp_ordered);
    if ((st = plan_types(g, ord, &p, &ps, im, types, qws, &stats, err)))
        goto done;
    stats.n_fallback = ps.n_fallback;
    if ((st = copy_meta(w, g, ps.ftype, im, p.imatrix_path, err)))
        goto done;
    for (int64_t i = 0; i < n && !st; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, ord[i].index);
        const char *name = ord[i].name;
        uint64_t nb = 0;
        if (t->data == NULL || !cn_gguf_tensor_bytes((uint32_t)types[i], t->n_dims, t->ne, &nb)) {
            st = cn_err(err, CN_STATUS_UNSUPPORTED, "tensor '%s': type %u is not one cinder can copy", name,
                        (unsigned)types[i]);
            break;
        }
        st = cn_gguf_writer_add_tensor(w, name, types[i], t->n_dims, t->ne, NULL, nb, err);
        int64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            ne *= t->ne[d];
        stats.n_elem += ne;
    }
    if (st)
        goto done;

    int nth = p.n_threads;
    if (nth == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nth = (int)CN_MAX(1L, CN_MIN(c, 1024L));
    }
    if ((st = cn_pool_create(nth, &pool, err)))
        goto done;

    size_t tl = strlen(out_path) + 16;
    tmp = malloc(tl);
    if (!tmp) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
        goto done;
    }
    /* open(O_EXCL, 0666) rather than mkstemp: the file gets the umask's mode, as any
     * file the user writes */
    int fd = -1;
    for (unsigned k = 0; k < 100 && fd < 0; k++) {
        snprintf(tmp, tl, "%s.tmp%05u", out_path, ((unsigned)getpid() + k * 7919u) % 100000u);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        st = cn_err(err, CN_STATUS_IO, "cannot create a file next to '%s': %s", out_path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        st = cn_err(err, CN_STATUS_IO, "cannot open '%s': %s", tmp, strerror(errno));
        goto done;
    }
    uint32_t align;
    if ((st = cn_gguf_writer_write_header(w, f, &align, err)))
        goto done;
    if (p.progress)
        p.progress(p.progress_user, 0, n, 0);
    for (int64_t i = 0; i < n && !st; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, ord[i].index);
        uint64_t n_out = 0;
        st = write_tensor(f, out_path, t, ord[i].name, types[i], qws[i], align, pool, &n_out, err);
        stats.n_bytes_in += t->n_bytes;
        stats.n_bytes_out += n_out;
        if (!st && p.progress)
            p.progress(p.progress_user, i + 1, n, stats.n_bytes_in);
    }
    if (st)
        goto done;
    errno = 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st = cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", out_path, strerror(errno ? errno : EIO));
        goto done;
    }
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        st = cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", out_path, strerror(errno));
        goto done;
    }
    if (rename(tmp, out_path) != 0) {
        st = cn_err(err, CN_STATUS_IO, "cannot rename the output to '%s': %s", out_path, strerror(errno));
        goto done;
    }
    free(tmp);
    tmp = NULL;
done:
    if (f)
        fclose(f);
    if (tmp) {
        unlink(tmp); /* nothing half-written stays behind */
        free(tmp);
    }
    cn_pool_free(pool);
    cn_gguf_writer_free(w);
    cn_gguf_close(g);
    free(types);
    free(qws);
    free(ord);
    cn_imatrix_free(im);
    if (stats_out)
        *stats_out = stats;
    return st;
}
