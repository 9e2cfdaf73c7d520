/* The load generator's incremental readers (app/loadgen/stream.c): HTTP/1.1 framing (RFC 9112
 * sec. 6-7: Content-Length, chunked with extensions and trailers, until EOF, interim 1xx),
 * server-sent events (WHATWG HTML 9.2.6) and the completions-stream observer. The reference is
 * the test's own input: a payload the test frames itself must come back byte for byte whatever
 * the piece boundaries (every split point, byte by byte, random cuts), each piece in a buffer of
 * its exact size so ASan sees any read past it; malformed inputs must give a verdict, never a
 * crash, also under random corruption. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "loadgen/stream.h"
#include "test_rng.h"

/* ---- HTTP framing ---- */

struct sink {
	rg_buf body;
	int n_headers;
	char last_x[64];	/* value of the last "x-test" header */
	bool refuse;		/* the body callback refuses everything */
};

static void on_header(void *ctx, const char *name, size_t kn, const char *v, size_t vn)
{
	struct sink *s = ctx;

	s->n_headers++;
	if (kn == 6 && !strncasecmp(name, "x-test", 6) && vn < sizeof(s->last_x)) {
		memcpy(s->last_x, v, vn);
		s->last_x[vn] = '\0';
	}
}

static int on_body(void *ctx, const char *data, size_t n)
{
	struct sink *s = ctx;

	if (s->refuse)
		return -1;
	rg_buf_put(&s->body, data, n);
	return 0;
}

/* Feed text[0..n) cut at the k offsets in cuts (increasing), each piece in an exact-size heap
 * copy. Returns the last result; stops at the first LG_RX_DONE or LG_RX_BAD. */
static enum lg_rx_result feed_cut(struct lg_http_rx *rx, const char *text, size_t n,
				  const size_t *cuts, int k)
{
	size_t from = 0;
	enum lg_rx_result r = LG_RX_MORE;

	for (int i = 0; i <= k && r == LG_RX_MORE; i++) {
		size_t to = i < k ? cuts[i] : n;
		char *piece = malloc(to - from ? to - from : 1);
		assert_non_null(piece);
		memcpy(piece, text + from, to - from);
		r = lg_http_rx_feed(rx, piece, to - from);
		free(piece);
		from = to;
	}
	return r;
}

/* Parse a whole response given as one string with the given cuts; expect verdict want and,
 * when done, body. */
static void check_rx(const char *text, const size_t *cuts, int k, enum lg_rx_result want,
		     const char *body, int status)
{
	struct lg_http_rx rx;
	struct sink s = {0};

	rg_buf_init(&s.body);
	lg_http_rx_init(&rx, on_header, on_body, &s);
	enum lg_rx_result r = feed_cut(&rx, text, strlen(text), cuts, k);
	if (r != want)
		fail_msg("verdict %d, want %d, for %s", r, want, text);
	if (want == LG_RX_DONE) {
		assert_int_equal(rx.status, status);
		assert_int_equal(s.body.len, strlen(body));
		assert_memory_equal(s.body.data ? s.body.data : "", body, strlen(body));
	}
	lg_http_rx_free(&rx);
	rg_buf_free(&s.body);
}

/* Every single split point and byte by byte. */
static void check_rx_all_splits(const char *text, enum lg_rx_result want, const char *body,
				int status)
{
	size_t n = strlen(text);
	size_t *cuts = malloc(n * sizeof(size_t));

	assert_non_null(cuts);
	check_rx(text, NULL, 0, want, body, status);
	for (size_t c = 1; c < n; c++)
		check_rx(text, &c, 1, want, body, status);
	for (size_t c = 1; c < n; c++)
		cuts[c - 1] = c;
	check_rx(text, cuts, (int)n - 1, want, body, status);
	free(cuts);
}

static void test_rx_framing(void **state)
{
	(void)state;
	/* chunked, with extensions (bare, valued, quoted, BWS), upper-case hex, a trailer */
	check_rx_all_splits("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Test: a b \r\n\r\n"
			    "5\r\nhello\r\n1;ext\r\n \r\n6 ;name=\"v;x\"\r\nworld!\r\n"
			    "A;a=1;b\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n",
			    LG_RX_DONE, "hello world!0123456789", 200);
	/* Content-Length, and a 204 / 304 / HEAD-less 1xx with no body */
	check_rx_all_splits("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 7\r\n\r\n{\"e\":1}",
			    LG_RX_DONE, "{\"e\":1}", 503);
	check_rx_all_splits("HTTP/1.1 204 No Content\r\n\r\n", LG_RX_DONE, "", 204);
	check_rx_all_splits("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", LG_RX_DONE, "", 200);
	/* interim 100 and 103 responses come before the final one */
	check_rx_all_splits("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
			    "HTTP/1.1 429 Too Many\r\nContent-Length: 2\r\n\r\nno",
			    LG_RX_DONE, "no", 429);
	/* a bare LF after chunk data and on the size line is tolerated */
	check_rx_all_splits("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
			    "3\nabc\n0\r\n\r\n", LG_RX_DONE, "abc", 200);
	/* malformed */
	static const char *const bad[] = {
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 600 X\r\n\r\n",
		"SMTP 220 hi\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
		"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\x01\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_rx_all_splits(bad[i], LG_RX_BAD, NULL, 0);
}

static void test_rx_limits_eof_trailing(void **state)
{
	struct lg_http_rx rx;
	struct sink s = {0};
	(void)state;

	rg_buf_init(&s.body);
	lg_http_rx_init(&rx, on_header, on_body, &s);
	/* body until EOF */
	const char *t = "HTTP/1.0 200 OK\r\n\r\npartial";
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_MORE);
	assert_int_equal(lg_http_rx_eof(&rx), LG_RX_DONE);
	assert_true(rx.close);
	assert_int_equal(s.body.len, 7);
	/* EOF inside a chunk, inside the head, before anything */
	lg_http_rx_reset(&rx);
	t = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe";
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_MORE);
	assert_int_equal(lg_http_rx_eof(&rx), LG_RX_BAD);
	lg_http_rx_reset(&rx);
	assert_int_equal(lg_http_rx_feed(&rx, "HTTP/1.1 200", 12), LG_RX_MORE);
	assert_int_equal(lg_http_rx_eof(&rx), LG_RX_BAD);
	lg_http_rx_reset(&rx);
	assert_int_equal(lg_http_rx_eof(&rx), LG_RX_BAD);
	/* keep-alive by default on 1.1; Connection: close and bytes after the end are noted */
	lg_http_rx_reset(&rx);
	s.n_headers = 0;
	t = "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nX-Test:  7.5\r\n"
	    "Content-Length: 2\r\n\r\nokJUNK";
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_DONE);
	assert_true(rx.close && rx.trailing);
	assert_string_equal(s.last_x, "7.5");
	assert_int_equal(s.n_headers, 3);
	lg_http_rx_reset(&rx);
	t = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_DONE);
	assert_false(rx.close || rx.trailing);
	/* a refused body makes the response bad; a bad reader stays bad */
	lg_http_rx_reset(&rx);
	s.refuse = true;
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_BAD);
	assert_int_equal(lg_http_rx_feed(&rx, "x", 1), LG_RX_BAD);
	s.refuse = false;
	/* a head without end past LG_RX_MAX_HEAD, a chunk line past LG_RX_MAX_LINE */
	char *big = malloc(LG_RX_MAX_HEAD + 100);
	assert_non_null(big);
	memset(big, 'a', LG_RX_MAX_HEAD + 100);
	memcpy(big, "HTTP/1.1 200 OK\r\nX-Big: ", 24);
	lg_http_rx_reset(&rx);
	assert_int_equal(lg_http_rx_feed(&rx, big, LG_RX_MAX_HEAD + 100), LG_RX_BAD);
	lg_http_rx_reset(&rx);
	t = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;";
	assert_int_equal(lg_http_rx_feed(&rx, t, strlen(t)), LG_RX_MORE);
	assert_int_equal(lg_http_rx_feed(&rx, big + 30, LG_RX_MAX_LINE), LG_RX_BAD);
	free(big);
	lg_http_rx_free(&rx);
	rg_buf_free(&s.body);
}

/* ---- server-sent events ---- */

struct events {
	char got[16][256];
	int n;
	int refuse_at;	/* refuse the event with this index (-1: none) */
};

static int on_event(void *ctx, const char *data, size_t n)
{
	struct events *e = ctx;

	assert_int_equal(data[n], '\0');
	assert_true(n < sizeof(e->got[0]) && e->n < 16);
	if (e->n == e->refuse_at)
		return 1;
	memcpy(e->got[e->n], data, n + 1);
	e->n++;
	return 0;
}

static void sse_expect(const char *text, const size_t *cuts, int k, const char *const *want,
		       int n_want)
{
	struct lg_sse sse;
	struct events e = {.refuse_at = -1};
	size_t from = 0, n = strlen(text);

	lg_sse_init(&sse, 1024);
	for (int i = 0; i <= k; i++) {
		size_t to = i < k ? cuts[i] : n;
		char *piece = malloc(to - from ? to - from : 1);
		assert_non_null(piece);
		memcpy(piece, text + from, to - from);
		assert_int_equal(lg_sse_feed(&sse, piece, to - from, on_event, &e), 0);
		free(piece);
		from = to;
	}
	assert_int_equal(e.n, n_want);
	for (int i = 0; i < n_want; i++)
		assert_string_equal(e.got[i], want[i]);
	lg_sse_free(&sse);
}

static void test_sse(void **state)
{
	/* BOM, LF / CRLF / CR line ends, comments, unknown fields, "data" without colon (an empty
	 * line of data), no space after the colon, two spaces (one kept), multi-line data, an event
	 * without data (not dispatched), and a last event the stream ends inside (dropped). */
	const char *text = "\xEF\xBB\xBF" "data: one\n\n"
			   ": comment\r\ndata:two\r\n\r\n"
			   "event: x\rid: 7\rdata:  three\rdata: 3b\r\r"
			   "retry: 5\n\n"
			   "data\ndata: four\n\n"
			   "data: {\"a\":\ndata: 1}\r\n\r\n"
			   "data: [DONE]\n\n"
			   "data: lost";
	static const char *const want[] = {"one", "two", " three\n3b", "\nfour", "{\"a\":\n1}",
					   "[DONE]"};
	size_t n = strlen(text), cuts[512];
	(void)state;

	sse_expect(text, NULL, 0, want, 6);
	for (size_t c = 1; c < n; c++)
		sse_expect(text, &c, 1, want, 6);
	for (size_t c = 1; c < n; c++)
		cuts[c - 1] = c;
	sse_expect(text, cuts, (int)n - 1, want, 6);

	/* a line or an event over the cap, and a refused event, stop the stream */
	struct lg_sse sse;
	struct events e = {.refuse_at = -1};
	char line[64];
	lg_sse_init(&sse, 16);
	memset(line, 'x', sizeof(line));
	assert_int_equal(lg_sse_feed(&sse, line, sizeof(line), on_event, &e), -1);
	lg_sse_reset(&sse);
	assert_int_equal(lg_sse_feed(&sse, "data: 1234567890\ndata: 1234567890\n", 34, on_event,
				     &e), -1);
	lg_sse_reset(&sse);
	e.refuse_at = 1;
	assert_int_equal(lg_sse_feed(&sse, "data: a\n\ndata: b\n\ndata: c\n\n", 27, on_event, &e),
			 -1);
	assert_int_equal(e.n, 1);
	lg_sse_free(&sse);
}

/* ---- completions stream observer ---- */

static int obs_event(struct lg_gen_obs *g, const char *s, int64_t t_ms)
{
	return lg_gen_obs_event(g, s, strlen(s), t_ms * 1000000);
}

static void test_gen_obs(void **state)
{
	struct lg_gen_obs g;
	(void)state;

	lg_gen_obs_init(&g);
	/* an empty-text chunk is no token; chunks of 1, 3 and 2 tokens at 100, 130, 190 ms; then
	 * the usage chunk (no choices) and [DONE] */
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"index\": 0, \"text\": \"\"}]}", 50), 0);
	assert_int_equal(g.first_ns, -1);
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"text\": \"a\", \"finish_reason\": null}],"
				       " \"usage\": null}", 100), 0);
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"text\": \"b c d\"}]}", 130), 0);
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"text\": \"e f\", \"finish_reason\": "
				       "\"length\"}]}", 190), 0);
	assert_int_equal(obs_event(&g, "{\"choices\": [], \"usage\": {\"prompt_tokens\": 17, "
				       "\"completion_tokens\": 6, \"total_tokens\": 23}}", 191), 0);
	assert_false(g.done);
	assert_int_equal(obs_event(&g, "[DONE]", 192), 0);
	assert_true(g.done && !g.error);
	assert_int_equal(g.first_ns, 100000000);
	assert_int_equal(g.last_ns, 190000000);
	assert_int_equal(g.n_chunks, 3);
	assert_int_equal(g.usage_prompt, 17);
	assert_int_equal(lg_gen_obs_tokens(&g), 6);
	assert_true(fabs(lg_gen_obs_tpot_ms(&g) - 90.0 / 5.0) < 1e-9);
	assert_int_equal(g.n_itl, 2);
	assert_true(fabsf(g.itl_ms[0] - 30.0f) < 1e-4f && fabsf(g.itl_ms[1] - 60.0f) < 1e-4f);
	/* nothing may follow [DONE] */
	assert_int_equal(obs_event(&g, "{\"choices\": []}", 200), -1);

	/* no usage: tokens are the content chunks; the chat shape; one token: TPOT 0 */
	lg_gen_obs_reset(&g);
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"delta\": {\"role\": \"assistant\"}}]}", 5),
			 0);
	assert_int_equal(obs_event(&g, "{\"choices\": [{\"delta\": {\"content\": \"hi\"}}]}", 9), 0);
	assert_int_equal(lg_gen_obs_tokens(&g), 1);
	assert_true(lg_gen_obs_tpot_ms(&g) == 0.0);
	assert_int_equal(g.usage_completion, -1);
	lg_gen_obs_reset(&g);
	assert_true(isnan(lg_gen_obs_tpot_ms(&g)));
	assert_int_equal(g.n_itl, 0);

	/* an error object fails the request; malformed events are refused */
	assert_int_equal(obs_event(&g, "{\"error\": {\"message\": \"boom\", \"code\": 500}}", 1), 0);
	assert_true(g.error);
	lg_gen_obs_reset(&g);
	assert_int_equal(obs_event(&g, "{\"error\": null, \"choices\": []}", 1), 0);
	assert_false(g.error);
	static const char *const bad[] = {
		"{not json", "[1, 2]", "\"text\"", "{\"choices\": 3}", "{\"usage\": 5}",
		"{\"usage\": {\"completion_tokens\": \"6\"}}", "{\"usage\": {\"prompt_tokens\": -1}}",
		"{\"a\": 1} trailing", "",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lg_gen_obs_reset(&g);
		if (obs_event(&g, bad[i], 1) != -1)
			fail_msg("accepted '%s'", bad[i]);
	}

	/* a non-streamed body */
	lg_gen_obs_reset(&g);
	const char *body = "{\"choices\": [{\"text\": \"x y\"}], \"usage\": {\"prompt_tokens\": 4, "
			   "\"completion_tokens\": 9}}";
	assert_int_equal(lg_gen_obs_body(&g, body, strlen(body)), 0);
	assert_int_equal(lg_gen_obs_tokens(&g), 9);
	assert_int_equal(g.usage_prompt, 4);
	assert_int_equal(lg_gen_obs_body(&g, "<html>", 6), -1);
	lg_gen_obs_free(&g);
}

/* ---- the three together under random framing and random corruption ---- */

struct chain {
	struct lg_sse sse;
	struct lg_gen_obs obs;
	int64_t now;
	bool sse_bad;
};

static int chain_event(void *ctx, const char *data, size_t n)
{
	struct chain *c = ctx;

	return lg_gen_obs_event(&c->obs, data, n, c->now);
}

static int chain_body(void *ctx, const char *data, size_t n)
{
	struct chain *c = ctx;

	if (lg_sse_feed(&c->sse, data, n, chain_event, c)) {
		c->sse_bad = true;
		return -1;
	}
	return 0;
}

/* Frame the SSE text sse[0..n) as a chunked response with random chunk sizes and extensions. */
static size_t frame_chunked(char *out, const char *sse, size_t n)
{
	size_t o = (size_t)sprintf(out, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				   "Transfer-Encoding: chunked\r\n\r\n");
	for (size_t i = 0; i < n;) {
		size_t k = (size_t)irand(1, 40);
		if (k > n - i)
			k = n - i;
		o += (size_t)sprintf(out + o, irand(0, 1) ? "%zx" : "%zX", k);
		if (irand(0, 3) == 0)
			o += (size_t)sprintf(out + o, ";e%d=%d", irand(0, 9), irand(0, 99));
		memcpy(out + o, "\r\n", 2);
		memcpy(out + o + 2, sse + i, k);
		memcpy(out + o + 2 + k, "\r\n", 2);
		o += k + 4;
		i += k;
	}
	o += (size_t)sprintf(out + o, "0\r\n\r\n");
	return o;
}

static void test_chain_random(void **state)
{
	char sse[4096], framed[16384];
	size_t n = 0, cuts[64];
	(void)state;

	rng = 0x9E3779B97F4A7C15ULL;
	for (int t = 0; t < 12; t++)
		n += (size_t)sprintf(sse + n, "data: {\"choices\": [{\"index\": 0, \"text\": \"t%d\"}]}"
				     "\r\n\r\n", t);
	n += (size_t)sprintf(sse + n, "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 3, "
			     "\"completion_tokens\": 12}}\n\ndata: [DONE]\n\n");
	int n_bad = 0;
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = frame_chunked(framed, sse, n);
		bool corrupt = iter % 2 == 1;
		if (corrupt) {
			/* flip, insert or drop a few bytes anywhere */
			for (int m = irand(1, 3); m > 0; m--) {
				size_t at = (size_t)irand(0, (int)len - 1);
				switch (irand(0, 2)) {
				case 0:
					framed[at] = (char)irand(0, 255);
					break;
				case 1:
					memmove(framed + at + 1, framed + at, len - at);
					framed[at] = (char)irand(0, 255);
					len++;
					break;
				case 2:
					memmove(framed + at, framed + at + 1, len - at - 1);
					len--;
					break;
				}
			}
		}
		int k = irand(0, 20);
		for (int i = 0; i < k; i++)
			cuts[i] = (size_t)irand(1, (int)len - 1);
		for (int i = 1; i < k; i++)	/* insertion sort: cuts must increase */
			for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
				size_t x = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = x;
			}
		struct chain c = {0};
		struct lg_http_rx rx;
		lg_sse_init(&c.sse, 1024);
		lg_gen_obs_init(&c.obs);
		lg_http_rx_init(&rx, NULL, chain_body, &c);
		enum lg_rx_result r = feed_cut(&rx, framed, len, cuts, k);
		if (r == LG_RX_MORE)
			r = lg_http_rx_eof(&rx);
		if (!corrupt) {
			assert_int_equal(r, LG_RX_DONE);
			assert_true(c.obs.done);
			assert_int_equal(c.obs.n_chunks, 12);
			assert_int_equal(lg_gen_obs_tokens(&c.obs), 12);
		} else if (r != LG_RX_DONE || !c.obs.done || c.obs.n_chunks != 12) {
			n_bad++;
		}
		lg_http_rx_free(&rx);
		lg_sse_free(&c.sse);
		lg_gen_obs_free(&c.obs);
	}
	/* most corruptions are caught (some hit chunk-extension or text bytes harmlessly) */
	assert_true(n_bad > 500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rx_framing),
		cmocka_unit_test(test_rx_limits_eof_trailing),
		cmocka_unit_test(test_sse),
		cmocka_unit_test(test_gen_obs),
		cmocka_unit_test(test_chain_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
