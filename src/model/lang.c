/* Language codes of multilingual translation models (issue 29), as transformers' tokenizers and
 * translation pipeline take them (src_lang / tgt_lang):
 *
 *   mBART-50 (MBart50TokenizerFast)  "en_XX"     source [en_XX] tokens </s>
 *   mBART cc25 (MBartTokenizerFast)  "en_XX"     source tokens </s> [en_XX]
 *   NLLB-200 (NllbTokenizerFast)     "eng_Latn"  source [eng_Latn] tokens </s> (legacy_behaviour:
 *                                                tokens </s> [eng_Latn])
 *   M2M100 (M2M100Tokenizer)         "en"        source [__en__] tokens </s>
 *
 * tgt_lang is forced_bos_token_id = the id of the target's code token in every family
 * (pipeline's _build_translation_inputs). The codes are special added tokens; which ones is
 * tokenizer_config.json's (else special_tokens_map.json's) additional_special_tokens, the list
 * those classes save, restricted to tokens the tokenizer has; a file without the list falls back
 * to the special added tokens shaped like a code of one of the families above (xx_XX, xxx_Xxxx,
 * __xx__). Only model types whose transformers tokenizers take language codes have them
 * (mbart, m2m_100): T5's additional_special_tokens are sentinels, Marian's multilingual models
 * read a ">>xx<<" token in the text.
 *
 * The source's code replaces the one the tokenizer.json template holds (its slot, found at load:
 * rg_tok_params.lang_slot), which gives each family's layout above; a template without a code
 * gets it first (transformers' default prefix). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define LANG_LIST_SHOWN 20 /* codes an error message names before "... (N in all)" */

static int lang_find(const rg_model *m, const char *code);
static rg_status lang_unknown(const rg_model *m, const char *what, const char *code);

/* Whether s has the shape of a language code token: mBART's xx_XX, NLLB's xxx_Xxxx, M2M100's
 * __xx__ / __xxx__. */
static bool lang_shaped(const char *s)
{
	size_t n = strlen(s);

	if (n == 5 && islower((unsigned char)s[0]) && islower((unsigned char)s[1]) &&
	    s[2] == '_' && isupper((unsigned char)s[3]) && isupper((unsigned char)s[4]))
		return true;
	if (n == 8 && s[3] == '_' && isupper((unsigned char)s[4])) {
		for (int i = 0; i < 8; i++)
			if (i != 3 && i != 4 && !islower((unsigned char)s[i]))
				return false;
		return true;
	}
	if ((n == 6 || n == 7) && !strncmp(s, "__", 2) && !strcmp(s + n - 2, "__")) {
		for (size_t i = 2; i < n - 2; i++)
			if (!islower((unsigned char)s[i]))
				return false;
		return true;
	}
	return false;
}

/* Append the special added token `token` (id) as a code; M2M100's "__en__" is code "en". A
 * token already listed is skipped. */
static rg_status lang_push(rg_model *m, const char *token, int32_t id)
{
	size_t n = strlen(token);
	rg_lang_code *l, *v;

	for (int i = 0; i < m->n_langs; i++)
		if (m->langs[i].id == id)
			return RG_OK;
	v = realloc(m->langs, (size_t)(m->n_langs + 1) * sizeof(*v));
	if (!v)
		return rg_errorf(RG_ERR_OOM, "out of host memory (language codes)");
	m->langs = v;
	l = &m->langs[m->n_langs];
	l->id = id;
	l->token = strdup(token);
	if (n > 4 && !strncmp(token, "__", 2) && !strcmp(token + n - 2, "__"))
		l->code = strndup(token + 2, n - 4);
	else
		l->code = strdup(token);
	if (!l->token || !l->code) {
		free(l->token);
		free(l->code);
		return rg_errorf(RG_ERR_OOM, "out of host memory (language codes)");
	}
	m->n_langs++;
	return RG_OK;
}

/* The id of special added token s, or -1. */
static int32_t added_special_id(const rg_tokenizer *t, const char *s)
{
	for (size_t i = 0, n = rg_tokenizer_n_added(t); i < n; i++) {
		int32_t id;
		bool special;
		const char *a = rg_tokenizer_added(t, i, &id, &special);

		if (special && !strcmp(a, s))
			return id;
	}
	return -1;
}

/* additional_special_tokens of <dir>/<file> (strings or AddedToken objects) that are special
 * added tokens, in the file's order; *found: the file has a non-empty list. A file that is
 * absent or not JSON has none (both files are optional). */
static rg_status langs_from_file(rg_model *m, const char *dir, const char *file, bool *found)
{
	char *path = rg_path_join(dir, file);
	json_object *root = NULL, *arr;
	rg_status s = RG_OK;

	*found = false;
	if (!path)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if (rg_json_read_file(path, 64 << 20, &root) != RG_OK) {
		rg_error_clear();
		goto out_free_path;
	}
	if (!json_object_object_get_ex(root, "additional_special_tokens", &arr) ||
	    !json_object_is_type(arr, json_type_array) || json_object_array_length(arr) == 0)
		goto out_put;
	*found = true;
	for (size_t i = 0; s == RG_OK && i < json_object_array_length(arr); i++) {
		json_object *e = json_object_array_get_idx(arr, i), *c;
		int32_t id;

		if (json_object_is_type(e, json_type_object) &&
		    json_object_object_get_ex(e, "content", &c))
			e = c;
		if (!json_object_is_type(e, json_type_string))
			continue;
		if ((id = added_special_id(m->tok, json_object_get_string(e))) >= 0)
			s = lang_push(m, json_object_get_string(e), id);
	}
out_put:
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

/* The source code a text without src_lang gets, as transformers' tokenizers choose it at
 * load: tokenizer_config.json's src_lang when it is a string (MBart50TokenizerFast,
 * NllbTokenizerFast and M2M100Tokenizer then rewrite the template with it), else the class's
 * default when tokenizer_class names one of them (en_XX, eng_Latn, en) and the model has that
 * code; a class that takes no src_lang (PreTrainedTokenizerFast) keeps the tokenizer.json
 * template as it is (m->lang_default -1). A src_lang that is not one of the model's codes is
 * RG_ERR_FORMAT naming them (transformers would put the unknown token in the template). */
static rg_status lang_default_load(rg_model *m, const char *dir)
{
	static const struct { const char *cls, *code; } defaults[] = {
		{"MBart50Tokenizer", "en_XX"}, {"MBartTokenizer", "en_XX"},
		{"NllbTokenizer", "eng_Latn"}, {"M2M100Tokenizer", "en"},
	};
	char *path = rg_path_join(dir, "tokenizer_config.json");
	json_object *root = NULL, *v;
	rg_status s = RG_OK;

	if (!path)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	if (rg_json_read_file(path, 64 << 20, &root) != RG_OK) {
		rg_error_clear(); /* optional file: the template as it is */
		goto out_free_path;
	}
	if (json_object_object_get_ex(root, "src_lang", &v) && json_object_is_type(v, json_type_string)) {
		const char *code = json_object_get_string(v);

		if ((m->lang_default = lang_find(m, code)) < 0) {
			char msg[600];

			lang_unknown(m, "", code);
			snprintf(msg, sizeof(msg), "%s", rg_last_error());
			s = rg_errorf(RG_ERR_FORMAT, "%s: src_lang %s", path, msg);
		}
		goto out_put;
	}
	if (json_object_object_get_ex(root, "tokenizer_class", &v) &&
	    json_object_is_type(v, json_type_string)) {
		const char *cls = json_object_get_string(v);

		for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
			size_t n = strlen(defaults[i].cls);

			if (!strncmp(cls, defaults[i].cls, n) && (!cls[n] || !strcmp(cls + n, "Fast")))
				m->lang_default = lang_find(m, defaults[i].code);
		}
	}
out_put:
	json_object_put(root);
out_free_path:
	free(path);
	return s;
}

rg_status rg_model_langs_load(rg_model *m, const char *dir)
{
	const char *type = m->info.model_type;
	const int32_t *pre, *post;
	int n_pre, n_post;
	bool found = false;
	rg_status s;

	m->lang_slot = m->lang_default = -1;
	if (!m->tok || m->info.kind != RG_MODEL_ENC_DEC ||
	    (strcmp(type, "mbart") && strcmp(type, "m2m_100")))
		return RG_OK;
	if ((s = langs_from_file(m, dir, "tokenizer_config.json", &found)) != RG_OK)
		return s;
	if (!found && (s = langs_from_file(m, dir, "special_tokens_map.json", &found)) != RG_OK)
		return s;
	for (size_t i = 0, n = rg_tokenizer_n_added(m->tok); !found && i < n; i++) {
		int32_t id;
		bool special;
		const char *a = rg_tokenizer_added(m->tok, i, &id, &special);

		if (special && lang_shaped(a) && (s = lang_push(m, a, id)) != RG_OK)
			return s;
	}
	rg_tokenizer_template(m->tok, &pre, &n_pre, &post, &n_post);
	for (int k = 0; k < n_pre + n_post && m->lang_slot < 0; k++)
		for (int i = 0; i < m->n_langs; i++)
			if (m->langs[i].id == (k < n_pre ? pre[k] : post[k - n_pre]))
				m->lang_slot = k;
	return m->n_langs ? lang_default_load(m, dir) : RG_OK;
}

void rg_model_langs_free(rg_model *m)
{
	for (int i = 0; i < m->n_langs; i++) {
		free(m->langs[i].code);
		free(m->langs[i].token);
	}
	free(m->langs);
	m->langs = NULL;
	m->n_langs = 0;
}

int rg_model_lang_count(const rg_model *m)
{
	return m ? m->n_langs : 0;
}

const char *rg_model_lang_code(const rg_model *m, int i, int32_t *id)
{
	if (!m || i < 0 || i >= m->n_langs) {
		if (id)
			*id = -1;
		return NULL;
	}
	if (id)
		*id = m->langs[i].id;
	return m->langs[i].code;
}

/* The message of an unknown code (what: "" or the parameter's name and a space): the model's
 * codes, the first LANG_LIST_SHOWN of them and how many more, or that it has none. */
static rg_status lang_unknown(const rg_model *m, const char *what, const char *code)
{
	char list[LANG_LIST_SHOWN * 20 + 64];
	size_t k = 0;

	if (m->n_langs == 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "%s\"%.64s\": this model (%s) takes no language codes", what, code,
				 m->info.model_type);
	list[0] = '\0';
	for (int i = 0; i < m->n_langs && i < LANG_LIST_SHOWN; i++)
		k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%.16s", i ? ", " : "",
				      m->langs[i].code);
	if (m->n_langs > LANG_LIST_SHOWN)
		snprintf(list + k, sizeof(list) - k, " and %d more", m->n_langs - LANG_LIST_SHOWN);
	return rg_errorf(RG_ERR_INVALID_INPUT,
			 "%s\"%.64s\" is not a language code of this model (%s); its %d codes: %s",
			 what, code, m->info.model_type, m->n_langs, list);
}

/* Index of code (its code or its token: "en" or "__en__"), or -1. */
static int lang_find(const rg_model *m, const char *code)
{
	for (int i = 0; i < m->n_langs; i++)
		if (!strcmp(m->langs[i].code, code) || !strcmp(m->langs[i].token, code))
			return i;
	return -1;
}

rg_status rg_model_lang_id(const rg_model *m, const char *code, int32_t *id)
{
	int i;

	if (id)
		*id = -1;
	if (!m || !code || !id)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_lang_id: NULL argument");
	if ((i = lang_find(m, code)) < 0)
		return lang_unknown(m, "", code);
	*id = m->langs[i].id;
	return RG_OK;
}

rg_status rg_model_lang_params(const rg_model *m, const char *src_lang, rg_tok_params *tp)
{
	int i;

	if (!src_lang && m->lang_default < 0)
		return RG_OK;
	if (!src_lang)
		i = m->lang_default;
	else if ((i = lang_find(m, src_lang)) < 0)
		return lang_unknown(m, "src_lang ", src_lang);
	tp->lang_set = true;
	tp->lang_slot = m->lang_slot;
	tp->lang_id = m->langs[i].id;
	return RG_OK;
}
