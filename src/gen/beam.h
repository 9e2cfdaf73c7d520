/* Beam search and diverse (group) beam search on the host, with the semantics of HF
 * transformers 4.4x generate(num_beams=...): BeamSearchScorer / BeamHypotheses and
 * _group_beam_search with HammingDiversityLogitsProcessor (Vijayakumar et al., AAAI'18; LightSeq
 * sec. 2 lists it among its decoding strategies). Per prompt, per step:
 *   - beams are split into num_beam_groups groups of G = num_beams / num_beam_groups; at the
 *     first step every beam holds the prompt, the first beam of each group scores 0 and the others
 *     -1e9 (so the first step expands one beam per group);
 *   - for each group in order: scores = log_softmax(logits) of each beam (float64 here; HF uses
 *     the model dtype), then the processors: no_repeat_ngram_size bans (-inf) over prompt +
 *     generated, and for groups after the first, diversity_penalty * (count of each token among
 *     the tokens the earlier groups chose at this step; a finished group counts G pad tokens, as
 *     HF's padding does); plus the beam's running score;
 *   - the top max(2, 1 + n_eos) * G of the group's G * vocab candidates (value descending, ties by
 *     ascending beam * vocab + token: LightSeq's retrieve-and-rerank top-k, gen/topk.h) are walked
 *     in order: an EOS candidate of rank < G becomes a finished hypothesis (the beam's tokens
 *     without the EOS) scored sum_logprobs / generated_len ** length_penalty, other EOS
 *     candidates are skipped, the first G non-EOS candidates become the group's next beams;
 *   - generated_len counts the generated tokens including the EOS and excluding the prompt.
 *     Checked against 4.4x's BeamSearchScorer.process, which passes decoder_prompt_len and adds
 *     with generated_len = cur_len - decoder_prompt_len (cur_len = input length + 1). Older
 *     releases, before the decoder_prompt_len change, divided by the whole hypothesis length
 *     (prompt included, EOS excluded): scores and hence rankings differ from those;
 *   - a group is done when it holds G hypotheses and early_stopping is true, or (false) when the
 *     best candidate score / (cur_len - prompt_len) ** length_penalty cannot beat the worst kept
 *     hypothesis, or ("never") the same with max_new_tokens as the length when length_penalty > 0;
 *   - the search ends when every group is done or max_new_tokens were generated; then the running
 *     beams of groups not done are added as hypotheses (generated_len = their length) and the
 *     num_return_sequences best over all groups are returned (HF's stable sort, popped from the
 *     end: among equal scores the later-added hypothesis first).
 * Differences from HF, on purpose: scores in float64; an EOS-finished hypothesis ends with the
 * EOS that ended it (HF appends eos_token_id[0]). Beams know nothing of the KV cache: each step
 * says which parent each new beam continues, and the caller forks block tables (src/kv/). */
#ifndef RG_GEN_BEAM_H
#define RG_GEN_BEAM_H
#include <stdbool.h>
#include <stdint.h>

#include "ragged.h"

/* rg_early_stopping: include/ragged.h */

typedef struct rg_beam_params {
	int num_beams;             /* >= 1, multiple of num_beam_groups */
	int num_beam_groups;       /* >= 1 */
	float diversity_penalty;   /* >= 0; used with num_beam_groups > 1 */
	float length_penalty;      /* exponent on the generated length; HF default 1 */
	rg_early_stopping early_stopping;
	int no_repeat_ngram_size;  /* 0: off */
	int num_return_sequences;  /* 1 .. num_beams */
	const int32_t *eos_ids;    /* (n_eos) ids that finish a hypothesis */
	int n_eos;
	int32_t pad_id;            /* the token a finished group "chooses" (diversity counts) */
	int max_new_tokens;        /* >= 1 */
} rg_beam_params;

typedef struct rg_beam_search rg_beam_search;

/* A returned hypothesis: generated ids (the EOS last when it ended on one), per-token
 * log-probabilities (the model's log-softmax of the chosen token, before penalties) and score. */
typedef struct rg_beam_hyp {
	int32_t *ids;     /* (n) owned by the search until rg_beam_free */
	float *logprobs;  /* (n) */
	int n;
	double score;
	bool eos;         /* ended on an EOS id */
} rg_beam_hyp;

/* RG_ERR_INVALID_INPUT (bad counts), RG_ERR_OOM. */
rg_status rg_beam_init(rg_beam_search **out, const rg_beam_params *p, const int32_t *prompt,
		       int n_prompt, int vocab);
void rg_beam_free(rg_beam_search *b);

/* Running beams now (num_beams while the search goes on; 0 once done). Beam i of a step is row
 * i of rows; at the first step every beam continues the prompt (rows may all point to the
 * prompt's last logits). */
int rg_beam_n_running(const rg_beam_search *b);
/* Which beam slots are live: slot i is live when its group is not done. */
bool rg_beam_slot_live(const rg_beam_search *b, int slot);

/* One step: rows[i] (vocab) f32 logits of running beam slot i (NULL for slots not live). On
 * return, for each live slot j: parent[j] is the slot it continues and token[j] its new token
 * (-1 for slots not live). *done when the search is over (then call rg_beam_finalize).
 * RG_ERR_INTERNAL for NaN logits, RG_ERR_OOM. */
rg_status rg_beam_step(rg_beam_search *b, const float *const *rows, int32_t *parent,
		       int32_t *token, bool *done);

/* The most candidates per row rg_beam_step_cand takes. */
#define RG_BEAM_MAX_CAND 64

/* Candidates per live row the next rg_beam_step_cand needs to choose exactly what rg_beam_step
 * would: max(2, 1 + n_eos) * G kept per group, plus num_beams when a diversity penalty may lower
 * tokens earlier groups chose, plus the most tokens no_repeat_ngram_size bans for any live beam
 * (its n-gram matches). The rows' top-k by log-softmax contain the processed top of the group:
 * only those extra tokens can fall, none can rise. 0 once the search is done. */
int rg_beam_cand_needed(rg_beam_search *b);

/* rg_beam_step from each live row's k best tokens instead of its logits (the device keeps the
 * logits: rg_model_step's top_n at temperature 0): ids[i] (k) int32 token ids and
 * logprobs[i] (k) f32 their log-softmax, log-prob descending, ties by ascending id, -1 past the
 * tokens there are; NULL rows for slots not live. The same beams as rg_beam_step on the full rows
 * when k >= rg_beam_cand_needed(b) and the log-probs are the same (here f32, rg_beam_step's are
 * float64 from the logits, so scores can differ in the 7th digit). RG_ERR_INVALID_INPUT for k
 * outside [1, RG_BEAM_MAX_CAND] or below rg_beam_cand_needed, RG_ERR_INTERNAL for a NaN
 * log-prob or a token outside the vocabulary. */
rg_status rg_beam_step_cand(rg_beam_search *b, const int32_t *const *ids,
			    const float *const *logprobs, int k, int32_t *parent, int32_t *token,
			    bool *done);

/* End the search (adds the running beams of unfinished groups) and rank the hypotheses: *n
 * (<= num_return_sequences) results, read with rg_beam_result(b, i), i = 0 the best. Idempotent.
 * RG_ERR_OOM. */
rg_status rg_beam_finalize(rg_beam_search *b, int *n);
/* Result i of a finalized search; owned by b. */
const rg_beam_hyp *rg_beam_result(const rg_beam_search *b, int i);
#endif
