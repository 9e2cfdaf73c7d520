/* CUDA backend entry points, declared in plain C (no CUDA types) so src/ops/ops.c can dispatch to
 * them. ctx is the backend's opaque CUDA context (device, stream, cuBLASLt handle, workspace).
 * Every op has the same arguments and semantics as its rg_op_* twin in src/ops/ops.h, with the
 * tensors in device memory and `dt` the compute dtype. Only compiled when RG_WITH_CUDA is defined. */
#ifndef RG_OPS_CUDA_H
#define RG_OPS_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"
#include "ops/act.h"

#ifdef __cplusplus
extern "C" {
#endif
int rg_cuda_count_devices(void);
rg_status rg_cuda_backend_init(int device_index, rg_dtype dt, void **ctx);
void rg_cuda_backend_free(void *ctx);
rg_status rg_cuda_alloc(void *ctx, size_t bytes, void **ptr);
void rg_cuda_dealloc(void *ctx, void *ptr);
rg_status rg_cuda_upload(void *ctx, void *dst, const void *src_host, size_t bytes);
rg_status rg_cuda_download(void *ctx, void *dst_host, const void *src, size_t bytes);
rg_status rg_cuda_upload_f32_as(void *ctx, void *dst, const float *src_host, size_t n, rg_dtype dt);
rg_status rg_cuda_sync(void *ctx);
rg_status rg_cuda_mem_info(void *ctx, size_t *used, size_t *total);

rg_status rg_cuda_embed_layernorm(void *ctx, rg_dtype dt, const int32_t *tokens,
				  const int32_t *positions, int n_tokens, const void *word,
				  const void *pos, const void *type0, const float *gamma,
				  const float *beta, float eps, int H, void *out);
rg_status rg_cuda_gemm(void *ctx, rg_dtype dt, const void *A, const void *W, void *out, int M, int N,
		       int K);
rg_status rg_cuda_gemm_bias_act(void *ctx, rg_dtype dt, const void *A, const void *W,
				const void *bias, void *out, int M, int N, int K, rg_act act);
rg_status rg_cuda_zero(void *ctx, void *ptr, size_t bytes);
rg_status rg_cuda_host_alloc(void *ctx, size_t bytes, void **ptr);
void rg_cuda_host_free(void *ctx, void *ptr);
rg_status rg_cuda_upload_async(void *ctx, void *dst, const void *src_pinned, size_t bytes);
rg_status rg_cuda_download_async(void *ctx, void *dst_pinned, const void *src, size_t bytes);
rg_status rg_cuda_capture_begin(void *ctx);
rg_status rg_cuda_capture_end(void *ctx, void **graph_exec);
rg_status rg_cuda_graph_launch(void *ctx, void *graph_exec);
void rg_cuda_graph_free(void *ctx, void *graph_exec);
void rg_cuda_set_exact_gelu(void *ctx, bool exact);
rg_status rg_cuda_bias_act(void *ctx, rg_dtype dt, void *x, const float *bias, int M, int N,
			   rg_act act);
rg_status rg_cuda_bias_residual_layernorm(void *ctx, rg_dtype dt, const void *x, const float *bias,
					  const void *residual, const float *gamma,
					  const float *beta, float eps, int M, int N, void *out);
rg_status rg_cuda_attention(void *ctx, rg_dtype dt, const void *qkv, const int32_t *cu_seqlens,
			    const int32_t *cu_seqlens_h, int n_seq, int max_seqlen, int num_heads,
			    int head_dim, float scale, const int32_t *seg, const float *rel_bias,
			    int rel_max, void *out);
rg_status rg_cuda_pool(void *ctx, rg_dtype dt, const void *x, const int32_t *cu_seqlens, int n_seq,
		       int H, rg_pooling mode, bool normalize, float *out);
rg_status rg_cuda_gather_rows(void *ctx, rg_dtype dt, const void *src, const int32_t *idx, int n_dst,
			     int H, void *dst);
#ifdef __cplusplus
}
#endif
#endif
