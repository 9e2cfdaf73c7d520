/* Decoders from a GGUF file (llama.cpp's format, src/core/gguf.h), format-generic: the
 * architecture that serves general.architecture (rg_arch_find_gguf) reads its hyper-parameters
 * from the <arch>.* metadata with its hparams hook (over an rg_cfg_src, as from config.json), the
 * tokenizer comes from tokenizer.ggml.*, the chat template is kept, and the weights come through
 * a tensor source (tsrc.h) that maps the Hugging Face names the architecture asks for onto
 * llama.cpp's with the architecture's table (rg_arch.gguf, rg_tsrc_gguf_name) and dequantizes
 * each tensor with rg_gguf_to_f32 at load. The rest of the load (backend, weights into the
 * compute dtype, step arena) is decoder.c's rg_decoder_init, as for a safetensors directory.
 *
 * RoPE layout: llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the
 * rows of attn_q / attn_k of "llama" models so that each head's rotate_half pairs (i, i + hd/2)
 * become adjacent pairs (2i, 2i + 1), which its RoPE (mode 0) rotates; llama.c's table therefore
 * sets rope_interleaved and llama.c rotates adjacent pairs. Attention scores are the same as HF's
 * (q and k are permuted alike within each head, v is not permuted). "qwen2", "qwen3" and "phi3"
 * are converted unpermuted and run with NEOX RoPE by llama.cpp: rotate_half here too. */
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
	const rg_tensor_names *names; /* the architecture's table (rg_arch.gguf) */
} gguf_src;

static const rg_gguf_tensor *src_find(const gguf_src *s, const char *hf)
{
	char buf[160];

	if (!rg_tsrc_gguf_name(s->names, hf, buf, sizeof(buf)))
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

static bool gguf_raw(void *ctx, const char *name, int *type, const void **data, size_t *bytes)
{
	const rg_gguf_tensor *t = src_find(ctx, name);

	/* the stored bytes of a quantized or F16 tensor (a backend keeps F16 GEMM weights as they
	 * are where it has a kernel for them: layers.c) */
	if (!t || t->type == RG_GGUF_F32 || t->type == RG_GGUF_BF16)
		return false;
	*type = (int)t->type;
	*data = t->data;
	*bytes = t->nbytes;
	return true;
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
	rg_decoder_config *c = &m->dec.cfg;
	rg_gguf *g = NULL;
	const char *arch;
	rg_cfg_src cs = {0};
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
	m->arch = rg_arch_find_gguf(arch);
	if (!m->arch || !m->arch->gguf || m->arch->kind != RG_MODEL_DECODER) {
		m->arch = NULL;
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s: general.architecture \"%s\" is not supported for GGUF (%s)", path,
			      arch, rg_arch_gguf_names());
		goto out_close;
	}
	if ((s = rg_arch_check(m->arch)) != RG_OK)
		goto out_close;
	cs.path = path;
	cs.gguf = g;
	cs.gguf_arch = arch;
	if ((s = rg_model_hparams(m, &cs)) != RG_OK ||
	    (s = gguf_tokenizer(g, path, c, &m->tok)) != RG_OK)
		goto out_close;
	if (c->eos_token_id >= 0)
		m->gen_eos[m->n_gen_eos++] = c->eos_token_id;
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
	gs.names = m->arch->gguf;
	memset(&src, 0, sizeof(src));
	src.what = path;
	src.ctx = &gs;
	src.shape = gguf_shape;
	src.read_f32 = gguf_read;
	src.raw = gguf_raw;
	src.rope_interleaved = m->arch->gguf->rope_interleaved;
	src.cfg = &cs;
	s = rg_decoder_init(m, p, &src);
out_close:
	rg_gguf_close(g); /* the weights live on the backend now */
	return s;
}
