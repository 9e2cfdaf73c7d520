/* One output sequence: acceptance, log-probs, streaming text and stops (see seq.h). */
#include "gen/seq.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/stop.h"

rg_status rg_seq_init(rg_seq *s, const rg_seq_params *p)
{
	memset(s, 0, sizeof(*s));
	s->p = *p;
	rg_buf_init(&s->text);
	if (p->tok && !p->detokenize &&
	    rg_detok_stream_init(p->tok, p->skip_special, &s->detok) != RG_OK)
		s->detok = NULL; /* no streaming decoder for this tokenizer: whole decodes */
	return RG_OK;
}

void rg_seq_free(rg_seq *s)
{
	rg_detok_stream_free(s->detok);
	free(s->ids);
	free(s->logprobs);
	free(s->top_ids);
	free(s->top_logprobs);
	free(s->text_end);
	free(s->stop_str);
	rg_buf_free(&s->text);
	memset(s, 0, sizeof(*s));
}

static rg_status grow(rg_seq *s, int need)
{
	int cap = s->cap ? s->cap : 32;
	const size_t nt = (size_t)s->p.n_top;

	if (need <= s->cap)
		return RG_OK;
	while (cap < need)
		cap *= 2;
#define GROW(field, per)                                                                    \
	do {                                                                                \
		void *q = realloc(s->field, (size_t)cap * (per) * sizeof(*s->field));       \
		if (!q)                                                                     \
			return rg_errorf(RG_ERR_OOM, "generate: out of memory for a sequence"); \
		s->field = q;                                                               \
	} while (0)
	GROW(ids, 1);
	GROW(logprobs, 1);
	GROW(text_end, 1);
	if (nt) {
		GROW(top_ids, nt);
		GROW(top_logprobs, nt);
	}
#undef GROW
	s->cap = cap;
	return RG_OK;
}

static size_t max_stop_len(const rg_seq *s)
{
	size_t m = 0;

	for (int i = 0; i < s->p.n_stop; i++) {
		size_t n = strlen(s->p.stop[i]);

		m = n > m ? n : m;
	}
	return m;
}

/* text_ready: all but a possible stop-string prefix at the end, on a UTF-8 boundary. */
static void update_ready(rg_seq *s)
{
	size_t hold = max_stop_len(s), len = s->text.len, r;

	if (s->finish != RG_FINISH_NONE || hold <= 1) {
		s->text_ready = len;
		return;
	}
	r = len > hold - 1 ? len - (hold - 1) : 0;
	while (r > 0 && r < len && ((unsigned char)s->text.data[r] & 0xC0) == 0x80)
		r--;
	if (r > s->text_ready)
		s->text_ready = r;
}

/* Decode ids[0..n) whole into s->text (no streaming decoder). */
static rg_status redecode(rg_seq *s, int n)
{
	char *t = NULL;
	size_t len = 0;
	rg_status st;

	if (s->p.detokenize)
		st = s->p.detokenize(s->p.detokenize_ctx, s->ids, n, &t, &len);
	else if (s->p.tok)
		st = rg_tokenizer_decode(s->p.tok, s->ids, (size_t)n, s->p.skip_special, &t, &len);
	else
		return RG_OK;
	if (st != RG_OK)
		return rg_error_wrap(st, "detokenize");
	s->text.len = 0;
	rg_buf_put(&s->text, t ? t : "", len);
	free(t);
	if (s->text.oom)
		return rg_errorf(RG_ERR_OOM, "generate: out of memory for the text");
	return RG_OK;
}

static bool has_text(const rg_seq *s)
{
	return s->detok || s->p.detokenize || s->p.tok;
}

/* The final text of an ended sequence without a streaming decoder. */
static void finish_text(rg_seq *s, bool drop_last)
{
	if (!s->detok && has_text(s) && !s->stop_str) {
		rg_status st = redecode(s, drop_last && s->n > 0 ? s->n - 1 : s->n);

		if (st != RG_OK)
			s->err = st;
		for (int k = 0; k < s->n; k++)
			s->text_end[k] = s->text.len;
	}
}

bool rg_seq_blocks_stops(const rg_seq *s)
{
	return s->n < s->p.min_tokens;
}

void rg_seq_end(rg_seq *s, rg_finish_reason why)
{
	if (s->finish != RG_FINISH_NONE)
		return;
	s->finish = why;
	if (s->detok) {
		const char *t;
		size_t n;

		if (rg_detok_stream_flush(s->detok, &t, &n) == RG_OK && n)
			rg_buf_put(&s->text, t, n);
		if (s->n > 0)
			s->text_end[s->n - 1] = s->text.len;
	} else {
		finish_text(s, false);
	}
	update_ready(s);
}

/* The first stop string found at pos: keep its name, cut the text there. */
static void cut_at_stop(rg_seq *s, long pos)
{
	for (int k = 0; k < s->p.n_stop; k++) {
		size_t l = strlen(s->p.stop[k]);

		if ((size_t)pos + l <= s->text.len && !strncmp(s->text.data + pos, s->p.stop[k], l)) {
			free(s->stop_str);
			s->stop_str = strdup(s->p.stop[k]);
			break;
		}
	}
	s->text.len = (size_t)pos;
	s->text.data[pos] = '\0';
	if (s->text_ready > s->text.len)
		s->text_ready = s->text.len;
	if (s->text_emitted > s->text.len)
		s->text_emitted = s->text.len;
	for (int k = 0; k < s->n; k++)
		if (s->text_end[k] > s->text.len)
			s->text_end[k] = s->text.len;
}

rg_finish_reason rg_seq_accept(rg_seq *s, int32_t tok, float lp, const int32_t *top_ids,
			       const float *top_lps)
{
	rg_finish_reason fin = RG_FINISH_NONE;
	const bool gated = s->n + 1 <= s->p.min_tokens; /* this token is within min_tokens */
	rg_status st;

	if (s->finish != RG_FINISH_NONE)
		return s->finish;
	if ((st = grow(s, s->n + 1)) != RG_OK) {
		s->err = st;
		rg_seq_end(s, RG_FINISH_ABORT);
		return s->finish;
	}
	s->ids[s->n] = tok;
	s->logprobs[s->n] = lp;
	if (s->p.n_top) {
		memcpy(s->top_ids + (size_t)s->n * s->p.n_top, top_ids,
		       (size_t)s->p.n_top * sizeof(int32_t));
		memcpy(s->top_logprobs + (size_t)s->n * s->p.n_top, top_lps,
		       (size_t)s->p.n_top * sizeof(float));
	}
	s->n++;
	s->score += lp;
	if (!gated)
		fin = rg_stop_token(s->p.eos_ids, s->p.n_eos, s->p.stop_ids, s->p.n_stop_ids, tok);
	if (s->detok && (fin == RG_FINISH_NONE || s->p.keep_stop_id_text)) {
		const char *t;
		size_t n;

		if (rg_detok_stream_push(s->detok, tok, &t, &n) == RG_OK && n)
			rg_buf_put(&s->text, t, n);
	}
	s->text_end[s->n - 1] = s->text.len;
	if (fin != RG_FINISH_NONE) {
		s->finish = fin;
		if (s->detok) {
			const char *t;
			size_t n;

			if (rg_detok_stream_flush(s->detok, &t, &n) == RG_OK && n)
				rg_buf_put(&s->text, t, n);
			s->text_end[s->n - 1] = s->text.len;
		} else {
			finish_text(s, !s->p.keep_stop_id_text);
		}
		update_ready(s);
		return fin;
	}
	if (s->p.n_stop > 0 && !gated && has_text(s)) {
		long pos;

		if (!s->detok && (st = redecode(s, s->n)) != RG_OK) {
			s->err = st;
			rg_seq_end(s, RG_FINISH_ABORT);
			return s->finish;
		}
		if (!s->detok)
			s->text_end[s->n - 1] = s->text.len;
		/* earlier text can change as UTF-8 completes (whole decodes): look back a little */
		pos = rg_stop_find(s->text.data, s->text.len,
				   s->detok ? s->searched : (s->searched > 16 ? s->searched - 16 : 0),
				   s->p.stop, s->p.n_stop);
		s->searched = s->text.len;
		if (pos >= 0) {
			cut_at_stop(s, pos);
			s->finish = RG_FINISH_STOP;
			update_ready(s);
			return s->finish;
		}
	}
	if (s->n >= s->p.max_tokens) {
		rg_seq_end(s, RG_FINISH_LENGTH);
		return s->finish;
	}
	update_ready(s);
	return RG_FINISH_NONE;
}

rg_status rg_seq_set_result(rg_seq *s, const int32_t *ids, const float *logprobs, int n,
			    double score, rg_finish_reason finish)
{
	rg_status st;

	if ((st = grow(s, n > 0 ? n : 1)) != RG_OK)
		return st;
	if (n > 0) {
		memcpy(s->ids, ids, (size_t)n * sizeof(int32_t));
		memcpy(s->logprobs, logprobs, (size_t)n * sizeof(float));
	}
	s->n = n;
	s->score = score;
	s->finish = finish;
	s->text.len = 0;
	if (has_text(s)) {
		const bool drop = finish != RG_FINISH_LENGTH && n > 0 && !s->p.keep_stop_id_text;
		char *t = NULL;
		size_t len = 0;

		if (s->p.detokenize)
			st = s->p.detokenize(s->p.detokenize_ctx, ids, drop ? n - 1 : n, &t, &len);
		else
			st = rg_tokenizer_decode(s->p.tok, ids, (size_t)(drop ? n - 1 : n),
						 s->p.skip_special, &t, &len);
		if (st != RG_OK)
			return rg_error_wrap(st, "detokenize");
		rg_buf_put(&s->text, t ? t : "", len);
		free(t);
		if (s->text.oom)
			return rg_errorf(RG_ERR_OOM, "generate: out of memory for the text");
	}
	for (int k = 0; k < n; k++)
		s->text_end[k] = s->text.len;
	s->text_ready = s->text.len;
	return RG_OK;
}

void rg_seq_take_text(rg_seq *s, const char **text, size_t *len)
{
	*text = s->text.data ? s->text.data + s->text_emitted : "";
	*len = s->text_ready > s->text_emitted ? s->text_ready - s->text_emitted : 0;
	s->text_emitted += *len;
}
