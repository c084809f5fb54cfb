/* sampling_params.c — the sampler chain's parameters: their defaults, their validation
 * (every refusal names the field in cn_error.param), the stage names and the chain spec
 * ("top_k;top_p;temperature", or a preset). Pure data and checks: it must not touch a
 * candidate array or an RNG.
 *
 * The chain. Default order (HF transformers / vLLM): logit bias -> penalties ->
 * temperature -> top-k -> top-p -> min-p -> typical -> softmax -> draw. llama.cpp's order
 * (the "llama.cpp" preset) runs temperature last: logit bias -> penalties -> top-k ->
 * typical -> top-p -> min-p -> temperature -> softmax -> draw. Any order of distinct
 * stages can be given; softmax and the draw always close it. Validation refuses a chain
 * that would skip a stage whose parameter is set (logit_bias included: bans are
 * absolute). */
#include "gen/sampling_impl.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

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
    {"logit_bias", CN_SAMPLER_LOGIT_BIAS}, {"penalties", CN_SAMPLER_PENALTIES}, {"temperature", CN_SAMPLER_TEMPERATURE},
    {"temp", CN_SAMPLER_TEMPERATURE},      {"top_k", CN_SAMPLER_TOP_K},         {"top_p", CN_SAMPLER_TOP_P},
    {"min_p", CN_SAMPLER_MIN_P},           {"typical", CN_SAMPLER_TYPICAL},     {"typical_p", CN_SAMPLER_TYPICAL},
    {"typ_p", CN_SAMPLER_TYPICAL},
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

const char *cn_sampling_fmt_float(char *buf, size_t n, double v) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else snprintf(buf, n, "%g", v);
    return buf;
}

static cn_status bad_float(cn_error *err, const char *name, double v, const char *range) {
    char b[32];
    return cn_err_param(err, CN_STATUS_INVALID_ARG, name, "%s = %s is out of range: must be %s", name,
                        cn_sampling_fmt_float(b, sizeof b, v), range);
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
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "top_k", "top_k = %d is out of range: must be >= 0 (0 = off)",
                            (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return bad_float(err, "top_p", p->top_p, "in (0, 1] (1 = off)");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return bad_float(err, "min_p", p->min_p, "in [0, 1] (0 = off)");
    if (!(p->typical_p > 0.0f && p->typical_p <= 1.0f))
        return bad_float(err, "typical_p", p->typical_p, "in (0, 1] (1 = off)");
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f))
        return bad_float(err, "repetition_penalty", p->repetition_penalty, "in (0, 10] (1 = off)");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return bad_float(err, "presence_penalty", p->presence_penalty, "in [-2, 2] (0 = off)");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return bad_float(err, "frequency_penalty", p->frequency_penalty, "in [-2, 2] (0 = off)");
    if (p->penalty_last_n < -1)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "penalty_last_n",
                            "penalty_last_n = %d is out of range: must be >= -1 (-1 = all, 0 = off)",
                            (int)p->penalty_last_n);
    if (p->n_logit_bias < 0 || p->n_logit_bias > CN_SAMPLING_MAX_LOGIT_BIAS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias",
                            "n_logit_bias = %d is out of range: must be in [0, %d]", (int)p->n_logit_bias,
                            CN_SAMPLING_MAX_LOGIT_BIAS);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias", "logit_bias is NULL but n_logit_bias = %d",
                            (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const cn_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || (n_vocab > 0 && b->token >= n_vocab)) {
            if (n_vocab > 0)
                return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias",
                                    "logit_bias[%d]: token %d is out of range: must be in [0, %d)", (int)i,
                                    (int)b->token, (int)n_vocab);
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias",
                                "logit_bias[%d]: token %d is out of range: must be >= 0", (int)i, (int)b->token);
        }
        if (isnan(b->bias) || b->bias == INFINITY) {
            char f[32];
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "logit_bias",
                                "logit_bias[%d] (token %d) = %s is out of range: must be finite or -inf", (int)i,
                                (int)b->token, cn_sampling_fmt_float(f, sizeof f, b->bias));
        }
    }
    if (p->n_logprobs < -1 || p->n_logprobs > CN_SAMPLING_MAX_LOGPROBS)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_logprobs",
                            "n_logprobs = %d is out of range: must be in [-1, %d] (-1 = off)", (int)p->n_logprobs,
                            CN_SAMPLING_MAX_LOGPROBS);
    if (p->n_chain < 0 || p->n_chain > CN_SAMPLER_N_STAGES)
        return cn_err_param(err, CN_STATUS_INVALID_ARG, "n_chain", "n_chain = %d is out of range: must be in [0, %d]",
                            (int)p->n_chain, CN_SAMPLER_N_STAGES);
    bool seen[CN_SAMPLER_N_STAGES] = {false};
    for (int32_t i = 0; i < p->n_chain; i++) {
        int s = (int)p->chain[i];
        if (s < 0 || s >= CN_SAMPLER_N_STAGES)
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "chain",
                                "chain[%d] = %d is not a sampler stage: must be in [0, %d)", (int)i, s,
                                CN_SAMPLER_N_STAGES);
        if (seen[s])
            return cn_err_param(err, CN_STATUS_INVALID_ARG, "chain", "sampler chain: '%s' appears twice",
                                cn_sampler_stage_name(p->chain[i]));
        seen[s] = true;
    }
    for (int s = 0; s < CN_SAMPLER_N_STAGES; s++) {
        if (cn_sampling_stage_on(p, (cn_sampler_stage)s) && !seen[s]) {
            char c[128];
            chain_str(p, c, sizeof c);
            return cn_err_param(err, CN_STATUS_INVALID_ARG, cn_sampler_stage_name((cn_sampler_stage)s),
                                "%s is set but '%s' is not in the sampler chain (%s)",
                                cn_sampler_stage_name((cn_sampler_stage)s), cn_sampler_stage_name((cn_sampler_stage)s),
                                c[0] ? c : "empty");
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

static bool is_space(char c) { return c == ' ' || c == '\t'; }

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
    if ((len == 9 && !strncasecmp(spec, "llama.cpp", 9)) || (len == 8 && !strncasecmp(spec, "llamacpp", 8))) {
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
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: empty stage name in '%.*s'", (int)CN_MIN(len, 100),
                          spec);
        cn_sampler_stage st;
        if (!lookup_stage(spec + a, b - a, &st))
            return cn_err(err, CN_STATUS_INVALID_ARG,
                          "samplers: unknown stage '%.*s' (stages: logit_bias, penalties, "
                          "temperature, top_k, top_p, min_p, typical; presets: default, llama.cpp)",
                          (int)CN_MIN(b - a, 40), spec + a);
        if (seen[st])
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: '%s' appears twice", cn_sampler_stage_name(st));
        seen[st] = true;
        chain[n++] = st;
        at = end + 1;
        if (end < len && end + 1 == len)
            return cn_err(err, CN_STATUS_INVALID_ARG, "samplers: empty stage name in '%.*s'", (int)CN_MIN(len, 100),
                          spec);
    }
    int32_t k = 0;
    if (!seen[CN_SAMPLER_LOGIT_BIAS]) p->chain[k++] = CN_SAMPLER_LOGIT_BIAS;
    for (int32_t i = 0; i < n; i++) p->chain[k++] = chain[i];
    p->n_chain = k;
    return CN_STATUS_OK;
}
