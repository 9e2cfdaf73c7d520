/* Phi-3 / Phi-3.5 (transformers' Phi3ForCausalLM: Phi-3-mini-4k / 128k, Phi-3.5-mini): the Llama
 * block with the q/k/v projections stored fused (self_attn.qkv_proj, rows q then k then v) and
 * gate / up fused (mlp.gate_up_proj, gate rows then up rows), and LongRoPE.
 *
 * LongRoPE (Ding et al. 2024; transformers' _compute_longrope_parameters and
 * Phi3RotaryEmbedding): rope_scaling (or transformers 5's rope_parameters) {"type" / "rope_type":
 * "longrope" or "su", "short_factor": [hd/2], "long_factor": [hd/2], optional "factor",
 * "attention_factor"} with original_max_position_embeddings (top level, else in the dict):
 *   inv_freq[i] = 1 / (ext[i] * theta^(2i / hd)),  cos / sin scaled by attention_factor,
 *   attention_factor = sqrt(1 + ln(factor) / ln(original_max)) (1 when factor <= 1),
 *   factor = rope "factor" when given, else max_position_embeddings / original_max.
 * transformers picks ext by the forward's sequence length: short_factor while it is at most
 * original_max, long_factor for the whole sequence beyond (generate drops the cache at that
 * switch and recomputes every position). A paged cache keeps its keys, so ragged picks per
 * position: a token at position p < original_max turns by the short factors, from original_max
 * on by the long ones. That is transformers' result for every sequence of up to original_max
 * tokens (every prompt and continuation of a 128k model within 4096 tokens); past it the early
 * keys keep their short-factor turn where transformers would recompute them with the long one.
 * Phi-3-mini-4k has no rope_scaling (plain RoPE).
 *
 * sliding_window (Phi-3-mini-4k: 2047; transformers masks keys more than sliding_window - 1
 * positions back): not computed; a window shorter than max_position_embeddings limits the served
 * context to it (rg_model_info.max_seq_len), within which the window masks nothing.
 * partial_rotary_factor other than 1 is refused (Phi-3 rotates whole heads).
 *
 * GGUF "phi3" (llama.cpp's LLM_ARCH_PHI3, unpermuted, NEOX RoPE): blk.N.attn_qkv, ffn_up holding
 * gate and up (2 I rows), the factors as tensors rope_factors_short / rope_factors_long (hd/2),
 * phi3.rope.scaling.original_context_length and phi3.rope.scaling.attn_factor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/gguf.h"
#include "model/layers.h"
#include "model/model.h"

static const char *const PREFIXES[] = {"model.", "", NULL};

static const rg_tensor_name GGUF_LAYER[] = {
	{"self_attn.qkv_proj", "attn_qkv"}, {"self_attn.o_proj", "attn_output"},
	{"mlp.gate_up_proj", "ffn_up"},	    {"mlp.down_proj", "ffn_down"},
	{"input_layernorm", "attn_norm"},   {"post_attention_layernorm", "ffn_norm"},
	{NULL, NULL},
};
static const rg_tensor_name GGUF_TOP[] = {
	{"embed_tokens", "token_embd"}, {"norm", "output_norm"}, {"lm_head", "output"},
	{NULL, NULL},
};
static const rg_tensor_names GGUF_NAMES = {GGUF_LAYER, GGUF_TOP, false};

/* config.json's RoPE dict (rope_scaling, else transformers 5's rope_parameters), or NULL. */
static struct json_object *rope_dict(struct json_object *root)
{
	struct json_object *rs;

	if (json_object_object_get_ex(root, "rope_scaling", &rs) && rs)
		return rs;
	if (json_object_object_get_ex(root, "rope_parameters", &rs) && rs)
		return rs;
	return NULL;
}

/* LongRoPE's settings from config.json into c. */
static rg_status longrope_json(const char *path, struct json_object *root, int max_pos,
			       rg_decoder_config *c)
{
	struct json_object *rs = rope_dict(root);
	const char *type = "";
	double factor, prf;
	rg_status s;

	if (!rs)
		return RG_OK;
	if (!json_object_is_type(rs, json_type_object))
		return rg_errorf(RG_ERR_FORMAT, "%s: rope_scaling must be an object or null", path);
	if (!rg_cfg_has(root, "rope_theta") &&
	    (s = rg_cfg_double(path, rs, "rope_theta", 10000.0, 1e-6, 1e12, &c->rope_theta)))
		return s;
	if ((s = rg_cfg_double(path, rs, "partial_rotary_factor", 1.0, 0.0, 1.0, &prf)) != RG_OK)
		return s;
	if (prf != 1.0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: partial_rotary_factor %g is not supported (1 only)", path, prf);
	if ((s = rg_cfg_str(path, rs, "rope_type", "", &type)) != RG_OK)
		return s;
	if (!type[0] && (s = rg_cfg_str(path, rs, "type", "", &type)) != RG_OK)
		return s;
	if (!type[0] || !strcmp(type, "default"))
		return RG_OK;
	if (strcmp(type, "longrope") && strcmp(type, "su"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: rope_scaling type \"%s\" is not supported for phi3 (default, "
				 "longrope, su)",
				 path, type);
	c->rope_longrope = true;
	if (rg_cfg_has(root, "original_max_position_embeddings"))
		s = rg_cfg_int(path, root, "original_max_position_embeddings", true, 0, 2, 1 << 24,
			       &c->rope_original_max_pos);
	else
		s = rg_cfg_int(path, rs, "original_max_position_embeddings", false, max_pos, 2,
			       1 << 24, &c->rope_original_max_pos);
	if (s != RG_OK)
		return s;
	if ((s = rg_cfg_double(path, rs, "factor", (double)max_pos / c->rope_original_max_pos,
			       1e-6, 1e6, &factor)) != RG_OK)
		return s;
	return rg_cfg_double(path, rs, "attention_factor",
			     factor <= 1.0 ? 1.0
					   : sqrt(1 + log(factor) / log(c->rope_original_max_pos)),
			     1e-6, 1e6, &c->rope_mscale);
}

/* LongRoPE's settings from GGUF metadata and tensors into c. */
static rg_status longrope_gguf(const rg_cfg_src *cf, int max_pos, rg_decoder_config *c)
{
	const bool has_short = rg_gguf_find(cf->gguf, "rope_factors_short.weight") != NULL;
	const bool has_long = rg_gguf_find(cf->gguf, "rope_factors_long.weight") != NULL;
	double factor;
	rg_status s;

	if (!has_short && !has_long)
		return RG_OK;
	if (!has_short || !has_long)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: LongRoPE needs both rope_factors_short.weight and "
				 "rope_factors_long.weight",
				 cf->path);
	c->rope_longrope = true;
	if ((s = rg_cfg_src_int(cf, "", "rope.scaling.original_context_length", false, max_pos, 2,
				1 << 24, &c->rope_original_max_pos)) != RG_OK)
		return s;
	factor = (double)max_pos / c->rope_original_max_pos;
	return rg_cfg_src_double(cf, "", "rope.scaling.attn_factor",
				 factor <= 1.0
					 ? 1.0
					 : sqrt(1 + log(factor) / log(c->rope_original_max_pos)),
				 1e-6, 1e6, &c->rope_mscale);
}

static rg_status phi3_hparams(rg_model *m, const rg_cfg_src *cf)
{
	rg_decoder_config *c = &m->dec.cfg;
	const rg_llama_hp_opts o = {.own_rope_scaling = true, .own_sliding_window = true};
	int max_pos, sw = 0;
	rg_status s;

	if ((s = rg_layer_llama_hparams(m, cf, &o)) != RG_OK)
		return s;
	max_pos = c->max_position_embeddings;
	c->rope_mscale = 1.0;
	if ((s = cf->root ? longrope_json(cf->path, cf->root, max_pos, c)
			  : longrope_gguf(cf, max_pos, c)) != RG_OK ||
	    (s = rg_cfg_src_int(cf, "sliding_window", "attention.sliding_window", false, 0, 0,
				INT32_MAX, &sw)) != RG_OK)
		return s;
	if (sw > 0 && sw < c->max_position_embeddings)
		c->max_position_embeddings = sw; /* the window masks nothing within it */
	return RG_OK;
}

/* n = hd / 2 LongRoPE factors (which: "short_factor" / "long_factor") into f, from config.json
 * or GGUF's rope_factors_<short|long>.weight; each finite and > 0. */
static rg_status read_factors(const rg_cfg_src *cf, const char *which, int n, float *f)
{
	if (cf->root) {
		struct json_object *rs = rope_dict(cf->root), *a;

		if (!rs || !json_object_object_get_ex(rs, which, &a) ||
		    !json_object_is_type(a, json_type_array) ||
		    (int)json_object_array_length(a) != n)
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: rope_scaling %s must be a list of head_dim / 2 = %d "
					 "numbers",
					 cf->path, which, n);
		for (int i = 0; i < n; i++) {
			struct json_object *e = json_object_array_get_idx(a, (size_t)i);

			if (!e || !(json_object_is_type(e, json_type_double) ||
				    json_object_is_type(e, json_type_int)))
				return rg_errorf(RG_ERR_FORMAT, "%s: rope_scaling %s[%d] is not a "
						 "number", cf->path, which, i);
			f[i] = (float)json_object_get_double(e);
		}
	} else {
		char name[64];
		const rg_gguf_tensor *t;
		rg_status s;

		snprintf(name, sizeof(name), "rope_factors_%s.weight",
			 !strncmp(which, "short", 5) ? "short" : "long");
		t = rg_gguf_find(cf->gguf, name);
		if (!t || t->numel != n)
			return rg_errorf(RG_ERR_FORMAT, "%s: tensor %s must hold head_dim / 2 = %d "
					 "values", cf->path, name, n);
		if ((s = rg_gguf_to_f32(t, f)) != RG_OK)
			return rg_error_wrap(s, "%s", cf->path);
	}
	for (int i = 0; i < n; i++)
		if (!(f[i] > 0.f && f[i] < 1e30f))
			return rg_errorf(RG_ERR_FORMAT, "%s: LongRoPE %s[%d] = %g must be > 0",
					 cf->path, which, i, (double)f[i]);
	return RG_OK;
}

/* LongRoPE's two frequency sets: inv_freq / factor per pair, as transformers divides. */
static rg_status load_longrope(rg_model *m, const rg_tsrc *src, rg_rope_w *r)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int half = c->head_dim / 2;
	float *base = rg_layer_rope_inv_freq(c), *sh = malloc((size_t)half * sizeof(float));
	float *lo = malloc((size_t)half * sizeof(float));
	rg_status s;

	if (!base || !sh || !lo) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free;
	}
	if (!src->cfg) {
		s = rg_errorf(RG_ERR_INTERNAL, "phi3: LongRoPE needs the hyper-parameter source");
		goto out_free;
	}
	if ((s = read_factors(src->cfg, "short_factor", half, sh)) != RG_OK ||
	    (s = read_factors(src->cfg, "long_factor", half, lo)) != RG_OK)
		goto out_free;
	for (int i = 0; i < half; i++) {
		sh[i] = (float)((double)base[i] / sh[i]);
		lo[i] = (float)((double)base[i] / lo[i]);
	}
	r->long_from = c->rope_original_max_pos;
	r->mscale = (float)c->rope_mscale;
	s = rg_dec_upload(m, sh, (size_t)half, false, (void **)&r->inv_freq);
	sh = NULL;
	if (s == RG_OK)
		s = rg_dec_upload(m, lo, (size_t)half, false, (void **)&r->inv_freq_long);
	lo = NULL;
out_free:
	free(base);
	free(sh);
	free(lo);
	return s;
}

static rg_status phi3_load(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t H = c->hidden_size, I = c->intermediate_size, hd = c->head_dim;
	const int64_t qd = (int64_t)c->num_attention_heads * hd;
	const int64_t kvd = (int64_t)c->num_key_value_heads * hd;
	rg_llama_weights *w;
	float *t;
	rg_status s;

	if ((s = rg_llama_load_top(m, src, &w)) != RG_OK)
		return s;
	if (c->rope_longrope) {
		if ((s = load_longrope(m, src, &w->rope)) != RG_OK)
			return s;
	} else if (!(t = rg_layer_rope_inv_freq(c)) ||
		   (s = rg_dec_upload(m, t, (size_t)hd / 2, false, (void **)&w->rope.inv_freq))) {
		return t ? s : rg_errorf(RG_ERR_OOM, "out of host memory");
	}
	for (int l = 0; l < c->num_hidden_layers; l++) {
		rg_llama_layer *L = &w->layers[l];
		char n[6][96];

		snprintf(n[0], sizeof(n[0]), "layers.%d.input_layernorm.weight", l);
		snprintf(n[1], sizeof(n[1]), "layers.%d.post_attention_layernorm.weight", l);
		snprintf(n[2], sizeof(n[2]), "layers.%d.self_attn.qkv_proj.weight", l);
		snprintf(n[3], sizeof(n[3]), "layers.%d.self_attn.o_proj.weight", l);
		snprintf(n[4], sizeof(n[4]), "layers.%d.mlp.gate_up_proj.weight", l);
		snprintf(n[5], sizeof(n[5]), "layers.%d.mlp.down_proj.weight", l);
		if ((s = rg_layer_load_vec(m, src, PREFIXES, n[0], H, false, (void **)&L->in_norm)) ||
		    (s = rg_layer_load_vec(m, src, PREFIXES, n[1], H, false,
					   (void **)&L->post_norm)) ||
		    (s = rg_layer_load_linear(m, src, PREFIXES, n[2], qd + 2 * kvd, H,
					      &L->attn.qkv_w)) ||
		    (s = rg_layer_load_linear(m, src, PREFIXES, n[3], H, qd, &L->attn.o_w)) ||
		    (s = rg_layer_load_linear(m, src, PREFIXES, n[4], 2 * I, H,
					      &L->mlp.gate_up_w)) ||
		    (s = rg_layer_load_linear(m, src, PREFIXES, n[5], H, I, &L->mlp.down_w)))
			return s;
	}
	return RG_OK;
}

const rg_arch rg_arch_phi3 = {
	.model_type = "phi3",
	.kind = RG_MODEL_DECODER,
	.gguf_arch = "phi3",
	.gguf = &GGUF_NAMES,
	.free_weights = rg_llama_free,
	.hparams = phi3_hparams,
	.load = phi3_load,
	.decode = rg_llama_forward,
};
