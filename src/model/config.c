/* Hugging Face config.json (BERT) and sentence-transformers modules.json / Pooling config.
 * See config.h for the contract. Key names and defaults follow transformers' BertConfig
 * (transformers/models/bert/configuration_bert.py) and sentence-transformers' Pooling module. */
#include "model/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/gguf.h"
#include "core/json.h"
#include "core/file.h"

#define RG_CFG_MAX_FILE ((off_t)16 << 20) /* config files are a few KiB; refuse absurd ones */
#define RG_CFG_MAX_DIM (1 << 20)          /* "sane" upper bound on every size */

/* Integer key in [lo, hi]. Missing or null: *v = def when !required, else RG_ERR_FORMAT.
 * Wrong JSON type (string "384", 384.0, true): RG_ERR_FORMAT naming the key. */
static rg_status cfg_int(const char *path, json_object *root, const char *key, bool required,
			 int def, int64_t lo, int64_t hi, int *v)
{
	json_object *o;
	int64_t x;

	if (!json_object_object_get_ex(root, key, &o) || !o) {
		if (required)
			return rg_errorf(RG_ERR_FORMAT, "%s: required key \"%s\" is missing", path,
					 key);
		*v = def;
		return RG_OK;
	}
	if (!json_object_is_type(o, json_type_int))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be an integer, got %s %s", path, key,
				 json_type_to_name(json_object_get_type(o)),
				 json_object_to_json_string(o));
	x = json_object_get_int64(o);
	if (x < lo || x > hi)
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" = %s out of range [%lld, %lld]", path, key,
				 json_object_to_json_string(o), (long long)lo, (long long)hi);
	*v = (int)x;
	return RG_OK;
}

/* String key; missing or null gives def (NULL def means required). */
static rg_status cfg_str(const char *path, json_object *root, const char *key, const char *def,
			 const char **v)
{
	json_object *o;

	if (!json_object_object_get_ex(root, key, &o) || !o) {
		if (!def)
			return rg_errorf(RG_ERR_FORMAT, "%s: required key \"%s\" is missing", path,
					 key);
		*v = def;
		return RG_OK;
	}
	if (!json_object_is_type(o, json_type_string))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be a string, got %s %s", path, key,
				 json_type_to_name(json_object_get_type(o)),
				 json_object_to_json_string(o));
	*v = json_object_get_string(o);
	return RG_OK;
}

/* Boolean key; missing or null gives def; another JSON type is RG_ERR_FORMAT naming the key. */
static rg_status cfg_bool(const char *path, json_object *root, const char *key, bool def, bool *v)
{
	json_object *o;

	*v = def;
	if (!json_object_object_get_ex(root, key, &o) || !o)
		return RG_OK;
	if (!json_object_is_type(o, json_type_boolean))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be true or false, got %s", path, key,
				 json_object_to_json_string(o));
	*v = json_object_get_boolean(o);
	return RG_OK;
}

/* What the families' config.json files call the same things (transformers' *Config classes;
 * DistilBertConfig maps hidden_size -> dim, num_attention_heads -> n_heads, num_hidden_layers ->
 * n_layers, and calls the FFN width hidden_dim and the activation "activation"). */
typedef struct rg_family_keys {
	const char *model_type;
	const char *hidden_size, *num_attention_heads, *num_hidden_layers, *intermediate_size;
	const char *hidden_act;
	bool token_types;       /* has token_type_embeddings (type_vocab_size) */
	bool roberta_positions; /* positions from padding_idx + 1 (RobertaEmbeddings) */
	int padding_idx;        /* with roberta_positions: fixed padding_idx, -1: pad_token_id */
	bool rel_bias;          /* relative position bias (relative_attention_num_buckets) */
	bool deberta;           /* DebertaV2Config: disentangled attention keys */
} rg_family_keys;

static const rg_family_keys FAMILIES[] = {
	{"bert", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
	 "hidden_act", true, false, -1, false, false},
	{"roberta", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
	 "hidden_act", true, true, -1, false, false},
	{"xlm-roberta", "hidden_size", "num_attention_heads", "num_hidden_layers",
	 "intermediate_size", "hidden_act", true, true, -1, false, false},
	{"distilbert", "dim", "n_heads", "n_layers", "hidden_dim", "activation", false, false, -1,
	 false, false},
	{"albert", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
	 "hidden_act", true, false, -1, false, false},
	/* MPNetEmbeddings sets padding_idx = 1 whatever pad_token_id is */
	{"mpnet", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
	 "hidden_act", false, true, 1, true, false},
	{"deberta-v2", "hidden_size", "num_attention_heads", "num_hidden_layers",
	 "intermediate_size", "hidden_act", true, false, -1, false, true},
};
#define SUPPORTED_TYPES "bert, roberta, xlm-roberta, distilbert, albert, mpnet, deberta-v2"

/* Options of these families that change the math and that ragged does not implement: a
 * checkpoint that sets one is refused, naming it, rather than run with wrong numbers. */
static rg_status refuse_options(const char *path, json_object *root)
{
	static const struct {
		const char *key, *why;
	} refused[] = {
		{"is_decoder", "causal self-attention; ragged's encoders attend both ways"},
		{"add_cross_attention", "encoder-decoder attention"},
		{"sinusoidal_pos_embds", "fixed sinusoidal positions; learned ones only"},
	};
	const char *str;
	rg_status s;
	bool on;

	if ((s = cfg_str(path, root, "position_embedding_type", "absolute", &str)) != RG_OK)
		return s;
	if (strcmp(str, "absolute"))
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: position_embedding_type \"%s\" is not supported (only "
				 "\"absolute\")",
				 path, str);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		if ((s = cfg_bool(path, root, refused[i].key, false, &on)) != RG_OK)
			return s;
		if (on)
			return rg_errorf(RG_ERR_UNSUPPORTED, "%s: %s = true is not supported (%s)",
					 path, refused[i].key, refused[i].why);
	}
	return RG_OK;
}

/* DebertaV2Config's attention keys (transformers' DisentangledSelfAttention, DebertaV2Encoder,
 * DebertaV2Embeddings read them with these defaults); cfg's sizes are read. What ragged does not
 * compute is refused by name. */
static rg_status deberta_keys(const char *path, json_object *root, rg_encoder_config *cfg)
{
	json_object *o;
	const char *str;
	bool share;
	int v;
	rg_status s;

	if ((s = cfg_bool(path, root, "position_biased_input", true,
			  &cfg->position_biased_input)) != RG_OK ||
	    (s = cfg_bool(path, root, "relative_attention", false, &cfg->relative_attention)) !=
		    RG_OK ||
	    (s = cfg_bool(path, root, "share_att_key", false, &share)) != RG_OK ||
	    (s = cfg_int(path, root, "position_buckets", false, -1, INT_MIN, RG_CFG_MAX_DIM - 1,
			 &cfg->position_buckets)) != RG_OK ||
	    (s = cfg_int(path, root, "max_relative_positions", false, -1, INT_MIN,
			 RG_CFG_MAX_DIM - 1, &cfg->max_relative_positions)) != RG_OK ||
	    (s = cfg_int(path, root, "conv_kernel_size", false, 0, INT_MIN, INT_MAX, &v)) != RG_OK)
		return s;
	if (v > 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: conv_kernel_size %d is not supported (DeBERTa's ConvLayer after "
				 "the first layer)",
				 path, v);
	if ((s = cfg_int(path, root, "embedding_size", false, cfg->hidden_size, 1,
			 RG_CFG_MAX_DIM - 1, &v)) != RG_OK)
		return s;
	if (v != cfg->hidden_size)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: embedding_size %d != hidden_size %d is not supported (embed_proj)",
				 path, v, cfg->hidden_size);
	if (json_object_object_get_ex(root, "attention_head_size", &o) && o) {
		if ((s = cfg_int(path, root, "attention_head_size", true, 0, 1, RG_CFG_MAX_DIM - 1,
				 &v)) != RG_OK)
			return s;
		if ((long long)v * cfg->num_attention_heads != cfg->hidden_size)
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: attention_head_size %d is not supported (only "
					 "hidden_size / num_attention_heads)",
					 path, v);
	}
	/* pos_att_type: a list, or a string split at '|' (DebertaV2Config) */
	if (json_object_object_get_ex(root, "pos_att_type", &o) && o) {
		const bool is_str = json_object_is_type(o, json_type_string);
		const size_t n = is_str ? 1 : json_object_is_type(o, json_type_array) ?
					      json_object_array_length(o) : 0;

		if (!is_str && !json_object_is_type(o, json_type_array))
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: \"pos_att_type\" must be a list or a string, got %s",
					 path, json_object_to_json_string(o));
		for (size_t i = 0; i < n; i++) {
			json_object *e = is_str ? o : json_object_array_get_idx(o, i);
			const char *p;

			if (!json_object_is_type(e, json_type_string))
				return rg_errorf(RG_ERR_FORMAT,
						 "%s: \"pos_att_type\" entries must be strings", path);
			for (p = json_object_get_string(e); *p;) {
				size_t k = is_str ? strcspn(p, "|") : strlen(p), a = 0, b = k;

				while (a < b && p[a] == ' ')
					a++;
				while (b > a && p[b - 1] == ' ')
					b--;
				if (b - a == 3 && !strncasecmp(p + a, "c2p", 3))
					cfg->c2p = true;
				else if (b - a == 3 && !strncasecmp(p + a, "p2c", 3))
					cfg->p2c = true;
				else if (b > a || !is_str)
					return rg_errorf(RG_ERR_UNSUPPORTED,
							 "%s: pos_att_type \"%.*s\" is not supported "
							 "(c2p, p2c)",
							 path, (int)(b - a), p + a);
				p += k;
				if (*p == '|')
					p++;
			}
		}
	}
	if (cfg->max_relative_positions < 1)
		cfg->max_relative_positions = cfg->max_position_embeddings;
	cfg->att_span = cfg->position_buckets > 0 ? cfg->position_buckets :
						    cfg->max_relative_positions;
	if (cfg->relative_attention && (cfg->c2p || cfg->p2c) && !share)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: share_att_key = false is not supported (separate "
				 "pos_key_proj / pos_query_proj)",
				 path);
	if ((s = cfg_str(path, root, "norm_rel_ebd", "none", &str)) != RG_OK)
		return s;
	for (const char *p = str; *p;) {
		size_t k = strcspn(p, "|"), a = 0, b = k;

		while (a < b && p[a] == ' ')
			a++;
		while (b > a && p[b - 1] == ' ')
			b--;
		if (b - a == 10 && !strncasecmp(p + a, "layer_norm", 10))
			cfg->norm_rel_ebd = true;
		else if (!(b - a == 4 && !strncasecmp(p + a, "none", 4)))
			return rg_errorf(RG_ERR_UNSUPPORTED,
					 "%s: norm_rel_ebd \"%s\" is not supported (layer_norm, none)",
					 path, str);
		p += k;
		if (*p == '|')
			p++;
	}
	return RG_OK;
}

rg_status rg_encoder_config_read(const rg_cfg_src *src, rg_encoder_config *cfg)
{
	const char *path = src->path;
	json_object *root = src->root, *o;
	const rg_family_keys *fam = NULL;
	const char *str;
	rg_status s;

	memset(cfg, 0, sizeof(*cfg));
	if (!root)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: encoders are read from a Hugging Face directory's config.json "
				 "only", path);
	if ((s = cfg_str(path, root, "model_type", NULL, &str)) != RG_OK)
		return s;
	for (size_t i = 0; i < sizeof(FAMILIES) / sizeof(FAMILIES[0]) && !fam; i++)
		if (!strcmp(str, FAMILIES[i].model_type))
			fam = &FAMILIES[i];
	if (!fam) {
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s: model_type \"%s\" is not supported (%s)", path, str,
			      SUPPORTED_TYPES);
		return s;
	}
	snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", str);

	if ((s = cfg_int(path, root, "vocab_size", true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->vocab_size)) != RG_OK ||
	    (s = cfg_int(path, root, fam->hidden_size, true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->hidden_size)) != RG_OK ||
	    (s = cfg_int(path, root, fam->num_attention_heads, true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->num_attention_heads)) != RG_OK ||
	    (s = cfg_int(path, root, fam->num_hidden_layers, true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->num_hidden_layers)) != RG_OK ||
	    (s = cfg_int(path, root, fam->intermediate_size, true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->intermediate_size)) != RG_OK ||
	    (s = cfg_int(path, root, "max_position_embeddings", true, 0, 1, RG_CFG_MAX_DIM - 1,
			 &cfg->max_position_embeddings)) != RG_OK ||
	    (s = cfg_int(path, root, "pad_token_id", false, 0, 0, cfg->vocab_size - 1,
			 &cfg->pad_token_id)) != RG_OK)
		return s;
	if (fam->token_types) {
		/* DebertaV2Config: type_vocab_size 0 (none) by default */
		if ((s = cfg_int(path, root, "type_vocab_size", false, fam->deberta ? 0 : 2,
				 fam->deberta ? 0 : 1, RG_CFG_MAX_DIM - 1,
				 &cfg->type_vocab_size)) != RG_OK)
			return s;
	} else {
		cfg->type_vocab_size = 0; /* no token type embeddings */
	}
	if (fam->roberta_positions) {
		/* RobertaEmbeddings: positions count from padding_idx + 1 (padding_idx =
		 * pad_token_id; MPNetEmbeddings: 1) */
		cfg->padding_idx = fam->padding_idx >= 0 ? fam->padding_idx : cfg->pad_token_id;
		cfg->position_offset = cfg->padding_idx + 1;
		if (cfg->position_offset >= cfg->max_position_embeddings) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: %s %d leaves no position below "
				      "max_position_embeddings %d",
				      path, fam->padding_idx >= 0 ? "padding_idx" : "pad_token_id",
				      cfg->padding_idx, cfg->max_position_embeddings);
			return s;
		}
	}
	if (fam->rel_bias) {
		/* MPNetEncoder.compute_position_bias buckets with its default num_buckets = 32
		 * whatever the config says: a smaller table would be indexed past its end */
		if ((s = cfg_int(path, root, "relative_attention_num_buckets", false, 32, 1,
				 RG_CFG_MAX_DIM - 1, &cfg->relative_attention_num_buckets)) != RG_OK)
			return s;
		if (cfg->relative_attention_num_buckets < 32) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: relative_attention_num_buckets %d < 32 (transformers' "
				      "MPNet always looks up 32 buckets)",
				      path, cfg->relative_attention_num_buckets);
			return s;
		}
	}
	if ((s = refuse_options(path, root)) != RG_OK)
		return s;
	cfg->embedding_size = cfg->hidden_size;
	cfg->position_biased_input = true;
	if (fam->deberta && (s = deberta_keys(path, root, cfg)) != RG_OK)
		return s;
	if (!strcmp(fam->model_type, "albert")) {
		int groups, inner;

		/* factorised embeddings (E -> H) and one layer group shared by every layer; other
		 * groupings exist in no released checkpoint and are refused by name */
		if ((s = cfg_int(path, root, "embedding_size", false, 128, 1, cfg->intermediate_size,
				 &cfg->embedding_size)) != RG_OK ||
		    (s = cfg_int(path, root, "num_hidden_groups", false, 1, 1, 1, &groups)) != RG_OK ||
		    (s = cfg_int(path, root, "inner_group_num", false, 1, 1, 1, &inner)) != RG_OK)
			return s;
		cfg->shared_layers = true;
	}
	if (cfg->hidden_size % cfg->num_attention_heads != 0) {
		s = rg_errorf(RG_ERR_FORMAT,
			      "%s: hidden_size %d is not divisible by num_attention_heads %d", path,
			      cfg->hidden_size, cfg->num_attention_heads);
		return s;
	}

	/* AlbertConfig's default activation is the tanh form */
	if ((s = cfg_str(path, root, fam->hidden_act,
			 strcmp(fam->model_type, "albert") ? "gelu" : "gelu_new", &str)) != RG_OK)
		return s;
	if (!strcmp(str, "gelu")) {
		cfg->hidden_act = RG_ACT_GELU;
	} else if (!strcmp(str, "gelu_new") || !strcmp(str, "gelu_pytorch_tanh")) {
		/* both are the tanh approximation (transformers.activations) */
		cfg->hidden_act = RG_ACT_GELU_NEW;
	} else if (!strcmp(str, "relu")) {
		cfg->hidden_act = RG_ACT_RELU;
	} else {
		s = rg_errorf(RG_ERR_UNSUPPORTED,
			      "%s: %s \"%s\" is not supported (gelu, gelu_new, "
			      "gelu_pytorch_tanh, relu)",
			      path, fam->hidden_act, str);
		return s;
	}

	cfg->layer_norm_eps = fam->deberta ? 1e-7 : 1e-12; /* DebertaV2Config's default */
	if (json_object_object_get_ex(root, "layer_norm_eps", &o) && o) {
		if (!json_object_is_type(o, json_type_double) &&
		    !json_object_is_type(o, json_type_int)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: \"layer_norm_eps\" must be a number, got %s %s",
				      path, json_type_to_name(json_object_get_type(o)),
				      json_object_to_json_string(o));
			return s;
		}
		cfg->layer_norm_eps = json_object_get_double(o);
		/* written so that NaN fails too */
		if (!(cfg->layer_norm_eps > 0.0 && cfg->layer_norm_eps < 1.0)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: \"layer_norm_eps\" = %s must be in (0, 1)",
				      path, json_object_to_json_string(o));
			return s;
		}
	}
	return RG_OK;
}

rg_status rg_encoder_config_load(const char *dir, rg_encoder_config *cfg)
{
	rg_cfg_src src = {0};
	char *path;
	rg_status s;

	memset(cfg, 0, sizeof(*cfg));
	if ((s = rg_cfg_open(dir, &src.root, &path)) != RG_OK)
		return s;
	src.path = path;
	s = rg_encoder_config_read(&src, cfg);
	json_object_put(src.root);
	free(path);
	return s;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

/* A module path must stay inside the model directory: relative, no ".." component. */
static bool module_path_ok(const char *p)
{
	const char *c = p;

	if (p[0] == '/')
		return false;
	while (*c) {
		size_t n = strcspn(c, "/");
		if (n == 2 && c[0] == '.' && c[1] == '.')
			return false;
		c += n;
		if (*c == '/')
			c++;
	}
	return true;
}

/* <dir>/<module>/config.json of a sentence-transformers Pooling module. */
static rg_status pooling_mode_load(const char *dir, const char *module, rg_pooling *mode)
{
	char *mdir, *path;
	json_object *root = NULL;
	int n_true = 0;
	rg_status s;

	mdir = rg_path_join(dir, module);
	path = mdir ? rg_path_join(mdir, "config.json") : NULL;
	free(mdir);
	if (!path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	s = rg_json_read_file(path, RG_CFG_MAX_FILE, &root);
	if (s != RG_OK)
		goto out_free_path;
	if (!json_object_is_type(root, json_type_object)) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: top level is JSON %s, not an object", path,
			      json_type_to_name(json_object_get_type(root)));
		goto out_put_root;
	}
	json_object_object_foreach(root, key, val) {
		bool on;
		if (strncmp(key, "pooling_mode_", 13))
			continue;
		if (!json_object_is_type(val, json_type_boolean)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be a boolean, got %s", path, key,
				      json_object_to_json_string(val));
			goto out_put_root;
		}
		on = json_object_get_boolean(val);
		if (!on)
			continue;
		if (!strcmp(key, "pooling_mode_mean_tokens")) {
			*mode = RG_POOL_MEAN;
		} else if (!strcmp(key, "pooling_mode_cls_token")) {
			*mode = RG_POOL_CLS;
		} else if (!strcmp(key, "pooling_mode_max_tokens")) {
			*mode = RG_POOL_MAX;
		} else if (!strcmp(key, "pooling_mode_lasttoken")) {
			*mode = RG_POOL_LAST; /* decoder embeddings (Qwen3-Embedding, e5-mistral) */
		} else {
			/* mean_sqrt_len_tokens, weightedmean_tokens, anything newer */
			s = rg_errorf(RG_ERR_UNSUPPORTED,
				      "%s: %s is not supported (mean_tokens, cls_token, max_tokens, "
				      "lasttoken only)",
				      path, key);
			goto out_put_root;
		}
		n_true++;
	}
	if (n_true != 1) {
		s = rg_errorf(RG_ERR_FORMAT,
			      "%s: exactly one of pooling_mode_mean_tokens / pooling_mode_cls_token / "
			      "pooling_mode_max_tokens / pooling_mode_lasttoken must be true (%d are)",
			      path, n_true);
		goto out_put_root;
	}
	s = RG_OK;
out_put_root:
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

rg_status rg_pooling_config_load(const char *dir, rg_pooling *mode, bool *normalize)
{
	char *path;
	json_object *root = NULL;
	struct stat sb;
	const char *pool_path = NULL;
	size_t n;
	rg_status s = RG_OK;

	*mode = RG_POOL_MEAN;
	*normalize = false;
	path = rg_path_join(dir, "modules.json");
	if (!path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	if (stat(path, &sb) != 0 && errno == ENOENT) {
		struct stat db;
		/* no sentence-transformers extras: defaults, as long as the directory exists */
		if (stat(dir, &db) != 0 || !S_ISDIR(db.st_mode))
			s = rg_errorf(RG_ERR_IO, "%s: not a directory", dir);
		goto out_free_path;
	}
	s = rg_json_read_file(path, RG_CFG_MAX_FILE, &root);
	if (s != RG_OK)
		goto out_free_path;
	if (!json_object_is_type(root, json_type_array)) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: top level is JSON %s, not an array", path,
			      json_type_to_name(json_object_get_type(root)));
		goto out_put_root;
	}
	n = json_object_array_length(root);
	for (size_t i = 0; i < n; i++) {
		json_object *m = json_object_array_get_idx(root, i), *jt, *jp;
		const char *type, *mpath;
		if (!json_object_is_type(m, json_type_object) ||
		    !json_object_object_get_ex(m, "type", &jt) ||
		    !json_object_is_type(jt, json_type_string) ||
		    !json_object_object_get_ex(m, "path", &jp) ||
		    !json_object_is_type(jp, json_type_string)) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: module %zu must be an object with string \"type\" and "
				      "\"path\"",
				      path, i);
			goto out_put_root;
		}
		type = json_object_get_string(jt);
		mpath = json_object_get_string(jp);
		if (!module_path_ok(mpath)) {
			s = rg_errorf(RG_ERR_FORMAT,
				      "%s: module %zu path \"%s\" leaves the model directory", path, i,
				      mpath);
			goto out_put_root;
		}
		if (ends_with(type, "models.Transformer")) {
			continue;
		} else if (ends_with(type, "models.Pooling")) {
			if (pool_path) {
				s = rg_errorf(RG_ERR_FORMAT, "%s: more than one Pooling module", path);
				goto out_put_root;
			}
			pool_path = mpath;
		} else if (ends_with(type, "models.Normalize")) {
			*normalize = true;
		} else if (ends_with(type, "models.Dense")) {
			continue; /* run after pooling (rg_dense_config_load) */
		} else {
			/* a Dense or other module would change the embedding: refuse rather than
			 * silently return something else */
			s = rg_errorf(RG_ERR_UNSUPPORTED,
				      "%s: module type \"%s\" is not supported (Transformer, Pooling, "
				      "Dense, Normalize)",
				      path, type);
			goto out_put_root;
		}
	}
	if (pool_path)
		s = pooling_mode_load(dir, pool_path, mode);
	if (s != RG_OK)
		*normalize = false;
out_put_root:
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

/* One Dense module's <dir>/<module>/config.json into d. */
static rg_status dense_load(const char *dir, const char *module, rg_dense_config *d)
{
	static const struct {
		const char *name;
		rg_dense_act act;
	} acts[] = {{".Identity", RG_DENSE_IDENTITY}, {".Tanh", RG_DENSE_TANH},
		    {".ReLU", RG_DENSE_RELU}, {".Sigmoid", RG_DENSE_SIGMOID},
		    {".GELU", RG_DENSE_GELU}};
	char *mdir, *path;
	json_object *root = NULL, *v;
	const char *act;
	size_t k;
	rg_status s;

	if (!module_path_ok(module) || strlen(module) >= sizeof(d->path))
		return rg_errorf(RG_ERR_FORMAT, "%s: Dense module path \"%s\" leaves the model "
				 "directory or is too long", dir, module);
	snprintf(d->path, sizeof(d->path), "%s", module);
	mdir = rg_path_join(dir, module);
	path = mdir ? rg_path_join(mdir, "config.json") : NULL;
	free(mdir);
	if (!path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	if ((s = rg_json_read_file(path, RG_CFG_MAX_FILE, &root)) != RG_OK)
		goto out_free_path;
	s = RG_ERR_FORMAT;
	if (!json_object_is_type(root, json_type_object)) {
		rg_errorf(s, "%s: top level is not an object", path);
		goto out_put_root;
	}
	for (int i = 0; i < 2; i++) {
		const char *key = i ? "out_features" : "in_features";
		int64_t x;

		if (!json_object_object_get_ex(root, key, &v) ||
		    !json_object_is_type(v, json_type_int) ||
		    (x = json_object_get_int64(v)) < 1 || x > (1 << 20)) {
			rg_errorf(s, "%s: \"%s\" must be an integer in [1, %d]", path, key, 1 << 20);
			goto out_put_root;
		}
		*(i ? &d->out_features : &d->in_features) = (int)x;
	}
	d->bias = true; /* sentence-transformers' default */
	if (json_object_object_get_ex(root, "bias", &v)) {
		if (!json_object_is_type(v, json_type_boolean)) {
			rg_errorf(s, "%s: \"bias\" must be a boolean", path);
			goto out_put_root;
		}
		d->bias = json_object_get_boolean(v);
	}
	act = "torch.nn.modules.activation.Tanh"; /* sentence-transformers' default */
	if (json_object_object_get_ex(root, "activation_function", &v)) {
		if (!json_object_is_type(v, json_type_string)) {
			rg_errorf(s, "%s: \"activation_function\" must be a string", path);
			goto out_put_root;
		}
		act = json_object_get_string(v);
	}
	for (k = 0; k < sizeof(acts) / sizeof(acts[0]) && !ends_with(act, acts[k].name); k++)
		;
	if (k == sizeof(acts) / sizeof(acts[0])) {
		rg_errorf(RG_ERR_UNSUPPORTED, "%s: activation_function \"%s\" is not supported "
			  "(Identity, Tanh, ReLU, Sigmoid, GELU)", path, act);
		s = RG_ERR_UNSUPPORTED;
		goto out_put_root;
	}
	d->act = acts[k].act;
	s = RG_OK;
out_put_root:
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

rg_status rg_dense_config_load(const char *dir, const char *override, rg_dense_config *d, int *n)
{
	char *path;
	json_object *root = NULL;
	struct stat sb;
	size_t len;
	rg_status s = RG_OK;

	*n = 0;
	if (override) {
		if ((s = dense_load(dir, override, &d[0])) == RG_OK)
			*n = 1;
		return s;
	}
	path = rg_path_join(dir, "modules.json");
	if (!path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	if (stat(path, &sb) != 0 && errno == ENOENT)
		goto out_free_path;
	if ((s = rg_json_read_file(path, RG_CFG_MAX_FILE, &root)) != RG_OK)
		goto out_free_path;
	len = json_object_is_type(root, json_type_array) ? json_object_array_length(root) : 0;
	for (size_t i = 0; i < len && s == RG_OK; i++) {
		json_object *m = json_object_array_get_idx(root, i), *jt, *jp;

		/* rg_pooling_config_load has checked the modules' shape */
		if (!json_object_object_get_ex(m, "type", &jt) ||
		    !json_object_object_get_ex(m, "path", &jp) ||
		    !ends_with(json_object_get_string(jt), "models.Dense"))
			continue;
		if (*n == RG_MAX_DENSE) {
			s = rg_errorf(RG_ERR_UNSUPPORTED, "%s: more than %d Dense modules", path,
				      RG_MAX_DENSE);
			break;
		}
		if ((s = dense_load(dir, json_object_get_string(jp), &d[*n])) == RG_OK)
			(*n)++;
	}
	if (s != RG_OK)
		*n = 0;
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

void rg_head_config_free(rg_head_config *h)
{
	for (int i = 0; h->labels && i < h->num_labels; i++)
		free(h->labels[i]);
	free(h->labels);
	memset(h, 0, sizeof(*h));
}

/* id2label: an object of "0".."n-1" -> name; every id once. */
static rg_status read_labels(const char *path, json_object *id2label, rg_head_config *h)
{
	int n = json_object_object_length(id2label);

	if (n < 1 || n > 65536)
		return rg_errorf(RG_ERR_FORMAT, "%s: \"id2label\" has %d entries (1 .. 65536)", path,
				 n);
	h->labels = calloc((size_t)n, sizeof(*h->labels));
	if (!h->labels)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	h->num_labels = n;
	json_object_object_foreach(id2label, key, val)
	{
		char *end;
		long id = strtol(key, &end, 10);

		if (!*key || *end || id < 0 || id >= n || h->labels[id] ||
		    !json_object_is_type(val, json_type_string))
			return rg_errorf(RG_ERR_FORMAT,
					 "%s: \"id2label\" must map the ids 0..%d once each to "
					 "names; bad entry \"%s\"",
					 path, n - 1, key);
		h->labels[id] = strdup(json_object_get_string(val));
		if (!h->labels[id])
			return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	}
	return RG_OK;
}

rg_status rg_head_config_load(const char *dir, rg_head_config *h)
{
	/* heads whose output is not one vector per sequence, or that ragged does not compute */
	static const char *const refused[] = {"ForTokenClassification", "ForQuestionAnswering",
					      "ForMultipleChoice", "ForCausalLM",
					      "ForNextSentencePrediction", "LMHeadModel"};
	json_object *root = NULL, *o;
	const char *arch = NULL, *str;
	char *path;
	rg_status s;

	memset(h, 0, sizeof(*h));
	path = rg_path_join(dir, "config.json");
	if (!path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	if ((s = rg_json_read_file(path, RG_CFG_MAX_FILE, &root)) != RG_OK)
		goto out_free_path;
	if (json_object_object_get_ex(root, "architectures", &o) && o) {
		if (!json_object_is_type(o, json_type_array) ||
		    (json_object_array_length(o) > 0 &&
		     !json_object_is_type(json_object_array_get_idx(o, 0), json_type_string))) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: \"architectures\" must be a list of names",
				      path);
			goto out_put_root;
		}
		if (json_object_array_length(o) > 0)
			arch = json_object_get_string(json_object_array_get_idx(o, 0));
	}
	for (size_t i = 0; arch && i < sizeof(refused) / sizeof(refused[0]); i++)
		if (ends_with(arch, refused[i])) {
			s = rg_errorf(RG_ERR_UNSUPPORTED,
				      "%s: architecture %s is not supported (ragged runs encoders, "
				      "pooled embeddings and *ForSequenceClassification heads)",
				      path, arch);
			goto out_put_root;
		}
	s = RG_OK;
	if (!arch || !ends_with(arch, "ForSequenceClassification"))
		goto out_put_root;
	h->classifier = true;
	if (json_object_object_get_ex(root, "id2label", &o) && o) {
		if (!json_object_is_type(o, json_type_object)) {
			s = rg_errorf(RG_ERR_FORMAT, "%s: \"id2label\" must be an object", path);
			goto out_put_root;
		}
		if ((s = read_labels(path, o, h)) != RG_OK)
			goto out_put_root;
	} else {
		int n;

		if ((s = cfg_int(path, root, "num_labels", false, 2, 1, 65536, &n)) != RG_OK)
			goto out_put_root;
		h->labels = calloc((size_t)n, sizeof(*h->labels));
		if (!h->labels) {
			s = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
			goto out_put_root;
		}
		h->num_labels = n;
		for (int i = 0; i < n; i++) {
			char name[32];

			snprintf(name, sizeof(name), "LABEL_%d", i);
			if (!(h->labels[i] = strdup(name))) {
				s = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
				goto out_put_root;
			}
		}
	}
	if ((s = cfg_str(path, root, "problem_type", "", &str)) != RG_OK)
		goto out_put_root;
	h->multi_label = !strcmp(str, "multi_label_classification");
	if (!strcmp(arch, "DebertaV2ForSequenceClassification")) {
		/* ContextPooler: pooler_hidden_size must be hidden_size, its act gelu or tanh */
		int hs, ps;

		if ((s = cfg_str(path, root, "pooler_hidden_act", "gelu", &str)) != RG_OK)
			goto out_put_root;
		if (strcmp(str, "gelu") && strcmp(str, "tanh")) {
			s = rg_errorf(RG_ERR_UNSUPPORTED,
				      "%s: pooler_hidden_act \"%s\" is not supported (gelu, tanh)", path,
				      str);
			goto out_put_root;
		}
		h->pooler_gelu = !strcmp(str, "gelu");
		if ((s = cfg_int(path, root, "hidden_size", true, 0, 1, RG_CFG_MAX_DIM - 1, &hs)) !=
			    RG_OK ||
		    (s = cfg_int(path, root, "pooler_hidden_size", false, hs, 1, RG_CFG_MAX_DIM - 1,
				 &ps)) != RG_OK)
			goto out_put_root;
		if (ps != hs) {
			s = rg_errorf(RG_ERR_UNSUPPORTED,
				      "%s: pooler_hidden_size %d differs from hidden_size %d (not "
				      "supported)",
				      path, ps, hs);
			goto out_put_root;
		}
	}
out_put_root:
	if (s != RG_OK)
		rg_head_config_free(h);
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

/* ---------------------------------------------------------------- exported helpers */

rg_status rg_cfg_int(const char *path, json_object *root, const char *key, bool required, int def,
		     int64_t lo, int64_t hi, int *v)
{
	return cfg_int(path, root, key, required, def, lo, hi, v);
}

rg_status rg_cfg_str(const char *path, json_object *root, const char *key, const char *def,
		     const char **v)
{
	return cfg_str(path, root, key, def, v);
}

rg_status rg_cfg_bool(const char *path, json_object *root, const char *key, bool def, bool *v)
{
	return cfg_bool(path, root, key, def, v);
}

bool rg_cfg_has(json_object *root, const char *key)
{
	json_object *o;

	return json_object_object_get_ex(root, key, &o) && o;
}

rg_status rg_cfg_double(const char *path, json_object *root, const char *key, double def,
			double lo, double hi, double *v)
{
	json_object *o;
	double x;

	if (!json_object_object_get_ex(root, key, &o) || !o) {
		*v = def;
		return RG_OK;
	}
	if (!json_object_is_type(o, json_type_double) && !json_object_is_type(o, json_type_int))
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" must be a number, got %s %s", path, key,
				 json_type_to_name(json_object_get_type(o)),
				 json_object_to_json_string(o));
	x = json_object_get_double(o);
	if (!(x >= lo && x <= hi)) /* NaN fails */
		return rg_errorf(RG_ERR_FORMAT, "%s: \"%s\" = %s out of range [%g, %g]", path, key,
				 json_object_to_json_string(o), lo, hi);
	*v = x;
	return RG_OK;
}

rg_status rg_cfg_open(const char *dir, json_object **root, char **path)
{
	struct stat sb;
	rg_status s;

	*root = NULL;
	*path = NULL;
	/* say "no such directory" rather than "no config.json in it" */
	if (stat(dir, &sb) != 0)
		return rg_errorf(RG_ERR_IO, "model directory %s: %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return rg_errorf(RG_ERR_IO, "model directory %s: not a directory", dir);
	*path = rg_path_join(dir, "config.json");
	if (!*path)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", dir);
	if ((s = rg_json_read_file(*path, RG_CFG_MAX_FILE, root)) != RG_OK)
		goto out_free_path;
	if (!json_object_is_type(*root, json_type_object)) {
		s = rg_errorf(RG_ERR_FORMAT, "%s: top level is JSON %s, not an object", *path,
			      json_type_to_name(json_object_get_type(*root)));
		json_object_put(*root);
		*root = NULL;
		goto out_free_path;
	}
	return RG_OK;
out_free_path:
	free(*path);
	*path = NULL;
	return s;
}

rg_status rg_config_model_type(const char *dir, char *buf, size_t n)
{
	json_object *root;
	const char *str;
	char *path;
	rg_status s;

	if ((s = rg_cfg_open(dir, &root, &path)) != RG_OK)
		return s;
	if ((s = cfg_str(path, root, "model_type", NULL, &str)) == RG_OK)
		snprintf(buf, n, "%s", str);
	json_object_put(root);
	free(path);
	return s;
}

rg_status rg_cfg_act(const char *path, const char *key, const char *name, unsigned allowed,
		     rg_act *act, const char **canon)
{
	static const struct {
		const char *name, *canon;
		rg_act act;
	} T[] = {
		{"gelu_new", "gelu_new", RG_ACT_GELU_NEW}, {"gelu_pytorch_tanh", "gelu_new", RG_ACT_GELU_NEW},
		{"gelu", "gelu", RG_ACT_GELU},             {"relu", "relu", RG_ACT_RELU},
		{"swish", "swish", RG_ACT_SILU},           {"silu", "silu", RG_ACT_SILU},
	};
	char list[160];
	size_t off = 0;

	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
		if (!strcmp(name, T[i].name) && (allowed & (1u << T[i].act))) {
			*act = T[i].act;
			*canon = T[i].canon;
			return RG_OK;
		}
	list[0] = '\0';
	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]) && off < sizeof(list); i++)
		if (allowed & (1u << T[i].act))
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", off ? ", " : "",
						T[i].name);
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (%s)", path, key,
			 name, list);
}

rg_status rg_cfg_token_id(const char *path, json_object *root, const char *key, int *v)
{
	json_object *o;

	*v = -1;
	if (!json_object_object_get_ex(root, key, &o) || !o)
		return RG_OK;
	if (json_object_is_type(o, json_type_array)) {
		/* Llama 3.1's eos_token_id: several stop ids, the first is the EOS token */
		if (json_object_array_length(o) == 0)
			return RG_OK;
		o = json_object_array_get_idx(o, 0);
	}
	if (!o || !json_object_is_type(o, json_type_int) || json_object_get_int64(o) < 0 ||
	    json_object_get_int64(o) > INT32_MAX)
		return rg_errorf(RG_ERR_FORMAT,
				 "%s: \"%s\" must be a token id or a list of them, got %s", path, key,
				 o ? json_object_to_json_string(o) : "null");
	*v = (int)json_object_get_int64(o);
	return RG_OK;
}

/* ---------------------------------------------------------------- rg_cfg_src */

static void gguf_key_of(const rg_cfg_src *s, const char *gguf_key, char *k, size_t n)
{
	snprintf(k, n, "%s.%s", s->gguf_arch, gguf_key);
}

bool rg_cfg_src_has(const rg_cfg_src *s, const char *key, const char *gguf_key)
{
	char k[160];

	if (s->root)
		return rg_cfg_has(s->root, key);
	if (!s->gguf || !gguf_key)
		return false;
	gguf_key_of(s, gguf_key, k, sizeof(k));
	return rg_gguf_has(s->gguf, k);
}

rg_status rg_cfg_src_int(const rg_cfg_src *s, const char *key, const char *gguf_key,
			 bool required, int def, int64_t lo, int64_t hi, int *v)
{
	char k[160];
	int64_t x;
	rg_status st;

	if (s->root)
		return cfg_int(s->path, s->root, key, required, def, lo, hi, v);
	if (!gguf_key || !s->gguf) {
		if (required)
			return rg_errorf(RG_ERR_FORMAT, "%s: %s has no GGUF metadata key", s->path,
					 key);
		*v = def;
		return RG_OK;
	}
	gguf_key_of(s, gguf_key, k, sizeof(k));
	if (!rg_gguf_has(s->gguf, k)) {
		if (required)
			return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s is missing", s->path, k);
		*v = def;
		return RG_OK;
	}
	if ((st = rg_gguf_get_i64(s->gguf, k, &x)) != RG_OK)
		return rg_error_wrap(st, "%s", s->path);
	if (x < lo || x > hi)
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s = %lld is outside [%lld, %lld]",
				 s->path, k, (long long)x, (long long)lo, (long long)hi);
	*v = (int)x;
	return RG_OK;
}

rg_status rg_cfg_src_double(const rg_cfg_src *s, const char *key, const char *gguf_key,
			    double def, double lo, double hi, double *v)
{
	char k[160];
	float x;
	rg_status st;

	if (s->root)
		return rg_cfg_double(s->path, s->root, key, def, lo, hi, v);
	*v = def;
	if (!gguf_key || !s->gguf)
		return RG_OK;
	gguf_key_of(s, gguf_key, k, sizeof(k));
	if (!rg_gguf_has(s->gguf, k))
		return RG_OK;
	if ((st = rg_gguf_get_f32(s->gguf, k, &x)) != RG_OK)
		return rg_error_wrap(st, "%s", s->path);
	if (!(x >= lo && x <= hi))
		return rg_errorf(RG_ERR_FORMAT, "%s: metadata %s = %g is outside [%g, %g]", s->path,
				 k, (double)x, lo, hi);
	*v = x;
	return RG_OK;
}

rg_status rg_cfg_src_bool(const rg_cfg_src *s, const char *key, const char *gguf_key, bool def,
			  bool *v)
{
	char k[160];
	rg_status st;

	if (s->root)
		return cfg_bool(s->path, s->root, key, def, v);
	*v = def;
	if (!gguf_key || !s->gguf)
		return RG_OK;
	gguf_key_of(s, gguf_key, k, sizeof(k));
	if (rg_gguf_has(s->gguf, k) && (st = rg_gguf_get_bool(s->gguf, k, v)) != RG_OK)
		return rg_error_wrap(st, "%s", s->path);
	return RG_OK;
}

rg_status rg_cfg_src_token_id(const rg_cfg_src *s, const char *key, const char *gguf_key,
			      int vocab_size, int *v)
{
	const bool bos = strstr(gguf_key, "bos") != NULL;
	int64_t x;
	rg_status st;

	if (s->root)
		return rg_cfg_token_id(s->path, s->root, key, v);
	*v = -1;
	if (!s->gguf || !rg_gguf_has(s->gguf, gguf_key))
		return RG_OK;
	if ((st = rg_gguf_get_i64(s->gguf, gguf_key, &x)) != RG_OK) {
		if (bos) /* as before: an unreadable bos id is no bos */
			return RG_OK;
		return rg_error_wrap(st, "%s", s->path);
	}
	if (x < 0 || x >= vocab_size) {
		if (bos)
			return RG_OK;
		return rg_errorf(RG_ERR_FORMAT, "%s: %s %lld is outside the vocabulary [0, %d)",
				 s->path, gguf_key, (long long)x, vocab_size);
	}
	*v = (int)x;
	return RG_OK;
}

rg_status rg_cfg_src_vocab_size(const rg_cfg_src *s, int *v)
{
	uint64_t n = 0;
	rg_status st;

	if (s->root)
		return cfg_int(s->path, s->root, "vocab_size", true, 0, 1, 1 << 24, v);
	if ((st = rg_gguf_get_arr(s->gguf, "tokenizer.ggml.tokens", NULL, &n)) != RG_OK)
		return rg_error_wrap(st, "%s: the vocabulary size comes from tokenizer.ggml.tokens",
				     s->path);
	if (n < 1 || n > (1u << 24))
		return rg_errorf(RG_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", s->path,
				 (unsigned long long)n);
	*v = (int)n;
	return RG_OK;
}
