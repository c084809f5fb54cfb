/* grammar_impl.h — the layer's private structures: the builder's arrays (builder.c), the
 * compiled grammar (compile.c), the stack machine (pda.c), the vocabulary trie (vocab.c)
 * and the token matcher (matcher.c). Only src/grammar includes it. */
#ifndef CN_GRAMMAR_IMPL_H
#define CN_GRAMMAR_IMPL_H

#include <pthread.h>

#include "grammar/grammar.h"

/* ---- builder ---- */

enum { GR_N_EMPTY, GR_N_NOTHING, GR_N_BYTES, GR_N_SEQ, GR_N_ALT, GR_N_REPEAT, GR_N_REF, GR_N_AND, GR_N_NOT };

typedef struct {
    uint8_t kind;
    uint32_t a, b;     /* BYTES: set index; REPEAT: min, max; REF: rule */
    uint32_t first, n; /* SEQ/ALT/AND: kids[first..first+n); REPEAT/NOT: first = the item */
} gr_node;

typedef struct {
    uint8_t bits[32];
} gr_set;

typedef struct {
    char *name;
    int32_t expr; /* -1: declared, not defined */
} gr_brule;

struct gr_builder {
    gr_node *nodes;
    uint32_t n_nodes;
    size_t cap_nodes;
    int32_t *kids;
    uint32_t n_kids;
    size_t cap_kids;
    gr_set *sets;
    uint32_t n_sets;
    size_t cap_sets;
    gr_brule *rules;
    uint32_t n_rules;
    size_t cap_rules;
    uint32_t n_fresh;
    /* long repeats are cut into chunks (builder.c) past chunk_at unrolled NFA states, K
     * items a chunk (0: the defaults; tests set them small to reach chunk borders) */
    uint32_t repeat_chunk_at, repeat_chunk_k;
    double deadline_ms; /* gr_builder_set_deadline; read every 1024 nodes */
    cn_error err;
};

/* The front ends' reader of their source text: the UTF-8 scalar value at src[*pos]
 * (n bytes in all) into *out, *pos moved past it; false, nothing moved, when the bytes
 * there are not UTF-8 (builder.c). */
bool gr_utf8_next(const char *src, size_t n, size_t *pos, uint32_t *out);

/* ---- the compiled grammar ----
 * One DFA per rule over byte classes and rule calls. State 0 is the start. trans[s *
 * n_class + class] is the next state or -1. A state's calls are calls[call_first[s] ..
 * call_first[s + 1]): (rule, return state) pairs. Every state that the tables can reach
 * can also reach acceptance (compile prunes the rest), so every live stack can finish. */
typedef struct {
    int32_t rule, ret;
} gr_call;

typedef struct {
    char *name;
    uint32_t n_states, n_class;
    uint8_t cls[256];
    int32_t *trans;       /* (n_states, n_class) */
    uint8_t *accept;      /* (n_states) 1: accepting */
    uint8_t *accept_n;    /* (n_states) 1: accepting, or via calls of nullable rules */
    uint8_t *has_out;     /* (n_states) 1: some byte edge or call leaves it */
    uint32_t *call_first; /* (n_states + 1) */
    gr_call *calls;
    bool leaf;     /* calls no rule: its masks depend on the DFA alone */
    uint64_t hash; /* of the tables (leaf rules: the shared-cache key) */
} gr_dfa;

typedef struct gr_cache gr_cache;

struct gr_grammar {
    gr_dfa *rules;
    uint32_t n_rules;
    int32_t root;
    /* per-grammar mask cache (matcher.c), keyed by (rule, state) */
    pthread_mutex_t mu;
    gr_cache *cache;
};

/* ---- the stack machine ----
 * A stack is a top (rule, state) over a parent frame. Frames are hash-consed (one index
 * per distinct (rule, state, parent)) in a table that grows and shrinks LIFO: a mark taken
 * before some work can be restored after it, which is how masks explore and roll back. */
#define GR_BOTTOM (-1) /* no parent: the root's frame */
#define GR_SENT (-2)   /* the cache walk's stand-in parent: popping it is an escape */

typedef struct {
    int32_t rule, state, parent;
} gr_top;

typedef struct {
    gr_top *f;      /* (cap) */
    uint8_t *end;   /* (cap) 1: the stack from this frame down can finish */
    int32_t *next;  /* (cap) hash chain */
    int32_t *head;  /* (n_head) buckets */
    uint32_t *seen; /* (cap) generation stamps for the pop guard */
    uint32_t n, n_head, gen;
    size_t cap;
} gr_frames;

typedef struct {
    const gr_grammar *g;
    gr_frames fr;
    gr_top *tops; /* scratch: the walk's levels, one after another */
    size_t n_tops, cap_tops;
    bool escaped;   /* set by gr_advance when a top popped GR_SENT */
    bool oom;       /* out of memory, or over (below): the step failed */
    bool over;      /* a byte needed more than GR_MAX_BYTE_STEPS steps or GR_MAX_TOPS
                     * stacks (a very ambiguous grammar); oom is set with it */
    uint32_t steps; /* steps of the byte being advanced */
    /* the dedupe of a byte's new tops past GR_TOPS_SCAN: open addressing over their
     * indices, an entry live when its stamp is the byte's (lazily allocated) */
    uint32_t *th_idx, *th_stamp, th_gen;
    size_t th_from; /* tops before this index are in the table */
} gr_pda;

/* The work one byte may take: an ambiguous grammar (nullable rules repeated, recursion
 * through them) can otherwise multiply its parse stacks with every byte. Past either,
 * the byte is refused, and a mask says why (gr_pda.over). */
#define GR_MAX_BYTE_STEPS (1u << 16)
#define GR_MAX_TOPS 2048
#define GR_TOPS_SCAN 16 /* up to this many, a byte's new tops are deduped by a linear scan */

int gr_pda_init(gr_pda *p, const gr_grammar *g); /* 0 or -1 (no memory) */
void gr_pda_free(gr_pda *p);
int32_t gr_frame_cons(gr_pda *p, gr_top t); /* -1: no memory */
void gr_frames_truncate(gr_pda *p, uint32_t mark);
/* The tops reached from in[0..n_in) by byte c, appended at p->tops[p->n_tops..]; returns
 * how many (0: dead). in may point into p->tops (it is read before anything moves: the
 * function copies nothing over it). */
size_t gr_advance(gr_pda *p, size_t in_at, size_t n_in, uint8_t c);
bool gr_tops_can_end(const gr_pda *p, const gr_top *t, size_t n);
bool gr_tops_can_continue(const gr_pda *p, const gr_top *t, size_t n);
int gr_tops_reserve(gr_pda *p, size_t extra); /* 0 or -1 */

/* ---- the vocabulary trie ----
 * Tokens sorted by their bytes; the trie in preorder: node i holds byte[i] at depth[i]
 * (1 = a first byte), its subtree is nodes [i, end[i]), and the tokens whose text ends
 * there are tok[tok_first[i] .. tok_first[i + 1]). */
typedef struct {
    uint32_t n_nodes;
    uint16_t max_depth;
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *end;
    uint32_t *tok_first; /* (n_nodes + 1) */
    int32_t *tok;
} gr_trie;

struct gr_vocab {
    int refs;
    pthread_mutex_t mu;
    int32_t n_vocab;
    uint8_t **bytes; /* (n_vocab) NULL: never allowed */
    uint32_t *len;
    int32_t *eog;
    size_t n_eog;
    gr_trie trie;
    /* the slice (walk.c): tokens of whole UTF-8 characters that JSON need not escape, of
     * at most GR_SLICE_MAX_LEN bytes */
    uint32_t *slice;  /* (n_words) its tokens' bits */
    gr_trie rest;     /* every other token */
    uint64_t hash;    /* of every token's bytes: which grammars may share it */
    gr_cache *shared; /* leaf rules' masks, keyed by (DFA hash, state) */
};

void gr_trie_free(gr_trie *t);
/* Builds a trie over the (id, bytes) pairs given; ids may repeat. */
int gr_trie_build(gr_trie *t, const int32_t *ids, const uint8_t *const *bytes, const uint32_t *len, size_t n);

void gr_cache_free(gr_cache *c);

#define GR_SLICE_MAX_LEN 16

/* ---- walks (walk.c) ----
 * An automaton over the stack sets a walk meets: state i is the set tops[st[i].at ..
 * + st[i].n), sorted; next[i * 256 + c] its successor by byte c (-1 dead, -2 not yet
 * computed), esc[...] whether that byte popped GR_SENT. States reference p's frames, so
 * whoever truncates p's frames resets the automaton first. */
typedef struct {
    size_t at;
    uint32_t n;
    uint64_t h;
} gr_astate;

typedef struct {
    gr_pda *p;
    gr_astate *st;
    uint32_t n, max_states; /* past max_states a walk keeps only its path */
    size_t cap;
    int32_t *next;  /* (cap, 256) */
    uint8_t *esc;   /* (cap, 256) */
    int8_t *slice;  /* (cap) gr_auto_slice_ok's answer; -1 not asked */
    int32_t *chain; /* (cap) */
    int32_t *head;  /* (n_head) */
    uint32_t n_head;
    gr_top *tops;
    size_t n_tops, cap_tops;
    int32_t *path; /* (cap_path) a walk's state at each depth */
    size_t cap_path;
    size_t *found, *seen; /* the slice search's scratch */
    uint32_t *found_depth;
    uint32_t *esc_nodes; /* trie nodes where a collecting walk escaped */
    size_t n_esc_nodes, cap_esc_nodes;
} gr_auto;

void gr_auto_init(gr_auto *a, gr_pda *p, uint32_t max_states);
void gr_auto_free(gr_auto *a);
void gr_auto_reset(gr_auto *a);
/* The state of the set t[0..n) (sorted in place), made if new; -1: no memory. */
int32_t gr_auto_intern(gr_auto *a, gr_top *t, size_t n);
/* Whether state s takes every slice token (staying inside its own frame). */
bool gr_auto_slice_ok(gr_auto *a, int32_t s);
bool gr_slice_byte(uint8_t c);
/* Walks trie t's nodes [lo, hi) (a subtree or the whole trie) from state s0: sets the
 * bit of every token taken. collect: the nodes where a top escaped are appended to
 * esc_nodes. Failure: p->oom. */
void gr_walk(gr_auto *a, const gr_trie *t, uint32_t lo, uint32_t hi, int32_t s0, uint32_t *mask, bool collect);

/* compile.c */
void gr_dfa_free_tables(gr_dfa *d);

#endif
