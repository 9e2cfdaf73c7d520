/* SentencePiece's precompiled normalization rules (the "precompiled_charsmap" of a tokenizer.json
 * Precompiled normalizer, Kudo & Richardson 2018), read as HF `tokenizers` does (crate
 * spm_precompiled + normalizers/precompiled.rs):
 *   blob = u32 LE trie_size | trie_size / 4 u32 LE units (a Darts-clone double array) | the
 *          replacement strings, each ended by a NUL;
 *   a lookup walks the double array over the key's bytes and takes the FIRST (shortest) key that
 *   is a prefix of it; its value is a byte offset into the replacement strings.
 * Normalizing walks the text by extended grapheme clusters (UAX #29, utf8proc's rules): a cluster
 * of fewer than 6 bytes whose prefix has a rule is replaced whole by that rule's string; otherwise
 * each code point is looked up alone and replaced, or kept. This is HF's behaviour, not
 * SentencePiece's own longest-match normalizer.cc (HF: "Yes, this is weird"), and is what ids
 * parity needs. Malformed tries never read out of bounds: a walk that would leaves the key
 * unmatched (HF would panic). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tok_internal.h"

struct rg_precompiled {
	uint32_t *units; /* (n_units) double-array units */
	size_t n_units;
	char *norm; /* replacement strings, NUL-separated; (n_norm) bytes + a final NUL */
	size_t n_norm;
};

/* Standard base64 (RFC 4648) with the padding the Rust base64 crate's STANDARD engine requires;
 * non-zero trailing bits are refused as it does. out: (3 * len / 4) bytes. */
static bool base64_decode(const char *s, size_t len, unsigned char *out, size_t *out_len)
{
	size_t k = 0;
	if (len % 4)
		return false;
	for (size_t i = 0; i < len; i += 4) {
		uint32_t v = 0;
		int pad = 0;
		for (int j = 0; j < 4; j++) {
			char c = s[i + j];
			int d;
			if (c >= 'A' && c <= 'Z')
				d = c - 'A';
			else if (c >= 'a' && c <= 'z')
				d = c - 'a' + 26;
			else if (c >= '0' && c <= '9')
				d = c - '0' + 52;
			else if (c == '+')
				d = 62;
			else if (c == '/')
				d = 63;
			else if (c == '=' && i + 4 == len && j >= 2)
				d = -1;
			else
				return false;
			if (d < 0)
				pad++;
			else if (pad)
				return false; /* data after '=' */
			v = (v << 6) | (uint32_t)(d < 0 ? 0 : d);
		}
		if ((pad == 1 && (v & 0xFF)) || (pad == 2 && (v & 0xFFFF)))
			return false;
		out[k++] = (unsigned char)(v >> 16);
		if (pad < 2)
			out[k++] = (unsigned char)(v >> 8);
		if (pad < 1)
			out[k++] = (unsigned char)v;
	}
	*out_len = k;
	return true;
}

rg_status rg_precompiled_load(const char *b64, const char *path, rg_precompiled **out)
{
	size_t len = strlen(b64), n = 0;
	unsigned char *blob = malloc(len / 4 * 3 + 1);
	rg_precompiled *p = calloc(1, sizeof(*p));
	rg_status st = RG_OK;

	*out = NULL;
	if (!blob || !p) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (precompiled_charsmap)", path);
		goto out_free;
	}
	if (!base64_decode(b64, len, blob, &n)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: Precompiled precompiled_charsmap is not valid base64",
			       path);
		goto out_free;
	}
	if (n < 4) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: Precompiled precompiled_charsmap is truncated", path);
		goto out_free;
	}
	uint32_t trie_size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
			     (uint32_t)blob[3] << 24;
	p->n_units = trie_size / 4;
	if (p->n_units > (n - 4) / 4) {
		st = rg_errorf(RG_ERR_FORMAT,
			       "%s: Precompiled precompiled_charsmap is truncated (trie of %u bytes, "
			       "%zu given)",
			       path, trie_size, n - 4);
		goto out_free;
	}
	size_t norm_at = 4 + 4 * p->n_units;
	p->n_norm = n - norm_at;
	p->units = malloc((p->n_units ? p->n_units : 1) * sizeof(*p->units));
	p->norm = malloc(p->n_norm + 1);
	if (!p->units || !p->norm) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (precompiled_charsmap)", path);
		goto out_free;
	}
	for (size_t i = 0; i < p->n_units; i++) {
		const unsigned char *u = blob + 4 + 4 * i;
		p->units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
			      (uint32_t)u[3] << 24;
	}
	memcpy(p->norm, blob + norm_at, p->n_norm);
	p->norm[p->n_norm] = '\0';
	if (!rg_utf8_valid(p->norm, p->n_norm)) {
		st = rg_errorf(RG_ERR_FORMAT,
			       "%s: Precompiled precompiled_charsmap replacements are not UTF-8", path);
		goto out_free;
	}
	free(blob);
	*out = p;
	return RG_OK;
out_free:
	free(blob);
	rg_precompiled_free(p);
	return st;
}

void rg_precompiled_free(rg_precompiled *p)
{
	if (!p)
		return;
	free(p->units);
	free(p->norm);
	free(p);
}

/* Darts-clone unit fields (spm_precompiled ArrayUnitTrait). */
static bool unit_has_leaf(uint32_t u)
{
	return (u >> 8) & 1;
}
static uint32_t unit_value(uint32_t u)
{
	return u & ((1u << 31) - 1);
}
static uint32_t unit_label(uint32_t u)
{
	return u & ((1u << 31) | 0xFF);
}
static size_t unit_offset(uint32_t u)
{
	return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6);
}

/* The replacement of the shortest key that prefixes key[0..n) (a NUL byte ends the key), as a
 * pointer into p->norm and its length; false when none. */
static bool lookup(const rg_precompiled *p, const char *key, size_t n, const char **rep,
		   size_t *rep_len)
{
	if (!p->n_units)
		return false;
	size_t pos = unit_offset(p->units[0]);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)key[i];
		if (c == 0)
			return false;
		pos ^= c;
		if (pos >= p->n_units)
			return false;
		uint32_t u = p->units[pos];
		if (unit_label(u) != c)
			return false;
		pos ^= unit_offset(u);
		if (unit_has_leaf(u)) {
			if (pos >= p->n_units)
				return false;
			size_t at = unit_value(p->units[pos]);
			/* an offset past the strings or inside a UTF-8 sequence is no rule */
			if (at > p->n_norm || ((unsigned char)p->norm[at] & 0xC0) == 0x80)
				return false;
			*rep = p->norm + at;
			*rep_len = strlen(p->norm + at);
			return true;
		}
	}
	return false;
}

void rg_precompiled_apply(const rg_precompiled *p, const char *s, size_t len, rg_buf *out)
{
	utf8proc_int32_t state = 0;
	const char *rep;
	size_t rep_len;

	for (size_t g = 0; g < len;) {
		/* the extended grapheme cluster s[g..e) */
		size_t e = g + rg_utf8_len_valid((unsigned char)s[g]);
		uint32_t prev = rg_utf8_get_valid((const unsigned char *)s + g);
		while (e < len) {
			uint32_t c = rg_utf8_get_valid((const unsigned char *)s + e);
			if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev,
							     (utf8proc_int32_t)c, &state))
				break;
			prev = c;
			e += rg_utf8_len_valid((unsigned char)s[e]);
		}
		if (e - g < 6 && lookup(p, s + g, e - g, &rep, &rep_len)) {
			rg_buf_put(out, rep, rep_len);
		} else {
			for (size_t i = g; i < e;) {
				size_t k = rg_utf8_len_valid((unsigned char)s[i]);
				if (lookup(p, s + i, k, &rep, &rep_len))
					rg_buf_put(out, rep, rep_len);
				else
					rg_buf_put(out, s + i, k);
				i += k;
			}
		}
		g = e;
	}
}

/* HF normalizers/precompiled.rs replace(): the new part's chars with change 0; a longer part
 * marks its last (new - old) chars as inserted (+1); a shorter one adds (new - old) to the last
 * change of the list, which is an earlier char's when the new part is empty (and nothing at all
 * when the list is still empty: HF's alignments then shift, and so do ours). */
static rg_status change_replace(rg_chgvec *ch, const char *old, size_t old_len, const char *rep,
				size_t rep_len)
{
	long n_old = 0, n_new = 0, diff;
	rg_status st;

	for (size_t i = 0; i < old_len; i += rg_utf8_len_valid((unsigned char)old[i]))
		n_old++;
	for (size_t i = 0; i < rep_len;) {
		uint32_t cp;
		size_t k = rg_utf8_next(rep, rep_len, i, &cp);

		if (!k) { /* a malformed rule string: HF keeps valid UTF-8 only */
			i++;
			continue;
		}
		if ((st = rg_chgvec_push(ch, cp, 0)) != RG_OK)
			return st;
		n_new++;
		i += k;
	}
	diff = n_new - n_old;
	if (diff > 0) {
		for (long k = 0; k < diff && (size_t)k < ch->n; k++)
			ch->v[ch->n - 1 - (size_t)k].change = 1;
	} else if (diff < 0 && ch->n) {
		ch->v[ch->n - 1].change += (int32_t)diff;
	}
	return RG_OK;
}

rg_status rg_precompiled_changes(const rg_precompiled *p, const char *s, size_t len, rg_chgvec *ch,
				 bool *modified)
{
	utf8proc_int32_t state = 0;
	const char *rep;
	size_t rep_len;
	rg_status st;

	*modified = false;
	for (size_t g = 0; g < len;) {
		/* the extended grapheme cluster s[g..e), as rg_precompiled_apply walks it */
		size_t e = g + rg_utf8_len_valid((unsigned char)s[g]);
		uint32_t prev = rg_utf8_get_valid((const unsigned char *)s + g);
		while (e < len) {
			uint32_t c = rg_utf8_get_valid((const unsigned char *)s + e);
			if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev,
							     (utf8proc_int32_t)c, &state))
				break;
			prev = c;
			e += rg_utf8_len_valid((unsigned char)s[e]);
		}
		if (e - g < 6 && lookup(p, s + g, e - g, &rep, &rep_len)) {
			*modified = true;
			if ((st = change_replace(ch, s + g, e - g, rep, rep_len)) != RG_OK)
				return st;
		} else {
			for (size_t i = g; i < e;) {
				size_t k = rg_utf8_len_valid((unsigned char)s[i]);
				if (lookup(p, s + i, k, &rep, &rep_len)) {
					*modified = true;
					st = change_replace(ch, s + i, k, rep, rep_len);
				} else {
					st = rg_chgvec_push(ch, rg_utf8_get_valid((const unsigned char *)s + i),
							    0);
				}
				if (st != RG_OK)
					return st;
				i += k;
			}
		}
		g = e;
	}
	return RG_OK;
}
