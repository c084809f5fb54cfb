/* test_tokenizer_detok.c — ids back to bytes: cn_token_to_piece (byte tokens, ▁, BPE
 * byte characters, control tokens only when asked, the buffer-size contract) and the
 * incremental detokenizer (never a partial UTF-8 sequence, U+FFFD for bytes that cannot
 * become UTF-8, the SentencePiece leading-space rule). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_tokenizer_util.h"
#include "text/tokenizer_impl.h"

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t bad;
        int r = cn_utf8_check((const uint8_t *)s + i, n - i, &bad);
        if (r <= 0) return false;
        i += (size_t)r;
    }
    return true;
}

Test(tokenizer_detok, pieces) {
    cn_tokenizer *t = tt_load_vocab("llama-spm");
    char buf[64];
    size_t n = cn_token_to_piece(t, 15043, false, buf, sizeof buf); /* "▁Hello" */
    cr_assert(n == 6 && !memcmp(buf, " Hello", 6));
    n = cn_token_to_piece(t, cn_tokenizer_find(t, "<0x0A>"), false, buf, sizeof buf);
    cr_assert(n == 1 && buf[0] == '\n');
    cr_assert_eq(cn_token_to_piece(t, 1, false, buf, sizeof buf), 0); /* <s> hidden */
    n = cn_token_to_piece(t, 1, true, buf, sizeof buf);
    cr_assert(n == 3 && !memcmp(buf, "<s>", 3));
    cr_assert_eq(cn_token_to_piece(t, 0, false, buf, sizeof buf), 0); /* <unk> is special */
    cr_assert_eq(cn_token_to_piece(t, 15043, false, buf, 3), 6);      /* too small: size */
    cr_assert_eq(cn_token_to_piece(t, 15043, false, NULL, 0), 6);
    cr_assert_eq(cn_token_to_piece(t, -1, true, buf, sizeof buf), 0);
    cr_assert_eq(cn_token_to_piece(t, 32000, true, buf, sizeof buf), 0);
    cn_tokenizer_free(t);

    t = tt_load_vocab("gpt-2");
    n = cn_token_to_piece(t, cn_tokenizer_find(t, "\xC4\xA0the"), false, buf, sizeof buf); /* Ġthe */
    cr_assert(n == 4 && !memcmp(buf, " the", 4));
    n = cn_token_to_piece(t, cn_tokenizer_find(t, "\xC4\x8A"), false, buf, sizeof buf); /* Ċ */
    cr_assert(n == 1 && buf[0] == '\n');
    n = cn_token_to_piece(t, cn_tokenizer_find(t, "\xC3\xBF"), false, buf, sizeof buf); /* ÿ = 0xFF */
    cr_assert(n == 1 && (uint8_t)buf[0] == 0xFF);
    cr_assert_eq(cn_token_to_piece(t, 50256, false, buf, sizeof buf), 0);
    cn_tokenizer_free(t);
}

/* A 4-byte character as four byte tokens: nothing until the last one, then all four. */
Test(tokenizer_detok, holds_back_split_characters) {
    const char *llama = "\xF0\x9F\xA6\x99"; /* U+1F999 */
    for (int v = 0; v < 2; v++) {
        cn_tokenizer *t = tt_load_vocab(v ? "gpt-2" : "llama-spm");
        char text[32];
        snprintf(text, sizeof text, "a %s b", llama);
        size_t n;
        int32_t *ids = tt_tokenize(t, text, strlen(text), false, false, &n);
        cn_detok *d;
        cr_assert_eq(cn_detok_new(t, false, &d), CN_STATUS_OK);
        char all[64];
        size_t k = 0;
        int partial_steps = 0;
        for (size_t i = 0; i < n; i++) {
            const char *p;
            size_t m;
            cr_assert_eq(cn_detok_push(d, ids[i], &p, &m), CN_STATUS_OK);
            cr_assert(valid_utf8(p, m), "push %zu emitted a partial sequence", i);
            char piece[16];
            size_t pn = cn_token_to_piece(t, ids[i], false, piece, sizeof piece);
            if (pn && !valid_utf8(piece, pn)) partial_steps++;
            memcpy(all + k, p, m);
            k += m;
        }
        const char *p;
        size_t m;
        cr_assert_eq(cn_detok_flush(d, &p, &m), CN_STATUS_OK);
        cr_assert_eq(m, 0);
        cr_assert(partial_steps >= 2, "%s: the character was not split over tokens", v ? "gpt-2" : "spm");
        cr_assert(k == strlen(text) && !memcmp(all, text, k));
        cn_detok_free(d);
        free(ids);
        cn_tokenizer_free(t);
    }
}

Test(tokenizer_detok, replacement_character) {
    cn_tokenizer *t = tt_load_vocab("llama-spm");
    int32_t f0 = cn_tokenizer_find(t, "<0xF0>"), x9f = cn_tokenizer_find(t, "<0x9F>");
    int32_t ff = cn_tokenizer_find(t, "<0xFF>"), a = cn_tokenizer_find(t, "a");
    cn_detok *d;
    cr_assert_eq(cn_detok_new(t, false, &d), CN_STATUS_OK);
    const char *p;
    size_t m;
    /* dangling start of a sequence: held, then U+FFFD at flush */
    cr_assert_eq(cn_detok_push(d, f0, &p, &m), CN_STATUS_OK);
    cr_assert_eq(m, 0);
    cr_assert_eq(cn_detok_push(d, x9f, &p, &m), CN_STATUS_OK);
    cr_assert_eq(m, 0);
    cr_assert_eq(cn_detok_flush(d, &p, &m), CN_STATUS_OK);
    cr_assert(m == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
    /* a byte that is never UTF-8: replaced at once */
    cr_assert_eq(cn_detok_push(d, ff, &p, &m), CN_STATUS_OK);
    cr_assert(m == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
    /* a started sequence cut by plain text: U+FFFD, then the text */
    cr_assert_eq(cn_detok_push(d, f0, &p, &m), CN_STATUS_OK);
    cr_assert_eq(m, 0);
    cr_assert_eq(cn_detok_push(d, a, &p, &m), CN_STATUS_OK);
    cr_assert(m == 4 && !memcmp(p,
                                "\xEF\xBF\xBD"
                                "a",
                                4));
    cr_assert_eq(cn_detok_push(d, -5, &p, &m), CN_STATUS_INVALID_ARG);
    cn_detok_free(d);
    cn_detok_free(NULL);
    cn_tokenizer_free(t);
}

Test(tokenizer_detok, leading_space_rule) {
    cn_tokenizer *t = tt_load_vocab("llama-spm");
    int32_t ids[] = {1, 15043, 3186}; /* <s> ▁Hello ▁world */
    size_t n;
    char *s = tt_detok_all(t, ids + 1, 2, false, &n);
    cr_assert_str_eq(s, "Hello world");
    free(s);
    s = tt_detok_all(t, ids, 3, false, &n); /* BOS renders as nothing: still the first piece */
    cr_assert_str_eq(s, "Hello world");
    free(s);
    s = tt_detok_all(t, ids, 3, true, &n);
    cr_assert_str_eq(s, "<s> Hello world");
    free(s);
    /* continuing a text: the space is real */
    cn_detok *d;
    cr_assert_eq(cn_detok_new(t, false, &d), CN_STATUS_OK);
    cn_detok_set_strip_space(d, false);
    const char *p;
    size_t m;
    cr_assert_eq(cn_detok_push(d, 15043, &p, &m), CN_STATUS_OK);
    cr_assert(m == 6 && !memcmp(p, " Hello", 6));
    cn_detok_free(d);
    cn_tokenizer_free(t);

    t = tt_load_vocab("gpt-2");  /* BPE: no rule, the space is part of the text */
    int32_t hw[] = {18435, 995}; /* " Hello" " world" */
    s = tt_detok_all(t, hw, 2, false, &n);
    cr_assert_str_eq(s, " Hello world");
    free(s);
    cn_tokenizer_free(t);
}
