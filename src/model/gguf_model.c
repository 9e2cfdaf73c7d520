/* Decoders from a GGUF file (llama.cpp's format, src/core/gguf.h): the hyper-parameters from the
 * <arch>.* metadata, the tokenizer from tokenizer.ggml.*, the chat template kept, and the weights
 * through a tensor source (tsrc.h) that maps the Hugging Face names llama.c asks for onto
 * llama.cpp's (rg_tsrc_gguf_llama_name) and dequantizes each tensor with rg_gguf_to_f32 at load.
 * The rest of the load (backend, weights into the compute dtype, step arena) is decoder.c's
 * rg_decoder_init, as for a safetensors directory.
 *
 * RoPE layout: llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the
 * rows of attn_q / attn_k of "llama" models so that each head's rotate_half pairs (i, i + hd/2)
 * become adjacent pairs (2i, 2i + 1), which its RoPE (mode 0) rotates; the source therefore sets
 * rope_interleaved and llama.c rotates adjacent pairs. Attention scores are the same as HF's
 * (q and k are permuted alike within each head, v is not permuted). "qwen2" is converted
 * unpermuted and run with NEOX RoPE by llama.cpp: rotate_half here too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct gguf_src {
	const rg_gguf *g;
	const char *path;
} gguf_src;

static const rg_gguf_tensor *src_find(const gguf_src *s, const char *hf)
{
	char buf[160];

	if (!rg_tsrc_gguf_llama_name(hf, buf, sizeof(buf)))
		return NULL;
	return rg_gguf_find(s->g, buf);
}

static bool gguf_shape(void *ctx, const char *name, int *ndim, int64_t shape[RG_TSRC_MAX_DIMS])
{
	const rg_gguf_tensor *t = src_find(ctx, name);

	if (!t || t->n_dims < 1 || t->n_dims > RG_TSRC_MAX_DIMS)
		return false;
	*ndim = t->n_dims;
	for (int i = 0; i < t->n_dims; i++) /* ggml's ne[] is innermost first: reverse it */
		shape[i] = t->ne[t->n_dims - 1 - i];
	return true;
}

static rg_status gguf_read(void *ctx, const char *name, float *dst)
{
	const gguf_src *s = ctx;
	const rg_gguf_tensor *t = src_find(s, name);
	rg_status st;

	if (!t)
		return rg_errorf(RG_ERR_FORMAT, "%s: missing tensor for %s", s->path, name);
	if ((st = rg_gguf_to_f32(t, dst)) != RG_OK)
		return rg_error_wrap(st, "%s", s->path);
	return RG_OK;
}

/* <arch>.<key> as an int in [lo, hi]; absent: def, or RG_ERR_FORMAT when required. */
static rg_status meta_int(const rg_gguf *g, const char *path, const char *arch, const char *key,
			  bool required, int def, int lo, int hi, int *v)
{
	char k[128];
	int64_t x;
	rg_status s;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	if (!rg_gguf_has(g, k)) {
		if (!required) {
			*v = def;
			return RG_OK;
		}
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s is missing", path, k);
	}
	if ((s = rg_gguf_get_i64(g, k, &x)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (x < lo || x > hi)
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s = %lld is outside [%d, %d]", path, k,
				 (long long)x, lo, hi);
	*v = (int)x;
	return RG_OK;
}

static rg_status meta_f32(const rg_gguf *g, const char *path, const char *arch, const char *key,
			  float def, float lo, float hi, double *v)
{
	char k[128];
	float x = def;
	rg_status s;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	if (rg_gguf_has(g, k) && (s = rg_gguf_get_f32(g, k, &x)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (!(x >= lo && x <= hi))
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s = %g is outside [%g, %g]", path, k,
				 (double)x, (double)lo, (double)hi);
	*v = x;
	return RG_OK;
}

/* The decoder configuration of a llama / qwen2 GGUF (model.h rg_decoder_config). */
static rg_status gguf_hparams(const rg_gguf *g, const char *path, const char *arch,
			      rg_decoder_config *c)
{
	const bool qwen2 = !strcmp(arch, "qwen2");
	uint64_t n_vocab = 0;
	int rope_dim = 0, experts = 0;
	char k[128];
	rg_status s;

	memset(c, 0, sizeof(*c));
	snprintf(c->model_type, sizeof(c->model_type), "%s", arch);
	if ((s = meta_int(g, path, arch, "block_count", true, 0, 1, 1 << 16, &c->num_hidden_layers)) ||
	    (s = meta_int(g, path, arch, "embedding_length", true, 0, 1, 1 << 20, &c->hidden_size)) ||
	    (s = meta_int(g, path, arch, "feed_forward_length", true, 0, 1, 1 << 24,
			  &c->intermediate_size)) ||
	    (s = meta_int(g, path, arch, "attention.head_count", true, 0, 1, 1 << 16,
			  &c->num_attention_heads)) ||
	    (s = meta_int(g, path, arch, "attention.head_count_kv", false, c->num_attention_heads, 1,
			  c->num_attention_heads, &c->num_key_value_heads)) ||
	    (s = meta_int(g, path, arch, "context_length", false, 2048, 2, 1 << 24,
			  &c->max_position_embeddings)) ||
	    (s = meta_f32(g, path, arch, "rope.freq_base", 10000.f, 1e-6f, 1e12f, &c->rope_theta)) ||
	    (s = meta_f32(g, path, arch, "attention.layer_norm_rms_epsilon", 1e-5f, 0.f, 1.f,
			  &c->norm_eps)) ||
	    (s = meta_int(g, path, arch, "expert_count", false, 0, 0, 1 << 16, &experts)))
		return s;
	if (experts > 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s.expert_count = %d: mixture-of-experts layers are not "
				 "supported",
				 path, arch, experts);
	if (c->num_attention_heads % c->num_key_value_heads)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
				 path, arch, c->num_attention_heads, c->num_key_value_heads);
	if (c->hidden_size % c->num_attention_heads)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: %s.embedding_length %d is not divisible by head_count %d",
				 path, arch, c->hidden_size, c->num_attention_heads);
	if ((s = meta_int(g, path, arch, "attention.key_length", false,
			  c->hidden_size / c->num_attention_heads, 2, 1024, &c->head_dim)) ||
	    (s = meta_int(g, path, arch, "rope.dimension_count", false, c->head_dim, 1, 1024, &rope_dim)))
		return s;
	if (c->head_dim % 2)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s: head_dim %d must be even", path,
				 c->head_dim);
	if (rope_dim != c->head_dim)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s.rope.dimension_count %d != head_dim %d: partial RoPE is not "
				 "supported",
				 path, arch, rope_dim, c->head_dim);
	snprintf(k, sizeof(k), "%s.rope.scaling.type", arch);
	if (rg_gguf_has(g, k)) {
		const char *t;

		if ((s = rg_gguf_get_str(g, k, &t, NULL)) != RG_OK)
			return rg_error_wrap(s, "%s", path);
		if (strcmp(t, "none"))
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: %s = \"%s\": RoPE scaling is not supported for GGUF",
					 path, k, t);
	}
	if (rg_gguf_find(g, "rope_freqs.weight"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: tensor rope_freqs.weight (Llama 3.1 RoPE frequency factors) is "
				 "not supported",
				 path);
	if ((s = rg_gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &n_vocab)) != RG_OK)
		return rg_error_wrap(s, "%s: the vocabulary size comes from tokenizer.ggml.tokens",
				     path);
	if (n_vocab < 1 || n_vocab > (1u << 24))
		return rg_errorf(RG_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path,
				 (unsigned long long)n_vocab);
	c->vocab_size = (int)n_vocab;
	c->hidden_act = RG_ACT_NONE; /* SwiGLU: rg_op_silu_mul */
	c->act_name = "silu";
	c->attention_bias = qwen2;
	c->tie_word_embeddings = rg_gguf_find(g, "output.weight") == NULL;
	c->bos_token_id = c->eos_token_id = -1;
	{
		int64_t v;

		if (rg_gguf_has(g, "tokenizer.ggml.bos_token_id") &&
		    rg_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) == RG_OK && v >= 0 &&
		    v < c->vocab_size)
			c->bos_token_id = (int)v;
		if (rg_gguf_has(g, "tokenizer.ggml.eos_token_id")) {
			if ((s = rg_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v)) != RG_OK)
				return rg_error_wrap(s, "%s", path);
			if (v < 0 || v >= c->vocab_size)
				return rg_errorf(RG_ERR_FORMAT,
						 "%s: tokenizer.ggml.eos_token_id %lld is outside the "
						 "vocabulary [0, %d)",
						 path, (long long)v, c->vocab_size);
			c->eos_token_id = (int)v;
		}
	}
	return RG_OK;
}

/* The byte-level BPE tokenizer of tokenizer.ggml.* (model "gpt2"). */
static rg_status gguf_tokenizer(const rg_gguf *g, const char *path, const rg_decoder_config *c,
				rg_tokenizer **out)
{
	const char *model, *pre = NULL;
	const char **toks = NULL, **merges = NULL;
	size_t *tlen = NULL, *mlen = NULL;
	int32_t *types = NULL;
	uint64_t n = 0, nm = 0, nt = 0;
	bool add_bos = false;
	rg_status s;

	*out = NULL;
	if (!rg_gguf_has(g, "tokenizer.ggml.model"))
		return rg_errorf(RG_ERR_FORMAT, "%s: no tokenizer.ggml.model", path);
	if ((s = rg_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (strcmp(model, "gpt2"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: tokenizer.ggml.model \"%s\" is not supported (\"gpt2\": "
				 "byte-level BPE; \"llama\" is SentencePiece, not implemented for "
				 "GGUF)",
				 path, model);
	if (rg_gguf_has(g, "tokenizer.ggml.pre") &&
	    (s = rg_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (rg_gguf_has(g, "tokenizer.ggml.add_bos_token") &&
	    (s = rg_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if ((s = rg_gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &n)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (rg_gguf_has(g, "tokenizer.ggml.merges") &&
	    (s = rg_gguf_get_arr(g, "tokenizer.ggml.merges", NULL, &nm)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (rg_gguf_has(g, "tokenizer.ggml.token_type") &&
	    (s = rg_gguf_get_arr(g, "tokenizer.ggml.token_type", NULL, &nt)) != RG_OK)
		return rg_error_wrap(s, "%s", path);
	if (nt && nt != n)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: tokenizer.ggml.token_type has %llu entries, tokens %llu", path,
				 (unsigned long long)nt, (unsigned long long)n);
	if (nm > (1u << 24))
		return rg_errorf(RG_ERR_FORMAT, "%s: %llu merges", path, (unsigned long long)nm);
	toks = malloc(n * sizeof(*toks));
	tlen = malloc(n * sizeof(*tlen));
	merges = malloc((nm ? nm : 1) * sizeof(*merges));
	mlen = malloc((nm ? nm : 1) * sizeof(*mlen));
	types = nt ? malloc(n * sizeof(*types)) : NULL;
	if (!toks || !tlen || !merges || !mlen || (nt && !types)) {
		s = rg_errorf(RG_ERR_OOM, "out of host memory for the GGUF vocabulary");
		goto out_free;
	}
	for (uint64_t i = 0; i < n; i++)
		if ((s = rg_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &toks[i], &tlen[i])) != RG_OK)
			goto out_wrap;
	for (uint64_t i = 0; i < nm; i++)
		if ((s = rg_gguf_arr_str(g, "tokenizer.ggml.merges", i, &merges[i], &mlen[i])) !=
		    RG_OK)
			goto out_wrap;
	for (uint64_t i = 0; i < nt; i++)
		if ((s = rg_gguf_arr_i32(g, "tokenizer.ggml.token_type", i, &types[i])) != RG_OK)
			goto out_wrap;
	s = rg_tokenizer_from_bpe_arrays((const char *const *)toks, tlen, (int)n,
					 (const char *const *)merges, mlen, (int)nm, types, pre,
					 add_bos ? c->bos_token_id : -1, c->eos_token_id, add_bos,
					 out);
out_wrap:
	if (s != RG_OK)
		s = rg_error_wrap(s, "%s: tokenizer", path);
out_free:
	free(toks);
	free(tlen);
	free(merges);
	free(mlen);
	free(types);
	return s;
}

rg_status rg_gguf_model_load(rg_model *m, const char *path, const rg_model_params *p)
{
	rg_gguf *g = NULL;
	const char *arch;
	gguf_src gs;
	rg_tsrc src;
	rg_status s;

	if ((s = rg_gguf_open(path, &g)) != RG_OK)
		return s;
	if (!rg_gguf_has(g, "general.architecture")) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: no general.architecture", path);
		goto out_close;
	}
	if ((s = rg_gguf_get_str(g, "general.architecture", &arch, NULL)) != RG_OK)
		goto out_close;
	if (strcmp(arch, "llama") && strcmp(arch, "qwen2")) {
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s: general.architecture \"%s\" is not supported for GGUF (llama, "
			      "qwen2)",
			      path, arch);
		goto out_close;
	}
	m->arch = rg_arch_find(arch);
	if (!m->arch) {
		s = rg_errorf(RG_ERR_INTERNAL, "no architecture registered for %s", arch);
		goto out_close;
	}
	if ((s = gguf_hparams(g, path, arch, &m->dec.cfg)) != RG_OK ||
	    (s = gguf_tokenizer(g, path, &m->dec.cfg, &m->tok)) != RG_OK)
		goto out_close;
	if (m->dec.cfg.eos_token_id >= 0)
		m->gen_eos[m->n_gen_eos++] = m->dec.cfg.eos_token_id;
	if (rg_gguf_has(g, "tokenizer.chat_template")) {
		const char *t;

		if ((s = rg_gguf_get_str(g, "tokenizer.chat_template", &t, NULL)) != RG_OK)
			goto out_close;
		if (!(m->chat_template = strdup(t))) {
			s = rg_errorf(RG_ERR_OOM, "out of host memory");
			goto out_close;
		}
	}
	gs.g = g;
	gs.path = path;
	memset(&src, 0, sizeof(src));
	src.what = path;
	src.ctx = &gs;
	src.shape = gguf_shape;
	src.read_f32 = gguf_read;
	src.rope_interleaved = !strcmp(arch, "llama");
	s = rg_decoder_init(m, p, &src);
out_close:
	rg_gguf_close(g); /* the weights live on the backend now */
	return s;
}
