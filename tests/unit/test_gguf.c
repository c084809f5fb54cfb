/* test_gguf.c — GGUF reader and writer: round trips of every value type and nested arrays,
 * the tensor table, the layout llama.cpp expects (alignment, zero padding), getters'
 * range rules, and the real vocabulary and model files under the shared testdata. The
 * independent check against the gguf PyPI package lives in tests/py/test_gguf_compat.py. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"

static cn_gguf_writer *sample_writer(void) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    cr_assert(w);
    cr_assert_eq(cn_gguf_writer_set_str(w, "general.architecture", "llama"), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_u32(w, "llama.block_count", 2), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_i32(w, "test.i32", -7), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_u64(w, "test.u64", 1ull << 40), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_f32(w, "test.f32", 1.5f), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_bool(w, "test.bool", true), CN_STATUS_OK);
    int16_t i16 = -300;
    double f64 = 2.25;
    cr_assert_eq(cn_gguf_writer_set_scalar(w, "test.i16", CN_GGUF_INT16, &i16), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_scalar(w, "test.f64", CN_GGUF_FLOAT64, &f64), CN_STATUS_OK);
    const char *toks[] = {"<s>", "</s>", "a", ""};
    cr_assert_eq(cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4), CN_STATUS_OK);
    float scores[] = {0.f, -1.f, -2.5f, 3.f};
    cr_assert_eq(cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, scores, 4), CN_STATUS_OK);
    /* [[ "x", "yz" ], [], [[1, 2]]] : an array of arrays of mixed element types */
    cn_gguf_warr *outer = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *a0 = cn_gguf_warr_new(CN_GGUF_STRING);
    cn_gguf_warr *a1 = cn_gguf_warr_new(CN_GGUF_STRING);
    cn_gguf_warr *a2 = cn_gguf_warr_new(CN_GGUF_ARRAY);
    cn_gguf_warr *a20 = cn_gguf_warr_new(CN_GGUF_INT32);
    cr_assert(outer && a0 && a1 && a2 && a20);
    cn_gguf_warr_push_str(a0, "x", 1);
    cn_gguf_warr_push_str(a0, "yz", 2);
    int32_t one = 1, two = 2;
    cn_gguf_warr_push(a20, &one);
    cn_gguf_warr_push(a20, &two);
    cn_gguf_warr_push_arr(a2, a20);
    cn_gguf_warr_push_arr(outer, a0);
    cn_gguf_warr_push_arr(outer, a1);
    cn_gguf_warr_push_arr(outer, a2);
    cr_assert_eq(cn_gguf_writer_set_warr(w, "test.nested", outer), CN_STATUS_OK);
    cn_gguf_warr_free(outer);
    cn_gguf_warr_free(a0);
    cn_gguf_warr_free(a1);
    cn_gguf_warr_free(a2);
    cn_gguf_warr_free(a20);

    cn_error err;
    float wdata[6] = {1, 2, 3, 4, 5, 6};
    int64_t ne2[2] = {3, 2};
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "w", CN_TYPE_F32, 2, ne2, wdata, sizeof wdata, &err), CN_STATUS_OK, "%s",
                 err.msg);
    uint8_t q8[34 * 2];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    int64_t neq[1] = {64};
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "q", CN_TYPE_Q8_0, 1, neq, q8, sizeof q8, &err), CN_STATUS_OK, "%s",
                 err.msg);
    return w;
}

static void check_sample(const cn_gguf *g) {
    cr_assert_eq(cn_gguf_version(g), 3);
    cr_assert_eq(cn_gguf_alignment(g), 32);
    cr_assert_eq(cn_gguf_data_offset(g) % 32, 0);
    cr_assert_eq(cn_gguf_n_kv(g), 11);
    cn_gguf_str s;
    cr_assert(cn_gguf_get_str(g, "general.architecture", &s));
    cr_assert(cn_gguf_str_eq(s, "llama"));
    uint32_t u32;
    cr_assert(cn_gguf_get_u32(g, "llama.block_count", &u32));
    cr_assert_eq(u32, 2);
    cr_assert_not(cn_gguf_get_u32(g, "test.i32", &u32), "negative value must not read as u32");
    int64_t i64;
    cr_assert(cn_gguf_get_i64(g, "test.i32", &i64));
    cr_assert_eq(i64, -7);
    cr_assert(cn_gguf_get_i64(g, "test.i16", &i64));
    cr_assert_eq(i64, -300);
    uint64_t u64;
    cr_assert(cn_gguf_get_u64(g, "test.u64", &u64));
    cr_assert_eq(u64, 1ull << 40);
    cr_assert_not(cn_gguf_get_u32(g, "test.u64", &u32), "2^40 does not fit u32");
    float f;
    cr_assert(cn_gguf_get_f32(g, "test.f32", &f));
    cr_assert_eq(f, 1.5f);
    cr_assert(cn_gguf_get_f32(g, "test.f64", &f));
    cr_assert_eq(f, 2.25f);
    cr_assert_not(cn_gguf_get_f32(g, "general.architecture", &f));
    bool b = false;
    cr_assert(cn_gguf_get_bool(g, "test.bool", &b));
    cr_assert(b);
    cr_assert_not(cn_gguf_get_str(g, "absent", &s));
    cr_assert_eq(cn_gguf_find_key(g, "absent"), -1);

    int64_t ki = cn_gguf_find_key(g, "test.bool");
    cr_assert_eq(cn_gguf_kv_type(g, ki), CN_GGUF_BOOL);
    cr_assert(cn_gguf_kv_i64(g, ki, &i64));
    cr_assert_eq(i64, 1);
    double d;
    cr_assert(cn_gguf_kv_f64(g, cn_gguf_find_key(g, "test.i16"), &d));
    cr_assert_eq(d, -300.0);

    cn_gguf_arr a;
    cr_assert(cn_gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    cr_assert_eq(a.type, CN_GGUF_STRING);
    cr_assert_eq(a.n, 4);
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&a, 0), "<s>"));
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&a, 2), "a"));
    cr_assert_eq(cn_gguf_arr_str(&a, 3).len, 0);
    cr_assert_null(cn_gguf_arr_str(&a, 4).ptr, "out-of-range element must be empty");
    cr_assert(cn_gguf_get_arr(g, "tokenizer.ggml.scores", &a));
    cr_assert_eq(a.type, CN_GGUF_FLOAT32);
    cr_assert_eq(cn_gguf_arr_f64(&a, 2), -2.5);
    cr_assert_eq(cn_gguf_arr_f64(&a, 3), 3.0);

    cr_assert(cn_gguf_get_arr(g, "test.nested", &a));
    cr_assert_eq(a.type, CN_GGUF_ARRAY);
    cr_assert_eq(a.n, 3);
    cn_gguf_arr sub, sub2;
    cr_assert(cn_gguf_arr_sub(&a, 0, &sub));
    cr_assert_eq(sub.type, CN_GGUF_STRING);
    cr_assert_eq(sub.n, 2);
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&sub, 1), "yz"));
    cr_assert(cn_gguf_arr_sub(&a, 1, &sub));
    cr_assert_eq(sub.n, 0);
    cr_assert(cn_gguf_arr_sub(&a, 2, &sub));
    cr_assert_eq(sub.type, CN_GGUF_ARRAY);
    cr_assert(cn_gguf_arr_sub(&sub, 0, &sub2));
    cr_assert_eq(sub2.type, CN_GGUF_INT32);
    cr_assert_eq(cn_gguf_arr_i64(&sub2, 1), 2);
    cr_assert_not(cn_gguf_arr_sub(&a, 3, &sub));

    cr_assert_eq(cn_gguf_n_tensors(g), 2);
    int64_t ti = cn_gguf_find_tensor(g, "w");
    cr_assert_eq(ti, 0);
    const cn_gguf_tensor_info *t = cn_gguf_tensor(g, ti);
    cr_assert_eq(t->n_dims, 2);
    cr_assert_eq(t->ne[0], 3);
    cr_assert_eq(t->ne[1], 2);
    cr_assert_eq(t->ne[2], 1);
    cr_assert_eq(t->type, CN_TYPE_F32);
    cr_assert_eq(t->n_bytes, 24);
    cr_assert_eq(t->offset, 0);
    float v;
    memcpy(&v, (const uint8_t *)t->data + 5 * 4, 4);
    cr_assert_eq(v, 6.f);
    t = cn_gguf_tensor(g, cn_gguf_find_tensor(g, "q"));
    cr_assert_eq(t->offset, 32, "second tensor starts at the padded end of the first");
    cr_assert_eq(t->n_bytes, 68);
    cr_assert_eq(((const uint8_t *)t->data)[67], (uint8_t)(67 * 7));
    cr_assert_eq(cn_gguf_find_tensor(g, "nope"), -1);
    cr_assert_null(cn_gguf_tensor(g, 2));
}

Test(gguf, roundtrip_mem) {
    cn_gguf_writer *w = sample_writer();
    uint8_t *buf;
    size_t n;
    cn_error err;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &buf, &n, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf *g;
    cr_assert_eq(cn_gguf_parse(buf, n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    check_sample(g);
    /* layout: data section, then 24 bytes of w padded to 32, then 68 of q padded to 96 */
    cr_assert_eq(n, cn_gguf_data_offset(g) + 32 + 96);
    cr_assert_eq(cn_gguf_file_size(g), n);
    for (size_t i = cn_gguf_data_offset(g) + 24; i < cn_gguf_data_offset(g) + 32; i++)
        cr_assert_eq(buf[i], 0, "padding must be zeros");
    cn_gguf_close(g);
    free(buf);
    cn_gguf_writer_free(w);
}

Test(gguf, roundtrip_file) {
    cn_gguf_writer *w = sample_writer();
    char path[] = "/tmp/cinder_gguf_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cn_error err;
    cr_assert_eq(cn_gguf_writer_write_file(w, path, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf *g;
    cn_status s = cn_gguf_open(path, &g, &err);
    remove(path);
    cr_assert_eq(s, CN_STATUS_OK, "%s", err.msg);
    check_sample(g);
    cn_gguf_close(g);
    cn_gguf_writer_free(w);
}

/* The folder's entries other than . and .., as one string ("a b "), for "nothing else
 * was left behind". */
static void folder_listing(const char *dir, char *out, size_t n) {
    DIR *d = opendir(dir);
    cr_assert(d);
    out[0] = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(out + strlen(out), n - strlen(out), "%s ", e->d_name);
    closedir(d);
}

/* write_file goes through a temporary file: a write that fails after it began (here a
 * tensor without data) leaves an existing file byte for byte and no temporary file; one
 * that succeeds replaces it with the mode any file the user writes gets (0666 less the
 * umask, not a temporary file's 0600). */
Test(gguf, write_file_replaces_only_on_success) {
    char dir[] = "/tmp/cinder_gguf_dir_XXXXXX", path[64], listing[256];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f && fputs("keep me", f) >= 0 && fclose(f) == 0);
    cn_gguf_writer *w = sample_writer();
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "no_data", CN_TYPE_F32, 1, (int64_t[]){4}, NULL, 16, NULL), CN_STATUS_OK);
    cn_error err;
    cr_assert_eq(cn_gguf_writer_write_file(w, path, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "no_data"), "%s", err.msg);
    char got[16] = {0};
    f = fopen(path, "rb");
    cr_assert(f && fread(got, 1, sizeof got, f) == 7 && fclose(f) == 0);
    cr_assert_str_eq(got, "keep me");
    folder_listing(dir, listing, sizeof listing);
    cr_assert_str_eq(listing, "out.gguf ");
    cn_gguf_writer_free(w);

    w = sample_writer();
    const mode_t old = umask(027);
    const cn_status st = cn_gguf_writer_write_file(w, path, &err);
    umask(old);
    cr_assert_eq(st, CN_STATUS_OK, "%s", err.msg);
    struct stat sb;
    cr_assert(stat(path, &sb) == 0 && sb.st_size > 7);
    cr_assert_eq(sb.st_mode & 0777, 0640, "mode %o", (unsigned)(sb.st_mode & 0777));
    folder_listing(dir, listing, sizeof listing);
    cr_assert_str_eq(listing, "out.gguf ");
    cn_gguf_writer_free(w);
    remove(path);
    rmdir(dir);
}

Test(gguf, version2_and_alignment) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_version(w, 2);
    cn_gguf_writer_set_u32(w, "general.alignment", 64);
    cn_gguf_writer_set_str(w, "k", "v");
    cn_gguf_writer_set_str(w, "k", "replaced");
    float x[3] = {1, 2, 3};
    int64_t ne[1] = {3};
    cn_error err;
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "a", CN_TYPE_F32, 1, ne, x, 12, &err), 0);
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "b", CN_TYPE_F32, 1, ne, x, 12, &err), 0);
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "b", CN_TYPE_F32, 1, ne, x, 12, &err), CN_STATUS_INVALID_ARG,
                 "duplicate tensor names are refused");
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "c", CN_TYPE_F32, 1, ne, x, 8, &err), CN_STATUS_INVALID_ARG,
                 "wrong byte count is refused");
    int64_t neq[1] = {33};
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "c", CN_TYPE_Q8_0, 1, neq, x, 12, &err), CN_STATUS_INVALID_ARG,
                 "a partial block is refused");
    uint8_t *buf;
    size_t n;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &buf, &n, &err), CN_STATUS_OK);
    cn_gguf *g;
    cr_assert_eq(cn_gguf_parse(buf, n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_gguf_version(g), 2);
    cr_assert_eq(cn_gguf_alignment(g), 64);
    cr_assert_eq(cn_gguf_data_offset(g) % 64, 0);
    cr_assert_eq(cn_gguf_n_kv(g), 2, "setting a key twice replaces it");
    cn_gguf_str s;
    cr_assert(cn_gguf_get_str(g, "k", &s));
    cr_assert(cn_gguf_str_eq(s, "replaced"));
    cr_assert_eq(cn_gguf_tensor(g, 1)->offset, 64);
    cn_gguf_close(g);
    free(buf);

    cn_gguf_writer_set_u32(w, "general.alignment", 48);
    cr_assert_eq(cn_gguf_writer_write_mem(w, &buf, &n, &err), CN_STATUS_INVALID_ARG);
    cr_assert_null(buf);
    cn_gguf_writer_free(w);
}

Test(gguf, empty_file_vocab_only) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    uint8_t *buf;
    size_t n;
    cn_error err;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &buf, &n, &err), CN_STATUS_OK);
    cr_assert_eq(n, 32, "24-byte header padded to 32, as gguf-py writes it");
    cn_gguf *g;
    cr_assert_eq(cn_gguf_parse(buf, n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_gguf_n_kv(g), 0);
    cr_assert_eq(cn_gguf_n_tensors(g), 0);
    cn_gguf_close(g);
    /* the unpadded 24-byte form (older writers) is accepted too when there are no tensors */
    cr_assert_eq(cn_gguf_parse(buf, 24, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf_close(g);
    free(buf);
    cn_gguf_writer_free(w);
}

Test(gguf, type_sizes) {
    uint32_t bs, ts;
    cr_assert(cn_gguf_type_size(CN_TYPE_Q4_K, &bs, &ts));
    cr_assert_eq(bs, 256);
    cr_assert_eq(ts, 144);
    cr_assert(cn_gguf_type_size(CN_TYPE_BF16, &bs, &ts));
    cr_assert_eq(ts, 2);
    cr_assert_not(cn_gguf_type_size(4, &bs, &ts), "type 4 was removed from ggml");
    cr_assert_not(cn_gguf_type_size(1000, &bs, &ts));
    int64_t ne[2] = {512, 3};
    uint64_t nb;
    cr_assert(cn_gguf_tensor_bytes(CN_TYPE_Q6_K, 2, ne, &nb));
    cr_assert_eq(nb, 2 * 210 * 3);
    int64_t big[4] = {INT64_MAX, INT64_MAX, 1, 1};
    cr_assert_not(cn_gguf_tensor_bytes(CN_TYPE_F32, 2, big, &nb), "overflow is refused");
}

/* --- real files --- */

static const char *testdata(void) {
    const char *e = getenv("CINDER_TESTDATA");
    return e && *e ? e : "../shared/testdata";
}

static int n_vocab_files;

static void check_vocab(const char *path) {
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_open(path, &g, &err), CN_STATUS_OK, "%s: %s", path, err.msg);
    cn_gguf_arr toks;
    cr_assert(cn_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks), "%s: no token list", path);
    cr_assert_eq(toks.type, CN_GGUF_STRING);
    cr_assert_gt(toks.n, 1000);
    /* the offset table: each string's bytes follow the previous one's and its 8-byte length */
    cn_gguf_str prev = cn_gguf_arr_str(&toks, 0);
    cr_assert_eq((const uint8_t *)prev.ptr, toks.data + 8);
    for (uint64_t j = 1; j < toks.n; j++) {
        cn_gguf_str s = cn_gguf_arr_str(&toks, j);
        cr_assert_eq(s.ptr, prev.ptr + prev.len + 8, "%s: token %llu", path, (unsigned long long)j);
        prev = s;
    }
    cn_gguf_str model;
    cr_assert(cn_gguf_get_str(g, "tokenizer.ggml.model", &model), "%s", path);
    cn_gguf_close(g);
    n_vocab_files++;
}

Test(gguf, real_vocab_files) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tokenizer", testdata());
    DIR *d = opendir(dir);
    cr_assert(d, "testdata not found at %s (set CINDER_TESTDATA)", dir);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        check_vocab(path);
    }
    closedir(d);
    cr_assert_geq(n_vocab_files, 8, "expected the 8 shared vocab files, found %d", n_vocab_files);
}

Test(gguf, real_model_stories260k) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", testdata());
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_open(path, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf_str arch;
    cr_assert(cn_gguf_get_str(g, "general.architecture", &arch));
    cr_assert(cn_gguf_str_eq(arch, "llama"));
    cr_assert_gt(cn_gguf_n_tensors(g), 0);
    uint64_t total = 0;
    for (int64_t i = 0; i < cn_gguf_n_tensors(g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        cr_assert_not_null(t->data, "tensor %lld has an unknown type %u", (long long)i, t->type);
        cr_assert_leq(cn_gguf_data_offset(g) + t->offset + t->n_bytes, cn_gguf_file_size(g));
        total += t->n_bytes;
    }
    cr_assert_leq(cn_gguf_data_offset(g) + total, cn_gguf_file_size(g));
    cr_assert_geq(cn_gguf_find_tensor(g, "token_embd.weight"), 0);
    cn_gguf_close(g);
}

Test(gguf, open_missing_file) {
    cn_gguf *g = (cn_gguf *)1;
    cn_error err;
    cr_assert_eq(cn_gguf_open("/nonexistent/x.gguf", &g, &err), CN_STATUS_IO);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, "/nonexistent/x.gguf"), "%s", err.msg);
}

/* 262k strings (a Gemma-sized vocabulary) and 50k keys: parse stays linear (a quadratic
 * offset walk or duplicate check would take minutes here) and lookups are exact. */
Test(gguf, large_vocab_and_many_keys, .timeout = 60) {
    enum { N_TOK = 262144, N_KEYS = 50000 };
    cn_gguf_writer *w = cn_gguf_writer_new();
    char **toks = malloc(N_TOK * sizeof *toks);
    cr_assert(w && toks);
    for (int i = 0; i < N_TOK; i++) {
        toks[i] = malloc(16);
        cr_assert(toks[i]);
        snprintf(toks[i], 16, "t%d", i);
    }
    cr_assert_eq(cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, N_TOK), 0);
    for (int i = 0; i < N_TOK; i++) free(toks[i]);
    free(toks);
    /* keys through the raw builder: the writer's replace-on-set is a linear scan */
    uint8_t *buf;
    size_t n;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &buf, &n, NULL), 0);
    cn_gguf_writer_free(w);
    size_t extra = (size_t)N_KEYS * (8 + 8 + 4 + 1);
    uint8_t *big = malloc(n + extra);
    cr_assert(big);
    memcpy(big, buf, n);
    free(buf);
    uint64_t n_kv = 1 + N_KEYS;
    memcpy(big + 16, &n_kv, 8);
    /* no tensors: the metadata ends where the writer padded; append keys after it */
    size_t pos = n;
    while (pos > 24 && big[pos - 1] == 0) pos--; /* strip the zero padding */
    for (int i = 0; i < N_KEYS; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%07d", i % 10000000);
        uint64_t len = 8;
        uint32_t t = CN_GGUF_UINT8;
        memcpy(big + pos, &len, 8);
        memcpy(big + pos + 8, k, 8);
        memcpy(big + pos + 16, &t, 4);
        big[pos + 20] = (uint8_t)i;
        pos += 21;
    }
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_parse(big, pos, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf_arr a;
    cr_assert(cn_gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    cr_assert_eq(a.n, N_TOK);
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&a, 123456), "t123456"));
    cr_assert(cn_gguf_str_eq(cn_gguf_arr_str(&a, N_TOK - 1), "t262143"));
    cr_assert_eq(cn_gguf_find_key(g, "k0049999"), N_KEYS);
    uint32_t v;
    cr_assert(cn_gguf_get_u32(g, "k0000300", &v));
    cr_assert_eq(v, 300 & 0xff);
    cn_gguf_close(g);
    /* the same keys twice: the duplicate is found */
    memcpy(big + pos - 21 + 8, "k0000007", 8);
    cr_assert_eq(cn_gguf_parse(big, pos, &g, &err), CN_STATUS_CORRUPT);
    cr_assert(strstr(err.msg, "kv 50000 ('k0000007'): duplicate key"), "%s", err.msg);
    free(big);
}
