/* Generation options: rg_gen_params' defaults and checks (include/ragged.h), and the beam search
 * of one prompt as the engine runs it (params.h). */
#include "gen/params.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "gen/sampler.h"
#include "gen/stop.h"

void rg_gen_params_default(rg_gen_params *p)
{
	memset(p, 0, sizeof(*p));
	rg_sampling_params_default(&p->sampling);
	p->n = 1;
	p->max_tokens = 16;
	p->num_beams = 1;
	p->num_beam_groups = 1;
	p->length_penalty = 1.f;
	p->early_stopping = RG_EARLY_STOPPING_FALSE;
	p->pad_id = -1;
	p->max_step_tokens = 512;
	p->prompt_lookup_max = 3;
	p->prompt_lookup_min = 1;
}

static bool beams_on(const rg_gen_params *p) { return p->num_beams > 1; }

rg_status rg_gen_params_check(const rg_gen_params *p, int vocab)
{
	const rg_sampling_params *s = &p->sampling;
	rg_status st;

	if ((st = rg_sampling_params_check(s, vocab)) != RG_OK)
		return st;
	if (p->n < 1 || p->max_tokens < (p->prompt_logprobs ? 0 : 1) || p->max_step_tokens < 1 ||
	    p->logprobs < 0 || p->logprobs > RG_GEN_MAX_LOGPROBS)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "n %d, max_tokens %d, max_step_tokens %d must be >= 1 and logprobs "
				 "%d in [0, %d]", p->n, p->max_tokens, p->max_step_tokens,
				 p->logprobs, RG_GEN_MAX_LOGPROBS);
	if (p->prompt_logprobs && (p->prompt_top_n < 0 || p->prompt_top_n > RG_GEN_MAX_LOGPROBS))
		return rg_errorf(RG_ERR_INVALID_INPUT, "prompt_top_n %d outside [0, %d]",
				 p->prompt_top_n, RG_GEN_MAX_LOGPROBS);
	if (p->prompt_logprobs && p->max_tokens == 0 && beams_on(p))
		return rg_errorf(RG_ERR_INVALID_INPUT, "max_tokens 0 (prompt scoring only) does not "
				 "go with beam search");
	if (p->n_eos < 0 || p->n_stop_ids < 0 || p->n_stop < 0 || (p->n_eos && !p->eos_ids) ||
	    (p->n_stop_ids && !p->stop_ids) || (p->n_stop && !p->stop))
		return rg_errorf(RG_ERR_INVALID_INPUT, "stop conditions: counts without arrays");
	for (int i = 0; i < p->n_eos; i++)
		if (p->eos_ids[i] < 0 || p->eos_ids[i] >= vocab)
			return rg_errorf(RG_ERR_INVALID_INPUT, "eos id %d outside [0, %d)",
					 p->eos_ids[i], vocab);
	for (int i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] < 0 || p->stop_ids[i] >= vocab)
			return rg_errorf(RG_ERR_INVALID_INPUT, "stop id %d outside [0, %d)",
					 p->stop_ids[i], vocab);
	for (int i = 0; i < p->n_stop; i++)
		if (!p->stop[i] || !p->stop[i][0])
			return rg_errorf(RG_ERR_INVALID_INPUT, "stop string %d is empty", i);
	if (p->forced_bos_set && (p->forced_bos_id < -1 || p->forced_bos_id >= vocab))
		return rg_errorf(RG_ERR_INVALID_INPUT, "forced_bos_id %d outside [0, %d) (or -1: none)",
				 p->forced_bos_id, vocab);
	if (p->n_stop > 0 && !p->detokenize)
		return rg_errorf(RG_ERR_INVALID_INPUT, "stop strings need a detokenize callback");
	if (p->num_speculative_tokens < 0 || p->num_speculative_tokens > RG_GEN_MAX_SPEC_TOKENS ||
	    (p->num_speculative_tokens > 0 &&
	     (p->prompt_lookup_min < 1 || p->prompt_lookup_max < p->prompt_lookup_min ||
	      p->prompt_lookup_max > RG_GEN_MAX_PROMPT_LOOKUP)))
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "num_speculative_tokens %d must be in [0, %d] and, when on, "
				 "1 <= prompt_lookup_min %d <= prompt_lookup_max %d <= %d",
				 p->num_speculative_tokens, RG_GEN_MAX_SPEC_TOKENS,
				 p->prompt_lookup_min, p->prompt_lookup_max,
				 RG_GEN_MAX_PROMPT_LOOKUP);
	if (p->num_beams < 1 || p->num_beam_groups < 1 || p->num_beams % p->num_beam_groups)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "num_beams %d must be >= 1 and a multiple of num_beam_groups %d",
				 p->num_beams, p->num_beam_groups);
	if ((int)p->grammar_kind < RG_GRAMMAR_NONE || (int)p->grammar_kind > RG_GRAMMAR_CHOICE)
		return rg_errorf(RG_ERR_INVALID_INPUT, "grammar_kind %d is not an rg_grammar_kind",
				 (int)p->grammar_kind);
	if (!p->grammar && (p->grammar_kind == RG_GRAMMAR_REGEX ||
			    p->grammar_kind == RG_GRAMMAR_JSON_SCHEMA ||
			    p->grammar_kind == RG_GRAMMAR_CHOICE))
		return rg_errorf(RG_ERR_INVALID_INPUT, "grammar_kind %d needs its grammar text",
				 (int)p->grammar_kind);
	if (!beams_on(p))
		return RG_OK;
	if (p->grammar_kind != RG_GRAMMAR_NONE)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "beam search with structured outputs is not implemented");
	if (s->do_sample)
		return rg_errorf(RG_ERR_UNSUPPORTED, "beam search with do_sample is not implemented");
	if (p->n_stop > 0 || p->logprobs > 0 || s->n_logit_bias > 0 ||
	    rg_sampling_penalties_on(s))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "beam search takes no stop strings, top logprobs, logit bias or "
				 "repetition/presence/frequency penalties");
	if (p->n > p->num_beams)
		return rg_errorf(RG_ERR_INVALID_INPUT, "n %d (returned beams) > num_beams %d", p->n,
				 p->num_beams);
	if (p->num_beams > p->max_step_tokens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "num_beams %d > max_step_tokens %d",
				 p->num_beams, p->max_step_tokens);
	if (!(p->diversity_penalty >= 0.f) || !isfinite(p->length_penalty))
		return rg_errorf(RG_ERR_INVALID_INPUT, "diversity_penalty / length_penalty invalid");
	return RG_OK;
}

rg_status rg_gen_beam_init(const rg_gen_params *p, const int32_t *ids, int len, int max_new,
			   int vocab, rg_beam_search **out)
{
	rg_beam_params bp = {
		.num_beams = p->num_beams, .num_beam_groups = p->num_beam_groups,
		.diversity_penalty = p->diversity_penalty,
		.length_penalty = p->length_penalty, .early_stopping = p->early_stopping,
		.no_repeat_ngram_size = p->sampling.no_repeat_ngram_size,
		.num_return_sequences = p->n, .n_eos = p->n_eos + p->n_stop_ids,
		.pad_id = p->pad_id >= 0 ? p->pad_id : (p->n_eos ? p->eos_ids[0] : -1),
		.max_new_tokens = max_new,
	};
	int32_t eos[64];

	*out = NULL;
	if (bp.n_eos > 64)
		return rg_errorf(RG_ERR_INVALID_INPUT, "beam search: over 64 EOS/stop ids");
	if (p->n_eos > 0)
		memcpy(eos, p->eos_ids, (size_t)p->n_eos * sizeof(int32_t));
	if (p->n_stop_ids)
		memcpy(eos + (p->n_eos > 0 ? p->n_eos : 0), p->stop_ids,
		       (size_t)p->n_stop_ids * sizeof(int32_t));
	bp.eos_ids = eos;
	return rg_beam_init(out, &bp, ids, len, vocab);
}

rg_finish_reason rg_gen_beam_finish(const rg_gen_params *p, const rg_beam_hyp *h)
{
	if (!h->eos)
		return RG_FINISH_LENGTH;
	/* a stop id acting as EOS */
	return rg_stop_token(p->eos_ids, p->n_eos, NULL, 0, h->ids[h->n - 1]) == RG_FINISH_NONE
		       ? RG_FINISH_STOP : RG_FINISH_EOS;
}

