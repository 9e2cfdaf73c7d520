/* `ragged serve`: HTTP front end over libmicrohttpd (one epoll thread pool), one engine worker
 * per model (engine.c), a response cache (cache.c) and Prometheus metrics (metrics.c).
 *
 * Request flow for POST /embed and /v1/embeddings:
 *   1. MHD calls on_request once with the headers: a Content-Length over --max-body-bytes is
 *      answered 413 at once (the body is never read); then once per body fragment (accumulated up
 *      to the limit, discarded beyond it) and once more at the end.
 *   2. At the end, on the HTTP thread: parse JSON (request.c), tokenize every text (bad UTF-8 ->
 *      400, too long without truncate -> 422), look each input up in the cache.
 *   3. All inputs cached: answer now. Otherwise suspend the connection, queue the missing inputs
 *      as one job (429 when the queue is full) and return; the engine worker calls job_done,
 *      which resumes the connection; MHD calls on_request again and the answer is built there.
 *   4. on_completed (MHD_OPTION_NOTIFY_COMPLETED) frees the per-connection context. A connection
 *      is never completed while suspended (MHD keeps it), so the engine's borrowed pointer stays
 *      valid until job_done; the engine watches the sockets of queued jobs and drops the jobs of
 *      clients that went away (metric ragged_dropped_disconnected_total).
 *
 * Normalization: the model applies its own pooling and, when it has a sentence-transformers
 * Normalize module, L2 normalization. "normalize": true (default) on a model without Normalize
 * makes the server L2-normalize; "normalize": false returns the model's output as is (so on a
 * model with Normalize the output is still unit length).
 */
#include "server/serve.h"

#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <sched.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "sched/cost_table.h"
#include "server/http_status.h"
#include "server/options.h"
#include "sched/sched.h"
#include "server/cache.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/warmup.h"

#define EXIT_USAGE RG_SERVE_EXIT_USAGE

typedef struct rg_server {
	rg_serve_opts o;
	rg_model *model;
	const rg_model_info *info;
	rg_engine *engine;
	rg_cache *cache;
	rg_cost_table *cost;
	rg_metrics metrics;
	rg_sched_kind kind;
	rg_req_limits lim;
	int max_len;             /* longest sequence accepted (model and scheduler) */
	atomic_bool ready;
	atomic_bool stopping;
	atomic_int n_suspended;  /* connections suspended and not yet answered */
	int port;
} rg_server;

/* Per-connection (per HTTP request) state, MHD's *con_cls. */
typedef struct conn_ctx {
	rg_server *srv;
	struct MHD_Connection *conn;
	rg_route route;
	bool post;
	double t0;               /* first call (headers received), rg_now_ms() */
	rg_buf body;
	bool too_big;
	bool suspended;          /* queued in the engine (or resuming to report a submit error) */
	atomic_bool released;    /* the engine made its last access (job_done ran / submit failed) */
	rg_http_error submit_error; /* the answer after a failed submit; code 0 when none */
	char submit_err[256];
	rg_request req;
	int32_t **ids;           /* (n_inputs) token ids per input; owned unless it is req's */
	size_t *n_ids;           /* (n_inputs) */
	float *emb;              /* (n_inputs, hidden) output vectors */
	rg_job_seq *seqs;        /* (n_inputs) uncached inputs */
	rg_job job;
	size_t prompt_tokens;
} conn_ctx;

/* ---- responses -------------------------------------------------------------------------- */

static enum MHD_Result send_response(conn_ctx *c, int status, rg_buf *body, const char *ctype,
				     double queue_ms, double infer_ms, int batch_size)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	char v[64];
	double total = rg_now_ms() - c->t0;

	if (body->oom) {
		rg_buf_free(body);
		status = 500;
		rg_json_error_body(body, "out of memory building the response", "backend");
		ctype = "application/json";
	}
	r = MHD_create_response_from_buffer_with_free_callback(body->len,
							       body->data ? body->data : (char *)"",
							       body->data ? free : NULL);
	if (!r) {
		rg_buf_free(body);
		return MHD_NO;
	}
	body->data = NULL; /* owned by the response now */
	rg_buf_free(body);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	snprintf(v, sizeof(v), "%.3f", queue_ms);
	MHD_add_response_header(r, "x-queue-time", v);
	snprintf(v, sizeof(v), "%.3f", infer_ms);
	MHD_add_response_header(r, "x-inference-time", v);
	snprintf(v, sizeof(v), "%.3f", total);
	MHD_add_response_header(r, "x-total-time", v);
	snprintf(v, sizeof(v), "%d", batch_size);
	MHD_add_response_header(r, "x-batch-size", v);
	if (status == 405)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
					c->route == RG_ROUTE_EMBED || c->route == RG_ROUTE_OPENAI ||
					c->route == RG_ROUTE_TOKENIZE ? "POST" : "GET, HEAD");
	ret = MHD_queue_response(c->conn, (unsigned)status, r);
	MHD_destroy_response(r);
	rg_metrics_request(&c->srv->metrics, c->route, status, queue_ms, infer_ms, total);
	return ret;
}

static enum MHD_Result send_error(conn_ctx *c, int status, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(conn_ctx *c, int status, const char *type, const char *fmt, ...)
{
	char msg[512];
	rg_buf b;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (status == 500)
		fprintf(stderr, "ragged serve: internal error on %s: %s\n", rg_route_name(c->route),
			msg);
	rg_buf_init(&b);
	rg_json_error_body(&b, msg, type);
	return send_response(c, status, &b, "application/json", 0, 0, 0);
}

/* ---- embedding routes ------------------------------------------------------------------- */

static void l2_normalize(float *v, int n)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += (double)v[i] * v[i];
	ss = sqrt(ss);
	if (ss < 1e-12)
		ss = 1e-12;
	for (int i = 0; i < n; i++)
		v[i] = (float)(v[i] / ss);
}

static void put_vector(rg_buf *b, const float *v, int n, bool base64)
{
	if (!base64) {
		rg_buf_float_array(b, v, (size_t)n);
		return;
	}
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	{
		uint32_t tmp[n];

		for (int i = 0; i < n; i++) {
			memcpy(&tmp[i], &v[i], 4);
			tmp[i] = __builtin_bswap32(tmp[i]);
		}
		rg_buf_put(b, "\"", 1);
		rg_buf_base64(b, tmp, (size_t)n * 4);
		rg_buf_put(b, "\"", 1);
	}
#else
	rg_buf_put(b, "\"", 1);
	rg_buf_base64(b, v, (size_t)n * 4);
	rg_buf_put(b, "\"", 1);
#endif
}

/* Build the 200 answer from c->emb (every input present). */
static enum MHD_Result answer_embeddings(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	rg_server *s = c->srv;
	int h = s->info->hidden_size;
	rg_buf b;

	if (c->req.normalize && !s->info->normalize)
		for (size_t i = 0; i < c->req.n_inputs; i++)
			l2_normalize(c->emb + i * (size_t)h, h);
	rg_buf_init(&b);
	if (c->route == RG_ROUTE_EMBED) {
		rg_buf_put(&b, "[", 1);
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			if (i)
				rg_buf_put(&b, ",", 1);
			rg_buf_float_array(&b, c->emb + i * (size_t)h, (size_t)h);
		}
		rg_buf_put(&b, "]", 1);
	} else {
		const char *model = c->req.model ? c->req.model : s->o.model;

		rg_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			rg_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":",
				       i ? "," : "", i);
			put_vector(&b, c->emb + i * (size_t)h, h, c->req.base64);
			rg_buf_put(&b, "}", 1);
		}
		rg_buf_puts(&b, "],\"model\":");
		rg_buf_json_str(&b, model, strlen(model));
		rg_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}",
			       c->prompt_tokens, c->prompt_tokens);
	}
	return send_response(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* Tokenize every input into c->ids (texts) or adopt the given ids (OpenAI token arrays).
 * Returns 0 or the HTTP error status already sent (then the caller returns ret). */
static int tokenize_inputs(conn_ctx *c, enum MHD_Result *ret)
{
	rg_server *s = c->srv;
	size_t n = c->req.n_inputs;
	int max_pos = s->info->max_position_embeddings;

	c->ids = calloc(n, sizeof(*c->ids));
	c->n_ids = calloc(n, sizeof(*c->n_ids));
	if (!c->ids || !c->n_ids) {
		*ret = send_error(c, 500, "backend", "out of memory");
		return 500;
	}
	for (size_t i = 0; i < n; i++) {
		rg_req_input *in = &c->req.inputs[i];
		rg_status st;

		if (in->ids) {
			if (in->n_ids > (size_t)max_pos && !c->req.truncate) {
				*ret = send_error(c, 422, "validation",
						  "input %zu has %zu tokens, more than the model's "
						  "maximum of %d (set \"truncate\": true)", i,
						  in->n_ids, max_pos);
				return 422;
			}
			c->ids[i] = in->ids; /* borrowed from req; see free_ctx */
			c->n_ids[i] = in->n_ids > (size_t)max_pos ? (size_t)max_pos : in->n_ids;
		} else {
			st = rg_model_tokenize(s->model, in->text, in->len, c->req.truncate, &c->ids[i],
					       &c->n_ids[i]);
			if (st != RG_OK) {
				rg_http_error he = rg_http_error_for(st, false);

				if (he.code == 500)
					*ret = send_error(c, he.code, he.type, "tokenizer: %s: %s",
							  rg_status_name(st), rg_last_error());
				else
					*ret = send_error(c, he.code, he.type, "input %zu: %s%s", i,
							  rg_last_error(),
							  st == RG_ERR_TOO_LONG ? " (set \"truncate\": true)"
										: "");
				return he.code;
			}
			if (c->n_ids[i] == 0) {
				*ret = send_error(c, 400, "validation",
						  "input %zu tokenizes to nothing", i);
				return 400;
			}
		}
		if (c->route != RG_ROUTE_TOKENIZE && c->n_ids[i] > (size_t)s->max_len) {
			*ret = send_error(c, 422, "validation",
					  "input %zu has %zu tokens, more than the %d the %s "
					  "scheduler can place", i, c->n_ids[i], s->max_len,
					  rg_sched_kind_name(s->kind));
			return 422;
		}
		c->prompt_tokens += c->n_ids[i];
	}
	return 0;
}

static void job_done(rg_job *job)
{
	conn_ctx *c = job->owner;

	/* Last touch of the job by the engine: after this, an HTTP thread owns c again. */
	atomic_store(&c->released, true);
	MHD_resume_connection(c->conn);
}

static enum MHD_Result handle_tokenize(conn_ctx *c)
{
	enum MHD_Result ret;
	rg_buf b;

	if (tokenize_inputs(c, &ret))
		return ret;
	rg_buf_init(&b);
	rg_buf_put(&b, "[", 1);
	for (size_t i = 0; i < c->req.n_inputs; i++) {
		rg_buf_put(&b, i ? ",[" : "[", i ? 2 : 1);
		for (size_t k = 0; k < c->n_ids[i]; k++)
			rg_buf_printf(&b, k ? ",%d" : "%d", c->ids[i][k]);
		rg_buf_put(&b, "]", 1);
	}
	rg_buf_put(&b, "]", 1);
	return send_response(c, 200, &b, "application/json", 0, 0, 0);
}

static enum MHD_Result handle_embed(conn_ctx *c)
{
	rg_server *s = c->srv;
	int h = s->info->hidden_size;
	size_t n = c->req.n_inputs, n_miss = 0;
	enum MHD_Result ret;
	const union MHD_ConnectionInfo *ci;
	rg_status st;

	if (tokenize_inputs(c, &ret))
		return ret;
	c->emb = malloc(n * (size_t)h * sizeof(float));
	c->seqs = calloc(n, sizeof(*c->seqs));
	if (!c->emb || !c->seqs)
		return send_error(c, 500, "backend", "out of memory");
	for (size_t i = 0; i < n; i++) {
		float *dst = c->emb + i * (size_t)h;

		if (s->cache && rg_cache_get(s->cache, c->ids[i], c->n_ids[i], dst))
			continue;
		c->seqs[n_miss].ids = c->ids[i];
		c->seqs[n_miss].len = (int)c->n_ids[i];
		c->seqs[n_miss].out = dst;
		n_miss++;
	}
	if (s->cache)
		rg_metrics_cache(&s->metrics, n - n_miss, n_miss);
	if (n_miss == 0)
		return answer_embeddings(c, 0, 0, 0);

	c->job.seqs = c->seqs;
	c->job.n_seqs = (int)n_miss;
	c->job.arrival_ms = c->t0;
	c->job.deadline_ms = c->t0 + s->o.request_timeout_ms;
	ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	c->job.client_fd = ci ? ci->connect_fd : -1;
	c->job.done = job_done;
	c->job.owner = c;
	/* Suspend before submitting: the worker may finish the job (and resume) at once. */
	c->suspended = true;
	atomic_fetch_add(&s->n_suspended, 1);
	MHD_suspend_connection(c->conn);
	st = rg_engine_submit(s->engine, &c->job);
	if (st != RG_OK) {
		c->submit_error = rg_http_error_for(st, atomic_load(&s->stopping));
		snprintf(c->submit_err, sizeof(c->submit_err), "%s", rg_last_error());
		atomic_store(&c->released, true);
		MHD_resume_connection(c->conn);
	}
	return MHD_YES;
}

/* Called when a suspended connection is resumed: answer from the job's outcome. */
static enum MHD_Result finish_job(conn_ctx *c)
{
	rg_job *j = &c->job;

	c->suspended = false;
	atomic_fetch_sub(&c->srv->n_suspended, 1);
	if (c->submit_error.code)
		return send_error(c, c->submit_error.code, c->submit_error.type, "%s",
				  c->submit_err);
	switch (j->state) {
	case RG_JOB_DONE:
		return answer_embeddings(c, j->queue_ms, j->inference_ms, j->batch_size);
	case RG_JOB_FAILED:
		return send_error(c, 500, "backend", "%s", j->err);
	case RG_JOB_EXPIRED:
		return send_error(c, 504, "timeout",
				  "deadline of %d ms passed before the request could run",
				  c->srv->o.request_timeout_ms);
	case RG_JOB_SHUTDOWN:
		return send_error(c, 503, "unhealthy", "server is shutting down");
	case RG_JOB_DROPPED:
	case RG_JOB_QUEUED:
		break;
	}
	return MHD_NO; /* client gone: close without answering */
}

/* ---- other routes ----------------------------------------------------------------------- */

static enum MHD_Result handle_info(conn_ctx *c)
{
	rg_server *s = c->srv;
	const rg_model_info *i = s->info;
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"version\":\"" RAGGED_VERSION "\",\"model_id\":");
	rg_buf_json_str(&b, i->model_dir, strlen(i->model_dir));
	rg_buf_printf(&b, ",\"model_type\":\"%s\",\"vocab_size\":%d,\"hidden_size\":%d,"
		       "\"num_attention_heads\":%d,\"num_hidden_layers\":%d,"
		       "\"intermediate_size\":%d,\"max_position_embeddings\":%d,"
		       "\"type_vocab_size\":%d,\"hidden_act\":\"%s\",\"layer_norm_eps\":%g,"
		       "\"pooling\":\"%s\",\"normalize\":%s,\"device\":\"%s\",\"dtype\":\"%s\","
		       "\"scheduler\":\"%s\",\"max_batch_tokens\":%d,\"max_batch_requests\":%d,"
		       "\"max_queue\":%d,\"max_inputs\":%d,\"max_body_bytes\":%zu,"
		       "\"max_input_length\":%d,\"request_timeout_ms\":%d,\"cache_entries\":%d,"
		       "\"build_cuda\":%s}",
		       i->model_type, i->vocab_size, i->hidden_size, i->num_attention_heads,
		       i->num_hidden_layers, i->intermediate_size, i->max_position_embeddings,
		       i->type_vocab_size, i->hidden_act, i->layer_norm_eps,
		       rg_pooling_name(i->pooling), i->normalize ? "true" : "false",
		       rg_device_name(i->device), rg_dtype_name(i->dtype), rg_sched_kind_name(s->kind),
		       s->o.max_batch_tokens, s->o.max_batch_requests, s->o.max_queue,
		       s->o.max_inputs, s->o.max_body_bytes, s->max_len, s->o.request_timeout_ms,
		       s->o.cache_entries, rg_build_has_cuda() ? "true" : "false");
	return send_response(c, 200, &b, "application/json", 0, 0, 0);
}

static enum MHD_Result handle_metrics(conn_ctx *c)
{
	rg_server *s = c->srv;
	size_t used = 0, total = 0;
	rg_buf b;
	bool ready = atomic_load(&s->ready);

	if (ready && rg_model_memory(s->model, &used, &total) != RG_OK)
		used = total = 0;
	rg_buf_init(&b);
	rg_metrics_render(&s->metrics, &b, ready ? rg_engine_queue_depth(s->engine) : 0, used,
			  total, ready && s->cache ? rg_cache_size(s->cache) : 0);
	return send_response(c, 200, &b, "text/plain; version=0.0.4; charset=utf-8", 0, 0, 0);
}

/* ---- MHD callbacks ---------------------------------------------------------------------- */

static rg_route route_of(const char *url)
{
	if (!strcmp(url, "/embed"))
		return RG_ROUTE_EMBED;
	if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings"))
		return RG_ROUTE_OPENAI;
	if (!strcmp(url, "/tokenize"))
		return RG_ROUTE_TOKENIZE;
	if (!strcmp(url, "/health"))
		return RG_ROUTE_HEALTH;
	if (!strcmp(url, "/info"))
		return RG_ROUTE_INFO;
	if (!strcmp(url, "/metrics"))
		return RG_ROUTE_METRICS;
	return RG_ROUTE_OTHER;
}

static enum MHD_Result dispatch(conn_ctx *c, const char *url, const char *method)
{
	rg_server *s = c->srv;
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	bool body_route = c->route == RG_ROUTE_EMBED || c->route == RG_ROUTE_OPENAI ||
			  c->route == RG_ROUTE_TOKENIZE;
	rg_req_error err;
	rg_status st;

	if (c->route == RG_ROUTE_OTHER)
		return send_error(c, 404, "not_found",
				  "no route %.200s (routes: /embed /v1/embeddings /tokenize /health "
				  "/info /metrics)", url);
	if ((body_route && !c->post) || (!body_route && !get))
		return send_error(c, 405, "method_not_allowed", "method %s not allowed on %s",
				  method, rg_route_name(c->route));
	if (c->too_big)
		return send_error(c, 413, "payload_too_large", "body larger than %zu bytes",
				  s->o.max_body_bytes);
	if (c->route == RG_ROUTE_METRICS)
		return handle_metrics(c);
	if (!atomic_load(&s->ready) || atomic_load(&s->stopping))
		return send_error(c, 503, "unhealthy", "model is %s",
				  atomic_load(&s->stopping) ? "shutting down" : "loading");
	if (c->route == RG_ROUTE_HEALTH) {
		rg_buf b;

		rg_buf_init(&b);
		rg_buf_puts(&b, "{\"status\":\"ok\"}");
		return send_response(c, 200, &b, "application/json", 0, 0, 0);
	}
	if (c->route == RG_ROUTE_INFO)
		return handle_info(c);
	st = rg_request_parse(c->route, c->body.data, c->body.len, &s->lim, &c->req, &err);
	rg_buf_free(&c->body);
	if (st != RG_OK)
		return send_error(c, err.http_status, err.type, "%s", err.msg);
	if (c->route == RG_ROUTE_TOKENIZE)
		return handle_tokenize(c);
	return handle_embed(c);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	rg_server *s = cls;
	conn_ctx *c = *con_cls;

	if (!c) {
		const char *cl;

		c = calloc(1, sizeof(*c));
		if (!c)
			return MHD_NO;
		c->srv = s;
		c->conn = conn;
		c->t0 = rg_now_ms();
		c->route = route_of(url);
		c->post = !strcmp(method, "POST");
		atomic_init(&c->released, false);
		rg_buf_init(&c->body);
		*con_cls = c;
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						 MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) {
			/* Answer before reading the body; MHD closes the connection afterwards. */
			c->too_big = true;
			return send_error(c, 413, "payload_too_large",
					  "body of %s bytes is larger than %zu bytes", cl,
					  s->o.max_body_bytes);
		}
		return MHD_YES;
	}
	if (c->suspended)
		return finish_job(c);
	if (*upload_data_size) {
		if (!c->too_big) {
			if (c->body.len + *upload_data_size > s->o.max_body_bytes) {
				c->too_big = true; /* discard the rest of the body */
				rg_buf_free(&c->body);
			} else {
				rg_buf_put(&c->body, upload_data, *upload_data_size);
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (c->body.oom)
		return send_error(c, 500, "backend", "out of memory reading the body");
	return dispatch(c, url, method);
}

static void free_ctx(conn_ctx *c)
{
	for (size_t i = 0; c->ids && i < c->req.n_inputs; i++)
		if (c->ids[i] != c->req.inputs[i].ids)
			free(c->ids[i]);
	free(c->ids);
	free(c->n_ids);
	free(c->emb);
	free(c->seqs);
	rg_request_free(&c->req);
	rg_buf_free(&c->body);
	free(c);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	conn_ctx *c = *con_cls;

	if (!c)
		return;
	if (c->suspended && !atomic_load(&c->released)) {
		/* Cannot happen: MHD never completes a suspended connection, and the engine is
		 * stopped (every job released) before the daemon. Leak rather than free memory the
		 * engine may still hold. */
		fprintf(stderr, "ragged serve: BUG: connection completed while queued\n");
		return;
	}
	/* Suspended but released: resumed at shutdown and closed before it could answer. */
	free_ctx(c);
	*con_cls = NULL;
}

/* ---- main ------------------------------------------------------------------------------- */

static rg_status setup_engine(rg_server *s)
{
	const rg_model_info *i = s->info;
	rg_sched_params sp = rg_sched_params_default(s->kind);
	rg_engine_params ep;
	char tag[4200];
	rg_status st;

	sp.max_batch_tokens = s->o.max_batch_tokens;
	sp.max_batch_requests = s->o.max_batch_requests;
	sp.row_len = s->o.row_len; /* 0: derived from the model */
	sp.n_rows = s->o.rows;
	sp.slot_len = s->o.slot_len;
	sp.eta = s->o.eta;
	rg_sched_params_derive(&sp, i->max_position_embeddings);
	sp.lazy = s->o.lazy;
	sp.latency_budget_ms = s->o.latency_budget_ms;
	sp.das_packed = s->o.das_packed;
	if (s->kind == RG_SCHED_DP) {
		st = rg_cost_warmup(s->model, s->o.cost_table, rg_device_name(s->o.device),
				    rg_dtype_name(s->o.dtype), i->max_position_embeddings,
				    s->o.max_batch_tokens, s->o.max_batch_requests, &s->cost);
		if (st != RG_OK)
			return rg_error_wrap(st, "DP cost table");
		sp.cost = s->cost;
	}
	if (s->o.cache_entries > 0) {
		snprintf(tag, sizeof(tag), "%s|%s|%s", i->model_dir, rg_device_name(i->device),
			 rg_dtype_name(i->dtype));
		s->cache = rg_cache_create((size_t)s->o.cache_entries, i->hidden_size, tag,
					   s->o.cache_db, &st);
		if (!s->cache)
			return st;
	}
	memset(&ep, 0, sizeof(ep));
	ep.sched = sp;
	ep.max_queue = s->o.max_queue;
	ep.batch_delay_ms = s->o.batch_delay_ms;
	ep.disconnect_poll_ms = 10;
	ep.cache = s->cache;
	ep.metrics = &s->metrics;
	s->engine = rg_engine_create(s->model, &ep, &st);
	if (!s->engine)
		return st;
	s->max_len = rg_engine_max_len(s->engine);
	if (s->max_len > i->max_position_embeddings)
		s->max_len = i->max_position_embeddings;
	return RG_OK;
}

static struct MHD_Daemon *start_daemon(rg_server *s)
{
	struct addrinfo hints = { 0 }, *ai = NULL;
	struct MHD_Daemon *d;
	char port[16];
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;
	const union MHD_DaemonInfo *di;
	int rc;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(port, sizeof(port), "%d", s->o.port);
	rc = getaddrinfo(s->o.host, port, &hints, &ai);
	if (rc != 0 || !ai) {
		fprintf(stderr, "ragged serve: cannot resolve host '%s': %s\n", s->o.host,
			gai_strerror(rc));
		return NULL;
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	d = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s,
			     MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			     MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->o.http_threads,
			     MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.connection_timeout_s,
			     MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, s->o.connection_memory,
			     MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
			     MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
			     MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		fprintf(stderr, "ragged serve: cannot listen on %s:%d: %s\n", s->o.host, s->o.port,
			strerror(errno));
		return NULL;
	}
	di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : s->o.port;
	return d;
}

int rg_serve_main(int argc, char **argv)
{
	rg_server *s;
	struct MHD_Daemon *d = NULL;
	rg_model_params mp = rg_model_params_default();
	sigset_t sigs;
	rg_status st;
	int rc, sig;
	struct rlimit rl;

	s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "ragged serve: out of memory\n");
		return 1;
	}
	rc = rg_serve_opts_parse(argc, argv, &s->o);
	if (rc >= 0)
		goto out_free;
	rc = 1;
	if (rg_sched_kind_parse(s->o.scheduler, &s->kind) != RG_OK) {
		fprintf(stderr, "ragged serve: %s\n", rg_last_error());
		rc = EXIT_USAGE;
		goto out_free;
	}
	if (!s->o.model[0] && rg_default_model_dir(s->o.model, sizeof(s->o.model)) != RG_OK) {
		fprintf(stderr, "ragged serve: %s\n", rg_last_error());
		goto out_free;
	}
	/* Many concurrent clients need many descriptors. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Block the stop signals in every thread; the main thread waits for them with sigwait. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	rg_metrics_init(&s->metrics);
	atomic_init(&s->ready, false);
	atomic_init(&s->stopping, false);
	atomic_init(&s->n_suspended, 0);
	/* Listen first so /health answers 503 while the model loads. */
	d = start_daemon(s);
	if (!d)
		goto out_metrics;
	mp.device = s->o.device;
	mp.dtype = s->o.dtype;
	mp.max_batch_tokens = s->o.max_batch_tokens;
	s->model = rg_model_load(s->o.model, &mp, &st);
	if (!s->model) {
		fprintf(stderr, "ragged serve: cannot load model %s: %s: %s\n", s->o.model,
			rg_status_name(st), rg_last_error());
		goto out_stop;
	}
	s->info = rg_model_get_info(s->model);
	s->o.dtype = s->info->dtype; /* RG_DTYPE_AUTO resolved by the load */
	s->lim.max_inputs = (size_t)s->o.max_inputs;
	s->lim.vocab_size = s->info->vocab_size;
	s->lim.max_depth = 32;
	if ((st = setup_engine(s)) != RG_OK) {
		fprintf(stderr, "ragged serve: %s: %s\n", rg_status_name(st), rg_last_error());
		rc = st == RG_ERR_INVALID_INPUT ? EXIT_USAGE : 1;
		goto out_stop;
	}
	atomic_store(&s->ready, true);
	printf("ragged serving %s on http://%s:%d (%s, %s, %s)\n", s->o.model, s->o.host, s->port,
	       rg_device_name(s->o.device), rg_dtype_name(s->o.dtype), rg_sched_kind_name(s->kind));
	fflush(stdout);

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = SIGTERM;
	} while (sig != SIGINT && sig != SIGTERM);
	fprintf(stderr, "ragged serve: signal %d, stopping\n", sig);
	rc = 0;
out_stop:
	/* Order: refuse new work, answer what is queued (503), stop HTTP, then free the rest. */
	atomic_store(&s->stopping, true);
	rg_engine_stop(s->engine);
	/* Give the connections resumed by the stop a moment to send their 503s. */
	for (int i = 0; i < 200 && atomic_load(&s->n_suspended) > 0; i++) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	MHD_stop_daemon(d);
	rg_engine_free(s->engine);
	rg_cache_free(s->cache);
	rg_cost_table_free(s->cost);
	rg_model_free(s->model);
out_metrics:
	rg_metrics_destroy(&s->metrics);
out_free:
	free(s);
	return rc;
}
