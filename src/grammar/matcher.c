/* matcher.c — token masks, commits and rollback for one sequence.
 *
 * The mask of a stack set is the union over its tops of what each top allows. What a top
 * (rule, state) allows splits in two parts:
 *   - tokens it takes without ever returning below its own frame: they depend on the
 *     (rule, state) alone, so they are computed once by walking the whole token trie from
 *     that state over a stand-in parent (GR_SENT) and kept as a bitset (acc);
 *   - tokens whose bytes return below the frame (an "escape": the rule finished and the
 *     parent must take the rest). The walk records where each escape happened; the rests
 *     of those tokens form a small suffix trie, walked at mask time from the real parent.
 * Entries are cached per grammar, and for leaf rules (which call nothing: strings,
 * numbers, literals) in the vocabulary's shared cache, keyed by the DFA itself, so every
 * grammar with the same JSON string rule shares its masks. A cache entry is immutable
 * once inserted; the caches take a lock only to look up and insert.
 *
 * Every walk runs on a pda of its own (ep) whose frames are kept from one walk to the
 * next, so its automaton (walk.c) is kept too: the transitions one walk learned serve
 * the next. Entries' walks start over GR_SENT; a mask's walk from a real parent first
 * copies the parent's stack into ep (hash-consed there, so the same stack is the same
 * frame every time).
 *
 * History: every accepted step (token or text) keeps its stack set and the frame table's
 * mark, so rollback is a truncation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "grammar/grammar_impl.h"

#define GR_CACHE_MAX_ENTRIES 8192
#define GR_WALK_STATES 4096   /* a walk automaton's states (past it a walk keeps its path) */
#define GR_ENTRY_FRAMES 65536 /* the entry pda's frames kept between entries */

typedef struct {
    uint32_t *acc;            /* (n_words) */
    gr_trie suf;              /* rests of the escaping tokens, escapes after their first byte */
    uint32_t *root;           /* escapes at a token's first byte: those nodes (depth 1) of
                                 root_trie, whose whole subtrees the parent walks */
    const gr_trie *root_trie; /* the rest trie when the entry took the slice (its
                                 tokens are in acc already), else the main trie */
    uint32_t n_root;
} gr_entry;

struct gr_cache {
    uint64_t *keys;
    gr_entry **vals;
    uint32_t n, cap;
    /* shared cache only: the leaf DFAs seen, to resolve a rule to its id exactly */
    gr_dfa *dfas;
    uint32_t n_dfas;
    size_t cap_dfas;
};

static void entry_free(gr_entry *e) {
    if (!e) return;
    free(e->acc);
    free(e->root);
    gr_trie_free(&e->suf);
    free(e);
}

void gr_cache_free(gr_cache *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->cap; i++)
        if (c->vals[i]) entry_free(c->vals[i]);
    free(c->keys);
    free(c->vals);
    for (uint32_t i = 0; i < c->n_dfas; i++) gr_dfa_free_tables(&c->dfas[i]);
    free(c->dfas);
    free(c);
}

static uint32_t key_slot(uint64_t k, uint32_t cap) {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32) & (cap - 1);
}

static gr_entry *cache_get(gr_cache *c, uint64_t k) {
    if (!c || !c->cap) return NULL;
    for (uint32_t i = key_slot(k, c->cap); c->vals[i]; i = (i + 1) & (c->cap - 1))
        if (c->keys[i] == k) return c->vals[i];
    return NULL;
}

/* Takes e; returns the entry now cached for k (e, or an earlier one, e then freed), or
 * NULL when the cache is full (the caller keeps e and frees it after use). */
static gr_entry *cache_put(gr_cache **cp, uint64_t k, gr_entry *e) {
    if (!*cp) {
        *cp = calloc(1, sizeof **cp);
        if (!*cp) return NULL;
    }
    gr_cache *c = *cp;
    gr_entry *old = cache_get(c, k);
    if (old) {
        entry_free(e);
        return old;
    }
    if (c->n >= GR_CACHE_MAX_ENTRIES) return NULL;
    if (2 * (c->n + 1) > c->cap) {
        uint32_t nc = c->cap ? c->cap * 2 : 64;
        uint64_t *nk = calloc(nc, sizeof *nk);
        gr_entry **nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return NULL;
        }
        for (uint32_t i = 0; i < c->cap; i++)
            if (c->vals[i]) {
                uint32_t j = key_slot(c->keys[i], nc);
                while (nv[j]) j = (j + 1) & (nc - 1);
                nk[j] = c->keys[i];
                nv[j] = c->vals[i];
            }
        free(c->keys);
        free(c->vals);
        c->keys = nk;
        c->vals = nv;
        c->cap = nc;
    }
    uint32_t i = key_slot(k, c->cap);
    while (c->vals[i]) i = (i + 1) & (c->cap - 1);
    c->keys[i] = k;
    c->vals[i] = e;
    c->n++;
    return e;
}

/* The shared id of a leaf DFA (a copy kept in the shared cache); -1 if it cannot be kept. */
static int32_t shared_dfa_id(gr_cache **cp, const gr_dfa *d) {
    if (!*cp) {
        *cp = calloc(1, sizeof **cp);
        if (!*cp) return -1;
    }
    gr_cache *c = *cp;
    size_t nt = (size_t)d->n_states * d->n_class;
    for (uint32_t i = 0; i < c->n_dfas; i++) {
        const gr_dfa *x = &c->dfas[i];
        if (x->hash == d->hash && x->n_states == d->n_states && x->n_class == d->n_class &&
            memcmp(x->cls, d->cls, 256) == 0 && memcmp(x->accept, d->accept, d->n_states) == 0 &&
            memcmp(x->trans, d->trans, nt * sizeof *d->trans) == 0)
            return (int32_t)i;
    }
    if (c->n_dfas >= 4096) return -1;
    if (!CN_GROW(c->dfas, c->cap_dfas, c->n_dfas + 1)) return -1;
    gr_dfa *x = &c->dfas[c->n_dfas];
    memset(x, 0, sizeof *x);
    x->hash = d->hash;
    x->n_states = d->n_states;
    x->n_class = d->n_class;
    memcpy(x->cls, d->cls, 256);
    x->trans = malloc(nt * sizeof *x->trans + 1);
    x->accept = malloc(d->n_states + 1);
    if (!x->trans || !x->accept) {
        free(x->trans);
        free(x->accept);
        return -1;
    }
    memcpy(x->trans, d->trans, nt * sizeof *x->trans);
    memcpy(x->accept, d->accept, d->n_states);
    return (int32_t)c->n_dfas++;
}

/* ---- the matcher ---- */

typedef struct {
    size_t at, n;    /* the step's stack set in p.tops */
    uint32_t frames; /* the frame table's size after the step */
    bool done;       /* an end-of-generation token was accepted */
} gr_step;

struct gr_matcher {
    const gr_grammar *g;
    gr_vocab *v;
    size_t n_words;
    gr_pda p;
    gr_step *steps;
    size_t n_steps, cap_steps;
    int32_t *shared_id; /* (n_rules) -2: not resolved yet, -1: not shareable */
    gr_pda ep;          /* the walks' pda: frames over GR_SENT, and copies of p's */
    gr_auto ea;         /* the walks' automaton, over ep */
    int32_t *imp;       /* (cap_imp) p's frame i copied into ep: a guess, checked on use */
    size_t cap_imp;
    int32_t *chain; /* (cap_imp) import_frame's scratch */
};

static bool push_step(gr_matcher *m, gr_step s) {
    if (!CN_GROW(m->steps, m->cap_steps, m->n_steps + 1)) return false;
    m->steps[m->n_steps++] = s;
    return true;
}

cn_status gr_matcher_new(const gr_grammar *g, gr_vocab *v, gr_matcher **out, cn_error *err) {
    *out = NULL;
    gr_matcher *m = calloc(1, sizeof *m);
    if (!m) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating a grammar matcher");
    m->g = g;
    m->v = v;
    m->n_words = ((size_t)v->n_vocab + 31) / 32;
    m->shared_id = malloc((g->n_rules + 1) * sizeof *m->shared_id);
    if (!m->shared_id || gr_pda_init(&m->p, g) != 0 || gr_pda_init(&m->ep, g) != 0 || gr_tops_reserve(&m->p, 1) != 0) {
        gr_matcher_free(m);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating a grammar matcher");
    }
    gr_auto_init(&m->ea, &m->ep, GR_WALK_STATES);
    for (uint32_t r = 0; r < g->n_rules; r++) m->shared_id[r] = -2;
    m->p.tops[0] = (gr_top){g->root, 0, GR_BOTTOM};
    m->p.n_tops = 1;
    if (!push_step(m, (gr_step){0, 1, 0, false})) {
        gr_matcher_free(m);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory creating a grammar matcher");
    }
    *out = m;
    return CN_STATUS_OK;
}

void gr_matcher_free(gr_matcher *m) {
    if (!m) return;
    gr_auto_free(&m->ea);
    free(m->imp);
    free(m->chain);
    gr_pda_free(&m->p);
    gr_pda_free(&m->ep);
    free(m->steps);
    free(m->shared_id);
    free(m);
}

static const gr_step *cur(const gr_matcher *m) { return &m->steps[m->n_steps - 1]; }

/* Starts the entries' automaton and frames over (after a failure, or grown too big). */
static void entry_pda_reset(gr_matcher *m) {
    gr_auto_reset(&m->ea);
    gr_frames_truncate(&m->ep, 0);
    m->ep.n_tops = 0;
    m->ep.oom = m->ep.over = false;
}

/* A mask that could not be made: out of memory, or a byte past the work limits. */
static cn_status mask_fail(gr_matcher *m, cn_error *err) {
    const bool over = m->ep.over;
    entry_pda_reset(m);
    if (over)
        return cn_err(err, CN_STATUS_LIMIT,
                      "the grammar is too ambiguous here: one byte needs more than %u parse steps or %u parse stacks",
                      GR_MAX_BYTE_STEPS, GR_MAX_TOPS);
    return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory computing a grammar mask");
}

/* The entry of top (rule, state): a walk from it over GR_SENT, of the rest trie alone
 * when the state takes the whole slice. */
static gr_entry *entry_compute(gr_matcher *m, int32_t rule, int32_t state) {
    gr_pda *p = &m->ep;
    gr_auto *a = &m->ea;
    const gr_vocab *v = m->v;
    if (a->n >= a->max_states || p->fr.n >= GR_ENTRY_FRAMES) entry_pda_reset(m);
    gr_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->acc = calloc(m->n_words, sizeof *e->acc);
    if (!e->acc) goto fail;
    gr_top t0 = {rule, state, GR_SENT};
    int32_t s0 = gr_auto_intern(a, &t0, 1);
    if (s0 < 0) goto fail;
    const gr_trie *t = &v->trie;
    if (gr_auto_slice_ok(a, s0)) {
        memcpy(e->acc, v->slice, m->n_words * sizeof *e->acc);
        t = &v->rest;
    }
    a->n_esc_nodes = 0;
    gr_walk(a, t, 0, t->n_nodes, s0, e->acc, true);
    if (p->oom) goto fail;
    if (a->n_esc_nodes) {
        /* the rests of the escaping tokens that were not accepted outright; an escape at
         * a first byte c keeps the walked trie's subtree of c, walked from the parent */
        size_t n_pairs = 0, n_root = 0;
        for (size_t k = 0; k < a->n_esc_nodes; k++) {
            uint32_t i = a->esc_nodes[k];
            if (t->depth[i] == 1) n_root++;
            else n_pairs += t->tok_first[t->end[i]] - t->tok_first[i];
        }
        if (n_root) {
            e->root = malloc(n_root * sizeof *e->root);
            if (!e->root) goto fail;
            for (size_t k = 0; k < a->n_esc_nodes; k++)
                if (t->depth[a->esc_nodes[k]] == 1) e->root[e->n_root++] = a->esc_nodes[k];
            e->root_trie = t;
        }
        int32_t *ids = malloc((n_pairs + 1) * sizeof *ids);
        const uint8_t **bytes = malloc((n_pairs + 1) * sizeof *bytes);
        uint32_t *len = malloc((n_pairs + 1) * sizeof *len);
        bool ok = ids && bytes && len;
        size_t np = 0;
        for (size_t k = 0; ok && k < a->n_esc_nodes; k++) {
            uint32_t i = a->esc_nodes[k], off = t->depth[i] - 1u;
            if (off == 0) continue;
            for (uint32_t j = t->tok_first[i]; j < t->tok_first[t->end[i]]; j++) {
                int32_t id = t->tok[j];
                if ((e->acc[id >> 5] >> (id & 31)) & 1) continue;
                ids[np] = id;
                bytes[np] = v->bytes[id] + off;
                len[np] = v->len[id] - off;
                np++;
            }
        }
        if (ok && np) ok = gr_trie_build(&e->suf, ids, bytes, len, np) == 0;
        free(ids);
        free(bytes);
        free(len);
        if (!ok) goto fail;
    }
    return e;
fail : {
    const bool over = m->ep.over; /* kept for the caller's message (mask_fail) */
    entry_pda_reset(m);
    m->ep.over = over;
    entry_free(e);
    return NULL;
}
}

/* The entry for (rule, state) from the caches, computing it when missing. *owned: the
 * caller must free it (the cache was full). NULL: no memory. */
static gr_entry *entry_get(gr_matcher *m, int32_t rule, int32_t state, bool *owned) {
    gr_grammar *g = (gr_grammar *)m->g;
    gr_vocab *v = m->v;
    *owned = false;
    const gr_dfa *d = &g->rules[rule];
    pthread_mutex_t *mu = &g->mu;
    gr_cache **cp = &g->cache;
    uint64_t key;
    if (d->leaf) {
        mu = &v->mu;
        cp = &v->shared;
        pthread_mutex_lock(mu);
        if (m->shared_id[rule] == -2) m->shared_id[rule] = shared_dfa_id(cp, d);
        pthread_mutex_unlock(mu);
    }
    if (d->leaf && m->shared_id[rule] >= 0) {
        key = (uint64_t)(uint32_t)m->shared_id[rule] << 32 | (uint32_t)state;
    } else {
        mu = &g->mu;
        cp = &g->cache;
        key = (uint64_t)(uint32_t)rule << 32 | (uint32_t)state;
    }
    pthread_mutex_lock(mu);
    gr_entry *e = cache_get(*cp, key);
    pthread_mutex_unlock(mu);
    if (e) return e;
    gr_entry *ne = entry_compute(m, rule, state);
    if (!ne) return NULL;
    pthread_mutex_lock(mu);
    e = cache_put(cp, key, ne);
    pthread_mutex_unlock(mu);
    if (!e) {
        *owned = true;
        return ne;
    }
    return e;
}

/* Frame f of p (and the stack below it) as a frame of ep; -1: no memory. */
static int32_t import_frame(gr_matcher *m, int32_t f) {
    gr_pda *p = &m->p, *ep = &m->ep;
    if (f < 0) return f;
    if (m->cap_imp < p->fr.n) {
        const size_t nc = cn_grow_cap(m->cap_imp, p->fr.n, sizeof *m->imp);
        if (!nc) return -1;
        int32_t *q = realloc(m->imp, nc * sizeof *q);
        if (q) m->imp = q;
        int32_t *c = q ? realloc(m->chain, nc * sizeof *c) : NULL;
        if (!c) return -1;
        m->chain = c;
        for (size_t i = m->cap_imp; i < nc; i++) m->imp[i] = -1;
        m->cap_imp = nc;
    }
    /* the stack from f down is a chain of strictly smaller indices */
    uint32_t n = 0;
    for (int32_t x = f; x >= 0; x = p->fr.f[x].parent) m->chain[n++] = x;
    int32_t below = GR_BOTTOM;
    while (n--) {
        int32_t x = m->chain[n];
        gr_top want = {p->fr.f[x].rule, p->fr.f[x].state, below};
        int32_t y = m->imp[x];
        if (y < 0 || (uint32_t)y >= ep->fr.n || ep->fr.f[y].rule != want.rule || ep->fr.f[y].state != want.state ||
            ep->fr.f[y].parent != want.parent) {
            y = gr_frame_cons(ep, want);
            if (y < 0) return -1;
            m->imp[x] = y;
        }
        below = y;
    }
    return below;
}

cn_status gr_matcher_mask(gr_matcher *m, uint32_t *mask, cn_error *err) {
    memset(mask, 0, m->n_words * sizeof *mask);
    const gr_step *s = cur(m);
    if (s->done) return CN_STATUS_OK;
    gr_pda *p = &m->p;
    for (size_t i = 0; i < s->n; i++) {
        gr_top t = p->tops[s->at + i];
        bool dup = false;
        for (size_t j = 0; j < i && !dup; j++)
            dup = p->tops[s->at + j].rule == t.rule && p->tops[s->at + j].state == t.state &&
                  p->tops[s->at + j].parent == t.parent;
        if (dup) continue;
        bool owned;
        gr_entry *e = entry_get(m, t.rule, t.state, &owned);
        if (!e) return mask_fail(m, err);
        for (size_t w = 0; w < m->n_words; w++) mask[w] |= e->acc[w];
        bool ok = true;
        if ((e->suf.n_nodes || e->n_root) && t.parent >= 0) {
            /* the escaping tokens' rests, from the real parent */
            gr_auto *a = &m->ea;
            if (a->n >= a->max_states || m->ep.fr.n >= GR_ENTRY_FRAMES) entry_pda_reset(m);
            int32_t pf = import_frame(m, t.parent);
            ok = pf >= 0;
            const gr_trie *vt = e->root_trie;
            /* the start is interned again before each walk: a walk may have renumbered
             * the automaton's states (walk.c, its state budget) */
            for (uint32_t k = 0; ok && k <= e->n_root; k++) {
                if (k == 0 && !e->suf.n_nodes) continue;
                gr_top pt = m->ep.fr.f[pf];
                int32_t s0 = gr_auto_intern(a, &pt, 1);
                ok = s0 >= 0;
                if (ok && k == 0) gr_walk(a, &e->suf, 0, e->suf.n_nodes, s0, mask, false);
                if (ok && k > 0) gr_walk(a, vt, e->root[k - 1], vt->end[e->root[k - 1]], s0, mask, false);
            }
            if (m->ep.oom) ok = false;
        }
        if (owned) entry_free(e);
        if (!ok) return mask_fail(m, err);
    }
    if (gr_tops_can_end(p, p->tops + s->at, s->n))
        for (size_t k = 0; k < m->v->n_eog; k++) {
            uint32_t id = (uint32_t)m->v->eog[k];
            mask[id >> 5] |= 1u << (id & 31);
        }
    return CN_STATUS_OK;
}

bool gr_matcher_accept_bytes(gr_matcher *m, const uint8_t *b, size_t n) {
    const gr_step s = *cur(m);
    if (s.done) return false;
    gr_pda *p = &m->p;
    size_t base = s.at + s.n; /* the history ends here */
    p->n_tops = base;
    size_t at = s.at, cnt = s.n;
    uint32_t fr0 = p->fr.n;
    for (size_t i = 0; i < n; i++) {
        size_t out_at = p->n_tops;
        size_t k = gr_advance(p, at, cnt, b[i]);
        if (k == 0 || p->oom) {
            p->oom = p->over = false;
            p->n_tops = base;
            gr_frames_truncate(p, fr0);
            return false;
        }
        at = out_at;
        cnt = k;
    }
    if (at != base) memmove(p->tops + base, p->tops + at, cnt * sizeof *p->tops);
    p->n_tops = base + cnt;
    if (!push_step(m, (gr_step){base, cnt, p->fr.n, false})) {
        p->n_tops = base;
        gr_frames_truncate(p, fr0);
        return false;
    }
    return true;
}

static bool is_eog(const gr_vocab *v, int32_t token) {
    for (size_t k = 0; k < v->n_eog; k++)
        if (v->eog[k] == token) return true;
    return false;
}

bool gr_matcher_accept(gr_matcher *m, int32_t token) {
    if (token < 0 || token >= m->v->n_vocab) return false;
    const gr_step s = *cur(m);
    if (s.done) return false;
    if (is_eog(m->v, token)) {
        if (!gr_tops_can_end(&m->p, m->p.tops + s.at, s.n)) return false;
        return push_step(m, (gr_step){s.at, s.n, s.frames, true});
    }
    if (!m->v->len[token]) return false;
    return gr_matcher_accept_bytes(m, m->v->bytes[token], m->v->len[token]);
}

bool gr_matcher_is_complete(const gr_matcher *m) {
    const gr_step *s = cur(m);
    return s->done || gr_tops_can_end(&m->p, m->p.tops + s->at, s->n);
}

bool gr_matcher_is_done(const gr_matcher *m) {
    const gr_step *s = cur(m);
    if (s->done) return true;
    return gr_tops_can_end(&m->p, m->p.tops + s->at, s->n) && !gr_tops_can_continue(&m->p, m->p.tops + s->at, s->n);
}

cn_status gr_matcher_rollback(gr_matcher *m, size_t n, cn_error *err) {
    if (n >= m->n_steps)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n", "cannot roll back %zu steps: %zu kept", n, m->n_steps - 1);
    m->n_steps -= n;
    const gr_step *s = cur(m);
    m->p.n_tops = s->at + s->n;
    gr_frames_truncate(&m->p, s->frames);
    return CN_STATUS_OK;
}

void gr_matcher_set_walk_states(gr_matcher *m, uint32_t n) { m->ea.max_states = n; }

size_t gr_matcher_n_steps(const gr_matcher *m) { return m->n_steps - 1; }

void gr_matcher_reset(gr_matcher *m) {
    m->n_steps = 1;
    m->p.n_tops = 1;
    gr_frames_truncate(&m->p, 0);
}
