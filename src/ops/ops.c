/* Backend objects and the rg_op_* dispatch to the CPU reference or the CUDA kernels. */
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/cpu/gemm_dnnl.h"
#include "ops/cpu/ops_cpu.h"
#ifdef RG_WITH_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

struct rg_backend {
	rg_device dev;
	rg_dtype dt;
	void *cuda;           /* CUDA context, NULL on CPU */
	bool capturing;       /* between capture_begin and capture_end */
	rg_status capture_st; /* first op error while capturing (RG_OK: none) */
	char capture_msg[256];
};

#ifdef RG_WITH_CUDA
/* While capturing, remember the first failing op: capture_end reports it even when the failure
 * happened on the host before anything reached the stream. */
static rg_status note(rg_backend *be, rg_status st)
{
	if (st != RG_OK && be->capturing && be->capture_st == RG_OK) {
		be->capture_st = st;
		snprintf(be->capture_msg, sizeof(be->capture_msg), "%s", rg_last_error());
	}
	return st;
}
#endif

size_t rg_dtype_size(rg_dtype dt)
{
	switch (dt) {
	case RG_DTYPE_F32: return 4;
	case RG_DTYPE_F16: return 2;
	case RG_DTYPE_BF16: return 2;
	case RG_DTYPE_AUTO: return 0;
	}
	return 0;
}

bool rg_build_has_cuda(void)
{
#ifdef RG_WITH_CUDA
	return true;
#else
	return false;
#endif
}

const char *rg_build_cuda_archs(void)
{
#ifdef RG_CUDA_ARCHS
	return RG_CUDA_ARCHS;
#else
	return "";
#endif
}

int rg_cuda_device_count(void)
{
#ifdef RG_WITH_CUDA
	return rg_cuda_count_devices();
#else
	return 0;
#endif
}

rg_status rg_backend_init(rg_device dev, int device_index, rg_dtype dt, rg_backend **out)
{
	rg_backend *be;

	*out = NULL;
	if (dev == RG_DEVICE_CPU && dt != RG_DTYPE_F32)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "the CPU backend computes in fp32 only; fp16/bf16 need --device cuda");
#ifndef RG_WITH_CUDA
	if (dev == RG_DEVICE_CUDA)
		return rg_errorf(RG_ERR_UNSUPPORTED, "this build of ragged has no CUDA backend");
#endif
	be = calloc(1, sizeof(*be));
	if (!be)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	be->dev = dev;
	be->dt = dt;
#ifdef RG_WITH_CUDA
	if (dev == RG_DEVICE_CUDA) {
		rg_status st = rg_cuda_backend_init(device_index, dt, &be->cuda);
		if (st != RG_OK) {
			free(be);
			return st;
		}
	}
#else
	(void)device_index;
#endif
	*out = be;
	return RG_OK;
}

void rg_backend_free(rg_backend *be)
{
	if (!be)
		return;
#ifdef RG_WITH_CUDA
	if (be->cuda)
		rg_cuda_backend_free(be->cuda);
#endif
	free(be);
}

rg_device rg_backend_device(const rg_backend *be) { return be->dev; }
rg_dtype rg_backend_dtype(const rg_backend *be) { return be->dt; }

#ifdef RG_WITH_CUDA
#define RG_IS_CUDA(be) ((be)->cuda != NULL)
#else
#define RG_IS_CUDA(be) false
#endif

rg_status rg_backend_alloc(rg_backend *be, size_t bytes, void **ptr)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_alloc(be->cuda, bytes, ptr);
#endif
	*ptr = malloc(bytes ? bytes : 1);
	if (!*ptr)
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
	return RG_OK;
}

void rg_backend_dealloc(rg_backend *be, void *ptr)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be)) {
		rg_cuda_dealloc(be->cuda, ptr);
		return;
	}
#endif
	(void)be;
	rg_dnnl_release(ptr); /* a prepared weight's registry entry dies with its memory */
	free(ptr);
}

rg_status rg_backend_upload(rg_backend *be, void *dst, const void *src_host, size_t bytes)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_upload(be->cuda, dst, src_host, bytes);
#endif
	(void)be;
	memcpy(dst, src_host, bytes);
	return RG_OK;
}

rg_status rg_backend_download(rg_backend *be, void *dst_host, const void *src, size_t bytes)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_download(be->cuda, dst_host, src, bytes);
#endif
	(void)be;
	memcpy(dst_host, src, bytes);
	return RG_OK;
}

rg_status rg_backend_upload_f32_as(rg_backend *be, void *dst, const float *src_host, size_t n,
				   rg_dtype dt)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_upload_f32_as(be->cuda, dst, src_host, n, dt);
#endif
	(void)be;
	if (dt != RG_DTYPE_F32)
		return rg_errorf(RG_ERR_UNSUPPORTED, "CPU backend stores fp32 only");
	memcpy(dst, src_host, n * sizeof(float));
	return RG_OK;
}

rg_status rg_backend_zero(rg_backend *be, void *ptr, size_t bytes)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_zero(be->cuda, ptr, bytes));
#endif
	(void)be;
	memset(ptr, 0, bytes);
	return RG_OK;
}

rg_status rg_backend_host_alloc(rg_backend *be, size_t bytes, void **ptr)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_host_alloc(be->cuda, bytes, ptr);
#endif
	*ptr = malloc(bytes ? bytes : 1);
	if (!*ptr)
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
	return RG_OK;
}

void rg_backend_host_free(rg_backend *be, void *ptr)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be)) {
		rg_cuda_host_free(be->cuda, ptr);
		return;
	}
#endif
	(void)be;
	free(ptr);
}

rg_status rg_backend_upload_async(rg_backend *be, void *dst, const void *src_pinned, size_t bytes)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_upload_async(be->cuda, dst, src_pinned, bytes));
#endif
	(void)be;
	memcpy(dst, src_pinned, bytes);
	return RG_OK;
}

rg_status rg_backend_download_async(rg_backend *be, void *dst_pinned, const void *src, size_t bytes)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_download_async(be->cuda, dst_pinned, src, bytes));
#endif
	(void)be;
	memcpy(dst_pinned, src, bytes);
	return RG_OK;
}

bool rg_backend_has_graphs(const rg_backend *be)
{
	return RG_IS_CUDA(be);
}

rg_status rg_backend_capture_begin(rg_backend *be)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be)) {
		rg_status st = rg_cuda_capture_begin(be->cuda);
		if (st == RG_OK) {
			be->capturing = true;
			be->capture_st = RG_OK;
		}
		return st;
	}
#endif
	(void)be;
	return rg_errorf(RG_ERR_UNSUPPORTED, "the CPU backend has no graphs");
}

rg_status rg_backend_capture_end(rg_backend *be, rg_graph **out)
{
	*out = NULL;
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be)) {
		rg_status st = rg_cuda_capture_end(be->cuda, (void **)out);
		bool failed = be->capture_st != RG_OK;

		be->capturing = false;
		if (!failed)
			return st;
		if (*out)
			rg_cuda_graph_free(be->cuda, *out);
		*out = NULL;
		return rg_errorf(be->capture_st, "an op failed during graph capture: %s",
				 be->capture_msg);
	}
#endif
	(void)be;
	return rg_errorf(RG_ERR_UNSUPPORTED, "the CPU backend has no graphs");
}

rg_status rg_backend_graph_launch(rg_backend *be, rg_graph *g)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be) && g)
		return rg_cuda_graph_launch(be->cuda, g);
#endif
	(void)be;
	return rg_errorf(RG_ERR_UNSUPPORTED, "no graph to launch on this backend");
}

void rg_backend_graph_free(rg_backend *be, rg_graph *g)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be) && g)
		rg_cuda_graph_free(be->cuda, g);
#endif
	(void)be;
	(void)g;
}

void rg_backend_set_exact_gelu(rg_backend *be, bool exact)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		rg_cuda_set_exact_gelu(be->cuda, exact);
#endif
	(void)be;
	(void)exact;
}

rg_status rg_backend_sync(rg_backend *be)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_sync(be->cuda);
#endif
	(void)be;
	return RG_OK;
}

/* Resident set size and MemTotal from /proc (Linux). */
static rg_status cpu_mem_info(size_t *used, size_t *total)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, rss = 0;
	char line[256];

	*used = 0;
	*total = 0;
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) == 2)
			*used = (size_t)rss * 4096u;
		fclose(f);
	}
	f = fopen("/proc/meminfo", "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			unsigned long kb;
			if (sscanf(line, "MemTotal: %lu kB", &kb) == 1) {
				*total = (size_t)kb * 1024u;
				break;
			}
		}
		fclose(f);
	}
	return RG_OK;
}

rg_status rg_backend_mem_info(rg_backend *be, size_t *used, size_t *total)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return rg_cuda_mem_info(be->cuda, used, total);
#endif
	(void)be;
	return cpu_mem_info(used, total);
}

rg_status rg_op_embed_layernorm(rg_backend *be, const int32_t *tokens, const int32_t *positions,
				int n_tokens, const void *word, const void *pos, const void *type0,
				const float *gamma, const float *beta, float eps, int H, void *out)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_embed_layernorm(be->cuda, be->dt, tokens, positions, n_tokens, word,
					       pos, type0, gamma, beta, eps, H, out));
#endif
	(void)be;
	return rg_cpu_embed_layernorm(tokens, positions, n_tokens, word, pos, type0, gamma, beta, eps,
				      H, out);
}

rg_status rg_op_gemm(rg_backend *be, const void *A, const void *W, void *out, int M, int N, int K)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_gemm(be->cuda, be->dt, A, W, out, M, N, K));
#endif
	(void)be;
	return rg_cpu_gemm(A, W, out, M, N, K);
}

rg_status rg_op_prepare_weight(rg_backend *be, void *W, int N, int K)
{
	if (!W || N <= 0 || K <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prepare_weight: bad shape N=%d K=%d", N, K);
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return RG_OK;
#endif
	(void)be;
	return rg_dnnl_prepare(W, N, K);
}

rg_status rg_op_gemm_bias_act(rg_backend *be, const void *A, const void *W, const void *bias,
			      void *out, int M, int N, int K, rg_act act)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_gemm_bias_act(be->cuda, be->dt, A, W, bias, out, M, N, K, act));
#endif
	(void)be;
	return rg_cpu_gemm_bias_act(A, W, bias, out, M, N, K, act);
}

rg_status rg_op_bias_act(rg_backend *be, void *x, const float *bias, int M, int N, rg_act act)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_bias_act(be->cuda, be->dt, x, bias, M, N, act));
#endif
	(void)be;
	return rg_cpu_bias_act(x, bias, M, N, act);
}

rg_status rg_op_bias_residual_layernorm(rg_backend *be, const void *x, const float *bias,
					const void *residual, const float *gamma, const float *beta,
					float eps, int M, int N, void *out)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_bias_residual_layernorm(be->cuda, be->dt, x, bias, residual, gamma,
						       beta, eps, M, N, out));
#endif
	(void)be;
	return rg_cpu_bias_residual_layernorm(x, bias, residual, gamma, beta, eps, M, N, out);
}

rg_status rg_op_attention(rg_backend *be, const void *qkv, const int32_t *cu_seqlens,
			  const int32_t *cu_seqlens_h, int n_seq, int max_seqlen, int num_heads,
			  int head_dim, float scale, const int32_t *seg, const float *rel_bias,
			  int rel_max, void *out)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_attention(be->cuda, be->dt, qkv, cu_seqlens, cu_seqlens_h, n_seq,
					 max_seqlen, num_heads, head_dim, scale, seg, rel_bias,
					 rel_max, out));
#endif
	(void)be;
	(void)cu_seqlens_h;
	return rg_cpu_attention(qkv, cu_seqlens, n_seq, max_seqlen, num_heads, head_dim, scale, seg,
				rel_bias, rel_max, out);
}

rg_status rg_op_pool(rg_backend *be, const void *x, const int32_t *cu_seqlens, int n_seq, int H,
		     rg_pooling mode, bool normalize, float *out)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_pool(be->cuda, be->dt, x, cu_seqlens, n_seq, H, mode, normalize, out));
#endif
	(void)be;
	return rg_cpu_pool(x, cu_seqlens, n_seq, H, mode, normalize, out);
}

rg_status rg_op_gather_rows(rg_backend *be, const void *src, const int32_t *idx, int n_dst, int H,
			    void *dst)
{
#ifdef RG_WITH_CUDA
	if (RG_IS_CUDA(be))
		return note(be, rg_cuda_gather_rows(be->cuda, be->dt, src, idx, n_dst, H, dst));
#endif
	(void)be;
	return rg_cpu_gather_rows(src, idx, n_dst, H, dst);
}
