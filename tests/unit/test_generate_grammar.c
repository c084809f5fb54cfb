/* test_generate_grammar.c — grammars in generation (src/gen): the sampler's mask stage,
 * one request under a grammar (cn_gen, cn_generate), speculation under a grammar, and the
 * public cn_context_generate path.
 *
 * The truths are independent of our grammar engine: PCRE2 (full match for an output that
 * finished "stop", a partial match, PCRE2_PARTIAL_HARD, for one cut by max_tokens) for
 * regexes; a hand-written check with jansson for the JSON Schema's documents; the list
 * itself for choices; hand-worked rows for the mask stage; plain decoding for
 * speculation (the same tokens with and without it). The models: stories260K (trained,
 * but a JSON document or a phone number is nothing it knows) and the tiny random-weight
 * qwen2 that `make` builds (pure garbage), with temperature sampling over several seeds:
 * a grammar must tame both. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/sampling.h"
#include "gen/spec.h"
#include "test_generate_util.h"

/* ---- the mask stage, on hand-worked rows ---- */

#define MV 40 /* a small vocabulary: two mask words, the second partly used */

static void row(float *l) {
    for (int i = 0; i < MV; i++) l[i] = (float)((i * 7) % 11) * 0.5f; /* maximum 5.0 at 3, 14, 25, 36 */
}

static void mask_of(uint32_t *m, const int *ids, int n) {
    m[0] = m[1] = 0;
    for (int i = 0; i < n; i++) m[ids[i] / 32] |= 1u << (ids[i] % 32);
}

static cn_sampler *sampler(float temp, bool penalties) {
    cn_sampling_params p = cn_sampling_default_params();
    p.temperature = temp;
    p.seed = 5;
    p.n_logprobs = 3;
    if (penalties) p.repetition_penalty = 1.3f; /* leaves the one-pass greedy shortcut */
    cn_sampler *s = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_sampler_create(&p, MV, &s, &err), CN_STATUS_OK, "%s", err.msg);
    return s;
}

/* Greedy: the best logit inside the mask (row: 9 -> 4.0, 12 -> 3.5, 7 -> 2.5), on both
 * greedy paths; a bias moves the choice only among the allowed. */
Test(grammar_mask, greedy_inside_the_mask) {
    float l[MV];
    row(l);
    uint32_t m[2];
    const int allowed[] = {7, 9, 12};
    mask_of(m, allowed, 3);
    for (int pen = 0; pen < 2; pen++) {
        cn_sampler *s = sampler(0.0f, pen);
        cn_sampler_set_mask(s, m, MV);
        int32_t t = -1;
        cn_error err = {0};
        const int32_t hist[] = {1, 2};
        cr_assert_eq(cn_sampler_sample(s, l, MV, hist, 2, &t, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(t, 9, "penalties %d: %d", pen, t);
        cr_assert_eq(cn_sampler_add_bias(s, 9, -INFINITY, &err), CN_STATUS_OK);
        cr_assert_eq(cn_sampler_sample(s, l, MV, hist, 2, &t, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(t, 12, "penalties %d: %d", pen, t);
        /* a bias cannot bring back a token the mask took out */
        cr_assert_eq(cn_sampler_add_bias(s, 3, 100.0f, &err), CN_STATUS_OK);
        cr_assert_eq(cn_sampler_sample(s, l, MV, hist, 2, &t, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(t, 12, "penalties %d: %d", pen, t);
        /* cleared: the bias on 3 wins again */
        cn_sampler_set_mask(s, NULL, 0);
        cr_assert_eq(cn_sampler_sample(s, l, MV, hist, 2, &t, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(t, 3);
        cn_sampler_free(s);
    }
}

/* Temperature 1: the draws follow softmax over the allowed tokens alone (chi-square,
 * 3 categories, 6000 draws), and the reported log-probability is the raw model's over
 * the whole row. */
Test(grammar_mask, sampling_follows_the_masked_softmax) {
    float l[MV];
    row(l);
    uint32_t m[2];
    const int allowed[] = {7, 9, 12};
    mask_of(m, allowed, 3);
    double z = 0, zall = 0, p[3];
    for (int i = 0; i < 3; i++) z += exp(l[allowed[i]]);
    for (int i = 0; i < 3; i++) p[i] = exp(l[allowed[i]]) / z;
    for (int i = 0; i < MV; i++) zall += exp(l[i]);
    cn_sampler *s = sampler(1.0f, false);
    cn_sampler_set_mask(s, m, MV);
    int count[3] = {0};
    const int N = 6000;
    for (int k = 0; k < N; k++) {
        int32_t t = -1;
        cn_sample_info info;
        cn_error err = {0};
        cr_assert_eq(cn_sampler_sample(s, l, MV, NULL, 0, &t, &info, &err), CN_STATUS_OK, "%s", err.msg);
        int j = t == 7 ? 0 : t == 9 ? 1 : t == 12 ? 2 : -1;
        cr_assert_geq(j, 0, "drew %d, outside the mask", t);
        count[j]++;
        cr_assert_float_eq(info.logprob, (float)(l[t] - log(zall)), 1e-5, "logprob %g", info.logprob);
        cr_assert_eq(info.top[0].id, 3, "the raw top token (outside the mask) is 3");
    }
    double chi = 0;
    for (int i = 0; i < 3; i++) chi += pow(count[i] - N * p[i], 2) / (N * p[i]);
    cr_assert_lt(chi, 13.8, "chi-square %g (2 dof, p = 0.001)", chi); /* 13.82 */
    cn_sampler_free(s);
}

/* A mask that, with the chain, leaves nothing: an error naming the grammar, never a
 * crash; a mask narrower than the vocabulary bans the ids past it. */
Test(grammar_mask, nothing_left_is_an_error) {
    float l[MV];
    row(l);
    uint32_t m[2] = {0, 0};
    for (int pen = 0; pen < 2; pen++) {
        cn_sampler *s = sampler(pen ? 0.7f : 0.0f, pen);
        cn_sampler_set_mask(s, m, MV);
        int32_t t = -1;
        cn_error err = {0};
        cr_assert_eq(cn_sampler_sample(s, l, MV, NULL, 0, &t, NULL, &err), CN_STATUS_INVALID_ARG);
        cr_assert(strstr(err.msg, "grammar"), "%s", err.msg);
        const int one[] = {20};
        mask_of(m, one, 1);
        cr_assert_eq(cn_sampler_add_bias(s, 20, -INFINITY, &err), CN_STATUS_OK);
        cr_assert_eq(cn_sampler_sample(s, l, MV, NULL, 0, &t, NULL, &err), CN_STATUS_INVALID_ARG);
        cr_assert(strstr(err.msg, "grammar"), "%s", err.msg);
        const int far[] = {39};
        mask_of(m, far, 1);
        cn_sampler_set_mask(s, m, 39); /* 39 is past the mask's 39 bits */
        cr_assert_eq(cn_sampler_sample(s, l, MV, NULL, 0, &t, NULL, &err), CN_STATUS_INVALID_ARG);
        cn_sampler_set_mask(s, m, MV);
        cr_assert_eq(cn_sampler_sample(s, l, MV, NULL, 0, &t, NULL, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_eq(t, 39);
        m[0] = m[1] = 0;
        cn_sampler_free(s);
    }
}

/* ---- independent checks ---- */

/* The schema of k_schema, checked by hand on the parsed document. */
static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":10},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"blue\",\"cat\"]},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static bool schema_valid(const char *text, size_t n, char *why, size_t cap) {
    json_error_t je;
    json_t *j = json_loadb(text, n, JSON_ALLOW_NUL, &je);
    bool ok = false;
    if (!j) snprintf(why, cap, "not JSON: %s", je.text);
    else if (!json_is_object(j)) snprintf(why, cap, "not an object");
    else {
        const char *key;
        json_t *v;
        ok = true;
        json_object_foreach(j, key, v) {
            if (strcmp(key, "name") && strcmp(key, "age") && strcmp(key, "tags")) {
                snprintf(why, cap, "extra key '%s'", key);
                ok = false;
            }
        }
        json_t *name = json_object_get(j, "name"), *age = json_object_get(j, "age"), *tags = json_object_get(j, "tags");
        if (ok && (!json_is_string(name) || utf8_chars(json_string_value(name), json_string_length(name)) > 10)) {
            snprintf(why, cap, "bad name");
            ok = false;
        }
        if (ok && (!json_is_integer(age) || json_integer_value(age) < 0 || json_integer_value(age) > 120)) {
            snprintf(why, cap, "bad age");
            ok = false;
        }
        if (ok && tags) {
            ok = json_is_array(tags) && json_array_size(tags) <= 3;
            for (size_t i = 0; ok && i < json_array_size(tags); i++) {
                const char *t = json_string_value(json_array_get(tags, i));
                ok = t && (!strcmp(t, "red") || !strcmp(t, "blue") || !strcmp(t, "cat"));
            }
            if (!ok) snprintf(why, cap, "bad tags");
        }
    }
    json_decref(j);
    return ok;
}

/* ---- one request under a grammar ---- */

static cn_grammar *compile(const cn_tokenizer *tok, cn_grammar_kind kind, const char *src, const char *const *choices,
                           size_t n_choices) {
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = kind;
    p.source = src;
    p.choices = choices;
    p.n_choices = n_choices;
    cn_grammar *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_grammar_compile(tok, &p, &g, &err), CN_STATUS_OK, "compile %s: %s", src ? src : "(choices)",
                 err.msg);
    return g;
}

typedef struct {
    int32_t tokens[512];
    int32_t n;
    char text[4096];
    size_t n_text;
    cn_finish_reason finish;
    cn_spec_stats st;
} outcome;

static void run_one(gt_env *e, const cn_spec_params *sp, const char *prompt, const cn_gen_params *gp, outcome *o) {
    cn_error err = {0};
    cn_gen *g = NULL;
    cr_assert_eq(cn_gen_create(e->tok, e->n_vocab, gp, &g, &err), CN_STATUS_OK, "%s", err.msg);
    int32_t n = 0;
    int32_t *ids = gt_tokenize(e->tok, prompt, true, &n);
    memset(o, 0, sizeof *o);
    const cn_status s = sp ? cn_generate_spec(&e->run, sp, 0, ids, n, 0, g, &o->st, &err)
                           : cn_generate(&e->run, 0, ids, n, 0, g, &err);
    cr_assert_eq(s, CN_STATUS_OK, "%s", err.msg);
    const int32_t *t = cn_gen_tokens(g, &o->n);
    cr_assert_leq(o->n, 512);
    memcpy(o->tokens, t, (size_t)o->n * sizeof *t);
    const char *txt = cn_gen_text(g, &o->n_text);
    cr_assert_lt(o->n_text, sizeof o->text);
    memcpy(o->text, txt, o->n_text);
    o->finish = cn_gen_finish_reason(g);
    cn_gen_free(g);
    free(ids);
}

static cn_gen_params params(cn_grammar *g, float temp, uint64_t seed, int32_t max_tokens) {
    cn_gen_params p = cn_gen_default_params();
    p.grammar = g;
    p.max_tokens = max_tokens;
    p.sampling.temperature = temp;
    p.sampling.seed = seed;
    p.sampling.top_k = 0;
    return p;
}

/* The tiny random-weight qwen2 that `make` builds next to this binary. */
static void open_tiny(gt_env *e, int32_t n_ctx, int32_t n_batch) {
    char exe[PATH_MAX], path[PATH_MAX + 32];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(n > 0);
    exe[n] = 0;
    snprintf(path, sizeof path, "%s/tiny/tiny-qwen2.gguf", dirname(exe));
    cr_assert_eq(access(path, R_OK), 0, "%s is missing: `make` builds it", path);
    cn_gguf *g = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_gguf_open(path, &g, &err), CN_STATUS_OK, "%s", err.msg);
    gt_open_gguf(e, g, n_ctx, n_batch, 1);
}

static const char *const k_regexes[] = {
    "(The|A|One) [a-z]{2,9}( [a-z]{2,9}){1,5}[.!]",
    "[0-9]{3}-[0-9]{4}",
    "(yes|no)(, [a-z]+)?",
    "[A-Z][a-z]{0,8} (is|was) [a-z ]{1,20}\\.",
};
#define N_REGEX (sizeof k_regexes / sizeof k_regexes[0])

/* Every output of every regex, seed and temperature is a sentence (or, cut by
 * max_tokens, a valid start) of the regex as PCRE2 reads it, and the grammar agrees. */
static void regexes_hold(gt_env *e, const char *model) {
    int stopped = 0;
    for (size_t r = 0; r < N_REGEX; r++) {
        cn_grammar *g = compile(e->tok, CN_GRAMMAR_REGEX, k_regexes[r], NULL, 0);
        for (uint64_t seed = 1; seed <= 4; seed++) {
            const float temp = seed == 1 ? 0.0f : 0.6f + 0.3f * (float)seed;
            cn_gen_params p = params(g, temp, seed, 64);
            outcome o;
            run_one(e, NULL, "Once upon a time", &p, &o);
            const int v = gt_pcre_verdict(k_regexes[r], o.text, o.n_text);
            cr_assert(o.finish == CN_FINISH_STOP || o.finish == CN_FINISH_LENGTH, "%s: finish %s", model,
                      cn_finish_reason_str(o.finish));
            if (o.finish == CN_FINISH_STOP) {
                cr_assert_eq(v, 1, "%s, /%s/, seed %llu: '%.*s' finished but PCRE2 does not match it", model,
                             k_regexes[r], (unsigned long long)seed, (int)o.n_text, o.text);
                cr_assert(cn_grammar_check_text(g, o.text, o.n_text));
                stopped++;
            } else {
                cr_assert_geq(v, 0, "%s, /%s/, seed %llu: '%.*s' is no start of a match", model, k_regexes[r],
                              (unsigned long long)seed, (int)o.n_text, o.text);
                cr_assert_eq(o.n, 64);
            }
        }
        cn_grammar_free(g);
    }
    cr_assert_gt(stopped, (int)N_REGEX, "%s: only %d outputs were complete", model, stopped);
}

Test(grammar_gen, regex_outputs_match_pcre2_stories, .timeout = 120) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    regexes_hold(&e, "stories260K");
    gt_close(&e);
}

Test(grammar_gen, regex_outputs_match_pcre2_random_weights, .timeout = 120) {
    gt_env e;
    open_tiny(&e, 256, 64);
    regexes_hold(&e, "tiny-qwen2");
    gt_close(&e);
}

/* Choices: exactly one of them, and the request ends itself ("stop") once the text is
 * one that no other choice continues. */
Test(grammar_gen, choice_is_one_of_the_list, .timeout = 60) {
    gt_env e;
    gt_open_stories(&e, 256, 64, 1);
    const char *const ch[] = {"red", "green", "blue", "light blue", "{\"a\": 1}"};
    cn_grammar *g = compile(e.tok, CN_GRAMMAR_CHOICE, NULL, ch, 5);
    int seen[5] = {0};
    for (uint64_t seed = 1; seed <= 16; seed++) {
        cn_gen_params p = params(g, 1.5f, seed, 64);
        outcome o;
        run_one(&e, NULL, "The sky was", &p, &o);
        cr_assert_eq(o.finish, CN_FINISH_STOP, "seed %llu: finish %s", (unsigned long long)seed,
                     cn_finish_reason_str(o.finish));
        int k = -1;
        for (int i = 0; i < 5; i++)
            if (strlen(ch[i]) == o.n_text && !memcmp(ch[i], o.text, o.n_text)) k = i;
        cr_assert_geq(k, 0, "seed %llu: '%.*s' is none of the choices", (unsigned long long)seed, (int)o.n_text,
                      o.text);
        seen[k]++;
    }
    int distinct = 0;
    for (int i = 0; i < 5; i++) distinct += seen[i] > 0;
    cr_assert_geq(distinct, 2, "temperature 1.5 over 16 seeds chose one answer only");
    cn_grammar_free(g);
    gt_close(&e);
}

/* A JSON Schema: every document that finished is valid (checked by hand, not by our
 * grammar), on a model that has never seen JSON and on random weights. */
Test(grammar_gen, json_schema_documents_validate, .timeout = 180) {
    for (int model = 0; model < 2; model++) {
        gt_env e;
        if (model == 0) gt_open_stories(&e, 512, 64, 1);
        else open_tiny(&e, 512, 64);
        cn_grammar *g = compile(e.tok, CN_GRAMMAR_JSON_SCHEMA, k_schema, NULL, 0);
        int stopped = 0;
        for (uint64_t seed = 1; seed <= 5; seed++) {
            cn_gen_params p = params(g, seed == 1 ? 0.0f : 0.9f, seed, 160);
            outcome o;
            run_one(&e, NULL, "Lily wrote down her name and age:", &p, &o);
            if (o.finish != CN_FINISH_STOP) continue;
            char why[256] = "";
            cr_assert(schema_valid(o.text, o.n_text, why, sizeof why), "model %d, seed %llu: %s in '%.*s'", model,
                      (unsigned long long)seed, why, (int)o.n_text, o.text);
            stopped++;
        }
        cr_assert_geq(stopped, 2, "model %d: only %d of 5 documents finished", model, stopped);
        cn_grammar_free(g);
        gt_close(&e);
    }
}

/* ---- speculation under a grammar: the same tokens as plain decoding ---- */

static void same(const outcome *a, const outcome *b, const char *what) {
    cr_assert_eq(b->n, a->n, "%s: %d tokens with speculation, %d without", what, b->n, a->n);
    for (int32_t i = 0; i < a->n; i++)
        cr_assert_eq(b->tokens[i], a->tokens[i], "%s: token %d is %d with speculation, %d without", what, i,
                     b->tokens[i], a->tokens[i]);
    cr_assert(a->n_text == b->n_text && !memcmp(a->text, b->text, a->n_text), "%s: texts differ", what);
    cr_assert_eq(a->finish, b->finish, "%s: finish differs", what);
}

/* Plain against lookup and a draft model (stories260K drafting for itself), greedy and
 * sampled, under grammar g; returns drafted and accepted summed. Greedy self-drafting
 * under the grammar must have every guess confirmed: the draft's guesses are masked by
 * the matcher advanced along the guesses before them, exactly as the verify rows are. */
static void spec_same(gt_env *e, gt_env *d, cn_grammar *g, const char *name, bool lookup_must_draft, int64_t *drafted,
                      int64_t *accepted) {
    static const char prompt[] = "the cat and the dog then the ball";
    for (int drafter = 0; drafter < 2; drafter++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            cn_gen_params p = params(g, seed == 1 ? 0.0f : 0.8f, seed, 96);
            outcome plain, spec;
            run_one(e, NULL, prompt, &p, &plain);
            cn_spec_params sp = cn_spec_default_params();
            sp.adaptive = false;
            sp.n_draft_max = 4;
            if (drafter) sp.draft = &d->run;
            else sp.lookup_n = 3;
            run_one(e, &sp, prompt, &p, &spec);
            char what[96];
            snprintf(what, sizeof what, "%s, %s, seed %llu", name, drafter ? "draft" : "lookup",
                     (unsigned long long)seed);
            same(&plain, &spec, what);
            if (drafter || lookup_must_draft) cr_assert_gt(spec.st.drafted, 0, "%s: nothing was drafted", what);
            /* (the guess whose token ends the request, the grammar done, is not counted as
             * kept: hence one may be missing) */
            if (drafter && seed == 1)
                cr_assert_geq(spec.st.accepted, spec.st.drafted - 1, "%s: greedy self-draft: %lld of %lld kept", what,
                              (long long)spec.st.accepted, (long long)spec.st.drafted);
            *drafted += spec.st.drafted;
            *accepted += spec.st.accepted;
        }
}

/* Long choices that repeat themselves (lookup finds guesses, some refused by the grammar,
 * some rejected by the sampler). */
Test(grammar_gen, speculation_same_tokens_choice, .timeout = 300) {
    gt_env e, d;
    gt_open_stories(&e, 512, 64, 1);
    gt_open_stories(&d, 512, 64, 1);
    const char *const ch[] = {
        "the cat and the dog and the cat and the dog and the cat and the dog.",
        "the cat and the ball then the cat and the ball then the tree.",
        "the dog then the dog then the big tree and the ball and the ball.",
    };
    cn_grammar *g = compile(e.tok, CN_GRAMMAR_CHOICE, NULL, ch, 3);
    int64_t drafted = 0, accepted = 0;
    spec_same(&e, &d, g, "choice", true, &drafted, &accepted);
    cr_assert_lt(accepted, drafted, "no guess was ever rejected: the rollback went untested");
    cn_grammar_free(g);
    gt_close(&d);
    gt_close(&e);
}

/* A regex whose text repeats, and the JSON Schema. */
Test(grammar_gen, speculation_same_tokens_regex_and_schema, .timeout = 300) {
    gt_env e, d;
    gt_open_stories(&e, 512, 64, 1);
    gt_open_stories(&d, 512, 64, 1);
    static const char re[] = "((the|a) (cat|dog|big tree|ball)( and| then)? ){3,12}\\.";
    cn_grammar *g = compile(e.tok, CN_GRAMMAR_REGEX, re, NULL, 0);
    int64_t drafted = 0, accepted = 0;
    spec_same(&e, &d, g, "regex", true, &drafted, &accepted);
    cn_grammar_free(g);
    g = compile(e.tok, CN_GRAMMAR_JSON_SCHEMA, k_schema, NULL, 0);
    spec_same(&e, &d, g, "schema", false, &drafted, &accepted);
    cn_grammar_free(g);
    cr_assert_lt(accepted, drafted, "no guess was ever rejected: the rollback went untested");
    gt_close(&d);
    gt_close(&e);
}

/* ---- the contract's edges ---- */

Test(grammar_gen, refusals) {
    gt_env e;
    gt_open_stories(&e, 128, 32, 2);
    /* numbers of one repeated digit, 1 to 8 long: one token of such digits (the pieces are
     * short) leaves the text complete with more allowed after it */
    static char nums[80][9];
    const char *choices[80];
    for (int d = 0; d < 10; d++)
        for (int w = 1; w <= 8; w++) {
            memset(nums[d * 8 + w - 1], '0' + d, (size_t)w);
            choices[d * 8 + w - 1] = nums[d * 8 + w - 1];
        }
    cn_grammar *g = compile(e.tok, CN_GRAMMAR_CHOICE, NULL, choices, 80);
    cn_error err = {0};
    cn_gen *gen = NULL;
    /* beam search: refused, naming the field */
    cn_gen_params p = params(g, 0.0f, 1, 8);
    p.beam.n_beams = 2;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &gen, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "grammar");
    cr_assert(strstr(err.msg, "beam"), "%s", err.msg);
    /* a token the grammar does not allow: refused, the request unchanged */
    p.beam.n_beams = 1;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &gen, &err), CN_STATUS_OK, "%s", err.msg);
    const int32_t prompt[] = {1};
    cr_assert_eq(cn_gen_begin(gen, prompt, 1, 0, &err), CN_STATUS_OK);
    /* the tokens a number may start with, by the grammar's own mask; the truth below is
     * only that a refused token changes nothing and that an allowed one is output */
    cn_grammar_matcher *m = NULL;
    cr_assert_eq(cn_grammar_matcher_new(g, &m, &err), CN_STATUS_OK);
    uint32_t mask[64];
    cr_assert_geq(64 * 32, e.n_vocab);
    cr_assert_eq(cn_grammar_matcher_mask(m, mask, 64, &err), CN_STATUS_OK);
    int32_t digit = -1, other = -1;
    for (int32_t i = 0; i < e.n_vocab; i++) {
        const bool in = mask[i / 32] >> (i % 32) & 1;
        char piece[64];
        const size_t np = cn_token_to_piece(e.tok, i, false, piece, sizeof piece);
        if (in && digit < 0) digit = i;
        if (!in && other < 0 && np > 0 && np < sizeof piece && !memchr("0123456789", piece[0], 10)) other = i;
    }
    cr_assert(digit >= 0 && other >= 0);
    char want[64];
    const size_t n_want = cn_token_to_piece(e.tok, digit, false, want, sizeof want);
    cr_assert(n_want > 0 && n_want < sizeof want);
    want[n_want] = 0;
    for (size_t i = 0; i < n_want; i++) cr_assert(want[i] >= '0' && want[i] <= '9', "token %d is '%s'", digit, want);
    cn_gen_token t = {.id = other};
    cn_gen_step step;
    cr_assert_eq(cn_gen_accept(gen, &t, -1, &step, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "grammar");
    cr_assert_eq(cn_gen_n_generated(gen), 0);
    /* an end of generation before the text is complete: refused too */
    t.id = cn_tokenizer_eos(e.tok);
    cr_assert_eq(cn_gen_accept(gen, &t, -1, &step, &err), CN_STATUS_INVALID_ARG);
    cr_assert(!cn_gen_done(gen));
    t.id = digit;
    cr_assert_eq(cn_gen_accept(gen, &t, -1, &step, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(!step.done);
    /* complete now: the end of generation ends it with "stop" */
    t.id = cn_tokenizer_eos(e.tok);
    cr_assert_eq(cn_gen_accept(gen, &t, -1, &step, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert(step.done);
    cr_assert_eq(step.finish, CN_FINISH_STOP);
    size_t nt = 0;
    cr_assert_str_eq(cn_gen_text(gen, &nt), want);
    cn_gen_free(gen);
    /* a logit bias that bans every token the grammar allows: an error, the request open */
    cn_logit_bias bias[512];
    int32_t nb = 0;
    for (int32_t i = 0; i < e.n_vocab && nb < 512; i++)
        if (mask[i / 32] >> (i % 32) & 1) bias[nb++] = (cn_logit_bias){i, -INFINITY};
    cr_assert(nb > 0 && nb < 512, "%d tokens start a number", nb);
    p.sampling.logit_bias = bias;
    p.sampling.n_logit_bias = nb;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &gen, &err), CN_STATUS_OK, "%s", err.msg);
    cr_assert_eq(cn_gen_begin(gen, prompt, 1, 0, &err), CN_STATUS_OK);
    float *row = calloc((size_t)e.n_vocab, sizeof *row);
    cr_assert_eq(cn_gen_push_logits(gen, row, &step, &err), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(err.msg, "grammar"), "%s", err.msg);
    cr_assert(!cn_gen_done(gen));
    free(row);
    cn_gen_free(gen);
    cn_grammar_matcher_free(m);
    cn_grammar_free(g);
    gt_close(&e);
}

/* A grammar compiled for another vocabulary is refused (the default model's 49k tokens
 * against stories260K's 512). */
Test(grammar_gen, another_vocabulary_is_refused) {
    const char *d = getenv("CINDER_MODELS"), *home = getenv("HOME");
    char path[1024];
    if (d && *d) snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", d);
    else snprintf(path, sizeof path, "%s/.cache/cinder/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    if (access(path, R_OK) != 0) cr_skip_test("no %s", path);
    cn_tokenizer *other = NULL;
    cn_error err = {0};
    cr_assert_eq(cn_tokenizer_load_file(path, &other, &err), CN_STATUS_OK, "%s", err.msg);
    const char *const ch[] = {"yes", "no"};
    cn_grammar *g = compile(other, CN_GRAMMAR_CHOICE, NULL, ch, 2);
    gt_env e;
    gt_open_stories(&e, 64, 16, 1);
    cn_gen_params p = params(g, 0.0f, 1, 8);
    cn_gen *gen = NULL;
    cr_assert_eq(cn_gen_create(e.tok, e.n_vocab, &p, &gen, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "grammar");
    gt_close(&e);
    cn_grammar_free(g);
    cn_tokenizer_free(other);
}

/* ---- the public path: cn_context_generate ---- */

/* The context's request with a grammar: the output matches, with lookup the same
 * result; beam search refused with the field named. The grammar outlives nothing it
 * needs: the caller frees it after the context's last request. */
Test(grammar_gen, context_generate, .timeout = 120) {
    const char *dd = getenv("CINDER_TESTDATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", dd && *dd ? dd : "../shared/testdata");
    cn_model *m = NULL;
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(path, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    cn_context_params cp = cn_context_default_params();
    cp.n_threads = 1;
    cp.n_ctx = 256;
    cn_context *c = NULL;
    cr_assert_eq(cn_context_create(m, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
    static const char re[] = "[A-Z][a-z]+( [a-z]+){2,6}\\.";
    cn_grammar *g = compile(cn_context_tokenizer(c), CN_GRAMMAR_REGEX, re, NULL, 0);
    cn_prompt pr = {.text = "Once upon a time"};
    for (uint64_t seed = 1; seed <= 3; seed++) {
        cn_gen_params p = params(g, 0.9f, seed, 48);
        cn_result a = {0}, b = {0};
        cr_assert_eq(cn_context_generate(c, &pr, &p, &a, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_geq(gt_pcre_verdict(re, a.text, a.n_text), a.finish_reason == CN_FINISH_STOP ? 1 : 0, "'%s'", a.text);
        p.lookup_n = 2;
        cr_assert_eq(cn_context_generate(c, &pr, &p, &b, &err), CN_STATUS_OK, "%s", err.msg);
        cr_assert_str_eq(a.text, b.text);
        cr_assert_eq(a.n_tokens, b.n_tokens);
        cr_assert_eq(a.finish_reason, b.finish_reason);
        cn_result_free(&a);
        cn_result_free(&b);
    }
    cn_gen_params p = params(g, 0.0f, 1, 8);
    p.beam.n_beams = 3;
    cn_result r = {0};
    cr_assert_eq(cn_context_generate(c, &pr, &p, &r, &err), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(err.param, "grammar");
    cn_result_free(&r);
    cn_grammar_free(g);
    cn_context_free(c);
    cn_model_free(m);
}
