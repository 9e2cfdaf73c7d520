/* The BART family of encoder-decoders (Lewis et al. 2020; transformers' modeling_{marian,bart,
 * mbart,m2m_100}.py), one implementation parameterized by the few places where the families
 * differ (issue 29; tests/py/ref_seq2seq.py is the float64 reference of each):
 *
 *   family   model_type  blocks  positions                                 layernorm_   final
 *                                                                          embedding    layer_norm
 *   MarianMT marian      post-LN sinusoid (sin | cos halves), position p   no           no
 *   BART     bart        post-LN learned embed_positions, row p + 2        yes          no
 *   mBART    mbart       pre-LN  learned embed_positions, row p + 2        yes          yes
 *   M2M100   m2m_100     pre-LN  fairseq sinusoid at padding_idx + 1 + p   no           yes
 *            (NLLB-200 is model_type m2m_100)
 *
 * Shared by all: tokens * sqrt(d_model) when scale_embedding (the config's, defaulting as each
 * config class does: True for M2M100 only), one embedding table for the encoder, the decoder and
 * the tied LM head (LightSeq sec. 2's Transformer MT model), final_logits_bias added to the
 * logits (absent in the file, e.g. M2M100: zero), q / k / v / out projections with bias,
 * attention scaled by head_dim^-0.5, LayerNorm eps 1e-5, activation_function (gelu, relu,
 * swish / silu, gelu_new).
 *
 * Post-LN (MarianEncoderLayer / BartEncoderLayer): h = LN(h + f(h)) per sublayer.
 * Pre-LN (MBartEncoderLayer / M2M100EncoderLayer): h = h + f(LN(h)), then the stack's final
 * layer_norm. Sublayers: encoder self-attention (bidirectional within each packed source,
 * rg_op_attention, cu_seqlens), FFN act(h W1^T + b1) W2^T + b2; decoder causal paged
 * self-attention, cross-attention (q = h Wq_c^T + b over each decoder layer's cross K / V of the
 * encoder output, written to the sequence's cross blocks of the KV cache once per request:
 * rg_model_encode_cross), FFN. The embedding sum h = scale * shared[tok] + pos[p], then
 * layernorm_embedding where the family has one.
 *
 * Residual buffers (layers.h rg_s2s_rs): post-LN alternates the residual between two arena
 * buffers (the first chosen so that the decoder's last LayerNorm lands in RG_D_NORMED, where
 * decoder.c reads it); pre-LN
 * keeps the residual in RG_D_HIDDEN and each norm's output in RG_D_NORMED, the residual add of a
 * sublayer fused into the next norm (rg_op_add_norm, vLLM's fused_add_rms_norm pattern).
 *
 * Position tables, built at load as (max_position_embeddings, d_model) with the family's offset
 * applied (row p is the embedding of position p, p counted from 0 in each source and from the
 * decoder start):
 *   Marian (MarianSinusoidalPositionalEmbedding._init_weight, double): column j < d/2 is
 *     sin(p / 10000^(2j/d)), column d/2 + j is cos(p / 10000^(2j/d));
 *   BART / mBART (BartLearnedPositionalEmbedding): rows 2.. of the stored
 *     model.{encoder,decoder}.embed_positions.weight (max_position_embeddings + 2, d_model);
 *   M2M100 (M2M100SinusoidalPositionalEmbedding.get_embedding, float32 as torch computes it):
 *     position q = padding_idx + 1 + p, columns k < d/2: sin(q f_k), d/2 + k: cos(q f_k),
 *     f_k = exp(-k ln(10000) / (d/2 - 1)), a zero last column for an odd d; a pad token gets
 *     the zero padding_idx row (rg_op_embed_scale_add's no_pos_token). A source's positions
 *     count its non-pad tokens, as transformers' create_position_ids_from_input_ids numbers
 *     them (rg_decoder_config.enc_pos_skip_token: a pad id inside a source does not advance
 *     the count). The decoder's positions match generate()'s cached decoding exactly
 *     (t + padding_idx + 1, pad tokens the zero row, the count going on). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

typedef enum rg_bart_pos {
	RG_BART_POS_MARIAN,  /* computed sinusoid, sin | cos halves, position p */
	RG_BART_POS_LEARNED, /* stored embed_positions (max_pos + 2, H), row p + 2 */
	RG_BART_POS_M2M100,  /* computed fairseq sinusoid at padding_idx + 1 + p */
} rg_bart_pos;

/* What one family computes and its config class's defaults. norm_keys: the values of the
 * fairseq-era keys normalize_before / add_final_layer_norm / normalize_embedding that describe
 * this family's layout (a config.json that states another value describes weights the family's
 * transformers class would not run as stored: refused by name). */
typedef struct rg_bart_family {
	const char *model_type;
	rg_bart_pos pos;
	bool pre_ln;          /* pre-LN blocks and a final layer_norm per stack */
	bool ln_embed;        /* layernorm_embedding after the embedding sum */
	bool scale_default;   /* scale_embedding's default */
	const char *act_default;
	int vocab_default;
	int start_default;    /* decoder_start_token_id's default: an id, or -1 pad, -2 bos */
	bool norm_before, final_ln_key, norm_embed; /* normalize_before, add_final_layer_norm,
						     * normalize_embedding */
} rg_bart_family;

static const rg_bart_family FAMILIES[] = {
	{"marian", RG_BART_POS_MARIAN, false, false, false, "gelu", 58101, -1, false, false, false},
	{"bart", RG_BART_POS_LEARNED, false, true, false, "gelu", 50265, 2, false, false, true},
	{"mbart", RG_BART_POS_LEARNED, true, true, false, "gelu", 50265, -2, true, true, true},
	{"m2m_100", RG_BART_POS_M2M100, true, false, true, "relu", 128112, 2, true, true, false},
};

static const rg_bart_family *family_of(const rg_model *m)
{
	for (size_t i = 0; i < sizeof(FAMILIES) / sizeof(FAMILIES[0]); i++)
		if (strcmp(FAMILIES[i].model_type, m->arch->model_type) == 0)
			return &FAMILIES[i];
	return NULL;
}

typedef struct rg_bart_layer {
	void *qkv_w, *qkv_b;   /* (3H, H), (3H) act: self-attention [Wq; Wk; Wv] */
	void *o_w, *o_b;       /* (H, H), (H) act */
	float *ln1_g, *ln1_b;  /* (H) f32: self_attn_layer_norm */
	void *cq_w, *cq_b;     /* decoder: encoder_attn.q_proj (H, H), (H) act */
	void *ckv_w, *ckv_b;   /* decoder: encoder_attn.[k; v]_proj (2H, H), (2H) act */
	void *co_w, *co_b;     /* decoder: encoder_attn.out_proj (H, H), (H) act */
	float *ln2_g, *ln2_b;  /* encoder: final_layer_norm; decoder: encoder_attn_layer_norm */
	void *fc1_w, *fc1_b;   /* (I, H), (I) act */
	void *fc2_w, *fc2_b;   /* (H, I), (H) act */
	float *ln3_g, *ln3_b;  /* decoder: final_layer_norm */
} rg_bart_layer;

/* One stack (the encoder or the decoder). */
typedef struct rg_bart_stack {
	int n_layers;
	rg_bart_layer *layers;   /* (n_layers) */
	void *pos;               /* (max_pos, H) act: row p is position p's embedding (offset in);
				  * may be the other stack's (computed tables: one copy) */
	float *lne_g, *lne_b;    /* (H) f32: layernorm_embedding, NULL without */
	float *fin_g, *fin_b;    /* (H) f32: the stack's final layer_norm (pre-LN), NULL without */
} rg_bart_stack;

typedef struct rg_bart_weights {
	const rg_bart_family *fam;
	void *embed;           /* (vocab, H) act: model.shared, also the tied LM head */
	void *lm_head;         /* (vocab, H) act: a distinct lm_head.weight, or NULL */
	float scale;           /* sqrt(d_model) with scale_embedding, else 1 */
	int32_t no_pos_token;  /* M2M100: padding_idx (no position row); -1 */
	rg_bart_stack enc, dec;
} rg_bart_weights;

static const char *const PREFIXES[] = {"model.", "", NULL};
static const char *const TOP[] = {"", NULL};

static rg_bart_weights *bw(const rg_model *m)
{
	return m->weights;
}

/* One key that must equal the decoder's value (the encoder of the same width and heads). */
static rg_status same_int(const rg_cfg_src *cf, const char *key, int want, const char *twin)
{
	int v;
	rg_status s = rg_cfg_int(cf->path, cf->root, key, false, want, 1, 1 << 24, &v);

	if (s != RG_OK)
		return s;
	if (v != want)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s %d differs from %s %d (an encoder and a decoder of different "
				 "widths are not supported)",
				 cf->path, key, v, twin, want);
	return RG_OK;
}

/* A layout key (normalize_before...) that, when present, must say what the family computes. */
static rg_status layout_key(const rg_cfg_src *cf, const char *family, const char *key, bool want)
{
	bool v;
	rg_status s;

	if (!rg_cfg_has(cf->root, key))
		return RG_OK;
	if ((s = rg_cfg_bool(cf->path, cf->root, key, want, &v)) != RG_OK)
		return s;
	if (v != want)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s %s is not supported for model_type %s (its layout has %s "
				 "%s)", cf->path, key, v ? "true" : "false", family, key,
				 want ? "true" : "false");
	return RG_OK;
}

/* The config class's keys and defaults of m's family (MarianConfig, BartConfig, MBartConfig,
 * M2M100Config; config.json only: no GGUF form). Refused by name: encoder and decoder of
 * different widths (encoder_attention_heads, encoder_ffn_dim), separate source and target
 * embeddings (Marian's share_encoder_decoder_embeddings false / decoder_vocab_size), layout
 * keys contradicting the family (layout_key), other activations. */
static rg_status bart_hparams(rg_model *m, const rg_cfg_src *cf)
{
	const rg_bart_family *fam = family_of(m);
	rg_decoder_config *c = &m->dec.cfg;
	const char *path = cf->path, *act;
	struct json_object *root = cf->root;
	bool scale_emb, shared, tie;
	int dec_vocab;
	rg_status s;

	if (!fam)
		return rg_errorf(RG_ERR_INTERNAL, "bart.c: no family for model_type %s",
				 m->arch->model_type);
	if (!root)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: encoder-decoders load from config.json",
				 path);
	if ((s = rg_cfg_int(path, root, "vocab_size", false, fam->vocab_default, 1, 1 << 24,
			    &c->vocab_size)) ||
	    (s = rg_cfg_int(path, root, "d_model", false, 1024, 1, 1 << 20, &c->hidden_size)) ||
	    (s = rg_cfg_int(path, root, "decoder_layers", false, 12, 1, 1 << 12,
			    &c->num_hidden_layers)) ||
	    (s = rg_cfg_int(path, root, "encoder_layers", false, 12, 1, 1 << 12,
			    &c->encoder_layers)) ||
	    (s = rg_cfg_int(path, root, "decoder_attention_heads", false, 16, 1, 1 << 12,
			    &c->num_attention_heads)) ||
	    (s = rg_cfg_int(path, root, "decoder_ffn_dim", false, 4096, 1, 1 << 24,
			    &c->intermediate_size)) ||
	    (s = rg_cfg_int(path, root, "max_position_embeddings", false, 1024, 1, 1 << 20,
			    &c->max_position_embeddings)) ||
	    (s = rg_cfg_str(path, root, "activation_function", fam->act_default, &act)) ||
	    (s = rg_cfg_bool(path, root, "scale_embedding", fam->scale_default, &scale_emb)) ||
	    (s = rg_cfg_bool(path, root, "share_encoder_decoder_embeddings", true, &shared)) ||
	    (s = rg_cfg_bool(path, root, "tie_word_embeddings", true, &tie)) ||
	    (s = rg_cfg_int(path, root, "decoder_vocab_size", false, c->vocab_size, 1, 1 << 24,
			    &dec_vocab)) ||
	    (s = rg_cfg_token_id(path, root, "bos_token_id", &c->bos_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "eos_token_id", &c->eos_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "pad_token_id", &c->pad_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "decoder_start_token_id",
				 &c->decoder_start_token_id)) ||
	    (s = same_int(cf, "encoder_attention_heads", c->num_attention_heads,
			  "decoder_attention_heads")) ||
	    (s = same_int(cf, "encoder_ffn_dim", c->intermediate_size, "decoder_ffn_dim")) ||
	    (s = layout_key(cf, fam->model_type, "normalize_before", fam->norm_before)) ||
	    (s = layout_key(cf, fam->model_type, "add_final_layer_norm", fam->final_ln_key)) ||
	    (s = layout_key(cf, fam->model_type, "normalize_embedding", fam->norm_embed)))
		return s;
	if ((s = rg_cfg_act(path, "activation_function", act,
			    1u << RG_ACT_SILU | 1u << RG_ACT_GELU | 1u << RG_ACT_GELU_NEW |
				    1u << RG_ACT_RELU,
			    &c->hidden_act, &c->act_name)) != RG_OK)
		return s;
	if (c->hidden_size % c->num_attention_heads)
		return rg_errorf(RG_ERR_FORMAT, "%s: d_model %d is not divisible by "
				 "decoder_attention_heads %d", path, c->hidden_size,
				 c->num_attention_heads);
	if (fam->pos == RG_BART_POS_M2M100 && c->hidden_size < 4)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: d_model %d: M2M100's sinusoid needs at "
				 "least 4 features", path, c->hidden_size);
	if (!shared || dec_vocab != c->vocab_size)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: separate source and target embeddings "
				 "(share_encoder_decoder_embeddings false or decoder_vocab_size %d != "
				 "vocab_size %d) are not supported",
				 path, dec_vocab, c->vocab_size);
	if (fam->pos != RG_BART_POS_MARIAN) { /* BartConfig / MBartConfig / M2M100Config */
		if (!rg_cfg_has(root, "pad_token_id"))
			c->pad_token_id = 1;
		if (!rg_cfg_has(root, "bos_token_id"))
			c->bos_token_id = 0;
		if (!rg_cfg_has(root, "eos_token_id"))
			c->eos_token_id = 2;
	}
	if (c->decoder_start_token_id < 0) /* the config class's default; generate()'s bos */
		c->decoder_start_token_id = fam->start_default == -1   ? c->pad_token_id
					    : fam->start_default == -2 ? c->bos_token_id
								       : fam->start_default;
	if (c->decoder_start_token_id < 0 || c->decoder_start_token_id >= c->vocab_size)
		return rg_errorf(RG_ERR_FORMAT, "%s: decoder_start_token_id %d is outside the "
				 "vocabulary [0, %d)", path, c->decoder_start_token_id,
				 c->vocab_size);
	if (fam->pos == RG_BART_POS_M2M100 &&
	    (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size))
		return rg_errorf(RG_ERR_FORMAT, "%s: pad_token_id %d (M2M100's position padding_idx) "
				 "is outside the vocabulary [0, %d)", path, c->pad_token_id,
				 c->vocab_size);
	c->num_key_value_heads = c->num_attention_heads;
	c->head_dim = c->hidden_size / c->num_attention_heads;
	c->norm_eps = 1e-5; /* nn.LayerNorm's default: these configs have no key */
	c->tie_word_embeddings = tie;
	c->max_source_positions = c->max_position_embeddings;
	c->enc_pos_skip_token = fam->pos == RG_BART_POS_M2M100 ? c->pad_token_id : -1;
	m->dec.cfg.rope_theta = 0;
	c->scale_embedding = scale_emb;
	return RG_OK;
}

/* Marian's sinusoidal table (n, d), in double then uploaded in the compute dtype. */
static rg_status marian_sinusoid(rg_model *m, int n, int d, void **dst)
{
	float *t = malloc((size_t)n * d * sizeof(float));
	const int half = d / 2 + d % 2; /* transformers' sentinel */

	if (!t)
		return rg_errorf(RG_ERR_OOM, "out of host memory for the position table");
	for (int p = 0; p < n; p++)
		for (int j = 0; j < d; j++) {
			/* position_enc[p][j] = p / 10000^(2 (j // 2) / d); even j -> sin, odd -> cos */
			double a = p / pow(10000.0, 2.0 * (j / 2) / d);

			if (j % 2 == 0)
				t[(size_t)p * d + j / 2] = (float)sin(a);
			else
				t[(size_t)p * d + half + j / 2] = (float)cos(a);
		}
	return rg_dec_upload(m, t, (size_t)n * d, true, dst);
}

/* M2M100's table (n, d): row p is get_embedding's row padding_idx + 1 + p, in float32 as torch
 * computes it (the frequencies exp(k * -(ln 10000 / (half - 1))), the products and sin / cos
 * all in float32). */
static rg_status m2m100_sinusoid(rg_model *m, int n, int d, int pad, void **dst)
{
	float *t = calloc((size_t)n * d, sizeof(float));
	const int half = d / 2;
	const float step = (float)-(log(10000.0) / (half - 1));

	if (!t)
		return rg_errorf(RG_ERR_OOM, "out of host memory for the position table");
	for (int p = 0; p < n; p++) {
		const float q = (float)(pad + 1 + p);

		for (int k = 0; k < half; k++) {
			const float a = q * expf((float)k * step);

			t[(size_t)p * d + k] = sinf(a);
			t[(size_t)p * d + half + k] = cosf(a);
		}
	}
	return rg_dec_upload(m, t, (size_t)n * d, true, dst);
}

/* BART's learned table: model.<stack>.embed_positions.weight (n + 2, d), rows 2.. uploaded
 * (BartLearnedPositionalEmbedding's offset). RG_ERR_FORMAT naming the tensor. */
static rg_status learned_positions(rg_model *m, const rg_tsrc *src, const char *stack, int n,
				   int d, void **dst)
{
	char name[64];
	float *t = NULL;
	rg_status s;

	snprintf(name, sizeof(name), "%s.embed_positions.weight", stack);
	if ((s = rg_tsrc_get(src, PREFIXES, name, (int64_t)n + 2, d, &t)) != RG_OK)
		return rg_error_wrap(s, "learned positions (max_position_embeddings %d + offset 2 "
				     "rows)", n);
	memmove(t, t + 2 * (size_t)d, (size_t)n * d * sizeof(float));
	return rg_dec_upload(m, t, (size_t)n * d, true, dst);
}

static rg_status load_attn(rg_model *m, const rg_tsrc *src, const char *pfx, rg_bart_layer *L)
{
	const int64_t H = m->dec.cfg.hidden_size, d3[3] = {H, H, H};
	char w[3][128], b[3][128], n[2][128];
	const char *proj[3] = {"q_proj", "k_proj", "v_proj"};
	const char *wn[3], *bn[3];
	rg_status s;

	for (int i = 0; i < 3; i++) {
		snprintf(w[i], sizeof(w[i]), "%s.self_attn.%s.weight", pfx, proj[i]);
		snprintf(b[i], sizeof(b[i]), "%s.self_attn.%s.bias", pfx, proj[i]);
		wn[i] = w[i];
		bn[i] = b[i];
	}
	snprintf(n[0], sizeof(n[0]), "%s.self_attn.out_proj.weight", pfx);
	snprintf(n[1], sizeof(n[1]), "%s.self_attn.out_proj.bias", pfx);
	if ((s = rg_layer_load_stacked(m, src, PREFIXES, wn, d3, 3, H, true, &L->qkv_w)) ||
	    (s = rg_layer_load_stacked(m, src, PREFIXES, bn, d3, 3, -1, false, &L->qkv_b)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, n[0], H, H, &L->o_w)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[1], H, true, &L->o_b)))
		return s;
	return RG_OK;
}

static rg_status load_cross(rg_model *m, const rg_tsrc *src, const char *pfx, rg_bart_layer *L)
{
	const int64_t H = m->dec.cfg.hidden_size, d2[2] = {H, H};
	char w[2][128], b[2][128], n[6][128];
	const char *wn[2] = {w[0], w[1]}, *bn[2] = {b[0], b[1]};
	rg_status s;

	snprintf(w[0], sizeof(w[0]), "%s.encoder_attn.k_proj.weight", pfx);
	snprintf(w[1], sizeof(w[1]), "%s.encoder_attn.v_proj.weight", pfx);
	snprintf(b[0], sizeof(b[0]), "%s.encoder_attn.k_proj.bias", pfx);
	snprintf(b[1], sizeof(b[1]), "%s.encoder_attn.v_proj.bias", pfx);
	snprintf(n[0], sizeof(n[0]), "%s.encoder_attn.q_proj.weight", pfx);
	snprintf(n[1], sizeof(n[1]), "%s.encoder_attn.q_proj.bias", pfx);
	snprintf(n[2], sizeof(n[2]), "%s.encoder_attn.out_proj.weight", pfx);
	snprintf(n[3], sizeof(n[3]), "%s.encoder_attn.out_proj.bias", pfx);
	snprintf(n[4], sizeof(n[4]), "%s.encoder_attn_layer_norm.weight", pfx);
	snprintf(n[5], sizeof(n[5]), "%s.encoder_attn_layer_norm.bias", pfx);
	if ((s = rg_layer_load_stacked(m, src, PREFIXES, wn, d2, 2, H, true, &L->ckv_w)) ||
	    (s = rg_layer_load_stacked(m, src, PREFIXES, bn, d2, 2, -1, false, &L->ckv_b)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, n[0], H, H, &L->cq_w)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[1], H, true, &L->cq_b)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, n[2], H, H, &L->co_w)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[3], H, true, &L->co_b)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[4], H, false, (void **)&L->ln2_g)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[5], H, false, (void **)&L->ln2_b)))
		return s;
	return RG_OK;
}

/* One layer of the encoder (dec false) or the decoder under pfx ("encoder.layers.3"). */
static rg_status load_layer(rg_model *m, const rg_tsrc *src, const char *pfx, bool dec,
			    rg_bart_layer *L)
{
	const int H = m->dec.cfg.hidden_size, I = m->dec.cfg.intermediate_size;
	char n[8][128];
	float **g_fin = dec ? &L->ln3_g : &L->ln2_g, **b_fin = dec ? &L->ln3_b : &L->ln2_b;
	rg_status s;

	snprintf(n[0], sizeof(n[0]), "%s.self_attn_layer_norm.weight", pfx);
	snprintf(n[1], sizeof(n[1]), "%s.self_attn_layer_norm.bias", pfx);
	snprintf(n[2], sizeof(n[2]), "%s.fc1.weight", pfx);
	snprintf(n[3], sizeof(n[3]), "%s.fc1.bias", pfx);
	snprintf(n[4], sizeof(n[4]), "%s.fc2.weight", pfx);
	snprintf(n[5], sizeof(n[5]), "%s.fc2.bias", pfx);
	snprintf(n[6], sizeof(n[6]), "%s.final_layer_norm.weight", pfx);
	snprintf(n[7], sizeof(n[7]), "%s.final_layer_norm.bias", pfx);
	if ((s = load_attn(m, src, pfx, L)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[0], H, false, (void **)&L->ln1_g)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[1], H, false, (void **)&L->ln1_b)) ||
	    (dec && (s = load_cross(m, src, pfx, L))) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, n[2], I, H, &L->fc1_w)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[3], I, true, &L->fc1_b)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, n[4], H, I, &L->fc2_w)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[5], H, true, &L->fc2_b)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[6], H, false, (void **)g_fin)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[7], H, false, (void **)b_fin)))
		return s;
	return RG_OK;
}

/* A LayerNorm's gamma and beta "<pfx>.weight" / "<pfx>.bias" (H) f32. */
static rg_status load_norm(rg_model *m, const rg_tsrc *src, const char *pfx, float **g, float **b)
{
	const int H = m->dec.cfg.hidden_size;
	char n[2][96];
	rg_status s;

	snprintf(n[0], sizeof(n[0]), "%s.weight", pfx);
	snprintf(n[1], sizeof(n[1]), "%s.bias", pfx);
	if ((s = rg_layer_load_vec(m, src, PREFIXES, n[0], H, false, (void **)g)) ||
	    (s = rg_layer_load_vec(m, src, PREFIXES, n[1], H, false, (void **)b)))
		return s;
	return RG_OK;
}

/* One stack's layers, position table and stack-level norms ("encoder" / "decoder"). */
static rg_status load_stack(rg_model *m, const rg_tsrc *src, const char *name, rg_bart_stack *st)
{
	const rg_bart_weights *w = bw(m);
	const rg_decoder_config *c = &m->dec.cfg;
	const bool dec = strcmp(name, "decoder") == 0;
	char pfx[64];
	rg_status s;

	if (!(st->layers = calloc((size_t)st->n_layers, sizeof(*st->layers))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if (w->fam->pos == RG_BART_POS_LEARNED &&
	    (s = learned_positions(m, src, name, c->max_position_embeddings, c->hidden_size,
				   &st->pos)) != RG_OK)
		return s;
	if (w->fam->ln_embed) {
		snprintf(pfx, sizeof(pfx), "%s.layernorm_embedding", name);
		if ((s = load_norm(m, src, pfx, &st->lne_g, &st->lne_b)) != RG_OK)
			return s;
	}
	if (w->fam->pre_ln) {
		snprintf(pfx, sizeof(pfx), "%s.layer_norm", name);
		if ((s = load_norm(m, src, pfx, &st->fin_g, &st->fin_b)) != RG_OK)
			return s;
	}
	for (int l = 0; l < st->n_layers; l++) {
		snprintf(pfx, sizeof(pfx), "%s.layers.%d", name, l);
		if ((s = load_layer(m, src, pfx, dec, &st->layers[l])) != RG_OK)
			return s;
	}
	return RG_OK;
}

static rg_status bart_load(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, V = c->vocab_size, P = c->max_position_embeddings;
	rg_bart_weights *w;
	rg_status s;

	if (!(w = m->weights = calloc(1, sizeof(*w))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	w->fam = family_of(m);
	w->enc.n_layers = c->encoder_layers;
	w->dec.n_layers = c->num_hidden_layers;
	w->scale = c->scale_embedding ? sqrtf((float)H) : 1.f;
	w->no_pos_token = w->fam->pos == RG_BART_POS_M2M100 ? c->pad_token_id : -1;
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "shared.weight", TOP, "lm_head.weight",
					  false, &w->embed, &w->lm_head)) != RG_OK)
		return s;
	/* computed tables: one copy, both stacks */
	if (w->fam->pos == RG_BART_POS_MARIAN)
		s = marian_sinusoid(m, P, H, &w->enc.pos);
	else if (w->fam->pos == RG_BART_POS_M2M100)
		s = m2m100_sinusoid(m, P, H, c->pad_token_id, &w->enc.pos);
	if (s != RG_OK)
		return s;
	w->dec.pos = w->enc.pos;
	/* final_logits_bias (1, vocab): a buffer transformers registers as zeros; absent = zeros */
	{
		float *t = NULL;

		if (rg_tsrc_has(src, TOP, "final_logits_bias"))
			s = rg_tsrc_get(src, TOP, "final_logits_bias", 1, V, &t);
		else if (!(t = calloc((size_t)V, sizeof(float))))
			s = rg_errorf(RG_ERR_OOM, "out of host memory");
		if (s != RG_OK || (s = rg_dec_upload(m, t, (size_t)V, true, &m->dec.lm_bias)) != RG_OK)
			return s;
	}
	if (w->fam->pos == RG_BART_POS_LEARNED)
		w->dec.pos = NULL; /* the decoder's own table, below */
	if ((s = load_stack(m, src, "encoder", &w->enc)) != RG_OK ||
	    (s = load_stack(m, src, "decoder", &w->dec)) != RG_OK)
		return s;
	return RG_OK;
}

/* The embedding sum of st into the stream, then layernorm_embedding when st has one; post-LN's
 * first residual r0, pre-LN's residual RG_D_HIDDEN. */
static rg_status embed(rg_model *m, const rg_bart_stack *st, const int32_t *tokens,
		       const int32_t *positions, int n, rg_s2s_rs *rs)
{
	const rg_bart_weights *w = bw(m);
	const int H = m->dec.cfg.hidden_size;
	rg_status s;

	if (!st->lne_g)
		return rg_op_embed_scale_add(m->be, w->embed, tokens, w->scale, st->pos, positions,
					     w->no_pos_token, n, H, rs->r);
	if ((s = rg_op_embed_scale_add(m->be, w->embed, tokens, w->scale, st->pos, positions,
				       w->no_pos_token, n, H, rs->y)) != RG_OK ||
	    (s = rg_op_add_norm(m->be, NULL, rs->y, st->lne_g, st->lne_b,
				(float)m->dec.cfg.norm_eps, RG_NORM_LAYER, n, H, rs->r)) != RG_OK)
		return s;
	return RG_OK;
}

/* The FFN sublayer of L (norm g, b) on the stream. */
static rg_status ffn(rg_model *m, int n, const rg_bart_layer *L, const float *g, const float *b,
		     rg_s2s_rs *rs)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, I = c->intermediate_size;
	void *inter = m->dec.a[RG_D_INTER], *delta = m->dec.a[RG_D_DELTA];
	const void *x;
	rg_status s;

	if ((s = rg_s2s_sub_in(m, n, rs, g, b, &x)) != RG_OK ||
	    (s = rg_op_gemm_bias_act(m->be, x, L->fc1_w, L->fc1_b, inter, n, I, H,
				     c->hidden_act)) != RG_OK ||
	    (s = rg_op_gemm_bias_act(m->be, inter, L->fc2_w, L->fc2_b, delta, n, H, I,
				     RG_ACT_NONE)) != RG_OK)
		return s;
	return rg_s2s_sub_out(m, n, rs, delta, g, b);
}

static rg_status bart_encode_cross(rg_model *m, const rg_enc_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const float sc = 1.f / sqrtf((float)c->head_dim);
	const rg_bart_weights *w = bw(m);
	rg_s2s_rs rs = {m->dec.a[RG_D_HIDDEN], m->dec.a[RG_D_NORMED], NULL, w->fam->pre_ln,
			RG_NORM_LAYER};
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	void *out;
	rg_attn_desc d = rg_attn_packed(f->n_seq, f->cu, f->cu_h, f->max_len,
					c->num_attention_heads, c->head_dim, sc);
	rg_status s;

	if ((s = embed(m, &w->enc, f->tokens, f->positions, n, &rs)) != RG_OK)
		return s;
	for (int l = 0; l < w->enc.n_layers; l++) {
		const rg_bart_layer *L = &w->enc.layers[l];
		const void *x;

		if ((s = rg_s2s_sub_in(m, n, &rs, L->ln1_g, L->ln1_b, &x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, x, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_attention(m->be, &d, qkv, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->o_w, L->o_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_s2s_sub_out(m, n, &rs, delta, L->ln1_g, L->ln1_b)) != RG_OK ||
		    (s = ffn(m, n, L, L->ln2_g, L->ln2_b, &rs)) != RG_OK)
			return rg_error_wrap(s, "encoder layer %d", l);
	}
	if ((s = rg_s2s_stack_out(m, n, &rs, w->enc.fin_g, w->enc.fin_b, &out)) != RG_OK)
		return rg_error_wrap(s, "encoder layer_norm");
	/* out: the encoder's output; each decoder layer's cross K / V of it into the cache */
	for (int l = 0; l < w->dec.n_layers; l++) {
		const rg_bart_layer *L = &w->dec.layers[l];

		if ((s = rg_s2s_cross_kv(m, out, n, l, L->ckv_w, L->ckv_b, f->slots)) != RG_OK)
			return s;
	}
	return RG_OK;
}

static rg_status bart_decode(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const float sc = 1.f / sqrtf((float)c->head_dim);
	const rg_bart_weights *w = bw(m);
	/* pre-LN: the final norm into NORMED; post-LN: 3 LayerNorms per layer after the embedding
	 * (and its own), the last landing in NORMED when the count's parity says so */
	const bool r_normed = !w->fam->pre_ln && (3 * w->dec.n_layers) % 2 == 0;
	rg_s2s_rs rs = {m->dec.a[r_normed ? RG_D_NORMED : RG_D_HIDDEN],
			m->dec.a[r_normed ? RG_D_HIDDEN : RG_D_NORMED], NULL, w->fam->pre_ln,
			RG_NORM_LAYER};
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	void *out;
	rg_status s;

	if ((s = embed(m, &w->dec, f->tokens, f->positions, n, &rs)) != RG_OK)
		return s;
	for (int l = 0; l < w->dec.n_layers; l++) {
		const rg_bart_layer *L = &w->dec.layers[l];
		const void *x;

		if ((s = rg_s2s_sub_in(m, n, &rs, L->ln1_g, L->ln1_b, &x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, x, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_attention(m, f, l, qkv, sc, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->o_w, L->o_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_s2s_sub_out(m, n, &rs, delta, L->ln1_g, L->ln1_b)) != RG_OK ||
		    (s = rg_s2s_sub_in(m, n, &rs, L->ln2_g, L->ln2_b, &x)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, x, L->cq_w, L->cq_b, qkv, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_cross_attend(m, f, l, qkv, H, sc, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->co_w, L->co_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_s2s_sub_out(m, n, &rs, delta, L->ln2_g, L->ln2_b)) != RG_OK ||
		    (s = ffn(m, n, L, L->ln3_g, L->ln3_b, &rs)) != RG_OK)
			return rg_error_wrap(s, "decoder layer %d", l);
	}
	if ((s = rg_s2s_stack_out(m, n, &rs, w->dec.fin_g, w->dec.fin_b, &out)) != RG_OK)
		return rg_error_wrap(s, "decoder layer_norm");
	if (out != m->dec.a[RG_D_NORMED])
		return rg_errorf(RG_ERR_INTERNAL, "bart.c: the decoder's output is not in NORMED");
	return RG_OK;
}

static void free_layer(rg_model *m, rg_bart_layer *L)
{
	void *p[] = {L->qkv_w, L->qkv_b, L->o_w,   L->o_b,   L->ln1_g, L->ln1_b, L->cq_w,
		     L->cq_b,  L->ckv_w, L->ckv_b, L->co_w,  L->co_b,  L->ln2_g, L->ln2_b,
		     L->fc1_w, L->fc1_b, L->fc2_w, L->fc2_b, L->ln3_g, L->ln3_b};

	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
		rg_backend_dealloc(m->be, p[i]);
}

static void free_stack(rg_model *m, rg_bart_stack *st, const void *shared_pos)
{
	if (st->pos != shared_pos)
		rg_backend_dealloc(m->be, st->pos);
	rg_backend_dealloc(m->be, st->lne_g);
	rg_backend_dealloc(m->be, st->lne_b);
	rg_backend_dealloc(m->be, st->fin_g);
	rg_backend_dealloc(m->be, st->fin_b);
	for (int l = 0; st->layers && l < st->n_layers; l++)
		free_layer(m, &st->layers[l]);
	free(st->layers);
}

static void bart_free(rg_model *m)
{
	rg_bart_weights *w = bw(m);

	if (!w)
		return;
	rg_backend_dealloc(m->be, w->embed);
	rg_backend_dealloc(m->be, w->lm_head);
	rg_backend_dealloc(m->be, m->dec.lm_bias);
	m->dec.lm_bias = NULL;
	free_stack(m, &w->dec, w->enc.pos); /* a computed table is the encoder's */
	free_stack(m, &w->enc, NULL);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

#define RG_BART_ARCH(type)                                                                       \
	{                                                                                        \
		.model_type = type, .kind = RG_MODEL_ENC_DEC, .hparams = bart_hparams,           \
		.load = bart_load, .free_weights = bart_free, .decode = bart_decode,             \
		.encode_cross = bart_encode_cross,                                               \
	}

const rg_arch rg_arch_marian = RG_BART_ARCH("marian");
const rg_arch rg_arch_bart = RG_BART_ARCH("bart");
const rg_arch rg_arch_mbart = RG_BART_ARCH("mbart");
const rg_arch rg_arch_m2m100 = RG_BART_ARCH("m2m_100");
