/* tokenizer_spm.c — SentencePiece-style tokenization of one raw fragment (model
 * "llama"): spaces become U+2581 "▁" (with a leading one when asked), the text is split
 * into UTF-8 characters, then adjacent symbols are merged greedily, always the pair
 * whose merged text is a vocabulary token of the highest score (ties: the leftmost),
 * until no pair forms a token. Symbols left that are not tokens fall back to byte
 * tokens <0xXX> (or the unknown token). This is the algorithm of llama.cpp's
 * llm_tokenizer_spm, reimplemented so ids match it exactly. No special tokens here: the
 * driver in tokenizer.c has already cut them out. */
#include "text/merge_heap.h"
#include "text/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
    uint32_t off, n;    /* bytes [off, off + n) of the escaped text; n == 0: merged away */
} spm_sym;

static bool try_bigram(const cn_tokenizer *t, const char *s, const spm_sym *sym, int32_t l, int32_t r,
                       cn_merge_heap *h) {
    if (l < 0 || r < 0) return true;
    uint32_t size = sym[l].n + sym[r].n; /* the two are adjacent in s */
    int32_t id = cn_tok_lookup(t, s + sym[l].off, size);
    if (id < 0) return true;
    cn_merge b = {l, r, -(double)t->score[id], (int32_t)size, 0};
    return cn_merge_push(h, b);
}

/* Emits a final symbol: its token, or its bytes as byte tokens, or the unknown token. */
static bool emit_symbol(const cn_tokenizer *t, const char *s, const spm_sym *y, cn_tok_vec *out) {
    int32_t id = cn_tok_lookup(t, s + y->off, y->n);
    if (id >= 0) return cn_tok_vec_push(out, id);
    bool all_bytes = true;
    for (uint32_t j = 0; j < y->n; j++)
        if (t->byte_tok[(uint8_t)s[y->off + j]] < 0) all_bytes = false;
    if (all_bytes) {
        for (uint32_t j = 0; j < y->n; j++)
            if (!cn_tok_vec_push(out, t->byte_tok[(uint8_t)s[y->off + j]])) return false;
        return true;
    }
    if (t->unk >= 0) return cn_tok_vec_push(out, t->unk);
    return true;
}

cn_status cn_spm_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool prefix_space, cn_tok_vec *out,
                          cn_error *err) {
    /* Escape: ' ' -> "▁" (3 bytes), plus the optional leading one. */
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++) n_sp += text[i] == ' ';
    uint64_t cap;
    if (!cn_mul_ok(n_sp, 2, &cap) || !cn_add_ok(cap, len + (prefix_space ? 3 : 0), &cap) || cap >= UINT32_MAX)
        return cn_err(err, CN_STATUS_LIMIT, "text of %zu bytes is too long to tokenize", len);
    if (cap == 0) return CN_STATUS_OK;
    char *s = malloc((size_t)cap);
    spm_sym *sym = malloc((size_t)cap * sizeof *sym);
    cn_merge_heap h = {0};
    cn_status st = CN_STATUS_NO_MEMORY;
    if (!s || !sym) goto done;
    size_t k = 0;
    if (prefix_space) {
        memcpy(s, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            s[k++] = text[i];
        }
    }

    /* One symbol per character. llama.cpp takes the length from the lead byte alone;
     * for valid UTF-8 that is the same, but on invalid input it would let a stray lead
     * byte swallow part of a following "▁", so a byte that starts no valid sequence is a
     * symbol of its own here (it becomes a byte token either way). */
    int32_t n_sym = 0;
    for (size_t off = 0; off < k;) {
        size_t bad;
        int r = cn_utf8_check((const uint8_t *)s + off, k - off, &bad);
        size_t n = r > 0 ? (size_t)r : 1;
        sym[n_sym] = (spm_sym){n_sym - 1, off + n == k ? -1 : n_sym + 1, (uint32_t)off, (uint32_t)n};
        n_sym++;
        off += n;
    }
    for (int32_t i = 1; i < n_sym; i++)
        if (!try_bigram(t, s, sym, i - 1, i, &h)) goto done;

    while (h.n) {
        cn_merge b = cn_merge_pop(&h);
        spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != (uint32_t)b.tag0) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (!try_bigram(t, s, sym, l->prev, b.left, &h)) goto done;
        if (!try_bigram(t, s, sym, b.left, l->next, &h)) goto done;
    }
    for (int32_t i = 0; i != -1 && n_sym > 0; i = sym[i].next)
        if (!emit_symbol(t, s, &sym[i], out)) goto done;
    st = CN_STATUS_OK;
done:
    free(s);
    free(sym);
    free(h.v);
    if (st != CN_STATUS_OK) return cn_err(err, st, "out of memory while tokenizing");
    return st;
}
