/* Stop conditions of one output sequence (OpenAI / vLLM semantics): EOS ids, stop token ids,
 * max_tokens and stop strings. A stop string is found in the detokenized completion through a
 * caller-provided callback (the library's tokenizer, or a test's); the returned text ends
 * before the stop string, and the token ids keep every token generated up to and including the
 * one that completed it. Precedence when several hold at one token: EOS, stop id, stop string,
 * length. */
#ifndef RG_GEN_STOP_H
#define RG_GEN_STOP_H
#include <stddef.h>
#include <stdint.h>

#include "ragged.h"

/* rg_finish_reason, rg_finish_reason_name, rg_detokenize_fn: include/ragged.h */


/* RG_FINISH_EOS when tok is in eos (n_eos), RG_FINISH_STOP when in stop_ids (n_stop), else
 * RG_FINISH_NONE. */
rg_finish_reason rg_stop_token(const int32_t *eos, int n_eos, const int32_t *stop_ids, int n_stop,
			       int32_t tok);

/* The earliest byte offset >= 0 where any of stops (n_stops NUL-terminated, non-empty) starts in
 * text (len), looking only at matches that end after byte `from` (what the previous check had
 * already searched); -1 when none. */
long rg_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
		  int n_stops);
#endif
