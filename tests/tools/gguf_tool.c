/* gguf_tool.c — a test helper for tests/py/test_gguf_*.py: writes a GGUF with every value
 * type, nested arrays and several tensor types through cinder's writer, and dumps any
 * GGUF as JSON through cinder's reader, so that python can compare both against the gguf
 * PyPI package (an independent implementation).
 *
 *   gguf_tool write-all OUT.gguf   the fixed sample (tests/py/test_gguf_compat.py builds
 *                                  the same file with gguf-py and expects identical bytes)
 *   gguf_tool dump FILE.gguf       {"version", "alignment", "data_offset", "n_kv",
 *                                   "n_tensors", "kv": [{"key", "type", "leaves"}],
 *                                   "tensors": [{"name", "type", "ne", "offset", "n_bytes",
 *                                   "data"}]}
 *   gguf_tool seeds DIR            writes the fuzz seed corpus (tests/fuzz) into DIR
 *
 * "leaves" flattens a value the way gguf-py's ReaderField.parts does: a string is its
 * length then its bytes, an array its element type, its count, then its elements. Keys and
 * names are hex; tensor data is hex. Reading goes through the public accessors only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

/* the fuzz harness's seed generator, reused for `seeds` */
#include "../fuzz/fuzz_gguf.c"

static void hex(FILE *f, const void *p, uint64_t n) {
    const uint8_t *b = p;
    fputc('"', f);
    for (uint64_t i = 0; i < n; i++) fprintf(f, "%02x", b[i]);
    fputc('"', f);
}

static void str_leaves(FILE *f, cn_gguf_str s) {
    fprintf(f, "%llu", (unsigned long long)s.len);
    for (uint64_t i = 0; i < s.len; i++) fprintf(f, ",%u", (uint8_t)s.ptr[i]);
}

static bool is_float(cn_gguf_vtype t) { return t == CN_GGUF_FLOAT32 || t == CN_GGUF_FLOAT64; }

static void arr_leaves(FILE *f, const cn_gguf_arr *a) {
    fprintf(f, "%u,%llu", (unsigned)a->type, (unsigned long long)a->n);
    for (uint64_t j = 0; j < a->n; j++) {
        fputc(',', f);
        if (a->type == CN_GGUF_STRING) {
            str_leaves(f, cn_gguf_arr_str(a, j));
        } else if (a->type == CN_GGUF_ARRAY) {
            cn_gguf_arr sub;
            if (!cn_gguf_arr_sub(a, j, &sub)) {
                fprintf(f, "null");
                continue;
            }
            arr_leaves(f, &sub);
        } else if (is_float(a->type)) {
            fprintf(f, "%.17g", cn_gguf_arr_f64(a, j));
        } else if (a->type == CN_GGUF_UINT64) {
            fprintf(f, "%llu", (unsigned long long)(uint64_t)cn_gguf_arr_i64(a, j));
        } else {
            fprintf(f, "%lld", (long long)cn_gguf_arr_i64(a, j));
        }
    }
}

static int dump(const char *path) {
    cn_gguf *g;
    cn_error err;
    if (cn_gguf_open(path, &g, &err)) {
        fprintf(stderr, "gguf_tool: %s\n", err.msg);
        return 1;
    }
    FILE *f = stdout;
    fprintf(f, "{\"version\":%u,\"alignment\":%u,\"data_offset\":%llu,\"n_kv\":%lld,\"n_tensors\":%lld,",
            cn_gguf_version(g), cn_gguf_alignment(g), (unsigned long long)cn_gguf_data_offset(g),
            (long long)cn_gguf_n_kv(g), (long long)cn_gguf_n_tensors(g));
    fprintf(f, "\"kv\":[");
    for (int64_t i = 0; i < cn_gguf_n_kv(g); i++) {
        cn_gguf_str k = cn_gguf_kv_key(g, i);
        cn_gguf_vtype t = cn_gguf_kv_type(g, i);
        fprintf(f, "%s\n{\"key\":", i ? "," : "");
        hex(f, k.ptr, k.len);
        fprintf(f, ",\"type\":%u,\"leaves\":[", (unsigned)t);
        str_leaves(f, k);
        fprintf(f, ",%u,", (unsigned)t);
        int64_t v;
        uint64_t u;
        double d;
        cn_gguf_str s;
        cn_gguf_arr a;
        if (t == CN_GGUF_STRING && cn_gguf_kv_str(g, i, &s)) {
            str_leaves(f, s);
        } else if (t == CN_GGUF_ARRAY && cn_gguf_kv_arr(g, i, &a)) {
            arr_leaves(f, &a);
        } else if (is_float(t) && cn_gguf_kv_f64(g, i, &d)) {
            fprintf(f, "%.17g", d);
        } else if (cn_gguf_kv_i64(g, i, &v)) {
            fprintf(f, "%lld", (long long)v);
        } else if (cn_gguf_kv_u64(g, i, &u)) { /* a u64 above INT64_MAX */
            fprintf(f, "%llu", (unsigned long long)u);
        } else {
            fprintf(f, "null");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "],\n\"tensors\":[");
    for (int64_t i = 0; i < cn_gguf_n_tensors(g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        fprintf(f, "%s\n{\"name\":", i ? "," : "");
        hex(f, t->name.ptr, t->name.len);
        fprintf(f, ",\"type\":%u,\"n_dims\":%u,\"ne\":[", t->type, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->ne[d]);
        fprintf(f, "],\"offset\":%llu,\"n_bytes\":%llu,\"data\":", (unsigned long long)t->offset,
                (unsigned long long)t->n_bytes);
        if (t->data) hex(f, t->data, t->n_bytes);
        else fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    cn_gguf_close(g);
    return 0;
}

/* --- the sample file; tests/py/test_gguf_compat.py mirrors it with gguf-py --- */

static uint8_t pattern(size_t i, unsigned salt) { return (uint8_t)(i * 37u + salt * 11u + 5u); }

static cn_status add_pattern_tensor(cn_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                    const int64_t *ne, unsigned salt) {
    uint64_t n;
    if (!cn_gguf_tensor_bytes(type, n_dims, ne, &n)) return CN_STATUS_INVALID_ARG;
    uint8_t *p = malloc(n ? n : 1);
    if (!p) return CN_STATUS_NO_MEMORY;
    for (uint64_t i = 0; i < n; i++) p[i] = pattern(i, salt);
    cn_error err;
    cn_status s = cn_gguf_writer_add_tensor(w, name, (cn_type)type, n_dims, ne, p, n, &err);
    if (s) fprintf(stderr, "gguf_tool: %s\n", err.msg);
    free(p);
    return s;
}

static cn_gguf_warr *strs(const char *const *v, int n) {
    cn_gguf_warr *a = cn_gguf_warr_new(CN_GGUF_STRING);
    for (int i = 0; a && i < n; i++) cn_gguf_warr_push_str(a, v[i], strlen(v[i]));
    return a;
}

static int write_all(const char *path) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    if (!w) return 1;
    int rc = 1;
    cn_status s = CN_STATUS_OK;
#define TRY(x)           \
    do {                 \
        if (!s) s = (x); \
    } while (0)
    TRY(cn_gguf_writer_set_str(w, "general.architecture", "llama"));
    uint8_t u8 = 250;
    int8_t i8 = -120;
    uint16_t u16 = 65000;
    int16_t i16 = -32000;
    int64_t i64 = -9000000000000000000ll;
    double f64 = 3.141592653589793;
    TRY(cn_gguf_writer_set_scalar(w, "t.u8", CN_GGUF_UINT8, &u8));
    TRY(cn_gguf_writer_set_scalar(w, "t.i8", CN_GGUF_INT8, &i8));
    TRY(cn_gguf_writer_set_scalar(w, "t.u16", CN_GGUF_UINT16, &u16));
    TRY(cn_gguf_writer_set_scalar(w, "t.i16", CN_GGUF_INT16, &i16));
    TRY(cn_gguf_writer_set_u32(w, "t.u32", 4000000000u));
    TRY(cn_gguf_writer_set_i32(w, "t.i32", -2000000000));
    TRY(cn_gguf_writer_set_f32(w, "t.f32", 0.1f));
    TRY(cn_gguf_writer_set_bool(w, "t.bool", true));
    TRY(cn_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo \"w\"\n"));
    TRY(cn_gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull));
    TRY(cn_gguf_writer_set_scalar(w, "t.i64", CN_GGUF_INT64, &i64));
    TRY(cn_gguf_writer_set_scalar(w, "t.f64", CN_GGUF_FLOAT64, &f64));

    uint8_t a_u8[] = {0, 1, 255};
    int8_t a_i8[] = {-128, 0, 127};
    uint16_t a_u16[] = {0, 65535};
    int16_t a_i16[] = {-32768, 32767};
    uint32_t a_u32[] = {0, 4294967295u, 7};
    int32_t a_i32[] = {-2147483647 - 1, 2147483647};
    float a_f32[] = {1.5f, -0.25f, 1e-30f};
    uint8_t a_bool[] = {1, 0, 1};
    uint64_t a_u64[] = {0, 18446744073709551615ull};
    int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    double a_f64[] = {-1e300, 2.5e-300};
    TRY(cn_gguf_writer_set_arr(w, "a.u8", CN_GGUF_UINT8, a_u8, 3));
    TRY(cn_gguf_writer_set_arr(w, "a.i8", CN_GGUF_INT8, a_i8, 3));
    TRY(cn_gguf_writer_set_arr(w, "a.u16", CN_GGUF_UINT16, a_u16, 2));
    TRY(cn_gguf_writer_set_arr(w, "a.i16", CN_GGUF_INT16, a_i16, 2));
    TRY(cn_gguf_writer_set_arr(w, "a.u32", CN_GGUF_UINT32, a_u32, 3));
    TRY(cn_gguf_writer_set_arr(w, "a.i32", CN_GGUF_INT32, a_i32, 2));
    TRY(cn_gguf_writer_set_arr(w, "a.f32", CN_GGUF_FLOAT32, a_f32, 3));
    TRY(cn_gguf_writer_set_arr(w, "a.bool", CN_GGUF_BOOL, a_bool, 3));
    TRY(cn_gguf_writer_set_arr(w, "a.u64", CN_GGUF_UINT64, a_u64, 2));
    TRY(cn_gguf_writer_set_arr(w, "a.i64", CN_GGUF_INT64, a_i64, 2));
    TRY(cn_gguf_writer_set_arr(w, "a.f64", CN_GGUF_FLOAT64, a_f64, 2));
    const char *words[] = {"<s>", "\xe2\x96\x81the", "", "\xf0\x9f\x94\xa5"};
    TRY(cn_gguf_writer_set_arr_str(w, "a.str", words, 4));

    /* n.mixed = [["a", "bc"], [1, 2, 3]] */
    const char *ab[] = {"a", "bc"};
    cn_gguf_warr *mixed = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *s_ab = strs(ab, 2);
    cn_gguf_warr *ints = cn_gguf_warr_new(CN_GGUF_INT32);
    for (int32_t v = 1; ints && v <= 3; v++) cn_gguf_warr_push(ints, &v);
    /* n.deep = [[["x"], ["y", "z"]], [["w"]]] */
    const char *x[] = {"x"}, *yz[] = {"y", "z"}, *wv[] = {"w"};
    cn_gguf_warr *deep = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *d0 = cn_gguf_warr_new(CN_GGUF_ARRAY), *d1 = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *sx = strs(x, 1), *syz = strs(yz, 2), *sw = strs(wv, 1);
    /* n.floats = [[1.5, -2.0], [0.25]] */
    cn_gguf_warr *fl = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *f0 = cn_gguf_warr_new(CN_GGUF_FLOAT32), *f1 = cn_gguf_warr_new(CN_GGUF_FLOAT32);
    if (!mixed || !s_ab || !ints || !deep || !d0 || !d1 || !sx || !syz || !sw || !fl || !f0 || !f1) {
        s = CN_STATUS_NO_MEMORY;
    } else {
        float v0 = 1.5f, v1 = -2.0f, v2 = 0.25f;
        TRY(cn_gguf_warr_push_arr(mixed, s_ab));
        TRY(cn_gguf_warr_push_arr(mixed, ints));
        TRY(cn_gguf_writer_set_warr(w, "n.mixed", mixed));
        TRY(cn_gguf_warr_push_arr(d0, sx));
        TRY(cn_gguf_warr_push_arr(d0, syz));
        TRY(cn_gguf_warr_push_arr(d1, sw));
        TRY(cn_gguf_warr_push_arr(deep, d0));
        TRY(cn_gguf_warr_push_arr(deep, d1));
        TRY(cn_gguf_writer_set_warr(w, "n.deep", deep));
        TRY(cn_gguf_warr_push(f0, &v0));
        TRY(cn_gguf_warr_push(f0, &v1));
        TRY(cn_gguf_warr_push(f1, &v2));
        TRY(cn_gguf_warr_push_arr(fl, f0));
        TRY(cn_gguf_warr_push_arr(fl, f1));
        TRY(cn_gguf_writer_set_warr(w, "n.floats", fl));
    }
    cn_gguf_warr *all[] = {mixed, s_ab, ints, deep, d0, d1, sx, syz, sw, fl, f0, f1};
    for (size_t i = 0; i < CN_ARRAY_LEN(all); i++) cn_gguf_warr_free(all[i]);

    int64_t ne_f32[] = {3, 2}, ne_f16[] = {4}, ne_q8[] = {64, 2}, ne_q4k[] = {256, 1, 2}, ne_bf16[] = {2, 2, 2, 2},
            ne_i32[] = {5};
    TRY(add_pattern_tensor(w, "t.f32", CN_TYPE_F32, 2, ne_f32, 1));
    TRY(add_pattern_tensor(w, "t.f16", CN_TYPE_F16, 1, ne_f16, 2));
    TRY(add_pattern_tensor(w, "blk.0.q8_0", CN_TYPE_Q8_0, 2, ne_q8, 3));
    TRY(add_pattern_tensor(w, "blk.0.q4_k", CN_TYPE_Q4_K, 3, ne_q4k, 4));
    TRY(add_pattern_tensor(w, "t.bf16", CN_TYPE_BF16, 4, ne_bf16, 5));
    TRY(add_pattern_tensor(w, "t.i32", 26, 1, ne_i32, 6));
#undef TRY
    cn_error err;
    if (s) fprintf(stderr, "gguf_tool: building the sample failed: %s\n", cn_status_str(s));
    else if (cn_gguf_writer_write_file(w, path, &err)) fprintf(stderr, "gguf_tool: %s\n", err.msg);
    else rc = 0;
    cn_gguf_writer_free(w);
    return rc;
}

static int seeds(const char *dir) {
    uint8_t *bufs[8];
    size_t lens[8];
    size_t n = fuzz_gguf_seeds(bufs, lens, 8);
    int rc = n ? 0 : 1;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed%zu.gguf", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(bufs[i], 1, lens[i], f) != lens[i]) rc = 1;
        if (f && fclose(f)) rc = 1;
        free(bufs[i]);
    }
    if (rc) fprintf(stderr, "gguf_tool: cannot write seeds to %s\n", dir);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "dump")) return dump(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "write-all")) return write_all(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "seeds")) return seeds(argv[2]);
    fprintf(stderr, "usage: gguf_tool dump FILE | write-all OUT | seeds DIR\n");
    return 2;
}
