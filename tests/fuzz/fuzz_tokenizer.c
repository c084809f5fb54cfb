/* fuzz_tokenizer.c — fuzz entry for tokenizer encode and decode, over real vocabularies
 * from ../shared/testdata/tokenizer (llama.cpp's vocabulary files): SentencePiece
 * (llama-spm, phi-3) and byte-level BPE (gpt-2, starcoder, deepseek-llm).
 *
 * The first input byte picks the vocabulary and the flags (add_special, parse_special,
 * render_special); the rest is the text, arbitrary bytes (malformed UTF-8 included).
 * Checked: tokenize succeeds or fails with a message; the count pass and the fill pass
 * agree; every id is in the vocabulary; the incremental detokenizer emits only valid
 * UTF-8; for the byte-level BPE vocabularies, text that is valid UTF-8 (and holds no byte
 * the vocabulary lacks a token for) comes back unchanged (encode, then decode, with no
 * special-token parsing). Then the bytes are read as token ids and decoded too.
 *
 * Built by `make fuzz` with libFuzzer; replayed over the committed corpus by the unit
 * tests (tests/unit/test_fuzz_corpus.c) under ASan+UBSan. The vocabularies are found
 * under $CINDER_TESTDATA, else ../shared/testdata beside the checkout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

#define FUZZ_TOK_N 5
static const char *const fuzz_tok_files[FUZZ_TOK_N] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",
                                                       "ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                                       "ggml-vocab-deepseek-llm.gguf"};
static const bool fuzz_tok_bytelevel[FUZZ_TOK_N] = {false, false, true, true, true};

static cn_gguf *fuzz_tok_gguf[FUZZ_TOK_N];
static cn_tokenizer *fuzz_tok[FUZZ_TOK_N];
/* byte-level vocabularies: whether byte b has a token of its own. Some lack the bytes
 * that valid UTF-8 rarely or never uses (starcoder: 0xC0, 0xC1, 0xF1, 0xF5..0xFF); a text
 * holding one cannot come back whole (llama.cpp drops such bytes too). */
static bool fuzz_tok_has_byte[FUZZ_TOK_N][256];

/* GPT-2's byte-to-unicode map, written out independently: printable Latin-1 bytes stand
 * for themselves, the others for U+0100 onwards in byte order. */
static uint32_t fuzz_byte_char(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    uint32_t n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 256 + n;
}

int fuzz_tokenizer_one(const uint8_t *data, size_t size);

static cn_tokenizer *fuzz_tok_get(int i) {
    if (fuzz_tok[i]) return fuzz_tok[i];
    const char *dir = getenv("CINDER_TESTDATA");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/%s", dir && *dir ? dir : "../shared/testdata", fuzz_tok_files[i]);
    cn_error err = {0};
    if (cn_gguf_open(path, &fuzz_tok_gguf[i], &err) != CN_STATUS_OK ||
        cn_tokenizer_load(fuzz_tok_gguf[i], &fuzz_tok[i], &err) != CN_STATUS_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err.msg);
        abort();
    }
    for (int b = 0; b < 256; b++) {
        const uint32_t c = fuzz_byte_char(b);
        char u[3] = {(char)c, 0, 0};
        if (c >= 0x80) u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3F));
        fuzz_tok_has_byte[i][b] = cn_tokenizer_find(fuzz_tok[i], u) >= 0;
    }
    return fuzz_tok[i];
}

static bool fuzz_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = (uint8_t)s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1Fu : len == 3 ? c & 0x0Fu : c & 0x07u;
        for (size_t k = 1; k < len; k++) {
            const uint8_t d = (uint8_t)s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = cp << 6 | (d & 0x3Fu);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

/* Decodes ids[0..n) one id at a time; the output must be valid UTF-8. */
static void fuzz_detok(const cn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, fuzz_buf *out) {
    cn_detok *d = NULL;
    if (cn_detok_new(t, render_special, &d) != CN_STATUS_OK) abort();
    const char *txt;
    size_t nb;
    for (size_t i = 0; i < n; i++) {
        if (cn_detok_push(d, ids[i], &txt, &nb) != CN_STATUS_OK) abort();
        if (!fuzz_utf8_valid(txt, nb)) abort();
        fuzz_buf_add(out, txt, nb);
    }
    if (cn_detok_flush(d, &txt, &nb) != CN_STATUS_OK || !fuzz_utf8_valid(txt, nb)) abort();
    fuzz_buf_add(out, txt, nb);
    cn_detok_free(d);
}

int fuzz_tokenizer_one(const uint8_t *data, size_t size) {
    if (size < 1) return -1;
    const int which = data[0] % FUZZ_TOK_N;
    const bool add_special = data[0] & 0x10, parse_special = data[0] & 0x20, render_special = data[0] & 0x40;
    const cn_tokenizer *t = fuzz_tok_get(which);
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    const int32_t n_vocab = cn_tokenizer_n_vocab(t);

    size_t n = 0;
    cn_error err = {0};
    cn_status st = cn_tokenize(t, text, len, add_special, parse_special, NULL, 0, &n, &err);
    if (st != CN_STATUS_OK) {
        if (!err.msg[0]) abort();
        return -1;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) abort();
    size_t n2 = 0;
    if (cn_tokenize(t, text, len, add_special, parse_special, ids, n, &n2, &err) != CN_STATUS_OK || n2 != n) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) abort();

    fuzz_buf whole = {0};
    fuzz_detok(t, ids, n, render_special, &whole);
    bool whole_bytes = true;
    for (size_t i = 0; i < len; i++) whole_bytes &= fuzz_tok_has_byte[which][(uint8_t)text[i]];
    if (fuzz_tok_bytelevel[which] && whole_bytes && !add_special && !parse_special && fuzz_utf8_valid(text, len) &&
        (whole.n != len || (len && memcmp(whole.p, text, len))))
        abort(); /* byte-level BPE must give back valid UTF-8 text exactly */
    free(whole.p);
    free(ids);

    /* the bytes as token ids (in range after a modulo, some out of range on purpose) */
    const size_t n_ids = len / 4;
    int32_t *raw = malloc((n_ids ? n_ids : 1) * sizeof *raw);
    if (!raw) abort();
    for (size_t i = 0; i < n_ids; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        raw[i] = (v & 0x80000000u) ? (int32_t)(v % (uint32_t)(n_vocab + 8)) : (int32_t)(v % (uint32_t)n_vocab);
    }
    char piece[256];
    for (size_t i = 0; i < n_ids; i++) {
        if (raw[i] >= n_vocab) continue;
        (void)cn_token_to_piece(t, raw[i], render_special, piece, sizeof piece);
    }
    cn_detok *d = NULL;
    if (cn_detok_new(t, render_special, &d) != CN_STATUS_OK) abort();
    for (size_t i = 0; i < n_ids; i++) {
        const char *txt;
        size_t nb;
        st = cn_detok_push(d, raw[i], &txt, &nb);
        if (st == CN_STATUS_OK && !fuzz_utf8_valid(txt, nb)) abort();
        if (st != CN_STATUS_OK && raw[i] < n_vocab) abort(); /* an id in range must decode */
    }
    cn_detok_free(d);
    free(raw);
    return 0;
}

FUZZ_ENTRY(fuzz_tokenizer_one)
