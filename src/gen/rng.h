/* rng.h — the per-request random number generator: xoshiro256** (Blackman & Vigna,
 * 2018), its 256-bit state filled from a 64-bit seed by splitmix64, as the authors
 * recommend. Chosen because it is specified bit for bit (same seed, same stream on every
 * platform and compiler), fast, and small enough to live inside each sampler. It is not a
 * cryptographic generator. Owns no memory; a cn_rng is a plain value. */
#ifndef CN_GEN_RNG_H
#define CN_GEN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4]; /* xoshiro256** state; never all zero once seeded */
} cn_rng;

/* One splitmix64 step: advances *state by the golden-ratio increment and returns the
 * mixed value. Exposed for seeding and tests. */
uint64_t cn_splitmix64(uint64_t *state);

/* Seeds r from seed: the four state words are four consecutive splitmix64 outputs
 * starting from state = seed. Any seed (including 0) gives a valid, non-zero state. */
void cn_rng_seed(cn_rng *r, uint64_t seed);

/* The next 64 random bits. */
uint64_t cn_rng_next(cn_rng *r);

/* A uniform double in [0, 1): the top 53 bits of cn_rng_next times 2^-53, so every
 * value is a multiple of 2^-53 and 1.0 is never returned. */
double cn_rng_uniform(cn_rng *r);

#endif
