/* The server's persistence of the batch cost table (app/server/sched/cost_table.h) in SQLite, so that a
 * restart with --cost-table skips the warm-up. Application code: libragged itself links no
 * SQLite. */
#ifndef RG_SERVER_COST_STORE_H
#define RG_SERVER_COST_STORE_H
#include "ragged.h"
#include "server/sched/cost_table.h"

/* Persist a complete table into the SQLite database at db_path (created when missing), replacing
 * any table (or cells, rg_cost_store_put_cell) stored under the same key. Table: rg_cost(model_id, device, dtype, mode, len, batch,
 * ms, PRIMARY KEY(model_id, device, dtype, mode, len, batch)). A lock held by another process
 * is waited for at most 1 s.
 * Errors: RG_ERR_INVALID_INPUT (incomplete table, bad key), RG_ERR_IO (SQLite failure). */
rg_status rg_cost_store_save(const rg_cost_table *t, const char *db_path, const rg_cost_key *key);

/* Load the table stored under key. The grid is the set of distinct lengths and batch sizes stored;
 * every (len, batch) pair of that grid must be present.
 * Returns NULL with *st = RG_ERR_IO when the database cannot be opened or holds no table under the
 * key (the caller then warms up), RG_ERR_FORMAT when the stored grid has holes or bad values. */
rg_cost_table *rg_cost_store_load(const char *db_path, const rg_cost_key *key, rg_status *st);
/* Store one measured cell (len, batch) -> ms under key, replacing the same cell, so that a
 * table measured over minutes keeps its progress across a restart. The database is created when
 * missing; a lock held by another process is waited for at most 200 ms (the caller is the
 * engine's worker between requests). Errors: RG_ERR_INVALID_INPUT (bad key, len or batch < 1,
 * ms not finite and >= 0), RG_ERR_IO (SQLite failure or lock). */
rg_status rg_cost_store_put_cell(const char *db_path, const rg_cost_key *key, int len, int batch,
				 double ms);

/* Fill the unmeasured cells of t from the rows stored under key whose (len, batch) lie on t's
 * grid (rows of another grid are ignored; a bad ms is skipped). *n_filled (may be NULL): cells
 * filled. Errors: RG_ERR_INVALID_INPUT, RG_ERR_IO (cannot open or read: nothing filled is an
 * error only then). */
rg_status rg_cost_store_load_cells(const char *db_path, const rg_cost_key *key, rg_cost_table *t,
				   int *n_filled);
#endif
