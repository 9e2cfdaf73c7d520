/* The tensor source interface (tsrc.h) and its safetensors implementation. */
#include "model/tsrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static bool st_shape(void *ctx, const char *name, int *ndim, int64_t shape[RG_TSRC_MAX_DIMS])
{
	const rg_st_tensor *t = rg_st_find(ctx, name);

	if (!t || t->ndim > RG_TSRC_MAX_DIMS)
		return false;
	*ndim = t->ndim;
	for (int i = 0; i < t->ndim; i++)
		shape[i] = t->shape[i];
	return true;
}

static rg_status st_read(void *ctx, const char *name, float *dst)
{
	const rg_st_tensor *t = rg_st_find(ctx, name);

	if (!t)
		return rg_errorf(RG_ERR_FORMAT, "model.safetensors: missing tensor %s", name);
	rg_st_to_f32(t, dst);
	return RG_OK;
}

static rg_dtype st_dtype(void *ctx, const char *name)
{
	const rg_st_tensor *t = rg_st_find(ctx, name);

	return t ? t->dtype : RG_DTYPE_AUTO;
}

void rg_tsrc_from_st(const rg_st *st, rg_tsrc *out)
{
	memset(out, 0, sizeof(*out));
	out->what = "model.safetensors";
	out->ctx = (void *)st;
	out->shape = st_shape;
	out->read_f32 = st_read;
	out->dtype = st_dtype;
	out->weight_dtype = rg_st_count(st) ? rg_st_at(st, 0)->dtype : RG_DTYPE_AUTO;
}

/* The full name of name under the first prefix where it exists, in buf; false when nowhere. */
static bool resolve(const rg_tsrc *src, const char *const *prefixes, const char *name, char *buf,
		    size_t n, int *ndim, int64_t shape[RG_TSRC_MAX_DIMS])
{
	for (int p = 0; prefixes[p]; p++) {
		snprintf(buf, n, "%s%s", prefixes[p], name);
		if (src->shape(src->ctx, buf, ndim, shape))
			return true;
	}
	return false;
}

bool rg_tsrc_has(const rg_tsrc *src, const char *const *prefixes, const char *name)
{
	char buf[256];
	int64_t shape[RG_TSRC_MAX_DIMS];
	int nd;

	return resolve(src, prefixes, name, buf, sizeof(buf), &nd, shape);
}

/* Resolve name under prefixes into buf (n bytes) and check its shape is (d0) (d1 < 0) or
 * (d0, d1); RG_ERR_FORMAT naming the tensor otherwise. */
static rg_status find_checked(const rg_tsrc *src, const char *const *prefixes, const char *name,
			      int64_t d0, int64_t d1, char *buf, size_t n)
{
	char got[96] = "[";
	int64_t shape[RG_TSRC_MAX_DIMS];
	const int want_nd = d1 < 0 ? 1 : 2;
	int nd = 0;
	size_t off = 1;

	if (!resolve(src, prefixes, name, buf, n, &nd, shape))
		return rg_errorf(RG_ERR_FORMAT, "%s: missing tensor %s%s", src->what,
				 prefixes[0] ? prefixes[0] : "", name);
	if (nd != want_nd || shape[0] != d0 || (nd == 2 && shape[1] != d1)) {
		for (int i = 0; i < nd && off < sizeof(got); i++)
			off += (size_t)snprintf(got + off, sizeof(got) - off, "%s%lld", i ? ", " : "",
						(long long)shape[i]);
		if (off < sizeof(got))
			snprintf(got + off, sizeof(got) - off, "]");
		if (want_nd == 1)
			return rg_errorf(RG_ERR_FORMAT,
					 "tensor %s has shape %s, config.json implies [%lld]", buf,
					 got, (long long)d0);
		return rg_errorf(RG_ERR_FORMAT, "tensor %s has shape %s, config.json implies "
				 "[%lld, %lld]", buf, got, (long long)d0, (long long)d1);
	}
	return RG_OK;
}

bool rg_tsrc_raw(const rg_tsrc *src, const char *const *prefixes, const char *name, int64_t d0,
		 int64_t d1, int *type, const void **data, size_t *bytes)
{
	char buf[256];

	if (!src->raw || find_checked(src, prefixes, name, d0, d1, buf, sizeof(buf)) != RG_OK) {
		rg_error_clear();
		return false;
	}
	return src->raw(src->ctx, buf, type, data, bytes);
}

rg_status rg_tsrc_get(const rg_tsrc *src, const char *const *prefixes, const char *name,
		      int64_t d0, int64_t d1, float **out)
{
	char buf[256];
	rg_status s;

	*out = NULL;
	if ((s = find_checked(src, prefixes, name, d0, d1, buf, sizeof(buf))) != RG_OK)
		return s;
	*out = malloc((size_t)d0 * (size_t)(d1 < 0 ? 1 : d1) * sizeof(float));
	if (!*out)
		return rg_errorf(RG_ERR_OOM, "out of host memory for %s", buf);
	if ((s = src->read_f32(src->ctx, buf, *out)) != RG_OK) {
		free(*out);
		*out = NULL;
	}
	return s;
}

rg_status rg_tsrc_read(const rg_tsrc *src, const char *const *prefixes, const char *name,
		       int64_t d0, int64_t d1, float *dst)
{
	char buf[256];
	rg_status s = find_checked(src, prefixes, name, d0, d1, buf, sizeof(buf));

	return s != RG_OK ? s : src->read_f32(src->ctx, buf, dst);
}

rg_dtype rg_tsrc_dtype(const rg_tsrc *src, const char *const *prefixes, const char *name)
{
	char buf[256];
	int64_t shape[RG_TSRC_MAX_DIMS];
	int nd;

	if (!src->dtype || !resolve(src, prefixes, name, buf, sizeof(buf), &nd, shape))
		return RG_DTYPE_AUTO;
	return src->dtype(src->ctx, buf);
}

const char *rg_tsrc_gguf_name(const rg_tensor_names *t, const char *hf, char *buf, size_t n)
{
	const char *dot;
	size_t stem;
	int l, k = 0;

	if (!strncmp(hf, "model.", 6))
		hf += 6;
	dot = strrchr(hf, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
		return NULL;
	if (sscanf(hf, "layers.%d.%n", &l, &k) == 1 && k > 0) {
		stem = (size_t)(dot - (hf + k));
		for (const rg_tensor_name *e = t->layer; e && e->hf; e++)
			if (strlen(e->hf) == stem && !strncmp(hf + k, e->hf, stem)) {
				snprintf(buf, n, "blk.%d.%s%s", l, e->gguf, dot);
				return buf;
			}
		return NULL;
	}
	stem = (size_t)(dot - hf);
	for (const rg_tensor_name *e = t->top; e && e->hf; e++)
		if (strlen(e->hf) == stem && !strncmp(hf, e->hf, stem)) {
			snprintf(buf, n, "%s%s", e->gguf, dot);
			return buf;
		}
	return NULL;
}
