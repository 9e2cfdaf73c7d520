/* Tensor-core variable-length attention for fp16 / bf16 (src/ops/cuda/attention_tc.cu), used by
 * rg_cuda_attention (attention.cu) when it applies. Internal to src/ops/cuda. */
#ifndef RG_OPS_CUDA_ATTENTION_TC_CUH
#define RG_OPS_CUDA_ATTENTION_TC_CUH

#include "ops/cuda/common.cuh"

/* True when rg_cuda_attention_tc can run this problem: dt F16 or BF16, head_dim 32, 64 or 128,
 * qkv and out 16-byte aligned. Otherwise the CUDA-core kernel of attention.cu must be used. */
bool rg_cuda_attention_tc_ok(rg_dtype dt, int head_dim, const void *qkv, const void *out);

/* Same contract as rg_op_attention (src/ops/ops.h) for problems accepted by rg_cuda_attention_tc_ok;
 * the caller (rg_cuda_attention) has already validated the shapes, host cu_seqlens and rel_max and
 * made the device current. qscale = scale * log2(e); inv_scale = 1 / scale (the relative position
 * bias is added to the raw scores as rel_bias * inv_scale; unused when rel_bias is NULL). Launches
 * on c->stream; RG_ERR_CUDA on launch failure, RG_ERR_UNSUPPORTED when the device lacks the
 * shared memory (head_dim 128 needs ~86 KiB). */
rg_status rg_cuda_attention_tc(rg_cuda_ctx *c, rg_dtype dt, const void *qkv,
			       const int32_t *cu_seqlens, const int32_t *seg, const float *rel_bias,
			       int rel_max, int n_seq, int max_seqlen, int num_heads, int head_dim,
			       float qscale, float inv_scale, void *out);

#endif
