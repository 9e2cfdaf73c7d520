/* Byte-level BPE tokenizers of decoder models from sources other than tokenizer.json:
 *   - GPT-2's vocab.json + merges.txt, as HF `tokenizers` BPE.from_file + ByteLevel
 *     (transformers' GPT2TokenizerFast: add_prefix_space false, <|endoftext|> special);
 *   - the arrays of a GGUF file's tokenizer.ggml.* metadata (model "gpt2"), with the
 *     pre-tokenizer llama.cpp defines for tokenizer.ggml.pre (src/llama-vocab.cpp,
 *     LLAMA_VOCAB_PRE_TYPE_*) written as the HF pre-tokenizer that the model's original
 *     tokenizer.json has.
 * Both are turned into the tokenizer.json tree they stand for and loaded by tokenizer.c, so the
 * encode, decode and validation paths are the ones tokenizer.json files use. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "core/utf8.h"
#include "core/vec.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

#define RG_TOK_MAX_FILE ((off_t)512 << 20)

/* The parts of GPT-2's tokenizer.json around the model (pre-tokenizer, decoder), as JSON. */
static const char gpt2_skeleton[] =
	"{\"version\": \"1.0\", \"normalizer\": null, "
	"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
	"\"trim_offsets\": true, \"use_regex\": true}, "
	"\"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
	"\"trim_offsets\": false, \"use_regex\": true}, "
	"\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
	"\"use_regex\": true}, \"added_tokens\": []}";

/* A BPE model object owning vocab and merges (both consumed, also on failure). */
static rg_status bpe_model(json_object *vocab, json_object *merges, bool ignore_merges,
			   json_object **out)
{
	json_object *m = json_object_new_object();
	*out = NULL;
	if (!m) {
		json_object_put(vocab);
		json_object_put(merges);
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	}
	json_object_object_add(m, "type", json_object_new_string("BPE"));
	json_object_object_add(m, "dropout", NULL);
	json_object_object_add(m, "unk_token", NULL);
	json_object_object_add(m, "fuse_unk", json_object_new_boolean(0));
	json_object_object_add(m, "byte_fallback", json_object_new_boolean(0));
	json_object_object_add(m, "ignore_merges", json_object_new_boolean(ignore_merges));
	json_object_object_add(m, "vocab", vocab);
	json_object_object_add(m, "merges", merges);
	*out = m;
	return RG_OK;
}

/* Append an added token (special or not; never normalized, stripped or single-word). */
static rg_status added_push(json_object *arr, const char *content, int32_t id, bool special)
{
	json_object *a = json_object_new_object();
	if (!a)
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	json_object_object_add(a, "id", json_object_new_int(id));
	json_object_object_add(a, "content", json_object_new_string(content));
	json_object_object_add(a, "single_word", json_object_new_boolean(0));
	json_object_object_add(a, "lstrip", json_object_new_boolean(0));
	json_object_object_add(a, "rstrip", json_object_new_boolean(0));
	json_object_object_add(a, "normalized", json_object_new_boolean(0));
	json_object_object_add(a, "special", json_object_new_boolean(special));
	if (json_object_array_add(arr, a) != 0) {
		json_object_put(a);
		return rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
	}
	return RG_OK;
}

rg_status rg_tok_gpt2_files_json(const char *dir, json_object **out)
{
	char vpath[4096], mpath[4096];
	struct stat sb;
	json_object *root = NULL, *vocab = NULL, *merges = NULL, *model = NULL;
	char *data = NULL;
	size_t len;
	rg_status st;

	*out = NULL;
	snprintf(vpath, sizeof(vpath), "%s/vocab.json", dir);
	snprintf(mpath, sizeof(mpath), "%s/merges.txt", dir);
	if (stat(vpath, &sb) != 0 || stat(mpath, &sb) != 0)
		return RG_OK; /* not a GPT-2 directory */
	if ((st = rg_json_read_file(vpath, RG_TOK_MAX_FILE, &vocab)) != RG_OK)
		return st;
	if (!json_object_is_type(vocab, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: not a JSON object of token -> id", vpath);
		goto out;
	}
	if ((st = rg_file_read(mpath, RG_TOK_MAX_FILE, &data, &len)) != RG_OK)
		goto out;
	if (!rg_utf8_valid(data, len)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: not UTF-8", mpath);
		goto out;
	}
	/* HF convert_merges_to_hashmap: lines (\n, one \r stripped), "#version" lines skipped, each
	 * other line "a b"; empty lines are skipped here (HF refuses them) */
	if (!(merges = json_object_new_array())) {
		st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
		goto out;
	}
	for (size_t i = 0; i < len;) {
		size_t e = i;
		while (e < len && data[e] != '\n')
			e++;
		size_t next = e < len ? e + 1 : len, k = e;
		if (k > i && data[k - 1] == '\r')
			k--;
		if (k > i && !(k - i >= 8 && memcmp(data + i, "#version", 8) == 0)) {
			json_object *s = json_object_new_string_len(data + i, (int)(k - i));
			if (!s || json_object_array_add(merges, s) != 0) {
				json_object_put(s);
				st = rg_errorf(RG_ERR_OOM, "tokenizer: out of memory");
				goto out;
			}
		}
		i = next;
	}
	if ((st = rg_json_parse(gpt2_skeleton, strlen(gpt2_skeleton), 0, vpath, NULL, &root)) !=
	    RG_OK)
		goto out;
	json_object *eot = rg_tok_jget(vocab, "<|endoftext|>");
	if (eot && json_object_is_type(eot, json_type_int) &&
	    (st = added_push(rg_tok_jget(root, "added_tokens"), "<|endoftext|>",
			     json_object_get_int(eot), true)) != RG_OK)
		goto out;
	st = bpe_model(vocab, merges, false, &model);
	vocab = merges = NULL;
	if (st != RG_OK)
		goto out;
	json_object_object_add(root, "model", model);
	*out = root;
	root = NULL;
out:
	free(data);
	json_object_put(vocab);
	json_object_put(merges);
	json_object_put(root);
	return st;
}

/* ---- GGUF ---- */

typedef enum rg_gguf_pre {
	RG_GGUF_PRE_GPT2,   /* GPT-2's regex */
	RG_GGUF_PRE_DIGITS, /* \p{N} one by one, then GPT-2's regex */
	RG_GGUF_PRE_LLAMA3,
	RG_GGUF_PRE_QWEN2,
} rg_gguf_pre;

/* tokenizer.ggml.pre values and what llama.cpp's llama_vocab::impl::load selects for each: the
 * pre-tokenizer type (its regexes) and ignore_merges (a word that is a token is that token, as
 * Llama 3's tokenizer.json has it). llama.cpp spells GPT-2's "gpt-2"; "gpt2" is taken too. */
static const struct {
	const char *name;
	rg_gguf_pre pre;
	bool ignore_merges;
} gguf_pres[] = {
	{ "gpt2", RG_GGUF_PRE_GPT2, false },	   { "gpt-2", RG_GGUF_PRE_GPT2, false },
	{ "phi-2", RG_GGUF_PRE_GPT2, false },	   { "mpt", RG_GGUF_PRE_GPT2, false },
	{ "olmo", RG_GGUF_PRE_GPT2, false },	   { "smollm", RG_GGUF_PRE_DIGITS, false },
	{ "starcoder", RG_GGUF_PRE_DIGITS, false }, { "refact", RG_GGUF_PRE_DIGITS, false },
	{ "command-r", RG_GGUF_PRE_DIGITS, false }, { "codeshell", RG_GGUF_PRE_DIGITS, false },
	{ "llama-bpe", RG_GGUF_PRE_LLAMA3, true },  { "llama3", RG_GGUF_PRE_LLAMA3, true },
	{ "llama-v3", RG_GGUF_PRE_LLAMA3, true },   { "falcon3", RG_GGUF_PRE_LLAMA3, true },
	{ "dbrx", RG_GGUF_PRE_LLAMA3, false },	   { "smaug-bpe", RG_GGUF_PRE_LLAMA3, false },
	{ "qwen2", RG_GGUF_PRE_QWEN2, false },	   { "deepseek-r1-qwen", RG_GGUF_PRE_QWEN2, false },
	{ "megrez", RG_GGUF_PRE_QWEN2, false },	   { "stablelm2", RG_GGUF_PRE_QWEN2, false },
};

/* The HF pre_tokenizer of p (the model's original tokenizer.json has it). */
static json_object *gguf_pretok(rg_gguf_pre p)
{
	char spec[1024];
	const char *bl_regex = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
			       "\"trim_offsets\": true, \"use_regex\": true}";
	const char *bl_plain = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
			       "\"trim_offsets\": true, \"use_regex\": false}";
	json_object *j = NULL;
	rg_buf pat;

	switch (p) {
	case RG_GGUF_PRE_GPT2:
		snprintf(spec, sizeof(spec), "%s", bl_regex);
		break;
	case RG_GGUF_PRE_DIGITS:
		snprintf(spec, sizeof(spec),
			 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
			 "\"individual_digits\": true}, %s]}",
			 bl_regex);
		break;
	case RG_GGUF_PRE_LLAMA3:
	case RG_GGUF_PRE_QWEN2:
		rg_buf_init(&pat);
		rg_buf_json_str(&pat,
				p == RG_GGUF_PRE_LLAMA3 ? rg_split_llama3_regex : rg_split_qwen2_regex,
				strlen(p == RG_GGUF_PRE_LLAMA3 ? rg_split_llama3_regex
							       : rg_split_qwen2_regex));
		if (pat.oom || !rg_buf_reserve(&pat, 0)) {
			rg_buf_free(&pat);
			return NULL;
		}
		pat.data[pat.len] = '\0';
		snprintf(spec, sizeof(spec),
			 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
			 "\"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": "
			 "false}, %s]}",
			 pat.data, bl_plain);
		rg_buf_free(&pat);
		break;
	}
	if (rg_json_parse(spec, strlen(spec), 0, "gguf", NULL, &j) != RG_OK)
		return NULL;
	return j;
}

/* TemplateProcessing "<bos> $A" (pair "<bos> $A <bos>:1 $B:1"), as Llama 3's tokenizer.json. */
static json_object *bos_template(int32_t bos)
{
	char spec[1024];
	json_object *j = NULL;
	snprintf(spec, sizeof(spec),
		 "{\"type\": \"TemplateProcessing\", "
		 "\"single\": [{\"SpecialToken\": {\"id\": \"bos\", \"type_id\": 0}}, "
		 "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
		 "\"pair\": [{\"SpecialToken\": {\"id\": \"bos\", \"type_id\": 0}}, "
		 "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
		 "{\"SpecialToken\": {\"id\": \"bos\", \"type_id\": 1}}, "
		 "{\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], "
		 "\"special_tokens\": {\"bos\": {\"id\": \"bos\", \"ids\": [%d], "
		 "\"tokens\": [\"bos\"]}}}",
		 (int)bos);
	if (rg_json_parse(spec, strlen(spec), 0, "gguf", NULL, &j) != RG_OK)
		return NULL;
	return j;
}

rg_status rg_tokenizer_from_bpe_arrays(const char *const *tokens, const size_t *token_lens, int n,
				       const char *const *merges, const size_t *merge_lens,
				       int n_merges, const int32_t *token_type, const char *pre,
				       int32_t bos, int32_t eos, bool add_bos, rg_tokenizer **out)
{
	json_object *root = NULL, *vocab = NULL, *marr = NULL, *model = NULL, *added, *pt, *pp;
	char *key = NULL;
	size_t key_cap = 0;
	rg_status st = RG_OK;
	int pi = -1;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gguf tokenizer: NULL out");
	*out = NULL;
	if (!tokens || n <= 0 || n_merges < 0 || (n_merges && !merges))
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "gguf tokenizer: %d tokens and %d merges (need tokens, n > 0)", n,
				 n_merges);
	if (bos < -1 || bos >= n || eos < -1 || eos >= n || (add_bos && bos < 0))
		return rg_errorf(RG_ERR_FORMAT,
				 "gguf tokenizer: bos %d / eos %d outside [-1, %d)%s", (int)bos,
				 (int)eos, n, add_bos && bos < 0 ? " (add_bos without bos)" : "");
	for (size_t i = 0; pre && i < sizeof(gguf_pres) / sizeof(gguf_pres[0]); i++)
		if (strcmp(pre, gguf_pres[i].name) == 0)
			pi = (int)i;
	if (pi < 0)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "gguf tokenizer: tokenizer.ggml.pre \"%s\" is not supported (gpt2, "
				 "smollm, llama-bpe, qwen2 and their llama.cpp aliases)",
				 pre ? pre : "(absent: llama.cpp's default)");

	if ((st = rg_json_parse(gpt2_skeleton, strlen(gpt2_skeleton), 0, "gguf", NULL, &root)) !=
	    RG_OK)
		return st;
	added = rg_tok_jget(root, "added_tokens");
	if (!(vocab = json_object_new_object()) || !(marr = json_object_new_array()))
		goto oom;
	for (int i = 0; i < n; i++) {
		size_t l = token_lens ? token_lens[i] : (tokens[i] ? strlen(tokens[i]) : 0);
		if (!tokens[i] || memchr(tokens[i], 0, l) || !rg_utf8_valid(tokens[i], l)) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "gguf tokenizer: token %d is %s", i,
				       !tokens[i] ? "NULL" : "not UTF-8 without NUL");
			goto out;
		}
		if (!rg_vec_reserve((void **)&key, &key_cap, l + 1, 1, 64))
			goto oom;
		memcpy(key, tokens[i], l);
		key[l] = '\0';
		json_object *v = json_object_new_int(i);
		if (!v || json_object_object_add(vocab, key, v) != 0) {
			json_object_put(v);
			goto oom;
		}
		int32_t ty = token_type ? token_type[i] : 1;
		if (ty < 1 || ty > 6) {
			st = rg_errorf(RG_ERR_FORMAT, "gguf tokenizer: token %d has type %d (1..6)", i,
				       (int)ty);
			goto out;
		}
		/* control and user-defined tokens are matched whole in the text before
		 * pre-tokenization (llama.cpp tokenizer_st_partition; HF added tokens) */
		if ((ty == 3 || ty == 4) && l && (st = added_push(added, key, i, ty == 3)) != RG_OK)
			goto out;
	}
	for (int i = 0; i < n_merges; i++) {
		size_t l = merge_lens ? merge_lens[i] : (merges[i] ? strlen(merges[i]) : 0);
		if (!merges[i]) {
			st = rg_errorf(RG_ERR_FORMAT, "gguf tokenizer: merge %d is NULL", i);
			goto out;
		}
		json_object *s = json_object_new_string_len(merges[i], (int)l);
		if (!s || json_object_array_add(marr, s) != 0) {
			json_object_put(s);
			goto oom;
		}
	}
	st = bpe_model(vocab, marr, gguf_pres[pi].ignore_merges, &model);
	vocab = marr = NULL;
	if (st != RG_OK)
		goto out;
	json_object_object_add(root, "model", model);
	if (!(pt = gguf_pretok(gguf_pres[pi].pre)))
		goto oom;
	json_object_object_add(root, "pre_tokenizer", pt);
	if (add_bos) {
		if (!(pp = bos_template(bos)))
			goto oom;
		json_object_object_add(root, "post_processor", pp);
	}
	st = rg_tokenizer_from_json(root, "gguf tokenizer", out);
	goto out;
oom:
	st = rg_errorf(RG_ERR_OOM, "gguf tokenizer: out of memory");
out:
	free(key);
	json_object_put(vocab);
	json_object_put(marr);
	json_object_put(root);
	return st;
}
