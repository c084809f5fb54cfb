/* sched.c — admission, step packing and preemption over the paged KV cache.
 *
 * Block accounting. A step may only run if every block it writes is reserved first, so
 * the forward pass never fails for want of memory. What a sequence needs to compute r
 * more rows is the new blocks past its table plus one copy for each shared block it
 * will write into (copy-on-write after a fork). "Free" is the cache's n_free, which
 * counts unreferenced prefix-cache blocks: they are reclaimed on demand.
 *
 * Admission (first come, first served, never skipping the head of the queue) asks that
 * the newcomer's whole uncomputed token list fits in what the running sequences' own
 * unfinished rows leave free, so admitting never starves a prompt already in flight;
 * only decoding growth can run the cache dry, and that is what preemption answers. A
 * preempted sequence keeps its tokens and its sampler (the engine's), loses its blocks
 * (published full blocks stay in the prefix cache, so recomputing often reuses them), and
 * its key puts it ahead of everything that arrived after it. Recomputed positions give
 * the same K/V bits because the forward pass is batch-invariant: preemption never
 * changes a token. */
#include "engine/sched.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

struct cn_sched {
    cn_sched_params p;
    cn_kv *kv;
    int32_t block_tokens;
    int32_t *free_slots; /* (max_running) stack */
    int32_t n_free_slots;
    int32_t n_promised;    /* free slots set aside for forks of running sequences */
    cn_sched_seq *waiting; /* key order */
    cn_sched_seq *running; /* key order */
    int32_t n_waiting, n_running;
    cn_sched_seq **planned; /* (max_running) */
    int64_t n_preemptions;
};

cn_status cn_sched_create(const cn_sched_params *p, cn_kv *kv, cn_sched **out, cn_error *err) {
    *out = NULL;
    const cn_kv_params *kp = cn_kv_params_of(kv);
    if (!kp) return cn_err(err, CN_STATUS_INVALID_ARG, "sched: no KV cache");
    if (p->max_running < 1 || p->max_running > kp->max_seqs)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "sched: max_running = %d out of range [1, %d] (the cache's sequence ids)", p->max_running,
                      kp->max_seqs);
    if (p->step_tokens < p->max_running)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "sched: step_tokens = %d is below max_running = %d (each running sequence "
                      "needs one decode row per step)",
                      p->step_tokens, p->max_running);
    cn_sched *s = calloc(1, sizeof *s);
    if (!s) return cn_err(err, CN_STATUS_NO_MEMORY, "sched: out of memory");
    s->p = *p;
    s->kv = kv;
    s->block_tokens = kp->block_tokens;
    s->free_slots = malloc((size_t)p->max_running * sizeof *s->free_slots);
    s->planned = malloc((size_t)p->max_running * sizeof *s->planned);
    if (!s->free_slots || !s->planned) {
        cn_sched_free(s);
        return cn_err(err, CN_STATUS_NO_MEMORY, "sched: out of memory");
    }
    /* Lowest ids on top of the stack: slot numbers stay small and reproducible. */
    for (int32_t i = 0; i < p->max_running; i++) s->free_slots[i] = p->max_running - 1 - i;
    s->n_free_slots = p->max_running;
    *out = s;
    return CN_STATUS_OK;
}

void cn_sched_free(cn_sched *s) {
    if (!s) return;
    free(s->free_slots);
    free(s->planned);
    free(s);
}

void cn_sched_seq_init(cn_sched_seq *q, uint64_t key, void *owner) {
    memset(q, 0, sizeof *q);
    q->key = key;
    q->slot = -1;
    q->plan_logits = -1;
    q->owner = owner;
}

void cn_sched_seq_free(cn_sched_seq *q) {
    free(q->tokens);
    q->tokens = NULL;
    q->n_tokens = q->cap = 0;
}

cn_status cn_sched_seq_append(cn_sched_seq *q, const int32_t *tokens, int64_t n, cn_error *err) {
    if (n <= 0) return CN_STATUS_OK;
    if (!CN_GROW(q->tokens, q->cap, (size_t)(q->n_tokens + n)))
        return cn_err(err, CN_STATUS_NO_MEMORY, "sched: out of memory for %lld tokens", (long long)(q->n_tokens + n));
    memcpy(q->tokens + q->n_tokens, tokens, (size_t)n * sizeof *tokens);
    q->n_tokens += n;
    return CN_STATUS_OK;
}

/* Blocks a sequence of n_tokens positions needs: ceil(n_tokens / block_tokens). */
static int64_t blocks_for(const cn_sched *s, int64_t n_tokens) {
    return (n_tokens + s->block_tokens - 1) / s->block_tokens;
}

/* ---- lists ---- */

static void list_insert(cn_sched_seq **head, cn_sched_seq *q) {
    while (*head && (*head)->key < q->key) head = &(*head)->next;
    q->next = *head;
    *head = q;
}

static bool list_remove(cn_sched_seq **head, cn_sched_seq *q) {
    for (; *head; head = &(*head)->next)
        if (*head == q) {
            *head = q->next;
            q->next = NULL;
            return true;
        }
    return false;
}

void cn_sched_enqueue(cn_sched *s, cn_sched_seq *q) {
    q->state = CN_SEQ_WAITING;
    q->slot = -1;
    q->n_computed = 0;
    q->plan_rows = 0;
    q->plan_draft = 0;
    q->plan_logits = -1;
    list_insert(&s->waiting, q);
    s->n_waiting++;
}

/* Releases a running sequence's blocks, slot and promised slots. */
static void release_running(cn_sched *s, cn_sched_seq *q) {
    cn_kv_seq_free(s->kv, q->slot);
    s->free_slots[s->n_free_slots++] = q->slot;
    s->n_promised -= q->n_fork;
    q->slot = -1;
    q->n_computed = 0;
}

void cn_sched_remove(cn_sched *s, cn_sched_seq *q) {
    if (q->state == CN_SEQ_WAITING) {
        if (list_remove(&s->waiting, q)) s->n_waiting--;
    } else if (q->state == CN_SEQ_RUNNING) {
        if (list_remove(&s->running, q)) s->n_running--;
        release_running(s, q);
    }
    q->state = CN_SEQ_IDLE;
    q->plan_rows = 0;
    q->plan_draft = 0;
    q->plan_logits = -1;
}

cn_status cn_sched_fork(cn_sched *s, cn_sched_seq *parent, cn_sched_seq *child, uint64_t child_key, cn_error *err) {
    if (parent->state != CN_SEQ_RUNNING || parent->n_fork < 1 || child->state != CN_SEQ_IDLE)
        return cn_err(err, CN_STATUS_INVALID_ARG, "sched: fork needs a running parent with a promised slot");
    cn_status st = cn_sched_seq_append(child, parent->tokens, parent->n_tokens, err);
    if (st != CN_STATUS_OK) return st;
    const int32_t slot = s->free_slots[s->n_free_slots - 1];
    st = cn_kv_seq_fork(s->kv, parent->slot, slot, err);
    if (st != CN_STATUS_OK) return st;
    s->n_free_slots--;
    s->n_promised--;
    parent->n_fork--;
    child->key = child_key;
    child->slot = slot;
    child->n_fork = 0;
    child->n_computed = parent->n_computed;
    child->n_admitted = 1;
    child->state = CN_SEQ_RUNNING;
    list_insert(&s->running, child);
    s->n_running++;
    return CN_STATUS_OK;
}

/* ---- block accounting ---- */

/* Blocks that computing `rows` more positions of running q takes from the free pool:
 * new blocks past its table, plus a copy of each shared block it writes into. */
static int64_t need_blocks(const cn_sched *s, const cn_sched_seq *q, int64_t rows) {
    if (rows <= 0) return 0;
    const int32_t *ids;
    const int64_t held = cn_kv_seq_blocks(s->kv, q->slot, &ids);
    const int64_t first = q->n_computed / s->block_tokens;
    const int64_t want = blocks_for(s, q->n_computed + rows);
    int64_t n = CN_MAX(0, want - held);
    for (int64_t i = first; i < CN_MIN(held, want); i++) n += cn_kv_block_refcount(s->kv, ids[i]) > 1;
    return n;
}

/* The most rows (<= max_rows) of running q whose blocks fit in n_avail. */
static int64_t rows_fitting(const cn_sched *s, const cn_sched_seq *q, int64_t max_rows, int64_t n_avail) {
    if (need_blocks(s, q, max_rows) <= n_avail) return max_rows;
    const int32_t *ids;
    const int64_t held = cn_kv_seq_blocks(s->kv, q->slot, &ids);
    /* Positions the held blocks plus n_avail new ones reach, less a block per shared
     * block written, then step down a block at a time until it fits. */
    int64_t rows = (held + n_avail) * s->block_tokens - q->n_computed;
    rows = CN_MIN(rows, max_rows);
    while (rows > 0 && need_blocks(s, q, rows) > n_avail) rows -= s->block_tokens;
    return CN_MAX(rows, 0);
}

static int64_t n_free_blocks(const cn_sched *s) {
    cn_kv_stats st;
    cn_kv_get_stats(s->kv, &st);
    return st.n_free;
}

/* Blocks the running sequences still need for the rows they know of. */
static int64_t pending_blocks(const cn_sched *s) {
    int64_t n = 0;
    for (const cn_sched_seq *q = s->running; q; q = q->next) n += need_blocks(s, q, q->n_tokens - q->n_computed);
    return n;
}

/* Blocks admitting waiting q would take: all of its token list's blocks except leading
 * ones the prefix cache holds and some table already holds (cached blocks that nobody
 * holds are counted as free, so attaching them takes from the pool too). */
static int64_t admission_blocks(const cn_sched *s, const cn_sched_seq *q, int32_t *scratch, int64_t scratch_n) {
    int64_t n = blocks_for(s, q->n_tokens);
    if (!s->p.prefix_cache) return n;
    const int64_t hits = cn_kv_prefix_lookup(s->kv, q->tokens, q->n_tokens - 1, scratch, scratch_n);
    for (int64_t i = 0; i < hits; i++) n -= cn_kv_block_refcount(s->kv, scratch[i]) > 0;
    return n;
}

/* ---- admission and preemption ---- */

static cn_status admit(cn_sched *s, cn_sched_seq *q, cn_error *err) {
    const int32_t slot = s->free_slots[s->n_free_slots - 1];
    int64_t reused = 0;
    if (s->p.prefix_cache) {
        cn_status st = cn_kv_seq_prefix_attach(s->kv, slot, q->tokens, q->n_tokens - 1, &reused, err);
        if (st != CN_STATUS_OK) return st;
    }
    s->n_free_slots--;
    s->n_promised += q->n_fork;
    list_remove(&s->waiting, q);
    s->n_waiting--;
    q->slot = slot;
    q->n_computed = reused;
    q->n_reused = reused;
    q->n_admitted++;
    q->state = CN_SEQ_RUNNING;
    list_insert(&s->running, q);
    s->n_running++;
    return CN_STATUS_OK;
}

static void preempt(cn_sched *s, cn_sched_seq *q) {
    list_remove(&s->running, q);
    s->n_running--;
    release_running(s, q);
    q->n_preempted++;
    s->n_preemptions++;
    cn_sched_enqueue(s, q);
}

static cn_sched_seq *newest_running(cn_sched *s) {
    cn_sched_seq *q = s->running;
    while (q && q->next) q = q->next;
    return q;
}

static cn_status admit_waiting(cn_sched *s, cn_sched_plan *plan, cn_error *err) {
    int32_t scratch[256];
    while (s->waiting) {
        cn_sched_seq *q = s->waiting;
        if (s->n_free_slots - s->n_promised < 1 + q->n_fork) break;
        const int64_t need = admission_blocks(s, q, scratch, CN_ARRAY_LEN(scratch));
        if (s->running && n_free_blocks(s) - pending_blocks(s) < need) break;
        cn_status st = admit(s, q, err);
        if (st != CN_STATUS_OK) return st;
        plan->n_admitted++;
    }
    return CN_STATUS_OK;
}

/* ---- the step ---- */

/* Rows for the drafts of decoding sequences, in key order, within what the budget and
 * the blocks leave (a draft never preempts anything). */
static void choose_drafts(cn_sched *s, int64_t budget, int64_t avail) {
    for (cn_sched_seq *q = s->running; q && budget > 0; q = q->next) {
        if (q->plan_rows != 1 || q->n_tokens - q->n_computed != 1 || q->n_draft < 1) continue;
        int64_t d = CN_MIN(CN_MIN(q->n_draft, CN_SCHED_MAX_DRAFT), budget);
        const int64_t base = need_blocks(s, q, 1);
        while (d > 0 && need_blocks(s, q, 1 + d) - base > avail) d--;
        if (d == 0) continue;
        avail -= need_blocks(s, q, 1 + d) - base;
        budget -= d;
        q->plan_draft = (int32_t)d;
        q->plan_rows += (int32_t)d;
    }
}

/* Chooses rows for every running sequence: decode rows first (preempting the newest
 * sequence while their blocks do not fit), then prompt chunks in key order within the
 * token budget and the blocks left, then drafts. */
static cn_status choose_rows(cn_sched *s, cn_sched_plan *plan, cn_error *err) {
    while (s->running) {
        int64_t avail = n_free_blocks(s), budget = s->p.step_tokens, need = 0, n_rows = 0;
        bool work = false;
        for (cn_sched_seq *q = s->running; q; q = q->next) {
            q->plan_rows = 0;
            q->plan_draft = 0;
            work |= q->n_tokens > q->n_computed;
            if (q->n_tokens - q->n_computed == 1) {
                q->plan_rows = 1;
                need += need_blocks(s, q, 1);
                n_rows++;
            }
        }
        if (!work) return CN_STATUS_OK;
        if (need <= avail) {
            avail -= need;
            budget -= n_rows;
            for (cn_sched_seq *q = s->running; q && budget > 0; q = q->next) {
                const int64_t pending = q->n_tokens - q->n_computed;
                if (pending <= 1) continue;
                const int64_t rows = rows_fitting(s, q, CN_MIN(pending, budget), avail);
                if (rows == 0) continue;
                q->plan_rows = (int32_t)rows;
                avail -= need_blocks(s, q, rows);
                budget -= rows;
                n_rows += rows;
            }
            if (n_rows > 0) {
                choose_drafts(s, budget, avail);
                return CN_STATUS_OK;
            }
        }
        if (s->n_running == 1)
            return cn_err(err, CN_STATUS_LIMIT,
                          "sched: one sequence of %lld tokens needs more KV blocks than the cache has free "
                          "(%lld)",
                          (long long)s->running->n_tokens, (long long)n_free_blocks(s));
        preempt(s, newest_running(s));
        plan->n_preempted++;
    }
    return CN_STATUS_OK;
}

cn_status cn_sched_plan_step(cn_sched *s, cn_batch *b, cn_sched_plan *plan, cn_error *err) {
    memset(plan, 0, sizeof *plan);
    plan->seqs = s->planned;
    cn_batch_clear(b);
    cn_status st = admit_waiting(s, plan, err);
    if (st == CN_STATUS_OK) st = choose_rows(s, plan, err);
    if (st != CN_STATUS_OK) return st;
    for (cn_sched_seq *q = s->running; q; q = q->next) {
        q->plan_logits = -1;
        if (q->plan_rows == 0) continue;
        st = cn_kv_seq_reserve(s->kv, q->slot, q->n_computed + q->plan_rows, err);
        if (st != CN_STATUS_OK) return st;                 /* the accounting above makes this a bug */
        const int32_t real = q->plan_rows - q->plan_draft; /* rows of known tokens */
        const bool completes = q->n_computed + real == q->n_tokens;
        for (int32_t i = 0; i < q->plan_rows; i++) {
            const int64_t pos = q->n_computed + i;
            const bool want = completes && i >= real - 1;
            const int32_t tok = i < real ? q->tokens[pos] : q->draft[i - real];
            if (!cn_batch_add(b, tok, (int32_t)pos, q->slot, want))
                return cn_err(err, CN_STATUS_INVALID_ARG, "sched: batch capacity %d below step_tokens %d", b->cap,
                              s->p.step_tokens);
        }
        if (completes) {
            q->plan_logits = plan->n_logits;
            plan->n_logits += 1 + q->plan_draft;
        }
        s->planned[plan->n_seqs++] = q;
    }
    return CN_STATUS_OK;
}

/* Publishes q's blocks that became full since it had `before` positions computed. */
static void publish(cn_sched *s, cn_sched_seq *q, int64_t before) {
    if (s->p.prefix_cache && q->n_computed / s->block_tokens > before / s->block_tokens)
        cn_kv_seq_prefix_publish(s->kv, q->slot, q->tokens, q->n_computed, NULL);
}

void cn_sched_commit(cn_sched *s, const cn_sched_plan *plan) {
    for (int32_t i = 0; i < plan->n_seqs; i++) {
        cn_sched_seq *q = plan->seqs[i];
        if (q->state != CN_SEQ_RUNNING) continue;
        const int64_t before = q->n_computed;
        q->n_computed += q->plan_rows - q->plan_draft;
        q->plan_rows = 0;
        if (q->plan_draft == 0) publish(s, q, before);
    }
}

void cn_sched_accept(cn_sched *s, cn_sched_seq *q, int32_t n_accepted) {
    if (q->state != CN_SEQ_RUNNING || q->plan_draft == 0) return;
    const int64_t before = q->n_computed;
    const int64_t n = CN_MAX(0, CN_MIN(CN_MIN(n_accepted, q->plan_draft), q->n_tokens - 1 - q->n_computed));
    q->n_computed += n;
    q->plan_draft = 0;
    cn_kv_seq_truncate(s->kv, q->slot, q->n_computed);
    publish(s, q, before);
}

void cn_sched_get_stats(const cn_sched *s, cn_sched_stats *out) {
    out->n_running = s->n_running;
    out->n_waiting = s->n_waiting;
    out->n_slots_free = s->n_free_slots - s->n_promised;
    out->n_preemptions = s->n_preemptions;
}
