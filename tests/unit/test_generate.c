/* test_generate.c — the per-request step machine (cn_gen) and the single-request loop
 * (cn_generate).
 *
 * Two kinds of test. Step-machine tests push hand-made logits rows (one-hot: the chain
 * must pick that token) through stories260K's real SentencePiece tokenizer, so the token
 * split is exactly the one wanted: a stop string that starts in one token and ends two
 * tokens later, a character split over three byte tokens, an end-of-generation token right
 * after held-back text. The truth there is the text the tokens stand for (written out by
 * hand). Loop tests run the real stories260K model and compare against an independent
 * greedy loop written here (cn_forward + argmax), against each other (seeds, chunked
 * prefill, reused prefixes), and against hand-derived counts (context full). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_generate_util.h"

#define EOS 2

/* ", there was a little girl named Lily. She" as stories260K splits it (no BOS):
 * ',' ' there' ' was' ' a' ' little' ' g' 'ir' 'l' ' named' ' Lily' '.' ' She' */
static const int32_t GIRL[] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338};
#define GIRL_G 5 /* index of ' g' */

static cn_gen *make_gen(gt_env *e, cn_gen_params *p) {
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, p, &g, &err), CN_STATUS_OK, "%s", err.msg);
    const int32_t bos = 1;
    cr_assert_eq(cn_gen_begin(g, &bos, 1, 0, &err), CN_STATUS_OK, "%s", err.msg);
    return g;
}

/* Pushes one-hot rows for ids[0..n) until the request is done; returns the last step. */
static cn_gen_step push_ids(cn_gen *g, int32_t n_vocab, const int32_t *ids, int n) {
    float *row = malloc((size_t)n_vocab * sizeof *row);
    cn_gen_step st = {-1, false, CN_FINISH_NONE};
    cn_error err = {0};
    for (int i = 0; i < n && !st.done; i++) {
        gt_onehot(row, n_vocab, ids[i]);
        cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(st.token, ids[i]);
    }
    free(row);
    return st;
}

static cn_gen_params greedy_params(void) {
    cn_gen_params p = cn_gen_default_params();
    p.sampling.temperature = 0.0f;
    p.sampling.seed = 7;
    return p;
}

Test(generate, stop_string_spanning_three_tokens) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    gt_rec r;
    gt_rec_init(&r);
    cn_gen_params p = greedy_params();
    const char *stops[] = {"xyz", "girl"};
    p.stop = stops;
    p.n_stop = 2;
    gt_rec_attach(&r, &p);
    cn_gen *g = make_gen(&e, &p);
    /* up to ' g': "g" may still become "girl", so it is held back */
    cn_gen_step st = push_ids(g, e.n_vocab, GIRL, GIRL_G + 1);
    cr_assert(!st.done);
    cr_assert_str_eq(r.text, ", there was a little ");
    st = push_ids(g, e.n_vocab, GIRL + GIRL_G + 1, 1); /* 'ir' */
    cr_assert(!st.done);
    cr_assert_str_eq(r.text, ", there was a little ");
    st = push_ids(g, e.n_vocab, GIRL + GIRL_G + 2, 1); /* 'l' completes "girl" */
    cr_assert(st.done);
    cr_assert_eq(st.finish, CN_FINISH_STOP);
    cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_STOP);
    cr_assert_eq(cn_gen_stop_index(g), 1);
    cr_assert_str_eq(cn_gen_text(g, NULL), ", there was a little ");
    cr_assert_str_eq(r.text, ", there was a little ");
    cr_assert_eq(cn_gen_n_generated(g), GIRL_G + 3);
    cr_assert_eq(r.n_tokens, GIRL_G + 3);
    cr_assert(r.all_valid);
    /* done: a further push is refused, finish is a no-op */
    float *row = calloc((size_t)e.n_vocab, sizeof *row);
    cn_error err = {0};
    cn_gen_step s2;
    cr_assert_eq(cn_gen_push_logits(g, row, &s2, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "finished"), "%s", err.msg);
    cn_gen_finish(g, CN_FINISH_LENGTH);
    cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_STOP);
    free(row);
    cn_gen_free(g);
    gt_close(&e);
}

/* "girls" never completes: "girl" is held back until max_tokens ends the request, then
 * flushed, exactly once. */
Test(generate, held_text_flushed_at_max_tokens) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    gt_rec r;
    gt_rec_init(&r);
    cn_gen_params p = greedy_params();
    const char *stops[] = {"girls"};
    p.stop = stops;
    p.n_stop = 1;
    p.max_tokens = GIRL_G + 3;
    gt_rec_attach(&r, &p);
    cn_gen *g = make_gen(&e, &p);
    cn_gen_step st = push_ids(g, e.n_vocab, GIRL, GIRL_G + 2);
    cr_assert(!st.done);
    cr_assert_str_eq(r.text, ", there was a little ");
    st = push_ids(g, e.n_vocab, GIRL + GIRL_G + 2, 1);
    cr_assert(st.done);
    cr_assert_eq(st.finish, CN_FINISH_LENGTH);
    cr_assert_str_eq(r.text, ", there was a little girl");
    cr_assert_str_eq(cn_gen_text(g, NULL), ", there was a little girl");
    cr_assert_eq(cn_gen_stop_index(g), -1);
    cn_gen_finish(g, CN_FINISH_LENGTH);
    cr_assert_str_eq(r.text, ", there was a little girl");
    cn_gen_free(g);
    gt_close(&e);
}

Test(generate, held_text_flushed_at_eos) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    gt_rec r;
    gt_rec_init(&r);
    cn_gen_params p = greedy_params();
    const char *stops[] = {"girls"};
    p.stop = stops;
    p.n_stop = 1;
    gt_rec_attach(&r, &p);
    cn_gen *g = make_gen(&e, &p);
    cn_gen_step st = push_ids(g, e.n_vocab, GIRL, GIRL_G + 3);
    cr_assert(!st.done);
    cr_assert_str_eq(r.text, ", there was a little ");
    const int32_t eos = EOS;
    st = push_ids(g, e.n_vocab, &eos, 1);
    cr_assert(st.done);
    cr_assert_eq(st.finish, CN_FINISH_STOP);
    cr_assert_eq(st.token, EOS);
    cr_assert_str_eq(r.text, ", there was a little girl");
    cr_assert_eq(cn_gen_n_generated(g), GIRL_G + 3, "the EOS token is not part of the output");
    cr_assert_eq(cn_gen_stop_index(g), -1);
    cn_gen_free(g);
    gt_close(&e);
}

/* ' ' <0xE6> <0x97> <0xA5> '€': 日 comes as three byte tokens. No piece may carry part
 * of it; at max_tokens an unfinished character becomes U+FFFD, never broken bytes. */
Test(generate, utf8_split_across_byte_tokens) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    const int32_t ids[] = {410, 233, 154, 168, 503};
    cr_assert_eq(cn_tokenizer_token_type(e.tok, 233), CN_TOKEN_BYTE);
    gt_rec r;
    gt_rec_init(&r);
    cn_gen_params p = greedy_params();
    gt_rec_attach(&r, &p);
    cn_gen *g = make_gen(&e, &p);
    push_ids(g, e.n_vocab, ids, 3);
    cr_assert_str_eq(r.text, " ", "a partial character was emitted: '%s'", r.text);
    push_ids(g, e.n_vocab, ids + 3, 2);
    cr_assert_str_eq(r.text, " \xE6\x97\xA5\xE2\x82\xAC");
    cr_assert(r.all_valid);
    cn_gen_finish(g, CN_FINISH_LENGTH);
    cr_assert_str_eq(cn_gen_text(g, NULL), " \xE6\x97\xA5\xE2\x82\xAC");
    cn_gen_free(g);

    gt_rec_init(&r);
    p.max_tokens = 3;
    g = make_gen(&e, &p);
    cn_gen_step st = push_ids(g, e.n_vocab, ids, 3);
    cr_assert(st.done);
    cr_assert_eq(st.finish, CN_FINISH_LENGTH);
    cr_assert_str_eq(r.text, " \xEF\xBF\xBD");
    cr_assert(r.all_valid);
    cn_gen_free(g);
    gt_close(&e);
}

Test(generate, cancel_from_callback) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    gt_rec r;
    gt_rec_init(&r);
    r.cancel_after = 3;
    cn_gen_params p = greedy_params();
    gt_rec_attach(&r, &p);
    cn_gen *g = make_gen(&e, &p);
    cn_gen_step st = push_ids(g, e.n_vocab, GIRL, 3);
    cr_assert(!st.done);
    float *row = malloc((size_t)e.n_vocab * sizeof *row);
    gt_onehot(row, e.n_vocab, GIRL[3]);
    cn_error err = {0};
    cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(st.done);
    cr_assert_eq(st.finish, CN_FINISH_CANCELLED);
    cr_assert_eq(st.token, -1);
    cr_assert_eq(cn_gen_n_generated(g), 3);
    cr_assert_str_eq(r.text, ", there was");
    free(row);
    cn_gen_free(g);
    gt_close(&e);
}

/* EOS is the most likely token. Without ignore_eos it ends the request at once; with it,
 * EOS is banned and the request runs to max_tokens. */
Test(generate, ignore_eos_runs_to_max_tokens) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    float *row = malloc((size_t)e.n_vocab * sizeof *row);
    gt_onehot(row, e.n_vocab, EOS);
    row[261] = 5.0f;
    cn_error err = {0};
    for (int ignore = 0; ignore < 2; ignore++) {
        cn_gen_params p = greedy_params();
        p.sampling.ignore_eos = ignore;
        p.max_tokens = 5;
        cn_gen *g = make_gen(&e, &p);
        cn_gen_step st = {0};
        int pushes = 0;
        while (!st.done) {
            cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_OK, "%s", err.msg);
            pushes++;
        }
        if (ignore) {
            cr_assert_eq(st.finish, CN_FINISH_LENGTH);
            cr_assert_eq(pushes, 5);
            cr_assert_str_eq(cn_gen_text(g, NULL), " a a a a a");
        } else {
            cr_assert_eq(st.finish, CN_FINISH_STOP);
            cr_assert_eq(pushes, 1);
            cr_assert_eq(cn_gen_n_generated(g), 0);
            cr_assert_str_eq(cn_gen_text(g, NULL), "");
        }
        cn_gen_free(g);
    }
    free(row);
    gt_close(&e);
}

static void expect_invalid(gt_env *e, const cn_gen_params *p, const char *needle) {
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, p, &g, &err), CN_STATUS_INVALID_ARG, "wanted '%s'", needle);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

Test(generate, bad_params) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    cn_gen_params p = cn_gen_default_params();
    p.max_tokens = 0;
    expect_invalid(&e, &p, "max_tokens = 0 is out of range");
    p.max_tokens = CN_GEN_MAX_TOKENS + 1;
    expect_invalid(&e, &p, "max_tokens");
    p = cn_gen_default_params();
    p.sampling.top_p = 1.7f;
    expect_invalid(&e, &p, "top_p = 1.7");
    p = cn_gen_default_params();
    p.sampling.temperature = -1.0f;
    expect_invalid(&e, &p, "temperature");
    p = cn_gen_default_params();
    const char *empty[] = {""};
    p.stop = empty;
    p.n_stop = 1;
    expect_invalid(&e, &p, "stop string 0 is empty");
    p.n_stop = CN_GEN_MAX_STOP + 1;
    expect_invalid(&e, &p, "n_stop");
    p = cn_gen_default_params();
    p.beam.n_beams = 0;
    expect_invalid(&e, &p, "n_beams = 0");
    p = cn_gen_default_params();
    p.beam.length_penalty = NAN;
    expect_invalid(&e, &p, "length_penalty");
    cn_error err = {0};
    p = cn_gen_default_params();
    cn_logit_bias b = {e.n_vocab, 1.0f};
    p.sampling.logit_bias = &b;
    p.sampling.n_logit_bias = 1;
    expect_invalid(&e, &p, "logit_bias");

    /* pushes outside begin..finish */
    p = cn_gen_default_params();
    cn_gen *g = NULL;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &g, &err), CN_STATUS_OK);
    float *row = calloc((size_t)e.n_vocab, sizeof *row);
    cn_gen_step st;
    cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "before cn_gen_begin"), "%s", err.msg);
    const int32_t bad = e.n_vocab;
    cr_assert_eq(cn_gen_begin(g, &bad, 1, 0, &err), CN_STATUS_INVALID_ARG);
    const int32_t bos = 1;
    cr_assert_eq(cn_gen_begin(g, &bos, 1, 0, &err), CN_STATUS_OK);
    row[5] = NAN;
    cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_INVALID_ARG);
    cr_assert(!cn_gen_done(g));
    free(row);
    cn_gen_free(g);
    gt_close(&e);
}

/* Logprobs under the raw distribution (default) and after the chain, against log-softmax
 * computed here in double. Logits: ids 300..303 get 3, 2, 1, 0; everything else -100. */
Test(generate, logprobs_raw_and_after_chain) {
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    float *row = malloc((size_t)e.n_vocab * sizeof *row);
    for (int32_t i = 0; i < e.n_vocab; i++) row[i] = -100.0f;
    for (int k = 0; k < 4; k++) row[300 + k] = (float)(3 - k);
    double lse_raw = 0, lse_chain = 0;
    for (int32_t i = 0; i < e.n_vocab; i++) lse_raw += exp((double)row[i]);
    lse_raw = log(lse_raw);
    lse_chain = log(exp(3.0 / 0.5) + exp(2.0 / 0.5)); /* temperature 0.5, then top-k 2 */
    cn_error err = {0};

    for (int after = 0; after < 2; after++) {
        cn_gen_params p = cn_gen_default_params();
        p.sampling.temperature = 0.5f;
        p.sampling.top_k = 2;
        p.sampling.n_logprobs = 3;
        p.sampling.seed = 11;
        p.logprobs_after_chain = after;
        cn_gen *g = make_gen(&e, &p);
        for (int step = 0; step < 8; step++) {
            cn_gen_step st;
            cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_OK, "%s", err.msg);
        }
        int32_t n = 0;
        const cn_gen_token *ti = cn_gen_token_info(g, &n);
        cr_assert_eq(n, 8);
        bool saw[2] = {false, false};
        for (int32_t t = 0; t < n; t++) {
            const int32_t id = ti[t].id;
            cr_assert(id == 300 || id == 301, "top-k 2 let token %d through", id);
            saw[id - 300] = true;
            cr_assert(ti[t].has_logprob);
            cr_assert_eq(ti[t].index, t);
            const double want = after ? (double)row[id] / 0.5 - lse_chain : (double)row[id] - lse_raw;
            cr_assert_float_eq(ti[t].logprob, want, 1e-5, "token %d: %g vs %g", id, ti[t].logprob, want);
            cr_assert_eq(ti[t].n_top, after ? 2 : 3);
            for (int k = 0; k < ti[t].n_top; k++) {
                cr_assert_eq(ti[t].top[k].id, 300 + k);
                const double wk = after ? (3.0 - k) / 0.5 - lse_chain : (3.0 - k) - lse_raw;
                cr_assert_float_eq(ti[t].top[k].logprob, wk, 1e-5);
            }
        }
        cr_assert(saw[0] && saw[1], "8 draws at p = .88/.12 should show both tokens with seed 11");
        cn_gen_free(g);
    }
    /* off: no logprobs */
    cn_gen_params p = greedy_params();
    cn_gen *g = make_gen(&e, &p);
    cn_gen_step st;
    cr_assert_eq(cn_gen_push_logits(g, row, &st, &err), CN_STATUS_OK);
    int32_t n;
    cr_assert(!cn_gen_token_info(g, &n)[0].has_logprob);
    cn_gen_free(g);
    free(row);
    gt_close(&e);
}

Test(generate, percentile_matches_numpy) {
    /* numpy.percentile([4, 1, 3, 2], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4 */
    double v[] = {4, 1, 3, 2};
    cr_assert_float_eq(cn_gen_percentile(v, 4, 0.0), 1.0, 1e-12);
    cr_assert_float_eq(cn_gen_percentile(v, 4, 0.5), 2.5, 1e-12);
    cr_assert_float_eq(cn_gen_percentile(v, 4, 0.9), 3.7, 1e-12);
    cr_assert_float_eq(cn_gen_percentile(v, 4, 0.99), 3.97, 1e-12);
    cr_assert_float_eq(cn_gen_percentile(v, 4, 1.0), 4.0, 1e-12);
    double one = 5;
    cr_assert_float_eq(cn_gen_percentile(&one, 1, 0.9), 5.0, 1e-12);
    cr_assert_float_eq(cn_gen_percentile(NULL, 0, 0.9), 0.0, 1e-12);
}

/* ---- the loop on the real model ---- */

static int32_t argmax(const float *x, int32_t n) {
    int32_t a = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

/* Greedy continuation of prompt by a loop written here: cn_forward + argmax, stopping at
 * EOS. Returns the count. Uses sequence 0 of a fresh KV cache. */
static int greedy_ref(gt_env *e, const int32_t *prompt, int n_prompt, int n_max, int32_t *out) {
    cn_kv_seq_free(e->kv, 0);
    float *logits = malloc((size_t)e->n_vocab * sizeof *logits);
    cn_batch b;
    cn_error err = {0};
    cr_assert_eq(cn_batch_init(&b, n_prompt, &err), CN_STATUS_OK);
    for (int i = 0; i < n_prompt; i++) cn_batch_add(&b, prompt[i], i, 0, i == n_prompt - 1);
    cr_assert_eq(cn_forward(e->model, e->fwd, &b, e->kv, logits, &err), CN_STATUS_OK, "%s", err.msg);
    int n = 0;
    while (n < n_max) {
        const int32_t id = argmax(logits, e->n_vocab);
        if (cn_tokenizer_is_eog(e->tok, id)) break;
        out[n++] = id;
        cn_batch_clear(&b);
        cn_batch_add(&b, id, n_prompt + n - 1, 0, true);
        cr_assert_eq(cn_forward(e->model, e->fwd, &b, e->kv, logits, &err), CN_STATUS_OK, "%s", err.msg);
    }
    cn_batch_free(&b);
    free(logits);
    cn_kv_seq_free(e->kv, 0);
    return n;
}

/* Runs p on prompt in sequence 0 (fresh); returns the request (caller frees). */
static cn_gen *run(gt_env *e, cn_gen_params *p, const int32_t *prompt, int n_prompt) {
    cn_kv_seq_free(e->kv, 0);
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, p, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_generate(&e->run, 0, prompt, n_prompt, 0, g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(cn_gen_done(g));
    return g;
}

Test(generate, temp0_equals_greedy_and_timings) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    int32_t want[64];
    const int nw = greedy_ref(&e, prompt, np, 40, want);
    cr_assert_gt(nw, 20);

    gt_rec r;
    gt_rec_init(&r);
    cn_gen_params p = greedy_params();
    p.max_tokens = 40;
    gt_rec_attach(&r, &p);
    cn_gen *g = run(&e, &p, prompt, np);
    int32_t n;
    const int32_t *got = cn_gen_tokens(g, &n);
    cr_assert_eq(n, nw);
    for (int i = 0; i < n; i++) cr_assert_eq(got[i], want[i], "token %d: %d vs greedy %d", i, got[i], want[i]);
    cr_assert_eq(cn_gen_finish_reason(g), nw == 40 ? CN_FINISH_LENGTH : CN_FINISH_STOP);
    cr_assert(!strncmp(cn_gen_text(g, NULL), ", there was a little girl named Lily.", 37), "%s", cn_gen_text(g, NULL));
    cr_assert_str_eq(r.text, cn_gen_text(g, NULL));
    cr_assert_eq(r.n_tokens, n);
    cr_assert_eq(cn_kv_seq_len(e.kv, 0), np + n - 1, "every token but the last is fed back");

    cn_gen_timings t;
    cn_gen_get_timings(g, &t);
    cr_assert_eq(t.n_prompt_tokens, np);
    cr_assert_eq(t.n_cached_tokens, 0);
    cr_assert_eq(t.n_generated_tokens, n);
    cr_assert(t.queue_ms >= 0 && t.prefill_ms > 0 && t.ttft_ms >= t.prefill_ms);
    cr_assert(t.decode_ms > 0 && t.total_ms >= t.ttft_ms + t.decode_ms - 1e-9);
    cr_assert(t.itl_mean_ms > 0 && t.itl_p50_ms <= t.itl_p90_ms && t.itl_p90_ms <= t.itl_p99_ms);
    cr_assert_float_eq(t.decode_tok_s, (n - 1) * 1000.0 / t.decode_ms, 1e-6);
    cr_assert_float_eq(t.itl_mean_ms, t.decode_ms / (n - 1), 1e-9);
    cr_assert_float_eq(t.prefill_tok_s, np * 1000.0 / t.prefill_ms, 1e-6);
    cn_gen_free(g);
    free(prompt);
    gt_close(&e);
}

Test(generate, same_seed_same_tokens) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    int32_t toks[3][48];
    int counts[3];
    const uint64_t seeds[3] = {1234, 1234, 99};
    for (int k = 0; k < 3; k++) {
        cn_gen_params p = cn_gen_default_params();
        p.sampling.temperature = 1.0f;
        p.sampling.top_p = 0.95f;
        p.sampling.seed = seeds[k];
        p.sampling.ignore_eos = true;
        p.max_tokens = 48;
        cn_gen *g = run(&e, &p, prompt, np);
        int32_t n;
        const int32_t *got = cn_gen_tokens(g, &n);
        cr_assert_eq(n, 48);
        memcpy(toks[k], got, sizeof toks[k]);
        counts[k] = n;
        cn_gen_free(g);
    }
    cr_assert_arr_eq(toks[0], toks[1], sizeof toks[0], "the same seed gave different tokens");
    cr_assert(memcmp(toks[0], toks[2], sizeof toks[0]) != 0, "seeds 1234 and 99 gave the same 48 tokens");
    (void)counts;
    free(prompt);
    gt_close(&e);
}

/* stories260K's greedy continuation of "Once upon a time" is ", there was a little girl
 * named Lily. She ..." (see temp0_equals_greedy). "girl" spans ' g' 'ir' 'l', and
 * "Lily. She" spans ' Lily' '.' ' She'. */
Test(generate, stop_strings_on_the_real_model) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    const char *cases[][2] = {{"girl", ", there was a little "},
                              {"Lily. She", ", there was a little girl named "},
                              {"y. S", ", there was a little girl named Lil"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gt_rec r;
        gt_rec_init(&r);
        cn_gen_params p = greedy_params();
        const char *stops[] = {"never appears", cases[c][0]};
        p.stop = stops;
        p.n_stop = 2;
        gt_rec_attach(&r, &p);
        cn_gen *g = run(&e, &p, prompt, np);
        cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_STOP, "stop '%s'", cases[c][0]);
        cr_assert_eq(cn_gen_stop_index(g), 1);
        cr_assert_str_eq(cn_gen_text(g, NULL), cases[c][1]);
        cr_assert_str_eq(r.text, cases[c][1]);
        cr_assert(r.all_valid);
        cn_gen_free(g);
    }
    free(prompt);
    gt_close(&e);
}

/* A +30 bias on EOS makes it the greedy choice at every step. */
Test(generate, ignore_eos_on_the_real_model) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    cn_logit_bias b = {EOS, 30.0f};
    for (int ignore = 0; ignore < 2; ignore++) {
        cn_gen_params p = greedy_params();
        p.sampling.logit_bias = &b;
        p.sampling.n_logit_bias = 1;
        p.sampling.ignore_eos = ignore;
        p.max_tokens = 20;
        cn_gen *g = run(&e, &p, prompt, np);
        int32_t n;
        const int32_t *t = cn_gen_tokens(g, &n);
        if (ignore) {
            cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_LENGTH);
            cr_assert_eq(n, 20);
            for (int i = 0; i < n; i++) cr_assert(!cn_tokenizer_is_eog(e.tok, t[i]));
        } else {
            cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_STOP);
            cr_assert_eq(n, 0);
        }
        cn_gen_free(g);
    }
    free(prompt);
    gt_close(&e);
}

/* Context 16, prompt 5: positions 5..15 take 11 tokens, and the 11th is never fed. */
Test(generate, context_full_is_length) {
    gt_env e;
    gt_open_stories(&e, 16, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    cr_assert_eq(np, 5);
    cn_gen_params p = greedy_params();
    p.sampling.ignore_eos = true;
    p.max_tokens = 100;
    cn_gen *g = run(&e, &p, prompt, np);
    cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_LENGTH);
    cr_assert_eq(cn_gen_n_generated(g), 11, "%d", cn_gen_n_generated(g));
    cr_assert_eq(cn_kv_seq_len(e.kv, 0), 15);
    cn_gen_free(g);
    free(prompt);
    gt_close(&e);
}

static void expect_run_error(gt_env *e, const int32_t *prompt, int n, cn_status want, const char *needle) {
    cn_gen_params p = greedy_params();
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, &p, &g, &err), CN_STATUS_OK);
    cr_assert_eq(cn_generate(&e->run, 0, prompt, n, 0, g, &err), want, "%s", err.msg);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    cr_assert(!cn_gen_done(g));
    cn_gen_free(g);
}

Test(generate, prompt_too_long_or_empty) {
    gt_env e;
    gt_open_stories(&e, 16, 64, 1);
    int32_t *big = malloc(100000 * sizeof *big);
    for (int i = 0; i < 100000; i++) big[i] = 300 + i % 100;
    expect_run_error(&e, big, 16, CN_STATUS_LIMIT, "the prompt is 16 tokens and the context holds 16");
    expect_run_error(&e, big, 100000, CN_STATUS_LIMIT, "no room to generate");
    expect_run_error(&e, big, 0, CN_STATUS_INVALID_ARG, "empty");
    free(big);
    gt_close(&e);
}

/* The prompt prefilled in chunks of 3 rows gives the same tokens as in one batch; a
 * prompt that extends what the cache holds (n_reuse) gives the same tokens as a fresh
 * run over the whole prompt. */
Test(generate, chunked_prefill_and_reused_prefix) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time, there was a big dog", true, &np);
    cn_gen_params p = greedy_params();
    p.max_tokens = 24;
    cn_gen *g1 = run(&e, &p, prompt, np);
    int32_t n1;
    const int32_t *t1 = cn_gen_tokens(g1, &n1);
    e.run.n_batch = 3;
    cn_gen *g2 = run(&e, &p, prompt, np);
    int32_t n2;
    const int32_t *t2 = cn_gen_tokens(g2, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_arr_eq(t1, t2, (size_t)n1 * sizeof *t1);
    e.run.n_batch = 64;

    /* the cache holds prompt + t2[0 .. n2-1); continue from prompt + t2[0..6) */
    int32_t *ext = malloc((size_t)(np + 6) * sizeof *ext);
    memcpy(ext, prompt, (size_t)np * sizeof *ext);
    memcpy(ext + np, t2, 6 * sizeof *ext);
    cn_gen *g3 = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &g3, &err), CN_STATUS_OK);
    cr_assert_eq(cn_generate(&e.run, 0, ext, np + 6, np + 6, g3, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gen_timings t;
    cn_gen_get_timings(g3, &t);
    cr_assert_eq(t.n_cached_tokens, np + 5, "the last prompt token is always prefilled");
    cn_gen *g4 = run(&e, &p, ext, np + 6);
    int32_t n3, n4;
    const int32_t *t3 = cn_gen_tokens(g3, &n3), *t4 = cn_gen_tokens(g4, &n4);
    cr_assert_eq(n3, n4);
    cr_assert_arr_eq(t3, t4, (size_t)n3 * sizeof *t3);
    cr_assert_arr_eq(t3, t1 + 6, (size_t)(n1 - 6) * sizeof *t3, "greedy continues the same text");

    /* n_reuse beyond what the sequence holds is refused */
    cn_kv_seq_free(e.kv, 0);
    cn_gen *g5 = NULL;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &g5, &err), CN_STATUS_OK);
    cr_assert_eq(cn_generate(&e.run, 0, ext, np + 6, 3, g5, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "n_reuse"), "%s", err.msg);
    cn_gen_free(g5);
    cn_gen_free(g1);
    cn_gen_free(g2);
    cn_gen_free(g3);
    cn_gen_free(g4);
    free(ext);
    free(prompt);
    gt_close(&e);
}

Test(generate, cancel_on_the_real_model) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    for (int after = 0; after < 5; after += 4) {
        gt_rec r;
        gt_rec_init(&r);
        r.cancel_after = after;
        cn_gen_params p = greedy_params();
        gt_rec_attach(&r, &p);
        cn_gen *g = run(&e, &p, prompt, np);
        cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_CANCELLED);
        cr_assert_eq(cn_gen_n_generated(g), after);
        cr_assert_str_eq(r.text, cn_gen_text(g, NULL));
        cn_gen_free(g);
    }
    free(prompt);
    gt_close(&e);
}
