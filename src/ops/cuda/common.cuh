/* Shared internals of the CUDA backend: the backend context, error plumbing, dtype helpers and
 * block reductions. Included only by the .cu files of src/ops/cuda (never by C code).
 *
 * Error policy (STYLE.md rule 5): nothing here exits or aborts. Every CUDA/cuBLASLt failure becomes
 * RG_ERR_CUDA (RG_ERR_OOM for allocations) with the failing call and cudaGetErrorString in
 * rg_last_error(); every kernel launch is followed by cudaGetLastError (rg_cuda_launch_check). */
#ifndef RG_OPS_CUDA_COMMON_CUH
#define RG_OPS_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/error.h"
#include "ops/cuda/ops_cuda.h"
}

/* One GEMM problem in gemm.cu's row-major view: for b < batch,
 *   out_b (M, N) = alpha * A_b (M, K) x W_b^T,  W_b (N, K),
 * rows of A, W and out lda, ldw, ldo elements apart, matrix b at A + b * stride_a, W + b *
 * stride_w, out + b * stride_o elements. The plain GEMM (rg_cuda_gemm) is batch 1, lda = ldw = K,
 * ldo = N, strides 0. */
struct rg_cuda_gemm_shape {
	int M, N, K, batch;
	int lda, ldw, ldo;
	long long stride_a, stride_w, stride_o;
};

/* One cached cuBLASLt plan: descriptors + the heuristic's algorithm for one problem. */
struct rg_cuda_gemm_plan {
	bool used;
	rg_cuda_gemm_shape sh;
	rg_dtype dt;
	int align;                        /* min pointer alignment (bytes) the plan was chosen for */
	int epi;                          /* cublasLtEpilogue_t of the plan */
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;   /* a: W as (K,N) col-major, b: A as (K,M), c: out as (N,M) */
	cublasLtMatmulAlgo_t algo;
	unsigned long long last_use;
};

/* Plans cached per backend: RG_CUDA_GEMM_SETS sets of RG_CUDA_GEMM_WAYS, a problem's set chosen
 * by a hash of its key, least recently used first out within a set. A server's encoder batches
 * run in ~130 token buckets of 4-5 GEMM shapes each (~650 plans); the 64 plans kept before held 16
 * buckets, so a batch of any other bucket autotuned its GEMMs again (16 algorithms x 5 timed
 * runs each, ~10-30 ms for BERT-base on an H200) in the middle of serving. 4096 leave room for
 * --max-batch-tokens 65536 (~170 token buckets) without a set overflowing. A plan is ~150 bytes
 * here plus cuBLASLt's descriptors on the host; nothing on the device. */
#define RG_CUDA_GEMM_SETS 256
#define RG_CUDA_GEMM_WAYS 16
#define RG_CUDA_GEMM_CACHE (RG_CUDA_GEMM_SETS * RG_CUDA_GEMM_WAYS)
#define RG_CUDA_WORKSPACE_BYTES (32u << 20)

/* Error-flag bits set by kernels that detect inconsistent inputs (read and cleared by sync). */
enum {
	RG_CUDA_FLAG_BAD_INDEX = 1,   /* gather/embed saw a negative row index */
	RG_CUDA_FLAG_BAD_SEQLEN = 2,  /* attention/pool saw a sequence longer than max_seqlen or
				       * cu_seqlens not monotone on the device */
};

/* One GGUF-quantized GEMM weight the context knows (qgemv.cuh): device memory W, N rows of K / 32
 * blocks (K / 256 for the K-quants) of ggml type `type`. */
typedef struct rg_cuda_qweight {
	const void *W;
	int type, N, K;
} rg_cuda_qweight;

/* The backend context behind the opaque rg_cuda_ctx (= struct rg_backend_ctx) of ops_cuda.h. */
struct rg_backend_ctx {
	int device;
	rg_dtype dt;
	cudaStream_t stream;               /* every op runs on this one stream */
	cublasLtHandle_t lt;
	void *workspace_d;                 /* RG_CUDA_WORKSPACE_BYTES, for cuBLASLt */
	int *flag_d;                       /* (1) int32, RG_CUDA_FLAG_* bits */
	int max_smem_optin;                /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
	int num_sms;                       /* multiprocessors */
	bool pdl;                          /* programmatic dependent launch (sm_90+, RAGGED_PDL=1) */
	unsigned long long attn_smem_set;  /* bitmask of attention.cu's CUDA-core instantiations
					    * with raised smem */
	unsigned long long attn_tc_smem_set; /* the same for attention_tc.cu's tensor-core ones */
	bool wgmma;                        /* sm_90a cubin runs here (attention_wgmma.cu's probe) */
	unsigned wgmma_smem_set;           /* the same bitmask for attention_wgmma.cu's kernels */
	rg_cuda_gemm_plan plans[RG_CUDA_GEMM_CACHE]; /* set i: plans[i * WAYS, (i + 1) * WAYS) */
	unsigned long long gemm_clock;
	unsigned long long gemm_plans_built; /* plans created (each one autotuned when allowed) */
	bool autotune;                     /* time the heuristic's top algorithms per new plan */
	bool exact_gelu;                   /* never use the tanh GELU epilogue for exact GELU */
	bool capturing;                    /* between capture_begin and capture_end */
	int *flag_h;                       /* (1) pinned copy of flag_d, read by sync */
	rg_cuda_qweight *qw;               /* (qw_n of qw_cap) quantized weights, sorted by W */
	int qw_n, qw_cap;
	void *qscratch_d;                  /* (qscratch_bytes) a dequantized weight for large-M GEMMs */
	size_t qscratch_bytes;
};

/* Strided batched GEMM through cuBLASLt (gemm.cu; its plan cache, autotuning and workspace, so
 * it may be captured into a graph): the problem of shape s (rg_cuda_gemm_shape above), fp32
 * accumulation, no epilogue, result rounded to dt. Used by DeBERTa's relative tables
 * (rg_cuda_rel_tables, one batch entry per head on the packed QKV rows). M == 0 or batch == 0 is
 * a no-op. RG_ERR_INVALID_INPUT for a leading dimension below its row length, RG_ERR_CUDA when
 * cuBLASLt has no algorithm or the call fails. Launches on c->stream. */
rg_status rg_cuda_gemm_strided(rg_cuda_ctx *c, rg_dtype dt, const void *A, const void *W,
			       void *out, const rg_cuda_gemm_shape *s, float alpha);

/* Turn a cudaError_t into RG_ERR_CUDA (clearing the non-sticky last error). */
static inline rg_status rg_cuda_err(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return RG_OK;
	(void)cudaGetLastError();
	return rg_errorf(RG_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Call after every kernel launch: reports configuration / launch errors as RG_ERR_CUDA. */
static inline rg_status rg_cuda_launch_check(const char *kernel)
{
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess)
		return RG_OK;
	return rg_errorf(RG_ERR_CUDA, "launch of %s failed: %s", kernel, cudaGetErrorString(e));
}

/* Make ctx's device current (cheap when it already is; needed when several devices share a thread). */
static inline rg_status rg_cuda_enter(rg_cuda_ctx *c)
{
	return rg_cuda_err(cudaSetDevice(c->device), "cudaSetDevice");
}

/* ---- dtype helpers: load as float, store from float (round to nearest even) ---- */
__device__ __forceinline__ float rg_to_f(float x) { return x; }
__device__ __forceinline__ float rg_to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float rg_to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T rg_from_f(float x);
template <> __device__ __forceinline__ float rg_from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half rg_from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 rg_from_f<__nv_bfloat16>(float x)
{
	return __float2bfloat16_rn(x);
}

/* ---- vector access: VEC consecutive elements as one 16/8/4-byte load or store ---- */
template <int BYTES> struct rg_raw;
template <> struct rg_raw<16> { typedef uint4 type; };
template <> struct rg_raw<8> { typedef uint2 type; };
template <> struct rg_raw<4> { typedef uint32_t type; };
template <> struct rg_raw<2> { typedef uint16_t type; };

/* f[0..VEC) = p[0..VEC) as float; p aligned to sizeof(T) * VEC. */
template <typename T, int VEC>
__device__ __forceinline__ void rg_load_vec(const T *p, float (&f)[VEC])
{
	typedef typename rg_raw<sizeof(T) * VEC>::type R;
	union { R r; T e[VEC]; } u;
	u.r = *(const R *)p;
#pragma unroll
	for (int i = 0; i < VEC; i++)
		f[i] = rg_to_f(u.e[i]);
}

template <typename T, int VEC>
__device__ __forceinline__ void rg_store_vec(T *p, const float (&f)[VEC])
{
	typedef typename rg_raw<sizeof(T) * VEC>::type R;
	union { R r; T e[VEC]; } u;
#pragma unroll
	for (int i = 0; i < VEC; i++)
		u.e[i] = rg_from_f<T>(f[i]);
	*(R *)p = u.r;
}

/* f32 vectors (biases, gamma, beta): VEC floats, VEC a multiple of 4 -> 16-byte loads. */
template <int VEC>
__device__ __forceinline__ void rg_load_f32(const float *p, float (&f)[VEC])
{
	if constexpr (VEC % 4 == 0) {
#pragma unroll
		for (int i = 0; i < VEC; i += 4) {
			float4 v = *(const float4 *)(p + i);
			f[i] = v.x;
			f[i + 1] = v.y;
			f[i + 2] = v.z;
			f[i + 3] = v.w;
		}
	} else {
#pragma unroll
		for (int i = 0; i < VEC; i++)
			f[i] = p[i];
	}
}

/* ---- programmatic dependent launch (Hopper) ----
 * ragged's hot kernels (LayerNorms, attention, pooling) always follow another kernel (a GEMM) in
 * the stream. Launched with cudaLaunchAttributeProgrammaticStreamSerialization (rg_launch), such
 * a kernel may be scheduled while its predecessor is still finishing, and waits with
 * griddepcontrol.wait -- before its first read of anything the predecessor wrote -- for the
 * predecessor's completion and memory flush. This hides the launch gap between dependent kernels,
 * which dominates small batches in a CUDA graph. Before sm_90 the wait compiles to nothing and
 * rg_launch launches normally. On by default (RAGGED_PDL=0: off). For the encoder it changed no
 * cell by more than the noise on an H200 (bench/results/peer_graphed_h200_20261122-1725-pdl[01].md:
 * the gaps that remain follow the cuBLASLt GEMMs, whose launches ragged does not control); decode
 * steps, whose GEMMs are ragged's small-M kernel (gemv.cu), ran 5-9% faster (2026-11-26). */
__device__ __forceinline__ void rg_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Launch kernel k on c->stream, with the programmatic-serialization attribute when c->pdl. */
template <typename... KArgs, typename... Args>
static inline cudaError_t rg_launch(const rg_cuda_ctx *c, void (*k)(KArgs...), dim3 grid,
				    dim3 block, size_t smem, Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];

	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = c->stream;
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = c->pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

/* ---- reductions ---- */
__device__ __forceinline__ float rg_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float rg_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
 * scratch: __shared__ float[32]. Contains __syncthreads: call from all threads. */
__device__ __forceinline__ float rg_block_sum(float v, float *scratch)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	v = rg_warp_sum(v);
	__syncthreads(); /* scratch may still be read by a previous call */
	if (lane == 0)
		scratch[warp] = v;
	__syncthreads();
	v = lane < nwarps ? scratch[lane] : 0.f;
	return rg_warp_sum(v);
}

/* Dispatch a templated launcher over the compute dtype: F(float), F(__half), F(__nv_bfloat16). */
#define RG_CUDA_DISPATCH_DT(dt, LAUNCH)                                                          \
	((dt) == RG_DTYPE_F32   ? LAUNCH(float)                                                  \
	 : (dt) == RG_DTYPE_F16 ? LAUNCH(__half)                                                 \
				: LAUNCH(__nv_bfloat16))

static inline bool rg_cuda_dt_valid(rg_dtype dt)
{
	return dt == RG_DTYPE_F32 || dt == RG_DTYPE_F16 || dt == RG_DTYPE_BF16;
}

#endif
