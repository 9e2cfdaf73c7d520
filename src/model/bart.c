/* MarianMT (Junczys-Dowmunt et al. 2018; transformers' MarianMTModel, the opus-mt models): a
 * BART-shaped encoder-decoder (Lewis et al. 2020) with post-LayerNorm blocks, static sinusoidal
 * positions, embeddings scaled by sqrt(d_model), one embedding table shared by the encoder, the
 * decoder and the LM head, and final_logits_bias added to the logits (LightSeq sec. 2's
 * Transformer MT model; issue 29).
 *
 * Encoder, per layer (MarianEncoderLayer.forward, normalize_before false):
 *   h = LN1(h + (softmax(q k^T / sqrt(hd)) v) Wo^T + bo),   q, k, v = h Wq,k,v^T + b
 *   h = LN2(h + act(h W1^T + b1) W2^T + b2)
 * over h = sqrt(d) * shared[src] + sin_pos[0..len): bidirectional within each packed source
 * (rg_op_attention, cu_seqlens). After the last layer, each decoder layer's cross K / V
 * (encoder_attn.{k,v}_proj of the encoder output) go to the sequence's cross blocks in the KV
 * cache, once per request (rg_model_encode_cross).
 * Decoder, per layer (MarianDecoderLayer.forward):
 *   h = LN1(h + causal paged self-attention(h))
 *   h = LN2(h + cross-attention(q = h Wq_c^T + b, over the cached cross K / V))
 *   h = LN3(h + act(h W1^T + b1) W2^T + b2)
 * over h = sqrt(d) * shared[tgt] + sin_pos[position]; logits = h shared^T + final_logits_bias
 * (a distinct lm_head.weight in the file serves instead, rg_layer_load_embed_head).
 * Post-LN alternates the residual between two arena buffers; the first is chosen so that the
 * last LayerNorm lands in RG_D_NORMED, where decoder.c reads it.
 * Sinusoidal table (MarianSinusoidalPositionalEmbedding._init_weight): column j < d/2 is
 * sin(p / 10000^(2j/d)), column d/2 + j is cos(p / 10000^(2j/d)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

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

typedef struct rg_bart_weights {
	void *embed;           /* (vocab, H) act: model.shared, also the tied LM head */
	void *lm_head;         /* (vocab, H) act: a distinct lm_head.weight, or NULL */
	void *pos;             /* (max_pos, H) act: the sinusoidal table */
	float scale;           /* sqrt(d_model) with scale_embedding, else 1 */
	int n_enc, n_dec;
	rg_bart_layer *enc, *dec;
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

/* MarianConfig's keys and defaults (config.json only: no GGUF form). */
static rg_status marian_hparams(rg_model *m, const rg_cfg_src *cf)
{
	rg_decoder_config *c = &m->dec.cfg;
	const char *path = cf->path, *act;
	struct json_object *root = cf->root;
	bool scale_emb, shared, tie;
	int dec_vocab;
	rg_status s;

	if (!root)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: encoder-decoders load from config.json",
				 path);
	if ((s = rg_cfg_int(path, root, "vocab_size", false, 58101, 1, 1 << 24, &c->vocab_size)) ||
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
	    (s = rg_cfg_str(path, root, "activation_function", "gelu", &act)) ||
	    (s = rg_cfg_bool(path, root, "scale_embedding", false, &scale_emb)) ||
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
	    (s = same_int(cf, "encoder_ffn_dim", c->intermediate_size, "decoder_ffn_dim")))
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
	if (!shared || dec_vocab != c->vocab_size)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: separate source and target embeddings "
				 "(share_encoder_decoder_embeddings false or decoder_vocab_size %d != "
				 "vocab_size %d) are not supported",
				 path, dec_vocab, c->vocab_size);
	if (rg_cfg_has(root, "forced_bos_token_id"))
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: forced_bos_token_id is not supported yet",
				 path);
	if (c->decoder_start_token_id < 0)
		c->decoder_start_token_id = c->pad_token_id; /* MarianConfig's default */
	if (c->decoder_start_token_id < 0 || c->decoder_start_token_id >= c->vocab_size)
		return rg_errorf(RG_ERR_FORMAT, "%s: decoder_start_token_id %d is outside the "
				 "vocabulary [0, %d)", path, c->decoder_start_token_id,
				 c->vocab_size);
	c->num_key_value_heads = c->num_attention_heads;
	c->head_dim = c->hidden_size / c->num_attention_heads;
	c->norm_eps = 1e-5; /* nn.LayerNorm's default: MarianConfig has no key */
	c->tie_word_embeddings = tie;
	c->max_source_positions = c->max_position_embeddings;
	m->dec.cfg.rope_theta = 0;
	c->scale_embedding = scale_emb;
	return RG_OK;
}

/* The sinusoidal table (n, d), in double then uploaded in the compute dtype. */
static rg_status sinusoid(rg_model *m, int n, int d, void **dst)
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

static rg_status marian_load(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, V = c->vocab_size;
	rg_bart_weights *w;
	rg_status s;

	if (!(w = m->weights = calloc(1, sizeof(*w))) ||
	    !(w->enc = calloc((size_t)c->encoder_layers, sizeof(*w->enc))) ||
	    !(w->dec = calloc((size_t)c->num_hidden_layers, sizeof(*w->dec))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	w->n_enc = c->encoder_layers;
	w->n_dec = c->num_hidden_layers;
	w->scale = c->scale_embedding ? sqrtf((float)H) : 1.f;
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "shared.weight", TOP, "lm_head.weight",
					  &w->embed, &w->lm_head)) != RG_OK ||
	    (s = sinusoid(m, c->max_position_embeddings, H, &w->pos)) != RG_OK)
		return s;
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
	for (int l = 0; l < w->n_enc; l++) {
		char pfx[64];

		snprintf(pfx, sizeof(pfx), "encoder.layers.%d", l);
		if ((s = load_layer(m, src, pfx, false, &w->enc[l])) != RG_OK)
			return s;
	}
	for (int l = 0; l < w->n_dec; l++) {
		char pfx[64];

		snprintf(pfx, sizeof(pfx), "decoder.layers.%d", l);
		if ((s = load_layer(m, src, pfx, true, &w->dec[l])) != RG_OK)
			return s;
	}
	return RG_OK;
}

/* Post-LN residual: ln(r + delta) into the other buffer, which becomes the residual. */
static rg_status post_ln(rg_model *m, int n, const float *g, const float *b, void **r, void **y)
{
	void *t;
	rg_status s = rg_op_add_norm(m->be, m->dec.a[RG_D_DELTA], *r, g, b,
				     (float)m->dec.cfg.norm_eps, RG_NORM_LAYER, n,
				     m->dec.cfg.hidden_size, *y);

	t = *r;
	*r = *y;
	*y = t;
	return s;
}

/* The FFN sublayer of L on the residual *r (n rows). */
static rg_status ffn(rg_model *m, int n, const rg_bart_layer *L, const float *g, const float *b,
		     void **r, void **y)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, I = c->intermediate_size;
	void *inter = m->dec.a[RG_D_INTER], *delta = m->dec.a[RG_D_DELTA];
	rg_status s;

	if ((s = rg_op_gemm_bias_act(m->be, *r, L->fc1_w, L->fc1_b, inter, n, I, H,
				     c->hidden_act)) != RG_OK ||
	    (s = rg_op_gemm_bias_act(m->be, inter, L->fc2_w, L->fc2_b, delta, n, H, I,
				     RG_ACT_NONE)) != RG_OK)
		return s;
	return post_ln(m, n, g, b, r, y);
}

static rg_status marian_encode_cross(rg_model *m, const rg_enc_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const float sc = 1.f / sqrtf((float)c->head_dim);
	const rg_bart_weights *w = bw(m);
	/* 2 LayerNorms per encoder layer: start where an even count ends */
	void *r = m->dec.a[RG_D_HIDDEN], *y = m->dec.a[RG_D_NORMED];
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	rg_attn_desc d = rg_attn_packed(f->n_seq, f->cu, f->cu_h, f->max_len,
					c->num_attention_heads, c->head_dim, sc);
	rg_status s;

	if ((s = rg_op_embed_scale_add(m->be, w->embed, f->tokens, w->scale, w->pos, f->positions,
				       n, H, r)) != RG_OK)
		return s;
	for (int l = 0; l < w->n_enc; l++) {
		const rg_bart_layer *L = &w->enc[l];

		if ((s = rg_op_gemm_bias_act(m->be, r, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_attention(m->be, &d, qkv, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->o_w, L->o_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = post_ln(m, n, L->ln1_g, L->ln1_b, &r, &y)) != RG_OK ||
		    (s = ffn(m, n, L, L->ln2_g, L->ln2_b, &r, &y)) != RG_OK)
			return rg_error_wrap(s, "encoder layer %d", l);
	}
	/* r: the encoder's output; each decoder layer's cross K / V of it into the cache */
	for (int l = 0; l < w->n_dec; l++) {
		const rg_bart_layer *L = &w->dec[l];

		if ((s = rg_op_gemm_bias_act(m->be, r, L->ckv_w, L->ckv_b, qkv, n, 2 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_cross_write(m, l, qkv, 2 * H, f->slots, n)) != RG_OK)
			return rg_error_wrap(s, "cross K / V of decoder layer %d", l);
	}
	return RG_OK;
}

static rg_status marian_decode(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const float sc = 1.f / sqrtf((float)c->head_dim);
	const rg_bart_weights *w = bw(m);
	/* 3 LayerNorms per layer: the last lands in NORMED when the count's parity says so */
	const bool even = (3 * w->n_dec) % 2 == 0;
	void *r = m->dec.a[even ? RG_D_NORMED : RG_D_HIDDEN];
	void *y = m->dec.a[even ? RG_D_HIDDEN : RG_D_NORMED];
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	rg_status s;

	if ((s = rg_op_embed_scale_add(m->be, w->embed, f->tokens, w->scale, w->pos, f->positions,
				       n, H, r)) != RG_OK)
		return s;
	for (int l = 0; l < w->n_dec; l++) {
		const rg_bart_layer *L = &w->dec[l];

		if ((s = rg_op_gemm_bias_act(m->be, r, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_attention(m, f, l, qkv, sc, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->o_w, L->o_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = post_ln(m, n, L->ln1_g, L->ln1_b, &r, &y)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, r, L->cq_w, L->cq_b, qkv, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_dec_cross_attend(m, f, l, qkv, H, sc, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, ctx, L->co_w, L->co_b, delta, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = post_ln(m, n, L->ln2_g, L->ln2_b, &r, &y)) != RG_OK ||
		    (s = ffn(m, n, L, L->ln3_g, L->ln3_b, &r, &y)) != RG_OK)
			return rg_error_wrap(s, "decoder layer %d", l);
	}
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

static void marian_free(rg_model *m)
{
	rg_bart_weights *w = bw(m);

	if (!w)
		return;
	rg_backend_dealloc(m->be, w->embed);
	rg_backend_dealloc(m->be, w->lm_head);
	rg_backend_dealloc(m->be, w->pos);
	rg_backend_dealloc(m->be, m->dec.lm_bias);
	m->dec.lm_bias = NULL;
	for (int l = 0; w->enc && l < w->n_enc; l++)
		free_layer(m, &w->enc[l]);
	for (int l = 0; w->dec && l < w->n_dec; l++)
		free_layer(m, &w->dec[l]);
	free(w->enc);
	free(w->dec);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

const rg_arch rg_arch_marian = {
	.model_type = "marian",
	.kind = RG_MODEL_ENC_DEC,
	.hparams = marian_hparams,
	.load = marian_load,
	.free_weights = marian_free,
	.decode = marian_decode,
	.encode_cross = marian_encode_cross,
};
