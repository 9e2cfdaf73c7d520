/* GGUF-quantized GEMM weights on the GPU (issue 30, item 1; src/ops/cuda/qgemv.cu): the CUDA side
 * of rg_op_prepare_qweight (src/ops/ops.h). The blocks of a Q8_0, Q4_0, Q4_1, Q4_K or Q6_K weight
 * stay on the device as the file stores them (ggml's formats: src/ops/cpu/qweight.h lists the
 * first three, src/core/gguf.c's deq_q4_k / deq_q6_k the K-quants), and
 * rg_cuda_gemm / rg_cuda_gemm_bias_act (gemm.cu) on such a W run:
 *  - M <= RG_QGEMV_MAX_M (decode): qgemv_kernel, one pass over the blocks that dequantizes them
 *    in registers into the tensor-core fragments of gemv.cu's small-M kernel;
 *  - larger M (prefill): the weight dequantized into the context's scratch buffer (act dtype,
 *    sized at prepare time for the largest weight declared) and the usual cuBLASLt GEMM on it.
 * Internal to src/ops/cuda, plus the test hook rg_cuda_qgemv_set. Plain C (no CUDA types), so
 * that tests/gpu/test_ops_cuda.c can include it. */
#ifndef RG_OPS_CUDA_QGEMV_CUH
#define RG_OPS_CUDA_QGEMV_CUH
#include <stdbool.h>
#include <stddef.h>
#include "ops/cuda/ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows (M) the quantized small-M kernel covers: one m16n8k16 tile, as gemv.cuh's RG_GEMV_MAX_M. */
#define RG_QGEMV_MAX_M 16

/* Bytes of one block of ggml type `type` (32 values: RG_GGUF_Q8_0 34, Q4_0 18, Q4_1 20; 256
 * values: Q4_K 144, Q6_K 210), 0 for a type the CUDA GEMMs cannot read quantized. */
size_t rg_cuda_qtype_block_bytes(int type);

/* The backend's prepare_qweight (src/ops/backend.h): W NULL (ctx may be NULL) answers only
 * whether `type` is supported (RG_OK or RG_ERR_UNSUPPORTED). Else registers W (device memory: N
 * rows of K / 32 blocks of `type`, K / 256 for the K-quants, rows back to back; the address
 * rg_cuda_alloc returned, which rg_cuda_dealloc forgets) in ctx's table of quantized weights, and
 * grows ctx's dequantization scratch to N x K elements of the context dtype when it is smaller
 * (cudaMalloc: call at load time, never while capturing a graph). W stays owned by the caller.
 * Errors: RG_ERR_UNSUPPORTED (type), RG_ERR_INVALID_INPUT (N, K <= 0, K % 32 or, K-quants,
 * K % 256, W already registered, called while capturing), RG_ERR_OOM. Not thread-safe against
 * other calls on ctx (no CUDA backend op is). */
rg_status rg_cuda_prepare_qweight(rg_cuda_ctx *ctx, void *W, int type, int N, int K);

/* Forget W (unknown or NULL: no-op). */
void rg_cuda_qweight_release(rg_cuda_ctx *ctx, const void *W);

/* Free ctx's table and scratch (rg_cuda_backend_free). */
void rg_cuda_qweight_free_all(rg_cuda_ctx *ctx);

/* gemm.cu's hook, called by every rg_cuda_gemm / gemm_bias_act with the device current. When
 * *W is not a registered quantized weight: *done = false and nothing else. When it is: either
 * the whole product ran on the small-M kernel (*done = true: out (M, N) = act(A x dequant(W)^T +
 * bias), bias (N) act dtype or NULL, GELU in the erf form), or the weight was dequantized into
 * the scratch (one kernel on ctx's stream), *W now points at it ((N, K) dt, row-major) and
 * *done = false: the caller runs its usual GEMM on it. Capture-safe (launches only). Errors:
 * RG_ERR_INVALID_INPUT (N or K not the registered shape), RG_ERR_INTERNAL (scratch too small for
 * dt: the backend's dtype is not dt), RG_ERR_CUDA (launch). */
rg_status rg_cuda_qgemm(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void **W,
			const void *bias, void *out, int M, int N, int K, rg_act act, bool *done);

/* rg_op_act_mul_gemm's quantized half (gemm.cu): when W is a registered quantized weight of
 * shape (N, K) and qmv_kernel takes the call (rg_cuda_qmv_applies), out (M, N) = (act(x[:, :K]) *
 * x[:, K:]) x dequant(W)^T on qmv_kernel, the gate folded into its quantization of A (x (M, 2K)
 * dt, values rounded to dt before the 8-bit rounding, as the unfused pair computes them), and
 * *done = true; else *done = false and nothing launched. *quantized: whether W is a registered
 * quantized weight at all (if so and not done, the caller must not treat W as dense). Errors:
 * RG_ERR_CUDA (launch). */
rg_status rg_cuda_qgemm_glu(rg_cuda_ctx *ctx, rg_dtype dt, const void *x, const void *W,
			    void *out, int M, int N, int K, rg_act act, bool *quantized,
			    bool *done);

/* Test hook, process-wide: on = false sends every quantized GEMM through the dequantize +
 * cuBLASLt path, whatever M. Set it between calls. */
void rg_cuda_qgemv_set(bool on);

/* Test hook, process-wide: on = false sends quantized GEMMs of M <= 4 to the tensor-core kernel
 * (as RAGGED_QMV=0) instead of qmv_kernel, whose activations are rounded to 8 bits per 32 values
 * (d = amax / 127, q = rint(a x 127 / amax), fp32). Set it between calls. */
void rg_cuda_qmv_set(bool on);

/* Benchmark hook, process-wide: qmv_kernel's rows per CTA aim at ctas_per_sm CTAs per SM
 * (default 4; <= 0 restores it). Set it between calls, outside a capture. */
void rg_cuda_qmv_tune(int ctas_per_sm);

/* Whether a quantized GEMM of this shape runs on qmv_kernel (its A rounded to 8 bits, above):
 * fp16 / bf16, 1 <= M <= 4 for K <= 4096 (M <= 2 up to K = 8192, else M = 1: where it beat the
 * tensor-core kernel), A 8-byte and W 16-byte aligned, the hooks and RAGGED_QMV on, and its
 * shared memory within the limit. ctx may be NULL (an H200's 132 SMs are assumed). For tests
 * choosing their reference. */
bool rg_cuda_qmv_applies(const rg_cuda_ctx *ctx, rg_dtype dt, int type, const void *A,
			 const void *W, int M, int N, int K);

#ifdef __cplusplus
}
#endif
#endif
