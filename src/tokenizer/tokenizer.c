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

#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/tok_internal.h"

/* tokenizer.json of the large multilingual vocabularies is 17-30 MB; refuse absurd files */
#define RG_TOK_MAX_FILE ((off_t)512 << 20)

/* ---- tokenizer ----------------------------------------------------------------------------- */

typedef struct rg_added_token {
	char *content; /* UTF-8; normalized tokens hold their normalized form */
	size_t len;
	int32_t id;
	bool normalized, lstrip, rstrip, single_word;
} rg_added_token;

typedef enum rg_tok_model {
	RG_TOK_WORDPIECE,
	RG_TOK_BPE,
	RG_TOK_UNIGRAM,
} rg_tok_model;

struct rg_tokenizer {
	rg_tok_model model;
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
	rg_strmap_free(&t->words);
	rg_strmap_free(&t->cont);
	rg_bpe_free(t->bpe);
	rg_unigram_free(t->uni);
	rg_normalizer_free(t->nz);
	rg_pretok_free(t->pt);
	for (size_t i = 0; i < t->n_added; i++)
		free(t->added[i].content);
	free(t->added);
	free(t);
}

int32_t rg_tokenizer_cls_id(const rg_tokenizer *t)
{
	return t->n_pre ? t->pre_ids[0] : -1;
}
int32_t rg_tokenizer_sep_id(const rg_tokenizer *t)
{
	return t->n_post ? t->post_ids[t->n_post - 1] : -1;
}
int32_t rg_tokenizer_vocab_size(const rg_tokenizer *t)
{
	return t->max_id + 1;
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
			   bool lstrip, bool rstrip, bool single_word)
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
	if (!a->content)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (added tokens)");
	a->len = len;
	a->id = id;
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
	if (ty && strcmp(ty, "ByteLevel") == 0)
		return RG_OK; /* trims offsets; ids unchanged */
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

static rg_status load_tokenizer_json(rg_tokenizer *t, const char *path)
{
	json_object *root = NULL;
	rg_status st = rg_json_read_file(path, RG_TOK_MAX_FILE, &root);
	if (st != RG_OK)
		return st;

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
	if ((st = load_post_processor(t, rg_tok_jget(root, "post_processor"), path, 0)) != RG_OK)
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
					    normalized, lstrip, rstrip, single)) != RG_OK)
				goto out;
		}
	}
out:
	json_object_put(root);
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
	FILE *probe = fopen(cpath, "rb");
	if (probe) {
		fclose(probe);
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
		    (st = add_added(t, specials[i], id, false, false, false, false)) != RG_OK)
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
	st = pair_bert_roberta(t, cls, sep, false, vpath);
out:
	free(data);
	json_object_put(cfg);
	json_object_put(pipe);
	return st;
}

rg_status rg_tokenizer_load(const char *dir, rg_tokenizer **out)
{
	char path[4096];
	rg_status st;
	*out = NULL;
	if (!dir)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL directory");
	rg_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	t->max_id = -1;
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	FILE *f = fopen(path, "rb");
	if (f) {
		fclose(f);
		st = load_tokenizer_json(t, path);
	} else {
		snprintf(path, sizeof(path), "%s/vocab.txt", dir);
		f = fopen(path, "rb");
		if (!f) {
			st = rg_errorf(RG_ERR_IO,
				       "%s: neither tokenizer.json nor vocab.txt can be "
				       "opened: %s",
				       dir, strerror(errno));
			goto fail;
		}
		fclose(f);
		st = load_vocab_txt(t, dir, path);
	}
	if (st != RG_OK)
		goto fail;
	if ((st = normalize_added(t)) != RG_OK)
		goto fail;
	for (int i = 0; i < t->n_pre; i++)
		t->max_id = t->pre_ids[i] > t->max_id ? t->pre_ids[i] : t->max_id;
	for (int i = 0; i < t->n_post; i++)
		t->max_id = t->post_ids[i] > t->max_id ? t->post_ids[i] : t->max_id;
	*out = t;
	return RG_OK;
fail:
	rg_tokenizer_free(t);
	return st;
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
} rg_enc_ctx;

static void ctx_free(rg_enc_ctx *c)
{
	rg_cpvec_free(&c->raw);
	rg_buf_free(&c->norm);
	rg_norm_scratch_free(&c->nsc);
	rg_pretok_scratch_free(&c->psc);
	rg_bpe_scratch_free(&c->bsc);
	rg_uni_scratch_free(&c->usc);
	free(c->ids.v);
}

/* WordPiece on one word w[0..n) (valid UTF-8, n > 0). */
static rg_status wordpiece(const rg_tokenizer *t, const char *w, size_t n, rg_idvec *ids)
{
	size_t nchars = 0;
	for (size_t i = 0; i < n; i++)
		nchars += ((unsigned char)w[i] & 0xC0) != 0x80;
	if (nchars > (size_t)(t->max_chars < 0 ? 0 : t->max_chars))
		return rg_idvec_push(ids, t->unk_id);
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
			return rg_idvec_push(ids, t->unk_id);
		}
		if ((st = rg_idvec_push(ids, id)) != RG_OK)
			return st;
		start = end;
	}
	return RG_OK;
}

/* A word from the pre-tokenizer: to the model (or, in the test hook, to the word list). */
static rg_status emit_word(void *ctx, const char *w, size_t n)
{
	rg_enc_ctx *c = ctx;
	if (c->words) {
		rg_buf_put(c->words, w, n);
		rg_buf_put(c->words, "", 1);
		return c->words->oom ? rg_errorf(RG_ERR_OOM, "tokenizer: out of memory") : RG_OK;
	}
	switch (c->t->model) {
	case RG_TOK_WORDPIECE:
		return wordpiece(c->t, w, n, &c->ids);
	case RG_TOK_BPE:
		return rg_bpe_encode(c->t->bpe, w, n, &c->bsc, &c->ids);
	case RG_TOK_UNIGRAM:
		return rg_unigram_encode(c->t->uni, w, n, &c->usc, &c->ids);
	}
	return RG_OK;
}

/* Leftmost-longest search for an added token (normalized or raw set) in s[from..n).
 * Returns the index of the token, -1 if none; *pos = match start. */
static long find_added(const rg_tokenizer *t, bool normalized, const char *s, size_t n, size_t from,
		       size_t *pos)
{
	for (size_t i = from; i < n; i++) {
		long best = -1;
		size_t blen = 0;
		for (size_t a = 0; a < t->n_added; a++) {
			const rg_added_token *at = &t->added[a];
			if (at->normalized != normalized || at->len <= blen || at->len > n - i ||
			    at->content[0] != s[i] || memcmp(at->content, s + i, at->len) != 0)
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
 * matches become their id. */
static rg_status split_added(const rg_tokenizer *t, rg_enc_ctx *c, bool normalized, const char *s,
			     size_t n, size_t base, piece_fn gap)
{
	rg_status st;
	size_t done = 0, from = 0, pos;
	long a;
	if (!(normalized ? t->has_norm_added : t->has_raw_added) || c->words)
		return gap(t, c, s, n, base);
	while ((a = find_added(t, normalized, s, n, from, &pos)) >= 0) {
		const rg_added_token *at = &t->added[a];
		size_t start = pos, stop = pos + at->len;
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
		if ((st = rg_idvec_push(&c->ids, at->id)) != RG_OK)
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
	return rg_pretok_apply(t->pt, s, n, c->raw_start && base == 0, &c->psc, emit_word, c);
}

/* A raw piece between raw added tokens: normalize, split on normalized added tokens,
 * pre-tokenize and run the model on every word. */
static rg_status raw_gap(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n, size_t base)
{
	rg_status st;
	if ((st = rg_normalizer_apply(t->nz, s, n, &c->norm, &c->nsc)) != RG_OK)
		return st;
	c->raw_start = base == 0;
	return split_added(t, c, true, c->norm.data ? c->norm.data : "", c->norm.len, 0, norm_gap);
}

/* Validate all of text first so the reported offset is the first bad byte of the whole text. */
static rg_status validate(rg_enc_ctx *c, const char *text, size_t len)
{
	rg_status st = rg_utf8_decode(text, len, 0, &c->raw);
	c->raw.n = 0;
	return st;
}

rg_status rg_tokenizer_encode(const rg_tokenizer *t, const char *text, size_t len, int32_t **ids,
			      size_t *n_ids)
{
	rg_enc_ctx c = { .t = t };
	rg_status st;
	*ids = NULL;
	*n_ids = 0;
	if (!t || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if (!text)
		text = "";
	if ((st = validate(&c, text, len)) != RG_OK)
		goto out;
	for (int i = 0; i < t->n_pre; i++)
		if ((st = rg_idvec_push(&c.ids, t->pre_ids[i])) != RG_OK)
			goto out;
	if ((st = split_added(t, &c, false, text, len, 0, raw_gap)) != RG_OK)
		goto out;
	for (int i = 0; i < t->n_post; i++)
		if ((st = rg_idvec_push(&c.ids, t->post_ids[i])) != RG_OK)
			goto out;
	if (c.ids.n == 0) {
		/* malloc(0) may return NULL; keep *ids non-NULL on success */
		if ((st = rg_idvec_push(&c.ids, 0)) != RG_OK)
			goto out;
		c.ids.n = 0;
	}
	*ids = c.ids.v;
	*n_ids = c.ids.n;
	c.ids.v = NULL;
out:
	ctx_free(&c);
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
	if ((st = validate(c, text, len)) != RG_OK)
		return st;
	return split_added(t, c, false, text, len, 0, raw_gap);
}

rg_status rg_tokenizer_encode_pair(const rg_tokenizer *t, const char *a, size_t a_len,
				   const char *b, size_t b_len, size_t max_len, int32_t **ids,
				   int32_t **types, size_t *n_ids, bool *truncated)
{
	rg_enc_ctx ca = { .t = t }, cb = { .t = t };
	size_t n_special = 0, na, nb, n = 0;
	int32_t *out = NULL, *ty = NULL;
	rg_status st;

	*ids = NULL;
	*types = NULL;
	*n_ids = 0;
	*truncated = false;
	if (!t)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokenizer: NULL argument");
	if (t->no_pair)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "tokenizer: the post_processor has no pair template (single texts "
				 "only)");
	if ((st = encode_raw(t, &ca, a, a_len)) != RG_OK ||
	    (st = encode_raw(t, &cb, b, b_len)) != RG_OK)
		goto out;
	for (int i = 0; i < t->n_pair; i++)
		n_special += t->pair[i].id >= 0;
	na = ca.ids.n;
	nb = cb.ids.n;
	if (max_len && na + nb + n_special > max_len) {
		/* longest first: drop the last token of the longer text (B on a tie) */
		if (n_special >= max_len) {
			st = rg_errorf(RG_ERR_TOO_LONG, "pair template alone is %zu tokens, over %zu",
				       n_special, max_len);
			goto out;
		}
		while (na + nb + n_special > max_len) {
			if (na > nb)
				na--;
			else
				nb--;
		}
		*truncated = true;
	}
	out = malloc((na + nb + n_special + 1) * sizeof(*out));
	ty = malloc((na + nb + n_special + 1) * sizeof(*ty));
	if (!out || !ty) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		goto out;
	}
	if (t->n_pair == 0) { /* no post-processor: A:0 B:1 */
		for (size_t i = 0; i < na; i++, n++) {
			out[n] = ca.ids.v[i];
			ty[n] = 0;
		}
		for (size_t i = 0; i < nb; i++, n++) {
			out[n] = cb.ids.v[i];
			ty[n] = 1;
		}
	}
	for (int i = 0; i < t->n_pair; i++) {
		const int32_t *src = t->pair[i].id == RG_TOK_SEQ_A ? ca.ids.v
				     : t->pair[i].id == RG_TOK_SEQ_B ? cb.ids.v : &t->pair[i].id;
		size_t k = t->pair[i].id == RG_TOK_SEQ_A ? na : t->pair[i].id == RG_TOK_SEQ_B ? nb : 1;

		for (size_t j = 0; j < k; j++, n++) {
			out[n] = src[j];
			ty[n] = t->pair[i].type;
		}
	}
	*ids = out;
	*types = ty;
	*n_ids = n;
	out = ty = NULL;
	st = RG_OK;
out:
	free(out);
	free(ty);
	ctx_free(&ca);
	ctx_free(&cb);
	return st;
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
	    (st = rg_pretok_apply(t->pt, text, len, true, &c.psc, emit_word, &c)) == RG_OK)
		st = take_buf(&words, out, out_len);
	rg_buf_free(&words);
	ctx_free(&c);
	return st;
}
