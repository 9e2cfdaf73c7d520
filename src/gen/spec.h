/* Draft proposers for speculative decoding (Leviathan et al. 2023, "Fast inference from
 * transformers via speculative decoding"; the engine verifies the drafts in one step,
 * src/sched/iter.h). No second model: prompt lookup decoding (Saxena 2023,
 * github.com/apoorvumang/prompt-lookup-decoding; vLLM's "ngram" speculator, NgramProposer),
 * which proposes what followed the last n tokens the previous time they occurred in the
 * sequence's own context (prompt and generated tokens). */
#ifndef RG_GEN_SPEC_H
#define RG_GEN_SPEC_H
#include <stdint.h>

#include "core/export.h"

/* Prompt lookup: for n from max_n down to min_n (1 <= min_n <= max_n), find the most recent
 * earlier occurrence of the last n tokens of ctx (n_ctx tokens), i.e. the largest i with
 * i + n < n_ctx and ctx[i .. i + n) == ctx[n_ctx - n .. n_ctx); the first n that has one
 * proposes ctx[i + n .. i + n + k), cut at n_ctx. draft: (k) int32, caller-owned. Returns the
 * tokens written, 0..k (0: no match, k <= 0 or bad sizes). O(n_ctx * max_n) per call. */
RG_TEST_API int rg_spec_ngram_propose(const int32_t *ctx, int n_ctx, int min_n, int max_n, int k,
				      int32_t *draft);
#endif
