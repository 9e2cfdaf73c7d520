/* `ragged serve`'s HTTP glue: libmicrohttpd's callbacks and the per-connection life cycle
 * (rg_server_on_uri / on_request / on_completed), the checks before the body (framing, Host,
 * CORS, the API key, media type, size, the --max-buffered-bytes budget), reading the body, and
 * writing answers (rg_conn_send, rg_conn_error: the one place answers are queued). What a route
 * does is its row's (routes.c); a suspended connection is resumed through c->resume. A
 * server-sent-events writer for the streaming routes belongs here, beside rg_conn_send. The
 * request flow is described in server.c. */
#include "server/server_internal.h"

#include <limits.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn_watch.h"
#include "server/http_guard.h"
#include "server/metrics.h"

/* ---- responses -------------------------------------------------------------------------- */

/* The headers the connection's guards ask for (see server.c, "Hardening"). */
static void add_guard_headers(conn_ctx *c, struct MHD_Response *r, int status)
{
	char v[32];

	if (c->http.close_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	if (c->http.retry_after_s > 0 || status == 429 || status == 503) {
		snprintf(v, sizeof(v), "%d", c->http.retry_after_s > 0 ? c->http.retry_after_s : 1);
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
	}
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (c->http.cors_origin)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN,
					c->http.cors_origin);
	if (c->srv->o.cors_allow_origin) /* the answer depends on Origin: tell caches */
		MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Origin");
}

enum MHD_Result rg_conn_send(conn_ctx *c, int status, rg_buf *body, const char *ctype,
			     double queue_ms, double infer_ms, int batch_size)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	char v[64];
	double total = rg_now_ms() - c->http.t0;

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
	rg_metrics_request(&c->srv->front->metrics, c->route, status, queue_ms, infer_ms, total);
	return ret;
}

enum MHD_Result rg_conn_send_stream(conn_ctx *c, const char *ctype,
				    MHD_ContentReaderCallback reader, void *cls)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, reader, cls, NULL);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: pass events through */
	add_guard_headers(c, r, 200);
	rg_conn_watch_busy(c->srv->watch, rg_conn_watch_of(c->conn));
	ret = MHD_queue_response(c->conn, 200, r);
	MHD_destroy_response(r);
	return ret;
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
	return rg_conn_send(c, status, &b, "application/json", 0, 0, 0);
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

/* Give back the request's share of the buffered-bytes budget and its body. */
void rg_conn_release_body(conn_ctx *c)
{
	if (c->http.reserved)
		atomic_fetch_sub(&c->srv->front->buffered, c->http.reserved);
	c->http.reserved = 0;
	rg_buf_free(&c->http.body);
}

/* ---- before the body: framing, CORS, authentication, media type, size --------------------- */

/* Take n bytes of the server's --max-buffered-bytes budget; false when they do not fit. */
static bool reserve_body(conn_ctx *c, size_t n)
{
	rg_server *s = c->srv->front; /* one budget for every model's requests */
	size_t cur = atomic_load(&s->buffered);

	do {
		if (n > s->o.max_buffered_bytes || cur > s->o.max_buffered_bytes - n)
			return false;
	} while (!atomic_compare_exchange_weak(&s->buffered, &cur, cur + n));
	c->http.reserved += n;
	return true;
}

/* Record the answer to a request refused before its body was read. A client writing the whole
 * body before it reads (urllib, requests) gets a reset instead of the answer when the server
 * closes with the body unread; so the body is read and dropped (up to --max-discard-bytes) and
 * the answer sent at its end, on a connection that stays open. */
static void refuse_later(conn_ctx *c, int status, const char *type, const char *msg)
{
	rg_conn_release_body(c);
	c->http.refused = status;
	c->http.refused_type = type;
	snprintf(c->http.refused_msg, sizeof(c->http.refused_msg), "%s", msg);
	if (status == 503)
		c->http.retry_after_s = 1;
}

/* Refuse at the headers: answer now when nothing (or a 100-continue) is pending, or the body is
 * longer than we would read; else read and drop the body first (refuse_later). */
static enum MHD_Result refuse(conn_ctx *c, int status, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static enum MHD_Result refuse(conn_ctx *c, int status, const char *type, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	bool chunked = c->http.content_length == ULLONG_MAX &&
		       MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND,
						   MHD_HTTP_HEADER_TRANSFER_ENCODING);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	refuse_later(c, status, type, msg);
	if ((c->http.content_length == ULLONG_MAX && !chunked) || c->http.content_length == 0 ||
	    c->http.expect_continue || (c->http.content_length != ULLONG_MAX &&
				   c->http.content_length > c->srv->o.max_discard_bytes))
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
static int check_request_line_and_host(conn_ctx *c, header_walk *w, const char *method,
				       const char *version, const char *authority, char *msg,
				       size_t n)
{
	rg_server *s = c->srv;
	const union MHD_ConnectionInfo *ci;
	const char *host, *block_end = NULL;
	int st;

	/* RFC 9110 sec. 9.1; also what a line hidden behind an undetectable ":" line would start
	 * with had a proxy read it as a field ("X:GET /x HTTP/1.1"; http_guard.h) */
	if (!rg_http_token(method)) {
		snprintf(msg, n, "request method is not a token (RFC 9110 sec. 9.1)");
		return 400;
	}
	if (c->http.target_seen && c->http.target_err[0]) {
		snprintf(msg, n, "%s", c->http.target_err);
		return 400;
	}
	/* the version follows the raw target's terminating NUL; a NUL inside the target ends the
	 * string earlier ("/embed\0x" was served as "/embed") */
	if (s->mhd_layout && c->http.target_seen && version && *version &&
	    (uintptr_t)version != (uintptr_t)c->http.target_end + 1) {
		snprintf(msg, n, "request target holds a NUL byte");
		return 400;
	}
	/* the block runs from the request line's first byte (the method, parsed in place) for
	 * header_size bytes: where libmicrohttpd ended it at a line ": a" shows after the last
	 * field (issue 28) */
	if (s->mhd_layout && (ci = MHD_get_connection_info(c->conn,
							  MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE)))
		block_end = method + ci->header_size;
	if (s->mhd_layout && w->n && w->n == w->cap &&
	    (st = rg_header_layout_check(w->spans, w->n, block_end, 4096, msg, n)))
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

	if (!c->http.cors_origin)
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
	rg_metrics_request(&c->srv->front->metrics, c->route, 204, 0, 0, rg_now_ms() - c->http.t0);
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
	c->http.content_length = w.f.n_content_length && !w.f.content_length_bad ? w.f.content_length
									     : ULLONG_MAX;
	c->http.expect_continue = w.f.expect_continue;
	st = rg_framing_check(&w.f, version && !strcmp(version, MHD_HTTP_VERSION_1_0), msg,
			      sizeof(msg));
	if (!st)
		st = check_request_line_and_host(c, &w, method, version, authority, msg,
						 sizeof(msg));
	free(w.spans);
	if (st) {
		c->http.close_after = true;
		return send_error(c, st, "validation", "%s", msg);
	}
	origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
	c->http.cors_origin = rg_cors_allow(s->o.cors_allow_origin, origin);
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
	if (c->http.content_length != ULLONG_MAX && c->http.content_length > s->o.max_body_bytes)
		return refuse(c, 413, "payload_too_large", "body of %llu bytes is larger than %zu bytes",
			      c->http.content_length, s->o.max_body_bytes);
	if (!c->http.wants_body)
		return MHD_YES;
	ct = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!rg_content_type_is_json(ct))
		return refuse(c, 415, "unsupported_media_type",
			      "Content-Type %.80s is not JSON (send Content-Type: application/json; "
			      "curl: -H 'Content-Type: application/json')", ct);
	if (c->http.content_length != ULLONG_MAX && c->http.content_length > 0) {
		if (!reserve_body(c, (size_t)c->http.content_length))
			return refuse(c, 503, "overloaded",
				      "request bodies being received fill --max-buffered-bytes; "
				      "retry later");
		c->http.reserved_all = true;
		rg_buf_reserve(&c->http.body, (size_t)c->http.content_length);
	}
	return MHD_YES;
}

/* One fragment of the body: buffered (a JSON route), counted and dropped (any other route, or a
 * refused request), or past a limit (413, 503 with the rest dropped; past --max-discard-bytes
 * of dropping, the connection is closed without an answer). */
static enum MHD_Result on_body(conn_ctx *c, const char *data, size_t n)
{
	rg_server *s = c->srv;

	if (c->http.refused) {
		c->http.discarded += n;
		return c->http.discarded > s->o.max_discard_bytes ? MHD_NO : MHD_YES;
	}
	if (c->http.received + n > s->o.max_body_bytes) {
		char msg[96];

		snprintf(msg, sizeof(msg), "body larger than %zu bytes", s->o.max_body_bytes);
		refuse_later(c, 413, "payload_too_large", msg);
		return on_body(c, data, n);
	}
	c->http.received += n;
	if (!c->http.wants_body)
		return MHD_YES;
	if (!c->http.reserved_all && !reserve_body(c, n)) {
		refuse_later(c, 503, "overloaded",
			     "request bodies being received fill --max-buffered-bytes; retry later");
		return MHD_YES;
	}
	rg_buf_put(&c->http.body, data, n);
	return MHD_YES;
}

void *rg_server_on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	conn_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->srv = cls;
	c->conn = conn;
	rg_buf_init(&c->http.body);
	atomic_init(&c->released, false);
	if (uri) {
		c->http.target_seen = true;
		c->http.target_end = uri + strlen(uri);
		rg_target_bad(uri, c->http.target_err, sizeof(c->http.target_err));
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
	if (!c || !c->http.started) {
		if (!c) { /* the URI log callback ran out of memory */
			c = calloc(1, sizeof(*c));
			if (!c)
				return MHD_NO;
			*con_cls = c;
		}
		c->http.started = true;
		c->srv = s;
		c->conn = conn;
		c->http.t0 = rg_now_ms();
		c->row = rg_route_find(path ? path : "", method,
				       atomic_load(&s->ready) ? rg_route_kind_of_model(s->info) : 0,
				       &arg);
		c->route = c->row ? c->row->id : RG_ROUTE_OTHER;
		c->http.post = !strcmp(method, "POST");
		c->http.wants_body = c->http.post && c->row && c->row->schema;
		c->openai = c->row ? c->row->openai : path && !strncmp(path, "/v1/", 4);
		atomic_init(&c->released, false);
		rg_buf_init(&c->http.body);
		if (!path && !c->http.target_err[0]) {
			c->http.target_seen = true;
			snprintf(c->http.target_err, sizeof(c->http.target_err),
				 "request target is neither a path nor an http(s) URL");
		}
		return on_headers(c, method, version, authority);
	}
	url = path ? path : url;
	if (c->suspended)
		return c->resume(c);
	if (*upload_data_size) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		return on_body(c, upload_data, n);
	}
	/* the request has arrived in full */
	rg_conn_watch_busy(s->watch, rg_conn_watch_of(conn));
	/* Trailer fields of a chunked body are refused, with a close: libmicrohttpd 0.9.75 parses
	 * them with the header code, so a trailer ": a" after another one ends them unseen and the
	 * lines after it run as the next request (issue 28); the first trailer, whatever it is, is
	 * kept and seen here. No route reads trailers (RFC 9110 sec. 6.5.1 lets them be dropped). */
	if (MHD_get_connection_values(conn, MHD_FOOTER_KIND, NULL, NULL) > 0) {
		c->http.close_after = true;
		return send_error(c, 400, "validation",
				  "trailer fields after a chunked body are not accepted");
	}
	if (c->http.refused)
		return send_error(c, c->http.refused, c->http.refused_type, "%s", c->http.refused_msg);
	if (c->http.body.oom)
		return send_error(c, 500, "backend", "out of memory reading the body");
	return rg_route_dispatch(c, url, method);
}

static void free_ctx(conn_ctx *c)
{
	rg_gen_conn_free(c);
	rg_embed_conn_free(c);
	rg_request_free(&c->req);
	rg_conn_release_body(c);
	if (c->embed.answer_reserved)
		atomic_fetch_sub(&c->srv->front->buffered, c->embed.answer_reserved);
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
		/* Cannot happen: an embedding connection is released by its job's end before it
		 * is resumed (a generation one as it is suspended: the engine holds only its
		 * link), and the engine is stopped (every job released) before the daemon. Leak
		 * rather than free memory the engine may still hold. */
		fprintf(stderr, "ragged serve: BUG: connection completed while queued\n");
		return;
	}
	/* Suspended but released: resumed (its job ended: dropped for a closed socket, or at
	 * shutdown) and closed before it could answer; finish_job never ran, so it no longer counts
	 * as waiting for an answer (else a drain would wait for it until its time is up). */
	if (c->suspended) /* the model's count (c->srv: dispatch's choice) */
		atomic_fetch_sub(&c->srv->n_suspended, 1);
	free_ctx(c);
	*con_cls = NULL;
}
