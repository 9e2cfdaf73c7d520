/* The generation routes of `ragged serve` (issue 20): OpenAI's /v1/completions and
 * /v1/chat/completions, TGI's /generate and /generate_stream, vLLM's /tokenize and /detokenize
 * for decoder models. A request is parsed (gen_request.h), tokenized (chat: rendered by the
 * model's template first), cut into one engine job per prompt (engine_gen.h: its n choices, or
 * best_of candidates, are the job's sequences) and submitted; refusals are answered at once
 * (429 + Retry-After for a full queue or a deadline that cannot be met). Then:
 *   - whole answers: the connection is suspended until the last job ends, then answered;
 *   - streams (stream: true, /generate_stream): a chunked response whose content reader builds
 *     server-sent events from the jobs' outputs as they grow; when there is nothing to send it
 *     suspends the connection (MHD's documented pattern) and the engine's notify resumes it.
 * The connection and its jobs share a link (refcounted, own mutex) so that the engine never
 * touches a connection that libmicrohttpd has completed: a client that goes away cancels its
 * jobs (the engine also sees its socket close) and the last of connection and jobs frees it. */
#include "server/server_internal.h"

#include <ctype.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "server/engine_gen.h"
#include "server/gen_request.h"

/* What a connection and the engine's notify share. */
typedef struct gen_link {
	pthread_mutex_t mu;
	atomic_int refs;
	struct MHD_Connection *conn; /* NULL once the connection is completed */
	bool waiting;                /* suspended (reader or handler), to be resumed */
	bool stream;                 /* resume on any output (a stream), else when the last job
				      * ended (a whole answer) */
	int jobs_left;               /* jobs not yet ended (notify last) */
} gen_link;

/* Where a stream stands on one choice. */
typedef struct gen_cursor {
	size_t text_sent;            /* bytes of text sent */
	int tok_sent;                /* tokens whose text (and logprobs) were sent */
	bool role_sent, finish_sent;
	bool echo_sent;              /* completions with echo: the prompt's chunk was sent */
	/* chat with a tool parser: the last scan of the text, and what of it was sent */
	rg_tool_scan scan;
	size_t content_sent;         /* bytes of scan.content sent */
	int calls_sent;              /* calls of scan.calls sent */
} gen_cursor;

typedef struct rg_gen_conn {
	rg_gen_request req;
	gen_link *link;
	rg_gen_job **jobs;           /* (n_jobs) one per prompt */
	int n_jobs;
	int n_choices;               /* choices returned per prompt (n) */
	char **prefix;               /* (n_jobs) text put before each completion (echo,
				      * return_full_text), or NULL */
	size_t *prefix_len;
	gen_cursor *cur;             /* (n_jobs * n_choices) */
	rg_gen_answer_ctx actx;
	char id[48];
	rg_buf pend;                 /* stream bytes made but not yet handed to MHD */
	size_t pend_off;
	bool stream_end;
	bool counted;                /* counted in srv->n_suspended */
	bool admitted;               /* its jobs were submitted */
	bool answered;               /* counted in the metrics (a whole answer sent, a stream
				      * ended) */
	int stream_status;           /* a stream's status for the metrics: 200 unless an
				      * error event was sent */
	double t0;
	int32_t *eos;                /* the model's EOS ids (borrowed from the engine) */
	int32_t forced_bos;          /* "tgt_lang"'s token id (rg_model_lang_id), -1: none given */
	rg_tool_fmt tool_fmt;        /* chat: how the text is parsed into tool calls (render_chat:
				      * tool_choice, and the template's family for "auto") */
	bool special_for_tools;      /* skip_special_tokens turned off for the tool parser: the
				      * EOS token's text is not part of what it scans
				      * (tool_text_len) */
} rg_gen_conn;

/* The fair keys of the HTTP requests (rg_gen_job.fair_key): one per request, never 0. */
static atomic_uint_least64_t fair_serial;

/* ---- the link ----------------------------------------------------------------------------- */

static void link_put(gen_link *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
		pthread_mutex_destroy(&l->mu);
		free(l);
	}
}

/* The engine's notify (step thread): resume the connection if it waits. */
static void job_notify(rg_gen_job *j, bool last)
{
	gen_link *l = j->owner;

	pthread_mutex_lock(&l->mu);
	if (last)
		l->jobs_left--;
	if (l->conn && l->waiting && (l->stream || l->jobs_left == 0)) {
		l->waiting = false;
		MHD_resume_connection(l->conn);
	}
	pthread_mutex_unlock(&l->mu);
	if (last)
		link_put(l);
}

/* Count the request in the metrics and the stop line (rg_conn_send does it for whole answers;
 * a stream is counted when it ends, with the status its events said). */
static void count_answer(conn_ctx *c, int status)
{
	rg_gen_conn *g = c->gen;
	double queue_ms = g->n_jobs > 0 && g->jobs[0] ? g->jobs[0]->queue_ms : 0;
	double total = rg_now_ms() - c->http.t0;

	g->answered = true;
	rg_metrics_request(&c->srv->front->metrics, c->route, status, queue_ms, total - queue_ms,
			   total);
}

void rg_gen_conn_free(conn_ctx *c)
{
	rg_gen_conn *g = c->gen;

	if (!g)
		return;
	if (g->link) {
		pthread_mutex_lock(&g->link->mu);
		g->link->conn = NULL;
		g->link->waiting = false;
		pthread_mutex_unlock(&g->link->mu);
	}
	if (g->admitted && !g->answered)
		/* the client went away before its answer ended (a stream cut short, a whole answer
		 * never sent): nginx's 499, "client closed request" (the metrics' code "other") */
		count_answer(c, 499);
	for (int k = 0; k < g->n_jobs; k++) {
		if (!g->jobs[k])
			continue;
		rg_gen_job_cancel(g->jobs[k]); /* a no-op for a job that ended */
		rg_gen_job_put(g->jobs[k]);
	}
	link_put(g->link);
	for (int k = 0; g->prefix && k < g->n_jobs; k++)
		free(g->prefix[k]);
	free(g->prefix);
	free(g->prefix_len);
	free(g->jobs);
	for (int k = 0; g->cur && k < g->n_jobs * g->n_choices; k++)
		rg_tool_scan_free(&g->cur[k].scan);
	free(g->cur);
	rg_buf_free(&g->pend);
	if (g->counted)
		atomic_fetch_sub(&c->srv->n_suspended, 1);
	/* the stop strings, stop ids and bias arrays of the jobs point into req */
	rg_gen_request_free(&g->req);
	free(g);
	c->gen = NULL;
}

/* ---- tokens as the answers show them -------------------------------------------------------- */

/* A per-answer arena of decoded token pieces (freed with it). */
typedef struct piece_arena {
	char **p;
	int n, cap;
} piece_arena;

static void arena_free(piece_arena *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->p[i]);
	free(a->p);
	memset(a, 0, sizeof(*a));
}

/* t: token id decoded alone (special tokens kept), special: whether decoding with
 * skip_special_tokens drops it. */
static void tok_fill(const rg_model *m, piece_arena *a, int32_t id, float lp, bool want_special,
		     rg_gen_tok *t)
{
	char *text = NULL;
	size_t len = 0;

	*t = (rg_gen_tok){.id = id, .piece = "", .piece_len = 0, .logprob = lp};
	if (id < 0)
		return;
	if (rg_model_decode(m, &id, 1, false, &text, &len) == RG_OK) {
		if (a->n == a->cap) {
			int cap = a->cap ? 2 * a->cap : 64;
			char **p = realloc(a->p, (size_t)cap * sizeof(*p));

			if (!p) {
				free(text);
				return;
			}
			a->p = p;
			a->cap = cap;
		}
		a->p[a->n++] = text;
		t->piece = text;
		t->piece_len = len;
	}
	if (want_special) {
		char *t2 = NULL;
		size_t l2 = 0;

		if (rg_model_decode(m, &id, 1, true, &t2, &l2) == RG_OK)
			t->special = l2 == 0 && len > 0;
		free(t2);
	}
}

/* The log-probability entries of tokens [from, to) of output o (n_top alternatives each):
 * lps (to - from) and tops (to - from, n_top) from the caller. */
static void lps_fill(const rg_model *m, piece_arena *a, const rg_gen_seq_out *o, int n_top,
		     int from, int to, bool want_special, rg_gen_lp *lps, rg_gen_tok *tops)
{
	for (int k = from; k < to; k++) {
		rg_gen_lp *e = &lps[k - from];

		tok_fill(m, a, o->ids[k], o->logprobs[k], want_special, &e->tok);
		e->n_top = 0;
		e->top = tops + (size_t)(k - from) * (size_t)(n_top > 0 ? n_top : 0);
		for (int q = 0; q < n_top; q++) {
			int32_t id = o->top_ids[(size_t)k * n_top + q];

			if (id < 0)
				break;
			tok_fill(m, a, id, o->top_logprobs[(size_t)k * n_top + q], false,
				 &tops[(size_t)(k - from) * n_top + q]);
			e->n_top++;
		}
	}
}

/* The prompt tokens of job j as log-probability entries (its output 0's prompt scoring): lps
 * (prompt_lens[0]) and tops (prompt_lens[0], n_top) from the caller; entry 0 has no
 * log-probability (NaN) and no alternatives (n_top -1); the others their first n_top. */
static void prompt_fill(const rg_model *m, piece_arena *a, const rg_gen_job *j, int n_top,
			rg_gen_lp *lps, rg_gen_tok *tops)
{
	const int ptn = j->prompt_top_n, nt = n_top < ptn ? n_top : ptn;

	for (int i = 0; i < j->prompt_lens[0]; i++) {
		rg_gen_lp *e = &lps[i];

		tok_fill(m, a, j->prompts[0][i], i ? j->prompt_lps[i] : NAN, false, &e->tok);
		e->rank = i ? j->prompt_ranks[i] : 0;
		e->n_top = i ? 0 : -1;
		e->top = tops + (size_t)i * (size_t)n_top;
		for (int q = 0; i && q < nt; q++) {
			int32_t id = j->prompt_top_ids[(size_t)i * ptn + q];

			if (id < 0)
				break;
			tok_fill(m, a, id, j->prompt_top_lps[(size_t)i * ptn + q], false,
				 &tops[(size_t)i * n_top + q]);
			e->n_top++;
		}
	}
}

static rg_gen_finish finish_of(rg_gen_end e)
{
	switch (e) {
	case RG_GEN_END_EOS: return RG_GEN_FINISH_EOS;
	case RG_GEN_END_STOP: return RG_GEN_FINISH_STOP;
	case RG_GEN_END_LENGTH: return RG_GEN_FINISH_LENGTH;
	case RG_GEN_END_ABORT: return RG_GEN_FINISH_ABORT;
	default: return RG_GEN_FINISH_NONE;
	}
}

/* ---- whole answers ------------------------------------------------------------------------ */

/* The order in which job j's sequences are returned: beams and single choices as they are;
 * best_of candidates by cumulative log-probability, best first (OpenAI's best_of). */
static void choice_order(const rg_gen_conn *g, const rg_gen_job *j, int *order)
{
	for (int q = 0; q < j->n_seqs; q++)
		order[q] = q;
	if (j->gp.num_beams > 1 || j->n_seqs <= g->n_choices)
		return;
	for (int a = 1; a < j->n_seqs; a++) {
		int x = order[a], b = a;

		while (b > 0 && j->out[order[b - 1]].score < j->out[x].score) {
			order[b] = order[b - 1];
			b--;
		}
		order[b] = x;
	}
}

/* Whether the answer's text keeps the stop string that ended it: TGI's routes do (its
 * generated_text is the decoded tokens, the stop sequence's included); OpenAI's (and vLLM's)
 * and /translate drop it. */
static bool keeps_stop(const conn_ctx *c)
{
	rg_gen_api api = c->gen->req.api;

	return c->row && c->row->gen_api != RG_GEN_API_TRANSLATE &&
	       (api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM);
}

/* The bytes of a finished choice's text the tool parser scans: all of it, but the EOS token's
 * text when special tokens were kept for the parser only (vLLM drops the EOS text too). */
static size_t tool_text_len(const rg_gen_conn *g, const rg_gen_seq_out *o)
{
	size_t len = o->text.len;

	if (g->special_for_tools && o->end == RG_GEN_END_EOS && o->n_ids > 0) {
		size_t cut = o->n_ids > 1 ? o->text_end[o->n_ids - 2] : 0;

		if (cut < len)
			len = cut;
	}
	return len;
}

static enum MHD_Result answer_whole(conn_ctx *c)
{
	rg_gen_conn *g = c->gen;
	const rg_model *m = c->srv->model;
	rg_gen_api api = g->req.api;
	bool tgi = api == RG_GEN_API_TGI || api == RG_GEN_API_TRANSLATE; /* TGI's token details */
	int per = tgi ? (g->jobs[0]->n_seqs) : g->n_choices;
	int n_all = g->n_jobs * per;
	rg_gen_choice *ch = calloc((size_t)n_all, sizeof(*ch));
	char **texts = calloc((size_t)n_all, sizeof(*texts));
	rg_gen_lp **lpa = calloc((size_t)n_all, sizeof(*lpa));
	rg_gen_tok **topa = calloc((size_t)n_all, sizeof(*topa));
	size_t **offs = calloc((size_t)n_all, sizeof(*offs));
	rg_gen_lp **plpa = calloc((size_t)n_all, sizeof(*plpa));   /* prompt_logprobs */
	rg_gen_tok **ptopa = calloc((size_t)n_all, sizeof(*ptopa));
	rg_gen_tok *prefill = NULL;
	rg_gen_usage u = {0};
	piece_arena a = {0};
	int n = 0, *order = NULL;
	rg_buf b;
	enum MHD_Result ret;
	bool want_lp = g->req.logprobs >= 0;
	int n_top = g->req.logprobs > 0 ? g->req.logprobs : 0;
	const int k_plp = g->req.prompt_logprobs;

	rg_buf_init(&b);
	g->answered = true; /* rg_conn_send (or rg_conn_error) below counts it */
	if (!ch || !texts || !lpa || !topa || !offs || !plpa || !ptopa) {
		ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
		goto out;
	}
	for (int p = 0; p < g->n_jobs; p++) {
		rg_gen_job *j = g->jobs[p];

		if (j->status != RG_OK || j->out[0].end == RG_GEN_END_ABORT) {
			bool stopping = atomic_load(&c->srv->stopping);

			ret = rg_conn_error(c, stopping ? 503 : j->status == RG_OK ? 503 : 500,
					    stopping ? "unhealthy" : "backend", NULL, "%s",
					    j->err[0] ? j->err : "the request was cancelled");
			goto out;
		}
		if (j->gp.prompt_logprobs && !j->prompt_lps) {
			ret = rg_conn_error(c, 500, "backend", NULL, "out of memory for the prompt's "
					    "log-probabilities");
			goto out;
		}
	}
	for (int p = 0; p < g->n_jobs; p++) {
		rg_gen_job *j = g->jobs[p];
		int cnt = tgi ? j->n_seqs : g->n_choices;

		free(order);
		order = malloc((size_t)j->n_seqs * sizeof(int));
		if (!order) {
			ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
			goto out;
		}
		choice_order(g, j, order);
		u.prompt_tokens += j->prompt_lens[0];
		u.cached_tokens += j->out[0].n_cached;
		for (int q = 0; q < cnt && q < j->n_seqs; q++) {
			const rg_gen_seq_out *o = &j->out[order[q]];
			rg_gen_choice *x = &ch[n];
			size_t pl = g->prefix ? g->prefix_len[p] : 0;
			rg_buf t;

			rg_buf_init(&t);
			if (pl)
				rg_buf_put(&t, g->prefix[p], pl);
			rg_buf_put(&t, o->text.data ? o->text.data : "", o->text.len);
			if (o->end == RG_GEN_END_STOP && o->stop_str && keeps_stop(c))
				rg_buf_puts(&t, o->stop_str);
			texts[n] = t.data;
			x->index = api == RG_GEN_API_COMPLETIONS ? p * g->n_choices + q : q;
			x->text = t.data ? t.data : "";
			x->text_len = t.len;
			x->finish = finish_of(o->end);
			x->stop_str = o->stop_str;
			x->n_generated = o->n_ids;
			x->has_seed = g->req.do_sample;
			x->seed = j->gp.seed;
			if (api == RG_GEN_API_CHAT && g->tool_fmt != RG_TOOL_FMT_NONE) {
				/* the calls out of the text, the rest its content (chat: p is 0) */
				rg_tool_scan *sc = &g->cur[x->index].scan;

				rg_tool_scan_text((rg_tool_fmt)g->tool_fmt, g->req.tool_name, x->text,
						  tool_text_len(g, o), true, sc);
				if (sc->oom) {
					ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
					goto out;
				}
				x->tools = true;
				x->text = sc->content.data ? sc->content.data : "";
				x->text_len = sc->content.len;
				x->calls = sc->calls;
				x->n_calls = sc->n_calls;
				/* OpenAI's (and vLLM's): "tool_calls" for auto and required,
				 * "stop" for a named choice */
				if (x->n_calls && g->tool_fmt != RG_TOOL_FMT_NAMED &&
				    (x->finish == RG_GEN_FINISH_EOS || x->finish == RG_GEN_FINISH_STOP))
					x->finish = RG_GEN_FINISH_TOOL_CALLS;
			}
			u.completion_tokens += o->n_ids;
			/* echo with logprobs: the prompt's tokens first (OpenAI's legacy
			 * completions, vLLM), their offsets the pieces' lengths summed */
			const int np = want_lp && g->req.echo && j->prompt_lps ? j->prompt_lens[0] : 0;

			if (want_lp && o->n_ids + np > 0) {
				const size_t nt = (size_t)(np + o->n_ids);

				lpa[n] = calloc(nt, sizeof(rg_gen_lp));
				topa[n] = calloc(nt * (size_t)(n_top ? n_top : 1), sizeof(rg_gen_tok));
				offs[n] = calloc(nt, sizeof(size_t));
				if (lpa[n] && topa[n] && offs[n]) {
					size_t off = 0;

					if (np)
						prompt_fill(m, &a, j, n_top, lpa[n], topa[n]);
					lps_fill(m, &a, o, j->n_top < n_top ? j->n_top : n_top, 0,
						 o->n_ids, tgi, lpa[n] + np,
						 topa[n] + (size_t)np * (size_t)n_top);
					for (int k = 0; k < np; k++) {
						offs[n][k] = off;
						off += lpa[n][k].tok.piece_len;
					}
					for (int k = 0; k < o->n_ids; k++)
						offs[n][np + k] = pl + (k ? o->text_end[k - 1] : 0);
					x->lps = lpa[n];
					x->n_lps = (int)nt;
					x->text_offset = offs[n];
				}
			} else if (tgi && o->n_ids > 0) {
				lpa[n] = calloc((size_t)o->n_ids, sizeof(rg_gen_lp));
				topa[n] = calloc(1, sizeof(rg_gen_tok));
				if (lpa[n] && topa[n]) {
					lps_fill(m, &a, o, 0, 0, o->n_ids, true, lpa[n], topa[n]);
					x->lps = lpa[n];
					x->n_lps = o->n_ids;
				}
			}
			if (k_plp >= 0 && j->prompt_lps && (api != RG_GEN_API_CHAT || q == 0)) {
				/* vLLM's prompt_logprobs (chat: the answer's, from choice 0) */
				const size_t np2 = (size_t)j->prompt_lens[0];

				plpa[n] = calloc(np2, sizeof(rg_gen_lp));
				ptopa[n] = calloc(np2 * (size_t)(k_plp ? k_plp : 1), sizeof(rg_gen_tok));
				if (!plpa[n] || !ptopa[n]) {
					ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
					goto out;
				}
				prompt_fill(m, &a, j, k_plp, plpa[n], ptopa[n]);
				x->prompt_lps = plpa[n];
				x->n_prompt_lps = (int)np2;
			}
			if (tgi && q == 0 && g->req.decoder_input_details) {
				prefill = calloc((size_t)j->prompt_lens[0], sizeof(*prefill));
				/* TGI's prefill log-probabilities, the first one null */
				for (int k = 0; prefill && k < j->prompt_lens[0]; k++)
					tok_fill(m, &a, j->prompts[0][k],
						 k && j->prompt_lps ? j->prompt_lps[k] : NAN, false,
						 &prefill[k]);
				x->prefill = prefill;
				x->n_prefill = prefill ? j->prompt_lens[0] : 0;
			}
			n++;
		}
	}
	rg_gen_answer_json(&b, &g->actx, ch, n, &u, g->req.details, g->req.top_n_tokens);
	ret = rg_conn_send(c, 200, &b, "application/json", g->jobs[0]->queue_ms,
			   rg_now_ms() - g->t0 - g->jobs[0]->queue_ms, g->n_jobs);
out:
	for (int k = 0; k < n_all; k++) {
		if (texts)
			free(texts[k]);
		if (lpa)
			free(lpa[k]);
		if (topa)
			free(topa[k]);
		if (offs)
			free(offs[k]);
		if (plpa)
			free(plpa[k]);
		if (ptopa)
			free(ptopa[k]);
	}
	free(plpa);
	free(ptopa);
	free(order);
	free(texts);
	free(lpa);
	free(topa);
	free(offs);
	free(ch);
	free(prefill);
	arena_free(&a);
	rg_buf_free(&b);
	return ret;
}

/* Resumed after the last job ended (whole answers). */
static enum MHD_Result resume_whole(conn_ctx *c)
{
	c->suspended = false;
	atomic_fetch_sub(&c->srv->n_suspended, 1);
	return answer_whole(c);
}

/* ---- streams ------------------------------------------------------------------------------ */

/* A chat stream with a tool parser (tool_call.h): the text so far (tokens [0, to) ready, all of
 * it when ended) rescanned, and what is new in the scan sent: content deltas, then each new
 * call as its first chunk (id, name, arguments "") and one arguments chunk; NAMED sends the
 * text itself as argument fragments. The finish is "tool_calls" when calls were sent and the
 * text ended by EOS or a stop, but "stop" for a named choice (OpenAI's and vLLM's). Token
 * logprobs are not sent on such streams. */
static void stream_tools(conn_ctx *c, gen_cursor *cu, int index, const rg_gen_seq_out *o,
			 int to, bool ended)
{
	rg_gen_conn *g = c->gen;
	rg_tool_scan *sc = &cu->scan;
	size_t till = ended ? tool_text_len(g, o) : (to > 0 ? o->text_end[to - 1] : 0);
	const char *text = o->text.data ? o->text.data : "";
	rg_gen_finish fin;
	char id[64];

	if (till > o->text.len)
		till = o->text.len;
	if (g->tool_fmt == RG_TOOL_FMT_NAMED) {
		if (!cu->calls_sent) {
			rg_tool_call_id(id, sizeof(id), g->actx.id, index, 0, g->actx.tool_ids_nine);
			rg_gen_answer_tool_event(&g->pend, &g->actx, index, 0, id,
						 g->req.tool_name, NULL, 0);
			cu->calls_sent = 1;
		}
		if (till > cu->text_sent)
			rg_gen_answer_tool_event(&g->pend, &g->actx, index, 0, NULL, NULL,
						 text + cu->text_sent, till - cu->text_sent);
	} else {
		rg_tool_scan_text((rg_tool_fmt)g->tool_fmt, g->req.tool_name, text, till, ended, sc);
		if (sc->oom) {
			g->pend.oom = true;
			return;
		}
		if (sc->content.len > cu->content_sent) {
			rg_gen_answer_event(&g->pend, &g->actx, index, false,
					    sc->content.data + cu->content_sent,
					    sc->content.len - cu->content_sent, NULL, 0, false,
					    RG_GEN_FINISH_NONE, NULL, NULL, 0, 0, false, 0);
			cu->content_sent = sc->content.len;
		}
		for (; cu->calls_sent < sc->n_calls; cu->calls_sent++) {
			const rg_tool_call *k = &sc->calls[cu->calls_sent];

			rg_tool_call_id(id, sizeof(id), g->actx.id, index, cu->calls_sent,
					g->actx.tool_ids_nine);
			rg_gen_answer_tool_event(&g->pend, &g->actx, index, cu->calls_sent, id,
						 k->name, NULL, 0);
			rg_gen_answer_tool_event(&g->pend, &g->actx, index, cu->calls_sent, NULL,
						 NULL, k->arguments, strlen(k->arguments));
		}
	}
	if (till > cu->text_sent)
		cu->text_sent = till;
	cu->tok_sent = to;
	if (!ended)
		return;
	fin = finish_of(o->end);
	if (cu->calls_sent && g->tool_fmt != RG_TOOL_FMT_NAMED &&
	    (fin == RG_GEN_FINISH_EOS || fin == RG_GEN_FINISH_STOP))
		fin = RG_GEN_FINISH_TOOL_CALLS;
	rg_gen_answer_event(&g->pend, &g->actx, index, false, NULL, 0, NULL, 0, false, fin,
			    o->stop_str, NULL, 0, o->n_ids, false, 0);
	cu->finish_sent = true;
}

/* Append to g->pend the events for what is new in job p's choice q (job->mu held).
 * Returns true when that choice is finished and its last event was written. */
static bool stream_choice(conn_ctx *c, int p, int q)
{
	rg_gen_conn *g = c->gen;
	rg_gen_job *j = g->jobs[p];
	const rg_gen_seq_out *o = &j->out[q];
	gen_cursor *cu = &g->cur[p * g->n_choices + q];
	const rg_model *m = c->srv->model;
	rg_gen_api api = g->req.api;
	int index = api == RG_GEN_API_COMPLETIONS ? p * g->n_choices + q : q;
	bool ended = o->end != RG_GEN_END_NONE;
	bool want_lp = g->req.logprobs >= 0;
	int n_top = j->n_top < (want_lp ? g->req.logprobs : 0) ? j->n_top
				: (want_lp ? g->req.logprobs : 0);
	int to = cu->tok_sent;
	piece_arena a = {0};

	if (cu->finish_sent)
		return true;
	if (api == RG_GEN_API_CHAT && !cu->role_sent) {
		rg_gen_answer_event(&g->pend, &g->actx, index, true, NULL, 0, NULL, 0, false,
				    RG_GEN_FINISH_NONE, NULL, NULL, 0, 0, false, 0);
		cu->role_sent = true;
	}
	if (ended && o->end == RG_GEN_END_ABORT) {
		bool stopping = atomic_load(&c->srv->stopping);

		rg_gen_answer_error_event(&g->pend, api, stopping ? "unhealthy" : "backend",
					  j->err[0] ? j->err : "the request was cancelled");
		/* as a whole answer would have been (answer_whole) */
		if (g->stream_status == 200)
			g->stream_status = stopping || j->status == RG_OK ? 503 : 500;
		cu->finish_sent = true;
		return true;
	}
	while (to < o->n_ids && o->text_end[to] <= o->text_ready)
		to++;
	if (ended)
		to = o->n_ids;
	if (api == RG_GEN_API_TGI_STREAM) {
		/* one event per token; the last carries the whole text and the details */
		for (int k = cu->tok_sent; k < to; k++) {
			rg_gen_lp lp;
			rg_gen_tok tops[RG_GEN_MAX_LOGPROBS];
			size_t from = k ? o->text_end[k - 1] : 0, till = o->text_end[k];
			bool last = ended && k == o->n_ids - 1;
			rg_buf full;

			if (from > o->text.len)
				from = o->text.len;
			if (till > o->text.len || last)
				till = o->text.len;
			lps_fill(m, &a, o, n_top, k, k + 1, true, &lp, tops);
			rg_buf_init(&full);
			if (last) {
				if (g->prefix && g->prefix[p])
					rg_buf_put(&full, g->prefix[p], g->prefix_len[p]);
				rg_buf_put(&full, o->text.data ? o->text.data : "", o->text.len);
				if (o->end == RG_GEN_END_STOP && o->stop_str && keeps_stop(c))
					rg_buf_puts(&full, o->stop_str);
			}
			rg_gen_answer_event(&g->pend, &g->actx, k, false,
					    o->text.data ? o->text.data + from : "", till - from,
					    &lp, 1, true, last ? finish_of(o->end) : RG_GEN_FINISH_NONE,
					    o->stop_str, last ? (full.data ? full.data : "") : NULL,
					    full.len, o->n_ids, g->req.do_sample, j->gp.seed);
			rg_buf_free(&full);
		}
		cu->tok_sent = to;
		cu->text_sent = to > 0 ? o->text_end[to - 1] : 0;
		if (ended) {
			if (o->n_ids == 0) /* nothing generated: still one final event */
				rg_gen_answer_event(&g->pend, &g->actx, 0, false, "", 0, NULL, 0, true,
						    finish_of(o->end), o->stop_str, "", 0, 0,
						    g->req.do_sample, j->gp.seed);
			cu->finish_sent = true;
		}
		arena_free(&a);
		return ended;
	}
	if (api == RG_GEN_API_CHAT && g->tool_fmt != RG_TOOL_FMT_NONE) {
		stream_tools(c, cu, index, o, to, ended);
		arena_free(&a);
		return ended;
	}
	/* echo: the prompt's text first, in a chunk of its own (vLLM's), with the prompt's
	 * logprobs once output 0 has scored its prompt (its first token or its end; until then
	 * nothing of this choice is sent) */
	if (g->prefix && api == RG_GEN_API_COMPLETIONS && !cu->echo_sent) {
		rg_gen_lp *lps = NULL;
		rg_gen_tok *tops = NULL;
		int np = 0;

		if (want_lp && j->prompt_lps) {
			np = j->prompt_lens[0];
			lps = calloc((size_t)np, sizeof(*lps));
			tops = calloc((size_t)np * (size_t)(n_top ? n_top : 1), sizeof(*tops));
			if (lps && tops)
				prompt_fill(m, &a, j, n_top, lps, tops);
			else
				g->pend.oom = true;
		} else if (want_lp && !ended) {
			arena_free(&a);
			return false;
		}
		rg_gen_answer_event(&g->pend, &g->actx, index, false, g->prefix[p],
				    g->prefix_len[p], lps && tops ? lps : NULL,
				    lps && tops ? np : 0, want_lp, RG_GEN_FINISH_NONE, NULL, NULL, 0, 0,
				    false, 0);
		free(lps);
		free(tops);
		cu->echo_sent = true;
	}
	/* OpenAI: one chunk with the new text (and its tokens' logprobs), then the finish */
	{
		size_t till = ended ? o->text.len : (to > 0 ? o->text_end[to - 1] : 0);

		if (till > o->text.len)
			till = o->text.len;
		if (till > cu->text_sent || (want_lp && to > cu->tok_sent)) {
			rg_gen_lp *lps = NULL;
			rg_gen_tok *tops = NULL;
			int nt = to - cu->tok_sent;

			if (want_lp && nt > 0) {
				lps = calloc((size_t)nt, sizeof(*lps));
				tops = calloc((size_t)nt * (size_t)(n_top ? n_top : 1), sizeof(*tops));
				if (lps && tops)
					lps_fill(m, &a, o, n_top, cu->tok_sent, to, false, lps, tops);
			}
			rg_gen_answer_event(&g->pend, &g->actx, index, false,
					    o->text.data + cu->text_sent,
					    till > cu->text_sent ? till - cu->text_sent : 0,
					    lps && tops ? lps : NULL, lps && tops ? nt : 0, want_lp,
					    RG_GEN_FINISH_NONE, NULL, NULL, 0, 0, false, 0);
			free(lps);
			free(tops);
			if (till > cu->text_sent)
				cu->text_sent = till;
			cu->tok_sent = to;
		}
		if (ended) {
			rg_gen_answer_event(&g->pend, &g->actx, index, false, NULL, 0, NULL, 0, want_lp,
					    finish_of(o->end), o->stop_str, NULL, 0, o->n_ids, false, 0);
			cu->finish_sent = true;
		}
	}
	arena_free(&a);
	return ended;
}

/* Make the stream's next events (link->mu held). */
static void stream_produce(conn_ctx *c)
{
	rg_gen_conn *g = c->gen;
	bool all = true;

	for (int p = 0; p < g->n_jobs; p++) {
		rg_gen_job *j = g->jobs[p];

		pthread_mutex_lock(&j->mu);
		for (int q = 0; q < g->n_choices && q < j->n_seqs; q++)
			all &= stream_choice(c, p, q);
		all &= j->ended;
		pthread_mutex_unlock(&j->mu);
	}
	if (!all)
		return;
	if (g->req.include_usage) {
		rg_gen_usage u = {0};

		for (int p = 0; p < g->n_jobs; p++) {
			rg_gen_job *j = g->jobs[p];

			u.prompt_tokens += j->prompt_lens[0];
			u.cached_tokens += j->out[0].n_cached;
			for (int q = 0; q < j->n_seqs; q++)
				u.completion_tokens += j->out[q].n_ids;
		}
		rg_gen_answer_usage_event(&g->pend, &g->actx, &u);
	}
	if (g->req.api != RG_GEN_API_TGI_STREAM)
		rg_gen_answer_done_event(&g->pend);
	g->stream_end = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	conn_ctx *c = cls;
	rg_gen_conn *g = c->gen;
	gen_link *l = g->link;
	ssize_t n = 0;

	(void)pos;
	pthread_mutex_lock(&l->mu);
	if (g->pend_off == g->pend.len && !g->stream_end) {
		g->pend.len = 0;
		g->pend_off = 0;
		stream_produce(c);
	}
	if (g->pend.oom) {
		pthread_mutex_unlock(&l->mu);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (g->pend_off < g->pend.len) {
		n = (ssize_t)(g->pend.len - g->pend_off < max ? g->pend.len - g->pend_off : max);
		memcpy(buf, g->pend.data + g->pend_off, (size_t)n);
		g->pend_off += (size_t)n;
	} else if (g->stream_end) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
		if (!g->answered)
			count_answer(c, g->stream_status);
		if (g->counted) {
			/* answered: a drain no longer waits for it (a kept-alive connection is
			 * completed only at the next request, or when the daemon stops) */
			atomic_fetch_sub(&c->srv->n_suspended, 1);
			g->counted = false;
		}
	} else {
		l->waiting = true;
		MHD_suspend_connection(c->conn);
	}
	pthread_mutex_unlock(&l->mu);
	return n;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* The prompt of a chat request, rendered by the model's template (src/gen/chat_template.h: its
 * family found by structure) into *out and tokenized into *enc (--chat-content-as-text:
 * special tokens matched in the markup only, rg_model_chat_encode). "developer" is OpenAI's
 * newer name of "system"; tools, tool messages and tool_calls go to the renderer, which writes
 * them where the template has tool branches and refuses them where it has none. */
/* Whether Jinja source src reads variable name (as a whole identifier). */
static bool template_reads(const char *src, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = src; n && (p = strstr(p, name)); p += n) {
		char a = p > src ? p[-1] : ' ', z = p[n];

		if (!(isalnum((unsigned char)a) || a == '_') && !(isalnum((unsigned char)z) || z == '_'))
			return true;
	}
	return false;
}

/* vLLM's chat_template / chat_template_kwargs: the template to render (NULL: the model's) or a
 * 400 (false, the error set) for one of no family ragged renders, or a kwarg the template reads
 * (a family is rendered in C, not by Jinja: a variable it reads cannot be honoured; one it does
 * not read changes nothing, as in Jinja). */
static bool chat_template_chosen(conn_ctx *c, const char **tmpl, const char **param)
{
	const rg_gen_request *r = &c->gen->req;
	const char *src = r->chat_template ? r->chat_template : rg_model_chat_template(c->srv->model);

	*tmpl = r->chat_template;
	if (r->chat_template && !rg_chat_template_family(r->chat_template)) {
		char why[256];

		snprintf(why, sizeof(why), "%s", rg_last_error());
		*param = "chat_template";
		rg_errorf(RG_ERR_INVALID_INPUT, "chat_template: %s", why);
		return false;
	}
	for (int i = 0; src && i < r->n_template_vars; i++)
		if (template_reads(src, r->template_vars[i])) {
			*param = "chat_template_kwargs";
			rg_errorf(RG_ERR_INVALID_INPUT, "chat_template_kwargs.%.100s is read by the chat "
				  "template, which ragged renders by its family (%s) without Jinja; "
				  "only add_generation_prompt and continue_final_message are honoured",
				  r->template_vars[i],
				  rg_chat_template_family(src) ? rg_chat_template_family(src) : "?");
			return false;
		}
	return true;
}

static rg_status render_chat(conn_ctx *c, char **out, rg_encoding *enc, const char **param)
{
	const rg_gen_request *r = &c->gen->req;
	rg_chat_message *msgs;
	rg_chat_opts opts = {.add_generation_prompt = r->add_generation_prompt,
			     .continue_final_message = r->continue_final_message,
			     .content_as_text = c->srv->o.chat_content_as_text};
	rg_status st;

	*param = "messages";
	if (!chat_template_chosen(c, &opts.chat_template, param))
		return RG_ERR_INVALID_INPUT;
	/* the model's template, unless the request brings one (its family checked above) */
	if (!opts.chat_template && !rg_model_chat_template(c->srv->model))
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s has no chat template (tokenizer_config.json "
				 "chat_template or GGUF tokenizer.chat_template); use /v1/completions",
				 c->srv->model_name);
	if (!opts.chat_template && !c->srv->chat_family)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s's chat template is not of a family ragged "
				 "renders (%s); use /v1/completions", c->srv->model_name,
				 c->srv->chat_unknown);
	msgs = calloc((size_t)r->n_messages, sizeof(*msgs));
	if (!msgs)
		return rg_errorf(RG_ERR_OOM, "out of memory");
	for (int i = 0; i < r->n_messages; i++) {
		const char *role = r->messages[i].role;

		if (!strcmp(role, "developer"))
			role = "system";
		msgs[i] = (rg_chat_message){.role = role, .content = r->messages[i].content,
					    .content_len = r->messages[i].content_len,
					    .tool_calls = r->messages[i].tool_calls,
					    .tool_call_id = r->messages[i].tool_call_id};
	}
	/* tools go to the template whatever tool_choice is ("none" too, as vLLM renders them);
	 * the parser follows tool_choice, and for "auto" the template's family */
	opts.tools = r->tools;
	switch ((rg_gen_tool_choice)r->tool_choice) {
	case RG_GEN_TOOL_NONE:
		c->gen->tool_fmt = RG_TOOL_FMT_NONE;
		break;
	case RG_GEN_TOOL_AUTO:
		c->gen->tool_fmt = rg_tool_fmt_of_family(
			opts.chat_template ? rg_chat_template_family(opts.chat_template)
					   : c->srv->chat_family);
		/* [TOOL_CALLS] is a special token: kept in the text, as vLLM's mistral parser
		 * asks */
		if (c->gen->tool_fmt == RG_TOOL_FMT_MISTRAL && c->gen->req.skip_special_tokens) {
			c->gen->req.skip_special_tokens = false;
			c->gen->special_for_tools = true;
		}
		break;
	case RG_GEN_TOOL_REQUIRED:
		c->gen->tool_fmt = RG_TOOL_FMT_LIST;
		break;
	case RG_GEN_TOOL_NAMED:
		c->gen->tool_fmt = RG_TOOL_FMT_NAMED;
		break;
	}
	/* Mistral's template wants its call ids (9 characters) back */
	{
		const char *fam = opts.chat_template ? rg_chat_template_family(opts.chat_template)
						     : c->srv->chat_family;

		c->gen->actx.tool_ids_nine = fam && !strcmp(fam, "mistral");
	}
	st = rg_model_chat_encode_opts(c->srv->model, msgs, r->n_messages, &opts, out, enc);
	free(msgs);
	return st;
}

/* A completion with a "suffix" (fill-in-the-middle): prompt p's ids as prefix-suffix-middle,
 * fim[0] prompt fim[1] suffix fim[2] (rg_fim_tokens; the texts without the tokenizer's
 * template, as llama.cpp's infill and StarCoder's FIM prompts are built); a token-id prompt is
 * taken as it is. A model without the tokens: RG_ERR_UNSUPPORTED (400 on "suffix"). */
static rg_status fim_ids(conn_ctx *c, int p, int32_t **ids, int *n, char **text_out,
			 size_t *text_len, const char **param)
{
	const rg_gen_request *r = &c->gen->req;
	const int32_t *fim = c->srv->fim;
	rg_encode_params ep = rg_encode_params_default();
	rg_encoding pre = {0}, suf = {0};
	rg_status st;
	size_t np;

	*param = "suffix";
	if (fim[0] < 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "suffix (fill-in-the-middle): this model's vocabulary has no "
				 "<fim_prefix> / <fim_suffix> / <fim_middle> tokens (nor "
				 "<|fim_prefix|> ...)");
	ep.add_special_tokens = false;
	ep.max_length = SIZE_MAX;
	if (!(r->ids && r->ids[p]) &&
	    (st = rg_model_encode(c->srv->model, r->texts[p], r->text_lens[p], NULL, 0, &ep,
				  &pre)) != RG_OK) {
		*param = "prompt";
		return st;
	}
	if ((st = rg_model_encode(c->srv->model, r->suffix, strlen(r->suffix), NULL, 0, &ep,
				  &suf)) != RG_OK)
		goto out_free;
	np = r->ids && r->ids[p] ? (size_t)r->n_ids[p] : pre.n;
	if (!(*ids = malloc((np + suf.n + 3) * sizeof(int32_t)))) {
		st = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free;
	}
	(*ids)[0] = fim[0];
	memcpy(*ids + 1, r->ids && r->ids[p] ? r->ids[p] : pre.ids, np * sizeof(int32_t));
	(*ids)[np + 1] = fim[1];
	if (suf.n)
		memcpy(*ids + np + 2, suf.ids, suf.n * sizeof(int32_t));
	(*ids)[np + suf.n + 2] = fim[2];
	*n = (int)(np + suf.n + 3);
	if (text_out) {
		*text_out = NULL;
		*text_len = 0;
		if (!(r->ids && r->ids[p]) && (*text_out = malloc(r->text_lens[p] + 1))) {
			memcpy(*text_out, r->texts[p], r->text_lens[p]);
			(*text_out)[r->text_lens[p]] = '\0';
			*text_len = r->text_lens[p];
		} else if (r->ids && r->ids[p] &&
			   rg_model_decode(c->srv->model, r->ids[p], (size_t)r->n_ids[p], false,
					   text_out, text_len) != RG_OK) {
			*text_out = NULL;
			*text_len = 0;
		}
	}
	*param = "prompt";
out_free:
	rg_encoding_free(&pre);
	rg_encoding_free(&suf);
	return st;
}

/* Tokenize prompt p of the request into *ids (malloc'd), *n. add_special: the tokenizer's
 * template (BOS) for plain texts; a rendered chat has its own. */
static rg_status prompt_ids(conn_ctx *c, int p, int32_t **ids, int *n, char **text_out,
			    size_t *text_len, const char **param)
{
	const rg_gen_request *r = &c->gen->req;
	rg_encode_params ep = rg_encode_params_default();
	rg_encoding enc = {0};
	char *chat = NULL;
	const char *text;
	size_t len;
	rg_status st;

	*param = r->api == RG_GEN_API_CHAT ? "messages"
		 : r->api == RG_GEN_API_COMPLETIONS ? "prompt" : "inputs";
	if (r->api == RG_GEN_API_COMPLETIONS && r->suffix)
		return fim_ids(c, p, ids, n, text_out, text_len, param);
	if (r->api != RG_GEN_API_CHAT && r->ids && r->ids[p]) {
		*ids = malloc((size_t)r->n_ids[p] * sizeof(int32_t));
		if (!*ids)
			return RG_ERR_OOM;
		memcpy(*ids, r->ids[p], (size_t)r->n_ids[p] * sizeof(int32_t));
		*n = r->n_ids[p];
		if (text_out &&
		    rg_model_decode(c->srv->model, *ids, (size_t)*n, false, text_out, text_len) !=
			    RG_OK) {
			*text_out = NULL;
			*text_len = 0;
		}
		return RG_OK;
	}
	if (r->api == RG_GEN_API_CHAT) {
		if ((st = render_chat(c, &chat, &enc, param)) != RG_OK)
			return st;
		text = chat;
		len = strlen(chat);
	} else {
		text = r->texts[p];
		len = r->text_lens[p];
		ep.max_length = SIZE_MAX;
		ep.src_lang = r->src_lang; /* checked by langs_refused */
		st = rg_model_encode(c->srv->model, text, len, NULL, 0, &ep, &enc);
	}
	if (st == RG_OK && enc.n == 0)
		st = rg_errorf(RG_ERR_INVALID_INPUT, "the prompt has no tokens");
	if (st == RG_OK) {
		*ids = enc.ids;
		*n = (int)enc.n;
		enc.ids = NULL;
		/* TGI's "truncate": the last tokens, and the prompt text is theirs */
		if (rg_gen_request_truncate_ids(r, *ids, n)) {
			if (text_out &&
			    rg_model_decode(c->srv->model, *ids, (size_t)*n, false, text_out,
					    text_len) != RG_OK) {
				*text_out = NULL;
				*text_len = 0;
			}
		} else if (text_out) {
			*text_out = malloc(len + 1);
			if (*text_out) {
				memcpy(*text_out, text, len);
				(*text_out)[len] = '\0';
				*text_len = len;
			}
		}
	}
	rg_encoding_free(&enc);
	free(chat);
	return st;
}

static void fill_params(conn_ctx *c, rg_gen_job *j, uint64_t seed)
{
	rg_gen_request *r = &c->gen->req;
	rg_gen_params *gp = &j->gp;
	int32_t n_eos = 0;
	const int32_t *eos = rg_gen_srv_eos(c->srv->gen, &n_eos);

	rg_gen_params_default(gp);
	if (strcmp(c->srv->o.speculative, "off")) { /* ngram, or draft (--draft-model) */
		/* the server's speculation for every request (the engine leaves out those whose
		 * rows it cannot verify: penalties, bias, beams) */
		gp->num_speculative_tokens = c->srv->o.num_speculative_tokens;
		gp->prompt_lookup_max = c->srv->o.prompt_lookup_max;
		gp->prompt_lookup_min = c->srv->o.prompt_lookup_min;
	}
	gp->sampling.do_sample = r->do_sample;
	gp->sampling.temperature = r->temperature;
	gp->sampling.top_k = r->top_k > 0 ? r->top_k : 0;
	gp->sampling.top_p = r->top_p;
	gp->sampling.min_p = r->min_p;
	gp->sampling.presence_penalty = r->presence_penalty;
	gp->sampling.frequency_penalty = r->frequency_penalty;
	gp->sampling.repetition_penalty = r->repetition_penalty;
	gp->sampling.n_logit_bias = r->n_bias;
	gp->sampling.logit_bias_ids = r->bias_ids;
	gp->sampling.logit_bias_values = r->bias_values;
	gp->seed = seed;
	gp->logprobs = r->logprobs > 0 ? r->logprobs : 0;
	if (r->api == RG_GEN_API_TGI || r->api == RG_GEN_API_TGI_STREAM)
		gp->logprobs = r->top_n_tokens > 0 ? r->top_n_tokens : 0;
	if (gp->logprobs > RG_GEN_MAX_LOGPROBS)
		gp->logprobs = RG_GEN_MAX_LOGPROBS;
	gp->max_tokens = r->max_tokens;
	/* prompt scoring: vLLM's prompt_logprobs, echo with logprobs (vLLM: prompt_logprobs =
	 * logprobs), max_tokens 0 (the prompt scored alone); the alternatives both need */
	if (r->prompt_logprobs >= 0 || (r->echo && r->logprobs >= 0) || r->max_tokens == 0 ||
	    (r->api == RG_GEN_API_TGI && r->details && r->decoder_input_details &&
	     c->srv->info->kind != RG_MODEL_ENC_DEC)) {
		int tn = r->prompt_logprobs > 0 ? r->prompt_logprobs : 0;

		if (r->echo && r->logprobs > tn)
			tn = r->logprobs;
		gp->prompt_logprobs = true;
		gp->prompt_top_n = tn < RG_GEN_MAX_LOGPROBS ? tn : RG_GEN_MAX_LOGPROBS;
	}
	/* ignore_eos: n_eos -1 ("no EOS at all"); 0 with NULL would mean "the model's EOS ids" */
	gp->eos_ids = r->ignore_eos ? NULL : eos;
	gp->n_eos = r->ignore_eos ? -1 : n_eos;
	gp->stop_ids = r->stop_token_ids;
	gp->n_stop_ids = r->n_stop_token_ids;
	gp->stop = (const char *const *)r->stop;
	gp->n_stop = r->n_stop;
	if (r->use_beam_search) {
		gp->sampling.do_sample = false;
		gp->num_beams = r->best_of > r->n ? r->best_of : r->n;
		if (gp->num_beams < 2)
			gp->num_beams = 2;
		gp->n = r->n;
		gp->length_penalty = r->length_penalty;
		gp->early_stopping = (rg_early_stopping)r->early_stopping;
		gp->n_eos = n_eos; /* beams end at EOS */
		gp->eos_ids = eos;
		gp->pad_id = -1;
		gp->stop = NULL;
		gp->n_stop = 0;
	}
	gp->sampling.no_repeat_ngram_size = r->no_repeat_ngram_size;
	gp->grammar_kind = (rg_grammar_kind)r->grammar_kind; /* checked by the parser */
	gp->grammar = r->grammar;
	if (c->gen->forced_bos >= 0) { /* tgt_lang, as HF's pipeline sets forced_bos_token_id */
		gp->forced_bos_set = true;
		gp->forced_bos_id = c->gen->forced_bos;
	}
	j->min_tokens = r->min_tokens;
	j->skip_special = r->skip_special_tokens;
	j->priority = r->priority;
	j->deadline_ms = r->deadline_ms;
	j->tpot_ms = r->tpot_ms;
}

/* Refusal of a submit: its status and message. */
static enum MHD_Result submit_error(conn_ctx *c, rg_gen_job *j, rg_status st, const char *param)
{
	const char *msg = rg_last_error();

	if (st == RG_ERR_BUSY) {
		if (atomic_load(&c->srv->stopping) || j->stopping) {
			c->http.retry_after_s = 1;
			return rg_conn_error(c, 503, "unhealthy", NULL, "%s", msg);
		}
		if (j->adm.retry_after_ms < 0) {
			/* never admissible: not a 429 a client would retry forever (issue 28),
			 * a 400 naming the target, without Retry-After */
			const char *which = j->deadline_ms > 0 && j->adm.est_ttft_ms > j->deadline_ms
						    ? "deadline_ms"
					    : j->tpot_ms > 0 ? "tpot_ms"
					    : j->deadline_ms > 0 ? "deadline_ms" : NULL;

			return rg_conn_error(c, 400, "validation", which,
					     "%s (estimated time to first token %.0f ms, time per "
					     "output token %.1f ms: %s cannot be met even on an "
					     "idle server)", msg, j->adm.est_ttft_ms,
					     j->adm.est_tpot_ms,
					     which ? which : "the server's --default-ttft-ms / "
							     "--default-tpot-ms");
		}
		c->http.retry_after_s = (int)fmin(3600, fmax(1, ceil(j->adm.retry_after_ms / 1e3)));
		return rg_conn_error(c, 429, "overloaded", NULL,
				     "%s (estimated time to first token %.0f ms, time per output "
				     "token %.1f ms); retry after %d s", msg, j->adm.est_ttft_ms,
				     j->adm.est_tpot_ms, c->http.retry_after_s);
	}
	if (st == RG_ERR_TOO_LONG)
		return rg_conn_error(c, 400, c->openai ? "context_length_exceeded" : "validation",
				     param, "%s", msg);
	if (st == RG_ERR_OOM)
		return rg_conn_error(c, 503, "overloaded", NULL, "out of memory: %s", msg);
	return rg_conn_error(c, 400, "validation", NULL, "%s", msg);
}

/* An encoder-decoder's source (prompt p of the request, *ids / *n from prompt_ids, *ids
 * malloc'd): the encoder's input as MarianTokenizer writes it, ending with the model's eos. A
 * text whose tokenizer.json does not append it gets it appended (MarianTokenizer always
 * does); token ids sent by the client must end with it (400 otherwise: the ids are the
 * portable form and are used as given). Over max_source_positions tokens: 400 naming the
 * limit. Refused: *ret is the answer (status vcode), *ids freed, true. */
static bool source_refused(conn_ctx *c, int p, int32_t **ids, int *n, const char *param,
			   int vcode, enum MHD_Result *ret)
{
	const rg_model_info *i = c->srv->info;
	const rg_gen_request *r = &c->gen->req;
	bool given = r->ids && r->ids[p];
	int eos = i->eos_token_id;

	if (eos >= 0 && (*n == 0 || (*ids)[*n - 1] != eos)) {
		int32_t *x;

		if (given) {
			free(*ids);
			*ids = NULL;
			*ret = rg_conn_error(c, vcode, "validation", param,
					     "%s: a source of token ids must end with the model's eos "
					     "id %d (as MarianTokenizer writes it)", param, eos);
			return true;
		}
		if (!(x = realloc(*ids, (size_t)(*n + 1) * sizeof(int32_t)))) {
			free(*ids);
			*ids = NULL;
			*ret = rg_conn_error(c, 500, "backend", NULL, "out of memory");
			return true;
		}
		x[(*n)++] = eos;
		*ids = x;
	}
	if (*n > i->max_source_positions) {
		*ret = rg_conn_error(c, vcode, c->openai ? "context_length_exceeded" : "validation",
				     param, "the source has %d tokens; this model's encoder reads at "
				     "most %d (max_source_positions). Please shorten the %s.", *n,
				     i->max_source_positions, param);
		free(*ids);
		*ids = NULL;
		return true;
	}
	return false;
}

/* "src_lang" / "tgt_lang" against the model's language codes (rg_model_lang_id): true, with
 * *ret the 400 (code vcode) naming the model's codes (or saying it has none), when one is not a
 * code of the model, or src_lang comes with token-id inputs (they carry their own code); else
 * false, with tgt_lang's id in g->forced_bos. */
static bool langs_refused(conn_ctx *c, int vcode, enum MHD_Result *ret)
{
	rg_gen_conn *g = c->gen;
	const rg_gen_request *r = &g->req;
	int32_t id;

	g->forced_bos = -1;
	for (int p = 0; r->src_lang && r->ids && p < r->n_prompts; p++)
		if (r->ids[p]) {
			*ret = rg_conn_error(c, vcode, "validation", "src_lang",
					     "src_lang applies to text inputs; token ids carry "
					     "their own language code");
			return true;
		}
	if (r->src_lang && rg_model_lang_id(c->srv->model, r->src_lang, &id) != RG_OK) {
		*ret = rg_conn_error(c, vcode, "validation", "src_lang", "src_lang %s",
				     rg_last_error());
		return true;
	}
	if (r->tgt_lang && rg_model_lang_id(c->srv->model, r->tgt_lang, &g->forced_bos) != RG_OK) {
		*ret = rg_conn_error(c, vcode, "validation", "tgt_lang", "tgt_lang %s",
				     rg_last_error());
		return true;
	}
	return false;
}

static rg_gen_limits gen_limits(const rg_server *s)
{
	return (rg_gen_limits){
		.vocab_size = s->info->vocab_size, .max_n = 16, .max_prompts = s->o.max_inputs,
		.max_stop = 16, .max_logprobs = RG_GEN_MAX_LOGPROBS, .max_messages = 4096,
		.max_depth = 32, .max_grammar_states = s->o.max_grammar_states,
	};
}

enum MHD_Result rg_handle_generate(conn_ctx *c)
{
	rg_server *s = c->srv;
	rg_gen_conn *g;
	rg_gen_api api = (rg_gen_api)c->row->gen_api;
	rg_gen_limits lim = gen_limits(s);
	rg_req_error err = {0};
	rg_status st;
	int max_ctx = rg_gen_srv_max_context(s->gen), n_prompts, per, vcode;
	bool enc_dec = s->info->kind == RG_MODEL_ENC_DEC, translate;
	enum MHD_Result lret;
	uint64_t seed;
	const char *param = NULL;
	const union MHD_ConnectionInfo *ci;
	static _Thread_local rg_rng seed_rng;
	static _Thread_local bool seeded;

	g = calloc(1, sizeof(*g));
	if (!g) {
		rg_conn_release_body(c);
		return rg_conn_error(c, 500, "backend", NULL, "out of memory");
	}
	c->gen = g;
	rg_buf_init(&g->pend);
	g->t0 = rg_now_ms();
	st = rg_gen_request_parse(api, c->http.body.data ? c->http.body.data : "",
				  c->http.body.len, &lim, &g->req, &err);
	rg_conn_release_body(c);
	if (st != RG_OK) {
		/* TGI answers validation errors with 422 */
		int code = (api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM) &&
			   err.http_status == 400 ? 422 : err.http_status;

		return rg_conn_error(c, code, err.type, err.param[0] ? err.param : NULL, "%s",
				     err.msg);
	}
	if (rg_refuse_model(c, g->req.model, &lret))
		return lret;
	if (api == RG_GEN_API_TGI && g->req.stream) /* TGI's POST / with "stream": true */
		g->req.api = api = RG_GEN_API_TGI_STREAM;
	/* /translate's stream is /generate_stream's events; its errors stay 400 (below: vcode) */
	translate = api == RG_GEN_API_TRANSLATE;
	if (translate && g->req.stream)
		g->req.api = api = RG_GEN_API_TGI_STREAM;
	vcode = !translate && (api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM) ? 422 : 400;
	if (langs_refused(c, vcode, &lret))
		return lret;
	if (enc_dec && g->req.echo)
		return rg_conn_error(c, 400, "validation", "echo",
				     "echo is not supported for an encoder-decoder model: the prompt "
				     "is the source, not the start of the completion");
	if (enc_dec && g->req.prompt_logprobs >= 0)
		return rg_conn_error(c, 400, "validation", "prompt_logprobs",
				     "prompt_logprobs is not supported for an encoder-decoder model: "
				     "the prompt is the source, which the decoder does not score");
	if (enc_dec && g->req.return_full_text)
		return rg_conn_error(c, vcode, "validation", "return_full_text",
				     "return_full_text is not supported for an encoder-decoder "
				     "model: the inputs are the source, not the start of the text");
	if (s->o.max_concurrent_requests &&
	    atomic_load(&s->n_suspended) >= s->o.max_concurrent_requests)
		return rg_conn_error(c, 429, "overloaded", NULL,
				     "%d requests running, the --max-concurrent-requests limit; "
				     "retry later", s->o.max_concurrent_requests);
	if (!seeded) {
		rg_rng_seed(&seed_rng, (uint64_t)(rg_now_ms() * 1e3) ^ (uint64_t)(uintptr_t)c);
		seeded = true;
	}
	seed = g->req.has_seed ? g->req.seed : rg_rng_next(&seed_rng);
	n_prompts = api == RG_GEN_API_CHAT ? 1 : g->req.n_prompts;
	g->n_choices = g->req.n;
	/* sequences per prompt: its n choices, its best_of candidates, or (beams) its n returned
	 * beams, filled whole by the search */
	per = !g->req.use_beam_search && g->req.best_of > g->req.n ? g->req.best_of : g->req.n;
	g->jobs = calloc((size_t)n_prompts, sizeof(*g->jobs));
	g->cur = calloc((size_t)n_prompts * (size_t)g->n_choices, sizeof(*g->cur));
	g->link = calloc(1, sizeof(*g->link));
	if (g->req.echo || g->req.return_full_text) {
		g->prefix = calloc((size_t)n_prompts, sizeof(*g->prefix));
		g->prefix_len = calloc((size_t)n_prompts, sizeof(*g->prefix_len));
	}
	if (!g->jobs || !g->cur || !g->link ||
	    ((g->req.echo || g->req.return_full_text) && (!g->prefix || !g->prefix_len)))
		return rg_conn_error(c, 500, "backend", NULL, "out of memory");
	pthread_mutex_init(&g->link->mu, NULL);
	atomic_init(&g->link->refs, 1);
	g->link->conn = c->conn;
	g->link->stream = api == RG_GEN_API_TGI_STREAM || g->req.stream;
	snprintf(g->id, sizeof(g->id), "%s-%016llx%08llx",
		 api == RG_GEN_API_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long long)rg_rng_next(&seed_rng),
		 (unsigned long long)(rg_rng_next(&seed_rng) & 0xffffffffull));
	g->actx = (rg_gen_answer_ctx){
		.api = api, .id = g->id, .created = (long long)time(NULL), .model = s->model_name,
		.fingerprint = NULL, .list = g->req.inputs_list,
	};
	ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	/* build every job before submitting any: a bad prompt fails the request alone */
	for (int p = 0; p < n_prompts; p++) {
		rg_gen_job *j = rg_gen_job_new(per);
		int32_t *ids = NULL;
		int n = 0;
		char *text = NULL;
		size_t tlen = 0;
		bool want_text = g->prefix != NULL;

		if (!j)
			return rg_conn_error(c, 500, "backend", NULL, "out of memory");
		g->jobs[p] = j;
		g->n_jobs = p + 1;
		st = prompt_ids(c, p, &ids, &n, want_text ? &text : NULL, &tlen, &param);
		if (st != RG_OK) {
			if (st == RG_ERR_UNSUPPORTED || st == RG_ERR_INVALID_INPUT ||
			    st == RG_ERR_INVALID_UTF8)
				return rg_conn_error(c, vcode, "validation", param, "%s",
						     rg_last_error());
			return rg_conn_error(c, 500, "backend", NULL, "%s", rg_last_error());
		}
		if (want_text) {
			g->prefix[p] = text;
			g->prefix_len[p] = tlen;
		}
		if (enc_dec) {
			/* the source: the encoder's limit, the decoder's room for the completion */
			enum MHD_Result ret;

			if (source_refused(c, p, &ids, &n, param, vcode, &ret))
				return ret;
			if (g->req.max_tokens < 0 || g->req.max_tokens > max_ctx - 1)
				g->req.max_tokens = max_ctx - 1;
		} else if (n >= max_ctx) {
			free(ids);
			return rg_conn_error(c, vcode, c->openai ? "context_length_exceeded"
								 : "validation", param,
					     "This model's maximum context length is %d tokens. "
					     "However, your %s has %d tokens. Please reduce the length "
					     "of the %s.", max_ctx, param, n, param);
		}
		/* a decoder's prompt and completion share its context (an encoder-decoder's
		 * completion has the decoder's room, capped above) */
		if (!enc_dec && g->req.max_tokens < 0) {
			g->req.max_tokens = max_ctx - n;
		} else if (!enc_dec && n + g->req.max_tokens > max_ctx) {
			free(ids);
			return rg_conn_error(c, vcode, c->openai ? "context_length_exceeded"
								 : "validation",
					     api == RG_GEN_API_CHAT ? "max_completion_tokens"
								    : "max_tokens",
					     "This model's maximum context length is %d tokens. "
					     "However, you requested %d tokens (%d in the %s, %d for "
					     "the completion). Please reduce the length of the %s or "
					     "the completion.", max_ctx, n + g->req.max_tokens, n,
					     param, g->req.max_tokens, param);
		}
		for (int q = 0; q < per; q++) {
			j->prompts[q] = q ? malloc((size_t)n * sizeof(int32_t)) : ids;
			if (!j->prompts[q])
				return rg_conn_error(c, 500, "backend", NULL, "out of memory");
			if (q)
				memcpy(j->prompts[q], ids, (size_t)n * sizeof(int32_t));
			j->prompt_lens[q] = n;
		}
		fill_params(c, j, seed + (uint64_t)p * 7919u);
		g->actx.prompt_tokens += n;
		j->arrival_ms = c->http.t0;
		j->client_fd = ci ? ci->connect_fd : -1;
		j->notify = job_notify;
		j->owner = g->link;
	}
	/* One unit (issue 28): admitted whole, or refused whole with nothing left queued; a
	 * request that can never fit the waiting queue is refused before it is tried (413, no
	 * Retry-After). Its jobs share one fair share of the queue: one key per HTTP request.
	 * (Not the API key: --api-key is one key that every client presents.) */
	{
		long long entries = 0;
		int refused = 0, max_waiting = rg_gen_srv_max_waiting(s->gen);
		uint64_t key = atomic_fetch_add(&fair_serial, 1) + 1;

		for (int p = 0; p < g->n_jobs; p++) {
			entries += rg_gen_job_queue_entries(g->jobs[p]);
			g->jobs[p]->fair_key = key;
		}
		if (entries > max_waiting)
			return rg_conn_error(c, 413, "payload_too_large",
					     n_prompts > 1 ? param : (per > 1 ? "n" : param),
					     "this request has %lld sequences (%d prompts x %d); "
					     "the generation queue holds at most %d (--max-queue), so "
					     "it can never be admitted", entries, n_prompts, per,
					     max_waiting);
		/* every job holds a reference to the link and counts in jobs_left from submit */
		atomic_fetch_add(&g->link->refs, g->n_jobs);
		pthread_mutex_lock(&g->link->mu);
		g->link->jobs_left += g->n_jobs;
		pthread_mutex_unlock(&g->link->mu);
		st = rg_gen_srv_submit_all(s->gen, g->jobs, g->n_jobs, &refused);
		if (st != RG_OK) {
			pthread_mutex_lock(&g->link->mu);
			g->link->jobs_left -= g->n_jobs;
			pthread_mutex_unlock(&g->link->mu);
			atomic_fetch_sub(&g->link->refs, g->n_jobs); /* the conn's own stays */
			return submit_error(c, g->jobs[refused < g->n_jobs ? refused : 0], st, param);
		}
	}
	g->counted = true;
	g->admitted = true;
	g->stream_status = 200;
	atomic_fetch_add(&s->n_suspended, 1);
	if (api == RG_GEN_API_TGI_STREAM || g->req.stream)
		return rg_conn_send_stream(c, "text/event-stream", stream_reader, c);
	/* whole answer: wait for the last job (it may have ended already) */
	pthread_mutex_lock(&g->link->mu);
	if (g->link->jobs_left == 0) {
		pthread_mutex_unlock(&g->link->mu);
		return answer_whole(c);
	}
	c->resume = resume_whole;
	c->suspended = true;
	/* the engine never touches c, only the link (whose conn rg_gen_conn_free clears under its
	 * lock): MHD may complete c while it is suspended or just resumed (the client went away
	 * and the socket closed before resume_whole ran), and then it must be freed */
	atomic_store(&c->released, true);
	g->counted = false; /* resume_whole, or the completion, gives the count back */
	g->link->waiting = true;
	MHD_suspend_connection(c->conn);
	pthread_mutex_unlock(&g->link->mu);
	return MHD_YES;
}

/* ---- /tokenize, /detokenize, /info -------------------------------------------------------- */

/* vLLM's /tokenize: {"prompt"} or {"messages", "add_generation_prompt"...} (rendered as the chat
 * route renders them) -> {"count", "max_model_len", "tokens"}; TEI's {"inputs"} as for
 * encoders. A "model" that is not the served one: 404. */
enum MHD_Result rg_handle_gen_tokenize(conn_ctx *c)
{
	static const char *const chat_keys[] = {"add_generation_prompt", "continue_final_message",
						"chat_template", "chat_template_kwargs"};
	rg_server *s = c->srv;
	json_object *o = NULL, *v;
	rg_encode_params ep = rg_encode_params_default();
	rg_encoding enc = {0};
	enum MHD_Result ret;
	rg_req_error perr = {0};
	rg_status st;
	rg_buf b;

	/* strict, depth-limited, duplicate keys refused: as every other body */
	if (rg_req_parse_object(c->http.body.data ? c->http.body.data : "", c->http.body.len,
				s->lim.max_depth, &o, &perr) != RG_OK) {
		rg_conn_release_body(c);
		return rg_conn_error(c, perr.http_status, perr.type, perr.param[0] ? perr.param : NULL,
				     "%s", perr.msg);
	}
	/* a "model" makes it vLLM's request: its 404 in OpenAI's error shape, as vLLM's */
	if (json_object_object_get_ex(o, "model", &v) && json_object_is_type(v, json_type_string) &&
	    !rg_model_served(s, json_object_get_string(v))) {
		c->openai = true;
		rg_refuse_model(c, json_object_get_string(v), &ret);
		json_object_put(o);
		rg_conn_release_body(c);
		return ret;
	}
	if (json_object_object_get_ex(o, "inputs", &v)) {
		/* TEI's shape, as for encoders */
		rg_req_error err;

		json_object_put(o);
		st = rg_request_parse(RG_ROUTE_TOKENIZE, c->http.body.data, c->http.body.len,
				      &s->lim, &c->req, &err);
		rg_conn_release_body(c);
		if (st != RG_OK)
			return rg_conn_error(c, err.http_status, err.type, err.param, "%s", err.msg);
		return rg_handle_tokenize(c);
	}
	if (json_object_object_get_ex(o, "add_special_tokens", &v))
		ep.add_special_tokens = json_object_get_boolean(v);
	ep.max_length = SIZE_MAX;
	if (json_object_object_get_ex(o, "prompt", &v) && json_object_is_type(v, json_type_string)) {
		st = rg_model_encode(s->model, json_object_get_string(v),
				     (size_t)json_object_get_string_len(v), NULL, 0, &ep, &enc);
	} else if (json_object_object_get_ex(o, "messages", &v)) {
		/* render through the chat route's parser and template */
		rg_gen_limits lim = gen_limits(s);
		rg_req_error err;
		rg_gen_conn *g = calloc(1, sizeof(*g));
		char *chat = NULL;
		const char *param;
		json_object *req = json_object_new_object();

		json_object_object_add(req, "messages", json_object_get(v));
		/* vLLM's chat tokenize fields, parsed as the chat route parses them */
		for (size_t k = 0; k < sizeof(chat_keys) / sizeof(chat_keys[0]); k++) {
			json_object *f;

			if (json_object_object_get_ex(o, chat_keys[k], &f))
				json_object_object_add(req, chat_keys[k], json_object_get(f));
		}
		if (!g) {
			json_object_put(req);
			json_object_put(o);
			rg_conn_release_body(c);
			return rg_conn_error(c, 500, "backend", NULL, "out of memory");
		}
		rg_buf_init(&g->pend);
		c->gen = g;
		st = rg_gen_request_parse(RG_GEN_API_CHAT, json_object_to_json_string(req),
					  strlen(json_object_to_json_string(req)), &lim, &g->req,
					  &err);
		json_object_put(req);
		if (st != RG_OK) {
			json_object_put(o);
			rg_conn_release_body(c);
			return rg_conn_error(c, err.http_status, err.type, err.param, "%s", err.msg);
		}
		st = render_chat(c, &chat, &enc, &param);
		free(chat);
	} else {
		json_object_put(o);
		rg_conn_release_body(c);
		return rg_conn_error(c, 400, "validation", "prompt",
				     "give \"prompt\" (a string) or \"messages\" (vLLM), or "
				     "\"inputs\" (TEI)");
	}
	json_object_put(o);
	rg_conn_release_body(c);
	if (st != RG_OK)
		return rg_conn_error(c, 400, "validation", NULL, "%s", rg_last_error());
	rg_buf_init(&b);
	rg_buf_printf(&b, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", enc.n,
		      rg_gen_srv_max_context(s->gen));
	for (size_t k = 0; k < enc.n; k++)
		rg_buf_printf(&b, "%s%d", k ? "," : "", enc.ids[k]);
	rg_buf_puts(&b, "],\"token_strs\":null}");
	rg_encoding_free(&enc);
	ret = rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
	return ret;
}

enum MHD_Result rg_handle_detokenize(conn_ctx *c)
{
	rg_server *s = c->srv;
	json_object *o = NULL, *v;
	int32_t *ids = NULL;
	size_t n = 0, len = 0;
	char *text = NULL;
	rg_req_error perr = {0};
	rg_status st;
	rg_buf b;

	if (rg_req_parse_object(c->http.body.data ? c->http.body.data : "", c->http.body.len,
				s->lim.max_depth, &o, &perr) != RG_OK) {
		rg_conn_release_body(c);
		return rg_conn_error(c, perr.http_status, perr.type, perr.param[0] ? perr.param : NULL,
				     "%s", perr.msg);
	}
	rg_conn_release_body(c);
	if (!json_object_object_get_ex(o, "tokens", &v) ||
	    !json_object_is_type(v, json_type_array)) {
		json_object_put(o);
		return rg_conn_error(c, 400, "validation", "tokens",
				     "\"tokens\" must be a list of token ids");
	}
	n = json_object_array_length(v);
	ids = malloc((n ? n : 1) * sizeof(int32_t));
	if (!ids) {
		json_object_put(o);
		return rg_conn_error(c, 500, "backend", NULL, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		json_object *e = json_object_array_get_idx(v, k);
		int64_t id = json_object_get_int64(e);

		if (!json_object_is_type(e, json_type_int) || id < 0 || id >= s->info->vocab_size) {
			free(ids);
			json_object_put(o);
			return rg_conn_error(c, 400, "validation", "tokens",
					     "tokens[%zu] must be a token id in [0, %d)", k,
					     s->info->vocab_size);
		}
		ids[k] = (int32_t)id;
	}
	json_object_put(o);
	st = rg_model_decode(s->model, ids, n, false, &text, &len);
	free(ids);
	if (st != RG_OK)
		return rg_conn_error(c, 400, "validation", NULL, "%s", rg_last_error());
	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"prompt\":");
	rg_buf_json_str(&b, text, len);
	rg_buf_puts(&b, "}");
	free(text);
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

enum MHD_Result rg_answer_gen_info(conn_ctx *c)
{
	rg_server *s = c->srv;
	const rg_model_info *i = s->info;
	rg_buf b;
	int max_ctx = rg_gen_srv_max_context(s->gen);
	bool enc_dec = i->kind == RG_MODEL_ENC_DEC;
	/* an encoder-decoder's input is the source (the encoder's limit, and one step's budget
	 * with the decoder's first token: sources are encoded whole), its output the decoder's
	 * room (its context less the decoder start token) */
	int max_in = !enc_dec ? max_ctx - 1
		     : i->max_source_positions < s->o.max_num_batched_tokens - 1
			     ? i->max_source_positions : s->o.max_num_batched_tokens - 1;

	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"version\":\"" RAGGED_VERSION "\",\"router\":\"ragged\",\"model_id\":");
	rg_buf_json_str(&b, s->model_id, strlen(s->model_id));
	rg_buf_puts(&b, ",\"served_model_name\":");
	rg_buf_json_str(&b, s->model_name, strlen(s->model_name));
	rg_buf_puts(&b, ",\"model_sha\":");
	rg_info_put_model_sha(&b, s);
	rg_buf_printf(&b, ",\"model_dtype\":\"%s\",\"model_device_type\":\"%s\","
		       "\"model_pipeline_tag\":\"%s\",\"model_kind\":\"%s\","
		       "\"max_concurrent_requests\":%d,"
		       "\"max_best_of\":16,\"max_stop_sequences\":16,\"max_input_tokens\":%d,"
		       "\"max_total_tokens\":%d,\"max_input_length\":%d,\"validation_workers\":%d,"
		       "\"max_client_batch_size\":%d,\"architecture\":\"%s\",\"vocab_size\":%d,"
		       "\"hidden_size\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
		       "\"num_hidden_layers\":%d,\"max_position_embeddings\":%d,"
		       "\"max_num_seqs\":%d,\"max_num_batched_tokens\":%d,\"block_size\":%d,"
		       "\"prefix_caching\":%s,\"chat_template\":%s,",
		       rg_dtype_name(i->dtype), rg_device_name(i->device),
		       enc_dec ? "translation" : "text-generation",
		       enc_dec ? "encoder-decoder" : "decoder",
		       s->o.max_concurrent_requests ? s->o.max_concurrent_requests : s->o.max_queue,
		       max_in, enc_dec ? max_in + max_ctx - 1 : max_ctx, max_in,
		       s->o.http_threads, s->o.max_inputs,
		       i->model_type, i->vocab_size, i->hidden_size, i->num_attention_heads,
		       i->num_key_value_heads, i->num_hidden_layers, i->max_position_embeddings,
		       s->o.max_num_seqs, s->o.max_num_batched_tokens, s->o.block_size,
		       enc_dec || s->o.no_prefix_caching ? "false" : "true",
		       !enc_dec && rg_model_chat_template(s->model) ? "true" : "false");
	if (enc_dec)
		rg_buf_printf(&b, "\"max_source_positions\":%d,\"max_new_tokens\":%d,"
			       "\"decoder_start_token_id\":%d,\"eos_token_id\":%d,"
			       "\"routes\":[\"/translate\",\"/v1/completions\",\"/generate\","
			       "\"/generate_stream\"],",
			       i->max_source_positions, max_ctx - 1, i->decoder_start_token_id,
			       i->eos_token_id);
	if (enc_dec) { /* the src_lang / tgt_lang codes (none: Marian, BART) */
		int n_langs = rg_model_lang_count(s->model);

		rg_buf_printf(&b, "\"num_languages\":%d,\"languages\":[", n_langs);
		for (int k = 0; k < n_langs; k++) {
			const char *code = rg_model_lang_code(s->model, k, NULL);

			if (k)
				rg_buf_puts(&b, ",");
			rg_buf_json_str(&b, code, strlen(code));
		}
		rg_buf_puts(&b, "],");
	}
	rg_buf_puts(&b, "\"models\":"); /* every model served (--model repeated) */
	rg_info_put_models(&b, s);
	rg_buf_puts(&b, ",\"tuning\":");
	rg_info_put_tuning(&b); /* the RAGGED_* tuning switches, as the encoder's /info */
	rg_buf_puts(&b, "}");
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

void rg_fim_tokens(const rg_model *m, int vocab, int32_t fim[3])
{
	static const char *const names[2][3] = {
		{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
		{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
	};
	int32_t found[2][3] = {{-1, -1, -1}, {-1, -1, -1}};

	fim[0] = fim[1] = fim[2] = -1;
	for (int32_t id = 0; m && id < vocab; id++) {
		size_t len = 0;
		const char *t = rg_model_token(m, id, &len);

		if (!t || len < 12 || len > 14 || t[0] != '<')
			continue;
		for (int f = 0; f < 2; f++)
			for (int k = 0; k < 3; k++)
				if (found[f][k] < 0 && strlen(names[f][k]) == len &&
				    !memcmp(t, names[f][k], len))
					found[f][k] = id;
	}
	for (int f = 0; f < 2; f++)
		if (found[f][0] >= 0 && found[f][1] >= 0 && found[f][2] >= 0) {
			memcpy(fim, found[f], sizeof(found[f]));
			return;
		}
}
