/* json_mem.h — jansson's memory for the server: an allocator that marks a thread whose
 * JSON work lost an allocation, and a parse that a failed allocation cannot turn into a
 * buffer overrun (json_mem.c says why). */
#ifndef CN_SERVE_JSON_MEM_H
#define CN_SERVE_JSON_MEM_H

#include <jansson.h>
#include <stdbool.h>

/* Makes jansson allocate through json_mem (once per process; later calls do nothing). */
void json_mem_init(void);
/* True if a jansson allocation failed on this thread since the last call: whatever JSON
 * the thread parsed or built since then is not trusted. */
bool json_mem_failed(void);
/* json_loadb, with a failed allocation served from a reserve (the thread still marked).
 * Free what it returns with json_decref only. */
json_t *json_mem_load(const char *s, size_t n, size_t flags, json_error_t *je);

#endif
