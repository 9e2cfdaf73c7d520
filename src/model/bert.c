/* BERT-family encoder runtime behind the public rg_model_* API (include/ragged.h).
 *
 * Load: config.json + pooling extras + tokenizer + safetensors, every weight checked against the
 * config, Q/K/V fused into one (3H, H) projection, converted to f32 on the host and copied once to
 * the backend in its compute dtype (biases and LayerNorm parameters stay f32); the mapping is
 * released after the upload. One activation arena sized for max_batch_tokens is allocated at load:
 * nothing is allocated per batch.
 *
 * Embed (packed, ByteTransformer sec. III-D): per layer
 *   qkv = h Wqkv^T + bqkv; ctx = varlen attention(qkv); t = ctx Wo^T;
 *   h = LN(t + bo + h); u = act(h W1^T + b1); t = u W2^T; h = LN(t + b2 + h);
 * then pool per sequence (+ L2 normalize). The layout modes (TCB sec. 4 baselines) run the same
 * encoder over rows with padding and a block-diagonal seg mask, then gather each request's rows
 * back into packed order before pooling. Only src/ops/ops.h is used, so every backend works. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/config.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

/* Per layer weights in backend memory. act: compute dtype; f32: float32. */
typedef struct rg_bert_layer {
	void *qkv_w;    /* (3H, H) act: rows [Wq; Wk; Wv] */
	float *qkv_b;   /* (3H) f32 */
	void *o_w;      /* (H, H) act */
	float *o_b;     /* (H) f32 */
	float *ln1_g;   /* (H) f32 */
	float *ln1_b;   /* (H) f32 */
	void *ff1_w;    /* (I, H) act */
	float *ff1_b;   /* (I) f32 */
	void *ff2_w;    /* (H, I) act */
	float *ff2_b;   /* (H) f32 */
	float *ln2_g;   /* (H) f32 */
	float *ln2_b;   /* (H) f32 */
} rg_bert_layer;

struct rg_model {
	rg_model_info info;
	char *dir;               /* resolved model directory */
	char *act_name;          /* hidden_act as text */
	rg_bert_config cfg;
	rg_tokenizer *tok;
	rg_backend *be;
	size_t esz;              /* bytes per act element */

	/* embeddings */
	void *word;              /* (vocab, H) act */
	void *pos;               /* (max_pos, H) act */
	void *type0;             /* (H) act, token_type_embeddings row 0 */
	float *emb_g, *emb_b;    /* (H) f32 */
	rg_bert_layer *layers;   /* (num_hidden_layers) */

	/* activation arena, T = max_batch_tokens rows */
	int max_tokens;
	void *hidden;            /* (T, H) act: the residual stream */
	void *tmp;               /* (T, H) act: GEMM outputs before the fused LN; gathered rows */
	void *ctx;               /* (T, H) act: attention output */
	void *qkv;               /* (T, 3H) act */
	void *inter;             /* (T, I) act */
	int32_t *tokens_d;       /* (T) */
	int32_t *positions_d;    /* (T) */
	int32_t *seg_d;          /* (T) segment ids for masked layouts */
	int32_t *idx_d;          /* (T) packed token -> row-major slot for the gather */
	int32_t *cu_attn_d;      /* (T+1) attention sequences (requests, rows or slots) */
	int32_t *cu_pool_d;      /* (T+1) requests */
	float *pooled_d;         /* (T, H) f32 */
	/* host staging of the index buffers */
	int32_t *tokens_h, *positions_h, *seg_h, *idx_h, *cu_attn_h; /* (T), cu: (T+1) */
};

rg_model_params rg_model_params_default(void)
{
	rg_model_params p;

	p.device = RG_DEVICE_CPU;
	p.device_index = 0;
	p.dtype = RG_DTYPE_F32;
	p.max_batch_tokens = 16384;
	return p;
}

/* ---------------------------------------------------------------- weights */

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t n)
{
	size_t off = 0;

	off += (size_t)snprintf(buf + off, n - off, "[");
	for (int i = 0; i < ndim && off < n; i++)
		off += (size_t)snprintf(buf + off, n - off, "%s%lld", i ? ", " : "",
					(long long)shape[i]);
	if (off < n)
		snprintf(buf + off, n - off, "]");
}

/* Find `name` as is or with the "bert." prefix (also alt, the old gamma/beta LayerNorm names,
 * when not NULL) and check its shape is (d0) or (d0, d1) (d1 < 0: 1-D). */
static rg_status find_tensor(const rg_st *st, const char *name, const char *alt, int64_t d0,
			     int64_t d1, const rg_st_tensor **out)
{
	const char *names[2] = {name, alt};
	const rg_st_tensor *t = NULL;
	char buf[256], want[64], got[128];
	int64_t exp[2] = {d0, d1};
	int ndim = d1 < 0 ? 1 : 2;

	for (int i = 0; i < 2 && !t; i++) {
		if (!names[i])
			continue;
		t = rg_st_find(st, names[i]);
		if (!t) {
			snprintf(buf, sizeof(buf), "bert.%s", names[i]);
			t = rg_st_find(st, buf);
		}
	}
	*out = NULL;
	if (!t)
		return rg_errorf(RG_ERR_FORMAT, "model.safetensors: missing tensor %s (or bert.%s)",
				 name, name);
	shape_str(exp, ndim, want, sizeof(want));
	shape_str(t->shape, t->ndim, got, sizeof(got));
	if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
		return rg_errorf(RG_ERR_FORMAT, "tensor %s has shape %s, config.json implies %s",
				 t->name, got, want);
	*out = t;
	return RG_OK;
}

/* Allocate backend memory for n elements and fill it from the host f32 buffer, either in the
 * compute dtype (as_act) or as raw f32. */
static rg_status upload(rg_model *m, const float *src, size_t n, bool as_act, void **dst)
{
	rg_backend *be = m->be;
	rg_status st;

	st = rg_backend_alloc(be, n * (as_act ? m->esz : sizeof(float)), dst);
	if (st != RG_OK)
		return st;
	if (as_act)
		return rg_backend_upload_f32_as(be, *dst, src, n, rg_backend_dtype(be));
	return rg_backend_upload(be, *dst, src, n * sizeof(float));
}

/* Look up, check, convert and upload one tensor. scratch holds >= numel floats. */
static rg_status load_tensor(rg_model *m, const rg_st *st, const char *name, const char *alt,
			     int64_t d0, int64_t d1, bool as_act, float *scratch, void **dst)
{
	const rg_st_tensor *t;
	rg_status s = find_tensor(st, name, alt, d0, d1, &t);

	if (s != RG_OK)
		return s;
	rg_st_to_f32(t, scratch);
	return upload(m, scratch, rg_st_numel(t), as_act, dst);
}

static rg_status load_layer(rg_model *m, const rg_st *st, int l, float *scratch)
{
	const int64_t H = m->cfg.hidden_size, I = m->cfg.intermediate_size;
	rg_bert_layer *L = &m->layers[l];
	static const char *qkv[3] = {"query", "key", "value"};
	char n1[160], n2[160];
	const rg_st_tensor *t;
	rg_status s;

#define LNAME(buf, suffix) snprintf(buf, sizeof(buf), "encoder.layer.%d.%s", l, suffix)
	/* fused QKV: weights stacked row-wise into scratch, then biases */
	for (int i = 0; i < 3; i++) {
		snprintf(n1, sizeof(n1), "encoder.layer.%d.attention.self.%s.weight", l, qkv[i]);
		if ((s = find_tensor(st, n1, NULL, H, H, &t)) != RG_OK)
			return s;
		rg_st_to_f32(t, scratch + (size_t)i * H * H);
	}
	if ((s = upload(m, scratch, (size_t)(3 * H * H), true, &L->qkv_w)) != RG_OK)
		return s;
	for (int i = 0; i < 3; i++) {
		snprintf(n1, sizeof(n1), "encoder.layer.%d.attention.self.%s.bias", l, qkv[i]);
		if ((s = find_tensor(st, n1, NULL, H, -1, &t)) != RG_OK)
			return s;
		rg_st_to_f32(t, scratch + (size_t)i * H);
	}
	if ((s = upload(m, scratch, (size_t)(3 * H), false, (void **)&L->qkv_b)) != RG_OK)
		return s;

	struct {
		const char *name, *alt;
		int64_t d0, d1;
		bool act;
		void **dst;
	} spec[] = {
		{"attention.output.dense.weight", NULL, H, H, true, &L->o_w},
		{"attention.output.dense.bias", NULL, H, -1, false, (void **)&L->o_b},
		{"attention.output.LayerNorm.weight", "attention.output.LayerNorm.gamma", H, -1, false,
		 (void **)&L->ln1_g},
		{"attention.output.LayerNorm.bias", "attention.output.LayerNorm.beta", H, -1, false,
		 (void **)&L->ln1_b},
		{"intermediate.dense.weight", NULL, I, H, true, &L->ff1_w},
		{"intermediate.dense.bias", NULL, I, -1, false, (void **)&L->ff1_b},
		{"output.dense.weight", NULL, H, I, true, &L->ff2_w},
		{"output.dense.bias", NULL, H, -1, false, (void **)&L->ff2_b},
		{"output.LayerNorm.weight", "output.LayerNorm.gamma", H, -1, false,
		 (void **)&L->ln2_g},
		{"output.LayerNorm.bias", "output.LayerNorm.beta", H, -1, false, (void **)&L->ln2_b},
	};
	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		LNAME(n1, spec[i].name);
		if (spec[i].alt)
			LNAME(n2, spec[i].alt);
		s = load_tensor(m, st, n1, spec[i].alt ? n2 : NULL, spec[i].d0, spec[i].d1,
				spec[i].act, scratch, spec[i].dst);
		if (s != RG_OK)
			return s;
	}
#undef LNAME
	return RG_OK;
}

static rg_status load_weights(rg_model *m, const rg_st *st)
{
	const rg_bert_config *c = &m->cfg;
	const int64_t H = c->hidden_size, I = c->intermediate_size;
	size_t need = (size_t)(3 * H * H), n;
	const rg_st_tensor *tt;
	float *scratch;
	rg_status s;

	/* host conversion buffer: the largest tensor we convert */
	n = (size_t)c->vocab_size * H;
	need = n > need ? n : need;
	n = (size_t)c->max_position_embeddings * H;
	need = n > need ? n : need;
	n = (size_t)I * H;
	need = n > need ? n : need;
	scratch = malloc(need * sizeof(float));
	if (!scratch)
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu floats to convert weights", need);

	s = load_tensor(m, st, "embeddings.word_embeddings.weight", NULL, c->vocab_size, H, true,
			scratch, &m->word);
	if (s != RG_OK)
		goto out_free_scratch;
	s = load_tensor(m, st, "embeddings.position_embeddings.weight", NULL,
			c->max_position_embeddings, H, true, scratch, &m->pos);
	if (s != RG_OK)
		goto out_free_scratch;
	s = find_tensor(st, "embeddings.token_type_embeddings.weight", NULL, c->type_vocab_size, H,
			&tt);
	if (s != RG_OK)
		goto out_free_scratch;
	/* only row 0 is used: every token has token_type_id 0 for single-text embedding */
	rg_st_to_f32(tt, scratch);
	if ((s = upload(m, scratch, (size_t)H, true, &m->type0)) != RG_OK)
		goto out_free_scratch;
	s = load_tensor(m, st, "embeddings.LayerNorm.weight", "embeddings.LayerNorm.gamma", H, -1,
			false, scratch, (void **)&m->emb_g);
	if (s != RG_OK)
		goto out_free_scratch;
	s = load_tensor(m, st, "embeddings.LayerNorm.bias", "embeddings.LayerNorm.beta", H, -1,
			false, scratch, (void **)&m->emb_b);
	if (s != RG_OK)
		goto out_free_scratch;
	for (int l = 0; l < c->num_hidden_layers; l++)
		if ((s = load_layer(m, st, l, scratch)) != RG_OK)
			goto out_free_scratch;
out_free_scratch:
	free(scratch);
	return s;
}

/* ---------------------------------------------------------------- arena */

static rg_status alloc_arena(rg_model *m)
{
	const size_t T = (size_t)m->max_tokens, H = (size_t)m->cfg.hidden_size;
	const size_t I = (size_t)m->cfg.intermediate_size, e = m->esz;
	struct {
		void **p;
		size_t bytes;
	} dev[] = {
		{&m->hidden, T * H * e},
		{&m->tmp, T * H * e},
		{&m->ctx, T * H * e},
		{&m->qkv, T * 3 * H * e},
		{&m->inter, T * I * e},
		{(void **)&m->tokens_d, T * 4},
		{(void **)&m->positions_d, T * 4},
		{(void **)&m->seg_d, T * 4},
		{(void **)&m->idx_d, T * 4},
		{(void **)&m->cu_attn_d, (T + 1) * 4},
		{(void **)&m->cu_pool_d, (T + 1) * 4},
		{(void **)&m->pooled_d, T * H * 4},
	};
	rg_status s;

	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		if ((s = rg_backend_alloc(m->be, dev[i].bytes, dev[i].p)) != RG_OK)
			return rg_error_wrap(s, "activation arena for %d tokens", m->max_tokens);
	m->tokens_h = malloc(T * 4);
	m->positions_h = malloc(T * 4);
	m->seg_h = malloc(T * 4);
	m->idx_h = malloc(T * 4);
	m->cu_attn_h = malloc((T + 1) * 4);
	if (!m->tokens_h || !m->positions_h || !m->seg_h || !m->idx_h || !m->cu_attn_h)
		return rg_errorf(RG_ERR_OOM, "cannot allocate host staging for %d tokens",
				 m->max_tokens);
	return RG_OK;
}

/* ---------------------------------------------------------------- load / free */

void rg_model_free(rg_model *m)
{
	if (!m)
		return;
	if (m->be) {
		rg_backend *be = m->be;
		void *dev[] = {m->word, m->pos, m->type0, m->emb_g, m->emb_b, m->hidden, m->tmp,
			       m->ctx, m->qkv, m->inter, m->tokens_d, m->positions_d, m->seg_d,
			       m->idx_d, m->cu_attn_d, m->cu_pool_d, m->pooled_d};

		for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
			rg_backend_dealloc(be, dev[i]);
		for (int l = 0; m->layers && l < m->cfg.num_hidden_layers; l++) {
			rg_bert_layer *L = &m->layers[l];
			void *lw[] = {L->qkv_w, L->qkv_b, L->o_w, L->o_b, L->ln1_g, L->ln1_b,
				      L->ff1_w, L->ff1_b, L->ff2_w, L->ff2_b, L->ln2_g, L->ln2_b};
			for (size_t i = 0; i < sizeof(lw) / sizeof(lw[0]); i++)
				rg_backend_dealloc(be, lw[i]);
		}
		rg_backend_free(be);
	}
	free(m->layers);
	rg_tokenizer_free(m->tok);
	free(m->tokens_h);
	free(m->positions_h);
	free(m->seg_h);
	free(m->idx_h);
	free(m->cu_attn_h);
	free(m->dir);
	free(m->act_name);
	free(m);
}

rg_model *rg_model_load(const char *dir, const rg_model_params *params, rg_status *st)
{
	rg_model_params p = params ? *params : rg_model_params_default();
	rg_model *m = NULL;
	rg_st *w = NULL;
	rg_pooling pooling = RG_POOL_MEAN;
	bool normalize = false;
	rg_status s;

	if (!dir) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_load: dir is NULL");
		goto out;
	}
	/* bound the arena so every size computation below stays far from overflow */
	if (p.max_batch_tokens < 1 || p.max_batch_tokens > (1 << 24)) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "max_batch_tokens must be in [1, %d], got %d",
			      1 << 24, p.max_batch_tokens);
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out;
	}
	m->max_tokens = p.max_batch_tokens;
	m->dir = realpath(dir, NULL);
	if (!m->dir)
		m->dir = strdup(dir);
	if (!m->dir) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free_model;
	}
	if ((s = rg_bert_config_load(dir, &m->cfg)) != RG_OK)
		goto out_free_model;
	if ((s = rg_pooling_config_load(dir, &pooling, &normalize)) != RG_OK)
		goto out_free_model;
	if ((s = rg_tokenizer_load(dir, &m->tok)) != RG_OK)
		goto out_free_model;
	if (rg_tokenizer_vocab_size(m->tok) > m->cfg.vocab_size) {
		s = rg_errorf(RG_ERR_FORMAT,
			      "%s: tokenizer has %d tokens but config.json vocab_size is %d",
			      m->dir, (int)rg_tokenizer_vocab_size(m->tok), m->cfg.vocab_size);
		goto out_free_model;
	}
	if ((s = rg_backend_init(p.device, p.device_index, p.dtype, &m->be)) != RG_OK)
		goto out_free_model;
	m->esz = rg_dtype_size(p.dtype);
	m->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof(*m->layers));
	if (!m->layers) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free_model;
	}
	if ((s = rg_st_open_dir(dir, &w)) != RG_OK)
		goto out_free_model;
	s = load_weights(m, w);
	rg_st_free(w); /* weights now live on the backend */
	if (s != RG_OK)
		goto out_free_model;
	if ((s = alloc_arena(m)) != RG_OK)
		goto out_free_model;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		goto out_free_model;

	m->act_name = strdup(rg_act_name(m->cfg.hidden_act));
	if (!m->act_name) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
		goto out_free_model;
	}
	m->info.model_dir = m->dir;
	m->info.model_type = "bert";
	m->info.vocab_size = m->cfg.vocab_size;
	m->info.hidden_size = m->cfg.hidden_size;
	m->info.num_attention_heads = m->cfg.num_attention_heads;
	m->info.num_hidden_layers = m->cfg.num_hidden_layers;
	m->info.intermediate_size = m->cfg.intermediate_size;
	m->info.max_position_embeddings = m->cfg.max_position_embeddings;
	m->info.type_vocab_size = m->cfg.type_vocab_size;
	m->info.hidden_act = m->act_name;
	m->info.layer_norm_eps = m->cfg.layer_norm_eps;
	m->info.pooling = pooling;
	m->info.normalize = normalize;
	m->info.device = p.device;
	m->info.dtype = p.dtype;
	m->info.max_batch_tokens = p.max_batch_tokens;
	if (st)
		*st = RG_OK;
	return m;

out_free_model:
	rg_model_free(m);
out:
	if (st)
		*st = s;
	return NULL;
}

const rg_model_info *rg_model_get_info(const rg_model *m)
{
	return m ? &m->info : NULL;
}

rg_status rg_model_memory(const rg_model *m, size_t *used, size_t *total)
{
	if (!m || !used || !total)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_memory: NULL argument");
	return rg_backend_mem_info(m->be, used, total);
}

rg_status rg_model_tokenize(const rg_model *m, const char *text, size_t len, bool truncate,
			    int32_t **ids, size_t *n_ids)
{
	size_t limit;
	rg_status s;

	if (!m || !ids || !n_ids || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_tokenize: NULL argument");
	limit = (size_t)m->cfg.max_position_embeddings;
	*ids = NULL;
	*n_ids = 0;
	if ((s = rg_tokenizer_encode(m->tok, text ? text : "", len, ids, n_ids)) != RG_OK)
		return s;
	if (*n_ids <= limit)
		return RG_OK;
	if (!truncate) {
		size_t n = *n_ids;

		free(*ids);
		*ids = NULL;
		*n_ids = 0;
		return rg_errorf(RG_ERR_TOO_LONG,
				 "text is %zu tokens, over the model's limit of %zu "
				 "(max_position_embeddings); shorten it or enable truncation",
				 n, limit);
	}
	/* keep [CLS] + the first limit-2 wordpieces, end with [SEP] like HF truncation; a tokenizer
	 * without the [CLS] ... [SEP] template (sep id -1) is simply cut */
	if (rg_tokenizer_sep_id(m->tok) >= 0)
		(*ids)[limit - 1] = rg_tokenizer_sep_id(m->tok);
	*n_ids = limit;
	return RG_OK;
}

/* ---------------------------------------------------------------- embed */

/* Checks a packed batch; returns the total token count in *n_tokens and the longest length. */
static rg_status validate_batch(const rg_model *m, const int32_t *tokens, const int32_t *cu,
				int n_seq, int *n_tokens, int *max_len)
{
	const int max_pos = m->cfg.max_position_embeddings, vocab = m->cfg.vocab_size;
	int64_t total;

	if (n_seq < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "a batch needs at least one sequence (n_seq=%d)",
				 n_seq);
	if (!tokens || !cu)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tokens and cu_seqlens must not be NULL");
	if (cu[0] != 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cu_seqlens[0] must be 0, got %d", cu[0]);
	*max_len = 0;
	for (int s = 0; s < n_seq; s++) {
		int64_t len = (int64_t)cu[s + 1] - cu[s];

		if (len < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "cu_seqlens is not increasing: sequence %d has length %lld",
					 s, (long long)len);
		if (len > max_pos)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "sequence %d has %lld tokens, over the model's limit of %d "
					 "(max_position_embeddings)",
					 s, (long long)len, max_pos);
		if (len > *max_len)
			*max_len = (int)len;
		if (cu[s + 1] > m->max_tokens)
			return rg_errorf(RG_ERR_TOO_LONG,
					 "batch of %d sequences has %d+ tokens, over max_batch_tokens %d",
					 n_seq, cu[s + 1], m->max_tokens);
	}
	total = cu[n_seq];
	for (int64_t t = 0; t < total; t++)
		if (tokens[t] < 0 || tokens[t] >= vocab)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "token %lld has id %d, outside the vocabulary [0, %d)",
					 (long long)t, tokens[t], vocab);
	*n_tokens = (int)total;
	return RG_OK;
}

/* Run the embeddings and every encoder layer over n rows already staged in tokens_d /
 * positions_d; attention sequences from cu_attn (n_att sequences, longest max_len), optional seg.
 * Result in m->hidden. */
static rg_status run_encoder(rg_model *m, int n, int n_att, int max_len, const int32_t *seg_d)
{
	const rg_bert_config *c = &m->cfg;
	const int H = c->hidden_size, I = c->intermediate_size, nh = c->num_attention_heads;
	const int hd = H / nh;
	const float eps = (float)c->layer_norm_eps, scale = 1.f / sqrtf((float)hd);
	rg_backend *be = m->be;
	rg_status s;

	s = rg_op_embed_layernorm(be, m->tokens_d, m->positions_d, n, m->word, m->pos, m->type0,
				  m->emb_g, m->emb_b, eps, H, m->hidden);
	if (s != RG_OK)
		return s;
	for (int l = 0; l < c->num_hidden_layers; l++) {
		const rg_bert_layer *L = &m->layers[l];

		if ((s = rg_op_gemm(be, m->hidden, L->qkv_w, m->qkv, n, 3 * H, H)) != RG_OK ||
		    (s = rg_op_bias_act(be, m->qkv, L->qkv_b, n, 3 * H, RG_ACT_NONE)) != RG_OK ||
		    (s = rg_op_attention(be, m->qkv, m->cu_attn_d, m->cu_attn_h, n_att, max_len, nh,
					 hd, scale, seg_d, m->ctx)) != RG_OK ||
		    (s = rg_op_gemm(be, m->ctx, L->o_w, m->tmp, n, H, H)) != RG_OK ||
		    (s = rg_op_bias_residual_layernorm(be, m->tmp, L->o_b, m->hidden, L->ln1_g,
						       L->ln1_b, eps, n, H, m->hidden)) != RG_OK ||
		    (s = rg_op_gemm(be, m->hidden, L->ff1_w, m->inter, n, I, H)) != RG_OK ||
		    (s = rg_op_bias_act(be, m->inter, L->ff1_b, n, I, c->hidden_act)) != RG_OK ||
		    (s = rg_op_gemm(be, m->inter, L->ff2_w, m->tmp, n, H, I)) != RG_OK ||
		    (s = rg_op_bias_residual_layernorm(be, m->tmp, L->ff2_b, m->hidden, L->ln2_g,
						       L->ln2_b, eps, n, H, m->hidden)) != RG_OK)
			return rg_error_wrap(s, "layer %d", l);
	}
	return RG_OK;
}

/* Pool x (rows in packed order) per request and copy (n_seq, H) f32 to out. */
static rg_status pool_and_download(rg_model *m, const void *x, const int32_t *cu, int n_seq,
				   float *out)
{
	const int H = m->cfg.hidden_size;
	rg_status s;

	if ((s = rg_backend_upload(m->be, m->cu_pool_d, cu, (size_t)(n_seq + 1) * 4)) != RG_OK)
		return s;
	s = rg_op_pool(m->be, x, m->cu_pool_d, n_seq, H, m->info.pooling, m->info.normalize,
		       m->pooled_d);
	if (s != RG_OK)
		return s;
	if ((s = rg_backend_download(m->be, out, m->pooled_d, (size_t)n_seq * H * 4)) != RG_OK)
		return s;
	return rg_backend_sync(m->be);
}

rg_status rg_model_embed(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens, int n_seq,
			 float *out)
{
	int n = 0, max_len = 0;
	rg_status s;

	if (!m || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_embed: NULL argument");
	if ((s = validate_batch(m, tokens, cu_seqlens, n_seq, &n, &max_len)) != RG_OK)
		return s;
	for (int q = 0; q < n_seq; q++)
		for (int t = cu_seqlens[q]; t < cu_seqlens[q + 1]; t++)
			m->positions_h[t] = t - cu_seqlens[q];
	memcpy(m->cu_attn_h, cu_seqlens, (size_t)(n_seq + 1) * 4);
	if ((s = rg_backend_upload(m->be, m->tokens_d, tokens, (size_t)n * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->positions_d, m->positions_h, (size_t)n * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->cu_attn_d, cu_seqlens, (size_t)(n_seq + 1) * 4)) !=
		    RG_OK)
		return s;
	if ((s = run_encoder(m, n, n_seq, max_len, NULL)) != RG_OK)
		return s;
	return pool_and_download(m, m->hidden, cu_seqlens, n_seq, out);
}

/* Check a PADDED / CONCAT / SLOTTED layout and stage its rows: tokens (pad id in gaps),
 * positions restarting per request, seg (request index, -1 for padding), the gather index and
 * the attention cu_seqlens (rows, or slots). */
static rg_status stage_layout(rg_model *m, const int32_t *tokens, const int32_t *cu, int n_seq,
			      const rg_layout *lay, int *n_rows_tokens, int *n_att, int *att_len)
{
	const int max_pos = m->cfg.max_position_embeddings;
	int32_t pad = m->cfg.pad_token_id;
	int64_t total;
	int seg_len;

	if (lay->n_rows < 1 || lay->row_len < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "layout needs n_rows >= 1 and row_len >= 1 "
				 "(got %d, %d)", lay->n_rows, lay->row_len);
	if (lay->row_len > max_pos)
		return rg_errorf(RG_ERR_TOO_LONG, "layout row_len %d is over max_position_embeddings %d",
				 lay->row_len, max_pos);
	total = (int64_t)lay->n_rows * lay->row_len;
	if (total > m->max_tokens)
		return rg_errorf(RG_ERR_TOO_LONG,
				 "layout of %d rows x %d tokens = %lld is over max_batch_tokens %d",
				 lay->n_rows, lay->row_len, (long long)total, m->max_tokens);
	if (!lay->req_row || !lay->req_offset)
		return rg_errorf(RG_ERR_INVALID_INPUT, "layout req_row / req_offset must not be NULL");
	seg_len = lay->row_len;
	if (lay->mode == RG_EXEC_SLOTTED) {
		if (lay->slot_len < 1 || lay->row_len % lay->slot_len != 0)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "slot_len %d must be >= 1 and divide row_len %d",
					 lay->slot_len, lay->row_len);
		seg_len = lay->slot_len;
	}
	if (pad < 0 || pad >= m->cfg.vocab_size)
		pad = 0;
	for (int64_t i = 0; i < total; i++) {
		m->tokens_h[i] = pad;
		m->positions_h[i] = 0;
		m->seg_h[i] = -1;
	}
	for (int q = 0; q < n_seq; q++) {
		const int len = cu[q + 1] - cu[q], row = lay->req_row[q], off = lay->req_offset[q];
		int32_t *sg;

		if (row < 0 || row >= lay->n_rows || off < 0 || off > lay->row_len - len)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "request %d (%d tokens at row %d offset %d) leaves its row "
					 "(%d rows of %d tokens)",
					 q, len, row, off, lay->n_rows, lay->row_len);
		if (lay->mode == RG_EXEC_SLOTTED && off / seg_len != (off + len - 1) / seg_len)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "request %d (%d tokens at offset %d) crosses a slot boundary "
					 "(slot_len %d)",
					 q, len, off, seg_len);
		sg = m->seg_h + (size_t)row * lay->row_len + off;
		if (lay->mode == RG_EXEC_PADDED) {
			/* one request per row: any other request in the row is an overlap */
			for (int k = 0; k < lay->row_len; k++)
				if (m->seg_h[(size_t)row * lay->row_len + k] >= 0)
					return rg_errorf(RG_ERR_INVALID_INPUT,
							 "PADDED layout: requests %d and %d share row %d",
							 m->seg_h[(size_t)row * lay->row_len + k], q,
							 row);
		}
		for (int k = 0; k < len; k++) {
			size_t slot = (size_t)row * lay->row_len + off + k;

			if (sg[k] >= 0)
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "requests %d and %d overlap at row %d token %d",
						 sg[k], q, row, off + k);
			sg[k] = q;
			m->tokens_h[slot] = tokens[cu[q] + k];
			m->positions_h[slot] = k;
			m->idx_h[cu[q] + k] = (int32_t)slot;
		}
	}
	*n_att = (int)(total / seg_len);
	for (int i = 0; i <= *n_att; i++)
		m->cu_attn_h[i] = i * seg_len;
	*att_len = seg_len;
	*n_rows_tokens = (int)total;
	return RG_OK;
}

rg_status rg_model_embed_layout(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens,
				int n_seq, const rg_layout *layout, float *out)
{
	int n_packed = 0, max_len = 0, n_rows_tokens = 0, n_att = 0, att_len = 0;
	rg_status s;

	if (!layout || layout->mode == RG_EXEC_PACKED)
		return rg_model_embed(m, tokens, cu_seqlens, n_seq, out);
	if (!m || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_embed_layout: NULL argument");
	if (layout->mode != RG_EXEC_PADDED && layout->mode != RG_EXEC_CONCAT &&
	    layout->mode != RG_EXEC_SLOTTED)
		return rg_errorf(RG_ERR_INVALID_INPUT, "unknown execution mode %d", (int)layout->mode);
	if ((s = validate_batch(m, tokens, cu_seqlens, n_seq, &n_packed, &max_len)) != RG_OK)
		return s;
	s = stage_layout(m, tokens, cu_seqlens, n_seq, layout, &n_rows_tokens, &n_att, &att_len);
	if (s != RG_OK)
		return s;
	if ((s = rg_backend_upload(m->be, m->tokens_d, m->tokens_h, (size_t)n_rows_tokens * 4)) !=
		    RG_OK ||
	    (s = rg_backend_upload(m->be, m->positions_d, m->positions_h,
				   (size_t)n_rows_tokens * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->seg_d, m->seg_h, (size_t)n_rows_tokens * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->idx_d, m->idx_h, (size_t)n_packed * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->cu_attn_d, m->cu_attn_h, (size_t)(n_att + 1) * 4)) !=
		    RG_OK)
		return s;
	if ((s = run_encoder(m, n_rows_tokens, n_att, att_len, m->seg_d)) != RG_OK)
		return s;
	s = rg_op_gather_rows(m->be, m->hidden, m->idx_d, n_packed, m->cfg.hidden_size, m->tmp);
	if (s != RG_OK)
		return s;
	return pool_and_download(m, m->tmp, cu_seqlens, n_seq, out);
}
