/* tokenizer_impl.h — internals shared by the tokenizer files (tokenizer.c: loading,
 * special tokens, the tokenize driver and the detokenizer; tokenizer_spm.c: the
 * SentencePiece-style bigram merge; tokenizer_bpe.c: byte-level BPE and its
 * pre-tokenizer regexes; merge_heap.c: the merge queue both merges run; UTF-8 is
 * core/utf8.h). Calls go one way: tokenizer.c calls the SPM and BPE files, they
 * call merge_heap.c, and nothing calls back up into tokenizer.c —
 * which is why the small helpers over the struct below are inline here. Not a public
 * header: only src/text/tokenizer*.c (and the tokenizer tests) include it. */
#ifndef CN_TOKENIZER_IMPL_H
#define CN_TOKENIZER_IMPL_H

#include "text/tokenizer.h"
#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

/* What a vocabulary may claim before it is rejected. */
#define CN_TOK_MAX_VOCAB (1 << 24)
#define CN_TOK_MAX_MERGES (1 << 24)
#define CN_TOK_MAX_REGEXES 8

typedef enum { CN_TOK_SPM = 1, CN_TOK_BPE = 2 } cn_tok_kind;

/* Per-token attribute bits (the GGUF token type becomes one of the first six; the
 * strip bits come from model-specific rules, as llama.cpp sets them). */
enum {
    CN_TA_NORMAL = 1 << 0,
    CN_TA_UNKNOWN = 1 << 1,
    CN_TA_CONTROL = 1 << 2,
    CN_TA_USER_DEFINED = 1 << 3,
    CN_TA_UNUSED = 1 << 4,
    CN_TA_BYTE = 1 << 5,
    CN_TA_LSTRIP = 1 << 6, /* eat whitespace before the token when matched in text */
    CN_TA_RSTRIP = 1 << 7, /* eat whitespace after it */
};
#define CN_TA_SPECIAL (CN_TA_CONTROL | CN_TA_UNKNOWN)

/* A growable array of token ids. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} cn_tok_vec;

/* Appends id; false on out of memory. */
static inline bool cn_tok_vec_push(cn_tok_vec *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return true;
}

/* One node of the byte trie over special-token texts. */
typedef struct {
    int32_t first_child, next_sibling;
    int32_t id; /* token ending here, -1 if none */
    uint8_t byte;
} cn_tok_trie_node;

typedef struct cn_bpe_pre cn_bpe_pre; /* compiled pre-tokenizer regexes (tokenizer_bpe.c) */

struct cn_tokenizer {
    cn_tok_kind kind;
    int32_t n_vocab;

    char *pool;         /* every token text, each followed by a NUL */
    uint32_t *text_off; /* (n_vocab) offset into pool */
    uint32_t *text_len; /* (n_vocab) bytes, not counting the NUL */
    float *score;       /* (n_vocab) SentencePiece scores; 0 when the file has none */
    uint16_t *attr;     /* (n_vocab) CN_TA_* bits */
    uint8_t *eog;       /* (n_vocab) 1 for end-of-generation tokens */

    int32_t *hash; /* (hash_mask + 1) open addressing, token text -> id, -1 empty */
    uint32_t hash_mask;

    /* Special tokens matched in input text (control, user-defined, unknown). */
    cn_tok_trie_node *trie;
    int32_t n_trie;
    size_t cap_trie;
    int32_t trie_root[256]; /* first-level children by byte, -1 if none */
    int32_t *special_rank;  /* (n_vocab) order in which specials claim text, -1 if none */

    int32_t bos, eos, eot, eom, unk, sep, pad;
    int32_t fim[CN_FIM_N_TOKENS]; /* fill-in-the-middle tokens by cn_fim_token, -1 if none */
    bool add_bos, add_eos, add_space_prefix;

    /* SPM: token for each byte (<0xXX>, else the raw one-byte text), -1 if none. */
    int32_t byte_tok[256];

    /* BPE */
    uint64_t *merge_key; /* (merge_mask + 1) (left id << 32 | right id), UINT64_MAX empty */
    int32_t *merge_rank; /* rank (line number in tokenizer.ggml.merges) */
    int32_t *merge_out;  /* id of the merged token */
    uint32_t merge_mask;
    int32_t n_merges;
    bool ignore_merges;        /* a whole pre-token that is in the vocab is taken as is */
    int32_t bpe_byte_tok[256]; /* token of each byte's byte-to-unicode character, -1 */
    cn_bpe_pre *pre;
    char pre_name[64];
};

static inline const char *cn_tok_text(const cn_tokenizer *t, int32_t id) { return t->pool + t->text_off[id]; }

/* The hash of a token text in t->hash (tokenizer.c fills the table with it). */
static inline uint64_t cn_tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

/* Token text lookup; -1 if absent. */
static inline int32_t cn_tok_lookup(const cn_tokenizer *t, const char *s, size_t n) {
    for (uint32_t i = (uint32_t)cn_tok_hash(s, n) & t->hash_mask;; i = (i + 1) & t->hash_mask) {
        int32_t id = t->hash[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && !memcmp(cn_tok_text(t, id), s, n)) return id;
    }
}

/* --- SentencePiece merge (tokenizer_spm.c) --- */
/* Tokenizes one raw fragment (no special tokens in it). prefix_space: add the leading
 * space (add_space_prefix after the start of text or a special token). */
cn_status cn_spm_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool prefix_space, cn_tok_vec *out,
                          cn_error *err);

/* --- byte-level BPE (tokenizer_bpe.c) --- */
/* Byte-to-unicode table of GPT-2: the code point standing for each byte, and back
 * (-1 for code points that stand for no byte). */
uint32_t cn_bpe_byte_to_cp(uint8_t b);
int cn_bpe_cp_to_byte(uint32_t cp);
/* Reads tokenizer.ggml.merges and builds the pre-tokenizer for pre_name (NULL: none
 * given). Sets t->merge_*, t->pre, t->ignore_merges; may change *add_bos_default. */
cn_status cn_bpe_load(cn_tokenizer *t, const cn_gguf *g, const char *pre_name, bool *add_bos_default, bool *bos_none,
                      cn_error *err);
void cn_bpe_free(cn_tokenizer *t);
cn_status cn_bpe_tokenize(const cn_tokenizer *t, const char *text, size_t len, cn_tok_vec *out, cn_error *err);
/* Splits text into pre-tokens with t's regex list; *offs gets pairs (start, end) in
 * bytes of the sanitized text *clean (both malloc'd). For tests. */
cn_status cn_bpe_pretokenize(const cn_tokenizer *t, const char *text, size_t len, char **clean, size_t **offs,
                             size_t *n_words, cn_error *err);

#endif
