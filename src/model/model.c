/* The public model API (include/ragged.h, rg_model_*) over any architecture of src/model/:
 * loading (config, pooling, tokenizer, dtype, backend), batch validation, the activation arena
 * and its plan, the packed / bucketed / graph-captured / layout execution paths and the pooling
 * head. An architecture (model.h: rg_arch, e.g. bert.c) only loads its weights and runs its
 * encoder over an arena; everything else is here and shared.
 *
 * Load: config.json + pooling extras + tokenizer + safetensors, every weight checked against the
 * config, Q/K/V fused into one (3H, H) projection, converted to f32 on the host and copied once to
 * the backend in its compute dtype (GEMM weights and biases; LayerNorm parameters stay f32); the
 * mapping is released after the upload. One activation arena is allocated at load, its size planned
 * for max_batch_tokens with TurboTransformers' Algorithm 1 (src/core/mem_plan.h: greedy by size over
 * the tensors' lifetimes in one layer, 6 rows of H per token instead of 12 with one buffer per
 * tensor); nothing is allocated per batch.
 *
 * Embed (packed, ByteTransformer sec. III-D): per layer
 *   qkv = h Wqkv^T + bqkv (bias in the GEMM epilogue); ctx = varlen attention(qkv);
 *   t = ctx Wo^T + bo (epilogue); h = LN(t + h); u = act(h W1^T + b1) (bias + GELU epilogue);
 *   t = u W2^T + b2 (epilogue); h = LN(t + h);
 * then pool per sequence (+ L2 normalize).
 *
 * CUDA graphs: a packed batch of n tokens and s sequences runs in the bucket (T_b, S_b, L_b) that
 * rounds n, s and the longest length up (model/bucket.h); the bucket's whole forward -- the copy of
 * the staged ids, positions and cu_seqlens into device memory, the encoder, and the pooling, which
 * writes the pooled rows straight into pinned, mapped host memory -- is captured once into a CUDA graph and replayed for
 * every later batch of that bucket. Tokens n..T_b are padding ([PAD], position 0) that belong to no
 * sequence: attention never reads them and pooling never sums them; sequences s..S_b have length 0
 * and pool to zero rows that are not returned. One synchronisation per batch. The first batch of a
 * bucket runs the same op sequence eagerly (so cuBLASLt autotunes its GEMM shapes outside the
 * capture); the graph is captured after the bucket's second eager run (a bucket seen once is not
 * worth a capture's milliseconds); at most RG_GRAPH_CACHE graphs are kept, least recently used
 * first out, besides those of rg_model_graph_warmup: a server captures, before it reports ready,
 * the graph of every bucket its batches can fall in (the envelope of model/bucket.h: one S per
 * token bucket), and keeps them. RAGGED_CUDA_GRAPHS=0 disables them. The layout modes (TCB sec. 4 baselines) run the same
 * encoder over rows with padding and a block-diagonal seg mask, then gather each request's rows
 * back into packed order before pooling. Only src/ops/ops.h is used, so every backend works. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "core/mem_plan.h"
#include "core/safetensors.h"
#include "core/tuning.h"
#include "model/config.h"
#include "model/model.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

rg_model_params rg_model_params_default(void)
{
	rg_model_params p;

	p.device = RG_DEVICE_CPU;
	p.device_index = 0;
	p.dtype = RG_DTYPE_AUTO;
	p.max_batch_tokens = 16384;
	p.pooling_set = false;
	p.pooling = RG_POOL_MEAN;
	p.dense_dir = NULL;
	p.weights = RG_WEIGHTS_AUTO;
	p.quantize = RG_QUANTIZE_NONE;
	return p;
}

/* ---------------------------------------------------------------- weights */

/* "" first: a base model's own names; then the base-model prefixes of task checkpoints */
static const char *const BASE_PREFIXES[] = {
	"", "bert.", "roberta.", "distilbert.", "albert.", "mpnet.", "deberta.", NULL,
};

/* *use = name, or else alt, whichever exists under one of BASE_PREFIXES; RG_ERR_FORMAT naming
 * name when neither does. */
static rg_status base_name(const rg_tsrc *src, const char *name, const char *alt,
			   const char **use)
{
	*use = NULL;
	if (rg_tsrc_has(src, BASE_PREFIXES, name))
		*use = name;
	else if (alt && rg_tsrc_has(src, BASE_PREFIXES, alt))
		*use = alt;
	if (*use)
		return RG_OK;
	return rg_errorf(RG_ERR_FORMAT,
			 "%s: missing tensor %s (also looked under the prefixes bert., roberta., "
			 "distilbert., albert., mpnet., deberta.)",
			 src->what, name);
}

rg_status rg_model_read_tensor(const rg_tsrc *src, const char *name, const char *alt, int64_t d0,
			       int64_t d1, float *dst)
{
	const char *use;
	rg_status s = base_name(src, name, alt, &use);

	return s != RG_OK ? s : rg_tsrc_read(src, BASE_PREFIXES, use, d0, d1, dst);
}

/* Allocate backend memory for n elements and fill it from the host f32 buffer, either in the
 * compute dtype (as_act) or as raw f32. */
rg_status rg_model_upload(rg_model *m, const float *src, size_t n, bool as_act, void **dst)
{
	rg_backend *be = m->be;
	rg_status st;

	st = rg_backend_alloc(be, n * (as_act ? m->esz : sizeof(float)), dst);
	if (st != RG_OK)
		return st;
	rg_model_count_weight(m, n * (as_act ? m->esz : sizeof(float)), false);
	if (as_act)
		return rg_backend_upload_f32_as(be, *dst, src, n, rg_backend_dtype(be));
	return rg_backend_upload(be, *dst, src, n * sizeof(float));
}

/* Look up, check, convert and upload one tensor. scratch holds >= numel floats. */
rg_status rg_model_load_tensor(rg_model *m, const rg_tsrc *src, const char *name, const char *alt,
			       int64_t d0, int64_t d1, bool as_act, float *scratch, void **dst)
{
	rg_status s = rg_model_read_tensor(src, name, alt, d0, d1, scratch);

	if (s != RG_OK)
		return s;
	return rg_model_upload(m, scratch, (size_t)d0 * (size_t)(d1 < 0 ? 1 : d1), as_act, dst);
}

rg_status rg_model_host_tensor(const rg_tsrc *src, const char *name, int64_t d0, int64_t d1,
			       float **dst)
{
	const char *use;
	rg_status s = base_name(src, name, NULL, &use);

	*dst = NULL;
	return s != RG_OK ? s : rg_tsrc_get(src, BASE_PREFIXES, use, d0, d1, dst);
}

/* ---------------------------------------------------------------- arena */

/* Plan the arena for T token rows and S sequences (TurboTransformers Algorithm 1, sec. 4.2). Op
 * indices of one layer: 0 embed, 1 QKV GEMM, 2 attention, 3 output GEMM, 4 LN1, 5 FFN up, 6 FFN
 * down, 7 LN2, 8 gather (layout modes), 9 pool, 10 download. Every layer has the same lifetimes,
 * so the plan of one layer serves all of them. */
static rg_status arena_plan(const rg_model *m, size_t T, size_t S, rg_mem_tensor t[RG_ARENA_N],
			    size_t *total)
{
	const size_t H = (size_t)m->cfg.hidden_size, I = (size_t)m->cfg.intermediate_size;
	const size_t e = m->esz;
	/* DeBERTa's relative tables live from the QKV GEMM (after which rg_op_rel_tables fills
	 * them) to the attention */
	const rg_encoder_config *c = &m->cfg;
	const size_t rel = c->relative_attention ?
				   T * (size_t)c->num_attention_heads * 2 * (size_t)c->att_span * e : 0;
	const rg_mem_tensor spec[RG_ARENA_N] = {
		[RG_A_HIDDEN] = {"hidden", T * H * e, 0, 9, 0},
		[RG_A_QKV] = {"qkv", T * 3 * H * e, 1, 2, 0},
		[RG_A_CTX] = {"ctx", T * H * e, 2, 3, 0},
		[RG_A_ATTN_OUT] = {"attn_out", T * H * e, 3, 4, 0},
		[RG_A_INTER] = {"inter", T * I * e, 5, 6, 0},
		[RG_A_FFN_OUT] = {"ffn_out", T * H * e, 6, 7, 0},
		[RG_A_GATHERED] = {"gathered", T * H * e, 8, 9, 0},
		[RG_A_POOLED] = {"pooled", S * H * sizeof(float), 9, 10, 0},
		[RG_A_C2P] = {"c2p", c->c2p ? rel : 0, 1, 2, 0},
		[RG_A_P2C] = {"p2c", c->p2c ? rel : 0, 1, 2, 0},
	};

	memcpy(t, spec, sizeof(spec));
	return rg_mem_plan(t, RG_ARENA_N, 256, total);
}

/* Pointers of the arena tensors for a batch of T rows and S sequences: the batch's own plan when it
 * fits the arena (tensors packed closer, better L2 reuse for small batches), else the plan made at
 * load for max_batch_tokens, whose regions hold any smaller batch. */
static rg_status arena_ptrs(const rg_model *m, int T, int S, void *p[RG_ARENA_N])
{
	rg_mem_tensor t[RG_ARENA_N];
	size_t total = 0;
	const rg_mem_tensor *use = m->plan_max;

	if (arena_plan(m, (size_t)T, (size_t)S, t, &total) == RG_OK && total <= m->arena_bytes)
		use = t;
	for (int i = 0; i < RG_ARENA_N; i++)
		p[i] = (char *)m->arena_d + use[i].offset;
	return RG_OK;
}

static rg_status alloc_arena(rg_model *m)
{
	const size_t T = (size_t)m->max_tokens, H = (size_t)m->cfg.hidden_size;
	const size_t nout = (T < RG_GRAPH_MAX_SEQ ? T : RG_GRAPH_MAX_SEQ) * H * sizeof(float);
	struct {
		void **p;
		size_t bytes;
	} dev[] = {
		{(void **)&m->ids_d, (3 * T + 1) * 4},
		{(void **)&m->seg_d, T * 4},
		{(void **)&m->idx_d, T * 4},
		{(void **)&m->cu_pool_d, (T + 1) * 4},
	};
	rg_status s;

	s = arena_plan(m, T, T, m->plan_max, &m->arena_bytes);
	if (s != RG_OK)
		return rg_error_wrap(s, "activation arena plan for %d tokens", m->max_tokens);
	m->arena_naive = rg_mem_plan_naive(m->plan_max, RG_ARENA_N, 256);
	if ((s = rg_backend_alloc(m->be, m->arena_bytes, &m->arena_d)) != RG_OK)
		return rg_error_wrap(s, "activation arena for %d tokens", m->max_tokens);
	/* stale rows of an earlier batch are what padding tokens read: start from zeros, never from
	 * uninitialised memory */
	if ((s = rg_backend_zero(m->be, m->arena_d, m->arena_bytes)) != RG_OK)
		return s;
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		if ((s = rg_backend_alloc(m->be, dev[i].bytes, dev[i].p)) != RG_OK)
			return rg_error_wrap(s, "activation arena for %d tokens", m->max_tokens);
	if ((s = rg_backend_host_alloc(m->be, (3 * T + 1) * 4, (void **)&m->ids_h)) != RG_OK ||
	    (s = rg_backend_host_alloc(m->be, nout, (void **)&m->out_h)) != RG_OK)
		return rg_error_wrap(s, "pinned staging for %d tokens", m->max_tokens);
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
		void *dev[] = {m->arena_d, m->ids_d, m->seg_d, m->idx_d, m->cu_pool_d};

		for (int i = 0; m->graph_cache && i < m->graph_cap; i++)
			rg_backend_graph_free(be, m->graph_cache[i].g);
		for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
			rg_backend_dealloc(be, dev[i]);
		rg_backend_host_free(be, m->ids_h);
		rg_backend_host_free(be, m->out_h);
		if (m->arch && m->arch->kind != RG_MODEL_ENCODER) /* a decoder's step state */
			rg_decoder_free(m);
		if (m->arch && m->weights)
			m->arch->free_weights(m);
		rg_backend_free(be);
	}
	free(m->graph_cache);
	if (m->gen_free)
		m->gen_free(m->gen);
	rg_tokenizer_free(m->tok);
	rg_model_langs_free(m);
	free(m->chat_template);
	free(m->chat_bos);
	free(m->chat_eos);
	free(m->head.w1);
	free(m->head.b1);
	free(m->head.w2);
	free(m->head.b2);
	free(m->head_in);
	free(m->head_mid);
	for (int k = 0; k < m->n_dense; k++) {
		free(m->dense_w[k]);
		free(m->dense_b[k]);
	}
	free(m->dense_buf[0]);
	free(m->dense_buf[1]);
	rg_head_config_free(&m->head_cfg);
	free(m->tokens_h);
	free(m->positions_h);
	free(m->seg_h);
	free(m->idx_h);
	free(m->cu_attn_h);
	free(m->dir);
	free(m->act_name);
	free(m);
}

/* RG_DTYPE_AUTO: fp32 on the CPU; on CUDA fp16, or bf16 when the checkpoint stores its word
 * embeddings in bf16 (as TEI does: a bf16 checkpoint may overflow fp16). */
static rg_dtype resolve_dtype(const rg_model_params *p, const rg_tsrc *src)
{
	static const char *const prefixes[] = {"", "bert.", NULL};

	if (p->dtype != RG_DTYPE_AUTO)
		return p->dtype;
	if (p->device != RG_DEVICE_CUDA)
		return RG_DTYPE_F32;
	return rg_tsrc_dtype(src, prefixes, "embeddings.word_embeddings.weight") == RG_DTYPE_BF16
		       ? RG_DTYPE_BF16
		       : RG_DTYPE_F16;
}

/* The sentence-transformers Dense modules of dir (or the one at dense_dir) into m: configs,
 * f32 host weights from each module's model.safetensors, two scratch buffers of T rows. The
 * sizes must chain from the hidden size: in_features of the first is hidden_size, of each
 * next the out_features before it. Needs m->cfg. */
static rg_status load_dense(rg_model *m, const char *dir, const char *dense_dir, int T)
{
	int n = 0, width = m->cfg.hidden_size;
	rg_status s;

	if ((s = rg_dense_config_load(dir, dense_dir, m->dense_cfg, &n)) != RG_OK)
		return s;
	for (int k = 0; k < n; k++) {
		const rg_dense_config *d = &m->dense_cfg[k];
		int want = k ? m->dense_cfg[k - 1].out_features : m->cfg.hidden_size;
		char *mdir = rg_path_join(dir, d->path), *path;
		rg_st *w = NULL;

		if (!mdir)
			return rg_errorf(RG_ERR_OOM, "out of host memory");
		path = rg_path_join(mdir, "model.safetensors");
		free(mdir);
		if (!path)
			return rg_errorf(RG_ERR_OOM, "out of host memory");
		if (d->in_features != want) {
			s = rg_errorf(RG_ERR_FORMAT, "%s/%s: in_features %d, but the vector it gets "
				      "has %d", dir, d->path, d->in_features, want);
		} else if ((s = rg_st_open_file(path, &w)) != RG_OK) {
			char why[256];

			snprintf(why, sizeof(why), "%s", rg_last_error());
			s = rg_errorf(s, "%s (a Dense module's weights must be model.safetensors; "
				      "pytorch_model.bin is not read)", why);
		} else {
			rg_tsrc src;

			rg_tsrc_from_st(w, &src);
			if ((s = rg_model_host_tensor(&src, "linear.weight", d->out_features,
						      d->in_features, &m->dense_w[k])) == RG_OK &&
			    d->bias)
				s = rg_model_host_tensor(&src, "linear.bias", d->out_features, -1,
							 &m->dense_b[k]);
		}
		m->n_dense = k + 1; /* what is allocated is freed with the model */
		rg_st_free(w);
		free(path);
		if (s != RG_OK)
			return s;
		if (d->out_features > width)
			width = d->out_features;
	}
	if (!n)
		return RG_OK;
	for (int k = 0; k < 2; k++) {
		m->dense_buf[k] = malloc((size_t)T * (size_t)width * sizeof(float));
		if (!m->dense_buf[k])
			return rg_errorf(RG_ERR_OOM, "cannot allocate the Dense modules' buffers");
	}
	return RG_OK;
}

/* The Dense modules on n pooled rows x (n, hidden_size) in m->dense_buf[0]; the last writes
 * out (n, output_dim). sentence-transformers' Dense: act(x W^T + b). */
static void run_dense(rg_model *m, int n, float *out)
{
	const float *x = m->dense_buf[0];

	for (int k = 0; k < m->n_dense; k++) {
		const rg_dense_config *d = &m->dense_cfg[k];
		float *y = k == m->n_dense - 1 ? out : m->dense_buf[(k + 1) % 2];
		size_t len = (size_t)n * (size_t)d->out_features;

		rg_host_linear(x, n, d->in_features, m->dense_w[k], m->dense_b[k], d->out_features,
			       y);
		for (size_t i = 0; i < len; i++) {
			switch (d->act) {
			case RG_DENSE_IDENTITY:
				break;
			case RG_DENSE_TANH:
				y[i] = tanhf(y[i]);
				break;
			case RG_DENSE_RELU:
				y[i] = y[i] > 0.f ? y[i] : 0.f;
				break;
			case RG_DENSE_SIGMOID:
				y[i] = 1.f / (1.f + expf(-y[i]));
				break;
			case RG_DENSE_GELU: /* torch.nn.GELU's default: the exact erf form */
				y[i] = 0.5f * y[i] * (1.f + erff(y[i] * 0.70710678f));
				break;
			}
		}
		x = y;
	}
}

/* eos_token_id of file (in dir: an id or a list of ids) added to m->gen_eos; a file absent or not
 * JSON, or another type, adds nothing (the config's own checks are the architecture's). */
static void add_eos(rg_model *m, const char *dir, const char *file)
{
	char *path = rg_path_join(dir, file);
	struct json_object *root = path ? json_object_from_file(path) : NULL, *v;
	const int vocab = m->dec.cfg.vocab_size;

	free(path);
	if (root && json_object_object_get_ex(root, "eos_token_id", &v) && v) {
		const bool arr = json_object_is_type(v, json_type_array);
		const size_t n = arr ? json_object_array_length(v) : 1;

		for (size_t i = 0; i < n; i++) {
			struct json_object *e = arr ? json_object_array_get_idx(v, i) : v;
			int64_t id = json_object_is_type(e, json_type_int) ? json_object_get_int64(e)
									   : -1;
			bool dup = false;

			for (int k = 0; k < m->n_gen_eos; k++)
				dup |= m->gen_eos[k] == id;
			if (id >= 0 && id < vocab && !dup && m->n_gen_eos < 8)
				m->gen_eos[m->n_gen_eos++] = (int32_t)id;
		}
	}
	json_object_put(root);
}

/* The generation defaults transformers' generate() applies, from generation_config.json when
 * the directory has one (transformers then ignores config.json's), else config.json: an
 * encoder-decoder's decoder_start_token_id (generation_config.json's replaces config.json's,
 * which the family's hparams hook read; RG_ERR_FORMAT outside the vocabulary), and as logits
 * processors bad_words_ids' single-token entries (never generated; Marian bans its pad)
 * into m->gen_bad, forced_eos_token_id (an id, or a list's first) into m->gen_forced_eos
 * (the last token a length limit allows is forced to it) and forced_bos_token_id into
 * m->gen_forced_bos (the first token after a one-token prompt: transformers'
 * ForcedBOSTokenLogitsProcessor at cur_len 1), -1 when none. Unreadable or mistyped values, and
 * ids outside the vocabulary, add nothing. */
static rg_status gen_defaults(rg_model *m, const char *dir)
{
	char *path = rg_path_join(dir, "generation_config.json");
	struct json_object *root = path ? json_object_from_file(path) : NULL, *v;
	const int vocab = m->dec.cfg.vocab_size;
	rg_status s = RG_OK;

	free(path);
	if (root && m->arch->kind == RG_MODEL_ENC_DEC &&
	    json_object_object_get_ex(root, "decoder_start_token_id", &v) &&
	    json_object_is_type(v, json_type_int)) {
		/* generate() reads it from generation_config.json, over config.json's */
		int64_t id = json_object_get_int64(v);

		if (id < 0 || id >= vocab)
			s = rg_errorf(RG_ERR_FORMAT, "%s/generation_config.json: decoder_start_token_id "
				      "%lld is outside the vocabulary [0, %d)", dir, (long long)id,
				      vocab);
		else
			m->dec.cfg.decoder_start_token_id = m->info.decoder_start_token_id =
				(int32_t)id;
	}
	if (!root) {
		path = rg_path_join(dir, "config.json");
		root = path ? json_object_from_file(path) : NULL;
		free(path);
	}
	m->gen_forced_eos = -1;
	m->gen_forced_bos = -1;
	m->n_gen_bad = 0;
	if (root && json_object_object_get_ex(root, "bad_words_ids", &v) &&
	    json_object_is_type(v, json_type_array))
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			struct json_object *w = json_object_array_get_idx(v, i), *t;
			int64_t id;

			if (!json_object_is_type(w, json_type_array) || json_object_array_length(w) != 1)
				continue; /* longer bad words: not applied */
			t = json_object_array_get_idx(w, 0);
			id = json_object_is_type(t, json_type_int) ? json_object_get_int64(t) : -1;
			if (id >= 0 && id < vocab && m->n_gen_bad < 8)
				m->gen_bad[m->n_gen_bad++] = (int32_t)id;
		}
	if (root && json_object_object_get_ex(root, "forced_eos_token_id", &v) && v) {
		struct json_object *t = json_object_is_type(v, json_type_array)
						? json_object_array_get_idx(v, 0) : v;
		int64_t id = t && json_object_is_type(t, json_type_int) ? json_object_get_int64(t) : -1;

		if (id >= 0 && id < vocab)
			m->gen_forced_eos = (int32_t)id;
	}
	if (root && json_object_object_get_ex(root, "forced_bos_token_id", &v) && v &&
	    json_object_is_type(v, json_type_int)) {
		int64_t id = json_object_get_int64(v);

		if (id >= 0 && id < vocab)
			m->gen_forced_bos = (int32_t)id;
	}
	json_object_put(root);
	return s;
}

/* A special token of tokenizer_config.json (key "bos_token"...): a string or an AddedToken
 * object's "content"; into *out (malloc'd), left NULL when absent or null. */
static rg_status hf_special_token(struct json_object *root, const char *key, char **out)
{
	struct json_object *t, *c;

	if (!root || !json_object_object_get_ex(root, key, &t))
		return RG_OK;
	if (json_object_is_type(t, json_type_object) &&
	    json_object_object_get_ex(t, "content", &c))
		t = c;
	if (!json_object_is_type(t, json_type_string))
		return RG_OK;
	if (!(*out = strdup(json_object_get_string(t))))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	return RG_OK;
}

/* tokenizer_config.json's chat_template (a string) into m->chat_template when present (a file
 * that is absent or unreadable as JSON leaves it NULL: the template is optional), its bos_token /
 * eos_token (the template's variables) into m->chat_bos / chat_eos, and the EOS ids of
 * config.json and generation_config.json (what HF generate stops at). */
static rg_status hf_chat_template(rg_model *m, const char *dir)
{
	char *path = rg_path_join(dir, "tokenizer_config.json");
	struct json_object *root, *t;
	rg_status s;

	if (!path)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	add_eos(m, dir, "config.json");
	add_eos(m, dir, "generation_config.json");
	if ((s = gen_defaults(m, dir)) != RG_OK)
		return s;
	root = json_object_from_file(path);
	free(path);
	if (root && json_object_object_get_ex(root, "chat_template", &t) &&
	    json_object_is_type(t, json_type_string) &&
	    !(m->chat_template = strdup(json_object_get_string(t)))) {
		json_object_put(root);
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	}
	if ((s = hf_special_token(root, "bos_token", &m->chat_bos)) == RG_OK)
		s = hf_special_token(root, "eos_token", &m->chat_eos);
	json_object_put(root);
	return s;
}

rg_status rg_model_hparams(rg_model *m, const rg_cfg_src *cfg)
{
	rg_decoder_config *c = &m->dec.cfg;

	memset(&m->cfg, 0, sizeof(m->cfg));
	memset(c, 0, sizeof(*c));
	snprintf(c->model_type, sizeof(c->model_type), "%s", m->arch->model_type);
	c->bos_token_id = c->eos_token_id = -1;
	c->decoder_start_token_id = c->pad_token_id = c->enc_pos_skip_token = -1;
	return m->arch->hparams(m, cfg);
}

rg_status rg_model_load_weights(rg_model *m, const rg_model_params *p, rg_dtype dt,
				const rg_tsrc *src)
{
	rg_status s = rg_backend_init(p->device, p->device_index, dt, &m->be);

	if (s != RG_OK)
		return s;
	m->esz = rg_dtype_size(rg_backend_dtype(m->be)); /* bf16 on the CPU stores f32 */
	return m->arch->load(m, src);
}

/* What an encoder needs besides its hyper-parameters and weights: its pooling (modules.json,
 * or p's), the task head's config, the Dense modules (embeddings) and the tokenizer, whose
 * vocabulary must fit config.json's. m->cfg is read. */
static rg_status encoder_prepare(rg_model *m, const char *dir, const rg_model_params *p,
				 rg_pooling *pooling, bool *normalize)
{
	rg_status s;

	if ((s = rg_pooling_config_load(dir, pooling, normalize)) != RG_OK)
		return s;
	if (*pooling == RG_POOL_LAST && !p->pooling_set)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: pooling_mode_lasttoken is supported for decoder embeddings "
				 "only (%s is an encoder)",
				 dir, m->cfg.model_type);
	if (p->pooling_set) {
		if (p->pooling == RG_POOL_LAST)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: last-token pooling is supported for decoder embeddings "
					 "only (%s is an encoder)", dir, m->cfg.model_type);
		if (p->pooling < RG_POOL_MEAN || p->pooling > RG_POOL_MAX)
			return rg_errorf(RG_ERR_INVALID_INPUT, "pooling %d is not an rg_pooling",
					 (int)p->pooling);
		*pooling = p->pooling;
	}
	if ((s = rg_head_config_load(dir, &m->head_cfg)) != RG_OK)
		return s;
	if (m->head_cfg.classifier) { /* the head reads the first token's hidden state */
		*pooling = RG_POOL_CLS;
		*normalize = false;
	} else if ((s = load_dense(m, dir, p->dense_dir, p->max_batch_tokens)) != RG_OK) {
		return s;
	}
	if ((s = rg_tokenizer_load(dir, &m->tok)) != RG_OK)
		return s;
	if (rg_tokenizer_vocab_size(m->tok) > m->cfg.vocab_size)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tokenizer has %d tokens but config.json vocab_size is %d",
				 m->dir, (int)rg_tokenizer_vocab_size(m->tok), m->cfg.vocab_size);
	return RG_OK;
}

/* The rest of an encoder's load from its weights src: backend and weights
 * (rg_model_load_weights), the classifier's head, the host buffers, the arena, CUDA graphs,
 * rg_model_info. */
static rg_status encoder_init(rg_model *m, const rg_model_params *p, const rg_tsrc *src,
			      rg_pooling pooling, bool normalize)
{
	const rg_dtype dt = resolve_dtype(p, src);
	rg_status s;

	if ((s = rg_model_load_weights(m, p, dt, src)) != RG_OK)
		return s;
	rg_backend_set_exact_gelu(m->be, rg_tuning_bool(RG_TUNE_EXACT_GELU));
	if (m->head_cfg.classifier &&
	    (s = m->arch->load_head ? m->arch->load_head(m, src)
				    : rg_errorf(RG_ERR_UNSUPPORTED,
						"%s: no sequence classification head for %s", m->dir,
						m->cfg.model_type)) != RG_OK)
		return s;
	if (m->head_cfg.classifier) {
		size_t n = (size_t)p->max_batch_tokens * m->cfg.hidden_size;

		m->head_in = malloc(n * sizeof(float));
		m->head_mid = malloc(n * sizeof(float));
		if (!m->head_in || !m->head_mid)
			return rg_errorf(RG_ERR_OOM, "cannot allocate the classifier's host buffers");
	}
	if ((s = alloc_arena(m)) != RG_OK)
		return s;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;
	m->graphs = rg_backend_has_graphs(m->be) && rg_tuning_bool(RG_TUNE_CUDA_GRAPHS);
	m->bucket = (rg_bucket_policy){m->max_tokens,
				       m->cfg.max_position_embeddings - m->cfg.position_offset,
				       m->max_tokens < RG_GRAPH_MAX_SEQ ? m->max_tokens
									: RG_GRAPH_MAX_SEQ, 0};
	if (m->graphs) {
		m->graph_cache = calloc(RG_GRAPH_CACHE, sizeof(*m->graph_cache));
		if (!m->graph_cache)
			return rg_errorf(RG_ERR_OOM, "out of host memory");
		m->graph_cap = RG_GRAPH_CACHE;
	}

	m->act_name = strdup(rg_act_name(m->cfg.hidden_act));
	if (!m->act_name)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	m->info.model_dir = m->dir;
	m->info.model_type = m->arch->model_type;
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
	m->info.device = p->device;
	m->info.dtype = dt;
	m->info.max_batch_tokens = p->max_batch_tokens;
	m->info.max_seq_len = m->cfg.max_position_embeddings - m->cfg.position_offset;
	m->info.num_labels = m->head_cfg.classifier ? m->head_cfg.num_labels : 0;
	m->info.labels = (const char *const *)m->head_cfg.labels;
	m->info.multi_label = m->head_cfg.multi_label;
	m->info.output_dim = m->info.num_labels ? m->info.num_labels
			     : m->n_dense ? m->dense_cfg[m->n_dense - 1].out_features
					  : m->cfg.hidden_size;
	m->info.kind = RG_MODEL_ENCODER;
	m->info.num_key_value_heads = m->cfg.num_attention_heads;
	m->info.head_dim = m->cfg.hidden_size / m->cfg.num_attention_heads;
	m->info.bos_token_id = -1;
	m->info.eos_token_id = -1;
	m->info.decoder_start_token_id = -1;
	m->info.max_source_positions = 0;
	return RG_OK;
}

/* Whether dir's modules.json names a sentence-transformers Pooling module. */
static bool st_has_pooling(const char *dir)
{
	char *path = rg_path_join(dir, "modules.json");
	json_object *root = NULL;
	struct stat sb;
	bool found = false;

	if (path && stat(path, &sb) == 0 && rg_json_read_file(path, 1 << 20, &root) == RG_OK &&
	    json_object_is_type(root, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(root) && !found; i++) {
			json_object *jt;
			const char *t;
			size_t n;

			if (!json_object_object_get_ex(json_object_array_get_idx(root, i), "type",
						       &jt) ||
			    !json_object_is_type(jt, json_type_string))
				continue;
			t = json_object_get_string(jt);
			n = strlen(t);
			found = n >= 14 && !strcmp(t + n - 14, "models.Pooling");
		}
	}
	rg_error_clear(); /* a missing or unreadable file only means "no" here */
	json_object_put(root);
	free(path);
	return found;
}

/* A decoder-only model as an embedding model (issue 31; Qwen3-Embedding, gte-Qwen2,
 * e5-mistral): when dir's modules.json names a Pooling module (or p sets a pooling, TEI's
 * --pooling), its pooling and Normalize module; m->dec.embeds then. Dense modules are refused
 * (none of those models has one). */
static rg_status decoder_embed_prepare(rg_model *m, const char *dir, const rg_model_params *p,
				       rg_pooling *pooling, bool *normalize)
{
	rg_dense_config dense[RG_MAX_DENSE];
	int n_dense = 0;
	rg_status s;

	if (m->arch->kind != RG_MODEL_DECODER || (!st_has_pooling(dir) && !p->pooling_set))
		return RG_OK;
	if ((s = rg_pooling_config_load(dir, pooling, normalize)) != RG_OK)
		return s;
	if (p->pooling_set) {
		if (p->pooling < RG_POOL_MEAN || p->pooling > RG_POOL_LAST)
			return rg_errorf(RG_ERR_INVALID_INPUT, "pooling %d is not an rg_pooling",
					 (int)p->pooling);
		*pooling = p->pooling;
	}
	if ((s = rg_dense_config_load(dir, p->dense_dir, dense, &n_dense)) != RG_OK)
		return s;
	if (n_dense > 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: a sentence-transformers Dense module after a decoder's pooling "
				 "is not supported", dir);
	m->dec.embeds = true;
	return RG_OK;
}

/* A Hugging Face directory: config.json's model_type picks the architecture (arch.c); its
 * hparams hook reads config.json, then the kind's own files (tokenizer, heads), then its load
 * hook reads the safetensors weights. */
static rg_status load_hf(rg_model *m, const char *dir, const rg_model_params *p)
{
	rg_cfg_src cs = {0};
	char *path = NULL;
	const char *type;
	rg_pooling pooling = RG_POOL_MEAN;
	bool normalize = false;
	rg_st *w = NULL;
	rg_tsrc src;
	rg_status s;

	if ((s = rg_cfg_open(dir, &cs.root, &path)) != RG_OK)
		return s;
	cs.path = path;
	if ((s = rg_cfg_str(path, cs.root, "model_type", NULL, &type)) != RG_OK)
		goto out_put_config;
	m->arch = rg_arch_find(type);
	if (!m->arch) {
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s/config.json: model_type \"%s\" is not supported (%s)", dir, type,
			      rg_arch_names());
		goto out_put_config;
	}
	if ((s = rg_arch_servable(m->arch, path)) != RG_OK ||
	    (s = rg_model_hparams(m, &cs)) != RG_OK)
		goto out_put_config;
	s = m->arch->kind != RG_MODEL_ENCODER
		    ? rg_decoder_prepare(m, dir)
		    : encoder_prepare(m, dir, p, &pooling, &normalize);
	if (s == RG_OK && m->arch->kind != RG_MODEL_ENCODER)
		s = decoder_embed_prepare(m, dir, p, &pooling, &normalize);
	if (s != RG_OK || (s = rg_st_open_dir(dir, &w)) != RG_OK)
		goto out_put_config;
	rg_tsrc_from_st(w, &src);
	src.cfg = &cs; /* config.json stays open for the load hook's arrays */
	s = m->arch->kind != RG_MODEL_ENCODER ? rg_decoder_init(m, p, &src)
					      : encoder_init(m, p, &src, pooling, normalize);
	rg_st_free(w); /* the weights live on the backend now */
	if (s == RG_OK && m->dec.embeds) {
		m->info.pooling = pooling;
		m->info.normalize = normalize;
		m->info.output_dim = m->info.hidden_size;
	}
	if (s == RG_OK && m->arch->kind != RG_MODEL_ENCODER)
		s = hf_chat_template(m, dir); /* and the EOS ids generate stops at */
	if (s == RG_OK)
		s = rg_model_langs_load(m, dir); /* mBART / NLLB / M2M100 language codes */
out_put_config:
	json_object_put(cs.root);
	free(path);
	return s;
}

rg_model *rg_model_load(const char *dir, const rg_model_params *params, rg_status *st)
{
	rg_model_params p = params ? *params : rg_model_params_default();
	rg_model *m = NULL;
	struct stat sb;
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
	if (p.quantize != RG_QUANTIZE_NONE && p.quantize != RG_QUANTIZE_Q8_0) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_params.quantize: unknown value %d",
			      (int)p.quantize);
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (m) {
		m->gen_forced_eos = m->gen_forced_bos = -1;
		m->lang_slot = m->lang_default = -1;
	}
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
	if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) /* a GGUF file */
		s = rg_gguf_model_load(m, dir, &p);
	else
		s = load_hf(m, dir, &p);
	if (s != RG_OK)
		goto out_free_model;
	if (p.quantize != RG_QUANTIZE_NONE && m->info.kind != RG_MODEL_DECODER) {
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s: rg_model_params.quantize applies to decoder-only models, not %s",
			      dir, m->info.model_type ? m->info.model_type : "this model");
		goto out_free_model;
	}
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

/* Every upload of a weight counts itself here (rg_model_upload, the quantized loader). */
void rg_model_count_weight(rg_model *m, size_t bytes, bool quantized)
{
	m->info.weight_bytes += bytes;
	m->info.quantized_weights += quantized;
}

long long rg_model_graph_captures(const rg_model *m)
{
	return m ? m->graph_captures : 0;
}

rg_status rg_model_memory(const rg_model *m, size_t *used, size_t *total)
{
	if (!m || !used || !total)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_memory: NULL argument");
	return rg_backend_mem_info(m->be, used, total);
}

rg_status rg_model_arena_bytes(const rg_model *m, int n_tokens, int n_seq, size_t *planned,
			       size_t *naive)
{
	rg_mem_tensor t[RG_ARENA_N];
	rg_status s;

	if (!m || !planned || !naive)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_arena_bytes: NULL argument");
	if (m->info.kind != RG_MODEL_ENCODER)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_model_arena_bytes: %s is a decoder; its step arena is not "
				 "planned per batch", m->dir);
	if (n_tokens < 1 || n_tokens > m->max_tokens || n_seq < 1 || n_seq > n_tokens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_arena_bytes: %d tokens in %d sequences "
				 "is outside [1, max_batch_tokens %d]", n_tokens, n_seq,
				 m->max_tokens);
	if ((s = arena_plan(m, (size_t)n_tokens, (size_t)n_seq, t, planned)) != RG_OK)
		return s;
	*naive = rg_mem_plan_naive(t, RG_ARENA_N, 256);
	return RG_OK;
}

rg_encode_params rg_encode_params_default(void)
{
	rg_encode_params p;

	p.truncation = RG_TRUNCATE_NONE;
	p.max_length = 0;
	p.add_special_tokens = true;
	p.offsets = false;
	p.src_lang = NULL;
	return p;
}

rg_status rg_model_encode(const rg_model *m, const char *a, size_t a_len, const char *b,
			  size_t b_len, const rg_encode_params *p, rg_encoding *out)
{
	rg_encode_params d = rg_encode_params_default();
	rg_tok_params tp = {0};
	size_t limit;
	rg_status s;

	if (out)
		memset(out, 0, sizeof(*out));
	if (!m || !out || (!a && a_len) || (!b && b_len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_encode: NULL argument");
	if (!m->tok)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s has no tokenizer (no tokenizer.json)",
				 m->dir);
	if (p)
		d = *p;
	if (d.truncation != RG_TRUNCATE_NONE && d.truncation != RG_TRUNCATE_RIGHT &&
	    d.truncation != RG_TRUNCATE_LEFT)
		return rg_errorf(RG_ERR_INVALID_INPUT, "unknown truncation %d", (int)d.truncation);
	limit = d.max_length == 0 ? (size_t)m->info.max_seq_len
		: d.max_length == SIZE_MAX ? 0 : d.max_length;
	tp.truncation = d.truncation;
	tp.max_len = limit;
	tp.add_special_tokens = d.add_special_tokens;
	tp.offsets = d.offsets;
	/* a pair takes no code; a single text without src_lang gets the tokenizer's default */
	if ((d.src_lang || !b) && (s = rg_model_lang_params(m, d.src_lang, &tp)) != RG_OK)
		return s;
	if (tp.lang_set && b)
		return rg_errorf(RG_ERR_UNSUPPORTED, "src_lang applies to a single text, not a pair");
	if (!d.add_special_tokens)
		tp.lang_set = false; /* the code is a template token: none without the template */
	s = rg_tokenizer_encode_ex(m->tok, a ? a : "", a_len, b, b_len, &tp, out);
	if (s != RG_OK || !limit || out->n <= limit)
		return s;
	s = rg_errorf(RG_ERR_TOO_LONG,
		      "%s is %zu tokens, over the %s limit of %zu%s; shorten it or enable "
		      "truncation",
		      b ? "text pair" : "text", out->n, d.max_length ? "requested" : "model's",
		      limit, d.max_length ? "" : " (max_seq_len)");
	rg_encoding_free(out);
	return s;
}

rg_status rg_model_decode(const rg_model *m, const int32_t *ids, size_t n, bool skip_special_tokens,
			  char **text, size_t *len)
{
	if (!m || !text || !len || (!ids && n))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_decode: NULL argument");
	if (!m->tok)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s has no tokenizer (no tokenizer.json)",
				 m->dir);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= m->info.vocab_size)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "token id %d at %zu is outside the vocabulary [0, %d)",
					 ids[i], i, m->info.vocab_size);
	return rg_tokenizer_decode(m->tok, ids, n, skip_special_tokens, text, len);
}

const char *rg_model_token(const rg_model *m, int32_t id, size_t *len)
{
	if (!m || !m->tok) {
		if (len)
			*len = 0;
		return NULL;
	}
	return rg_tokenizer_id_to_token(m->tok, id, len);
}

rg_status rg_model_tokenize(const rg_model *m, const char *text, size_t len, bool truncate,
			    int32_t **ids, size_t *n_ids)
{
	rg_encode_params p = rg_encode_params_default();
	rg_encoding e;
	rg_status s;

	if (!m || !ids || !n_ids || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_tokenize: NULL argument");
	*ids = NULL;
	*n_ids = 0;
	p.truncation = truncate ? RG_TRUNCATE_RIGHT : RG_TRUNCATE_NONE;
	if ((s = rg_model_encode(m, text, len, NULL, 0, &p, &e)) != RG_OK)
		return s;
	*ids = e.ids; /* never NULL on success */
	*n_ids = e.n;
	e.ids = NULL;
	rg_encoding_free(&e);
	return RG_OK;
}

/* ---------------------------------------------------------------- embed */

/* Checks a packed batch; returns the total token count in *n_tokens and the longest length. */
static rg_status validate_batch(const rg_model *m, const int32_t *tokens, const int32_t *types,
				const int32_t *cu,
				int n_seq, int *n_tokens, int *max_len)
{
	const int max_pos = m->info.max_seq_len, vocab = m->cfg.vocab_size;
	const int n_types = m->cfg.type_vocab_size > 1 ? m->cfg.type_vocab_size : 1;
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
					 "(max_seq_len)",
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
	for (int64_t t = 0; types && t < total; t++)
		if (types[t] < 0 || types[t] >= n_types)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "token %lld has token type %d, outside [0, %d) "
					 "(type_vocab_size)",
					 (long long)t, types[t], n_types);
	*n_tokens = (int)total;
	return RG_OK;
}

/* Device pointers of one forward pass. */

/* The whole packed forward of one bucket as backend ops (what a graph captures): copy the staged
 * ids_h ([tokens T][positions T][cu S+1]) to the device, encode T rows as S sequences, pool S rows
 * into out_h (host memory the device writes through the mapping on CUDA). */
static rg_status forward_packed(rg_model *m, int T, int S, int L, const int32_t *cu_h)
{
	const int H = m->cfg.hidden_size;
	rg_fwd f = {0};
	rg_status s;

	arena_ptrs(m, T, S, f.a);
	f.tokens = m->ids_d;
	f.positions = m->ids_d + T;
	f.cu = m->ids_d + 2 * T;
	f.cu_h = cu_h;
	if ((s = rg_backend_upload_async(m->be, m->ids_d, m->ids_h, (size_t)(2 * T + S + 1) * 4)) !=
		    RG_OK ||
	    (s = m->arch->encode(m, &f, T, S, L)) != RG_OK)
		return s;
	/* pooled rows straight into the pinned (mapped) host buffer: no copy node after the pool;
	 * raw (rg_model_run_ex normalizes on the host when asked, so one graph serves both) */
	return rg_op_pool(m->be, f.a[RG_A_HIDDEN], f.cu, S, H, m->info.pooling, false, m->out_h);
}

/* The first n rows of x (n, H) act (backend memory) into dst (n, H) f32 host, for
 * rg_run_options.hidden_out: a 16-bit act is downloaded into the second half of dst and widened
 * in place (rg_widen16_tail), so no staging buffer is needed. */
static rg_status hidden_to_host(rg_model *m, const void *x, int n, float *dst)
{
	const size_t cnt = (size_t)n * (size_t)m->cfg.hidden_size;
	rg_status s;

	if (m->esz == sizeof(float))
		return rg_backend_download(m->be, dst, x, cnt * sizeof(float));
	if ((s = rg_backend_download(m->be, (unsigned char *)dst + 2 * cnt, x, cnt * 2)) != RG_OK)
		return s;
	rg_widen16_tail(dst, cnt, m->info.dtype);
	return RG_OK;
}

/* L2-normalize each of the n rows of v (n, H) in place, as sentence-transformers' Normalize
 * (F.normalize: x / max(||x||, 1e-12)); sums in double. */
static void l2_normalize_rows(float *v, int n, int H)
{
	for (int r = 0; r < n; r++) {
		float *x = v + (size_t)r * H;
		double ss = 0;

		for (int i = 0; i < H; i++)
			ss += (double)x[i] * x[i];
		ss = sqrt(ss);
		if (ss < 1e-12)
			ss = 1e-12;
		for (int i = 0; i < H; i++)
			x[i] = (float)(x[i] / ss);
	}
}

/* The id that fills padding slots: pad_token_id when it is a valid id, else 0. */
static int32_t pad_id(const rg_model *m)
{
	int32_t pad = m->cfg.pad_token_id;

	return pad < 0 || pad >= m->cfg.vocab_size ? 0 : pad;
}

/* Position ids of one sequence of len tokens. BERT and DistilBERT: 0, 1, ... RoBERTa-style
 * families (position_offset = padding_idx + 1): padding_idx + 1, + 2, ... counting only the
 * tokens that are not padding_idx, which themselves sit at padding_idx (transformers'
 * create_position_ids_from_input_ids). */
static void seq_positions(const rg_model *m, const int32_t *tokens, const int32_t *types, int len,
			  int32_t *pos)
{
	const int off = m->cfg.position_offset;
	int k = 0;

	if (!off) {
		for (int t = 0; t < len; t++)
			pos[t] = t;
	} else {
		for (int t = 0; t < len; t++)
			pos[t] = tokens[t] == m->cfg.padding_idx ? off - 1 : off + k++;
	}
	/* token type k > 0: the k-th block of the position table, which the architecture stores
	 * as position + (token_type_embeddings[k] - token_type_embeddings[0]) */
	for (int t = 0; types && t < len; t++)
		pos[t] += types[t] * m->cfg.max_position_embeddings;
}

/* Stage a validated packed batch into ids_h as bucket (T, S): padding tokens (pad id) at the
 * first position after the n real ones, padding sequences of length 0 after the n_seq real
 * ones. */
static void stage_packed(rg_model *m, const int32_t *tokens, const int32_t *types, const int32_t *cu,
			 int n, int n_seq,
			 int T, int S)
{
	int32_t *tk = m->ids_h, *ps = m->ids_h + T, *cs = m->ids_h + 2 * T;

	memcpy(tk, tokens, (size_t)n * 4);
	for (int q = 0; q < n_seq; q++)
		seq_positions(m, tokens + cu[q], types ? types + cu[q] : NULL, cu[q + 1] - cu[q],
			      ps + cu[q]);
	for (int t = n; t < T; t++) {
		tk[t] = pad_id(m);
		ps[t] = m->cfg.position_offset;
	}
	memcpy(cs, cu, (size_t)(n_seq + 1) * 4);
	for (int q = n_seq + 1; q <= S; q++)
		cs[q] = n;
}

/* The cached graph of bucket (T, S, L), or NULL. */
static rg_bucket_graph *graph_find(rg_model *m, int T, int S, int L)
{
	for (int i = 0; i < m->graph_cap; i++) {
		rg_bucket_graph *b = &m->graph_cache[i];
		if (b->g && b->T == T && b->S == S && b->L == L) {
			b->last_use = ++m->graph_clock;
			return b;
		}
	}
	return NULL;
}

/* Whether bucket (T, S, L), just run eagerly, ran eagerly before (then it is worth a graph);
 * else remember it, the oldest remembered bucket forgotten. */
static bool graph_seen_before(rg_model *m, int T, int S, int L)
{
	int *e;

	for (int i = 0; i < RG_GRAPH_SEEN; i++) {
		e = m->graph_seen[i];
		if (e[0] == T && e[1] == S && e[2] == L) {
			e[0] = 0; /* captured now: forget */
			return true;
		}
	}
	e = m->graph_seen[m->graph_seen_next];
	e[0] = T, e[1] = S, e[2] = L;
	m->graph_seen_next = (m->graph_seen_next + 1) % RG_GRAPH_SEEN;
	return false;
}

/* Capture bucket (T, S, L) into a free slot, else the least recently used one that is not
 * pinned (the cache always has RG_GRAPH_CACHE slots besides the pinned ones); pinned: the
 * warm-up's, kept for the model's life. ids_h must hold a staged batch of that bucket (the
 * capture records pointers, not values). */
static rg_status graph_capture(rg_model *m, int T, int S, int L, bool pinned)
{
	rg_bucket_graph *victim = NULL;
	rg_graph *g = NULL;
	rg_status s, s2;

	for (int i = 0; i < m->graph_cap; i++) {
		rg_bucket_graph *b = &m->graph_cache[i];
		if (!b->g) {
			victim = b;
			break;
		}
		if (!b->pinned && (!victim || b->last_use < victim->last_use))
			victim = b;
	}
	if (!victim) /* a broken invariant: RG_GRAPH_CACHE > 0 unpinned slots */
		return rg_errorf(RG_ERR_INTERNAL, "graph cache: every slot is pinned");
	if ((s = rg_backend_capture_begin(m->be)) != RG_OK)
		return s;
	s = forward_packed(m, T, S, L, NULL);
	s2 = rg_backend_capture_end(m->be, &g);
	if (s == RG_OK)
		s = s2;
	if (s != RG_OK) {
		rg_backend_graph_free(m->be, g);
		return s;
	}
	rg_backend_graph_free(m->be, victim->g);
	victim->g = g;
	victim->T = T;
	victim->S = S;
	victim->L = L;
	victim->pinned = pinned;
	victim->last_use = ++m->graph_clock;
	m->graph_captures++;
	return RG_OK;
}

/* Packed batch through a bucket and its graph (one H2D copy, one graph launch, one D2H copy, one
 * synchronisation). A bucket seen for the first time runs eagerly, then is captured. */
static rg_status embed_bucketed(rg_model *m, const int32_t *tokens, const int32_t *types,
				const int32_t *cu, int n,
				int n_seq, int max_len, float *out, float *hidden_out)
{
	const int H = m->cfg.hidden_size;
	const rg_bucket bk = rg_bucket_of(&m->bucket, n, n_seq, max_len);
	const int T = bk.T, S = bk.S, L = bk.L;
	rg_bucket_graph *b;
	rg_status s;

	stage_packed(m, tokens, types, cu, n, n_seq, T, S);
	b = m->graphs ? graph_find(m, T, S, L) : NULL;
	if (b) {
		s = rg_backend_graph_launch(m->be, b->g);
		m->graph_replays++;
	} else {
		s = forward_packed(m, T, S, L, m->ids_h + 2 * T);
		m->graph_eager++;
	}
	if (s == RG_OK)
		s = rg_backend_sync(m->be);
	if (s != RG_OK)
		return s;
	memcpy(out, m->out_h, (size_t)n_seq * H * sizeof(float));
	if (hidden_out) {
		/* the bucket's hidden rows (the graph's arena pointers: arena_ptrs of (T, S)); the
		 * first n are the batch's tokens */
		void *a[RG_ARENA_N];

		arena_ptrs(m, T, S, a);
		if ((s = hidden_to_host(m, a[RG_A_HIDDEN], n, hidden_out)) != RG_OK)
			return s;
	}
	if (!b && m->graphs && graph_seen_before(m, T, S, L)) {
		s = graph_capture(m, T, S, L, false);
		if (s != RG_OK) {
			/* the batch is answered; later batches run eagerly */
			fprintf(stderr, "ragged: CUDA graph capture failed, continuing without graphs: "
				"%s\n", rg_last_error());
			m->graphs = false;
		}
	}
	return RG_OK;
}

/* Run bucket b of the ladder once eagerly (cuBLASLt autotunes a new token bucket's GEMM shapes
 * then, outside the capture) on an example batch of it (pad ids), and capture it pinned; a
 * bucket already cached is pinned as it is. *captured: whether a capture ran. */
static rg_status warm_bucket(rg_model *m, rg_bucket b, int *lens, int32_t *tokens, int32_t *cu,
			     bool *captured)
{
	rg_bucket_graph *have = graph_find(m, b.T, b.S, b.L);
	int n, n_seq;
	rg_bucket got;
	rg_status s;

	*captured = false;
	if (have) {
		if (!have->pinned)
			m->graph_pinned++;
		have->pinned = true;
		return RG_OK;
	}
	rg_bucket_example(&m->bucket, b, &n, &n_seq, lens);
	got = rg_bucket_of(&m->bucket, n, n_seq, n_seq ? lens[0] : 0);
	if (n < 1 || got.T != b.T || got.S != b.S || got.L != b.L)
		return rg_errorf(RG_ERR_INTERNAL, "graph warm-up: no example batch of bucket "
				 "(%d, %d, %d)", b.T, b.S, b.L);
	cu[0] = 0;
	for (int i = 0; i < n_seq; i++)
		cu[i + 1] = cu[i] + lens[i];
	for (int t = 0; t < n; t++)
		tokens[t] = pad_id(m);
	stage_packed(m, tokens, NULL, cu, n, n_seq, b.T, b.S);
	if ((s = forward_packed(m, b.T, b.S, b.L, m->ids_h + 2 * b.T)) != RG_OK ||
	    (s = rg_backend_sync(m->be)) != RG_OK ||
	    (s = graph_capture(m, b.T, b.S, b.L, true)) != RG_OK)
		return s;
	m->graph_pinned++;
	*captured = true;
	return RG_OK;
}

rg_status rg_model_graph_warmup(rg_model *m, int max_seqs, int max_len, int *n_graphs)
{
	rg_bucket *lad = NULL;
	int32_t *tokens = NULL, *cu = NULL;
	int *lens = NULL, n_lad, done = 0;
	rg_bucket_graph *grown;
	rg_status s = RG_OK;

	if (n_graphs)
		*n_graphs = 0;
	if (!m || max_seqs < 1 || max_len < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "graph warm-up: needs a model, max_seqs >= 1 "
				 "and max_len >= 1");
	if (m->arch->kind != RG_MODEL_ENCODER)
		return rg_errorf(RG_ERR_UNSUPPORTED, "graph warm-up: encoders only");
	if (max_len > m->info.max_seq_len)
		max_len = m->info.max_seq_len;
	m->bucket.env_seqs = max_seqs;
	if (!m->graphs)
		return RG_OK;
	n_lad = rg_bucket_ladder(&m->bucket, max_len, NULL, 0);
	/* room for every bucket of the ladder pinned, and RG_GRAPH_CACHE others besides */
	grown = realloc(m->graph_cache, sizeof(*grown) * (size_t)(m->graph_cap + n_lad));
	if (!grown)
		return rg_errorf(RG_ERR_OOM, "graph warm-up: out of host memory");
	memset(grown + m->graph_cap, 0, sizeof(*grown) * (size_t)n_lad);
	m->graph_cache = grown;
	m->graph_cap += n_lad;
	lad = malloc(sizeof(*lad) * (size_t)(n_lad > 0 ? n_lad : 1));
	lens = malloc(sizeof(*lens) * (size_t)m->bucket.max_seq);
	tokens = malloc(sizeof(*tokens) * (size_t)m->max_tokens);
	cu = malloc(sizeof(*cu) * ((size_t)m->bucket.max_seq + 1));
	if (!lad || !lens || !tokens || !cu) {
		s = rg_errorf(RG_ERR_OOM, "graph warm-up: out of host memory");
		goto out_free;
	}
	rg_bucket_ladder(&m->bucket, max_len, lad, n_lad);
	/* largest first: a failure for want of device memory shows at once */
	for (int i = n_lad - 1; i >= 0; i--) {
		bool captured;

		if ((s = warm_bucket(m, lad[i], lens, tokens, cu, &captured)) != RG_OK) {
			s = rg_error_wrap(s, "graph warm-up, bucket (%d tokens, %d sequences, "
					  "longest %d)", lad[i].T, lad[i].S, lad[i].L);
			m->graphs = false; /* as after a failed capture while serving */
			goto out_free;
		}
		done += captured;
	}
out_free:
	if (n_graphs)
		*n_graphs = done;
	free(lad);
	free(lens);
	free(tokens);
	free(cu);
	return s;
}

void rg_model_get_stats(const rg_model *m, rg_model_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!m)
		return;
	out->graph_captures = m->graph_captures;
	out->graph_replays = m->graph_replays;
	out->graph_eager = m->graph_eager;
	out->graphs_pinned = m->graph_pinned;
	out->gemm_plans = (long long)rg_backend_gemm_plans(m->be);
}

/* Packed batch without buckets (CPU, or more sequences than the pinned output holds): the real
 * shapes, ids through the staging buffer, pooled rows straight into out. */
static rg_status embed_eager(rg_model *m, const int32_t *tokens, const int32_t *types,
			     const int32_t *cu, int n,
			     int n_seq, int max_len, float *out, float *hidden_out)
{
	const int H = m->cfg.hidden_size;
	rg_fwd f = {0};
	rg_status s;

	stage_packed(m, tokens, types, cu, n, n_seq, n, n_seq);
	arena_ptrs(m, n, n_seq, f.a);
	f.tokens = m->ids_d;
	f.positions = m->ids_d + n;
	f.cu = m->ids_d + 2 * n;
	f.cu_h = m->ids_h + 2 * n;
	if ((s = rg_backend_upload_async(m->be, m->ids_d, m->ids_h, (size_t)(2 * n + n_seq + 1) * 4)) !=
		    RG_OK ||
	    (s = m->arch->encode(m, &f, n, n_seq, max_len)) != RG_OK)
		return s;
	s = rg_op_pool(m->be, f.a[RG_A_HIDDEN], f.cu, n_seq, H, m->info.pooling, false,
		       f.a[RG_A_POOLED]);
	if (s != RG_OK)
		return s;
	if ((s = rg_backend_download(m->be, out, f.a[RG_A_POOLED], (size_t)n_seq * H * 4)) != RG_OK)
		return s;
	if (hidden_out && (s = hidden_to_host(m, f.a[RG_A_HIDDEN], n, hidden_out)) != RG_OK)
		return s;
	return rg_backend_sync(m->be);
}

/* The packed path: encoder and pooling, (n_seq, H) into out. */
static rg_status run_packed(rg_model *m, const int32_t *tokens, const int32_t *types,
			    const int32_t *cu_seqlens, int n_seq,
			    float *out, float *hidden_out)
{
	int n = 0, max_len = 0;
	rg_status s;

	if ((s = validate_batch(m, tokens, types, cu_seqlens, n_seq, &n, &max_len)) != RG_OK)
		return s;
	if (rg_backend_device(m->be) == RG_DEVICE_CUDA && n_seq <= RG_GRAPH_MAX_SEQ)
		return embed_bucketed(m, tokens, types, cu_seqlens, n, n_seq, max_len, out,
				      hidden_out);
	return embed_eager(m, tokens, types, cu_seqlens, n, n_seq, max_len, out, hidden_out);
}

/* Check a PADDED / CONCAT / SLOTTED layout and stage its rows: tokens (pad id in gaps),
 * positions restarting per request, seg (request index, -1 for padding), the gather index and
 * the attention cu_seqlens (rows, or slots). */
static rg_status stage_layout(rg_model *m, const int32_t *tokens, const int32_t *types,
			      const int32_t *cu, int n_seq,
			      const rg_layout *lay, int *n_rows_tokens, int *n_att, int *att_len)
{
	const int max_pos = m->info.max_seq_len;
	int64_t total;
	int seg_len;

	if (lay->n_rows < 1 || lay->row_len < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "layout needs n_rows >= 1 and row_len >= 1 "
				 "(got %d, %d)", lay->n_rows, lay->row_len);
	if (lay->row_len > max_pos)
		return rg_errorf(RG_ERR_TOO_LONG, "layout row_len %d is over max_seq_len %d",
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
	for (int64_t i = 0; i < total; i++) {
		m->tokens_h[i] = pad_id(m);
		m->positions_h[i] = m->cfg.position_offset;
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
			m->idx_h[cu[q] + k] = (int32_t)slot;
		}
		seq_positions(m, tokens + cu[q], types ? types + cu[q] : NULL, len,
			      m->positions_h + (size_t)row * lay->row_len + off);
	}
	*n_att = (int)(total / seg_len);
	for (int i = 0; i <= *n_att; i++)
		m->cu_attn_h[i] = i * seg_len;
	*att_len = seg_len;
	*n_rows_tokens = (int)total;
	return RG_OK;
}

/* The padded / concat / slotted paths: encoder and pooling, (n_seq, H) into out. */
static rg_status run_layout(rg_model *m, const int32_t *tokens, const int32_t *types,
			    const int32_t *cu_seqlens,
			    int n_seq, const rg_layout *layout, float *out, float *hidden_out)
{
	int n_packed = 0, max_len = 0, n_rows_tokens = 0, n_att = 0, att_len = 0;
	rg_fwd f = {0};
	rg_status s;

	if ((s = validate_batch(m, tokens, types, cu_seqlens, n_seq, &n_packed, &max_len)) != RG_OK)
		return s;
	s = stage_layout(m, tokens, types, cu_seqlens, n_seq, layout, &n_rows_tokens, &n_att,
			 &att_len);
	if (s != RG_OK)
		return s;
	/* the same kernels as the packed path (issue 6: a fair scheduler comparison), run eagerly */
	memcpy(m->ids_h, m->tokens_h, (size_t)n_rows_tokens * 4);
	memcpy(m->ids_h + n_rows_tokens, m->positions_h, (size_t)n_rows_tokens * 4);
	memcpy(m->ids_h + 2 * n_rows_tokens, m->cu_attn_h, (size_t)(n_att + 1) * 4);
	arena_ptrs(m, n_rows_tokens, n_seq, f.a);
	f.tokens = m->ids_d;
	f.positions = m->ids_d + n_rows_tokens;
	f.cu = m->ids_d + 2 * n_rows_tokens;
	f.cu_h = m->cu_attn_h;
	f.seg = m->seg_d;
	if ((s = rg_backend_upload_async(m->be, m->ids_d, m->ids_h,
					 (size_t)(2 * n_rows_tokens + n_att + 1) * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->seg_d, m->seg_h, (size_t)n_rows_tokens * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->idx_d, m->idx_h, (size_t)n_packed * 4)) != RG_OK ||
	    (s = rg_backend_upload(m->be, m->cu_pool_d, cu_seqlens, (size_t)(n_seq + 1) * 4)) !=
		    RG_OK)
		return s;
	if ((s = m->arch->encode(m, &f, n_rows_tokens, n_att, att_len)) != RG_OK)
		return s;
	s = rg_op_gather_rows(m->be, f.a[RG_A_HIDDEN], m->idx_d, n_packed, m->cfg.hidden_size,
			      f.a[RG_A_GATHERED]);
	if (s != RG_OK)
		return s;
	s = rg_op_pool(m->be, f.a[RG_A_GATHERED], m->cu_pool_d, n_seq, m->cfg.hidden_size,
		       m->info.pooling, false, f.a[RG_A_POOLED]);
	if (s != RG_OK)
		return s;
	if ((s = rg_backend_download(m->be, out, f.a[RG_A_POOLED],
				     (size_t)n_seq * m->cfg.hidden_size * 4)) != RG_OK)
		return s;
	/* the gathered rows are the tokens in packed order */
	if (hidden_out &&
	    (s = hidden_to_host(m, f.a[RG_A_GATHERED], n_packed, hidden_out)) != RG_OK)
		return s;
	return rg_backend_sync(m->be);
}

/* rg_model_run_ex on a decoder embedding model: packed only, token types all 0 (a decoder has
 * none), the model's pooling, its Normalize unless opt->raw. */
static rg_status run_decoder(rg_model *m, const rg_model_batch *b, const rg_run_options *opt,
			     float *out)
{
	rg_status s;

	if (b->layout && b->layout->mode != RG_EXEC_PACKED)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: a decoder embeds packed batches only (execution mode %d)",
				 m->dir, (int)b->layout->mode);
	/* (rg_dec_embed validates the rest; the bound keeps this loop inside a batch it accepts) */
	if (b->token_types && b->tokens && b->cu_seqlens && b->n_seq >= 1 &&
	    b->cu_seqlens[0] == 0 && b->cu_seqlens[b->n_seq] <= m->max_tokens)
		for (int t = 0; t < b->cu_seqlens[b->n_seq]; t++)
			if (b->token_types[t] != 0)
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "token_types[%d] = %d: a decoder has no token types "
						 "(sentence pairs are for encoders)",
						 t, b->token_types[t]);
	s = rg_dec_embed(m, b->tokens, b->cu_seqlens, b->n_seq, m->info.pooling, out,
			 opt ? opt->hidden_out : NULL);
	if (s == RG_OK && m->info.normalize && !(opt && opt->raw))
		l2_normalize_rows(out, b->n_seq, m->info.hidden_size);
	return s;
}

rg_status rg_model_embed_decoder(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens,
				 int n_seq, rg_pooling pooling, bool normalize, float *out)
{
	rg_status s;

	if (!m)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_embed_decoder: NULL model");
	s = rg_dec_embed(m, tokens, cu_seqlens, n_seq, pooling, out, NULL);
	if (s == RG_OK && normalize)
		l2_normalize_rows(out, n_seq, m->info.hidden_size);
	return s;
}

bool rg_model_embeds(const rg_model *m)
{
	if (!m)
		return false;
	if (m->info.kind == RG_MODEL_ENCODER)
		return !m->head_cfg.classifier;
	return m->info.kind == RG_MODEL_DECODER && m->dec.embeds;
}

rg_status rg_model_run(rg_model *m, const rg_model_batch *b, float *out)
{
	return rg_model_run_ex(m, b, NULL, out);
}

/* The pooling never normalizes on the device (one graph per bucket whatever the options); the
 * model's Dense modules (sentence-transformers 2_Dense) and its Normalize module run here, on
 * the host, the Normalize unless opt->raw. */
rg_status rg_model_run_ex(rg_model *m, const rg_model_batch *b, const rg_run_options *opt,
			  float *out)
{
	float *dst, *hidden_out = opt ? opt->hidden_out : NULL;
	rg_status s;

	if (!m || !b || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_run: NULL argument");
	if (m->info.kind == RG_MODEL_DECODER && m->dec.embeds)
		return run_decoder(m, b, opt, out);
	if (m->info.kind != RG_MODEL_ENCODER)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s is a decoder (%s) without sentence-transformers pooling files: "
				 "it has no embeddings or sequence outputs; use rg_model_step or "
				 "rg_model_embed_decoder", m->dir, m->info.model_type);
	if (b->layout && b->layout->mode != RG_EXEC_PACKED && b->layout->mode != RG_EXEC_PADDED &&
	    b->layout->mode != RG_EXEC_CONCAT && b->layout->mode != RG_EXEC_SLOTTED)
		return rg_errorf(RG_ERR_INVALID_INPUT, "unknown execution mode %d",
				 (int)b->layout->mode);
	dst = m->head_cfg.classifier ? m->head_in : m->n_dense ? m->dense_buf[0] : out;
	if (!b->layout || b->layout->mode == RG_EXEC_PACKED)
		s = run_packed(m, b->tokens, b->token_types, b->cu_seqlens, b->n_seq, dst,
			       hidden_out);
	else
		s = run_layout(m, b->tokens, b->token_types, b->cu_seqlens, b->n_seq, b->layout,
			       dst, hidden_out);
	if (s == RG_OK && m->head_cfg.classifier) {
		rg_cls_head_apply(&m->head, m->cfg.hidden_size, m->head_cfg.num_labels, b->n_seq,
				  m->head_in, m->head_mid, out);
		return s;
	}
	if (s == RG_OK && m->n_dense)
		run_dense(m, b->n_seq, out);
	if (s == RG_OK && m->info.normalize && !(opt && opt->raw))
		l2_normalize_rows(out, b->n_seq, m->info.output_dim);
	return s;
}

rg_status rg_model_embed(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens, int n_seq,
			 float *out)
{
	rg_model_batch b = {tokens, NULL, cu_seqlens, n_seq, NULL};

	return rg_model_run(m, &b, out);
}

rg_status rg_model_embed_layout(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens,
				int n_seq, const rg_layout *layout, float *out)
{
	rg_model_batch b = {tokens, NULL, cu_seqlens, n_seq, layout};

	return rg_model_run(m, &b, out);
}

rg_status rg_model_tokenize_pair(const rg_model *m, const char *a, size_t a_len, const char *b,
				 size_t b_len, bool truncate, int32_t **ids, int32_t **types,
				 size_t *n_ids)
{
	rg_encode_params p = rg_encode_params_default();
	rg_encoding e;
	rg_status s;

	if (!m || !ids || !types || !n_ids || (!a && a_len) || (!b && b_len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_tokenize_pair: NULL argument");
	*ids = *types = NULL;
	*n_ids = 0;
	p.truncation = truncate ? RG_TRUNCATE_RIGHT : RG_TRUNCATE_NONE;
	if ((s = rg_model_encode(m, a, a_len, b ? b : "", b_len, &p, &e)) != RG_OK)
		return s;
	*ids = e.ids;
	*types = e.types;
	*n_ids = e.n;
	e.ids = e.types = NULL;
	rg_encoding_free(&e);
	return RG_OK;
}
