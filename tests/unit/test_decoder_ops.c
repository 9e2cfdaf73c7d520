/* The decoder ops of src/ops/ops.h (add_norm, rope, rope_table, rope_kv_write, act_mul,
 * kv_write, paged_attention, copy_blocks, and LongRoPE's rope_table_scaled and Qwen3's qk_norm)
 * on the CPU backend, through their rg_op_* entry points,
 * against naive double-precision loops written here (rope_table and rope_kv_write: against the
 * ops they replace, bit for bit): ragged mixed batches (prefill chunks and decode tokens),
 * grouped-query heads, shuffled block tables, both RoPE pair layouts. Outputs carry guard values
 * that must survive; comparisons are written so that NaN fails. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/cpu/ops_cpu.h"
#include "ops/ops.h"
#include "test_act_ref.h"

#define GUARD 32
#define SENTINEL (-12345.25f)

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float frand(void) /* uniform in [-1, 1) */
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_buf(size_t n, float scale)
{
	float *p = malloc((n + GUARD) * sizeof(float));

	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand() * scale;
	for (size_t i = 0; i < GUARD; i++)
		p[n + i] = SENTINEL;
	return p;
}

static float *out_buf(size_t n)
{
	float *p = malloc((n + GUARD) * sizeof(float));

	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
	for (size_t i = 0; i < GUARD; i++)
		p[n + i] = SENTINEL;
	return p;
}

static void check(const char *what, const float *got, const double *ref, size_t n, double atol,
		  double rtol)
{
	for (size_t i = 0; i < n; i++)
		if (!(fabs(got[i] - ref[i]) <= atol + rtol * fabs(ref[i])))
			fail_msg("%s: element %zu got %.9g want %.9g", what, i, got[i], ref[i]);
	for (size_t i = 0; i < GUARD; i++)
		if (got[n + i] != SENTINEL)
			fail_msg("%s: guard %zu overwritten (%g)", what, i, got[n + i]);
}

static rg_backend *cpu(void)
{
	rg_backend *be = NULL;

	assert_int_equal(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be), RG_OK);
	return be;
}

static void test_add_norm(void **state)
{
	const int shapes[][2] = {{1, 7}, {5, 64}, {33, 576}};
	rg_backend *be = cpu();

	(void)state;
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		const int M = shapes[k][0], N = shapes[k][1];
		for (int kind = 0; kind < 2; kind++) {
			for (int with_x = 0; with_x < 2; with_x++) {
				float *x = rand_buf((size_t)M * N, 2.f), *r = rand_buf((size_t)M * N, 3.f);
				float *g = rand_buf((size_t)N, 1.f), *b = rand_buf((size_t)N, 0.5f);
				float *o = out_buf((size_t)M * N);
				double *rr = malloc((size_t)M * N * sizeof(double));
				double *ro = malloc((size_t)M * N * sizeof(double));

				for (int i = 0; i < M; i++) {
					double mean = 0, var = 0, *v = rr + (size_t)i * N;

					for (int j = 0; j < N; j++)
						v[j] = (double)r[(size_t)i * N + j] +
						       (with_x ? x[(size_t)i * N + j] : 0.0);
					for (int j = 0; j < N; j++)
						mean += v[j];
					mean /= N;
					for (int j = 0; j < N; j++)
						var += kind ? v[j] * v[j] : (v[j] - mean) * (v[j] - mean);
					var /= N;
					for (int j = 0; j < N; j++)
						ro[(size_t)i * N + j] =
							kind ? v[j] / sqrt(var + 1e-6) * g[j]
							     : (v[j] - mean) / sqrt(var + 1e-6) * g[j] + b[j];
				}
				assert_int_equal(rg_op_add_norm(be, with_x ? x : NULL, r, g,
								kind ? NULL : b, 1e-6f,
								(rg_norm_kind)kind, M, N, o),
						 RG_OK);
				check("add_norm residual", r, rr, (size_t)M * N, 1e-5, 1e-6);
				check("add_norm out", o, ro, (size_t)M * N, 2e-5, 2e-5);
				free(x), free(r), free(g), free(b), free(o), free(rr), free(ro);
			}
		}
	}
	/* out aliasing the residual is refused */
	{
		float r[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};

		assert_int_equal(rg_op_add_norm(be, NULL, r, g, NULL, 1e-6f, RG_NORM_RMS, 1, 4, r),
				 RG_ERR_INVALID_INPUT);
	}
	rg_backend_free(be);
}

/* Naive RoPE of one head (neox pairs), double. */
static void ref_rope(const float *x, int hd, int pos, const float *inv, double *out)
{
	for (int i = 0; i < hd / 2; i++) {
		double a = (double)pos * inv[i], c = cos(a), s = sin(a);

		out[i] = x[i] * c - x[i + hd / 2] * s;
		out[i + hd / 2] = x[i + hd / 2] * c + x[i] * s;
	}
}

/* llama.cpp's convert_hf_to_gguf permutation of one head's rows: HF index i (first half) and
 * i + hd/2 go to 2i and 2i + 1. */
static int perm(int j, int hd)
{
	return j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1;
}

static void test_rope_both_layouts(void **state)
{
	const int n = 7, heads = 3, hd = 16, ld = heads * hd + 5; /* a wider row stride */
	const int32_t pos[7] = {0, 1, 2, 17, 100, 2047, 5};
	float inv[8];
	float *a = rand_buf((size_t)n * ld, 1.f), *b = malloc(((size_t)n * ld + GUARD) * 4);
	double *ref = malloc((size_t)n * ld * sizeof(double));
	rg_backend *be = cpu();

	(void)state;
	for (int i = 0; i < hd / 2; i++)
		inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd));
	/* b: a with every head's columns permuted as GGUF stores q/k */
	memcpy(b, a, ((size_t)n * ld + GUARD) * 4);
	for (int t = 0; t < n; t++)
		for (int h = 0; h < heads; h++)
			for (int j = 0; j < hd; j++)
				b[(size_t)t * ld + h * hd + perm(j, hd)] = a[(size_t)t * ld + h * hd + j];
	for (int t = 0; t < n; t++) {
		for (int h = 0; h < heads; h++)
			ref_rope(a + (size_t)t * ld + h * hd, hd, pos[t], inv,
				 ref + (size_t)t * ld + h * hd);
		for (int j = heads * hd; j < ld; j++) /* columns past the heads untouched */
			ref[(size_t)t * ld + j] = a[(size_t)t * ld + j];
	}
	assert_int_equal(rg_op_rope(be, a, ld, n, heads, hd, pos, inv, false), RG_OK);
	assert_int_equal(rg_op_rope(be, b, ld, n, heads, hd, pos, inv, true), RG_OK);
	check("rope neox", a, ref, (size_t)n * ld, 1e-5, 1e-5);
	/* interleaved over the permuted rows is neox over the original ones, permuted */
	for (int t = 0; t < n; t++)
		for (int h = 0; h < heads; h++)
			for (int j = 0; j < hd; j++)
				if (b[(size_t)t * ld + h * hd + perm(j, hd)] !=
				    a[(size_t)t * ld + h * hd + j])
					fail_msg("rope interleaved: token %d head %d col %d differs",
						 t, h, j);
	assert_int_equal(rg_op_rope(be, a, ld, n, heads, 15, pos, inv, false),
			 RG_ERR_INVALID_INPUT); /* odd head_dim */
	free(a), free(b), free(ref);
	rg_backend_free(be);
}

/* rg_op_rope_table holds (float)cos / sin of the angle formed in double, bit for bit: the values
 * rg_op_rope turns by (positions up to 2^17, Llama-3-like small inverse frequencies). */
static void test_rope_table(void **state)
{
	const int hds[] = {2, 16, 64, 128};
	const int32_t pos[6] = {0, 1, 7, 4095, 131071, 33};
	rg_backend *be = cpu();

	(void)state;
	for (size_t k = 0; k < sizeof(hds) / sizeof(hds[0]); k++) {
		const int hd = hds[k], half = hd / 2, n = 6;
		float *inv = malloc((size_t)half * sizeof(float)), *tab = out_buf((size_t)n * hd);

		assert_non_null(inv);
		for (int i = 0; i < half; i++)
			inv[i] = (float)(1.0 / pow(500000.0, 2.0 * i / hd) / (i % 3 ? 1.0 : 8.0));
		assert_int_equal(rg_op_rope_table(be, pos, n, inv, hd, tab), RG_OK);
		for (int t = 0; t < n; t++)
			for (int i = 0; i < half; i++) {
				const double a = (double)pos[t] * (double)inv[i];

				if (tab[(size_t)t * hd + i] != (float)cos(a) ||
				    tab[(size_t)t * hd + half + i] != (float)sin(a))
					fail_msg("rope_table hd %d token %d pair %d: %.9g %.9g", hd,
						 t, i, tab[(size_t)t * hd + i],
						 tab[(size_t)t * hd + half + i]);
			}
		for (int i = 0; i < GUARD; i++)
			assert_true(tab[(size_t)n * hd + i] == SENTINEL);
		assert_int_equal(rg_op_rope_table(be, pos, 0, inv, hd, tab), RG_OK);
		free(inv), free(tab);
	}
	{
		float inv[4] = {1, 1, 1, 1}, tab[16];

		assert_int_equal(rg_op_rope_table(be, pos, 2, inv, 7, tab), RG_ERR_INVALID_INPUT);
		assert_int_equal(rg_op_rope_table(be, pos, -1, inv, 8, tab), RG_ERR_INVALID_INPUT);
		assert_int_equal(rg_op_rope_table(be, pos, 2, inv, 8, NULL), RG_ERR_INVALID_INPUT);
	}
	rg_backend_free(be);
}

/* rg_op_rope_table_scaled (LongRoPE): positions below long_from turn by inv, the others by
 * inv_long, and both values are (float)(cos / sin (a) * mscale) of the angle in double; with no
 * long set and mscale 1 it is rg_op_rope_table bit for bit. */
static void test_rope_table_scaled(void **state)
{
	const int hd = 16, half = 8, n = 6;
	const int32_t pos[6] = {0, 1, 63, 64, 65, 4000};
	float inv[8], inv_l[8], *tab = out_buf((size_t)n * hd), *ref = out_buf((size_t)n * hd);
	const float ms = 1.19f;
	rg_backend *be = cpu();

	(void)state;
	for (int i = 0; i < half; i++) {
		inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd) / (1.0 + 0.1 * i));
		inv_l[i] = inv[i] / (float)(1 + 3 * i);
	}
	assert_int_equal(rg_op_rope_table_scaled(be, pos, n, inv, inv_l, 64, ms, hd, tab), RG_OK);
	for (int t = 0; t < n; t++)
		for (int i = 0; i < half; i++) {
			const double a = (double)pos[t] * (double)(pos[t] < 64 ? inv[i] : inv_l[i]);

			if (tab[(size_t)t * hd + i] != (float)(cos(a) * (double)ms) ||
			    tab[(size_t)t * hd + half + i] != (float)(sin(a) * (double)ms))
				fail_msg("rope_table_scaled token %d pair %d", t, i);
		}
	for (int i = 0; i < GUARD; i++)
		assert_true(tab[(size_t)n * hd + i] == SENTINEL);
	assert_int_equal(rg_op_rope_table_scaled(be, pos, n, inv, NULL, 0, 1.f, hd, tab), RG_OK);
	assert_int_equal(rg_op_rope_table(be, pos, n, inv, hd, ref), RG_OK);
	assert_memory_equal(tab, ref, (size_t)n * hd * sizeof(float));
	assert_int_equal(rg_op_rope_table_scaled(be, pos, n, inv, inv_l, 64, 0.f, hd, tab),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rope_table_scaled(be, pos, n, inv, inv_l, 64, NAN, hd, tab),
			 RG_ERR_INVALID_INPUT);
	free(tab), free(ref);
	rg_backend_free(be);
}

/* rg_op_qk_norm (Qwen3's q_norm / k_norm) against a double loop: every Q head by q_gamma, every
 * K head by k_gamma, V and the padding columns untouched; ragged token counts and GQA shapes. */
static void test_qk_norm(void **state)
{
	const int shapes[][4] = {{4, 2, 16, 0}, {2, 1, 128, 3}, {3, 3, 8, 1}}; /* NH KVH HD pad */
	rg_backend *be = cpu();

	(void)state;
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		const int NH = shapes[k][0], KVH = shapes[k][1], HD = shapes[k][2];
		const int ld = (NH + 2 * KVH) * HD + shapes[k][3];
		const float eps = 1e-6f;

		for (int n = 1; n <= 7; n += 6) {
			float *x = rand_buf((size_t)n * ld, 3.f), *x0 = malloc((size_t)n * ld * 4);
			float *gq = rand_buf((size_t)HD, 1.f), *gk = rand_buf((size_t)HD, 1.f);

			assert_non_null(x0);
			memcpy(x0, x, (size_t)n * ld * sizeof(float));
			assert_int_equal(rg_op_qk_norm(be, x, ld, n, NH, KVH, HD, gq, gk, eps), RG_OK);
			for (int t = 0; t < n; t++)
				for (int h = 0; h < NH + 2 * KVH; h++) {
					const float *a = x0 + (size_t)t * ld + (size_t)h * HD;
					const float *b = x + (size_t)t * ld + (size_t)h * HD;
					const float *g = h < NH ? gq : gk;
					double ss = 0;

					for (int i = 0; i < HD; i++)
						ss += (double)a[i] * a[i];
					for (int i = 0; i < HD; i++) {
						const double want = h < NH + KVH
							? a[i] / sqrt(ss / HD + eps) * g[i] : a[i];

						if (!(fabs(b[i] - want) <= 1e-5 + 1e-5 * fabs(want)))
							fail_msg("qk_norm NH %d HD %d t %d h %d i %d: "
								 "%.9g vs %.9g", NH, HD, t, h, i,
								 b[i], want);
					}
				}
			for (int t = 0; t < n; t++) /* the padding past V */
				for (int i = (NH + 2 * KVH) * HD; i < ld; i++)
					assert_true(x[(size_t)t * ld + i] == x0[(size_t)t * ld + i]);
			free(x), free(x0), free(gq), free(gk);
		}
	}
	{
		float x[64], g[8];

		assert_int_equal(rg_op_qk_norm(be, x, 8, 1, 1, 1, 8, g, g, 1e-6f),
				 RG_ERR_INVALID_INPUT); /* ld < (NH + KVH) HD */
		assert_int_equal(rg_op_qk_norm(be, x, 24, 1, 1, 1, 8, NULL, g, 1e-6f),
				 RG_ERR_INVALID_INPUT);
	}
	rg_backend_free(be);
}

/* rg_op_rope_kv_write against the composition it replaces, rg_op_rope over the Q and K heads
 * then rg_op_kv_write, on the same inputs: qkv (turned Q and K, untouched V and the columns past
 * it) and both caches (written slots and the others) must be equal bit for bit, in both pair
 * layouts, for ragged token counts and GQA shapes; then bad slots and shapes are refused with
 * nothing written. */
static void run_rope_kv_write(int NH, int KVH, int HD, int n, int pad)
{
	const int qd = NH * HD, kvd = KVH * HD, ld = qd + 2 * kvd + pad, n_slots = 3 * n + 5;
	const size_t nq = (size_t)n * ld, nc = (size_t)n_slots * kvd;
	float *inv = malloc((size_t)HD / 2 * sizeof(float)), *tab = out_buf((size_t)n * HD);
	int32_t *pos = malloc((size_t)n * 4), *slots = malloc((size_t)n * 4);
	float *qa = rand_buf(nq, 2.f), *qb = malloc((nq + GUARD) * 4);
	float *ka = rand_buf(nc, 1.f), *va = rand_buf(nc, 1.f);
	float *kb = malloc((nc + GUARD) * 4), *vb = malloc((nc + GUARD) * 4);
	float *q0 = malloc((nq + GUARD) * 4);
	rg_backend *be = cpu();

	assert_true(inv && pos && slots && qb && kb && vb && q0);
	for (int i = 0; i < HD / 2; i++)
		inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / HD));
	for (int t = 0; t < n; t++) {
		pos[t] = (t * 37 + 3) % 3000;
		slots[t] = (t * 7 + 2) % n_slots; /* scattered, distinct (checked) */
	}
	for (int t = 0; t < n; t++)
		for (int u = 0; u < t; u++)
			assert_true(slots[t] != slots[u]);
	memcpy(q0, qa, (nq + GUARD) * 4);
	for (int il = 0; il < 2; il++) {
		memcpy(qa, q0, (nq + GUARD) * 4);
		memcpy(qb, q0, (nq + GUARD) * 4);
		memcpy(kb, ka, (nc + GUARD) * 4);
		memcpy(vb, va, (nc + GUARD) * 4);
		assert_int_equal(rg_op_rope(be, qa, ld, n, NH + KVH, HD, pos, inv, il), RG_OK);
		assert_int_equal(rg_op_kv_write(be, qa + qd, qa + qd + kvd, ld, slots, n, kvd, ka, va,
						n_slots),
				 RG_OK);
		assert_int_equal(rg_op_rope_table(be, pos, n, inv, HD, tab), RG_OK);
		assert_int_equal(rg_op_rope_kv_write(be, qb, ld, n, NH, KVH, HD, tab, il, slots, kb,
						     vb, n_slots),
				 RG_OK);
		if (memcmp(qa, qb, (nq + GUARD) * 4))
			fail_msg("rope_kv_write qkv differs (heads %d/%d hd %d n %d il %d)", NH, KVH,
				 HD, n, il);
		if (memcmp(ka, kb, (nc + GUARD) * 4) || memcmp(va, vb, (nc + GUARD) * 4))
			fail_msg("rope_kv_write cache differs (heads %d/%d hd %d n %d il %d)", NH,
				 KVH, HD, n, il);
		/* and Q did turn (not a no-op on both sides) */
		if (n > 1 && !memcmp(qb + ld, q0 + ld, (size_t)qd * 4))
			fail_msg("rope_kv_write left token 1's Q as it was");
	}
	/* a slot outside [0, n_slots), negative or past the end: refused, nothing written */
	for (int bad = 0; bad < 2; bad++) {
		const int32_t keep = slots[n - 1];

		memcpy(qb, q0, (nq + GUARD) * 4);
		slots[n - 1] = bad ? n_slots : -1;
		assert_int_equal(rg_op_rope_kv_write(be, qb, ld, n, NH, KVH, HD, tab, false, slots,
						     kb, vb, n_slots),
				 RG_ERR_INVALID_INPUT);
		assert_memory_equal(qb, q0, (nq + GUARD) * 4);
		assert_memory_equal(kb, ka, (nc + GUARD) * 4);
		assert_memory_equal(vb, va, (nc + GUARD) * 4);
		slots[n - 1] = keep;
	}
	/* shapes */
	assert_int_equal(rg_op_rope_kv_write(be, qb, qd + 2 * kvd - 1, n, NH, KVH, HD, tab, false,
					     slots, kb, vb, n_slots),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rope_kv_write(be, qb, ld, n, NH, 0, HD, tab, false, slots, kb, vb,
					     n_slots),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rope_kv_write(be, qb, ld, n, NH, KVH, HD - 1, tab, false, slots, kb,
					     vb, n_slots),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rope_kv_write(be, qb, ld, n, NH, KVH, HD, NULL, false, slots, kb, vb,
					     n_slots),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_rope_kv_write(be, qb, ld, 0, NH, KVH, HD, tab, false, slots, kb, vb,
					     n_slots),
			 RG_OK);
	free(inv), free(tab), free(pos), free(slots), free(qa), free(qb), free(ka), free(va);
	free(kb), free(vb), free(q0);
	rg_backend_free(be);
}

static void test_rope_kv_write(void **state)
{
	(void)state;
	run_rope_kv_write(9, 3, 64, 33, 0);  /* SmolLM2-135M's heads */
	run_rope_kv_write(9, 3, 64, 1, 0);   /* one decode token */
	run_rope_kv_write(3, 1, 16, 7, 5);   /* a wider row stride */
	run_rope_kv_write(4, 4, 6, 12, 3);   /* no GQA, an odd pair count */
	run_rope_kv_write(2, 1, 128, 128, 0);
}

static void test_act_mul(void **state)
{
	const int M = 9, N = 37;
	float *x = rand_buf((size_t)M * 2 * N, 4.f), *o = out_buf((size_t)M * N);
	double *ref = malloc((size_t)M * N * sizeof(double));
	rg_backend *be = cpu();

	(void)state;
	for (int a = RG_ACT_NONE; a <= RG_ACT_SILU; a++) {
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				double g = x[(size_t)i * 2 * N + j], u = x[(size_t)i * 2 * N + N + j];

				ref[(size_t)i * N + j] = ref_act(g, (rg_act)a) * u;
			}
		assert_int_equal(rg_op_act_mul(be, x, M, N, (rg_act)a, o), RG_OK);
		check(rg_act_name((rg_act)a), o, ref, (size_t)M * N, 1e-6, 1e-5);
	}
	assert_int_equal(rg_op_act_mul(be, x, M, N, (rg_act)99, o), RG_ERR_INVALID_INPUT);
	free(x), free(o), free(ref);
	rg_backend_free(be);
}

/* A mixed batch: sequence i has ctx[i] positions, the last nq[i] new this step; its keys and
 * values live in shuffled blocks of BS positions. The new K/V rows go in through kv_write (from
 * a strided fused buffer), the cached ones are written directly; attention is compared with a
 * naive causal GQA attention over each sequence's contiguous K/V in double. HD and BS vary so
 * that the kernels' vector bodies and scalar tails both run (HD 8, 64 and 72 against 4, 8 and 16
 * lanes); with `hostile`, bad descriptors and slots are refused too. rel_max >= 0: a random
 * relative position bias table (NH, 2 rel_max + 1) on the descriptor (T5's decoder
 * self-attention), added at key position k and the query's absolute position p as
 * table[h][rel_max + clamp(k - p, -rel_max, rel_max)]; -1: none. */
static void run_paged_attention(int HD, int BS, int NSEQ, const int *nq, const int32_t *ctx,
				bool hostile, int rel_max)
{
	enum { NH = 6, KVH = 2, MAXB = 16, MAXSEQ = 8 };
	const int qd = NH * HD, kvd = KVH * HD, ld = qd + 2 * kvd;
	int32_t cu[MAXSEQ + 1] = {0}, bt[MAXSEQ][MAXB], slots[256], order[256];
	int NB = 4, max_ctx = 0;
	float *kc, *vc;
	float *kfull[MAXSEQ], *vfull[MAXSEQ];
	float *qkv, *out;
	double *ref;
	float *rel = rel_max >= 0 ? rand_buf((size_t)NH * (2 * rel_max + 1), 4.f) : NULL;
	int n = 0, next = 0;
	rg_backend *be = cpu();
	rg_attn_desc d;

	assert_true(NSEQ <= MAXSEQ);
	for (int i = 0; i < NSEQ; i++) {
		NB += (ctx[i] + BS - 1) / BS;
		max_ctx = ctx[i] > max_ctx ? ctx[i] : max_ctx;
		assert_true((ctx[i] + BS - 1) / BS <= MAXB && ctx[i] <= 64);
	}
	assert_true(NB <= 256);
	kc = rand_buf((size_t)NB * BS * kvd, 9.f);
	vc = rand_buf((size_t)NB * BS * kvd, 9.f);
	for (int i = 0; i < NB; i++)
		order[i] = i;
	for (int i = NB - 1; i > 0; i--) { /* shuffle the free list */
		int j = (int)((frand() + 1.f) * 0.5f * (float)(i + 1)) % (i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (int i = 0; i < NSEQ; i++) {
		cu[i + 1] = cu[i] + nq[i];
		for (int b = 0; b < (ctx[i] + BS - 1) / BS; b++)
			bt[i][b] = order[next++];
		for (int b = (ctx[i] + BS - 1) / BS; b < MAXB; b++)
			bt[i][b] = -99; /* past the table: never read */
	}
	n = cu[NSEQ];
	qkv = rand_buf((size_t)n * ld, 1.f);
	out = out_buf((size_t)n * qd);
	ref = malloc((size_t)n * qd * sizeof(double));
	for (int i = 0; i < NSEQ; i++) {
		kfull[i] = rand_buf((size_t)ctx[i] * kvd, 1.f);
		vfull[i] = rand_buf((size_t)ctx[i] * kvd, 1.f);
		for (int p = 0; p < ctx[i]; p++) {
			const int slot = bt[i][p / BS] * BS + p % BS;
			const int j = p - (ctx[i] - nq[i]); /* new row index, or < 0 for cached */

			if (j >= 0) { /* new: its K/V come from qkv, through kv_write */
				memcpy(kfull[i] + (size_t)p * kvd, qkv + (size_t)(cu[i] + j) * ld + qd,
				       (size_t)kvd * 4);
				memcpy(vfull[i] + (size_t)p * kvd,
				       qkv + (size_t)(cu[i] + j) * ld + qd + kvd, (size_t)kvd * 4);
				slots[cu[i] + j] = slot;
			} else {
				memcpy(kc + (size_t)slot * kvd, kfull[i] + (size_t)p * kvd,
				       (size_t)kvd * 4);
				memcpy(vc + (size_t)slot * kvd, vfull[i] + (size_t)p * kvd,
				       (size_t)kvd * 4);
			}
		}
	}
	/* reference */
	for (int i = 0; i < NSEQ; i++)
		for (int j = 0; j < nq[i]; j++) {
			const int t = cu[i] + j, pos = ctx[i] - nq[i] + j;

			for (int h = 0; h < NH; h++) {
				const int kh = h / (NH / KVH);
				double s[64], mx = -INFINITY, sum = 0;

				for (int k = 0; k <= pos; k++) {
					double a = 0;
					for (int e = 0; e < HD; e++)
						a += (double)qkv[(size_t)t * ld + h * HD + e] *
						     kfull[i][(size_t)k * kvd + kh * HD + e];
					s[k] = a * 0.3;
					if (rel) {
						int r = k - pos < -rel_max ? -rel_max : k - pos;

						s[k] += rel[h * (2 * rel_max + 1) + rel_max + r];
					}
					mx = s[k] > mx ? s[k] : mx;
				}
				for (int k = 0; k <= pos; k++)
					sum += (s[k] = exp(s[k] - mx));
				for (int e = 0; e < HD; e++) {
					double o = 0;
					for (int k = 0; k <= pos; k++)
						o += s[k] / sum * vfull[i][(size_t)k * kvd + kh * HD + e];
					ref[(size_t)t * qd + h * HD + e] = o;
				}
			}
		}
	assert_int_equal(rg_op_kv_write(be, qkv + qd, qkv + qd + kvd, ld, slots, n, kvd, kc, vc,
					(int64_t)NB * BS),
			 RG_OK);
	memset(&d, 0, sizeof(d));
	d.causal = true;
	d.num_heads = NH;
	d.num_kv_heads = KVH;
	d.head_dim = HD;
	d.scale = 0.3f;
	d.n_seq = NSEQ;
	d.cu_seqlens_q = d.cu_seqlens_q_h = cu;
	d.context_lens = d.context_lens_h = ctx;
	d.max_context_len = max_ctx;
	d.block_tables = &bt[0][0];
	d.max_blocks_per_seq = MAXB;
	d.block_size = BS;
	d.n_blocks = NB;
	d.rel_bias = rel;
	d.rel_max = rel_max;
	assert_int_equal(rg_op_paged_attention(be, &d, qkv, ld, kc, vc, out), RG_OK);
	check(rel ? "paged attention with a relative bias" : "paged attention", out, ref,
	      (size_t)n * qd, 1e-5, 1e-5);
	if (!hostile)
		goto out_free;
	/* hostile descriptors and slots */
	if (rel) {
		d.rel_max = -1;
		assert_int_equal(rg_op_paged_attention(be, &d, qkv, ld, kc, vc, out),
				 RG_ERR_INVALID_INPUT);
		d.rel_max = rel_max;
	}
	bt[1][2] = NB;
	assert_int_equal(rg_op_paged_attention(be, &d, qkv, ld, kc, vc, out), RG_ERR_INVALID_INPUT);
	bt[1][2] = order[0];
	d.num_kv_heads = 4; /* 6 % 4 != 0 */
	assert_int_equal(rg_op_paged_attention(be, &d, qkv, ld, kc, vc, out), RG_ERR_INVALID_INPUT);
	d.num_kv_heads = KVH;
	d.causal = false;
	assert_int_equal(rg_op_paged_attention(be, &d, qkv, ld, kc, vc, out), RG_ERR_UNSUPPORTED);
	slots[3] = NB * BS;
	assert_int_equal(rg_op_kv_write(be, qkv + qd, qkv + qd + kvd, ld, slots, n, kvd, kc, vc,
					(int64_t)NB * BS),
			 RG_ERR_INVALID_INPUT);
	for (size_t i = 0; i < GUARD; i++)
		assert_true(kc[(size_t)NB * BS * kvd + i] == SENTINEL &&
			    vc[(size_t)NB * BS * kvd + i] == SENTINEL);
out_free:
	for (int i = 0; i < NSEQ; i++)
		free(kfull[i]), free(vfull[i]);
	free(kc), free(vc), free(qkv), free(out), free(ref), free(rel);
	rg_backend_free(be);
}

/* every kernel table this CPU runs: prefill chunks and decode rows in one batch, and a lone
 * decode row (its group's query heads split over the threads), for several head sizes */
static void test_paged_attention_mixed(void **state)
{
	static const char *const isas[] = {"avx512", "avx2", "generic"};
	const int nq[4] = {5, 1, 1, 7}, one[1] = {1}, dec[3] = {1, 1, 1};
	const int32_t ctx[4] = {5, 9, 1, 13}, ctx1[1] = {40}, ctx3[3] = {17, 33, 2};
	(void)state;

	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		if (rg_cpu_force_isa(isas[i]) != RG_OK)
			continue;
		run_paged_attention(8, 3, 4, nq, ctx, i == 0, -1);
		run_paged_attention(64, 16, 4, nq, ctx, false, -1);
		run_paged_attention(72, 5, 4, nq, ctx, false, -1);
		run_paged_attention(64, 16, 1, one, ctx1, false, -1);
		run_paged_attention(64, 16, 3, dec, ctx3, false, -1);
		/* relative bias: distances past rel_max (3) share the table's end; rel_max 0; a
		 * table wider than every context */
		run_paged_attention(8, 3, 4, nq, ctx, i == 0, 3);
		run_paged_attention(64, 16, 3, dec, ctx3, false, 0);
		run_paged_attention(72, 5, 1, one, ctx1, false, 64);
	}
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) /* back to the widest */
		if (rg_cpu_force_isa(isas[i]) == RG_OK)
			break;
}

static void test_copy_blocks(void **state)
{
	const size_t bb = 24; /* bytes per block */
	unsigned char pool[6 * 24], want[6 * 24], pools[3][7 * 24], wantp[3][7 * 24];
	const int32_t src[3] = {0, 4, 2}, dst[3] = {5, 1, 2};
	/* a chain (block 1 is written, then read): "as if in order" */
	const int32_t csrc[2] = {3, 1}, cdst[2] = {1, 6};
	rg_backend *be = cpu();

	(void)state;
	for (size_t i = 0; i < sizeof(pool); i++)
		pool[i] = (unsigned char)i;
	memcpy(want, pool, sizeof(pool));
	memcpy(want + 5 * bb, want + 0 * bb, bb);
	memcpy(want + 1 * bb, want + 4 * bb, bb);
	assert_int_equal(rg_op_copy_blocks(be, pool, bb, 1, 0, src, dst, 3), RG_OK);
	assert_memory_equal(pool, want, sizeof(pool));
	/* three pools 7 blocks apart, one call: each pool gets the same copies */
	for (int p = 0; p < 3; p++) {
		for (size_t i = 0; i < sizeof(pools[p]); i++)
			pools[p][i] = (unsigned char)(i * 7 + (size_t)p * 31);
		memcpy(wantp[p], pools[p], sizeof(pools[p]));
		memcpy(wantp[p] + 1 * bb, wantp[p] + 3 * bb, bb);
		memcpy(wantp[p] + 6 * bb, wantp[p] + 1 * bb, bb);
	}
	assert_int_equal(rg_op_copy_blocks(be, pools, bb, 3, sizeof(pools[0]), csrc, cdst, 2), RG_OK);
	assert_memory_equal(pools, wantp, sizeof(pools));
	assert_int_equal(rg_op_copy_blocks(be, pool, bb, 1, 0, src, dst, -1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_op_copy_blocks(be, pool, bb, 0, 0, src, dst, 3), RG_ERR_INVALID_INPUT);
	rg_backend_free(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_norm),
		cmocka_unit_test(test_rope_both_layouts),
		cmocka_unit_test(test_rope_table),
		cmocka_unit_test(test_rope_table_scaled),
		cmocka_unit_test(test_qk_norm),
		cmocka_unit_test(test_rope_kv_write),
		cmocka_unit_test(test_act_mul),
		cmocka_unit_test(test_paged_attention_mixed),
		cmocka_unit_test(test_copy_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
