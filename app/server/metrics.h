/* Prometheus metrics of `ragged serve`: counters and fixed-bucket histograms behind one mutex,
 * rendered in the Prometheus text exposition format (version 0.0.4). Thread-safe. */
#ifndef RG_SERVER_METRICS_H
#define RG_SERVER_METRICS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"
#include "server/request.h"

#define RG_HIST_MAX_BUCKETS 20

typedef struct rg_hist {
	int n;                                 /* finite bucket bounds */
	double le[RG_HIST_MAX_BUCKETS];        /* (n) upper bounds, increasing */
	uint64_t count[RG_HIST_MAX_BUCKETS + 1]; /* (n + 1) per-bucket (not cumulative); last = +Inf */
	double sum;
	uint64_t total;
} rg_hist;

#define RG_METRICS_N_CODES 12
#define RG_METRICS_N_CLASSES 3 /* status classes of the latency histograms: 2xx, 4xx, 5xx */
#define RG_METRICS_MAX_DEVICES 16 /* devices one server runs on (--devices) */

typedef struct rg_metrics {
	pthread_mutex_t mu;
	uint64_t requests[RG_ROUTE_COUNT][RG_METRICS_N_CODES]; /* by route and status code */
	/* per answered request of a model route (embed, v1_embeddings, predict, rerank), ms, by
	 * status class (a 429 answered at once must not pull the 2xx latencies down) */
	rg_hist queue_ms[RG_METRICS_N_CLASSES], inference_ms[RG_METRICS_N_CLASSES],
		total_ms[RG_METRICS_N_CLASSES];
	rg_hist tokenize_ms;  /* per request whose inputs were tokenized, ms (TEI's
			       * te_request_tokenization_duration) */
	rg_hist batch_size, batch_tokens;                     /* per executed batch */
	uint64_t batches, batch_failures;
	uint64_t real_tokens, computed_tokens;                /* padding efficiency = real/computed */
	uint64_t cache_hits, cache_misses;
	uint64_t dropped_disconnected, expired;
	int n_devices;                                        /* 0: no per-device counters */
	char device[RG_METRICS_MAX_DEVICES][16];              /* label values: "cuda:1", "cpu" */
	uint64_t device_batches[RG_METRICS_MAX_DEVICES];      /* batches run, by device */
	uint64_t device_tokens[RG_METRICS_MAX_DEVICES];       /* real tokens computed, by device */
	/* each device's model (rg_model_get_stats), as its worker last read it */
	rg_model_stats device_model[RG_METRICS_MAX_DEVICES];
} rg_metrics;

/* A histogram of n finite upper bounds le (increasing, at most RG_HIST_MAX_BUCKETS), all
 * counts zero. */
void rg_hist_init(rg_hist *h, const double *le, int n);
/* Count v (negative values are not observed). Not thread-safe: the owner's lock. */
void rg_hist_observe(rg_hist *h, double v);
/* Append h as a Prometheus histogram named name (HELP text help), bounds and sum multiplied
 * by scale (1e-3: observed in ms, exposed in seconds). */
void rg_hist_render(rg_buf *o, const char *name, const char *help, const rg_hist *h,
		    double scale);

/* rg_hist_render with a label on every sample: label is `key="value",` (the trailing comma
 * kept; rg_metrics_label makes one), written before le. */
void rg_hist_render_labeled(rg_buf *o, const char *name, const char *help, const char *label,
			    const rg_hist *h, double scale);
/* Write `key="value",` into out (n bytes, NUL-terminated), value escaped as the exposition
 * format wants (backslash, double quote, line feed) and cut to fit. */
void rg_metrics_label(char *out, size_t n, const char *key, const char *value);

/* Several renderings of the same families (one per decoder model) as one exposition: parts[k]
 * (n >= 1 Prometheus texts, each family opened by its "# HELP name" and "# TYPE name" lines)
 * appended to o family by family, in the order they first appear, each family's HELP / TYPE
 * once (the first part's) and then its samples from every part in part order, each sample of
 * part k given label[k] (`key="value",` as rg_metrics_label writes it) as its first label. The
 * text format lets a family's lines stand only together (Prometheus refuses a second HELP for
 * one name). Lines that are not samples or headers are dropped. An out-of-memory o is left
 * with its oom flag set (rg_buf). */
void rg_metrics_merge_parts(rg_buf *o, const rg_buf *parts, const char *const *label, int n);

void rg_metrics_init(rg_metrics *m);
void rg_metrics_destroy(rg_metrics *m);

/* One answered HTTP request. Latencies in ms, observed for the model routes by status class
 * (label class="2xx" / "4xx" / "5xx"); negative values are not observed. */
void rg_metrics_request(rg_metrics *m, rg_route route, int status, double queue_ms,
			double inference_ms, double total_ms);
/* One request's inputs tokenized in ms (te_request_tokenization_duration, in seconds). */
void rg_metrics_tokenize(rg_metrics *m, double ms);
/* Name the devices of the per-device counters (label values, e.g. "cuda:1"), in the engine's
 * model order; at most RG_METRICS_MAX_DEVICES (more are not counted). Before serving. */
void rg_metrics_set_devices(rg_metrics *m, const char *const *names, int n);
/* One executed batch on the device at `device` (the engine's model index): n requests, real (sum
 * of lengths) and computed (padding included) tokens. */
void rg_metrics_batch(rg_metrics *m, int device, int n, int real_tokens, int computed_tokens,
		      bool ok);
/* The counters of the model of `device` (rg_model_get_stats: CUDA graphs captured, replayed,
 * pinned at start-up, batches run eagerly, GEMM plans built), as read now by the thread that
 * runs it: cumulative, so the values replace the last ones. */
void rg_metrics_model_stats(rg_metrics *m, int device, const rg_model_stats *st);
void rg_metrics_cache(rg_metrics *m, uint64_t hits, uint64_t misses);
void rg_metrics_dropped(rg_metrics *m, uint64_t n);
void rg_metrics_expired(rg_metrics *m, uint64_t n);
/* TGI's request counters (tgi_request_count, _success, _failure) over the generation routes
 * (/generate, /generate_stream, /v1/completions, /v1/chat/completions): answered, 2xx, the
 * others. */
void rg_metrics_render_tgi_requests(rg_metrics *m, rg_buf *out);
/* Requests answered so far, over every route: *total all of them, *ok those answered 200. */
void rg_metrics_answered(rg_metrics *m, uint64_t *total, uint64_t *ok);

/* Append the exposition text. queue_depth: sequences waiting; mem_used/mem_total: bytes of device
 * (or host RSS on CPU) memory, 0 when unknown. */
void rg_metrics_render(rg_metrics *m, rg_buf *out, int queue_depth, size_t mem_used,
		       size_t mem_total, size_t cache_entries);
#endif
