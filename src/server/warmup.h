/* Start-up measurement of the DP scheduler's cost table; see warmup.c. */
#ifndef RG_SERVER_WARMUP_H
#define RG_SERVER_WARMUP_H
#include "ragged.h"
#include "sched/cost_table.h"

/* The cost table of model on (device, dtype) names, for sequences up to max_len and batches up to
 * max_batch_requests: from the SQLite file db_path when it holds a complete one (db_path NULL:
 * never stored), else measured now with PADDED batches of at most max_batch_tokens tokens
 * (seconds on a GPU, minutes on a CPU) and saved there (a failed save only warns).
 * *out: owned by the caller (rg_cost_table_free); NULL on error. */
rg_status rg_cost_warmup(rg_model *model, const char *db_path, const char *device,
			 const char *dtype, int max_len, int max_batch_tokens, int max_batch_requests,
			 rg_cost_table **out);
#endif
