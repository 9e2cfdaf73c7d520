/* Validating safetensors reader (pread into memory) (single file or sharded). See safetensors.h for the
 * contract. Format reference: https://github.com/huggingface/safetensors (README, "Format").
 *
 * Every check happens in rg_st_open_file / rg_st_open_dir, before a single tensor is handed out:
 * a reader that trusts the header can be made to read outside the file by a lying offset. */
#include "core/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"

#define RG_ST_MAX_HEADER ((uint64_t)100 << 20) /* 100 MiB, the limit the Rust reference uses */
#define RG_ST_MAX_INDEX ((off_t)64 << 20)      /* model.safetensors.index.json size limit */

typedef struct rg_st_file {
	char *path;          /* as opened, for messages */
	int fd;              /* open while the file is read, -1 after */
	void *map;           /* (map_len) bytes: the whole file, read with pread (owned) */
	size_t map_len;
	const uint8_t *data; /* start of the data region inside map */
	size_t data_len;
} rg_st_file;

/* The public rg_st_tensor first, so rg_st_at can hand out &entry->t. */
typedef struct rg_st_entry {
	rg_st_tensor t;
	size_t file;         /* index into rg_st.files */
	uint64_t begin, end; /* data_offsets, relative to the file's data region */
	bool skip;           /* integer buffer (position_ids...): validated, not exposed */
} rg_st_entry;

struct rg_st {
	rg_st_file *files;
	size_t n_files;
	rg_st_entry *ents; /* sorted by name once open completes */
	size_t n_ents, cap_ents;
	rg_st_entry *skipped; /* validated integer buffers, sorted by name, not exposed */
	size_t n_skipped;
};

size_t rg_st_count(const rg_st *st) { return st ? st->n_ents : 0; }

const rg_st_tensor *rg_st_at(const rg_st *st, size_t i)
{
	if (!st || i >= st->n_ents)
		return NULL;
	return &st->ents[i].t;
}

size_t rg_st_numel(const rg_st_tensor *t)
{
	size_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= (size_t)t->shape[i]; /* overflow excluded at open time */
	return n;
}

static int cmp_ent_name(const void *a, const void *b)
{
	return strcmp(((const rg_st_entry *)a)->t.name, ((const rg_st_entry *)b)->t.name);
}

const rg_st_tensor *rg_st_find(const rg_st *st, const char *name)
{
	rg_st_entry key;
	const rg_st_entry *e;

	if (!st || !name || st->n_ents == 0)
		return NULL;
	key.t.name = (char *)name;
	e = bsearch(&key, st->ents, st->n_ents, sizeof(*st->ents), cmp_ent_name);
	return e ? &e->t : NULL;
}

void rg_st_free(rg_st *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->n_ents; i++)
		free(st->ents[i].t.name);
	free(st->ents);
	for (size_t i = 0; i < st->n_skipped; i++)
		free(st->skipped[i].t.name);
	free(st->skipped);
	for (size_t i = 0; i < st->n_files; i++) {
		free(st->files[i].map);
		if (st->files[i].fd >= 0)
			close(st->files[i].fd);
		free(st->files[i].path);
	}
	free(st->files);
	free(st);
}

/* IEEE 754 binary16 -> binary32, exact for every input (subnormals, +-0, +-inf, NaN payloads). */
float rg_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ff;
	uint32_t bits;
	float f;

	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24, exactly representable in float */
		f = (float)mant * 0x1p-24f;
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | (mant << 13);
	else
		bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

void rg_widen16_tail(void *buf, size_t n, rg_dtype dt)
{
	const unsigned char *src = (const unsigned char *)buf + 2 * n;
	float *dst = buf;

	for (size_t i = 0; i < n; i++) {
		uint16_t h;
		uint32_t bits;

		memcpy(&h, src + 2 * i, 2);
		if (dt == RG_DTYPE_BF16) {
			bits = (uint32_t)h << 16;
			memcpy(&dst[i], &bits, sizeof(bits));
		} else {
			dst[i] = rg_half_to_float(h);
		}
	}
}

void rg_st_to_f32(const rg_st_tensor *t, float *dst)
{
	size_t n = rg_st_numel(t);
	const uint8_t *p = t->data;

	/* memcpy per element: the data region is only as aligned as the writer made it */
	switch (t->dtype) {
	case RG_DTYPE_F32:
		memcpy(dst, p, n * sizeof(float));
		break;
	case RG_DTYPE_F16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			dst[i] = rg_half_to_float(h);
		}
		break;
	case RG_DTYPE_AUTO: /* never a tensor dtype */
		break;
	case RG_DTYPE_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			uint32_t bits;
			memcpy(&h, p + 2 * i, 2);
			bits = (uint32_t)h << 16;
			memcpy(&dst[i], &bits, sizeof(float));
		}
		break;
	}
}

/* ---------------------------------------------------------------------------------------------- */

static rg_status st_push(rg_st *st, rg_st_entry **out)
{
	if (st->n_ents == st->cap_ents) {
		size_t cap = st->cap_ents ? 2 * st->cap_ents : 64;
		rg_st_entry *e = realloc(st->ents, cap * sizeof(*e));
		if (!e)
			return rg_errorf(RG_ERR_OOM, "safetensors: out of memory for tensor table");
		st->ents = e;
		st->cap_ents = cap;
	}
	*out = &st->ents[st->n_ents];
	memset(*out, 0, sizeof(**out));
	return RG_OK;
}

static bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* json-c keeps the last of duplicate keys silently, so duplicates are found on the raw text:
 * count the keys of the top-level object (json-c has already validated the syntax, so tracking
 * strings and nesting depth is enough) and compare with the parsed object's size. On mismatch,
 * *dup is set to a malloc'd copy of a raw key that occurs twice ("" if they differ only by
 * escaping). */
typedef struct { const char *s; size_t n; } rg_span;

static int cmp_span(const void *a, const void *b)
{
	const rg_span *x = a, *y = b;
	size_t n = x->n < y->n ? x->n : y->n;
	int c = memcmp(x->s, y->s, n);
	if (c)
		return c;
	return (x->n > y->n) - (x->n < y->n);
}

static rg_status st_find_duplicate_key(const char *js, size_t len, size_t n_parsed, char **dup)
{
	rg_span *keys = NULL;
	size_t n_keys = 0, cap = 0;
	int depth = 0;
	rg_status st = RG_OK;

	*dup = NULL;
	for (size_t i = 0; i < len; i++) {
		char c = js[i];
		if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			depth--;
		} else if (c == '"') {
			size_t start = ++i;
			while (i < len && js[i] != '"') {
				if (js[i] == '\\')
					i++;
				i++;
			}
			if (depth == 1) {
				size_t j = i + 1;
				while (j < len && is_json_ws(js[j]))
					j++;
				if (j < len && js[j] == ':') {
					if (n_keys == cap) {
						size_t nc = cap ? 2 * cap : 64;
						rg_span *k = realloc(keys, nc * sizeof(*k));
						if (!k) {
							st = rg_errorf(RG_ERR_OOM, "safetensors: out of memory");
							goto out_free_keys;
						}
						keys = k;
						cap = nc;
					}
					keys[n_keys].s = js + start;
					keys[n_keys].n = i - start;
					n_keys++;
				}
			}
		}
	}
	if (n_keys == n_parsed)
		goto out_free_keys;
	qsort(keys, n_keys, sizeof(*keys), cmp_span);
	for (size_t i = 1; i < n_keys; i++) {
		if (cmp_span(&keys[i - 1], &keys[i]) == 0) {
			*dup = strndup(keys[i].s, keys[i].n);
			break;
		}
	}
	if (!*dup)
		*dup = strdup("");
	if (!*dup)
		st = rg_errorf(RG_ERR_OOM, "safetensors: out of memory");
out_free_keys:
	free(keys);
	return st;
}

/* Every dtype of the safetensors format; only the first three are usable weights. */
static const struct {
	const char *name;
	size_t esize;
	bool supported;
	rg_dtype dt;
} st_dtypes[] = {
	{"F32", 4, true, RG_DTYPE_F32},   {"F16", 2, true, RG_DTYPE_F16},
	{"BF16", 2, true, RG_DTYPE_BF16}, {"F64", 8, false, 0},  {"I64", 8, false, 0},
	{"U64", 8, false, 0},             {"I32", 4, false, 0},  {"U32", 4, false, 0},
	{"I16", 2, false, 0},             {"U16", 2, false, 0},  {"I8", 1, false, 0},
	{"U8", 1, false, 0},              {"BOOL", 1, false, 0}, {"F8_E4M3", 1, false, 0},
	{"F8_E5M2", 1, false, 0},
};

/* Integer buffers that older transformers versions save next to the weights (BertEmbeddings'
 * position_ids / token_type_ids). ragged computes them itself, so they may have any dtype: they
 * are validated like every tensor, then left out of the table. */
static bool is_ignorable_buffer(const char *name)
{
	static const char *const suffixes[] = {"position_ids", "token_type_ids"};
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t m = strlen(suffixes[i]);
		if (n >= m && !strcmp(name + n - m, suffixes[i]) && (n == m || name[n - m - 1] == '.'))
			return true;
	}
	return false;
}

/* A non-negative JSON integer, or false. (json-c parses integers beyond int64 as uint64.) */
static bool json_get_u64(json_object *o, uint64_t *v)
{
	int64_t s;
	if (!o || !json_object_is_type(o, json_type_int))
		return false;
	errno = 0;
	s = json_object_get_int64(o);
	if (s < 0)
		return false;
	if (s == INT64_MAX) {
		*v = json_object_get_uint64(o);
		return true;
	}
	*v = (uint64_t)s;
	return true;
}

/* Validate one header entry and append it to st. */
static rg_status st_add_tensor(rg_st *st, size_t file_idx, const char *name, json_object *desc)
{
	const rg_st_file *f = &st->files[file_idx];
	const char *path = f->path;
	json_object *jd, *js, *jo;
	rg_dtype dt = RG_DTYPE_F32;
	size_t esize = 0, ndim, k;
	bool skip = false;
	uint64_t begin, end, nbytes;
	int64_t shape[RG_ST_MAX_DIMS];
	rg_st_entry *e = NULL;
	rg_status s;

	if (!json_object_is_type(desc, json_type_object))
		return rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", path,
				 name);
	if (!json_object_object_get_ex(desc, "dtype", &jd) ||
	    !json_object_is_type(jd, json_type_string))
		return rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"",
				 path, name);
	for (k = 0; k < sizeof(st_dtypes) / sizeof(st_dtypes[0]); k++)
		if (!strcmp(json_object_get_string(jd), st_dtypes[k].name))
			break;
	if (k == sizeof(st_dtypes) / sizeof(st_dtypes[0]))
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: tensor '%s': unknown dtype %s", path, name,
				 json_object_get_string(jd));
	if (!st_dtypes[k].supported && !is_ignorable_buffer(name))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: tensor '%s': dtype %s not supported (F32, F16, BF16 only)", path,
				 name, json_object_get_string(jd));
	dt = st_dtypes[k].dt;
	esize = st_dtypes[k].esize;
	skip = !st_dtypes[k].supported;
	if (!json_object_object_get_ex(desc, "shape", &js) ||
	    !json_object_is_type(js, json_type_array))
		return rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"",
				 path, name);
	ndim = json_object_array_length(js);
	if (ndim > RG_ST_MAX_DIMS)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (max %d)", path,
				 name, ndim, RG_ST_MAX_DIMS);
	nbytes = esize;
	for (size_t i = 0; i < ndim; i++) {
		uint64_t d;
		json_object *jdim = json_object_array_get_idx(js, i);
		if (!json_get_u64(jdim, &d) || d > INT64_MAX)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: tensor '%s': shape[%zu] = %s is not a non-negative integer",
					 path, name, i,
					 jdim ? json_object_to_json_string(jdim) : "null");
		shape[i] = (int64_t)d;
		if (d != 0 && nbytes > UINT64_MAX / d)
			return rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s': shape product overflows", path,
					 name);
		nbytes *= d;
	}
	if (!json_object_object_get_ex(desc, "data_offsets", &jo) ||
	    !json_object_is_type(jo, json_type_array) || json_object_array_length(jo) != 2 ||
	    !json_get_u64(json_object_array_get_idx(jo, 0), &begin) ||
	    !json_get_u64(json_object_array_get_idx(jo, 1), &end))
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tensor '%s': \"data_offsets\" must be [begin, end] with "
				 "non-negative integers",
				 path, name);
	if (begin > end)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tensor '%s': data_offsets [%llu,%llu] have begin > end", path,
				 name, (unsigned long long)begin, (unsigned long long)end);
	if (end > f->data_len)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tensor '%s': data_offsets [%llu,%llu] exceed data size %zu", path,
				 name, (unsigned long long)begin, (unsigned long long)end, f->data_len);
	if (end - begin != nbytes)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tensor '%s': shape x %zu bytes = %llu bytes but data_offsets "
				 "[%llu,%llu] hold %llu",
				 path, name, esize, (unsigned long long)nbytes,
				 (unsigned long long)begin, (unsigned long long)end,
				 (unsigned long long)(end - begin));
	if ((s = st_push(st, &e)) != RG_OK)
		return s;
	e->t.name = strdup(name);
	if (!e->t.name)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	st->n_ents++;
	e->t.dtype = dt;
	e->t.ndim = (int)ndim;
	memcpy(e->t.shape, shape, ndim * sizeof(shape[0]));
	e->t.data = f->data + begin;
	e->t.nbytes = (size_t)nbytes;
	e->file = file_idx;
	e->begin = begin;
	e->end = end;
	e->skip = skip;
	return RG_OK;
}

static int cmp_ent_range(const void *a, const void *b)
{
	const rg_st_entry *x = *(const rg_st_entry *const *)a, *y = *(const rg_st_entry *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return (x->end > y->end) - (x->end < y->end);
}

/* Refuse overlapping byte ranges among the entries [first, st->n_ents) of one file. Empty ranges
 * overlap nothing. */
static rg_status st_check_overlap(rg_st *st, size_t first)
{
	size_t n = st->n_ents - first;
	const rg_st_entry **v, *holder = NULL;
	uint64_t max_end = 0;
	rg_status s = RG_OK;

	if (n < 2)
		return RG_OK;
	v = malloc(n * sizeof(*v));
	if (!v)
		return rg_errorf(RG_ERR_OOM, "safetensors: out of memory");
	for (size_t i = 0; i < n; i++)
		v[i] = &st->ents[first + i];
	qsort(v, n, sizeof(*v), cmp_ent_range);
	for (size_t i = 0; i < n; i++) {
		if (v[i]->begin == v[i]->end)
			continue;
		if (holder && v[i]->begin < max_end) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: tensor '%s': data_offsets [%llu,%llu] overlap tensor '%s' "
				      "[%llu,%llu]",
				      st->files[v[i]->file].path, v[i]->t.name,
				      (unsigned long long)v[i]->begin, (unsigned long long)v[i]->end,
				      holder->t.name, (unsigned long long)holder->begin,
				      (unsigned long long)holder->end);
			break;
		}
		if (v[i]->end > max_end) {
			max_end = v[i]->end;
			holder = v[i];
		}
	}
	free(v);
	return s;
}

/* Read n bytes from offset 0 of fd into buf with pread. A short read (the file shrank since
 * fstat: truncated while being loaded) is RG_ERR_IO naming the path and both sizes. */
static rg_status st_read_all(int fd, void *buf, size_t n, const char *path)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return rg_errorf(RG_ERR_IO, "%s: read failed at byte %zu: %s", path, got,
					 strerror(errno));
		if (r == 0)
			return rg_errorf(RG_ERR_IO, "%s: file shrank to %zu of %zu bytes while being "
					 "read (truncated during load?)", path, got, n);
		got += (size_t)r;
	}
	return RG_OK;
}

/* Read one file, validate its header and append its tensors to st. */
static rg_status st_load_file(rg_st *st, const char *path)
{
	rg_st_file *files, *f;
	struct stat sb;
	uint64_t hlen;
	json_object *hdr = NULL;
	char *dup = NULL;
	size_t first = st->n_ents;
	rg_status s;

	files = realloc(st->files, (st->n_files + 1) * sizeof(*files));
	if (!files)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	st->files = files;
	f = &st->files[st->n_files];
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	st->n_files++;
	f->path = strdup(path);
	if (!f->path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);

	/* The file is read into memory with pread, not mapped: a mapping turns a file truncated
	 * or rewritten while it is in use (a model being replaced in place, a full disk) into
	 * SIGBUS at whatever instruction touches the lost page, which no caller can handle. Read
	 * into a private copy, a shrinking file is a short read and a clean RG_ERR_IO, and nothing
	 * after this function touches the file. The copy lives only until the weights are
	 * converted (rg_st_free after rg_model_load), and a non-regular path (a FIFO) is refused
	 * before any read that could block. */
	f->fd = rg_file_open_regular(path, &sb);
	if (f->fd < 0)
		return RG_ERR_IO;
	if (sb.st_size < 8)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: file is %lld bytes, too short for the 8-byte header length",
				 path, (long long)sb.st_size);
	if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX - 64)
		return rg_errorf(RG_ERR_FORMAT, "%s: file too large", path);
	f->map_len = (size_t)sb.st_size;
	/* 64-byte aligned, as a mapping's page alignment made the data region before */
	f->map = aligned_alloc(64, (f->map_len + 63) & ~(size_t)63);
	if (!f->map)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory for %zu bytes", path, f->map_len);
	if ((s = st_read_all(f->fd, f->map, f->map_len, path)) != RG_OK)
		return s;
	close(f->fd);
	f->fd = -1;

	hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | ((const uint8_t *)f->map)[i];
	if (hlen > RG_ST_MAX_HEADER)
		return rg_errorf(RG_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit",
				 path, (unsigned long long)hlen,
				 (unsigned long long)RG_ST_MAX_HEADER);
	if (hlen > f->map_len - 8)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: header length %llu exceeds the %zu bytes after the length field "
				 "(truncated file?)",
				 path, (unsigned long long)hlen, f->map_len - 8);
	if (hlen < 2)
		return rg_errorf(RG_ERR_FORMAT, "%s: header length %llu too small for a JSON object",
				 path, (unsigned long long)hlen);
	f->data = (const uint8_t *)f->map + 8 + hlen;
	f->data_len = f->map_len - 8 - (size_t)hlen;

	s = rg_json_parse((const char *)f->map + 8, (size_t)hlen,
			  JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8, path, "header", &hdr);
	if (s != RG_OK)
		return s;
	if (!json_object_is_type(hdr, json_type_object)) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: header is JSON %s, not an object", path,
			      json_type_to_name(json_object_get_type(hdr)));
		goto out_put_hdr;
	}
	s = st_find_duplicate_key((const char *)f->map + 8, (size_t)hlen,
				  (size_t)json_object_object_length(hdr), &dup);
	if (s != RG_OK)
		goto out_put_hdr;
	if (dup) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", path, dup);
		goto out_free_dup;
	}
	json_object_object_foreach(hdr, key, val) {
		if (!strcmp(key, "__metadata__"))
			continue;
		s = st_add_tensor(st, st->n_files - 1, key, val);
		if (s != RG_OK)
			goto out_put_hdr;
	}
	s = st_check_overlap(st, first);
out_free_dup:
	free(dup);
out_put_hdr:
	json_object_put(hdr);
	return s;
}

/* Sort by name for rg_st_find, refuse a name present twice (possible across shards), and move
 * the skipped integer buffers out of the public table. */
static rg_status st_finish(rg_st *st)
{
	size_t n_skip = 0, w = 0, ws = 0;

	if (st->n_ents)
		qsort(st->ents, st->n_ents, sizeof(*st->ents), cmp_ent_name);
	for (size_t i = 1; i < st->n_ents; i++)
		if (!strcmp(st->ents[i - 1].t.name, st->ents[i].t.name))
			return rg_errorf(RG_ERR_FORMAT, "tensor '%s' appears in both %s and %s",
					 st->ents[i].t.name, st->files[st->ents[i - 1].file].path,
					 st->files[st->ents[i].file].path);
	for (size_t i = 0; i < st->n_ents; i++)
		n_skip += st->ents[i].skip;
	if (n_skip == 0)
		return RG_OK;
	st->skipped = malloc(n_skip * sizeof(*st->skipped));
	if (!st->skipped)
		return rg_errorf(RG_ERR_OOM, "safetensors: out of memory");
	for (size_t i = 0; i < st->n_ents; i++) {
		if (st->ents[i].skip)
			st->skipped[ws++] = st->ents[i];
		else
			st->ents[w++] = st->ents[i];
	}
	st->n_ents = w;
	st->n_skipped = ws;
	return RG_OK;
}

/* The entry named name, exposed or skipped; NULL when absent. */
static const rg_st_entry *st_find_any(const rg_st *st, const char *name)
{
	const rg_st_tensor *t = rg_st_find(st, name);
	rg_st_entry key;
	if (t)
		return (const rg_st_entry *)t;
	if (st->n_skipped == 0)
		return NULL;
	key.t.name = (char *)name;
	return bsearch(&key, st->skipped, st->n_skipped, sizeof(*st->skipped), cmp_ent_name);
}

rg_status rg_st_open_file(const char *path, rg_st **out)
{
	rg_st *st;
	rg_status s;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	s = st_load_file(st, path);
	if (s == RG_OK)
		s = st_finish(st);
	if (s != RG_OK) {
		rg_st_free(st);
		return s;
	}
	*out = st;
	return RG_OK;
}

static bool shard_name_ok(const char *s)
{
	return s[0] != '\0' && !strchr(s, '/') && !strstr(s, "..");
}

/* Sharded checkpoint: open every distinct shard of weight_map once, then check that each tensor
 * the index names is in the shard the index says. */
static rg_status st_open_index(rg_st *st, const char *dir, const char *index_path)
{
	char *buf = NULL, *shard_path = NULL;
	size_t len = 0;
	json_object *root = NULL, *wm;
	const char **shards = NULL;
	size_t n_shards = 0;
	rg_status s;

	s = rg_file_read(index_path, RG_ST_MAX_INDEX, &buf, &len);
	if (s != RG_OK)
		return s;
	s = rg_json_parse(buf, len, 0, index_path, "index", &root);
	if (s != RG_OK)
		goto out_free_buf;
	if (!json_object_is_type(root, json_type_object) ||
	    !json_object_object_get_ex(root, "weight_map", &wm) ||
	    !json_object_is_type(wm, json_type_object)) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: \"weight_map\" missing or not an object",
			      index_path);
		goto out_put_root;
	}
	if (json_object_object_length(wm) == 0) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: \"weight_map\" is empty", index_path);
		goto out_put_root;
	}
	shards = calloc((size_t)json_object_object_length(wm), sizeof(*shards));
	if (!shards) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", index_path);
		goto out_put_root;
	}
	json_object_object_foreach(wm, tname, jfile) {
		const char *fname;
		bool seen = false;
		if (!json_object_is_type(jfile, json_type_string)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: weight_map['%s'] is not a string",
				      index_path, tname);
			goto out_free_shards;
		}
		fname = json_object_get_string(jfile);
		if (!shard_name_ok(fname)) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: weight_map['%s'] = '%s' is not a plain file name in the "
				      "model directory",
				      index_path, tname, fname);
			goto out_free_shards;
		}
		for (size_t i = 0; i < n_shards && !seen; i++)
			seen = !strcmp(shards[i], fname);
		if (!seen)
			shards[n_shards++] = fname;
	}
	for (size_t i = 0; i < n_shards; i++) {
		shard_path = rg_path_join(dir, shards[i]);
		if (!shard_path) {
			s = rg_errorf(RG_ERR_OOM, "%s: out of memory", index_path);
			goto out_free_shards;
		}
		s = st_load_file(st, shard_path);
		free(shard_path);
		if (s != RG_OK) {
			rg_error_wrap(s, "shard of %s", index_path);
			goto out_free_shards;
		}
	}
	s = st_finish(st);
	if (s != RG_OK)
		goto out_free_shards;
	json_object_object_foreach(wm, tname2, jfile2) {
		const rg_st_entry *t = st_find_any(st, tname2);
		const char *fname = json_object_get_string(jfile2);
		const char *got, *slash;
		if (!t) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: tensor '%s' mapped to %s is not in %s/%s",
				      index_path, tname2, fname, dir, fname);
			goto out_free_shards;
		}
		got = st->files[t->file].path;
		slash = strrchr(got, '/');
		got = slash ? slash + 1 : got;
		if (strcmp(got, fname)) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: tensor '%s' mapped to %s is not in %s/%s (found in %s)",
				      index_path, tname2, fname, dir, fname, got);
			goto out_free_shards;
		}
	}
out_free_shards:
	free(shards);
out_put_root:
	json_object_put(root);
out_free_buf:
	free(buf);
	return s;
}

rg_status rg_st_open_dir(const char *dir, rg_st **out)
{
	char *single, *index;
	struct stat sb;
	rg_st *st;
	rg_status s;

	*out = NULL;
	single = rg_path_join(dir, "model.safetensors");
	index = rg_path_join(dir, "model.safetensors.index.json");
	if (!single || !index) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
		goto out_free_paths;
	}
	if (stat(single, &sb) == 0 || errno != ENOENT) {
		s = rg_st_open_file(single, out);
		goto out_free_paths;
	}
	if (stat(index, &sb) != 0) {
		if (errno == ENOENT)
			s = rg_errorf(RG_ERR_IO,
				      "%s: no model.safetensors or model.safetensors.index.json "
				      "(only safetensors weights are supported)",
				      dir);
		else
			s = rg_errorf(RG_ERR_IO, "%s: %s", index, strerror(errno));
		goto out_free_paths;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		s = rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
		goto out_free_paths;
	}
	s = st_open_index(st, dir, index);
	if (s != RG_OK)
		rg_st_free(st);
	else
		*out = st;
out_free_paths:
	free(single);
	free(index);
	return s;
}
