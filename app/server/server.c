/* `ragged serve`: HTTP front end over libmicrohttpd (one epoll thread pool; http.c), the route
 * table (routes.c: one row per route, from which dispatch and /openapi.json derive) and the
 * handlers (routes_embed.c, routes_compat.c), one engine worker per model (engine.c), a response
 * cache (cache.c) and Prometheus metrics (metrics.c).
 *
 * Request flow for POST /embed and /v1/embeddings:
 *   1. MHD calls on_request once with the headers (on_headers: framing, CORS, API key, media
 *      type, a Content-Length over --max-body-bytes, the buffered-bytes budget; see "Hardening"
 *      below); then once per body fragment (on_body: accumulated up to the limit, dropped
 *      beyond it or after a refusal) and once more at the end.
 *   2. At the end, on the HTTP thread: the route's row (rg_route_dispatch) has the body parsed
 *      (request.c), then its handler tokenizes every text (bad UTF-8 -> 400, too long
 *      without truncate -> 422) and looks each input up in the cache.
 *   3. All inputs cached: answer now. Otherwise suspend the connection, queue the missing inputs
 *      as one job (429 when the queue is full) and return; when the job ends, the engine's teller
 *      thread calls job_done, which resumes the connection; MHD calls on_request again and
 *      c->resume builds the answer.
 *   4. on_completed (MHD_OPTION_NOTIFY_COMPLETED) frees the per-connection context. A connection
 *      is never completed while suspended (MHD keeps it), so the engine's borrowed pointer stays
 *      valid until job_done; the engine watches the sockets of queued jobs and drops the jobs of
 *      clients that went away (metric ragged_dropped_disconnected_total).
 *
 * Hardening (issue 9; app/server/http_guard.c, conn_watch.c, http.c on_headers/on_body):
 *   - framing: two different Content-Length values, Content-Length with Transfer-Encoding, a
 *     header name with whitespace before the colon, a transfer coding other than chunked: 400
 *     (501) and the connection is closed (RFC 9112 sec. 6.3); libmicrohttpd 0.9.75 takes the
 *     first Content-Length and keeps "Content-Length " as another field name by itself;
 *   - --api-key: every route but /health needs Authorization: Bearer KEY (401 with
 *     WWW-Authenticate: Bearer); --cors-allow-origin answers preflights and marks answers to
 *     allowed origins; a POST body whose Content-Type is not JSON gets 415;
 *   - issue 18: the header block as libmicrohttpd 0.9.70-0.9.76 left it (rg_header_layout_check:
 *     obs-fold, which that parser appends to the previous field's name so that a folded
 *     Content-Length is lost, and NUL bytes), control bytes in values, a missing (HTTP/1.1) or
 *     repeated Host, a Host outside --allowed-hosts (DNS rebinding), a raw target with a NUL,
 *     %00 or a space (seen by the URI log callback, rg_server_on_uri): 400 and close;
 *     absolute-form targets are served as their path, their authority as the host;
 *   - --request-read-timeout-s: headers and body of one request must arrive within it (the idle
 *     timeout restarts on every byte); --max-connections-per-ip (MHD's per-IP limit, by default
 *     a quarter of the connections; RLIMIT_NOFILE raised to fit --max-connections, see
 *     fit_open_files); --max-buffered-bytes: bodies being received share one budget, a body
 *     that does not fit gets 503 with Retry-After, and /embed_all answers count against it
 *     until sent (413 when one can never fit, else 503);
 *   - a request refused before its body was read (401, 413, 415, 503) has the body read and
 *     dropped, up to --max-discard-bytes, and then the answer, so that clients that write the
 *     whole body before reading (urllib, requests) see the status instead of a reset; with
 *     Expect: 100-continue or a longer Content-Length the answer goes at once and the connection
 *     closes.
 *
 * Several models (issue 31 item 4, --model repeated): one rg_server per model, each with its own
 * model copies, engine, cache, names and limits (setup_model, free_model); the first also owns
 * the daemon and what requests share (server_internal.h, rg_server.front). They load in
 * --model order after the daemon listens (/health is 503 until the last is ready); dispatch
 * picks a request's model by its "model" (routes.c, route_to_model); shutdown drains and stops
 * every engine, then frees every model.
 *
 * Normalization is the request's choice, as in TEI: the engine computes raw pooled vectors (the
 * model's pooling, its Normalize module skipped) and the cache keeps them raw; "normalize": true
 * (default) L2-normalizes on the way out, false returns the pooled vector as is. "dimensions"
 * cuts to the first d components before that (Matryoshka).
 */
#include "server/serve.h"
#include "server/server_internal.h"

#include <limits.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
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
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "server/sched/cost_table.h"
#include "server/http_status.h"
#include "server/options.h"
#include "server/sched/sched.h"
#include "server/cache.h"
#include "server/conn_watch.h"
#include "server/engine.h"
#include "server/fingerprint.h"
#include "server/http_guard.h"
#include "core/buf.h"
#include "server/json_log.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/warmup.h"
#include "server/engine_gen.h"

/* ---- main ------------------------------------------------------------------------------- */

/* CUDA graphs of every batch bucket the engine's batches can fall in, on each device's model,
 * before the server reports ready (rg_model_graph_warmup: batches of at most
 * --max-batch-requests inputs, the longest at most --graph-warmup-len tokens), so that serving
 * never stalls on a capture or a GEMM autotune. A capture that fails only warns: that model
 * serves without graphs (RG_ERR_OOM for host memory is an error). */
static rg_status warm_graphs(rg_server *s)
{
	const int len = s->o.graph_warmup_len;

	/* a decoder embedding model's pass runs eagerly (rg_model_graph_warmup is an encoder's) */
	if (len <= 0 || s->info->device != RG_DEVICE_CUDA ||
	    rg_model_get_info(s->model)->kind != RG_MODEL_ENCODER)
		return RG_OK;
	for (int i = 0; i < s->n_models; i++) {
		double t0 = rg_now_ms();
		size_t used0 = 0, used1 = 0, total = 0;
		int n = 0;
		rg_model_stats ms;
		rg_status st;

		(void)rg_model_memory(s->models[i], &used0, &total);
		st = rg_model_graph_warmup(s->models[i], s->o.max_batch_requests, len, &n);
		(void)rg_model_memory(s->models[i], &used1, &total);
		rg_model_get_stats(s->models[i], &ms);
		if (st == RG_ERR_OOM)
			return st;
		if (st != RG_OK) {
			fprintf(stderr, "ragged serve: warning: device %d: CUDA graph warm-up failed "
				"after %d graphs, serving without graphs: %s\n", i, n,
				rg_last_error());
			continue;
		}
		fprintf(stderr, "ragged serve: device %d: %d CUDA graphs captured at start-up in "
			"%.1f s (batches of up to %d tokens, %d inputs, longest %d), %lld GEMM plans, "
			"%+.0f MiB of device memory\n", i, n, (rg_now_ms() - t0) / 1e3,
			s->o.max_batch_tokens, s->o.max_batch_requests,
			len < s->info->max_seq_len ? len : s->info->max_seq_len, ms.gemm_plans,
			((double)used1 - (double)used0) / 1048576.0);
	}
	return RG_OK;
}

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
	rg_sched_params_derive(&sp, i->max_seq_len);
	sp.lazy = s->o.lazy;
	sp.latency_budget_ms = s->o.latency_budget_ms;
	sp.das_packed = s->o.das_packed;
	if (s->kind == RG_SCHED_DP) {
		/* without --cost-table, the table is kept per user, keyed by the model's
		 * fingerprint, device and dtype: a second start with the same model skips the
		 * measurement (minutes on a small CPU) */
		char user_db[4200], model_id[80];
		const char *db = s->o.cost_table;

		if (!db && rg_cost_user_db(user_db, sizeof(user_db)) == RG_OK)
			db = user_db;
		else if (!db)
			fprintf(stderr, "ragged serve: warning: %s; the measured DP cost table is not "
				"kept\n", rg_last_error());
		snprintf(model_id, sizeof(model_id), "sha256:%s", s->fingerprint);
		s->cost = rg_cost_load_stored(db, model_id, rg_device_name(s->o.device),
					      rg_dtype_name(s->o.dtype));
		if (s->cost) {
			fprintf(stderr, "ragged serve: DP cost table loaded from %s\n", db);
			sp.cost = s->cost;
		} else {
			/* measured by the engine's worker while the token scheduler serves
			 * (engine.h "Background DP measurement") */
			s->measure = rg_cost_measure_create(s->model, db, model_id,
							    rg_device_name(s->o.device),
							    rg_dtype_name(s->o.dtype),
							    i->max_seq_len, s->o.max_batch_tokens,
							    s->o.max_batch_requests, &st);
			if (!s->measure)
				return rg_error_wrap(st, "DP cost table");
			fprintf(stderr, "ragged serve: measuring the DP cost table (%d cells) in "
				"the background, serving with the token scheduler meanwhile\n",
				rg_cost_measure_total(s->measure));
		}
	}
	if (s->o.cache_entries > 0) {
		/* keyed by what decides the vectors, never the path: the model's bytes
		 * (fingerprint.h), device, dtype and pooling. "raw": the entries are raw pooled
		 * vectors (normalized per request on the way out) */
		snprintf(tag, sizeof(tag), "sha256:%s|%s|%s|%s|raw", s->fingerprint,
			 rg_device_name(i->device), rg_dtype_name(i->dtype),
			 rg_pooling_name(i->pooling));
		s->cache = rg_cache_create((size_t)s->o.cache_entries, i->output_dim, tag,
					   s->o.cache_db, &st);
		if (!s->cache && st == RG_ERR_IO && s->o.cache_db) {
			/* a database locked by another process (or unreadable) must not stop the
			 * server: under Restart=on-failure that is a crash loop. Serve with the
			 * RAM cache alone and say so. */
			fprintf(stderr, "ragged serve: warning: %s; serving without the cache "
				"database (in-memory cache only)\n", rg_last_error());
			s->cache = rg_cache_create((size_t)s->o.cache_entries, i->output_dim, tag,
						   NULL, &st);
		}
		if (!s->cache)
			return st;
	}
	if ((st = warm_graphs(s)) != RG_OK)
		return st;
	sp.max_batch_ms = s->o.max_batch_ms;
	memset(&ep, 0, sizeof(ep));
	ep.sched = sp;
	ep.max_queue = s->o.max_queue;
	ep.admit_by_time = !strcmp(s->o.admission, "time");
	ep.batch_delay_ms = s->o.batch_delay_ms;
	ep.token_delay_us = s->o.token_delay_us;
	ep.disconnect_poll_ms = 10;
	ep.cache = s->cache;
	ep.metrics = &s->front->metrics; /* one exposition: every model's batches together */
	ep.measure = s->measure;
	s->engine = rg_engine_create(s->models, s->n_models, &ep, &st);
	if (!s->engine)
		return st;
	s->max_len = rg_engine_max_len(s->engine);
	if (s->max_len > i->max_seq_len)
		s->max_len = i->max_seq_len;
	return RG_OK;
}

/* Decoders: the generation engine (engine_gen.h) over the first model. models_left: the models
 * still to load, this one included (the default KV cache fraction's split). */
static rg_status setup_gen_engine(rg_server *s, int models_left)
{
	rg_gen_srv_params gp;
	rg_status st;

	if (s->n_models > 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "a decoder model is served on one device "
				 "(--devices / --cpu-replicas take one)");
	memset(&gp, 0, sizeof(gp));
	rg_gen_engine_params_default(&gp.eng);
	gp.eng.max_num_seqs = s->o.max_num_seqs;
	gp.eng.max_num_batched_tokens = s->o.max_num_batched_tokens ? s->o.max_num_batched_tokens
								    : 512;
	gp.eng.max_context = s->o.max_model_len ? s->o.max_model_len
						: s->info->max_position_embeddings;
	gp.eng.max_waiting = s->o.max_queue;
	gp.eng.max_grammar_states = s->o.max_grammar_states;
	gp.eng.max_prompt_logprob_rows = s->o.max_prompt_logprob_rows;
	gp.eng.prefix_caching = !s->o.no_prefix_caching;
	gp.eng.block_size = s->o.block_size;
	gp.eng.kv_bytes = s->o.kv_cache_bytes;
	gp.eng.kv_fraction = s->o.kv_cache_fraction;
	if (!gp.eng.kv_bytes && !gp.eng.kv_fraction) {
		/* several models: the models not loaded yet need memory too (split evenly) */
		if (s->info->device == RG_DEVICE_CUDA)
			gp.eng.kv_fraction = 0.9 / models_left;
		else
			gp.eng.kv_bytes = (size_t)1 << 30;
	}
	gp.eng.step_delay_ms = s->o.step_delay_ms;
	gp.trace_path = s->o.trace_steps;
	gp.eng.default_ttft_ms = s->o.default_ttft_ms;
	gp.eng.default_tpot_ms = s->o.default_tpot_ms;
	if (strcmp(s->o.speculative, "off")) /* ngram, or draft (--draft-model) */
		gp.eng.max_speculative_tokens = s->o.num_speculative_tokens;
	gp.disconnect_poll_ms = 10;
	s->gen = rg_gen_srv_create(s->model, &gp, &st);
	if (!s->gen)
		return st;
	s->o.max_num_batched_tokens = gp.eng.max_num_batched_tokens;
	s->max_len = rg_gen_srv_max_context(s->gen);
	return RG_OK;
}

/* One model per device into s->models (--devices: each CUDA ordinal; --cpu-replicas: that many
 * CPU copies; else the one device), s->model = the first, and the devices' names for /info and
 * the metrics. A load error is printed (naming the device) and returned. */
static rg_status load_models(rg_server *s, const char *model_dir)
{
	rg_model_params mp = rg_model_params_default();
	int n = s->o.n_devices ? s->o.n_devices : s->o.cpu_replicas > 1 ? s->o.cpu_replicas : 1;
	const char *names[RG_SERVE_MAX_DEVICES];
	double t0 = rg_now_ms();
	rg_status st = RG_OK;

	mp.device = s->o.device;
	mp.dtype = s->o.dtype;
	mp.weights = s->o.weights;
	mp.quantize = s->o.quantize;
	mp.max_batch_tokens = s->o.max_batch_tokens;
	mp.pooling_set = s->o.pooling_set;
	mp.pooling = s->o.pooling;
	mp.dense_dir = s->o.dense_path;
	for (int i = 0; i < n; i++) {
		mp.device_index = s->o.n_devices ? s->o.devices[i] : 0;
		if (mp.device == RG_DEVICE_CUDA)
			snprintf(s->device_names[i], sizeof(s->device_names[i]), "cuda:%d",
				 mp.device_index);
		else if (n > 1)
			snprintf(s->device_names[i], sizeof(s->device_names[i]), "cpu:%d", i);
		else
			snprintf(s->device_names[i], sizeof(s->device_names[i]), "cpu");
		names[i] = s->device_names[i];
		s->models[i] = rg_model_load(model_dir, &mp, &st);
		if (!s->models[i]) {
			fprintf(stderr, "ragged serve: cannot load model %s on %s: %s: %s\n",
				s->o.model, s->device_names[i], rg_status_name(st), rg_last_error());
			return st;
		}
		s->n_models = i + 1;
		mp.dtype = rg_model_get_info(s->models[0])->dtype; /* every copy as the first */
	}
	s->model = s->models[0];
	if (s->o.draft_model) { /* speculative drafts' model, loaded as the target is */
		char dir[PATH_MAX];

		if (n > 1 || rg_model_get_info(s->model)->kind != RG_MODEL_DECODER) {
			fprintf(stderr, "ragged serve: --draft-model needs a decoder-only model on "
				"one device\n");
			return RG_ERR_INVALID_INPUT;
		}
		if ((st = rg_model_dir_resolve(s->o.draft_model, dir, sizeof(dir))) != RG_OK ||
		    !(s->draft = rg_model_load(dir, &mp, &st)) ||
		    (st = rg_model_set_draft(s->model, s->draft)) != RG_OK) {
			fprintf(stderr, "ragged serve: --draft-model %s: %s: %s\n",
				s->o.draft_model, rg_status_name(st), rg_last_error());
			return st;
		}
	}
	if (s == s->front) /* the metrics' per-device counters are the first model's devices */
		rg_metrics_set_devices(&s->metrics, names, n);
	if (n > 1)
		fprintf(stderr, "ragged serve: model loaded on %d devices in %.0f ms\n", n,
			rg_now_ms() - t0);
	return RG_OK;
}

/* Descriptors the server holds beside its connections: the listening socket, an epoll and a
 * wake-up pipe per HTTP thread, the engine's and the watcher's, SQLite files, stdio, and the
 * model's files while they load. */
#define RG_FD_RESERVE 128

/* Issue 18, item 14: each connection is a descriptor. Raise the soft RLIMIT_NOFILE to what
 * --max-connections needs (capped by the hard limit); when it cannot be had, say so and hold
 * only the connections that fit, so that the server keeps descriptors to accept and refuse
 * with (else a full table makes it unreachable, without a word). Sets s->max_connections and
 * the per-address limit s->max_per_ip (a quarter of what fits, unless given). */
static void fit_open_files(rg_server *s)
{
	rlim_t need = (rlim_t)s->o.max_connections + RG_FD_RESERVE;
	struct rlimit rl;

	s->max_connections = s->o.max_connections;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
			struct rlimit want = rl;

			want.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need
						? need : rl.rlim_max;
			if (setrlimit(RLIMIT_NOFILE, &want) == 0)
				rl = want;
		}
		if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
			long fit = (long)rl.rlim_cur - RG_FD_RESERVE;

			s->max_connections = fit > 16 ? (int)fit : 16;
			fprintf(stderr, "ragged serve: warning: --max-connections %d needs about %llu "
				"open files, but the limit is %llu (hard limit %llu; raise it: ulimit "
				"-n, systemd LimitNOFILE=); holding at most %d connections\n",
				s->o.max_connections, (unsigned long long)need,
				(unsigned long long)rl.rlim_cur,
				(unsigned long long)rl.rlim_max, s->max_connections);
		}
	}
	s->max_per_ip = rg_serve_per_ip_limit(&s->o, s->max_connections);
}

/* Whether the running libmicrohttpd parses a header block in place the way 0.9.70-0.9.76 do
 * (http_guard.h, rg_header_layout_check): Debian bookworm's 0.9.75 does; 0.9.77 rewrote it. */
static bool mhd_layout_known(void)
{
	int a = 0, b = 0, c = 0;
	const char *v = MHD_get_version();

	return v && sscanf(v, "%d.%d.%d", &a, &b, &c) == 3 && a == 0 && b == 9 && c >= 70 &&
	       c <= 76;
}

/* ---- accepting (--accept balanced) --------------------------------------------------------- */

/* libmicrohttpd 0.9.75's thread pool shares one listening socket: each HTTP thread polls it, and
 * the first one awake accepts up to 10 connections in a row. A burst of connections (a client's
 * pool, a load balancer's, the benchmark's 512) lands on a few threads, which keep them: in
 * bench/serving/short_requests_cpu.py runs the busiest of 14 HTTP threads carried 17-33% of the
 * requests and 4 of 14 carried none, so one thread saturates while the rest idle. With --accept
 * balanced the listening socket is ragged's and this thread accepts, handing each connection to
 * MHD_add_connection, which gives it to HTTP thread (descriptor mod threads) or the next one with
 * room: the library's own rule for added connections, an even deal for descriptors taken in
 * turn. The library's limits (--max-connections, per address) apply as before; a connection
 * past them is closed at once instead of waiting in the backlog. */
static void *accept_main(void *arg)
{
	rg_server *s = arg;

	for (;;) {
		struct sockaddr_storage ss;
		socklen_t n = sizeof(ss);
		int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &n,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			/* refused (a limit, no memory): the library has closed fd */
			MHD_add_connection(s->mhd, fd, (struct sockaddr *)&ss, n);
			continue;
		}
		if (atomic_load(&s->accept_stop))
			break;
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		/* out of descriptors or memory (or anything else): wait for connections to end */
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return NULL;
}

/* ragged's listening socket for ai, as libmicrohttpd binds its own (SO_REUSEADDR; IPv6 only on
 * an IPv6 address), with the same backlog; -1 (errno set) on failure. */
static int listen_on(const struct addrinfo *ai)
{
	int one = 1, e, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* After MHD_stop_daemon (which closed its end): the silent end of the daemon's socket pair. */
static void close_idle_pair(rg_server *s)
{
	if (s->idle_pair[1] >= 0)
		close(s->idle_pair[1]);
	s->idle_pair[0] = s->idle_pair[1] = -1;
}

/* Stop accepting (--accept balanced): the listening socket is shut down, which wakes the
 * accepting thread and makes the kernel refuse new connections, then closed. No-op otherwise. */
static void stop_accepting(rg_server *s)
{
	if (s->listen_fd < 0)
		return;
	atomic_store(&s->accept_stop, true);
	shutdown(s->listen_fd, SHUT_RDWR);
	if (s->acceptor_started)
		pthread_join(s->acceptor, NULL);
	s->acceptor_started = false;
	close(s->listen_fd);
	s->listen_fd = -1;
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
	s->mhd_layout = mhd_layout_known();
	if (s->o.allowed_hosts)
		snprintf(s->allowed_hosts, sizeof(s->allowed_hosts), "%s", s->o.allowed_hosts);
	else
		rg_allowed_hosts_default(s->o.host, s->allowed_hosts, sizeof(s->allowed_hosts));
	s->listen_fd = s->idle_pair[0] = s->idle_pair[1] = -1;
	if (!strcmp(s->o.accept, "balanced")) {
		/* the daemon's thread pool needs a listening socket of its own: one end of a socket
		 * pair, whose other end never writes, is never readable, so never accepted on */
		if ((s->listen_fd = listen_on(ai)) < 0 ||
		    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->idle_pair) != 0) {
			fprintf(stderr, "ragged serve: cannot listen on %s:%d: %s\n", s->o.host,
				s->o.port, strerror(errno));
			if (s->listen_fd >= 0)
				close(s->listen_fd);
			s->listen_fd = -1;
			freeaddrinfo(ai);
			return NULL;
		}
		flags &= ~(unsigned)MHD_USE_IPv6;
	}
	d = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, rg_server_on_request, s,
			     s->listen_fd >= 0 ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_SOCK_ADDR,
			     s->listen_fd >= 0 ? (void *)(intptr_t)s->idle_pair[0]
					       : (void *)ai->ai_addr,
			     MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->o.http_threads,
			     /* 0.9.70-0.9.76: not 1, whose missing-Host 400 goes out with two
			      * status lines; http.c refuses what it refused (no Host, a space
			      * in the target) */
			     MHD_OPTION_STRICT_FOR_CLIENT, (int)(s->mhd_layout ? 0 : 1),
			     MHD_OPTION_URI_LOG_CALLBACK, rg_server_on_uri, s,
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.connection_timeout_s,
			     MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->max_connections,
			     MHD_OPTION_CONNECTION_MEMORY_LIMIT, s->o.connection_memory,
			     MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
			     MHD_OPTION_NOTIFY_COMPLETED, rg_server_on_completed, s,
			     MHD_OPTION_NOTIFY_CONNECTION, rg_conn_watch_notify, s->watch,
			     MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->max_per_ip,
			     MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		fprintf(stderr, "ragged serve: cannot listen on %s:%d: %s\n", s->o.host, s->o.port,
			strerror(errno));
		goto out_close;
	}
	if (s->listen_fd < 0) {
		di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
		s->port = di ? di->port : s->o.port;
		return d;
	}
	{
		struct sockaddr_storage ss;
		socklen_t n = sizeof(ss);

		s->port = s->o.port;
		if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &n) == 0)
			s->port = ntohs(ss.ss_family == AF_INET6
					? ((struct sockaddr_in6 *)&ss)->sin6_port
					: ((struct sockaddr_in *)&ss)->sin_port);
	}
	s->mhd = d;
	atomic_init(&s->accept_stop, false);
	if (pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
		fprintf(stderr, "ragged serve: cannot start the accepting thread\n");
		MHD_stop_daemon(d);
		s->idle_pair[0] = -1; /* closed by the daemon */
		goto out_close;
	}
	pthread_setname_np(s->acceptor, "rg-accept");
	s->acceptor_started = true;
	return d;
out_close:
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		if (s->idle_pair[0] >= 0) /* the daemon did not start: not its */
			close(s->idle_pair[0]);
		if (s->idle_pair[1] >= 0)
			close(s->idle_pair[1]);
		s->listen_fd = s->idle_pair[0] = s->idle_pair[1] = -1;
	}
	return NULL;
}

/* Connections suspended and not yet answered, over every model. */
static int suspended_total(const rg_server *s)
{
	int n = 0;

	for (int k = 0; k < s->n_served; k++)
		n += atomic_load(&s->served[k]->n_suspended);
	return n;
}

/* Wait until every suspended connection has been answered (their jobs ended), until end_ms. */
static void wait_answered(rg_server *s, double end_ms)
{
	while (suspended_total(s) > 0 && rg_now_ms() < end_ms) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

/* Whether every model's engine is idle (nothing queued or running). */
static bool engines_idle(const rg_server *s)
{
	for (int k = 0; k < s->n_served; k++) {
		const rg_server *x = s->served[k];

		if (x->gen ? !rg_gen_srv_idle(x->gen) : x->engine && !rg_engine_idle(x->engine))
			return false;
	}
	return true;
}

/* Refuse new work on every model and stop their engines (each answers what it holds). */
static void stop_engines(rg_server *s)
{
	for (int k = 0; k < s->n_served; k++)
		atomic_store(&s->served[k]->stopping, true);
	for (int k = 0; k < s->n_served; k++) {
		rg_server *x = s->served[k];

		if (x->gen)
			rg_gen_srv_stop(x->gen);
		else if (x->engine)
			rg_engine_stop(x->engine);
	}
}

/* Graceful stop after the first SIGTERM/SIGINT, within --shutdown-timeout-s T:
 *  1. stop accepting: the listening socket is closed (a load balancer's next connection goes to
 *     another replica); requests on open connections, /health included, get 503 + Retry-After;
 *  2. drain the engine until T less a reserve for answering (min(1 s, T/4)): queued requests
 *     run shortest first while they are estimated to fit, the others get 503 at once, and what
 *     is left at the end (a large request can be cut between its batches) too;
 *  3. stop the engine (the batch in flight, bounded by --max-batch-ms, ends), wait for the
 *     answers to go out, stop HTTP. A second signal skips to 3.
 * Frees the daemon. */
static void drain(rg_server *s, struct MHD_Daemon *d, const sigset_t *sigs, int sig)
{
	double t0 = rg_now_ms(), total = s->o.shutdown_timeout_s * 1e3;
	double reserve = fmin(1000, total / 4), end = t0 + total - reserve;
	MHD_socket lsock;

	fprintf(stderr, "ragged serve: signal %d, draining (up to %d s)\n", sig,
		s->o.shutdown_timeout_s);
	for (int k = 0; k < s->n_served; k++)
		atomic_store(&s->served[k]->stopping, true);
	/* MHD stops polling the socket; shutting it down makes the kernel refuse new connections
	 * now instead of queueing them unaccepted (it is closed after MHD_stop_daemon); with
	 * --accept balanced the socket is ragged's (the daemon's own is never connected to) */
	lsock = MHD_INVALID_SOCKET;
	if (s->listen_fd >= 0)
		stop_accepting(s);
	else
		lsock = MHD_quiesce_daemon(d);
	if (lsock != MHD_INVALID_SOCKET)
		shutdown(lsock, SHUT_RDWR);
	for (int k = 0; k < s->n_served; k++) {
		if (s->served[k]->gen)
			rg_gen_srv_drain(s->served[k]->gen, end);
		else
			rg_engine_drain(s->served[k]->engine, end);
	}
	while (!engines_idle(s) && rg_now_ms() < end) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		if (sigtimedwait(sigs, NULL, &ts) > 0) {
			fprintf(stderr, "ragged serve: second signal, stopping now\n");
			break;
		}
	}
	stop_engines(s);
	wait_answered(s, fmax(t0 + total, rg_now_ms() + 250));
	/* the last answers are queued; let the HTTP threads write them before closing */
	nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	MHD_stop_daemon(d);
	if (lsock != MHD_INVALID_SOCKET)
		close(lsock);
	close_idle_pair(s);
	fprintf(stderr, "ragged serve: stopped after %.0f ms\n", rg_now_ms() - t0);
}

static pthread_t g_main_thread; /* the thread that sigwaits for SIGINT/SIGTERM */

/* SIGINT/SIGTERM delivered to a thread that does not block them: make it pending on the main
 * thread, whose sigwait takes it (pthread_kill is async-signal-safe). */
static void forward_stop_signal(int sig)
{
	pthread_kill(g_main_thread, sig);
}

/* One model, once the daemon listens: load it on its devices, then its names, prompts,
 * fingerprint, limits and engine (s->info, s->engine or s->gen, ...). models_left: the models
 * still to load, this one included. Returns 0, or the exit status (1, EXIT_USAGE) after a
 * message on stderr; what was made is freed by free_model either way. */
static int setup_model(rg_server *s, int models_left)
{
	rg_status st;

	if ((st = load_models(s, s->model_dir)) != RG_OK)
		return 1;
	s->info = rg_model_get_info(s->model);
	if (s->info->kind == RG_MODEL_DECODER && rg_model_embeds(s->model)) {
		/* Qwen3-Embedding, gte-Qwen2, e5-mistral: embeddings only, as TEI serves them;
		 * the batch engine's rg_model_run embeds through rg_model_embed_decoder */
		s->embed_info = *s->info;
		s->embed_info.kind = RG_MODEL_ENCODER;
		s->info = &s->embed_info;
		fprintf(stderr, "ragged serve: %s is a decoder with sentence-transformers pooling "
			"(%s%s): serving it as an embedding model (/embed, /v1/embeddings); "
			"generation routes answer 400\n", s->info->model_type,
			rg_pooling_name(s->info->pooling), s->info->normalize ? ", normalized" : "");
		if (rg_sched_kind_mode(s->kind, s->o.das_packed) != RG_EXEC_PACKED) {
			fprintf(stderr, "ragged serve: --scheduler %s batches in padded or "
				"concatenated rows, which a decoder embedding model does not run "
				"(packed batches only: token, nobatch, fcfs, sjf, edf, das with "
				"--das-packed)\n", rg_sched_kind_name(s->kind));
			return EXIT_USAGE;
		}
	}
	s->o.dtype = s->info->dtype; /* RG_DTYPE_AUTO resolved by the load */
	rg_model_id(s->o.model, s->info->model_dir, s->model_name, sizeof(s->model_name));
	snprintf(s->model_id, sizeof(s->model_id), "%s", s->model_name);
	if (s->o.served_model_name) /* "name[,alias...]": the first is the name answers carry */
		snprintf(s->model_name, sizeof(s->model_name), "%.*s",
			 (int)strcspn(s->o.served_model_name, ","), s->o.served_model_name);
	s->created_s = (long long)time(NULL);
	/* sentence-transformers prompts are an encoder's (a decoder may be a GGUF file) */
	if (s->info->kind == RG_MODEL_ENCODER &&
	    (st = rg_prompts_load(s->info->model_dir, &s->prompts)) != RG_OK) {
		fprintf(stderr, "ragged serve: %s: %s\n", rg_status_name(st), rg_last_error());
		return 1;
	}
	if (s->o.default_prompt_name) { /* TEI: a name of the model's prompts, else no start */
		s->prompts.dflt = rg_prompts_find(&s->prompts, s->o.default_prompt_name);
		if (s->prompts.dflt < 0) {
			fprintf(stderr, "ragged serve: --default-prompt-name '%s' is not one of the "
					"model's prompts (config_sentence_transformers.json has %zu)\n",
				s->o.default_prompt_name, s->prompts.n);
			return EXIT_USAGE;
		}
	} else if (s->o.default_prompt) {
		s->prompts.dflt = -1; /* the text given replaces the file's default */
	}
	if (s->o.cache_db || s->kind == RG_SCHED_DP) {
		double t0 = rg_now_ms();

		if ((st = rg_model_fingerprint(s->info->model_dir, s->fingerprint)) != RG_OK) {
			fprintf(stderr, "ragged serve: %s: %s\n", rg_status_name(st),
				rg_last_error());
			return 1;
		}
		fprintf(stderr, "ragged serve: model fingerprint sha256:%.16s... (%.0f ms)\n",
			s->fingerprint, rg_now_ms() - t0);
	}
	s->lim.max_inputs = (size_t)s->o.max_inputs;
	s->lim.vocab_size = s->info->vocab_size;
	s->lim.max_depth = 32;
	s->lim.auto_truncate = s->o.auto_truncate;
	/* decoders and encoder-decoders (issue 29: the prompt is the source, encoded once into
	 * the KV cache's cross blocks) run in the one generation engine */
	s->decoder = s->info->kind == RG_MODEL_DECODER || s->info->kind == RG_MODEL_ENC_DEC;
	if ((st = s->decoder ? setup_gen_engine(s, models_left) : setup_engine(s)) != RG_OK) {
		fprintf(stderr, "ragged serve: %s: %s: %s\n", s->o.model, rg_status_name(st),
			rg_last_error());
		return st == RG_ERR_INVALID_INPUT ? EXIT_USAGE : 1;
	}
	if (s->decoder) {
		rg_kv_info kv;

		/* an unknown chat template is refused by name at load, for the chat route only (an
		 * encoder-decoder has none: the chat route refuses it by kind) */
		s->chat_family = s->info->kind == RG_MODEL_DECODER ? rg_model_chat_family(s->model)
								   : NULL;
		if (!s->chat_family && s->info->kind == RG_MODEL_DECODER) {
			snprintf(s->chat_unknown, sizeof(s->chat_unknown), "%s", rg_last_error());
			fprintf(stderr, "ragged serve: warning: /v1/chat/completions is off: %s\n",
				rg_model_chat_template(s->model) ? s->chat_unknown
								 : "the model has no chat template");
		}

		rg_fim_tokens(s->model, s->info->kind == RG_MODEL_DECODER ? s->info->vocab_size : 0,
			      s->fim);
		rg_model_kv_info(s->model, &kv);
		fprintf(stderr, "ragged serve: generation engine: KV cache %d blocks of %d tokens "
			"(%.1f MiB, %d tokens), context %d, %d sequences and %d tokens per step, "
			"prefix caching %s\n", kv.n_blocks, kv.block_size, kv.bytes / 1048576.0,
			kv.n_blocks * kv.block_size, s->max_len, s->o.max_num_seqs,
			s->o.max_num_batched_tokens,
			s->info->kind == RG_MODEL_ENC_DEC ? "off (encoder-decoder)"
			: s->o.no_prefix_caching ? "off" : "on");
		if (s->info->kind == RG_MODEL_ENC_DEC)
			fprintf(stderr, "ragged serve: encoder-decoder (%s): sources of at most %d "
				"tokens, decoding from token %d; POST /translate, /v1/completions "
				"and /generate translate\n", s->info->model_type,
				s->info->max_source_positions, s->info->decoder_start_token_id);
	} else {
		rg_cost_model cm = rg_engine_cost_model(s->engine);

		fprintf(stderr, "ragged serve: batch time estimate %.3g ms + %.3g ms/token + %.3g "
			"ms/attention pair (%s), time budget %.3g ms, admission by %s\n",
			cm.batch_ms, cm.token_ms, cm.pair_ms, s->cost ? "cost table" : "measured",
			rg_engine_time_budget_ms(s->engine), s->o.admission);
	}
	return 0;
}

/* Free what setup_model made (any part of it); s itself stays. */
static void free_model(rg_server *s)
{
	rg_engine_free(s->engine);
	rg_gen_srv_free(s->gen);
	rg_cache_free(s->cache);
	rg_cost_table_free(s->cost);
	rg_cost_measure_free(s->measure); /* after the engine: its scheduler may hold the table */
	for (int i = 0; i < s->n_models; i++)
		rg_model_free(s->models[i]);
	rg_model_free(s->draft); /* after the target, whose engine used it */
	s->draft = NULL;
	rg_prompts_free(&s->prompts);
}

/* Two models that answer to one name: the request could not tell them apart (the first would
 * get it). EXIT_USAGE after a message, else 0. */
static int check_names(const rg_server *s)
{
	for (int k = 1; k < s->n_served; k++) {
		const rg_server *x = s->served[k];
		const char *a = x->o.served_model_name ? x->o.served_model_name : x->model_name;

		for (int j = 0; j < k; j++) {
			const char *p = a;

			while (*p) {
				size_t n = x->o.served_model_name ? strcspn(p, ",") : strlen(p);
				char name[256];

				snprintf(name, sizeof(name), "%.*s", (int)n, p);
				if (name[0] && rg_model_served(s->served[j], name)) {
					fprintf(stderr, "ragged serve: models %d (%s) and %d (%s) "
						"both answer to the name '%s': give each its own "
						"--served-model-name\n", j + 1, s->served[j]->o.model,
						k + 1, x->o.model, name);
					return EXIT_USAGE;
				}
				p += n + (p[n] == ',');
			}
		}
	}
	return 0;
}

int rg_serve_main(int argc, char **argv)
{
	rg_serve_argv args = {0}; /* argv, or what --config FILE says (options.h) */
	rg_server *s;
	struct MHD_Daemon *d = NULL;
	sigset_t sigs;
	rg_status st;
	int rc, sig;

	s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "ragged serve: out of memory\n");
		return 1;
	}
	s->front = s;
	s->served[0] = s;
	s->n_served = 1;
	s->prompts.dflt = -1;
	rg_metrics_init(&s->metrics);
	/* --config FILE: the file's models and options as a command line, read by the same
	 * parser; the options' strings point into it until the server is freed */
	if ((rc = rg_serve_config_expand(argc, argv, &args)) >= 0)
		goto out_free;
	argc = args.argc;
	argv = args.argv;
	rc = rg_serve_opts_parse(argc, argv, &s->o);
	if (rc >= 0)
		goto out_free;
	/* --model repeated: one rg_server per model, the later ones' options from their part of
	 * the command line (options.h, rg_serve_opts_parse_model) */
	for (int k = 1; k < s->o.n_models; k++) {
		rg_server *x = calloc(1, sizeof(*x));

		if (!x) {
			fprintf(stderr, "ragged serve: out of memory\n");
			rc = 1;
			goto out_free;
		}
		x->front = s;
		x->prompts.dflt = -1;
		rg_metrics_init(&x->metrics);
		s->served[s->n_served++] = x;
		if ((rc = rg_serve_opts_parse_model(argc, argv, &s->o, k, &x->o)) >= 0)
			goto out_free;
	}
	rc = 1;
	for (int k = 0; k < s->n_served; k++) {
		if (rg_sched_kind_parse(s->served[k]->o.scheduler, &s->served[k]->kind) != RG_OK) {
			fprintf(stderr, "ragged serve: %s\n", rg_last_error());
			rc = EXIT_USAGE;
			goto out_free;
		}
	}
	if (s->o.json_output && rg_json_log_start() != RG_OK) {
		fprintf(stderr, "ragged serve: --json-output: %s\n", rg_last_error());
		goto out_free;
	}
	/* TEI's --huggingface-hub-cache: where model ids are looked up. Read from TEI's variable
	 * (huggingface_hub's legacy name) it is already where rg_model_dir_resolve looks, below
	 * HF_HUB_CACHE; given on the command line it wins. */
	if (s->o.hub_cache && !(getenv("HUGGINGFACE_HUB_CACHE") &&
				!strcmp(getenv("HUGGINGFACE_HUB_CACHE"), s->o.hub_cache)) &&
	    setenv("HF_HUB_CACHE", s->o.hub_cache, 1) != 0) {
		fprintf(stderr, "ragged serve: cannot set HF_HUB_CACHE: %s\n", strerror(errno));
		goto out_free;
	}
	/* --model: a directory or a Hugging Face id in the local cache; s->o.model keeps the name
	 * given (responses name the model by it), the default model by its directory */
	for (int k = 0; k < s->n_served; k++) {
		rg_server *x = s->served[k];

		if (rg_model_dir_resolve(x->o.model, x->model_dir, sizeof(x->model_dir)) != RG_OK) {
			if (s->n_served > 1)
				fprintf(stderr, "ragged serve: cannot load model %d of %d (%s): %s\n",
					k + 1, s->n_served, x->o.model, rg_last_error());
			else
				fprintf(stderr, "ragged serve: cannot load model: %s\n",
					rg_last_error());
			goto out_free;
		}
		if (!x->o.model[0])
			snprintf(x->o.model, sizeof(x->o.model), "%s", x->model_dir);
	}
	fit_open_files(s);
	/* Block the stop signals in every thread we start; the main thread waits for them with
	 * sigwait. Threads that libraries started before main (OpenBLAS's pool, for one) do not
	 * block them, and the kernel may hand a process-directed SIGTERM to such a thread: the
	 * handler forwards it to the main thread instead of the default action killing the
	 * process (which made a clean stop exit by signal 15 now and then). */
	g_main_thread = pthread_self();
	{
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = forward_stop_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	for (int k = 0; k < s->n_served; k++) {
		atomic_init(&s->served[k]->ready, false);
		atomic_init(&s->served[k]->stopping, false);
		atomic_init(&s->served[k]->n_suspended, 0);
		atomic_init(&s->served[k]->routed, 0);
	}
	atomic_init(&s->buffered, 0);
	s->watch = rg_conn_watch_create(s->o.request_read_timeout_s, &st);
	if (!s->watch) {
		fprintf(stderr, "ragged serve: %s\n", rg_last_error());
		goto out_free;
	}
	for (int k = 1; k < s->n_served; k++)
		s->served[k]->watch = s->watch;
	/* Listen first so /health answers 503 while the models load. */
	d = start_daemon(s);
	if (!d)
		goto out_watch;
	for (int k = 0; k < s->n_served; k++)
		if ((rc = setup_model(s->served[k], s->n_served - k)) != 0)
			goto out_stop;
	rc = 1;
	if (check_names(s)) {
		rc = EXIT_USAGE;
		goto out_stop;
	}
	for (int k = 1; k < s->n_served; k++) {
		rg_server *x = s->served[k];

		fprintf(stderr, "ragged serve: model %d: %s as '%s' (%s, %s)\n", k + 1, x->o.model,
			x->model_name, x->decoder ? "generation" : "embedding engine",
			rg_dtype_name(x->o.dtype));
		atomic_store(&x->ready, true);
	}
	atomic_store(&s->ready, true);
	{
		/* the start-up line on stdout (what supervisors and tests wait for); with
		 * --json-output a JSON log object like every other line */
		char line[1024];
		int n = snprintf(line, sizeof(line), "ragged serving %s on http://%s:%d (%s, %s, %s)",
				 s->o.model, s->o.host, s->port, rg_device_name(s->o.device),
				 rg_dtype_name(s->o.dtype),
				 s->decoder ? "continuous-batching" : rg_sched_kind_name(s->kind));
		size_t len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;

		if (s->o.json_output) {
			struct timespec now;
			rg_buf b;

			clock_gettime(CLOCK_REALTIME, &now);
			rg_buf_init(&b);
			rg_json_log_format(&b, line, len, (long long)now.tv_sec, now.tv_nsec);
			fwrite(b.data ? b.data : "", 1, b.len, stdout);
			rg_buf_free(&b);
		} else {
			printf("%.*s\n", (int)len, line);
		}
		fflush(stdout);
	}

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = SIGTERM;
	} while (sig != SIGINT && sig != SIGTERM);
	rc = 0;
	drain(s, d, &sigs, sig);
	d = NULL;
out_stop:
	/* Order: refuse new work, answer what is queued (503), stop HTTP, then free the rest. */
	stop_engines(s);
	wait_answered(s, rg_now_ms() + 1000);
	stop_accepting(s);
	if (d) {
		MHD_stop_daemon(d);
		close_idle_pair(s);
	}
	if (rc == 0) {
		/* every answer is counted now: the last word for an operator (or a test behind a load
		 * balancer) on what this replica served */
		uint64_t total, ok;

		rg_metrics_answered(&s->metrics, &total, &ok);
		fprintf(stderr, "ragged serve: answered %llu requests, %llu of them 200\n",
			(unsigned long long)total, (unsigned long long)ok);
	}
	for (int k = s->n_served - 1; k >= 0; k--)
		free_model(s->served[k]);
out_watch:
	rg_conn_watch_free(s->watch);
out_free:
	for (int k = s->n_served - 1; k >= 1; k--) {
		rg_metrics_destroy(&s->served[k]->metrics);
		free(s->served[k]);
	}
	rg_metrics_destroy(&s->metrics);
	free(s);
	rg_serve_argv_free(&args);
	rg_json_log_stop();
	return rc;
}
