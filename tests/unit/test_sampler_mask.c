/* A grammar's masked draw (src/gen/sampler.c, used by src/gen/engine.c's host_sample): on random
 * rows and masks, rg_sampler_masked_argmax and rg_token_array_fill_masked + rg_sampler_sample_cand
 * give bit for bit what the old path gave (the row with every masked logit -inf through
 * rg_sampler_sample), for greedy and sampling chains alike, and the masked argmax equals a
 * brute-force reference (the lowest id of the largest allowed logit, its log-softmax over the
 * allowed tokens in double). Rows carry ties, -inf and BANNED-like values; vocabularies are
 * ragged (1, 7, 63, 64, 65, 1000, 49152). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/error.h"
#include "core/rng.h"
#include "gen/sampler.h"

static const int VOCABS[] = {1, 7, 63, 64, 65, 1000, 49152};

/* A random row (ties from a coarse grid, some -inf and -1e30) and a mask of density dens with
 * at least one bit set below vocab; the bits past vocab in the last word set too, as garbage
 * the functions must ignore. */
static void random_case(rg_rng *rng, int V, double dens, float *row, uint64_t *mask)
{
	const int words = (V + 63) / 64;

	for (int v = 0; v < V; v++) {
		double u = rg_rng_uniform(rng);

		row[v] = u < 0.02 ? -INFINITY : u < 0.04 ? -1e30f
					      : (float)((int)(rg_rng_uniform(rng) * 40) - 20) * 0.25f;
	}
	memset(mask, 0, (size_t)words * sizeof(uint64_t));
	for (int v = 0; v < V; v++)
		if (rg_rng_uniform(rng) < dens)
			mask[v >> 6] |= 1ull << (v & 63);
	mask[(V - 1) >> 6] |= (V & 63) ? ~0ull << (V & 63) : 0; /* past vocab */
	{
		const int v = (int)(rg_rng_uniform(rng) * V);

		mask[v >> 6] |= 1ull << (v & 63);
	}
}

static bool bit(const uint64_t *m, int v) { return m[v >> 6] >> (v & 63) & 1; }

/* The old engine path: masked logits -inf, the chain over the whole row. */
static rg_status old_draw(rg_sampler *s, const float *row, const uint64_t *mask, int V,
			  uint64_t seed, int n_top, rg_token_array *work, int32_t *id, float *lp,
			  int32_t *ti, float *tl)
{
	float *r = malloc((size_t)V * sizeof(float));
	rg_rng rng;
	rg_status st;

	assert_non_null(r);
	for (int v = 0; v < V; v++)
		r[v] = bit(mask, v) ? row[v] : -INFINITY;
	rg_rng_seed(&rng, seed);
	st = rg_sampler_sample(s, r, V, &rng, work, n_top, id, lp, ti, tl);
	free(r);
	return st;
}

static void test_masked_argmax_matches(void **state)
{
	rg_rng rng;
	rg_sampling_params p;
	rg_sampler *s;
	(void)state;

	rg_rng_seed(&rng, 31);
	rg_sampling_params_default(&p);
	assert_int_equal(rg_sampler_from_params(&p, 49152, NULL, 0, &s), RG_OK);
	assert_true(rg_sampler_is_greedy(s));
	for (size_t iv = 0; iv < sizeof(VOCABS) / sizeof(VOCABS[0]); iv++) {
		const int V = VOCABS[iv];
		float *row = malloc((size_t)V * sizeof(float));
		uint64_t *mask = malloc((size_t)((V + 63) / 64) * sizeof(uint64_t));
		rg_token_array work = {malloc((size_t)V * sizeof(rg_token_data)), 0, false, -1};

		assert_non_null(row);
		assert_non_null(mask);
		assert_non_null(work.data);
		for (int it = 0; it < 40; it++) {
			const double dens = it % 4 == 0 ? 0.001 : it % 4 == 1 ? 0.1 : it % 4 == 2 ? 0.5
												: 0.97;
			int32_t id, id_old, best = -1;
			float lp, lp_old, mx = -INFINITY;
			double sum = 0;

			random_case(&rng, V, dens, row, mask);
			assert_int_equal(rg_sampler_masked_argmax(row, V, mask, &id, &lp), RG_OK);
			/* the reference: lowest id of the largest allowed logit */
			for (int v = 0; v < V; v++)
				if (bit(mask, v) && (best < 0 || row[v] > row[best]))
					best = v;
			for (int v = 0; v < V; v++)
				if (bit(mask, v) && row[v] > mx)
					mx = row[v];
			for (int v = 0; v < V; v++)
				if (bit(mask, v))
					sum += exp((double)row[v] - (double)mx);
			assert_int_equal(id, best);
			if (mx > -INFINITY)
				assert_true(lp == (float)((double)row[best] - ((double)mx + log(sum))));
			/* the old path, wherever some allowed logit is finite (else it could pick a
			 * masked token) */
			if (mx > -INFINITY) {
				assert_int_equal(old_draw(s, row, mask, V, 0, 0, &work, &id_old, &lp_old,
							  NULL, NULL), RG_OK);
				assert_int_equal(id, id_old);
				assert_memory_equal(&lp, &lp_old, sizeof(float));
			}
		}
		free(work.data);
		free(mask);
		free(row);
	}
	rg_sampler_free(s);
}

/* Every chain kind over the gathered candidates against the old path: token, log-prob and the
 * top list, bit for bit, with the same RNG draw. */
static void test_sample_cand_matches(void **state)
{
	static const int32_t bias_ids[] = {0, 5, 64, 999, 30000};
	static const float bias_vals[] = {2.f, -3.f, 1.5f, 4.f, -1e30f};
	static const int32_t prompt[] = {1, 2, 3, 1, 2, 5, 6};
	rg_rng rng;
	(void)state;

	rg_rng_seed(&rng, 2031);
	for (int kind = 0; kind < 8; kind++) {
		for (size_t iv = 0; iv < sizeof(VOCABS) / sizeof(VOCABS[0]); iv++) {
			const int V = VOCABS[iv];
			float *row = malloc((size_t)V * sizeof(float));
			uint64_t *mask = malloc((size_t)((V + 63) / 64) * sizeof(uint64_t));
			rg_token_array work = {malloc((size_t)V * sizeof(rg_token_data)), 0, false, -1};
			rg_token_array cand = {malloc((size_t)V * sizeof(rg_token_data)), 0, false, -1};
			rg_sampling_params p;
			rg_sampler *s;
			int nb = 0;

			assert_non_null(row);
			assert_non_null(mask);
			assert_non_null(work.data);
			assert_non_null(cand.data);
			while (nb < 5 && bias_ids[nb] < V)
				nb++;
			rg_sampling_params_default(&p);
			p.do_sample = kind != 0 && kind != 5;
			p.temperature = kind == 2 ? 0.7f : 1.f;
			p.top_k = kind == 2 ? 20 : kind == 7 ? 3 : 0;
			p.top_p = kind == 3 ? 0.9f : 1.f;
			p.min_p = kind == 3 ? 0.05f : 0.f;
			p.repetition_penalty = kind == 4 || kind == 5 ? 1.3f : 1.f;
			p.frequency_penalty = kind == 4 ? 0.5f : 0.f;
			p.no_repeat_ngram_size = kind == 6 ? 2 : 0;
			if (kind == 5 || kind == 6) {
				p.n_logit_bias = nb;
				p.logit_bias_ids = bias_ids;
				p.logit_bias_values = bias_vals;
			}
			assert_int_equal(rg_sampler_from_params(&p, V, prompt, V >= 7 ? 7 : 0, &s),
					 RG_OK);
			for (int it = 0; it < 20; it++) {
				const double dens = it % 3 == 0 ? 0.01 : it % 3 == 1 ? 0.3 : 0.9;
				const uint64_t seed = 1000 + (uint64_t)it;
				const int n_top = it % 2 ? 5 : 0;
				int32_t id, id_old, ti[5], ti_old[5];
				float lp, lp_old, tl[5], tl_old[5];
				bool finite = false;
				rg_rng r2;

				random_case(&rng, V, dens, row, mask);
				for (int v = 0; v < V; v++)
					finite |= bit(mask, v) && row[v] > -INFINITY;
				if (!finite)
					continue; /* the old path's degenerate row (see above) */
				rg_token_array_fill_masked(&cand, row, V, mask);
				for (int i = 0; i < cand.size; i++)
					assert_true(bit(mask, cand.data[i].id) && cand.data[i].id < V &&
						    (i == 0 || cand.data[i].id > cand.data[i - 1].id));
				rg_rng_seed(&r2, seed);
				assert_int_equal(rg_sampler_sample_cand(s, &cand, &r2, n_top, &id, &lp,
									ti, tl), RG_OK);
				assert_int_equal(old_draw(s, row, mask, V, seed, n_top, &work, &id_old,
							  &lp_old, ti_old, tl_old), RG_OK);
				assert_int_equal(id, id_old);
				assert_true(bit(mask, id));
				assert_memory_equal(&lp, &lp_old, sizeof(float));
				if (n_top) {
					assert_memory_equal(ti, ti_old, sizeof(ti));
					assert_memory_equal(tl, tl_old, sizeof(tl));
				}
				rg_sampler_accept(s, id); /* penalties and n-grams see history */
			}
			rg_sampler_free(s);
			free(cand.data);
			free(work.data);
			free(mask);
			free(row);
		}
	}
}

static void test_masked_argmax_errors(void **state)
{
	float row[70] = {0};
	uint64_t mask[2] = {0, 0};
	int32_t id;
	float lp;
	(void)state;

	assert_int_equal(rg_sampler_masked_argmax(row, 70, mask, &id, &lp), RG_ERR_INTERNAL);
	mask[1] = ~0ull << 6; /* only bits past vocab 70 */
	assert_int_equal(rg_sampler_masked_argmax(row, 70, mask, &id, &lp), RG_ERR_INTERNAL);
	mask[0] = 1ull << 3;
	row[3] = NAN;
	assert_int_equal(rg_sampler_masked_argmax(row, 70, mask, &id, &lp), RG_ERR_INTERNAL);
	row[3] = 1.f;
	row[4] = NAN; /* masked out: not looked at */
	assert_int_equal(rg_sampler_masked_argmax(row, 70, mask, &id, &lp), RG_OK);
	assert_int_equal(id, 3);
	assert_true(lp == 0.f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_masked_argmax_matches),
		cmocka_unit_test(test_sample_cand_matches),
		cmocka_unit_test(test_masked_argmax_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
