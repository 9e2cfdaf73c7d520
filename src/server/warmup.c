/* The DP scheduler's cost table at server start-up (TurboTransformers, PPoPP'21, sec. 6.3: the
 * batch latencies measured at warm-up feed the dynamic-programming scheduler): loaded from the
 * SQLite store when a complete table is there, else measured on the loaded model and saved. */
#include "server/warmup.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "server/cost_store.h"
#include "server/engine.h"

typedef struct measure_ctx {
	rg_model *model;
	int max_tokens, vocab;
	int32_t *tokens, *cu, *rows, *offs;
	float *out;
} measure_ctx;

/* Latency (ms, best of 3 after a warm-up run) of a PADDED batch of `batch` rows of `len` tokens.
 * Batches over the token budget are measured at the largest size that fits and scaled. */
static double measure_padded(void *arg, int len, int batch)
{
	measure_ctx *m = arg;
	int b = batch, h = rg_model_get_info(m->model)->output_dim;
	double best = INFINITY, scale;

	if ((long)b * len > m->max_tokens)
		b = m->max_tokens / len > 0 ? m->max_tokens / len : 1;
	scale = (double)batch / b;
	m->tokens = realloc(m->tokens, (size_t)b * len * sizeof(int32_t));
	m->cu = realloc(m->cu, ((size_t)b + 1) * sizeof(int32_t));
	m->rows = realloc(m->rows, (size_t)b * sizeof(int32_t));
	m->offs = realloc(m->offs, (size_t)b * sizeof(int32_t));
	m->out = realloc(m->out, (size_t)b * h * sizeof(float));
	if (!m->tokens || !m->cu || !m->rows || !m->offs || !m->out)
		return -1;
	for (long i = 0; i < (long)b * len; i++)
		m->tokens[i] = (int32_t)(100 + i % 1000) % m->vocab;
	for (int i = 0; i <= b; i++)
		m->cu[i] = i * len;
	for (int i = 0; i < b; i++) {
		m->rows[i] = i;
		m->offs[i] = 0;
	}
	rg_layout lay = { RG_EXEC_PADDED, b, len, 0, m->rows, m->offs };

	for (int rep = 0; rep < 4; rep++) {
		double t0 = rg_now_ms(), ms;

		if (rg_model_embed_layout(m->model, m->tokens, m->cu, b, &lay, m->out) != RG_OK)
			return -1;
		ms = rg_now_ms() - t0;
		if (rep > 0 && ms < best)
			best = ms;
	}
	return best * scale;
}

rg_status rg_cost_warmup(rg_model *model, const char *db_path, const char *model_id,
			 const char *device,
			 const char *dtype, int max_len, int max_batch_tokens, int max_batch_requests,
			 rg_cost_table **out)
{
	const rg_model_info *info = rg_model_get_info(model);
	rg_cost_key key = {model_id, device, dtype, "padded"};
	measure_ctx m = {model, max_batch_tokens, info->vocab_size, NULL, NULL, NULL, NULL, NULL};
	rg_cost_table *t;
	rg_status st;

	*out = NULL;
	if (db_path) {
		t = rg_cost_store_load(db_path, &key, &st);
		if (t && rg_cost_table_complete(t)) {
			fprintf(stderr, "ragged serve: DP cost table loaded from %s\n", db_path);
			*out = t;
			return RG_OK;
		}
		rg_cost_table_free(t);
	}
	t = rg_cost_table_create_default(max_len, max_batch_requests, &st);
	if (!t)
		return st;
	fprintf(stderr, "ragged serve: measuring the DP cost table (%d x %d cells)...\n",
		rg_cost_table_n_lens(t), rg_cost_table_n_batches(t));
	st = rg_cost_table_warmup(t, measure_padded, &m);
	free(m.tokens);
	free(m.cu);
	free(m.rows);
	free(m.offs);
	free(m.out);
	if (st != RG_OK) {
		rg_cost_table_free(t);
		return st;
	}
	if (db_path && (st = rg_cost_store_save(t, db_path, &key)) != RG_OK)
		fprintf(stderr, "ragged serve: warning: cannot save the cost table: %s\n",
			rg_last_error());
	*out = t;
	return RG_OK;
}

/* mkdir that accepts an existing directory. */
static bool mkdir_ok(const char *path)
{
	struct stat sb;

	if (mkdir(path, 0700) == 0)
		return true;
	return errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

rg_status rg_cost_user_db(char *buf, size_t n)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char dir[4096];

	if (xdg && xdg[0] == '/') {
		snprintf(dir, sizeof(dir), "%s", xdg);
	} else if (home && home[0]) {
		snprintf(dir, sizeof(dir), "%s/.cache", home);
	} else {
		return rg_errorf(RG_ERR_IO, "cost table cache: neither XDG_CACHE_HOME nor HOME is set");
	}
	if (!mkdir_ok(dir))
		return rg_errorf(RG_ERR_IO, "cost table cache: cannot create %s: %s", dir,
				 strerror(errno));
	strncat(dir, "/ragged", sizeof(dir) - strlen(dir) - 1);
	if (!mkdir_ok(dir))
		return rg_errorf(RG_ERR_IO, "cost table cache: cannot create %s: %s", dir,
				 strerror(errno));
	if ((size_t)snprintf(buf, n, "%s/cost-tables.sqlite", dir) >= n)
		return rg_errorf(RG_ERR_IO, "cost table cache: path too long");
	return RG_OK;
}
