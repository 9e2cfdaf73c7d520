/* Stop conditions (stop.h). */
#include "gen/stop.h"

#include <string.h>

const char *rg_finish_reason_name(rg_finish_reason r)
{
	switch (r) {
	case RG_FINISH_NONE: return "none";
	case RG_FINISH_STOP: return "stop";
	case RG_FINISH_LENGTH: return "length";
	case RG_FINISH_EOS: return "eos";
	case RG_FINISH_ABORT: return "abort";
	}
	return "none";
}

rg_finish_reason rg_stop_token(const int32_t *eos, int n_eos, const int32_t *stop_ids, int n_stop,
			       int32_t tok)
{
	for (int i = 0; i < n_eos; i++)
		if (eos[i] == tok)
			return RG_FINISH_EOS;
	for (int i = 0; i < n_stop; i++)
		if (stop_ids[i] == tok)
			return RG_FINISH_STOP;
	return RG_FINISH_NONE;
}

long rg_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int n_stops)
{
	long best = -1;

	for (int i = 0; i < n_stops; i++) {
		size_t sl = strlen(stops[i]);
		/* a match ending after byte `from` starts at or after from - sl + 1 */
		size_t start = from + 1 > sl ? from + 1 - sl : 0;

		if (sl == 0 || sl > len)
			continue;
		for (size_t p = start; p + sl <= len; p++) {
			if (best >= 0 && (long)p >= best)
				break;
			if (memcmp(text + p, stops[i], sl) == 0) {
				best = (long)p;
				break;
			}
		}
	}
	return best;
}
