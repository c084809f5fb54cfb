/* test_quantize.c — what `cinder quantize` stands on: the file quantizers
 * (cn_type_quantizer, src/tensor/quants_search.c) and the streaming GGUF writer
 * (cn_gguf_writer_write_header). Byte identity with ggml lives in
 * tests/py/test_quantize.py (golden rows and whole files from llama-quantize); here:
 * which types have a file quantizer, that the search quantizers are at least as close
 * as the bounded reference ones on Gaussian rows (they minimise a weighted error, so on
 * average they must not lose), that zeros stay zeros, and that a file streamed through
 * write_header is the very file write_mem makes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gguf/gguf.h"
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
    const uint32_t have[] = {CN_TYPE_F32, CN_TYPE_F16, CN_TYPE_BF16, CN_TYPE_Q4_0, CN_TYPE_Q4_1, CN_TYPE_Q5_0,
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
        cr_assert(e_search <= e_bound, "%s: search %.4g > bounded %.4g", cn_type_traits_get(types[k])->name,
                  e_search, e_bound);
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
