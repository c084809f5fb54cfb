/* test_quantize.c — what `cinder quantize` stands on: the file quantizers
 * (cn_type_quantizer, src/tensor/quants_search.c) and the streaming GGUF writer
 * (cn_gguf_writer_write_header). Byte identity with ggml lives in
 * tests/py/test_quantize.py (golden rows and whole files from llama-quantize); here:
 * which types have a file quantizer, that the search quantizers are at least as close
 * as the bounded reference ones on Gaussian rows (they minimise a weighted error, so on
 * average they must not lose), that zeros stay zeros, that a file streamed through
 * write_header is the very file write_mem makes; the importance-weighted quantizers
 * lower the error measured with their weights, and the imatrix reader's legacy format
 * (duplicates, division by ncall, truncations, bad sizes); llama-perplexity's
 * log-probability file (cn_logits_file) round trip and misuse. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/imatrix.h"
#include "tensor/quants.h"
#include "tensor/tensor.h"

static double gauss(uint64_t *s) {
    double u[2];
    for (int k = 0; k < 2; k++) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        u[k] = ((double)(z >> 11) + 0.5) * 0x1p-53;
    }
    return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

Test(quantize, file_quantizer_per_type) {
    const uint32_t have[] = {CN_TYPE_F32,  CN_TYPE_F16,  CN_TYPE_BF16, CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0,
                             CN_TYPE_Q5_1, CN_TYPE_Q8_0, CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof have / sizeof have[0]; i++)
        cr_assert_not_null(cn_type_quantizer(have[i]), "type %u", have[i]);
    cr_assert_null(cn_type_quantizer(CN_TYPE_Q2_K));
    cr_assert_null(cn_type_quantizer(CN_TYPE_Q8_K));
    cr_assert_null(cn_type_quantizer(CN_TYPE_COUNT + 5));
    cr_assert_eq(cn_type_quantizer(CN_TYPE_Q8_0), cn_type_traits_get(CN_TYPE_Q8_0)->from_float_ref);
}

static double sq_err(uint32_t type, cn_from_float_fn q, const float *x, int64_t n) {
    const cn_type_traits *t = cn_type_traits_get(type);
    void *blk = malloc((size_t)cn_type_row_bytes(type, n));
    float *y = malloc((size_t)n * sizeof *y);
    q(x, blk, n);
    t->to_float(blk, y, n);
    double e = 0;
    for (int64_t i = 0; i < n; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    free(blk);
    free(y);
    return e;
}

Test(quantize, search_at_least_as_close_as_bounded_on_gaussians) {
    const uint32_t types[] = {CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};
    enum { N = 256 * 64 };
    float *x = malloc(N * sizeof *x);
    uint64_t s = 29;
    for (int i = 0; i < N; i++) x[i] = (float)(gauss(&s) * (i % 512 < 256 ? 0.02 : 1.5));
    for (size_t k = 0; k < 3; k++) {
        const double e_search = sq_err(types[k], cn_type_quantizer(types[k]), x, N);
        const double e_bound = sq_err(types[k], cn_type_traits_get(types[k])->from_float_ref, x, N);
        cr_log_info("%s: squared error search %.4g, bounded %.4g", cn_type_traits_get(types[k])->name, e_search,
                    e_bound);
        cr_assert(e_search <= e_bound, "%s: search %.4g > bounded %.4g", cn_type_traits_get(types[k])->name, e_search,
                  e_bound);
    }
    free(x);
}

Test(quantize, zeros_stay_zeros) {
    const uint32_t types[] = {CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0, CN_TYPE_Q5_1,
                              CN_TYPE_Q8_0, CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};
    float x[512] = {0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        cr_assert_eq(sq_err(types[k], cn_type_quantizer(types[k]), x, 512), 0.0, "type %u", types[k]);
}

Test(quantize, streamed_file_equals_write_mem) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_error err = {0};
    cr_assert_eq(cn_gguf_writer_set_str(w, "general.architecture", "llama"), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_u32(w, "general.alignment", 64), CN_STATUS_OK);
    float a[96], b[32];
    for (int i = 0; i < 96; i++) a[i] = (float)i;
    for (int i = 0; i < 32; i++) b[i] = -(float)i;
    const int64_t ne_a[2] = {32, 3}, ne_b[1] = {32};
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "a", CN_TYPE_F32, 2, ne_a, a, sizeof a, &err), CN_STATUS_OK, "%s",
                 err.msg);
    cr_assert_eq(cn_gguf_writer_add_tensor(w, "b", CN_TYPE_F32, 1, ne_b, b, sizeof b, &err), CN_STATUS_OK);
    uint8_t *mem;
    size_t n_mem;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &mem, &n_mem, &err), CN_STATUS_OK);

    cn_gguf_writer *h = cn_gguf_writer_new();
    cr_assert_eq(cn_gguf_writer_set_str(h, "general.architecture", "llama"), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_set_u32(h, "general.alignment", 64), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_add_tensor(h, "a", CN_TYPE_F32, 2, ne_a, NULL, sizeof a, &err), CN_STATUS_OK);
    cr_assert_eq(cn_gguf_writer_add_tensor(h, "b", CN_TYPE_F32, 1, ne_b, NULL, sizeof b, &err), CN_STATUS_OK);
    uint8_t *tmp_mem;
    size_t tmp_n;
    cr_assert_eq(cn_gguf_writer_write_mem(h, &tmp_mem, &tmp_n, &err), CN_STATUS_INVALID_ARG, "no data: refused");
    char *buf = NULL;
    size_t n_buf = 0;
    FILE *f = open_memstream(&buf, &n_buf);
    uint32_t align = 0;
    cr_assert_eq(cn_gguf_writer_write_header(h, f, &align, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(align, 64);
    static const uint8_t zeros[64];
    fwrite(a, 1, sizeof a, f);
    fwrite(zeros, 1, (64 - sizeof a % 64) % 64, f);
    fwrite(b, 1, sizeof b, f);
    fwrite(zeros, 1, (64 - sizeof b % 64) % 64, f);
    fclose(f);
    cr_assert_eq(n_buf, n_mem);
    cr_assert(memcmp(buf, mem, n_mem) == 0);
    free(buf);
    free(mem);
    cn_gguf_writer_free(w);
    cn_gguf_writer_free(h);
}

/* ---- importance weights (quantize --imatrix) ---- */

Test(quantize, weighted_quantizer_per_type) {
    const uint32_t have[] = {CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0, CN_TYPE_Q5_1,
                             CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof have / sizeof have[0]; i++)
        cr_assert_not_null(cn_type_quantizer_weighted(have[i]), "type %u", have[i]);
    /* ggml ignores the weights for these: the plain quantizer is used */
    cr_assert_null(cn_type_quantizer_weighted(CN_TYPE_Q8_0));
    cr_assert_null(cn_type_quantizer_weighted(CN_TYPE_F16));
    cr_assert_null(cn_type_quantizer_weighted(CN_TYPE_Q2_K));
}

/* Weights that favour a few columns: the weighted quantizer's error, measured with those
 * weights, must on the whole be below the unweighted one's (what it is for). */
Test(quantize, weighted_quantizers_spend_precision_where_the_weights_are) {
    const uint32_t types[] = {CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0, CN_TYPE_Q5_1,
                              CN_TYPE_Q4_K, CN_TYPE_Q5_K, CN_TYPE_Q6_K};
    enum { N = 512, ROWS = 24 };
    static float x[N], qw[N], y[N];
    static uint8_t buf[N * 2];
    uint64_t s = 29;
    for (int j = 0; j < N; j++) qw[j] = j % 16 == 3 ? 50.0f : 0.2f + (float)(j % 7) * 0.1f;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const cn_type_traits *tr = cn_type_traits_get(types[t]);
        double e_w = 0, e_u = 0;
        for (int r = 0; r < ROWS; r++) {
            for (int j = 0; j < N; j++) x[j] = (float)gauss(&s);
            cn_type_quantizer_weighted(types[t])(x, buf, N, qw);
            tr->to_float(buf, y, N);
            for (int j = 0; j < N; j++) e_w += qw[j] * (double)(x[j] - y[j]) * (x[j] - y[j]);
            cn_type_quantizer(types[t])(x, buf, N);
            tr->to_float(buf, y, N);
            for (int j = 0; j < N; j++) e_u += qw[j] * (double)(x[j] - y[j]) * (x[j] - y[j]);
        }
        cr_assert_lt(e_w, e_u, "%s: weighted error %g, unweighted %g", cn_type_name((cn_type)types[t]), e_w, e_u);
    }
}

static size_t put_i32(uint8_t *p, int32_t v) {
    memcpy(p, &v, 4);
    return 4;
}

static size_t put_entry(uint8_t *p, const char *name, int32_t ncall, int32_t nval, float v0) {
    size_t k = put_i32(p, (int32_t)strlen(name));
    memcpy(p + k, name, strlen(name));
    k += strlen(name);
    k += put_i32(p + k, ncall);
    k += put_i32(p + k, nval);
    for (int32_t j = 0; j < nval; j++) {
        float v = v0 + (float)j;
        memcpy(p + k, &v, 4);
        k += 4;
    }
    return k;
}

Test(quantize, imatrix_legacy_reads_as_llama_quantize_does) {
    uint8_t b[512];
    size_t n = put_i32(b, 4);
    n += put_entry(b + n, "b.weight", 4, 3, 8.0f);  /* stored mean * ncall: / 4 */
    n += put_entry(b + n, "a.weight", 0, 2, 5.0f);  /* ncall 0: as stored */
    n += put_entry(b + n, "b.weight", 2, 2, 10.0f); /* a name again: the last one wins */
    n += put_entry(b + n, "c.weight", 1, 1, 1.0f);
    n += put_i32(b + n, 7);
    n += put_i32(b + n, 4);
    memcpy(b + n, "wiki", 4);
    n += 4;
    cn_imatrix *m = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_imatrix_parse(b, n, &m, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(m->n_entries, 3);
    cr_assert(m->legacy);
    cr_assert_eq(m->chunk_count, 7);
    cr_assert_str_eq(m->dataset, "wiki");
    const cn_imatrix_entry *e = cn_imatrix_find(m, "b.weight");
    cr_assert(e && e->n == 2 && e->w[0] == 5.0f && e->w[1] == 5.5f);
    e = cn_imatrix_find(m, "a.weight");
    cr_assert(e && e->n == 2 && e->w[0] == 5.0f && e->w[1] == 6.0f);
    cr_assert_null(cn_imatrix_find(m, "d.weight"));
    cn_imatrix_free(m);

    /* every truncation is refused with a message, or (cut in the optional trailer) read */
    for (size_t k = 0; k < n; k++) {
        err.msg[0] = 0;
        m = NULL;
        cn_status st = cn_imatrix_parse(b, k, &m, &err);
        if (st) {
            cr_assert_null(m);
            cr_assert(err.msg[0], "cut at %zu", k);
        } else {
            cr_assert_eq(m->n_entries, 3, "cut at %zu", k);
            cn_imatrix_free(m);
        }
    }
}

Test(quantize, imatrix_bad_legacy_sizes) {
    uint8_t b[64];
    cn_imatrix *m = NULL;
    cn_error err = {0};
    size_t n = put_i32(b, 1);
    n += put_i32(b + n, -5); /* a negative name length */
    cr_assert_eq(cn_imatrix_parse(b, n, &m, &err), CN_STATUS_CORRUPT);
    n = put_i32(b, 1);
    n += put_entry(b + n, "w", 1, 0, 0.0f); /* no values */
    cr_assert_eq(cn_imatrix_parse(b, n, &m, &err), CN_STATUS_CORRUPT);
    n = put_i32(b, 0); /* no entries */
    cr_assert_eq(cn_imatrix_parse(b, n, &m, &err), CN_STATUS_CORRUPT);
    cr_assert(strstr(err.msg, "not an imatrix file"), "%s", err.msg);
    n = put_i32(b, 1);
    n += put_entry(b + n, "w", 1, 1, INFINITY);
    cr_assert_eq(cn_imatrix_parse(b, n, &m, &err), CN_STATUS_CORRUPT);
    cr_assert(strstr(err.msg, "non-finite"), "%s", err.msg);
    cr_assert_null(m);
}

/* ---- collecting (cinder imatrix): sums of squares per column, read back as llama-quantize
 * reads them (sum / count) ---- */

Test(quantize, imatrix_stats_round_trip_through_the_reader) {
    cn_imatrix_stats *s = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_imatrix_stats_create(&s, &err), CN_STATUS_OK);
    const float a1[2 * 3] = {1, 2, 3, -1, 0, 0.5f}, a2[3] = {2, 2, 2}, b1[4] = {3, -4, 0, 1};
    cr_assert_eq(cn_imatrix_stats_add(s, "blk.1.w", a1, 2, 3, &err), CN_STATUS_OK);
    cr_assert_eq(cn_imatrix_stats_add(s, "blk.0.w", b1, 1, 4, &err), CN_STATUS_OK);
    cr_assert_eq(cn_imatrix_stats_add(s, "blk.1.w", a2, 1, 3, &err), CN_STATUS_OK);
    cr_assert_eq(cn_imatrix_stats_n_weights(s), 2);
    /* another width for a known weight, and a value that is not finite, are refused */
    cr_assert_eq(cn_imatrix_stats_add(s, "blk.0.w", a2, 1, 3, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "blk.0.w"), "%s", err.msg);
    const float inf[4] = {1, INFINITY, 0, 0};
    cr_assert_eq(cn_imatrix_stats_add(s, "blk.2.w", inf, 1, 4, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "not finite"), "%s", err.msg);

    char path[] = "/tmp/cinder_imatrix_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(cn_imatrix_stats_save(s, path, "text.txt", 3, 64, &err), CN_STATUS_OK, "%s", err.msg);
    cn_imatrix *m = NULL;
    cr_assert_eq(cn_imatrix_load(path, &m, &err), CN_STATUS_OK, "%s", err.msg);
    unlink(path);
    cr_assert_eq(m->n_entries, 2); /* the refused adds left nothing behind */
    cr_assert_str_eq(m->dataset, "text.txt");
    cr_assert_eq(m->chunk_count, 3);
    const cn_imatrix_entry *e = cn_imatrix_find(m, "blk.1.w");
    const float want1[3] = {(1 + 1 + 4) / 3.0f, (4 + 0 + 4) / 3.0f, (9 + 0.25f + 4) / 3.0f};
    cr_assert_eq(e->n, 3);
    for (int j = 0; j < 3; j++) cr_assert_float_eq(e->w[j], want1[j], 1e-6f, "column %d", j);
    e = cn_imatrix_find(m, "blk.0.w");
    const float want0[4] = {9, 16, 0, 1};
    for (int j = 0; j < 4; j++) cr_assert_float_eq(e->w[j], want0[j], 1e-6f, "column %d", j);
    cn_imatrix_free(m);
    cn_imatrix_stats_free(s);
}

Test(quantize, imatrix_stats_save_refuses_empty_and_leaves_nothing) {
    cn_imatrix_stats *s = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_imatrix_stats_create(&s, &err), CN_STATUS_OK);
    cr_assert_eq(cn_imatrix_stats_save(s, "/tmp/cinder_imatrix_empty.gguf", "t", 1, 8, &err), CN_STATUS_INVALID_ARG);
    cr_assert(access("/tmp/cinder_imatrix_empty.gguf", F_OK) != 0);
    const float x[2] = {1, 2};
    cr_assert_eq(cn_imatrix_stats_add(s, "w", x, 1, 2, &err), CN_STATUS_OK);
    cr_assert_eq(cn_imatrix_stats_save(s, "/nonexistent-dir/im.gguf", "t", 1, 8, &err), CN_STATUS_IO);
    cr_assert(strstr(err.msg, "/nonexistent-dir/im.gguf"), "%s", err.msg);
    cn_imatrix_stats_free(s);
}

/* ---- llama-perplexity's log-probability file (cn_logits_file): a file compared with the
 * logits it was written from shows no divergence; chunks past the header's count, a commit
 * before the last chunk and a truncated file are refused ---- */

Test(quantize, logits_file_round_trip_and_misuse) {
    enum { N_CTX = 8, N_VOCAB = 5, N_CHUNK = 2, N_ROWS = N_CTX - 1 - N_CTX / 2 };
    int32_t tokens[N_CHUNK * N_CTX];
    float logits[N_CHUNK][N_ROWS * N_VOCAB];
    uint64_t seed = 7;
    for (int i = 0; i < N_CHUNK * N_CTX; i++) tokens[i] = (int32_t)((uint64_t)(gauss(&seed) * 1e6) % N_VOCAB);
    for (int c = 0; c < N_CHUNK; c++)
        for (int i = 0; i < N_ROWS * N_VOCAB; i++) logits[c][i] = (float)gauss(&seed);
    char dir[] = "/tmp/cinder_logits_XXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/base.kl", dir);
    cn_error err = {0};
    cn_logits_file *f = NULL;
    cn_logits_stats s;

    cr_assert_eq(cn_logits_file_create(path, N_CTX, N_VOCAB, N_CHUNK, tokens, &f, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_logits_file_add_chunk(f, logits[0], &s, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_logits_file_commit(f, &err), CN_STATUS_INVALID_ARG); /* one chunk of two */
    cn_logits_file_free(f);
    cr_assert(access(path, F_OK) != 0, "a file left behind");

    cr_assert_eq(cn_logits_file_create(path, N_CTX, N_VOCAB, N_CHUNK, tokens, &f, &err), CN_STATUS_OK, "%s", err.msg);
    for (int c = 0; c < N_CHUNK; c++)
        cr_assert_eq(cn_logits_file_add_chunk(f, logits[c], &s, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_logits_file_add_chunk(f, logits[0], NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(s.n_scored, N_CHUNK * N_ROWS);
    cr_assert(s.ppl > 1 && s.ppl < 100, "ppl %g", s.ppl);
    cr_assert_eq(cn_logits_file_commit(f, &err), CN_STATUS_OK, "%s", err.msg);
    cn_logits_file_free(f);

    cr_assert_eq(cn_logits_file_open(path, &f, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t n_ctx, n_vocab, n_chunk;
    const int32_t *t = cn_logits_file_tokens(f, &n_ctx, &n_vocab, &n_chunk);
    cr_assert(n_ctx == N_CTX && n_vocab == N_VOCAB && n_chunk == N_CHUNK);
    cr_assert_arr_eq(t, tokens, sizeof tokens);
    const double ppl_written = s.ppl;
    for (int c = 0; c < N_CHUNK; c++)
        cr_assert_eq(cn_logits_file_add_chunk(f, logits[c], &s, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_float_eq(s.ppl, ppl_written, 1e-5 * ppl_written);
    cr_assert(fabs(s.mean_kld) < 1e-6, "mean KLD %g", s.mean_kld); /* the stored rows are rounded */
    cr_assert_float_eq(s.same_top_pct, 100.0, 1e-9);
    cr_assert_eq(cn_logits_file_add_chunk(f, logits[0], NULL, &err), CN_STATUS_INVALID_ARG);
    char *report = NULL;
    cr_assert_eq(cn_logits_file_report(f, &report, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(strstr(report, "Mean    KLD:") && strstr(report, "Same top p: 100.000"), "%s", report);
    free(report);
    cn_logits_file_free(f);

    /* the last row cut off: the header reads, the second chunk does not */
    FILE *in = fopen(path, "rb");
    char buf[4096];
    const size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    FILE *o = fopen(path, "wb");
    cr_assert(o && fwrite(buf, 1, n - 2, o) == n - 2 && fclose(o) == 0);
    cr_assert_eq(cn_logits_file_open(path, &f, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_logits_file_add_chunk(f, logits[0], NULL, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_logits_file_add_chunk(f, logits[1], NULL, &err), CN_STATUS_CORRUPT);
    cr_assert(strstr(err.msg, "truncated at chunk 2"), "%s", err.msg);
    cn_logits_file_free(f);
    cr_assert_eq(cn_logits_file_open("/nonexistent-dir/base.kl", &f, &err), CN_STATUS_IO);
    cr_assert_null(f);
    remove(path);
    rmdir(dir);
}
