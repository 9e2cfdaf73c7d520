/* Iteration-level scheduler: the three passes of a step, preemption by recompute, prefix-cache
 * admission and the deadline simulation (iter.h). */
#include "sched/iter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kv/seq_table.h"

enum { ST_WAITING, ST_RUNNING };

typedef struct iseq {
	uint64_t id;
	int priority, prompt_len, max_new; /* max_new = min(max_tokens, max_context - prompt_len) */
	double arrival_ms, deadline_ms, tpot_ms;
	uint64_t order;    /* arrival counter: ties of priority and tag */
	uint64_t fair_key; /* its fair share (rg_iter_request.fair_key; fair_own: its own) */
	bool fair_own;
	double tag, cost;  /* virtual start tag in its share, and its service (tokens) */
	int32_t *tokens;   /* (prompt_len + max_new) prompt then generated */
	int n_tokens;
	int n_computed;    /* tokens whose K/V are in its block table (after the last update) */
	/* its block table is the seq table's sequence kv_id(q): n_computed tokens, + the pending
	 * step's; none while waiting */
	uint64_t *hashes;  /* (max blocks) chained hashes of its blocks 0 .. n_hashed - 1 */
	int n_hashed;
	int state;
	int dec;           /* index of its decision in the step, -1 none */
	int n_preempt, n_cached;
	double first_ms;
	bool aborted;
	int n_beams;       /* a beam group's width (>= 2), 0 for other requests */
	int n_src;         /* encoder-decoders: source tokens (cross blocks while admitted) */
	bool need_encode;  /* admitted by the pending plan: its encoder pass runs first */
	int slot;          /* a beam group member's beam slot (its rows' order), 0 otherwise */
	int n_draft;       /* draft tokens proposed for its next decode step (rg_iter_set_draft),
			    * stored past its tokens at tokens[n_tokens .. n_tokens + n_draft) */
	bool prompt_logits; /* prompt scoring (iter.h): logits of its prompt positions */
} iseq;

/* A beam group's next beams, given by rg_iter_beam_next for the pending plan. */
typedef struct beam_next {
	uint64_t id;
	int n;             /* num_beams; 0: none given (an entry made by rg_iter_update) */
	int32_t parent[RG_ITER_MAX_BEAMS], token[RG_ITER_MAX_BEAMS];
	bool stepped, stop, aborted; /* in rg_iter_update: a row reported, a stop, an abort */
} beam_next;

typedef struct decision {
	iseq *q;
	int n_new, c_before;
	int n_draft;       /* of n_new, draft tokens verified (a decode row of 1 + n_draft) */
	bool has_copy;
	rg_kv_copy copy;
} decision;

struct rg_iter {
	rg_iter_params p;
	rg_kv_pool *pool;        /* for its size and counters; the tables are kv's */
	rg_prefix_cache *cache;
	rg_kv *kv;               /* every block table, by kv_id */
	int bs, max_blocks, B, S;
	iseq **running;  /* (S) by admission, oldest first */
	int n_running;
	iseq **waiting;  /* (max_waiting + S) priority desc, then arrival */
	int n_waiting, waiting_cap;
	decision *dec;   /* (S) the step being built / pending */
	int n_dec, budget;
	bool pending;
	/* the plan's arrays */
	int32_t *tokens, *positions, *slots;     /* (B) */
	int32_t *cu;                             /* (S + 1) */
	int32_t *ctx, *csrc, *cdst, *ndraft;     /* (S) */
	int32_t *lrows, *lseq;                   /* (R) logits rows */
	int32_t *ppos;                           /* (max_prompt_logits) prompt rows' positions */
	int R;                                   /* logits rows at most: S, + B with drafts,
						  * + max_prompt_logits */
	int pl_left;                             /* prompt-logits rows left in the step built */
	int32_t *tables;                         /* (S, max_blocks) */
	int32_t *xlens, *xtables;                /* (S), (S, max_xblocks): cross (enc-dec) */
	int32_t *eseq, *ecu, *eslots;            /* (S), (S + 1), (B): the plan's encode list */
	int max_xblocks;
	uint64_t *ids;                           /* (S) */
	int32_t *bslot;                          /* (S) beam slot of each sequence, -1 none */
	/* beam groups of the pending plan (at most S), their next beams */
	beam_next *bn;
	int n_bn;
	int plan_tokens;
	double plan_pairs;
	rg_step_shape plan_shape;
	/* prefix lookups */
	int32_t *hit_blocks;                     /* (max_blocks) */
	uint64_t *hit_hashes;                    /* (max_blocks) */
	int32_t *reg_blocks;                     /* (max_blocks) a table read for register_blocks */
	/* finished since the last schedule */
	rg_iter_done *done; /* (n_done) entries [done_read, n_done) not yet returned */
	int n_done, done_cap, done_read;
	/* cost model */
	rg_step_learner *learner;
	rg_step_cost model;
	bool model_dirty;
	uint64_t next_order;
	double vtime;            /* fair queueing's virtual time: the tag of the last admitted */
	bool headroom_auto;      /* watermark_blocks was -1: headroom() per running sequence */
	long long n_steps, n_admitted, n_refused, n_preemptions, n_finished;
	long long n_drafted, n_draft_accepted; /* speculative draft tokens verified, accepted */
};

void rg_iter_params_default(rg_iter_params *p)
{
	*p = (rg_iter_params){
		.max_num_batched_tokens = 512, .max_num_seqs = 64, .max_context = 2048,
		.max_waiting = 1024, .watermark_blocks = -1, .prefix_caching = true,
		.deadline_slack = 1.1, .max_sim_steps = 8192,
	};
}

_Static_assert(RG_ITER_MAX_BEAMS <= RG_KV_MAX_RESEAT, "a beam group fits one rg_kv_reseat");

/* The seq table's id of the block table of beam slot `slot` of the request admitted `order`-th:
 * unique among live sequences (order is unique per admitted request and kept through
 * preemption; the caller's ids need not be dense), a beam group's members apart by slot. */
static uint64_t kv_key(uint64_t order, int slot)
{
	return order * RG_ITER_MAX_BEAMS + (uint64_t)slot;
}

static uint64_t kv_id(const iseq *q) { return kv_key(q->order, q->slot); }

/* Free q, not its block table (gone already, or re-seated to another member). */
static void seq_destroy(iseq *q)
{
	if (!q)
		return;
	free(q->tokens);
	free(q->hashes);
	free(q);
}

/* Free q and its block table. */
static void seq_free(rg_iter *s, iseq *q)
{
	if (!q)
		return;
	if (s->kv)
		rg_kv_remove(s->kv, kv_id(q));
	seq_destroy(q);
}

void rg_iter_free(rg_iter *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_running; i++)
		seq_free(s, s->running[i]);
	for (int i = 0; i < s->n_waiting; i++)
		seq_free(s, s->waiting[i]);
	rg_kv_free(s->kv);
	rg_prefix_cache_free(s->cache);
	free(s->running);
	free(s->waiting);
	free(s->dec);
	free(s->tokens);
	free(s->positions);
	free(s->slots);
	free(s->cu);
	free(s->ctx);
	free(s->lrows);
	free(s->lseq);
	free(s->ppos);
	free(s->ndraft);
	free(s->csrc);
	free(s->cdst);
	free(s->tables);
	free(s->xlens);
	free(s->xtables);
	free(s->eseq);
	free(s->ecu);
	free(s->eslots);
	free(s->ids);
	free(s->bslot);
	free(s->bn);
	free(s->hit_blocks);
	free(s->hit_hashes);
	free(s->reg_blocks);
	free(s->done);
	free(s->learner);
	free(s);
}

rg_status rg_iter_init(rg_iter **out, rg_kv_pool *pool, const rg_iter_params *p)
{
	rg_iter *s;
	rg_status st;
	size_t B, S, MB;

	*out = NULL;
	if (!pool || !p || p->max_num_batched_tokens < 1 || p->max_num_seqs < 1 ||
	    p->max_context < 2 || p->max_waiting < 1 || !(p->deadline_slack >= 1) ||
	    !isfinite(p->deadline_slack) || p->max_sim_steps < 1 || p->max_draft < 0 ||
	    p->max_draft > RG_ITER_MAX_DRAFT || p->max_prompt_logits < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter scheduler: bad parameters");
	if ((long long)rg_kv_pool_n_blocks(pool) * rg_kv_pool_block_size(pool) < p->max_context)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter scheduler: a pool of %d blocks of %d "
				 "tokens cannot hold one sequence of max_context %d",
				 rg_kv_pool_n_blocks(pool), rg_kv_pool_block_size(pool),
				 p->max_context);
	s = calloc(1, sizeof(*s));
	if (!s)
		return rg_errorf(RG_ERR_OOM, "iter scheduler: out of memory");
	s->p = *p;
	s->pool = pool;
	s->bs = rg_kv_pool_block_size(pool);
	s->max_blocks = (p->max_context + s->bs - 1) / s->bs;
	s->B = p->max_num_batched_tokens;
	s->S = p->max_num_seqs;
	s->headroom_auto = s->p.watermark_blocks < 0;
	if (s->p.watermark_blocks < 0)
		s->p.watermark_blocks = rg_kv_pool_n_blocks(pool) / 100;
	B = (size_t)s->B;
	S = (size_t)s->S;
	MB = (size_t)s->max_blocks;
	s->waiting_cap = p->max_waiting + s->S;
	s->running = calloc(S, sizeof(iseq *));
	s->waiting = calloc((size_t)s->waiting_cap, sizeof(iseq *));
	s->dec = calloc(S, sizeof(decision));
	s->tokens = calloc(B, sizeof(int32_t));
	s->positions = calloc(B, sizeof(int32_t));
	s->slots = calloc(B, sizeof(int32_t));
	s->cu = calloc(S + 1, sizeof(int32_t));
	s->ctx = calloc(S, sizeof(int32_t));
	s->R = s->S + (p->max_draft > 0 ? s->B : 0) + p->max_prompt_logits;
	s->lrows = calloc((size_t)s->R, sizeof(int32_t));
	s->lseq = calloc((size_t)s->R, sizeof(int32_t));
	s->ppos = calloc((size_t)p->max_prompt_logits + 1, sizeof(int32_t));
	s->ndraft = calloc(S, sizeof(int32_t));
	s->csrc = calloc(S, sizeof(int32_t));
	s->cdst = calloc(S, sizeof(int32_t));
	s->tables = calloc(S * MB, sizeof(int32_t));
	if (p->max_source > 0) {
		s->max_xblocks = (p->max_source + s->bs - 1) / s->bs;
		s->xlens = calloc(S, sizeof(int32_t));
		s->xtables = calloc(S * (size_t)s->max_xblocks, sizeof(int32_t));
		s->eseq = calloc(S, sizeof(int32_t));
		s->ecu = calloc(S + 1, sizeof(int32_t));
		s->eslots = calloc(B, sizeof(int32_t));
		if (!s->xlens || !s->xtables || !s->eseq || !s->ecu || !s->eslots) {
			st = rg_errorf(RG_ERR_OOM, "iter scheduler: out of memory");
			goto out_free_sched;
		}
	}
	s->ids = calloc(S, sizeof(uint64_t));
	s->bslot = calloc(S, sizeof(int32_t));
	s->bn = calloc(S, sizeof(beam_next));
	s->hit_blocks = calloc(MB, sizeof(int32_t));
	s->hit_hashes = calloc(MB, sizeof(uint64_t));
	s->reg_blocks = calloc(MB, sizeof(int32_t));
	s->learner = malloc(sizeof(*s->learner));
	if (!s->learner || !s->running || !s->waiting || !s->dec || !s->tokens || !s->positions ||
	    !s->slots || !s->cu || !s->ctx || !s->lrows || !s->lseq || !s->ppos || !s->ndraft || !s->csrc || !s->cdst ||
	    !s->tables || !s->ids || !s->bslot || !s->bn || !s->hit_blocks || !s->hit_hashes ||
	    !s->reg_blocks) {
		st = rg_errorf(RG_ERR_OOM, "iter scheduler: out of memory");
		goto out_free_sched;
	}
	if (p->prefix_caching && (st = rg_prefix_cache_init(&s->cache, pool)) != RG_OK)
		goto out_free_sched;
	if ((st = rg_kv_init(&s->kv, pool, s->cache)) != RG_OK)
		goto out_free_sched;
	rg_step_learner_init(s->learner, NULL, s->B, s->S, p->max_context);
	*out = s;
	return RG_OK;
out_free_sched:
	rg_iter_free(s);
	return st;
}

void rg_iter_set_cost_prior(rg_iter *s, const rg_step_cost *m)
{
	rg_step_learner_set_prior(s->learner, m);
	s->model_dirty = true;
}

void rg_iter_cost_observe(rg_iter *s, const rg_step_shape *x, double ms)
{
	rg_step_learner_add(s->learner, x, ms);
	s->model_dirty = true;
}

void rg_iter_cost_settle(rg_iter *s)
{
	rg_step_learner_settle(s->learner);
	s->model_dirty = true;
}

rg_status rg_iter_cost_model(rg_iter *s, rg_step_cost *out)
{
	rg_status st = RG_OK;

	if (s->model_dirty) {
		if ((st = rg_step_learner_fit(s->learner, &s->model)) != RG_OK)
			s->model = (rg_step_cost){0};
		s->model_dirty = false;
	}
	*out = s->model;
	return st;
}

/* ---- queues ---- */

/* The queue's order: priority (higher first), then the fair share's virtual start tag (start-
 * time fair queueing, Goyal et al. SIGCOMM'96: the share that has been served least goes
 * first), then arrival. Running sequences are kept in the same order, so the last running is
 * the one preemption takes. */
static bool before(const iseq *a, const iseq *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	if (a->tag != b->tag)
		return a->tag < b->tag;
	return a->order < b->order;
}

static bool same_share(const iseq *a, uint64_t key, bool own)
{
	return a->fair_key == key && a->fair_own == own;
}

/* The start tag of a new request of share (key, own): where the share's last request (waiting
 * or running) ends in virtual time, or the virtual time now when it has none ahead. */
static double share_tag(const rg_iter *s, uint64_t key, bool own)
{
	double t = s->vtime;

	for (int i = 0; i < s->n_running; i++)
		if (same_share(s->running[i], key, own))
			t = fmax(t, s->running[i]->tag + s->running[i]->cost);
	for (int i = 0; i < s->n_waiting; i++)
		if (same_share(s->waiting[i], key, own))
			t = fmax(t, s->waiting[i]->tag + s->waiting[i]->cost);
	return t;
}

/* Insert q into running at its place in the queue's order (a beam group's members stay
 * contiguous: they share every key of the order). */
static void running_insert(rg_iter *s, iseq *q)
{
	int i = s->n_running;

	while (i > 0 && before(q, s->running[i - 1])) {
		s->running[i] = s->running[i - 1];
		i--;
	}
	s->running[i] = q;
	s->n_running++;
	q->state = ST_RUNNING;
}

static void waiting_insert(rg_iter *s, iseq *q)
{
	int i = s->n_waiting;

	while (i > 0 && before(q, s->waiting[i - 1])) {
		s->waiting[i] = s->waiting[i - 1];
		i--;
	}
	s->waiting[i] = q;
	s->n_waiting++;
	q->state = ST_WAITING;
}

static void list_remove(iseq **list, int *n, iseq *q)
{
	for (int i = 0; i < *n; i++)
		if (list[i] == q) {
			memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof(iseq *));
			(*n)--;
			return;
		}
}

static iseq *find_seq(const rg_iter *s, uint64_t id)
{
	for (int i = 0; i < s->n_running; i++)
		if (s->running[i]->id == id)
			return s->running[i];
	for (int i = 0; i < s->n_waiting; i++)
		if (s->waiting[i]->id == id)
			return s->waiting[i];
	return NULL;
}

static rg_status done_push(rg_iter *s, const iseq *q, rg_iter_finish why)
{
	if (s->n_done == s->done_cap) {
		int cap = s->done_cap ? 2 * s->done_cap : 16;
		rg_iter_done *nd = realloc(s->done, (size_t)cap * sizeof(*nd));

		if (!nd)
			return rg_errorf(RG_ERR_OOM, "iter scheduler: out of memory");
		s->done = nd;
		s->done_cap = cap;
	}
	s->done[s->n_done++] = (rg_iter_done){
		.id = q->id, .reason = why, .n_generated = q->n_tokens - q->prompt_len,
		.n_preemptions = q->n_preempt, .n_cached_tokens = q->n_cached,
		.first_token_ms = q->first_ms,
	};
	s->n_finished++;
	return RG_OK;
}

/* ---- building a step ---- */

static void decision_drop(rg_iter *s, iseq *q)
{
	int i = q->dec;

	s->budget += s->dec[i].n_new;
	memmove(s->dec + i, s->dec + i + 1, (size_t)(s->n_dec - i - 1) * sizeof(decision));
	s->n_dec--;
	for (int k = i; k < s->n_dec; k++)
		s->dec[k].q->dec = k;
	q->dec = -1;
}

/* Preempt the last running sequence in the queue's order (the newest arrival of the lowest
 * priority and most served share; recompute): out of the step, blocks freed, back to waiting
 * with every token it has. A beam group goes whole and restarts: its members' blocks
 * are freed, one member goes back to waiting with the prompt alone (slot 0), the others are
 * freed; the caller's search starts again when the prompt's row comes (rg_iter_beam_next).
 * True when q was among the preempted. */
static bool preempt_newest(rg_iter *s, const iseq *q)
{
	iseq *v = s->running[s->n_running - 1];
	bool hit = false;

	if (v->n_beams >= 2) {
		const uint64_t gid = v->id;
		iseq *head = NULL;

		for (int i = s->n_running - 1; i >= 0; i--) {
			iseq *m = s->running[i];

			if (m->id != gid)
				continue;
			hit |= m == q;
			if (m->dec >= 0)
				decision_drop(s, m);
			memmove(s->running + i, s->running + i + 1,
				(size_t)(s->n_running - i - 1) * sizeof(iseq *));
			s->n_running--;
			if (!head) {
				head = m;
			} else {
				seq_free(s, head);
				head = m;
			}
		}
		v = head;
		rg_kv_remove(s->kv, kv_id(v)); /* before its slot changes */
		v->n_tokens = v->prompt_len;
		v->slot = 0;
	} else {
		s->n_running--;
		hit = v == q;
		if (v->dec >= 0)
			decision_drop(s, v);
		rg_kv_remove(s->kv, kv_id(v));
	}
	v->n_computed = 0;
	v->n_hashed = 0;
	v->n_draft = 0;
	v->n_preempt++;
	s->n_preemptions++;
	waiting_insert(s, v);
	return hit;
}

/* Take the slots of n tokens of q (the seq table evicts cached blocks as needed) and record
 * the decision. */
static bool take(rg_iter *s, iseq *q, int n)
{
	decision *d = &s->dec[s->n_dec];
	int n_copy = 0, c = rg_kv_n_tokens(s->kv, kv_id(q));

	if (rg_kv_allocate(s->kv, kv_id(q), n, NULL, &d->copy, &n_copy) != RG_OK)
		return false;
	d->q = q;
	d->n_new = n;
	d->n_draft = 0;
	d->c_before = c;
	d->has_copy = n_copy > 0;
	q->dec = s->n_dec++;
	s->budget -= n;
	return true;
}

/* Schedule up to n tokens (at least 1) of running q, preempting the newest running sequences
 * while they do not fit. Returns false when q itself was preempted. */
static bool reserve_running(rg_iter *s, iseq *q, int n, int *n_pre)
{
	for (;;) {
		int fit = rg_kv_fit(s->kv, kv_id(q), n, rg_kv_n_avail(s->kv));

		if (fit >= 1 && take(s, q, fit))
			return true;
		(*n_pre)++;
		if (preempt_newest(s, q))
			return false;
	}
}

/* Free blocks that admission leaves to the running sequences (vLLM's watermark; by default at
 * least one block per sequence running after the admission, each decode's next block): without
 * it a sequence admitted into a full pool is preempted again within a few steps, and the one it
 * displaced comes back into the same squeeze (issue 28: 119 preemptions for six requests). */
static int headroom(const rg_iter *s, int width)
{
	int n = s->n_running + width;

	if (!s->headroom_auto || s->p.watermark_blocks > n)
		return s->p.watermark_blocks;
	return n;
}

/* Prompt-scoring rows (iter.h) of a chunk of n tokens of q from position c: its positions
 * before the prompt's last. */
static int prompt_rows(const iseq *q, int c, int n)
{
	int end = c + n < q->prompt_len - 1 ? c + n : q->prompt_len - 1;

	return q->prompt_logits && end > c ? end - c : 0;
}

/* A chunk of at most n tokens of q from c, cut so that its prompt rows fit the step's rows
 * left; 0: none fit (it waits). */
static int prompt_cut(const rg_iter *s, const iseq *q, int c, int n)
{
	if (prompt_rows(q, c, n) <= s->pl_left)
		return n;
	return s->pl_left; /* then c + pl_left < prompt_len - 1: pl_left rows */
}

/* Admit the head of the waiting queue with a chunk of at most budget tokens: share its cached
 * prefix, then take slots. Only when the blocks of its whole rest (every token it has, not the
 * chunk alone: a preempted sequence comes back with what it generated) plus headroom() are
 * free, unless nothing runs. False (nothing changed) when it does not fit. */
static bool admit_head(rg_iter *s)
{
	iseq *q = s->waiting[0];
	int n_hit = 0, max_hit = (q->n_tokens - 1) / s->bs, avail, fit, n, rest;
	const int xb = q->n_src > 0 ? (q->n_src + s->bs - 1) / s->bs : 0;

	/* an encoder-decoder's source shares the step's token budget (its encoder pass runs in
	 * it); its decoder blocks depend on the source, so no prefix is shared */
	if (q->n_src > 0 && q->n_src >= s->budget)
		return false;
	if (s->cache && q->n_src == 0 && !q->prompt_logits) {
		n_hit = rg_prefix_cache_lookup(s->cache, q->tokens, q->n_tokens, max_hit,
					       s->hit_blocks, s->hit_hashes);
		if (n_hit > 0 && rg_kv_attach(s->kv, kv_id(q), s->hit_blocks, n_hit) != RG_OK)
			n_hit = 0;
	}
	q->n_computed = n_hit * s->bs;
	rest = n = q->n_tokens - q->n_computed;
	if (n > s->budget - q->n_src)
		n = s->budget - q->n_src;
	if ((n = prompt_cut(s, q, q->n_computed, n)) < 1)
		return false; /* nothing attached: no prefix lookup for it */
	avail = rg_kv_n_avail(s->kv) - xb;
	if (s->n_running > 0) {
		avail -= headroom(s, q->n_beams >= 2 ? q->n_beams : 1);
		if (rg_kv_blocks_needed(s->kv, kv_id(q), rest) > avail)
			avail = 0;
	}
	fit = avail > 0 ? rg_kv_fit(s->kv, kv_id(q), n, avail) : 0;
	if (fit < 1 || (xb > 0 && rg_kv_cross(s->kv, kv_id(q), q->n_src) != RG_OK) ||
	    !take(s, q, fit)) {
		rg_kv_remove(s->kv, kv_id(q)); /* its cross blocks too */
		q->n_computed = 0;
		return false;
	}
	s->pl_left -= prompt_rows(q, q->n_computed, fit);
	if (q->n_src > 0) {
		q->need_encode = true;
		s->budget -= q->n_src;
	}
	if (s->cache)
		rg_prefix_cache_record(s->cache, max_hit, n_hit);
	memcpy(q->hashes, s->hit_hashes, (size_t)n_hit * sizeof(uint64_t));
	q->n_hashed = n_hit;
	q->n_cached = n_hit * s->bs;
	memmove(s->waiting, s->waiting + 1, (size_t)(--s->n_waiting) * sizeof(iseq *));
	running_insert(s, q);
	s->vtime = fmax(s->vtime, q->tag);
	return true;
}

/* Entries of running that its requests may come to hold: a beam group counts its n_beams
 * (it expands from one sequence to n_beams at its first beam step), others one. */
static int running_room(const rg_iter *s)
{
	int n = 0;

	for (int i = 0; i < s->n_running; i++) {
		const iseq *q = s->running[i];

		if (q->n_beams < 2)
			n++;
		else if (i == 0 || s->running[i - 1]->id != q->id)
			n += q->n_beams; /* the group's first member (members are contiguous) */
	}
	return n;
}

static void plan_fill(rg_iter *s, rg_iter_plan *plan, int n_pre)
{
	int tok = 0, nl = 0, nc = 0, n_dec_seqs = 0, n_pf = 0, ne = 0, etok = 0;
	double pairs = 0, pf_pairs = 0, dec_ctx = 0;

	s->cu[0] = 0;
	if (s->ecu)
		s->ecu[0] = 0;
	for (int i = 0; i < s->n_dec; i++) {
		const decision *d = &s->dec[i];
		const iseq *q = d->q;
		int c = d->c_before, n = d->n_new;
		int32_t *row = s->tables + (size_t)i * s->max_blocks;

		for (int j = 0; j < n; j++) {
			s->tokens[tok + j] = q->tokens[c + j];
			s->positions[tok + j] = c + j;
		}
		/* the decision's tokens are in the table: neither read-out can fail */
		rg_kv_slots(s->kv, kv_id(q), c, n, s->slots + tok);
		rg_kv_table(s->kv, kv_id(q), row, s->max_blocks);
		tok += n;
		s->cu[i + 1] = tok;
		s->ctx[i] = c + n;
		s->ids[i] = q->id;
		s->bslot[i] = q->n_beams >= 2 ? q->slot : -1;
		if (s->xlens) {
			int32_t *xrow = s->xtables + (size_t)i * s->max_xblocks;
			int nxb = rg_kv_cross_table(s->kv, kv_id(q), xrow, s->max_xblocks, NULL);

			s->xlens[i] = q->n_src;
			if (q->need_encode && nxb > 0) {
				for (int t = 0; t < q->n_src; t++)
					s->eslots[etok + t] = xrow[t / s->bs] * s->bs + t % s->bs;
				etok += q->n_src;
				s->eseq[ne++] = i;
				s->ecu[ne] = etok;
			}
		}
		s->ndraft[i] = d->n_draft;
		if (c + n - d->n_draft == q->n_tokens) {
			/* one row, or a draft row's 1 + n_draft (each position's next token) */
			for (int j = d->n_draft; j >= 0; j--) {
				s->lrows[nl] = tok - 1 - j;
				s->lseq[nl++] = i;
			}
		}
		if (d->has_copy) {
			s->csrc[nc] = d->copy.src;
			s->cdst[nc++] = d->copy.dst;
		}
		if (n == 1 && c + 1 == q->n_tokens && c >= q->prompt_len) {
			n_dec_seqs++;
			dec_ctx += c + 1;
		} else {
			n_pf += n;
			pf_pairs += (double)n * ((double)c + (n + 1) / 2.0);
		}
		pairs += (double)n * ((double)c + (n + 1) / 2.0);
	}
	/* prompt-scoring rows, after every sampling row */
	int np = 0;

	for (int i = 0; i < s->n_dec; i++) {
		const decision *d = &s->dec[i];
		int nr = prompt_rows(d->q, d->c_before, d->n_new);

		for (int j = 0; j < nr; j++) {
			s->lrows[nl + np] = s->cu[i] + j;
			s->lseq[nl + np] = i;
			s->ppos[np++] = d->c_before + j;
		}
	}
	s->plan_tokens = tok;
	s->plan_pairs = pairs;
	s->plan_shape = (rg_step_shape){.tokens = tok, .n_decode = n_dec_seqs, .pairs = pf_pairs,
					.ctx = dec_ctx, .rows = nl + np};
	*plan = (rg_iter_plan){
		.batch = {
			.n_tokens = tok, .tokens = s->tokens, .positions = s->positions,
			.n_seq = s->n_dec, .cu_seqlens_q = s->cu, .context_lens = s->ctx,
			.max_blocks_per_seq = s->max_blocks, .block_tables = s->tables,
			.slot_mapping = s->slots, .n_logits = nl + np, .logits_rows = s->lrows,
		},
		.seq_ids = s->ids, .beam_slot = s->bslot, .logits_seq = s->lseq,
		.n_draft = s->ndraft, .n_sample = nl, .n_prompt_rows = np, .prompt_pos = s->ppos,
		.n_copies = nc,
		.copy_src = s->csrc, .copy_dst = s->cdst, .n_decode_seqs = n_dec_seqs, .n_prefill_tokens = n_pf,
		.pairs = pairs, .shape = s->plan_shape, .n_preempted = n_pre,
		.n_encode = ne, .enc_seq = s->eseq, .enc_cu = s->ecu, .enc_slots = s->eslots,
	};
	if (s->xlens) {
		plan->batch.cross_lens = s->xlens;
		plan->batch.max_cross_blocks_per_seq = s->max_xblocks;
		plan->batch.cross_block_tables = s->xtables;
	}
}

rg_status rg_iter_schedule(rg_iter *s, double now_ms, rg_iter_plan *plan)
{
	int n_pre = 0;
	(void)now_ms;

	if (s->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter scheduler: the last plan was not "
				 "reported (rg_iter_update)");
	/* drop the finished entries already returned */
	if (s->done_read > 0)
		memmove(s->done, s->done + s->done_read,
			(size_t)(s->n_done - s->done_read) * sizeof(*s->done));
	s->n_done -= s->done_read;
	s->done_read = 0;
	s->n_dec = 0;
	s->budget = s->B;
	s->pl_left = s->p.max_prompt_logits;
	/* decoding sequences not yet placed: a draft row leaves one token of budget to each */
	int n_decoding = 0;

	for (int i = 0; i < s->n_running; i++)
		n_decoding += s->running[i]->n_tokens - s->running[i]->n_computed == 1;
	/* 1. decoding sequences, oldest first; a beam group's members all or none (their rows
	 * make one beam step), contiguous in running; a sequence with a draft takes 1 + n_draft
	 * tokens (cut to the budget and the blocks it can have) */
	for (int i = 0; i < s->n_running && s->n_dec < s->S && s->budget > 0; i++) {
		iseq *q = s->running[i];
		int k = 1;

		if (q->n_tokens - q->n_computed != 1 || q->dec >= 0)
			continue;
		n_decoding--;
		if (q->n_beams >= 2) {
			while (i + k < s->n_running && s->running[i + k]->id == q->id)
				k++;
			if (s->n_dec + k > s->S || s->budget < k) {
				i += k - 1;
				continue;
			}
			for (int m = 0; m < k; m++)
				if (!reserve_running(s, s->running[i + m], 1, &n_pre))
					break; /* the group itself was preempted (restarted) */
			if (i < s->n_running && s->running[i] == q)
				i += k - 1;
			else
				i--; /* q's group left running: the entry at i is another's */
			continue;
		}
		if (q->n_draft > 0) {
			int want = 1 + q->n_draft, room = s->budget - n_decoding;

			if (want > room)
				want = room > 1 ? room : 1;
			if (reserve_running(s, q, want, &n_pre))
				s->dec[q->dec].n_draft = s->dec[q->dec].n_new - 1;
			continue;
		}
		reserve_running(s, q, 1, &n_pre);
	}
	for (int i = 0; i < s->n_running; i++)
		s->running[i]->n_draft = 0; /* a draft lives for one schedule */
	/* 2. prefilling sequences, oldest first: the rest of their prompt, cut to the budget */
	for (int i = 0; i < s->n_running && s->n_dec < s->S && s->budget > 0; i++) {
		iseq *q = s->running[i];
		int rem = q->n_tokens - q->n_computed;

		int n = prompt_cut(s, q, q->n_computed, rem < s->budget ? rem : s->budget);

		if (rem > 1 && q->dec < 0 && n > 0 && reserve_running(s, q, n, &n_pre))
			s->pl_left -= prompt_rows(q, q->n_computed, s->dec[q->dec].n_new);
	}
	/* 3. waiting requests in order, none in a step that preempted; a beam group takes room
	 * for all its beams */
	while (n_pre == 0 && s->n_waiting > 0 && s->n_dec < s->S && s->budget > 0 &&
	       running_room(s) + (s->waiting[0]->n_beams >= 2 ? s->waiting[0]->n_beams : 1) <= s->S)
		if (!admit_head(s))
			break;
	plan_fill(s, plan, n_pre);
	s->pending = s->n_dec > 0;
	return RG_OK;
}

/* ---- after a step ---- */

static void register_blocks(rg_iter *s, iseq *q)
{
	int full = q->n_computed / s->bs;

	if (full <= q->n_hashed)
		return;
	rg_kv_table(s->kv, kv_id(q), s->reg_blocks, s->max_blocks);
	for (int b = q->n_hashed; b < full; b++) {
		uint64_t parent = b ? q->hashes[b - 1] : RG_PREFIX_ROOT;

		if (rg_prefix_cache_insert(s->cache, parent, q->tokens + (size_t)b * s->bs,
					   s->reg_blocks[b], &q->hashes[b]) != RG_OK)
			break;
		q->n_hashed = b + 1;
	}
}

/* The members of beam group id in running (contiguous, slot order): *first, count returned. */
static int group_span(const rg_iter *s, uint64_t id, int *first)
{
	int a = -1, k = 0;

	for (int i = 0; i < s->n_running; i++)
		if (s->running[i]->id == id) {
			if (a < 0)
				a = i;
			k++;
		}
	*first = a;
	return k;
}

static rg_status finish(rg_iter *s, iseq *q, rg_iter_finish why)
{
	rg_status st;

	if (q->n_beams >= 2 && q->state == ST_RUNNING) {
		/* the whole group: one entry, every member freed */
		int a, k = group_span(s, q->id, &a), gen = 0;

		for (int m = 0; m < k; m++) {
			const iseq *x = s->running[a + m];

			if (x->n_tokens - x->prompt_len > gen)
				gen = x->n_tokens - x->prompt_len;
		}
		st = done_push(s, q, why);
		if (st == RG_OK)
			s->done[s->n_done - 1].n_generated = gen;
		for (int m = 0; m < k; m++)
			seq_free(s, s->running[a + m]);
		memmove(s->running + a, s->running + a + k,
			(size_t)(s->n_running - a - k) * sizeof(iseq *));
		s->n_running -= k;
		return st;
	}
	st = done_push(s, q, why);
	if (q->state == ST_RUNNING)
		list_remove(s->running, &s->n_running, q);
	else
		list_remove(s->waiting, &s->n_waiting, q);
	seq_free(s, q);
	return st;
}

static beam_next *bn_find(rg_iter *s, uint64_t id)
{
	for (int i = 0; i < s->n_bn; i++)
		if (s->bn[i].id == id)
			return &s->bn[i];
	return NULL;
}

/* A copy of member o as a new member (tokens, hashes; its block table comes from
 * rg_kv_reseat). NULL on OOM. */
static iseq *member_clone(rg_iter *s, const iseq *o)
{
	iseq *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	*c = *o;
	c->tokens = malloc((size_t)(o->prompt_len + o->max_new) * sizeof(int32_t));
	c->hashes = malloc((size_t)s->max_blocks * sizeof(uint64_t));
	if (!c->tokens || !c->hashes) {
		free(c->tokens);
		free(c->hashes);
		free(c);
		return NULL;
	}
	memcpy(c->tokens, o->tokens, (size_t)o->n_tokens * sizeof(int32_t));
	memcpy(c->hashes, o->hashes, (size_t)o->n_hashed * sizeof(uint64_t));
	return c;
}

/* Re-seat beam group b->id after its step: new member j continues the member of slot
 * b->parent[j] with token b->token[j]. The block tables are rg_kv_reseat's (a parent's last
 * child takes its table over, the others fork it; childless members' tables are freed); here
 * the members' tokens follow the same rule (the last child takes the member over, the others
 * clone it). The members stay contiguous at the group's place in running, in slot order.
 * RG_ERR_INVALID_INPUT for a parent that is no member, RG_ERR_OOM (the group is then left as it
 * was). */
static rg_status group_reseat(rg_iter *s, const beam_next *b)
{
	int a, k = group_span(s, b->id, &a), n_new = 0;
	iseq *olds[RG_ITER_MAX_BEAMS], *news[RG_ITER_MAX_BEAMS] = {0};
	int children[RG_ITER_MAX_BEAMS] = {0}, src[RG_ITER_MAX_BEAMS];
	int32_t kv_parent[RG_ITER_MAX_BEAMS];
	uint64_t kv_members[RG_ITER_MAX_BEAMS];
	rg_status st;

	for (int m = 0; m < k; m++)
		olds[m] = s->running[a + m];
	for (int j = 0; j < b->n; j++) {
		src[j] = -1;
		if (b->parent[j] < 0)
			continue;
		for (int m = 0; m < k; m++)
			if (olds[m]->slot == b->parent[j])
				src[j] = m;
		/* the prompt's step: every beam holds the prompt, whatever slot it names */
		if (k == 1 && olds[0]->n_tokens == olds[0]->prompt_len)
			src[j] = 0;
		if (src[j] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: request %llu has no beam "
					 "%d", (unsigned long long)b->id, b->parent[j]);
		if (olds[src[j]]->n_tokens >= olds[src[j]]->prompt_len + olds[src[j]]->max_new)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: request %llu beam %d "
					 "is at its max_tokens", (unsigned long long)b->id,
					 b->parent[j]);
		children[src[j]]++;
	}
	/* clones first (the parent's tokens as they are), then the tables, then the takeovers */
	for (int j = 0; j < b->n; j++) {
		if (src[j] >= 0 && --children[src[j]] > 0 &&
		    !(news[j] = member_clone(s, olds[src[j]]))) {
			st = rg_errorf(RG_ERR_OOM, "iter beam: out of memory");
			goto out_free_clones;
		}
	}
	/* the seq table's members are the group's ids by slot (old slots are < n_beams) */
	for (int j = 0; j < b->n; j++) {
		kv_members[j] = kv_key(olds[0]->order, j);
		kv_parent[j] = src[j] >= 0 ? olds[src[j]]->slot : -1;
	}
	if ((st = rg_kv_reseat(s->kv, kv_members, kv_parent, b->n)) != RG_OK)
		goto out_free_clones;
	for (int j = 0; j < b->n; j++)
		if (src[j] >= 0 && !news[j]) {
			news[j] = olds[src[j]];
			olds[src[j]] = NULL;
		}
	for (int m = 0; m < k; m++)
		seq_destroy(olds[m]); /* its table went with the re-seat */
	/* the running list: the group's k entries replaced by its live new members */
	memmove(s->running + a, s->running + a + k, (size_t)(s->n_running - a - k) * sizeof(iseq *));
	s->n_running -= k;
	for (int j = 0; j < b->n; j++)
		n_new += news[j] != NULL;
	memmove(s->running + a + n_new, s->running + a, (size_t)(s->n_running - a) * sizeof(iseq *));
	s->n_running += n_new;
	for (int j = 0, w = a; j < b->n; j++) {
		iseq *q = news[j];

		if (!q)
			continue;
		q->slot = j;
		q->dec = -1;
		q->tokens[q->n_tokens++] = b->token[j];
		s->running[w++] = q;
	}
	return RG_OK;
out_free_clones:
	for (int j = 0; j < b->n; j++)
		seq_destroy(news[j]);
	return st;
}

rg_status rg_iter_beam_next(rg_iter *s, uint64_t id, const int32_t *parent,
			    const int32_t *token, int n)
{
	beam_next *b;
	const iseq *q = NULL;
	int rows = 0;

	if (!s->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: no plan pending");
	for (int i = 0; i < s->n_dec; i++)
		if (s->dec[i].q->id == id) {
			q = s->dec[i].q;
			rows += s->dec[i].c_before + s->dec[i].n_new == q->n_tokens;
		}
	if (!q || q->n_beams < 2 || rows == 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: request %llu is no beam group "
				 "with rows in the pending plan", (unsigned long long)id);
	if (n != q->n_beams || !parent || !token)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: request %llu has %d beams, not "
				 "%d", (unsigned long long)id, q->n_beams, n);
	for (int j = 0; j < n; j++)
		if (parent[j] >= 0 && token[j] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: token %d of beam %d",
					 token[j], j);
	if (!(b = bn_find(s, id))) {
		if (s->n_bn >= s->S)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: too many groups");
		b = &s->bn[s->n_bn++];
		b->id = id;
	}
	b->n = n;
	memcpy(b->parent, parent, (size_t)n * sizeof(int32_t));
	memcpy(b->token, token, (size_t)n * sizeof(int32_t));
	b->stepped = b->stop = b->aborted = false;
	return RG_OK;
}

/* The pending beam_next of group id, or a fresh entry without one (n = 0). NULL: no room. */
static beam_next *bn_get(rg_iter *s, uint64_t id)
{
	beam_next *b = bn_find(s, id);

	if (b || s->n_bn >= s->S)
		return b;
	b = &s->bn[s->n_bn++];
	b->id = id;
	b->n = 0;
	b->stepped = b->stop = b->aborted = false;
	return b;
}

/* rg_iter_update's end of one sequence's row: q finishes with why, or with ABORT when it was
 * aborted meanwhile; nothing when why is 0 and it was not. The first error goes to *st. */
static void finish_unless_live(rg_iter *s, iseq *q, rg_iter_finish why, rg_status *st)
{
	rg_status st2;

	if (q->aborted)
		why = RG_ITER_FINISH_ABORT;
	if (!why)
		return;
	st2 = finish(s, q, why);
	if (*st == RG_OK)
		*st = st2;
}

rg_status rg_iter_update(rg_iter *s, const int32_t *sampled, const bool *stop, double now_ms,
			 double step_ms)
{
	int nl = 0;
	rg_status st = RG_OK;

	if (!s->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter scheduler: no plan to report");
	for (int i = 0; i < s->n_dec; i++) {
		const iseq *q = s->dec[i].q;

		if (s->dec[i].c_before + s->dec[i].n_new - s->dec[i].n_draft != q->n_tokens)
			continue;
		for (int j = 0; j < s->dec[i].n_draft; j++)
			if (sampled[nl++] < 0)
				return rg_errorf(RG_ERR_INVALID_INPUT, "iter update: sampled token "
						 "%d of row %d is negative", sampled[nl - 1],
						 nl - 1);
		if (q->n_beams >= 2) {
			const beam_next *b = bn_find(s, q->id);

			if (!(stop && stop[nl]) && !q->aborted && (!b || b->n == 0))
				return rg_errorf(RG_ERR_INVALID_INPUT, "iter update: beam group "
						 "%llu has no next beams (rg_iter_beam_next) and "
						 "no stop", (unsigned long long)q->id);
			nl++;
		} else if (sampled[nl++] < 0) {
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter update: sampled token %d of "
					 "row %d is negative", sampled[nl - 1], nl - 1);
		}
	}
	nl = 0;
	for (int i = 0; i < s->n_dec; i++) {
		decision *d = &s->dec[i];
		iseq *q = d->q;
		bool wants = d->c_before + d->n_new - d->n_draft == q->n_tokens;
		rg_iter_finish why = 0;

		q->dec = -1;
		if (d->n_draft > 0) {
			/* a draft row: verification, the rule the caller applied (iter.h) */
			int m = d->n_draft, a = 0;

			for (int j = 0; j <= m; j++) {
				const int32_t draft = j < m ? q->tokens[q->n_tokens] : -1;

				q->tokens[q->n_tokens++] = sampled[nl + j];
				if (stop && stop[nl + j]) {
					why = RG_ITER_FINISH_STOP;
					break;
				}
				if (q->n_tokens - q->prompt_len >= q->max_new) {
					why = RG_ITER_FINISH_LENGTH;
					break;
				}
				if (j == m || sampled[nl + j] != draft)
					break;
				a++;
			}
			s->n_drafted += m;
			s->n_draft_accepted += a;
			if (q->first_ms < 0)
				q->first_ms = now_ms;
			nl += m + 1;
			/* the KV of the last accepted token and the a drafts accepted stays; the
			 * rejected positions' go (their blocks back to the pool) */
			q->n_computed = d->c_before + 1 + a;
			if (q->n_computed < d->c_before + d->n_new)
				rg_kv_truncate(s->kv, kv_id(q), q->n_computed);
			if (s->cache && q->n_src == 0 && !why)
				register_blocks(s, q);
			d->q = NULL;
			finish_unless_live(s, q, why, &st);
			continue;
		}
		q->n_computed += d->n_new;
		q->need_encode = false;
		if (s->cache && q->n_src == 0)
			register_blocks(s, q);
		d->q = NULL;
		if (q->n_beams >= 2) {
			/* the group as a whole, after this loop */
			beam_next *b = bn_get(s, q->id);

			if (wants) {
				if (q->first_ms < 0)
					q->first_ms = now_ms;
				if (b) {
					b->stepped = true;
					b->stop |= stop && stop[nl];
				}
				nl++;
			}
			if (b)
				b->aborted |= q->aborted;
			continue;
		}
		if (wants) {
			q->tokens[q->n_tokens++] = sampled[nl];
			if (q->first_ms < 0)
				q->first_ms = now_ms;
			if (stop && stop[nl])
				why = RG_ITER_FINISH_STOP;
			else if (q->n_tokens - q->prompt_len >= q->max_new)
				why = RG_ITER_FINISH_LENGTH;
			nl++;
		}
		finish_unless_live(s, q, why, &st);
	}
	for (int g = 0; g < s->n_bn; g++) {
		beam_next *b = &s->bn[g];
		int a, k = group_span(s, b->id, &a);
		rg_iter_finish why = 0;
		rg_status st2 = RG_OK;

		if (k == 0)
			continue;
		if (b->aborted)
			why = RG_ITER_FINISH_ABORT;
		else if (b->stop)
			why = RG_ITER_FINISH_STOP;
		else if (b->stepped && (st2 = group_reseat(s, b)) == RG_OK) {
			const iseq *h;

			k = group_span(s, b->id, &a);
			h = k > 0 ? s->running[a] : NULL;
			if (!h)
				st2 = rg_errorf(RG_ERR_INVALID_INPUT, "iter beam: request %llu has no "
						"live beam left", (unsigned long long)b->id);
			else if (h->n_tokens - h->prompt_len >= h->max_new)
				why = RG_ITER_FINISH_LENGTH;
		}
		if (st2 != RG_OK) {
			/* a bad reassignment ends the group (its blocks back), as an abort */
			if (st == RG_OK)
				st = st2;
			why = RG_ITER_FINISH_ABORT;
			if ((k = group_span(s, b->id, &a)) == 0)
				continue;
		}
		if (why && (st2 = finish(s, s->running[a], why)) != RG_OK && st == RG_OK)
			st = st2;
	}
	s->n_bn = 0;
	if (isfinite(step_ms) && step_ms >= 0 && s->plan_tokens > 0)
		rg_iter_cost_observe(s, &s->plan_shape, step_ms);
	s->n_dec = 0;
	s->pending = false;
	s->n_steps++;
	return st;
}

const rg_iter_done *rg_iter_finished(rg_iter *s, int *n)
{
	const rg_iter_done *d = s->done + s->done_read;

	*n = s->n_done - s->done_read;
	s->done_read = s->n_done;
	return d;
}

rg_status rg_iter_abort(rg_iter *s, uint64_t id)
{
	iseq *q = find_seq(s, id);

	if (!q)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter abort: no request %llu",
				 (unsigned long long)id);
	if (q->n_beams >= 2 && q->state == ST_RUNNING && s->pending) {
		int a, k = group_span(s, id, &a);
		bool in_plan = false;

		for (int m = 0; m < k; m++)
			in_plan |= s->running[a + m]->dec >= 0;
		if (in_plan) {
			for (int m = 0; m < k; m++)
				s->running[a + m]->aborted = true;
			return RG_OK;
		}
	}
	if (s->pending && q->dec >= 0) {
		q->aborted = true;
		return RG_OK;
	}
	return finish(s, q, RG_ITER_FINISH_ABORT);
}

rg_status rg_iter_set_draft(rg_iter *s, uint64_t id, const int32_t *draft, int n)
{
	iseq *q = find_seq(s, id);
	int room;

	if (s->pending)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter draft: a plan is pending");
	if (!q || n < 0 || (n > 0 && !draft))
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter draft: no request %llu, or %d tokens",
				 (unsigned long long)id, n);
	q->n_draft = 0;
	if (q->state != ST_RUNNING || q->n_beams >= 2 || q->n_src > 0 ||
	    q->n_tokens - q->n_computed != 1)
		return RG_OK; /* not decoding one sequence: it runs without a draft */
	room = q->max_new - (q->n_tokens - q->prompt_len) - 1;
	if (n > room)
		n = room;
	if (n > s->p.max_draft)
		n = s->p.max_draft;
	for (int j = 0; j < n; j++)
		if (draft[j] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter draft: token %d", draft[j]);
	if (n > 0)
		memcpy(q->tokens + q->n_tokens, draft, (size_t)n * sizeof(int32_t));
	q->n_draft = n > 0 ? n : 0;
	return RG_OK;
}

const int32_t *rg_iter_tokens(const rg_iter *s, uint64_t id, int *n)
{
	const iseq *q = find_seq(s, id);

	*n = q ? q->n_tokens : 0;
	return q ? q->tokens : NULL;
}

void rg_iter_stats_get(const rg_iter *s, rg_iter_stats *out)
{
	*out = (rg_iter_stats){
		.n_running = s->n_running, .n_waiting = s->n_waiting, .n_steps = s->n_steps,
		.n_admitted = s->n_admitted, .n_refused = s->n_refused,
		.n_preemptions = s->n_preemptions, .n_finished = s->n_finished,
		.blocks_used = rg_kv_pool_n_used(s->pool), .blocks_free = rg_kv_pool_n_free(s->pool),
		.n_drafted = s->n_drafted, .n_draft_accepted = s->n_draft_accepted,
	};
	if (s->cache)
		rg_prefix_cache_stats_get(s->cache, &out->prefix);
}

const rg_prefix_cache *rg_iter_prefix_cache(const rg_iter *s) { return s->cache; }

/* ---- deadline-aware admission ---- */

typedef struct sim_ent {
	int rem_in;          /* tokens to compute before its next output token; 0: finished */
	double ctx;          /* tokens cached */
	int rem_out;         /* output tokens still to come */
	bool running;
	double deadline_abs; /* absolute TTFT deadline; 0 none */
	double tpot;         /* TPOT target; 0 none */
	double first_ms;     /* first token time, -1 none yet */
	double last_ms;
	int n_out;           /* output tokens, the past ones included */
	int n;               /* tokens in the current simulated step */
} sim_ent;

static sim_ent sim_from_seq(const iseq *q)
{
	return (sim_ent){
		.rem_in = q->n_tokens - q->n_computed, .ctx = q->n_computed,
		.rem_out = q->max_new - (q->n_tokens - q->prompt_len), .running = q->state == ST_RUNNING,
		.deadline_abs = q->deadline_ms > 0 ? q->arrival_ms + q->deadline_ms : 0,
		.tpot = q->tpot_ms, .first_ms = q->first_ms, .last_ms = q->first_ms,
		.n_out = q->n_tokens - q->prompt_len,
	};
}

static bool sim_watched(const sim_ent *e)
{
	return (e->deadline_abs > 0 && e->first_ms < 0) || (e->tpot > 0 && e->rem_out > 0);
}

/* What a simulation tracks beside its entries: (in) thr, the running count to watch for (< 0:
 * none); (out) t_thr, the end of the first step after which at most thr entries run (the
 * simulation's end when never), and t_end, the last step's end. */
typedef struct sim_out {
	int thr;
	int stop_i;       /* (in) stop once entry stop_i has no first token by stop_at; -1: none */
	double stop_at;
	double t_thr, t_end;
} sim_out;

/* Run the scheduler's passes on e (n entries: running in the queue's order, then waiting in
 * order; act (n) scratch) from now with model m until every target is resolved or
 * max_sim_steps: each step gives its budget of max_num_batched_tokens and max_num_seqs to the
 * decodes, then the prefill chunks of the running entries, then admits waiting ones in order,
 * and lasts what m says of its shape (tokens, prefill pairs, decode context, rows). O(steps x
 * running): waiting entries are met once, when admitted. */
static void sim_run(const rg_iter *s, const rg_step_cost *m, sim_ent *e, int n, int *act,
		    double now, sim_out *o)
{
	double t = now;
	int na = 0, next = 0, left = 0;

	for (int i = 0; i < n; i++) {
		if (e[i].running)
			act[na++] = i;
		left += sim_watched(&e[i]);
	}
	next = na; /* the running entries come first */
	o->t_thr = -1;
	if (o->thr >= 0 && na <= o->thr)
		o->t_thr = now;
	for (int step = 0; step < s->p.max_sim_steps && left > 0; step++) {
		int budget = s->B, nseq = 0, k = 0;

		if (o->stop_i >= 0 && e[o->stop_i].first_ms < 0 && t > o->stop_at)
			break;
		rg_step_shape x = {0};

		for (int a = 0; a < na; a++)
			e[act[a]].n = 0;
		for (int a = 0; a < na && nseq < s->S && budget > 0; a++)
			if (e[act[a]].rem_in == 1) {
				e[act[a]].n = 1;
				budget--;
				nseq++;
			}
		for (int a = 0; a < na && nseq < s->S && budget > 0; a++) {
			sim_ent *y = &e[act[a]];

			if (y->rem_in > 1) {
				y->n = y->rem_in < budget ? y->rem_in : budget;
				budget -= y->n;
				nseq++;
			}
		}
		for (; next < n && nseq < s->S && budget > 0 && na < s->S; next++) {
			sim_ent *y = &e[next];

			y->n = y->rem_in < budget ? y->rem_in : budget;
			y->running = true;
			act[na++] = next;
			budget -= y->n;
			nseq++;
		}
		if (nseq == 0)
			break;
		for (int a = 0; a < na; a++) {
			const sim_ent *y = &e[act[a]];

			if (!y->n)
				continue;
			x.tokens += y->n;
			if (y->n == 1 && y->rem_in == 1 && y->n_out > 0) {
				x.n_decode++;
				x.ctx += y->ctx + 1;
			} else {
				x.pairs += y->n * (y->ctx + (y->n + 1) / 2.0);
			}
			x.rows += y->n == y->rem_in;
		}
		t += rg_step_cost_ms(m, &x);
		for (int a = 0; a < na; a++) {
			sim_ent *y = &e[act[a]];
			bool was = sim_watched(y), gone = false;

			if (y->n) {
				y->ctx += y->n;
				y->rem_in -= y->n;
				if (y->rem_in == 0) {
					if (y->first_ms < 0)
						y->first_ms = t;
					y->last_ms = t;
					y->n_out++;
					if (--y->rem_out > 0) {
						y->rem_in = 1;
					} else {
						y->running = false;
						gone = true;
					}
				}
				if (was && !sim_watched(y))
					left--;
			}
			if (!gone)
				act[k++] = act[a];
		}
		na = k;
		if (o->t_thr < 0 && o->thr >= 0 && na <= o->thr)
			o->t_thr = t;
	}
	o->t_end = t;
	if (o->t_thr < 0)
		o->t_thr = t;
}

/* Whether e misses a target after the simulation (slack applied to what lies ahead). */
static bool sim_misses(const rg_iter *s, const sim_ent *e, double now)
{
	double k = s->p.deadline_slack;

	if (e->deadline_abs > 0 &&
	    (e->first_ms < 0 || (e->first_ms >= now && now + (e->first_ms - now) * k > e->deadline_abs)))
		return true;
	if (e->tpot > 0) {
		if (e->rem_out > 0)
			return true;
		if (e->n_out >= 2 && k * (e->last_ms - e->first_ms) / (e->n_out - 1) > e->tpot)
			return true;
	}
	return false;
}

/* Simulate the live requests plus (when cand) the candidate c at its place in the waiting
 * order. e: (n_running + n_waiting + 1) scratch; returns the candidate's index (or -1) and the
 * entries in *n. */
static int sim_build(const rg_iter *s, const iseq *c, const sim_ent *ce, sim_ent *e, int *n)
{
	int k = 0, ci = -1;

	for (int i = 0; i < s->n_running; i++)
		e[k++] = sim_from_seq(s->running[i]);
	for (int i = 0; i <= s->n_waiting; i++) {
		if (c && ci < 0 && (i == s->n_waiting || before(c, s->waiting[i]))) {
			ci = k;
			e[k++] = *ce;
		}
		if (i < s->n_waiting)
			e[k++] = sim_from_seq(s->waiting[i]);
	}
	*n = k;
	return ci;
}

/* The most decode rows a step may have for candidate c to meet its TPOT target: the largest k
 * with slack x (a decode step of k rows at c's mean context) <= tpot_ms; 0 when not even one. */
static int tpot_rows(const rg_iter *s, const rg_step_cost *m, const iseq *c)
{
	double ctx = c->prompt_len + c->max_new / 2.0;
	int k = 0;

	while (k < s->S) {
		rg_step_shape x = {.tokens = k + 1, .n_decode = k + 1, .ctx = (k + 1) * (ctx + 1),
				   .rows = k + 1};

		if (s->p.deadline_slack * rg_step_cost_ms(m, &x) > c->tpot_ms)
			break;
		k++;
	}
	return k;
}

/* The admission decision for candidate c (not yet queued; c->order and c->tag set): simulate
 * the steps from now with c at its place in the queue (e1), and when something misses, without
 * it (e0). Refused (RG_ERR_BUSY) when c would miss a target, or would make an entry miss that
 * meets its targets without c; Retry-After from the queue: for TTFT, the time by which the
 * estimate overshoots the deadline (what the queue ahead must drain first); for TPOT, when the
 * simulated batch without c shrinks to the rows at which c's TPOT is met; for another's target,
 * when that one has its first token (or the simulation ends) without c. */
static rg_status admit_check(rg_iter *s, const iseq *c, double now, rg_iter_admission *adm)
{
	rg_step_cost m;
	sim_ent ce, *e1 = NULL, *e0 = NULL;
	int *act = NULL, n1, n0, ci, n_hit = 0, cap = s->n_running + s->n_waiting + 1;
	bool need = c->deadline_ms > 0 || c->tpot_ms > 0, miss = false;
	const double k = s->p.deadline_slack;
	sim_out o1 = {.thr = -1, .stop_i = -1}, o0 = {.thr = -1, .stop_i = -1};
	rg_status st = RG_OK;

	rg_iter_cost_model(s, &m);
	for (int i = 0; i < s->n_running && !need; i++)
		need = s->running[i]->deadline_ms > 0 || s->running[i]->tpot_ms > 0;
	for (int i = 0; i < s->n_waiting && !need; i++)
		need = s->waiting[i]->deadline_ms > 0 || s->waiting[i]->tpot_ms > 0;
	if (!need || rg_step_cost_zero(&m))
		return RG_OK;
	if (s->cache)
		n_hit = rg_prefix_cache_lookup(s->cache, c->tokens, c->n_tokens,
					       (c->n_tokens - 1) / s->bs, s->hit_blocks, NULL);
	ce = sim_from_seq(c);
	ce.rem_in -= n_hit * s->bs;
	ce.ctx = n_hit * s->bs;
	e1 = malloc((size_t)cap * sizeof(sim_ent));
	e0 = malloc((size_t)cap * sizeof(sim_ent));
	act = malloc((size_t)cap * sizeof(int));
	if (!e1 || !e0 || !act) {
		st = rg_errorf(RG_ERR_OOM, "iter admission: out of memory");
		goto out_free_sims;
	}
	ci = sim_build(s, c, &ce, e1, &n1);
	if (c->deadline_ms > 0) {
		/* no first token by 16 times its deadline's horizon: missed by far; stop there
		 * (a request behind thousands would simulate them all) */
		o1.stop_i = ci;
		o1.stop_at = now + 16 * fmax(c->arrival_ms + c->deadline_ms - now, 1) / k;
	}
	sim_run(s, &m, e1, n1, act, now, &o1);
	if (e1[ci].first_ms >= 0)
		adm->est_ttft_ms = e1[ci].first_ms - c->arrival_ms;
	else if (o1.stop_i >= 0)
		adm->est_ttft_ms = o1.t_end - c->arrival_ms; /* stopped: a lower bound */
	if (e1[ci].n_out >= 2)
		adm->est_tpot_ms = (e1[ci].last_ms - e1[ci].first_ms) / (e1[ci].n_out - 1);
	if (sim_misses(s, &e1[ci], now)) {
		bool ttft = c->deadline_ms > 0 && (e1[ci].first_ms < 0 ||
			     now - c->arrival_ms + k * (e1[ci].first_ms - now) > c->deadline_ms);

		/* alone on an idle engine? */
		e0[0] = ce;
		e0[0].running = false;
		sim_run(s, &m, e0, 1, act, now, &o0);
		if (sim_misses(s, &e0[0], now)) {
			adm->retry_after_ms = -1;
		} else if (ttft) {
			/* past the horizon: at least the overshoot there */
			double first = e1[ci].first_ms >= 0 ? e1[ci].first_ms : o1.t_end;

			adm->retry_after_ms = fmax(1, now - c->arrival_ms + k * (first - now) -
						      c->deadline_ms);
		} else if (!ttft && c->tpot_ms > 0) {
			sim_build(s, NULL, NULL, e0, &n0);
			o0 = (sim_out){.thr = tpot_rows(s, &m, c) - 1, .stop_i = -1};
			if (o0.thr < 0)
				o0.thr = 0;
			sim_run(s, &m, e0, n0, act, now, &o0);
			adm->retry_after_ms = fmax(1, o0.t_thr - now);
		} else {
			adm->retry_after_ms = fmax(1, o1.t_end - now);
		}
		st = rg_errorf(RG_ERR_BUSY, "request %llu cannot meet its %s target (estimated TTFT "
			       "%.1f ms of %.1f, TPOT %.2f ms of %.2f, slack %.2f)",
			       (unsigned long long)c->id, ttft ? "TTFT" : "TPOT",
			       adm->est_ttft_ms, c->deadline_ms, adm->est_tpot_ms, c->tpot_ms, k);
		goto out_free_sims;
	}
	for (int i = 0; i < n1 && !miss; i++)
		miss = i != ci && sim_misses(s, &e1[i], now);
	if (miss) {
		/* only a request that would meet its targets without the candidate counts */
		sim_build(s, NULL, NULL, e0, &n0);
		sim_run(s, &m, e0, n0, act, now, &o0);
		for (int i = 0, j = 0; i < n1; i++) {
			if (i == ci)
				continue;
			if (sim_misses(s, &e1[i], now) && !sim_misses(s, &e0[j], now)) {
				double when = e1[i].first_ms >= 0 && e1[i].deadline_abs > 0 &&
					      e0[j].first_ms >= 0 ? e0[j].first_ms : o0.t_end;

				adm->refused_for_others = true;
				adm->retry_after_ms = fmax(1, when - now);
				st = rg_errorf(RG_ERR_BUSY, "request %llu would make an admitted "
					       "request miss its target", (unsigned long long)c->id);
				goto out_free_sims;
			}
			j++;
		}
	}
out_free_sims:
	free(e1);
	free(e0);
	free(act);
	return st;
}

rg_status rg_iter_add(rg_iter *s, const rg_iter_request *r, double now_ms, rg_iter_admission *adm)
{
	rg_iter_admission local;
	iseq *q;
	rg_status st;
	int max_new;

	if (!adm)
		adm = &local;
	/* refused before the queue is asked: never admissible (-1) */
	*adm = (rg_iter_admission){.retry_after_ms = -1};
	if (!r || !r->prompt || r->prompt_len < 1 || r->max_tokens < 1 ||
	    !isfinite(r->arrival_ms) || !(r->deadline_ms >= 0) || !(r->tpot_ms >= 0) ||
	    !isfinite(r->deadline_ms) || !isfinite(r->tpot_ms))
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter add: bad request (prompt, prompt_len, "
				 "max_tokens >= 1, finite times and targets >= 0)");
	for (int i = 0; i < r->prompt_len; i++)
		if (r->prompt[i] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "iter add: prompt[%d] = %d", i,
					 r->prompt[i]);
	if (r->prompt_len >= s->p.max_context)
		return rg_errorf(RG_ERR_TOO_LONG, "iter add: prompt of %d tokens, max_context %d",
				 r->prompt_len, s->p.max_context);
	if (r->n_src < 0 || r->n_src > s->p.max_source || (s->p.max_source > 0 && r->n_src < 1))
		return rg_errorf(RG_ERR_TOO_LONG, "iter add: a source of %d tokens (max_source %d; "
				 "an encoder-decoder's request needs one of >= 1)", r->n_src,
				 s->p.max_source);
	if (r->n_src >= s->B)
		return rg_errorf(RG_ERR_TOO_LONG, "iter add: a source of %d tokens does not fit a "
				 "step of max_num_batched_tokens %d with its decoder's first token",
				 r->n_src, s->B);
	if (r->prompt_logits && (s->p.max_prompt_logits < 1 || r->n_src > 0))
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter add: prompt_logits needs "
				 "max_prompt_logits >= 1 (it is %d) and a decoder-only request",
				 s->p.max_prompt_logits);
	if (find_seq(s, r->id))
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter add: request %llu already present",
				 (unsigned long long)r->id);
	if (r->n_beams < 0 || r->n_beams > RG_ITER_MAX_BEAMS || r->n_beams > s->S ||
	    r->n_beams > s->B)
		return rg_errorf(RG_ERR_INVALID_INPUT, "iter add: n_beams %d outside [0, %d] (and "
				 "max_num_seqs %d, max_num_batched_tokens %d)", r->n_beams,
				 RG_ITER_MAX_BEAMS, s->S, s->B);
	if (r->n_beams >= 2) {
		int ctx = r->prompt_len + (r->max_tokens < s->p.max_context - r->prompt_len
					   ? r->max_tokens : s->p.max_context - r->prompt_len);
		long long need = (long long)r->n_beams * ((ctx + s->bs - 1) / s->bs + 1);

		if (need > rg_kv_pool_n_blocks(s->pool))
			return rg_errorf(RG_ERR_TOO_LONG, "iter add: %d beams of up to %d tokens need "
					 "%lld KV blocks; the pool has %d", r->n_beams, ctx, need,
					 rg_kv_pool_n_blocks(s->pool));
	}
	adm->retry_after_ms = 0;
	if (s->n_waiting >= s->p.max_waiting) {
		/* the time to prefill the waiting queue's head, one request's worth beyond the
		 * limit: that many full chunks */
		rg_step_cost m;
		rg_step_shape full = {.tokens = s->B, .pairs = s->B * (s->B + 1) / 2.0, .rows = 1};
		long long rem = 0;

		rg_iter_cost_model(s, &m);
		for (int i = 0; i < s->n_waiting - s->p.max_waiting + 1; i++)
			rem += s->waiting[i]->n_tokens;
		adm->retry_after_ms = fmax(1, ceil((double)rem / s->B) * rg_step_cost_ms(&m, &full));
		s->n_refused++;
		return rg_errorf(RG_ERR_BUSY, "iter add: %d requests waiting (max_waiting)",
				 s->n_waiting);
	}
	max_new = s->p.max_context - r->prompt_len;
	if (r->max_tokens < max_new)
		max_new = r->max_tokens;
	q = calloc(1, sizeof(*q));
	if (!q)
		return rg_errorf(RG_ERR_OOM, "iter add: out of memory");
	q->tokens = malloc((size_t)(r->prompt_len + max_new) * sizeof(int32_t));
	q->hashes = malloc((size_t)s->max_blocks * sizeof(uint64_t));
	if (!q->tokens || !q->hashes) {
		st = rg_errorf(RG_ERR_OOM, "iter add: out of memory");
		goto out_free_seq;
	}
	memcpy(q->tokens, r->prompt, (size_t)r->prompt_len * sizeof(int32_t));
	q->id = r->id;
	q->priority = r->priority;
	q->prompt_len = q->n_tokens = r->prompt_len;
	q->max_new = max_new;
	q->arrival_ms = r->arrival_ms;
	q->deadline_ms = r->deadline_ms;
	q->tpot_ms = r->tpot_ms;
	q->order = s->next_order;
	q->fair_key = r->fair_key;
	q->fair_own = r->fair_own;
	q->tag = share_tag(s, r->fair_key, r->fair_own);
	q->cost = (double)r->prompt_len + max_new; /* its service: every token it will hold */
	q->n_beams = r->n_beams >= 2 ? r->n_beams : 0;
	q->n_src = r->n_src;
	q->prompt_logits = r->prompt_logits;
	q->dec = -1;
	q->first_ms = -1;
	if ((st = admit_check(s, q, now_ms, adm)) != RG_OK) {
		if (st == RG_ERR_BUSY)
			s->n_refused++;
		goto out_free_seq;
	}
	s->next_order++;
	waiting_insert(s, q);
	s->n_admitted++;
	return RG_OK;
out_free_seq:
	seq_destroy(q); /* not admitted: no block table (q->order may even be unset, 0) */
	return st;
}
