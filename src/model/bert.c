/* The BERT-shaped encoders: BERT, RoBERTa, XLM-RoBERTa, DistilBERT and MPNet share one layer
 * (post-LN self-attention and GELU FFN) and differ in weight names, token types and positions;
 * MPNet adds a relative position bias to every layer's attention scores. Their weights and
 * encoder are the rg_arch hooks of model.h; the runtime around them (arena, execution paths,
 * pooling) is model.c. RoBERTa's (and MPNet's) position offset (padding_idx + 1) is applied
 * where model.c stages the positions (config.h, position_offset).
 *
 * MPNet (transformers' MPNetModel): encoder.relative_attention_bias (num_buckets, heads), shared
 * by every layer, is looked up by the T5-style bidirectional bucket of key - query
 * (MPNetEncoder.relative_position_bucket: 32 buckets, max_distance 128) and added to the scaled
 * scores before the softmax. The bucket depends only on the distance and saturates at 128, so
 * the load expands the table once per head over distances [-128, 128] and the fused varlen
 * attention indexes it by the clamped distance of two tokens of one sequence
 * (rg_op_attention's rel_bias).
 *
 * Weights: every tensor checked against config.json, Q/K/V fused into one (3H, H) projection,
 * converted to f32 on the host and uploaded once in the compute dtype (GEMM weights and biases;
 * LayerNorm parameters stay f32); the four GEMM weights of a layer are then prepared for the
 * backend's GEMM (rg_op_prepare_weight).
 *
 * Embed (packed, ByteTransformer sec. III-D): per layer
 *   qkv = h Wqkv^T + bqkv (bias in the GEMM epilogue); ctx = varlen attention(qkv) (+ MPNet's
 *   relative position bias on the scores);
 *   t = ctx Wo^T + bo (epilogue); h = LN(t + h); u = act(h W1^T + b1) (bias + GELU epilogue);
 *   t = u W2^T + b2 (epilogue); h = LN(t + h);
 * then pool per sequence (+ L2 normalize).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/model.h"

/* Per layer weights in backend memory. act: compute dtype; f32: float32. */
typedef struct rg_bert_layer {
	void *qkv_w;    /* (3H, H) act: rows [Wq; Wk; Wv] */
	void *qkv_b;    /* (3H) act (GEMM epilogue bias) */
	void *o_w;      /* (H, H) act */
	void *o_b;      /* (H) act */
	float *ln1_g;   /* (H) f32 */
	float *ln1_b;   /* (H) f32 */
	void *ff1_w;    /* (I, H) act */
	void *ff1_b;    /* (I) act */
	void *ff2_w;    /* (H, I) act */
	void *ff2_b;    /* (H) act */
	float *ln2_g;   /* (H) f32 */
	float *ln2_b;   /* (H) f32 */
	void *pos_key;   /* DeBERTa c2p: (2 att_span, H) act, K projection of the relative
			  * embeddings; else NULL */
	void *pos_query; /* DeBERTa p2c: (2 att_span, H) act, Q projection; else NULL */
} rg_bert_layer;

/* Every BERT weight in backend memory. E = embedding_size (= H but for ALBERT). */
typedef struct rg_bert_weights {
	void *word;              /* (vocab, E) act */
	void *pos;               /* (type blocks * max_pos, E) act (see bert_load) */
	void *type0;             /* (E) act, token_type_embeddings row 0 */
	float *emb_g, *emb_b;    /* (E) f32 */
	void *map_w, *map_b;     /* ALBERT: (H, E), (H) act, embedding_hidden_mapping_in; else NULL */
	float *rel_bias;         /* MPNet: (heads, 2 RG_MPNET_MAX_DISTANCE + 1) f32 bias per
				  * distance key - query; NULL for the other families */
	int32_t *dis_idx;        /* DeBERTa: (2 max_position_embeddings + 1) int32, the c2p / p2c
				  * column of each distance query - key (rg_attn_disent.idx) */
	rg_bert_layer *layers;   /* (num_hidden_layers); ALBERT: every entry is layer 0's weights */
} rg_bert_weights;

/* transformers' MPNetEncoder.compute_position_bias: relative_position_bucket's defaults */
#define RG_MPNET_BUCKETS 32
#define RG_MPNET_MAX_DISTANCE 128

static rg_bert_weights *bw(const rg_model *m)
{
	return m->weights;
}

/* Where a family keeps each weight of a layer (without the base model prefix, which
 * rg_model_read_tensor strips, and without ".weight"/".bias"). */
typedef struct rg_bert_names {
	const char *layer;   /* printf format of a layer's prefix */
	const char *qkv[3];  /* query, key, value projections */
	const char *o;       /* attention output projection */
	const char *ln1;     /* LayerNorm after attention */
	const char *ff1;     /* FFN up */
	const char *ff2;     /* FFN down */
	const char *ln2;     /* LayerNorm after the FFN */
} rg_bert_names;

/* transformers' BertLayer / RobertaLayer / XLMRobertaLayer */
static const rg_bert_names BERT_NAMES = {
	"encoder.layer.%d.",
	{"attention.self.query", "attention.self.key", "attention.self.value"},
	"attention.output.dense", "attention.output.LayerNorm",
	"intermediate.dense", "output.dense", "output.LayerNorm",
};
/* transformers' AlbertLayer (one group of one layer, shared by every layer) */
static const rg_bert_names ALBERT_NAMES = {
	"encoder.albert_layer_groups.0.albert_layers.0.",
	{"attention.query", "attention.key", "attention.value"},
	"attention.dense", "attention.LayerNorm",
	"ffn", "ffn_output", "full_layer_layer_norm",
};
/* transformers' DebertaV2Layer */
static const rg_bert_names DEBERTA_NAMES = {
	"encoder.layer.%d.",
	{"attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj"},
	"attention.output.dense", "attention.output.LayerNorm",
	"intermediate.dense", "output.dense", "output.LayerNorm",
};
/* transformers' MPNetLayer */
static const rg_bert_names MPNET_NAMES = {
	"encoder.layer.%d.",
	{"attention.attn.q", "attention.attn.k", "attention.attn.v"},
	"attention.attn.o", "attention.LayerNorm",
	"intermediate.dense", "output.dense", "output.LayerNorm",
};
/* transformers' DistilBERT TransformerBlock */
static const rg_bert_names DISTILBERT_NAMES = {
	"transformer.layer.%d.",
	{"attention.q_lin", "attention.k_lin", "attention.v_lin"},
	"attention.out_lin", "sa_layer_norm",
	"ffn.lin1", "ffn.lin2", "output_layer_norm",
};

static const rg_bert_names *names_of(const rg_model *m)
{
	if (!strcmp(m->cfg.model_type, "distilbert"))
		return &DISTILBERT_NAMES;
	if (!strcmp(m->cfg.model_type, "albert"))
		return &ALBERT_NAMES;
	if (!strcmp(m->cfg.model_type, "mpnet"))
		return &MPNET_NAMES;
	if (!strcmp(m->cfg.model_type, "deberta-v2"))
		return &DEBERTA_NAMES;
	return &BERT_NAMES;
}

/* transformers' MPNetEncoder.relative_position_bucket(key - query, num_buckets = 32,
 * max_distance = 128): T5's bidirectional buckets. Half the buckets for keys after the query; in
 * each half, distances below a quarter of the buckets (8) exactly, then logarithmically up to
 * max_distance, which and anything past it share the half's last bucket. */
static int mpnet_bucket(int rel)
{
	const int half = RG_MPNET_BUCKETS / 2, max_exact = half / 2;
	int n = -rel, ret = 0, large;

	if (n < 0) {
		ret = half;
		n = -n;
	}
	if (n < max_exact)
		return ret + n;
	large = max_exact + (int)(log((double)n / max_exact) /
				  log((double)RG_MPNET_MAX_DISTANCE / max_exact) *
				  (half - max_exact));
	return ret + (large < half - 1 ? large : half - 1);
}

/* The MPNet bias table: per head, tab[h][R + d] = relative_attention_bias[bucket(d)][h] for
 * distances d = key - query in [-R, R], R = RG_MPNET_MAX_DISTANCE, uploaded as f32. */
static rg_status load_rel_bias(rg_model *m, const rg_tsrc *src, float *scratch)
{
	const int nh = m->cfg.num_attention_heads, R = RG_MPNET_MAX_DISTANCE;
	const int nb = m->cfg.relative_attention_num_buckets;
	const size_t w = 2 * (size_t)R + 1;
	float *tab = scratch + (size_t)nb * nh; /* after the (nb, nh) weight */
	rg_status s;

	s = rg_model_read_tensor(src, "encoder.relative_attention_bias.weight", NULL, nb, nh,
				 scratch);
	if (s != RG_OK)
		return s;
	for (int d = -R; d <= R; d++) {
		const int b = mpnet_bucket(d);

		for (int h = 0; h < nh; h++)
			tab[(size_t)h * w + (size_t)(R + d)] = scratch[(size_t)b * nh + h];
	}
	return rg_model_upload(m, tab, (size_t)nh * w, false, (void **)&bw(m)->rel_bias);
}

/* Name of one tensor of layer l: the family's layer prefix, the module, the suffix. */
static void layer_name(char *buf, size_t n, const rg_bert_names *nm, int l, const char *module,
		       const char *suffix)
{
	/* ALBERT's shared layer has no layer number in its names */
	int k = strstr(nm->layer, "%d") ? snprintf(buf, n, nm->layer, l) : snprintf(buf, n, "%s",
										    nm->layer);

	snprintf(buf + k, n - (size_t)k, "%s.%s", module, suffix);
}

/* transformers' make_log_bucket_position(rel, bucket_size, max_position) for one distance
 * rel = query - key: exact within bucket_size / 2, then logarithmic up to max_position, odd in
 * rel. Computed in double; on the ranges the tests cover (bucket sizes 4..256, max_position
 * 32..1024, |rel| <= 2000) it equals torch's float32 arithmetic (ref_bert.py checks its own
 * float64 twin of this function against transformers'). */
static int deberta_bucket(int rel, int bucket_size, int max_position)
{
	const int mid = bucket_size / 2, sign = (rel > 0) - (rel < 0);
	const int abs_pos = rel < mid && rel > -mid ? mid - 1 : abs(rel);
	double log_pos;

	if (abs_pos <= mid)
		return rel;
	log_pos = ceil(log((double)abs_pos / mid) / log((double)(max_position - 1) / mid) *
		       (mid - 1)) + mid;
	return (int)log_pos * sign;
}

/* DeBERTa's index table over distances d = query - key in [-R, R], R = max_position_embeddings
 * (no sequence is longer): idx[R + d] = clamp(bucket(d) + att_span, 0, 2 att_span - 1), the
 * column of the c2p / p2c tables that transformers' disentangled_attention_bias gathers
 * (buckets only when position_buckets > 0, as build_relative_position). */
static rg_status load_dis_idx(rg_model *m)
{
	const rg_encoder_config *c = &m->cfg;
	const int R = c->max_position_embeddings, span = c->att_span;
	int32_t *idx = malloc((2 * (size_t)R + 1) * sizeof(int32_t));
	rg_status s;

	if (!idx)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	for (int d = -R; d <= R; d++) {
		int r = c->position_buckets > 0 ?
				deberta_bucket(d, c->position_buckets, c->max_relative_positions) : d;

		r += span;
		idx[R + d] = r < 0 ? 0 : r > 2 * span - 1 ? 2 * span - 1 : r;
	}
	s = rg_backend_alloc(m->be, (2 * (size_t)R + 1) * sizeof(int32_t),
			     (void **)&bw(m)->dis_idx);
	if (s == RG_OK)
		s = rg_backend_upload(m->be, bw(m)->dis_idx, idx,
				      (2 * (size_t)R + 1) * sizeof(int32_t));
	free(idx);
	return s;
}

/* DeBERTa's relative embeddings as every layer sees them: encoder.rel_embeddings.weight (2
 * att_span, H), through encoder.LayerNorm when norm_rel_ebd is "layer_norm" (f64 statistics).
 * *rel: malloc'd (2 att_span, H) f32 host, the caller frees. */
static rg_status load_rel_embeddings(rg_model *m, const rg_tsrc *src, float **rel)
{
	const rg_encoder_config *c = &m->cfg;
	const int64_t W = 2 * (int64_t)c->att_span, H = c->hidden_size;
	float *g = NULL, *b = NULL;
	rg_status s;

	if ((s = rg_model_host_tensor(src, "encoder.rel_embeddings.weight", W, H, rel)) != RG_OK)
		return s;
	if (!c->norm_rel_ebd)
		return RG_OK;
	if ((s = rg_model_host_tensor(src, "encoder.LayerNorm.weight", H, -1, &g)) != RG_OK ||
	    (s = rg_model_host_tensor(src, "encoder.LayerNorm.bias", H, -1, &b)) != RG_OK)
		goto out_free;
	for (int64_t w = 0; w < W; w++) {
		float *x = *rel + w * H;
		double mean = 0, var = 0;

		for (int64_t i = 0; i < H; i++)
			mean += x[i];
		mean /= (double)H;
		for (int64_t i = 0; i < H; i++)
			var += (x[i] - mean) * (x[i] - mean);
		var /= (double)H;
		for (int64_t i = 0; i < H; i++)
			x[i] = (float)((x[i] - mean) / sqrt(var + c->layer_norm_eps) * g[i] + b[i]);
	}
out_free:
	free(g);
	free(b);
	if (s != RG_OK) {
		free(*rel);
		*rel = NULL;
	}
	return s;
}

/* One DeBERTa layer's projected relative embeddings (share_att_key: the layer's own query_proj
 * and key_proj): pos_key = rel Wk^T + bk for c2p, pos_query = rel Wq^T + bq for p2c, (2
 * att_span, H) each, computed once at load (they depend on weights only) and uploaded in the
 * compute dtype. out: (2 att_span, H) f32 host scratch. */
static rg_status load_pos_proj(rg_model *m, const rg_tsrc *src, int l, const float *rel,
			       float *out)
{
	const rg_encoder_config *c = &m->cfg;
	const int W = 2 * c->att_span, H = c->hidden_size;
	const rg_bert_names *nm = names_of(m);
	rg_bert_layer *L = &bw(m)->layers[l];
	rg_status s = RG_OK;

	for (int k = 0; k < 2 && s == RG_OK; k++) {
		/* k = 0: c2p through key_proj; k = 1: p2c through query_proj */
		const char *proj = k == 0 ? nm->qkv[1] : nm->qkv[0];
		float *w = NULL, *b = NULL;
		char n1[192];

		if (!(k == 0 ? c->c2p : c->p2c))
			continue;
		layer_name(n1, sizeof(n1), nm, l, proj, "weight");
		s = rg_model_host_tensor(src, n1, H, H, &w);
		if (s == RG_OK) {
			layer_name(n1, sizeof(n1), nm, l, proj, "bias");
			s = rg_model_host_tensor(src, n1, H, -1, &b);
		}
		if (s == RG_OK) {
			rg_host_linear(rel, W, H, w, b, H, out);
			s = rg_model_upload(m, out, (size_t)W * H, true,
					    k == 0 ? &L->pos_key : &L->pos_query);
		}
		free(w);
		free(b);
	}
	return s;
}

static rg_status load_layer(rg_model *m, const rg_tsrc *src, int l, float *scratch)
{
	const int64_t H = m->cfg.hidden_size, I = m->cfg.intermediate_size;
	const rg_bert_names *nm = names_of(m);
	rg_bert_layer *L = &bw(m)->layers[l];
	char n1[192], n2[192];
	rg_status s;

	/* fused QKV: weights stacked row-wise into scratch, then biases */
	for (int i = 0; i < 3; i++) {
		layer_name(n1, sizeof(n1), nm, l, nm->qkv[i], "weight");
		s = rg_model_read_tensor(src, n1, NULL, H, H, scratch + (size_t)i * H * H);
		if (s != RG_OK)
			return s;
	}
	if ((s = rg_model_upload(m, scratch, (size_t)(3 * H * H), true, &L->qkv_w)) != RG_OK)
		return s;
	for (int i = 0; i < 3; i++) {
		layer_name(n1, sizeof(n1), nm, l, nm->qkv[i], "bias");
		if ((s = rg_model_read_tensor(src, n1, NULL, H, -1, scratch + (size_t)i * H)) != RG_OK)
			return s;
	}
	if ((s = rg_model_upload(m, scratch, (size_t)(3 * H), true, &L->qkv_b)) != RG_OK)
		return s;

	struct {
		const char *module, *suffix, *alt; /* alt: the old TF-converted LayerNorm names */
		int64_t d0, d1;
		bool act;
		void **dst;
	} spec[] = {
		{nm->o, "weight", NULL, H, H, true, &L->o_w},
		{nm->o, "bias", NULL, H, -1, true, &L->o_b},
		{nm->ln1, "weight", "gamma", H, -1, false, (void **)&L->ln1_g},
		{nm->ln1, "bias", "beta", H, -1, false, (void **)&L->ln1_b},
		{nm->ff1, "weight", NULL, I, H, true, &L->ff1_w},
		{nm->ff1, "bias", NULL, I, -1, true, &L->ff1_b},
		{nm->ff2, "weight", NULL, H, I, true, &L->ff2_w},
		{nm->ff2, "bias", NULL, H, -1, true, &L->ff2_b},
		{nm->ln2, "weight", "gamma", H, -1, false, (void **)&L->ln2_g},
		{nm->ln2, "bias", "beta", H, -1, false, (void **)&L->ln2_b},
	};
	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		layer_name(n1, sizeof(n1), nm, l, spec[i].module, spec[i].suffix);
		if (spec[i].alt)
			layer_name(n2, sizeof(n2), nm, l, spec[i].module, spec[i].alt);
		s = rg_model_load_tensor(m, src, n1, spec[i].alt ? n2 : NULL, spec[i].d0, spec[i].d1,
				spec[i].act, scratch, spec[i].dst);
		if (s != RG_OK)
			return s;
	}
	/* the four GEMM weights, stored the way the backend's GEMM reads them fastest */
	if ((s = rg_op_prepare_weight(m->be, L->qkv_w, (int)(3 * H), (int)H)) != RG_OK ||
	    (s = rg_op_prepare_weight(m->be, L->o_w, (int)H, (int)H)) != RG_OK ||
	    (s = rg_op_prepare_weight(m->be, L->ff1_w, (int)I, (int)H)) != RG_OK ||
	    (s = rg_op_prepare_weight(m->be, L->ff2_w, (int)H, (int)I)) != RG_OK)
		return s;
	return RG_OK;
}

static rg_status bert_load(rg_model *m, const rg_tsrc *src)
{
	const rg_encoder_config *c = &m->cfg;
	const int64_t H = c->hidden_size, I = c->intermediate_size, E = c->embedding_size;
	size_t need = (size_t)(3 * H * H), n;
	float *scratch, *types = NULL;
	rg_status s;

	/* host conversion buffer: the largest tensor we convert */
	n = (size_t)c->vocab_size * E;
	need = n > need ? n : need;
	n = (size_t)c->max_position_embeddings * E * (c->type_vocab_size > 1 ? c->type_vocab_size : 1);
	need = n > need ? n : need;
	n = (size_t)I * H;
	need = n > need ? n : need;
	n = 2 * (size_t)c->att_span * H; /* DeBERTa: one projected relative table */
	need = n > need ? n : need;
	/* MPNet's bias: the (buckets, heads) weight and the (heads, 2R + 1) table after it */
	if (c->relative_attention_num_buckets > 0) {
		n = (size_t)c->num_attention_heads *
		    (c->relative_attention_num_buckets + 2 * RG_MPNET_MAX_DISTANCE + 1);
		need = n > need ? n : need;
	}
	m->weights = calloc(1, sizeof(rg_bert_weights));
	if (!m->weights)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	bw(m)->layers = calloc((size_t)c->num_hidden_layers, sizeof(rg_bert_layer));
	if (!bw(m)->layers)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	scratch = malloc(need * sizeof(float));
	if (!scratch)
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu floats to convert weights", need);

	s = rg_model_load_tensor(m, src, "embeddings.word_embeddings.weight", NULL, c->vocab_size, E,
				 true, scratch, &bw(m)->word);
	if (s != RG_OK)
		goto out_free_scratch;
	/* The position table, one block of max_position_embeddings rows per token type: block k is
	 * position + (token_type_embeddings[k] - token_type_embeddings[0]), and the embedding op
	 * adds token_type_embeddings[0] to every token, so a token of type k at position p reads
	 * row p + k * max_position_embeddings (model.c stages it) and type 0 is unchanged. Sentence
	 * pairs get their token types without a second gather in the kernel. */
	{
		const int64_t P = c->max_position_embeddings, nt = c->type_vocab_size;

		/* DeBERTa-v3 (position_biased_input false) has no absolute positions: a zero table */
		if (!c->position_biased_input) {
			memset(scratch, 0, (size_t)(P * E) * sizeof(float));
		} else {
			s = rg_model_read_tensor(src, "embeddings.position_embeddings.weight", NULL, P,
						 E, scratch);
			if (s != RG_OK)
				goto out_free_scratch;
		}
		if (nt > 0) {
			types = malloc((size_t)(nt * E) * sizeof(float));
			if (!types) {
				s = rg_errorf(RG_ERR_OOM, "out of host memory");
				goto out_free_scratch;
			}
			s = rg_model_read_tensor(src, "embeddings.token_type_embeddings.weight", NULL,
						 nt, E, types);
			if (s != RG_OK)
				goto out_free_scratch;
		}
		for (int64_t k = 1; k < nt; k++)
			for (int64_t p = 0; p < P; p++)
				for (int64_t i = 0; i < E; i++)
					scratch[(k * P + p) * E + i] =
						scratch[p * E + i] + (types[k * E + i] - types[i]);
		s = rg_model_upload(m, scratch, (size_t)(P * E * (nt > 1 ? nt : 1)), true,
				    &bw(m)->pos);
		if (s != RG_OK)
			goto out_free_scratch;
	}
	if (c->type_vocab_size > 0) {
		/* row 0, added to every token */
		memcpy(scratch, types, (size_t)E * sizeof(float));
	} else {
		memset(scratch, 0, (size_t)E * sizeof(float)); /* a family without token types */
	}
	if ((s = rg_model_upload(m, scratch, (size_t)E, true, &bw(m)->type0)) != RG_OK)
		goto out_free_scratch;
	s = rg_model_load_tensor(m, src, "embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma",
				 E, -1, false, scratch, (void **)&bw(m)->emb_g);
	if (s != RG_OK)
		goto out_free_scratch;
	s = rg_model_load_tensor(m, src, "embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta", E,
				 -1, false, scratch, (void **)&bw(m)->emb_b);
	if (s != RG_OK)
		goto out_free_scratch;
	if (c->shared_layers) { /* ALBERT: the E -> H mapping */
		s = rg_model_load_tensor(m, src, "encoder.embedding_hidden_mapping_in.weight", NULL, H,
					 E, true, scratch, &bw(m)->map_w);
		if (s == RG_OK)
			s = rg_model_load_tensor(m, src, "encoder.embedding_hidden_mapping_in.bias",
						 NULL, H, -1, true, scratch, &bw(m)->map_b);
		if (s == RG_OK)
			s = rg_op_prepare_weight(m->be, bw(m)->map_w, (int)H, (int)E);
		if (s != RG_OK)
			goto out_free_scratch;
	}
	if (c->relative_attention_num_buckets > 0 && (s = load_rel_bias(m, src, scratch)) != RG_OK)
		goto out_free_scratch;
	for (int l = 0; l < (c->shared_layers ? 1 : c->num_hidden_layers); l++)
		if ((s = load_layer(m, src, l, scratch)) != RG_OK)
			goto out_free_scratch;
	if (c->relative_attention && (c->c2p || c->p2c)) {
		float *rel = NULL;

		if ((s = load_dis_idx(m)) != RG_OK ||
		    (s = load_rel_embeddings(m, src, &rel)) != RG_OK)
			goto out_free_scratch;
		for (int l = 0; l < c->num_hidden_layers && s == RG_OK; l++)
			s = load_pos_proj(m, src, l, rel, scratch);
		free(rel);
		if (s != RG_OK)
			goto out_free_scratch;
	}
	for (int l = 1; c->shared_layers && l < c->num_hidden_layers; l++)
		bw(m)->layers[l] = bw(m)->layers[0]; /* the same weights (freed once) */
out_free_scratch:
	free(types);
	free(scratch);
	return s;
}

/* Hyper-parameters: config.json through config.c's per-family reader (rg_encoder_config_read:
 * the families' key names, defaults and refusals are there) into m->cfg. */
static rg_status bert_hparams(rg_model *m, const rg_cfg_src *cfg)
{
	return rg_encoder_config_read(cfg, &m->cfg);
}

/* Run the embeddings and every encoder layer over n rows; attention sequences from f->cu (n_att
 * sequences, longest max_len), optional seg. Result in f->a[RG_A_HIDDEN]. Only ops: also what a
 * graph captures. */
static rg_status bert_encode(rg_model *m, const rg_fwd *f, int n, int n_att, int max_len)
{
	const rg_encoder_config *c = &m->cfg;
	const int H = c->hidden_size, I = c->intermediate_size, nh = c->num_attention_heads;
	const int hd = H / nh;
	/* DeBERTa: sqrt(head_dim * (1 + |pos_att_type|)), even without relative_attention */
	const float eps = (float)c->layer_norm_eps,
		    scale = 1.f / sqrtf((float)(hd * (1 + (int)c->c2p + (int)c->p2c)));
	const bool dis_on = c->relative_attention && (c->c2p || c->p2c);
	const rg_attn_disent dis = {
		.c2p = c->c2p ? f->a[RG_A_C2P] : NULL,
		.p2c = c->p2c ? f->a[RG_A_P2C] : NULL,
		.idx = bw(m)->dis_idx,
		.width = 2 * c->att_span,
		.R = c->max_position_embeddings,
	};
	void *hidden = f->a[RG_A_HIDDEN], *qkv = f->a[RG_A_QKV], *ctx = f->a[RG_A_CTX];
	void *attn_out = f->a[RG_A_ATTN_OUT], *inter = f->a[RG_A_INTER];
	void *ffn_out = f->a[RG_A_FFN_OUT];
	const rg_bert_weights *w = bw(m);
	/* bidirectional over the packed sequences; MPNet's bias table, DeBERTa's terms, a seg mask */
	rg_attn_desc ad = rg_attn_packed(n_att, f->cu, f->cu_h, max_len, nh, hd, scale);
	rg_backend *be = m->be;
	rg_status s;

	ad.seg = f->seg;
	ad.rel_bias = w->rel_bias;
	ad.rel_max = RG_MPNET_MAX_DISTANCE;
	ad.dis = dis_on ? &dis : NULL;
	if (w->map_w) {
		/* ALBERT: LN(embeddings) in E dims into the FFN buffer (free until the FFN), then
		 * hidden = that W_map^T + b_map */
		s = rg_op_embed_layernorm(be, f->tokens, f->positions, n, w->word, w->pos, w->type0,
					  w->emb_g, w->emb_b, eps, c->embedding_size, inter);
		if (s == RG_OK)
			s = rg_op_gemm_bias_act(be, inter, w->map_w, w->map_b, hidden, n, H,
						c->embedding_size, RG_ACT_NONE);
	} else {
		s = rg_op_embed_layernorm(be, f->tokens, f->positions, n, w->word, w->pos, w->type0,
					  w->emb_g, w->emb_b, eps, H, hidden);
	}
	if (s != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		const rg_bert_layer *L = &w->layers[l];

		if ((s = rg_op_gemm_bias_act(be, hidden, L->qkv_w, L->qkv_b, qkv, n, 3 * H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (dis_on && (s = rg_op_rel_tables(be, qkv, n, nh, hd, L->pos_key, L->pos_query,
						     dis.width, scale, f->a[RG_A_C2P],
						     f->a[RG_A_P2C])) != RG_OK) ||
		    (s = rg_op_attention(be, &ad, qkv, ctx)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, ctx, L->o_w, L->o_b, attn_out, n, H, H,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_bias_residual_layernorm(be, attn_out, NULL, hidden, L->ln1_g,
						       L->ln1_b, eps, n, H, hidden)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, hidden, L->ff1_w, L->ff1_b, inter, n, I, H,
					     c->hidden_act)) != RG_OK ||
		    (s = rg_op_gemm_bias_act(be, inter, L->ff2_w, L->ff2_b, ffn_out, n, H, I,
					     RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_bias_residual_layernorm(be, ffn_out, NULL, hidden, L->ln2_g,
						       L->ln2_b, eps, n, H, hidden)) != RG_OK)
			return rg_error_wrap(s, "layer %d", l);
	}
	return RG_OK;
}

static void bert_free_weights(rg_model *m)
{
	rg_bert_weights *w = bw(m);
	void *emb[] = {w->word,	 w->pos,   w->type0, w->emb_g,
		       w->emb_b, w->map_w, w->map_b, w->rel_bias, w->dis_idx};

	for (size_t i = 0; i < sizeof(emb) / sizeof(emb[0]); i++)
		rg_backend_dealloc(m->be, emb[i]);
	for (int l = 0; w->layers && l < (m->cfg.shared_layers ? 1 : m->cfg.num_hidden_layers); l++) {
		rg_bert_layer *L = &w->layers[l];
		void *lw[] = {L->qkv_w, L->qkv_b, L->o_w, L->o_b, L->ln1_g, L->ln1_b,
			      L->ff1_w, L->ff1_b, L->ff2_w, L->ff2_b, L->ln2_g, L->ln2_b,
			      L->pos_key, L->pos_query};

		for (size_t i = 0; i < sizeof(lw) / sizeof(lw[0]); i++)
			rg_backend_dealloc(m->be, lw[i]);
	}
	free(w->layers);
	free(w);
	m->weights = NULL;
}

/* The *ForSequenceClassification head (host f32, model.h rg_cls_head). transformers' names:
 * BERT and ALBERT pooler.dense (tanh) + classifier; RoBERTa / XLM-R / MPNet classifier.dense
 * (tanh) + classifier.out_proj; DistilBERT pre_classifier (ReLU) + classifier; DeBERTa-v2/v3
 * pooler.dense (pooler_hidden_act, GELU) + classifier. */
static rg_status bert_load_head(rg_model *m, const rg_tsrc *src)
{
	const int64_t H = m->cfg.hidden_size, L = m->head_cfg.num_labels;
	const char *t = m->cfg.model_type;
	/* MPNetForSequenceClassification's head is RoBERTa's */
	const bool roberta = !strcmp(t, "roberta") || !strcmp(t, "xlm-roberta") || !strcmp(t, "mpnet");
	const bool distil = !strcmp(t, "distilbert");

	/* DebertaV2ForSequenceClassification: ContextPooler (pooler.dense + pooler_hidden_act,
	 * GELU by default) then classifier, both at the top level of the checkpoint */
	const char *dense = roberta ? "classifier.dense" : distil ? "pre_classifier" : "pooler.dense";
	const char *out = roberta ? "classifier.out_proj" : "classifier";
	char n1[96];
	rg_status s;

	m->head.act = distil ? RG_HEAD_RELU : m->head_cfg.pooler_gelu ? RG_HEAD_GELU : RG_HEAD_TANH;
	snprintf(n1, sizeof(n1), "%s.weight", dense);
	if ((s = rg_model_host_tensor(src, n1, H, H, &m->head.w1)) != RG_OK)
		return s;
	snprintf(n1, sizeof(n1), "%s.bias", dense);
	if ((s = rg_model_host_tensor(src, n1, H, -1, &m->head.b1)) != RG_OK)
		return s;
	snprintf(n1, sizeof(n1), "%s.weight", out);
	if ((s = rg_model_host_tensor(src, n1, L, H, &m->head.w2)) != RG_OK)
		return s;
	snprintf(n1, sizeof(n1), "%s.bias", out);
	return rg_model_host_tensor(src, n1, L, -1, &m->head.b2);
}

/* One arch per model_type; the hooks are the same, the names differ (names_of). */
#define RG_BERT_FAMILY_ARCH(var, type)                                                            \
	const rg_arch var = {                                                                     \
		.model_type = type,                                                               \
		.kind = RG_MODEL_ENCODER,                                                         \
		.hparams = bert_hparams,                                                          \
		.load = bert_load,                                                                \
		.encode = bert_encode,                                                            \
		.free_weights = bert_free_weights,                                                \
		.load_head = bert_load_head,                                                      \
	}
RG_BERT_FAMILY_ARCH(rg_arch_bert, "bert");
RG_BERT_FAMILY_ARCH(rg_arch_roberta, "roberta");
RG_BERT_FAMILY_ARCH(rg_arch_xlm_roberta, "xlm-roberta");
RG_BERT_FAMILY_ARCH(rg_arch_albert, "albert");
RG_BERT_FAMILY_ARCH(rg_arch_distilbert, "distilbert");
RG_BERT_FAMILY_ARCH(rg_arch_mpnet, "mpnet");
RG_BERT_FAMILY_ARCH(rg_arch_deberta_v2, "deberta-v2");
