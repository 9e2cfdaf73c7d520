/* BPE model (Sennrich et al. 2016; byte-level as in GPT-2, Radford et al. 2019) with the semantics
 * of HF `tokenizers` models/bpe (model.rs merge_word, word.rs merge_all):
 *   - a word starts as its chars (continuing_subword_prefix on every char but the first,
 *     end_of_word_suffix on the last); a char not in the vocabulary becomes unk_token (runs fused
 *     when fuse_unk), or is dropped when there is no unk_token;
 *   - merges are applied lowest rank first (ties: leftmost) through a min-heap of candidate
 *     pairs, stale candidates skipped exactly as HF skips them (the pair at the position must
 *     still merge into the candidate's id);
 *   - ignore_merges: a word that is itself in the vocabulary is that one token.
 * dropout (other than null / 0) and byte_fallback = true are refused at load. No cache: encode
 * reads the model only. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "core/vec.h"
#include "tokenizer/tok_internal.h"

typedef struct rg_pair_ent {
	uint64_t key; /* (a << 32) | b; 0 with rank UINT32_MAX = empty */
	uint32_t rank;
	int32_t new_id;
} rg_pair_ent;

struct rg_bpe {
	rg_strmap vocab;
	rg_pair_ent *pairs; /* open addressing, (pair_mask + 1) slots */
	size_t pair_mask, n_pairs;
	char *prefix, *suffix; /* NULL: none */
	size_t prefix_len, suffix_len;
	int32_t unk_id; /* -1: no unk_token */
	bool fuse_unk, ignore_merges;
	int32_t max_id;
};

static uint64_t pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static size_t pair_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k;
}

/* The merge of pair (a, b), or NULL. */
static const rg_pair_ent *pair_get(const rg_bpe *b, int32_t x, int32_t y)
{
	if (!b->pairs)
		return NULL;
	uint64_t k = pair_key(x, y);
	for (size_t i = pair_hash(k) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
		const rg_pair_ent *e = &b->pairs[i];
		if (e->rank == UINT32_MAX)
			return NULL;
		if (e->key == k)
			return e;
	}
}

/* Insert or overwrite (a later merge of the same pair wins, as HF's collect into a map). The
 * table is sized once for n_merges, so it never fills. */
static void pair_put(rg_bpe *b, int32_t x, int32_t y, uint32_t rank, int32_t new_id)
{
	uint64_t k = pair_key(x, y);
	size_t i = pair_hash(k) & b->pair_mask;
	while (b->pairs[i].rank != UINT32_MAX && b->pairs[i].key != k)
		i = (i + 1) & b->pair_mask;
	if (b->pairs[i].rank == UINT32_MAX)
		b->n_pairs++;
	b->pairs[i] = (rg_pair_ent){ k, rank, new_id };
}

void rg_bpe_free(rg_bpe *b)
{
	if (!b)
		return;
	rg_strmap_free(&b->vocab);
	free(b->pairs);
	free(b->prefix);
	free(b->suffix);
	free(b);
}

void rg_bpe_scratch_free(rg_bpe_scratch *s)
{
	free(s->sym);
	free(s->heap);
	free(s->piece);
	memset(s, 0, sizeof(*s));
}

int32_t rg_bpe_max_id(const rg_bpe *b)
{
	return b->max_id;
}

const rg_strmap *rg_bpe_vocab(const rg_bpe *b)
{
	return &b->vocab;
}

/* Optional string field: absent / null -> NULL; other non-strings -> RG_ERR_FORMAT. */
static rg_status opt_string(json_object *m, const char *key, char **out, size_t *len,
			    const char *path)
{
	json_object *v = rg_tok_jget(m, key);
	*out = NULL;
	*len = 0;
	if (rg_tok_jnull(v))
		return RG_OK;
	if (!json_object_is_type(v, json_type_string))
		return rg_errorf(RG_ERR_FORMAT, "%s: BPE \"%s\" must be a string or null", path, key);
	*len = (size_t)json_object_get_string_len(v);
	if (*len == 0)
		return RG_OK; /* "" behaves as null */
	if (!(*out = strdup(json_object_get_string(v))))
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	return RG_OK;
}

/* merges[i] as its two halves: "a b" (exactly one space, as HF's legacy format) or ["a", "b"]. */
static rg_status merge_parts(json_object *m, size_t i, const char *path, const char **a,
			     size_t *al, const char **b, size_t *bl, bool *tuple)
{
	if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2 &&
	    json_object_is_type(json_object_array_get_idx(m, 0), json_type_string) &&
	    json_object_is_type(json_object_array_get_idx(m, 1), json_type_string)) {
		json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
		*a = json_object_get_string(x);
		*al = (size_t)json_object_get_string_len(x);
		*b = json_object_get_string(y);
		*bl = (size_t)json_object_get_string_len(y);
		*tuple = true;
		return RG_OK;
	}
	if (json_object_is_type(m, json_type_string)) {
		const char *s = json_object_get_string(m);
		const char *sp = strchr(s, ' ');
		if (sp && !strchr(sp + 1, ' ')) {
			*a = s;
			*al = (size_t)(sp - s);
			*b = sp + 1;
			*bl = strlen(sp + 1);
			*tuple = false;
			return RG_OK;
		}
	}
	return rg_errorf(RG_ERR_FORMAT,
			 "%s: BPE merges[%zu] is neither \"a b\" (one space) nor [\"a\", \"b\"]",
			 path, i);
}

static rg_status load_merges(rg_bpe *b, json_object *merges, const char *path)
{
	size_t n = json_object_array_length(merges), cap = 16;
	char *buf = NULL;
	size_t buf_cap = 0, rank = 0;
	rg_status st = RG_OK;
	int kind = -1; /* 1: tuples, 0: strings (HF refuses a mix) */

	while (cap < 2 * n + 2)
		cap *= 2;
	b->pairs = malloc(cap * sizeof(*b->pairs));
	if (!b->pairs)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (merges)", path);
	for (size_t i = 0; i < cap; i++)
		b->pairs[i] = (rg_pair_ent){ 0, UINT32_MAX, -1 };
	b->pair_mask = cap - 1;
	for (size_t i = 0; i < n; i++) {
		json_object *m = json_object_array_get_idx(merges, i);
		const char *x = NULL, *y = NULL;
		size_t xl = 0, yl = 0;
		bool tuple = false;
		if ((st = merge_parts(m, i, path, &x, &xl, &y, &yl, &tuple)) != RG_OK)
			goto out;
		if (kind >= 0 && kind != tuple) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: BPE merges mix strings and pairs", path);
			goto out;
		}
		kind = tuple;
		if (!tuple && xl >= 8 && strncmp(x, "#version", 8) == 0)
			continue; /* HF's legacy reader skips the merges.txt header */
		int32_t xi = rg_strmap_get(&b->vocab, x, xl), yi = rg_strmap_get(&b->vocab, y, yl);
		if (xi < 0 || yi < 0) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: BPE merges[%zu]: token \"%.*s\" is not in "
						      "the vocabulary",
				       path, i, (int)(xi < 0 ? xl : yl), xi < 0 ? x : y);
			goto out;
		}
		if (yl < b->prefix_len) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "%s: BPE merges[%zu]: \"%.*s\" is shorter than the "
				       "continuing_subword_prefix",
				       path, i, (int)yl, y);
			goto out;
		}
		/* the merged token: a + b without b's continuing_subword_prefix */
		size_t ml = xl + yl - b->prefix_len;
		if (!rg_vec_reserve((void **)&buf, &buf_cap, ml + 1, 1, 64)) {
			st = rg_errorf(RG_ERR_OOM, "%s: out of memory (merges)", path);
			goto out;
		}
		memcpy(buf, x, xl);
		memcpy(buf + xl, y + b->prefix_len, yl - b->prefix_len);
		int32_t id = rg_strmap_get(&b->vocab, buf, ml);
		if (id < 0) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "%s: BPE merges[%zu]: merged token \"%.*s\" is not in the "
				       "vocabulary",
				       path, i, (int)ml, buf);
			goto out;
		}
		if (rank >= UINT32_MAX - 1) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: too many BPE merges", path);
			goto out;
		}
		pair_put(b, xi, yi, (uint32_t)rank++, id);
	}
out:
	free(buf);
	return st;
}

rg_status rg_bpe_load(json_object *model, const char *path, rg_bpe **out)
{
	rg_status st;
	rg_bpe *b = calloc(1, sizeof(*b));
	*out = NULL;
	if (!b)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory (BPE)", path);
	b->max_id = -1;
	b->unk_id = -1;

	json_object *dropout = rg_tok_jget(model, "dropout");
	if (!rg_tok_jnull(dropout) &&
	    !((json_object_is_type(dropout, json_type_double) ||
	       json_object_is_type(dropout, json_type_int)) &&
	      json_object_get_double(dropout) == 0.0)) {
		st = rg_errorf(RG_ERR_UNSUPPORTED,
			       "%s: BPE dropout %s is not supported (only null: encoding is "
			       "deterministic)",
			       path, json_object_to_json_string(dropout));
		goto fail;
	}
	bool byte_fallback;
	if ((st = rg_tok_jbool(model, "byte_fallback", false, &byte_fallback, path)) != RG_OK ||
	    (st = rg_tok_jbool(model, "fuse_unk", false, &b->fuse_unk, path)) != RG_OK ||
	    (st = rg_tok_jbool(model, "ignore_merges", false, &b->ignore_merges, path)) != RG_OK)
		goto fail;
	if (byte_fallback) {
		st = rg_errorf(RG_ERR_UNSUPPORTED, "%s: BPE byte_fallback true is not supported", path);
		goto fail;
	}
	if ((st = opt_string(model, "continuing_subword_prefix", &b->prefix, &b->prefix_len,
			     path)) != RG_OK ||
	    (st = opt_string(model, "end_of_word_suffix", &b->suffix, &b->suffix_len, path)) !=
		    RG_OK)
		goto fail;

	json_object *vocab = rg_tok_jget(model, "vocab"), *merges = rg_tok_jget(model, "merges");
	if (!vocab || !json_object_is_type(vocab, json_type_object) || !merges ||
	    !json_object_is_type(merges, json_type_array)) {
		st = rg_errorf(RG_ERR_FORMAT,
			       "%s: BPE model needs \"vocab\" (object) and \"merges\" (array)", path);
		goto fail;
	}
	json_object_object_foreach(vocab, key, val)
	{
		if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 0 ||
		    json_object_get_int64(val) > INT32_MAX) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: vocab id of \"%s\" is not a valid id", path,
				       key);
			goto fail;
		}
		int32_t id = (int32_t)json_object_get_int64(val);
		if ((st = rg_strmap_put(&b->vocab, key, strlen(key), id)) != RG_OK)
			goto fail;
		if (id > b->max_id)
			b->max_id = id;
	}
	json_object *unk = rg_tok_jget(model, "unk_token");
	if (!rg_tok_jnull(unk)) {
		const char *u = json_object_get_string(unk);
		if (!json_object_is_type(unk, json_type_string) ||
		    (b->unk_id = rg_strmap_get(&b->vocab, u, strlen(u))) < 0) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: BPE unk_token %s is not in the vocabulary",
				       path, json_object_to_json_string(unk));
			goto fail;
		}
	}
	if ((st = load_merges(b, merges, path)) != RG_OK)
		goto fail;
	*out = b;
	return RG_OK;
fail:
	rg_bpe_free(b);
	return st;
}

/* ---- encoding ---- */

static bool merge_less(const rg_bpe_merge *x, const rg_bpe_merge *y)
{
	return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static rg_status heap_push(rg_bpe_scratch *sc, rg_bpe_merge m)
{
	if (!rg_vec_reserve((void **)&sc->heap, &sc->cap_heap, sc->n_heap + 1, sizeof(*sc->heap),
			    64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (BPE)");
	size_t i = sc->n_heap++;
	while (i > 0 && merge_less(&m, &sc->heap[(i - 1) / 2])) {
		sc->heap[i] = sc->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	sc->heap[i] = m;
	return RG_OK;
}

static rg_bpe_merge heap_pop(rg_bpe_scratch *sc)
{
	rg_bpe_merge top = sc->heap[0], last = sc->heap[--sc->n_heap];
	size_t i = 0, n = sc->n_heap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && merge_less(&sc->heap[c + 1], &sc->heap[c]))
			c++;
		if (!merge_less(&sc->heap[c], &last))
			break;
		sc->heap[i] = sc->heap[c];
		i = c;
	}
	if (n)
		sc->heap[i] = last;
	return top;
}

static rg_status sym_add(rg_bpe_scratch *sc, int32_t c, uint32_t len)
{
	if (!rg_vec_reserve((void **)&sc->sym, &sc->cap_sym, sc->n_sym + 1, sizeof(*sc->sym), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (BPE)");
	int32_t n = (int32_t)sc->n_sym;
	if (n)
		sc->sym[n - 1].next = n;
	sc->sym[sc->n_sym++] = (rg_bpe_sym){ c, n - 1, -1, len };
	return RG_OK;
}

/* HF Word::merge_all without dropout. */
static rg_status merge_all(const rg_bpe *b, rg_bpe_scratch *sc)
{
	rg_status st;
	rg_bpe_sym *s;
	sc->n_heap = 0;
	for (size_t i = 0; i + 1 < sc->n_sym; i++) {
		const rg_pair_ent *m = pair_get(b, sc->sym[i].c, sc->sym[i + 1].c);
		if (m && (st = heap_push(sc, (rg_bpe_merge){ m->rank, (uint32_t)i, m->new_id })) !=
				 RG_OK)
			return st;
	}
	while (sc->n_heap) {
		rg_bpe_merge top = heap_pop(sc);
		s = sc->sym;
		if (s[top.pos].len == 0 || s[top.pos].next == -1)
			continue;
		int32_t next = s[top.pos].next;
		rg_bpe_sym right = s[next];
		const rg_pair_ent *m = pair_get(b, s[top.pos].c, right.c);
		if (!m || m->new_id != top.new_id)
			continue; /* stale */
		s[top.pos].c = top.new_id;
		s[top.pos].len += right.len;
		s[top.pos].next = right.next;
		s[next].len = 0;
		if (right.next >= 0)
			s[right.next].prev = (int32_t)top.pos;
		rg_bpe_sym cur = s[top.pos];
		if (cur.prev >= 0 && (m = pair_get(b, s[cur.prev].c, cur.c)) &&
		    (st = heap_push(sc, (rg_bpe_merge){ m->rank, (uint32_t)cur.prev, m->new_id })) !=
			    RG_OK)
			return st;
		if (cur.next >= 0 && (m = pair_get(b, cur.c, sc->sym[cur.next].c)) &&
		    (st = heap_push(sc, (rg_bpe_merge){ m->rank, top.pos, m->new_id })) != RG_OK)
			return st;
	}
	return RG_OK;
}

rg_status rg_bpe_encode(const rg_bpe *b, const char *w, size_t n, rg_bpe_scratch *sc,
			rg_idvec *ids)
{
	rg_status st;
	int32_t id;
	if (b->ignore_merges && (id = rg_strmap_get(&b->vocab, w, n)) >= 0)
		return rg_idvec_push_len(ids, id, (uint32_t)n);

	/* HF merge_word: the word's chars (with prefix / suffix) as symbols */
	int32_t unk_len = 0; /* pending unk of unk_len bytes; 0 none */
	sc->n_sym = 0;
	for (size_t i = 0; i < n;) {
		size_t k = rg_utf8_len_valid((unsigned char)w[i]);
		bool first = i == 0, last = i + k == n;
		const char *piece = w + i;
		size_t pl = k;
		if ((!first && b->prefix) || (last && b->suffix)) {
			size_t need = b->prefix_len + k + b->suffix_len;
			if (!rg_vec_reserve((void **)&sc->piece, &sc->cap_piece, need, 1, 64))
				return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (BPE)");
			pl = 0;
			if (!first && b->prefix) {
				memcpy(sc->piece, b->prefix, b->prefix_len);
				pl = b->prefix_len;
			}
			memcpy(sc->piece + pl, w + i, k);
			pl += k;
			if (last && b->suffix) {
				memcpy(sc->piece + pl, b->suffix, b->suffix_len);
				pl += b->suffix_len;
			}
			piece = sc->piece;
		}
		if ((id = rg_strmap_get(&b->vocab, piece, pl)) >= 0) {
			if (unk_len && (st = sym_add(sc, b->unk_id, (uint32_t)unk_len)) != RG_OK)
				return st;
			unk_len = 0;
			if ((st = sym_add(sc, id, (uint32_t)k)) != RG_OK)
				return st;
		} else if (b->unk_id >= 0) {
			if (unk_len && !b->fuse_unk) {
				if ((st = sym_add(sc, b->unk_id, (uint32_t)unk_len)) != RG_OK)
					return st;
				unk_len = 0;
			}
			unk_len += (int32_t)k;
		} /* else: no unk_token, the char is dropped */
		i += k;
	}
	if (unk_len && (st = sym_add(sc, b->unk_id, (uint32_t)unk_len)) != RG_OK)
		return st;
	if ((st = merge_all(b, sc)) != RG_OK)
		return st;
	for (size_t i = 0; i < sc->n_sym; i++)
		if (sc->sym[i].len && (st = rg_idvec_push_len(ids, sc->sym[i].c, sc->sym[i].len)) != RG_OK)
			return st;
	return RG_OK;
}
