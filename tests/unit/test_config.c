/* Unit tests for config.json / modules.json parsing (src/model/config.c). Every refusal asserts
 * the status and that the message names the culprit key (and value where there is one). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/config.h"

#define RG_TMP_PREFIX "rg_cfg_test"
#include "test_tmpdir.h"

static void write_file(const char *name, const char *text)
{
	char p[512];
	FILE *f;
	snprintf(p, sizeof(p), "%s/%s", g_dir, name);
	f = fopen(p, "wb");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void make_subdir(const char *name)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", g_dir, name);
	assert_int_equal(mkdir(p, 0700), 0);
}

/* The all-MiniLM-L6-v2 config, with key `key` replaced by raw JSON `val` (NULL: key removed). */
static const char *const k_base[][2] = {
	{"_name_or_path", "\"nreimers/MiniLM-L6-H384-uncased\""},
	{"architectures", "[\"BertModel\"]"},
	{"attention_probs_dropout_prob", "0.1"},
	{"hidden_act", "\"gelu\""},
	{"hidden_size", "384"},
	{"intermediate_size", "1536"},
	{"layer_norm_eps", "1e-12"},
	{"max_position_embeddings", "512"},
	{"model_type", "\"bert\""},
	{"num_attention_heads", "12"},
	{"num_hidden_layers", "6"},
	{"pad_token_id", "0"},
	{"position_embedding_type", "\"absolute\""},
	{"type_vocab_size", "2"},
	{"vocab_size", "30522"},
};

static void write_config2(const char *k1, const char *v1, const char *k2, const char *v2)
{
	char buf[4096];
	size_t n = 0;
	bool first = true;
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "{\n");
	for (size_t i = 0; i < sizeof(k_base) / sizeof(k_base[0]); i++) {
		const char *v = k_base[i][1];
		if (k1 && !strcmp(k_base[i][0], k1))
			v = v1;
		if (k2 && !strcmp(k_base[i][0], k2))
			v = v2;
		if (!v)
			continue;
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s  \"%s\": %s", first ? "" : ",\n",
				      k_base[i][0], v);
		first = false;
	}
	snprintf(buf + n, sizeof(buf) - n, "\n}\n");
	write_file("config.json", buf);
}

static void write_config(const char *key, const char *val)
{
	write_config2(key, val, NULL, NULL);
}

static void expect_msg(const char *needle)
{
	if (!strstr(rg_last_error(), needle))
		fail_msg("message '%s' does not contain '%s'", rg_last_error(), needle);
}

/* Load config.json and expect status want with every needle in the message. */
static void expect_cfg_fail(rg_status want, ...)
{
	rg_encoder_config cfg;
	rg_status s;
	va_list ap;
	const char *needle;

	rg_error_clear();
	s = rg_encoder_config_load(g_dir, &cfg);
	if (s != want)
		fail_msg("status %s, want %s; message: %s", rg_status_name(s), rg_status_name(want),
			 rg_last_error());
	va_start(ap, want);
	while ((needle = va_arg(ap, const char *)) != NULL)
		expect_msg(needle);
	va_end(ap);
}

static void expect_pool_fail(rg_status want, ...)
{
	rg_pooling mode;
	bool norm;
	rg_status s;
	va_list ap;
	const char *needle;

	rg_error_clear();
	s = rg_pooling_config_load(g_dir, &mode, &norm);
	if (s != want)
		fail_msg("status %s, want %s; message: %s", rg_status_name(s), rg_status_name(want),
			 rg_last_error());
	va_start(ap, want);
	while ((needle = va_arg(ap, const char *)) != NULL)
		expect_msg(needle);
	va_end(ap);
}

/* ---------------------------------------------------------------------------------------------- */

static void test_valid_config(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	write_config(NULL, NULL);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_string_equal(cfg.model_type, "bert");
	assert_int_equal(cfg.vocab_size, 30522);
	assert_int_equal(cfg.hidden_size, 384);
	assert_int_equal(cfg.num_attention_heads, 12);
	assert_int_equal(cfg.num_hidden_layers, 6);
	assert_int_equal(cfg.intermediate_size, 1536);
	assert_int_equal(cfg.max_position_embeddings, 512);
	assert_int_equal(cfg.type_vocab_size, 2);
	assert_int_equal(cfg.pad_token_id, 0);
	assert_int_equal(cfg.hidden_act, RG_ACT_GELU);
	assert_true(cfg.layer_norm_eps == 1e-12);
	assert_string_equal(rg_act_name(cfg.hidden_act), "gelu");
}

static void test_optional_defaults(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	/* drop every optional key: HF BertConfig defaults apply */
	write_file("config.json",
		   "{\"model_type\":\"bert\",\"vocab_size\":100,\"hidden_size\":64,"
		   "\"num_attention_heads\":4,\"num_hidden_layers\":2,\"intermediate_size\":128,"
		   "\"max_position_embeddings\":32,\"pad_token_id\":null}");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.type_vocab_size, 2);
	assert_int_equal(cfg.pad_token_id, 0);
	assert_int_equal(cfg.hidden_act, RG_ACT_GELU);
	assert_true(cfg.layer_norm_eps == 1e-12);
	/* other values of the optional keys */
	write_config2("layer_norm_eps", "1e-05", "type_vocab_size", "1");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_true(cfg.layer_norm_eps == 1e-5);
	assert_int_equal(cfg.type_vocab_size, 1);
}

static void test_activations(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	write_config("hidden_act", "\"gelu_new\"");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.hidden_act, RG_ACT_GELU_NEW);
	assert_string_equal(rg_act_name(cfg.hidden_act), "gelu_new");
	write_config("hidden_act", "\"gelu_pytorch_tanh\"");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.hidden_act, RG_ACT_GELU_NEW);
	write_config("hidden_act", "\"relu\"");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.hidden_act, RG_ACT_RELU);
	assert_string_equal(rg_act_name(cfg.hidden_act), "relu");
	write_config("hidden_act", "\"swish\"");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "hidden_act", "swish", NULL);
	write_config("hidden_act", "\"GELU\"");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "hidden_act", "GELU", NULL);
	write_config("hidden_act", "5");
	expect_cfg_fail(RG_ERR_FORMAT, "hidden_act", "string", NULL);
}

static void test_missing_keys(void **state)
{
	static const char *const required[] = {"model_type",        "vocab_size",
					       "hidden_size",       "num_attention_heads",
					       "num_hidden_layers", "intermediate_size",
					       "max_position_embeddings"};
	(void)state;
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		char want[128];
		write_config(required[i], NULL);
		snprintf(want, sizeof(want), "\"%s\" is missing", required[i]);
		expect_cfg_fail(RG_ERR_FORMAT, "config.json", want, NULL);
	}
	/* null counts as missing for a required key */
	write_config("hidden_size", "null");
	expect_cfg_fail(RG_ERR_FORMAT, "hidden_size", NULL);
}

static void test_wrong_types(void **state)
{
	(void)state;
	write_config("hidden_size", "\"384\"");
	expect_cfg_fail(RG_ERR_FORMAT, "config.json", "\"hidden_size\"", "integer", "\"384\"",
			NULL);
	write_config("num_attention_heads", "12.0");
	expect_cfg_fail(RG_ERR_FORMAT, "num_attention_heads", "integer", NULL);
	write_config("vocab_size", "true");
	expect_cfg_fail(RG_ERR_FORMAT, "vocab_size", "integer", NULL);
	write_config("num_hidden_layers", "[6]");
	expect_cfg_fail(RG_ERR_FORMAT, "num_hidden_layers", NULL);
	write_config("model_type", "3");
	expect_cfg_fail(RG_ERR_FORMAT, "model_type", "string", NULL);
	write_config("layer_norm_eps", "\"1e-12\"");
	expect_cfg_fail(RG_ERR_FORMAT, "layer_norm_eps", "number", NULL);
	write_config("position_embedding_type", "{}");
	expect_cfg_fail(RG_ERR_FORMAT, "position_embedding_type", NULL);
	write_config("type_vocab_size", "\"2\"");
	expect_cfg_fail(RG_ERR_FORMAT, "type_vocab_size", NULL);
}

static void test_unsupported_model_type(void **state)
{
	(void)state;
	write_config("model_type", "\"deberta\"");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "model_type", "deberta", NULL);
	write_config("model_type", "\"gpt2\"");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "model_type", "gpt2", NULL);
	write_config("position_embedding_type", "\"relative_key\"");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "position_embedding_type", "relative_key", NULL);
}

/* RoBERTa / XLM-R: BERT's keys, positions from pad_token_id + 1. */
static void test_roberta_family(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	write_config2("model_type", "\"xlm-roberta\"", "pad_token_id", "1");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_string_equal(cfg.model_type, "xlm-roberta");
	assert_int_equal(cfg.position_offset, 2);
	assert_int_equal(cfg.type_vocab_size, 2);
	write_config2("model_type", "\"roberta\"", "pad_token_id", "511");
	expect_cfg_fail(RG_ERR_FORMAT, "pad_token_id 511", "max_position_embeddings 512", NULL);
	write_config("model_type", "\"bert\"");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.position_offset, 0);
}

/* DistilBERT: its own key names, no token types; its options that ragged does not implement. */
static void test_distilbert_family(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	write_file("config.json",
		   "{\"model_type\":\"distilbert\",\"vocab_size\":30522,\"dim\":768,\"n_heads\":12,"
		   "\"n_layers\":6,\"hidden_dim\":3072,\"activation\":\"gelu\","
		   "\"max_position_embeddings\":512,\"sinusoidal_pos_embds\":false,\"pad_token_id\":0}");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.hidden_size, 768);
	assert_int_equal(cfg.num_attention_heads, 12);
	assert_int_equal(cfg.num_hidden_layers, 6);
	assert_int_equal(cfg.intermediate_size, 3072);
	assert_int_equal(cfg.type_vocab_size, 0);
	assert_int_equal(cfg.position_offset, 0);
	assert_true(fabs(cfg.layer_norm_eps - 1e-12) < 1e-20);
	write_file("config.json",
		   "{\"model_type\":\"distilbert\",\"vocab_size\":30522,\"dim\":768,\"n_heads\":12,"
		   "\"n_layers\":6,\"hidden_dim\":3072,\"activation\":\"silu\","
		   "\"max_position_embeddings\":512}");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "activation", "silu", NULL);
	write_file("config.json",
		   "{\"model_type\":\"distilbert\",\"vocab_size\":30522,\"dim\":768,\"n_heads\":12,"
		   "\"n_layers\":6,\"hidden_dim\":3072,\"max_position_embeddings\":512,"
		   "\"sinusoidal_pos_embds\":true}");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "sinusoidal_pos_embds", NULL);
	/* BERT's key names do not stand in for DistilBERT's */
	write_file("config.json",
		   "{\"model_type\":\"distilbert\",\"vocab_size\":30522,\"hidden_size\":768,"
		   "\"n_heads\":12,\"n_layers\":6,\"hidden_dim\":3072,\"max_position_embeddings\":512}");
	expect_cfg_fail(RG_ERR_FORMAT, "\"dim\"", "missing", NULL);
}

/* ALBERT: embedding_size (default 128, at most intermediate_size), one shared layer group. */
static void test_albert_family(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	write_config2("model_type", "\"albert\"", "hidden_act", NULL);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.embedding_size, 128);
	assert_true(cfg.shared_layers);
	assert_int_equal(cfg.hidden_act, RG_ACT_GELU_NEW); /* AlbertConfig's default */
	write_config2("model_type", "\"albert\"", "architectures",
		      "[\"AlbertModel\"], \"num_hidden_groups\": 2");
	expect_cfg_fail(RG_ERR_FORMAT, "num_hidden_groups", NULL);
	write_config2("model_type", "\"albert\"", "architectures",
		      "[\"AlbertModel\"], \"embedding_size\": 4096");
	expect_cfg_fail(RG_ERR_FORMAT, "embedding_size", NULL);
	write_config(NULL, NULL);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.embedding_size, cfg.hidden_size);
	assert_false(cfg.shared_layers);
}

/* MPNet: BERT's keys without token types, positions from padding_idx 1 whatever pad_token_id
 * says (MPNetEmbeddings), relative_attention_num_buckets 32 by default and never below the 32
 * buckets transformers looks up. */
static void test_mpnet_family(void **state)
{
	static const char *const fmt =
		"{\"model_type\":\"mpnet\",\"vocab_size\":30527,\"hidden_size\":768,"
		"\"num_attention_heads\":12,\"num_hidden_layers\":12,\"intermediate_size\":3072,"
		"\"hidden_act\":\"gelu\",\"max_position_embeddings\":%d,\"layer_norm_eps\":1e-05,"
		"\"pad_token_id\":%d%s}";
	rg_encoder_config cfg;
	char buf[512];
	(void)state;
	snprintf(buf, sizeof(buf), fmt, 514, 1, "");
	write_file("config.json", buf);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_string_equal(cfg.model_type, "mpnet");
	assert_int_equal(cfg.relative_attention_num_buckets, 32);
	assert_int_equal(cfg.padding_idx, 1);
	assert_int_equal(cfg.position_offset, 2);
	assert_int_equal(cfg.type_vocab_size, 0);
	assert_true(fabs(cfg.layer_norm_eps - 1e-5) < 1e-20);
	snprintf(buf, sizeof(buf), fmt, 514, 0, ",\"relative_attention_num_buckets\":48");
	write_file("config.json", buf);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.relative_attention_num_buckets, 48);
	assert_int_equal(cfg.padding_idx, 1);
	assert_int_equal(cfg.position_offset, 2);
	snprintf(buf, sizeof(buf), fmt, 514, 1, ",\"relative_attention_num_buckets\":16");
	write_file("config.json", buf);
	expect_cfg_fail(RG_ERR_FORMAT, "relative_attention_num_buckets 16", "32", NULL);
	snprintf(buf, sizeof(buf), fmt, 514, 1, ",\"relative_attention_num_buckets\":\"32\"");
	write_file("config.json", buf);
	expect_cfg_fail(RG_ERR_FORMAT, "relative_attention_num_buckets", "integer", NULL);
	snprintf(buf, sizeof(buf), fmt, 2, 1, "");
	write_file("config.json", buf);
	expect_cfg_fail(RG_ERR_FORMAT, "padding_idx 1", "max_position_embeddings 2", NULL);
	/* the other families have no bias */
	write_config("model_type", "\"bert\"");
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_int_equal(cfg.relative_attention_num_buckets, 0);
}

/* DeBERTa-v2/v3 (DebertaV2Config): v3-base's keys parse, defaults follow transformers, and what
 * ragged does not compute is refused by name. */
static void test_deberta_family(void **state)
{
	static const char *const fmt =
		"{\"model_type\":\"deberta-v2\",\"vocab_size\":128100,\"hidden_size\":768,"
		"\"num_attention_heads\":12,\"num_hidden_layers\":12,\"intermediate_size\":3072,"
		"\"hidden_act\":\"gelu\",\"max_position_embeddings\":512%s}";
	static const char *const v3 =
		",\"relative_attention\":true,\"position_buckets\":256,\"max_relative_positions\":-1,"
		"\"pos_att_type\":[\"p2c\",\"c2p\"],\"share_att_key\":true,\"norm_rel_ebd\":"
		"\"layer_norm\",\"position_biased_input\":false,\"type_vocab_size\":0,"
		"\"layer_norm_eps\":1e-7";
	static const struct {
		const char *extra, *word;
	} refused[] = {
		{",\"pos_att_type\":[\"c2p\",\"p2p\"]", "p2p"},
		{",\"pos_att_type\":\"p2c|p2p\"", "p2p"},
		{",\"share_att_key\":false", "share_att_key"},
		{",\"conv_kernel_size\":3", "conv_kernel_size"},
		{",\"embedding_size\":128", "embedding_size"},
		{",\"attention_head_size\":32", "attention_head_size"},
		{",\"norm_rel_ebd\":\"layer_norm|other\"", "norm_rel_ebd"},
	};
	rg_encoder_config cfg;
	char buf[1024], extra[512];
	(void)state;

	snprintf(buf, sizeof(buf), fmt, v3);
	write_file("config.json", buf);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_string_equal(cfg.model_type, "deberta-v2");
	assert_true(cfg.relative_attention && cfg.c2p && cfg.p2c && cfg.norm_rel_ebd);
	assert_false(cfg.position_biased_input);
	assert_int_equal(cfg.position_buckets, 256);
	assert_int_equal(cfg.max_relative_positions, 512);
	assert_int_equal(cfg.att_span, 256);
	assert_int_equal(cfg.type_vocab_size, 0);
	assert_int_equal(cfg.position_offset, 0);
	assert_true(fabs(cfg.layer_norm_eps - 1e-7) < 1e-20);
	/* DebertaV2Config's defaults: absolute positions, no relative terms, eps 1e-7; a string
	 * pos_att_type; no buckets: att_span = max_relative_positions */
	snprintf(buf, sizeof(buf), fmt,
		 ",\"relative_attention\":true,\"pos_att_type\":\"C2P | p2c\",\"share_att_key\":true,"
		 "\"max_relative_positions\":64,\"type_vocab_size\":2");
	write_file("config.json", buf);
	assert_int_equal(rg_encoder_config_load(g_dir, &cfg), RG_OK);
	assert_true(cfg.position_biased_input && cfg.c2p && cfg.p2c && !cfg.norm_rel_ebd);
	assert_int_equal(cfg.position_buckets, -1);
	assert_int_equal(cfg.att_span, 64);
	assert_int_equal(cfg.type_vocab_size, 2);
	assert_true(fabs(cfg.layer_norm_eps - 1e-7) < 1e-20);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(extra, sizeof(extra), "%s%s", v3, refused[i].extra);
		snprintf(buf, sizeof(buf), fmt, extra);
		write_file("config.json", buf);
		expect_cfg_fail(RG_ERR_UNSUPPORTED, refused[i].word, NULL, NULL);
	}
	snprintf(extra, sizeof(extra), "%s,\"pos_att_type\":3", v3);
	snprintf(buf, sizeof(buf), fmt, extra);
	write_file("config.json", buf);
	expect_cfg_fail(RG_ERR_FORMAT, "pos_att_type", NULL, NULL);
}

/* Options that change the math and are not implemented are refused by name. */
static void test_refused_options(void **state)
{
	(void)state;
	write_config("architectures", "[\"BertModel\"], \"is_decoder\": true");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "is_decoder", NULL);
	write_config("architectures", "[\"BertModel\"], \"add_cross_attention\": true");
	expect_cfg_fail(RG_ERR_UNSUPPORTED, "add_cross_attention", NULL);
	write_config("architectures", "[\"BertModel\"], \"is_decoder\": \"false\"");
	expect_cfg_fail(RG_ERR_FORMAT, "is_decoder", "true or false", NULL);
	write_config("architectures", "[\"BertModel\"], \"is_decoder\": false");
	expect_cfg_fail(RG_OK, NULL);
}

static void test_bad_sizes(void **state)
{
	(void)state;
	write_config2("hidden_size", "384", "num_attention_heads", "10");
	expect_cfg_fail(RG_ERR_FORMAT, "hidden_size 384", "num_attention_heads 10", "divisible",
			NULL);
	write_config("hidden_size", "0");
	expect_cfg_fail(RG_ERR_FORMAT, "hidden_size", "out of range", NULL);
	write_config("num_hidden_layers", "-1");
	expect_cfg_fail(RG_ERR_FORMAT, "num_hidden_layers", "-1", NULL);
	write_config("intermediate_size", "1048576");
	expect_cfg_fail(RG_ERR_FORMAT, "intermediate_size", "1048576", NULL);
	write_config("vocab_size", "99999999999999999999");
	expect_cfg_fail(RG_ERR_FORMAT, "vocab_size", NULL);
	write_config("max_position_embeddings", "0");
	expect_cfg_fail(RG_ERR_FORMAT, "max_position_embeddings", NULL);
	write_config("pad_token_id", "30522");
	expect_cfg_fail(RG_ERR_FORMAT, "pad_token_id", NULL);
	write_config("layer_norm_eps", "0");
	expect_cfg_fail(RG_ERR_FORMAT, "layer_norm_eps", NULL);
	write_config("layer_norm_eps", "-1e-12");
	expect_cfg_fail(RG_ERR_FORMAT, "layer_norm_eps", NULL);
}

static void test_bad_files(void **state)
{
	rg_encoder_config cfg;
	(void)state;
	expect_cfg_fail(RG_ERR_IO, "config.json", NULL);
	write_file("config.json", "{\"model_type\": \"bert\",");
	expect_cfg_fail(RG_ERR_FORMAT, "config.json", "not valid JSON", NULL);
	write_file("config.json", "[1, 2]");
	expect_cfg_fail(RG_ERR_FORMAT, "config.json", "not an object", NULL);
	write_file("config.json", "{} {}");
	expect_cfg_fail(RG_ERR_FORMAT, "config.json", "trailing", NULL);
	write_file("config.json", "");
	expect_cfg_fail(RG_ERR_FORMAT, "config.json", NULL);
	assert_int_equal(rg_encoder_config_load("/nonexistent/rg_dir", &cfg), RG_ERR_IO);
	expect_msg("model directory /nonexistent/rg_dir");
	expect_msg("No such file");
	write_file("plain", "x");
	{
		char p[512];
		snprintf(p, sizeof(p), "%s/plain", g_dir);
		assert_int_equal(rg_encoder_config_load(p, &cfg), RG_ERR_IO);
		expect_msg("not a directory");
	}
}

/* ---------------------------------------------------------------------------------------------- */

static void write_modules(bool with_normalize)
{
	char buf[1024];
	snprintf(buf, sizeof(buf),
		 "[{\"idx\":0,\"name\":\"0\",\"path\":\"\","
		 "\"type\":\"sentence_transformers.models.Transformer\"},"
		 "{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\","
		 "\"type\":\"sentence_transformers.models.Pooling\"}%s]",
		 with_normalize ? ",{\"idx\":2,\"name\":\"2\",\"path\":\"2_Normalize\","
				  "\"type\":\"sentence_transformers.models.Normalize\"}"
				: "");
	write_file("modules.json", buf);
}

static void write_pooling(const char *mean, const char *cls, const char *max, const char *extra)
{
	char buf[1024];
	snprintf(buf, sizeof(buf),
		 "{\"word_embedding_dimension\": 384, \"pooling_mode_cls_token\": %s,"
		 " \"pooling_mode_mean_tokens\": %s, \"pooling_mode_max_tokens\": %s,"
		 " \"pooling_mode_mean_sqrt_len_tokens\": false%s}",
		 cls, mean, max, extra ? extra : "");
	write_file("1_Pooling/config.json", buf);
}

static void test_pooling_modes(void **state)
{
	rg_pooling mode;
	bool norm;
	(void)state;
	make_subdir("1_Pooling");
	write_modules(true);
	write_pooling("true", "false", "false", NULL);
	assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
	assert_int_equal(mode, RG_POOL_MEAN);
	assert_true(norm);

	write_modules(false);
	write_pooling("false", "true", "false", NULL);
	assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
	assert_int_equal(mode, RG_POOL_CLS);
	assert_false(norm);

	write_pooling("false", "false", "true", NULL);
	assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
	assert_int_equal(mode, RG_POOL_MAX);
	assert_false(norm);
}

static void test_pooling_defaults(void **state)
{
	rg_pooling mode = RG_POOL_MAX;
	bool norm = true;
	(void)state;
	/* no modules.json: mean pooling, no normalization */
	assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
	assert_int_equal(mode, RG_POOL_MEAN);
	assert_false(norm);
	/* Normalize without a Pooling module */
	write_file("modules.json", "[{\"path\":\"2_Normalize\","
				   "\"type\":\"sentence_transformers.models.Normalize\"}]");
	assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
	assert_int_equal(mode, RG_POOL_MEAN);
	assert_true(norm);
	/* a missing directory is an I/O error, not "no extras" */
	assert_int_equal(rg_pooling_config_load("/nonexistent/rg_dir", &mode, &norm), RG_ERR_IO);
	expect_msg("/nonexistent/rg_dir");
}

static void test_pooling_unsupported(void **state)
{
	(void)state;
	make_subdir("1_Pooling");
	write_modules(true);
	write_pooling("false", "false", "false", ", \"pooling_mode_weightedmean_tokens\": true");
	expect_pool_fail(RG_ERR_UNSUPPORTED, "1_Pooling/config.json",
			 "pooling_mode_weightedmean_tokens", NULL);
	write_file("1_Pooling/config.json",
		   "{\"pooling_mode_mean_tokens\": false, \"pooling_mode_mean_sqrt_len_tokens\": true}");
	expect_pool_fail(RG_ERR_UNSUPPORTED, "pooling_mode_mean_sqrt_len_tokens", NULL);
	/* lasttoken is read (decoder embeddings, issue 31; encoders refuse it at load) */
	write_pooling("false", "false", "false", ", \"pooling_mode_lasttoken\": true");
	{
		rg_pooling mode = RG_POOL_MEAN;
		bool norm = false;

		assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
		assert_int_equal(mode, RG_POOL_LAST);
	}
	/* a module ragged does not run would change the output: refused, named (Dense runs) */
	write_file("modules.json", "[{\"path\":\"2_WordWeights\","
				   "\"type\":\"sentence_transformers.models.WordWeights\"}]");
	expect_pool_fail(RG_ERR_UNSUPPORTED, "sentence_transformers.models.WordWeights", NULL);
}

static rg_status dense_load(const char *override, rg_dense_config *d, int *n)
{
	rg_error_clear();
	return rg_dense_config_load(g_dir, override, d, n);
}

/* sentence-transformers Dense modules: read in modules.json's order with their sizes, bias and
 * activation (defaults: bias, Tanh, as sentence-transformers'); --dense-path replaces them; bad
 * configs name the file and key. */
static void test_dense_modules(void **state)
{
	rg_dense_config d[RG_MAX_DENSE];
	int n = -1;
	(void)state;

	assert_int_equal(dense_load(NULL, d, &n), RG_OK); /* no modules.json */
	assert_int_equal(n, 0);
	make_subdir("1_Pooling");
	make_subdir("2_Dense");
	make_subdir("3_Dense");
	make_subdir("2_Dense_1024");
	write_pooling("true", "false", "false", NULL);
	write_file("modules.json",
		   "[{\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},"
		   "{\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"},"
		   "{\"path\":\"2_Dense\",\"type\":\"sentence_transformers.models.Dense\"},"
		   "{\"path\":\"3_Dense\",\"type\":\"sentence_transformers.models.Dense\"},"
		   "{\"path\":\"4_Normalize\",\"type\":\"sentence_transformers.models.Normalize\"}]");
	write_file("2_Dense/config.json", "{\"in_features\": 32, \"out_features\": 24, \"bias\": "
		   "false, \"activation_function\": \"torch.nn.modules.linear.Identity\"}");
	write_file("3_Dense/config.json", "{\"in_features\": 24, \"out_features\": 8}");
	write_file("2_Dense_1024/config.json", "{\"in_features\": 32, \"out_features\": 1024, "
		   "\"activation_function\": \"torch.nn.modules.activation.GELU\"}");
	{
		rg_pooling mode;
		bool norm;

		assert_int_equal(rg_pooling_config_load(g_dir, &mode, &norm), RG_OK);
		assert_true(mode == RG_POOL_MEAN && norm);
	}
	assert_int_equal(dense_load(NULL, d, &n), RG_OK);
	assert_int_equal(n, 2);
	assert_string_equal(d[0].path, "2_Dense");
	assert_true(d[0].in_features == 32 && d[0].out_features == 24 && !d[0].bias);
	assert_int_equal(d[0].act, RG_DENSE_IDENTITY);
	assert_string_equal(d[1].path, "3_Dense");
	assert_true(d[1].in_features == 24 && d[1].out_features == 8 && d[1].bias);
	assert_int_equal(d[1].act, RG_DENSE_TANH);
	assert_int_equal(dense_load("2_Dense_1024", d, &n), RG_OK);
	assert_int_equal(n, 1);
	assert_true(d[0].out_features == 1024 && d[0].act == RG_DENSE_GELU);

	write_file("3_Dense/config.json", "{\"in_features\": 24, \"out_features\": 8, "
		   "\"activation_function\": \"torch.nn.modules.activation.Softmax\"}");
	assert_int_equal(dense_load(NULL, d, &n), RG_ERR_UNSUPPORTED);
	assert_int_equal(n, 0);
	expect_msg("3_Dense/config.json");
	expect_msg("Softmax");
	write_file("3_Dense/config.json", "{\"in_features\": 0, \"out_features\": 8}");
	assert_int_equal(dense_load(NULL, d, &n), RG_ERR_FORMAT);
	expect_msg("in_features");
	write_file("3_Dense/config.json", "{\"in_features\": 24, \"out_features\": 8, "
		   "\"bias\": 1}");
	assert_int_equal(dense_load(NULL, d, &n), RG_ERR_FORMAT);
	expect_msg("\"bias\"");
	assert_int_equal(dense_load("../elsewhere", d, &n), RG_ERR_FORMAT);
	expect_msg("leaves the model directory");
	assert_int_equal(dense_load("no_such_dir", d, &n), RG_ERR_IO);
}

static void test_pooling_malformed(void **state)
{
	(void)state;
	make_subdir("1_Pooling");
	write_modules(false);
	/* none true / two true */
	write_pooling("false", "false", "false", NULL);
	expect_pool_fail(RG_ERR_FORMAT, "1_Pooling/config.json", "exactly one", NULL);
	write_pooling("true", "true", "false", NULL);
	expect_pool_fail(RG_ERR_FORMAT, "exactly one", "(2 are)", NULL);
	/* wrong type */
	write_pooling("1", "false", "false", NULL);
	expect_pool_fail(RG_ERR_FORMAT, "pooling_mode_mean_tokens", "boolean", NULL);
	/* pooling config not JSON */
	write_file("1_Pooling/config.json", "{pooling");
	expect_pool_fail(RG_ERR_FORMAT, "1_Pooling/config.json", "not valid JSON", NULL);
	/* modules.json not JSON / not an array / entry without path */
	write_file("modules.json", "[{\"path\": ");
	expect_pool_fail(RG_ERR_FORMAT, "modules.json", "not valid JSON", NULL);
	write_file("modules.json", "{\"path\": \"1_Pooling\"}");
	expect_pool_fail(RG_ERR_FORMAT, "modules.json", "not an array", NULL);
	write_file("modules.json", "[{\"type\": \"sentence_transformers.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_FORMAT, "modules.json", "module 0", NULL);
	write_file("modules.json", "[{\"path\": 1, \"type\": \"x.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_FORMAT, "modules.json", "module 0", NULL);
}

static void test_pooling_path_escape(void **state)
{
	(void)state;
	write_file("modules.json", "[{\"path\":\"../1_Pooling\","
				   "\"type\":\"sentence_transformers.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_FORMAT, "modules.json", "../1_Pooling", NULL);
	write_file("modules.json", "[{\"path\":\"a/../../etc\","
				   "\"type\":\"sentence_transformers.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_FORMAT, "a/../../etc", NULL);
	write_file("modules.json", "[{\"path\":\"/etc\","
				   "\"type\":\"sentence_transformers.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_FORMAT, "/etc", NULL);
	/* Pooling module whose config.json is missing */
	write_file("modules.json", "[{\"path\":\"1_Pooling\","
				   "\"type\":\"sentence_transformers.models.Pooling\"}]");
	expect_pool_fail(RG_ERR_IO, "1_Pooling/config.json", NULL);
}

/* rg_cfg_act: names to rg_act and their canonical names, refused outside a family's mask with
 * the allowed names listed. */
static void test_cfg_act(void **state)
{
	rg_act a = RG_ACT_NONE;
	const char *c = NULL;
	const unsigned gpt2 = 1u << RG_ACT_GELU_NEW | 1u << RG_ACT_GELU | 1u << RG_ACT_RELU;

	(void)state;
	assert_int_equal(rg_cfg_act("p", "k", "gelu_pytorch_tanh", gpt2, &a, &c), RG_OK);
	assert_int_equal(a, RG_ACT_GELU_NEW);
	assert_string_equal(c, "gelu_new");
	assert_int_equal(rg_cfg_act("p", "k", "swish", 1u << RG_ACT_SILU, &a, &c), RG_OK);
	assert_int_equal(a, RG_ACT_SILU);
	assert_string_equal(c, "swish");
	assert_int_equal(rg_cfg_act("p", "k", "silu", 1u << RG_ACT_SILU, &a, &c), RG_OK);
	assert_string_equal(c, "silu");
	assert_int_equal(rg_cfg_act("/m/config.json", "activation_function", "swish", gpt2, &a, &c),
			 RG_ERR_UNSUPPORTED);
	assert_non_null(strstr(rg_last_error(), "/m/config.json: activation_function \"swish\""));
	assert_non_null(strstr(rg_last_error(), "(gelu_new, gelu_pytorch_tanh, gelu, relu)"));
	assert_int_equal(rg_cfg_act("p", "k", "mish", ~0u, &a, &c), RG_ERR_UNSUPPORTED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_valid_config, case_setup),
		cmocka_unit_test_setup(test_optional_defaults, case_setup),
		cmocka_unit_test_setup(test_activations, case_setup),
		cmocka_unit_test_setup(test_missing_keys, case_setup),
		cmocka_unit_test_setup(test_wrong_types, case_setup),
		cmocka_unit_test_setup(test_unsupported_model_type, case_setup),
		cmocka_unit_test_setup(test_roberta_family, case_setup),
		cmocka_unit_test_setup(test_distilbert_family, case_setup),
		cmocka_unit_test_setup(test_mpnet_family, case_setup),
		cmocka_unit_test_setup(test_deberta_family, case_setup),
		cmocka_unit_test_setup(test_refused_options, case_setup),
		cmocka_unit_test_setup(test_albert_family, case_setup),
		cmocka_unit_test_setup(test_bad_sizes, case_setup),
		cmocka_unit_test_setup(test_bad_files, case_setup),
		cmocka_unit_test_setup(test_pooling_modes, case_setup),
		cmocka_unit_test_setup(test_pooling_defaults, case_setup),
		cmocka_unit_test_setup(test_pooling_unsupported, case_setup),
		cmocka_unit_test_setup(test_pooling_malformed, case_setup),
		cmocka_unit_test_setup(test_pooling_path_escape, case_setup),
		cmocka_unit_test_setup(test_dense_modules, case_setup),
		cmocka_unit_test(test_cfg_act),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
