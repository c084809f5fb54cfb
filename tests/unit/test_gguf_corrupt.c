/* test_gguf_corrupt.c — hand-built malformed GGUF files: absurd counts and lengths, bad
 * dimensions, offsets, alignments, types, nesting and duplicates. Each must fail with the
 * right status and a message naming the item, without allocating what the file claims
 * (under ASan a 2^60-byte allocation would itself fail the run). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

typedef struct {
    uint8_t p[4096];
    size_t n;
} buf;

static void put(buf *b, const void *v, size_t n) {
    cr_assert_leq(b->n + n, sizeof b->p);
    memcpy(b->p + b->n, v, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void pad_to(buf *b, size_t align) {
    while (b->n % align) b->p[b->n++] = 0;
}
/* tensor info: name, dims, type, offset */
static void tinfo(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    str(b, name);
    u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) u64(b, ne[d]);
    u32(b, type);
    u64(b, offset);
}

/* Parses an exact-size copy; returns the status and leaves the message in *err. */
static cn_status parse(const buf *b, cn_error *err) {
    uint8_t *p = malloc(b->n ? b->n : 1);
    cr_assert(p);
    memcpy(p, b->p, b->n);
    cn_gguf *g = NULL;
    cn_err_clear(err);
    cn_status s = cn_gguf_parse(p, b->n, &g, err);
    if (s == CN_STATUS_OK) cr_assert(g);
    else cr_assert_null(g);
    cn_gguf_close(g);
    free(p);
    return s;
}

static void expect(const buf *b, cn_status want, const char *needle) {
    cn_error err;
    cn_status s = parse(b, &err);
    cr_assert_eq(s, want, "status %d (%s), want %d", s, err.msg, want);
    if (needle) cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

Test(gguf_corrupt, magic_and_version) {
    buf b;
    header(&b, 3, 0, 0);
    expect(&b, CN_STATUS_OK, NULL);
    b.p[0] = 'X';
    expect(&b, CN_STATUS_CORRUPT, "magic");
    header(&b, 1, 0, 0);
    expect(&b, CN_STATUS_UNSUPPORTED, "version 1");
    header(&b, 4, 0, 0);
    expect(&b, CN_STATUS_UNSUPPORTED, "version 4");
    header(&b, 0x03000000, 0, 0);
    expect(&b, CN_STATUS_UNSUPPORTED, "big-endian");
    header(&b, 2, 0, 0);
    expect(&b, CN_STATUS_OK, NULL);
}

Test(gguf_corrupt, absurd_counts) {
    buf b;
    header(&b, 3, 1ull << 60, 0);
    expect(&b, CN_STATUS_CORRUPT, "1152921504606846976 tensors");
    header(&b, 3, 0, 1ull << 60);
    expect(&b, CN_STATUS_CORRUPT, "1152921504606846976 kvs");
    /* within the hard limits but more than the bytes could hold */
    header(&b, 3, 1000, 1000);
    expect(&b, CN_STATUS_CORRUPT, "cannot fit");
}

Test(gguf_corrupt, string_past_eof) {
    buf b;
    header(&b, 3, 0, 4);
    const char *keys[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        str(&b, keys[i]);
        u32(&b, CN_GGUF_UINT8);
        b.p[b.n++] = 1;
    }
    str(&b, "general.name");
    u32(&b, CN_GGUF_STRING);
    u64(&b, 1ull << 60);
    for (int i = 0; i < 120; i++) b.p[b.n++] = 'x';
    expect(&b, CN_STATUS_CORRUPT,
           "kv 3 ('general.name'): string length 1152921504606846976 exceeds the 120 bytes left");
    /* a key length past the end */
    header(&b, 3, 0, 1);
    u64(&b, 1ull << 62);
    u32(&b, 0);
    b.p[b.n++] = 0;
    expect(&b, CN_STATUS_CORRUPT, "kv 0: key length");
}

Test(gguf_corrupt, bad_value_types) {
    buf b;
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, 13);
    u64(&b, 0);
    expect(&b, CN_STATUS_CORRUPT, "kv 0 ('k'): invalid value type 13");
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, CN_GGUF_ARRAY);
    u32(&b, 99);
    u64(&b, 0);
    expect(&b, CN_STATUS_CORRUPT, "invalid array element type 99");
    /* a scalar cut short */
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, CN_GGUF_UINT64);
    u32(&b, 7);
    expect(&b, CN_STATUS_CORRUPT, "u64 needs 8 bytes but only 4");
}

Test(gguf_corrupt, huge_arrays) {
    buf b;
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, CN_GGUF_ARRAY);
    u32(&b, CN_GGUF_UINT64);
    u64(&b, 1ull << 62);
    u64(&b, 5);
    expect(&b, CN_STATUS_CORRUPT, "kv 0 ('k'): array of 4611686018427387904 × u64");
    header(&b, 3, 0, 1);
    str(&b, "tokenizer.ggml.tokens");
    u32(&b, CN_GGUF_ARRAY);
    u32(&b, CN_GGUF_STRING);
    u64(&b, 1ull << 60);
    str(&b, "a");
    expect(&b, CN_STATUS_CORRUPT, "array of 1152921504606846976 × string");
    /* a plausible count whose strings run out */
    header(&b, 3, 0, 1);
    str(&b, "t");
    u32(&b, CN_GGUF_ARRAY);
    u32(&b, CN_GGUF_STRING);
    u64(&b, 3);
    str(&b, "a");
    str(&b, "b");
    u64(&b, 100);
    put(&b, "cc", 2);
    expect(&b, CN_STATUS_CORRUPT, "string 2 of the array: length 100 exceeds the 2 bytes left");
}

static void nested(buf *b, int depth) {
    header(b, 3, 0, 1);
    str(b, "n");
    u32(b, CN_GGUF_ARRAY);
    for (int d = 1; d < depth; d++) {
        u32(b, CN_GGUF_ARRAY);
        u64(b, 1);
    }
    u32(b, CN_GGUF_STRING);
    u64(b, 1);
    str(b, "leaf");
}

Test(gguf_corrupt, nesting_limit) {
    buf b;
    nested(&b, CN_GGUF_MAX_NEST);
    cn_error err;
    cr_assert_eq(parse(&b, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf *g;
    cr_assert_eq(cn_gguf_parse(b.p, b.n, &g, &err), CN_STATUS_OK);
    cn_gguf_arr a;
    cr_assert(cn_gguf_get_arr(g, "n", &a));
    for (int d = 1; d < CN_GGUF_MAX_NEST; d++) {
        cn_gguf_arr sub;
        cr_assert(cn_gguf_arr_sub(&a, 0, &sub));
        a = sub;
    }
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&a, 0), "leaf"));
    cn_gguf_close(g);
    nested(&b, CN_GGUF_MAX_NEST + 1);
    expect(&b, CN_STATUS_CORRUPT, "nested deeper than 8");
    /* an array of many arrays, each claiming a huge count */
    header(&b, 3, 0, 1);
    str(&b, "n");
    u32(&b, CN_GGUF_ARRAY);
    u32(&b, CN_GGUF_ARRAY);
    u64(&b, 2);
    u32(&b, CN_GGUF_INT8);
    u64(&b, 1);
    b.p[b.n++] = 5;
    u32(&b, CN_GGUF_FLOAT64);
    u64(&b, 1ull << 61);
    expect(&b, CN_STATUS_CORRUPT, "array of 2305843009213693952 × f64");
}

Test(gguf_corrupt, duplicates) {
    buf b;
    header(&b, 3, 0, 2);
    str(&b, "k");
    u32(&b, CN_GGUF_BOOL);
    b.p[b.n++] = 1;
    str(&b, "k");
    u32(&b, CN_GGUF_BOOL);
    b.p[b.n++] = 0;
    expect(&b, CN_STATUS_CORRUPT, "kv 1 ('k'): duplicate key");
    uint64_t ne[1] = {8};
    header(&b, 3, 2, 0);
    tinfo(&b, "t", 1, ne, CN_TYPE_F32, 0);
    tinfo(&b, "t", 1, ne, CN_TYPE_F32, 32);
    pad_to(&b, 32);
    for (int i = 0; i < 64; i++) b.p[b.n++] = 0;
    expect(&b, CN_STATUS_CORRUPT, "tensor 1 ('t'): duplicate tensor name");
}

Test(gguf_corrupt, alignment) {
    uint32_t vals[] = {0, 3, 48};
    for (size_t i = 0; i < 3; i++) {
        buf b;
        header(&b, 3, 0, 1);
        str(&b, "general.alignment");
        u32(&b, CN_GGUF_UINT32);
        u32(&b, vals[i]);
        expect(&b, CN_STATUS_CORRUPT, "not a power of two");
    }
    buf b;
    header(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, CN_GGUF_STRING);
    str(&b, "32");
    expect(&b, CN_STATUS_CORRUPT, "general.alignment has type string");
    header(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, CN_GGUF_UINT32);
    u32(&b, 16);
    expect(&b, CN_STATUS_OK, NULL);
}

/* One F32 tensor file with the given dims and offset; data section of data_bytes. */
static void one_tensor(buf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    header(b, 3, 1, 0);
    tinfo(b, "blk.0.w", n_dims, ne, type, offset);
    pad_to(b, 32);
    for (size_t i = 0; i < data_bytes; i++) b->p[b->n++] = (uint8_t)i;
}

Test(gguf_corrupt, tensor_infos) {
    buf b;
    uint64_t ne[5] = {4, 2, 1, 1, 1};
    one_tensor(&b, 2, ne, CN_TYPE_F32, 0, 32);
    expect(&b, CN_STATUS_OK, NULL);
    one_tensor(&b, 5, ne, CN_TYPE_F32, 0, 32);
    expect(&b, CN_STATUS_CORRUPT, "tensor 0 ('blk.0.w'): 5 dimensions");
    uint64_t neg[2] = {4, (uint64_t)-2};
    one_tensor(&b, 2, neg, CN_TYPE_F32, 0, 32);
    expect(&b, CN_STATUS_CORRUPT, "dimension 1 is negative");
    uint64_t big[3] = {1ull << 32, 1ull << 30, 4};
    one_tensor(&b, 3, big, CN_TYPE_F32, 0, 32);
    expect(&b, CN_STATUS_CORRUPT, "element count overflows at dimension 2");
    uint64_t bytes_big[2] = {1ull << 62, 1};
    one_tensor(&b, 2, bytes_big, CN_TYPE_F32, 0, 32);
    expect(&b, CN_STATUS_CORRUPT, "size in bytes overflows");
    one_tensor(&b, 2, ne, CN_TYPE_F32, 1ull << 40, 32);
    expect(&b, CN_STATUS_CORRUPT, "offset 1099511627776 + 32 bytes runs past");
    one_tensor(&b, 2, ne, CN_TYPE_F32, UINT64_MAX - 31, 32);
    expect(&b, CN_STATUS_CORRUPT, "runs past");
    one_tensor(&b, 2, ne, CN_TYPE_F32, 8, 64);
    expect(&b, CN_STATUS_CORRUPT, "offset 8 is not a multiple of the alignment 32");
    one_tensor(&b, 2, ne, CN_TYPE_F32, 0, 31);
    expect(&b, CN_STATUS_CORRUPT, "runs past");
    uint64_t q[1] = {33};
    one_tensor(&b, 1, q, CN_TYPE_Q8_0, 0, 64);
    expect(&b, CN_STATUS_CORRUPT, "not a multiple of the block size 32");
    /* no data section at all */
    header(&b, 3, 1, 0);
    tinfo(&b, "w", 2, ne, CN_TYPE_F32, 0);
    expect(&b, CN_STATUS_CORRUPT, "past the end");
}

Test(gguf_corrupt, unknown_tensor_type_allowed) {
    buf b;
    uint64_t ne[1] = {7};
    one_tensor(&b, 1, ne, 200, 0, 32);
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_parse(b.p, b.n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    const cn_gguf_tensor_info *t = cn_gguf_tensor(g, 0);
    cr_assert_eq(t->type, 200);
    cr_assert_null(t->data);
    cr_assert_eq(t->n_bytes, 0);
    cn_gguf_close(g);
    /* its offset is still checked */
    one_tensor(&b, 1, ne, 200, 64, 32);
    expect(&b, CN_STATUS_CORRUPT, "runs past");
}

Test(gguf_corrupt, getters_reject_wrong_kinds) {
    buf b;
    header(&b, 3, 0, 3);
    str(&b, "neg");
    u32(&b, CN_GGUF_INT8);
    b.p[b.n++] = 0x80;
    str(&b, "huge");
    u32(&b, CN_GGUF_UINT64);
    u64(&b, UINT64_MAX);
    str(&b, "s");
    u32(&b, CN_GGUF_STRING);
    str(&b, "text");
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_parse(b.p, b.n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    uint32_t u;
    int64_t i;
    uint64_t w;
    float f;
    bool bo;
    cn_gguf_arr a;
    cr_assert_not(cn_gguf_get_u32(g, "neg", &u));
    cr_assert_not(cn_gguf_get_u64(g, "neg", &w));
    cr_assert(cn_gguf_get_i64(g, "neg", &i));
    cr_assert_eq(i, -128);
    cr_assert_not(cn_gguf_get_i64(g, "huge", &i));
    cr_assert(cn_gguf_get_u64(g, "huge", &w));
    cr_assert_eq(w, UINT64_MAX);
    cr_assert_not(cn_gguf_get_f32(g, "huge", &f));
    cr_assert_not(cn_gguf_get_bool(g, "s", &bo));
    cr_assert_not(cn_gguf_get_arr(g, "s", &a));
    cr_assert_not(cn_gguf_kv_i64(g, 2, &i));
    cr_assert_not(cn_gguf_kv_i64(g, 3, &i), "index past the end");
    cr_assert_null(cn_gguf_kv_key(g, -1).ptr);
    cn_gguf_close(g);
}
