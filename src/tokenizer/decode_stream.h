/* Incremental, UTF-8-safe detokenization for streaming generation: ids come one at a time and
 * every call hands back the text that is complete so far, so that the concatenation of all
 * outputs (pushes, then the flush) is byte for byte rg_tokenizer_decode of all the ids, which is
 * HF Tokenizer.decode. A character whose UTF-8 bytes are split across byte-level tokens (an emoji
 * made of 3-4 byte tokens) is held back until its last byte arrives; a sequence that cannot
 * become valid UTF-8 comes out as U+FFFD as soon as that is certain, an incomplete one left at
 * the end as one U+FFFD at the flush (Rust's String::from_utf8_lossy, maximal subparts).
 * One stream per sequence; a stream is not thread-safe, the tokenizer it reads may be shared. */
#ifndef RG_TOKENIZER_DECODE_STREAM_H
#define RG_TOKENIZER_DECODE_STREAM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/export.h"
#include "ragged.h"
#include "tokenizer/tokenizer.h"

typedef struct rg_detok_stream rg_detok_stream;

/* A stream over t (borrowed: it must outlive the stream). skip_special: special added tokens
 * (<|im_end|>, <|endoftext|>...) give no text, as decode with skip_special. Supported for
 * tokenizers whose decoder is ByteLevel (GPT-2, Llama 3, SmolLM2, Qwen2, RoBERTa):
 * RG_ERR_UNSUPPORTED otherwise (named); RG_ERR_INVALID_INPUT for NULL; RG_ERR_OOM. *out is the
 * caller's (rg_detok_stream_free); NULL on failure. */
RG_TEST_API
rg_status rg_detok_stream_init(const rg_tokenizer *t, bool skip_special, rg_detok_stream **out);

/* Feed one id. *out / *len: the newly completed UTF-8 text (possibly empty, *len 0); valid until
 * the next call on s, owned by s, NUL-terminated. An id without a token (outside the vocabulary)
 * gives nothing, as decode leaves it out. RG_ERR_INVALID_INPUT for NULL, RG_ERR_OOM. */
RG_TEST_API
rg_status rg_detok_stream_push(rg_detok_stream *s, int32_t id, const char **out, size_t *len);

/* End of the sequence: the held bytes (an incomplete UTF-8 sequence) as U+FFFD, or "". The
 * stream is empty afterwards and may be reused for a new sequence. */
RG_TEST_API
rg_status rg_detok_stream_flush(rg_detok_stream *s, const char **out, size_t *len);

/* Accepts NULL. */
RG_TEST_API void rg_detok_stream_free(rg_detok_stream *s);
#endif
