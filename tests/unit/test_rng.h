/* Deterministic xorshift64 for the unit tests: each test file seeds its own state, so a failure
 * reproduces. Include once per test program. */
#ifndef RG_TEST_RNG_H
#define RG_TEST_RNG_H
#include <stdint.h>

static uint64_t rng;

static uint64_t next_u64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int irand(int lo, int hi) /* uniform in [lo, hi] */
{
	return lo + (int)(next_u64() % (uint64_t)(hi - lo + 1));
}
#endif
