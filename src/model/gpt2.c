/* GPT-2 (Radford et al. 2019; transformers' GPT2LMHeadModel): learned token and position
 * embeddings, pre-LayerNorm blocks of causal self-attention and a gelu_new MLP, a final
 * LayerNorm, and the LM head tied to the token embeddings (wte; a distinct lm_head.weight in the
 * file serves instead, as transformers 5 loads it: rg_layer_load_embed_head). GPT-2 small to XL, DistilGPT2.
 *
 * Checkpoints store the linear layers as Conv1D, weight [in, out]; the load transposes them into
 * the [out, in] layout rg_op_gemm reads. Names are "h.0.attn.c_attn.weight" or, in
 * GPT2LMHeadModel checkpoints, under "transformer.".
 *
 * Per layer (the op sequence of GPT2Block.forward):
 *   h += delta; x = LN1(h)                     (delta: the previous block's MLP, or wpe[pos])
 *   qkv = x Wqkv^T + b; KV write; ctx = causal paged attention (scale 1/sqrt(hd), / (l + 1)
 *   with scale_attn_by_inverse_layer_idx)
 *   delta = ctx Wo^T + bo; h += delta; x = LN2(h)
 *   delta = gelu_new(x Wfc^T + bfc) Wproj^T + bproj
 * and at the end h += delta; x = LN_f(h), whose wanted rows meet the LM head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

typedef struct rg_gpt2_layer {
	float *ln1_g, *ln1_b;  /* (H) f32 */
	void *qkv_w, *qkv_b;   /* (3H, H), (3H) act */
	void *o_w, *o_b;       /* (H, H), (H) act */
	float *ln2_g, *ln2_b;  /* (H) f32 */
	void *fc_w, *fc_b;     /* (I, H), (I) act */
	void *proj_w, *proj_b; /* (H, I), (H) act */
} rg_gpt2_layer;

typedef struct rg_gpt2_weights {
	void *wte;             /* (vocab, H) act: embeddings and the tied LM head */
	void *lm_head;         /* (vocab, H) act: a distinct lm_head.weight in the file, or NULL */
	void *wpe;             /* (n_positions, H) act */
	float *lnf_g, *lnf_b;  /* (H) f32 */
	rg_gpt2_layer *layers; /* (n_layer) */
} rg_gpt2_weights;

static const char *const PREFIXES[] = {"", "transformer.", NULL};
static const char *const TOP[] = {"", NULL};

/* GPT2Config from config.json (GPT-2 has no GGUF path here: rg_arch_gpt2.gguf_arch is NULL). */
static rg_status gpt2_hparams(rg_model *m, const rg_cfg_src *cf)
{
	rg_decoder_config *c = &m->dec.cfg;
	const char *path = cf->path, *act;
	struct json_object *root = cf->root;
	bool on;
	int inner;
	rg_status s;

	/* GPT2Config's names and defaults */
	if ((s = rg_cfg_int(path, root, "vocab_size", false, 50257, 1, 1 << 24, &c->vocab_size)) ||
	    (s = rg_cfg_int(path, root, "n_embd", false, 768, 1, 1 << 20, &c->hidden_size)) ||
	    (s = rg_cfg_int(path, root, "n_head", false, 12, 1, 1 << 16, &c->num_attention_heads)) ||
	    (s = rg_cfg_int(path, root, "n_layer", false, 12, 1, 1 << 16, &c->num_hidden_layers)) ||
	    (s = rg_cfg_int(path, root, "n_positions", false, 1024, 1, 1 << 24,
			    &c->max_position_embeddings)) ||
	    (s = rg_cfg_int(path, root, "n_inner", false, 4 * c->hidden_size, 1, 1 << 24, &inner)) ||
	    (s = rg_cfg_double(path, root, "layer_norm_epsilon", 1e-5, 0.0, 1.0, &c->norm_eps)) ||
	    (s = rg_cfg_str(path, root, "activation_function", "gelu_new", &act)) ||
	    (s = rg_cfg_bool(path, root, "scale_attn_weights", true, &c->scale_attn_weights)) ||
	    (s = rg_cfg_bool(path, root, "scale_attn_by_inverse_layer_idx", false,
			     &c->scale_attn_by_inverse_layer_idx)) ||
	    (s = rg_cfg_token_id(path, root, "bos_token_id", &c->bos_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "eos_token_id", &c->eos_token_id)))
		return s;
	c->intermediate_size = inner;
	if (c->hidden_size % c->num_attention_heads)
		return rg_errorf(RG_ERR_FORMAT, "%s: n_embd %d is not divisible by n_head %d", path,
				 c->hidden_size, c->num_attention_heads);
	if ((s = rg_cfg_act(path, "activation_function", act,
			    1u << RG_ACT_GELU_NEW | 1u << RG_ACT_GELU | 1u << RG_ACT_RELU,
			    &c->hidden_act, &c->act_name)) != RG_OK)
		return s;
	if ((s = rg_cfg_bool(path, root, "add_cross_attention", false, &on)) != RG_OK)
		return s;
	if (on)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: add_cross_attention = true is not supported (encoder-decoder "
				 "GPT-2)", path);
	c->num_key_value_heads = c->num_attention_heads;
	c->head_dim = c->hidden_size / c->num_attention_heads;
	c->tie_word_embeddings = true; /* GPT2LMHeadModel always ties lm_head to wte */
	return RG_OK;
}

static rg_gpt2_weights *gw(const rg_model *m)
{
	return m->weights;
}

/* A Conv1D weight [in, out] as the Linear layout (out, in), uploaded and prepared for the GEMM. */
static rg_status load_conv1d(rg_model *m, const rg_tsrc *src, const char *name, int in, int out,
			     void **dst)
{
	float *w, *t;
	rg_status s;

	if ((s = rg_tsrc_get(src, PREFIXES, name, in, out, &w)) != RG_OK)
		return s;
	t = malloc((size_t)in * out * sizeof(float));
	if (!t) {
		free(w);
		return rg_errorf(RG_ERR_OOM, "out of host memory for %s", name);
	}
	for (int i = 0; i < in; i++)
		for (int o = 0; o < out; o++)
			t[(size_t)o * in + i] = w[(size_t)i * out + o];
	free(w);
	if (rg_layer_quantizes(m, out, in)) { /* rg_model_params.quantize (no GGUF path here) */
		s = rg_layer_upload_q8_0(m, t, out, in, dst);
		free(t);
		return s;
	}
	if ((s = rg_dec_upload(m, t, (size_t)in * out, true, dst)) != RG_OK)
		return s;
	return rg_op_prepare_weight(m->be, *dst, out, in);
}

/* A 1-D tensor of n values, in the compute dtype (act) or f32. */
static rg_status load_vec(rg_model *m, const rg_tsrc *src, const char *name, int n, bool act,
			  void **dst)
{
	float *v;
	rg_status s;

	if ((s = rg_tsrc_get(src, PREFIXES, name, n, -1, &v)) != RG_OK)
		return s;
	return rg_dec_upload(m, v, (size_t)n, act, dst);
}

static rg_status gpt2_load_weights(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, I = c->intermediate_size;
	rg_gpt2_weights *w;
	float *t;
	rg_status s;

	if (!(w = m->weights = calloc(1, sizeof(*w))) ||
	    !(w->layers = calloc((size_t)c->num_hidden_layers, sizeof(*w->layers))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "wte.weight", TOP, "lm_head.weight",
					  true, &w->wte, &w->lm_head)) != RG_OK ||
	    (s = rg_tsrc_get(src, PREFIXES, "wpe.weight", c->max_position_embeddings, H, &t)) !=
		    RG_OK ||
	    (s = rg_dec_upload(m, t, (size_t)c->max_position_embeddings * H, true, &w->wpe)) !=
		    RG_OK ||
	    (s = load_vec(m, src, "ln_f.weight", H, false, (void **)&w->lnf_g)) != RG_OK ||
	    (s = load_vec(m, src, "ln_f.bias", H, false, (void **)&w->lnf_b)) != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		rg_gpt2_layer *L = &w->layers[l];
		char n[16][96];
		const char *mod[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
				     "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
				     "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
				     "mlp.c_proj.weight", "mlp.c_proj.bias"};

		for (int k = 0; k < 12; k++)
			snprintf(n[k], sizeof(n[k]), "h.%d.%s", l, mod[k]);
		if ((s = load_vec(m, src, n[0], H, false, (void **)&L->ln1_g)) != RG_OK ||
		    (s = load_vec(m, src, n[1], H, false, (void **)&L->ln1_b)) != RG_OK ||
		    (s = load_conv1d(m, src, n[2], H, 3 * H, &L->qkv_w)) != RG_OK ||
		    (s = load_vec(m, src, n[3], 3 * H, true, &L->qkv_b)) != RG_OK ||
		    (s = load_conv1d(m, src, n[4], H, H, &L->o_w)) != RG_OK ||
		    (s = load_vec(m, src, n[5], H, true, &L->o_b)) != RG_OK ||
		    (s = load_vec(m, src, n[6], H, false, (void **)&L->ln2_g)) != RG_OK ||
		    (s = load_vec(m, src, n[7], H, false, (void **)&L->ln2_b)) != RG_OK ||
		    (s = load_conv1d(m, src, n[8], H, I, &L->fc_w)) != RG_OK ||
		    (s = load_vec(m, src, n[9], I, true, &L->fc_b)) != RG_OK ||
		    (s = load_conv1d(m, src, n[10], I, H, &L->proj_w)) != RG_OK ||
		    (s = load_vec(m, src, n[11], H, true, &L->proj_b)) != RG_OK)
			return s;
	}
	return RG_OK;
}

static rg_status gpt2_forward(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, I = c->intermediate_size, n = f->n;
	const float eps = (float)c->norm_eps;
	const rg_gpt2_weights *w = gw(m);
	void *h = m->dec.a[RG_D_HIDDEN], *x = m->dec.a[RG_D_NORMED], *qkv = m->dec.a[RG_D_QKV];
	void *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA], *inter = m->dec.a[RG_D_INTER];
	rg_backend *be = m->be;
	rg_status s;

	/* h = wte[tokens]; delta = wpe[positions] (added by the first norm) */
	if ((s = rg_op_gather_rows(be, w->wte, f->tokens, n, H, h)) != RG_OK ||
	    (s = rg_op_gather_rows(be, w->wpe, f->positions, n, H, delta)) != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		const rg_gpt2_layer *L = &w->layers[l];
		float scale = c->scale_attn_weights ? 1.f / sqrtf((float)c->head_dim) : 1.f;

		if (c->scale_attn_by_inverse_layer_idx)
			scale /= (float)(l + 1);
		if ((s = rg_op_add_norm(be, delta, h, L->ln1_g, L->ln1_b, eps, RG_NORM_LAYER, n, H,
					x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, x, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_attention(m, f, l, qkv, scale, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, ctx, L->o_w, L->o_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_add_norm(be, delta, h, L->ln2_g, L->ln2_b, eps, RG_NORM_LAYER, n, H,
					x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, x, L->fc_w, L->fc_b, inter, n, I, H,
					     c->hidden_act)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, inter, L->proj_w, L->proj_b, delta, n, H, I,
					     RG_ACT_NONE)) != RG_OK)
			return rg_error_wrap(s, "layer %d", l);
	}
	return rg_op_add_norm(be, delta, h, w->lnf_g, w->lnf_b, eps, RG_NORM_LAYER, n, H, x);
}

static void gpt2_free_weights(rg_model *m)
{
	rg_gpt2_weights *w = gw(m);

	rg_backend_dealloc(m->be, w->wte);
	rg_backend_dealloc(m->be, w->lm_head);
	rg_backend_dealloc(m->be, w->wpe);
	rg_backend_dealloc(m->be, w->lnf_g);
	rg_backend_dealloc(m->be, w->lnf_b);
	for (int l = 0; w->layers && l < m->dec.cfg.num_hidden_layers; l++) {
		rg_gpt2_layer *L = &w->layers[l];
		void *p[] = {L->ln1_g, L->ln1_b, L->qkv_w, L->qkv_b, L->o_w,	L->o_b,
			     L->ln2_g, L->ln2_b, L->fc_w,  L->fc_b,  L->proj_w, L->proj_b};

		for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
			rg_backend_dealloc(m->be, p[i]);
	}
	free(w->layers);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

const rg_arch rg_arch_gpt2 = {
	.model_type = "gpt2",
	.kind = RG_MODEL_DECODER,
	.free_weights = gpt2_free_weights,
	.hparams = gpt2_hparams,
	.load = gpt2_load_weights,
	.decode = gpt2_forward,
};
