/* Tokenizer loading (tokenizer.json, or vocab.txt + tokenizer_config.json) and encoding, with the
 * semantics of HF `tokenizers` (Rust); this file holds the pipeline, added tokens, the
 * post-processor and WordPiece, and dispatches to the other components (tok_internal.h):
 *   1. added tokens with normalized=false are split out of the raw text (leftmost-longest);
 *   2. each remaining piece goes through the normalizer (normalizers.c), then added tokens with
 *      normalized=true are split out of the normalized text;
 *   3. the pre-tokenizer splits each piece into words (pretokenizers.c);
 *   4. the model turns each word into ids: WordPiece (Schuster & Nakajima 2012; Wu et al. 2016
 *      GNMT sec. 4.1 as implemented by BERT: greedy longest-match-first, continuation pieces
 *      prefixed by "##"; a word of more than max_input_chars_per_word chars, or any piece without
 *      a match, becomes the single [UNK]), BPE (bpe.c) or Unigram (unigram.c);
 *   5. the post-processor adds its ids around them ([CLS] ... [SEP], <s> ... </s>).
 * The tokenizer is read-only after load, so concurrent rg_tokenizer_encode calls are safe; every
 * call uses its own scratch buffers.
 */
#include "tokenizer/tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/marian.h"
#include "tokenizer/tok_internal.h"

/* tokenizer.json of the large multilingual vocabularies is 17-30 MB; refuse absurd files */
#define RG_TOK_MAX_FILE ((off_t)512 << 20)

/* ---- tokenizer ----------------------------------------------------------------------------- */

typedef struct rg_added_token {
	char *content; /* UTF-8; normalized tokens hold their normalized form */
	size_t len;
	char *text;    /* the content as written in the file (what decoding gives back) */
	int32_t id;
	bool normalized, lstrip, rstrip, single_word;
	bool special;  /* HF special: in the special-tokens mask, skipped by decode when asked */
} rg_added_token;

/* The tokenizer.json "decoder" (HF decoders/), a flat list of steps (Sequence flattened), each
 * Vec<String> -> Vec<String>; the strings are then concatenated. */
typedef enum rg_dec_kind {
	RG_DEC_WORDPIECE,     /* prefix, cleanup */
	RG_DEC_BYTE_LEVEL,    /* stand-ins back to bytes, then lossy UTF-8 */
	RG_DEC_METASPACE,     /* replacement -> ' ', dropped in the first token unless "never" */
	RG_DEC_BPE,           /* suffix -> ' ' (the last token: "") */
	RG_DEC_REPLACE,       /* String pattern -> content */
	RG_DEC_BYTE_FALLBACK, /* <0xHH> tokens -> bytes */
	RG_DEC_FUSE,          /* join */
	RG_DEC_STRIP,         /* content char, start / stop counts */
} rg_dec_kind;

typedef struct rg_dec_step {
	rg_dec_kind kind;
	char *a, *b;        /* WORDPIECE: prefix; BPE: suffix; REPLACE: pattern, content */
	bool cleanup;       /* WORDPIECE */
	uint32_t rep;       /* METASPACE: replacement; STRIP: content */
	bool prepend_never; /* METASPACE */
	int start, stop;    /* STRIP */
} rg_dec_step;

#define RG_DEC_MAX_STEPS 16

typedef enum rg_tok_model {
	RG_TOK_WORDPIECE,
	RG_TOK_BPE,
	RG_TOK_UNIGRAM,
} rg_tok_model;

struct rg_tokenizer {
	rg_tok_model model;
	/* MarianMT's source.spm / target.spm / vocab.json (marian.h): when set, every call below
	 * hands the text to it and none of the other fields is used */
	rg_marian_tok *marian;
	/* WordPiece */
	rg_strmap words; /* full vocab */
	rg_strmap cont;	 /* vocab entries that start with the prefix, prefix removed */
	char prefix[64];
	int32_t unk_id;
	int max_chars; /* max_input_chars_per_word */
	rg_bpe *bpe;	 /* BPE */
	rg_unigram *uni; /* Unigram */
	rg_normalizer *nz; /* NULL: identity */
	rg_pretok *pt;	   /* NULL: one word per piece */
	rg_added_token *added;
	size_t n_added;
	bool has_raw_added, has_norm_added;
	int32_t pre_ids[4], post_ids[4];
	int n_pre, n_post;
	/* the pair template: items in order; id >= 0 a special token, RG_TOK_SEQ_A / _B a
	 * sequence; type: its token type id. n_pair == 0: A then B, types 0 and 1 (no
	 * post-processor). */
	struct {
		int32_t id;
		int type;
	} pair[12];
	int n_pair;
	bool no_pair; /* TemplateProcessing with an empty or absent "pair": pairs are refused */
	int32_t max_id;
	/* offsets: ByteLevel / RobertaProcessing trim_offsets, and its add_prefix_space */
	bool trim_offsets, trim_prefix_space;
	/* decoding */
	rg_dec_step dec[RG_DEC_MAX_STEPS];
	int n_dec;
	bool has_decoder;      /* false: tokens joined with ' ' (HF without a decoder) */
	char dec_error[160];   /* non-empty: the decoder is not supported (decode refuses) */
	char byte_map[256][3]; /* ByteLevel stand-ins */
	/* id -> token: (max_id + 1) entries, the added token's text or the model's piece (NULL when
	 * the id has none); special: HF special added tokens */
	const char **id_str;
	uint32_t *id_len;
	uint8_t *id_special;
	size_t n_id; /* entries of the table: max_id + 1, at most 2^24 */
};

#define RG_TOK_SEQ_A (-1)
#define RG_TOK_SEQ_B (-2)

/* Append one pair-template item. */
static rg_status pair_push(rg_tokenizer *t, int32_t id, int type, const char *path)
{
	if (t->n_pair >= (int)(sizeof(t->pair) / sizeof(t->pair[0])))
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: pair template has more than %zu items",
				 path, sizeof(t->pair) / sizeof(t->pair[0]));
	if (type < 0 || type > 15)
		return rg_errorf(RG_ERR_FORMAT, "%s: pair template type_id %d out of [0, 15]",
				 path, type);
	t->pair[t->n_pair].id = id;
	t->pair[t->n_pair].type = type;
	t->n_pair++;
	return RG_OK;
}

/* BertProcessing's pair: cls A:0 sep:0 B:1 sep:1. RobertaProcessing's: cls A sep sep B sep, all
 * type 0 (transformers' RobertaTokenizer). */
static rg_status pair_bert_roberta(rg_tokenizer *t, int32_t cls, int32_t sep, bool roberta,
				   const char *path)
{
	rg_status st;
	const int tb = roberta ? 0 : 1;

	if ((st = pair_push(t, cls, 0, path)) != RG_OK ||
	    (st = pair_push(t, RG_TOK_SEQ_A, 0, path)) != RG_OK ||
	    (st = pair_push(t, sep, 0, path)) != RG_OK ||
	    (roberta && (st = pair_push(t, sep, 0, path)) != RG_OK) ||
	    (st = pair_push(t, RG_TOK_SEQ_B, tb, path)) != RG_OK ||
	    (st = pair_push(t, sep, tb, path)) != RG_OK)
		return st;
	return RG_OK;
}

void rg_tokenizer_free(rg_tokenizer *t)
{
	if (!t)
		return;
	rg_marian_tok_free(t->marian);
	rg_strmap_free(&t->words);
	rg_strmap_free(&t->cont);
	rg_bpe_free(t->bpe);
	rg_unigram_free(t->uni);
	rg_normalizer_free(t->nz);
	rg_pretok_free(t->pt);
	for (size_t i = 0; i < t->n_added; i++) {
		free(t->added[i].content);
		free(t->added[i].text);
	}
	free(t->added);
	for (int i = 0; i < t->n_dec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
	}
	free(t->id_str);
	free(t->id_len);
	free(t->id_special);
	free(t);
}

int32_t rg_tokenizer_cls_id(const rg_tokenizer *t)
{
	return t->n_pre ? t->pre_ids[0] : -1; /* Marian: n_pre 0 */
}
int32_t rg_tokenizer_sep_id(const rg_tokenizer *t)
{
	return t->n_post ? t->post_ids[t->n_post - 1] : -1;
}
int32_t rg_tokenizer_vocab_size(const rg_tokenizer *t)
{
	return t->max_id + 1;
}

void rg_tokenizer_template(const rg_tokenizer *t, const int32_t **pre, int *n_pre,
			   const int32_t **post, int *n_post)
{
	*pre = t->pre_ids;
	*n_pre = t->n_pre; /* MarianMT: 0 and 0 (marian.h appends its eos) */
	*post = t->post_ids;
	*n_post = t->n_post;
}

size_t rg_tokenizer_n_added(const rg_tokenizer *t)
{
	return t ? t->n_added : 0;
}

const char *rg_tokenizer_added(const rg_tokenizer *t, size_t i, int32_t *id, bool *special)
{
	if (!t || i >= t->n_added)
		return NULL;
	if (id)
		*id = t->added[i].id;
	if (special)
		*special = t->added[i].special;
	return t->added[i].text;
}

static rg_status vocab_add(rg_tokenizer *t, const char *s, size_t n, int32_t id)
{
	rg_status st = rg_strmap_put(&t->words, s, n, id);
	if (st != RG_OK)
		return st;
	size_t pl = strlen(t->prefix);
	if (n >= pl && memcmp(s, t->prefix, pl) == 0)
		st = rg_strmap_put(&t->cont, s + pl, n - pl, id);
	if (id > t->max_id)
		t->max_id = id;
	return st;
}

static rg_status set_prefix(rg_tokenizer *t, const char *p, const char *where)
{
	if (strlen(p) >= sizeof(t->prefix))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: continuing_subword_prefix longer than %zu bytes", where,
				 sizeof(t->prefix) - 1);
	strcpy(t->prefix, p);
	return RG_OK;
}

static rg_status finish_unk(rg_tokenizer *t, const char *unk, const char *where)
{
	t->unk_id = rg_strmap_get(&t->words, unk, strlen(unk));
	if (t->unk_id < 0)
		return rg_errorf(RG_ERR_FORMAT, "%s: unk_token \"%s\" is not in the vocabulary",
				 where, unk);
	return RG_OK;
}

static rg_status add_added(rg_tokenizer *t, const char *content, int32_t id, bool normalized,
			   bool lstrip, bool rstrip, bool single_word, bool special)
{
	size_t len = strlen(content);
	if (len == 0)
		return RG_OK;
	rg_added_token *na = realloc(t->added, (t->n_added + 1) * sizeof(*na));
	if (!na)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (added tokens)");
	t->added = na;
	rg_added_token *a = &t->added[t->n_added];
	a->content = strdup(content);
	a->text = strdup(content);
	if (!a->content || !a->text) {
		free(a->content);
		free(a->text);
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (added tokens)");
	}
	a->len = len;
	a->id = id;
	a->special = special;
	a->normalized = normalized;
	a->lstrip = lstrip;
	a->rstrip = rstrip;
	a->single_word = single_word;
	t->n_added++;
	if (id > t->max_id)
		t->max_id = id;
	return RG_OK;
}

/* Replace the content of normalized added tokens by their normalized form (as HF matches them). */
static rg_status normalize_added(rg_tokenizer *t)
{
	rg_status st = RG_OK;
	rg_norm_scratch sc = { 0 };
	rg_buf b;
	rg_buf_init(&b);
	for (size_t i = 0; i < t->n_added; i++) {
		rg_added_token *at = &t->added[i];
		if (!at->normalized) {
			t->has_raw_added = true;
			continue;
		}
		if ((st = rg_normalizer_apply(t->nz, at->content, at->len, &b, &sc)) != RG_OK)
			goto out;
		char *s = malloc(b.len + 1);
		if (!s) {
			st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (added tokens)");
			goto out;
		}
		memcpy(s, b.data, b.len);
		s[b.len] = '\0';
		free(at->content);
		at->content = s;
		at->len = b.len;
		if (b.len)
			t->has_norm_added = true;
	}
out:
	rg_buf_free(&b);
	rg_norm_scratch_free(&sc);
	return st;
}

static rg_status template_ids(json_object *special, json_object *item, int32_t *ids, int *n,
			      const char *path)
{
	json_object *st_ = rg_tok_jget(item, "SpecialToken");
	const char *name = st_ ? json_object_get_string(rg_tok_jget(st_, "id")) : NULL;
	json_object *spec = name ? rg_tok_jget(special, name) : NULL;
	json_object *arr = rg_tok_jget(spec, "ids");
	if (!arr || !json_object_is_type(arr, json_type_array))
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: post_processor special token \"%s\" has no ids", path,
				 name ? name : "?");
	for (size_t i = 0; i < json_object_array_length(arr); i++) {
		if (*n >= 4)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: post_processor template adds more than 4 ids", path);
		json_object *v = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(v, json_type_int) || json_object_get_int(v) < 0)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: post_processor special token \"%s\" has "
					 "a bad id",
					 path, name);
		ids[(*n)++] = json_object_get_int(v);
	}
	return RG_OK;
}

/* TemplateProcessing's "pair": special tokens and sequences A and B once each, with type ids. */
static rg_status load_pair_template(rg_tokenizer *t, json_object *pair, json_object *special,
				    const char *path)
{
	bool seen[2] = {false, false};
	rg_status st;

	if (!pair || (json_object_is_type(pair, json_type_array) &&
		      json_object_array_length(pair) == 0)) {
		t->no_pair = true; /* single texts only */
		return RG_OK;
	}
	if (!json_object_is_type(pair, json_type_array))
		return rg_errorf(RG_ERR_FORMAT, "%s: TemplateProcessing \"pair\" must be a list",
				 path);
	for (size_t i = 0; i < json_object_array_length(pair); i++) {
		json_object *item = json_object_array_get_idx(pair, i);
		json_object *seq = rg_tok_jget(item, "Sequence");
		json_object *tok = seq ? seq : rg_tok_jget(item, "SpecialToken");
		json_object *tid = rg_tok_jget(tok, "type_id");
		int type = tid && json_object_is_type(tid, json_type_int) ? json_object_get_int(tid)
									    : 0;
		if (seq) {
			const char *sid = json_object_get_string(rg_tok_jget(seq, "id"));
			int k = sid && !strcmp(sid, "A") ? 0 : sid && !strcmp(sid, "B") ? 1 : -1;

			if (k < 0 || seen[k])
				return rg_errorf(RG_ERR_UNSUPPORTED,
						 "%s: pair template must hold sequences A and B "
						 "once each",
						 path);
			seen[k] = true;
			st = pair_push(t, k ? RG_TOK_SEQ_B : RG_TOK_SEQ_A, type, path);
		} else {
			int32_t ids[4];
			int n = 0;

			st = template_ids(special, item, ids, &n, path);
			for (int j = 0; st == RG_OK && j < n; j++)
				st = pair_push(t, ids[j], type, path);
		}
		if (st != RG_OK)
			return st;
	}
	if (!seen[0] || !seen[1])
		return rg_errorf(RG_ERR_FORMAT, "%s: pair template lacks sequence A or B", path);
	return RG_OK;
}

/* ByteLevel / RobertaProcessing offsets trimming: trim_offsets (default dflt) and add_prefix_space
 * (default true). */
static rg_status trim_options(rg_tokenizer *t, json_object *pp, bool dflt, const char *path)
{
	bool trim, aps;
	rg_status st;

	if ((st = rg_tok_jbool(pp, "trim_offsets", dflt, &trim, path)) != RG_OK ||
	    (st = rg_tok_jbool(pp, "add_prefix_space", true, &aps, path)) != RG_OK)
		return st;
	if (trim) {
		t->trim_offsets = true;
		t->trim_prefix_space = aps;
	}
	return RG_OK;
}

/* post_processor: BertProcessing / RobertaProcessing (cls A sep), TemplateProcessing (its single
 * template), ByteLevel (offsets only: no ids), or a Sequence of them of which at most one adds
 * ids. */
static rg_status load_post_processor(rg_tokenizer *t, json_object *pp, const char *path, int depth)
{
	rg_status st;
	if (rg_tok_jnull(pp))
		return RG_OK;
	const char *ty = rg_tok_jtype(pp);
	if (ty && strcmp(ty, "Sequence") == 0) {
		json_object *arr = rg_tok_jget(pp, "processors");
		if (!arr || !json_object_is_type(arr, json_type_array))
			return rg_errorf(RG_ERR_FORMAT, "%s: Sequence post_processor needs "
							"\"processors\"",
					 path);
		if (depth > 4)
			return rg_errorf(RG_ERR_UNSUPPORTED, "%s: post_processor Sequence nested "
							     "too deep",
					 path);
		for (size_t i = 0; i < json_object_array_length(arr); i++) {
			int had = t->n_pre + t->n_post;
			if ((st = load_post_processor(t, json_object_array_get_idx(arr, i), path,
						      depth + 1)) != RG_OK)
				return st;
			if (had && t->n_pre + t->n_post > had)
				return rg_errorf(RG_ERR_UNSUPPORTED,
						 "%s: post_processor Sequence with more than one "
						 "processor adding tokens",
						 path);
		}
		return RG_OK;
	}
	if (ty && strcmp(ty, "ByteLevel") == 0) /* trims offsets; ids unchanged */
		return trim_options(t, pp, true, path);
	if (ty && (strcmp(ty, "BertProcessing") == 0 || strcmp(ty, "RobertaProcessing") == 0)) {
		json_object *cls = rg_tok_jget(pp, "cls"), *sep = rg_tok_jget(pp, "sep");
		if (!cls || !sep || !json_object_is_type(cls, json_type_array) ||
		    !json_object_is_type(sep, json_type_array) ||
		    json_object_array_length(cls) != 2 || json_object_array_length(sep) != 2)
			return rg_errorf(RG_ERR_FORMAT, "%s: %s needs cls and sep", path, ty);
		json_object *ci = json_object_array_get_idx(cls, 1),
			    *si = json_object_array_get_idx(sep, 1);
		if (!json_object_is_type(ci, json_type_int) ||
		    !json_object_is_type(si, json_type_int) || json_object_get_int(ci) < 0 ||
		    json_object_get_int(si) < 0)
			return rg_errorf(RG_ERR_FORMAT, "%s: %s ids must be ints >= 0", path, ty);
		t->pre_ids[t->n_pre++] = json_object_get_int(ci);
		t->post_ids[t->n_post++] = json_object_get_int(si);
		if (strcmp(ty, "RobertaProcessing") == 0 &&
		    (st = trim_options(t, pp, true, path)) != RG_OK)
			return st;
		return pair_bert_roberta(t, json_object_get_int(ci), json_object_get_int(si),
					 strcmp(ty, "RobertaProcessing") == 0, path);
	}
	if (!ty || strcmp(ty, "TemplateProcessing") != 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: post_processor type \"%s\" is not supported "
				 "(BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel, "
				 "Sequence)",
				 path, ty ? ty : "?");
	json_object *single = rg_tok_jget(pp, "single"), *special = rg_tok_jget(pp, "special_tokens");
	if (!single || !json_object_is_type(single, json_type_array))
		return rg_errorf(RG_ERR_FORMAT, "%s: TemplateProcessing without \"single\"", path);
	bool seen_a = false;
	for (size_t i = 0; i < json_object_array_length(single); i++) {
		json_object *item = json_object_array_get_idx(single, i);
		json_object *seq = rg_tok_jget(item, "Sequence");
		if (seq) {
			const char *sid = json_object_get_string(rg_tok_jget(seq, "id"));
			if (seen_a || !sid || strcmp(sid, "A") != 0)
				return rg_errorf(RG_ERR_UNSUPPORTED,
						 "%s: single template must hold sequence A once",
						 path);
			seen_a = true;
		} else if (!seen_a) {
			if ((st = template_ids(special, item, t->pre_ids, &t->n_pre, path)) !=
			    RG_OK)
				return st;
		} else {
			if ((st = template_ids(special, item, t->post_ids, &t->n_post, path)) !=
			    RG_OK)
				return st;
		}
	}
	if (!seen_a)
		return rg_errorf(RG_ERR_FORMAT, "%s: single template has no sequence A", path);
	return load_pair_template(t, rg_tok_jget(pp, "pair"), special, path);
}

/* model of type WordPiece: vocab, unk_token, continuing_subword_prefix,
 * max_input_chars_per_word. */
static rg_status load_wordpiece(rg_tokenizer *t, json_object *model, const char *path)
{
	rg_status st;
	json_object *pfx = rg_tok_jget(model, "continuing_subword_prefix");
	if ((st = set_prefix(t,
			     pfx && json_object_is_type(pfx, json_type_string)
				     ? json_object_get_string(pfx)
				     : "##",
			     path)) != RG_OK)
		return st;
	json_object *mc = rg_tok_jget(model, "max_input_chars_per_word");
	t->max_chars = mc && json_object_is_type(mc, json_type_int) ? json_object_get_int(mc) : 100;

	json_object *vocab = rg_tok_jget(model, "vocab");
	if (!vocab || !json_object_is_type(vocab, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: model.vocab must be an object", path);
		return st;
	}
	json_object_object_foreach(vocab, key, val)
	{
		if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
		    json_object_get_int64(val) > INT32_MAX) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: vocab id of \"%s\" is not a valid id",
				       path, key);
			return st;
		}
		if ((st = vocab_add(t, key, strlen(key), (int32_t)json_object_get_int(val))) !=
		    RG_OK)
			return st;
	}
	json_object *unk = rg_tok_jget(model, "unk_token");
	if ((st = finish_unk(t,
			     unk && json_object_is_type(unk, json_type_string)
				     ? json_object_get_string(unk)
				     : "[UNK]",
			     path)) != RG_OK)
		return st;

	return RG_OK;
}

/* A decoder step's string field, or NULL (absent / not a string). */
static const char *dec_str(json_object *o, const char *key)
{
	json_object *v = rg_tok_jget(o, key);
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* The one char of a string field (Metaspace replacement, Strip content), or false. */
static bool dec_char(json_object *o, const char *key, uint32_t *cp)
{
	const char *v = dec_str(o, key);
	size_t n = v ? strlen(v) : 0;
	return n && rg_utf8_next(v, n, 0, cp) == n;
}

/* Record why decoding is not available; the tokenizer still loads (encoding does not need it). */
static rg_status dec_refuse(rg_tokenizer *t, const char *path, const char *what)
{
	if (!t->dec_error[0])
		snprintf(t->dec_error, sizeof(t->dec_error), "%s: decoder %s is not supported",
			 path, what);
	return RG_OK;
}

/* tokenizer.json "decoder": WordPiece, ByteLevel, Metaspace, BPEDecoder, Replace (String
 * pattern), ByteFallback, Fuse, Strip, or a Sequence of them. Anything else leaves dec_error set:
 * rg_tokenizer_decode refuses then, loading does not. Only RG_ERR_OOM fails. */
static rg_status load_decoder(rg_tokenizer *t, json_object *d, const char *path, int depth)
{
	const char *ty = rg_tok_jtype(d);
	rg_dec_step *s;

	if (rg_tok_jnull(d))
		return RG_OK;
	t->has_decoder = true;
	if (!ty)
		return dec_refuse(t, path, "without a type");
	if (strcmp(ty, "Sequence") == 0) {
		json_object *arr = rg_tok_jget(d, "decoders");
		rg_status st;

		if (!arr || !json_object_is_type(arr, json_type_array) || depth > 4)
			return dec_refuse(t, path, "Sequence (malformed or nested too deep)");
		for (size_t i = 0; i < json_object_array_length(arr); i++)
			if ((st = load_decoder(t, json_object_array_get_idx(arr, i), path,
					       depth + 1)) != RG_OK)
				return st;
		return RG_OK;
	}
	if (t->n_dec == RG_DEC_MAX_STEPS)
		return dec_refuse(t, path, "Sequence (too many steps)");
	s = &t->dec[t->n_dec];
	memset(s, 0, sizeof(*s));
	if (strcmp(ty, "WordPiece") == 0) {
		const char *pfx = dec_str(d, "prefix");
		json_object *cl = rg_tok_jget(d, "cleanup");

		s->kind = RG_DEC_WORDPIECE;
		s->a = strdup(pfx ? pfx : "##");
		s->cleanup = !cl || !json_object_is_type(cl, json_type_boolean) ||
			     json_object_get_boolean(cl);
	} else if (strcmp(ty, "ByteLevel") == 0) {
		s->kind = RG_DEC_BYTE_LEVEL;
	} else if (strcmp(ty, "Metaspace") == 0) {
		const char *ps = dec_str(d, "prepend_scheme");
		json_object *aps = rg_tok_jget(d, "add_prefix_space");

		s->kind = RG_DEC_METASPACE;
		if (!dec_char(d, "replacement", &s->rep))
			return dec_refuse(t, path, "Metaspace without a one-char replacement");
		s->prepend_never = (ps && strcmp(ps, "never") == 0) ||
				   (!ps && aps && json_object_is_type(aps, json_type_boolean) &&
				    !json_object_get_boolean(aps));
	} else if (strcmp(ty, "BPEDecoder") == 0) {
		const char *sfx = dec_str(d, "suffix");

		s->kind = RG_DEC_BPE;
		s->a = strdup(sfx ? sfx : "</w>");
	} else if (strcmp(ty, "Replace") == 0) {
		const char *pat = dec_str(rg_tok_jget(d, "pattern"), "String");
		const char *content = dec_str(d, "content");

		if (!pat || !*pat || !content)
			return dec_refuse(t, path, "Replace other than a String pattern");
		s->kind = RG_DEC_REPLACE;
		s->a = strdup(pat);
		s->b = strdup(content);
		if (s->a && !s->b) {
			free(s->a);
			s->a = NULL;
		}
	} else if (strcmp(ty, "ByteFallback") == 0) {
		s->kind = RG_DEC_BYTE_FALLBACK;
	} else if (strcmp(ty, "Fuse") == 0) {
		s->kind = RG_DEC_FUSE;
	} else if (strcmp(ty, "Strip") == 0) {
		json_object *a = rg_tok_jget(d, "start"), *b = rg_tok_jget(d, "stop");

		s->kind = RG_DEC_STRIP;
		if (!dec_char(d, "content", &s->rep) || !json_object_is_type(a, json_type_int) ||
		    !json_object_is_type(b, json_type_int) || json_object_get_int(a) < 0 ||
		    json_object_get_int(b) < 0)
			return dec_refuse(t, path, "Strip (malformed)");
		s->start = json_object_get_int(a);
		s->stop = json_object_get_int(b);
	} else {
		char what[96];

		snprintf(what, sizeof(what), "type \"%.40s\"", ty);
		return dec_refuse(t, path, what);
	}
	if ((s->kind == RG_DEC_WORDPIECE || s->kind == RG_DEC_BPE || s->kind == RG_DEC_REPLACE) &&
	    !s->a)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (decoder)");
	t->n_dec++;
	return RG_OK;
}

/* id -> token table: the added tokens' texts first (HF: the added vocabulary, then the model),
 * then the model's vocabulary. Built once after load. */
static rg_status build_id_table(rg_tokenizer *t)
{
	/* ids past 2^24 (no real vocabulary has them) get no string rather than a huge table */
	size_t n = (size_t)t->max_id + 1 < ((size_t)1 << 24) ? (size_t)t->max_id + 1 : (size_t)1 << 24;
	const rg_strmap *maps[2] = {NULL, NULL};

	t->id_str = calloc(n ? n : 1, sizeof(*t->id_str));
	t->id_len = calloc(n ? n : 1, sizeof(*t->id_len));
	t->id_special = calloc(n ? n : 1, 1);
	if (!t->id_str || !t->id_len || !t->id_special)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (id table)");
	t->n_id = n;
	switch (t->model) {
	case RG_TOK_WORDPIECE:
		maps[0] = &t->words;
		break;
	case RG_TOK_BPE:
		maps[0] = rg_bpe_vocab(t->bpe);
		break;
	case RG_TOK_UNIGRAM:
		maps[0] = rg_unigram_pieces(t->uni);
		break;
	}
	for (size_t e = 0; maps[0] && e < maps[0]->n_ents; e++) {
		const rg_strmap_ent *en = &maps[0]->ents[e];

		if (en->id >= 0 && (size_t)en->id < n) {
			t->id_str[en->id] = maps[0]->arena + en->off;
			t->id_len[en->id] = en->len;
		}
	}
	for (size_t i = 0; i < t->n_added; i++) {
		const rg_added_token *a = &t->added[i];

		if (a->id < 0 || (size_t)a->id >= n)
			continue;
		t->id_str[a->id] = a->text;
		t->id_len[a->id] = (uint32_t)strlen(a->text);
		t->id_special[a->id] = a->special;
	}
	return RG_OK;
}

/* A parsed tokenizer.json (root, borrowed) into t; path names it in messages. */
static rg_status load_tokenizer_root(rg_tokenizer *t, json_object *root, const char *path)
{
	rg_status st;
	json_object *model = rg_tok_jget(root, "model");
	const char *mty = rg_tok_jtype(model);
	if (mty && strcmp(mty, "WordPiece") == 0) {
		t->model = RG_TOK_WORDPIECE;
		st = load_wordpiece(t, model, path);
	} else if (mty && strcmp(mty, "BPE") == 0) {
		t->model = RG_TOK_BPE;
		if ((st = rg_bpe_load(model, path, &t->bpe)) == RG_OK)
			t->max_id = rg_bpe_max_id(t->bpe);
	} else if (mty && strcmp(mty, "Unigram") == 0) {
		t->model = RG_TOK_UNIGRAM;
		if ((st = rg_unigram_load(model, path, &t->uni)) == RG_OK)
			t->max_id = rg_unigram_max_id(t->uni);
	} else {
		st = rg_errorf(RG_ERR_UNSUPPORTED,
			       "%s: model type \"%s\" is not supported (WordPiece, BPE, Unigram)",
			       path, mty ? mty : "?");
	}
	if (st != RG_OK)
		goto out;
	if ((st = rg_normalizer_load(rg_tok_jget(root, "normalizer"), path, &t->nz)) != RG_OK ||
	    (st = rg_pretok_load(rg_tok_jget(root, "pre_tokenizer"), path, &t->pt)) != RG_OK)
		goto out;
	/* HF decides "first" on the original offset of the normalized piece, which follows the
	 * normalizer's alignment bookkeeping; ragged tracks no alignments, so only without a
	 * normalizer is the offset exact */
	if (t->nz && rg_pretok_prepends_first(t->pt)) {
		st = rg_errorf(RG_ERR_UNSUPPORTED,
			       "%s: Metaspace prepend_scheme \"first\" with a normalizer is not "
			       "supported",
			       path);
		goto out;
	}
	if ((st = load_post_processor(t, rg_tok_jget(root, "post_processor"), path, 0)) != RG_OK ||
	    (st = load_decoder(t, rg_tok_jget(root, "decoder"), path, 0)) != RG_OK)
		goto out;

	json_object *added = rg_tok_jget(root, "added_tokens");
	if (added && json_object_is_type(added, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(added); i++) {
			json_object *a = json_object_array_get_idx(added, i);
			json_object *c = rg_tok_jget(a, "content"), *id = rg_tok_jget(a, "id");
			bool special, normalized, lstrip, rstrip, single;
			if (!c || !json_object_is_type(c, json_type_string) || !id ||
			    !json_object_is_type(id, json_type_int) ||
			    json_object_get_int(id) < 0) {
				st = rg_errorf(RG_ERR_FORMAT,
					       "%s: added_tokens[%zu] needs content "
					       "and id",
					       path, i);
				goto out;
			}
			if ((st = rg_tok_jbool(a, "special", false, &special, path)) != RG_OK ||
			    (st = rg_tok_jbool(a, "normalized", !special, &normalized, path)) != RG_OK ||
			    (st = rg_tok_jbool(a, "lstrip", false, &lstrip, path)) != RG_OK ||
			    (st = rg_tok_jbool(a, "rstrip", false, &rstrip, path)) != RG_OK ||
			    (st = rg_tok_jbool(a, "single_word", false, &single, path)) != RG_OK)
				goto out;
			if ((st = add_added(t, json_object_get_string(c), json_object_get_int(id),
					    normalized, lstrip, rstrip, single, special)) != RG_OK)
				goto out;
		}
	}
out:
	return st;
}

/* Token names in tokenizer_config.json are strings or {"content": ...} objects. */
static const char *cfg_token(json_object *cfg, const char *key, const char *dflt)
{
	json_object *v = rg_tok_jget(cfg, key);
	if (v && json_object_is_type(v, json_type_object))
		v = rg_tok_jget(v, "content");
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : dflt;
}

/* vocab.txt + tokenizer_config.json, as transformers' BertTokenizerFast converter builds it. */
static rg_status load_vocab_txt(rg_tokenizer *t, const char *dir, const char *vpath)
{
	char cpath[4096];
	json_object *cfg = NULL, *pipe = NULL;
	char *data = NULL;
	size_t len;
	rg_status st;

	snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", dir);
	struct stat sb;
	if (stat(cpath, &sb) == 0) { /* present: must load (a FIFO is refused, not waited on) */
		if ((st = rg_json_read_file(cpath, RG_TOK_MAX_FILE, &cfg)) != RG_OK)
			return st;
	}
	t->max_chars = 100;
	bool lower, strip, chinese;
	if ((st = rg_tok_jbool(cfg, "do_lower_case", true, &lower, cpath)) != RG_OK ||
	    (st = rg_tok_jbool(cfg, "strip_accents", lower, &strip, cpath)) != RG_OK ||
	    (st = rg_tok_jbool(cfg, "tokenize_chinese_chars", true, &chinese, cpath)) != RG_OK)
		goto out;
	/* the BertNormalizer + BertPreTokenizer that BertTokenizerFast's converter writes */
	char spec[256];
	snprintf(spec, sizeof(spec),
		 "{\"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, "
		 "\"handle_chinese_chars\": %s, \"strip_accents\": %s, \"lowercase\": %s}, "
		 "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}",
		 chinese ? "true" : "false", strip ? "true" : "false", lower ? "true" : "false");
	if ((st = rg_json_parse(spec, strlen(spec), 0, vpath, NULL, &pipe)) != RG_OK ||
	    (st = rg_normalizer_load(rg_tok_jget(pipe, "normalizer"), vpath, &t->nz)) != RG_OK ||
	    (st = rg_pretok_load(rg_tok_jget(pipe, "pre_tokenizer"), vpath, &t->pt)) != RG_OK)
		goto out;
	if ((st = set_prefix(t, "##", vpath)) != RG_OK)
		goto out;

	if ((st = rg_file_read(vpath, RG_TOK_MAX_FILE, &data, &len)) != RG_OK)
		goto out;
	rg_cpvec chk = { 0 };
	st = rg_utf8_decode(data, len, 0, &chk);
	rg_cpvec_free(&chk);
	if (st != RG_OK) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", rg_last_error());
		st = rg_errorf(RG_ERR_FORMAT, "%s: not UTF-8 (%s)", vpath, msg);
		goto out;
	}
	/* Lines as Rust BufRead::lines (split on \n, strip one \r), then trim_end; id = line index;
	 * a repeated token keeps its last index. */
	int32_t line = 0;
	for (size_t i = 0; i < len; line++) {
		size_t e = i;
		while (e < len && data[e] != '\n')
			e++;
		size_t next = e < len ? e + 1 : len;
		/* trim trailing whitespace (ASCII and the Unicode White_Space chars) */
		for (;;) {
			if (e > i &&
			    (data[e - 1] == ' ' || (data[e - 1] >= 9 && data[e - 1] <= 13))) {
				e--;
				continue;
			}
			size_t b = e;
			while (b > i && ((unsigned char)data[b - 1] & 0xC0) == 0x80)
				b--;
			if (b > i && b < e) {
				b--;
				rg_cpvec one = { 0 };
				if (rg_utf8_decode(data + b, e - b, 0, &one) == RG_OK &&
				    one.n == 1 && rg_bert_is_whitespace(one.v[0])) {
					rg_cpvec_free(&one);
					e = b;
					continue;
				}
				rg_cpvec_free(&one);
			}
			break;
		}
		if ((st = vocab_add(t, data + i, e - i, line)) != RG_OK)
			goto out;
		i = next;
	}
	if ((st = finish_unk(t, cfg_token(cfg, "unk_token", "[UNK]"), vpath)) != RG_OK)
		goto out;
	const char *specials[5] = {
		cfg_token(cfg, "unk_token", "[UNK]"),	cfg_token(cfg, "sep_token", "[SEP]"),
		cfg_token(cfg, "cls_token", "[CLS]"),	cfg_token(cfg, "pad_token", "[PAD]"),
		cfg_token(cfg, "mask_token", "[MASK]"),
	};
	for (int i = 0; i < 5; i++) {
		int32_t id = rg_strmap_get(&t->words, specials[i], strlen(specials[i]));
		if (id >= 0 &&
		    (st = add_added(t, specials[i], id, false, false, false, false, true)) != RG_OK)
			goto out;
	}
	int32_t cls = rg_strmap_get(&t->words, specials[2], strlen(specials[2]));
	int32_t sep = rg_strmap_get(&t->words, specials[1], strlen(specials[1]));
	if (cls < 0 || sep < 0) {
		st = rg_errorf(RG_ERR_FORMAT,
			       "%s: cls_token \"%s\" or sep_token \"%s\" not in vocab", vpath,
			       specials[2], specials[1]);
		goto out;
	}
	t->pre_ids[t->n_pre++] = cls;
	t->post_ids[t->n_post++] = sep;
	/* BertTokenizerFast's decoder */
	t->has_decoder = true;
	t->dec[0] = (rg_dec_step){.kind = RG_DEC_WORDPIECE, .a = strdup("##"), .cleanup = true};
	if (!t->dec[0].a) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		goto out;
	}
	t->n_dec = 1;
	st = pair_bert_roberta(t, cls, sep, false, vpath);
out:
	free(data);
	json_object_put(cfg);
	json_object_put(pipe);
	return st;
}

/* The steps every load ends with: added tokens normalized, max id, id -> token table. */
static rg_status finish_load(rg_tokenizer *t)
{
	rg_status st;
	if ((st = normalize_added(t)) != RG_OK)
		return st;
	for (int i = 0; i < t->n_pre; i++)
		t->max_id = t->pre_ids[i] > t->max_id ? t->pre_ids[i] : t->max_id;
	for (int i = 0; i < t->n_post; i++)
		t->max_id = t->post_ids[i] > t->max_id ? t->post_ids[i] : t->max_id;
	rg_byte_level_map(t->byte_map);
	return build_id_table(t);
}

rg_status rg_tokenizer_load(const char *dir, rg_tokenizer **out)
{
	char path[4096];
	rg_status st;
	*out = NULL;
	if (!dir)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL directory");
	rg_tokenizer *t = calloc(1, sizeof(*t));
	json_object *root = NULL;
	if (!t)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	t->max_id = -1;
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	/* probe with stat, never by opening: a FIFO in a model directory must not hang the load
	 * (rg_file_read refuses anything but a regular file) */
	struct stat sb;
	char spm_path[4096];
	snprintf(spm_path, sizeof(spm_path), "%s/source.spm", dir);
	if (stat(path, &sb) == 0) {
		if ((st = rg_json_read_file(path, RG_TOK_MAX_FILE, &root)) == RG_OK)
			st = load_tokenizer_root(t, root, path);
	} else if (stat(spm_path, &sb) == 0) {
		/* MarianMT: source.spm + target.spm + vocab.json (marian.h), no tokenizer.json */
		if ((st = rg_marian_tok_load(dir, &t->marian)) != RG_OK)
			goto fail;
		t->max_id = rg_marian_tok_max_id(t->marian);
		*out = t;
		return RG_OK;
	} else if ((st = rg_tok_gpt2_files_json(dir, &root)) != RG_OK || root) {
		/* GPT-2's vocab.json + merges.txt (bpe_gguf.c) */
		snprintf(path, sizeof(path), "%s/vocab.json", dir);
		if (st == RG_OK)
			st = load_tokenizer_root(t, root, path);
	} else {
		snprintf(path, sizeof(path), "%s/vocab.txt", dir);
		if (stat(path, &sb) != 0) {
			st = rg_errorf(RG_ERR_IO,
				       "%s: none of tokenizer.json, vocab.json + merges.txt or "
				       "vocab.txt can be opened: %s",
				       dir, strerror(errno));
			goto fail;
		}
		/* a different tokenizer than the model may have been saved with: say so */
		fprintf(stderr, "ragged: %s has no tokenizer.json; building a WordPiece tokenizer "
			"from vocab.txt and tokenizer_config.json\n", dir);
		st = load_vocab_txt(t, dir, path);
	}
	json_object_put(root);
	if (st != RG_OK || (st = finish_load(t)) != RG_OK)
		goto fail;
	*out = t;
	return RG_OK;
fail:
	rg_tokenizer_free(t);
	return st;
}

rg_status rg_tokenizer_from_json(json_object *root, const char *where, rg_tokenizer **out)
{
	rg_status st;
	*out = NULL;
	rg_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	t->max_id = -1;
	if ((st = load_tokenizer_root(t, root, where)) != RG_OK ||
	    (st = finish_load(t)) != RG_OK) {
		rg_tokenizer_free(t);
		return st;
	}
	*out = t;
	return RG_OK;
}

bool rg_tokenizer_byte_level_decoder(const rg_tokenizer *t)
{
	return !t->dec_error[0] && t->has_decoder && t->n_dec == 1 &&
	       t->dec[0].kind == RG_DEC_BYTE_LEVEL;
}

bool rg_tokenizer_is_special(const rg_tokenizer *t, int32_t id)
{
	if (t->marian)
		return rg_marian_tok_is_special(t->marian, id);
	return id >= 0 && (size_t)id < t->n_id && t->id_special[id];
}

/* ---- encoding ------------------------------------------------------------------------------ */

/* One encode call's scratch: every buffer is owned by the call, none by the tokenizer. */
typedef struct rg_enc_ctx {
	const rg_tokenizer *t;
	rg_cpvec raw;  /* validation */
	rg_buf norm;   /* the normalized piece being tokenized */
	bool raw_start; /* that piece comes from the raw piece at offset 0 of the text */
	rg_norm_scratch nsc;
	rg_pretok_scratch psc;
	rg_bpe_scratch bsc;
	rg_uni_scratch usc;
	rg_idvec ids;
	rg_buf *words; /* pretokenize test hook: collect the words (each NUL-ended), no ids */
	/* offsets mode (ids.with_len): each id's span in the text, and the spans of the raw piece
	 * and of norm (HF's alignments) */
	bool offsets;
	rg_spanvec sp, raw_al, norm_al;
	rg_spanvec ws; /* (ids.n) added tokens: {leading, trailing} space chars of the text they
			* matched (HF's token value, which trim_offsets reads); model tokens:
			* {UINT32_MAX, 0}, their vocabulary string is read instead */
	const size_t *plain; /* rg_tok_params.plain: (2 * n_plain) raw byte ranges without
			      * special added tokens */
	size_t n_plain;
	bool plain_piece;    /* the raw piece being normalized overlaps one of them */
} rg_enc_ctx;

/* Whether raw bytes [a, b) overlap a range of c->plain. */
static bool in_plain(const rg_enc_ctx *c, size_t a, size_t b)
{
	for (size_t k = 0; k < c->n_plain; k++)
		if (a < c->plain[2 * k + 1] && c->plain[2 * k] < b)
			return true;
	return false;
}

static void ctx_free(rg_enc_ctx *c)
{
	rg_cpvec_free(&c->raw);
	rg_buf_free(&c->norm);
	rg_norm_scratch_free(&c->nsc);
	rg_pretok_scratch_free(&c->psc);
	rg_bpe_scratch_free(&c->bsc);
	rg_uni_scratch_free(&c->usc);
	rg_idvec_free(&c->ids);
	rg_spanvec_free(&c->sp);
	rg_spanvec_free(&c->raw_al);
	rg_spanvec_free(&c->norm_al);
	rg_spanvec_free(&c->ws);
}

/* Leading and trailing chars of s[0..n) that are spaces to ByteLevel's trim_offsets: its
 * stand-in U+0120 or Rust whitespace (a string of spaces counts them both ways, as HF does). */
static void space_counts(const char *s, size_t n, uint32_t *lead, uint32_t *trail)
{
	size_t nch = 0;

	*lead = *trail = 0;
	for (size_t k = 0; k < n; k += rg_utf8_len_valid((unsigned char)s[k]))
		nch++;
	for (size_t k = 0; k < n; k += rg_utf8_len_valid((unsigned char)s[k])) {
		uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + k);
		if (cp != 0x120 && !rg_bert_is_whitespace(cp))
			break;
		(*lead)++;
	}
	for (size_t k = n; k > 0 && *trail < nch;) {
		size_t b = k - 1;
		while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80)
			b--;
		uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + b);
		if (cp != 0x120 && !rg_bert_is_whitespace(cp))
			break;
		(*trail)++;
		k = b;
	}
}

/* Offsets mode: the spans of the ids the model (or an added token) appended from index `from`.
 * Model tokens cover their word's bytes left to right (cumulative lengths, as HF's models report
 * offsets; al: the word's n byte spans); sp_added, when not NULL, is an added token's span and
 * ws_added its space counts. */
static rg_status track_ids(rg_enc_ctx *c, size_t from, const rg_span *al, size_t n,
			   const rg_span *sp_added, rg_span ws_added)
{
	size_t pos = 0;
	rg_status st;

	if (!c->offsets)
		return RG_OK;
	if ((st = rg_spanvec_reserve(&c->sp, c->ids.n)) != RG_OK ||
	    (st = rg_spanvec_reserve(&c->ws, c->ids.n)) != RG_OK)
		return st;
	for (size_t k = from; k < c->ids.n; k++) {
		size_t a = pos, b = pos + c->ids.len[k];

		c->ws.v[c->ws.n++] = sp_added ? ws_added : (rg_span){UINT32_MAX, 0};
		if (sp_added) {
			c->sp.v[c->sp.n++] = *sp_added;
			continue;
		}
		a = a < n ? a : n ? n - 1 : 0;
		b = b > a ? (b <= n ? b : n) : a + 1;
		c->sp.v[c->sp.n++] = n ? (rg_span){al[a].a, al[b - 1].b} : (rg_span){0, 0};
		pos += c->ids.len[k];
	}
	return RG_OK;
}

/* WordPiece on one word w[0..n) (valid UTF-8, n > 0). */
static rg_status wordpiece(const rg_tokenizer *t, const char *w, size_t n, rg_idvec *ids)
{
	size_t nchars = 0;
	for (size_t i = 0; i < n; i++)
		nchars += ((unsigned char)w[i] & 0xC0) != 0x80;
	if (nchars > (size_t)(t->max_chars < 0 ? 0 : t->max_chars))
		return rg_idvec_push_len(ids, t->unk_id, (uint32_t)n);
	size_t mark = ids->n, start = 0;
	rg_status st;
	while (start < n) {
		const rg_strmap *m = start == 0 ? &t->words : &t->cont;
		size_t end = n;
		if (end - start > m->max_len) {
			end = start + m->max_len;
			while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80)
				end--;
		}
		int32_t id = -1;
		while (end > start) {
			id = rg_strmap_get(m, w + start, end - start);
			if (id >= 0)
				break;
			end--;
			while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80)
				end--;
		}
		if (id < 0) {
			ids->n = mark;
			return rg_idvec_push_len(ids, t->unk_id, (uint32_t)n);
		}
		if ((st = rg_idvec_push_len(ids, id, (uint32_t)(end - start))) != RG_OK)
			return st;
		start = end;
	}
	return RG_OK;
}

/* A word from the pre-tokenizer: to the model (or, in the test hook, to the word list). */
static rg_status emit_word(void *ctx, const char *w, size_t n, const rg_span *al)
{
	rg_enc_ctx *c = ctx;
	size_t from = c->ids.n;
	rg_status st = RG_OK;

	if (c->words) {
		rg_buf_put(c->words, w, n);
		rg_buf_put(c->words, "", 1);
		return c->words->oom ? rg_errorf(RG_ERR_OOM, "tokenizer: out of memory") : RG_OK;
	}
	switch (c->t->model) {
	case RG_TOK_WORDPIECE:
		st = wordpiece(c->t, w, n, &c->ids);
		break;
	case RG_TOK_BPE:
		st = rg_bpe_encode(c->t->bpe, w, n, &c->bsc, &c->ids);
		break;
	case RG_TOK_UNIGRAM:
		st = rg_unigram_encode(c->t->uni, w, n, &c->usc, &c->ids);
		break;
	}
	if (st != RG_OK)
		return st;
	return track_ids(c, from, al, n, NULL, (rg_span){0, 0});
}

/* Leftmost-longest search for an added token (normalized or raw set) in s[from..n), s at raw
 * offset base (raw set) of the text; special tokens are skipped inside c's plain ranges.
 * Returns the index of the token, -1 if none; *pos = match start. */
static long find_added(const rg_tokenizer *t, const rg_enc_ctx *c, bool normalized, const char *s,
		       size_t n, size_t base, size_t from, size_t *pos)
{
	for (size_t i = from; i < n; i++) {
		long best = -1;
		size_t blen = 0;
		for (size_t a = 0; a < t->n_added; a++) {
			const rg_added_token *at = &t->added[a];
			if (at->normalized != normalized || at->len <= blen || at->len > n - i ||
			    at->content[0] != s[i] || memcmp(at->content, s + i, at->len) != 0)
				continue;
			if (at->special && c->n_plain &&
			    (normalized ? c->plain_piece : in_plain(c, base + i, base + i + at->len)))
				continue;
			best = (long)a;
			blen = at->len;
		}
		if (best >= 0) {
			*pos = i;
			return best;
		}
	}
	return -1;
}

static bool is_word_char(uint32_t c)
{
	if (c == '_')
		return true;
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO) ||
	       (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME);
}

typedef rg_status (*piece_fn)(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n,
			      size_t base);

/* Split s[0..n) on added tokens of one kind (HF AddedVocabulary::find_matches): gaps go to gap(),
 * matches become their id. s sits at offset base of the text (raw) or of c->norm (normalized);
 * a match's span covers what it took, stripped whitespace included (HF's split offsets). */
static rg_status split_added(const rg_tokenizer *t, rg_enc_ctx *c, bool normalized, const char *s,
			     size_t n, size_t base, piece_fn gap)
{
	rg_status st;
	size_t done = 0, from = 0, pos;
	long a;
	if (!(normalized ? t->has_norm_added : t->has_raw_added) || c->words)
		return gap(t, c, s, n, base);
	while ((a = find_added(t, c, normalized, s, n, base, from, &pos)) >= 0) {
		const rg_added_token *at = &t->added[a];
		size_t start = pos, stop = pos + at->len;
		rg_span sp = {0, 0}, ws = {0, 0};
		from = stop;
		if (at->single_word) {
			bool left_ok = true, right_ok = true;
			if (start > 0) {
				size_t b = start - 1;
				while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80)
					b--;
				left_ok = !is_word_char(rg_utf8_get_valid((const unsigned char *)s + b));
			}
			if (stop < n)
				right_ok = !is_word_char(rg_utf8_get_valid((const unsigned char *)s + stop));
			if (!left_ok || !right_ok)
				continue;
		}
		if (at->lstrip) {
			while (start > done) {
				size_t b = start - 1;
				while (b > done && ((unsigned char)s[b] & 0xC0) == 0x80)
					b--;
				if (!rg_bert_is_whitespace(rg_utf8_get_valid((const unsigned char *)s + b)))
					break;
				start = b;
			}
		}
		if (at->rstrip) {
			while (stop < n &&
			       rg_bert_is_whitespace(rg_utf8_get_valid((const unsigned char *)s + stop)))
				stop += rg_utf8_len_valid((unsigned char)s[stop]);
			from = stop;
		}
		if (start > done && (st = gap(t, c, s + done, start - done, base + done)) != RG_OK)
			return st;
		if (c->offsets) {
			sp = normalized ? (rg_span){c->norm_al.v[base + start].a,
						    c->norm_al.v[base + stop - 1].b}
					: (rg_span){(uint32_t)(base + start), (uint32_t)(base + stop)};
			space_counts(s + start, stop - start, &ws.a, &ws.b);
		}
		if ((st = rg_idvec_push_len(&c->ids, at->id, 0)) != RG_OK ||
		    (st = track_ids(c, c->ids.n - 1, NULL, 0, &sp, ws)) != RG_OK)
			return st;
		done = stop;
	}
	if (done < n || n == 0)
		return gap(t, c, s + done, n - done, base + done);
	return RG_OK;
}

static rg_status norm_gap(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n,
			  size_t base)
{
	return rg_pretok_apply(t->pt, s, n, c->raw_start && base == 0,
			       c->offsets ? c->norm_al.v + base : NULL, &c->psc, emit_word, c);
}

/* A raw piece between raw added tokens: normalize, split on normalized added tokens,
 * pre-tokenize and run the model on every word. */
static rg_status raw_gap(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n, size_t base)
{
	rg_status st;
	if (c->offsets) {
		c->raw_al.n = 0;
		if ((st = rg_spanvec_identity(&c->raw_al, s, n, base)) != RG_OK ||
		    (st = rg_normalizer_apply_al(t->nz, s, n, c->raw_al.v, &c->norm, &c->norm_al,
						 &c->nsc)) != RG_OK)
			return st;
	} else if ((st = rg_normalizer_apply(t->nz, s, n, &c->norm, &c->nsc)) != RG_OK) {
		return st;
	}
	c->raw_start = base == 0;
	c->plain_piece = c->n_plain && in_plain(c, base, base + n);
	return split_added(t, c, true, c->norm.data ? c->norm.data : "", c->norm.len, 0, norm_gap);
}

/* Validate all of text first so the reported offset is the first bad byte of the whole text. */
static rg_status validate(rg_enc_ctx *c, const char *text, size_t len)
{
	rg_status st = rg_utf8_decode(text, len, 0, &c->raw);
	c->raw.n = 0;
	return st;
}

/* One text through added-token splitting and the model, without the template. */
static rg_status encode_raw(const rg_tokenizer *t, rg_enc_ctx *c, const char *text, size_t len)
{
	rg_status st;

	if (!text && len)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if (!text)
		text = "";
	c->ids.with_len = c->offsets;
	if ((st = validate(c, text, len)) != RG_OK)
		return st;
	return split_added(t, c, false, text, len, 0, raw_gap);
}

/* HF's ByteLevel process_offsets (ByteLevel / RobertaProcessing trim_offsets), on byte offsets as
 * the Rust library applies it: a token whose value starts or ends with spaces (lead / trail
 * chars) loses that many bytes from its offsets, except the single space add_prefix_space put
 * in front of the first token. i: the token's index in its text's encoding. */
static void trim_span(const rg_tokenizer *t, uint32_t lead, uint32_t trail, size_t i, rg_span *sp)
{
	if (lead) {
		if ((i == 0 || sp->a == 0) && t->trim_prefix_space && lead == 1)
			lead = 0;
		sp->a = sp->a + lead < sp->b ? sp->a + lead : sp->b;
	}
	if (trail && sp->b >= trail)
		sp->b = sp->b - trail > sp->a ? sp->b - trail : sp->a;
}

void rg_encoding_free(rg_encoding *e)
{
	if (!e)
		return;
	free(e->ids);
	free(e->types);
	free(e->special);
	free(e->start);
	free(e->stop);
	memset(e, 0, sizeof(*e));
}

/* Append one token to out (room made by the caller). */
static void put_tok(rg_encoding *out, int32_t id, int type, bool special, const rg_span *sp)
{
	size_t k = out->n++;

	out->ids[k] = id;
	out->types[k] = type;
	out->special[k] = special;
	if (out->start) {
		out->start[k] = sp ? sp->a : 0;
		out->stop[k] = sp ? sp->b : 0;
	}
}

/* Append tokens [from, to) of a text's context. */
static void put_text(const rg_tokenizer *t, rg_encoding *out, rg_enc_ctx *c, size_t from,
		     size_t to, int type)
{
	for (size_t k = from; k < to; k++) {
		rg_span sp = {0, 0};

		if (out->start) {
			sp = c->sp.v[k];
			if (t->trim_offsets) {
				rg_span ws = c->ws.v[k];
				size_t len = 0;
				const char *tok = rg_tokenizer_id_to_token(t, c->ids.v[k], &len);

				if (ws.a == UINT32_MAX)
					space_counts(tok ? tok : "", len, &ws.a, &ws.b);
				trim_span(t, ws.a, ws.b, k - from, &sp);
			}
		}
		put_tok(out, c->ids.v[k], type, false, &sp);
	}
}

/* rg_tokenizer_encode_ex through a Marian tokenizer: the source side (the encoder's input) of
 * MarianTokenizer(text), eos the template's one token; truncation as HF's (content tokens
 * dropped from the right or the left, eos kept). No pairs and no offsets (MarianTokenizer is a
 * slow tokenizer: return_offsets_mapping is refused there too). */
static rg_status marian_encode_ex(const rg_tokenizer *t, const char *a, size_t a_len, bool pair,
				  const rg_tok_params *p, rg_encoding *out)
{
	int32_t *ids = NULL;
	size_t n = 0, keep, from = 0, n_special = p->add_special_tokens ? 1 : 0;
	rg_status st;

	if (pair)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "tokenizer: MarianMT's tokenizer takes single texts, not pairs");
	if (p->offsets)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "tokenizer: MarianMT's SentencePiece tokenizer gives no offsets");
	if ((st = rg_marian_tok_encode(t->marian, RG_MARIAN_SOURCE, a, a_len, false, &ids, &n)) !=
	    RG_OK)
		return st;
	keep = n;
	if (p->truncation != RG_TRUNCATE_NONE && p->max_len && n + n_special > p->max_len) {
		if (n_special >= p->max_len) {
			free(ids);
			return rg_errorf(RG_ERR_TOO_LONG, "the template alone is %zu tokens, over %zu",
					 n_special, p->max_len);
		}
		keep = p->max_len - n_special;
		from = p->truncation == RG_TRUNCATE_LEFT ? n - keep : 0;
		out->truncated = true;
	}
	out->ids = malloc((keep + n_special + 1) * sizeof(*out->ids));
	out->types = calloc(keep + n_special + 1, sizeof(*out->types));
	out->special = calloc(keep + n_special + 1, 1);
	if (!out->ids || !out->types || !out->special) {
		free(ids);
		rg_encoding_free(out);
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	}
	memcpy(out->ids, ids + from, keep * sizeof(*ids));
	free(ids);
	out->n = keep;
	if (n_special) {
		out->ids[out->n] = rg_marian_tok_eos_id(t->marian);
		out->special[out->n++] = 1;
	}
	return RG_OK;
}

/* The single template's special tokens for this call: the file's, with p's source language
 * code in its slot (or first when lang_slot is -1). pre: room for n_pre + 1. */
static void single_template(const rg_tokenizer *t, const rg_tok_params *p, int32_t pre[5],
			    int *n_pre, int32_t post[4], int *n_post)
{
	memcpy(pre, t->pre_ids, sizeof(t->pre_ids));
	memcpy(post, t->post_ids, sizeof(t->post_ids));
	*n_pre = t->n_pre;
	*n_post = t->n_post;
	if (!p->lang_set)
		return;
	if (p->lang_slot < 0 || p->lang_slot >= t->n_pre + t->n_post) {
		memmove(pre + 1, pre, (size_t)t->n_pre * sizeof(*pre));
		pre[0] = p->lang_id;
		(*n_pre)++;
	} else if (p->lang_slot < t->n_pre) {
		pre[p->lang_slot] = p->lang_id;
	} else {
		post[p->lang_slot - t->n_pre] = p->lang_id;
	}
}

rg_status rg_tokenizer_encode_ex(const rg_tokenizer *t, const char *a, size_t a_len, const char *b,
				 size_t b_len, const rg_tok_params *p, rg_encoding *out)
{
	rg_enc_ctx ca = { .t = t }, cb = { .t = t };
	bool pair = b != NULL, special = p->add_special_tokens;
	size_t n_special = 0, na, nb, a0 = 0, b0 = 0, cap;
	int32_t pre[5], post[4];
	int n_pre = 0, n_post = 0;
	rg_status st;

	memset(out, 0, sizeof(*out));
	if (!t || (!a && a_len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if (p->lang_set && (pair || t->marian))
		return rg_errorf(RG_ERR_UNSUPPORTED, "tokenizer: a source language code applies to "
				 "a single text of a tokenizer.json template only");
	if (t->marian)
		return marian_encode_ex(t, a, a_len, pair, p, out);
	if (pair && t->no_pair)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "tokenizer: the post_processor has no pair template (single texts "
				 "only)");
	ca.offsets = cb.offsets = p->offsets;
	ca.plain = p->plain;
	ca.n_plain = p->plain ? p->n_plain : 0;
	if ((st = encode_raw(t, &ca, a, a_len)) != RG_OK ||
	    (pair && (st = encode_raw(t, &cb, b, b_len)) != RG_OK))
		goto out;
	if (special && !pair)
		single_template(t, p, pre, &n_pre, post, &n_post);
	if (special) {
		if (!pair)
			n_special = (size_t)(n_pre + n_post);
		for (int i = 0; pair && i < t->n_pair; i++)
			n_special += t->pair[i].id >= 0;
	}
	na = ca.ids.n;
	nb = cb.ids.n;
	if (p->truncation != RG_TRUNCATE_NONE && p->max_len && na + nb + n_special > p->max_len) {
		bool left = p->truncation == RG_TRUNCATE_LEFT;

		if (n_special >= p->max_len) {
			st = rg_errorf(RG_ERR_TOO_LONG, "%s template alone is %zu tokens, over %zu",
				       pair ? "pair" : "the", n_special, p->max_len);
			goto out;
		}
		if (!pair) {
			na = p->max_len - n_special;
		} else {
			/* HF's longest_first (utils/truncation.rs): the shorter text keeps its length
			 * when the longer can take the rest of the budget, else each gets half (the
			 * odd token to the longer, B on a tie) */
			size_t budget = p->max_len - n_special, n1 = na, n2 = nb;
			bool swap = n1 > n2;

			if (swap) {
				n1 = nb;
				n2 = na;
			}
			n2 = n1 > budget ? n1 : (n1 > budget - n1 ? n1 : budget - n1);
			if (n1 + n2 > budget) {
				n1 = budget / 2;
				n2 = n1 + budget % 2;
			}
			na = swap ? (n2 < na ? n2 : na) : (n1 < na ? n1 : na);
			nb = swap ? (n1 < nb ? n1 : nb) : (n2 < nb ? n2 : nb);
		}
		/* left: keep the last tokens of each text */
		a0 = left ? ca.ids.n - na : 0;
		b0 = left ? cb.ids.n - nb : 0;
		out->truncated = true;
	}
	cap = na + nb + n_special + 1;
	out->ids = malloc(cap * sizeof(*out->ids));
	out->types = malloc(cap * sizeof(*out->types));
	out->special = malloc(cap);
	if (p->offsets) {
		out->start = malloc(cap * sizeof(*out->start));
		out->stop = malloc(cap * sizeof(*out->stop));
	}
	if (!out->ids || !out->types || !out->special ||
	    (p->offsets && (!out->start || !out->stop))) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		goto out;
	}
	if (!pair) {
		for (int i = 0; special && i < n_pre; i++)
			put_tok(out, pre[i], 0, true, NULL);
		put_text(t, out, &ca, a0, a0 + na, 0);
		for (int i = 0; special && i < n_post; i++)
			put_tok(out, post[i], 0, true, NULL);
	} else if (!special || t->n_pair == 0) { /* no template: A:0 B:1 */
		put_text(t, out, &ca, a0, a0 + na, 0);
		put_text(t, out, &cb, b0, b0 + nb, 1);
	} else {
		for (int i = 0; i < t->n_pair; i++) {
			if (t->pair[i].id == RG_TOK_SEQ_A)
				put_text(t, out, &ca, a0, a0 + na, t->pair[i].type);
			else if (t->pair[i].id == RG_TOK_SEQ_B)
				put_text(t, out, &cb, b0, b0 + nb, t->pair[i].type);
			else
				put_tok(out, t->pair[i].id, t->pair[i].type, true, NULL);
		}
	}
	st = RG_OK;
out:
	if (st != RG_OK)
		rg_encoding_free(out);
	ctx_free(&ca);
	ctx_free(&cb);
	return st;
}

rg_status rg_tokenizer_encode(const rg_tokenizer *t, const char *text, size_t len, int32_t **ids,
			      size_t *n_ids)
{
	rg_tok_params p = {.truncation = RG_TRUNCATE_NONE, .add_special_tokens = true};
	rg_encoding e;
	rg_status st;

	*ids = NULL;
	*n_ids = 0;
	if ((st = rg_tokenizer_encode_ex(t, text, len, NULL, 0, &p, &e)) != RG_OK)
		return st;
	*ids = e.ids; /* never NULL: allocated with room for one more */
	*n_ids = e.n;
	e.ids = NULL;
	rg_encoding_free(&e);
	return RG_OK;
}

rg_status rg_tokenizer_encode_pair(const rg_tokenizer *t, const char *a, size_t a_len,
				   const char *b, size_t b_len, size_t max_len, int32_t **ids,
				   int32_t **types, size_t *n_ids, bool *truncated)
{
	rg_tok_params p = {.truncation = max_len ? RG_TRUNCATE_RIGHT : RG_TRUNCATE_NONE,
			    .max_len = max_len, .add_special_tokens = true};
	rg_encoding e;
	rg_status st;

	*ids = NULL;
	*types = NULL;
	*n_ids = 0;
	*truncated = false;
	if (!t || (!b && b_len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if ((st = rg_tokenizer_encode_ex(t, a, a_len, b ? b : "", b_len, &p, &e)) != RG_OK)
		return st;
	*ids = e.ids;
	*types = e.types;
	*n_ids = e.n;
	*truncated = e.truncated;
	e.ids = e.types = NULL;
	rg_encoding_free(&e);
	return RG_OK;
}

/* ---- decoding ------------------------------------------------------------------------------ */

/* A list of strings in one arena: string i is data[off[i] .. off[i] + len[i]). */
typedef struct rg_strlist {
	rg_buf data;
	size_t *off, *len;
	size_t n, cap;
} rg_strlist;

static void sl_free(rg_strlist *l)
{
	rg_buf_free(&l->data);
	free(l->off);
	free(l->len);
	memset(l, 0, sizeof(*l));
}

/* Start a new string (later appends go to it). */
static rg_status sl_new(rg_strlist *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		size_t *o = realloc(l->off, cap * sizeof(*o));
		if (!o)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (decode)");
		l->off = o;
		size_t *n = realloc(l->len, cap * sizeof(*n));
		if (!n)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (decode)");
		l->len = n;
		l->cap = cap;
	}
	l->off[l->n] = l->data.len;
	l->len[l->n] = 0;
	l->n++;
	return RG_OK;
}

/* Append bytes to the last string (s may be NULL when n is 0). */
static void sl_put(rg_strlist *l, const char *s, size_t n)
{
	if (!n)
		return;
	rg_buf_put(&l->data, s, n);
	l->len[l->n - 1] += n;
}

static void sl_put_cp(rg_strlist *l, uint32_t cp)
{
	char u[4];
	sl_put(l, u, rg_utf8_put(cp, u));
}

/* s[0..n) with every non-overlapping pat replaced by rep, appended to the last string. */
static void sl_put_replaced(rg_strlist *l, const char *s, size_t n, const char *pat, size_t pl,
			    const char *rep, size_t rl)
{
	for (size_t i = 0; i < n;) {
		const char *m = pl ? memmem(s + i, n - i, pat, pl) : NULL;
		size_t at = m ? (size_t)(m - s) : n;
		sl_put(l, s + i, at - i);
		if (!m)
			break;
		sl_put(l, rep, rl);
		i = at + pl;
	}
}

/* Bytes as Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes U+FFFD. */
static void put_lossy(rg_strlist *l, const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char b = s[i];
		size_t w, j;
		unsigned char lo = 0x80, hi = 0xBF;

		if (b < 0x80) {
			sl_put(l, (const char *)s + i, 1);
			i++;
			continue;
		}
		if (b >= 0xC2 && b <= 0xDF)
			w = 2;
		else if (b >= 0xE0 && b <= 0xEF)
			w = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
		else if (b >= 0xF0 && b <= 0xF4)
			w = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
		else
			w = 0;
		j = i + 1;
		if (w && j < n && s[j] >= lo && s[j] <= hi) {
			j++;
			while (j < i + w && j < n && s[j] >= 0x80 && s[j] <= 0xBF)
				j++;
		}
		if (w && j == i + w) {
			sl_put(l, (const char *)s + i, w);
		} else {
			sl_put_cp(l, 0xFFFD);
		}
		i = j;
	}
}

static const char *const wp_cleanup[][2] = {
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
	{" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

/* One decoder step: in -> out (cleared first). */
static rg_status dec_step(const rg_tokenizer *t, const rg_dec_step *d, const rg_strlist *in,
			  rg_strlist *out, rg_buf *tmp, rg_buf *tmp2)
{
	rg_status st;

	out->n = 0;
	out->data.len = 0;
	switch (d->kind) {
	case RG_DEC_WORDPIECE: {
		size_t pl = strlen(d->a);
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->data.data + in->off[i];
			size_t n = in->len[i];
			tmp->len = 0;
			if (i && n >= pl && memcmp(s, d->a, pl) == 0) {
				rg_buf_put(tmp, s + pl, n - pl);
			} else {
				if (i)
					rg_buf_put(tmp, " ", 1);
				rg_buf_put(tmp, s, n);
			}
			for (size_t k = 0; d->cleanup && k < sizeof(wp_cleanup) / sizeof(wp_cleanup[0]);
			     k++) {
				/* replace into tmp2, then swap */
				tmp2->len = 0;
				for (size_t j = 0; j < tmp->len;) {
					const char *m = memmem(tmp->data + j, tmp->len - j, wp_cleanup[k][0],
							       strlen(wp_cleanup[k][0]));
					size_t at = m ? (size_t)(m - tmp->data) : tmp->len;
					rg_buf_put(tmp2, tmp->data + j, at - j);
					if (!m)
						break;
					rg_buf_puts(tmp2, wp_cleanup[k][1]);
					j = at + strlen(wp_cleanup[k][0]);
				}
				rg_buf sw = *tmp;
				*tmp = *tmp2;
				*tmp2 = sw;
			}
			if ((st = sl_new(out)) != RG_OK)
				return st;
			sl_put(out, tmp->data ? tmp->data : "", tmp->len);
		}
		break;
	}
	case RG_DEC_BYTE_LEVEL: {
		int16_t inv[0x200];
		for (size_t k = 0; k < 0x200; k++)
			inv[k] = -1;
		for (int bt = 0; bt < 256; bt++)
			inv[rg_utf8_get_valid((const unsigned char *)t->byte_map[bt])] = (int16_t)bt;
		tmp->len = 0;
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->data.data + in->off[i];
			size_t n = in->len[i], mark = tmp->len;
			bool all = true;
			for (size_t k = 0; k < n; k += rg_utf8_len_valid((unsigned char)s[k])) {
				uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + k);
				char bt;
				if (cp >= 0x200 || inv[cp] < 0) {
					all = false;
					break;
				}
				bt = (char)inv[cp];
				rg_buf_put(tmp, &bt, 1);
			}
			if (!all) { /* a token that is not all stand-ins: its own bytes */
				tmp->len = mark;
				rg_buf_put(tmp, s, n);
			}
		}
		if ((st = sl_new(out)) != RG_OK)
			return st;
		put_lossy(out, (const unsigned char *)(tmp->data ? tmp->data : ""), tmp->len);
		break;
	}
	case RG_DEC_METASPACE:
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->data.data + in->off[i];
			size_t n = in->len[i];
			if ((st = sl_new(out)) != RG_OK)
				return st;
			for (size_t k = 0; k < n;) {
				size_t kk = rg_utf8_len_valid((unsigned char)s[k]);
				uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + k);
				if (cp != d->rep)
					sl_put(out, s + k, kk);
				else if (i != 0 || d->prepend_never)
					sl_put(out, " ", 1);
				k += kk;
			}
		}
		break;
	case RG_DEC_BPE:
	case RG_DEC_REPLACE:
		for (size_t i = 0; i < in->n; i++) {
			const char *rep = d->kind == RG_DEC_BPE ? (i + 1 == in->n ? "" : " ") : d->b;
			if ((st = sl_new(out)) != RG_OK)
				return st;
			sl_put_replaced(out, in->data.data + in->off[i], in->len[i], d->a, strlen(d->a),
					rep, strlen(rep));
		}
		break;
	case RG_DEC_BYTE_FALLBACK: {
		tmp->len = 0; /* pending <0xHH> bytes */
		for (size_t i = 0; i <= in->n; i++) {
			const char *s = i < in->n ? in->data.data + in->off[i] : NULL;
			size_t n = i < in->n ? in->len[i] : 0;
			unsigned v = 0;
			bool byte = s && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
				    sscanf(s + 3, "%2x", &v) == 1 && isxdigit((unsigned char)s[3]) &&
				    isxdigit((unsigned char)s[4]);
			if (byte) {
				char bt = (char)v;
				rg_buf_put(tmp, &bt, 1);
				continue;
			}
			if (tmp->len) {
				if ((st = sl_new(out)) != RG_OK)
					return st;
				if (rg_utf8_valid(tmp->data, tmp->len)) {
					sl_put(out, tmp->data, tmp->len);
				} else {
					for (size_t k = 0; k < tmp->len; k++) {
						if (k && (st = sl_new(out)) != RG_OK)
							return st;
						sl_put_cp(out, 0xFFFD);
					}
				}
				tmp->len = 0;
			}
			if (s) {
				if ((st = sl_new(out)) != RG_OK)
					return st;
				sl_put(out, s, n);
			}
		}
		break;
	}
	case RG_DEC_FUSE:
		if ((st = sl_new(out)) != RG_OK)
			return st;
		for (size_t i = 0; i < in->n; i++)
			sl_put(out, in->data.data + in->off[i], in->len[i]);
		break;
	case RG_DEC_STRIP:
		for (size_t i = 0; i < in->n; i++) {
			const char *s = in->data.data + in->off[i];
			size_t n = in->len[i], a = 0, b = n;
			if ((st = sl_new(out)) != RG_OK)
				return st;
			for (int k = 0; k < d->start && a < n; k++) {
				if (rg_utf8_get_valid((const unsigned char *)s + a) != d->rep)
					break;
				a += rg_utf8_len_valid((unsigned char)s[a]);
			}
			for (int k = 0; k < d->stop && b > a; k++) {
				size_t p = b - 1;
				while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80)
					p--;
				if (rg_utf8_get_valid((const unsigned char *)s + p) != d->rep)
					break;
				b = p;
			}
			sl_put(out, s + a, b - a);
		}
		break;
	}
	if (out->data.oom || tmp->oom || tmp2->oom)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (decode)");
	return RG_OK;
}

rg_status rg_tokenizer_decode(const rg_tokenizer *t, const int32_t *ids, size_t n,
			      bool skip_special, char **text, size_t *len)
{
	rg_strlist l[2];
	rg_buf tmp, tmp2, res;
	int cur = 0;
	rg_status st = RG_OK;

	*text = NULL;
	*len = 0;
	memset(l, 0, sizeof(l));
	if (!t || (!ids && n))
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if (t->marian) /* transformers' skip_special_tokens drops unk too (marian.h) */
		return rg_marian_tok_decode(t->marian, ids, n, skip_special, skip_special, text, len);
	if (t->dec_error[0])
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s", t->dec_error);
	rg_buf_init(&tmp);
	rg_buf_init(&tmp2);
	rg_buf_init(&res);
	/* HF Tokenizer::decode: the token of every id (ids without one are left out), special
	 * added tokens skipped when asked */
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if (id < 0 || (size_t)id >= t->n_id || !t->id_str[id] ||
		    (skip_special && t->id_special[id]))
			continue;
		if ((st = sl_new(&l[0])) != RG_OK)
			goto out;
		sl_put(&l[0], t->id_str[id], t->id_len[id]);
	}
	for (int k = 0; k < t->n_dec; k++) {
		if ((st = dec_step(t, &t->dec[k], &l[cur], &l[1 - cur], &tmp, &tmp2)) != RG_OK)
			goto out;
		cur = 1 - cur;
	}
	for (size_t i = 0; i < l[cur].n; i++) {
		if (i && !t->has_decoder)
			rg_buf_put(&res, " ", 1);
		if (l[cur].len[i])
			rg_buf_put(&res, l[cur].data.data + l[cur].off[i], l[cur].len[i]);
	}
	if (l[0].data.oom || res.oom || !rg_buf_reserve(&res, 0)) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (decode)");
		goto out;
	}
	res.data[res.len] = '\0';
	*text = res.data;
	*len = res.len;
	rg_buf_init(&res);
out:
	rg_buf_free(&res);
	rg_buf_free(&tmp);
	rg_buf_free(&tmp2);
	sl_free(&l[0]);
	sl_free(&l[1]);
	return st;
}

const char *rg_tokenizer_id_to_token(const rg_tokenizer *t, int32_t id, size_t *len)
{
	if (t && t->marian)
		return rg_marian_tok_id_to_token(t->marian, id, len);
	if (!t || id < 0 || (size_t)id >= t->n_id || !t->id_str[id]) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = t->id_len[id];
	return t->id_str[id];
}

/* The malloc'd, NUL-terminated copy of b (never NULL on RG_OK). */
static rg_status take_buf(rg_buf *b, char **out, size_t *out_len)
{
	if (!rg_buf_reserve(b, 0))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	b->data[b->len] = '\0';
	*out = b->data;
	*out_len = b->len;
	rg_buf_init(b);
	return RG_OK;
}

rg_status rg_tokenizer_normalize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				 size_t *out_len)
{
	rg_enc_ctx c = { .t = t };
	rg_status st;
	*out = NULL;
	*out_len = 0;
	if ((st = validate(&c, text, len)) == RG_OK &&
	    (st = rg_normalizer_apply(t->nz, text, len, &c.norm, &c.nsc)) == RG_OK)
		st = take_buf(&c.norm, out, out_len);
	ctx_free(&c);
	return st;
}

rg_status rg_tokenizer_pretokenize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				   size_t *out_len)
{
	rg_enc_ctx c = { .t = t };
	rg_buf words;
	rg_status st;
	*out = NULL;
	*out_len = 0;
	rg_buf_init(&words);
	c.words = &words;
	if ((st = validate(&c, text, len)) == RG_OK &&
	    (st = rg_pretok_apply(t->pt, text, len, true, NULL, &c.psc, emit_word, &c)) == RG_OK)
		st = take_buf(&words, out, out_len);
	rg_buf_free(&words);
	ctx_free(&c);
	return st;
}
