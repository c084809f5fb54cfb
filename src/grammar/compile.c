/* compile.c — rules to automata. Each rule reachable from the root becomes a Thompson
 * NFA over byte sets and rule calls, then a DFA by subset construction over the rule's
 * byte classes (calls are symbols too, so a state has at most one call edge per rule).
 * Then the whole-grammar analyses the matcher relies on:
 *   - productive rules and states that can finish; edges into anything else are cut, so
 *     every live stack can still complete (a mask never leads into a dead end);
 *   - minimization (equivalent states merged, unreachable ones dropped);
 *   - nullable rules and accept_n (accepting through calls of nullable rules);
 *   - left recursion (a rule reaching itself before a byte): refused, naming the rule;
 *   - leaf rules (no calls) and a hash of each table, the shared mask cache's key.
 * Budgets: total states (NFA + DFA) and wall time, both reported as "compile budget". */
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "grammar/grammar_impl.h"

#define GR_MAX_DEPTH 4000

enum { E_EPS, E_BYTES, E_LBYTES, E_CALL }; /* E_LBYTES: a byte set of the compile's own */
typedef struct {
    uint8_t kind;
    uint32_t arg;
    int32_t to, next;
} nfa_edge;

typedef struct nfa nfa;
struct nfa {
    const gr_builder *b;
    nfa *root; /* the rule's NFA, whose table holds every E_LBYTES set */
    gr_set *lsets;
    uint32_t n_lsets;
    size_t cap_lsets;
    int32_t *head; /* (n_states) first edge */
    uint32_t n_states;
    size_t cap_states;
    nfa_edge *e;
    uint32_t n_e;
    size_t cap_e;
    size_t budget_states, used_states;
    uint64_t steps; /* frag calls: the deadline is read every 1024 of them */
    double deadline_ms;
    cn_error *err;
    cn_status st; /* first failure */
};

static bool fail(nfa *a, cn_status st, const char *msg) {
    if (a->st == CN_STATUS_OK) {
        a->st = st;
        cn_err(a->err, st, "%s", msg);
    }
    return false;
}

static int32_t nfa_state(nfa *a) {
    if (a->st != CN_STATUS_OK) return -1;
    if (++a->used_states > a->budget_states) {
        fail(a, CN_STATUS_INVALID_ARG,
             "compile budget: the grammar needs more automaton states than allowed (max_states)");
        return -1;
    }
    if (!CN_GROW(a->head, a->cap_states, a->n_states + 1)) {
        fail(a, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        return -1;
    }
    a->head[a->n_states] = -1;
    return (int32_t)a->n_states++;
}

static void nfa_edge_add(nfa *a, int32_t from, uint8_t kind, uint32_t arg, int32_t to) {
    if (a->st != CN_STATUS_OK || from < 0 || to < 0) return;
    if (!CN_GROW(a->e, a->cap_e, a->n_e + 1)) {
        fail(a, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        return;
    }
    a->e[a->n_e] = (nfa_edge){kind, arg, to, a->head[from]};
    a->head[from] = (int32_t)a->n_e++;
}

static const uint8_t *edge_bits(const nfa *a, const nfa_edge *e) {
    return e->kind == E_BYTES ? a->b->sets[e->arg].bits : a->root->lsets[e->arg].bits;
}

static bool is_bytes(const nfa_edge *e) { return e->kind == E_BYTES || e->kind == E_LBYTES; }

/* A byte set of the compile's own (the automata intersections build); -1: no memory. */
static int64_t lset_add(nfa *a, const uint8_t bits[32]) {
    nfa *r = a->root;
    if (!CN_GROW(r->lsets, r->cap_lsets, r->n_lsets + 1)) {
        fail(a, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        return -1;
    }
    memcpy(r->lsets[r->n_lsets].bits, bits, 32);
    return r->n_lsets++;
}

static int32_t frag_dfa_ops(nfa *a, const gr_node *n, int32_t in, int depth);

/* Builds node x from state in; returns the state after it (or -1). */
static int32_t frag(nfa *a, int32_t x, int32_t in, int depth) {
    if (a->st != CN_STATUS_OK || in < 0) return -1;
    if (depth > GR_MAX_DEPTH) {
        fail(a, CN_STATUS_INVALID_ARG, "the grammar is nested too deeply (more than 4000 levels)");
        return -1;
    }
    /* Counted in calls, not states: a repeat of an item that adds no state (empty) makes
     * no states however large its count, and must still run out of time. */
    if ((++a->steps & 1023) == 0 && cn_time_ms() > a->deadline_ms) {
        fail(a, CN_STATUS_INVALID_ARG, "compile budget: compiling took longer than allowed (max_compile_ms)");
        return -1;
    }
    const gr_node *n = &a->b->nodes[x];
    switch (n->kind) {
    case GR_N_EMPTY: return in;
    case GR_N_NOTHING: return nfa_state(a);
    case GR_N_BYTES: {
        int32_t o = nfa_state(a);
        nfa_edge_add(a, in, E_BYTES, n->a, o);
        return o;
    }
    case GR_N_REF: {
        int32_t o = nfa_state(a);
        nfa_edge_add(a, in, E_CALL, n->a, o);
        return o;
    }
    case GR_N_SEQ: {
        int32_t cur = in;
        for (uint32_t i = 0; i < n->n; i++) cur = frag(a, a->b->kids[n->first + i], cur, depth + 1);
        return cur;
    }
    case GR_N_ALT: {
        int32_t out = nfa_state(a);
        for (uint32_t i = 0; i < n->n; i++) {
            int32_t s = nfa_state(a);
            nfa_edge_add(a, in, E_EPS, 0, s);
            int32_t o = frag(a, a->b->kids[n->first + i], s, depth + 1);
            nfa_edge_add(a, o, E_EPS, 0, out);
        }
        return out;
    }
    case GR_N_REPEAT: {
        int32_t item = (int32_t)n->first;
        uint32_t min = n->a, max = n->b;
        int32_t cur = in;
        /* An item that adds no state matches only the empty string: so does any number of
         * copies of it, and a count of millions must not be walked copy by copy. */
        for (uint32_t i = 0; i < min && a->st == CN_STATUS_OK; i++) {
            int32_t o = frag(a, item, cur, depth + 1);
            if (o == cur) return cur;
            cur = o;
        }
        if (max == GR_INF) {
            int32_t s = nfa_state(a);
            nfa_edge_add(a, cur, E_EPS, 0, s);
            int32_t o = frag(a, item, s, depth + 1);
            nfa_edge_add(a, o, E_EPS, 0, s);
            return s;
        }
        int32_t end = nfa_state(a);
        for (uint32_t i = min; i < max && a->st == CN_STATUS_OK; i++) {
            nfa_edge_add(a, cur, E_EPS, 0, end);
            int32_t s = nfa_state(a);
            nfa_edge_add(a, cur, E_EPS, 0, s);
            cur = frag(a, item, s, depth + 1);
            if (cur == s) break;
        }
        nfa_edge_add(a, cur, E_EPS, 0, end);
        return end;
    }
    case GR_N_AND:
    case GR_N_NOT: return frag_dfa_ops(a, n, in, depth);
    }
    return -1;
}

/* ---- subset construction ---- */

typedef struct {
    int32_t *v;
    uint32_t n;
    size_t cap;
} i32v;

static bool i32v_push(i32v *a, int32_t x) {
    if (!CN_GROW(a->v, a->cap, a->n + 1)) return false;
    a->v[a->n++] = x;
    return true;
}

typedef struct {
    nfa *a;
    uint32_t *mark; /* (n_states) stamp for closures */
    uint32_t stamp;
    /* DFA states as sorted NFA sets in one pool */
    i32v pool;      /* concatenated sets */
    i32v set_first; /* (n_dfa + 1) */
    int32_t *htab;  /* open addressing over DFA ids */
    uint32_t hcap;
    int32_t accept_nfa;
} subset;

static uint64_t hash_set(const int32_t *s, uint32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h ^ n;
}

/* Sorts v[0..n) ascending: quicksort (median of three, the smaller side first so the
 * stack stays logarithmic) down to insertion sort on short runs. qsort's callback was a
 * third of a regex's compile time (perf); a radix sort's bucket sums were worse on the
 * sets of tens of states that are the rule. */
static void sort_states(int32_t *v, uint32_t n) {
    uint32_t lo_stack[64], hi_stack[64];
    int top = 0;
    uint32_t lo = 0, hi = n;
    for (;;) {
        while (hi - lo > 16) {
            const uint32_t mid = lo + (hi - lo) / 2;
            int32_t a = v[lo], b = v[mid], c = v[hi - 1];
            const int32_t pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
            uint32_t i = lo, j = hi - 1;
            for (;;) {
                while (v[i] < pivot) i++;
                while (v[j] > pivot) j--;
                if (i >= j) break;
                const int32_t t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
            /* [lo, j] <= pivot <= (j, hi): the larger side waits on the stack. The sets hold
             * distinct states, so both sides are non-empty; were they not, insertion sort
             * takes the range. */
            if (j + 1 <= lo || j + 1 >= hi) break;
            if (j + 1 - lo < hi - (j + 1)) {
                lo_stack[top] = j + 1, hi_stack[top++] = hi;
                hi = j + 1;
            } else {
                lo_stack[top] = lo, hi_stack[top++] = j + 1;
                lo = j + 1;
            }
        }
        for (uint32_t i = lo + 1; i < hi; i++) {
            const int32_t x = v[i];
            uint32_t j = i;
            for (; j > lo && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        if (!top) return;
        top--;
        lo = lo_stack[top], hi = hi_stack[top];
    }
}

/* Closes work[0..n) under eps edges (in place, growing; repeats in the input dropped),
 * sorts it. */
static bool closure(subset *S, i32v *w) {
    S->stamp++;
    uint32_t n = 0;
    for (uint32_t i = 0; i < w->n; i++)
        if (S->mark[w->v[i]] != S->stamp) {
            S->mark[w->v[i]] = S->stamp;
            w->v[n++] = w->v[i];
        }
    w->n = n;
    for (uint32_t i = 0; i < w->n; i++)
        for (int32_t e = S->a->head[w->v[i]]; e >= 0; e = S->a->e[e].next)
            if (S->a->e[e].kind == E_EPS && S->mark[S->a->e[e].to] != S->stamp) {
                S->mark[S->a->e[e].to] = S->stamp;
                if (!i32v_push(w, S->a->e[e].to)) return false;
            }
    sort_states(w->v, w->n);
    return true;
}

static uint32_t n_dfa(const subset *S) { return S->set_first.n - 1; }

/* The DFA id of set w (inserted if new); -1: no memory. */
static int32_t dfa_lookup(subset *S, const i32v *w, bool *is_new) {
    uint64_t h = hash_set(w->v, w->n);
    *is_new = false;
    if (2 * (n_dfa(S) + 1) > S->hcap) {
        uint32_t nc = S->hcap ? S->hcap * 2 : 256;
        int32_t *t = malloc(nc * sizeof *t);
        if (!t) return -1;
        for (uint32_t i = 0; i < nc; i++) t[i] = -1;
        for (uint32_t d = 0; d < n_dfa(S); d++) {
            const int32_t *s = S->pool.v + S->set_first.v[d];
            uint32_t m = (uint32_t)(S->set_first.v[d + 1] - S->set_first.v[d]);
            uint32_t k = (uint32_t)hash_set(s, m) & (nc - 1);
            while (t[k] >= 0) k = (k + 1) & (nc - 1);
            t[k] = (int32_t)d;
        }
        free(S->htab);
        S->htab = t;
        S->hcap = nc;
    }
    uint32_t k = (uint32_t)h & (S->hcap - 1);
    for (; S->htab[k] >= 0; k = (k + 1) & (S->hcap - 1)) {
        int32_t d = S->htab[k];
        uint32_t m = (uint32_t)(S->set_first.v[d + 1] - S->set_first.v[d]);
        if (m == w->n && memcmp(S->pool.v + S->set_first.v[d], w->v, m * sizeof *w->v) == 0) return d;
    }
    int32_t d = (int32_t)n_dfa(S);
    for (uint32_t i = 0; i < w->n; i++)
        if (!i32v_push(&S->pool, w->v[i])) return -1;
    if (!i32v_push(&S->set_first, (int32_t)S->pool.n)) return -1;
    S->htab[k] = d;
    *is_new = true;
    return d;
}

typedef struct {
    int32_t rule, to;
} call_pair;
static int cmp_call(const void *x, const void *y) {
    const call_pair *a = x, *b = y;
    if (a->rule != b->rule) return a->rule < b->rule ? -1 : 1;
    return a->to < b->to ? -1 : a->to > b->to;
}

/* One rule's subset construction as it runs: the DFA states found so far (S), and the
 * tables of the DFA as they grow, one DFA state after another. */
typedef struct {
    subset S;
    i32v w;          /* scratch: a set of NFA states */
    i32v trans;      /* (n_dfa, n_class) */
    i32v acc;        /* (n_dfa) */
    i32v cfirst;     /* (n_dfa + 1) a state's first pair in calls */
    i32v calls;      /* (rule, to) pairs */
    i32v set_cls;    /* per byte set met: [count, class...] */
    int32_t *set_at; /* (builder sets + local sets) offset in set_cls, -1: not yet */
    uint32_t n_bsets;
    i32v *bucket;  /* (n_class) the NFA states a class moves to */
    call_pair *cp; /* (n_cp) the calls of the DFA state at hand */
    size_t n_cp, cp_cap;
    uint32_t n_class;
    uint8_t cls[256]; /* byte -> class */
    uint8_t rep[256]; /* class -> its smallest byte */
} det;

/* Whether bits was met before, remembering it if not: an open-addressing set of byte
 * sets by content (cap a power of two, at least twice what it holds). */
static bool set_seen(const uint8_t **tab, size_t cap, const uint8_t *bits) {
    uint64_t w[4], h = 0x9E3779B97F4A7C15ull;
    memcpy(w, bits, 32);
    for (int k = 0; k < 4; k++) h = (h ^ w[k]) * 0x100000001B3ull;
    for (size_t j = (size_t)(h >> 17) & (cap - 1);; j = (j + 1) & (cap - 1)) {
        if (!tab[j]) {
            tab[j] = bits;
            return false;
        }
        if (!memcmp(tab[j], bits, 32)) return true;
    }
}

/* The byte classes of rule a: bytes no edge's set tells apart share one (cls); their
 * count. A set refines the classes once: refining by an equal set again splits nothing
 * and numbers the classes as they were (in the order of their first byte), so each
 * distinct set is applied at its first edge only (when the memory to remember them is
 * there; without it every edge's set is applied, to the same classes). */
static uint32_t byte_classes(const nfa *a, uint8_t cls[256]) {
    uint32_t n_class = 1;
    int16_t map[256][2];
    memset(cls, 0, 256);
    size_t cap = 16;
    while (cap < 2 * (size_t)a->n_e) cap *= 2;
    const uint8_t **seen = calloc(cap, sizeof *seen);
    for (uint32_t e = 0; e < a->n_e; e++) {
        if (!is_bytes(&a->e[e])) continue;
        const uint8_t *bits = edge_bits(a, &a->e[e]);
        if (seen && set_seen(seen, cap, bits)) continue;
        for (unsigned i = 0; i < n_class; i++) map[i][0] = map[i][1] = -1;
        uint32_t nn = 0;
        for (unsigned c = 0; c < 256; c++) {
            int in = (bits[c >> 3] >> (c & 7)) & 1;
            if (map[cls[c]][in] < 0) map[cls[c]][in] = (int16_t)nn++;
            cls[c] = (uint8_t)map[cls[c]][in];
        }
        n_class = nn;
    }
    free(seen);
    return n_class;
}

/* Classes, scratch and the start state (the closure of NFA state 0). false: no memory. */
static bool det_init(det *D, nfa *a, int32_t accept_nfa) {
    *D = (det){.S = {.a = a, .accept_nfa = accept_nfa}};
    D->S.mark = calloc(a->n_states, sizeof *D->S.mark);
    if (!D->S.mark) return false;
    D->n_class = byte_classes(a, D->cls);
    for (unsigned c = 256; c-- > 0;) D->rep[D->cls[c]] = (uint8_t)c;
    D->bucket = calloc(D->n_class, sizeof *D->bucket);
    D->n_bsets = a->b->n_sets;
    const size_t n_sets = (size_t)D->n_bsets + a->root->n_lsets;
    D->set_at = malloc((n_sets + 1) * sizeof *D->set_at);
    if (!D->bucket || !D->set_at) return false;
    for (size_t i = 0; i < n_sets; i++) D->set_at[i] = -1;
    bool is_new;
    return i32v_push(&D->S.set_first, 0) && i32v_push(&D->w, 0) && closure(&D->S, &D->w) &&
           dfa_lookup(&D->S, &D->w, &is_new) >= 0;
}

static void det_free(det *D) {
    free(D->S.mark);
    free(D->S.pool.v);
    free(D->S.set_first.v);
    free(D->S.htab);
    free(D->w.v);
    free(D->trans.v);
    free(D->acc.v);
    free(D->cfirst.v);
    free(D->calls.v);
    free(D->set_cls.v);
    free(D->set_at);
    free(D->cp);
    if (D->bucket)
        for (uint32_t c = 0; c < D->n_class; c++) free(D->bucket[c].v);
    free(D->bucket);
}

/* Where the classes of edge x's byte set start in set_cls ([count, class...]), listed
 * on the set's first use; -1: no memory. */
static int32_t set_classes(det *D, const nfa_edge *x) {
    int32_t *at = x->kind == E_BYTES ? &D->set_at[x->arg] : &D->set_at[D->n_bsets + x->arg];
    if (*at >= 0) return *at;
    const uint8_t *bits = edge_bits(D->S.a, x);
    const int32_t first = (int32_t)D->set_cls.n;
    if (!i32v_push(&D->set_cls, 0)) return -1;
    for (uint32_t c = 0; c < D->n_class; c++)
        if ((bits[D->rep[c] >> 3] >> (D->rep[c] & 7)) & 1) {
            if (!i32v_push(&D->set_cls, (int32_t)c)) return -1;
            D->set_cls.v[first]++;
        }
    return *at = first;
}

/* The edges out of DFA state ds: byte edges into the buckets of their classes, calls
 * into cp; whether ds accepts into *accepting. false: no memory. */
static bool gather_edges(det *D, uint32_t ds, bool *accepting) {
    const nfa *a = D->S.a;
    for (uint32_t c = 0; c < D->n_class; c++) D->bucket[c].n = 0;
    D->n_cp = 0;
    *accepting = false;
    for (int32_t i = D->S.set_first.v[ds]; i < D->S.set_first.v[ds + 1]; i++) {
        const int32_t ns = D->S.pool.v[i];
        if (ns == D->S.accept_nfa) *accepting = true;
        for (int32_t e = a->head[ns]; e >= 0; e = a->e[e].next) {
            const nfa_edge *x = &a->e[e];
            if (is_bytes(x)) {
                const int32_t at = set_classes(D, x);
                if (at < 0) return false;
                const int32_t *L = D->set_cls.v + at;
                for (int32_t k = 1; k <= L[0]; k++)
                    if (!i32v_push(&D->bucket[L[k]], x->to)) return false;
            } else if (x->kind == E_CALL) {
                if (!CN_GROW(D->cp, D->cp_cap, D->n_cp + 1)) return false;
                D->cp[D->n_cp++] = (call_pair){(int32_t)x->arg, x->to};
            }
        }
    }
    return true;
}

/* The closure of w as a DFA state (found or added); -1: no memory. */
static int32_t det_target(det *D) {
    bool is_new;
    return closure(&D->S, &D->w) ? dfa_lookup(&D->S, &D->w, &is_new) : -1;
}

/* The current state's row of trans: each class's bucket as a DFA state (-1: none).
 * *work counts the NFA states visited. false: no memory. */
static bool byte_moves(det *D, uint32_t *work) {
    for (uint32_t c = 0; c < D->n_class; c++) {
        int32_t to = -1;
        if (D->bucket[c].n) {
            D->w.n = 0;
            for (uint32_t i = 0; i < D->bucket[c].n; i++)
                if (!i32v_push(&D->w, D->bucket[c].v[i])) return false;
            to = det_target(D);
            *work += D->w.n;
            if (to < 0) return false;
        }
        if (!i32v_push(&D->trans, to)) return false;
    }
    return true;
}

/* The current state's calls: one (rule, DFA state) pair per rule called, its return
 * states together. false: no memory. */
static bool call_moves(det *D) {
    if (!i32v_push(&D->cfirst, (int32_t)(D->calls.n / 2))) return false;
    if (D->n_cp) qsort(D->cp, D->n_cp, sizeof *D->cp, cmp_call);
    for (size_t i = 0; i < D->n_cp;) {
        size_t j = i;
        D->w.n = 0;
        for (; j < D->n_cp && D->cp[j].rule == D->cp[i].rule; j++)
            if (!i32v_push(&D->w, D->cp[j].to)) return false;
        const int32_t to = det_target(D);
        if (to < 0 || !i32v_push(&D->calls, D->cp[i].rule) || !i32v_push(&D->calls, to)) return false;
        i = j;
    }
    return true;
}

/* The state and time budgets, read as each DFA state is expanded (the clock every 64K
 * NFA states and classes visited). OK, or INVALID_ARG with the message. */
static cn_status det_budget(nfa *a, uint32_t *work) {
    if (++a->used_states > a->budget_states)
        return cn_err(a->err, CN_STATUS_INVALID_ARG,
                      "compile budget: the grammar needs more automaton states than allowed (max_states)");
    if (*work > 65536 && (*work = 0, cn_time_ms() > a->deadline_ms))
        return cn_err(a->err, CN_STATUS_INVALID_ARG,
                      "compile budget: compiling took longer than allowed (max_compile_ms)");
    return CN_STATUS_OK;
}

/* The grown tables into d (trans handed over). false: no memory. */
static bool det_tables(det *D, gr_dfa *d) {
    d->n_states = n_dfa(&D->S);
    d->n_class = D->n_class;
    memcpy(d->cls, D->cls, 256);
    d->trans = D->trans.v;
    D->trans.v = NULL;
    d->accept = malloc(d->n_states);
    d->accept_n = calloc(d->n_states, 1);
    d->has_out = calloc(d->n_states, 1);
    d->call_first = malloc((d->n_states + 1) * sizeof *d->call_first);
    d->calls = malloc((D->calls.n / 2 + 1) * sizeof *d->calls);
    if (!d->accept || !d->accept_n || !d->has_out || !d->call_first || !d->calls) return false;
    for (uint32_t s = 0; s < d->n_states; s++) d->accept[s] = (uint8_t)D->acc.v[s];
    for (uint32_t s = 0; s <= d->n_states; s++) d->call_first[s] = (uint32_t)D->cfirst.v[s];
    for (uint32_t i = 0; i < D->calls.n / 2; i++) d->calls[i] = (gr_call){D->calls.v[2 * i], D->calls.v[2 * i + 1]};
    return true;
}

/* One rule: NFA built by the caller (start 0 .. accept_nfa); fills d. */
static cn_status determinize(nfa *a, int32_t accept_nfa, gr_dfa *d) {
    det D;
    cn_status st = CN_STATUS_NO_MEMORY;
    if (!det_init(&D, a, accept_nfa)) goto done;
    uint32_t work = 0; /* NFA states and classes visited since the clock was last read */
    for (uint32_t ds = 0; ds < n_dfa(&D.S); ds++) {
        if ((st = det_budget(a, &work)) != CN_STATUS_OK) goto done;
        st = CN_STATUS_NO_MEMORY;
        work += (uint32_t)(D.S.set_first.v[ds + 1] - D.S.set_first.v[ds]) + D.n_class;
        bool accepting;
        if (!gather_edges(&D, ds, &accepting) || !i32v_push(&D.acc, accepting) || !byte_moves(&D, &work) ||
            !call_moves(&D))
            goto done;
    }
    if (i32v_push(&D.cfirst, (int32_t)(D.calls.n / 2)) && det_tables(&D, d)) st = CN_STATUS_OK;
done:
    if (st == CN_STATUS_NO_MEMORY) cn_err(a->err, st, "out of memory compiling the grammar");
    det_free(&D);
    return st;
}

/* ---- intersections and complements ----
 * Each operand is built as an NFA of its own (no calls: a lexical piece), made a DFA,
 * and the product (AND), or the DFA completed with a sink and its acceptance flipped
 * (NOT), is laid into the rule's NFA as states with byte-set edges; the rule's subset
 * construction then treats it like any other fragment. */

static bool operand_dfa(nfa *a, int32_t x, int depth, gr_dfa *d) {
    nfa s = {.b = a->b,
             .root = a->root,
             .budget_states = a->budget_states,
             .used_states = a->used_states,
             .steps = a->steps,
             .deadline_ms = a->deadline_ms,
             .err = a->err};
    int32_t s0 = nfa_state(&s);
    int32_t fin = frag(&s, x, s0, depth + 1);
    for (uint32_t e = 0; s.st == CN_STATUS_OK && e < s.n_e; e++)
        if (s.e[e].kind == E_CALL) {
            s.st = CN_STATUS_INVALID_ARG;
            cn_err(s.err, s.st, "an intersection or complement cannot call a rule ('%s')",
                   a->b->rules[s.e[e].arg].name);
        }
    cn_status st = s.st == CN_STATUS_OK ? determinize(&s, fin, d) : s.st;
    a->used_states = s.used_states;
    a->steps = s.steps;
    free(s.head);
    free(s.e);
    if (st != CN_STATUS_OK && a->st == CN_STATUS_OK) a->st = st; /* the message is in err already */
    return st == CN_STATUS_OK;
}

typedef struct {
    uint64_t *key;
    int32_t *val;
    uint32_t cap, n;
} pairmap;

/* The index of key, inserting `next` when new (*is_new); -1: no memory. */
static int32_t pair_get(pairmap *m, uint64_t key, int32_t next, bool *is_new) {
    *is_new = false;
    if (2 * (m->n + 1) > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        uint64_t *k = malloc(nc * sizeof *k);
        int32_t *v = malloc(nc * sizeof *v);
        if (!k || !v) {
            free(k);
            free(v);
            return -1;
        }
        for (uint32_t i = 0; i < nc; i++) v[i] = -1;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->val[i] >= 0) {
                uint32_t j = (uint32_t)(m->key[i] * 0x9E3779B97F4A7C15ull >> 32) & (nc - 1);
                while (v[j] >= 0) j = (j + 1) & (nc - 1);
                k[j] = m->key[i];
                v[j] = m->val[i];
            }
        free(m->key);
        free(m->val);
        m->key = k;
        m->val = v;
        m->cap = nc;
    }
    uint32_t j = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 32) & (m->cap - 1);
    for (; m->val[j] >= 0; j = (j + 1) & (m->cap - 1))
        if (m->key[j] == key) return m->val[j];
    m->key[j] = key;
    m->val[j] = next;
    m->n++;
    *is_new = true;
    return next;
}

/* One edge from `from` per target, with the bytes of every joint class j that goes there
 * (tgt[j] >= 0: an index into state_of), the edges in the order the targets first
 * appear among the classes. */
static void edges_by_target(nfa *a, int32_t from, const int32_t *tgt, uint32_t n_jc, const uint64_t (*cbits)[4],
                            const int32_t *state_of) {
    int32_t targets[256];
    uint64_t bytes[256][4];
    uint32_t n_t = 0;
    for (uint32_t j = 0; j < n_jc; j++) {
        if (tgt[j] < 0) continue;
        uint32_t k = 0;
        while (k < n_t && targets[k] != tgt[j]) k++;
        if (k == n_t) {
            targets[n_t] = tgt[j];
            memset(bytes[n_t++], 0, sizeof bytes[0]);
        }
        for (int w = 0; w < 4; w++) bytes[k][w] |= cbits[j][w];
    }
    for (uint32_t k = 0; k < n_t && a->st == CN_STATUS_OK; k++) {
        uint8_t bits[32];
        for (int b = 0; b < 32; b++) bits[b] = (uint8_t)(bytes[k][b >> 3] >> ((b & 7) * 8));
        int64_t set = lset_add(a, bits);
        if (set >= 0) nfa_edge_add(a, from, E_LBYTES, (uint32_t)set, state_of[targets[k]]);
    }
}

static int32_t frag_dfa_ops(nfa *a, const gr_node *n, int32_t in, int depth) {
    bool neg = n->kind == GR_N_NOT;
    gr_dfa d[2] = {0};
    pairmap pm = {0};
    i32v ids = {0}, ps = {0}, qs = {0};
    int32_t out = -1;
    if (!operand_dfa(a, neg ? (int32_t)n->first : a->b->kids[n->first], depth, &d[0])) goto done;
    if (!neg && !operand_dfa(a, a->b->kids[n->first + 1], depth, &d[1])) goto done;
    /* product states (p, q); for NOT, q is 0 and p == sink stands for "already outside" */
    const int32_t sink = (int32_t)d[0].n_states;
    out = nfa_state(a);
    int32_t first = nfa_state(a);
    nfa_edge_add(a, in, E_EPS, 0, first);
    bool is_new;
    if (pair_get(&pm, 0, 0, &is_new) < 0 || !i32v_push(&ids, first) || !i32v_push(&ps, 0) || !i32v_push(&qs, 0)) {
        fail(a, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        goto done;
    }
    /* joint byte classes: bytes alike in both operands move alike in the product */
    uint8_t jc[256], jrep[256];
    uint32_t n_jc = 0;
    {
        int16_t seen[256][256];
        memset(seen, 0xff, sizeof seen);
        for (int c = 0; c < 256; c++) {
            uint8_t c0 = d[0].cls[c], c1 = neg ? 0 : d[1].cls[c];
            if (seen[c0][c1] < 0) {
                seen[c0][c1] = (int16_t)n_jc;
                jrep[n_jc++] = (uint8_t)c;
            }
            jc[c] = (uint8_t)seen[c0][c1];
        }
    }
    /* each joint class's bytes, as a 256-bit set (bit c of word c / 64) */
    uint64_t cbits[256][4];
    memset(cbits, 0, sizeof cbits);
    for (int c = 0; c < 256; c++) cbits[jc[c]][c >> 6] |= 1ull << (c & 63);
    int32_t tgt[256];
    for (uint32_t i = 0; i < ids.n && a->st == CN_STATUS_OK; i++) {
        int32_t p = ps.v[i], q = qs.v[i];
        bool acc = neg ? p == sink || !d[0].accept[p] : d[0].accept[p] && d[1].accept[q];
        if (acc) nfa_edge_add(a, ids.v[i], E_EPS, 0, out);
        for (uint32_t j = 0; j < n_jc; j++) {
            int c = jrep[j];
            int32_t tp = p == sink ? sink : d[0].trans[(size_t)p * d[0].n_class + d[0].cls[c]];
            int32_t tq = 0;
            if (neg) {
                if (tp < 0) tp = sink;
            } else {
                tq = tp < 0 ? -1 : d[1].trans[(size_t)q * d[1].n_class + d[1].cls[c]];
                if (tq < 0) {
                    tgt[j] = -1;
                    continue;
                }
            }
            uint64_t key = (uint64_t)(uint32_t)tp << 32 | (uint32_t)tq;
            int32_t t = pair_get(&pm, key, (int32_t)ids.n, &is_new);
            if (t >= 0 && is_new && (!i32v_push(&ids, nfa_state(a)) || !i32v_push(&ps, tp) || !i32v_push(&qs, tq)))
                t = -1;
            if (t < 0) {
                fail(a, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
                goto done;
            }
            tgt[j] = t;
        }
        edges_by_target(a, ids.v[i], tgt, n_jc, cbits, ids.v);
    }
done:
    gr_dfa_free_tables(&d[0]);
    gr_dfa_free_tables(&d[1]);
    free(pm.key);
    free(pm.val);
    free(ids.v);
    free(ps.v);
    free(qs.v);
    return a->st == CN_STATUS_OK ? out : -1;
}

void gr_dfa_free_tables(gr_dfa *d) {
    free(d->name);
    free(d->trans);
    free(d->accept);
    free(d->accept_n);
    free(d->has_out);
    free(d->call_first);
    free(d->calls);
}

void gr_grammar_free(gr_grammar *g) {
    if (!g) return;
    for (uint32_t r = 0; r < g->n_rules; r++) gr_dfa_free_tables(&g->rules[r]);
    free(g->rules);
    gr_cache_free(g->cache);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---- whole-grammar analyses ---- */

/* Marks fin[s] for the states of rule d that can finish, given which rules can (prod):
 * backwards from the marked states over the reversed edges (byte edges, and calls of
 * productive rules), each edge once. rev_first/rev hold the reversed edges, made by the
 * caller: rev[k] = (source state, called rule or -1 for a byte edge). */
typedef struct {
    int32_t from, rule;
} gr_redge;

static void finish_backwards(const gr_dfa *d, const uint32_t *rev_first, const gr_redge *rev, const uint8_t *prod,
                             uint8_t *fin, uint32_t *stack) {
    uint32_t top = 0;
    for (uint32_t s = 0; s < d->n_states; s++)
        if (fin[s]) stack[top++] = s;
    while (top) {
        const uint32_t t = stack[--top];
        for (uint32_t k = rev_first[t]; k < rev_first[t + 1]; k++) {
            const gr_redge e = rev[k];
            if (fin[e.from] || (e.rule >= 0 && !prod[e.rule])) continue;
            fin[e.from] = 1;
            stack[top++] = (uint32_t)e.from;
        }
    }
}

/* The reversed edges of rule d into rev_first (n_states + 1) and *rev; false when out of
 * memory. A state's byte edges into one target count once. */
static bool reverse_edges(const gr_dfa *d, uint32_t *rev_first, gr_redge **rev) {
    const uint32_t S = d->n_states;
    memset(rev_first, 0, (S + 1) * sizeof *rev_first);
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t s = 0; s < S; s++) {
            int32_t prev = -1;
            for (uint32_t c = 0; c < d->n_class; c++) {
                const int32_t t = d->trans[s * d->n_class + c];
                if (t < 0 || t == prev) continue;
                prev = t;
                if (pass == 0) rev_first[t + 1]++;
                else (*rev)[rev_first[t]++] = (gr_redge){(int32_t)s, -1};
            }
            for (uint32_t k = d->call_first[s]; k < d->call_first[s + 1]; k++) {
                const int32_t t = d->calls[k].ret;
                if (pass == 0) rev_first[t + 1]++;
                else (*rev)[rev_first[t]++] = (gr_redge){(int32_t)s, d->calls[k].rule};
            }
        }
        if (pass == 0) {
            for (uint32_t s = 0; s < S; s++) rev_first[s + 1] += rev_first[s];
            n = rev_first[S];
            *rev = malloc((n ? n : 1) * sizeof **rev);
            if (!*rev) return false;
        } else { /* the fill advanced each start to the next one's: shift back */
            memmove(rev_first + 1, rev_first, S * sizeof *rev_first);
            rev_first[0] = 0;
        }
    }
    return true;
}

/* Cuts edges into states that cannot finish and calls of rules that cannot; returns
 * false if the root cannot finish. Linear in the edges per round; a round repeats only
 * when some rule became able to finish, which can open calls of it in rules before it. */
static bool prune(gr_grammar *g, cn_error *err) {
    uint32_t R = g->n_rules, max_states = 0;
    for (uint32_t r = 0; r < R; r++)
        if (g->rules[r].n_states > max_states) max_states = g->rules[r].n_states;
    uint8_t *prod = calloc(R, 1);
    uint8_t **fin = calloc(R, sizeof *fin);
    uint32_t **rev_first = calloc(R, sizeof *rev_first);
    gr_redge **rev = calloc(R, sizeof *rev);
    uint32_t *stack = malloc(((size_t)max_states + 1) * sizeof *stack);
    bool ok = prod && fin && rev_first && rev && stack;
    for (uint32_t r = 0; ok && r < R; r++) {
        const gr_dfa *d = &g->rules[r];
        fin[r] = calloc(d->n_states + 1, 1);
        rev_first[r] = malloc((d->n_states + 1) * sizeof **rev_first);
        ok = fin[r] && rev_first[r] && reverse_edges(d, rev_first[r], &rev[r]);
        for (uint32_t s = 0; ok && s < d->n_states; s++) fin[r][s] = d->accept[s];
    }
    if (!ok) {
        cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < R; r++) {
            gr_dfa *d = &g->rules[r];
            finish_backwards(d, rev_first[r], rev[r], prod, fin[r], stack);
            if (d->n_states && fin[r][0] && !prod[r]) prod[r] = 1, changed = true;
        }
    }
    for (uint32_t r = 0; r < R; r++) {
        gr_dfa *d = &g->rules[r];
        for (uint32_t s = 0; s < d->n_states; s++) {
            for (uint32_t c = 0; c < d->n_class; c++) {
                int32_t *t = &d->trans[s * d->n_class + c];
                if (*t >= 0 && !fin[r][*t]) *t = -1;
            }
        }
        /* compact the call lists */
        uint32_t o = 0;
        for (uint32_t s = 0; s < d->n_states; s++) {
            uint32_t lo = d->call_first[s], hi = d->call_first[s + 1];
            d->call_first[s] = o;
            for (uint32_t k = lo; k < hi; k++)
                if (prod[d->calls[k].rule] && fin[r][d->calls[k].ret]) d->calls[o++] = d->calls[k];
        }
        d->call_first[d->n_states] = o;
    }
    ok = prod[g->root];
    if (!ok)
        cn_err(err, CN_STATUS_INVALID_ARG, "the grammar matches no text: rule '%s' can never finish",
               g->rules[g->root].name);
out:
    for (uint32_t r = 0; r < R; r++) {
        if (fin) free(fin[r]);
        if (rev_first) free(rev_first[r]);
        if (rev) free(rev[r]);
    }
    free(fin);
    free(rev_first);
    free(rev);
    free(stack);
    free(prod);
    return ok;
}

/* ---- minimization ----
 * Equivalent states (same acceptance, same calls, each byte class and each call's return
 * to equivalent states) are merged, and states the start no longer reaches after prune
 * are dropped. It matters to the masks more than to the size: a property name's
 * complement (json_schema_lex.c) leaves its trie the same way from every node, and
 * without merging every node has its own copy of the rest, each with its own cache
 * entry and walk.
 *
 * Hopcroft's partition refinement, O(m log n) for m transitions: a call of rule r is one
 * more symbol (to its return state), a missing transition goes to a dead state of its
 * own. (Moore's refinement is simpler but takes as many rounds as the longest chain of
 * distinguishing bytes, hundreds in an object of long literal names.) */

typedef struct {
    uint32_t *elem;              /* (n) states, grouped by block */
    uint32_t *loc;               /* (n) a state's index in elem */
    uint32_t *blk;               /* (n) a state's block */
    uint32_t *first, *end, *mid; /* (n) a block's range in elem; [first, mid) are marked */
    uint32_t n_blk;
} parts;

static void mark(parts *P, uint32_t s, uint32_t *touched, uint32_t *n_touched) {
    uint32_t b = P->blk[s], i = P->loc[s];
    if (i < P->mid[b]) return; /* marked already */
    if (P->mid[b] == P->first[b]) touched[(*n_touched)++] = b;
    uint32_t j = P->mid[b]++;
    uint32_t t = P->elem[j];
    P->elem[j] = s;
    P->loc[s] = j;
    P->elem[i] = t;
    P->loc[t] = i;
}

/* One rule's minimization: its live states renumbered 0..n-1 (state 0 first) and n the
 * dead state; the symbols are the byte classes, then one per rule called. */
typedef struct {
    const gr_dfa *d;
    uint32_t n0, nc; /* the rule's states and byte classes */
    int32_t *idx;    /* (n0) a state's live number, -1: unreachable */
    uint32_t *live;  /* (n) the state of a live number */
    uint32_t n;      /* live states */
    int32_t *crule;  /* (n_crule) the called rules: symbol nc + i calls crule[i] */
    uint32_t n_crule;
    uint32_t A, N;       /* symbols; states with the dead one (n + 1) */
    uint32_t *inv_first; /* (A * N + 1) */
    uint32_t *inv;       /* inv[inv_first[a * N + t] ..]: the states going to t by symbol a */
} min_rule;

static void min_rule_free(min_rule *M) {
    free(M->idx);
    free(M->live);
    free(M->crule);
    free(M->inv_first);
    free(M->inv);
}

/* The states the start reaches, by bytes and by calls' returns, numbered as met. */
static bool live_states(min_rule *M) {
    const gr_dfa *d = M->d;
    M->idx = malloc(M->n0 * sizeof *M->idx);
    M->live = malloc(M->n0 * sizeof *M->live);
    if (!M->idx || !M->live) return false;
    for (uint32_t s = 0; s < M->n0; s++) M->idx[s] = -1;
    uint32_t n = 0;
    M->idx[0] = 0;
    M->live[n++] = 0;
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t s = M->live[k];
        for (uint32_t c = 0; c < M->nc; c++) {
            const int32_t x = d->trans[(size_t)s * M->nc + c];
            if (x >= 0 && M->idx[x] < 0) M->idx[x] = (int32_t)n, M->live[n++] = (uint32_t)x;
        }
        for (uint32_t k2 = d->call_first[s]; k2 < d->call_first[s + 1]; k2++) {
            const int32_t x = d->calls[k2].ret;
            if (M->idx[x] < 0) M->idx[x] = (int32_t)n, M->live[n++] = (uint32_t)x;
        }
    }
    M->n = n;
    return true;
}

static bool called_rules(min_rule *M) {
    const gr_dfa *d = M->d;
    M->crule = malloc((d->call_first[M->n0] + 1) * sizeof *M->crule);
    if (!M->crule) return false;
    for (uint32_t k = 0; k < d->call_first[M->n0]; k++) {
        uint32_t j = 0;
        while (j < M->n_crule && M->crule[j] != d->calls[k].rule) j++;
        if (j == M->n_crule) M->crule[M->n_crule++] = d->calls[k].rule;
    }
    M->A = M->nc + M->n_crule;
    M->N = M->n + 1;
    return true;
}

/* Where live state s goes by symbol a (n: the dead state). */
static uint32_t min_to(const min_rule *M, uint32_t s, uint32_t a) {
    const gr_dfa *d = M->d;
    uint32_t out = M->n;
    if (s >= M->n) return out;
    const uint32_t o = M->live[s];
    if (a < M->nc) {
        const int32_t x = d->trans[(size_t)o * M->nc + a];
        return x >= 0 ? (uint32_t)M->idx[x] : out;
    }
    for (uint32_t k = d->call_first[o]; k < d->call_first[o + 1]; k++)
        if (d->calls[k].rule == M->crule[a - M->nc]) out = (uint32_t)M->idx[d->calls[k].ret];
    return out;
}

static bool predecessors(min_rule *M) {
    const size_t AN = (size_t)M->A * M->N;
    M->inv_first = calloc(AN + 1, sizeof *M->inv_first);
    M->inv = malloc(AN * sizeof *M->inv);
    uint32_t *fill = malloc(AN * sizeof *fill);
    if (!M->inv_first || !M->inv || !fill) {
        free(fill);
        return false;
    }
    for (uint32_t s = 0; s < M->N; s++)
        for (uint32_t a = 0; a < M->A; a++) M->inv_first[(size_t)a * M->N + min_to(M, s, a) + 1]++;
    for (size_t i = 0; i < AN; i++) M->inv_first[i + 1] += M->inv_first[i];
    memcpy(fill, M->inv_first, AN * sizeof *fill);
    for (uint32_t s = 0; s < M->N; s++)
        for (uint32_t a = 0; a < M->A; a++) M->inv[fill[(size_t)a * M->N + min_to(M, s, a)]++] = s;
    free(fill);
    return true;
}

static void parts_free(parts *P) {
    free(P->elem);
    free(P->loc);
    free(P->blk);
    free(P->first);
    free(P->end);
    free(P->mid);
}

/* The first partition: accepting, the other live states, the dead state (the empty
 * ones left out). */
static bool parts_init(parts *P, const min_rule *M) {
    const uint32_t N = M->N;
    *P = (parts){0};
    P->elem = malloc(N * sizeof *P->elem);
    P->loc = malloc(N * sizeof *P->loc);
    P->blk = malloc(N * sizeof *P->blk);
    P->first = malloc(N * sizeof *P->first);
    P->end = malloc(N * sizeof *P->end);
    P->mid = malloc(N * sizeof *P->mid);
    if (!P->elem || !P->loc || !P->blk || !P->first || !P->end || !P->mid) return false;
    uint32_t k = 0;
    for (int pass = 0; pass < 3; pass++) {
        const uint32_t start = k;
        for (uint32_t s = 0; s < N; s++) {
            const int kind = s == M->n ? 2 : M->d->accept[M->live[s]] ? 0 : 1;
            if (kind != pass) continue;
            P->elem[k] = s;
            P->loc[s] = k++;
            P->blk[s] = P->n_blk;
        }
        if (k > start) {
            P->first[P->n_blk] = P->mid[P->n_blk] = start;
            P->end[P->n_blk] = k;
            P->n_blk++;
        }
    }
    return true;
}

/* Hopcroft's work list: the blocks still to split others by. */
typedef struct {
    uint32_t *blocks;
    uint8_t *queued; /* (N) a block is in blocks */
    uint32_t n;
} min_work;

static void work_add(min_work *W, uint32_t b) {
    W->blocks[W->n++] = b;
    W->queued[b] = 1;
}

/* Block b, some of whose states ([first, mid)) were marked: the marked part becomes a
 * block of its own, unless that is all of b. The smaller half joins the work list (the
 * new one when b is queued already: both are then). */
static void split_block(parts *P, uint32_t b, min_work *W) {
    if (P->mid[b] == P->end[b]) {
        P->mid[b] = P->first[b]; /* all marked: no split */
        return;
    }
    const uint32_t nb = P->n_blk++;
    P->first[nb] = P->first[b];
    P->end[nb] = P->mid[b];
    P->mid[nb] = P->first[nb];
    P->first[b] = P->mid[b];
    P->mid[b] = P->first[b];
    for (uint32_t i = P->first[nb]; i < P->end[nb]; i++) P->blk[P->elem[i]] = nb;
    work_add(W, W->queued[b] || P->end[nb] - P->first[nb] <= P->end[b] - P->first[b] ? nb : b);
}

/* Splits the blocks until no symbol tells two states of a block apart. */
static bool refine(const min_rule *M, parts *P) {
    const uint32_t N = M->N;
    min_work W = {malloc(N * sizeof *W.blocks), calloc(N, 1), 0};
    uint32_t *touched = malloc(N * sizeof *touched), *spl = malloc(N * sizeof *spl);
    const bool ok = W.blocks && W.queued && touched && spl;
    for (uint32_t b = 0; ok && b < P->n_blk; b++) work_add(&W, b);
    while (ok && W.n) {
        const uint32_t sp = W.blocks[--W.n];
        W.queued[sp] = 0;
        /* the splitter as it is now: marking and splitting move states around */
        const uint32_t n_spl = P->end[sp] - P->first[sp];
        memcpy(spl, P->elem + P->first[sp], n_spl * sizeof *spl);
        for (uint32_t a = 0; a < M->A; a++) {
            uint32_t n_touched = 0;
            for (uint32_t i = 0; i < n_spl; i++) {
                const size_t at = (size_t)a * N + spl[i];
                for (uint32_t j = M->inv_first[at]; j < M->inv_first[at + 1]; j++)
                    mark(P, M->inv[j], touched, &n_touched);
            }
            for (uint32_t q = 0; q < n_touched; q++) split_block(P, touched[q], &W);
        }
    }
    free(W.blocks);
    free(W.queued);
    free(touched);
    free(spl);
    return ok;
}

/* The blocks' new numbers into bmap (n_blk), in order of their first live state (state
 * 0's block is 0); their count. */
static uint32_t number_blocks(const min_rule *M, const parts *P, int32_t *bmap) {
    uint32_t nb = 0;
    for (uint32_t b = 0; b < P->n_blk; b++) bmap[b] = -1;
    for (uint32_t s = 0; s < M->n; s++)
        if (bmap[P->blk[s]] < 0) bmap[P->blk[s]] = (int32_t)nb++;
    return nb;
}

/* Block b's row of the new tables t, from state s of the old ones (one the block holds);
 * *o: the next call pair. */
static void block_row(const min_rule *M, const parts *P, const int32_t *bmap, uint32_t b, uint32_t s, gr_dfa *t,
                      uint32_t *o) {
    const gr_dfa *d = M->d;
    const uint32_t nc = M->nc;
    t->accept[b] = d->accept[s];
    for (uint32_t c = 0; c < nc; c++) {
        const int32_t y = d->trans[(size_t)s * nc + c];
        t->trans[(size_t)b * nc + c] = y >= 0 ? bmap[P->blk[M->idx[y]]] : -1;
    }
    t->call_first[b] = *o;
    for (uint32_t k = d->call_first[s]; k < d->call_first[s + 1]; k++)
        t->calls[(*o)++] = (gr_call){d->calls[k].rule, bmap[P->blk[M->idx[d->calls[k].ret]]]};
}

static void swap_tables(gr_dfa *d, gr_dfa *t) {
    gr_dfa x = *d;
    d->trans = t->trans, d->accept = t->accept, d->call_first = t->call_first, d->calls = t->calls;
    t->trans = x.trans, t->accept = x.accept, t->call_first = x.call_first, t->calls = x.calls;
}

/* d's tables over the blocks; d untouched when no state was merged or dropped. */
static bool rebuild(gr_dfa *d, const min_rule *M, const parts *P) {
    int32_t *bmap = malloc(P->n_blk * sizeof *bmap), *rep = malloc(P->n_blk * sizeof *rep);
    gr_dfa t = {0}; /* the new tables, then the old ones to free */
    bool ok = bmap && rep;
    const uint32_t nb = ok ? number_blocks(M, P, bmap) : 0;
    if (ok && nb != M->n0) {
        t.trans = malloc((size_t)nb * M->nc * sizeof *t.trans);
        t.accept = malloc(nb);
        t.call_first = malloc((nb + 1) * sizeof *t.call_first);
        t.calls = malloc((d->call_first[M->n0] + 1) * sizeof *t.calls);
        ok = t.trans && t.accept && t.call_first && t.calls;
        for (uint32_t s = M->n; ok && s-- > 0;) rep[bmap[P->blk[s]]] = (int32_t)M->live[s];
        uint32_t o = 0;
        for (uint32_t b = 0; ok && b < nb; b++) block_row(M, P, bmap, b, (uint32_t)rep[b], &t, &o);
        if (ok) {
            t.call_first[nb] = o;
            swap_tables(d, &t);
            d->n_states = nb;
        }
    }
    gr_dfa_free_tables(&t);
    free(bmap);
    free(rep);
    return ok;
}

static bool minimize_rule(gr_dfa *d) {
    if (d->n_states <= 1) return true;
    min_rule M = {.d = d, .n0 = d->n_states, .nc = d->n_class};
    parts P = {0};
    const bool ok = live_states(&M) && called_rules(&M) && predecessors(&M) && parts_init(&P, &M) && refine(&M, &P) &&
                    rebuild(d, &M, &P);
    parts_free(&P);
    min_rule_free(&M);
    return ok;
}

static bool minimize(gr_grammar *g, cn_error *err) {
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!minimize_rule(&g->rules[r])) {
            cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
            return false;
        }
    return true;
}

static void nullable(gr_grammar *g) {
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            gr_dfa *d = &g->rules[r];
            for (uint32_t s = 0; s < d->n_states; s++) {
                if (d->accept_n[s]) continue;
                bool a = d->accept[s];
                for (uint32_t k = d->call_first[s]; !a && k < d->call_first[s + 1]; k++) {
                    const gr_dfa *c = &g->rules[d->calls[k].rule];
                    a = c->n_states && c->accept_n[0] && d->accept_n[d->calls[k].ret];
                }
                if (a) d->accept_n[s] = 1, changed = true;
            }
        }
    }
}

/* Left corners: the rules called at states reachable from a rule's start without a byte. */
static bool left_recursion(gr_grammar *g, cn_error *err) {
    uint32_t R = g->n_rules;
    uint8_t *color = calloc(R, 1); /* 0 new, 1 on the path, 2 done */
    int32_t *stack = malloc(R * 2 * sizeof *stack);
    uint8_t *seen = NULL;
    uint32_t max_states = 1;
    for (uint32_t r = 0; r < R; r++) max_states = CN_MAX(max_states, g->rules[r].n_states);
    seen = malloc(max_states);
    int32_t *work = malloc(max_states * sizeof *work);
    /* corners[r]: the rules left-callable from r, as a list */
    i32v *corners = calloc(R, sizeof *corners);
    bool ok = color && stack && seen && work && corners;
    if (!ok) {
        cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        goto out;
    }
    for (uint32_t r = 0; r < R && ok; r++) {
        const gr_dfa *d = &g->rules[r];
        if (!d->n_states) continue;
        memset(seen, 0, d->n_states);
        uint32_t n = 0;
        work[n++] = 0;
        seen[0] = 1;
        while (n) {
            int32_t s = work[--n];
            for (uint32_t k = d->call_first[s]; k < d->call_first[s + 1]; k++) {
                const gr_call *c = &d->calls[k];
                if (!i32v_push(&corners[r], c->rule))
                    ok = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar") == CN_STATUS_OK;
                const gr_dfa *cd = &g->rules[c->rule];
                if (cd->n_states && cd->accept_n[0] && !seen[c->ret]) seen[c->ret] = 1, work[n++] = c->ret;
            }
        }
    }
    /* cycle search: iterative DFS */
    for (uint32_t r0 = 0; r0 < R && ok; r0++) {
        if (color[r0]) continue;
        uint32_t sp = 0;
        stack[sp++] = (int32_t)r0;
        stack[sp++] = 0;
        color[r0] = 1;
        while (sp && ok) {
            int32_t r = stack[sp - 2], i = stack[sp - 1];
            if ((uint32_t)i < corners[r].n) {
                stack[sp - 1]++;
                int32_t q = corners[r].v[i];
                if (color[q] == 1) {
                    cn_err(err, CN_STATUS_INVALID_ARG,
                           "left recursion: rule '%s' can reach itself without consuming input", g->rules[q].name);
                    ok = false;
                } else if (color[q] == 0) {
                    color[q] = 1;
                    stack[sp++] = q;
                    stack[sp++] = 0;
                }
            } else {
                color[r] = 2;
                sp -= 2;
            }
        }
    }
out:
    if (corners)
        for (uint32_t r = 0; r < R; r++) free(corners[r].v);
    free(corners);
    free(color);
    free(stack);
    free(seen);
    free(work);
    return ok;
}

static void finish_tables(gr_grammar *g) {
    for (uint32_t r = 0; r < g->n_rules; r++) {
        gr_dfa *d = &g->rules[r];
        d->leaf = d->call_first ? d->call_first[d->n_states] == 0 : true;
        uint64_t h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (uint64_t)(x)) * 1099511628211ull)
        MIX(d->n_states);
        MIX(d->n_class);
        for (int c = 0; c < 256; c++) MIX(d->cls[c]);
        for (uint32_t s = 0; s < d->n_states; s++) {
            MIX(d->accept[s]);
            bool out = d->call_first[s + 1] > d->call_first[s];
            for (uint32_t c = 0; c < d->n_class; c++) {
                MIX(d->trans[s * d->n_class + c]);
                out |= d->trans[s * d->n_class + c] >= 0;
            }
            d->has_out[s] = out;
        }
#undef MIX
        d->hash = h;
    }
}

/* Which rules the root reaches (through the builder's expressions); an undefined one is
 * an error. */
static bool reachable(const gr_builder *b, int32_t root, uint8_t *reach, cn_error *err) {
    int32_t *work = malloc(b->n_rules * sizeof *work);
    int32_t *nodes = malloc((b->n_nodes + 1) * sizeof *nodes);
    uint8_t *nseen = calloc(b->n_nodes + 1, 1);
    bool ok = work && nodes && nseen;
    if (!ok) {
        cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
        goto out;
    }
    uint32_t nw = 0;
    reach[root] = 1;
    work[nw++] = root;
    while (nw && ok) {
        int32_t r = work[--nw];
        if (b->rules[r].expr < 0) {
            cn_err(err, CN_STATUS_INVALID_ARG, "rule '%s' is used but not defined", b->rules[r].name);
            ok = false;
            break;
        }
        uint32_t nn = 0;
        if (!nseen[b->rules[r].expr]) nseen[b->rules[r].expr] = 1, nodes[nn++] = b->rules[r].expr;
        while (nn) {
            const gr_node *x = &b->nodes[nodes[--nn]];
            if (x->kind == GR_N_REF && !reach[x->a]) reach[x->a] = 1, work[nw++] = (int32_t)x->a;
            if (x->kind == GR_N_SEQ || x->kind == GR_N_ALT || x->kind == GR_N_AND)
                for (uint32_t i = 0; i < x->n; i++) {
                    int32_t k = b->kids[x->first + i];
                    if (!nseen[k]) nseen[k] = 1, nodes[nn++] = k;
                }
            if ((x->kind == GR_N_REPEAT || x->kind == GR_N_NOT) && !nseen[x->first])
                nseen[x->first] = 1, nodes[nn++] = (int32_t)x->first;
        }
    }
out:
    free(work);
    free(nodes);
    free(nseen);
    return ok;
}

cn_status gr_compile(gr_builder *b, int32_t root, const gr_limits *lim, gr_grammar **out, cn_error *err) {
    *out = NULL;
    if (b->err.status != CN_STATUS_OK) {
        if (err) *err = b->err;
        return b->err.status;
    }
    if (root < 0 || (uint32_t)root >= b->n_rules)
        return cn_err(err, CN_STATUS_INVALID_ARG, "the grammar has no root rule");
    gr_grammar *g = calloc(1, sizeof *g);
    uint8_t *reach = calloc(b->n_rules, 1);
    nfa a = {.b = b, .err = err};
    a.root = &a;
    cn_status st = CN_STATUS_NO_MEMORY;
    if (!g || !reach) {
        cn_err(err, st, "out of memory compiling the grammar");
        goto fail;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->rules = calloc(b->n_rules, sizeof *g->rules);
    g->n_rules = g->rules ? b->n_rules : 0; /* gr_grammar_free walks them */
    g->root = root;
    if (!g->rules) {
        cn_err(err, st, "out of memory compiling the grammar");
        goto fail;
    }
    if (!reachable(b, root, reach, err)) {
        st = err ? err->status : CN_STATUS_INVALID_ARG;
        goto fail;
    }
    a.budget_states = lim && lim->max_states ? lim->max_states : 1000000;
    a.deadline_ms = cn_time_ms() + (lim && lim->max_compile_ms > 0 ? lim->max_compile_ms : 10000);
    if (b->deadline_ms > 0 && b->deadline_ms < a.deadline_ms)
        a.deadline_ms = b->deadline_ms; /* one budget with the front end */
    for (uint32_t r = 0; r < b->n_rules; r++) {
        gr_dfa *d = &g->rules[r];
        d->name = strdup(b->rules[r].name);
        if (!d->name) { /* st may be OK here, from the rule before */
            st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
            goto fail;
        }
        if (!reach[r]) {
            d->call_first = calloc(1, sizeof *d->call_first);
            if (!d->call_first) {
                st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory compiling the grammar");
                goto fail;
            }
            continue;
        }
        a.n_states = 0;
        a.n_e = 0;
        a.n_lsets = 0;
        int32_t s0 = nfa_state(&a);
        int32_t fin = frag(&a, b->rules[r].expr, s0, 0);
        if (a.st != CN_STATUS_OK) {
            st = a.st;
            goto fail;
        }
        st = determinize(&a, fin, d);
        if (st != CN_STATUS_OK) goto fail;
    }
    if (!prune(g, err)) {
        st = err ? err->status : CN_STATUS_INVALID_ARG;
        goto fail;
    }
    if (!minimize(g, err)) goto fail;
    nullable(g);
    if (!left_recursion(g, err)) {
        st = err ? err->status : CN_STATUS_INVALID_ARG;
        goto fail;
    }
    finish_tables(g);
    free(a.head);
    free(a.e);
    free(a.lsets);
    free(reach);
    *out = g;
    return CN_STATUS_OK;
fail:
    if (st == CN_STATUS_OK) st = CN_STATUS_NO_MEMORY;
    free(a.head);
    free(a.e);
    free(a.lsets);
    free(reach);
    gr_grammar_free(g);
    return st;
}
