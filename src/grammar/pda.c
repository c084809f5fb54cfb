/* pda.c — the stack machine: a set of stacks, each a top (rule, DFA state) over a
 * hash-consed parent frame, advanced one byte at a time. A byte moves a top along its
 * rule's DFA, or enters a rule the state calls (pushing the return frame), or, where the
 * state accepts, returns to the parent and lets it take the byte. Left recursion is
 * refused at compile time, so pushes before a byte are bounded; the only loop left is a
 * nullable call that returns to a frame already tried for this byte, which the pop guard
 * (a per-byte generation stamp per frame) cuts. Frames live in a LIFO table: the matcher
 * marks it before exploring and truncates after. */
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "grammar/grammar_impl.h"

#define GR_MAX_PUSH_DEPTH 2000 /* pushes in one byte step (bounded anyway without left recursion) */

static uint32_t frame_hash(gr_top t) {
    uint64_t h = (uint64_t)(uint32_t)t.rule * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uint32_t)t.state * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)(uint32_t)t.parent * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

int gr_pda_init(gr_pda *p, const gr_grammar *g) {
    memset(p, 0, sizeof *p);
    p->g = g;
    p->fr.n_head = 1024;
    p->fr.head = malloc(p->fr.n_head * sizeof *p->fr.head);
    if (!p->fr.head) return -1;
    for (uint32_t i = 0; i < p->fr.n_head; i++) p->fr.head[i] = -1;
    return 0;
}

void gr_pda_free(gr_pda *p) {
    free(p->fr.f);
    free(p->fr.end);
    free(p->fr.next);
    free(p->fr.head);
    free(p->fr.seen);
    free(p->tops);
    free(p->th_idx);
    free(p->th_stamp);
    memset(p, 0, sizeof *p);
}

static bool frame_end(const gr_pda *p, gr_top t) {
    const gr_dfa *d = &p->g->rules[t.rule];
    if (!d->accept_n[t.state]) return false;
    if (t.parent == GR_BOTTOM) return true;
    if (t.parent == GR_SENT) return false;
    return p->fr.end[t.parent];
}

static int rehash(gr_frames *fr, uint32_t n_head) {
    int32_t *h = malloc(n_head * sizeof *h);
    if (!h) return -1;
    for (uint32_t i = 0; i < n_head; i++) h[i] = -1;
    for (uint32_t i = 0; i < fr->n; i++) {
        uint32_t k = frame_hash(fr->f[i]) & (n_head - 1);
        fr->next[i] = h[k];
        h[k] = (int32_t)i;
    }
    free(fr->head);
    fr->head = h;
    fr->n_head = n_head;
    return 0;
}

/* One more frame's room in each of the parallel arrays (one capacity). */
static bool frames_grow(gr_frames *fr) {
    const size_t nc = cn_grow_cap(fr->cap, (size_t)fr->n + 1, sizeof *fr->f);
    if (!nc) return false;
    gr_top *f = realloc(fr->f, nc * sizeof *f);
    if (f) fr->f = f;
    uint8_t *e = realloc(fr->end, nc);
    if (e) fr->end = e;
    int32_t *nx = realloc(fr->next, nc * sizeof *nx);
    if (nx) fr->next = nx;
    uint32_t *sn = realloc(fr->seen, nc * sizeof *sn);
    if (sn) fr->seen = sn;
    if (!f || !e || !nx || !sn) return false;
    fr->cap = nc;
    return true;
}

int32_t gr_frame_cons(gr_pda *p, gr_top t) {
    gr_frames *fr = &p->fr;
    uint32_t k = frame_hash(t) & (fr->n_head - 1);
    for (int32_t i = fr->head[k]; i >= 0; i = fr->next[i])
        if (fr->f[i].rule == t.rule && fr->f[i].state == t.state && fr->f[i].parent == t.parent) return i;
    if (fr->n == fr->cap && !frames_grow(fr)) {
        p->oom = true;
        return -1;
    }
    uint32_t i = fr->n++;
    fr->f[i] = t;
    fr->end[i] = frame_end(p, t);
    fr->seen[i] = 0;
    fr->next[i] = fr->head[k];
    fr->head[k] = (int32_t)i;
    if (fr->n > 2 * fr->n_head && rehash(fr, fr->n_head * 4) != 0) {
        /* the table still works with long chains */
    }
    return (int32_t)i;
}

void gr_frames_truncate(gr_pda *p, uint32_t mark) {
    gr_frames *fr = &p->fr;
    /* LIFO: the newest frame is at the head of its chain. */
    while (fr->n > mark) {
        uint32_t i = --fr->n;
        uint32_t k = frame_hash(fr->f[i]) & (fr->n_head - 1);
        fr->head[k] = fr->next[i];
    }
}

int gr_tops_reserve(gr_pda *p, size_t extra) {
    if (CN_GROW(p->tops, p->cap_tops, p->n_tops + extra)) return 0;
    p->oom = true;
    return -1;
}

static bool same_top(gr_top a, gr_top b) { return a.rule == b.rule && a.state == b.state && a.parent == b.parent; }

enum { TH_CAP = 2 * GR_MAX_TOPS }; /* a power of two, at most half full */

/* Whether t is among the byte's new tops already, through the table (adding the tops
 * not yet in it first); false with p->oom when the table cannot be made. */
static bool th_seen(gr_pda *p, size_t out_at, gr_top t) {
    if (!p->th_idx) {
        p->th_idx = malloc(TH_CAP * sizeof *p->th_idx);
        p->th_stamp = calloc(TH_CAP, sizeof *p->th_stamp);
        if (!p->th_idx || !p->th_stamp) {
            p->oom = true;
            return false;
        }
    }
    if (p->th_from < out_at) p->th_from = out_at;
    for (;; p->th_from++) {
        const bool adding = p->th_from < p->n_tops;
        const gr_top x = adding ? p->tops[p->th_from] : t;
        uint32_t k = frame_hash(x) & (TH_CAP - 1);
        for (; p->th_stamp[k] == p->th_gen; k = (k + 1) & (TH_CAP - 1))
            if (same_top(p->tops[p->th_idx[k]], x)) {
                if (!adding) return true;
                break;
            }
        if (!adding) return false; /* t is new: emit adds it to the table after the append */
        if (p->th_stamp[k] != p->th_gen) {
            p->th_stamp[k] = p->th_gen;
            p->th_idx[k] = (uint32_t)p->th_from;
        }
    }
}

static void emit(gr_pda *p, size_t out_at, gr_top t) {
    /* dedupe: a linear scan while the set is small, then a hash table */
    const size_t n = p->n_tops - out_at;
    if (n <= GR_TOPS_SCAN) {
        for (size_t i = out_at; i < p->n_tops; i++)
            if (same_top(p->tops[i], t)) return;
    } else if (th_seen(p, out_at, t) || p->oom) {
        return;
    }
    if (n >= GR_MAX_TOPS) {
        p->over = p->oom = true;
        return;
    }
    if (gr_tops_reserve(p, 1) != 0) return;
    p->tops[p->n_tops++] = t;
}

static void step(gr_pda *p, size_t out_at, gr_top t, uint8_t c, int depth) {
    if (p->oom) return;
    if (++p->steps > GR_MAX_BYTE_STEPS) {
        p->over = p->oom = true;
        return;
    }
    const gr_dfa *d = &p->g->rules[t.rule];
    int32_t ns = d->trans[(size_t)t.state * d->n_class + d->cls[c]];
    if (ns >= 0) emit(p, out_at, (gr_top){t.rule, ns, t.parent});
    uint32_t k0 = d->call_first[t.state], k1 = d->call_first[t.state + 1];
    if (k0 < k1) {
        if (depth > GR_MAX_PUSH_DEPTH) return;
        for (uint32_t k = k0; k < k1; k++) {
            int32_t pf = gr_frame_cons(p, (gr_top){t.rule, d->calls[k].ret, t.parent});
            if (pf < 0) return;
            step(p, out_at, (gr_top){d->calls[k].rule, 0, pf}, c, depth + 1);
        }
    }
    if (d->accept[t.state]) {
        if (t.parent == GR_SENT) {
            p->escaped = true;
        } else if (t.parent >= 0) {
            gr_frames *fr = &p->fr;
            if (fr->seen[t.parent] == fr->gen) return;
            fr->seen[t.parent] = fr->gen;
            step(p, out_at, fr->f[t.parent], c, depth + 1);
        }
    }
}

size_t gr_advance(gr_pda *p, size_t in_at, size_t n_in, uint8_t c) {
    size_t out_at = p->n_tops;
    p->steps = 0;
    p->th_from = out_at;    /* the table starts empty for this byte */
    if (++p->th_gen == 0) { /* stamps wrapped: clear them */
        if (p->th_stamp) memset(p->th_stamp, 0, TH_CAP * sizeof *p->th_stamp);
        p->th_gen = 1;
    }
    if (++p->fr.gen == 0) {
        for (uint32_t i = 0; i < p->fr.n; i++) p->fr.seen[i] = 0;
        p->fr.gen = 1;
    }
    for (size_t i = 0; i < n_in; i++) {
        gr_top t = p->tops[in_at + i]; /* copied: emit may move p->tops */
        step(p, out_at, t, c, 0);
    }
    return p->n_tops - out_at;
}

bool gr_tops_can_end(const gr_pda *p, const gr_top *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (frame_end(p, t[i])) return true;
    return false;
}

/* Whether the stack from t can take one more byte: some level's state has an edge out,
 * looking down while the levels above could finish. */
static bool top_can_continue(const gr_pda *p, gr_top t) {
    for (;;) {
        const gr_dfa *d = &p->g->rules[t.rule];
        if (d->has_out[t.state]) return true;
        if (!d->accept_n[t.state] || t.parent < 0) return false;
        t = p->fr.f[t.parent];
    }
}

bool gr_tops_can_continue(const gr_pda *p, const gr_top *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (top_can_continue(p, t[i])) return true;
    return false;
}

/* ---- gr_state: the byte-level API ---- */

struct gr_state {
    gr_pda p;
    size_t at, n; /* the live set: p.tops[at .. at + n) */
};

gr_state *gr_state_new(const gr_grammar *g) {
    gr_state *s = calloc(1, sizeof *s);
    if (!s || gr_pda_init(&s->p, g) != 0 || gr_tops_reserve(&s->p, 1) != 0) {
        if (s) gr_pda_free(&s->p);
        free(s);
        return NULL;
    }
    s->p.tops[0] = (gr_top){g->root, 0, GR_BOTTOM};
    s->p.n_tops = 1;
    s->at = 0;
    s->n = 1;
    return s;
}

void gr_state_free(gr_state *s) {
    if (!s) return;
    gr_pda_free(&s->p);
    free(s);
}

bool gr_state_feed(gr_state *s, const uint8_t *bytes, size_t n) {
    gr_pda *p = &s->p;
    size_t at = s->at, cnt = s->n;
    uint32_t mark = p->fr.n;
    size_t tops_mark = p->n_tops;
    for (size_t i = 0; i < n; i++) {
        size_t out_at = p->n_tops;
        size_t m = gr_advance(p, at, cnt, bytes[i]);
        if (m == 0 || p->oom) {
            gr_frames_truncate(p, mark);
            p->n_tops = tops_mark;
            p->oom = p->over = false;
            return false;
        }
        at = out_at;
        cnt = m;
    }
    /* keep only the live set: move it down over the history */
    memmove(p->tops, p->tops + at, cnt * sizeof *p->tops);
    p->n_tops = cnt;
    s->at = 0;
    s->n = cnt;
    return true;
}

bool gr_state_can_end(const gr_state *s) { return gr_tops_can_end(&s->p, s->p.tops + s->at, s->n); }

bool gr_matches(const gr_grammar *g, const char *text, size_t n) {
    gr_state *s = gr_state_new(g);
    if (!s) return false;
    bool ok = gr_state_feed(s, (const uint8_t *)text, n) && gr_state_can_end(s);
    gr_state_free(s);
    return ok;
}
