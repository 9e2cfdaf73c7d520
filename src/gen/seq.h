/* One output sequence of a generation request: the one owner of token acceptance, log-probs,
 * streaming detokenization and the stop conditions, for every entry point (rg_generate, the
 * Python Generator and `ragged serve` all run src/gen/engine.c, which keeps one rg_seq per
 * output). OpenAI / vLLM semantics (src/gen/stop.h): EOS ids, stop token ids, stop strings,
 * max_tokens; precedence EOS, stop id, stop string, length. min_tokens (vLLM's) ignores every
 * stop before that many tokens.
 *
 * Text. With a tokenizer whose decoder streams (src/tokenizer/decode_stream.h: ByteLevel) the
 * text grows by each token's newly complete UTF-8, never re-detokenized; a stop string is
 * searched in the bytes the last token added (and the longest stop's length before them).
 * Without one (a Metaspace / WordPiece decoder, or a caller's rg_detokenize_fn), the ids are
 * decoded whole: after every token when stop strings are set, else once at the end.
 * text_ready: bytes that can no longer change (what a stream may send): all but a possible
 * stop-string prefix at the end, on a UTF-8 boundary; the whole text once ended.
 * The token that ends a sequence by EOS or a stop id is kept in ids; its text is dropped unless
 * keep_stop_id_text (vLLM keeps a stop id's text unless it is special; rg_generate drops it, as
 * HF's decode of the completion without its last id).
 * Not thread-safe: one owner (the engine's step). */
#ifndef RG_GEN_SEQ_H
#define RG_GEN_SEQ_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "ragged.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

/* How a sequence decides it has ended (every array borrowed: alive while the sequence is). */
typedef struct rg_seq_params {
	const int32_t *eos_ids;      /* (n_eos) finish EOS */
	int n_eos;
	const int32_t *stop_ids;     /* (n_stop_ids) finish STOP */
	int n_stop_ids;
	const char *const *stop;     /* (n_stop) stop strings, non-empty */
	int n_stop;
	int max_tokens;              /* >= 1: finish LENGTH at this many tokens */
	int min_tokens;              /* stops ignored before this many tokens (0: none) */
	int n_top;                   /* alternatives stored per token, [0, RG_GEN_MAX_LOGPROBS] */
	bool keep_stop_id_text;      /* the EOS / stop id that ends it keeps its text */
	/* text: a streaming tokenizer (preferred), else detokenize (whole ids), else no text */
	const rg_tokenizer *tok;
	bool skip_special;           /* special tokens give no text */
	rg_detokenize_fn detokenize;
	void *detokenize_ctx;
} rg_seq_params;

typedef struct rg_seq {
	rg_seq_params p;
	int32_t *ids;          /* (n) accepted tokens */
	float *logprobs;       /* (n) */
	int32_t *top_ids;      /* (n, p.n_top) */
	float *top_logprobs;   /* (n, p.n_top) */
	size_t *text_end;      /* (n) bytes of text after each token */
	int n, cap;
	rg_buf text;           /* the completion, cut before a stop string once found */
	size_t text_ready;     /* bytes of text that are final */
	size_t text_emitted;   /* bytes of text handed out by rg_seq_take_text */
	size_t searched;       /* stop strings: bytes already searched */
	rg_detok_stream *detok; /* the streaming decoder, or NULL */
	rg_finish_reason finish;
	char *stop_str;        /* the stop string that ended it (owned), or NULL */
	double score;          /* sum of logprobs (beam results: the hypothesis score) */
	rg_status err;         /* a detokenizer failure (the sequence ended ABORT) */
} rg_seq;

/* Start s with p (copied; its arrays are borrowed). RG_ERR_OOM. On failure s needs no free. */
rg_status rg_seq_init(rg_seq *s, const rg_seq_params *p);
/* Free everything s owns. Idempotent; a zeroed s is accepted. */
void rg_seq_free(rg_seq *s);

/* Whether EOS and stop ids are to be kept out of the next token (min_tokens not reached): the
 * engine biases them away on the device, as vLLM's min_tokens processor does. */
bool rg_seq_blocks_stops(const rg_seq *s);

/* Accept token tok with its log-prob lp (top_ids / top_lps: (p.n_top) or NULL when n_top is 0):
 * record, detokenize, check the stop conditions. Returns the finish reason (NONE while it
 * goes on; ABORT after a detokenizer error, in s->err). A sequence that has ended ignores
 * further tokens (returns its finish). */
rg_finish_reason rg_seq_accept(rg_seq *s, int32_t tok, float lp, const int32_t *top_ids,
			       const float *top_lps);

/* End s from outside (the context or max_tokens reached by the scheduler: LENGTH; an abort:
 * ABORT): flush the detokenizer, the text becomes final. No-op once ended. */
void rg_seq_end(rg_seq *s, rg_finish_reason why);

/* Replace s's tokens by a finished beam hypothesis (ids, logprobs (n)), its score and finish
 * (EOS / STOP when it ended on such an id, whose text is dropped as above; LENGTH otherwise);
 * the text is decoded once. RG_ERR_OOM. */
rg_status rg_seq_set_result(rg_seq *s, const int32_t *ids, const float *logprobs, int n,
			    double score, rg_finish_reason finish);

/* The final text not handed out yet (text_emitted .. text_ready): *text, *len point into s's
 * buffer, valid until s changes; text_emitted advances. */
void rg_seq_take_text(rg_seq *s, const char **text, size_t *len);
#endif
