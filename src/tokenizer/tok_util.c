/* Helpers shared by the tokenizer components (tok_internal.h): the string -> id map, JSON field
 * access, the id vector. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "core/vec.h"

static uint32_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ull;
	}
	return (uint32_t)(h ^ (h >> 32));
}

void rg_strmap_free(rg_strmap *m)
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
int32_t rg_strmap_get(const rg_strmap *m, const char *s, size_t n)
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
rg_status rg_strmap_put(rg_strmap *m, const char *s, size_t n, int32_t id)
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


json_object *rg_tok_jget(json_object *o, const char *key)
{
	json_object *v = NULL;
	if (!o || !json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v))
		return NULL;
	return v;
}

bool rg_tok_jnull(json_object *v)
{
	return !v || json_object_is_type(v, json_type_null);
}

rg_status rg_tok_jbool(json_object *o, const char *key, bool dflt, bool *out, const char *where)
{
	json_object *v = rg_tok_jget(o, key);
	if (rg_tok_jnull(v)) {
		*out = dflt;
		return RG_OK;
	}
	if (!json_object_is_type(v, json_type_boolean))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be a boolean", where, key);
	*out = json_object_get_boolean(v);
	return RG_OK;
}

const char *rg_tok_jtype(json_object *o)
{
	json_object *ty = rg_tok_jget(o, "type");
	return ty && json_object_is_type(ty, json_type_string) ? json_object_get_string(ty) : NULL;
}

rg_status rg_idvec_push_len(rg_idvec *a, int32_t id, uint32_t len)
{
	if (a->n == a->cap && !rg_vec_reserve((void **)&a->v, &a->cap, a->n + 1, sizeof(*a->v), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (ids)");
	if (a->with_len && a->n == a->cap_len &&
	    !rg_vec_reserve((void **)&a->len, &a->cap_len, a->n + 1, sizeof(*a->len), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (ids)");
	if (a->with_len)
		a->len[a->n] = len;
	a->v[a->n++] = id;
	return RG_OK;
}

void rg_idvec_free(rg_idvec *a)
{
	free(a->v);
	free(a->len);
	a->v = NULL;
	a->len = NULL;
	a->n = a->cap = a->cap_len = 0;
}

/* ---- alignments ---- */

rg_status rg_spanvec_reserve(rg_spanvec *v, size_t n)
{
	if (!rg_vec_reserve((void **)&v->v, &v->cap, n ? n : 1, sizeof(*v->v), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (offsets)");
	return RG_OK;
}

void rg_spanvec_free(rg_spanvec *v)
{
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
}

rg_status rg_spanvec_identity(rg_spanvec *v, const char *s, size_t n, size_t base)
{
	rg_status st;

	if ((st = rg_spanvec_reserve(v, v->n + n)) != RG_OK)
		return st;
	for (size_t i = 0; i < n;) {
		size_t k = rg_utf8_len_valid((unsigned char)s[i]);

		for (size_t j = 0; j < k; j++)
			v->v[v->n++] = (rg_span){(uint32_t)(base + i), (uint32_t)(base + i + k)};
		i += k;
	}
	return RG_OK;
}

rg_status rg_chgvec_push(rg_chgvec *v, uint32_t cp, int32_t change)
{
	if (v->n == v->cap &&
	    !rg_vec_reserve((void **)&v->v, &v->cap, v->n + 1, sizeof(*v->v), 64))
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (offsets)");
	v->v[v->n++] = (rg_change){cp, change};
	return RG_OK;
}

void rg_chgvec_free(rg_chgvec *v)
{
	free(v->v);
	v->v = NULL;
	v->n = v->cap = 0;
}

/* A port of HF NormalizedString::transform_range over the whole string: `offset` walks the input
 * bytes; a replacing char takes the span at offset and moves past the char it replaces and the
 * -change chars after it, an inserted one takes the span of the byte before offset ((0, 0) at the
 * very start). Input chars the list does not reach are dropped. */
rg_status rg_align_transform(const char *in, size_t n, const rg_span *in_al, const rg_chgvec *ch,
			     size_t initial, rg_buf *out, rg_spanvec *out_al)
{
	size_t off = 0;
	rg_status st;

	out->len = 0;
	out_al->n = 0;
	for (size_t k = 0; k < initial && off < n; k++)
		off += rg_utf8_len_valid((unsigned char)in[off]);
	if (!rg_buf_reserve(out, 4 * ch->n) || (st = rg_spanvec_reserve(out_al, 4 * ch->n)) != RG_OK)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory (offsets)");
	for (size_t i = 0; i < ch->n; i++) {
		const rg_change *c = &ch->v[i];
		rg_span sp = {0, 0};
		size_t k;

		if (c->change > 0) {
			if (off >= 1)
				sp = in_al[off - 1 < n ? off - 1 : n - 1];
		} else {
			if (off < n) {
				sp = in_al[off];
				off += rg_utf8_len_valid((unsigned char)in[off]);
			} else if (n) {
				sp = in_al[n - 1]; /* HF would panic; keep the last span */
			}
			for (int32_t r = 0; r < -c->change && off < n; r++)
				off += rg_utf8_len_valid((unsigned char)in[off]);
		}
		k = rg_utf8_put(c->cp, out->data + out->len);
		out->len += k;
		for (size_t j = 0; j < k; j++)
			out_al->v[out_al->n++] = sp;
	}
	out->data[out->len] = '\0';
	return RG_OK;
}
