/* Backend objects and the rg_op_* entry points: each checks its arguments once, then dispatches
 * through the backend's table (src/ops/backend.h) to the CPU kernels or the CUDA kernels. */
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/cpu/gemm_dnnl.h"
#include "ops/cpu/ops_cpu.h"
#ifdef RG_WITH_CUDA
#include "ops/cuda/ops_cuda.h"
#endif

struct rg_backend {
	rg_device dev;
	rg_dtype dt;               /* activations and weights as stored */
	rg_dtype gemm_dt;          /* prepared GEMM weights: dt, or bf16 over f32 storage on the CPU */
	const rg_backend_ops *ops; /* rg_cpu_backend_ops or the CUDA table */
	rg_backend_ctx *ctx;       /* the backend's own state; NULL on the CPU */
	bool capturing;            /* between capture_begin and capture_end */
	rg_status capture_st;      /* first op error while capturing (RG_OK: none) */
	char capture_msg[256];
};

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

static bool act_known(rg_act act)
{
	return act == RG_ACT_NONE || act == RG_ACT_GELU || act == RG_ACT_GELU_NEW ||
	       act == RG_ACT_RELU || act == RG_ACT_SILU;
}

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
	if (dev == RG_DEVICE_CPU && dt == RG_DTYPE_F16)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "the CPU backend has no fp16; use fp32, bf16 (on AVX512-BF16 or AMX "
				 "CPUs) or --device cuda");
	if (dev == RG_DEVICE_CPU && dt == RG_DTYPE_BF16 && !rg_dnnl_bf16_supported())
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "bf16 on the CPU needs oneDNN and a CPU with AVX512-BF16 or AMX "
				 "(GEMMs here: %s); use fp32", rg_cpu_gemm_lib());
#ifndef RG_WITH_CUDA
	if (dev == RG_DEVICE_CUDA)
		return rg_errorf(RG_ERR_UNSUPPORTED, "this build of ragged has no CUDA backend");
#endif
	be = calloc(1, sizeof(*be));
	if (!be)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	be->dev = dev;
	be->dt = dt;
	be->gemm_dt = dt;
	if (dev == RG_DEVICE_CPU)
		be->dt = RG_DTYPE_F32; /* bf16 on the CPU: f32 activations, bf16 GEMMs */
	be->ops = &rg_cpu_backend_ops;
#ifdef RG_WITH_CUDA
	if (dev == RG_DEVICE_CUDA) {
		rg_status st = rg_cuda_backend_init(device_index, dt, &be->ctx);
		if (st != RG_OK) {
			free(be);
			return st;
		}
		be->ops = rg_cuda_backend_ops();
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
	be->ops->free(be->ctx);
	free(be);
}

rg_device rg_backend_device(const rg_backend *be) { return be->dev; }
rg_dtype rg_backend_dtype(const rg_backend *be) { return be->dt; }

rg_status rg_backend_alloc(rg_backend *be, size_t bytes, void **ptr)
{
	return be->ops->alloc(be->ctx, bytes, ptr);
}

void rg_backend_dealloc(rg_backend *be, void *ptr)
{
	be->ops->dealloc(be->ctx, ptr);
}

rg_status rg_backend_upload(rg_backend *be, void *dst, const void *src_host, size_t bytes)
{
	return be->ops->upload(be->ctx, dst, src_host, bytes);
}

rg_status rg_backend_download(rg_backend *be, void *dst_host, const void *src, size_t bytes)
{
	return be->ops->download(be->ctx, dst_host, src, bytes);
}

rg_status rg_backend_upload_f32_as(rg_backend *be, void *dst, const float *src_host, size_t n,
				   rg_dtype dt)
{
	return be->ops->upload_f32_as(be->ctx, dst, src_host, n, dt);
}

rg_status rg_backend_zero(rg_backend *be, void *ptr, size_t bytes)
{
	return note(be, be->ops->zero(be->ctx, ptr, bytes));
}

rg_status rg_backend_host_alloc(rg_backend *be, size_t bytes, void **ptr)
{
	return be->ops->host_alloc(be->ctx, bytes, ptr);
}

void rg_backend_host_free(rg_backend *be, void *ptr)
{
	be->ops->host_free(be->ctx, ptr);
}

rg_status rg_backend_upload_async(rg_backend *be, void *dst, const void *src_pinned, size_t bytes)
{
	return note(be, be->ops->upload_async(be->ctx, dst, src_pinned, bytes));
}

rg_status rg_backend_download_async(rg_backend *be, void *dst_pinned, const void *src, size_t bytes)
{
	return note(be, be->ops->download_async(be->ctx, dst_pinned, src, bytes));
}

bool rg_backend_has_graphs(const rg_backend *be)
{
	return be->ops->capture_begin != NULL;
}

rg_status rg_backend_capture_begin(rg_backend *be)
{
	rg_status st;

	if (!be->ops->capture_begin)
		return rg_errorf(RG_ERR_UNSUPPORTED, "the %s backend has no graphs", be->ops->name);
	st = be->ops->capture_begin(be->ctx);
	if (st == RG_OK) {
		be->capturing = true;
		be->capture_st = RG_OK;
	}
	return st;
}

rg_status rg_backend_capture_end(rg_backend *be, rg_graph **out)
{
	rg_status st;
	bool failed;

	*out = NULL;
	if (!be->ops->capture_end)
		return rg_errorf(RG_ERR_UNSUPPORTED, "the %s backend has no graphs", be->ops->name);
	st = be->ops->capture_end(be->ctx, (void **)out);
	failed = be->capture_st != RG_OK;
	be->capturing = false;
	if (!failed)
		return st;
	if (*out)
		be->ops->graph_free(be->ctx, *out);
	*out = NULL;
	return rg_errorf(be->capture_st, "an op failed during graph capture: %s", be->capture_msg);
}

rg_status rg_backend_graph_launch(rg_backend *be, rg_graph *g)
{
	if (!be->ops->graph_launch || !g)
		return rg_errorf(RG_ERR_UNSUPPORTED, "no graph to launch on this backend");
	return be->ops->graph_launch(be->ctx, g);
}

void rg_backend_graph_free(rg_backend *be, rg_graph *g)
{
	if (be->ops->graph_free && g)
		be->ops->graph_free(be->ctx, g);
}

void rg_backend_set_exact_gelu(rg_backend *be, bool exact)
{
	if (be->ops->set_exact_gelu)
		be->ops->set_exact_gelu(be->ctx, exact);
}

rg_status rg_backend_sync(rg_backend *be)
{
	return be->ops->sync(be->ctx);
}

rg_status rg_backend_mem_info(rg_backend *be, size_t *used, size_t *total)
{
	return be->ops->mem_info(be->ctx, used, total);
}

unsigned long long rg_backend_gemm_plans(const rg_backend *be)
{
	return be->ops->gemm_plans ? be->ops->gemm_plans(be->ctx) : 0;
}

/* ---------------------------------------------------------------- ops: checks, then dispatch */

rg_status rg_op_embed_layernorm(rg_backend *be, const int32_t *tokens, const int32_t *positions,
				int n_tokens, const void *word, const void *pos, const void *type0,
				const float *gamma, const float *beta, float eps, int H, void *out)
{
	if (n_tokens < 0 || H <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "embed_layernorm: bad shape n_tokens=%d H=%d", n_tokens, H));
	if (n_tokens == 0)
		return RG_OK;
	return note(be, be->ops->embed_layernorm(be->ctx, be->dt, tokens, positions, n_tokens, word,
						 pos, type0, gamma, beta, eps, H, out));
}

/* M >= 0 rows, N > 0 outputs, K > 0 inputs and a known activation. */
static rg_status gemm_args(rg_backend *be, const char *op, int M, int N, int K, rg_act act)
{
	if (M < 0 || N <= 0 || K <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "%s: bad shape M=%d N=%d K=%d", op, M,
					  N, K));
	if (!act_known(act))
		return note(be, rg_errorf(RG_ERR_UNSUPPORTED, "%s: unknown activation %d", op,
					  (int)act));
	return RG_OK;
}

rg_status rg_op_gemm(rg_backend *be, const void *A, const void *W, void *out, int M, int N, int K)
{
	rg_status s = gemm_args(be, "gemm", M, N, K, RG_ACT_NONE);

	if (s != RG_OK || M == 0)
		return s;
	return note(be, be->ops->gemm(be->ctx, be->dt, A, W, out, M, N, K));
}

rg_status rg_op_prepare_weight(rg_backend *be, void *W, int N, int K)
{
	if (!W || N <= 0 || K <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prepare_weight: bad shape N=%d K=%d", N, K);
	return be->ops->prepare_weight(be->ctx, be->gemm_dt, W, N, K);
}

bool rg_backend_qtype_supported(const rg_backend *be, int type)
{
	return be->ops->prepare_qweight && be->ops->prepare_qweight(NULL, NULL, type, 0, 0) == RG_OK;
}

bool rg_backend_qparts_supported(const rg_backend *be)
{
	return be->ops->prepare_qweight_parts != NULL;
}

rg_status rg_op_prepare_qweight_parts(rg_backend *be, void *W, int n, const int *types,
				      const int *rows, int K)
{
	if (!W || n < 1 || !types || !rows || K <= 0 || K % 32)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prepare_qweight_parts: bad shape n=%d K=%d",
				 n, K);
	if (!be->ops->prepare_qweight_parts)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s backend: no mixed-type quantized weights",
				 be->ops->name);
	return be->ops->prepare_qweight_parts(be->ctx, W, n, types, rows, K);
}

rg_status rg_op_prepare_qweight(rg_backend *be, void *W, int type, int N, int K)
{
	if (!W || N <= 0 || K <= 0 || K % 32)
		return rg_errorf(RG_ERR_INVALID_INPUT, "prepare_qweight: bad shape N=%d K=%d", N, K);
	if (!be->ops->prepare_qweight)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s backend: no quantized weights",
				 be->ops->name);
	return be->ops->prepare_qweight(be->ctx, W, type, N, K);
}

rg_status rg_op_gemm_bias_act(rg_backend *be, const void *A, const void *W, const void *bias,
			      void *out, int M, int N, int K, rg_act act)
{
	rg_status s = gemm_args(be, "gemm_bias_act", M, N, K, act);

	if (s != RG_OK || M == 0)
		return s;
	return note(be, be->ops->gemm_bias_act(be->ctx, be->dt, A, W, bias, out, M, N, K, act));
}

rg_status rg_op_bias_act(rg_backend *be, void *x, const float *bias, int M, int N, rg_act act)
{
	rg_status s = gemm_args(be, "bias_act", M, N, 1, act);

	if (s != RG_OK || M == 0)
		return s;
	return note(be, be->ops->bias_act(be->ctx, be->dt, x, bias, M, N, act));
}

rg_status rg_op_bias_residual_layernorm(rg_backend *be, const void *x, const float *bias,
					const void *residual, const float *gamma, const float *beta,
					float eps, int M, int N, void *out)
{
	if (M < 0 || N <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "bias_residual_layernorm: bad shape M=%d N=%d", M, N));
	if (M == 0)
		return RG_OK;
	return note(be, be->ops->bias_residual_layernorm(be->ctx, be->dt, x, bias, residual, gamma,
							 beta, eps, M, N, out));
}

rg_status rg_op_attention(rg_backend *be, const rg_attn_desc *d, const void *qkv, void *out)
{
	const rg_attn_disent *dis;

	if (!d)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "attention: NULL descriptor"));
	dis = d->dis;
	if (d->n_seq < 0 || d->max_seqlen_q < 0 || d->num_heads <= 0 || d->head_dim <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "attention: bad shape n_seq=%d max_seqlen=%d heads=%d "
					  "head_dim=%d",
					  d->n_seq, d->max_seqlen_q, d->num_heads, d->head_dim));
	if (d->causal || (d->num_kv_heads && d->num_kv_heads != d->num_heads) || d->block_tables)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "attention: the packed op is bidirectional with equal KV heads "
					  "and no block table (causal %d, %d KV heads of %d; "
					  "rg_op_paged_attention takes the causal, grouped or paged kind)",
					  (int)d->causal, d->num_kv_heads, d->num_heads));
	if (d->rel_bias && d->rel_max < 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "attention: rel_max %d < 0",
					  d->rel_max));
	if (dis && (d->rel_bias || dis->width <= 0 || dis->R < 0 || !dis->idx ||
		    (!dis->c2p && !dis->p2c)))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "attention: disentangled terms need width > 0 (%d), R >= 0 "
					  "(%d), an index table, a c2p or p2c table and no rel_bias",
					  dis->width, dis->R));
	if (d->n_seq == 0)
		return RG_OK;
	return note(be, be->ops->attention(be->ctx, be->dt, qkv, d->cu_seqlens_q, d->cu_seqlens_q_h,
					   d->n_seq, d->max_seqlen_q, d->num_heads, d->head_dim,
					   d->scale, d->seg, d->rel_bias, d->rel_max, dis, out));
}

rg_status rg_op_rel_tables(rg_backend *be, const void *qkv, int n_tokens, int num_heads,
			   int head_dim, const void *pos_key, const void *pos_query, int width,
			   float scale, void *c2p, void *p2c)
{
	if (n_tokens < 0 || num_heads <= 0 || head_dim <= 0 || width <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rel_tables: bad shape n_tokens=%d heads=%d head_dim=%d "
					  "width=%d",
					  n_tokens, num_heads, head_dim, width));
	if ((pos_key && !c2p) || (pos_query && !p2c))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rel_tables: a projected table without its output"));
	if (n_tokens == 0 || (!pos_key && !pos_query))
		return RG_OK;
	return note(be, be->ops->rel_tables(be->ctx, be->dt, qkv, n_tokens, num_heads, head_dim,
					    pos_key, pos_query, width, scale, c2p, p2c));
}

rg_status rg_op_pool(rg_backend *be, const void *x, const int32_t *cu_seqlens, int n_seq, int H,
		     rg_pooling mode, bool normalize, float *out)
{
	if (n_seq < 0 || H <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "pool: bad shape n_seq=%d H=%d", n_seq,
					  H));
	if (mode != RG_POOL_MEAN && mode != RG_POOL_CLS && mode != RG_POOL_MAX)
		return note(be, rg_errorf(RG_ERR_UNSUPPORTED, "pool: unknown pooling mode %d",
					  (int)mode));
	if (n_seq == 0)
		return RG_OK;
	return note(be, be->ops->pool(be->ctx, be->dt, x, cu_seqlens, n_seq, H, mode, normalize, out));
}

rg_status rg_op_embed_scale_add(rg_backend *be, const void *table, const int32_t *tokens,
				float scale, const void *pos, const int32_t *positions,
				int32_t no_pos_token, int n, int H, void *out)
{
	if (n < 0 || H <= 0 || !table || !tokens || (pos && !positions) || !out)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "embed_scale_add: bad arguments n=%d H=%d", n, H));
	if (n == 0)
		return RG_OK;
	if (!be->ops->embed_scale_add)
		return note(be, rg_errorf(RG_ERR_UNSUPPORTED, "embed_scale_add: not on this backend"));
	return note(be, be->ops->embed_scale_add(be->ctx, be->dt, table, tokens, scale, pos,
						 positions, no_pos_token, n, H, out));
}

rg_status rg_op_gather_rows(rg_backend *be, const void *src, const int32_t *idx, int n_dst, int H,
			    void *dst)
{
	if (n_dst < 0 || H <= 0)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "gather_rows: bad shape n_dst=%d H=%d",
					  n_dst, H));
	if (n_dst == 0)
		return RG_OK;
	return note(be, be->ops->gather_rows(be->ctx, be->dt, src, idx, n_dst, H, dst));
}

/* ---------------------------------------------------------------- decoder ops */

/* The backend's entry for a decoder op, or RG_ERR_UNSUPPORTED naming the op and the backend. */
#define RG_DEC_OP(be, field)                                                                      \
	((be)->ops->field ? RG_OK                                                                 \
			  : note((be), rg_errorf(RG_ERR_UNSUPPORTED,                              \
						 "%s: not implemented on the %s backend yet",     \
						 #field, (be)->ops->name)))

rg_status rg_op_add_norm(rg_backend *be, const void *x, void *residual, const float *gamma,
			 const float *beta, float eps, rg_norm_kind kind, int M, int N, void *out)
{
	rg_status s;

	if (M < 0 || N <= 0 || !residual || !gamma || !out || !(eps >= 0.f))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "add_norm: bad arguments M=%d N=%d eps=%g", M, N,
					  (double)eps));
	if (kind != RG_NORM_LAYER && kind != RG_NORM_RMS)
		return note(be, rg_errorf(RG_ERR_UNSUPPORTED, "add_norm: unknown norm %d", (int)kind));
	if (out == residual)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "add_norm: out aliases residual"));
	if ((s = RG_DEC_OP(be, add_norm)) != RG_OK || M == 0)
		return s;
	return note(be, be->ops->add_norm(be->ctx, be->dt, x, residual, gamma, beta, eps, kind, M,
					  N, out));
}

rg_status rg_op_rope(rg_backend *be, void *x, int ld, int n_tokens, int n_heads, int head_dim,
		     const int32_t *positions, const float *inv_freq, bool interleaved)
{
	rg_status s;

	if (n_tokens < 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 ||
	    ld < n_heads * head_dim || !positions || !inv_freq)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rope: bad shape n_tokens=%d heads=%d head_dim=%d ld=%d",
					  n_tokens, n_heads, head_dim, ld));
	if ((s = RG_DEC_OP(be, rope)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->rope(be->ctx, be->dt, x, ld, n_tokens, n_heads, head_dim, positions,
				      inv_freq, interleaved));
}

rg_status rg_op_rope_table(rg_backend *be, const int32_t *positions, int n_tokens,
			   const float *inv_freq, int head_dim, float *cos_sin)
{
	rg_status s;

	if (n_tokens < 0 || head_dim <= 0 || head_dim % 2 || !positions || !inv_freq || !cos_sin)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rope_table: bad arguments n_tokens=%d head_dim=%d",
					  n_tokens, head_dim));
	if ((s = RG_DEC_OP(be, rope_table)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->rope_table(be->ctx, positions, n_tokens, inv_freq, NULL,
					    INT32_MAX, 1.f, head_dim, cos_sin));
}

rg_status rg_op_rope_table_scaled(rg_backend *be, const int32_t *positions, int n_tokens,
				  const float *inv_freq, const float *inv_freq_long,
				  int32_t long_from, float mscale, int head_dim, float *cos_sin)
{
	rg_status s;

	if (n_tokens < 0 || head_dim <= 0 || head_dim % 2 || !positions || !inv_freq ||
	    !cos_sin || !(mscale > 0.f && mscale < 1e30f))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rope_table_scaled: bad arguments n_tokens=%d head_dim=%d "
					  "mscale=%g",
					  n_tokens, head_dim, (double)mscale));
	if ((s = RG_DEC_OP(be, rope_table)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->rope_table(be->ctx, positions, n_tokens, inv_freq, inv_freq_long,
					    long_from, mscale, head_dim, cos_sin));
}

rg_status rg_op_qk_norm(rg_backend *be, void *qkv, int ld, int n_tokens, int n_heads,
			int n_kv_heads, int head_dim, const float *q_gamma, const float *k_gamma,
			float eps)
{
	rg_status s;

	if (n_tokens < 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 ||
	    (int64_t)ld < ((int64_t)n_heads + n_kv_heads) * head_dim || !qkv || !q_gamma ||
	    !k_gamma || !(eps >= 0.f))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "qk_norm: bad shape n_tokens=%d heads=%d kv_heads=%d "
					  "head_dim=%d ld=%d eps=%g",
					  n_tokens, n_heads, n_kv_heads, head_dim, ld, (double)eps));
	if ((s = RG_DEC_OP(be, qk_norm)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->qk_norm(be->ctx, be->dt, qkv, ld, n_tokens, n_heads, n_kv_heads,
					 head_dim, q_gamma, k_gamma, eps));
}

rg_status rg_op_rope_kv_write(rg_backend *be, void *qkv, int ld, int n_tokens, int n_heads,
			      int n_kv_heads, int head_dim, const float *cos_sin, bool interleaved,
			      const int32_t *slots, void *k_cache, void *v_cache, int64_t n_slots)
{
	rg_status s;

	if (n_tokens < 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || head_dim % 2 ||
	    (int64_t)ld < ((int64_t)n_heads + 2 * (int64_t)n_kv_heads) * head_dim ||
	    n_slots < 0 || !qkv || !cos_sin || !slots || !k_cache || !v_cache)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "rope_kv_write: bad shape n_tokens=%d heads=%d kv_heads=%d "
					  "head_dim=%d ld=%d",
					  n_tokens, n_heads, n_kv_heads, head_dim, ld));
	if ((s = RG_DEC_OP(be, rope_kv_write)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->rope_kv_write(be->ctx, be->dt, qkv, ld, n_tokens, n_heads,
					       n_kv_heads, head_dim, cos_sin, interleaved, slots,
					       k_cache, v_cache, n_slots));
}

rg_status rg_op_act_mul(rg_backend *be, const void *x, int M, int N, rg_act act, void *out)
{
	rg_status s;

	if (M < 0 || N <= 0 || (unsigned)act > RG_ACT_SILU)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "act_mul: bad shape M=%d N=%d or "
					  "activation %d", M, N, (int)act));
	if ((s = RG_DEC_OP(be, act_mul)) != RG_OK || M == 0)
		return s;
	return note(be, be->ops->act_mul(be->ctx, be->dt, x, M, N, act, out));
}

rg_status rg_op_act_mul_gemm(rg_backend *be, const void *x, const void *W, void *out, int M,
			     int N, int K, rg_act act, void *scratch)
{
	rg_status s;

	if (M < 0 || N <= 0 || K <= 0 || (unsigned)act > RG_ACT_SILU || !x || !W || !out ||
	    !scratch)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "act_mul_gemm: bad shape M=%d N=%d "
					  "K=%d or activation %d", M, N, K, (int)act));
	if (M == 0)
		return RG_OK;
	if (be->ops->act_mul_gemm) {
		bool done = false;

		s = be->ops->act_mul_gemm(be->ctx, be->dt, x, W, out, M, N, K, act, &done);
		if (s != RG_OK || done)
			return note(be, s);
	}
	if ((s = rg_op_act_mul(be, x, M, K, act, scratch)) != RG_OK)
		return s;
	return rg_op_gemm(be, scratch, W, out, M, N, K);
}

rg_status rg_op_kv_write(rg_backend *be, const void *k, const void *v, int ld,
			 const int32_t *slots, int n_tokens, int kv_dim, void *k_cache,
			 void *v_cache, int64_t n_slots)
{
	rg_status s;

	if (n_tokens < 0 || kv_dim <= 0 || ld < kv_dim || n_slots < 0 || !slots || !k_cache ||
	    !v_cache)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "kv_write: bad shape n_tokens=%d kv_dim=%d ld=%d", n_tokens,
					  kv_dim, ld));
	if ((s = RG_DEC_OP(be, kv_write)) != RG_OK || n_tokens == 0)
		return s;
	return note(be, be->ops->kv_write(be->ctx, be->dt, k, v, ld, slots, n_tokens, kv_dim,
					  k_cache, v_cache, n_slots));
}

rg_status rg_op_paged_attention(rg_backend *be, const rg_attn_desc *d, const void *q, int ldq,
				const void *k_cache, const void *v_cache, void *out)
{
	rg_status s;

	if (!d || !q || !k_cache || !v_cache || !out)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "paged_attention: NULL argument"));
	if (!d->causal)
		return note(be, rg_errorf(RG_ERR_UNSUPPORTED,
					  "paged_attention: only causal attention reads a paged "
					  "cache"));
	if (d->n_seq < 0 || d->num_heads <= 0 || d->num_kv_heads <= 0 || d->head_dim <= 0 ||
	    d->num_heads % d->num_kv_heads || ldq < d->num_heads * d->head_dim ||
	    d->block_size < 1 || d->max_blocks_per_seq < 1 || d->n_blocks < 1 ||
	    d->max_context_len < 0 || !d->cu_seqlens_q || !d->cu_seqlens_q_h || !d->context_lens ||
	    !d->context_lens_h || !d->block_tables)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "paged_attention: bad descriptor (n_seq=%d heads=%d "
					  "kv_heads=%d head_dim=%d ldq=%d block_size=%d "
					  "max_blocks_per_seq=%d n_blocks=%lld)",
					  d->n_seq, d->num_heads, d->num_kv_heads, d->head_dim, ldq,
					  d->block_size, d->max_blocks_per_seq,
					  (long long)d->n_blocks));
	if ((int64_t)d->max_context_len > (int64_t)d->max_blocks_per_seq * d->block_size)
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "paged_attention: max_context_len %d is over the %d blocks "
					  "of %d a table holds",
					  d->max_context_len, d->max_blocks_per_seq, d->block_size));
	if (d->seg || d->dis || (d->rel_bias && d->rel_max < 0))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "paged_attention: takes no segment ids or disentangled terms, "
					  "and a rel_bias needs rel_max >= 0 (%d)", d->rel_max));
	if ((s = RG_DEC_OP(be, paged_attention)) != RG_OK || d->n_seq == 0)
		return s;
	return note(be, be->ops->paged_attention(be->ctx, be->dt, d, q, ldq, k_cache, v_cache, out));
}

rg_status rg_op_copy_blocks(rg_backend *be, void *pool, size_t block_bytes, int n_pools,
			    size_t pool_stride, const int32_t *src_h, const int32_t *dst_h, int n)
{
	rg_status s;

	if (n < 0 || n_pools < 1 || (n > 0 && (!pool || !src_h || !dst_h)))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "copy_blocks: bad arguments n=%d n_pools=%d", n, n_pools));
	if ((s = RG_DEC_OP(be, copy_blocks)) != RG_OK || n == 0 || block_bytes == 0)
		return s;
	return note(be, be->ops->copy_blocks(be->ctx, pool, block_bytes, n_pools, pool_stride,
					     src_h, dst_h, n));
}

rg_status rg_op_argmax_rows(rg_backend *be, const void *x, int M, int N, int32_t *ids,
			    float *logprob)
{
	rg_status s;

	if (M < 0 || N <= 0 || (M > 0 && (!x || !ids)))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT, "argmax_rows: bad arguments M=%d N=%d",
					  M, N));
	if ((s = RG_DEC_OP(be, argmax_rows)) != RG_OK || M == 0)
		return s;
	return note(be, be->ops->argmax_rows(be->ctx, be->dt, x, M, N, ids, logprob));
}

size_t rg_sample_work_bytes(int M, int N)
{
	return M > 0 && N > 0 ? (size_t)M * (size_t)N * 8 : 0;
}

rg_status rg_op_sample_rows(rg_backend *be, const void *x, int M, int N, const rg_sample_args *a)
{
	rg_status s;

	if (M < 0 || N <= 0 || !a || (M > 0 && (!x || !a->rows || !a->ids || !a->work)) ||
	    a->top_n < 0 || a->top_n > RG_SAMPLE_MAX_TOP ||
	    (a->top_n > 0 && (!a->top_ids || !a->top_logprobs)) ||
	    (a->pen_off && !a->pen) || (a->bias_off && !a->bias))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "sample_rows: bad arguments M=%d N=%d top_n=%d", M, N,
					  a ? a->top_n : -1));
	if ((s = RG_DEC_OP(be, sample_rows)) != RG_OK || M == 0)
		return s;
	return note(be, be->ops->sample_rows(be->ctx, be->dt, x, M, N, a));
}

/* (M, N) keys, values in and out for the sort, and 32 MiB for CUB's temporary storage */
size_t rg_topk_work_bytes(int M, int N)
{
	return M > 0 && N > 0 ? (size_t)M * (size_t)N * 16 + ((size_t)32 << 20) : 0;
}

rg_status rg_op_topk_rows(rg_backend *be, const void *x, int M, int N, int k,
			  rg_topk_method method, void *work, int32_t *idx, float *val)
{
	rg_status s;

	if (M < 0 || N <= 0 || k < 1 || k > N || (method != RG_TOPK_HIER && method != RG_TOPK_SORT) ||
	    (M > 0 && (!x || !idx || !work)))
		return note(be, rg_errorf(RG_ERR_INVALID_INPUT,
					  "topk_rows: bad arguments M=%d N=%d k=%d", M, N, k));
	if ((s = RG_DEC_OP(be, topk_rows)) != RG_OK || M == 0)
		return s;
	return note(be, be->ops->topk_rows(be->ctx, be->dt, x, M, N, k, method, work, idx, val));
}
