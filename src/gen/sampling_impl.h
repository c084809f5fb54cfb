/* sampling_impl.h — what the three sampling files share and nobody else needs:
 * sampling_params.c (parameters, validation, the chain spec), sampling_stages.c (the
 * candidate array and the stage functions) and sampling.c (the per-request sampler that
 * runs the chain). Calls go one way: sampling.c calls the other two, sampling_stages.c
 * calls sampling_params.c, nothing calls back. The small predicates are inline because
 * they run on every token. Not for use outside src/gen/sampling*.c: the rest of the
 * library includes gen/sampling.h. */
#ifndef CN_GEN_SAMPLING_IMPL_H
#define CN_GEN_SAMPLING_IMPL_H

#include <float.h>
#include <math.h>

#include "gen/sampling.h"

/* ---- parameters (sampling_params.c) ---- */

static inline bool cn_sampling_penalties_on(const cn_sampling_params *p) {
    return p->penalty_last_n != 0 &&
           (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* Whether the stage would change anything with these parameters. */
static inline bool cn_sampling_stage_on(const cn_sampling_params *p, cn_sampler_stage s) {
    switch (s) {
    case CN_SAMPLER_LOGIT_BIAS: return p->n_logit_bias > 0;
    case CN_SAMPLER_PENALTIES: return cn_sampling_penalties_on(p);
    case CN_SAMPLER_TEMPERATURE: return p->temperature != 1.0f;
    case CN_SAMPLER_TOP_K: return p->top_k > 0;
    case CN_SAMPLER_TOP_P: return p->top_p < 1.0f;
    case CN_SAMPLER_MIN_P: return p->min_p > 0.0f;
    case CN_SAMPLER_TYPICAL: return p->typical_p < 1.0f;
    case CN_SAMPLER_N_STAGES: break;
    }
    return false;
}

static inline bool cn_sampling_chain_has(const cn_sampling_params *p, cn_sampler_stage s) {
    for (int32_t i = 0; i < p->n_chain; i++)
        if (p->chain[i] == s) return true;
    return false;
}

/* "%g", except that every NaN prints as "nan" (glibc prints some as "-nan"). Returns buf. */
const char *cn_sampling_fmt_float(char *buf, size_t n, double v);

/* ---- candidates (sampling_stages.c) ---- */

/* The canonical order: a ranks before b. A strict total order (ids are unique), so
 * selections have one answer. Logits are never NaN here. */
static inline bool cn_cand_before(const cn_candidate *a, const cn_candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* logit + d without reaching +inf (a huge bias saturates at FLT_MAX). */
static inline float cn_logit_add_sat(float l, float d) {
    float r = l + d;
    return r == INFINITY ? FLT_MAX : r;
}

/* The two errors of a logits row, for every path that reads one (CN_STATUS_INVALID_ARG). */
cn_status cn_cands_bad_logit(cn_error *err, int32_t i, float l);
cn_status cn_cands_no_finite_logit(cn_error *err, int32_t n_vocab);

#endif
