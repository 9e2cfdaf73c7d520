/* `ragged serve` options (app/server/options.c): the table's defaults (the scheduler's taken
 * from rg_sched_params_default), both spellings of a value, flags, ranges, and the usage errors
 * (exit status 2, nothing half-applied matters since the server then exits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/sched/sched.h"
#include "server/options.h"

static int parse(rg_serve_opts *o, int n, const char **args)
{
	char *argv[64];

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
	/* --max-inputs 2048 (OpenAI's limit); the queue, not given, grows to hold one request */
	assert_int_equal(o.max_inputs, 2048);
	assert_int_equal(o.max_queue, 2048);
	assert_false(o.max_queue_set);
	assert_int_equal(o.max_body_bytes, 2097152);
	assert_int_equal(o.rows + o.row_len + o.slot_len, 0); /* derived from the model */
	assert_false(o.lazy);
	assert_true(o.http_threads >= 4 && o.http_threads <= 32);
	assert_string_equal(o.model, "");
	assert_true(o.max_batch_ms == 100);
	assert_int_equal(o.graph_warmup_len, 512);
	assert_int_equal(o.max_client_batch_tokens, 131072);
	assert_string_equal(o.admission, "time");
	assert_string_equal(o.accept, "balanced");
	assert_int_equal(o.shutdown_timeout_s, 25);
	assert_true(o.token_delay_us == 0);
}

static void test_values_and_flags(void **state)
{
	const char *args[] = {"--port=0", "--device", "cpu", "--dtype=bf16", "--lazy",
			      "--eta", "0.25", "--max-body-bytes", "1024", "--model", "/m",
			      "--admission=count", "--max-batch-ms", "0", "--shutdown-timeout-s=0",
			      "--max-client-batch-tokens", "7", "--accept", "mhd",
			      "--graph-warmup-len=0"};
	rg_serve_opts o;
	(void)state;

	assert_int_equal(parse(&o, 20, args), -1);
	assert_int_equal(o.graph_warmup_len, 0);
	assert_string_equal(o.admission, "count");
	assert_string_equal(o.accept, "mhd");
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
		{"--max-client-batch-tokens", "0"}, {"--accept", "random"},
		{"--graph-warmup-len", "-1"},
	};
	rg_serve_opts o;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int n = bad[i][1] ? 2 : 1;

		if (parse(&o, n, bad[i]) != RG_SERVE_EXIT_USAGE)
			fail_msg("'%s %s' was accepted", bad[i][0], bad[i][1] ? bad[i][1] : "");
	}
}

/* The space-separated word at p into name (at most 63 bytes); the rest of the list, or NULL at
 * its end. */
static const char *next_word(const char *p, char name[64])
{
	int n = 0;

	while (*p == ' ')
		p++;
	if (!*p || sscanf(p, "%63s%n", name, &n) != 1)
		return NULL;
	return p + n;
}

static void test_help_lists_every_option(void **state)
{
	static char buf[65536];
	char name[64];
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
	(void)state;

	assert_non_null(f);
	rg_serve_usage(f);
	fclose(f);
	for (const char *o = "--model --port --scheduler --max-batch-requests --das-packed "
			     "--batch-delay-ms --api-key --cors-allow-origin "
			     "--request-read-timeout-s --max-connections-per-ip "
			     "--max-buffered-bytes --max-discard-bytes --max-batch-ms "
			     "--max-client-batch-tokens --admission --accept --shutdown-timeout-s "
			     "--token-delay-us --devices --cpu-replicas --graph-warmup-len "
			     "[RAGGED_GRAPH_WARMUP_LEN] [RAGGED_PORT] "
			     "[RAGGED_MAX_BATCH_REQUESTS] [RAGGED_API_KEY] [RAGGED_DAS_PACKED] "
			     "[RAGGED_SHUTDOWN_TIMEOUT_S] [RAGGED_DEVICES] --served-model-name "
			     "--json-output --default-prompt-name --auto-truncate --pooling "
			     "--model-id, --hostname, --max-client-batch-size, --payload-limit, "
			     "MODEL_ID HOSTNAME MAX_CLIENT_BATCH_SIZE PORT -p";
	     (o = next_word(o, name));)
		if (!strstr(buf, name))
			fail_msg("--help lacks %s", name);
	assert_non_null(strstr(buf, "sequences per batch (256)"));
	assert_non_null(strstr(buf, "ragged serve --config FILE [server options]"));
}

/* Every option is read from RAGGED_<NAME>; the command line wins; a bad value names the
 * variable. */
static void test_environment(void **state)
{
	const char *args[] = {"--port", "9000", "--max-queue=7"};
	char err[512] = {0}, name[64];
	FILE *f, *saved;
	rg_serve_opts o;
	(void)state;

	setenv("RAGGED_PORT", "1234", 1);
	setenv("RAGGED_HOST", "0.0.0.0", 1);
	setenv("RAGGED_MAX_QUEUE", "99", 1);
	setenv("RAGGED_MAX_INPUTS", "5", 1); /* <= every --max-queue below */
	setenv("RAGGED_API_KEY", "s3cret", 1);
	setenv("RAGGED_CORS_ALLOW_ORIGIN", "*", 1);
	setenv("RAGGED_LAZY", "true", 1);
	setenv("RAGGED_DAS_PACKED", "0", 1);
	setenv("RAGGED_ETA", "0.5", 1);
	setenv("RAGGED_MAX_BUFFERED_BYTES", "4194304", 1);
	setenv("RAGGED_REQUEST_READ_TIMEOUT_S", "3", 1);
	setenv("RAGGED_MAX_CONNECTIONS_PER_IP", "16", 1);
	setenv("RAGGED_DEVICE", "cpu", 1);
	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_int_equal(o.port, 1234);
	assert_string_equal(o.host, "0.0.0.0");
	assert_int_equal(o.max_queue, 99);
	assert_string_equal(o.api_key, "s3cret");
	assert_string_equal(o.cors_allow_origin, "*");
	assert_true(o.lazy);
	assert_false(o.das_packed);
	assert_true(o.eta == 0.5);
	assert_int_equal(o.max_buffered_bytes, 4194304);
	assert_int_equal(o.request_read_timeout_s, 3);
	assert_int_equal(o.max_connections_per_ip, 16);
	assert_true(o.device_set && o.device == RG_DEVICE_CPU);

	/* the command line wins, in both spellings */
	assert_int_equal(parse(&o, 3, args), -1);
	assert_int_equal(o.port, 9000);
	assert_int_equal(o.max_queue, 7);
	assert_string_equal(o.host, "0.0.0.0");

	/* a bad value, an empty one and a bad flag word: exit 2, the message names the variable */
	for (int k = 0; k < 3; k++) {
		static const char *const var[] = {"RAGGED_MAX_QUEUE", "RAGGED_API_KEY",
						  "RAGGED_LAZY"};
		static const char *const val[] = {"lots", "", "maybe"};

		setenv(var[k], val[k], 1);
		memset(err, 0, sizeof(err));
		f = fmemopen(err, sizeof(err) - 1, "w");
		assert_non_null(f);
		saved = stderr;
		stderr = f;
		assert_int_equal(parse(&o, 0, NULL), RG_SERVE_EXIT_USAGE);
		stderr = saved;
		fclose(f);
		if (!strstr(err, var[k]))
			fail_msg("the message '%s' does not name %s", err, var[k]);
		unsetenv(var[k]);
	}
	/* a bad variable is not hidden by a good command line value of another option, and
	 * --help still prints */
	setenv("RAGGED_PORT", "x", 1);
	assert_int_equal(parse(&o, 3, args), RG_SERVE_EXIT_USAGE);
	{
		const char *help[] = {"--help"};

		saved = stdout;
		stdout = fopen("/dev/null", "w");
		assert_int_equal(parse(&o, 1, help), 0);
		fclose(stdout);
		stdout = saved;
	}
	for (const char *v = "RAGGED_PORT RAGGED_HOST RAGGED_MAX_QUEUE RAGGED_API_KEY "
			     "RAGGED_CORS_ALLOW_ORIGIN RAGGED_LAZY RAGGED_DAS_PACKED RAGGED_ETA "
			     "RAGGED_MAX_BUFFERED_BYTES RAGGED_REQUEST_READ_TIMEOUT_S "
			     "RAGGED_MAX_CONNECTIONS_PER_IP RAGGED_DEVICE RAGGED_MAX_INPUTS";
	     (v = next_word(v, name));)
		unsetenv(name);
	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_int_equal(o.port, 8080);
	assert_null(o.api_key);
}

/* The hardening options' defaults, and a buffer budget below one body is refused. */
static void test_hardening_options(void **state)
{
	const char *bad[] = {"--max-body-bytes", "1000", "--max-buffered-bytes", "999"};
	const char *ok[] = {"--max-body-bytes", "1000", "--max-buffered-bytes", "1000",
			    "--api-key", "k", "--cors-allow-origin", "http://a.example,http://b"};
	rg_serve_opts o;
	(void)state;

	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_null(o.api_key);
	assert_null(o.cors_allow_origin);
	assert_int_equal(o.request_read_timeout_s, 30);
	assert_int_equal(rg_serve_per_ip_limit(&o, o.max_connections), 4096 / 4);
	assert_int_equal(o.max_buffered_bytes, 268435456);
	assert_int_equal(o.max_discard_bytes, 67108864);
	assert_int_equal(parse(&o, 4, bad), RG_SERVE_EXIT_USAGE);
	assert_int_equal(parse(&o, 8, ok), -1);
	assert_string_equal(o.api_key, "k");
	assert_string_equal(o.cors_allow_origin, "http://a.example,http://b");
	assert_null(o.allowed_hosts); /* derived from --host by the server */
	{ /* issue 18 item 14: the per-IP limit follows --max-connections unless given */
		const char *mc[] = {"--max-connections", "100"};
		const char *off[] = {"--max-connections", "100", "--max-connections-per-ip", "0",
				     "--allowed-hosts", "api.example,localhost"};

		assert_int_equal(parse(&o, 2, mc), -1);
		assert_int_equal(rg_serve_per_ip_limit(&o, o.max_connections), 25);
		/* fewer connections fit the open-files limit: a quarter of those */
		assert_int_equal(rg_serve_per_ip_limit(&o, 40), 10);
		assert_int_equal(rg_serve_per_ip_limit(&o, 3), 1);
		assert_int_equal(parse(&o, 6, off), -1);
		assert_int_equal(rg_serve_per_ip_limit(&o, o.max_connections), 0);
		assert_string_equal(o.allowed_hosts, "api.example,localhost");
	}
}

/* --max-inputs above --max-queue, both given, is refused at start with a message naming both (a
 * request of more inputs than the queue holds would get 429 forever); equal is accepted; a
 * default gives way to the other option given. */
static void test_max_inputs_above_queue(void **state)
{
	const char *bad[] = {"--max-queue", "100", "--max-inputs", "101"};
	const char *small_queue[] = {"--max-queue", "1024"}; /* --max-inputs defaults to 2048 */
	const char *ok[] = {"--max-queue", "100", "--max-inputs", "100"};
	char err[512] = {0};
	FILE *f, *saved;
	rg_serve_opts o;
	(void)state;

	f = fmemopen(err, sizeof(err) - 1, "w");
	assert_non_null(f);
	saved = stderr;
	stderr = f;
	assert_int_equal(parse(&o, 4, bad), RG_SERVE_EXIT_USAGE);
	stderr = saved;
	fclose(f);
	if (!strstr(err, "--max-inputs (101)") || !strstr(err, "--max-queue (100)"))
		fail_msg("the message '%s' does not name both options", err);
	/* the default --max-inputs gives way to a given queue */
	assert_int_equal(parse(&o, 2, small_queue), -1);
	assert_int_equal(o.max_inputs, 1024);
	assert_int_equal(o.max_queue, 1024);
	assert_int_equal(parse(&o, 4, ok), -1);
	assert_int_equal(o.max_inputs, 100);
	assert_int_equal(o.max_queue, 100);
}

/* TEI's launch line (text-embeddings-router's flags) parses into ragged's options. */
static void test_tei_flags(void **state)
{
	const char *args[] = {"--model-id", "/m", "--hostname", "0.0.0.0", "-p", "3000",
			      "--max-client-batch-size", "4096", "--auto-truncate",
			      "--pooling", "cls", "--served-model-name", "emb",
			      "--default-prompt-name", "query", "--payload-limit", "2000000",
			      "--json-output", "--dtype", "float16", "--max-batch-tokens=4096",
			      "--max-concurrent-requests", "512", "--revision", "main",
			      "--tokenization-workers", "8", "--uds-path", "/tmp/x", "--hf-token",
			      "t", "--otlp-endpoint", "http://c:4317", "--prometheus-port", "9000",
			      "--disable-spans", "--huggingface-hub-cache", "/data",
			      "--dense-path", "2_Dense_1024", "--device", "cpu"};
	const int n = sizeof(args) / sizeof(args[0]);
	static const char *const dtypes[][2] = {{"float32", "fp32"}, {"bfloat16", "bf16"}};
	rg_serve_opts o;
	(void)state;

	assert_int_equal(parse(&o, n, args), -1);
	assert_string_equal(o.model, "/m");
	assert_string_equal(o.host, "0.0.0.0");
	assert_int_equal(o.port, 3000);
	assert_int_equal(o.max_inputs, 4096);
	assert_int_equal(o.max_queue, 4096); /* not given: raised to hold one request */
	assert_true(o.auto_truncate);
	assert_true(o.pooling_set && o.pooling == RG_POOL_CLS);
	assert_string_equal(o.served_model_name, "emb");
	assert_string_equal(o.default_prompt_name, "query");
	assert_int_equal(o.max_body_bytes, 2000000);
	assert_true(o.json_output);
	assert_int_equal(o.dtype, RG_DTYPE_F16);
	assert_int_equal(o.max_batch_tokens, 4096);
	assert_int_equal(o.max_concurrent_requests, 512);
	assert_int_equal(o.tokenization_workers, 8);
	assert_int_equal(o.prometheus_port, 9000);
	assert_true(o.disable_spans);
	assert_string_equal(o.hub_cache, "/data");
	assert_string_equal(o.dense_path, "2_Dense_1024");
	for (int k = 0; k < 2; k++) {
		const char *a[] = {"--dtype", dtypes[k][0]};
		rg_dtype want;

		assert_int_equal(rg_dtype_parse(dtypes[k][1], &want), RG_OK);
		assert_int_equal(parse(&o, 2, a), -1);
		assert_int_equal(o.dtype, want);
	}
	{
		/* TEI's other pooling modes are not ragged's; TEI refuses both prompts together */
		const char *splade[] = {"--pooling", "splade"};
		const char *both[] = {"--default-prompt", "q: ", "--default-prompt-name", "q"};
		const char *given[] = {"--max-queue", "100", "--max-client-batch-size", "101"};
		const char *last[] = {"--pooling", "last-token"};

		assert_int_equal(parse(&o, 2, splade), RG_SERVE_EXIT_USAGE);
		assert_int_equal(parse(&o, 2, last), -1); /* TEI's decoder pooling (issue 31) */
		assert_true(o.pooling_set && o.pooling == RG_POOL_LAST);
		assert_int_equal(parse(&o, 4, both), RG_SERVE_EXIT_USAGE);
		assert_int_equal(parse(&o, 4, given), RG_SERVE_EXIT_USAGE); /* a given queue stays */
	}
}

/* TEI's variables are read below RAGGED_* ones, which the command line beats. */
static void test_tei_environment(void **state)
{
	static const char *const vars[][2] = {
		{"MODEL_ID", "/tei"},        {"HOSTNAME", "0.0.0.0"},      {"PORT", "3000"},
		{"MAX_CLIENT_BATCH_SIZE", "64"}, {"AUTO_TRUNCATE", "true"}, {"POOLING", "max"},
		{"SERVED_MODEL_NAME", "emb"}, {"DEFAULT_PROMPT", "q: "}, {"PAYLOAD_LIMIT", "1000000"},
		{"JSON_OUTPUT", "1"},        {"DTYPE", "float32"},        {"API_KEY", "k"},
		{"MAX_BATCH_TOKENS", "2048"},
	};
	const char *args[] = {"--port", "9000"};
	char err[512] = {0};
	FILE *f, *saved;
	rg_serve_opts o;
	(void)state;

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		setenv(vars[i][0], vars[i][1], 1);
	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_string_equal(o.model, "/tei");
	assert_string_equal(o.host, "0.0.0.0");
	assert_int_equal(o.port, 3000);
	assert_int_equal(o.max_inputs, 64);
	assert_true(o.auto_truncate);
	assert_true(o.pooling_set && o.pooling == RG_POOL_MAX);
	assert_string_equal(o.served_model_name, "emb");
	assert_string_equal(o.default_prompt, "q: ");
	assert_int_equal(o.max_body_bytes, 1000000);
	assert_true(o.json_output);
	assert_int_equal(o.dtype, RG_DTYPE_F32);
	assert_string_equal(o.api_key, "k");
	assert_int_equal(o.max_batch_tokens, 2048);
	/* RAGGED_* beats TEI's name; the command line beats both */
	setenv("RAGGED_PORT", "4000", 1);
	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_int_equal(o.port, 4000);
	assert_int_equal(parse(&o, 2, args), -1);
	assert_int_equal(o.port, 9000);
	unsetenv("RAGGED_PORT");
	/* a bad value names TEI's variable */
	setenv("PORT", "x", 1);
	f = fmemopen(err, sizeof(err) - 1, "w");
	assert_non_null(f);
	saved = stderr;
	stderr = f;
	assert_int_equal(parse(&o, 0, NULL), RG_SERVE_EXIT_USAGE);
	stderr = saved;
	fclose(f);
	if (!strstr(err, "PORT"))
		fail_msg("the message '%s' does not name PORT", err);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i][0]);
	assert_int_equal(parse(&o, 0, NULL), -1);
	assert_int_equal(o.port, 8080);
	assert_false(o.auto_truncate);
}

/* --model repeated (issue 31 item 4): each later model's options are the arguments after its
 * --model, per-model options only; it inherits the first model's other options, not its names;
 * vLLM's --served-model-name A B form joins the names. */
static void test_several_models(void **state)
{
	const char *args[] = {"--model", "/m/a", "--served-model-name", "a", "a2", "--port", "9",
			      "--max-batch-tokens", "1024", "--max-inputs", "8",
			      "--model-id=/m/b", "--max-batch-tokens", "256",
			      "--model", "/m/c", "--served-model-name", "c,c2", "--kv-cache-bytes",
			      "4096", "--auto-truncate"};
	const char *server_opt[] = {"--model", "/m/a", "--model", "/m/b", "--port", "1"};
	char *argv[64];
	rg_serve_opts o, m;
	(void)state;

	assert_int_equal(parse(&o, 21, args), -1);
	assert_int_equal(o.n_models, 3);
	assert_string_equal(o.model, "/m/a");
	assert_string_equal(o.served_model_name, "a,a2");
	assert_int_equal(o.port, 9);
	assert_int_equal(o.max_batch_tokens, 1024);
	assert_false(o.auto_truncate);
	argv[0] = (char *)"serve";
	for (int i = 0; i < 21; i++)
		argv[i + 1] = (char *)args[i];
	assert_int_equal(rg_serve_opts_parse_model(22, argv, &o, 1, &m), -1);
	assert_string_equal(m.model, "/m/b");
	assert_null(m.served_model_name); /* names are not inherited */
	assert_int_equal(m.max_batch_tokens, 256);
	assert_int_equal(m.max_inputs, 8); /* inherited */
	assert_int_equal(m.port, 9);
	assert_int_equal(rg_serve_opts_parse_model(22, argv, &o, 2, &m), -1);
	assert_string_equal(m.model, "/m/c");
	assert_string_equal(m.served_model_name, "c,c2");
	assert_int_equal(m.kv_cache_bytes, 4096);
	assert_int_equal(m.max_batch_tokens, 1024);
	assert_true(m.auto_truncate);
	/* a server option after a second --model is refused */
	assert_int_equal(parse(&o, 6, server_opt), -1);
	for (int i = 0; i < 6; i++)
		argv[i + 1] = (char *)server_opt[i];
	{
		FILE *saved = stderr;

		stderr = fopen("/dev/null", "w");
		assert_int_equal(rg_serve_opts_parse_model(7, argv, &o, 1, &m), RG_SERVE_EXIT_USAGE);
		fclose(stderr);
		stderr = saved;
	}
}

/* --config FILE (options.h): the file becomes the command line it stands for, server options
 * first, then the command line's beside --config (which win), then each model's from its
 * --model; without --config, or with --help, argv is passed through. */
static void test_config_file(void **state)
{
	static const char *const want[] = {
		"serve", "--port=9", "--cors-allow-origin=a.example,b.example", "--json-output",
		"--port", "7", "--model=/m/a", "--served-model-name=a,a2", "--max-inputs=8",
		"--eta=0.25", "--model=/m/b", "--devices=0,1", "--max-batch-tokens=256"};
	const char *text =
		"{\"port\": 9, \"cors-allow-origin\": [\"a.example\", \"b.example\"],\n"
		" \"json-output\": true, \"disable-spans\": false,\n"
		" \"models\": [{\"served-model-name\": [\"a\", \"a2\"], \"model\": \"/m/a\",\n"
		"              \"max-inputs\": \"8\", \"eta\": 0.25, \"lazy\": false,\n"
		"              \"auto-truncate\": false},\n"
		"             {\"model-id\": \"/m/b\", \"devices\": [0, 1],\n"
		"              \"max-batch-tokens\": 256}]}\n";
	char path[] = "/tmp/test_serve_options_XXXXXX", *argv[8];
	rg_serve_argv a;
	rg_serve_opts o, m;
	FILE *f;
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	argv[0] = (char *)"serve";
	argv[1] = (char *)"--config";
	argv[2] = path;
	argv[3] = (char *)"--port";
	argv[4] = (char *)"7";
	argv[5] = NULL;
	assert_int_equal(rg_serve_config_expand(5, argv, &a), -1);
	assert_int_equal(a.argc, (int)(sizeof(want) / sizeof(want[0])));
	for (int i = 0; i < a.argc; i++)
		assert_string_equal(a.argv[i], want[i]);
	assert_null(a.argv[a.argc]);
	assert_int_equal(rg_serve_opts_parse(a.argc, a.argv, &o), -1);
	assert_int_equal(o.n_models, 2);
	assert_int_equal(o.port, 7); /* the command line's */
	assert_string_equal(o.model, "/m/a");
	assert_string_equal(o.served_model_name, "a,a2");
	assert_int_equal(o.max_inputs, 8);
	assert_true(o.eta == 0.25);
	assert_true(o.json_output && !o.lazy && !o.auto_truncate);
	assert_int_equal(rg_serve_opts_parse_model(a.argc, a.argv, &o, 1, &m), -1);
	assert_string_equal(m.model, "/m/b");
	assert_int_equal(m.n_devices, 2);
	assert_int_equal(m.max_batch_tokens, 256);
	assert_int_equal(m.max_inputs, 8); /* inherited, as on the command line */
	rg_serve_argv_free(&a);
	assert_int_equal(a.argc, 0);
	/* no --config, or --help: argv itself */
	argv[1] = (char *)"--port";
	assert_int_equal(rg_serve_config_expand(3, argv, &a), -1);
	assert_true(a.argv == argv && a.argc == 3 && a.cap == 0);
	argv[1] = (char *)"--config";
	argv[3] = (char *)"--help";
	assert_int_equal(rg_serve_config_expand(4, argv, &a), -1);
	assert_true(a.argv == argv && a.argc == 4);
	/* a usage error leaves argv as it was */
	argv[3] = (char *)"--model";
	argv[4] = (char *)"/m/c";
	{
		FILE *saved = stderr;

		stderr = fopen("/dev/null", "w");
		assert_int_equal(rg_serve_config_expand(5, argv, &a), RG_SERVE_EXIT_USAGE);
		fclose(stderr);
		stderr = saved;
	}
	assert_true(a.argv == argv && a.argc == 5 && a.cap == 0);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_values_and_flags),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_help_lists_every_option),
		cmocka_unit_test(test_environment),
		cmocka_unit_test(test_hardening_options),
		cmocka_unit_test(test_max_inputs_above_queue),
		cmocka_unit_test(test_tei_flags),
		cmocka_unit_test(test_tei_environment),
		cmocka_unit_test(test_several_models),
		cmocka_unit_test(test_config_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
