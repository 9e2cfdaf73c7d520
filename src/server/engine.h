/* Engine of `ragged serve`: one worker thread per model (device) that owns a bounded queue of
 * sequences, asks a scheduler (src/sched) for the next batch, runs rg_model_run_ex on it and
 * hands each vector back to the job that queued it.
 *
 * A job is one HTTP request's uncached inputs. Lifecycle (the engine's side of the contract):
 *   submit  -> QUEUED: the engine borrows the job (and its seqs) until it calls job->done.
 *   the worker either computes every seq (DONE), or ends the job early: FAILED (model error),
 *   EXPIRED (deadline passed before all of its seqs ran), DROPPED (client socket closed while
 *   queued), SHUTDOWN (engine freed while queued). In every case job->done(job) is called exactly
 *   once, from the worker thread (or from rg_engine_free), after the engine's last access to the
 *   job: the callback may free it. The engine never touches a job after done.
 * Only the worker thread mutates a queued job, so there is no per-job lock. */
#ifndef RG_SERVER_ENGINE_H
#define RG_SERVER_ENGINE_H
#include <stdbool.h>
#include <stdint.h>
#include "ragged.h"
#include "sched/sched.h"
#include "server/cache.h"
#include "server/metrics.h"

typedef enum rg_job_state {
	RG_JOB_QUEUED = 0,
	RG_JOB_DONE,
	RG_JOB_FAILED,
	RG_JOB_EXPIRED,
	RG_JOB_DROPPED,
	RG_JOB_SHUTDOWN,
} rg_job_state;

typedef struct rg_job_seq {
	const int32_t *ids;   /* (len) token ids, borrowed from the job's owner */
	const int32_t *types; /* (len) token type ids (sentence pairs), borrowed; NULL: all 0 */
	int len;              /* >= 1 */
	float *out;           /* (output_dim) float32 destination, owner's memory: the model's
			       * raw pooled embedding (no Normalize: the owner normalizes per
			       * request) or classifier scores (rg_model_info.output_dim) */
	float *hidden_out;    /* (len, hidden_size) float32 or NULL: every token's last hidden
			       * state (TEI /embed_all), owner's memory */
} rg_job_seq;

typedef struct rg_job rg_job;
struct rg_job {
	/* set by the owner before rg_engine_submit */
	rg_job_seq *seqs;     /* (n_seqs) */
	int n_seqs;           /* >= 1 */
	double arrival_ms;    /* rg_now_ms() when the request arrived */
	double deadline_ms;   /* absolute rg_now_ms() deadline; INFINITY for none */
	int client_fd;        /* socket to watch for disconnects while queued; -1: don't */
	void (*done)(rg_job *job);
	void *owner;          /* for done(), not interpreted */
	/* filled by the engine */
	rg_job_state state;
	char err[256];        /* FAILED: message */
	double queue_ms;      /* arrival -> first seq picked */
	double inference_ms;  /* sum of the model times of the batches holding its seqs */
	int batch_size;       /* largest batch that held one of its seqs */
	/* engine-private bookkeeping */
	int n_pending;        /* seqs not yet computed */
	bool picked;
	uint64_t poll_gen;    /* last disconnect-poll round that checked this job */
	uint64_t batch_gen;   /* last batch whose time was added to inference_ms */
};

typedef struct rg_engine_params {
	rg_sched_params sched;  /* policy and batch limits (cost table borrowed) */
	int max_queue;          /* sequences queued at most; more -> RG_ERR_BUSY */
	double batch_delay_ms;  /* testing: sleep before each batch (simulates a slow device) */
	double disconnect_poll_ms; /* how often queued clients' sockets are checked (default 10) */
	rg_cache *cache;        /* computed vectors are put here (NULL: none); borrowed */
	rg_metrics *metrics;    /* borrowed, required */
} rg_engine_params;

typedef struct rg_engine rg_engine;

/* Monotonic clock in milliseconds. */
double rg_now_ms(void);

/* Create the engine and start its worker thread. The model and everything in p are borrowed and
 * must outlive the engine; the model must not be used by anyone else while the engine runs.
 * NULL + *st on RG_ERR_INVALID_INPUT (bad scheduler params: rg_last_error()), RG_ERR_OOM. */
rg_engine *rg_engine_create(rg_model *model, const rg_engine_params *p, rg_status *st);

/* Stop the worker (the running batch finishes) and end every queued job with SHUTDOWN (done
 * called). Later submits fail with RG_ERR_BUSY; the engine stays valid until rg_engine_free.
 * Idempotent. */
void rg_engine_stop(rg_engine *e);

/* rg_engine_stop, then free. Accepts NULL. */
void rg_engine_free(rg_engine *e);

/* Queue every seq of job. Errors (job untouched, done NOT called): RG_ERR_BUSY when the queue
 * cannot take job->n_seqs more sequences or the engine is stopping, RG_ERR_TOO_LONG when a seq is
 * longer than the scheduler can ever place (rg_sched_max_len), RG_ERR_INVALID_INPUT (n_seqs < 1,
 * len < 1). Thread-safe. */
rg_status rg_engine_submit(rg_engine *e, rg_job *job);

/* Sequences waiting. Thread-safe. */
int rg_engine_queue_depth(rg_engine *e);
/* Longest sequence the scheduler places. */
int rg_engine_max_len(const rg_engine *e);
#endif
