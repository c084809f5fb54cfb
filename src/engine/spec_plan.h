/* spec_plan.h — speculation planning for the engine's steps (spec_plan.c): the cost
 * model of a step by row count, which guesses each decoding completion gets before a
 * step (n-gram lookup or the draft model), and the draft model's cache kept in step with
 * what the target confirmed. Internal to src/engine/; the engine's lock is held around
 * every call. */
#ifndef CN_ENGINE_SPEC_PLAN_H
#define CN_ENGINE_SPEC_PLAN_H

#include "engine/engine_impl.h"

/* Records that a pass of `rows` rows took ms (step: the pass's number, for ageing). */
void cn_step_costs_add(step_costs *sc, int32_t rows, double ms, int64_t step);

/* Before a step: sets every decoding completion's guesses (seq.n_draft, seq.draft) for
 * it, running the draft model's passes when a request uses it, and grows e->logits for
 * the guessed rows. Never fails: without memory or with a failed draft pass a step just
 * runs fewer guesses. */
void cn_engine_plan_guesses(cn_engine *e);

/* After a step: each drafting completion's draft cache keeps its history and the guesses
 * the target confirmed; one that lost its slot loses its draft slot too. */
void cn_engine_draft_settle(cn_engine *e);

/* Completion c is going away: the draft slot holding its history is released. */
void cn_engine_draft_forget(cn_engine *e, engine_choice *c);

#endif
