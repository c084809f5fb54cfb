/* test_tokenizer_util.h — helpers for the tokenizer tests: locating and reading the
 * shared test vectors, tokenizing into a malloc'd array, detokenizing a whole id list,
 * building small vocabularies in memory with the GGUF writer. They fail the current
 * Criterion test on any unexpected error. */
#ifndef CN_TEST_TOKENIZER_UTIL_H
#define CN_TEST_TOKENIZER_UTIL_H

#include "gguf/gguf.h"
#include "text/tokenizer.h"

typedef struct {
    int n;
    char **text; /* (n) NUL-terminated, len[i] bytes */
    size_t *len;
    int32_t **ids; /* (n) expected ids */
    size_t *n_ids;
    char *buf_inp;
} tt_cases;

/* Path of a file in the tokenizer test data ($CINDER_TESTDATA or ../shared/testdata). */
void tt_path(char *out, size_t cap, const char *file);
cn_tokenizer *tt_load_vocab(const char *name);
bool tt_read_cases(const char *name, tt_cases *c);
void tt_free_cases(tt_cases *c);
int32_t *tt_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                     size_t *n);
/* Concatenation of cn_detok output for ids, then a flush; malloc'd. */
char *tt_detok_all(const cn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, size_t *n_text);
void tt_escape(const char *s, size_t n, char *out, size_t cap);

/* An in-memory vocabulary: the writer is filled by the caller, then parsed and loaded.
 * Returns the load status; *t is set on success. The GGUF bytes live in *blob (free). */
cn_status tt_load_written(cn_gguf_writer *w, cn_tokenizer **t, cn_error *err);

#endif
