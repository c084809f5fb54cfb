/* gguf.c — the GGUF v2/v3 reader.
 *
 * Reads a whole file (a mapping or a borrowed buffer) in one forward pass through a cursor
 * that never moves past the end: every count, length, offset and size is checked against
 * the bytes left before it is used or allocated for, so a file claiming 2^60 keys fails at
 * once with a message instead of an allocation. Values stay in the file; the reader keeps
 * only views plus, for arrays of strings or arrays, a table of element offsets built here so
 * that element j is O(1) (vocabularies hold 262k strings). Keys and tensor names are
 * indexed in hash tables, which also reject duplicates in O(n). This file knows the GGUF
 * format and the ggml block sizes, nothing about models or tokenizers. */
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC "GGUF"
#define MIN_KV_BYTES 13     /* key length (8) + type (4) + the smallest value (1) */
#define MIN_TENSOR_BYTES 24 /* name length (8) + n_dims (4) + type (4) + offset (8) */

/* --- ggml block sizes (the GGUF tensor types), as ggml's type traits define them --- */

typedef struct {
    uint32_t block_size;
    uint32_t type_size;
} type_size;

static const type_size k_type_sizes[] = {
    [0] = {1, 4},      /* F32 */
    [1] = {1, 2},      /* F16 */
    [2] = {32, 18},    /* Q4_0 */
    [3] = {32, 20},    /* Q4_1 */
    [6] = {32, 22},    /* Q5_0 */
    [7] = {32, 24},    /* Q5_1 */
    [8] = {32, 34},    /* Q8_0 */
    [9] = {32, 36},    /* Q8_1 (ggml's half d, s; gguf-py still says 40) */
    [10] = {256, 84},  /* Q2_K */
    [11] = {256, 110}, /* Q3_K */
    [12] = {256, 144}, /* Q4_K */
    [13] = {256, 176}, /* Q5_K */
    [14] = {256, 210}, /* Q6_K */
    [15] = {256, 292}, /* Q8_K */
    [16] = {256, 66},  /* IQ2_XXS */
    [17] = {256, 74},  /* IQ2_XS */
    [18] = {256, 98},  /* IQ3_XXS */
    [19] = {256, 50},  /* IQ1_S */
    [20] = {32, 18},   /* IQ4_NL */
    [21] = {256, 110}, /* IQ3_S */
    [22] = {256, 82},  /* IQ2_S */
    [23] = {256, 136}, /* IQ4_XS */
    [24] = {1, 1},     /* I8 */
    [25] = {1, 2},     /* I16 */
    [26] = {1, 4},     /* I32 */
    [27] = {1, 8},     /* I64 */
    [28] = {1, 8},     /* F64 */
    [29] = {256, 56},  /* IQ1_M */
    [30] = {1, 2},     /* BF16 */
    [34] = {256, 54},  /* TQ1_0 */
    [35] = {256, 66},  /* TQ2_0 */
    [39] = {32, 17},   /* MXFP4 */
};

bool cn_gguf_type_size(uint32_t type, uint32_t *block_size, uint32_t *type_bytes) {
    if (type >= CN_ARRAY_LEN(k_type_sizes) || k_type_sizes[type].block_size == 0) return false;
    if (block_size) *block_size = k_type_sizes[type].block_size;
    if (type_bytes) *type_bytes = k_type_sizes[type].type_size;
    return true;
}

bool cn_gguf_tensor_bytes(uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t *out) {
    uint32_t bs, ts;
    if (!cn_gguf_type_size(type, &bs, &ts) || n_dims > CN_GGUF_MAX_DIMS) return false;
    if (n_dims == 0) {
        if (bs != 1) return false;
        *out = ts;
        return true;
    }
    if (ne[0] < 0 || (uint64_t)ne[0] % bs) return false;
    uint64_t n;
    if (!cn_mul_ok((uint64_t)ne[0] / bs, ts, &n)) return false;
    for (uint32_t d = 1; d < n_dims; d++)
        if (ne[d] < 0 || !cn_mul_ok(n, (uint64_t)ne[d], &n)) return false;
    *out = n;
    return true;
}

/* --- value types --- */

size_t cn_gguf_vtype_size(cn_gguf_vtype t) {
    /* clang-format off */
    switch (t) {
    case CN_GGUF_UINT8: case CN_GGUF_INT8: case CN_GGUF_BOOL: return 1;
    case CN_GGUF_UINT16: case CN_GGUF_INT16: return 2;
    case CN_GGUF_UINT32: case CN_GGUF_INT32: case CN_GGUF_FLOAT32: return 4;
    case CN_GGUF_UINT64: case CN_GGUF_INT64: case CN_GGUF_FLOAT64: return 8;
    case CN_GGUF_STRING: case CN_GGUF_ARRAY: return 0;
    }
    /* clang-format on */
    return 0;
}

const char *cn_gguf_vtype_name(cn_gguf_vtype t) {
    switch (t) {
    case CN_GGUF_UINT8: return "u8";
    case CN_GGUF_INT8: return "i8";
    case CN_GGUF_UINT16: return "u16";
    case CN_GGUF_INT16: return "i16";
    case CN_GGUF_UINT32: return "u32";
    case CN_GGUF_INT32: return "i32";
    case CN_GGUF_FLOAT32: return "f32";
    case CN_GGUF_BOOL: return "bool";
    case CN_GGUF_STRING: return "string";
    case CN_GGUF_ARRAY: return "array";
    case CN_GGUF_UINT64: return "u64";
    case CN_GGUF_INT64: return "i64";
    case CN_GGUF_FLOAT64: return "f64";
    }
    return "unknown";
}

static bool vtype_valid(uint32_t t) { return t <= CN_GGUF_FLOAT64; }

static bool vtype_is_int(cn_gguf_vtype t) {
    /* clang-format off */
    switch (t) {
    case CN_GGUF_UINT8: case CN_GGUF_INT8: case CN_GGUF_UINT16: case CN_GGUF_INT16:
    case CN_GGUF_UINT32: case CN_GGUF_INT32: case CN_GGUF_UINT64: case CN_GGUF_INT64:
        return true;
    default:
        return false;
    }
    /* clang-format on */
}

bool cn_gguf_str_eq(cn_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.ptr && s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* --- the parsed file --- */

typedef struct {
    cn_gguf_str key;
    cn_gguf_vtype type;
    const uint8_t *val; /* scalar or string value in the file */
    cn_gguf_arr arr;    /* type ARRAY */
} kv_entry;

/* Allocations that live as long as the cn_gguf (offset tables, sub-array tables). */
typedef struct chunk {
    struct chunk *next;
    max_align_t pad[];
} chunk;

/* Open-addressing hash index over names: slot holds index + 1, 0 is empty. */
typedef struct {
    uint32_t *slots;
    uint64_t mask;
} name_index;

struct cn_gguf {
    cn_mapped_file map; /* zeroed when the buffer is borrowed */
    const uint8_t *base;
    size_t n_bytes;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    kv_entry *kv;
    int64_t n_tensors;
    cn_gguf_tensor_info *tensors;
    name_index kv_index, tensor_index;
    chunk *chunks;
};

static void *g_alloc(cn_gguf *g, size_t n) {
    if (n > SIZE_MAX - sizeof(chunk)) return NULL;
    chunk *c = malloc(sizeof(chunk) + n);
    if (!c) return NULL;
    c->next = g->chunks;
    g->chunks = c;
    return c->pad;
}

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool index_init(cn_gguf *g, name_index *ix, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ix->slots = g_alloc(g, cap * sizeof(uint32_t));
    if (!ix->slots) return false;
    memset(ix->slots, 0, cap * sizeof(uint32_t));
    ix->mask = cap - 1;
    return true;
}

/* Looks up (p, n); names[i] is the name of entry i. Returns the index or -1; with insert,
 * adds entry `idx` when absent. */
static int64_t index_find(const name_index *ix, const char *p, uint64_t n,
                          const cn_gguf_str *(*name_of)(const cn_gguf *, int64_t), const cn_gguf *g, bool insert,
                          int64_t idx) {
    if (!ix->slots) return -1;
    uint64_t h = hash_bytes(p, n) & ix->mask;
    for (;;) {
        uint32_t s = ix->slots[h];
        if (s == 0) {
            if (insert) ix->slots[h] = (uint32_t)(idx + 1);
            return -1;
        }
        const cn_gguf_str *nm = name_of(g, (int64_t)s - 1);
        if (nm->len == n && memcmp(nm->ptr, p, n) == 0) return (int64_t)s - 1;
        h = (h + 1) & ix->mask;
    }
}

static const cn_gguf_str *kv_name(const cn_gguf *g, int64_t i) { return &g->kv[i].key; }
static const cn_gguf_str *tensor_name(const cn_gguf *g, int64_t i) { return &g->tensors[i].name; }

/* --- the cursor --- */

typedef struct {
    const uint8_t *base;
    size_t n;
    size_t pos;
    cn_error *err;
    char what[96]; /* "kv 3 ('general.name')": the item being read, for messages */
} cursor;

static size_t left(const cursor *c) { return c->n - c->pos; }

/* A printable, shortened copy of a name from the file for a one-line message. */
static void printable(char *dst, size_t cap, const char *p, uint64_t n) {
    size_t k = 0;
    size_t max = cap - 1;
    bool cut = n > 40;
    uint64_t m = cut ? 37 : n;
    for (uint64_t i = 0; i < m && k < max; i++) {
        unsigned char ch = (unsigned char)p[i];
        dst[k++] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    for (int i = 0; cut && i < 3 && k < max; i++) dst[k++] = '.';
    dst[k] = '\0';
}

static void set_what(cursor *c, const char *kind, int64_t i, const cn_gguf_str *name) {
    if (name) {
        char nm[48];
        printable(nm, sizeof nm, name->ptr, name->len);
        snprintf(c->what, sizeof c->what, "%s %lld ('%s')", kind, (long long)i, nm);
    } else {
        snprintf(c->what, sizeof c->what, "%s %lld", kind, (long long)i);
    }
}

static cn_status need(cursor *c, uint64_t n_bytes, const char *thing) {
    if (n_bytes > left(c))
        return cn_err(c->err, CN_STATUS_CORRUPT, "%s: %s needs %llu bytes but only %zu are left", c->what, thing,
                      (unsigned long long)n_bytes, left(c));
    return CN_STATUS_OK;
}

static cn_status rd_u32(cursor *c, uint32_t *v, const char *thing) {
    cn_status s = need(c, 4, thing);
    if (s) return s;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return CN_STATUS_OK;
}

static cn_status rd_u64(cursor *c, uint64_t *v, const char *thing) {
    cn_status s = need(c, 8, thing);
    if (s) return s;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return CN_STATUS_OK;
}

static cn_status rd_str(cursor *c, cn_gguf_str *out, const char *thing) {
    uint64_t len;
    cn_status s = rd_u64(c, &len, thing);
    if (s) return s;
    if (len > left(c))
        return cn_err(c->err, CN_STATUS_CORRUPT, "%s: %s length %llu exceeds the %zu bytes left", c->what, thing,
                      (unsigned long long)len, left(c));
    out->ptr = (const char *)c->base + c->pos;
    out->len = len;
    c->pos += (size_t)len;
    return CN_STATUS_OK;
}

/* Reads an array body (element type, count, elements) into *a; depth counts array levels. */
static cn_status rd_array(cn_gguf *g, cursor *c, cn_gguf_arr *a, int depth) {
    if (depth > CN_GGUF_MAX_NEST)
        return cn_err(c->err, CN_STATUS_CORRUPT, "%s: arrays nested deeper than %d levels", c->what, CN_GGUF_MAX_NEST);
    uint32_t et;
    uint64_t n;
    cn_status s = rd_u32(c, &et, "array element type");
    if (s) return s;
    if (!vtype_valid(et)) return cn_err(c->err, CN_STATUS_CORRUPT, "%s: invalid array element type %u", c->what, et);
    if ((s = rd_u64(c, &n, "array length"))) return s;
    memset(a, 0, sizeof *a);
    a->type = (cn_gguf_vtype)et;
    a->n = n;
    a->data = c->base + c->pos;
    size_t es = cn_gguf_vtype_size(a->type);
    /* the smallest encoding of one element: fixed size, a string length, an array header */
    uint64_t min_el = es ? es : et == CN_GGUF_STRING ? 8 : 12;
    uint64_t min_total;
    if (!cn_mul_ok(n, min_el, &min_total) || min_total > left(c))
        return cn_err(c->err, CN_STATUS_CORRUPT,
                      "%s: array of %llu × %s (at least %llu bytes each) exceeds the %zu bytes left", c->what,
                      (unsigned long long)n, cn_gguf_vtype_name(a->type), (unsigned long long)min_el, left(c));
    if (es) {
        c->pos += (size_t)min_total;
        return CN_STATUS_OK;
    }
    if (n == 0) return CN_STATUS_OK;
    uint64_t *off = g_alloc(g, (size_t)n * sizeof(uint64_t));
    cn_gguf_arr *sub = NULL;
    if (off && et == CN_GGUF_ARRAY) sub = g_alloc(g, (size_t)n * sizeof(cn_gguf_arr));
    if (!off || (et == CN_GGUF_ARRAY && !sub))
        return cn_err(c->err, CN_STATUS_NO_MEMORY, "%s: out of memory for a %llu-element array", c->what,
                      (unsigned long long)n);
    size_t start = c->pos;
    for (uint64_t j = 0; j < n; j++) {
        off[j] = c->pos - start;
        if (et == CN_GGUF_STRING) {
            uint64_t len;
            if ((s = rd_u64(c, &len, "string length"))) return s;
            if (len > left(c))
                return cn_err(c->err, CN_STATUS_CORRUPT,
                              "%s: string %llu of the array: length %llu exceeds the %zu bytes left", c->what,
                              (unsigned long long)j, (unsigned long long)len, left(c));
            c->pos += (size_t)len;
        } else {
            if ((s = rd_array(g, c, &sub[j], depth + 1))) return s;
        }
    }
    a->str_off = off;
    a->internal = sub;
    return CN_STATUS_OK;
}

static cn_status rd_value(cn_gguf *g, cursor *c, kv_entry *e) {
    e->val = c->base + c->pos;
    size_t es = cn_gguf_vtype_size(e->type);
    if (es) {
        cn_status s = need(c, es, cn_gguf_vtype_name(e->type));
        if (s) return s;
        c->pos += es;
        return CN_STATUS_OK;
    }
    if (e->type == CN_GGUF_STRING) {
        cn_gguf_str tmp;
        return rd_str(c, &tmp, "string");
    }
    return rd_array(g, c, &e->arr, 1);
}

static uint64_t rd_scalar_u64(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    memcpy(&v, p, n); /* little-endian host (checked at parse) */
    return v;
}

/* Integer value as a signed 65-bit quantity: *neg set when negative, *mag the magnitude. */
static bool int_value(cn_gguf_vtype t, const uint8_t *p, bool *neg, uint64_t *mag) {
    if (!vtype_is_int(t)) return false;
    size_t n = cn_gguf_vtype_size(t);
    uint64_t u = rd_scalar_u64(p, n);
    bool is_signed = t == CN_GGUF_INT8 || t == CN_GGUF_INT16 || t == CN_GGUF_INT32 || t == CN_GGUF_INT64;
    *neg = false;
    *mag = u;
    if (is_signed) {
        int64_t v;
        switch (n) {
        case 1: v = (int8_t)u; break;
        case 2: v = (int16_t)u; break;
        case 4: v = (int32_t)u; break;
        default: v = (int64_t)u; break;
        }
        if (v < 0) {
            *neg = true;
            *mag = (uint64_t)0 - (uint64_t)v;
        } else {
            *mag = (uint64_t)v;
        }
    }
    return true;
}

static double num_value(cn_gguf_vtype t, const uint8_t *p) {
    if (t == CN_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == CN_GGUF_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    bool neg;
    uint64_t mag;
    int_value(t, p, &neg, &mag);
    return neg ? -(double)mag : (double)mag;
}

static cn_status parse_tensors(cn_gguf *g, cursor *c) {
    cn_status s;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        cn_gguf_tensor_info *t = &g->tensors[i];
        set_what(c, "tensor", i, NULL);
        if ((s = rd_str(c, &t->name, "name"))) return s;
        set_what(c, "tensor", i, &t->name);
        if (index_find(&g->tensor_index, t->name.ptr, t->name.len, tensor_name, g, true, i) >= 0)
            return cn_err(c->err, CN_STATUS_CORRUPT, "%s: duplicate tensor name", c->what);
        if ((s = rd_u32(c, &t->n_dims, "n_dims"))) return s;
        if (t->n_dims > CN_GGUF_MAX_DIMS)
            return cn_err(c->err, CN_STATUS_CORRUPT, "%s: %u dimensions (at most %d)", c->what, t->n_dims,
                          CN_GGUF_MAX_DIMS);
        uint64_t n_elem = 1;
        for (uint32_t d = 0; d < CN_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t v;
            if ((s = rd_u64(c, &v, "dimension"))) return s;
            if (v > (uint64_t)INT64_MAX)
                return cn_err(c->err, CN_STATUS_CORRUPT, "%s: dimension %u is negative (%lld)", c->what, d,
                              (long long)(int64_t)v);
            t->ne[d] = (int64_t)v;
            if (!cn_mul_ok(n_elem, v, &n_elem) || n_elem > (uint64_t)INT64_MAX)
                return cn_err(c->err, CN_STATUS_CORRUPT, "%s: element count overflows at dimension %u", c->what, d);
        }
        if ((s = rd_u32(c, &t->type, "type"))) return s;
        if ((s = rd_u64(c, &t->offset, "offset"))) return s;
        if (t->offset % g->alignment)
            return cn_err(c->err, CN_STATUS_CORRUPT, "%s: offset %llu is not a multiple of the alignment %u", c->what,
                          (unsigned long long)t->offset, g->alignment);
        uint32_t bs;
        if (cn_gguf_type_size(t->type, &bs, NULL)) {
            if ((uint64_t)t->ne[0] % bs)
                return cn_err(c->err, CN_STATUS_CORRUPT,
                              "%s: row length %lld is not a multiple of the block size %u of type %u", c->what,
                              (long long)t->ne[0], bs, t->type);
            if (!cn_gguf_tensor_bytes(t->type, t->n_dims, t->ne, &t->n_bytes))
                return cn_err(c->err, CN_STATUS_CORRUPT, "%s: size in bytes overflows", c->what);
        }
    }
    return CN_STATUS_OK;
}

/* Places each tensor in the data section and checks that it lies inside the file. */
static cn_status place_tensors(cn_gguf *g, cn_error *err) {
    uint64_t avail = g->data_offset <= g->n_bytes ? g->n_bytes - g->data_offset : 0;
    if (g->n_tensors > 0 && g->data_offset > g->n_bytes)
        return cn_err(err, CN_STATUS_CORRUPT, "the data section would start at %llu, past the end of the %zu-byte file",
                      (unsigned long long)g->data_offset, g->n_bytes);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        cn_gguf_tensor_info *t = &g->tensors[i];
        uint64_t end;
        if (!cn_add_ok(t->offset, t->n_bytes, &end) || end > avail) {
            char nm[48];
            printable(nm, sizeof nm, t->name.ptr, t->name.len);
            return cn_err(err, CN_STATUS_CORRUPT,
                          "tensor %lld ('%s'): data at offset %llu + %llu bytes runs past the "
                          "%llu bytes of the data section",
                          (long long)i, nm, (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                          (unsigned long long)avail);
        }
        bool known = cn_gguf_type_size(t->type, NULL, NULL);
        t->data = known ? g->base + g->data_offset + t->offset : NULL;
    }
    return CN_STATUS_OK;
}

static cn_status parse(cn_gguf *g, cn_error *err) {
    cursor c = {.base = g->base, .n = g->n_bytes, .pos = 0, .err = err};
    snprintf(c.what, sizeof c.what, "header");
    cn_status s;
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) return cn_err(err, CN_STATUS_UNSUPPORTED, "big-endian hosts are not supported");
    if (g->n_bytes < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return cn_err(err, CN_STATUS_CORRUPT, "not a GGUF file (bad magic)");
    c.pos = 4;
    if ((s = rd_u32(&c, &g->version, "version"))) return s;
    if (g->version == 1) return cn_err(err, CN_STATUS_UNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            return cn_err(err, CN_STATUS_UNSUPPORTED,
                          "GGUF version %u looks byte-swapped: big-endian files are not supported", g->version);
        return cn_err(err, CN_STATUS_UNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)", g->version);
    }
    uint64_t n_tensors, n_kv;
    if ((s = rd_u64(&c, &n_tensors, "tensor count"))) return s;
    if ((s = rd_u64(&c, &n_kv, "kv count"))) return s;
    if (n_tensors > CN_GGUF_MAX_TENSORS)
        return cn_err(err, CN_STATUS_CORRUPT, "header: %llu tensors exceed the limit of %u",
                      (unsigned long long)n_tensors, CN_GGUF_MAX_TENSORS);
    if (n_kv > CN_GGUF_MAX_KV)
        return cn_err(err, CN_STATUS_CORRUPT, "header: %llu kvs exceed the limit of %u", (unsigned long long)n_kv,
                      CN_GGUF_MAX_KV);
    if (n_tensors * MIN_TENSOR_BYTES + n_kv * MIN_KV_BYTES > left(&c))
        return cn_err(err, CN_STATUS_CORRUPT, "header: %llu kvs and %llu tensors cannot fit in the %zu bytes left",
                      (unsigned long long)n_kv, (unsigned long long)n_tensors, left(&c));
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = g_alloc(g, (size_t)n_kv * sizeof(kv_entry) + 1);
    g->tensors = g_alloc(g, (size_t)n_tensors * sizeof(cn_gguf_tensor_info) + 1);
    if (!g->kv || !g->tensors || !index_init(g, &g->kv_index, n_kv) || !index_init(g, &g->tensor_index, n_tensors))
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for %llu kvs and %llu tensors", (unsigned long long)n_kv,
                      (unsigned long long)n_tensors);
    memset(g->kv, 0, (size_t)n_kv * sizeof(kv_entry));
    memset(g->tensors, 0, (size_t)n_tensors * sizeof(cn_gguf_tensor_info));

    for (int64_t i = 0; i < g->n_kv; i++) {
        kv_entry *e = &g->kv[i];
        set_what(&c, "kv", i, NULL);
        if ((s = rd_str(&c, &e->key, "key"))) return s;
        set_what(&c, "kv", i, &e->key);
        if (index_find(&g->kv_index, e->key.ptr, e->key.len, kv_name, g, true, i) >= 0)
            return cn_err(err, CN_STATUS_CORRUPT, "%s: duplicate key", c.what);
        uint32_t t;
        if ((s = rd_u32(&c, &t, "value type"))) return s;
        if (!vtype_valid(t)) return cn_err(err, CN_STATUS_CORRUPT, "%s: invalid value type %u", c.what, t);
        e->type = (cn_gguf_vtype)t;
        if ((s = rd_value(g, &c, e))) return s;
    }

    g->alignment = CN_GGUF_DEFAULT_ALIGN;
    int64_t ai = cn_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        bool neg;
        uint64_t v;
        if (!int_value(g->kv[ai].type, g->kv[ai].val, &neg, &v))
            return cn_err(err, CN_STATUS_CORRUPT, "general.alignment has type %s, not an integer",
                          cn_gguf_vtype_name(g->kv[ai].type));
        if (neg || v == 0 || v > UINT32_MAX || (v & (v - 1)))
            return cn_err(err, CN_STATUS_CORRUPT, "general.alignment %s%llu is not a power of two", neg ? "-" : "",
                          (unsigned long long)v);
        g->alignment = (uint32_t)v;
    }

    if ((s = parse_tensors(g, &c))) return s;
    uint64_t pos = c.pos;
    uint64_t pad = (g->alignment - pos % g->alignment) % g->alignment;
    g->data_offset = pos + pad;
    return place_tensors(g, err);
}

static cn_status finish(cn_gguf *g, cn_gguf **out, cn_error *err) {
    cn_status s = parse(g, err);
    if (s) {
        cn_gguf_close(g);
        return s;
    }
    *out = g;
    return CN_STATUS_OK;
}

cn_status cn_gguf_parse(const void *data, size_t n_bytes, cn_gguf **out, cn_error *err) {
    *out = NULL;
    cn_gguf *g = calloc(1, sizeof *g);
    if (!g) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    g->base = data ? data : (const uint8_t *)"";
    g->n_bytes = data ? n_bytes : 0;
    return finish(g, out, err);
}

cn_status cn_gguf_open(const char *path, cn_gguf **out, cn_error *err) {
    *out = NULL;
    cn_gguf *g = calloc(1, sizeof *g);
    if (!g) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    cn_status s = cn_map_file(path, &g->map, err);
    if (s) {
        free(g);
        return s;
    }
    g->base = g->map.data;
    g->n_bytes = g->map.n_bytes;
    s = parse(g, err);
    if (s) {
        /* name the file: the parse message says what, this says where */
        if (err) {
            char msg[CN_ERROR_MSG_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            cn_err(err, s, "%s: %s", path, msg);
        }
        cn_gguf_close(g);
        return s;
    }
    *out = g;
    return CN_STATUS_OK;
}

void cn_gguf_close(cn_gguf *g) {
    if (!g) return;
    while (g->chunks) {
        chunk *n = g->chunks->next;
        free(g->chunks);
        g->chunks = n;
    }
    cn_unmap_file(&g->map);
    free(g);
}

uint32_t cn_gguf_version(const cn_gguf *g) { return g->version; }
uint32_t cn_gguf_alignment(const cn_gguf *g) { return g->alignment; }
uint64_t cn_gguf_data_offset(const cn_gguf *g) { return g->data_offset; }
size_t cn_gguf_file_size(const cn_gguf *g) { return g->n_bytes; }

/* --- metadata --- */

int64_t cn_gguf_n_kv(const cn_gguf *g) { return g->n_kv; }

int64_t cn_gguf_find_key(const cn_gguf *g, const char *key) {
    return index_find(&g->kv_index, key, strlen(key), kv_name, g, false, 0);
}

cn_gguf_str cn_gguf_kv_key(const cn_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return (cn_gguf_str){NULL, 0};
    return g->kv[i].key;
}

cn_gguf_vtype cn_gguf_kv_type(const cn_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return (cn_gguf_vtype)-1;
    return g->kv[i].type;
}

static const kv_entry *kv_at(const cn_gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL; }

static const kv_entry *kv_by_key(const cn_gguf *g, const char *key) { return kv_at(g, cn_gguf_find_key(g, key)); }

bool cn_gguf_kv_i64(const cn_gguf *g, int64_t i, int64_t *out) {
    const kv_entry *e = kv_at(g, i);
    if (!e) return false;
    if (e->type == CN_GGUF_BOOL) {
        *out = e->val[0] != 0;
        return true;
    }
    bool neg;
    uint64_t mag;
    if (!int_value(e->type, e->val, &neg, &mag)) return false;
    if (neg) {
        *out = mag == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)mag;
        return true;
    }
    if (mag > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)mag;
    return true;
}

bool cn_gguf_kv_u64(const cn_gguf *g, int64_t i, uint64_t *out) {
    const kv_entry *e = kv_at(g, i);
    bool neg;
    uint64_t mag;
    if (!e || !int_value(e->type, e->val, &neg, &mag) || neg) return false;
    *out = mag;
    return true;
}

bool cn_gguf_kv_f64(const cn_gguf *g, int64_t i, double *out) {
    const kv_entry *e = kv_at(g, i);
    if (!e || !(vtype_is_int(e->type) || e->type == CN_GGUF_FLOAT32 || e->type == CN_GGUF_FLOAT64)) return false;
    *out = num_value(e->type, e->val);
    return true;
}

bool cn_gguf_kv_str(const cn_gguf *g, int64_t i, cn_gguf_str *out) {
    const kv_entry *e = kv_at(g, i);
    if (!e || e->type != CN_GGUF_STRING) return false;
    uint64_t len;
    memcpy(&len, e->val, 8);
    out->ptr = (const char *)e->val + 8;
    out->len = len;
    return true;
}

bool cn_gguf_kv_arr(const cn_gguf *g, int64_t i, cn_gguf_arr *out) {
    const kv_entry *e = kv_at(g, i);
    if (!e || e->type != CN_GGUF_ARRAY) return false;
    *out = e->arr;
    return true;
}

bool cn_gguf_get_u32(const cn_gguf *g, const char *key, uint32_t *out) {
    const kv_entry *e = kv_by_key(g, key);
    bool neg;
    uint64_t mag;
    if (!e || !int_value(e->type, e->val, &neg, &mag) || neg || mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool cn_gguf_get_u64(const cn_gguf *g, const char *key, uint64_t *out) {
    return cn_gguf_kv_u64(g, cn_gguf_find_key(g, key), out);
}

bool cn_gguf_get_i64(const cn_gguf *g, const char *key, int64_t *out) {
    const kv_entry *e = kv_by_key(g, key);
    if (!e || e->type == CN_GGUF_BOOL) return false;
    return cn_gguf_kv_i64(g, e - g->kv, out);
}

bool cn_gguf_get_f32(const cn_gguf *g, const char *key, float *out) {
    const kv_entry *e = kv_by_key(g, key);
    if (!e || (e->type != CN_GGUF_FLOAT32 && e->type != CN_GGUF_FLOAT64)) return false;
    *out = (float)num_value(e->type, e->val);
    return true;
}

bool cn_gguf_get_bool(const cn_gguf *g, const char *key, bool *out) {
    const kv_entry *e = kv_by_key(g, key);
    if (!e || e->type != CN_GGUF_BOOL) return false;
    *out = e->val[0] != 0;
    return true;
}

bool cn_gguf_get_str(const cn_gguf *g, const char *key, cn_gguf_str *out) {
    const kv_entry *e = kv_by_key(g, key);
    return e && cn_gguf_kv_str(g, e - g->kv, out);
}

bool cn_gguf_get_arr(const cn_gguf *g, const char *key, cn_gguf_arr *out) {
    const kv_entry *e = kv_by_key(g, key);
    return e && cn_gguf_kv_arr(g, e - g->kv, out);
}

cn_gguf_str cn_gguf_arr_str(const cn_gguf_arr *a, uint64_t j) {
    if (a->type != CN_GGUF_STRING || j >= a->n || !a->str_off) return (cn_gguf_str){NULL, 0};
    const uint8_t *p = a->data + a->str_off[j];
    uint64_t len;
    memcpy(&len, p, 8);
    return (cn_gguf_str){(const char *)p + 8, len};
}

int64_t cn_gguf_arr_i64(const cn_gguf_arr *a, uint64_t j) {
    if (j >= a->n) return 0;
    size_t es = cn_gguf_vtype_size(a->type);
    const uint8_t *p = a->data + j * es;
    if (a->type == CN_GGUF_BOOL) return p[0] != 0;
    bool neg;
    uint64_t mag;
    if (!int_value(a->type, p, &neg, &mag)) return 0;
    return neg ? (int64_t)((uint64_t)0 - mag) : (int64_t)mag; /* u64 above INT64_MAX wraps */
}

double cn_gguf_arr_f64(const cn_gguf_arr *a, uint64_t j) {
    if (j >= a->n) return 0;
    size_t es = cn_gguf_vtype_size(a->type);
    if (!es || a->type == CN_GGUF_BOOL) return 0;
    return num_value(a->type, a->data + j * es);
}

bool cn_gguf_arr_sub(const cn_gguf_arr *a, uint64_t j, cn_gguf_arr *out) {
    if (a->type != CN_GGUF_ARRAY || j >= a->n || !a->internal) return false;
    *out = ((const cn_gguf_arr *)a->internal)[j];
    return true;
}

/* --- tensors --- */

int64_t cn_gguf_n_tensors(const cn_gguf *g) { return g->n_tensors; }

const cn_gguf_tensor_info *cn_gguf_tensor(const cn_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

int64_t cn_gguf_find_tensor(const cn_gguf *g, const char *name) {
    return index_find(&g->tensor_index, name, strlen(name), tensor_name, g, false, 0);
}
