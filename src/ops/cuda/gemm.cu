/* GEMM through cuBLASLt: out (M, N) = A (M, K) x W^T, W (N, K), all row-major, fp32 accumulation.
 *
 * Layout: cuBLASLt is column-major. A row-major (R, C) matrix is the column-major (C, R) matrix,
 * its transpose. So the row-major product out = A W^T is, column-major, out^T (N, M) =
 * W (N, K) x A^T (K, M), where W is stored column-major as (K, N) with ld K (used transposed,
 * TRANSA = T) and A^T is stored column-major as (K, M) with ld K (TRANSB = N): the usual "TN" GEMM.
 *
 * Compute: CUBLAS_COMPUTE_32F with fp32 scale for every dtype (no TF32: fp32 results match a CPU
 * sgemm to ~1e-6 relative); F16/BF16 use half/bf16 A, B, C and accumulate in fp32.
 *
 * Plans (descriptors + heuristic algorithm) are cached per (M, N, K, dtype, pointer alignment) in
 * a 64-entry table with least-recently-used replacement; a hit does no allocation of any kind. */
#include <string.h>

#include "ops/cuda/common.cuh"

static void plan_destroy(rg_cuda_gemm_plan *p)
{
	if (!p->used)
		return;
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->a)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->b)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->c)
		cublasLtMatrixLayoutDestroy(p->c);
	memset(p, 0, sizeof(*p));
}

void rg_cuda_gemm_cache_free(rg_cuda_ctx *c)
{
	for (int i = 0; i < RG_CUDA_GEMM_CACHE; i++)
		plan_destroy(&c->plans[i]);
}

/* Largest power of two (<= 256) dividing every pointer: cuBLASLt assumes 256-byte alignment
 * unless told otherwise, and sub-views of the model's arena may be less aligned. */
static int ptr_alignment(const void *a, const void *b, const void *c)
{
	uintptr_t x = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | 256u;
	return (int)(x & (~x + 1));
}

static rg_status lt_fail(cublasStatus_t s, const char *what)
{
	return rg_errorf(RG_ERR_CUDA, "%s failed: cuBLAS status %d", what, (int)s);
}

/* Build descriptors for one problem and ask the heuristic for its best algorithm. */
static rg_status plan_create(rg_cuda_ctx *c, rg_cuda_gemm_plan *p, rg_dtype dt, int M, int N, int K,
			     int align)
{
	cudaDataType_t ty = dt == RG_DTYPE_F32 ? CUDA_R_32F : dt == RG_DTYPE_F16 ? CUDA_R_16F
										   : CUDA_R_16BF;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	size_t ws = RG_CUDA_WORKSPACE_BYTES;
	uint32_t al = (uint32_t)align;
	int found = 0;
	cublasStatus_t s;
	rg_status st = RG_OK;

	memset(p, 0, sizeof(*p));
	p->used = true;
	p->M = M;
	p->N = N;
	p->K = K;
	p->dt = dt;
	p->align = align;
	s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatmulDescCreate");
		goto out_destroy;
	}
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	s = cublasLtMatrixLayoutCreate(&p->a, ty, K, N, K);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatrixLayoutCreate(&p->b, ty, K, M, K);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatrixLayoutCreate(&p->c, ty, N, M, N);
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatrixLayoutCreate");
		goto out_destroy;
	}
	s = cublasLtMatmulPreferenceCreate(&pref);
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatmulPreferenceCreate");
		goto out_destroy;
	}
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
					     sizeof(ws));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al,
					     sizeof(al));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al,
					     sizeof(al));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al,
					     sizeof(al));
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al,
					     sizeof(al));
	s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
	cublasLtMatmulPreferenceDestroy(pref);
	if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
		st = rg_errorf(RG_ERR_CUDA, "cuBLASLt found no algorithm for GEMM M=%d N=%d K=%d "
			       "dtype=%d align=%d (status %d)", M, N, K, (int)dt, align, (int)s);
		goto out_destroy;
	}
	p->algo = res.algo;
	return RG_OK;

out_destroy:
	plan_destroy(p);
	return st;
}

/* Find or build the plan; the least recently used slot is recycled when the table is full. */
static rg_status plan_get(rg_cuda_ctx *c, rg_dtype dt, int M, int N, int K, int align,
			  rg_cuda_gemm_plan **out)
{
	rg_cuda_gemm_plan *victim = &c->plans[0];
	rg_status st;

	for (int i = 0; i < RG_CUDA_GEMM_CACHE; i++) {
		rg_cuda_gemm_plan *p = &c->plans[i];
		if (p->used && p->M == M && p->N == N && p->K == K && p->dt == dt &&
		    p->align == align) {
			p->last_use = ++c->gemm_clock;
			*out = p;
			return RG_OK;
		}
		if (!p->used || (victim->used && p->last_use < victim->last_use))
			victim = p;
	}
	plan_destroy(victim);
	st = plan_create(c, victim, dt, M, N, K, align);
	if (st != RG_OK)
		return st;
	victim->last_use = ++c->gemm_clock;
	*out = victim;
	return RG_OK;
}

extern "C" rg_status rg_cuda_gemm(void *ctx, rg_dtype dt, const void *A, const void *W, void *out,
				  int M, int N, int K)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	const float alpha = 1.f, beta = 0.f;
	rg_cuda_gemm_plan *p;
	cublasStatus_t s;
	rg_status st;

	if (M < 0 || N <= 0 || K <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm: bad shape M=%d N=%d K=%d", M, N, K);
	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm: unknown dtype %d", (int)dt);
	if (M == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	st = plan_get(c, dt, M, N, K, ptr_alignment(A, W, out), &p);
	if (st != RG_OK)
		return st;
	s = cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, A, p->b, &beta, out, p->c, out, p->c,
			   &p->algo, c->workspace_d, RG_CUDA_WORKSPACE_BYTES, c->stream);
	if (s != CUBLAS_STATUS_SUCCESS)
		return rg_errorf(RG_ERR_CUDA, "cublasLtMatmul M=%d N=%d K=%d failed: cuBLAS status %d",
				 M, N, K, (int)s);
	return rg_cuda_launch_check("cublasLtMatmul");
}
