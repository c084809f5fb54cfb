/* rng.c — xoshiro256** seeded by splitmix64 (see rng.h). Written from the published
 * algorithm description; tests/unit/test_rng.c checks it against the reference outputs.
 * Pure integer arithmetic: no floating point except the final [0, 1) conversion, no
 * global state, nothing platform-dependent. */
#include "gen/rng.h"

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t cn_splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void cn_rng_seed(cn_rng *r, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = cn_splitmix64(&st);
    /* splitmix64 is a bijection of its counter, so four consecutive outputs are never
     * all zero; this guard only documents the invariant xoshiro needs. */
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint64_t cn_rng_next(cn_rng *r) {
    uint64_t *s = r->s;
    const uint64_t out = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}

double cn_rng_uniform(cn_rng *r) { return (double)(cn_rng_next(r) >> 11) * 0x1.0p-53; }
