/* test_engine_stress.c — hundreds of random submits, cancels and steps on stories260K
 * with a KV budget small enough to force preemption and a queue short enough to say
 * BUSY. After every step the cache's invariants hold (cn_kv_check) and the engine's
 * counts match the test's own; at the end every request finished exactly once per
 * completion, every block is back, and every completion's tokens, logprobs and text are
 * those of the same request run alone through cn_generate (a cancelled one: a prefix of
 * them). Run under ASan + UBSan by `make test`, so every path also frees what it took. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_engine_util.h"

#define MAX_REQS 160

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

typedef struct {
    cn_engine_request r;
    int32_t prompt[40];
    te_req out;
    bool submitted, cancelled;
} stress_req;

static const char *stops[] = {"the", "."};

static void random_request(stress_req *s, int32_t stem) {
    cn_engine_request r = cn_engine_request_default_params();
    int32_t n = 1 + (int32_t)rnd(30);
    s->prompt[0] = 1; /* BOS */
    for (int32_t i = 1; i < n; i++) s->prompt[i] = stem >= 0 && i < 20 ? 20 + stem * 30 + i : 3 + (int32_t)rnd(509);
    r.prompt_tokens = s->prompt;
    r.n_prompt_tokens = n;
    r.n = rnd(4) == 0 ? 1 + (int32_t)rnd(3) : 1;
    r.gen.max_tokens = 1 + (int32_t)rnd(32);
    cn_sampling_params *sp = &r.gen.sampling;
    sp->seed = rnd(1u << 30);
    sp->temperature = rnd(5) == 0 ? 0.0f : 0.5f + (float)rnd(100) / 100.0f;
    sp->top_k = rnd(2) ? (int32_t)rnd(50) : 0;
    sp->top_p = rnd(2) ? 0.9f : 1.0f;
    sp->n_logprobs = (int32_t)rnd(5) - 1;
    sp->ignore_eos = rnd(3) == 0;
    if (rnd(5) == 0) {
        r.gen.stop = stops;
        r.gen.n_stop = 2;
    }
    s->r = r;
}

/* got must be want cut after got's tokens (a cancelled completion). */
static void expect_prefix(const te_result *got, const te_result *want, const char *what) {
    cr_assert_leq(got->n_tok, want->n_tok, "%s: more tokens than alone", what);
    for (int32_t i = 0; i < got->n_tok; i++) {
        cr_assert_eq(got->tok[i].id, want->tok[i].id, "%s: token %d differs", what, i);
        cr_assert(memcmp(&got->tok[i].logprob, &want->tok[i].logprob, sizeof(float)) == 0, "%s: logprob %d", what, i);
    }
    cr_assert_eq(got->reason, CN_FINISH_CANCELLED);
}

static void run_stress(uint64_t seed, int n_ops, bool prefix_cache, int32_t n_threads) {
    rng_state = seed;
    cn_model *m = te_load_stories();
    cn_engine_params p = cn_engine_default_params();
    p.kv_tokens = 96;
    p.block_tokens = 8;
    p.max_running = 6;
    p.step_tokens = 24;
    p.max_queue = 8;
    p.prefix_cache = prefix_cache;
    p.n_threads = n_threads;
    cn_engine *e = te_engine(m, p);
    stress_req *rs = calloc(MAX_REQS, sizeof *rs);
    int n_reqs = 0, n_busy = 0, n_cancels = 0;
    cn_error err = {0};
    for (int op = 0; op < n_ops; op++) {
        const uint32_t r = rnd(10);
        if (r < 4 && n_reqs < MAX_REQS) {
            stress_req *s = &rs[n_reqs];
            random_request(s, rnd(2) ? (int32_t)rnd(3) : -1);
            te_req_init(&s->out, s->r.n);
            cn_engine_callbacks cb = te_callbacks(&s->out);
            cn_status st = cn_engine_submit(e, &s->r, &cb, &s->out.id, &err);
            if (st == CN_STATUS_BUSY) {
                n_busy++;
                continue;
            }
            cr_assert_eq(st, CN_STATUS_OK, "%s", err.msg);
            s->submitted = true;
            n_reqs++;
        } else if (r < 5 && n_reqs > 0) {
            stress_req *s = &rs[rnd((uint32_t)n_reqs)];
            const bool was_done = te_req_done(&s->out);
            cn_status st = cn_engine_cancel(e, s->out.id, &err);
            if (was_done) {
                cr_assert_eq(st, CN_STATUS_NOT_FOUND, "cancel of a finished request %d (id %llu): %d %s", (int)(s - rs),
                             (unsigned long long)s->out.id, st, err.msg);
            } else {
                cr_assert_eq(st, CN_STATUS_OK, "%s", err.msg);
                cr_assert(te_req_done(&s->out), "cancel returned before every on_finish");
                s->cancelled = true;
                n_cancels++;
            }
        } else {
            cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        }
        cr_assert_eq(cn_kv_check(cn_engine_kv(e), &err), CN_STATUS_OK, "op %d: %s", op, err.msg);
        int open = 0;
        for (int i = 0; i < n_reqs; i++) open += !te_req_done(&rs[i].out);
        cn_engine_stats st;
        cn_engine_get_stats(e, &st);
        cr_assert_eq(st.n_requests, open, "op %d: engine has %d requests open, the test %d", op, st.n_requests, open);
        cr_assert_leq(st.n_running, p.max_running);
    }
    for (int guard = 0;; guard++) {
        cn_engine_stats st;
        cn_engine_get_stats(e, &st);
        if (st.n_requests == 0) break;
        cr_assert_lt(guard, 10000, "no progress");
        cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, 0, "%lld blocks still held", (long long)st.kv_blocks_used);
    cr_assert_gt(st.n_preemptions, 0, "the budget was meant to force preemption");
    cr_assert_gt(n_busy, 0, "the queue never filled");
    cr_assert_gt(n_cancels, 0);
    if (prefix_cache) cr_assert_gt(st.prefix_hit_blocks, 0);

    for (int i = 0; i < n_reqs; i++) {
        stress_req *s = &rs[i];
        for (int32_t c = 0; c < s->r.n; c++) {
            te_result *got = &s->out.r[c];
            cr_assert_eq(got->n_finish, 1, "request %d completion %d finished %d times", i, c, got->n_finish);
            te_result ref;
            te_reference(m, &s->r, c, 1, CN_TYPE_F16, &ref);
            char what[64];
            snprintf(what, sizeof what, "request %d completion %d", i, c);
            if (got->reason == CN_FINISH_CANCELLED) expect_prefix(got, &ref, what);
            else te_expect_same(got, &ref, what);
        }
    }
    cn_engine_free(e);
    free(rs);
    cn_model_free(m);
}

Test(engine_stress, random_ops_prefix_cache, .timeout = 120) { run_stress(11, 400, true, 1); }
Test(engine_stress, random_ops_no_prefix_cache_2_threads, .timeout = 120) { run_stress(12, 160, false, 2); }
