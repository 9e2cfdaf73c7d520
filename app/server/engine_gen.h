/* The generation service of `ragged serve`: a thin shell around the library's generation
 * engine (include/ragged.h rg_gen_engine_*, src/gen/engine.c), the same loop rg_generate and the
 * Python Generator run. It adds a step thread, a lock, a condition variable and notification:
 *     lock; sweep (cancelled jobs, gone clients, the drain's end: rg_gen_engine_abort);
 *     rg_gen_engine_step_begin; unlock; rg_gen_engine_step_run (the model); lock;
 *     rg_gen_engine_step_end -> events; each event's output copied into its job (under job->mu);
 *     finished jobs released; unlock; owners notified.
 * Admission (rg_gen_srv_submit_all) calls rg_gen_engine_add for every job of an HTTP request
 * under the lock from the caller's thread, so a request that cannot meet its TTFT / TPOT target
 * or does not fit the waiting queue is refused at once (429), whole: the jobs added before the
 * refused one are released before the lock is let go.
 *
 * Job life (the owner's contract): the owner fills the job (rg_gen_job_new) and submits it; the
 * service then holds a reference until it calls notify(job, true) (the last call). Output is
 * appended under job->mu; notify(job, false) says there is more to read. The owner may cancel
 * (rg_gen_job_cancel: a client that went away) at any time: the sequences are aborted at the next
 * step and their blocks freed. Owner and service each drop their reference with rg_gen_job_put;
 * the last one frees the job. Not thread-safe per job except through job->mu. */
#ifndef RG_SERVER_ENGINE_GEN_H
#define RG_SERVER_ENGINE_GEN_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "ragged.h"

typedef struct rg_gen_srv rg_gen_srv;

typedef struct rg_gen_srv_params {
	rg_gen_engine_params eng;  /* step budget, sequences per step, context, waiting queue,
				    * KV cache (rg_gen_engine_params) */
	double disconnect_poll_ms; /* how often running clients' sockets are checked (10) */
	const char *trace_path;    /* NULL, or a file that gets one line per step: the step's
				    * start (ms since the engine began), then the ms of the sweep
				    * (cancelled jobs, gone clients), of scheduling,
				    * the model, accepting and copying the outputs, and handing
				    * them to the notifier; the step's new tokens and its running
				    * sequences (a diagnostic of the server's work between steps) */
} rg_gen_srv_params;

/* Why a sequence ended. */
typedef enum rg_gen_end {
	RG_GEN_END_NONE = 0,
	RG_GEN_END_EOS,        /* an EOS id */
	RG_GEN_END_STOP,       /* a stop string (stop_str) or a stop token id */
	RG_GEN_END_LENGTH,     /* max_tokens or the context */
	RG_GEN_END_ABORT,      /* cancelled, drained past its time, or a model error (job->err) */
} rg_gen_end;

/* One output sequence as it grows (guarded by job->mu). */
typedef struct rg_gen_seq_out {
	int32_t *ids;          /* (n_ids) generated ids */
	float *logprobs;       /* (n_ids) */
	int32_t *top_ids;      /* (n_ids, job->n_top) */
	float *top_logprobs;   /* (n_ids, job->n_top) */
	size_t *text_end;      /* (n_ids) bytes of text complete after each token */
	int n_ids, cap;
	rg_buf text;           /* detokenized completion, cut before a stop string */
	size_t text_ready;     /* bytes of text that are final (held back: a possible stop string
				* prefix); = text.len once ended */
	rg_gen_end end;
	char *stop_str;        /* the stop string that ended it (owned), or NULL */
	int n_cached;          /* prompt tokens taken from the prefix cache */
	int n_preemptions;
	double first_token_ms; /* rg_now_ms of its first token, 0 before */
	double last_token_ms;
	double score;          /* beams: the hypothesis score; else the sum of logprobs */
} rg_gen_seq_out;

typedef struct rg_gen_job rg_gen_job;

struct rg_gen_job {
	/* set by the owner before submit (rg_gen_job_new makes the arrays) */
	int n_seqs;              /* sequences: choices (n, or best_of); beams: the beams returned
				  * (gp.n), all on prompts[0] */
	int32_t **prompts;       /* (n_seqs) prompt ids per sequence (owned by the job) */
	int *prompt_lens;        /* (n_seqs) */
	rg_gen_params gp;        /* sampling, max_tokens, eos (n_eos -1: ignore EOS), stop ids and
				  * strings (the arrays are the owner's, alive while the job is),
				  * logprobs (top alternatives), seed, beams. n: sequences per
				  * prompt for beam search only (returned beams) */
	int min_tokens;          /* EOS, stop ids and strings ignored before this many tokens */
	bool skip_special;       /* text without special tokens (default true) */
	int priority;
	uint64_t fair_key;       /* jobs of one key share one fair share of the queue
				  * (rg_gen_options.fair_key): the server gives every job of one
				  * HTTP request the same; 0: the job's own */
	double arrival_ms;       /* rg_now_ms() */
	double deadline_ms;      /* TTFT target from arrival, ms; 0 none */
	double tpot_ms;          /* TPOT target, ms; 0 none */
	int client_fd;           /* watched for a disconnect while running; -1: not */
	/* called by the engine (step thread, no engine lock, job->mu NOT held): more output
	 * (last false), or the job ended and this is the engine's last access (last true; the
	 * engine has dropped its reference after it returns). Must not block. */
	void (*notify)(rg_gen_job *job, bool last);
	void *owner;

	/* filled by the engine */
	pthread_mutex_t mu;
	int n_top;               /* alternatives stored per token (gp.logprobs) */
	rg_gen_seq_out *out;     /* (n_seqs) */
	int n_running;           /* sequences not ended */
	bool ended;              /* every sequence ended (under mu) */
	rg_status status;        /* RG_OK, or the error that aborted it */
	char err[256];
	rg_gen_admission adm;    /* submit's estimates; when refused its Retry-After */
	bool stopping;           /* submit refused it because the engine drains or stopped */
	double queue_ms;         /* arrival to its first scheduled step */
	/* prompt scoring (gp.prompt_logprobs): rg_gen_output's prompt_* fields of output 0,
	 * copied at its first token or its end (under mu; NULL before, or without it) */
	float *prompt_lps;       /* (prompt_lens[0]) [0] NaN */
	int32_t *prompt_ranks;   /* (prompt_lens[0]) */
	int prompt_top_n;
	int32_t *prompt_top_ids; /* (prompt_lens[0], prompt_top_n) */
	float *prompt_top_lps;   /* (prompt_lens[0], prompt_top_n) */

	/* private */
	atomic_int refs;
	atomic_bool cancel;
	bool aborted;            /* the service asked the engine to abort it */
	uint64_t req;            /* the engine's request id */
	rg_gen_job *next;        /* the service's job lists */
};

/* A job of n_seqs sequences with zeroed outputs and one reference (the owner's); gp defaults
 * (rg_gen_params_default). NULL on OOM. */
rg_gen_job *rg_gen_job_new(int n_seqs);
/* Drop a reference; the last frees the job (prompts, outputs). NULL accepted. */
void rg_gen_job_put(rg_gen_job *j);
/* Ask the engine to end the job (the client went away): its sequences end ABORT at the next
 * step. Thread-safe; idempotent. */
void rg_gen_job_cancel(rg_gen_job *j);

/* Create the service over model m (a decoder; borrowed, the service's alone until free): the
 * library engine (its KV cache from p->eng.kv_bytes or kv_fraction, a prior of the step cost
 * model measured on a few steps) and the step thread. NULL + *st: RG_ERR_UNSUPPORTED (an
 * encoder), RG_ERR_INVALID_INPUT (bad params, a cache that cannot hold one sequence of
 * max_context tokens: rg_last_error), RG_ERR_OOM, a model error. */
rg_gen_srv *rg_gen_srv_create(rg_model *m, const rg_gen_srv_params *p, rg_status *st);

/* Admit jobs[0..n_jobs) as one unit (one HTTP request's prompts): under the engine lock every
 * job is added, or, when one is refused, those already added are released before the lock is
 * let go, so that no step runs them and nothing of the request stays queued. Admitted: the
 * engine takes a reference to each job (rg_gen_job_put after notify(.., true) is the
 * engine's). Errors (nothing taken, notify never called; *refused, when not NULL: the index
 * of the job that was refused, whose adm / stopping say why): RG_ERR_BUSY (draining: job
 * ->stopping; the waiting queue full, or a TTFT / TPOT target that cannot be met:
 * job->adm.retry_after_ms), RG_ERR_TOO_LONG (a prompt of max_context tokens or more, beams
 * that need more KV blocks than the pool has), RG_ERR_INVALID_INPUT (bad params, named),
 * RG_ERR_OOM. A request of more queue entries (rg_gen_job_queue_entries, summed) than
 * rg_gen_srv_max_waiting can never be admitted: the caller refuses it before (413).
 * Thread-safe. */
rg_status rg_gen_srv_submit_all(rg_gen_srv *e, rg_gen_job *const *jobs, int n_jobs,
				int *refused);
/* rg_gen_srv_submit_all of one job. */
rg_status rg_gen_srv_submit(rg_gen_srv *e, rg_gen_job *job);
/* Waiting-queue entries job j takes when admitted: one per sequence, one for a beam search
 * (its group). */
int rg_gen_job_queue_entries(const rg_gen_job *j);
/* Waiting-queue entries the engine holds at most (--max-queue): a request of more can never
 * be admitted. */
int rg_gen_srv_max_waiting(const rg_gen_srv *e);

/* Drain: new jobs are refused; running and waiting ones go on until end_ms (rg_now_ms clock),
 * when what is left ends ABORT ("shutting down"); a step whose estimate (the recent steps'
 * time) passes end_ms is not begun, what is left ends then. Returns at once; rg_gen_srv_idle
 * tells when nothing is left. A later call may only move end_ms earlier. */
void rg_gen_srv_drain(rg_gen_srv *e, double end_ms);
bool rg_gen_srv_idle(rg_gen_srv *e);

/* Stop the step thread; every job left ends ABORT (notified). Idempotent. */
void rg_gen_srv_stop(rg_gen_srv *e);
/* Stop, then free (KV cache stays with the model). NULL accepted. */
void rg_gen_srv_free(rg_gen_srv *e);

/* Sequences waiting (for /metrics and /info). */
int rg_gen_srv_queue_depth(rg_gen_srv *e);
/* The model's EOS ids (config.json / generation_config.json / GGUF), *n of them; owned by the
 * model. */
const int32_t *rg_gen_srv_eos(const rg_gen_srv *e, int32_t *n);
/* The longest sequence (prompt + generated) the engine runs. */
int rg_gen_srv_max_context(const rg_gen_srv *e);
/* KV blocks allocated to sequences or the prefix cache now (0 when idle without caching). */
int rg_gen_srv_blocks_used(rg_gen_srv *e);
/* Append the generation metrics (Prometheus text format 0.0.4): TTFT and inter-token latency
 * histograms, prompt / generated tokens, running / waiting / preempted sequences, KV blocks used
 * and free, prefix-cache hits, step time and tokens per step; the same under vLLM's names
 * (vllm:*, label model_name="model_name", which may be NULL: "") and TGI's (tgi_*: all but the
 * request counters, rg_metrics_render_tgi_requests). Thread-safe. */
void rg_gen_srv_metrics(rg_gen_srv *e, rg_buf *out, const char *model_name);
#endif
