/* Unigram language-model tokenizer (Kudo 2018, "Subword Regularization"; SentencePiece), with the
 * semantics of HF `tokenizers` models/unigram (model.rs encode_optimized):
 *   Viterbi over byte positions at char boundaries: every vocabulary piece that starts at a
 *   position extends the best path to its end by its score; a char with no single-char piece
 *   gets an unknown node of score min(score) - 10 (K_UNK_PENALTY); ties keep the first path found
 *   (strictly greater replaces). Back-tracing, consecutive unknown nodes are fused into one piece,
 *   whose id is the vocabulary id of the fused text if it has one, else unk_id.
 * byte_fallback true and a null unk_id are refused at load. No cache: encode reads the model
 * only. Scores are read from their JSON text as serde_json (HF's parser, without its
 * float_roundtrip feature) reads them, which is not always the correctly rounded strtod value:
 * equal-score segmentations (runs of one char) are decided by those last bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "core/vec.h"
#include "tokenizer/tok_internal.h"

#define UNK_PENALTY 10.0

/* serde_json's f64 parse (de.rs parse_integer / parse_decimal / parse_exponent / f64_from_parts):
 * the decimal significand as a u64 (digits past its range are dropped and, before the point,
 * counted in the exponent), converted to double, then ONE multiplication or division by an exact
 * power of ten (two roundings). lit is a JSON number json-c has validated. */
static double serde_f64(const char *lit)
{
	const char *p = lit;
	bool neg = *p == '-';
	uint64_t sig = 0;
	int64_t exp10 = 0;
	bool overflow = false;
	p += neg;
	for (; *p >= '0' && *p <= '9'; p++) {
		uint64_t d = (uint64_t)(*p - '0');
		if (overflow || sig > (UINT64_MAX - d) / 10) {
			overflow = true;
			exp10++;
		} else {
			sig = sig * 10 + d;
		}
	}
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++) {
			uint64_t d = (uint64_t)(*p - '0');
			if (overflow || sig > (UINT64_MAX - d) / 10) {
				overflow = true;
			} else {
				sig = sig * 10 + d;
				exp10--;
			}
		}
	if (*p == 'e' || *p == 'E') {
		p++;
		bool eneg = *p == '-';
		p += *p == '-' || *p == '+';
		int64_t e = 0;
		for (; *p >= '0' && *p <= '9'; p++)
			e = e < 100000 ? e * 10 + (*p - '0') : e;
		exp10 += eneg ? -e : e;
	}
	double f = (double)sig;
	for (;;) {
		int64_t a = exp10 < 0 ? -exp10 : exp10;
		if (a <= 308) {
			double pw = 1.0;
			for (int64_t i = 0; i < a; i++) /* exact: 10^a for a <= 22, then as Rust's table */
				pw *= 10.0;
			if (a > 22)
				pw = strtod((char[8]){ '1', 'e', (char)('0' + a / 100), (char)('0' + a / 10 % 10),
						      (char)('0' + a % 10), 0 },
					    NULL);
			f = exp10 >= 0 ? f * pw : f / pw;
			break;
		}
		if (f == 0.0 || exp10 > 0)
			break; /* serde: 0, or an overflow error (json-c took it as inf) */
		f /= 1e308;
		exp10 += 308;
	}
	return neg ? -f : f;
}

struct rg_unigram {
	rg_strmap pieces; /* piece -> id (the last of duplicates, as HF) */
	double *scores;	  /* (n_pieces) */
	size_t n_pieces;
	double unk_score; /* min score - UNK_PENALTY */
	int32_t unk_id;
};

void rg_unigram_free(rg_unigram *u)
{
	if (!u)
		return;
	rg_strmap_free(&u->pieces);
	free(u->scores);
	free(u);
}

void rg_uni_scratch_free(rg_uni_scratch *s)
{
	free(s->best);
	free(s->ends);
	memset(s, 0, sizeof(*s));
}

int32_t rg_unigram_max_id(const rg_unigram *u)
{
	return (int32_t)u->n_pieces - 1;
}

const rg_strmap *rg_unigram_pieces(const rg_unigram *u)
{
	return &u->pieces;
}

rg_status rg_unigram_load(json_object *model, const char *path, rg_unigram **out)
{
	rg_status st;
	rg_unigram *u = calloc(1, sizeof(*u));
	*out = NULL;
	if (!u)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (Unigram)", path);
	bool byte_fallback;
	if ((st = rg_tok_jbool(model, "byte_fallback", false, &byte_fallback, path)) != RG_OK)
		goto fail;
	if (byte_fallback) {
		st = rg_errorf(RG_ERR_UNSUPPORTED, "%s: Unigram byte_fallback true is not supported",
			       path);
		goto fail;
	}
	json_object *vocab = rg_tok_jget(model, "vocab");
	if (!vocab || !json_object_is_type(vocab, json_type_array)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: Unigram model needs \"vocab\" (array)", path);
		goto fail;
	}
	u->n_pieces = json_object_array_length(vocab);
	if (u->n_pieces == 0 || u->n_pieces > INT32_MAX) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: Unigram vocab is empty or too large", path);
		goto fail;
	}
	if (!(u->scores = malloc(u->n_pieces * sizeof(*u->scores)))) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (Unigram)", path);
		goto fail;
	}
	double min_score = INFINITY;
	for (size_t i = 0; i < u->n_pieces; i++) {
		json_object *e = json_object_array_get_idx(vocab, i);
		json_object *p = json_object_is_type(e, json_type_array) &&
						 json_object_array_length(e) == 2
					 ? json_object_array_get_idx(e, 0)
					 : NULL;
		json_object *s = p ? json_object_array_get_idx(e, 1) : NULL;
		if (!p || !json_object_is_type(p, json_type_string) ||
		    !(json_object_is_type(s, json_type_double) ||
		      json_object_is_type(s, json_type_int))) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "%s: Unigram vocab[%zu] is not a [piece, score] pair", path, i);
			goto fail;
		}
		u->scores[i] = serde_f64(json_object_get_string(s));
		if (u->scores[i] < min_score)
			min_score = u->scores[i];
		if ((st = rg_strmap_put(&u->pieces, json_object_get_string(p),
					(size_t)json_object_get_string_len(p), (int32_t)i)) != RG_OK)
			goto fail;
	}
	u->unk_score = min_score - UNK_PENALTY;
	json_object *unk = rg_tok_jget(model, "unk_id");
	if (rg_tok_jnull(unk)) {
		st = rg_errorf(RG_ERR_UNSUPPORTED, "%s: Unigram unk_id null is not supported", path);
		goto fail;
	}
	if (!json_object_is_type(unk, json_type_int) || json_object_get_int64(unk) < 0 ||
	    (uint64_t)json_object_get_int64(unk) >= u->n_pieces) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: Unigram unk_id is not an id of the vocabulary",
			       path);
		goto fail;
	}
	u->unk_id = (int32_t)json_object_get_int64(unk);
	*out = u;
	return RG_OK;
fail:
	rg_unigram_free(u);
	return st;
}

/* Push the id of the fused unknown text w[a..b). */
static rg_status push_unk(const rg_unigram *u, const char *w, uint32_t a, uint32_t b,
			  rg_idvec *ids)
{
	int32_t id = rg_strmap_get(&u->pieces, w + a, b - a);
	return rg_idvec_push_len(ids, id >= 0 ? id : u->unk_id, b - a);
}

rg_status rg_unigram_encode(const rg_unigram *u, const char *w, size_t n, rg_uni_scratch *sc,
			    rg_idvec *ids)
{
	rg_status st;
	if (n == 0)
		return RG_OK;
	if (n >= UINT32_MAX / 2)
		return rg_errorf(RG_ERR_TOO_LONG, "tokenizer: word of %zu bytes", n);
	if (!rg_vec_reserve((void **)&sc->best, &sc->cap_best, n + 1, sizeof(*sc->best), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (Unigram)");
	rg_uni_node *best = sc->best;
	for (size_t i = 0; i <= n; i++)
		best[i] = (rg_uni_node){ 0.0, 0, -1 };

	size_t max_len = u->pieces.max_len;
	for (size_t at = 0; at < n;) {
		double base = best[at].score;
		size_t mblen = rg_utf8_len_valid((unsigned char)w[at]);
		bool single = false;
		for (size_t end = at + mblen; end <= n && end - at <= max_len;) {
			int32_t id = rg_strmap_get(&u->pieces, w + at, end - at);
			if (id >= 0) {
				double cand = u->scores[id] + base;
				if (best[end].start < 0 || cand > best[end].score)
					best[end] = (rg_uni_node){ cand, id, (int32_t)at };
				single |= end - at == mblen;
			}
			if (end == n)
				break;
			end += rg_utf8_len_valid((unsigned char)w[end]);
		}
		if (!single) {
			double cand = u->unk_score + base;
			if (best[at + mblen].start < 0 || cand > best[at + mblen].score)
				best[at + mblen] = (rg_uni_node){ cand, u->unk_id, (int32_t)at };
		}
		at += mblen;
	}

	/* back-trace: piece ends, last first */
	size_t k = 0;
	for (size_t end = n; end > 0; end = (size_t)best[end].start) {
		if (!rg_vec_reserve((void **)&sc->ends, &sc->cap_ends, k + 1, sizeof(*sc->ends), 64))
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (Unigram)");
		sc->ends[k++] = (uint32_t)end;
	}
	/* forward, fusing runs of unknown nodes */
	uint32_t unk_from = UINT32_MAX, prev = 0;
	for (size_t i = k; i-- > 0;) {
		uint32_t end = sc->ends[i];
		int32_t id = best[end].id;
		if (id == u->unk_id) {
			if (unk_from == UINT32_MAX)
				unk_from = prev;
		} else {
			if (unk_from != UINT32_MAX &&
			    (st = push_unk(u, w, unk_from, prev, ids)) != RG_OK)
				return st;
			unk_from = UINT32_MAX;
			if ((st = rg_idvec_push_len(ids, id, end - prev)) != RG_OK)
				return st;
		}
		prev = end;
	}
	if (unk_from != UINT32_MAX)
		return push_unk(u, w, unk_from, prev, ids);
	return RG_OK;
}
