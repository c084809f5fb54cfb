/* api_test.c — the public API as a program outside the tree sees it: it includes only
 * <cinder.h> and links the *installed* libcinder.so through pkg-config (scripts/test.sh
 * builds it so). Truth: llama.cpp's tokens for stories260K (tests/golden/stories260k.json:
 * the prompt's ids and 64 greedy tokens), the worked example of the sampler chain
 * (blue/gray/clear/dark, top-p 0.7), ChatML's published format, and the batched engine,
 * which must give the context's greedy text for the same prompt. The gguf files tier is
 * checked against what the gguf PyPI package (gguf-py's GGUFReader) reads from
 * stories260K.gguf.
 *
 *   api_test MODELS_DIR GOLDEN_JSON      (MODELS_DIR holds stories260K.gguf) */
#define _POSIX_C_SOURCE 200809L /* mkstemp, for the draft file */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <cinder.h>
#include <cinder_gguf.h>

static int g_fail;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            fprintf(stderr, "api_test:%d: ", __LINE__); \
            fprintf(stderr, __VA_ARGS__);               \
            fputc('\n', stderr);                        \
            g_fail++;                                   \
        }                                               \
    } while (0)

/* The integers of the JSON array after "key": in the first case of the golden file. */
static int read_ints(const char *json, const char *key, int32_t *out, int cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p += strlen(pat);
    int n = 0;
    while (*p && *p != ']' && n < cap) {
        char *end;
        out[n++] = (int32_t)strtol(p, &end, 10);
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return n;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

typedef struct {
    int n_stages;
    cn_sampler_stage stage[8];
    int32_t ids[8][4];
    float p[8][4];
    size_t n[8];
} stages;

static void on_stage(void *user, cn_sampler_stage st, const cn_candidate *cand, size_t n) {
    stages *s = user;
    if (s->n_stages >= 8) return;
    const int k = s->n_stages++;
    s->stage[k] = st;
    s->n[k] = n;
    for (size_t i = 0; i < n && i < 4; i++) s->ids[k][i] = cand[i].id, s->p[k][i] = cand[i].p;
}

static void test_explain(void) {
    /* the worked example: P = blue 0.5, gray 0.25, clear 0.15, dark 0.10; top-p 0.7 keeps
     * blue and gray (0.75 >= 0.7) and renormalizes them to 2/3 and 1/3 */
    const float logits[4] = {logf(0.5f), logf(0.25f), logf(0.15f), logf(0.10f)};
    cn_sampling_params p = cn_sampling_default_params();
    p.top_p = 0.7f;
    p.seed = 1;
    stages s = {0};
    cn_explain_result r;
    cn_error err = {0};
    CHECK(cn_explain(logits, 4, &p, NULL, 0, on_stage, &s, &r, &err) == CN_STATUS_OK, "explain: %s", err.msg);
    CHECK(r.greedy == 0, "greedy is %d, want 0 (blue)", r.greedy);
    CHECK(s.n_stages == 1 && s.stage[0] == CN_SAMPLER_TOP_P, "%d stages, the first %d", s.n_stages, (int)s.stage[0]);
    CHECK(s.n[0] == 2 && s.ids[0][0] == 0 && s.ids[0][1] == 1, "top-p kept %zu", s.n[0]);
    CHECK(fabsf(s.p[0][0] - 2.0f / 3) < 1e-4f && fabsf(s.p[0][1] - 1.0f / 3) < 1e-4f, "top-p p = %f, %f", s.p[0][0],
          s.p[0][1]);
    CHECK(r.token == 0 || r.token == 1, "drew %d, outside the top-p set", r.token);
    CHECK(r.seed == 1 && r.n_kept == 2, "seed %llu, kept %d", (unsigned long long)r.seed, r.n_kept);
    p.top_p = 7;
    CHECK(cn_explain(logits, 4, &p, NULL, 0, NULL, NULL, &r, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "top_p"),
          "a bad top_p: %s", err.msg);
}

static void test_chat_template(void) {
    cn_chat_template *t = NULL;
    cn_error err = {0};
    CHECK(cn_chat_template_from_name("chatml", &t, &err) == CN_STATUS_OK, "%s", err.msg);
    if (!t) return;
    const cn_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi!"}};
    char *out = NULL;
    size_t n = 0;
    CHECK(cn_chat_render(t, msgs, 2, true, &out, &n, &err) == CN_STATUS_OK, "%s", err.msg);
    const char *want =
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n";
    CHECK(out && !strcmp(out, want) && n == strlen(want), "rendered '%s'", out ? out : "(null)");
    CHECK(!strcmp(cn_chat_template_name(t), "chatml") && !strcmp(cn_chat_template_end_of_turn(t), "<|im_end|>"),
          "name %s", cn_chat_template_name(t));
    free(out);
    const cn_chat_msg bad[] = {{"wizard", "x"}};
    CHECK(cn_chat_render(t, bad, 1, true, &out, &n, &err) == CN_STATUS_INVALID_ARG, "a bad role rendered");
    cn_chat_template_free(t);
    CHECK(cn_chat_template_from_name("nope", &t, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "chatml"), "%s",
          err.msg);
}

typedef struct {
    char text[2048];
    size_t n;
    int cancel_after, seen;
} streamed;

static void on_text(void *user, const char *text, size_t n) {
    streamed *s = user;
    if (s->n + n < sizeof s->text) {
        memcpy(s->text + s->n, text, n);
        s->n += n;
        s->text[s->n] = 0;
    }
}

static void on_token(void *user, const cn_gen_token *t) {
    (void)t;
    ((streamed *)user)->seen++;
}

static bool should_cancel(void *user) {
    const streamed *s = user;
    return s->cancel_after > 0 && s->seen >= s->cancel_after;
}

static void engine_text(void *user, uint64_t id, int32_t index, const char *text, size_t n) {
    (void)id;
    (void)index;
    on_text(user, text, n);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The low tier drives the model itself: the prompt in one batch on sequence 0, then
 * greedy decoding one row at a time gives llama.cpp's tokens; a copy of the prompt on
 * sequence 1, decoded in the same batches as sequence 0, gives them too; rm rewinds. */
static void test_low_tier(const cn_model *m, const int32_t *prompt, const int32_t *want) {
    cn_error err = {0};
    cn_context *c = NULL;
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = 2;
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    CHECK(cn_context_create(m, &cp, &c, &err) == CN_STATUS_OK, "%s", err.msg);
    if (!c) return;
    const int nv = cn_context_n_vocab(c);
    cn_batch b;
    CHECK(cn_batch_init(&b, 8, &err) == CN_STATUS_OK, "%s", err.msg);
    for (int i = 0; i < 5; i++) cn_batch_add(&b, prompt[i], i, 0, i == 4);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_OK && cn_context_seq_len(c, 0) == 5, "%s", err.msg);
    CHECK(cn_context_logits_row(c, 0) && !cn_context_logits_row(c, 1), "one logits row");
    int32_t tok0 = argmax(cn_context_logits_row(c, 0), nv);
    CHECK(tok0 == want[0], "first token %d, llama.cpp's %d", tok0, want[0]);
    CHECK(cn_context_seq_cp(c, 0, 1, -1, &err) == CN_STATUS_OK && cn_context_seq_len(c, 1) == 5, "%s", err.msg);
    int32_t tok1 = tok0;
    for (int i = 1; i < 16; i++) {
        cn_batch_clear(&b);
        cn_batch_add(&b, tok0, 4 + i, 0, true);
        cn_batch_add(&b, tok1, 4 + i, 1, true);
        CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_OK, "step %d: %s", i, err.msg);
        tok0 = argmax(cn_context_logits_row(c, 0), nv);
        tok1 = argmax(cn_context_logits_row(c, 1), nv);
        CHECK(tok0 == want[i] && tok1 == want[i], "token %d: %d and %d, llama.cpp's %d", i, tok0, tok1, want[i]);
    }
    /* back to the prompt on sequence 1, then the first token again */
    CHECK(cn_context_seq_rm(c, 1, 5, &err) == CN_STATUS_OK && cn_context_seq_len(c, 1) == 5, "rm");
    cn_batch_clear(&b);
    cn_batch_add(&b, want[0], 5, 1, true);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_OK && argmax(cn_context_logits_row(c, 0), nv) == want[1],
          "after rm: %s", err.msg);
    /* bad batches: clear errors */
    cn_batch_clear(&b);
    cn_batch_add(&b, 1, 9, 1, true);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "gap"), "gap: %s", err.msg);
    cn_batch_clear(&b);
    cn_batch_add(&b, nv, 0, 0, true);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_INVALID_ARG, "token out of the vocabulary: %s", err.msg);
    cn_batch_clear(&b);
    cn_batch_add(&b, 1, 0, 2, true);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_INVALID_ARG, "sequence 2 of 2: %s", err.msg);
    cn_batch_clear(&b);
    cn_batch_add(&b, 1, 128, 0, true);
    CHECK(cn_context_decode(c, &b, &err) == CN_STATUS_LIMIT, "position 128 of 128: %s", err.msg);
    CHECK(cn_context_seq_cp(c, 0, 0, -1, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "seq"), "cp to itself");
    cn_context_seq_keep(c, 1);
    CHECK(cn_context_seq_len(c, 0) == 0 && cn_context_seq_len(c, 1) == 6, "keep");
    cn_batch_free(&b);
    cn_context_free(c);

    cp.n_seq_max = 65;
    CHECK(cn_context_create(m, &cp, &c, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "n_seq_max"),
          "n_seq_max 65: %s", err.msg);
}

static void test_model(const char *dir, const char *golden_path) {
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", dir);
    char *golden = slurp(golden_path);
    CHECK(golden, "cannot read %s", golden_path);
    if (!golden) return;
    int32_t want_prompt[16], want_greedy[64];
    const int n_wp = read_ints(golden, "tokens", want_prompt, 16), n_wg = read_ints(golden, "greedy", want_greedy, 64);
    free(golden);
    CHECK(n_wp == 5 && n_wg == 64, "golden: %d prompt tokens, %d greedy", n_wp, n_wg);

    cn_error err = {0};
    cn_model *m = NULL;
    cn_model_params mp = cn_model_default_params();
    CHECK(cn_model_load("/nonexistent/x.gguf", &mp, &m, &err) == CN_STATUS_IO && err.msg[0] && !m, "%s", err.msg);
    if (cn_model_load(path, &mp, &m, &err) != CN_STATUS_OK) {
        CHECK(0, "load %s: %s", path, err.msg);
        return;
    }
    cn_model_info info;
    cn_model_get_info(m, &info);
    CHECK(!strcmp(info.arch, "llama") && info.n_vocab == 512 && info.n_layer == 5 && info.n_params > 200000,
          "info: %s vocab %d layers %d params %lld", info.arch, info.n_vocab, info.n_layer, (long long)info.n_params);
    const char *s = NULL;
    size_t sl = 0;
    CHECK(cn_model_meta_str(m, "general.architecture", &s, &sl) && sl == 5 && !memcmp(s, "llama", 5), "meta str");
    int64_t ctx_len = 0;
    CHECK(cn_model_meta_int(m, "llama.context_length", &ctx_len) && ctx_len == info.n_ctx_train, "meta int");
    double eps = 0; /* f32 1e-5 as gguf-py reads it */
    CHECK(cn_model_meta_float(m, "llama.attention.layer_norm_rms_epsilon", &eps) && fabs(eps - 1e-5) < 1e-12 &&
              !cn_model_meta_float(m, "general.architecture", &eps),
          "meta float %g", eps);

    /* the tokenizer: llama.cpp's ids, and back */
    cn_tokenizer *tok = NULL;
    CHECK(cn_tokenizer_from_model(m, &tok, &err) == CN_STATUS_OK, "%s", err.msg);
    int32_t ids[16];
    size_t n_ids = 0;
    CHECK(cn_tokenize(tok, "Once upon a time", 16, true, true, ids, 16, &n_ids, &err) == CN_STATUS_OK, "%s", err.msg);
    CHECK(n_ids == 5 && !memcmp(ids, want_prompt, sizeof(int32_t) * 5), "tokens differ from llama.cpp's");
    CHECK(cn_tokenizer_bos(tok) == ids[0] && cn_tokenizer_add_bos(tok), "BOS %d", cn_tokenizer_bos(tok));
    char *text = NULL;
    CHECK(cn_detokenize(tok, ids + 1, n_ids - 1, false, &text, NULL, &err) == CN_STATUS_OK && text &&
              !strcmp(text, "Once upon a time"),
          "detokenized '%s'", text ? text : "(null)");
    free(text);
    const int32_t bad_id = 512;
    CHECK(cn_detokenize(tok, &bad_id, 1, false, &text, NULL, &err) == CN_STATUS_INVALID_ARG, "id 512 detokenized");

    /* greedy generation: llama.cpp's 64 tokens, streamed text = the result's text */
    cn_context *c = NULL;
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = 1;
    cp.n_ctx = 256;
    CHECK(cn_context_create(m, &cp, &c, &err) == CN_STATUS_OK, "%s", err.msg);
    if (!c) goto out;
    CHECK(cn_context_chat_template(c) == NULL, "stories260K has no chat template");
    cn_gen_params gp = cn_gen_default_params();
    gp.max_tokens = 64;
    gp.sampling.temperature = 0;
    gp.sampling.n_logprobs = 2;
    streamed st = {0};
    gp.on_text = on_text;
    gp.on_token = on_token;
    gp.user = &st;
    cn_prompt pr = {.text = "Once upon a time"};
    cn_result r;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK, "%s", err.msg);
    CHECK(r.n_tokens == 64 && r.finish_reason == CN_FINISH_LENGTH && r.n_prompt_tokens == 5, "%d tokens (%s)",
          r.n_tokens, cn_finish_reason_str(r.finish_reason));
    for (int i = 0; i < r.n_tokens && i < 64; i++)
        CHECK(r.tokens[i].id == want_greedy[i], "greedy token %d is %d, llama.cpp's %d", i, r.tokens[i].id,
              want_greedy[i]);
    CHECK(r.tokens[0].has_logprob && r.tokens[0].n_top == 2 && r.tokens[0].top[0].id == r.tokens[0].id,
          "logprobs of the first token");
    CHECK(!strcmp(st.text, r.text) && st.seen == 64, "streamed '%s' vs '%s'", st.text, r.text);
    CHECK(r.timings.n_generated_tokens == 64 && r.timings.ttft_ms > 0, "timings");
    char greedy[2048];
    snprintf(greedy, sizeof greedy, "%s", r.text);
    cn_result_free(&r);

    /* the same prompt as tokens, and again (the whole prompt is cached now): same text */
    pr = (cn_prompt){.tokens = want_prompt, .n_tokens = 5};
    memset(&st, 0, sizeof st);
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK && !strcmp(r.text, greedy), "token prompt");
    CHECK(r.timings.n_cached_tokens == 4, "cached %d of the 5 prompt tokens, want 4", r.timings.n_cached_tokens);
    cn_result_free(&r);

    /* cancel after 3 tokens; stop strings; beam search (n_beams 2) */
    memset(&st, 0, sizeof st);
    st.cancel_after = 3;
    gp.should_cancel = should_cancel;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK && r.finish_reason == CN_FINISH_CANCELLED &&
              r.n_tokens == 3,
          "cancel: %s after %d", cn_finish_reason_str(r.finish_reason), r.n_tokens);
    cn_result_free(&r);
    gp.should_cancel = NULL;
    const char *stop[] = {"Lily"};
    gp.stop = stop;
    gp.n_stop = 1;
    memset(&st, 0, sizeof st);
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK && r.finish_reason == CN_FINISH_STOP &&
              r.stop_index == 0 && strstr(greedy, r.text) == greedy && !strstr(r.text, "Lily"),
          "stop: '%s'", r.text);
    cn_result_free(&r);
    gp.n_stop = 0;
    gp.beam.n_beams = 2;
    gp.max_tokens = 16;
    memset(&st, 0, sizeof st);
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK && r.n_tokens > 0 && r.beam_score < 0, "beam: %s",
          err.msg);
    CHECK(r.beam_sum_logprob < 0 && r.beam_n_finished >= 0 && r.beam_n_finished <= 2, "beam figures");
    cn_result_free(&r);
    gp.beam.n_beams = 1;

    /* speculation (n-gram lookup; the model drafting for itself) gives plain decoding's text;
       a template by name; a draft flag without a draft model, a bad name: errors naming them */
    gp.max_tokens = 64;
    gp.lookup_n = 3;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_OK && !strcmp(r.text, greedy) &&
              r.spec_target_passes > 0 && r.spec_accepted <= r.spec_drafted && r.spec_draft_passes == 0,
          "lookup: %s", err.msg);
    cn_result_free(&r);
    gp.lookup_n = 0;
    gp.draft = true;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "draft"),
          "draft without a draft model: %s", err.msg);
    cn_context_params dp = cp;
    dp.draft = m;
    dp.chat_template = "chatml";
    cn_context *dc = NULL;
    CHECK(cn_context_create(m, &dp, &dc, &err) == CN_STATUS_OK && cn_context_chat_template(dc) &&
              !strcmp(cn_chat_template_name(cn_context_chat_template(dc)), "chatml"),
          "%s", err.msg);
    CHECK(dc && cn_context_generate(dc, &pr, &gp, &r, &err) == CN_STATUS_OK && !strcmp(r.text, greedy) &&
              r.spec_draft_passes > 0 && r.spec_accepted > 0,
          "self-draft: %s", err.msg);
    cn_result_free(&r);
    cn_context_free(dc);
    gp.draft = false;
    dp.draft = NULL;
    dp.chat_template = "bogus";
    CHECK(cn_context_create(m, &dp, &dc, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "chat_template") &&
              strstr(err.msg, "chatml") && !dc,
          "bad template name: %s", err.msg);

    /* bad requests: clear errors, nothing kept */
    cn_prompt two = {.text = "x", .tokens = want_prompt, .n_tokens = 5};
    CHECK(cn_context_generate(c, &two, &gp, &r, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "exactly one"), "%s",
          err.msg);
    cn_prompt chat = {.messages = (const cn_chat_msg[]){{"user", "hi"}}, .n_messages = 1};
    CHECK(cn_context_generate(c, &chat, &gp, &r, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "chat template"),
          "%s", err.msg);
    int32_t longp[300];
    for (int i = 0; i < 300; i++) longp[i] = 1;
    cn_prompt toolong = {.tokens = longp, .n_tokens = 300};
    CHECK(cn_context_generate(c, &toolong, &gp, &r, &err) == CN_STATUS_LIMIT, "%s", err.msg);
    gp.max_tokens = 0;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_INVALID_ARG && strstr(err.msg, "max_tokens"), "%s",
          err.msg);
    gp.max_tokens = 64;

    /* logits after the prompt: their argmax is the first greedy token */
    float logits[512];
    CHECK(cn_context_logits(c, &pr, logits, &err) == CN_STATUS_OK, "%s", err.msg);
    int best = 0;
    for (int i = 1; i < 512; i++)
        if (logits[i] > logits[best]) best = i;
    CHECK(best == want_greedy[0], "logits argmax %d, want %d", best, want_greedy[0]);

    /* the error names the parameter; the log hook gets the library's messages */
    gp.sampling.top_p = 7;
    CHECK(cn_context_generate(c, &pr, &gp, &r, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "top_p"),
          "param '%s' (%s)", err.param, err.msg);
    gp.sampling.top_p = 1;
    CHECK(cn_context_generate(c, &toolong, &gp, &r, &err) == CN_STATUS_LIMIT && err.param[0] == 0, "param '%s'",
          err.param);

    /* one pass of tokenize_alloc gives cn_tokenize's ids */
    int32_t *aids = NULL;
    size_t n_aids = 0;
    CHECK(cn_tokenize_alloc(tok, "Once upon a time", 16, true, true, &aids, &n_aids, &err) == CN_STATUS_OK &&
              n_aids == 5 && !memcmp(aids, want_prompt, 5 * sizeof *aids),
          "tokenize_alloc: %zu ids", n_aids);
    free(aids);
    CHECK(cn_tokenize_alloc(tok, "", 0, false, false, &aids, &n_aids, &err) == CN_STATUS_OK && !aids && !n_aids,
          "empty text");

    test_low_tier(m, want_prompt, want_greedy);

    /* the batched engine gives the same greedy text */
    cn_engine *e = NULL;
    cn_engine_params ep = cn_engine_default_params();
    ep.n_ctx = 256;
    CHECK(cn_engine_create(m, &ep, &e, &err) == CN_STATUS_OK, "%s", err.msg);
    if (e) {
        cn_engine_request q = cn_engine_request_default_params();
        q.prompt = "Once upon a time";
        q.gen.max_tokens = 64;
        q.gen.sampling.temperature = 0;
        streamed es = {0};
        cn_engine_callbacks cb = {.on_text = engine_text, .user = &es};
        uint64_t id;
        CHECK(cn_engine_submit(e, &q, &cb, &id, &err) == CN_STATUS_OK, "%s", err.msg);
        int32_t rows = 1;
        while (rows > 0 && cn_engine_step(e, &rows, &err) == CN_STATUS_OK) {}
        CHECK(!strcmp(es.text, greedy), "engine '%s' vs context '%s'", es.text, greedy);
        cn_engine_free(e);
    }
    cn_context_free(c);
out:
    cn_tokenizer_free(tok);
    cn_model_free(m);
}

/* The gguf files tier. Expected values are gguf-py's, not cinder's:
 *   r = gguf.GGUFReader("stories260K.gguf"); non-"GGUF." fields: 19, version 3,
 *   alignment 32, data_offset 14176; tokenizer.ggml.tokens [512 × string], contents(0)
 *   "<unk>", contents(300) "▁ha"; llama.block_count u32 5; 48 tensors, the first
 *   token_embd.weight F32 shape [64, 512], 131072 bytes at 0; the last
 *   blk.4.ffn_norm.weight F32 [64], 256 bytes at 1170944. */
static void test_gguf_files(const char *path) {
    cn_gguf *g = NULL;
    cn_error err = {0};
    if (cn_gguf_open(path, &g, &err) != CN_STATUS_OK) {
        CHECK(0, "open %s: %s", path, err.msg);
        return;
    }
    CHECK(cn_gguf_version(g) == 3 && cn_gguf_alignment(g) == 32 && cn_gguf_data_offset(g) == 14176,
          "header: v%u, align %u, data at %llu", cn_gguf_version(g), cn_gguf_alignment(g),
          (unsigned long long)cn_gguf_data_offset(g));
    CHECK(cn_gguf_n_kv(g) == 19 && cn_gguf_n_tensors(g) == 48, "%lld kvs, %lld tensors", (long long)cn_gguf_n_kv(g),
          (long long)cn_gguf_n_tensors(g));
    int64_t i = cn_gguf_find_key(g, "llama.block_count");
    int64_t v = 0;
    CHECK(i >= 0 && cn_gguf_kv_type(g, i) == CN_GGUF_UINT32 && cn_gguf_kv_i64(g, i, &v) && v == 5 &&
              !strcmp(cn_gguf_vtype_name(CN_GGUF_UINT32), "u32"),
          "block_count %lld", (long long)v);
    cn_gguf_str k = cn_gguf_kv_key(g, i);
    CHECK(k.len == 17 && !memcmp(k.ptr, "llama.block_count", 17), "key %lld", (long long)i);
    cn_gguf_arr a;
    i = cn_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK(i >= 0 && cn_gguf_kv_arr(g, i, &a) && a.type == CN_GGUF_STRING && a.n == 512, "tokens");
    if (i >= 0 && a.n == 512) {
        cn_gguf_str t0 = cn_gguf_arr_str(&a, 0), t300 = cn_gguf_arr_str(&a, 300);
        CHECK(t0.len == 5 && !memcmp(t0.ptr, "<unk>", 5) && t300.len == 5 && !memcmp(t300.ptr, "\xe2\x96\x81ha", 5),
              "tokens 0 and 300");
    }
    CHECK(cn_gguf_find_key(g, "no.such.key") == -1 && !cn_gguf_kv_str(g, i, &k), "absent key; an array as string");
    const cn_gguf_tensor_info *t = cn_gguf_tensor(g, 0), *last = cn_gguf_tensor(g, 47);
    CHECK(t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17) && t->type == CN_TYPE_F32 &&
              t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->n_bytes == 131072 && t->offset == 0 && t->data,
          "tensor 0");
    CHECK(last->name.len == 21 && !memcmp(last->name.ptr, "blk.4.ffn_norm.weight", 21) && last->n_dims == 1 &&
              last->ne[0] == 64 && last->n_bytes == 256 && last->offset == 1170944,
          "tensor 47");
    uint32_t bs = 0, bb = 0;
    CHECK(cn_gguf_type_size(CN_TYPE_Q4_K, &bs, &bb) && bs == 256 && bb == 144 && !cn_gguf_type_size(1000, NULL, NULL),
          "q4_K geometry %u/%u", bs, bb);
    CHECK(!strcmp(cn_type_name(CN_TYPE_Q4_K), "q4_K") && !strcmp(cn_type_name(CN_TYPE_F32), "f32") &&
              cn_type_name((cn_type)16) == NULL,
          "type names (16, iq2_xxs, is one cinder cannot compute with)");
    cn_gguf_close(g);
    cn_gguf_close(NULL);
    CHECK(cn_gguf_open("/nonexistent/x.gguf", &g, &err) == CN_STATUS_IO && !g && strstr(err.msg, "x.gguf"), "%s",
          err.msg);
}

/* The grammar matcher as a program with its own sampler drives it: a choice grammar
 * ("yes" | "no") on stories260K's vocabulary, stepped by text and by token, rolled back. */
static void test_grammar_matcher(const char *path) {
    cn_tokenizer *tok = NULL;
    cn_error err = {0};
    if (cn_tokenizer_load_file(path, &tok, &err) != CN_STATUS_OK) {
        CHECK(0, "tokenizer: %s", err.msg);
        return;
    }
    const char *const choices[] = {"yes", "no"};
    cn_grammar_params gp = cn_grammar_default_params();
    gp.kind = CN_GRAMMAR_CHOICE;
    gp.choices = choices;
    gp.n_choices = 2;
    cn_grammar *g = NULL;
    cn_grammar_matcher *mt = NULL;
    CHECK(cn_grammar_compile(tok, &gp, &g, &err) == CN_STATUS_OK, "%s", err.msg);
    CHECK(g && cn_grammar_n_vocab(g) == cn_tokenizer_n_vocab(tok), "n_vocab");
    CHECK(g && cn_grammar_check_text(g, "no", 2) && !cn_grammar_check_text(g, "nope", 4), "check_text");
    CHECK(g && cn_grammar_matcher_new(g, &mt, &err) == CN_STATUS_OK, "%s", err.msg);
    if (!mt) goto done;
    CHECK(cn_grammar_matcher_n_steps(mt) == 0 && !cn_grammar_matcher_is_complete(mt), "fresh");
    CHECK(cn_grammar_matcher_accept_text(mt, "y", 1) && !cn_grammar_matcher_accept_text(mt, "x", 1), "y, not x");
    CHECK(cn_grammar_matcher_accept_text(mt, "es", 2) && cn_grammar_matcher_n_steps(mt) == 2, "yes in two steps");
    CHECK(cn_grammar_matcher_is_complete(mt) && cn_grammar_matcher_is_done(mt), "yes is complete, nothing follows");
    CHECK(cn_grammar_matcher_rollback(mt, 2, &err) == CN_STATUS_OK && cn_grammar_matcher_n_steps(mt) == 0 &&
              !cn_grammar_matcher_is_complete(mt),
          "rolled back to the start");
    CHECK(cn_grammar_matcher_rollback(mt, 1, &err) == CN_STATUS_INVALID_ARG, "nothing left to roll back");
    /* by token: the mask allows the token of "no" (if the vocabulary has it whole) or of "n" */
    const int32_t n_vocab = cn_tokenizer_n_vocab(tok);
    uint32_t *mask = calloc(((size_t)n_vocab + 31) / 32, sizeof *mask);
    int32_t id = cn_tokenizer_find(tok, "no");
    if (id < 0) id = cn_tokenizer_find(tok, "n");
    CHECK(mask && id >= 0, "no token for 'n'");
    if (mask && id >= 0) {
        CHECK(cn_grammar_matcher_mask(mt, mask, ((size_t)n_vocab + 31) / 32, &err) == CN_STATUS_OK, "%s", err.msg);
        CHECK(mask[id / 32] >> (id % 32) & 1, "the mask allows '%s'", id == cn_tokenizer_find(tok, "no") ? "no" : "n");
        CHECK(cn_grammar_matcher_accept(mt, id) && cn_grammar_matcher_n_steps(mt) == 1, "accept by token");
    }
    free(mask);
    cn_grammar_matcher_reset(mt);
    CHECK(cn_grammar_matcher_n_steps(mt) == 0, "reset");
done:
    cn_grammar_matcher_free(mt);
    cn_grammar_free(g);
    cn_tokenizer_free(tok);
}

/* A file from the library user's side: a temporary path, written with the given bytes. */
static bool temp_file(char *path, const void *bytes, size_t n) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, 256, "%s/cinder_api_XXXXXX", dir && *dir ? dir : "/tmp");
    const int fd = mkstemp(path);
    if (fd < 0) return false;
    const bool ok = write(fd, bytes, n) == (ssize_t)n;
    close(fd);
    return ok;
}

/* cn_tokenizer_load_file gives the model's tokenizer; a bad path or file, a clean error. */
static void test_tokenizer_file(const char *path) {
    cn_model_params mp = cn_model_default_params();
    cn_model *m = NULL;
    cn_tokenizer *t = NULL, *from_model = NULL;
    cn_error err = {0};
    if (cn_model_load(path, &mp, &m, &err) != CN_STATUS_OK || cn_tokenizer_from_model(m, &from_model, &err) ||
        cn_tokenizer_load_file(path, &t, &err) != CN_STATUS_OK) {
        CHECK(0, "tokenizer of %s: %s", path, err.msg);
        cn_tokenizer_free(from_model);
        cn_model_free(m);
        return;
    }
    const char *text = "Once upon a time, a girl named Lily found a <s> box.";
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(cn_tokenize_alloc(t, text, strlen(text), true, true, &a, &na, &err) == CN_STATUS_OK &&
              cn_tokenize_alloc(from_model, text, strlen(text), true, true, &b, &nb, &err) == CN_STATUS_OK,
          "%s", err.msg);
    CHECK(na == nb && na > 10 && !memcmp(a, b, na * sizeof *a), "%zu ids from the file, %zu from the model", na, nb);
    CHECK(cn_tokenizer_n_vocab(t) == 512, "n_vocab %d", cn_tokenizer_n_vocab(t));
    free(a);
    free(b);
    cn_tokenizer_free(t);
    cn_tokenizer_free(from_model);
    cn_model_free(m);
    CHECK(cn_tokenizer_load_file("/nonexistent/v.gguf", &t, &err) == CN_STATUS_IO && !t, "%s", err.msg);
    char junk[256];
    const char garbage[] = "GGUF\x03\x00\x00\x00garbage";
    if (temp_file(junk, garbage, sizeof garbage - 1)) {
        CHECK(cn_tokenizer_load_file(junk, &t, &err) == CN_STATUS_CORRUPT && !t && strstr(err.msg, junk), "%s",
              err.msg);
        cn_gguf *g = NULL;
        CHECK(cn_gguf_open(junk, &g, &err) == CN_STATUS_CORRUPT && !g, "%s", err.msg);
        remove(junk);
    }
}

/* A 2-layer draft of stories260K (5 layers) loads as a 2-layer model with its vocabulary. */
static void test_draft(const char *path) {
    char out[256];
    cn_error err = {0};
    if (!temp_file(out, "", 0)) {
        CHECK(0, "no temporary file");
        return;
    }
    int32_t n_layer = 0;
    CHECK(cn_model_write_draft(path, out, 2, &n_layer, &err) == CN_STATUS_OK && n_layer == 5, "%s", err.msg);
    cn_model_params mp = cn_model_default_params();
    cn_model *d = NULL;
    CHECK(cn_model_load(out, &mp, &d, &err) == CN_STATUS_OK, "draft: %s", err.msg);
    if (d) {
        cn_model_info info;
        cn_model_get_info(d, &info);
        CHECK(info.n_layer == 2 && info.n_vocab == 512, "draft: %d layers, %d tokens", info.n_layer, info.n_vocab);
        cn_model_free(d);
    }
    CHECK(cn_model_write_draft(path, out, 5, NULL, &err) == CN_STATUS_INVALID_ARG && !strcmp(err.param, "n_layers"),
          "5 of 5 layers: %s", err.msg);
    CHECK(cn_model_write_draft(path, out, 0, NULL, &err) == CN_STATUS_INVALID_ARG, "0 layers");
    CHECK(cn_model_write_draft("/nonexistent/m.gguf", out, 2, NULL, &err) == CN_STATUS_IO, "%s", err.msg);
    remove(out);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: api_test MODELS_DIR GOLDEN_JSON\n");
        return 2;
    }
    CHECK(!strcmp(cn_version(), CN_VERSION), "library %s, header %s", cn_version(), CN_VERSION);
    test_explain();
    test_chat_template();
    test_model(argv[1], argv[2]);
    char path[4096];
    snprintf(path, sizeof path, "%s/stories260K.gguf", argv[1]);
    test_gguf_files(path);
    test_tokenizer_file(path);
    test_grammar_matcher(path);
    test_draft(path);
    if (g_fail) {
        fprintf(stderr, "api_test: %d checks failed\n", g_fail);
        return 1;
    }
    printf("api_test: every check passed (cinder %s)\n", cn_version());
    return 0;
}
