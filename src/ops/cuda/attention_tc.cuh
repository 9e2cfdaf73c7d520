/* Tensor-core variable-length attention for fp16 / bf16 (src/ops/cuda/attention_tc.cu), used by
 * rg_cuda_attention (attention.cu) when it applies. Internal to src/ops/cuda. */
#ifndef RG_OPS_CUDA_ATTENTION_TC_CUH
#define RG_OPS_CUDA_ATTENTION_TC_CUH

#include "ops/cuda/common.cuh"

/* True when rg_cuda_attention_tc can run this problem: dt F16 or BF16, head_dim 32, 64 or 128,
 * qkv and out 16-byte aligned. Otherwise the CUDA-core kernel of attention.cu must be used. */
bool rg_cuda_attention_tc_ok(rg_dtype dt, int head_dim, const void *qkv, const void *out);

/* True when rg_cuda_attention_tc can also add DeBERTa's disentangled terms (rg_attn_disent):
 * rg_cuda_attention_tc_ok and head_dim 32 or 64 (every DeBERTa-v2/v3 size uses 64; no head_dim
 * 128 instantiation: its 86 KiB of shared memory plus the 34.5 KiB of table windows would leave
 * one CTA per SM). Any idx, width and table alignment: the fast table windows need a monotone
 * idx, width % 8 == 0 and 16-byte aligned tables, and gather otherwise. */
bool rg_cuda_attention_tc_dis_ok(rg_dtype dt, int head_dim, const void *qkv, const void *out);

/* Same contract as rg_op_attention (src/ops/ops.h) for problems accepted by rg_cuda_attention_tc_ok
 * (and, with dis, rg_cuda_attention_tc_dis_ok); the caller (rg_cuda_attention) has already
 * validated the shapes, host cu_seqlens, rel_max and dis, and made the device current. qscale =
 * scale * log2(e); inv_scale = 1 / scale (the relative position bias, or DeBERTa's c2p + p2c, is
 * added to the raw scores times inv_scale; unused when rel_bias and dis are NULL). Launches on
 * c->stream; RG_ERR_CUDA on launch failure, RG_ERR_UNSUPPORTED when the device lacks the shared
 * memory (head_dim 128 needs ~86 KiB), RG_ERR_INTERNAL for dis on a problem that
 * rg_cuda_attention_tc_dis_ok refuses. */
rg_status rg_cuda_attention_tc(rg_cuda_ctx *c, rg_dtype dt, const void *qkv,
			       const int32_t *cu_seqlens, const int32_t *seg, const float *rel_bias,
			       int rel_max, const rg_attn_disent *dis, int n_seq, int max_seqlen,
			       int num_heads, int head_dim, float qscale, float inv_scale, void *out);

/* True when rg_cuda_prefill_attention_tc can run: dt F16 or BF16, head_dim 32, 64 or 128, the row
 * stride ld a multiple of 8 elements and q, k, v, out 16-byte aligned. */
bool rg_cuda_prefill_tc_ok(rg_dtype dt, int head_dim, const void *q, const void *k, const void *v,
			   int ld, const void *out);

/* Causal prefill attention of a decoder step on tensor cores (the CAUSAL instantiations of
 * attention_tc.cu), for each sequence s with n = cu_seqlens[s + 1] - cu_seqlens[s] >= fresh_min new
 * rows: out[t, head h] = softmax_j(scale * q[t, h] . K[j, h']) V[j, h'] over the sequence's keys j
 * at positions <= t's, h' = h / (num_heads / num_kv_heads).
 *  - paged == NULL: only "fresh" sequences (context_lens[s] == n: no cached keys) run, their keys
 *    and values read from k and v, rows of stride ld elements (the fused QKV output's column
 *    blocks: this step's keys and values, the values the cache holds);
 *  - paged != NULL (its block_tables, max_blocks_per_seq, block_size): every such sequence runs,
 *    its n rows at positions context_lens[s] - n .. context_lens[s] - 1, all its keys and values
 *    read from k_cache / v_cache (the layer's caches after this step's KV write, slots of
 *    num_kv_heads * head_dim) through the block table.
 * q: rows of stride ld; out: rows of num_heads * head_dim; rows of other sequences are not
 * written. cu_seqlens, context_lens device arrays; max_seqlen >= every running sequence's n
 * (host-computed). Scores and softmax in f32 (FlashAttention-2's online softmax). Launches on
 * c->stream; RG_ERR_CUDA on a launch failure. */
rg_status rg_cuda_prefill_attention_tc(rg_cuda_ctx *c, rg_dtype dt, const void *q, const void *k,
				       const void *v, int ld, const rg_attn_desc *paged,
				       const void *k_cache, const void *v_cache,
				       const int32_t *cu_seqlens, const int32_t *context_lens,
				       int fresh_min, int n_seq, int max_seqlen, int num_heads,
				       int num_kv_heads, int head_dim, float scale, void *out);

#endif
