/* A tensor source: where an architecture's load hook (model.h rg_arch) gets its weights, by
 * name, as f32 with a shape, whatever the file format. safetensors implements it (rg_tsrc_from_st,
 * for every kind); a GGUF
 * reader plugs in the same way (gguf_model.c: a source that maps the Hugging Face names the
 * architectures ask for onto GGUF's with the architecture's table (rg_tsrc_gguf_name over
 * rg_arch.gguf), reports shapes in PyTorch's order (ggml's ne[] reversed), dequantizes with
 * rg_gguf_to_f32, and sets rope_interleaved when the table says so: general.architecture
 * "llama", whose q/k projection rows llama.cpp's converter permutes for its adjacent-pair RoPE
 * -- not "qwen2" / "qwen3" / "phi3", which llama.cpp converts unpermuted and runs with NEOX
 * RoPE). The hyper-parameters then come from the GGUF metadata (model.h,
 * rg_decoder_init); tie_word_embeddings is "output.weight is absent".
 *
 * Names are Hugging Face's, without a base-model prefix: rg_tsrc_get tries the prefixes it is
 * given ("model.", "transformer.", "") in order. */
#ifndef RG_MODEL_TSRC_H
#define RG_MODEL_TSRC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/safetensors.h"
#include "ragged.h"

#define RG_TSRC_MAX_DIMS 4

typedef struct rg_tsrc {
	const char *what; /* the file, for messages ("model.safetensors") */
	void *ctx;
	/* Shape of tensor name (outermost first, as PyTorch writes it); false when absent. */
	bool (*shape)(void *ctx, const char *name, int *ndim, int64_t shape[RG_TSRC_MAX_DIMS]);
	/* Its values as f32 into dst (product of the shape floats). */
	rg_status (*read_f32)(void *ctx, const char *name, float *dst);
	/* Its storage dtype (F32 / F16 / BF16; AUTO: quantized, another type, or absent); NULL:
	 * the format does not say per tensor (weight_dtype then stands for every tensor). */
	rg_dtype (*dtype)(void *ctx, const char *name);
	/* The stored bytes of a tensor of a quantized ggml type (GGUF: Q8_0, Q4_K, ...): *type
	 * (rg_gguf_type numbering), *data (inside the source, valid while it is open) and *bytes;
	 * false when it is stored as F32 / F16 / BF16 or absent. NULL: the format has none. */
	/* the tensor's stored bytes and ggml type when it is stored quantized or in F16 (GGUF),
	 * false for F32 / BF16 (and where the source has none: a checkpoint) */
	bool (*raw)(void *ctx, const char *name, int *type, const void **data, size_t *bytes);
	/* q/k projection rows are in the interleaved-pair RoPE order (GGUF) */
	bool rope_interleaved;
	/* the checkpoint's floating-point storage (F32 / F16 / BF16; AUTO: quantized or unknown):
	 * on CUDA a bf16 checkpoint computes in bf16 (RG_DTYPE_AUTO), as TEI chooses */
	rg_dtype weight_dtype;
	/* the same checkpoint's hyper-parameter source (config.h), or NULL */
	const struct rg_cfg_src *cfg;
} rg_tsrc;

/* A source over an open safetensors set (which must outlive it). */
void rg_tsrc_from_st(const rg_st *st, rg_tsrc *out);

/* True when name exists under one of the prefixes (NULL-terminated list). */
bool rg_tsrc_has(const rg_tsrc *src, const char *const *prefixes, const char *name);

/* name under the first of prefixes (NULL-terminated) where it exists, checked to have shape
 * (d0) (d1 < 0) or (d0, d1), read into a malloc'd f32 array *out (caller frees).
 * RG_ERR_FORMAT naming the tensor when it is missing or has another shape; RG_ERR_OOM. */
rg_status rg_tsrc_get(const rg_tsrc *src, const char *const *prefixes, const char *name,
		      int64_t d0, int64_t d1, float **out);
/* rg_tsrc_get into the caller's dst (d0 floats, or d0 * d1 for d1 >= 0): no allocation, the same
 * errors. What the encoders read into one reused conversion buffer (bert.c). */
rg_status rg_tsrc_read(const rg_tsrc *src, const char *const *prefixes, const char *name,
		       int64_t d0, int64_t d1, float *dst);
/* rg_tsrc_get's lookup and shape check of name, then src->raw: true with the quantized bytes
 * of a (d0, d1) tensor, false when it is missing, another shape, not quantized, or the source
 * has no raw hook (the caller then loads it as f32 and reports any error). */
bool rg_tsrc_raw(const rg_tsrc *src, const char *const *prefixes, const char *name, int64_t d0,
		 int64_t d1, int *type, const void **data, size_t *bytes);
/* The storage dtype of name under the first of prefixes where it exists (src->dtype);
 * RG_DTYPE_AUTO when it is absent or the source does not say. */
rg_dtype rg_tsrc_dtype(const rg_tsrc *src, const char *const *prefixes, const char *name);
/* An architecture's Hugging Face -> GGUF tensor-name table (llama.cpp's tensor map of its
 * LLM_ARCH_*), kept in the architecture's file (rg_arch.gguf). Names are matched without the
 * "model." prefix and without the ".weight" / ".bias" suffix, which is kept. */
typedef struct rg_tensor_name {
	const char *hf, *gguf;
} rg_tensor_name;
typedef struct rg_tensor_names {
	const rg_tensor_name *layer; /* per-layer stems ("self_attn.q_proj" -> "attn_q"):
				      * layers.N.<hf> -> blk.N.<gguf>; ends with {NULL, NULL} */
	const rg_tensor_name *top;   /* whole-model stems ("embed_tokens" -> "token_embd");
				      * ends with {NULL, NULL} */
	bool rope_interleaved;       /* llama.cpp's converter permutes the q/k rows of this
				      * architecture for adjacent-pair RoPE (LLM_ARCH_LLAMA) */
} rg_tensor_names;

/* The GGUF name of a Hugging Face name as rg_tsrc_get passes it (with or without "model.")
 * through table t, into buf (n bytes). Returns buf, or NULL for a name the table has no twin
 * of. */
const char *rg_tsrc_gguf_name(const rg_tensor_names *t, const char *hf, char *buf, size_t n);
#endif
