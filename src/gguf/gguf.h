/* gguf.h — GGUF v2/v3 reader (bounds-checked, memory-mapped) and writer.
 *
 * The reader validates every count, length, offset and size against the bytes of the
 * file before using it; a malformed file yields CN_STATUS_CORRUPT (or UNSUPPORTED) with a
 * message naming what is wrong, never an out-of-bounds read. Strings are views into the
 * mapped file (not NUL-terminated). Nothing here knows about models or tokenizers.
 * The read-only part a program needs (open, header, metadata by index, arrays, the tensor
 * table, the types) is public, in include/cinder_gguf.h; this adds lookups by key,
 * parsing from memory and the writer. */
#ifndef CN_GGUF_H
#define CN_GGUF_H

#include <stdio.h>

#include "cinder_gguf.h"
#include "core/core.h"

/* Hard limits on what a file may claim; beyond them it is rejected before allocating. */
#define CN_GGUF_MAX_KV (1u << 20)
#define CN_GGUF_MAX_TENSORS (1u << 20)
#define CN_GGUF_MAX_NEST 8 /* array-of-array depth */
#define CN_GGUF_DEFAULT_ALIGN 32

/* Parses a buffer; borrows data, which must outlive *out (fuzzing, in-memory tests). */
cn_status cn_gguf_parse(const void *data, size_t n_bytes, cn_gguf **out, cn_error *err);

/* Bytes of a tensor of this type and shape; false if the type is unknown, ne[0] is not a
 * multiple of the block size, a dimension is negative or the size overflows. */
bool cn_gguf_tensor_bytes(uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t *out);

/* --- metadata --- */
/* Scalar getters by key. They return false if the key is absent or its value cannot be
 * represented in the requested type (a negative int for u32, a string for f32, ...);
 * integer getters accept any integer type whose value fits. */
bool cn_gguf_get_u32(const cn_gguf *g, const char *key, uint32_t *out);
bool cn_gguf_get_i64(const cn_gguf *g, const char *key, int64_t *out);
bool cn_gguf_get_u64(const cn_gguf *g, const char *key, uint64_t *out);
bool cn_gguf_get_f32(const cn_gguf *g, const char *key, float *out); /* f32 or f64 */
bool cn_gguf_get_bool(const cn_gguf *g, const char *key, bool *out);
bool cn_gguf_get_str(const cn_gguf *g, const char *key, cn_gguf_str *out);
bool cn_gguf_get_arr(const cn_gguf *g, const char *key, cn_gguf_arr *out);

/* Size in bytes of one element of a fixed-size value type; 0 for STRING/ARRAY/unknown. */
size_t cn_gguf_vtype_size(cn_gguf_vtype t);

/* Compares a view with a C string. */
bool cn_gguf_str_eq(cn_gguf_str s, const char *c);

/* --- tensors --- */
int64_t cn_gguf_find_tensor(const cn_gguf *g, const char *name); /* -1 if absent */

/* --- writer --- */
typedef struct cn_gguf_writer cn_gguf_writer;

cn_gguf_writer *cn_gguf_writer_new(void); /* NULL on out of memory */
void cn_gguf_writer_free(cn_gguf_writer *w);
/* Keys are copied. Setting a key twice replaces it. Values in native types. */
cn_status cn_gguf_writer_set_u32(cn_gguf_writer *w, const char *key, uint32_t v);
cn_status cn_gguf_writer_set_i32(cn_gguf_writer *w, const char *key, int32_t v);
cn_status cn_gguf_writer_set_u64(cn_gguf_writer *w, const char *key, uint64_t v);
cn_status cn_gguf_writer_set_f32(cn_gguf_writer *w, const char *key, float v);
cn_status cn_gguf_writer_set_bool(cn_gguf_writer *w, const char *key, bool v);
cn_status cn_gguf_writer_set_str(cn_gguf_writer *w, const char *key, const char *v);
/* A generic scalar of any fixed-size type (bytes in native little-endian layout). */
cn_status cn_gguf_writer_set_scalar(cn_gguf_writer *w, const char *key, cn_gguf_vtype t, const void *v);
/* Arrays of fixed-size elements (data copied) or of strings. */
cn_status cn_gguf_writer_set_arr(cn_gguf_writer *w, const char *key, cn_gguf_vtype elem, const void *data, uint64_t n);
cn_status cn_gguf_writer_set_arr_str(cn_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* A string value with explicit length (may hold NUL or any bytes). */
cn_status cn_gguf_writer_set_strn(cn_gguf_writer *w, const char *key, const char *v, uint64_t len);

/* Array values built element by element, for nested arrays (arrays of arrays of ...).
 * A cn_gguf_warr is independent of any writer; set_warr and push_arr copy it. */
typedef struct cn_gguf_warr cn_gguf_warr;
cn_gguf_warr *cn_gguf_warr_new(cn_gguf_vtype elem);                            /* NULL on out of memory or bad type */
void cn_gguf_warr_free(cn_gguf_warr *a);                                       /* NULL is a no-op */
cn_status cn_gguf_warr_push(cn_gguf_warr *a, const void *v);                   /* fixed-size element types */
cn_status cn_gguf_warr_push_str(cn_gguf_warr *a, const char *s, uint64_t len); /* STRING */
cn_status cn_gguf_warr_push_arr(cn_gguf_warr *a, const cn_gguf_warr *sub);     /* ARRAY */
cn_status cn_gguf_writer_set_warr(cn_gguf_writer *w, const char *key, const cn_gguf_warr *a);

/* Copies key/value i of g (a scalar in its own type, a string, or a flat array) into w
 * under key (NUL-terminated; usually kv i's own). Nested arrays: CN_STATUS_UNSUPPORTED. */
cn_status cn_gguf_writer_copy_kv(cn_gguf_writer *w, const cn_gguf *g, int64_t i, const char *key, cn_error *err);

/* Tensors: data copied; n_bytes must equal the type's row size × rows. data NULL adds
 * only the tensor's entry, for cn_gguf_writer_write_header (write_file/mem refuse it). */
cn_status cn_gguf_writer_add_tensor(cn_gguf_writer *w, const char *name, cn_type type, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t n_bytes, cn_error *err);
/* version 3 by default; 2 is accepted for tests of the v2 reader path. */
void cn_gguf_writer_set_version(cn_gguf_writer *w, uint32_t version);
/* Writes path through a temporary file renamed over it at the end (core/outfile.h): on
 * any failure an existing file under path is left as it was and nothing is left behind.
 * Errors: INVALID_ARG for a tensor without data or a bad general.alignment, IO. */
cn_status cn_gguf_writer_write_file(const cn_gguf_writer *w, const char *path, cn_error *err);
/* Streams a file too large to hold: writes the header, key/values, tensor entries and
 * the padding up to the data section to f; the caller then writes each tensor's bytes in
 * the order they were added, each padded with zeros to *align (the offsets the entries
 * claim). Errors: INVALID_ARG for a bad general.alignment, IO when f fails. */
cn_status cn_gguf_writer_write_header(const cn_gguf_writer *w, FILE *f, uint32_t *align, cn_error *err);
/* *out is malloc'd; caller frees. */
cn_status cn_gguf_writer_write_mem(const cn_gguf_writer *w, uint8_t **out, size_t *n_bytes, cn_error *err);

#endif
