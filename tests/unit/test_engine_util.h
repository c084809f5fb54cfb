/* test_engine_util.h — helpers for the engine tests: models, a recorder for the engine's
 * callbacks, the independent reference (the same request run alone through
 * cn_generate, the single-request loop of src/gen, on a cache of its own), and a
 * bit-exact comparison of tokens, logprobs, text and finish reason. */
#ifndef TEST_ENGINE_UTIL_H
#define TEST_ENGINE_UTIL_H

#include "gen/generate.h"
#include "model/model.h"
#include "engine/engine.h"

#define TE_MAX_TOK 160
#define TE_MAX_TEXT 4096

typedef struct {
    cn_gen_token tok[TE_MAX_TOK];
    int32_t n_tok;
    char text[TE_MAX_TEXT];
    size_t n_text;
    int n_finish; /* on_finish calls (must end at 1) */
    cn_finish_reason reason;
    cn_gen_timings t;
} te_result;

typedef struct {
    te_result r[CN_ENGINE_MAX_N];
    uint64_t id;
    int32_t n;        /* completions expected */
    int cancel_after; /* on_token: cancel this request once completion 0 has this
                         many tokens (-1: never) */
    cn_status cancel_status;
    cn_engine *e;
} te_req;

void te_req_init(te_req *q, int32_t n);
cn_engine_callbacks te_callbacks(te_req *q);
bool te_req_done(const te_req *q);

cn_model *te_load_stories(void);
/* The default model (SmolLM2-135M-Instruct Q4_1) from $CINDER_MODELS or
 * ~/.cache/cinder/models; asserts it exists (the setup script fetches it). */
cn_model *te_load_default(void);

/* Completion `choice` of r, run alone through cn_generate (kv_type cache, n_threads). */
void te_reference(const cn_model *m, const cn_engine_request *r, int32_t choice, int32_t n_threads, cn_type kv_type,
                  te_result *out);
/* Submits reqs[0..n) in order to e and steps until every one finished. */
void te_run(cn_engine *e, const cn_engine_request *reqs, te_req *out, int n);
/* Bit-exact: token ids, logprobs (and top lists), text, finish reason. */
void te_expect_same(const te_result *got, const te_result *want, const char *what);

cn_engine *te_engine(const cn_model *m, cn_engine_params p);

#endif
