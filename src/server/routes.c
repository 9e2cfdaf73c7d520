/* `ragged serve`'s routes and per-connection life cycle; the request flow is described in
 * server.c. */
#include "server/server_internal.h"


#include <errno.h>
#include <limits.h>
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
#include "server/conn_watch.h"
#include "server/engine.h"
#include "server/http_guard.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/warmup.h"

/* ---- responses -------------------------------------------------------------------------- */

/* The headers the connection's guards ask for (see server.c, "Hardening"). */
static void add_guard_headers(conn_ctx *c, struct MHD_Response *r, int status)
{
	char v[32];

	if (c->close_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	if (c->retry_after_s > 0 || status == 429 || status == 503) {
		snprintf(v, sizeof(v), "%d", c->retry_after_s > 0 ? c->retry_after_s : 1);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
	}
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (c->cors_origin)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN,
					c->cors_origin);
	if (c->srv->o.cors_allow_origin) /* the answer depends on Origin: tell caches */
		MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
}

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
	if (status == 405 && c->row)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, rg_route_allow(c->row));
	add_guard_headers(c, r, status);
	rg_conn_watch_busy(c->srv->watch, rg_conn_watch_of(c->conn));
	ret = MHD_queue_response(c->conn, (unsigned)status, r);
	MHD_destroy_response(r);
	rg_metrics_request(&c->srv->metrics, c->route, status, queue_ms, infer_ms, total);
	return ret;
}

enum MHD_Result rg_conn_send(conn_ctx *c, int status, rg_buf *body, const char *ctype,
			     double queue_ms, double infer_ms, int batch_size)
{
	return send_response(c, status, body, ctype, queue_ms, infer_ms, batch_size);
}

/* OpenAI's error "type" for an HTTP status. */
static const char *openai_error_type(int status)
{
	if (status == 401)
		return "authentication_error";
	if (status == 429)
		return "rate_limit_error";
	if (status >= 500)
		return "server_error";
	return "invalid_request_error";
}

/* The error answer in TEI's shape, or OpenAI's on /v1 routes (type from the status, param the
 * offending field, code ragged's error type). */
static enum MHD_Result send_verror(conn_ctx *c, int status, const char *type, const char *param,
				   const char *fmt, va_list ap)
{
	char msg[512];
	rg_buf b;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (status == 500)
		fprintf(stderr, "ragged serve: internal error on %s: %s\n", rg_route_name(c->route),
			msg);
	rg_buf_init(&b);
	if (c->openai)
		rg_json_openai_error_body(&b, msg, openai_error_type(status), param, type);
	else
		rg_json_error_body(&b, msg, type);
	return send_response(c, status, &b, "application/json", 0, 0, 0);
}

enum MHD_Result rg_conn_error(conn_ctx *c, int status, const char *type, const char *param,
			      const char *fmt, ...)
{
	enum MHD_Result ret;
	va_list ap;

	va_start(ap, fmt);
	ret = send_verror(c, status, type, param, fmt, ap);
	va_end(ap);
	return ret;
}

static enum MHD_Result send_error(conn_ctx *c, int status, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(conn_ctx *c, int status, const char *type, const char *fmt, ...)
{
	enum MHD_Result ret;
	va_list ap;

	va_start(ap, fmt);
	ret = send_verror(c, status, type, NULL, fmt, ap);
	va_end(ap);
	return ret;
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

/* Build the 200 answer from c->emb (every input present): the model's raw pooled vectors (the
 * engine and the cache keep them raw), cut to the first "dimensions" components (Matryoshka)
 * and L2-normalized when "normalize" (default true; TEI's order: truncate, then normalize). */
static enum MHD_Result answer_embeddings(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	rg_server *s = c->srv;
	int h = s->info->output_dim, d = c->req.dimensions ? c->req.dimensions : h;
	rg_buf b;

	if (c->req.normalize)
		for (size_t i = 0; i < c->req.n_inputs; i++)
			l2_normalize(c->emb + i * (size_t)h, d);
	rg_buf_init(&b);
	if (c->route == RG_ROUTE_EMBED) {
		rg_buf_put(&b, "[", 1);
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			if (i)
				rg_buf_put(&b, ",", 1);
			rg_buf_float_array(&b, c->emb + i * (size_t)h, (size_t)d);
		}
		rg_buf_put(&b, "]", 1);
	} else {
		const char *model = c->req.model ? c->req.model : s->model_name;

		rg_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			rg_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":",
				       i ? "," : "", i);
			put_vector(&b, c->emb + i * (size_t)h, d, c->req.base64);
			rg_buf_put(&b, "}", 1);
		}
		rg_buf_puts(&b, "],\"model\":");
		rg_buf_json_str(&b, model, strlen(model));
		rg_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}",
			       c->prompt_tokens, c->prompt_tokens);
	}
	return send_response(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* One input's scores from its logits (num_labels of them) as TEI reports them: raw, or
 * sigmoid (one label, or multi-label) / softmax (several labels), in place. */
static void to_scores(float *v, int n, bool raw, bool multi_label)
{
	double mx = v[0], sum = 0;

	if (raw)
		return;
	if (n == 1 || multi_label) {
		for (int i = 0; i < n; i++)
			v[i] = (float)(1.0 / (1.0 + exp(-(double)v[i])));
		return;
	}
	for (int i = 1; i < n; i++)
		mx = v[i] > mx ? v[i] : mx;
	for (int i = 0; i < n; i++)
		sum += exp((double)v[i] - mx);
	for (int i = 0; i < n; i++)
		v[i] = (float)(exp((double)v[i] - mx) / sum);
}

/* Indices 0..n-1 ordered by score, highest first (ties: lower index first). */
static void order_by_score(const float *score, size_t stride, size_t n, size_t *idx)
{
	for (size_t i = 0; i < n; i++) {
		size_t k = i;

		while (k > 0 && score[idx[k - 1] * stride] < score[i * stride]) {
			idx[k] = idx[k - 1];
			k--;
		}
		idx[k] = i;
	}
}

/* /predict: per input [{"score": s, "label": name}, ...] by score, highest first; one input
 * answers its list, a batch a list of lists. /rerank: [{"index": i, "score": s[, "text": t]}]
 * by score, highest first. */
static enum MHD_Result answer_scores(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	const rg_model_info *info = c->srv->info;
	const int L = info->num_labels;
	size_t n = c->req.n_inputs, cap = n > (size_t)L ? n : (size_t)L;
	size_t *idx = malloc(cap * sizeof(*idx));
	rg_buf b;

	if (!idx)
		return send_error(c, 500, "backend", "out of memory");
	for (size_t i = 0; i < n; i++)
		to_scores(c->emb + i * (size_t)L, L, c->req.raw_scores, info->multi_label);
	rg_buf_init(&b);
	if (c->route == RG_ROUTE_RERANK) {
		order_by_score(c->emb, 1, n, idx);
		rg_buf_put(&b, "[", 1);
		for (size_t k = 0; k < n; k++) {
			const rg_req_input *in = &c->req.inputs[idx[k]];

			rg_buf_printf(&b, "%s{\"index\":%zu,\"score\":", k ? "," : "", idx[k]);
			rg_buf_float(&b, c->emb[idx[k]]);
			if (c->req.return_text) {
				rg_buf_puts(&b, ",\"text\":");
				rg_buf_json_str(&b, in->text_b, in->len_b);
			}
			rg_buf_put(&b, "}", 1);
		}
		rg_buf_put(&b, "]", 1);
	} else {
		if (c->req.batch)
			rg_buf_put(&b, "[", 1);
		for (size_t i = 0; i < n; i++) {
			const float *v = c->emb + i * (size_t)L;

			order_by_score(v, 1, (size_t)L, idx);
			rg_buf_puts(&b, i ? ",[" : "[");
			for (int k = 0; k < L; k++) {
				rg_buf_puts(&b, k ? ",{\"score\":" : "{\"score\":");
				rg_buf_float(&b, v[idx[k]]);
				rg_buf_puts(&b, ",\"label\":");
				rg_buf_json_str(&b, info->labels[idx[k]], strlen(info->labels[idx[k]]));
				rg_buf_put(&b, "}", 1);
			}
			rg_buf_put(&b, "]", 1);
		}
		if (c->req.batch)
			rg_buf_put(&b, "]", 1);
	}
	free(idx);
	return send_response(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* The answer of a request whose job ended DONE (or that needed no job: every input cached). */
static enum MHD_Result answer(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	return c->row->answer(c, queue_ms, infer_ms, bs);
}

/* Tokenize every input into c->ids (texts, the request's prompt prepended first; truncation
 * side as asked) or adopt the given ids (OpenAI token arrays). /tokenize keeps the encodings
 * (with offsets) in c->encs instead and has no length limit unless "truncate" is set.
 * Returns 0 or the HTTP error status already sent (then the caller returns ret). */
static int tokenize_inputs(conn_ctx *c, enum MHD_Result *ret)
{
	rg_server *s = c->srv;
	size_t n = c->req.n_inputs;
	int max_pos = s->info->max_seq_len;
	bool tok_route = c->route == RG_ROUTE_TOKENIZE;
	const char *prompt = NULL;
	rg_encode_params ep = rg_encode_params_default();

	if (rg_request_prompt(c, &prompt, ret))
		return 400;
	c->ids = calloc(n, sizeof(*c->ids));
	c->n_ids = calloc(n, sizeof(*c->n_ids));
	c->types = calloc(n, sizeof(*c->types));
	c->texts = calloc(n, sizeof(*c->texts));
	c->text_lens = calloc(n, sizeof(*c->text_lens));
	c->encs = tok_route ? calloc(n, sizeof(*c->encs)) : NULL;
	if (!c->ids || !c->n_ids || !c->types || !c->texts || !c->text_lens ||
	    (tok_route && !c->encs)) {
		*ret = send_error(c, 500, "backend", "out of memory");
		return 500;
	}
	ep.truncation = !c->req.truncate ? RG_TRUNCATE_NONE
		      : c->req.truncate_left ? RG_TRUNCATE_LEFT : RG_TRUNCATE_RIGHT;
	if (tok_route) {
		ep.offsets = true;
		ep.add_special_tokens = c->req.add_special_tokens;
		if (!c->req.truncate)
			ep.max_length = SIZE_MAX;
	}
	for (size_t i = 0; i < n; i++) {
		rg_req_input *in = &c->req.inputs[i];
		rg_encoding e;
		rg_status st;

		if (in->ids) {
			if (in->n_ids > (size_t)max_pos && !c->req.truncate) {
				*ret = rg_conn_error(c, 422, "validation", "input",
						     "input %zu has %zu tokens, more than the model's "
						     "maximum of %d (set \"truncate\": true)", i,
						     in->n_ids, max_pos);
				return 422;
			}
			if (in->n_ids > (size_t)max_pos && c->req.truncate_left) {
				/* keep the last ids (the array is the request's own) */
				memmove(in->ids, in->ids + (in->n_ids - (size_t)max_pos),
					(size_t)max_pos * sizeof(*in->ids));
				in->n_ids = (size_t)max_pos;
			}
			c->ids[i] = in->ids; /* borrowed from req; see free_ctx */
			c->n_ids[i] = in->n_ids > (size_t)max_pos ? (size_t)max_pos : in->n_ids;
		} else {
			const char *text = in->text;
			size_t len = in->len;

			if (prompt && !in->text_b) {
				size_t pl = strlen(prompt);

				if (!(c->texts[i] = malloc(pl + len + 1))) {
					*ret = send_error(c, 500, "backend", "out of memory");
					return 500;
				}
				memcpy(c->texts[i], prompt, pl);
				memcpy(c->texts[i] + pl, in->text, len + 1);
				c->text_lens[i] = pl + len;
				text = c->texts[i];
				len = pl + len;
			}
			st = rg_model_encode(s->model, text, len, in->text_b, in->len_b, &ep, &e);
			if (st != RG_OK) {
				rg_http_error he = rg_http_error_for(st, false);

				if (he.code == 500)
					*ret = send_error(c, he.code, he.type, "tokenizer: %s: %s",
							  rg_status_name(st), rg_last_error());
				else
					*ret = rg_conn_error(c, he.code, he.type, "input",
							     "input %zu: %s%s", i, rg_last_error(),
							     st == RG_ERR_TOO_LONG
								     ? " (set \"truncate\": true)"
								     : "");
				return he.code;
			}
			c->n_ids[i] = e.n;
			if (tok_route) {
				c->encs[i] = e; /* owns the ids; c->ids[i] stays NULL */
			} else {
				c->ids[i] = e.ids;
				if (in->text_b)
					c->types[i] = e.types;
				else
					free(e.types);
				free(e.special);
				free(e.start);
				free(e.stop);
			}
			if (e.n == 0 && !tok_route) {
				*ret = rg_conn_error(c, 400, "validation", "input",
						     "input %zu tokenizes to nothing", i);
				return 400;
			}
		}
		if (!tok_route && c->n_ids[i] > (size_t)s->max_len) {
			*ret = rg_conn_error(c, 422, "validation", "input",
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

	if (tokenize_inputs(c, &ret))
		return ret;
	return rg_answer_tokenize(c);
}

/* The answer to a refused submit (and its Retry-After): the queue is full or the request
 * cannot meet its deadline by estimate (429, retry when the queued work leaves room), it alone
 * needs more than the timeout (413), the server is stopping (503). */
static rg_http_error submit_error_for(conn_ctx *c, rg_status st)
{
	const rg_job *j = &c->job;

	switch (j->refusal) {
	case RG_JOB_QUEUE_FULL:
	case RG_JOB_NO_TIME:
		c->retry_after_s = (int)fmin(3600, fmax(1, ceil(j->retry_after_ms / 1e3)));
		return (rg_http_error){429, "overloaded"};
	case RG_JOB_TOO_MUCH:
		return (rg_http_error){413, "payload_too_large"};
	case RG_JOB_STOPPING:
		c->retry_after_s = 1;
		return (rg_http_error){503, "unhealthy"};
	case RG_JOB_ADMITTED:
		break;
	}
	return rg_http_error_for(st, atomic_load(&c->srv->stopping));
}

/* Take n bytes of the --max-buffered-bytes budget for c's answer (given back by free_ctx, after
 * the answer was sent); false when they do not fit now. */
static bool reserve_answer(conn_ctx *c, size_t n)
{
	rg_server *s = c->srv;
	size_t cur = atomic_load(&s->buffered);

	do {
		if (n > s->o.max_buffered_bytes || cur > s->o.max_buffered_bytes - n)
			return false;
	} while (!atomic_compare_exchange_weak(&s->buffered, &cur, cur + n));
	c->answer_reserved += n;
	return true;
}

static enum MHD_Result handle_embed(conn_ctx *c)
{
	rg_server *s = c->srv;
	int h = s->info->output_dim;
	size_t n = c->req.n_inputs, n_miss = 0;
	bool all_tokens = c->route == RG_ROUTE_EMBED_ALL;
	enum MHD_Result ret;
	const union MHD_ConnectionInfo *ci;
	rg_status st;

	if (c->req.dimensions > s->info->output_dim)
		return rg_conn_error(c, 400, "validation", "dimensions",
				     "\"dimensions\" is %d, more than the model's %d output dimensions",
				     c->req.dimensions, s->info->output_dim);
	if (tokenize_inputs(c, &ret))
		return ret;
	if (c->prompt_tokens > (size_t)s->o.max_client_batch_tokens)
		return send_error(c, 413, "payload_too_large",
				  "%zu inputs of %zu tokens in all, more than the %d tokens a request "
				  "may hold (--max-client-batch-tokens): send fewer inputs per request",
				  n, c->prompt_tokens, s->o.max_client_batch_tokens);
	c->emb = malloc(n * (size_t)h * sizeof(float));
	c->seqs = calloc(n, sizeof(*c->seqs));
	if (!c->emb || !c->seqs)
		return send_error(c, 500, "backend", "out of memory");
	if (all_tokens) {
		/* /embed_all: every token's vector, (sum of lengths, hidden_size) */
		size_t rows = c->prompt_tokens;
		size_t need = rg_embed_all_answer_bytes(rows, n, (size_t)s->info->hidden_size);

		/* issue 18, item 15: the vectors and their JSON count against the buffered-bytes
		 * budget until the answer is sent (one request at the token cap made 612 MB) */
		if (need > s->o.max_buffered_bytes)
			return send_error(c, 413, "payload_too_large",
					  "the /embed_all answer for %zu tokens takes about %zu MiB, "
					  "more than --max-buffered-bytes (%zu MiB): send fewer tokens "
					  "per request", rows, need >> 20, s->o.max_buffered_bytes >> 20);
		if (!reserve_answer(c, need)) {
			c->retry_after_s = 1;
			return send_error(c, 503, "overloaded",
					  "answers being built fill --max-buffered-bytes (the /embed_all "
					  "answer for %zu tokens takes about %zu MiB); retry later",
					  rows, need >> 20);
		}
		c->hidden = malloc((rows ? rows : 1) * (size_t)s->info->hidden_size * sizeof(float));
		if (!c->hidden)
			return send_error(c, 500, "backend", "out of memory for %zu token vectors",
					  rows);
	}
	for (size_t i = 0, row = 0; i < n; row += c->n_ids[i], i++) {
		float *dst = c->emb + i * (size_t)h;

		if (!all_tokens && s->cache && !c->types[i] &&
		    rg_cache_get(s->cache, c->ids[i], c->n_ids[i], dst))
			continue;
		c->seqs[n_miss].ids = c->ids[i];
		c->seqs[n_miss].types = c->types[i];
		c->seqs[n_miss].len = (int)c->n_ids[i];
		c->seqs[n_miss].out = dst;
		c->seqs[n_miss].hidden_out =
			all_tokens ? c->hidden + row * (size_t)s->info->hidden_size : NULL;
		n_miss++;
	}
	if (s->cache)
		rg_metrics_cache(&s->metrics, n - n_miss, n_miss);
	if (n_miss == 0)
		return answer(c, 0, 0, 0);

	c->job.seqs = c->seqs;
	c->job.n_seqs = (int)n_miss;
	c->job.arrival_ms = c->t0;
	c->job.deadline_ms = c->t0 + s->o.request_timeout_ms;
	ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	c->job.client_fd = ci ? ci->connect_fd : -1;
	c->job.done = job_done;
	c->job.owner = c;
	/* TEI's --max-concurrent-requests: requests queued or running at most (a soft bound:
	 * two requests may pass the check together) */
	if (s->o.max_concurrent_requests &&
	    atomic_load(&s->n_suspended) >= s->o.max_concurrent_requests)
		return rg_conn_error(c, 429, "overloaded", NULL,
				     "%d requests queued or running, the --max-concurrent-requests "
				     "limit; retry later", s->o.max_concurrent_requests);
	/* Suspend before submitting: the worker may finish the job (and resume) at once. */
	c->suspended = true;
	atomic_fetch_add(&s->n_suspended, 1);
	MHD_suspend_connection(c->conn);
	st = rg_engine_submit(s->engine, &c->job);
	if (st != RG_OK) {
		c->submit_error = submit_error_for(c, st);
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
		return answer(c, j->queue_ms, j->inference_ms, j->batch_size);
	case RG_JOB_FAILED:
		return send_error(c, 500, "backend", "%s", j->err);
	case RG_JOB_EXPIRED:
		return send_error(c, 504, "timeout",
				  "deadline of %d ms passed before the request could finish",
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

static enum MHD_Result handle_metrics(conn_ctx *c)
{
	rg_server *s = c->srv;
	size_t used = 0, total = 0;
	rg_buf b;
	bool ready = atomic_load(&s->ready);

	/* every GPU's memory together; on the CPU the process's RSS, counted once */
	for (int i = 0; ready && i < (s->info->device == RG_DEVICE_CUDA ? s->n_models : 1); i++) {
		size_t u, t;

		if (rg_model_memory(s->models[i], &u, &t) != RG_OK) {
			used = total = 0;
			break;
		}
		used += u;
		total += t;
	}
	rg_buf_init(&b);
	rg_metrics_render(&s->metrics, &b, ready ? rg_engine_queue_depth(s->engine) : 0, used,
			  total, ready && s->cache ? rg_cache_size(s->cache) : 0);
	if (ready && s->kind == RG_SCHED_DP) {
		/* the background DP measurement (engine.h): cells done / in all, and whether the
		 * dp scheduler is in use yet */
		char sched[64];
		int done, total_cells;

		rg_engine_sched_state(s->engine, sched, sizeof(sched), &done, &total_cells);
		rg_buf_printf(&b, "# HELP ragged_dp_cost_cells_measured Cells of the DP cost table "
			      "measured at this start (of ragged_dp_cost_cells_total).\n"
			      "# TYPE ragged_dp_cost_cells_measured gauge\n"
			      "ragged_dp_cost_cells_measured %d\n"
			      "# HELP ragged_dp_cost_cells_total Cells of the DP cost table to "
			      "measure at this start (0: it was loaded).\n"
			      "# TYPE ragged_dp_cost_cells_total gauge\n"
			      "ragged_dp_cost_cells_total %d\n"
			      "# HELP ragged_dp_scheduler_active 1 when the dp scheduler is in use, 0 "
			      "while the token scheduler serves.\n"
			      "# TYPE ragged_dp_scheduler_active gauge\n"
			      "ragged_dp_scheduler_active %d\n",
			      done, total_cells, !strcmp(sched, "dp"));
	}
	return send_response(c, 200, &b, "text/plain; version=0.0.4; charset=utf-8", 0, 0, 0);
}

/* ---- MHD callbacks ---------------------------------------------------------------------- */

/* Give back the request's share of the buffered-bytes budget and its body. */
static void release_body(conn_ctx *c)
{
	if (c->reserved)
		atomic_fetch_sub(&c->srv->buffered, c->reserved);
	c->reserved = 0;
	rg_buf_free(&c->body);
}

/* GET /health, /ping and GET /: 200 once the model is loaded (the 503 before is dispatch's). */
static enum MHD_Result handle_health(conn_ctx *c)
{
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"status\":\"ok\"}");
	return send_response(c, 200, &b, "application/json", 0, 0, 0);
}

static enum MHD_Result handle_model(conn_ctx *c)
{
	return rg_answer_model(c, c->path_arg ? c->path_arg : "");
}

/* ---- the route table -------------------------------------------------------------------- */

/* OpenAPI fragments the rows share (JSON text). */
#define J_FLOAT "{\"type\":\"number\",\"format\":\"float\"}"
#define S_VECTORS "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":" J_FLOAT "}}"
#define S_READY "{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\"}}}"
#define R_NOT_READY                                                                         \
	"\"503\":{\"description\":\"Not ready (Retry-After)\",\"content\":{\"application/json\":" \
	"{\"schema\":{\"$ref\":\"#/components/schemas/ErrorResponse\"}}}}"
#define S_MODEL                                                                             \
	"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":" \
	"\"string\"},\"created\":{\"type\":\"integer\"},\"owned_by\":{\"type\":\"string\"}}}"
#define E_RUN "400 413 422 429 503 504" /* the errors of a route that runs the model */
#define SUMMARY_READY "Ready: 200 once the model is loaded, 503 before and while stopping."
#define SUMMARY_OPENAI "OpenAI-compatible embeddings; errors in OpenAI's shape."
#define KIND_SCORES (RG_KIND_RERANKER | RG_KIND_CLASSIFIER)

/* One row per path and method set, in the order of the 404 text and /openapi.json. */
static const rg_route_def routes[] = {
	{.path = "/", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = SUMMARY_READY, .ok_desc = "Ready", .ok_schema = S_READY,
	 .responses = R_NOT_READY},
	{.path = "/", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .by_kind = true, .schema = "EmbedRequest", .kinds = RG_KIND_ANY,
	 .summary = "TEI's default route (huggingface_hub posts here), by the model's kind: /embed "
		    "for an embedding model, /predict for a classifier, /rerank for a reranker (the "
		    "bodies of those routes; the schema shows /embed's).",
	 .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/invocations", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .by_kind = true, .schema = "EmbedRequest", .kinds = RG_KIND_ANY,
	 .summary = "SageMaker's route, as POST /: /embed, /predict or /rerank by the model's kind "
		    "(the schema shows /embed's).",
	 .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/embed", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .handle = handle_embed, .answer = answer_embeddings, .schema = "EmbedRequest",
	 .kinds = RG_KIND_EMBEDDING, .kind_default = true,
	 .summary = "Pooled embeddings (TEI).", .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/embed_all", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED_ALL,
	 .name = "embed_all", .handle = handle_embed, .answer = rg_answer_embed_all,
	 .schema = "EmbedAllRequest", .kinds = RG_KIND_EMBEDDING,
	 .summary = "Every token's last hidden state, no pooling (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":" S_VECTORS "}", .errors = E_RUN},
	{.path = "/v1/embeddings", .methods = RG_METHOD_POST, .id = RG_ROUTE_OPENAI,
	 .name = "v1_embeddings", .handle = handle_embed, .answer = answer_embeddings,
	 .schema = "OpenAIRequest", .kinds = RG_KIND_EMBEDDING, .openai = true,
	 .summary = SUMMARY_OPENAI,
	 .ok_schema = "{\"$ref\":\"#/components/schemas/OpenAIResponse\"}", .errors = E_RUN},
	{.path = "/embeddings", .methods = RG_METHOD_POST, .id = RG_ROUTE_OPENAI,
	 .name = "v1_embeddings", .handle = handle_embed, .answer = answer_embeddings,
	 .schema = "OpenAIRequest", .kinds = RG_KIND_EMBEDDING, .openai = true,
	 .summary = SUMMARY_OPENAI,
	 .ok_schema = "{\"$ref\":\"#/components/schemas/OpenAIResponse\"}", .errors = E_RUN},
	{.path = "/similarity", .methods = RG_METHOD_POST, .id = RG_ROUTE_SIMILARITY,
	 .name = "similarity", .handle = handle_embed, .answer = rg_answer_similarity,
	 .schema = "SimilarityRequest", .kinds = RG_KIND_EMBEDDING,
	 .summary = "Cosine similarity of the source sentence with each sentence (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":" J_FLOAT "}", .errors = E_RUN},
	{.path = "/rerank", .methods = RG_METHOD_POST, .id = RG_ROUTE_RERANK, .name = "rerank",
	 .handle = handle_embed, .answer = answer_scores, .schema = "RerankRequest",
	 .kinds = RG_KIND_RERANKER, .kind_default = true,
	 .summary = "Cross-encoder relevance of each text to the query, best first (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"index\":"
		      "{\"type\":\"integer\"},\"score\":" J_FLOAT ",\"text\":{\"type\":\"string\"}}}}",
	 .errors = E_RUN},
	{.path = "/predict", .methods = RG_METHOD_POST, .id = RG_ROUTE_PREDICT, .name = "predict",
	 .handle = handle_embed, .answer = answer_scores, .schema = "PredictRequest",
	 .kinds = KIND_SCORES, .kind_default = true,
	 .summary = "Sequence classification scores (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{}}", .errors = E_RUN},
	{.path = "/tokenize", .methods = RG_METHOD_POST, .id = RG_ROUTE_TOKENIZE,
	 .name = "tokenize", .handle = handle_tokenize, .schema = "TokenizeRequest",
	 .kinds = RG_KIND_ANY, .summary = "Token objects per input (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"$ref\":"
		      "\"#/components/schemas/SimpleToken\"}}}",
	 .errors = "400 413 422 503"},
	{.path = "/decode", .methods = RG_METHOD_POST, .id = RG_ROUTE_DECODE, .name = "decode",
	 .handle = rg_answer_decode, .schema = "DecodeRequest", .kinds = RG_KIND_ANY,
	 .summary = "Token ids back to text (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}",
	 .errors = "400 413 501 503"},
	{.path = "/health", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = SUMMARY_READY, .ok_desc = "Ready", .ok_schema = S_READY,
	 .responses = R_NOT_READY},
	{.path = "/ping", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = "SageMaker health check, as /health.", .ok_desc = "Ready",
	 .ok_schema = S_READY, .responses = R_NOT_READY},
	{.path = "/info", .methods = RG_METHOD_GET, .id = RG_ROUTE_INFO, .name = "info",
	 .handle = rg_answer_info, .kinds = RG_KIND_ANY,
	 .summary = "Model and server settings (TEI's Info fields and ragged's).",
	 .ok_schema = "{\"type\":\"object\"}", .errors = "503"},
	{.path = "/metrics", .methods = RG_METHOD_GET, .id = RG_ROUTE_METRICS, .name = "metrics",
	 .handle = handle_metrics, .kinds = RG_KIND_ANY, .before_ready = true,
	 .summary = "Prometheus metrics.", .ok_desc = "Text exposition format 0.0.4",
	 .ok_type = "text/plain", .ok_schema = "{\"type\":\"string\"}"},
	{.path = "/v1/models", .methods = RG_METHOD_GET, .id = RG_ROUTE_MODELS, .name = "v1_models",
	 .handle = rg_answer_models, .kinds = RG_KIND_ANY, .openai = true,
	 .summary = "The served model (OpenAI's list).",
	 .ok_schema = "{\"type\":\"object\",\"properties\":{\"object\":{\"type\":\"string\"},"
		      "\"data\":{\"type\":\"array\",\"items\":" S_MODEL "}}}",
	 .errors = "503"},
	{.path = "/v1/models/{model}", .methods = RG_METHOD_GET, .id = RG_ROUTE_MODEL,
	 .name = "v1_model", .handle = handle_model, .kinds = RG_KIND_ANY, .openai = true,
	 .summary = "The served model (OpenAI's model object); 404 in OpenAI's error shape for "
		    "another id.",
	 .ok_schema = S_MODEL,
	 .responses = "\"404\":{\"description\":\"Not the served model (OpenAI's error shape)\"}",
	 .params = "[{\"name\":\"model\",\"in\":\"path\",\"required\":true,\"schema\":{\"type\":"
		   "\"string\"}}]"},
	{.path = "/openapi.json", .methods = RG_METHOD_GET, .id = RG_ROUTE_OPENAPI,
	 .name = "openapi", .handle = rg_answer_openapi, .kinds = RG_KIND_ANY,
	 .summary = "This document.", .ok_desc = "OpenAPI 3", .ok_schema = "{\"type\":\"object\"}"},
};

const rg_route_def *rg_routes(size_t *n)
{
	*n = sizeof(routes) / sizeof(routes[0]);
	return routes;
}

const char *rg_route_name(rg_route r)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].id == r)
			return routes[i].name;
	return "other";
}

unsigned rg_route_kind_of(int num_labels)
{
	return !num_labels ? RG_KIND_EMBEDDING : num_labels == 1 ? RG_KIND_RERANKER
								  : RG_KIND_CLASSIFIER;
}

/* Whether path matches row's path: equal, or its prefix before a last "{name}" segment followed
 * by a non-empty rest (*arg). */
static bool path_matches(const rg_route_def *row, const char *path, const char **arg)
{
	const char *brace = strchr(row->path, '{');
	size_t n;

	if (!brace)
		return !strcmp(row->path, path);
	n = (size_t)(brace - row->path);
	if (strncmp(row->path, path, n) || !path[n])
		return false;
	*arg = path + n;
	return true;
}

static unsigned method_bit(const char *method)
{
	if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
		return RG_METHOD_GET;
	if (!strcmp(method, "POST"))
		return RG_METHOD_POST;
	return 0;
}

const rg_route_def *rg_route_find(const char *path, const char *method, unsigned kind,
				  const char **arg)
{
	const size_t n = sizeof(routes) / sizeof(routes[0]);
	const rg_route_def *row = NULL;
	unsigned m = method_bit(method);
	const char *a = NULL;

	*arg = NULL;
	for (size_t i = 0; i < n; i++) {
		const char *ai = NULL;

		if (!path_matches(&routes[i], path, &ai))
			continue;
		row = &routes[i];
		a = ai;
		if (routes[i].methods & m)
			break;
	}
	if (row && row->by_kind) {
		kind = kind ? kind : RG_KIND_EMBEDDING;
		for (size_t i = 0; i < n; i++)
			if (routes[i].kind_default && (routes[i].kinds & kind))
				return &routes[i];
	}
	*arg = a;
	return row;
}

const char *rg_route_allow(const rg_route_def *row)
{
	switch (row->methods) {
	case RG_METHOD_GET: return "GET, HEAD";
	case RG_METHOD_POST: return "POST";
	default: return "GET, HEAD, POST";
	}
}

void rg_routes_list(char *buf, size_t n)
{
	size_t w = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]) && w < n; i++) {
		if (i && !strcmp(routes[i].path, routes[i - 1].path))
			continue;
		w += (size_t)snprintf(buf + w, n - w, "%s%s", w ? " " : "", routes[i].path);
	}
}

/* 400 when the model's kind is not one the row serves (TEI: an embedding model has no /predict,
 * a classifier no /embed; /rerank needs a single-score cross-encoder); *ret set and true then. */
static bool refuse_kind(conn_ctx *c, enum MHD_Result *ret)
{
	rg_server *s = c->srv;
	unsigned kind = rg_route_kind_of(s->info->num_labels);

	if (c->row->kinds & kind)
		return false;
	if (kind == RG_KIND_EMBEDDING)
		*ret = send_error(c, 400, "validation",
				  "%s needs a sequence classification model; %s is an embedding "
				  "model (use /embed or /v1/embeddings)",
				  c->row->name, s->model_name);
	else if (c->row->kinds & RG_KIND_EMBEDDING)
		*ret = send_error(c, 400, "validation",
				  "%s is a sequence classification model; use /predict%s",
				  s->model_name, kind == RG_KIND_RERANKER ? " or /rerank" : "");
	else
		*ret = send_error(c, 400, "validation",
				  "%s needs a cross-encoder with one score; this classifier has %d "
				  "labels (use /predict)",
				  c->row->name, s->info->num_labels);
	return true;
}

/* The request has arrived in full: 404 / 405 / 503, the body parsed by the row's schema, the
 * model kind checked, then the row's handler. */
static enum MHD_Result dispatch(conn_ctx *c, const char *url, const char *method)
{
	rg_server *s = c->srv;
	const rg_route_def *row = c->row;
	enum MHD_Result ret;
	rg_req_error err;
	rg_status st;

	if (!row) {
		char list[512];

		rg_routes_list(list, sizeof(list));
		return send_error(c, 404, "not_found", "no route %.200s (routes: %s)", url, list);
	}
	if (!(row->methods & method_bit(method)))
		return send_error(c, 405, "method_not_allowed", "method %s not allowed on %s",
				  method, row->name);
	if (!path_matches(row, url, &c->path_arg)) /* this callback's url: MHD's, valid now */
		c->path_arg = NULL;
	if (!row->before_ready && (!atomic_load(&s->ready) || atomic_load(&s->stopping)))
		return send_error(c, 503, "unhealthy", "model is %s",
				  atomic_load(&s->stopping) ? "shutting down" : "loading");
	if (row->schema) {
		st = rg_request_parse(row->id, c->body.data, c->body.len, &s->lim, &c->req, &err);
		release_body(c);
		if (st != RG_OK)
			return rg_conn_error(c, err.http_status, err.type, err.param, "%s", err.msg);
	}
	if (row->kinds != RG_KIND_ANY && refuse_kind(c, &ret))
		return ret;
	return row->handle(c);
}

/* ---- before the body: framing, CORS, authentication, media type, size --------------------- */

/* Take n bytes of the server's --max-buffered-bytes budget; false when they do not fit. */
static bool reserve_body(conn_ctx *c, size_t n)
{
	rg_server *s = c->srv;
	size_t cur = atomic_load(&s->buffered);

	do {
		if (n > s->o.max_buffered_bytes || cur > s->o.max_buffered_bytes - n)
			return false;
	} while (!atomic_compare_exchange_weak(&s->buffered, &cur, cur + n));
	c->reserved += n;
	return true;
}

/* Record the answer to a request refused before its body was read. A client writing the whole
 * body before it reads (urllib, requests) gets a reset instead of the answer when the server
 * closes with the body unread; so the body is read and dropped (up to --max-discard-bytes) and
 * the answer sent at its end, on a connection that stays open. */
static void refuse_later(conn_ctx *c, int status, const char *type, const char *msg)
{
	release_body(c);
	c->refused = status;
	c->refused_type = type;
	snprintf(c->refused_msg, sizeof(c->refused_msg), "%s", msg);
	if (status == 503)
		c->retry_after_s = 1;
}

/* Refuse at the headers: answer now when nothing (or a 100-continue) is pending, or the body is
 * longer than we would read; else read and drop the body first (refuse_later). */
static enum MHD_Result refuse(conn_ctx *c, int status, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static enum MHD_Result refuse(conn_ctx *c, int status, const char *type, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	bool chunked = c->content_length == ULLONG_MAX &&
		       MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
						   MHD_HTTP_HEADER_TRANSFER_ENCODING);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	refuse_later(c, status, type, msg);
	if ((c->content_length == ULLONG_MAX && !chunked) || c->content_length == 0 ||
	    c->expect_continue || (c->content_length != ULLONG_MAX &&
				   c->content_length > c->srv->o.max_discard_bytes))
		return send_error(c, status, type, "%s", msg);
	return MHD_YES;
}

/* What on_headers learns from the header fields, one walk over them. */
typedef struct header_walk {
	rg_framing f;
	int n_host;              /* Host fields */
	bool bad_value;          /* a value with a control byte (NUL, bare CR, ...) */
	char bad_key[48];        /* the first such field's name */
	rg_header_span *spans;   /* (cap) the fields in order, for rg_header_layout_check */
	size_t n, cap;
} header_walk;

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
				   size_t key_size, const char *value, size_t value_size)
{
	header_walk *w = cls;

	rg_framing_add(&w->f, key, value);
	if (key && !strcasecmp(key, MHD_HTTP_HEADER_HOST))
		w->n_host++;
	if (value && !w->bad_value && !rg_field_value_ok(value, value_size)) {
		w->bad_value = true;
		snprintf(w->bad_key, sizeof(w->bad_key), "%s", key ? key : "");
	}
	if (key && value && w->n < w->cap)
		w->spans[w->n++] = (rg_header_span){key, key_size, value, value_size};
	return MHD_YES;
}

/* The request's line and header block beyond framing (issue 18, items 13, 16, 17): a raw target
 * with a NUL, %00, a space or a control byte; obs-fold and NUL bytes in the header block (where
 * the libmicrohttpd version's layout is known); control bytes in values; a missing (HTTP/1.1) or
 * repeated Host; a Host (or an absolute-form target's authority) outside --allowed-hosts.
 * 0, or the status to answer with Connection: close and the reason in msg. */
static int check_request_line_and_host(conn_ctx *c, header_walk *w, const char *version,
				       const char *authority, char *msg, size_t n)
{
	rg_server *s = c->srv;
	const char *host;
	int st;

	if (c->target_seen && c->target_err[0]) {
		snprintf(msg, n, "%s", c->target_err);
		return 400;
	}
	/* the version follows the raw target's terminating NUL; a NUL inside the target ends the
	 * string earlier ("/embed\0x" was served as "/embed") */
	if (s->mhd_layout && c->target_seen && version && *version &&
	    (uintptr_t)version != (uintptr_t)c->target_end + 1) {
		snprintf(msg, n, "request target holds a NUL byte");
		return 400;
	}
	if (s->mhd_layout && w->n && w->n == w->cap &&
	    (st = rg_header_layout_check(w->spans, w->n, 4096, msg, n)))
		return st;
	if (w->bad_value) {
		snprintf(msg, n, "header field %s holds a control byte (NUL, CR or LF) in its value",
			 w->bad_key);
		return 400;
	}
	if (w->n_host > 1) {
		snprintf(msg, n, "more than one Host field");
		return 400;
	}
	if (!w->n_host && version && !strcmp(version, MHD_HTTP_VERSION_1_1)) {
		snprintf(msg, n, "an HTTP/1.1 request needs a Host field");
		return 400;
	}
	/* RFC 9112 sec. 3.2.2: with an absolute-form target, its authority is the host */
	host = authority[0] ? authority
			    : MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
							 MHD_HTTP_HEADER_HOST);
	/* no Host at all (HTTP/1.0, which needs none) comes from no browser: nothing to rebind */
	if (host && !rg_host_allowed(s->allowed_hosts, host)) {
		snprintf(msg, n, "Host %.100s is not allowed (--allowed-hosts %.200s)", host,
			 s->allowed_hosts);
		return 400;
	}
	return 0;
}

/* A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method, Fetch standard
 * sec. 3.2.2) under --cors-allow-origin: 204 with the Access-Control-Allow-* headers for an
 * allowed origin, 403 otherwise. The headers a page asks for are allowed (the origin is what is
 * checked); credentials are not (the API key travels in Authorization, set by the page). */
static enum MHD_Result answer_preflight(conn_ctx *c)
{
	const char *hdrs = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
						      MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_HEADERS);
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!c->cors_origin)
		return send_error(c, 403, "forbidden", "origin not allowed by --cors-allow-origin");
	r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS,
				"GET, HEAD, POST");
	MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
				hdrs && *hdrs ? hdrs : "Authorization, Content-Type");
	MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, "600");
	add_guard_headers(c, r, 204);
	rg_conn_watch_busy(c->srv->watch, rg_conn_watch_of(c->conn));
	ret = MHD_queue_response(c->conn, 204, r);
	MHD_destroy_response(r);
	rg_metrics_request(&c->srv->metrics, c->route, 204, 0, 0, rg_now_ms() - c->t0);
	return ret;
}

/* The first call, headers complete, nothing of the body read yet. In order: framing (400/501,
 * then the connection closes: RFC 9112 sec. 6.3), a CORS preflight, the API key (401), and for
 * a POST to a JSON route the media type (415), the size (413) and the buffered-bytes budget
 * (503). 404/405 come at the end (dispatch). */
static enum MHD_Result on_headers(conn_ctx *c, const char *method, const char *version,
				  const char *authority)
{
	rg_server *s = c->srv;
	header_walk w;
	const char *ct, *origin;
	char msg[360];
	int st, n;

	memset(&w, 0, sizeof(w));
	rg_framing_init(&w.f);
	n = MHD_get_connection_values(c->conn, MHD_HEADER_KIND, NULL, NULL);
	w.cap = n > 0 ? (size_t)n : 0;
	w.spans = w.cap ? malloc(w.cap * sizeof(*w.spans)) : NULL;
	if (w.cap && !w.spans)
		w.cap = 0; /* out of memory: the layout check is skipped (w.n != w.cap) */
	MHD_get_connection_values_n(c->conn, MHD_HEADER_KIND, walk_header, &w);
	c->content_length = w.f.n_content_length && !w.f.content_length_bad ? w.f.content_length
									     : ULLONG_MAX;
	c->expect_continue = w.f.expect_continue;
	st = rg_framing_check(&w.f, version && !strcmp(version, MHD_HTTP_VERSION_1_0), msg,
			      sizeof(msg));
	if (!st)
		st = check_request_line_and_host(c, &w, version, authority, msg, sizeof(msg));
	free(w.spans);
	if (st) {
		c->close_after = true;
		return send_error(c, st, "validation", "%s", msg);
	}
	origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
	c->cors_origin = rg_cors_allow(s->o.cors_allow_origin, origin);
	if (s->o.cors_allow_origin && !strcmp(method, MHD_HTTP_METHOD_OPTIONS) && origin &&
	    MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
					MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_METHOD))
		return answer_preflight(c);
	if (s->o.api_key && !(c->row && c->row->public_route) &&
	    !rg_bearer_matches(MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
							  MHD_HTTP_HEADER_AUTHORIZATION),
			       s->o.api_key))
		return refuse(c, 401, "unauthorized",
			      "missing or wrong API key (send Authorization: Bearer KEY)");
	if (c->content_length != ULLONG_MAX && c->content_length > s->o.max_body_bytes)
		return refuse(c, 413, "payload_too_large", "body of %llu bytes is larger than %zu bytes",
			      c->content_length, s->o.max_body_bytes);
	if (!c->wants_body)
		return MHD_YES;
	ct = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!rg_content_type_is_json(ct))
		return refuse(c, 415, "unsupported_media_type",
			      "Content-Type %.80s is not JSON (send Content-Type: application/json; "
			      "curl: -H 'Content-Type: application/json')", ct);
	if (c->content_length != ULLONG_MAX && c->content_length > 0) {
		if (!reserve_body(c, (size_t)c->content_length))
			return refuse(c, 503, "overloaded",
				      "request bodies being received fill --max-buffered-bytes; "
				      "retry later");
		c->reserved_all = true;
		rg_buf_reserve(&c->body, (size_t)c->content_length);
	}
	return MHD_YES;
}

/* One fragment of the body: buffered (a JSON route), counted and dropped (any other route, or a
 * refused request), or past a limit (413, 503 with the rest dropped; past --max-discard-bytes
 * of dropping, the connection is closed without an answer). */
static enum MHD_Result on_body(conn_ctx *c, const char *data, size_t n)
{
	rg_server *s = c->srv;

	if (c->refused) {
		c->discarded += n;
		return c->discarded > s->o.max_discard_bytes ? MHD_NO : MHD_YES;
	}
	if (c->received + n > s->o.max_body_bytes) {
		char msg[96];

		snprintf(msg, sizeof(msg), "body larger than %zu bytes", s->o.max_body_bytes);
		refuse_later(c, 413, "payload_too_large", msg);
		return on_body(c, data, n);
	}
	c->received += n;
	if (!c->wants_body)
		return MHD_YES;
	if (!c->reserved_all && !reserve_body(c, n)) {
		refuse_later(c, 503, "overloaded",
			     "request bodies being received fill --max-buffered-bytes; retry later");
		return MHD_YES;
	}
	rg_buf_put(&c->body, data, n);
	return MHD_YES;
}

void *rg_server_on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	conn_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->srv = cls;
	c->conn = conn;
	rg_buf_init(&c->body);
	atomic_init(&c->released, false);
	if (uri) {
		c->target_seen = true;
		c->target_end = uri + strlen(uri);
		rg_target_bad(uri, c->target_err, sizeof(c->target_err));
	}
	return c;
}

enum MHD_Result rg_server_on_request(void *cls, struct MHD_Connection *conn, const char *url,
				     const char *method, const char *version,
				     const char *upload_data, size_t *upload_data_size,
				     void **con_cls)
{
	rg_server *s = cls;
	conn_ctx *c = *con_cls;
	char authority[256];
	const char *path, *arg;

	/* absolute-form targets are served as their path (RFC 9112 sec. 3.2.2); NULL: a form
	 * no route has, answered 400 by on_headers (its path "" matches no route meanwhile) */
	path = rg_target_path(url, authority, sizeof(authority));
	if (!c || !c->started) {
		if (!c) { /* the URI log callback ran out of memory */
			c = calloc(1, sizeof(*c));
			if (!c)
				return MHD_NO;
			*con_cls = c;
		}
		c->started = true;
		c->srv = s;
		c->conn = conn;
		c->t0 = rg_now_ms();
		c->row = rg_route_find(path ? path : "", method,
				       atomic_load(&s->ready) ? rg_route_kind_of(s->info->num_labels) : 0,
				       &arg);
		c->route = c->row ? c->row->id : RG_ROUTE_OTHER;
		c->post = !strcmp(method, "POST");
		c->wants_body = c->post && c->row && c->row->schema;
		c->openai = c->row ? c->row->openai : path && !strncmp(path, "/v1/", 4);
		atomic_init(&c->released, false);
		rg_buf_init(&c->body);
		if (!path && !c->target_err[0]) {
			c->target_seen = true;
			snprintf(c->target_err, sizeof(c->target_err),
				 "request target is neither a path nor an http(s) URL");
		}
		return on_headers(c, method, version, authority);
	}
	url = path ? path : url;
	if (c->suspended)
		return finish_job(c);
	if (*upload_data_size) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		return on_body(c, upload_data, n);
	}
	/* the request has arrived in full */
	rg_conn_watch_busy(s->watch, rg_conn_watch_of(conn));
	if (c->refused)
		return send_error(c, c->refused, c->refused_type, "%s", c->refused_msg);
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
	for (size_t i = 0; c->types && i < c->req.n_inputs; i++)
		free(c->types[i]);
	free(c->types);
	for (size_t i = 0; c->texts && i < c->req.n_inputs; i++)
		free(c->texts[i]);
	free(c->texts);
	free(c->text_lens);
	for (size_t i = 0; c->encs && i < c->req.n_inputs; i++)
		rg_encoding_free(&c->encs[i]);
	free(c->encs);
	free(c->hidden);
	free(c->emb);
	free(c->seqs);
	rg_request_free(&c->req);
	release_body(c);
	if (c->answer_reserved)
		atomic_fetch_sub(&c->srv->buffered, c->answer_reserved);
	free(c);
}

void rg_server_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			    enum MHD_RequestTerminationCode toe)
{
	rg_server *s = cls;
	conn_ctx *c = *con_cls;

	/* the next request on this connection has its own read deadline */
	rg_conn_watch_idle(s->watch, rg_conn_watch_of(conn));
	if (!c)
		return;
	if (c->suspended && !atomic_load(&c->released)) {
		/* Cannot happen: MHD never completes a suspended connection, and the engine is
		 * stopped (every job released) before the daemon. Leak rather than free memory the
		 * engine may still hold. */
		fprintf(stderr, "ragged serve: BUG: connection completed while queued\n");
		return;
	}
	/* Suspended but released: resumed (its job ended: dropped for a closed socket, or at
	 * shutdown) and closed before it could answer; finish_job never ran, so it no longer counts
	 * as waiting for an answer (else a drain would wait for it until its time is up). */
	if (c->suspended)
		atomic_fetch_sub(&s->n_suspended, 1);
	free_ctx(c);
	*con_cls = NULL;
}

