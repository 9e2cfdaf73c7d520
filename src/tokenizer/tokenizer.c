/* BERT WordPiece tokenizer: loading (tokenizer.json, or vocab.txt + tokenizer_config.json) and
 * encoding, with the semantics of HF `tokenizers` (Rust):
 *   1. added tokens with normalized=false are split out of the raw text (leftmost-longest);
 *   2. each remaining piece goes through BertNormalizer (bert_normalizer.c), then added tokens with
 *      normalized=true are split out of the normalized text;
 *   3. BertPreTokenizer: split on whitespace (removed) and on punctuation (isolated);
 *   4. WordPiece (Schuster & Nakajima 2012; Wu et al. 2016 GNMT sec. 4.1 as implemented by BERT):
 *      greedy longest-match-first, continuation pieces prefixed by "##"; a word of more than
 *      max_input_chars_per_word chars, or any piece without a match, becomes the single [UNK];
 *   5. the post-processor template adds [CLS] ... [SEP].
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

/* tokenizer.json of the large multilingual vocabularies is 17-30 MB; refuse absurd files */
#define RG_TOK_MAX_FILE ((off_t)512 << 20)

/* ---- open-addressing string -> id map ---------------------------------------------------- */

typedef struct rg_strmap_ent {
	uint32_t off, len; /* key bytes in the arena */
	int32_t id;
	uint32_t hash;
} rg_strmap_ent;

typedef struct rg_strmap {
	rg_strmap_ent *ents;
	size_t n_ents, cap_ents;
	char *arena;
	size_t arena_n, arena_cap;
	uint32_t *slots; /* index into ents + 1; 0 = empty */
	size_t mask;	 /* n_slots - 1, n_slots a power of two */
	uint32_t max_len;
} rg_strmap;

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ull;
	}
	return (uint32_t)(h ^ (h >> 32));
}

static void strmap_free(rg_strmap *m)
{
	free(m->ents);
	free(m->arena);
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

static rg_status strmap_rehash(rg_strmap *m, size_t n_slots)
{
	uint32_t *s = calloc(n_slots, sizeof(*s));
	if (!s)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (hash table)");
	for (size_t e = 0; e < m->n_ents; e++) {
		size_t i = m->ents[e].hash & (n_slots - 1);
		while (s[i])
			i = (i + 1) & (n_slots - 1);
		s[i] = (uint32_t)(e + 1);
	}
	free(m->slots);
	m->slots = s;
	m->mask = n_slots - 1;
	return RG_OK;
}

/* Look up key s[0..n); returns the id or -1. */
static int32_t strmap_get(const rg_strmap *m, const char *s, size_t n)
{
	if (!m->slots || n > m->max_len)
		return -1;
	uint32_t h = hash_bytes(s, n);
	for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
		uint32_t e = m->slots[i];
		if (!e)
			return -1;
		const rg_strmap_ent *en = &m->ents[e - 1];
		if (en->hash == h && en->len == n && memcmp(m->arena + en->off, s, n) == 0)
			return en->id;
	}
}

/* Insert or overwrite (the last insert of a key wins, as a Rust HashMap::insert does). */
static rg_status strmap_put(rg_strmap *m, const char *s, size_t n, int32_t id)
{
	rg_status st;
	uint32_t h = hash_bytes(s, n);
	if (m->slots) {
		for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
			uint32_t e = m->slots[i];
			if (!e)
				break;
			rg_strmap_ent *en = &m->ents[e - 1];
			if (en->hash == h && en->len == n &&
			    memcmp(m->arena + en->off, s, n) == 0) {
				en->id = id;
				return RG_OK;
			}
		}
	}
	if (n > UINT32_MAX / 2 || m->n_ents >= UINT32_MAX / 4)
		return rg_errorf(RG_ERR_FORMAT, "tokenizer: vocabulary too large");
	if (m->n_ents == m->cap_ents) {
		size_t nc = m->cap_ents ? 2 * m->cap_ents : 1024;
		rg_strmap_ent *ne = realloc(m->ents, nc * sizeof(*ne));
		if (!ne)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (vocab)");
		m->ents = ne;
		m->cap_ents = nc;
	}
	if (m->arena_n + n + 1 > m->arena_cap) {
		size_t nc = m->arena_cap ? 2 * m->arena_cap : 16384;
		while (nc < m->arena_n + n + 1)
			nc *= 2;
		char *na = realloc(m->arena, nc);
		if (!na)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (vocab)");
		m->arena = na;
		m->arena_cap = nc;
	}
	memcpy(m->arena + m->arena_n, s, n);
	m->arena[m->arena_n + n] = '\0';
	m->ents[m->n_ents] = (rg_strmap_ent){ (uint32_t)m->arena_n, (uint32_t)n, id, h };
	m->arena_n += n + 1;
	m->n_ents++;
	if (n > m->max_len)
		m->max_len = (uint32_t)n;
	if (!m->slots || 2 * m->n_ents > m->mask + 1) {
		if ((st = strmap_rehash(m, m->slots ? 2 * (m->mask + 1) : 2048)) != RG_OK)
			return st;
	} else {
		size_t i = h & m->mask;
		while (m->slots[i])
			i = (i + 1) & m->mask;
		m->slots[i] = (uint32_t)m->n_ents;
	}
	return RG_OK;
}

/* ---- tokenizer ----------------------------------------------------------------------------- */

typedef struct rg_added_token {
	char *content; /* UTF-8; normalized tokens hold their normalized form */
	size_t len;
	int32_t id;
	bool normalized, lstrip, rstrip, single_word;
} rg_added_token;

struct rg_tokenizer {
	rg_strmap words; /* full vocab */
	rg_strmap cont;	 /* vocab entries that start with the prefix, prefix removed */
	char prefix[64];
	int32_t unk_id;
	int max_chars; /* max_input_chars_per_word */
	rg_bert_norm norm;
	bool pretok; /* BertPreTokenizer (false: pre_tokenizer null, one word per piece) */
	rg_added_token *added;
	size_t n_added;
	bool has_raw_added, has_norm_added;
	int32_t pre_ids[4], post_ids[4];
	int n_pre, n_post;
	int32_t max_id;
};

void rg_tokenizer_free(rg_tokenizer *t)
{
	if (!t)
		return;
	strmap_free(&t->words);
	strmap_free(&t->cont);
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
	rg_status st = strmap_put(&t->words, s, n, id);
	if (st != RG_OK)
		return st;
	size_t pl = strlen(t->prefix);
	if (n >= pl && memcmp(s, t->prefix, pl) == 0)
		st = strmap_put(&t->cont, s + pl, n - pl, id);
	if (id > t->max_id)
		t->max_id = id;
	return st;
}

static json_object *jget(json_object *o, const char *key)
{
	json_object *v = NULL;
	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

/* Boolean field: absent or null -> dflt; non-boolean -> RG_ERR_FORMAT. */
static rg_status jbool(json_object *o, const char *key, bool dflt, bool *out, const char *where)
{
	json_object *v = jget(o, key);
	if (!v || json_object_is_type(v, json_type_null)) {
		*out = dflt;
		return RG_OK;
	}
	if (!json_object_is_type(v, json_type_boolean))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be a boolean", where, key);
	*out = json_object_get_boolean(v);
	return RG_OK;
}

static const char *jtype(json_object *o)
{
	json_object *ty = jget(o, "type");
	return ty && json_object_is_type(ty, json_type_string) ? json_object_get_string(ty) : NULL;
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
	t->unk_id = strmap_get(&t->words, unk, strlen(unk));
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
	rg_cpvec a = { 0 }, b = { 0 }, c = { 0 };
	for (size_t i = 0; i < t->n_added; i++) {
		rg_added_token *at = &t->added[i];
		if (!at->normalized) {
			t->has_raw_added = true;
			continue;
		}
		a.n = 0;
		if ((st = rg_utf8_decode(at->content, at->len, 0, &a)) != RG_OK)
			goto out;
		if ((st = rg_bert_normalize(&t->norm, a.v, a.n, &b, &c)) != RG_OK)
			goto out;
		char *s = malloc(4 * b.n + 1);
		if (!s) {
			st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (added tokens)");
			goto out;
		}
		size_t k = 0;
		for (size_t j = 0; j < b.n; j++)
			k += rg_utf8_put(b.v[j], s + k);
		s[k] = '\0';
		free(at->content);
		at->content = s;
		at->len = k;
		if (k)
			t->has_norm_added = true;
	}
out:
	rg_cpvec_free(&a);
	rg_cpvec_free(&b);
	rg_cpvec_free(&c);
	return st;
}

static rg_status template_ids(json_object *special, json_object *item, int32_t *ids, int *n,
			      const char *path)
{
	json_object *st_ = jget(item, "SpecialToken");
	const char *name = st_ ? json_object_get_string(jget(st_, "id")) : NULL;
	json_object *spec = name ? jget(special, name) : NULL;
	json_object *arr = jget(spec, "ids");
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

static rg_status load_post_processor(rg_tokenizer *t, json_object *pp, const char *path)
{
	if (!pp || json_object_is_type(pp, json_type_null))
		return RG_OK;
	const char *ty = jtype(pp);
	if (ty && strcmp(ty, "BertProcessing") == 0) {
		json_object *cls = jget(pp, "cls"), *sep = jget(pp, "sep");
		if (!cls || !sep || !json_object_is_type(cls, json_type_array) ||
		    !json_object_is_type(sep, json_type_array) ||
		    json_object_array_length(cls) != 2 || json_object_array_length(sep) != 2)
			return rg_errorf(RG_ERR_FORMAT, "%s: BertProcessing needs cls and sep",
					 path);
		json_object *ci = json_object_array_get_idx(cls, 1),
			    *si = json_object_array_get_idx(sep, 1);
		if (!json_object_is_type(ci, json_type_int) ||
		    !json_object_is_type(si, json_type_int) || json_object_get_int(ci) < 0 ||
		    json_object_get_int(si) < 0)
			return rg_errorf(RG_ERR_FORMAT, "%s: BertProcessing ids must be ints >= 0",
					 path);
		t->pre_ids[t->n_pre++] = json_object_get_int(ci);
		t->post_ids[t->n_post++] = json_object_get_int(si);
		return RG_OK;
	}
	if (!ty || strcmp(ty, "TemplateProcessing") != 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: post_processor type \"%s\" is not supported "
				 "(BertProcessing, TemplateProcessing)",
				 path, ty ? ty : "?");
	json_object *single = jget(pp, "single"), *special = jget(pp, "special_tokens");
	if (!single || !json_object_is_type(single, json_type_array))
		return rg_errorf(RG_ERR_FORMAT, "%s: TemplateProcessing without \"single\"", path);
	bool seen_a = false;
	for (size_t i = 0; i < json_object_array_length(single); i++) {
		json_object *item = json_object_array_get_idx(single, i);
		json_object *seq = jget(item, "Sequence");
		rg_status st;
		if (seq) {
			const char *sid = json_object_get_string(jget(seq, "id"));
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
	return RG_OK;
}

static rg_status load_tokenizer_json(rg_tokenizer *t, const char *path)
{
	json_object *root = NULL;
	rg_status st = rg_json_read_file(path, RG_TOK_MAX_FILE, &root);
	if (st != RG_OK)
		return st;

	json_object *model = jget(root, "model");
	const char *mty = jtype(model);
	if (!mty || strcmp(mty, "WordPiece") != 0) {
		st = rg_errorf(RG_ERR_UNSUPPORTED,
			       "%s: model type \"%s\" is not supported (WordPiece)", path,
			       mty ? mty : "?");
		goto out;
	}
	json_object *pfx = jget(model, "continuing_subword_prefix");
	if ((st = set_prefix(t,
			     pfx && json_object_is_type(pfx, json_type_string)
				     ? json_object_get_string(pfx)
				     : "##",
			     path)) != RG_OK)
		goto out;
	json_object *mc = jget(model, "max_input_chars_per_word");
	t->max_chars = mc && json_object_is_type(mc, json_type_int) ? json_object_get_int(mc) : 100;

	json_object *vocab = jget(model, "vocab");
	if (!vocab || !json_object_is_type(vocab, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: model.vocab must be an object", path);
		goto out;
	}
	json_object_object_foreach(vocab, key, val)
	{
		if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
		    json_object_get_int64(val) > INT32_MAX) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: vocab id of \"%s\" is not a valid id",
				       path, key);
			goto out;
		}
		if ((st = vocab_add(t, key, strlen(key), (int32_t)json_object_get_int(val))) !=
		    RG_OK)
			goto out;
	}
	json_object *unk = jget(model, "unk_token");
	if ((st = finish_unk(t,
			     unk && json_object_is_type(unk, json_type_string)
				     ? json_object_get_string(unk)
				     : "[UNK]",
			     path)) != RG_OK)
		goto out;

	json_object *nz = jget(root, "normalizer");
	if (nz && !json_object_is_type(nz, json_type_null)) {
		const char *nty = jtype(nz);
		if (!nty || strcmp(nty, "BertNormalizer") != 0) {
			st = rg_errorf(RG_ERR_UNSUPPORTED,
				       "%s: normalizer type \"%s\" is not supported "
				       "(BertNormalizer)",
				       path, nty ? nty : "?");
			goto out;
		}
		t->norm.enabled = true;
		if ((st = jbool(nz, "clean_text", true, &t->norm.clean_text, path)) != RG_OK ||
		    (st = jbool(nz, "handle_chinese_chars", true, &t->norm.handle_chinese_chars,
				path)) != RG_OK ||
		    (st = jbool(nz, "lowercase", true, &t->norm.lowercase, path)) != RG_OK ||
		    (st = jbool(nz, "strip_accents", t->norm.lowercase, &t->norm.strip_accents,
				path)) != RG_OK)
			goto out;
	}
	json_object *pt = jget(root, "pre_tokenizer");
	if (pt && !json_object_is_type(pt, json_type_null)) {
		const char *pty = jtype(pt);
		if (!pty || strcmp(pty, "BertPreTokenizer") != 0) {
			st = rg_errorf(RG_ERR_UNSUPPORTED,
				       "%s: pre_tokenizer type \"%s\" is not "
				       "supported (BertPreTokenizer)",
				       path, pty ? pty : "?");
			goto out;
		}
		t->pretok = true;
	}
	if ((st = load_post_processor(t, jget(root, "post_processor"), path)) != RG_OK)
		goto out;

	json_object *added = jget(root, "added_tokens");
	if (added && json_object_is_type(added, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(added); i++) {
			json_object *a = json_object_array_get_idx(added, i);
			json_object *c = jget(a, "content"), *id = jget(a, "id");
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
			if ((st = jbool(a, "special", false, &special, path)) != RG_OK ||
			    (st = jbool(a, "normalized", !special, &normalized, path)) != RG_OK ||
			    (st = jbool(a, "lstrip", false, &lstrip, path)) != RG_OK ||
			    (st = jbool(a, "rstrip", false, &rstrip, path)) != RG_OK ||
			    (st = jbool(a, "single_word", false, &single, path)) != RG_OK)
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
	json_object *v = jget(cfg, key);
	if (v && json_object_is_type(v, json_type_object))
		v = jget(v, "content");
	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : dflt;
}

/* vocab.txt + tokenizer_config.json, as transformers' BertTokenizerFast converter builds it. */
static rg_status load_vocab_txt(rg_tokenizer *t, const char *dir, const char *vpath)
{
	char cpath[4096];
	json_object *cfg = NULL;
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
	t->norm.enabled = true;
	t->norm.clean_text = true;
	t->pretok = true;
	t->max_chars = 100;
	if ((st = jbool(cfg, "do_lower_case", true, &t->norm.lowercase, cpath)) != RG_OK ||
	    (st = jbool(cfg, "strip_accents", t->norm.lowercase, &t->norm.strip_accents, cpath)) !=
		    RG_OK ||
	    (st = jbool(cfg, "tokenize_chinese_chars", true, &t->norm.handle_chinese_chars,
			cpath)) != RG_OK)
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
		int32_t id = strmap_get(&t->words, specials[i], strlen(specials[i]));
		if (id >= 0 &&
		    (st = add_added(t, specials[i], id, false, false, false, false)) != RG_OK)
			goto out;
	}
	int32_t cls = strmap_get(&t->words, specials[2], strlen(specials[2]));
	int32_t sep = strmap_get(&t->words, specials[1], strlen(specials[1]));
	if (cls < 0 || sep < 0) {
		st = rg_errorf(RG_ERR_FORMAT,
			       "%s: cls_token \"%s\" or sep_token \"%s\" not in vocab", vpath,
			       specials[2], specials[1]);
		goto out;
	}
	t->pre_ids[t->n_pre++] = cls;
	t->post_ids[t->n_post++] = sep;
out:
	free(data);
	json_object_put(cfg);
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

typedef struct rg_idvec {
	int32_t *v;
	size_t n, cap;
} rg_idvec;

static rg_status id_push(rg_idvec *a, int32_t id)
{
	if (a->n == a->cap) {
		size_t nc = a->cap ? 2 * a->cap : 64;
		int32_t *v = realloc(a->v, nc * sizeof(*v));
		if (!v)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (ids)");
		a->v = v;
		a->cap = nc;
	}
	a->v[a->n++] = id;
	return RG_OK;
}

typedef struct rg_enc_ctx {
	rg_cpvec raw, norm, tmp;
	char *nb; /* normalized piece as UTF-8 */
	size_t nb_cap;
	rg_idvec ids;
	char **words; /* pretokenize output mode (test hook): NULL in encode */
	size_t *words_len, words_cap;
} rg_enc_ctx;

static void ctx_free(rg_enc_ctx *c)
{
	rg_cpvec_free(&c->raw);
	rg_cpvec_free(&c->norm);
	rg_cpvec_free(&c->tmp);
	free(c->nb);
	free(c->ids.v);
}

/* WordPiece on one word w[0..n) (valid UTF-8, n > 0). */
static rg_status wordpiece(const rg_tokenizer *t, const char *w, size_t n, rg_idvec *ids)
{
	size_t nchars = 0;
	for (size_t i = 0; i < n; i++)
		nchars += ((unsigned char)w[i] & 0xC0) != 0x80;
	if (nchars > (size_t)(t->max_chars < 0 ? 0 : t->max_chars))
		return id_push(ids, t->unk_id);
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
			id = strmap_get(m, w + start, end - start);
			if (id >= 0)
				break;
			end--;
			while (end > start && ((unsigned char)w[end] & 0xC0) == 0x80)
				end--;
		}
		if (id < 0) {
			ids->n = mark;
			return id_push(ids, t->unk_id);
		}
		if ((st = id_push(ids, id)) != RG_OK)
			return st;
		start = end;
	}
	return RG_OK;
}

static rg_status emit_word(const rg_tokenizer *t, rg_enc_ctx *c, const char *w, size_t n)
{
	if (n == 0)
		return RG_OK;
	if (c->words) {
		/* test hook: collect the word, NUL-terminated */
		size_t need = c->words_len[0] + n + 1;
		if (need > c->words_cap) {
			size_t nc = c->words_cap ? 2 * c->words_cap : 256;
			while (nc < need)
				nc *= 2;
			char *nw = realloc(*c->words, nc);
			if (!nw)
				return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
			*c->words = nw;
			c->words_cap = nc;
		}
		memcpy(*c->words + c->words_len[0], w, n);
		(*c->words)[c->words_len[0] + n] = '\0';
		c->words_len[0] += n + 1;
		return RG_OK;
	}
	return wordpiece(t, w, n, &c->ids);
}

/* BertPreTokenizer on s[0..n) (valid UTF-8), then WordPiece on every word. */
static rg_status pretokenize(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n)
{
	rg_status st;
	if (!t->pretok)
		return emit_word(t, c, s, n);
	size_t ws = 0; /* start of the current word */
	for (size_t i = 0; i < n;) {
		size_t k = rg_utf8_len_valid((unsigned char)s[i]);
		uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + i);
		bool white = rg_bert_is_whitespace(cp);
		if (white || rg_bert_is_punct(cp)) {
			if ((st = emit_word(t, c, s + ws, i - ws)) != RG_OK)
				return st;
			if (!white && (st = emit_word(t, c, s + i, k)) != RG_OK)
				return st;
			ws = i + k;
		}
		i += k;
	}
	return emit_word(t, c, s + ws, n - ws);
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
		if ((st = id_push(&c->ids, at->id)) != RG_OK)
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
	return pretokenize(t, c, s, n);
}

/* A raw piece between raw added tokens: decode, normalize, re-encode to UTF-8, split on
 * normalized added tokens, pre-tokenize and WordPiece. */
static rg_status raw_gap(const rg_tokenizer *t, rg_enc_ctx *c, const char *s, size_t n, size_t base)
{
	rg_status st;
	c->raw.n = 0;
	if ((st = rg_utf8_decode(s, n, base, &c->raw)) != RG_OK)
		return st;
	if ((st = rg_bert_normalize(&t->norm, c->raw.v, c->raw.n, &c->norm, &c->tmp)) != RG_OK)
		return st;
	size_t need = 4 * c->norm.n + 1;
	if (need > c->nb_cap) {
		char *nb = realloc(c->nb, need);
		if (!nb)
			return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		c->nb = nb;
		c->nb_cap = need;
	}
	size_t k = 0;
	for (size_t i = 0; i < c->norm.n; i++)
		k += rg_utf8_put(c->norm.v[i], c->nb + k);
	return split_added(t, c, true, c->nb, k, 0, norm_gap);
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
	rg_enc_ctx c = { 0 };
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
		if ((st = id_push(&c.ids, t->pre_ids[i])) != RG_OK)
			goto out;
	if ((st = split_added(t, &c, false, text, len, 0, raw_gap)) != RG_OK)
		goto out;
	for (int i = 0; i < t->n_post; i++)
		if ((st = id_push(&c.ids, t->post_ids[i])) != RG_OK)
			goto out;
	if (c.ids.n == 0) {
		/* malloc(0) may return NULL; keep *ids non-NULL on success */
		if ((st = id_push(&c.ids, 0)) != RG_OK)
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

rg_status rg_tokenizer_normalize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				 size_t *out_len)
{
	rg_enc_ctx c = { 0 };
	rg_status st;
	*out = NULL;
	*out_len = 0;
	if ((st = rg_utf8_decode(text, len, 0, &c.raw)) != RG_OK)
		goto done;
	if ((st = rg_bert_normalize(&t->norm, c.raw.v, c.raw.n, &c.norm, &c.tmp)) != RG_OK)
		goto done;
	char *s = malloc(4 * c.norm.n + 1);
	if (!s) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		goto done;
	}
	size_t k = 0;
	for (size_t i = 0; i < c.norm.n; i++)
		k += rg_utf8_put(c.norm.v[i], s + k);
	s[k] = '\0';
	*out = s;
	*out_len = k;
done:
	ctx_free(&c);
	return st;
}

rg_status rg_tokenizer_pretokenize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				   size_t *out_len)
{
	rg_enc_ctx c = { 0 };
	char *words = NULL;
	size_t words_len = 0;
	rg_status st;
	*out = NULL;
	*out_len = 0;
	c.words = &words;
	c.words_len = &words_len;
	if ((st = validate(&c, text, len)) != RG_OK)
		goto done;
	st = pretokenize(t, &c, text, len);
	if (st == RG_OK) {
		*out = words;
		*out_len = words_len;
		words = NULL;
	}
done:
	free(words);
	ctx_free(&c);
	return st;
}
