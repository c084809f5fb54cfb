/* gcache.h — the server's cache of compiled grammars: clients send the same JSON Schema
 * (or GBNF, regex, choice list) with every request, and compiling it against a
 * 150k-token vocabulary costs far more than a decode step, so each distinct one is
 * compiled once and shared.
 *
 * An LRU of at most max_entries grammars (and max_key_bytes of keys), keyed by the
 * tokenizer, the kind, flexible_whitespace and the exact source bytes the caller gives
 * (openai.c gives canonical JSON text for schemas, so whitespace and escapes do not
 * matter but property order does). The cache holds one reference per entry; a lookup
 * hands out another (cn_grammar_ref), so an evicted grammar lives on in the requests that
 * use it. Thread-safe: one mutex, never held while compiling (two requests missing the
 * same key at once both compile; the first to finish is kept). */
#ifndef CN_SERVE_GCACHE_H
#define CN_SERVE_GCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinder.h"

#define GCACHE_DEFAULT_ENTRIES 64
#define GCACHE_DEFAULT_KEY_BYTES ((size_t)64 << 20)

typedef struct gcache gcache;

/* What /metrics shows of the cache. */
typedef struct {
    uint64_t hits, misses; /* lookups answered from the cache / compiled */
    uint64_t errors;       /* compiles that failed (bad input or budget) */
    uint64_t evictions;
    uint64_t n_entries;
    double compile_s_sum; /* time spent compiling (misses), seconds */
    uint64_t n_compiles;
} gcache_stats;

/* max_entries 0: GCACHE_DEFAULT_ENTRIES; max_key_bytes 0: GCACHE_DEFAULT_KEY_BYTES.
 * NULL: out of memory. */
gcache *gcache_new(size_t max_entries, size_t max_key_bytes);
void gcache_free(gcache *c); /* NULL: no-op; drops the cache's references */

/* The grammar of p for tok, from the cache or compiled (and then cached): key[0..key_len)
 * names p exactly (together with tok, p->kind and p->flexible_whitespace). *out is the
 * caller's reference (cn_grammar_free it); *hit (may be NULL) says whether it was cached.
 * c NULL: compiles without caching. Errors: cn_grammar_compile's. */
cn_status gcache_get(gcache *c, const cn_tokenizer *tok, const cn_grammar_params *p, const char *key, size_t key_len,
                     cn_grammar **out, bool *hit, cn_error *err);

void gcache_get_stats(gcache *c, gcache_stats *out); /* c NULL: zeros */

/* Drops every grammar compiled for tok: its model is being unloaded, and a tokenizer
 * loaded later may get the same address (the key would find a grammar of another
 * vocabulary). No request may be compiling for tok meanwhile. c NULL: no-op. */
void gcache_drop_tokenizer(gcache *c, const cn_tokenizer *tok);

#endif
