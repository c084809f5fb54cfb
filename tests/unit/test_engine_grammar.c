/* test_engine_grammar.c — grammars in the batched engine (src/engine) on stories260K:
 * every completion of a constrained request (n = 2) is a sentence of its grammar — by
 * the list itself for choices, by PCRE2 for regexes, by jansson for JSON objects — and
 * is bit-identical to the same completion run alone through cn_generate (the
 * single-request loop); an unconstrained request batched with constrained ones gives
 * the tokens it gives alone; lookup and draft-model speculation under a grammar change
 * no token. The grammar is freed by the test right after submitting: the engine's
 * completions hold their own references. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "test_engine_util.h"
#include "test_generate_util.h"

static cn_model *model;
static cn_tokenizer *tok;

static void setup(void) {
    model = te_load_stories();
    cn_error err = {0};
    cr_assert_eq(cn_tokenizer_from_model(model, &tok, &err), CN_STATUS_OK, "%s", err.msg);
}

static void teardown(void) {
    cn_tokenizer_free(tok);
    cn_model_free(model);
}

TestSuite(grammar_engine, .init = setup, .fini = teardown, .timeout = 240);

static cn_grammar *compile(cn_grammar_kind kind, const char *src, const char *const *choices, size_t n) {
    cn_grammar_params p = cn_grammar_default_params();
    p.kind = kind;
    p.source = src;
    p.choices = choices;
    p.n_choices = n;
    cn_grammar *g = NULL;
    cn_error err = {0};
    /* against the engine's own tokenizer would do as well: the same vocabulary */
    cr_assert_eq(cn_grammar_compile(tok, &p, &g, &err), CN_STATUS_OK, "%s", err.msg);
    return g;
}

static cn_engine_request request(const char *prompt, cn_grammar *g, int32_t n, uint64_t seed, float temp,
                                 int32_t max_tokens) {
    cn_engine_request r = cn_engine_request_default_params();
    r.prompt = prompt;
    r.n = n;
    r.gen.grammar = g;
    r.gen.max_tokens = max_tokens;
    r.gen.sampling.seed = seed;
    r.gen.sampling.temperature = temp;
    r.gen.sampling.top_k = 40;
    r.gen.sampling.n_logprobs = 2;
    return r;
}

/* Runs reqs together (freeing the grammars right after submitting) and checks every
 * completion against the same completion alone. */
static cn_engine_stats run_and_compare(cn_engine_params p, cn_engine_request *reqs, int n_req, te_req *out,
                                       cn_grammar **gs, int n_g, const char *what) {
    static te_result refs[8][CN_ENGINE_MAX_N];
    for (int i = 0; i < n_req; i++)
        for (int32_t c = 0; c < reqs[i].n; c++) te_reference(model, &reqs[i], c, 1, CN_TYPE_F16, &refs[i][c]);
    cn_engine *e = te_engine(model, p);
    cn_error err = {0};
    for (int i = 0; i < n_req; i++) {
        te_req_init(&out[i], reqs[i].n);
        out[i].e = e;
        cn_engine_callbacks cb = te_callbacks(&out[i]);
        cr_assert_eq(cn_engine_submit(e, &reqs[i], &cb, &out[i].id, &err), CN_STATUS_OK, "%s", err.msg);
    }
    for (int i = 0; i < n_g; i++) cn_grammar_free(gs[i]); /* the engine holds its own */
    for (int guard = 0;; guard++) {
        bool all = true;
        for (int i = 0; i < n_req; i++) all &= te_req_done(&out[i]);
        if (all) break;
        cr_assert_lt(guard, 100000);
        cr_assert_eq(cn_engine_step(e, NULL, &err), CN_STATUS_OK, "%s", err.msg);
    }
    char buf[128];
    for (int i = 0; i < n_req; i++)
        for (int32_t c = 0; c < reqs[i].n; c++) {
            snprintf(buf, sizeof buf, "%s: request %d, completion %d", what, i, c);
            te_expect_same(&out[i].r[c], &refs[i][c], buf);
        }
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_used, 0);
    cn_engine_free(e);
    return st;
}

static const char *const k_choices[] = {"yes", "no", "not sure", "no, never", "{\"ok\": true}"};

static void expect_choice_list(const te_result *r, const char *const *ch, size_t n, const char *what) {
    cr_assert_eq(r->reason, CN_FINISH_STOP, "%s: finish %s", what, cn_finish_reason_str(r->reason));
    for (size_t i = 0; i < n; i++)
        if (strlen(ch[i]) == r->n_text && !memcmp(ch[i], r->text, r->n_text)) return;
    cr_assert_fail("%s: '%.*s' is none of the choices", what, (int)r->n_text, r->text);
}

static void expect_choice(const te_result *r, const char *what) { expect_choice_list(r, k_choices, 5, what); }

/* A constrained request of two completions between two unconstrained ones, several
 * seeds: the unconstrained ones are what they are alone, the constrained ones are
 * choices and what they are alone. */
Test(grammar_engine, choice_n2_mixed_batch) {
    for (uint64_t seed = 1; seed <= 3; seed++) {
        cn_grammar *g = compile(CN_GRAMMAR_CHOICE, NULL, k_choices, 5);
        cn_engine_request reqs[3] = {
            request("Lily found a red ball", NULL, 1, 10 + seed, 0.9f, 24),
            request("Is the sky green?", g, 2, seed, 1.2f, 24),
            request("Tom and Sue went to the park", NULL, 1, 20 + seed, 0.7f, 24),
        };
        static te_req out[3];
        cn_engine_params p = cn_engine_default_params();
        p.block_tokens = 4;
        run_and_compare(p, reqs, 3, out, &g, 1, "choice, mixed");
        expect_choice(&out[1].r[0], "completion 0");
        expect_choice(&out[1].r[1], "completion 1");
    }
}

/* Regexes with n = 2 beside an unconstrained request, every output checked by PCRE2. */
Test(grammar_engine, regex_n2_mixed_batch) {
    static const char *const res[] = {"(The|A) [a-z]{2,9}( [a-z]{2,9}){1,5}[.!]", "[0-9]{3}-[0-9]{4}"};
    for (int k = 0; k < 2; k++) {
        cn_grammar *g = compile(CN_GRAMMAR_REGEX, res[k], NULL, 0);
        cn_engine_request reqs[2] = {
            request("Once upon a time", g, 2, 3 + (uint64_t)k, 1.0f, 48),
            request("Once upon a time", NULL, 1, 3 + (uint64_t)k, 1.0f, 48),
        };
        static te_req out[2];
        run_and_compare(cn_engine_default_params(), reqs, 2, out, &g, 1, res[k]);
        for (int c = 0; c < 2; c++) {
            const te_result *r = &out[0].r[c];
            const int v = gt_pcre_verdict(res[k], r->text, r->n_text);
            cr_assert_geq(v, r->reason == CN_FINISH_STOP ? 1 : 0, "/%s/ completion %d: '%.*s' (%s)", res[k], c,
                          (int)r->n_text, r->text, cn_finish_reason_str(r->reason));
        }
    }
}

/* json_object with n = 2: every finished document parses (jansson) as an object. */
Test(grammar_engine, json_object_n2) {
    cn_grammar *g = compile(CN_GRAMMAR_JSON_OBJECT, NULL, NULL, 0);
    cn_engine_request reqs[2] = {
        request("Lily wrote:", g, 2, 7, 0.8f, 120),
        request("Lily wrote:", NULL, 1, 7, 0.8f, 40),
    };
    static te_req out[2];
    run_and_compare(cn_engine_default_params(), reqs, 2, out, &g, 1, "json_object");
    for (int c = 0; c < 2; c++) {
        const te_result *r = &out[0].r[c];
        if (r->reason != CN_FINISH_STOP) continue;
        json_error_t je;
        json_t *j = json_loadb(r->text, r->n_text, JSON_ALLOW_NUL, &je);
        cr_assert(j && json_is_object(j), "completion %d: '%.*s': %s", c, (int)r->n_text, r->text, je.text);
        json_decref(j);
    }
}

/* Speculation under a grammar: lookup and the draft model (stories260K drafting for
 * itself), n = 2, beside an unconstrained speculating request: every token as alone
 * without speculation. */
static void spec_case(bool draft) {
    const char *const ch[] = {
        "the cat and the dog and the cat and the dog and the cat and the dog.",
        "the cat and the ball then the cat and the ball then the tree.",
        "the dog then the dog then the big tree and the ball and the ball.",
    };
    int64_t drafted = 0, accepted = 0;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        cn_grammar *g = compile(CN_GRAMMAR_CHOICE, NULL, ch, 3);
        cn_engine_request reqs[2] = {
            request("the cat and the dog then the ball", g, 2, seed, seed == 1 ? 0.0f : 0.9f, 120),
            request("the cat and the dog then the ball", NULL, 1, seed, 0.9f, 40),
        };
        for (int i = 0; i < 2; i++) {
            reqs[i].lookup_n = draft ? 0 : 3;
            reqs[i].draft = draft;
            reqs[i].max_draft = 4;
        }
        cn_engine_params p = cn_engine_default_params();
        p.spec_fixed = true;
        if (draft) p.draft = model;
        static te_req out[2];
        const cn_engine_stats st = run_and_compare(p, reqs, 2, out, &g, 1, draft ? "draft model" : "lookup");
        expect_choice_list(&out[0].r[0], ch, 3, "completion 0");
        expect_choice_list(&out[0].r[1], ch, 3, "completion 1");
        drafted += st.n_drafted;
        accepted += st.n_accepted;
    }
    cr_assert_gt(accepted, 0, "no guess was confirmed");
    cr_assert_lt(accepted, drafted, "no guess was rejected");
}

Test(grammar_engine, lookup_speculation_same_tokens) { spec_case(false); }
Test(grammar_engine, draft_model_speculation_same_tokens) { spec_case(true); }

/* Beam search with a grammar is refused at submit (the engine refuses beams at all). */
Test(grammar_engine, refusals) {
    cn_engine *e = te_engine(model, cn_engine_default_params());
    const char *const ch[] = {"a", "b"};
    cn_grammar *g = compile(CN_GRAMMAR_CHOICE, NULL, ch, 2);
    cn_engine_request r = request("Once", g, 1, 1, 0.0f, 4);
    r.gen.beam.n_beams = 2;
    cn_error err = {0};
    uint64_t id = 0;
    cr_assert_neq(cn_engine_submit(e, &r, NULL, &id, &err), CN_STATUS_OK);
    cn_grammar_free(g);
    cn_engine_free(e);
}
