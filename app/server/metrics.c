/* Prometheus metrics of `ragged serve`. See metrics.h. */
#include "server/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/routes.h"

static const int codes[RG_METRICS_N_CODES] = { 200, 400, 404, 405, 413, 422, 429, 500, 503, 504,
					       0 /* other */, -1 };

void rg_hist_init(rg_hist *h, const double *le, int n)
{
	memset(h, 0, sizeof(*h));
	h->n = n;
	memcpy(h->le, le, (size_t)n * sizeof(double));
}

void rg_hist_observe(rg_hist *h, double v)
{
	int i = 0;

	if (v < 0)
		return;
	while (i < h->n && v > h->le[i])
		i++;
	h->count[i]++;
	h->sum += v;
	h->total++;
}

void rg_metrics_init(rg_metrics *m)
{
	static const double ms[] = { 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000,
				     10000, 30000 };
	static const double bs[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512 };
	static const double bt[] = { 16, 64, 256, 1024, 4096, 16384, 65536 };

	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	for (int k = 0; k < RG_METRICS_N_CLASSES; k++) {
		rg_hist_init(&m->queue_ms[k], ms, 15);
		rg_hist_init(&m->inference_ms[k], ms, 15);
		rg_hist_init(&m->total_ms[k], ms, 15);
	}
	rg_hist_init(&m->tokenize_ms, ms, 15);
	rg_hist_init(&m->batch_size, bs, 10);
	rg_hist_init(&m->batch_tokens, bt, 7);
}

void rg_metrics_destroy(rg_metrics *m)
{
	pthread_mutex_destroy(&m->mu);
}

static int code_index(int status)
{
	for (int i = 0; i < RG_METRICS_N_CODES - 2; i++)
		if (codes[i] == status)
			return i;
	return RG_METRICS_N_CODES - 2;
}

void rg_metrics_request(rg_metrics *m, rg_route route, int status, double queue_ms,
			double inference_ms, double total_ms)
{
	if ((int)route < 0 || route >= RG_ROUTE_COUNT)
		route = RG_ROUTE_OTHER;
	int k = status / 100 == 2 ? 0 : status / 100 == 4 ? 1 : status / 100 == 5 ? 2 : -1;

	pthread_mutex_lock(&m->mu);
	m->requests[route][code_index(status)]++;
	if (k >= 0 && rg_route_runs_model(route)) {
		rg_hist_observe(&m->queue_ms[k], queue_ms);
		rg_hist_observe(&m->inference_ms[k], inference_ms);
		rg_hist_observe(&m->total_ms[k], total_ms);
	}
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_tokenize(rg_metrics *m, double ms)
{
	pthread_mutex_lock(&m->mu);
	rg_hist_observe(&m->tokenize_ms, ms);
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_set_devices(rg_metrics *m, const char *const *names, int n)
{
	pthread_mutex_lock(&m->mu);
	m->n_devices = n < RG_METRICS_MAX_DEVICES ? n : RG_METRICS_MAX_DEVICES;
	for (int i = 0; i < m->n_devices; i++)
		snprintf(m->device[i], sizeof(m->device[i]), "%s", names[i]);
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_batch(rg_metrics *m, int device, int n, int real_tokens, int computed_tokens,
		      bool ok)
{
	pthread_mutex_lock(&m->mu);
	if (ok && device >= 0 && device < m->n_devices) {
		m->device_batches[device]++;
		m->device_tokens[device] += (uint64_t)real_tokens;
	}
	if (ok) {
		m->batches++;
		rg_hist_observe(&m->batch_size, n);
		rg_hist_observe(&m->batch_tokens, computed_tokens);
		m->real_tokens += (uint64_t)real_tokens;
		m->computed_tokens += (uint64_t)computed_tokens;
	} else {
		m->batch_failures++;
	}
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_model_stats(rg_metrics *m, int device, const rg_model_stats *st)
{
	pthread_mutex_lock(&m->mu);
	if (device >= 0 && device < m->n_devices)
		m->device_model[device] = *st;
	pthread_mutex_unlock(&m->mu);
}

/* One per-device series of the models' counters: HELP text, TYPE, then a sample per device. */
static void render_device_series(rg_buf *o, const rg_metrics *s, const char *name,
				 const char *type, const char *help, size_t field)
{
	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (int i = 0; i < s->n_devices; i++)
		rg_buf_printf(o, "%s{device=\"%s\"} %lld\n", name, s->device[i],
			       *(const long long *)((const char *)&s->device_model[i] + field));
}

void rg_metrics_cache(rg_metrics *m, uint64_t hits, uint64_t misses)
{
	pthread_mutex_lock(&m->mu);
	m->cache_hits += hits;
	m->cache_misses += misses;
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_dropped(rg_metrics *m, uint64_t n)
{
	pthread_mutex_lock(&m->mu);
	m->dropped_disconnected += n;
	pthread_mutex_unlock(&m->mu);
}

void rg_metrics_expired(rg_metrics *m, uint64_t n)
{
	pthread_mutex_lock(&m->mu);
	m->expired += n;
	pthread_mutex_unlock(&m->mu);
}

/* One histogram series; label: "" or `key="value",` (written before le). */
void rg_metrics_answered(rg_metrics *m, uint64_t *total, uint64_t *ok)
{
	uint64_t t = 0, k = 0;

	pthread_mutex_lock(&m->mu);
	for (int r = 0; r < RG_ROUTE_COUNT; r++)
		for (int c = 0; c < RG_METRICS_N_CODES; c++) {
			t += m->requests[r][c];
			if (codes[c] == 200)
				k += m->requests[r][c];
		}
	pthread_mutex_unlock(&m->mu);
	*total = t;
	*ok = k;
}

/* One histogram series, bounds and sum multiplied by scale (1e-3: ms as TEI's seconds). */
static void render_series_scaled(rg_buf *o, const char *name, const char *label,
				 const rg_hist *h, double scale)
{
	uint64_t cum = 0;
	size_t ll = strlen(label);

	for (int i = 0; i < h->n; i++) {
		cum += h->count[i];
		rg_buf_printf(o, "%s_bucket{%sle=\"%g\"} %llu\n", name, label, h->le[i] * scale,
			       (unsigned long long)cum);
	}
	cum += h->count[h->n];
	rg_buf_printf(o, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
	/* _sum and _count carry the label without its trailing comma */
	if (ll)
		rg_buf_printf(o, "%s_sum{%.*s} %.6f\n%s_count{%.*s} %llu\n", name, (int)ll - 1,
			       label, h->sum * scale, name, (int)ll - 1, label,
			       (unsigned long long)h->total);
	else
		rg_buf_printf(o, "%s_sum %.9g\n%s_count %llu\n", name, h->sum * scale, name,
			       (unsigned long long)h->total);
}

void rg_hist_render_labeled(rg_buf *o, const char *name, const char *help, const char *label,
			    const rg_hist *h, double scale)
{
	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	render_series_scaled(o, name, label, h, scale);
}

void rg_metrics_label(char *out, size_t n, const char *key, const char *value)
{
	size_t k = 0;
	int w = snprintf(out, n, "%s=\"", key);

	if (w < 0 || (size_t)w >= n) {
		if (n)
			out[0] = '\0';
		return;
	}
	k = (size_t)w;
	/* the exposition format's escapes: backslash, double quote, line feed */
	for (const char *v = value; *v && k + 4 < n; v++) {
		if (*v == '\\' || *v == '"' || *v == '\n') {
			out[k++] = '\\';
			out[k++] = *v == '\n' ? 'n' : *v;
		} else {
			out[k++] = *v;
		}
	}
	out[k++] = '"';
	out[k++] = ',';
	out[k] = '\0';
}

static void render_series(rg_buf *o, const char *name, const char *label, const rg_hist *h)
{
	render_series_scaled(o, name, label, h, 1.0);
}

/* The family a line belongs to: a header's name ("# HELP name ..." / "# TYPE name ..."), or a
 * sample's metric name less a histogram's _bucket / _sum / _count suffix when fam (the family
 * of the header before it) is that prefix. *nl: the name's length; NULL for another line. */
static const char *line_family(const char *l, size_t len, const char *fam, size_t fam_len,
			       size_t *nl)
{
	const char *n;
	size_t k = 0;

	if (len > 7 && (!strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7))) {
		n = l + 7;
		while (7 + k < len && n[k] != ' ')
			k++;
		*nl = k;
		return k ? n : NULL;
	}
	if (!len || l[0] == '#')
		return NULL;
	while (k < len && l[k] != '{' && l[k] != ' ')
		k++;
	if (fam && k >= fam_len && !strncmp(l, fam, fam_len)) {
		*nl = fam_len;
		return fam;
	}
	*nl = k;
	return l;
}

/* Append part's sample lines of family fam (fam_len bytes; headers when with_headers) to o,
 * label (may be "") put first among each sample's labels. */
static void merge_family(rg_buf *o, const rg_buf *part, const char *fam, size_t fam_len,
			 const char *label, bool with_headers)
{
	const char *cur = NULL;
	size_t cur_len = 0, ll = strlen(label);

	for (size_t i = 0; i < part->len;) {
		const char *l = part->data + i, *nlp = memchr(l, '\n', part->len - i);
		const size_t len = nlp ? (size_t)(nlp - l) : part->len - i;
		size_t nl;
		const char *f;

		i += len + 1;
		if (len > 7 && (!strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7))) {
			if ((f = line_family(l, len, NULL, 0, &nl))) {
				cur = f;
				cur_len = nl;
			}
			if (with_headers && cur && cur_len == fam_len && !memcmp(cur, fam, fam_len)) {
				rg_buf_put(o, l, len);
				rg_buf_put(o, "\n", 1);
			}
			continue;
		}
		if (!(f = line_family(l, len, cur, cur_len, &nl)) || nl != fam_len ||
		    memcmp(f, fam, fam_len))
			continue;
		{
			size_t k = 0;

			while (k < len && l[k] != '{' && l[k] != ' ')
				k++;
			rg_buf_put(o, l, k); /* the metric name */
			if (k < len && l[k] == '{') {
				rg_buf_put(o, "{", 1);
				rg_buf_put(o, label, ll); /* `key="value",` before the sample's own */
				rg_buf_put(o, l + k + 1, len - k - 1);
			} else if (ll) {
				rg_buf_put(o, "{", 1);
				rg_buf_put(o, label, ll - 1); /* without its trailing comma */
				rg_buf_put(o, "}", 1);
				rg_buf_put(o, l + k, len - k);
			} else {
				rg_buf_put(o, l + k, len - k);
			}
			rg_buf_put(o, "\n", 1);
		}
	}
}

void rg_metrics_merge_parts(rg_buf *o, const rg_buf *parts, const char *const *label, int n)
{
	/* the families in order of first appearance: each part's HELP lines, scanned in order,
	 * a family merged when its name was not seen in an earlier part or earlier in this one */
	for (int p = 0; p < n; p++)
		for (size_t i = 0; i < parts[p].len;) {
			const char *l = parts[p].data + i, *nlp = memchr(l, '\n', parts[p].len - i);
			const size_t len = nlp ? (size_t)(nlp - l) : parts[p].len - i;
			const char *fam;
			size_t nl;
			bool seen = false;

			i += len + 1;
			if (len <= 7 || strncmp(l, "# HELP ", 7) ||
			    !(fam = line_family(l, len, NULL, 0, &nl)))
				continue;
			/* seen: a HELP of this name before this line, in this part or an earlier */
			for (int q = 0; q <= p && !seen; q++) {
				const size_t end = q < p ? parts[q].len : (size_t)(l - parts[q].data);

				for (size_t j = 0; j < end && !seen;) {
					const char *m = parts[q].data + j;
					const char *mn = memchr(m, '\n', end - j);
					const size_t ml = mn ? (size_t)(mn - m) : end - j;
					size_t mnl;
					const char *mf;

					j += ml + 1;
					seen = ml > 7 && !strncmp(m, "# HELP ", 7) &&
					       (mf = line_family(m, ml, NULL, 0, &mnl)) && mnl == nl &&
					       !memcmp(mf, fam, nl);
				}
			}
			if (seen)
				continue;
			merge_family(o, &parts[p], fam, nl, label[p], true);
			for (int q = p + 1; q < n; q++)
				merge_family(o, &parts[q], fam, nl, label[q], false);
		}
}

void rg_hist_render(rg_buf *o, const char *name, const char *help, const rg_hist *h,
		    double scale)
{
	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	render_series_scaled(o, name, "", h, scale);
}

static void render_hist(rg_buf *o, const char *name, const char *help, const rg_hist *h)
{
	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	render_series(o, name, "", h);
}

/* A histogram per status class, label class="2xx" / "4xx" / "5xx". */
static void render_hist_classes(rg_buf *o, const char *name, const char *help, const rg_hist *h)
{
	static const char *const label[RG_METRICS_N_CLASSES] = {
		"class=\"2xx\",", "class=\"4xx\",", "class=\"5xx\","};

	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int k = 0; k < RG_METRICS_N_CLASSES; k++)
		render_series(o, name, label[k], &h[k]);
}

static void render_counter(rg_buf *o, const char *name, const char *help, uint64_t v)
{
	rg_buf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
		       (unsigned long long)v);
}

static void render_gauge_or_counter(rg_buf *o, const char *name, const char *type, double v)
{
	rg_buf_printf(o, "# TYPE %s %s\n%s %.17g\n", name, type, name, v);
}

/* Requests of route r answered, and those answered 2xx. */
static void route_counts(const rg_metrics *s, rg_route r, uint64_t *all, uint64_t *ok)
{
	*all = *ok = 0;
	for (int c = 0; c < RG_METRICS_N_CODES; c++) {
		*all += s->requests[r][c];
		if (codes[c] / 100 == 2)
			*ok += s->requests[r][c];
	}
}

void rg_metrics_render_tgi_requests(rg_metrics *m, rg_buf *o)
{
	static const rg_route gen[] = {RG_ROUTE_GENERATE, RG_ROUTE_COMPLETIONS, RG_ROUTE_CHAT};
	uint64_t all = 0, ok = 0;

	pthread_mutex_lock(&m->mu);
	for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++) {
		uint64_t a, g;

		route_counts(m, gen[i], &a, &g);
		all += a;
		ok += g;
	}
	pthread_mutex_unlock(&m->mu);
	rg_buf_printf(o, "# HELP tgi_request_count Generation requests (TGI's name; /generate, "
		      "/generate_stream, /v1/completions, /v1/chat/completions).\n");
	render_gauge_or_counter(o, "tgi_request_count", "counter", (double)all);
	rg_buf_printf(o, "# HELP tgi_request_success Of those, answered 2xx (a stream: ended "
		      "without an error event).\n");
	render_gauge_or_counter(o, "tgi_request_success", "counter", (double)ok);
	rg_buf_printf(o, "# HELP tgi_request_failure Of those, the others.\n");
	render_gauge_or_counter(o, "tgi_request_failure", "counter", (double)(all - ok));
}

/* TEI's metric names (text-embeddings-router), so that its dashboards carry over: the same
 * counts as ragged's own, durations in seconds from the 2xx histograms (TEI observes them on
 * success), one series each (TEI's method/err labels are not kept). */
static void render_tei(rg_buf *o, const rg_metrics *s, int queue_depth)
{
	uint64_t all = 0, ok = 0;
	char name[64];

	/* one series per prefix, over every route the table counts under it (te_embed: /embed and
	 * /v1/embeddings), in the order of the routes' first appearance */
	for (int r = 0; r < RG_ROUTE_OTHER; r++) {
		const char *prefix = rg_route_tei_metric((rg_route)r);
		uint64_t a = 0, g = 0;
		bool seen = false;

		for (int q = 0; prefix && q < r && !seen; q++) {
			const char *pq = rg_route_tei_metric((rg_route)q);

			seen = pq && !strcmp(pq, prefix);
		}
		if (!prefix || seen)
			continue;
		for (int q = r; q < RG_ROUTE_OTHER; q++) {
			const char *pq = rg_route_tei_metric((rg_route)q);
			uint64_t a1, g1;

			if (!pq || strcmp(pq, prefix))
				continue;
			route_counts(s, (rg_route)q, &a1, &g1);
			a += a1;
			g += g1;
		}
		all += a;
		ok += g;
		snprintf(name, sizeof(name), "%s_count", prefix);
		render_gauge_or_counter(o, name, "counter", (double)a);
		snprintf(name, sizeof(name), "%s_success", prefix);
		render_gauge_or_counter(o, name, "counter", (double)g);
		snprintf(name, sizeof(name), "%s_failure", prefix);
		render_gauge_or_counter(o, name, "counter", (double)(a - g));
	}
	render_gauge_or_counter(o, "te_request_count", "counter", (double)all);
	render_gauge_or_counter(o, "te_request_success", "counter", (double)ok);
	render_gauge_or_counter(o, "te_request_failure", "counter", (double)(all - ok));
	rg_buf_puts(o, "# TYPE te_request_duration histogram\n");
	render_series_scaled(o, "te_request_duration", "", &s->total_ms[0], 1e-3);
	rg_buf_puts(o, "# TYPE te_request_tokenization_duration histogram\n");
	render_series_scaled(o, "te_request_tokenization_duration", "", &s->tokenize_ms, 1e-3);
	rg_buf_puts(o, "# TYPE te_request_queue_duration histogram\n");
	render_series_scaled(o, "te_request_queue_duration", "", &s->queue_ms[0], 1e-3);
	rg_buf_puts(o, "# TYPE te_request_inference_duration histogram\n");
	render_series_scaled(o, "te_request_inference_duration", "", &s->inference_ms[0], 1e-3);
	rg_buf_puts(o, "# TYPE te_batch_next_size histogram\n");
	render_series(o, "te_batch_next_size", "", &s->batch_size);
	rg_buf_puts(o, "# TYPE te_batch_next_tokens histogram\n");
	render_series(o, "te_batch_next_tokens", "", &s->batch_tokens);
	render_gauge_or_counter(o, "te_queue_size", "gauge", queue_depth);
}

void rg_metrics_render(rg_metrics *m, rg_buf *o, int queue_depth, size_t mem_used,
		       size_t mem_total, size_t cache_entries)
{
	rg_metrics s;

	/* Copy under the lock, format outside it. */
	pthread_mutex_lock(&m->mu);
	memcpy(&s, m, sizeof(s));
	pthread_mutex_unlock(&m->mu);

	rg_buf_puts(o, "# HELP ragged_requests_total HTTP requests answered, by route and status "
			"code.\n# TYPE ragged_requests_total counter\n");
	for (int r = 0; r < RG_ROUTE_COUNT; r++)
		for (int c = 0; c < RG_METRICS_N_CODES - 1; c++)
			if (s.requests[r][c] || (c == 0 && r < RG_ROUTE_OTHER)) {
				if (codes[c])
					rg_buf_printf(o, "ragged_requests_total{route=\"%s\","
						       "code=\"%d\"} %llu\n", rg_route_name(r),
						       codes[c], (unsigned long long)s.requests[r][c]);
				else
					rg_buf_printf(o, "ragged_requests_total{route=\"%s\","
						       "code=\"other\"} %llu\n", rg_route_name(r),
						       (unsigned long long)s.requests[r][c]);
			}
	render_hist_classes(o, "ragged_queue_time_ms", "Time requests of the model routes waited "
			    "in the queue (ms), by status class.", s.queue_ms);
	render_hist_classes(o, "ragged_inference_time_ms", "Model time of the batches of a request "
			    "(ms), by status class.", s.inference_ms);
	render_hist_classes(o, "ragged_total_time_ms", "Time from request to response (ms), by "
			    "status class.", s.total_ms);
	render_hist(o, "ragged_batch_size", "Sequences per executed batch.", &s.batch_size);
	render_hist(o, "ragged_batch_tokens", "Computed tokens (padding included) per batch.",
		    &s.batch_tokens);
	render_counter(o, "ragged_batches_total", "Batches executed.", s.batches);
	render_counter(o, "ragged_batch_failures_total", "Batches the model failed.",
		       s.batch_failures);
	if (s.n_devices) {
		rg_buf_puts(o, "# HELP ragged_device_batches_total Batches executed, by device.\n"
				"# TYPE ragged_device_batches_total counter\n");
		for (int i = 0; i < s.n_devices; i++)
			rg_buf_printf(o, "ragged_device_batches_total{device=\"%s\"} %llu\n",
				       s.device[i], (unsigned long long)s.device_batches[i]);
		rg_buf_puts(o, "# HELP ragged_device_tokens_total Tokens of requests computed, by "
				"device.\n# TYPE ragged_device_tokens_total counter\n");
		for (int i = 0; i < s.n_devices; i++)
			rg_buf_printf(o, "ragged_device_tokens_total{device=\"%s\"} %llu\n",
				       s.device[i], (unsigned long long)s.device_tokens[i]);
		render_device_series(o, &s, "ragged_device_graph_captures_total", "counter",
				     "CUDA graphs captured (a new or evicted batch bucket: an eager "
				     "run plus a capture; the start-up warm-up's included), by device.",
				     offsetof(rg_model_stats, graph_captures));
		render_device_series(o, &s, "ragged_device_graphs_warm", "gauge",
				     "CUDA graphs captured at start-up (--graph-warmup-len) and kept, "
				     "by device.", offsetof(rg_model_stats, graphs_pinned));
		render_device_series(o, &s, "ragged_device_graph_replays_total", "counter",
				     "Batches answered by replaying a CUDA graph, by device.",
				     offsetof(rg_model_stats, graph_replays));
		render_device_series(o, &s, "ragged_device_eager_batches_total", "counter",
				     "Batches on the CUDA graph path run eagerly (their bucket had "
				     "no graph yet), by device.", offsetof(rg_model_stats, graph_eager));
		render_device_series(o, &s, "ragged_device_gemm_plans_total", "counter",
				     "GEMM plans built, each autotuned (a new shape, or one evicted "
				     "from the plan cache), by device; 0 on the CPU.",
				     offsetof(rg_model_stats, gemm_plans));
	}
	render_counter(o, "ragged_real_tokens_total", "Tokens of requests computed.", s.real_tokens);
	render_counter(o, "ragged_computed_tokens_total", "Tokens computed, padding included.",
		       s.computed_tokens);
	rg_buf_printf(o, "# HELP ragged_padding_efficiency Real tokens / computed tokens.\n"
			  "# TYPE ragged_padding_efficiency gauge\nragged_padding_efficiency %.6f\n",
		       s.computed_tokens ? (double)s.real_tokens / (double)s.computed_tokens : 1.0);
	rg_buf_printf(o, "# HELP ragged_queue_depth Sequences waiting.\n"
			  "# TYPE ragged_queue_depth gauge\nragged_queue_depth %d\n", queue_depth);
	render_counter(o, "ragged_cache_hits_total", "Inputs answered from the response cache.",
		       s.cache_hits);
	render_counter(o, "ragged_cache_misses_total", "Inputs not found in the response cache.",
		       s.cache_misses);
	rg_buf_printf(o, "# HELP ragged_cache_entries Entries in the in-memory cache.\n"
			  "# TYPE ragged_cache_entries gauge\nragged_cache_entries %zu\n",
		       cache_entries);
	render_counter(o, "ragged_dropped_disconnected_total",
		       "Queued requests dropped because the client disconnected.",
		       s.dropped_disconnected);
	render_counter(o, "ragged_expired_total", "Requests whose deadline passed in the queue.",
		       s.expired);
	render_tei(o, &s, queue_depth);
	rg_buf_printf(o, "# HELP ragged_device_memory_used_bytes Memory in use on the model's "
			  "devices, summed (RSS on CPU).\n# TYPE ragged_device_memory_used_bytes gauge\n"
			  "ragged_device_memory_used_bytes %zu\n", mem_used);
	rg_buf_printf(o, "# HELP ragged_device_memory_total_bytes Memory of the model's devices, "
			  "summed.\n"
			  "# TYPE ragged_device_memory_total_bytes gauge\n"
			  "ragged_device_memory_total_bytes %zu\n", mem_total);
}
