/* cinder_gguf.h — the GGUF reader of cinder, public beside cinder.h (as ggml ships gguf.h
 * apart from llama.h): any GGUF file read as it is, loadable model or not (a
 * vocabulary-only file, a type cinder cannot compute with, an importance matrix). What
 * `cinder inspect` prints, what the server checks a file with before unloading a model
 * for it, and what a program needs to read metadata or the tensor table without loading
 * weights. Same conventions as cinder.h (whose status and error types it uses). */
#ifndef CINDER_GGUF_H
#define CINDER_GGUF_H

#include "cinder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== gguf files ===========================================================================
 * Read-only access to a GGUF file, loadable model or not (a vocabulary-only file, a type
 * cinder cannot compute with): the header, every metadata key and value, the tensor table
 * (src/gguf). The reader checks every count, length, offset and size against the bytes of
 * the file before using it: a malformed file is CN_STATUS_CORRUPT (or UNSUPPORTED) with a
 * message naming the file and what is wrong, never an out-of-bounds read. Strings, arrays
 * and tensor data are views into the file's mapping, valid until cn_gguf_close. */

typedef struct cn_gguf cn_gguf;

/* A metadata value's type, numbered as GGUF stores it. */
typedef enum {
    CN_GGUF_UINT8 = 0,
    CN_GGUF_INT8 = 1,
    CN_GGUF_UINT16 = 2,
    CN_GGUF_INT16 = 3,
    CN_GGUF_UINT32 = 4,
    CN_GGUF_INT32 = 5,
    CN_GGUF_FLOAT32 = 6,
    CN_GGUF_BOOL = 7,
    CN_GGUF_STRING = 8,
    CN_GGUF_ARRAY = 9,
    CN_GGUF_UINT64 = 10,
    CN_GGUF_INT64 = 11,
    CN_GGUF_FLOAT64 = 12,
} cn_gguf_vtype;

/* A string in the file: ptr[0..len), not NUL-terminated, any bytes. */
typedef struct {
    const char *ptr;
    uint64_t len;
} cn_gguf_str;

/* An array value: n elements of one type. Read its elements with cn_gguf_arr_*; the
 * other fields are the reader's. */
typedef struct {
    cn_gguf_vtype type;      /* element type */
    uint64_t n;              /* element count */
    const uint8_t *data;     /* first element in the file (packed little-endian, unaligned) */
    const uint64_t *str_off; /* STRING/ARRAY elements: offset of element j from data */
    const void *internal;    /* reader-private (sub-array table) */
} cn_gguf_arr;

#define CN_GGUF_MAX_DIMS 4

/* One row of the tensor table. */
typedef struct {
    cn_gguf_str name;
    uint32_t n_dims;
    int64_t ne[CN_GGUF_MAX_DIMS]; /* ne[0] is the innermost (row) length; unused dims are 1 */
    uint32_t type;                /* a cn_type value as stored; may be one cinder does not know */
    uint64_t offset;              /* relative to the data offset */
    const void *data;             /* the bytes in the mapping; NULL when the type's size is unknown
                                   * (cn_gguf_type_size knows every ggml type: cn_type_name says
                                   * whether cinder can compute with it) */
    uint64_t n_bytes;             /* 0 when the type's size is unknown */
} cn_gguf_tensor_info;

/* Maps and parses a file; *out is the caller's (cn_gguf_close). IO when it cannot be
 * opened, CORRUPT / UNSUPPORTED when it is not a GGUF v2/v3 file this reader accepts. */
CN_API cn_status cn_gguf_open(const char *path, cn_gguf **out, cn_error *err);
CN_API void cn_gguf_close(cn_gguf *g); /* NULL is a no-op */

CN_API uint32_t cn_gguf_version(const cn_gguf *g);
CN_API uint32_t cn_gguf_alignment(const cn_gguf *g);
CN_API uint64_t cn_gguf_data_offset(const cn_gguf *g); /* start of the tensor data section */
CN_API size_t cn_gguf_file_size(const cn_gguf *g);

/* Metadata: keys 0..n_kv in file order. */
CN_API int64_t cn_gguf_n_kv(const cn_gguf *g);
CN_API int64_t cn_gguf_find_key(const cn_gguf *g, const char *key); /* -1 if absent */
CN_API cn_gguf_str cn_gguf_kv_key(const cn_gguf *g, int64_t i);
CN_API cn_gguf_vtype cn_gguf_kv_type(const cn_gguf *g, int64_t i);
/* "u8", "i32", "f32", "bool", "string", "array", ... ("unknown" for a value out of the
 * enum); static. */
CN_API const char *cn_gguf_vtype_name(cn_gguf_vtype t);
/* The value of kv i; false when it is of another kind or does not fit. */
CN_API bool cn_gguf_kv_i64(const cn_gguf *g, int64_t i, int64_t *out);  /* any integer or bool */
CN_API bool cn_gguf_kv_u64(const cn_gguf *g, int64_t i, uint64_t *out); /* a non-negative integer */
CN_API bool cn_gguf_kv_f64(const cn_gguf *g, int64_t i, double *out);   /* any number */
CN_API bool cn_gguf_kv_str(const cn_gguf *g, int64_t i, cn_gguf_str *out);
CN_API bool cn_gguf_kv_arr(const cn_gguf *g, int64_t i, cn_gguf_arr *out);
/* Element j < a->n of an array, by its element type (O(1) for strings too). */
CN_API cn_gguf_str cn_gguf_arr_str(const cn_gguf_arr *a, uint64_t j);            /* STRING */
CN_API int64_t cn_gguf_arr_i64(const cn_gguf_arr *a, uint64_t j);                /* integers, bool */
CN_API double cn_gguf_arr_f64(const cn_gguf_arr *a, uint64_t j);                 /* numbers */
CN_API bool cn_gguf_arr_sub(const cn_gguf_arr *a, uint64_t j, cn_gguf_arr *out); /* ARRAY */

/* Tensors 0..n_tensors in file order; cn_gguf_tensor's row is a view valid until close. */
CN_API int64_t cn_gguf_n_tensors(const cn_gguf *g);
CN_API const cn_gguf_tensor_info *cn_gguf_tensor(const cn_gguf *g, int64_t i);

/* Block geometry of a tensor type as GGUF stores it (every ggml type, not only those
 * cinder computes with): elements per block, bytes per block; false for a type the
 * reader does not know. Either pointer may be NULL. */
CN_API bool cn_gguf_type_size(uint32_t type, uint32_t *block_size, uint32_t *type_bytes);

/* ==== end of gguf files ================================================================= */

#ifdef __cplusplus
}
#endif
#endif /* CINDER_GGUF_H */
