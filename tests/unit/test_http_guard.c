/* The header checks of `ragged serve` (src/server/http_guard.c): request framing against RFC
 * 9112 sec. 6 (the request-smuggling cases of issue 9), the JSON media types, bearer tokens and
 * CORS origins. The server applies them in routes.c; tests/py/test_server_hardening.py checks the
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_content_type),
		cmocka_unit_test(test_bearer),
		cmocka_unit_test(test_cors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
