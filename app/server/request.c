/* JSON request parsing and response formatting for `ragged serve`. See request.h. */
#include "server/request.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

rg_status rg_req_fail(rg_req_error *err, int http, const char *type, const char *fmt, ...)
{
	va_list ap;

	err->http_status = http;
	err->type = type;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return http == 500 ? RG_ERR_OOM : RG_ERR_INVALID_INPUT;
}

rg_status rg_req_failp(rg_req_error *err, const char *param, int http, const char *type,
		       const char *fmt, ...)
{
	va_list ap;

	err->http_status = http;
	err->type = type;
	snprintf(err->param, sizeof(err->param), "%s", param);
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return http == 500 ? RG_ERR_OOM : RG_ERR_INVALID_INPUT;
}

static rg_status copy_text(json_object *s, rg_req_input *in, size_t idx, rg_req_error *err)
{
	const char *p = json_object_get_string(s);
	size_t n = (size_t)json_object_get_string_len(s);

	if (n == 0)
		return rg_req_fail(err, 400, "validation", "input %zu is an empty string", idx);
	if (!rg_utf8_valid(p, n))
		return rg_req_fail(err, 400, "validation", "input %zu is not valid UTF-8", idx);
	in->text = malloc(n + 1);
	if (!in->text)
		return rg_req_fail(err, 500, "backend", "out of memory");
	memcpy(in->text, p, n);
	in->text[n] = '\0';
	in->len = n;
	return RG_OK;
}

/* A JSON array of integers -> token ids; every element must be an int in [0, vocab). Empty
 * arrays only with allow_empty (/decode). */
static rg_status copy_ids_ex(json_object *arr, rg_req_input *in, size_t idx,
			     const rg_req_limits *lim, bool allow_empty, rg_req_error *err)
{
	size_t n = json_object_array_length(arr);

	if (n == 0 && !allow_empty)
		return rg_req_fail(err, 400, "validation", "input %zu is an empty token array", idx);
	in->ids = malloc((n ? n : 1) * sizeof(int32_t));
	if (!in->ids)
		return rg_req_fail(err, 500, "backend", "out of memory");
	in->n_ids = n;
	for (size_t k = 0; k < n; k++) {
		json_object *v = json_object_array_get_idx(arr, k);
		int64_t id;

		if (!json_object_is_type(v, json_type_int))
			return rg_req_fail(err, 400, "validation",
					"input %zu: token %zu is not an integer", idx, k);
		id = json_object_get_int64(v);
		if (id < 0 || id >= lim->vocab_size)
			return rg_req_fail(err, 400, "validation",
					"input %zu: token id %lld out of range [0, %d)", idx,
					(long long)id, lim->vocab_size);
		in->ids[k] = (int32_t)id;
	}
	return RG_OK;
}

static rg_status copy_ids(json_object *arr, rg_req_input *in, size_t idx, const rg_req_limits *lim,
			  rg_req_error *err)
{
	return copy_ids_ex(arr, in, idx, lim, false, err);
}

static rg_status alloc_inputs(rg_request *r, size_t n, const rg_req_limits *lim, const char *what,
			      rg_req_error *err);

static rg_status get_bool(json_object *root, const char *key, bool *dst, rg_req_error *err)
{
	json_object *v;

	if (!json_object_object_get_ex(root, key, &v) || json_object_is_type(v, json_type_null))
		return RG_OK;
	if (!json_object_is_type(v, json_type_boolean))
		return rg_req_failp(err, key, 400, "validation", "\"%s\" must be a boolean", key);
	*dst = json_object_get_boolean(v);
	return RG_OK;
}

/* "truncation_direction": "left" / "right", in either case as TEI accepts them. */
static rg_status get_direction(json_object *root, bool *left, rg_req_error *err)
{
	const char *k = "truncation_direction", *d;
	json_object *v;

	if (!json_object_object_get_ex(root, k, &v) || json_object_is_type(v, json_type_null))
		return RG_OK;
	d = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
	if (d && (!strcmp(d, "left") || !strcmp(d, "Left")))
		*left = true;
	else if (d && (!strcmp(d, "right") || !strcmp(d, "Right")))
		*left = false;
	else
		return rg_req_failp(err, k, 400, "validation",
				 "\"%s\" must be \"left\" or \"right\"", k);
	return RG_OK;
}

/* "prompt_name": a non-empty UTF-8 string (resolved by the server), or null. */
static rg_status get_prompt_name(json_object *root, char **dst, rg_req_error *err)
{
	const char *k = "prompt_name";
	json_object *v;
	size_t n;

	if (!json_object_object_get_ex(root, k, &v) || json_object_is_type(v, json_type_null))
		return RG_OK;
	n = json_object_is_type(v, json_type_string) ? (size_t)json_object_get_string_len(v) : 0;
	if (!n || n > 256 || !rg_utf8_valid(json_object_get_string(v), n) ||
	    memchr(json_object_get_string(v), '\0', n))
		return rg_req_failp(err, k, 400, "validation",
				 "\"%s\" must be a non-empty string of at most 256 bytes", k);
	free(*dst);
	if (!(*dst = strndup(json_object_get_string(v), n)))
		return rg_req_fail(err, 500, "backend", "out of memory");
	return RG_OK;
}

/* "dimensions": an integer >= 1 (the server checks it against the model's output size), null. */
static rg_status get_dimensions(json_object *root, int *dst, rg_req_error *err)
{
	const char *k = "dimensions";
	json_object *v;
	int64_t d;

	if (!json_object_object_get_ex(root, k, &v) || json_object_is_type(v, json_type_null))
		return RG_OK;
	if (!json_object_is_type(v, json_type_int))
		return rg_req_failp(err, k, 400, "validation", "\"%s\" must be an integer", k);
	d = json_object_get_int64(v);
	if (d < 1 || d > INT32_MAX)
		return rg_req_failp(err, k, 400, "validation",
				 "\"%s\" must be at least 1, got %lld", k, (long long)d);
	*dst = (int)d;
	return RG_OK;
}

/* "encoding_format": "float" | "base64" (base64 only where allowed: /v1/embeddings). */
static rg_status get_encoding(json_object *root, bool allow_base64, bool *base64,
			      rg_req_error *err)
{
	const char *k = "encoding_format", *f;
	json_object *v;

	if (!json_object_object_get_ex(root, k, &v) || json_object_is_type(v, json_type_null))
		return RG_OK;
	f = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
	if (!strcmp(f, "float")) {
		*base64 = false;
		return RG_OK;
	}
	if (!strcmp(f, "base64") && allow_base64) {
		*base64 = true;
		return RG_OK;
	}
	if (!strcmp(f, "base64"))
		return rg_req_failp(err, k, 400, "validation",
				 "\"%s\": \"base64\" is answered on /v1/embeddings; this route "
				 "answers JSON floats", k);
	return rg_req_failp(err, k, 400, "validation", "\"%s\" must be \"float\"%s", k,
			 allow_base64 ? " or \"base64\"" : "");
}

/* Refuse a field the route cannot honour (it is not silently ignored). */
static rg_status refuse_field(json_object *root, const char *key, const char *why,
			      rg_req_error *err)
{
	json_object *v;

	if (json_object_object_get_ex(root, key, &v) && !json_object_is_type(v, json_type_null))
		return rg_req_failp(err, key, 400, "validation", "\"%s\" is not supported here: %s",
				 key, why);
	return RG_OK;
}

/* /decode's "ids": [int] (one input) or [[int], ...]; empty arrays decode to "". */
static rg_status parse_decode(json_object *root, const rg_req_limits *lim, rg_request *r,
			      rg_req_error *err)
{
	json_object *v;
	size_t n;
	rg_status st;

	if (!json_object_object_get_ex(root, "ids", &v))
		return rg_req_failp(err, "ids", 400, "validation", "missing \"ids\"");
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, "ids", 400, "validation",
				 "\"ids\" must be an array of token ids or of arrays of them");
	n = json_object_array_length(v);
	if (n == 0 || !json_object_is_type(json_object_array_get_idx(v, 0), json_type_array)) {
		if ((st = alloc_inputs(r, 1, lim, "inputs", err)) != RG_OK)
			return st;
		st = copy_ids_ex(v, &r->inputs[0], 0, lim, true, err);
	} else {
		if ((st = alloc_inputs(r, n, lim, "inputs", err)) != RG_OK)
			return st;
		r->batch = true;
		for (size_t i = 0; i < n && st == RG_OK; i++) {
			json_object *e = json_object_array_get_idx(v, i);

			st = json_object_is_type(e, json_type_array)
				     ? copy_ids_ex(e, &r->inputs[i], i, lim, true, err)
				     : rg_req_fail(err, 400, "validation",
						"input %zu must be an array of token ids", i);
		}
	}
	if (st != RG_OK && !err->param[0])
		snprintf(err->param, sizeof(err->param), "ids");
	return st;
}

/* /similarity: {"inputs": {"source_sentence", "sentences"}, "parameters": {...} | null}; the
 * parameters are read into r by the caller. */
static rg_status parse_similarity(json_object *root, const rg_req_limits *lim, rg_request *r,
				  rg_req_error *err)
{
	json_object *in, *src, *sents;
	size_t n;
	rg_status st;

	if (!json_object_object_get_ex(root, "inputs", &in) ||
	    !json_object_is_type(in, json_type_object))
		return rg_req_failp(err, "inputs", 400, "validation",
				 "\"inputs\" must be {\"source_sentence\": str, \"sentences\": "
				 "[str]}");
	if (!json_object_object_get_ex(in, "source_sentence", &src) ||
	    !json_object_is_type(src, json_type_string))
		return rg_req_failp(err, "inputs.source_sentence", 400, "validation",
				 "\"inputs.source_sentence\" must be a string");
	if (!json_object_object_get_ex(in, "sentences", &sents) ||
	    !json_object_is_type(sents, json_type_array) ||
	    (n = json_object_array_length(sents)) == 0)
		return rg_req_failp(err, "inputs.sentences", 400, "validation",
				 "\"inputs.sentences\" must be a non-empty array of strings");
	if ((st = alloc_inputs(r, n + 1, lim, "inputs (source sentence included)", err)) != RG_OK)
		return st;
	if ((st = copy_text(src, &r->inputs[0], 0, err)) != RG_OK) {
		snprintf(err->param, sizeof(err->param), "inputs.source_sentence");
		return st;
	}
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(sents, i);

		st = json_object_is_type(e, json_type_string)
			     ? copy_text(e, &r->inputs[i + 1], i + 1, err)
			     : rg_req_fail(err, 400, "validation", "sentence %zu must be a string", i);
		if (st != RG_OK) {
			snprintf(err->param, sizeof(err->param), "inputs.sentences");
			return st;
		}
	}
	return RG_OK;
}

/* r->inputs for n inputs: 413 past lim->max_inputs (what: "inputs", "texts"). */
static rg_status alloc_inputs(rg_request *r, size_t n, const rg_req_limits *lim, const char *what,
			      rg_req_error *err)
{
	if (n > lim->max_inputs)
		return rg_req_fail(err, 413, "payload_too_large",
				"%zu %s, more than the limit of %zu per request", n, what,
				lim->max_inputs);
	r->inputs = calloc(n, sizeof(*r->inputs));
	if (!r->inputs)
		return rg_req_fail(err, 500, "backend", "out of memory");
	r->n_inputs = n;
	return RG_OK;
}

/* Fill r->inputs from the "inputs"/"input" value. */
static rg_status parse_inputs(json_object *v, const char *key, bool allow_ids,
			      const rg_req_limits *lim, rg_request *r, rg_req_error *err)
{
	rg_status st;
	size_t n;

	if (json_object_is_type(v, json_type_string)) {
		r->inputs = calloc(1, sizeof(*r->inputs));
		if (!r->inputs)
			return rg_req_fail(err, 500, "backend", "out of memory");
		r->n_inputs = 1;
		return copy_text(v, &r->inputs[0], 0, err);
	}
	if (!json_object_is_type(v, json_type_array))
		return rg_req_fail(err, 400, "validation", "\"%s\" must be a string or an array%s", key,
				allow_ids ? " of strings or token ids" : " of strings");
	n = json_object_array_length(v);
	if (n == 0)
		return rg_req_fail(err, 400, "validation", "\"%s\" is an empty array", key);
	/* [int, int, ...]: one token-id input (OpenAI). */
	if (allow_ids && json_object_is_type(json_object_array_get_idx(v, 0), json_type_int)) {
		r->inputs = calloc(1, sizeof(*r->inputs));
		if (!r->inputs)
			return rg_req_fail(err, 500, "backend", "out of memory");
		r->n_inputs = 1;
		return copy_ids(v, &r->inputs[0], 0, lim, err);
	}
	if ((st = alloc_inputs(r, n, lim, "inputs", err)) != RG_OK)
		return st;
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(v, i);

		if (json_object_is_type(e, json_type_string))
			st = copy_text(e, &r->inputs[i], i, err);
		else if (allow_ids && json_object_is_type(e, json_type_array))
			st = copy_ids(e, &r->inputs[i], i, lim, err);
		else
			st = rg_req_fail(err, 400, "validation", "input %zu must be a %s", i,
				      allow_ids ? "string or an array of token ids" : "string");
		if (st != RG_OK)
			return st;
	}
	return RG_OK;
}

/* A JSON string into (*dst, *len): non-empty, valid UTF-8, a NUL-terminated copy. */
static rg_status copy_str(json_object *s, char **dst, size_t *len, const char *what, size_t idx,
			  rg_req_error *err)
{
	rg_req_input tmp = {0};
	rg_status st;

	if (!json_object_is_type(s, json_type_string))
		return rg_req_fail(err, 400, "validation", "%s %zu must be a string", what, idx);
	if ((st = copy_text(s, &tmp, idx, err)) != RG_OK)
		return st;
	*dst = tmp.text;
	*len = tmp.len;
	return RG_OK;
}

/* One /predict input: a string, or a list of one string or of two (a pair). */
static rg_status predict_input(json_object *v, rg_req_input *in, size_t idx, rg_req_error *err)
{
	size_t n;
	rg_status st;

	if (json_object_is_type(v, json_type_string))
		return copy_text(v, in, idx, err);
	n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
	if (n < 1 || n > 2)
		return rg_req_fail(err, 400, "validation",
				"input %zu must be a string or a list of one or two strings", idx);
	if ((st = copy_str(json_object_array_get_idx(v, 0), &in->text, &in->len, "input", idx,
			   err)) != RG_OK)
		return st;
	if (n == 2)
		return copy_str(json_object_array_get_idx(v, 1), &in->text_b, &in->len_b, "input",
				idx, err);
	return RG_OK;
}

/* Fill r->inputs from /predict's "inputs". */
static rg_status parse_predict(json_object *v, const rg_req_limits *lim, rg_request *r,
			       rg_req_error *err)
{
	size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
	bool batch = n > 0 && json_object_is_type(json_object_array_get_idx(v, 0), json_type_array);
	rg_status st;

	if (!batch)
		n = 1;
	if ((st = alloc_inputs(r, n, lim, "inputs", err)) != RG_OK)
		return st;
	r->batch = batch;
	if (!batch)
		return predict_input(v, &r->inputs[0], 0, err);
	for (size_t i = 0; i < n; i++) {
		st = predict_input(json_object_array_get_idx(v, i), &r->inputs[i], i, err);
		if (st != RG_OK)
			return st;
	}
	return RG_OK;
}

/* Fill r->inputs from /rerank's "query" and "texts": the pairs (query, text_i). */
static rg_status parse_rerank(json_object *root, const rg_req_limits *lim, rg_request *r,
			      rg_req_error *err)
{
	json_object *q, *texts;
	size_t n;
	rg_status st;

	if (!json_object_object_get_ex(root, "query", &q))
		return rg_req_fail(err, 400, "validation", "missing \"query\"");
	if (!json_object_object_get_ex(root, "texts", &texts))
		return rg_req_fail(err, 400, "validation", "missing \"texts\"");
	if (!json_object_is_type(texts, json_type_array) ||
	    (n = json_object_array_length(texts)) == 0)
		return rg_req_fail(err, 400, "validation", "\"texts\" must be a non-empty array");
	if ((st = alloc_inputs(r, n, lim, "texts", err)) != RG_OK)
		return st;
	for (size_t i = 0; i < n; i++) {
		rg_req_input *in = &r->inputs[i];

		if (!json_object_is_type(q, json_type_string))
			return rg_req_fail(err, 400, "validation", "\"query\" must be a string");
		if ((st = copy_str(q, &in->text, &in->len, "query", 0, err)) != RG_OK ||
		    (st = copy_str(json_object_array_get_idx(texts, i), &in->text_b, &in->len_b,
				   "text", i, err)) != RG_OK)
			return st;
	}
	return RG_OK;
}


/* OpenAI's answer to an argument it does not know: a 400 naming it ({"normalise": false} is a
 * typo, not a request for the default). The arguments of /v1/embeddings are OpenAI's and the
 * TEI options ragged honours there. */
static rg_status refuse_unknown(json_object *root, rg_req_error *err)
{
	static const char *const known[] = {"input", "model", "encoding_format", "dimensions",
					    "user", "normalize", "truncate",
					    "truncation_direction", "prompt_name"};

	json_object_object_foreach(root, key, val) {
		size_t k = 0;

		(void)val;
		while (k < sizeof(known) / sizeof(known[0]) && strcmp(key, known[k]))
			k++;
		if (k == sizeof(known) / sizeof(known[0]))
			return rg_req_failp(err, key, 400, "validation",
					 "unrecognized request argument supplied: %.100s", key);
	}
	return RG_OK;
}

/* The optional fields of every route, read after the inputs. TEI ignores unknown fields, and so
 * do TEI's routes here; /v1/embeddings refuses them afterwards (refuse_unknown). */
static rg_status parse_options(rg_route route, json_object *root, rg_request *out,
			       rg_req_error *err)
{
	bool openai = route == RG_ROUTE_OPENAI;
	rg_status st;
	json_object *v, *params = root;

	if (route == RG_ROUTE_SIMILARITY) {
		/* TEI: the options sit in "parameters" (null or absent: defaults) */
		if (json_object_object_get_ex(root, "parameters", &params) &&
		    !json_object_is_type(params, json_type_null) &&
		    !json_object_is_type(params, json_type_object))
			return rg_req_failp(err, "parameters", 400, "validation",
					 "\"parameters\" must be an object");
		if (!params || json_object_is_type(params, json_type_null))
			return RG_OK;
		if ((st = get_bool(params, "truncate", &out->truncate, err)) != RG_OK ||
		    (st = get_direction(params, &out->truncate_left, err)) != RG_OK ||
		    (st = get_prompt_name(params, &out->prompt_name, err)) != RG_OK)
			return st;
		return RG_OK;
	}
	if (route == RG_ROUTE_DECODE)
		return get_bool(root, "skip_special_tokens", &out->skip_special_tokens, err);
	if ((st = get_bool(root, "raw_scores", &out->raw_scores, err)) != RG_OK ||
	    (st = get_bool(root, "return_text", &out->return_text, err)) != RG_OK ||
	    (st = get_bool(root, "truncate", &out->truncate, err)) != RG_OK ||
	    (st = get_direction(root, &out->truncate_left, err)) != RG_OK)
		return st;
	if (route == RG_ROUTE_EMBED_ALL) {
		if ((st = refuse_field(root, "normalize", "/embed_all returns the raw last hidden "
				       "states", err)) != RG_OK ||
		    (st = refuse_field(root, "dimensions", "/embed_all returns every hidden "
				       "dimension", err)) != RG_OK ||
		    (st = get_encoding(root, false, &out->base64, err)) != RG_OK)
			return st;
	}
	if (route == RG_ROUTE_EMBED || route == RG_ROUTE_OPENAI || route == RG_ROUTE_TOKENIZE ||
	    route == RG_ROUTE_EMBED_ALL) {
		if ((st = get_prompt_name(root, &out->prompt_name, err)) != RG_OK)
			return st;
	}
	if (route == RG_ROUTE_TOKENIZE &&
	    (st = get_bool(root, "add_special_tokens", &out->add_special_tokens, err)) != RG_OK)
		return st;
	if (route == RG_ROUTE_EMBED || openai || route == RG_ROUTE_TOKENIZE ||
	    route == RG_ROUTE_PREDICT || route == RG_ROUTE_RERANK) {
		if ((st = get_bool(root, "normalize", &out->normalize, err)) != RG_OK)
			return st;
	}
	if (route == RG_ROUTE_EMBED || openai) {
		if ((st = get_dimensions(root, &out->dimensions, err)) != RG_OK ||
		    (st = get_encoding(root, openai, &out->base64, err)) != RG_OK)
			return st;
	}
	if (!openai)
		return RG_OK;
	if (json_object_object_get_ex(root, "model", &v) && !json_object_is_type(v, json_type_null)) {
		if (!json_object_is_type(v, json_type_string))
			return rg_req_failp(err, "model", 400, "validation", "\"model\" must be a string");
		if (!rg_utf8_valid(json_object_get_string(v), (size_t)json_object_get_string_len(v)))
			return rg_req_failp(err, "model", 400, "validation",
					 "\"model\" is not valid UTF-8");
		out->model = strndup(json_object_get_string(v), (size_t)json_object_get_string_len(v));
		if (!out->model)
			return rg_req_fail(err, 500, "backend", "out of memory");
	}
	if (json_object_object_get_ex(root, "user", &v) && !json_object_is_type(v, json_type_null) &&
	    !json_object_is_type(v, json_type_string))
		return rg_req_failp(err, "user", 400, "validation", "\"user\" must be a string");
	return RG_OK;
}

rg_status rg_req_parse_object(const char *body, size_t len, int max_depth, json_object **root,
			      rg_req_error *err)
{
	json_tokener *tok;
	enum json_tokener_error jerr;
	json_object *o;
	char msg[200], key[64];
	rg_status st;
	long bad;

	*root = NULL;
	if (len == 0)
		return rg_req_fail(err, 400, "validation", "empty body; expected a JSON object");
	if (len > (size_t)INT32_MAX)
		return rg_req_fail(err, 413, "payload_too_large", "body too large");
	if ((bad = rg_json_find_unpaired_surrogate(body, len)) >= 0)
		return rg_req_fail(err, 400, "validation",
				   "invalid \\u escape at byte %ld: unpaired UTF-16 surrogate", bad);
	tok = json_tokener_new_ex(max_depth > 0 ? max_depth : 32);
	if (!tok)
		return rg_req_fail(err, 500, "backend", "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	o = json_tokener_parse_ex(tok, body, (int)len);
	jerr = json_tokener_get_error(tok);
	if (!o || jerr != json_tokener_success) {
		json_object_put(o);
		json_tokener_free(tok);
		return rg_req_fail(err, 400, "validation", "malformed JSON: %s",
				   jerr == json_tokener_continue ? "unexpected end of input"
								 : json_tokener_error_desc(jerr));
	}
	/* Only whitespace may follow the value. */
	for (size_t i = json_tokener_get_parse_end(tok); i < len; i++) {
		char c = body[i];

		if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
			json_object_put(o);
			json_tokener_free(tok);
			return rg_req_fail(err, 400, "validation", "malformed JSON: trailing data");
		}
	}
	json_tokener_free(tok);
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return rg_req_fail(err, 400, "validation", "body must be a JSON object");
	}
	/* a repeated key (json-c keeps the last) or an integer json-c saturated: refused */
	if ((st = rg_json_text_check(body, len, o, msg, sizeof(msg), key, sizeof(key))) != RG_OK) {
		json_object_put(o);
		return rg_req_failp(err, key, st == RG_ERR_OOM ? 500 : 400,
				    st == RG_ERR_OOM ? "backend" : "validation", "%s", msg);
	}
	*root = o;
	return RG_OK;
}

rg_status rg_request_parse(rg_route route, const char *body, size_t len, const rg_req_limits *lim,
			   rg_request *out, rg_req_error *err)
{
	json_object *root = NULL, *v;
	rg_status st = RG_OK;
	bool openai = route == RG_ROUTE_OPENAI;
	const char *key = openai ? "input" : "inputs";

	memset(out, 0, sizeof(*out));
	out->route = route;
	out->normalize = true;
	out->add_special_tokens = true;
	out->skip_special_tokens = true;
	out->truncate = lim->auto_truncate;
	err->http_status = 0;
	err->type = "";
	err->msg[0] = '\0';
	err->param[0] = '\0';
	if (route != RG_ROUTE_EMBED && route != RG_ROUTE_OPENAI && route != RG_ROUTE_TOKENIZE &&
	    route != RG_ROUTE_PREDICT && route != RG_ROUTE_RERANK && route != RG_ROUTE_EMBED_ALL &&
	    route != RG_ROUTE_SIMILARITY && route != RG_ROUTE_DECODE)
		return rg_req_fail(err, 400, "validation", "route takes no JSON body");
	if ((st = rg_req_parse_object(body, len, lim->max_depth, &root, err)) != RG_OK)
		return st;
	if (route == RG_ROUTE_RERANK) {
		st = parse_rerank(root, lim, out, err);
	} else if (route == RG_ROUTE_DECODE) {
		st = parse_decode(root, lim, out, err);
	} else if (route == RG_ROUTE_SIMILARITY) {
		st = parse_similarity(root, lim, out, err);
	} else if (!json_object_object_get_ex(root, key, &v)) {
		st = rg_req_failp(err, key, 400, "validation", "missing \"%s\"", key);
	} else if (route == RG_ROUTE_PREDICT) {
		st = parse_predict(v, lim, out, err);
	} else {
		st = parse_inputs(v, key, openai || route == RG_ROUTE_EMBED ||
					       route == RG_ROUTE_EMBED_ALL, lim, out, err);
	}
	if (st != RG_OK && !err->param[0] && route != RG_ROUTE_RERANK)
		snprintf(err->param, sizeof(err->param), "%s", key);
	if (st == RG_OK)
		st = parse_options(route, root, out, err);
	if (st == RG_OK && openai)
		st = refuse_unknown(root, err);
	if (st != RG_OK)
		rg_request_free(out);
	json_object_put(root);
	return st;
}

void rg_request_free(rg_request *r)
{
	for (size_t i = 0; r->inputs && i < r->n_inputs; i++) {
		free(r->inputs[i].text);
		free(r->inputs[i].text_b);
		free(r->inputs[i].ids);
	}
	free(r->inputs);
	free(r->model);
	free(r->prompt_name);
	memset(r, 0, sizeof(*r));
}

/* ---- response buffer ---------------------------------------------------------------------- */

void rg_json_error_body(rg_buf *b, const char *msg, const char *type)
{
	size_t n = strlen(msg);

	rg_buf_puts(b, "{\"error\":");
	/* Messages may quote client bytes; never emit invalid UTF-8 in JSON. */
	if (rg_utf8_valid(msg, n))
		rg_buf_json_str(b, msg, n);
	else
		rg_buf_json_str(b, "(message not valid UTF-8)", 25);
	rg_buf_puts(b, ",\"error_type\":");
	rg_buf_json_str(b, type, strlen(type));
	rg_buf_puts(b, "}");
}

/* A JSON string, or null for NULL / "" (and for invalid UTF-8, which JSON cannot carry). */
static void json_str_or_null(rg_buf *b, const char *s)
{
	if (s && *s && rg_utf8_valid(s, strlen(s)))
		rg_buf_json_str(b, s, strlen(s));
	else
		rg_buf_puts(b, "null");
}

void rg_json_openai_error_body(rg_buf *b, const char *msg, const char *type, const char *param,
			       const char *code)
{
	size_t n = strlen(msg);

	rg_buf_puts(b, "{\"error\":{\"message\":");
	if (rg_utf8_valid(msg, n))
		rg_buf_json_str(b, msg, n);
	else
		rg_buf_json_str(b, "(message not valid UTF-8)", 25);
	rg_buf_puts(b, ",\"type\":");
	rg_buf_json_str(b, type, strlen(type));
	rg_buf_puts(b, ",\"param\":");
	json_str_or_null(b, param);
	rg_buf_puts(b, ",\"code\":");
	json_str_or_null(b, code);
	rg_buf_puts(b, "}}");
}
