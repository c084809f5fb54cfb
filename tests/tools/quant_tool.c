/* quant_tool.c — a test helper that exposes cinder's scalar row functions to the python
 * checks (tests/py/test_quants.py), which compare them with gguf-py's numpy code:
 *
 *   quant_tool dequant TYPE IN OUT   IN: whole blocks of TYPE; OUT: float32 values
 *   quant_tool quant   TYPE IN OUT   IN: float32 values (whole blocks); OUT: blocks
 *   quant_tool file    TYPE IN OUT   as quant, with the quantizer `cinder quantize` uses
 *                                    (cn_type_quantizer: ggml's bytes, test_quantize.py)
 *
 * TYPE is a GGUF type name ("q4_K", "bf16"). Files are raw little-endian bytes. Exit
 * status 0 on success, 1 with a message on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

static int fail(const char *msg, const char *what) {
    fprintf(stderr, "quant_tool: %s%s%s\n", msg, what ? ": " : "", what ? what : "");
    return 1;
}

/* Reads a whole file into a malloc'ed buffer (at least 1 byte allocated). */
static unsigned char *read_all(const char *path, size_t *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n_out = n;
    return buf;
}

static int write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], "dequant") != 0 && strcmp(argv[1], "quant") != 0 && strcmp(argv[1], "file") != 0))
        return fail("usage: quant_tool dequant|quant|file TYPE IN OUT", NULL);
    const int dequant = strcmp(argv[1], "dequant") == 0;
    cn_from_float_fn quant = NULL;
    uint32_t type;
    if (!cn_type_from_name(argv[2], &type)) return fail("unknown type", argv[2]);
    const cn_type_traits *t = cn_type_traits_get(type);
    quant = strcmp(argv[1], "file") == 0 ? cn_type_quantizer(type) : t->from_float_ref;
    if (!dequant && !quant) return fail("no quantizer for type", argv[2]);

    size_t n_in;
    unsigned char *in = read_all(argv[3], &n_in);
    if (!in) return fail("cannot read", argv[3]);

    const size_t unit = dequant ? t->type_size : (size_t)t->block_size * sizeof(float);
    if (n_in % unit != 0) {
        free(in);
        return fail("input is not a whole number of blocks", argv[3]);
    }
    const int64_t n_elem = (int64_t)(n_in / unit) * t->block_size;
    const size_t n_out = dequant ? (size_t)n_elem * sizeof(float) : (size_t)cn_type_row_bytes(type, n_elem);
    /* Copy the input into an aligned buffer: block structs need their alignment. */
    void *src = cn_alloc_aligned(n_in ? n_in : 1);
    void *dst = cn_alloc_aligned(n_out ? n_out : 1);
    int rc = 0;
    if (!src || !dst) {
        rc = fail("out of memory", NULL);
    } else {
        memcpy(src, in, n_in);
        if (dequant) t->to_float(src, dst, n_elem);
        else quant(src, dst, n_elem);
        if (write_all(argv[4], dst, n_out) != 0) rc = fail("cannot write", argv[4]);
    }
    cn_free_aligned(src);
    cn_free_aligned(dst);
    free(in);
    return rc;
}
