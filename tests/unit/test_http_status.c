/* The server's one rg_status -> HTTP mapping (app/server/http_status.c): client faults are 4xx
 * with TEI's "validation" type, a full queue is 429 (503 while stopping), the server's own
 * failures are 500 "backend", and every status has an answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/http_status.h"

static void test_client_faults(void **state)
{
	(void)state;
	assert_int_equal(rg_http_error_for(RG_ERR_INVALID_INPUT, false).code, 400);
	assert_int_equal(rg_http_error_for(RG_ERR_INVALID_UTF8, false).code, 400);
	assert_int_equal(rg_http_error_for(RG_ERR_TOO_LONG, false).code, 422);
	assert_string_equal(rg_http_error_for(RG_ERR_TOO_LONG, false).type, "validation");
}

static void test_busy_and_stopping(void **state)
{
	(void)state;
	assert_int_equal(rg_http_error_for(RG_ERR_BUSY, false).code, 429);
	assert_string_equal(rg_http_error_for(RG_ERR_BUSY, false).type, "overloaded");
	assert_int_equal(rg_http_error_for(RG_ERR_BUSY, true).code, 503);
	assert_string_equal(rg_http_error_for(RG_ERR_BUSY, true).type, "unhealthy");
}

static void test_every_status_answered(void **state)
{
	(void)state;
	assert_int_equal(rg_http_error_for(RG_OK, false).code, 200);
	assert_null(rg_http_error_for(RG_OK, false).type);
	for (int s = RG_ERR_INVALID_INPUT; s <= RG_ERR_INTERNAL; s++) {
		rg_http_error e = rg_http_error_for((rg_status)s, false);

		assert_true(e.code >= 400 && e.code <= 599);
		assert_non_null(e.type);
	}
	static const rg_status server_side[] = {RG_ERR_IO, RG_ERR_FORMAT, RG_ERR_UNSUPPORTED,
						RG_ERR_OOM, RG_ERR_CUDA, RG_ERR_INTERNAL};
	for (size_t i = 0; i < sizeof(server_side) / sizeof(server_side[0]); i++) {
		assert_int_equal(rg_http_error_for(server_side[i], false).code, 500);
		assert_string_equal(rg_http_error_for(server_side[i], false).type, "backend");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_faults),
		cmocka_unit_test(test_busy_and_stopping),
		cmocka_unit_test(test_every_status_answered),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
