/* sampling.c — the per-request sampler: it owns a copy of the parameters (with the
 * logit biases merged and sorted), the seeded RNG and the scratch buffers, runs the chain
 * of sampling_stages.c in the order sampling_params.c validated, draws one token and
 * reports its log-probabilities; a one-pass greedy path gives the chain's answer without
 * building the candidate array. A token mask (a grammar's, cn_sampler_set_mask) comes
 * before every stage: a token outside it is gone before logit bias sees the row, and the
 * reported log-probabilities stay the raw model's. It must not know models, tokenizers,
 * grammars or threads: one logits row (and maybe a bit mask) in, one token id out. */
#include "gen/sampling_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "core/buf.h"
#include "gen/rng.h"

struct cn_sampler {
    cn_sampling_params params; /* logit_bias points at bias below */
    int32_t n_vocab;
    cn_logit_bias *bias; /* (n_bias), sorted by token, unique */
    size_t n_bias, cap_bias;
    uint64_t seed;
    cn_rng rng;
    cn_candidate *cand;    /* (n_vocab) the working set */
    cn_candidate *scratch; /* (n_vocab) typical's order; NULL when typical is off */
    int32_t *counts;       /* (n_vocab) zeros between calls; NULL when penalties are off */
    const uint32_t *mask;  /* ((n_mask + 31) / 32) borrowed, or NULL: every token allowed */
    int32_t n_mask;        /* ids >= n_mask are outside the mask */
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
            s->bias[m - 1].bias = cn_logit_add_sat(s->bias[m - 1].bias, tmp[i].b.bias);
        else s->bias[m++] = tmp[i].b;
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

cn_status cn_sampler_create(const cn_sampling_params *p, int32_t n_vocab, cn_sampler **out, cn_error *err) {
    if (!out) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_sampler_create: out is NULL");
    *out = NULL;
    if (n_vocab <= 0)
        return cn_err(err, CN_STATUS_INVALID_ARG, "n_vocab = %d is out of range: must be > 0", (int)n_vocab);
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
    if (cn_sampling_penalties_on(p)) {
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

const cn_sampling_params *cn_sampler_params(const cn_sampler *s) { return &s->params; }

uint64_t cn_sampler_seed(const cn_sampler *s) { return s->seed; }

void cn_sampler_set_observer(cn_sampler *s, cn_sampler_observer fn, void *user) {
    s->observer = fn;
    s->observer_user = user;
}

void cn_sampler_set_mask(cn_sampler *s, const uint32_t *mask, int32_t n_bits) {
    s->mask = mask;
    s->n_mask = mask ? CN_MAX(0, n_bits) : 0;
}

static inline bool in_mask(const cn_sampler *s, int32_t id) {
    return !s->mask || (id < s->n_mask && (s->mask[id >> 5] >> (id & 31) & 1u));
}

cn_status cn_sampler_add_bias(cn_sampler *s, int32_t token, float bias, cn_error *err) {
    if (token < 0 || token >= s->n_vocab)
        return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias: token %d is out of range: must be in [0, %d)",
                      (int)token, (int)s->n_vocab);
    if (isnan(bias) || bias == INFINITY) {
        char f[32];
        return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias (token %d) = %s is out of range: must be finite or -inf",
                      (int)token, cn_sampling_fmt_float(f, sizeof f, bias));
    }
    if (!cn_sampling_chain_has(&s->params, CN_SAMPLER_LOGIT_BIAS))
        return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias is set but 'logit_bias' is not in the sampler chain");
    size_t lo = 0, hi = s->n_bias;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->bias[mid].token < token) lo = mid + 1;
        else hi = mid;
    }
    if (lo < s->n_bias && s->bias[lo].token == token) {
        s->bias[lo].bias = cn_logit_add_sat(s->bias[lo].bias, bias);
        return CN_STATUS_OK;
    }
    if (s->n_bias >= CN_SAMPLING_MAX_LOGIT_BIAS)
        return cn_err(err, CN_STATUS_LIMIT, "logit_bias: more than %d entries", CN_SAMPLING_MAX_LOGIT_BIAS);
    if (!CN_GROW(s->bias, s->cap_bias, s->n_bias + 1))
        return cn_err(err, CN_STATUS_NO_MEMORY, "logit_bias: out of memory");
    memmove(&s->bias[lo + 1], &s->bias[lo], (s->n_bias - lo) * sizeof *s->bias);
    s->bias[lo] = (cn_logit_bias){token, bias};
    s->n_bias++;
    sync_bias_view(s);
    return CN_STATUS_OK;
}

/* Log-probabilities under the raw model distribution: log_softmax(logits). */
static void raw_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top, cn_sample_info *info) {
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
        if (m == k && !cn_cand_before(&c, &top[m - 1])) continue;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && cn_cand_before(&c, &top[j - 1])) {
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

static cn_status all_banned(const cn_sampler *s, cn_error *err) {
    if (s->mask) return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias bans every token the grammar allows");
    return cn_err(err, CN_STATUS_INVALID_ARG, "logit_bias bans every token");
}

static cn_status mask_bans_all(cn_error *err) {
    return cn_err(err, CN_STATUS_INVALID_ARG, "the grammar allows none of the tokens with a finite logit");
}

/* Whether the chain is greedy in a way one pass can answer: temperature 0, with before
 * it only logit bias (applied on the fly) and stages that always keep the canonical
 * first candidate (top-k, top-p, min-p), and after it nothing that could still change the
 * single survivor (bias); no penalties or typical (they reorder or drop the top), and no
 * observer wanting each stage. */
static bool greedy_shortcut(const cn_sampler *s) {
    const cn_sampling_params *p = &s->params;
    if (p->temperature != 0.0f || s->observer || cn_sampling_stage_on(p, CN_SAMPLER_PENALTIES) ||
        cn_sampling_stage_on(p, CN_SAMPLER_TYPICAL))
        return false;
    bool greedy = false;
    for (int32_t k = 0; k < p->n_chain; k++) {
        if (p->chain[k] == CN_SAMPLER_TEMPERATURE) greedy = true;
        else if (greedy && p->chain[k] == CN_SAMPLER_LOGIT_BIAS && cn_sampling_stage_on(p, CN_SAMPLER_LOGIT_BIAS))
            return false;
    }
    return greedy;
}

/* The chain's pick for greedy_shortcut, the slow way: one pass applying the mask and the
 * bias on the fly (walking the id-sorted list alongside), lowest id on ties; the chain's
 * errors for NaN or +inf logits, no finite logit, a mask or a bias that bans every token. */
static cn_status greedy_scan(const cn_sampler *s, const float *logits, int32_t n_vocab, cn_candidate *out,
                             cn_error *err) {
    const bool bias_on = cn_sampling_stage_on(&s->params, CN_SAMPLER_LOGIT_BIAS);
    size_t k = 0, n_finite = 0, n_allowed = 0;
    int32_t best = -1;
    float bl = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) return cn_cands_bad_logit(err, i, l);
        if (l == -INFINITY) continue;
        n_finite++;
        if (!in_mask(s, i)) continue;
        n_allowed++;
        if (bias_on) {
            while (k < s->n_bias && s->bias[k].token < i) k++;
            if (k < s->n_bias && s->bias[k].token == i) l = cn_logit_add_sat(l, s->bias[k].bias);
        }
        if (l > bl) {
            bl = l;
            best = i;
        }
    }
    if (n_finite == 0) return cn_cands_no_finite_logit(err, n_vocab);
    if (n_allowed == 0) return mask_bans_all(err);
    if (best < 0) return all_banned(s, err);
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
    float best = m;          /* the winning value: raw max of the unbiased ids, or a biased one */
    int32_t first = n_vocab; /* the first biased id holding best (the list is id-sorted) */
    const bool bias_on = cn_sampling_stage_on(&s->params, CN_SAMPLER_LOGIT_BIAS);
    if (bias_on)
        for (size_t k = 0; k < s->n_bias; k++) {
            const int32_t t = s->bias[k].token;
            if (t >= n_vocab) continue;
            if (logits[t] == m) return greedy_scan(s, logits, n_vocab, out, err);
            const float v = logits[t] == -INFINITY ? -INFINITY : cn_logit_add_sat(logits[t], s->bias[k].bias);
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
static cn_status run_chain(cn_sampler *s, const float *logits, int32_t n_vocab, const int32_t *window, size_t n_window,
                           cn_cands *cp, cn_error *err) {
    const cn_sampling_params *p = &s->params;
    cn_cands c;
    cn_status st = cn_cands_init(&c, s->cand, logits, n_vocab, err);
    if (st != CN_STATUS_OK) return st;
    if (s->mask) { /* the mask stage, before any other: what it drops no stage sees */
        size_t j = 0;
        for (size_t i = 0; i < c.n; i++)
            if (in_mask(s, c.data[i].id)) c.data[j++] = c.data[i];
        if (j == 0) return mask_bans_all(err);
        c.by_id = c.by_id && j == c.n;
        c.n = j;
    }

    for (int32_t k = 0; k < p->n_chain; k++) {
        const cn_sampler_stage stage = p->chain[k];
        if (!cn_sampling_stage_on(p, stage)) continue;
        switch (stage) {
        case CN_SAMPLER_LOGIT_BIAS:
            cn_stage_logit_bias(&c, s->bias, s->n_bias);
            if (c.n == 0) return all_banned(s, err);
            break;
        case CN_SAMPLER_PENALTIES:
            if (n_window == 0) continue;
            cn_stage_penalties(&c, window, n_window, p->repetition_penalty, p->presence_penalty, p->frequency_penalty,
                               s->counts);
            if (c.n == 0) return cn_err(err, CN_STATUS_INVALID_ARG, "penalties left no token with a finite logit");
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

cn_status cn_sampler_sample(cn_sampler *s, const float *logits, int32_t n_vocab, const int32_t *history,
                            size_t n_history, int32_t *out_token, cn_sample_info *info, cn_error *err) {
    if (!s || !logits || !out_token) return cn_err(err, CN_STATUS_INVALID_ARG, "cn_sampler_sample: NULL argument");
    if (n_vocab != s->n_vocab)
        return cn_err(err, CN_STATUS_INVALID_ARG, "logits row has n_vocab = %d but the sampler was made for %d",
                      (int)n_vocab, (int)s->n_vocab);
    if (n_history > 0 && !history)
        return cn_err(err, CN_STATUS_INVALID_ARG, "history is NULL but n_history = %zu", n_history);
    const cn_sampling_params *p = &s->params;

    const int32_t *window = NULL;
    size_t n_window = 0;
    if (cn_sampling_penalties_on(p) && n_history > 0) {
        n_window = p->penalty_last_n < 0 ? n_history : CN_MIN(n_history, (size_t)p->penalty_last_n);
        window = history + (n_history - n_window);
        for (size_t i = 0; i < n_window; i++)
            if (window[i] < 0 || window[i] >= n_vocab)
                return cn_err(err, CN_STATUS_INVALID_ARG, "history[%zu] = token %d is out of range: must be in [0, %d)",
                              n_history - n_window + i, (int)window[i], (int)n_vocab);
    }

    cn_cands c;
    cn_candidate greedy;
    cn_status st;
    const bool shortcut = greedy_shortcut(s);
    if (shortcut) {
        /* the chain's answer without building it: the canonical first candidate (with a
         * mask, the scan that tests it on the way) */
        st = s->mask ? greedy_scan(s, logits, n_vocab, &greedy, err) : greedy_pick(s, logits, n_vocab, &greedy, err);
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

cn_status cn_sampler_greedy(const cn_sampling_params *p, const float *logits, int32_t n_vocab, const int32_t *history,
                            size_t n_history, int32_t *out_token, cn_error *err) {
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
