/* The tokenizer.json "pre_tokenizer": a flat list of steps (Sequence flattened); each step splits
 * every piece the previous one produced, with HF `tokenizers` semantics (pre_tokenizers/<name>.rs):
 *   BertPreTokenizer  split on whitespace (removed) and punctuation (isolated)
 *   WhitespaceSplit   split on whitespace (removed)
 *   ByteLevel         (Radford et al. 2019, GPT-2) prepend ' ' when add_prefix_space and the piece
 *                     does not start with one; split by the GPT-2 regex
 *                     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *                     (matched by hand below, classes as HF's Oniguruma sees them) when use_regex;
 *                     then map every byte to its printable stand-in (GPT-2's bytes_to_unicode)
 *   Metaspace         ' ' -> replacement (default U+2581); prepend it per prepend_scheme (always;
 *                     first: only to the piece at offset 0 of the text; never) unless the piece
 *                     starts with it; split before every replacement char when split is true
 *   Digits            isolate every \p{N} char (individual_digits) or every run of them
 *   Split             a known regex (pretok_llama.c: Llama 3's, Qwen2's), behavior Isolated,
 *                     invert false: every match a piece
 * Empty pieces are dropped, as HF does. Each depth writes its output into its own scratch buffer,
 * so the pieces a step hands down stay valid while deeper steps run. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "core/vec.h"
#include "tokenizer/tok_internal.h"

typedef enum rg_pretok_kind {
	RG_PRETOK_BERT,
	RG_PRETOK_WHITESPACE_SPLIT,
	RG_PRETOK_BYTE_LEVEL,
	RG_PRETOK_METASPACE,
	RG_PRETOK_DIGITS,
	RG_PRETOK_SPLIT,
} rg_pretok_kind;

typedef enum rg_prepend {
	RG_PREPEND_ALWAYS,
	RG_PREPEND_FIRST,
	RG_PREPEND_NEVER,
} rg_prepend;

typedef struct rg_pretok_step {
	rg_pretok_kind kind;
	bool add_prefix_space, use_regex; /* BYTE_LEVEL */
	uint32_t rep;			  /* METASPACE replacement char */
	char rep_utf8[4];
	size_t rep_len;
	rg_prepend prepend;
	bool split;
	bool individual; /* DIGITS */
	int regex;	 /* SPLIT: RG_SPLIT_* */
} rg_pretok_step;

struct rg_pretok {
	rg_pretok_step steps[RG_PRETOK_MAX_DEPTH];
	size_t n_steps;
	char byte_map[256][3]; /* ByteLevel: each byte's stand-in as UTF-8 (1-2 bytes), NUL-ended */
};

void rg_pretok_scratch_free(rg_pretok_scratch *s)
{
	for (int i = 0; i < RG_PRETOK_MAX_DEPTH; i++) {
		rg_buf_free(&s->lvl[i]);
		rg_buf_free(&s->aux[i]);
		rg_spanvec_free(&s->lal[i]);
		rg_spanvec_free(&s->aal[i]);
	}
}

void rg_pretok_free(rg_pretok *p)
{
	free(p);
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others (controls,
 * space, 0x7F-0xA0, 0xAD) map to U+0100 + n in byte order. */
void rg_byte_level_map(char map[256][3])
{
	uint32_t n = 0;
	for (int b = 0; b < 256; b++) {
		bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		uint32_t cp = self ? (uint32_t)b : 256 + n++;
		size_t k = rg_utf8_put(cp, map[b]);
		map[b][k] = '\0';
	}
}

static rg_status load_step(rg_pretok *p, json_object *j, const char *path, int depth)
{
	const char *ty = rg_tok_jtype(j);
	rg_status st;

	if (!ty)
		return rg_errorf(RG_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", path);
	if (strcmp(ty, "Sequence") == 0) {
		json_object *arr = rg_tok_jget(j, "pretokenizers");
		if (!arr || !json_object_is_type(arr, json_type_array))
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: Sequence pre_tokenizer needs \"pretokenizers\"", path);
		if (depth > 4)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: pre_tokenizer Sequence nested too deep", path);
		for (size_t i = 0; i < json_object_array_length(arr); i++)
			if ((st = load_step(p, json_object_array_get_idx(arr, i), path, depth + 1)) !=
			    RG_OK)
				return st;
		return RG_OK;
	}
	if (p->n_steps == RG_PRETOK_MAX_DEPTH)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: more than %d pre_tokenizers", path,
				 RG_PRETOK_MAX_DEPTH);
	rg_pretok_step *s = &p->steps[p->n_steps];
	memset(s, 0, sizeof(*s));
	if (strcmp(ty, "BertPreTokenizer") == 0) {
		s->kind = RG_PRETOK_BERT;
	} else if (strcmp(ty, "WhitespaceSplit") == 0) {
		s->kind = RG_PRETOK_WHITESPACE_SPLIT;
	} else if (strcmp(ty, "ByteLevel") == 0) {
		s->kind = RG_PRETOK_BYTE_LEVEL;
		if ((st = rg_tok_jbool(j, "add_prefix_space", true, &s->add_prefix_space, path)) !=
			    RG_OK ||
		    (st = rg_tok_jbool(j, "use_regex", true, &s->use_regex, path)) != RG_OK)
			return st;
	} else if (strcmp(ty, "Metaspace") == 0) {
		s->kind = RG_PRETOK_METASPACE;
		json_object *rep = rg_tok_jget(j, "replacement");
		const char *r = rep && json_object_is_type(rep, json_type_string)
					? json_object_get_string(rep)
					: NULL;
		size_t rl = r ? strlen(r) : 0;
		if (!r || !rl || rg_utf8_next(r, rl, 0, &s->rep) != rl)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: Metaspace \"replacement\" must be one character", path);
		memcpy(s->rep_utf8, r, rl);
		s->rep_len = rl;
		json_object *ps = rg_tok_jget(j, "prepend_scheme");
		const char *scheme = ps && json_object_is_type(ps, json_type_string)
					     ? json_object_get_string(ps)
					     : NULL;
		if (!rg_tok_jnull(ps) && !scheme)
			return rg_errorf(RG_ERR_FORMAT, "%s: Metaspace \"prepend_scheme\" must be a string",
					 path);
		if (!scheme || strcmp(scheme, "always") == 0)
			s->prepend = RG_PREPEND_ALWAYS;
		else if (strcmp(scheme, "first") == 0)
			s->prepend = RG_PREPEND_FIRST;
		else if (strcmp(scheme, "never") == 0)
			s->prepend = RG_PREPEND_NEVER;
		else
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: Metaspace prepend_scheme \"%s\" is not supported", path,
					 scheme);
		/* tokenizers < 0.15 wrote add_prefix_space; false means "never" (HF refuses a false
		 * beside another declared scheme) */
		bool aps;
		if ((st = rg_tok_jbool(j, "add_prefix_space", true, &aps, path)) != RG_OK)
			return st;
		if (!aps) {
			if (scheme && s->prepend != RG_PREPEND_NEVER)
				return rg_errorf(RG_ERR_FORMAT,
						 "%s: Metaspace add_prefix_space false does not "
						 "match prepend_scheme \"%s\"",
						 path, scheme);
			s->prepend = RG_PREPEND_NEVER;
		}
		if ((st = rg_tok_jbool(j, "split", true, &s->split, path)) != RG_OK)
			return st;
	} else if (strcmp(ty, "Digits") == 0) {
		s->kind = RG_PRETOK_DIGITS;
		if ((st = rg_tok_jbool(j, "individual_digits", false, &s->individual, path)) != RG_OK)
			return st;
	} else if (strcmp(ty, "Split") == 0) {
		s->kind = RG_PRETOK_SPLIT;
		json_object *pat = rg_tok_jget(j, "pattern"), *re = rg_tok_jget(pat, "Regex");
		json_object *beh = rg_tok_jget(j, "behavior");
		bool invert;
		if ((st = rg_tok_jbool(j, "invert", false, &invert, path)) != RG_OK)
			return st;
		if (!re || !json_object_is_type(re, json_type_string) ||
		    (s->regex = rg_split_regex_lookup(json_object_get_string(re))) < 0)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: Split pre_tokenizer pattern %s is not supported (only "
					 "Llama 3's and Qwen2's regex)",
					 path, pat ? json_object_to_json_string(pat) : "(none)");
		if (invert || !beh || !json_object_is_type(beh, json_type_string) ||
		    strcmp(json_object_get_string(beh), "Isolated") != 0)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: Split pre_tokenizer behavior %s%s is not supported "
					 "(only Isolated, not inverted)",
					 path, beh ? json_object_to_json_string(beh) : "(none)",
					 invert ? " inverted" : "");
	} else {
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: pre_tokenizer type \"%s\" is not supported (BertPreTokenizer, "
				 "ByteLevel, Metaspace, WhitespaceSplit, Digits, Split, Sequence)",
				 path, ty);
	}
	p->n_steps++;
	return RG_OK;
}

rg_status rg_pretok_load(json_object *j, const char *path, rg_pretok **out)
{
	rg_status st;
	*out = NULL;
	if (rg_tok_jnull(j))
		return RG_OK;
	rg_pretok *p = calloc(1, sizeof(*p));
	if (!p)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (pre_tokenizer)", path);
	rg_byte_level_map(p->byte_map);
	if ((st = load_step(p, j, path, 0)) != RG_OK) {
		rg_pretok_free(p);
		return st;
	}
	*out = p;
	return RG_OK;
}

/* ---- the GPT-2 regex ---- */

enum { CLS_LETTER, CLS_NUMBER, CLS_SPACE, CLS_OTHER };

static int char_class(uint32_t c)
{
	if (rg_hf_is_letter(c))
		return CLS_LETTER;
	if (rg_hf_is_number(c))
		return CLS_NUMBER;
	if (rg_bert_is_whitespace(c))
		return CLS_SPACE;
	return CLS_OTHER;
}

static int class_at(const char *s, size_t i)
{
	return char_class(rg_utf8_get_valid((const unsigned char *)s + i));
}

static size_t next_char(const char *s, size_t i)
{
	return i + rg_utf8_len_valid((unsigned char)s[i]);
}

/* End of the run of chars of class cls from i. */
static size_t run_end(const char *s, size_t n, size_t i, int cls)
{
	while (i < n && class_at(s, i) == cls)
		i = next_char(s, i);
	return i;
}

/* End of the regex match that starts at i < n (every position matches one alternative). */
static size_t gpt2_match(const char *s, size_t n, size_t i)
{
	if (s[i] == '\'' && i + 1 < n) {
		/* 's|'t|'re|'ve|'m|'ll|'d */
		char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
		if (a == 's' || a == 't' || a == 'm' || a == 'd')
			return i + 2;
		if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
			return i + 3;
	}
	/* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': the optional space, then a run of the class
	 * of the char after it */
	if (s[i] == ' ' && i + 1 < n && class_at(s, i + 1) != CLS_SPACE)
		return run_end(s, n, i + 1, class_at(s, i + 1));
	if (class_at(s, i) != CLS_SPACE)
		return run_end(s, n, i, class_at(s, i));
	/* '\s+(?!\S)': the whitespace run, less its last char when a non-space follows;
	 * else '\s+' */
	size_t e = run_end(s, n, i, CLS_SPACE);
	if (e == n)
		return e;
	size_t last = e - 1;
	while (((unsigned char)s[last] & 0xC0) == 0x80)
		last--;
	return last > i ? last : e;
}

/* ---- application ---- */

static rg_status run(const rg_pretok *p, size_t lvl, const char *s, size_t n, bool at_start,
		     const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx);

/* The spans of s[from..) when spans are carried (al != NULL), else NULL. */
static const rg_span *at(const rg_span *al, size_t from)
{
	return al ? al + from : NULL;
}

/* Split s[0..n) on whitespace (removed) and, when punct, on punctuation (isolated). */
static rg_status split_chars(const rg_pretok *p, size_t lvl, const char *s, size_t n,
			     bool at_start, bool punct, const rg_span *al, rg_pretok_scratch *sc,
			     rg_word_fn emit, void *ctx)
{
	rg_status st;
	size_t ws = 0;
	for (size_t i = 0; i < n;) {
		size_t k = rg_utf8_len_valid((unsigned char)s[i]);
		uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + i);
		bool white = rg_bert_is_whitespace(cp);
		if (white || (punct && rg_bert_is_punct(cp))) {
			if ((st = run(p, lvl + 1, s + ws, i - ws, at_start && ws == 0, at(al, ws), sc,
				      emit, ctx)) != RG_OK)
				return st;
			if (!white && (st = run(p, lvl + 1, s + i, k, at_start && i == 0, at(al, i), sc,
						emit, ctx)) != RG_OK)
				return st;
			ws = i + k;
		}
		i += k;
	}
	return run(p, lvl + 1, s + ws, n - ws, at_start && ws == 0, at(al, ws), sc, emit, ctx);
}

/* Append k copies of span sp to v (aligned mode). */
static rg_status put_spans(rg_spanvec *v, rg_span sp, size_t k)
{
	rg_status st;

	if ((st = rg_spanvec_reserve(v, v->n + k)) != RG_OK)
		return st;
	for (size_t j = 0; j < k; j++)
		v->v[v->n++] = sp;
	return RG_OK;
}

/* Spans: HF prepends the space with the span of the piece's first char, and every stand-in
 * takes the span of the byte it stands for. */
static rg_status byte_level(const rg_pretok *p, size_t lvl, const char *s, size_t n,
			    bool at_start, const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit,
			    void *ctx)
{
	const rg_pretok_step *stp = &p->steps[lvl];
	rg_buf *aux = &sc->aux[lvl], *out = &sc->lvl[lvl];
	rg_spanvec *aal = &sc->aal[lvl], *oal = &sc->lal[lvl];
	rg_status st;
	if (stp->add_prefix_space && (n == 0 || s[0] != ' ')) {
		aux->len = 0;
		rg_buf_put(aux, " ", 1);
		rg_buf_put(aux, s, n);
		if (aux->oom)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		if (al) {
			aal->n = 0;
			if ((st = put_spans(aal, n ? al[0] : (rg_span){0, 0}, 1)) != RG_OK ||
			    (st = rg_spanvec_reserve(aal, n + 1)) != RG_OK)
				return st;
			memcpy(aal->v + 1, al, n * sizeof(*al));
			aal->n = n + 1;
			al = aal->v;
		}
		s = aux->data;
		n = aux->len;
	}
	for (size_t i = 0; i < n;) {
		size_t e = stp->use_regex ? gpt2_match(s, n, i) : n;
		out->len = 0;
		oal->n = 0;
		if (!rg_buf_reserve(out, 2 * (e - i)) ||
		    (al && rg_spanvec_reserve(oal, 2 * (e - i)) != RG_OK))
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		for (size_t k = i; k < e; k++) {
			const char *m = p->byte_map[(unsigned char)s[k]];
			out->data[out->len++] = m[0];
			if (m[1])
				out->data[out->len++] = m[1];
			for (size_t j = 0; al && j < (m[1] ? 2u : 1u); j++)
				oal->v[oal->n++] = al[k];
		}
		if ((st = run(p, lvl + 1, out->data, out->len, at_start && i == 0, al ? oal->v : NULL,
			      sc, emit, ctx)) != RG_OK)
			return st;
		i = e;
	}
	return RG_OK;
}

/* Spans: HF's replace gives the replacement the span of the space, prepend the span of the
 * piece's first char. */
static rg_status metaspace(const rg_pretok *p, size_t lvl, const char *s, size_t n, bool at_start,
			   const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx)
{
	const rg_pretok_step *stp = &p->steps[lvl];
	rg_buf *aux = &sc->aux[lvl], *out = &sc->lvl[lvl];
	rg_spanvec *aal = &sc->aal[lvl], *oal = &sc->lal[lvl];
	rg_status st;
	aux->len = 0;
	aal->n = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ')
			rg_buf_put(aux, stp->rep_utf8, stp->rep_len);
		else
			rg_buf_put(aux, s + i, 1);
		if (al && (st = put_spans(aal, al[i], s[i] == ' ' ? stp->rep_len : 1)) != RG_OK)
			return st;
	}
	bool starts = aux->len >= stp->rep_len &&
		      memcmp(aux->data, stp->rep_utf8, stp->rep_len) == 0;
	out->len = 0;
	oal->n = 0;
	if (!starts &&
	    (stp->prepend == RG_PREPEND_ALWAYS || (stp->prepend == RG_PREPEND_FIRST && at_start))) {
		rg_buf_put(out, stp->rep_utf8, stp->rep_len);
		if (al && (st = put_spans(oal, n ? al[0] : (rg_span){0, 0}, stp->rep_len)) != RG_OK)
			return st;
	}
	rg_buf_put(out, aux->data, aux->len);
	if (aux->oom || out->oom)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	if (al) {
		if ((st = rg_spanvec_reserve(oal, oal->n + aal->n)) != RG_OK)
			return st;
		memcpy(oal->v + oal->n, aal->v, aal->n * sizeof(*aal->v));
		oal->n += aal->n;
	}
	const char *t = out->data;
	const rg_span *tal = al ? oal->v : NULL;
	size_t m = out->len;
	if (!stp->split)
		return run(p, lvl + 1, t, m, at_start, tal, sc, emit, ctx);
	/* MergedWithNext: a piece ends before every replacement char */
	size_t ps = 0;
	for (size_t i = 0; i < m;) {
		if (i > ps && m - i >= stp->rep_len && memcmp(t + i, stp->rep_utf8, stp->rep_len) == 0) {
			if ((st = run(p, lvl + 1, t + ps, i - ps, at_start && ps == 0, at(tal, ps), sc,
				      emit, ctx)) != RG_OK)
				return st;
			ps = i;
		}
		i = next_char(t, i);
	}
	return run(p, lvl + 1, t + ps, m - ps, at_start && ps == 0, at(tal, ps), sc, emit, ctx);
}

/* HF's Digits splits on Rust's char::is_numeric (Unicode 16 in the tokenizers build the tests
 * use): Oniguruma's \p{N} plus the Unicode 16 digits it does not know yet (found by comparing
 * every code point, tests/py/test_tokenizer_decoder_bpe.py). */
static bool rust_is_numeric(uint32_t c)
{
	return rg_hf_is_number(c) || (c >= 0x11DE0 && c <= 0x11DE9) || (c >= 0x16FF4 && c <= 0x16FF6);
}

/* End of the run of numeric chars from i. */
static size_t numeric_end(const char *s, size_t n, size_t i)
{
	while (i < n && rust_is_numeric(rg_utf8_get_valid((const unsigned char *)s + i)))
		i = next_char(s, i);
	return i;
}

/* Digits: every numeric char (individual) or run of them isolated; the rest between them. */
static rg_status digits(const rg_pretok *p, size_t lvl, const char *s, size_t n, bool at_start,
			const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx)
{
	rg_status st;
	size_t ps = 0;
	for (size_t i = 0; i < n;) {
		size_t e = next_char(s, i);
		if (rust_is_numeric(rg_utf8_get_valid((const unsigned char *)s + i))) {
			if (!p->steps[lvl].individual)
				e = numeric_end(s, n, i);
			if ((st = run(p, lvl + 1, s + ps, i - ps, at_start && ps == 0, at(al, ps), sc,
				      emit, ctx)) != RG_OK ||
			    (st = run(p, lvl + 1, s + i, e - i, at_start && i == 0, at(al, i), sc, emit,
				      ctx)) != RG_OK)
				return st;
			ps = e;
		}
		i = e;
	}
	return run(p, lvl + 1, s + ps, n - ps, at_start && ps == 0, at(al, ps), sc, emit, ctx);
}

/* Split (Isolated): the regex matches tile the piece. */
static rg_status split_regex(const rg_pretok *p, size_t lvl, const char *s, size_t n,
			     bool at_start, const rg_span *al, rg_pretok_scratch *sc,
			     rg_word_fn emit, void *ctx)
{
	rg_status st;
	for (size_t i = 0; i < n;) {
		size_t e = rg_split_regex_match(p->steps[lvl].regex, s, n, i);
		if ((st = run(p, lvl + 1, s + i, e - i, at_start && i == 0, at(al, i), sc, emit,
			      ctx)) != RG_OK)
			return st;
		i = e;
	}
	return RG_OK;
}

static rg_status run(const rg_pretok *p, size_t lvl, const char *s, size_t n, bool at_start,
		     const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx)
{
	if (n == 0)
		return RG_OK;
	if (lvl == p->n_steps)
		return emit(ctx, s, n, al);
	switch (p->steps[lvl].kind) {
	case RG_PRETOK_BERT:
		return split_chars(p, lvl, s, n, at_start, true, al, sc, emit, ctx);
	case RG_PRETOK_WHITESPACE_SPLIT:
		return split_chars(p, lvl, s, n, at_start, false, al, sc, emit, ctx);
	case RG_PRETOK_BYTE_LEVEL:
		return byte_level(p, lvl, s, n, at_start, al, sc, emit, ctx);
	case RG_PRETOK_METASPACE:
		return metaspace(p, lvl, s, n, at_start, al, sc, emit, ctx);
	case RG_PRETOK_DIGITS:
		return digits(p, lvl, s, n, at_start, al, sc, emit, ctx);
	case RG_PRETOK_SPLIT:
		return split_regex(p, lvl, s, n, at_start, al, sc, emit, ctx);
	}
	return RG_OK;
}

bool rg_pretok_prepends_first(const rg_pretok *p)
{
	for (size_t i = 0; p && i < p->n_steps; i++)
		if (p->steps[i].kind == RG_PRETOK_METASPACE && p->steps[i].prepend == RG_PREPEND_FIRST)
			return true;
	return false;
}

rg_status rg_pretok_apply(const rg_pretok *p, const char *s, size_t len, bool at_start,
			  const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx)
{
	if (!p)
		return len ? emit(ctx, s, len, al) : RG_OK;
	return run(p, 0, s, len, at_start, al, sc, emit, ctx);
}
