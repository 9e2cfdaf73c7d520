/* Row-wise LayerNorm kernels: embeddings + LayerNorm, and bias + residual + LayerNorm
 * (the fused add-bias + LayerNorm of ByteTransformer sec. III-C).
 *
 * One CTA per row (token). The row's pre-normalization values are formed once in float32 and kept
 * in shared memory (H floats), then the mean and the variance are computed in two passes over
 * shared memory (exact two-pass statistics in fp32, no E[x^2]-E[x]^2 cancellation), and the
 * normalized row is written. Each element is read and written by the same thread, and every read
 * of a row happens before the barrier that precedes the first write, so `out` may alias the inputs.
 * Bytes: reads 2-3 rows + 3 f32 vectors, writes one row: memory-bound. */
#include "ops/cuda/common.cuh"

#define RG_LN_THREADS 128
#define RG_LN_MAX_H (48 * 1024 / 4) /* shared-memory row buffer without opt-in */

/* Mean and 1/sqrt(var + eps) of row[0..H) (shared memory); all threads get both. */
__device__ __forceinline__ void ln_stats(const float *row, int H, float eps, float *scratch,
					 float *mean, float *rstd)
{
	float s = 0.f, v = 0.f, mu;
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		s += row[i];
	mu = rg_block_sum(s, scratch) / (float)H;
	for (int i = threadIdx.x; i < H; i += blockDim.x) {
		float d = row[i] - mu;
		v += d * d;
	}
	v = rg_block_sum(v, scratch) / (float)H;
	*mean = mu;
	*rstd = rsqrtf(v + eps);
}

template <typename T>
__global__ void embed_layernorm_kernel(const int32_t *__restrict__ tokens,
				       const int32_t *__restrict__ positions, const T *__restrict__ word,
				       const T *__restrict__ pos, const T *__restrict__ type0,
				       const float *__restrict__ gamma, const float *__restrict__ beta,
				       float eps, int H, T *__restrict__ out, int *flag)
{
	extern __shared__ float row[];
	__shared__ float scratch[32];
	int t = blockIdx.x;
	int tok = tokens[t], p = positions[t];
	float mean, rstd;

	if (tok < 0 || p < 0) {
		/* The caller validates indices; a negative one is reported through the flag and the
		 * row is zeroed instead of reading out of bounds. */
		if (threadIdx.x == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_INDEX);
		for (int i = threadIdx.x; i < H; i += blockDim.x)
			out[(size_t)t * H + i] = rg_from_f<T>(0.f);
		return;
	}
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		row[i] = rg_to_f(word[(size_t)tok * H + i]) + rg_to_f(pos[(size_t)p * H + i]) +
			 rg_to_f(type0[i]);
	__syncthreads();
	ln_stats(row, H, eps, scratch, &mean, &rstd);
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		out[(size_t)t * H + i] = rg_from_f<T>((row[i] - mean) * rstd * gamma[i] + beta[i]);
}

template <typename T>
__global__ void bias_residual_layernorm_kernel(const T *x, const float *__restrict__ bias,
					       const T *residual, const float *__restrict__ gamma,
					       const float *__restrict__ beta, float eps, int N, T *out)
{
	extern __shared__ float row[];
	__shared__ float scratch[32];
	size_t base = (size_t)blockIdx.x * N;
	float mean, rstd;

	for (int i = threadIdx.x; i < N; i += blockDim.x)
		row[i] = rg_to_f(x[base + i]) + bias[i] + rg_to_f(residual[base + i]);
	__syncthreads();
	ln_stats(row, N, eps, scratch, &mean, &rstd); /* has barriers: all reads are done */
	for (int i = threadIdx.x; i < N; i += blockDim.x)
		out[base + i] = rg_from_f<T>((row[i] - mean) * rstd * gamma[i] + beta[i]);
}

extern "C" rg_status rg_cuda_embed_layernorm(void *ctx, rg_dtype dt, const int32_t *tokens,
					     const int32_t *positions, int n_tokens, const void *word,
					     const void *pos, const void *type0, const float *gamma,
					     const float *beta, float eps, int H, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	size_t smem = (size_t)H * sizeof(float);
	rg_status st;

	if (n_tokens < 0 || H <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "embed_layernorm: bad shape n_tokens=%d H=%d",
				 n_tokens, H);
	if (H > RG_LN_MAX_H)
		return rg_errorf(RG_ERR_UNSUPPORTED, "embed_layernorm: hidden size %d > %d", H,
				 RG_LN_MAX_H);
	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "embed_layernorm: unknown dtype %d", (int)dt);
	if (n_tokens == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	(embed_layernorm_kernel<T><<<n_tokens, RG_LN_THREADS, smem, c->stream>>>(                \
		 tokens, positions, (const T *)word, (const T *)pos, (const T *)type0, gamma, beta, \
		 eps, H, (T *)out, c->flag_d),                                                     \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("embed_layernorm_kernel");
}

extern "C" rg_status rg_cuda_bias_residual_layernorm(void *ctx, rg_dtype dt, const void *x,
						     const float *bias, const void *residual,
						     const float *gamma, const float *beta,
						     float eps, int M, int N, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	size_t smem = (size_t)N * sizeof(float);
	rg_status st;

	if (M < 0 || N <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "bias_residual_layernorm: bad shape M=%d N=%d",
				 M, N);
	if (N > RG_LN_MAX_H)
		return rg_errorf(RG_ERR_UNSUPPORTED, "bias_residual_layernorm: row length %d > %d", N,
				 RG_LN_MAX_H);
	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "bias_residual_layernorm: unknown dtype %d",
				 (int)dt);
	if (M == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	(bias_residual_layernorm_kernel<T><<<M, RG_LN_THREADS, smem, c->stream>>>(               \
		 (const T *)x, bias, (const T *)residual, gamma, beta, eps, N, (T *)out),           \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("bias_residual_layernorm_kernel");
}
