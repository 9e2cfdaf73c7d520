/* Prompt lookup drafts (spec.h). */
#include "gen/spec.h"

#include <string.h>

int rg_spec_ngram_propose(const int32_t *ctx, int n_ctx, int min_n, int max_n, int k,
			  int32_t *draft)
{
	if (!ctx || !draft || k <= 0 || min_n < 1 || max_n < min_n)
		return 0;
	for (int n = max_n < n_ctx - 1 ? max_n : n_ctx - 1; n >= min_n; n--) {
		const int32_t *suf = ctx + n_ctx - n;

		for (int i = n_ctx - n - 1; i >= 0; i--) {
			int got;

			if (ctx[i] != suf[0] || memcmp(ctx + i, suf, (size_t)n * sizeof(int32_t)))
				continue;
			got = n_ctx - (i + n) < k ? n_ctx - (i + n) : k;
			memcpy(draft, ctx + i + n, (size_t)got * sizeof(int32_t));
			return got;
		}
	}
	return 0;
}
