/* utf8.h — strict UTF-8 (utf8.c): validation, replacement, encode and decode of one
 * code point. Strict: no overlong forms, no surrogates, nothing above U+10FFFF.
 * The one codec of the tree: the tokenizers, the Jinja interpreter, the chat templates,
 * stop strings and the grammar front ends use it (the server and the CLI, which stand
 * on cinder.h, clean text with cn_text_utf8_clean). */
#ifndef CN_CORE_UTF8_H
#define CN_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s[0..n): >0 complete and valid; 0 invalid, with
 * *bad the count of bytes to replace by one U+FFFD (the maximal invalid prefix, >= 1);
 * -1 a valid prefix cut short by n. */
int cn_utf8_check(const uint8_t *s, size_t n, size_t *bad);
/* Copies s[0..n) with each invalid sequence (and a truncated one at the end) replaced by
 * U+FFFD; *out is malloc'd (NUL-terminated). Returns false on out of memory. */
bool cn_utf8_sanitize(const char *s, size_t n, char **out, size_t *n_out);
/* Encodes cp (<= 0x10FFFF) into buf (4 bytes); returns the byte count. */
size_t cn_utf8_encode(uint32_t cp, char *buf);
/* Decodes one code point of valid UTF-8 at s (n bytes available); returns its length
 * (1 and U+FFFD for an invalid byte). */
size_t cn_utf8_decode(const char *s, size_t n, uint32_t *cp);

#endif
