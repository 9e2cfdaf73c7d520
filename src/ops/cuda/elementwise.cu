/* Memory-bound CUDA ops: bias + activation (in place), row gather, and sequence pooling
 * (mean / CLS / max + optional L2 normalization, output f32). All math in float32. */
#include "ops/cuda/common.cuh"

#define RG_EW_THREADS 256

/* One CTA per row (rows in grid.x, up to 2^31-1), threads over the N columns, so the bias index
 * needs no division. */
template <typename T>
__global__ void bias_act_kernel(T *__restrict__ x, const float *__restrict__ bias, int N, rg_act act)
{
	T *row = x + (size_t)blockIdx.x * N;
	for (int i = threadIdx.x; i < N; i += blockDim.x)
		row[i] = rg_from_f<T>(rg_act_apply(rg_to_f(row[i]) + (bias ? bias[i] : 0.f), act));
}

extern "C" rg_status rg_cuda_bias_act(rg_cuda_ctx *ctx, rg_dtype dt, void *x, const float *bias, int M,
				      int N, rg_act act)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "bias_act: unknown dtype %d", (int)dt);
	if (M == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	(bias_act_kernel<T><<<M, RG_EW_THREADS, 0, c->stream>>>((T *)x, bias, N, act), 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("bias_act_kernel");
}

/* dst[i] = src[idx[i]]: one CTA per destination row. A negative index zeroes the row and sets the
 * error flag (the caller validates indices; this only keeps a bad one from reading out of bounds
 * below src). */
template <typename T>
__global__ void gather_rows_kernel(const T *__restrict__ src, const int32_t *__restrict__ idx, int H,
				   T *__restrict__ dst, int *flag)
{
	int r = idx[blockIdx.x];
	T *d = dst + (size_t)blockIdx.x * H;

	if (r < 0) {
		if (threadIdx.x == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_INDEX);
		for (int i = threadIdx.x; i < H; i += blockDim.x)
			d[i] = rg_from_f<T>(0.f);
		return;
	}
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		d[i] = src[(size_t)r * H + i];
}

extern "C" rg_status rg_cuda_gather_rows(rg_cuda_ctx *ctx, rg_dtype dt, const void *src, const int32_t *idx,
					 int n_dst, int H, void *dst)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "gather_rows: unknown dtype %d", (int)dt);
	if (n_dst == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	(gather_rows_kernel<T><<<n_dst, 128, 0, c->stream>>>((const T *)src, idx, H, (T *)dst,     \
							       c->flag_d),                         \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("gather_rows_kernel");
}

/* out[t] = scale * table[tokens[t]] + pos[positions[t]] (none for a token equal to no_pos_token):
 * one CTA per row, f32 sums. */
template <typename T>
__global__ void embed_scale_add_kernel(const T *__restrict__ table, const int32_t *__restrict__ tokens,
				       float scale, const T *__restrict__ pos,
				       const int32_t *__restrict__ positions, int32_t no_pos_token,
				       int H, T *__restrict__ out)
{
	const int32_t tok = tokens[blockIdx.x];
	const T *e = table + (size_t)tok * H;
	const T *p = pos && tok != no_pos_token ? pos + (size_t)positions[blockIdx.x] * H : NULL;
	T *o = out + (size_t)blockIdx.x * H;

	for (int i = threadIdx.x; i < H; i += blockDim.x)
		o[i] = rg_from_f<T>(scale * rg_to_f(e[i]) + (p ? rg_to_f(p[i]) : 0.f));
}

extern "C" rg_status rg_cuda_embed_scale_add(rg_cuda_ctx *ctx, rg_dtype dt, const void *table,
					     const int32_t *tokens, float scale, const void *pos,
					     const int32_t *positions, int32_t no_pos_token, int n,
					     int H, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "embed_scale_add: unknown dtype %d", (int)dt);
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	(embed_scale_add_kernel<T><<<n, 128, 0, c->stream>>>((const T *)table, tokens, scale,      \
							      (const T *)pos, positions,            \
							      no_pos_token, H,                      \
							      (T *)out),                            \
	 0)
	RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return rg_cuda_launch_check("embed_scale_add_kernel");
}

/* One CTA of 1024 threads per sequence, parallel over tokens and hidden units (the old kernel
 * walked each column's tokens serially with 128 threads: 0.96 ms for 128 sequences of 5-500
 * tokens). Threads form cg = H / VEC column groups (16-byte loads) times tg = 1024 / cg token groups;
 * token group g reduces tokens g, g + tg, ... of its columns in registers, RG_POOL_BATCH loads in
 * flight before the first use (sum for MEAN, max for MAX, only token 0 for CLS), writes its partial
 * row to shared memory (tg * H floats <= 1024 * VEC), and after one barrier each thread reduces the
 * tg partials of its columns. The pooled row is kept in shared memory until the block has reduced
 * its squared norm (normalize: x / max(||x||_2, 1e-12), as torch.nn.functional.normalize), then
 * written once: `out` may be pinned host memory mapped into the device (the graph path writes the
 * result straight to the host), which is written and never read. A zero-length sequence (a graph
 * bucket's padding) gives a zero row; a negative length sets the error flag and gives a zero row.
 * Bytes: each token row read once, each output row written once. */
#define RG_POOL_THREADS 1024
#define RG_POOL_BATCH 4

template <typename T, int VEC>
__global__ void __launch_bounds__(RG_POOL_THREADS)
pool_kernel(const T *__restrict__ x, const int32_t *__restrict__ cu_seqlens, int H, rg_pooling mode,
	    bool normalize, float *__restrict__ out, int *flag)
{
	extern __shared__ float part[]; /* [tg][H]; row [H] after the reduction */
	__shared__ float scratch[32];
	const int s = blockIdx.x, tid = threadIdx.x;
	rg_pdl_wait();
	const int t0 = cu_seqlens[s];
	int L = cu_seqlens[s + 1] - t0;
	const int cg = H / VEC, tg = max(1, (int)blockDim.x / cg);
	const bool is_max = mode == RG_POOL_MAX;
	float *o = out + (size_t)s * H;
	float ss = 0.f;

	if (L < 0) {
		if (tid == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_SEQLEN);
		L = 0;
	}
	const int Lr = mode == RG_POOL_CLS ? min(L, 1) : L; /* tokens reduced */
	const int ng = min(tg, Lr);                          /* token groups with a token */
	for (int e = tid; e < cg * tg; e += blockDim.x) {
		const int c = e % cg, g = e / cg;
		float acc[VEC];
#pragma unroll
		for (int i = 0; i < VEC; i++)
			acc[i] = is_max ? -INFINITY : 0.f;
		const T *xc = x + (size_t)t0 * H + (size_t)c * VEC;
		int t = g;
		for (; t + (RG_POOL_BATCH - 1) * tg < Lr; t += RG_POOL_BATCH * tg) {
			float v[RG_POOL_BATCH][VEC];
#pragma unroll
			for (int b = 0; b < RG_POOL_BATCH; b++)
				rg_load_vec<T, VEC>(xc + (size_t)(t + b * tg) * H, v[b]);
#pragma unroll
			for (int b = 0; b < RG_POOL_BATCH; b++)
#pragma unroll
				for (int i = 0; i < VEC; i++)
					acc[i] = is_max ? fmaxf(acc[i], v[b][i]) : acc[i] + v[b][i];
		}
		for (; t < Lr; t += tg) {
			float v[VEC];
			rg_load_vec<T, VEC>(xc + (size_t)t * H, v);
#pragma unroll
			for (int i = 0; i < VEC; i++)
				acc[i] = is_max ? fmaxf(acc[i], v[i]) : acc[i] + v[i];
		}
#pragma unroll
		for (int i = 0; i < VEC; i++)
			part[g * H + c * VEC + i] = acc[i];
	}
	__syncthreads();
	/* reduce the token groups; thread i keeps column i (and i + blockDim...) in registers */
	float keep[4];
	int nk = 0;
	for (int i = tid; i < H; i += blockDim.x, nk++) {
		float v = 0.f;
		if (ng > 0) {
			v = part[i];
			for (int g = 1; g < ng; g++)
				v = is_max ? fmaxf(v, part[g * H + i]) : v + part[g * H + i];
			if (mode == RG_POOL_MEAN)
				v /= (float)L;
		}
		if (nk < 4)
			keep[nk] = v;
		ss += v * v;
	}
	__syncthreads(); /* every partial is read: part[0..H) becomes the pooled row */
	nk = 0;
	for (int i = tid; i < H; i += blockDim.x, nk++)
		if (nk < 4)
			part[i] = keep[nk];
	/* (at most 4 columns per thread: the launcher refuses H > 4 * RG_POOL_THREADS) */
	const float inv = normalize ? 1.f / fmaxf(sqrtf(rg_block_sum(ss, scratch)), 1e-12f) : 1.f;
	for (int i = tid; i < H; i += blockDim.x)
		o[i] = part[i] * inv;
}

extern "C" rg_status rg_cuda_pool(rg_cuda_ctx *ctx, rg_dtype dt, const void *x, const int32_t *cu_seqlens,
				  int n_seq, int H, rg_pooling mode, bool normalize, float *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "pool: unknown dtype %d", (int)dt);
	if (n_seq == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	{
		/* 16-byte column groups when H and x allow it, else one element per thread */
		const int esz = dt == RG_DTYPE_F32 ? 4 : 2, vec16 = 16 / esz;
		const bool v16 = H % vec16 == 0 && (uintptr_t)x % 16 == 0;
		const int vec = v16 ? vec16 : 1, cg = H / vec;
		const int tg = cg >= RG_POOL_THREADS ? 1 : RG_POOL_THREADS / cg;
		const size_t smem = (size_t)tg * H * sizeof(float);
		if (smem > 44 * 1024 || H > 4 * RG_POOL_THREADS)
			return rg_errorf(RG_ERR_UNSUPPORTED, "pool: hidden size %d is too large", H);
#define LAUNCH_P(T, V)                                                                            \
	rg_launch(c, pool_kernel<T, V>, n_seq, RG_POOL_THREADS, smem, (const T *)x, cu_seqlens, H,  \
		  mode, normalize, out, c->flag_d)
		if (dt == RG_DTYPE_F32)
			v16 ? LAUNCH_P(float, 4) : LAUNCH_P(float, 1);
		else if (dt == RG_DTYPE_F16)
			v16 ? LAUNCH_P(__half, 8) : LAUNCH_P(__half, 1);
		else
			v16 ? LAUNCH_P(__nv_bfloat16, 8) : LAUNCH_P(__nv_bfloat16, 1);
#undef LAUNCH_P
	}
	return rg_cuda_launch_check("pool_kernel");
}
