/* test_engine_api.c — the engine's edges on stories260K: bad parameters and requests
 * rejected at create/submit with a status and a message naming the culprit (and nothing
 * kept), the KV budget a request can never fit (LIMIT), a full queue (BUSY, then room
 * again once admitted), cancellation (immediate release of blocks, one "cancelled"
 * finish per completion, from outside and from inside a callback, others unaffected). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "test_engine_util.h"

static cn_model *model;
static void setup(void) { model = te_load_stories(); }
static void teardown(void) { cn_model_free(model); }
TestSuite(engine_api, .init = setup, .fini = teardown, .timeout = 120);

static cn_engine_request story(const char *text, uint64_t seed, int32_t max_tokens) {
    cn_engine_request r = cn_engine_request_default_params();
    r.prompt = text;
    r.gen.max_tokens = max_tokens;
    r.gen.sampling.seed = seed;
    r.gen.sampling.temperature = 0.7f;
    r.gen.sampling.n_logprobs = 2;
    r.gen.sampling.ignore_eos = true;
    return r;
}

Test(engine_api, bad_params) {
    cn_engine *e = NULL;
    cn_error err = {0};
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = -1; /* 0 is every CPU, as for a context (below) */
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "n_threads"), "%s", err.msg);
    p = cn_engine_default_params();
    p.max_running = 32;
    p.step_tokens = 16;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "step_tokens"), "%s", err.msg);
    p = cn_engine_default_params();
    p.kv_type = CN_TYPE_Q4_0;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "kv_type"), "%s", err.msg);
    p = cn_engine_default_params();
    p.kv_tokens = 0;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "kv_tokens"), "%s", err.msg);
    p = cn_engine_default_params();
    p.max_queue = 0;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_queue"), "%s", err.msg);
    p = cn_engine_default_params();
    p.kv_tokens = 1;
    p.block_tokens = 1;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_LIMIT);
    cr_assert_null(e);
    /* a MiB budget: the pool is what the budget buys */
    p = cn_engine_default_params();
    p.kv_mem_mib = 1;
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_leq((uint64_t)st.kv_blocks_total * st.kv_block_bytes, 1u << 20);
    cr_assert_gt((uint64_t)(st.kv_blocks_total + 1) * st.kv_block_bytes, (1u << 20) * 9 / 10);
    cn_engine_free(e);
    cn_engine_free(NULL);
}

Test(engine_api, bad_requests_rejected_at_submit) {
    cn_engine_params p = cn_engine_default_params();
    p.kv_tokens = 256;
    p.max_running = 4;
    p.step_tokens = 64;
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    uint64_t id = 77;
    cn_engine_callbacks cb = {0};

    cn_engine_request r = story("Once upon a time", 1, 8);
    r.prompt = NULL;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "no prompt"), "%s", err.msg);
    cr_assert_eq(id, 0);

    const int32_t bad_tok[] = {1, 5, 100000};
    r.prompt_tokens = bad_tok;
    r.n_prompt_tokens = 3;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "100000"), "%s", err.msg);

    r = story("Once upon a time", 1, 8);
    r.gen.sampling.top_p = 7.0f;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "top_p"), "%s", err.msg);

    r = story("Once upon a time", 1, 8);
    r.n = 0;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_INVALID_ARG);
    r.n = CN_ENGINE_MAX_N + 1;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_INVALID_ARG);
    r.n = 5; /* more than max_running */
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_LIMIT);

    /* prompt + max_tokens beyond the whole budget (256 positions): could never run */
    r = story("Once upon a time", 1, 254);
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_LIMIT);
    cr_assert(strstr(err.msg, "KV budget"), "%s", err.msg);
    /* a prompt the context cannot hold */
    static char long_text[8192];
    size_t n = 0;
    while (n + 40 < sizeof long_text)
        n += (size_t)snprintf(long_text + n, sizeof long_text - n, "The cat sat on the mat. ");
    r = story(long_text, 1, 1);
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_LIMIT);
    cr_assert(strstr(err.msg, "context"), "%s", err.msg);
    /* exactly at the budget is fine */
    int32_t toks[6] = {1, 100, 200, 300, 400, 500};
    r = story(NULL, 1, 250);
    r.prompt_tokens = toks;
    r.n_prompt_tokens = 6;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_gt(id, 0);
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.n_requests, 1);
    cr_assert_eq(st.n_waiting, 1);
    cn_engine_free(e); /* drops the open request, no leak */
}

Test(engine_api, busy_when_the_queue_is_full) {
    cn_engine_params p = cn_engine_default_params();
    p.max_queue = 2;
    p.max_running = 2;
    p.step_tokens = 64;
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    te_req out[4];
    cn_engine_request r = story("Once upon a time", 1, 6);
    for (int i = 0; i < 2; i++) {
        te_req_init(&out[i], 1);
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        cr_assert_eq(cn_engine_submit(e, &r, &cb, &out[i].id, &err), CN_STATUS_OK, "%s", err.msg);
    }
    te_req_init(&out[2], 1);
    cn_engine_callbacks cb = te_callbacks(&out[2]);
    uint64_t id = 5;
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &id, &err), CN_STATUS_BUSY);
    cr_assert(strstr(err.msg, "try later"), "%s", err.msg);
    cr_assert_eq(id, 0);
    /* one step admits both: the queue has room again */
    cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &out[2].id, &err), CN_STATUS_OK, "%s", err.msg);
    for (int guard = 0; !(te_req_done(&out[0]) && te_req_done(&out[1]) && te_req_done(&out[2])); guard++) {
        cr_assert_lt(guard, 1000);
        cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    }
    for (int i = 0; i < 3; i++) te_expect_same(&out[i].r[0], &out[0].r[0], "same request thrice");
    cn_engine_free(e);
}

Test(engine_api, cancel_releases_blocks_now) {
    cn_engine_params p = cn_engine_default_params();
    p.block_tokens = 4;
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    cn_engine_request rs[3] = {story("Once upon a time, a girl", 3, 40), story("A dog ran to the", 4, 40),
                               story("Tom had a red", 5, 40)};
    rs[1].n = 3;
    te_req out[3];
    for (int i = 0; i < 3; i++) {
        te_req_init(&out[i], rs[i].n);
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        cr_assert_eq(cn_engine_submit(e, &rs[i], &cb, &out[i].id, &err), CN_STATUS_OK, "%s", err.msg);
    }
    for (int s = 0; s < 6; s++) cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_stats before, after;
    cn_engine_get_stats(e, &before);
    cr_assert_eq(before.n_running, 5);
    cr_assert_eq(cn_engine_cancel(e, out[1].id, &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_get_stats(e, &after);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(out[1].r[i].n_finish, 1, "completion %d: on_finish before cancel returned", i);
        cr_assert_eq(out[1].r[i].reason, CN_FINISH_CANCELLED);
    }
    cr_assert_eq(after.n_running, 2);
    cr_assert_eq(after.n_requests, 2);
    cr_assert_lt(after.kv_blocks_used, before.kv_blocks_used, "cancel kept its blocks");
    cr_assert_eq(cn_kv_check(cn_engine_kv(e), &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_engine_cancel(e, out[1].id, &err), CN_STATUS_NOT_FOUND);
    cr_assert_eq(cn_engine_cancel(e, 12345, &err), CN_STATUS_NOT_FOUND);

    /* request 0 cancels itself from its on_token callback after 9 tokens */
    out[0].cancel_after = 9;
    out[0].e = e;
    while (!te_req_done(&out[0]) || !te_req_done(&out[2]))
        cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(out[0].cancel_status, CN_STATUS_OK);
    cr_assert_eq(out[0].r[0].reason, CN_FINISH_CANCELLED);
    cr_assert_eq(out[0].r[0].n_tok, 9, "tokens after the cancel: %d", out[0].r[0].n_tok);
    /* the others were not disturbed */
    te_result ref;
    te_reference(model, &rs[2], 0, 1, CN_TYPE_F16, &ref);
    te_expect_same(&out[2].r[0], &ref, "beside cancelled requests");
    cn_engine_stats end;
    cn_engine_get_stats(e, &end);
    cr_assert_eq(end.kv_blocks_used, 0);
    cr_assert_eq(end.n_requests, 0);
    cn_engine_free(e);
}

Test(engine_api, cancel_while_waiting) {
    cn_engine_params p = cn_engine_default_params();
    p.max_running = 1;
    p.step_tokens = 32;
    p.max_queue = 1;
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    te_req out[2];
    cn_engine_request r = story("Once upon a time", 1, 4);
    te_req_init(&out[0], 1);
    cn_engine_callbacks cb = te_callbacks(&out[0]);
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &out[0].id, &err), CN_STATUS_OK);
    cr_assert_eq(cn_engine_cancel(e, out[0].id, &err), CN_STATUS_OK);
    cr_assert_eq(out[0].r[0].n_finish, 1);
    cr_assert_eq(out[0].r[0].n_tok, 0);
    /* the queue slot came back */
    te_req_init(&out[1], 1);
    cb = te_callbacks(&out[1]);
    cr_assert_eq(cn_engine_submit(e, &r, &cb, &out[1].id, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t rows = 0;
    while (!te_req_done(&out[1])) cr_assert_eq(cn_engine_step(e, &rows, &err), CN_STATUS_OK);
    cr_assert_eq(cn_engine_step(e, &rows, &err), CN_STATUS_OK);
    cr_assert_eq(rows, 0, "an idle engine ran rows");
    cn_engine_free(e);
}

/* The run loop steps on its own thread while this one submits and cancels: cancelled
 * requests finish "cancelled" exactly once, the others run to their length, every block
 * comes back. */
Test(engine_api, cancel_from_another_thread_while_running) {
    cn_engine_params p = cn_engine_default_params();
    p.max_running = 4;
    p.step_tokens = 64;
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    cr_assert_eq(cn_engine_start(e, &err), CN_STATUS_OK, "%s", err.msg);
    static te_req out[6];
    cn_engine_request r = story("Once upon a time there was a", 9, 120);
    for (int i = 0; i < 6; i++) {
        te_req_init(&out[i], 1);
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        r.gen.sampling.seed = 9 + (uint64_t)i;
        cr_assert_eq(cn_engine_submit(e, &r, &cb, &out[i].id, &err), CN_STATUS_OK, "%s", err.msg);
    }
    for (int i = 0; i < 6; i += 2) {
        cn_status st = cn_engine_cancel(e, out[i].id, &err);
        cr_assert(st == CN_STATUS_OK || st == CN_STATUS_NOT_FOUND, "%s", err.msg);
    }
    cn_engine_wait_idle(e);
    cn_engine_stop(e);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(out[i].r[0].n_finish, 1, "request %d finished %d times", i, out[i].r[0].n_finish);
        if (i % 2) cr_assert_eq(out[i].r[0].reason, CN_FINISH_LENGTH);
        if (i % 2) cr_assert_eq(out[i].r[0].n_tok, 120);
    }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, 0);
    cr_assert_eq(st.n_requests, 0);
    cr_assert_eq(cn_kv_check(cn_engine_kv(e), &err), CN_STATUS_OK, "%s", err.msg);
    cn_engine_free(e);
}

/* What an engine owns and hands out: its tokenizer, its chat template (the model's, or
 * one by name) with the end-of-turn stop it needs, its sizes; a bad template name fails
 * create naming chat_template. */
Test(engine_api, parts) {
    cn_engine *e = NULL;
    cn_error err = {0};
    cn_engine_params p = cn_engine_default_params();
    p.n_ctx = 128;
    e = te_engine(model, p);
    cr_assert(cn_engine_tokenizer(e));
    cr_assert_eq(cn_engine_n_vocab(e), cn_tokenizer_n_vocab(cn_engine_tokenizer(e)));
    cr_assert_eq(cn_engine_n_ctx(e), 128);
    cr_assert_eq(cn_engine_max_running(e), p.max_running);
    cr_assert_not(cn_engine_has_draft(e));
    cr_assert_null(cn_engine_chat_template(e)); /* stories260K has no template */
    cr_assert_null(cn_engine_end_of_turn_stop(e));
    cn_engine_free(e);
    p.chat_template = "chatml";
    e = te_engine(model, p);
    cr_assert_str_eq(cn_chat_template_name(cn_engine_chat_template(e)), "chatml");
    /* no <|im_end|> token in this vocabulary: the reply must stop on the text */
    cr_assert_str_eq(cn_engine_end_of_turn_stop(e), "<|im_end|>");
    cn_engine_free(e);
    p.chat_template = "nonesuch";
    cr_assert_eq(cn_engine_create(model, &p, &e, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "chat_template");
    cr_assert_null(e);
}

/* n_threads = 0 is every CPU, as for a context and an embedder; the request's tokens are
 * those of the single-request loop (results do not depend on the thread count). */
Test(engine_api, zero_threads_is_every_cpu) {
    cn_engine_params p = cn_engine_default_params();
    p.n_threads = 0;
    p.kv_tokens = 256;
    cn_engine *e = te_engine(model, p);
    cr_assert_eq(cn_pool_size(e->pool), cn_threads_resolve(0));
    const cn_engine_request r = story("Once upon a time", 7, 24);
    te_req got;
    te_run(e, &r, &got, 1);
    te_result want;
    te_reference(model, &r, 0, 1, CN_TYPE_F16, &want);
    te_expect_same(&got.r[0], &want, "every CPU");
    cn_engine_free(e);
}
