/* test_tokenizer.c — the tokenizers against llama.cpp's tokenizer test vectors
 * (../shared/testdata/tokenizer: vocab-only GGUFs with .inp texts and .out ids made by
 * the Hugging Face tokenizers; see its README), run with add_special = false and
 * parse_special = false and compared id for id. Also: detokenize(tokenize(x)) == x on
 * the same texts, and the pre-tokenizer on its own. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "test_tokenizer_util.h"

/* The vocabularies whose cases must all pass. (bert-bge is a WordPiece vocabulary,
 * which cinder does not implement.) */
static const char *const vocabs[] = {"gpt-2", "llama-spm", "phi-3", "starcoder", "mpt", "refact", "deepseek-llm"};

/* Runs every case of one vocabulary; prints each failure; returns the pass count. */
static int run_vocab(const char *name, int *n_cases) {
    tt_cases c;
    cn_tokenizer *t = tt_load_vocab(name);
    cr_assert(tt_read_cases(name, &c), "cannot read the cases of %s", name);
    *n_cases = c.n;
    int pass = 0;
    for (int i = 0; i < c.n; i++) {
        size_t n = 0;
        int32_t *ids = tt_tokenize(t, c.text[i], c.len[i], false, false, &n);
        size_t k = 0;
        while (k < n && k < c.n_ids[i] && ids[k] == c.ids[i][k]) k++;
        if (k == n && n == c.n_ids[i]) {
            pass++;
        } else {
            char esc[512];
            tt_escape(c.text[i], c.len[i], esc, sizeof esc);
            fprintf(stderr,
                    "%s case %d \"%s\": first difference at index %zu: got %d, want %d "
                    "(got %zu ids, want %zu)\n",
                    name, i, esc, k, k < n ? ids[k] : -1, k < c.n_ids[i] ? c.ids[i][k] : -1, n, c.n_ids[i]);
        }
        free(ids);
    }
    fprintf(stderr, "tokenizer vectors: %s %d/%d\n", name, pass, c.n);
    tt_free_cases(&c);
    cn_tokenizer_free(t);
    return pass;
}

#define VOCAB_TEST(ident, name)                                         \
    Test(tokenizer_vectors, ident) {                                    \
        int n = 0;                                                      \
        int pass = run_vocab(name, &n);                                 \
        cr_assert_eq(n, 46, "%s: expected 46 cases, read %d", name, n); \
        cr_assert_eq(pass, n, "%s: %d/%d cases pass", name, pass, n);   \
    }

VOCAB_TEST(gpt2, "gpt-2")
VOCAB_TEST(llama_spm, "llama-spm")
VOCAB_TEST(phi3, "phi-3")
VOCAB_TEST(starcoder, "starcoder")
VOCAB_TEST(mpt, "mpt")
VOCAB_TEST(refact, "refact")
VOCAB_TEST(deepseek_llm, "deepseek-llm")

/* Byte-level BPE and byte-fallback SentencePiece lose nothing: every case comes back. */
Test(tokenizer_roundtrip, all_vocabs_all_cases) {
    for (size_t v = 0; v < CN_ARRAY_LEN(vocabs); v++) {
        tt_cases c;
        cn_tokenizer *t = tt_load_vocab(vocabs[v]);
        cr_assert(tt_read_cases(vocabs[v], &c));
        int bad = 0;
        for (int i = 0; i < c.n; i++) {
            size_t n = 0, n_text = 0;
            int32_t *ids = tt_tokenize(t, c.text[i], c.len[i], false, false, &n);
            char *back = tt_detok_all(t, ids, n, false, &n_text);
            if (n_text != c.len[i] || memcmp(back, c.text[i], n_text)) {
                char e1[256], e2[256];
                tt_escape(c.text[i], c.len[i], e1, sizeof e1);
                tt_escape(back, n_text, e2, sizeof e2);
                fprintf(stderr, "%s case %d: \"%s\" came back as \"%s\"\n", vocabs[v], i, e1, e2);
                bad++;
            }
            free(ids);
            free(back);
        }
        cr_expect_eq(bad, 0, "%s: %d cases do not round-trip", vocabs[v], bad);
        tt_free_cases(&c);
        cn_tokenizer_free(t);
    }
}

/* With add_special the ids are BOS + the same ids (+ EOS) as the metadata says. */
Test(tokenizer_vectors, add_special_wraps_ids) {
    cn_tokenizer *t = tt_load_vocab("llama-spm");
    size_t n0, n1;
    int32_t *a = tt_tokenize(t, "Hello world", 11, false, false, &n0);
    int32_t *b = tt_tokenize(t, "Hello world", 11, true, false, &n1);
    cr_assert_eq(n1, n0 + 1);
    cr_assert_eq(b[0], 1);
    cr_assert_eq(memcmp(a, b + 1, n0 * sizeof *a), 0);
    cr_assert(cn_tokenizer_add_bos(t));
    cr_assert(!cn_tokenizer_add_eos(t));
    free(a);
    free(b);
    cn_tokenizer_free(t);

    t = tt_load_vocab("gpt-2"); /* no add_bos_token key: BPE adds nothing */
    a = tt_tokenize(t, "Hello", 5, true, false, &n0);
    cr_assert_eq(n0, 1);
    cr_assert_eq(a[0], 15496);
    free(a);
    cn_tokenizer_free(t);

    t = tt_load_vocab("deepseek-llm"); /* add_bos_token = true */
    a = tt_tokenize(t, "Hello", 5, true, false, &n0);
    cr_assert_eq(n0, 2);
    cr_assert_eq(a[0], 100000);
    free(a);
    cn_tokenizer_free(t);
}

/* The output buffer contract: a short buffer gets a prefix and the full count. */
Test(tokenizer_vectors, short_buffer_reports_full_count) {
    cn_tokenizer *t = tt_load_vocab("gpt-2");
    int32_t ids[2] = {-7, -7};
    size_t n = 0;
    cn_error e;
    cr_assert_eq(cn_tokenize(t, "Hello world, this is", 20, false, false, ids, 1, &n, &e), CN_STATUS_OK);
    cr_assert_eq(n, 5);
    cr_assert_eq(ids[0], 15496);
    cr_assert_eq(ids[1], -7);
    cr_assert_eq(cn_tokenize(t, "Hello", 5, false, false, NULL, 0, &n, &e), CN_STATUS_OK);
    cr_assert_eq(n, 1);
    cn_tokenizer_free(t);
}

/* The gpt-2 pre-tokenizer alone, on the whitespace patterns that trip regex engines. */
Test(tokenizer_pretok, gpt2_whitespace_runs) {
    cn_tokenizer *t = tt_load_vocab("gpt-2");
    const char *text = "a  b\t\tc   \n x\n\n";
    /* \s+(?!\S) leaves the last blank to the next piece; a lone blank before a
     * non-letter is \s+ on its own. */
    const char *want[] = {"a", " ", " b", "\t", "\t", "c", "   \n", " x", "\n\n"};
    char *clean;
    size_t *offs, n;
    cn_error e;
    cr_assert_eq(cn_bpe_pretokenize(t, text, strlen(text), &clean, &offs, &n, &e), CN_STATUS_OK);
    cr_assert_eq(n, CN_ARRAY_LEN(want), "got %zu pieces", n);
    for (size_t i = 0; i < n; i++) {
        size_t len = offs[2 * i + 1] - offs[2 * i];
        cr_assert(len == strlen(want[i]) && !memcmp(clean + offs[2 * i], want[i], len),
                  "piece %zu is '%.*s', want '%s'", i, (int)len, clean + offs[2 * i], want[i]);
    }
    free(clean);
    free(offs);
    cn_tokenizer_free(t);
}
