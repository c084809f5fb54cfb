/* test_engine.c — batch invariance of the engine on stories260K: every request's tokens,
 * logprobs (and top lists), text and finish reason are bit-identical to the same request
 * run alone through cn_generate (the single-request loop of src/gen, on a cache of its
 * own), whether it runs alone in the engine or beside 1, 7 or 15 others, with chunked
 * prefill, with or without prefix-cache hits, at 1 to 3 threads, forked as one of n
 * completions, and under a KV budget so small that sequences are preempted and
 * recomputed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "test_engine_util.h"

#define N_REQ 16

static char prompt_text[N_REQ][512];
static cn_engine_request reqs[N_REQ];
static const char *stop_dot[] = {". They", "!"};

/* Sixteen distinct prompts (6 to ~70 tokens) with varied sampling settings. */
static void make_requests(void) {
    static const char *names[] = {"Lily", "Tom", "Sue", "Ben", "Max", "Mia", "Sam", "Anna"};
    static const char *things[] = {"a red ball", "a big tree", "a small cat", "a blue boat"};
    for (int i = 0; i < N_REQ; i++) {
        char *p = prompt_text[i];
        int n = snprintf(p, 512, "%s found %s", names[i % 8], things[i % 4]);
        for (int k = 0; k < i % 4; k++)
            n += snprintf(p + n, (size_t)(512 - n), ". Then %s and %s went to the park to play with %s",
                          names[(i + k + 1) % 8], names[(i + 3 * k + 2) % 8], things[(i + k) % 4]);
        cn_engine_request *r = &reqs[i];
        *r = cn_engine_request_default_params();
        r->prompt = p;
        r->gen.max_tokens = 12 + (i % 5) * 4;
        cn_sampling_params *s = &r->gen.sampling;
        s->seed = 100 + (uint64_t)i;
        s->temperature = i == 2 ? 0.0f : 0.8f + 0.1f * (float)(i % 3);
        s->top_k = i % 2 ? 40 : 0;
        s->top_p = 0.95f;
        s->min_p = i % 4 == 3 ? 0.02f : 0.0f;
        s->repetition_penalty = i % 5 == 0 ? 1.1f : 1.0f;
        s->n_logprobs = i % 7 == 6 ? -1 : i % 4;
        if (i % 6 == 1) {
            r->gen.stop = stop_dot;
            r->gen.n_stop = 2;
        }
    }
}

static te_result refs[N_REQ];
static cn_model *model;

static void setup(void) {
    model = te_load_stories();
    make_requests();
    for (int i = 0; i < N_REQ; i++) te_reference(model, &reqs[i], 0, 1, CN_TYPE_F16, &refs[i]);
}

static void teardown(void) { cn_model_free(model); }

/* Runs the first n_total requests in groups of `group` (each group submitted at once,
 * run to the end). The multi-threaded runs take fewer: thread hand-offs are slow on a
 * loaded machine under the sanitizers, and any request shows a difference. */
static void run_groups(cn_engine_params p, int group, int n_total, const char *what) {
    cn_engine *e = te_engine(model, p);
    static te_req out[N_REQ];
    for (int g = 0; g < n_total; g += group) te_run(e, reqs + g, out + g, group);
    char buf[160];
    for (int i = 0; i < n_total; i++) {
        snprintf(buf, sizeof buf, "%s, request %d", what, i);
        te_expect_same(&out[i].r[0], &refs[i], buf);
    }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.n_requests, 0);
    cr_assert_eq(st.n_running + st.n_waiting, 0);
    cr_assert_eq(st.kv_blocks_used, 0, "%lld blocks still held", (long long)st.kv_blocks_used);
    cn_error err = {0};
    cr_assert_eq(cn_kv_check(cn_engine_kv(e), &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_free(e);
}

TestSuite(engine, .init = setup, .fini = teardown, .timeout = 120);

Test(engine, references_are_sane) {
    /* the reference is itself thread-invariant and the prompts give varied outputs */
    te_result r2;
    te_reference(model, &reqs[5], 0, 3, CN_TYPE_F16, &r2);
    te_expect_same(&r2, &refs[5], "reference at 3 threads");
    int n_differ = 0;
    for (int i = 1; i < N_REQ; i++)
        n_differ += refs[i].n_text != refs[0].n_text || memcmp(refs[i].text, refs[0].text, refs[0].n_text) != 0;
    cr_assert_eq(n_differ, N_REQ - 1, "some outputs are the same text");
    int n_stopped = 0;
    for (int i = 1; i < N_REQ; i += 6) n_stopped += refs[i].reason == CN_FINISH_STOP;
    cr_assert_gt(n_stopped, 0, "no stop-string request stopped");
}

Test(engine, alone_equals_single_request_loop) {
    cn_engine_params p = cn_engine_default_params();
    run_groups(p, 1, N_REQ, "alone, 1 thread, prefix cache");
}

Test(engine, with_1_other_at_2_threads) {
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 2;
    p.prefix_cache = false;
    run_groups(p, 2, 6, "pairs, 2 threads");
}

Test(engine, with_7_others_chunked_prefill_3_threads) {
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 3;
    p.max_running = 8;
    p.step_tokens = 24;
    run_groups(p, 8, 8, "groups of 8, 24-row steps, 3 threads");
}

Test(engine, with_15_others_tiny_steps) {
    cn_engine_params p = cn_engine_default_params();
    p.step_tokens = 16;
    p.block_tokens = 4;
    run_groups(p, 16, N_REQ, "16 at once, 16-row steps, 4-token blocks");
}

Test(engine, preempted_and_recomputed) {
    for (int pc = 0; pc < 2; pc++) {
        cn_engine_params p = cn_engine_default_params();
        p.kv_tokens = 160; /* 10 blocks for 16 requests of up to ~100 positions */
        p.max_running = 8;
        p.step_tokens = 32;
        p.prefix_cache = pc == 1;
        cn_engine *e = te_engine(model, p);
        static te_req out[N_REQ];
        te_run(e, reqs, out, N_REQ);
        cn_engine_stats st;
        cn_engine_get_stats(e, &st);
        cr_assert_gt(st.n_preemptions, 0, "the budget was meant to force preemption");
        for (int i = 0; i < N_REQ; i++)
            te_expect_same(&out[i].r[0], &refs[i], pc ? "preempted, prefix cache" : "preempted");
        cr_assert_eq(st.kv_blocks_used, 0);
        cn_engine_free(e);
    }
}

Test(engine, prefix_cache_hits_change_nothing) {
    cn_engine_params p = cn_engine_default_params();
    cn_engine *e = te_engine(model, p);
    te_req out[3];
    /* request 3 has the longest prompt; run it, then the same prompt with another seed
     * (a hit on every full block but the last token's) */
    cn_engine_request again[2] = {reqs[3], reqs[3]};
    again[1].gen.sampling.seed = 999;
    te_run(e, again, out, 1);
    te_expect_same(&out[0].r[0], &refs[3], "first run");
    cr_assert_eq(out[0].r[0].t.n_cached_tokens, 0);
    cn_engine_stats st0;
    cn_engine_get_stats(e, &st0);
    te_run(e, again + 1, out + 1, 1);
    te_result ref;
    te_reference(model, &again[1], 0, 1, CN_TYPE_F16, &ref);
    te_expect_same(&out[1].r[0], &ref, "same prompt, prefix cache hit");
    const int32_t n_prompt = out[1].r[0].t.n_prompt_tokens;
    cr_assert_eq(out[1].r[0].t.n_cached_tokens, (n_prompt - 1) / 16 * 16, "cached %d of %d",
                 out[1].r[0].t.n_cached_tokens, n_prompt);
    cn_engine_stats st1;
    cn_engine_get_stats(e, &st1);
    cr_assert_gt(st1.prefix_hit_blocks, st0.prefix_hit_blocks);
    cn_engine_free(e);
}

Test(engine, n_completions_fork_and_match_seed_plus_i) {
    cn_engine_params p = cn_engine_default_params();
    p.block_tokens = 8;
    cn_engine *e = te_engine(model, p);
    cn_engine_request r = reqs[7];
    r.n = 4;
    te_req out;
    te_req_init(&out, 4);
    cn_engine_callbacks cb = te_callbacks(&out);
    cn_error err = {0};
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &out.id, &err), CN_STATUS_OK, "%s", err.msg);
    bool saw_shared = false;
    while (!te_req_done(&out)) {
        cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cn_kv_stats ks;
        cn_kv_get_stats(cn_engine_kv(e), &ks);
        saw_shared |= ks.n_shared > 0;
    }
    cr_assert(saw_shared, "the completions never shared the prompt's blocks");
    int n_distinct = 0;
    for (int32_t i = 0; i < 4; i++) {
        te_result ref;
        te_reference(model, &r, i, 1, CN_TYPE_F16, &ref);
        char what[64];
        snprintf(what, sizeof what, "completion %d of 4", i);
        te_expect_same(&out.r[i], &ref, what);
        n_distinct += i > 0 && (out.r[i].n_text != out.r[0].n_text ||
                                memcmp(out.r[i].text, out.r[0].text, out.r[0].n_text) != 0);
    }
    cr_assert_gt(n_distinct, 0, "all completions are the same text");
    cn_engine_free(e);
}

/* The run loop on its own thread gives the same results. */
Test(engine, run_loop_thread) {
    cn_engine_params p = cn_engine_default_params();
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    cr_assert_eq(cn_engine_start(e, &err), CN_STATUS_OK, "%s", err.msg);
    static te_req out[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        te_req_init(&out[i], 1);
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        /* the id is written before any callback can run: the engine lock is held */
        cr_assert_eq(cn_engine_submit(e, &reqs[i], &cb, &out[i].id, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_engine_wait_idle(e);
    cn_engine_stop(e);
    for (int i = 0; i < N_REQ; i++) te_expect_same(&out[i].r[0], &refs[i], "run loop");
    cn_engine_free(e);
}

/* Speculation by n-gram lookup (a request's lookup_n) changes no token, logprob or text,
 * whatever the batch: with every guess run (spec_fixed), beside 15 others, under
 * preemption with the prefix cache, forked, and with the cost model deciding. */
static void run_spec(cn_engine_params p, int group, int n_total, int32_t n_fork, bool want_guesses, bool draft,
                     const char *what) {
    if (draft) p.draft = model; /* stories260K drafting for itself: greedy guesses, sampled targets */
    cn_engine *e = te_engine(model, p);
    static te_req out[N_REQ];
    static cn_engine_request rs[N_REQ];
    for (int i = 0; i < n_total; i++) {
        rs[i] = reqs[i];
        rs[i].lookup_n = 1 + i % 4;
        rs[i].max_draft = i % 3 == 0 ? 0 : 2 + i % 7;
        rs[i].n = n_fork;
        rs[i].draft = draft;
    }
    for (int g = 0; g < n_total; g += group) te_run(e, rs + g, out + g, group);
    char buf[160];
    for (int i = 0; i < n_total; i++)
        for (int32_t c = 0; c < n_fork; c++) {
            te_result ref;
            const te_result *want = &refs[i];
            if (c > 0) {
                te_reference(model, &rs[i], c, 1, CN_TYPE_F16, &ref);
                want = &ref;
            }
            snprintf(buf, sizeof buf, "%s, request %d, completion %d", what, i, c);
            te_expect_same(&out[i].r[c], want, buf);
        }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    if (want_guesses) {
        cr_assert_gt(st.n_drafted, 0, "%s: no guess was checked", what);
        cr_assert_gt(st.n_accepted, 0, "%s: no guess was confirmed (%lld checked)", what, (long long)st.n_drafted);
        cr_assert_lt(st.n_accepted, st.n_drafted, "%s: no guess was rejected", what);
        if (draft) cr_assert_gt(st.n_draft_passes, 0);
    }
    if (draft) {
        cn_kv_stats ds;
        cn_kv_get_stats(cn_engine_draft_kv(e), &ds);
        cr_assert_eq(ds.n_free, ds.n_blocks, "%s: the draft cache holds %lld blocks", what,
                     (long long)(ds.n_blocks - ds.n_free));
    }
    cr_assert_leq(st.n_accepted, st.n_drafted);
    cr_assert_eq(st.n_requests, 0);
    cr_assert_eq(st.kv_blocks_used, 0, "%s: %lld blocks still held", what, (long long)st.kv_blocks_used);
    cn_error err = {0};
    cr_assert_eq(cn_kv_check(cn_engine_kv(e), &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_free(e);
}

Test(engine, lookup_speculation_with_15_others) {
    cn_engine_params p = cn_engine_default_params();
    p.spec_fixed = true;
    p.block_tokens = 4;
    run_spec(p, 16, N_REQ, 1, true, false, "lookup, 16 at once");
}

Test(engine, lookup_speculation_preempted_with_prefix_cache) {
    cn_engine_params p = cn_engine_default_params();
    p.spec_fixed = true;
    p.kv_tokens = 160;
    p.max_running = 8;
    p.step_tokens = 32;
    run_spec(p, N_REQ, N_REQ, 1, true, false, "lookup, preempted");
}

Test(engine, lookup_speculation_forked_at_2_threads) {
    cn_engine_params p = cn_engine_default_params();
    p.spec_fixed = true;
    p.n_threads = 2;
    p.block_tokens = 8;
    run_spec(p, 4, 4, 3, true, false, "lookup, n = 3");
}

Test(engine, lookup_speculation_adaptive) {
    cn_engine_params p = cn_engine_default_params();
    run_spec(p, 8, N_REQ, 1, false, false, "lookup, cost model");
}

Test(engine, draft_model_speculation_with_15_others) {
    cn_engine_params p = cn_engine_default_params();
    p.spec_fixed = true;
    p.block_tokens = 4;
    run_spec(p, 16, N_REQ, 1, true, true, "draft model, 16 at once");
}

Test(engine, draft_model_speculation_preempted_chunked) {
    cn_engine_params p = cn_engine_default_params();
    p.spec_fixed = true;
    p.kv_tokens = 160;
    p.max_running = 8;
    p.step_tokens = 32; /* longer prompts catch up in the draft cache over several steps */
    run_spec(p, N_REQ, N_REQ, 1, true, true, "draft model, preempted");
}

Test(engine, draft_model_speculation_forked_adaptive) {
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 2;
    run_spec(p, 4, 4, 3, false, true, "draft model, n = 3, cost model");
}

/* Greedy with no penalty, a model drafting for itself guesses every token right: any
 * position of the draft cache kept wrong (after a rejection, a preemption, a catch-up
 * over several steps, a slot passed on) would show as a rejected guess. */
Test(engine, draft_model_self_draft_greedy_every_guess_right) {
    for (int tight = 0; tight < 2; tight++) {
        cn_engine_params p = cn_engine_default_params();
        p.spec_fixed = true;
        p.draft = model;
        p.step_tokens = 32;
        p.max_running = 8;
        if (tight) p.kv_tokens = 160;
        cn_engine *e = te_engine(model, p);
        static cn_engine_request rs[N_REQ];
        static te_req out[N_REQ];
        for (int i = 0; i < N_REQ; i++) {
            rs[i] = reqs[i];
            rs[i].gen.sampling = cn_sampling_default_params();
            rs[i].gen.sampling.temperature = 0.0f;
            rs[i].gen.sampling.seed = 1;
            rs[i].gen.max_tokens = 24 + i;
            rs[i].draft = true;
            rs[i].max_draft = 1 + i % 6;
        }
        te_run(e, rs, out, N_REQ);
        cn_engine_stats st;
        cn_engine_get_stats(e, &st);
        for (int i = 0; i < N_REQ; i++) {
            te_result ref;
            te_reference(model, &rs[i], 0, 1, CN_TYPE_F16, &ref);
            te_expect_same(&out[i].r[0], &ref, tight ? "greedy self-draft, preempted" : "greedy self-draft");
        }
        if (tight) cr_assert_gt(st.n_preemptions, 0);
        cr_assert_gt(st.n_drafted, 100);
        cr_assert_eq(st.n_accepted, st.n_drafted, "%lld of %lld guesses confirmed", (long long)st.n_accepted,
                     (long long)st.n_drafted);
        cn_engine_free(e);
    }
}

Test(engine, draft_model_refused) {
    cn_engine *e = te_engine(model, cn_engine_default_params());
    cn_engine_request r = reqs[0];
    r.draft = true;
    cn_error err = {0};
    uint64_t id = 0;
    cr_assert_eq(cn_engine_submit(e, &r, NULL, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "draft"), "%s", err.msg);
    cn_engine_free(e);
    /* a draft model with another vocabulary (SmolLM2's 49152 tokens) */
    cn_model *other = te_load_default();
    cn_engine_params p = cn_engine_default_params();
    p.draft = other;
    cn_engine *bad = NULL;
    cr_assert_neq(cn_engine_create(model, &p, &bad, &err), CN_STATUS_OK);
    cr_assert_null(bad);
    cr_assert(strstr(err.msg, "draft"), "%s", err.msg);
    cn_model_free(other);
}

Test(engine, lookup_speculation_bad_parameters) {
    cn_engine *e = te_engine(model, cn_engine_default_params());
    cn_engine_request r = reqs[0];
    cn_error err = {0};
    uint64_t id = 0;
    r.lookup_n = 9;
    cr_assert_eq(cn_engine_submit(e, &r, NULL, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "lookup_n"), "%s", err.msg);
    r.lookup_n = -1;
    cr_assert_eq(cn_engine_submit(e, &r, NULL, &id, &err), CN_STATUS_INVALID_ARG);
    r.lookup_n = 2;
    r.max_draft = CN_ENGINE_MAX_DRAFT + 1;
    cr_assert_eq(cn_engine_submit(e, &r, NULL, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_draft"), "%s", err.msg);
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.n_requests, 0);
    cn_engine_free(e);
}
