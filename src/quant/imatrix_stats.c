/* imatrix_stats.c — collects and writes importance matrices (`cinder imatrix`), in the
 * file llama-imatrix writes (see imatrix.c for the format; llama.cpp's
 * tools/imatrix/imatrix.cpp read for it, no code taken).
 *
 * Per weight: one sum of squares per column over every row added, and the number of rows.
 * Sums are kept in double (llama-imatrix keeps float), so over long texts cinder's are
 * the more exact; the file stores them as F32 as llama-imatrix's does. It is written by
 * the GGUF writer through a temporary file (core/outfile.h): a failed save leaves no
 * partial file and an existing one as it was. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "core/buf.h"
#include "gguf/gguf.h"

typedef struct {
    char *name;
    double *sum; /* (k) */
    int64_t k, rows;
} stat_entry;

struct cn_imatrix_stats {
    stat_entry *e; /* (n) in the order first seen */
    int64_t n;
    size_t cap;
    int64_t last; /* the entry the previous add found: calls come in the same order every pass */
};

cn_status cn_imatrix_stats_create(cn_imatrix_stats **out, cn_error *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for the importance matrix");
    return CN_STATUS_OK;
}

void cn_imatrix_stats_free(cn_imatrix_stats *s) {
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) {
        free(s->e[i].name);
        free(s->e[i].sum);
    }
    free(s->e);
    free(s);
}

int64_t cn_imatrix_stats_n_weights(const cn_imatrix_stats *s) { return s ? s->n : 0; }

/* The entry for name, made with k columns if new; NULL: no memory (err set). */
static stat_entry *entry_for(cn_imatrix_stats *s, const char *name, int64_t k, cn_error *err) {
    for (int64_t j = 0; j < s->n; j++) {
        const int64_t i = (s->last + 1 + j) % s->n;
        if (!strcmp(s->e[i].name, name)) {
            s->last = i;
            return &s->e[i];
        }
    }
    if (!CN_GROW(s->e, s->cap, (size_t)s->n + 1)) goto oom;
    stat_entry *e = &s->e[s->n];
    e->name = strdup(name);
    e->sum = calloc((size_t)k, sizeof *e->sum);
    if (!e->name || !e->sum) {
        free(e->name);
        free(e->sum);
        goto oom;
    }
    e->k = k;
    e->rows = 0;
    s->last = s->n++;
    return e;
oom:
    cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for the importance matrix of '%s'", name);
    return NULL;
}

cn_status cn_imatrix_stats_add(cn_imatrix_stats *s, const char *weight, const float *x, int64_t n_rows, int64_t k,
                               cn_error *err) {
    if (!s || !weight || !x || n_rows < 0 || k < 1)
        return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: bad arguments to add");
    for (int64_t i = 0; i < n_rows * k; i++)
        if (!isfinite(x[i]))
            return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: a value that is not finite entered '%s'", weight);
    stat_entry *e = entry_for(s, weight, k, err);
    if (!e) return CN_STATUS_NO_MEMORY;
    if (e->k != k)
        return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: '%s' was seen with %lld columns, now %lld", weight,
                      (long long)e->k, (long long)k);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * k;
        for (int64_t j = 0; j < k; j++) e->sum[j] += (double)xr[j] * (double)xr[j];
    }
    e->rows += n_rows;
    return CN_STATUS_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const stat_entry *const *)a)->name, (*(const stat_entry *const *)b)->name);
}

/* The writer's tensors and keys for s. */
static cn_status fill_writer(const cn_imatrix_stats *s, cn_gguf_writer *w, const char *dataset, int32_t chunk_count,
                             int32_t chunk_size, cn_error *err) {
    const stat_entry **ord = malloc((size_t)s->n * sizeof *ord);
    int64_t k_max = 1;
    for (int64_t i = 0; i < s->n; i++) k_max = s->e[i].k > k_max ? s->e[i].k : k_max;
    float *buf = malloc((size_t)k_max * sizeof *buf);
    cn_status st = CN_STATUS_OK;
    if (!ord || !buf) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory writing the importance matrix");
        goto done;
    }
    const char *ds[1] = {dataset ? dataset : ""};
    if ((st = cn_gguf_writer_set_str(w, "general.type", "imatrix")) ||
        (st = cn_gguf_writer_set_arr_str(w, "imatrix.datasets", ds, 1)) ||
        (st = cn_gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)chunk_count)) ||
        (st = cn_gguf_writer_set_u32(w, "imatrix.chunk_size", (uint32_t)chunk_size))) {
        cn_err(err, st, "out of memory writing the importance matrix");
        goto done;
    }
    for (int64_t i = 0; i < s->n; i++) ord[i] = &s->e[i];
    qsort(ord, (size_t)s->n, sizeof *ord, cmp_name);
    char name[512];
    for (int64_t i = 0; i < s->n && !st; i++) {
        const stat_entry *e = ord[i];
        for (int64_t j = 0; j < e->k; j++) buf[j] = (float)e->sum[j];
        const float count = (float)e->rows;
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        st = cn_gguf_writer_add_tensor(w, name, CN_TYPE_F32, 1, (int64_t[]){e->k}, buf, (uint64_t)e->k * sizeof *buf,
                                       err);
        snprintf(name, sizeof name, "%s.counts", e->name);
        if (!st) st = cn_gguf_writer_add_tensor(w, name, CN_TYPE_F32, 1, (int64_t[]){1}, &count, sizeof count, err);
    }
done:
    free(ord);
    free(buf);
    return st;
}

cn_status cn_imatrix_stats_save(const cn_imatrix_stats *s, const char *path, const char *dataset, int32_t chunk_count,
                                int32_t chunk_size, cn_error *err) {
    if (!s || !path) return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: bad arguments to save");
    if (s->n == 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: no statistics to save (no batch of two or more rows ran)");
    if (chunk_count < 0 || chunk_size < 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "imatrix: chunk count and size must not be negative");
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_status st = w ? CN_STATUS_OK : cn_err(err, CN_STATUS_NO_MEMORY, "out of memory writing the importance matrix");
    if (!st) st = fill_writer(s, w, dataset, chunk_count, chunk_size, err);
    if (!st) st = cn_gguf_writer_write_file(w, path, err);
    cn_gguf_writer_free(w);
    return st;
}
