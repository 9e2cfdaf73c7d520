/* CPU kernels of the decoder ops (float32; src/ops/ops.h states the contracts): fused residual
 * add + LayerNorm / RMSNorm, RoPE in both pair layouts (and its per-step cos / sin table and the
 * RoPE + KV write fusion), the gated FFNs' act * mul (SwiGLU, T5 v1.1's gated-gelu), the KV
 * scatter and causal attention over a paged cache for a mixed batch of prefill chunks and decode
 * tokens.
 * Every op runs on ragged's thread pool; rows (or (token, KV head) pairs for the attention) are
 * the tasks; the attention's dot products and softmax are the vector kernels of cpu_kern.h. Plain C loops the compiler vectorises: these are the reference the CUDA twins will be
 * tested against, and the float64 NumPy decoder (tests/py/ref_decoder.py) checks them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/ops_cpu.h"

/* rows per task so that a task has at least ~16K elements */
static int rows_per(int M, int N)
{
	int r = (1 << 14) / (N > 0 ? N : 1);

	r = r < 1 ? 1 : r;
	return r > M ? (M > 0 ? M : 1) : r;
}

struct norm_job {
	const float *x;
	float *residual;
	const float *gamma, *beta;
	float eps;
	rg_norm_kind kind;
	int M, N, rows;
	float *out;
};

static void norm_task(void *ctx, int task, int thread)
{
	const struct norm_job *j = ctx;
	const int N = j->N;
	int r1 = (task + 1) * j->rows < j->M ? (task + 1) * j->rows : j->M;

	(void)thread;
	for (int r = task * j->rows; r < r1; r++) {
		float *res = j->residual + (size_t)r * N, *o = j->out + (size_t)r * N;
		const float *x = j->x ? j->x + (size_t)r * N : NULL;
		float mean = 0.f, var = 0.f, rstd;

		if (x)
			for (int i = 0; i < N; i++)
				res[i] += x[i];
		if (j->kind == RG_NORM_RMS) {
			for (int i = 0; i < N; i++)
				var += res[i] * res[i];
			rstd = 1.f / sqrtf(var / (float)N + j->eps);
			for (int i = 0; i < N; i++)
				o[i] = res[i] * rstd * j->gamma[i];
			continue;
		}
		for (int i = 0; i < N; i++)
			mean += res[i];
		mean /= (float)N;
		for (int i = 0; i < N; i++)
			var += (res[i] - mean) * (res[i] - mean);
		rstd = 1.f / sqrtf(var / (float)N + j->eps);
		for (int i = 0; i < N; i++)
			o[i] = (res[i] - mean) * rstd * j->gamma[i] + (j->beta ? j->beta[i] : 0.f);
	}
}

rg_status rg_cpu_add_norm(const float *x, float *residual, const float *gamma, const float *beta,
			  float eps, rg_norm_kind kind, int M, int N, float *out)
{
	struct norm_job j = {x, residual, gamma, beta, eps, kind, M, N, rows_per(M, N), out};

	if (M > 0)
		rg_threadpool_run(rg_threadpool_global(), (M + j.rows - 1) / j.rows, norm_task, &j);
	return RG_OK;
}

/* The cos and sin of token t's pairs, (float)cos / sin of the angle formed in double: the one
 * definition behind rg_cpu_rope and rg_cpu_rope_table, so the two agree bit for bit. */
static void rope_angles(int32_t pos, const float *inv_freq, int half, float *cs, float *sn)
{
	for (int i = 0; i < half; i++) {
		double a = (double)pos * (double)inv_freq[i];

		cs[i] = (float)cos(a);
		sn[i] = (float)sin(a);
	}
}

/* Turn n_heads heads of head_dim columns from row by the pairs' cs / sn. */
static void rope_heads(float *row, int n_heads, int head_dim, const float *cs, const float *sn,
		       bool interleaved)
{
	const int half = head_dim / 2;

	for (int h = 0; h < n_heads; h++) {
		float *v = row + (size_t)h * head_dim;

		for (int i = 0; i < half; i++) {
			const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
			const float x0 = v[a], x1 = v[b];

			v[a] = x0 * cs[i] - x1 * sn[i];
			v[b] = x1 * cs[i] + x0 * sn[i];
		}
	}
}

struct rope_job {
	float *x;
	int ld, n_heads, head_dim;
	const int32_t *positions;
	const float *inv_freq;
	bool interleaved;
};

static void rope_task(void *ctx, int t, int thread)
{
	const struct rope_job *j = ctx;
	float cs[512], sn[512]; /* head_dim <= 1024 (checked by the caller) */

	(void)thread;
	rope_angles(j->positions[t], j->inv_freq, j->head_dim / 2, cs, sn);
	rope_heads(j->x + (size_t)t * j->ld, j->n_heads, j->head_dim, cs, sn, j->interleaved);
}

rg_status rg_cpu_rope(float *x, int ld, int n_tokens, int n_heads, int head_dim,
		      const int32_t *positions, const float *inv_freq, bool interleaved)
{
	struct rope_job j = {x, ld, n_heads, head_dim, positions, inv_freq, interleaved};

	if (head_dim > 1024)
		return rg_errorf(RG_ERR_UNSUPPORTED, "rope: head_dim %d over 1024", head_dim);
	rg_threadpool_run(rg_threadpool_global(), n_tokens, rope_task, &j);
	return RG_OK;
}

struct rope_table_job {
	const int32_t *positions;
	int n_tokens, head_dim, rows;
	const float *inv_freq, *inv_freq_long;
	int32_t long_from;
	double mscale;
	float *cos_sin;
};

static void rope_table_task(void *ctx, int task, int thread)
{
	const struct rope_table_job *j = ctx;
	const int t1 = (task + 1) * j->rows < j->n_tokens ? (task + 1) * j->rows : j->n_tokens;
	const int half = j->head_dim / 2;

	(void)thread;
	for (int t = task * j->rows; t < t1; t++) {
		const int32_t pos = j->positions[t];
		const float *inv = j->inv_freq_long && pos >= j->long_from ? j->inv_freq_long
									   : j->inv_freq;
		float *cs = j->cos_sin + (size_t)t * j->head_dim;

		if (j->mscale == 1.0) {
			rope_angles(pos, inv, half, cs, cs + half);
			continue;
		}
		for (int i = 0; i < half; i++) { /* rope_angles, scaled before the rounding */
			const double a = (double)pos * (double)inv[i];

			cs[i] = (float)(cos(a) * j->mscale);
			cs[half + i] = (float)(sin(a) * j->mscale);
		}
	}
}

rg_status rg_cpu_rope_table_scaled(const int32_t *positions, int n_tokens, const float *inv_freq,
				   const float *inv_freq_long, int32_t long_from, float mscale,
				   int head_dim, float *cos_sin)
{
	/* about 1K angles (a cos and a sin in double each) a task */
	struct rope_table_job j = {positions, n_tokens, head_dim, rows_per(n_tokens, 8 * head_dim),
				   inv_freq, inv_freq_long, long_from, (double)mscale, cos_sin};

	if (n_tokens > 0)
		rg_threadpool_run(rg_threadpool_global(), (n_tokens + j.rows - 1) / j.rows,
				  rope_table_task, &j);
	return RG_OK;
}

rg_status rg_cpu_rope_table(const int32_t *positions, int n_tokens, const float *inv_freq,
			    int head_dim, float *cos_sin)
{
	return rg_cpu_rope_table_scaled(positions, n_tokens, inv_freq, NULL, INT32_MAX, 1.f,
					head_dim, cos_sin);
}

struct qk_norm_job {
	float *qkv;
	int ld, n_heads, n_kv_heads, head_dim;
	const float *q_gamma, *k_gamma;
	float eps;
};

/* Token t's Q heads by q_gamma, then its K heads by k_gamma: sum of squares in f32 in column
 * order, x * (1 / sqrt(mean + eps)) * gamma, as add_norm's RMS rows. */
static void qk_norm_task(void *ctx, int t, int thread)
{
	const struct qk_norm_job *j = ctx;
	float *row = j->qkv + (size_t)t * j->ld;

	(void)thread;
	for (int h = 0; h < j->n_heads + j->n_kv_heads; h++) {
		float *v = row + (size_t)h * j->head_dim, ss = 0.f;
		const float *g = h < j->n_heads ? j->q_gamma : j->k_gamma;

		for (int i = 0; i < j->head_dim; i++)
			ss += v[i] * v[i];
		const float rstd = 1.f / sqrtf(ss / (float)j->head_dim + j->eps);
		for (int i = 0; i < j->head_dim; i++)
			v[i] = v[i] * rstd * g[i];
	}
}

rg_status rg_cpu_qk_norm(float *qkv, int ld, int n_tokens, int n_heads, int n_kv_heads,
			 int head_dim, const float *q_gamma, const float *k_gamma, float eps)
{
	struct qk_norm_job j = {qkv, ld, n_heads, n_kv_heads, head_dim, q_gamma, k_gamma, eps};

	if (n_tokens > 0)
		rg_threadpool_run(rg_threadpool_global(), n_tokens, qk_norm_task, &j);
	return RG_OK;
}

struct rope_kv_job {
	float *qkv;
	int ld, n_heads, n_kv_heads, head_dim;
	const float *cos_sin;
	bool interleaved;
	const int32_t *slots;
	float *k_cache, *v_cache;
};

/* Token t: rg_cpu_rope's turn of its Q and K heads (the same rope_heads over the same values),
 * then rg_cpu_kv_write's copies of its K and V rows. */
static void rope_kv_task(void *ctx, int t, int thread)
{
	const struct rope_kv_job *j = ctx;
	const int hd = j->head_dim, kvd = j->n_kv_heads * hd, qd = j->n_heads * hd;
	const float *cs = j->cos_sin + (size_t)t * hd;
	float *row = j->qkv + (size_t)t * j->ld;

	(void)thread;
	rope_heads(row, j->n_heads + j->n_kv_heads, hd, cs, cs + hd / 2, j->interleaved);
	memcpy(j->k_cache + (size_t)j->slots[t] * kvd, row + qd, (size_t)kvd * sizeof(float));
	memcpy(j->v_cache + (size_t)j->slots[t] * kvd, row + qd + kvd, (size_t)kvd * sizeof(float));
}

rg_status rg_cpu_rope_kv_write(float *qkv, int ld, int n_tokens, int n_heads, int n_kv_heads,
			       int head_dim, const float *cos_sin, bool interleaved,
			       const int32_t *slots, float *k_cache, float *v_cache,
			       int64_t n_slots)
{
	struct rope_kv_job j = {qkv, ld, n_heads, n_kv_heads, head_dim, cos_sin, interleaved,
				slots, k_cache, v_cache};

	for (int t = 0; t < n_tokens; t++)
		if (slots[t] < 0 || slots[t] >= n_slots)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "rope_kv_write: token %d writes slot %d, outside [0, %lld)",
					 t, slots[t], (long long)n_slots);
	rg_threadpool_run(rg_threadpool_global(), n_tokens, rope_kv_task, &j);
	return RG_OK;
}

struct act_mul_job {
	const float *x;
	int M, N, rows;
	rg_act act;
	float *out;
};

static void act_mul_task(void *ctx, int task, int thread)
{
	const struct act_mul_job *j = ctx;
	int r1 = (task + 1) * j->rows < j->M ? (task + 1) * j->rows : j->M;

	(void)thread;
	for (int r = task * j->rows; r < r1; r++) {
		const float *g = j->x + (size_t)r * 2 * j->N, *u = g + j->N;
		float *o = j->out + (size_t)r * j->N;

		for (int i = 0; i < j->N; i++)
			o[i] = rg_act_apply(g[i], j->act) * u[i];
	}
}

rg_status rg_cpu_act_mul(const float *x, int M, int N, rg_act act, float *out)
{
	struct act_mul_job j = {x, M, N, rows_per(M, 2 * N), act, out};

	rg_threadpool_run(rg_threadpool_global(), (M + j.rows - 1) / j.rows, act_mul_task, &j);
	return RG_OK;
}

rg_status rg_cpu_kv_write(const float *k, const float *v, int ld, const int32_t *slots,
			  int n_tokens, int kv_dim, float *k_cache, float *v_cache, int64_t n_slots)
{
	for (int t = 0; t < n_tokens; t++)
		if (slots[t] < 0 || slots[t] >= n_slots)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "kv_write: token %d writes slot %d, outside [0, %lld)", t,
					 slots[t], (long long)n_slots);
	for (int t = 0; t < n_tokens; t++) {
		memcpy(k_cache + (size_t)slots[t] * kv_dim, k + (size_t)t * ld,
		       (size_t)kv_dim * sizeof(float));
		memcpy(v_cache + (size_t)slots[t] * kv_dim, v + (size_t)t * ld,
		       (size_t)kv_dim * sizeof(float));
	}
	return RG_OK;
}

struct pattn_job {
	const rg_attn_desc *d;
	const rg_cpu_kern *k;
	const float *q, *kc, *vc;
	int ldq;
	int parts;              /* tasks per (query row, KV head): query heads of the group split */
	const int32_t *tok_seq; /* (n_tokens) sequence of each query row */
	float *scratch;         /* per thread: group x max_context_len scores (rows padded to 16) */
	size_t scratch_floats;
	float *out;
};

/* Start loading KV head kvh's rows of cache block `block` (at most `left` of its bs rows): a
 * decode step finds its cache evicted by the weights it streamed since the last layer. */
static inline void prefetch_block(const float *cache, int32_t block, int bs, int kvd, int kvh,
				  int hd, int left)
{
	const float *x = cache + (size_t)block * bs * kvd + (size_t)kvh * hd;
	const int n = left < bs ? left : bs;

	for (int r = 0; r < n; r++)
		for (int e = 0; e < hd; e += 16)
			__builtin_prefetch(x + (size_t)r * kvd + e, 0, 3);
}

/* One (query row, KV head, part of its group): the scores of the part's query heads over keys
 * 0..pos, block by block through the block table (each key and value row read once for all the
 * heads that share it: grouped-query attention), the relative position bias when the
 * descriptor has one, a vectorised row softmax, then P V block by block. */
static void pattn_task(void *ctx, int task, int thread)
{
	const struct pattn_job *j = ctx;
	const rg_attn_desc *d = j->d;
	const rg_cpu_kern *kn = j->k;
	const int hd = d->head_dim, group = d->num_heads / d->num_kv_heads, bs = d->block_size;
	const int per_tok = d->num_kv_heads * j->parts;
	const int t = task / per_tok, kvh = task % per_tok / j->parts, part = task % j->parts;
	const int h0 = kvh * group + part * group / j->parts;
	const int nq = kvh * group + (part + 1) * group / j->parts - h0;
	const int i = j->tok_seq[t], kvd = d->num_kv_heads * hd;
	const int n_new = d->cu_seqlens_q_h[i + 1] - d->cu_seqlens_q_h[i];
	const int L = d->context_lens_h[i] - n_new + (t - d->cu_seqlens_q_h[i]) + 1;
	const int Lp = (L + 15) / 16 * 16;
	const int32_t *bt = d->block_tables + (size_t)i * d->max_blocks_per_seq;
	const float *q = j->q + (size_t)t * j->ldq + (size_t)h0 * hd;
	float *s = j->scratch + (size_t)thread * j->scratch_floats;
	float *o = j->out + (size_t)t * d->num_heads * hd + (size_t)h0 * hd;

	for (int k0 = 0; k0 < L; k0 += bs) {
		const size_t row = (size_t)bt[k0 / bs] * bs * kvd + (size_t)kvh * hd;

		if (k0 + bs < L) /* the next block's keys come in while this one computes */
			prefetch_block(j->kc, bt[k0 / bs + 1], bs, kvd, kvh, hd, L - k0 - bs);
		kn->attn_dec_qk(q, nq, hd, j->kc + row, (size_t)kvd, L - k0 < bs ? L - k0 : bs,
				d->scale, s + k0, (size_t)Lp);
	}
	if (d->rel_bias) /* T5's decoder: the bias at distance k - (L - 1), clamped to rel_max */
		for (int g = 0; g < nq; g++) {
			const float *tb = d->rel_bias + (size_t)(h0 + g) * (2 * d->rel_max + 1) +
					  d->rel_max;
			float *sg = s + (size_t)g * Lp;

			for (int k = 0; k < L; k++) {
				const int r = k - (L - 1);

				sg[k] += tb[r < -d->rel_max ? -d->rel_max : r];
			}
		}
	prefetch_block(j->vc, bt[0], bs, kvd, kvh, hd, L);
	for (int g = 0; g < nq; g++)
		kn->softmax_row(s + (size_t)g * Lp, L, Lp, NULL, 0);
	memset(o, 0, (size_t)nq * hd * sizeof(float));
	for (int k0 = 0; k0 < L; k0 += bs) {
		const size_t row = (size_t)bt[k0 / bs] * bs * kvd + (size_t)kvh * hd;

		if (k0 + bs < L)
			prefetch_block(j->vc, bt[k0 / bs + 1], bs, kvd, kvh, hd, L - k0 - bs);
		kn->attn_dec_pv(s + k0, (size_t)Lp, nq, j->vc + row, (size_t)kvd,
				L - k0 < bs ? L - k0 : bs, hd, o);
	}
}

rg_status rg_cpu_paged_attention(const rg_attn_desc *d, const float *q, int ldq,
				 const float *k_cache, const float *v_cache, float *out)
{
	rg_threadpool *pool = rg_threadpool_global();
	struct pattn_job j = {d, rg_cpu_kern_select(), q, k_cache, v_cache, ldq, 1, NULL, NULL, 0,
			      out};
	const int n_tokens = d->cu_seqlens_q_h[d->n_seq];
	const int group = d->num_heads / d->num_kv_heads, T = rg_threadpool_size(pool);
	int32_t *tok_seq;

	/* the data this kernel indexes with: lengths, positions and every block it will read */
	if (d->cu_seqlens_q_h[0] != 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "paged_attention: cu_seqlens_q[0] = %d",
				 d->cu_seqlens_q_h[0]);
	for (int i = 0; i < d->n_seq; i++) {
		const int n_new = d->cu_seqlens_q_h[i + 1] - d->cu_seqlens_q_h[i];
		const int ctx_len = d->context_lens_h[i];
		const int nb = (ctx_len + d->block_size - 1) / d->block_size;

		if (n_new < 0 || ctx_len < n_new || ctx_len > d->max_context_len)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "paged_attention: sequence %d has %d new rows and context "
					 "length %d (max_context_len %d)",
					 i, n_new, ctx_len, d->max_context_len);
		for (int b = 0; b < nb; b++) {
			const int32_t id = d->block_tables[(size_t)i * d->max_blocks_per_seq + b];

			if (id < 0 || id >= d->n_blocks)
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "paged_attention: sequence %d block %d is %d, outside "
						 "[0, %lld)",
						 i, b, id, (long long)d->n_blocks);
		}
	}
	if (n_tokens == 0)
		return RG_OK;
	tok_seq = malloc((size_t)n_tokens * sizeof(*tok_seq));
	j.scratch_floats = (size_t)group * (((size_t)d->max_context_len + 15) / 16 * 16);
	j.scratch = malloc((size_t)rg_threadpool_size(pool) * j.scratch_floats * sizeof(float));
	if (!tok_seq || !j.scratch) {
		free(tok_seq);
		free(j.scratch);
		return rg_errorf(RG_ERR_OOM, "paged_attention: out of memory for the scores");
	}
	for (int i = 0; i < d->n_seq; i++)
		for (int t = d->cu_seqlens_q_h[i]; t < d->cu_seqlens_q_h[i + 1]; t++)
			tok_seq[t] = i;
	j.tok_seq = tok_seq;
	/* a decode step of one sequence has few (row, KV head) pairs: split the groups' query
	 * heads until every thread has about two tasks */
	while (j.parts < group && n_tokens * d->num_kv_heads * j.parts < 2 * T)
		j.parts++;
	rg_threadpool_run(pool, n_tokens * d->num_kv_heads * j.parts, pattn_task, &j);
	free(tok_seq);
	free(j.scratch);
	return RG_OK;
}
