/* Streaming detokenization (decode_stream.h). ByteLevel decoding is per byte: every token maps
 * to bytes (its chars' GPT-2 stand-ins inverted, or its own bytes when a char is not a stand-in,
 * as HF's ByteLevel decoder does), and the concatenation goes through from_utf8_lossy. Lossy
 * decoding of a byte string is decided left to right with at most 3 bytes of look-ahead, so it
 * can run as the bytes arrive: a valid character is emitted when complete, a maximal invalid
 * subpart as U+FFFD as soon as the next byte shows it cannot continue (Unicode 15 sec. 3.9,
 * "U+FFFD Substitution of Maximal Subparts", which Rust follows), and the unfinished tail is
 * held. */
#include "tokenizer/decode_stream.h"

#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tok_internal.h"

struct rg_detok_stream {
	const rg_tokenizer *t;
	bool skip_special;
	int16_t inv[0x200]; /* stand-in code point -> byte, -1 none */
	unsigned char held[4]; /* the incomplete UTF-8 sequence at the end (at most 3 bytes) */
	size_t n_held;
	rg_buf out; /* the last call's text */
};

rg_status rg_detok_stream_init(const rg_tokenizer *t, bool skip_special, rg_detok_stream **out)
{
	char map[256][3];
	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "detok stream: NULL out");
	*out = NULL;
	if (!t)
		return rg_errorf(RG_ERR_INVALID_INPUT, "detok stream: NULL tokenizer");
	if (!rg_tokenizer_byte_level_decoder(t))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "detok stream: only tokenizers whose decoder is ByteLevel can "
				 "stream (this one's is not)");
	rg_detok_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return rg_errorf(RG_ERR_OOM, "detok stream: out of memory");
	s->t = t;
	s->skip_special = skip_special;
	rg_buf_init(&s->out);
	for (size_t k = 0; k < 0x200; k++)
		s->inv[k] = -1;
	rg_byte_level_map(map);
	for (int b = 0; b < 256; b++)
		s->inv[rg_utf8_get_valid((const unsigned char *)map[b])] = (int16_t)b;
	*out = s;
	return RG_OK;
}

void rg_detok_stream_free(rg_detok_stream *s)
{
	if (!s)
		return;
	rg_buf_free(&s->out);
	free(s);
}

static void put_fffd(rg_buf *b)
{
	rg_buf_put(b, "\xEF\xBF\xBD", 3);
}

/* Feed one byte through the lossy decoder: complete chars and U+FFFD for invalid subparts go to
 * s->out, an unfinished valid prefix stays in s->held. */
static void feed(rg_detok_stream *s, unsigned char c)
{
	for (;;) {
		if (s->n_held == 0) {
			if (c < 0x80)
				rg_buf_put(&s->out, (const char *)&c, 1);
			else if ((c >= 0xC2 && c <= 0xDF) || (c >= 0xE0 && c <= 0xF4))
				s->held[s->n_held++] = c;
			else
				put_fffd(&s->out); /* a byte that starts no sequence */
			return;
		}
		unsigned char b0 = s->held[0], lo = 0x80, hi = 0xBF;
		size_t w = b0 <= 0xDF ? 2 : b0 <= 0xEF ? 3 : 4;
		if (s->n_held == 1) { /* the second byte's range depends on the first */
			if (b0 == 0xE0)
				lo = 0xA0;
			else if (b0 == 0xED)
				hi = 0x9F;
			else if (b0 == 0xF0)
				lo = 0x90;
			else if (b0 == 0xF4)
				hi = 0x8F;
		}
		if (c < lo || c > hi) {
			/* the held bytes are a maximal subpart: one U+FFFD; c starts afresh */
			put_fffd(&s->out);
			s->n_held = 0;
			continue;
		}
		s->held[s->n_held++] = c;
		if (s->n_held == w) {
			rg_buf_put(&s->out, (const char *)s->held, w);
			s->n_held = 0;
		}
		return;
	}
}

/* s->out as the call's result (NUL-terminated). */
static rg_status result(rg_detok_stream *s, const char **out, size_t *len)
{
	if (s->out.oom || !rg_buf_reserve(&s->out, 1))
		return rg_errorf(RG_ERR_OOM, "detok stream: out of memory");
	s->out.data[s->out.len] = '\0';
	*out = s->out.data;
	*len = s->out.len;
	return RG_OK;
}

rg_status rg_detok_stream_push(rg_detok_stream *s, int32_t id, const char **out, size_t *len)
{
	if (!s || !out || !len)
		return rg_errorf(RG_ERR_INVALID_INPUT, "detok stream: NULL argument");
	*out = NULL;
	*len = 0;
	s->out.len = 0;
	s->out.oom = false;
	size_t n;
	const char *tok = rg_tokenizer_id_to_token(s->t, id, &n);
	if (tok && !(s->skip_special && rg_tokenizer_is_special(s->t, id))) {
		/* all chars stand-ins: their bytes; else the token's own bytes */
		bool all = true;
		for (size_t k = 0; k < n; k += rg_utf8_len_valid((unsigned char)tok[k])) {
			uint32_t cp = rg_utf8_get_valid((const unsigned char *)tok + k);
			if (cp >= 0x200 || s->inv[cp] < 0) {
				all = false;
				break;
			}
		}
		for (size_t k = 0; k < n;) {
			if (all) {
				feed(s, (unsigned char)s->inv[rg_utf8_get_valid(
						(const unsigned char *)tok + k)]);
				k += rg_utf8_len_valid((unsigned char)tok[k]);
			} else {
				feed(s, (unsigned char)tok[k++]);
			}
		}
	}
	return result(s, out, len);
}

rg_status rg_detok_stream_flush(rg_detok_stream *s, const char **out, size_t *len)
{
	if (!s || !out || !len)
		return rg_errorf(RG_ERR_INVALID_INPUT, "detok stream: NULL argument");
	*out = NULL;
	*len = 0;
	s->out.len = 0;
	s->out.oom = false;
	if (s->n_held)
		put_fffd(&s->out);
	s->n_held = 0;
	return result(s, out, len);
}
