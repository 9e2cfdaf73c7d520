/* The interface between src/ops/ops.c and a backend: one table of functions per backend (CPU,
 * CUDA), so that each rg_op_* validates its arguments once and dispatches through the table
 * instead of an #ifdef per op (as ggml-backend does). Internal to src/ops.
 *
 * Every op entry has the arguments and semantics of its rg_op_* twin in ops.h, after ops.c has
 * checked the shapes (sizes >= 0 or > 0, known activations and pooling modes, rel_max): a backend
 * checks only what depends on data it reads (cu_seqlens monotone, lengths within max_seqlen,
 * which the CPU sees on the host and CUDA flags on the device), and what it cannot do
 * (RG_ERR_UNSUPPORTED: a hidden size its kernels do not cover). Tensors live in the backend's
 * memory; dt is the compute dtype (always F32 on the CPU). */
#ifndef RG_OPS_BACKEND_H
#define RG_OPS_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/act.h"
#include "ops/ops.h"
#include "ragged.h"

/* A backend's own state: the CUDA backend's device, stream, cuBLASLt handle, workspace and plan
 * cache (src/ops/cuda/common.cuh); the CPU backend has none (NULL). */
typedef struct rg_backend_ctx rg_backend_ctx;

typedef struct rg_backend_ops {
	const char *name; /* "cpu", "cuda" */
	void (*free)(rg_backend_ctx *c);

	/* memory; host_alloc gives pinned memory on CUDA, plain malloc on the CPU */
	rg_status (*alloc)(rg_backend_ctx *c, size_t bytes, void **ptr);
	void (*dealloc)(rg_backend_ctx *c, void *ptr);
	rg_status (*upload)(rg_backend_ctx *c, void *dst, const void *src_host, size_t bytes);
	rg_status (*download)(rg_backend_ctx *c, void *dst_host, const void *src, size_t bytes);
	rg_status (*upload_f32_as)(rg_backend_ctx *c, void *dst, const float *src_host, size_t n,
				   rg_dtype dt);
	rg_status (*zero)(rg_backend_ctx *c, void *ptr, size_t bytes);
	rg_status (*host_alloc)(rg_backend_ctx *c, size_t bytes, void **ptr);
	void (*host_free)(rg_backend_ctx *c, void *ptr);
	rg_status (*upload_async)(rg_backend_ctx *c, void *dst, const void *src_pinned, size_t bytes);
	rg_status (*download_async)(rg_backend_ctx *c, void *dst_pinned, const void *src,
				    size_t bytes);
	rg_status (*sync)(rg_backend_ctx *c);
	rg_status (*mem_info)(rg_backend_ctx *c, size_t *used, size_t *total);

	/* graphs (CUDA graphs); NULL where the backend has none */
	rg_status (*capture_begin)(rg_backend_ctx *c);
	rg_status (*capture_end)(rg_backend_ctx *c, void **graph);
	rg_status (*graph_launch)(rg_backend_ctx *c, void *graph);
	void (*graph_free)(rg_backend_ctx *c, void *graph);
	void (*set_exact_gelu)(rg_backend_ctx *c, bool exact); /* NULL: no effect */
	/* GEMM plans built so far (rg_backend_gemm_plans); NULL: the backend builds none */
	unsigned long long (*gemm_plans)(rg_backend_ctx *c);

	/* ops (ops.h) */
	rg_status (*embed_layernorm)(rg_backend_ctx *c, rg_dtype dt, const int32_t *tokens,
				     const int32_t *positions, int n_tokens, const void *word,
				     const void *pos, const void *type0, const float *gamma,
				     const float *beta, float eps, int H, void *out);
	rg_status (*gemm)(rg_backend_ctx *c, rg_dtype dt, const void *A, const void *W, void *out,
			  int M, int N, int K);
	rg_status (*prepare_weight)(rg_backend_ctx *c, rg_dtype dt, void *W, int N, int K);
	/* rg_op_prepare_qweight; NULL: the backend reads no quantized weight (callers dequantize).
	 * W NULL (c may be NULL too): only whether type is supported, RG_OK or RG_ERR_UNSUPPORTED
	 * (rg_backend_qtype_supported) */
	rg_status (*prepare_qweight)(rg_backend_ctx *c, void *W, int type, int N, int K);
	/* rg_op_prepare_qweight_parts (a stack of parts of different types); NULL: such stacks
	 * are dequantized by the callers */
	rg_status (*prepare_qweight_parts)(rg_backend_ctx *c, void *W, int n, const int *types,
					   const int *rows, int K);
	rg_status (*gemm_bias_act)(rg_backend_ctx *c, rg_dtype dt, const void *A, const void *W,
				   const void *bias, void *out, int M, int N, int K, rg_act act);
	rg_status (*bias_act)(rg_backend_ctx *c, rg_dtype dt, void *x, const float *bias, int M,
			      int N, rg_act act);
	rg_status (*bias_residual_layernorm)(rg_backend_ctx *c, rg_dtype dt, const void *x,
					     const float *bias, const void *residual,
					     const float *gamma, const float *beta, float eps, int M,
					     int N, void *out);
	rg_status (*attention)(rg_backend_ctx *c, rg_dtype dt, const void *qkv,
			       const int32_t *cu_seqlens, const int32_t *cu_seqlens_h, int n_seq,
			       int max_seqlen, int num_heads, int head_dim, float scale,
			       const int32_t *seg, const float *rel_bias, int rel_max,
			       const rg_attn_disent *dis, void *out);
	rg_status (*rel_tables)(rg_backend_ctx *c, rg_dtype dt, const void *qkv, int n_tokens,
				int num_heads, int head_dim, const void *pos_key,
				const void *pos_query, int width, float scale, void *c2p,
				void *p2c);
	rg_status (*pool)(rg_backend_ctx *c, rg_dtype dt, const void *x, const int32_t *cu_seqlens,
			  int n_seq, int H, rg_pooling mode, bool normalize, float *out);
	rg_status (*gather_rows)(rg_backend_ctx *c, rg_dtype dt, const void *src, const int32_t *idx,
				 int n_dst, int H, void *dst);
	rg_status (*embed_scale_add)(rg_backend_ctx *c, rg_dtype dt, const void *table,
				     const int32_t *tokens, float scale, const void *pos,
				     const int32_t *positions, int32_t no_pos_token, int n, int H,
				     void *out);
	/* decoder ops (ops.h); NULL where the backend has none yet (RG_ERR_UNSUPPORTED) */
	rg_status (*add_norm)(rg_backend_ctx *c, rg_dtype dt, const void *x, void *residual,
			      const float *gamma, const float *beta, float eps, rg_norm_kind kind,
			      int M, int N, void *out);
	rg_status (*rope)(rg_backend_ctx *c, rg_dtype dt, void *x, int ld, int n_tokens,
			  int n_heads, int head_dim, const int32_t *positions,
			  const float *inv_freq, bool interleaved);
	rg_status (*rope_table)(rg_backend_ctx *c, const int32_t *positions, int n_tokens,
				const float *inv_freq, const float *inv_freq_long,
				int32_t long_from, float mscale, int head_dim, float *cos_sin);
	rg_status (*qk_norm)(rg_backend_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
			     int n_heads, int n_kv_heads, int head_dim, const float *q_gamma,
			     const float *k_gamma, float eps);
	rg_status (*rope_kv_write)(rg_backend_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
				   int n_heads, int n_kv_heads, int head_dim,
				   const float *cos_sin, bool interleaved, const int32_t *slots,
				   void *k_cache, void *v_cache, int64_t n_slots);
	rg_status (*act_mul)(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
			     rg_act act, void *out);
	/* rg_op_act_mul_gemm fused; NULL, or *done = false with RG_OK, where the backend does
	 * not fuse the shape (the caller runs act_mul, then gemm) */
	rg_status (*act_mul_gemm)(rg_backend_ctx *c, rg_dtype dt, const void *x, const void *W,
				  void *out, int M, int N, int K, rg_act act, bool *done);
	rg_status (*kv_write)(rg_backend_ctx *c, rg_dtype dt, const void *k, const void *v, int ld,
			      const int32_t *slots, int n_tokens, int kv_dim, void *k_cache,
			      void *v_cache, int64_t n_slots);
	rg_status (*paged_attention)(rg_backend_ctx *c, rg_dtype dt, const rg_attn_desc *d,
				     const void *q, int ldq, const void *k_cache,
				     const void *v_cache, void *out);
	rg_status (*argmax_rows)(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
				 int32_t *ids, float *logprob);
	rg_status (*copy_blocks)(rg_backend_ctx *c, void *pool, size_t block_bytes, int n_pools,
				 size_t pool_stride, const int32_t *src_h, const int32_t *dst_h,
				 int n);
	rg_status (*sample_rows)(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
				 const rg_sample_args *a);
	rg_status (*topk_rows)(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N, int k,
			       rg_topk_method method, void *work, int32_t *idx, float *val);
} rg_backend_ops;

/* The CPU backend (src/ops/cpu/backend_cpu.c). */
extern const rg_backend_ops rg_cpu_backend_ops;

#endif
