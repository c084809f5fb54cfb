/* test_beam.c — beam search (src/gen/beam.c).
 *
 * Hand-built bigram models: a llama-arch GGUF written here whose attention and FFN
 * weights are zero, so the residual stream is the token's embedding; embeddings are
 * one-hot and output.weight holds a chosen transition table, so the next-token logits
 * depend only on the current token: logits(next | cur) = L[cur][next] (up to the RMS-norm
 * epsilon). On such a model the best sequence is found here by exhaustive search, scoring
 * every sequence with log-softmax of cinder's own logits from a fresh forward pass of the
 * whole sequence (no KV sharing, no beams) — the truth beam search must match.
 *
 * stories260K: beams = 1 is greedy; 4 beams find a sequence at least as likely as greedy's;
 * every reported sum of log-probabilities equals a teacher-forced recomputation, which
 * would break if forked sequences shared or copied KV blocks wrongly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/beam.h"
#include "test_generate_util.h"

#define TINY_E 32 /* embedding width: one-hot in the first V dimensions */

typedef struct {
    gt_env e;
    uint8_t *blob;
} tiny_env;

static void add_f32(cn_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, const float *data) {
    int64_t ne[2] = {ne0, ne1};
    cn_error err = {0};
    cr_assert_eq(cn_gguf_writer_add_tensor(w, name, CN_TYPE_F32, ne1 == 1 ? 1 : 2, ne, data,
                                           (uint64_t)(ne0 * ne1) * sizeof(float), &err),
                 CN_STATUS_OK, "%s: %s", name, err.msg);
}

/* A bigram model over V tokens named names[] (0 <unk>, 1 <s>, 2 </s>, then words); L is
 * (V, V): L[cur * V + next]. */
static void tiny_open(tiny_env *t, int V, const char *const *names, const float *L, int n_ctx, int max_seqs) {
    cr_assert(V <= TINY_E);
    const int E = TINY_E;
    cn_gguf_writer *w = cn_gguf_writer_new();
    cn_gguf_writer_set_str(w, "general.architecture", "llama");
    cn_gguf_writer_set_u32(w, "llama.block_count", 1);
    cn_gguf_writer_set_u32(w, "llama.embedding_length", E);
    cn_gguf_writer_set_u32(w, "llama.feed_forward_length", E);
    cn_gguf_writer_set_u32(w, "llama.attention.head_count", 1);
    cn_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    cn_gguf_writer_set_u32(w, "llama.context_length", 64);
    cn_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    cn_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    int32_t types[TINY_E];
    float scores[TINY_E];
    for (int i = 0; i < V; i++) {
        types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
        scores[i] = (float)-i;
    }
    cn_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cn_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", names, (uint64_t)V);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CN_GGUF_INT32, types, (uint64_t)V);
    cn_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CN_GGUF_FLOAT32, scores, (uint64_t)V);

    float *embd = calloc((size_t)E * V, sizeof *embd), *out = calloc((size_t)E * V, sizeof *out);
    float *zeros = calloc((size_t)E * E, sizeof *zeros), *ones = malloc((size_t)E * sizeof *ones);
    float *onorm = malloc((size_t)E * sizeof *onorm);
    for (int i = 0; i < E; i++) ones[i] = 1.0f, onorm[i] = 1.0f / sqrtf((float)E);
    for (int i = 0; i < V; i++) embd[(size_t)i * E + i] = 1.0f;
    for (int cur = 0; cur < V; cur++)
        for (int nx = 0; nx < V; nx++) out[(size_t)nx * E + cur] = L[cur * V + nx];
    add_f32(w, "token_embd.weight", E, V, embd);
    add_f32(w, "output_norm.weight", E, 1, onorm);
    add_f32(w, "output.weight", E, V, out);
    add_f32(w, "blk.0.attn_norm.weight", E, 1, ones);
    add_f32(w, "blk.0.ffn_norm.weight", E, 1, ones);
    const char *mats[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.0.%s.weight", mats[i]);
        add_f32(w, name, E, E, zeros);
    }
    size_t n = 0;
    cn_error err = {0};
    cr_assert_eq(cn_gguf_writer_write_mem(w, &t->blob, &n, &err), CN_STATUS_OK, "%s", err.msg);
    cn_gguf_writer_free(w);
    free(embd), free(out), free(zeros), free(ones), free(onorm);
    cn_gguf *g = NULL;
    cr_assert_eq(cn_gguf_parse(t->blob, n, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gt_open_gguf(&t->e, g, n_ctx, 64, max_seqs);
}

static void tiny_close(tiny_env *t) {
    gt_close(&t->e);
    free(t->blob);
}

/* Sum of raw log-probabilities of seq[0..n) after prompt, scored by one fresh forward
 * pass over prompt + seq on sequence `scratch` (teacher forcing); end_eos adds the
 * log-probability of EOS after the last token. */
static double seq_logprob(gt_env *e, int scratch, const int32_t *prompt, int np, const int32_t *seq, int n,
                          bool end_eos) {
    const int total = np + n;
    cn_batch b;
    cn_error err = {0};
    cr_assert_eq(cn_batch_init(&b, total, &err), CN_STATUS_OK);
    for (int i = 0; i < total; i++) cn_batch_add(&b, i < np ? prompt[i] : seq[i - np], i, scratch, i >= np - 1);
    float *lg = malloc((size_t)(n + 1) * (size_t)e->n_vocab * sizeof *lg);
    cn_kv_seq_free(e->kv, scratch);
    cr_assert_eq(cn_forward(e->model, e->fwd, &b, e->kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
    cn_kv_seq_free(e->kv, scratch);
    double sum = 0;
    for (int i = 0; i <= n; i++) {
        if (i == n && !end_eos) break;
        const float *row = lg + (size_t)i * e->n_vocab;
        double mx = -INFINITY, z = 0;
        for (int j = 0; j < e->n_vocab; j++) mx = fmax(mx, row[j]);
        for (int j = 0; j < e->n_vocab; j++) z += exp(row[j] - mx);
        const int32_t tok = i < n ? seq[i] : 2;
        sum += row[tok] - mx - log(z);
    }
    free(lg);
    cn_batch_free(&b);
    return sum;
}

static cn_gen *beam_run(gt_env *e, cn_gen_params *p, const int32_t *prompt, int np, cn_beam_result *res) {
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, p, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_beam_search(&e->run, 0, prompt, np, g, res, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(cn_gen_done(g));
    cn_kv_stats ks;
    cn_kv_get_stats(e->kv, &ks);
    cr_assert_eq(ks.n_seqs, 0, "beam search left %d sequences", ks.n_seqs);
    cr_assert_eq(cn_kv_check(e->kv, &err), CN_STATUS_OK, "%s", err.msg);
    return g;
}

static cn_gen *greedy_run(gt_env *e, cn_gen_params *p, const int32_t *prompt, int np) {
    cn_gen *g = NULL;
    cn_error err = {0};
    cn_kv_seq_free(e->kv, 0);
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, p, &g, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_generate(&e->run, 0, prompt, np, 0, g, &err), CN_STATUS_OK, "%s", err.msg);
    cn_kv_seq_free(e->kv, 0);
    return g;
}

/* ---- the designed model: greedy's first token leads nowhere ---- */

/* clang-format off */
static const char *const WORDS[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b",
                                    "\xE2\x96\x81" "c", "\xE2\x96\x81" "d", "\xE2\x96\x81" "e"};
/* clang-format on */
enum { A = 3, B, C, D, E_ };

/* From <s>: a .5, b .4. From a: flat over a..e (.2 each). From b/c/d/e: the next letter
 * .9 (e -> a). EOS and <unk>/<s> are ~e^-12 everywhere. Greedy: a a a (p .02);
 * best: b c d (p .324). */
static void designed_table(float *L) {
    const int V = 8;
    for (int i = 0; i < V * V; i++) L[i] = -12.0f;
    float *r = L + 1 * V;
    r[A] = logf(0.5f), r[B] = logf(0.4f), r[C] = r[D] = r[E_] = logf(0.1f / 3);
    for (int t = A; t <= E_; t++) L[A * V + t] = logf(0.2f);
    for (int cur = B; cur <= E_; cur++) {
        const int nx = cur == E_ ? A : cur + 1;
        for (int t = A; t <= E_; t++) L[cur * V + t] = logf(t == nx ? 0.9f : 0.025f);
    }
}

/* The best of all 7^3 three-token sequences (EOS excluded) by exhaustive search. */
static double exhaustive3(gt_env *e, const int32_t *prompt, int np, int32_t best[3]) {
    double best_lp = -INFINITY;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            for (int c = 0; c < 8; c++) {
                if (a == 2 || b == 2 || c == 2) continue;
                const int32_t s[3] = {a, b, c};
                const double lp = seq_logprob(e, 1, prompt, np, s, 3, false);
                if (lp > best_lp) best_lp = lp, memcpy(best, s, sizeof s);
            }
    return best_lp;
}

Test(beam, tiny_best_beam_differs_from_greedy) {
    float L[64];
    designed_table(L);
    tiny_env t;
    tiny_open(&t, 8, WORDS, L, 32, 4);
    const int32_t prompt[] = {1};
    int32_t want[3];
    const double want_lp = exhaustive3(&t.e, prompt, 1, want);
    cr_assert_eq(want[0], B);
    cr_assert_eq(want[1], C);
    cr_assert_eq(want[2], D);
    cr_assert_float_eq(want_lp, log(0.4 * 0.9 * 0.9), 1e-3);

    cn_gen_params p = cn_gen_default_params();
    p.max_tokens = 3;
    p.sampling.ignore_eos = true;
    p.sampling.n_logprobs = 2;
    p.beam.length_penalty = 0.0f;

    /* greedy: a, then a flat row where the lowest id wins */
    p.sampling.temperature = 0.0f;
    cn_gen *gg = greedy_run(&t.e, &p, prompt, 1);
    int32_t n;
    const int32_t *gt = cn_gen_tokens(gg, &n);
    cr_assert_eq(n, 3);
    cr_assert(gt[0] == A && gt[1] == A && gt[2] == A);
    cr_assert_str_eq(cn_gen_text(gg, NULL), " a a a");

    for (int k = 1; k <= 3; k++) {
        p.beam.n_beams = k;
        cn_beam_result res;
        cn_gen *g = beam_run(&t.e, &p, prompt, 1, &res);
        const int32_t *bt = cn_gen_tokens(g, &n);
        cr_assert_eq(n, 3);
        cr_assert_eq(res.n_tokens, 3);
        cr_assert_eq(res.finish, CN_FINISH_LENGTH);
        cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_LENGTH);
        if (k == 1) {
            cr_assert_arr_eq(bt, gt, 3 * sizeof *bt, "one beam is greedy");
        } else {
            cr_assert_arr_eq(bt, want, 3 * sizeof *bt, "%d beams: %d %d %d", k, bt[0], bt[1], bt[2]);
            cr_assert_float_eq(res.sum_logprob, want_lp, 1e-6);
            cr_assert_float_eq(res.score, want_lp, 1e-6); /* length_penalty 0 */
            cr_assert_str_eq(cn_gen_text(g, NULL), " b c d");
            /* raw logprobs per token, and the top alternatives of the parent's row */
            const cn_gen_token *ti = cn_gen_token_info(g, &n);
            double sum = 0;
            for (int i = 0; i < 3; i++) sum += ti[i].logprob;
            cr_assert_float_eq(sum, want_lp, 1e-5);
            cr_assert_eq(ti[0].n_top, 2);
            cr_assert_eq(ti[0].top[0].id, A);
            cr_assert_eq(ti[0].top[1].id, B);
            cr_assert_float_eq(ti[1].logprob, log(0.9), 1e-4);
        }
        cn_gen_free(g);
    }
    cn_gen_free(gg);
    tiny_close(&t);
}

/* A stop string over two tokens ends the best beam: " b c d" contains "c d". */
Test(beam, tiny_stop_string) {
    float L[64];
    designed_table(L);
    tiny_env t;
    tiny_open(&t, 8, WORDS, L, 32, 4);
    const int32_t prompt[] = {1};
    cn_gen_params p = cn_gen_default_params();
    p.max_tokens = 3;
    p.sampling.ignore_eos = true;
    p.beam.n_beams = 2;
    p.beam.length_penalty = 0.0f;
    const char *stops[] = {"c d"};
    p.stop = stops;
    p.n_stop = 1;
    gt_rec r;
    gt_rec_init(&r);
    gt_rec_attach(&r, &p);
    cn_beam_result res;
    cn_gen *g = beam_run(&t.e, &p, prompt, 1, &res);
    cr_assert_eq(res.finish, CN_FINISH_STOP);
    cr_assert_eq(cn_gen_finish_reason(g), CN_FINISH_STOP);
    cr_assert_str_eq(cn_gen_text(g, NULL), " b ");
    cr_assert_str_eq(r.text, " b ");
    cr_assert_eq(cn_gen_stop_index(g), 0);
    cn_gen_free(g);
    tiny_close(&t);
}

/* ---- exactness: with enough beams, beam search is exhaustive search ---- */

/* clang-format off */
static const char *const ABC[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b",
                                  "\xE2\x96\x81" "c"};
/* clang-format on */

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

typedef struct {
    int32_t tok[3];
    int len;
    bool eos;
    double sum, score;
} hyp;

/* Every finished sequence of at most 3 tokens over a, b, c: ended by EOS (its logprob
 * counted, not its length) or cut at 3 tokens. */
static hyp exhaustive_best(gt_env *e, const int32_t *prompt, int np, double lp) {
    hyp best = {.score = -INFINITY};
    for (int len = 0; len <= 3; len++) {
        int n_seq = 1;
        for (int i = 0; i < len; i++) n_seq *= 3;
        for (int code = 0; code < n_seq; code++) {
            hyp h = {.len = len};
            for (int i = 0, c = code; i < len; i++, c /= 3) h.tok[i] = 3 + c % 3;
            for (int eos = 0; eos < 2; eos++) {
                if (!eos && len < 3) continue;
                h.eos = eos;
                h.sum = seq_logprob(e, 1, prompt, np, h.tok, len, eos);
                h.score = h.sum / pow(len > 0 ? len : 1, lp);
                if (h.score > best.score) best = h;
            }
        }
    }
    return best;
}

Test(beam, enough_beams_are_exhaustive_search) {
    for (uint32_t seed = 1; seed <= 6; seed++) {
        float L[36];
        uint32_t st = seed;
        for (int i = 0; i < 36; i++) L[i] = (float)(lcg(&st) % 4000) / 1000.0f - 2.0f;
        tiny_env t;
        tiny_open(&t, 6, ABC, L, 32, 64);
        const int32_t prompt[] = {1, 3};
        const cn_logit_bias ban[] = {{0, -INFINITY}, {1, -INFINITY}};
        const float lps[] = {0.0f, 1.0f, 2.0f, -1.0f};
        for (size_t li = 0; li < sizeof lps / sizeof lps[0]; li++) {
            const hyp want = exhaustive_best(&t.e, prompt, 2, lps[li]);
            cn_gen_params p = cn_gen_default_params();
            p.max_tokens = 3;
            p.sampling.logit_bias = ban;
            p.sampling.n_logit_bias = 2;
            p.beam.n_beams = 64;
            p.beam.length_penalty = lps[li];
            cn_beam_result res;
            cn_gen *g = beam_run(&t.e, &p, prompt, 2, &res);
            int32_t n;
            const int32_t *bt = cn_gen_tokens(g, &n);
            cr_assert_float_eq(res.score, want.score, 1e-6, "seed %u lp %g: beam %g, exhaustive %g", seed, lps[li],
                               res.score, want.score);
            cr_assert_eq(n, want.len, "seed %u lp %g", seed, lps[li]);
            cr_assert_arr_eq(bt, want.tok, (size_t)n * sizeof *bt);
            cr_assert_eq(res.finish, want.eos ? CN_FINISH_STOP : CN_FINISH_LENGTH);
            cr_assert_float_eq(res.sum_logprob, want.sum, 1e-6);
            cn_gen_free(g);
        }
        tiny_close(&t);
    }
}

Test(beam, bad_setup) {
    float L[64];
    designed_table(L);
    tiny_env t;
    tiny_open(&t, 8, WORDS, L, 8, 2);
    const int32_t prompt[] = {1, 3, 4, 5, 6, 7, 3, 4};
    cn_gen_params p = cn_gen_default_params();
    p.beam.n_beams = 3;
    cn_gen *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gen_create(t.e.tok, t.e.n_vocab, &p, &g, &err), CN_STATUS_OK);
    cr_assert_eq(cn_beam_search(&t.e.run, 0, prompt, 2, g, NULL, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_seqs"), "%s", err.msg);
    cn_gen_free(g);
    p.beam.n_beams = 2;
    cr_assert_eq(cn_gen_create(t.e.tok, t.e.n_vocab, &p, &g, &err), CN_STATUS_OK);
    cr_assert_eq(cn_beam_search(&t.e.run, 0, prompt, 8, g, NULL, &err), CN_STATUS_LIMIT);
    cr_assert(strstr(err.msg, "no room to generate"), "%s", err.msg);
    cn_gen_free(g);
    tiny_close(&t);
}

/* ---- stories260K ---- */

Test(beam, one_beam_is_greedy_on_stories260k) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 4);
    int32_t np;
    int32_t *prompt = gt_tokenize(e.tok, "Once upon a time", true, &np);
    cn_gen_params p = cn_gen_default_params();
    p.max_tokens = 40;
    p.sampling.temperature = 0.0f;
    cn_gen *gg = greedy_run(&e, &p, prompt, np);
    p.beam.n_beams = 1;
    p.beam.early_stopping = true;
    cn_beam_result res;
    cn_gen *gb = beam_run(&e, &p, prompt, np, &res);
    int32_t n1, n2;
    const int32_t *t1 = cn_gen_tokens(gg, &n1), *t2 = cn_gen_tokens(gb, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_arr_eq(t1, t2, (size_t)n1 * sizeof *t1);
    cr_assert_str_eq(cn_gen_text(gg, NULL), cn_gen_text(gb, NULL));
    cr_assert_eq(cn_gen_finish_reason(gg), cn_gen_finish_reason(gb));
    cn_gen_free(gg);
    cn_gen_free(gb);
    free(prompt);
    gt_close(&e);
}

/* should_cancel is asked once per step: a window on the KV cache while beams run. */
typedef struct {
    cn_kv *kv;
    int64_t max_shared, max_used;
} kv_watch;

static bool watch_kv(void *user) {
    kv_watch *w = user;
    cn_kv_stats ks;
    cn_kv_get_stats(w->kv, &ks);
    if (ks.n_shared > w->max_shared) w->max_shared = ks.n_shared;
    if (ks.n_blocks - ks.n_free > w->max_used) w->max_used = ks.n_blocks - ks.n_free;
    return false;
}

/* Same length (16 tokens, EOS ignored), length_penalty 0: the 4-beam winner's sum of
 * log-probabilities is >= greedy's, and both sums equal a teacher-forced recomputation.
 * While the beams run, the prompt's full blocks are shared, not copied. */
Test(beam, four_beams_at_least_greedy_on_stories260k) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 5);
    const char *prompts[] = {"Once upon a time", "The little dog", "Tom and Sue went to the park to play with"};
    for (size_t pi = 0; pi < sizeof prompts / sizeof prompts[0]; pi++) {
        int32_t np;
        int32_t *prompt = gt_tokenize(e.tok, prompts[pi], true, &np);
        cn_gen_params p = cn_gen_default_params();
        p.max_tokens = 16;
        p.sampling.temperature = 0.0f;
        p.sampling.ignore_eos = true;
        p.sampling.n_logprobs = 0;
        p.beam.length_penalty = 0.0f;
        cn_gen *gg = greedy_run(&e, &p, prompt, np);
        int32_t ng;
        const cn_gen_token *gi = cn_gen_token_info(gg, &ng);
        cr_assert_eq(ng, 16);
        double greedy_sum = 0;
        for (int i = 0; i < ng; i++) greedy_sum += gi[i].logprob;
        const double greedy_ref = seq_logprob(&e, 4, prompt, np, cn_gen_tokens(gg, NULL), ng, false);
        cr_assert_float_eq(greedy_sum, greedy_ref, 1e-3);

        p.beam.n_beams = 4;
        kv_watch w = {e.kv, 0, 0};
        p.should_cancel = watch_kv;
        p.user = &w;
        cn_beam_result res;
        cn_gen *gb = beam_run(&e, &p, prompt, np, &res);
        /* 4-token blocks: a prompt of np tokens has np / 4 full blocks that all beams share */
        cr_assert_geq(w.max_shared, np / 4, "'%s': at most %lld blocks shared", prompts[pi], (long long)w.max_shared);
        cr_assert_lt(w.max_used, 4 * ((np + 16 + 3) / 4), "beams copied their prefix");
        int32_t nb;
        const int32_t *bt = cn_gen_tokens(gb, &nb);
        cr_assert_eq(nb, 16);
        cr_assert_gt(res.n_steps, 10);
        const double beam_ref = seq_logprob(&e, 4, prompt, np, bt, nb, false);
        cr_assert_float_eq(res.sum_logprob, beam_ref, 1e-3, "'%s': beam says %g, recomputed %g", prompts[pi],
                           res.sum_logprob, beam_ref);
        cr_assert_geq(res.sum_logprob, greedy_sum - 1e-6, "'%s': beams %g < greedy %g", prompts[pi], res.sum_logprob,
                      greedy_sum);
        cn_gen_free(gg);
        cn_gen_free(gb);
        free(prompt);
    }
    gt_close(&e);
}
