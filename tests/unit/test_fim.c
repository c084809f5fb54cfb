/* test_fim.c — fill-in-the-middle: the FIM tokens found by metadata id and by text, and
 * the prompt layout and budget against a plain re-statement of llama-server's
 * format_prompt_infill (extra context, BOS, PRE prefix prompt, SUF suffix, MID; prefix
 * keeps its last 3*(n_batch/4) tokens, suffix its first n_batch/4 - 2 - n_prompt). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "test_tokenizer_util.h"
#include "text/tokenizer_impl.h"

/* Tokens of text (no specials added, none parsed). */
static int32_t *toks(const cn_tokenizer *t, const char *text, size_t *n) {
    return tt_tokenize(t, text, strlen(text), false, false, n);
}

typedef struct {
    int32_t v[4096];
    size_t n;
} seq;

static void put(seq *s, const int32_t *ids, size_t n) {
    cr_assert(s->n + n <= CN_ARRAY_LEN(s->v));
    memcpy(s->v + s->n, ids, n * sizeof *ids);
    s->n += n;
}
static void put1(seq *s, int32_t id) { put(s, &id, 1); }
static void put_text(seq *s, const cn_tokenizer *t, const char *text) {
    size_t n = 0;
    int32_t *ids = toks(t, text, &n);
    put(s, ids, n);
    free(ids);
}

static void expect_prompt(const cn_tokenizer *t, const cn_fim_params *p, const seq *want) {
    int32_t *ids = NULL;
    size_t n = 0;
    cn_error e = {0};
    cr_assert_eq(cn_fim_prompt(t, p, &ids, &n, &e), CN_STATUS_OK, "%s", e.msg);
    size_t k = 0;
    while (k < n && k < want->n && ids[k] == want->v[k]) k++;
    cr_assert(k == n && n == want->n, "first difference at %zu: got %d, want %d (got %zu ids, want %zu)", k,
              k < n ? ids[k] : -1, k < want->n ? want->v[k] : -1, n, want->n);
    free(ids);
}

/* StarCoder2's vocabulary: the tokens by their texts. */
Test(fim, tokens_by_text) {
    cn_tokenizer *t = tt_load_vocab("starcoder");
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_PRE), cn_tokenizer_find(t, "<fim_prefix>"));
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_SUF), cn_tokenizer_find(t, "<fim_suffix>"));
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_MID), cn_tokenizer_find(t, "<fim_middle>"));
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_PAD), cn_tokenizer_find(t, "<fim_pad>"));
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_REP), cn_tokenizer_find(t, "<repo_name>"));
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_SEP), cn_tokenizer_find(t, "<file_sep>"));
    cr_assert_geq(cn_tokenizer_fim(t, CN_FIM_PRE), 0);
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_N_TOKENS), -1);
    cr_assert_eq(cn_tokenizer_fim(t, (cn_fim_token)-1), -1);
    cn_tokenizer_free(t);
}

/* GPT-2's vocabulary has none: a clear error naming the missing ones. */
Test(fim, no_tokens_is_unsupported) {
    cn_tokenizer *t = tt_load_vocab("gpt-2");
    for (int k = 0; k < CN_FIM_N_TOKENS; k++) cr_assert_eq(cn_tokenizer_fim(t, (cn_fim_token)k), -1);
    cn_fim_params p = cn_fim_default_params();
    p.prefix = "int a", p.suffix = "}";
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    cn_error e = {0};
    cr_assert_eq(cn_fim_prompt(t, &p, &ids, &n, &e), CN_STATUS_UNSUPPORTED);
    cr_assert_null(ids);
    cr_assert_eq(n, 0);
    cr_assert(strstr(e.msg, "prefix") && strstr(e.msg, "suffix") && strstr(e.msg, "middle"), "%s", e.msg);
    cn_tokenizer_free(t);
}

/* Ids from the metadata win over texts; the older prefix/suffix/middle keys count too. */
Test(fim, tokens_by_metadata_id) {
    static const char *const tokens[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "<PRE>", "x", "y", "z"};
    static const float scores[] = {0, 0, 0, -1, -2, -3, 0, -4, -5, -6};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 3, 1, 1, 1};
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 10);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, scores, 10);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, types, 10);
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.fim_pre_token_id", 7);
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.suffix_token_id", 8);
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.fim_mid_token_id", 9);
    cn_gguf_writer_set_u32(w, "tokenizer.ggml.fim_sep_token_id", 99); /* out of range: ignored */
    cn_tokenizer *t = NULL;
    cn_error e = {0};
    cr_assert_eq(tt_load_written(w, &t, &e), CN_STATUS_OK, "%s", e.msg);
    cn_gguf_writer_free(w);
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_PRE), 7); /* not <PRE> (6) */
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_SUF), 8);
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_MID), 9);
    cr_assert_eq(cn_tokenizer_fim(t, CN_FIM_SEP), -1);
    /* SentencePiece adds BOS: it comes after the (empty) extra context, before PRE */
    cn_fim_params p = cn_fim_default_params();
    p.prefix = "ab", p.suffix = "ba";
    seq want = {.n = 0};
    put1(&want, 1);
    put1(&want, 7);
    put_text(&want, t, "ab");
    put1(&want, 8);
    put_text(&want, t, "ba");
    put1(&want, 9);
    expect_prompt(t, &p, &want);
    cn_tokenizer_free(t);
}

/* The repo-level layout with extra files, a prompt, and the spm order. */
Test(fim, repo_level_layout) {
    cn_tokenizer *t = tt_load_vocab("starcoder");
    const int32_t pre = cn_tokenizer_fim(t, CN_FIM_PRE), suf = cn_tokenizer_fim(t, CN_FIM_SUF),
                  mid = cn_tokenizer_fim(t, CN_FIM_MID), rep = cn_tokenizer_fim(t, CN_FIM_REP),
                  sep = cn_tokenizer_fim(t, CN_FIM_SEP);
    const cn_fim_chunk extra[] = {{"util.h", "int add(int a, int b);\n"}, {NULL, "#define N 4\n"}};
    cn_fim_params p = cn_fim_default_params();
    p.prefix = "int main(void) {\n    return ";
    p.suffix = ";\n}\n";
    p.prompt = "add(";
    p.extra = extra;
    p.n_extra = 2;
    seq want = {.n = 0};
    put1(&want, rep);
    put_text(&want, t, "myproject\n");
    put1(&want, sep);
    put_text(&want, t, "util.h\n");
    put_text(&want, t, extra[0].text);
    put1(&want, sep);
    put_text(&want, t, "tmp\n");
    put_text(&want, t, extra[1].text);
    put1(&want, sep);
    put_text(&want, t, "filename\n");
    const size_t n_extra = want.n;
    put1(&want, pre);
    put_text(&want, t, p.prefix);
    put_text(&want, t, "add(");
    put1(&want, suf);
    put_text(&want, t, p.suffix);
    put1(&want, mid);
    expect_prompt(t, &p, &want);

    /* the extra context keeps its last n_extra_max tokens */
    p.n_extra_max = 5;
    seq cut = {.n = 0};
    put(&cut, want.v + n_extra - 5, want.n - (n_extra - 5));
    expect_prompt(t, &p, &cut);
    p.n_extra_max = 0;
    seq none = {.n = 0};
    put(&none, want.v + n_extra, want.n - n_extra);
    expect_prompt(t, &p, &none);

    /* spm: SUF suffix PRE prefix prompt MID */
    p.spm = true;
    seq spm = {.n = 0};
    put1(&spm, suf);
    put_text(&spm, t, p.suffix);
    put1(&spm, pre);
    put_text(&spm, t, p.prefix);
    put_text(&spm, t, "add(");
    put1(&spm, mid);
    expect_prompt(t, &p, &spm);
    cn_tokenizer_free(t);
}

/* The budget: prefix keeps its last 3*(n_batch/4) tokens, the suffix its first
 * n_batch/4 - 2 - n_prompt (none when that is negative). */
Test(fim, budget_trims_prefix_end_and_suffix_start) {
    cn_tokenizer *t = tt_load_vocab("starcoder");
    const int32_t pre = cn_tokenizer_fim(t, CN_FIM_PRE), suf = cn_tokenizer_fim(t, CN_FIM_SUF),
                  mid = cn_tokenizer_fim(t, CN_FIM_MID), rep = cn_tokenizer_fim(t, CN_FIM_REP),
                  sep = cn_tokenizer_fim(t, CN_FIM_SEP);
    char prefix[4000] = "", suffix[4000] = "";
    for (int i = 0; i < 200; i++) {
        char line[24];
        snprintf(line, sizeof line, "x%d = %d;\n", i, i * 7);
        strcat(prefix, line);
        snprintf(line, sizeof line, "y%d = %d;\n", i, i * 3);
        strcat(suffix, line);
    }
    size_t n_pre = 0, n_suf = 0, n_prompt = 0;
    int32_t *tp = toks(t, prefix, &n_pre), *ts = toks(t, suffix, &n_suf), *tq = toks(t, "foo", &n_prompt);
    const int32_t batches[] = {4, 8, 64, 100, 2048};
    for (size_t b = 0; b < CN_ARRAY_LEN(batches); b++) {
        cn_fim_params p = cn_fim_default_params();
        p.prefix = prefix, p.suffix = suffix, p.prompt = "foo", p.n_batch = batches[b];
        const size_t q = (size_t)batches[b] / 4, keep_pre = CN_MIN(n_pre, 3 * q);
        const long room = (long)q - 2 - (long)n_prompt;
        const size_t keep_suf = CN_MIN(n_suf, (size_t)(room > 0 ? room : 0));
        seq want = {.n = 0};
        put1(&want, rep);
        put_text(&want, t, "myproject\n");
        put1(&want, sep);
        put_text(&want, t, "filename\n");
        put1(&want, pre);
        put(&want, tp + n_pre - keep_pre, keep_pre);
        put(&want, tq, n_prompt);
        put1(&want, suf);
        put(&want, ts, keep_suf);
        put1(&want, mid);
        expect_prompt(t, &p, &want);
    }
    free(tp);
    free(ts);
    free(tq);
    cn_tokenizer_free(t);
}

Test(fim, bad_params) {
    cn_tokenizer *t = tt_load_vocab("starcoder");
    cn_fim_params p = cn_fim_default_params();
    int32_t *ids = NULL;
    size_t n = 0;
    cn_error e = {0};
    p.n_batch = 3;
    cr_assert_eq(cn_fim_prompt(t, &p, &ids, &n, &e), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(e.param, "n_batch");
    p = cn_fim_default_params();
    p.n_extra_max = -2;
    cr_assert_eq(cn_fim_prompt(t, &p, &ids, &n, &e), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(e.param, "n_extra_max");
    p = cn_fim_default_params();
    p.n_extra = 1;
    cr_assert_eq(cn_fim_prompt(t, &p, &ids, &n, &e), CN_STATUS_INVALID_ARG);
    /* all empty: just the markers */
    p = cn_fim_default_params();
    cr_assert_eq(cn_fim_prompt(t, &p, &ids, &n, &e), CN_STATUS_OK, "%s", e.msg);
    cr_assert_eq(ids[n - 1], cn_tokenizer_fim(t, CN_FIM_MID));
    free(ids);
    cn_tokenizer_free(t);
}
