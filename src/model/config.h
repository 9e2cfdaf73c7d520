/* Hugging Face config.json for BERT-family encoders, plus sentence-transformers pooling extras. */
#ifndef RG_MODEL_CONFIG_H
#define RG_MODEL_CONFIG_H
#include <stdbool.h>
#include "ops/act.h"
#include "ragged.h"

typedef struct rg_encoder_config {
	char model_type[32];          /* "bert", "roberta", "xlm-roberta", "distilbert", "mpnet",
				       * "albert", "deberta-v2" */
	int vocab_size;
	int hidden_size;
	int num_attention_heads;
	int num_hidden_layers;
	int intermediate_size;
	int max_position_embeddings;
	int type_vocab_size;          /* 0: the family has no token type embeddings */
	int pad_token_id;
	int padding_idx;              /* RoBERTa-style positions: the token id they skip
				       * (pad_token_id; MPNet: 1, fixed in MPNetEmbeddings) */
	int position_offset;          /* first position id: padding_idx + 1 for RoBERTa, else 0 */
	int embedding_size;           /* E: width of the embedding tables (ALBERT: < hidden_size,
				       * mapped up by a linear layer); hidden_size elsewhere */
	bool shared_layers;           /* ALBERT: one layer's weights serve every layer */
	int relative_attention_num_buckets; /* MPNet: rows of the shared relative position bias
					     * (>= 32); 0: the family has none */
	bool position_biased_input;   /* absolute position embeddings are added (false: DeBERTa-v3,
				       * which has none) */
	/* DeBERTa-v2 (DebertaV2Config): disentangled attention */
	bool relative_attention;      /* c2p / p2c terms on the scores */
	bool c2p, p2c;                /* pos_att_type members (they also widen the scale) */
	int position_buckets;         /* > 0: log buckets (make_log_bucket_position); else none */
	int max_relative_positions;   /* resolved: < 1 in config.json -> max_position_embeddings */
	int att_span;                 /* position_buckets if > 0, else max_relative_positions;
				       * rel_embeddings has 2 att_span rows */
	bool norm_rel_ebd;            /* norm_rel_ebd "layer_norm": rel_embeddings through
				       * encoder.LayerNorm */
	rg_act hidden_act;
	double layer_norm_eps;
} rg_encoder_config;

/* Parse <dir>/config.json of an encoder family. model_type "bert", "roberta" and "xlm-roberta"
 * (BertConfig / RobertaConfig keys), "distilbert" (DistilBertConfig: dim, n_heads, n_layers,
 * hidden_dim, activation; no token types), "albert" (AlbertConfig: embedding_size (128, at most
 * intermediate_size), num_hidden_groups and inner_group_num must be 1, hidden_act defaults to
 * "gelu_new"), or "mpnet" (MPNetConfig: BERT's keys, no token types, RoBERTa-style positions from
 * padding_idx 1, relative_attention_num_buckets (32), which must be >= 32 because transformers'
 * MPNetEncoder always computes 32 buckets (compute_position_bias's default), whatever the config
 * says), or "deberta-v2" (DebertaV2Config, DeBERTa-v2/v3: BERT's keys, type_vocab_size 0 and
 * layer_norm_eps 1e-7 by default, position_biased_input, relative_attention, position_buckets,
 * max_relative_positions, pos_att_type (a subset of c2p, p2c, as a list or "p2c|c2p"),
 * share_att_key (must be true with relative terms), norm_rel_ebd ("layer_norm" or "none");
 * refused by name: conv_kernel_size > 0, embedding_size != hidden_size, attention_head_size !=
 * hidden / heads, other pos_att_type members). Required: model_type, vocab_size, the four sizes,
 * max_position_embeddings. Optional with HF defaults: type_vocab_size (2), layer_norm_eps
 * (1e-12), pad_token_id (0), hidden_act ("gelu"; also "gelu_new", "gelu_pytorch_tanh", "relu").
 * RoBERTa-style families get position_offset = padding_idx + 1 (RobertaEmbeddings counts
 * positions from padding_idx + 1; padding_idx = pad_token_id, MPNet's is 1). Refuses
 * (RG_ERR_UNSUPPORTED / RG_ERR_FORMAT) with a message
 * naming the key: unknown model_type or activation, options that change the math and are not
 * implemented (position_embedding_type other than "absolute", is_decoder, add_cross_attention,
 * sinusoidal_pos_embds), non-positive sizes, hidden_size not divisible by the head count, wrong
 * JSON types. */
rg_status rg_encoder_config_load(const char *dir, rg_encoder_config *cfg);
struct rg_cfg_src;
/* rg_encoder_config_load over an open config.json (src->root; src->path names it in
 * messages): what the encoders' hparams hook calls (bert.c). A source without config.json (GGUF
 * metadata) is RG_ERR_UNSUPPORTED. */
rg_status rg_encoder_config_read(const struct rg_cfg_src *src, rg_encoder_config *cfg);

/* The task head named by config.json "architectures" (first entry). *ForSequenceClassification
 * (cross-encoders, classifiers): classifier = true, labels from id2label (ids 0..n-1, all present;
 * without id2label, num_labels or 2 as transformers defaults, named LABEL_i), multi_label from
 * problem_type "multi_label_classification". Base models, *ForMaskedLM and *ForPreTraining:
 * classifier = false (the encoder's pooled output is the embedding). Heads ragged does not run
 * (*ForTokenClassification, *ForQuestionAnswering, *ForMultipleChoice, *ForCausalLM, ...):
 * RG_ERR_UNSUPPORTED naming the architecture. Errors name the key; on success *h owns its labels
 * (rg_head_config_free). */
typedef struct rg_head_config {
	bool classifier;
	int num_labels;          /* >= 1 when classifier */
	char **labels;           /* (num_labels) label names in id order */
	bool multi_label;        /* problem_type "multi_label_classification": sigmoid per label */
	bool pooler_gelu;        /* DeBERTa: pooler_hidden_act "gelu" (its default); else tanh */
} rg_head_config;

rg_status rg_head_config_load(const char *dir, rg_head_config *h);
void rg_head_config_free(rg_head_config *h);

/* sentence-transformers extras: modules.json naming a Pooling module (its path/config.json:
 * pooling_mode_mean_tokens / cls_token / max_tokens / lasttoken (RG_POOL_LAST)) and a Normalize
 * module. Without modules.json: MEAN, normalize=false. Unsupported pooling modes (mean_sqrt_len,
 * weightedmean) ->
 * RG_ERR_UNSUPPORTED naming the key. */
rg_status rg_pooling_config_load(const char *dir, rg_pooling *mode, bool *normalize);


/* ---- shared config.json helpers, for the architectures' own hyper-parameter hooks ---- */
struct json_object;

/* Read <dir>/config.json: RG_ERR_IO naming a missing directory or file, RG_ERR_FORMAT for bad
 * JSON or a top level that is not an object. On success *root (json_object_put) and *path
 * (free) belong to the caller. */
rg_status rg_cfg_open(const char *dir, struct json_object **root, char **path);
/* config.json's model_type into buf (n bytes), with rg_cfg_open's errors and RG_ERR_FORMAT for a
 * missing or non-string model_type. */
rg_status rg_config_model_type(const char *dir, char *buf, size_t n);
/* Typed getters: a missing or null key gives def (rg_cfg_int with required: RG_ERR_FORMAT); a
 * wrong JSON type or a value outside [lo, hi] is RG_ERR_FORMAT naming the key. rg_cfg_double
 * accepts integers too and refuses NaN. rg_cfg_str's def NULL means required. */
rg_status rg_cfg_int(const char *path, struct json_object *root, const char *key, bool required,
		     int def, int64_t lo, int64_t hi, int *v);
rg_status rg_cfg_double(const char *path, struct json_object *root, const char *key, double def,
			double lo, double hi, double *v);
rg_status rg_cfg_bool(const char *path, struct json_object *root, const char *key, bool def,
		      bool *v);
rg_status rg_cfg_str(const char *path, struct json_object *root, const char *key,
		     const char *def, const char **v);
/* A special token id (bos_token_id, eos_token_id): an integer >= 0, or a list of them (Llama
 * 3.1 lists several stop ids: the first is taken); missing, null or [] give -1. */
rg_status rg_cfg_token_id(const char *path, struct json_object *root, const char *key, int *v);
/* True when key is present and not null. */
bool rg_cfg_has(struct json_object *root, const char *key);

/* An activation name of config.json (key, read by the caller: name) as rg_act and its static
 * name for rg_model_info: "gelu_new" / "gelu_pytorch_tanh" -> GELU_NEW ("gelu_new"), "gelu" ->
 * GELU, "relu" -> RELU, "swish" / "silu" -> SILU. allowed: a bit mask of (1 << rg_act) the family
 * computes; another name, or one outside allowed, is RG_ERR_UNSUPPORTED naming key, path and
 * the allowed names. */
rg_status rg_cfg_act(const char *path, const char *key, const char *name, unsigned allowed,
		     rg_act *act, const char **canon);

/* ---- one source of hyper-parameters: a config.json or a GGUF file's metadata ----
 * An architecture's hparams hook (model.h rg_arch) reads its hyper-parameters once for both
 * formats through these getters, naming each value by its config.json key and its GGUF key
 * (relative to general.architecture: "attention.head_count" is "<arch>.attention.head_count";
 * NULL: GGUF has no twin, the default applies). Where the formats differ in structure (nested
 * rope_scaling objects, arrays stored as GGUF tensors) the hook branches on root / gguf. */
struct rg_gguf;
typedef struct rg_cfg_src {
	const char *path;             /* config.json's path or the GGUF file, for messages */
	struct json_object *root;     /* config.json's top-level object, or NULL */
	const struct rg_gguf *gguf;   /* the GGUF file (metadata and tensors), or NULL */
	const char *gguf_arch;        /* its general.architecture (the key prefix) */
} rg_cfg_src;

/* rg_cfg_int / rg_cfg_double / rg_cfg_bool over either format: key in config.json, or
 * "<arch>.<gguf_key>" in the GGUF metadata (integer, float or bool types as gguf.h converts
 * them). Missing: def (required: RG_ERR_FORMAT naming the key); outside [lo, hi] or of a wrong
 * type: RG_ERR_FORMAT naming it. */
rg_status rg_cfg_src_int(const rg_cfg_src *s, const char *key, const char *gguf_key,
			 bool required, int def, int64_t lo, int64_t hi, int *v);
rg_status rg_cfg_src_double(const rg_cfg_src *s, const char *key, const char *gguf_key,
			    double def, double lo, double hi, double *v);
rg_status rg_cfg_src_bool(const rg_cfg_src *s, const char *key, const char *gguf_key, bool def,
			  bool *v);
/* True when the value is present (and not null). */
bool rg_cfg_src_has(const rg_cfg_src *s, const char *key, const char *gguf_key);
/* bos_token_id / eos_token_id: rg_cfg_token_id's rule for config.json; GGUF's
 * tokenizer.ggml.<bos|eos>_token_id (gguf_key is the full key), which must lie in
 * [0, vocab_size) (RG_ERR_FORMAT; a bad bos id is ignored as before). -1 when absent. */
rg_status rg_cfg_src_token_id(const rg_cfg_src *s, const char *key, const char *gguf_key,
			      int vocab_size, int *v);
/* The vocabulary size: config.json's vocab_size (required), or the length of GGUF's
 * tokenizer.ggml.tokens. */
rg_status rg_cfg_src_vocab_size(const rg_cfg_src *s, int *v);

/* A decoder-only model's hyper-parameters, filled by its architecture's hparams hook
 * (gpt2.c, llama.c, qwen3.c, phi3.c) from config.json or GGUF metadata (rg_cfg_src). Also the KV cache's shape: num_hidden_layers x
 * num_key_value_heads x head_dim per token for K and for V. */
typedef struct rg_decoder_config {
	char model_type[32];
	int vocab_size;
	int hidden_size;
	int num_attention_heads;
	int num_key_value_heads;      /* = num_attention_heads without GQA */
	int head_dim;                 /* hidden_size / num_attention_heads unless config.json says */
	int num_hidden_layers;
	int intermediate_size;        /* FFN width (GPT-2: n_inner, default 4 n_embd) */
	int max_position_embeddings;  /* GPT-2: n_positions */
	double norm_eps;              /* layer_norm_epsilon (GPT-2) / rms_norm_eps (Llama) */
	rg_act hidden_act;            /* GPT-2's activation_function; Llama: silu (SwiGLU) */
	const char *act_name;         /* its config.json name, static */
	/* RoPE (Llama family) */
	double rope_theta;
	bool rope_llama3;             /* rope_scaling rope_type "llama3" */
	double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_original_max_pos;    /* llama3's and LongRoPE's original_max_position_embeddings */
	bool rope_longrope;           /* LongRoPE (Phi-3 rope_scaling "longrope" / "su"): per-pair
				       * short / long factors, read by phi3.c's load */
	double rope_mscale;           /* LongRoPE's attention factor on cos / sin */
	bool rope_interleaved;        /* pairs (2i, 2i+1) instead of rotate_half: set by the tensor
				       * source (GGUF's permuted q/k rows), never by config.json */
	bool tie_word_embeddings;     /* LM head = the token embedding table */
	bool attention_bias;          /* biases on q/k/v (Qwen2: always) */
	/* GPT-2 */
	bool scale_attn_weights;      /* scores / sqrt(head_dim) (default true) */
	bool scale_attn_by_inverse_layer_idx; /* and / (layer + 1) */
	int bos_token_id, eos_token_id; /* -1 when config.json has none */
	/* encoder-decoders (bart.c): the encoder has encoder_layers layers of the decoder's width,
	 * heads and FFN; num_hidden_layers counts the decoder's */
	int encoder_layers;
	int decoder_start_token_id;   /* -1 for decoder-only models */
	int pad_token_id;             /* -1 when config.json has none */
	int max_source_positions;     /* longest source (encoder positions) */
	int enc_pos_skip_token;       /* M2M100: the pad id, which takes no encoder position (a
				       * source's positions count its other tokens); -1 none */
	bool scale_embedding;         /* embeddings times sqrt(hidden_size) */
	/* T5 (t5.c) */
	int rel_buckets;              /* relative_attention_num_buckets */
	int rel_max_distance;         /* relative_attention_max_distance */
	bool gated_ffn;               /* feed_forward_proj "gated-<act>": act(wi_0 x) * wi_1 x */
} rg_decoder_config;

/* sentence-transformers Dense modules (models.Dense, e.g. 2_Dense): out = act(W x + b) on the
 * pooled vector, before Normalize. path/config.json: {"in_features", "out_features", "bias",
 * "activation_function": "torch.nn.modules.linear.Identity" | "...activation.Tanh" | "...ReLU" |
 * "...Sigmoid" | "...GELU"}; weights in path/model.safetensors ("linear.weight" (out, in),
 * "linear.bias" (out)), loaded by model.c. */
#define RG_MAX_DENSE 4
typedef enum rg_dense_act {
	RG_DENSE_IDENTITY,
	RG_DENSE_TANH,
	RG_DENSE_RELU,
	RG_DENSE_SIGMOID,
	RG_DENSE_GELU,
} rg_dense_act;

typedef struct rg_dense_config {
	char path[256];          /* module directory, relative to the model's */
	int in_features, out_features;
	bool bias;
	rg_dense_act act;
} rg_dense_config;

/* The Dense modules of <dir>/modules.json, in order, into d[0..*n) (*n = 0 without any or
 * without modules.json). override: NULL, or one module directory that replaces them (TEI's
 * --dense-path, e.g. "2_Dense_1024"). Errors name the file and key: RG_ERR_FORMAT (malformed
 * config, sizes not positive, a path leaving the model directory), RG_ERR_UNSUPPORTED (another
 * activation, more than RG_MAX_DENSE modules), RG_ERR_IO (a missing config). The chain of sizes
 * (in of one = out of the one before) is checked by the caller, which knows the hidden size. */
rg_status rg_dense_config_load(const char *dir, const char *override, rg_dense_config *d, int *n);

#endif
