/* ragged loadgen: open-loop Poisson HTTP load generator (see loadgen.h for the method).
 *
 * One thread, one epoll set, a pool of at most --connections non-blocking keep-alive sockets.
 * The whole arrival schedule (times and lengths) is drawn up front from the seeded RNG, so two
 * runs with the same --seed send the same requests at the same offsets; token ids of request i
 * come from a generator seeded by (seed, i), independent of dispatch order.
 *
 * Request life: scheduled -> pending (waiting for a free connection) -> in flight -> done.
 * Latency = time the last response byte arrived - scheduled time, so client-side queueing
 * (all connections busy) counts against the server as it would for a real open-loop client.
 * A keep-alive connection the server closed before answering is reopened and the request is
 * resent once; any other connection failure is a transport error of that request.
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

#define LG_MAX_REQUESTS 20000000L	/* schedule size cap (memory: ~64 B per request) */
#define LG_MAX_RESPONSE (64u << 20)	/* a response larger than this is a parse error */
#define LG_TOKEN_ID_LO 1000		/* random token ids are uniform in [LO, HI) */
#define LG_TOKEN_ID_HI 29000
#define LG_TIMER_TAG UINT32_MAX	/* epoll data of the arrival timerfd */
#define LG_CLS_ID 101
#define LG_SEP_ID 102

enum lg_dist_kind { LG_DIST_UNIFORM, LG_DIST_NORMAL, LG_DIST_FILE };

/* Request length distribution, in tokens (CLS and SEP included) or, for LG_DIST_FILE, lines. */
struct lg_dist {
	enum lg_dist_kind kind;
	int lo, hi;		/* inclusive clip bounds (uniform: the range) */
	double mean, sd;	/* normal only */
	char *file_buf;		/* file only: whole file, lines NUL-terminated in place */
	char **lines;		/* (n_lines) pointers into file_buf */
	long n_lines;
};

enum lg_err {
	LG_ERR_NONE = 0,
	LG_ERR_CONNECT,		/* connect() failed */
	LG_ERR_CLOSED,		/* connection reset / closed before a full response */
	LG_ERR_TIMEOUT,		/* no full response within --timeout-ms, or never sent before the end */
	LG_ERR_PARSE,		/* response not valid HTTP/1.x or too large */
	LG_ERR_COUNT,
};

static const char *const lg_err_names[LG_ERR_COUNT] = {
	[LG_ERR_NONE] = "none", [LG_ERR_CONNECT] = "connect", [LG_ERR_CLOSED] = "closed",
	[LG_ERR_TIMEOUT] = "timeout", [LG_ERR_PARSE] = "parse",
};

struct lg_opts {
	char host[256];
	char port[16];
	char route[512];
	const char *url;
	const char *dist_spec;
	double rate;		/* requests per second (> 0) */
	double duration_s;	/* measured window; 0 when --requests is used */
	long n_requests;	/* measured requests; 0 when --duration is used */
	double warmup_s;	/* requests scheduled in [0, warmup) are sent but not measured */
	int connections;	/* max requests in flight */
	int deadline_ms;	/* < 0: no deadline field */
	int timeout_ms;		/* per request, from its send time */
	uint64_t seed;
	const char *json_path;
	bool text;		/* send lengths as words (TEI /embed) rather than token ids */
	bool quiet;
	struct lg_dist dist;
};

/* One scheduled request. Times are CLOCK_MONOTONIC ns relative to the run start. */
struct lg_req {
	int64_t sched_ns;
	int64_t send_ns;	/* first byte handed to the kernel; -1 when never sent */
	int64_t done_ns;	/* last byte received / failure noticed; -1 when not done */
	int len;		/* tokens (length dists) or line index (file dist) */
	int status;		/* HTTP status; 0 on a transport error */
	uint8_t err;		/* enum lg_err */
	bool measured;
	bool retried;
	uint8_t hdr_mask;	/* bit i set when server header i (LG_HDR_*) was present */
	float hdr[4];		/* x-queue-time, x-inference-time, x-total-time, x-batch-size */
};

enum { LG_HDR_QUEUE, LG_HDR_INFER, LG_HDR_TOTAL, LG_HDR_BATCH, LG_HDR_N };
static const char *const lg_hdr_names[LG_HDR_N] = {
	"x-queue-time", "x-inference-time", "x-total-time", "x-batch-size",
};

enum lg_conn_state { LG_CONN_CLOSED, LG_CONN_CONNECTING, LG_CONN_IDLE, LG_CONN_BUSY };

struct lg_conn {
	int fd;
	enum lg_conn_state state;
	long req;		/* request in flight, -1 when none */
	char *wbuf;		/* (wlen) serialized HTTP request */
	size_t wlen, woff, wcap;
	char *rbuf;		/* (rlen) response bytes received so far */
	size_t rlen, rcap;
	int n_served;		/* responses completed on this socket */
	uint32_t events;	/* current epoll interest */
};

/* Growable byte buffer for request bodies. */
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
	rg_buf body;
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
		"  --url URL            server base URL (default http://127.0.0.1:8080)\n"
		"  --route PATH         /v1/embeddings (token-id arrays) or /embed (text); default\n"
		"                       /v1/embeddings\n"
		"  --rate R             offered load, requests/s, Poisson arrivals (default 10)\n"
		"  --duration S         measured window in seconds (default 10), or\n"
		"  --requests N         number of measured requests\n"
		"  --warmup S           extra seconds of load before the window, not measured (0)\n"
		"  --dist SPEC          uniform:LO:HI | normal:MEAN:SD:LO:HI | file:PATH\n"
		"                       lengths in tokens incl. [CLS]/[SEP] (default uniform:2:100)\n"
		"  --text               send lengths as words of text even on /v1/embeddings\n"
		"  --connections C      max requests in flight (default 64)\n"
		"  --deadline-ms D      add \"deadline_ms\": D to every body\n"
		"  --timeout-ms T       per-request timeout from its send time (default 30000)\n"
		"  --seed S             RNG seed (default 1)\n"
		"  --json OUT           also write the results as JSON to OUT\n"
		"  --quiet              no table on stdout\n");
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

/* Load the non-empty lines of path for --dist file:PATH. Returns 0 or -1 (message printed). */
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

/* Parse --dist. Returns 0 or -1 (message printed). */
static int lg_dist_parse(struct lg_dist *d, const char *spec)
{
	double v[4];
	int nv = 0;
	const char *p;

	if (!strncmp(spec, "file:", 5)) {
		d->kind = LG_DIST_FILE;
		return lg_dist_load_file(d, spec + 5);
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
		if (end == p || (*end && *end != ':'))
			goto out_bad;
		p = *end ? end + 1 : end;
	}
	if (*p)
		goto out_bad;
	if (d->kind == LG_DIST_UNIFORM) {
		if (nv != 2)
			goto out_bad;
		d->lo = (int)v[0];
		d->hi = (int)v[1];
	} else {
		if (nv != 4 || !(v[1] >= 0))
			goto out_bad;
		d->mean = v[0];
		d->sd = v[1];
		d->lo = (int)v[2];
		d->hi = (int)v[3];
	}
	if (d->lo < 2 || d->hi < d->lo || d->hi > 1000000)
		goto out_bad;
	return 0;
out_bad:
	fprintf(stderr, "loadgen: bad --dist '%s' (uniform:LO:HI | normal:MEAN:SD:LO:HI | file:PATH,"
		" 2 <= LO <= HI)\n", spec);
	return -1;
}

static void lg_dist_free(struct lg_dist *d)
{
	free(d->lines);
	free(d->file_buf);
}

/* Draw one length (tokens) or, for a file, one line index. */
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
	       O_DEADLINE, O_TIMEOUT, O_SEED, O_JSON, O_TEXT, O_QUIET, O_HELP };
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
		{NULL, 0, NULL, 0},
	};
	bool route_set = false, dur_set = false;
	double d;
	long l;
	int c;

	o->url = "http://127.0.0.1:8080";
	strcpy(o->route, "/v1/embeddings");
	o->dist_spec = "uniform:2:100";
	o->rate = 10.0;
	o->duration_s = 10.0;
	o->connections = 64;
	o->deadline_ms = -1;
	o->timeout_ms = 30000;
	o->seed = 1;
	optind = 0;	/* glibc: full re-initialisation, we may not be the first getopt user */
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
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
		case O_JSON:
			o->json_path = optarg;
			break;
		case O_TEXT:
			o->text = true;
			break;
		case O_QUIET:
			o->quiet = true;
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
	if (o->n_requests)
		o->duration_s = 0;
	else if (o->rate * (o->duration_s + o->warmup_s) * 1.5 + 100 > (double)LG_MAX_REQUESTS) {
		fprintf(stderr, "loadgen: rate x duration too large (cap %ld requests)\n",
			LG_MAX_REQUESTS);
		return -1;
	}
	if (lg_parse_url(o, o->url, route_set))
		return -1;
	if (!strcmp(o->route, "/embed"))
		o->text = true;
	return lg_dist_parse(&o->dist, o->dist_spec);
}

/* ---- schedule ---- */

/* Draw Poisson arrival times (exponential gaps, mean 1/rate) and lengths for the warmup and
 * measured phases. Returns 0 or -1 on OOM. */
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
		r->len = lg_dist_draw(&o->dist, &rng);
		n_measured += measured;
	}
	run->n_reqs = n;
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

/* Serialize the HTTP request for reqs[i] into c->wbuf. Returns 0 or -1 on OOM. */
static int lg_build_request(struct lg_run *run, struct lg_conn *c, long i)
{
	struct lg_opts *o = run->o;
	rg_buf *b = &run->body;
	const struct lg_req *r = &run->reqs[i];
	struct lg_rng rng;
	uint64_t s = o->seed * 0x100000001b3ULL ^ (uint64_t)i;
	const char *key = strcmp(o->route, "/embed") ? "input" : "inputs";

	lg_rng_seed(&rng, lg_splitmix64(&s));
	b->len = 0;
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
			const char *w = lg_words[lg_rng_next(&rng) %
						 (sizeof(lg_words) / sizeof(lg_words[0]))];
			if (k)
				rg_buf_put(b, " ", 1);
			rg_buf_put(b, w, strlen(w));
		}
		rg_buf_put(b, "\"]", 2);
	} else {
		/* Hand-formatted ids: at thousands of requests/s of 500 tokens, snprintf per id
		 * would cost the client a good part of a core. */
		rg_buf_printf(b, "[[%d", LG_CLS_ID);
		bool room = rg_buf_reserve(b, (size_t)(r->len > 2 ? r->len - 2 : 0) * 8);
		for (int k = 0; room && k < r->len - 2; k++) {
			long id = lg_rng_range(&rng, LG_TOKEN_ID_LO, LG_TOKEN_ID_HI - 1);
			char tmp[8];
			int nd = 0;
			do {
				tmp[nd++] = (char)('0' + id % 10);
				id /= 10;
			} while (id);
			b->data[b->len++] = ',';
			b->data[b->len++] = ' ';
			while (nd)
				b->data[b->len++] = tmp[--nd];
		}
		if (room)
			b->data[b->len] = '\0';
		rg_buf_printf(b, ", %d]]", LG_SEP_ID);
	}
	if (o->deadline_ms >= 0)
		rg_buf_printf(b, ", \"deadline_ms\": %d", o->deadline_ms);
	rg_buf_put(b, "}", 1);
	if (b->oom)
		return -1;

	char head[1024];
	int hn = snprintf(head, sizeof(head),
			  "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
			  "Accept: application/json\r\nConnection: keep-alive\r\n"
			  "Content-Length: %zu\r\n\r\n", o->route, o->host, o->port, b->len);
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

/* Result of parsing the bytes received so far. */
struct lg_resp {
	int status;
	bool complete;
	bool close;		/* server asked to close, or HTTP/1.0 without keep-alive */
	bool until_eof;		/* neither Content-Length nor chunked: body ends at EOF */
	bool bad;
	uint8_t hdr_mask;
	float hdr[LG_HDR_N];
};

static const char *lg_memmem(const char *h, size_t hn, const char *n)
{
	return memmem(h, hn, n, strlen(n));
}

/* Walk chunked framing from body start; returns true when the last chunk and trailer are in. */
static bool lg_chunked_complete(const char *p, size_t n, bool *bad)
{
	size_t pos = 0;

	for (;;) {
		const char *eol = lg_memmem(p + pos, n - pos, "\r\n");
		if (!eol)
			return false;
		char *end;
		unsigned long sz = strtoul(p + pos, &end, 16);
		if (end == p + pos) {
			*bad = true;
			return false;
		}
		pos = (size_t)(eol - p) + 2;
		if (sz == 0) {
			if (n - pos >= 2 && p[pos] == '\r' && p[pos + 1] == '\n')
				return true;
			return lg_memmem(p + pos, n - pos, "\r\n\r\n") != NULL;
		}
		if (sz > LG_MAX_RESPONSE) {
			*bad = true;
			return false;
		}
		pos += sz + 2;
		if (pos > n)
			return false;
	}
}

/* Parse the response in buf[0..n); eof says the peer closed. Fills *r. */
static void lg_parse_response(const char *buf, size_t n, bool eof, struct lg_resp *r)
{
	const char *hend = lg_memmem(buf, n, "\r\n\r\n");
	bool http10, chunked = false, keep_alive = false;
	long clen = -1;

	memset(r, 0, sizeof(*r));
	if (!hend) {
		r->bad = eof || n > 65536;
		return;
	}
	if (n < 12 || strncmp(buf, "HTTP/1.", 7) || buf[8] != ' ') {
		r->bad = true;
		return;
	}
	http10 = buf[7] == '0';
	r->status = atoi(buf + 9);
	if (r->status < 100 || r->status > 599) {
		r->bad = true;
		return;
	}
	const char *line = memchr(buf, '\n', (size_t)(hend - buf)) + 1;
	while (line < hend + 2) {
		const char *eol = lg_memmem(line, (size_t)(hend + 2 - line), "\r\n");
		const char *colon = memchr(line, ':', (size_t)(eol - line));
		if (colon) {
			size_t kn = (size_t)(colon - line);
			const char *v = colon + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			size_t vn = (size_t)(eol - v);
			char val[128];
			if (vn >= sizeof(val))
				vn = sizeof(val) - 1;
			memcpy(val, v, vn);
			val[vn] = '\0';
			if (kn == 14 && !strncasecmp(line, "content-length", kn)) {
				clen = strtol(val, NULL, 10);
			} else if (kn == 17 && !strncasecmp(line, "transfer-encoding", kn)) {
				chunked = strcasestr(val, "chunked") != NULL;
			} else if (kn == 10 && !strncasecmp(line, "connection", kn)) {
				if (strcasestr(val, "close"))
					r->close = true;
				if (strcasestr(val, "keep-alive"))
					keep_alive = true;
			} else {
				for (int h = 0; h < LG_HDR_N; h++) {
					if (kn == strlen(lg_hdr_names[h]) &&
					    !strncasecmp(line, lg_hdr_names[h], kn)) {
						char *end;
						double x = strtod(val, &end);
						if (end != val && isfinite(x)) {
							r->hdr[h] = (float)x;
							r->hdr_mask |= (uint8_t)(1u << h);
						}
					}
				}
			}
		}
		line = eol + 2;
	}
	if (http10 && !keep_alive)
		r->close = true;
	size_t body_off = (size_t)(hend - buf) + 4, have = n - body_off;
	bool no_body = r->status < 200 || r->status == 204 || r->status == 304;
	if (no_body) {
		r->complete = true;
	} else if (chunked) {
		r->complete = lg_chunked_complete(buf + body_off, have, &r->bad);
	} else if (clen >= 0) {
		if (clen > (long)LG_MAX_RESPONSE)
			r->bad = true;
		r->complete = have >= (size_t)clen;
	} else {
		r->until_eof = true;
		r->close = true;
		r->complete = eof;
	}
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
	c->rlen = 0;
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
	c->rlen = 0;
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
	c->rlen = 0;
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

	if (c->rlen == 0 && c->n_served > 0 && !r->retried) {
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

/* Record a complete response and return the conn to the pool. */
static void lg_conn_complete(struct lg_run *run, int ci, const struct lg_resp *rp)
{
	struct lg_conn *c = &run->conns[ci];
	struct lg_req *r = &run->reqs[c->req];

	r->status = rp->status;
	r->err = LG_ERR_NONE;
	r->done_ns = lg_now(run);
	r->hdr_mask = rp->hdr_mask;
	memcpy(r->hdr, rp->hdr, sizeof(r->hdr));
	c->n_served++;
	c->rlen = 0;
	if (rp->close) {
		lg_conn_close(run, ci);
	} else {
		c->state = LG_CONN_IDLE;
		lg_conn_set_events(run, ci, EPOLLIN);
	}
	lg_conn_release(run, ci);
}

static void lg_conn_read(struct lg_run *run, int ci)
{
	struct lg_conn *c = &run->conns[ci];
	bool eof = false;
	struct lg_resp rp;

	for (;;) {
		if (c->rcap - c->rlen < 16384) {
			size_t cap = c->rcap ? 2 * c->rcap : 65536;
			char *p = cap <= 2 * (size_t)LG_MAX_RESPONSE ? realloc(c->rbuf, cap) : NULL;
			if (!p) {
				lg_conn_fail(run, ci, LG_ERR_PARSE);
				return;
			}
			c->rbuf = p;
			c->rcap = cap;
		}
		ssize_t k = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen - 1, 0);
		if (k > 0) {
			c->rlen += (size_t)k;
			continue;
		}
		if (k == 0) {
			eof = true;
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		if (c->rlen == 0) {
			lg_conn_broken(run, ci);
			return;
		}
		eof = true;
		break;
	}
	if (c->rlen == 0) {
		if (eof)
			lg_conn_broken(run, ci);
		return;
	}
	lg_parse_response(c->rbuf, c->rlen, eof, &rp);
	if (rp.bad) {
		lg_conn_fail(run, ci, LG_ERR_PARSE);
		return;
	}
	if (rp.complete) {
		if (eof)
			rp.close = true;
		lg_conn_complete(run, ci, &rp);
		return;
	}
	if (eof)
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

struct lg_stats {
	long n_measured, n_sent, n_ok, n_fail, n_retried;
	long status_count[600];
	long err_count[LG_ERR_COUNT];
	double window_s, offered_rps, achieved_rps, throughput_rps, completion_rps, tokens_per_s;
	double elapsed_s;
	double lat_mean, lat_min, lat_p50, lat_p90, lat_p99, lat_max;
	double lag_mean, lag_max;
	double hdr_mean[LG_HDR_N];
	long hdr_n[LG_HDR_N];
	double len_mean;
	long len_min, len_max, tokens_ok;
	double utility, utility_per_s;	/* TCB ICPP'22 sec. 5.1: sum of 1/len over in-deadline */
	long deadline_met;
};

static int lg_stats_compute(struct lg_run *run, struct lg_stats *s, int64_t end_ns)
{
	struct lg_opts *o = run->o;
	double *lat = malloc((size_t)(run->n_reqs ? run->n_reqs : 1) * sizeof(double));
	int64_t win0 = (int64_t)(o->warmup_s * 1e9), first_send = -1, last_send = -1,
		last_done = -1, last_sched = win0;
	double lat_sum = 0, lag_sum = 0, len_sum = 0;
	long n_lat = 0;

	if (!lat)
		return -1;
	memset(s, 0, sizeof(*s));
	s->len_min = -1;
	for (long i = 0; i < run->n_reqs; i++) {
		const struct lg_req *r = &run->reqs[i];
		if (!r->measured)
			continue;
		s->n_measured++;
		if (r->sched_ns > last_sched)
			last_sched = r->sched_ns;
		long len = o->dist.kind == LG_DIST_FILE ? (long)strlen(o->dist.lines[r->len])
							 : r->len;
		len_sum += (double)len;
		if (s->len_min < 0 || len < s->len_min)
			s->len_min = len;
		if (len > s->len_max)
			s->len_max = len;
		if (r->send_ns >= 0) {
			s->n_sent++;
			double lag = (double)(r->send_ns - r->sched_ns) / 1e6;
			lag_sum += lag;
			if (lag > s->lag_max)
				s->lag_max = lag;
			if (first_send < 0 || r->send_ns < first_send)
				first_send = r->send_ns;
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
			continue;
		}
		s->n_ok++;
		s->tokens_ok += len;
		double l = (double)(r->done_ns - r->sched_ns) / 1e6;
		lat[n_lat++] = l;
		lat_sum += l;
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
	}
	for (int h = 0; h < LG_HDR_N; h++)
		s->hdr_mean[h] = s->hdr_n[h] ? s->hdr_mean[h] / (double)s->hdr_n[h] : NAN;
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
	 * and throughput_rps = completion_rps. */
	double span = last_done > win0 ? (double)(last_done - win0) / 1e9 : s->window_s;
	if (span < s->window_s)
		span = s->window_s;
	s->completion_rps = (double)s->n_ok / span;
	s->throughput_rps = s->completion_rps;
	s->tokens_per_s = (double)s->tokens_ok / span;
	if (o->duration_s > 0) {
		int64_t win1 = win0 + (int64_t)(o->duration_s * 1e9);
		long n_in = 0, tok_in = 0;
		for (long i = 0; i < run->n_reqs; i++) {
			const struct lg_req *r = &run->reqs[i];
			if (r->err == LG_ERR_NONE && r->status >= 200 && r->status <= 299 &&
			    r->done_ns >= win0 && r->done_ns < win1) {
				n_in++;
				tok_in += o->dist.kind == LG_DIST_FILE
						  ? (long)strlen(o->dist.lines[r->len]) : r->len;
			}
		}
		s->throughput_rps = (double)n_in / o->duration_s;
		s->tokens_per_s = (double)tok_in / o->duration_s;
	}
	s->utility_per_s = s->utility / span;
	s->elapsed_s = (double)end_ns / 1e9;
	s->len_mean = s->n_measured ? len_sum / (double)s->n_measured : 0;
	if (s->len_min < 0)
		s->len_min = 0;
	s->lag_mean = s->n_sent ? lag_sum / (double)s->n_sent : 0;
	if (n_lat) {
		qsort(lat, (size_t)n_lat, sizeof(double), lg_cmp_double);
		s->lat_mean = lat_sum / (double)n_lat;
		s->lat_min = lat[0];
		s->lat_p50 = lg_percentile(lat, n_lat, 50);
		s->lat_p90 = lg_percentile(lat, n_lat, 90);
		s->lat_p99 = lg_percentile(lat, n_lat, 99);
		s->lat_max = lat[n_lat - 1];
	} else {
		s->lat_mean = s->lat_min = s->lat_p50 = s->lat_p90 = s->lat_p99 = s->lat_max = NAN;
	}
	(void)first_send;
	free(lat);
	return 0;
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

	rg_buf_init(&b);
	rg_buf_json_str(&b, s, strlen(s));
	if (b.oom)
		fputs("null", f);
	else
		fwrite(b.data, 1, b.len, f);
	rg_buf_free(&b);
}

static int lg_write_json(const struct lg_run *run, const struct lg_stats *s, const char *path)
{
	const struct lg_opts *o = run->o;
	FILE *f = fopen(path, "w");
	bool first;

	if (!f) {
		fprintf(stderr, "loadgen: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "{\n  \"tool\": \"ragged-loadgen\",\n  \"url\": ");
	lg_json_str(f, o->url);
	fprintf(f, ",\n  \"route\": ");
	lg_json_str(f, o->route);
	fprintf(f, ",\n  \"dist\": ");
	lg_json_str(f, o->dist_spec);
	fprintf(f, ",\n  \"input_kind\": \"%s\"",
		o->dist.kind == LG_DIST_FILE ? "file_text" : o->text ? "words" : "token_ids");
	fprintf(f, ",\n  \"rate_target\": ");
	lg_json_num(f, o->rate);
	fprintf(f, ",\n  \"duration_s\": ");
	lg_json_num(f, o->duration_s);
	fprintf(f, ",\n  \"requests_target\": %ld,\n  \"warmup_s\": ", o->n_requests);
	lg_json_num(f, o->warmup_s);
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
	fprintf(f, ",\n  \"window_s\": ");
	lg_json_num(f, s->window_s);
	fprintf(f, ",\n  \"elapsed_s\": ");
	lg_json_num(f, s->elapsed_s);
	fprintf(f, ",\n  \"offered_rps\": ");
	lg_json_num(f, s->offered_rps);
	fprintf(f, ",\n  \"achieved_rps\": ");
	lg_json_num(f, s->achieved_rps);
	fprintf(f, ",\n  \"throughput_rps\": ");
	lg_json_num(f, s->throughput_rps);
	fprintf(f, ",\n  \"completion_rps\": ");
	lg_json_num(f, s->completion_rps);
	fprintf(f, ",\n  \"tokens_per_s\": ");
	lg_json_num(f, s->tokens_per_s);
	fprintf(f, ",\n  \"latency_ms\": {\"mean\": ");
	lg_json_num(f, s->lat_mean);
	fprintf(f, ", \"min\": ");
	lg_json_num(f, s->lat_min);
	fprintf(f, ", \"p50\": ");
	lg_json_num(f, s->lat_p50);
	fprintf(f, ", \"p90\": ");
	lg_json_num(f, s->lat_p90);
	fprintf(f, ", \"p99\": ");
	lg_json_num(f, s->lat_p99);
	fprintf(f, ", \"max\": ");
	lg_json_num(f, s->lat_max);
	fprintf(f, "},\n  \"send_lag_ms\": {\"mean\": ");
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
		o->dist.kind == LG_DIST_FILE ? "bytes" : "tokens", s->len_min, s->len_max);
	lg_json_num(f, s->len_mean);
	fprintf(f, "},\n  \"deadline_met\": %ld,\n  \"utility\": ", s->deadline_met);
	lg_json_num(f, s->utility);
	fprintf(f, ",\n  \"utility_per_s\": ");
	lg_json_num(f, s->utility_per_s);
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
	fprintf(f, "}}\n}\n");
	if (fclose(f)) {
		fprintf(stderr, "loadgen: error writing %s\n", path);
		return -1;
	}
	return 0;
}

static void lg_print_table(const struct lg_run *run, const struct lg_stats *s)
{
	const struct lg_opts *o = run->o;
	bool any = false;

	printf("ragged loadgen  %s  route %s  dist %s  rate %.4g/s  conns %d  seed %llu\n",
	       o->url, o->route, o->dist_spec, o->rate, o->connections,
	       (unsigned long long)o->seed);
	printf("  %-11s scheduled %ld  sent %ld  ok %ld  failed %ld  retried %ld  (warmup %ld)\n",
	       "requests", s->n_measured, s->n_sent, s->n_ok, s->n_fail, s->n_retried,
	       run->n_reqs - s->n_measured);
	printf("  %-11s offered %.2f/s  achieved %.2f/s  throughput %.2f/s  %.0f %s/s"
	       "  completions %.2f/s  (window %.2f s, elapsed %.2f s)\n", "rate", s->offered_rps,
	       s->achieved_rps, s->throughput_rps, s->tokens_per_s,
	       o->dist.kind == LG_DIST_FILE ? "bytes" : "tokens", s->completion_rps, s->window_s,
	       s->elapsed_s);
	printf("  %-11s p50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n", "latency ms",
	       s->lat_p50, s->lat_p90, s->lat_p99, s->lat_max, s->lat_mean);
	printf("  %-11s queue %.2f  inference %.2f  total %.2f  batch %.2f  (mean, from headers)\n",
	       "server ms", s->hdr_mean[LG_HDR_QUEUE], s->hdr_mean[LG_HDR_INFER],
	       s->hdr_mean[LG_HDR_TOTAL], s->hdr_mean[LG_HDR_BATCH]);
	printf("  %-11s mean %.3f ms  max %.3f ms  (send time - scheduled time)\n", "send lag",
	       s->lag_mean, s->lag_max);
	printf("  %-11s min %ld  max %ld  mean %.1f %s\n", "length", s->len_min, s->len_max,
	       s->len_mean, o->dist.kind == LG_DIST_FILE ? "bytes" : "tokens");
	if (o->deadline_ms >= 0)
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
	if (!run.conns || !run.free_conns || !run.pending)
		goto out_oom;
	for (int ci = 0; ci < o.connections; ci++) {
		run.conns[ci].fd = -1;
		run.conns[ci].req = -1;
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
			free(run.conns[ci].rbuf);
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
	rg_buf_free(&run.body);
	if (run.ai)
		freeaddrinfo(run.ai);
out_free_opts:
	lg_dist_free(&o.dist);
	return rc;
}
