/* walk.c — taking a stack set down a token trie: every token whose bytes the set takes
 * gets its bit in a mask. The matcher's masks and cache entries are all walks.
 *
 * A walk meets few distinct stack sets however many nodes it visits (a string's interior
 * is one or two sets for a hundred thousand tokens), so each set met becomes a state of
 * a lazy automaton (gr_auto) whose transitions — gr_advance, once per state and byte —
 * are kept; the walk itself is then one table lookup per trie node. An automaton may
 * outlive a walk (the matcher keeps one over a pda whose frames are never truncated, for
 * the cache entries), or be reset before each (over the matcher's own pda, whose frames
 * come and go with its history).
 *
 * The slice: most of a vocabulary (94% of Qwen2.5's) is plain string text of at most
 * GR_SLICE_MAX_LEN bytes, tokens made of whole UTF-8 characters none of which JSON must
 * escape. A state that takes every such text without dying
 * (gr_auto_slice_ok: a search over the automaton to that depth, byte by byte through
 * UTF-8's structure) takes the whole slice, one bitset OR, and only the other tokens
 * need walking (the vocabulary's rest trie). The length bound lets a string with a
 * maxLength use it until its last characters. Inside a JSON string or a
 * property name that is nearly every walk that would have visited the whole trie. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "grammar/grammar_impl.h"

#define W_UNKNOWN (-2)
#define W_SLICE_PAIRS 2048 /* (state, UTF-8 position) pairs one slice search may visit */
#define W_SLICE_SLOTS 8192 /* its visited set's hash slots (a power of two > 2 * pairs) */

static int top_cmp(gr_top a, gr_top b) {
    if (a.rule != b.rule) return a.rule < b.rule ? -1 : 1;
    if (a.state != b.state) return a.state < b.state ? -1 : 1;
    if (a.parent != b.parent) return a.parent < b.parent ? -1 : 1;
    return 0;
}

/* Sorts t[0..n) (sets are small: insertion sort) and drops repeats; returns the new n. */
static size_t tops_canon(gr_top *t, size_t n) {
    for (size_t i = 1; i < n; i++) {
        gr_top x = t[i];
        size_t j = i;
        while (j > 0 && top_cmp(t[j - 1], x) > 0) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = x;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || top_cmp(t[k - 1], t[i]) != 0) t[k++] = t[i];
    return k;
}

static uint64_t tops_hash(const gr_top *t, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uint32_t)t[i].rule) * 0x100000001B3ull;
        h = (h ^ (uint32_t)t[i].state) * 0x100000001B3ull;
        h = (h ^ (uint32_t)t[i].parent) * 0x100000001B3ull;
    }
    return h ^ (h >> 29);
}

void gr_auto_init(gr_auto *a, gr_pda *p, uint32_t max_states) {
    memset(a, 0, sizeof *a);
    a->p = p;
    a->max_states = max_states;
}

void gr_auto_free(gr_auto *a) {
    free(a->st);
    free(a->next);
    free(a->esc);
    free(a->slice);
    free(a->chain);
    free(a->head);
    free(a->tops);
    free(a->path);
    free(a->found);
    free(a->seen);
    free(a->found_depth);
    free(a->esc_nodes);
    memset(a, 0, sizeof *a);
}

void gr_auto_reset(gr_auto *a) {
    for (uint32_t s = 0; s < a->n; s++) a->head[a->st[s].h & (a->n_head - 1)] = -1;
    a->n = 0;
    a->n_tops = 0;
}

static bool grow(gr_auto *a) {
    const size_t nc = cn_grow_cap(a->cap, (size_t)a->n + 1, 256 * sizeof *a->next);
    if (!nc) return false;
    gr_astate *w = realloc(a->st, nc * sizeof *w);
    if (w) a->st = w;
    int32_t *nx = w ? realloc(a->next, nc * 256 * sizeof *nx) : NULL;
    if (nx) a->next = nx;
    uint8_t *e = nx ? realloc(a->esc, nc * 256) : NULL;
    if (e) a->esc = e;
    int8_t *sl = e ? realloc(a->slice, nc) : NULL;
    if (sl) a->slice = sl;
    int32_t *ch = sl ? realloc(a->chain, nc * sizeof *ch) : NULL;
    if (!ch) return false;
    a->chain = ch;
    a->cap = nc;
    if (nc > a->n_head) {
        int32_t *h = realloc(a->head, 2 * nc * sizeof *h);
        if (!h) return false;
        a->head = h;
        a->n_head = (uint32_t)(2 * nc);
        for (uint32_t i = 0; i < a->n_head; i++) a->head[i] = -1;
        for (uint32_t s = 0; s < a->n; s++) {
            uint32_t k = (uint32_t)a->st[s].h & (a->n_head - 1);
            a->chain[s] = a->head[k];
            a->head[k] = (int32_t)s;
        }
    }
    return true;
}

int32_t gr_auto_intern(gr_auto *a, gr_top *t, size_t n) {
    n = tops_canon(t, n);
    uint64_t h = tops_hash(t, n);
    if (a->n_head) {
        for (int32_t s = a->head[h & (a->n_head - 1)]; s >= 0; s = a->chain[s])
            if (a->st[s].h == h && a->st[s].n == n && memcmp(a->tops + a->st[s].at, t, n * sizeof *t) == 0) return s;
    }
    if (a->n == a->cap && !grow(a)) return -1;
    if (!CN_GROW(a->tops, a->cap_tops, a->n_tops + n)) return -1;
    uint32_t s = a->n++;
    memcpy(a->tops + a->n_tops, t, n * sizeof *t);
    a->st[s] = (gr_astate){a->n_tops, (uint32_t)n, h};
    a->n_tops += n;
    uint32_t k = (uint32_t)h & (a->n_head - 1);
    a->chain[s] = a->head[k];
    a->head[k] = (int32_t)s;
    for (int c = 0; c < 256; c++) a->next[(size_t)s * 256 + c] = W_UNKNOWN;
    memset(a->esc + (size_t)s * 256, 0, 256);
    a->slice[s] = -1;
    return (int32_t)s;
}

/* The transition of state s by byte c, computed once and kept. */
static int32_t step(gr_auto *a, int32_t s, uint8_t c) {
    size_t x = (size_t)s * 256 + c;
    if (a->next[x] != W_UNKNOWN) return a->next[x];
    gr_pda *p = a->p;
    uint32_t n = a->st[s].n;
    if (gr_tops_reserve(p, n) != 0) return -1;
    size_t at = p->n_tops;
    memcpy(p->tops + at, a->tops + a->st[s].at, n * sizeof *p->tops);
    p->n_tops += n;
    p->escaped = false;
    size_t out = p->n_tops;
    size_t k = gr_advance(p, at, n, c);
    int32_t r = -1;
    if (k && !p->oom) {
        r = gr_auto_intern(a, p->tops + out, k);
        if (r < 0) p->oom = true;
    }
    p->n_tops = at;
    if (p->oom) return -1; /* not kept: the caller gives up */
    a->next[x] = r;
    a->esc[x] = p->escaped;
    return r;
}

/* ---- the slice ---- */

bool gr_slice_byte(uint8_t c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; }

/* UTF-8 positions: 0 between characters; the others say which bytes may come next. */
enum { U_START, U_CONT1, U_CONT2, U_CONT3, U_E0, U_ED, U_F0, U_F4, U_N };

static void utf8_next(int u, uint8_t lo[4], uint8_t hi[4], uint8_t to[4], int *n) {
    *n = 0;
#define R(l, h, t) (lo[*n] = (l), hi[*n] = (h), to[*n] = (t), (*n)++)
    switch (u) {
    case U_START:
        R(0xC2, 0xDF, U_CONT1);
        R(0xE1, 0xEC, U_CONT2);
        R(0xEE, 0xEF, U_CONT2);
        R(0xF1, 0xF3, U_CONT3);
        break; /* E0 ED F0 F4 and ASCII: below */
    case U_CONT1: R(0x80, 0xBF, U_START); break;
    case U_CONT2: R(0x80, 0xBF, U_CONT1); break;
    case U_CONT3: R(0x80, 0xBF, U_CONT2); break;
    case U_E0: R(0xA0, 0xBF, U_CONT1); break;
    case U_ED: R(0x80, 0x9F, U_CONT1); break;
    case U_F0: R(0x90, 0xBF, U_CONT2); break;
    case U_F4: R(0x80, 0x8F, U_CONT2); break;
    }
#undef R
}

/* Whether state s takes byte b into a live state; a new (state, UTF-8 position nu) pair
 * is queued at depth+1. -1: no, or the search's budget. An escape on the way does not
 * matter: the state after it is the tops that stayed, so a token that lives through the
 * search was taken without escaping (whatever else it may also do below the frame). */
static int visit(gr_auto *a, int32_t s, uint8_t b, int nu, uint32_t depth, size_t *n_found) {
    int32_t ns = step(a, s, b);
    if (ns < 0) return -1;
    size_t key = (size_t)ns * U_N + (size_t)nu;
    uint32_t k = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 40) & (W_SLICE_SLOTS - 1);
    while (a->seen[k] != SIZE_MAX) {
        if (a->seen[k] == key) return 0;
        k = (k + 1) & (W_SLICE_SLOTS - 1);
    }
    if (*n_found >= W_SLICE_PAIRS) return -1;
    a->seen[k] = key;
    a->found[*n_found] = key;
    a->found_depth[(*n_found)++] = depth + 1;
    return 0;
}

bool gr_auto_slice_ok(gr_auto *a, int32_t s0) {
    if (a->slice[s0] >= 0) return a->slice[s0];
    if (!a->found) {
        a->found = malloc(W_SLICE_PAIRS * sizeof *a->found);
        a->found_depth = malloc(W_SLICE_PAIRS * sizeof *a->found_depth);
        a->seen = malloc(W_SLICE_SLOTS * sizeof *a->seen);
        if (!a->found || !a->found_depth || !a->seen) {
            free(a->found);
            free(a->found_depth);
            free(a->seen);
            a->found = a->seen = NULL;
            a->found_depth = NULL;
            return false;
        }
    }
    for (size_t i = 0; i < W_SLICE_SLOTS; i++) a->seen[i] = SIZE_MAX;
    /* a breadth-first search over (state, UTF-8 position) pairs to depth GR_SLICE_MAX_LEN
     * (the slice's longest token): found[] holds them in the order met (so at their least
     * depth), those from index `done` on still to expand */
    size_t n_found = 1, done = 0;
    a->found[0] = (size_t)s0 * U_N;
    a->found_depth[0] = 0;
    a->seen[(uint32_t)(a->found[0] * 0x9E3779B97F4A7C15ull >> 40) & (W_SLICE_SLOTS - 1)] = a->found[0];
    bool ok = true, cut = false;
    while (ok && done < n_found) {
        size_t key = a->found[done];
        uint32_t dep = a->found_depth[done++];
        if (dep >= GR_SLICE_MAX_LEN) {
            cut = true;
            continue;
        }
        int32_t s = (int32_t)(key / U_N);
        int u = (int)(key % U_N);
        if (u == U_START) {
            for (unsigned c = 0x20; ok && c < 0x7F; c++)
                if (gr_slice_byte((uint8_t)c)) ok = visit(a, s, (uint8_t)c, U_START, dep, &n_found) == 0;
            if (ok) ok = visit(a, s, 0xE0, U_E0, dep, &n_found) == 0;
            if (ok) ok = visit(a, s, 0xED, U_ED, dep, &n_found) == 0;
            if (ok) ok = visit(a, s, 0xF0, U_F0, dep, &n_found) == 0;
            if (ok) ok = visit(a, s, 0xF4, U_F4, dep, &n_found) == 0;
        }
        uint8_t lo[4], hi[4], to[4];
        int nr;
        utf8_next(u, lo, hi, to, &nr);
        for (int r = 0; ok && r < nr; r++)
            for (unsigned c = lo[r]; ok && c <= hi[r]; c++) ok = visit(a, s, (uint8_t)c, to[r], dep, &n_found) == 0;
    }
    if (a->p->oom) return false; /* the caller sees p->oom */
    /* a yes found without reaching the depth bound holds for every state met between
     * characters: their searches are subsets */
    if (ok && !cut)
        for (size_t i = 0; i < n_found; i++)
            if (a->found[i] % U_N == U_START) a->slice[a->found[i] / U_N] = 1;
    a->slice[s0] = ok;
    return ok;
}

/* ---- walks ---- */

static bool note_escape(gr_auto *a, uint32_t i) {
    if (!CN_GROW(a->esc_nodes, a->cap_esc_nodes, a->n_esc_nodes + 1)) return false;
    a->esc_nodes[a->n_esc_nodes++] = i;
    return true;
}

/* Keeps the automaton's states to those on the walk's path (path[from .. depth)) when it
 * has grown past its budget mid-walk; the frames stay. false: no memory. */
static bool flush_to_path(gr_auto *a, uint32_t from, uint32_t depth) {
    size_t n = 0;
    for (uint32_t d = from; d < depth; d++) n += a->st[a->path[d]].n;
    gr_top *keep = malloc((n + 1) * sizeof *keep);
    uint32_t *cnt = malloc((depth + 1) * sizeof *cnt);
    bool ok = keep && cnt;
    n = 0;
    for (uint32_t d = from; ok && d < depth; d++) {
        const gr_astate *w = &a->st[a->path[d]];
        memcpy(keep + n, a->tops + w->at, w->n * sizeof *keep);
        cnt[d] = w->n;
        n += w->n;
    }
    if (ok) {
        gr_auto_reset(a);
        n = 0;
        for (uint32_t d = from; ok && d < depth; d++) {
            int32_t s = gr_auto_intern(a, keep + n, cnt[d]);
            ok = s >= 0;
            a->path[d] = s;
            n += cnt[d];
        }
    }
    free(keep);
    free(cnt);
    return ok;
}

void gr_walk(gr_auto *a, const gr_trie *t, uint32_t lo, uint32_t hi, int32_t s0, uint32_t *mask, bool collect) {
    gr_pda *p = a->p;
    if (lo >= hi || p->oom) return;
    if (!CN_GROW(a->path, a->cap_path, (size_t)t->max_depth + 1)) {
        p->oom = true;
        return;
    }
    uint32_t d0 = t->depth[lo];
    a->path[d0 - 1] = s0;
    const uint8_t *byte = t->byte;
    const uint16_t *depth = t->depth;
    for (uint32_t i = lo; i < hi;) {
        uint32_t d = depth[i];
        int32_t s = a->path[d - 1];
        size_t x = (size_t)s * 256 + byte[i];
        int32_t ns = a->next[x];
        if (ns == W_UNKNOWN) {
            if (a->n >= a->max_states) {
                if (!flush_to_path(a, d0 - 1, d)) {
                    p->oom = true;
                    break;
                }
                s = a->path[d - 1];
                x = (size_t)s * 256 + byte[i];
            }
            ns = step(a, s, byte[i]);
            if (p->oom) break;
        }
        if (collect && a->esc[x] && !note_escape(a, i)) {
            p->oom = true;
            break;
        }
        if (ns < 0) {
            i = t->end[i];
            continue;
        }
        a->path[d] = ns;
        for (uint32_t j = t->tok_first[i]; j < t->tok_first[i + 1]; j++) {
            uint32_t id = (uint32_t)t->tok[j];
            mask[id >> 5] |= 1u << (id & 31);
        }
        i++;
    }
}
