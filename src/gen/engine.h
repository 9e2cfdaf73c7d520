/* The generation engine's internal entry points (include/ragged.h has the public API and the
 * contract): an engine over any runner (src/gen/generate.h rg_gen_runner: a model, or a test's
 * toy model), which is how rg_gen_run and the unit tests drive the same loop as the server. */
#ifndef RG_GEN_ENGINE_H
#define RG_GEN_ENGINE_H
#include "core/export.h"
#include "gen/generate.h"
#include "kv/block_pool.h"
#include "ragged.h"
#include "core/cost_model.h"
#include "tokenizer/tokenizer.h"

/* An engine over runner r (copied; r->ctx borrowed) and pool (borrowed, block size
 * r->block_size; NULL: one of r->n_blocks blocks owned by the engine). tok (may be NULL): the
 * streaming detokenizer's tokenizer; eos (n_eos): the default EOS ids of requests that name none
 * (borrowed). p: the limits (max_context 0: r->max_context; kv_* ignored). Errors as
 * rg_gen_engine_create. */
RG_TEST_API rg_gen_engine *rg_gen_engine_create_runner(const rg_gen_runner *r, rg_kv_pool *pool,
						       const rg_tokenizer *tok,
						       const int32_t *eos, int n_eos,
						       const rg_gen_engine_params *p,
						       rg_status *st);

/* rg_gen_params_check for an engine whose text comes from a streaming tokenizer (streams_text):
 * stop strings need no detokenize callback then. */
rg_status rg_gen_engine_params_check(const rg_gen_params *p, int vocab, bool streams_text);

/* The model as a runner (its step variants and block copy; its KV cache's shape, which must
 * exist). */
void rg_gen_model_runner(rg_model *m, rg_gen_runner *r);

/* The scheduler's step cost model (admission's estimates), and its prior. */
rg_status rg_gen_engine_cost_model(rg_gen_engine *e, rg_cost_model *out);
void rg_gen_engine_set_cost_prior(rg_gen_engine *e, const rg_cost_model *m);

/* How many sequences request id has, or -1 for an unknown id. */
int rg_gen_engine_n_outputs(const rg_gen_engine *e, uint64_t id);
#endif
