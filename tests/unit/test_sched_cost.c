/* Cost table (app/server/sched/cost_table.c, TurboTransformers PPoPP'21 sec. 5 cached_cost, sec. 6.3
 * interpolation): grids, bilinear interpolation checked against an analytic bilinear function
 * (exact under bilinear interpolation and linear extrapolation), warm-up through a callback, and an
 * SQLite round trip in a temporary file, including a table with a hole written behind its back. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "server/sched/cost_table.h"
#include "server/cost_store.h"

static const int LENS[] = {8, 16, 64, 128, 512};
static const int BATCHES[] = {1, 2, 4, 16};
#define NL ((int)(sizeof(LENS) / sizeof(LENS[0])))
#define NB ((int)(sizeof(BATCHES) / sizeof(BATCHES[0])))

/* A bilinear function of (len, batch): bilinear interpolation reproduces it exactly. */
static double bilin(double len, double batch)
{
	return 0.75 + 0.01 * len + 0.2 * batch + 0.003 * len * batch;
}

static void assert_close_at(double got, double want, int line)
{
	if (!(fabs(got - want) <= 1e-9 + 1e-9 * fabs(want)))
		fail_msg("got %.12g want %.12g (line %d)", got, want, line);
}
#define assert_close(got, want) assert_close_at((got), (want), __LINE__)

static rg_cost_table *filled_table(double scale)
{
	rg_status st;
	rg_cost_table *t = rg_cost_table_create(LENS, NL, BATCHES, NB, &st);
	assert_non_null(t);
	assert_int_equal(st, RG_OK);
	for (int li = 0; li < NL; li++)
		for (int bi = 0; bi < NB; bi++)
			assert_int_equal(rg_cost_table_set(t, li, bi,
							   scale * bilin(LENS[li], BATCHES[bi])),
					 RG_OK);
	return t;
}

static void test_create_rejects_bad_grids(void **state)
{
	(void)state;
	rg_status st = RG_OK;
	int dup[] = {8, 8, 16}, neg[] = {0, 4}, ok[] = {1};
	assert_null(rg_cost_table_create(dup, 3, ok, 1, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
	st = RG_OK;
	assert_null(rg_cost_table_create(ok, 1, neg, 2, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
	st = RG_OK;
	assert_null(rg_cost_table_create(ok, 0, ok, 1, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
}

static void test_incomplete_and_set_errors(void **state)
{
	(void)state;
	rg_cost_table *t = rg_cost_table_create(LENS, NL, BATCHES, NB, NULL);
	assert_non_null(t);
	assert_false(rg_cost_table_complete(t));
	assert_true(isnan(rg_cost_table_get(t, 16, 2)));
	assert_int_equal(rg_cost_table_set(t, NL, 0, 1.0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cost_table_set(t, 0, -1, 1.0), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cost_table_set(t, 0, 0, NAN), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cost_table_set(t, 0, 0, -1.0), RG_ERR_INVALID_INPUT);
	for (int li = 0; li < NL; li++)
		for (int bi = 0; bi < NB; bi++)
			if (li != 2 || bi != 3)
				assert_int_equal(rg_cost_table_set(t, li, bi, 1.0), RG_OK);
	assert_false(rg_cost_table_complete(t));
	assert_int_equal(rg_cost_table_set(t, 2, 3, 1.0), RG_OK);
	assert_true(rg_cost_table_complete(t));
	/* Setting a measured cell again does not change completeness. */
	assert_int_equal(rg_cost_table_set(t, 2, 3, 2.0), RG_OK);
	assert_true(rg_cost_table_complete(t));
	assert_true(isnan(rg_cost_table_get(t, 0, 1)));
	assert_true(isnan(rg_cost_table_get(t, 1, 0)));
	rg_cost_table_free(t);
}

static void test_interpolation(void **state)
{
	(void)state;
	rg_cost_table *t = filled_table(1.0);
	/* On the grid, between grid points, and both at once. */
	for (int li = 0; li < NL; li++)
		for (int bi = 0; bi < NB; bi++)
			assert_close(rg_cost_table_get(t, LENS[li], BATCHES[bi]),
				     bilin(LENS[li], BATCHES[bi]));
	for (int len = 8; len <= 512; len += 7)
		for (int b = 1; b <= 16; b++)
			assert_close(rg_cost_table_get(t, len, b), bilin(len, b));
	/* Below the grid: clamped to the first grid point. */
	assert_close(rg_cost_table_get(t, 1, 1), bilin(8, 1));
	assert_close(rg_cost_table_get(t, 3, 3), bilin(8, 3));
	/* Above the grid: linear extrapolation of the last segment (exact for bilinear data). */
	assert_close(rg_cost_table_get(t, 600, 4), bilin(600, 4));
	assert_close(rg_cost_table_get(t, 100, 20), bilin(100, 20));
	assert_close(rg_cost_table_get(t, 1024, 32), bilin(1024, 32));
	rg_cost_table_free(t);
}

static void test_extrapolation_never_below_last_cell(void **state)
{
	(void)state;
	int lens[] = {8, 16}, batches[] = {1};
	rg_cost_table *t = rg_cost_table_create(lens, 2, batches, 1, NULL);
	assert_non_null(t);
	/* A noisy measurement where the longer length came out cheaper. */
	assert_int_equal(rg_cost_table_set(t, 0, 0, 5.0), RG_OK);
	assert_int_equal(rg_cost_table_set(t, 1, 0, 4.0), RG_OK);
	assert_close(rg_cost_table_get(t, 12, 1), 4.5);
	assert_close(rg_cost_table_get(t, 64, 1), 4.0);
	assert_close(rg_cost_table_get(t, 64, 8), 4.0);
	rg_cost_table_free(t);
}

static void test_default_grid(void **state)
{
	(void)state;
	int cases[][2] = {{512, 64}, {128, 1}, {1, 1}, {700, 100}, {2048, 256}};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		rg_status st;
		rg_cost_table *t = rg_cost_table_create_default(cases[c][0], cases[c][1], &st);
		assert_non_null(t);
		int nl = rg_cost_table_n_lens(t), nb = rg_cost_table_n_batches(t);
		assert_int_equal(rg_cost_table_len_at(t, nl - 1), cases[c][0]);
		assert_int_equal(rg_cost_table_batch_at(t, nb - 1), cases[c][1]);
		assert_int_equal(rg_cost_table_batch_at(t, 0), 1);
		for (int i = 1; i < nl; i++)
			assert_true(rg_cost_table_len_at(t, i) > rg_cost_table_len_at(t, i - 1));
		for (int i = 1; i < nb; i++)
			assert_true(rg_cost_table_batch_at(t, i) > rg_cost_table_batch_at(t, i - 1));
		assert_int_equal(rg_cost_table_len_at(t, nl), -1);
		rg_cost_table_free(t);
	}
	rg_status st = RG_OK;
	assert_null(rg_cost_table_create_default(0, 4, &st));
	assert_int_equal(st, RG_ERR_INVALID_INPUT);
}

typedef struct measure_ctx {
	int calls;
	int fail_at; /* call number that fails, -1 never */
	int seen[NL][NB];
} measure_ctx;

static double measure(void *vctx, int len, int batch)
{
	measure_ctx *ctx = vctx;
	int li = -1, bi = -1;
	for (int i = 0; i < NL; i++)
		if (LENS[i] == len)
			li = i;
	for (int i = 0; i < NB; i++)
		if (BATCHES[i] == batch)
			bi = i;
	assert_true(li >= 0 && bi >= 0);
	ctx->seen[li][bi]++;
	if (ctx->calls++ == ctx->fail_at)
		return -1.0;
	return bilin(len, batch) * 2.0;
}

static void test_warmup(void **state)
{
	(void)state;
	rg_cost_table *t = rg_cost_table_create(LENS, NL, BATCHES, NB, NULL);
	measure_ctx ctx = {.fail_at = -1};
	assert_int_equal(rg_cost_table_warmup(t, measure, &ctx), RG_OK);
	assert_int_equal(ctx.calls, NL * NB);
	assert_true(rg_cost_table_complete(t));
	for (int li = 0; li < NL; li++) {
		for (int bi = 0; bi < NB; bi++) {
			assert_int_equal(ctx.seen[li][bi], 1);
			assert_close(rg_cost_table_cell(t, li, bi),
				     2.0 * bilin(LENS[li], BATCHES[bi]));
		}
	}
	rg_cost_table_free(t);

	t = rg_cost_table_create(LENS, NL, BATCHES, NB, NULL);
	measure_ctx bad = {.fail_at = 5};
	assert_int_equal(rg_cost_table_warmup(t, measure, &bad), RG_ERR_INTERNAL);
	assert_int_equal(bad.calls, 6);
	assert_non_null(strstr(rg_last_error(), "len="));
	assert_false(rg_cost_table_complete(t));
	rg_cost_table_free(t);
}

static void tmp_db(char *path, size_t n)
{
	snprintf(path, n, "/tmp/rg_cost_test_XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	unlink(path); /* let SQLite create it */
}

static void assert_same(const rg_cost_table *a, const rg_cost_table *b)
{
	assert_int_equal(rg_cost_table_n_lens(a), rg_cost_table_n_lens(b));
	assert_int_equal(rg_cost_table_n_batches(a), rg_cost_table_n_batches(b));
	for (int li = 0; li < rg_cost_table_n_lens(a); li++) {
		assert_int_equal(rg_cost_table_len_at(a, li), rg_cost_table_len_at(b, li));
		for (int bi = 0; bi < rg_cost_table_n_batches(a); bi++) {
			assert_int_equal(rg_cost_table_batch_at(a, bi),
					 rg_cost_table_batch_at(b, bi));
			/* REAL round-trips doubles exactly. */
			assert_true(rg_cost_table_cell(a, li, bi) == rg_cost_table_cell(b, li, bi));
		}
	}
}

static void test_sqlite_round_trip(void **state)
{
	(void)state;
	char path[64];
	tmp_db(path, sizeof(path));
	rg_cost_key ka = {"minilm", "cuda:H100", "f16", "padded"};
	rg_cost_key kb = {"minilm", "cuda:H100", "f16", "concat"};
	rg_cost_key kmissing = {"minilm", "cpu", "f32", "padded"};
	rg_status st;

	/* Nothing there yet. */
	assert_null(rg_cost_store_load(path, &ka, &st));
	assert_int_equal(st, RG_ERR_IO);

	rg_cost_table *a = filled_table(1.0), *b = filled_table(3.0);
	assert_int_equal(rg_cost_store_save(a, path, &ka), RG_OK);
	assert_int_equal(rg_cost_store_save(b, path, &kb), RG_OK);

	rg_cost_table *la = rg_cost_store_load(path, &ka, &st);
	assert_non_null(la);
	assert_int_equal(st, RG_OK);
	assert_same(a, la);
	rg_cost_table *lb = rg_cost_store_load(path, &kb, &st);
	assert_non_null(lb);
	assert_same(b, lb);
	assert_null(rg_cost_store_load(path, &kmissing, &st));
	assert_int_equal(st, RG_ERR_IO);
	rg_cost_table_free(la);
	rg_cost_table_free(lb);

	/* Saving under the same key replaces the stored table, grid included. */
	int lens2[] = {4, 32}, batches2[] = {1, 8, 64};
	rg_cost_table *c = rg_cost_table_create(lens2, 2, batches2, 3, NULL);
	for (int li = 0; li < 2; li++)
		for (int bi = 0; bi < 3; bi++)
			rg_cost_table_set(c, li, bi, 0.125 * (li + 1) * (bi + 2));
	assert_int_equal(rg_cost_store_save(c, path, &ka), RG_OK);
	la = rg_cost_store_load(path, &ka, &st);
	assert_non_null(la);
	assert_same(c, la);
	rg_cost_table_free(la);
	lb = rg_cost_store_load(path, &kb, &st); /* the other key is untouched */
	assert_non_null(lb);
	assert_same(b, lb);
	rg_cost_table_free(lb);

	/* An incomplete table cannot be saved; a bad key is refused. */
	rg_cost_table *inc = rg_cost_table_create(LENS, NL, BATCHES, NB, NULL);
	assert_int_equal(rg_cost_store_save(inc, path, &ka), RG_ERR_INVALID_INPUT);
	rg_cost_key empty = {"", "cpu", "f32", "padded"};
	assert_int_equal(rg_cost_store_save(a, path, &empty), RG_ERR_INVALID_INPUT);
	rg_cost_table_free(inc);

	/* A hole written behind our back is a format error, not a silent NaN. */
	sqlite3 *db;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "DELETE FROM rg_cost WHERE mode='concat' AND len=64 "
				      "AND batch=4", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	assert_null(rg_cost_store_load(path, &kb, &st));
	assert_int_equal(st, RG_ERR_FORMAT);

	rg_cost_table_free(a);
	rg_cost_table_free(b);
	rg_cost_table_free(c);
	unlink(path);

	assert_null(rg_cost_store_load("/nonexistent/dir/x.db", &ka, &st));
	assert_int_equal(st, RG_ERR_IO);
}

/* Cells stored one at a time (issue 18 item 12: a restart keeps the measured progress): a
 * fresh table of the same grid takes them back, rows of another grid and of another key are
 * ignored, a partial table is not a complete one, and the whole save replaces the cells. */
static void test_sqlite_cells(void **state)
{
	(void)state;
	char path[64];
	tmp_db(path, sizeof(path));
	rg_cost_key ka = {"minilm", "cpu", "f32", "padded"};
	rg_cost_key kb = {"minilm", "cpu", "bf16", "padded"};
	rg_status st;
	int filled = -1;
	rg_cost_table *t = rg_cost_table_create(LENS, NL, BATCHES, NB, NULL);

	assert_non_null(t);
	/* no database yet: an I/O error, nothing filled */
	assert_int_equal(rg_cost_store_load_cells(path, &ka, t, &filled), RG_ERR_IO);
	assert_int_equal(filled, 0);
	/* the first 7 cells in measuring order, one of another grid, one under another key */
	for (int i = 0; i < 7; i++)
		assert_int_equal(rg_cost_store_put_cell(path, &ka, LENS[i / NB], BATCHES[i % NB],
							bilin(LENS[i / NB], BATCHES[i % NB])),
				 RG_OK);
	assert_int_equal(rg_cost_store_put_cell(path, &ka, 24, 1, 99), RG_OK);
	assert_int_equal(rg_cost_store_put_cell(path, &kb, 512, 16, 99), RG_OK);
	/* a cell stored again is replaced, not duplicated */
	assert_int_equal(rg_cost_store_put_cell(path, &ka, LENS[0], BATCHES[0], 0.5), RG_OK);
	assert_int_equal(rg_cost_store_put_cell(path, &ka, 0, 1, 1), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_cost_store_put_cell(path, &ka, 8, 1, NAN), RG_ERR_INVALID_INPUT);

	assert_int_equal(rg_cost_store_load_cells(path, &ka, t, &filled), RG_OK);
	assert_int_equal(filled, 7);
	for (int i = 0; i < NL * NB; i++) {
		double got = rg_cost_table_cell(t, i / NB, i % NB);

		if (i == 0)
			assert_close(got, 0.5);
		else if (i < 7)
			assert_close(got, bilin(LENS[i / NB], BATCHES[i % NB]));
		else
			assert_true(isnan(got));
	}
	/* cells already measured are kept */
	assert_int_equal(rg_cost_store_load_cells(path, &ka, t, &filled), RG_OK);
	assert_int_equal(filled, 0);
	/* partial rows are no complete table */
	assert_null(rg_cost_store_load(path, &ka, &st));
	assert_int_equal(st, RG_ERR_FORMAT);
	/* the whole save replaces them (the stray row of another grid included) */
	rg_cost_table *a = filled_table(2.0), *la;
	assert_int_equal(rg_cost_store_save(a, path, &ka), RG_OK);
	la = rg_cost_store_load(path, &ka, &st);
	assert_non_null(la);
	assert_same(a, la);
	rg_cost_table_free(la);
	rg_cost_table_free(a);
	rg_cost_table_free(t);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_rejects_bad_grids),
		cmocka_unit_test(test_incomplete_and_set_errors),
		cmocka_unit_test(test_interpolation),
		cmocka_unit_test(test_extrapolation_never_below_last_cell),
		cmocka_unit_test(test_default_grid),
		cmocka_unit_test(test_warmup),
		cmocka_unit_test(test_sqlite_round_trip),
		cmocka_unit_test(test_sqlite_cells),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
