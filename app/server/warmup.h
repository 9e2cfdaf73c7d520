/* Start-up measurement of the DP scheduler's cost table; see warmup.c. */
#ifndef RG_SERVER_WARMUP_H
#define RG_SERVER_WARMUP_H
#include <stddef.h>
#include "ragged.h"
#include "server/sched/cost_table.h"

/* The complete cost table stored in the SQLite file db_path under (model_id: the model's
 * fingerprint, device, dtype, mode "padded"), or NULL when db_path is NULL, the file cannot be
 * read or holds no complete table under the key. Owned by the caller (rg_cost_table_free). */
rg_cost_table *rg_cost_load_stored(const char *db_path, const char *model_id, const char *device,
				   const char *dtype);

/* Measurement of a cost table one cell at a time, so that the engine's worker can interleave
 * it with requests (engine.h "Background DP measurement"). A cell is a PADDED batch of `batch`
 * rows of `len` tokens (at most max_batch_tokens tokens: larger cells are measured at the
 * largest size that fits and scaled), best of 3 runs after a warm-up run; cells run in
 * increasing (len, batch) order, one run per step. Each cell is stored in db_path as it is
 * measured (rg_cost_store_put_cell), and a measurement created over cells already stored (by an
 * earlier start that stopped part way) measures only the rest. Not thread-safe: the thread that
 * owns the model steps it. */
typedef struct rg_cost_measure rg_cost_measure;

/* Plan the grid of rg_cost_table_create_default(max_len, max_batch_requests) and take the cells
 * of that grid stored under the key in db_path. The strings are copied; db_path NULL: the table
 * is not stored. NULL + *st on RG_ERR_INVALID_INPUT, RG_ERR_OOM.
 * The model is borrowed and must outlive the measurement. */
rg_cost_measure *rg_cost_measure_create(rg_model *model, const char *db_path,
					const char *model_id, const char *device,
					const char *dtype, int max_len, int max_batch_tokens,
					int max_batch_requests, rg_status *st);

/* One run of the next cell (no-op when complete): a cell takes 4 steps, a warm-up run and 3
 * timed ones (best of 3), so one step is one padded batch of at most max_batch_tokens tokens.
 * The cell is stored into db_path, and after the last one the whole table is saved (replacing
 * the cells; a failed store or save only warns). RG_ERR_INTERNAL (wrapping the model's error) or
 * RG_ERR_OOM when a cell cannot be measured; the measurement cannot go on then. */
rg_status rg_cost_measure_step(rg_cost_measure *c);

int rg_cost_measure_done(const rg_cost_measure *c);  /* cells measured or loaded */
int rg_cost_measure_total(const rg_cost_measure *c); /* cells in the grid */

/* The table once every cell is measured, else NULL. Owned by c: valid until
 * rg_cost_measure_free. */
const rg_cost_table *rg_cost_measure_table(const rg_cost_measure *c);

void rg_cost_measure_free(rg_cost_measure *c); /* accepts NULL */

/* The per-user default cost table database: "$XDG_CACHE_HOME/ragged/cost-tables.sqlite", else
 * "$HOME/.cache/ragged/cost-tables.sqlite", its directory created (0700) when missing. Writes
 * the path into buf (n bytes). RG_ERR_IO when neither variable is set or the directory cannot
 * be made (the caller then measures without storing). */
rg_status rg_cost_user_db(char *buf, size_t n);
#endif
