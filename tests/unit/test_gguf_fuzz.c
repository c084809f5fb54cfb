/* test_gguf_fuzz.c — replays the GGUF fuzz harness (tests/fuzz/fuzz_gguf.c) under the
 * unit tests, so `make test` runs it under ASan+UBSan: the seed corpus, every truncation
 * of each seed, and thousands of deterministic random mutations. Each input is copied to a
 * buffer of exactly its length so that a read one byte past the end is caught. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_gguf.c"

#define MAX_SEEDS 8

typedef struct {
    uint8_t *buf[MAX_SEEDS];
    size_t len[MAX_SEEDS];
    size_t n;
} seeds;

static seeds get_seeds(void) {
    seeds s = {0};
    s.n = fuzz_gguf_seeds(s.buf, s.len, MAX_SEEDS);
    cr_assert_eq(s.n, 4, "the seed generator must make 4 files");
    return s;
}

static void free_seeds(seeds *s) {
    for (size_t i = 0; i < s->n; i++) free(s->buf[i]);
}

/* Parses an exact-size copy through the harness. */
static int run_copy(const uint8_t *src, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    cr_assert(p);
    if (n) memcpy(p, src, n);
    int r = fuzz_gguf_one(p, n);
    free(p);
    return r;
}

Test(gguf_fuzz, seeds_parse) {
    seeds s = get_seeds();
    for (size_t i = 0; i < s.n; i++) cr_assert_eq(run_copy(s.buf[i], s.len[i]), 0, "seed %zu", i);
    free_seeds(&s);
}

/* The shortest prefix that holds the whole file: the end of the last tensor's data, or
 * for a file without tensors the end of its key/values (the padding may be missing). */
static size_t needed_bytes(const uint8_t *buf, size_t n) {
    cn_gguf *g;
    cn_error err;
    cr_assert_eq(cn_gguf_parse(buf, n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    size_t need = 0;
    for (int64_t i = 0; i < cn_gguf_n_tensors(g); i++) {
        const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
        need = CN_MAX(need, cn_gguf_data_offset(g) + t->offset + t->n_bytes);
    }
    int64_t n_t = cn_gguf_n_tensors(g);
    cn_gguf_close(g);
    if (n_t == 0) {
        /* find it: the first prefix that parses */
        need = n;
        for (size_t k = 0; k < n; k++) {
            if (cn_gguf_parse(buf, k, &g, NULL) == CN_STATUS_OK) {
                cn_gguf_close(g);
                need = k;
                break;
            }
        }
    }
    return need;
}

Test(gguf_fuzz, every_truncation) {
    seeds s = get_seeds();
    for (size_t i = 0; i < s.n; i++) {
        size_t need = needed_bytes(s.buf[i], s.len[i]);
        if (i < 3) cr_assert_gt(need, s.len[i] - 32, "seed %zu: tensor data ends near the end", i);
        else cr_assert_eq(need, 24, "an empty file is a 24-byte header");
        for (size_t k = 0; k <= s.len[i]; k++) {
            int r = run_copy(s.buf[i], k);
            if (k < need) cr_assert_eq(r, -1, "seed %zu: prefix %zu of %zu must fail", i, k, s.len[i]);
            else cr_assert_eq(r, 0, "seed %zu: prefix %zu of %zu must parse", i, k, s.len[i]);
        }
    }
    free_seeds(&s);
}

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Mutations a fuzzer would find first: flipped bits, bytes set to 0/0xff, and 4- or 8-byte
 * counts overwritten with huge or small values. */
static void mutate(uint8_t *p, size_t n, uint64_t *rng) {
    int k = 1 + (int)(rng_next(rng) % 4);
    for (int m = 0; m < k; m++) {
        size_t at = (size_t)(rng_next(rng) % n);
        switch (rng_next(rng) % 5) {
        case 0: p[at] ^= (uint8_t)(1u << (rng_next(rng) % 8)); break;
        case 1: p[at] = (uint8_t)rng_next(rng); break;
        case 2: p[at] = rng_next(rng) & 1 ? 0xff : 0; break;
        case 3: {
            static const uint64_t vals[] = {
                0,  1,   2,          3,          7,          9,          13,         31,
                33, 255, 1ull << 31, 1ull << 32, 1ull << 60, 1ull << 62, UINT64_MAX, (uint64_t)INT64_MAX + 1};
            uint64_t v = vals[rng_next(rng) % CN_ARRAY_LEN(vals)];
            size_t w = rng_next(rng) & 1 ? 8 : 4;
            if (at + w <= n) memcpy(p + at, &v, w);
            break;
        }
        default: /* add or subtract a little from a 4-byte aligned word */
            if ((at & ~(size_t)3) + 4 <= n) {
                uint32_t v;
                memcpy(&v, p + (at & ~(size_t)3), 4);
                v += (uint32_t)(rng_next(rng) % 17) - 8;
                memcpy(p + (at & ~(size_t)3), &v, 4);
            }
        }
    }
}

Test(gguf_fuzz, random_mutations, .timeout = 120) {
    seeds s = get_seeds();
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_ok = 0, n_fail = 0;
    for (size_t i = 0; i < s.n; i++) {
        uint8_t *p = malloc(s.len[i]);
        cr_assert(p);
        for (int it = 0; it < 2500; it++) {
            memcpy(p, s.buf[i], s.len[i]);
            mutate(p, s.len[i], &rng);
            /* sometimes also cut it short */
            size_t n = s.len[i];
            if (rng_next(&rng) % 8 == 0) n = (size_t)(rng_next(&rng) % (n + 1));
            if (run_copy(p, n) == 0) n_ok++;
            else n_fail++;
        }
        free(p);
    }
    free_seeds(&s);
    /* both outcomes happen: the mutations reach past the header and into the checks */
    cr_log_info("mutations: %d parsed, %d rejected", n_ok, n_fail);
    cr_assert_gt(n_ok, 500, "only %d mutated files parsed", n_ok);
    cr_assert_gt(n_fail, 500, "only %d mutated files failed", n_fail);
}
