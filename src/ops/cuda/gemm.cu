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
 * Epilogues (ByteTransformer sec. III-C/D): bias (BIAS), bias + GELU (GELU_BIAS, cuBLASLt's tanh
 * form), bias + ReLU (RELU_BIAS) are applied by the GEMM kernel itself as it writes D, so the
 * output is written once and no separate bias / activation pass reads it again. In the column-major
 * view D is (N, M): the bias vector (N) is along D's rows, as cuBLASLt broadcasts it. cuBLASLt wants
 * the bias in D's dtype (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), so callers pass act-dtype biases.
 *
 * Plans (descriptors + algorithm) are cached per (shape, dtype, pointer alignment, epilogue) in a
 * set-associative table of RG_CUDA_GEMM_CACHE plans (common.cuh) with least-recently-used
 * replacement within a set; a hit does no allocation of any kind. The shape
 * (rg_cuda_gemm_shape, common.cuh) also carries leading dimensions and a strided batch, for
 * rg_cuda_gemm_strided: the same "TN" product per batch entry, through
 * CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET (DeBERTa's relative tables).
 * A new plan asks the heuristic for its 16 best algorithms and, outside graph capture, times each on
 * the call's own operands (2 runs, best of 3 timed) and keeps the fastest: the heuristic's first
 * choice is often not the fastest for the skinny M of small batches. Above 64 rows only multiples
 * of 64 are timed; other M reuse the timed choice of the next multiple (tune_m), so that a new
 * token count costs a heuristic query, not a stall. RAGGED_GEMM_AUTOTUNE=0 keeps the
 * heuristic's first choice.
 *
 * Decode steps (M <= RG_GEMV_MAX_M = 16 rows, fp16 / bf16, K % 8 == 0, A and W 16-byte aligned)
 * skip cuBLASLt for ragged's own weight-streaming kernel (gemv.cu, issue 19), which applies the
 * same epilogues itself (act-dtype bias; exact GELU always in the erf form); RAGGED_GEMV=0 keeps
 * every GEMM on cuBLASLt.
 *
 * A W declared GGUF-quantized (rg_op_prepare_qweight; qgemv.cuh) goes to qgemv.cu first: its
 * small-M kernel for M <= 16, else W is dequantized into the context's scratch and the product
 * continues here on that copy. */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv.cuh"
#include "ops/cuda/qgemv.cuh"

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

static bool shape_eq(const rg_cuda_gemm_shape *a, const rg_cuda_gemm_shape *b)
{
	return a->M == b->M && a->N == b->N && a->K == b->K && a->batch == b->batch &&
	       a->lda == b->lda && a->ldw == b->ldw && a->ldo == b->ldo &&
	       a->stride_a == b->stride_a && a->stride_w == b->stride_w && a->stride_o == b->stride_o;
}

/* The batch attributes of one layout (batch > 1 only). */
static cublasStatus_t layout_batch(cublasLtMatrixLayout_t l, int batch, long long stride)
{
	int32_t n = batch;
	int64_t st = stride;
	cublasStatus_t s;

	s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof(n));
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
						     &st, sizeof(st));
	return s;
}

/* Build descriptors for one problem. */
static rg_status plan_create(rg_cuda_ctx *c, rg_cuda_gemm_plan *p, rg_dtype dt,
			     const rg_cuda_gemm_shape *sh, int align, int epi)
{
	const int M = sh->M, N = sh->N, K = sh->K;
	cudaDataType_t ty = dt == RG_DTYPE_F32 ? CUDA_R_32F : dt == RG_DTYPE_F16 ? CUDA_R_16F
										   : CUDA_R_16BF;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	cublasLtEpilogue_t e = (cublasLtEpilogue_t)epi;
	cublasStatus_t s;
	rg_status st = RG_OK;

	memset(p, 0, sizeof(*p));
	p->used = true;
	p->sh = *sh;
	p->dt = dt;
	p->align = align;
	p->epi = epi;
	s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatmulDescCreate");
		goto out_destroy;
	}
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
		goto out_destroy;
	}
	s = cublasLtMatrixLayoutCreate(&p->a, ty, K, N, sh->ldw);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatrixLayoutCreate(&p->b, ty, K, M, sh->lda);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = cublasLtMatrixLayoutCreate(&p->c, ty, N, M, sh->ldo);
	if (s == CUBLAS_STATUS_SUCCESS && sh->batch > 1) {
		s = layout_batch(p->a, sh->batch, sh->stride_w);
		if (s == CUBLAS_STATUS_SUCCESS)
			s = layout_batch(p->b, sh->batch, sh->stride_a);
		if (s == CUBLAS_STATUS_SUCCESS)
			s = layout_batch(p->c, sh->batch, sh->stride_o);
	}
	if (s != CUBLAS_STATUS_SUCCESS) {
		st = lt_fail(s, "cublasLtMatrixLayoutCreate");
		goto out_destroy;
	}
	return RG_OK;

out_destroy:
	plan_destroy(p);
	return st;
}

static cublasStatus_t plan_run(rg_cuda_ctx *c, rg_cuda_gemm_plan *p, const cublasLtMatmulAlgo_t *algo,
			       const void *A, const void *W, const void *bias, void *out, float alpha)
{
	const float beta = 0.f;

	if (bias)
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
					       sizeof(bias));
	return cublasLtMatmul(c->lt, p->op, &alpha, W, p->a, A, p->b, &beta, out, p->c, out, p->c,
			      algo, c->workspace_d, RG_CUDA_WORKSPACE_BYTES, c->stream);
}

static rg_cuda_gemm_plan *plan_find(rg_cuda_ctx *c, rg_dtype dt, const rg_cuda_gemm_shape *sh,
				     int align, int epi);

/* The M whose timed choice a plan of M rows takes: M itself up to 64 rows (the skinny shapes of
 * small batches, where the heuristic's first choice is most often not the fastest; few distinct
 * values), else M rounded up to a multiple of 64. A variable-length server sees hundreds of
 * distinct token counts per step; timing 16 algorithms x 5 runs for each one cost a 30-150 ms
 * stall the first time each count came (measured on an H200, GPT-2 shapes: bench/results/
 * entry_points_h200_20261202-0030-trace.json). */
static int tune_m(int M)
{
	return M <= 64 ? M : (M + 63) / 64 * 64;
}

/* Ask the heuristic for up to 16 algorithms; outside capture, time them on the call's operands and
 * keep the fastest (a failing candidate is skipped). A plan whose M is not its own tune_m takes
 * the timed choice of the plan of tune_m(M) rows when that one exists and cuBLASLt accepts its
 * algorithm for this shape (cublasLtMatmulAlgoCheck), else the heuristic's first choice, untimed. */
static rg_status plan_choose(rg_cuda_ctx *c, rg_cuda_gemm_plan *p, const void *A, const void *W,
			     const void *bias, void *out, float alpha)
{
	enum { NALGO = 16, REPS = 3 };
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res[NALGO];
	size_t ws = RG_CUDA_WORKSPACE_BYTES;
	uint32_t al = (uint32_t)p->align;
	cudaEvent_t ev[2] = {NULL, NULL};
	float best = 0.f;
	bool have = false;
	int found = 0, pick = 0;
	cublasStatus_t s;

	s = cublasLtMatmulPreferenceCreate(&pref);
	if (s != CUBLAS_STATUS_SUCCESS)
		return lt_fail(s, "cublasLtMatmulPreferenceCreate");
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
	if (bias)
		cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
					       sizeof(bias));
	s = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->a, p->b, p->c, p->c, pref, NALGO, res,
					   &found);
	cublasLtMatmulPreferenceDestroy(pref);
	if (s != CUBLAS_STATUS_SUCCESS || found == 0)
		return rg_errorf(RG_ERR_CUDA, "cuBLASLt found no algorithm for GEMM M=%d N=%d K=%d "
				 "batch=%d dtype=%d align=%d epilogue=%d (status %d)", p->sh.M,
				 p->sh.N, p->sh.K, p->sh.batch, (int)p->dt, p->align, p->epi,
				 (int)s);
	p->algo = res[0].algo;
	if (found == 1 || c->capturing || !c->autotune)
		return RG_OK;
	if (p->sh.batch <= 1 && tune_m(p->sh.M) != p->sh.M) {
		rg_cuda_gemm_shape rs = p->sh;
		rg_cuda_gemm_plan *r;
		cublasLtMatmulHeuristicResult_t chk;

		rs.M = tune_m(p->sh.M);
		r = plan_find(c, p->dt, &rs, p->align, p->epi);
		if (r && cublasLtMatmulAlgoCheck(c->lt, p->op, p->a, p->b, p->c, p->c, &r->algo,
						 &chk) == CUBLAS_STATUS_SUCCESS &&
		    chk.workspaceSize <= RG_CUDA_WORKSPACE_BYTES)
			p->algo = r->algo;
		return RG_OK;
	}
	if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) {
		(void)cudaGetLastError();
		goto out_destroy_events; /* keep the heuristic's choice */
	}
	for (int i = 0; i < found; i++) {
		float ms = 0.f, t;
		bool ok = true;

		for (int r = 0; r < 2 + REPS && ok; r++) {
			if (r >= 2)
				cudaEventRecord(ev[0], c->stream);
			ok = plan_run(c, p, &res[i].algo, A, W, bias, out, alpha) ==
			     CUBLAS_STATUS_SUCCESS;
			if (r >= 2 && ok) {
				cudaEventRecord(ev[1], c->stream);
				ok = cudaEventSynchronize(ev[1]) == cudaSuccess &&
				     cudaEventElapsedTime(&t, ev[0], ev[1]) == cudaSuccess;
				if (ok && (r == 2 || t < ms))
					ms = t;
			}
		}
		if (!ok) {
			(void)cudaGetLastError();
			continue;
		}
		if (!have || ms < best) {
			have = true;
			best = ms;
			pick = i;
		}
	}
	p->algo = res[pick].algo;
out_destroy_events:
	if (ev[0])
		cudaEventDestroy(ev[0]);
	if (ev[1])
		cudaEventDestroy(ev[1]);
	return RG_OK;
}

/* The set of a problem's key (common.cuh: RG_CUDA_GEMM_SETS x RG_CUDA_GEMM_WAYS). */
static int plan_set(rg_dtype dt, const rg_cuda_gemm_shape *sh, int align, int epi)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a over the key's fields */
	const uint64_t f[13] = {(uint64_t)(uint32_t)sh->M,     (uint64_t)(uint32_t)sh->N,
				(uint64_t)(uint32_t)sh->K,     (uint64_t)(uint32_t)sh->batch,
				(uint64_t)(uint32_t)sh->lda,   (uint64_t)(uint32_t)sh->ldw,
				(uint64_t)(uint32_t)sh->ldo,   (uint64_t)sh->stride_a,
				(uint64_t)sh->stride_w,        (uint64_t)sh->stride_o,
				(uint64_t)dt,                  (uint64_t)(uint32_t)align,
				(uint64_t)(uint32_t)epi};

	for (int i = 0; i < 13; i++) {
		h ^= f[i];
		h *= 1099511628211ull;
	}
	h ^= h >> 29;
	return (int)(h % RG_CUDA_GEMM_SETS);
}

/* The cached plan of a problem, or NULL (no use recorded). */
static rg_cuda_gemm_plan *plan_find(rg_cuda_ctx *c, rg_dtype dt, const rg_cuda_gemm_shape *sh,
				     int align, int epi)
{
	rg_cuda_gemm_plan *set = c->plans + (size_t)plan_set(dt, sh, align, epi) *
					    RG_CUDA_GEMM_WAYS;

	for (int i = 0; i < RG_CUDA_GEMM_WAYS; i++)
		if (set[i].used && shape_eq(&set[i].sh, sh) && set[i].dt == dt &&
		    set[i].align == align && set[i].epi == epi)
			return &set[i];
	return NULL;
}

/* Find or build the plan in its set; the set's least recently used slot is recycled when the
 * set is full. */
static rg_status plan_get(rg_cuda_ctx *c, rg_dtype dt, const rg_cuda_gemm_shape *sh, int align,
			  int epi, const void *A, const void *W, const void *bias, void *out,
			  float alpha, rg_cuda_gemm_plan **res)
{
	rg_cuda_gemm_plan *set = c->plans + (size_t)plan_set(dt, sh, align, epi) *
					    RG_CUDA_GEMM_WAYS;
	rg_cuda_gemm_plan *victim = &set[0];
	rg_status st;

	for (int i = 0; i < RG_CUDA_GEMM_WAYS; i++) {
		rg_cuda_gemm_plan *p = &set[i];
		if (p->used && shape_eq(&p->sh, sh) && p->dt == dt && p->align == align &&
		    p->epi == epi) {
			p->last_use = ++c->gemm_clock;
			*res = p;
			return RG_OK;
		}
		if (!p->used || (victim->used && p->last_use < victim->last_use))
			victim = p;
	}
	plan_destroy(victim);
	st = plan_create(c, victim, dt, sh, align, epi);
	if (st == RG_OK)
		st = plan_choose(c, victim, A, W, bias, out, alpha);
	if (st != RG_OK) {
		plan_destroy(victim);
		return st;
	}
	victim->last_use = ++c->gemm_clock;
	c->gemm_plans_built++;
	*res = victim;
	return RG_OK;
}

/* The epilogue for (bias, act) on dtype dt, and whether an exact-GELU pass must follow. */
static int choose_epilogue(const rg_cuda_ctx *c, rg_dtype dt, bool has_bias, rg_act act,
			   bool *gelu_pass)
{
	*gelu_pass = false;
	switch (act) {
	case RG_ACT_NONE:
		return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	case RG_ACT_RELU:
		return has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
	case RG_ACT_GELU_NEW:
		return has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
	case RG_ACT_GELU:
		if (dt != RG_DTYPE_F32 && !c->exact_gelu)
			return has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
		*gelu_pass = true;
		return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	case RG_ACT_SILU: /* no cuBLASLt epilogue: the bias there, then one pass */
		*gelu_pass = true;
		return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
	}
	return CUBLASLT_EPILOGUE_DEFAULT;
}

static rg_status gemm_run(rg_cuda_ctx *c, rg_dtype dt, const void *A, const void *W,
			  const void *bias, void *out, int M, int N, int K, rg_act act)
{
	rg_cuda_gemm_plan *p;
	rg_cuda_gemm_shape sh;
	bool gelu_pass;
	int epi;
	cublasStatus_t s;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm: unknown dtype %d", (int)dt);
	if (bias && (uintptr_t)bias % 16 != 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm_bias_act: the bias must be 16-byte aligned "
				 "(cuBLASLt epilogue)");
	if (M == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	if (c->qw_n) { /* a GGUF-quantized W: its own small-M kernel, else W dequantized (qgemv.cuh) */
		bool done;

		st = rg_cuda_qgemm(c, dt, A, &W, bias, out, M, N, K, act, &done);
		if (st != RG_OK || done)
			return st;
	}
	if (rg_cuda_gemv_ok(dt, A, W, M, N, K))
		return rg_cuda_gemv(c, dt, A, W, bias, out, M, N, K, act);
	epi = choose_epilogue(c, dt, bias != NULL, act, &gelu_pass);
	sh = (rg_cuda_gemm_shape){M, N, K, 1, K, K, N, 0, 0, 0};
	st = plan_get(c, dt, &sh, ptr_alignment(A, W, out), epi, A, W, bias, out, 1.f, &p);
	if (st != RG_OK)
		return st;
	s = plan_run(c, p, &p->algo, A, W, bias, out, 1.f);
	if (s != CUBLAS_STATUS_SUCCESS)
		return rg_errorf(RG_ERR_CUDA, "cublasLtMatmul M=%d N=%d K=%d epilogue %d failed: "
				 "cuBLAS status %d", M, N, K, epi, (int)s);
	st = rg_cuda_launch_check("cublasLtMatmul");
	if (st != RG_OK || !gelu_pass)
		return st;
	return rg_cuda_bias_act(c, dt, out, NULL, M, N, act); /* exact GELU or SiLU */
}

extern "C" rg_status rg_cuda_gemm(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W, void *out,
				  int M, int N, int K)
{
	return gemm_run((rg_cuda_ctx *)ctx, dt, A, W, NULL, out, M, N, K, RG_ACT_NONE);
}

extern "C" rg_status rg_cuda_gemm_bias_act(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W,
					   const void *bias, void *out, int M, int N, int K,
					   rg_act act)
{
	return gemm_run((rg_cuda_ctx *)ctx, dt, A, W, bias, out, M, N, K, act);
}

/* rg_op_act_mul_gemm on CUDA (ops.h): decode rows fused into the GEMM's loads of its input
 * (rg_cuda_qgemm_glu for a quantized W, rg_cuda_gemv_glu for a dense one), else *done = false
 * (the caller runs act_mul, then the GEMM: prefill, fp32, a misaligned x, RAGGED_GLU_GEMV not
 * 1: off by default until tests/gpu/issue30_glu.sh has run). */
extern "C" rg_status rg_cuda_act_mul_gemm(rg_cuda_ctx *ctx, rg_dtype dt, const void *x,
					  const void *W, void *out, int M, int N, int K, rg_act act,
					  bool *done)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	*done = false;
	if (dt != RG_DTYPE_F16 && dt != RG_DTYPE_BF16)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	if (!rg_tuning_bool(RG_TUNE_GLU_GEMV))
		return RG_OK;
	if (c->qw_n) {
		bool quantized;

		st = rg_cuda_qgemm_glu(c, dt, x, W, out, M, N, K, act, &quantized, done);
		if (st != RG_OK || quantized)
			return st;
	}
	if (!rg_cuda_gemv_ok(dt, x, W, M, N, K))
		return RG_OK;
	*done = true;
	return rg_cuda_gemv_glu(c, dt, x, W, out, M, N, K, act);
}

/* Largest power of two (<= 256) dividing n bytes (n > 0). */
static int bytes_alignment(long long n)
{
	unsigned long long x = (unsigned long long)n | 256u;
	return (int)(x & (~x + 1));
}

rg_status rg_cuda_gemm_strided(rg_cuda_ctx *c, rg_dtype dt, const void *A, const void *W,
			       void *out, const rg_cuda_gemm_shape *s, float alpha)
{
	const long long esz = dt == RG_DTYPE_F32 ? 4 : 2;
	rg_cuda_gemm_plan *p;
	cublasStatus_t cs;
	rg_status st;
	int align;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm_strided: unknown dtype %d", (int)dt);
	if (s->M < 0 || s->N <= 0 || s->K <= 0 || s->batch < 0 || s->lda < s->K ||
	    s->ldw < s->K || s->ldo < s->N)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm_strided: bad shape M=%d N=%d K=%d "
				 "batch=%d ld %d/%d/%d", s->M, s->N, s->K, s->batch, s->lda,
				 s->ldw, s->ldo);
	if (s->M == 0 || s->batch == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	/* every matrix of the batch, and every row, must keep the alignment the plan assumes */
	align = ptr_alignment(A, W, out);
	align = min(align, bytes_alignment((long long)s->lda * esz));
	align = min(align, bytes_alignment((long long)s->ldw * esz));
	align = min(align, bytes_alignment((long long)s->ldo * esz));
	if (s->batch > 1) {
		align = min(align, bytes_alignment(s->stride_a * esz));
		align = min(align, bytes_alignment(s->stride_w * esz));
		align = min(align, bytes_alignment(s->stride_o * esz));
	}
	st = plan_get(c, dt, s, align, CUBLASLT_EPILOGUE_DEFAULT, A, W, NULL, out, alpha, &p);
	if (st != RG_OK)
		return st;
	cs = plan_run(c, p, &p->algo, A, W, NULL, out, alpha);
	if (cs != CUBLAS_STATUS_SUCCESS)
		return rg_errorf(RG_ERR_CUDA, "cublasLtMatmul (strided batch %d, M=%d N=%d K=%d) "
				 "failed: cuBLAS status %d", s->batch, s->M, s->N, s->K, (int)cs);
	return rg_cuda_launch_check("cublasLtMatmul");
}
