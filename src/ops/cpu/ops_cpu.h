/* CPU kernels (C11, single-threaded OpenBLAS sgemm tiles and vectorised bodies on ragged's thread
 * pool), float32 only. Same arguments and semantics as the rg_op_* entry points in
 * src/ops/ops.h, minus the backend; the shapes are checked there (rg_op_*), not here: these
 * check only the data they read (cu_seqlens). The backend table is backend_cpu.c. */
#ifndef RG_OPS_CPU_H
#define RG_OPS_CPU_H
#include "core/export.h"
#include <stdbool.h>
#include <stdint.h>
#include "ragged.h"
#include "ops/act.h"
#include "ops/ops.h"

rg_status rg_cpu_embed_layernorm(const int32_t *tokens, const int32_t *positions, int n_tokens,
				 const float *word, const float *pos, const float *type0,
				 const float *gamma, const float *beta, float eps, int H, float *out);
/* out (M, N) = A (M, K) W (N, K)^T, float32 row-major, on the thread pool: W prepared for oneDNN
 * runs there (rg_dnnl_gemm; M <= RG_CPU_GEMV_MAX as the blocked GEMV, M <= rg_cpu_smallm_max()
 * as the blocked short-sentence kernel); an unprepared W with M <= RG_CPU_GEMV_MAX (a decode
 * step's tied LM head) runs the row-major GEMV kernel, which reads W once; otherwise OpenBLAS
 * tiles. */
rg_status rg_cpu_gemm(const float *A, const float *W, float *out, int M, int N, int K);
rg_status rg_cpu_gemm_bias_act(const float *A, const float *W, const float *bias, float *out,
			       int M, int N, int K, rg_act act);
rg_status rg_cpu_bias_act(float *x, const float *bias, int M, int N, rg_act act);
rg_status rg_cpu_bias_residual_layernorm(const float *x, const float *bias, const float *residual,
					 const float *gamma, const float *beta, float eps, int M,
					 int N, float *out);
rg_status rg_cpu_attention(const float *qkv, const int32_t *cu_seqlens, int n_seq, int max_seqlen,
			   int num_heads, int head_dim, float scale, const int32_t *seg,
			   const float *rel_bias, int rel_max, const rg_attn_disent *dis,
			   float *out);
rg_status rg_cpu_rel_tables(const float *qkv, int n_tokens, int num_heads, int head_dim,
			    const float *pos_key, const float *pos_query, int width, float scale,
			    float *c2p, float *p2c);
rg_status rg_cpu_pool(const float *x, const int32_t *cu_seqlens, int n_seq, int H, rg_pooling mode,
		      bool normalize, float *out);
rg_status rg_cpu_gather_rows(const float *src, const int32_t *idx, int n_dst, int H, float *dst);
/* The same gather from a quantized weight (qweight.h's registry: an embedding table kept in its
 * GGUF blocks, w->N rows of w->K = H values): each row dequantized as the loader would
 * (rg_gguf_to_f32: bit-identical to the f32 table it replaces), one decode step's few rows on
 * the calling thread. RG_ERR_INVALID_INPUT for H other than the table's row or an index outside
 * [0, w->N); RG_ERR_UNSUPPORTED for a type rg_gguf_to_f32 does not read. Issue 30 (memory). */
struct rg_cpu_qweight;
rg_status rg_cpu_gather_rows_quant(const struct rg_cpu_qweight *w, const int32_t *idx, int n_dst,
				   int H, float *dst);
/* out[t] = scale * table[tokens[t]] + (pos ? pos[positions[t]] : 0), no position row for a token
 * equal to no_pos_token (ops.h rg_op_embed_scale_add). */
rg_status rg_cpu_embed_scale_add(const float *table, const int32_t *tokens, float scale,
				 const float *pos, const int32_t *positions, int32_t no_pos_token,
				 int n, int H, float *out);
/* Decoder ops (src/ops/cpu/decoder_cpu.c), as their rg_op_* twins. */
rg_status rg_cpu_add_norm(const float *x, float *residual, const float *gamma, const float *beta,
			  float eps, rg_norm_kind kind, int M, int N, float *out);
rg_status rg_cpu_rope(float *x, int ld, int n_tokens, int n_heads, int head_dim,
		      const int32_t *positions, const float *inv_freq, bool interleaved);
rg_status rg_cpu_rope_table(const int32_t *positions, int n_tokens, const float *inv_freq,
			    int head_dim, float *cos_sin);
rg_status rg_cpu_rope_table_scaled(const int32_t *positions, int n_tokens, const float *inv_freq,
				   const float *inv_freq_long, int32_t long_from, float mscale,
				   int head_dim, float *cos_sin);
rg_status rg_cpu_qk_norm(float *qkv, int ld, int n_tokens, int n_heads, int n_kv_heads,
			 int head_dim, const float *q_gamma, const float *k_gamma, float eps);
rg_status rg_cpu_rope_kv_write(float *qkv, int ld, int n_tokens, int n_heads, int n_kv_heads,
			       int head_dim, const float *cos_sin, bool interleaved,
			       const int32_t *slots, float *k_cache, float *v_cache,
			       int64_t n_slots);
rg_status rg_cpu_act_mul(const float *x, int M, int N, rg_act act, float *out);
rg_status rg_cpu_kv_write(const float *k, const float *v, int ld, const int32_t *slots,
			  int n_tokens, int kv_dim, float *k_cache, float *v_cache, int64_t n_slots);
rg_status rg_cpu_paged_attention(const rg_attn_desc *d, const float *q, int ldq,
				 const float *k_cache, const float *v_cache, float *out);
/* rg_op_sample_rows / rg_op_topk_rows (sample_cpu.c; the CPU twin of both topk methods is the
 * hierarchical one, exact like a sort). */
rg_status rg_cpu_sample_rows(const float *x, int M, int N, const rg_sample_args *a);
rg_status rg_cpu_topk_rows(const float *x, int M, int N, int k, void *work, int32_t *idx,
			   float *val);
/* rg_cpu_isa, rg_cpu_blas_core, rg_cpu_blas_coretype_fix (ops_cpu.c): public, ragged.h. */
/* Tests only: switch every later CPU op to the kernel table `isa` ("avx512", "avx2",
 * "generic"). RG_ERR_UNSUPPORTED when this CPU cannot run it. Not thread-safe against running
 * ops. */
RG_TEST_API rg_status rg_cpu_force_isa(const char *isa);
/* The library that runs GEMMs on prepared weights (rg_op_prepare_weight): "onednn 2.6.3
 * (avx512_core_amx)" or "openblas" (no oneDNN in this build, RAGGED_CPU_GEMM=openblas, or oneDNN
 * failed to start). Unprepared weights always use OpenBLAS. Static string. */
RG_TEST_API const char *rg_cpu_gemm_lib(void);
/* Threads of the process-wide CPU pool, the caller included (RAGGED_NUM_THREADS, else the CPUs
 * this process may use). */
RG_TEST_API int rg_cpu_num_threads(void);
#endif
