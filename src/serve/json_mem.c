/* json_mem.c — jansson's allocations in the server.
 *
 * jansson reports few of its allocation failures: inside its lexer one reads as a syntax
 * error, or even as a shorter string (found by tests/alloc/alloc_fail.c), and
 * json_object_set_new's result is rarely checked. So its allocator is ours, and a
 * failure marks the thread: whatever JSON that thread parsed or built since it last
 * asked is not trusted (json_mem_failed).
 *
 * Worse, a failed append to the lexer's saved text can drop a string's closing quote, and
 * the lexer then copies past its buffer (a 14-character string is enough:
 * "stop_sequences"). So while json_mem_load parses, a failed allocation is served from a
 * reserve instead, still marking the thread: the lexer never sees NULL while the reserve
 * lasts (1 MiB, for the whole process: failures are rare), and the caller refuses the
 * request as before. Only there: what a parse makes is freed through jansson (json_free
 * skips reserve blocks, which are never reused), while json_dumps' text is freed by its
 * callers with free(). */
#include "serve/json_mem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static __thread bool json_oom;
static __thread bool json_parsing;
static _Alignas(16) char json_reserve[1 << 20];
static size_t json_reserve_used; /* atomic */

static void *json_alloc(size_t n) {
    void *p = malloc(n);
    if (p) return p;
    json_oom = true;
    const size_t need = (n + 15) & ~(size_t)15;
    if (!json_parsing || need < n || need > sizeof json_reserve) return NULL;
    const size_t at = __atomic_fetch_add(&json_reserve_used, need, __ATOMIC_RELAXED);
    return at <= sizeof json_reserve - need ? json_reserve + at : NULL;
}

static void json_free(void *p) {
    const uintptr_t u = (uintptr_t)p, r = (uintptr_t)json_reserve;
    if (u >= r && u - r < sizeof json_reserve) return;
    free(p);
}

static pthread_once_t json_once = PTHREAD_ONCE_INIT;
static void json_set(void) { json_set_alloc_funcs(json_alloc, json_free); }

void json_mem_init(void) { pthread_once(&json_once, json_set); }

bool json_mem_failed(void) {
    const bool f = json_oom;
    json_oom = false;
    return f;
}

json_t *json_mem_load(const char *s, size_t n, size_t flags, json_error_t *je) {
    json_parsing = true;
    json_t *v = json_loadb(s, n, flags, je);
    json_parsing = false;
    return v;
}
