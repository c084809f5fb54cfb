/* builder.c — the expression builder every front end writes into (grammar.h): rules by
 * name, and expression nodes (bytes, sequences, alternatives, repeats, rule calls,
 * intersections and complements) in flat arrays. It only records; compile.c turns the rules into automata. The first
 * error sticks: every later call returns -1, so a front end checks once at the end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/utf8.h"
#include "grammar/grammar_impl.h"

#define GR_MAX_NODES (8u << 20)
#define GR_MAX_RULES (1u << 20)

gr_builder *gr_builder_new(void) {
    gr_builder *b = calloc(1, sizeof *b);
    return b;
}

void gr_builder_free(gr_builder *b) {
    if (!b) return;
    free(b->nodes);
    free(b->kids);
    free(b->sets);
    for (uint32_t i = 0; i < b->n_rules; i++) free(b->rules[i].name);
    free(b->rules);
    free(b);
}

const cn_error *gr_builder_error(const gr_builder *b) { return &b->err; }

void gr_builder_fail(gr_builder *b, cn_status st, const char *fmt, ...) {
    if (b->err.status != CN_STATUS_OK) return;
    b->err.status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err.msg, sizeof b->err.msg, fmt, ap);
    va_end(ap);
}

void gr_builder_set_deadline(gr_builder *b, double deadline_ms) { b->deadline_ms = deadline_ms; }

/* Whether an array of the grammar may hold need entries (limit: its budget, checked
 * before it grows); false with the budget's message. */
static bool within_budget(gr_builder *b, size_t need, uint32_t limit) {
    if (need <= limit) return true;
    gr_builder_fail(b, CN_STATUS_INVALID_ARG, "compile budget: the grammar has more than %u nodes", limit);
    return false;
}

/* grown: a CN_GROW's answer; false with the message when memory ran out. */
static bool grew(gr_builder *b, bool grown) {
    if (!grown) gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
    return grown;
}

static int32_t node_new(gr_builder *b, uint8_t kind, uint32_t a, uint32_t c, uint32_t first, uint32_t n) {
    if (b->err.status != CN_STATUS_OK) return -1;
    if ((b->n_nodes & 1023) == 1023 && b->deadline_ms > 0 && cn_time_ms() > b->deadline_ms) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG,
                        "compile budget: building the grammar took longer than allowed (max_compile_ms)");
        return -1;
    }
    if (!within_budget(b, b->n_nodes + 1, GR_MAX_NODES) || !grew(b, CN_GROW(b->nodes, b->cap_nodes, b->n_nodes + 1)))
        return -1;
    gr_node *x = &b->nodes[b->n_nodes];
    x->kind = kind;
    x->a = a;
    x->b = c;
    x->first = first;
    x->n = n;
    return (int32_t)b->n_nodes++;
}

/* A new rule named name, declared and not defined. */
static int32_t rule_add(gr_builder *b, const char *name) {
    if (!within_budget(b, b->n_rules + 1, GR_MAX_RULES) || !grew(b, CN_GROW(b->rules, b->cap_rules, b->n_rules + 1)))
        return -1;
    char *nm = strdup(name);
    if (!nm) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
        return -1;
    }
    b->rules[b->n_rules] = (gr_brule){.name = nm, .expr = -1};
    return (int32_t)b->n_rules++;
}

int32_t gr_rule(gr_builder *b, const char *name) {
    if (b->err.status != CN_STATUS_OK) return -1;
    for (uint32_t i = 0; i < b->n_rules; i++)
        if (strcmp(b->rules[i].name, name) == 0) return (int32_t)i;
    return rule_add(b, name);
}

int32_t gr_rule_fresh(gr_builder *b, const char *prefix) {
    if (b->err.status != CN_STATUS_OK) return -1;
    /* A fresh name never collides with a user's: rule names in GBNF cannot hold '#'. */
    char nm[96];
    snprintf(nm, sizeof nm, "%.60s#%u", prefix, b->n_fresh++);
    return rule_add(b, nm);
}

int32_t gr_rule_define(gr_builder *b, int32_t rule, int32_t expr) {
    if (b->err.status != CN_STATUS_OK || rule < 0 || expr < 0) return -1;
    if ((uint32_t)rule >= b->n_rules) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "internal: rule %d out of range", rule);
        return -1;
    }
    if (b->rules[rule].expr >= 0) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "rule '%s' is defined twice", b->rules[rule].name);
        return -1;
    }
    b->rules[rule].expr = expr;
    return rule;
}

const char *gr_rule_name(const gr_builder *b, int32_t rule) {
    return rule >= 0 && (uint32_t)rule < b->n_rules ? b->rules[rule].name : "?";
}

int32_t gr_empty(gr_builder *b) { return node_new(b, GR_N_EMPTY, 0, 0, 0, 0); }
int32_t gr_nothing(gr_builder *b) { return node_new(b, GR_N_NOTHING, 0, 0, 0, 0); }

int32_t gr_byteset(gr_builder *b, const uint8_t set[32]) {
    if (b->err.status != CN_STATUS_OK) return -1;
    /* The last few sets are looked up again: literals reuse single-byte sets a lot. */
    uint32_t lo = b->n_sets > 8 ? b->n_sets - 8 : 0;
    for (uint32_t i = b->n_sets; i-- > lo;)
        if (memcmp(b->sets[i].bits, set, 32) == 0) return node_new(b, GR_N_BYTES, i, 0, 0, 0);
    if (!within_budget(b, b->n_sets + 1, GR_MAX_NODES) || !grew(b, CN_GROW(b->sets, b->cap_sets, b->n_sets + 1)))
        return -1;
    memcpy(b->sets[b->n_sets].bits, set, 32);
    return node_new(b, GR_N_BYTES, b->n_sets++, 0, 0, 0);
}

int32_t gr_byte_range(gr_builder *b, uint8_t lo, uint8_t hi) {
    uint8_t set[32] = {0};
    for (unsigned c = lo; c <= hi; c++) set[c >> 3] |= (uint8_t)(1u << (c & 7));
    return gr_byteset(b, set);
}

static int32_t list_node(gr_builder *b, uint8_t kind, const int32_t *items, size_t n) {
    if (b->err.status != CN_STATUS_OK) return -1;
    for (size_t i = 0; i < n; i++)
        if (items[i] < 0) return -1;
    if (n == 0) return kind == GR_N_SEQ ? gr_empty(b) : gr_nothing(b);
    if (n == 1) return items[0];
    if (n > GR_MAX_NODES) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "compile budget: a list of %zu items", n);
        return -1;
    }
    if (!within_budget(b, b->n_kids + n, 4 * GR_MAX_NODES) || !grew(b, CN_GROW(b->kids, b->cap_kids, b->n_kids + n)))
        return -1;
    uint32_t first = b->n_kids;
    memcpy(b->kids + first, items, n * sizeof *items);
    b->n_kids += (uint32_t)n;
    return node_new(b, kind, 0, 0, first, (uint32_t)n);
}

int32_t gr_seq(gr_builder *b, const int32_t *items, size_t n) { return list_node(b, GR_N_SEQ, items, n); }
int32_t gr_alt(gr_builder *b, const int32_t *items, size_t n) { return list_node(b, GR_N_ALT, items, n); }
int32_t gr_and(gr_builder *b, int32_t x, int32_t y) { return list_node(b, GR_N_AND, (int32_t[]){x, y}, 2); }

int32_t gr_not(gr_builder *b, int32_t x) {
    if (b->err.status != CN_STATUS_OK || x < 0) return -1;
    return node_new(b, GR_N_NOT, 0, 0, (uint32_t)x, 0);
}

int32_t gr_seq2(gr_builder *b, int32_t x, int32_t y) { return gr_seq(b, (int32_t[]){x, y}, 2); }
int32_t gr_alt2(gr_builder *b, int32_t x, int32_t y) { return gr_alt(b, (int32_t[]){x, y}, 2); }

int32_t gr_literal(gr_builder *b, const char *s, size_t n) {
    if (b->err.status != CN_STATUS_OK) return -1;
    if (n == 0) return gr_empty(b);
    int32_t small[64];
    int32_t *items = n <= 64 ? small : malloc(n * sizeof *items);
    if (!items) {
        gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        items[i] = gr_byte_range(b, c, c);
    }
    int32_t r = gr_seq(b, items, n);
    if (items != small) free(items);
    return r;
}

/* ---- long bounded repeats ----
 * Unrolled, item{min,max} costs (max) copies of the item's automaton: a JSON string of
 * maxLength 8192 is a million NFA states and a chain of DFA states whose token masks are
 * each computed cold. Past REPEAT_CHUNK_AT states the repeat is cut into chunks of K
 * items, two rules shared by every position: full := item{K}, less := item{0,K-1}, and
 *
 *   item{min,max} = full{min/K} item{min%K} tail,   r = max-min = q*K + s,
 *   tail = full{0,q-1} less | full{q} item{0,s}
 *
 * (lengths aK+b, a < q, b < K, then qK..qK+s: every count 0..r exactly once, so the
 * parse is unambiguous and at most two stacks are live inside a chunk: in full, or in
 * less). Only for items that consume at least one byte and call no rule: otherwise the
 * split points would be ambiguous and the stacks could multiply. */

#define REPEAT_CHUNK_AT 65536u     /* unrolled NFA states above which a repeat is chunked */
#define REPEAT_CHUNK_STATES 16384u /* about this many NFA states per chunk */

/* An estimate of the NFA states x unrolls to (saturating at cap); UINT64_MAX when x
 * calls a rule or nests too deeply (not chunked). */
static uint64_t expr_size(const gr_builder *b, int32_t x, uint64_t cap, int depth) {
    if (depth > 64) return UINT64_MAX;
    const gr_node *n = &b->nodes[x];
    uint64_t s = 0;
    switch (n->kind) {
    case GR_N_EMPTY:
    case GR_N_NOTHING: return 1;
    case GR_N_BYTES: return 1;
    case GR_N_REF:
    case GR_N_AND:
    case GR_N_NOT: return UINT64_MAX;
    case GR_N_SEQ:
    case GR_N_ALT:
        for (uint32_t i = 0; i < n->n; i++) {
            uint64_t k = expr_size(b, b->kids[n->first + i], cap, depth + 1);
            if (k == UINT64_MAX) return k;
            s += k + (n->kind == GR_N_ALT);
            if (s >= cap) return cap;
        }
        return s + 1;
    case GR_N_REPEAT: {
        uint64_t k = expr_size(b, (int32_t)n->first, cap, depth + 1);
        if (k == UINT64_MAX) return k;
        uint64_t copies = n->b == GR_INF ? (uint64_t)n->a + 1 : n->b;
        return copies >= cap / (k + 1) ? cap : copies * (k + 1) + 1;
    }
    }
    return UINT64_MAX;
}

/* The fewest bytes x matches (0 for a call: unknown). */
static uint64_t expr_min_len(const gr_builder *b, int32_t x, int depth) {
    if (depth > 64) return 0;
    const gr_node *n = &b->nodes[x];
    uint64_t s = 0;
    switch (n->kind) {
    case GR_N_BYTES: return 1;
    case GR_N_NOTHING: return 1; /* never matches: no empty split either */
    case GR_N_SEQ:
        for (uint32_t i = 0; i < n->n; i++) s += expr_min_len(b, b->kids[n->first + i], depth + 1);
        return s;
    case GR_N_ALT:
        s = UINT64_MAX;
        for (uint32_t i = 0; i < n->n; i++) s = CN_MIN(s, expr_min_len(b, b->kids[n->first + i], depth + 1));
        return n->n ? s : 1;
    case GR_N_REPEAT: return n->a ? n->a * expr_min_len(b, (int32_t)n->first, depth + 1) : 0;
    case GR_N_AND:
        return CN_MAX(expr_min_len(b, b->kids[n->first], depth + 1), expr_min_len(b, b->kids[n->first + 1], depth + 1));
    default: return 0;
    }
}

static int32_t repeat_node(gr_builder *b, int32_t item, uint32_t min, uint32_t max) {
    if (max == 0) return gr_empty(b);
    if (min == 1 && max == 1) return item;
    return node_new(b, GR_N_REPEAT, min, max, (uint32_t)item, 0);
}

static int32_t repeat_chunked(gr_builder *b, int32_t item, uint32_t min, uint32_t max, uint64_t item_states) {
    uint32_t K = b->repeat_chunk_k ? b->repeat_chunk_k
                                   : (uint32_t)CN_MAX(8, CN_MIN(256, REPEAT_CHUNK_STATES / (item_states + 1)));
    int32_t full = gr_rule_fresh(b, "repeat");
    if (gr_rule_define(b, full, repeat_node(b, item, K, K)) < 0) return -1;
    int32_t head = gr_seq2(b, repeat_node(b, gr_ref(b, full), min / K, min / K),
                           repeat_node(b, item, min % K, min % K));
    if (max == GR_INF) return gr_seq2(b, head, repeat_node(b, item, 0, GR_INF));
    uint32_t r = max - min, q = r / K, s = r % K;
    if (q == 0) return gr_seq2(b, head, repeat_node(b, item, 0, s));
    int32_t less = gr_rule_fresh(b, "repeat");
    if (gr_rule_define(b, less, repeat_node(b, item, 0, K - 1)) < 0) return -1;
    int32_t partial = gr_seq2(b, repeat_node(b, gr_ref(b, full), 0, q - 1), gr_ref(b, less));
    int32_t last = gr_seq2(b, repeat_node(b, gr_ref(b, full), q, q), repeat_node(b, item, 0, s));
    return gr_seq2(b, head, gr_alt2(b, partial, last));
}

int32_t gr_repeat(gr_builder *b, int32_t item, uint32_t min, uint32_t max) {
    if (b->err.status != CN_STATUS_OK || item < 0) return -1;
    if (min > max) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "a repeat {%u,%u} has min > max", min, max);
        return -1;
    }
    if (max == 0) return gr_empty(b);
    if (min == 1 && max == 1) return item;
    uint64_t copies = max == GR_INF ? (uint64_t)min + 1 : max;
    uint64_t at = b->repeat_chunk_at ? b->repeat_chunk_at : REPEAT_CHUNK_AT;
    if (copies > 16 || b->repeat_chunk_at) {
        uint64_t k = expr_size(b, item, REPEAT_CHUNK_AT, 0);
        if (k < REPEAT_CHUNK_AT && copies * (k + 1) > at && expr_min_len(b, item, 0) > 0)
            return repeat_chunked(b, item, min, max, k);
    }
    return node_new(b, GR_N_REPEAT, min, max, (uint32_t)item, 0);
}

int32_t gr_ref(gr_builder *b, int32_t rule) {
    if (b->err.status != CN_STATUS_OK || rule < 0) return -1;
    if ((uint32_t)rule >= b->n_rules) {
        gr_builder_fail(b, CN_STATUS_INVALID_ARG, "internal: rule %d out of range", rule);
        return -1;
    }
    return node_new(b, GR_N_REF, (uint32_t)rule, 0, 0, 0);
}

/* ---- code points as UTF-8 ----
 * A code point range becomes alternatives of byte-range sequences: first split at the
 * UTF-8 length boundaries, then recursively where the lead byte changes, so that each
 * piece is lead-range followed by full continuation ranges. */

bool gr_utf8_next(const char *src, size_t n, size_t *pos, uint32_t *out) {
    size_t bad;
    const int len = cn_utf8_check((const uint8_t *)src + *pos, n - *pos, &bad);
    if (len <= 0) return false;
    *pos += cn_utf8_decode(src + *pos, (size_t)len, out);
    return true;
}

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

typedef struct {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ivec;

static void ivec_push(ivec *a, int32_t x) {
    if (!CN_GROW(a->v, a->cap, a->n + 1)) {
        a->oom = true;
        return;
    }
    a->v[a->n++] = x;
}

/* [lo, hi] with utf8_len(lo) == utf8_len(hi) == len: pushes byte sequences onto out. */
static void utf8_split(gr_builder *b, uint32_t lo, uint32_t hi, int len, ivec *out) {
    if (len == 1) {
        ivec_push(out, gr_byte_range(b, (uint8_t)lo, (uint8_t)hi));
        return;
    }
    /* m: the bits below the lead byte's. */
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, lo, lo | m, len, out);
                utf8_split(b, (lo | m) + 1, hi, len, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, lo, (hi & ~m) - 1, len, out);
                utf8_split(b, hi & ~m, hi, len, out);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    cn_utf8_encode(lo, (char *)a);
    cn_utf8_encode(hi, (char *)z);
    int32_t items[4];
    for (int i = 0; i < len; i++) items[i] = gr_byte_range(b, a[i], z[i]);
    ivec_push(out, gr_seq(b, items, (size_t)len));
}

static int cmp_u32pair(const void *x, const void *y) {
    const uint32_t *a = x, *c = y;
    return a[0] < c[0] ? -1 : a[0] > c[0];
}

int32_t gr_codepoints(gr_builder *b, const uint32_t *ranges, size_t n_ranges, bool negate) {
    if (b->err.status != CN_STATUS_OK) return -1;
    /* Normalize: clip, sort, merge; then complement if asked; then drop surrogates. */
    uint32_t *r = malloc((n_ranges + 2) * 2 * sizeof *r);
    uint32_t *c = malloc((n_ranges + 4) * 2 * sizeof *c);
    ivec alts = {0};
    int32_t res = -1;
    if (!r || !c) goto oom;
    size_t n = 0;
    for (size_t i = 0; i < n_ranges; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo > hi) continue;
        r[2 * n] = lo;
        r[2 * n + 1] = hi;
        n++;
    }
    qsort(r, n, 2 * sizeof *r, cmp_u32pair);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[2 * i] <= c[2 * m - 1] + 1) {
            if (r[2 * i + 1] > c[2 * m - 1]) c[2 * m - 1] = r[2 * i + 1];
        } else {
            c[2 * m] = r[2 * i];
            c[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (negate) {
        size_t k = 0;
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (c[2 * i] > next) {
                r[2 * k] = next;
                r[2 * k + 1] = c[2 * i] - 1;
                k++;
            }
            next = c[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            r[2 * k] = next;
            r[2 * k + 1] = 0x10FFFF;
            k++;
        }
        memcpy(c, r, k * 2 * sizeof *c);
        m = k;
    }
    static const uint32_t cuts[][2] = {
        {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    for (size_t i = 0; i < m; i++)
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            uint32_t lo = c[2 * i] > cuts[k][0] ? c[2 * i] : cuts[k][0];
            uint32_t hi = c[2 * i + 1] < cuts[k][1] ? c[2 * i + 1] : cuts[k][1];
            if (lo <= hi) utf8_split(b, lo, hi, utf8_len(lo), &alts);
        }
    if (alts.oom) goto oom;
    res = gr_alt(b, alts.v, alts.n);
    free(r);
    free(c);
    free(alts.v);
    return res;
oom:
    free(r);
    free(c);
    free(alts.v);
    gr_builder_fail(b, CN_STATUS_NO_MEMORY, "out of memory building the grammar");
    return -1;
}
