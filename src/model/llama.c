/* The Llama family (transformers' LlamaForCausalLM; Llama 2/3, SmolLM/SmolLM2), Mistral without a
 * sliding window, and Qwen2 (Llama plus q/k/v biases): RMSNorm, RoPE (rope_theta, Llama-3
 * rope_scaling), SwiGLU MLP, grouped-query attention, LM head tied to the embeddings or not (a distinct
 * lm_head.weight in the file is used even when tie_word_embeddings is true, as transformers 5
 * loads it: rg_layer_load_embed_head).
 *
 * Weights: q/k/v projections fused into one (qd + 2 kvd, H) GEMM weight (and bias for Qwen2),
 * gate and up into one (2I, H). RoPE inv_freq is computed at load in double (HF
 * _compute_default_rope_parameters / _compute_llama3_parameters) and kept as f32.
 * The RoPE pair layout: rotate_half ("neox") for Hugging Face checkpoints; interleaved pairs when
 * the tensor source says its q/k rows are permuted (GGUF, llama.cpp's converter).
 *
 * Per layer (LlamaDecoderLayer.forward):
 *   h += delta; x = RMSNorm_in(h)               (delta: the previous layer's MLP; none at l = 0)
 *   qkv = x Wqkv^T (+ b); RoPE on Q and K + KV write (one op, the step's cos / sin table
 *   computed once before the first layer); ctx = causal paged attention (1/sqrt(hd))
 *   delta = ctx Wo^T; h += delta; x = RMSNorm_post(h)
 *   delta = (silu(x Wg^T) * (x Wu^T)) Wd^T
 * then h += delta; x = RMSNorm_f(h) meets the LM head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

typedef struct rg_llama_layer {
	float *in_norm;      /* (H) f32 */
	void *qkv_w;         /* (qd + 2 kvd, H) act: rows [Wq; Wk; Wv] */
	void *qkv_b;         /* (qd + 2 kvd) act, or NULL (Qwen2 / attention_bias only) */
	void *o_w;           /* (H, qd) act */
	float *post_norm;    /* (H) f32 */
	void *gate_up_w;     /* (2I, H) act: rows [Wgate; Wup] */
	void *down_w;        /* (H, I) act */
} rg_llama_layer;

typedef struct rg_llama_weights {
	void *embed;             /* (vocab, H) act */
	void *lm_head;           /* (vocab, H) act; NULL when the embedding serves */
	float *norm;             /* (H) f32 */
	float *inv_freq;         /* (head_dim / 2) f32 */
	rg_llama_layer *layers;  /* (num_hidden_layers) */
} rg_llama_weights;

static const char *const PREFIXES[] = {"model.", "", NULL};
static const char *const TOP[] = {"", NULL};

/* What the forward does not compute, refused by name (mixtures of experts, sliding windows,
 * other RoPE scalings, partial rotary, MLP biases). */
static rg_status refuse(const char *path, struct json_object *root, const char *type)
{
	static const char *const moe[] = {"num_experts", "num_local_experts",
					  "num_experts_per_tok", "moe_intermediate_size"};
	double prf;
	bool on;
	int v;
	rg_status s;

	for (size_t i = 0; i < sizeof(moe) / sizeof(moe[0]); i++) {
		if (!rg_cfg_has(root, moe[i]))
			continue;
		if ((s = rg_cfg_int(path, root, moe[i], false, 0, 0, INT32_MAX, &v)) != RG_OK)
			return s;
		if (v > 0)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: %s = %d: mixture-of-experts layers are not supported",
					 path, moe[i], v);
	}
	if ((s = rg_cfg_bool(path, root, "use_sliding_window", false, &on)) != RG_OK)
		return s;
	if (on)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: use_sliding_window = true: sliding-window attention is not "
				 "supported",
				 path);
	/* Mistral (and Llama-shaped configs) apply sliding_window whenever it is set; Qwen2 only
	 * with use_sliding_window */
	if (strcmp(type, "qwen2") && rg_cfg_has(root, "sliding_window"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: sliding_window is set: sliding-window attention is not "
				 "supported (a null sliding_window is)",
				 path);
	if ((s = rg_cfg_bool(path, root, "mlp_bias", false, &on)) != RG_OK)
		return s;
	if (on)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", path);
	if ((s = rg_cfg_double(path, root, "partial_rotary_factor", 1.0, 0.0, 1.0, &prf)) != RG_OK)
		return s;
	if (prf != 1.0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: partial_rotary_factor %g is not supported (1 only)", path, prf);
	return RG_OK;
}

/* rope_scaling: null, {"rope_type": "default"} or Llama-3's; anything else by name.
 * transformers 5 writes the same keys (and rope_theta) into "rope_parameters" instead. */
static rg_status rope_scaling(const char *path, struct json_object *root, rg_decoder_config *c)
{
	struct json_object *rs;
	const char *type = NULL, *key = "rope_scaling";
	rg_status s;

	if (!json_object_object_get_ex(root, key, &rs) || !rs) {
		key = "rope_parameters";
		if (!json_object_object_get_ex(root, key, &rs) || !rs)
			return RG_OK;
	}
	if (!json_object_is_type(rs, json_type_object))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be an object or null", path,
				 key);
	if (!strcmp(key, "rope_parameters") && !rg_cfg_has(root, "rope_theta") &&
	    (s = rg_cfg_double(path, rs, "rope_theta", 10000.0, 1e-6, 1e12, &c->rope_theta)))
		return s;
	if ((s = rg_cfg_str(path, rs, "rope_type", "", &type)) != RG_OK)
		return s;
	if (!type[0] && (s = rg_cfg_str(path, rs, "type", "", &type)) != RG_OK)
		return s;
	if (!strcmp(type, "default") || (!type[0] && !strcmp(key, "rope_parameters")))
		return RG_OK;
	if (strcmp(type, "llama3"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s type \"%s\" is not supported (default, llama3)", path,
				 key, type[0] ? type : "(none)");
	c->rope_llama3 = true;
	if ((s = rg_cfg_double(path, rs, "factor", 8.0, 1e-6, 1e6, &c->rope_factor)) ||
	    (s = rg_cfg_double(path, rs, "low_freq_factor", 1.0, 1e-6, 1e6,
			       &c->rope_low_freq_factor)) ||
	    (s = rg_cfg_double(path, rs, "high_freq_factor", 4.0, 1e-6, 1e6,
			       &c->rope_high_freq_factor)) ||
	    (s = rg_cfg_int(path, rs, "original_max_position_embeddings", false, 8192, 1, 1 << 24,
			    &c->rope_original_max_pos)))
		return s;
	if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s high_freq_factor %g must exceed low_freq_factor %g",
				 path, key, c->rope_high_freq_factor, c->rope_low_freq_factor);
	return RG_OK;
}

static rg_status llama_hparams(const char *path, struct json_object *root, rg_decoder_config *c)
{
	const bool qwen2 = !strcmp(c->model_type, "qwen2");
	const char *act;
	rg_status s;

	if ((s = rg_cfg_int(path, root, "vocab_size", true, 0, 1, 1 << 24, &c->vocab_size)) ||
	    (s = rg_cfg_int(path, root, "hidden_size", true, 0, 1, 1 << 20, &c->hidden_size)) ||
	    (s = rg_cfg_int(path, root, "num_attention_heads", true, 0, 1, 1 << 16,
			    &c->num_attention_heads)) ||
	    (s = rg_cfg_int(path, root, "num_key_value_heads", false, c->num_attention_heads, 1,
			    c->num_attention_heads, &c->num_key_value_heads)) ||
	    (s = rg_cfg_int(path, root, "num_hidden_layers", true, 0, 1, 1 << 16,
			    &c->num_hidden_layers)) ||
	    (s = rg_cfg_int(path, root, "intermediate_size", true, 0, 1, 1 << 24,
			    &c->intermediate_size)) ||
	    (s = rg_cfg_int(path, root, "max_position_embeddings", false, 2048, 1, 1 << 24,
			    &c->max_position_embeddings)) ||
	    (s = rg_cfg_double(path, root, "rms_norm_eps", 1e-6, 0.0, 1.0, &c->norm_eps)) ||
	    (s = rg_cfg_double(path, root, "rope_theta", 10000.0, 1e-6, 1e12, &c->rope_theta)) ||
	    (s = rg_cfg_bool(path, root, "tie_word_embeddings", false, &c->tie_word_embeddings)) ||
	    (s = rg_cfg_bool(path, root, "attention_bias", false, &c->attention_bias)) ||
	    (s = rg_cfg_str(path, root, "hidden_act", "silu", &act)) ||
	    (s = rg_cfg_token_id(path, root, "bos_token_id", &c->bos_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "eos_token_id", &c->eos_token_id)))
		return s;
	if (c->num_attention_heads % c->num_key_value_heads)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: num_attention_heads %d is not a multiple of num_key_value_heads "
				 "%d",
				 path, c->num_attention_heads, c->num_key_value_heads);
	if (rg_cfg_has(root, "head_dim")) {
		if ((s = rg_cfg_int(path, root, "head_dim", true, 0, 2, 1024, &c->head_dim)) != RG_OK)
			return s;
	} else {
		if (c->hidden_size % c->num_attention_heads)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: hidden_size %d is not divisible by num_attention_heads "
					 "%d (and no head_dim)",
					 path, c->hidden_size, c->num_attention_heads);
		c->head_dim = c->hidden_size / c->num_attention_heads;
	}
	if (c->head_dim % 2 || c->head_dim > 1024)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: head_dim %d must be even and <= 1024",
				 path, c->head_dim);
	if (strcmp(act, "silu") && strcmp(act, "swish"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: hidden_act \"%s\" is not supported (silu: SwiGLU)", path, act);
	c->act_name = "silu";
	c->hidden_act = RG_ACT_NONE; /* the MLP's silu * up is rg_op_silu_mul */
	if (qwen2)
		c->attention_bias = true; /* Qwen2Attention: q/k/v always have biases */
	if ((s = refuse(path, root, c->model_type)) != RG_OK)
		return s;
	return rope_scaling(path, root, c);
}

/* inv_freq[i] = theta^(-2i / hd), and Llama-3's frequency-dependent scaling
 * (transformers' _compute_llama3_parameters), in double. */
static float *rope_inv_freq(const rg_decoder_config *c)
{
	const int half = c->head_dim / 2;
	float *f = malloc((size_t)half * sizeof(float));

	for (int i = 0; f && i < half; i++) {
		double inv = 1.0 / pow(c->rope_theta, (double)(2 * i) / c->head_dim);

		if (c->rope_llama3) {
			const double old = c->rope_original_max_pos;
			const double low_wl = old / c->rope_low_freq_factor;
			const double high_wl = old / c->rope_high_freq_factor;
			const double wl = 2 * M_PI / inv;

			if (wl > low_wl) {
				inv /= c->rope_factor;
			} else if (!(wl < high_wl)) {
				const double sm = (old / wl - c->rope_low_freq_factor) /
						  (c->rope_high_freq_factor - c->rope_low_freq_factor);

				inv = (1 - sm) * inv / c->rope_factor + sm * inv;
			}
		}
		f[i] = (float)inv;
	}
	return f;
}

static rg_llama_weights *lw(const rg_model *m)
{
	return m->weights;
}

static rg_status llama_load_weights(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t H = c->hidden_size, I = c->intermediate_size;
	const int64_t qd = (int64_t)c->num_attention_heads * c->head_dim;
	const int64_t kvd = (int64_t)c->num_key_value_heads * c->head_dim;
	rg_llama_weights *w;
	float *t;
	rg_status s;

	if (!(w = m->weights = calloc(1, sizeof(*w))) ||
	    !(w->layers = calloc((size_t)c->num_hidden_layers, sizeof(*w->layers))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "embed_tokens.weight", TOP,
					  "lm_head.weight", &w->embed, &w->lm_head)) != RG_OK ||
	    (s = rg_tsrc_get(src, PREFIXES, "norm.weight", H, -1, &t)) != RG_OK ||
	    (s = rg_dec_upload(m, t, (size_t)H, false, (void **)&w->norm)) != RG_OK)
		return s;
	if (!(t = rope_inv_freq(c)) ||
	    (s = rg_dec_upload(m, t, (size_t)c->head_dim / 2, false, (void **)&w->inv_freq)) !=
		    RG_OK)
		return t ? s : rg_errorf(RG_ERR_OOM, "out of host memory");
	for (int l = 0; l < c->num_hidden_layers; l++) {
		rg_llama_layer *L = &w->layers[l];
		char q[96], k[96], v[96], o[96], g[96], u[96], d[96], n1[96], n2[96];
		const int64_t qkv_rows[3] = {qd, kvd, kvd}, gu_rows[2] = {I, I};

		snprintf(q, sizeof(q), "layers.%d.self_attn.q_proj.weight", l);
		snprintf(k, sizeof(k), "layers.%d.self_attn.k_proj.weight", l);
		snprintf(v, sizeof(v), "layers.%d.self_attn.v_proj.weight", l);
		snprintf(o, sizeof(o), "layers.%d.self_attn.o_proj.weight", l);
		snprintf(g, sizeof(g), "layers.%d.mlp.gate_proj.weight", l);
		snprintf(u, sizeof(u), "layers.%d.mlp.up_proj.weight", l);
		snprintf(d, sizeof(d), "layers.%d.mlp.down_proj.weight", l);
		snprintf(n1, sizeof(n1), "layers.%d.input_layernorm.weight", l);
		snprintf(n2, sizeof(n2), "layers.%d.post_attention_layernorm.weight", l);
		{
			const char *const qkv[3] = {q, k, v}, *const gu[2] = {g, u};

			if ((s = rg_layer_load_stacked(m, src, PREFIXES, qkv, qkv_rows, 3, H, true,
							 &L->qkv_w)) ||
			    (s = rg_layer_load_stacked(m, src, PREFIXES, gu, gu_rows, 2, H, true,
							 &L->gate_up_w)))
				return s;
		}
		if ((s = rg_tsrc_get(src, PREFIXES, o, H, qd, &t)) != RG_OK ||
		    (s = rg_dec_upload(m, t, (size_t)(H * qd), true, &L->o_w)) != RG_OK ||
		    (s = rg_op_prepare_weight(m->be, L->o_w, (int)H, (int)qd)) != RG_OK ||
		    (s = rg_tsrc_get(src, PREFIXES, d, H, I, &t)) != RG_OK ||
		    (s = rg_dec_upload(m, t, (size_t)(H * I), true, &L->down_w)) != RG_OK ||
		    (s = rg_op_prepare_weight(m->be, L->down_w, (int)H, (int)I)) != RG_OK ||
		    (s = rg_tsrc_get(src, PREFIXES, n1, H, -1, &t)) != RG_OK ||
		    (s = rg_dec_upload(m, t, (size_t)H, false, (void **)&L->in_norm)) != RG_OK ||
		    (s = rg_tsrc_get(src, PREFIXES, n2, H, -1, &t)) != RG_OK ||
		    (s = rg_dec_upload(m, t, (size_t)H, false, (void **)&L->post_norm)) != RG_OK)
			return s;
		if (c->attention_bias) {
			char qb[96], kb[96], vb[96];
			const char *const b[3] = {qb, kb, vb};

			snprintf(qb, sizeof(qb), "layers.%d.self_attn.q_proj.bias", l);
			snprintf(kb, sizeof(kb), "layers.%d.self_attn.k_proj.bias", l);
			snprintf(vb, sizeof(vb), "layers.%d.self_attn.v_proj.bias", l);
			if ((s = rg_layer_load_stacked(m, src, PREFIXES, b, qkv_rows, 3, -1, false,
							 &L->qkv_b)) != RG_OK)
				return s;
		}
	}
	return RG_OK;
}

static rg_status llama_forward(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, I = c->intermediate_size, n = f->n, hd = c->head_dim;
	const int qd = c->num_attention_heads * hd, kvd = c->num_key_value_heads * hd;
	const int ld = qd + 2 * kvd;
	const float eps = (float)c->norm_eps, scale = 1.f / sqrtf((float)hd);
	const rg_llama_weights *w = lw(m);
	void *h = m->dec.a[RG_D_HIDDEN], *x = m->dec.a[RG_D_NORMED], *qkv = m->dec.a[RG_D_QKV];
	void *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	void *inter = m->dec.a[RG_D_INTER], *mlp = m->dec.a[RG_D_MLP];
	float *rope = m->dec.a[RG_D_ROPE];
	rg_backend *be = m->be;
	rg_status s;

	/* the step's cos / sin once; every layer's RoPE reads them */
	if ((s = rg_op_gather_rows(be, w->embed, f->tokens, n, H, h)) != RG_OK ||
	    (s = rg_op_rope_table(be, f->positions, n, w->inv_freq, hd, rope)) != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		const rg_llama_layer *L = &w->layers[l];

		if ((s = rg_op_add_norm(be, l ? delta : NULL, h, L->in_norm, NULL, eps, RG_NORM_RMS,
					n, H, x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, x, L->qkv_w, L->qkv_b, qkv, n, ld, H,
					     RG_ACT_NONE)) != RG_OK ||
		    /* q's and k's heads turned, k and v into the cache: one launch */
		    (s = rg_dec_rope_kv_write(m, f, l, qkv, rope)) != RG_OK ||
		    (s = rg_dec_attend(m, f, l, qkv, scale, ctx)) != RG_OK ||
		    (s = rg_op_gemm(be, ctx, L->o_w, delta, n, H, qd)) != RG_OK ||
		    (s = rg_op_add_norm(be, delta, h, L->post_norm, NULL, eps, RG_NORM_RMS, n, H,
					x)) != RG_OK ||
		    (s = rg_op_gemm(be, x, L->gate_up_w, inter, n, 2 * I, H)) != RG_OK ||
		    (s = rg_op_silu_mul(be, inter, n, I, mlp)) != RG_OK ||
		    (s = rg_op_gemm(be, mlp, L->down_w, delta, n, H, I)) != RG_OK)
			return rg_error_wrap(s, "layer %d", l);
	}
	return rg_op_add_norm(be, delta, h, w->norm, NULL, eps, RG_NORM_RMS, n, H, x);
}

static void llama_free_weights(rg_model *m)
{
	rg_llama_weights *w = lw(m);

	rg_backend_dealloc(m->be, w->embed);
	rg_backend_dealloc(m->be, w->lm_head);
	rg_backend_dealloc(m->be, w->norm);
	rg_backend_dealloc(m->be, w->inv_freq);
	for (int l = 0; w->layers && l < m->dec.cfg.num_hidden_layers; l++) {
		rg_llama_layer *L = &w->layers[l];
		void *p[] = {L->in_norm, L->qkv_w, L->qkv_b, L->o_w, L->post_norm, L->gate_up_w,
			     L->down_w};

		for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
			rg_backend_dealloc(m->be, p[i]);
	}
	free(w->layers);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

#define RG_LLAMA_ARCH(var, type)                                                                  \
	const rg_arch var = {                                                                     \
		.model_type = type,                                                               \
		.kind = RG_MODEL_DECODER,                                                         \
		.free_weights = llama_free_weights,                                               \
		.load_hparams = llama_hparams,                                                    \
		.load_dec_weights = llama_load_weights,                                           \
		.forward = llama_forward,                                                         \
	}
RG_LLAMA_ARCH(rg_arch_llama, "llama");
RG_LLAMA_ARCH(rg_arch_mistral, "mistral");
RG_LLAMA_ARCH(rg_arch_qwen2, "qwen2");
