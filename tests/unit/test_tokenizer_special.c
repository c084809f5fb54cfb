/* test_tokenizer_special.c — special tokens in input text (control/unknown only with
 * parse_special, user-defined always, longest first, phi-3's right-strip), the
 * end-of-generation set, and the pre-tokenizer families on hand-worked splits (what the
 * models' own regexes give under Perl-compatible semantics). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_tokenizer_util.h"
#include "text/tokenizer_impl.h"

static void expect_ids(const cn_tokenizer *t, const char *text, bool parse_special, const int32_t *want,
                       size_t n_want) {
    size_t n;
    int32_t *ids = tt_tokenize(t, text, strlen(text), false, parse_special, &n);
    bool same = n == n_want && !memcmp(ids, want, n * sizeof *ids);
    if (!same) {
        fprintf(stderr, "'%s' (parse_special=%d) gave:", text, parse_special);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    cr_assert(same, "'%s': wrong ids", text);
}

Test(tokenizer_special, control_only_when_parsing) {
    cn_tokenizer *t = tt_load_vocab("llama-spm");
    int32_t want[] = {1, 15043, 2}; /* <s> ▁Hello </s> */
    expect_ids(t, "<s>Hello</s>", true, want, 3);
    size_t n;
    int32_t *ids = tt_tokenize(t, "<s>Hello</s>", 12, false, false, &n);
    for (size_t i = 0; i < n; i++) cr_assert(ids[i] != 1 && ids[i] != 2);
    free(ids);
    cn_tokenizer_free(t);
}

/* mpt's user-defined runs of 2..24 spaces are matched without parse_special, longest
 * first. */
Test(tokenizer_special, user_defined_longest_first) {
    cn_tokenizer *t = tt_load_vocab("mpt");
    char sp24[25], sp2[3] = "  ", text[32];
    memset(sp24, ' ', 24);
    sp24[24] = 0;
    memset(text, ' ', 26);
    text[26] = 0;
    int32_t want[] = {cn_tokenizer_find(t, sp24), cn_tokenizer_find(t, sp2)};
    cr_assert(want[0] >= 0 && want[1] >= 0);
    cr_assert_eq(cn_tokenizer_token_type(t, want[0]), CN_TOKEN_USER_DEFINED);
    expect_ids(t, text, false, want, 2);
    cn_tokenizer_free(t);
}

/* Equal lengths: the lower id claims the text first; a longer token beats both. */
Test(tokenizer_special, overlapping_user_defined) {
    const char *tokens[] = {"<unk>", "<s>", "</s>", "a", "b", "c", "\xE2\x96\x81", "ab", "bc", "<x>", "abcd"};
    int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 4, 4, 3, 4};
    float scores[11] = {0};
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 11);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, types, 11);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, scores, 11);
    cn_tokenizer *t;
    cn_error e;
    cr_assert_eq(tt_load_written(w, &t, &e), CN_STATUS_OK, "%s", e.msg);
    cn_gguf_writer_free(w);
    int32_t w1[] = {7, 6, 5}; /* ab, then "▁c" (a space after a special token) */
    expect_ids(t, "abc", false, w1, 3);
    int32_t w2[] = {10, 7}; /* abcd claims first, then ab */
    expect_ids(t, "abcdab", false, w2, 2);
    int32_t w3[] = {9, 6, 3}; /* <x> is control: only with parse_special */
    expect_ids(t, "<x>a", true, w3, 3);
    int32_t w4[] = {6, 0, 0, 0, 3}; /* no byte tokens: unknown characters are <unk> */
    expect_ids(t, "<x>a", false, w4, 5);
    cn_tokenizer_free(t);
}

/* phi-3's special tokens eat the whitespace after them (llama.cpp sets rstrip by name). */
Test(tokenizer_special, phi3_rstrip) {
    cn_tokenizer *t = tt_load_vocab("phi-3");
    int32_t want[] = {32010, 15043, 32007}; /* <|user|> ▁Hello <|end|> */
    expect_ids(t, "<|user|>\n  Hello<|end|>", true, want, 3);
    cn_tokenizer_free(t);
}

Test(tokenizer_special, end_of_generation) {
    cn_tokenizer *t = tt_load_vocab("phi-3");
    cr_assert_eq(cn_tokenizer_eos(t), 32000);
    cr_assert(cn_tokenizer_is_eog(t, 32000)); /* <|endoftext|>, the EOS */
    cr_assert(cn_tokenizer_is_eog(t, 32007)); /* <|end|> */
    cr_assert_eq(cn_tokenizer_eot(t), 32007);
    cr_assert(!cn_tokenizer_is_eog(t, 2)); /* </s> is user-defined here, not control */
    cr_assert(!cn_tokenizer_is_eog(t, 1));
    cr_assert(!cn_tokenizer_is_eog(t, 15043));
    cr_assert(!cn_tokenizer_is_eog(t, -1));
    cr_assert(!cn_tokenizer_is_eog(t, 1 << 30));
    cn_tokenizer_free(t);

    t = tt_load_vocab("llama-spm");
    cr_assert(cn_tokenizer_is_eog(t, 2));
    cr_assert(!cn_tokenizer_is_eog(t, 1));
    cr_assert_eq(cn_tokenizer_bos(t), 1);
    cr_assert_eq(cn_tokenizer_eot(t), -1);
    cr_assert_str_eq(cn_tokenizer_model(t), "llama");
    cn_tokenizer_free(t);

    t = tt_load_vocab("starcoder"); /* <|endoftext|> and <fim_pad> */
    cr_assert(cn_tokenizer_is_eog(t, 0));
    cr_assert_eq(cn_tokenizer_n_vocab(t), 49152);
    cr_assert_str_eq(cn_tokenizer_pre(t), "starcoder");
    cn_tokenizer_free(t);
}

/* A byte-level BPE vocabulary of the 256 byte characters (ids 0..255, in byte order) plus
 * "hello" (id 256) and no merges, with a given pre name. */
static cn_tokenizer *bytes_vocab(const char *pre) {
    static char store[256][4];
    const char *tokens[257];
    for (int b = 0; b < 256; b++) {
        size_t n = cn_utf8_encode(cn_bpe_byte_to_cp((uint8_t)b), store[b]);
        store[b][n] = 0;
        tokens[b] = store[b];
    }
    tokens[256] = "hello";
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) cn_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 257);
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", tokens, 0);
    cn_tokenizer *t;
    cn_error e;
    cr_assert_eq(tt_load_written(w, &t, &e), CN_STATUS_OK, "%s", e.msg);
    cn_gguf_writer_free(w);
    return t;
}

/* llama3-family vocabularies take a whole pre-token that is a token, merges or not. */
Test(tokenizer_pretok, llama3_ignores_merges) {
    cn_tokenizer *t = bytes_vocab("llama-bpe");
    int32_t want[] = {256};
    expect_ids(t, "hello", false, want, 1);
    cr_assert(cn_tokenizer_add_bos(t) == false); /* add_bos on, but there is no BOS id */
    cn_tokenizer_free(t);
    t = bytes_vocab("gpt-2");
    int32_t bytes[] = {'h', 'e', 'l', 'l', 'o'};
    expect_ids(t, "hello", false, bytes, 5);
    cn_tokenizer_free(t);
}

static void expect_split(const char *pre, const char *text, const char *const *want, size_t n_want) {
    cn_tokenizer *t = bytes_vocab(pre);
    char *clean;
    size_t *offs, n;
    cn_error e;
    cr_assert_eq(cn_bpe_pretokenize(t, text, strlen(text), &clean, &offs, &n, &e), CN_STATUS_OK);
    bool same = n == n_want;
    for (size_t i = 0; same && i < n; i++) {
        size_t len = offs[2 * i + 1] - offs[2 * i];
        same = len == strlen(want[i]) && !memcmp(clean + offs[2 * i], want[i], len);
    }
    if (!same) {
        fprintf(stderr, "%s split:", pre);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " [%.*s]", (int)(offs[2 * i + 1] - offs[2 * i]), clean + offs[2 * i]);
        fprintf(stderr, "\n");
    }
    free(clean);
    free(offs);
    cn_tokenizer_free(t);
    cr_assert(same, "%s: wrong split of '%s'", pre, text);
}

Test(tokenizer_pretok, llama3_family) {
    const char *text = "Hello world's 12345 ok\n\n  x We'Ve";
    const char *want[] = {"Hello", " world", "'s", " ", "123", "45", " ok", "\n\n", " ", " x", " We", "'Ve"};
    expect_split("llama-bpe", text, want, CN_ARRAY_LEN(want));
    expect_split("llama3", text, want, CN_ARRAY_LEN(want));
}

Test(tokenizer_pretok, qwen2_single_digits) {
    const char *want[] = {"a", "1", "2", "3", " b"};
    expect_split("qwen2", "a123 b", want, CN_ARRAY_LEN(want));
}

Test(tokenizer_pretok, gpt2_contractions_are_lowercase_only) {
    const char *want[] = {"We", "'", "Ve", " we", "'ve"};
    expect_split("gpt-2", "We'Ve we've", want, CN_ARRAY_LEN(want));
}

/* starcoder-style: every digit is a piece of its own, before the gpt-2 regex runs. */
Test(tokenizer_pretok, starcoder_digits) {
    const char *want[] = {"x", "1", "2", " ", "3"};
    expect_split("smollm", "x12 3", want, CN_ARRAY_LEN(want));
}

/* An unknown name warns and falls back to gpt-2; a missing one uses llama.cpp's default
 * list (punctuation runs isolated first). */
Test(tokenizer_pretok, unknown_and_missing_names) {
    const char *want[] = {"Hello", ",", " world", "!!"};
    expect_split("no-such-pre", "Hello, world!!", want, CN_ARRAY_LEN(want));
    const char *want_default[] = {"a", "+", "b"};
    expect_split(NULL, "a+b", want_default, CN_ARRAY_LEN(want_default));
}

/* Long runs must not exhaust the regex engine's stack. */
Test(tokenizer_pretok, long_runs) {
    size_t n = 200000;
    char *s = malloc(n + 1);
    for (int kind = 0; kind < 3; kind++) {
        memset(s, kind == 0 ? ' ' : kind == 1 ? 'a' : '!', n);
        s[n] = 0;
        cn_tokenizer *t = bytes_vocab("llama-bpe");
        size_t k;
        int32_t *ids = tt_tokenize(t, s, n, false, false, &k);
        cr_assert_eq(k, n); /* no merges, no such long token: one token per byte */
        free(ids);
        cn_tokenizer_free(t);
    }
    free(s);
}
