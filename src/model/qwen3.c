/* Qwen3 (transformers' Qwen3ForCausalLM; Qwen3-0.6B ... 32B dense): the Llama block with a
 * per-head RMSNorm on q and k (Qwen3Attention's q_norm / k_norm, weights of head_dim, applied
 * after the projections and before RoPE, eps rms_norm_eps), an explicit head_dim (which may
 * differ from hidden_size / num_attention_heads), no q/k/v biases unless attention_bias, and
 * sliding windows only with use_sliding_window (refused). GGUF "qwen3": llama.cpp's Llama names
 * plus blk.N.attn_q_norm / attn_k_norm, unpermuted (NEOX RoPE).
 *
 * Per layer: Llama's (llama.c), with rg_op_qk_norm between the QKV GEMM and RoPE. */
#include "model/layers.h"
#include "model/model.h"

static rg_status qwen3_hparams(rg_model *m, const rg_cfg_src *cf)
{
	const rg_llama_hp_opts o = {0};

	return rg_layer_llama_hparams(m, cf, &o);
}

static rg_status qwen3_load(rg_model *m, const rg_tsrc *src)
{
	return rg_llama_load(m, src, true);
}

const rg_arch rg_arch_qwen3 = {
	.model_type = "qwen3",
	.kind = RG_MODEL_DECODER,
	.gguf_arch = "qwen3",
	.gguf = &rg_llama_gguf_names_neox,
	.free_weights = rg_llama_free,
	.hparams = qwen3_hparams,
	.load = qwen3_load,
	.decode = rg_llama_forward,
};
