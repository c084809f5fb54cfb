/* vocab.c — the vocabulary as the matcher sees it: each token's output bytes, the
 * end-of-generation ids, and the token trie (preorder arrays, see grammar_impl.h). One
 * gr_vocab per distinct vocabulary in the process: a registry keyed by the bytes' hash
 * hands the same object to every grammar compiled against an equal vocabulary, so the
 * leaf rules' mask cache (matcher.c) is shared by all of them. */
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/utf8.h"
#include "grammar/grammar_impl.h"

void gr_trie_free(gr_trie *t) {
    free(t->byte);
    free(t->depth);
    free(t->end);
    free(t->tok_first);
    free(t->tok);
    memset(t, 0, sizeof *t);
}

typedef struct {
    const uint8_t *const *bytes;
    const uint32_t *len;
} sort_ctx;

static int cmp_tok(const void *x, const void *y, void *u) {
    const sort_ctx *c = u;
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    uint32_t la = c->len[a], lb = c->len[b];
    int r = memcmp(c->bytes[a], c->bytes[b], la < lb ? la : lb);
    if (r) return r;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

int gr_trie_build(gr_trie *t, const int32_t *ids, const uint8_t *const *bytes, const uint32_t *len, size_t n) {
    memset(t, 0, sizeof *t);
    uint32_t *ord = malloc((n + 1) * sizeof *ord);
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) cap += len[i];
    t->byte = malloc(cap + 1);
    t->depth = malloc((cap + 1) * sizeof *t->depth);
    t->end = malloc((cap + 1) * sizeof *t->end);
    t->tok_first = malloc((cap + 2) * sizeof *t->tok_first);
    t->tok = malloc((n + 1) * sizeof *t->tok);
    uint32_t *path = malloc(65536 * sizeof *path);
    if (!ord || !t->byte || !t->depth || !t->end || !t->tok_first || !t->tok || !path) {
        free(ord);
        free(path);
        gr_trie_free(t);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (len[i] > 0 && len[i] < 65536) ord[m++] = (uint32_t)i;
    sort_ctx c = {bytes, len};
    qsort_r(ord, m, sizeof *ord, cmp_tok, &c);
    uint32_t nn = 0, nt = 0, depth = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (size_t k = 0; k < m; k++) {
        uint32_t i = ord[k];
        const uint8_t *s = bytes[i];
        uint32_t L = len[i], lcp = 0;
        if (prev)
            while (lcp < L && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        while (depth > lcp) t->end[path[--depth]] = nn;
        for (; depth < L; depth++) {
            t->byte[nn] = s[depth];
            t->depth[nn] = (uint16_t)(depth + 1);
            t->tok_first[nn] = nt;
            path[depth] = nn++;
        }
        t->tok[nt++] = ids[i];
        prev = s;
        prev_len = L;
    }
    while (depth > 0) t->end[path[--depth]] = nn;
    t->tok_first[nn] = nt;
    for (uint32_t i = 0; i < nn; i++)
        if (t->depth[i] > t->max_depth) t->max_depth = t->depth[i];
    t->n_nodes = nn;
    free(ord);
    free(path);
    return 0;
}

/* ---- the slice (walk.c) ---- */

/* At most GR_SLICE_MAX_LEN bytes of whole UTF-8 characters, each either a slice byte (printable ASCII but '"' and '\\')
 * or a valid non-ASCII scalar. */
static bool in_slice(const uint8_t *s, uint32_t n) {
    if (n == 0 || n > GR_SLICE_MAX_LEN) return false;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            if (!gr_slice_byte(s[i])) return false;
            i++;
            continue;
        }
        size_t bad;
        int k = cn_utf8_check(s + i, n - i, &bad);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

/* The slice's bitset and the trie of the other tokens (ids: scratch of n_vocab). 0 or
 * -1 (no memory). */
static int build_slice(gr_vocab *v, int32_t *ids) {
    size_t n_words = ((size_t)v->n_vocab + 31) / 32;
    v->slice = calloc(n_words, sizeof *v->slice);
    if (!v->slice) return -1;
    size_t n_rest = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        if (!v->len[i]) continue;
        if (in_slice(v->bytes[i], v->len[i])) v->slice[i >> 5] |= 1u << (i & 31);
        else ids[n_rest++] = i;
    }
    const uint8_t **b = malloc((n_rest + 1) * sizeof *b);
    uint32_t *l = malloc((n_rest + 1) * sizeof *l);
    int r = b && l ? 0 : -1;
    for (size_t k = 0; r == 0 && k < n_rest; k++) {
        b[k] = v->bytes[ids[k]];
        l[k] = v->len[ids[k]];
    }
    if (r == 0) r = gr_trie_build(&v->rest, ids, b, l, n_rest);
    free(b);
    free(l);
    return r;
}

/* ---- the registry ---- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static gr_vocab **reg;
static size_t n_reg, cap_reg;

static void vocab_destroy(gr_vocab *v) {
    if (!v) return;
    if (v->bytes)
        for (int32_t i = 0; i < v->n_vocab; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->eog);
    gr_trie_free(&v->trie);
    free(v->slice);
    gr_trie_free(&v->rest);
    gr_cache_free(v->shared);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

static bool vocab_equal(const gr_vocab *a, const gr_vocab *b) {
    if (a->n_vocab != b->n_vocab || a->hash != b->hash || a->n_eog != b->n_eog) return false;
    if (memcmp(a->eog, b->eog, a->n_eog * sizeof *a->eog) != 0) return false;
    for (int32_t i = 0; i < a->n_vocab; i++) {
        if (a->len[i] != b->len[i]) return false;
        if (a->len[i] && memcmp(a->bytes[i], b->bytes[i], a->len[i]) != 0) return false;
    }
    return true;
}

cn_status gr_vocab_new(int32_t n_vocab, const char *const *bytes, const size_t *len, const int32_t *eog, size_t n_eog,
                       gr_vocab **out, cn_error *err) {
    *out = NULL;
    if (n_vocab <= 0) return cn_err(err, CN_STATUS_INVALID_ARG, "the vocabulary is empty");
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory building the grammar vocabulary");
    pthread_mutex_init(&v->mu, NULL);
    v->refs = 1;
    v->n_vocab = n_vocab;
    v->bytes = calloc((size_t)n_vocab, sizeof *v->bytes);
    v->len = calloc((size_t)n_vocab, sizeof *v->len);
    v->eog = malloc((n_eog + 1) * sizeof *v->eog);
    int32_t *ids = malloc((size_t)n_vocab * sizeof *ids);
    if (!v->bytes || !v->len || !v->eog || !ids) goto oom;
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n_vocab; i++) {
        ids[i] = i;
        size_t L = bytes && bytes[i] ? len[i] : 0;
        if (L >= 65536) L = 0;
        v->len[i] = (uint32_t)L;
        if (L) {
            v->bytes[i] = malloc(L);
            if (!v->bytes[i]) goto oom;
            memcpy(v->bytes[i], bytes[i], L);
        }
        for (size_t k = 0; k < L; k++) h = (h ^ (uint8_t)bytes[i][k]) * 1099511628211ull;
        h = (h ^ (0x100 + L)) * 1099511628211ull;
    }
    size_t ne = 0;
    for (size_t k = 0; k < n_eog; k++)
        if (eog[k] >= 0 && eog[k] < n_vocab) v->eog[ne++] = eog[k];
    v->n_eog = ne;
    for (size_t k = 0; k < ne; k++) h = (h ^ (uint32_t)v->eog[k]) * 1099511628211ull;
    v->hash = h;
    /* an end-of-generation token is never a text token */
    for (size_t k = 0; k < ne; k++) v->len[v->eog[k]] = 0;
    if (gr_trie_build(&v->trie, ids, (const uint8_t *const *)v->bytes, v->len, (size_t)n_vocab) != 0 ||
        build_slice(v, ids) != 0)
        goto oom;
    free(ids);

    pthread_mutex_lock(&reg_mu);
    for (size_t i = 0; i < n_reg; i++)
        if (vocab_equal(reg[i], v)) {
            gr_vocab *same = reg[i];
            same->refs++;
            pthread_mutex_unlock(&reg_mu);
            vocab_destroy(v);
            *out = same;
            return CN_STATUS_OK;
        }
    if (!CN_GROW(reg, cap_reg, n_reg + 1)) {
        pthread_mutex_unlock(&reg_mu);
        vocab_destroy(v);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory building the grammar vocabulary");
    }
    reg[n_reg++] = v;
    pthread_mutex_unlock(&reg_mu);
    *out = v;
    return CN_STATUS_OK;
oom:
    free(ids);
    vocab_destroy(v);
    return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory building the grammar vocabulary");
}

cn_status gr_vocab_from_tokenizer(const cn_tokenizer *t, gr_vocab **out, cn_error *err) {
    *out = NULL;
    int32_t n = cn_tokenizer_n_vocab(t);
    if (n <= 0) return cn_err(err, CN_STATUS_INVALID_ARG, "the tokenizer has no vocabulary");
    char **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *len = calloc((size_t)n, sizeof *len);
    int32_t *eog = malloc((size_t)n * sizeof *eog);
    cn_status st = CN_STATUS_NO_MEMORY;
    size_t n_eog = 0;
    if (!bytes || !len || !eog) goto done;
    char buf[256];
    for (int32_t i = 0; i < n; i++) {
        if (cn_tokenizer_is_eog(t, i)) {
            eog[n_eog++] = i;
            continue;
        }
        size_t L = cn_token_to_piece(t, i, false, buf, sizeof buf);
        if (L == 0) continue;
        bytes[i] = malloc(L);
        if (!bytes[i]) goto done;
        if (L > sizeof buf) cn_token_to_piece(t, i, false, bytes[i], L);
        else memcpy(bytes[i], buf, L);
        len[i] = L;
    }
    st = gr_vocab_new(n, (const char *const *)bytes, len, eog, n_eog, out, err);
done:
    if (st == CN_STATUS_NO_MEMORY && !*out) cn_err(err, st, "out of memory building the grammar vocabulary");
    if (bytes)
        for (int32_t i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(len);
    free(eog);
    return st;
}

gr_vocab *gr_vocab_ref(gr_vocab *v) {
    pthread_mutex_lock(&reg_mu);
    v->refs++;
    pthread_mutex_unlock(&reg_mu);
    return v;
}

void gr_vocab_free(gr_vocab *v) {
    if (!v) return;
    pthread_mutex_lock(&reg_mu);
    bool last = --v->refs == 0;
    if (last)
        for (size_t i = 0; i < n_reg; i++)
            if (reg[i] == v) {
                reg[i] = reg[--n_reg];
                break;
            }
    if (last && n_reg == 0) {
        free(reg);
        reg = NULL;
        cap_reg = 0;
    }
    pthread_mutex_unlock(&reg_mu);
    if (last) vocab_destroy(v);
}
