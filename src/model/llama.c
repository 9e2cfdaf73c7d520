/* The Llama family (transformers' LlamaForCausalLM; Llama 2/3, SmolLM/SmolLM2), Mistral without a
 * sliding window, and Qwen2 (Llama plus q/k/v biases): RMSNorm, RoPE (rope_theta, Llama-3
 * rope_scaling), SwiGLU MLP, grouped-query attention, LM head tied to the embeddings or not (a
 * distinct lm_head.weight in the file is used even when tie_word_embeddings is true, as
 * transformers 5 loads it: rg_layer_load_embed_head). Hooks only: the block's builders are in
 * layers.c, shared with qwen3.c and phi3.c.
 *
 * Weights: q/k/v projections fused into one (qd + 2 kvd, H) GEMM weight (and bias for Qwen2),
 * gate and up into one (2I, H). RoPE inv_freq is computed at load in double (HF
 * _compute_default_rope_parameters / _compute_llama3_parameters) and kept as f32.
 * The RoPE pair layout: rotate_half ("neox") for Hugging Face checkpoints; interleaved pairs when
 * the tensor source says its q/k rows are permuted (GGUF "llama", llama.cpp's converter).
 *
 * Per layer (LlamaDecoderLayer.forward):
 *   h += delta; x = RMSNorm_in(h)               (delta: the previous layer's MLP; none at l = 0)
 *   delta = attention(x): qkv = x Wqkv^T (+ b); RoPE on Q and K + KV write (one op, the step's
 *           cos / sin table computed once before the first layer); causal paged attention
 *           (1/sqrt(hd)); ctx Wo^T
 *   h += delta; x = RMSNorm_post(h)
 *   delta = (silu(x Wg^T) * (x Wu^T)) Wd^T
 * then h += delta; x = RMSNorm_f(h) meets the LM head. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

static const char *const PREFIXES[] = {"model.", "", NULL};
static const char *const TOP[] = {"", NULL};

/* llama.cpp's tensor map for LLM_ARCH_LLAMA / LLM_ARCH_QWEN2 (and QWEN3's norms) */
static const rg_tensor_name GGUF_LAYER[] = {
	{"self_attn.q_proj", "attn_q"},	  {"self_attn.k_proj", "attn_k"},
	{"self_attn.v_proj", "attn_v"},	  {"self_attn.o_proj", "attn_output"},
	{"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
	{"mlp.gate_proj", "ffn_gate"},	  {"mlp.up_proj", "ffn_up"},
	{"mlp.down_proj", "ffn_down"},	  {"input_layernorm", "attn_norm"},
	{"post_attention_layernorm", "ffn_norm"}, {NULL, NULL},
};
static const rg_tensor_name GGUF_TOP[] = {
	{"embed_tokens", "token_embd"}, {"norm", "output_norm"}, {"lm_head", "output"},
	{NULL, NULL},
};
/* "llama": llama.cpp's converter permutes q/k rows for adjacent-pair RoPE */
const rg_tensor_names rg_llama_gguf_names = {GGUF_LAYER, GGUF_TOP, true};
/* "qwen2", "qwen3": converted unpermuted (NEOX RoPE) */
const rg_tensor_names rg_llama_gguf_names_neox = {GGUF_LAYER, GGUF_TOP, false};

/* Mistral's sliding_window W (e5-mistral-7b-instruct: 4096) is read as Phi-3's is: the served
 * context becomes min(max_position_embeddings, W), within which the window masks nothing
 * (transformers' mask keeps keys q - W < k <= q), so the forward stays exact. */
static rg_status llama_hparams(rg_model *m, const rg_cfg_src *cf)
{
	const bool mistral = !strcmp(m->dec.cfg.model_type, "mistral");
	const rg_llama_hp_opts o = {.qkv_bias = !strcmp(m->dec.cfg.model_type, "qwen2"),
				    .own_sliding_window = mistral};
	rg_decoder_config *c = &m->dec.cfg;
	int sw = 0;
	rg_status s;

	if ((s = rg_layer_llama_hparams(m, cf, &o)) != RG_OK || !mistral || !cf->root ||
	    !rg_cfg_has(cf->root, "sliding_window"))
		return s;
	if ((s = rg_cfg_int(cf->path, cf->root, "sliding_window", false, 0, 1, INT32_MAX, &sw)) !=
	    RG_OK)
		return s;
	if (sw < c->max_position_embeddings)
		c->max_position_embeddings = sw;
	return RG_OK;
}

static rg_llama_weights *lw(const rg_model *m)
{
	return m->weights;
}

rg_status rg_llama_load_top(rg_model *m, const rg_tsrc *src, rg_llama_weights **out)
{
	const rg_decoder_config *c = &m->dec.cfg;
	rg_llama_weights *w;
	rg_status s;

	*out = NULL;
	if (!(w = m->weights = calloc(1, sizeof(*w))) ||
	    !(w->layers = calloc((size_t)c->num_hidden_layers, sizeof(*w->layers))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	w->rope.mscale = 1.f;
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "embed_tokens.weight", TOP,
					  "lm_head.weight", true, &w->embed, &w->lm_head)) != RG_OK ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, "norm.weight", c->hidden_size, false,
				   (void **)&w->norm)) != RG_OK)
		return s;
	*out = w;
	return RG_OK;
}

rg_status rg_llama_load(rg_model *m, const rg_tsrc *src, bool qk_norm)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t H = c->hidden_size;
	rg_llama_weights *w;
	float *t;
	rg_status s;

	if ((s = rg_llama_load_top(m, src, &w)) != RG_OK)
		return s;
	if (!(t = rg_layer_rope_inv_freq(c)) ||
	    (s = rg_dec_upload(m, t, (size_t)c->head_dim / 2, false, (void **)&w->rope.inv_freq)) !=
		    RG_OK)
		return t ? s : rg_errorf(RG_ERR_OOM, "out of host memory");
	for (int l = 0; l < c->num_hidden_layers; l++) {
		rg_llama_layer *L = &w->layers[l];
		char n1[96], n2[96];

		snprintf(n1, sizeof(n1), "layers.%d.input_layernorm.weight", l);
		snprintf(n2, sizeof(n2), "layers.%d.post_attention_layernorm.weight", l);
		if ((s = rg_layer_load_vec(m, src, PREFIXES, n1, H, false, (void **)&L->in_norm)) ||
		    (s = rg_layer_load_vec(m, src, PREFIXES, n2, H, false,
					   (void **)&L->post_norm)) ||
		    (s = rg_layer_load_attn(m, src, PREFIXES, l, qk_norm, &L->attn)) ||
		    (s = rg_layer_load_swiglu(m, src, PREFIXES, l, &L->mlp)))
			return s;
	}
	return RG_OK;
}

static rg_status llama_load_weights(rg_model *m, const rg_tsrc *src)
{
	return rg_llama_load(m, src, false);
}

rg_status rg_llama_forward(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const float eps = (float)c->norm_eps;
	const rg_llama_weights *w = lw(m);
	void *h = m->dec.a[RG_D_HIDDEN], *x = m->dec.a[RG_D_NORMED], *delta = m->dec.a[RG_D_DELTA];
	rg_backend *be = m->be;
	rg_status s;

	/* the step's cos / sin once; every layer's RoPE reads them */
	if ((s = rg_op_gather_rows(be, w->embed, f->tokens, n, H, h)) != RG_OK ||
	    (s = rg_layer_rope_table(m, f, &w->rope)) != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		const rg_llama_layer *L = &w->layers[l];

		if ((s = rg_op_add_norm(be, l ? delta : NULL, h, L->in_norm, NULL, eps, RG_NORM_RMS,
					n, H, x)) != RG_OK ||
		    (s = rg_layer_attn_rope(m, f, l, &L->attn, x, eps, delta)) != RG_OK ||
		    (s = rg_op_add_norm(be, delta, h, L->post_norm, NULL, eps, RG_NORM_RMS, n, H,
					x)) != RG_OK ||
		    (s = rg_layer_ffn_swiglu(m, n, &L->mlp, x, delta)) != RG_OK)
			return rg_error_wrap(s, "layer %d", l);
	}
	return rg_op_add_norm(be, delta, h, w->norm, NULL, eps, RG_NORM_RMS, n, H, x);
}

void rg_llama_free(rg_model *m)
{
	rg_llama_weights *w = lw(m);

	rg_backend_dealloc(m->be, w->embed);
	rg_backend_dealloc(m->be, w->lm_head);
	rg_backend_dealloc(m->be, w->norm);
	rg_layer_free_rope(m, &w->rope);
	for (int l = 0; w->layers && l < m->dec.cfg.num_hidden_layers; l++) {
		rg_llama_layer *L = &w->layers[l];

		rg_backend_dealloc(m->be, L->in_norm);
		rg_backend_dealloc(m->be, L->post_norm);
		rg_layer_free_attn(m, &L->attn);
		rg_layer_free_swiglu(m, &L->mlp);
	}
	free(w->layers);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

#define RG_LLAMA_ARCH(var, type, gguf_type, names)                                                \
	const rg_arch var = {                                                                     \
		.model_type = type,                                                               \
		.kind = RG_MODEL_DECODER,                                                         \
		.gguf_arch = gguf_type,                                                           \
		.gguf = names,                                                                    \
		.free_weights = rg_llama_free,                                                    \
		.hparams = llama_hparams,                                                         \
		.load = llama_load_weights,                                                       \
		.decode = rg_llama_forward,                                                       \
	}
RG_LLAMA_ARCH(rg_arch_llama, "llama", "llama", &rg_llama_gguf_names);
RG_LLAMA_ARCH(rg_arch_mistral, "mistral", NULL, NULL); /* llama.cpp converts it to "llama" */
RG_LLAMA_ARCH(rg_arch_qwen2, "qwen2", "qwen2", &rg_llama_gguf_names_neox);
