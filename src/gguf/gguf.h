/* gguf.h — GGUF v2/v3 reader (bounds-checked, memory-mapped) and writer.
 *
 * The reader validates every count, length, offset and size against the bytes of the
 * file before using it; a malformed file yields CN_STATUS_CORRUPT (or UNSUPPORTED) with a
 * message naming what is wrong, never an out-of-bounds read. Strings are views into the
 * mapped file (not NUL-terminated). Nothing here knows about models or tokenizers. */
#ifndef CN_GGUF_H
#define CN_GGUF_H

#include "core/core.h"

/* Hard limits on what a file may claim; beyond them it is rejected before allocating. */
#define CN_GGUF_MAX_KV        (1u << 20)
#define CN_GGUF_MAX_TENSORS   (1u << 20)
#define CN_GGUF_MAX_DIMS      4
#define CN_GGUF_MAX_NEST      8          /* array-of-array depth */
#define CN_GGUF_DEFAULT_ALIGN 32

typedef enum {
    CN_GGUF_UINT8 = 0, CN_GGUF_INT8 = 1, CN_GGUF_UINT16 = 2, CN_GGUF_INT16 = 3,
    CN_GGUF_UINT32 = 4, CN_GGUF_INT32 = 5, CN_GGUF_FLOAT32 = 6, CN_GGUF_BOOL = 7,
    CN_GGUF_STRING = 8, CN_GGUF_ARRAY = 9, CN_GGUF_UINT64 = 10, CN_GGUF_INT64 = 11,
    CN_GGUF_FLOAT64 = 12,
} cn_gguf_vtype;

/* A view of a string in the file: ptr[0..len), not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} cn_gguf_str;

typedef struct {
    cn_gguf_str name;
    uint32_t n_dims;
    int64_t ne[CN_GGUF_MAX_DIMS]; /* ne[0] is the innermost (row) length; unused dims are 1 */
    uint32_t type;                /* cn_type value as stored; may be unknown to cinder */
    uint64_t offset;              /* relative to the start of the data section */
    const void *data;             /* view into the mapping; NULL if the type's block size is
                                   * unknown (cn_gguf_type_size: all ggml types through MXFP4 are
                                   * known, so check cn_type_traits_get before computing) */
    uint64_t n_bytes;             /* 0 if the type is unknown */
} cn_gguf_tensor_info;

typedef struct cn_gguf cn_gguf;

/* Maps and parses a file. *out is owned by the caller (cn_gguf_close). */
cn_status cn_gguf_open(const char *path, cn_gguf **out, cn_error *err);
/* Parses a buffer; borrows data, which must outlive *out (fuzzing, in-memory tests). */
cn_status cn_gguf_parse(const void *data, size_t n_bytes, cn_gguf **out, cn_error *err);
void cn_gguf_close(cn_gguf *g); /* NULL is a no-op */

uint32_t cn_gguf_version(const cn_gguf *g);
uint32_t cn_gguf_alignment(const cn_gguf *g);
uint64_t cn_gguf_data_offset(const cn_gguf *g); /* start of the tensor data section */
size_t cn_gguf_file_size(const cn_gguf *g);     /* bytes of the parsed file or buffer */

/* ggml block geometry of a tensor type as GGUF stores it (all ggml types, not only the
 * ones cinder computes with): false for a type this reader does not know. */
bool cn_gguf_type_size(uint32_t type, uint32_t *block_size, uint32_t *type_bytes);
/* Bytes of a tensor of this type and shape; false if the type is unknown, ne[0] is not a
 * multiple of the block size, a dimension is negative or the size overflows. */
bool cn_gguf_tensor_bytes(uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t *out);

/* --- metadata --- */
int64_t cn_gguf_n_kv(const cn_gguf *g);
int64_t cn_gguf_find_key(const cn_gguf *g, const char *key); /* -1 if absent */
cn_gguf_str cn_gguf_kv_key(const cn_gguf *g, int64_t i);
cn_gguf_vtype cn_gguf_kv_type(const cn_gguf *g, int64_t i);

/* Scalar getters by key. They return false if the key is absent or its value cannot be
 * represented in the requested type (a negative int for u32, a string for f32, ...);
 * integer getters accept any integer type whose value fits. */
bool cn_gguf_get_u32(const cn_gguf *g, const char *key, uint32_t *out);
bool cn_gguf_get_i64(const cn_gguf *g, const char *key, int64_t *out);
bool cn_gguf_get_u64(const cn_gguf *g, const char *key, uint64_t *out);
bool cn_gguf_get_f32(const cn_gguf *g, const char *key, float *out); /* f32 or f64 */
bool cn_gguf_get_bool(const cn_gguf *g, const char *key, bool *out);
bool cn_gguf_get_str(const cn_gguf *g, const char *key, cn_gguf_str *out);

/* Scalar getters by index (value of kv i; false if of another kind). */
bool cn_gguf_kv_i64(const cn_gguf *g, int64_t i, int64_t *out);  /* any integer or bool */
bool cn_gguf_kv_u64(const cn_gguf *g, int64_t i, uint64_t *out); /* a non-negative integer */
bool cn_gguf_kv_f64(const cn_gguf *g, int64_t i, double *out);   /* any number */
bool cn_gguf_kv_str(const cn_gguf *g, int64_t i, cn_gguf_str *out);

/* Arrays (kv i must be of type ARRAY). Element type and count; for numeric element
 * types arr_data points at the packed little-endian elements in the file (possibly
 * unaligned: read with memcpy or the helpers below). String elements are reached by
 * index in O(1) (the reader builds an offset table at parse time). Nested arrays: an
 * element of type ARRAY is reached with cn_gguf_arr_sub, which returns a view with the
 * same accessors. */
typedef struct {
    cn_gguf_vtype type;      /* element type */
    uint64_t n;              /* element count */
    const uint8_t *data;     /* first element in the file */
    const uint64_t *str_off; /* for STRING/ARRAY elements: offset of element j from data */
    const void *internal;    /* reader-private (sub-array table) */
} cn_gguf_arr;

bool cn_gguf_get_arr(const cn_gguf *g, const char *key, cn_gguf_arr *out);
bool cn_gguf_kv_arr(const cn_gguf *g, int64_t i, cn_gguf_arr *out);
cn_gguf_str cn_gguf_arr_str(const cn_gguf_arr *a, uint64_t j); /* j < n, type STRING */
int64_t cn_gguf_arr_i64(const cn_gguf_arr *a, uint64_t j);     /* integer/bool elements */
double cn_gguf_arr_f64(const cn_gguf_arr *a, uint64_t j);      /* numeric elements */
bool cn_gguf_arr_sub(const cn_gguf_arr *a, uint64_t j, cn_gguf_arr *out); /* ARRAY elements */

/* Size in bytes of one element of a fixed-size value type; 0 for STRING/ARRAY/unknown. */
size_t cn_gguf_vtype_size(cn_gguf_vtype t);
const char *cn_gguf_vtype_name(cn_gguf_vtype t);

/* Compares a view with a C string. */
bool cn_gguf_str_eq(cn_gguf_str s, const char *c);

/* --- tensors --- */
int64_t cn_gguf_n_tensors(const cn_gguf *g);
const cn_gguf_tensor_info *cn_gguf_tensor(const cn_gguf *g, int64_t i);
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
cn_status cn_gguf_writer_set_arr(cn_gguf_writer *w, const char *key, cn_gguf_vtype elem,
                                 const void *data, uint64_t n);
cn_status cn_gguf_writer_set_arr_str(cn_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n);
/* A string value with explicit length (may hold NUL or any bytes). */
cn_status cn_gguf_writer_set_strn(cn_gguf_writer *w, const char *key, const char *v, uint64_t len);

/* Array values built element by element, for nested arrays (arrays of arrays of ...).
 * A cn_gguf_warr is independent of any writer; set_warr and push_arr copy it. */
typedef struct cn_gguf_warr cn_gguf_warr;
cn_gguf_warr *cn_gguf_warr_new(cn_gguf_vtype elem); /* NULL on out of memory or bad type */
void cn_gguf_warr_free(cn_gguf_warr *a);             /* NULL is a no-op */
cn_status cn_gguf_warr_push(cn_gguf_warr *a, const void *v); /* fixed-size element types */
cn_status cn_gguf_warr_push_str(cn_gguf_warr *a, const char *s, uint64_t len); /* STRING */
cn_status cn_gguf_warr_push_arr(cn_gguf_warr *a, const cn_gguf_warr *sub);    /* ARRAY */
cn_status cn_gguf_writer_set_warr(cn_gguf_writer *w, const char *key, const cn_gguf_warr *a);

/* Copies key/value i of g (a scalar in its own type, a string, or a flat array) into w
 * under key (NUL-terminated; usually kv i's own). Nested arrays: CN_STATUS_UNSUPPORTED. */
cn_status cn_gguf_writer_copy_kv(cn_gguf_writer *w, const cn_gguf *g, int64_t i, const char *key, cn_error *err);

/* Tensors: data copied; n_bytes must equal the type's row size × rows. */
cn_status cn_gguf_writer_add_tensor(cn_gguf_writer *w, const char *name, cn_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t n_bytes, cn_error *err);
/* version 3 by default; 2 is accepted for tests of the v2 reader path. */
void cn_gguf_writer_set_version(cn_gguf_writer *w, uint32_t version);
cn_status cn_gguf_writer_write_file(const cn_gguf_writer *w, const char *path, cn_error *err);
/* *out is malloc'd; caller frees. */
cn_status cn_gguf_writer_write_mem(const cn_gguf_writer *w, uint8_t **out, size_t *n_bytes,
                                   cn_error *err);

#endif
