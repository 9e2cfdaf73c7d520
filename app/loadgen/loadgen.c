/* ragged loadgen: open-loop Poisson HTTP load generator (see loadgen.h for the method).
 *
 * One thread, one epoll set, a pool of at most --connections non-blocking keep-alive sockets.
 * The whole arrival schedule (times, lengths, which requests share the prefix) is drawn up front
 * from the seeded RNG, so two runs with the same --seed send the same requests at the same
 * offsets; token ids of request i come from a generator seeded by (seed, i), independent of
 * dispatch order.
 *
 * Request life: scheduled -> pending (waiting for a free connection) -> in flight -> done.
 * Latency = time the last response byte arrived - scheduled time, so client-side queueing
 * (all connections busy) counts against the server as it would for a real open-loop client;
 * TTFT is measured from the same scheduled time. A keep-alive connection the server closed
 * before answering is reopened and the request is resent once; any other connection failure is
 * a transport error of that request. Responses are read incrementally (stream.h): the HTTP
 * framing, then for a streamed completion the server-sent events, timed at the read that
 * delivered them.
 */
#include "loadgen/loadgen.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/vec.h"
#include "loadgen/stream.h"

#define LG_MAX_REQUESTS 20000000L	/* schedule size cap (memory: ~96 B per request) */
#define LG_MAX_RESPONSE (64u << 20)	/* a buffered response body larger than this is a parse
					 * error (streamed bodies are not buffered) */
#define LG_MAX_SSE_LINE (1u << 20)	/* one SSE line or event's data, bytes */
#define LG_MAX_LEN 1000000		/* largest length a distribution may give, tokens */
#define LG_RECV_BYTES 65536		/* one recv() */
#define LG_TIMER_TAG UINT32_MAX	/* epoll data of the arrival timerfd */
#define LG_CLS_ID 101
#define LG_SEP_ID 102

enum lg_mode { LG_MODE_EMBED, LG_MODE_GENERATE };

enum lg_dist_kind { LG_DIST_UNIFORM, LG_DIST_NORMAL, LG_DIST_FILE, LG_DIST_LENGTHS };

/* A length distribution, in tokens: --dist (embedding requests, [CLS] and [SEP] included; its
 * file:PATH gives LG_DIST_FILE, lines of text), --prompt-len and --output-len (generation; their
 * file:PATH gives LG_DIST_LENGTHS, one length per line). */
struct lg_dist {
	enum lg_dist_kind kind;
	int lo, hi;		/* inclusive clip bounds (uniform: the range) */
	double mean, sd;	/* normal only */
	char *file_buf;		/* file kinds: whole file, lines NUL-terminated in place */
	char **lines;		/* (n_lines) pointers into file_buf */
	int *lens;		/* LG_DIST_LENGTHS: (n_lines) the lengths */
	long n_lines;
};

enum lg_err {
	LG_ERR_NONE = 0,
	LG_ERR_CONNECT,		/* connect() failed */
	LG_ERR_CLOSED,		/* connection reset / closed before a full response */
	LG_ERR_TIMEOUT,		/* no full response within --timeout-ms, or never sent before the end */
	LG_ERR_PARSE,		/* response not valid HTTP/1.x, too large, or (generation) a 2xx
				 * stream that is not SSE of JSON chunks ending in data: [DONE] */
	LG_ERR_STREAM,		/* a 2xx generation response that carried an "error" object */
	LG_ERR_COUNT,
};

static const char *const lg_err_names[LG_ERR_COUNT] = {
	[LG_ERR_NONE] = "none", [LG_ERR_CONNECT] = "connect", [LG_ERR_CLOSED] = "closed",
	[LG_ERR_TIMEOUT] = "timeout", [LG_ERR_PARSE] = "parse", [LG_ERR_STREAM] = "stream",
};

struct lg_opts {
	char host[256];
	char port[16];
	char route[512];
	const char *url;
	enum lg_mode mode;
	const char *dist_spec;
	double rate;		/* requests per second (> 0) */
	double duration_s;	/* measured window; 0 when --requests is used */
	long n_requests;	/* measured requests; 0 when --duration is used */
	double warmup_s;	/* requests scheduled in [0, warmup) are sent but not measured */
	int connections;	/* max requests in flight */
	int deadline_ms;	/* < 0: no deadline field */
	int timeout_ms;		/* per request, from its send time */
	uint64_t seed;
	long token_lo, token_hi;	/* random token ids are uniform in [lo, hi) */
	const char *json_path;
	const char *per_request_path;
	bool text;		/* send lengths as words (TEI /embed) rather than token ids */
	bool quiet;
	struct lg_dist dist;
	/* generation (--mode generate) */
	const char *prompt_spec, *output_spec;
	struct lg_dist prompt_dist;	/* prompt tokens after the shared prefix */
	struct lg_dist output_dist;	/* max_tokens */
	double prefix_frac;	/* share of requests that start with the shared prefix */
	int prefix_len;		/* tokens */
	const char *model;	/* "model" of the body; NULL: none */
	bool stream;
	int tpot_ms;		/* < 0: no tpot_ms field */
	double slo_ttft_ms, slo_tpot_ms;	/* < 0: not part of the SLO */
};

/* One scheduled request. Times are CLOCK_MONOTONIC ns relative to the run start. */
struct lg_req {
	int64_t sched_ns;
	int64_t send_ns;	/* first byte handed to the kernel; -1 when never sent */
	int64_t done_ns;	/* last byte received / failure noticed; -1 when not done */
	int64_t first_ns;	/* generation: first content chunk; -1 when none */
	int64_t last_ns;	/* generation: last content chunk; -1 when none */
	int len;		/* tokens (length dists) or line index (file dist); generation: the
				 * prompt tokens after the shared prefix */
	int out_len;		/* generation: max_tokens */
	int status;		/* HTTP status; 0 on a transport error */
	int tokens_out;		/* generation: output tokens (usage, else content chunks) */
	int usage_prompt;	/* generation: usage.prompt_tokens; -1 when not sent */
	int n_chunks;		/* generation: content chunks */
	float retry_after_s;	/* Retry-After of the response, s; NaN when absent */
	uint8_t err;		/* enum lg_err */
	bool measured;
	bool retried;
	bool prefixed;		/* generation: starts with the shared prefix */
	bool has_usage;
	uint8_t hdr_mask;	/* bit i set when server header i (LG_HDR_*) was present */
	float hdr[4];		/* x-queue-time, x-inference-time, x-total-time, x-batch-size */
};

enum { LG_HDR_QUEUE, LG_HDR_INFER, LG_HDR_TOTAL, LG_HDR_BATCH, LG_HDR_N };
static const char *const lg_hdr_names[LG_HDR_N] = {
	"x-queue-time", "x-inference-time", "x-total-time", "x-batch-size",
};

enum lg_conn_state { LG_CONN_CLOSED, LG_CONN_CONNECTING, LG_CONN_IDLE, LG_CONN_BUSY };

struct lg_run;

struct lg_conn {
	struct lg_run *run;
	int fd;
	enum lg_conn_state state;
	long req;		/* request in flight, -1 when none */
	char *wbuf;		/* (wlen) serialized HTTP request */
	size_t wlen, woff, wcap;
	struct lg_http_rx rx;	/* the response being read */
	struct lg_sse sse;	/* its event stream (streamed generation) */
	struct lg_gen_obs obs;	/* what its events showed (generation) */
	rg_buf body;		/* its body (non-streamed generation) */
	uint64_t n_body;	/* its body bytes so far (not streamed ones) */
	int64_t now;		/* when the bytes being fed arrived, ns from the run start */
	uint8_t hdr_mask;	/* headers of the response being read, as in struct lg_req */
	float hdr[LG_HDR_N];
	float retry_after_s;
	int n_served;		/* responses completed on this socket */
	uint32_t events;	/* current epoll interest */
};

struct lg_run {
	struct lg_opts *o;
	struct addrinfo *ai;
	struct lg_req *reqs;	/* (n_reqs) */
	long n_reqs;
	struct lg_conn *conns;	/* (o->connections) */
	int *free_conns;	/* stack of conns that are IDLE or CLOSED */
	int n_free;
	long *pending;		/* FIFO ring (n_reqs) of due requests waiting for a connection */
	long pend_head, pend_tail;
	int epfd;
	int tfd;		/* timerfd armed at the next arrival (sub-ms wakeups) */
	int n_busy;
	int64_t t0_abs;		/* CLOCK_MONOTONIC ns at run start */
	rg_buf body;		/* request body being built */
	char *recv_buf;		/* (LG_RECV_BYTES) */
	int *prefix;		/* (o->prefix_len) the shared prompt prefix */
	float *itl_ms;		/* (n_itl) inter-chunk gaps of measured successful streams, ms */
	size_t n_itl, cap_itl;
	bool oom;
};

/* ---- time and random numbers ---- */

static int64_t lg_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t lg_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
struct lg_rng {
	uint64_t s[4];
};

static void lg_rng_seed(struct lg_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = lg_splitmix64(&seed);
}

static uint64_t lg_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t lg_rng_next(struct lg_rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = lg_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = lg_rotl(s[3], 45);
	return res;
}

/* Uniform double in [0, 1). */
static double lg_rng_unit(struct lg_rng *r)
{
	return (double)(lg_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [lo, hi] (inclusive; hi - lo < 2^32, bias negligible for our ranges). */
static long lg_rng_range(struct lg_rng *r, long lo, long hi)
{
	return lo + (long)(lg_rng_unit(r) * (double)(hi - lo + 1));
}

/* Standard normal by Box-Muller. */
static double lg_rng_normal(struct lg_rng *r)
{
	double u1 = 1.0 - lg_rng_unit(r), u2 = lg_rng_unit(r);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- option parsing ---- */

static void lg_usage(FILE *f)
{
	fprintf(f,
		"usage: ragged loadgen [options]\n"
		"  --mode MODE          embed (default) or generate\n"
		"  --url URL            server base URL (default http://127.0.0.1:8080)\n"
		"  --route PATH         embed: /v1/embeddings (token-id arrays, default) or /embed\n"
		"                       (text); generate: default /v1/completions\n"
		"  --rate R             offered load, requests/s, Poisson arrivals (default 10)\n"
		"  --duration S         measured window in seconds (default 10), or\n"
		"  --requests N         number of measured requests\n"
		"  --warmup S           extra seconds of load before the window, not measured (0)\n"
		"  --connections C      max requests in flight (default 64)\n"
		"  --deadline-ms D      add \"deadline_ms\": D to every body\n"
		"  --timeout-ms T       per-request timeout from its send time (default 30000)\n"
		"  --token-ids LO:HI    random token ids are uniform in [LO, HI) (default 1000:29000)\n"
		"  --seed S             RNG seed (default 1)\n"
		"  --json OUT           also write the results as JSON to OUT\n"
		"  --per-request OUT    write one JSON line per request (times, status, tokens) to OUT\n"
		"  --quiet              no table on stdout\n"
		"embed mode:\n"
		"  --dist SPEC          uniform:LO:HI | normal:MEAN:SD:LO:HI | file:PATH (lines of\n"
		"                       text); lengths in tokens incl. [CLS]/[SEP] (default\n"
		"                       uniform:2:100)\n"
		"  --text               send lengths as words of text even on /v1/embeddings\n"
		"generate mode (POST /v1/completions, \"prompt\": [token ids], \"ignore_eos\": true):\n"
		"  --prompt-len SPEC    prompt tokens: uniform:LO:HI | normal:MEAN:SD:LO:HI |\n"
		"                       file:PATH (one length per line); default uniform:16:512\n"
		"  --output-len SPEC    max_tokens, same forms (default uniform:16:256)\n"
		"  --shared-prefix-frac F  share of requests whose prompt starts with one shared\n"
		"                       prefix (default 0); that prefix comes before the drawn prompt\n"
		"  --shared-prefix-len N   tokens of the shared prefix (default 256)\n"
		"  --model NAME         \"model\" of the body (default: none sent)\n"
		"  --no-stream          \"stream\": false (only e2e latency and usage are measured)\n"
		"  --tpot-ms T          add \"tpot_ms\": T to every body\n"
		"  --slo-ttft-ms T      goodput SLO: time to first token <= T ms (from the scheduled\n"
		"  --slo-tpot-ms T      time) and time per output token <= T ms; goodput counts the\n"
		"                       requests meeting every SLO given (streaming only)\n");
}

static int lg_parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return (errno || end == s || *end || !isfinite(*out)) ? -1 : 0;
}

static int lg_parse_long(const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return (errno || end == s || *end) ? -1 : 0;
}

/* Load the non-empty lines of path for a file:PATH distribution. Returns 0 or -1 (message
 * printed). */
static int lg_dist_load_file(struct lg_dist *d, const char *path)
{
	FILE *f = fopen(path, "rb");
	long size;
	size_t cap = 0;

	if (!f) {
		fprintf(stderr, "loadgen: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out_io;
	d->file_buf = malloc((size_t)size + 1);
	if (!d->file_buf)
		goto out_io;
	if (fread(d->file_buf, 1, (size_t)size, f) != (size_t)size)
		goto out_io;
	d->file_buf[size] = '\0';
	fclose(f);
	f = NULL;
	for (char *line = d->file_buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		size_t n = strlen(line);
		if (n && line[n - 1] == '\r')
			line[--n] = '\0';
		if (!n)
			continue;
		if (!rg_vec_reserve((void **)&d->lines, &cap, (size_t)d->n_lines + 1,
				    sizeof(*d->lines), 256))
			goto out_io;
		d->lines[d->n_lines++] = line;
	}
	if (!d->n_lines) {
		fprintf(stderr, "loadgen: %s has no non-empty line\n", path);
		return -1;
	}
	return 0;
out_io:
	fprintf(stderr, "loadgen: cannot read %s\n", path);
	if (f)
		fclose(f);
	return -1;
}

/* Parse a length distribution given as option opt: uniform:LO:HI | normal:MEAN:SD:LO:HI |
 * file:PATH, lengths in [min_lo, LG_MAX_LEN]. file:PATH holds lines of text (LG_DIST_FILE) or,
 * when lengths is set, one length per line (LG_DIST_LENGTHS). Returns 0 or -1 (message
 * printed). */
static int lg_dist_parse(struct lg_dist *d, const char *spec, const char *opt, int min_lo,
			 bool lengths)
{
	double v[4];
	int nv = 0;
	const char *p;

	if (!strncmp(spec, "file:", 5)) {
		d->kind = lengths ? LG_DIST_LENGTHS : LG_DIST_FILE;
		if (lg_dist_load_file(d, spec + 5))
			return -1;
		if (!lengths)
			return 0;
		d->lens = malloc((size_t)d->n_lines * sizeof(*d->lens));
		if (!d->lens) {
			fprintf(stderr, "loadgen: out of memory\n");
			return -1;
		}
		for (long i = 0; i < d->n_lines; i++) {
			long x;
			if (lg_parse_long(d->lines[i], &x) || x < min_lo || x > LG_MAX_LEN) {
				fprintf(stderr, "loadgen: %s %s: non-empty line %ld is not a length in [%d, %d]:"
					" '%s'\n", opt, spec + 5, i + 1, min_lo, LG_MAX_LEN,
					d->lines[i]);
				return -1;
			}
			d->lens[i] = (int)x;
			if (!i || x < d->lo)
				d->lo = (int)x;
			if (!i || x > d->hi)
				d->hi = (int)x;
		}
		return 0;
	}
	if (!strncmp(spec, "uniform:", 8)) {
		d->kind = LG_DIST_UNIFORM;
		p = spec + 8;
	} else if (!strncmp(spec, "normal:", 7)) {
		d->kind = LG_DIST_NORMAL;
		p = spec + 7;
	} else {
		goto out_bad;
	}
	while (*p && nv < 4) {
		char *end;
		v[nv++] = strtod(p, &end);
		if (end == p || (*end && *end != ':') || !isfinite(v[nv - 1]))
			goto out_bad;
		p = *end ? end + 1 : end;
	}
	if (*p)
		goto out_bad;
	if (nv != (d->kind == LG_DIST_UNIFORM ? 2 : 4))
		goto out_bad;
	if (d->kind == LG_DIST_NORMAL) {
		if (!(v[1] >= 0))
			goto out_bad;
		d->mean = v[0];
		d->sd = v[1];
	}
	double lo = v[nv - 2], hi = v[nv - 1];
	if (!(lo >= min_lo && hi >= lo && hi <= LG_MAX_LEN))
		goto out_bad;
	d->lo = (int)lo;
	d->hi = (int)hi;
	return 0;
out_bad:
	fprintf(stderr, "loadgen: bad %s '%s' (uniform:LO:HI | normal:MEAN:SD:LO:HI | file:PATH,"
		" %d <= LO <= HI <= %d)\n", opt, spec, min_lo, LG_MAX_LEN);
	return -1;
}

static void lg_dist_free(struct lg_dist *d)
{
	free(d->lens);
	free(d->lines);
	free(d->file_buf);
}

/* Draw one length (tokens) or, for a file of text, one line index. */
static int lg_dist_draw(const struct lg_dist *d, struct lg_rng *r)
{
	double x;

	switch (d->kind) {
	case LG_DIST_UNIFORM:
		return (int)lg_rng_range(r, d->lo, d->hi);
	case LG_DIST_NORMAL:
		x = nearbyint(d->mean + d->sd * lg_rng_normal(r));
		if (x < d->lo)
			x = d->lo;
		if (x > d->hi)
			x = d->hi;
		return (int)x;
	case LG_DIST_FILE:
		return (int)lg_rng_range(r, 0, d->n_lines - 1);
	case LG_DIST_LENGTHS:
		return d->lens[lg_rng_range(r, 0, d->n_lines - 1)];
	}
	return d->lo;
}

/* Split http://host[:port][/path] into o->host, o->port (and o->route when route_set is false). */
static int lg_parse_url(struct lg_opts *o, const char *url, bool route_set)
{
	const char *p = url, *host, *host_end, *path;
	size_t n;

	if (strncmp(p, "http://", 7)) {
		fprintf(stderr, "loadgen: --url must start with http:// (got '%s')\n", url);
		return -1;
	}
	host = p + 7;
	path = strchr(host, '/');
	if (!path)
		path = host + strlen(host);
	if (*host == '[') {	/* [v6]:port */
		host_end = memchr(host, ']', (size_t)(path - host));
		if (!host_end)
			goto out_bad;
		n = (size_t)(host_end - host - 1);
		host++;
		host_end++;
	} else {
		host_end = memchr(host, ':', (size_t)(path - host));
		if (!host_end)
			host_end = path;
		n = (size_t)(host_end - host);
	}
	if (!n || n >= sizeof(o->host))
		goto out_bad;
	memcpy(o->host, host, n);
	o->host[n] = '\0';
	if (*host_end == ':') {
		n = (size_t)(path - host_end - 1);
		if (!n || n >= sizeof(o->port))
			goto out_bad;
		memcpy(o->port, host_end + 1, n);
		o->port[n] = '\0';
	} else {
		strcpy(o->port, "80");
	}
	if (!route_set && *path && strcmp(path, "/")) {
		if (strlen(path) >= sizeof(o->route))
			goto out_bad;
		strcpy(o->route, path);
	}
	return 0;
out_bad:
	fprintf(stderr, "loadgen: cannot parse --url '%s'\n", url);
	return -1;
}

/* Returns 0, 1 when --help was printed, -1 on bad usage (message printed). */
static int lg_parse_args(struct lg_opts *o, int argc, char **argv)
{
	enum { O_URL = 256, O_ROUTE, O_RATE, O_DURATION, O_REQUESTS, O_WARMUP, O_DIST, O_CONN,
	       O_DEADLINE, O_TIMEOUT, O_SEED, O_JSON, O_TEXT, O_QUIET, O_HELP, O_MODE, O_TOKEN_IDS,
	       O_PER_REQUEST, O_PROMPT_LEN, O_OUTPUT_LEN, O_PREFIX_FRAC, O_PREFIX_LEN, O_MODEL,
	       O_NO_STREAM, O_TPOT, O_SLO_TTFT, O_SLO_TPOT };
	static const struct option longopts[] = {
		{"url", required_argument, NULL, O_URL},
		{"route", required_argument, NULL, O_ROUTE},
		{"rate", required_argument, NULL, O_RATE},
		{"duration", required_argument, NULL, O_DURATION},
		{"requests", required_argument, NULL, O_REQUESTS},
		{"warmup", required_argument, NULL, O_WARMUP},
		{"dist", required_argument, NULL, O_DIST},
		{"connections", required_argument, NULL, O_CONN},
		{"deadline-ms", required_argument, NULL, O_DEADLINE},
		{"timeout-ms", required_argument, NULL, O_TIMEOUT},
		{"seed", required_argument, NULL, O_SEED},
		{"json", required_argument, NULL, O_JSON},
		{"text", no_argument, NULL, O_TEXT},
		{"quiet", no_argument, NULL, O_QUIET},
		{"help", no_argument, NULL, O_HELP},
		{"mode", required_argument, NULL, O_MODE},
		{"token-ids", required_argument, NULL, O_TOKEN_IDS},
		{"per-request", required_argument, NULL, O_PER_REQUEST},
		{"prompt-len", required_argument, NULL, O_PROMPT_LEN},
		{"output-len", required_argument, NULL, O_OUTPUT_LEN},
		{"shared-prefix-frac", required_argument, NULL, O_PREFIX_FRAC},
		{"shared-prefix-len", required_argument, NULL, O_PREFIX_LEN},
		{"model", required_argument, NULL, O_MODEL},
		{"no-stream", no_argument, NULL, O_NO_STREAM},
		{"tpot-ms", required_argument, NULL, O_TPOT},
		{"slo-ttft-ms", required_argument, NULL, O_SLO_TTFT},
		{"slo-tpot-ms", required_argument, NULL, O_SLO_TPOT},
		{NULL, 0, NULL, 0},
	};
	const char *embed_only = NULL, *gen_only = NULL;	/* an option of one mode, as given */
	bool route_set = false, dur_set = false;
	double d;
	long l;
	int c, idx;

	o->url = "http://127.0.0.1:8080";
	o->route[0] = '\0';
	o->dist_spec = "uniform:2:100";
	o->prompt_spec = "uniform:16:512";
	o->output_spec = "uniform:16:256";
	o->prefix_len = 256;
	o->stream = true;
	o->tpot_ms = -1;
	o->slo_ttft_ms = o->slo_tpot_ms = -1;
	o->rate = 10.0;
	o->duration_s = 10.0;
	o->connections = 64;
	o->deadline_ms = -1;
	o->timeout_ms = 30000;
	o->seed = 1;
	o->token_lo = 1000;
	o->token_hi = 29000;
	optind = 0;	/* glibc: full re-initialisation, we may not be the first getopt user */
	while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
		switch (c) {
		case O_DIST:
		case O_TEXT:
			embed_only = longopts[idx].name;
			break;
		case O_PROMPT_LEN:
		case O_OUTPUT_LEN:
		case O_PREFIX_FRAC:
		case O_PREFIX_LEN:
		case O_MODEL:
		case O_NO_STREAM:
		case O_TPOT:
		case O_SLO_TTFT:
		case O_SLO_TPOT:
			gen_only = longopts[idx].name;
			break;
		}
		switch (c) {
		case O_URL:
			o->url = optarg;
			break;
		case O_ROUTE:
			if (optarg[0] != '/' || strlen(optarg) >= sizeof(o->route)) {
				fprintf(stderr, "loadgen: --route must start with '/'\n");
				return -1;
			}
			strcpy(o->route, optarg);
			route_set = true;
			break;
		case O_MODE:
			if (!strcmp(optarg, "embed")) {
				o->mode = LG_MODE_EMBED;
			} else if (!strcmp(optarg, "generate")) {
				o->mode = LG_MODE_GENERATE;
			} else {
				fprintf(stderr, "loadgen: --mode must be embed or generate\n");
				return -1;
			}
			break;
		case O_RATE:
			if (lg_parse_double(optarg, &d) || !(d > 0) || d > 1e6) {
				fprintf(stderr, "loadgen: --rate must be in (0, 1e6]\n");
				return -1;
			}
			o->rate = d;
			break;
		case O_DURATION:
			if (lg_parse_double(optarg, &d) || !(d > 0) || d > 86400) {
				fprintf(stderr, "loadgen: --duration must be in (0, 86400]\n");
				return -1;
			}
			o->duration_s = d;
			dur_set = true;
			break;
		case O_REQUESTS:
			if (lg_parse_long(optarg, &l) || l <= 0 || l > LG_MAX_REQUESTS) {
				fprintf(stderr, "loadgen: --requests must be in [1, %ld]\n",
					LG_MAX_REQUESTS);
				return -1;
			}
			o->n_requests = l;
			break;
		case O_WARMUP:
			if (lg_parse_double(optarg, &d) || d < 0 || d > 3600) {
				fprintf(stderr, "loadgen: --warmup must be in [0, 3600]\n");
				return -1;
			}
			o->warmup_s = d;
			break;
		case O_DIST:
			o->dist_spec = optarg;
			break;
		case O_CONN:
			if (lg_parse_long(optarg, &l) || l < 1 || l > 65536) {
				fprintf(stderr, "loadgen: --connections must be in [1, 65536]\n");
				return -1;
			}
			o->connections = (int)l;
			break;
		case O_DEADLINE:
			if (lg_parse_long(optarg, &l) || l < 0 || l > 86400000) {
				fprintf(stderr, "loadgen: --deadline-ms must be in [0, 86400000]\n");
				return -1;
			}
			o->deadline_ms = (int)l;
			break;
		case O_TIMEOUT:
			if (lg_parse_long(optarg, &l) || l < 1 || l > 3600000) {
				fprintf(stderr, "loadgen: --timeout-ms must be in [1, 3600000]\n");
				return -1;
			}
			o->timeout_ms = (int)l;
			break;
		case O_SEED:
			if (lg_parse_long(optarg, &l)) {
				fprintf(stderr, "loadgen: bad --seed\n");
				return -1;
			}
			o->seed = (uint64_t)l;
			break;
		case O_TOKEN_IDS: {
			char *end;
			errno = 0;
			o->token_lo = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end != ':' ||
			    lg_parse_long(end + 1, &o->token_hi) || o->token_lo < 0 ||
			    o->token_hi <= o->token_lo || o->token_hi > INT32_MAX) {
				fprintf(stderr, "loadgen: --token-ids must be LO:HI with "
					"0 <= LO < HI <= %d\n", INT32_MAX);
				return -1;
			}
			break;
		}
		case O_JSON:
			o->json_path = optarg;
			break;
		case O_PER_REQUEST:
			o->per_request_path = optarg;
			break;
		case O_TEXT:
			o->text = true;
			break;
		case O_QUIET:
			o->quiet = true;
			break;
		case O_PROMPT_LEN:
			o->prompt_spec = optarg;
			break;
		case O_OUTPUT_LEN:
			o->output_spec = optarg;
			break;
		case O_PREFIX_FRAC:
			if (lg_parse_double(optarg, &d) || d < 0 || d > 1) {
				fprintf(stderr, "loadgen: --shared-prefix-frac must be in [0, 1]\n");
				return -1;
			}
			o->prefix_frac = d;
			break;
		case O_PREFIX_LEN:
			if (lg_parse_long(optarg, &l) || l < 1 || l > LG_MAX_LEN) {
				fprintf(stderr, "loadgen: --shared-prefix-len must be in [1, %d]\n",
					LG_MAX_LEN);
				return -1;
			}
			o->prefix_len = (int)l;
			break;
		case O_MODEL:
			o->model = optarg;
			break;
		case O_NO_STREAM:
			o->stream = false;
			break;
		case O_TPOT:
			if (lg_parse_long(optarg, &l) || l < 0 || l > 86400000) {
				fprintf(stderr, "loadgen: --tpot-ms must be in [0, 86400000]\n");
				return -1;
			}
			o->tpot_ms = (int)l;
			break;
		case O_SLO_TTFT:
		case O_SLO_TPOT:
			if (lg_parse_double(optarg, &d) || !(d > 0) || d > 86400000) {
				fprintf(stderr, "loadgen: --%s must be in (0, 86400000]\n",
					longopts[idx].name);
				return -1;
			}
			*(c == O_SLO_TTFT ? &o->slo_ttft_ms : &o->slo_tpot_ms) = d;
			break;
		case 'h':
		case O_HELP:
			lg_usage(stdout);
			return 1;
		default:
			lg_usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "loadgen: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (o->n_requests && dur_set) {
		fprintf(stderr, "loadgen: give --duration or --requests, not both\n");
		return -1;
	}
	if (o->mode == LG_MODE_EMBED && gen_only) {
		fprintf(stderr, "loadgen: --%s needs --mode generate\n", gen_only);
		return -1;
	}
	if (o->mode == LG_MODE_GENERATE && embed_only) {
		fprintf(stderr, "loadgen: --%s is an embed-mode option (generate: --prompt-len)\n",
			embed_only);
		return -1;
	}
	if (!o->stream && (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0)) {
		fprintf(stderr, "loadgen: --slo-ttft-ms / --slo-tpot-ms need a streamed response "
			"(drop --no-stream)\n");
		return -1;
	}
	if (o->n_requests)
		o->duration_s = 0;
	else if (o->rate * (o->duration_s + o->warmup_s) * 1.5 + 100 > (double)LG_MAX_REQUESTS) {
		fprintf(stderr, "loadgen: rate x duration too large (cap %ld requests)\n",
			LG_MAX_REQUESTS);
		return -1;
	}
	if (lg_parse_url(o, o->url, route_set))
		return -1;
	if (!o->route[0])
		strcpy(o->route, o->mode == LG_MODE_GENERATE ? "/v1/completions" : "/v1/embeddings");
	if (o->mode == LG_MODE_GENERATE) {
		if (lg_dist_parse(&o->prompt_dist, o->prompt_spec, "--prompt-len", 1, true) ||
		    lg_dist_parse(&o->output_dist, o->output_spec, "--output-len", 1, true))
			return -1;
		if (o->prefix_frac > 0 && o->prompt_dist.hi + (long)o->prefix_len > LG_MAX_LEN) {
			fprintf(stderr, "loadgen: shared prefix + prompt longer than %d tokens\n",
				LG_MAX_LEN);
			return -1;
		}
		return 0;
	}
	if (!strcmp(o->route, "/embed"))
		o->text = true;
	return lg_dist_parse(&o->dist, o->dist_spec, "--dist", 2, false);
}

/* ---- schedule ---- */

/* Draw Poisson arrival times (exponential gaps, mean 1/rate) and lengths for the warmup and
 * measured phases; for generation also the output length and whether the request starts with
 * the shared prefix (Bernoulli(--shared-prefix-frac)), and the prefix itself (ids from its own
 * generator, so it does not depend on the schedule). Embedding schedules draw exactly what they
 * drew before generation existed. Returns 0 or -1 on OOM. */
static int lg_schedule(struct lg_run *run)
{
	struct lg_opts *o = run->o;
	struct lg_rng rng;
	double t = 0.0, warm_end = o->warmup_s, end = o->warmup_s + o->duration_s;
	size_t cap = 1024;
	long n = 0, n_measured = 0;

	lg_rng_seed(&rng, o->seed);
	run->reqs = malloc((size_t)cap * sizeof(*run->reqs));
	if (!run->reqs)
		return -1;
	for (;;) {
		t += -log(1.0 - lg_rng_unit(&rng)) / o->rate;
		bool measured = t >= warm_end;
		if (o->n_requests ? n_measured >= o->n_requests : t >= end)
			break;
		if (n >= LG_MAX_REQUESTS ||
		    !rg_vec_reserve((void **)&run->reqs, &cap, (size_t)n + 1, sizeof(*run->reqs),
				    1024))
			return -1;
		struct lg_req *r = &run->reqs[n++];
		memset(r, 0, sizeof(*r));
		r->sched_ns = (int64_t)(t * 1e9);
		r->send_ns = -1;
		r->done_ns = -1;
		r->measured = measured;
		r->first_ns = -1;
		r->last_ns = -1;
		r->usage_prompt = -1;
		r->retry_after_s = NAN;
		r->measured = measured;
		if (o->mode == LG_MODE_GENERATE) {
			r->len = lg_dist_draw(&o->prompt_dist, &rng);
			r->out_len = lg_dist_draw(&o->output_dist, &rng);
			r->prefixed = o->prefix_frac > 0 && lg_rng_unit(&rng) < o->prefix_frac;
		} else {
			r->len = lg_dist_draw(&o->dist, &rng);
		}
		n_measured += measured;
	}
	run->n_reqs = n;
	if (o->mode == LG_MODE_GENERATE && o->prefix_frac > 0) {
		uint64_t s = o->seed ^ 0x5052454649584553ULL;	/* "PREFIXES" */
		run->prefix = malloc((size_t)o->prefix_len * sizeof(*run->prefix));
		if (!run->prefix)
			return -1;
		lg_rng_seed(&rng, lg_splitmix64(&s));
		for (int k = 0; k < o->prefix_len; k++)
			run->prefix[k] = (int)lg_rng_range(&rng, o->token_lo, o->token_hi - 1);
	}
	return 0;
}

/* ---- request bodies ---- */

/* English words that are one wordpiece each in the BERT uncased vocabulary, so "n words" is
 * n tokens after [CLS]/[SEP] are added. */
static const char *const lg_words[] = {
	"the", "of", "and", "to", "in", "was", "he", "is", "for", "on", "as", "with", "by", "his",
	"at", "from", "her", "that", "it", "an", "were", "are", "which", "this", "also", "be",
	"has", "or", "had", "first", "one", "their", "its", "new", "after", "but", "who", "not",
	"they", "have", "she", "two", "been", "other", "when", "there", "all", "time", "during",
	"into", "school", "more", "may", "years", "over", "only", "year", "most", "would", "world",
	"city", "some", "where", "between", "later", "three", "state", "such", "then", "national",
	"used", "made", "known", "under", "many", "university", "united", "while", "part", "season",
	"team", "these", "american", "than", "film", "second", "born", "south", "became", "states",
	"war", "through", "being", "including", "both", "before", "north", "high", "however",
	"people",
};

/* Write id in decimal at dst (room for 10 digits); returns the digits written. Hand-formatted:
 * at thousands of requests/s of 500 tokens, snprintf per id would cost the client a good part
 * of a core. */
static int lg_put_id(char *dst, long id)
{
	char tmp[12];
	int nd = 0, k = 0;

	do {
		tmp[nd++] = (char)('0' + id % 10);
		id /= 10;
	} while (id);
	while (nd)
		dst[k++] = tmp[--nd];
	return k;
}

/* Append n ids to b, each as ", ID" (the first without ", " when bare_first): the fixed ones
 * first (fixed may be NULL when n_fixed is 0), then n_rand drawn from rng uniform in
 * [o->token_lo, o->token_hi). */
static void lg_put_ids(rg_buf *b, const struct lg_opts *o, const int *fixed, int n_fixed,
		       struct lg_rng *rng, int n_rand, bool bare_first)
{
	if (!rg_buf_reserve(b, (size_t)(n_fixed + n_rand) * 12))
		return;
	for (int k = 0; k < n_fixed + n_rand; k++) {
		long id = k < n_fixed ? fixed[k] : lg_rng_range(rng, o->token_lo, o->token_hi - 1);
		if (k || !bare_first) {
			b->data[b->len++] = ',';
			b->data[b->len++] = ' ';
		}
		b->len += (size_t)lg_put_id(b->data + b->len, id);
	}
	b->data[b->len] = '\0';
}

/* The JSON body of embedding request r into b. */
static void lg_body_embed(struct lg_run *run, rg_buf *b, const struct lg_req *r,
			  struct lg_rng *rng)
{
	struct lg_opts *o = run->o;
	const char *key = strcmp(o->route, "/embed") ? "input" : "inputs";

	rg_buf_printf(b, "{\"%s\": ", key);
	if (o->dist.kind == LG_DIST_FILE) {
		if (!strcmp(key, "inputs"))
			rg_buf_put(b, "[", 1);
		rg_buf_json_str(b, o->dist.lines[r->len], strlen(o->dist.lines[r->len]));
		if (!strcmp(key, "inputs"))
			rg_buf_put(b, "]", 1);
	} else if (o->text) {
		/* n words + [CLS] + [SEP]; an empty text is not a useful request, so at least 1. */
		int n_words = r->len - 2 > 0 ? r->len - 2 : 1;
		rg_buf_put(b, "[\"", 2);
		for (int k = 0; k < n_words; k++) {
			const char *w = lg_words[lg_rng_next(rng) %
						 (sizeof(lg_words) / sizeof(lg_words[0]))];
			if (k)
				rg_buf_put(b, " ", 1);
			rg_buf_put(b, w, strlen(w));
		}
		rg_buf_put(b, "\"]", 2);
	} else {
		rg_buf_printf(b, "[[%d", LG_CLS_ID);
		lg_put_ids(b, o, NULL, 0, rng, r->len > 2 ? r->len - 2 : 0, false);
		rg_buf_printf(b, ", %d]]", LG_SEP_ID);
	}
	if (o->deadline_ms >= 0)
		rg_buf_printf(b, ", \"deadline_ms\": %d", o->deadline_ms);
	rg_buf_put(b, "}", 1);
}

/* The JSON body of completion request r into b (OpenAI POST /v1/completions with a token-id
 * prompt; ignore_eos is vLLM's, deadline_ms and tpot_ms ragged's). */
static void lg_body_generate(struct lg_run *run, rg_buf *b, const struct lg_req *r,
			     struct lg_rng *rng)
{
	struct lg_opts *o = run->o;

	rg_buf_put(b, "{", 1);
	if (o->model) {
		rg_buf_puts(b, "\"model\": ");
		rg_buf_json_str(b, o->model, strlen(o->model));
		rg_buf_puts(b, ", ");
	}
	rg_buf_puts(b, "\"prompt\": [");
	lg_put_ids(b, o, run->prefix, r->prefixed ? o->prefix_len : 0, rng, r->len, true);
	rg_buf_printf(b, "], \"max_tokens\": %d, \"ignore_eos\": true, \"stream\": %s", r->out_len,
		      o->stream ? "true" : "false");
	if (o->stream)
		rg_buf_puts(b, ", \"stream_options\": {\"include_usage\": true}");
	if (o->deadline_ms >= 0)
		rg_buf_printf(b, ", \"deadline_ms\": %d", o->deadline_ms);
	if (o->tpot_ms >= 0)
		rg_buf_printf(b, ", \"tpot_ms\": %d", o->tpot_ms);
	rg_buf_put(b, "}", 1);
}

/* Serialize the HTTP request for reqs[i] into c->wbuf. Returns 0 or -1 on OOM. */
static int lg_build_request(struct lg_run *run, struct lg_conn *c, long i)
{
	struct lg_opts *o = run->o;
	rg_buf *b = &run->body;
	struct lg_rng rng;
	uint64_t s = o->seed * 0x100000001b3ULL ^ (uint64_t)i;
	bool sse = o->mode == LG_MODE_GENERATE && o->stream;

	lg_rng_seed(&rng, lg_splitmix64(&s));
	b->len = 0;
	if (o->mode == LG_MODE_GENERATE)
		lg_body_generate(run, b, &run->reqs[i], &rng);
	else
		lg_body_embed(run, b, &run->reqs[i], &rng);
	if (b->oom)
		return -1;

	char head[1024];
	int hn = snprintf(head, sizeof(head),
			  "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
			  "Accept: %s\r\nConnection: keep-alive\r\nX-Request-Id: %ld\r\n"
			  "Content-Length: %zu\r\n\r\n", o->route, o->host, o->port,
			  sse ? "text/event-stream" : "application/json", i, b->len);
	if (hn < 0 || (size_t)hn >= sizeof(head))
		return -1;
	size_t need = (size_t)hn + b->len;
	if (need > c->wcap) {
		char *p = realloc(c->wbuf, need);
		if (!p)
			return -1;
		c->wbuf = p;
		c->wcap = need;
	}
	memcpy(c->wbuf, head, (size_t)hn);
	memcpy(c->wbuf + hn, b->data, b->len);
	c->wlen = need;
	c->woff = 0;
	return 0;
}

/* ---- HTTP response parsing ---- */

/* Retry-After (RFC 9110 sec. 10.2.3): delay-seconds or an HTTP-date, as seconds from now;
 * NaN when it is neither. */
static float lg_retry_after(const char *v, size_t n)
{
	char val[64], *end;
	struct tm tm;

	if (!n || n >= sizeof(val))
		return NAN;
	memcpy(val, v, n);
	val[n] = '\0';
	double x = strtod(val, &end);
	if (end != val && !*end && isfinite(x) && x >= 0)
		return (float)x;
	memset(&tm, 0, sizeof(tm));
	end = strptime(val, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (!end || *end)
		return NAN;
	double d = difftime(timegm(&tm), time(NULL));
	return (float)(d > 0 ? d : 0);
}

/* lg_http_rx header callback: the server timing headers and Retry-After. */
static void lg_on_header(void *ctx, const char *name, size_t kn, const char *v, size_t vn)
{
	struct lg_conn *c = ctx;

	if (kn == 11 && !strncasecmp(name, "retry-after", kn)) {
		c->retry_after_s = lg_retry_after(v, vn);
		return;
	}
	for (int h = 0; h < LG_HDR_N; h++) {
		if (kn == strlen(lg_hdr_names[h]) && !strncasecmp(name, lg_hdr_names[h], kn)) {
			char val[64], *end;
			if (!vn || vn >= sizeof(val))
				return;
			memcpy(val, v, vn);
			val[vn] = '\0';
			double x = strtod(val, &end);
			if (end != val && isfinite(x)) {
				c->hdr[h] = (float)x;
				c->hdr_mask |= (uint8_t)(1u << h);
			}
		}
	}
}

/* lg_sse event callback: one event of a streamed completion, timed at the read. */
static int lg_on_event(void *ctx, const char *data, size_t n)
{
	struct lg_conn *c = ctx;

	return lg_gen_obs_event(&c->obs, data, n, c->now);
}

/* lg_http_rx body callback. A 2xx streamed completion goes to the SSE reader; a non-streamed
 * one is buffered for its usage; anything else is only counted. Returns non-zero (the response
 * is bad) on a bad stream, or a buffered body over LG_MAX_RESPONSE. */
static int lg_on_body(void *ctx, const char *data, size_t n)
{
	struct lg_conn *c = ctx;
	const struct lg_opts *o = c->run->o;
	bool ok = c->rx.status >= 200 && c->rx.status <= 299;

	if (ok && o->mode == LG_MODE_GENERATE && o->stream)
		return lg_sse_feed(&c->sse, data, n, lg_on_event, c);
	c->n_body += n;
	if (c->n_body > LG_MAX_RESPONSE)
		return -1;
	if (ok && o->mode == LG_MODE_GENERATE) {
		rg_buf_put(&c->body, data, n);
		return c->body.oom ? -1 : 0;
	}
	return 0;	/* counted, not kept */
}

/* ---- connections ---- */

static int64_t lg_now(const struct lg_run *run)
{
	return lg_mono_ns() - run->t0_abs;
}

static void lg_conn_set_events(struct lg_run *run, int ci, uint32_t ev)
{
	struct lg_conn *c = &run->conns[ci];
	struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)ci};

	if (c->events == ev)
		return;
	if (epoll_ctl(run->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0)
		c->events = ev;
}

static void lg_conn_close(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];

	if (c->fd >= 0) {
		epoll_ctl(run->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->state = LG_CONN_CLOSED;
	c->n_served = 0;
	c->events = 0;
}

static void lg_conn_release(struct lg_run *run, int ci)
{
	run->conns[ci].req = -1;
	run->free_conns[run->n_free++] = ci;
	run->n_busy--;
}

/* Finish the conn's request with a transport error and free the conn (closed). */
static void lg_conn_fail(struct lg_run *run, int ci, enum lg_err err)
{
	struct lg_req *r = &run->reqs[run->conns[ci].req];

	r->status = 0;
	r->err = (uint8_t)err;
	r->done_ns = lg_now(run);
	lg_conn_close(run, ci);
	lg_conn_release(run, ci);
}

static void lg_conn_write(struct lg_run *run, int ci);

/* Open a socket for conn ci and start connecting. Returns 0 or -1 (connect failed). */
static int lg_conn_open(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];
	const struct addrinfo *ai = run->ai;
	int one = 1;

	c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		       ai->ai_protocol);
	if (c->fd < 0)
		return -1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct epoll_event e = {.events = EPOLLOUT | EPOLLIN, .data.u32 = (uint32_t)ci};
	if (epoll_ctl(run->epfd, EPOLL_CTL_ADD, c->fd, &e)) {
		close(c->fd);
		c->fd = -1;
		return -1;
	}
	c->events = e.events;
	c->n_served = 0;
	if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0) {
		c->state = LG_CONN_BUSY;
		return 0;
	}
	if (errno == EINPROGRESS) {
		c->state = LG_CONN_CONNECTING;
		return 0;
	}
	lg_conn_close(run, ci);
	return -1;
}

/* Send request i on conn ci (opening it first if closed). */
static void lg_dispatch(struct lg_run *run, int ci, long i)
{
	struct lg_conn *c = &run->conns[ci];
	struct lg_req *r = &run->reqs[i];

	c->req = i;
	run->n_busy++;
	if (lg_build_request(run, c, i)) {
		run->oom = true;
		r->send_ns = lg_now(run);
		lg_conn_fail(run, ci, LG_ERR_CLOSED);
		return;
	}
	if (r->send_ns < 0)
		r->send_ns = lg_now(run);
	lg_http_rx_reset(&c->rx);
	lg_sse_reset(&c->sse);
	lg_gen_obs_reset(&c->obs);
	c->body.len = 0;
	c->n_body = 0;
	c->hdr_mask = 0;
	c->retry_after_s = NAN;
	if (c->state == LG_CONN_CLOSED) {
		if (lg_conn_open(run, ci)) {
			r->status = 0;
			r->err = LG_ERR_CONNECT;
			r->done_ns = lg_now(run);
			lg_conn_release(run, ci);
			return;
		}
		if (c->state == LG_CONN_CONNECTING)
			return;
	}
	c->state = LG_CONN_BUSY;
	lg_conn_write(run, ci);
}

/* A keep-alive socket died before any response byte: reopen and resend once, else fail. */
static void lg_conn_broken(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];
	struct lg_req *r = &run->reqs[c->req];
	long i = c->req;

	if (c->rx.n_in == 0 && c->n_served > 0 && !r->retried) {
		r->retried = true;
		lg_conn_close(run, ci);
		run->n_busy--;
		lg_dispatch(run, ci, i);
		return;
	}
	lg_conn_fail(run, ci, LG_ERR_CLOSED);
}

static void lg_conn_write(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];

	while (c->woff < c->wlen) {
		ssize_t k = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
		if (k > 0) {
			c->woff += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			lg_conn_set_events(run, ci, EPOLLIN | EPOLLOUT);
			return;
		}
		lg_conn_broken(run, ci);
		return;
	}
	lg_conn_set_events(run, ci, EPOLLIN);
}

/* The verdict on a complete 2xx generation response (0 or an enum lg_err), and its numbers into
 * r; a measured stream's inter-chunk gaps join the run's. */
static int lg_gen_finish(struct lg_run *run, struct lg_conn *c, struct lg_req *r)
{
	struct lg_gen_obs *g = &c->obs;

	if (run->o->stream) {
		if (!g->done)
			return LG_ERR_PARSE;	/* no data: [DONE]: not a complete stream */
	} else if (lg_gen_obs_body(g, c->body.data ? c->body.data : "", c->body.len)) {
		return LG_ERR_PARSE;
	}
	if (g->error)
		return LG_ERR_STREAM;
	r->first_ns = g->first_ns;
	r->last_ns = g->last_ns;
	r->n_chunks = (int)(g->n_chunks < INT32_MAX ? g->n_chunks : INT32_MAX);
	long k = lg_gen_obs_tokens(g);
	r->tokens_out = (int)(k < INT32_MAX ? k : INT32_MAX);
	r->has_usage = g->usage_completion >= 0;
	r->usage_prompt = g->usage_prompt >= 0 && g->usage_prompt < INT32_MAX
				  ? (int)g->usage_prompt : -1;
	if (r->measured && g->n_itl) {
		if (!rg_vec_reserve((void **)&run->itl_ms, &run->cap_itl, run->n_itl + g->n_itl,
				    sizeof(*run->itl_ms), 4096)) {
			run->oom = true;
			return LG_ERR_NONE;
		}
		memcpy(run->itl_ms + run->n_itl, g->itl_ms, g->n_itl * sizeof(*g->itl_ms));
		run->n_itl += g->n_itl;
	}
	return LG_ERR_NONE;
}

/* Record a complete response and return the conn to the pool. */
static void lg_conn_complete(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];
	struct lg_req *r = &run->reqs[c->req];

	r->status = c->rx.status;
	r->err = LG_ERR_NONE;
	r->done_ns = c->now;
	r->hdr_mask = c->hdr_mask;
	memcpy(r->hdr, c->hdr, sizeof(r->hdr));
	r->retry_after_s = c->retry_after_s;
	if (run->o->mode == LG_MODE_GENERATE && r->status >= 200 && r->status <= 299)
		r->err = (uint8_t)lg_gen_finish(run, c, r);
	c->n_served++;
	if (c->rx.close || c->rx.trailing) {
		lg_conn_close(run, ci);
	} else {
		c->state = LG_CONN_IDLE;
		lg_conn_set_events(run, ci, EPOLLIN);
	}
	lg_conn_release(run, ci);
}

/* Read what the socket has and feed it to the response reader, each recv() timed on its own. */
static void lg_conn_read(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];

	for (;;) {
		ssize_t k = recv(c->fd, run->recv_buf, LG_RECV_BYTES, 0);
		if (k > 0) {
			c->now = lg_now(run);
			switch (lg_http_rx_feed(&c->rx, run->recv_buf, (size_t)k)) {
			case LG_RX_MORE:
				continue;
			case LG_RX_DONE:
				lg_conn_complete(run, ci);
				return;
			case LG_RX_BAD:
				lg_conn_fail(run, ci, LG_ERR_PARSE);
				return;
			}
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		break;	/* EOF or a socket error */
	}
	if (c->rx.n_in == 0) {
		lg_conn_broken(run, ci);
		return;
	}
	c->now = lg_now(run);
	if (lg_http_rx_eof(&c->rx) == LG_RX_DONE)
		lg_conn_complete(run, ci);
	else
		lg_conn_fail(run, ci, LG_ERR_CLOSED);
}

static void lg_conn_event(struct lg_run *run, int ci, uint32_t ev)
{
	struct lg_conn *c = &run->conns[ci];
	int err = 0;
	socklen_t len = sizeof(err);

	switch (c->state) {
	case LG_CONN_CLOSED:
		return;
	case LG_CONN_IDLE:
		/* Idle keep-alive socket readable: the server closed it (or sent junk). */
		lg_conn_close(run, ci);
		return;
	case LG_CONN_CONNECTING:
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
			lg_conn_fail(run, ci, LG_ERR_CONNECT);
			return;
		}
		c->state = LG_CONN_BUSY;
		lg_conn_write(run, ci);
		return;
	case LG_CONN_BUSY:
		if ((ev & EPOLLOUT) && c->woff < c->wlen) {
			lg_conn_write(run, ci);
			if (c->state != LG_CONN_BUSY || c->req < 0)
				return;
		}
		if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
			lg_conn_read(run, ci);
		return;
	}
}

/* ---- main loop ---- */

static void lg_loop(struct lg_run *run)
{
	struct lg_opts *o = run->o;
	struct epoll_event evs[256];
	int64_t timeout_ns = (int64_t)o->timeout_ms * 1000000LL;
	int64_t last_check = 0;
	long next = 0;
	int64_t hard_stop = (run->n_reqs ? run->reqs[run->n_reqs - 1].sched_ns : 0) + timeout_ns +
			    1000000000LL;

	for (;;) {
		int64_t now = lg_now(run);

		while (next < run->n_reqs && run->reqs[next].sched_ns <= now)
			run->pending[run->pend_tail++] = next++;
		while (run->pend_head < run->pend_tail && run->n_free > 0) {
			int ci = run->free_conns[--run->n_free];
			lg_dispatch(run, ci, run->pending[run->pend_head++]);
		}
		if (next == run->n_reqs && run->pend_head == run->pend_tail && run->n_busy == 0)
			break;
		now = lg_now(run);
		if (now - last_check > 10000000LL || now > hard_stop) {
			last_check = now;
			for (int ci = 0; ci < o->connections; ci++) {
				struct lg_conn *c = &run->conns[ci];
				if (c->req >= 0 && (now - run->reqs[c->req].send_ns > timeout_ns ||
						    now > hard_stop))
					lg_conn_fail(run, ci, LG_ERR_TIMEOUT);
			}
			if (now > hard_stop) {
				while (run->pend_head < run->pend_tail) {
					struct lg_req *r = &run->reqs[run->pending[run->pend_head++]];
					r->err = LG_ERR_TIMEOUT;
					r->done_ns = now;
				}
				if (next == run->n_reqs)
					break;
			}
		}
		/* Wake at the next arrival through the timerfd (ns resolution); the 50 ms cap keeps
		 * the timeout scan going while requests are in flight. */
		int wait_ms = 50;
		if (next < run->n_reqs) {
			int64_t at = run->t0_abs + run->reqs[next].sched_ns;
			struct itimerspec its = {.it_value = {.tv_sec = at / 1000000000LL,
							      .tv_nsec = at % 1000000000LL}};
			if (run->reqs[next].sched_ns <= now)
				wait_ms = 0;
			else if (timerfd_settime(run->tfd, TFD_TIMER_ABSTIME, &its, NULL))
				wait_ms = 1;
		}
		int n = epoll_wait(run->epfd, evs, 256, wait_ms);
		for (int k = 0; k < n; k++) {
			if (evs[k].data.u32 == LG_TIMER_TAG) {
				uint64_t expirations;
				if (read(run->tfd, &expirations, sizeof(expirations)) < 0)
					continue;
				continue;
			}
			lg_conn_event(run, (int)evs[k].data.u32, evs[k].events);
		}
	}
}

/* ---- statistics and report ---- */

static int lg_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v (n > 0), p in [0, 100]. */
static double lg_percentile(const double *v, long n, double p)
{
	long k = (long)ceil(p / 100.0 * (double)n);

	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

/* A sample's size, mean, extremes and nearest-rank percentiles (NaN when empty). */
struct lg_summary {
	long n;
	double mean, min, p50, p90, p99, max;
};

/* Sort v (n) in place and summarize it into *out. */
static void lg_summarize(double *v, long n, struct lg_summary *out)
{
	double sum = 0;

	out->n = n;
	if (!n) {
		out->mean = out->min = out->p50 = out->p90 = out->p99 = out->max = NAN;
		return;
	}
	qsort(v, (size_t)n, sizeof(double), lg_cmp_double);
	for (long i = 0; i < n; i++)
		sum += v[i];
	out->mean = sum / (double)n;
	out->min = v[0];
	out->p50 = lg_percentile(v, n, 50);
	out->p90 = lg_percentile(v, n, 90);
	out->p99 = lg_percentile(v, n, 99);
	out->max = v[n - 1];
}

static bool lg_req_ok(const struct lg_req *r)
{
	return r->err == LG_ERR_NONE && r->status >= 200 && r->status <= 299;
}

/* Generation: time to first token from the scheduled send time, ms (NaN: no content chunk). */
static double lg_req_ttft_ms(const struct lg_req *r)
{
	return r->first_ns >= 0 ? (double)(r->first_ns - r->sched_ns) / 1e6 : NAN;
}

/* Generation: time per output token after the first, ms (lg_gen_obs_tpot_ms's rule). */
static double lg_req_tpot_ms(const struct lg_req *r)
{
	if (r->first_ns < 0)
		return NAN;
	if (r->tokens_out <= 1)
		return 0.0;
	return (double)(r->last_ns - r->first_ns) / 1e6 / (double)(r->tokens_out - 1);
}

/* Generation: prompt tokens the request sent (shared prefix included). */
static long lg_req_prompt_sent(const struct lg_opts *o, const struct lg_req *r)
{
	return (long)r->len + (r->prefixed ? o->prefix_len : 0);
}

/* Generation: prompt tokens as the server counted them (usage), else as sent. */
static long lg_req_prompt_tokens(const struct lg_opts *o, const struct lg_req *r)
{
	return r->usage_prompt >= 0 ? r->usage_prompt : lg_req_prompt_sent(o, r);
}

/* Input length of a request for the length report: tokens, or bytes of a file line. */
static long lg_req_len(const struct lg_opts *o, const struct lg_req *r)
{
	if (o->mode == LG_MODE_GENERATE)
		return lg_req_prompt_sent(o, r);
	return o->dist.kind == LG_DIST_FILE ? (long)strlen(o->dist.lines[r->len]) : r->len;
}

/* Does successful generation request r meet every SLO given (TTFT and TPOT, ms)? */
static bool lg_req_meets_slo(const struct lg_opts *o, const struct lg_req *r)
{
	double ttft = lg_req_ttft_ms(r), tpot = lg_req_tpot_ms(r);

	if (!lg_req_ok(r) || !(ttft >= 0))
		return false;
	return (o->slo_ttft_ms < 0 || ttft <= o->slo_ttft_ms) &&
	       (o->slo_tpot_ms < 0 || tpot <= o->slo_tpot_ms);
}

struct lg_stats {
	long n_measured, n_sent, n_ok, n_fail, n_retried;
	long status_count[600];
	long err_count[LG_ERR_COUNT];
	double window_s, offered_rps, achieved_rps, throughput_rps, completion_rps, tokens_per_s;
	double elapsed_s;
	struct lg_summary lat;	/* e2e latency of successes, ms */
	double lag_mean, lag_max;
	double hdr_mean[LG_HDR_N];
	long hdr_n[LG_HDR_N];
	double len_mean;
	long len_min, len_max, tokens_ok;
	double utility, utility_per_s;	/* TCB ICPP'22 sec. 5.1: sum of 1/len over in-deadline */
	long deadline_met;
	/* 429 answers and their Retry-After */
	long n_retry_after;
	double retry_after_mean, retry_after_min, retry_after_max;
	/* generation */
	struct lg_summary ttft, tpot, itl;	/* ms */
	double out_mean;
	long out_min, out_max;		/* max_tokens asked */
	long n_prefixed;
	long prompt_tokens, output_tokens, n_no_usage, n_short;
	double prompt_tokens_per_s, output_tokens_per_s;
	long goodput_met;
	double goodput_frac, goodput_rps;
};

static int lg_stats_compute(struct lg_run *run, struct lg_stats *s, int64_t end_ns)
{
	struct lg_opts *o = run->o;
	bool gen = o->mode == LG_MODE_GENERATE;
	size_t nv = (size_t)(run->n_reqs ? run->n_reqs : 1);
	double *lat = malloc(nv * sizeof(double)), *ttft = malloc(nv * sizeof(double)),
	       *tpot = malloc(nv * sizeof(double)),
	       *itl = malloc((run->n_itl ? run->n_itl : 1) * sizeof(double));
	int64_t win0 = (int64_t)(o->warmup_s * 1e9), last_send = -1, last_done = -1,
		last_sched = win0;
	double lag_sum = 0, len_sum = 0, out_sum = 0;
	long n_lat = 0, n_ttft = 0, n_tpot = 0;
	int rc = -1;

	if (!lat || !ttft || !tpot || !itl)
		goto out_free;
	memset(s, 0, sizeof(*s));
	s->len_min = s->out_min = -1;
	s->retry_after_min = s->retry_after_max = NAN;
	for (long i = 0; i < run->n_reqs; i++) {
		const struct lg_req *r = &run->reqs[i];
		if (!r->measured)
			continue;
		s->n_measured++;
		if (r->sched_ns > last_sched)
			last_sched = r->sched_ns;
		long len = lg_req_len(o, r);
		len_sum += (double)len;
		if (s->len_min < 0 || len < s->len_min)
			s->len_min = len;
		if (len > s->len_max)
			s->len_max = len;
		if (gen) {
			out_sum += r->out_len;
			if (s->out_min < 0 || r->out_len < s->out_min)
				s->out_min = r->out_len;
			if (r->out_len > s->out_max)
				s->out_max = r->out_len;
			s->n_prefixed += r->prefixed;
		}
		if (r->send_ns >= 0) {
			s->n_sent++;
			double lag = (double)(r->send_ns - r->sched_ns) / 1e6;
			lag_sum += lag;
			if (lag > s->lag_max)
				s->lag_max = lag;
			if (r->send_ns > last_send)
				last_send = r->send_ns;
		}
		if (r->retried)
			s->n_retried++;
		if (r->done_ns > last_done)
			last_done = r->done_ns;
		if (r->err != LG_ERR_NONE || r->status == 0) {
			s->err_count[r->err ? r->err : LG_ERR_TIMEOUT]++;
			s->n_fail++;
			continue;
		}
		if (r->status < 200 || r->status > 299) {
			s->status_count[r->status]++;
			s->n_fail++;
			if (r->status == 429 && isfinite(r->retry_after_s)) {
				double ra = r->retry_after_s;
				s->retry_after_mean += ra;
				if (!s->n_retry_after++ || ra < s->retry_after_min)
					s->retry_after_min = ra;
				if (!(ra <= s->retry_after_max))
					s->retry_after_max = ra;
			}
			continue;
		}
		s->n_ok++;
		double l = (double)(r->done_ns - r->sched_ns) / 1e6;
		lat[n_lat++] = l;
		for (int h = 0; h < LG_HDR_N; h++) {
			if (r->hdr_mask & (1u << h)) {
				s->hdr_mean[h] += r->hdr[h];
				s->hdr_n[h]++;
			}
		}
		if (o->deadline_ms < 0 || l <= (double)o->deadline_ms) {
			s->deadline_met++;
			s->utility += 1.0 / (double)(len > 0 ? len : 1);
		}
		if (!gen) {
			s->tokens_ok += len;
			continue;
		}
		s->prompt_tokens += lg_req_prompt_tokens(o, r);
		s->output_tokens += r->tokens_out;
		s->n_no_usage += !r->has_usage;
		s->n_short += r->tokens_out < r->out_len;
		if (r->first_ns >= 0) {
			ttft[n_ttft++] = lg_req_ttft_ms(r);
			if (r->tokens_out > 1)
				tpot[n_tpot++] = lg_req_tpot_ms(r);
		}
		s->goodput_met += lg_req_meets_slo(o, r);
	}
	s->tokens_ok += s->prompt_tokens;
	for (int h = 0; h < LG_HDR_N; h++)
		s->hdr_mean[h] = s->hdr_n[h] ? s->hdr_mean[h] / (double)s->hdr_n[h] : NAN;
	s->retry_after_mean = s->n_retry_after ? s->retry_after_mean / (double)s->n_retry_after
					       : NAN;
	/* Window: the scheduled measured span (duration, or first..last arrival for --requests). */
	s->window_s = o->duration_s > 0 ? o->duration_s : (double)(last_sched - win0) / 1e9;
	if (s->window_s <= 0)
		s->window_s = 1.0 / o->rate;
	s->offered_rps = (double)s->n_measured / s->window_s;
	s->achieved_rps = s->n_sent > 1 && last_send > win0
				  ? (double)s->n_sent / ((double)(last_send - win0) / 1e9)
				  : (double)s->n_sent / s->window_s;
	/* completion_rps: measured successes over the span from window start to the last measured
	 * completion (at least the window). throughput_rps, with --duration: 2xx responses of ANY
	 * request (warm-up included) that completed inside the window, over the window: the
	 * steady-state serving rate, which neither the drain tail after the window (latency) nor
	 * the backlog of an overloaded server distorts. With --requests there is no steady window
	 * and throughput_rps = completion_rps. Token rates and goodput_rps follow the same rule. */
	double span = last_done > win0 ? (double)(last_done - win0) / 1e9 : s->window_s;
	if (span < s->window_s)
		span = s->window_s;
	s->completion_rps = (double)s->n_ok / span;
	s->throughput_rps = s->completion_rps;
	s->tokens_per_s = (double)s->tokens_ok / span;
	s->prompt_tokens_per_s = (double)s->prompt_tokens / span;
	s->output_tokens_per_s = (double)s->output_tokens / span;
	s->goodput_rps = (double)s->goodput_met / span;
	if (o->duration_s > 0) {
		int64_t win1 = win0 + (int64_t)(o->duration_s * 1e9);
		long n_in = 0, tok_in = 0, out_in = 0, met_in = 0;
		for (long i = 0; i < run->n_reqs; i++) {
			const struct lg_req *r = &run->reqs[i];
			if (!lg_req_ok(r) || r->done_ns < win0 || r->done_ns >= win1)
				continue;
			n_in++;
			if (gen) {
				tok_in += lg_req_prompt_tokens(o, r);
				out_in += r->tokens_out;
				met_in += lg_req_meets_slo(o, r);
			} else {
				tok_in += lg_req_len(o, r);
			}
		}
		s->throughput_rps = (double)n_in / o->duration_s;
		s->tokens_per_s = (double)tok_in / o->duration_s;
		s->prompt_tokens_per_s = gen ? s->tokens_per_s : 0;
		s->output_tokens_per_s = (double)out_in / o->duration_s;
		s->goodput_rps = (double)met_in / o->duration_s;
	}
	s->goodput_frac = s->n_measured ? (double)s->goodput_met / (double)s->n_measured : NAN;
	s->utility_per_s = s->utility / span;
	s->elapsed_s = (double)end_ns / 1e9;
	s->len_mean = s->n_measured ? len_sum / (double)s->n_measured : 0;
	s->out_mean = s->n_measured ? out_sum / (double)s->n_measured : 0;
	if (s->len_min < 0)
		s->len_min = 0;
	if (s->out_min < 0)
		s->out_min = 0;
	s->lag_mean = s->n_sent ? lag_sum / (double)s->n_sent : 0;
	lg_summarize(lat, n_lat, &s->lat);
	lg_summarize(ttft, n_ttft, &s->ttft);
	lg_summarize(tpot, n_tpot, &s->tpot);
	for (size_t k = 0; k < run->n_itl; k++)
		itl[k] = run->itl_ms[k];
	lg_summarize(itl, (long)run->n_itl, &s->itl);
	rc = 0;
out_free:
	free(lat);
	free(ttft);
	free(tpot);
	free(itl);
	return rc;
}

/* JSON number or null for NaN/inf. */
static void lg_json_num(FILE *f, double x)
{
	if (isfinite(x))
		fprintf(f, "%.6g", x);
	else
		fputs("null", f);
}

static void lg_json_str(FILE *f, const char *s)
{
	rg_buf b;

	if (!s) {
		fputs("null", f);
		return;
	}
	rg_buf_init(&b);
	rg_buf_json_str(&b, s, strlen(s));
	if (b.oom)
		fputs("null", f);
	else
		fwrite(b.data, 1, b.len, f);
	rg_buf_free(&b);
}

/* ,\n  "key": number */
static void lg_json_kv(FILE *f, const char *key, double x)
{
	fprintf(f, ",\n  \"%s\": ", key);
	lg_json_num(f, x);
}

/* ,\n  "key": {"n": .., "mean": .., "min": .., "p50": .., "p90": .., "p99": .., "max": ..} */
static void lg_json_summary(FILE *f, const char *key, const struct lg_summary *m)
{
	fprintf(f, ",\n  \"%s\": {\"n\": %ld, \"mean\": ", key, m->n);
	lg_json_num(f, m->mean);
	fputs(", \"min\": ", f);
	lg_json_num(f, m->min);
	fputs(", \"p50\": ", f);
	lg_json_num(f, m->p50);
	fputs(", \"p90\": ", f);
	lg_json_num(f, m->p90);
	fputs(", \"p99\": ", f);
	lg_json_num(f, m->p99);
	fputs(", \"max\": ", f);
	lg_json_num(f, m->max);
	fputs("}", f);
}

/* The generation part of the JSON report. */
static void lg_write_json_gen(FILE *f, const struct lg_opts *o, const struct lg_stats *s)
{
	fprintf(f, ",\n  \"generate\": {\"prompt_len\": ");
	lg_json_str(f, o->prompt_spec);
	fprintf(f, ", \"output_len\": ");
	lg_json_str(f, o->output_spec);
	fprintf(f, ", \"stream\": %s, \"model\": ", o->stream ? "true" : "false");
	lg_json_str(f, o->model);
	fprintf(f, ", \"tpot_ms\": ");
	if (o->tpot_ms >= 0)
		fprintf(f, "%d", o->tpot_ms);
	else
		fputs("null", f);
	fprintf(f, ", \"shared_prefix_frac\": ");
	lg_json_num(f, o->prefix_frac);
	fprintf(f, ", \"shared_prefix_len\": %d}", o->prefix_frac > 0 ? o->prefix_len : 0);
	fprintf(f, ",\n  \"shared_prefix_requests\": %ld", s->n_prefixed);
	lg_json_summary(f, "ttft_ms", &s->ttft);
	lg_json_summary(f, "tpot_ms", &s->tpot);
	lg_json_summary(f, "itl_ms", &s->itl);
	lg_json_summary(f, "e2e_ms", &s->lat);
	fprintf(f, ",\n  \"tokens\": {\"prompt\": %ld, \"output\": %ld, \"requests_without_usage\":"
		" %ld, \"short_outputs\": %ld}", s->prompt_tokens, s->output_tokens, s->n_no_usage,
		s->n_short);
	lg_json_kv(f, "prompt_tokens_per_s", s->prompt_tokens_per_s);
	lg_json_kv(f, "output_tokens_per_s", s->output_tokens_per_s);
	fprintf(f, ",\n  \"output_length\": {\"min\": %ld, \"max\": %ld, \"mean\": ", s->out_min,
		s->out_max);
	lg_json_num(f, s->out_mean);
	fprintf(f, "}");
	if (o->slo_ttft_ms < 0 && o->slo_tpot_ms < 0) {
		fprintf(f, ",\n  \"goodput\": null");
		return;
	}
	fprintf(f, ",\n  \"goodput\": {\"slo_ttft_ms\": ");
	lg_json_num(f, o->slo_ttft_ms > 0 ? o->slo_ttft_ms : NAN);
	fprintf(f, ", \"slo_tpot_ms\": ");
	lg_json_num(f, o->slo_tpot_ms > 0 ? o->slo_tpot_ms : NAN);
	fprintf(f, ", \"met\": %ld, \"fraction\": ", s->goodput_met);
	lg_json_num(f, s->goodput_frac);
	fprintf(f, ", \"rps\": ");
	lg_json_num(f, s->goodput_rps);
	fprintf(f, "}");
}

static int lg_write_json(const struct lg_run *run, const struct lg_stats *s, const char *path)
{
	const struct lg_opts *o = run->o;
	bool gen = o->mode == LG_MODE_GENERATE;
	FILE *f = fopen(path, "w");
	bool first;

	if (!f) {
		fprintf(stderr, "loadgen: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "{\n  \"tool\": \"ragged-loadgen\",\n  \"mode\": \"%s\",\n  \"url\": ",
		gen ? "generate" : "embed");
	lg_json_str(f, o->url);
	fprintf(f, ",\n  \"route\": ");
	lg_json_str(f, o->route);
	fprintf(f, ",\n  \"dist\": ");
	lg_json_str(f, gen ? NULL : o->dist_spec);
	fprintf(f, ",\n  \"input_kind\": \"%s\"",
		gen ? "token_ids" : o->dist.kind == LG_DIST_FILE ? "file_text"
				  : o->text ? "words" : "token_ids");
	lg_json_kv(f, "rate_target", o->rate);
	lg_json_kv(f, "duration_s", o->duration_s);
	fprintf(f, ",\n  \"requests_target\": %ld", o->n_requests);
	lg_json_kv(f, "warmup_s", o->warmup_s);
	fprintf(f, ",\n  \"connections\": %d,\n  \"seed\": %llu,\n  \"deadline_ms\": ",
		o->connections, (unsigned long long)o->seed);
	if (o->deadline_ms >= 0)
		fprintf(f, "%d", o->deadline_ms);
	else
		fputs("null", f);
	fprintf(f, ",\n  \"timeout_ms\": %d", o->timeout_ms);
	fprintf(f, ",\n  \"requests\": {\"scheduled\": %ld, \"sent\": %ld, \"ok\": %ld, "
		"\"failed\": %ld, \"retried\": %ld, \"warmup\": %ld}",
		s->n_measured, s->n_sent, s->n_ok, s->n_fail, s->n_retried,
		run->n_reqs - s->n_measured);
	lg_json_kv(f, "window_s", s->window_s);
	lg_json_kv(f, "elapsed_s", s->elapsed_s);
	lg_json_kv(f, "offered_rps", s->offered_rps);
	lg_json_kv(f, "achieved_rps", s->achieved_rps);
	lg_json_kv(f, "throughput_rps", s->throughput_rps);
	lg_json_kv(f, "completion_rps", s->completion_rps);
	lg_json_kv(f, "tokens_per_s", s->tokens_per_s);
	lg_json_summary(f, "latency_ms", &s->lat);
	fprintf(f, ",\n  \"send_lag_ms\": {\"mean\": ");
	lg_json_num(f, s->lag_mean);
	fprintf(f, ", \"max\": ");
	lg_json_num(f, s->lag_max);
	fprintf(f, "},\n  \"server\": {\"queue_ms_mean\": ");
	lg_json_num(f, s->hdr_mean[LG_HDR_QUEUE]);
	fprintf(f, ", \"inference_ms_mean\": ");
	lg_json_num(f, s->hdr_mean[LG_HDR_INFER]);
	fprintf(f, ", \"total_ms_mean\": ");
	lg_json_num(f, s->hdr_mean[LG_HDR_TOTAL]);
	fprintf(f, ", \"batch_size_mean\": ");
	lg_json_num(f, s->hdr_mean[LG_HDR_BATCH]);
	fprintf(f, ", \"n_with_headers\": %ld}", s->hdr_n[LG_HDR_TOTAL] > s->hdr_n[LG_HDR_QUEUE]
						      ? s->hdr_n[LG_HDR_TOTAL] : s->hdr_n[LG_HDR_QUEUE]);
	fprintf(f, ",\n  \"length\": {\"unit\": \"%s\", \"min\": %ld, \"max\": %ld, \"mean\": ",
		!gen && o->dist.kind == LG_DIST_FILE ? "bytes" : "tokens", s->len_min, s->len_max);
	lg_json_num(f, s->len_mean);
	fprintf(f, "},\n  \"deadline_met\": %ld", s->deadline_met);
	/* TCB's utility (1/len per in-deadline request) is an embedding measure */
	lg_json_kv(f, "utility", gen ? NAN : s->utility);
	lg_json_kv(f, "utility_per_s", gen ? NAN : s->utility_per_s);
	if (gen)
		lg_write_json_gen(f, o, s);
	fprintf(f, ",\n  \"errors\": {\"status\": {");
	first = true;
	for (int c = 0; c < 600; c++) {
		if (!s->status_count[c])
			continue;
		fprintf(f, "%s\"%d\": %ld", first ? "" : ", ", c, s->status_count[c]);
		first = false;
	}
	fprintf(f, "}, \"transport\": {");
	for (int e = 1; e < LG_ERR_COUNT; e++)
		fprintf(f, "%s\"%s\": %ld", e > 1 ? ", " : "", lg_err_names[e], s->err_count[e]);
	fprintf(f, "}, \"rate_limited\": {\"count\": %ld, \"with_retry_after\": %ld, "
		"\"retry_after_s\": {\"mean\": ", s->status_count[429], s->n_retry_after);
	lg_json_num(f, s->retry_after_mean);
	fprintf(f, ", \"min\": ");
	lg_json_num(f, s->retry_after_min);
	fprintf(f, ", \"max\": ");
	lg_json_num(f, s->retry_after_max);
	fprintf(f, "}}}\n}\n");
	if (fclose(f)) {
		fprintf(stderr, "loadgen: error writing %s\n", path);
		return -1;
	}
	return 0;
}

/* ms relative to the run start, or null for a time that never came. */
static void lg_json_ms(FILE *f, int64_t ns)
{
	lg_json_num(f, ns >= 0 ? (double)ns / 1e6 : NAN);
}

/* One JSON line per scheduled request (warm-up included), in schedule order; "i" is the
 * X-Request-Id header the request carried. */
static int lg_write_per_request(const struct lg_run *run, const char *path)
{
	const struct lg_opts *o = run->o;
	bool gen = o->mode == LG_MODE_GENERATE;
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "loadgen: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (long i = 0; i < run->n_reqs; i++) {
		const struct lg_req *r = &run->reqs[i];
		fprintf(f, "{\"i\": %ld, \"measured\": %s, \"sched_ms\": ", i,
			r->measured ? "true" : "false");
		lg_json_ms(f, r->sched_ns);
		fputs(", \"send_ms\": ", f);
		lg_json_ms(f, r->send_ns);
		fputs(", \"done_ms\": ", f);
		lg_json_ms(f, r->done_ns);
		fprintf(f, ", \"status\": %d, \"error\": ", r->status);
		lg_json_str(f, r->err ? lg_err_names[r->err] : NULL);
		fprintf(f, ", \"len\": %ld, \"retry_after_s\": ", lg_req_len(o, r));
		lg_json_num(f, r->retry_after_s);
		if (gen) {
			fprintf(f, ", \"prefixed\": %s, \"max_tokens\": %d, \"ttft_ms\": ",
				r->prefixed ? "true" : "false", r->out_len);
			lg_json_num(f, lg_req_ok(r) ? lg_req_ttft_ms(r) : NAN);
			fputs(", \"tpot_ms\": ", f);
			lg_json_num(f, lg_req_ok(r) ? lg_req_tpot_ms(r) : NAN);
			fprintf(f, ", \"output_tokens\": %d, \"prompt_tokens\": %ld, \"chunks\": %d, "
				"\"usage\": %s, \"slo_met\": %s", r->tokens_out,
				lg_req_ok(r) ? lg_req_prompt_tokens(o, r) : 0, r->n_chunks,
				r->has_usage ? "true" : "false",
				lg_req_meets_slo(o, r) ? "true" : "false");
		}
		fputs("}\n", f);
	}
	if (fclose(f)) {
		fprintf(stderr, "loadgen: error writing %s\n", path);
		return -1;
	}
	return 0;
}

static void lg_print_summary(const char *name, const struct lg_summary *m)
{
	printf("  %-11s p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f  (n %ld)\n", name,
	       m->p50, m->p90, m->p99, m->max, m->mean, m->n);
}

static void lg_print_table(const struct lg_run *run, const struct lg_stats *s)
{
	const struct lg_opts *o = run->o;
	bool gen = o->mode == LG_MODE_GENERATE, any = false;
	const char *unit = !gen && o->dist.kind == LG_DIST_FILE ? "bytes" : "tokens";

	if (gen)
		printf("ragged loadgen  %s  route %s  generate  prompt %s  output %s%s  rate %.4g/s"
		       "  conns %d  seed %llu\n", o->url, o->route, o->prompt_spec, o->output_spec,
		       o->stream ? "" : "  no-stream", o->rate, o->connections,
		       (unsigned long long)o->seed);
	else
		printf("ragged loadgen  %s  route %s  dist %s  rate %.4g/s  conns %d  seed %llu\n",
		       o->url, o->route, o->dist_spec, o->rate, o->connections,
		       (unsigned long long)o->seed);
	printf("  %-11s scheduled %ld  sent %ld  ok %ld  failed %ld  retried %ld  (warmup %ld)\n",
	       "requests", s->n_measured, s->n_sent, s->n_ok, s->n_fail, s->n_retried,
	       run->n_reqs - s->n_measured);
	printf("  %-11s offered %.2f/s  achieved %.2f/s  throughput %.2f/s  %.0f %s%s/s"
	       "  completions %.2f/s  (window %.2f s, elapsed %.2f s)\n", "rate", s->offered_rps,
	       s->achieved_rps, s->throughput_rps, s->tokens_per_s, gen ? "prompt " : "", unit,
	       s->completion_rps, s->window_s, s->elapsed_s);
	if (gen) {
		printf("  %-11s prompt %ld (%.0f/s)  output %ld (%.0f/s)  shared prefix %ld of %ld"
		       " requests\n", "tokens", s->prompt_tokens, s->prompt_tokens_per_s,
		       s->output_tokens, s->output_tokens_per_s, s->n_prefixed, s->n_measured);
		if (o->stream) {
			lg_print_summary("ttft ms", &s->ttft);
			lg_print_summary("tpot ms", &s->tpot);
			lg_print_summary("itl ms", &s->itl);
		}
		lg_print_summary("e2e ms", &s->lat);
		if (o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0)
			printf("  %-11s %ld of %ld requests (%.1f%%) meet TTFT <= %.4g ms, TPOT <= "
			       "%.4g ms: %.2f/s\n", "goodput", s->goodput_met, s->n_measured,
			       100.0 * s->goodput_frac, o->slo_ttft_ms > 0 ? o->slo_ttft_ms : INFINITY,
			       o->slo_tpot_ms > 0 ? o->slo_tpot_ms : INFINITY, s->goodput_rps);
	} else {
		printf("  %-11s p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n", "latency ms",
		       s->lat.p50, s->lat.p90, s->lat.p99, s->lat.max, s->lat.mean);
		printf("  %-11s queue %.2f  inference %.2f  total %.2f  batch %.2f  (mean, from "
		       "headers)\n", "server ms", s->hdr_mean[LG_HDR_QUEUE],
		       s->hdr_mean[LG_HDR_INFER], s->hdr_mean[LG_HDR_TOTAL],
		       s->hdr_mean[LG_HDR_BATCH]);
	}
	printf("  %-11s mean %.3f ms  max %.3f ms  (send time - scheduled time)\n", "send lag",
	       s->lag_mean, s->lag_max);
	printf("  %-11s %smin %ld  max %ld  mean %.1f %s", "length", gen ? "prompt " : "",
	       s->len_min, s->len_max, s->len_mean, unit);
	if (gen)
		printf(";  output min %ld  max %ld  mean %.1f (max_tokens)", s->out_min, s->out_max,
		       s->out_mean);
	printf("\n");
	if (o->deadline_ms >= 0 && gen)
		printf("  %-11s %ld of %ld ok within %d ms\n", "deadline", s->deadline_met, s->n_ok,
		       o->deadline_ms);
	else if (o->deadline_ms >= 0)
		printf("  %-11s %ld of %ld ok within %d ms, utility %.3f (%.3f/s)\n", "deadline",
		       s->deadline_met, s->n_ok, o->deadline_ms, s->utility, s->utility_per_s);
	printf("  %-11s", "errors");
	for (int c = 0; c < 600; c++) {
		if (s->status_count[c]) {
			printf(" HTTP %d: %ld;", c, s->status_count[c]);
			any = true;
		}
	}
	for (int e = 1; e < LG_ERR_COUNT; e++) {
		if (s->err_count[e]) {
			printf(" %s: %ld;", lg_err_names[e], s->err_count[e]);
			any = true;
		}
	}
	printf("%s\n", any ? "" : " none");
	if (s->status_count[429])
		printf("  %-11s %ld answers 429, %ld with Retry-After (mean %.3g s, min %.3g, max "
		       "%.3g)\n", "rate limit", s->status_count[429], s->n_retry_after,
		       s->retry_after_mean, s->retry_after_min, s->retry_after_max);
}

int rg_loadgen_main(int argc, char **argv)
{
	struct lg_opts o;
	struct lg_run run;
	struct lg_stats s;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	int rc = 1, gai;

	memset(&o, 0, sizeof(o));
	memset(&run, 0, sizeof(run));
	run.o = &o;
	run.epfd = -1;
	run.tfd = -1;
	switch (lg_parse_args(&o, argc, argv)) {
	case 1:
		rc = 0;
		goto out_free_opts;
	case -1:
		rc = 2;
		goto out_free_opts;
	}
	gai = getaddrinfo(o.host, o.port, &hints, &run.ai);
	if (gai) {
		fprintf(stderr, "loadgen: cannot resolve %s:%s: %s\n", o.host, o.port,
			gai_strerror(gai));
		goto out_free_opts;
	}
	if (lg_schedule(&run))
		goto out_oom;
	run.conns = calloc((size_t)o.connections, sizeof(*run.conns));
	run.free_conns = malloc((size_t)o.connections * sizeof(int));
	run.pending = malloc((size_t)(run.n_reqs ? run.n_reqs : 1) * sizeof(long));
	run.recv_buf = malloc(LG_RECV_BYTES);
	if (!run.conns || !run.free_conns || !run.pending || !run.recv_buf)
		goto out_oom;
	for (int ci = 0; ci < o.connections; ci++) {
		struct lg_conn *c = &run.conns[ci];
		c->run = &run;
		c->fd = -1;
		c->req = -1;
		lg_http_rx_init(&c->rx, lg_on_header, lg_on_body, c);
		lg_sse_init(&c->sse, LG_MAX_SSE_LINE);
		lg_gen_obs_init(&c->obs);
		rg_buf_init(&c->body);
		run.free_conns[run.n_free++] = o.connections - 1 - ci;
	}
	run.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (run.epfd < 0) {
		fprintf(stderr, "loadgen: epoll_create1: %s\n", strerror(errno));
		goto out_free_run;
	}
	run.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	struct epoll_event tev = {.events = EPOLLIN, .data.u32 = LG_TIMER_TAG};
	if (run.tfd < 0 || epoll_ctl(run.epfd, EPOLL_CTL_ADD, run.tfd, &tev)) {
		fprintf(stderr, "loadgen: timerfd: %s\n", strerror(errno));
		goto out_free_run;
	}
	run.t0_abs = lg_mono_ns();
	lg_loop(&run);
	int64_t end_ns = lg_now(&run);
	if (run.oom)
		goto out_oom;
	if (lg_stats_compute(&run, &s, end_ns))
		goto out_oom;
	if (!o.quiet)
		lg_print_table(&run, &s);
	rc = 0;
	if (o.json_path && lg_write_json(&run, &s, o.json_path))
		rc = 1;
	if (o.per_request_path && lg_write_per_request(&run, o.per_request_path))
		rc = 1;
	goto out_free_run;
out_oom:
	fprintf(stderr, "loadgen: out of memory\n");
	rc = 1;
out_free_run:
	if (run.conns) {
		for (int ci = 0; ci < o.connections; ci++) {
			if (run.conns[ci].fd >= 0)
				close(run.conns[ci].fd);
			free(run.conns[ci].wbuf);
			lg_http_rx_free(&run.conns[ci].rx);
			lg_sse_free(&run.conns[ci].sse);
			lg_gen_obs_free(&run.conns[ci].obs);
			rg_buf_free(&run.conns[ci].body);
		}
	}
	if (run.epfd >= 0)
		close(run.epfd);
	if (run.tfd >= 0)
		close(run.tfd);
	free(run.conns);
	free(run.free_conns);
	free(run.pending);
	free(run.reqs);
	free(run.recv_buf);
	free(run.prefix);
	free(run.itl_ms);
	rg_buf_free(&run.body);
	if (run.ai)
		freeaddrinfo(run.ai);
out_free_opts:
	lg_dist_free(&o.dist);
	lg_dist_free(&o.prompt_dist);
	lg_dist_free(&o.output_dist);
	return rc;
}
