/* `ragged serve` options: one table (src/server/options.c) gives each option its name, type,
 * range, default and help line; the parser, the defaults and `--help` all read it, so a default
 * is written once. The scheduler's own defaults come from rg_sched_params_default (sched/). */
#ifndef RG_SERVER_OPTIONS_H
#define RG_SERVER_OPTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include "ragged.h"

#define RG_SERVE_EXIT_USAGE 2

typedef struct rg_serve_opts {
	char model[4096];
	const char *host;
	int port;
	rg_device device;
	bool device_set; /* --device given; else cuda when a GPU is present */
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
	double max_batch_ms;          /* time budget of a batch, 0: none */
	int max_client_batch_tokens;  /* tokens per request */
	const char *admission;        /* "time" or "count" */
	int shutdown_timeout_s;       /* drain at SIGTERM */
	double token_delay_us;        /* testing */
} rg_serve_opts;

/* Fill o with every default. */
void rg_serve_opts_default(rg_serve_opts *o);

/* Parse argv[1..argc) (argv[0] is "serve") into o, after the defaults. --name VALUE and
 * --name=VALUE; flags take no value. Strings point into argv. Returns -1 to go on, 0 after
 * --help (printed on stdout), RG_SERVE_EXIT_USAGE after a one-line message on stderr. */
int rg_serve_opts_parse(int argc, char **argv, rg_serve_opts *o);

/* The help text, generated from the table. */
void rg_serve_usage(FILE *f);
#endif
