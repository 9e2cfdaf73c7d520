/* Shared layer builders of the decoder architectures (layers.h). */
#include "model/layers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

rg_status rg_layer_load_embed_head(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				   const char *embed_name, const char *const *head_prefixes,
				   const char *head_name, void **embed_d, void **head_d)
{
	rg_decoder_config *c = &m->dec.cfg;
	const int64_t V = c->vocab_size, H = c->hidden_size;
	const size_t n = (size_t)V * (size_t)H;
	float *e = NULL, *h = NULL;
	rg_status s;

	*embed_d = *head_d = NULL;
	if ((s = rg_tsrc_get(src, prefixes, embed_name, V, H, &e)) != RG_OK)
		return s;
	if ((rg_tsrc_has(src, head_prefixes, head_name) || !c->tie_word_embeddings) &&
	    (s = rg_tsrc_get(src, head_prefixes, head_name, V, H, &h)) != RG_OK) {
		free(e);
		return s;
	}
	if (h && !memcmp(h, e, n * sizeof(float))) { /* a stored copy of the tied table */
		free(h);
		h = NULL;
	}
	c->tie_word_embeddings = h == NULL;
	if ((s = rg_dec_upload(m, e, n, true, embed_d)) != RG_OK) {
		free(h);
		return s;
	}
	if (!h) {
		m->dec.lm_head = *embed_d; /* unprepared: the embedding gather reads it too */
		return RG_OK;
	}
	if ((s = rg_dec_upload(m, h, n, true, head_d)) != RG_OK ||
	    (s = rg_op_prepare_weight(m->be, *head_d, (int)V, (int)H)) != RG_OK)
		return s;
	m->dec.lm_head = *head_d;
	return RG_OK;
}

rg_status rg_layer_load_stacked(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				const char *const names[], const int64_t d0[], int k, int64_t d1,
				bool prepare, void **dst)
{
	const size_t cols = (size_t)(d1 < 0 ? 1 : d1);
	size_t rows = 0, off = 0;
	float *all, *t;
	rg_status s;

	for (int i = 0; i < k; i++)
		rows += (size_t)d0[i];
	if (k == 1) {
		if ((s = rg_tsrc_get(src, prefixes, names[0], d0[0], d1, &all)) != RG_OK)
			return s;
	} else {
		if (!(all = malloc(rows * cols * sizeof(float))))
			return rg_errorf(RG_ERR_OOM, "out of host memory for %s", names[0]);
		for (int i = 0; i < k; i++) {
			if ((s = rg_tsrc_get(src, prefixes, names[i], d0[i], d1, &t)) != RG_OK) {
				free(all);
				return s;
			}
			memcpy(all + off, t, (size_t)d0[i] * cols * sizeof(float));
			off += (size_t)d0[i] * cols;
			free(t);
		}
	}
	if ((s = rg_dec_upload(m, all, rows * cols, true, dst)) != RG_OK)
		return s;
	return prepare ? rg_op_prepare_weight(m->be, *dst, (int)rows, (int)cols) : RG_OK;
}

rg_status rg_layer_load_linear(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       const char *name, int64_t d0, int64_t d1, void **dst)
{
	const char *const names[1] = {name};
	const int64_t rows[1] = {d0};

	return rg_layer_load_stacked(m, src, prefixes, names, rows, 1, d1, true, dst);
}

rg_status rg_layer_load_vec(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			    const char *name, int64_t n, bool act, void **dst)
{
	float *t;
	rg_status s;

	if ((s = rg_tsrc_get(src, prefixes, name, n, -1, &t)) != RG_OK)
		return s;
	return rg_dec_upload(m, t, (size_t)n, act, dst);
}
