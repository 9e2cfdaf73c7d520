/* Iteration-level scheduler (src/sched/iter.c) driven with a simulated clock, a simulated step
 * cost (a + b * tokens + c * pairs) and the toy model of test_toy.h: the "KV cache" is an int per
 * slot holding the token written there, and the logits of a row are a hash of ALL tokens of its
 * context read back through the plan's block table, so a wrong slot, block table, shared prefix
 * block or recompute changes the output. Every plan is checked against rg_step_batch's contract
 * and the limits; every stream's greedy output must equal its prompt generated alone by a direct
 * argmax over the full context (no cache), whatever joined, left, was preempted or hit the
 * prefix cache meanwhile. Also: decode first and chunked prefill of a 2k prompt beside 32
 * streams; preemption under block pressure; prefix hits skip the shared blocks; deadlines
 * refused up front when they cannot be met and met when admitted; blocks in use return to zero;
 * random operations against the invariants. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gen/beam.h"
#include "sched/iter.h"
#include "test_rng.h"
#include "test_toy.h"

#define V 53
#define MAXREQ 256
#define NO_STOP (-1)

/* greedy next token after context ctx (n tokens): the argmax of the toy logits (the first on
 * ties) */
static int32_t toy_next(const int32_t *ctx, int n)
{
	float l[V];
	int best = 0;

	toy_logits(V, ctx, n, l);
	for (int v = 1; v < V; v++)
		if (l[v] > l[best])
			best = v;
	return best;
}

/* The reference: the prompt generated alone, no cache. Returns the tokens generated. */
static int ref_generate(const int32_t *prompt, int n, int max_new, int32_t stop_tok, int32_t *out)
{
	int32_t *ctx = malloc((size_t)(n + max_new) * sizeof(int32_t));
	int k;

	memcpy(ctx, prompt, (size_t)n * sizeof(int32_t));
	for (k = 0; k < max_new; k++) {
		out[k] = ctx[n + k] = toy_next(ctx, n + k);
		if (out[k] == stop_tok) {
			k++;
			break;
		}
	}
	free(ctx);
	return k;
}

typedef struct req {
	int32_t *prompt;
	int n, max_new;
	int32_t out[1024];
	int n_out;
	double arrival, first, last;
	int finish; /* 0 live, else rg_iter_finish */
	int cached, preempted;
	bool added;
	/* a beam group (n_beams >= 2): its search, driven by h_step, and its results */
	int n_beams, n_groups;
	float diversity;
	rg_beam_search *bs;
	int restarts, n_res;
	int32_t res[4][64];
	int res_n[4];
	double res_score[4];
} req;

typedef struct harness {
	rg_kv_pool *pool;
	rg_iter *s;
	rg_iter_params prm;
	int bs, n_blocks;
	int *cache;          /* (n_blocks * bs) the toy KV: token per slot */
	double clock, ca, cb, cc; /* cost of a step: ca + cb * tokens + cc * pairs ms */
	int32_t stop_tok;
	req r[MAXREQ];
	int n_steps, n_preempted;
	rg_iter_plan last;   /* a copy of the last plan's header */
	int32_t *ctxbuf;
	float rowbuf[512 * V]; /* a step's beam rows' toy logits */
	int beam_steps;
	int spec_k;          /* > 0: drafts of spec_k tokens before each schedule */
	long long drafted, accepted; /* the harness's own count of the walk */
} harness;

static void beam_params(const req *q, rg_beam_params *bp)
{
	static const int32_t eos = 7;

	*bp = (rg_beam_params){
		.num_beams = q->n_beams, .num_beam_groups = q->n_groups,
		.diversity_penalty = q->diversity, .length_penalty = 1.0f,
		.early_stopping = RG_EARLY_STOPPING_TRUE, .num_return_sequences = 2,
		.eos_ids = &eos, .n_eos = 1, .pad_id = 0, .max_new_tokens = q->max_new,
	};
}

/* The beam groups of plan pl: the rows of each (in slot order), its search's step, then the
 * next beams given to the scheduler, or a stop on its rows when the search is done. A group
 * whose prompt row comes (rg_iter_tokens gives the prompt alone) starts its search, again
 * after a preemption. Every live slot must have exactly one row, and no other slot one. */
static void h_beam_steps(harness *h, const rg_iter_plan *pl, bool *stop)
{
	const rg_step_batch *b = &pl->batch;

	for (int r0 = 0; r0 < b->n_logits; r0++) {
		uint64_t id = pl->seq_ids[pl->logits_seq[r0]];
		req *q = &h->r[id];
		const float *rows[RG_ITER_MAX_BEAMS] = {0};
		int32_t parent[RG_ITER_MAX_BEAMS], token[RG_ITER_MAX_BEAMS];
		int n_tok, n_rows = 0;
		bool done, first, dup = false;

		if (q->n_beams < 2)
			continue;
		for (int r = 0; r < r0; r++)
			dup |= pl->seq_ids[pl->logits_seq[r]] == id;
		if (dup)
			continue;
		assert_non_null(rg_iter_tokens(h->s, id, &n_tok));
		first = n_tok == q->n;
		if (first) {
			rg_beam_params bp;

			if (q->bs)
				q->restarts++;
			rg_beam_free(q->bs);
			beam_params(q, &bp);
			assert_int_equal(rg_beam_init(&q->bs, &bp, q->prompt, q->n, V), RG_OK);
		}
		for (int r = r0; r < b->n_logits; r++) {
			int i = pl->logits_seq[r];

			if (pl->seq_ids[i] != id)
				continue;
			n_rows++;
			assert_true(pl->beam_slot[i] >= 0 && pl->beam_slot[i] < q->n_beams);
			if (first) {
				assert_int_equal(pl->beam_slot[i], 0);
				for (int j = 0; j < q->n_beams; j++)
					rows[j] = h->rowbuf + (size_t)r * V;
			} else {
				assert_null(rows[pl->beam_slot[i]]);
				rows[pl->beam_slot[i]] = h->rowbuf + (size_t)r * V;
			}
		}
		if (first)
			assert_int_equal(n_rows, 1);
		else
			for (int j = 0; j < q->n_beams; j++)
				assert_int_equal(rows[j] != NULL, rg_beam_slot_live(q->bs, j));
		assert_int_equal(rg_beam_step(q->bs, rows, parent, token, &done), RG_OK);
		h->beam_steps++;
		if (done) {
			for (int r = r0; r < b->n_logits; r++)
				if (pl->seq_ids[pl->logits_seq[r]] == id)
					stop[r] = true;
		} else {
			for (int j = 0; j < q->n_beams; j++)
				if (!rg_beam_slot_live(q->bs, j))
					parent[j] = -1; /* its group ended at this step */
			assert_int_equal(rg_iter_beam_next(h->s, id, parent, token, q->n_beams),
					 RG_OK);
		}
	}
}

/* The reference beam search of request q: every beam's whole context hashed again at each step
 * (no cache, no scheduler). Fills n_res, res_n, res, res_score of out. */
static void ref_beam(const req *q, req *out)
{
	rg_beam_params bp;
	rg_beam_search *bs;
	int nb = q->n_beams, len[RG_ITER_MAX_BEAMS] = {0}, nlen[RG_ITER_MAX_BEAMS];
	int32_t (*cur)[128] = calloc(RG_ITER_MAX_BEAMS, sizeof(*cur));
	int32_t (*nxt)[128] = calloc(RG_ITER_MAX_BEAMS, sizeof(*nxt));
	int32_t ctx[256], parent[RG_ITER_MAX_BEAMS], token[RG_ITER_MAX_BEAMS];
	float *lg = malloc((size_t)nb * V * sizeof(float));
	const float *rows[RG_ITER_MAX_BEAMS];
	bool done = false, first = true;

	beam_params(q, &bp);
	assert_int_equal(rg_beam_init(&bs, &bp, q->prompt, q->n, V), RG_OK);
	while (!done) {
		for (int j = 0; j < nb; j++) {
			rows[j] = NULL;
			if (!first && !rg_beam_slot_live(bs, j))
				continue;
			memcpy(ctx, q->prompt, (size_t)q->n * sizeof(int32_t));
			memcpy(ctx + q->n, cur[first ? 0 : j], (size_t)len[first ? 0 : j] *
			       sizeof(int32_t));
			toy_logits(V, ctx, q->n + len[first ? 0 : j], lg + (size_t)j * V);
			rows[j] = lg + (size_t)j * V;
		}
		assert_int_equal(rg_beam_step(bs, rows, parent, token, &done), RG_OK);
		for (int j = 0; j < nb; j++) {
			nlen[j] = 0;
			if (parent[j] < 0)
				continue;
			memcpy(nxt[j], cur[parent[j]], (size_t)len[parent[j]] * sizeof(int32_t));
			nxt[j][len[parent[j]]] = token[j];
			nlen[j] = len[parent[j]] + 1;
		}
		memcpy(cur, nxt, (size_t)RG_ITER_MAX_BEAMS * sizeof(*cur));
		memcpy(len, nlen, sizeof(len));
		first = false;
	}
	assert_int_equal(rg_beam_finalize(bs, &out->n_res), RG_OK);
	for (int i = 0; i < out->n_res && i < 4; i++) {
		const rg_beam_hyp *y = rg_beam_result(bs, i);

		out->res_n[i] = y->n;
		out->res_score[i] = y->score;
		memcpy(out->res[i], y->ids, (size_t)y->n * sizeof(int32_t));
	}
	rg_beam_free(bs);
	free(cur);
	free(nxt);
	free(lg);
}

static void h_init(harness *h, int n_blocks, int bs, const rg_iter_params *p)
{
	memset(h, 0, sizeof(*h));
	h->prm = *p;
	h->bs = bs;
	h->n_blocks = n_blocks;
	h->ca = 2.0, h->cb = 0.01, h->cc = 1e-5;
	h->stop_tok = NO_STOP;
	assert_int_equal(rg_kv_pool_init(&h->pool, n_blocks, bs), RG_OK);
	assert_int_equal(rg_iter_init(&h->s, h->pool, p), RG_OK);
	h->cache = malloc((size_t)n_blocks * bs * sizeof(int));
	for (int i = 0; i < n_blocks * bs; i++)
		h->cache[i] = -1;
	h->ctxbuf = malloc((size_t)p->max_context * sizeof(int32_t));
}

static void h_free(harness *h)
{
	rg_iter_free(h->s);
	/* every block back once the scheduler (and its prefix cache) is gone */
	assert_int_equal(rg_kv_pool_n_used(h->pool), 0);
	rg_kv_pool_free(h->pool);
	for (int i = 0; i < MAXREQ; i++) {
		free(h->r[i].prompt);
		rg_beam_free(h->r[i].bs);
	}
	free(h->cache);
	free(h->ctxbuf);
}

static void set_prompt(harness *h, int id, const int32_t *p, int n, int max_new)
{
	req *q = &h->r[id];

	free(q->prompt);
	rg_beam_free(q->bs);
	memset(q, 0, sizeof(*q));
	q->prompt = malloc((size_t)n * sizeof(int32_t));
	memcpy(q->prompt, p, (size_t)n * sizeof(int32_t));
	q->n = n;
	q->max_new = max_new;
	q->first = q->last = -1;
}

static rg_status h_add(harness *h, int id, int priority, double deadline, double tpot,
		       rg_iter_admission *adm)
{
	req *q = &h->r[id];
	rg_iter_request r = {
		.id = (uint64_t)id, .prompt = q->prompt, .prompt_len = q->n,
		.max_tokens = q->max_new, .priority = priority, .arrival_ms = h->clock,
		.deadline_ms = deadline, .tpot_ms = tpot, .n_beams = q->n_beams,
	};
	rg_status st = rg_iter_add(h->s, &r, h->clock, adm);

	if (st == RG_OK) {
		q->added = true;
		q->arrival = h->clock;
	}
	return st;
}

static int plan_index(const rg_iter_plan *p, int id)
{
	for (int i = 0; i < p->batch.n_seq; i++)
		if (p->seq_ids[i] == (uint64_t)id)
			return i;
	return -1;
}

static void record_finished(harness *h)
{
	int nd;
	const rg_iter_done *d = rg_iter_finished(h->s, &nd);

	for (int k = 0; k < nd; k++) {
		req *q = &h->r[d[k].id];

		assert_int_equal(q->finish, 0);
		q->finish = d[k].reason;
		q->cached = d[k].n_cached_tokens;
		q->preempted = d[k].n_preemptions;
		h->n_preempted += d[k].n_preemptions;
		if (q->n_beams >= 2) {
			if (q->finish != RG_ITER_FINISH_ABORT) {
				assert_non_null(q->bs);
				assert_int_equal(rg_beam_finalize(q->bs, &q->n_res), RG_OK);
				for (int i = 0; i < q->n_res && i < 4; i++) {
					const rg_beam_hyp *y = rg_beam_result(q->bs, i);

					q->res_n[i] = y->n;
					q->res_score[i] = y->score;
					memcpy(q->res[i], y->ids, (size_t)y->n * sizeof(int32_t));
				}
			}
			continue;
		}
		assert_int_equal(d[k].n_generated, q->n_out);
	}
}

/* Speculative drafts (h->spec_k > 0): each live request gets the true greedy continuation of
 * spec_k tokens with one token made wrong at a random place (or none), so that the scheduler
 * sees drafts accepted whole, in part and not at all. */
static void h_drafts(harness *h)
{
	int32_t d[RG_ITER_MAX_DRAFT];

	for (int id = 0; id < MAXREQ; id++) {
		req *q = &h->r[id];
		int n = q->n + q->n_out, bad = irand(0, h->spec_k);

		if (!q->added || q->finish || q->n_beams >= 2)
			continue;
		memcpy(h->ctxbuf, q->prompt, (size_t)q->n * sizeof(int32_t));
		memcpy(h->ctxbuf + q->n, q->out, (size_t)q->n_out * sizeof(int32_t));
		for (int j = 0; j < h->spec_k && n + j < h->prm.max_context; j++)
			d[j] = h->ctxbuf[n + j] = toy_next(h->ctxbuf, n + j);
		if (bad < h->spec_k)
			d[bad] = (d[bad] + 1) % V;
		assert_int_equal(rg_iter_set_draft(h->s, (uint64_t)id, d, h->spec_k), RG_OK);
	}
}

/* Schedule, check the plan, run the toy model, report. False when nothing ran. */
static bool h_step(harness *h)
{
	rg_iter_plan pl;
	const rg_step_batch *b = &pl.batch;
	int32_t sampled[512];
	bool stop[512];
	double pairs = 0, cost;
	char *seen;

	if (h->spec_k > 0)
		h_drafts(h);
	assert_int_equal(rg_iter_schedule(h->s, h->clock, &pl), RG_OK);
	h->last = pl;
	if (b->n_seq == 0)
		return false;
	/* the contract and the limits */
	assert_true(b->n_tokens >= 1 && b->n_tokens <= h->prm.max_num_batched_tokens);
	assert_true(b->n_seq >= 1 && b->n_seq <= h->prm.max_num_seqs);
	assert_int_equal(b->cu_seqlens_q[0], 0);
	assert_int_equal(b->cu_seqlens_q[b->n_seq], b->n_tokens);
	seen = calloc((size_t)h->n_blocks * h->bs, 1);
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int n = b->cu_seqlens_q[i + 1] - b->cu_seqlens_q[i], c = b->context_lens[i] - n;

		assert_true(n >= 1);
		assert_true(c >= 0);
		assert_true(b->context_lens[i] <= h->prm.max_context);
		for (int k = i + 1; k < b->n_seq; k++)
			assert_true(pl.seq_ids[k] != pl.seq_ids[i] ||
				    (pl.beam_slot[i] >= 0 && pl.beam_slot[k] > pl.beam_slot[i]));
		assert_int_equal(pl.beam_slot[i] >= 0, h->r[pl.seq_ids[i]].n_beams >= 2);
		for (int j = 0; j < n; j++) {
			int r = b->cu_seqlens_q[i] + j, pos = c + j;

			assert_int_equal(b->positions[r], pos);
			assert_int_equal(b->slot_mapping[r], tab[pos / h->bs] * h->bs + pos % h->bs);
			assert_false(seen[b->slot_mapping[r]]);
			seen[b->slot_mapping[r]] = 1;
		}
		pairs += (double)n * (c + (n + 1) / 2.0);
	}
	free(seen);
	assert_true(fabs(pairs - pl.pairs) <= 1e-9 * (1 + pairs));
	/* copy-on-write, then the step: write, then read every context through its table */
	for (int k = 0; k < pl.n_copies; k++)
		memcpy(h->cache + pl.copy_dst[k] * h->bs, h->cache + pl.copy_src[k] * h->bs,
		       (size_t)h->bs * sizeof(int));
	for (int r = 0; r < b->n_tokens; r++)
		h->cache[b->slot_mapping[r]] = b->tokens[r];
	assert_true(b->n_logits <= 512);
	for (int r = 0, j = 0; r < b->n_logits; r++) {
		int i = pl.logits_seq[r], m = pl.n_draft[i];
		const int32_t *tab = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int pos;

		/* a sequence's 1 + n_draft rows are adjacent, its last positions in order */
		j = r > 0 && pl.logits_seq[r - 1] == i ? j + 1 : 0;
		assert_true(j <= m);
		assert_int_equal(b->logits_rows[r], b->cu_seqlens_q[i + 1] - 1 - m + j);
		pos = b->positions[b->logits_rows[r]];
		if (m > 0)
			assert_int_equal(h->r[pl.seq_ids[i]].n_beams, 0);
		for (int q = 0; q <= pos; q++) {
			h->ctxbuf[q] = h->cache[tab[q / h->bs] * h->bs + q % h->bs];
			assert_true(h->ctxbuf[q] >= 0);
		}
		if (h->r[pl.seq_ids[i]].n_beams >= 2) {
			toy_logits(V, h->ctxbuf, pos + 1, h->rowbuf + (size_t)r * V);
			sampled[r] = 0; /* ignored: the beam step below gives the tokens */
			stop[r] = false;
			continue;
		}
		sampled[r] = toy_next(h->ctxbuf, pos + 1);
		stop[r] = sampled[r] == h->stop_tok;
	}
	h_beam_steps(h, &pl, stop);
	cost = h->ca + h->cb * b->n_tokens + h->cc * pairs;
	h->clock += cost;
	for (int r = 0; r < b->n_logits; r++) {
		int i = pl.logits_seq[r], m = pl.n_draft[i];
		req *q = &h->r[pl.seq_ids[i]];

		if (q->n_beams >= 2)
			continue;
		/* the verification walk (iter.h): keep row j's token; go on while it equals
		 * draft j, no stop and max_tokens not reached */
		h->drafted += m;
		for (int j = 0; j <= m; j++) {
			q->out[q->n_out++] = sampled[r + j];
			if (stop[r + j] || q->n_out >= q->max_new || j == m ||
			    sampled[r + j] != b->tokens[b->cu_seqlens_q[i + 1] - m + j])
				break;
			h->accepted++;
		}
		r += m;
		if (q->first < 0)
			q->first = h->clock;
		q->last = h->clock;
	}
	assert_int_equal(rg_iter_update(h->s, sampled, stop, h->clock, cost), RG_OK);
	h->n_steps++;
	record_finished(h);
	assert_int_equal(rg_kv_pool_n_used(h->pool) + rg_kv_pool_n_free(h->pool), h->n_blocks);
	return true;
}

static void h_run_all(harness *h)
{
	for (int guard = 0; guard < 100000 && h_step(h); guard++)
		;
	{
		rg_iter_stats st;

		rg_iter_stats_get(h->s, &st);
		assert_int_equal(st.n_running + st.n_waiting, 0);
		/* nothing in use: the blocks still used are the cache's, all evictable */
		assert_int_equal(st.blocks_used, st.prefix.n_cached);
		if (rg_iter_prefix_cache(h->s))
			assert_int_equal(rg_prefix_cache_n_evictable(rg_iter_prefix_cache(h->s)),
					 st.prefix.n_cached);
	}
}

/* Every added request that was not aborted generated exactly its reference; an aborted one a
 * prefix of it. */
static void h_check_outputs(harness *h)
{
	int32_t ref[1024];

	for (int id = 0; id < MAXREQ; id++) {
		req *q = &h->r[id];
		int n;

		if (!q->added)
			continue;
		if (q->n_beams >= 2) {
			req ref_q;

			if (q->finish == RG_ITER_FINISH_ABORT)
				continue;
			memset(&ref_q, 0, sizeof(ref_q));
			ref_beam(q, &ref_q);
			assert_int_equal(q->n_res, ref_q.n_res);
			for (int i = 0; i < q->n_res && i < 4; i++) {
				assert_int_equal(q->res_n[i], ref_q.res_n[i]);
				assert_memory_equal(q->res[i], ref_q.res[i],
						    (size_t)q->res_n[i] * sizeof(int32_t));
				assert_true(q->res_score[i] == ref_q.res_score[i]);
			}
			continue;
		}
		n = ref_generate(q->prompt, q->n, q->max_new, h->stop_tok, ref);
		if (q->finish == RG_ITER_FINISH_ABORT) {
			assert_true(q->n_out <= n);
		} else {
			assert_int_equal(q->n_out, n);
			assert_int_equal(q->finish, n > 0 && ref[n - 1] == h->stop_tok ?
						    RG_ITER_FINISH_STOP : RG_ITER_FINISH_LENGTH);
		}
		assert_memory_equal(q->out, ref, (size_t)q->n_out * sizeof(int32_t));
	}
}

static void rand_prompt(int32_t *p, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = irand(0, V - 1);
}

/* A 2k-token prompt joins 32 decoding streams: it is cut into chunks, every stream advances by
 * one token in every step meanwhile (decode first), the budget holds, outputs are exact. */
static void test_chunked_prefill_beside_32_streams(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[2048];
	int steps_2k = 0;
	(void)state;

	rng = 0xabcdef12ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 256;
	p.max_num_seqs = 64;
	p.max_context = 4096;
	h_init(&h, 1024, 16, &p);
	for (int id = 0; id < 32; id++) {
		int n = irand(1, 40);

		rand_prompt(pr, n);
		set_prompt(&h, id, pr, n, 60);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
	}
	/* until all 32 decode */
	for (;;) {
		int decoding = 0;

		assert_true(h_step(&h));
		for (int id = 0; id < 32; id++)
			decoding += h.r[id].n_out > 0;
		if (decoding == 32)
			break;
	}
	rand_prompt(pr, 2048);
	set_prompt(&h, 32, pr, 2048, 8);
	assert_int_equal(h_add(&h, 32, 0, 0, 0, NULL), RG_OK);
	while (h.r[32].n_out == 0) {
		int before[32];

		for (int id = 0; id < 32; id++)
			before[id] = h.r[id].n_out;
		assert_true(h_step(&h));
		steps_2k++;
		assert_int_equal(h.last.n_decode_seqs, 32);
		for (int id = 0; id < 32; id++) {
			int i = plan_index(&h.last, id);

			assert_true(i >= 0);
			assert_int_equal(h.last.batch.cu_seqlens_q[i + 1] -
					 h.last.batch.cu_seqlens_q[i], 1);
			assert_int_equal(h.r[id].n_out, before[id] + 1);
		}
		/* the chunk takes the rest of the budget (the last one what is left) */
		assert_int_equal(h.last.batch.n_tokens,
				 32 + (h.r[32].n_out ? 2048 - (steps_2k - 1) * 224 : 224));
	}
	assert_int_equal(steps_2k, (2048 + 223) / 224);
	h_run_all(&h);
	h_check_outputs(&h);
	assert_int_equal(h.n_preempted, 0);
	h_free(&h);
}

/* Far more KV than the pool holds: the newest running sequences are preempted and recomputed,
 * nobody fails, outputs are exact; with and without prefix caching. */
static void test_preemption_recompute(void **state)
{
	(void)state;
	for (int pc = 0; pc < 2; pc++) {
		harness h;
		rg_iter_params p;
		int32_t pr[32];
		rg_iter_stats st;

		rng = 0x5151ull + (uint64_t)pc;
		rg_iter_params_default(&p);
		p.max_num_batched_tokens = 48;
		p.max_num_seqs = 16;
		p.max_context = 64;
		p.prefix_caching = pc;
		h_init(&h, 24, 4, &p); /* 96 token slots for 14 requests of up to 50 tokens */
		for (int id = 0; id < 14; id++) {
			int n = irand(5, 20);

			rand_prompt(pr, n);
			set_prompt(&h, id, pr, n, 30);
			assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
		}
		h_run_all(&h);
		h_check_outputs(&h);
		rg_iter_stats_get(h.s, &st);
		assert_true(st.n_preemptions > 0);
		assert_int_equal(st.n_preemptions, h.n_preempted);
		assert_int_equal(st.n_finished, 14);
		for (int id = 0; id < 14; id++)
			assert_int_equal(h.r[id].finish, RG_ITER_FINISH_LENGTH);
		/* the oldest running request is never the one preempted */
		assert_int_equal(h.r[0].preempted, 0);
		h_free(&h);
	}
}

/* Speculative drafts (iter.h): drafts accepted whole, in part or not at all, beside requests
 * without one (beam groups take none), under a small budget (drafts cut) and block pressure
 * (preemption), with a stop token that lands inside accepted runs and max_tokens inside a
 * run: every output equals its reference (the KV of rejected positions rolled back: the toy
 * reads every context through the tables), the scheduler's counts equal the harness's walk,
 * some drafts are accepted and some rejected, and every block comes back. */
static void test_drafts(void **state)
{
	(void)state;
	for (int pc = 0; pc < 2; pc++) {
		harness h;
		rg_iter_params p;
		int32_t pr[32];
		rg_iter_stats st;
		int n_stop = 0, n_len = 0;

		rng = 0xd7a7ull + (uint64_t)pc;
		rg_iter_params_default(&p);
		p.max_num_batched_tokens = 40;
		p.max_num_seqs = 12;
		p.max_context = 64;
		p.prefix_caching = pc;
		p.max_draft = 5;
		h_init(&h, 30, 4, &p);
		h.spec_k = 5;
		h.stop_tok = 11;
		for (int id = 0; id < 14; id++) {
			int n = irand(1, 24);

			rand_prompt(pr, n);
			set_prompt(&h, id, pr, n, irand(1, 37));
			if (id == 3) {
				h.r[id].n_beams = 2;
				h.r[id].n_groups = 1;
			}
			assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
		}
		h_run_all(&h);
		h_check_outputs(&h);
		rg_iter_stats_get(h.s, &st);
		assert_int_equal(st.n_drafted, h.drafted);
		assert_int_equal(st.n_draft_accepted, h.accepted);
		assert_true(st.n_draft_accepted > 0);
		assert_true(st.n_drafted - st.n_draft_accepted > 0);
		for (int id = 0; id < 14; id++) {
			n_stop += h.r[id].finish == RG_ITER_FINISH_STOP;
			n_len += h.r[id].finish == RG_ITER_FINISH_LENGTH;
		}
		assert_true(n_stop > 0 && n_len > 0);
		assert_true(st.n_preemptions > 0 || pc == 1);
		h_free(&h);
	}
	/* errors: unknown id, a negative token, a pending plan */
	{
		harness h;
		rg_iter_params p;
		rg_iter_plan pl;
		const int32_t bad = -1, ok = 1;

		rg_iter_params_default(&p);
		p.max_context = 64;
		p.max_draft = 2;
		h_init(&h, 16, 4, &p);
		set_prompt(&h, 0, &ok, 1, 8);
		assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
		assert_int_equal(rg_iter_set_draft(h.s, 9, &ok, 1), RG_ERR_INVALID_INPUT);
		assert_int_equal(rg_iter_set_draft(h.s, 0, &ok, -1), RG_ERR_INVALID_INPUT);
		assert_int_equal(rg_iter_set_draft(h.s, 0, &ok, 1), RG_OK); /* waiting: none */
		assert_int_equal(rg_iter_schedule(h.s, 0, &pl), RG_OK);
		assert_int_equal(pl.n_draft[0], 0);
		assert_int_equal(rg_iter_set_draft(h.s, 0, &ok, 1), RG_ERR_INVALID_INPUT);
		assert_int_equal(rg_iter_update(h.s, &ok, NULL, 1, 1), RG_OK);
		assert_int_equal(rg_iter_set_draft(h.s, 0, &bad, 1), RG_ERR_INVALID_INPUT);
		rg_iter_free(h.s);
		h.s = NULL;
		h_free(&h);
	}
	{
		rg_kv_pool *pool;
		rg_iter *s;
		rg_iter_params p;

		rg_iter_params_default(&p);
		p.max_draft = RG_ITER_MAX_DRAFT + 1;
		assert_int_equal(rg_kv_pool_init(&pool, 256, 16), RG_OK);
		assert_int_equal(rg_iter_init(&s, pool, &p), RG_ERR_INVALID_INPUT);
		rg_kv_pool_free(pool);
	}
}

/* Requests sharing a 64-token system prompt skip its 4 blocks; a prompt of exactly 4 blocks
 * still computes its last block (its last token gives the logits). */
static void test_prefix_hits(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t sys[80];
	rg_iter_stats st;
	(void)state;

	rng = 0x77ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 128;
	p.max_context = 256;
	h_init(&h, 64, 16, &p);
	rand_prompt(sys, 80);
	set_prompt(&h, 0, sys, 74, 5);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
	h_run_all(&h);
	for (int id = 1; id <= 5; id++) {
		int32_t pr[80];

		memcpy(pr, sys, 64 * sizeof(int32_t));
		rand_prompt(pr + 64, 10);
		set_prompt(&h, id, pr, 74, 6);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
		assert_true(h_step(&h));
		/* only its 10 own tokens were computed, after 64 cached ones */
		assert_int_equal(h.last.batch.n_seq, 1);
		assert_int_equal(h.last.batch.n_tokens, 10);
		assert_int_equal(h.last.batch.context_lens[0], 74);
		assert_int_equal(h.last.batch.positions[0], 64);
		h_run_all(&h);
		assert_int_equal(h.r[id].cached, 64);
	}
	set_prompt(&h, 6, sys, 64, 3);
	assert_int_equal(h_add(&h, 6, 0, 0, 0, NULL), RG_OK);
	h_run_all(&h);
	assert_int_equal(h.r[6].cached, 48);
	/* two at once: both hit */
	for (int id = 7; id <= 8; id++) {
		int32_t pr[80];

		memcpy(pr, sys, 64 * sizeof(int32_t));
		rand_prompt(pr + 64, 5);
		set_prompt(&h, id, pr, 69, 4);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
	}
	h_run_all(&h);
	assert_int_equal(h.r[7].cached, 64);
	assert_int_equal(h.r[8].cached, 64);
	h_check_outputs(&h);
	rg_iter_stats_get(h.s, &st);
	assert_int_equal(st.prefix.hit_blocks, 5 * 4 + 3 + 2 * 4);
	assert_true(st.prefix.query_blocks >= st.prefix.hit_blocks);
	h_free(&h);
}

static void set_true_prior(harness *h)
{
	/* the harness's cost: pairs of prefill chunks and decode rows alike */
	rg_step_cost m = {h->ca, h->cb, h->cc, h->cc, 0};

	rg_iter_set_cost_prior(h->s, &m);
}

/* A deadline that cannot be met is refused at once; the same request admitted without a
 * deadline indeed misses it; one that can be met is admitted and met. */
static void test_deadline_refused_and_met(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[1500];
	rg_iter_admission adm;
	(void)state;

	rng = 0x99ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 256;
	p.max_context = 2048;
	p.prefix_caching = false;
	h_init(&h, 1024, 16, &p);
	set_true_prior(&h);
	/* alone, 1000 tokens take 4 steps of >= 4.5 ms: 5 ms cannot be met, even on an idle
	 * engine */
	rand_prompt(pr, 1000);
	set_prompt(&h, 0, pr, 1000, 4);
	assert_int_equal(h_add(&h, 0, 0, 5, 0, &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms < 0);
	assert_true(adm.est_ttft_ms > 5);
	/* a queue of 6 x 1500 tokens ahead */
	for (int id = 1; id <= 6; id++) {
		rand_prompt(pr, 1500);
		set_prompt(&h, id, pr, 1500, 10);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
	}
	rand_prompt(pr, 20);
	set_prompt(&h, 7, pr, 20, 10);
	assert_int_equal(h_add(&h, 7, 0, 30, 0, &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms >= 1);
	{
		double est = adm.est_ttft_ms;

		/* the same request without a deadline, then with one it can meet */
		assert_int_equal(h_add(&h, 7, 0, 0, 0, NULL), RG_OK);
		set_prompt(&h, 8, pr, 20, 10);
		h.r[8].prompt[0] = (h.r[8].prompt[0] + 1) % V;
		assert_int_equal(h_add(&h, 8, 0, est * 1.5, 0, &adm), RG_OK);
		h_run_all(&h);
		/* it would have missed: the estimate (the model's, no slack) was right to within
		 * its slack (8, admitted after it, shares its steps and makes it a little later) */
		assert_true(h.r[7].first - h.r[7].arrival > 30);
		assert_true(est <= h.r[7].first - h.r[7].arrival + 1e-6);
		assert_true(h.r[7].first - h.r[7].arrival <= 1.1 * est + 1e-6);
		assert_true(h.r[8].first - h.r[8].arrival <= est * 1.5);
	}
	h_check_outputs(&h);
	h_free(&h);
}

/* Arrivals over time with TTFT and TPOT targets: every admitted request meets both, some are
 * refused, the refused ones got a Retry-After. */
static void test_deadlines_random_arrivals(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[400];
	double arrive[120], dl[120], tp[120];
	int n_req = 120, next = 0, admitted = 0, refused = 0;
	(void)state;

	rng = 0x4242ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 256;
	p.max_num_seqs = 32;
	p.max_context = 1024;
	h_init(&h, 2048, 16, &p);
	set_true_prior(&h);
	for (int i = 0; i < n_req; i++) {
		int n = irand(16, 400);

		arrive[i] = (i ? arrive[i - 1] : 0) + irand(0, 5);
		rand_prompt(pr, n);
		set_prompt(&h, i, pr, n, irand(4, 40));
		dl[i] = irand(0, 3) ? irand(10, 150) : 0;
		tp[i] = irand(0, 2) ? irand(3, 8) : 0;
	}
	for (;;) {
		/* the requests that arrived by now ask for admission (arrival = now) */
		while (next < n_req && arrive[next] <= h.clock) {
			rg_iter_admission adm;
			rg_status st = h_add(&h, next, 0, dl[next], tp[next], &adm);

			if (st == RG_OK) {
				admitted++;
			} else {
				assert_int_equal(st, RG_ERR_BUSY);
				assert_true(adm.retry_after_ms >= 1 || adm.retry_after_ms == -1);
				assert_true(dl[next] > 0 || tp[next] > 0 || adm.refused_for_others);
				refused++;
			}
			next++;
		}
		if (!h_step(&h)) {
			if (next >= n_req)
				break;
			h.clock = arrive[next]; /* idle until the next arrival */
		}
	}
	h_run_all(&h);
	h_check_outputs(&h);
	for (int i = 0; i < n_req; i++) {
		req *q = &h.r[i];

		if (!q->added)
			continue;
		if (dl[i] > 0)
			assert_true(q->first - q->arrival <= dl[i] + 1e-9);
		if (tp[i] > 0 && q->n_out >= 2)
			assert_true((q->last - q->first) / (q->n_out - 1) <= tp[i] + 1e-9);
	}
	print_message("deadlines: %d admitted, %d refused\n", admitted, refused);
	assert_true(admitted > 20);
	assert_true(refused > 5);
	h_free(&h);
}

/* Random joins, aborts, priorities, shared prefixes, stop tokens and a small pool (preemption):
 * every plan satisfies the contract, every stream's output equals its reference, and the pool
 * returns to zero. */
static void test_fuzz_continuous_batching(void **state)
{
	(void)state;
	for (int round = 0; round < 3; round++) {
		harness h;
		rg_iter_params p;
		int32_t sys[3][24], pr[64];
		int next_id = 0, aborted = 0, n_added = 0, n_refused = 0;
		rg_iter_stats st;

		rng = 0x1000ull + (uint64_t)round;
		rg_iter_params_default(&p);
		p.max_num_batched_tokens = irand(8, 40);
		p.max_num_seqs = irand(2, 10);
		p.max_context = 80;
		p.max_waiting = 40;
		p.prefix_caching = round != 1;
		h_init(&h, irand(20, 40), 4, &p);
		h.stop_tok = round == 2 ? 7 : NO_STOP;
		if (round == 2)
			set_true_prior(&h);
		for (int k = 0; k < 3; k++)
			rand_prompt(sys[k], 24);
		for (int it = 0; it < 3000; it++) {
			int op = irand(0, 9);

			if (op < 2 && next_id < MAXREQ) {
				int n = irand(1, 60), k = irand(0, 4);

				rand_prompt(pr, n);
				if (k < 3)
					memcpy(pr, sys[k], (size_t)(n < 24 ? n : 24) * sizeof(int32_t));
				set_prompt(&h, next_id, pr, n, irand(1, 16));
				/* round 2: targets too, so admission simulates amid preemption */
				double dl = round == 2 && irand(0, 1) ? irand(5, 200) : 0;
				double tp = round == 2 && irand(0, 2) == 0 ? irand(3, 10) : 0;
				rg_iter_admission adm;
				rg_status ast = h_add(&h, next_id, irand(0, 2), dl, tp, &adm);

				if (ast == RG_OK) {
					n_added++;
				} else if (dl == 0 && tp == 0 && !adm.refused_for_others) {
					/* only a full queue refuses a request without targets
					 * (preempted ones may take it past max_waiting) */
					assert_int_equal(ast, RG_ERR_BUSY);
					rg_iter_stats_get(h.s, &st);
					assert_true(st.n_waiting >= p.max_waiting);
				} else {
					assert_int_equal(ast, RG_ERR_BUSY);
					n_refused++;
				}
				next_id++;
			} else if (op == 2 && next_id > 0) {
				int id = irand(0, next_id - 1);

				if (h.r[id].added && !h.r[id].finish) {
					int nt;
					const int32_t *t = rg_iter_tokens(h.s, (uint64_t)id, &nt);

					/* the scheduler's tokens: the prompt, then what we were given */
					assert_non_null(t);
					assert_int_equal(nt, h.r[id].n + h.r[id].n_out);
					assert_memory_equal(t, h.r[id].prompt, (size_t)h.r[id].n * 4);
					assert_memory_equal(t + h.r[id].n, h.r[id].out,
							    (size_t)h.r[id].n_out * 4);
					assert_int_equal(rg_iter_abort(h.s, (uint64_t)id), RG_OK);
					record_finished(&h);
					aborted++;
				}
			} else {
				h_step(&h);
			}
		}
		h_run_all(&h);
		h_check_outputs(&h);
		rg_iter_stats_get(h.s, &st);
		assert_int_equal(st.n_finished, n_added);
		assert_true(aborted > 0);
		if (round != 1)
			assert_true(st.prefix.hit_blocks > 0);
		if (round == 2)
			assert_true(n_refused > 0);
		print_message("fuzz round %d: %d requests, %lld steps, %lld preemptions, %lld "
			      "prefix hits of %lld\n", round, next_id, st.n_steps,
			      st.n_preemptions, st.prefix.hit_blocks, st.prefix.query_blocks);
		h_free(&h);
	}
}

/* Without a prior, the cost model is learned from the steps reported: after a mixed workload it
 * predicts the simulated cost of decode-only and prefill-heavy steps within 2%, and admission
 * uses it (an impossible deadline is refused). */
static void test_cost_learned_online(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[600];
	rg_step_cost m;
	rg_iter_admission adm;
	/* 32 decodes at context 300; those beside a 224-token chunk after 500 cached; a chunk of
	 * 8 after 36; a prompt of 200 */
	const rg_step_shape shapes[4] = {
		{.tokens = 32, .n_decode = 32, .ctx = 32 * 300.5, .rows = 32},
		{.tokens = 256, .n_decode = 32, .ctx = 32 * 300.5, .pairs = 224 * (500 + 112.5),
		 .rows = 32},
		{.tokens = 8, .pairs = 8 * 40.5}, {.tokens = 200, .pairs = 200 * 100.5, .rows = 1},
	};
	(void)state;

	rng = 0x3131ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 256;
	p.max_context = 1024;
	h_init(&h, 1024, 16, &p);
	assert_int_equal(rg_iter_cost_model(h.s, &m), RG_OK);
	assert_true(rg_step_cost_zero(&m));
	/* nothing known: a deadline is not refused */
	rand_prompt(pr, 600);
	set_prompt(&h, 0, pr, 600, 1);
	assert_int_equal(h_add(&h, 0, 0, 0.001, 0, &adm), RG_OK);
	for (int id = 1; id < 40; id++) {
		int n = irand(1, 600);

		rand_prompt(pr, n);
		set_prompt(&h, id, pr, n, irand(1, 60));
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
		if (id % 3 == 0)
			for (int k = 0; k < 5; k++)
				h_step(&h);
	}
	h_run_all(&h);
	assert_int_equal(rg_iter_cost_model(h.s, &m), RG_OK);
	for (int k = 0; k < 4; k++) {
		double want = h.ca + h.cb * shapes[k].tokens + h.cc * (shapes[k].pairs + shapes[k].ctx);
		double got = rg_step_cost_ms(&m, &shapes[k]);

		assert_true(fabs(got - want) <= 0.02 * want);
	}
	rand_prompt(pr, 600);
	set_prompt(&h, 40, pr, 600, 4);
	assert_int_equal(h_add(&h, 40, 0, 3, 0, &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms < 0);
	h_check_outputs(&h);
	h_free(&h);
}

/* Waiting requests run by priority, then arrival. */
static void test_priority_order(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[64];
	(void)state;

	rng = 0x8888ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 16;
	p.max_num_seqs = 1; /* one sequence at a time: the order is the admission order */
	p.max_context = 128;
	h_init(&h, 64, 8, &p);
	for (int id = 0; id < 4; id++) {
		rand_prompt(pr, 20);
		set_prompt(&h, id, pr, 20, 2);
	}
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
	assert_int_equal(h_add(&h, 1, 0, 0, 0, NULL), RG_OK);
	assert_int_equal(h_add(&h, 2, 5, 0, 0, NULL), RG_OK);
	assert_int_equal(h_add(&h, 3, 1, 0, 0, NULL), RG_OK);
	h_run_all(&h);
	assert_true(h.r[2].first < h.r[3].first);
	assert_true(h.r[3].first < h.r[0].first);
	assert_true(h.r[0].first < h.r[1].first);
	h_check_outputs(&h);
	h_free(&h);
}

static void test_errors(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[40] = {0};
	rg_iter_plan pl;
	rg_iter *s2;
	(void)state;

	rg_iter_params_default(&p);
	p.max_context = 32;
	p.max_waiting = 2;
	h_init(&h, 16, 4, &p);
	/* a pool that cannot hold one max_context sequence */
	p.max_context = 100;
	assert_int_equal(rg_iter_init(&s2, h.pool, &p), RG_ERR_INVALID_INPUT);
	p.max_context = 32;
	set_prompt(&h, 0, pr, 32, 4);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_ERR_TOO_LONG);
	set_prompt(&h, 0, pr, 31, 4);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_ERR_INVALID_INPUT); /* duplicate id */
	set_prompt(&h, 1, pr, 3, 4);
	assert_int_equal(h_add(&h, 1, 0, 0, 0, NULL), RG_OK);
	set_prompt(&h, 2, pr, 3, 4);
	assert_int_equal(h_add(&h, 2, 0, 0, 0, NULL), RG_ERR_BUSY); /* queue full */
	h.r[2].added = false;
	assert_int_equal(rg_iter_update(h.s, NULL, NULL, 0, 0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_iter_schedule(h.s, 0, &pl), RG_OK);
	assert_int_equal(rg_iter_schedule(h.s, 0, &pl), RG_ERR_INVALID_INPUT);
	{
		int32_t bad[8] = {-1, -1, -1, -1, -1, -1, -1, -1};

		assert_int_equal(rg_iter_update(h.s, bad, NULL, 0, 0), RG_ERR_INVALID_INPUT);
	}
	assert_int_equal(rg_iter_abort(h.s, 99), RG_ERR_INVALID_INPUT);
	/* abort of a request in the pending plan: freed at the update */
	assert_int_equal(rg_iter_abort(h.s, 0), RG_OK);
	{
		int32_t ok[8] = {0};
		int nd;
		const rg_iter_done *d;

		assert_int_equal(rg_iter_update(h.s, ok, NULL, 1, 1), RG_OK);
		d = rg_iter_finished(h.s, &nd);
		assert_int_equal(nd, 1);
		assert_int_equal(d[0].id, 0);
		assert_int_equal(d[0].reason, RG_ITER_FINISH_ABORT);
		h.r[0].added = false;
		h.r[1].added = false;
	}
	assert_int_equal(rg_iter_abort(h.s, 1), RG_OK);
	{
		rg_iter_stats st;

		rg_iter_stats_get(h.s, &st);
		assert_int_equal(st.n_running + st.n_waiting, 0);
		assert_int_equal(st.blocks_used, st.prefix.n_cached);
	}
	h_free(&h);
}


/* ---- issue 28: admission that meets what it accepts, a fair queue, preemption without thrash */

/* The TTFT estimate is the queue ahead of the request: every prompt token ahead, in chunks of
 * max_num_batched_tokens, beside the decode steps of what runs. It grows with the queue ahead;
 * what comes later only delays a request (a later arrival shares its steps' leftover budget,
 * one of higher priority goes ahead), never hastens it; a request of higher priority is
 * estimated ahead of the queue; and with the model exact (the true prior) and nothing arriving
 * after it, the estimate is the first token's time itself. */
static void test_ttft_from_queue_ahead(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[300];
	rg_iter_admission adm;
	double est[7];
	(void)state;

	rng = 0x2828ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 64;
	p.max_num_seqs = 8;
	p.max_context = 512;
	p.prefix_caching = false;
	h_init(&h, 512, 16, &p);
	set_true_prior(&h);
	/* a request running and decoding: its decode rows share every step ahead */
	rand_prompt(pr, 40);
	set_prompt(&h, 0, pr, 40, 200);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
	h_step(&h);
	for (int k = 0; k < 7; k++) {
		/* the probe (deadline far away: estimated, admitted), then a queued request */
		rand_prompt(pr, 20);
		set_prompt(&h, 10 + k, pr, 20, 3);
		assert_int_equal(h_add(&h, 10 + k, 0, 1e6, 0, &adm), RG_OK);
		est[k] = adm.est_ttft_ms;
		assert_true(est[k] > 0);
		if (k > 0)
			assert_true(est[k] > est[k - 1] + 5); /* 250 more tokens: 4 more steps */
		if (k == 6)
			break;
		rand_prompt(pr, 250);
		set_prompt(&h, 1 + k, pr, 250, 5);
		assert_int_equal(h_add(&h, 1 + k, 0, 0, 0, NULL), RG_OK);
	}
	/* priority 1 goes ahead of the queue (asked, then withdrawn: the queue is unchanged) */
	rand_prompt(pr, 20);
	set_prompt(&h, 20, pr, 20, 3);
	assert_int_equal(h_add(&h, 20, 1, 1e6, 0, &adm), RG_OK);
	assert_true(adm.est_ttft_ms < est[1]);
	assert_int_equal(rg_iter_abort(h.s, 20), RG_OK);
	record_finished(&h);
	h.r[20].added = false;
	h_run_all(&h);
	h_check_outputs(&h);
	for (int k = 0; k < 7; k++) {
		double got = h.r[10 + k].first - h.r[10 + k].arrival;

		print_message("probe %d: estimated %.3f ms, first token at %.3f ms\n", k, est[k],
			      got);
		assert_true(got >= est[k] - 1e-6);
	}
	assert_true(fabs(h.r[16].first - h.r[16].arrival - est[6]) <= 1e-6 * est[6]);
	h_free(&h);
}

/* Refused for its deadline with a Retry-After computed from the queue: after that long (the
 * queue ahead drained by as much), the same request under the same deadline is admitted and
 * meets it; while the queue is as it was, it is still refused. A deadline that even an idle
 * engine misses: -1. A request without a deadline that would make an admitted one miss is
 * refused for the others. */
static void test_refusal_retry_after(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[400];
	rg_iter_admission adm, adm2;
	double t_refused;
	(void)state;

	rng = 0x2929ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 64;
	p.max_num_seqs = 8;
	p.max_context = 512;
	p.prefix_caching = false;
	h_init(&h, 512, 16, &p);
	set_true_prior(&h);
	for (int id = 0; id < 5; id++) {
		rand_prompt(pr, 300);
		set_prompt(&h, id, pr, 300, 4);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
	}
	rand_prompt(pr, 16);
	set_prompt(&h, 10, pr, 16, 4);
	assert_int_equal(h_add(&h, 10, 0, 40, 0, &adm), RG_ERR_BUSY);
	assert_false(adm.refused_for_others);
	assert_true(adm.est_ttft_ms * 1.1 > 40);
	assert_true(fabs(adm.retry_after_ms - (1.1 * adm.est_ttft_ms - 40)) < 1e-6 * adm.est_ttft_ms);
	t_refused = h.clock;
	/* one step later the queue has not drained enough */
	h_step(&h);
	assert_int_equal(h_add(&h, 10, 0, 40, 0, &adm2), RG_ERR_BUSY);
	while (h.clock < t_refused + adm.retry_after_ms)
		assert_true(h_step(&h));
	assert_int_equal(h_add(&h, 10, 0, 40, 0, &adm2), RG_OK);
	/* too short for an idle engine: 16 tokens take at least one step of >= 2 ms */
	set_prompt(&h, 11, pr, 16, 4);
	assert_int_equal(h_add(&h, 11, 0, 1, 0, &adm), RG_ERR_BUSY);
	assert_true(adm.retry_after_ms == -1);
	/* a long prompt without a deadline, ahead of nothing but behind the admitted one, would
	 * not delay it (it is behind); one of higher priority would: refused for it */
	rand_prompt(pr, 400);
	set_prompt(&h, 12, pr, 400, 4);
	assert_int_equal(h_add(&h, 12, 5, 0, 0, &adm), RG_ERR_BUSY);
	assert_true(adm.refused_for_others);
	assert_true(adm.retry_after_ms >= 1);
	h_run_all(&h);
	h_check_outputs(&h);
	assert_true(h.r[10].first - h.r[10].arrival <= 40 + 1e-9);
	h_free(&h);
}

/* A request that can never fit is told so (TOO_LONG / INVALID_INPUT, retry_after_ms -1),
 * unlike a full queue (BUSY, retry_after_ms >= 1). */
static void test_never_fits(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[64] = {0};
	rg_iter_admission adm;
	(void)state;

	rg_iter_params_default(&p);
	p.max_context = 64;
	p.max_num_seqs = 8;
	p.max_waiting = 1;
	h_init(&h, 20, 4, &p);
	set_true_prior(&h);
	set_prompt(&h, 0, pr, 64, 4);
	assert_int_equal(h_add(&h, 0, 0, 0, 0, &adm), RG_ERR_TOO_LONG);
	assert_true(adm.retry_after_ms == -1);
	/* 4 beams of up to 60 tokens: 4 x 16 blocks, the pool has 20 */
	set_prompt(&h, 0, pr, 40, 20);
	h.r[0].n_beams = 4;
	assert_int_equal(h_add(&h, 0, 0, 0, 0, &adm), RG_ERR_TOO_LONG);
	assert_true(adm.retry_after_ms == -1);
	h.r[0].n_beams = 9; /* more beams than max_num_seqs */
	assert_int_equal(h_add(&h, 0, 0, 0, 0, &adm), RG_ERR_INVALID_INPUT);
	assert_true(adm.retry_after_ms == -1);
	h.r[0].n_beams = 0;
	assert_int_equal(h_add(&h, 0, 0, 0, 0, &adm), RG_OK);
	set_prompt(&h, 1, pr, 8, 4);
	assert_int_equal(h_add(&h, 1, 0, 0, 0, &adm), RG_ERR_BUSY); /* the queue is full */
	assert_true(adm.retry_after_ms >= 1);
	h_run_all(&h);
	h_free(&h);
}

/* A waiting request that is aborted leaves at once: nothing queued, no block held, counted. */
static void test_waiting_abort_leaves_nothing(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[40];
	rg_iter_stats st;
	int nd;
	const rg_iter_done *d;
	(void)state;

	rng = 0x3030ull;
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 64;
	p.max_num_seqs = 2;
	p.max_context = 64;
	h_init(&h, 64, 4, &p);
	for (int id = 0; id < 6; id++) {
		rand_prompt(pr, 30);
		set_prompt(&h, id, pr, 30, 8);
		assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
	}
	assert_true(h_step(&h)); /* two admitted, four waiting */
	rg_iter_stats_get(h.s, &st);
	assert_int_equal(st.n_waiting, 4);
	{
		int used = st.blocks_used;

		/* the plan is reported: the aborts of waiting requests are synchronous */
		for (int id = 2; id < 6; id++)
			assert_int_equal(rg_iter_abort(h.s, (uint64_t)id), RG_OK);
		rg_iter_stats_get(h.s, &st);
		assert_int_equal(st.n_waiting, 0);
		assert_int_equal(st.n_running, 2);
		assert_int_equal(st.blocks_used, used);
		assert_int_equal(st.n_finished, 4);
	}
	d = rg_iter_finished(h.s, &nd);
	assert_int_equal(nd, 4);
	for (int k = 0; k < nd; k++) {
		assert_int_equal(d[k].reason, RG_ITER_FINISH_ABORT);
		h.r[d[k].id].added = false;
	}
	h_run_all(&h);
	h_check_outputs(&h);
	h_free(&h);
}

/* Preemption without thrash (issue 28: a 43-block pool and six requests gave 117 preemptions
 * a round): six requests that fit the pool one at a time but not together are preempted at
 * most once each in all, and every output equals the request generated alone; also with no
 * headroom kept (watermark_blocks 0), where only the rule that a request is admitted with the
 * blocks of all its tokens holds it back. */
static void test_preemption_bounded(void **state)
{
	long long n_pre[2];
	(void)state;

	for (int variant = 0; variant < 2; variant++) {
		harness h;
		rg_iter_params p;
		int32_t pr[64];
		rg_iter_stats st;
		static const int lens[6] = {22, 35, 15, 50, 30, 42};

		rng = 0x4343ull;
		rg_iter_params_default(&p);
		p.max_num_batched_tokens = 64;
		p.max_num_seqs = 8;
		p.max_context = 128;
		p.prefix_caching = false;
		if (variant == 1)
			p.watermark_blocks = 0;
		h_init(&h, 43, 4, &p); /* 172 slots; the six need 22 .. 90 tokens each, 374 */
		for (int id = 0; id < 6; id++) {
			rand_prompt(pr, lens[id]);
			set_prompt(&h, id, pr, lens[id], 40);
			assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
		}
		h_run_all(&h);
		h_check_outputs(&h);
		rg_iter_stats_get(h.s, &st);
		n_pre[variant] = st.n_preemptions;
		print_message("six requests, 43 blocks, %s: %lld preemptions, %lld steps\n",
			      variant ? "watermark 0" : "default headroom", st.n_preemptions,
			      st.n_steps);
		h_free(&h);
	}
	assert_true(n_pre[0] <= 6);
	assert_true(n_pre[1] <= 6);
	assert_true(n_pre[0] <= n_pre[1]);
}

/* Fair shares: share A queues 2,000 requests, then share B one. B's request starts after about
 * one request of A (the start tag of a share that has none queued is the virtual time now), not
 * after all 2,000; with one share for both (FCFS within it) it waits for all of them. Each
 * first token is stamped with the step number (now_ms = steps run). */
static int fair_wait_steps(bool shared)
{
	rg_kv_pool *pool;
	rg_iter *s;
	rg_iter_params p;
	int32_t pr[16], sampled[64] = {0};
	int steps = 0, b_added_at = -1, b_first = -1;
	const uint64_t B_ID = 5000;

	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 64;
	p.max_num_seqs = 8;
	p.max_context = 64;
	p.max_waiting = 4096;
	p.prefix_caching = false;
	assert_int_equal(rg_kv_pool_init(&pool, 256, 16), RG_OK);
	assert_int_equal(rg_iter_init(&s, pool, &p), RG_OK);
	for (int i = 0; i < 16; i++)
		pr[i] = i + 1;
	for (int i = 0; i < 2000; i++) {
		rg_iter_request r = {.id = (uint64_t)i, .prompt = pr, .prompt_len = 16,
				     .max_tokens = 4, .fair_key = 77};

		assert_int_equal(rg_iter_add(s, &r, steps, NULL), RG_OK);
	}
	for (;;) {
		rg_iter_plan pl;
		int nd;
		const rg_iter_done *d;

		if (steps == 3) {
			rg_iter_request r = {.id = B_ID, .prompt = pr, .prompt_len = 16,
					     .max_tokens = 4, .fair_key = shared ? 77 : 78};

			assert_int_equal(rg_iter_add(s, &r, steps, NULL), RG_OK);
			b_added_at = steps;
		}
		assert_int_equal(rg_iter_schedule(s, steps, &pl), RG_OK);
		if (pl.batch.n_seq == 0)
			break;
		steps++;
		assert_int_equal(rg_iter_update(s, sampled, NULL, steps, NAN), RG_OK);
		d = rg_iter_finished(s, &nd);
		for (int k = 0; k < nd; k++)
			if (d[k].id == B_ID)
				b_first = (int)d[k].first_token_ms;
	}
	rg_iter_free(s);
	assert_int_equal(rg_kv_pool_n_used(pool), 0);
	rg_kv_pool_free(pool);
	assert_true(b_first > b_added_at);
	return b_first - b_added_at;
}

static void test_fair_shares(void **state)
{
	int fair = fair_wait_steps(false), fcfs = fair_wait_steps(true);
	(void)state;

	print_message("a request behind 2,000 of another share: first token after %d steps "
		      "(%d when both are one share)\n", fair, fcfs);
	/* it waits for a sequence slot (8 run, each 4 tokens long) and its own prefill: a few
	 * steps, as a request arriving at an idle engine that is busy with 8 streams */
	assert_true(fair <= 6);
	assert_true(fcfs > 500);
}

/* Beam groups inside the step loop beside greedy streams: 6 beam requests (2, 3 and 4 beams; two
 * diverse searches of 2 groups with a diversity penalty) and 10 greedy ones, joining at
 * different steps, blocks of 4 tokens so that forks share partially filled blocks (copy on
 * write): each search's hypotheses (ids and scores) equal the same search run directly on every
 * beam's whole context, the greedy outputs equal theirs, every block returns. Then the same
 * under block pressure, where groups are preempted and restarted (their searches start again
 * and give the same results), with prefix caching off, and with max_num_seqs 7 (a group is
 * admitted only with room for all its beams, counting those of groups still in prefill). */
static void test_beam_groups(void **state)
{
	(void)state;
	for (int variant = 0; variant < 4; variant++) {
		harness h;
		rg_iter_params p;
		int32_t pr[40];
		rg_iter_stats st;
		int restarts = 0;

		rng = 0xbea4ull + (uint64_t)variant;
		rg_iter_params_default(&p);
		p.max_num_batched_tokens = 64;
		/* variant 3: room for 7 sequences, so that admission must keep room for the beams
		 * a group in prefill will fork into */
		p.max_num_seqs = variant == 3 ? 7 : 24;
		p.max_context = 96;
		p.prefix_caching = variant != 2;
		/* variant 1: 60 blocks for up to 16 requests of up to ~50 tokens, 4-beam groups
		 * among them, and no headroom kept when admitting: preemption */
		if (variant == 1)
			p.watermark_blocks = 0;
		h_init(&h, variant == 1 ? 60 : 400, 4, &p);
		for (int id = 0; id < 16; id++) {
			int n = irand(3, 30);

			rand_prompt(pr, n);
			set_prompt(&h, id, pr, n, irand(4, 20));
			if (id % 3 == 0 || id == 7) {
				h.r[id].n_beams = id % 2 ? 4 : id == 6 ? 3 : 2 + 2 * (id == 0);
				h.r[id].n_groups = id == 0 || id == 7 ? 2 : 1;
				h.r[id].diversity = h.r[id].n_groups > 1 ? 0.7f : 0;
			}
		}
		for (int id = 0; id < 16; id++) {
			assert_int_equal(h_add(&h, id, 0, 0, 0, NULL), RG_OK);
			for (int k = irand(0, 3); k > 0; k--)
				h_step(&h);
		}
		h_run_all(&h);
		h_check_outputs(&h);
		rg_iter_stats_get(h.s, &st);
		assert_int_equal(st.n_finished, 16);
		for (int id = 0; id < 16; id++) {
			assert_true(h.r[id].finish == RG_ITER_FINISH_STOP ||
				    h.r[id].finish == RG_ITER_FINISH_LENGTH);
			restarts += h.r[id].restarts;
			if (h.r[id].n_beams >= 2)
				assert_true(h.r[id].n_res >= 1);
		}
		if (variant == 1)
			assert_true(restarts > 0 && st.n_preemptions > 0);
		else
			assert_int_equal(restarts, 0);
		assert_true(h.beam_steps > 0);
		h_free(&h);
	}
}

/* A beam group aborted while its rows are in the pending plan (freed at the update) and one
 * aborted between steps: one ABORT entry each, every block back; rg_iter_beam_next's and
 * rg_iter_update's refusals; a group too wide for the pool is refused at admission. */
/* The scheduler's finished list is exactly request id, ended for reason. */
static void assert_one_finished(rg_iter *s, uint64_t id, int reason)
{
	int nd;
	const rg_iter_done *d = rg_iter_finished(s, &nd);

	assert_int_equal(nd, 1);
	assert_int_equal(d[0].id, id);
	assert_int_equal(d[0].reason, reason);
}

static void test_beam_errors(void **state)
{
	harness h;
	rg_iter_params p;
	int32_t pr[8] = {1, 2, 3, 4, 5, 6, 7, 8}, par[4] = {0, 0, 0, 0}, tok[4] = {1, 2, 3, 4};
	rg_iter_plan pl;
	int32_t sampled[16] = {0};
	rg_iter_stats st;
	(void)state;

	rg_iter_params_default(&p);
	p.max_context = 64;
	h_init(&h, 64, 4, &p);
	/* 4 beams x (8 + 60 tokens: 17 blocks + 1) = 72 > 64 blocks */
	set_prompt(&h, 0, pr, 8, 60);
	h.r[0].n_beams = 4;
	h.r[0].n_groups = 1;
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_ERR_TOO_LONG);
	h.r[0].n_beams = RG_ITER_MAX_BEAMS + 1;
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_ERR_INVALID_INPUT);
	set_prompt(&h, 0, pr, 8, 6);
	h.r[0].n_beams = 4;
	h.r[0].n_groups = 1;
	assert_int_equal(h_add(&h, 0, 0, 0, 0, NULL), RG_OK);
	set_prompt(&h, 1, pr, 5, 6);
	h.r[1].n_beams = 2;
	h.r[1].n_groups = 1;
	assert_int_equal(h_add(&h, 1, 0, 0, 0, NULL), RG_OK);
	assert_int_equal(rg_iter_beam_next(h.s, 0, par, tok, 4), RG_ERR_INVALID_INPUT); /* no plan */
	assert_int_equal(rg_iter_schedule(h.s, 0, &pl), RG_OK);
	assert_int_equal(pl.batch.n_logits, 2);
	/* wrong width, negative token, unknown id; an update without next beams */
	assert_int_equal(rg_iter_beam_next(h.s, 0, par, tok, 3), RG_ERR_INVALID_INPUT);
	tok[1] = -1;
	assert_int_equal(rg_iter_beam_next(h.s, 0, par, tok, 4), RG_ERR_INVALID_INPUT);
	tok[1] = 2;
	assert_int_equal(rg_iter_beam_next(h.s, 5, par, tok, 4), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_iter_beam_next(h.s, 0, par, tok, 4), RG_OK);
	assert_int_equal(rg_iter_update(h.s, sampled, NULL, 1, 1), RG_ERR_INVALID_INPUT);
	/* group 0 gets its 4 beams; group 1 is aborted while in the plan */
	assert_int_equal(rg_iter_abort(h.s, 1), RG_OK);
	assert_int_equal(rg_iter_update(h.s, sampled, NULL, 1, 1), RG_OK);
	assert_one_finished(h.s, 1, RG_ITER_FINISH_ABORT);
	rg_iter_stats_get(h.s, &st);
	assert_int_equal(st.n_running, 4);
	/* the 4 members decode together; a parent that is no member ends the group */
	assert_int_equal(rg_iter_schedule(h.s, 2, &pl), RG_OK);
	assert_int_equal(pl.batch.n_seq, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pl.beam_slot[i], i);
		assert_int_equal(pl.batch.tokens[i], tok[i]);
	}
	par[2] = 9;
	assert_int_equal(rg_iter_beam_next(h.s, 0, par, tok, 4), RG_OK);
	assert_int_equal(rg_iter_update(h.s, sampled, NULL, 3, 1), RG_ERR_INVALID_INPUT);
	assert_one_finished(h.s, 0, RG_ITER_FINISH_ABORT);
	rg_iter_stats_get(h.s, &st);
	assert_int_equal(st.n_running + st.n_waiting, 0);
	assert_int_equal(st.blocks_used, st.prefix.n_cached);
	/* aborted between steps (another prompt: the steps above wrote no toy KV for the prefix
	 * cache to hand out) */
	for (int i = 0; i < 8; i++)
		pr[i] = 20 + i;
	set_prompt(&h, 2, pr, 8, 6);
	h.r[2].n_beams = 3;
	h.r[2].n_groups = 1;
	assert_int_equal(h_add(&h, 2, 0, 0, 0, NULL), RG_OK);
	h_step(&h);
	h_step(&h);
	assert_int_equal(rg_iter_abort(h.s, 2), RG_OK);
	record_finished(&h);
	assert_int_equal(h.r[2].finish, RG_ITER_FINISH_ABORT);
	rg_iter_stats_get(h.s, &st);
	assert_int_equal(st.n_running + st.n_waiting, 0);
	assert_int_equal(st.blocks_used, st.prefix.n_cached);
	h.r[0].added = h.r[1].added = h.r[2].added = false;
	h_free(&h);
}

/* Run requests ids[0..n) (already added) to their ends, one token 1 per sampling row, checking
 * each plan's prompt rows (src/sched/iter.h's prompt scoring): at most max_rows, after the
 * sampling rows, each at its sequence's position prompt_pos of the batch. seen[id][pos] counts
 * the rows of request id at each position; done_cached[id] its n_cached_tokens at the end. */
static void pl_run(rg_iter *s, int max_rows, int n_ids, int seen[][64], int *done_cached)
{
	int32_t sampled[256];
	int live = n_ids;
	double now = 0;

	while (live > 0) {
		rg_iter_plan pl;
		const rg_iter_done *d;
		int nd;

		assert_int_equal(rg_iter_schedule(s, now, &pl), RG_OK);
		assert_true(pl.batch.n_seq > 0);
		assert_int_equal(pl.batch.n_logits, pl.n_sample + pl.n_prompt_rows);
		assert_true(pl.n_prompt_rows <= max_rows);
		for (int j = 0; j < pl.n_prompt_rows; j++) {
			const int r = pl.batch.logits_rows[pl.n_sample + j], i =
				pl.logits_seq[pl.n_sample + j];

			assert_true(r >= pl.batch.cu_seqlens_q[i] && r < pl.batch.cu_seqlens_q[i + 1]);
			assert_int_equal(pl.batch.positions[r], pl.prompt_pos[j]);
			seen[pl.seq_ids[i]][pl.prompt_pos[j]]++;
		}
		for (int r = 0; r < pl.n_sample; r++)
			sampled[r] = 1;
		now += 1;
		assert_int_equal(rg_iter_update(s, sampled, NULL, now, 1.0), RG_OK);
		d = rg_iter_finished(s, &nd);
		for (int k = 0; k < nd; k++) {
			done_cached[d[k].id] = d[k].n_cached_tokens;
			live--;
		}
	}
}

/* Prompt scoring: a prompt_logits request's chunks are cut to max_prompt_logits rows a step
 * and every prompt position but the last gets exactly one row; a plain request beside it has
 * none; the same prompt again takes nothing from the prefix cache (its rows would be missing),
 * while a plain request after them does. Without max_prompt_logits such a request is refused. */
static void test_prompt_logits(void **state)
{
	rg_kv_pool *pool;
	rg_iter *s;
	rg_iter_params p;
	int32_t prompt[40];
	static int seen[8][64];
	int cached[8] = {0};
	(void)state;

	for (int i = 0; i < 40; i++)
		prompt[i] = 3 + i % 17;
	assert_int_equal(rg_kv_pool_init(&pool, 64, 4), RG_OK);
	rg_iter_params_default(&p);
	p.max_num_batched_tokens = 16;
	p.max_context = 128;
	assert_int_equal(rg_iter_init(&s, pool, &p), RG_OK);
	{
		rg_iter_request r = {.id = 1, .prompt = prompt, .prompt_len = 9, .max_tokens = 2,
				     .prompt_logits = true};

		assert_int_equal(rg_iter_add(s, &r, 0, NULL), RG_ERR_INVALID_INPUT);
	}
	rg_iter_free(s);
	p.max_prompt_logits = 5;
	assert_int_equal(rg_iter_init(&s, pool, &p), RG_OK);
	for (int id = 1; id <= 2; id++) {
		rg_iter_request r = {.id = (uint64_t)id, .prompt = prompt, .prompt_len = id == 1 ? 37 : 6,
				     .max_tokens = 3, .prompt_logits = id == 1};

		assert_int_equal(rg_iter_add(s, &r, 0, NULL), RG_OK);
	}
	memset(seen, 0, sizeof(seen));
	pl_run(s, 5, 2, seen, cached);
	for (int pos = 0; pos < 64; pos++) {
		assert_int_equal(seen[1][pos], pos < 36);
		assert_int_equal(seen[2][pos], 0);
	}
	/* the same 37 tokens again, scored: no prefix hit; then plain: a hit */
	{
		rg_iter_request r = {.id = 3, .prompt = prompt, .prompt_len = 37, .max_tokens = 1,
				     .prompt_logits = true};

		assert_int_equal(rg_iter_add(s, &r, 0, NULL), RG_OK);
		pl_run(s, 5, 1, seen, cached);
		assert_int_equal(cached[3], 0);
		for (int pos = 0; pos < 64; pos++)
			assert_int_equal(seen[3][pos], pos < 36);
		r.id = 4;
		r.prompt_logits = false;
		assert_int_equal(rg_iter_add(s, &r, 0, NULL), RG_OK);
		pl_run(s, 5, 1, seen, cached);
		assert_true(cached[4] >= 32);
		for (int pos = 0; pos < 64; pos++)
			assert_int_equal(seen[4][pos], 0);
	}
	rg_iter_free(s);
	rg_kv_pool_free(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunked_prefill_beside_32_streams),
		cmocka_unit_test(test_preemption_recompute),
		cmocka_unit_test(test_prefix_hits),
		cmocka_unit_test(test_deadline_refused_and_met),
		cmocka_unit_test(test_deadlines_random_arrivals),
		cmocka_unit_test(test_fuzz_continuous_batching),
		cmocka_unit_test(test_cost_learned_online),
		cmocka_unit_test(test_priority_order),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_beam_groups),
		cmocka_unit_test(test_beam_errors),
		cmocka_unit_test(test_ttft_from_queue_ahead),
		cmocka_unit_test(test_refusal_retry_after),
		cmocka_unit_test(test_never_fits),
		cmocka_unit_test(test_waiting_abort_leaves_nothing),
		cmocka_unit_test(test_preemption_bounded),
		cmocka_unit_test(test_fair_shares),
		cmocka_unit_test(test_drafts),
		cmocka_unit_test(test_prompt_logits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
