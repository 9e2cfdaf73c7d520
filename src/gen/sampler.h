/* Samplers: a chain of small steps over a candidate array, in the shape of llama.cpp's
 * llama_sampler_i ({name, apply, accept, reset, clone, free}), with the RNG passed in by the
 * caller (one rg_rng per output sequence, seeded per request; src/core/rng.h).
 *
 * The chain rg_sampler_from_params builds, in order (HF transformers' logits processors then
 * warpers; vLLM's sampler runs the same order):
 *   1. logit bias (OpenAI): logit[id] += bias;
 *   2. penalties: repetition (HF RepetitionPenaltyLogitsProcessor / CTRL, Keskar et al. 2019)
 *      over prompt + generated tokens: a seen token's logit l becomes l < 0 ? l * r : l / r; then
 *      frequency and presence (OpenAI, vLLM) over generated tokens only:
 *      l -= count * frequency_penalty; l -= presence_penalty if count > 0 (float32, in this order);
 *   3. no-repeat n-gram (HF NoRepeatNGramLogitsProcessor): over prompt + generated, the tokens
 *      that would complete an n-gram already present get -inf;
 *   then either greedy (do_sample false or temperature 0): the largest logit, lowest id on ties;
 *   or sampling:
 *   4. temperature: l / T;
 *   5. top-k (HF TopKLogitsWarper): keep logits >= the k-th largest (ties at the k-th kept);
 *   6. top-p (HF TopPLogitsWarper): sort by logit descending (ties by ascending id), keep each
 *      token while the probability mass strictly before it is < p (at least one);
 *   7. min-p (HF MinPLogitsWarper): drop tokens with p < min_p * p_max, i.e. exp(l - l_max) < min_p;
 *   8. dist: u = rg_rng_uniform; walk the surviving candidates in ascending id order summing
 *      e = exp(l - l_max) in float64 and take the first whose running sum exceeds u * total.
 * Log-probabilities (rg_sampler_sample) are the log-softmax of the final candidate logits, the
 * distribution actually drawn from (vLLM v0's "processed" logprobs): after bias, penalties and
 * temperature, over the tokens top-k/top-p/min-p kept (others are -inf); for greedy the logits
 * after bias and penalties, at temperature 1.
 *
 * Candidate arrays: the caller fills cur with every id in id order (rg_token_array_fill);
 * steps may drop candidates and reorder them (sorted = by logit descending). */
#ifndef RG_GEN_SAMPLER_H
#define RG_GEN_SAMPLER_H
#include <stdbool.h>
#include <stdint.h>

#include "core/export.h"
#include "core/rng.h"
#include "ragged.h"

typedef struct rg_token_data {
	int32_t id;
	float logit;
} rg_token_data;

typedef struct rg_token_array {
	rg_token_data *data; /* (size) candidates, capacity >= vocab, owned by the caller */
	int size;
	bool sorted;      /* data is by logit descending, ties by ascending id; else by id */
	int32_t selected; /* the chosen id once a final step ran, else -1 */
} rg_token_array;

typedef struct rg_sampler rg_sampler;

/* One step. apply is required; accept, reset may be NULL. clone returns NULL on OOM. */
typedef struct rg_sampler_i {
	const char *(*name)(const rg_sampler *s);
	void (*accept)(rg_sampler *s, int32_t token);         /* a token was generated */
	rg_status (*apply)(rg_sampler *s, rg_token_array *cur, rg_rng *rng);
	void (*reset)(rg_sampler *s);                          /* forget generated tokens */
	rg_sampler *(*clone)(const rg_sampler *s);
	void (*free)(rg_sampler *s);                           /* the ctx; not s itself */
} rg_sampler_i;

struct rg_sampler {
	const rg_sampler_i *iface;
	void *ctx;
};

/* rg_sampling_params and rg_sampling_params_default: include/ragged.h */
/* RG_ERR_INVALID_INPUT (message names the field) when a value is outside its range above. */
rg_status rg_sampling_params_check(const rg_sampling_params *p, int vocab);

/* Generic calls through the vtable; each accepts what the interface allows to be NULL. */
const char *rg_sampler_name(const rg_sampler *s);
rg_status rg_sampler_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng);
void rg_sampler_accept(rg_sampler *s, int32_t token);
void rg_sampler_reset(rg_sampler *s);
rg_sampler *rg_sampler_clone(const rg_sampler *s);
void rg_sampler_free(rg_sampler *s); /* accepts NULL */

/* The chain: applies its steps in order, accept/reset/clone/free go to every step. */
rg_sampler *rg_sampler_chain_init(void);
/* Append s to the chain, which takes ownership (s is freed on failure). RG_ERR_OOM. */
rg_status rg_sampler_chain_add(rg_sampler *chain, rg_sampler *s);

/* The steps (each returns NULL on OOM). vocab bounds the ids they track. */
rg_sampler *rg_sampler_init_logit_bias(int n, const int32_t *ids, const float *values);
rg_sampler *rg_sampler_init_penalties(int vocab, const int32_t *prompt, int n_prompt,
				      float repetition, float presence, float frequency);
rg_sampler *rg_sampler_init_no_repeat_ngram(int n, const int32_t *prompt, int n_prompt);
rg_sampler *rg_sampler_init_temperature(float t);
rg_sampler *rg_sampler_init_top_k(int k);
rg_sampler *rg_sampler_init_top_p(float p);
rg_sampler *rg_sampler_init_min_p(float p);
rg_sampler *rg_sampler_init_greedy(void);
rg_sampler *rg_sampler_init_dist(void);

/* Whether p asks for any of the repetition / presence / frequency penalties. */
bool rg_sampling_penalties_on(const rg_sampling_params *p);

/* ragged.h's rg_row_sampling of one step of a sequence sampled with p (the device form of the
 * chain above): p's warpers, penalties and logit bias, and u, the sequence's next draw from rng
 * when p samples (the one draw the chain's dist step would take; rng untouched when greedy). The
 * penalty lists are left empty: rg_sampler_penalty_lists fills them. */
rg_row_sampling rg_sampler_row(const rg_sampling_params *p, rg_rng *rng);

/* The penalty lists of ragged.h's rg_row_sampling for one sequence (the device form of the
 * penalties step above): the distinct ids of prompt (n_prompt) and gen (n_gen, the tokens
 * generated so far), ascending, with each id's count among gen and whether it occurs in the
 * prompt. keys: scratch, ids, counts, in_prompt: caller-owned, (n_prompt + n_gen) each. Ids
 * must be in [0, 2^30). Returns the number of distinct ids. O(L log L) for L = n_prompt + n_gen
 * (a sort of tagged ids, then runs counted). */
int rg_sampler_penalty_lists(const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
			     int32_t *keys, int32_t *ids, int32_t *counts, uint8_t *in_prompt);

/* The chain above for p (checked), for one sequence whose prompt is prompt (n_prompt) ids.
 * *out is the caller's (rg_sampler_free). RG_ERR_INVALID_INPUT, RG_ERR_OOM. */
rg_status rg_sampler_from_params(const rg_sampling_params *p, int vocab, const int32_t *prompt,
				 int n_prompt, rg_sampler **out);

/* Fill cur with (id, logits[id]) for every id < vocab, in id order. cur->data holds >= vocab. */
void rg_token_array_fill(rg_token_array *cur, const float *logits, int vocab);

/* One token from logits (vocab) f32 through chain s: *id, and its log-probability *logprob
 * (see the head of this file); when n_top > 0, top_ids / top_logprobs (n_top) receive the n_top
 * most probable tokens of that distribution (probability descending, ties by id; id -1 and
 * -inf past the candidates left). work: a candidate array of capacity vocab (caller's scratch).
 * Does not call accept (the caller does, once the token is kept). RG_ERR_INTERNAL for NaN
 * logits or a chain that selects nothing. */
rg_status rg_sampler_sample(rg_sampler *s, const float *logits, int vocab, rg_rng *rng,
			    rg_token_array *work, int n_top, int32_t *id, float *logprob,
			    int32_t *top_ids, float *top_logprobs);

/* rg_sampler_sample over candidates the caller filled in work (ascending id order, unsorted,
 * e.g. rg_token_array_fill_masked's): the same token, log-probability and top list as
 * rg_sampler_sample over a row whose other logits are -inf, in O(work->size) but for the
 * steps that sort. RG_ERR_INTERNAL as rg_sampler_sample. */
rg_status rg_sampler_sample_cand(rg_sampler *s, rg_token_array *work, rg_rng *rng, int n_top,
				 int32_t *id, float *logprob, int32_t *top_ids,
				 float *top_logprobs);

/* Fill cur with (id, logits[id]) for every id < vocab whose bit is set in mask
 * ((vocab + 63) / 64 words, bit v & 63 of word v >> 6), in id order; returns the count. One walk
 * of the set bits: a grammar's allowed tokens without a pass over the vocabulary. */
int rg_token_array_fill_masked(rg_token_array *cur, const float *logits, int vocab,
			       const uint64_t *mask);

/* Whether chain s is greedy alone (no bias, penalty or n-gram step before it). */
bool rg_sampler_is_greedy(const rg_sampler *s);

/* The greedy chain's draw over the tokens of mask (as rg_token_array_fill_masked's): the
 * largest logit, the lowest id on ties, and its log-softmax over the masked tokens; bit for bit
 * rg_sampler_sample_cand with a greedy chain and n_top 0, in two walks of the set bits and no
 * candidate array. RG_ERR_INTERNAL for a NaN logit among them or an empty mask. */
rg_status rg_sampler_masked_argmax(const float *logits, int vocab, const uint64_t *mask,
				   int32_t *id, float *logprob);

/* Test hook (pytest's chi-square and support tests): n_draws tokens from one chain built from
 * p for the given prompt, one RNG stream seeded with seed, no token accepted between draws.
 * out (n_draws) int32. */
RG_TEST_API rg_status rg_sampler_draw_test(const float *logits, int vocab,
					   const rg_sampling_params *p, const int32_t *prompt,
					   int n_prompt, uint64_t seed, int n_draws, int32_t *out,
					   float *logprobs);
#endif
