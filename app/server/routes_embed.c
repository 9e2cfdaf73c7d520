/* `ragged serve`'s embedding routes: /embed, /v1/embeddings, /embed_all, /similarity, /predict,
 * /rerank and /tokenize (their rows are in routes.c). A request's inputs are tokenized, looked up in
 * the cache, and the rest queued in the engine as one job (engine.h); the connection is suspended
 * meanwhile and resumed by the job's done callback, then answered by its row's answer function. */
#include "server/server_internal.h"

#include <math.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/cache.h"
#include "server/engine.h"
#include "server/metrics.h"

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

/* Build the 200 answer from c->embed.emb (every input present): the model's raw pooled vectors (the
 * engine and the cache keep them raw), cut to the first "dimensions" components (Matryoshka)
 * and L2-normalized when "normalize" (default true; TEI's order: truncate, then normalize). */
enum MHD_Result rg_answer_embeddings(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	rg_server *s = c->srv;
	int h = s->info->output_dim, d = c->req.dimensions ? c->req.dimensions : h;
	rg_buf b;

	if (c->req.normalize)
		for (size_t i = 0; i < c->req.n_inputs; i++)
			l2_normalize(c->embed.emb + i * (size_t)h, d);
	rg_buf_init(&b);
	if (c->route == RG_ROUTE_EMBED) {
		rg_buf_put(&b, "[", 1);
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			if (i)
				rg_buf_put(&b, ",", 1);
			rg_buf_float_array(&b, c->embed.emb + i * (size_t)h, (size_t)d);
		}
		rg_buf_put(&b, "]", 1);
	} else {
		const char *model = c->req.model ? c->req.model : s->model_name;

		rg_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
		for (size_t i = 0; i < c->req.n_inputs; i++) {
			rg_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":",
				       i ? "," : "", i);
			put_vector(&b, c->embed.emb + i * (size_t)h, d, c->req.base64);
			rg_buf_put(&b, "}", 1);
		}
		rg_buf_puts(&b, "],\"model\":");
		rg_buf_json_str(&b, model, strlen(model));
		rg_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}",
			       c->embed.prompt_tokens, c->embed.prompt_tokens);
	}
	return rg_conn_send(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
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
enum MHD_Result rg_answer_scores(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	const rg_model_info *info = c->srv->info;
	const int L = info->num_labels;
	size_t n = c->req.n_inputs, cap = n > (size_t)L ? n : (size_t)L;
	size_t *idx = malloc(cap * sizeof(*idx));
	rg_buf b;

	if (!idx)
		return rg_conn_error(c, 500, "backend", NULL, "out of memory");
	for (size_t i = 0; i < n; i++)
		to_scores(c->embed.emb + i * (size_t)L, L, c->req.raw_scores, info->multi_label);
	rg_buf_init(&b);
	if (c->route == RG_ROUTE_RERANK) {
		order_by_score(c->embed.emb, 1, n, idx);
		rg_buf_put(&b, "[", 1);
		for (size_t k = 0; k < n; k++) {
			const rg_req_input *in = &c->req.inputs[idx[k]];

			rg_buf_printf(&b, "%s{\"index\":%zu,\"score\":", k ? "," : "", idx[k]);
			rg_buf_float(&b, c->embed.emb[idx[k]]);
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
			const float *v = c->embed.emb + i * (size_t)L;

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
	return rg_conn_send(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* The answer of a request whose job ended DONE (or that needed no job: every input cached). */
static enum MHD_Result answer(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	return c->row->answer(c, queue_ms, infer_ms, bs);
}

/* Tokenize every input into c->embed.ids (texts, the request's prompt prepended first; truncation
 * side as asked) or adopt the given ids (OpenAI token arrays). /tokenize keeps the encodings
 * (with offsets) in c->embed.encs instead and has no length limit unless "truncate" is set.
 * Returns 0 or the HTTP error status already sent (then the caller returns ret). */
static int tokenize_inputs_timed(conn_ctx *c, enum MHD_Result *ret);

/* tokenize_inputs_timed, its time observed in te_request_tokenization_duration on success (TEI
 * observes it per request in validation). */
static int tokenize_inputs(conn_ctx *c, enum MHD_Result *ret)
{
	double t0 = rg_now_ms();
	int code = tokenize_inputs_timed(c, ret);

	if (!code)
		rg_metrics_tokenize(&c->srv->front->metrics, rg_now_ms() - t0);
	return code;
}

static int tokenize_inputs_timed(conn_ctx *c, enum MHD_Result *ret)
{
	rg_server *s = c->srv;
	size_t n = c->req.n_inputs;
	int max_pos = s->info->max_seq_len;
	bool tok_route = c->route == RG_ROUTE_TOKENIZE;
	const char *prompt = NULL;
	rg_encode_params ep = rg_encode_params_default();

	if (rg_request_prompt(c, &prompt, ret))
		return 400;
	c->embed.ids = calloc(n, sizeof(*c->embed.ids));
	c->embed.n_ids = calloc(n, sizeof(*c->embed.n_ids));
	c->embed.types = calloc(n, sizeof(*c->embed.types));
	c->embed.texts = calloc(n, sizeof(*c->embed.texts));
	c->embed.text_lens = calloc(n, sizeof(*c->embed.text_lens));
	c->embed.encs = tok_route ? calloc(n, sizeof(*c->embed.encs)) : NULL;
	if (!c->embed.ids || !c->embed.n_ids || !c->embed.types || !c->embed.texts || !c->embed.text_lens ||
	    (tok_route && !c->embed.encs)) {
		*ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
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
			c->embed.ids[i] = in->ids; /* borrowed from req; see free_ctx */
			c->embed.n_ids[i] = in->n_ids > (size_t)max_pos ? (size_t)max_pos : in->n_ids;
		} else {
			const char *text = in->text;
			size_t len = in->len;

			if (prompt && !in->text_b) {
				size_t pl = strlen(prompt);

				if (!(c->embed.texts[i] = malloc(pl + len + 1))) {
					*ret = rg_conn_error(c, 500, "backend", NULL,
							     "out of memory");
					return 500;
				}
				memcpy(c->embed.texts[i], prompt, pl);
				memcpy(c->embed.texts[i] + pl, in->text, len + 1);
				c->embed.text_lens[i] = pl + len;
				text = c->embed.texts[i];
				len = pl + len;
			}
			st = rg_model_encode(s->model, text, len, in->text_b, in->len_b, &ep, &e);
			if (st != RG_OK) {
				rg_http_error he = rg_http_error_for(st, false);

				if (he.code == 500)
					*ret = rg_conn_error(c, he.code, he.type, NULL,
							     "tokenizer: %s: %s",
							     rg_status_name(st), rg_last_error());
				else
					*ret = rg_conn_error(c, he.code, he.type, "input",
							     "input %zu: %s%s", i, rg_last_error(),
							     st == RG_ERR_TOO_LONG
							     ? " (set \"truncate\": true)"
							     : "");
				return he.code;
			}
			c->embed.n_ids[i] = e.n;
			if (tok_route) {
				c->embed.encs[i] = e; /* owns the ids; c->embed.ids[i] stays NULL */
			} else {
				c->embed.ids[i] = e.ids;
				if (in->text_b)
					c->embed.types[i] = e.types;
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
		if (!tok_route && c->embed.n_ids[i] > (size_t)s->max_len) {
			*ret = rg_conn_error(c, 422, "validation", "input",
					     "input %zu has %zu tokens, more than the %d the %s "
					     "scheduler can place", i, c->embed.n_ids[i], s->max_len,
					     rg_sched_kind_name(s->kind));
			return 422;
		}
		c->embed.prompt_tokens += c->embed.n_ids[i];
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

enum MHD_Result rg_handle_tokenize(conn_ctx *c)
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
	const rg_job *j = &c->embed.job;

	switch (j->refusal) {
	case RG_JOB_QUEUE_FULL:
	case RG_JOB_NO_TIME:
		c->http.retry_after_s = (int)fmin(3600, fmax(1, ceil(j->retry_after_ms / 1e3)));
		return (rg_http_error){429, "overloaded"};
	case RG_JOB_TOO_MUCH:
		return (rg_http_error){413, "payload_too_large"};
	case RG_JOB_STOPPING:
		c->http.retry_after_s = 1;
		return (rg_http_error){503, "unhealthy"};
	case RG_JOB_ADMITTED:
		break;
	}
	return rg_http_error_for(st, atomic_load(&c->srv->stopping));
}

static enum MHD_Result finish_job(conn_ctx *c);

/* Take n bytes of the --max-buffered-bytes budget for c's answer (given back by free_ctx, after
 * the answer was sent); false when they do not fit now. */
static bool reserve_answer(conn_ctx *c, size_t n)
{
	rg_server *s = c->srv->front; /* one budget for every model's requests */
	size_t cur = atomic_load(&s->buffered);

	do {
		if (n > s->o.max_buffered_bytes || cur > s->o.max_buffered_bytes - n)
			return false;
	} while (!atomic_compare_exchange_weak(&s->buffered, &cur, cur + n));
	c->embed.answer_reserved += n;
	return true;
}

enum MHD_Result rg_handle_embed(conn_ctx *c)
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
	if (c->embed.prompt_tokens > (size_t)s->o.max_client_batch_tokens)
		return rg_conn_error(c, 413, "payload_too_large", NULL,
				     "%zu inputs of %zu tokens in all, more than the %d tokens a request "
				     "may hold (--max-client-batch-tokens): send fewer inputs per request",
				     n, c->embed.prompt_tokens, s->o.max_client_batch_tokens);
	c->embed.emb = malloc(n * (size_t)h * sizeof(float));
	c->embed.seqs = calloc(n, sizeof(*c->embed.seqs));
	if (!c->embed.emb || !c->embed.seqs)
		return rg_conn_error(c, 500, "backend", NULL, "out of memory");
	if (all_tokens) {
		/* /embed_all: every token's vector, (sum of lengths, hidden_size) */
		size_t rows = c->embed.prompt_tokens;
		size_t need = rg_embed_all_answer_bytes(rows, n, (size_t)s->info->hidden_size);

		/* issue 18, item 15: the vectors and their JSON count against the buffered-bytes
		 * budget until the answer is sent (one request at the token cap made 612 MB) */
		if (need > s->o.max_buffered_bytes)
			return rg_conn_error(c, 413, "payload_too_large", NULL,
					     "the /embed_all answer for %zu tokens takes about %zu MiB, "
					     "more than --max-buffered-bytes (%zu MiB): send fewer tokens "
					     "per request", rows, need >> 20, s->o.max_buffered_bytes >> 20);
		if (!reserve_answer(c, need)) {
			c->http.retry_after_s = 1;
			return rg_conn_error(c, 503, "overloaded", NULL,
					     "answers being built fill --max-buffered-bytes (the /embed_all "
					     "answer for %zu tokens takes about %zu MiB); retry later",
					     rows, need >> 20);
		}
		c->embed.hidden = malloc((rows ? rows : 1) * (size_t)s->info->hidden_size * sizeof(float));
		if (!c->embed.hidden)
			return rg_conn_error(c, 500, "backend", NULL,
					     "out of memory for %zu token vectors",
					     rows);
	}
	for (size_t i = 0, row = 0; i < n; row += c->embed.n_ids[i], i++) {
		float *dst = c->embed.emb + i * (size_t)h;

		if (!all_tokens && s->cache && !c->embed.types[i] &&
		    rg_cache_get(s->cache, c->embed.ids[i], c->embed.n_ids[i], dst))
			continue;
		c->embed.seqs[n_miss].ids = c->embed.ids[i];
		c->embed.seqs[n_miss].types = c->embed.types[i];
		c->embed.seqs[n_miss].len = (int)c->embed.n_ids[i];
		c->embed.seqs[n_miss].out = dst;
		c->embed.seqs[n_miss].hidden_out =
			all_tokens ? c->embed.hidden + row * (size_t)s->info->hidden_size : NULL;
		n_miss++;
	}
	if (s->cache)
		rg_metrics_cache(&s->front->metrics, n - n_miss, n_miss);
	if (n_miss == 0)
		return answer(c, 0, 0, 0);

	c->embed.job.seqs = c->embed.seqs;
	c->embed.job.n_seqs = (int)n_miss;
	c->embed.job.arrival_ms = c->http.t0;
	c->embed.job.deadline_ms = c->http.t0 + s->o.request_timeout_ms;
	ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	c->embed.job.client_fd = ci ? ci->connect_fd : -1;
	c->embed.job.done = job_done;
	c->embed.job.owner = c;
	/* TEI's --max-concurrent-requests: requests queued or running at most (a soft bound:
	 * two requests may pass the check together) */
	if (s->o.max_concurrent_requests &&
	    atomic_load(&s->n_suspended) >= s->o.max_concurrent_requests)
		return rg_conn_error(c, 429, "overloaded", NULL,
				     "%d requests queued or running, the --max-concurrent-requests "
				     "limit; retry later", s->o.max_concurrent_requests);
	/* Suspend before submitting: the worker may finish the job (and resume) at once. */
	c->resume = finish_job;
	c->suspended = true;
	atomic_fetch_add(&s->n_suspended, 1);
	MHD_suspend_connection(c->conn);
	st = rg_engine_submit(s->engine, &c->embed.job);
	if (st != RG_OK) {
		c->embed.submit_error = submit_error_for(c, st);
		snprintf(c->embed.submit_err, sizeof(c->embed.submit_err), "%s", rg_last_error());
		atomic_store(&c->released, true);
		MHD_resume_connection(c->conn);
	}
	return MHD_YES;
}

/* Called when a suspended connection is resumed: answer from the job's outcome. */
static enum MHD_Result finish_job(conn_ctx *c)
{
	rg_job *j = &c->embed.job;

	c->suspended = false;
	atomic_fetch_sub(&c->srv->n_suspended, 1);
	if (c->embed.submit_error.code)
		return rg_conn_error(c, c->embed.submit_error.code, c->embed.submit_error.type, NULL, "%s",
				     c->embed.submit_err);
	switch (j->state) {
	case RG_JOB_DONE:
		return answer(c, j->queue_ms, j->inference_ms, j->batch_size);
	case RG_JOB_FAILED:
		return rg_conn_error(c, 500, "backend", NULL, "%s", j->err);
	case RG_JOB_EXPIRED:
		return rg_conn_error(c, 504, "timeout", NULL,
				     "deadline of %d ms passed before the request could finish",
				     c->srv->o.request_timeout_ms);
	case RG_JOB_SHUTDOWN:
		return rg_conn_error(c, 503, "unhealthy", NULL, "server is shutting down");
	case RG_JOB_DROPPED:
	case RG_JOB_QUEUED:
		break;
	}
	return MHD_NO; /* client gone: close without answering */
}

void rg_embed_conn_free(conn_ctx *c)
{
	for (size_t i = 0; c->embed.ids && i < c->req.n_inputs; i++)
		if (c->embed.ids[i] != c->req.inputs[i].ids)
			free(c->embed.ids[i]);
	free(c->embed.ids);
	free(c->embed.n_ids);
	for (size_t i = 0; c->embed.types && i < c->req.n_inputs; i++)
		free(c->embed.types[i]);
	free(c->embed.types);
	for (size_t i = 0; c->embed.texts && i < c->req.n_inputs; i++)
		free(c->embed.texts[i]);
	free(c->embed.texts);
	free(c->embed.text_lens);
	for (size_t i = 0; c->embed.encs && i < c->req.n_inputs; i++)
		rg_encoding_free(&c->embed.encs[i]);
	free(c->embed.encs);
	free(c->embed.hidden);
	free(c->embed.emb);
	free(c->embed.seqs);
}
