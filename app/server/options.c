/* The `ragged serve` option table; see options.h. */
#include "server/options.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/file.h"
#include "core/json.h"
#include "server/sched/sched.h"

typedef enum {
	OPT_INT,    /* int in [lo, hi] */
	OPT_SIZE,   /* size_t in [lo, hi] */
	OPT_DOUBLE, /* double in [lo, hi] */
	OPT_STR,    /* const char *, non-empty, points into argv */
	OPT_PATH,   /* char[4096] copy, non-empty */
	OPT_FLAG,   /* bool set to true; takes no value */
	OPT_DEVICE, /* rg_device (rg_device_parse); sets device_set */
	OPT_DEVLIST, /* devices/n_devices: distinct CUDA ordinals, comma-separated */
	OPT_DTYPE,  /* rg_dtype (rg_dtype_parse) */
	OPT_WEIGHTS, /* rg_weights: quantized (AUTO) | dequantize */
	OPT_QUANTIZE, /* rg_quantize: none | q8_0 */
	OPT_SCHED,  /* const char * naming an rg_sched_kind */
	OPT_POOL,   /* rg_pooling (mean|cls|max); sets pooling_set */
} opt_kind;

typedef struct {
	const char *name, *metavar;
	opt_kind kind;
	size_t off;
	double lo, hi;
	const char *dflt; /* parsed into the field by rg_serve_opts_default; NULL: set in code */
	const char *help;
} opt_spec;

#define F(field) offsetof(rg_serve_opts, field)

static const opt_spec g_opts[] = {
	{"--model", "DIR|ORG/NAME", OPT_PATH, F(model), 0, 0, NULL,
	 "model directory or Hugging Face id in the local HF cache (default: all-MiniLM-L6-v2 "
	 "from $RAGGED_MODEL_DIR, else the pip package); repeat it to serve several models "
	 "(below)"},
	{"--host", "ADDR", OPT_STR, F(host), 0, 0, "127.0.0.1", "listen address"},
	{"--port", "N", OPT_INT, F(port), 0, 65535, "8080", "listen port, 0 = any free port"},
	{"--device", "cpu|cuda", OPT_DEVICE, F(device), 0, 0, NULL,
	 "(default cuda when a GPU is present, else cpu)"},
	{"--devices", "LIST|all", OPT_DEVLIST, F(devices), 0, 0, NULL,
	 "CUDA devices to serve on, e.g. 0,1, or all visible ones: one model and engine worker "
	 "on each, one queue (implies --device cuda; default: device 0 alone)"},
	{"--dtype", "fp32|fp16|bf16|auto", OPT_DTYPE, F(dtype), 0, 0, "auto",
	 "compute dtype; auto: fp32 on cpu, fp16 on cuda (bf16 for a bf16 checkpoint)"},
	{"--weights", "quantized|dequantize", OPT_WEIGHTS, F(weights), 0, 0, "quantized",
	 "GGUF weights: quantized keeps the GEMM weights the backend reads in the file's blocks "
	 "(cpu: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16); dequantize: every tensor in the "
	 "compute dtype at load"},
	{"--quantize", "none|q8_0", OPT_QUANTIZE, F(quantize), 0, 0, "none",
	 "quantize a checkpoint's float GEMM weights (q/k/v/o, gate/up/down, LM head) at load: "
	 "q8_0 stores them in Q8_0 blocks of 32 (about 3.8x fewer weight bytes) and runs them as "
	 "a Q8_0 GGUF's; decoder-only models; weights the file stores quantized are kept (fp8 is "
	 "not implemented)"},
	{"--scheduler", "NAME", OPT_SCHED, F(scheduler), 0, 0, "token",
	 "nobatch|naive|token|dp|concat|slotted|das|slotted-das|fcfs|sjf|edf"},
	{"--max-batch-tokens", "N", OPT_INT, F(max_batch_tokens), 1, 1 << 24, NULL,
	 "computed tokens per batch, padding included"},
	{"--max-batch-requests", "N", OPT_INT, F(max_batch_requests), 1, 1 << 16, NULL,
	 "sequences per batch"},
	{"--max-queue", "N", OPT_INT, F(max_queue), 1, 1 << 24, "1024",
	 "sequences waiting at most, raised to --max-inputs unless given; more -> 429"},
	{"--max-inputs", "N", OPT_INT, F(max_inputs), 1, 1 << 20, "2048",
	 "inputs per request (OpenAI's limit); more -> 413"},
	{"--max-client-batch-tokens", "N", OPT_INT, F(max_client_batch_tokens), 1, 1 << 30,
	 "131072", "tokens per request, all inputs together; more -> 413"},
	{"--max-batch-ms", "X", OPT_DOUBLE, F(max_batch_ms), 0, 1e7, "100",
	 "time budget of a batch (estimate; >= 10x its fixed cost), 0 = none"},
	{"--graph-warmup-len", "N", OPT_INT, F(graph_warmup_len), 0, 1 << 20, "512",
	 "CUDA: before reporting ready, capture the graph of every batch bucket whose longest "
	 "input has at most N tokens (capped at the model's), so that none is captured while "
	 "serving; 0 = none"},
	{"--admission", "time|count", OPT_STR, F(admission), 0, 0, "time",
	 "time: 429 what cannot meet its deadline; count: --max-queue only, long "
	 "requests one after another"},
	{"--max-body-bytes", "N", OPT_SIZE, F(max_body_bytes), 1, 1 << 30, "2097152",
	 "request body limit; more -> 413"},
	{"--request-timeout-ms", "N", OPT_INT, F(request_timeout_ms), 1, 1 << 30, "30000",
	 "deadline of a queued request; passed -> 504"},
	{"--shutdown-timeout-s", "N", OPT_INT, F(shutdown_timeout_s), 0, 3600, "25",
	 "SIGTERM: stop accepting, serve what fits in N s, 503 the rest"},
	{"--cache-entries", "N", OPT_INT, F(cache_entries), 0, 1 << 26, "10000",
	 "in-memory response cache entries, 0 disables"},
	{"--cache-db", "FILE", OPT_STR, F(cache_db), 0, 0, NULL,
	 "back the cache with SQLite (WAL) in FILE (default off)"},
	{"--cost-table", "FILE", OPT_STR, F(cost_table), 0, 0, NULL,
	 "SQLite file of the DP scheduler's cost table (measured at start-up when missing)"},
	{"--rows", "N", OPT_INT, F(rows), 1, 1 << 16, NULL,
	 "B: rows of the concat/slotted/das schedulers (default max-batch-tokens / row-len)"},
	{"--row-len", "N", OPT_INT, F(row_len), 1, 1 << 20, NULL,
	 "L: tokens per row (default min(512, max positions))"},
	{"--slot-len", "N", OPT_INT, F(slot_len), 1, 1 << 20, NULL,
	 "slot length of the slotted scheduler (default 128)"},
	{"--eta", "X", OPT_DOUBLE, F(eta), 1e-9, 1 - 1e-9, NULL, "DAS eta in (0,1), q = 1 - eta"},
	{"--lazy", NULL, OPT_FLAG, F(lazy), 0, 0, NULL, "DP: lazy instead of hungry batching"},
	{"--latency-budget-ms", "X", OPT_DOUBLE, F(latency_budget_ms), 1e-3, 1e9, NULL,
	 "DP lazy: latency budget"},
	{"--das-packed", NULL, OPT_FLAG, F(das_packed), 0, 0, NULL,
	 "DAS: one packed row of max-batch-tokens"},
	{"--http-threads", "N", OPT_INT, F(http_threads), 1, 256, NULL,
	 "HTTP thread pool size (default usable CPUs - 2, in [4, 32])"},
	{"--accept", "balanced|mhd", OPT_STR, F(accept), 0, 0, "balanced",
	 "balanced: one thread accepts and deals connections to the HTTP threads in turn; mhd: "
	 "the HTTP threads race to accept (a burst of connections lands on a few of them)"},
	{"--connection-timeout-s", "N", OPT_INT, F(connection_timeout_s), 1, 86400, "10",
	 "idle / slow-client connection timeout"},
	{"--max-connections", "N", OPT_INT, F(max_connections), 1, 1 << 20, "4096",
	 "concurrent connections"},
	{"--connection-memory", "N", OPT_SIZE, F(connection_memory), 4096, 1 << 26, "65536",
	 "per-connection header memory, bytes"},
	{"--batch-delay-ms", "X", OPT_DOUBLE, F(batch_delay_ms), 0, 60000, "0",
	 "testing: sleep before each batch"},
	{"--api-key", "KEY", OPT_STR, F(api_key), 0, 0, NULL,
	 "require Authorization: Bearer KEY on every route but /health (prefer the variable: "
	 "the command line is visible to ps)"},
	{"--cors-allow-origin", "LIST", OPT_STR, F(cors_allow_origin), 0, 0, NULL,
	 "origins (comma-separated, or *) allowed cross-origin requests (default none)"},
	{"--request-read-timeout-s", "N", OPT_INT, F(request_read_timeout_s), 1, 86400, "30",
	 "deadline for receiving a request's headers and body; passed -> connection closed"},
	{"--max-connections-per-ip", "N", OPT_INT, F(max_connections_per_ip), 0, 1 << 20, NULL,
	 "concurrent connections per client address, 0 = no limit (default a quarter of "
	 "--max-connections, so one address cannot take every slot; behind a proxy all clients "
	 "share its address)"},
	{"--allowed-hosts", "LIST", OPT_STR, F(allowed_hosts), 0, 0, NULL,
	 "Host names served (comma-separated, any port; * = any), others get 400 (default: "
	 "localhost,127.0.0.1,[::1] when --host is loopback, else any)"},
	{"--max-buffered-bytes", "N", OPT_SIZE, F(max_buffered_bytes), 1, 1LL << 40, "268435456",
	 "request body bytes held by all connections together; more -> 503"},
	{"--max-discard-bytes", "N", OPT_SIZE, F(max_discard_bytes), 0, 1LL << 40, "67108864",
	 "a refused body up to N bytes is read and dropped so the client gets the answer"},
	{"--token-delay-us", "X", OPT_DOUBLE, F(token_delay_us), 0, 1e6, "0",
	 "testing: and this per computed token (a slow device)"},
	{"--cpu-replicas", "N", OPT_INT, F(cpu_replicas), 1, RG_SERVE_MAX_DEVICES, "1",
	 "testing: N CPU models behind the one queue, as --devices runs GPUs"},
	/* TEI's options (text-embeddings-router's main.rs) that ragged had no spelling for */
	{"--served-model-name", "NAME", OPT_STR, F(served_model_name), 0, 0, NULL,
	 "the model's name in /info, /v1/models and OpenAI answers (default: the model id); "
	 "NAME,ALIAS,... or NAME ALIAS ...: requests may name any of them"},
	{"--pooling", "mean|cls|max|last-token", OPT_POOL, F(pooling), 0, 0, NULL,
	 "pooling of an embedding model, instead of 1_Pooling/config.json's (last-token: decoders "
	 "only; it makes any decoder an embedding model)"},
	{"--auto-truncate", NULL, OPT_FLAG, F(auto_truncate), 0, 0, NULL,
	 "truncate over-long inputs unless a request sets \"truncate\": false"},
	{"--default-prompt-name", "NAME", OPT_STR, F(default_prompt_name), 0, 0, NULL,
	 "prompt (of config_sentence_transformers.json) for requests that name none"},
	{"--default-prompt", "TEXT", OPT_STR, F(default_prompt), 0, 0, NULL,
	 "prompt text prepended to the inputs of requests that name no prompt"},
	{"--json-output", NULL, OPT_FLAG, F(json_output), 0, 0, NULL,
	 "log lines on stderr as JSON objects {timestamp, level, message, target}"},
	{"--huggingface-hub-cache", "DIR", OPT_STR, F(hub_cache), 0, 0, NULL,
	 "the Hugging Face hub cache that model ids are looked up in (HF_HUB_CACHE)"},
	{"--device-id", "N", OPT_INT, F(device_id), 0, 255, "0",
	 "CUDA ordinal to serve on when --devices is not given"},
	{"--dense-path", "DIR", OPT_STR, F(dense_path), 0, 0, NULL,
	 "the model's sentence-transformers Dense module directory, e.g. 2_Dense_1024 "
	 "(default: modules.json's)"},
	{"--revision", "REV", OPT_STR, F(revision), 0, 0, NULL,
	 "TEI: /info model_sha (ragged downloads nothing; the cache's snapshot is served)"},
	{"--tokenization-workers", "N", OPT_INT, F(tokenization_workers), 1, 1 << 16, NULL,
	 "TEI: accepted, not used (the HTTP threads tokenize)"},
	{"--max-concurrent-requests", "N", OPT_INT, F(max_concurrent_requests), 1, 1 << 24, NULL,
	 "requests queued or running at most (TEI's); more -> 429 (default: --max-queue alone)"},
	{"--hf-token", "TOKEN", OPT_STR, F(hf_token), 0, 0, NULL,
	 "TEI: accepted, not used (ragged downloads nothing)"},
	{"--hf-api-token", "TOKEN", OPT_STR, F(hf_api_token), 0, 0, NULL,
	 "TEI: accepted, not used (ragged downloads nothing)"},
	{"--uds-path", "PATH", OPT_STR, F(uds_path), 0, 0, NULL,
	 "TEI: accepted, not used (no backend process)"},
	{"--otlp-endpoint", "URL", OPT_STR, F(otlp_endpoint), 0, 0, NULL,
	 "TEI: accepted, not used (no OpenTelemetry export)"},
	{"--otlp-service-name", "NAME", OPT_STR, F(otlp_service_name), 0, 0, NULL,
	 "TEI: accepted, not used"},
	{"--prometheus-port", "N", OPT_INT, F(prometheus_port), 0, 65535, NULL,
	 "TEI: accepted, not used (metrics are on /metrics of --port)"},
	{"--disable-spans", NULL, OPT_FLAG, F(disable_spans), 0, 0, NULL,
	 "TEI: accepted, not used"},
	/* decoder models: the generation engine (vLLM's and TGI's names) */
	{"--max-num-seqs", "N", OPT_INT, F(max_num_seqs), 1, 64, "64",
	 "decoders: sequences in one step (continuous batching)"},
	{"--max-num-batched-tokens", "N", OPT_INT, F(max_num_batched_tokens), 1, 1 << 20, NULL,
	 "decoders: new tokens in one step; a longer prompt is prefilled in chunks (default "
	 "512)"},
	{"--max-grammar-states", "N", OPT_INT, F(max_grammar_states), 16, 1 << 22, "50000",
	 "decoders: DFA states of one structured-output grammar (regex, JSON Schema) at most; "
	 "more -> 400"},
	{"--max-prompt-logprob-rows", "N", OPT_INT, F(max_prompt_logprob_rows), 0, 1 << 16, "128",
	 "decoders: prompt positions scored in one step for echo + logprobs / prompt_logprobs "
	 "(vocabulary-sized host rows each; a longer prompt is scored over several steps; 0: "
	 "such requests -> 400)"},
	{"--max-model-len", "N", OPT_INT, F(max_model_len), 2, 1 << 22, NULL,
	 "decoders: prompt and completion tokens at most (default the model's positions)"},
	{"--max-total-tokens", "N", OPT_INT, F(max_model_len), 2, 1 << 22, NULL,
	 "TGI's name of --max-model-len"},
	{"--kv-cache-fraction", "X", OPT_DOUBLE, F(kv_cache_fraction), 1e-6, 1, NULL,
	 "decoders: KV cache size as a fraction of the memory free after the weights (vLLM's "
	 "--gpu-memory-utilization, of what is left; default 0.9 on cuda; on cpu the default is "
	 "1 GiB, as vLLM's CPU backend sizes it in bytes)"},
	{"--gpu-memory-utilization", "X", OPT_DOUBLE, F(kv_cache_fraction), 1e-6, 1, NULL,
	 "vLLM's name of --kv-cache-fraction"},
	{"--kv-cache-bytes", "N", OPT_SIZE, F(kv_cache_bytes), 1, 1LL << 42, NULL,
	 "decoders: KV cache size in bytes (instead of the fraction)"},
	{"--block-size", "N", OPT_INT, F(block_size), 1, 256, "16",
	 "decoders: positions per KV cache block"},
	{"--trace-steps", "FILE", OPT_STR, F(trace_steps), 0, 0, NULL,
	 "diagnostics: write one line per generation step to FILE (its phases' times in ms)"},
	{"--no-prefix-caching", NULL, OPT_FLAG, F(no_prefix_caching), 0, 0, NULL,
	 "decoders: do not share the KV blocks of common prompt prefixes"},
	{"--chat-content-as-text", NULL, OPT_FLAG, F(chat_content_as_text), 0, 0, NULL,
	 "decoders: tokenize chat message content as plain text, so a user's \"<|im_start|>\" is "
	 "text, not a turn (default off: special tokens in content are matched, as vLLM, TGI and "
	 "transformers do)"},
	{"--step-delay-ms", "X", OPT_DOUBLE, F(step_delay_ms), 0, 60000, "0",
	 "testing: sleep before each generation step (a slow device)"},
	{"--default-ttft-ms", "X", OPT_DOUBLE, F(default_ttft_ms), 0, 1e7, "0",
	 "decoders: time-to-first-token target of a request that sets no deadline_ms; one that "
	 "cannot meet it is refused at once with 429 and Retry-After (0: off)"},
	{"--default-tpot-ms", "X", OPT_DOUBLE, F(default_tpot_ms), 0, 1e7, "0",
	 "decoders: time-per-output-token target of a request that sets none (0: off)"},
	/* speculative decoding (vLLM's speculative_config names: method ngram,
	 * num_speculative_tokens, prompt_lookup_max / _min) */
	{"--speculative", "ngram|draft|off", OPT_STR, F(speculative), 0, 0, "off",
	 "decoders: speculative decoding (requests without penalties, bias or beams) with "
	 "prompt-lookup (ngram) drafts, "
	 "verified in one step: the same tokens, fewer steps; /metrics counts drafted and "
	 "accepted tokens"},
	{"--num-speculative-tokens", "K", OPT_INT, F(num_speculative_tokens), 1,
	 RG_GEN_MAX_SPEC_TOKENS, "4", "decoders, --speculative ngram: draft tokens per step"},
	{"--prompt-lookup-max", "N", OPT_INT, F(prompt_lookup_max), 1, RG_GEN_MAX_PROMPT_LOOKUP,
	 "3", "decoders, --speculative ngram: the longest n-gram matched"},
	{"--prompt-lookup-min", "N", OPT_INT, F(prompt_lookup_min), 1, RG_GEN_MAX_PROMPT_LOOKUP,
	 "1", "decoders, --speculative ngram: the shortest n-gram matched"},
	/* vLLM's speculative_config "model"; llama-server's --model-draft */
	{"--draft-model", "DIR|FILE.gguf|ORG/NAME", OPT_STR, F(draft_model), 0, 0, NULL,
	 "decoders: speculative decoding with drafts from this smaller model of the same "
	 "vocabulary (loaded as --model is), --num-speculative-tokens per step; in place of "
	 "--speculative ngram"},
};
#undef F

#define N_OPTS (sizeof(g_opts) / sizeof(g_opts[0]))

/* TEI's spellings of the table's options (text-embeddings-router's main.rs: its option -> the
 * row's name); TEI's variable is named after its option ("--model-id" -> MODEL_ID). The rows
 * added for TEI above carry TEI's own names. TEI's one short option, -p, is --port. */
static const struct {
	const char *tei, *name;
} g_tei[] = {
	{"--model-id", "--model"},
	{"--hostname", "--host"},
	{"--port", "--port"},
	{"--dtype", "--dtype"},
	{"--max-batch-tokens", "--max-batch-tokens"},
	{"--max-batch-requests", "--max-batch-requests"},
	{"--max-client-batch-size", "--max-inputs"},
	{"--payload-limit", "--max-body-bytes"},
	{"--api-key", "--api-key"},
	{"--cors-allow-origin", "--cors-allow-origin"},
	{"--served-model-name", "--served-model-name"},
	{"--pooling", "--pooling"},
	{"--auto-truncate", "--auto-truncate"},
	{"--default-prompt-name", "--default-prompt-name"},
	{"--default-prompt", "--default-prompt"},
	{"--json-output", "--json-output"},
	{"--huggingface-hub-cache", "--huggingface-hub-cache"},
	{"--device-id", "--device-id"},
	{"--dense-path", "--dense-path"},
	{"--revision", "--revision"},
	{"--tokenization-workers", "--tokenization-workers"},
	{"--max-concurrent-requests", "--max-concurrent-requests"},
	{"--hf-token", "--hf-token"},
	{"--hf-api-token", "--hf-api-token"},
	{"--uds-path", "--uds-path"},
	{"--otlp-endpoint", "--otlp-endpoint"},
	{"--otlp-service-name", "--otlp-service-name"},
	{"--prometheus-port", "--prometheus-port"},
	{"--disable-spans", "--disable-spans"},
};

/* TEI's long spelling of an option, NULL when TEI has none. */
static const char *tei_name(const opt_spec *s)
{
	for (size_t k = 0; k < sizeof(g_tei) / sizeof(g_tei[0]); k++)
		if (!strcmp(g_tei[k].name, s->name))
			return g_tei[k].tei;
	return NULL;
}

/* The row of a name of length len (ragged's or TEI's spelling), NULL when none. */
static const opt_spec *find_spec(const char *a, size_t len)
{
	for (size_t k = 0; k < sizeof(g_tei) / sizeof(g_tei[0]); k++)
		if (strlen(g_tei[k].tei) == len && !strncmp(a, g_tei[k].tei, len)) {
			a = g_tei[k].name;
			len = strlen(a);
			break;
		}
	for (size_t k = 0; k < N_OPTS; k++)
		if (strlen(g_opts[k].name) == len && !strncmp(a, g_opts[k].name, len))
			return &g_opts[k];
	return NULL;
}

static bool parse_long(const char *v, double lo, double hi, long *out)
{
	char *end;
	long x;

	if (!v || !*v)
		return false;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return false;
	*out = x;
	return true;
}

static bool parse_double(const char *v, double lo, double hi, double *out)
{
	char *end;
	double x;

	if (!v || !*v)
		return false;
	errno = 0;
	x = strtod(v, &end);
	if (errno || *end || !(x >= lo && x <= hi))
		return false;
	*out = x;
	return true;
}

/* "0,1,3" -> o->devices / n_devices: at most RG_SERVE_MAX_DEVICES distinct ordinals in
 * [0, 255]; "all" -> devices_all (every visible device, counted after parsing); false on
 * anything else. */
static bool parse_devices(const char *v, rg_serve_opts *o)
{
	int n = 0;

	if (!v || !*v)
		return false;
	o->devices_all = !strcmp(v, "all");
	if (o->devices_all) {
		o->n_devices = 0;
		return true;
	}
	for (const char *p = v;;) {
		char *end;
		long x;

		errno = 0;
		x = strtol(p, &end, 10);
		if (end == p || errno || x < 0 || x > 255 || n == RG_SERVE_MAX_DEVICES)
			return false;
		for (int i = 0; i < n; i++)
			if (o->devices[i] == (int)x)
				return false;
		o->devices[n++] = (int)x;
		if (!*end)
			break;
		if (*end != ',')
			return false;
		p = end + 1;
	}
	o->n_devices = n;
	return true;
}

/* Store v into the field of spec; false when v is not a valid value for it. */
static bool set_value(const opt_spec *s, const char *v, rg_serve_opts *o)
{
	char *field = (char *)o + s->off;
	rg_sched_kind k;
	long l;

	switch (s->kind) {
	case OPT_INT:
		if (!parse_long(v, s->lo, s->hi, &l))
			return false;
		*(int *)field = (int)l;
		return true;
	case OPT_SIZE:
		if (!parse_long(v, s->lo, s->hi, &l))
			return false;
		*(size_t *)field = (size_t)l;
		return true;
	case OPT_DOUBLE:
		return parse_double(v, s->lo, s->hi, (double *)field);
	case OPT_STR:
		if (!v || !*v)
			return false;
		*(const char **)field = v;
		return true;
	case OPT_PATH:
		if (!v || !*v || strlen(v) >= sizeof(o->model))
			return false;
		snprintf(field, sizeof(o->model), "%s", v);
		return true;
	case OPT_FLAG:
		*(bool *)field = true;
		return true;
	case OPT_DEVICE:
		if (!v || rg_device_parse(v, (rg_device *)field) != RG_OK)
			return false;
		o->device_set = true;
		return true;
	case OPT_DEVLIST:
		return parse_devices(v, o);
	case OPT_DTYPE:
		/* TEI's spellings (its DType value enum) beside ragged's */
		if (v && !strcmp(v, "float32"))
			v = "fp32";
		else if (v && !strcmp(v, "float16"))
			v = "fp16";
		else if (v && !strcmp(v, "bfloat16"))
			v = "bf16";
		return v && rg_dtype_parse(v, (rg_dtype *)field) == RG_OK;
	case OPT_WEIGHTS:
		if (v && !strcmp(v, "quantized"))
			*(rg_weights *)field = RG_WEIGHTS_AUTO;
		else if (v && !strcmp(v, "dequantize"))
			*(rg_weights *)field = RG_WEIGHTS_DEQUANTIZE;
		else
			return false;
		return true;
	case OPT_QUANTIZE:
		if (v && !strcmp(v, "none"))
			*(rg_quantize *)field = RG_QUANTIZE_NONE;
		else if (v && !strcmp(v, "q8_0"))
			*(rg_quantize *)field = RG_QUANTIZE_Q8_0;
		else
			return false;
		return true;
	case OPT_POOL:
		for (rg_pooling p = RG_POOL_MEAN; v && p <= RG_POOL_MAX; p++) {
			if (!strcmp(v, rg_pooling_name(p))) {
				*(rg_pooling *)field = p;
				o->pooling_set = true;
				return true;
			}
		}
		if (v && (!strcmp(v, "last-token") || !strcmp(v, "last_token"))) {
			*(rg_pooling *)field = RG_POOL_LAST; /* TEI's spelling, and /info's */
			o->pooling_set = true;
			return true;
		}
		return false; /* TEI's splade is not a pooling mode ragged has */
	case OPT_SCHED:
		if (!v || rg_sched_kind_parse(v, &k) != RG_OK)
			return false;
		*(const char **)field = v;
		return true;
	}
	return false;
}

/* HTTP threads by default: the CPUs this process may run on (sched_getaffinity) less two for the
 * engine worker and the system, between 4 and 32. Four threads formatting 768-float JSON bodies
 * capped an H100 at ~7,000 requests/s on a 16-core host (bench/results/serving_*-token-http12). */
static int default_http_threads(void)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	n -= 2;
	return n < 4 ? 4 : n > 32 ? 32 : n;
}

void rg_serve_opts_default(rg_serve_opts *o)
{
	const rg_sched_params sd = rg_sched_params_default(RG_SCHED_TOKEN);

	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < N_OPTS; i++)
		if (g_opts[i].dflt)
			(void)set_value(&g_opts[i], g_opts[i].dflt, o);
	/* the scheduler's defaults are the server's: one place (app/server/sched/sched.c) */
	o->max_batch_tokens = sd.max_batch_tokens;
	o->max_batch_requests = sd.max_batch_requests;
	o->eta = sd.eta;
	o->latency_budget_ms = sd.latency_budget_ms;
	o->http_threads = default_http_threads();
	o->device = RG_DEVICE_CPU;
	o->device_set = false;
	o->max_connections_per_ip = -1; /* rg_serve_per_ip_limit */
}

/* The default of spec as help text, "" when none. */
static void default_text(const opt_spec *s, const rg_serve_opts *d, char *buf, size_t n)
{
	const char *field = (const char *)d + s->off;

	buf[0] = '\0';
	if (s->dflt) {
		snprintf(buf, n, " (%s)", s->dflt);
		return;
	}
	switch (s->kind) {
	case OPT_INT:
		if (*(const int *)field)
			snprintf(buf, n, " (%d)", *(const int *)field);
		return;
	case OPT_DOUBLE:
		snprintf(buf, n, " (%g)", *(const double *)field);
		return;
	case OPT_SIZE:
	case OPT_STR:
	case OPT_PATH:
	case OPT_FLAG:
	case OPT_DEVICE:
	case OPT_DEVLIST:
	case OPT_DTYPE:
	case OPT_WEIGHTS:
	case OPT_QUANTIZE:
	case OPT_SCHED:
	case OPT_POOL:
		return;
	}
}

/* The environment variable of an option: "--max-queue" -> "RAGGED_MAX_QUEUE". */
static void env_name(const opt_spec *s, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "RAGGED_");

	for (const char *p = s->name + 2; *p && k + 1 < n; p++)
		buf[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	buf[k] = '\0';
}

/* TEI's variable of an option: "--model-id" -> "MODEL_ID"; "" when TEI has none. */
static void tei_env_name(const opt_spec *s, char *buf, size_t n)
{
	const char *tei = tei_name(s);
	size_t k = 0;

	for (const char *p = tei ? tei + 2 : ""; *p && k + 1 < n; p++)
		buf[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	buf[k] = '\0';
}

static void rg_serve_usage_models(FILE *f);

void rg_serve_usage(FILE *f)
{
	rg_serve_opts d;

	rg_serve_opts_default(&d);
	fprintf(f, "usage: ragged serve [options]\n"
		   "       ragged serve --config FILE [server options]\n"
		   "  %-26s the models and options from a JSON file (several models, below)\n"
		   "Each option can also be set by the environment variable named after it in\n"
		   "[brackets]; the command line wins over the environment.\n", "--config FILE");
	fprintf(f, "TEI's (text-embeddings-router's) spelling of an option and its variable work\n"
		   "too (\"TEI: ...\" under the option); RAGGED_* wins over TEI's variables;\n"
		   "-p N is --port N.\n");
	for (size_t i = 0; i < N_OPTS; i++) {
		const opt_spec *s = &g_opts[i];
		char left[64], dflt[64], env[64], tenv[64], tei[128] = "";
		const char *tn = tei_name(s);

		snprintf(left, sizeof(left), "%s%s%s", s->name, s->metavar ? " " : "",
			 s->metavar ? s->metavar : "");
		default_text(s, &d, dflt, sizeof(dflt));
		if (s->off == offsetof(rg_serve_opts, http_threads) ||
		    s->off == offsetof(rg_serve_opts, max_connections_per_ip))
			dflt[0] = '\0'; /* derived: the help line says how */
		env_name(s, env, sizeof(env));
		tei_env_name(s, tenv, sizeof(tenv));
		/* TEI's spelling on a line of its own: an option's line ends in "(default)
		 * [RAGGED_X]", as scripts read it */
		if (tn && strcmp(tn, s->name))
			snprintf(tei, sizeof(tei), "  %-26s TEI: %s, %s\n", "", tn, tenv);
		else if (tn)
			snprintf(tei, sizeof(tei), "  %-26s TEI: %s\n", "", tenv);
		fprintf(f, "  %-26s %s%s [%s]\n%s", left, s->help, dflt, env, tei);
	}
	rg_serve_usage_models(f);
}

static int bad_value(const char *opt, const char *v)
{
	fprintf(stderr, "ragged serve: bad value for %s: '%s'\n", opt, v ? v : "(missing)");
	return RG_SERVE_EXIT_USAGE;
}

/* Record that an option whose default depends on another's was given (check_combinations). */
static void mark_given(const opt_spec *s, rg_serve_opts *o)
{
	if (s->off == offsetof(rg_serve_opts, max_queue))
		o->max_queue_set = true;
	if (s->off == offsetof(rg_serve_opts, max_inputs))
		o->max_inputs_set = true;
}

/* A flag's value in the environment: 1/true/yes/on/y/t or 0/false/no/off/n/f, any case. */
static bool parse_env_flag(const char *v, bool *out)
{
	/* y / t / n / f too: clap's words for TEI's flag variables (AUTO_TRUNCATE=t) */
	static const char *const on[] = {"1", "true", "yes", "on", "y", "t"};
	static const char *const off[] = {"0", "false", "no", "off", "n", "f"};

	for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++) {
		if (!strcasecmp(v, on[i]) || !strcasecmp(v, off[i])) {
			*out = !strcasecmp(v, on[i]);
			return true;
		}
	}
	return false;
}

/* Every option whose variable (RAGGED_*, or with tei TEI's) is set, in table order; -1 or
 * RG_SERVE_EXIT_USAGE after a message naming the variable. An empty value is an error
 * (RAGGED_API_KEY= must not mean "no key" by accident); unset the variable instead. */
static int apply_env(rg_serve_opts *o, bool tei)
{
	for (size_t i = 0; i < N_OPTS; i++) {
		const opt_spec *s = &g_opts[i];
		const char *v;
		char name[64];
		bool on;

		if (tei)
			tei_env_name(s, name, sizeof(name));
		else
			env_name(s, name, sizeof(name));
		v = name[0] ? getenv(name) : NULL;
		if (!v)
			continue;
		if (s->kind == OPT_FLAG) {
			if (!parse_env_flag(v, &on))
				return bad_value(name, v);
			*(bool *)((char *)o + s->off) = on;
		} else if (!set_value(s, v, o)) {
			return bad_value(name, v);
		}
		mark_given(s, o);
	}
	return -1;
}

/* Combinations no single option can refuse. */
static int check_combinations(rg_serve_opts *o)
{
	if (o->max_buffered_bytes < o->max_body_bytes) {
		fprintf(stderr, "ragged serve: --max-buffered-bytes (%zu) is below --max-body-bytes "
				"(%zu): a body of the allowed size could never be buffered\n",
			o->max_buffered_bytes, o->max_body_bytes);
		return RG_SERVE_EXIT_USAGE;
	}
	/* admission counts sequences against --max-queue: a request of more inputs than the
	 * queue holds could never be admitted and would get 429 forever. A default gives way: a
	 * queue left at its default grows to hold one request of --max-inputs (TEI's
	 * MAX_CLIENT_BATCH_SIZE=4096), --max-inputs left at its default shrinks to a given queue
	 * (a unit written for the old default of 512 inputs, --max-queue 1024, still starts) */
	if (o->max_inputs > o->max_queue && !o->max_queue_set)
		o->max_queue = o->max_inputs;
	else if (o->max_inputs > o->max_queue && !o->max_inputs_set)
		o->max_inputs = o->max_queue;
	if (o->max_inputs > o->max_queue) {
		fprintf(stderr, "ragged serve: --max-inputs (%d) is above --max-queue (%d): a request "
				"of more than %d inputs could never be queued and would get 429 "
				"forever; lower --max-inputs or raise --max-queue\n",
			o->max_inputs, o->max_queue, o->max_queue);
		return RG_SERVE_EXIT_USAGE;
	}
	/* --devices names GPUs: a CPU server has none (--cpu-replicas is the CPU's test stand-in) */
	if ((o->n_devices || o->devices_all) && o->device_set && o->device != RG_DEVICE_CUDA) {
		fprintf(stderr, "ragged serve: --devices names CUDA devices; it cannot go with "
				"--device %s\n", rg_device_name(o->device));
		return RG_SERVE_EXIT_USAGE;
	}
	if (o->cpu_replicas > 1 && (!o->device_set || o->device != RG_DEVICE_CPU)) {
		fprintf(stderr, "ragged serve: --cpu-replicas needs --device cpu (it runs CPU "
				"models); --devices serves several GPUs\n");
		return RG_SERVE_EXIT_USAGE;
	}
	if (o->default_prompt && o->default_prompt_name) { /* TEI: conflicts_with */
		fprintf(stderr, "ragged serve: --default-prompt and --default-prompt-name cannot "
				"go together\n");
		return RG_SERVE_EXIT_USAGE;
	}
	return -1;
}

#define F(field) offsetof(rg_serve_opts, field)

/* The options that may follow a second or later --model: they set that model alone (its
 * engine, its batch and KV cache budgets, its names). The others are the server's (the HTTP
 * daemon, its limits, the device kind), given before the second --model. */
static const size_t g_model_opts[] = {
	F(model), F(served_model_name), F(dtype), F(weights), F(quantize), F(scheduler), F(max_batch_tokens),
	F(max_batch_requests), F(max_queue), F(max_inputs), F(max_client_batch_tokens),
	F(max_batch_ms), F(graph_warmup_len), F(admission), F(cache_entries), F(cache_db),
	F(cost_table), F(rows), F(row_len), F(slot_len), F(eta), F(lazy), F(latency_budget_ms),
	F(das_packed), F(pooling), F(auto_truncate), F(default_prompt_name), F(default_prompt),
	F(dense_path), F(revision), F(devices), F(device_id), F(max_concurrent_requests),
	F(max_num_seqs), F(max_num_batched_tokens), F(max_grammar_states), F(max_model_len),
	F(max_prompt_logprob_rows),
	F(kv_cache_fraction), F(kv_cache_bytes), F(block_size), F(no_prefix_caching),
	F(chat_content_as_text), F(speculative), F(num_speculative_tokens), F(prompt_lookup_max),
	F(prompt_lookup_min), F(draft_model), F(default_ttft_ms), F(default_tpot_ms), F(step_delay_ms),
	F(batch_delay_ms), F(token_delay_us),
};

/* Whether s may follow a second or later --model (g_model_opts). */
static bool per_model(const opt_spec *s)
{
	for (size_t k = 0; k < sizeof(g_model_opts) / sizeof(g_model_opts[0]); k++)
		if (g_model_opts[k] == s->off)
			return true;
	return false;
}

static void rg_serve_usage_models(FILE *f)
{
	int col = 2;

	fprintf(f, "Several models in one server: repeat --model. Each model has its own\n"
		   "engine (and so its own batch and KV cache budgets); a request picks one by\n"
		   "its \"model\" field (JSON body; GET /v1/models/{id}), the first model when it\n"
		   "names none, and an unknown name gets 404 model_not_found. The options after a\n"
		   "second or later --model, up to the next, set that model alone, and only these\n"
		   "may be given there (every other option is the server's and goes before the\n"
		   "second --model):\n ");
	for (size_t i = 0; i < N_OPTS; i++) {
		size_t n = strlen(g_opts[i].name) + 1;

		if (!per_model(&g_opts[i]))
			continue;
		if (col + n > 78) {
			fprintf(f, "\n ");
			col = 2;
		}
		fprintf(f, " %s", g_opts[i].name);
		col += (int)n;
	}
	fprintf(f, "\nA later model starts from the first model's options, less its names\n"
		   "(--model, --served-model-name), --pooling, --dense-path, the default prompt,\n"
		   "--revision, --cache-db, --cost-table and --trace-steps. On one GPU, a decoder\n"
		   "that sets no KV cache size takes 0.9 / (models not loaded yet) of the memory\n"
		   "free at its load. --served-model-name A B (vLLM's form) or A,B gives one\n"
		   "model several names; /v1/models lists each.\n"
		   "--config FILE says the same in a JSON file, read as the command line it\n"
		   "stands for (--model A <A's options> --model B ...):\n"
		   "  {\"models\": [{\"model\": \"DIR\", \"served-model-name\": \"a\", ...},\n"
		   "              ...], \"port\": 8080, ...}\n"
		   "Keys are option names without \"--\"; values are strings, numbers, true/false\n"
		   "for flags (false: as if left out), arrays for --served-model-name,\n"
		   "--cors-allow-origin, --allowed-hosts and --devices. A \"models\" entry takes\n"
		   "the per-model options above (\"model\" required), the top level the server's.\n"
		   "Beside --config the command line may give server options only; they win\n"
		   "over the file's (the environment is below both). --model with --config is an\n"
		   "error.\n");
}

/* The option at argv[*i] as the parser will take it, for a scan ahead of parsing: its spec, or
 * NULL for an argument that is none (a stray value, an unknown option: the parser reports those);
 * *i moves past the option's value when the value is the next argument (TEI's -p PORT too). */
static const opt_spec *scan_opt(int argc, char **argv, int *i)
{
	const char *a = argv[*i], *eq;
	const opt_spec *s;
	size_t len;

	if (!strcmp(a, "-p")) {
		++*i;
		return NULL;
	}
	if (strncmp(a, "--", 2) != 0)
		return NULL;
	eq = strchr(a, '=');
	len = eq ? (size_t)(eq - a) : strlen(a);
	if (!(s = find_spec(a, len)))
		return NULL;
	if (s->kind != OPT_FLAG && !eq && *i + 1 < argc)
		++*i;
	return s;
}

/* Where each model's options start (o->n_models, o->model_at): a --model (or TEI's --model-id,
 * either as --model=X) after the first starts the next model's. Values are skipped as the
 * parser takes them. RG_SERVE_EXIT_USAGE past RG_SERVE_MAX_MODELS models, else -1. */
static int scan_models(int argc, char **argv, rg_serve_opts *o)
{
	bool seen = false;

	o->n_models = 1;
	o->model_at[0] = 1;
	for (int i = 1; i < argc; i++) {
		const int at = i;
		const opt_spec *s = scan_opt(argc, argv, &i);

		if (s && s->off == F(model)) {
			if (seen && o->n_models == RG_SERVE_MAX_MODELS) {
				fprintf(stderr, "ragged serve: --model given more than %d times\n",
					RG_SERVE_MAX_MODELS);
				return RG_SERVE_EXIT_USAGE;
			}
			if (seen)
				o->model_at[o->n_models++] = at;
			seen = true;
		}
	}
	return -1;
}

/* argv[from..to) into o; model_k > 0: a later model's arguments (per-model options only). */
static int parse_args(int argc, char **argv, int from, int to, int model_k, rg_serve_opts *o)
{
	for (int i = from; i < to && i < argc; i++) {
		const char *a = argv[i], *eq, *v = NULL;
		const opt_spec *s = NULL;
		size_t len;

		if (!strcmp(a, "-p")) /* TEI's one short option */
			a = "--port";
		if (strncmp(a, "--", 2) != 0) {
			fprintf(stderr, "ragged serve: unexpected argument '%s'\n", a);
			return RG_SERVE_EXIT_USAGE;
		}
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a) : strlen(a);
		s = find_spec(a, len);
		if (!s) {
			fprintf(stderr, "ragged serve: unknown option '%.*s'\n", (int)len, a);
			rg_serve_usage(stderr);
			return RG_SERVE_EXIT_USAGE;
		}
		if (model_k && !per_model(s)) {
			fprintf(stderr, "ragged serve: %s is the server's option, not one model's: "
				"give it before the second --model (model %d, %s, takes per-model "
				"options only; see --help)\n", s->name, model_k + 1, o->model);
			return RG_SERVE_EXIT_USAGE;
		}
		if (model_k && (s->off == F(devices) || s->off == F(device_id))) {
			o->n_devices = 0; /* this model's devices replace the first model's */
			o->devices_all = false;
			o->device_id = 0;
		}
		if (s->kind == OPT_FLAG) {
			if (eq) {
				fprintf(stderr, "ragged serve: %s takes no value\n", s->name);
				return RG_SERVE_EXIT_USAGE;
			}
			(void)set_value(s, NULL, o);
			continue;
		}
		if (eq)
			v = eq + 1;
		else if (i + 1 < to)
			v = argv[++i];
		if (!v || !set_value(s, v, o))
			return bad_value(s->name, v);
		mark_given(s, o);
		/* vLLM's --served-model-name A B C: the words after it that are no option are
		 * more names of the same model, kept as "A,B,C" */
		if (s->off == F(served_model_name) && !eq && i + 1 < to && argv[i + 1][0] != '-') {
			const size_t cap = sizeof(o->served_names);
			size_t n = (size_t)snprintf(o->served_names, cap, "%s", v);

			while (i + 1 < to && argv[i + 1][0] && argv[i + 1][0] != '-') {
				if (n >= cap)
					break;
				n += (size_t)snprintf(o->served_names + n, cap - n, ",%s", argv[++i]);
			}
			if (n >= cap)
				return bad_value(s->name, "(the names are too long)");
			o->served_model_name = o->served_names;
		}
	}
	return -1;
}

/* What is checked once every argument is in: values of several options, the devices. */
static int finish_opts(rg_serve_opts *o)
{
	int rc;

	if (strcmp(o->admission, "time") && strcmp(o->admission, "count"))
		return bad_value("--admission", o->admission);
	if (strcmp(o->accept, "balanced") && strcmp(o->accept, "mhd"))
		return bad_value("--accept", o->accept);
	if (strcmp(o->speculative, "ngram") && strcmp(o->speculative, "off") &&
	    strcmp(o->speculative, "draft"))
		return bad_value("--speculative", o->speculative);
	if (o->draft_model && !strcmp(o->speculative, "ngram")) {
		fprintf(stderr, "ragged serve: --speculative ngram and --draft-model: choose one\n");
		return RG_SERVE_EXIT_USAGE;
	}
	if (!o->draft_model && !strcmp(o->speculative, "draft")) {
		fprintf(stderr, "ragged serve: --speculative draft needs --draft-model\n");
		return RG_SERVE_EXIT_USAGE;
	}
	if (o->draft_model) /* drafts from the model (speculative "draft"), not prompt lookup */
		o->speculative = "draft";
	if (o->prompt_lookup_min > o->prompt_lookup_max) {
		fprintf(stderr, "ragged serve: --prompt-lookup-min %d > --prompt-lookup-max %d\n",
			o->prompt_lookup_min, o->prompt_lookup_max);
		return RG_SERVE_EXIT_USAGE;
	}
	if ((rc = check_combinations(o)) >= 0)
		return rc;
	if (o->devices_all) {
		int n = rg_cuda_device_count();

		if (n < 1) {
			fprintf(stderr, "ragged serve: --devices all: no CUDA device is visible%s\n",
				rg_build_has_cuda() ? "" : " (this build has no CUDA)");
			return RG_SERVE_EXIT_USAGE;
		}
		o->n_devices = n < RG_SERVE_MAX_DEVICES ? n : RG_SERVE_MAX_DEVICES;
		for (int i = 0; i < o->n_devices; i++)
			o->devices[i] = i;
	}
	if (o->n_devices)
		o->device = RG_DEVICE_CUDA;
	else if (!o->device_set)
		o->device = rg_cuda_device_count() > 0 ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
	if (!o->n_devices && o->device_id && o->device == RG_DEVICE_CUDA) /* TEI's --device-id */
		o->devices[o->n_devices++] = o->device_id;
	return -1;
}

int rg_serve_opts_parse(int argc, char **argv, rg_serve_opts *o)
{
	int rc;

	rg_serve_opts_default(o);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			rg_serve_usage(stdout);
			return 0;
		}
	}
	if ((rc = scan_models(argc, argv, o)) >= 0)
		return rc;
	if ((rc = apply_env(o, true)) >= 0 || (rc = apply_env(o, false)) >= 0)
		return rc;
	if ((rc = parse_args(argc, argv, 1, o->n_models > 1 ? o->model_at[1] : argc, 0, o)) >= 0)
		return rc;
	return finish_opts(o);
}

int rg_serve_opts_parse_model(int argc, char **argv, const rg_serve_opts *base, int k,
			      rg_serve_opts *o)
{
	int rc;

	if (k < 1 || k >= base->n_models)
		return RG_SERVE_EXIT_USAGE;
	*o = *base;
	o->model[0] = '\0';
	o->served_model_name = NULL;
	o->served_names[0] = '\0';
	o->pooling_set = false;
	o->dense_path = NULL;
	o->default_prompt_name = NULL;
	o->default_prompt = NULL;
	o->revision = NULL;
	o->cache_db = NULL;
	o->cost_table = NULL;
	o->trace_steps = NULL;
	if ((rc = parse_args(argc, argv, base->model_at[k],
			     k + 1 < base->n_models ? base->model_at[k + 1] : argc, k, o)) >= 0)
		return rc;
	return finish_opts(o);
}
#undef F

int rg_serve_per_ip_limit(const rg_serve_opts *o, int max_connections)
{
	if (o->max_connections_per_ip >= 0)
		return o->max_connections_per_ip;
	return max_connections / 4 > 0 ? max_connections / 4 : 1;
}

/* ---- --config FILE: the command line from a JSON file (options.h) ------------------------- */

#define CONFIG_MAX_BYTES (16 << 20) /* a configuration file larger than this is refused */

void rg_serve_argv_free(rg_serve_argv *a)
{
	if (a->cap) {
		for (int i = 0; i < a->argc; i++)
			free(a->argv[i]);
		free(a->argv);
	}
	memset(a, 0, sizeof(*a));
}

/* Append a copy of text to a (kept NULL-terminated); false when out of memory. */
static bool argv_push(rg_serve_argv *a, const char *text)
{
	char *copy;

	if (a->argc + 2 > a->cap) {
		int cap = a->cap ? 2 * a->cap : 32;
		char **p = realloc(a->argv, (size_t)cap * sizeof(*p));

		if (!p)
			return false;
		a->argv = p;
		a->cap = cap;
	}
	if (!(copy = strdup(text)))
		return false;
	a->argv[a->argc++] = copy;
	a->argv[a->argc] = NULL;
	return true;
}

static int config_fail(const char *file, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "ragged serve: --config: FILE: <message>" on stderr; RG_SERVE_EXIT_USAGE. */
static int config_fail(const char *file, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ragged serve: --config: %s: ", file);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return RG_SERVE_EXIT_USAGE;
}

static int config_oom(void)
{
	fprintf(stderr, "ragged serve: --config: out of memory\n");
	return 1;
}

/* A JSON value's type in a message: "a string", "a number", ... */
static const char *json_kind(json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_double:
	case json_type_int:
		return "a number";
	case json_type_object:
		return "an object";
	case json_type_array:
		return "an array";
	case json_type_string:
		return "a string";
	}
	return "a JSON value";
}

/* Whether s takes a comma-separated list on the command line (a JSON array in the file). */
static bool list_option(const opt_spec *s)
{
	return s->kind == OPT_DEVLIST || s->off == offsetof(rg_serve_opts, served_model_name) ||
	       s->off == offsetof(rg_serve_opts, cors_allow_origin) ||
	       s->off == offsetof(rg_serve_opts, allowed_hosts);
}

static bool numeric_option(const opt_spec *s)
{
	return s->kind == OPT_INT || s->kind == OPT_SIZE || s->kind == OPT_DOUBLE;
}

/* The JSON types s takes, for a message. */
static const char *config_expected(const opt_spec *s)
{
	if (s->kind == OPT_FLAG)
		return "true or false";
	if (numeric_option(s))
		return "a number or a string";
	if (s->kind == OPT_DEVLIST)
		return "a string, a device ordinal or an array of ordinals";
	if (list_option(s))
		return "a string or an array of strings";
	return "a string";
}

/* Append the command-line text of the scalar v for s to b: a string as it is, an integer for a
 * numeric option or a device ordinal, another number for a numeric option (the shortest text
 * that reads back); false for any other type. */
static bool config_scalar(rg_buf *b, const opt_spec *s, json_object *v)
{
	char num[64];
	double d;

	switch (json_object_get_type(v)) {
	case json_type_string:
		rg_buf_put(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		return true;
	case json_type_int:
		if (!numeric_option(s) && s->kind != OPT_DEVLIST)
			return false;
		rg_buf_printf(b, "%lld", (long long)json_object_get_int64(v));
		return true;
	case json_type_double:
		if (!numeric_option(s))
			return false;
		d = json_object_get_double(v);
		snprintf(num, sizeof(num), "%.15g", d);
		if (strtod(num, NULL) != d)
			snprintf(num, sizeof(num), "%.17g", d);
		rg_buf_puts(b, num);
		return true;
	case json_type_null:
	case json_type_boolean:
	case json_type_object:
	case json_type_array:
		return false;
	}
	return false;
}

/* Append the option s, set by the key `key` of the file to v, to a: "--name=VALUE", or "--name"
 * for a flag set true (nothing for false). where: "" at the top level, "models[i]." in a
 * model's entry. -1 to go on, else the exit status after a message. */
static int config_push(rg_serve_argv *a, const char *file, const char *where, const char *key,
		       const opt_spec *s, json_object *v)
{
	rg_buf b;
	bool ok;

	if (s->kind == OPT_FLAG) {
		if (!json_object_is_type(v, json_type_boolean))
			return config_fail(file, "%s%s: expected true or false, got %s", where, key,
					   json_kind(v));
		if (!json_object_get_boolean(v))
			return -1;
		return argv_push(a, s->name) ? -1 : config_oom();
	}
	rg_buf_init(&b);
	rg_buf_printf(&b, "%s=", s->name);
	if (json_object_is_type(v, json_type_array) && list_option(s)) {
		size_t n = json_object_array_length(v);

		if (!n) {
			rg_buf_free(&b);
			return config_fail(file, "%s%s: an empty list", where, key);
		}
		for (size_t k = 0; k < n; k++) {
			json_object *e = json_object_array_get_idx(v, k);

			if (k)
				rg_buf_puts(&b, ",");
			if (!json_object_is_type(e, json_type_array) && config_scalar(&b, s, e))
				continue;
			rg_buf_free(&b);
			return config_fail(file, "%s%s[%zu]: expected %s, got %s", where, key, k,
					   s->kind == OPT_DEVLIST ? "a device ordinal" : "a string",
					   json_kind(e));
		}
	} else if (!config_scalar(&b, s, v)) {
		rg_buf_free(&b);
		return config_fail(file, "%s%s: expected %s, got %s", where, key,
				   config_expected(s), json_kind(v));
	}
	ok = !b.oom && argv_push(a, b.data);
	rg_buf_free(&b);
	return ok ? -1 : config_oom();
}

/* The row of the file's key ("port" -> --port), NULL when no option has that name. */
static const opt_spec *config_spec(const char *key)
{
	char name[128];
	int n = snprintf(name, sizeof(name), "--%s", key);

	if (!key[0] || key[0] == '-' || n < 0 || (size_t)n >= sizeof(name))
		return NULL;
	return find_spec(name, (size_t)n);
}

/* An unknown key of models[i] (i < 0: of the top level). */
static int config_unknown(const char *file, int i, const char *key)
{
	char where[32] = "";

	if (i >= 0)
		snprintf(where, sizeof(where), "models[%d]: ", i);
	return config_fail(file, "%sunknown key '%s' (%s; see ragged serve --help)", where, key,
			   key[0] == '-' ? "keys are option names without the leading --"
					 : "not a ragged serve option");
}

/* The options of models[i] (the object m): its model first, so that it starts that model's
 * part of the command line, then the others in the file's order. */
static int config_model(rg_serve_argv *a, const char *file, int i, json_object *m)
{
	const char *model_key = NULL;
	json_object *model_v = NULL;
	char where[32];
	int rc;

	snprintf(where, sizeof(where), "models[%d].", i);
	if (!json_object_is_type(m, json_type_object))
		return config_fail(file, "models[%d]: expected an object, got %s", i, json_kind(m));
	json_object_object_foreach(m, key, v) {
		const opt_spec *s = config_spec(key);

		if (!s)
			return config_unknown(file, i, key);
		if (!per_model(s))
			return config_fail(file, "%s%s: %s is the server's option, not one "
					   "model's: give it at the top level of the file", where,
					   key, s->name);
		if (s->off != offsetof(rg_serve_opts, model))
			continue;
		if (model_key)
			return config_fail(file, "models[%d] gives its model twice ('%s' and '%s')",
					   i, model_key, key);
		model_key = key;
		model_v = v;
	}
	if (!model_key)
		return config_fail(file, "models[%d] has no \"model\" (the model's directory or "
				   "Hugging Face id)", i);
	if ((rc = config_push(a, file, where, model_key, config_spec(model_key), model_v)) >= 0)
		return rc;
	json_object_object_foreach(m, key2, v2) {
		if (v2 == model_v && !strcmp(key2, model_key))
			continue;
		if ((rc = config_push(a, file, where, key2, config_spec(key2), v2)) >= 0)
			return rc;
	}
	return -1;
}

/* Read and check the file's object into a: its server options (top level), then the command
 * line's (argv less --config at [cfg_i, cfg_i + cfg_n)), then each model's. */
static int config_build(const char *file, int argc, char **argv, int cfg_i, int cfg_n,
			rg_serve_argv *a)
{
	json_object *root = NULL, *models = NULL;
	char *text = NULL, msg[512], dup[128];
	size_t len = 0, n;
	rg_status st;
	int rc = RG_SERVE_EXIT_USAGE;

	if ((st = rg_file_read(file, CONFIG_MAX_BYTES, &text, &len)) != RG_OK ||
	    (st = rg_json_parse(text, len, JSON_TOKENER_VALIDATE_UTF8, file, NULL, &root)) !=
		    RG_OK) {
		fprintf(stderr, "ragged serve: --config: %s\n", rg_last_error());
		rc = st == RG_ERR_OOM ? 1 : RG_SERVE_EXIT_USAGE;
		goto out_free_text;
	}
	/* a repeated key (json-c keeps the last) is refused, as in request bodies */
	if ((st = rg_json_text_check(text, len, root, msg, sizeof(msg), dup, sizeof(dup))) !=
	    RG_OK) {
		rc = st == RG_ERR_OOM ? config_oom() : config_fail(file, "%s", msg);
		goto out_put_root;
	}
	if (!json_object_is_type(root, json_type_object)) {
		rc = config_fail(file, "expected an object {\"models\": [...], ...}, got %s",
				 json_kind(root));
		goto out_put_root;
	}
	if (!argv_push(a, argv[0])) {
		rc = config_oom();
		goto out_put_root;
	}
	json_object_object_foreach(root, key, v) {
		const opt_spec *s;

		if (!strcmp(key, "models")) {
			models = v;
			continue;
		}
		if (!(s = config_spec(key))) {
			rc = config_unknown(file, -1, key);
			goto out_put_root;
		}
		if (per_model(s)) {
			rc = config_fail(file, "%s: %s is one model's option: give it in the "
					 "entries of \"models\"", key, s->name);
			goto out_put_root;
		}
		if ((rc = config_push(a, file, "", key, s, v)) >= 0)
			goto out_put_root;
	}
	if (!models) {
		rc = config_fail(file, "no \"models\": list the models to serve, "
				 "[{\"model\": \"DIR\", ...}, ...]");
		goto out_put_root;
	}
	if (!json_object_is_type(models, json_type_array)) {
		rc = config_fail(file, "models: expected an array of model objects, got %s",
				 json_kind(models));
		goto out_put_root;
	}
	n = json_object_array_length(models);
	if (n == 0) {
		rc = config_fail(file, "models is empty: list one model or more");
		goto out_put_root;
	}
	if (n > RG_SERVE_MAX_MODELS) {
		rc = config_fail(file, "models: %zu models, at most %d are served", n,
				 RG_SERVE_MAX_MODELS);
		goto out_put_root;
	}
	for (int i = 1; i < argc; i++)
		if ((i < cfg_i || i >= cfg_i + cfg_n) && !argv_push(a, argv[i])) {
			rc = config_oom();
			goto out_put_root;
		}
	for (size_t i = 0; i < n; i++)
		if ((rc = config_model(a, file, (int)i, json_object_array_get_idx(models, i))) >=
		    0)
			goto out_put_root;
	rc = -1;
out_put_root:
	json_object_put(root);
out_free_text:
	free(text);
	return rc;
}

int rg_serve_config_expand(int argc, char **argv, rg_serve_argv *out)
{
	const opt_spec *model_opt = NULL; /* the first per-model option beside --config */
	const char *file = NULL;
	bool model_given = false;
	int cfg_i = -1, cfg_n = 0, rc;

	memset(out, 0, sizeof(*out));
	out->argc = argc;
	out->argv = argv;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return -1; /* rg_serve_opts_parse prints the help */
	/* find --config; beside it the command line may set the server's options only. Values
	 * are skipped as the parser takes them; what it refuses is left to it. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const opt_spec *s;

		if (!strcmp(a, "--config") || !strncmp(a, "--config=", 9)) {
			if (file) {
				fprintf(stderr, "ragged serve: --config given twice\n");
				return RG_SERVE_EXIT_USAGE;
			}
			cfg_i = i;
			cfg_n = a[8] ? 1 : 2;
			file = a[8] ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
			if (!file || !*file) {
				fprintf(stderr, "ragged serve: --config needs a FILE (JSON)\n");
				return RG_SERVE_EXIT_USAGE;
			}
			continue;
		}
		if (!(s = scan_opt(argc, argv, &i)))
			continue;
		if (s->off == offsetof(rg_serve_opts, model))
			model_given = true;
		else if (per_model(s) && !model_opt)
			model_opt = s;
	}
	if (!file)
		return -1;
	if (model_given) {
		fprintf(stderr, "ragged serve: --config and --model cannot go together: list the "
				"models in %s's \"models\"\n", file);
		return RG_SERVE_EXIT_USAGE;
	}
	if (model_opt) {
		fprintf(stderr, "ragged serve: %s is one model's option: with --config, give it in "
				"the entries of %s's \"models\" (the command line beside --config "
				"takes the server's options only)\n", model_opt->name, file);
		return RG_SERVE_EXIT_USAGE;
	}
	memset(out, 0, sizeof(*out));
	if ((rc = config_build(file, argc, argv, cfg_i, cfg_n, out)) >= 0) {
		rg_serve_argv_free(out);
		out->argc = argc;
		out->argv = argv;
	}
	return rc;
}
