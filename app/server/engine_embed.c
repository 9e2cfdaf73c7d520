/* The encoder's runner of the engine (engine_internal.h): packed batches of sequences through
 * rg_model_run_ex on a worker's model, and the batch latency model fitted to a few packed batches
 * measured at start (or to the DP cost table). The queue, admission and drain are engine.c's. */
#include "server/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"

/* The encoder runner's per-worker state (rg_worker.rs): one packed batch's buffers. */
typedef struct embed_bufs {
	int32_t *tokens;       /* (max_batch_tokens) packed ids of the batch */
	int32_t *types;        /* (max_batch_tokens) packed token types of the batch */
	int32_t *cu;           /* (batch cap + 1) */
	float *out;            /* (batch cap, hidden) */
	float *hid;            /* (hid_cap) per-token hidden states of a batch that asked for
			        * them (/embed_all); allocated at the first such batch */
	size_t hid_cap;
} embed_bufs;

/* The runner's worker_init: the batch buffers for the engine's limits. */
static rg_status embed_worker_init(rg_worker *w)
{
	const rg_engine *e = w->e;
	int bcap = e->p.sched.max_batch_requests;
	embed_bufs *eb = calloc(1, sizeof(*eb));

	if (!eb)
		return rg_errorf(RG_ERR_OOM, "engine: out of memory");
	w->rs = eb;
	eb->tokens = malloc((size_t)e->p.sched.max_batch_tokens * sizeof(int32_t));
	eb->types = malloc((size_t)e->p.sched.max_batch_tokens * sizeof(int32_t));
	eb->cu = malloc(((size_t)bcap + 1) * sizeof(int32_t));
	eb->out = malloc((size_t)bcap * (size_t)e->hidden * sizeof(float));
	if (!eb->tokens || !eb->types || !eb->cu || !eb->out)
		return rg_errorf(RG_ERR_OOM, "engine: out of memory");
	{
		/* the model's counters so far (a start-up graph warm-up's) */
		rg_model_stats ms;

		rg_model_get_stats(w->model, &ms);
		rg_metrics_model_stats(e->p.metrics, w->index, &ms);
	}
	return RG_OK;
}

static void embed_worker_free(rg_worker *w)
{
	embed_bufs *eb = w->rs;

	if (!eb)
		return;
	free(eb->tokens);
	free(eb->types);
	free(eb->cu);
	free(eb->out);
	free(eb->hid);
	free(eb);
	w->rs = NULL;
}

/* The runner's run (engine_internal.h): one packed batch through rg_model_run_ex; the pooled
 * vectors (and per-token states for /embed_all) go to the seqs' owners, and into the cache. */
static rg_status embed_run(rg_worker *w, double *model_ms)
{
	embed_bufs *eb = w->rs;
	rg_engine *e = w->e;
	rg_sched_batch *b = &w->batch;
	double t0, delay;
	rg_status st;
	int n = b->n;

	bool typed = false, want_hidden = false;
	rg_model_batch mb;
	rg_run_options ro = {.raw = true, .hidden_out = NULL};

	eb->cu[0] = 0;
	for (int i = 0; i < n; i++) {
		const rg_job_seq *s = &w->b_job[i]->seqs[w->b_seq[i]];

		memcpy(eb->tokens + eb->cu[i], s->ids, (size_t)s->len * sizeof(int32_t));
		typed |= s->types != NULL;
		want_hidden |= s->hidden_out != NULL;
		eb->cu[i + 1] = eb->cu[i] + s->len;
	}
	/* per-token outputs for a batch holding an /embed_all sequence: (tokens, hidden) floats,
	 * grown once to what such batches need (at most max_batch_tokens rows) */
	if (want_hidden) {
		size_t need = (size_t)eb->cu[n] * (size_t)e->hidden_size;

		if (need > eb->hid_cap) {
			float *h = realloc(eb->hid, need * sizeof(float));

			if (h) {
				eb->hid = h;
				eb->hid_cap = need;
			}
		}
		ro.hidden_out = need <= eb->hid_cap ? eb->hid : NULL;
	}
	/* token types only for a batch that holds a sentence pair (type 0 for its single texts) */
	for (int i = 0; typed && i < n; i++) {
		const rg_job_seq *s = &w->b_job[i]->seqs[w->b_seq[i]];

		if (s->types)
			memcpy(eb->types + eb->cu[i], s->types, (size_t)s->len * sizeof(int32_t));
		else
			memset(eb->types + eb->cu[i], 0, (size_t)s->len * sizeof(int32_t));
	}
	mb = (rg_model_batch){eb->tokens, typed ? eb->types : NULL, eb->cu, n, &b->layout};
	delay = e->p.batch_delay_ms + e->p.token_delay_us * 1e-3 * b->computed_tokens;
	if (delay > 0) {
		struct timespec ts = { (time_t)(delay / 1e3), (long)(fmod(delay, 1e3) * 1e6) };

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	t0 = rg_now_ms();
	if (want_hidden && !ro.hidden_out)
		st = rg_errorf(RG_ERR_OOM, "no memory for the per-token outputs of %d tokens",
			       eb->cu[n]);
	else
		st = rg_model_run_ex(w->model, &mb, &ro, eb->out);
	*model_ms = rg_now_ms() - t0;
	rg_metrics_batch(e->p.metrics, w->index, n, b->real_tokens, b->computed_tokens,
			 st == RG_OK);
	{
		rg_model_stats ms;

		rg_model_get_stats(w->model, &ms); /* this thread runs the model */
		rg_metrics_model_stats(e->p.metrics, w->index, &ms);
	}
	if (st != RG_OK) {
		snprintf(w->err, sizeof(w->err), "%s: %s", rg_status_name(st), rg_last_error());
		fprintf(stderr, "ragged serve: batch of %d failed: %s\n", n, w->err);
		return st;
	}
	for (int i = 0; i < n; i++) {
		const rg_job_seq *s = &w->b_job[i]->seqs[w->b_seq[i]];

		memcpy(s->out, eb->out + (size_t)i * e->hidden, (size_t)e->hidden * sizeof(float));
		if (s->hidden_out)
			memcpy(s->hidden_out, eb->hid + (size_t)eb->cu[i] * e->hidden_size,
			       (size_t)s->len * e->hidden_size * sizeof(float));
		if (e->p.cache && !s->types)
			rg_cache_put(e->p.cache, s->ids, (size_t)s->len, s->out);
	}
	return RG_OK;
}

/* Latency (ms) of one packed batch of n sequences of len tokens on w's model, best of reps; -1
 * on a model error. Before the workers start (the model is the engine's alone). */
static double measure_packed(rg_worker *w, int n, int len, int reps)
{
	embed_bufs *eb = w->rs;
	int vocab = rg_model_get_info(w->model)->vocab_size;
	rg_model_batch mb = {eb->tokens, NULL, eb->cu, n, NULL};
	double best = INFINITY;

	eb->cu[0] = 0;
	for (int i = 0; i < n; i++)
		eb->cu[i + 1] = eb->cu[i] + len;
	for (int t = 0; t < n * len; t++)
		eb->tokens[t] = (int32_t)((100 + t % 1000) % vocab);
	for (int r = 0; r < reps; r++) {
		double t0 = rg_now_ms();

		if (rg_model_run(w->model, &mb, eb->out) != RG_OK)
			return -1;
		best = fmin(best, rg_now_ms() - t0);
	}
	return best;
}

/* Fit e->fit: from the DP cost table when there is one, else to packed batches measured now
 * (after one warm-up run): 1 x 16 tokens, 1 x L, L/16 x 16 (same tokens as 1 x L, 1/16 of its
 * attention pairs) and k x L (k <= 4), L = min(256, max_seq_len, max_batch_tokens), best of 2;
 * on the first device (the devices are taken to be alike). */
static void embed_fit(rg_engine *e)
{
	const rg_sched_params *sp = &e->p.sched;
	rg_worker *w = &e->w[0];
	int L = rg_model_get_info(w->model)->max_seq_len, n_pts = 0;
	int pts[4][2];
	double tok[4], pairs[4], ms[4];

	if (sp->cost) {
		if (rg_cost_model_from_table(sp->cost, &e->fit) != RG_OK)
			fprintf(stderr, "ragged serve: warning: no time estimates: %s\n",
				rg_last_error());
		return;
	}
	L = L < 256 ? L : 256;
	L = L < sp->max_batch_tokens ? L : sp->max_batch_tokens;
	if (L < 1)
		return;
	{
		int s16 = L < 16 ? L : 16, k = sp->max_batch_tokens / L, many = L / s16;

		k = k < 4 ? k : 4;
		k = k < sp->max_batch_requests ? k : sp->max_batch_requests;
		many = many < sp->max_batch_requests ? many : sp->max_batch_requests;
		pts[n_pts][0] = 1, pts[n_pts++][1] = s16;
		pts[n_pts][0] = 1, pts[n_pts++][1] = L;
		if (many > 1)
			pts[n_pts][0] = many, pts[n_pts++][1] = s16;
		if (k > 1)
			pts[n_pts][0] = k, pts[n_pts++][1] = L;
	}
	if (measure_packed(w, 1, L, 1) < 0)
		goto out_warn;
	for (int i = 0; i < n_pts; i++) {
		ms[i] = measure_packed(w, pts[i][0], pts[i][1], 2);
		if (ms[i] < 0)
			goto out_warn;
		tok[i] = (double)pts[i][0] * pts[i][1];
		pairs[i] = (double)pts[i][0] * pts[i][1] * pts[i][1];
	}
	if (rg_cost_model_fit(tok, pairs, ms, n_pts, &e->fit) == RG_OK)
		return;
out_warn:
	fprintf(stderr, "ragged serve: warning: cannot measure batch times (%s); no time "
		"estimates\n", rg_last_error());
	e->fit = (rg_cost_model){0, 0, 0};
}

const rg_engine_runner rg_engine_embed_runner = {
	.name = "embed",
	.worker_init = embed_worker_init,
	.worker_free = embed_worker_free,
	.run = embed_run,
	.fit = embed_fit,
};
