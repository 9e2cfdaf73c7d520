/* Small-M GEMM for decode steps: out (M, N) = act_fn(A (M, K) x W^T + bias), M <= 16, fp16 / bf16,
 * W (N, K) row-major (torch.nn.Linear's layout), fp32 accumulation. Contract in gemv.cuh.
 *
 * Why: a decode step multiplies one row per sequence (M = 1..16) by every weight matrix, so the
 * GEMM is a stream over W and nothing else: 2 N K bytes read, 2 M N written, 2 M N K FLOPs, about
 * M FLOPs per weight byte, far under an H100's ~300 FLOPs per byte. cuBLASLt's M = 1 kernels took
 * 4-5 us for GPT-2 small's layer GEMMs (1.2-4.7 MB of weights: 25-35% of HBM bandwidth) and added a
 * split-K reduce kernel to a quarter of them (issue 19, H100 trace: 265 us per token).
 *
 * Algorithm (one launch, no workspace, no second kernel):
 *  - CTA b owns the 8 output columns n = 8b .. 8b+7 (rows of W); its `warps` warps (4, 8 or 16)
 *    split K between them in interleaved steps of 32: warp w takes k = 32 s .. 32 s + 31 for
 *    s = w, w + warps, ... Each step is two mma.sync.m16n8k16 (fp16 / bf16 in, fp32 accumulators)
 *    on an 8 (n) x 32 (k) tile of W and a 16 (m) x 32 (k) tile of A;
 *  - loads are 16 bytes per lane and feed the tensor-core fragments directly, with no shuffles
 *    and no shared memory: lane (g = lane / 4, t = lane % 4) loads W[n0 + g][k + 8t .. +8) (the
 *    warp reads 8 rows x 64 contiguous bytes) and A[g][k + 8t .. +8), A[g + 8][...] (M <= 8
 *    loads no second row: its fragment registers are zeros). A dot product does not care in which
 *    order its k are summed, so the k of each mma are a permutation of the 32 physical k that is
 *    the same for A and W: mma 1 takes halves 0-3 of each lane's 8, mma 2 halves 4-7 (fragment
 *    rows k = 2t, 2t+1 <- halves 0, 1 and k = 2t+8, 2t+9 <- halves 2, 3 of the same lane);
 *  - a warp loads its steps in batches of U (2 or 4) and loads batch i + 1 before it multiplies
 *    batch i, so up to 2 U steps (2 U x 16 bytes of W per thread) are in flight. The batch
 *    for the next iteration is what keeps them in flight: ptxas schedules each load of a plain
 *    unrolled loop next to its mma (seen in the SASS: one load in flight per warp). No load is
 *    predicated either (same reason): rows past N or M read row 0 and are never stored, the k
 *    past K of the last step read offset 0 and are zeroed before the mma;
 *  - W is read with ld.global.cs (streamed, evict-first: read once per call), A with
 *    ld.global.nc (A is M K 2 bytes, <= 16 x 14336 x 2 = 458 KB, read by every CTA: it stays in
 *    L1 / L2, and its reads do not count against HBM; no shared-memory copy of A, so any K);
 *  - the warps' 16 x 8 fp32 partial tiles are summed through 8 KB of shared memory, then warp 0
 *    adds the bias (act dtype, as cuBLASLt's epilogue reads it), applies the activation in fp32
 *    (rg_act_apply: GELU is always the exact erf form here, unlike cuBLASLt's tanh epilogue),
 *    rounds once to the act dtype and stores rows < M, columns < N (odd N: element stores).
 * Launch: ceil(N / 8) CTAs (72 for N = 576, 6283 for N = 50257) of 8 warps; 16 when there are
 * few CTAs and a long K, so that even N = 576 has its whole W in flight at once; 4 for a very
 * large N (gemv_pick).
 * Napkin math per call: bytes = 2 N K (W) + 2 M N (out) + 2 N (bias) (+ A from L2): GPT-2 small
 * (K = 768: N = 2304 qkv 3.5 MB, 768 o 1.2 MB, 3072 fc 4.7 MB; K = 3072, N = 768: 4.7 MB), at
 * ~3 TB/s of HBM3 ~0.4-1.6 us of streaming plus ~1 us of DRAM latency and launch; SmolLM2-135M
 * (K = 576: N = 960, 576, 3072 (gate+up); K = 1536, N = 576) 0.7-3.5 MB.
 * Measured (H200, fp16, bench/kernels/gemv_bench.py, 2026-11-26): those eight GEMMs take
 * 2.5-4.4 us at M = 1 (cuBLASLt 4.3-7.6, torch's F.linear 3.6-7.5) and 2.9-5.4 us at M = 16
 * (cuBLASLt 4.1-7.7): a floor of ~2.4 us of launch and latency plus the stream. GPT-2's LM
 * head (50257 x 768, 77 MB) takes 24.1 us = 3.2 TB/s, 77% of the 4.16 TB/s device copy rate
 * (cuBLASLt 30.0 us at M = 1, 57.5 at M = 16).
 * Taken when: dt F16 / BF16, 1 <= M <= 16, K % 8 == 0, A and W 16-byte aligned, RAGGED_GEMV
 * not "0" (core/tuning.c: read once; rg_cuda_gemv_set overrides it); else cuBLASLt. fp32 stays
 * on cuBLASLt (no fp32 tensor-core path that matches its sgemm precision). */
#include <stdlib.h>

#include "core/tuning.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv.cuh"

#define GEMV_MAX_WARPS 16

/* warps / unroll: 0 = the launcher's choice (rg_cuda_gemv_set). */
static int g_gemv_warps, g_gemv_unroll;

static bool gemv_on(void)
{
	return rg_tuning_bool(RG_TUNE_GEMV);
}

extern "C" void rg_cuda_gemv_set(bool on, int warps, int unroll)
{
	(void)rg_tuning_set("RAGGED_GEMV", on ? "1" : "0"); /* a valid value: cannot fail */
	g_gemv_warps = warps == 4 || warps == 8 || warps == 16 ? warps : 0;
	g_gemv_unroll = unroll == 2 || unroll == 4 ? unroll : 0;
}

extern "C" bool rg_cuda_gemv_ok(rg_dtype dt, const void *A, const void *W, int M, int N, int K)
{
	return (dt == RG_DTYPE_F16 || dt == RG_DTYPE_BF16) && M >= 1 && M <= RG_GEMV_MAX_M &&
	       N >= 1 && K >= 8 && K % 8 == 0 && ((uintptr_t)A | (uintptr_t)W) % 16 == 0 &&
	       gemv_on();
}

/* c += a (16 x 16, row) x b (16 x 8, col), fp32 accumulators (PTX ISA, mma.m16n8k16 fragments). */
template <typename T>
__device__ __forceinline__ void gemv_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
					 uint32_t a3, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void gemv_mma<__half>(float (&c)[4], uint32_t a0, uint32_t a1,
						 uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void gemv_mma<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1,
							uint32_t a2, uint32_t a3, uint32_t b0,
							uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Store out[row][col], out[row][col + 1] (those < N): one 4-byte store when pair (N even and out
 * 4-byte aligned), else element by element. */
template <typename T>
__device__ __forceinline__ void gemv_store(T *__restrict__ out, int row, int col, int N, bool pair,
					   float v0, float v1)
{
	T *o = out + (size_t)row * N + col;

	if (pair && col + 1 < N) {
		union { uint32_t u; T e[2]; } p;
		p.e[0] = rg_from_f<T>(v0);
		p.e[1] = rg_from_f<T>(v1);
		*(uint32_t *)o = p.u;
		return;
	}
	if (col < N)
		o[0] = rg_from_f<T>(v0);
	if (col + 1 < N)
		o[1] = rg_from_f<T>(v1);
}

/* U steps of one warp's share of K: this lane's 16-byte pieces of W and of A's rows g, g + 8;
 * with GLU also the pieces of the "up" halves (u0, u1) that multiply act(gate) (x0, x1). */
template <int U, bool GLU> struct gemv_batch {
	uint4 w[U], x0[U], x1[U];
	uint4 u0[GLU ? U : 1], u1[GLU ? U : 1];
};

/* The SwiGLU input of a down projection, 8 values at a time: act(g) * u per element, computed in
 * fp32 and rounded once to T, as act_mul_kernel (decoder_ops.cu) rounds what it stores, so the
 * fused GEMM multiplies exactly the values the unfused one reads. */
template <typename T>
__device__ __forceinline__ uint4 gemv_glu8(uint4 g, uint4 u, rg_act act)
{
	union { uint4 v; T e[8]; } gg, uu, o;

	gg.v = g;
	uu.v = u;
#pragma unroll
	for (int k = 0; k < 8; k++) {
		const float gv = rg_to_f(gg.e[k]);
		o.e[k] = rg_from_f<T>((act == RG_ACT_SILU ? gv / (1.f + __expf(-gv))
							  : rg_act_apply(gv, act)) *
				      rg_to_f(uu.e[k]));
	}
	return o.v;
}

/* Load the batch of steps s0, s0 + warps, ... (s0 + (U - 1) warps). Rows past N (of W) or M (of
 * A) read row 0 instead (the callers' pointers): a garbage row of W only reaches its own output
 * column and a garbage row of A its own output row, neither stored. k past K read offset 0 and
 * are zeroed by gemv_batch_mma. No load is predicated: ptxas schedules a predicated load next to
 * its use. */
template <bool M16, int U, bool GLU>
__device__ __forceinline__ void gemv_batch_load(gemv_batch<U, GLU> &b, const void *wp,
						const void *ap0, const void *ap1, int s0, int warps,
						int t, int K)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int k = (s0 + u * warps) * 32 + 8 * t; /* this lane's k .. k + 7 */
		const size_t off = (size_t)(k < K ? k : 0) * 2; /* bytes: 2-byte elements */
		b.w[u] = __ldcs((const uint4 *)((const char *)wp + off));
		b.x0[u] = __ldg((const uint4 *)((const char *)ap0 + off));
		b.x1[u] = M16 ? __ldg((const uint4 *)((const char *)ap1 + off))
			      : make_uint4(0u, 0u, 0u, 0u);
		if (GLU) { /* the up half: K elements further along the row */
			const size_t uo = off + (size_t)K * 2;
			b.u0[u] = __ldg((const uint4 *)((const char *)ap0 + uo));
			b.u1[u] = M16 ? __ldg((const uint4 *)((const char *)ap1 + uo))
				      : make_uint4(0u, 0u, 0u, 0u);
		}
	}
}

template <typename T, int U, bool GLU, bool M16>
__device__ __forceinline__ void gemv_batch_mma(float (&c)[4], gemv_batch<U, GLU> &b, int s0,
					       int warps, int t, int K, rg_act act)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		if ((s0 + u * warps) * 32 + 8 * t >= K)
			b.w[u] = b.x0[u] = b.x1[u] = make_uint4(0u, 0u, 0u, 0u);
		else if (GLU) {
			b.x0[u] = gemv_glu8<T>(b.x0[u], b.u0[u], act);
			if (M16)
				b.x1[u] = gemv_glu8<T>(b.x1[u], b.u1[u], act);
		}
		gemv_mma<T>(c, b.x0[u].x, b.x1[u].x, b.x0[u].y, b.x1[u].y, b.w[u].x, b.w[u].y);
		gemv_mma<T>(c, b.x0[u].z, b.x1[u].z, b.x0[u].w, b.x1[u].w, b.w[u].z, b.w[u].w);
	}
}

/* One CTA per 8 columns; blockDim.x = 32 x warps. M16: M > 8 (a second A row per lane). U steps
 * per batch, two batches in flight: batch i + 1 is loaded before batch i's mma, inside the loop,
 * so that ptxas cannot sink the loads to their uses (up to 2 U x 16 bytes of W per thread). */
/* GLU: A is (M, 2K), each row's gate half [0, K) and up half [K, 2K), and the GEMM multiplies
 * glu_act(gate) * up (rounded to T) by W; glu_act is the act argument and no activation is
 * applied to the output (rg_cuda_gemv_glu). */
template <typename T, bool M16, int U, bool GLU>
__global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)
gemv_kernel(const T *__restrict__ A, const T *__restrict__ W, const T *__restrict__ bias,
	    T *__restrict__ out, int M, int N, int K, rg_act act, bool pair)
{
	__shared__ float4 red[GEMV_MAX_WARPS][32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	const int g = lane >> 2, t = lane & 3;
	const int n0 = blockIdx.x * 8, steps = (K + 31) >> 5;
	const bool a0_ok = g < M, a1_ok = M16 && g + 8 < M;
	const T *wp = W + (size_t)(n0 + g < N ? n0 + g : 0) * K;
	const size_t lda = GLU ? 2 * (size_t)K : (size_t)K;
	const T *ap0 = A + (size_t)(a0_ok ? g : 0) * lda;
	const T *ap1 = A + (size_t)(a1_ok ? g + 8 : 0) * lda;
	const rg_act out_act = GLU ? RG_ACT_NONE : act;
	float c[4] = {0.f, 0.f, 0.f, 0.f};
	gemv_batch<U, GLU> cur, nxt;

	rg_pdl_wait(); /* A comes from the kernel just before (programmatic launch) */
	gemv_batch_load<M16, U, GLU>(cur, wp, ap0, ap1, warp, warps, t, K);
	for (int s0 = warp; s0 < steps; s0 += U * warps) {
		const int s1 = s0 + U * warps;
		if (s1 < steps)
			gemv_batch_load<M16, U, GLU>(nxt, wp, ap0, ap1, s1, warps, t, K);
		gemv_batch_mma<T, U, GLU, M16>(c, cur, s0, warps, t, K, act);
		cur = nxt;
	}
	if (warps > 1) {
		red[warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
		__syncthreads();
		if (warp != 0)
			return;
		for (int w = 1; w < warps; w++) {
			const float4 p = red[w][lane];
			c[0] += p.x;
			c[1] += p.y;
			c[2] += p.z;
			c[3] += p.w;
		}
	}
	/* c[0], c[1]: row g, columns n0 + 2t, n0 + 2t + 1; c[2], c[3]: row g + 8, same columns */
	const int col = n0 + 2 * t;
	float b0 = 0.f, b1 = 0.f;
	if (bias) {
		if (col < N)
			b0 = rg_to_f(bias[col]);
		if (col + 1 < N)
			b1 = rg_to_f(bias[col + 1]);
	}
	if (a0_ok)
		gemv_store(out, g, col, N, pair, rg_act_apply(c[0] + b0, out_act),
			   rg_act_apply(c[1] + b1, out_act));
	if (a1_ok)
		gemv_store(out, g + 8, col, N, pair, rg_act_apply(c[2] + b0, out_act),
			   rg_act_apply(c[3] + b1, out_act));
}

/* Warps per CTA and steps per batch, from a sweep of every (warps, unroll) on an H200 (fp16,
 * M = 1, 4, 16, the bench's decode shapes; bench/kernels/gemv_bench.c --sweep):
 *  - 8 warps and batches of 2 were the fastest or within 4% on the layer GEMMs (72-384 CTAs);
 *  - a long K on few CTAs (N < 16 x SMs, K >= 1024: GPT-2's proj, SmolLM2's down) wants 16 warps
 *    splitting K deeper (4.3 us against 5.7 for 768 x 3072);
 *  - many CTAs (>= 8 x SMs: the LM head's 6283) want 4 warps: 7 CTAs resident per SM instead of
 *    3 (24.0 us against 25.7 at M = 1, 29.3 against 39.0 at M = 16 for 50257 x 768);
 *  - batches of 4 hold ~117 registers (M > 8): 2 CTAs of 8 warps per SM instead of 3, so the
 *    288-384 CTAs of N = 2304-3072 took two waves (4.7-5.4 us against 3.7-4.0).
 * Never more warps than 32-wide K steps. */
static void gemv_pick(const rg_cuda_ctx *c, int N, int K, int *warps, int *unroll)
{
	const int nct = (N + 7) / 8, steps = (K + 31) / 32;
	int w = nct >= 8 * c->num_sms ? 4 : nct < 2 * c->num_sms && steps >= 32 ? 16 : 8;

	while (w > 4 && w > steps)
		w /= 2;
	*warps = g_gemv_warps ? g_gemv_warps : w;
	*unroll = g_gemv_unroll ? g_gemv_unroll : 2;
}

template <typename T, bool GLU>
static cudaError_t gemv_launch(const rg_cuda_ctx *c, const void *A, const void *W, const void *bias,
			       void *out, int M, int N, int K, rg_act act)
{
	int warps, unroll;
	const bool pair = N % 2 == 0 && (uintptr_t)out % 4 == 0;
	const dim3 grid((unsigned)((N + 7) / 8));

	gemv_pick(c, N, K, &warps, &unroll);
	if (GLU && unroll == 4 && M > 8)
		unroll = 2; /* the up halves double A's registers: batches of 4 would spill */
#define GEMV_LAUNCH(M16, U)                                                                    \
	rg_launch(c, gemv_kernel<T, M16, U, GLU>, grid, dim3(32 * warps), 0, (const T *)A,       \
		  (const T *)W, (const T *)bias, (T *)out, M, N, K, act, pair)
	if (M > 8)
		return unroll == 2 ? GEMV_LAUNCH(true, 2) : GEMV_LAUNCH(true, 4);
	return unroll == 2 ? GEMV_LAUNCH(false, 2) : GEMV_LAUNCH(false, 4);
#undef GEMV_LAUNCH
}

template <bool GLU>
static rg_status gemv_run(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W,
			  const void *bias, void *out, int M, int N, int K, rg_act act,
			  const char *what)
{
	const rg_cuda_ctx *c = (const rg_cuda_ctx *)ctx;
	cudaError_t e;

	if (dt == RG_DTYPE_F16)
		e = gemv_launch<__half, GLU>(c, A, W, bias, out, M, N, K, act);
	else
		e = gemv_launch<__nv_bfloat16, GLU>(c, A, W, bias, out, M, N, K, act);
	if (e != cudaSuccess)
		return rg_cuda_err(e, what);
	return rg_cuda_launch_check(what);
}

extern "C" rg_status rg_cuda_gemv(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W,
				  const void *bias, void *out, int M, int N, int K, rg_act act)
{
	return gemv_run<false>(ctx, dt, A, W, bias, out, M, N, K, act, "gemv_kernel");
}

extern "C" rg_status rg_cuda_gemv_glu(rg_cuda_ctx *ctx, rg_dtype dt, const void *x, const void *W,
				      void *out, int M, int N, int K, rg_act act)
{
	return gemv_run<true>(ctx, dt, x, W, NULL, out, M, N, K, act, "gemv_kernel (GLU input)");
}
