/* BERT normalizer and pre-tokenizer character classes, on code points.
 *
 * Semantics follow HF `tokenizers` (Rust) normalizers/bert.rs and pre_tokenizers/bert.rs:
 *   clean_text:  drop U+0000, U+FFFD and "other" chars (Cc, Cf, Co; \t \n \r excepted), then map
 *                whitespace (Rust char::is_whitespace, plus \t \n \r) to ' '.
 *   chinese:     ' ' c ' ' for c in the BERT CJK ideograph ranges.
 *   strip:       canonical decomposition (NFD) then drop Mn.
 *   lowercase:   Rust char::to_lowercase, which is the simple lowercase mapping except U+0130 ->
 *                "i\u0307" (the one unconditional multi-char lowercase in SpecialCasing.txt).
 * HF's category tables are older than utf8proc's Unicode data, so the categories come from
 * hf_unicode_tables.h (generated from HF itself); NFD and lowercasing come from utf8proc with the
 * few differences listed there. Unassigned code points (Cn) are not "other" in HF, so they stay.
 */
#include "tokenizer/bert_normalizer.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/hf_unicode_tables.h"
#include "tokenizer/hf_unicode_tables_ext.h"

rg_status rg_cpvec_reserve(rg_cpvec *a, size_t cap)
{
	if (cap <= a->cap)
		return RG_OK;
	size_t nc = a->cap ? a->cap : 64;
	while (nc < cap)
		nc *= 2;
	uint32_t *v = realloc(a->v, nc * sizeof(*v));
	if (!v)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (%zu code points)", nc);
	a->v = v;
	a->cap = nc;
	return RG_OK;
}

void rg_cpvec_free(rg_cpvec *a)
{
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

rg_status rg_utf8_decode(const char *s, size_t len, size_t base, rg_cpvec *out)
{
	rg_status st = rg_cpvec_reserve(out, out->n + len);
	uint32_t c;

	if (st != RG_OK)
		return st;
	for (size_t i = 0, k; i < len; i += k) {
		if ((k = rg_utf8_next(s, len, i, &c)) == 0)
			return rg_errorf(RG_ERR_INVALID_UTF8,
					 "invalid UTF-8 at byte offset %zu (byte 0x%02x)", base + i,
					 (unsigned char)s[i]);
		out->v[out->n++] = c;
	}
	return RG_OK;
}

bool rg_bert_is_whitespace(uint32_t c)
{
	switch (c) {
	case 0x09:
	case 0x0A:
	case 0x0B:
	case 0x0C:
	case 0x0D:
	case 0x20:
	case 0x85:
	case 0xA0:
	case 0x1680:
	case 0x2028:
	case 0x2029:
	case 0x202F:
	case 0x205F:
	case 0x3000:
		return true;
	default:
		return c >= 0x2000 && c <= 0x200A;
	}
}

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < r[mid][0])
			hi = mid;
		else if (c > r[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

#define IN_TABLE(tab, c) in_ranges(tab, sizeof(tab) / sizeof(tab[0]), c)

/* HF's is_control: Cc, Cf, Co of its tables, with \t \n \r excepted. */
static bool is_other(uint32_t c)
{
	if (c < 0x80)
		return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
	return IN_TABLE(hf_other, c);
}

/* The CJK ranges of HF normalizers/bert.rs is_chinese_char (note 0x2B920, not BERT's 0x2B820). */
static bool is_chinese(uint32_t c)
{
	return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
	       (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
	       (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool rg_bert_is_punct(uint32_t c)
{
	if (c < 0x80)
		return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
		       (c >= 123 && c <= 126);
	return IN_TABLE(hf_punct, c);
}

static bool is_mn(uint32_t c)
{
	return c >= 0x300 && IN_TABLE(hf_mn, c);
}

static uint32_t to_lower1(uint32_t c)
{
	if (c < 0x80)
		return c >= 'A' && c <= 'Z' ? c + 32 : c;
	size_t lo = 0, hi = sizeof(lower_extra) / sizeof(lower_extra[0]);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (lower_extra[mid][0] == c)
			return lower_extra[mid][1];
		if (lower_extra[mid][0] < c)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

static uint8_t ccc(uint32_t c)
{
	if (c < 0x300)
		return 0;
	return (uint8_t)utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
}

bool rg_hf_is_letter(uint32_t c)
{
	if (c < 0x80)
		return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
	return IN_TABLE(hf_letter, c);
}

bool rg_hf_is_number(uint32_t c)
{
	if (c < 0x80)
		return c >= '0' && c <= '9';
	return IN_TABLE(hf_number, c);
}

bool rg_hf_is_mark(uint32_t c)
{
	return c >= 0x300 && IN_TABLE(hf_mark, c);
}

/* Room for n spans in v (tok_util.c's rg_spanvec_reserve, without its dependency). */
static rg_status sp_reserve(rg_spanvec *v, size_t n)
{
	if (n <= v->cap)
		return RG_OK;
	size_t nc = v->cap ? v->cap : 64;
	while (nc < n)
		nc *= 2;
	rg_span *p = realloc(v->v, nc * sizeof(*p));
	if (!p)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (offsets)");
	v->v = p;
	v->cap = nc;
	return RG_OK;
}

rg_status rg_unicode_decompose(const uint32_t *in, size_t n, bool compat, rg_cpvec *out)
{
	return rg_unicode_decompose_al(in, NULL, n, compat, out, NULL);
}

rg_status rg_unicode_decompose_al(const uint32_t *in, const rg_span *in_sp, size_t n, bool compat,
				  rg_cpvec *out, rg_spanvec *out_sp)
{
	rg_status st;
	out->n = 0;
	if (out_sp)
		out_sp->n = 0;
	for (size_t i = 0; i < n; i++) {
		utf8proc_int32_t d[32];
		int bc = 0;
		utf8proc_ssize_t k = 1;
		d[0] = (utf8proc_int32_t)in[i];
		if (in[i] >= 0xA0 && !IN_TABLE(nfd_keep, in[i]) &&
		    !(compat && IN_TABLE(nfk_keep, in[i])))
			k = utf8proc_decompose_char((utf8proc_int32_t)in[i], d, 32,
						    compat ? UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT
							   : UTF8PROC_DECOMPOSE,
						    &bc);
		if (k < 0 || k > 32) {
			d[0] = (utf8proc_int32_t)in[i];
			k = 1;
		}
		if ((st = rg_cpvec_reserve(out, out->n + (size_t)k)) != RG_OK)
			return st;
		if (out_sp && (st = sp_reserve(out_sp, out->n + (size_t)k)) != RG_OK)
			return st;
		for (utf8proc_ssize_t j = 0; j < k; j++) {
			if (out_sp)
				out_sp->v[out_sp->n++] = in_sp[i];
			out->v[out->n++] = (uint32_t)d[j];
		}
	}
	/* Stable insertion sort of every run of non-starters by combining class. */
	for (size_t i = 1; i < out->n; i++) {
		uint32_t c = out->v[i];
		rg_span sp = out_sp ? out_sp->v[i] : (rg_span){0, 0};
		uint8_t cc = ccc(c);
		if (cc == 0)
			continue;
		size_t j = i;
		while (j > 0) {
			uint8_t pc = ccc(out->v[j - 1]);
			if (pc == 0 || pc <= cc)
				break;
			out->v[j] = out->v[j - 1];
			if (out_sp)
				out_sp->v[j] = out_sp->v[j - 1];
			j--;
		}
		out->v[j] = c;
		if (out_sp)
			out_sp->v[j] = sp;
	}
	return RG_OK;
}

/* The canonical composite of (a, b), or 0: utf8proc's composition of the pair (Hangul included),
 * refusing composition exclusions (NFC never holds them). */
static uint32_t compose_pair(uint32_t a, uint32_t b)
{
	utf8proc_int32_t buf[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
	utf8proc_ssize_t m = utf8proc_normalize_utf32(buf, 2, UTF8PROC_COMPOSE);

	if (m != 1 || utf8proc_get_property(buf[0])->comp_exclusion)
		return 0;
	return (uint32_t)buf[0];
}

rg_status rg_unicode_compose_al(const uint32_t *in, const rg_span *in_sp, size_t n, rg_cpvec *out,
				rg_spanvec *out_sp)
{
	rg_status st;
	size_t starter = SIZE_MAX; /* index in out of the last starter */
	int last_cc = -1;          /* class of the last char kept after the starter; 0: adjacent */

	out->n = 0;
	if (out_sp)
		out_sp->n = 0;
	if ((st = rg_cpvec_reserve(out, n)) != RG_OK ||
	    (out_sp && (st = sp_reserve(out_sp, n)) != RG_OK))
		return st;
	/* Unicode's canonical composition: a char composes with the last starter unless a char
	 * between them is a starter or has a class >= its own (blocked) */
	for (size_t i = 0; i < n; i++) {
		uint32_t c = in[i], comp;
		int cc = ccc(c);

		if (starter != SIZE_MAX && (last_cc == 0 || last_cc < cc) &&
		    (comp = compose_pair(out->v[starter], c)) != 0) {
			out->v[starter] = comp;
			continue;
		}
		if (cc == 0) {
			starter = out->n;
			last_cc = 0;
		} else {
			last_cc = cc;
		}
		if (out_sp)
			out_sp->v[out->n] = in_sp[i];
		out->v[out->n++] = c;
	}
	return RG_OK;
}

rg_status rg_bert_normalize(const rg_bert_norm *cfg, const uint32_t *in, size_t n, rg_cpvec *out,
			    rg_cpvec *tmp)
{
	return rg_bert_normalize_al(cfg, in, NULL, n, out, NULL, tmp, NULL);
}

rg_status rg_bert_normalize_al(const rg_bert_norm *cfg, const uint32_t *in, const rg_span *in_sp,
			       size_t n, rg_cpvec *out, rg_spanvec *out_sp, rg_cpvec *tmp,
			       rg_spanvec *tmp_sp)
{
	rg_status st;
	bool al = in_sp && out_sp && tmp_sp;
	out->n = 0;
	if (al)
		out_sp->n = tmp_sp->n = 0;
	if (!cfg->enabled) {
		if ((st = rg_cpvec_reserve(out, n)) != RG_OK ||
		    (al && (st = sp_reserve(out_sp, n)) != RG_OK))
			return st;
		memcpy(out->v, in, n * sizeof(*in));
		if (al)
			memcpy(out_sp->v, in_sp, n * sizeof(*in_sp));
		out->n = n;
		if (al)
			out_sp->n = n;
		return RG_OK;
	}
	/* clean_text + chinese chars into tmp (at most 3 code points per input). */
	tmp->n = 0;
	if ((st = rg_cpvec_reserve(tmp, 3 * n)) != RG_OK ||
	    (al && (st = sp_reserve(tmp_sp, 3 * n)) != RG_OK))
		return st;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = in[i];
		size_t k0 = tmp->n;
		if (cfg->clean_text) {
			if (c == 0 || c == 0xFFFD || is_other(c))
				continue;
			if (rg_bert_is_whitespace(c))
				c = ' ';
		}
		if (cfg->handle_chinese_chars && is_chinese(c)) {
			tmp->v[tmp->n++] = ' ';
			tmp->v[tmp->n++] = c;
			tmp->v[tmp->n++] = ' ';
		} else {
			tmp->v[tmp->n++] = c;
		}
		for (size_t k = k0; al && k < tmp->n; k++)
			tmp_sp->v[k] = in_sp[i];
	}
	if (al)
		tmp_sp->n = tmp->n;
	const uint32_t *src = tmp->v;
	const rg_span *src_sp = al ? tmp_sp->v : NULL;
	size_t m = tmp->n;
	if (cfg->strip_accents) {
		if ((st = rg_unicode_decompose_al(tmp->v, src_sp, tmp->n, false, out,
						  al ? out_sp : NULL)) != RG_OK)
			return st;
		size_t w = 0;
		for (size_t i = 0; i < out->n; i++) {
			if (is_mn(out->v[i]))
				continue;
			if (al)
				out_sp->v[w] = out_sp->v[i];
			out->v[w++] = out->v[i];
		}
		out->n = w;
		if (al)
			out_sp->n = w;
		if (!cfg->lowercase)
			return RG_OK;
		/* lowercase from out into tmp, then swap roles */
		rg_cpvec t = *tmp;
		*tmp = *out;
		*out = t;
		if (al) {
			rg_spanvec ts = *tmp_sp;
			*tmp_sp = *out_sp;
			*out_sp = ts;
		}
		src = tmp->v;
		src_sp = al ? tmp_sp->v : NULL;
		m = tmp->n;
	}
	out->n = 0;
	if ((st = rg_cpvec_reserve(out, 2 * m)) != RG_OK ||
	    (al && (st = sp_reserve(out_sp, 2 * m)) != RG_OK))
		return st;
	for (size_t i = 0; i < m; i++) {
		uint32_t c = src[i];
		size_t k0 = out->n;
		if (!cfg->lowercase) {
			out->v[out->n++] = c;
		} else if (c == 0x130) {
			out->v[out->n++] = 'i';
			out->v[out->n++] = 0x307;
		} else {
			out->v[out->n++] = to_lower1(c);
		}
		for (size_t k = k0; al && k < out->n; k++)
			out_sp->v[k] = src_sp[i];
	}
	if (al)
		out_sp->n = out->n;
	return RG_OK;
}
