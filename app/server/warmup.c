/* The DP scheduler's cost table at server start-up (TurboTransformers, PPoPP'21, sec. 6.3: the
 * batch latencies measured at warm-up feed the dynamic-programming scheduler): loaded from the
 * SQLite store when a complete table is there, else measured on the loaded model one cell at a
 * time by the engine's worker while the server answers with the token scheduler, and saved. */
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

/* One run of a PADDED batch of `batch` rows of `len` tokens: its latency in ms, scaled when the
 * batch is over the token budget (then measured at the largest size that fits). rep 0 prepares
 * the batch, later reps reuse it. -1 on a model error or no memory. */
static double measure_padded(measure_ctx *m, int len, int batch, int rep)
{
	int b = batch, h = rg_model_get_info(m->model)->output_dim;
	double t0;

	if ((long)b * len > m->max_tokens)
		b = m->max_tokens / len > 0 ? m->max_tokens / len : 1;
	if (rep == 0) {
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
	}
	rg_layout lay = { RG_EXEC_PADDED, b, len, 0, m->rows, m->offs };

	t0 = rg_now_ms();
	if (rg_model_embed_layout(m->model, m->tokens, m->cu, b, &lay, m->out) != RG_OK)
		return -1;
	return (rg_now_ms() - t0) * ((double)batch / b);
}

struct rg_cost_measure {
	measure_ctx m;
	rg_cost_table *t;
	int next, total;       /* cell measured now (row-major: len, then batch), cells in the grid */
	int done;              /* cells measured (or loaded from the store) */
	bool put_warned;       /* a cell could not be stored (warned once) */
	int rep;               /* runs of cell `next` done: a warm-up run, then best of 3 */
	double best;           /* best time of cell `next` so far, ms */
	char *db_path;         /* NULL: not stored */
	char *model_id, *device, *dtype;
};

rg_cost_table *rg_cost_load_stored(const char *db_path, const char *model_id, const char *device,
				   const char *dtype)
{
	rg_cost_key key = {model_id, device, dtype, "padded"};
	rg_cost_table *t;
	rg_status st;

	if (!db_path)
		return NULL;
	t = rg_cost_store_load(db_path, &key, &st);
	if (t && rg_cost_table_complete(t))
		return t;
	rg_cost_table_free(t);
	return NULL;
}

/* Cell i (row-major) measured? */
static bool cell_done(const rg_cost_measure *c, int i)
{
	int nb = rg_cost_table_n_batches(c->t);

	return !isnan(rg_cost_table_cell(c->t, i / nb, i % nb));
}

/* The cells stored by an earlier start (rg_cost_store_put_cell) are not measured again: a
 * restart keeps the progress. A store that cannot be read (missing: the first start) fills
 * nothing. When they complete the grid, the table is saved whole at once (dropping rows of
 * another grid). */
static void resume(rg_cost_measure *c)
{
	rg_cost_key key = {c->model_id, c->device, c->dtype, "padded"};
	int filled = 0;

	(void)rg_cost_store_load_cells(c->db_path, &key, c->t, &filled);
	c->done = filled;
	while (c->next < c->total && cell_done(c, c->next))
		c->next++;
	if (filled > 0)
		fprintf(stderr, "ragged serve: DP cost table: %d of %d cells stored by an earlier "
			"start, measuring the rest\n", filled, c->total);
	if (c->next >= c->total && rg_cost_store_save(c->t, c->db_path, &key) != RG_OK)
		fprintf(stderr, "ragged serve: warning: cannot save the cost table: %s\n",
			rg_last_error());
}

rg_cost_measure *rg_cost_measure_create(rg_model *model, const char *db_path,
					const char *model_id, const char *device,
					const char *dtype, int max_len, int max_batch_tokens,
					int max_batch_requests, rg_status *st)
{
	rg_cost_measure *c = calloc(1, sizeof(*c));
	rg_status s = RG_OK;

	if (!c) {
		s = rg_errorf(RG_ERR_OOM, "cost table: out of memory");
		goto out;
	}
	c->m = (measure_ctx){model, max_batch_tokens, rg_model_get_info(model)->vocab_size,
			     NULL, NULL, NULL, NULL, NULL};
	c->t = rg_cost_table_create_default(max_len, max_batch_requests, &s);
	if (!c->t)
		goto out_free;
	c->total = rg_cost_table_n_lens(c->t) * rg_cost_table_n_batches(c->t);
	c->model_id = strdup(model_id);
	c->device = strdup(device);
	c->dtype = strdup(dtype);
	c->db_path = db_path ? strdup(db_path) : NULL;
	if (!c->model_id || !c->device || !c->dtype || (db_path && !c->db_path)) {
		s = rg_errorf(RG_ERR_OOM, "cost table: out of memory");
		goto out_free;
	}
	if (c->db_path)
		resume(c);
	*st = RG_OK;
	return c;
out_free:
	rg_cost_measure_free(c);
out:
	*st = s;
	return NULL;
}

rg_status rg_cost_measure_step(rg_cost_measure *c)
{
	int nb, li, bi, len, batch;
	double ms;
	rg_status st;

	if (c->next >= c->total)
		return RG_OK;
	nb = rg_cost_table_n_batches(c->t);
	li = c->next / nb;
	bi = c->next % nb;
	len = rg_cost_table_len_at(c->t, li);
	batch = rg_cost_table_batch_at(c->t, bi);
	rg_error_clear();
	ms = measure_padded(&c->m, len, batch, c->rep);
	if (!isfinite(ms) || ms < 0) {
		if (rg_last_error()[0])
			return rg_error_wrap(RG_ERR_INTERNAL, "cost table len=%d batch=%d", len,
					     batch);
		return rg_errorf(RG_ERR_INTERNAL, "cost table len=%d batch=%d: out of memory",
				 len, batch);
	}
	if (c->rep == 0)
		c->best = INFINITY;
	else if (ms < c->best)
		c->best = ms;
	if (++c->rep < 4)
		return RG_OK;
	c->rep = 0;
	if ((st = rg_cost_table_set(c->t, li, bi, c->best)) != RG_OK)
		return st;
	c->done++;
	if (c->db_path) {
		/* stored as measured: a restart keeps the progress (a failure only warns, once:
		 * the whole table is saved again at the end) */
		rg_cost_key key = {c->model_id, c->device, c->dtype, "padded"};

		if (rg_cost_store_put_cell(c->db_path, &key, len, batch, c->best) != RG_OK &&
		    !c->put_warned) {
			c->put_warned = true;
			fprintf(stderr, "ragged serve: warning: cannot store a measured cost table "
				"cell: %s\n", rg_last_error());
		}
	}
	while (++c->next < c->total && cell_done(c, c->next))
		;
	if (c->next < c->total)
		return RG_OK;
	/* complete: the scratch goes, the table is kept for the next start */
	free(c->m.tokens);
	free(c->m.cu);
	free(c->m.rows);
	free(c->m.offs);
	free(c->m.out);
	c->m.tokens = c->m.cu = c->m.rows = c->m.offs = NULL;
	c->m.out = NULL;
	if (c->db_path) {
		rg_cost_key key = {c->model_id, c->device, c->dtype, "padded"};

		if (rg_cost_store_save(c->t, c->db_path, &key) != RG_OK)
			fprintf(stderr, "ragged serve: warning: cannot save the cost table: %s\n",
				rg_last_error());
		else
			fprintf(stderr, "ragged serve: DP cost table measured, saved to %s\n",
				c->db_path);
	}
	return RG_OK;
}

int rg_cost_measure_done(const rg_cost_measure *c)
{
	return c->done;
}

int rg_cost_measure_total(const rg_cost_measure *c)
{
	return c->total;
}

const rg_cost_table *rg_cost_measure_table(const rg_cost_measure *c)
{
	return c->next >= c->total ? c->t : NULL;
}

void rg_cost_measure_free(rg_cost_measure *c)
{
	if (!c)
		return;
	free(c->m.tokens);
	free(c->m.cu);
	free(c->m.rows);
	free(c->m.offs);
	free(c->m.out);
	rg_cost_table_free(c->t);
	free(c->db_path);
	free(c->model_id);
	free(c->device);
	free(c->dtype);
	free(c);
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
