/* imatrix.h — importance matrices as llama.cpp's llama-imatrix writes them (its GGUF
 * format, and the legacy .dat), read for `cinder quantize --imatrix`. Per tensor name,
 * one weight per column: the mean squared activation that entered the matmul, which
 * the weighted quantizers (cn_type_quantizer_weighted) spend their precision on. */
#ifndef CN_IMATRIX_H
#define CN_IMATRIX_H

#include "core/core.h"

#define CN_IMATRIX_MAX_ENTRIES (1 << 20)

typedef struct {
    char *name; /* the weight's name ("blk.0.attn_q.weight") */
    float *w;   /* (n) column weights: sums / count, as llama-quantize divides them */
    int64_t n;  /* ne[0] of the weight (times the experts of a 3-D one) */
} cn_imatrix_entry;

typedef struct {
    cn_imatrix_entry *e; /* (n_entries) sorted by name, names unique */
    int64_t n_entries;
    char *dataset;       /* the first dataset named in the file; NULL if none */
    int32_t chunk_count; /* chunks the statistics were taken over; 0 if unknown */
    bool legacy;         /* the .dat format */
} cn_imatrix;

/* Parses an imatrix file held in data[0..n_bytes) (borrowed during the call). GGUF when
 * it starts with "GGUF", else the legacy format. Errors: CORRUPT for a malformed or
 * truncated file, missing metadata (GGUF: imatrix.datasets, .chunk_count, .chunk_size),
 * an .in_sum2 without its .counts (or the other way), a non-F32 entry, sizes that do
 * not divide, or a value that is not finite; NO_MEMORY. */
cn_status cn_imatrix_parse(const void *data, size_t n_bytes, cn_imatrix **out, cn_error *err);
/* Reads path and parses it; IO when it cannot be read. Messages name the file. */
cn_status cn_imatrix_load(const char *path, cn_imatrix **out, cn_error *err);
/* The entry for a tensor name; NULL if none (that tensor is quantized unweighted). */
const cn_imatrix_entry *cn_imatrix_find(const cn_imatrix *m, const char *name);
void cn_imatrix_free(cn_imatrix *m); /* NULL is a no-op */

#endif
