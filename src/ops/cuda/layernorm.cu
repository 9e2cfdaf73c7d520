/* Row-wise LayerNorm kernels: embeddings + LayerNorm, and bias + residual + LayerNorm
 * (the fused add-bias + LayerNorm of ByteTransformer sec. III-C).
 *
 * One CTA per row (token). The row's pre-normalization values are formed once in float32 and kept
 * in shared memory (H floats), then the mean and the variance are computed in two passes over
 * shared memory (exact two-pass statistics in fp32, no E[x^2]-E[x]^2 cancellation), and the
 * normalized row is written. Each element is read and written by the same thread, and every read
 * of a row happens before the barrier that precedes the first write, so `out` may alias the inputs.
 * Bytes: reads 2-3 rows + 3 f32 vectors, writes one row: memory-bound.
 *
 * Fast path (rows of N = 32 * VEC * NV elements, NV in {1,2,3,4,6,8} at compile time, VEC elements =
 * 16 or 8 bytes): one warp per row, each lane holding NV vectors of VEC elements in registers (16-byte loads and stores), and
 * the row's sum and sum of squares reduced together in one shuffle tree (TurboTransformers sec.
 * 4.1.2: one reduction instead of two). The sums are of x - K with K the row's first element (the
 * shifted-data form), so var = E[(x-K)^2] - E[x-K]^2 does not cancel when |mean| >> std. The row
 * is read once and written once: 2-3 rows of traffic, no shared memory, no barrier. Lanes write
 * only the elements they read, so out may alias the inputs. The block kernels above stay for
 * other N. */
#include "ops/cuda/common.cuh"

#define RG_LN_THREADS 128
#define RG_LN_MAX_H (46 * 1024 / 4) /* shared-memory row buffer (+ static scratch) without opt-in */

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
		row[i] = rg_to_f(x[base + i]) + (bias ? bias[i] : 0.f) + rg_to_f(residual[base + i]);
	__syncthreads();
	ln_stats(row, N, eps, scratch, &mean, &rstd); /* has barriers: all reads are done */
	for (int i = threadIdx.x; i < N; i += blockDim.x)
		out[base + i] = rg_from_f<T>((row[i] - mean) * rstd * gamma[i] + beta[i]);
}

#define RG_LN_WARPS 8 /* rows per CTA in the warp-per-row kernels */
#define RG_LN_MAX_NV 8

/* Mean and rstd of the NV*VEC values v of this lane's share of a row of n elements. */
template <int VEC, int NV>
__device__ __forceinline__ void ln_warp_stats(float (&v)[NV][VEC], int n, float eps, float *mean,
					      float *rstd)
{
	const float k = __shfl_sync(0xffffffffu, v[0][0], 0);
	float s = 0.f, q = 0.f;
#pragma unroll
	for (int j = 0; j < NV; j++) {
#pragma unroll
		for (int i = 0; i < VEC; i++) {
			const float d = v[j][i] - k;
			s += d;
			q += d * d;
		}
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		s += __shfl_xor_sync(0xffffffffu, s, o);
		q += __shfl_xor_sync(0xffffffffu, q, o);
	}
	const float ms = s / (float)n;
	*mean = k + ms;
	*rstd = rsqrtf(fmaxf(q / (float)n - ms * ms, 0.f) + eps);
}

/* Normalise this lane's share v of a row and store it: gamma and beta are loaded before the
 * reduction so their latency overlaps the shuffles. */
template <typename T, int VEC, int NV>
__device__ __forceinline__ void ln_warp_apply(float (&v)[NV][VEC], float eps,
					      const float *__restrict__ gamma,
					      const float *__restrict__ beta, T *row_out)
{
	const int lane = threadIdx.x & 31;
	float g[NV][VEC], b[NV][VEC], mean, rstd;
#pragma unroll
	for (int j = 0; j < NV; j++) {
		rg_load_f32<VEC>(gamma + (j * 32 + lane) * VEC, g[j]);
		rg_load_f32<VEC>(beta + (j * 32 + lane) * VEC, b[j]);
	}
	ln_warp_stats<VEC, NV>(v, 32 * VEC * NV, eps, &mean, &rstd);
#pragma unroll
	for (int j = 0; j < NV; j++) {
#pragma unroll
		for (int i = 0; i < VEC; i++)
			v[j][i] = (v[j][i] - mean) * rstd * g[j][i] + b[j][i];
		rg_store_vec<T, VEC>(row_out + (j * 32 + lane) * VEC, v[j]);
	}
}

/* out = LN(x + bias + residual) * gamma + beta, one warp per row, N = 32 * VEC * NV. */
template <typename T, int VEC, int NV>
__global__ void __launch_bounds__(RG_LN_WARPS * 32)
residual_layernorm_warp_kernel(const T *x, const float *__restrict__ bias, const T *residual,
			       const float *__restrict__ gamma, const float *__restrict__ beta,
			       float eps, int M, T *out)
{
	constexpr int N = 32 * VEC * NV;
	const int row = blockIdx.x * RG_LN_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	float v[NV][VEC];

	rg_pdl_wait();
	if (row >= M)
		return;
	const size_t base = (size_t)row * N;
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int col = (j * 32 + lane) * VEC;
		float r[VEC];
		rg_load_vec<T, VEC>(x + base + col, v[j]);
		rg_load_vec<T, VEC>(residual + base + col, r);
#pragma unroll
		for (int i = 0; i < VEC; i++)
			v[j][i] += r[i];
		if (bias) {
			float b[VEC];
			rg_load_f32<VEC>(bias + col, b);
#pragma unroll
			for (int i = 0; i < VEC; i++)
				v[j][i] += b[i];
		}
	}
	ln_warp_apply<T, VEC, NV>(v, eps, gamma, beta, out + base);
}

/* Embeddings + LayerNorm, one warp per token: LN(word[tok] + pos[p] + type0). */
template <typename T, int VEC, int NV>
__global__ void __launch_bounds__(RG_LN_WARPS * 32)
embed_layernorm_warp_kernel(const int32_t *__restrict__ tokens, const int32_t *__restrict__ positions,
			    const T *__restrict__ word, const T *__restrict__ pos,
			    const T *__restrict__ type0, const float *__restrict__ gamma,
			    const float *__restrict__ beta, float eps, int M, T *__restrict__ out,
			    int *flag)
{
	constexpr int H = 32 * VEC * NV;
	const int row = blockIdx.x * RG_LN_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	float v[NV][VEC];

	rg_pdl_wait();
	if (row >= M)
		return;
	const int tok = tokens[row], p = positions[row];
	if (tok < 0 || p < 0) {
		/* the caller validates indices; a bad one is flagged and its row zeroed */
		float z[VEC];
#pragma unroll
		for (int i = 0; i < VEC; i++)
			z[i] = 0.f;
		if (lane == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_INDEX);
#pragma unroll
		for (int j = 0; j < NV; j++)
			rg_store_vec<T, VEC>(out + (size_t)row * H + (j * 32 + lane) * VEC, z);
		return;
	}
#pragma unroll
	for (int j = 0; j < NV; j++) {
		const int col = (j * 32 + lane) * VEC;
		float a[VEC], b[VEC];
		rg_load_vec<T, VEC>(word + (size_t)tok * H + col, v[j]);
		rg_load_vec<T, VEC>(pos + (size_t)p * H + col, a);
		rg_load_vec<T, VEC>(type0 + col, b);
#pragma unroll
		for (int i = 0; i < VEC; i++)
			v[j][i] += a[i] + b[i];
	}
	ln_warp_apply<T, VEC, NV>(v, eps, gamma, beta, out + (size_t)row * H);
}

/* Dispatch a launch macro over the compile-time row share NV = N / (32 * VEC) in {1,2,3,4,6,8}. */
#define RG_LN_NV_DISPATCH(nv, LAUNCH_NV)                                                         \
	switch (nv) {                                                                             \
	case 1: LAUNCH_NV(1); break;                                                              \
	case 2: LAUNCH_NV(2); break;                                                              \
	case 3: LAUNCH_NV(3); break;                                                              \
	case 4: LAUNCH_NV(4); break;                                                              \
	case 6: LAUNCH_NV(6); break;                                                              \
	case 8: LAUNCH_NV(8); break;                                                              \
	}

/* Instantiate LAUNCH_NV(NV) for T, V (typedef / constexpr in scope) and the runtime nv. */
#define RG_LN_LAUNCH_W(TT, VV)                                                                    \
	do {                                                                                      \
		typedef TT T;                                                                     \
		constexpr int V = VV;                                                             \
		RG_LN_NV_DISPATCH(nv, LAUNCH_NV)                                                  \
	} while (0)

/* The (dtype, vector width) pairs of the warp kernels: fp32 4 or 2, fp16/bf16 8 or 4 elements. */
#define RG_LN_DT_VEC_DISPATCH(dt, vec, LAUNCH_W)                                                  \
	do {                                                                                      \
		if ((dt) == RG_DTYPE_F32 && (vec) == 4)                                           \
			LAUNCH_W(float, 4);                                                       \
		else if ((dt) == RG_DTYPE_F32)                                                    \
			LAUNCH_W(float, 2);                                                       \
		else if ((dt) == RG_DTYPE_F16 && (vec) == 8)                                      \
			LAUNCH_W(__half, 8);                                                      \
		else if ((dt) == RG_DTYPE_F16)                                                    \
			LAUNCH_W(__half, 4);                                                      \
		else if ((vec) == 8)                                                              \
			LAUNCH_W(__nv_bfloat16, 8);                                               \
		else                                                                              \
			LAUNCH_W(__nv_bfloat16, 4);                                               \
	} while (0)

/* Vector width (elements) for the warp kernels: 16 bytes when N allows it, else 8 bytes; 0 when
 * N is not 32 * VEC * nv with nv <= 8 or a pointer is not aligned to the vector. */
static int ln_warp_vec(int esz, int N, const void *const *ptrs, int nptr, const void *const *f32,
		       int nf32)
{
	uintptr_t a = 0, af = 0;
	for (int i = 0; i < nptr; i++)
		a |= (uintptr_t)ptrs[i];
	for (int i = 0; i < nf32; i++)
		af |= (uintptr_t)f32[i];
	for (int bytes = 16; bytes >= 8; bytes /= 2) {
		const int vec = bytes / esz;
		/* f32 vectors (gamma/beta/bias) need 16 bytes for vec >= 4: always true for the
		 * cudaMalloc'ed parameters; the act pointers are checked here */
		const int nv = N / (32 * vec);
		if (vec < 2 || N % (32 * vec) != 0 || nv > RG_LN_MAX_NV || nv == 5 || nv == 7)
			continue;
		if (a % (uintptr_t)bytes != 0 || af % (uintptr_t)(vec >= 4 ? 16 : 4) != 0)
			continue;
		return vec;
	}
	return 0;
}

extern "C" rg_status rg_cuda_embed_layernorm(rg_cuda_ctx *ctx, rg_dtype dt, const int32_t *tokens,
					     const int32_t *positions, int n_tokens, const void *word,
					     const void *pos, const void *type0, const float *gamma,
					     const float *beta, float eps, int H, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	size_t smem = (size_t)H * sizeof(float);
	rg_status st;

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
	{
		const void *ptrs[4] = {word, pos, type0, out}, *f32[2] = {gamma, beta};
		const int esz = (dt == RG_DTYPE_F32 ? 4 : 2), vec = ln_warp_vec(esz, H, ptrs, 4, f32, 2);
		const unsigned grid = (unsigned)((n_tokens + RG_LN_WARPS - 1) / RG_LN_WARPS);
		if (vec) {
			const int nv = H / (32 * vec);
#define LAUNCH_NV(NV)                                                                             \
	rg_launch(c, embed_layernorm_warp_kernel<T, V, NV>, grid, RG_LN_WARPS * 32, 0, tokens,      \
		  positions, (const T *)word, (const T *)pos, (const T *)type0, gamma, beta, eps,   \
		  n_tokens, (T *)out, c->flag_d)
			RG_LN_DT_VEC_DISPATCH(dt, vec, RG_LN_LAUNCH_W);
#undef LAUNCH_NV
			return rg_cuda_launch_check("embed_layernorm_warp_kernel");
		}
	}
#define LAUNCH(T)                                                                                \
	(embed_layernorm_kernel<T><<<n_tokens, RG_LN_THREADS, smem, c->stream>>>(                \
		 tokens, positions, (const T *)word, (const T *)pos, (const T *)type0, gamma, beta, \
		 eps, H, (T *)out, c->flag_d),                                                     \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("embed_layernorm_kernel");
}

extern "C" rg_status rg_cuda_bias_residual_layernorm(rg_cuda_ctx *ctx, rg_dtype dt, const void *x,
						     const float *bias, const void *residual,
						     const float *gamma, const float *beta,
						     float eps, int M, int N, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	size_t smem = (size_t)N * sizeof(float);
	rg_status st;

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
	{
		const void *ptrs[3] = {x, residual, out};
		const void *f32[3] = {gamma, beta, bias ? (const void *)bias : gamma};
		const int esz = (dt == RG_DTYPE_F32 ? 4 : 2), vec = ln_warp_vec(esz, N, ptrs, 3, f32, 3);
		const unsigned grid = (unsigned)((M + RG_LN_WARPS - 1) / RG_LN_WARPS);
		if (vec) {
			const int nv = N / (32 * vec);
#define LAUNCH_NV(NV)                                                                             \
	rg_launch(c, residual_layernorm_warp_kernel<T, V, NV>, grid, RG_LN_WARPS * 32, 0,          \
		  (const T *)x, bias, (const T *)residual, gamma, beta, eps, M, (T *)out)
			RG_LN_DT_VEC_DISPATCH(dt, vec, RG_LN_LAUNCH_W);
#undef LAUNCH_NV
			return rg_cuda_launch_check("residual_layernorm_warp_kernel");
		}
	}
#define LAUNCH(T)                                                                                \
	(bias_residual_layernorm_kernel<T><<<M, RG_LN_THREADS, smem, c->stream>>>(               \
		 (const T *)x, bias, (const T *)residual, gamma, beta, eps, N, (T *)out),           \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("bias_residual_layernorm_kernel");
}
