/* The one JSON loader (src/core/json.c): exactly one value, whitespace after it only, no NUL
 * byte, UTF-8 checked when asked, file size bounded; every refusal is RG_ERR_FORMAT (RG_ERR_IO
 * for a missing file) with a message that names the file and the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/json.h"
#define RG_TMP_PREFIX "rg_json_test"
#include "test_tmpdir.h"

static void expect_fail(const char *text, size_t len, int flags, const char *what,
			const char *needle)
{
	json_object *o = (json_object *)1;

	assert_int_equal(rg_json_parse(text, len, flags, "f.json", what, &o), RG_ERR_FORMAT);
	assert_null(o);
	if (!strstr(rg_last_error(), needle) || !strstr(rg_last_error(), "f.json"))
		fail_msg("message '%s' lacks '%s'", rg_last_error(), needle);
}

static void test_parse_rules(void **state)
{
	json_object *o = NULL;
	(void)state;

	assert_int_equal(rg_json_parse("{\"a\": [1, 2]} \n\t", 16, 0, "f.json", NULL, &o), RG_OK);
	assert_non_null(o);
	assert_int_equal(json_object_array_length(json_object_object_get(o, "a")), 2);
	json_object_put(o);
	expect_fail("{\"a\": 1} x", 10, 0, NULL, "trailing data at byte 9");
	expect_fail("{\"a\": 1}{}", 10, 0, NULL, "trailing data");
	expect_fail("{\"a\": ", 6, 0, "header", "header is not valid JSON: unexpected end");
	expect_fail("{\"a\"\0: 1}", 9, 0, NULL, "NUL byte");
	expect_fail("{\"a\": tru}", 10, 0, NULL, "not valid JSON");
	expect_fail("[\"\xff\"]", 5, JSON_TOKENER_VALIDATE_UTF8, NULL, "not valid JSON");
	/* without the UTF-8 flag json-c takes the bytes as they are */
	assert_int_equal(rg_json_parse("[\"\xff\"]", 5, 0, "f.json", NULL, &o), RG_OK);
	json_object_put(o);
}

/* rg_json_text_check on text (NUL-terminated) -> its status; msg and key checked against want
 * (NULL: RG_OK expected) and want_key. */
static void text_check(const char *text, const char *want, const char *want_key)
{
	json_object *o = NULL;
	char msg[200], key[64];
	rg_status st;

	assert_int_equal(rg_json_parse(text, strlen(text), 0, "t", NULL, &o), RG_OK);
	st = rg_json_text_check(text, strlen(text), o, msg, sizeof(msg), key, sizeof(key));
	json_object_put(o);
	if (!want) {
		if (st != RG_OK)
			fail_msg("'%s' refused: %s", text, msg);
		return;
	}
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
	if (!strstr(msg, want))
		fail_msg("'%s': message '%s' lacks '%s'", text, msg, want);
	assert_string_equal(key, want_key ? want_key : "");
}

static void test_text_check(void **state)
{
	(void)state;
	/* valid bodies pass: same key in different objects, keys that look alike, strings that
	 * look like keys or hold quotes, braces and escapes, nesting, every integer bound */
	text_check("{\"a\":1,\"b\":{\"a\":2},\"c\":[{\"a\":3},{\"a\":4}]}", NULL, NULL);
	text_check("{\"a\":\"\\\"a\\\":{\",\"A\":\"}\",\"a \":[\"a\",\"a\"],\"\\\\\":1}", NULL, NULL);
	text_check("[{\"k\":[]},{\"k\":{}},\"k\",{\"k\":[{\"k\":{\"k\":null}}]}]", NULL, NULL);
	text_check("{\"s\":18446744073709551615,\"t\":-9223372036854775808,\"u\":0,\"v\":-0}",
		   NULL, NULL);
	text_check("{\"d\":1e400,\"e\":123456789012345678901234.5,\"f\":-1E30}", NULL, NULL);
	text_check("\"just a string\"", NULL, NULL);
	/* repeated keys: the first repeat named, at any depth, escapes decoded */
	text_check("{\"a\":1,\"a\":2}", "duplicate key 'a'", "a");
	text_check("{\"x\":{\"y\":1},\"x\":{\"y\":1,\"z\":2}}", "duplicate key 'x'", "x");
	text_check("{\"p\":{\"seed\":1,\"seed\":1}}", "duplicate key 'seed'", "seed");
	text_check("[1,{\"b\":[{\"c\":1,\"d\":2,\"c\":3}]}]", "duplicate key 'c'", "c");
	text_check("{\"k\\u0065y\":1,\"key\":2}", "duplicate key 'key'", "key");
	text_check("{\"\":1,\"\":2}", "duplicate key ''", "");
	/* json-c takes single-quoted names, even strict (a fuzzer's find) */
	text_check("{'a\"':1,\"b\":{\"c\":[1]},\"a\\\"\":2}", "duplicate key 'a\"'", "a\"");
	text_check("{'x':{'y':1},\"z\":'}'}", NULL, NULL);
	/* integers json-c would saturate to the bound */
	text_check("{\"seed\":18446744073709551616}",
		   "\"seed\": integer 18446744073709551616 at byte 8", "seed");
	text_check("{\"a\":{\"b\":1},\"seed\":-9223372036854775809}", "outside [-2^63, 2^64)",
		   "seed");
	text_check("{\"p\":{\"ids\":[1,2,99999999999999999999999999999999999]}}",
		   "\"ids\": integer 999999999999999999999999...", "ids");
	text_check("[1,2,99999999999999999999999999999999999]", "integer 999999999999999999999999...",
		   NULL);
}

static void test_read_file(void **state)
{
	char path[300];
	json_object *o = NULL;
	FILE *f;
	(void)state;

	snprintf(path, sizeof(path), "%s/c.json", g_dir);
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"hidden_size\": 384}\n", f);
	fclose(f);
	assert_int_equal(rg_json_read_file(path, 1 << 20, &o), RG_OK);
	assert_int_equal(json_object_get_int(json_object_object_get(o, "hidden_size")), 384);
	json_object_put(o);
	assert_int_equal(rg_json_read_file(path, 8, &o), RG_ERR_FORMAT); /* over the limit */
	assert_null(o);
	snprintf(path, sizeof(path), "%s/missing.json", g_dir);
	assert_int_equal(rg_json_read_file(path, 1 << 20, &o), RG_ERR_IO);
	assert_non_null(strstr(rg_last_error(), "missing.json"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_rules),
		cmocka_unit_test(test_text_check),
		cmocka_unit_test_setup(test_read_file, case_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
