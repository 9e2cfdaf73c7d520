/* MarianMT's tokenizer (marian.h): two SentencePiece models (spm.h) and vocab.json, put together
 * as transformers' MarianTokenizer does. */
#include "tokenizer/marian.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "core/utf8.h"
#include "tokenizer/spm.h"
#include "tokenizer/tok_internal.h"

#define MARIAN_MAX_JSON ((off_t)256 << 20)
#define MARIAN_MAX_ID (1 << 24) /* ids are below this: the inverse map is one array */
#define MARIAN_MAX_SPECIAL 64

/* {token: id} and its inverse. */
typedef struct marian_vocab {
	rg_strmap map;
	uint32_t *inv; /* (n_inv) 1 + index into map.ents of id's token; 0: no token */
	int32_t n_inv; /* 1 + the largest id */
	int32_t size;  /* number of entries (len(vocab.json)) */
} marian_vocab;

typedef struct marian_special {
	char *s; /* NUL-terminated, n bytes */
	size_t n;
	int32_t id; /* in vocab.json */
} marian_special;

struct rg_marian_tok {
	rg_spm *spm[2];          /* [RG_MARIAN_SOURCE], [RG_MARIAN_TARGET] */
	marian_vocab vocab;      /* vocab.json */
	marian_vocab tgt_vocab;  /* target_vocab.json, with separate_vocabs only */
	bool separate;
	bool clean_up;           /* clean_up_tokenization_spaces */
	marian_special special[MARIAN_MAX_SPECIAL]; /* eos, unk, pad, then the additional ones */
	int n_special;
	int32_t eos_id, unk_id, pad_id;
};

enum { SP_EOS = 0, SP_UNK = 1, SP_PAD = 2 };

static const marian_vocab *side_vocab(const rg_marian_tok *t, rg_marian_side side)
{
	return side == RG_MARIAN_TARGET && t->separate ? &t->tgt_vocab : &t->vocab;
}

static void vocab_free(marian_vocab *v)
{
	rg_strmap_free(&v->map);
	free(v->inv);
	memset(v, 0, sizeof(*v));
}

/* The token of id in v (NULL when none), *n bytes. */
static const char *vocab_token(const marian_vocab *v, int32_t id, size_t *n)
{
	if (id < 0 || id >= v->n_inv || !v->inv[id])
		return NULL;
	const rg_strmap_ent *e = &v->map.ents[v->inv[id] - 1];
	*n = e->len;
	return v->map.arena + e->off;
}

/* Read a {token: id} file: an object of integer ids in [0, MARIAN_MAX_ID). */
static rg_status vocab_load(const char *path, marian_vocab *v)
{
	json_object *root = NULL;
	rg_status st;

	if ((st = rg_json_read_file(path, MARIAN_MAX_JSON, &root)) != RG_OK)
		return st;
	if (!json_object_is_type(root, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: must be a JSON object {token: id}", path);
		goto out_put_root;
	}
	int32_t max_id = -1;
	json_object_object_foreach(root, key, val)
	{
		int64_t id = json_object_get_int64(val);
		if (!json_object_is_type(val, json_type_int) || id < 0 || id >= MARIAN_MAX_ID) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "%s: the id of \"%s\" is not an integer in [0, %d)", path, key,
				       MARIAN_MAX_ID);
			goto out_put_root;
		}
		if ((st = rg_strmap_put(&v->map, key, strlen(key), (int32_t)id)) != RG_OK)
			goto out_put_root;
		if (id > max_id)
			max_id = (int32_t)id;
	}
	v->size = (int32_t)v->map.n_ents;
	v->n_inv = max_id + 1;
	v->inv = calloc(v->n_inv > 0 ? (size_t)v->n_inv : 1, sizeof(*v->inv));
	if (!v->inv) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (vocabulary)", path);
		goto out_put_root;
	}
	/* {v: k for k, v in encoder.items()}: a later token of the same id wins */
	for (size_t e = 0; e < v->map.n_ents; e++)
		v->inv[v->map.ents[e].id] = (uint32_t)(e + 1);
out_put_root:
	json_object_put(root);
	return st;
}

/* A token field of tokenizer_config.json: a string or {"content": string}; absent / null:
 * dflt. *out: a malloc'd copy. */
static rg_status cfg_token(json_object *cfg, const char *key, const char *dflt, const char *path,
			   char **out)
{
	json_object *v = rg_tok_jget(cfg, key);
	const char *s = dflt;

	if (v && json_object_is_type(v, json_type_object))
		v = rg_tok_jget(v, "content");
	if (v && json_object_is_type(v, json_type_string))
		s = json_object_get_string(v);
	else if (!rg_tok_jnull(v))
		return rg_errorf(RG_ERR_FORMAT, "%s: %s must be a string or {\"content\": string}",
				 path, key);
	if (!(*out = strdup(s)))
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	return RG_OK;
}

/* Add a special token (the text owned from now on) with its vocab.json id. */
static rg_status add_special(rg_marian_tok *t, char *s, const char *vpath)
{
	if (t->n_special == MARIAN_MAX_SPECIAL) {
		free(s);
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: more than %d special tokens", vpath,
				 MARIAN_MAX_SPECIAL - 3);
	}
	marian_special *sp = &t->special[t->n_special++];
	sp->s = s;
	sp->n = strlen(s);
	sp->id = rg_strmap_get(&t->vocab.map, s, sp->n);
	if (sp->id < 0)
		return rg_errorf(RG_ERR_FORMAT, "%s: special token \"%s\" is not in the vocabulary",
				 vpath, s);
	if (sp->n == 0)
		return rg_errorf(RG_ERR_FORMAT, "%s: empty special token", vpath);
	return RG_OK;
}

/* tokenizer_config.json (optional): the special tokens, separate_vocabs,
 * clean_up_tokenization_spaces. vocab.json is loaded already. */
static rg_status load_config(rg_marian_tok *t, const char *dir, const char *vpath)
{
	static const char *const names[3] = { "eos_token", "unk_token", "pad_token" };
	static const char *const dflts[3] = { "</s>", "<unk>", "<pad>" };
	json_object *cfg = NULL;
	char *cpath = rg_path_join(dir, "tokenizer_config.json");
	struct stat sb;
	rg_status st = RG_OK;

	if (!cpath)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	/* present: must load (a FIFO is refused by rg_file_read, not waited on) */
	if (stat(cpath, &sb) == 0 && (st = rg_json_read_file(cpath, MARIAN_MAX_JSON, &cfg)) != RG_OK)
		goto out_free_path;
	if (cfg && !json_object_is_type(cfg, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: must be a JSON object", cpath);
		goto out_put_cfg;
	}
	for (int i = 0; i < 3; i++) {
		char *s;
		if ((st = cfg_token(cfg, names[i], dflts[i], cpath, &s)) != RG_OK ||
		    (st = add_special(t, s, vpath)) != RG_OK)
			goto out_put_cfg;
	}
	json_object *extra = rg_tok_jget(cfg, "additional_special_tokens");
	if (!rg_tok_jnull(extra)) {
		if (!json_object_is_type(extra, json_type_array)) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: additional_special_tokens must be an array",
				       cpath);
			goto out_put_cfg;
		}
		for (size_t i = 0; i < json_object_array_length(extra); i++) {
			json_object *e = json_object_array_get_idx(extra, i);
			if (e && json_object_is_type(e, json_type_object))
				e = rg_tok_jget(e, "content");
			if (!e || !json_object_is_type(e, json_type_string)) {
				st = rg_errorf(RG_ERR_FORMAT,
					       "%s: additional_special_tokens[%zu] must be a string "
					       "or {\"content\": string}", cpath, i);
				goto out_put_cfg;
			}
			char *s = strdup(json_object_get_string(e));
			if (!s) {
				st = rg_errorf(RG_ERR_OOM, "%s: out of memory", cpath);
				goto out_put_cfg;
			}
			if ((st = add_special(t, s, vpath)) != RG_OK)
				goto out_put_cfg;
		}
	}
	if ((st = rg_tok_jbool(cfg, "separate_vocabs", false, &t->separate, cpath)) != RG_OK ||
	    (st = rg_tok_jbool(cfg, "clean_up_tokenization_spaces", false, &t->clean_up, cpath)) !=
		    RG_OK)
		goto out_put_cfg;
	t->eos_id = t->special[SP_EOS].id;
	t->unk_id = t->special[SP_UNK].id;
	t->pad_id = t->special[SP_PAD].id;
out_put_cfg:
	json_object_put(cfg);
out_free_path:
	free(cpath);
	return st;
}

rg_status rg_marian_tok_load(const char *dir, rg_marian_tok **out)
{
	static const char *const spm_names[2] = { "source.spm", "target.spm" };
	rg_marian_tok *t;
	char *path = NULL;
	rg_status st;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_marian_tok_load: out is NULL");
	*out = NULL;
	if (!dir)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_marian_tok_load: dir is NULL");
	if (!(t = calloc(1, sizeof(*t))))
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (Marian tokenizer)", dir);
	for (int i = 0; i < 2; i++) {
		if (!(path = rg_path_join(dir, spm_names[i]))) {
			st = rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
			goto out_free_tok;
		}
		if ((st = rg_spm_load(path, &t->spm[i])) != RG_OK)
			goto out_free_path;
		free(path);
	}
	if (!(path = rg_path_join(dir, "vocab.json"))) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
		goto out_free_tok;
	}
	if ((st = vocab_load(path, &t->vocab)) != RG_OK ||
	    (st = load_config(t, dir, path)) != RG_OK)
		goto out_free_path;
	free(path);
	if (t->separate) {
		if (!(path = rg_path_join(dir, "target_vocab.json"))) {
			st = rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
			goto out_free_tok;
		}
		if ((st = vocab_load(path, &t->tgt_vocab)) != RG_OK)
			goto out_free_path;
		free(path);
	}
	*out = t;
	return RG_OK;

out_free_path:
	free(path);
out_free_tok:
	rg_marian_tok_free(t);
	return st;
}

void rg_marian_tok_free(rg_marian_tok *t)
{
	if (!t)
		return;
	rg_spm_free(t->spm[0]);
	rg_spm_free(t->spm[1]);
	vocab_free(&t->vocab);
	vocab_free(&t->tgt_vocab);
	for (int i = 0; i < t->n_special; i++)
		free(t->special[i].s);
	free(t);
}

/* The longest special token at s[0..n), or NULL. */
static const marian_special *special_at(const rg_marian_tok *t, const char *s, size_t n)
{
	const marian_special *best = NULL;
	for (int i = 0; i < t->n_special; i++) {
		const marian_special *sp = &t->special[i];
		if (sp->n <= n && (!best || sp->n > best->n) && memcmp(s, sp->s, sp->n) == 0)
			best = sp;
	}
	return best;
}

/* vocab[tok], unk's id when absent (the 4.x _convert_token_to_id). */
static int32_t lookup(const rg_marian_tok *t, const marian_vocab *v, const char *s, size_t n)
{
	int32_t id = rg_strmap_get(&v->map, s, n);
	return id >= 0 ? id : t->unk_id;
}

/* One stretch of text between special tokens: _tokenize (language code, then the .spm), each
 * token through the vocabulary. */
static rg_status encode_stretch(const rg_marian_tok *t, rg_marian_side side, const char *s,
				size_t n, rg_idvec *out)
{
	const marian_vocab *v = side_vocab(t, side);
	rg_status st;

	if (n >= 2 && s[0] == '>' && s[1] == '>') { /* remove_language_code */
		const char *e = memmem(s, n, "<<", 2);
		if (e) {
			size_t cn = (size_t)(e - s) + 2;
			if ((st = rg_idvec_push(out, lookup(t, v, s, cn))) != RG_OK)
				return st;
			s += cn;
			n -= cn;
		}
	}
	if (n == 0)
		return RG_OK;
	char *pieces;
	size_t *starts, np;
	if ((st = rg_spm_encode_pieces(t->spm[side], s, n, &pieces, &starts, &np)) != RG_OK)
		return st;
	for (size_t i = 0; i < np && st == RG_OK; i++)
		st = rg_idvec_push(out, lookup(t, v, pieces + starts[i],
					       starts[i + 1] - starts[i] - 1));
	free(pieces);
	free(starts);
	return st;
}

rg_status rg_marian_tok_encode(const rg_marian_tok *t, rg_marian_side side, const char *text,
			       size_t len, bool add_eos, int32_t **ids, size_t *n_ids)
{
	rg_idvec out = { 0 };
	rg_status st = RG_OK;
	uint32_t c;

	if (ids)
		*ids = NULL;
	if (n_ids)
		*n_ids = 0;
	if (!t || !ids || !n_ids || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_marian_tok_encode: NULL argument");
	if (side != RG_MARIAN_SOURCE && side != RG_MARIAN_TARGET)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_marian_tok_encode: side %d is neither "
				 "source (0) nor target (1)", (int)side);
	for (size_t i = 0, k; i < len; i += k)
		if ((k = rg_utf8_next(text, len, i, &c)) == 0)
			return rg_errorf(RG_ERR_INVALID_UTF8,
					 "invalid UTF-8 at byte offset %zu (byte 0x%02x)", i,
					 (unsigned char)text[i]);
	/* the added-token split: special tokens whole, leftmost first, the longest at a place */
	size_t from = 0;
	for (size_t i = 0; i < len && st == RG_OK;) {
		const marian_special *sp = special_at(t, text + i, len - i);
		if (!sp) {
			i++;
			continue;
		}
		if ((st = encode_stretch(t, side, text + from, i - from, &out)) == RG_OK)
			st = rg_idvec_push(&out, sp->id);
		i += sp->n;
		from = i;
	}
	if (st == RG_OK && from < len)
		st = encode_stretch(t, side, text + from, len - from, &out);
	if (st == RG_OK && add_eos)
		st = rg_idvec_push(&out, t->eos_id);
	if (st == RG_OK && !out.v && !(out.v = malloc(sizeof(int32_t))))
		st = rg_errorf(RG_ERR_OOM, "Marian tokenizer: out of memory (ids)");
	if (st != RG_OK) {
		rg_idvec_free(&out);
		return st;
	}
	*ids = out.v;
	*n_ids = out.n;
	return RG_OK;
}

/* Python's str.isspace() for one code point (what str.strip() strips). */
static bool py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* s.replace(from, to) in place, for a to no longer than from; returns the new length. */
static size_t replace_all(char *s, size_t n, const char *from, const char *to)
{
	size_t fn = strlen(from), tn = strlen(to), r = 0, w = 0;
	while (r < n) {
		if (r + fn <= n && memcmp(s + r, from, fn) == 0) {
			memcpy(s + w, to, tn);
			w += tn;
			r += fn;
		} else {
			s[w++] = s[r++];
		}
	}
	return w;
}

/* convert_tokens_to_string's end (▁ -> space, strip) and clean_up_tokenization; b->data is
 * valid UTF-8 or at least what the pieces were. Returns the text as *text / *len. */
static void finish_text(const rg_marian_tok *t, rg_buf *b, char **text, size_t *len)
{
	size_t n = replace_all(b->data, b->len, "\xe2\x96\x81", " ");
	size_t lo = 0, hi = n, k;
	uint32_t c;

	while (lo < hi && (k = rg_utf8_next(b->data, hi, lo, &c)) != 0 && py_space(c))
		lo += k;
	while (hi > lo) { /* the last code point: back over continuation bytes */
		size_t s = hi - 1;
		while (s > lo && ((unsigned char)b->data[s] & 0xC0) == 0x80)
			s--;
		if ((k = rg_utf8_next(b->data, hi, s, &c)) == 0 || s + k != hi || !py_space(c))
			break;
		hi = s;
	}
	memmove(b->data, b->data + lo, hi - lo);
	n = hi - lo;
	if (t->clean_up) { /* transformers' clean_up_tokenization, in its order */
		static const char *const rep[10][2] = {
			{ " .", "." }, { " ?", "?" },     { " !", "!" },     { " ,", "," },
			{ " ' ", "'" }, { " n't", "n't" }, { " 'm", "'m" },   { " 's", "'s" },
			{ " 've", "'ve" }, { " 're", "'re" },
		};
		for (int i = 0; i < 10; i++)
			n = replace_all(b->data, n, rep[i][0], rep[i][1]);
	}
	b->data[n] = '\0';
	*text = b->data;
	*len = n;
	b->data = NULL;
}

/* The pending run of ordinary pieces through target.spm's decoder, appended to b. */
static rg_status flush_run(const rg_marian_tok *t, const char **p, const size_t *pl, size_t *np,
			   rg_buf *b)
{
	char *d;
	size_t dn;
	rg_status st;

	if (*np == 0)
		return RG_OK;
	if ((st = rg_spm_decode_pieces(t->spm[RG_MARIAN_TARGET], p, pl, *np, &d, &dn)) != RG_OK)
		return st;
	rg_buf_put(b, d, dn);
	free(d);
	*np = 0;
	return RG_OK;
}

rg_status rg_marian_tok_decode(const rg_marian_tok *t, const int32_t *ids, size_t n,
			       bool skip_special, bool skip_unk, char **text, size_t *len)
{
	const marian_vocab *v;
	const char **p = NULL;
	size_t *pl = NULL, np = 0;
	rg_buf b;
	rg_status st = RG_OK;

	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	if (!t || !text || !len || (!ids && n))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_marian_tok_decode: NULL argument");
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "Marian decode: id %d at index %zu is negative", (int)ids[i],
					 i);
	v = side_vocab(t, RG_MARIAN_TARGET);
	rg_buf_init(&b);
	p = malloc((n ? n : 1) * sizeof(*p));
	pl = malloc((n ? n : 1) * sizeof(*pl));
	if (!p || !pl || !rg_buf_reserve(&b, 64)) {
		st = rg_errorf(RG_ERR_OOM, "Marian decode: out of memory");
		goto out_free;
	}
	for (size_t i = 0; i < n && st == RG_OK; i++) {
		size_t tn;
		const char *tok = vocab_token(v, ids[i], &tn);
		const marian_special *sp = NULL;
		bool known = tok != NULL;
		if (!known) { /* _convert_id_to_token: the unk token, though not unk's id */
			tok = t->special[SP_UNK].s;
			tn = t->special[SP_UNK].n;
		}
		for (int k = 0; k < t->n_special && !sp; k++)
			if (t->special[k].n == tn && memcmp(t->special[k].s, tok, tn) == 0)
				sp = &t->special[k];
		/* an id is special when its token is (vocab.json's ids of the special tokens) */
		if (sp && known && (sp == &t->special[SP_UNK] ? skip_unk : skip_special))
			continue;
		if (!sp) {
			p[np] = tok;
			pl[np++] = tn;
			continue;
		}
		/* a special token is not decoded by the .spm: its text and a space */
		if ((st = flush_run(t, p, pl, &np, &b)) == RG_OK) {
			rg_buf_put(&b, tok, tn);
			rg_buf_put(&b, " ", 1);
		}
	}
	if (st == RG_OK)
		st = flush_run(t, p, pl, &np, &b);
	if (st == RG_OK && b.oom)
		st = rg_errorf(RG_ERR_OOM, "Marian decode: out of memory");
	if (st == RG_OK)
		finish_text(t, &b, text, len);
out_free:
	free(p);
	free(pl);
	rg_buf_free(&b);
	return st;
}

int32_t rg_marian_tok_token_to_id(const rg_marian_tok *t, const char *tok, size_t len)
{
	if (!t || (!tok && len))
		return -1;
	return rg_strmap_get(&t->vocab.map, tok ? tok : "", len);
}

const char *rg_marian_tok_id_to_token(const rg_marian_tok *t, int32_t id, size_t *len)
{
	size_t n = 0;
	const char *s = t ? vocab_token(side_vocab(t, RG_MARIAN_TARGET), id, &n) : NULL;
	if (len)
		*len = s ? n : 0;
	return s;
}

int32_t rg_marian_tok_eos_id(const rg_marian_tok *t)
{
	return t ? t->eos_id : -1;
}

int32_t rg_marian_tok_unk_id(const rg_marian_tok *t)
{
	return t ? t->unk_id : -1;
}

int32_t rg_marian_tok_pad_id(const rg_marian_tok *t)
{
	return t ? t->pad_id : -1;
}

int32_t rg_marian_tok_vocab_size(const rg_marian_tok *t)
{
	return t ? t->vocab.size : 0;
}

int32_t rg_marian_tok_max_id(const rg_marian_tok *t)
{
	int32_t a, b;

	if (!t)
		return -1;
	a = t->vocab.n_inv - 1;
	b = t->separate ? t->tgt_vocab.n_inv - 1 : -1;
	return a > b ? a : b;
}

bool rg_marian_tok_is_special(const rg_marian_tok *t, int32_t id)
{
	for (int i = 0; t && i < t->n_special; i++)
		if (t->special[i].id == id)
			return true;
	return false;
}
