/* test_sched.c — the scheduler against a simulated model, no transformer involved.
 *
 * The fake forward pass writes, for each batch row, a K/V value that is a hash of the
 * sequence's tokens up to and including that position: exactly what a causal model's
 * K/V depends on. After every step the test reads every running sequence's cache
 * through its block table and checks each computed position holds the hash of its own
 * prefix, whatever admission, prefix-cache reuse, forks, copy-on-write and preemption
 * did. It also checks the policy: first come first served admission, a decode row for
 * every running sequence with one pending token, the oldest sequence always making
 * progress, the step budget, cn_kv_check's invariants, and that every block comes back.
 * With drafts on, decoding sequences get guesses (some right, some wrong) for their next
 * tokens; the check then also covers the drafted rows, the confirmed positions kept and
 * the rejected ones dropped before the prefix cache could publish them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched.h"

#define N_LAYER 2
#define KV_DIM 4

typedef struct sim_seq {
    cn_sched_seq q;
    int32_t n_prompt, n_gen_target, n_gen;
    int32_t n_children; /* forks to make when the prompt completes */
    bool live;
    bool admitted_before;
} sim_seq;

static uint64_t rng_state;
static bool g_drafts; /* give decoding sequences guesses before each plan */
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static uint64_t mix(uint64_t h, int32_t t) {
    h ^= (uint64_t)(uint32_t)t + 0x9e3779b97f4a7c15ull;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

/* The value a position of a sequence with these tokens must hold (exact in f32). */
static float pos_value(const int32_t *tokens, int64_t pos, int32_t layer) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i <= pos; i++) h = mix(h, tokens[i]);
    return (float)(h & 0xfffff) + (float)layer;
}

typedef struct {
    cn_kv *kv;
    cn_sched *s;
    cn_batch b;
    sim_seq *seqs; /* (cap) */
    int32_t n_seqs, cap;
    sim_seq *by_slot[64];
    uint64_t next_key;
    int32_t max_running, step_tokens, block_tokens;
    int64_t n_accepted, n_rejected; /* drafts */
} world;

static void world_init(world *w, int64_t n_blocks, int32_t bt, int32_t max_running, int32_t step_tokens,
                       bool prefix_cache, int32_t cap) {
    memset(w, 0, sizeof *w);
    cn_kv_params kp = cn_kv_params_default();
    kp.n_layer = N_LAYER;
    kp.kv_dim = KV_DIM;
    kp.block_tokens = bt;
    kp.n_blocks = n_blocks;
    kp.type = CN_TYPE_F32;
    kp.max_seqs = max_running;
    cn_error err = {0};
    cr_assert_eq(cn_kv_create(&kp, &w->kv, &err), CN_STATUS_OK, "%s", err.msg);
    cn_sched_params sp = {.max_running = max_running, .step_tokens = step_tokens, .prefix_cache = prefix_cache};
    cr_assert_eq(cn_sched_create(&sp, w->kv, &w->s, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_batch_init(&w->b, step_tokens, &err), CN_STATUS_OK);
    w->seqs = calloc((size_t)cap, sizeof *w->seqs);
    w->cap = cap;
    w->max_running = max_running;
    w->step_tokens = step_tokens;
    w->block_tokens = bt;
    w->next_key = 256;
}

static void world_free(world *w) {
    for (int32_t i = 0; i < w->n_seqs; i++) {
        if (w->seqs[i].live) cn_sched_remove(w->s, &w->seqs[i].q);
        cn_sched_seq_free(&w->seqs[i].q);
    }
    cn_kv_stats st;
    cn_kv_get_stats(w->kv, &st);
    cr_expect_eq(st.n_free, st.n_blocks, "blocks leaked: %lld of %lld free", (long long)st.n_free,
                 (long long)st.n_blocks);
    cr_expect_eq(st.n_seqs, 0, "sequences left: %d", st.n_seqs);
    free(w->seqs);
    cn_batch_free(&w->b);
    cn_sched_free(w->s);
    cn_kv_free(w->kv);
}

/* A new sequence with a prompt drawn from a few shared stems (so prefixes repeat). */
static sim_seq *submit(world *w, int32_t n_prompt, int32_t n_gen, int32_t n_children) {
    cr_assert(w->n_seqs + 1 + n_children <= w->cap);
    sim_seq *x = &w->seqs[w->n_seqs++];
    cn_sched_seq_init(&x->q, w->next_key, x);
    w->next_key += 256;
    const int32_t stem = (int32_t)rnd(3);
    int32_t *t = malloc((size_t)n_prompt * sizeof *t);
    for (int32_t i = 0; i < n_prompt; i++) t[i] = i < 24 ? stem * 7 + i % 5 : (int32_t)rnd(50);
    cr_assert_eq(cn_sched_seq_append(&x->q, t, n_prompt, NULL), CN_STATUS_OK);
    free(t);
    x->n_prompt = n_prompt;
    x->n_gen_target = n_gen;
    x->n_children = n_children;
    x->q.n_fork = n_children;
    x->live = true;
    cn_sched_enqueue(w->s, &x->q);
    return x;
}

static void seq_kill(world *w, sim_seq *x) {
    cn_sched_remove(w->s, &x->q);
    x->live = false;
}

static void fake_forward(world *w) {
    for (int32_t r = 0; r < w->b.n_rows; r++) {
        const cn_batch_row *row = &w->b.rows[r];
        sim_seq *x = w->by_slot[row->seq];
        cr_assert(x && x->q.slot == row->seq, "row %d: slot %d belongs to no running sequence", r, row->seq);
        /* a drafted row's token is the guess; its prefix is the tokens and the guesses */
        int32_t toks[256];
        const int64_t n_known = x->q.n_tokens;
        cr_assert_lt(row->pos, 256 - 1);
        if (row->pos < n_known) {
            cr_assert_eq(x->q.tokens[row->pos], row->token, "row %d: wrong token for its position", r);
        } else {
            cr_assert_lt(row->pos - n_known, x->q.plan_draft, "row %d: past the planned drafts", r);
            cr_assert_eq(x->q.draft[row->pos - n_known], row->token, "row %d: not the guess", r);
        }
        memcpy(toks, x->q.tokens, (size_t)CN_MIN(n_known, row->pos + 1) * sizeof *toks);
        for (int64_t p = n_known; p <= row->pos; p++) toks[p] = x->q.draft[p - n_known];
        for (int32_t l = 0; l < N_LAYER; l++) {
            float k[KV_DIM], v[KV_DIM];
            for (int32_t i = 0; i < KV_DIM; i++) k[i] = v[i] = pos_value(toks, row->pos, l);
            cn_error err = {0};
            cr_assert_eq(cn_kv_write(w->kv, l, row->seq, row->pos, k, v, &err), CN_STATUS_OK,
                         "the scheduler reserved too little: %s", err.msg);
        }
    }
}

/* Every running sequence's computed positions hold the values of its own prefix. */
static void check_contents(world *w) {
    for (int32_t i = 0; i < w->n_seqs; i++) {
        sim_seq *x = &w->seqs[i];
        if (!x->live || x->q.state != CN_SEQ_RUNNING) continue;
        const int32_t *ids;
        const int64_t n = cn_kv_seq_blocks(w->kv, x->q.slot, &ids);
        cr_assert_geq(n * w->block_tokens, x->q.n_computed);
        for (int64_t pos = 0; pos < x->q.n_computed; pos++)
            for (int32_t l = 0; l < N_LAYER; l++) {
                const float *k = cn_kv_block_k(w->kv, l, ids[pos / w->block_tokens]);
                const float got = k[(pos % w->block_tokens) * KV_DIM];
                cr_assert_eq(got, pos_value(x->q.tokens, pos, l),
                             "sequence key %llu position %lld layer %d holds another prefix's K",
                             (unsigned long long)x->q.key, (long long)pos, l);
            }
    }
}

/* The token the simulated model "samples" after tokens[0..n). */
static int32_t next_token(const sim_seq *y, const int32_t *tokens, int64_t n) {
    return (int32_t)(pos_value(tokens, n - 1, 0) + (float)(y->q.key & 255));
}

/* Guesses for every decoding sequence: the true continuation, wrong from a random point
 * a third of the time. */
static void make_drafts(world *w) {
    for (int32_t i = 0; i < w->n_seqs; i++) {
        sim_seq *x = &w->seqs[i];
        x->q.n_draft = 0;
        if (!x->live || x->q.state != CN_SEQ_RUNNING || x->q.n_tokens - x->q.n_computed != 1) continue;
        int32_t toks[256];
        const int32_t n = (int32_t)CN_MIN(rnd(6), (uint32_t)(200 - x->q.n_tokens));
        if (n <= 0) continue;
        const int32_t wrong = rnd(3) == 0 ? (int32_t)rnd((uint32_t)n) : n;
        memcpy(toks, x->q.tokens, (size_t)x->q.n_tokens * sizeof *toks);
        for (int32_t j = 0; j < n; j++) {
            const int32_t t = next_token(x, toks, x->q.n_tokens + j) + (j >= wrong);
            toks[x->q.n_tokens + j] = t;
            x->q.draft[j] = t;
        }
        x->q.n_draft = n;
    }
}

/* One step with every check; returns the rows run. */
static int32_t step(world *w) {
    uint64_t min_waiting_before = UINT64_MAX;
    if (g_drafts) make_drafts(w);
    for (int32_t i = 0; i < w->n_seqs; i++) w->seqs[i].admitted_before = w->seqs[i].q.state == CN_SEQ_RUNNING;
    cn_sched_plan plan;
    cn_error err = {0};
    cr_assert_eq(cn_sched_plan_step(w->s, &w->b, &plan, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_leq(w->b.n_rows, w->step_tokens);
    memset(w->by_slot, 0, sizeof w->by_slot);
    uint64_t min_waiting = UINT64_MAX, oldest_pending = UINT64_MAX;
    int32_t n_running = 0, n_waiting = 0;
    for (int32_t i = 0; i < w->n_seqs; i++) {
        sim_seq *x = &w->seqs[i];
        if (!x->live) continue;
        if (x->q.state == CN_SEQ_WAITING) {
            n_waiting++;
            min_waiting = CN_MIN(min_waiting, x->q.key);
        } else if (x->q.state == CN_SEQ_RUNNING) {
            n_running++;
            w->by_slot[x->q.slot] = x;
            if (x->q.n_tokens > x->q.n_computed) oldest_pending = CN_MIN(oldest_pending, x->q.key);
        }
    }
    (void)min_waiting_before;
    cn_sched_stats ss;
    cn_sched_get_stats(w->s, &ss);
    cr_assert_eq(ss.n_running, n_running);
    cr_assert_eq(ss.n_waiting, n_waiting);
    cr_assert_leq(n_running, w->max_running);
    int32_t rows = 0;
    for (int32_t i = 0; i < w->n_seqs; i++) {
        sim_seq *x = &w->seqs[i];
        if (!x->live || x->q.state != CN_SEQ_RUNNING) continue;
        /* first come, first served: nothing newer than a waiting sequence got in */
        if (!x->admitted_before)
            cr_assert_lt(x->q.key, min_waiting, "key %llu admitted ahead of waiting key %llu",
                         (unsigned long long)x->q.key, (unsigned long long)min_waiting);
        /* every running decode gets its row */
        if (x->q.n_tokens - x->q.n_computed == 1)
            cr_assert_eq(x->q.plan_rows - x->q.plan_draft, 1, "a running decode (key %llu) got no row",
                         (unsigned long long)x->q.key);
        else cr_assert_eq(x->q.plan_draft, 0, "a prompt chunk got drafts");
        cr_assert_leq(x->q.plan_draft, x->q.n_draft);
        if (x->q.key == oldest_pending) cr_assert_gt(x->q.plan_rows, 0, "the oldest sequence made no progress");
        rows += x->q.plan_rows;
        cr_assert_leq(x->q.n_computed + x->q.plan_rows - x->q.plan_draft, x->q.n_tokens);
    }
    cr_assert_eq(rows, w->b.n_rows);
    if (n_running > 0 && oldest_pending != UINT64_MAX) cr_assert_gt(w->b.n_rows, 0);

    fake_forward(w);
    cn_sched_commit(w->s, &plan);
    cr_assert_eq(cn_kv_check(w->kv, &err), CN_STATUS_OK, "%s", err.msg);
    check_contents(w);

    /* "Sample": a token from the sequence's own state; forks first. */
    for (int32_t i = 0; i < plan.n_seqs; i++) {
        sim_seq *x = plan.seqs[i]->owner;
        if (x->q.plan_logits < 0 || !x->live) continue;
        cr_assert_eq(x->q.n_computed, x->q.n_tokens);
        sim_seq *group[8] = {x};
        int32_t n_group = 1;
        while (x->q.n_fork > 0) {
            sim_seq *c = &w->seqs[w->n_seqs++];
            cn_sched_seq_init(&c->q, 0, c);
            cr_assert_eq(cn_sched_fork(w->s, &x->q, &c->q, x->q.key + (uint64_t)n_group, &err), CN_STATUS_OK, "%s",
                         err.msg);
            c->n_prompt = x->n_prompt;
            c->n_gen_target = x->n_gen_target;
            c->live = true;
            group[n_group++] = c;
        }
        for (int32_t g = 0; g < n_group; g++) {
            sim_seq *y = group[g];
            const int32_t nd = g == 0 ? y->q.plan_draft : 0;
            int32_t acc = 0;
            bool killed = false;
            for (int32_t j = 0; j <= nd; j++) {
                if (++y->n_gen >= y->n_gen_target) {
                    seq_kill(w, y);
                    killed = true;
                    break;
                }
                const int32_t tok = next_token(y, y->q.tokens, y->q.n_tokens);
                cr_assert_eq(cn_sched_seq_append(&y->q, &tok, 1, NULL), CN_STATUS_OK);
                if (j == nd || tok != y->q.draft[j]) break;
                acc++;
            }
            if (killed || nd == 0) continue;
            cn_sched_accept(w->s, &y->q, acc);
            w->n_accepted += acc;
            w->n_rejected += nd - acc;
            cr_assert_eq(y->q.n_computed, y->q.n_tokens - 1);
            cr_assert_eq(cn_kv_seq_len(w->kv, y->q.slot), y->q.n_computed, "rejected positions kept");
            check_contents(w);
        }
    }
    cr_assert_eq(cn_kv_check(w->kv, &err), CN_STATUS_OK, "%s", err.msg);
    return w->b.n_rows;
}

static int32_t n_live(const world *w) {
    int32_t n = 0;
    for (int32_t i = 0; i < w->n_seqs; i++) n += w->seqs[i].live;
    return n;
}

/* Random submits (some with forks), cancels and steps, then a drain; returns the
 * preemptions and prefix-cache hits it caused, so each test can say it exercised them. */
typedef struct {
    int64_t n_preemptions, n_prefix_hits, n_shared_max;
    int64_t n_accepted, n_rejected;
} run_counts;

static run_counts run_random(uint64_t seed, int64_t n_blocks, int32_t bt, int32_t max_running, int32_t step_tokens,
                             bool prefix_cache, int n_ops) {
    run_counts rc = {0};
    rng_state = seed;
    world w;
    world_init(&w, n_blocks, bt, max_running, step_tokens, prefix_cache, 4 * n_ops + 16);
    const int64_t capacity = n_blocks * bt;
    for (int op = 0; op < n_ops; op++) {
        const uint32_t r = rnd(10);
        if (r < 3) {
            int32_t n_prompt = 1 + (int32_t)rnd(40), n_gen = 1 + (int32_t)rnd(20);
            if (n_prompt + n_gen > capacity) n_gen = 1;
            int32_t n_children = rnd(4) == 0 ? (int32_t)rnd(3) : 0;
            if (n_children + 1 > max_running) n_children = 0;
            submit(&w, n_prompt, n_gen, n_children);
        } else if (r < 4 && n_live(&w) > 0) {
            int32_t k = (int32_t)rnd((uint32_t)w.n_seqs);
            if (w.seqs[k].live) seq_kill(&w, &w.seqs[k]);
        } else {
            step(&w);
        }
        cn_kv_stats ks;
        cn_kv_get_stats(w.kv, &ks);
        rc.n_shared_max = CN_MAX(rc.n_shared_max, ks.n_shared);
    }
    /* drain: everything finishes, and every block comes back */
    for (int guard = 0; n_live(&w) > 0; guard++) {
        cr_assert_lt(guard, 100000, "the scheduler stopped making progress");
        step(&w);
    }
    cn_sched_stats ss;
    cn_sched_get_stats(w.s, &ss);
    cr_assert_eq(ss.n_slots_free, max_running);
    cn_kv_stats ks;
    cn_kv_get_stats(w.kv, &ks);
    rc.n_preemptions = ss.n_preemptions;
    rc.n_prefix_hits = ks.n_prefix_hits;
    rc.n_accepted = w.n_accepted;
    rc.n_rejected = w.n_rejected;
    world_free(&w);
    return rc;
}

Test(sched, random_roomy) {
    run_counts rc = run_random(1, 256, 4, 6, 32, true, 600);
    cr_expect_eq(rc.n_preemptions, 0, "preempted with room to spare");
    cr_expect_gt(rc.n_prefix_hits, 0);
    cr_expect_gt(rc.n_shared_max, 0, "no fork or prefix hit ever shared a block");
}
Test(sched, random_tight_kv_preempts) {
    run_counts rc = run_random(2, 20, 4, 6, 16, true, 600);
    cr_expect_gt(rc.n_preemptions, 10);
    cr_expect_gt(rc.n_prefix_hits, 0);
}
Test(sched, random_tight_no_prefix_cache) {
    run_counts rc = run_random(3, 20, 4, 6, 16, false, 600);
    cr_expect_gt(rc.n_preemptions, 10);
    cr_expect_eq(rc.n_prefix_hits, 0);
}
Test(sched, random_one_slot) { run_random(4, 24, 4, 1, 8, true, 300); }
Test(sched, random_block_of_one_token) {
    run_counts rc = run_random(5, 70, 1, 4, 8, true, 300);
    cr_expect_gt(rc.n_preemptions, 0);
}

static run_counts run_random_drafts(uint64_t seed, int64_t n_blocks, int32_t bt, int32_t max_running,
                                    int32_t step_tokens, int n_ops) {
    g_drafts = true;
    run_counts rc = run_random(seed, n_blocks, bt, max_running, step_tokens, true, n_ops);
    g_drafts = false;
    return rc;
}
Test(sched, random_drafts_roomy) {
    run_counts rc = run_random_drafts(6, 256, 4, 6, 32, 600);
    cr_expect_gt(rc.n_accepted, 100);
    cr_expect_gt(rc.n_rejected, 10);
    cr_expect_gt(rc.n_prefix_hits, 0);
}
Test(sched, random_drafts_tight_kv) {
    run_counts rc = run_random_drafts(7, 20, 4, 6, 16, 600);
    cr_expect_gt(rc.n_preemptions, 10);
    cr_expect_gt(rc.n_accepted, 10);
    cr_expect_gt(rc.n_rejected, 0);
}
Test(sched, random_drafts_one_token_blocks) {
    run_counts rc = run_random_drafts(8, 70, 1, 4, 8, 300);
    cr_expect_gt(rc.n_accepted, 10);
}

/* Preemption under a tight pool takes the newest sequence and it comes back first. */
Test(sched, preempts_newest_and_readmits_it_first) {
    rng_state = 9;
    world w;
    world_init(&w, 6, 4, 3, 16, false, 16);
    sim_seq *a = submit(&w, 7, 12, 0), *b = submit(&w, 7, 12, 0);
    int32_t guard = 0;
    while (b->q.n_preempted == 0 && b->live && guard++ < 100) step(&w);
    cr_assert_gt(b->q.n_preempted, 0, "b was never preempted in a pool too small for both");
    cr_assert_eq(a->q.n_preempted, 0, "the older sequence was preempted");
    sim_seq *c = submit(&w, 3, 2, 0);
    while (a->live || b->live) {
        cr_assert_lt(guard++, 1000);
        step(&w);
        if (c->q.state == CN_SEQ_RUNNING) cr_assert(b->q.state == CN_SEQ_RUNNING || !b->live, "c overtook b");
    }
    world_free(&w);
}

Test(sched, bad_params) {
    cn_kv_params kp = cn_kv_params_default();
    kp.n_layer = 1;
    kp.kv_dim = 4;
    kp.n_blocks = 4;
    kp.max_seqs = 2;
    cn_kv *kv = NULL;
    cn_sched *s = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK);
    cn_sched_params sp = {.max_running = 3, .step_tokens = 8, .prefix_cache = true};
    cr_expect_eq(cn_sched_create(&sp, kv, &s, &err), CN_STATUS_INVALID_ARG);
    cr_expect(strstr(err.msg, "max_running"), "%s", err.msg);
    sp.max_running = 2;
    sp.step_tokens = 1;
    cr_expect_eq(cn_sched_create(&sp, kv, &s, &err), CN_STATUS_INVALID_ARG);
    cr_expect(strstr(err.msg, "step_tokens"), "%s", err.msg);
    cr_expect_null(s);
    cn_kv_free(kv);
}
