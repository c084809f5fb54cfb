/* test_tokenizer_bad.c — bad metadata gets a clear status (missing or mistyped arrays,
 * mismatched lengths, merges naming unknown tokens, unknown models), bad text never
 * breaks tokenization (invalid UTF-8 and random bytes on every vocabulary, checked
 * against the replacement rule), and size does not make anything quadratic (a
 * 262144-token vocabulary loads and long texts tokenize within generous bounds). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "test_tokenizer_util.h"
#include "text/tokenizer_impl.h"

static const char *const spm_tokens[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"};
static const float spm_scores[] = {0, 0, 0, -1, -2, -3};
static const int32_t spm_types[] = {2, 3, 3, 1, 1, 1};

static cn_gguf_writer *spm_writer(void) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    cr_assert(w);
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, 6);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, spm_scores, 6);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, spm_types, 6);
    return w;
}

static void expect_load(cn_gguf_writer *w, cn_status want, const char *in_msg) {
    cn_tokenizer *t = NULL;
    cn_error e = {0};
    cn_status st = tt_load_written(w, &t, &e);
    cn_gguf_writer_free(w);
    cr_assert_eq(st, want, "status %s (%s), want %s", cn_status_str(st), e.msg, cn_status_str(want));
    if (want != CN_STATUS_OK) {
        cr_assert_null(t);
        cr_assert(strstr(e.msg, in_msg), "message '%s' does not mention '%s'", e.msg, in_msg);
    } else {
        cr_assert_not_null(t);
    }
    cn_tokenizer_free(t);
}

Test(tokenizer_bad, metadata) {
    expect_load(spm_writer(), CN_STATUS_OK, "");

    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_load(w, CN_STATUS_NOT_FOUND, "tokenizer.ggml.tokens");

    w = spm_writer();
    int32_t ints[6] = {0};
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", CN_GGUF_INT32, ints, 6);
    expect_load(w, CN_STATUS_CORRUPT, "tokenizer.ggml.tokens");

    w = spm_writer();
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", spm_tokens, 0);
    expect_load(w, CN_STATUS_CORRUPT, "empty");

    w = spm_writer();
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, spm_scores, 5);
    expect_load(w, CN_STATUS_CORRUPT, "tokenizer.ggml.scores");

    w = spm_writer();
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.scores", spm_tokens, 6);
    expect_load(w, CN_STATUS_CORRUPT, "tokenizer.ggml.scores");

    w = spm_writer();
    int32_t seven_types[7] = {1, 1, 1, 1, 1, 1, 1};
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, seven_types, 7);
    expect_load(w, CN_STATUS_CORRUPT, "tokenizer.ggml.token_type");

    w = spm_writer();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    expect_load(w, CN_STATUS_UNSUPPORTED, "bert");

    w = spm_writer();
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.model", 3);
    expect_load(w, CN_STATUS_CORRUPT, "tokenizer.ggml.model");

    /* an out-of-range special id is ignored (with a warning), as llama.cpp does */
    w = spm_writer();
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 999);
    cn_tokenizer *t;
    cn_error e;
    cr_assert_eq(tt_load_written(w, &t, &e), CN_STATUS_OK);
    cn_gguf_writer_free(w);
    cr_assert_eq(cn_tokenizer_bos(t), 1);
    cn_tokenizer_free(t);
}

static cn_gguf_writer *bpe_writer(const char *const *merges, size_t n_merges) {
    static const char *const tokens[] = {"a", "b", "c", "ab", "abc"};
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    cn_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 5);
    if (merges) cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, n_merges);
    return w;
}

Test(tokenizer_bad, merges) {
    const char *good[] = {"a b", "ab c"};
    cn_gguf_writer *w = bpe_writer(good, 2);
    cn_tokenizer *t;
    cn_error e;
    cr_assert_eq(tt_load_written(w, &t, &e), CN_STATUS_OK, "%s", e.msg);
    cn_gguf_writer_free(w);
    size_t n;
    int32_t *ids = tt_tokenize(t, "abcab", 5, false, false, &n);
    cr_assert(n == 2 && ids[0] == 4 && ids[1] == 3);
    free(ids);
    cn_tokenizer_free(t);

    expect_load(bpe_writer(NULL, 0), CN_STATUS_NOT_FOUND, "tokenizer.ggml.merges");
    const char *unknown[] = {"a b", "a x"};
    expect_load(bpe_writer(unknown, 2), CN_STATUS_CORRUPT, "'a x'");
    const char *no_space[] = {"ab"};
    expect_load(bpe_writer(no_space, 1), CN_STATUS_CORRUPT, "'ab'");
    const char *no_result[] = {"b c"};
    expect_load(bpe_writer(no_result, 1), CN_STATUS_CORRUPT, "'b c'");
}

/* Deterministic pseudo-random bytes, biased towards bytes >= 0x80 and ASCII specials. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Random bytes: any status but OK is a failure; the text comes back with each invalid
 * UTF-8 sequence replaced by one U+FFFD (both tokenizer kinds keep every valid byte). */
Test(tokenizer_bad, random_bytes_all_vocabs) {
    static const char *const vocabs[] = {"gpt-2", "llama-spm", "phi-3", "starcoder", "mpt", "refact", "deepseek-llm"};
    static const char alphabet[] = " \n\t<>|/sa'1";
    for (size_t v = 0; v < CN_ARRAY_LEN(vocabs); v++) {
        cn_tokenizer *t = tt_load_vocab(vocabs[v]);
        for (int iter = 0; iter < 300; iter++) {
            char text[64];
            size_t len = rnd() % sizeof text;
            for (size_t i = 0; i < len; i++) {
                uint32_t r = rnd();
                text[i] = (r & 3) == 0 ? alphabet[(r >> 2) % (sizeof alphabet - 1)] : (char)(r >> 8);
            }
            size_t n;
            int32_t *ids = tt_tokenize(t, text, len, true, true, &n);
            free(ids);
            ids = tt_tokenize(t, text, len, false, false, &n);
            for (size_t i = 0; i < n; i++) cr_assert(ids[i] >= 0 && ids[i] < cn_tokenizer_n_vocab(t));
            size_t n_back, n_clean;
            char *back = tt_detok_all(t, ids, n, false, &n_back);
            char *clean;
            cr_assert(cn_utf8_sanitize(text, len, &clean, &n_clean));
            char e1[256], e2[256];
            tt_escape(text, len, e1, sizeof e1);
            tt_escape(back, n_back, e2, sizeof e2);
            cr_assert(n_back == n_clean && !memcmp(back, clean, n_back), "%s: \"%s\" came back as \"%s\"", vocabs[v],
                      e1, e2);
            free(clean);
            free(back);
            free(ids);
        }
        cn_tokenizer_free(t);
    }
}

Test(tokenizer_bad, arguments) {
    cn_tokenizer *t = tt_load_vocab("gpt-2");
    size_t n = 99;
    int32_t id;
    cn_error e;
    cr_assert_eq(cn_tokenize(t, NULL, 3, false, false, &id, 1, &n, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_tokenize(t, "x", 1, false, false, NULL, 4, &n, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_tokenize(t, NULL, 0, true, true, NULL, 0, &n, &e), CN_STATUS_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(cn_tokenizer_find(t, ""), -1);
    cr_assert_eq(cn_tokenizer_find(t, "no such token text"), -1);
    cr_assert_null(cn_tokenizer_token_text(t, -1, NULL));
    size_t len;
    cr_assert_str_eq(cn_tokenizer_token_text(t, 50256, &len), "<|endoftext|>");
    cr_assert_eq(len, 13);
    cn_tokenizer_free(t);
    cn_tokenizer_free(NULL);
    cn_tokenizer *out = (cn_tokenizer *)&n;
    cr_assert_eq(cn_tokenizer_load(NULL, &out, &e), CN_STATUS_INVALID_ARG);
    cr_assert_null(out);
}

/* gemma3-sized vocabulary: 262144 tokens, a few thousand special ones. Generous bounds:
 * they catch quadratic behaviour, not a slow machine. */
Test(tokenizer_bad, big_vocab_is_fast, .timeout = 60) {
    enum { N = 262144 };
    char **tokens = malloc(N * sizeof *tokens);
    int32_t *types = malloc(N * sizeof *types);
    float *scores = malloc(N * sizeof *scores);
    for (int i = 0; i < N; i++) {
        char buf[32];
        if (i < 259) snprintf(buf, sizeof buf, i < 3 ? "<ctl%d>" : "<0x%02X>", i < 3 ? i : i - 3);
        else if (i < 4000) snprintf(buf, sizeof buf, "<unused%d>", i);
        else snprintf(buf, sizeof buf, "\xE2\x96\x81w%x", i);
        tokens[i] = strdup(buf);
        types[i] = i < 3 ? 3 : i < 259 ? 6 : i < 4000 ? 4 : 1;
        scores[i] = -(float)i;
    }
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, N);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, types, N);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, scores, N);
    uint8_t *blob;
    size_t n_blob;
    cn_error e;
    cr_assert_eq(cn_gguf_writer_write_mem(w, &blob, &n_blob, &e), CN_STATUS_OK);
    cn_gguf_writer_free(w);
    cn_gguf *g;
    cr_assert_eq(cn_gguf_parse(blob, n_blob, &g, &e), CN_STATUS_OK);
    double t0 = cn_time_ms();
    cn_tokenizer *t;
    cr_assert_eq(cn_tokenizer_load(g, &t, &e), CN_STATUS_OK, "%s", e.msg);
    double t_load_ms = cn_time_ms() - t0;
    cn_gguf_close(g);
    free(blob);
    cr_assert_eq(cn_tokenizer_find(t, "\xE2\x96\x81w3e800"), 0x3e800);

    size_t len = 200000;
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len; i++) text[i] = "w1 <unused77>x"[i % 14];
    text[len] = 0;
    t0 = cn_time_ms();
    size_t n;
    int32_t *ids = tt_tokenize(t, text, len, true, true, &n);
    double t_tok_ms = cn_time_ms() - t0;
    cr_assert_gt(n, len / 14);
    cr_assert_lt(t_load_ms, 5000);
    cr_assert_lt(t_tok_ms, 10000);
    free(ids);
    free(text);
    cn_tokenizer_free(t);
    for (int i = 0; i < N; i++) free(tokens[i]);
    free(tokens);
    free(types);
    free(scores);
}
