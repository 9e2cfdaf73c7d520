/* Decoding (src/gen/) over a toy model whose "KV cache" is an int per slot holding the token
 * written there, and whose logits for a row are a hash of ALL tokens of its context read back
 * through the block table: a wrong block table, fork or copy-on-write copy changes the output.
 * Checked: greedy equals a direct argmax over the full context (no cache); sampled outputs
 * equal the sampler chain run directly on full-context logits with the same RNG streams;
 * batch invariance and chunked-prefill invariance; beam and diverse beam identical alone and in a
 * batch; stop strings, stop ids, EOS, max_tokens; hierarchical top-k equals a full sort; KV
 * blocks in use return to zero after every run, after injected step errors, a full pool and a
 * cancelling callback. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gen/engine.h"
#include "gen/generate.h"
#include "gen/topk.h"
#include "test_rng.h"
#include "test_toy.h"

/* ---- the toy model ---- */
typedef struct toy {
	int V, bs, n_blocks, max_ctx;
	int *cache;     /* (n_blocks * bs) token per slot, -1 unwritten */
	int fail_at;    /* step index that fails with RG_ERR_CUDA, -1 never */
	int n_steps, n_copies, max_step_tokens_seen;
} toy;

static rg_status toy_step(void *c, const rg_step_batch *b, float *logits)
{
	toy *t = c;
	int32_t ctxbuf[512];
	int li = 0;

	if (t->n_steps++ == t->fail_at)
		return RG_ERR_CUDA;
	if (b->n_tokens > t->max_step_tokens_seen)
		t->max_step_tokens_seen = b->n_tokens;
	/* write every new token first, checking positions and slots against the block tables */
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int n_new = b->cu_seqlens_q[i + 1] - b->cu_seqlens_q[i];

		for (int j = 0; j < n_new; j++) {
			int r = b->cu_seqlens_q[i] + j, pos = b->context_lens[i] - n_new + j;

			if (b->positions[r] != pos ||
			    b->slot_mapping[r] != tab[pos / t->bs] * t->bs + pos % t->bs)
				return RG_ERR_INTERNAL;
			t->cache[b->slot_mapping[r]] = b->tokens[r];
		}
	}
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int n_new = b->cu_seqlens_q[i + 1] - b->cu_seqlens_q[i];

		for (int j = 0; j < n_new; j++) {
			int r = b->cu_seqlens_q[i] + j, pos = b->context_lens[i] - n_new + j;

			if (li >= b->n_logits || b->logits_rows[li] != r)
				continue;
			for (int q = 0; q <= pos; q++)
				ctxbuf[q] = t->cache[tab[q / t->bs] * t->bs + q % t->bs];
			toy_logits(t->V, ctxbuf, pos + 1, logits + (size_t)li * t->V);
			li++;
		}
	}
	return li == b->n_logits ? RG_OK : RG_ERR_INTERNAL;
}

static rg_status toy_copy(void *c, const int32_t *src, const int32_t *dst, int n)
{
	toy *t = c;

	for (int i = 0; i < n; i++)
		memcpy(t->cache + dst[i] * t->bs, t->cache + src[i] * t->bs,
		       (size_t)t->bs * sizeof(int));
	t->n_copies += n;
	return RG_OK;
}

static rg_gen_runner toy_runner(toy *t, int V, int bs, int n_blocks, int max_ctx)
{
	rg_gen_runner r = {.ctx = t, .vocab_size = V, .block_size = bs, .n_blocks = n_blocks,
			   .max_context = max_ctx, .step = toy_step, .copy_blocks = toy_copy};

	memset(t, 0, sizeof(*t));
	t->V = V, t->bs = bs, t->n_blocks = n_blocks, t->max_ctx = max_ctx, t->fail_at = -1;
	t->cache = malloc((size_t)n_blocks * bs * sizeof(int));
	for (int i = 0; i < n_blocks * bs; i++)
		t->cache[i] = -1;
	return r;
}

#define NP 4
static const int32_t P0[] = {1, 2, 3}, P1[] = {7}, P2[] = {5, 9, 11, 2, 30, 4, 4, 8, 19, 1, 0},
		     P3[] = {3, 3, 3, 3, 3, 3, 3};
static const int32_t *const PROMPTS[NP] = {P0, P1, P2, P3};
static const int PLENS[NP] = {3, 1, 11, 7};

static void expect_same(const rg_gen_seq *a, const rg_gen_seq *b)
{
	assert_int_equal(a->n_ids, b->n_ids);
	assert_int_equal(a->finish, b->finish);
	assert_memory_equal(a->ids, b->ids, (size_t)a->n_ids * sizeof(int32_t));
	for (int k = 0; k < a->n_ids; k++)
		assert_true(a->logprobs[k] == b->logprobs[k]);
}

static void test_greedy_matches_direct(void **state)
{
	toy t;
	rg_gen_runner r = toy_runner(&t, 37, 4, 64, 64);
	rg_kv_pool *pool;
	rg_gen_params p;
	rg_gen_result *res;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&pool, 64, 4), RG_OK);
	rg_gen_params_default(&p);
	p.max_tokens = 12;
	p.max_step_tokens = 8; /* prompt 2 (11 tokens) spans two prefill steps */
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &res), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(pool), 0);
	assert_int_equal(res->n_seqs, NP);
	for (int i = 0; i < NP; i++) {
		int32_t ctx[64];
		float lg[37];
		int n = PLENS[i];

		memcpy(ctx, PROMPTS[i], (size_t)n * sizeof(int32_t));
		assert_int_equal(res->seqs[i].n_ids, 12);
		assert_int_equal(res->seqs[i].finish, RG_FINISH_LENGTH);
		assert_int_equal(res->seqs[i].prompt_tokens, PLENS[i]);
		for (int k = 0; k < 12; k++) {
			int best = 0;

			toy_logits(37, ctx, n, lg);
			for (int v = 1; v < 37; v++)
				if (lg[v] > lg[best])
					best = v;
			assert_int_equal(res->seqs[i].ids[k], best);
			ctx[n++] = best;
		}
	}
	assert_true(t.max_step_tokens_seen <= 8);
	rg_gen_result_free(res);
	rg_kv_pool_free(pool);
	free(t.cache);
}

/* A runner that chooses greedily itself (rg_gen_runner.step_argmax, as rg_model_step's greedy
 * path does on the device): the toy's logits, argmax (lowest id on ties) and its log-softmax. */
static int g_argmax_calls, g_logit_calls;
static rg_status toy_step_counted(void *c, const rg_step_batch *b, float *logits)
{
	g_logit_calls++;
	return toy_step(c, b, logits);
}

static rg_status toy_step_argmax(void *c, const rg_step_batch *b, int32_t *ids, float *lps)
{
	toy *t = c;
	float *lg = malloc((size_t)(b->n_logits ? b->n_logits : 1) * t->V * sizeof(float));
	rg_status st;

	g_argmax_calls++;
	if (!lg)
		return RG_ERR_OOM;
	st = toy_step(c, b, lg);
	for (int r = 0; st == RG_OK && r < b->n_logits; r++) {
		const float *row = lg + (size_t)r * t->V;
		double sum = 0.0;
		int best = 0;

		for (int v = 1; v < t->V; v++)
			if (row[v] > row[best])
				best = v;
		for (int v = 0; v < t->V; v++)
			sum += exp((double)row[v] - (double)row[best]);
		ids[r] = best;
		lps[r] = (float)-log(sum);
	}
	free(lg);
	return st;
}

/* Plain greedy through step_argmax gives the same ids and log-probs as sampling greedily from the
 * logits, and takes only the argmax path; a request it cannot serve (penalties, top-N log-probs)
 * takes the logits path. */
static void test_greedy_through_step_argmax(void **state)
{
	toy t1, t2;
	rg_gen_runner plain = toy_runner(&t1, 37, 4, 64, 64), fast = toy_runner(&t2, 37, 4, 64, 64);
	rg_gen_params p;
	rg_gen_result *a, *b;
	(void)state;

	fast.step = toy_step_counted;
	fast.step_argmax = toy_step_argmax;
	rg_gen_params_default(&p);
	p.max_tokens = 10;
	p.max_step_tokens = 8;
	assert_int_equal(rg_gen_run(&plain, PROMPTS, PLENS, NP, &p, NULL, &a), RG_OK);
	g_argmax_calls = g_logit_calls = 0;
	assert_int_equal(rg_gen_run(&fast, PROMPTS, PLENS, NP, &p, NULL, &b), RG_OK);
	assert_true(g_argmax_calls > 0);
	assert_int_equal(g_logit_calls, 0);
	for (int i = 0; i < NP; i++) {
		assert_int_equal(a->seqs[i].n_ids, b->seqs[i].n_ids);
		assert_memory_equal(a->seqs[i].ids, b->seqs[i].ids,
				    (size_t)a->seqs[i].n_ids * sizeof(int32_t));
		for (int k = 0; k < a->seqs[i].n_ids; k++)
			assert_true(fabsf(a->seqs[i].logprobs[k] - b->seqs[i].logprobs[k]) <= 1e-5f);
	}
	rg_gen_result_free(a);
	rg_gen_result_free(b);
	/* a repetition penalty needs the logits on the host */
	p.sampling.repetition_penalty = 1.3f;
	g_argmax_calls = g_logit_calls = 0;
	assert_int_equal(rg_gen_run(&fast, PROMPTS, PLENS, NP, &p, NULL, &b), RG_OK);
	assert_int_equal(g_argmax_calls, 0);
	assert_true(g_logit_calls > 0);
	rg_gen_result_free(b);
	free(t1.cache);
	free(t2.cache);
}

/* n samples per prompt with penalties, top-k/p: equal to the chain applied directly */
static void test_sampling_matches_direct_and_batch_invariant(void **state)
{
	toy t;
	rg_gen_runner r = toy_runner(&t, 41, 3, 200, 64);
	rg_kv_pool *pool;
	rg_gen_params p;
	rg_gen_result *res, *alone;
	rg_token_array work;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&pool, 200, 3), RG_OK);
	rg_gen_params_default(&p);
	p.sampling.do_sample = true;
	p.sampling.temperature = 0.8f;
	p.sampling.top_k = 20;
	p.sampling.top_p = 0.95f;
	p.sampling.repetition_penalty = 1.3f;
	p.sampling.frequency_penalty = 0.5f;
	p.n = 3;
	p.seed = 77;
	p.max_tokens = 10;
	p.logprobs = 3;
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &res), RG_OK);
	assert_int_equal(rg_kv_pool_n_used(pool), 0);
	/* (each sample is its own sequence of the engine, as in `ragged serve`: no fork) */
	work.data = malloc(41 * sizeof(rg_token_data));
	for (int i = 0; i < NP; i++)
		for (int j = 0; j < 3; j++) {
			const rg_gen_seq *o = &res->seqs[i * 3 + j];
			rg_sampler *s;
			rg_rng rs;
			int32_t ctx[64];
			int n = PLENS[i];

			assert_int_equal(o->prompt_index, i);
			assert_int_equal(o->index, j);
			assert_int_equal(o->n_top, 3);
			assert_int_equal(rg_sampler_from_params(&p.sampling, 41, PROMPTS[i], n, &s),
					 RG_OK);
			rg_rng_seed_stream(&rs, 77, (uint64_t)j);
			memcpy(ctx, PROMPTS[i], (size_t)n * sizeof(int32_t));
			for (int k = 0; k < o->n_ids; k++) {
				float lg[41], lp, tl[3];
				int32_t id, ti[3];

				toy_logits(41, ctx, n, lg);
				assert_int_equal(rg_sampler_sample(s, lg, 41, &rs, &work, 3, &id, &lp,
								   ti, tl), RG_OK);
				assert_int_equal(o->ids[k], id);
				assert_true(o->logprobs[k] == lp);
				assert_memory_equal(o->top_ids + k * 3, ti, sizeof(ti));
				assert_true(tl[0] >= tl[1] && tl[1] >= tl[2]);
				rg_sampler_accept(s, id);
				ctx[n++] = id;
			}
			rg_sampler_free(s);
		}
	/* each prompt alone, prefill one token per step: the same outputs */
	p.max_step_tokens = 1;
	for (int i = 0; i < NP; i++) {
		assert_int_equal(rg_gen_run(&r, &PROMPTS[i], &PLENS[i], 1, &p, pool, &alone),
				 RG_OK);
		for (int j = 0; j < 3; j++)
			expect_same(&alone->seqs[j], &res->seqs[i * 3 + j]);
		rg_gen_result_free(alone);
		assert_int_equal(rg_kv_pool_n_used(pool), 0);
	}
	/* the same seed gives the same output; another seed another one */
	p.max_step_tokens = 512;
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &alone), RG_OK);
	for (int k = 0; k < NP * 3; k++)
		expect_same(&alone->seqs[k], &res->seqs[k]);
	rg_gen_result_free(alone);
	p.seed = 78;
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &alone), RG_OK);
	{
		int differ = 0;

		for (int k = 0; k < NP * 3; k++)
			differ += memcmp(alone->seqs[k].ids, res->seqs[k].ids,
					 (size_t)res->seqs[k].n_ids * sizeof(int32_t)) != 0;
		assert_true(differ > 0);
	}
	rg_gen_result_free(alone);
	rg_gen_result_free(res);
	free(work.data);
	rg_kv_pool_free(pool);
	free(t.cache);
}

static void test_beams_batch_invariant(void **state)
{
	toy t;
	rg_gen_runner r = toy_runner(&t, 33, 2, 400, 64);
	rg_kv_pool *pool;
	rg_gen_params p;
	rg_gen_result *res, *alone;
	int32_t eos = 3;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&pool, 400, 2), RG_OK);
	for (int groups = 1; groups <= 2; groups++) {
		rg_gen_params_default(&p);
		p.num_beams = 4;
		p.num_beam_groups = groups;
		p.diversity_penalty = groups > 1 ? 1.5f : 0.f;
		p.n = 4;
		p.max_tokens = 9;
		p.eos_ids = &eos;
		p.n_eos = 1;
		p.sampling.no_repeat_ngram_size = 2;
		{
			rg_status st = rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &res);

			if (st != RG_OK)
				printf("%s: %s\n", rg_status_name(st), rg_last_error());
			assert_int_equal(st, RG_OK);
		}
		assert_int_equal(rg_kv_pool_n_used(pool), 0);
		for (int i = 0; i < NP; i++) {
			for (int j = 0; j < 4; j++) {
				const rg_gen_seq *o = &res->seqs[i * 4 + j];

				if (!(o->finish == RG_FINISH_EOS ? o->ids[o->n_ids - 1] == eos : o->n_ids == 9)) {
					printf("prompt %d beam %d finish %d n %d:", i, j, o->finish, o->n_ids);
					for (int k = 0; k < o->n_ids; k++) printf(" %d", o->ids[k]);
					printf("\n");
				}
				assert_true(o->n_ids >= 1 && o->n_ids <= 9);
				if (j > 0) /* best first */
					assert_true(o->score <= res->seqs[i * 4 + j - 1].score);
				assert_true(o->finish == RG_FINISH_EOS ? o->ids[o->n_ids - 1] == eos
								       : o->n_ids == 9);
			}
			p.max_step_tokens = 5;
			assert_int_equal(rg_gen_run(&r, &PROMPTS[i], &PLENS[i], 1, &p, pool, &alone),
					 RG_OK);
			p.max_step_tokens = 512;
			for (int j = 0; j < 4; j++) {
				expect_same(&alone->seqs[j], &res->seqs[i * 4 + j]);
				assert_true(alone->seqs[j].score == res->seqs[i * 4 + j].score);
			}
			rg_gen_result_free(alone);
			assert_int_equal(rg_kv_pool_n_used(pool), 0);
		}
		rg_gen_result_free(res);
	}
	rg_kv_pool_free(pool);
	free(t.cache);
}

static rg_status detok_letters(void *ctx, const int32_t *ids, int n, char **text, size_t *len)
{
	(void)ctx;
	*text = malloc((size_t)n + 1);
	if (!*text)
		return RG_ERR_OOM;
	for (int i = 0; i < n; i++)
		(*text)[i] = (char)('a' + ids[i] % 26);
	(*text)[n] = '\0';
	*len = (size_t)n;
	return RG_OK;
}

static void test_stop_conditions(void **state)
{
	toy t;
	rg_gen_runner r = toy_runner(&t, 26, 4, 64, 64);
	rg_gen_params p;
	rg_gen_result *res, *ref;
	(void)state;

	rg_gen_params_default(&p);
	p.max_tokens = 20;
	p.detokenize = detok_letters;
	p.sampling.do_sample = true;
	p.seed = 5;
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &ref), RG_OK);
	assert_int_equal(ref->seqs[0].n_ids, 20);
	assert_int_equal(ref->seqs[0].text_len, 20);
	{
		const rg_gen_seq *o = &ref->seqs[0];
		char stop[3] = {o->text[6], o->text[7], 0};
		const char *stops[] = {"zzzzzzzzzzzz", stop};
		const char *first = strstr(o->text, stop);
		int cut = (int)(first - o->text);
		int32_t sid = o->ids[4], eid = o->ids[2];

		/* stop string: text ends before it, ids end with the token that completed it */
		p.stop = stops;
		p.n_stop = 2;
		assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &res), RG_OK);
		assert_int_equal(res->seqs[0].finish, RG_FINISH_STOP);
		assert_int_equal(res->seqs[0].n_ids, cut + 2);
		assert_int_equal(res->seqs[0].text_len, cut);
		assert_memory_equal(res->seqs[0].text, o->text, (size_t)cut);
		rg_gen_result_free(res);
		p.n_stop = 0;
		/* stop id and EOS: the first occurrence ends it, kept last in ids, not in text */
		p.stop_ids = &sid;
		p.n_stop_ids = 1;
		assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &res), RG_OK);
		assert_int_equal(res->seqs[0].finish, RG_FINISH_STOP);
		assert_true(res->seqs[0].n_ids <= 5);
		assert_int_equal(res->seqs[0].ids[res->seqs[0].n_ids - 1], sid);
		assert_int_equal(res->seqs[0].text_len, res->seqs[0].n_ids - 1);
		rg_gen_result_free(res);
		p.n_stop_ids = 0;
		p.eos_ids = &eid;
		p.n_eos = 1;
		assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &res), RG_OK);
		assert_int_equal(res->seqs[0].finish, RG_FINISH_EOS);
		assert_true(res->seqs[0].n_ids <= 3);
		rg_gen_result_free(res);
	}
	/* max_context caps the length */
	p.n_eos = 0;
	r.max_context = PLENS[0] + 5;
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &res), RG_OK);
	assert_int_equal(res->seqs[0].n_ids, 5);
	assert_int_equal(res->seqs[0].finish, RG_FINISH_LENGTH);
	rg_gen_result_free(res);
	r.max_context = PLENS[0];
	assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, NULL, &res), RG_ERR_TOO_LONG);
	rg_gen_result_free(ref);
	free(t.cache);
}

static int cancel_after;
static rg_status cancel_cb(void *ctx, int seq, int32_t tok, float lp)
{
	(void)ctx, (void)seq, (void)tok, (void)lp;
	return --cancel_after < 0 ? RG_ERR_BUSY : RG_OK;
}

/* every error path returns its blocks */
static void test_errors_return_blocks(void **state)
{
	toy t;
	rg_gen_runner r = toy_runner(&t, 31, 2, 300, 64);
	rg_kv_pool *pool;
	rg_gen_params p;
	rg_gen_result *res = (void *)1;
	(void)state;

	assert_int_equal(rg_kv_pool_init(&pool, 300, 2), RG_OK);
	for (int mode = 0; mode < 2; mode++) {
		rg_gen_params_default(&p);
		p.max_tokens = 8;
		p.max_step_tokens = 6;
		if (mode == 0) {
			p.n = 3;
			p.sampling.do_sample = true;
		} else {
			p.num_beams = 4;
			p.num_beam_groups = 2;
			p.diversity_penalty = 0.5f;
			p.n = 2;
		}
		for (int fail = 0; fail < 12; fail++) {
			t.fail_at = fail;
			t.n_steps = 0;
			rg_status st = rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &res);

			assert_true(st == RG_ERR_CUDA || (st == RG_OK && fail >= t.n_steps));
			if (st == RG_OK)
				rg_gen_result_free(res);
			else
				assert_null(res);
			assert_int_equal(rg_kv_pool_n_used(pool), 0);
		}
		t.fail_at = -1;
		/* a pool that holds one sequence but not all at once: the engine preempts and
		 * recomputes, and the outputs are those of the large pool; a pool that cannot hold
		 * one sequence (a beam search: its beams): busy. Nothing kept either way. */
		{
			rg_kv_pool *small, *tiny;
			rg_gen_result *big = NULL;

			assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &big), RG_OK);
			assert_int_equal(rg_kv_pool_init(&small, mode ? 44 : 12, 2), RG_OK);
			assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, small, &res), RG_OK);
			assert_int_equal(res->n_seqs, big->n_seqs);
			for (int i = 0; i < res->n_seqs; i++) {
				assert_int_equal(res->seqs[i].n_ids, big->seqs[i].n_ids);
				assert_memory_equal(res->seqs[i].ids, big->seqs[i].ids,
						    (size_t)res->seqs[i].n_ids * sizeof(int32_t));
			}
			rg_gen_result_free(res);
			rg_gen_result_free(big);
			assert_int_equal(rg_kv_pool_n_used(small), 0);
			assert_int_equal(rg_kv_pool_init(&tiny, 3, 2), RG_OK);
			assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, tiny, &res),
					 RG_ERR_BUSY);
			assert_null(res);
			assert_int_equal(rg_kv_pool_n_used(tiny), 0);
			rg_kv_pool_free(small);
			rg_kv_pool_free(tiny);
		}
		/* a callback cancelling mid-way */
		for (int k = 0; k < 6; k++) {
			cancel_after = k;
			p.on_token = cancel_cb;
			assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, NP, &p, pool, &res),
					 RG_ERR_BUSY);
			assert_int_equal(rg_kv_pool_n_used(pool), 0);
		}
	}
	/* bad input */
	rg_gen_params_default(&p);
	{
		int32_t bad[] = {1, 99};
		const int32_t *bp = bad;
		int bl = 2;

		assert_int_equal(rg_gen_run(&r, &bp, &bl, 1, &p, pool, &res), RG_ERR_INVALID_INPUT);
		p.num_beams = 3;
		p.num_beam_groups = 2;
		assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, pool, &res),
				 RG_ERR_INVALID_INPUT);
		p.num_beam_groups = 1;
		p.sampling.do_sample = true;
		assert_int_equal(rg_gen_run(&r, PROMPTS, PLENS, 1, &p, pool, &res),
				 RG_ERR_UNSUPPORTED);
	}
	rg_kv_pool_free(pool);
	free(t.cache);
}

static void test_topk_hier_equals_sort(void **state)
{
	float x[3000];
	int32_t a[64], b[64], scratch[3000];
	float va[64], vb[64];
	(void)state;

	rng = 99;
	for (int round = 0; round < 300; round++) {
		int n = irand(1, 3000), k = irand(1, n < 64 ? n : 64), levels = irand(1, 4), nc;

		for (int i = 0; i < n; i++) /* random, or tie-heavy with few distinct values */
			x[i] = round % 2 ? (float)(next_u64() % 100000) / 7.f
					 : (float)(next_u64() % (uint64_t)levels);
		assert_int_equal(rg_topk_hier(x, n, k, a, va, round % 3 ? scratch : NULL, &nc), RG_OK);
		assert_int_equal(rg_topk_sort(x, n, k, b, vb), RG_OK);
		assert_memory_equal(a, b, (size_t)k * sizeof(int32_t));
		assert_memory_equal(va, vb, (size_t)k * sizeof(float));
		assert_true(nc >= k && nc <= n);
	}
	assert_int_equal(rg_topk_hier(x, 5, 6, a, NULL, NULL, NULL), RG_ERR_INVALID_INPUT);
}

static void test_sampler_support(void **state)
{
	float lg[50];
	int32_t out[2000];
	rg_sampling_params p;
	(void)state;

	rng = 5;
	for (int v = 0; v < 50; v++)
		lg[v] = (float)(next_u64() % 1000) / 100.f;
	/* top-k: only the k largest */
	rg_sampling_params_default(&p);
	p.do_sample = true;
	p.top_k = 5;
	assert_int_equal(rg_sampler_draw_test(lg, 50, &p, NULL, 0, 1, 2000, out, NULL), RG_OK);
	for (int i = 0; i < 2000; i++) {
		int above = 0;

		for (int v = 0; v < 50; v++)
			above += lg[v] > lg[out[i]];
		assert_true(above < 5);
	}
	/* min-p: p >= min_p * p_max */
	p.top_k = 0;
	p.min_p = 0.2f;
	assert_int_equal(rg_sampler_draw_test(lg, 50, &p, NULL, 0, 2, 2000, out, NULL), RG_OK);
	{
		float mx = lg[0];

		for (int v = 1; v < 50; v++)
			mx = lg[v] > mx ? lg[v] : mx;
		for (int i = 0; i < 2000; i++)
			assert_true(exp((double)lg[out[i]] - mx) >= 0.2);
	}
	/* greedy and logit bias: a large bias wins */
	rg_sampling_params_default(&p);
	{
		int32_t id = 17;
		float bias = 100.f;

		p.n_logit_bias = 1;
		p.logit_bias_ids = &id;
		p.logit_bias_values = &bias;
		assert_int_equal(rg_sampler_draw_test(lg, 50, &p, NULL, 0, 1, 3, out, NULL), RG_OK);
		assert_int_equal(out[0], 17);
		id = 50;
		assert_int_equal(rg_sampler_draw_test(lg, 50, &p, NULL, 0, 1, 3, out, NULL),
				 RG_ERR_INVALID_INPUT);
	}
}

/* clone carries the accepted history (penalties, n-grams); reset forgets it */
static void test_sampler_clone_reset(void **state)
{
	float lg[30];
	rg_sampling_params p;
	rg_sampler *a, *b;
	rg_token_array work;
	rg_rng ra, rb;
	int32_t prompt[] = {4, 5};
	(void)state;

	rng = 11;
	for (int v = 0; v < 30; v++)
		lg[v] = (float)(next_u64() % 1000) / 200.f;
	rg_sampling_params_default(&p);
	p.do_sample = true;
	p.top_k = 12;
	p.repetition_penalty = 2.f;
	p.frequency_penalty = 1.f;
	p.no_repeat_ngram_size = 2;
	work.data = malloc(30 * sizeof(rg_token_data));
	assert_int_equal(rg_sampler_from_params(&p, 30, prompt, 2, &a), RG_OK);
	assert_string_equal(rg_sampler_name(a), "chain");
	for (int i = 0; i < 5; i++)
		rg_sampler_accept(a, (int32_t)(i * 7 % 30));
	assert_non_null(b = rg_sampler_clone(a));
	rg_rng_seed(&ra, 3);
	rg_rng_seed(&rb, 3);
	for (int i = 0; i < 50; i++) {
		int32_t ta, tb;
		float la, lb;

		assert_int_equal(rg_sampler_sample(a, lg, 30, &ra, &work, 0, &ta, &la, NULL, NULL),
				 RG_OK);
		assert_int_equal(rg_sampler_sample(b, lg, 30, &rb, &work, 0, &tb, &lb, NULL, NULL),
				 RG_OK);
		assert_int_equal(ta, tb);
		assert_true(la == lb);
		rg_sampler_accept(a, ta);
		rg_sampler_accept(b, tb);
	}
	/* after reset, a matches a fresh chain */
	rg_sampler_reset(a);
	rg_sampler_free(b);
	assert_int_equal(rg_sampler_from_params(&p, 30, prompt, 2, &b), RG_OK);
	rg_rng_seed(&ra, 9);
	rg_rng_seed(&rb, 9);
	for (int i = 0; i < 20; i++) {
		int32_t ta, tb;
		float la, lb;

		assert_int_equal(rg_sampler_sample(a, lg, 30, &ra, &work, 0, &ta, &la, NULL, NULL),
				 RG_OK);
		assert_int_equal(rg_sampler_sample(b, lg, 30, &rb, &work, 0, &tb, &lb, NULL, NULL),
				 RG_OK);
		assert_int_equal(ta, tb);
		rg_sampler_accept(a, ta);
		rg_sampler_accept(b, tb);
	}
	/* NaN logits are refused, not sampled */
	lg[3] = NAN;
	{
		int32_t t;
		float l;

		assert_int_equal(rg_sampler_sample(a, lg, 30, &ra, &work, 0, &t, &l, NULL, NULL),
				 RG_ERR_INTERNAL);
	}
	rg_sampler_free(a);
	rg_sampler_free(b);
	free(work.data);
}

/* toy_step for logits rows in any order (the model's contract: prompt-scoring rows come after
 * the sampling rows): each row's sequence and position found from cu_seqlens_q. */
static rg_status toy_step_any(void *c, const rg_step_batch *b, float *logits)
{
	toy *t = c;
	int32_t ctxbuf[512];

	t->n_steps++;
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int n_new = b->cu_seqlens_q[i + 1] - b->cu_seqlens_q[i];

		for (int j = 0; j < n_new; j++) {
			int r = b->cu_seqlens_q[i] + j, pos = b->context_lens[i] - n_new + j;

			if (b->positions[r] != pos ||
			    b->slot_mapping[r] != tab[pos / t->bs] * t->bs + pos % t->bs)
				return RG_ERR_INTERNAL;
			t->cache[b->slot_mapping[r]] = b->tokens[r];
		}
	}
	for (int li = 0; li < b->n_logits; li++) {
		int r = b->logits_rows[li], i = 0;

		if (r < 0 || r >= b->n_tokens)
			return RG_ERR_INTERNAL;
		while (b->cu_seqlens_q[i + 1] <= r)
			i++;
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int pos = b->context_lens[i] - (b->cu_seqlens_q[i + 1] - r);

		for (int q = 0; q <= pos; q++)
			ctxbuf[q] = t->cache[tab[q / t->bs] * t->bs + q % t->bs];
		toy_logits(t->V, ctxbuf, pos + 1, logits + (size_t)li * t->V);
	}
	return RG_OK;
}

/* Prompt scoring through the engine (rg_gen_params.prompt_logprobs) on the host path (a runner
 * with logits only): each prompt token's log-probability, rank and top 3 equal the float64
 * log-softmax of the toy's logits at the position before it, with the prefill cut to 3 rows a
 * step beside a plain greedy request; max_tokens 0 generates nothing (finish LENGTH); the plain
 * request's tokens are the direct argmax's; outputs k > 0 carry no prompt arrays. */
static void test_prompt_scoring(void **state)
{
	enum { V = 37 };
	toy t;
	rg_gen_runner r = toy_runner(&t, V, 4, 64, 64);
	rg_gen_engine_params ep;
	rg_gen_engine *e;
	rg_status st;
	uint64_t id[3];
	(void)state;

	r.step = toy_step_any;
	rg_gen_engine_params_default(&ep);
	ep.max_num_batched_tokens = 8;
	ep.max_prompt_logprob_rows = 3;
	e = rg_gen_engine_create_runner(&r, NULL, NULL, NULL, 0, &ep, &st);
	assert_non_null(e);
	for (int k = 0; k < 3; k++) {
		rg_gen_params p;

		rg_gen_params_default(&p);
		p.n_eos = -1;
		p.max_tokens = k == 0 ? 0 : 5;
		p.prompt_logprobs = k < 2;
		p.prompt_top_n = 3;
		p.n = k == 1 ? 2 : 1;
		assert_int_equal(rg_gen_engine_add(e, k == 2 ? P3 : P2, k == 2 ? 7 : 11, &p, NULL,
						   0, &id[k], NULL), RG_OK);
	}
	while (rg_gen_engine_has_work(e))
		assert_int_equal(rg_gen_engine_step(e, 0, NULL, NULL), RG_OK);
	for (int k = 0; k < 2; k++) {
		rg_gen_output o;

		assert_int_equal(rg_gen_engine_output(e, id[k], 0, &o), RG_OK);
		assert_int_equal(o.n_ids, k == 0 ? 0 : 5);
		assert_int_equal(o.finish, RG_FINISH_LENGTH);
		assert_non_null(o.prompt_logprobs);
		assert_int_equal(o.prompt_top_n, 3);
		assert_true(isnan(o.prompt_logprobs[0]));
		for (int i = 1; i < 11; i++) {
			float lg[V];
			double mx = -INFINITY, sum = 0, lse;
			int rank = 1, order[V];

			toy_logits(V, P2, i, lg);
			for (int v = 0; v < V; v++)
				mx = lg[v] > mx ? lg[v] : mx;
			for (int v = 0; v < V; v++)
				sum += exp((double)lg[v] - mx);
			lse = mx + log(sum);
			for (int v = 0; v < V; v++)
				rank += lg[v] > lg[P2[i]];
			assert_true(fabs(o.prompt_logprobs[i] - ((double)lg[P2[i]] - lse)) <= 1e-6);
			assert_int_equal(o.prompt_ranks[i], rank);
			/* the top 3 by a full sort (lower id first on ties) */
			for (int v = 0; v < V; v++)
				order[v] = v;
			for (int a = 1; a < V; a++)
				for (int b = a; b > 0 && lg[order[b]] > lg[order[b - 1]]; b--) {
					int x = order[b];

					order[b] = order[b - 1];
					order[b - 1] = x;
				}
			for (int j = 0; j < 3; j++) {
				assert_int_equal(o.prompt_top_ids[i * 3 + j], order[j]);
				assert_true(fabs(o.prompt_top_logprobs[i * 3 + j] -
						 ((double)lg[order[j]] - lse)) <= 1e-6);
			}
		}
		if (k == 1) {
			rg_gen_output o1;

			assert_int_equal(rg_gen_engine_output(e, id[1], 1, &o1), RG_OK);
			assert_null(o1.prompt_logprobs);
			assert_int_equal(o1.n_ids, 5);
			assert_memory_equal(o1.ids, o.ids, 5 * sizeof(int32_t));
		}
	}
	{
		rg_gen_output o;
		int32_t ctx[16];
		int n = 7;

		assert_int_equal(rg_gen_engine_output(e, id[2], 0, &o), RG_OK);
		assert_null(o.prompt_logprobs);
		memcpy(ctx, P3, sizeof(P3));
		for (int k = 0; k < 5; k++) {
			float lg[V];
			int best = 0;

			toy_logits(V, ctx, n, lg);
			for (int v = 1; v < V; v++)
				if (lg[v] > lg[best])
					best = v;
			assert_int_equal(o.ids[k], best);
			ctx[n++] = best;
		}
	}
	/* refusals: top_n out of range; max_tokens 0 without scoring; beams with max_tokens 0 */
	{
		rg_gen_params p;
		uint64_t x;

		rg_gen_params_default(&p);
		p.prompt_logprobs = true;
		p.prompt_top_n = RG_GEN_MAX_LOGPROBS + 1;
		assert_int_equal(rg_gen_engine_add(e, P2, 11, &p, NULL, 0, &x, NULL),
				 RG_ERR_INVALID_INPUT);
		p.prompt_top_n = 0;
		p.prompt_logprobs = false;
		p.max_tokens = 0;
		assert_int_equal(rg_gen_engine_add(e, P2, 11, &p, NULL, 0, &x, NULL),
				 RG_ERR_INVALID_INPUT);
		p.prompt_logprobs = true;
		p.num_beams = 2;
		p.n = 2;
		assert_int_equal(rg_gen_engine_add(e, P2, 11, &p, NULL, 0, &x, NULL),
				 RG_ERR_INVALID_INPUT);
	}
	for (int k = 0; k < 3; k++)
		rg_gen_engine_release(e, id[k]);
	rg_gen_engine_free(e);
	free(t.cache);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_matches_direct),
		cmocka_unit_test(test_greedy_through_step_argmax),
		cmocka_unit_test(test_sampling_matches_direct_and_batch_invariant),
		cmocka_unit_test(test_beams_batch_invariant),
		cmocka_unit_test(test_stop_conditions),
		cmocka_unit_test(test_errors_return_blocks),
		cmocka_unit_test(test_topk_hier_equals_sort),
		cmocka_unit_test(test_sampler_support),
		cmocka_unit_test(test_sampler_clone_reset),
		cmocka_unit_test(test_prompt_scoring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
