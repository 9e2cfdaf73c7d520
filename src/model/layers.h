/* Shared layer builders of the decoder architectures (layers.c): the weight loaders and op
 * sequences that gpt2.c, llama.c, qwen3.c and phi3.c have in common, so that a new decoder family
 * is its hooks plus calls to these (llama.cpp's llm_graph_context::build_norm / build_attn /
 * build_ffn; llm.c's ten calls per layer).
 *
 * Loaders read Hugging Face names through a tensor source (tsrc.h: safetensors or GGUF), check
 * shapes, convert to the compute dtype and upload (backend memory owned by the architecture's
 * weights, freed with rg_backend_dealloc). Errors name the tensor. */
#ifndef RG_MODEL_LAYERS_H
#define RG_MODEL_LAYERS_H
#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* The token embedding table and the LM head (transformers' tie_weights / _tied_weights_keys as
 * transformers 5 loads them): embed (vocab, H) from embed_name under prefixes; the head from
 * head_name under head_prefixes when the file holds it -- whatever tie_word_embeddings says
 * (a checkpoint with tie true and a distinct lm_head.weight runs with the file's head, as
 * transformers 5 loads it; GGUF: output.weight present), shared with the embedding when tied and
 * absent, or when its values equal the embedding's bit for bit (no second copy). Untied and
 * absent: RG_ERR_FORMAT naming the head. Sets *embed_d (act, unprepared: the gather reads it),
 * *head_d (act, prepared for the GEMM, or NULL when shared), m->dec.lm_head, and
 * m->dec.cfg.tie_word_embeddings to whether the head is the embedding (what rg_model_info
 * reports). */
rg_status rg_layer_load_embed_head(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				   const char *embed_name, const char *const *head_prefixes,
				   const char *head_name, void **embed_d, void **head_d);

/* Rows of k tensors names[i] (d0[i], d1) stacked into one (sum d0, d1) weight (d1 < 0: 1-D
 * vectors of d0[i]), uploaded in the compute dtype; prepare: also rg_op_prepare_weight (a GEMM
 * weight). k = 1 loads one tensor. */
rg_status rg_layer_load_stacked(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				const char *const names[], const int64_t d0[], int k, int64_t d1,
				bool prepare, void **dst);
/* One GEMM weight name (d0, d1), uploaded in the compute dtype and prepared. */
rg_status rg_layer_load_linear(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       const char *name, int64_t d0, int64_t d1, void **dst);
/* One vector name (n) as f32 (a norm's gamma / beta) or in the compute dtype (act: a bias). */
rg_status rg_layer_load_vec(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			    const char *name, int64_t n, bool act, void **dst);
#endif
