/* CPU reference kernels for the BERT encoder ops (float32, OpenMP, OpenBLAS sgemm).
 *
 * Each function has exactly the semantics documented for its rg_op_* twin in src/ops/ops.h; the
 * CUDA kernels are tested against these. Reductions accumulate in float32 as the contract says
 * (the float64 NumPy model in tests/py/ref_bert.py is the independent check of these kernels).
 * Pointers are host memory; sizes are elements; no function allocates except rg_cpu_attention,
 * which takes one max_seqlen-sized scratch row per thread. */
#include "ops/cpu/ops_cpu.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* LayerNorm of one row v (n) in place into out: (v - mean) / sqrt(var + eps) * gamma + beta,
 * biased variance, two-pass statistics in float32. v and out may alias. */
static void ln_row(const float *v, const float *gamma, const float *beta, float eps, int n,
		   float *out)
{
	float mean = 0.f, var = 0.f, rstd;
	int i;

	for (i = 0; i < n; i++)
		mean += v[i];
	mean /= (float)n;
	for (i = 0; i < n; i++) {
		float d = v[i] - mean;
		var += d * d;
	}
	var /= (float)n;
	rstd = 1.f / sqrtf(var + eps);
	for (i = 0; i < n; i++)
		out[i] = (v[i] - mean) * rstd * gamma[i] + beta[i];
}

rg_status rg_cpu_embed_layernorm(const int32_t *tokens, const int32_t *positions, int n_tokens,
				 const float *word, const float *pos, const float *type0,
				 const float *gamma, const float *beta, float eps, int H, float *out)
{
	int t;

	if (n_tokens < 0 || H <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "embed_layernorm: bad shape n_tokens=%d H=%d",
				 n_tokens, H);
#pragma omp parallel for schedule(static)
	for (t = 0; t < n_tokens; t++) {
		const float *w = word + (size_t)tokens[t] * H;
		const float *p = pos + (size_t)positions[t] * H;
		float *o = out + (size_t)t * H;
		int i;

		for (i = 0; i < H; i++)
			o[i] = w[i] + p[i] + type0[i];
		ln_row(o, gamma, beta, eps, H, o);
	}
	return RG_OK;
}

rg_status rg_cpu_gemm(const float *A, const float *W, float *out, int M, int N, int K)
{
	if (M < 0 || N <= 0 || K <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm: bad shape M=%d N=%d K=%d", M, N, K);
	if (M == 0)
		return RG_OK;
	/* out (M,N) = A (M,K) * W^T, W stored (N,K) row-major (torch.nn.Linear). */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, A, K, W, K, 0.f, out, N);
	return RG_OK;
}

static inline float act_apply(float v, rg_act act)
{
	switch (act) {
	case RG_ACT_NONE:
		return v;
	case RG_ACT_GELU:
		/* exact GELU (Hendrycks & Gimpel): x * Phi(x) */
		return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
	case RG_ACT_GELU_NEW:
		/* tanh approximation used by GPT-2 / "gelu_new" */
		return 0.5f * v *
		       (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
	case RG_ACT_RELU:
		return v > 0.f ? v : 0.f;
	}
	return v;
}

rg_status rg_cpu_bias_act(float *x, const float *bias, int M, int N, rg_act act)
{
	int r;

	if (M < 0 || N <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "bias_act: bad shape M=%d N=%d", M, N);
	if (act != RG_ACT_NONE && act != RG_ACT_GELU && act != RG_ACT_GELU_NEW &&
	    act != RG_ACT_RELU)
		return rg_errorf(RG_ERR_UNSUPPORTED, "bias_act: unknown activation %d", (int)act);
#pragma omp parallel for schedule(static)
	for (r = 0; r < M; r++) {
		float *row = x + (size_t)r * N;
		int i;

		for (i = 0; i < N; i++)
			row[i] = act_apply(row[i] + (bias ? bias[i] : 0.f), act);
	}
	return RG_OK;
}

rg_status rg_cpu_gemm_bias_act(const float *A, const float *W, const float *bias, float *out,
			       int M, int N, int K, rg_act act)
{
	rg_status st = rg_cpu_gemm(A, W, out, M, N, K);

	if (st != RG_OK || (!bias && act == RG_ACT_NONE))
		return st;
	return rg_cpu_bias_act(out, bias, M, N, act);
}

rg_status rg_cpu_bias_residual_layernorm(const float *x, const float *bias, const float *residual,
					 const float *gamma, const float *beta, float eps, int M,
					 int N, float *out)
{
	int r;

	if (M < 0 || N <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "bias_residual_layernorm: bad shape M=%d N=%d",
				 M, N);
	/* out may alias x or residual: each row is read completely into out before it is
	 * normalized in place, and rows are independent. */
#pragma omp parallel for schedule(static)
	for (r = 0; r < M; r++) {
		const float *xr = x + (size_t)r * N;
		const float *rr = residual + (size_t)r * N;
		float *o = out + (size_t)r * N;
		int i;

		for (i = 0; i < N; i++)
			o[i] = xr[i] + (bias ? bias[i] : 0.f) + rr[i];
		ln_row(o, gamma, beta, eps, N, o);
	}
	return RG_OK;
}

/* One query row of one head: scores against keys [0, L) of its sequence, masked by seg,
 * max-subtracted softmax and weighted sum of V. q, k0, v0 point at the head's columns of the
 * sequence's first token; rows are ld floats apart. sc: scratch of >= L floats. o: (head_dim). */
static void attn_row(const float *q, const float *k0, const float *v0, size_t ld, int L,
		     int head_dim, float scale, const int32_t *seg_seq, int qi, float *sc, float *o)
{
	float mx = -INFINITY, sum = 0.f, inv;
	int j, d, any = 0;

	for (j = 0; j < L; j++) {
		const float *k = k0 + (size_t)j * ld;
		float s = 0.f;

		if (seg_seq && (seg_seq[j] < 0 || seg_seq[j] != seg_seq[qi])) {
			sc[j] = -INFINITY;
			continue;
		}
		for (d = 0; d < head_dim; d++)
			s += q[d] * k[d];
		s *= scale;
		sc[j] = s;
		if (s > mx)
			mx = s;
		any = 1;
	}
	for (d = 0; d < head_dim; d++)
		o[d] = 0.f;
	if (!any)
		return; /* no visible key: zeros, as ops.h says */
	for (j = 0; j < L; j++) {
		float e = sc[j] == -INFINITY ? 0.f : expf(sc[j] - mx);
		sc[j] = e;
		sum += e;
	}
	inv = 1.f / sum;
	for (j = 0; j < L; j++) {
		const float *v = v0 + (size_t)j * ld;
		float p = sc[j] * inv;

		if (p == 0.f)
			continue;
		for (d = 0; d < head_dim; d++)
			o[d] += p * v[d];
	}
}

rg_status rg_cpu_attention(const float *qkv, const int32_t *cu_seqlens, int n_seq, int max_seqlen,
			   int num_heads, int head_dim, float scale, const int32_t *seg, float *out)
{
	const int H = num_heads * head_dim;
	const size_t ld = (size_t)3 * H;
	int s, oom = 0;

	if (n_seq < 0 || max_seqlen < 0 || num_heads <= 0 || head_dim <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "attention: bad shape n_seq=%d max_seqlen=%d heads=%d head_dim=%d",
				 n_seq, max_seqlen, num_heads, head_dim);
	for (s = 0; s < n_seq; s++) {
		int L = cu_seqlens[s + 1] - cu_seqlens[s];
		if (L < 0 || L > max_seqlen)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "attention: sequence %d has length %d (max_seqlen %d)", s, L,
					 max_seqlen);
	}
	if (n_seq == 0 || max_seqlen == 0)
		return RG_OK;

	/* Work items are (sequence, head, query row); rows of a (seq, head) are contiguous so a
	 * thread's K/V working set stays in cache. Scratch: one score row per thread. */
#pragma omp parallel reduction(| : oom)
	{
		float *sc = malloc((size_t)max_seqlen * sizeof(float));
		int ss;

		if (!sc)
			oom = 1;
#pragma omp for schedule(dynamic, 1) collapse(2)
		for (ss = 0; ss < n_seq; ss++) {
			for (int h = 0; h < num_heads; h++) {
				const int t0 = cu_seqlens[ss];
				const int L = cu_seqlens[ss + 1] - t0;
				const float *base = qkv + (size_t)t0 * ld + (size_t)h * head_dim;
				const int32_t *sg = seg ? seg + t0 : NULL;

				if (!sc)
					continue;
				for (int i = 0; i < L; i++)
					attn_row(base + (size_t)i * ld, base + H, base + 2 * H, ld, L,
						 head_dim, scale, sg, i, sc,
						 out + (size_t)(t0 + i) * H + (size_t)h * head_dim);
			}
		}
		free(sc);
	}
	if (oom)
		return rg_errorf(RG_ERR_OOM, "attention: cannot allocate %d floats of scratch",
				 max_seqlen);
	return RG_OK;
}

rg_status rg_cpu_pool(const float *x, const int32_t *cu_seqlens, int n_seq, int H, rg_pooling mode,
		      bool normalize, float *out)
{
	int s;

	if (n_seq < 0 || H <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "pool: bad shape n_seq=%d H=%d", n_seq, H);
	if (mode != RG_POOL_MEAN && mode != RG_POOL_CLS && mode != RG_POOL_MAX)
		return rg_errorf(RG_ERR_UNSUPPORTED, "pool: unknown pooling mode %d", (int)mode);
	for (s = 0; s < n_seq; s++)
		if (cu_seqlens[s + 1] - cu_seqlens[s] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "pool: sequence %d has a negative length",
					 s);
#pragma omp parallel for schedule(static)
	for (s = 0; s < n_seq; s++) {
		const int t0 = cu_seqlens[s], L = cu_seqlens[s + 1] - t0;
		const float *xs = x + (size_t)t0 * H;
		float *o = out + (size_t)s * H;
		int i, t;

		if (L == 0) {
			/* a padding sequence (graph bucket): zero row */
			memset(o, 0, (size_t)H * sizeof(float));
			continue;
		}
		switch (mode) {
		case RG_POOL_MEAN:
			for (i = 0; i < H; i++)
				o[i] = 0.f;
			for (t = 0; t < L; t++)
				for (i = 0; i < H; i++)
					o[i] += xs[(size_t)t * H + i];
			for (i = 0; i < H; i++)
				o[i] /= (float)L;
			break;
		case RG_POOL_CLS:
			memcpy(o, xs, (size_t)H * sizeof(float));
			break;
		case RG_POOL_MAX:
			memcpy(o, xs, (size_t)H * sizeof(float));
			for (t = 1; t < L; t++)
				for (i = 0; i < H; i++)
					if (xs[(size_t)t * H + i] > o[i])
						o[i] = xs[(size_t)t * H + i];
			break;
		}
		if (normalize) {
			/* torch.nn.functional.normalize: x / max(||x||_2, 1e-12) */
			float ss = 0.f, inv;

			for (i = 0; i < H; i++)
				ss += o[i] * o[i];
			inv = 1.f / fmaxf(sqrtf(ss), 1e-12f);
			for (i = 0; i < H; i++)
				o[i] *= inv;
		}
	}
	return RG_OK;
}

rg_status rg_cpu_gather_rows(const float *src, const int32_t *idx, int n_dst, int H, float *dst)
{
	int i;

	if (n_dst < 0 || H <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gather_rows: bad shape n_dst=%d H=%d", n_dst, H);
#pragma omp parallel for schedule(static)
	for (i = 0; i < n_dst; i++)
		memcpy(dst + (size_t)i * H, src + (size_t)idx[i] * H, (size_t)H * sizeof(float));
	return RG_OK;
}
