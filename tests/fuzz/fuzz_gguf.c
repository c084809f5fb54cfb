/* fuzz_gguf.c — fuzz entry for the GGUF reader, and the seed corpus it starts from.
 *
 * LLVMFuzzerTestOneInput parses the input; on failure the message must be non-empty, on
 * success every accessor is walked (each key, scalar, array element, nested array, and
 * the first and last byte of every tensor) so that the sanitizers see any read outside
 * the input. Built three ways: by `make fuzz` with libFuzzer (clang), by the unit tests
 * (tests/unit/test_gguf_fuzz.c includes this file and replays the seeds and their
 * mutations under ASan+UBSan), and by tests/tools/gguf_tool.c, whose `seeds DIR` writes
 * the seeds to a folder for libFuzzer. The seeds are made by our writer at run time,
 * never stored. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t fuzz_sink; /* keeps the walk's reads from being optimized away */

static void walk_arr(const cn_gguf_arr *a, int depth) {
    uint64_t acc = 0;
    for (uint64_t j = 0; j < a->n; j++) {
        switch (a->type) {
        case CN_GGUF_STRING: {
            cn_gguf_str s = cn_gguf_arr_str(a, j);
            if (s.len) acc += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
            break;
        }
        case CN_GGUF_ARRAY: {
            cn_gguf_arr sub;
            if (cn_gguf_arr_sub(a, j, &sub)) {
                if (depth >= CN_GGUF_MAX_NEST) abort(); /* the reader let too deep a nest in */
                walk_arr(&sub, depth + 1);
            }
            break;
        }
        default: {
            /* the float's bits: converting a NaN or a huge value to an integer is undefined */
            const double f = cn_gguf_arr_f64(a, j);
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            acc += (uint64_t)cn_gguf_arr_i64(a, j) + bits;
        }
        }
    }
    /* out-of-range requests stay harmless */
    cn_gguf_str s = cn_gguf_arr_str(a, a->n);
    cn_gguf_arr sub;
    if (s.ptr || cn_gguf_arr_sub(a, a->n, &sub)) abort();
    fuzz_sink += acc;
}

int fuzz_gguf_one(const uint8_t *data, size_t size);
size_t fuzz_gguf_seeds(uint8_t **bufs, size_t *lens, size_t max);

/* 0: parsed and walked; -1: rejected with a message. Aborts on a reader bug. */
int fuzz_gguf_one(const uint8_t *data, size_t size) {
    cn_gguf *g = NULL;
    cn_error err = {0};
    cn_status s = cn_gguf_parse(data, size, &g, &err);
    if (s != CN_STATUS_OK) {
        if (g || err.msg[0] == '\0' || err.status != s) abort();
        return -1;
    }
    uint64_t acc = cn_gguf_version(g) + cn_gguf_alignment(g) + cn_gguf_data_offset(g);
    for (int64_t i = 0; i < cn_gguf_n_kv(g); i++) {
        cn_gguf_str k = cn_gguf_kv_key(g, i);
        if (k.len) acc += (uint8_t)k.ptr[0] + (uint8_t)k.ptr[k.len - 1];
        int64_t v;
        double d;
        cn_gguf_str str;
        cn_gguf_arr a;
        if (cn_gguf_kv_i64(g, i, &v)) acc += (uint64_t)v;
        if (cn_gguf_kv_f64(g, i, &d)) acc += (uint64_t)(d == d);
        if (cn_gguf_kv_str(g, i, &str) && str.len) acc += (uint8_t)str.ptr[str.len - 1];
        if (cn_gguf_kv_arr(g, i, &a)) walk_arr(&a, 1);
        acc += (uint64_t)cn_gguf_kv_type(g, i);
    }
    for (int64_t i = 0; i < cn_gguf_n_tensors(g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        if (!t || t->n_dims > CN_GGUF_MAX_DIMS) abort();
        if (t->data && t->n_bytes) {
            const uint8_t *p = t->data;
            acc += p[0] + p[t->n_bytes - 1];
        }
    }
    if (cn_gguf_tensor(g, cn_gguf_n_tensors(g)) || cn_gguf_kv_key(g, cn_gguf_n_kv(g)).ptr) abort();
    fuzz_sink += acc;
    cn_gguf_close(g);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_gguf_one(data, size);
    return 0;
}

/* --- seeds --- */

/* A small file touching every value type, nested arrays and three tensor types. */
static cn_gguf_writer *seed_full(void) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    if (!w) return NULL;
    cn_gguf_writer_set_str(w, "general.architecture", "llama");
    cn_gguf_writer_set_str(w, "general.name", "fuzz seed");
    cn_gguf_writer_set_u32(w, "llama.context_length", 128);
    cn_gguf_writer_set_i32(w, "t.i32", -5);
    cn_gguf_writer_set_u64(w, "t.u64", 1ull << 50);
    cn_gguf_writer_set_f32(w, "t.f32", 0.5f);
    cn_gguf_writer_set_bool(w, "t.bool", true);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int64_t i64 = -(1ll << 40);
    double f64 = -1e300;
    cn_gguf_writer_set_scalar(w, "t.u8", CN_GGUF_UINT8, &u8);
    cn_gguf_writer_set_scalar(w, "t.i8", CN_GGUF_INT8, &i8);
    cn_gguf_writer_set_scalar(w, "t.u16", CN_GGUF_UINT16, &u16);
    cn_gguf_writer_set_scalar(w, "t.i16", CN_GGUF_INT16, &i16);
    cn_gguf_writer_set_scalar(w, "t.i64", CN_GGUF_INT64, &i64);
    cn_gguf_writer_set_scalar(w, "t.f64", CN_GGUF_FLOAT64, &f64);
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", ""};
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
    int32_t types[] = {2, 3, 3, 1, 1};
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, types, 5);
    cn_gguf_warr *outer = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *s = cn_gguf_warr_new(CN_GGUF_STRING);
    cn_gguf_warr *mid = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *f = cn_gguf_warr_new(CN_GGUF_FLOAT64);
    if (outer && s && mid && f) {
        cn_gguf_warr_push_str(s, "ab", 2);
        cn_gguf_warr_push_str(s, "c", 1);
        cn_gguf_warr_push(f, &f64);
        cn_gguf_warr_push_arr(mid, f);
        cn_gguf_warr_push_arr(mid, s);
        cn_gguf_warr_push_arr(outer, s);
        cn_gguf_warr_push_arr(outer, mid);
        cn_gguf_writer_set_warr(w, "t.nested", outer);
    }
    cn_gguf_warr_free(outer);
    cn_gguf_warr_free(s);
    cn_gguf_warr_free(mid);
    cn_gguf_warr_free(f);

    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8};
    uint16_t h[4] = {0x3c00, 0xbc00, 0x4000, 0};
    uint8_t q[34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)(i * 13);
    int64_t ne_x[2] = {4, 2}, ne_h[1] = {4}, ne_q[1] = {32};
    cn_gguf_writer_add_tensor(w, "token_embd.weight", CN_TYPE_F32, 2, ne_x, x, sizeof x, NULL);
    cn_gguf_writer_add_tensor(w, "output_norm.weight", CN_TYPE_F16, 1, ne_h, h, sizeof h, NULL);
    cn_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", CN_TYPE_Q8_0, 1, ne_q, q, sizeof q, NULL);
    return w;
}

/* Fills up to max seeds (malloc'd buffers, caller frees); returns how many. */
size_t fuzz_gguf_seeds(uint8_t **bufs, size_t *lens, size_t max) {
    size_t k = 0;
    for (int variant = 0; variant < 4 && k < max; variant++) {
        cn_gguf_writer *w = variant == 3 ? cn_gguf_writer_new() : seed_full();
        if (!w) continue;
        if (variant == 1) cn_gguf_writer_set_version(w, 2);
        if (variant == 2) cn_gguf_writer_set_u32(w, "general.alignment", 64);
        if (cn_gguf_writer_write_mem(w, &bufs[k], &lens[k], NULL) == CN_STATUS_OK) k++;
        cn_gguf_writer_free(w);
    }
    return k;
}
