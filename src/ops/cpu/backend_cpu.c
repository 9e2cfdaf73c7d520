/* The CPU backend's table (src/ops/backend.h): host memory, and the float32 kernels of
 * ops_cpu.c and gemm_dnnl.c. It has no context (c is NULL) and computes in fp32 only (ops.c
 * refuses other dtypes when the backend is created). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/cpu/gemm_dnnl.h"
#include "ops/cpu/qweight.h"
#include "ops/cpu/ops_cpu.h"

static void cpu_free(rg_backend_ctx *c)
{
	(void)c;
}

static rg_status cpu_alloc(rg_backend_ctx *c, size_t bytes, void **ptr)
{
	(void)c;
	*ptr = malloc(bytes ? bytes : 1);
	if (!*ptr)
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu bytes of host memory", bytes);
	return RG_OK;
}

static void cpu_dealloc(rg_backend_ctx *c, void *ptr)
{
	(void)c;
	rg_dnnl_release(ptr); /* a prepared weight's registry entry dies with its memory */
	rg_cpu_qweight_release(ptr);
	free(ptr);
}

static void cpu_host_free(rg_backend_ctx *c, void *ptr)
{
	(void)c;
	free(ptr);
}

/* upload, download and their async forms: host memory on both sides */
static rg_status cpu_copy(rg_backend_ctx *c, void *dst, const void *src, size_t bytes)
{
	(void)c;
	memcpy(dst, src, bytes);
	return RG_OK;
}

static rg_status cpu_upload_f32_as(rg_backend_ctx *c, void *dst, const float *src_host, size_t n,
				   rg_dtype dt)
{
	(void)c;
	if (dt != RG_DTYPE_F32)
		return rg_errorf(RG_ERR_UNSUPPORTED, "CPU backend stores fp32 only");
	memcpy(dst, src_host, n * sizeof(float));
	return RG_OK;
}

static rg_status cpu_zero(rg_backend_ctx *c, void *ptr, size_t bytes)
{
	(void)c;
	memset(ptr, 0, bytes);
	return RG_OK;
}

static rg_status cpu_sync(rg_backend_ctx *c)
{
	(void)c;
	return RG_OK;
}

/* Resident set size and MemTotal from /proc (Linux). */
static rg_status cpu_mem_info(rg_backend_ctx *c, size_t *used, size_t *total)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, rss = 0;
	char line[256];

	(void)c;
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

static rg_status cpu_embed_layernorm(rg_backend_ctx *c, rg_dtype dt, const int32_t *tokens,
				     const int32_t *positions, int n_tokens, const void *word,
				     const void *pos, const void *type0, const float *gamma,
				     const float *beta, float eps, int H, void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_embed_layernorm(tokens, positions, n_tokens, word, pos, type0, gamma, beta, eps,
				      H, out);
}

static rg_status cpu_gemm(rg_backend_ctx *c, rg_dtype dt, const void *A, const void *W, void *out,
			  int M, int N, int K)
{
	(void)c;
	(void)dt;
	return rg_cpu_gemm(A, W, out, M, N, K);
}

static rg_status cpu_prepare_weight(rg_backend_ctx *c, rg_dtype dt, void *W, int N, int K)
{
	(void)c;
	return rg_dnnl_prepare(W, N, K, dt);
}

/* W NULL asks only whether type is supported (rg_backend_qtype_supported). */
static rg_status cpu_prepare_qweight(rg_backend_ctx *c, void *W, int type, int N, int K)
{
	(void)c;
	if (!rg_cpu_qtype_supported(type))
		return rg_errorf(RG_ERR_UNSUPPORTED, "cpu: no quantized kernel for ggml type %d",
				 type);
	return W ? rg_cpu_qweight_register(W, type, N, K) : RG_OK;
}

static rg_status cpu_prepare_qweight_parts(rg_backend_ctx *c, void *W, int n, const int *types,
					   const int *rows, int K)
{
	(void)c;
	return rg_cpu_qweight_register_parts(W, n, types, rows, K);
}

static rg_status cpu_gemm_bias_act(rg_backend_ctx *c, rg_dtype dt, const void *A, const void *W,
				   const void *bias, void *out, int M, int N, int K, rg_act act)
{
	(void)c;
	(void)dt;
	return rg_cpu_gemm_bias_act(A, W, bias, out, M, N, K, act);
}

static rg_status cpu_bias_act(rg_backend_ctx *c, rg_dtype dt, void *x, const float *bias, int M,
			      int N, rg_act act)
{
	(void)c;
	(void)dt;
	return rg_cpu_bias_act(x, bias, M, N, act);
}

static rg_status cpu_bias_residual_layernorm(rg_backend_ctx *c, rg_dtype dt, const void *x,
					     const float *bias, const void *residual,
					     const float *gamma, const float *beta, float eps, int M,
					     int N, void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_bias_residual_layernorm(x, bias, residual, gamma, beta, eps, M, N, out);
}

static rg_status cpu_attention(rg_backend_ctx *c, rg_dtype dt, const void *qkv,
			       const int32_t *cu_seqlens, const int32_t *cu_seqlens_h, int n_seq,
			       int max_seqlen, int num_heads, int head_dim, float scale,
			       const int32_t *seg, const float *rel_bias, int rel_max,
			       const rg_attn_disent *dis, void *out)
{
	(void)c;
	(void)dt;
	(void)cu_seqlens_h; /* cu_seqlens is host memory already */
	return rg_cpu_attention(qkv, cu_seqlens, n_seq, max_seqlen, num_heads, head_dim, scale, seg,
				rel_bias, rel_max, dis, out);
}

static rg_status cpu_rel_tables(rg_backend_ctx *c, rg_dtype dt, const void *qkv, int n_tokens,
				int num_heads, int head_dim, const void *pos_key,
				const void *pos_query, int width, float scale, void *c2p, void *p2c)
{
	(void)c;
	(void)dt;
	return rg_cpu_rel_tables(qkv, n_tokens, num_heads, head_dim, pos_key, pos_query, width,
				 scale, c2p, p2c);
}

static rg_status cpu_pool(rg_backend_ctx *c, rg_dtype dt, const void *x, const int32_t *cu_seqlens,
			  int n_seq, int H, rg_pooling mode, bool normalize, float *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_pool(x, cu_seqlens, n_seq, H, mode, normalize, out);
}

static rg_status cpu_embed_scale_add(rg_backend_ctx *c, rg_dtype dt, const void *table,
				     const int32_t *tokens, float scale, const void *pos,
				     const int32_t *positions, int32_t no_pos_token, int n, int H,
				     void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_embed_scale_add(table, tokens, scale, pos, positions, no_pos_token, n, H,
				      out);
}

static rg_status cpu_gather_rows(rg_backend_ctx *c, rg_dtype dt, const void *src, const int32_t *idx,
				 int n_dst, int H, void *dst)
{
	rg_cpu_qweight qw;

	(void)c;
	(void)dt;
	if (rg_cpu_qweight_find(src, &qw)) /* a tied table kept in its GGUF blocks */
		return rg_cpu_gather_rows_quant(&qw, idx, n_dst, H, dst);
	return rg_cpu_gather_rows(src, idx, n_dst, H, dst);
}

static rg_status cpu_add_norm(rg_backend_ctx *c, rg_dtype dt, const void *x, void *residual,
			      const float *gamma, const float *beta, float eps, rg_norm_kind kind,
			      int M, int N, void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_add_norm(x, residual, gamma, beta, eps, kind, M, N, out);
}

static rg_status cpu_rope(rg_backend_ctx *c, rg_dtype dt, void *x, int ld, int n_tokens,
			  int n_heads, int head_dim, const int32_t *positions,
			  const float *inv_freq, bool interleaved)
{
	(void)c;
	(void)dt;
	return rg_cpu_rope(x, ld, n_tokens, n_heads, head_dim, positions, inv_freq, interleaved);
}

static rg_status cpu_rope_table(rg_backend_ctx *c, const int32_t *positions, int n_tokens,
				const float *inv_freq, const float *inv_freq_long,
				int32_t long_from, float mscale, int head_dim, float *cos_sin)
{
	(void)c;
	return rg_cpu_rope_table_scaled(positions, n_tokens, inv_freq, inv_freq_long, long_from,
					mscale, head_dim, cos_sin);
}

static rg_status cpu_qk_norm(rg_backend_ctx *c, rg_dtype dt, void *qkv, int ld, int n_tokens,
			     int n_heads, int n_kv_heads, int head_dim, const float *q_gamma,
			     const float *k_gamma, float eps)
{
	(void)c;
	(void)dt;
	return rg_cpu_qk_norm(qkv, ld, n_tokens, n_heads, n_kv_heads, head_dim, q_gamma, k_gamma,
			      eps);
}

static rg_status cpu_rope_kv_write(rg_backend_ctx *c, rg_dtype dt, void *qkv, int ld,
				   int n_tokens, int n_heads, int n_kv_heads, int head_dim,
				   const float *cos_sin, bool interleaved, const int32_t *slots,
				   void *k_cache, void *v_cache, int64_t n_slots)
{
	(void)c;
	(void)dt;
	return rg_cpu_rope_kv_write(qkv, ld, n_tokens, n_heads, n_kv_heads, head_dim, cos_sin,
				    interleaved, slots, k_cache, v_cache, n_slots);
}

static rg_status cpu_act_mul(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
			     rg_act act, void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_act_mul(x, M, N, act, out);
}

static rg_status cpu_kv_write(rg_backend_ctx *c, rg_dtype dt, const void *k, const void *v,
			      int ld, const int32_t *slots, int n_tokens, int kv_dim,
			      void *k_cache, void *v_cache, int64_t n_slots)
{
	(void)c;
	(void)dt;
	return rg_cpu_kv_write(k, v, ld, slots, n_tokens, kv_dim, k_cache, v_cache, n_slots);
}

static rg_status cpu_paged_attention(rg_backend_ctx *c, rg_dtype dt, const rg_attn_desc *d,
				     const void *q, int ldq, const void *k_cache,
				     const void *v_cache, void *out)
{
	(void)c;
	(void)dt;
	return rg_cpu_paged_attention(d, q, ldq, k_cache, v_cache, out);
}

static rg_status cpu_argmax_rows(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
			       int32_t *ids, float *logprob)
{
	(void)c;
	(void)dt;
	for (int r = 0; r < M; r++) {
		const float *row = (const float *)x + (size_t)r * N;
		float mx = -INFINITY;
		int best = -1;
		double sum = 0.0;

		for (int j = 0; j < N; j++)
			if (row[j] > mx || (best < 0 && row[j] == mx)) {
				mx = row[j];
				best = j;
			}
		ids[r] = best < 0 ? 0 : best;
		if (!logprob)
			continue;
		for (int j = 0; j < N; j++)
			if (row[j] == row[j])
				sum += exp((double)row[j] - (double)mx);
		logprob[r] = best < 0 ? NAN : (float)(-log(sum));
	}
	return RG_OK;
}

static rg_status cpu_copy_blocks(rg_backend_ctx *c, void *pool, size_t block_bytes, int n_pools,
				 size_t pool_stride, const int32_t *src_h, const int32_t *dst_h, int n)
{
	(void)c;
	for (int p = 0; p < n_pools; p++) {
		char *base = (char *)pool + (size_t)p * pool_stride;

		for (int i = 0; i < n; i++)
			if (src_h[i] != dst_h[i])
				memcpy(base + (size_t)dst_h[i] * block_bytes,
				       base + (size_t)src_h[i] * block_bytes, block_bytes);
	}
	return RG_OK;
}

static rg_status cpu_sample_rows(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N,
				 const rg_sample_args *a)
{
	(void)c;
	(void)dt;
	return rg_cpu_sample_rows(x, M, N, a);
}

static rg_status cpu_topk_rows(rg_backend_ctx *c, rg_dtype dt, const void *x, int M, int N, int k,
			       rg_topk_method method, void *work, int32_t *idx, float *val)
{
	(void)c;
	(void)dt;
	(void)method;
	return rg_cpu_topk_rows(x, M, N, k, work, idx, val);
}

const rg_backend_ops rg_cpu_backend_ops = {
	.name = "cpu",
	.free = cpu_free,
	.alloc = cpu_alloc,
	.dealloc = cpu_dealloc,
	.upload = cpu_copy,
	.download = cpu_copy,
	.upload_f32_as = cpu_upload_f32_as,
	.zero = cpu_zero,
	.host_alloc = cpu_alloc,
	.host_free = cpu_host_free,
	.upload_async = cpu_copy,
	.download_async = cpu_copy,
	.sync = cpu_sync,
	.mem_info = cpu_mem_info,
	.embed_layernorm = cpu_embed_layernorm,
	.gemm = cpu_gemm,
	.prepare_weight = cpu_prepare_weight,
	.prepare_qweight = cpu_prepare_qweight,
	.prepare_qweight_parts = cpu_prepare_qweight_parts,
	.gemm_bias_act = cpu_gemm_bias_act,
	.bias_act = cpu_bias_act,
	.bias_residual_layernorm = cpu_bias_residual_layernorm,
	.attention = cpu_attention,
	.rel_tables = cpu_rel_tables,
	.pool = cpu_pool,
	.gather_rows = cpu_gather_rows,
	.embed_scale_add = cpu_embed_scale_add,
	.add_norm = cpu_add_norm,
	.rope = cpu_rope,
	.rope_table = cpu_rope_table,
	.qk_norm = cpu_qk_norm,
	.rope_kv_write = cpu_rope_kv_write,
	.act_mul = cpu_act_mul,
	.kv_write = cpu_kv_write,
	.paged_attention = cpu_paged_attention,
	.copy_blocks = cpu_copy_blocks,
	.argmax_rows = cpu_argmax_rows,
	.sample_rows = cpu_sample_rows,
	.topk_rows = cpu_topk_rows,
};
