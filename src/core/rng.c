/* xoshiro256** with splitmix64 seeding (see rng.h for the sources). */
#include "core/rng.h"

uint64_t rg_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void rg_rng_seed(rg_rng *r, uint64_t seed)
{
	uint64_t x = seed;

	for (int i = 0; i < 4; i++)
		r->s[i] = rg_splitmix64(&x);
}

void rg_rng_seed_stream(rg_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed;
	uint64_t a = rg_splitmix64(&x);
	uint64_t y = stream;
	uint64_t b = rg_splitmix64(&y);

	rg_rng_seed(r, a ^ b);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rg_rng_next(rg_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double rg_rng_uniform(rg_rng *r) { return (double)(rg_rng_next(r) >> 11) * 0x1.0p-53; }
