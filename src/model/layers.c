/* Shared layer builders of the decoder architectures (layers.h). */
#include "model/layers.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/gguf.h"

rg_status rg_layer_upload_q8_0(rg_model *m, const float *w, int64_t rows, int64_t k,
			       void **dst)
{
	const size_t bytes = (size_t)rows * (size_t)(k / 32) * 34;
	void *q;
	rg_status s;

	if (!(q = malloc(bytes)))
		return rg_errorf(RG_ERR_OOM, "out of host memory for %zu bytes of Q8_0 blocks",
				 bytes);
	rg_gguf_quantize_q8_0(w, rows * k, q);
	if ((s = rg_backend_alloc(m->be, bytes, dst)) == RG_OK &&
	    (s = rg_backend_upload(m->be, *dst, q, bytes)) == RG_OK &&
	    (s = rg_op_prepare_qweight(m->be, *dst, RG_GGUF_Q8_0, (int)rows, (int)k)) == RG_OK)
		rg_model_count_weight(m, bytes, true);
	free(q);
	return s;
}

/* rg_tsrc_raw for a weight that may stay in its stored bytes: a quantized tensor, or an F16 one
 * unless m->quantize asks for Q8_0 (F16 is a float storage: it is quantized at load then, as a
 * checkpoint's f32 / bf16 weights are). */
static bool stored(const rg_model *m, const rg_tsrc *src, const char *const *prefixes,
		   const char *name, int64_t d0, int64_t d1, int *type, const void **data,
		   size_t *bytes)
{
	return rg_tsrc_raw(src, prefixes, name, d0, d1, type, data, bytes) &&
	       !(*type == RG_GGUF_F16 && m->quantize != RG_QUANTIZE_NONE);
}

bool rg_layer_quantizes(const rg_model *m, int64_t rows, int64_t k)
{
	return m->quantize == RG_QUANTIZE_Q8_0 && k > 0 && k % 32 == 0 && k <= INT32_MAX &&
	       rows > 0 && rows <= INT32_MAX && rg_backend_qtype_supported(m->be, RG_GGUF_Q8_0);
}

/* rg_model_params.quantize Q8_0 for a stacked GEMM weight none of whose parts the file stores
 * quantized (issue 30 item 1): each part read as f32 (rg_tsrc_get), stacked, quantized and
 * uploaded by rg_layer_upload_q8_0. Returns false, touching nothing, when the weight is to be
 * loaded as before (no quantize, K % 32 != 0, a part stored quantized: its own blocks or
 * dequantized, never requantized); true with *s the outcome otherwise. */
static bool quantize_stacked(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			     const char *const names[], const int64_t d0[], int k, int64_t d1,
			     void **dst, rg_status *s)
{
	int64_t rows = 0, off = 0;
	float *all = NULL, *t;

	for (int i = 0; i < k; i++) {
		int type;
		const void *data;
		size_t bytes;

		if (rg_tsrc_raw(src, prefixes, names[i], d0[i], d1, &type, &data, &bytes) &&
		    type != RG_GGUF_F16) /* stored quantized: its own blocks, never requantized */
			return false;
		rows += d0[i];
	}
	if (!rg_layer_quantizes(m, rows, d1))
		return false;
	if (k > 1 && !(all = malloc((size_t)rows * (size_t)d1 * sizeof(float)))) {
		*s = rg_errorf(RG_ERR_OOM, "out of host memory for %s", names[0]);
		return true;
	}
	for (int i = 0; i < k; i++) {
		if ((*s = rg_tsrc_get(src, prefixes, names[i], d0[i], d1, &t)) != RG_OK) {
			free(all);
			return true;
		}
		if (k == 1) {
			all = t;
			break;
		}
		memcpy(all + off, t, (size_t)d0[i] * (size_t)d1 * sizeof(float));
		off += d0[i] * d1;
		free(t);
	}
	*s = rg_layer_upload_q8_0(m, all, rows, d1, dst);
	free(all);
	return true;
}

/* The quantized twin of rg_layer_load_stacked for a GEMM weight (issue 30): when m keeps
 * quantized weights and every names[i] is stored in one ggml type the backend reads as it is
 * (rg_backend_qtype_supported), their blocks are copied row after row (a stacked weight's rows
 * are the tensors' rows in order, as rg_layer_load_stacked stacks the f32 values) into one
 * backend buffer *dst declared with rg_op_prepare_qweight; when none of them is stored
 * quantized and m->quantize asks for it, they are quantized here (quantize_stacked). Returns
 * false, touching nothing,
 * when the weight is to be loaded as f32 instead; true when it took the weight, with *s the
 * outcome (on an error *dst may be set: its owner frees it, as after rg_dec_upload). */
static bool load_stacked_quant(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       const char *const names[], const int64_t d0[], int k, int64_t d1,
			       void **dst, rg_status *s)
{
	enum { MAX_PARTS = 8, MAX_RUNS = 4 /* rg_op_prepare_qweight_parts: parts of one type */ };
	const void *data[MAX_PARTS];
	size_t bytes[MAX_PARTS], total = 0, off = 0;
	int64_t rows = 0;
	int types[MAX_PARTS], prow[MAX_PARTS], n_runs = 0;
	bool mixed = false;

	if (d1 <= 0 || d1 % 32 || d1 > INT32_MAX || k > MAX_PARTS)
		return false;
	if (!m->keep_quant || !src->raw)
		return quantize_stacked(m, src, prefixes, names, d0, k, d1, dst, s);
	for (int i = 0; i < k; i++) {
		int t;

		if (!stored(m, src, prefixes, names[i], d0[i], d1, &t, &data[i], &bytes[i]))
			return quantize_stacked(m, src, prefixes, names, d0, k, d1, dst, s);
		if (!rg_backend_qtype_supported(m->be, t))
			return false;
		/* parts of one type run together; a new type starts a run (Q4_K_M: Q4_K Q and K,
		 * Q6_K V on some layers) */
		if (n_runs && types[n_runs - 1] == t) {
			prow[n_runs - 1] += (int)d0[i];
		} else {
			mixed = n_runs > 0;
			types[n_runs] = t;
			prow[n_runs++] = (int)d0[i];
		}
		total += bytes[i];
		rows += d0[i];
	}
	if (rows > INT32_MAX || n_runs > MAX_RUNS ||
	    (mixed && !rg_backend_qparts_supported(m->be)))
		return false;
	if ((*s = rg_backend_alloc(m->be, total, dst)) != RG_OK)
		return true;
	for (int i = 0; i < k && *s == RG_OK; off += bytes[i], i++)
		*s = rg_backend_upload(m->be, (char *)*dst + off, data[i], bytes[i]);
	if (*s == RG_OK)
		*s = mixed ? rg_op_prepare_qweight_parts(m->be, *dst, n_runs, types, prow, (int)d1)
			   : rg_op_prepare_qweight(m->be, *dst, types[0], (int)rows, (int)d1);
	if (*s == RG_OK)
		rg_model_count_weight(m, total, true);
	return true;
}

/* A quantized LM head: the file's head tensor when it has one, else (tied) a copy of the
 * embedding table's blocks -- the gather reads the table as f32, the head GEMM streams the
 * blocks (a decode step's largest read). true with *s as load_stacked_quant and *tied whether
 * the head is the embedding (absent, or byte-equal to it; a float head quantized by
 * rg_model_params.quantize: false, its blocks are its own); false to load it as f32. */
static bool load_head_quant(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			    const char *embed_name, const char *const *head_prefixes,
			    const char *head_name, void **head_d, bool *tied, rg_status *s)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t rows[1] = {c->vocab_size};
	const void *hd, *ed;
	size_t hb, eb;
	int ht, et;
	const bool has_e = stored(m, src, prefixes, embed_name, c->vocab_size, c->hidden_size,
				  &et, &ed, &eb);

	if (!m->keep_quant && m->quantize == RG_QUANTIZE_NONE)
		return false;
	if (rg_tsrc_has(src, head_prefixes, head_name) || !c->tie_word_embeddings) {
		const char *const names[1] = {head_name};

		if (!stored(m, src, head_prefixes, head_name, c->vocab_size, c->hidden_size, &ht,
			    &hd, &hb)) {
			/* a float head to quantize (rg_model_params.quantize); absent: the caller
			 * reports it or loads a head-less embedding model */
			*tied = false;
			return rg_tsrc_has(src, head_prefixes, head_name) &&
			       quantize_stacked(m, src, head_prefixes, names, rows, 1,
						c->hidden_size, head_d, s);
		}
		*tied = has_e && et == ht && eb == hb && !memcmp(ed, hd, hb);
		return load_stacked_quant(m, src, head_prefixes, names, rows, 1, c->hidden_size,
					  head_d, s);
	} else {
		const char *const names[1] = {embed_name};

		*tied = true;
		if (!has_e) /* a float table: its quantized copy serves the head (quantize) */
			return quantize_stacked(m, src, prefixes, names, rows, 1, c->hidden_size,
						head_d, s);
		return load_stacked_quant(m, src, prefixes, names, rows, 1, c->hidden_size,
					  head_d, s);
	}
}

rg_status rg_layer_load_embed_head(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				   const char *embed_name, const char *const *head_prefixes,
				   const char *head_name, bool gather_only, void **embed_d,
				   void **head_d)
{
	rg_decoder_config *c = &m->dec.cfg;
	const int64_t V = c->vocab_size, H = c->hidden_size;
	const size_t n = (size_t)V * (size_t)H;
	float *e = NULL, *h = NULL;
	bool tied = false;
	rg_status s;

	*embed_d = *head_d = NULL;
	if (load_head_quant(m, src, prefixes, embed_name, head_prefixes, head_name, head_d, &tied,
			    &s)) {
		int et;
		const void *ed;
		size_t eb;

		if (s != RG_OK)
			return s;
		c->tie_word_embeddings = tied;
		if (tied && gather_only && rg_backend_device(m->be) == RG_DEVICE_CPU &&
		    stored(m, src, prefixes, embed_name, V, H, &et, &ed, &eb)) {
			/* the CPU gather dequantizes the rows it reads from the blocks themselves
			 * (rg_cpu_gather_rows_quant): one copy of the table, in the file's bytes */
			*embed_d = *head_d;
			*head_d = NULL;
			m->dec.lm_head = *embed_d;
			return RG_OK;
		}
		/* else the embedding reads f32 rows: the table itself is dequantized too (or,
		 * quantized at load, stays in the compute dtype: the head is its Q8_0 copy) */
		if ((s = rg_tsrc_get(src, prefixes, embed_name, V, H, &e)) != RG_OK ||
		    (s = rg_dec_upload(m, e, n, true, embed_d)) != RG_OK)
			return s;
		m->dec.lm_head = *head_d;
		return RG_OK;
	}
	if ((s = rg_tsrc_get(src, prefixes, embed_name, V, H, &e)) != RG_OK)
		return s;
	if (m->dec.embeds && !c->tie_word_embeddings &&
	    !rg_tsrc_has(src, head_prefixes, head_name)) {
		/* an embedding checkpoint saved from the base model (Qwen2Model, MistralModel)
		 * has no LM head: it embeds, rg_model_step refuses logits */
		m->dec.lm_head = NULL;
		return rg_dec_upload(m, e, n, true, embed_d);
	}
	if ((rg_tsrc_has(src, head_prefixes, head_name) || !c->tie_word_embeddings) &&
	    (s = rg_tsrc_get(src, head_prefixes, head_name, V, H, &h)) != RG_OK) {
		free(e);
		return s;
	}
	if (h && !memcmp(h, e, n * sizeof(float))) { /* a stored copy of the tied table */
		free(h);
		h = NULL;
	}
	c->tie_word_embeddings = h == NULL;
	if ((s = rg_dec_upload(m, e, n, true, embed_d)) != RG_OK) {
		free(h);
		return s;
	}
	if (!h) {
		m->dec.lm_head = *embed_d; /* unprepared: the embedding gather reads it too */
		return RG_OK;
	}
	if ((s = rg_dec_upload(m, h, n, true, head_d)) != RG_OK ||
	    (s = rg_op_prepare_weight(m->be, *head_d, (int)V, (int)H)) != RG_OK)
		return s;
	m->dec.lm_head = *head_d;
	return RG_OK;
}

rg_status rg_layer_load_stacked(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				const char *const names[], const int64_t d0[], int k, int64_t d1,
				bool prepare, void **dst)
{
	const size_t cols = (size_t)(d1 < 0 ? 1 : d1);
	size_t rows = 0, off = 0;
	float *all, *t;
	rg_status s;

	if (prepare && load_stacked_quant(m, src, prefixes, names, d0, k, d1, dst, &s))
		return s;
	for (int i = 0; i < k; i++)
		rows += (size_t)d0[i];
	if (k == 1) {
		if ((s = rg_tsrc_get(src, prefixes, names[0], d0[0], d1, &all)) != RG_OK)
			return s;
	} else {
		if (!(all = malloc(rows * cols * sizeof(float))))
			return rg_errorf(RG_ERR_OOM, "out of host memory for %s", names[0]);
		for (int i = 0; i < k; i++) {
			if ((s = rg_tsrc_get(src, prefixes, names[i], d0[i], d1, &t)) != RG_OK) {
				free(all);
				return s;
			}
			memcpy(all + off, t, (size_t)d0[i] * cols * sizeof(float));
			off += (size_t)d0[i] * cols;
			free(t);
		}
	}
	if ((s = rg_dec_upload(m, all, rows * cols, true, dst)) != RG_OK)
		return s;
	return prepare ? rg_op_prepare_weight(m->be, *dst, (int)rows, (int)cols) : RG_OK;
}

rg_status rg_layer_load_linear(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       const char *name, int64_t d0, int64_t d1, void **dst)
{
	const char *const names[1] = {name};
	const int64_t rows[1] = {d0};

	return rg_layer_load_stacked(m, src, prefixes, names, rows, 1, d1, true, dst);
}

rg_status rg_layer_load_vec(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			    const char *name, int64_t n, bool act, void **dst)
{
	float *t;
	rg_status s;

	if ((s = rg_tsrc_get(src, prefixes, name, n, -1, &t)) != RG_OK)
		return s;
	return rg_dec_upload(m, t, (size_t)n, act, dst);
}

/* ---------------------------------------------------------------- Llama-shaped block */

/* What the forward does not compute, refused by name (mixtures of experts, sliding windows,
 * other RoPE scalings, partial rotary, MLP biases). */
static rg_status refuse(const char *path, struct json_object *root, const char *type,
		       const rg_llama_hp_opts *o)
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
	if (on && !o->own_sliding_window)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: use_sliding_window = true: sliding-window attention is not "
				 "supported",
				 path);
	/* Mistral (and Llama-shaped configs) apply sliding_window whenever it is set; Qwen2 and
	 * Qwen3 only with use_sliding_window */
	if (strcmp(type, "qwen2") && strcmp(type, "qwen3") && !o->own_sliding_window &&
	    rg_cfg_has(root, "sliding_window"))
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

float *rg_layer_rope_inv_freq(const rg_decoder_config *c)
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

/* The GGUF-only checks of a Llama-shaped file (llama.cpp's metadata and tensors). */
static rg_status gguf_refuse(const rg_cfg_src *cf, const rg_decoder_config *c,
			     const rg_llama_hp_opts *o)
{
	const char *arch = cf->gguf_arch;
	int rope_dim = 0, experts = 0;
	char k[128];
	rg_status s;

	if ((s = rg_cfg_src_int(cf, "num_local_experts", "expert_count", false, 0, 0, 1 << 16,
				&experts)) ||
	    (s = rg_cfg_src_int(cf, "", "rope.dimension_count", false, c->head_dim, 1, 1024,
				&rope_dim)))
		return s;
	if (experts > 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s.expert_count = %d: mixture-of-experts layers are not "
				 "supported",
				 cf->path, arch, experts);
	if (rope_dim != c->head_dim)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s.rope.dimension_count %d != head_dim %d: partial RoPE is not "
				 "supported",
				 cf->path, arch, rope_dim, c->head_dim);
	if (o->own_rope_scaling)
		return RG_OK;
	snprintf(k, sizeof(k), "%s.rope.scaling.type", arch);
	if (rg_gguf_has(cf->gguf, k)) {
		const char *t;

		if ((s = rg_gguf_get_str(cf->gguf, k, &t, NULL)) != RG_OK)
			return rg_error_wrap(s, "%s", cf->path);
		if (strcmp(t, "none"))
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: %s = \"%s\": RoPE scaling is not supported for GGUF",
					 cf->path, k, t);
	}
	if (rg_gguf_find(cf->gguf, "rope_freqs.weight"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: tensor rope_freqs.weight (Llama 3.1 RoPE frequency factors) is "
				 "not supported",
				 cf->path);
	return RG_OK;
}

rg_status rg_layer_llama_hparams(rg_model *m, const rg_cfg_src *cf, const rg_llama_hp_opts *o)
{
	rg_decoder_config *c = &m->dec.cfg;
	const bool gguf = cf->root == NULL;
	const char *act = "silu", *path = cf->path;
	rg_status s;

	/* LlamaConfig's names and defaults; llama.cpp's keys (GGUF ties when output.weight is
	 * absent, whatever it says: the loader decides by the file, rg_layer_load_embed_head) */
	if ((s = rg_cfg_src_vocab_size(cf, &c->vocab_size)) ||
	    (s = rg_cfg_src_int(cf, "hidden_size", "embedding_length", true, 0, 1, 1 << 20,
				&c->hidden_size)) ||
	    (s = rg_cfg_src_int(cf, "num_attention_heads", "attention.head_count", true, 0, 1,
				1 << 16, &c->num_attention_heads)) ||
	    (s = rg_cfg_src_int(cf, "num_key_value_heads", "attention.head_count_kv", false,
				c->num_attention_heads, 1, c->num_attention_heads,
				&c->num_key_value_heads)) ||
	    (s = rg_cfg_src_int(cf, "num_hidden_layers", "block_count", true, 0, 1, 1 << 16,
				&c->num_hidden_layers)) ||
	    (s = rg_cfg_src_int(cf, "intermediate_size", "feed_forward_length", true, 0, 1,
				1 << 24, &c->intermediate_size)) ||
	    (s = rg_cfg_src_int(cf, "max_position_embeddings", "context_length", false, 2048,
				gguf ? 2 : 1, 1 << 24, &c->max_position_embeddings)) ||
	    (s = rg_cfg_src_double(cf, "rms_norm_eps", "attention.layer_norm_rms_epsilon",
				   gguf ? 1e-5 : 1e-6, 0.0, 1.0, &c->norm_eps)) ||
	    (s = rg_cfg_src_double(cf, "rope_theta", "rope.freq_base", 10000.0, 1e-6, 1e12,
				   &c->rope_theta)) ||
	    (s = rg_cfg_src_bool(cf, "tie_word_embeddings", NULL, gguf,
				 &c->tie_word_embeddings)) ||
	    (s = rg_cfg_src_bool(cf, "attention_bias", NULL, false, &c->attention_bias)) ||
	    (!gguf && (s = rg_cfg_str(path, cf->root, "hidden_act", "silu", &act))) ||
	    (s = rg_cfg_src_token_id(cf, "bos_token_id", "tokenizer.ggml.bos_token_id",
				     c->vocab_size, &c->bos_token_id)) ||
	    (s = rg_cfg_src_token_id(cf, "eos_token_id", "tokenizer.ggml.eos_token_id",
				     c->vocab_size, &c->eos_token_id)))
		return s;
	if (c->num_attention_heads % c->num_key_value_heads)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: num_attention_heads %d is not a multiple of num_key_value_heads "
				 "%d",
				 path, c->num_attention_heads, c->num_key_value_heads);
	if (rg_cfg_src_has(cf, "head_dim", "attention.key_length")) {
		if ((s = rg_cfg_src_int(cf, "head_dim", "attention.key_length", true, 0, 2, 1024,
					&c->head_dim)) != RG_OK)
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
	c->hidden_act = RG_ACT_NONE; /* the MLP's silu * up is rg_op_act_mul */
	if (o->qkv_bias)
		c->attention_bias = true;
	if (gguf)
		return gguf_refuse(cf, c, o);
	if ((s = refuse(path, cf->root, c->model_type, o)) != RG_OK)
		return s;
	return o->own_rope_scaling ? RG_OK : rope_scaling(path, cf->root, c);
}


rg_status rg_layer_load_attn(rg_model *m, const rg_tsrc *src, const char *const *prefixes, int l,
			     bool qk_norm, rg_attn_w *a)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t H = c->hidden_size, hd = c->head_dim;
	const int64_t qd = (int64_t)c->num_attention_heads * hd;
	const int64_t kvd = (int64_t)c->num_key_value_heads * hd;
	const int64_t rows[3] = {qd, kvd, kvd};
	char n[7][96];
	const char *const w[3] = {n[0], n[1], n[2]}, *const b[3] = {n[4], n[5], n[6]};
	static const char *const proj[3] = {"q", "k", "v"};
	rg_status s;

	for (int i = 0; i < 3; i++) {
		snprintf(n[i], sizeof(n[i]), "layers.%d.self_attn.%s_proj.weight", l, proj[i]);
		snprintf(n[4 + i], sizeof(n[4 + i]), "layers.%d.self_attn.%s_proj.bias", l, proj[i]);
	}
	snprintf(n[3], sizeof(n[3]), "layers.%d.self_attn.o_proj.weight", l);
	if ((s = rg_layer_load_stacked(m, src, prefixes, w, rows, 3, H, true, &a->qkv_w)) ||
	    (s = rg_layer_load_linear(m, src, prefixes, n[3], H, qd, &a->o_w)) ||
	    (c->attention_bias &&
	     (s = rg_layer_load_stacked(m, src, prefixes, b, rows, 3, -1, false, &a->qkv_b))))
		return s;
	if (!qk_norm)
		return RG_OK;
	snprintf(n[0], sizeof(n[0]), "layers.%d.self_attn.q_norm.weight", l);
	snprintf(n[1], sizeof(n[1]), "layers.%d.self_attn.k_norm.weight", l);
	if ((s = rg_layer_load_vec(m, src, prefixes, n[0], hd, false, (void **)&a->q_norm)) ||
	    (s = rg_layer_load_vec(m, src, prefixes, n[1], hd, false, (void **)&a->k_norm)))
		return s;
	return RG_OK;
}

rg_status rg_layer_load_swiglu(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       int l, rg_swiglu_w *w)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int64_t H = c->hidden_size, I = c->intermediate_size, rows[2] = {I, I};
	char g[96], u[96], d[96];
	const char *const gu[2] = {g, u};
	rg_status s;

	snprintf(g, sizeof(g), "layers.%d.mlp.gate_proj.weight", l);
	snprintf(u, sizeof(u), "layers.%d.mlp.up_proj.weight", l);
	snprintf(d, sizeof(d), "layers.%d.mlp.down_proj.weight", l);
	if ((s = rg_layer_load_stacked(m, src, prefixes, gu, rows, 2, H, true, &w->gate_up_w)) ||
	    (s = rg_layer_load_linear(m, src, prefixes, d, H, I, &w->down_w)))
		return s;
	return RG_OK;
}

void rg_layer_free_attn(rg_model *m, rg_attn_w *a)
{
	rg_backend_dealloc(m->be, a->qkv_w);
	rg_backend_dealloc(m->be, a->qkv_b);
	rg_backend_dealloc(m->be, a->q_norm);
	rg_backend_dealloc(m->be, a->k_norm);
	rg_backend_dealloc(m->be, a->o_w);
	memset(a, 0, sizeof(*a));
}

void rg_layer_free_swiglu(rg_model *m, rg_swiglu_w *w)
{
	rg_backend_dealloc(m->be, w->gate_up_w);
	rg_backend_dealloc(m->be, w->down_w);
	memset(w, 0, sizeof(*w));
}

void rg_layer_free_rope(rg_model *m, rg_rope_w *r)
{
	rg_backend_dealloc(m->be, r->inv_freq);
	rg_backend_dealloc(m->be, r->inv_freq_long);
	memset(r, 0, sizeof(*r));
}

rg_status rg_layer_rope_table(rg_model *m, const rg_dec_fwd *f, const rg_rope_w *r)
{
	float *rope = m->dec.a[RG_D_ROPE];

	if (!r->inv_freq_long && r->mscale == 1.f)
		return rg_op_rope_table(m->be, f->positions, f->n, r->inv_freq, m->dec.cfg.head_dim,
					rope);
	return rg_op_rope_table_scaled(m->be, f->positions, f->n, r->inv_freq, r->inv_freq_long,
				       r->long_from, r->mscale, m->dec.cfg.head_dim, rope);
}

rg_status rg_layer_attn_rope(rg_model *m, rg_dec_fwd *f, int l, const rg_attn_w *a,
			     const void *x, float eps, void *out)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int H = c->hidden_size, n = f->n, hd = c->head_dim;
	const int qd = c->num_attention_heads * hd, kvd = c->num_key_value_heads * hd;
	void *qkv = m->dec.a[RG_D_QKV], *ctx = m->dec.a[RG_D_CTX];
	rg_status s;

	if ((s = rg_op_gemm_bias_act(m->be, x, a->qkv_w, a->qkv_b, qkv, n, qd + 2 * kvd, H,
				     RG_ACT_NONE)) != RG_OK ||
	    (a->q_norm &&
	     (s = rg_op_qk_norm(m->be, qkv, qd + 2 * kvd, n, c->num_attention_heads,
				c->num_key_value_heads, hd, a->q_norm, a->k_norm, eps)) != RG_OK) ||
	    /* q's and k's heads turned, k and v into the cache: one launch */
	    (s = rg_dec_rope_kv_write(m, f, l, qkv, m->dec.a[RG_D_ROPE])) != RG_OK ||
	    (s = rg_dec_attend(m, f, l, qkv, 1.f / sqrtf((float)hd), ctx)) != RG_OK)
		return s;
	return rg_op_gemm(m->be, ctx, a->o_w, out, n, H, qd);
}

rg_status rg_s2s_sub_in(rg_model *m, int n, rg_s2s_rs *rs, const float *g, const float *b,
			const void **x)
{
	rg_status s = RG_OK;

	if (rs->pre) {
		s = rg_op_add_norm(m->be, rs->pend, rs->r, g, b, (float)m->dec.cfg.norm_eps,
				   rs->norm, n, m->dec.cfg.hidden_size, rs->y);
		rs->pend = NULL;
	}
	*x = rs->pre ? rs->y : rs->r;
	return s;
}

rg_status rg_s2s_sub_out(rg_model *m, int n, rg_s2s_rs *rs, const void *delta, const float *g,
			 const float *b)
{
	void *t;
	rg_status s;

	if (rs->pre) {
		rs->pend = delta;
		return RG_OK;
	}
	s = rg_op_add_norm(m->be, delta, rs->r, g, b, (float)m->dec.cfg.norm_eps, rs->norm, n,
			   m->dec.cfg.hidden_size, rs->y);
	t = rs->r;
	rs->r = rs->y;
	rs->y = t;
	return s;
}

rg_status rg_s2s_stack_out(rg_model *m, int n, rg_s2s_rs *rs, const float *g, const float *b,
			   void **out)
{
	const void *x;
	rg_status s = RG_OK;

	if (rs->pre)
		s = rg_s2s_sub_in(m, n, rs, g, b, &x);
	*out = rs->pre ? rs->y : rs->r;
	return s;
}

rg_status rg_s2s_cross_kv(rg_model *m, const void *enc, int n, int l, const void *w,
			  const void *b, const int32_t *slots)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int kvd = c->num_key_value_heads * c->head_dim;
	void *kv = m->dec.a[RG_D_QKV];
	rg_status s;

	if ((s = rg_op_gemm_bias_act(m->be, enc, w, b, kv, n, 2 * kvd, c->hidden_size,
				     RG_ACT_NONE)) != RG_OK ||
	    (s = rg_dec_cross_write(m, l, kv, 2 * kvd, slots, n)) != RG_OK)
		return rg_error_wrap(s, "cross K / V of decoder layer %d", l);
	return RG_OK;
}

rg_status rg_layer_ffn_swiglu(rg_model *m, int n, const rg_swiglu_w *w, const void *x,
			      void *out)
{
	const int H = m->dec.cfg.hidden_size, I = m->dec.cfg.intermediate_size;
	void *inter = m->dec.a[RG_D_INTER], *mlp = m->dec.a[RG_D_MLP];
	rg_status s;

	if ((s = rg_op_gemm(m->be, x, w->gate_up_w, inter, n, 2 * I, H)) != RG_OK)
		return s;
	/* SiLU(gate) * up folded into the down projection's loads where the backend can (CUDA
	 * decode rows), else act_mul into mlp, then the GEMM */
	return rg_op_act_mul_gemm(m->be, inter, w->down_w, out, n, H, I, RG_ACT_SILU, mlp);
}
