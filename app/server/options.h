/* `ragged serve` options: one table (app/server/options.c) gives each option its name, type,
 * range, default and help line; the parser, the environment, the defaults and `--help` all read
 * it, so a default is written once. Each option --foo-bar can also be set by the environment
 * variable RAGGED_FOO_BAR; the command line wins. TEI's spellings (text-embeddings-router's
 * --model-id, --hostname, -p, --max-client-batch-size, --payload-limit, ...) are aliases of the
 * same table rows, and TEI's environment names (MODEL_ID, HOSTNAME, PORT, ...) are read too,
 * below RAGGED_* (defaults < TEI variables < RAGGED_* variables < command line), so that a TEI
 * launch line starts ragged unchanged. The scheduler's own defaults come from
 * rg_sched_params_default (sched/). */
#ifndef RG_SERVER_OPTIONS_H
#define RG_SERVER_OPTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "ragged.h"

#define RG_SERVE_EXIT_USAGE 2
#define RG_SERVE_MAX_DEVICES 16
#define RG_SERVE_MAX_MODELS 8 /* --model given this many times at most (one engine each) */

typedef struct rg_serve_opts {
	char model[4096];
	const char *host;
	int port;
	rg_device device;
	bool device_set; /* --device given; else cuda when a GPU is present */
	int devices[RG_SERVE_MAX_DEVICES]; /* --devices: CUDA ordinals, one engine worker each */
	int n_devices;   /* 0: --devices not given (one device: ordinal 0, or the CPU) */
	bool devices_all; /* --devices all: every visible CUDA device (resolved by the parser) */
	int cpu_replicas; /* testing: CPU model replicas behind the one queue (1: none) */
	rg_dtype dtype;
	rg_weights weights; /* --weights (GGUF) */
	rg_quantize quantize; /* --quantize: float GEMM weights quantized at load */
	const char *scheduler;
	int max_batch_tokens, max_batch_requests, max_queue, max_inputs;
	size_t max_body_bytes;
	int request_timeout_ms;
	int cache_entries;
	const char *cache_db;
	const char *cost_table;
	int rows, row_len, slot_len; /* 0 = derive from the model */
	double eta, latency_budget_ms;
	bool lazy, das_packed;
	int http_threads, connection_timeout_s, max_connections;
	size_t connection_memory;
	double batch_delay_ms;
	const char *api_key;           /* NULL: no authentication */
	const char *cors_allow_origin; /* NULL: no CORS headers; "*" or "a,b,..." */
	int request_read_timeout_s;    /* headers + body of one request */
	int max_connections_per_ip;    /* 0 = no limit; -1 (default): rg_serve_per_ip_limit */
	const char *allowed_hosts;     /* NULL: rg_allowed_hosts_default of host */
	size_t max_buffered_bytes;     /* request bodies held by all connections */
	size_t max_discard_bytes;      /* refused bodies read and dropped up to this size */
	double max_batch_ms;          /* time budget of a batch, 0: none */
	int graph_warmup_len;         /* CUDA graph warm-up up to this longest input, 0: none */
	int max_client_batch_tokens;  /* tokens per request */
	const char *admission;        /* "time" or "count" */
	const char *accept;           /* "balanced" (server.c's accept thread) or "mhd" */
	int shutdown_timeout_s;       /* drain at SIGTERM */
	double token_delay_us;        /* testing */
	bool max_queue_set;           /* --max-queue given; else raised to --max-inputs */
	bool max_inputs_set;          /* --max-inputs given; else lowered to a given --max-queue */
	/* TEI's options (text-embeddings-router); NULL / 0 when not given */
	const char *served_model_name; /* /info, /v1/models, OpenAI "model" (default: model id) */
	rg_pooling pooling;           /* --pooling: overrides 1_Pooling/config.json ... */
	bool pooling_set;             /* ... when set */
	bool auto_truncate;           /* truncate over-long inputs unless a request says false */
	const char *default_prompt_name; /* a name in config_sentence_transformers.json prompts */
	const char *default_prompt;   /* a prompt text for requests that name none */
	bool json_output;             /* log lines on stderr as JSON objects */
	const char *hub_cache;        /* --huggingface-hub-cache: the hub cache (HF_HUB_CACHE) */
	int device_id;                /* --device-id: the CUDA ordinal when --devices is not given */
	const char *dense_path;       /* --dense-path: the Dense module's directory in the model */
	int max_concurrent_requests;  /* requests queued or running at most (429 past it), 0: none */
	/* accepted so that TEI launch lines start, not used (see the help line of each) */
	const char *revision, *hf_token, *hf_api_token, *uds_path, *otlp_endpoint,
		*otlp_service_name;
	int tokenization_workers, prometheus_port;
	bool disable_spans;
	/* decoder models (issue 20: the generation engine, engine_gen.h) */
	int max_num_seqs;             /* sequences in one step */
	int max_grammar_states;       /* structured outputs: DFA states of one grammar */
	int max_prompt_logprob_rows;  /* echo / prompt_logprobs: prompt logits rows in one step */
	int max_num_batched_tokens;   /* new tokens in one step (0: --max-batch-tokens, else 512) */
	int max_model_len;            /* prompt + completion tokens (0: the model's positions) */
	double kv_cache_fraction;     /* of the memory free after the weights */
	size_t kv_cache_bytes;        /* 0: by the fraction */
	int block_size;               /* KV block positions */
	bool no_prefix_caching;
	bool chat_content_as_text;    /* chat: message content tokenized as plain text (special
				       * tokens only in the template's markup); default off */
	double step_delay_ms;         /* testing: sleep before each step */
	const char *trace_steps;      /* diagnostics: a line per generation step to this file */
	double default_ttft_ms;       /* TTFT target of requests without one (0: none) */
	double default_tpot_ms;       /* TPOT target of requests without one (0: none) */
	const char *speculative;      /* "ngram": prompt-lookup drafts for greedy requests; "draft":
				       * drafts from draft_model (set by --draft-model); "off" */
	const char *draft_model;      /* --draft-model: the drafts' model, NULL: none */
	int num_speculative_tokens;   /* drafts verified per step (--speculative ngram) */
	int prompt_lookup_max, prompt_lookup_min; /* n-gram lengths matched */
	/* several models (issue 31 item 4): --model given again starts another model's options */
	char served_names[1024];      /* vLLM's --served-model-name A B ...: the names joined by
				       * commas (served_model_name then points here) */
	int n_models;                 /* models on the command line (1 when --model is not
				       * repeated); set by rg_serve_opts_parse */
	int model_at[RG_SERVE_MAX_MODELS]; /* (n_models) argv index where each model's options
				       * start: [0] 1, [k] the k-th --model after the first */
} rg_serve_opts;

/* Fill o with every default. */
void rg_serve_opts_default(rg_serve_opts *o);

/* Parse into o: the defaults, then TEI's variables, then the RAGGED_* ones, then argv[1..argc)
 * (argv[0] is "serve") up to a second --model (o->n_models and o->model_at say where each
 * model's options start: rg_serve_opts_parse_model reads the others). --name VALUE and
 * --name=VALUE; flags take no value on the command line and 1/true/yes/on/y/t or
 * 0/false/no/off/n/f in the environment. Strings point into argv, the environment or
 * o->served_names. Returns -1 to go on, 0 after --help (printed on stdout),
 * RG_SERVE_EXIT_USAGE after a one-line message on stderr naming the option or variable (a bad or
 * empty value, an unknown option, --max-buffered-bytes below --max-body-bytes, --model given more
 * than RG_SERVE_MAX_MODELS times). */
int rg_serve_opts_parse(int argc, char **argv, rg_serve_opts *o);

/* The options of the k-th model (1 <= k < base->n_models) of a command line that repeats
 * --model: o starts as base (the first model's options, as rg_serve_opts_parse left them, so the
 * server's options and the model options given before the second --model are inherited), less
 * what names one model (--model, --served-model-name, --pooling, --dense-path, the default
 * prompt, --revision, --cache-db, --cost-table, --trace-steps); then the arguments from that
 * --model to the next one apply. Only per-model options may be given there (--help lists them);
 * a server option (--port, --host, ...) after a second --model is refused by name. Returns -1 to
 * go on, RG_SERVE_EXIT_USAGE after a one-line message naming the model and the option. */
int rg_serve_opts_parse_model(int argc, char **argv, const rg_serve_opts *base, int k,
			      rg_serve_opts *o);

/* The per-client-address connection limit: --max-connections-per-ip when given (0: none), else
 * a quarter of max_connections (at least 1), the connections the server can actually hold
 * (--max-connections, lowered when the open-files limit cannot hold them): one address (a
 * slow-loris client) cannot take every slot (issue 18, item 14). */
int rg_serve_per_ip_limit(const rg_serve_opts *o, int max_connections);

/* A command line after rg_serve_config_expand: argv (argc strings, then NULL). cap 0: argv is
 * the caller's own (no --config); else every string and the vector are malloc'd and freed by
 * rg_serve_argv_free. */
typedef struct rg_serve_argv {
	int argc;
	char **argv;
	int cap;
} rg_serve_argv;

/* `ragged serve --config FILE`: the models and options of a JSON file turned into the command
 * line that says the same, so that rg_serve_opts_parse and rg_serve_opts_parse_model (one
 * parser, one set of checks) read it. FILE is one object:
 *   {"models": [{"model": "DIR", "served-model-name": "a", ...}, ...], "port": 8080, ...}
 * Each key is an option's long name without "--" (TEI's spellings too), its value the option's
 * value: a string, a number for a numeric option (or --devices), true / false for a flag (false
 * is the same as leaving the key out), an array of strings for a list (--served-model-name,
 * --cors-allow-origin, --allowed-hosts: joined by commas) or of ordinals for --devices. The
 * top-level keys take the server's options (those not listed as per-model in --help); each
 * entry of "models" (1 to RG_SERVE_MAX_MODELS of them) must give "model" and takes the
 * per-model options only. The result is
 *   serve <the file's server options> <the command line's> --model=A <A's> --model=B <B's> ...
 * so a later model starts from the first model's options as on the command line, and the
 * options given on the command line beside --config, which must be the server's, win over the
 * file's (the environment is below both). --config with --model, a per-model option beside
 * --config, or --config given twice is an error. With --help anywhere, or without --config,
 * out->argv is argv itself. Returns -1 to go on (out filled), RG_SERVE_EXIT_USAGE after a
 * one-line message on stderr naming the file and the key (models[i].key for a model's): the
 * file unreadable, not JSON (json-c's reason and the byte), a repeated key, an unknown key, a
 * key in the wrong place, a value of the wrong type, no or an empty "models" list; 1 when out
 * of memory. Values are checked by the parser that reads the result. */
int rg_serve_config_expand(int argc, char **argv, rg_serve_argv *out);

/* Free what rg_serve_config_expand allocated (nothing when out->cap is 0); a zeroed struct is
 * accepted. */
void rg_serve_argv_free(rg_serve_argv *a);

/* The help text, generated from the table. */
void rg_serve_usage(FILE *f);
#endif
