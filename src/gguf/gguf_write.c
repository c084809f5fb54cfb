/* gguf_write.c — the GGUF writer.
 *
 * Collects keys/values and tensors in memory (copies: the caller's buffers may go away),
 * then writes a file laid out as llama.cpp's gguf writer and gguf-py do: header, key/values
 * in insertion order, tensor infos, zero padding to the alignment (general.alignment or
 * 32), then each tensor's bytes padded with zeros to the alignment, offsets counted from
 * the start of the data section. A value is stored already encoded (the bytes that follow
 * its type in the file), so nested arrays are built bottom-up with cn_gguf_warr. A file
 * is written through core/outfile.h: a failed write leaves an existing file as it was. */
#include "gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/outfile.h"

/* --- encoded values: bytes appended to a cn_buf --- */

static bool put_u32(cn_buf *b, uint32_t v) { return cn_buf_put(b, &v, 4); }
static bool put_u64(cn_buf *b, uint64_t v) { return cn_buf_put(b, &v, 8); }
static bool put_str(cn_buf *b, const char *s, uint64_t n) { return put_u64(b, n) && cn_buf_put(b, s, n); }

/* --- array values --- */

struct cn_gguf_warr {
    cn_gguf_vtype elem;
    uint64_t n;
    cn_buf body; /* the encoded elements */
};

cn_gguf_warr *cn_gguf_warr_new(cn_gguf_vtype elem) {
    if ((uint32_t)elem > CN_GGUF_FLOAT64) return NULL;
    cn_gguf_warr *a = calloc(1, sizeof *a);
    if (a) a->elem = elem;
    return a;
}

void cn_gguf_warr_free(cn_gguf_warr *a) {
    if (!a) return;
    cn_buf_free(&a->body);
    free(a);
}

cn_status cn_gguf_warr_push(cn_gguf_warr *a, const void *v) {
    size_t es = cn_gguf_vtype_size(a->elem);
    if (!es) return CN_STATUS_INVALID_ARG;
    if (!cn_buf_put(&a->body, v, es)) return CN_STATUS_NO_MEMORY;
    a->n++;
    return CN_STATUS_OK;
}

cn_status cn_gguf_warr_push_str(cn_gguf_warr *a, const char *s, uint64_t len) {
    if (a->elem != CN_GGUF_STRING) return CN_STATUS_INVALID_ARG;
    if (!put_str(&a->body, s, len)) return CN_STATUS_NO_MEMORY;
    a->n++;
    return CN_STATUS_OK;
}

static bool put_warr(cn_buf *b, const cn_gguf_warr *a) {
    return put_u32(b, (uint32_t)a->elem) && put_u64(b, a->n) && cn_buf_put(b, a->body.p, a->body.n);
}

cn_status cn_gguf_warr_push_arr(cn_gguf_warr *a, const cn_gguf_warr *sub) {
    if (a->elem != CN_GGUF_ARRAY || sub == a) return CN_STATUS_INVALID_ARG;
    if (!put_warr(&a->body, sub)) return CN_STATUS_NO_MEMORY;
    a->n++;
    return CN_STATUS_OK;
}

/* --- the writer --- */

typedef struct {
    char *key;
    cn_gguf_vtype type;
    cn_buf val; /* the encoded value */
} wkv;

typedef struct {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[CN_GGUF_MAX_DIMS];
    uint8_t *data;
    uint64_t n_bytes;
} wtensor;

struct cn_gguf_writer {
    uint32_t version;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

cn_gguf_writer *cn_gguf_writer_new(void) {
    cn_gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->version = 3;
    return w;
}

void cn_gguf_writer_free(cn_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        cn_buf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

void cn_gguf_writer_set_version(cn_gguf_writer *w, uint32_t version) { w->version = version; }

/* Stores an encoded value under key, replacing an earlier one in place. Takes val (and
 * frees it on failure). */
static cn_status set_encoded(cn_gguf_writer *w, const char *key, cn_gguf_vtype t, cn_buf val) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            cn_buf_free(&w->kv[i].val);
            w->kv[i].type = t;
            w->kv[i].val = val;
            return CN_STATUS_OK;
        }
    }
    char *k = CN_GROW(w->kv, w->cap_kv, w->n_kv + 1) ? strdup(key) : NULL;
    if (!k) {
        cn_buf_free(&val);
        return CN_STATUS_NO_MEMORY;
    }
    w->kv[w->n_kv++] = (wkv){k, t, val};
    return CN_STATUS_OK;
}

cn_status cn_gguf_writer_set_scalar(cn_gguf_writer *w, const char *key, cn_gguf_vtype t, const void *v) {
    size_t es = cn_gguf_vtype_size(t);
    if (!es) return CN_STATUS_INVALID_ARG;
    cn_buf b = {0};
    if (!cn_buf_put(&b, v, es)) return CN_STATUS_NO_MEMORY;
    return set_encoded(w, key, t, b);
}

cn_status cn_gguf_writer_set_u32(cn_gguf_writer *w, const char *key, uint32_t v) {
    return cn_gguf_writer_set_scalar(w, key, CN_GGUF_UINT32, &v);
}
cn_status cn_gguf_writer_set_i32(cn_gguf_writer *w, const char *key, int32_t v) {
    return cn_gguf_writer_set_scalar(w, key, CN_GGUF_INT32, &v);
}
cn_status cn_gguf_writer_set_u64(cn_gguf_writer *w, const char *key, uint64_t v) {
    return cn_gguf_writer_set_scalar(w, key, CN_GGUF_UINT64, &v);
}
cn_status cn_gguf_writer_set_f32(cn_gguf_writer *w, const char *key, float v) {
    return cn_gguf_writer_set_scalar(w, key, CN_GGUF_FLOAT32, &v);
}
cn_status cn_gguf_writer_set_bool(cn_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return cn_gguf_writer_set_scalar(w, key, CN_GGUF_BOOL, &b);
}

cn_status cn_gguf_writer_set_strn(cn_gguf_writer *w, const char *key, const char *v, uint64_t len) {
    cn_buf b = {0};
    if (!put_str(&b, v, len)) {
        cn_buf_free(&b);
        return CN_STATUS_NO_MEMORY;
    }
    return set_encoded(w, key, CN_GGUF_STRING, b);
}

cn_status cn_gguf_writer_set_str(cn_gguf_writer *w, const char *key, const char *v) {
    return cn_gguf_writer_set_strn(w, key, v, strlen(v));
}

cn_status cn_gguf_writer_set_arr(cn_gguf_writer *w, const char *key, cn_gguf_vtype elem, const void *data, uint64_t n) {
    size_t es = cn_gguf_vtype_size(elem);
    uint64_t body;
    if (!es || !cn_mul_ok(n, es, &body) || body > SIZE_MAX) return CN_STATUS_INVALID_ARG;
    cn_buf b = {0};
    if (!put_u32(&b, (uint32_t)elem) || !put_u64(&b, n) || !cn_buf_put(&b, data, (size_t)body)) {
        cn_buf_free(&b);
        return CN_STATUS_NO_MEMORY;
    }
    return set_encoded(w, key, CN_GGUF_ARRAY, b);
}

cn_status cn_gguf_writer_set_arr_str(cn_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    cn_buf b = {0};
    bool ok = put_u32(&b, CN_GGUF_STRING) && put_u64(&b, n);
    for (uint64_t i = 0; ok && i < n; i++) ok = put_str(&b, strs[i], strlen(strs[i]));
    if (!ok) {
        cn_buf_free(&b);
        return CN_STATUS_NO_MEMORY;
    }
    return set_encoded(w, key, CN_GGUF_ARRAY, b);
}

cn_status cn_gguf_writer_set_warr(cn_gguf_writer *w, const char *key, const cn_gguf_warr *a) {
    cn_buf b = {0};
    if (!put_warr(&b, a)) {
        cn_buf_free(&b);
        return CN_STATUS_NO_MEMORY;
    }
    return set_encoded(w, key, CN_GGUF_ARRAY, b);
}

cn_status cn_gguf_writer_add_tensor(cn_gguf_writer *w, const char *name, cn_type type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t n_bytes, cn_error *err) {
    if (n_dims > CN_GGUF_MAX_DIMS)
        return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s': %u dimensions (at most %d)", name, n_dims,
                      CN_GGUF_MAX_DIMS);
    uint64_t want;
    if (!cn_gguf_tensor_bytes((uint32_t)type, n_dims, ne, &want))
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "tensor '%s': type %u and this shape do not make a whole number of blocks", name, (unsigned)type);
    if (want != n_bytes || want > SIZE_MAX)
        return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s': %llu bytes given, its shape needs %llu", name,
                      (unsigned long long)n_bytes, (unsigned long long)want);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s' added twice", name);
    if (!CN_GROW(w->t, w->cap_t, w->n_t + 1)) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    wtensor t = {.type = (uint32_t)type, .n_dims = n_dims, .n_bytes = n_bytes};
    for (uint32_t d = 0; d < CN_GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    t.name = strdup(name);
    t.data = data ? malloc(n_bytes ? (size_t)n_bytes : 1) : NULL;
    if (!t.name || (data && !t.data)) {
        free(t.name);
        free(t.data);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for tensor '%s'", name);
    }
    if (data && n_bytes) memcpy(t.data, data, (size_t)n_bytes);
    w->t[w->n_t++] = t;
    return CN_STATUS_OK;
}

/* --- output --- */

/* Where the bytes go: a FILE or a memory buffer. */
typedef struct {
    FILE *f;
    cn_buf mem;
    bool failed;
    uint64_t n; /* bytes written so far */
} sink;

static void emit(sink *s, const void *p, size_t n) {
    if (s->failed || n == 0) return;
    if (s->f ? fwrite(p, 1, n, s->f) != n : !cn_buf_put(&s->mem, p, n)) s->failed = true;
    s->n += n;
}

static void emit_u32(sink *s, uint32_t v) { emit(s, &v, 4); }
static void emit_u64(sink *s, uint64_t v) { emit(s, &v, 8); }

static void emit_pad(sink *s, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - s->n % align) % align;
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        emit(s, zeros, k);
        pad -= k;
    }
}

static cn_status writer_alignment(const cn_gguf_writer *w, uint32_t *out, cn_error *err) {
    *out = CN_GGUF_DEFAULT_ALIGN;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        uint32_t v;
        if (w->kv[i].type != CN_GGUF_UINT32)
            return cn_err(err, CN_STATUS_INVALID_ARG, "general.alignment must be a u32");
        memcpy(&v, w->kv[i].val.p, 4);
        if (v == 0 || (v & (v - 1)))
            return cn_err(err, CN_STATUS_INVALID_ARG, "general.alignment %u is not a power of two", v);
        *out = v;
    }
    return CN_STATUS_OK;
}

/* header_only: stop after the padding that opens the data section (the caller streams
 * the tensors); otherwise every tensor must carry its data. */
static cn_status write_all(const cn_gguf_writer *w, sink *s, bool header_only, cn_error *err) {
    uint32_t align;
    cn_status st = writer_alignment(w, &align, err);
    if (st) return st;
    for (size_t i = 0; i < w->n_t && !header_only; i++)
        if (!w->t[i].data) return cn_err(err, CN_STATUS_INVALID_ARG, "tensor '%s' has no data", w->t[i].name);
    emit(s, "GGUF", 4);
    emit_u32(s, w->version);
    emit_u64(s, w->n_t);
    emit_u64(s, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        emit_u64(s, strlen(w->kv[i].key));
        emit(s, w->kv[i].key, strlen(w->kv[i].key));
        emit_u32(s, (uint32_t)w->kv[i].type);
        emit(s, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        emit_u64(s, strlen(t->name));
        emit(s, t->name, strlen(t->name));
        emit_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) emit_u64(s, (uint64_t)t->ne[d]);
        emit_u32(s, t->type);
        emit_u64(s, offset);
        uint64_t padded = t->n_bytes + (align - t->n_bytes % align) % align;
        if (!cn_add_ok(offset, padded, &offset)) return cn_err(err, CN_STATUS_LIMIT, "tensor data exceeds 2^64 bytes");
    }
    emit_pad(s, align);
    if (header_only) return CN_STATUS_OK;
    for (size_t i = 0; i < w->n_t; i++) {
        emit(s, w->t[i].data, (size_t)w->t[i].n_bytes);
        emit_pad(s, align);
    }
    return CN_STATUS_OK;
}

cn_status cn_gguf_writer_write_mem(const cn_gguf_writer *w, uint8_t **out, size_t *n_bytes, cn_error *err) {
    *out = NULL;
    *n_bytes = 0;
    sink s = {0};
    cn_status st = write_all(w, &s, false, err);
    if (!st && s.failed) st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory writing GGUF");
    if (st) {
        cn_buf_free(&s.mem);
        return st;
    }
    *out = (uint8_t *)cn_buf_take(&s.mem, n_bytes);
    if (!*out) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    return CN_STATUS_OK;
}

cn_status cn_gguf_writer_write_file(const cn_gguf_writer *w, const char *path, cn_error *err) {
    cn_outfile o;
    cn_status st = cn_outfile_open(&o, path, err);
    if (st) return st;
    sink s = {.f = o.f};
    st = write_all(w, &s, false, err);
    if (!st && s.failed) st = cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", path, strerror(errno ? errno : EIO));
    if (st) {
        cn_outfile_abort(&o);
        return st;
    }
    return cn_outfile_commit(&o, err);
}

cn_status cn_gguf_writer_write_header(const cn_gguf_writer *w, FILE *f, uint32_t *align, cn_error *err) {
    cn_status st = writer_alignment(w, align, err);
    if (st) return st;
    sink s = {.f = f};
    st = write_all(w, &s, true, err);
    if (st) return st;
    if (s.failed) return cn_err(err, CN_STATUS_IO, "cannot write the GGUF header: %s", strerror(errno));
    return CN_STATUS_OK;
}

cn_status cn_gguf_writer_copy_kv(cn_gguf_writer *w, const cn_gguf *g, int64_t i, const char *key, cn_error *err) {
    cn_gguf_vtype t = cn_gguf_kv_type(g, i);
    if (t == CN_GGUF_STRING) {
        cn_gguf_str s;
        if (!cn_gguf_kv_str(g, i, &s)) return cn_err(err, CN_STATUS_CORRUPT, "%s: bad string", key);
        return cn_gguf_writer_set_strn(w, key, s.ptr, s.len);
    }
    if (t == CN_GGUF_ARRAY) {
        cn_gguf_arr a;
        if (!cn_gguf_kv_arr(g, i, &a)) return cn_err(err, CN_STATUS_CORRUPT, "%s: bad array", key);
        if (a.type == CN_GGUF_ARRAY) return cn_err(err, CN_STATUS_UNSUPPORTED, "%s: nested array not copied", key);
        if (a.type != CN_GGUF_STRING) return cn_gguf_writer_set_arr(w, key, a.type, a.data, a.n);
        cn_gguf_warr *wa = cn_gguf_warr_new(CN_GGUF_STRING);
        if (!wa) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
        cn_status st = CN_STATUS_OK;
        for (uint64_t j = 0; j < a.n && !st; j++) {
            cn_gguf_str s = cn_gguf_arr_str(&a, j);
            st = cn_gguf_warr_push_str(wa, s.ptr, s.len);
        }
        if (!st) st = cn_gguf_writer_set_warr(w, key, wa);
        cn_gguf_warr_free(wa);
        return st;
    }
    /* a scalar: re-encode in its own type */
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    int64_t iv = 0;
    double fv = 0;
    bool ok = (t == CN_GGUF_FLOAT32 || t == CN_GGUF_FLOAT64) ? cn_gguf_kv_f64(g, i, &fv) : cn_gguf_kv_i64(g, i, &iv);
    if (!ok) return cn_err(err, CN_STATUS_CORRUPT, "%s: unreadable value", key);
    switch (t) {
    case CN_GGUF_UINT8:
    case CN_GGUF_BOOL: v.u8 = (uint8_t)iv; break;
    case CN_GGUF_INT8: v.i8 = (int8_t)iv; break;
    case CN_GGUF_UINT16: v.u16 = (uint16_t)iv; break;
    case CN_GGUF_INT16: v.i16 = (int16_t)iv; break;
    case CN_GGUF_UINT32: v.u32 = (uint32_t)iv; break;
    case CN_GGUF_INT32: v.i32 = (int32_t)iv; break;
    case CN_GGUF_UINT64: v.u64 = (uint64_t)iv; break;
    case CN_GGUF_INT64: v.i64 = iv; break;
    case CN_GGUF_FLOAT32: v.f32 = (float)fv; break;
    case CN_GGUF_FLOAT64: v.f64 = fv; break;
    default: return cn_err(err, CN_STATUS_UNSUPPORTED, "%s: value type %d", key, (int)t);
    }
    return cn_gguf_writer_set_scalar(w, key, t, &v);
}
