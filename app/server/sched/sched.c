/* Batch schedulers (policy only). See sched.h for the contract of each policy.
 *
 * Sources:
 *  - DP: TurboTransformers (Fang et al., PPoPP'21) sec. 5, Algorithm 2 and Equation 2, hungry and
 *    lazy strategies with the half-latency-budget rule.
 *  - CONCAT, SLOTTED: TCB (Fu et al., ICPP'22) sec. 4.1 / 4.2, fed first-come-first-served as in
 *    sec. 6.2.2.
 *  - DAS, SLOTTED_DAS: TCB sec. 5.2 Algorithm 1 and sec. 5.3 Algorithm 2.
 *  - FCFS, SJF, EDF: the comparison policies of TCB sec. 6.2.4.
 * Every policy works on the "candidates": queued requests that are not expired and not longer than
 * rg_sched_max_len(), in queue (arrival) order. Scratch arrays grow on demand and live as long as
 * the scheduler (no allocation in the steady state). */
#include "server/sched/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define RG_SCHED_MAX_REQUESTS (1 << 20)

/* One candidate: position in the caller's queue and its sort key. */
typedef struct sched_item {
	double key;
	int len;
	int qi;
} sched_item;

/* A request chosen by DAS (Algorithm 1) before slot placement: its candidate, its row, and
 * whether it belongs to the row's utility-dominant set N^U (TCB sec. 5.2). */
typedef struct das_pick {
	int ci;
	int row;
	bool in_u;
} das_pick;

struct rg_sched {
	rg_sched_params p;
	int max_len;
	int cap; /* capacity of the scratch arrays below, in candidates */
	sched_item *cand;   /* (cap) candidates in queue order */
	sched_item *sorted; /* (cap) candidates sorted by a policy key */
	sched_item *sorted2;/* (cap) second order (DAS: by deadline) */
	double *state;      /* (cap+1) DP: minimal cost of the first i sorted candidates */
	int *start;         /* (cap+1) DP: start of the last group of that optimum */
	signed char *mark;  /* (cap) DAS: 0 free, 1 taken, 2 in this row's N^D */
	das_pick *das;      /* (max_batch_requests) DAS picks in order */
	int *fill;          /* (n_rows * slots per row) tokens used per row or slot */
	int fill_cap;
};

static const char *const kind_names[RG_SCHED_N_KINDS] = {
	[RG_SCHED_NOBATCH] = "nobatch", [RG_SCHED_NAIVE] = "naive",
	[RG_SCHED_TOKEN] = "token",     [RG_SCHED_DP] = "dp",
	[RG_SCHED_CONCAT] = "concat",   [RG_SCHED_SLOTTED] = "slotted",
	[RG_SCHED_DAS] = "das",         [RG_SCHED_SLOTTED_DAS] = "slotted-das",
	[RG_SCHED_FCFS] = "fcfs",       [RG_SCHED_SJF] = "sjf",
	[RG_SCHED_EDF] = "edf",
};

rg_status rg_sched_kind_parse(const char *name, rg_sched_kind *out)
{
	if (!name || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler kind: NULL argument");
	for (int k = 0; k < RG_SCHED_N_KINDS; k++) {
		if (strcmp(name, kind_names[k]) == 0) {
			*out = (rg_sched_kind)k;
			return RG_OK;
		}
	}
	if (strcmp(name, "slotted_das") == 0) {
		*out = RG_SCHED_SLOTTED_DAS;
		return RG_OK;
	}
	return rg_errorf(RG_ERR_INVALID_INPUT, "unknown scheduler '%s' (nobatch, naive, token, dp, "
			 "concat, slotted, das, slotted-das, fcfs, sjf, edf)", name);
}

const char *rg_sched_kind_name(rg_sched_kind kind)
{
	if ((int)kind < 0 || kind >= RG_SCHED_N_KINDS)
		return "?";
	return kind_names[kind];
}

rg_exec_mode rg_sched_kind_mode(rg_sched_kind kind, bool das_packed)
{
	switch (kind) {
	case RG_SCHED_NAIVE:
	case RG_SCHED_DP:
		return RG_EXEC_PADDED;
	case RG_SCHED_CONCAT:
		return RG_EXEC_CONCAT;
	case RG_SCHED_DAS:
		return das_packed ? RG_EXEC_PACKED : RG_EXEC_CONCAT;
	case RG_SCHED_SLOTTED:
	case RG_SCHED_SLOTTED_DAS:
		return RG_EXEC_SLOTTED;
	case RG_SCHED_NOBATCH:
	case RG_SCHED_TOKEN:
	case RG_SCHED_FCFS:
	case RG_SCHED_SJF:
	case RG_SCHED_EDF:
	case RG_SCHED_N_KINDS:
		break;
	}
	return RG_EXEC_PACKED;
}

rg_sched_params rg_sched_params_default(rg_sched_kind kind)
{
	rg_sched_params p = {
		.kind = kind,
		.max_batch_tokens = 16384,
		.max_batch_requests = 256,
		.n_rows = 32,
		.row_len = 512,
		.slot_len = 128,
		.eta = 0.5,
		.q = 0.5,
		.lazy = false,
		.latency_budget_ms = 100.0,
		.cost = NULL,
		.das_packed = false,
		.max_batch_ms = 0,
		.cost_model = {0, 0, 0},
	};
	return p;
}

void rg_sched_params_derive(rg_sched_params *p, int max_position_embeddings)
{
	const int slot_default = 128;

	if (p->row_len <= 0)
		p->row_len = max_position_embeddings < 512 ? max_position_embeddings : 512;
	if (p->row_len > p->max_batch_tokens)
		p->row_len = p->max_batch_tokens;
	if (p->n_rows <= 0)
		p->n_rows = p->max_batch_tokens / p->row_len > 0 ? p->max_batch_tokens / p->row_len : 1;
	if (p->slot_len <= 0) {
		p->slot_len = slot_default < p->row_len ? slot_default : p->row_len;
		if (p->row_len % p->slot_len)
			p->slot_len = p->row_len;
	}
	p->q = 1.0 - p->eta;
}

rg_status rg_sched_batch_init(rg_sched_batch *b, int cap)
{
	if (!b)
		return rg_errorf(RG_ERR_INVALID_INPUT, "sched batch: NULL");
	memset(b, 0, sizeof(*b));
	if (cap < 1 || cap > RG_SCHED_MAX_REQUESTS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "sched batch: capacity %d out of range", cap);
	b->queue_idx = malloc(sizeof(int) * (size_t)cap);
	b->req_row = malloc(sizeof(int32_t) * (size_t)cap);
	b->req_offset = malloc(sizeof(int32_t) * (size_t)cap);
	if (!b->queue_idx || !b->req_row || !b->req_offset) {
		rg_sched_batch_free(b);
		return rg_errorf(RG_ERR_OOM, "sched batch: out of memory");
	}
	b->cap = cap;
	b->est_ms = NAN;
	b->layout.req_row = b->req_row;
	b->layout.req_offset = b->req_offset;
	return RG_OK;
}

void rg_sched_batch_free(rg_sched_batch *b)
{
	if (!b)
		return;
	free(b->queue_idx);
	free(b->req_row);
	free(b->req_offset);
	memset(b, 0, sizeof(*b));
}

static bool uses_rows(const rg_sched_params *p)
{
	return p->kind == RG_SCHED_CONCAT || p->kind == RG_SCHED_SLOTTED ||
	       p->kind == RG_SCHED_SLOTTED_DAS || (p->kind == RG_SCHED_DAS && !p->das_packed);
}

static rg_status check_params(const rg_sched_params *p)
{
	if ((int)p->kind < 0 || p->kind >= RG_SCHED_N_KINDS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler: unknown kind %d", (int)p->kind);
	if (p->max_batch_tokens < 1 || p->max_batch_requests < 1 ||
	    p->max_batch_requests > RG_SCHED_MAX_REQUESTS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler: max_batch_tokens %d and "
				 "max_batch_requests %d must be >= 1 (requests <= %d)",
				 p->max_batch_tokens, p->max_batch_requests, RG_SCHED_MAX_REQUESTS);
	if (uses_rows(p)) {
		if (p->n_rows < 1 || p->row_len < 1 ||
		    (long long)p->n_rows * p->row_len > p->max_batch_tokens)
			return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler %s: need n_rows >= 1, "
					 "row_len >= 1, n_rows*row_len <= max_batch_tokens (%d*%d "
					 "> %d)", rg_sched_kind_name(p->kind), p->n_rows,
					 p->row_len, p->max_batch_tokens);
	}
	if (p->kind == RG_SCHED_SLOTTED &&
	    (p->slot_len < 1 || p->slot_len > p->row_len || p->row_len % p->slot_len != 0))
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler slotted: slot_len %d must divide "
				 "row_len %d", p->slot_len, p->row_len);
	if (p->kind == RG_SCHED_DAS || p->kind == RG_SCHED_SLOTTED_DAS) {
		if (!(p->eta > 0 && p->eta < 1 && p->q > 0 && p->q < 1) ||
		    !(fabs(p->eta + p->q - 1.0) <= 1e-9))
			return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler %s: need eta, q in (0,1) "
					 "with eta + q = 1 (TCB sec. 5.2), got %g, %g",
					 rg_sched_kind_name(p->kind), p->eta, p->q);
	}
	if (p->das_packed && p->kind != RG_SCHED_DAS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler %s: das_packed applies to das only",
				 rg_sched_kind_name(p->kind));
	if (p->kind == RG_SCHED_DP && !rg_cost_table_complete(p->cost))
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler dp: needs a fully measured cost "
				 "table (TurboTransformers sec. 5 cached_cost)");
	if (p->lazy && p->kind != RG_SCHED_DP)
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler %s: lazy applies to dp only",
				 rg_sched_kind_name(p->kind));
	if (!(p->max_batch_ms >= 0 && isfinite(p->max_batch_ms)) ||
	    !rg_cost_model_valid(&p->cost_model))
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler: max_batch_ms %g must be >= 0 and "
				 "the cost model's coefficients finite and >= 0", p->max_batch_ms);
	if (p->lazy && !(p->latency_budget_ms > 0 && isfinite(p->latency_budget_ms)))
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler dp lazy: latency budget %g ms must "
				 "be > 0", p->latency_budget_ms);
	return RG_OK;
}

rg_sched *rg_sched_create(const rg_sched_params *p, rg_status *st)
{
	rg_status s;
	rg_sched *sc = NULL;

	if (!p) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "scheduler: NULL params");
		goto out;
	}
	if ((s = check_params(p)) != RG_OK)
		goto out;
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		goto out_oom;
	sc->p = *p;
	switch (p->kind) {
	case RG_SCHED_CONCAT:
	case RG_SCHED_SLOTTED:  /* a request longer than a slot gets a wider one (pick_concat) */
	case RG_SCHED_SLOTTED_DAS:
		sc->max_len = p->row_len;
		break;
	case RG_SCHED_DAS:
		sc->max_len = p->das_packed ? p->max_batch_tokens : p->row_len;
		break;
	case RG_SCHED_NOBATCH:
	case RG_SCHED_NAIVE:
	case RG_SCHED_TOKEN:
	case RG_SCHED_DP:
	case RG_SCHED_FCFS:
	case RG_SCHED_SJF:
	case RG_SCHED_EDF:
	case RG_SCHED_N_KINDS:
		sc->max_len = p->max_batch_tokens;
		break;
	}
	sc->das = malloc(sizeof(das_pick) * (size_t)p->max_batch_requests);
	if (!sc->das)
		goto out_free_sched;
	if (uses_rows(p)) {
		/* SLOTTED_DAS slots can be as short as one token: row_len slots per row. */
		long long slots = p->kind == RG_SCHED_SLOTTED ? p->row_len / p->slot_len
			: p->kind == RG_SCHED_SLOTTED_DAS ? p->row_len : 1;
		sc->fill_cap = (int)((long long)p->n_rows * slots);
		sc->fill = malloc(sizeof(int) * (size_t)sc->fill_cap);
		if (!sc->fill)
			goto out_free_sched;
	}
	s = RG_OK;
	goto out;

out_free_sched:
	rg_sched_free(sc);
	sc = NULL;
out_oom:
	s = rg_errorf(RG_ERR_OOM, "scheduler: out of memory");
out:
	if (st)
		*st = s;
	return sc;
}

void rg_sched_free(rg_sched *s)
{
	if (!s)
		return;
	free(s->cand);
	free(s->sorted);
	free(s->sorted2);
	free(s->state);
	free(s->start);
	free(s->mark);
	free(s->das);
	free(s->fill);
	free(s);
}

const rg_sched_params *rg_sched_get_params(const rg_sched *s) { return s ? &s->p : NULL; }

rg_status rg_sched_set_time_budget(rg_sched *s, double max_batch_ms, const rg_cost_model *m)
{
	if (!s || !rg_cost_model_valid(m) || !(max_batch_ms >= 0 && isfinite(max_batch_ms)))
		return rg_errorf(RG_ERR_INVALID_INPUT, "scheduler: the time budget must be >= 0 and "
				 "the cost model's coefficients finite and >= 0");
	s->p.max_batch_ms = max_batch_ms;
	s->p.cost_model = *m;
	return RG_OK;
}

int rg_sched_max_len(const rg_sched *s) { return s ? s->max_len : 0; }

static rg_status grow(rg_sched *s, int n)
{
	if (n <= s->cap)
		return RG_OK;
	int nc = s->cap ? s->cap : 64;
	while (nc < n)
		nc = nc > RG_SCHED_MAX_REQUESTS * 64 ? n : nc * 2;
	sched_item *c = realloc(s->cand, sizeof(*c) * (size_t)nc);
	if (c)
		s->cand = c;
	sched_item *so = realloc(s->sorted, sizeof(*so) * (size_t)nc);
	if (so)
		s->sorted = so;
	sched_item *s2 = realloc(s->sorted2, sizeof(*s2) * (size_t)nc);
	if (s2)
		s->sorted2 = s2;
	double *stt = realloc(s->state, sizeof(*stt) * ((size_t)nc + 1));
	if (stt)
		s->state = stt;
	int *sta = realloc(s->start, sizeof(*sta) * ((size_t)nc + 1));
	if (sta)
		s->start = sta;
	signed char *m = realloc(s->mark, (size_t)nc);
	if (m)
		s->mark = m;
	if (!c || !so || !s2 || !stt || !sta || !m)
		return rg_errorf(RG_ERR_OOM, "scheduler: out of memory for %d queued requests", n);
	s->cap = nc;
	return RG_OK;
}

/* Order by key, then by queue position (stable, deterministic). */
static int cmp_item(const void *a, const void *b)
{
	const sched_item *x = a, *y = b;
	if (x->key < y->key)
		return -1;
	if (x->key > y->key)
		return 1;
	return (x->qi > y->qi) - (x->qi < y->qi);
}

static void emit(rg_sched_batch *out, int qi, int len, int row, int off)
{
	out->queue_idx[out->n] = qi;
	out->req_row[out->n] = row;
	out->req_offset[out->n] = off;
	out->real_tokens += len;
	out->attn_pairs += (double)len * len; /* PACKED; other modes set it from the layout */
	out->n++;
}

/* True when a batch of `tokens` computed tokens and `pairs` attention pairs is over the time
 * budget by the cost model's estimate (never without a budget). */
static bool over_budget(const rg_sched *s, double tokens, double pairs)
{
	return s->p.max_batch_ms > 0 &&
	       rg_cost_model_ms(&s->p.cost_model, tokens, pairs) > s->p.max_batch_ms;
}

/* Rows (of row_tokens computed tokens and row_pairs attention pairs each) that fit the time
 * budget: n_rows at most, 1 at least. */
static int rows_in_budget(const rg_sched *s, int n_rows, double row_tokens, double row_pairs)
{
	int r = n_rows;

	while (r > 1 && over_budget(s, r * row_tokens, r * row_pairs))
		r--;
	return r;
}

/* PACKED: candidates in `items` order, greedily while they fit the token budget. With
 * stop_at_first_misfit (TOKEN, TEI-style) the first request that does not fit ends the batch; else
 * it is skipped (FCFS/SJF/EDF, TCB sec. 6.2.4). */
static void pick_packed(rg_sched *s, const sched_item *items, int n, bool stop_at_first_misfit,
			rg_sched_batch *out)
{
	int used = 0;
	for (int i = 0; i < n && out->n < s->p.max_batch_requests; i++) {
		double len = items[i].len;

		if (used + items[i].len > s->p.max_batch_tokens ||
		    (out->n > 0 && over_budget(s, used + len, out->attn_pairs + len * len))) {
			if (stop_at_first_misfit)
				break;
			continue;
		}
		emit(out, items[i].qi, items[i].len, 0, used);
		used += items[i].len;
	}
	out->layout.mode = RG_EXEC_PACKED;
	out->computed_tokens = used;
}

/* NaiveBatching (TCB sec. 6.1 TNB): the oldest requests, one per row, padded to the longest;
 * stops at the first request that would overflow the token budget. */
static void pick_naive(rg_sched *s, const sched_item *items, int n, rg_sched_batch *out)
{
	int maxlen = 0;
	for (int i = 0; i < n && out->n < s->p.max_batch_requests; i++) {
		int ml = items[i].len > maxlen ? items[i].len : maxlen;
		double rows = out->n + 1;
		if ((long long)(out->n + 1) * ml > s->p.max_batch_tokens ||
		    (out->n > 0 && over_budget(s, rows * ml, rows * ml * (double)ml)))
			break;
		maxlen = ml;
		emit(out, items[i].qi, items[i].len, out->n, 0);
	}
	out->layout.mode = RG_EXEC_PADDED;
	out->layout.n_rows = out->n;
	out->layout.row_len = maxlen;
}

/* The slot width of a SLOTTED batch led by a request of `len` tokens: slot_len when it fits one,
 * else the smallest multiple of slot_len that holds it and divides row_len (row_len itself at
 * most, since slot_len divides it: the request then has a row of its own). */
static int slot_width(const rg_sched_params *p, int len)
{
	int w = p->slot_len;

	while (w < p->row_len && (w < len || p->row_len % w != 0)) /* len <= row_len: max_len */
		w += p->slot_len;
	return w;
}

/* Pure / slotted ConcatBatching fed in arrival order (TCB sec. 4.1, 4.2, 6.2.2): each request goes
 * into the first row (slot) with room for it; a request that fits nowhere is skipped.
 * SLOTTED: a scheduler decides when and with whom a request runs, never whether a valid one is
 * served, so a request longer than slot_len is not refused: a batch whose oldest candidate is
 * longer than a slot has wider slots (slot_width), which the shorter requests of that batch
 * share. A long request behind the oldest waits for a batch that it leads (or whose slots hold
 * it), so it runs once the requests older than it have. */
static void pick_concat(rg_sched *s, const sched_item *items, int n, rg_sched_batch *out)
{
	const rg_sched_params *p = &s->p;
	bool slotted = p->kind == RG_SCHED_SLOTTED;
	int seg = slotted ? slot_width(p, items[0].len) : p->row_len;
	int per_row = p->row_len / seg;
	/* attention of a row: the whole row (CONCAT), each slot (SLOTTED) */
	int rows = rows_in_budget(s, p->n_rows, p->row_len, (double)p->row_len * seg);
	int n_seg = rows * per_row, rows_used = 0;

	memset(s->fill, 0, sizeof(int) * (size_t)n_seg);
	for (int i = 0; i < n && out->n < p->max_batch_requests; i++) {
		for (int g = 0; g < n_seg; g++) {
			if (s->fill[g] + items[i].len > seg)
				continue;
			int row = g / per_row;
			emit(out, items[i].qi, items[i].len, row, (g % per_row) * seg + s->fill[g]);
			s->fill[g] += items[i].len;
			if (row + 1 > rows_used)
				rows_used = row + 1;
			break;
		}
	}
	out->layout.mode = slotted ? RG_EXEC_SLOTTED : RG_EXEC_CONCAT;
	out->layout.n_rows = rows_used;
	out->layout.row_len = p->row_len;
	out->layout.slot_len = slotted ? seg : 0;
}

/* DAS, TCB sec. 5.2 Algorithm 1, over the candidates c[0..n) (the waiting set N_t; expired ones
 * already excluded). Fills s->das[0..*n_das) with the chosen requests row by row, in the order they
 * were put; returns the number of rows used. Per row k with capacity L:
 *  - if the whole remaining set fits (sum of lengths <= L, and the request cap allows), it is put
 *    into the row (line 4-5); every such request counts as utility-dominant for Algorithm 2;
 *  - else, with N~ = remaining sorted by utility 1/len non-increasing (ties: arrival order),
 *    s = the longest prefix of N~ that fits in L (line 8), p = floor(eta*s) clamped to [1, s]
 *    (line 9): N^U = first p of N~, put into the row (line 10);
 *    N^D = other remaining requests with utility >= q * mean utility of N^U (line 11), taken in
 *    deadline order, each put if it still fits (line 12, greedy: a misfit is skipped);
 *    then the rest N~ - N^U - N^D in utility order, each put if it fits (lines 13-14).
 * Every put also respects max_batch_requests over the whole batch. */
static int run_das(rg_sched *s, const sched_item *c, int n, int B, int L, int *n_das)
{
	const rg_sched_params *p = &s->p;
	sched_item *by_util = s->sorted, *by_dl = s->sorted2;
	int maxb = p->max_batch_requests, nd = 0, rows = 0;

	/* key = len orders by utility 1/len non-increasing; items carry their candidate index in
	 * `qi` here (mapped back to queue positions by the caller). */
	for (int i = 0; i < n; i++) {
		by_util[i] = (sched_item){.key = c[i].len, .len = c[i].len, .qi = i};
		by_dl[i] = (sched_item){.key = c[i].key, .len = c[i].len, .qi = i};
		s->mark[i] = 0;
	}
	qsort(by_util, (size_t)n, sizeof(*by_util), cmp_item);
	qsort(by_dl, (size_t)n, sizeof(*by_dl), cmp_item);

	for (int k = 0; k < B && nd < maxb; k++) {
		long long rem_tokens = 0;
		int rem = 0, fill = 0;
		for (int i = 0; i < n; i++) {
			if (s->mark[i] == 0) {
				rem_tokens += c[i].len;
				rem++;
			}
		}
		if (rem == 0)
			break;
		rows = k + 1;
		if (rem_tokens <= L && rem <= maxb - nd) {
			for (int i = 0; i < n; i++) {
				if (s->mark[i] != 0)
					continue;
				s->das[nd++] = (das_pick){.ci = i, .row = k, .in_u = true};
				s->mark[i] = 1;
			}
			break;
		}
		/* s_tk: longest utility-order prefix that fits the row (and the request cap). */
		int s_tk = 0, sum = 0;
		for (int j = 0; j < n; j++) {
			int ci = by_util[j].qi;
			if (s->mark[ci] != 0)
				continue;
			if (sum + c[ci].len > L || s_tk >= maxb - nd)
				break;
			sum += c[ci].len;
			s_tk++;
		}
		int p_tk = (int)floor(p->eta * s_tk + 1e-9);
		if (p_tk < 1)
			p_tk = 1;
		if (p_tk > s_tk)
			p_tk = s_tk;
		/* N^U: the first p_tk remaining in utility order. */
		double usum = 0;
		int taken_u = 0;
		for (int j = 0; j < n && taken_u < p_tk; j++) {
			int ci = by_util[j].qi;
			if (s->mark[ci] != 0)
				continue;
			s->das[nd++] = (das_pick){.ci = ci, .row = k, .in_u = true};
			s->mark[ci] = 1;
			fill += c[ci].len;
			usum += 1.0 / c[ci].len;
			taken_u++;
		}
		if (taken_u == 0)
			break; /* nothing fits at all: cannot happen with len <= L */
		/* N^D: utility >= q * vbar(N^U); relative slack so exact ties count as >=. */
		double thr = p->q * (usum / taken_u) * (1.0 - 1e-12);
		for (int i = 0; i < n; i++)
			if (s->mark[i] == 0 && 1.0 / c[i].len >= thr)
				s->mark[i] = 2;
		for (int j = 0; j < n && nd < maxb; j++) {
			int ci = by_dl[j].qi;
			if (s->mark[ci] != 2 || fill + c[ci].len > L)
				continue;
			s->das[nd++] = (das_pick){.ci = ci, .row = k, .in_u = false};
			s->mark[ci] = 1;
			fill += c[ci].len;
		}
		/* The rest, N~ - N^U - N^D, in utility order. */
		for (int j = 0; j < n && nd < maxb; j++) {
			int ci = by_util[j].qi;
			if (s->mark[ci] != 0 || fill + c[ci].len > L)
				continue;
			s->das[nd++] = (das_pick){.ci = ci, .row = k, .in_u = false};
			s->mark[ci] = 1;
			fill += c[ci].len;
		}
		for (int i = 0; i < n; i++)
			if (s->mark[i] == 2)
				s->mark[i] = 0;
	}
	*n_das = nd;
	return rows;
}

/* DAS packed: the row's tokens T within the time budget, bounding its pairs by T * (longest
 * candidate); at least the longest candidate (so every candidate fits), at most max_batch_tokens. */
static int packed_tokens_in_budget(const rg_sched *s, const sched_item *c, int n)
{
	const rg_cost_model *m = &s->p.cost_model;
	double maxc = 1, per_token, t;

	for (int i = 0; i < n; i++)
		maxc = c[i].len > maxc ? c[i].len : maxc;
	if (s->p.max_batch_ms <= 0)
		return s->p.max_batch_tokens;
	per_token = m->token_ms + m->pair_ms * maxc;
	t = per_token > 0 ? (s->p.max_batch_ms - m->batch_ms) / per_token : s->p.max_batch_tokens;
	if (!(t >= maxc))
		t = maxc;
	return t > s->p.max_batch_tokens ? s->p.max_batch_tokens : (int)t;
}

/* DAS output: CONCAT rows of row_len (requests back to back in each row, in the order put), or
 * with das_packed a single PACKED row of max_batch_tokens. */
static void pick_das(rg_sched *s, const sched_item *c, int n, rg_sched_batch *out)
{
	const rg_sched_params *p = &s->p;
	int B = p->das_packed ? 1 : rows_in_budget(s, p->n_rows, p->row_len,
						   (double)p->row_len * p->row_len);
	int L = p->das_packed ? packed_tokens_in_budget(s, c, n) : p->row_len;
	int nd = 0, rows = run_das(s, c, n, B, L, &nd);
	int off = 0, cur_row = 0;

	for (int i = 0; i < nd; i++) {
		const das_pick *d = &s->das[i];
		if (d->row != cur_row) {
			cur_row = d->row;
			off = 0;
		}
		emit(out, c[d->ci].qi, c[d->ci].len, d->row, off);
		off += c[d->ci].len;
	}
	if (p->das_packed) {
		/* L bounded the row by the longest candidate's pairs; when that one alone is over
		 * the budget, drop the last put (lowest priority) until the rest fits */
		while (out->n > 1 && over_budget(s, out->real_tokens, out->attn_pairs)) {
			double len = c[s->das[out->n - 1].ci].len;

			out->n--;
			out->real_tokens -= (int)len;
			out->attn_pairs -= len * len;
		}
		out->layout.mode = RG_EXEC_PACKED;
		out->computed_tokens = out->real_tokens;
	} else {
		out->layout.mode = RG_EXEC_CONCAT;
		out->layout.n_rows = rows;
		out->layout.row_len = L;
	}
}

/* Slotted DAS, TCB sec. 5.3 Algorithm 2: run DAS (line 2); the slot size m is the longest request
 * of the utility-dominant sets H^U (lines 3-4); each row is cut into floor(L/m) slots of m tokens
 * (line 5; the computed row is floor(L/m)*m tokens so slots tile it exactly); the requests DAS put
 * into row k are placed greedily, in the order DAS put them, into the first slot of row k with
 * room (lines 6-8). A request that finds no slot is not picked this time and stays queued. */
static void pick_slotted_das(rg_sched *s, const sched_item *c, int n, rg_sched_batch *out)
{
	const rg_sched_params *p = &s->p;
	/* a slot is at most a row: row_len^2 pairs per row bounds the estimate */
	int B = rows_in_budget(s, p->n_rows, p->row_len, (double)p->row_len * p->row_len);
	int nd = 0, rows = run_das(s, c, n, B, p->row_len, &nd);
	int m = 1, rows_used = 0;

	for (int i = 0; i < nd; i++)
		if (s->das[i].in_u && c[s->das[i].ci].len > m)
			m = c[s->das[i].ci].len;
	int per_row = p->row_len / m;
	memset(s->fill, 0, sizeof(int) * (size_t)rows * (size_t)per_row);
	for (int i = 0; i < nd; i++) {
		const das_pick *d = &s->das[i];
		int len = c[d->ci].len;
		int *f = s->fill + (size_t)d->row * (size_t)per_row;
		for (int g = 0; g < per_row; g++) {
			if (f[g] + len > m)
				continue;
			emit(out, c[d->ci].qi, len, d->row, g * m + f[g]);
			f[g] += len;
			if (d->row + 1 > rows_used)
				rows_used = d->row + 1;
			break;
		}
	}
	out->layout.mode = RG_EXEC_SLOTTED;
	out->layout.n_rows = rows_used;
	out->layout.row_len = per_row * m;
	out->layout.slot_len = m;
}

/* TurboTransformers sec. 5, Algorithm 2 / Equation 2 over the candidates sorted by length:
 *   state[0] = 0,  state[i] = min over group sizes g of state[i-g] + T(len_{i-1}, g),
 * where T(len, g) = cached_cost of a padded batch of g requests of len tokens (the paper's
 * cached_cost[len][g] * g with its per-request cost; our table stores the batch latency), the
 * group being the g sorted requests ending at i-1 (its longest is the last). Groups are limited to
 * max_batch_requests requests and g*len <= max_batch_tokens. Ties keep the smaller group, as the
 * paper's strict `<` scanning from size 1 up.
 * The optimal partition is backtracked from N (lines 19-24); of its batches, the one holding the
 * oldest candidate runs now (the paper leaves the order open; running the oldest first bounds the
 * reordering delay it warns about). Lazy strategy: unless the queue holds max_batch_requests
 * candidates, wait while (now - oldest arrival) + state[N] < latency_budget/2 (state[N]: the
 * estimated time to run every queued request), and wake at the time that sum reaches half the
 * budget (1e-9 ms slack, so a call at exactly *wake runs). Returns true when a batch was
 * emitted, false when waiting (then *wake set). */
static bool pick_dp(rg_sched *s, const sched_item *c, int n, double now_ms,
		    const rg_sched_req *queue, rg_sched_batch *out, double *wake)
{
	const rg_sched_params *p = &s->p;
	sched_item *so = s->sorted;
	double *state = s->state;
	int *start = s->start;

	for (int i = 0; i < n; i++)
		so[i] = (sched_item){.key = c[i].len, .len = c[i].len, .qi = c[i].qi};
	qsort(so, (size_t)n, sizeof(*so), cmp_item);
	state[0] = 0;
	for (int i = 1; i <= n; i++) {
		int len = so[i - 1].len;
		state[i] = INFINITY;
		start[i] = i - 1;
		for (int g = 1; g <= i && g <= p->max_batch_requests; g++) {
			if ((long long)g * len > p->max_batch_tokens)
				break;
			double t = rg_cost_table_get(p->cost, len, g);
			if (g > 1 && p->max_batch_ms > 0 && t > p->max_batch_ms)
				continue; /* over the time budget (the table need not grow with g) */
			double cst = state[i - g] + t;
			if (cst < state[i]) {
				state[i] = cst;
				start[i] = i - g;
			}
		}
	}
	/* Oldest candidate: earliest arrival, then queue position. */
	int oldest = 0;
	for (int i = 1; i < n; i++) {
		double a = queue[c[i].qi].arrival_ms, b = queue[c[oldest].qi].arrival_ms;
		if (a < b)
			oldest = i;
	}
	double a0 = queue[c[oldest].qi].arrival_ms;
	if (p->lazy && n < p->max_batch_requests &&
	    (now_ms - a0) + state[n] < p->latency_budget_ms / 2 - 1e-9) {
		*wake = a0 + p->latency_budget_ms / 2 - state[n];
		return false;
	}
	int target = c[oldest].qi, g_lo = 0, g_hi = 0;
	for (int i = n; i > 0; i = start[i]) {
		bool has = false;
		for (int j = start[i]; j < i; j++)
			has |= so[j].qi == target;
		if (has) {
			g_lo = start[i];
			g_hi = i;
			break;
		}
	}
	int row_len = so[g_hi - 1].len;
	for (int j = g_lo; j < g_hi; j++)
		emit(out, so[j].qi, so[j].len, j - g_lo, 0);
	out->layout.mode = RG_EXEC_PADDED;
	out->layout.n_rows = out->n;
	out->layout.row_len = row_len;
	out->est_ms = rg_cost_table_get(p->cost, row_len, out->n);
	return true;
}

rg_status rg_sched_pick(rg_sched *s, const rg_sched_req *queue, int n_queue, double now_ms,
			rg_sched_batch *out, double *wake_ms)
{
	rg_status st;
	double wake = INFINITY;

	if (!s || !out || n_queue < 0 || (n_queue > 0 && !queue))
		return rg_errorf(RG_ERR_INVALID_INPUT, "sched pick: NULL scheduler, batch or queue");
	if (!out->queue_idx || out->cap < s->p.max_batch_requests)
		return rg_errorf(RG_ERR_INVALID_INPUT, "sched pick: batch capacity %d < "
				 "max_batch_requests %d", out->cap, s->p.max_batch_requests);
	out->n = 0;
	out->real_tokens = 0;
	out->computed_tokens = 0;
	out->attn_pairs = 0;
	out->est_ms = NAN;
	out->layout = (rg_layout){.mode = rg_sched_kind_mode(s->p.kind, s->p.das_packed),
				  .req_row = out->req_row, .req_offset = out->req_offset};
	if ((st = grow(s, n_queue)) != RG_OK)
		return st;

	/* Candidates, in queue order; key = deadline (EDF, DAS), NaN read as none. */
	int n = 0;
	for (int i = 0; i < n_queue; i++) {
		const rg_sched_req *r = &queue[i];
		if (r->len < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "sched pick: request %d (id %llu) has "
					 "length %d", i, (unsigned long long)r->id, r->len);
		if (r->deadline_ms <= now_ms || r->len > s->max_len)
			continue;
		double dl = isnan(r->deadline_ms) ? INFINITY : r->deadline_ms;
		s->cand[n++] = (sched_item){.key = dl, .len = r->len, .qi = i};
	}
	if (n == 0)
		goto out;

	sched_item *so = s->sorted;
	switch (s->p.kind) {
	case RG_SCHED_NOBATCH:
		emit(out, s->cand[0].qi, s->cand[0].len, 0, 0);
		out->computed_tokens = out->real_tokens;
		break;
	case RG_SCHED_NAIVE:
		pick_naive(s, s->cand, n, out);
		break;
	case RG_SCHED_TOKEN:
		pick_packed(s, s->cand, n, true, out);
		break;
	case RG_SCHED_FCFS:
	case RG_SCHED_SJF:
	case RG_SCHED_EDF:
		for (int i = 0; i < n; i++) {
			so[i] = s->cand[i];
			if (s->p.kind == RG_SCHED_FCFS)
				so[i].key = queue[so[i].qi].arrival_ms;
			else if (s->p.kind == RG_SCHED_SJF)
				so[i].key = so[i].len;
		}
		qsort(so, (size_t)n, sizeof(*so), cmp_item);
		pick_packed(s, so, n, false, out);
		break;
	case RG_SCHED_CONCAT:
	case RG_SCHED_SLOTTED:
		pick_concat(s, s->cand, n, out);
		break;
	case RG_SCHED_DAS:
		pick_das(s, s->cand, n, out);
		break;
	case RG_SCHED_SLOTTED_DAS:
		pick_slotted_das(s, s->cand, n, out);
		break;
	case RG_SCHED_DP:
		if (!pick_dp(s, s->cand, n, now_ms, queue, out, &wake))
			goto out;
		break;
	case RG_SCHED_N_KINDS:
		return rg_errorf(RG_ERR_INTERNAL, "sched pick: bad kind");
	}
	if (out->n == 0)
		return rg_errorf(RG_ERR_INTERNAL, "sched pick: %s chose nothing from %d candidates",
				 rg_sched_kind_name(s->p.kind), n);
	if (out->layout.mode != RG_EXEC_PACKED)
		out->computed_tokens = out->layout.n_rows * out->layout.row_len;
	switch (out->layout.mode) {
	case RG_EXEC_PACKED:
		break; /* summed by emit */
	case RG_EXEC_PADDED:
	case RG_EXEC_CONCAT:
		out->attn_pairs = (double)out->layout.n_rows * out->layout.row_len *
				  out->layout.row_len;
		break;
	case RG_EXEC_SLOTTED:
		out->attn_pairs = (double)out->layout.n_rows * out->layout.row_len *
				  out->layout.slot_len;
		break;
	}
	if (s->p.kind != RG_SCHED_DP)
		out->est_ms = rg_cost_model_ms(&s->p.cost_model, out->computed_tokens,
					       out->attn_pairs);
	if (out->computed_tokens > s->p.max_batch_tokens || out->n > s->p.max_batch_requests)
		return rg_errorf(RG_ERR_INTERNAL, "sched pick: %s exceeded the batch budget (%d "
				 "tokens, %d requests)", rg_sched_kind_name(s->p.kind),
				 out->computed_tokens, out->n);
	wake = now_ms;
out:
	if (wake_ms)
		*wake_ms = wake;
	return RG_OK;
}
