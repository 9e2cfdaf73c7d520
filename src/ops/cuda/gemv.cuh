/* Small-M GEMM on tensor cores for decode steps (src/ops/cuda/gemv.cu), taken by rg_cuda_gemm and
 * rg_cuda_gemm_bias_act (gemm.cu) instead of cuBLASLt when rg_cuda_gemv_ok says so. Internal to
 * src/ops/cuda, plus the test and bench hook rg_cuda_gemv_set. Plain C (no CUDA types), so that
 * tests/gpu/test_ops_cuda.c and bench/kernels/gemv_bench.c can include it. */
#ifndef RG_OPS_CUDA_GEMV_CUH
#define RG_OPS_CUDA_GEMV_CUH
#include <stdbool.h>
#include "ops/cuda/ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows (M) one launch covers: one m16n8k16 tile of the tensor cores. Above it cuBLASLt's tiles
 * stop wasting most of their rows, and the weight stream is no longer the whole cost. */
#define RG_GEMV_MAX_M 16

/* True when rg_cuda_gemv can run the problem and the path is on: dt F16 or BF16, 1 <= M <=
 * RG_GEMV_MAX_M, K % 8 == 0, A and W 16-byte aligned (out and bias: element-aligned). */
bool rg_cuda_gemv_ok(rg_dtype dt, const void *A, const void *W, int M, int N, int K);

/* out (M, N) act = act_fn(A (M, K) act x W^T + bias), W (N, K) act, bias (N) act or NULL: the
 * contract of rg_op_gemm_bias_act (src/ops/ops.h) for problems rg_cuda_gemv_ok accepts, with
 * exact GELU always in the erf form. The caller has made the device current. Launches on
 * c->stream (graph-capturable: no allocation, no sync); RG_ERR_CUDA on launch failure. */
rg_status rg_cuda_gemv(rg_cuda_ctx *c, rg_dtype dt, const void *A, const void *W, const void *bias,
		       void *out, int M, int N, int K, rg_act act);

/* out (M, N) act = (glu_act(x[:, :K]) * x[:, K:]) x W^T: the down projection of a gated MLP
 * (SwiGLU: glu_act SILU) with its act_mul folded into the GEMM's loads of A. x (M, 2K) act, row
 * stride 2K; W (N, K) act; no bias, no output activation. The input values are rounded to act
 * before the products, exactly as rg_op_act_mul stores them, so the result equals rg_op_act_mul
 * then rg_cuda_gemv bit for bit; one kernel instead of two, and no (M, K) intermediate. For
 * problems rg_cuda_gemv_ok(dt, x, W, M, N, K) accepts (K % 8 == 0 also keeps the up half
 * 16-byte aligned). The caller has made the device current; RG_ERR_CUDA on launch failure. */
rg_status rg_cuda_gemv_glu(rg_cuda_ctx *c, rg_dtype dt, const void *x, const void *W, void *out,
			   int M, int N, int K, rg_act act);

/* Test and bench hook, process-wide: on = false sends every GEMM to cuBLASLt (as RAGGED_GEMV=0,
 * read at the first GEMM, does); warps (4, 8 or 16 per CTA) and unroll (2 or 4 steps of 32 k per
 * batch, two batches in flight) override the launcher's choice, 0 = its own. Not thread-safe against
 * concurrent GEMMs; set it between calls. */
void rg_cuda_gemv_set(bool on, int warps, int unroll);

#ifdef __cplusplus
}
#endif
#endif
