/* Generation options (include/ragged.h rg_gen_params: rg_gen_params_default / _check live in
 * params.c) and the beam search of one prompt as the engine runs it. */
#ifndef RG_GEN_PARAMS_H
#define RG_GEN_PARAMS_H
#include "gen/beam.h"
#include "ragged.h"

/* The beam search of one prompt as rg_gen_run runs it (HF's semantics, src/gen/beam.h) for the
 * options p (num_beams > 1): num_beam_groups, diversity_penalty, length_penalty,
 * early_stopping, no_repeat_ngram_size, n returned, EOS and stop ids both end a hypothesis,
 * pad_id (else the first EOS) for a finished group, max_new new tokens at most. ids (len) the
 * prompt, copied. *out: the caller frees it with rg_beam_free. RG_ERR_INVALID_INPUT (over 64 EOS
 * and stop ids, bad counts), RG_ERR_OOM; *out NULL then. The engine of `ragged serve` runs the
 * same search one step at a time (app/server/engine_gen.c). */
rg_status rg_gen_beam_init(const rg_gen_params *p, const int32_t *ids, int len, int max_new,
			   int vocab, rg_beam_search **out);
/* A returned hypothesis's finish reason: LENGTH when it did not end on an EOS or stop id, STOP
 * when the id is one of p's stop ids only, else EOS. */
rg_finish_reason rg_gen_beam_finish(const rg_gen_params *p, const rg_beam_hyp *h);
#endif
