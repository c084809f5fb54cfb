/* sampling.c — the sampler chain: parameters and their validation, the stage functions,
 * and the per-request cn_sampler. It must not know models, tokenizers or threads: one
 * logits row in, one token id out.
 *
 * The chain. Default order (HF transformers / vLLM): logit bias -> penalties ->
 * temperature -> top-k -> top-p -> min-p -> typical -> softmax -> draw. llama.cpp's order
 * (the "llama.cpp" preset) runs temperature last: logit bias -> penalties -> top-k ->
 * typical -> top-p -> min-p -> temperature -> softmax -> draw. Any order of distinct
 * stages can be given; softmax and the draw always close it. Every stage works on one
 * candidate array (id, logit, p) and either changes logits or drops candidates; a stage
 * that needs probabilities takes the softmax of the candidates still present, so
 * "probability" always means "within what earlier stages kept".
 *
 * Canonical order: logit descending, then token id ascending. It decides top-k ties,
 * greedy ties (lowest id wins), and the order of the inverse-CDF draw, so the same logits,
 * parameters and seed give the same token on every platform, whatever physical order the
 * selection algorithms leave the array in. Nothing sorts the vocabulary: top-k is a
 * quickselect (median of three; a range that survives 2 log2 n rounds is sorted instead),
 * and top-p, typical and the draw find the token where the cumulative mass crosses their
 * threshold by partitioning on the canonical order and comparing the mass on each side
 * (expected O(n) whatever the shape of the distribution), so "cumulative probability in
 * canonical order" is exact in meaning but summed per partition, in double.
 *
 * The top-p rule. Keep the smallest canonical prefix whose cumulative probability reaches
 * top_p, then renormalize. Probabilities are floats summed in double, and the prefix
 * reaches top_p when  sum >= top_p * (1 - 1e-6)  (CN_TOP_P_REL_EPS). The slack absorbs the
 * rounding of exp and of the normalization (a few 1e-7 relative), so a token whose
 * inclusion makes the mass exactly top_p is the last one kept and the next is dropped:
 * with p = .50/.25/.15/.10 and top_p = 0.9, {.50, .25, .15} is kept even if the sum comes
 * out as 0.8999999. The price: a prefix that falls short of top_p by less than one part in
 * a million also counts as reaching it. Typical sampling uses the same rule over its own
 * order (|-log p - H| ascending, then id).
 *
 * Temperature 0 is greedy: the temperature stage keeps only the canonical first candidate
 * (no division). Bans are absolute: a -inf logit (from the model or from logit_bias)
 * removes the candidate, and validation refuses a chain that would skip logit_bias. */
#include "gen/sampling.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/core.h"
#include "gen/rng.h"

/* ---- parameters ---- */

static const cn_sampler_stage default_chain[] = {
    CN_SAMPLER_LOGIT_BIAS, CN_SAMPLER_PENALTIES, CN_SAMPLER_TEMPERATURE, CN_SAMPLER_TOP_K,
    CN_SAMPLER_TOP_P,      CN_SAMPLER_MIN_P,     CN_SAMPLER_TYPICAL,
};

/* llama.cpp's common_params_sampling default order, less the samplers cinder lacks
 * (dry, top_n_sigma, xtc), with its always-first logit bias made explicit. */
static const cn_sampler_stage llamacpp_chain[] = {
    CN_SAMPLER_LOGIT_BIAS, CN_SAMPLER_PENALTIES, CN_SAMPLER_TOP_K,       CN_SAMPLER_TYPICAL,
    CN_SAMPLER_TOP_P,      CN_SAMPLER_MIN_P,     CN_SAMPLER_TEMPERATURE,
};

static const struct {
    const char *name;
    cn_sampler_stage stage;
} stage_names[] = {
    {"logit_bias", CN_SAMPLER_LOGIT_BIAS},   {"penalties", CN_SAMPLER_PENALTIES},
    {"temperature", CN_SAMPLER_TEMPERATURE}, {"temp", CN_SAMPLER_TEMPERATURE},
    {"top_k", CN_SAMPLER_TOP_K},             {"top_p", CN_SAMPLER_TOP_P},
    {"min_p", CN_SAMPLER_MIN_P},             {"typical", CN_SAMPLER_TYPICAL},
    {"typical_p", CN_SAMPLER_TYPICAL},       {"typ_p", CN_SAMPLER_TYPICAL},
};

const char *cn_sampler_stage_name(cn_sampler_stage s) {
    switch (s) {
    case CN_SAMPLER_LOGIT_BIAS: return "logit_bias";
    case CN_SAMPLER_PENALTIES: return "penalties";
    case CN_SAMPLER_TEMPERATURE: return "temperature";
    case CN_SAMPLER_TOP_K: return "top_k";
    case CN_SAMPLER_TOP_P: return "top_p";
    case CN_SAMPLER_MIN_P: return "min_p";
    case CN_SAMPLER_TYPICAL: return "typical";
    case CN_SAMPLER_N_STAGES: break;
    }
    return "?";
}

cn_sampling_params cn_sampling_default_params(void) {
    cn_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.typical_p = 1.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = -1;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    p.seed = CN_SAMPLING_SEED_RANDOM;
    p.n_logprobs = -1;
    p.ignore_eos = false;
    p.n_chain = (int32_t)CN_ARRAY_LEN(default_chain);
    memcpy(p.chain, default_chain, sizeof default_chain);
    return p;
}

static bool penalties_on(const cn_sampling_params *p) {
    return p->penalty_last_n != 0 && (p->repetition_penalty != 1.0f ||
                                      p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* Whether the stage would change anything with these parameters. */
static bool stage_on(const cn_sampling_params *p, cn_sampler_stage s) {
    switch (s) {
    case CN_SAMPLER_LOGIT_BIAS: return p->n_logit_bias > 0;
    case CN_SAMPLER_PENALTIES: return penalties_on(p);
    case CN_SAMPLER_TEMPERATURE: return p->temperature != 1.0f;
    case CN_SAMPLER_TOP_K: return p->top_k > 0;
    case CN_SAMPLER_TOP_P: return p->top_p < 1.0f;
    case CN_SAMPLER_MIN_P: return p->min_p > 0.0f;
    case CN_SAMPLER_TYPICAL: return p->typical_p < 1.0f;
    case CN_SAMPLER_N_STAGES: break;
    }
    return false;
}

static bool chain_has(const cn_sampling_params *p, cn_sampler_stage s) {
    for (int32_t i = 0; i < p->n_chain; i++)
        if (p->chain[i] == s) return true;
    return false;
}

/* "%g", except that every NaN prints as "nan" (glibc prints some as "-nan"). */
static const char *fmt_float(char *buf, size_t n, double v) {
    if (isnan(v))
        snprintf(buf, n, "nan");
    else
        snprintf(buf, n, "%g", v);
    return buf;
}

static cn_status bad_float(cn_error *err, const char *name, double v, const char *range) {
    char b[32];
    return cn_err_param(err, CN_STATUS_INVALID_ARG, name, "%s = %s is out of range: must be %s", name,
                  fmt_float(b, sizeof b, v), range);
}

static size_t chain_str(const cn_sampling_params *p, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < p->n_chain && at < n; i++) {
        int w = snprintf(buf + at, n - at, "%s%s", i ? ";" : "", cn_sampler_stage_name(p->chain[i]));
        if (w < 0) break;
        at += (size_t)w;
    }
    return at;
}

cn_status cn_sampling_validate(const cn_sampling_params *p, int32_t n_vocab, cn_error *err) {
    if (!p) return cn_err(err, CN_STATUS_INVALID_ARG, "sampling params are NULL");
    if (n_vocab < 0)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_vocab", "n_vocab = %d is out of range: must be >= 0",
                      (int)n_vocab);
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return bad_float(err, "temperature", p->temperature, "in [0, 100] (0 = greedy, 1 = off)");
    if (p->top_k < 0)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "top_k", "top_k = %d is out of range: must be >= 0 (0 = off)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return bad_float(err, "top_p", p->top_p, "in (0, 1] (1 = off)");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return bad_float(err, "min_p", p->min_p, "in [0, 1] (0 = off)");
    if (!(p->typical_p > 0.0f && p->typical_p <= 1.0f))
        return bad_float(err, "typical_p", p->typical_p, "in (0, 1] (1 = off)");
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f))
        return bad_float(err, "repetition_penalty", p->repetition_penalty, "in (0, 10] (1 = off)");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad_float(err, "presence_penalty", p->presence_penalty, "in [-2, 2] (0 = off)");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad_float(err, "frequency_penalty", p->frequency_penalty, "in [-2, 2] (0 = off)");
    if (p->penalty_last_n < -1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "penalty_last_n", "penalty_last_n = %d is out of range: must be >= -1 (-1 = all, 0 = off)",
                      (int)p->penalty_last_n);
    if (p->n_logit_bias < 0 || p->n_logit_bias > CN_SAMPLING_MAX_LOGIT_BIAS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "n_logit_bias = %d is out of range: must be in [0, %d]",
                      (int)p->n_logit_bias, CN_SAMPLING_MAX_LOGIT_BIAS);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "logit_bias is NULL but n_logit_bias = %d",
                      (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const cn_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || (n_vocab > 0 && b->token >= n_vocab)) {
            if (n_vocab > 0)
                return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "logit_bias[%d]: token %d is out of range: must be in [0, %d)",
                              (int)i, (int)b->token, (int)n_vocab);
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "logit_bias[%d]: token %d is out of range: must be >= 0", (int)i,
                          (int)b->token);
        }
        if (isnan(b->bias) || b->bias == INFINITY) {
            char f[32];
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "logit_bias[%d] (token %d) = %s is out of range: must be finite or -inf",
                          (int)i, (int)b->token, fmt_float(f, sizeof f, b->bias));
        }
    }
    if (p->n_logprobs < -1 || p->n_logprobs > CN_SAMPLING_MAX_LOGPROBS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_logprobs", "n_logprobs = %d is out of range: must be in [-1, %d] (-1 = off)",
                      (int)p->n_logprobs, CN_SAMPLING_MAX_LOGPROBS);
    if (p->n_chain < 0 || p->n_chain > CN_SAMPLER_N_STAGES)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_chain", "n_chain = %d is out of range: must be in [0, %d]",
                      (int)p->n_chain, CN_SAMPLER_N_STAGES);
    bool seen[CN_SAMPLER_N_STAGES] = {false};
    for (int32_t i = 0; i < p->n_chain; i++) {
        int s = (int)p->chain[i];
        if (s < 0 || s >= CN_SAMPLER_N_STAGES)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "chain", "chain[%d] = %d is not a sampler stage: must be in [0, %d)", (int)i, s,
                          CN_SAMPLER_N_STAGES);
        if (seen[s])
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "chain", "sampler chain: '%s' appears twice",
                          cn_sampler_stage_name(p->chain[i]));
        seen[s] = true;
    }
    for (int s = 0; s < CN_SAMPLER_N_STAGES; s++) {
        if (stage_on(p, (cn_sampler_stage)s) && !seen[s]) {
            char c[128];
            chain_str(p, c, sizeof c);
            return cn_err_param(err, CN_STATUS_INVALID_ARG, cn_sampler_stage_name((cn_sampler_stage)s),
                                "%s is set but '%s' is not in the sampler chain (%s)",
                          cn_sampler_stage_name((cn_sampler_stage)s),
                          cn_sampler_stage_name((cn_sampler_stage)s), c[0] ? c : "empty");
        }
    }
    return CN_STATUS_OK;
}

static bool lookup_stage(const char *name, size_t len, cn_sampler_stage *out) {
    for (size_t i = 0; i < CN_ARRAY_LEN(stage_names); i++) {
        if (strlen(stage_names[i].name) == len && !strncasecmp(stage_names[i].name, name, len)) {
            *out = stage_names[i].stage;
            return true;
        }
    }
    return false;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t';
}

cn_status cn_sampling_set_chain(cn_sampling_params *p, const char *spec, cn_error *err) {
    if (!p || !spec) return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: no spec given");
    while (is_space(*spec)) spec++;
    size_t len = strlen(spec);
    while (len > 0 && is_space(spec[len - 1])) len--;

    cn_sampler_stage chain[CN_SAMPLER_N_STAGES];
    int32_t n = 0;
    static const char *const defaults[] = {"default", "hf", "vllm", "transformers"};
    for (size_t i = 0; i < CN_ARRAY_LEN(defaults); i++) {
        if (strlen(defaults[i]) == len && !strncasecmp(spec, defaults[i], len)) {
            memcpy(p->chain, default_chain, sizeof default_chain);
            p->n_chain = (int32_t)CN_ARRAY_LEN(default_chain);
            return CN_STATUS_OK;
        }
    }
    if ((len == 9 && !strncasecmp(spec, "llama.cpp", 9)) ||
        (len == 8 && !strncasecmp(spec, "llamacpp", 8))) {
        memcpy(p->chain, llamacpp_chain, sizeof llamacpp_chain);
        p->n_chain = (int32_t)CN_ARRAY_LEN(llamacpp_chain);
        return CN_STATUS_OK;
    }

    bool seen[CN_SAMPLER_N_STAGES] = {false};
    size_t at = 0;
    while (at < len) {
        size_t end = at;
        while (end < len && spec[end] != ';' && spec[end] != ',') end++;
        size_t a = at, b = end;
        while (a < b && is_space(spec[a])) a++;
        while (b > a && is_space(spec[b - 1])) b--;
        if (a == b)
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: empty stage name in '%.*s'",
                          (int)CN_MIN(len, 100), spec);
        cn_sampler_stage st;
        if (!lookup_stage(spec + a, b - a, &st))
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "samplers: unknown stage '%.*s' (stages: logit_bias, penalties, "
                          "temperature, top_k, top_p, min_p, typical; presets: default, llama.cpp)",
                          (int)CN_MIN(b - a, 40), spec + a);
        if (seen[st])
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: '%s' appears twice",
                          cn_sampler_stage_name(st));
        seen[st] = true;
        chain[n++] = st;
        at = end + 1;
        if (end < len && end + 1 == len)
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: empty stage name in '%.*s'",
                          (int)CN_MIN(len, 100), spec);
    }
    int32_t k = 0;
    if (!seen[CN_SAMPLER_LOGIT_BIAS]) p->chain[k++] = CN_SAMPLER_LOGIT_BIAS;
    for (int32_t i = 0; i < n; i++) p->chain[k++] = chain[i];
    p->n_chain = k;
    return CN_STATUS_OK;
}

/* ---- candidate arrays ---- */

/* The canonical order: a ranks before b. A strict total order (ids are unique), so
 * selections have one answer. Logits are never NaN here. */
static inline bool before(const cn_candidate *a, const cn_candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_canonical(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static inline void swap_cand(cn_candidate *a, cn_candidate *b) {
    cn_candidate t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[lo..hi) so that a[lo..k) holds its (k - lo) canonically-first elements, in
 * no particular order. Quickselect with a median-of-three pivot; a range that survives
 * 2 log2(n) + 8 rounds (adversarial input) is sorted instead. */
static void select_first(cn_candidate *a, size_t lo, size_t hi, size_t k) {
    int budget = 8;
    for (size_t n = hi - lo; n > 1; n >>= 1) budget += 2;
    while (lo < k && k < hi && hi - lo > 16) {
        if (budget-- == 0) break;
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (before(&a[mid], &a[lo])) swap_cand(&a[mid], &a[lo]);
        if (before(&a[last], &a[lo])) swap_cand(&a[last], &a[lo]);
        if (before(&a[last], &a[mid])) swap_cand(&a[last], &a[mid]);
        swap_cand(&a[mid], &a[last]); /* the median becomes the pivot, at the end */
        const cn_candidate piv = a[last];
        size_t st = lo;
        for (size_t i = lo; i < last; i++)
            if (before(&a[i], &piv)) swap_cand(&a[i], &a[st++]);
        swap_cand(&a[st], &a[last]);
        /* a[lo..st) rank before the pivot, a[st] is it, a(st..hi) rank after. */
        if (k == st || k == st + 1) return;
        if (k < st)
            hi = st;
        else
            lo = st + 1;
    }
    if (lo < k && k < hi) qsort(a + lo, hi - lo, sizeof *a, cmp_canonical);
}

void cn_cands_sort_prefix(cn_cands *c, size_t m) {
    if (m > c->n) m = c->n;
    if (m <= c->n_sorted) return;
    if (m < c->n) select_first(c->data, c->n_sorted, c->n, m);
    qsort(c->data + c->n_sorted, m - c->n_sorted, sizeof *c->data, cmp_canonical);
    c->n_sorted = m;
    c->by_id = false;
}

static inline bool crosses(double cum, double target, bool strict) {
    return strict ? cum > target : cum >= target;
}

/* Over a[0..n) in canonical order, finds the first element e whose cumulative mass
 * (p summed up to and including e) crosses target: > target if strict, >= otherwise.
 * Partitions around median-of-three pivots and compares the mass of the side before the
 * pivot with the target, recursing into one side. On return the elements ranking before e
 * are a[0..i) (in no order) and e is a[i]; returns i, or n when the whole mass stays
 * below target (rounding). */
static size_t mass_find(cn_candidate *a, size_t n, double target, bool strict) {
    size_t lo = 0, hi = n;
    int budget = 8;
    for (size_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi - lo > 16 && budget-- > 0) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (before(&a[mid], &a[lo])) swap_cand(&a[mid], &a[lo]);
        if (before(&a[last], &a[lo])) swap_cand(&a[last], &a[lo]);
        if (before(&a[last], &a[mid])) swap_cand(&a[last], &a[mid]);
        swap_cand(&a[mid], &a[last]);
        const cn_candidate piv = a[last];
        size_t st = lo;
        double mass_before = 0.0;
        for (size_t i = lo; i < last; i++) {
            if (before(&a[i], &piv)) {
                mass_before += a[i].p;
                swap_cand(&a[i], &a[st++]);
            }
        }
        swap_cand(&a[st], &a[last]);
        if (crosses(mass_before, target, strict)) {
            hi = st; /* crosses inside a[lo..st) */
        } else if (crosses(mass_before + piv.p, target, strict)) {
            return st;
        } else {
            target -= mass_before + piv.p;
            lo = st + 1;
        }
    }
    /* A short range (or an adversarial one): sort it and walk. */
    qsort(a + lo, hi - lo, sizeof *a, cmp_canonical);
    double cum = 0.0;
    for (size_t i = lo; i < hi; i++) {
        cum += a[i].p;
        if (crosses(cum, target, strict)) return i;
    }
    /* Not crossed in the range the partitions pointed at (sums in another order rounded
     * differently): the boundary is the next element, or nothing if there is none. */
    return hi;
}

/* The index in c->data of the canonical crossing element (see mass_find) of c's
 * normalized probabilities; c->n when none crosses. Walks the sorted prefix first, then
 * partitions the rest; the candidates ranking before the result end up in front of it. */
static size_t crossing(cn_cands *c, double target, bool strict) {
    double cum = 0.0;
    for (size_t i = 0; i < c->n_sorted; i++) {
        cum += c->data[i].p;
        if (crosses(cum, target, strict)) return i;
    }
    size_t rest = c->n - c->n_sorted;
    if (rest == 0) return c->n;
    c->by_id = false;
    return c->n_sorted + mass_find(c->data + c->n_sorted, rest, target - cum, strict);
}

/* The two errors of a logits row, for every path that reads one. */
static cn_status bad_logit(cn_error *err, int32_t i, float l) {
    char f[32];
    return cn_err(err, CN_STATUS_INVALID_ARG, "logit of token %d is %s", (int)i, fmt_float(f, sizeof f, l));
}

static cn_status no_finite_logit(cn_error *err, int32_t n_vocab) {
    return cn_err(err, CN_STATUS_INVALID_ARG, "no token has a finite logit (n_vocab = %d)", (int)n_vocab);
}

static cn_status all_banned(cn_error *err) { return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias bans every token"); }

cn_status cn_cands_init(cn_cands *c, cn_candidate *buf, const float *logits, int32_t n_vocab,
                        cn_error *err) {
    size_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) return bad_logit(err, i, l);
        if (l == -INFINITY) continue;
        buf[n].id = i;
        buf[n].logit = l;
        buf[n].p = 0.0f;
        n++;
    }
    if (n == 0) return no_finite_logit(err, n_vocab);
    c->data = buf;
    c->n = n;
    c->n_sorted = 0;
    c->normalized = false;
    c->by_id = n == (size_t)n_vocab;
    return CN_STATUS_OK;
}

/* Removes the candidates whose logit is -inf, keeping the order of the rest (which keeps
 * the sorted-prefix invariant: a stable filter of a sorted prefix that dominates the rest
 * is again one). */
static void drop_neg_inf(cn_cands *c) {
    size_t j = 0, js = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->data[i].logit == -INFINITY) continue;
        if (i < c->n_sorted) js++;
        c->data[j++] = c->data[i];
    }
    if (j != c->n) c->by_id = false;
    c->n = j;
    c->n_sorted = js;
}

/* After a filter of a normalized set: divides each kept p by the kept mass. */
static void renormalize(cn_cands *c, double mass) {
    if (mass > 0)
        for (size_t i = 0; i < c->n; i++) c->data[i].p = (float)((double)c->data[i].p / mass);
    c->normalized = true;
}

/* logit + d without reaching +inf (a huge bias saturates at FLT_MAX). */
static inline float add_sat(float l, float d) {
    float r = l + d;
    return r == INFINITY ? FLT_MAX : r;
}

static const cn_logit_bias *find_bias(const cn_logit_bias *b, size_t n, int32_t token) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && b[lo].token == token ? &b[lo] : NULL;
}

void cn_stage_logit_bias(cn_cands *c, const cn_logit_bias *bias, size_t n_bias) {
    if (n_bias == 0) return;
    bool banned = false;
    if (c->by_id) {
        for (size_t k = 0; k < n_bias; k++) {
            int32_t t = bias[k].token;
            if (t < 0 || (size_t)t >= c->n) continue;
            c->data[t].logit = add_sat(c->data[t].logit, bias[k].bias);
            banned |= c->data[t].logit == -INFINITY;
        }
    } else {
        for (size_t i = 0; i < c->n; i++) {
            const cn_logit_bias *b = find_bias(bias, n_bias, c->data[i].id);
            if (!b) continue;
            c->data[i].logit = add_sat(c->data[i].logit, b->bias);
            banned |= c->data[i].logit == -INFINITY;
        }
    }
    c->n_sorted = 0;
    c->normalized = false;
    if (banned) drop_neg_inf(c);
}

static inline void penalize(cn_candidate *cd, int32_t count, float repetition, float presence,
                            float frequency, bool *neg_inf) {
    float l = cd->logit;
    l = l > 0.0f ? l / repetition : l * repetition;
    l -= presence + frequency * (float)count;
    if (l == INFINITY) l = FLT_MAX;
    *neg_inf |= l == -INFINITY;
    cd->logit = l;
}

void cn_stage_penalties(cn_cands *c, const int32_t *window, size_t n_window, float repetition,
                        float presence, float frequency, int32_t *counts) {
    if (n_window == 0 || (repetition == 1.0f && presence == 0.0f && frequency == 0.0f)) return;
    for (size_t i = 0; i < n_window; i++) counts[window[i]]++;
    bool neg_inf = false;
    if (c->by_id) {
        /* Each distinct token once: apply at its first occurrence, then zero its count. */
        for (size_t i = 0; i < n_window; i++) {
            int32_t t = window[i];
            int32_t count = counts[t];
            if (count == 0) continue;
            counts[t] = 0;
            if ((size_t)t < c->n) penalize(&c->data[t], count, repetition, presence, frequency, &neg_inf);
        }
    } else {
        for (size_t i = 0; i < c->n; i++) {
            int32_t count = counts[c->data[i].id];
            if (count) penalize(&c->data[i], count, repetition, presence, frequency, &neg_inf);
        }
        for (size_t i = 0; i < n_window; i++) counts[window[i]] = 0;
    }
    c->n_sorted = 0;
    c->normalized = false;
    if (neg_inf) drop_neg_inf(c);
}

static size_t first_index(const cn_cands *c) {
    if (c->n_sorted > 0) return 0;
    size_t best = 0;
    for (size_t i = 1; i < c->n; i++)
        if (before(&c->data[i], &c->data[best])) best = i;
    return best;
}

void cn_stage_temperature(cn_cands *c, float t) {
    if (t == 1.0f) return;
    size_t best = first_index(c);
    if (t > 0.0f && isfinite(c->data[best].logit / t)) {
        bool neg_inf = false;
        for (size_t i = 0; i < c->n; i++) {
            c->data[i].logit /= t;
            neg_inf |= c->data[i].logit == -INFINITY;
        }
        /* Division can round two different logits to one value, which reorders ties by
         * id: the sorted prefix is no longer trusted. */
        c->n_sorted = 0;
        c->normalized = false;
        if (neg_inf) drop_neg_inf(c);
        return;
    }
    /* Greedy: t == 0, or t so small that logit / t leaves the float range (its limit). */
    cn_candidate b = c->data[best];
    b.p = 1.0f;
    c->data[0] = b;
    c->n = 1;
    c->n_sorted = 1;
    c->normalized = true;
    c->by_id = false;
}

void cn_stage_top_k(cn_cands *c, int32_t k) {
    if (k <= 0 || (size_t)k >= c->n) return;
    if ((size_t)k < c->n_sorted) {
        c->n_sorted = (size_t)k;
    } else if ((size_t)k > c->n_sorted) {
        select_first(c->data, c->n_sorted, c->n, (size_t)k); /* the k first, unordered */
        c->by_id = false;
    }
    c->n = (size_t)k;
    c->normalized = false;
}

void cn_stage_softmax(cn_cands *c) {
    float mx = c->data[first_index(c)].logit;
    double sum = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        float e = expf(c->data[i].logit - mx);
        c->data[i].p = e;
        sum += e;
    }
    /* sum >= 1: the maximum contributes exp(0). */
    for (size_t i = 0; i < c->n; i++) c->data[i].p = (float)((double)c->data[i].p / sum);
    c->normalized = true;
}

/* Applies the top-p rule (see the top of this file) to a normalized set: keeps the
 * candidates up to and including the one where the canonical cumulative mass reaches
 * mass * (1 - CN_TOP_P_REL_EPS). Returns the number kept, which are then c->data[0..kept). */
static size_t keep_mass(cn_cands *c, float mass) {
    const double th = (double)mass * (1.0 - CN_TOP_P_REL_EPS);
    size_t at = crossing(c, th, false);
    return at < c->n ? at + 1 : c->n;
}

static double mass_of(const cn_cands *c) {
    double m = 0.0;
    for (size_t i = 0; i < c->n; i++) m += c->data[i].p;
    return m;
}

void cn_stage_top_p(cn_cands *c, float top_p) {
    if (!(top_p < 1.0f)) return;
    if (!c->normalized) cn_stage_softmax(c);
    size_t keep = keep_mass(c, top_p);
    c->n = keep;
    if (c->n_sorted > keep) c->n_sorted = keep;
    renormalize(c, mass_of(c));
}

void cn_stage_min_p(cn_cands *c, float min_p) {
    if (!(min_p > 0.0f)) return;
    if (!c->normalized) cn_stage_softmax(c);
    const float th = min_p * c->data[first_index(c)].p;
    size_t j = 0, js = 0;
    double mass = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        if (!(c->data[i].p >= th)) continue;
        if (i < c->n_sorted) js++;
        mass += c->data[i].p;
        c->data[j++] = c->data[i];
    }
    if (j != c->n) c->by_id = false;
    c->n = j;
    c->n_sorted = js;
    renormalize(c, mass);
}

/* Typical sampling's order key: minus the distance of the token's information content
 * from the entropy, so that "logit descending" in canonical order means "most typical
 * first". Computed the same way wherever it is used, so the boundary compares exactly. */
static inline float typical_key(float p, float entropy) {
    return -fabsf(-logf(p) - entropy);
}

void cn_stage_typical(cn_cands *c, float typical_p, cn_candidate *scratch) {
    if (!(typical_p < 1.0f)) return;
    if (!c->normalized) cn_stage_softmax(c);
    double hd = 0.0; /* entropy in nats */
    for (size_t i = 0; i < c->n; i++) {
        float p = c->data[i].p;
        if (p > 0.0f) hd -= (double)p * logf(p);
    }
    const float h = (float)hd;
    for (size_t i = 0; i < c->n; i++) {
        scratch[i].id = c->data[i].id;
        scratch[i].p = c->data[i].p;
        scratch[i].logit = typical_key(c->data[i].p, h);
    }
    cn_cands t = {scratch, c->n, 0, true, false};
    size_t keep = keep_mass(&t, typical_p);
    if (keep == c->n) return;
    /* scratch[0..keep) are the kept, unordered; the boundary is the last of them in
     * typical order, and a candidate is kept iff it does not rank after it. */
    cn_candidate bound = scratch[0];
    for (size_t i = 1; i < keep; i++)
        if (before(&bound, &scratch[i])) bound = scratch[i];

    size_t j = 0, js = 0;
    double mass = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        cn_candidate k = {c->data[i].id, typical_key(c->data[i].p, h), 0.0f};
        if (before(&bound, &k)) continue; /* ranks after the boundary: dropped */
        if (i < c->n_sorted) js++;
        mass += c->data[i].p;
        c->data[j++] = c->data[i];
    }
    if (j != c->n) c->by_id = false;
    c->n = j;
    c->n_sorted = js;
    renormalize(c, mass);
}

size_t cn_stage_draw(cn_cands *c, double u) {
    if (!c->normalized) cn_stage_softmax(c);
    double total = 0.0;
    for (size_t i = 0; i < c->n; i++) total += c->data[i].p;
    size_t at = crossing(c, u * total, true);
    if (at < c->n) return at;
    /* Rounding left u * total at or above every partial sum: the canonically last token
     * with mass. */
    size_t last = 0;
    bool any = false;
    for (size_t i = 0; i < c->n; i++) {
        if (c->data[i].p > 0.0f && (!any || before(&c->data[last], &c->data[i]))) last = i;
        any |= c->data[i].p > 0.0f;
    }
    return last;
}

size_t cn_cands_top(const cn_candidate *cand, size_t n, size_t k, cn_candidate *out) {
    if (n == 0 || k == 0) return 0;
    size_t m = 0;
    float mx = cand[0].logit;
    for (size_t i = 0; i < n; i++) {
        if (cand[i].logit > mx) mx = cand[i].logit;
        if (m == k && !before(&cand[i], &out[m - 1])) continue;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(&cand[i], &out[j - 1])) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = cand[i];
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += expf(cand[i].logit - mx);
    for (size_t i = 0; i < m; i++) out[i].p = (float)(expf(out[i].logit - mx) / sum);
    return m;
}

/* ---- the sampler ---- */

struct cn_sampler {
    cn_sampling_params params; /* logit_bias points at bias below */
    int32_t n_vocab;
    cn_logit_bias *bias;       /* (n_bias), sorted by token, unique */
    size_t n_bias, cap_bias;
    uint64_t seed;
    cn_rng rng;
    cn_candidate *cand;        /* (n_vocab) the working set */
    cn_candidate *scratch;     /* (n_vocab) typical's order; NULL when typical is off */
    int32_t *counts;           /* (n_vocab) zeros between calls; NULL when penalties are off */
    cn_sampler_observer observer;
    void *observer_user;
};

static uint64_t pick_seed(const void *salt) {
    static _Atomic uint64_t calls;
    uint64_t x = (uint64_t)cn_time_us();
    x ^= (uint64_t)(uintptr_t)salt << 17;
    x ^= (uint64_t)getpid() << 40;
    x ^= atomic_fetch_add(&calls, 1) * UINT64_C(0xd1b54a32d192ed03);
    uint64_t seed = cn_splitmix64(&x);
    return seed == CN_SAMPLING_SEED_RANDOM ? 0 : seed;
}

void cn_sampler_reseed(cn_sampler *s, uint64_t seed) {
    s->seed = seed == CN_SAMPLING_SEED_RANDOM ? pick_seed(s) : seed;
    s->params.seed = s->seed;
    cn_rng_seed(&s->rng, s->seed);
}

typedef struct {
    cn_logit_bias b;
    size_t order;
} bias_in;

static int cmp_bias_in(const void *x, const void *y) {
    const bias_in *a = x, *b = y;
    if (a->b.token != b->b.token) return a->b.token < b->b.token ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order ? 1 : 0;
}

/* Copies p's biases sorted by token, summing repeats in their given order. */
static cn_status copy_bias(cn_sampler *s, const cn_sampling_params *p, cn_error *err) {
    size_t n = (size_t)p->n_logit_bias;
    if (n == 0) return CN_STATUS_OK;
    bias_in *tmp = malloc(n * sizeof *tmp);
    s->bias = malloc(n * sizeof *s->bias);
    if (!tmp || !s->bias) {
        free(tmp);
        return cn_err(err, CN_STATUS_NO_MEMORY, "logit_bias: out of memory (%zu entries)", n);
    }
    for (size_t i = 0; i < n; i++) tmp[i] = (bias_in){p->logit_bias[i], i};
    qsort(tmp, n, sizeof *tmp, cmp_bias_in);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && s->bias[m - 1].token == tmp[i].b.token)
            s->bias[m - 1].bias = add_sat(s->bias[m - 1].bias, tmp[i].b.bias);
        else
            s->bias[m++] = tmp[i].b;
    }
    free(tmp);
    s->n_bias = m;
    s->cap_bias = n;
    return CN_STATUS_OK;
}

static void sync_bias_view(cn_sampler *s) {
    s->params.logit_bias = s->bias;
    s->params.n_logit_bias = (int32_t)s->n_bias;
}

cn_status cn_sampler_create(const cn_sampling_params *p, int32_t n_vocab, cn_sampler **out,
                            cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_sampler_create: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_vocab = %d is out of range: must be > 0",
                      (int)n_vocab);
    const cn_status st = cn_sampling_validate(p, n_vocab, err);
    if (st != CN_STATUS_OK) return st;
    return cn_sampler_create_valid(p, n_vocab, out, err);
}

cn_status cn_sampler_create_valid(const cn_sampling_params *p, int32_t n_vocab, cn_sampler **out, cn_error *err) {
    *out = NULL;
    cn_status st;
    cn_sampler *s = calloc(1, sizeof *s);
    if (!s) return cn_err(err, CN_STATUS_NO_MEMORY, "sampler: out of memory");
    s->params = *p;
    s->n_vocab = n_vocab;
    st = copy_bias(s, p, err);
    if (st != CN_STATUS_OK) goto fail;
    sync_bias_view(s);

    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (!s->cand) goto oom;
    if (p->typical_p < 1.0f) {
        s->scratch = malloc((size_t)n_vocab * sizeof *s->scratch);
        if (!s->scratch) goto oom;
    }
    if (penalties_on(p)) {
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
        if (!s->counts) goto oom;
    }
    cn_sampler_reseed(s, p->seed);
    *out = s;
    return CN_STATUS_OK;
oom:
    st = cn_err(err, CN_STATUS_NO_MEMORY, "sampler: out of memory for n_vocab = %d", (int)n_vocab);
fail:
    cn_sampler_free(s);
    return st;
}

void cn_sampler_free(cn_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->cand);
    free(s->scratch);
    free(s->counts);
    free(s);
}

const cn_sampling_params *cn_sampler_params(const cn_sampler *s) {
    return &s->params;
}

uint64_t cn_sampler_seed(const cn_sampler *s) {
    return s->seed;
}

void cn_sampler_set_observer(cn_sampler *s, cn_sampler_observer fn, void *user) {
    s->observer = fn;
    s->observer_user = user;
}

cn_status cn_sampler_add_bias(cn_sampler *s, int32_t token, float bias, cn_error *err) {
    if (token < 0 || token >= s->n_vocab)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "logit_bias: token %d is out of range: must be in [0, %d)", (int)token,
                      (int)s->n_vocab);
    if (isnan(bias) || bias == INFINITY) {
        char f[32];
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "logit_bias (token %d) = %s is out of range: must be finite or -inf",
                      (int)token, fmt_float(f, sizeof f, bias));
    }
    if (!chain_has(&s->params, CN_SAMPLER_LOGIT_BIAS))
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "logit_bias is set but 'logit_bias' is not in the sampler chain");
    size_t lo = 0, hi = s->n_bias;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->bias[mid].token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n_bias && s->bias[lo].token == token) {
        s->bias[lo].bias = add_sat(s->bias[lo].bias, bias);
        return CN_STATUS_OK;
    }
    if (s->n_bias >= CN_SAMPLING_MAX_LOGIT_BIAS)
        return cn_err(err, CN_STATUS_LIMIT, "logit_bias: more than %d entries",
                      CN_SAMPLING_MAX_LOGIT_BIAS);
    if (s->n_bias == s->cap_bias) {
        size_t cap = s->cap_bias ? s->cap_bias * 2 : 8;
        cn_logit_bias *nb = realloc(s->bias, cap * sizeof *nb);
        if (!nb) return cn_err(err, CN_STATUS_NO_MEMORY, "logit_bias: out of memory");
        s->bias = nb;
        s->cap_bias = cap;
    }
    memmove(&s->bias[lo + 1], &s->bias[lo], (s->n_bias - lo) * sizeof *s->bias);
    s->bias[lo] = (cn_logit_bias){token, bias};
    s->n_bias++;
    sync_bias_view(s);
    return CN_STATUS_OK;
}

/* Log-probabilities under the raw model distribution: log_softmax(logits). */
static void raw_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                         cn_sample_info *info) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    const double lse = (double)mx + log(sum);
    info->has_logprob = true;
    info->logprob = (float)((double)logits[token] - lse);

    cn_candidate top[CN_SAMPLING_MAX_LOGPROBS];
    size_t m = 0, k = (size_t)n_top;
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        if (logits[i] == -INFINITY) continue;
        cn_candidate c = {i, logits[i], 0.0f};
        if (m == k && !before(&c, &top[m - 1])) continue;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(&c, &top[j - 1])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = c;
    }
    info->n_top = (int32_t)m;
    for (size_t i = 0; i < m; i++) {
        info->top[i].id = top[i].id;
        info->top[i].logprob = (float)((double)top[i].logit - lse);
    }
}

/* Whether the chain is greedy in a way one pass can answer: temperature 0, with before
 * it only logit bias (applied on the fly) and stages that always keep the canonical
 * first candidate (top-k, top-p, min-p), and after it nothing that could still change the
 * single survivor (bias); no penalties or typical (they reorder or drop the top), and no
 * observer wanting each stage. */
static bool greedy_shortcut(const cn_sampler *s) {
    const cn_sampling_params *p = &s->params;
    if (p->temperature != 0.0f || s->observer || stage_on(p, CN_SAMPLER_PENALTIES) ||
        stage_on(p, CN_SAMPLER_TYPICAL))
        return false;
    bool greedy = false;
    for (int32_t k = 0; k < p->n_chain; k++) {
        if (p->chain[k] == CN_SAMPLER_TEMPERATURE) greedy = true;
        else if (greedy && p->chain[k] == CN_SAMPLER_LOGIT_BIAS && stage_on(p, CN_SAMPLER_LOGIT_BIAS)) return false;
    }
    return greedy;
}

/* The chain's pick for greedy_shortcut, the slow way: one pass applying the bias on the
 * fly (walking the id-sorted list alongside), lowest id on ties; the chain's errors for
 * NaN or +inf logits, no finite logit, or a bias that bans every token. */
static cn_status greedy_scan(const cn_sampler *s, const float *logits, int32_t n_vocab, cn_candidate *out,
                             cn_error *err) {
    const bool bias_on = stage_on(&s->params, CN_SAMPLER_LOGIT_BIAS);
    size_t k = 0, n_finite = 0;
    int32_t best = -1;
    float bl = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) return bad_logit(err, i, l);
        if (l == -INFINITY) continue;
        n_finite++;
        if (bias_on) {
            while (k < s->n_bias && s->bias[k].token < i) k++;
            if (k < s->n_bias && s->bias[k].token == i) l = add_sat(l, s->bias[k].bias);
        }
        if (l > bl) {
            bl = l;
            best = i;
        }
    }
    if (n_finite == 0) return no_finite_logit(err, n_vocab);
    if (best < 0) return all_banned(err);
    *out = (cn_candidate){best, bl, 1.0f};
    return CN_STATUS_OK;
}

/* The fast greedy passes read GP_LANES logits a step as four independent 4-lane vectors
 * (GCC vector types: SSE2 on any x86-64, NEON on arm64). A single running max is a
 * serial chain of dependent max operations, 4 cycles each: ~55 us per 49k-logit row,
 * measured, against ~15 us this way. */
#define GP_LANES 16
typedef float gp_vf __attribute__((vector_size(16)));
typedef int32_t gp_vi __attribute__((vector_size(16)));

/* The largest logit of [0, n) and whether any is NaN or +inf (then the max means nothing). */
static float raw_max(const float *logits, int32_t n, bool *bad_out) {
    gp_vf mx[GP_LANES / 4];
    gp_vi bad = {0};
    const gp_vf inf = {INFINITY, INFINITY, INFINITY, INFINITY};
    for (int j = 0; j < GP_LANES / 4; j++) mx[j] = -inf;
    int32_t i = 0;
    for (; i + GP_LANES <= n; i += GP_LANES)
        for (int j = 0; j < GP_LANES / 4; j++) {
            gp_vf l;
            memcpy(&l, logits + i + 4 * j, sizeof l);
            bad |= ~(l < inf); /* NaN or +inf: all ones */
            const gp_vi gt = l > mx[j];
            mx[j] = (gp_vf)((gt & (gp_vi)l) | (~gt & (gp_vi)mx[j]));
        }
    float m = -INFINITY;
    int32_t b = 0;
    for (; i < n; i++) {
        b |= !(logits[i] < INFINITY);
        m = logits[i] > m ? logits[i] : m;
    }
    for (int j = 0; j < GP_LANES; j++) {
        b |= bad[j % 4];
        m = mx[j / 4][j % 4] > m ? mx[j / 4][j % 4] : m;
    }
    *bad_out = b != 0;
    return m;
}

/* The first id in [from, n) whose logit equals v, or n. */
static int32_t first_equal(const float *logits, int32_t from, int32_t n, float v) {
    const gp_vf vv = {v, v, v, v};
    int32_t i = from;
    for (; i + GP_LANES <= n; i += GP_LANES) {
        gp_vi hit = {0};
        for (int j = 0; j < GP_LANES / 4; j++) {
            gp_vf l;
            memcpy(&l, logits + i + 4 * j, sizeof l);
            hit |= l == vv;
        }
        if (hit[0] | hit[1] | hit[2] | hit[3]) break;
    }
    for (; i < n; i++)
        if (logits[i] == v) return i;
    return n;
}

/* Whether id t is in the sampler's id-sorted bias list. */
static bool is_biased(const cn_sampler *s, int32_t t) {
    size_t lo = 0, hi = s->n_bias;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (s->bias[mid].token < t) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n_bias && s->bias[lo].token == t;
}

/* The same pick, fast: a vectorized pass for the largest raw logit and whether any is
 * NaN or +inf, then the biased few, then the first id holding the winning value (the
 * first biased id whose biased value wins, or an earlier unbiased id whose raw value
 * does). Anything unusual (a bad logit, no finite one, a biased token holding the raw
 * maximum) goes to greedy_scan, which gives the chain's answer and errors by
 * definition. */
static cn_status greedy_pick(const cn_sampler *s, const float *logits, int32_t n_vocab, cn_candidate *out,
                             cn_error *err) {
    bool bad;
    const float m = raw_max(logits, n_vocab, &bad);
    if (bad || m == -INFINITY) return greedy_scan(s, logits, n_vocab, out, err);
    float best = m;         /* the winning value: raw max of the unbiased ids, or a biased one */
    int32_t first = n_vocab; /* the first biased id holding best (the list is id-sorted) */
    const bool bias_on = stage_on(&s->params, CN_SAMPLER_LOGIT_BIAS);
    if (bias_on)
        for (size_t k = 0; k < s->n_bias; k++) {
            const int32_t t = s->bias[k].token;
            if (t >= n_vocab) continue;
            if (logits[t] == m) return greedy_scan(s, logits, n_vocab, out, err);
            const float v = logits[t] == -INFINITY ? -INFINITY : add_sat(logits[t], s->bias[k].bias);
            if (v > best) best = v, first = t;
            else if (v == best && first == n_vocab) first = t;
        }
    for (int32_t i = first_equal(logits, 0, first, best); i < first; i = first_equal(logits, i + 1, first, best))
        if (!bias_on || !is_biased(s, i)) {
            first = i;
            break;
        }
    if (first == n_vocab) return greedy_scan(s, logits, n_vocab, out, err); /* not reached */
    *out = (cn_candidate){first, best, 1.0f};
    return CN_STATUS_OK;
}

/* The stages of the chain, in order, on candidates built from the logits. */
static cn_status run_chain(cn_sampler *s, const float *logits, int32_t n_vocab, const int32_t *window,
                           size_t n_window, cn_cands *cp, cn_error *err) {
    const cn_sampling_params *p = &s->params;
    cn_cands c;
    cn_status st = cn_cands_init(&c, s->cand, logits, n_vocab, err);
    if (st != CN_STATUS_OK) return st;

    for (int32_t k = 0; k < p->n_chain; k++) {
        const cn_sampler_stage stage = p->chain[k];
        if (!stage_on(p, stage)) continue;
        switch (stage) {
        case CN_SAMPLER_LOGIT_BIAS:
            cn_stage_logit_bias(&c, s->bias, s->n_bias);
            if (c.n == 0) return all_banned(err);
            break;
        case CN_SAMPLER_PENALTIES:
            if (n_window == 0) continue;
            cn_stage_penalties(&c, window, n_window, p->repetition_penalty, p->presence_penalty,
                               p->frequency_penalty, s->counts);
            if (c.n == 0)
                return cn_err(err, CN_STATUS_INVALID_ARG, "penalties left no token with a finite logit");
            break;
        case CN_SAMPLER_TEMPERATURE: cn_stage_temperature(&c, p->temperature); break;
        case CN_SAMPLER_TOP_K: cn_stage_top_k(&c, p->top_k); break;
        case CN_SAMPLER_TOP_P: cn_stage_top_p(&c, p->top_p); break;
        case CN_SAMPLER_MIN_P: cn_stage_min_p(&c, p->min_p); break;
        case CN_SAMPLER_TYPICAL: cn_stage_typical(&c, p->typical_p, s->scratch); break;
        case CN_SAMPLER_N_STAGES: continue;
        }
        if (s->observer) s->observer(s->observer_user, stage, c.data, c.n);
    }
    *cp = c;
    return CN_STATUS_OK;
}

cn_status cn_sampler_sample(cn_sampler *s, const float *logits, int32_t n_vocab,
                            const int32_t *history, size_t n_history, int32_t *out_token,
                            cn_sample_info *info, cn_error *err) {
    if (!s || !logits || !out_token)
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_sampler_sample: NULL argument");
    if (n_vocab != s->n_vocab)
        return cn_err(err, CN_STATUS_INVALID_ARG,
                      "logits row has n_vocab = %d but the sampler was made for %d", (int)n_vocab,
                      (int)s->n_vocab);
    if (n_history > 0 && !history)
        return cn_err(err, CN_STATUS_INVALID_ARG, "history is NULL but n_history = %zu", n_history);
    const cn_sampling_params *p = &s->params;

    const int32_t *window = NULL;
    size_t n_window = 0;
    if (penalties_on(p) && n_history > 0) {
        n_window = p->penalty_last_n < 0 ? n_history
                                         : CN_MIN(n_history, (size_t)p->penalty_last_n);
        window = history + (n_history - n_window);
        for (size_t i = 0; i < n_window; i++)
            if (window[i] < 0 || window[i] >= n_vocab)
                return cn_err(err, CN_STATUS_INVALID_ARG,
                              "history[%zu] = token %d is out of range: must be in [0, %d)",
                              n_history - n_window + i, (int)window[i], (int)n_vocab);
    }

    cn_cands c;
    cn_candidate greedy;
    cn_status st;
    const bool shortcut = greedy_shortcut(s);
    if (shortcut) {
        /* the chain's answer without building it: the canonical first candidate */
        st = greedy_pick(s, logits, n_vocab, &greedy, err);
        if (st != CN_STATUS_OK) return st;
        c.data = &greedy;
        c.n = 1;
    } else {
        st = run_chain(s, logits, n_vocab, window, n_window, &c, err);
        if (st != CN_STATUS_OK) return st;
    }

    /* the draw is made (and the stream advanced) for greedy too, so seeds line up */
    const double u = cn_rng_uniform(&s->rng);
    const size_t at = shortcut ? 0 : cn_stage_draw(&c, u);
    const int32_t token = c.data[at].id;
    *out_token = token;
    if (info) {
        memset(info, 0, sizeof *info);
        info->token = token;
        info->p = c.data[at].p;
        info->n_kept = (int32_t)c.n;
        info->u = u;
        if (p->n_logprobs >= 0) raw_logprobs(logits, n_vocab, token, p->n_logprobs, info);
    }
    return CN_STATUS_OK;
}

cn_status cn_sampler_greedy(const cn_sampling_params *p, const float *logits, int32_t n_vocab,
                            const int32_t *history, size_t n_history, int32_t *out_token, cn_error *err) {
    cn_sampling_params g = *p;
    g.temperature = 0.0f;
    g.top_k = 0, g.top_p = 1.0f, g.min_p = 0.0f, g.typical_p = 1.0f;
    g.n_logprobs = -1;
    g.seed = 0;
    cn_status st = cn_sampling_set_chain(&g, "default", err);
    cn_sampler *s = NULL;
    if (st == CN_STATUS_OK) st = cn_sampler_create(&g, n_vocab, &s, err);
    if (st == CN_STATUS_OK) st = cn_sampler_sample(s, logits, n_vocab, history, n_history, out_token, NULL, err);
    cn_sampler_free(s);
    return st;
}
