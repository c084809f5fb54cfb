/* validate.h — the checks every API mapping of the server makes on a request body
 * (openai.c, oai_tools.c, anthropic.c, responses.c, infill.c, embeddings.c): a 400 that
 * names the field, the 503 of a lost allocation, and "only these keys". Each API mapping
 * spells its own field names; these only make the errors. */
#ifndef CN_SERVE_VALIDATE_H
#define CN_SERVE_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve/openai.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A 400 invalid_request_error about param (message from fmt); false, for
 * `return val_bad(e, ...)`. */
bool val_bad(oai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A 503: memory ran out. False. */
bool val_oom(oai_error *e);

bool val_in_list(const char *k, const char *const *list, size_t n);
/* The first key of the object o that allowed[0..n) does not hold, or NULL. */
const char *val_unknown_key(json_t *o, const char *const *allowed, size_t n);
/* Only the keys in allowed[0..n) in the object o; else a 400 (unsupported_parameter)
 * naming path.key ("tools[0].strict"; path "" for the body itself). */
bool val_only_keys(json_t *o, const char *path, const char *const *allowed, size_t n, oai_error *e);

/* The string at o[k], or "" (o not an object, k absent or not a string). */
const char *val_str(json_t *o, const char *k);

#endif
