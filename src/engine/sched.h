/* sched.h — the continuous-batching scheduler: KV policy over the mechanism in kv.h.
 *
 * A scheduled sequence (cn_sched_seq) is a token list (prompt, then every sampled token)
 * and how many of its positions the KV cache holds. Whatever is not yet computed is
 * computed by the next steps; the row of its last token asks for logits. Prefill, decode
 * and recomputing a preempted sequence are thus one mechanism.
 *
 * Each step (cn_sched_plan): admit waiting sequences first come first served while
 * sequence slots and KV blocks allow (reusing cached prefix blocks), then pack one decode
 * row per running sequence plus prompt chunks up to the step's token budget. If the
 * decode rows need more blocks than are free, the newest running sequence (largest key)
 * is preempted: its blocks are released, it goes back to the waiting queue in key order,
 * and it is recomputed after readmission. Blocks are reserved before the batch is
 * returned, so the forward pass never runs out of them.
 *
 * Drafts (speculative decoding). The owner may give a decoding sequence guesses for the
 * tokens after its last one (draft[0..n_draft)). If the blocks and the token budget left
 * after everything above allow, they get rows right after its decode row, every one
 * asking for logits, so one pass checks them all. Their positions are written but not
 * counted as computed: after the pass the owner appends the tokens it chose and calls
 * cn_sched_accept with how many drafts they confirmed; the rest are truncated away before
 * anything is published to the prefix cache.
 *
 * Knows no model, no sampler, no request: the engine owns those. Not thread-safe: the
 * engine serializes calls. */
#ifndef CN_ENGINE_SCHED_H
#define CN_ENGINE_SCHED_H

#include "kv/kv.h"
#include "model/model.h"

#define CN_SCHED_MAX_DRAFT 16 /* drafted tokens per sequence and step */

typedef enum {
    CN_SEQ_IDLE = 0, /* not in the scheduler */
    CN_SEQ_WAITING,  /* queued for admission; holds no slot and no blocks */
    CN_SEQ_RUNNING,  /* holds a KV slot (sequence id) and blocks */
} cn_seq_state;

typedef struct cn_sched_seq {
    uint64_t key;    /* order: smaller is older (admitted first, preempted last) */
    int32_t *tokens; /* (cap) prompt then generated tokens; n_tokens in use */
    int64_t n_tokens;
    size_t cap;
    int64_t n_computed; /* positions [0, n_computed) are in the KV cache */
    int32_t slot;       /* KV sequence id while running, else -1 */
    int32_t n_fork;     /* forks still to come (n > 1; set by the owner): admission
                           promises this many more slots, cn_sched_fork uses them */
    cn_seq_state state;
    /* per-step plan, valid from cn_sched_plan until the next plan */
    int32_t plan_rows;   /* rows of this sequence in the batch */
    int32_t plan_logits; /* index into the logits rows, or -1; with drafts, the first of
                            1 + plan_draft consecutive rows */
    int32_t plan_draft;  /* drafts in the batch (valid until cn_sched_accept or the next plan) */
    /* set by the owner before a plan: guesses for the tokens after tokens[n_tokens - 1] */
    int32_t draft[CN_SCHED_MAX_DRAFT];
    int32_t n_draft; /* [0, CN_SCHED_MAX_DRAFT]; used only while decoding */
    /* counters for the owner */
    int64_t n_reused;   /* prefix-cache positions reused at the last admission */
    int32_t n_admitted; /* admissions (1 + times preempted and readmitted) */
    int32_t n_preempted;
    struct cn_sched_seq *next; /* list link (waiting or running), scheduler-owned */
    void *owner;               /* the engine's back pointer */
} cn_sched_seq;

typedef struct {
    int32_t max_running; /* slots = KV sequence ids; >= 1 */
    int32_t step_tokens; /* rows per step; >= max_running */
    bool prefix_cache;   /* attach cached prefix blocks on admission, publish full blocks */
} cn_sched_params;

typedef struct cn_sched cn_sched;

/* Borrows kv (its max_seqs must be >= max_running), which must outlive the scheduler. */
cn_status cn_sched_create(const cn_sched_params *p, cn_kv *kv, cn_sched **out, cn_error *err);
void cn_sched_free(cn_sched *s); /* NULL is a no-op; sequences are the owner's */

/* A sequence with no tokens, not in the scheduler. */
void cn_sched_seq_init(cn_sched_seq *q, uint64_t key, void *owner);
void cn_sched_seq_free(cn_sched_seq *q); /* frees its token list; must be idle */
/* Appends tokens (NO_MEMORY if the list cannot grow). */
cn_status cn_sched_seq_append(cn_sched_seq *q, const int32_t *tokens, int64_t n, cn_error *err);

/* Queues an idle sequence with n_tokens >= 1 for admission (in key order). */
void cn_sched_enqueue(cn_sched *s, cn_sched_seq *q);
/* Takes q out of the scheduler, whatever its state: frees its slot, its promised slots
 * and its KV blocks (published ones stay cached). q becomes idle. */
void cn_sched_remove(cn_sched *s, cn_sched_seq *q);
/* child (idle, no tokens) becomes a running copy of parent (running, n_fork > 0: uses one
 * promised slot): same tokens, sharing all of parent's KV blocks (copy-on-write later). */
cn_status cn_sched_fork(cn_sched *s, cn_sched_seq *parent, cn_sched_seq *child, uint64_t child_key, cn_error *err);

typedef struct {
    cn_sched_seq **seqs; /* (n_seqs) the sequences with rows in the batch, in key order */
    int32_t n_seqs;
    int32_t n_logits;                /* rows that want logits (one per sequence completing its tokens) */
    int32_t n_admitted, n_preempted; /* in this step */
} cn_sched_plan;

/* Admits, plans and reserves the next step into b (cleared first; capacity >=
 * step_tokens). plan->seqs is a view valid until the next call. An empty batch means
 * nothing can run (no sequences). */
cn_status cn_sched_plan_step(cn_sched *s, cn_batch *b, cn_sched_plan *plan, cn_error *err);
/* After the forward pass of that batch: advances every planned sequence's n_computed
 * (drafted positions excluded) and publishes newly full blocks to the prefix cache. */
void cn_sched_commit(cn_sched *s, const cn_sched_plan *plan);
/* After the owner appended the tokens it chose for q (running, plan_draft > 0): the first
 * n_accepted drafts (<= plan_draft; they must equal the tokens appended at their
 * positions) stay computed, the other drafted positions leave the cache. */
void cn_sched_accept(cn_sched *s, cn_sched_seq *q, int32_t n_accepted);

typedef struct {
    int32_t n_running, n_waiting;
    int32_t n_slots_free;  /* slots neither held nor promised */
    int64_t n_preemptions; /* since creation */
} cn_sched_stats;
void cn_sched_get_stats(const cn_sched *s, cn_sched_stats *out);

#endif
