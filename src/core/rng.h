/* The request RNG: xoshiro256** 1.0 (Blackman & Vigna, "Scrambled linear pseudorandom number
 * generators", 2018; reference code at prng.di.unimi.it) seeded by splitmix64 (Steele, Lea &
 * Flood, OOPSLA'14), as the xoshiro authors recommend. Integer arithmetic only: the same seed
 * gives the same stream on every platform and compiler. Samplers receive it from the caller
 * (src/gen/): one state per output sequence, seeded per request. */
#ifndef RG_CORE_RNG_H
#define RG_CORE_RNG_H
#include <stdint.h>

#include "core/export.h"

typedef struct rg_rng {
	uint64_t s[4]; /* xoshiro256** state, never all zero after rg_rng_seed */
} rg_rng;

/* One splitmix64 step: advances *x by 0x9e3779b97f4a7c15 and returns the mixed value. */
uint64_t rg_splitmix64(uint64_t *x);

/* Seed the state with four successive splitmix64 outputs of seed (any value, 0 included). */
RG_TEST_API void rg_rng_seed(rg_rng *r, uint64_t seed);

/* Seed the state of stream `stream` of seed: rg_rng_seed(splitmix64 of seed, then xor stream
 * mixed by a second splitmix64 step). Used for sample j of a request (stream = j), so the
 * samples of one request are independent and do not depend on the other prompts in the batch. */
RG_TEST_API void rg_rng_seed_stream(rg_rng *r, uint64_t seed, uint64_t stream);

/* Next 64 random bits (xoshiro256**). */
RG_TEST_API uint64_t rg_rng_next(rg_rng *r);

/* Uniform double in [0, 1): the top 53 bits of rg_rng_next times 2^-53. */
RG_TEST_API double rg_rng_uniform(rg_rng *r);
#endif
