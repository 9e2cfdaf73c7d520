/* Validating GGUF reader (pread into memory). See gguf.h for the contract.
 * Format reference: ggml/docs/gguf.md and ggml/src/gguf.cpp (llama.cpp); dequantization formulas
 * from ggml-quants.c (dequantize_row_*) as transcribed by gguf-py's quants.py (package gguf 0.19),
 * which the Python tests compare against bit for bit.
 *
 * Every check happens in rg_gguf_open, before any value or tensor is handed out: a reader that
 * trusts the header can be made to read outside the file by a lying length or offset. All reads
 * go through gg_rd, which refuses to step past the end of the file. */
#include "core/gguf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "core/safetensors.h" /* rg_half_to_float */

#define GG_KV_MIN_BYTES 13     /* u64 key length + u32 type + a 1-byte value */
#define GG_TINFO_MIN_BYTES 24  /* u64 name length + u32 n_dims + u32 type + u64 offset */
#define GG_NAME_SHOWN 96       /* bytes of a key / name quoted in messages */

/* ---- type tables -------------------------------------------------------------------------- */

/* ggml's types (ggml.h enum ggml_type; sizes as gguf-py's GGML_QUANT_SIZES). Holes are numbers
 * ggml retired (Q4_2, Q4_3, the Q4_0_4_4 / IQ4_NL_4_4 repacked families). */
static const struct {
	const char *name;
	int64_t blck;  /* elements per block */
	size_t tsize;  /* bytes per block */
} gg_types[] = {
	[0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
	[3] = {"Q4_1", 32, 20},       [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
	[8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 40},     [10] = {"Q2_K", 256, 84},
	[11] = {"Q3_K", 256, 110},    [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
	[14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66},
	[17] = {"IQ2_XS", 256, 74},   [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
	[20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},
	[23] = {"IQ4_XS", 256, 136},  [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},
	[26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},
	[29] = {"IQ1_M", 256, 56},    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},
	[35] = {"TQ2_0", 256, 66},    [39] = {"MXFP4", 32, 17},   [40] = {"NVFP4", 64, 36},
	[41] = {"Q1_0", 128, 18},
};
#define GG_N_TYPES (sizeof(gg_types) / sizeof(gg_types[0]))

const char *rg_gguf_type_name(uint32_t type)
{
	return type < GG_N_TYPES ? gg_types[type].name : NULL;
}

bool rg_gguf_type_size(uint32_t type, int64_t *block_size, size_t *type_size)
{
	if (!rg_gguf_type_name(type))
		return false;
	if (block_size)
		*block_size = gg_types[type].blck;
	if (type_size)
		*type_size = gg_types[type].tsize;
	return true;
}

static const char *const gg_vt_names[] = {"uint8", "int8",  "uint16", "int16",  "uint32",
					  "int32", "float32", "bool", "string", "array",
					  "uint64", "int64", "float64"};
static const size_t gg_vt_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
#define GG_N_VT (sizeof(gg_vt_names) / sizeof(gg_vt_names[0]))

static const char *vt_name(uint32_t vt) { return vt < GG_N_VT ? gg_vt_names[vt] : "unknown"; }

/* ---- the object --------------------------------------------------------------------------- */

typedef struct gg_kv {
	size_t key_off;      /* key in strs */
	uint32_t type;       /* rg_gguf_vtype */
	uint32_t elem_type;  /* arrays: element type */
	uint64_t n;          /* arrays: element count */
	size_t val;          /* numeric scalar / numeric array: byte offset in buf of the value (the
			      * first element); string: offset in strs */
	size_t len;          /* string: byte length */
	size_t *str_offs;    /* string array: n + 1 offsets into strs; element i is
			      * [str_offs[i], str_offs[i+1] - 1) (each followed by its NUL) */
} gg_kv;

struct rg_gguf {
	char *path;                /* as opened, for messages */
	uint8_t *buf;              /* (len) bytes: the whole file (owned) */
	size_t len;
	char *strs;                /* every key / string / name, NUL-terminated (owned) */
	size_t strs_len, strs_cap;
	uint32_t version, alignment;
	gg_kv *kvs;                /* file order */
	size_t n_kv, cap_kv;
	int *kv_sorted;            /* indexes into kvs, sorted by key */
	rg_gguf_tensor *tensors;   /* file order */
	size_t *tname_off;         /* tensor i's name in strs (during parse) */
	uint64_t *toff;            /* tensor i's offset in the data section */
	size_t n_tensors, cap_tensors;
	int *t_sorted;             /* indexes into tensors, sorted by name */
};

void rg_gguf_close(rg_gguf *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_kv; i++)
		free(g->kvs[i].str_offs);
	free(g->kvs);
	free(g->kv_sorted);
	free(g->tensors);
	free(g->tname_off);
	free(g->toff);
	free(g->t_sorted);
	free(g->strs);
	free(g->buf);
	free(g->path);
	free(g);
}

uint32_t rg_gguf_version(const rg_gguf *g) { return g ? g->version : 0; }
uint32_t rg_gguf_alignment(const rg_gguf *g) { return g ? g->alignment : 0; }
int rg_gguf_n_kv(const rg_gguf *g) { return g ? (int)g->n_kv : 0; }
int rg_gguf_n_tensors(const rg_gguf *g) { return g ? (int)g->n_tensors : 0; }

const char *rg_gguf_kv_key(const rg_gguf *g, int i)
{
	if (!g || i < 0 || (size_t)i >= g->n_kv)
		return NULL;
	return g->strs + g->kvs[i].key_off;
}

const rg_gguf_tensor *rg_gguf_tensor_at(const rg_gguf *g, int i)
{
	if (!g || i < 0 || (size_t)i >= g->n_tensors)
		return NULL;
	return &g->tensors[i];
}

/* Binary search of a sorted index; -1 when absent. name_of(g, idx) gives an entry's string. */
static int gg_search(const rg_gguf *g, const int *sorted, size_t n, const char *name,
		     const char *(*name_of)(const rg_gguf *, int))
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name_of(g, sorted[mid]), name);
		if (c == 0)
			return sorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static const char *kv_key_of(const rg_gguf *g, int i) { return g->strs + g->kvs[i].key_off; }
static const char *tname_of(const rg_gguf *g, int i) { return g->tensors[i].name; }

const rg_gguf_tensor *rg_gguf_find(const rg_gguf *g, const char *name)
{
	int i;

	if (!g || !name)
		return NULL;
	i = gg_search(g, g->t_sorted, g->n_tensors, name, tname_of);
	return i < 0 ? NULL : &g->tensors[i];
}

static const gg_kv *kv_find(const rg_gguf *g, const char *key)
{
	int i;

	if (!g || !key)
		return NULL;
	i = gg_search(g, g->kv_sorted, g->n_kv, key, kv_key_of);
	return i < 0 ? NULL : &g->kvs[i];
}

bool rg_gguf_has(const rg_gguf *g, const char *key) { return kv_find(g, key) != NULL; }

/* ---- the parser --------------------------------------------------------------------------- */

typedef struct gg_rd {
	const uint8_t *b;
	size_t len, pos;
	const char *path;
	char what[160]; /* the entry being read, for messages ("tensor 3 ('blk.0.attn_q.weight')") */
} gg_rd;

static rg_status rd_need(gg_rd *r, uint64_t n, const char *field)
{
	if (n > r->len - r->pos)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: %s needs %llu bytes at offset %zu but the file ends at %zu "
				 "(truncated file or lying length)",
				 r->path, r->what, field, (unsigned long long)n, r->pos, r->len);
	return RG_OK;
}

static rg_status rd_u32(gg_rd *r, const char *field, uint32_t *v)
{
	rg_status s = rd_need(r, 4, field);
	if (s != RG_OK)
		return s;
	memcpy(v, r->b + r->pos, 4);
	r->pos += 4;
	return RG_OK;
}

static rg_status rd_u64(gg_rd *r, const char *field, uint64_t *v)
{
	rg_status s = rd_need(r, 8, field);
	if (s != RG_OK)
		return s;
	memcpy(v, r->b + r->pos, 8);
	r->pos += 8;
	return RG_OK;
}

/* A GGUF string: u64 length, then that many bytes (bounded by the file). *off is the offset of
 * its bytes in the file. */
static rg_status rd_str(gg_rd *r, const char *field, size_t *off, size_t *len)
{
	uint64_t n;
	rg_status s;

	if ((s = rd_u64(r, field, &n)) != RG_OK)
		return s;
	if (n > r->len - r->pos)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: %s length %llu exceeds the %zu bytes left in the file at "
				 "offset %zu (truncated file or lying length)",
				 r->path, r->what, field, (unsigned long long)n, r->len - r->pos,
				 r->pos);
	*off = r->pos;
	*len = (size_t)n;
	r->pos += (size_t)n;
	return RG_OK;
}

/* Append len bytes and a NUL to the string arena; *off is where they start. */
static rg_status strs_push(rg_gguf *g, const void *p, size_t len, size_t *off)
{
	if (len + 1 > g->strs_cap - g->strs_len) {
		size_t cap = g->strs_cap ? g->strs_cap : 4096;
		char *s;
		while (len + 1 > cap - g->strs_len)
			cap *= 2;
		s = realloc(g->strs, cap);
		if (!s)
			return rg_errorf(RG_ERR_OOM, "%s: out of memory for strings", g->path);
		g->strs = s;
		g->strs_cap = cap;
	}
	memcpy(g->strs + g->strs_len, p, len);
	g->strs[g->strs_len + len] = '\0';
	*off = g->strs_len;
	g->strs_len += len + 1;
	return RG_OK;
}

/* Set r->what to "<kind> <i> ('<name>')", the name cut to GG_NAME_SHOWN bytes and its control
 * bytes shown as '?' (messages end up in logs and HTTP replies). */
static void rd_what_named(gg_rd *r, const char *kind, uint64_t i, const uint8_t *name, size_t len)
{
	int shown = len > GG_NAME_SHOWN ? GG_NAME_SHOWN : (int)len;
	snprintf(r->what, sizeof(r->what), "%s %llu ('%.*s%s')", kind, (unsigned long long)i, shown,
		 (const char *)name, len > GG_NAME_SHOWN ? "..." : "");
	for (char *c = r->what; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
}

/* One metadata entry. */
static rg_status gg_read_kv(rg_gguf *g, gg_rd *r, uint64_t i)
{
	size_t key_at, key_len;
	uint32_t type;
	gg_kv *kv;
	rg_status s;

	snprintf(r->what, sizeof(r->what), "metadata entry %llu", (unsigned long long)i);
	if ((s = rd_str(r, "key", &key_at, &key_len)) != RG_OK)
		return s;
	rd_what_named(r, "metadata entry", i, r->b + key_at, key_len);
	if (memchr(r->b + key_at, 0, key_len))
		return rg_errorf(RG_ERR_FORMAT, "%s: %s: key contains a NUL byte", r->path, r->what);
	if ((s = rd_u32(r, "value type", &type)) != RG_OK)
		return s;
	if (type >= GG_N_VT)
		return rg_errorf(RG_ERR_FORMAT, "%s: %s: unknown value type %u (0..%zu are defined)",
				 r->path, r->what, type, GG_N_VT - 1);

	if (g->n_kv == g->cap_kv) {
		size_t cap = g->cap_kv ? 2 * g->cap_kv : 64;
		gg_kv *k = realloc(g->kvs, cap * sizeof(*k));
		if (!k)
			return rg_errorf(RG_ERR_OOM, "%s: out of memory for metadata", g->path);
		g->kvs = k;
		g->cap_kv = cap;
	}
	kv = &g->kvs[g->n_kv];
	memset(kv, 0, sizeof(*kv));
	g->n_kv++;
	kv->type = type;
	if ((s = strs_push(g, r->b + key_at, key_len, &kv->key_off)) != RG_OK)
		return s;

	if (type == RG_GGUF_VT_STRING) {
		size_t at;
		if ((s = rd_str(r, "string value", &at, &kv->len)) != RG_OK)
			return s;
		return strs_push(g, r->b + at, kv->len, &kv->val);
	}
	if (type != RG_GGUF_VT_ARRAY) {
		if ((s = rd_need(r, gg_vt_size[type], "value")) != RG_OK)
			return s;
		kv->val = r->pos;
		if (type == RG_GGUF_VT_BOOL && r->b[r->pos] > 1)
			return rg_errorf(RG_ERR_FORMAT, "%s: %s: bool value is %u, not 0 or 1",
					 r->path, r->what, r->b[r->pos]);
		r->pos += gg_vt_size[type];
		return RG_OK;
	}

	if ((s = rd_u32(r, "array element type", &kv->elem_type)) != RG_OK)
		return s;
	if (kv->elem_type == RG_GGUF_VT_ARRAY)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: array of arrays (nested arrays are not supported, as in "
				 "llama.cpp)",
				 r->path, r->what);
	if (kv->elem_type >= GG_N_VT)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: unknown array element type %u (0..%zu are defined)", r->path,
				 r->what, kv->elem_type, GG_N_VT - 1);
	if ((s = rd_u64(r, "array length", &kv->n)) != RG_OK)
		return s;
	if (kv->elem_type == RG_GGUF_VT_STRING) {
		/* each element takes at least its 8-byte length: bound n before allocating */
		if (kv->n > (r->len - r->pos) / 8)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: %s: array of %llu strings cannot fit in the %zu bytes "
					 "left at offset %zu (truncated file or lying length)",
					 r->path, r->what, (unsigned long long)kv->n,
					 r->len - r->pos, r->pos);
		kv->str_offs = malloc(((size_t)kv->n + 1) * sizeof(*kv->str_offs));
		if (!kv->str_offs)
			return rg_errorf(RG_ERR_OOM, "%s: out of memory for %s", g->path, r->what);
		for (uint64_t j = 0; j < kv->n; j++) {
			size_t at, len;
			if ((s = rd_str(r, "array string", &at, &len)) != RG_OK)
				return rg_error_wrap(s, "element %llu", (unsigned long long)j);
			if ((s = strs_push(g, r->b + at, len, &kv->str_offs[j])) != RG_OK)
				return s;
		}
		kv->str_offs[kv->n] = g->strs_len;
		return RG_OK;
	}
	if (kv->n > (r->len - r->pos) / gg_vt_size[kv->elem_type])
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: array of %llu %s (%zu bytes each) exceeds the %zu bytes left "
				 "at offset %zu (truncated file or lying length)",
				 r->path, r->what, (unsigned long long)kv->n, vt_name(kv->elem_type),
				 gg_vt_size[kv->elem_type], r->len - r->pos, r->pos);
	kv->val = r->pos;
	r->pos += (size_t)kv->n * gg_vt_size[kv->elem_type];
	return RG_OK;
}

/* One tensor info: name, dims, type, offset; sizes validated (the offset is checked against the
 * data section once its start is known). */
static rg_status gg_read_tensor_info(rg_gguf *g, gg_rd *r, uint64_t i)
{
	size_t name_at, name_len;
	uint32_t n_dims, type;
	uint64_t ne[RG_GGUF_MAX_DIMS] = {1, 1, 1, 1}, off, numel = 1, nbytes;
	rg_gguf_tensor *t;
	rg_status s;

	snprintf(r->what, sizeof(r->what), "tensor info %llu", (unsigned long long)i);
	if ((s = rd_str(r, "name", &name_at, &name_len)) != RG_OK)
		return s;
	rd_what_named(r, "tensor", i, r->b + name_at, name_len);
	if (memchr(r->b + name_at, 0, name_len))
		return rg_errorf(RG_ERR_FORMAT, "%s: %s: name contains a NUL byte", r->path, r->what);
	if ((s = rd_u32(r, "n_dims", &n_dims)) != RG_OK)
		return s;
	if (n_dims > RG_GGUF_MAX_DIMS)
		return rg_errorf(RG_ERR_FORMAT, "%s: %s: %u dimensions (at most %d)", r->path,
				 r->what, n_dims, RG_GGUF_MAX_DIMS);
	for (uint32_t d = 0; d < n_dims; d++) {
		if ((s = rd_u64(r, "ne", &ne[d])) != RG_OK)
			return s;
		if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX)
			return rg_errorf(RG_ERR_FORMAT, "%s: %s: ne[%u] = %lld is not positive",
					 r->path, r->what, d, (long long)ne[d]);
		if (numel > (uint64_t)INT64_MAX / ne[d])
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: %s: element count overflows int64 (ne[%u] = %llu)",
					 r->path, r->what, d, (unsigned long long)ne[d]);
		numel *= ne[d];
	}
	if ((s = rd_u32(r, "type", &type)) != RG_OK)
		return s;
	if (!rg_gguf_type_name(type))
		return rg_errorf(RG_ERR_FORMAT, "%s: %s: unknown ggml tensor type %u", r->path,
				 r->what, type);
	if (ne[0] % (uint64_t)gg_types[type].blck)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: row length ne[0] = %llu is not a multiple of %s's block "
				 "size %lld",
				 r->path, r->what, (unsigned long long)ne[0], gg_types[type].name,
				 (long long)gg_types[type].blck);
	if ((s = rd_u64(r, "offset", &off)) != RG_OK)
		return s;
	if (off % g->alignment)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s: offset %llu is not a multiple of the alignment %u", r->path,
				 r->what, (unsigned long long)off, g->alignment);
	/* bytes: a row's blocks, times the other dims; the whole must fit in size_t */
	nbytes = ne[0] / (uint64_t)gg_types[type].blck;
	if (nbytes > SIZE_MAX / gg_types[type].tsize)
		goto out_too_big;
	nbytes *= gg_types[type].tsize;
	for (int d = 1; d < RG_GGUF_MAX_DIMS; d++) {
		if (nbytes > SIZE_MAX / ne[d])
			goto out_too_big;
		nbytes *= ne[d];
	}

	if (g->n_tensors == g->cap_tensors) {
		size_t cap = g->cap_tensors ? 2 * g->cap_tensors : 64;
		rg_gguf_tensor *tv = realloc(g->tensors, cap * sizeof(*tv));
		size_t *no;
		uint64_t *to;
		if (!tv)
			goto out_oom;
		g->tensors = tv;
		no = realloc(g->tname_off, cap * sizeof(*no));
		if (!no)
			goto out_oom;
		g->tname_off = no;
		to = realloc(g->toff, cap * sizeof(*to));
		if (!to)
			goto out_oom;
		g->toff = to;
		g->cap_tensors = cap;
	}
	t = &g->tensors[g->n_tensors];
	memset(t, 0, sizeof(*t));
	if ((s = strs_push(g, r->b + name_at, name_len, &g->tname_off[g->n_tensors])) != RG_OK)
		return s;
	t->n_dims = (int)n_dims;
	for (int d = 0; d < RG_GGUF_MAX_DIMS; d++)
		t->ne[d] = (int64_t)ne[d];
	t->type = type;
	t->nbytes = (size_t)nbytes;
	t->numel = (int64_t)numel;
	g->toff[g->n_tensors] = off;
	g->n_tensors++;
	return RG_OK;

out_too_big:
	return rg_errorf(RG_ERR_FORMAT, "%s: %s: byte size overflows (ne = [%llu, %llu, %llu, %llu])",
			 r->path, r->what, (unsigned long long)ne[0], (unsigned long long)ne[1],
			 (unsigned long long)ne[2], (unsigned long long)ne[3]);
out_oom:
	return rg_errorf(RG_ERR_OOM, "%s: out of memory for the tensor table", g->path);
}

/* Index comparators for glibc's qsort_r (ctx is the rg_gguf). */
static int cmp_kv_idx(const void *a, const void *b, void *ctx)
{
	const rg_gguf *g = ctx;
	return strcmp(kv_key_of(g, *(const int *)a), kv_key_of(g, *(const int *)b));
}

static int cmp_t_name(const void *a, const void *b, void *ctx)
{
	const rg_gguf *g = ctx;
	return strcmp(g->tensors[*(const int *)a].name, g->tensors[*(const int *)b].name);
}

static int cmp_t_off(const void *a, const void *b, void *ctx)
{
	const rg_gguf *g = ctx;
	uint64_t x = g->toff[*(const int *)a], y = g->toff[*(const int *)b];
	return (x > y) - (x < y);
}

static int *iota_alloc(size_t n)
{
	int *v = malloc((n ? n : 1) * sizeof(*v));
	if (v)
		for (size_t i = 0; i < n; i++)
			v[i] = (int)i;
	return v;
}

/* Sorted key index; duplicate keys refused. */
static rg_status gg_index_kvs(rg_gguf *g)
{
	g->kv_sorted = iota_alloc(g->n_kv);
	if (!g->kv_sorted)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", g->path);
	qsort_r(g->kv_sorted, g->n_kv, sizeof(int), cmp_kv_idx, g);
	for (size_t i = 1; i < g->n_kv; i++) {
		int a = g->kv_sorted[i - 1], b = g->kv_sorted[i];
		if (!strcmp(kv_key_of(g, a), kv_key_of(g, b)))
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: duplicate metadata key '%.*s' (entries %d and %d)",
					 g->path, GG_NAME_SHOWN, kv_key_of(g, a), a < b ? a : b,
					 a < b ? b : a);
	}
	return RG_OK;
}

/* general.alignment: optional, an integer power of two that fits u32 (llama.cpp: GGUF_KEY_GENERAL_
 * ALIGNMENT, default GGUF_DEFAULT_ALIGNMENT = 32). */
static rg_status gg_read_alignment(rg_gguf *g)
{
	uint32_t a;
	rg_status s;

	g->alignment = RG_GGUF_DEFAULT_ALIGNMENT;
	if (!rg_gguf_has(g, "general.alignment"))
		return RG_OK;
	if ((s = rg_gguf_get_u32(g, "general.alignment", &a)) != RG_OK)
		return s; /* RG_ERR_FORMAT naming the key and its type or value */
	if (a == 0 || (a & (a - 1)))
		return rg_errorf(RG_ERR_FORMAT, "%s: general.alignment = %u is not a power of two",
				 g->path, a);
	g->alignment = a;
	return RG_OK;
}

/* Data section: every tensor inside the file, sorted-name index without duplicates, no overlap. */
static rg_status gg_place_tensors(rg_gguf *g, size_t info_end)
{
	uint64_t start = ((uint64_t)info_end + g->alignment - 1) / g->alignment * g->alignment;
	size_t data_len = start <= g->len ? g->len - (size_t)start : 0;
	int *by_off = NULL;
	rg_status s = RG_OK;

	for (size_t i = 0; i < g->n_tensors; i++) {
		rg_gguf_tensor *t = &g->tensors[i];
		t->name = g->strs + g->tname_off[i];
		if (g->toff[i] > data_len || t->nbytes > data_len - g->toff[i])
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: tensor %zu ('%.*s'): %s data [%llu, +%zu) exceeds the "
					 "data section (%zu bytes from offset %llu; file is %zu bytes: "
					 "truncated file or lying offset)",
					 g->path, i, GG_NAME_SHOWN, t->name, rg_gguf_type_name(t->type),
					 (unsigned long long)g->toff[i], t->nbytes, data_len,
					 (unsigned long long)start, g->len);
		t->data = g->buf + start + g->toff[i];
	}
	g->t_sorted = iota_alloc(g->n_tensors);
	by_off = iota_alloc(g->n_tensors);
	if (!g->t_sorted || !by_off) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", g->path);
		goto out_free_by_off;
	}
	qsort_r(g->t_sorted, g->n_tensors, sizeof(int), cmp_t_name, g);
	qsort_r(by_off, g->n_tensors, sizeof(int), cmp_t_off, g);
	for (size_t i = 1; i < g->n_tensors; i++) {
		int a = g->t_sorted[i - 1], b = g->t_sorted[i];
		if (!strcmp(g->tensors[a].name, g->tensors[b].name)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: duplicate tensor name '%.*s' (tensors %d and %d)",
				      g->path, GG_NAME_SHOWN, g->tensors[a].name, a < b ? a : b,
				      a < b ? b : a);
			goto out_free_by_off;
		}
	}
	for (size_t i = 1; i < g->n_tensors; i++) {
		int a = by_off[i - 1], b = by_off[i];
		if (g->toff[b] < g->toff[a] + g->tensors[a].nbytes) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: tensor '%.*s' [%llu, +%zu) overlaps tensor '%.*s' [%llu, +%zu)",
				      g->path, GG_NAME_SHOWN, g->tensors[b].name,
				      (unsigned long long)g->toff[b], g->tensors[b].nbytes,
				      GG_NAME_SHOWN, g->tensors[a].name,
				      (unsigned long long)g->toff[a], g->tensors[a].nbytes);
			goto out_free_by_off;
		}
	}
out_free_by_off:
	free(by_off);
	return s;
}

static rg_status gg_parse(rg_gguf *g)
{
	gg_rd r = {.b = g->buf, .len = g->len, .pos = 0, .path = g->path};
	uint64_t n_tensors, n_kv;
	rg_status s;

	snprintf(r.what, sizeof(r.what), "header");
	if ((s = rd_need(&r, 4, "magic")) != RG_OK)
		return s;
	if (memcmp(g->buf, "GGUF", 4))
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: not a GGUF file (magic bytes %02x %02x %02x %02x, want \"GGUF\")",
				 g->path, g->buf[0], g->buf[1], g->buf[2], g->buf[3]);
	r.pos = 4;
	if ((s = rd_u32(&r, "version", &g->version)) != RG_OK)
		return s;
	if (g->version == 1)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: GGUF version 1 is not supported (versions 2 and 3 are)", g->path);
	if (g->version != 2 && g->version != 3) {
		uint32_t sw = __builtin_bswap32(g->version);
		if (sw >= 1 && sw <= 3)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: big-endian GGUF (version %u byte-swapped) is not supported",
					 g->path, sw);
		return rg_errorf(RG_ERR_FORMAT, "%s: unknown GGUF version %u (2 and 3 are read)",
				 g->path, g->version);
	}
	if ((s = rd_u64(&r, "tensor count", &n_tensors)) != RG_OK ||
	    (s = rd_u64(&r, "metadata count", &n_kv)) != RG_OK)
		return s;
	/* every entry has a minimum size: counts the rest of the file cannot hold are lies */
	if (n_kv > (r.len - r.pos) / GG_KV_MIN_BYTES ||
	    n_tensors > (r.len - r.pos) / GG_TINFO_MIN_BYTES ||
	    n_kv * GG_KV_MIN_BYTES + n_tensors * GG_TINFO_MIN_BYTES > r.len - r.pos ||
	    n_kv > INT_MAX || n_tensors > INT_MAX)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: header claims %llu tensors and %llu metadata entries; the %zu "
				 "bytes after the header cannot hold them (truncated file or lying "
				 "count)",
				 g->path, (unsigned long long)n_tensors, (unsigned long long)n_kv,
				 r.len - r.pos);
	for (uint64_t i = 0; i < n_kv; i++)
		if ((s = gg_read_kv(g, &r, i)) != RG_OK)
			return s;
	if ((s = gg_index_kvs(g)) != RG_OK || (s = gg_read_alignment(g)) != RG_OK)
		return s;
	for (uint64_t i = 0; i < n_tensors; i++)
		if ((s = gg_read_tensor_info(g, &r, i)) != RG_OK)
			return s;
	return gg_place_tensors(g, r.pos);
}

/* Read n bytes from offset 0 of fd with pread; a short read (the file shrank since fstat) is
 * RG_ERR_IO. */
static rg_status gg_read_all(int fd, void *buf, size_t n, const char *path)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return rg_errorf(RG_ERR_IO, "%s: read failed at byte %zu: %s", path, got,
					 strerror(errno));
		if (k == 0)
			return rg_errorf(RG_ERR_IO,
					 "%s: file shrank to %zu of %zu bytes while being read "
					 "(truncated during load?)",
					 path, got, n);
		got += (size_t)k;
	}
	return RG_OK;
}

rg_status rg_gguf_open(const char *path, rg_gguf **out)
{
	struct stat sb;
	rg_gguf *g;
	void *mem;
	int fd;
	rg_status s;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_gguf_open: out is NULL");
	*out = NULL;
	if (!path)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_gguf_open: path is NULL");
	g = calloc(1, sizeof(*g));
	if (!g)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	g->path = strdup(path);
	if (!g->path) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
		goto out_close;
	}
	/* read, not mapped: see gguf.h (and safetensors.c, which made the same choice) */
	fd = rg_file_open_regular(path, &sb);
	if (fd < 0) {
		s = RG_ERR_IO;
		goto out_close;
	}
	if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX - 64) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: file too large", path);
		goto out_close_fd;
	}
	g->len = (size_t)sb.st_size;
	/* exactly len bytes (not rounded up), so a sanitizer sees any read past the file */
	if (posix_memalign(&mem, 64, g->len ? g->len : 1)) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory for %zu bytes", path, g->len);
		goto out_close_fd;
	}
	g->buf = mem;
	if ((s = gg_read_all(fd, g->buf, g->len, path)) != RG_OK)
		goto out_close_fd;
	close(fd);
	if ((s = gg_parse(g)) != RG_OK)
		goto out_close;
	*out = g;
	return RG_OK;

out_close_fd:
	close(fd);
out_close:
	rg_gguf_close(g);
	return s;
}

/* ---- metadata getters --------------------------------------------------------------------- */

static rg_status kv_get(const rg_gguf *g, const char *key, const gg_kv **kv)
{
	*kv = NULL;
	if (!g || !key)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gguf: NULL file or key");
	*kv = kv_find(g, key);
	if (!*kv)
		return rg_errorf(RG_ERR_INVALID_INPUT, "%s: metadata key '%s' not found", g->path,
				 key);
	return RG_OK;
}

static rg_status kv_type_err(const rg_gguf *g, const char *key, const gg_kv *kv, const char *want)
{
	if (kv->type == RG_GGUF_VT_ARRAY)
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata key '%s' is an array of %s, not %s",
				 g->path, key, vt_name(kv->elem_type), want);
	return rg_errorf(RG_ERR_FORMAT, "%s: metadata key '%s' is %s, not %s", g->path, key,
			 vt_name(kv->type), want);
}

static bool vt_is_int(uint32_t vt)
{
	return vt <= RG_GGUF_VT_INT32 || vt == RG_GGUF_VT_UINT64 || vt == RG_GGUF_VT_INT64;
}

/* Decode an integer of value type vt at p: 1 = unsigned in *u, 0 = signed in *s, -1 = not an
 * integer type. */
static int int_decode(const uint8_t *p, uint32_t vt, int64_t *s, uint64_t *u)
{
	switch (vt) {
	case RG_GGUF_VT_UINT8: *u = p[0]; return 1;
	case RG_GGUF_VT_UINT16: { uint16_t v; memcpy(&v, p, 2); *u = v; return 1; }
	case RG_GGUF_VT_UINT32: { uint32_t v; memcpy(&v, p, 4); *u = v; return 1; }
	case RG_GGUF_VT_UINT64: memcpy(u, p, 8); return 1;
	case RG_GGUF_VT_INT8: *s = (int8_t)p[0]; return 0;
	case RG_GGUF_VT_INT16: { int16_t v; memcpy(&v, p, 2); *s = v; return 0; }
	case RG_GGUF_VT_INT32: { int32_t v; memcpy(&v, p, 4); *s = v; return 0; }
	case RG_GGUF_VT_INT64: memcpy(s, p, 8); return 0;
	}
	return -1;
}

/* The integer at p (value type vt) as int64 if it lies in [lo, hi]; else RG_ERR_FORMAT naming
 * key (and element, when idx >= 0) and the wanted type. */
static rg_status int_fit(const rg_gguf *g, const char *key, const gg_kv *kv, long long idx,
			 const uint8_t *p, uint32_t vt, int64_t lo, uint64_t hi, const char *want,
			 int64_t *out)
{
	int64_t sv = 0;
	uint64_t uv = 0;
	int k = int_decode(p, vt, &sv, &uv);
	char elem[48] = "";

	if (k < 0)
		return kv_type_err(g, key, kv, want);
	if (idx >= 0)
		snprintf(elem, sizeof(elem), " element %lld", idx);
	if (k == 1) {
		if (uv > hi)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: metadata key '%s'%s = %llu does not fit %s", g->path,
					 key, elem, (unsigned long long)uv, want);
		*out = (int64_t)uv;
		return RG_OK;
	}
	if (sv < lo || (sv > 0 && (uint64_t)sv > hi))
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata key '%s'%s = %lld does not fit %s",
				 g->path, key, elem, (long long)sv, want);
	*out = sv;
	return RG_OK;
}

rg_status rg_gguf_get_type(const rg_gguf *g, const char *key, uint32_t *type)
{
	const gg_kv *kv;
	rg_status s = kv_get(g, key, &kv);
	if (s == RG_OK && type)
		*type = kv->type;
	return s;
}

rg_status rg_gguf_get_u32(const rg_gguf *g, const char *key, uint32_t *out)
{
	const gg_kv *kv;
	int64_t v;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type == RG_GGUF_VT_ARRAY || kv->type == RG_GGUF_VT_STRING)
		return kv_type_err(g, key, kv, "an integer (uint32)");
	if ((s = int_fit(g, key, kv, -1, g->buf + kv->val, kv->type, 0, UINT32_MAX,
			 "an integer (uint32)", &v)) != RG_OK)
		return s;
	*out = (uint32_t)v;
	return RG_OK;
}

rg_status rg_gguf_get_i64(const rg_gguf *g, const char *key, int64_t *out)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type == RG_GGUF_VT_ARRAY || kv->type == RG_GGUF_VT_STRING)
		return kv_type_err(g, key, kv, "an integer (int64)");
	return int_fit(g, key, kv, -1, g->buf + kv->val, kv->type, INT64_MIN, INT64_MAX,
		       "an integer (int64)", out);
}

rg_status rg_gguf_get_u64(const rg_gguf *g, const char *key, uint64_t *out)
{
	const gg_kv *kv;
	int64_t sv = 0;
	uint64_t uv = 0;
	int k;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type == RG_GGUF_VT_ARRAY || kv->type == RG_GGUF_VT_STRING)
		return kv_type_err(g, key, kv, "an integer (uint64)");
	k = int_decode(g->buf + kv->val, kv->type, &sv, &uv);
	if (k < 0)
		return kv_type_err(g, key, kv, "an integer (uint64)");
	if (k == 0 && sv < 0)
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata key '%s' = %lld does not fit uint64",
				 g->path, key, (long long)sv);
	*out = k == 1 ? uv : (uint64_t)sv;
	return RG_OK;
}

/* f32 or f64 element at p as float. */
static bool float_decode(const uint8_t *p, uint32_t vt, float *out)
{
	if (vt == RG_GGUF_VT_FLOAT32) {
		memcpy(out, p, 4);
		return true;
	}
	if (vt == RG_GGUF_VT_FLOAT64) {
		double d;
		memcpy(&d, p, 8);
		*out = (float)d;
		return true;
	}
	return false;
}

rg_status rg_gguf_get_f32(const rg_gguf *g, const char *key, float *out)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type == RG_GGUF_VT_ARRAY || !float_decode(g->buf + kv->val, kv->type, out))
		return kv_type_err(g, key, kv, "float32 or float64");
	return RG_OK;
}

rg_status rg_gguf_get_bool(const rg_gguf *g, const char *key, bool *out)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type != RG_GGUF_VT_BOOL)
		return kv_type_err(g, key, kv, "bool");
	*out = g->buf[kv->val] != 0;
	return RG_OK;
}

rg_status rg_gguf_get_str(const rg_gguf *g, const char *key, const char **str, size_t *len)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type != RG_GGUF_VT_STRING)
		return kv_type_err(g, key, kv, "a string");
	*str = g->strs + kv->val;
	if (len)
		*len = kv->len;
	return RG_OK;
}

rg_status rg_gguf_get_arr(const rg_gguf *g, const char *key, uint32_t *elem_type, uint64_t *n)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = kv_get(g, key, &kv)) != RG_OK)
		return s;
	if (kv->type != RG_GGUF_VT_ARRAY)
		return kv_type_err(g, key, kv, "an array");
	if (elem_type)
		*elem_type = kv->elem_type;
	if (n)
		*n = kv->n;
	return RG_OK;
}

/* Array entry of key with element i in range. */
static rg_status arr_elem(const rg_gguf *g, const char *key, uint64_t i, const gg_kv **kv)
{
	rg_status s;

	if ((s = kv_get(g, key, kv)) != RG_OK)
		return s;
	if ((*kv)->type != RG_GGUF_VT_ARRAY)
		return kv_type_err(g, key, *kv, "an array");
	if (i >= (*kv)->n)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "%s: metadata key '%s': index %llu out of range (array of %llu)",
				 g->path, key, (unsigned long long)i, (unsigned long long)(*kv)->n);
	return RG_OK;
}

rg_status rg_gguf_arr_str(const rg_gguf *g, const char *key, uint64_t i, const char **str,
			  size_t *len)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = arr_elem(g, key, i, &kv)) != RG_OK)
		return s;
	if (kv->elem_type != RG_GGUF_VT_STRING)
		return kv_type_err(g, key, kv, "an array of strings");
	*str = g->strs + kv->str_offs[i];
	if (len)
		*len = kv->str_offs[i + 1] - kv->str_offs[i] - 1;
	return RG_OK;
}

rg_status rg_gguf_arr_i32(const rg_gguf *g, const char *key, uint64_t i, int32_t *out)
{
	const gg_kv *kv;
	int64_t v;
	rg_status s;

	if ((s = arr_elem(g, key, i, &kv)) != RG_OK)
		return s;
	if (!vt_is_int(kv->elem_type))
		return kv_type_err(g, key, kv, "an array of integers (int32)");
	if ((s = int_fit(g, key, kv, (long long)i,
			 g->buf + kv->val + (size_t)i * gg_vt_size[kv->elem_type], kv->elem_type,
			 INT32_MIN, INT32_MAX, "int32", &v)) != RG_OK)
		return s;
	*out = (int32_t)v;
	return RG_OK;
}

rg_status rg_gguf_arr_int(const rg_gguf *g, const char *key, uint64_t i, int64_t *out)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = arr_elem(g, key, i, &kv)) != RG_OK)
		return s;
	if (!vt_is_int(kv->elem_type))
		return kv_type_err(g, key, kv, "an array of integers");
	return int_fit(g, key, kv, (long long)i,
		       g->buf + kv->val + (size_t)i * gg_vt_size[kv->elem_type], kv->elem_type,
		       INT64_MIN, INT64_MAX, "int64", out);
}

rg_status rg_gguf_arr_f32(const rg_gguf *g, const char *key, uint64_t i, float *out)
{
	const gg_kv *kv;
	rg_status s;

	if ((s = arr_elem(g, key, i, &kv)) != RG_OK)
		return s;
	if (!float_decode(g->buf + kv->val + (size_t)i * gg_vt_size[kv->elem_type], kv->elem_type,
			  out))
		return kv_type_err(g, key, kv, "an array of float32 or float64");
	return RG_OK;
}

/* ---- quantization (Q8_0 only: rg_model_params.quantize) ------------------------------- */

uint16_t rg_float_to_half(float f)
{
	uint32_t x, sign;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000u;
	x &= 0x7fffffffu;
	if (x > 0x7f800000u) /* NaN: a quiet NaN with the top of the payload */
		return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
	if (x >= 0x477ff000u) /* >= 65520 (inf included) rounds to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (x < 0x38800000u) { /* below 2^-14: a subnormal half, k units of 2^-24 */
		float a;

		memcpy(&a, &x, sizeof(a));
		/* a * 2^24 is exact; rintf rounds half to even (the default mode); k = 1024 is
		 * the smallest normal's bit pattern, as it should be */
		return (uint16_t)(sign | (uint32_t)rintf(a * 0x1p24f));
	}
	/* rebias the exponent (127 -> 15), then round 23 mantissa bits to 10, ties to even */
	x -= 0x38000000u;
	x += 0xfffu + ((x >> 13) & 1u);
	return (uint16_t)(sign | (x >> 13));
}

void rg_gguf_quantize_q8_0(const float *x, int64_t n, void *dst)
{
	uint8_t *b = dst;

	for (int64_t i = 0; i + 32 <= n; i += 32, b += 34) {
		float amax = 0.0f, d, id;
		uint16_t h;

		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[i + j]));
		d = amax / 127.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		h = rg_float_to_half(d);
		memcpy(b, &h, sizeof(h));
		for (int j = 0; j < 32; j++)
			b[2 + j] = (uint8_t)(int8_t)roundf(x[i + j] * id);
	}
}

/* ---- dequantization ----------------------------------------------------------------------- *
 * Block layouts and formulas: ggml-common.h (block_q4_0 ...) and ggml-quants.c
 * (dequantize_row_q4_0 ...), in the element order of gguf-py quants.py. Every product and sum is
 * one float32 operation, as in NumPy (no FMA: -std=c11 sets -ffp-contract=off). Scales are read
 * with memcpy: a block is only as aligned as its size allows (Q8_0's 34 bytes: 2). */

static float f16_at(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return rg_half_to_float(h);
}

/* Q4_0: {f16 d; u8 qs[16]}; y[j] = d * ((qs[j] & 15) - 8), y[j+16] = d * ((qs[j] >> 4) - 8). */
static void deq_q4_0(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
		float d = f16_at(b);
		for (int j = 0; j < 16; j++) {
			y[j] = d * (float)((b[2 + j] & 0x0F) - 8);
			y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
		}
	}
}

/* Q4_1: {f16 d, m; u8 qs[16]}; y = d * q + m. */
static void deq_q4_1(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
		float d = f16_at(b), m = f16_at(b + 2);
		for (int j = 0; j < 16; j++) {
			y[j] = d * (float)(b[4 + j] & 0x0F) + m;
			y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
		}
	}
}

/* Q5_0: {f16 d; u32 qh (little-endian); u8 qs[16]}; value j < 16 takes the low nibble of qs[j]
 * and bit j of qh as its fifth bit, value j + 16 the high nibble and bit j + 16;
 * y = d * (q - 16). */
static void deq_q5_0(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
		float d = f16_at(b);
		uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 |
			      (uint32_t)b[5] << 24;
		for (int j = 0; j < 16; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;

			y[j] = d * (float)(((b[6 + j] & 0x0F) | h0) - 16);
			y[j + 16] = d * (float)(((b[6 + j] >> 4) | h1) - 16);
		}
	}
}

/* Q5_1: {f16 d, m; u32 qh; u8 qs[16]}; q as Q5_0's, unsigned; y = d * q + m. */
static void deq_q5_1(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
		float d = f16_at(b), m = f16_at(b + 2);
		uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 |
			      (uint32_t)b[7] << 24;
		for (int j = 0; j < 16; j++) {
			const int h0 = (int)((qh >> j) & 1) << 4;
			const int h1 = (int)((qh >> (j + 16)) & 1) << 4;

			y[j] = d * (float)((b[8 + j] & 0x0F) | h0) + m;
			y[j + 16] = d * (float)((b[8 + j] >> 4) | h1) + m;
		}
	}
}

/* Q8_0: {f16 d; i8 qs[32]}; y = q * d. */
static void deq_q8_0(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
		float d = f16_at(b);
		for (int j = 0; j < 32; j++)
			y[j] = (float)(int8_t)b[2 + j] * d;
	}
}

/* The 8 6-bit scales and mins of a Q4_K / Q5_K super-block, packed in 12 bytes
 * (ggml-quants.c get_scale_min_k4). */
static void k4_scale_min(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
	for (int j = 0; j < 4; j++) {
		sc[j] = q[j] & 0x3F;
		mn[j] = q[j + 4] & 0x3F;
		sc[j + 4] = (uint8_t)((q[j + 8] & 0x0F) | ((q[j] >> 2) & 0x30));
		mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 2) & 0x30));
	}
}

/* Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]}; 8 sub-blocks of 32: sub-block 2k takes the low
 * nibbles of qs[32k..32k+32), 2k+1 the high ones; y = (d * sc) * q - (dmin * m). */
static void deq_q4_k(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 144, y += 256) {
		float d = f16_at(b), dmin = f16_at(b + 2);
		uint8_t sc[8], mn[8];
		const uint8_t *qs = b + 16;

		k4_scale_min(b + 4, sc, mn);
		for (int s = 0; s < 8; s++) {
			float dl = d * (float)sc[s], ml = dmin * (float)mn[s];
			int shift = (s & 1) * 4;
			for (int l = 0; l < 32; l++)
				y[32 * s + l] = dl * (float)((qs[32 * (s / 2) + l] >> shift) & 0x0F) - ml;
		}
	}
}

/* Q5_K: {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}; as Q4_K with a fifth bit: bit s of
 * qh[l] for sub-block s. */
static void deq_q5_k(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 176, y += 256) {
		float d = f16_at(b), dmin = f16_at(b + 2);
		uint8_t sc[8], mn[8];
		const uint8_t *qh = b + 16, *qs = b + 48;

		k4_scale_min(b + 4, sc, mn);
		for (int s = 0; s < 8; s++) {
			float dl = d * (float)sc[s], ml = dmin * (float)mn[s];
			int shift = (s & 1) * 4;
			for (int l = 0; l < 32; l++) {
				int q = ((qs[32 * (s / 2) + l] >> shift) & 0x0F) |
					(((qh[l] >> s) & 1) << 4);
				y[32 * s + l] = dl * (float)q - ml;
			}
		}
	}
}

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}; element e (0..255) of the super-block,
 * h = e / 128, r = e % 128: low 4 bits from ql[64h + r % 64] (high nibble when r >= 64), top 2
 * bits from qh[32h + r % 32] >> (2 * (r / 32)); y = (d * scales[e / 16]) * (q - 32). */
static void deq_q6_k(const uint8_t *b, int64_t nb, float *y)
{
	for (int64_t i = 0; i < nb; i++, b += 210, y += 256) {
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *scales = (const int8_t *)(b + 192);
		float d = f16_at(b + 208);

		for (int e = 0; e < 256; e++) {
			int h = e / 128, r = e % 128;
			int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
			int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
			float dl = d * (float)scales[e / 16];
			y[e] = dl * (float)((lo | (hi << 4)) - 32);
		}
	}
}

rg_status rg_gguf_to_f32(const rg_gguf_tensor *t, float *out)
{
	const uint8_t *p;
	int64_t n, nb;

	if (!t || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_gguf_to_f32: NULL tensor or output");
	p = t->data;
	n = t->numel;
	nb = rg_gguf_type_name(t->type) ? n / gg_types[t->type].blck : 0;
	switch (t->type) {
	case RG_GGUF_F32:
		memcpy(out, p, (size_t)n * sizeof(float));
		return RG_OK;
	case RG_GGUF_F16:
		for (int64_t i = 0; i < n; i++)
			out[i] = f16_at(p + 2 * i);
		return RG_OK;
	case RG_GGUF_BF16:
		for (int64_t i = 0; i < n; i++) {
			uint16_t h;
			uint32_t bits;
			memcpy(&h, p + 2 * i, 2);
			bits = (uint32_t)h << 16;
			memcpy(&out[i], &bits, 4);
		}
		return RG_OK;
	case RG_GGUF_Q4_0:
		deq_q4_0(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q4_1:
		deq_q4_1(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q5_0:
		deq_q5_0(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q5_1:
		deq_q5_1(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q8_0:
		deq_q8_0(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q4_K:
		deq_q4_k(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q5_K:
		deq_q5_k(p, nb, out);
		return RG_OK;
	case RG_GGUF_Q6_K:
		deq_q6_k(p, nb, out);
		return RG_OK;
	}
	return rg_errorf(RG_ERR_UNSUPPORTED,
			 "gguf: tensor '%s': type %s (%u) cannot be dequantized (F32, F16, BF16, "
			 "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K can)",
			 t->name ? t->name : "?",
			 rg_gguf_type_name(t->type) ? rg_gguf_type_name(t->type) : "unknown",
			 t->type);
}
