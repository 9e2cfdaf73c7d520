/* See stream.h. */
#include "loadgen/stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json.h"
#include "core/vec.h"

/* ---- HTTP/1.1 response reader ---- */

enum {
	RX_HEAD,		/* status line and headers, up to the blank line */
	RX_BODY_LEN,		/* Content-Length body: rx->remain bytes left */
	RX_BODY_EOF,		/* body delimited by the end of the connection */
	RX_CHUNK_SIZE,		/* chunk-size [ext] line */
	RX_CHUNK_DATA,		/* rx->remain bytes of chunk data left */
	RX_CHUNK_CRLF,		/* the CRLF after chunk data */
	RX_TRAILER,		/* trailer lines up to the blank line */
	RX_DONE,
	RX_BAD,
};

void lg_http_rx_init(struct lg_http_rx *rx, lg_rx_header_fn on_header, lg_rx_body_fn on_body,
		     void *ctx)
{
	memset(rx, 0, sizeof(*rx));
	rg_buf_init(&rx->head);
	rx->on_header = on_header;
	rx->on_body = on_body;
	rx->ctx = ctx;
}

void lg_http_rx_reset(struct lg_http_rx *rx)
{
	rx->state = RX_HEAD;
	rx->status = 0;
	rx->close = rx->chunked = rx->until_eof = rx->trailing = false;
	rx->remain = rx->n_in = 0;
	rx->head.len = 0;
	rx->cr = 0;
}

void lg_http_rx_free(struct lg_http_rx *rx)
{
	rg_buf_free(&rx->head);
}

static bool lg_is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static bool lg_token_eq(const char *s, size_t n, const char *lit)
{
	return n == strlen(lit) && !strncasecmp(s, lit, n);
}

/* Does the comma-separated list v[0..n) hold token lit (case-insensitive)? When last is set,
 * only its last element counts (Transfer-Encoding: chunked must be the final coding). */
static bool lg_list_has(const char *v, size_t n, const char *lit, bool last)
{
	bool found = false;
	size_t i = 0;

	while (i <= n) {
		size_t j = i;
		while (j < n && v[j] != ',')
			j++;
		size_t a = i, b = j;
		while (a < b && lg_is_ows(v[a]))
			a++;
		while (b > a && lg_is_ows(v[b - 1]))
			b--;
		bool eq = lg_token_eq(v + a, b - a, lit);
		if (last)
			found = eq;
		else if (eq)
			return true;
		i = j + 1;
	}
	return found;
}

/* Parse the head in rx->head (ending in CRLF CRLF) and choose the body framing (RFC 9112 sec.
 * 6.3). Returns false when it is not a valid HTTP/1.x response head. */
static bool lg_rx_parse_head(struct lg_http_rx *rx)
{
	const char *buf = rx->head.data, *end = buf + rx->head.len - 2, *line;
	bool http10, keep_alive = false, te = false;
	long long clen = -1;

	if (rx->head.len < 14 || strncmp(buf, "HTTP/1.", 7) || (buf[7] != '0' && buf[7] != '1') ||
	    buf[8] != ' ')
		return false;
	for (int k = 9; k < 12; k++)
		if (buf[k] < '0' || buf[k] > '9')
			return false;
	if (buf[12] != ' ' && buf[12] != '\r')
		return false;
	http10 = buf[7] == '0';
	rx->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	if (rx->status < 100 || rx->status > 599)
		return false;
	line = memchr(buf, '\n', (size_t)(end - buf)) + 1;
	while (line < end) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol || eol == line || eol[-1] != '\r')
			return false;
		const char *colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line)
			return false;
		size_t kn = (size_t)(colon - line);
		const char *v = colon + 1, *ve = eol - 1;
		while (v < ve && lg_is_ows(*v))
			v++;
		while (ve > v && lg_is_ows(ve[-1]))
			ve--;
		size_t vn = (size_t)(ve - v);
		if (lg_token_eq(line, kn, "content-length")) {
			long long x = 0;
			if (!vn || vn > 18)
				return false;
			for (size_t k = 0; k < vn; k++) {
				if (v[k] < '0' || v[k] > '9')
					return false;
				x = x * 10 + (v[k] - '0');
			}
			if (clen >= 0 && x != clen)
				return false;
			clen = x;
		} else if (lg_token_eq(line, kn, "transfer-encoding")) {
			te = true;
			rx->chunked = lg_list_has(v, vn, "chunked", true);
		} else if (lg_token_eq(line, kn, "connection")) {
			if (lg_list_has(v, vn, "close", false))
				rx->close = true;
			if (lg_list_has(v, vn, "keep-alive", false))
				keep_alive = true;
		}
		if (rx->on_header)
			rx->on_header(rx->ctx, line, kn, v, vn);
		line = eol + 1;
	}
	if (http10 && !keep_alive)
		rx->close = true;
	if (rx->status < 200 || rx->status == 204 || rx->status == 304) {
		rx->state = RX_DONE;
	} else if (rx->chunked) {
		rx->state = RX_CHUNK_SIZE;
	} else if (te || clen < 0) {
		/* a transfer coding other than chunked last, or no length at all: until EOF */
		rx->until_eof = true;
		rx->close = true;
		rx->state = RX_BODY_EOF;
	} else {
		rx->remain = (uint64_t)clen;
		rx->state = clen ? RX_BODY_LEN : RX_DONE;
	}
	return true;
}

/* chunk-size [ BWS ";" chunk-ext ] with the CRLF removed (RFC 9112 sec. 7.1). */
static bool lg_rx_chunk_size(struct lg_http_rx *rx, const char *s, size_t n)
{
	uint64_t sz = 0;
	size_t i = 0;

	for (; i < n; i++) {
		int d;
		char ch = s[i];
		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			d = ch - 'A' + 10;
		else
			break;
		if (i >= 15)
			return false;	/* 2^60 bytes and up: not a real chunk */
		sz = sz * 16 + (uint64_t)d;
	}
	if (!i)
		return false;
	while (i < n && lg_is_ows(s[i]))
		i++;
	if (i < n && s[i] != ';')
		return false;
	for (; i < n; i++)	/* extensions are ignored, but no control byte may hide there */
		if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
			return false;
	rx->remain = sz;
	rx->state = sz ? RX_CHUNK_DATA : RX_TRAILER;
	return true;
}

/* Take bytes of a CRLF-terminated line into rx->head. Returns the bytes consumed; *complete
 * says the line ended (rx->head then holds it without CR LF). A bare LF also ends a line. */
static size_t lg_rx_line(struct lg_http_rx *rx, const char *p, size_t n, bool *complete,
			 bool *bad)
{
	const char *lf = memchr(p, '\n', n);
	size_t take = lf ? (size_t)(lf - p) : n;

	*complete = false;
	if (rx->head.len + take > LG_RX_MAX_LINE) {
		*bad = true;
		return n;
	}
	rg_buf_put(&rx->head, p, take);
	if (rx->head.oom) {
		*bad = true;
		return n;
	}
	if (!lf)
		return n;
	if (rx->head.len && rx->head.data[rx->head.len - 1] == '\r')
		rx->head.len--;
	*complete = true;
	return take + 1;
}

enum lg_rx_result lg_http_rx_feed(struct lg_http_rx *rx, const char *data, size_t n)
{
	size_t pos = 0;

	rx->n_in += n;
	while (pos < n) {
		const char *p = data + pos;
		size_t left = n - pos, k;
		bool complete, bad = false;

		switch (rx->state) {
		case RX_HEAD: {
			/* The blank line may straddle the previous piece: look back 3 bytes. */
			size_t from = rx->head.len > 3 ? rx->head.len - 3 : 0;
			size_t room = LG_RX_MAX_HEAD - rx->head.len;
			size_t take = left < room ? left : room;
			rg_buf_put(&rx->head, p, take);
			if (rx->head.oom)
				goto out_bad;
			const char *e = memmem(rx->head.data + from, rx->head.len - from, "\r\n\r\n", 4);
			if (!e) {
				if (rx->head.len >= LG_RX_MAX_HEAD)
					goto out_bad;
				pos += take;
				break;
			}
			size_t head_len = (size_t)(e - rx->head.data) + 4;
			/* bytes of this piece past the head go on to the body */
			pos += take - (rx->head.len - head_len);
			rx->head.len = head_len;
			if (!lg_rx_parse_head(rx))
				goto out_bad;
			rx->head.len = 0;
			if (rx->status < 200 && rx->status != 101) {
				/* interim response (100, 103): the final one follows */
				rx->status = 0;
				rx->close = rx->chunked = rx->until_eof = false;
				rx->state = RX_HEAD;
			}
			break;
		}
		case RX_BODY_LEN:
		case RX_CHUNK_DATA:
			k = left < rx->remain ? left : (size_t)rx->remain;
			if (rx->on_body && rx->on_body(rx->ctx, p, k))
				goto out_bad;
			rx->remain -= k;
			pos += k;
			if (!rx->remain) {
				rx->state = rx->state == RX_BODY_LEN ? RX_DONE : RX_CHUNK_CRLF;
				rx->cr = 0;
			}
			break;
		case RX_BODY_EOF:
			if (rx->on_body && rx->on_body(rx->ctx, p, left))
				goto out_bad;
			pos = n;
			break;
		case RX_CHUNK_CRLF:
			if (*p == '\r' && !rx->cr) {
				rx->cr = 1;
			} else if (*p == '\n') {
				rx->state = RX_CHUNK_SIZE;
				rx->head.len = 0;
			} else {
				goto out_bad;
			}
			pos++;
			break;
		case RX_CHUNK_SIZE:
			pos += lg_rx_line(rx, p, left, &complete, &bad);
			if (bad)
				goto out_bad;
			if (complete) {
				if (!lg_rx_chunk_size(rx, rx->head.data, rx->head.len))
					goto out_bad;
				rx->head.len = 0;
			}
			break;
		case RX_TRAILER:
			pos += lg_rx_line(rx, p, left, &complete, &bad);
			if (bad)
				goto out_bad;
			if (complete) {
				if (!rx->head.len)
					rx->state = RX_DONE;
				rx->head.len = 0;
			}
			break;
		case RX_DONE:
			rx->trailing = true;
			pos = n;
			break;
		case RX_BAD:
			return LG_RX_BAD;
		}
	}
	return rx->state == RX_DONE ? LG_RX_DONE : LG_RX_MORE;
out_bad:
	rx->state = RX_BAD;
	return LG_RX_BAD;
}

enum lg_rx_result lg_http_rx_eof(struct lg_http_rx *rx)
{
	if (rx->state == RX_BODY_EOF || rx->state == RX_DONE) {
		rx->state = RX_DONE;
		rx->close = true;
		return LG_RX_DONE;
	}
	rx->state = RX_BAD;
	return LG_RX_BAD;
}

/* ---- server-sent events ---- */

void lg_sse_init(struct lg_sse *sse, size_t max_line)
{
	memset(sse, 0, sizeof(*sse));
	rg_buf_init(&sse->line);
	rg_buf_init(&sse->data);
	sse->max_line = max_line;
}

void lg_sse_reset(struct lg_sse *sse)
{
	sse->line.len = 0;
	sse->data.len = 0;
	sse->skip_lf = false;
	sse->started = false;
}

void lg_sse_free(struct lg_sse *sse)
{
	rg_buf_free(&sse->line);
	rg_buf_free(&sse->data);
}

/* Interpret one complete line (WHATWG HTML 9.2.6). Returns 0 or -1. */
static int lg_sse_line(struct lg_sse *sse, lg_sse_event_fn on_event, void *ctx)
{
	const char *s = sse->line.data ? sse->line.data : "";
	size_t n = sse->line.len;

	if (!sse->started) {
		sse->started = true;
		if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
			s += 3;
			n -= 3;
		}
	}
	if (!n) {
		if (!sse->data.len)
			return 0;
		sse->data.len--;	/* the LF after the last data line */
		sse->data.data[sse->data.len] = '\0';
		int rc = on_event ? on_event(ctx, sse->data.data, sse->data.len) : 0;
		sse->data.len = 0;
		return rc ? -1 : 0;
	}
	if (s[0] == ':')
		return 0;
	const char *colon = memchr(s, ':', n);
	size_t fn = colon ? (size_t)(colon - s) : n;
	if (fn != 4 || memcmp(s, "data", 4))
		return 0;	/* event, id, retry and unknown fields: not needed here */
	const char *v = colon ? colon + 1 : s + n;
	if (v < s + n && *v == ' ')
		v++;
	size_t vn = (size_t)(s + n - v);
	if (sse->data.len + vn + 1 > sse->max_line)
		return -1;
	rg_buf_put(&sse->data, v, vn);
	rg_buf_put(&sse->data, "\n", 1);
	return sse->data.oom ? -1 : 0;
}

int lg_sse_feed(struct lg_sse *sse, const char *data, size_t n, lg_sse_event_fn on_event,
		void *ctx)
{
	size_t pos = 0;

	while (pos < n) {
		if (sse->skip_lf) {
			sse->skip_lf = false;
			if (data[pos] == '\n') {
				pos++;
				continue;
			}
		}
		size_t e = pos;
		while (e < n && data[e] != '\n' && data[e] != '\r')
			e++;
		if (sse->line.len + (e - pos) > sse->max_line)
			return -1;
		rg_buf_put(&sse->line, data + pos, e - pos);
		if (sse->line.oom)
			return -1;
		if (e == n)
			break;
		sse->skip_lf = data[e] == '\r';
		pos = e + 1;
		int rc = lg_sse_line(sse, on_event, ctx);
		sse->line.len = 0;
		if (rc)
			return -1;
	}
	return 0;
}

/* ---- generation stream observer ---- */

void lg_gen_obs_init(struct lg_gen_obs *g)
{
	memset(g, 0, sizeof(*g));
	lg_gen_obs_reset(g);
}

void lg_gen_obs_reset(struct lg_gen_obs *g)
{
	g->first_ns = g->last_ns = -1;
	g->n_chunks = 0;
	g->usage_prompt = g->usage_completion = -1;
	g->done = g->error = false;
	g->n_itl = 0;
}

void lg_gen_obs_free(struct lg_gen_obs *g)
{
	free(g->itl_ms);
	g->itl_ms = NULL;
	g->cap_itl = g->n_itl = 0;
}

/* Take "usage" and "error" of a response object. Returns 0 or -1 (a usage count that is not a
 * non-negative integer). */
static int lg_gen_obs_common(struct lg_gen_obs *g, json_object *o)
{
	json_object *u, *e, *x;

	if (json_object_object_get_ex(o, "error", &e) && e)
		g->error = true;
	if (!json_object_object_get_ex(o, "usage", &u) || !u)
		return 0;
	if (!json_object_is_type(u, json_type_object))
		return -1;
	if (json_object_object_get_ex(u, "completion_tokens", &x)) {
		if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
			return -1;
		g->usage_completion = (long)json_object_get_int64(x);
	}
	if (json_object_object_get_ex(u, "prompt_tokens", &x)) {
		if (!json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0)
			return -1;
		g->usage_prompt = (long)json_object_get_int64(x);
	}
	return 0;
}

/* Text of a choice: "text" (completions) or "delta"."content" (chat); NULL when neither. */
static const char *lg_choice_text(json_object *c)
{
	json_object *t, *d;

	if (json_object_object_get_ex(c, "text", &t) && json_object_is_type(t, json_type_string))
		return json_object_get_string(t);
	if (json_object_object_get_ex(c, "delta", &d) && json_object_is_type(d, json_type_object) &&
	    json_object_object_get_ex(d, "content", &t) && json_object_is_type(t, json_type_string))
		return json_object_get_string(t);
	return NULL;
}

int lg_gen_obs_event(struct lg_gen_obs *g, const char *data, size_t n, int64_t now_ns)
{
	json_object *o, *ch;
	bool text = false;
	int rc = -1;

	if (g->done)
		return -1;
	if (n == 6 && !memcmp(data, "[DONE]", 6)) {
		g->done = true;
		return 0;
	}
	if (rg_json_parse(data, n, 0, "stream", "event", &o) != RG_OK)
		return -1;
	if (!json_object_is_type(o, json_type_object) || lg_gen_obs_common(g, o))
		goto out_put;
	if (json_object_object_get_ex(o, "choices", &ch) && ch) {
		if (!json_object_is_type(ch, json_type_array))
			goto out_put;
		for (size_t i = 0; i < json_object_array_length(ch); i++) {
			const char *t = lg_choice_text(json_object_array_get_idx(ch, i));
			if (t && *t)
				text = true;
		}
	}
	if (text) {
		if (g->first_ns >= 0) {
			if (!rg_vec_reserve((void **)&g->itl_ms, &g->cap_itl, g->n_itl + 1,
					    sizeof(*g->itl_ms), 256))
				goto out_put;
			g->itl_ms[g->n_itl++] = (float)((double)(now_ns - g->last_ns) / 1e6);
		} else {
			g->first_ns = now_ns;
		}
		g->last_ns = now_ns;
		g->n_chunks++;
	}
	rc = 0;
out_put:
	json_object_put(o);
	return rc;
}

int lg_gen_obs_body(struct lg_gen_obs *g, const char *data, size_t n)
{
	json_object *o;
	int rc = -1;

	if (rg_json_parse(data, n, 0, "response", "body", &o) != RG_OK)
		return -1;
	if (json_object_is_type(o, json_type_object) && !lg_gen_obs_common(g, o))
		rc = 0;
	json_object_put(o);
	return rc;
}

long lg_gen_obs_tokens(const struct lg_gen_obs *g)
{
	return g->usage_completion >= 0 ? g->usage_completion : g->n_chunks;
}

double lg_gen_obs_tpot_ms(const struct lg_gen_obs *g)
{
	long k = lg_gen_obs_tokens(g);

	if (g->first_ns < 0)
		return NAN;
	if (k <= 1)
		return 0.0;
	return (double)(g->last_ns - g->first_ns) / 1e6 / (double)(k - 1);
}
