/* CUDA backend entry points, declared in plain C (no CUDA types) so src/ops/ops.c can dispatch to
 * them through the table rg_cuda_backend_ops() returns (src/ops/backend.h). ctx is the CUDA
 * context (device, stream, cuBLASLt handle, workspace, GEMM plans: struct rg_backend_ctx, defined
 * in common.cuh), opaque here. Every op has the same arguments and semantics as its rg_op_* twin
 * in src/ops/ops.h, with the tensors in device memory and `dt` the compute dtype; ops.c has
 * checked the shapes. Only compiled when RG_WITH_CUDA is defined. */
#ifndef RG_OPS_CUDA_H
#define RG_OPS_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"
#include "ops/act.h"
#include "ops/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
typedef struct rg_backend_ctx rg_cuda_ctx;

int rg_cuda_count_devices(void);
/* The CUDA backend's table (every entry below that the table names). */
const rg_backend_ops *rg_cuda_backend_ops(void);
rg_status rg_cuda_backend_init(int device_index, rg_dtype dt, rg_cuda_ctx **ctx);
void rg_cuda_backend_free(rg_cuda_ctx *ctx);
rg_status rg_cuda_alloc(rg_cuda_ctx *ctx, size_t bytes, void **ptr);
void rg_cuda_dealloc(rg_cuda_ctx *ctx, void *ptr);
rg_status rg_cuda_upload(rg_cuda_ctx *ctx, void *dst, const void *src_host, size_t bytes);
rg_status rg_cuda_download(rg_cuda_ctx *ctx, void *dst_host, const void *src, size_t bytes);
rg_status rg_cuda_upload_f32_as(rg_cuda_ctx *ctx, void *dst, const float *src_host, size_t n, rg_dtype dt);
rg_status rg_cuda_sync(rg_cuda_ctx *ctx);
rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *used, size_t *total);

rg_status rg_cuda_embed_layernorm(rg_cuda_ctx *ctx, rg_dtype dt, const int32_t *tokens,
				  const int32_t *positions, int n_tokens, const void *word,
				  const void *pos, const void *type0, const float *gamma,
				  const float *beta, float eps, int H, void *out);
rg_status rg_cuda_gemm(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W, void *out, int M, int N,
		       int K);
rg_status rg_cuda_prepare_weight(rg_cuda_ctx *ctx, rg_dtype dt, void *W, int N, int K);
rg_status rg_cuda_gemm_bias_act(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void *W,
				const void *bias, void *out, int M, int N, int K, rg_act act);
rg_status rg_cuda_zero(rg_cuda_ctx *ctx, void *ptr, size_t bytes);
rg_status rg_cuda_host_alloc(rg_cuda_ctx *ctx, size_t bytes, void **ptr);
void rg_cuda_host_free(rg_cuda_ctx *ctx, void *ptr);
rg_status rg_cuda_upload_async(rg_cuda_ctx *ctx, void *dst, const void *src_pinned, size_t bytes);
rg_status rg_cuda_download_async(rg_cuda_ctx *ctx, void *dst_pinned, const void *src, size_t bytes);
rg_status rg_cuda_capture_begin(rg_cuda_ctx *ctx);
rg_status rg_cuda_capture_end(rg_cuda_ctx *ctx, void **graph_exec);
rg_status rg_cuda_graph_launch(rg_cuda_ctx *ctx, void *graph_exec);
void rg_cuda_graph_free(rg_cuda_ctx *ctx, void *graph_exec);
void rg_cuda_set_exact_gelu(rg_cuda_ctx *ctx, bool exact);
unsigned long long rg_cuda_gemm_plans(rg_cuda_ctx *ctx);
rg_status rg_cuda_bias_act(rg_cuda_ctx *ctx, rg_dtype dt, void *x, const float *bias, int M, int N,
			   rg_act act);
rg_status rg_cuda_bias_residual_layernorm(rg_cuda_ctx *ctx, rg_dtype dt, const void *x, const float *bias,
					  const void *residual, const float *gamma,
					  const float *beta, float eps, int M, int N, void *out);
rg_status rg_cuda_attention(rg_cuda_ctx *ctx, rg_dtype dt, const void *qkv, const int32_t *cu_seqlens,
			    const int32_t *cu_seqlens_h, int n_seq, int max_seqlen, int num_heads,
			    int head_dim, float scale, const int32_t *seg, const float *rel_bias,
			    int rel_max, const rg_attn_disent *dis, void *out);
rg_status rg_cuda_rel_tables(rg_cuda_ctx *ctx, rg_dtype dt, const void *qkv, int n_tokens,
			     int num_heads, int head_dim, const void *pos_key, const void *pos_query,
			     int width, float scale, void *c2p, void *p2c);
rg_status rg_cuda_pool(rg_cuda_ctx *ctx, rg_dtype dt, const void *x, const int32_t *cu_seqlens, int n_seq,
		       int H, rg_pooling mode, bool normalize, float *out);
rg_status rg_cuda_embed_scale_add(rg_cuda_ctx *ctx, rg_dtype dt, const void *table,
				  const int32_t *tokens, float scale, const void *pos,
				  const int32_t *positions, int32_t no_pos_token, int n, int H,
				  void *out);
rg_status rg_cuda_gather_rows(rg_cuda_ctx *ctx, rg_dtype dt, const void *src, const int32_t *idx, int n_dst,
			     int H, void *dst);
/* decoder ops (decoder_ops.cu, paged_attention.cu) */
rg_status rg_cuda_add_norm(rg_cuda_ctx *c, rg_dtype dt, const void *x, void *residual,
			   const float *gamma, const float *beta, float eps, rg_norm_kind kind, int M,
			   int N, void *out);
rg_status rg_cuda_rope(rg_cuda_ctx *c, rg_dtype dt, void *x, int ld, int n_tokens, int n_heads,
		       int head_dim, const int32_t *positions, const float *inv_freq,
		       bool interleaved);
rg_status rg_cuda_rope_table(rg_cuda_ctx *c, const int32_t *positions, int n_tokens,
			     const float *inv_freq, const float *inv_freq_long, int32_t long_from,
			     float mscale, int head_dim, float *cos_sin);
rg_status rg_cuda_qk_norm(rg_cuda_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
			  int n_heads, int n_kv_heads, int head_dim, const float *q_gamma,
			  const float *k_gamma, float eps);
rg_status rg_cuda_rope_kv_write(rg_cuda_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
				int n_heads, int n_kv_heads, int head_dim, const float *cos_sin,
				bool interleaved, const int32_t *slots, void *k_cache,
				void *v_cache, int64_t n_slots);
rg_status rg_cuda_act_mul(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N, rg_act act,
			  void *out);
rg_status rg_cuda_act_mul_gemm(rg_cuda_ctx *c, rg_dtype dt, const void *x, const void *W,
			       void *out, int M, int N, int K, rg_act act, bool *done);
rg_status rg_cuda_kv_write(rg_cuda_ctx *c, rg_dtype dt, const void *k, const void *v, int ld,
			   const int32_t *slots, int n_tokens, int kv_dim, void *k_cache,
			   void *v_cache, int64_t n_slots);
rg_status rg_cuda_paged_attention(rg_cuda_ctx *c, rg_dtype dt, const rg_attn_desc *d,
				  const void *q, int ldq, const void *k_cache, const void *v_cache,
				  void *out);
rg_status rg_cuda_argmax_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
			      int32_t *ids, float *logprob);
rg_status rg_cuda_sample_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
			      const rg_sample_args *a);
rg_status rg_cuda_topk_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N, int k,
			    rg_topk_method method, void *work, int32_t *idx, float *val);
rg_status rg_cuda_copy_blocks(rg_cuda_ctx *c, void *pool, size_t block_bytes, int n_pools,
			      size_t pool_stride, const int32_t *src_h, const int32_t *dst_h, int n);
#ifdef __cplusplus
}
#endif
#endif
