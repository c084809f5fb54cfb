/* sampling_stages.c — the candidate array and the stages of the sampler chain: each a
 * pure function over (id, logit, p) candidates and its own parameters, plus the final
 * softmax and the inverse-CDF draw. It must not know the sampler object, the chain order,
 * an RNG, models or threads: what runs when is sampling.c's business.
 *
 * Every stage works on one candidate array (id, logit, p) and either changes logits or
 * drops candidates; a stage that needs probabilities takes the softmax of the candidates
 * still present, so "probability" always means "within what earlier stages kept".
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
 * removes the candidate. */
#include "gen/sampling_impl.h"

#include <stdlib.h>

#include "core/core.h"

static int cmp_canonical(const void *x, const void *y) {
    const cn_candidate *a = x, *b = y;
    return cn_cand_before(a, b) ? -1 : cn_cand_before(b, a) ? 1 : 0;
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
        if (cn_cand_before(&a[mid], &a[lo])) swap_cand(&a[mid], &a[lo]);
        if (cn_cand_before(&a[last], &a[lo])) swap_cand(&a[last], &a[lo]);
        if (cn_cand_before(&a[last], &a[mid])) swap_cand(&a[last], &a[mid]);
        swap_cand(&a[mid], &a[last]); /* the median becomes the pivot, at the end */
        const cn_candidate piv = a[last];
        size_t st = lo;
        for (size_t i = lo; i < last; i++)
            if (cn_cand_before(&a[i], &piv)) swap_cand(&a[i], &a[st++]);
        swap_cand(&a[st], &a[last]);
        /* a[lo..st) rank before the pivot, a[st] is it, a(st..hi) rank after. */
        if (k == st || k == st + 1) return;
        if (k < st) hi = st;
        else lo = st + 1;
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

static inline bool crosses(double cum, double target, bool strict) { return strict ? cum > target : cum >= target; }

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
        if (cn_cand_before(&a[mid], &a[lo])) swap_cand(&a[mid], &a[lo]);
        if (cn_cand_before(&a[last], &a[lo])) swap_cand(&a[last], &a[lo]);
        if (cn_cand_before(&a[last], &a[mid])) swap_cand(&a[last], &a[mid]);
        swap_cand(&a[mid], &a[last]);
        const cn_candidate piv = a[last];
        size_t st = lo;
        double mass_before = 0.0;
        for (size_t i = lo; i < last; i++) {
            if (cn_cand_before(&a[i], &piv)) {
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

cn_status cn_cands_bad_logit(cn_error *err, int32_t i, float l) {
    char f[32];
    return cn_err(err, CN_STATUS_INVALID_ARG, "logit of token %d is %s", (int)i, cn_sampling_fmt_float(f, sizeof f, l));
}

cn_status cn_cands_no_finite_logit(cn_error *err, int32_t n_vocab) {
    return cn_err(err, CN_STATUS_INVALID_ARG, "no token has a finite logit (n_vocab = %d)", (int)n_vocab);
}

cn_status cn_cands_init(cn_cands *c, cn_candidate *buf, const float *logits, int32_t n_vocab, cn_error *err) {
    size_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) return cn_cands_bad_logit(err, i, l);
        if (l == -INFINITY) continue;
        buf[n].id = i;
        buf[n].logit = l;
        buf[n].p = 0.0f;
        n++;
    }
    if (n == 0) return cn_cands_no_finite_logit(err, n_vocab);
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

static const cn_logit_bias *find_bias(const cn_logit_bias *b, size_t n, int32_t token) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].token < token) lo = mid + 1;
        else hi = mid;
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
            c->data[t].logit = cn_logit_add_sat(c->data[t].logit, bias[k].bias);
            banned |= c->data[t].logit == -INFINITY;
        }
    } else {
        for (size_t i = 0; i < c->n; i++) {
            const cn_logit_bias *b = find_bias(bias, n_bias, c->data[i].id);
            if (!b) continue;
            c->data[i].logit = cn_logit_add_sat(c->data[i].logit, b->bias);
            banned |= c->data[i].logit == -INFINITY;
        }
    }
    c->n_sorted = 0;
    c->normalized = false;
    if (banned) drop_neg_inf(c);
}

static inline void penalize(cn_candidate *cd, int32_t count, float repetition, float presence, float frequency,
                            bool *neg_inf) {
    float l = cd->logit;
    l = l > 0.0f ? l / repetition : l * repetition;
    l -= presence + frequency * (float)count;
    if (l == INFINITY) l = FLT_MAX;
    *neg_inf |= l == -INFINITY;
    cd->logit = l;
}

void cn_stage_penalties(cn_cands *c, const int32_t *window, size_t n_window, float repetition, float presence,
                        float frequency, int32_t *counts) {
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
        if (cn_cand_before(&c->data[i], &c->data[best])) best = i;
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

/* Keeps the candidates keep(cand, arg) accepts, in their order (the sorted prefix stays
 * sorted), and renormalizes over them. Inlined into each filter, so keep is a direct
 * call. */
static inline void keep_where(cn_cands *c, bool (*keep)(const cn_candidate *, const void *), const void *arg) {
    size_t j = 0, js = 0;
    double mass = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        if (!keep(&c->data[i], arg)) continue;
        if (i < c->n_sorted) js++;
        mass += c->data[i].p;
        c->data[j++] = c->data[i];
    }
    if (j != c->n) c->by_id = false;
    c->n = j;
    c->n_sorted = js;
    renormalize(c, mass);
}

static bool at_least(const cn_candidate *x, const void *th) { return x->p >= *(const float *)th; }

void cn_stage_min_p(cn_cands *c, float min_p) {
    if (!(min_p > 0.0f)) return;
    if (!c->normalized) cn_stage_softmax(c);
    const float th = min_p * c->data[first_index(c)].p;
    keep_where(c, at_least, &th);
}

/* Typical sampling's order key: minus the distance of the token's information content
 * from the entropy, so that "logit descending" in canonical order means "most typical
 * first". Computed the same way wherever it is used, so the boundary compares exactly. */
static inline float typical_key(float p, float entropy) { return -fabsf(-logf(p) - entropy); }

typedef struct {
    cn_candidate last; /* the last kept, in typical order */
    float entropy;
} typical_bound;

static bool not_after(const cn_candidate *x, const void *arg) {
    const typical_bound *b = arg;
    const cn_candidate k = {x->id, typical_key(x->p, b->entropy), 0.0f};
    return !cn_cand_before(&b->last, &k);
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
    typical_bound b = {scratch[0], h};
    for (size_t i = 1; i < keep; i++)
        if (cn_cand_before(&b.last, &scratch[i])) b.last = scratch[i];
    keep_where(c, not_after, &b);
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
        if (c->data[i].p > 0.0f && (!any || cn_cand_before(&c->data[last], &c->data[i]))) last = i;
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
        if (m == k && !cn_cand_before(&cand[i], &out[m - 1])) continue;
        size_t j = m < k ? m++ : k - 1;
        while (j > 0 && cn_cand_before(&cand[i], &out[j - 1])) {
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
