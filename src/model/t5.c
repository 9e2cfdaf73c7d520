/* T5, mT5 and FLAN-T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
 * Unified Text-to-Text Transformer"; transformers' modeling_t5.py, T5ForConditionalGeneration):
 * an encoder-decoder of pre-norm blocks, run like bart.c's (issue 29; tests/py/ref_seq2seq.py is
 * the float64 reference):
 *
 *   embedding   shared[tok], no scaling, no position embeddings
 *   norm        T5LayerNorm: RMSNorm without bias or mean subtraction, eps layer_norm_epsilon,
 *               variance in f32 (rg_op_add_norm RG_NORM_RMS)
 *   attention   q / k / v / o without bias, heads of d_kv (which may differ from
 *               d_model / num_heads), no logit scaling (scale 1); self-attention adds a relative
 *               position bias (below); cross-attention none
 *   FFN         feed_forward_proj "relu" (T5: DenseReluDense.wi / wo) or "gated-<act>"
 *               (v1.1, FLAN-T5, mT5: act(wi_0 x) * wi_1 x, then wo; "gated-gelu" is gelu_new,
 *               the tanh form, as T5Config maps it)
 *   head        lm_head.weight when the file has one (v1.1 / FLAN-T5 / mT5, untied), else the
 *               shared table; with config tie_word_embeddings (T5) the decoder output is scaled
 *               by d_model^-0.5 before the head (folded here into the decoder's final norm)
 *   decoding    decoder_start_token_id = pad_token_id (0) unless config.json says otherwise
 *
 * Relative position bias (Raffel et al. 2020 sec. 2.1; T5Attention._relative_position_bucket):
 * the relative_attention_bias table (num_buckets, heads) of block 0 of each stack serves every
 * layer of that stack. Distance r = key position - query position falls in a bucket: the
 * encoder's are bidirectional (half the buckets per sign), the decoder's unidirectional (r > 0
 * never occurs: causal); |r| below max_exact = buckets / 2 (of a side) maps one-to-one, larger
 * ones logarithmically up to max_distance, past which they share the last bucket. The table is
 * expanded at load into rg_attn_desc's (heads, 2 R + 1) form with R = max_distance, exact since
 * every bucket saturates by then; the encoder's goes to rg_op_attention (positions within each
 * packed source), the decoder's to rg_op_paged_attention (the key's and the query's absolute
 * positions in the target). Both stacks' residual streams are layers.h's rg_s2s_rs (pre-norm,
 * RMS): the residual in RG_D_HIDDEN, each norm's output in RG_D_NORMED. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "model/layers.h"
#include "model/model.h"

/* The config class's defaults of one model_type (T5Config, MT5Config). */
typedef struct rg_t5_family {
	const char *model_type;
	int vocab, d_model, d_kv, d_ff, layers, heads;
	const char *ff_proj;
	bool tie;
} rg_t5_family;

static const rg_t5_family FAMILIES[] = {
	{"t5", 32128, 512, 64, 2048, 6, 8, "relu", true},
	{"mt5", 250112, 512, 64, 1024, 8, 6, "gated-gelu", false},
};

static const rg_t5_family *family_of(const rg_model *m)
{
	for (size_t i = 0; i < sizeof(FAMILIES) / sizeof(FAMILIES[0]); i++)
		if (strcmp(FAMILIES[i].model_type, m->arch->model_type) == 0)
			return &FAMILIES[i];
	return NULL;
}

typedef struct rg_t5_layer {
	float *ln_sa;   /* (H) f32: layer.0.layer_norm */
	void *qkv_w;    /* (3 D, H) act: SelfAttention [q; k; v], D = heads * d_kv */
	void *o_w;      /* (H, D) act: SelfAttention.o */
	float *ln_ca;   /* decoder: (H) f32, layer.1.layer_norm */
	void *cq_w;     /* decoder: (D, H) act, EncDecAttention.q */
	void *ckv_w;    /* decoder: (2 D, H) act, EncDecAttention [k; v] */
	void *co_w;     /* decoder: (H, D) act, EncDecAttention.o */
	float *ln_ff;   /* (H) f32: the FFN sublayer's layer_norm */
	void *wi_w;     /* (I, H) act: wi; gated: (2 I, H) [wi_0; wi_1] */
	void *wo_w;     /* (H, I) act */
} rg_t5_layer;

typedef struct rg_t5_stack {
	int n_layers;
	rg_t5_layer *layers; /* (n_layers) */
	float *rel;          /* (heads, 2 rel_max + 1) f32: the expanded position bias */
	float *fin;          /* (H) f32: final_layer_norm (the decoder's times d_model^-0.5 when
			      * tied) */
} rg_t5_stack;

typedef struct rg_t5_weights {
	void *embed;   /* (vocab, H) act: shared.weight */
	void *lm_head; /* (vocab, H) act: a distinct lm_head.weight, or NULL */
	bool gated;    /* feed_forward_proj gated-* */
	rg_act ff_act; /* the FFN's activation */
	bool tie_cfg;  /* config.json tie_word_embeddings: scale the decoder output */
	int buckets, max_distance;
	rg_t5_stack enc, dec;
} rg_t5_weights;

static const char *const PREFIXES[] = {"", NULL};

static rg_t5_weights *tw(const rg_model *m)
{
	return m->weights;
}

/* The hyper-parameters of T5Config / MT5Config (config.json only). feed_forward_proj is
 * "<act>" or "gated-<act>" (act relu, gelu, gelu_new, silu / swish; "gated-gelu" is gelu_new);
 * relative_attention_max_distance must exceed num_buckets / 2 (where the log buckets start),
 * else the bucket function is not monotone and RG_ERR_UNSUPPORTED names the keys. The limit of
 * source and target lengths is n_positions (default 512: T5 has no position table). */
static rg_status t5_hparams(rg_model *m, const rg_cfg_src *cf)
{
	const rg_t5_family *fam = family_of(m);
	rg_decoder_config *c = &m->dec.cfg;
	const char *path = cf->path, *proj, *act;
	struct json_object *root = cf->root;
	bool tie;
	rg_status s;

	if (!fam)
		return rg_errorf(RG_ERR_INTERNAL, "t5.c: no family for model_type %s",
				 m->arch->model_type);
	if (!root)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: encoder-decoders load from config.json",
				 path);
	if ((s = rg_cfg_int(path, root, "vocab_size", false, fam->vocab, 1, 1 << 24,
			    &c->vocab_size)) ||
	    (s = rg_cfg_int(path, root, "d_model", false, fam->d_model, 1, 1 << 20,
			    &c->hidden_size)) ||
	    (s = rg_cfg_int(path, root, "d_kv", false, fam->d_kv, 1, 1 << 16, &c->head_dim)) ||
	    (s = rg_cfg_int(path, root, "d_ff", false, fam->d_ff, 1, 1 << 24,
			    &c->intermediate_size)) ||
	    (s = rg_cfg_int(path, root, "num_layers", false, fam->layers, 1, 1 << 12,
			    &c->encoder_layers)) ||
	    (s = rg_cfg_int(path, root, "num_decoder_layers", false, c->encoder_layers, 1, 1 << 12,
			    &c->num_hidden_layers)) ||
	    (s = rg_cfg_int(path, root, "num_heads", false, fam->heads, 1, 1 << 12,
			    &c->num_attention_heads)) ||
	    (s = rg_cfg_int(path, root, "relative_attention_num_buckets", false, 32, 4, 1 << 16,
			    &c->rel_buckets)) ||
	    (s = rg_cfg_int(path, root, "relative_attention_max_distance", false, 128, 1, 1 << 16,
			    &c->rel_max_distance)) ||
	    (s = rg_cfg_int(path, root, "n_positions", false, 512, 1, 1 << 20,
			    &c->max_position_embeddings)) ||
	    (s = rg_cfg_double(path, root, "layer_norm_epsilon", 1e-6, 0, 1, &c->norm_eps)) ||
	    (s = rg_cfg_str(path, root, "feed_forward_proj", fam->ff_proj, &proj)) ||
	    (s = rg_cfg_bool(path, root, "tie_word_embeddings", fam->tie, &tie)) ||
	    (s = rg_cfg_token_id(path, root, "eos_token_id", &c->eos_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "pad_token_id", &c->pad_token_id)) ||
	    (s = rg_cfg_token_id(path, root, "decoder_start_token_id",
				 &c->decoder_start_token_id)))
		return s;
	if (!rg_cfg_has(root, "pad_token_id"))
		c->pad_token_id = 0;
	if (!rg_cfg_has(root, "eos_token_id"))
		c->eos_token_id = 1;
	/* feed_forward_proj: T5Config's split("-"), "gated-gelu" as gelu_new */
	act = proj;
	c->gated_ffn = strncmp(proj, "gated-", 6) == 0;
	if (c->gated_ffn)
		act = strcmp(proj, "gated-gelu") == 0 ? "gelu_new" : proj + 6;
	if (strchr(act, '-'))
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: feed_forward_proj \"%s\" is not "
				 "\"<act>\" or \"gated-<act>\"", path, proj);
	if ((s = rg_cfg_act(path, "feed_forward_proj", act,
			    1u << RG_ACT_SILU | 1u << RG_ACT_GELU | 1u << RG_ACT_GELU_NEW |
				    1u << RG_ACT_RELU,
			    &c->hidden_act, &c->act_name)) != RG_OK)
		return s;
	if (c->rel_max_distance <= c->rel_buckets / 2)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: relative_attention_max_distance %d must be "
				 "over relative_attention_num_buckets / 2 (%d): the buckets past the "
				 "exact ones would not grow with the distance", path,
				 c->rel_max_distance, c->rel_buckets / 2);
	if (c->decoder_start_token_id < 0)
		c->decoder_start_token_id = c->pad_token_id;
	if (c->decoder_start_token_id < 0 || c->decoder_start_token_id >= c->vocab_size)
		return rg_errorf(RG_ERR_FORMAT, "%s: decoder_start_token_id %d is outside the "
				 "vocabulary [0, %d)", path, c->decoder_start_token_id,
				 c->vocab_size);
	c->num_key_value_heads = c->num_attention_heads;
	c->tie_word_embeddings = tie;
	c->max_source_positions = c->max_position_embeddings;
	c->rope_theta = 0;
	c->scale_embedding = false;
	return RG_OK;
}

/* T5Attention._relative_position_bucket for r = key - query position, the logarithm in float32
 * as torch computes it. */
static int rel_bucket(int r, bool bidirectional, int buckets, int max_distance)
{
	int b = 0, n = buckets, max_exact, large;
	float v;

	if (bidirectional) {
		n /= 2;
		b = r > 0 ? n : 0;
		r = r < 0 ? -r : r;
	} else {
		r = r < 0 ? -r : 0;
	}
	max_exact = n / 2;
	if (r < max_exact)
		return b + r;
	v = logf((float)r / (float)max_exact) / (float)log((double)max_distance / max_exact) *
	    (float)(n - max_exact);
	large = max_exact + (int)v;
	return b + (large < n - 1 ? large : n - 1);
}

/* The stack's <name>.block.0.layer.0.SelfAttention.relative_attention_bias.weight (buckets,
 * heads) expanded into st->rel (heads, 2 R + 1), R = max_distance. */
static rg_status load_rel(rg_model *m, const rg_tsrc *src, const char *name, rg_t5_stack *st)
{
	const rg_t5_weights *w = tw(m);
	const int nh = m->dec.cfg.num_attention_heads, R = w->max_distance, W = 2 * R + 1;
	const bool bidir = strcmp(name, "encoder") == 0;
	char n[96];
	float *tab = NULL, *rel;
	rg_status s;

	snprintf(n, sizeof(n), "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
		 name);
	if ((s = rg_tsrc_get(src, PREFIXES, n, w->buckets, nh, &tab)) != RG_OK)
		return rg_error_wrap(s, "relative_attention_num_buckets %d x num_heads %d",
				     w->buckets, nh);
	if (!(rel = malloc((size_t)nh * W * sizeof(float)))) {
		free(tab);
		return rg_errorf(RG_ERR_OOM, "out of host memory for the position bias");
	}
	for (int r = -R; r <= R; r++) {
		const int b = rel_bucket(r, bidir, w->buckets, R);

		for (int h = 0; h < nh; h++)
			rel[(size_t)h * W + R + r] = tab[(size_t)b * nh + h];
	}
	free(tab);
	return rg_dec_upload(m, rel, (size_t)nh * W, false, (void **)&st->rel);
}

/* SelfAttention (sub 0) or EncDecAttention (sub 1) of the block under pfx: [q; k; v] stacked
 * (self), q and [k; v] (cross), o. */
static rg_status load_attn(rg_model *m, const rg_tsrc *src, const char *pfx, bool cross,
			   rg_t5_layer *L)
{
	const int64_t H = m->dec.cfg.hidden_size;
	const int64_t D = (int64_t)m->dec.cfg.num_attention_heads * m->dec.cfg.head_dim;
	const int64_t d3[3] = {D, D, D};
	const char *kind = cross ? "1.EncDecAttention" : "0.SelfAttention";
	const char *proj = "qkvo";
	char nm[4][128];
	const char *nms[3] = {nm[0], nm[1], nm[2]};
	rg_status s;

	for (int i = 0; i < 4; i++)
		snprintf(nm[i], sizeof(nm[i]), "%s.layer.%s.%c.weight", pfx, kind, proj[i]);
	if (cross) {
		nms[0] = nm[1];
		nms[1] = nm[2];
		if ((s = rg_layer_load_linear(m, src, PREFIXES, nm[0], D, H, &L->cq_w)) ||
		    (s = rg_layer_load_stacked(m, src, PREFIXES, nms, d3, 2, H, true, &L->ckv_w)) ||
		    (s = rg_layer_load_linear(m, src, PREFIXES, nm[3], H, D, &L->co_w)))
			return s;
		return RG_OK;
	}
	if ((s = rg_layer_load_stacked(m, src, PREFIXES, nms, d3, 3, H, true, &L->qkv_w)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, nm[3], H, D, &L->o_w)))
		return s;
	return RG_OK;
}

/* A T5LayerNorm's weight "<pfx>.layer.<sub>.layer_norm.weight" (H) f32. */
static rg_status load_norm(rg_model *m, const rg_tsrc *src, const char *pfx, int sub, float **g)
{
	char n[128];

	snprintf(n, sizeof(n), "%s.layer.%d.layer_norm.weight", pfx, sub);
	return rg_layer_load_vec(m, src, PREFIXES, n, m->dec.cfg.hidden_size, false, (void **)g);
}

/* One block under pfx ("decoder.block.3"): self-attention, the decoder's cross-attention, the
 * FFN (DenseReluDense.wi or .wi_0 / .wi_1, .wo) with their norms. */
static rg_status load_block(rg_model *m, const rg_tsrc *src, const char *pfx, bool dec,
			    rg_t5_layer *L)
{
	const rg_t5_weights *w = tw(m);
	const int64_t H = m->dec.cfg.hidden_size, I = m->dec.cfg.intermediate_size;
	const int64_t d2[2] = {I, I};
	const int ff = dec ? 2 : 1;
	char nm[3][128];
	const char *wi[2] = {nm[0], nm[1]};
	rg_status s;

	if (w->gated) {
		snprintf(nm[0], sizeof(nm[0]), "%s.layer.%d.DenseReluDense.wi_0.weight", pfx, ff);
		snprintf(nm[1], sizeof(nm[1]), "%s.layer.%d.DenseReluDense.wi_1.weight", pfx, ff);
	} else {
		snprintf(nm[0], sizeof(nm[0]), "%s.layer.%d.DenseReluDense.wi.weight", pfx, ff);
	}
	snprintf(nm[2], sizeof(nm[2]), "%s.layer.%d.DenseReluDense.wo.weight", pfx, ff);
	if ((s = load_norm(m, src, pfx, 0, &L->ln_sa)) || (s = load_attn(m, src, pfx, false, L)) ||
	    (dec && ((s = load_norm(m, src, pfx, 1, &L->ln_ca)) ||
		     (s = load_attn(m, src, pfx, true, L)))) ||
	    (s = load_norm(m, src, pfx, ff, &L->ln_ff)) ||
	    (s = rg_layer_load_stacked(m, src, PREFIXES, wi, d2, w->gated ? 2 : 1, H, true,
				       &L->wi_w)) ||
	    (s = rg_layer_load_linear(m, src, PREFIXES, nm[2], H, I, &L->wo_w)))
		return s;
	return RG_OK;
}

/* One stack ("encoder" / "decoder"): its position bias, blocks and final_layer_norm (times
 * scale). */
static rg_status load_stack(rg_model *m, const rg_tsrc *src, const char *name, float scale,
			    rg_t5_stack *st)
{
	const int H = m->dec.cfg.hidden_size;
	const bool dec = strcmp(name, "decoder") == 0;
	char pfx[64];
	float *fin = NULL;
	rg_status s;

	if (!(st->layers = calloc((size_t)st->n_layers, sizeof(*st->layers))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if ((s = load_rel(m, src, name, st)) != RG_OK)
		return s;
	for (int l = 0; l < st->n_layers; l++) {
		snprintf(pfx, sizeof(pfx), "%s.block.%d", name, l);
		if ((s = load_block(m, src, pfx, dec, &st->layers[l])) != RG_OK)
			return s;
	}
	snprintf(pfx, sizeof(pfx), "%s.final_layer_norm.weight", name);
	if ((s = rg_tsrc_get(src, PREFIXES, pfx, H, -1, &fin)) != RG_OK)
		return s;
	for (int i = 0; i < H; i++)
		fin[i] *= scale;
	return rg_dec_upload(m, fin, (size_t)H, false, (void **)&st->fin);
}

static rg_status t5_load(rg_model *m, const rg_tsrc *src)
{
	const rg_decoder_config *c = &m->dec.cfg;
	rg_t5_weights *w;
	rg_status s;

	if (!(w = m->weights = calloc(1, sizeof(*w))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	w->enc.n_layers = c->encoder_layers;
	w->dec.n_layers = c->num_hidden_layers;
	w->ff_act = c->hidden_act;
	w->tie_cfg = c->tie_word_embeddings; /* the config's; the loader below resets it */
	w->buckets = c->rel_buckets;
	w->max_distance = c->rel_max_distance;
	w->gated = c->gated_ffn;
	if ((s = rg_layer_load_embed_head(m, src, PREFIXES, "shared.weight", PREFIXES,
					  "lm_head.weight", false, &w->embed, &w->lm_head)) != RG_OK ||
	    (s = load_stack(m, src, "encoder", 1.f, &w->enc)) != RG_OK ||
	    (s = load_stack(m, src, "decoder",
			    w->tie_cfg ? 1.f / sqrtf((float)c->hidden_size) : 1.f, &w->dec)) != RG_OK)
		return s;
	return RG_OK;
}

/* The FFN sublayer of L on the stream (norm L->ln_ff): act(x wi^T) wo^T, or gated
 * (act(x wi_0^T) * x wi_1^T) wo^T (rg_op_act_mul), into RG_D_DELTA. */
static rg_status ffn(rg_model *m, int n, const rg_t5_layer *L, rg_s2s_rs *rs)
{
	const rg_t5_weights *w = tw(m);
	const int H = m->dec.cfg.hidden_size, I = m->dec.cfg.intermediate_size;
	void *inter = m->dec.a[RG_D_INTER], *mlp = m->dec.a[RG_D_MLP];
	void *delta = m->dec.a[RG_D_DELTA];
	const void *x;
	rg_status s;

	if ((s = rg_s2s_sub_in(m, n, rs, L->ln_ff, NULL, &x)) != RG_OK)
		return s;
	if (w->gated)
		s = rg_op_gemm(m->be, x, L->wi_w, inter, n, 2 * I, H);
	else
		s = rg_op_gemm_bias_act(m->be, x, L->wi_w, NULL, mlp, n, I, H, w->ff_act);
	if (s != RG_OK || (w->gated && (s = rg_op_act_mul(m->be, inter, n, I, w->ff_act,
							   mlp)) != RG_OK) ||
	    (s = rg_op_gemm(m->be, mlp, L->wo_w, delta, n, H, I)) != RG_OK)
		return s;
	return rg_s2s_sub_out(m, n, rs, delta, L->ln_ff, NULL);
}

/* The self-attention sublayer of L (norm L->ln_sa) on the stream: the encoder's through
 * rg_op_attention over enc (packed sources, bidirectional bias), or, with enc NULL, decoder
 * layer l's through the step f's paged cache (KV write, causal, unidirectional bias); scale 1. */
static rg_status self_attn(rg_model *m, int n, const rg_t5_layer *L, rg_s2s_rs *rs,
			   const rg_attn_desc *enc, rg_dec_fwd *f, int l)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, D = c->num_attention_heads * c->head_dim;
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	const void *x;
	rg_status s;

	if ((s = rg_s2s_sub_in(m, n, rs, L->ln_sa, NULL, &x)) != RG_OK ||
	    (s = rg_op_gemm(m->be, x, L->qkv_w, qkv, n, 3 * D, H)) != RG_OK ||
	    (s = enc ? rg_op_attention(m->be, enc, qkv, ctx)
		     : rg_dec_attention(m, f, l, qkv, 1.f, ctx)) != RG_OK ||
	    (s = rg_op_gemm(m->be, ctx, L->o_w, delta, n, H, D)) != RG_OK)
		return s;
	return rg_s2s_sub_out(m, n, rs, delta, L->ln_sa, NULL);
}

/* The stream of a stack: residual in HIDDEN, norms into NORMED (pre-norm, RMS). */
static rg_s2s_rs stream(rg_model *m)
{
	return (rg_s2s_rs){m->dec.a[RG_D_HIDDEN], m->dec.a[RG_D_NORMED], NULL, true, RG_NORM_RMS};
}

static rg_status t5_encode_cross(rg_model *m, const rg_enc_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n;
	const rg_t5_weights *w = tw(m);
	rg_s2s_rs rs = stream(m);
	void *out;
	rg_attn_desc d = rg_attn_packed(f->n_seq, f->cu, f->cu_h, f->max_len,
					c->num_attention_heads, c->head_dim, 1.f);
	rg_status s;

	d.rel_bias = w->enc.rel;
	d.rel_max = w->max_distance;
	if ((s = rg_op_embed_scale_add(m->be, w->embed, f->tokens, 1.f, NULL, f->positions, -1, n,
				       H, rs.r)) != RG_OK)
		return s;
	for (int l = 0; l < w->enc.n_layers; l++) {
		const rg_t5_layer *L = &w->enc.layers[l];

		if ((s = self_attn(m, n, L, &rs, &d, NULL, l)) != RG_OK ||
		    (s = ffn(m, n, L, &rs)) != RG_OK)
			return rg_error_wrap(s, "encoder block %d", l);
	}
	if ((s = rg_s2s_stack_out(m, n, &rs, w->enc.fin, NULL, &out)) != RG_OK)
		return rg_error_wrap(s, "encoder final_layer_norm");
	for (int l = 0; l < w->dec.n_layers; l++)
		if ((s = rg_s2s_cross_kv(m, out, n, l, w->dec.layers[l].ckv_w, NULL, f->slots)) !=
		    RG_OK)
			return s;
	return RG_OK;
}

static rg_status t5_decode(rg_model *m, rg_dec_fwd *f)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, D = c->num_attention_heads * c->head_dim, n = f->n;
	const rg_t5_weights *w = tw(m);
	rg_s2s_rs rs = stream(m);
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX], *delta = m->dec.a[RG_D_DELTA];
	void *out;
	rg_status s;

	f->attn.rel_bias = w->dec.rel; /* self-attention only: f->cross has none */
	f->attn.rel_max = w->max_distance;
	if ((s = rg_op_embed_scale_add(m->be, w->embed, f->tokens, 1.f, NULL, f->positions, -1, n,
				       H, rs.r)) != RG_OK)
		return s;
	for (int l = 0; l < w->dec.n_layers; l++) {
		const rg_t5_layer *L = &w->dec.layers[l];
		const void *x;

		if ((s = self_attn(m, n, L, &rs, NULL, f, l)) != RG_OK ||
		    (s = rg_s2s_sub_in(m, n, &rs, L->ln_ca, NULL, &x)) != RG_OK ||
		    (s = rg_op_gemm(m->be, x, L->cq_w, qkv, n, D, H)) != RG_OK ||
		    (s = rg_dec_cross_attend(m, f, l, qkv, D, 1.f, ctx)) != RG_OK ||
		    (s = rg_op_gemm(m->be, ctx, L->co_w, delta, n, H, D)) != RG_OK ||
		    (s = rg_s2s_sub_out(m, n, &rs, delta, L->ln_ca, NULL)) != RG_OK ||
		    (s = ffn(m, n, L, &rs)) != RG_OK)
			return rg_error_wrap(s, "decoder block %d", l);
	}
	if ((s = rg_s2s_stack_out(m, n, &rs, w->dec.fin, NULL, &out)) != RG_OK)
		return rg_error_wrap(s, "decoder final_layer_norm");
	if (out != m->dec.a[RG_D_NORMED])
		return rg_errorf(RG_ERR_INTERNAL, "t5.c: the decoder's output is not in NORMED");
	return RG_OK;
}

static void free_stack(rg_model *m, rg_t5_stack *st)
{
	rg_backend_dealloc(m->be, st->rel);
	rg_backend_dealloc(m->be, st->fin);
	for (int l = 0; st->layers && l < st->n_layers; l++) {
		rg_t5_layer *L = &st->layers[l];
		void *p[] = {L->ln_sa, L->qkv_w, L->o_w,   L->ln_ca, L->cq_w,
			     L->ckv_w, L->co_w,  L->ln_ff, L->wi_w,  L->wo_w};

		for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
			rg_backend_dealloc(m->be, p[i]);
	}
	free(st->layers);
}

static void t5_free(rg_model *m)
{
	rg_t5_weights *w = tw(m);

	if (!w)
		return;
	rg_backend_dealloc(m->be, w->embed);
	rg_backend_dealloc(m->be, w->lm_head);
	free_stack(m, &w->dec);
	free_stack(m, &w->enc);
	free(w);
	m->weights = NULL;
	m->dec.lm_head = NULL;
}

#define RG_T5_ARCH(type)                                                                         \
	{                                                                                        \
		.model_type = type, .kind = RG_MODEL_ENC_DEC, .hparams = t5_hparams,             \
		.load = t5_load, .free_weights = t5_free, .decode = t5_decode,                   \
		.encode_cross = t5_encode_cross,                                                 \
	}

const rg_arch rg_arch_t5 = RG_T5_ARCH("t5");
const rg_arch rg_arch_mt5 = RG_T5_ARCH("mt5");
