/* engine_impl.h — the engine's own types, shared by engine.c (requests, the scheduler
 * loop, the forward pass of each step) and spec_plan.c (how many guesses each step
 * runs, and the draft model's passes). Not for use outside src/engine/: the rest of the
 * library sees the engine through cinder.h and engine/engine.h. */
#ifndef CN_ENGINE_IMPL_H
#define CN_ENGINE_IMPL_H

#include <pthread.h>

#include "core/pool.h"
#include "engine/engine.h"
#include "engine/sched.h"
#include "gen/generate.h"
#include "gen/spec.h"
#include "model/model.h"
#include "text/chat.h"

typedef struct engine_req engine_req;

/* Measured forward-pass time by row count: a smoothed figure for each of the most
 * recently seen row counts, linear in between. */
#define COST_POINTS 48
typedef struct {
    int32_t rows[COST_POINTS];
    double ms[COST_POINTS];
    int64_t used[COST_POINTS]; /* step of the last update (the oldest point is replaced) */
    int32_t n;
} step_costs;

typedef struct {
    cn_sched_seq seq;
    cn_gen *gen;
    engine_req *req;
    int32_t index;
    bool done;
    cn_spec_rate rate; /* its guesses' acceptance */
    int32_t plain_run; /* steps in a row with guesses found but none run */
    int32_t n_found;   /* guesses lookup found for the next step */
    int64_t d_len;     /* draft model: history positions its cache holds (slot seq.slot,
                          while the engine's draft owner of that slot is this one) */
    int64_t d_base;    /* after drafting: n_tokens then; d_guesses of the guesses sit in
                          the draft cache after it until the step settles them */
    int32_t d_guesses;
} engine_choice;

struct engine_req {
    uint64_t id;
    cn_engine_callbacks cb;
    int32_t *prompt; /* (n_prompt) */
    int32_t n_prompt;
    int32_t n, n_open;
    int32_t lookup_n, max_draft; /* speculation: 0 = off */
    bool use_draft;              /* speculation with the draft model */
    engine_choice *choices;      /* (n) */
    bool begun;                  /* cn_gen_begin called (first time in a forward pass) */
    bool admitted;               /* counted out of the queue */
    bool cancel_pending;
    bool dead; /* every completion finished: free at the end of the step */
    engine_req *next;
};

struct cn_engine {
    const cn_model *m;
    cn_engine_params p;
    cn_tokenizer *tok;
    cn_chat_template *chat; /* NULL: none cinder renders */
    const char *eot_stop;   /* chat's end of turn when it must be a stop string, or NULL */
    cn_pool *pool;          /* the threads of every forward pass, target and draft */
    cn_fwd *fwd;
    cn_kv *kv;
    cn_sched *sched;
    cn_batch batch;
    float *logits;        /* (n_logit_rows, n_vocab) */
    int64_t n_logit_rows; /* max_running, more while guesses need them */
    int32_t n_vocab, n_ctx;
    int64_t kv_capacity; /* positions the whole pool holds */

    pthread_mutex_t mu; /* recursive */
    pthread_cond_t cv;  /* signalled on submit, on finish and on stop */
    pthread_t thread;
    bool thread_started, stop;
    bool stepping; /* inside cn_engine_step (callbacks may re-enter) */

    engine_req *reqs;         /* open requests, submission order */
    int32_t n_reqs, n_queued; /* open; not yet admitted */
    uint64_t next_id;

    int64_t n_steps, n_rows, n_generated, kv_peak;
    int64_t n_drafted, n_accepted, n_spec_steps;
    step_costs costs;

    /* the draft model (p.draft): its context, cache (one slot per engine slot), batch */
    const cn_model *dm;
    cn_fwd *dfwd;
    cn_kv *dkv;
    cn_batch dbatch;
    float *dlogits;         /* (max_running, n_vocab) */
    engine_choice **downer; /* (max_running) whose history draft slot s holds, or NULL */
    step_costs dcosts;      /* draft pass times by row count */
    int64_t n_draft_passes;
};

#endif
