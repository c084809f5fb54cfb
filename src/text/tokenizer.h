/* tokenizer.h — text ⇄ token ids, built from a GGUF file's tokenizer.ggml.* metadata:
 * SentencePiece-style (model "llama") and byte-level BPE (model "gpt2", pre-tokenizer
 * family from tokenizer.ggml.pre). Also the incremental, UTF-8-safe detokenizer.
 * Knows nothing about models beyond the metadata keys. A loaded tokenizer is read-only:
 * cn_tokenize and cn_token_to_piece may run on many threads at once; a cn_detok belongs
 * to one stream. */
#ifndef CN_TOKENIZER_H
#define CN_TOKENIZER_H

#include "gguf/gguf.h"

/* cn_tokenizer and its queries, cn_tokenize, cn_token_to_piece and cn_detokenize are
 * public (include/cinder.h). */

/* Builds a tokenizer from g's metadata (copies what it needs: g may be closed after). */
cn_status cn_tokenizer_load(const cn_gguf *g, cn_tokenizer **out, cn_error *err);

/* Incremental detokenizer: push ids, get bytes that end on a UTF-8 boundary; holds back
 * an incomplete multi-byte sequence until its last byte arrives. Handles the
 * SentencePiece leading-space rule on the first piece. Bytes that can never become valid
 * UTF-8 come out as U+FFFD, so everything it emits is valid UTF-8. */
typedef struct cn_detok cn_detok;
cn_status cn_detok_new(const cn_tokenizer *t, bool render_special, cn_detok **out);
void cn_detok_free(cn_detok *d);
/* Appends id; *text points at the newly final bytes (view valid until the next call),
 * *n_bytes their count (may be 0). */
cn_status cn_detok_push(cn_detok *d, int32_t id, const char **text, size_t *n_bytes);
/* Emits whatever is held back (an incomplete sequence becomes U+FFFD). */
cn_status cn_detok_flush(cn_detok *d, const char **text, size_t *n_bytes);

/* --- additions beyond the first contract --- */

/* "llama" (SentencePiece-style) or "gpt2" (byte-level BPE), and the pre-tokenizer name. */
const char *cn_tokenizer_model(const cn_tokenizer *t);
const char *cn_tokenizer_pre(const cn_tokenizer *t);
/* The token's text as the vocabulary stores it (▁ and BPE byte characters not undone),
 * NUL-terminated; *n_bytes (may be NULL) its length. NULL if id is out of range. View
 * valid while t lives. */
const char *cn_tokenizer_token_text(const cn_tokenizer *t, int32_t id, size_t *n_bytes);

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (after llama.cpp's fix-ups:
 * end-of-turn texts such as <|im_end|> are control tokens). */
typedef enum {
    CN_TOKEN_UNDEFINED = 0,
    CN_TOKEN_NORMAL = 1,
    CN_TOKEN_UNKNOWN = 2,
    CN_TOKEN_CONTROL = 3,
    CN_TOKEN_USER_DEFINED = 4,
    CN_TOKEN_UNUSED = 5,
    CN_TOKEN_BYTE = 6,
} cn_token_type;
cn_token_type cn_tokenizer_token_type(const cn_tokenizer *t, int32_t id);

/* The detokenizer drops one leading space from the first non-empty piece of a
 * SentencePiece vocabulary with add_space_prefix (so detokenizing a tokenized text gives
 * the text back). When the ids continue a text (streaming a model's answer after a
 * prompt), that space is real: call this with false right after cn_detok_new. */
void cn_detok_set_strip_space(cn_detok *d, bool strip);

#endif
