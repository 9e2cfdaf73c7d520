/* CUDA twins of the decoder ops of src/ops/ops.h (contracts there; CPU references in
 * src/ops/cpu/decoder_cpu.c): fused residual add + LayerNorm / RMSNorm, RoPE in both pair layouts
 * (alone, or from a per-step cos / sin table fused with the KV write), the gated FFNs' act * mul,
 * the KV scatter into the paged cache and the copy of whole KV blocks (copy-on-write for beams).
 * Memory-bound; all math in float32, values stored in the compute dtype (the residual after the add
 * is rounded to it before the norm reads it, as HF's decoders do in fp16/bf16). The paged attention
 * itself is in paged_attention.cu. */
#include "ops/cuda/common.cuh"

#define DEC_THREADS 256

/* One CTA per row: residual += x (when x), then out = norm(residual). The row is read twice
 * more from L1/L2 (mean, then variance and output): rows are at most a few KB. */
template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
add_norm_kernel(const T *__restrict__ x, T *__restrict__ residual, const float *__restrict__ gamma,
		const float *__restrict__ beta, float eps, int rms, int N, T *__restrict__ out)
{
	__shared__ float scratch[32];
	T *res = residual + (size_t)blockIdx.x * N;
	T *o = out + (size_t)blockIdx.x * N;
	float s = 0.f, mean = 0.f, var = 0.f;

	rg_pdl_wait();
	if (x) {
		const T *xr = x + (size_t)blockIdx.x * N;
		for (int i = threadIdx.x; i < N; i += DEC_THREADS) {
			T r = rg_from_f<T>(rg_to_f(res[i]) + rg_to_f(xr[i]));
			res[i] = r;
			s += rms ? rg_to_f(r) * rg_to_f(r) : rg_to_f(r);
		}
	} else {
		for (int i = threadIdx.x; i < N; i += DEC_THREADS) {
			float r = rg_to_f(res[i]);
			s += rms ? r * r : r;
		}
	}
	s = rg_block_sum(s, scratch);
	if (rms) {
		const float rstd = rsqrtf(s / (float)N + eps);
		for (int i = threadIdx.x; i < N; i += DEC_THREADS)
			o[i] = rg_from_f<T>(rg_to_f(res[i]) * rstd * gamma[i]);
		return;
	}
	mean = s / (float)N;
	for (int i = threadIdx.x; i < N; i += DEC_THREADS) {
		float d = rg_to_f(res[i]) - mean;
		var += d * d;
	}
	var = rg_block_sum(var, scratch);
	const float rstd = rsqrtf(var / (float)N + eps);
	for (int i = threadIdx.x; i < N; i += DEC_THREADS)
		o[i] = rg_from_f<T>((rg_to_f(res[i]) - mean) * rstd * gamma[i] + (beta ? beta[i] : 0.f));
}

/* The same for rows of at most VPT * DEC_THREADS elements, the row held in registers: one read
 * of x and residual, one write of residual and out, no re-reads between the reductions. The
 * arithmetic is add_norm_kernel's, term for term (a decode step runs two of these per layer on
 * rows of 576-4096: 25 per GPT-2 step at ~3.5 us each in the 2026-11-25 H100 trace). */
template <typename T, int VPT>
__global__ void __launch_bounds__(DEC_THREADS)
add_norm_reg_kernel(const T *__restrict__ x, T *__restrict__ residual, const float *__restrict__ gamma,
		    const float *__restrict__ beta, float eps, int rms, int N, T *__restrict__ out)
{
	__shared__ float scratch[32];
	T *res = residual + (size_t)blockIdx.x * N;
	T *o = out + (size_t)blockIdx.x * N;
	const T *xr = x ? x + (size_t)blockIdx.x * N : NULL;
	float r[VPT], s = 0.f, var = 0.f;

	rg_pdl_wait();
#pragma unroll
	for (int k = 0; k < VPT; k++) {
		const int i = threadIdx.x + k * DEC_THREADS;
		r[k] = 0.f;
		if (i < N) {
			float v = rg_to_f(res[i]);
			if (xr) {
				const T rr = rg_from_f<T>(v + rg_to_f(xr[i]));
				res[i] = rr;
				v = rg_to_f(rr);
			}
			r[k] = v;
			s += rms ? v * v : v;
		}
	}
	s = rg_block_sum(s, scratch);
	if (rms) {
		const float rstd = rsqrtf(s / (float)N + eps);
#pragma unroll
		for (int k = 0; k < VPT; k++) {
			const int i = threadIdx.x + k * DEC_THREADS;
			if (i < N)
				o[i] = rg_from_f<T>(r[k] * rstd * gamma[i]);
		}
		return;
	}
	const float mean = s / (float)N;
#pragma unroll
	for (int k = 0; k < VPT; k++) {
		const int i = threadIdx.x + k * DEC_THREADS;
		if (i < N) {
			const float d = r[k] - mean;
			var += d * d;
		}
	}
	var = rg_block_sum(var, scratch);
	const float rstd = rsqrtf(var / (float)N + eps);
#pragma unroll
	for (int k = 0; k < VPT; k++) {
		const int i = threadIdx.x + k * DEC_THREADS;
		if (i < N)
			o[i] = rg_from_f<T>((r[k] - mean) * rstd * gamma[i] + (beta ? beta[i] : 0.f));
	}
}

extern "C" rg_status rg_cuda_add_norm(rg_cuda_ctx *c, rg_dtype dt, const void *x, void *residual,
				      const float *gamma, const float *beta, float eps,
				      rg_norm_kind kind, int M, int N, void *out)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "add_norm: unknown dtype %d", (int)dt);
	if (M == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	const int rms = kind == RG_NORM_RMS ? 1 : 0, vpt = (N + DEC_THREADS - 1) / DEC_THREADS;
#define LAUNCH_K(K, T)                                                                           \
	rg_launch(c, K, dim3(M), dim3(DEC_THREADS), 0, (const T *)x, (T *)residual, gamma, beta, eps, \
		  rms, N, (T *)out)
#define LAUNCH(T)                                                                                \
	(vpt <= 2    ? LAUNCH_K((add_norm_reg_kernel<T, 2>), T)                                      \
	 : vpt <= 4  ? LAUNCH_K((add_norm_reg_kernel<T, 4>), T)                                      \
	 : vpt <= 8  ? LAUNCH_K((add_norm_reg_kernel<T, 8>), T)                                      \
	 : vpt <= 16 ? LAUNCH_K((add_norm_reg_kernel<T, 16>), T)                                     \
		     : LAUNCH_K(add_norm_kernel<T>, T))
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
#undef LAUNCH_K
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "add_norm_kernel launch");
}

/* One CTA per token; threads over (head, pair). The angle is formed and turned in double
 * (as the CPU twin does), then applied in float32. */
template <typename T>
__global__ void rope_kernel(T *__restrict__ x, int ld, int n_heads, int head_dim,
			    const int32_t *__restrict__ positions, const float *__restrict__ inv_freq,
			    int interleaved)
{
	const int t = blockIdx.x, half = head_dim / 2;
	const double pos = (double)positions[t];
	T *row = x + (size_t)t * ld;

	rg_pdl_wait();
	for (int k = threadIdx.x; k < n_heads * half; k += blockDim.x) {
		const int h = k / half, i = k - h * half;
		const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
		double sd, cd;
		sincos(pos * (double)inv_freq[i], &sd, &cd);
		const float cs = (float)cd, sn = (float)sd;
		T *v = row + (size_t)h * head_dim;
		const float x0 = rg_to_f(v[a]), x1 = rg_to_f(v[b]);
		v[a] = rg_from_f<T>(x0 * cs - x1 * sn);
		v[b] = rg_from_f<T>(x1 * cs + x0 * sn);
	}
}

extern "C" rg_status rg_cuda_rope(rg_cuda_ctx *c, rg_dtype dt, void *x, int ld, int n_tokens,
				  int n_heads, int head_dim, const int32_t *positions,
				  const float *inv_freq, bool interleaved)
{
	rg_status st;
	cudaError_t e;
	int threads = n_heads * (head_dim / 2);

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "rope: unknown dtype %d", (int)dt);
	if (n_tokens == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	threads = threads < 64 ? 64 : threads > 512 ? 512 : (threads + 31) / 32 * 32;
#define LAUNCH(T)                                                                                \
	rg_launch(c, rope_kernel<T>, dim3(n_tokens), dim3(threads), 0, (T *)x, ld, n_heads,         \
		  head_dim, positions, inv_freq, interleaved ? 1 : 0)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "rope_kernel launch");
}

/* The step's cos / sin table: one thread per (token, pair), the angle formed and turned in
 * double exactly as rope_kernel does (and the CPU twin), stored in f32. Once per forward: the
 * per-layer RoPE used to pay this double sincos on every head of every layer (43 us a call for
 * a 32 x 512-token SmolLM2 prefill on an H100, 5x its bandwidth time). */
__global__ void rope_table_kernel(const int32_t *__restrict__ positions, int n_tokens,
				  const float *__restrict__ inv_freq,
				  const float *__restrict__ inv_freq_long, int32_t long_from,
				  double mscale, int half, float *__restrict__ cos_sin)
{
	const int k = blockIdx.x * blockDim.x + threadIdx.x;

	rg_pdl_wait();
	if (k >= n_tokens * half)
		return;
	const int t = k / half, i = k - t * half;
	const int32_t pos = positions[t];
	const float *inv = inv_freq_long && pos >= long_from ? inv_freq_long : inv_freq;
	double sd, cd;
	sincos((double)pos * (double)inv[i], &sd, &cd);
	cos_sin[(size_t)t * 2 * half + i] = (float)(cd * mscale);
	cos_sin[(size_t)t * 2 * half + half + i] = (float)(sd * mscale);
}

/* LongRoPE's table (ops.h rg_op_rope_table_scaled): rope_table_kernel with a second frequency
 * set from position long_from on and the attention factor mscale, in double as the CPU twin. */
extern "C" rg_status rg_cuda_rope_table(rg_cuda_ctx *c, const int32_t *positions, int n_tokens,
					const float *inv_freq, const float *inv_freq_long,
					int32_t long_from, float mscale, int head_dim,
					float *cos_sin)
{
	rg_status st;
	const int half = head_dim / 2;
	const long long total = (long long)n_tokens * half;

	if (n_tokens == 0)
		return RG_OK;
	if (total > INT32_MAX)
		return rg_errorf(RG_ERR_UNSUPPORTED, "rope_table: %d tokens x %d pairs over 2^31",
				 n_tokens, half);
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	cudaError_t e = rg_launch(c, rope_table_kernel, dim3((unsigned)((total + 255) / 256)),
				  dim3(256), 0, positions, n_tokens, inv_freq, inv_freq_long,
				  long_from, (double)mscale, half, cos_sin);
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "rope_table_kernel launch");
}

/* Per-head RMSNorm of Q and K in place (ops.h rg_op_qk_norm; Qwen3): one CTA per token, one warp
 * per head at a time (heads of 64-256 columns: 2-8 values a lane), sum of squares in f32 by a
 * warp reduction, x * rstd * gamma stored in the compute dtype. Memory-bound: one read and one
 * write of the Q and K columns (a Qwen3-0.6B token: 24 heads x 128 x 2 bytes x 2). */
template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
qk_norm_kernel(T *__restrict__ qkv, int ld, int n_heads, int n_kv_heads, int head_dim,
	       const float *__restrict__ q_gamma, const float *__restrict__ k_gamma, float eps)
{
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = DEC_THREADS / 32;
	T *row = qkv + (size_t)blockIdx.x * ld;

	rg_pdl_wait();
	for (int h = warp; h < n_heads + n_kv_heads; h += n_warps) {
		T *v = row + (size_t)h * head_dim;
		const float *g = h < n_heads ? q_gamma : k_gamma;
		float ss = 0.f;

		for (int i = lane; i < head_dim; i += 32) {
			const float x = rg_to_f(v[i]);
			ss += x * x;
		}
		ss = rg_warp_sum(ss);
		const float rstd = rsqrtf(ss / (float)head_dim + eps);
		for (int i = lane; i < head_dim; i += 32)
			v[i] = rg_from_f<T>(rg_to_f(v[i]) * rstd * g[i]);
	}
}

extern "C" rg_status rg_cuda_qk_norm(rg_cuda_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
				     int n_heads, int n_kv_heads, int head_dim,
				     const float *q_gamma, const float *k_gamma, float eps)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "qk_norm: unknown dtype %d", (int)dt);
	if (n_tokens == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	rg_launch(c, qk_norm_kernel<T>, dim3(n_tokens), dim3(DEC_THREADS), 0, (T *)qkv, ld,        \
		  n_heads, n_kv_heads, head_dim, q_gamma, k_gamma, eps)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "qk_norm_kernel launch");
}

/* RoPE + KV write, one CTA per token: first the (head, P pairs) groups of its n_heads +
 * n_kv_heads Q and K heads, turned with the table's cos / sin and written back (K's also to its
 * cache slot), then its V row copied to the cache in VV-element vectors. P = VV = 16 / sizeof(T)
 * (16-byte accesses) when head_dim is a multiple of 2P and the rows are 16-byte aligned, else 1.
 * The products and sums are rounded one by one (no FMA contraction), as the CPU twin computes
 * them: f32 results equal the CPU's bit for bit (rope_kernel's contracted ones may differ by an
 * ulp). A slot outside [0, n_slots) writes no cache row and sets the error flag
 * (kv_write_kernel's rule); Q and K are still turned. On an H200, fp16, 16384 SmolLM2 rows: 27 us
 * against 53 us for rope_kernel + kv_write_kernel (8-byte pair groups: the same; four tokens a
 * CTA, or the V vectors in the pairs' loop: 31-38 us). */
template <typename T, int P, int VV>
__global__ void rope_kv_write_kernel(T *__restrict__ qkv, int ld, int n_heads, int n_kv_heads,
				     int head_dim, const float *__restrict__ cos_sin,
				     int interleaved, const int32_t *__restrict__ slots,
				     T *__restrict__ k_cache, T *__restrict__ v_cache,
				     long long n_slots, int *flag)
{
	const int t = blockIdx.x, half = head_dim / 2, ipr = half / P; /* items per head */
	const int kvd = n_kv_heads * head_dim, qd = n_heads * head_dim;
	const float *cs = cos_sin + (size_t)t * head_dim, *sn = cs + half;
	T *row = qkv + (size_t)t * ld;

	rg_pdl_wait();
	const long long s = slots[t];
	const bool ok = s >= 0 && s < n_slots;
	if (!ok && threadIdx.x == 0)
		atomicOr(flag, RG_CUDA_FLAG_BAD_INDEX);
	for (int k = threadIdx.x; k < (n_heads + n_kv_heads) * ipr; k += blockDim.x) {
		const int h = k / ipr, i = (k - h * ipr) * P;
		T *v = row + (size_t)h * head_dim;
		float c[P], sv[P], x0[P], x1[P], y0[P], y1[P];

		rg_load_f32<P>(cs + i, c);
		rg_load_f32<P>(sn + i, sv);
		if (interleaved) { /* pairs (2i, 2i + 1): 2P consecutive values, lo then hi */
			float lo[P], hi[P];
			rg_load_vec<T, P>(v + 2 * i, lo);
			rg_load_vec<T, P>(v + 2 * i + P, hi);
#pragma unroll
			for (int j = 0; j < P; j++) {
				x0[j] = 2 * j < P ? lo[2 * j] : hi[2 * j - P];
				x1[j] = 2 * j + 1 < P ? lo[2 * j + 1] : hi[2 * j + 1 - P];
			}
		} else { /* pairs (i, i + half) */
			rg_load_vec<T, P>(v + i, x0);
			rg_load_vec<T, P>(v + i + half, x1);
		}
#pragma unroll
		for (int j = 0; j < P; j++) { /* no FMA: the CPU twin's roundings */
			y0[j] = __fsub_rn(__fmul_rn(x0[j], c[j]), __fmul_rn(x1[j], sv[j]));
			y1[j] = __fadd_rn(__fmul_rn(x1[j], c[j]), __fmul_rn(x0[j], sv[j]));
		}
		/* K heads go to the cache as well (at the same offset within the kv row) */
		T *dst[2] = {v, h >= n_heads && ok ? k_cache + s * kvd + (size_t)(h - n_heads) * head_dim
						  : NULL};
#pragma unroll
		for (int d = 0; d < 2; d++) {
			if (!dst[d])
				continue;
			if (interleaved) {
				float lo[P], hi[P];
#pragma unroll
				for (int j = 0; j < P; j++) {
					(2 * j < P ? lo[2 * j] : hi[2 * j - P]) = y0[j];
					(2 * j + 1 < P ? lo[2 * j + 1] : hi[2 * j + 1 - P]) = y1[j];
				}
				rg_store_vec<T, P>(dst[d] + 2 * i, lo);
				rg_store_vec<T, P>(dst[d] + 2 * i + P, hi);
			} else {
				rg_store_vec<T, P>(dst[d] + i, y0);
				rg_store_vec<T, P>(dst[d] + i + half, y1);
			}
		}
	}
	if (!ok)
		return;
	for (int i = threadIdx.x * VV; i < kvd; i += blockDim.x * VV) {
		float tmp[VV];
		rg_load_vec<T, VV>(row + qd + kvd + i, tmp);
		rg_store_vec<T, VV>(v_cache + s * kvd + i, tmp);
	}
}

extern "C" rg_status rg_cuda_rope_kv_write(rg_cuda_ctx *c, rg_dtype dt, void *qkv, int ld,
					   int n_tokens, int n_heads, int n_kv_heads, int head_dim,
					   const float *cos_sin, bool interleaved,
					   const int32_t *slots, void *k_cache, void *v_cache,
					   int64_t n_slots)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "rope_kv_write: unknown dtype %d", (int)dt);
	if (n_tokens == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	/* 16-byte vectors of P = 16 / esz elements: every row, head, group of P pairs and cache row
	 * starts 16-byte aligned when head_dim is a multiple of 2P, ld of 8 and the bases are
	 * 16-byte aligned */
	const int P = 16 / (dt == RG_DTYPE_F32 ? 4 : 2);
	const bool wide = head_dim % (2 * P) == 0 && ld % 8 == 0 && (uintptr_t)qkv % 16 == 0 &&
			  (uintptr_t)cos_sin % 16 == 0 && (uintptr_t)k_cache % 16 == 0 &&
			  (uintptr_t)v_cache % 16 == 0;
	const int items = (n_heads + n_kv_heads) * (head_dim / 2) / (wide ? P : 1);
	const int threads = items < 64 ? 64 : items > 256 ? 256 : (items + 31) / 32 * 32;
#define LAUNCH_V(T, P, VV)                                                                        \
	rg_launch(c, rope_kv_write_kernel<T, P, VV>, dim3(n_tokens), dim3(threads), 0, (T *)qkv,   \
		  ld, n_heads, n_kv_heads, head_dim, cos_sin, interleaved ? 1 : 0, slots,          \
		  (T *)k_cache, (T *)v_cache, (long long)n_slots, c->flag_d)
#define LAUNCH(T) (wide ? LAUNCH_V(T, 16 / sizeof(T), 16 / sizeof(T)) : LAUNCH_V(T, 1, 1))
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
#undef LAUNCH_V
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "rope_kv_write_kernel launch");
}

/* out (M, N) = act(x[:, :N]) * x[:, N:] (silu with __expf, the others rg_act_apply): grid (column
 * blocks, rows), each thread VEC consecutive columns of one row (16-byte accesses for VEC = 16 /
 * sizeof(T)), rows strided by gridDim.y past 65535. The first version took one thread per element
 * of a flat 64-bit index and divided it by N: 90 us a call for a 32 x 512-token SmolLM2 prefill in
 * the issue 19 H100 trace, 57% of the bandwidth (on an H200, fp16 16384 x 1536: 85 us, this one 39
 * us). */
template <typename T, int VEC>
__global__ void __launch_bounds__(DEC_THREADS)
act_mul_kernel(const T *__restrict__ x, int M, int N, rg_act act, T *__restrict__ out)
{
	const int c = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;

	rg_pdl_wait();
	if (c >= N)
		return;
	for (int r = blockIdx.y; r < M; r += gridDim.y) {
		const T *g = x + (size_t)r * 2 * N + c;
		float gv[VEC], uv[VEC], o[VEC];

		rg_load_vec<T, VEC>(g, gv);
		rg_load_vec<T, VEC>(g + N, uv);
#pragma unroll
		for (int k = 0; k < VEC; k++)
			o[k] = (act == RG_ACT_SILU ? gv[k] / (1.f + __expf(-gv[k]))
						   : rg_act_apply(gv[k], act)) * uv[k];
		rg_store_vec<T, VEC>(out + (size_t)r * N + c, o);
	}
}

extern "C" rg_status rg_cuda_act_mul(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
				     rg_act act, void *out)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "act_mul: unknown dtype %d", (int)dt);
	if (M == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	/* 16-byte vectors when every row's gate, up and output start 16-byte aligned */
	const int vec = 16 / (int)(dt == RG_DTYPE_F32 ? 4 : 2);
	const bool wide = N % vec == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0;
	const int per_row = wide ? N / vec : N; /* threads a row needs */
	const int threads = per_row >= DEC_THREADS ? DEC_THREADS : (per_row + 31) / 32 * 32;
	const dim3 grid((per_row + threads - 1) / threads, M < 65535 ? M : 65535);
#define LAUNCH_V(T, V)                                                                            \
	rg_launch(c, act_mul_kernel<T, V>, grid, dim3(threads), 0, (const T *)x, M, N, act, (T *)out)
#define LAUNCH(T) (wide ? LAUNCH_V(T, 16 / sizeof(T)) : LAUNCH_V(T, 1))
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
#undef LAUNCH_V
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "act_mul_kernel launch");
}

/* One CTA per new token: its K and V rows to their slot. A slot outside [0, n_slots) writes
 * nothing and sets the error flag (the host validated the slots; this only keeps a bad one from
 * writing out of bounds). */
template <typename T>
__global__ void kv_write_kernel(const T *__restrict__ k, const T *__restrict__ v, int ld,
				const int32_t *__restrict__ slots, int kv_dim, T *__restrict__ k_cache,
				T *__restrict__ v_cache, long long n_slots, int *flag)
{
	const int t = blockIdx.x;
	const long long s = slots[t];

	rg_pdl_wait();
	if (s < 0 || s >= n_slots) {
		if (threadIdx.x == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_INDEX);
		return;
	}
	for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
		k_cache[s * kv_dim + i] = k[(size_t)t * ld + i];
		v_cache[s * kv_dim + i] = v[(size_t)t * ld + i];
	}
}

extern "C" rg_status rg_cuda_kv_write(rg_cuda_ctx *c, rg_dtype dt, const void *k, const void *v,
				      int ld, const int32_t *slots, int n_tokens, int kv_dim,
				      void *k_cache, void *v_cache, int64_t n_slots)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "kv_write: unknown dtype %d", (int)dt);
	if (n_tokens == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
#define LAUNCH(T)                                                                                \
	rg_launch(c, kv_write_kernel<T>, dim3(n_tokens), dim3(kv_dim < 256 ? 128 : 256), 0,         \
		  (const T *)k, (const T *)v, ld, slots, kv_dim, (T *)k_cache, (T *)v_cache,         \
		  (long long)n_slots, c->flag_d)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "kv_write_kernel launch");
}

/* Block pairs of one copy_blocks launch, passed by value (2 * 128 int32 = 1 KB of the 4 KB of
 * kernel parameters). */
#define RG_COPY_PAIRS 128
struct copy_pairs {
	int32_t src[RG_COPY_PAIRS], dst[RG_COPY_PAIRS];
};

/* grid (pairs, pools): CTA (i, p) moves block src[i] to dst[i] of pool p in 16-byte words. */
__global__ void copy_blocks_kernel(char *pool, size_t pool_stride, size_t words, copy_pairs pr)
{
	char *base = pool + (size_t)blockIdx.y * pool_stride;
	const int4 *s = (const int4 *)(base + (size_t)pr.src[blockIdx.x] * words * 16);
	int4 *d = (int4 *)(base + (size_t)pr.dst[blockIdx.x] * words * 16);

	rg_pdl_wait(); /* the blocks are the previous step's KV writes */
	for (size_t k = threadIdx.x; k < words; k += blockDim.x)
		d[k] = s[k];
}

/* Whole-block copies inside n_pools pools on the backend's stream (rg_op_copy_blocks). One
 * kernel per RG_COPY_PAIRS pairs for every pool (a beam step forks blocks in each layer's K
 * and V pool: one launch, not 2 x layers x forks memcpys) when the pairs are independent (no
 * dst is a src: copy-on-write takes fresh blocks) and everything is 16-byte aligned; else one
 * cudaMemcpyAsync per block, in order. */
extern "C" rg_status rg_cuda_copy_blocks(rg_cuda_ctx *c, void *pool, size_t block_bytes,
					 int n_pools, size_t pool_stride, const int32_t *src_h,
					 const int32_t *dst_h, int n)
{
	bool independent = ((uintptr_t)pool | block_bytes | pool_stride) % 16 == 0 &&
			   n_pools <= 65535;
	rg_status st;

	if (n == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	for (int i = 0; independent && i < n; i++)
		for (int j = 0; j < n; j++)
			if ((dst_h[i] == src_h[j] && (i != j || src_h[i] != dst_h[i])) ||
			    (i != j && dst_h[i] == dst_h[j])) {
				independent = false;
				break;
			}
	if (independent) {
		for (int i0 = 0; i0 < n; i0 += RG_COPY_PAIRS) {
			const int k = n - i0 < RG_COPY_PAIRS ? n - i0 : RG_COPY_PAIRS;
			copy_pairs pr;
			cudaError_t e;

			memcpy(pr.src, src_h + i0, (size_t)k * 4);
			memcpy(pr.dst, dst_h + i0, (size_t)k * 4);
			e = rg_launch(c, copy_blocks_kernel, dim3(k, n_pools), dim3(256), 0,
				      (char *)pool, pool_stride, block_bytes / 16, pr);
			if (e != cudaSuccess)
				return rg_cuda_err(e, "copy_blocks_kernel launch");
		}
		return RG_OK;
	}
	for (int p = 0; p < n_pools; p++)
		for (int i = 0; i < n; i++) {
			char *base = (char *)pool + (size_t)p * pool_stride;
			cudaError_t e;

			if (src_h[i] == dst_h[i])
				continue;
			e = cudaMemcpyAsync(base + (size_t)dst_h[i] * block_bytes,
					    base + (size_t)src_h[i] * block_bytes, block_bytes,
					    cudaMemcpyDeviceToDevice, c->stream);
			if (e != cudaSuccess)
				return rg_cuda_err(e, "copy_blocks cudaMemcpyAsync");
		}
	return RG_OK;
}

/* Greedy choice per row, with the chosen token's log-probability. A row is cut into S slices of
 * AM_SLICE columns (S = 1 for short rows): each CTA takes one (row, slice); each thread keeps its
 * best (value, lowest index) and a running exp-sum against its own max, then the CTA merges them
 * (the sums rescaled to the larger max). With S > 1 the CTAs write (max, index, sum) partials and
 * argmax_merge_kernel merges a row's S partials in one warp. (One CTA per row, the first version,
 * took 37 us for one row of 50,257 on an H100: a 98-element serial chain per thread, 1 of 132
 * SMs busy.) NaN never wins (comparisons with NaN are false) and adds nothing to the sum. */
#define AM_THREADS 256
#define AM_SLICE (AM_THREADS * 8)
#define AM_MAX_SLICES 64

/* Merge (ov, oi, os) into (best, bi, sum): the larger value wins, equal values the lower index;
 * the sums are rescaled to the new max. */
__device__ __forceinline__ void am_merge(float &best, int &bi, float &sum, float ov, int oi, float os)
{
	const float m = fmaxf(best, ov);
	const float mine = best == -INFINITY ? 0.f : sum * __expf(best - m);
	const float theirs = ov == -INFINITY ? 0.f : os * __expf(ov - m);

	if (ov > best || (ov == best && oi < bi))
		bi = oi;
	best = m;
	sum = mine + theirs;
}

__device__ __forceinline__ void am_warp_merge(float &best, int &bi, float &sum)
{
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, best, o);
		const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		const float os = __shfl_xor_sync(0xffffffffu, sum, o);

		am_merge(best, bi, sum, ov, oi, os);
	}
}

__device__ __forceinline__ void am_write(int32_t *ids, float *logprob, int r, int bi, int N, float sum)
{
	ids[r] = bi == N ? 0 : bi;
	if (logprob)
		logprob[r] = bi == N ? NAN : -logf(sum);
}

/* grid (M, S): the (row, slice) CTA over columns [slice * W, slice * W + W); part: M x S x 3
 * floats (max, index bits, sum) when S > 1 */
template <typename T>
__global__ void __launch_bounds__(AM_THREADS)
argmax_rows_kernel(const T *__restrict__ x, int N, int32_t *__restrict__ ids,
		   float *__restrict__ logprob, float *__restrict__ part, int W)
{
	__shared__ float s_v[AM_THREADS / 32], s_s[AM_THREADS / 32];
	__shared__ int s_i[AM_THREADS / 32];
	const int S = gridDim.y;
	const int j0 = blockIdx.y * W, j1 = min(N, j0 + W);
	const T *row = x + (size_t)blockIdx.x * N;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float best = -INFINITY, sum = 0.f;
	int bi = N; /* N: none yet */

	rg_pdl_wait();
	for (int j = j0 + threadIdx.x; j < j1; j += AM_THREADS) {
		const float v = rg_to_f(row[j]);
		if (v > best) {
			sum = sum * __expf(best - v) + 1.f; /* rescale to the new max */
			best = v;
			bi = j;
		} else if (v == best) {
			sum += 1.f; /* later index: keep the lower one */
		} else if (v == v) {
			sum += __expf(v - best);
		}
	}
	if (bi == N)
		sum = 0.f, best = -INFINITY;
	am_warp_merge(best, bi, sum);
	if (lane == 0) {
		s_v[warp] = best;
		s_i[warp] = bi;
		s_s[warp] = sum;
	}
	__syncthreads();
	if (warp == 0) {
		const int nw = AM_THREADS / 32;
		best = lane < nw ? s_v[lane] : -INFINITY;
		bi = lane < nw ? s_i[lane] : N;
		sum = lane < nw ? s_s[lane] : 0.f;
		am_warp_merge(best, bi, sum);
		if (lane == 0) {
			if (S == 1) {
				am_write(ids, logprob, blockIdx.x, bi, N, sum);
			} else {
				float *pp = part + ((size_t)blockIdx.x * S + blockIdx.y) * 3;
				pp[0] = best;
				pp[1] = __int_as_float(bi);
				pp[2] = sum;
			}
		}
	}
}

/* One warp per row: merge its S partials. */
__global__ void argmax_merge_kernel(const float *__restrict__ part, int S, int N,
				    int32_t *__restrict__ ids, float *__restrict__ logprob)
{
	const int r = blockIdx.x, lane = threadIdx.x;
	float best = -INFINITY, sum = 0.f;
	int bi = N;

	for (int z = lane; z < S; z += 32) {
		const float *pp = part + ((size_t)r * S + z) * 3;
		am_merge(best, bi, sum, pp[0], __float_as_int(pp[1]), pp[2]);
	}
	am_warp_merge(best, bi, sum);
	if (lane == 0)
		am_write(ids, logprob, r, bi, N, sum);
}

extern "C" rg_status rg_cuda_argmax_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
					 int32_t *ids, float *logprob)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "argmax_rows: unknown dtype %d", (int)dt);
	if (M == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	/* slices: enough CTAs for the SMs at small M, none for short rows; the partials go to the
	 * workspace (cuBLASLt's, free between GEMMs on this stream) */
	int S = (N + AM_SLICE - 1) / AM_SLICE;
	if (S > AM_MAX_SLICES)
		S = AM_MAX_SLICES; /* then the slices are wider than AM_SLICE */
	if ((size_t)M * S * 3 * sizeof(float) > RG_CUDA_WORKSPACE_BYTES)
		S = 1;
	const int W = (N + S - 1) / S;
#define LAUNCH(T)                                                                                \
	rg_launch(c, argmax_rows_kernel<T>, dim3(M, S), dim3(AM_THREADS), 0, (const T *)x, N, ids, \
		  logprob, (float *)c->workspace_d, W)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	if (e != cudaSuccess)
		return rg_cuda_err(e, "argmax_rows_kernel launch");
	if (S > 1) {
		argmax_merge_kernel<<<M, 32, 0, c->stream>>>((const float *)c->workspace_d, S, N, ids,
							     logprob);
		return rg_cuda_launch_check("argmax_merge_kernel");
	}
	return RG_OK;
}
