/* `ragged serve` options (src/server/options.c): the table's defaults (the scheduler's taken
 * from rg_sched_params_default), both spellings of a value, flags, ranges, and the usage errors
 * (exit status 2, nothing half-applied matters since the server then exits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sched/sched.h"
#include "server/options.h"

static int parse(rg_serve_opts *o, int n, const char **args)
{
	char *argv[32];

	argv[0] = (char *)"serve";
	for (int i = 0; i < n; i++)
		argv[i + 1] = (char *)args[i];
	return rg_serve_opts_parse(n + 1, argv, o);
}

static void test_defaults(void **state)
{
	const rg_sched_params sd = rg_sched_params_default(RG_SCHED_TOKEN);
	rg_serve_opts o;
	(void)state;

	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_string_equal(o.host, "127.0.0.1");
	assert_int_equal(o.port, 8080);
	assert_int_equal(o.dtype, RG_DTYPE_AUTO);
	assert_string_equal(o.scheduler, "token");
	assert_int_equal(o.max_batch_tokens, sd.max_batch_tokens);
	assert_int_equal(o.max_batch_requests, sd.max_batch_requests);
	assert_true(o.eta == sd.eta && o.latency_budget_ms == sd.latency_budget_ms);
	assert_int_equal(o.max_queue, 1024);
	assert_int_equal(o.max_body_bytes, 2097152);
	assert_int_equal(o.rows + o.row_len + o.slot_len, 0); /* derived from the model */
	assert_false(o.lazy);
	assert_true(o.http_threads >= 4 && o.http_threads <= 32);
	assert_string_equal(o.model, "");
	assert_true(o.max_batch_ms == 100);
	assert_int_equal(o.max_client_batch_tokens, 131072);
	assert_string_equal(o.admission, "time");
	assert_int_equal(o.shutdown_timeout_s, 25);
	assert_true(o.token_delay_us == 0);
}

static void test_values_and_flags(void **state)
{
	const char *args[] = {"--port=0", "--device", "cpu", "--dtype=bf16", "--lazy",
			      "--eta", "0.25", "--max-body-bytes", "1024", "--model", "/m",
			      "--admission=count", "--max-batch-ms", "0", "--shutdown-timeout-s=0",
			      "--max-client-batch-tokens", "7"};
	rg_serve_opts o;
	(void)state;

	assert_int_equal(parse(&o, 17, args), -1);
	assert_string_equal(o.admission, "count");
	assert_true(o.max_batch_ms == 0);
	assert_int_equal(o.shutdown_timeout_s, 0);
	assert_int_equal(o.max_client_batch_tokens, 7);
	assert_int_equal(o.port, 0);
	assert_int_equal(o.device, RG_DEVICE_CPU);
	assert_true(o.device_set);
	assert_int_equal(o.dtype, RG_DTYPE_BF16);
	assert_true(o.lazy);
	assert_true(o.eta == 0.25);
	assert_int_equal(o.max_body_bytes, 1024);
	assert_string_equal(o.model, "/m");
}

static void test_usage_errors(void **state)
{
	static const char *bad[][2] = {
		{"--bogus", NULL},        {"--port", "70000"}, {"--port", "x"},
		{"--eta", "1"},           {"--lazy=1", NULL},  {"--scheduler", "magic"},
		{"--max-queue", "0"},     {"stray", NULL},     {"--max-batch-tokens", NULL},
		{"--cache-entries", "-1"}, {"--host", ""},
		{"--admission", "queue"}, {"--max-batch-ms", "-1"}, {"--shutdown-timeout-s", "-1"},
		{"--max-client-batch-tokens", "0"},
	};
	rg_serve_opts o;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int n = bad[i][1] ? 2 : 1;

		if (parse(&o, n, bad[i]) != RG_SERVE_EXIT_USAGE)
			fail_msg("'%s %s' was accepted", bad[i][0], bad[i][1] ? bad[i][1] : "");
	}
}

static void test_help_lists_every_option(void **state)
{
	char buf[16384] = {0};
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	(void)state;

	assert_non_null(f);
	rg_serve_usage(f);
	fclose(f);
	for (const char *o = "--model --port --scheduler --max-batch-requests --das-packed "
			     "--batch-delay-ms --max-batch-ms --max-client-batch-tokens --admission "
			     "--shutdown-timeout-s --token-delay-us";
	     *o;) {
		char name[64];
		int n = 0;

		sscanf(o, "%63s%n", name, &n);
		o += n;
		while (*o == ' ')
			o++;
		if (!strstr(buf, name))
			fail_msg("--help lacks %s", name);
	}
	assert_non_null(strstr(buf, "sequences per batch (256)"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_values_and_flags),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_help_lists_every_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
