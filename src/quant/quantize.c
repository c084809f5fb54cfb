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
 * Design: every tensor's type is planned and checked before a byte is written; then the
 * output is streamed through core/outfile.h (a temporary file renamed over out_path only
 * when every byte is written and synced, so a failure — full disk, bad input — leaves
 * nothing and an existing out_path as it was). The header (all metadata, every tensor's
 * entry) goes first; each tensor is then converted in slabs of rows — every row read as
 * float (dequantized) and quantized again, rows split over the thread pool — and written. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/outfile.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "quant/imatrix.h"
#include "tensor/tensor.h"

/* llama.cpp's llama_ftype numbers (general.file_type). */
enum {
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
};

static const struct {
    const char *name;
    uint32_t ftype;
    cn_type base;
} k_ftypes[] = {
    {"Q4_0", FT_Q4_0, CN_TYPE_Q4_0},     {"Q4_1", FT_Q4_1, CN_TYPE_Q4_1},     {"Q5_0", FT_Q5_0, CN_TYPE_Q5_0},
    {"Q5_1", FT_Q5_1, CN_TYPE_Q5_1},     {"Q8_0", FT_Q8_0, CN_TYPE_Q8_0},     {"Q6_K", FT_Q6_K, CN_TYPE_Q6_K},
    {"Q4_K_S", FT_Q4_K_S, CN_TYPE_Q4_K}, {"Q4_K_M", FT_Q4_K_M, CN_TYPE_Q4_K}, {"Q4_K", FT_Q4_K_M, CN_TYPE_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, CN_TYPE_Q5_K}, {"Q5_K_M", FT_Q5_K_M, CN_TYPE_Q5_K}, {"Q5_K", FT_Q5_K_M, CN_TYPE_Q5_K},
};

#define SLAB_BYTES ((size_t)64 << 20) /* output bytes converted per pool run */

typedef enum { CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN } category;

cn_quantize_params cn_quantize_default_params(void) { return (cn_quantize_params){0}; }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* ggml_n_dims: trailing dimensions of 1 do not count. */
static int n_dims_used(const cn_gguf_tensor_info *t) {
    int n = CN_GGUF_MAX_DIMS;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* llama-quantize's tensor_allows_quantization, for the architectures it names in
 * general terms (no per-architecture lists beyond these names). */
static bool allows_quantization(const char *name, const cn_gguf_tensor_info *t) {
    static const char *const keep[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        ".position_embd",
        ".rel_pos",
        ".patch_embd",
    };
    if (n_dims_used(t) < 2 || !ends_with(name, "weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i])) return false;
    return true;
}

static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight") || strstr(name, "attn_v.weight"))
        return CAT_ATTN_V;
    /* attn_k/q/output and ffn_up/gate: no rule for the types here */
    if (!strstr(name, "ffn_up") && !strstr(name, "ffn_gate") && strstr(name, "ffn_down")) return CAT_FFN_DOWN;
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
        if (out_override >= 0) nt = (cn_type)out_override;
        else if (t->ne[0] % block_of(nt) != 0) nt = CN_TYPE_Q8_0;
        else if (nt != CN_TYPE_Q8_0) nt = CN_TYPE_Q6_K;
    } else if (cat == CAT_ATTN_V) {
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(ps->i_attn_v, ps->n_attn_v)) nt = CN_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && ps->i_attn_v < 4) nt = CN_TYPE_Q5_K;
        ps->i_attn_v++;
    } else if (cat == CAT_FFN_DOWN) {
        int i = ps->i_ffn_down, n = ps->n_layer;
        if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, n)) nt = CN_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < n / 8) nt = CN_TYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && ps->has_imatrix && i < n / 8)
            nt = ft == FT_Q4_0 ? CN_TYPE_Q4_1 : CN_TYPE_Q5_1; /* llama.cpp's guard for the first layers */
        ps->i_ffn_down++;
    }
    return nt;
}

/* tensor_type_fallback: a type whose block does not divide the rows. */
static cn_type fallback(plan_state *ps, const char *name, const cn_gguf_tensor_info *t, cn_type nt) {
    if (t->ne[0] % block_of(nt) == 0) return nt;
    cn_type fb = nt == CN_TYPE_Q4_K   ? CN_TYPE_Q5_0
                 : nt == CN_TYPE_Q5_K ? CN_TYPE_Q5_1
                 : nt == CN_TYPE_Q6_K ? CN_TYPE_Q8_0
                                      : nt;
    if (t->ne[0] % block_of(fb) != 0) fb = CN_TYPE_F16;
    ps->n_fallback++;
    cn_log(CN_LOG_WARN, "%s: %lld columns not a multiple of %s's block of %lld: %s instead", name, (long long)t->ne[0],
           cn_type_name(nt), (long long)block_of(nt), cn_type_name(fb));
    return fb;
}

/* An explicit --output-type / --token-embedding-type: no fallback (as llama-quantize),
 * so rows it cannot take are an error. */
static cn_status parse_override(const char *s, const char *what, int *out, cn_error *err) {
    *out = -1; /* none */
    if (!s) return CN_STATUS_OK;
    uint32_t t;
    if (!cn_type_from_name(s, &t) || !cn_type_quantizer(t))
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "%s '%s' is not a type cinder writes (f32, f16, bf16, "
                      "q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K)",
                      what, s);
    *out = (int)t;
    return CN_STATUS_OK;
}

/* ---- conversion of one slab of rows, split over the pool ---- */

typedef struct {
    const uint8_t *src; /* (n_rows, src_row_bytes) */
    uint8_t *dst;       /* (n_rows, dst_row_bytes) */
    int64_t n_rows, ne0;
    size_t src_row_bytes, dst_row_bytes;
    cn_to_float_fn to_float;
    cn_from_float_fn quant;
    cn_from_float_w_fn quant_w; /* with qw: the weighted quantizer */
    const float *qw;            /* (n_expert, ne0) importance weights, or NULL */
    int64_t row0, ne1;          /* the slab's first row in the tensor; rows per expert */
    float *scratch;             /* (n_threads, ne0) */
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
        else j->quant(row, j->dst + (size_t)r * j->dst_row_bytes, j->ne0);
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
static cn_status write_tensor(FILE *f, const char *path, const cn_gguf_tensor_info *t, const char *name, cn_type nt,
                              const float *qw, uint32_t align, cn_pool *pool, uint64_t *n_out, cn_error *err) {
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
    if (slab_rows < 1) slab_rows = 1;
    if (slab_rows > n_rows) slab_rows = n_rows;
    uint8_t *dst = cn_alloc_aligned((size_t)slab_rows * dst_rb + 1);
    float *scratch = cn_alloc_aligned((size_t)nth * (size_t)ne0 * sizeof(float) + 1);
    cn_status st = CN_STATUS_OK;
    if (!dst || !scratch) st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory converting '%s'", name);
    for (int64_t r = 0; r < n_rows && !st; r += slab_rows) {
        slab_job j = {
            .src = (const uint8_t *)t->data + (size_t)r * src_rb,
            .dst = dst,
            .n_rows = CN_MIN(slab_rows, n_rows - r),
            .ne0 = ne0,
            .src_row_bytes = src_rb,
            .dst_row_bytes = dst_rb,
            .to_float = src_tr->to_float,
            .quant = cn_type_quantizer((uint32_t)nt),
            .quant_w = cn_type_quantizer_weighted((uint32_t)nt),
            .qw = qw,
            .row0 = r,
            .ne1 = CN_MAX(t->ne[1], (int64_t)1),
            .scratch = scratch,
        };
        if (!j.quant_w) j.qw = NULL;
        cn_pool_run(pool, convert_rows, &j);
        st = write_bytes(f, dst, (size_t)j.n_rows * dst_rb, path, err);
    }
    cn_free_aligned(dst);
    cn_free_aligned(scratch);
    *n_out = (uint64_t)n_rows * dst_rb;
    return st ? st : write_pad(f, *n_out, align, path, err);
}

/* ---- one run: what it holds, and its steps in the order they run ---- */

/* Where a tensor stands in llama-quantize's order (the loader's map: layer number,
 * non-layer tensors first as -1, then the name), so that the counters and the file come
 * out the same. */
typedef struct {
    int64_t index;
    long layer;
    char name[256];
} ordered;

typedef struct {
    cn_quantize_params p;
    plan_state ps;
    cn_quantize_stats stats;
    cn_imatrix *im;    /* NULL: none, or every entry filtered out */
    cn_gguf *g;        /* the input */
    int64_t n;         /* its tensors */
    ordered *ord;      /* (n) in llama-quantize's order; the arrays below follow it */
    cn_type *types;    /* (n) each tensor's output type */
    const float **qws; /* (n) its importance weights (views into im), or NULL */
    cn_gguf_writer *w; /* the output's metadata and tensor entries */
} quant_run;

static void quant_run_free(quant_run *q) {
    cn_gguf_writer_free(q->w);
    cn_gguf_close(q->g);
    free(q->types);
    free(q->qws);
    free(q->ord);
    cn_imatrix_free(q->im);
}

/* The file type named by type (llama-quantize's spelling, any case). */
static cn_status find_file_type(const char *type, plan_state *ps, cn_error *err) {
    for (size_t i = 0; type && i < sizeof k_ftypes / sizeof k_ftypes[0]; i++) {
        if (!strcasecmp(type, k_ftypes[i].name)) {
            ps->ftype = k_ftypes[i].ftype;
            ps->base = k_ftypes[i].base;
            return CN_STATUS_OK;
        }
    }
    return cn_err(err, CN_STATUS_INVALID_ARG,
                  "unknown type '%s' (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q6_K, "
                  "Q4_K_S, Q4_K_M, Q4_K, Q5_K_S, Q5_K_M, Q5_K)",
                  type ? type : "(null)");
}

static cn_status check_params(const cn_quantize_params *p, cn_error *err) {
    if (p->n_include < 0 || p->n_exclude < 0 || (p->n_include > 0 && !p->include_weights) ||
        (p->n_exclude > 0 && !p->exclude_weights))
        return cn_err(err, CN_STATUS_INVALID_ARG, "bad include/exclude weight lists");
    if (p->n_include > 0 && p->n_exclude > 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "give --include-weights or --exclude-weights, not both");
    if ((p->n_include > 0 || p->n_exclude > 0) && !p->imatrix_path)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "--include-weights / --exclude-weights select imatrix entries: "
                      "they need --imatrix");
    return cn_threads_check(p->n_threads, "quantize", err);
}

/* Any of names[0..n) a substring of name. */
static bool name_has_any(const char *name, const char *const *names, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (names[i] && strstr(name, names[i])) return true;
    return false;
}

/* --include-weights / --exclude-weights, as llama-quantize applies them: by substring. */
static void imatrix_select(cn_imatrix *im, const cn_quantize_params *p) {
    if (p->n_include <= 0 && p->n_exclude <= 0) return;
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

static cn_status load_imatrix(quant_run *q, cn_error *err) {
    if (!q->p.imatrix_path) return CN_STATUS_OK;
    cn_status st = cn_imatrix_load(q->p.imatrix_path, &q->im, err);
    if (st) return st;
    imatrix_select(q->im, &q->p);
    if (q->im->n_entries == 0) { /* every entry filtered out: no imatrix at all, as llama-quantize */
        cn_imatrix_free(q->im);
        q->im = NULL;
    }
    q->ps.has_imatrix = q->im != NULL;
    return CN_STATUS_OK;
}

/* <arch>.block_count, 0 when the file has none. */
static int n_layer_of(const cn_gguf *g) {
    cn_gguf_str arch;
    char key[300];
    uint32_t n_layer = 0;
    if (cn_gguf_get_str(g, "general.architecture", &arch)) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)CN_MIN(arch.len, 200), arch.ptr);
        cn_gguf_get_u32(g, key, &n_layer);
    }
    return (int)CN_MIN(n_layer, (uint32_t)INT32_MAX);
}

static int cmp_ordered(const void *pa, const void *pb) {
    const ordered *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static long layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return end == name + 4 ? -1 : v;
}

static cn_status order_tensors(quant_run *q, cn_error *err) {
    for (int64_t i = 0; i < q->n; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(q->g, i);
        ordered *o = &q->ord[i];
        if (t->name.len >= sizeof o->name)
            return cn_err(err, CN_STATUS_UNSUPPORTED, "a tensor name of %llu bytes", (unsigned long long)t->name.len);
        o->index = i;
        memcpy(o->name, t->name.ptr, t->name.len);
        o->name[t->name.len] = 0;
        o->layer = layer_of(o->name);
    }
    qsort(q->ord, (size_t)q->n, sizeof *q->ord, cmp_ordered);
    return CN_STATUS_OK;
}

/* Opens the input and lists its tensors in llama-quantize's order. */
static cn_status open_input(quant_run *q, const char *in_path, cn_error *err) {
    cn_status st = cn_gguf_open(in_path, &q->g, err);
    if (st) return st;
    q->n = cn_gguf_n_tensors(q->g);
    q->types = calloc((size_t)q->n + 1, sizeof *q->types);
    q->ord = calloc((size_t)q->n + 1, sizeof *q->ord);
    q->qws = calloc((size_t)q->n + 1, sizeof *q->qws);
    q->w = cn_gguf_writer_new();
    if (!q->types || !q->ord || !q->qws || !q->w) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    q->ps.n_layer = n_layer_of(q->g);
    q->stats.n_tensors = q->n;
    q->stats.file_type = q->ps.ftype;
    return order_tensors(q, err);
}

/* ---- the plan: every tensor's output type, checked before a byte is written ---- */

/* The importance weights for tensor name (being converted to nt), as llama-quantize
 * finds them; *qw stays NULL when there are none or nt takes none. */
static cn_status find_weights(const cn_imatrix *im, const char *name, const cn_gguf_tensor_info *t, cn_type nt,
                              const float **qw, cn_quantize_stats *stats, cn_error *err) {
    *qw = NULL;
    if (!im) return CN_STATUS_OK;
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
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "imatrix entry '%s' has %lld values, the tensor %lld columns "
                      "(an imatrix made for another model?)",
                      name, (long long)e->n, (long long)want);
    }
    if (cn_type_quantizer_weighted((uint32_t)nt)) {
        *qw = e->w;
        stats->n_imatrix++;
    }
    return CN_STATUS_OK;
}

/* The type tensor t becomes: kept when it is not one llama-quantize converts, else an
 * explicit override (out_t, emb_t; -1 for none), else the mix's (or, pure, the base)
 * with the fallback for rows the type's block does not divide. */
static cn_type choose_type(plan_state *ps, bool pure, const char *name, const cn_gguf_tensor_info *t, int out_t,
                           int emb_t) {
    if (!allows_quantization(name, t)) return (cn_type)t->type;
    const category cat = category_of(name);
    if (cat == CAT_TOKEN_EMBD && emb_t >= 0) return (cn_type)emb_t;
    if (cat == CAT_OUTPUT && out_t >= 0) return (cn_type)out_t;
    return fallback(ps, name, t, pure ? ps->base : mix_type(ps, cat, t, out_t));
}

/* Whether t can be converted to nt: its rows fit nt's blocks, its type reads as float,
 * and a quantized input is requantized only when allowed (warned about once). */
static cn_status check_conversion(const cn_quantize_params *p, const char *name, const cn_gguf_tensor_info *t,
                                  cn_type nt, bool *warned, cn_error *err) {
    if (t->ne[0] % block_of(nt) != 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s': %lld columns cannot take %s (blocks of %lld)", name,
                      (long long)t->ne[0], cn_type_name(nt), (long long)block_of(nt));
    const cn_type_traits *src = cn_type_traits_get(t->type);
    if (!src || !src->to_float || t->data == NULL)
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor '%s': cannot read its type %u to quantize it again", name,
                      t->type);
    const bool src_quantized = t->type != CN_TYPE_F32 && t->type != CN_TYPE_F16 && t->type != CN_TYPE_BF16;
    if (src_quantized && !p->allow_requantize)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "tensor '%s' is already %s: requantizing needs allow_requantize (--allow-requantize)", name,
                      cn_type_name((cn_type)t->type));
    if (src_quantized && !*warned) {
        cn_log(CN_LOG_WARN,
               "requantizing: the input is already quantized (%s), so its error and the new "
               "format's compound; quantize from F32/F16/BF16 where there is one",
               cn_type_name((cn_type)t->type));
        *warned = true;
    }
    return CN_STATUS_OK;
}

static cn_status plan_types(quant_run *q, cn_error *err) {
    int out_t, emb_t;
    cn_status st = parse_override(q->p.output_type, "output type", &out_t, err);
    if (!st) st = parse_override(q->p.token_embd_type, "token embedding type", &emb_t, err);
    if (st) return st;
    q->ps.tied = cn_gguf_find_tensor(q->g, "output.weight") < 0;
    for (int64_t i = 0; i < q->n; i++)
        if (category_of(q->ord[i].name) == CAT_ATTN_V) q->ps.n_attn_v++;
    bool warned = false;
    for (int64_t i = 0; i < q->n && !st; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(q->g, q->ord[i].index);
        const char *name = q->ord[i].name;
        const cn_type nt = q->types[i] = choose_type(&q->ps, q->p.pure, name, t, out_t, emb_t);
        if (nt == (cn_type)t->type) continue;
        st = check_conversion(&q->p, name, t, nt, &warned, err);
        if (!st) st = find_weights(q->im, name, t, nt, &q->qws[i], &q->stats, err);
        if (!st) q->stats.n_quantized++;
    }
    q->stats.n_fallback = q->ps.n_fallback;
    return st;
}

/* ---- the output's header ---- */

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
    if (!st) st = cn_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!st) st = cn_gguf_writer_set_u32(w, "general.file_type", ftype);
    if (!st && im) {
        st = set_str127(w, "quantize.imatrix.file", im_path);
        if (!st && im->dataset) st = set_str127(w, "quantize.imatrix.dataset", im->dataset);
        if (!st) st = cn_gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n_entries);
        if (!st && im->chunk_count > 0)
            st = cn_gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", (uint32_t)im->chunk_count);
    }
    if (st && err && !err->msg[0]) cn_err(err, st, "cannot copy the metadata");
    return st;
}

/* The metadata, then every tensor's entry (its planned type and size) in file order. */
static cn_status build_header(quant_run *q, cn_error *err) {
    cn_status st = copy_meta(q->w, q->g, q->ps.ftype, q->im, q->p.imatrix_path, err);
    for (int64_t i = 0; i < q->n && !st; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(q->g, q->ord[i].index);
        const char *name = q->ord[i].name;
        uint64_t nb = 0;
        if (t->data == NULL || !cn_gguf_tensor_bytes((uint32_t)q->types[i], t->n_dims, t->ne, &nb))
            return cn_err(err, CN_STATUS_UNSUPPORTED, "tensor '%s': type %u is not one cinder can copy", name,
                          (unsigned)q->types[i]);
        st = cn_gguf_writer_add_tensor(q->w, name, q->types[i], t->n_dims, t->ne, NULL, nb, err);
        int64_t ne = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne *= t->ne[d];
        q->stats.n_elem += ne;
    }
    return st;
}

/* ---- the output: header, then each tensor converted, through a temporary file ---- */

static cn_status write_tensors(quant_run *q, FILE *f, const char *out_path, uint32_t align, cn_pool *pool,
                               cn_error *err) {
    if (q->p.progress) q->p.progress(q->p.progress_user, 0, q->n, 0);
    cn_status st = CN_STATUS_OK;
    for (int64_t i = 0; i < q->n && !st; i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(q->g, q->ord[i].index);
        uint64_t n_out = 0;
        st = write_tensor(f, out_path, t, q->ord[i].name, q->types[i], q->qws[i], align, pool, &n_out, err);
        q->stats.n_bytes_in += t->n_bytes;
        q->stats.n_bytes_out += n_out;
        if (!st && q->p.progress) q->p.progress(q->p.progress_user, i + 1, q->n, q->stats.n_bytes_in);
    }
    return st;
}

static cn_status write_output(quant_run *q, const char *out_path, cn_error *err) {
    cn_pool *pool = NULL;
    cn_outfile o;
    uint32_t align;
    cn_status st = cn_pool_create(cn_threads_resolve(q->p.n_threads), &pool, err);
    if (!st && !(st = cn_outfile_open(&o, out_path, err))) {
        st = cn_gguf_writer_write_header(q->w, o.f, &align, err);
        if (!st) st = write_tensors(q, o.f, out_path, align, pool, err);
        st = st ? (cn_outfile_abort(&o), st) : cn_outfile_commit(&o, err);
    }
    cn_pool_free(pool);
    return st;
}

cn_status cn_model_quantize(const char *in_path, const char *out_path, const char *type, const cn_quantize_params *pp,
                            cn_quantize_stats *stats_out, cn_error *err) {
    quant_run q = {.p = pp ? *pp : cn_quantize_default_params()};
    cn_status st = find_file_type(type, &q.ps, err);
    if (!st) st = check_params(&q.p, err);
    if (st) return st; /* stats_out untouched: nothing was read */
    st = load_imatrix(&q, err);
    if (!st) st = open_input(&q, in_path, err);
    if (!st) st = plan_types(&q, err);
    if (!st) st = build_header(&q, err);
    if (!st) st = write_output(&q, out_path, err);
    quant_run_free(&q);
    if (stats_out) *stats_out = q.stats;
    return st;
}
