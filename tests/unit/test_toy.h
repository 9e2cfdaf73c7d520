/* The toy language model of the generation unit tests (test_gen.c, test_iter.c): the logits of
 * the next token are a hash of every token of its context and its position, so a wrong KV slot,
 * block table, shared block or recompute changes the output, and the reference needs no cache.
 * Include once per test program. */
#ifndef RG_TEST_TOY_H
#define RG_TEST_TOY_H
#include <stdint.h>

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* logits (V) of the next token after context ctx (n tokens): values in [-8, 8) */
static void toy_logits(int V, const int32_t *ctx, int n, float *out)
{
	uint64_t h = 0x12345678ull;

	for (int q = 0; q < n; q++)
		h = mix64(h ^ ((uint64_t)(ctx[q] + 1) | ((uint64_t)q << 32)));
	for (int v = 0; v < V; v++)
		out[v] = (float)((mix64(h + (uint64_t)v * 0x9e3779b97f4a7c15ull) >> 40) % 4096) /
			 256.0f - 8.0f;
}
#endif
