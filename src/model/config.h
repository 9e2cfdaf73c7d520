/* Hugging Face config.json for BERT-family encoders, plus sentence-transformers pooling extras. */
#ifndef RG_MODEL_CONFIG_H
#define RG_MODEL_CONFIG_H
#include <stdbool.h>
#include "ops/act.h"
#include "ragged.h"

typedef struct rg_bert_config {
	char model_type[32];          /* "bert" */
	int vocab_size;
	int hidden_size;
	int num_attention_heads;
	int num_hidden_layers;
	int intermediate_size;
	int max_position_embeddings;
	int type_vocab_size;
	int pad_token_id;
	rg_act hidden_act;
	double layer_norm_eps;
} rg_bert_config;

/* Parse <dir>/config.json. Required keys: model_type ("bert"), vocab_size, hidden_size,
 * num_attention_heads, num_hidden_layers, intermediate_size, max_position_embeddings.
 * Optional with HF defaults: type_vocab_size (2), layer_norm_eps (1e-12), pad_token_id (0),
 * hidden_act ("gelu"; also "gelu_new", "relu"), position_embedding_type ("absolute" only).
 * Refuses (RG_ERR_UNSUPPORTED / RG_ERR_FORMAT) with a message naming the key: unknown model_type or
 * hidden_act, non-positive sizes, hidden_size not divisible by num_attention_heads, wrong JSON types. */
rg_status rg_bert_config_load(const char *dir, rg_bert_config *cfg);

/* sentence-transformers extras: modules.json naming a Pooling module (its path/config.json:
 * pooling_mode_mean_tokens / cls_token / max_tokens) and a Normalize module. Without modules.json:
 * MEAN, normalize=false. Unsupported pooling modes (mean_sqrt_len, weightedmean, lasttoken) ->
 * RG_ERR_UNSUPPORTED naming the key. */
rg_status rg_pooling_config_load(const char *dir, rg_pooling *mode, bool *normalize);

#endif
