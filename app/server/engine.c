/* Engine of `ragged serve`: the shared bounded queue, admission, fair order, drain and the worker
 * loop (queue -> scheduler -> the runner's batch). What runs a batch on a model is the runner's
 * (engine_internal.h; the encoder's is engine_embed.c). See engine.h for the job contract. */
#include "server/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/error.h"

double rg_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- time estimates (lock held) ---------------------------------------------------------- */

/* The model the estimates use: the one refitted to the batches run, plus the test delays
 * (a simulated slow device). */
static rg_cost_model model_now(const rg_engine *e)
{
	return (rg_cost_model){e->fit.batch_ms + e->p.batch_delay_ms,
			       e->fit.token_ms + e->p.token_delay_us * 1e-3,
			       e->fit.pair_ms};
}

/* Estimated time (ms) of one sequence of len tokens inside a batch, without the batch's fixed
 * cost: what it adds to the batch. */
static double piece_ms(const rg_engine *e, const rg_cost_model *m, int len)
{
	return e->pad_ratio * (m->token_ms * len + m->pair_ms * (double)len * len);
}

/* The time budget of a batch: --max-batch-ms, but at least 10 times a batch's fixed cost, so
 * that cost stays under a tenth of the time (on a CPU it can be ~20 ms); 0: none. */
static double budget_ms(const rg_engine *e, const rg_cost_model *m)
{
	double b = e->p.sched.max_batch_ms;

	return b > 0 ? fmax(b, 10 * m->batch_ms) : 0;
}

/* The fair order's serial threshold (server/sched/fair.h): under admission by count, jobs of more than
 * one batch's work (the time budget; without one, a batch of max_batch_tokens tokens) run one
 * after another; under admission by time every job is its own flow (admission already keeps
 * every queued deadline). */
static double serial_ms(const rg_engine *e, const rg_cost_model *m)
{
	double b = budget_ms(e, m);

	if (e->p.admit_by_time)
		return 0;
	return b > 0 ? b : rg_cost_model_ms(m, e->p.sched.max_batch_tokens, 0);
}

/* Estimated time (ms) to run n_seqs sequences of `tokens` tokens and `pairs` attention pairs in
 * all: their pieces plus the fixed cost of the batches they need (by tokens, requests and the
 * time budget; one per sequence without batching). */
static double work_ms(const rg_engine *e, double tokens, double pairs, int n_seqs)
{
	const rg_sched_params *sp = &e->p.sched;
	rg_cost_model m = model_now(e);
	double marg, nb = 1, budget = budget_ms(e, &m);

	if (n_seqs <= 0)
		return 0;
	marg = e->pad_ratio * (m.token_ms * tokens + m.pair_ms * pairs);
	nb = fmax(nb, ceil(e->pad_ratio * tokens / sp->max_batch_tokens));
	nb = fmax(nb, ceil((double)n_seqs / sp->max_batch_requests));
	if (budget > m.batch_ms)
		nb = fmax(nb, ceil(marg / (budget - m.batch_ms)));
	if (sp->kind == RG_SCHED_NOBATCH)
		nb = n_seqs;
	return marg + nb * m.batch_ms;
}

/* True while some worker runs a batch (lock held). */
static bool any_busy(const rg_engine *e)
{
	for (int i = 0; i < e->n_w; i++)
		if (e->w[i].busy_until > 0)
			return true;
	return false;
}

/* Estimated time (ms) until the running batches and then `tokens` tokens, `pairs` attention
 * pairs in n_seqs queued sequences are done, on every device together (lock held): the work,
 * split evenly over the devices (the queue is shared; each takes the next batch when free). */
static double eta_ms(const rg_engine *e, double now, double tokens, double pairs, int n_seqs)
{
	double busy = 0;

	for (int i = 0; i < e->n_w; i++)
		busy += e->w[i].busy_until > now ? e->w[i].busy_until - now : 0;
	return (busy + work_ms(e, tokens, pairs, n_seqs)) / e->n_w;
}

/* A batch ran: refit the latency model to the batches run (core/cost_model.h
 * rg_cost_learner: the start-up fit only decides what they cannot) and refine the padding ratio
 * with exponential forgetting (weight 0.9 per batch: about the last ten batches). A failed batch
 * (model_ms < 0) teaches nothing. */
static void learn(rg_engine *e, const rg_sched_batch *b, double model_ms)
{
	rg_cost_model m;

	if (model_ms >= 0 && isfinite(model_ms)) {
		rg_cost_learner_add(&e->learner, b->computed_tokens, b->attn_pairs, model_ms);
		if (rg_cost_learner_fit(&e->learner, &m) == RG_OK && rg_cost_model_valid(&m))
			e->fit = m;
	}
	if (b->real_tokens > 0) {
		e->real_w = 0.9 * e->real_w + b->real_tokens;
		e->comp_w = 0.9 * e->comp_w + b->computed_tokens;
		e->pad_ratio = fmax(1, e->comp_w / e->real_w);
	}
	m = model_now(e);
	(void)rg_sched_set_time_budget(e->sched, budget_ms(e, &m), &m);
	e->fair.p.serial_ms = serial_ms(e, &m);
}

/* Tell an ended job (lock held): queue it for its done() once none of its seqs is in a running
 * batch (the batch still writes its outputs), exactly once. */
static void tell_when_idle(rg_engine *e, rg_job *job)
{
	if (job->state == RG_JOB_QUEUED || job->n_running > 0 || job->told)
		return;
	job->told = true;
	job->next_told = e->told;
	e->told = job;
}

/* End a queued job with st (lock held); no-op for a job already ended. */
static void job_finish(rg_engine *e, rg_job *job, rg_job_state st)
{
	if (job->state != RG_JOB_QUEUED)
		return;
	job->state = st;
	if (st != RG_JOB_DONE) /* its queued pieces go unserved */
		rg_fair_leave(&e->fair, job->fair_end);
	tell_when_idle(e, job);
}

/* Drop queue entries that were picked or whose job has ended (lock held). Keeps arrival order. */
static void queue_compact(rg_engine *e)
{
	int w = 0;

	for (int i = 0; i < e->n_q; i++) {
		if (e->q_take[i] || e->q_job[i]->state != RG_JOB_QUEUED) {
			double len = e->q_req[i].len;

			e->q_tokens -= len;
			e->q_pairs -= len * len;
			continue;
		}
		e->q_req[w] = e->q_req[i];
		e->q_job[w] = e->q_job[i];
		e->q_seq[w] = e->q_seq[i];
		e->q_ms[w] = e->q_ms[i];
		e->q_take[w] = false;
		w++;
	}
	e->n_q = w;
	if (w == 0)
		e->q_tokens = e->q_pairs = 0; /* no drift from the running sums */
}

/* Hand the told jobs to the teller thread (lock held, not released): one wake-up per batch,
 * and the worker goes on to its next batch at once. */
static void hand_to_teller(rg_engine *e)
{
	rg_job *job = e->told;

	if (!job)
		return;
	e->told = NULL;
	while (job) { /* onto to_tell; the order of done() calls is not part of the contract */
		rg_job *next = job->next_told;

		job->next_told = e->to_tell;
		e->to_tell = job;
		job = next;
	}
	pthread_cond_signal(&e->tell_cv);
}

/* The teller thread: calls done() on the jobs handed over, outside the lock (done may resume an
 * HTTP connection and free the job), until stopped with nothing left to tell. */
static void *teller_main(void *arg)
{
	rg_engine *e = arg;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		rg_job *job = e->to_tell;
		int n = 0;

		if (!job) {
			if (e->teller_stop)
				break;
			pthread_cond_wait(&e->tell_cv, &e->mu);
			continue;
		}
		e->to_tell = NULL;
		for (rg_job *j = job; j; j = j->next_told)
			n++;
		e->telling += n;
		pthread_mutex_unlock(&e->mu);
		while (job) {
			rg_job *next = job->next_told;

			job->done(job); /* last touch */
			job = next;
		}
		pthread_mutex_lock(&e->mu);
		e->telling -= n;
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* True when the peer closed (or reset) the connection: a read would return EOF or an error.
 * Pipelined bytes waiting to be read mean the client is alive. */
bool rg_client_gone(int fd)
{
	char c;
	ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r > 0)
		return false;
	if (r == 0)
		return true;
	return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* Expire past-deadline jobs and drop disconnected ones (lock held). */
static void queue_sweep(rg_engine *e, double now)
{
	uint64_t expired = 0, dropped = 0;
	bool poll = now - e->last_poll_ms >= e->p.disconnect_poll_ms;

	if (poll) {
		e->last_poll_ms = now;
		e->poll_gen++;
	}
	for (int i = 0; i < e->n_q; i++) {
		rg_job *job = e->q_job[i];

		if (job->state != RG_JOB_QUEUED)
			continue;
		if (job->deadline_ms <= now) {
			job_finish(e, job, RG_JOB_EXPIRED);
			expired++;
			continue;
		}
		/* Check each job's socket once per poll round, however many seqs it has queued. */
		if (poll && job->client_fd >= 0 && job->poll_gen != e->poll_gen) {
			job->poll_gen = e->poll_gen;
			if (rg_client_gone(job->client_fd)) {
				job_finish(e, job, RG_JOB_DROPPED);
				dropped++;
			}
		}
	}
	if (expired || dropped) {
		queue_compact(e);
		rg_metrics_expired(e->p.metrics, expired);
		rg_metrics_dropped(e->p.metrics, dropped);
	}
}

/* The batch of w ended with st after model_ms (lock held): count each seq done (or fail its job),
 * and tell the jobs that ended meanwhile and have no other seq running. */
static void settle_batch(rg_worker *w, rg_status st, double model_ms)
{
	rg_engine *e = w->e;
	int n = w->batch.n;

	for (int i = 0; i < n; i++) {
		rg_job *job = w->b_job[i];

		job->n_running--;
		if (job->state == RG_JOB_QUEUED && st != RG_OK) {
			snprintf(job->err, sizeof(job->err), "model: %.240s", w->err);
			job_finish(e, job, RG_JOB_FAILED);
		} else if (job->state == RG_JOB_QUEUED) {
			if (job->batch_size < n)
				job->batch_size = n;
			if (job->batch_gen != w->gen) { /* count this batch's time once per job */
				job->batch_gen = w->gen;
				job->inference_ms += model_ms;
			}
			if (--job->n_pending == 0)
				job_finish(e, job, RG_JOB_DONE);
		}
		tell_when_idle(e, job);
	}
}

/* End every queued job with st (lock held). */
static void finish_all(rg_engine *e, rg_job_state st)
{
	for (int i = 0; i < e->n_q; i++)
		job_finish(e, e->q_job[i], st);
	queue_compact(e);
}

/* Jobs by drain_at. */
static int cmp_job_left(const void *a, const void *b)
{
	const rg_job *x = *(rg_job *const *)a, *y = *(rg_job *const *)b;

	return (x->drain_at > y->drain_at) - (x->drain_at < y->drain_at);
}

/* Queue positions by their job's drain_at, then job, then the seq's place in its job. */
static int cmp_perm(const void *a, const void *b, void *arg)
{
	const rg_engine *e = arg;
	int i = *(const int *)a, j = *(const int *)b;
	const rg_job *x = e->q_job[i], *y = e->q_job[j];

	if (x->drain_at != y->drain_at)
		return x->drain_at < y->drain_at ? -1 : 1;
	if (x != y)
		return (uintptr_t)x < (uintptr_t)y ? -1 : 1;
	return (e->q_seq[i] > e->q_seq[j]) - (e->q_seq[i] < e->q_seq[j]);
}

/* Drain (lock held): past the end, end every queued job SHUTDOWN. Else order the queued jobs
 * by their remaining work, shortest first (the order that completes the most of them), keep
 * those estimated to finish by the end, end the others SHUTDOWN, and restamp the queue in that
 * order (stamps in the past, so a lazy policy does not wait). */
static void drain_plan(rg_engine *e, double now)
{
	rg_job **jobs = e->s_job;
	int n_jobs = 0, cut = 0;
	double ct = 0, cp = 0;
	int cs = 0;

	if (now >= e->drain_end) {
		finish_all(e, RG_JOB_SHUTDOWN);
		return;
	}
	for (int i = 0; i < e->n_q; i++) {
		rg_job *j = e->q_job[i];

		j->left_tokens = j->left_pairs = 0;
		j->left_seqs = 0;
	}
	for (int i = 0; i < e->n_q; i++) {
		rg_job *j = e->q_job[i];
		double len = e->q_req[i].len;

		if (j->left_seqs++ == 0)
			jobs[n_jobs++] = j;
		j->left_tokens += len;
		j->left_pairs += len * len;
	}
	for (int k = 0; k < n_jobs; k++) /* sort key: the job's own remaining work */
		jobs[k]->drain_at = work_ms(e, jobs[k]->left_tokens, jobs[k]->left_pairs,
					     jobs[k]->left_seqs);
	qsort(jobs, (size_t)n_jobs, sizeof(*jobs), cmp_job_left);
	for (int k = 0; k < n_jobs; k++) {
		rg_job *j = jobs[k];
		double end = now + eta_ms(e, now, ct + j->left_tokens, cp + j->left_pairs,
					  cs + j->left_seqs);

		if (end > e->drain_end) {
			job_finish(e, j, RG_JOB_SHUTDOWN);
			cut++;
			continue;
		}
		ct += j->left_tokens;
		cp += j->left_pairs;
		cs += j->left_seqs;
		j->drain_at = end;
	}
	if (cut)
		queue_compact(e);
	for (int i = 0; i < e->n_q; i++)
		e->s_perm[i] = i;
	qsort_r(e->s_perm, (size_t)e->n_q, sizeof(int), cmp_perm, e);
	for (int k = 0; k < e->n_q; k++) {
		int i = e->s_perm[k];

		e->s_req[k] = e->q_req[i];
		e->s_req[k].arrival_ms = now - e->p.sched.latency_budget_ms - 1 + k * 1e-6;
		e->s_job[k] = e->q_job[i];
		e->s_seq[k] = e->q_seq[i];
		e->s_ms[k] = e->q_ms[i];
	}
	memcpy(e->q_req, e->s_req, sizeof(*e->q_req) * (size_t)e->n_q);
	memcpy(e->q_job, e->s_job, sizeof(*e->q_job) * (size_t)e->n_q);
	memcpy(e->q_seq, e->s_seq, sizeof(*e->q_seq) * (size_t)e->n_q);
	memcpy(e->q_ms, e->s_ms, sizeof(*e->q_ms) * (size_t)e->n_q);
}

/* The measurement is complete (lock held): switch to the DP scheduler on its table and refit
 * the batch latency model from the table. On a scheduler error, warn and stay on the token
 * scheduler. */
static void switch_to_dp(rg_engine *e, const rg_cost_table *t)
{
	rg_sched_params sp = e->p.sched;
	rg_sched *dp;
	rg_cost_model fit, m;
	rg_status st;

	sp.cost = t;
	dp = rg_sched_create(&sp, &st);
	if (!dp) {
		fprintf(stderr, "ragged serve: warning: cannot switch to the dp scheduler: %s\n",
			rg_last_error());
		e->measure_failed = true;
		return;
	}
	rg_sched_free(e->sched);
	e->sched = dp;
	e->kind = RG_SCHED_DP;
	e->p.sched.cost = t;
	if (rg_cost_model_from_table(t, &fit) == RG_OK) {
		/* the table is a better prior than the start-up batches; what ran still counts */
		rg_cost_learner_set_prior(&e->learner, &fit, e->max_seq_len);
		if (rg_cost_learner_fit(&e->learner, &fit) == RG_OK && rg_cost_model_valid(&fit))
			e->fit = fit;
	}
	m = model_now(e);
	(void)rg_sched_set_time_budget(e->sched, budget_ms(e, &m), &m);
	e->fair.p.serial_ms = serial_ms(e, &m);
	fprintf(stderr, "ragged serve: scheduler switched to dp (cost table of %d cells)\n",
		e->cells_total);
}

/* The queue is empty: one run of the pending cost table's measurement (lock held on entry and
 * exit, released while the model runs). The batch test delay applies to a run as to a batch (a
 * simulated slow device), outside its measured time. */
static void measure_run(rg_engine *e)
{
	rg_cost_measure *c = e->measure;
	double delay = e->p.batch_delay_ms;
	rg_status st;

	pthread_mutex_unlock(&e->mu);
	if (delay > 0) {
		struct timespec ts = { (time_t)(delay / 1e3), (long)(fmod(delay, 1e3) * 1e6) };

		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	st = rg_cost_measure_step(c);
	pthread_mutex_lock(&e->mu);
	e->cells_done = rg_cost_measure_done(c);
	if (st != RG_OK) {
		fprintf(stderr, "ragged serve: warning: DP cost table measurement failed (%s: %s); "
			"staying on the token scheduler\n", rg_status_name(st), rg_last_error());
		e->measure = NULL;
		e->measure_failed = true;
		return;
	}
	if (rg_cost_measure_table(c)) {
		e->measure = NULL;
		switch_to_dp(e, rg_cost_measure_table(c));
	}
}

static void *worker_main(void *arg)
{
	rg_worker *w = arg;
	rg_engine *e = w->e;

	pthread_mutex_lock(&e->mu);
	while (!e->stop) {
		double now = rg_now_ms(), wake = INFINITY, model_ms = -1;
		rg_cost_model m;
		rg_status st;

		queue_sweep(e, now);
		if (e->draining)
			drain_plan(e, now);
		hand_to_teller(e);
		if (e->n_q == 0) {
			/* the cost table is measured on the first device (its model is the measure's) */
			if (e->measure && !e->draining && w->index == 0)
				measure_run(e);
			else
				pthread_cond_wait(&e->cv, &e->mu);
			continue;
		}
		st = rg_sched_pick(e->sched, e->q_req, e->n_q, now, &w->batch, &wake);
		if (st != RG_OK) {
			/* A scheduler error is a broken invariant: fail what is queued, keep serving. */
			fprintf(stderr, "ragged serve: scheduler: %s: %s\n", rg_status_name(st),
				rg_last_error());
			for (int i = 0; i < e->n_q; i++)
				snprintf(e->q_job[i]->err, sizeof(e->q_job[i]->err), "scheduler: %s",
					 rg_status_name(st));
			finish_all(e, RG_JOB_FAILED);
			continue;
		}
		if (w->batch.n == 0) {
			double until = fmin(wake, now + e->p.disconnect_poll_ms);
			double secs;
			struct timespec ts;

			if (e->draining)
				until = fmin(until, e->drain_end);
			secs = until / 1e3;
			ts = (struct timespec){ (time_t)secs, (long)((secs - floor(secs)) * 1e9) };
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
			continue;
		}
		m = model_now(e);
		w->busy_until = now + rg_cost_model_ms(&m, w->batch.computed_tokens,
						       w->batch.attn_pairs);
		if (e->draining && w->busy_until > e->drain_end) {
			/* the next batch would pass the drain's end: nothing more fits */
			w->busy_until = 0;
			finish_all(e, RG_JOB_SHUTDOWN);
			continue;
		}
		for (int i = 0; i < w->batch.n; i++) {
			int qi = w->batch.queue_idx[i];
			rg_job *job = e->q_job[qi];

			w->b_job[i] = job;
			w->b_seq[i] = e->q_seq[qi];
			e->q_take[qi] = true;
			rg_fair_served(&e->fair, e->q_ms[qi]);
			job->n_running++;
			if (!job->picked) {
				job->picked = true;
				job->queue_ms = now - job->arrival_ms;
			}
		}
		w->gen = ++e->batch_gen;
		queue_compact(e);
		if (e->n_q > 0 && e->n_w > 1)
			pthread_cond_signal(&e->cv); /* an idle device may take what is left */
		pthread_mutex_unlock(&e->mu);

		st = e->runner->run(w, &model_ms);

		pthread_mutex_lock(&e->mu);
		w->busy_until = 0;
		learn(e, &w->batch, model_ms);
		settle_batch(w, st, model_ms);
		queue_compact(e); /* failed jobs may still have queued seqs */
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* Set up worker w of engine e on model: the batch entries, then the runner's state. */
static rg_status worker_init(rg_engine *e, rg_worker *w, rg_model *model, int index)
{
	int bcap = e->p.sched.max_batch_requests;
	rg_status s;

	w->e = e;
	w->model = model;
	w->index = index;
	if ((s = rg_sched_batch_init(&w->batch, bcap)) != RG_OK)
		return s;
	w->b_job = calloc((size_t)bcap, sizeof(*w->b_job));
	w->b_seq = calloc((size_t)bcap, sizeof(*w->b_seq));
	if (!w->b_job || !w->b_seq)
		return rg_errorf(RG_ERR_OOM, "engine: out of memory");
	return e->runner->worker_init(w);
}

static void worker_free(rg_engine *e, rg_worker *w)
{
	e->runner->worker_free(w);
	rg_sched_batch_free(&w->batch);
	free(w->b_job);
	free(w->b_seq);
}

rg_engine *rg_engine_create(rg_model *const *models, int n_models, const rg_engine_params *p,
			    rg_status *st)
{
	rg_engine *e = calloc(1, sizeof(*e));
	rg_status s;
	pthread_condattr_t ca;
	const rg_model_info *i0;

	if (!e) {
		s = rg_errorf(RG_ERR_OOM, "engine: out of memory");
		goto out;
	}
	e->runner = p && p->runner ? p->runner : &rg_engine_embed_runner;
	if (n_models < 1 || !models) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "engine: no model");
		goto out_free;
	}
	i0 = rg_model_get_info(models[0]);
	for (int i = 1; i < n_models; i++) {
		const rg_model_info *mi = rg_model_get_info(models[i]);

		if (mi->output_dim != i0->output_dim || mi->hidden_size != i0->hidden_size ||
		    mi->max_seq_len != i0->max_seq_len) {
			s = rg_errorf(RG_ERR_INVALID_INPUT, "engine: model %d is not model 0's "
				      "(output_dim, hidden_size or max_seq_len differ)", i);
			goto out_free;
		}
	}
	e->hidden = i0->output_dim;
	e->hidden_size = i0->hidden_size;
	e->max_seq_len = i0->max_seq_len;
	e->p = *p;
	if (e->p.disconnect_poll_ms <= 0)
		e->p.disconnect_poll_ms = 10;
	if (p->max_queue < 1 || !p->metrics) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "engine: max_queue must be >= 1");
		goto out_free;
	}
	e->kind = p->sched.kind;
	if (p->measure) {
		/* serve with the token scheduler until the DP table is measured */
		rg_sched_params tp = p->sched;

		if (p->sched.kind != RG_SCHED_DP || p->sched.cost) {
			s = rg_errorf(RG_ERR_INVALID_INPUT, "engine: a background measurement needs "
				      "the dp scheduler without a cost table");
			goto out_free;
		}
		tp.kind = RG_SCHED_TOKEN;
		tp.lazy = false;
		e->kind = RG_SCHED_TOKEN;
		e->measure = p->measure;
		e->cells_done = rg_cost_measure_done(p->measure);
		e->cells_total = rg_cost_measure_total(p->measure);
		e->sched = rg_sched_create(&tp, &s);
	} else {
		e->sched = rg_sched_create(&p->sched, &s);
	}
	if (!e->sched)
		goto out_free;
	e->max_len = rg_sched_max_len(e->sched);
	e->cap_q = p->max_queue;
	e->q_req = calloc((size_t)e->cap_q, sizeof(*e->q_req));
	e->q_job = calloc((size_t)e->cap_q, sizeof(*e->q_job));
	e->q_seq = calloc((size_t)e->cap_q, sizeof(*e->q_seq));
	e->q_take = calloc((size_t)e->cap_q, sizeof(*e->q_take));
	e->s_req = calloc((size_t)e->cap_q, sizeof(*e->s_req));
	e->s_job = calloc((size_t)e->cap_q, sizeof(*e->s_job));
	e->s_seq = calloc((size_t)e->cap_q, sizeof(*e->s_seq));
	e->s_perm = calloc((size_t)e->cap_q, sizeof(*e->s_perm));
	e->q_ms = calloc((size_t)e->cap_q, sizeof(*e->q_ms));
	e->s_ms = calloc((size_t)e->cap_q, sizeof(*e->s_ms));
	e->s_tag = calloc((size_t)e->cap_q, sizeof(*e->s_tag));
	e->w = calloc((size_t)n_models, sizeof(*e->w));
	if (!e->q_req || !e->q_job || !e->q_seq || !e->q_take || !e->s_req || !e->s_job ||
	    !e->s_seq || !e->s_perm || !e->q_ms || !e->s_ms || !e->s_tag ||
	    !e->w) {
		s = rg_errorf(RG_ERR_OOM, "engine: out of memory");
		goto out_free;
	}
	e->n_w = n_models;
	for (int i = 0; i < n_models; i++)
		if ((s = worker_init(e, &e->w[i], models[i], i)) != RG_OK)
			goto out_free;
	e->pad_ratio = 1;
	e->runner->fit(e);
	rg_cost_learner_init(&e->learner, &e->fit, e->max_seq_len);
	{
		rg_cost_model m = model_now(e);
		rg_fair_params fp = {serial_ms(e, &m)};

		(void)rg_sched_set_time_budget(e->sched, budget_ms(e, &m), &m);
		if ((s = rg_fair_init(&e->fair, &fp, rg_now_ms())) != RG_OK)
			goto out_free;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_cond_init(&e->tell_cv, &ca);
	pthread_condattr_destroy(&ca);
	e->started = true;
	if (pthread_create(&e->teller, NULL, teller_main, e) != 0) {
		s = rg_errorf(RG_ERR_OOM, "engine: cannot start the telling thread");
		goto out_free;
	}
	e->teller_started = true;
	pthread_setname_np(e->teller, "rg-teller");
	for (int i = 0; i < n_models; i++) {
		if (pthread_create(&e->w[i].thread, NULL, worker_main, &e->w[i]) != 0) {
			s = rg_errorf(RG_ERR_OOM, "engine: cannot start worker thread %d", i);
			goto out_free; /* rg_engine_free stops the ones started */
		}
		e->w[i].started = true;
		{
			/* named for per-thread CPU accounting (top -H, /proc/PID/task/TID/comm,
			 * bench/serving/short_requests_cpu.py); at most 15 characters */
			char name[32];

			snprintf(name, sizeof(name), "rg-%.6s-%d", e->runner->name, i);
			name[15] = '\0';
			pthread_setname_np(e->w[i].thread, name);
		}
	}
	if (st)
		*st = RG_OK;
	return e;
out_free:
	rg_engine_free(e);
out:
	if (st)
		*st = s;
	return NULL;
}

void rg_engine_stop(rg_engine *e)
{
	if (!e || !e->started || e->joined)
		return;
	pthread_mutex_lock(&e->mu);
	e->stop = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	for (int i = 0; i < e->n_w; i++)
		if (e->w[i].started)
			pthread_join(e->w[i].thread, NULL);
	e->joined = true;
	/* The workers are gone (no batch runs) and submit refuses (stop is set): end what is still
	 * queued, hand every ended job to the teller and wait until it has told them all. */
	pthread_mutex_lock(&e->mu);
	finish_all(e, RG_JOB_SHUTDOWN);
	hand_to_teller(e);
	e->teller_stop = true;
	pthread_cond_signal(&e->tell_cv);
	pthread_mutex_unlock(&e->mu);
	if (e->teller_started)
		pthread_join(e->teller, NULL);
	e->teller_started = false;
}

void rg_engine_drain(rg_engine *e, double end_ms)
{
	if (!e || !e->started)
		return;
	pthread_mutex_lock(&e->mu);
	if (!e->draining || end_ms < e->drain_end)
		e->drain_end = end_ms;
	e->draining = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

bool rg_engine_idle(rg_engine *e)
{
	bool idle;

	if (!e || !e->started)
		return true;
	pthread_mutex_lock(&e->mu);
	/* and every ended job told (its done() returned) */
	idle = e->n_q == 0 && !any_busy(e) && !e->told && !e->to_tell && e->telling == 0;
	pthread_mutex_unlock(&e->mu);
	return idle;
}

rg_cost_model rg_engine_cost_model(rg_engine *e)
{
	rg_cost_model m;

	pthread_mutex_lock(&e->mu);
	m = model_now(e);
	pthread_mutex_unlock(&e->mu);
	return m;
}

double rg_engine_time_budget_ms(rg_engine *e)
{
	rg_cost_model m;
	double b;

	pthread_mutex_lock(&e->mu);
	m = model_now(e);
	b = budget_ms(e, &m);
	pthread_mutex_unlock(&e->mu);
	return b;
}

void rg_engine_free(rg_engine *e)
{
	if (!e)
		return;
	if (e->started) {
		rg_engine_stop(e);
		pthread_cond_destroy(&e->tell_cv);
		pthread_cond_destroy(&e->cv);
		pthread_mutex_destroy(&e->mu);
	}
	rg_sched_free(e->sched);
	for (int i = 0; e->w && i < e->n_w; i++)
		worker_free(e, &e->w[i]);
	free(e->w);
	free(e->q_req);
	free(e->q_job);
	free(e->q_seq);
	free(e->q_take);
	free(e->s_req);
	free(e->s_job);
	free(e->s_seq);
	free(e->s_perm);
	free(e->q_ms);
	free(e->s_ms);
	free(e->s_tag);
	rg_fair_free(&e->fair);
	free(e);
}

/* Queue the seqs of job (lock held, room checked): stamp them with their finish tags in the
 * fair order (server/sched/fair.h: the job starts at the fluid server's virtual time, each piece adds
 * its estimated time) and merge them into the stamp-ordered queue. RG_ERR_OOM: nothing queued. */
static rg_status queue_insert(rg_engine *e, rg_job *job, double now)
{
	rg_cost_model m = model_now(e);
	int n = job->n_seqs, i = e->n_q - 1, w = e->n_q + n - 1;
	rg_status st;

	for (int k = 0; k < n; k++)
		e->s_ms[k] = piece_ms(e, &m, job->seqs[k].len);
	st = rg_fair_stamp(&e->fair, now, e->s_ms, n, e->s_tag, &job->fair_end);
	if (st != RG_OK)
		return st;
	for (int k = 0; k < n; k++) {
		int len = job->seqs[k].len;

		e->s_req[k] = (rg_sched_req){e->next_id++, len, e->s_tag[k], job->deadline_ms};
		e->q_tokens += len;
		e->q_pairs += (double)len * len;
	}
	for (int k = n - 1; k >= 0; w--) { /* merge from the back; equal stamps: queued first */
		if (i >= 0 && e->q_req[i].arrival_ms > e->s_req[k].arrival_ms) {
			e->q_req[w] = e->q_req[i];
			e->q_job[w] = e->q_job[i];
			e->q_seq[w] = e->q_seq[i];
			e->q_ms[w] = e->q_ms[i];
			e->q_take[w] = false;
			i--;
		} else {
			e->q_req[w] = e->s_req[k];
			e->q_job[w] = job;
			e->q_seq[w] = k;
			e->q_ms[w] = e->s_ms[k];
			e->q_take[w] = false;
			k--;
		}
	}
	e->n_q += n;
	return RG_OK;
}

/* Admission by time (lock held): RG_JOB_ADMITTED, or why not with job->retry_after_ms. The
 * queued work, the running batch and this job's own work must end within the least slack of
 * this job and every queued one (the engine is work-conserving: everything queued is done by
 * then, whatever the order), less a margin for the estimates' error when others are queued
 * (one time budget, at most a tenth of the request timeout).
 * Retry-After: when the same request would fit if nothing else arrived. The devices work
 * through the queue meanwhile, so its own deadline holds once total + margin - wait <= its
 * timeout; a queued job whose slack binds (below total + margin) is gone when it ends (at the
 * latest when the queue is done) or when its deadline passes, whichever comes first. */
static rg_job_refusal admit_by_time(rg_engine *e, rg_job *job, double tokens, double pairs)
{
	double now = rg_now_ms(), slack = job->deadline_ms - now, total, margin = 0, queued, wait;
	double timeout = job->deadline_ms - job->arrival_ms;
	rg_cost_model m = model_now(e);

	if (job->est_ms > slack)
		return RG_JOB_TOO_MUCH;
	if (e->n_q > 0 || any_busy(e))
		margin = fmin(budget_ms(e, &m), 0.1 * timeout);
	for (int i = 0; i < e->n_q; i++)
		slack = fmin(slack, e->q_req[i].deadline_ms - now);
	total = eta_ms(e, now, e->q_tokens + tokens, e->q_pairs + pairs, e->n_q + job->n_seqs);
	if (total + margin <= slack)
		return RG_JOB_ADMITTED;
	queued = eta_ms(e, now, e->q_tokens, e->q_pairs, e->n_q);
	wait = total + margin - timeout;
	for (int i = 0; i < e->n_q; i++) {
		double sl = e->q_req[i].deadline_ms - now;

		if (sl < total + margin)
			wait = fmax(wait, fmin(sl, queued));
	}
	job->retry_after_ms = fmax(0, wait);
	return RG_JOB_NO_TIME;
}

rg_status rg_engine_submit(rg_engine *e, rg_job *job)
{
	rg_status st = RG_OK;
	double tokens = 0, pairs = 0;

	job->refusal = RG_JOB_ADMITTED;
	job->est_ms = job->retry_after_ms = 0;
	if (job->n_seqs < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "job without sequences");
	for (int i = 0; i < job->n_seqs; i++) {
		if (job->seqs[i].len < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "empty sequence");
		if (job->seqs[i].len > e->max_len)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "input %d has %d tokens, more than the %d the scheduler "
					 "can place", i, job->seqs[i].len, e->max_len);
		tokens += job->seqs[i].len;
		pairs += (double)job->seqs[i].len * job->seqs[i].len;
	}
	job->state = RG_JOB_QUEUED;
	job->err[0] = '\0';
	job->queue_ms = job->inference_ms = 0;
	job->batch_size = 0;
	job->n_pending = job->n_seqs;
	job->n_running = 0;
	job->told = false;
	job->next_told = NULL;
	job->picked = false;
	job->poll_gen = job->batch_gen = 0;
	pthread_mutex_lock(&e->mu);
	job->est_ms = work_ms(e, tokens, pairs, job->n_seqs);
	if (e->stop || e->draining) {
		job->refusal = RG_JOB_STOPPING;
		st = rg_errorf(RG_ERR_BUSY, "server is shutting down");
		goto out_unlock;
	}
	if (e->n_q + job->n_seqs > e->cap_q) {
		job->refusal = RG_JOB_QUEUE_FULL;
		/* room for n_seqs more: about that share of the queued work */
		job->retry_after_ms = eta_ms(e, rg_now_ms(), e->q_tokens, e->q_pairs, e->n_q) *
				      fmin(1, (double)(e->n_q + job->n_seqs - e->cap_q) / e->n_q);
		st = rg_errorf(RG_ERR_BUSY, "queue full (%d sequences waiting, limit %d)", e->n_q,
			       e->cap_q);
		goto out_unlock;
	}
	if (e->p.admit_by_time) {
		job->refusal = admit_by_time(e, job, tokens, pairs);
		if (job->refusal == RG_JOB_TOO_MUCH) {
			st = rg_errorf(RG_ERR_BUSY, "%d inputs of %.0f tokens need about %.0f ms, "
				       "more than the request timeout of %.0f ms allows: send fewer "
				       "or shorter inputs per request", job->n_seqs, tokens,
				       job->est_ms, job->deadline_ms - job->arrival_ms);
			goto out_unlock;
		}
		if (job->refusal == RG_JOB_NO_TIME) {
			st = rg_errorf(RG_ERR_BUSY, "overloaded: the queued work (about %.0f ms) would "
				       "not end before a deadline; retry in %.1f s",
				       eta_ms(e, rg_now_ms(), e->q_tokens, e->q_pairs, e->n_q),
				       ceil(job->retry_after_ms / 1e3));
			goto out_unlock;
		}
	}
	if ((st = queue_insert(e, job, rg_now_ms())) != RG_OK)
		goto out_unlock;
	pthread_cond_signal(&e->cv);
out_unlock:
	pthread_mutex_unlock(&e->mu);
	return st;
}

void rg_engine_sched_state(rg_engine *e, char *buf, size_t n, int *done, int *total)
{
	pthread_mutex_lock(&e->mu);
	if (e->measure)
		snprintf(buf, n, "token (dp measuring %d/%d)", e->cells_done, e->cells_total);
	else if (e->measure_failed)
		snprintf(buf, n, "token (dp measurement failed)");
	else
		snprintf(buf, n, "%s", rg_sched_kind_name(e->kind));
	if (done)
		*done = e->cells_done;
	if (total)
		*total = e->cells_total;
	pthread_mutex_unlock(&e->mu);
}

int rg_engine_queue_depth(rg_engine *e)
{
	int n;

	pthread_mutex_lock(&e->mu);
	n = e->n_q;
	pthread_mutex_unlock(&e->mu);
	return n;
}

int rg_engine_max_len(const rg_engine *e)
{
	return e->max_len;
}
