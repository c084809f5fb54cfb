/* cinder.h — the public C API of cinder.
 *
 * Opaque handles, status codes, parameter structs. Every fallible call returns a
 * cn_status and, when given a cn_error, fills it with a one-line message naming what
 * went wrong. The library never exits, aborts on bad input, or prints to stdout. */
#ifndef CINDER_H
#define CINDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CN_VERSION "0.1.0"

typedef enum {
    CN_STATUS_OK = 0,
    CN_STATUS_INVALID_ARG,   /* a parameter out of its valid range */
    CN_STATUS_IO,            /* open/read/write/mmap failed */
    CN_STATUS_CORRUPT,       /* a file or message is malformed */
    CN_STATUS_UNSUPPORTED,   /* well-formed, but not something cinder handles */
    CN_STATUS_NO_MEMORY,
    CN_STATUS_NOT_FOUND,     /* a key, tensor or token that should be there is not */
    CN_STATUS_LIMIT,         /* a hard limit (context, KV budget, sizes) would be exceeded */
    CN_STATUS_BUSY,          /* queue full: try later */
    CN_STATUS_CANCELLED,
} cn_status;

#define CN_ERROR_MSG_LEN 256

/* A status plus a human-readable, single-line message. */
typedef struct {
    cn_status status;
    char msg[CN_ERROR_MSG_LEN];
} cn_error;

/* A short constant name for a status ("ok", "corrupt", ...). */
const char *cn_status_str(cn_status s);

/* Tensor element formats. The numbering is GGUF's (ggml_type), so a type read from a
 * file maps to this enum directly. */
typedef enum {
    CN_TYPE_F32  = 0,
    CN_TYPE_F16  = 1,
    CN_TYPE_Q4_0 = 2,
    CN_TYPE_Q4_1 = 3,
    CN_TYPE_Q5_0 = 6,
    CN_TYPE_Q5_1 = 7,
    CN_TYPE_Q8_0 = 8,
    CN_TYPE_Q8_1 = 9,
    CN_TYPE_Q2_K = 10,
    CN_TYPE_Q3_K = 11,
    CN_TYPE_Q4_K = 12,
    CN_TYPE_Q5_K = 13,
    CN_TYPE_Q6_K = 14,
    CN_TYPE_Q8_K = 15,
    CN_TYPE_BF16 = 30,
    CN_TYPE_COUNT = 40,      /* one past the largest value; not a type */
} cn_type;

#ifdef __cplusplus
}
#endif
#endif /* CINDER_H */
