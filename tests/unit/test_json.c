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
		cmocka_unit_test_setup(test_read_file, case_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
