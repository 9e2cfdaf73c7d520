/* CPU reference kernels (C11, OpenBLAS sgemm, OpenMP), float32 only. Same arguments and
 * semantics as the rg_op_* entry points in src/ops/ops.h, minus the backend. */
#ifndef RG_OPS_CPU_H
#define RG_OPS_CPU_H
#include <stdbool.h>
#include <stdint.h>
#include "ragged.h"
#include "model/config.h"

rg_status rg_cpu_embed_layernorm(const int32_t *tokens, const int32_t *positions, int n_tokens,
				 const float *word, const float *pos, const float *type0,
				 const float *gamma, const float *beta, float eps, int H, float *out);
rg_status rg_cpu_gemm(const float *A, const float *W, float *out, int M, int N, int K);
rg_status rg_cpu_gemm_bias_act(const float *A, const float *W, const float *bias, float *out,
			       int M, int N, int K, rg_act act);
rg_status rg_cpu_bias_act(float *x, const float *bias, int M, int N, rg_act act);
rg_status rg_cpu_bias_residual_layernorm(const float *x, const float *bias, const float *residual,
					 const float *gamma, const float *beta, float eps, int M,
					 int N, float *out);
rg_status rg_cpu_attention(const float *qkv, const int32_t *cu_seqlens, int n_seq, int max_seqlen,
			   int num_heads, int head_dim, float scale, const int32_t *seg, float *out);
rg_status rg_cpu_pool(const float *x, const int32_t *cu_seqlens, int n_seq, int H, rg_pooling mode,
		      bool normalize, float *out);
rg_status rg_cpu_gather_rows(const float *src, const int32_t *idx, int n_dst, int H, float *dst);
#endif
