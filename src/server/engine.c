/* Engine worker of `ragged serve`: bounded queue -> scheduler -> rg_model_run.
 * See engine.h for the job contract. */
#include "server/engine.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/error.h"

struct rg_engine {
	rg_model *model;
	int hidden;             /* floats per sequence: rg_model_info.output_dim */
	rg_engine_params p;
	rg_sched *sched;
	rg_sched_batch batch;
	int max_len;

	pthread_t thread;
	bool started, joined;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;

	/* Queue of sequences in arrival order (guarded by mu). Entry i is seq q_seq[i] of q_job[i]. */
	int n_q, cap_q;
	rg_sched_req *q_req;   /* (cap_q) what the scheduler sees */
	rg_job **q_job;        /* (cap_q) */
	int *q_seq;            /* (cap_q) */
	bool *q_take;          /* (cap_q) scratch: picked this round */
	uint64_t next_id;

	/* Worker-only state. */
	int32_t *tokens;       /* (max_batch_tokens) packed ids of the batch */
	int32_t *types;        /* (max_batch_tokens) packed token types of the batch */
	int32_t *cu;           /* (batch cap + 1) */
	float *out;            /* (batch cap, hidden) */
	rg_job **b_job;        /* (batch cap) */
	int *b_seq;            /* (batch cap) */
	float *hid;            /* (hid_cap) per-token hidden states of a batch that asked for
			        * them (/embed_all); allocated at the first such batch */
	size_t hid_cap;
	int hidden_size;
	rg_job **finished;     /* (cap_q + batch cap) jobs to call done on, each once */
	int n_finished;
	double last_poll_ms;
	uint64_t poll_gen, batch_gen;
};

double rg_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* End a queued job (worker thread, lock held or worker-only): record it for done(). */
static void job_finish(rg_engine *e, rg_job *job, rg_job_state st)
{
	if (job->state != RG_JOB_QUEUED)
		return;
	job->state = st;
	e->finished[e->n_finished++] = job;
}

/* Drop queue entries that were picked or whose job has ended (lock held). Keeps arrival order. */
static void queue_compact(rg_engine *e)
{
	int w = 0;

	for (int i = 0; i < e->n_q; i++) {
		if (e->q_take[i] || e->q_job[i]->state != RG_JOB_QUEUED)
			continue;
		e->q_req[w] = e->q_req[i];
		e->q_job[w] = e->q_job[i];
		e->q_seq[w] = e->q_seq[i];
		e->q_take[w] = false;
		w++;
	}
	e->n_q = w;
}

/* Call done() on every finished job (lock NOT held: done may resume an HTTP connection). */
static void flush_finished(rg_engine *e)
{
	for (int i = 0; i < e->n_finished; i++) {
		rg_job *job = e->finished[i];

		job->done(job); /* last touch */
	}
	e->n_finished = 0;
}

/* True when the peer closed (or reset) the connection: a read would return EOF or an error.
 * Pipelined bytes waiting to be read mean the client is alive. */
static bool client_gone(int fd)
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
			if (client_gone(job->client_fd)) {
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

/* Run the batch e->batch whose entries are e->b_job/b_seq (worker thread, lock NOT held). */
static void run_batch(rg_engine *e)
{
	rg_sched_batch *b = &e->batch;
	double t0, ms;
	rg_status st;
	int n = b->n;

	bool typed = false, want_hidden = false;
	rg_model_batch mb;
	rg_run_options ro = {.raw = true, .hidden_out = NULL};

	e->cu[0] = 0;
	for (int i = 0; i < n; i++) {
		const rg_job_seq *s = &e->b_job[i]->seqs[e->b_seq[i]];

		memcpy(e->tokens + e->cu[i], s->ids, (size_t)s->len * sizeof(int32_t));
		typed |= s->types != NULL;
		want_hidden |= s->hidden_out != NULL;
		e->cu[i + 1] = e->cu[i] + s->len;
	}
	/* per-token outputs for a batch holding an /embed_all sequence: (tokens, hidden) floats,
	 * grown once to what such batches need (at most max_batch_tokens rows) */
	if (want_hidden) {
		size_t need = (size_t)e->cu[n] * (size_t)e->hidden_size;

		if (need > e->hid_cap) {
			float *h = realloc(e->hid, need * sizeof(float));

			if (h) {
				e->hid = h;
				e->hid_cap = need;
			}
		}
		ro.hidden_out = need <= e->hid_cap ? e->hid : NULL;
	}
	/* token types only for a batch that holds a sentence pair (type 0 for its single texts) */
	for (int i = 0; typed && i < n; i++) {
		const rg_job_seq *s = &e->b_job[i]->seqs[e->b_seq[i]];

		if (s->types)
			memcpy(e->types + e->cu[i], s->types, (size_t)s->len * sizeof(int32_t));
		else
			memset(e->types + e->cu[i], 0, (size_t)s->len * sizeof(int32_t));
	}
	mb = (rg_model_batch){e->tokens, typed ? e->types : NULL, e->cu, n, &b->layout};
	if (e->p.batch_delay_ms > 0) {
		struct timespec ts = { (time_t)(e->p.batch_delay_ms / 1e3),
				       (long)(fmod(e->p.batch_delay_ms, 1e3) * 1e6) };
		nanosleep(&ts, NULL);
	}
	t0 = rg_now_ms();
	if (want_hidden && !ro.hidden_out)
		st = rg_errorf(RG_ERR_OOM, "no memory for the per-token outputs of %d tokens",
			       e->cu[n]);
	else
		st = rg_model_run_ex(e->model, &mb, &ro, e->out);
	ms = rg_now_ms() - t0;
	rg_metrics_batch(e->p.metrics, n, b->real_tokens, b->computed_tokens, st == RG_OK);
	e->batch_gen++;
	if (st != RG_OK)
		fprintf(stderr, "ragged serve: batch of %d failed: %s: %s\n", n, rg_status_name(st),
			rg_last_error());
	for (int i = 0; i < n; i++) {
		rg_job *job = e->b_job[i];
		const rg_job_seq *s = &job->seqs[e->b_seq[i]];

		if (job->state != RG_JOB_QUEUED)
			continue;
		if (st != RG_OK) {
			snprintf(job->err, sizeof(job->err), "model: %s: %s", rg_status_name(st),
				 rg_last_error());
			job_finish(e, job, RG_JOB_FAILED);
			continue;
		}
		memcpy(s->out, e->out + (size_t)i * e->hidden, (size_t)e->hidden * sizeof(float));
		if (s->hidden_out)
			memcpy(s->hidden_out, e->hid + (size_t)e->cu[i] * e->hidden_size,
			       (size_t)s->len * e->hidden_size * sizeof(float));
		if (e->p.cache && !s->types)
			rg_cache_put(e->p.cache, s->ids, (size_t)s->len, s->out);
		if (job->batch_size < n)
			job->batch_size = n;
		if (job->batch_gen != e->batch_gen) { /* count this batch's time once per job */
			job->batch_gen = e->batch_gen;
			job->inference_ms += ms;
		}
		if (--job->n_pending == 0)
			job_finish(e, job, RG_JOB_DONE);
	}
}

static void *worker_main(void *arg)
{
	rg_engine *e = arg;

	pthread_mutex_lock(&e->mu);
	while (!e->stop) {
		double now = rg_now_ms(), wake = INFINITY;
		rg_status st;

		queue_sweep(e, now);
		if (e->n_finished) {
			pthread_mutex_unlock(&e->mu);
			flush_finished(e);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		if (e->n_q == 0) {
			pthread_cond_wait(&e->cv, &e->mu);
			continue;
		}
		st = rg_sched_pick(e->sched, e->q_req, e->n_q, now, &e->batch, &wake);
		if (st != RG_OK) {
			/* A scheduler error is a broken invariant: fail what is queued, keep serving. */
			fprintf(stderr, "ragged serve: scheduler: %s: %s\n", rg_status_name(st),
				rg_last_error());
			for (int i = 0; i < e->n_q; i++) {
				snprintf(e->q_job[i]->err, sizeof(e->q_job[i]->err), "scheduler: %s",
					 rg_status_name(st));
				job_finish(e, e->q_job[i], RG_JOB_FAILED);
			}
			queue_compact(e);
			continue;
		}
		if (e->batch.n == 0) {
			double until = fmin(wake, now + e->p.disconnect_poll_ms);
			double secs = until / 1e3;
			struct timespec ts = { (time_t)secs, (long)((secs - floor(secs)) * 1e9) };

			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
			continue;
		}
		for (int i = 0; i < e->batch.n; i++) {
			int qi = e->batch.queue_idx[i];
			rg_job *job = e->q_job[qi];

			e->b_job[i] = job;
			e->b_seq[i] = e->q_seq[qi];
			e->q_take[qi] = true;
			if (!job->picked) {
				job->picked = true;
				job->queue_ms = now - job->arrival_ms;
			}
		}
		queue_compact(e);
		pthread_mutex_unlock(&e->mu);

		run_batch(e);

		pthread_mutex_lock(&e->mu);
		queue_compact(e); /* failed jobs may still have queued seqs */
		pthread_mutex_unlock(&e->mu);
		flush_finished(e);
		pthread_mutex_lock(&e->mu);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

rg_engine *rg_engine_create(rg_model *model, const rg_engine_params *p, rg_status *st)
{
	rg_engine *e = calloc(1, sizeof(*e));
	rg_status s;
	pthread_condattr_t ca;
	int bcap;

	if (!e) {
		s = rg_errorf(RG_ERR_OOM, "engine: out of memory");
		goto out;
	}
	e->model = model;
	e->hidden = rg_model_get_info(model)->output_dim;
	e->hidden_size = rg_model_get_info(model)->hidden_size;
	e->p = *p;
	if (e->p.disconnect_poll_ms <= 0)
		e->p.disconnect_poll_ms = 10;
	if (p->max_queue < 1 || !p->metrics) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "engine: max_queue must be >= 1");
		goto out_free;
	}
	e->sched = rg_sched_create(&p->sched, &s);
	if (!e->sched)
		goto out_free;
	bcap = p->sched.max_batch_requests;
	if ((s = rg_sched_batch_init(&e->batch, bcap)) != RG_OK)
		goto out_free;
	e->max_len = rg_sched_max_len(e->sched);
	e->cap_q = p->max_queue;
	e->q_req = calloc((size_t)e->cap_q, sizeof(*e->q_req));
	e->q_job = calloc((size_t)e->cap_q, sizeof(*e->q_job));
	e->q_seq = calloc((size_t)e->cap_q, sizeof(*e->q_seq));
	e->q_take = calloc((size_t)e->cap_q, sizeof(*e->q_take));
	e->tokens = malloc((size_t)p->sched.max_batch_tokens * sizeof(int32_t));
	e->types = malloc((size_t)p->sched.max_batch_tokens * sizeof(int32_t));
	e->cu = malloc(((size_t)bcap + 1) * sizeof(int32_t));
	e->out = malloc((size_t)bcap * (size_t)e->hidden * sizeof(float));
	e->b_job = calloc((size_t)bcap, sizeof(*e->b_job));
	e->b_seq = calloc((size_t)bcap, sizeof(*e->b_seq));
	e->finished = calloc((size_t)e->cap_q + (size_t)bcap, sizeof(*e->finished));
	if (!e->q_req || !e->q_job || !e->q_seq || !e->q_take || !e->tokens || !e->types || !e->cu ||
	    !e->out ||
	    !e->b_job || !e->b_seq || !e->finished) {
		s = rg_errorf(RG_ERR_OOM, "engine: out of memory");
		goto out_free;
	}
	pthread_mutex_init(&e->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&e->thread, NULL, worker_main, e) != 0) {
		s = rg_errorf(RG_ERR_OOM, "engine: cannot start the worker thread");
		pthread_cond_destroy(&e->cv);
		pthread_mutex_destroy(&e->mu);
		goto out_free;
	}
	e->started = true;
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
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	e->joined = true;
	/* The worker is gone and submit refuses (stop is set): end what is still queued. */
	pthread_mutex_lock(&e->mu);
	for (int i = 0; i < e->n_q; i++)
		job_finish(e, e->q_job[i], RG_JOB_SHUTDOWN);
	e->n_q = 0;
	pthread_mutex_unlock(&e->mu);
	flush_finished(e);
}

void rg_engine_free(rg_engine *e)
{
	if (!e)
		return;
	if (e->started) {
		rg_engine_stop(e);
		pthread_cond_destroy(&e->cv);
		pthread_mutex_destroy(&e->mu);
	}
	rg_sched_free(e->sched);
	rg_sched_batch_free(&e->batch);
	free(e->q_req);
	free(e->q_job);
	free(e->q_seq);
	free(e->q_take);
	free(e->tokens);
	free(e->types);
	free(e->cu);
	free(e->out);
	free(e->hid);
	free(e->b_job);
	free(e->b_seq);
	free(e->finished);
	free(e);
}

rg_status rg_engine_submit(rg_engine *e, rg_job *job)
{
	rg_status st = RG_OK;

	if (job->n_seqs < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "job without sequences");
	for (int i = 0; i < job->n_seqs; i++) {
		if (job->seqs[i].len < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT, "empty sequence");
		if (job->seqs[i].len > e->max_len)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "input %d has %d tokens, more than the %d the scheduler "
					 "can place", i, job->seqs[i].len, e->max_len);
	}
	job->state = RG_JOB_QUEUED;
	job->err[0] = '\0';
	job->queue_ms = job->inference_ms = 0;
	job->batch_size = 0;
	job->n_pending = job->n_seqs;
	job->picked = false;
	job->poll_gen = job->batch_gen = 0;
	pthread_mutex_lock(&e->mu);
	if (e->stop || e->n_q + job->n_seqs > e->cap_q) {
		st = rg_errorf(RG_ERR_BUSY, "queue full (%d sequences waiting, limit %d)", e->n_q,
			       e->cap_q);
		goto out_unlock;
	}
	for (int i = 0; i < job->n_seqs; i++) {
		rg_sched_req *r = &e->q_req[e->n_q];

		r->id = e->next_id++;
		r->len = job->seqs[i].len;
		r->arrival_ms = job->arrival_ms;
		r->deadline_ms = job->deadline_ms;
		e->q_job[e->n_q] = job;
		e->q_seq[e->n_q] = i;
		e->q_take[e->n_q] = false;
		e->n_q++;
	}
	pthread_cond_signal(&e->cv);
out_unlock:
	pthread_mutex_unlock(&e->mu);
	return st;
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
