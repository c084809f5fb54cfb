/* gcache.c — the compiled-grammar LRU (see gcache.h for the contract).
 *
 * A small array scanned linearly: a few dozen entries, each compared by a 64-bit hash
 * before its bytes, cost nothing next to one compile. Recency is a counter stamped on
 * each use; the entry with the oldest stamp goes first. Compiling happens outside the
 * lock, so one slow schema never holds up another request's lookup. */
#include "serve/gcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const cn_tokenizer *tok;
    cn_grammar_kind kind;
    bool flex;
    uint64_t hash;
    char *key;
    size_t key_len;
    cn_grammar *g; /* the cache's reference */
    uint64_t used; /* recency stamp */
} entry;

struct gcache {
    pthread_mutex_t mu;
    entry *e; /* (max_entries) */
    size_t n, max_entries;
    size_t key_bytes, max_key_bytes;
    uint64_t tick;
    gcache_stats st;
};

static uint64_t fnv1a(const char *s, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t key_hash(cn_grammar_kind kind, bool flex, const char *key, size_t n) {
    const char head[2] = {(char)kind, (char)flex};
    return fnv1a(key, n, fnv1a(head, 2, 0xcbf29ce484222325ull));
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

gcache *gcache_new(size_t max_entries, size_t max_key_bytes) {
    gcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max_entries = max_entries ? max_entries : GCACHE_DEFAULT_ENTRIES;
    c->max_key_bytes = max_key_bytes ? max_key_bytes : GCACHE_DEFAULT_KEY_BYTES;
    c->e = calloc(c->max_entries, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void drop(gcache *c, size_t i) {
    cn_grammar_free(c->e[i].g);
    free(c->e[i].key);
    c->key_bytes -= c->e[i].key_len;
    c->e[i] = c->e[--c->n];
    memset(&c->e[c->n], 0, sizeof c->e[c->n]);
}

void gcache_free(gcache *c) {
    if (!c) return;
    while (c->n > 0) drop(c, c->n - 1);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The entry for the key, or -1 (lock held). */
static long find(const gcache *c, const cn_tokenizer *tok, cn_grammar_kind kind, bool flex, uint64_t h, const char *key,
                 size_t n) {
    for (size_t i = 0; i < c->n; i++) {
        const entry *x = &c->e[i];
        if (x->hash == h && x->tok == tok && x->kind == kind && x->flex == flex && x->key_len == n &&
            !memcmp(x->key, key, n))
            return (long)i;
    }
    return -1;
}

/* Keeps g under the key (lock held), evicting the least recently used entries until it
 * fits; a key larger than the whole byte budget is not kept. */
static void insert(gcache *c, const cn_tokenizer *tok, cn_grammar_kind kind, bool flex, uint64_t h, const char *key,
                   size_t n, cn_grammar *g) {
    if (n > c->max_key_bytes) return;
    char *copy = malloc(n ? n : 1);
    if (!copy) return; /* not cached: the request still has its grammar */
    memcpy(copy, key, n);
    while (c->n > 0 && (c->n == c->max_entries || c->key_bytes + n > c->max_key_bytes)) {
        size_t lru = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        drop(c, lru);
        c->st.evictions++;
    }
    c->e[c->n++] = (entry){tok, kind, flex, h, copy, n, cn_grammar_ref(g), ++c->tick};
    c->key_bytes += n;
}

cn_status gcache_get(gcache *c, const cn_tokenizer *tok, const cn_grammar_params *p, const char *key, size_t key_len,
                     cn_grammar **out, bool *hit, cn_error *err) {
    *out = NULL;
    if (hit) *hit = false;
    if (!c) return cn_grammar_compile(tok, p, out, err);
    const bool flex = p->flexible_whitespace;
    const uint64_t h = key_hash(p->kind, flex, key, key_len);
    pthread_mutex_lock(&c->mu);
    long i = find(c, tok, p->kind, flex, h, key, key_len);
    if (i >= 0) {
        c->e[i].used = ++c->tick;
        *out = cn_grammar_ref(c->e[i].g);
        c->st.hits++;
        pthread_mutex_unlock(&c->mu);
        if (hit) *hit = true;
        return CN_STATUS_OK;
    }
    c->st.misses++;
    pthread_mutex_unlock(&c->mu);

    const double t0 = now_s();
    cn_grammar *g = NULL;
    const cn_status st = cn_grammar_compile(tok, p, &g, err);
    const double dt = now_s() - t0;

    pthread_mutex_lock(&c->mu);
    c->st.compile_s_sum += dt;
    c->st.n_compiles++;
    if (st != CN_STATUS_OK) {
        c->st.errors++;
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    i = find(c, tok, p->kind, flex, h, key, key_len); /* another request compiled it meanwhile */
    if (i >= 0) {
        c->e[i].used = ++c->tick;
        cn_grammar_free(g);
        g = cn_grammar_ref(c->e[i].g);
    } else {
        insert(c, tok, p->kind, flex, h, key, key_len, g);
    }
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return CN_STATUS_OK;
}

void gcache_get_stats(gcache *c, gcache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->n_entries = c->n;
    pthread_mutex_unlock(&c->mu);
}

void gcache_drop_tokenizer(gcache *c, const cn_tokenizer *tok) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = c->n; i-- > 0;)
        if (c->e[i].tok == tok) drop(c, i);
    pthread_mutex_unlock(&c->mu);
}
