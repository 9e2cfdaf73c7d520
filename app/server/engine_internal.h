/* What engine.c (the shared queue, admission, fairness, drain and the worker loop) and its
 * runners share. A runner runs the batches the scheduler picks on one worker's model and fits the
 * batch latency model the estimates use; engine_embed.c is the encoder's (packed batches through
 * rg_model_run_ex, pooled vectors and per-token states back to the jobs' owners). A second runner
 * (the decoder's step loop) plugs in beside it. Not a public header. */
#ifndef RG_SERVER_ENGINE_INTERNAL_H
#define RG_SERVER_ENGINE_INTERNAL_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/sched/fair.h"
#include "server/engine.h"
#include "server/warmup.h"

typedef struct rg_worker rg_worker;

/* A runner's hooks. The engine calls worker_init / worker_free once per worker (before the
 * threads start / after they stop), fit once at create (the workers' models are the engine's
 * alone then), and run from the worker's thread with the engine lock NOT held. */
typedef struct rg_engine_runner {
	const char *name;
	/* Allocate w->rs for w->model and the engine's batch limits; RG_ERR_OOM. */
	rg_status (*worker_init)(rg_worker *w);
	/* Free w->rs (may be partly allocated or NULL). */
	void (*worker_free)(rg_worker *w);
	/* Run the batch w->batch whose entries are w->b_job / w->b_seq and write each seq's output
	 * to its owner (the jobs stay alive: none is told while it has a seq in a running batch).
	 * *model_ms: the model's time (the test delays not included). On error the message is in
	 * w->err. The per-job bookkeeping is the engine's, under the lock. */
	rg_status (*run)(rg_worker *w, double *model_ms);
	/* Fit e->fit (the batch latency model), or leave it zero (no time estimates; a warning). */
	void (*fit)(rg_engine *e);
} rg_engine_runner;

/* engine_embed.c: the encoder's runner. */
extern const rg_engine_runner rg_engine_embed_runner;

/* One device's worker: its model, its thread and what one batch needs (see engine.h). */
struct rg_worker {
	rg_engine *e;
	rg_model *model;
	int index;             /* position in the engine's model list (the metrics' device label) */
	pthread_t thread;
	bool started;
	rg_sched_batch batch;  /* the batch it picked (written under the engine lock) */
	double busy_until;     /* estimated end of its running batch; 0: none runs (guarded) */

	/* Worker-only state. */
	uint64_t gen;          /* engine-wide number of its running batch */
	rg_job **b_job;        /* (batch cap) entry i of the batch: seq b_seq[i] of b_job[i] */
	int *b_seq;            /* (batch cap) */
	void *rs;              /* the runner's per-worker state (its batch buffers) */
	char err[256];         /* the model's error message of the last batch */
};

struct rg_engine {
	const rg_engine_runner *runner; /* what runs a batch on a worker's model */
	int hidden;             /* floats per sequence: rg_model_info.output_dim */
	int hidden_size;
	int max_seq_len;        /* the model's */
	rg_engine_params p;
	rg_sched *sched;
	int max_len;

	rg_worker *w;           /* (n_w) one per model */
	int n_w;
	bool started, joined;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;

	/* Queue of sequences in stamp order (virtual clock, see engine.h; guarded by mu). Entry i
	 * is seq q_seq[i] of q_job[i]; q_req[i].arrival_ms is its stamp. */
	int n_q, cap_q;
	rg_sched_req *q_req;   /* (cap_q) what the scheduler sees */
	rg_job **q_job;        /* (cap_q) */
	int *q_seq;            /* (cap_q) */
	double *q_ms;          /* (cap_q) the piece time it was stamped with (server/sched/fair.h) */
	bool *q_take;          /* (cap_q) scratch: picked this round */
	uint64_t next_id;
	double q_tokens, q_pairs; /* sums of len and len^2 over the queue */
	/* scratch (cap_q) for reordering the queue at a drain */
	rg_sched_req *s_req;
	rg_job **s_job;
	int *s_seq;
	int *s_perm;
	double *s_ms;          /* (cap_q) also the piece times of a job being queued */
	double *s_tag;         /* (cap_q) the stamps of a job being queued */
	rg_fair fair;          /* the fair order of the queue (stamps), guarded by mu */

	/* Time estimates (guarded by mu). */
	rg_cost_model fit;     /* fitted at create: one device's compute */
	rg_cost_learner learner; /* refits `fit` from the batches run (core/cost_model.h) */
	double pad_ratio;      /* computed / real tokens of recent batches (>= 1) */
	double real_w, comp_w; /* sums behind pad_ratio */

	/* Background DP measurement (guarded by mu; see engine.h). */
	rg_cost_measure *measure; /* p.measure until the table is in use or measuring failed */
	int cells_done, cells_total;
	bool measure_failed;
	rg_sched_kind kind;    /* the policy e->sched runs now */

	/* Drain (guarded by mu). */
	bool draining;
	double drain_end;

	/* Telling (guarded by mu). A worker hands the ended jobs to the teller thread between two
	 * batches and goes on; the teller calls their done() outside the lock (an HTTP resume
	 * each), while the next batch runs. */
	rg_job *told;          /* ended jobs not yet handed over (linked by next_told) */
	rg_job *to_tell;       /* handed to the teller, done() not yet called (next_told) */
	int telling;           /* jobs the teller took whose done() may not have returned */
	pthread_cond_t tell_cv; /* the teller waits on it for to_tell or teller_stop */
	pthread_t teller;
	bool teller_started, teller_stop;

	/* Guarded by mu. */
	double last_poll_ms;
	uint64_t poll_gen, batch_gen;
};

#endif
