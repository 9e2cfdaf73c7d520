/* The header checks of `ragged serve` (app/server/http_guard.c): request framing against RFC
 * 9112 sec. 6 (the request-smuggling cases of issue 9), the JSON media types, bearer tokens and
 * CORS origins. The server applies them in http.c; tests/py/test_server_hardening.py checks the
 * same cases on the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/http_guard.h"

/* Framing verdict of a header list given as "name", "value", ..., NULL. */
static int framing(bool http10, char *msg, size_t n, ...)
{
	rg_framing f;
	va_list ap;
	const char *k;

	rg_framing_init(&f);
	va_start(ap, n);
	while ((k = va_arg(ap, const char *)))
		rg_framing_add(&f, k, va_arg(ap, const char *));
	va_end(ap);
	return rg_framing_check(&f, http10, msg, n);
}

static void test_framing(void **state)
{
	char msg[128];
	rg_framing f;
	(void)state;

	/* unambiguous: one length, identical repeats, chunked alone, no body */
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "5", NULL), 0);
	assert_int_equal(framing(false, msg, sizeof(msg), "content-length", "5", "Content-Length",
				 " 5 ", NULL), 0);
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding", "Chunked", NULL), 0);
	assert_int_equal(framing(false, msg, sizeof(msg), "Host", "x", "X-Odd_Name!", "v", NULL), 0);
	assert_int_equal(framing(true, msg, sizeof(msg), "Content-Length", "0", NULL), 0);

	/* RFC 9112 sec. 6.3: two different lengths */
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "5", "Content-Length",
				 "7", NULL), 400);
	assert_non_null(strstr(msg, "Content-Length"));
	/* sec. 6.1: a length with a transfer coding, in either order */
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "5",
				 "Transfer-Encoding", "chunked", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding", "chunked",
				 "Content-Length", "5", NULL), 400);
	/* sec. 5.1: whitespace between the field name and the colon */
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length ", "5", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding\t", "chunked", NULL),
			 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "", "x", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "A(b)", "x", NULL), 400);
	/* lengths that are not one decimal number */
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "5, 5", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "-1", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "+5", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length", "", NULL), 400);
	assert_int_equal(framing(false, msg, sizeof(msg), "Content-Length",
				 "99999999999999999999999", NULL), 400);
	/* transfer codings: chunked once, alone, and not in HTTP/1.0 */
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding", "gzip, chunked",
				 NULL), 501);
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding", "xchunked", NULL),
			 501);
	assert_int_equal(framing(false, msg, sizeof(msg), "Transfer-Encoding", "chunked",
				 "Transfer-Encoding", "chunked", NULL), 400);
	assert_int_equal(framing(true, msg, sizeof(msg), "Transfer-Encoding", "chunked", NULL), 400);

	/* what the fields say */
	rg_framing_init(&f);
	rg_framing_add(&f, "Content-Length", "0012");
	rg_framing_add(&f, "Expect", " 100-Continue");
	assert_int_equal(f.content_length, 12);
	assert_int_equal(f.n_content_length, 1);
	assert_true(f.expect_continue);
	assert_int_equal(rg_framing_check(&f, false, msg, sizeof(msg)), 0);
}

static void test_content_type(void **state)
{
	static const char *const json[] = {
		"application/json", "Application/JSON", "application/json; charset=utf-8",
		"application/json;charset=\"UTF-8\"", " application/json ", "application/json; x=1",
		"application/vnd.api+json", "application/merge-patch+json; charset=utf8",
	};
	static const char *const not_json[] = {
		"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/jsonx", "application/+json",
		"application/json; charset=latin1", "text/json", "", "json", "application/",
	};
	(void)state;

	assert_true(rg_content_type_is_json(NULL));
	for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++)
		if (!rg_content_type_is_json(json[i]))
			fail_msg("'%s' refused", json[i]);
	for (size_t i = 0; i < sizeof(not_json) / sizeof(not_json[0]); i++)
		if (rg_content_type_is_json(not_json[i]))
			fail_msg("'%s' accepted", not_json[i]);
}

static void test_bearer(void **state)
{
	(void)state;

	assert_true(rg_bearer_matches("Bearer s3cret", "s3cret"));
	assert_true(rg_bearer_matches("bearer  s3cret ", "s3cret"));
	assert_false(rg_bearer_matches(NULL, "s3cret"));
	assert_false(rg_bearer_matches("", "s3cret"));
	assert_false(rg_bearer_matches("Bearer", "s3cret"));
	assert_false(rg_bearer_matches("Bearer ", "s3cret"));
	assert_false(rg_bearer_matches("Bearers3cret", "s3cret"));
	assert_false(rg_bearer_matches("Basic s3cret", "s3cret"));
	assert_false(rg_bearer_matches("Bearer s3cre", "s3cret"));
	assert_false(rg_bearer_matches("Bearer s3crets3cret", "s3cret"));
	assert_false(rg_bearer_matches("Bearer s3creT", "s3cret"));
	assert_false(rg_bearer_matches("Bearer S3cret", "s3cret"));
	/* a token that repeats a prefix of the key (the modular walk must not match it) */
	assert_false(rg_bearer_matches("Bearer ab", "abab"));
}

static void test_cors(void **state)
{
	const char *o = "http://a.example";
	(void)state;

	assert_ptr_equal(rg_cors_allow("http://a.example", o), o);
	assert_ptr_equal(rg_cors_allow("http://b.example, http://a.example ", o), o);
	assert_string_equal(rg_cors_allow("*", o), "*");
	assert_string_equal(rg_cors_allow("http://b.example,*", o), "*");
	assert_null(rg_cors_allow("http://b.example", o));
	assert_null(rg_cors_allow("http://a.example:8080", o));
	assert_null(rg_cors_allow("http://a.example.evil", o));
	assert_null(rg_cors_allow("http://a.exampl", o));
	assert_null(rg_cors_allow("*", NULL));
	assert_null(rg_cors_allow(NULL, o));
	assert_null(rg_cors_allow("", o));
}

/* ---- issue 18: header block layout, values, Host, request target ----------------------------- */

/* A stand-in for libmicrohttpd 0.9.75's in-place header parse (connection.c, get_next_header_line,
 * process_header_line, process_broken_line), as observed on the wire: raw (n bytes, a header
 * block ending in a blank line) is copied into pool, line ends (CRLF or LF) become NULs, the
 * colon a NUL, blanks after it skipped; a line starting with SP/HTAB is appended to the previous
 * field's *name*, which moves to the end of the pool; a line with an empty name (": a") after
 * the first field ends the block unstored (process_header_line empties it in place and the
 * state machine takes the empty line for the blank one). Fills spans and *end (the block's end,
 * as the request line's start plus MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE gives it); returns
 * the spans' count. */
static size_t mhd_parse(const char *raw, size_t n, char *pool, size_t pool_n, rg_header_span *sp,
			size_t cap, const char **end)
{
	size_t top = n + 8, ns = 0, i = 0;
	char *key = NULL, *val = NULL;

	assert_true(top < pool_n);
	memcpy(pool, raw, n);
	memset(pool + n, 'Z', pool_n - n); /* bytes past the block are not NUL */
	while (i < n) {
		char *line = pool + i;
		size_t e = i;

		while (e < n && pool[e] != '\n')
			e++;
		assert_true(e < n);
		if (e > i && pool[e - 1] == '\r')
			pool[e - 1] = '\0';
		pool[e] = '\0';
		i = e + 1;
		if (line[0] == ' ' || line[0] == '\t') {
			const char *t = line;
			size_t kl = strlen(key);

			while (*t == ' ' || *t == '\t')
				t++;
			assert_true(top + kl + strlen(t) + 1 < pool_n);
			memcpy(pool + top, key, kl);
			strcpy(pool + top + kl, t);
			key = pool + top;
			top += kl + strlen(t) + 1;
			continue;
		}
		if (key) {
			assert_true(ns < cap);
			sp[ns++] = (rg_header_span){key, strlen(key), val, strlen(val)};
			key = NULL;
			if (line[0] == ':') { /* the empty name ends the block */
				line[0] = '\0';
				break;
			}
		}
		if (!line[0])
			break;
		val = strchr(line, ':');
		assert_non_null(val);
		*val++ = '\0';
		while (*val == ' ' || *val == '\t')
			val++;
		key = line;
	}
	*end = pool + i;
	return ns;
}

/* The layout verdict of a raw header block. */
static int layout(const char *raw, size_t n)
{
	static char pool[4096];
	rg_header_span sp[16];
	char msg[200];
	const char *end;
	size_t ns = mhd_parse(raw, n, pool, sizeof(pool), sp, 16, &end);
	int st, st_no_end;

	assert_true(ns > 0);
	st = rg_header_layout_check(sp, ns, end, 4096, msg, sizeof(msg));
	assert_true(st ? msg[0] != '\0' : msg[0] == '\0');
	/* the block's end only adds refusals (empty names, a NUL after the last value) */
	st_no_end = rg_header_layout_check(sp, ns, NULL, 4096, msg, sizeof(msg));
	assert_true(st_no_end == st || (st_no_end == 0 && st == 400));
	return st;
}

#define LAYOUT(lit) layout(lit, sizeof(lit) - 1)

static void test_header_layout(void **state)
{
	(void)state;

	/* well-formed: CRLF or bare LF, empty values, blanks around values, one field */
	assert_int_equal(LAYOUT("Host: x\r\n\r\n"), 0);
	assert_int_equal(LAYOUT("Host: x\r\nContent-Length: 14\r\nX-A:\r\nX-B:   \r\n"
				"X-C: \t v \t\r\n\r\n"), 0);
	assert_int_equal(LAYOUT("Host: x\nX-A: b\n\n"), 0);
	assert_int_equal(LAYOUT("Host:x\r\nX-A:b\r\n\n"), 0);
	/* obs-fold anywhere (RFC 9112 sec. 5.2): the smuggling case first */
	assert_int_equal(LAYOUT("Host: x\r\nContent-Length:\r\n 14\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("Content-Length:\r\n 14\r\nHost: x\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\nTransfer-Encoding:\r\n\tchunked\r\nX: y\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\nX-A: a\r\n b\r\n c\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("X-A: a\r\n b\r\n\r\n"), 400);
	/* a NUL byte inside a value, in the middle or in the last field */
	assert_int_equal(LAYOUT("Host: x\r\nX-A: a\0b\r\nX-B: c\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\nX-A: a\0b\r\n\r\n"), 400);
	/* a NUL ending the last value: the block's end shows the extra NUL (without it, the
	 * bytes are those of the value without the NUL) */
	assert_int_equal(LAYOUT("Host: x\r\nX-A: a\0\r\n\r\n"), 400);
	/* issue 28: a line with an empty name after a field ends the block in 0.9.75; what
	 * followed it ran as the next request. Every form with a value, and ":" alone where the
	 * CRLF line ends make the tail longer than a blank line's, is refused */
	assert_int_equal(LAYOUT("Host: x\r\n: a\r\nGET /smuggled HTTP/1.1\r\n\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\n:a\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\nX-A: b\r\n:\t\r\n"), 400);
	assert_int_equal(LAYOUT("Host: x\n: a\n"), 400);
	assert_int_equal(LAYOUT("Host: x\r\n:\r\n"), 400);
	assert_int_equal(LAYOUT("Host:\r\n: a\r\n"), 400);
	/* the one form the in-place layout cannot show: ":" alone with a bare LF ending it or the
	 * line before gives the bytes of a blank line (http.c's method check covers what follows) */
	assert_int_equal(LAYOUT("Host: x\n:\n"), 0);
	assert_int_equal(LAYOUT("Host: x\n:\r\n"), 0);
	assert_int_equal(LAYOUT("Host: x\r\n:\n"), 0);
	/* every blank-line form still passes with the block's end known */
	assert_int_equal(LAYOUT("Host: x\n\n"), 0);
	assert_int_equal(LAYOUT("Host: x\n\r\n"), 0);
	assert_int_equal(LAYOUT("Host: x\r\nX-E:\r\n\r\n"), 0);
	assert_int_equal(LAYOUT("Host: x\r\nX-E:  \t\r\n\n"), 0);
}

static void test_http_token(void **state)
{
	(void)state;
	assert_true(rg_http_token("GET"));
	assert_true(rg_http_token("M-SEARCH"));
	assert_true(rg_http_token("x!#$%&'*+-.^_`|~9"));
	assert_false(rg_http_token(""));
	assert_false(rg_http_token(NULL));
	assert_false(rg_http_token("X:GET"));
	assert_false(rg_http_token("GE T"));
	assert_false(rg_http_token("GET\x80"));
}

static void test_field_value(void **state)
{
	(void)state;
	assert_true(rg_field_value_ok("", 0));
	assert_true(rg_field_value_ok("a b\tc~\x80\xff", 8));
	assert_false(rg_field_value_ok("a\rb", 3));
	assert_false(rg_field_value_ok("a\nb", 3));
	assert_false(rg_field_value_ok("a\0b", 3));
	assert_false(rg_field_value_ok("\x01", 1));
	assert_false(rg_field_value_ok("a\x7f", 2));
}

static void test_hosts(void **state)
{
	char d[256];
	const char *loop = "localhost,127.0.0.1,[::1]";
	(void)state;

	rg_allowed_hosts_default("127.0.0.1", d, sizeof(d));
	assert_string_equal(d, loop);
	rg_allowed_hosts_default("::1", d, sizeof(d));
	assert_string_equal(d, loop);
	rg_allowed_hosts_default("localhost", d, sizeof(d));
	assert_string_equal(d, loop);
	rg_allowed_hosts_default("127.0.0.2", d, sizeof(d));
	assert_string_equal(d, "localhost,127.0.0.1,[::1],127.0.0.2");
	rg_allowed_hosts_default("0.0.0.0", d, sizeof(d));
	assert_string_equal(d, "*");
	rg_allowed_hosts_default("::", d, sizeof(d));
	assert_string_equal(d, "*");
	rg_allowed_hosts_default("10.1.2.3", d, sizeof(d));
	assert_string_equal(d, "*");

	/* any port, any case, a trailing dot; IPv6 in brackets */
	assert_true(rg_host_allowed(loop, "localhost"));
	assert_true(rg_host_allowed(loop, "LocalHost:8080"));
	assert_true(rg_host_allowed(loop, "localhost.:1"));
	assert_true(rg_host_allowed(loop, "127.0.0.1:80"));
	assert_true(rg_host_allowed(loop, "[::1]:8080"));
	assert_true(rg_host_allowed(loop, "[::1]"));
	/* DNS rebinding: a name the page's origin resolves to 127.0.0.1 */
	assert_false(rg_host_allowed(loop, "evil.example"));
	assert_false(rg_host_allowed(loop, "evil.example:8080"));
	assert_false(rg_host_allowed(loop, "localhost.evil.example"));
	assert_false(rg_host_allowed(loop, "127.0.0.10"));
	assert_false(rg_host_allowed(loop, "[::2]:80"));
	assert_false(rg_host_allowed(loop, "::1")); /* not a valid Host form */
	assert_false(rg_host_allowed(loop, ""));
	assert_false(rg_host_allowed(loop, NULL));
	/* an explicit list, and "*" */
	assert_true(rg_host_allowed(" api.example , b.example", "B.example:443"));
	assert_false(rg_host_allowed("api.example", "localhost"));
	assert_true(rg_host_allowed("*", "anything:1"));
	assert_true(rg_host_allowed("*", NULL));
	assert_true(rg_host_allowed(NULL, "x"));
}

static void test_target(void **state)
{
	char a[64], msg[96];
	(void)state;

	assert_string_equal(rg_target_path("/embed", a, sizeof(a)), "/embed");
	assert_string_equal(a, "");
	assert_string_equal(rg_target_path("http://localhost:8080/embed", a, sizeof(a)), "/embed");
	assert_string_equal(a, "localhost:8080");
	assert_string_equal(rg_target_path("HTTPS://[::1]:1/v1/embeddings", a, sizeof(a)),
			    "/v1/embeddings");
	assert_string_equal(a, "[::1]:1");
	assert_string_equal(rg_target_path("http://h", a, sizeof(a)), "/");
	assert_string_equal(a, "h");
	assert_string_equal(rg_target_path("http://h?q=1", a, sizeof(a)), "/");
	assert_null(rg_target_path("http:///embed", a, sizeof(a)));
	assert_null(rg_target_path("ftp://h/embed", a, sizeof(a)));
	assert_null(rg_target_path("*", a, sizeof(a)));
	assert_null(rg_target_path("localhost:80", a, sizeof(a)));
	assert_null(rg_target_path("embed", a, sizeof(a)));

	assert_false(rg_target_bad("/embed?x=%20%41", msg, sizeof(msg)));
	assert_true(rg_target_bad("/embed%00", msg, sizeof(msg)));
	assert_non_null(strstr(msg, "%00"));
	assert_true(rg_target_bad("/embed?x=%00", msg, sizeof(msg)));
	assert_true(rg_target_bad("/a b", msg, sizeof(msg)));
	assert_true(rg_target_bad("/a\tb", msg, sizeof(msg)));
	assert_true(rg_target_bad("/a\x7f", msg, sizeof(msg)));
	assert_false(rg_target_bad("/%0", msg, sizeof(msg)));
	assert_true(rg_target_bad("/%000x", msg, sizeof(msg)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_content_type),
		cmocka_unit_test(test_bearer),
		cmocka_unit_test(test_cors),
		cmocka_unit_test(test_header_layout),
		cmocka_unit_test(test_http_token),
		cmocka_unit_test(test_field_value),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_target),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
