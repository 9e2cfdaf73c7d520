/* Engine of `ragged serve`: one bounded queue of sequences (the admission queue) and one worker
 * thread per model, one model per device (`--devices 0,1`). engine.c keeps the queue, admission,
 * the fair order, drain and the worker loop; what runs a batch on a model is a runner's
 * (engine_internal.h: the encoder's is engine_embed.c). A worker that is free asks the
 * scheduler (src/sched) for the next batch from the shared queue, runs rg_model_run_ex on it on
 * its device and hands each vector back to the job that queued it; with several devices, batches
 * run on all of them at once and the pieces of one request may run on different devices.
 *
 * A job is one HTTP request's uncached inputs. Lifecycle (the engine's side of the contract):
 *   submit  -> QUEUED: the engine borrows the job (and its seqs) until it calls job->done.
 *   the workers either compute every seq (DONE), or ends the job early: FAILED (model error),
 *   EXPIRED (deadline passed before all of its seqs ran), DROPPED (client socket closed while
 *   queued), SHUTDOWN (engine stopped, or drained past its time, while queued). In every case
 *   job->done(job) is called exactly once, from the engine's teller thread, after the engine's
 *   last access to the job: the callback may free it. The engine never touches a job after done.
 *   (A worker hands the jobs that ended to the teller between two batches and starts the next
 *   one at once: the callbacks, an HTTP resume each, run while it does. bench/results/
 *   short_requests_cpu_2core-amd-epyc_20261125-1902.md: 1.4-3.6 us a job, ~0.3 ms per batch of
 *   137 on the worker before.)
 * Every change to a queued job is made under the engine lock, by whichever worker. A job ended
 * early (expired, dropped, failed, shut down) while some of its seqs run on another device is
 * told (done) only when the last of those batches returns: its outputs are written outside the
 * lock, into the owner's memory, which must stay alive until then.
 *
 * Pieces and fairness. Each seq of a job is a piece that the scheduler places on its own, so a
 * request's inputs may run in several batches (the job is DONE when its last piece is), and a
 * batch is bounded by a time budget (rg_engine_time_budget_ms) as well as by tokens. The
 * queue is kept in the order of weighted fair queueing (server/sched/fair.h): a job's pieces are
 * stamped with finish tags on a fluid server that shares the device equally among the queued
 * jobs and advances by the work handed to the devices; the scheduler sees the stamps as
 * arrival times. A short request that arrives while N long ones are served gets a stamp below
 * their queued pieces and runs in the next batch, whatever N (each job's share is 1/(N+1), not
 * its wall-clock wait), and a long request still advances at its share (no starvation).
 * Without admission by time (`--admission count`), jobs of more than one batch's work run one
 * after another in arrival order (one shared flow; short ones still pass them): N of them
 * under a deadline end one by one instead of all interleaved past it. Deadlines and
 * disconnected clients are checked before every batch, so an expired job stops after the
 * piece in flight.
 *
 * Time estimates. A batch latency model (core/cost_model.h) is fitted at create to a few packed
 * batches measured on the model (or to the DP cost table when there is one) and refitted after
 * every batch to the batches actually run (rg_cost_learner: one recent point per batch shape;
 * the start-up fit, which a busy machine can make absurd, only decides what they cannot). It
 * sets the time budget of batches, the stamps above, and, with admit_by_time, admission: a job
 * is refused when the estimated time of the queued work plus its own would pass its deadline or
 * the deadline of a queued job (429, Retry-After: the estimated time until the same request
 * would fit, as the devices work through the queue and the queued jobs whose deadlines bind
 * end), or when its own work alone would (413).
 *
 * Drain (rg_engine_drain): new jobs are refused; queued jobs run shortest remaining work first,
 * those that are not estimated to finish by the drain's end are ended SHUTDOWN at once, and what
 * is left at the end (a long job may be cut between its pieces) too.
 *
 * Background DP measurement (rg_engine_params.measure). The DP scheduler needs a measured cost
 * table (minutes on a small CPU). Without a stored one, the engine starts with the TOKEN
 * scheduler (same limits, so the longest accepted input does not change) and answers requests
 * at once, while the first device's worker measures the table one run at a time (warmup.h
 * rg_cost_measure: 4 runs of a padded batch per cell) whenever the queue is empty: the model
 * stays the worker's alone, and a request that arrives meanwhile waits at most one run (one
 * padded batch of at most max_batch_tokens tokens; the test delays apply to it as to a batch),
 * or none while another device is free. After the last cell the table is saved (the next start loads it) and, between two batches under the engine lock, the worker
 * swaps in a DP scheduler on that table and refits its batch latency model from it
 * (rg_cost_model_from_table, as a start with a stored table does). Cells run only on an idle
 * queue, so under sustained load the switch waits for a pause; a failed cell leaves the
 * engine on TOKEN for good (a warning on stderr). rg_engine_sched_state reports the state. */
#ifndef RG_SERVER_ENGINE_H
#define RG_SERVER_ENGINE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"
#include "server/sched/sched.h"
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

/* Why rg_engine_submit refused a job (RG_ERR_BUSY). */
typedef enum rg_job_refusal {
	RG_JOB_ADMITTED = 0,
	RG_JOB_QUEUE_FULL,   /* max_queue sequences waiting (429) */
	RG_JOB_NO_TIME,      /* the queued work and its own would pass a deadline (429) */
	RG_JOB_TOO_MUCH,     /* its own work alone is estimated past its deadline (413) */
	RG_JOB_STOPPING,     /* the engine is draining or stopped (503) */
} rg_job_refusal;

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
	rg_job_refusal refusal; /* submit refused (RG_ERR_BUSY): why */
	double est_ms;        /* submit: estimated time of its own work, ms */
	double retry_after_ms; /* refused for time (or queue full): estimated wait until it would
				* fit, ms; 0 when unknown */
	/* engine-private bookkeeping */
	int n_pending;        /* seqs not yet computed */
	int n_running;        /* seqs in batches running now (on any device) */
	bool told;            /* ended and queued for done() */
	rg_job *next_told;    /* the engine's list of jobs waiting for done() */
	bool picked;
	uint64_t poll_gen;    /* last disconnect-poll round that checked this job */
	uint64_t batch_gen;   /* last batch whose time was added to inference_ms */
	double left_tokens, left_pairs; /* drain: its queued work (tokens, attention pairs) */
	int left_seqs;
	double drain_at;      /* drain: sort key (own remaining work), then estimated end */
	double fair_end;      /* its flow's token in the fair order (server/sched/fair.h rg_fair_leave) */
};

typedef struct rg_engine_params {
	rg_sched_params sched;  /* policy and batch limits (cost table borrowed); the engine sets
				 * sched.cost_model itself, sched.max_batch_ms is the time budget */
	int max_queue;          /* sequences queued at most; more -> RG_ERR_BUSY */
	bool admit_by_time;     /* refuse what cannot meet its deadline by estimate (see above) */
	double batch_delay_ms;  /* testing: sleep before each batch (simulates a slow device) */
	double token_delay_us;  /* testing: and this per computed token; both are part of every
				 * estimate, as a slow device's time would be */
	double disconnect_poll_ms; /* how often queued clients' sockets are checked (default 10) */
	rg_cache *cache;        /* computed vectors are put here (NULL: none); borrowed */
	rg_metrics *metrics;    /* borrowed, required */
	struct rg_cost_measure *measure; /* NULL, or the DP table to measure in the background
				 * (see above; sched.kind must be DP and sched.cost NULL); borrowed,
				 * must outlive the engine: its table becomes the scheduler's */
	const struct rg_engine_runner *runner; /* what runs the batches (engine_internal.h);
				 * NULL: the encoder's (engine_embed.c) */
} rg_engine_params;

typedef struct rg_engine rg_engine;

/* Monotonic clock in milliseconds. */
double rg_now_ms(void);

/* Whether the peer of connected socket fd has gone (closed or reset): a non-blocking peek that
 * reads nothing; data waiting (a pipelined request) is not a disconnect. */
bool rg_client_gone(int fd);

/* Create the engine over models[0..n_models) (one per device, the same checkpoint and dtype:
 * output_dim, hidden_size and max_seq_len must agree), fit its batch latency model on models[0]
 * (a few packed batches, about 3 x (16 + 2 x 256 + 4 x 256) tokens; from the cost table instead
 * when p->sched.cost is set; the devices are taken to be alike) and start one worker thread per
 * model. The time estimates (admission, drain, Retry-After) divide the queued work evenly over the
 * devices. The models and everything in p are borrowed and must outlive the engine; a model must
 * not be used by anyone else while the engine runs (a background DP measurement runs on
 * models[0], by its worker). A model error while measuring only warns (stderr): the estimates are
 * then 0 and admission counts sequences only. NULL + *st on RG_ERR_INVALID_INPUT (no model,
 * models that differ, bad scheduler params: rg_last_error()), RG_ERR_OOM. */
rg_engine *rg_engine_create(rg_model *const *models, int n_models, const rg_engine_params *p,
			    rg_status *st);

/* Drain: refuse new jobs (RG_JOB_STOPPING), serve the queued ones shortest remaining work first
 * while they are estimated to finish by end_ms (rg_now_ms clock), end the others SHUTDOWN at
 * once and whatever is left at end_ms (a batch is not started when its estimate passes end_ms).
 * Returns at once; rg_engine_idle tells when the queue is empty. A later call may only move
 * end_ms earlier. Then call rg_engine_stop. */
void rg_engine_drain(rg_engine *e, double end_ms);

/* True when no job is queued, no batch runs and every ended job has been told (its done()
 * returned). Thread-safe. */
bool rg_engine_idle(rg_engine *e);

/* The current batch latency model (refitted to the batches run, test delays included). */
rg_cost_model rg_engine_cost_model(rg_engine *e);
/* The time budget batches are held to now: p->sched.max_batch_ms, but at least 10 times the
 * fixed cost of a batch by the model (so that cost stays under a tenth); 0: none. */
double rg_engine_time_budget_ms(rg_engine *e);

/* Stop the worker (the running batch finishes) and end every queued job with SHUTDOWN; returns
 * once every ended job's done() has returned (the teller stopped). Later submits fail with RG_ERR_BUSY; the engine stays valid until rg_engine_free.
 * Idempotent. */
void rg_engine_stop(rg_engine *e);

/* rg_engine_stop, then free. Accepts NULL. */
void rg_engine_free(rg_engine *e);

/* Queue every seq of job. Sets job->est_ms. Errors (done NOT called; the job's refusal,
 * est_ms and retry_after_ms are set, nothing else): RG_ERR_BUSY when refused (job->refusal: the
 * queue cannot take job->n_seqs more sequences, with admit_by_time the job cannot meet its
 * deadline, or the engine is draining or stopped), RG_ERR_TOO_LONG when a seq is longer than the
 * scheduler can ever place (rg_sched_max_len), RG_ERR_INVALID_INPUT (n_seqs < 1, len < 1),
 * RG_ERR_OOM (the fair order could not grow).
 * Thread-safe. */
rg_status rg_engine_submit(rg_engine *e, rg_job *job);

/* The scheduler in use, for /info and /metrics: its name ("dp", "token", ...), or while the DP
 * table is measured "token (dp measuring DONE/TOTAL)", or "token (dp measurement failed)".
 * Writes at most n bytes into buf; *done / *total (each may be NULL): cells of the background
 * measurement measured / in all (0 / 0 without one). Thread-safe. */
void rg_engine_sched_state(rg_engine *e, char *buf, size_t n, int *done, int *total);

/* Sequences waiting. Thread-safe. */
int rg_engine_queue_depth(rg_engine *e);
/* Longest sequence the scheduler places. */
int rg_engine_max_len(const rg_engine *e);
#endif
