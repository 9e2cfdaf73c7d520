/* The sampler path of the decoder step (rg_model_step with rg_step_out.ids and rows or top_n;
 * decoder.c runs it as its STEP_SAMPLE mode): the per-row parameters checked against
 * include/ragged.h's ranges, then staged with their
 * penalty / bias lists (CSR) into pinned + backend buffers that a captured decode graph reads at
 * fixed addresses, and rg_op_sample_rows' arguments for a chunk of logits rows. The buffers are
 * allocated at the first sampled step and freed with the decoder. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "ops/ops.h"

/* The sampler path's buffers (model.h) */
void rg_dec_sample_free(rg_model *m)
{
	rg_dec_state *d = &m->dec;

	rg_backend_dealloc(m->be, d->smp_rows_d);
	rg_backend_host_free(m->be, d->smp_rows_h);
	rg_backend_dealloc(m->be, d->smp_off_d);
	rg_backend_host_free(m->be, d->smp_off_h);
	rg_backend_dealloc(m->be, d->smp_pen_d);
	rg_backend_host_free(m->be, d->smp_pen_h);
	rg_backend_dealloc(m->be, d->smp_bias_d);
	rg_backend_host_free(m->be, d->smp_bias_h);
	rg_backend_dealloc(m->be, d->smp_out_d);
	rg_backend_host_free(m->be, d->smp_out_h);
	rg_backend_dealloc(m->be, d->smp_work_d);
	d->smp_rows_d = d->smp_rows_h = NULL;
	d->smp_off_d = d->smp_off_h = NULL;
	d->smp_pen_d = d->smp_pen_h = NULL;
	d->smp_bias_d = d->smp_bias_h = NULL;
	d->smp_out_d = d->smp_out_h = NULL;
	d->smp_work_d = NULL;
	d->smp_pen_cap = d->smp_bias_cap = 0;
}

/* Rows of the sampling buffers: a graph pads n_seq up to a bucket <= max_tokens (the margin of
 * RG_LOGITS_CHUNK rows kept) */
size_t rg_dec_sample_rows(const rg_model *m)
{
	return (size_t)m->max_tokens + RG_LOGITS_CHUNK;
}

/* rg_op_sample_rows' arguments for logits rows r0.. of a step (sample_stage's buffers). */
rg_sample_args rg_dec_sample_args(rg_model *m, int r0, int top_n)
{
	const size_t C = rg_dec_sample_rows(m);
	rg_sample_args a;

	a.rows = m->dec.smp_rows_d + r0;
	a.pen_off = m->dec.smp_off_d + r0;
	a.pen = m->dec.smp_pen_d;
	a.bias_off = m->dec.smp_off_d + C + 1 + r0;
	a.bias = m->dec.smp_bias_d;
	a.top_n = top_n;
	a.mask = NULL; /* structured outputs' rows are sampled on the host (gen/engine.c) */
	a.work = m->dec.smp_work_d;
	a.ids = m->dec.smp_out_d + r0;
	a.logprobs = (float *)(m->dec.smp_out_d + C) + r0;
	a.top_ids = top_n ? m->dec.smp_out_d + 2 * C + (size_t)r0 * top_n : NULL;
	a.top_logprobs = top_n ? (float *)(m->dec.smp_out_d + (2 + RG_SAMPLE_MAX_TOP) * C) +
					 (size_t)r0 * top_n
			       : NULL;
	return a;
}


#define BADS(...) rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_step: " __VA_ARGS__)

/* Every row's parameters (o->rows, not NULL) against the ranges of ragged.h's rg_row_sampling. */
rg_status rg_dec_sample_check(const rg_model *m, int n_logits, const rg_step_out *o)
{
	const int V = m->dec.cfg.vocab_size;

	for (int r = 0; r < n_logits; r++) {
		const rg_row_sampling *p = &o->rows[r];

		if (!(p->temperature >= 0.f) || !isfinite(p->temperature))
			return BADS("out.rows[%d].temperature %g must be >= 0", r, p->temperature);
		if (p->top_k < 0)
			return BADS("out.rows[%d].top_k %d must be >= 0", r, p->top_k);
		if (!(p->top_p > 0.f && p->top_p <= 1.f))
			return BADS("out.rows[%d].top_p %g must be in (0, 1]", r, p->top_p);
		if (!(p->min_p >= 0.f && p->min_p <= 1.f))
			return BADS("out.rows[%d].min_p %g must be in [0, 1]", r, p->min_p);
		if (!(p->repetition_penalty > 0.f) || !isfinite(p->repetition_penalty))
			return BADS("out.rows[%d].repetition_penalty %g must be > 0", r,
				    p->repetition_penalty);
		if (!(fabsf(p->presence_penalty) <= 2.f) || !(fabsf(p->frequency_penalty) <= 2.f))
			return BADS("out.rows[%d]: presence/frequency penalties must be in [-2, 2]", r);
		if (!(p->u >= 0.0 && p->u < 1.0))
			return BADS("out.rows[%d].u %g must be in [0, 1)", r, p->u);
		if (p->n_penalty < 0 || (p->n_penalty > 0 && (!p->penalty_ids ||
							      !p->penalty_counts ||
							      !p->penalty_in_prompt)))
			return BADS("out.rows[%d]: %d penalty entries without arrays", r, p->n_penalty);
		for (int i = 0; i < p->n_penalty; i++)
			if (p->penalty_ids[i] < 0 || p->penalty_ids[i] >= V ||
			    p->penalty_counts[i] < 0)
				return BADS("out.rows[%d].penalty_ids[%d] = %d outside [0, %d) or a "
					    "negative count", r, i, p->penalty_ids[i], V);
		if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && (!p->logit_bias_ids ||
								    !p->logit_bias_values)))
			return BADS("out.rows[%d]: %d logit_bias entries without arrays", r,
				    p->n_logit_bias);
		for (int i = 0; i < p->n_logit_bias; i++)
			if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= V ||
			    !isfinite(p->logit_bias_values[i]))
				return BADS("out.rows[%d].logit_bias_ids[%d] = %d outside [0, %d) or "
					    "bias not finite", r, i, p->logit_bias_ids[i], V);
	}
	return RG_OK;
}

/* Grow a pinned + backend pair of entry lists to hold need entries of esz bytes (graphs read
 * the old buffers: freed). */
static rg_status sample_grow(rg_model *m, void **dp, void **hp, size_t *cap, size_t need,
			     size_t esz)
{
	rg_status s;
	size_t c;

	if (need <= *cap && *dp)
		return RG_OK;
	c = need < 1024 ? 1024 : 2 * need;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;
	rg_dec_graphs_free(m);
	rg_backend_dealloc(m->be, *dp);
	rg_backend_host_free(m->be, *hp);
	*dp = *hp = NULL;
	*cap = 0;
	if ((s = rg_backend_alloc(m->be, c * esz, dp)) != RG_OK ||
	    (s = rg_backend_host_alloc(m->be, c * esz, hp)) != RG_OK)
		return rg_error_wrap(s, "sampling lists of %zu entries", c);
	*cap = c;
	return RG_OK;
}

/* Stage the sampling parameters of n rows (o->rows; NULL: none), padded to nl greedy rows
 * without lists (a graph's padding sequences, and every row when o->rows is NULL); allocates the
 * buffers at the first call. */
rg_status rg_dec_sample_stage(rg_model *m, int n, int nl, const rg_step_out *o)
{
	const rg_row_sampling *rows = o->rows;
	rg_dec_state *d = &m->dec;
	const size_t C = rg_dec_sample_rows(m), V = (size_t)d->cfg.vocab_size;
	size_t n_pen = 0, n_bias = 0;
	int32_t *po = NULL, *bo = NULL;
	rg_status s;

	if (!d->smp_rows_d &&
	    ((s = rg_backend_alloc(m->be, C * sizeof(rg_sample_row), (void **)&d->smp_rows_d)) ||
	     (s = rg_backend_host_alloc(m->be, C * sizeof(rg_sample_row),
					(void **)&d->smp_rows_h)) ||
	     (s = rg_backend_alloc(m->be, 2 * (C + 1) * 4, (void **)&d->smp_off_d)) ||
	     (s = rg_backend_host_alloc(m->be, 2 * (C + 1) * 4, (void **)&d->smp_off_h)) ||
	     (s = rg_backend_alloc(m->be, (2 + 2 * RG_SAMPLE_MAX_TOP) * C * 4,
				   (void **)&d->smp_out_d)) ||
	     (s = rg_backend_host_alloc(m->be, (2 + 2 * RG_SAMPLE_MAX_TOP) * C * 4,
					(void **)&d->smp_out_h)) ||
	     (s = rg_backend_alloc(m->be, rg_sample_work_bytes(RG_LOGITS_CHUNK, (int)V),
				   &d->smp_work_d)))) {
		rg_dec_sample_free(m);
		return rg_error_wrap(s, "sampling buffers for %zu rows of %zu", C, V);
	}
	if (!rows)
		n = 0; /* every row greedy */
	for (int r = 0; r < n; r++) {
		n_pen += (size_t)rows[r].n_penalty;
		n_bias += (size_t)rows[r].n_logit_bias;
	}
	if ((s = sample_grow(m, (void **)&d->smp_pen_d, (void **)&d->smp_pen_h, &d->smp_pen_cap,
			     n_pen, sizeof(rg_sample_pen))) != RG_OK ||
	    (s = sample_grow(m, (void **)&d->smp_bias_d, (void **)&d->smp_bias_h,
			     &d->smp_bias_cap, n_bias, sizeof(rg_sample_bias))) != RG_OK)
		return s;
	po = d->smp_off_h;
	bo = d->smp_off_h + C + 1;
	po[0] = bo[0] = 0;
	for (int r = 0; r < nl; r++) {
		rg_sample_row *w = &d->smp_rows_h[r];

		memset(w, 0, sizeof(*w));
		w->top_p = 1.f;
		w->repetition_penalty = 1.f;
		po[r + 1] = po[r];
		bo[r + 1] = bo[r];
		if (r >= n)
			continue; /* padding: greedy, no lists */
		{
			const rg_row_sampling *p = &rows[r];

			w->u = p->u;
			w->temperature = p->temperature;
			w->top_k = p->top_k;
			w->top_p = p->top_p;
			w->min_p = p->min_p;
			w->repetition_penalty = p->repetition_penalty;
			w->presence_penalty = p->presence_penalty;
			w->frequency_penalty = p->frequency_penalty;
			for (int i = 0; i < p->n_penalty; i++)
				d->smp_pen_h[po[r + 1]++] = (rg_sample_pen){
					p->penalty_ids[i], p->penalty_counts[i],
					p->penalty_in_prompt[i] ? 1 : 0};
			for (int i = 0; i < p->n_logit_bias; i++)
				d->smp_bias_h[bo[r + 1]++] = (rg_sample_bias){
					p->logit_bias_ids[i], p->logit_bias_values[i]};
		}
	}
	if ((s = rg_backend_upload_async(m->be, d->smp_rows_d, d->smp_rows_h,
					 (size_t)nl * sizeof(rg_sample_row))) != RG_OK ||
	    (s = rg_backend_upload_async(m->be, d->smp_off_d, d->smp_off_h, 2 * (C + 1) * 4)) !=
		    RG_OK ||
	    (n_pen && (s = rg_backend_upload_async(m->be, d->smp_pen_d, d->smp_pen_h,
						   n_pen * sizeof(rg_sample_pen))) != RG_OK) ||
	    (n_bias && (s = rg_backend_upload_async(m->be, d->smp_bias_d, d->smp_bias_h,
						    n_bias * sizeof(rg_sample_bias))) != RG_OK))
		return s;
	return RG_OK;
}
