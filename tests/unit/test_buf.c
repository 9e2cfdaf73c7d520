/* The one byte buffer and its JSON writers (src/core/buf.c), and the array growth rule
 * (src/core/vec.c), against hand-written expected text:
 * escapes, float round trips, base64 (RFC 4648 test vectors), direct writes after a reserve. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/vec.h"

static void test_json_writers(void **state)
{
	rg_buf b;
	(void)state;

	rg_buf_init(&b);
	rg_buf_json_str(&b, "a\"b\\c\n\x01", 7);
	assert_string_equal(b.data, "\"a\\\"b\\\\c\\u000a\\u0001\"");
	b.len = 0;
	const float v[] = {1.f, -0.1f, NAN, 3.4028235e38f};
	rg_buf_float_array(&b, v, 4);
	assert_string_equal(b.data, "[1,-0.100000001,null,3.40282347e+38]");
	float back = strtof(b.data + 3, NULL); /* "-0.100000001" round-trips to -0.1f */
	assert_true(back == -0.1f);
	b.len = 0;
	rg_buf_printf(&b, "%s=%d", "n", 42);
	rg_buf_puts(&b, "!");
	assert_string_equal(b.data, "n=42!");
	assert_int_equal(b.len, 5);
	assert_false(b.oom);
	rg_buf_free(&b);
}

static void test_base64_vectors(void **state)
{
	static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	(void)state;

	for (size_t i = 0; i < 7; i++) {
		rg_buf b;

		rg_buf_init(&b);
		rg_buf_base64(&b, in[i], strlen(in[i]));
		assert_string_equal(b.len ? b.data : "", out[i]);
		rg_buf_free(&b);
	}
}

static void test_reserve_then_direct_writes(void **state)
{
	rg_buf b;
	(void)state;

	rg_buf_init(&b);
	rg_buf_puts(&b, "x");
	assert_true(rg_buf_reserve(&b, 100000));
	assert_true(b.cap >= b.len + 100001);
	memset(b.data + b.len, 'y', 100000);
	b.len += 100000;
	b.data[b.len] = '\0';
	rg_buf_puts(&b, "z");
	assert_int_equal(strlen(b.data), 100002);
	assert_int_equal(b.data[100001], 'z');
	rg_buf_free(&b);
}

static void test_vec_reserve(void **state)
{
	int *a = NULL;
	size_t cap = 0;
	(void)state;

	assert_true(rg_vec_reserve((void **)&a, &cap, 1, sizeof(*a), 4));
	assert_int_equal(cap, 4);
	for (int i = 0; i < 1000; i++) {
		assert_true(rg_vec_reserve((void **)&a, &cap, (size_t)i + 1, sizeof(*a), 4));
		a[i] = i;
	}
	assert_int_equal(cap, 1024); /* doubling from 4 */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(a[i], i);
	/* an impossible size fails and leaves the array as it was */
	int *keep = a;
	assert_false(rg_vec_reserve((void **)&a, &cap, SIZE_MAX / 2, sizeof(*a), 4));
	assert_ptr_equal(a, keep);
	assert_int_equal(cap, 1024);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_writers),
		cmocka_unit_test(test_base64_vectors),
		cmocka_unit_test(test_reserve_then_direct_writes),
		cmocka_unit_test(test_vec_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
