/* The tokenizer.json "normalizer": a flat list of steps (Sequence flattened), each UTF-8 -> UTF-8,
 * with HF `tokenizers` semantics (normalizers/<name>.rs):
 *   BertNormalizer  bert_normalizer.c
 *   Precompiled     precompiled.c (SentencePiece charsmap)
 *   Replace         String pattern: every non-overlapping occurrence, left to right; Regex
 *                   pattern only as "<char>{n,}" / "<char>+" (a run of >= n of one char, the form
 *                   transformers' SentencePiece converters write: " {2,}")
 *   Strip           leading / trailing Rust char::is_whitespace
 *   StripAccents    drop combining marks (HF is_combining_mark)
 *   Lowercase       Rust char::to_lowercase
 *   NFC NFD NFKC NFKD  utf8proc, restricted to HF's older Unicode data (rg_unicode_decompose)
 * Anything else is refused with RG_ERR_UNSUPPORTED naming it. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/utf8.h"
#include "core/vec.h"
#include "tokenizer/tok_internal.h"

typedef enum rg_norm_kind {
	RG_NORM_BERT,
	RG_NORM_PRECOMPILED,
	RG_NORM_REPLACE,
	RG_NORM_REPLACE_RUN,
	RG_NORM_STRIP,
	RG_NORM_STRIP_ACCENTS,
	RG_NORM_LOWERCASE,
	RG_NORM_NFC,
	RG_NORM_NFD,
	RG_NORM_NFKC,
	RG_NORM_NFKD,
} rg_norm_kind;

typedef struct rg_norm_step {
	rg_norm_kind kind;
	rg_bert_norm bert;   /* BERT, LOWERCASE */
	rg_precompiled *pc;  /* PRECOMPILED */
	char *pat, *content; /* REPLACE(_RUN): pattern (REPLACE) and replacement, NUL-terminated */
	size_t pat_len, content_len;
	uint32_t run_cp; /* REPLACE_RUN: the repeated char and the least run replaced */
	size_t run_min;
	bool left, right; /* STRIP */
} rg_norm_step;

struct rg_normalizer {
	rg_norm_step *steps; /* (n_steps) */
	size_t n_steps, cap_steps;
};

void rg_norm_scratch_free(rg_norm_scratch *s)
{
	rg_buf_free(&s->tmp);
	rg_buf_free(&s->ubuf);
	rg_cpvec_free(&s->a);
	rg_cpvec_free(&s->b);
	rg_cpvec_free(&s->c);
	rg_spanvec_free(&s->tal);
	rg_spanvec_free(&s->ual);
	rg_spanvec_free(&s->sp_a);
	rg_spanvec_free(&s->sp_b);
	rg_spanvec_free(&s->sp_c);
	rg_chgvec_free(&s->chg);
}

void rg_normalizer_free(rg_normalizer *nz)
{
	if (!nz)
		return;
	for (size_t i = 0; i < nz->n_steps; i++) {
		rg_precompiled_free(nz->steps[i].pc);
		free(nz->steps[i].pat);
		free(nz->steps[i].content);
	}
	free(nz->steps);
	free(nz);
}

static rg_norm_step *add_step(rg_normalizer *nz, rg_norm_kind kind)
{
	if (!rg_vec_reserve((void **)&nz->steps, &nz->cap_steps, nz->n_steps + 1,
			    sizeof(*nz->steps), 4))
		return NULL;
	rg_norm_step *s = &nz->steps[nz->n_steps++];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	return s;
}

static const char *jstring(json_object *o, const char *key)
{
	json_object *v = rg_tok_jget(o, key);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* Regex patterns of the form "<char>{n,}" or "<char>+" with <char> a literal (not a regex
 * metacharacter); false for anything else. */
static bool parse_run_regex(const char *re, uint32_t *cp, size_t *min)
{
	size_t len = strlen(re), k;
	if (!len || !(k = rg_utf8_next(re, len, 0, cp)) || strchr("\\.^$|?*+()[]{}", (int)*cp))
		return false;
	const char *q = re + k;
	if (strcmp(q, "+") == 0) {
		*min = 1;
		return true;
	}
	if (q[0] != '{' || q[1] < '0' || q[1] > '9')
		return false;
	char *end;
	unsigned long n = strtoul(q + 1, &end, 10);
	if (strcmp(end, ",}") != 0 || n == 0 || n > 1000)
		return false;
	*min = n;
	return true;
}

static rg_status load_step(rg_normalizer *nz, json_object *j, const char *path, int depth)
{
	const char *ty = rg_tok_jtype(j);
	rg_norm_step *s;
	rg_status st;

	if (!ty)
		return rg_errorf(RG_ERR_FORMAT, "%s: normalizer without a \"type\"", path);
	if (strcmp(ty, "Sequence") == 0) {
		json_object *arr = rg_tok_jget(j, "normalizers");
		if (!arr || !json_object_is_type(arr, json_type_array))
			return rg_errorf(RG_ERR_FORMAT, "%s: Sequence normalizer needs \"normalizers\"",
					 path);
		if (depth > 4)
			return rg_errorf(RG_ERR_UNSUPPORTED, "%s: normalizer Sequence nested too deep",
					 path);
		for (size_t i = 0; i < json_object_array_length(arr); i++)
			if ((st = load_step(nz, json_object_array_get_idx(arr, i), path,
					    depth + 1)) != RG_OK)
				return st;
		return RG_OK;
	}
	static const struct {
		const char *name;
		rg_norm_kind kind;
	} simple[] = {
		{ "BertNormalizer", RG_NORM_BERT }, { "Precompiled", RG_NORM_PRECOMPILED },
		{ "Replace", RG_NORM_REPLACE },	    { "Strip", RG_NORM_STRIP },
		{ "StripAccents", RG_NORM_STRIP_ACCENTS }, { "Lowercase", RG_NORM_LOWERCASE },
		{ "NFC", RG_NORM_NFC },		    { "NFD", RG_NORM_NFD },
		{ "NFKC", RG_NORM_NFKC },	    { "NFKD", RG_NORM_NFKD },
	};
	size_t k = 0;
	while (k < sizeof(simple) / sizeof(simple[0]) && strcmp(simple[k].name, ty) != 0)
		k++;
	if (k == sizeof(simple) / sizeof(simple[0]))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: normalizer type \"%s\" is not supported (BertNormalizer, "
				 "Sequence, Precompiled, Replace, Strip, StripAccents, Lowercase, "
				 "NFC, NFD, NFKC, NFKD)",
				 path, ty);
	if (!(s = add_step(nz, simple[k].kind)))
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (normalizer)", path);
	switch (s->kind) {
	case RG_NORM_BERT:
		s->bert.enabled = true;
		if ((st = rg_tok_jbool(j, "clean_text", true, &s->bert.clean_text, path)) != RG_OK ||
		    (st = rg_tok_jbool(j, "handle_chinese_chars", true, &s->bert.handle_chinese_chars,
				       path)) != RG_OK ||
		    (st = rg_tok_jbool(j, "lowercase", true, &s->bert.lowercase, path)) != RG_OK ||
		    (st = rg_tok_jbool(j, "strip_accents", s->bert.lowercase, &s->bert.strip_accents,
				       path)) != RG_OK)
			return st;
		return RG_OK;
	case RG_NORM_LOWERCASE:
		s->bert.enabled = true;
		s->bert.lowercase = true;
		return RG_OK;
	case RG_NORM_PRECOMPILED: {
		const char *b64 = jstring(j, "precompiled_charsmap");
		if (!b64)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: Precompiled normalizer needs a \"precompiled_charsmap\" "
					 "string",
					 path);
		return rg_precompiled_load(b64, path, &s->pc);
	}
	case RG_NORM_REPLACE: {
		json_object *pat = rg_tok_jget(j, "pattern");
		const char *str = jstring(pat, "String"), *re = jstring(pat, "Regex");
		const char *content = jstring(j, "content");
		if ((!str && !re) || !content)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: Replace normalizer needs pattern {String|Regex} and "
					 "content strings",
					 path);
		if (re) {
			if (!parse_run_regex(re, &s->run_cp, &s->run_min))
				return rg_errorf(RG_ERR_UNSUPPORTED,
						 "%s: Replace normalizer Regex \"%s\" is not "
						 "supported (only \"<char>{n,}\" and \"<char>+\")",
						 path, re);
			s->kind = RG_NORM_REPLACE_RUN;
		} else if (!*str) {
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: Replace normalizer with an empty String pattern", path);
		} else if (!(s->pat = strdup(str))) {
			return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
		}
		s->pat_len = s->pat ? strlen(s->pat) : 0;
		if (!(s->content = strdup(content)))
			return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
		s->content_len = strlen(content);
		return RG_OK;
	}
	case RG_NORM_STRIP:
		if ((st = rg_tok_jbool(j, "strip_left", true, &s->left, path)) != RG_OK ||
		    (st = rg_tok_jbool(j, "strip_right", true, &s->right, path)) != RG_OK)
			return st;
		return RG_OK;
	case RG_NORM_REPLACE_RUN:
	case RG_NORM_STRIP_ACCENTS:
	case RG_NORM_NFC:
	case RG_NORM_NFD:
	case RG_NORM_NFKC:
	case RG_NORM_NFKD:
		return RG_OK;
	}
	return RG_OK;
}

rg_status rg_normalizer_load(json_object *j, const char *path, rg_normalizer **out)
{
	rg_status st;
	*out = NULL;
	if (rg_tok_jnull(j))
		return RG_OK;
	rg_normalizer *nz = calloc(1, sizeof(*nz));
	if (!nz)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (normalizer)", path);
	if ((st = load_step(nz, j, path, 0)) != RG_OK) {
		rg_normalizer_free(nz);
		return st;
	}
	*out = nz;
	return RG_OK;
}

static void put_cps(rg_buf *out, const uint32_t *v, size_t n)
{
	if (!rg_buf_reserve(out, 4 * n))
		return;
	for (size_t i = 0; i < n; i++)
		out->len += rg_utf8_put(v[i], out->data + out->len);
	out->data[out->len] = '\0';
}

static bool is_ws_at(const char *s)
{
	return rg_bert_is_whitespace(rg_utf8_get_valid((const unsigned char *)s));
}

/* One step: in[0..n) -> out (cleared first). */
static rg_status apply_step(const rg_norm_step *s, const char *in, size_t n, rg_buf *out,
			    rg_norm_scratch *sc)
{
	rg_status st;
	out->len = 0;
	switch (s->kind) {
	case RG_NORM_PRECOMPILED:
		rg_precompiled_apply(s->pc, in, n, out);
		break;
	case RG_NORM_REPLACE:
		for (size_t i = 0; i < n;) {
			const char *m = memmem(in + i, n - i, s->pat, s->pat_len);
			size_t at = m ? (size_t)(m - in) : n;
			rg_buf_put(out, in + i, at - i);
			if (!m)
				break;
			rg_buf_put(out, s->content, s->content_len);
			i = at + s->pat_len;
		}
		break;
	case RG_NORM_REPLACE_RUN:
		for (size_t i = 0; i < n;) {
			size_t j = i, run = 0, k;
			while (j < n && rg_utf8_get_valid((const unsigned char *)in + j) == s->run_cp) {
				j += rg_utf8_len_valid((unsigned char)in[j]);
				run++;
			}
			if (run >= s->run_min) {
				rg_buf_put(out, s->content, s->content_len);
			} else if (run) {
				rg_buf_put(out, in + i, j - i);
			} else {
				k = rg_utf8_len_valid((unsigned char)in[i]);
				rg_buf_put(out, in + i, k);
				j = i + k;
			}
			i = j;
		}
		break;
	case RG_NORM_STRIP: {
		size_t a = 0, b = n;
		while (s->left && a < b && is_ws_at(in + a))
			a += rg_utf8_len_valid((unsigned char)in[a]);
		while (s->right && b > a) {
			size_t p = b - 1;
			while (p > a && ((unsigned char)in[p] & 0xC0) == 0x80)
				p--;
			if (!is_ws_at(in + p))
				break;
			b = p;
		}
		rg_buf_put(out, in + a, b - a);
		break;
	}
	case RG_NORM_STRIP_ACCENTS:
		for (size_t i = 0; i < n;) {
			size_t k = rg_utf8_len_valid((unsigned char)in[i]);
			if (!rg_hf_is_mark(rg_utf8_get_valid((const unsigned char *)in + i)))
				rg_buf_put(out, in + i, k);
			i += k;
		}
		break;
	case RG_NORM_BERT:
	case RG_NORM_LOWERCASE:
		sc->a.n = 0;
		if ((st = rg_utf8_decode(in, n, 0, &sc->a)) != RG_OK ||
		    (st = rg_bert_normalize(&s->bert, sc->a.v, sc->a.n, &sc->b, &sc->c)) != RG_OK)
			return st;
		put_cps(out, sc->b.v, sc->b.n);
		break;
	case RG_NORM_NFC:
	case RG_NORM_NFD:
	case RG_NORM_NFKC:
	case RG_NORM_NFKD: {
		bool compat = s->kind == RG_NORM_NFKC || s->kind == RG_NORM_NFKD;
		sc->a.n = 0;
		if ((st = rg_utf8_decode(in, n, 0, &sc->a)) != RG_OK ||
		    (st = rg_unicode_decompose(sc->a.v, sc->a.n, compat, &sc->b)) != RG_OK)
			return st;
		if (s->kind == RG_NORM_NFC || s->kind == RG_NORM_NFKC) {
			utf8proc_ssize_t m = sc->b.n ? utf8proc_normalize_utf32(
							       (utf8proc_int32_t *)sc->b.v,
							       (utf8proc_ssize_t)sc->b.n,
							       UTF8PROC_COMPOSE)
						     : 0;
			if (m < 0)
				return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: %s",
						 utf8proc_errmsg(m));
			sc->b.n = (size_t)m;
			/* utf8proc_normalize_utf32 recomposes the composition exclusions (U+2ADC,
			 * U+1D15E...); NFC never holds them: write those decomposed */
			for (size_t i = 0; i < sc->b.n; i++) {
				utf8proc_int32_t d[8];
				int bc = 0;
				utf8proc_ssize_t k = 1;
				d[0] = (utf8proc_int32_t)sc->b.v[i];
				if (utf8proc_get_property(d[0])->comp_exclusion)
					k = utf8proc_decompose_char(d[0], d, 8, UTF8PROC_DECOMPOSE, &bc);
				if (k < 1 || k > 8) {
					d[0] = (utf8proc_int32_t)sc->b.v[i];
					k = 1;
				}
				put_cps(out, (const uint32_t *)d, (size_t)k);
			}
			break;
		}
		put_cps(out, sc->b.v, sc->b.n);
		break;
	}
	}
	if (out->oom)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (normalizer)");
	return RG_OK;
}

rg_status rg_normalizer_apply(const rg_normalizer *nz, const char *s, size_t len, rg_buf *out,
			      rg_norm_scratch *sc)
{
	rg_status st;
	if (!nz || !nz->n_steps) {
		out->len = 0;
		rg_buf_put(out, s, len);
		return out->oom ? rg_errorf(RG_ERR_OOM, "tokenizer: out of memory") : RG_OK;
	}
	/* ping-pong between out and sc->tmp so that the last step writes into out */
	rg_buf *bufs[2] = { out, &sc->tmp };
	const char *in = s;
	size_t n = len;
	for (size_t i = 0; i < nz->n_steps; i++) {
		rg_buf *dst = bufs[(nz->n_steps - 1 - i) % 2];
		if ((st = apply_step(&nz->steps[i], in, n, dst, sc)) != RG_OK)
			return st;
		if (!dst->data && rg_buf_reserve(dst, 0))
			dst->data[0] = '\0';
		in = dst->data;
		n = dst->len;
	}
	return RG_OK;
}

/* ---- aligned mode (offsets) ------------------------------------------------------------------ */

/* in[0..n) with byte spans in_al -> code points into cps and one span per code point into sps. */
static rg_status to_cps_al(const char *in, size_t n, const rg_span *in_al, rg_cpvec *cps,
			   rg_spanvec *sps)
{
	rg_status st;

	cps->n = 0;
	sps->n = 0;
	if ((st = rg_cpvec_reserve(cps, n)) != RG_OK || (st = rg_spanvec_reserve(sps, n)) != RG_OK)
		return st;
	for (size_t i = 0; i < n;) {
		cps->v[cps->n++] = rg_utf8_get_valid((const unsigned char *)in + i);
		sps->v[sps->n++] = in_al[i];
		i += rg_utf8_len_valid((unsigned char)in[i]);
	}
	return RG_OK;
}

/* Code points with their spans -> UTF-8 into out and one span per byte into out_al (cleared). */
static rg_status put_cps_al(rg_buf *out, rg_spanvec *out_al, const uint32_t *v, const rg_span *sp,
			    size_t m)
{
	rg_status st;

	out->len = 0;
	out_al->n = 0;
	if (!rg_buf_reserve(out, 4 * m))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (normalizer)");
	if ((st = rg_spanvec_reserve(out_al, 4 * m)) != RG_OK)
		return st;
	for (size_t i = 0; i < m; i++) {
		size_t k = rg_utf8_put(v[i], out->data + out->len);

		out->len += k;
		for (size_t j = 0; j < k; j++)
			out_al->v[out_al->n++] = sp[i];
	}
	out->data[out->len] = '\0';
	return RG_OK;
}

/* Append bytes s[0..k) to out, each with span sp (a whole replacement string gets one span). */
static rg_status put_span(rg_buf *out, rg_spanvec *out_al, const char *s, size_t k, rg_span sp)
{
	rg_status st;

	rg_buf_put(out, s, k);
	if ((st = rg_spanvec_reserve(out_al, out_al->n + k)) != RG_OK)
		return st;
	for (size_t j = 0; j < k; j++)
		out_al->v[out_al->n++] = sp;
	return out->oom ? rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (normalizer)") : RG_OK;
}

/* Copy in[a..b) with its spans. */
static rg_status put_copy(rg_buf *out, rg_spanvec *out_al, const char *in, const rg_span *in_al,
			  size_t a, size_t b)
{
	rg_status st;

	rg_buf_put(out, in + a, b - a);
	if ((st = rg_spanvec_reserve(out_al, out_al->n + (b - a))) != RG_OK)
		return st;
	memcpy(out_al->v + out_al->n, in_al + a, (b - a) * sizeof(*in_al));
	out_al->n += b - a;
	return out->oom ? rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (normalizer)") : RG_OK;
}

/* One step in aligned mode: in[0..n) with spans in_al -> out / out_al (cleared first). The
 * spans follow HF's NormalizedString: Replace gives its content the span of the last byte
 * matched; Strip and StripAccents keep the spans of what they keep; Precompiled goes through
 * HF's transformation list (rg_precompiled_changes); the code point steps (BertNormalizer,
 * Lowercase, NFD, NFKD, NFC, NFKC) give every output char the span of the char it comes from. */
static rg_status apply_step_al(const rg_norm_step *s, const char *in, size_t n,
			       const rg_span *in_al, rg_buf *out, rg_spanvec *out_al,
			       rg_norm_scratch *sc)
{
	rg_status st = RG_OK;

	out->len = 0;
	out_al->n = 0;
	switch (s->kind) {
	case RG_NORM_PRECOMPILED: {
		bool modified = false;

		sc->chg.n = 0;
		if ((st = rg_precompiled_changes(s->pc, in, n, &sc->chg, &modified)) != RG_OK)
			return st;
		if (!modified)
			return put_copy(out, out_al, in, in_al, 0, n);
		return rg_align_transform(in, n, in_al, &sc->chg, 0, out, out_al);
	}
	case RG_NORM_REPLACE:
		for (size_t i = 0; i < n && st == RG_OK;) {
			const char *m = memmem(in + i, n - i, s->pat, s->pat_len);
			size_t at = m ? (size_t)(m - in) : n;
			st = put_copy(out, out_al, in, in_al, i, at);
			if (!m || st != RG_OK)
				break;
			st = put_span(out, out_al, s->content, s->content_len,
				      in_al[at + s->pat_len - 1]);
			i = at + s->pat_len;
		}
		break;
	case RG_NORM_REPLACE_RUN:
		for (size_t i = 0; i < n && st == RG_OK;) {
			size_t j = i, run = 0;
			while (j < n && rg_utf8_get_valid((const unsigned char *)in + j) == s->run_cp) {
				j += rg_utf8_len_valid((unsigned char)in[j]);
				run++;
			}
			if (run >= s->run_min) {
				st = put_span(out, out_al, s->content, s->content_len, in_al[j - 1]);
			} else if (run) {
				st = put_copy(out, out_al, in, in_al, i, j);
			} else {
				j = i + rg_utf8_len_valid((unsigned char)in[i]);
				st = put_copy(out, out_al, in, in_al, i, j);
			}
			i = j;
		}
		break;
	case RG_NORM_STRIP: {
		size_t a = 0, b = n;
		while (s->left && a < b && is_ws_at(in + a))
			a += rg_utf8_len_valid((unsigned char)in[a]);
		while (s->right && b > a) {
			size_t p = b - 1;
			while (p > a && ((unsigned char)in[p] & 0xC0) == 0x80)
				p--;
			if (!is_ws_at(in + p))
				break;
			b = p;
		}
		st = put_copy(out, out_al, in, in_al, a, b);
		break;
	}
	case RG_NORM_STRIP_ACCENTS:
		for (size_t i = 0; i < n && st == RG_OK;) {
			size_t k = rg_utf8_len_valid((unsigned char)in[i]);
			if (!rg_hf_is_mark(rg_utf8_get_valid((const unsigned char *)in + i)))
				st = put_copy(out, out_al, in, in_al, i, i + k);
			i += k;
		}
		break;
	case RG_NORM_BERT:
	case RG_NORM_LOWERCASE:
		if ((st = to_cps_al(in, n, in_al, &sc->a, &sc->sp_a)) != RG_OK ||
		    (st = rg_bert_normalize_al(&s->bert, sc->a.v, sc->sp_a.v, sc->a.n, &sc->b, &sc->sp_b,
					       &sc->c, &sc->sp_c)) != RG_OK)
			return st;
		return put_cps_al(out, out_al, sc->b.v, sc->sp_b.v, sc->b.n);
	case RG_NORM_NFC:
	case RG_NORM_NFD:
	case RG_NORM_NFKC:
	case RG_NORM_NFKD: {
		bool compat = s->kind == RG_NORM_NFKC || s->kind == RG_NORM_NFKD;
		if ((st = to_cps_al(in, n, in_al, &sc->a, &sc->sp_a)) != RG_OK ||
		    (st = rg_unicode_decompose_al(sc->a.v, sc->sp_a.v, sc->a.n, compat, &sc->b,
						  &sc->sp_b)) != RG_OK)
			return st;
		if (s->kind == RG_NORM_NFD || s->kind == RG_NORM_NFKD)
			return put_cps_al(out, out_al, sc->b.v, sc->sp_b.v, sc->b.n);
		if ((st = rg_unicode_compose_al(sc->b.v, sc->sp_b.v, sc->b.n, &sc->c, &sc->sp_c)) !=
		    RG_OK)
			return st;
		return put_cps_al(out, out_al, sc->c.v, sc->sp_c.v, sc->c.n);
	}
	}
	if (st == RG_OK && out->oom)
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (normalizer)");
	if (st == RG_OK && rg_buf_reserve(out, 0))
		out->data[out->len] = '\0';
	return st;
}

rg_status rg_normalizer_apply_al(const rg_normalizer *nz, const char *s, size_t len,
				 const rg_span *in_al, rg_buf *out, rg_spanvec *out_al,
				 rg_norm_scratch *sc)
{
	rg_status st;

	out->len = 0;
	out_al->n = 0;
	if (!nz || !nz->n_steps) {
		if ((st = put_copy(out, out_al, s, in_al, 0, len)) != RG_OK)
			return st;
		if (!rg_buf_reserve(out, 0))
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		out->data[out->len] = '\0';
		return RG_OK;
	}
	/* ping-pong between (out, out_al) and (sc->ubuf, sc->ual) so that the last step writes out */
	rg_buf *bufs[2] = { out, &sc->ubuf };
	rg_spanvec *als[2] = { out_al, &sc->ual };
	const char *in = s;
	const rg_span *ial = in_al;
	size_t n = len;
	for (size_t i = 0; i < nz->n_steps; i++) {
		size_t k = (nz->n_steps - 1 - i) % 2;
		if ((st = apply_step_al(&nz->steps[i], in, n, ial, bufs[k], als[k], sc)) != RG_OK)
			return st;
		if (!bufs[k]->data && rg_buf_reserve(bufs[k], 0))
			bufs[k]->data[0] = '\0';
		in = bufs[k]->data;
		ial = als[k]->v;
		n = bufs[k]->len;
	}
	return RG_OK;
}
