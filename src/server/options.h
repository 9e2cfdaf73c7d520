/* `ragged serve` options: one table (src/server/options.c) gives each option its name, type,
 * range, default and help line; the parser, the environment, the defaults and `--help` all read
 * it, so a default is written once. Each option --foo-bar can also be set by the environment
 * variable RAGGED_FOO_BAR (as TEI reads PORT, MODEL_ID, ...); the command line wins. The
 * scheduler's own defaults come from rg_sched_params_default (sched/). */
#ifndef RG_SERVER_OPTIONS_H
#define RG_SERVER_OPTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "ragged.h"

#define RG_SERVE_EXIT_USAGE 2
#define RG_SERVE_MAX_DEVICES 16

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
	int max_client_batch_tokens;  /* tokens per request */
	const char *admission;        /* "time" or "count" */
	int shutdown_timeout_s;       /* drain at SIGTERM */
	double token_delay_us;        /* testing */
} rg_serve_opts;

/* Fill o with every default. */
void rg_serve_opts_default(rg_serve_opts *o);

/* Parse into o: the defaults, then the RAGGED_* variables of the environment, then argv[1..argc)
 * (argv[0] is "serve"). --name VALUE and --name=VALUE; flags take no value on the command line
 * and 1/true/yes/on or 0/false/no/off in the environment. Strings point into argv or the
 * environment. Returns -1 to go on, 0 after --help (printed on stdout), RG_SERVE_EXIT_USAGE after
 * a one-line message on stderr naming the option or variable (a bad or empty value, an unknown
 * option, --max-buffered-bytes below --max-body-bytes). */
int rg_serve_opts_parse(int argc, char **argv, rg_serve_opts *o);

/* The per-client-address connection limit: --max-connections-per-ip when given (0: none), else
 * a quarter of max_connections (at least 1), the connections the server can actually hold
 * (--max-connections, lowered when the open-files limit cannot hold them): one address (a
 * slow-loris client) cannot take every slot (issue 18, item 14). */
int rg_serve_per_ip_limit(const rg_serve_opts *o, int max_connections);

/* The help text, generated from the table. */
void rg_serve_usage(FILE *f);
#endif
