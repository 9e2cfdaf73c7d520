/* Sampler chain and its steps (sampler.h has the order and the sources of each step). */
#include "gen/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/topk.h"

void rg_sampling_params_default(rg_sampling_params *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 1.f;
	p->top_p = 1.f;
	p->repetition_penalty = 1.f;
}

rg_status rg_sampling_params_check(const rg_sampling_params *p, int vocab)
{
	if (!(p->temperature >= 0.f) || !isfinite(p->temperature))
		return rg_errorf(RG_ERR_INVALID_INPUT, "temperature %g must be >= 0", p->temperature);
	if (p->top_k < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "top_k %d must be >= 0", p->top_k);
	if (!(p->top_p > 0.f && p->top_p <= 1.f))
		return rg_errorf(RG_ERR_INVALID_INPUT, "top_p %g must be in (0, 1]", p->top_p);
	if (!(p->min_p >= 0.f && p->min_p <= 1.f))
		return rg_errorf(RG_ERR_INVALID_INPUT, "min_p %g must be in [0, 1]", p->min_p);
	if (!(p->repetition_penalty > 0.f) || !isfinite(p->repetition_penalty))
		return rg_errorf(RG_ERR_INVALID_INPUT, "repetition_penalty %g must be > 0",
				 p->repetition_penalty);
	if (!(fabsf(p->presence_penalty) <= 2.f) || !(fabsf(p->frequency_penalty) <= 2.f))
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "presence/frequency penalties must be in [-2, 2]");
	if (p->no_repeat_ngram_size < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "no_repeat_ngram_size %d must be >= 0",
				 p->no_repeat_ngram_size);
	if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 &&
				    (!p->logit_bias_ids || !p->logit_bias_values)))
		return rg_errorf(RG_ERR_INVALID_INPUT, "logit_bias: %d entries without arrays",
				 p->n_logit_bias);
	for (int i = 0; i < p->n_logit_bias; i++)
		if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= vocab ||
		    !isfinite(p->logit_bias_values[i]))
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "logit_bias: token %d outside [0, %d) or bias not finite",
					 p->logit_bias_ids[i], vocab);
	return RG_OK;
}

const char *rg_sampler_name(const rg_sampler *s) { return s->iface->name(s); }

rg_status rg_sampler_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	return s->iface->apply(s, cur, rng);
}

void rg_sampler_accept(rg_sampler *s, int32_t token)
{
	if (s->iface->accept)
		s->iface->accept(s, token);
}

void rg_sampler_reset(rg_sampler *s)
{
	if (s->iface->reset)
		s->iface->reset(s);
}

rg_sampler *rg_sampler_clone(const rg_sampler *s) { return s->iface->clone(s); }

void rg_sampler_free(rg_sampler *s)
{
	if (!s)
		return;
	if (s->iface->free)
		s->iface->free(s);
	free(s);
}

static rg_sampler *sampler_new(const rg_sampler_i *iface, void *ctx)
{
	rg_sampler *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	s->iface = iface;
	s->ctx = ctx;
	return s;
}

void rg_token_array_fill(rg_token_array *cur, const float *logits, int vocab)
{
	for (int i = 0; i < vocab; i++) {
		cur->data[i].id = i;
		cur->data[i].logit = logits[i];
	}
	cur->size = vocab;
	cur->sorted = false;
	cur->selected = -1;
}

/* ---- ordering helpers ---- */
static int cmp_logit_desc(const void *a, const void *b)
{
	const rg_token_data *x = a, *y = b;

	if (x->logit > y->logit)
		return -1;
	if (x->logit < y->logit)
		return 1;
	return (x->id > y->id) - (x->id < y->id);
}

static int cmp_id(const void *a, const void *b)
{
	const rg_token_data *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static void sort_by_logit(rg_token_array *cur)
{
	if (!cur->sorted)
		qsort(cur->data, (size_t)cur->size, sizeof(rg_token_data), cmp_logit_desc);
	cur->sorted = true;
}

static void sort_by_id(rg_token_array *cur)
{
	if (cur->sorted)
		qsort(cur->data, (size_t)cur->size, sizeof(rg_token_data), cmp_id);
	cur->sorted = false;
}

static float max_logit(const rg_token_array *cur)
{
	float m = -INFINITY;

	for (int i = 0; i < cur->size; i++)
		if (cur->data[i].logit > m)
			m = cur->data[i].logit;
	return m;
}

/* Drop -inf candidates (banned tokens) unless that would leave none. */
static void drop_neg_inf(rg_token_array *cur)
{
	int m = 0;

	for (int i = 0; i < cur->size; i++)
		if (cur->data[i].logit > -INFINITY)
			cur->data[m++] = cur->data[i];
	if (m > 0)
		cur->size = m;
}

/* ---- chain ---- */
typedef struct chain_ctx {
	rg_sampler **steps;
	int n, cap;
} chain_ctx;

static const char *chain_name(const rg_sampler *s) { (void)s; return "chain"; }

static rg_status chain_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	chain_ctx *c = s->ctx;

	for (int i = 0; i < c->n; i++) {
		rg_status st = rg_sampler_apply(c->steps[i], cur, rng);

		if (st != RG_OK)
			return st;
	}
	return RG_OK;
}

static void chain_accept(rg_sampler *s, int32_t t)
{
	chain_ctx *c = s->ctx;

	for (int i = 0; i < c->n; i++)
		rg_sampler_accept(c->steps[i], t);
}

static void chain_reset(rg_sampler *s)
{
	chain_ctx *c = s->ctx;

	for (int i = 0; i < c->n; i++)
		rg_sampler_reset(c->steps[i]);
}

static void chain_free(rg_sampler *s)
{
	chain_ctx *c = s->ctx;

	if (!c)
		return;
	for (int i = 0; i < c->n; i++)
		rg_sampler_free(c->steps[i]);
	free(c->steps);
	free(c);
}

static rg_sampler *chain_clone(const rg_sampler *s);

static const rg_sampler_i chain_i = {chain_name, chain_accept, chain_apply, chain_reset,
				     chain_clone, chain_free};

rg_sampler *rg_sampler_chain_init(void)
{
	chain_ctx *c = calloc(1, sizeof(*c));
	rg_sampler *s;

	if (!c)
		return NULL;
	if (!(s = sampler_new(&chain_i, c)))
		free(c);
	return s;
}

rg_status rg_sampler_chain_add(rg_sampler *chain, rg_sampler *s)
{
	chain_ctx *c = chain->ctx;

	if (!s)
		return rg_errorf(RG_ERR_OOM, "sampler: out of memory");
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 8;
		rg_sampler **st = realloc(c->steps, (size_t)cap * sizeof(*st));

		if (!st) {
			rg_sampler_free(s);
			return rg_errorf(RG_ERR_OOM, "sampler: out of memory");
		}
		c->steps = st;
		c->cap = cap;
	}
	c->steps[c->n++] = s;
	return RG_OK;
}

static rg_sampler *chain_clone(const rg_sampler *s)
{
	const chain_ctx *c = s->ctx;
	rg_sampler *out = rg_sampler_chain_init();

	if (!out)
		return NULL;
	for (int i = 0; i < c->n; i++)
		if (rg_sampler_chain_add(out, rg_sampler_clone(c->steps[i])) != RG_OK) {
			rg_sampler_free(out);
			return NULL;
		}
	return out;
}

/* ---- logit bias ---- */
typedef struct bias_ctx {
	int n;
	int32_t *ids;
	float *values;
} bias_ctx;

static const char *bias_name(const rg_sampler *s) { (void)s; return "logit-bias"; }

/* The candidate of id, or NULL. An unsorted array is in ascending id order (every step keeps
 * the order, sort_by_id restores it), the full one or a subset (a grammar's allowed tokens):
 * a binary search; a sorted one is scanned. */
static rg_token_data *find_id(rg_token_array *cur, int32_t id)
{
	if (!cur->sorted) {
		int lo = 0, hi = cur->size;

		if (id < cur->size && cur->data[id].id == id)
			return &cur->data[id]; /* the full array in id order */
		while (lo < hi) {
			int mid = lo + (hi - lo) / 2;

			if (cur->data[mid].id < id)
				lo = mid + 1;
			else
				hi = mid;
		}
		return lo < cur->size && cur->data[lo].id == id ? &cur->data[lo] : NULL;
	}
	for (int i = 0; i < cur->size; i++)
		if (cur->data[i].id == id)
			return &cur->data[i];
	return NULL;
}

static rg_status bias_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	bias_ctx *c = s->ctx;
	(void)rng;

	for (int i = 0; i < c->n; i++) {
		rg_token_data *d = find_id(cur, c->ids[i]);

		if (d)
			d->logit += c->values[i];
	}
	return RG_OK;
}

static void bias_free(rg_sampler *s)
{
	bias_ctx *c = s->ctx;

	if (c) {
		free(c->ids);
		free(c->values);
		free(c);
	}
}

static rg_sampler *bias_clone(const rg_sampler *s)
{
	const bias_ctx *c = s->ctx;

	return rg_sampler_init_logit_bias(c->n, c->ids, c->values);
}

static const rg_sampler_i bias_i = {bias_name, NULL, bias_apply, NULL, bias_clone, bias_free};

rg_sampler *rg_sampler_init_logit_bias(int n, const int32_t *ids, const float *values)
{
	bias_ctx *c = calloc(1, sizeof(*c));
	rg_sampler *s;

	if (!c)
		return NULL;
	c->n = n;
	c->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
	c->values = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	if (!c->ids || !c->values)
		goto out_free_ctx;
	if (n > 0) {
		memcpy(c->ids, ids, (size_t)n * sizeof(int32_t));
		memcpy(c->values, values, (size_t)n * sizeof(float));
	}
	if ((s = sampler_new(&bias_i, c)))
		return s;
out_free_ctx:
	free(c->ids);
	free(c->values);
	free(c);
	return NULL;
}

/* ---- penalties ---- */
typedef struct pen_ctx {
	int vocab;
	float repetition, presence, frequency;
	uint8_t *in_prompt; /* (vocab) */
	int32_t *count;     /* (vocab) occurrences among generated tokens */
} pen_ctx;

static const char *pen_name(const rg_sampler *s) { (void)s; return "penalties"; }

static void pen_accept(rg_sampler *s, int32_t t)
{
	pen_ctx *c = s->ctx;

	if (t >= 0 && t < c->vocab)
		c->count[t]++;
}

static rg_status pen_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	pen_ctx *c = s->ctx;
	(void)rng;

	for (int i = 0; i < cur->size; i++) {
		rg_token_data *d = &cur->data[i];
		int32_t n = c->count[d->id];

		if (c->repetition != 1.f && (n > 0 || c->in_prompt[d->id]))
			d->logit = d->logit < 0.f ? d->logit * c->repetition
						  : d->logit / c->repetition;
		if (n > 0) {
			d->logit -= (float)n * c->frequency;
			d->logit -= c->presence;
		}
	}
	return RG_OK;
}

static void pen_reset(rg_sampler *s)
{
	pen_ctx *c = s->ctx;

	memset(c->count, 0, (size_t)c->vocab * sizeof(int32_t));
}

static void pen_free(rg_sampler *s)
{
	pen_ctx *c = s->ctx;

	if (c) {
		free(c->in_prompt);
		free(c->count);
		free(c);
	}
}

static pen_ctx *pen_ctx_new(int vocab)
{
	pen_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->vocab = vocab;
	c->in_prompt = calloc((size_t)vocab, 1);
	c->count = calloc((size_t)vocab, sizeof(int32_t));
	if (!c->in_prompt || !c->count) {
		free(c->in_prompt);
		free(c->count);
		free(c);
		return NULL;
	}
	return c;
}

static rg_sampler *pen_clone(const rg_sampler *s);

static const rg_sampler_i pen_i = {pen_name, pen_accept, pen_apply, pen_reset, pen_clone,
				   pen_free};

static rg_sampler *pen_clone(const rg_sampler *s)
{
	const pen_ctx *c = s->ctx;
	pen_ctx *d = pen_ctx_new(c->vocab);
	rg_sampler *out;

	if (!d)
		return NULL;
	d->repetition = c->repetition;
	d->presence = c->presence;
	d->frequency = c->frequency;
	memcpy(d->in_prompt, c->in_prompt, (size_t)c->vocab);
	memcpy(d->count, c->count, (size_t)c->vocab * sizeof(int32_t));
	if (!(out = sampler_new(&pen_i, d))) {
		rg_sampler tmp = {&pen_i, d};

		pen_free(&tmp);
	}
	return out;
}

rg_sampler *rg_sampler_init_penalties(int vocab, const int32_t *prompt, int n_prompt,
				      float repetition, float presence, float frequency)
{
	pen_ctx *c = pen_ctx_new(vocab);
	rg_sampler *out;

	if (!c)
		return NULL;
	c->repetition = repetition;
	c->presence = presence;
	c->frequency = frequency;
	for (int i = 0; i < n_prompt; i++)
		if (prompt[i] >= 0 && prompt[i] < vocab)
			c->in_prompt[prompt[i]] = 1;
	if (!(out = sampler_new(&pen_i, c))) {
		rg_sampler tmp = {&pen_i, c};

		pen_free(&tmp);
	}
	return out;
}

/* ---- no-repeat n-gram ---- */
typedef struct ngram_ctx {
	int n;
	int32_t *hist; /* prompt + generated */
	int len, cap, n_prompt;
} ngram_ctx;

static const char *ngram_name(const rg_sampler *s) { (void)s; return "no-repeat-ngram"; }

static bool ngram_push(ngram_ctx *c, int32_t t)
{
	if (c->len == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		int32_t *h = realloc(c->hist, (size_t)cap * sizeof(int32_t));

		if (!h)
			return false;
		c->hist = h;
		c->cap = cap;
	}
	c->hist[c->len++] = t;
	return true;
}

static void ngram_accept(rg_sampler *s, int32_t t)
{
	/* an accept that cannot grow the history drops the token: the ban list then misses the
	 * n-grams through it, which only weakens the constraint; the engine's OOM is elsewhere */
	(void)ngram_push(s->ctx, t);
}

/* Bans, for history h (len), the tokens that follow an earlier occurrence of its last n-1
 * tokens (HF _get_ngrams / _get_generated_ngrams). Calls ban(id) for each. */
static rg_status ngram_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	ngram_ctx *c = s->ctx;
	int n = c->n, len = c->len;
	(void)rng;

	if (n <= 0 || len + 1 < n)
		return RG_OK;
	for (int i = 0; i + n <= len; i++) {
		if (memcmp(c->hist + i, c->hist + len - (n - 1), (size_t)(n - 1) * sizeof(int32_t)))
			continue;
		rg_token_data *d = find_id(cur, c->hist[i + n - 1]);

		if (d)
			d->logit = -INFINITY;
	}
	return RG_OK;
}

static void ngram_reset(rg_sampler *s)
{
	ngram_ctx *c = s->ctx;

	c->len = c->n_prompt;
}

static void ngram_free(rg_sampler *s)
{
	ngram_ctx *c = s->ctx;

	if (c) {
		free(c->hist);
		free(c);
	}
}

static rg_sampler *ngram_clone(const rg_sampler *s);

static const rg_sampler_i ngram_i = {ngram_name, ngram_accept, ngram_apply, ngram_reset,
				     ngram_clone, ngram_free};

static rg_sampler *ngram_new(int n, const int32_t *h, int len, int n_prompt)
{
	ngram_ctx *c = calloc(1, sizeof(*c));
	rg_sampler *out;

	if (!c)
		return NULL;
	c->n = n;
	for (int i = 0; i < len; i++)
		if (!ngram_push(c, h[i]))
			goto out_free_ctx;
	c->n_prompt = n_prompt;
	if ((out = sampler_new(&ngram_i, c)))
		return out;
out_free_ctx:
	free(c->hist);
	free(c);
	return NULL;
}

static rg_sampler *ngram_clone(const rg_sampler *s)
{
	const ngram_ctx *c = s->ctx;

	return ngram_new(c->n, c->hist, c->len, c->n_prompt);
}

rg_sampler *rg_sampler_init_no_repeat_ngram(int n, const int32_t *prompt, int n_prompt)
{
	return ngram_new(n, prompt, n_prompt, n_prompt);
}

/* ---- stateless steps: temperature, top-k, top-p, min-p, greedy, dist ---- */
typedef struct param_ctx {
	float f;
	int k;
	float *vals;      /* top-k scratch: (cap) logits, allocated on first use and kept */
	int32_t *idx;     /* (2 * cap) */
	int cap;
	double *ex;       /* dist scratch: (ex_cap) exp(l - l_max) per candidate, kept */
	int ex_cap;
} param_ctx;

static void param_free(rg_sampler *s)
{
	param_ctx *c = s->ctx;

	if (c) {
		free(c->vals);
		free(c->idx);
		free(c->ex);
		free(c);
	}
}

static rg_sampler *param_new(const rg_sampler_i *iface, float f, int k)
{
	param_ctx *c = calloc(1, sizeof(*c));
	rg_sampler *out;

	if (!c)
		return NULL;
	c->f = f;
	c->k = k;
	if (!(out = sampler_new(iface, c)))
		free(c);
	return out;
}

static rg_sampler *param_clone(const rg_sampler *s)
{
	const param_ctx *c = s->ctx;

	return param_new(s->iface, c->f, c->k);
}

static const char *temp_name(const rg_sampler *s) { (void)s; return "temperature"; }

static rg_status temp_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	float t = ((param_ctx *)s->ctx)->f;
	(void)rng;

	for (int i = 0; i < cur->size; i++)
		cur->data[i].logit /= t;
	return RG_OK;
}

static const char *topk_name(const rg_sampler *s) { (void)s; return "top-k"; }

/* keep logits >= the k-th largest, found by the hierarchical top-k (gen/topk.h); the scratch
 * lives in the sampler, allocated at the first call (one per sequence, not per step) */
static rg_status topk_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	param_ctx *c = s->ctx;
	int k = c->k, n = cur->size, m = 0;
	float kth;
	rg_status st;
	(void)rng;

	if (k <= 0 || k >= n)
		return RG_OK;
	if (n > c->cap) {
		float *v = realloc(c->vals, (size_t)n * sizeof(float));
		int32_t *ix;

		if (!v)
			return rg_errorf(RG_ERR_OOM, "top-k: out of memory");
		c->vals = v;
		if (!(ix = realloc(c->idx, (size_t)n * 2 * sizeof(int32_t))))
			return rg_errorf(RG_ERR_OOM, "top-k: out of memory");
		c->idx = ix;
		c->cap = n;
	}
	for (int i = 0; i < n; i++)
		c->vals[i] = cur->data[i].logit;
	if ((st = rg_topk_hier(c->vals, n, k, c->idx, NULL, c->idx + n, NULL)) != RG_OK)
		return st;
	kth = c->vals[c->idx[k - 1]];
	for (int i = 0; i < n; i++)
		if (cur->data[i].logit >= kth)
			cur->data[m++] = cur->data[i];
	cur->size = m; /* order kept: still by id or by logit */
	return RG_OK;
}

static const char *topp_name(const rg_sampler *s) { (void)s; return "top-p"; }

static rg_status topp_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	double p = ((param_ctx *)s->ctx)->f;
	double total = 0.0, before = 0.0;
	float mx;
	int m = 0;
	(void)rng;

	if (p >= 1.0 || cur->size <= 1)
		return RG_OK;
	sort_by_logit(cur);
	mx = cur->data[0].logit;
	for (int i = 0; i < cur->size; i++)
		total += exp((double)cur->data[i].logit - (double)mx);
	while (m < cur->size && (m == 0 || before < p * total)) {
		before += exp((double)cur->data[m].logit - (double)mx);
		m++;
	}
	cur->size = m;
	return RG_OK;
}

static const char *minp_name(const rg_sampler *s) { (void)s; return "min-p"; }

static rg_status minp_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	double p = ((param_ctx *)s->ctx)->f;
	float mx = max_logit(cur);
	int m = 0;
	(void)rng;

	if (p <= 0.0)
		return RG_OK;
	for (int i = 0; i < cur->size; i++)
		if (!(exp((double)cur->data[i].logit - (double)mx) < p))
			cur->data[m++] = cur->data[i];
	cur->size = m; /* the maximum itself always stays (exp(0) = 1 >= p) */
	return RG_OK;
}

static const char *greedy_name(const rg_sampler *s) { (void)s; return "greedy"; }

static rg_status greedy_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	int best = 0;
	(void)s, (void)rng;

	for (int i = 1; i < cur->size; i++) {
		const rg_token_data *a = &cur->data[i], *b = &cur->data[best];

		if (a->logit > b->logit || (a->logit == b->logit && a->id < b->id))
			best = i;
	}
	cur->selected = cur->size ? cur->data[best].id : -1;
	return RG_OK;
}

static const char *dist_name(const rg_sampler *s) { (void)s; return "dist"; }

/* The terms exp(l - l_max) are computed once into the sampler's scratch (grown to the
 * candidates, kept) and summed twice, the same doubles in the same order as computing them
 * twice; without the scratch (OOM) they are computed twice. */
static rg_status dist_apply(rg_sampler *s, rg_token_array *cur, rg_rng *rng)
{
	param_ctx *c = s->ctx;
	double total = 0.0, target, run = 0.0, *ex;
	float mx;

	drop_neg_inf(cur);
	sort_by_id(cur);
	mx = max_logit(cur);
	if (cur->size > c->ex_cap && (ex = realloc(c->ex, (size_t)cur->size * sizeof(double)))) {
		c->ex = ex;
		c->ex_cap = cur->size;
	}
	ex = cur->size <= c->ex_cap ? c->ex : NULL;
	for (int i = 0; i < cur->size; i++) {
		const double e = exp((double)cur->data[i].logit - (double)mx);

		if (ex)
			ex[i] = e;
		total += e;
	}
	target = rg_rng_uniform(rng) * total;
	cur->selected = cur->data[cur->size - 1].id;
	for (int i = 0; i < cur->size; i++) {
		run += ex ? ex[i] : exp((double)cur->data[i].logit - (double)mx);
		if (run > target) {
			cur->selected = cur->data[i].id;
			break;
		}
	}
	return RG_OK;
}

static const rg_sampler_i temp_i = {temp_name, NULL, temp_apply, NULL, param_clone, param_free};
static const rg_sampler_i topk_i = {topk_name, NULL, topk_apply, NULL, param_clone, param_free};
static const rg_sampler_i topp_i = {topp_name, NULL, topp_apply, NULL, param_clone, param_free};
static const rg_sampler_i minp_i = {minp_name, NULL, minp_apply, NULL, param_clone, param_free};
static const rg_sampler_i greedy_i = {greedy_name, NULL, greedy_apply, NULL, param_clone,
				      param_free};
static const rg_sampler_i dist_i = {dist_name, NULL, dist_apply, NULL, param_clone, param_free};

rg_sampler *rg_sampler_init_temperature(float t) { return param_new(&temp_i, t, 0); }
rg_sampler *rg_sampler_init_top_k(int k) { return param_new(&topk_i, 0.f, k); }
rg_sampler *rg_sampler_init_top_p(float p) { return param_new(&topp_i, p, 0); }
rg_sampler *rg_sampler_init_min_p(float p) { return param_new(&minp_i, p, 0); }
rg_sampler *rg_sampler_init_greedy(void) { return param_new(&greedy_i, 0.f, 0); }
rg_sampler *rg_sampler_init_dist(void) { return param_new(&dist_i, 0.f, 0); }

bool rg_sampling_penalties_on(const rg_sampling_params *p)
{
	return p->repetition_penalty != 1.f || p->presence_penalty != 0.f ||
	       p->frequency_penalty != 0.f;
}

rg_row_sampling rg_sampler_row(const rg_sampling_params *p, rg_rng *rng)
{
	const bool sample = p->do_sample && p->temperature > 0.f;

	return (rg_row_sampling){
		.temperature = sample ? p->temperature : 0.f, .top_k = p->top_k,
		.top_p = p->top_p, .min_p = p->min_p,
		.repetition_penalty = p->repetition_penalty,
		.presence_penalty = p->presence_penalty,
		.frequency_penalty = p->frequency_penalty,
		.u = sample ? rg_rng_uniform(rng) : 0,
		.n_logit_bias = p->n_logit_bias, .logit_bias_ids = p->logit_bias_ids,
		.logit_bias_values = p->logit_bias_values,
	};
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

int rg_sampler_penalty_lists(const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
			     int32_t *keys, int32_t *ids, int32_t *counts, uint8_t *in_prompt)
{
	const int n_tok = n_prompt + n_gen;
	int n = 0;

	/* key = id * 2 + (generated) */
	for (int t = 0; t < n_prompt; t++)
		keys[t] = prompt[t] * 2;
	for (int t = 0; t < n_gen; t++)
		keys[n_prompt + t] = gen[t] * 2 + 1;
	qsort(keys, (size_t)n_tok, sizeof(int32_t), cmp_i32);
	for (int t = 0; t < n_tok; t++) {
		int32_t id = keys[t] >> 1;

		if (n == 0 || ids[n - 1] != id) {
			ids[n] = id;
			counts[n] = 0;
			in_prompt[n] = 0;
			n++;
		}
		if (keys[t] & 1)
			counts[n - 1]++;
		else
			in_prompt[n - 1] = 1;
	}
	return n;
}

rg_status rg_sampler_from_params(const rg_sampling_params *p, int vocab, const int32_t *prompt,
				 int n_prompt, rg_sampler **out)
{
	rg_sampler *c;
	rg_status st;
	bool sample = p->do_sample && p->temperature > 0.f;

	*out = NULL;
	if ((st = rg_sampling_params_check(p, vocab)) != RG_OK)
		return st;
	if (!(c = rg_sampler_chain_init()))
		return rg_errorf(RG_ERR_OOM, "sampler: out of memory");
	if (p->n_logit_bias > 0 &&
	    (st = rg_sampler_chain_add(c, rg_sampler_init_logit_bias(
				       p->n_logit_bias, p->logit_bias_ids, p->logit_bias_values))))
		goto out_free_chain;
	if (rg_sampling_penalties_on(p) &&
	    (st = rg_sampler_chain_add(c, rg_sampler_init_penalties(
				       vocab, prompt, n_prompt, p->repetition_penalty,
				       p->presence_penalty, p->frequency_penalty))))
		goto out_free_chain;
	if (p->no_repeat_ngram_size > 0 &&
	    (st = rg_sampler_chain_add(c, rg_sampler_init_no_repeat_ngram(
				       p->no_repeat_ngram_size, prompt, n_prompt))))
		goto out_free_chain;
	if (!sample) {
		if ((st = rg_sampler_chain_add(c, rg_sampler_init_greedy())))
			goto out_free_chain;
		*out = c;
		return RG_OK;
	}
	if (p->temperature != 1.f &&
	    (st = rg_sampler_chain_add(c, rg_sampler_init_temperature(p->temperature))))
		goto out_free_chain;
	if (p->top_k > 0 && (st = rg_sampler_chain_add(c, rg_sampler_init_top_k(p->top_k))))
		goto out_free_chain;
	if (p->top_p < 1.f && (st = rg_sampler_chain_add(c, rg_sampler_init_top_p(p->top_p))))
		goto out_free_chain;
	if (p->min_p > 0.f && (st = rg_sampler_chain_add(c, rg_sampler_init_min_p(p->min_p))))
		goto out_free_chain;
	if ((st = rg_sampler_chain_add(c, rg_sampler_init_dist())))
		goto out_free_chain;
	*out = c;
	return RG_OK;
out_free_chain:
	rg_sampler_free(c);
	return st;
}

rg_status rg_sampler_sample_cand(rg_sampler *s, rg_token_array *work, rg_rng *rng, int n_top,
				 int32_t *id, float *logprob, int32_t *top_ids,
				 float *top_logprobs)
{
	double total = 0.0, lse;
	float mx;
	rg_status st;

	for (int i = 0; i < work->size; i++)
		if (isnan(work->data[i].logit))
			return rg_errorf(RG_ERR_INTERNAL, "sampler: NaN logit for token %d",
					 work->data[i].id);
	if ((st = rg_sampler_apply(s, work, rng)) != RG_OK)
		return st;
	if (work->selected < 0)
		return rg_errorf(RG_ERR_INTERNAL, "sampler chain selected no token");
	*id = work->selected;
	/* log-softmax over the final candidates */
	mx = max_logit(work);
	for (int i = 0; i < work->size; i++)
		total += exp((double)work->data[i].logit - (double)mx);
	lse = (double)mx + log(total);
	*logprob = -INFINITY;
	for (int i = 0; i < work->size; i++)
		if (work->data[i].id == *id)
			*logprob = (float)((double)work->data[i].logit - lse);
	if (n_top > 0) {
		int m = n_top < work->size ? n_top : work->size;

		sort_by_logit(work);
		for (int j = 0; j < n_top; j++) {
			bool ok = j < m && work->data[j].logit > -INFINITY;

			top_ids[j] = ok ? work->data[j].id : -1;
			top_logprobs[j] = ok ? (float)((double)work->data[j].logit - lse) : -INFINITY;
		}
	}
	return RG_OK;
}

rg_status rg_sampler_sample(rg_sampler *s, const float *logits, int vocab, rg_rng *rng,
			    rg_token_array *work, int n_top, int32_t *id, float *logprob,
			    int32_t *top_ids, float *top_logprobs)
{
	rg_token_array_fill(work, logits, vocab);
	return rg_sampler_sample_cand(s, work, rng, n_top, id, logprob, top_ids, top_logprobs);
}

int rg_token_array_fill_masked(rg_token_array *cur, const float *logits, int vocab,
			       const uint64_t *mask)
{
	const int words = (vocab + 63) / 64;
	int n = 0;

	for (int w = 0; w < words; w++)
		for (uint64_t b = mask[w]; b; b &= b - 1) {
			const int v = w * 64 + __builtin_ctzll(b);

			if (v >= vocab)
				break;
			cur->data[n].id = v;
			cur->data[n++].logit = logits[v];
		}
	cur->size = n;
	cur->sorted = false;
	cur->selected = -1;
	return n;
}

bool rg_sampler_is_greedy(const rg_sampler *s)
{
	const chain_ctx *c;

	if (s->iface == &greedy_i)
		return true;
	if (s->iface != &chain_i)
		return false;
	c = s->ctx;
	return c->n == 1 && rg_sampler_is_greedy(c->steps[0]);
}

rg_status rg_sampler_masked_argmax(const float *logits, int vocab, const uint64_t *mask,
				   int32_t *id, float *logprob)
{
	const int words = (vocab + 63) / 64;
	double total = 0.0, lse;
	float mx = -INFINITY;
	int best = -1;

	/* the order rg_sampler_sample_cand walks the candidates of rg_token_array_fill_masked:
	 * ascending id, the first of equal maxima kept (the greedy step's lowest id on ties) */
	for (int w = 0; w < words; w++)
		for (uint64_t b = mask[w]; b; b &= b - 1) {
			const int v = w * 64 + __builtin_ctzll(b);

			if (v >= vocab)
				break;
			if (isnan(logits[v]))
				return rg_errorf(RG_ERR_INTERNAL, "sampler: NaN logit for token %d", v);
			if (best < 0 || logits[v] > logits[best])
				best = v;
			if (logits[v] > mx)
				mx = logits[v];
		}
	if (best < 0)
		return rg_errorf(RG_ERR_INTERNAL, "sampler chain selected no token");
	for (int w = 0; w < words; w++)
		for (uint64_t b = mask[w]; b; b &= b - 1) {
			const int v = w * 64 + __builtin_ctzll(b);

			if (v >= vocab)
				break;
			total += exp((double)logits[v] - (double)mx);
		}
	lse = (double)mx + log(total);
	*id = best;
	*logprob = (float)((double)logits[best] - lse);
	return RG_OK;
}

rg_status rg_sampler_draw_test(const float *logits, int vocab, const rg_sampling_params *p,
			       const int32_t *prompt, int n_prompt, uint64_t seed, int n_draws,
			       int32_t *out, float *logprobs)
{
	rg_sampler *s;
	rg_token_array work = {0};
	rg_rng rng;
	rg_status st;

	if ((st = rg_sampler_from_params(p, vocab, prompt, n_prompt, &s)) != RG_OK)
		return st;
	if (!(work.data = malloc((size_t)vocab * sizeof(rg_token_data)))) {
		st = rg_errorf(RG_ERR_OOM, "sampler: out of memory");
		goto out_free_sampler;
	}
	rg_rng_seed(&rng, seed);
	for (int i = 0; i < n_draws && st == RG_OK; i++) {
		float lp;

		st = rg_sampler_sample(s, logits, vocab, &rng, &work, 0, &out[i], &lp, NULL, NULL);
		if (logprobs)
			logprobs[i] = lp;
	}
	free(work.data);
out_free_sampler:
	rg_sampler_free(s);
	return st;
}
