/* test_engine_default.c — batch invariance on the default model (SmolLM2-135M-Instruct
 * Q4_1; the setup script fetches it). Kept short because a 135M model is slow under the
 * sanitizers: two chat-style prompts sharing a system prompt longer than one KV block,
 * a few sampled tokens with logprobs. The first runs alone and must equal cn_generate
 * (the single-request loop) token for token and logprob for logprob; the second then
 * runs alone on the same engine with a prefix-cache hit, and finally both run together
 * at another thread count: every result must be bit-identical to its alone run. The
 * same pair batched over an 8-bit (q8_0) KV cache must equal cn_generate on one. */
#include <criterion/criterion.h>
#include <string.h>

#include "test_engine_util.h"

static const char *prompts[2] = {
    "<|im_start|>system\nYou are a helpful assistant who answers briefly.<|im_end|>\n"
    "<|im_start|>user\nName a color.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant who answers briefly.<|im_end|>\n"
    "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n",
};

static cn_engine_request request(int i) {
    cn_engine_request r = cn_engine_request_default_params();
    r.prompt = prompts[i];
    r.gen.max_tokens = 3;
    r.gen.sampling.seed = 42 + (uint64_t)i;
    r.gen.sampling.temperature = 0.9f;
    r.gen.sampling.n_logprobs = 2;
    r.gen.sampling.ignore_eos = true;
    return r;
}

Test(engine_default, alone_prefix_hit_and_batched_agree, .timeout = 300) {
    cn_model *m = te_load_default();
    cn_engine_request rs[2] = {request(0), request(1)};
    te_result ref;
    te_reference(m, &rs[0], 0, 1, CN_TYPE_F16, &ref);

    cn_engine_params p = cn_engine_default_params();
    p.kv_tokens = 512;
    p.max_running = 2;
    p.step_tokens = 128;
    cn_engine *e = te_engine(m, p);
    te_req alone[2];
    te_run(e, &rs[0], &alone[0], 1);
    te_expect_same(&alone[0].r[0], &ref, "default model, alone vs cn_generate");
    te_run(e, &rs[1], &alone[1], 1);
    cr_assert_geq(alone[1].r[0].t.n_cached_tokens, 16, "no prefix-cache hit on the shared system prompt (%d)",
                  alone[1].r[0].t.n_cached_tokens);
    cn_engine_free(e);

    p.n_threads = 2;
    p.prefix_cache = false;
    e = te_engine(m, p);
    te_req both[2];
    te_run(e, rs, both, 2);
    te_expect_same(&both[0].r[0], &alone[0].r[0], "default model, request 0 batched at 2 threads");
    te_expect_same(&both[1].r[0], &alone[1].r[0], "default model, request 1 batched at 2 threads");
    cn_engine_free(e);

    /* 8-bit KV: batched equals the single-request loop on a q8_0 cache too */
    p.kv_type = CN_TYPE_Q8_0;
    p.prefix_cache = true;
    e = te_engine(m, p);
    te_run(e, rs, both, 2);
    for (int i = 0; i < 2; i++) {
        te_reference(m, &rs[i], 0, 1, CN_TYPE_Q8_0, &ref);
        te_expect_same(&both[i].r[0], &ref, i ? "q8_0 KV, request 1 batched" : "q8_0 KV, request 0 batched");
    }
    cn_engine_free(e);
    cn_model_free(m);
}
