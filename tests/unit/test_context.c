/* test_context.c — the public context API (src/gen/context.c) on stories260K, through
 * cinder.h alone: prefix reuse between requests, the low tier (cn_context_decode, logits
 * rows, sequence operations) and how it hands sequence 0 back to generate, parameter
 * errors naming their field, beam search followed by a plain request, cn_context_logits.
 *
 * Truth is llama.cpp's, from tests/golden/stories260k.json (tools/reference/make_golden.py
 * with llama-cpp-python): the prompt's token ids, the top-20 logits at the last prompt
 * position and the 64 greedy tokens after it. Where no golden says the answer (a prompt
 * decoded in chunks, a copied sequence, a cached prefix), two paths of cinder are held to
 * each other bit for bit: the engine is batch-invariant (DESIGN.md), so the same token at
 * the same position over the same cache gives the same logits row whichever batch it rode
 * in. The logits bound 2e-2 is test_golden.c's for this model (measured there: 1.8e-3). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"

#define N_CTX 256
#define NV 512 /* stories260K's vocabulary */
#define LOGIT_BOUND 2e-2f

/* One case of the golden file. */
typedef struct {
    int32_t tokens[128]; /* the prompt, BOS first */
    int32_t n_tokens;
    int32_t greedy[64]; /* llama.cpp's greedy continuation */
    int32_t n_greedy;
    int32_t top_id[20]; /* its top-20 at the last prompt position */
    float top_logit[20];
    int32_t n_top;
    char prompt[256];
} golden_case;

static cn_model *model;
static golden_case g0; /* "Once upon a time" */

static int32_t read_ids(json_t *arr, int32_t *out, int32_t cap) {
    cr_assert(json_is_array(arr));
    const int32_t n = (int32_t)json_array_size(arr);
    cr_assert_leq(n, cap);
    for (int32_t i = 0; i < n; i++) out[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return n;
}

static void load_case(json_t *root, size_t i, golden_case *gc) {
    json_t *c = json_array_get(json_object_get(root, "cases"), i);
    cr_assert(c, "golden: no case %zu", i);
    snprintf(gc->prompt, sizeof gc->prompt, "%s", json_string_value(json_object_get(c, "prompt")));
    gc->n_tokens = read_ids(json_object_get(c, "tokens"), gc->tokens, 128);
    gc->n_greedy = read_ids(json_object_get(c, "greedy"), gc->greedy, 64);
    json_t *pt = json_object_get(c, "prompt_top");
    json_t *last = json_array_get(pt, json_array_size(pt) - 1);
    gc->n_top = (int32_t)json_array_size(last);
    cr_assert(gc->n_top > 0 && gc->n_top <= 20);
    for (int32_t k = 0; k < gc->n_top; k++) {
        json_t *pair = json_array_get(last, (size_t)k);
        gc->top_id[k] = (int32_t)json_integer_value(json_array_get(pair, 0));
        gc->top_logit[k] = (float)json_number_value(json_array_get(pair, 1));
    }
}

static void setup(void) {
    const char *d = getenv("CINDER_TESTDATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", d && *d ? d : "../shared/testdata");
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &model, &err), CN_STATUS_OK, "%s", err.msg);
    const char *gd = getenv("CINDER_GOLDEN");
    snprintf(path, sizeof path, "%s/stories260k.json", gd && *gd ? gd : "tests/golden");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    cr_assert(root, "%s: %s", path, jerr.text);
    load_case(root, 0, &g0);
    json_decref(root);
    cr_assert_eq(g0.n_greedy, 64);
}

static void teardown(void) { cn_model_free(model); }

TestSuite(context, .init = setup, .fini = teardown, .timeout = 120);

static cn_context *open_ctx(int32_t n_seq_max, int32_t n_batch) {
    cn_context_params p = cn_context_default_params();
    p.n_threads = 1;
    p.n_ctx = N_CTX;
    p.n_seq_max = n_seq_max;
    p.n_batch = n_batch;
    cn_context *c = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_context_create(model, &p, &c, &err), CN_STATUS_OK, "%s", err.msg);
    return c;
}

static cn_gen_params greedy(int32_t max_tokens) {
    cn_gen_params gp = cn_gen_default_params();
    gp.max_tokens = max_tokens;
    gp.sampling.temperature = 0;
    return gp;
}

/* Generates greedily from the token prompt; returns the result (caller frees). */
static cn_result gen_tokens(cn_context *c, const int32_t *ids, int32_t n, int32_t max_tokens) {
    cn_prompt pr = {.tokens = ids, .n_tokens = n};
    cn_gen_params gp = greedy(max_tokens);
    cn_result r;
    cn_error err = {0};
    cr_assert_eq(cn_context_generate(c, &pr, &gp, &r, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(r.n_tokens, max_tokens);
    return r;
}

/* r's tokens are want[0..n), the first difference reported. */
static void expect_tokens(const cn_result *r, const int32_t *want, int32_t n, const char *what) {
    cr_assert_eq(r->n_tokens, n, "%s: %d tokens, want %d", what, r->n_tokens, n);
    for (int32_t i = 0; i < n; i++)
        cr_assert_eq(r->tokens[i].id, want[i], "%s: token %d is %d, llama.cpp's %d", what, i, r->tokens[i].id, want[i]);
}

static int32_t argmax(const float *row, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* The row after g0's prompt against llama.cpp's top-20 there, and its greedy choice. */
static void expect_golden_prompt_row(const float *row, const char *what) {
    for (int32_t k = 0; k < g0.n_top; k++)
        cr_assert_leq(fabsf(row[g0.top_id[k]] - g0.top_logit[k]), LOGIT_BOUND, "%s: logit of %d is %g, llama.cpp's %g",
                      what, g0.top_id[k], (double)row[g0.top_id[k]], (double)g0.top_logit[k]);
    cr_assert_eq(argmax(row, NV), g0.greedy[0], "%s: argmax", what);
}

/* Decodes ids[from..to) at their positions on seq, logits for every row when all, else the
 * last only. */
static void decode_range(cn_context *c, const int32_t *ids, int32_t from, int32_t to, int32_t seq, bool all) {
    cn_batch b = {0};
    cn_error err = {0};
    cr_assert_eq(cn_batch_init(&b, to - from, &err), CN_STATUS_OK, "%s", err.msg);
    for (int32_t i = from; i < to; i++) cr_assert(cn_batch_add(&b, ids[i], i, seq, all || i == to - 1));
    cr_assert_eq(cn_context_decode(c, &b, &err), CN_STATUS_OK, "%s", err.msg);
    cn_batch_free(&b);
}

static bool rows_equal(const float *a, const float *b, int32_t n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

Test(context, greedy_matches_llama_cpp) {
    cn_context *c = open_ctx(1, 512);
    cn_prompt pr = {.text = g0.prompt};
    cn_gen_params gp = greedy(64);
    cn_result r;
    cn_error err = {0};
    cr_assert_eq(cn_context_generate(c, &pr, &gp, &r, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(r.n_prompt_tokens, g0.n_tokens);
    cr_assert_eq(r.timings.n_cached_tokens, 0, "a fresh context has nothing cached");
    expect_tokens(&r, g0.greedy, 64, "fresh");
    cr_assert_eq(r.finish_reason, CN_FINISH_LENGTH);
    cn_result_free(&r);
    cn_context_free(c);
}

/* The second request continues the first one's text: everything but its last token
 * comes from the cache, and greedy goes on as llama.cpp's did; a fresh context given the
 * same prompt prefills it all and says the same. */
Test(context, prefix_reuse_across_requests) {
    cn_context *c = open_ctx(1, 512);
    cn_result r = gen_tokens(c, g0.tokens, g0.n_tokens, 32);
    expect_tokens(&r, g0.greedy, 32, "first request");
    cn_result_free(&r);

    int32_t ext[128];
    const int32_t k = 20, n = g0.n_tokens + k;
    memcpy(ext, g0.tokens, (size_t)g0.n_tokens * sizeof *ext);
    memcpy(ext + g0.n_tokens, g0.greedy, (size_t)k * sizeof *ext);
    r = gen_tokens(c, ext, n, 64 - k);
    cr_assert_eq(r.timings.n_cached_tokens, n - 1, "cached %d of %d: the last prompt token is always run",
                 r.timings.n_cached_tokens, n);
    expect_tokens(&r, g0.greedy + k, 64 - k, "continued from the cache");
    cn_result_free(&r);

    cn_context *fresh = open_ctx(1, 512);
    r = gen_tokens(fresh, ext, n, 64 - k);
    cr_assert_eq(r.timings.n_cached_tokens, 0);
    expect_tokens(&r, g0.greedy + k, 64 - k, "fresh context");
    cn_result_free(&r);
    cn_context_free(fresh);

    /* a prompt that leaves the cached text part way: only the shared prefix is reused */
    int32_t fork[128];
    memcpy(fork, ext, 10 * sizeof *fork);
    fork[10] = ext[10] == 300 ? 301 : 300;
    r = gen_tokens(c, fork, 11, 4);
    cr_assert_eq(r.timings.n_cached_tokens, 10);
    cn_context *fresh2 = open_ctx(1, 512);
    cn_result rf = gen_tokens(fresh2, fork, 11, 4);
    for (int32_t i = 0; i < 4; i++) cr_assert_eq(r.tokens[i].id, rf.tokens[i].id, "token %d", i);
    cn_result_free(&r);
    cn_result_free(&rf);
    cn_context_free(fresh2);
    cn_context_free(c);
}

/* A prompt decoded in chunks of 3 rows gives, row for row, the logits of the same prompt
 * decoded as one batch; the last row is llama.cpp's. */
Test(context, decode_in_chunks_is_bit_identical) {
    int32_t ids[128];
    const int32_t n = g0.n_tokens + 16;
    memcpy(ids, g0.tokens, (size_t)g0.n_tokens * sizeof *ids);
    memcpy(ids + g0.n_tokens, g0.greedy, 16 * sizeof *ids);

    cn_context *c = open_ctx(1, 512);
    cr_assert_eq(cn_context_n_vocab(c), NV);
    decode_range(c, ids, 0, n, 0, true);
    cr_assert_eq(cn_context_seq_len(c, 0), n);
    float *one = malloc((size_t)n * NV * sizeof *one);
    for (int32_t i = 0; i < n; i++) {
        const float *row = cn_context_logits_row(c, i);
        cr_assert_not_null(row);
        memcpy(one + (size_t)i * NV, row, NV * sizeof *row);
    }
    cr_assert_null(cn_context_logits_row(c, n));
    cr_assert_null(cn_context_logits_row(c, -1));
    expect_golden_prompt_row(one + (size_t)(g0.n_tokens - 1) * NV, "one batch");
    /* each greedy token's row predicts the next one of llama.cpp's */
    for (int32_t j = 0; j < 16; j++)
        cr_assert_eq(argmax(one + (size_t)(g0.n_tokens + j) * NV, NV), g0.greedy[j + 1], "after greedy token %d", j);

    cn_error err = {0};
    cr_assert_eq(cn_context_seq_rm(c, 0, 0, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_context_seq_len(c, 0), 0);
    for (int32_t at = 0; at < n; at += 3) {
        const int32_t to = at + 3 < n ? at + 3 : n;
        decode_range(c, ids, at, to, 0, true);
        for (int32_t i = at; i < to; i++)
            cr_assert(rows_equal(cn_context_logits_row(c, i - at), one + (size_t)i * NV, NV),
                      "row %d differs between one batch and chunks of 3", i);
    }
    cr_assert_eq(cn_context_seq_len(c, 0), n);

    /* one at a time, on a context of its own with a batch of 1 row */
    cn_context *c1 = open_ctx(1, 1);
    for (int32_t i = 0; i < n; i++) {
        decode_range(c1, ids, i, i + 1, 0, true);
        cr_assert(rows_equal(cn_context_logits_row(c1, 0), one + (size_t)i * NV, NV), "row %d one at a time", i);
    }
    cn_context_free(c1);
    free(one);
    cn_context_free(c);
}

/* seq_cp shares a prefix, seq_rm cuts, seq_keep empties the rest; decode refuses a bad
 * row and leaves the cache as it was. */
Test(context, sequence_operations) {
    const int32_t n = g0.n_tokens;
    cn_context *c = open_ctx(4, 512);
    cn_error err = {0};
    decode_range(c, g0.tokens, 0, n, 0, true);
    float last[NV];
    memcpy(last, cn_context_logits_row(c, n - 1), sizeof last);
    expect_golden_prompt_row(last, "seq 0");

    cr_assert_eq(cn_context_seq_cp(c, 0, 1, -1, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_context_seq_cp(c, 0, 2, 3, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_context_seq_len(c, 1), n);
    cr_assert_eq(cn_context_seq_len(c, 2), 3);
    cr_assert_eq(cn_context_seq_len(c, 3), 0);
    cr_assert_eq(cn_context_seq_len(c, 99), 0);
    cr_assert_eq(cn_context_seq_len(c, -1), 0);

    /* llama.cpp's first greedy token on seq 0 and seq 1 in one batch: both rows predict
     * its second, bit for bit alike; seq 2 recomputes the prompt past position 3 and its
     * last row is the one-batch row of seq 0 */
    cn_batch b = {0};
    cr_assert_eq(cn_batch_init(&b, 16, &err), CN_STATUS_OK);
    cr_assert(cn_batch_add(&b, g0.greedy[0], n, 0, true));
    cr_assert(cn_batch_add(&b, g0.greedy[0], n, 1, true));
    for (int32_t i = 3; i < n; i++) cr_assert(cn_batch_add(&b, g0.tokens[i], i, 2, i == n - 1));
    cr_assert_eq(cn_batch_n_logits(&b), 3);
    cr_assert_eq(cn_context_decode(c, &b, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(argmax(cn_context_logits_row(c, 0), NV), g0.greedy[1]);
    cr_assert(rows_equal(cn_context_logits_row(c, 0), cn_context_logits_row(c, 1), NV), "seq 0 and its copy differ");
    cr_assert(rows_equal(cn_context_logits_row(c, 2), last, NV), "seq 2 over the shared 3 positions differs");
    cr_assert_eq(cn_context_seq_len(c, 0), n + 1);
    cr_assert_eq(cn_context_seq_len(c, 1), n + 1);
    cr_assert_eq(cn_context_seq_len(c, 2), n);

    /* decode errors: the cache and the last rows unchanged */
    float before_row[NV];
    memcpy(before_row, cn_context_logits_row(c, 0), sizeof before_row);
    struct {
        int32_t token, pos, seq;
        cn_status want;
    } bad[] = {
        {g0.greedy[1], n + 3, 0, CN_STATUS_INVALID_ARG}, /* a gap */
        {g0.greedy[1], n + 1, 4, CN_STATUS_INVALID_ARG}, /* seq outside [0, n_seq_max) */
        {g0.greedy[1], -1, 0, CN_STATUS_INVALID_ARG},    /* negative position */
        {NV, n + 1, 0, CN_STATUS_INVALID_ARG},           /* token outside the vocabulary */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cn_batch_clear(&b);
        cr_assert(cn_batch_add(&b, bad[k].token, bad[k].pos, bad[k].seq, true));
        err = (cn_error){0};
        const cn_status st = cn_context_decode(c, &b, &err);
        cr_assert_eq(st, bad[k].want, "case %zu: %d %s", k, st, err.msg);
        cr_assert(err.msg[0], "case %zu: no message", k);
        cr_assert_eq(cn_context_seq_len(c, 0), n + 1, "case %zu changed seq 0", k);
        cr_assert_eq(cn_context_seq_len(c, 3), 0, "case %zu changed seq 3", k);
    }
    /* two rows for one position */
    cn_batch_clear(&b);
    cr_assert(cn_batch_add(&b, g0.greedy[1], n + 1, 0, false));
    cr_assert(cn_batch_add(&b, g0.greedy[1], n + 1, 0, true));
    cr_assert_eq(cn_context_decode(c, &b, &err), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_context_seq_len(c, 0), n + 1);

    /* seq_rm: past the end changes nothing, a cut keeps [0, p0), 0 empties */
    cr_assert_eq(cn_context_seq_rm(c, 1, 100, &err), CN_STATUS_OK);
    cr_assert_eq(cn_context_seq_len(c, 1), n + 1);
    cr_assert_eq(cn_context_seq_rm(c, 1, 2, &err), CN_STATUS_OK);
    cr_assert_eq(cn_context_seq_len(c, 1), 2);
    cr_assert_eq(cn_context_seq_rm(c, 1, 0, &err), CN_STATUS_OK);
    cr_assert_eq(cn_context_seq_len(c, 1), 0);
    cr_assert_eq(cn_context_seq_len(c, 0), n + 1, "seq 0 kept what it shared with seq 1");
    err = (cn_error){0};
    cr_assert_eq(cn_context_seq_rm(c, 4, 0, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "seq");
    err = (cn_error){0};
    cr_assert_eq(cn_context_seq_rm(c, 0, -1, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "p0");
    err = (cn_error){0};
    cr_assert_eq(cn_context_seq_cp(c, 0, 0, -1, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "seq");
    err = (cn_error){0};
    cr_assert_eq(cn_context_seq_cp(c, 0, 1, n + 2, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "n");

    /* a cut then a rewrite of the cut position: the row of the first decode again */
    cr_assert_eq(cn_context_seq_rm(c, 0, n, &err), CN_STATUS_OK);
    cn_batch_clear(&b);
    cr_assert(cn_batch_add(&b, g0.greedy[0], n, 0, true));
    cr_assert_eq(cn_context_decode(c, &b, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(rows_equal(cn_context_logits_row(c, 0), before_row, NV), "redone position %d differs", n);

    /* seq_keep: only seq 2 is left */
    cr_assert_eq(cn_context_seq_cp(c, 0, 3, -1, &err), CN_STATUS_OK);
    cn_context_seq_keep(c, 2);
    cr_assert_eq(cn_context_seq_len(c, 0), 0);
    cr_assert_eq(cn_context_seq_len(c, 1), 0);
    cr_assert_eq(cn_context_seq_len(c, 2), n);
    cr_assert_eq(cn_context_seq_len(c, 3), 0);
    cn_batch_free(&b);
    cn_context_free(c);

    /* a position at n_ctx: LIMIT, and the sequence keeps what it had */
    cn_context_params p = cn_context_default_params();
    p.n_threads = 1;
    p.n_ctx = n;
    cr_assert_eq(cn_context_create(model, &p, &c, &err), CN_STATUS_OK, "%s", err.msg);
    decode_range(c, g0.tokens, 0, n, 0, false);
    cr_assert_eq(cn_batch_init(&b, 1, &err), CN_STATUS_OK);
    cr_assert(cn_batch_add(&b, g0.greedy[0], n, 0, true));
    cr_assert_eq(cn_context_decode(c, &b, &err), CN_STATUS_LIMIT, "%s", err.msg);
    cr_assert_eq(cn_context_seq_len(c, 0), n);
    cn_batch_free(&b);
    cn_context_free(c);
}

/* A decode on sequence 0 makes generate forget what it cached: the next request
 * prefills its whole prompt and still gives llama.cpp's tokens. */
Test(context, generate_after_decode_prefills_again) {
    cn_context *c = open_ctx(2, 512);
    cn_result r = gen_tokens(c, g0.tokens, g0.n_tokens, 16);
    expect_tokens(&r, g0.greedy, 16, "before decode");
    cn_result_free(&r);

    /* the same prompt's first tokens again through the low tier, then other tokens past
     * them: sequence 0 no longer holds what the request left */
    int32_t other[8] = {1, 300, 301, 302, 303, 304, 305, 306};
    cn_error err = {0};
    cr_assert_eq(cn_context_seq_rm(c, 0, 2, &err), CN_STATUS_OK);
    decode_range(c, other, 2, 8, 0, false);
    r = gen_tokens(c, g0.tokens, g0.n_tokens, 64);
    cr_assert_eq(r.timings.n_cached_tokens, 0, "cached %d after a decode", r.timings.n_cached_tokens);
    expect_tokens(&r, g0.greedy, 64, "after decode");
    cn_result_free(&r);

    /* and a copy into sequence 0 does the same */
    decode_range(c, other, 0, 8, 1, false);
    cr_assert_eq(cn_context_seq_cp(c, 1, 0, -1, &err), CN_STATUS_OK, "%s", err.msg);
    r = gen_tokens(c, g0.tokens, g0.n_tokens, 64);
    cr_assert_eq(r.timings.n_cached_tokens, 0);
    expect_tokens(&r, g0.greedy, 64, "after seq_cp into 0");
    cn_result_free(&r);

    /* a cut of sequence 0 keeps the cached prefix below it */
    cr_assert_eq(cn_context_seq_rm(c, 0, 3, &err), CN_STATUS_OK);
    r = gen_tokens(c, g0.tokens, g0.n_tokens, 8);
    cr_assert_eq(r.timings.n_cached_tokens, 3);
    expect_tokens(&r, g0.greedy, 8, "after seq_rm of 0");
    cn_result_free(&r);
    cn_context_free(c);
}

/* Every refusal names its field in err.param, and nothing is made. */
Test(context, bad_params_name_the_field) {
    static const char *const field[] = {"n_seq_max", "n_batch", "kv_type", "n_threads", "n_ctx"};
    for (size_t k = 0; k < sizeof field / sizeof field[0]; k++) {
        cn_context_params p = cn_context_default_params();
        switch (k) {
        case 0: p.n_seq_max = 0; break;
        case 1: p.n_batch = 0; break;
        case 2: p.kv_type = CN_TYPE_Q4_0; break;
        case 3: p.n_threads = -1; break;
        case 4: p.n_ctx = -1; break;
        }
        cn_context *c = NULL;
        cn_error err = {0};
        cr_assert_eq(cn_context_create(model, &p, &c, &err), CN_STATUS_INVALID_ARG, "%s", field[k]);
        cr_assert_null(c, "%s", field[k]);
        cr_assert_str_eq(err.param, field[k], "%s: param '%s' (%s)", field[k], err.param, err.msg);
        cr_assert(strstr(err.msg, field[k]), "%s: %s", field[k], err.msg);
    }
    cn_context_params p = cn_context_default_params();
    p.n_seq_max = 65;
    cn_context *c = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_context_create(model, &p, &c, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "n_seq_max");
    p = cn_context_default_params();
    p.n_batch = 8193;
    cr_assert_eq(cn_context_create(model, &p, &c, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "n_batch");
    cr_assert_eq(cn_context_create(NULL, NULL, &c, &err), CN_STATUS_INVALID_ARG);
    cr_assert_null(c);
    cn_context_free(NULL);

    /* a request's bad field is named the same way, and the context goes on */
    c = open_ctx(1, 512);
    cn_gen_params gp = greedy(8);
    gp.sampling.top_p = 7;
    cn_prompt pr = {.tokens = g0.tokens, .n_tokens = g0.n_tokens};
    cn_result r;
    err = (cn_error){0};
    cr_assert_eq(cn_context_generate(c, &pr, &gp, &r, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "top_p", "%s", err.msg);
    gp = greedy(0);
    err = (cn_error){0};
    cr_assert_eq(cn_context_generate(c, &pr, &gp, &r, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "max_tokens", "%s", err.msg);
    r = gen_tokens(c, g0.tokens, g0.n_tokens, 8);
    expect_tokens(&r, g0.greedy, 8, "after refused requests");
    cn_result_free(&r);
    cn_context_free(c);
}

/* Beam search rebuilds the cache with a sequence per beam and leaves it empty; the plain
 * request after it prefills again and gives llama.cpp's tokens. */
Test(context, beam_search_then_a_plain_request) {
    cn_context *c = open_ctx(1, 512);
    cn_result r = gen_tokens(c, g0.tokens, g0.n_tokens, 8);
    cn_result_free(&r);

    cn_gen_params gp = greedy(16);
    gp.beam.n_beams = 4;
    gp.sampling.n_logprobs = 0; /* raw log-probabilities, which beam search scores */
    cn_prompt pr = {.tokens = g0.tokens, .n_tokens = g0.n_tokens};
    cn_error err = {0};
    cr_assert_eq(cn_context_generate(c, &pr, &gp, &r, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(r.n_tokens > 0 && r.n_tokens <= 16);
    cr_assert_lt(r.beam_score, 0.0);
    /* the best sequence's score is what its tokens' log-probabilities say (length
     * penalty 1: their mean) */
    double sum = 0;
    for (int32_t i = 0; i < r.n_tokens; i++) {
        cr_assert(r.tokens[i].has_logprob);
        sum += r.tokens[i].logprob;
    }
    cr_assert(fabs(sum / r.n_tokens - r.beam_score) < 1e-4, "score %g, mean logprob %g", r.beam_score,
              sum / r.n_tokens);
    cn_result beam = r;
    for (int32_t s = 0; s < 4; s++) cr_assert_eq(cn_context_seq_len(c, s), 0, "seq %d after beam search", s);

    /* the same beam search on a fresh context: the same sequence */
    cn_context *fresh = open_ctx(1, 512);
    cr_assert_eq(cn_context_generate(fresh, &pr, &gp, &r, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(r.n_tokens, beam.n_tokens);
    for (int32_t i = 0; i < r.n_tokens; i++) cr_assert_eq(r.tokens[i].id, beam.tokens[i].id, "beam token %d", i);
    cr_assert_eq(r.beam_score, beam.beam_score);
    cn_result_free(&r);
    cn_context_free(fresh);
    cn_result_free(&beam);

    r = gen_tokens(c, g0.tokens, g0.n_tokens, 64);
    cr_assert_eq(r.timings.n_cached_tokens, 0);
    expect_tokens(&r, g0.greedy, 64, "after beam search");
    cn_result_free(&r);
    /* and the cache works as before: the next request reuses it */
    r = gen_tokens(c, g0.tokens, g0.n_tokens, 4);
    cr_assert_eq(r.timings.n_cached_tokens, g0.n_tokens - 1);
    expect_tokens(&r, g0.greedy, 4, "cached after beam search");
    cn_result_free(&r);
    cn_context_free(c);
}

/* cn_context_logits: llama.cpp's row after the prompt, the same row decode gives, again
 * from the cache, and a generate after it reuses what it left. */
Test(context, logits) {
    cn_context *c = open_ctx(1, 512);
    float *row = malloc(NV * sizeof *row), *again = malloc(NV * sizeof *again);
    cn_prompt pr = {.text = g0.prompt};
    cn_error err = {0};
    cr_assert_eq(cn_context_logits(c, &pr, row, &err), CN_STATUS_OK, "%s", err.msg);
    expect_golden_prompt_row(row, "cn_context_logits");

    cn_context *d = open_ctx(1, 512);
    decode_range(d, g0.tokens, 0, g0.n_tokens, 0, false);
    cr_assert(rows_equal(cn_context_logits_row(d, 0), row, NV), "logits and decode differ");
    cn_context_free(d);

    pr = (cn_prompt){.tokens = g0.tokens, .n_tokens = g0.n_tokens};
    cr_assert_eq(cn_context_logits(c, &pr, again, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(rows_equal(row, again, NV), "the cached prompt's row differs");

    int32_t ext[128];
    memcpy(ext, g0.tokens, (size_t)g0.n_tokens * sizeof *ext);
    ext[g0.n_tokens] = g0.greedy[0];
    pr.tokens = ext;
    pr.n_tokens = g0.n_tokens + 1;
    cr_assert_eq(cn_context_logits(c, &pr, again, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(argmax(again, NV), g0.greedy[1]);

    cn_result r = gen_tokens(c, g0.tokens, g0.n_tokens, 16);
    cr_assert_eq(r.timings.n_cached_tokens, g0.n_tokens - 1, "cached %d", r.timings.n_cached_tokens);
    expect_tokens(&r, g0.greedy, 16, "generate after logits");
    cn_result_free(&r);

    /* errors: no prompt, a token outside the vocabulary, a prompt past n_ctx */
    pr = (cn_prompt){0};
    cr_assert_eq(cn_context_logits(c, &pr, row, &err), CN_STATUS_INVALID_ARG);
    const int32_t bad = NV;
    pr = (cn_prompt){.tokens = &bad, .n_tokens = 1};
    cr_assert_eq(cn_context_logits(c, &pr, row, &err), CN_STATUS_INVALID_ARG);
    int32_t *big = calloc(N_CTX + 1, sizeof *big);
    for (int32_t i = 0; i <= N_CTX; i++) big[i] = g0.tokens[i % g0.n_tokens];
    pr = (cn_prompt){.tokens = big, .n_tokens = N_CTX + 1};
    cr_assert_eq(cn_context_logits(c, &pr, row, &err), CN_STATUS_LIMIT);
    free(big);
    free(row);
    free(again);
    cn_context_free(c);
}

/* The per-step profile counts each step once per layer and pass, under the weights'
 * formats and shapes, with the bytes `cinder inspect` lists for stories260K's tensors
 * (all f32: attn_q 16384, attn_k and attn_v 8192, attn_output 16384, ffn_gate/up/down
 * 44032 each, output 131072) and the f16 cache's K and V rows attention reads. */
static const cn_profile_op *find_op(const cn_profile_op *ops, int32_t n, const char *name) {
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(ops[i].op, name)) return &ops[i];
    cr_assert_fail("no op '%s' in the profile (%d ops)", name, n);
    return NULL;
}

Test(context, profile_counts_steps_and_bytes) {
    cn_context *c = open_ctx(1, 8);
    cn_profile_op ops[16];
    cr_assert_eq(cn_context_profile_read(c, ops, 16), 0, "nothing before profiling is turned on");
    cn_context_profile(c, true);
    for (int32_t i = 0; i < 4; i++) decode_range(c, g0.tokens, i, i + 1, 0, true);
    const int32_t n = cn_context_profile_read(c, ops, 16);
    cr_assert_eq(n, 8, "embed, qkv, rope, attention, wo, gate/up, down, head: %d", n);
    const int L = 5, P = 4; /* layers, passes */
    const struct {
        const char *name;
        uint64_t calls, bytes;
    } want[] = {
        {"attn_norm + q,k,v f32,f32,f32 64->128", L * P, L * P * (16384 + 8192 + 8192)},
        {"attn_output f32 64->64", L * P, L * P * 16384},
        {"ffn_norm + gate,up f32,f32 64->344", L * P, L * P * 2 * 44032},
        {"act + down f32 172->64", L * P, L * P * 44032},
        {"output_norm + head f32 64->512", P, P * 131072},
        {"q/k norm + rope", L * P, 0},
        /* positions 0..3: 1 + 2 + 3 + 4 rows of K and V, 32 f16 each, per layer */
        {"attention", L * P, L * (1 + 2 + 3 + 4) * 2 * 32 * 2},
        {"embed + rope angles", P, P * 64 * 4},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const cn_profile_op *o = find_op(ops, n, want[i].name);
        cr_assert_eq(o->calls, want[i].calls, "%s: %llu calls, want %llu", o->op, (unsigned long long)o->calls,
                     (unsigned long long)want[i].calls);
        cr_assert_eq(o->bytes, want[i].bytes, "%s: %llu bytes, want %llu", o->op, (unsigned long long)o->bytes,
                     (unsigned long long)want[i].bytes);
        cr_assert_geq(o->ms, 0.0);
    }
    /* off: counts kept, no longer growing; on again: cleared */
    cn_context_profile(c, false);
    decode_range(c, g0.tokens, 4, 6, 0, true);
    cr_assert_eq(cn_context_profile_read(c, ops, 16), 8);
    cr_assert_eq(find_op(ops, 8, "output_norm + head f32 64->512")->calls, (uint64_t)P);
    cn_context_profile(c, true);
    cr_assert_eq(cn_context_profile_read(c, ops, 16), 0);
    /* a 2-row batch: one pass, each weight read once */
    decode_range(c, g0.tokens, 6, 8, 0, false);
    cr_assert_eq(cn_context_profile_read(c, ops, 16), 8);
    cr_assert_eq(find_op(ops, 8, "act + down f32 172->64")->calls, (uint64_t)L);
    cr_assert_eq(find_op(ops, 8, "act + down f32 172->64")->bytes, (uint64_t)L * 44032);
    cr_assert_eq(cn_context_profile_read(c, NULL, 0), 8, "the count alone");
    cn_context_free(c);
}
