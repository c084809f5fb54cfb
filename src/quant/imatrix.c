/* imatrix.c — reads llama-imatrix's files (llama.cpp's common/imatrix-loader.cpp and
 * tools/quantize/quantize.cpp read for the format and the arithmetic; no code taken).
 *
 * GGUF (what llama-imatrix writes by default): per weight W, an F32 tensor
 * "W.in_sum2" of ne[0] * n_expert summed squared activations and an F32 "W.counts" of
 * n_expert token counts; keys imatrix.datasets (string array), imatrix.chunk_count,
 * imatrix.chunk_size, all three required as llama-quantize requires them. A weight's
 * column weights are in_sum2 / round(count) per expert, 1 where the count is 0.
 * Legacy (.dat): i32 n_entries, then per entry i32 name length, the name, i32 ncall,
 * i32 nval, nval f32 (already means, scaled by ncall); then optionally i32 chunk count,
 * i32 length and the dataset name. A weight's column weights are the values / ncall
 * (as they are when ncall is 0). A name given twice keeps its last values, as llama.cpp's
 * map does. Every size is checked against the bytes left before it is used. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "gguf/gguf.h"
#include "quant/imatrix.h"
#include "tensor/tensor.h"

/* A new entry of n values named name[0..name_len), *cap the capacity of m->e; NULL past
 * CN_IMATRIX_MAX_ENTRIES or out of memory. */
static cn_imatrix_entry *push_entry(cn_imatrix *m, size_t *cap, const char *name, size_t name_len, int64_t n) {
    if (m->n_entries >= CN_IMATRIX_MAX_ENTRIES || !CN_GROW(m->e, *cap, (size_t)m->n_entries + 1)) return NULL;
    cn_imatrix_entry *e = &m->e[m->n_entries];
    e->name = malloc(name_len + 1);
    e->w = malloc((size_t)n * sizeof(float) + 1);
    e->n = n;
    if (!e->name || !e->w) {
        free(e->name);
        free(e->w);
        return NULL;
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    m->n_entries++;
    return e;
}

void cn_imatrix_free(cn_imatrix *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n_entries; i++) {
        free(m->e[i].name);
        free(m->e[i].w);
    }
    free(m->e);
    free(m->dataset);
    free(m);
}

static char *dup_until_nul(const char *p, size_t n) {
    const char *z = memchr(p, 0, n);
    size_t k = z ? (size_t)(z - p) : n;
    char *s = malloc(k + 1);
    if (s) {
        memcpy(s, p, k);
        s[k] = 0;
    }
    return s;
}

/* ---- legacy ---- */

typedef struct {
    const uint8_t *p;
    size_t left;
} cursor;

static bool take_i32(cursor *c, int32_t *v) {
    if (c->left < 4) return false;
    memcpy(v, c->p, 4);
    c->p += 4;
    c->left -= 4;
    return true;
}

static cn_status parse_legacy(const uint8_t *data, size_t n_bytes, cn_imatrix *m, cn_error *err) {
    cursor c = {data, n_bytes};
    size_t cap = 0;
    int32_t n_entries;
    if (!take_i32(&c, &n_entries) || n_entries < 1)
        return cn_err(err, CN_STATUS_CORRUPT,
                      "not an imatrix file (neither GGUF nor llama.cpp's legacy format: "
                      "no entries)");
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len = 0, ncall = 0, nval = 0;
        if (!take_i32(&c, &len) || len < 0 || (size_t)len > c.left)
            return cn_err(err, CN_STATUS_CORRUPT,
                          "entry %d of %d: the name runs past the end of the file "
                          "(truncated, or not an imatrix file)",
                          i + 1, n_entries);
        const char *name = (const char *)c.p;
        const char *z = memchr(name, 0, (size_t)len);
        size_t name_len = z ? (size_t)(z - name) : (size_t)len;
        c.p += len;
        c.left -= (size_t)len;
        if (!take_i32(&c, &ncall) || !take_i32(&c, &nval) || nval < 1 || (size_t)nval > c.left / 4)
            return cn_err(err, CN_STATUS_CORRUPT,
                          "entry %d of %d ('%.*s'): its %d values run past the end of "
                          "the file (truncated?)",
                          i + 1, n_entries, (int)CN_MIN(name_len, 200), name, (int)CN_MAX(nval, 0));
        cn_imatrix_entry *e = push_entry(m, &cap, name, name_len, nval);
        if (!e) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading the imatrix");
        for (int32_t j = 0; j < nval; j++) {
            float v;
            memcpy(&v, c.p + 4 * (size_t)j, 4);
            /* the file holds mean * ncall: llama-quantize divides by ncall (in float) */
            e->w[j] = ncall > 0 ? v / (float)ncall : v;
        }
        c.p += 4 * (size_t)nval;
        c.left -= 4 * (size_t)nval;
    }
    int32_t chunks, dlen;
    if (take_i32(&c, &chunks)) {
        m->chunk_count = chunks;
        if (take_i32(&c, &dlen) && dlen > 0 && (size_t)dlen <= c.left) {
            m->dataset = dup_until_nul((const char *)c.p, (size_t)dlen);
            if (!m->dataset) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading the imatrix");
        }
    }
    m->legacy = true;
    return CN_STATUS_OK;
}

/* ---- GGUF ---- */

static bool strip_suffix(cn_gguf_str s, const char *suffix, size_t *stem_len) {
    size_t k = strlen(suffix);
    if (s.len < k || memcmp(s.ptr + s.len - k, suffix, k) != 0) return false;
    *stem_len = (size_t)s.len - k;
    return true;
}

static int64_t n_elem_of(const cn_gguf_tensor_info *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

/* imatrix.datasets, .chunk_count and .chunk_size, all three required as llama-quantize
 * requires them; the chunk count and the first dataset into m. */
static cn_status read_gguf_meta(const cn_gguf *g, cn_imatrix *m, cn_error *err) {
    cn_gguf_arr ds;
    uint32_t cc = 0, cs = 0;
    const bool has_ds = cn_gguf_get_arr(g, "imatrix.datasets", &ds);
    const bool has_cc = cn_gguf_get_u32(g, "imatrix.chunk_count", &cc);
    const bool has_cs = cn_gguf_get_u32(g, "imatrix.chunk_size", &cs);
    if (cn_gguf_n_tensors(g) < 1) return cn_err(err, CN_STATUS_CORRUPT, "a GGUF file with no tensors: not an imatrix");
    if (!has_ds || !has_cc || !has_cs)
        return cn_err(err, CN_STATUS_CORRUPT,
                      "a GGUF file without the imatrix metadata (imatrix.datasets, "
                      "imatrix.chunk_count, imatrix.chunk_size): not llama-imatrix's file");
    m->chunk_count = (int32_t)CN_MIN(cc, (uint32_t)INT32_MAX);
    if (ds.type == CN_GGUF_STRING && ds.n > 0) {
        cn_gguf_str s = cn_gguf_arr_str(&ds, 0);
        m->dataset = dup_until_nul(s.ptr, (size_t)s.len);
        if (!m->dataset) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading the imatrix");
    }
    return CN_STATUS_OK;
}

/* The entry of "<name>.in_sum2" (sums; its name stem bytes long) and its "<name>.counts":
 * per expert, the sums divided by the rounded count. */
static cn_status read_gguf_entry(const cn_gguf *g, const cn_gguf_tensor_info *sums, size_t stem, cn_imatrix *m,
                                 size_t *cap, cn_error *err) {
    char name[512];
    if (stem >= sizeof name - 8) return cn_err(err, CN_STATUS_UNSUPPORTED, "an imatrix entry name of %zu bytes", stem);
    memcpy(name, sums->name.ptr, stem);
    snprintf(name + stem, sizeof name - stem, ".counts");
    const int64_t ci = cn_gguf_find_tensor(g, name);
    name[stem] = 0;
    if (ci < 0) return cn_err(err, CN_STATUS_CORRUPT, "imatrix entry '%s': in_sum2 without counts", name);
    const cn_gguf_tensor_info *counts = cn_gguf_tensor(g, ci);
    if (sums->type != CN_TYPE_F32 || counts->type != CN_TYPE_F32 || !sums->data || !counts->data)
        return cn_err(err, CN_STATUS_CORRUPT, "imatrix entry '%s': sums and counts must be F32", name);
    const int64_t nval = n_elem_of(sums), ncounts = n_elem_of(counts);
    if (nval < 1 || ncounts < 1 || nval % ncounts != 0)
        return cn_err(err, CN_STATUS_CORRUPT, "imatrix entry '%s': %lld sums do not split into %lld counts", name,
                      (long long)nval, (long long)ncounts);
    cn_imatrix_entry *e = push_entry(m, cap, name, stem, nval);
    if (!e) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading the imatrix");
    const int64_t ne0 = nval / ncounts;
    for (int64_t j = 0; j < ncounts; j++) {
        float cf;
        memcpy(&cf, (const uint8_t *)counts->data + 4 * j, 4);
        /* llama.cpp stores the count rounded to an integer, then divides in float */
        const float count = isfinite(cf) ? (float)lroundf(cf) : 0.0f;
        for (int64_t k = 0; k < ne0; k++) {
            float v;
            memcpy(&v, (const uint8_t *)sums->data + 4 * (j * ne0 + k), 4);
            e->w[j * ne0 + k] = count > 0.0f ? v / count : 1.0f;
        }
    }
    return CN_STATUS_OK;
}

/* A ".counts" without its ".in_sum2" is an error too. */
static cn_status check_counts_have_sums(const cn_gguf *g, cn_error *err) {
    for (int64_t i = 0; i < cn_gguf_n_tensors(g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        size_t stem;
        char name[512];
        if (!strip_suffix(t->name, ".counts", &stem) || stem >= sizeof name - 9) continue;
        memcpy(name, t->name.ptr, stem);
        snprintf(name + stem, sizeof name - stem, ".in_sum2");
        if (cn_gguf_find_tensor(g, name) < 0) {
            name[stem] = 0;
            return cn_err(err, CN_STATUS_CORRUPT, "imatrix entry '%s': counts without in_sum2", name);
        }
    }
    return CN_STATUS_OK;
}

static cn_status parse_gguf(const void *data, size_t n_bytes, cn_imatrix *m, cn_error *err) {
    cn_gguf *g = NULL;
    cn_status st = cn_gguf_parse(data, n_bytes, &g, err);
    if (st) return st;
    size_t cap = 0;
    st = read_gguf_meta(g, m, err);
    for (int64_t i = 0; i < cn_gguf_n_tensors(g) && !st; i++) {
        const cn_gguf_tensor_info *sums = cn_gguf_tensor(g, i);
        size_t stem;
        if (strip_suffix(sums->name, ".in_sum2", &stem)) st = read_gguf_entry(g, sums, stem, m, &cap, err);
    }
    if (!st) st = check_counts_have_sums(g, err);
    cn_gguf_close(g);
    return st;
}

static cn_status check_finite(const cn_imatrix *m, cn_error *err) {
    for (int64_t i = 0; i < m->n_entries; i++)
        for (int64_t j = 0; j < m->e[i].n; j++)
            if (!isfinite(m->e[i].w[j]))
                return cn_err(err, CN_STATUS_CORRUPT, "imatrix entry '%s' holds a non-finite value (%g at %lld)",
                              m->e[i].name, (double)m->e[i].w[j], (long long)j);
    return CN_STATUS_OK;
}

static int cmp_entry(const void *pa, const void *pb) {
    const cn_imatrix_entry *a = pa, *b = pb;
    return strcmp(a->name, b->name);
}

/* Names unique, the last of a repeated one kept (as llama.cpp's map keeps it), sorted by
 * name. qsort is not stable: the entries are sorted with their positions beside them. */
static cn_status sort_keeping_the_last(cn_imatrix *m, cn_error *err) {
    const int64_t n = m->n_entries;
    if (n < 2) return CN_STATUS_OK;
    struct pair {
        cn_imatrix_entry e;
        int64_t at;
    } *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) tmp[i] = (struct pair){m->e[i], i};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_entry); /* the entry leads the pair */
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + 1 < n && !strcmp(tmp[i].e.name, tmp[i + 1].e.name)) {
            /* equal names: keep the one read last */
            if (tmp[i].at > tmp[i + 1].at) {
                struct pair t = tmp[i];
                tmp[i] = tmp[i + 1];
                tmp[i + 1] = t;
            }
            free(tmp[i].e.name);
            free(tmp[i].e.w);
            continue;
        }
        m->e[k++] = tmp[i].e;
    }
    m->n_entries = k;
    free(tmp);
    return CN_STATUS_OK;
}

cn_status cn_imatrix_parse(const void *data, size_t n_bytes, cn_imatrix **out, cn_error *err) {
    *out = NULL;
    cn_imatrix *m = calloc(1, sizeof *m);
    if (!m) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    cn_status st = n_bytes >= 4 && !memcmp(data, "GGUF", 4) ? parse_gguf(data, n_bytes, m, err)
                                                            : parse_legacy(data, n_bytes, m, err);
    if (!st && m->n_entries < 1)
        st = cn_err(err, CN_STATUS_CORRUPT, "no importance matrix entries (no '<name>.in_sum2' tensors)");
    if (!st) st = check_finite(m, err);
    if (!st) st = sort_keeping_the_last(m, err);
    if (st) {
        cn_imatrix_free(m);
        return st;
    }
    *out = m;
    return CN_STATUS_OK;
}

cn_status cn_imatrix_load(const char *path, cn_imatrix **out, cn_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return cn_err(err, CN_STATUS_IO, "cannot open the imatrix '%s': %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    cn_status st = CN_STATUS_OK;
    for (;;) {
        if (n == cap && !CN_GROW(buf, cap, n + ((size_t)1 << 16))) {
            st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory reading the imatrix '%s'", path);
            break;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) st = cn_err(err, CN_STATUS_IO, "cannot read the imatrix '%s'", path);
            break;
        }
    }
    fclose(f);
    if (!st) {
        st = cn_imatrix_parse(buf, n, out, err);
        if (st && err) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            cn_err(err, st, "imatrix '%s': %s", path, msg);
        }
    }
    free(buf);
    return st;
}

const cn_imatrix_entry *cn_imatrix_find(const cn_imatrix *m, const char *name) {
    int64_t lo = 0, hi = m ? m->n_entries : 0;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->e[mid].name, name);
        if (c == 0) return &m->e[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}
