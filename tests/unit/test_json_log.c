/* --json-output (app/server/json_log.c): each stderr line becomes one JSON object with a UTC
 * timestamp, a level, the message (valid UTF-8 whatever was written) and the target; checked by
 * parsing the output back with json-c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "server/json_log.h"

static json_object *parse_line(const char *s, size_t n)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = json_tokener_parse_ex(tok, s, (int)n);

	assert_int_equal(json_tokener_get_error(tok), json_tokener_success);
	json_tokener_free(tok);
	assert_non_null(o);
	return o;
}

static const char *field(json_object *o, const char *k)
{
	json_object *v;

	assert_true(json_object_object_get_ex(o, k, &v));
	return json_object_get_string(v);
}

static void test_format(void **state)
{
	static const struct {
		const char *line, *level, *message;
	} cases[] = {
		{"ragged serve: listening", "INFO", "ragged serve: listening"},
		{"ragged serve: cannot load model x: RG_ERR_IO", "ERROR",
		 "ragged serve: cannot load model x: RG_ERR_IO"},
		{"warning: vocab.txt only", "WARN", "warning: vocab.txt only"},
		{"quote \" backslash \\ tab \t", "INFO", "quote \" backslash \\ tab \t"},
		{"bad \xff byte, caf\xc3\xa9", "INFO", "bad \xef\xbf\xbd byte, caf\xc3\xa9"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rg_buf b;
		json_object *o;

		rg_buf_init(&b);
		/* 2026-11-25T15:04:05.123456Z */
		rg_json_log_format(&b, cases[i].line, strlen(cases[i].line), 1795619045LL,
				   123456789L);
		assert_false(b.oom);
		assert_true(b.len > 0 && b.data[b.len - 1] == '\n');
		assert_true(rg_utf8_valid(b.data, b.len));
		o = parse_line(b.data, b.len - 1);
		assert_string_equal(field(o, "timestamp"), "2026-11-25T15:04:05.123456Z");
		assert_string_equal(field(o, "level"), cases[i].level);
		assert_string_equal(field(o, "message"), cases[i].message);
		assert_string_equal(field(o, "target"), "ragged");
		json_object_put(o);
		rg_buf_free(&b);
	}
}

/* Start, write to stderr (several lines in one write, a line in pieces, one unterminated), stop:
 * the original stderr (a file here) holds one JSON object per line, in order. */
static void test_redirect(void **state)
{
	static const char *const want[] = {"one", "two", "three in pieces", "last"};
	char path[] = "/tmp/rg_json_log_XXXXXX", buf[4096];
	int fd = mkstemp(path), saved = dup(2);
	size_t n = 0, k = 0;
	FILE *f;
	(void)state;

	assert_true(fd >= 0 && saved >= 0);
	assert_true(dup2(fd, 2) == 2);
	assert_int_equal(rg_json_log_start(), 0);
	fputs("one\ntwo\n", stderr);
	fputs("three ", stderr);
	fputs("in pieces\n", stderr);
	fputs("last", stderr);
	rg_json_log_stop();
	rg_json_log_stop(); /* accepts not started */
	dup2(saved, 2);
	close(saved);
	f = fdopen(fd, "r");
	assert_non_null(f);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	unlink(path);
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1, k++) {
		json_object *o = parse_line(p, (size_t)(nl - p));

		assert_true(k < 4);
		assert_string_equal(field(o, "message"), want[k]);
		json_object_put(o);
	}
	assert_int_equal(k, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_redirect),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
