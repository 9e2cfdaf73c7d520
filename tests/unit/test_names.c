/* The public enum names (src/core/names.c): every value has a name, every name parses back to
 * its value, and anything else is refused with RG_ERR_INVALID_INPUT, leaving *out alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ragged.h"

static void test_dtype_round_trip(void **state)
{
	const rg_dtype all[] = {RG_DTYPE_F32, RG_DTYPE_F16, RG_DTYPE_BF16, RG_DTYPE_AUTO};
	const char *names[] = {"fp32", "fp16", "bf16", "auto"};
	(void)state;

	for (size_t i = 0; i < 4; i++) {
		rg_dtype d = (rg_dtype)-1;

		assert_string_equal(rg_dtype_name(all[i]), names[i]);
		assert_int_equal(rg_dtype_parse(names[i], &d), RG_OK);
		assert_int_equal(d, all[i]);
	}
}

static void test_device_round_trip(void **state)
{
	rg_device d = (rg_device)-1;
	(void)state;

	assert_string_equal(rg_device_name(RG_DEVICE_CPU), "cpu");
	assert_string_equal(rg_device_name(RG_DEVICE_CUDA), "cuda");
	assert_int_equal(rg_device_parse("cuda", &d), RG_OK);
	assert_int_equal(d, RG_DEVICE_CUDA);
	assert_int_equal(rg_device_parse("cpu", &d), RG_OK);
	assert_int_equal(d, RG_DEVICE_CPU);
}

static void test_pooling_names(void **state)
{
	(void)state;
	assert_string_equal(rg_pooling_name(RG_POOL_MEAN), "mean");
	assert_string_equal(rg_pooling_name(RG_POOL_CLS), "cls");
	assert_string_equal(rg_pooling_name(RG_POOL_MAX), "max");
	assert_string_equal(rg_pooling_name((rg_pooling)99), "?");
}

static void test_bad_names_refused(void **state)
{
	const char *bad[] = {"fp8", "FP32", "", "fp32 ", "f16"};
	rg_dtype d = RG_DTYPE_BF16;
	rg_device dev = RG_DEVICE_CUDA;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(rg_dtype_parse(bad[i], &d), RG_ERR_INVALID_INPUT);
		assert_int_equal(d, RG_DTYPE_BF16);
	}
	assert_int_equal(rg_dtype_parse(NULL, &d), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_device_parse("tpu", &dev), RG_ERR_INVALID_INPUT);
	assert_non_null(strstr(rg_last_error(), "tpu"));
	assert_int_equal(dev, RG_DEVICE_CUDA);
	assert_string_equal(rg_dtype_name((rg_dtype)42), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtype_round_trip),
		cmocka_unit_test(test_device_round_trip),
		cmocka_unit_test(test_pooling_names),
		cmocka_unit_test(test_bad_names_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
