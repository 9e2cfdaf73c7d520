/* Start-up measurement of the DP scheduler's cost table; see warmup.c. */
#ifndef RG_SERVER_WARMUP_H
#define RG_SERVER_WARMUP_H
#include "ragged.h"
#include "sched/cost_table.h"

/* The cost table of model on (device, dtype) names, for sequences up to max_len and batches up to
 * max_batch_requests: from the SQLite file db_path when it holds a complete one stored under
 * model_id (the model's fingerprint; db_path NULL: never stored), else measured now with PADDED batches of at most max_batch_tokens tokens
 * (seconds on a GPU, minutes on a CPU) and saved there (a failed save only warns).
 * *out: owned by the caller (rg_cost_table_free); NULL on error. */
rg_status rg_cost_warmup(rg_model *model, const char *db_path, const char *model_id,
			 const char *device,
			 const char *dtype, int max_len, int max_batch_tokens, int max_batch_requests,
			 rg_cost_table **out);

/* The per-user default cost table database: "$XDG_CACHE_HOME/ragged/cost-tables.sqlite", else
 * "$HOME/.cache/ragged/cost-tables.sqlite", its directory created (0700) when missing. Writes
 * the path into buf (n bytes). RG_ERR_IO when neither variable is set or the directory cannot
 * be made (the caller then measures without storing). */
rg_status rg_cost_user_db(char *buf, size_t n);
#endif
