/* Batch cost table: cached_cost[len][batch], the measured latency (ms) of one forward pass over a
 * batch of `batch` requests of `len` tokens each, in one execution mode (TurboTransformers,
 * PPoPP'21, sec. 5, Algorithm 2 input `cached_cost`, and sec. 6.3 "sample the parameter space and
 * use the interpolation method").
 *
 * The table holds a grid of lengths x batch sizes; lookups between grid points are bilinear,
 * below the first grid point they clamp, above the last they extrapolate linearly from the last
 * segment (never below the last measured value). It is measured once at warm-up through a
 * caller-provided callback (this module knows nothing about the model or CUDA) and persisted in
 * SQLite keyed by (model id, device, dtype, execution mode) so a restart reloads it.
 * Not thread-safe: one thread (the server's engine worker) owns a table. */
#ifndef RG_SERVER_SCHED_COST_TABLE_H
#define RG_SERVER_SCHED_COST_TABLE_H
#include <stdbool.h>
#include "core/cost_model.h"
#include "ragged.h"

typedef struct rg_cost_table rg_cost_table;

/* Identity of a table in the database. All four strings are required, non-empty, NUL-terminated
 * (e.g. "sentence-transformers/all-MiniLM-L6-v2", "cuda:NVIDIA H100", "f16", "padded"). */
typedef struct rg_cost_key {
	const char *model_id;
	const char *device;
	const char *dtype;
	const char *mode;
} rg_cost_key;

/* Create an empty table over the grid lens (n_lens) x batches (n_batches), both strictly
 * increasing positive ints, 1 <= n <= 4096. Every cell starts unmeasured (NaN).
 * Returns NULL and sets *st (if st) on RG_ERR_INVALID_INPUT or RG_ERR_OOM. Free with
 * rg_cost_table_free. */
rg_cost_table *rg_cost_table_create(const int *lens, int n_lens, const int *batches, int n_batches,
				    rg_status *st);

/* A default grid: lengths 8,16,32,64,96,128,192,256,320,384,448,512,... up to max_len (always
 * including max_len) and batch sizes 1,2,3,4,6,8,12,16,24,32,... up to max_batch (always
 * including max_batch). */
rg_cost_table *rg_cost_table_create_default(int max_len, int max_batch, rg_status *st);

void rg_cost_table_free(rg_cost_table *t); /* accepts NULL */

int rg_cost_table_n_lens(const rg_cost_table *t);
int rg_cost_table_n_batches(const rg_cost_table *t);
int rg_cost_table_len_at(const rg_cost_table *t, int li);   /* grid length li, -1 if out of range */
int rg_cost_table_batch_at(const rg_cost_table *t, int bi); /* grid batch bi, -1 if out of range */

/* Set / read the measured cell (li, bi) of the grid. ms must be finite and >= 0.
 * Errors: RG_ERR_INVALID_INPUT for an index out of range or a bad value. get returns NaN for an
 * unmeasured cell or an index out of range. */
rg_status rg_cost_table_set(rg_cost_table *t, int li, int bi, double ms);
double rg_cost_table_cell(const rg_cost_table *t, int li, int bi);

/* true when every cell has been measured (the table can answer lookups). */
bool rg_cost_table_complete(const rg_cost_table *t);

/* Estimated latency (ms) of a batch of `batch` requests of `len` tokens (padded), interpolated as
 * described above. len >= 1, batch >= 1; returns NaN when the table is not complete or the
 * arguments are out of range. */
double rg_cost_table_get(const rg_cost_table *t, int len, int batch);

/* Measure every cell with measure(ctx, len, batch), which runs the model on a batch of `batch`
 * requests of `len` tokens and returns the latency in ms (the caller decides how many repetitions
 * and whether to take a median). A negative or non-finite return means failure: warm-up stops and
 * returns RG_ERR_INTERNAL with rg_last_error() wrapped as "cost warm-up len=.. batch=..: ...".
 * Cells are measured in increasing (len, batch) order. */
rg_status rg_cost_table_warmup(rg_cost_table *t, double (*measure)(void *ctx, int len, int batch),
			       void *ctx);

/* Fit the model to a complete cost table (PADDED cells: a batch of b rows of len tokens computes
 * b*len tokens and b*len^2 pairs). RG_ERR_INVALID_INPUT when t is NULL or incomplete; RG_ERR_OOM. */
rg_status rg_cost_model_from_table(const rg_cost_table *t, rg_cost_model *out);
#endif
