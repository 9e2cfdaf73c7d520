/* The generation routes' JSON: request parsing and answers. See gen_request.h.
 *
 * Rules followed, by API:
 *   OpenAI Completions / Chat Completions API reference, with vLLM's extensions and vLLM's
 *   SamplingParams checks (protocol.py, sampling_params.py: beam search wants temperature 0 and
 *   no top_p/top_k/min_p; length_penalty and early_stopping only with beams; min_tokens <=
 *   max_tokens; top_k -1 means off);
 *   TGI's router (router/src/lib.rs GenerateParameters, default_parameters; validation.rs
 *   Validation::validate; server.rs generate / generate_stream): temperature > 0, top_p and
 *   typical_p in (0, 1), top_k > 0, repetition_penalty > 0, frequency_penalty in [-2, 2],
 *   max_new_tokens > 0, truncate > 0, best_of > 1 needs sampling, no seed and no stream,
 *   decoder_input_details not on the stream, and a body without "parameters" samples
 *   (default_parameters has do_sample true).
 * Answers are written by hand into an rg_buf (no json-c objects): every string goes through
 * put_str, which replaces bytes that are not UTF-8 by U+FFFD, so an answer is always valid
 * UTF-8 JSON whatever a token's bytes are. */
#include "server/gen_request.h"


#include <ctype.h>
#include <float.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

/* vLLM's floor for a log-probability of -inf (JSON has no infinities). */
#define LP_FLOOR "-9999.0"

static rg_status oom(rg_req_error *err)
{
	return rg_req_fail(err, 500, "backend", "out of memory");
}

/* ---- reading fields ------------------------------------------------------------------------ */

/* o[key], or NULL when absent or null (every optional field reads null as absent). */
static json_object *opt(json_object *o, const char *key)
{
	json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return NULL;
	return v;
}

static rg_status get_bool(json_object *o, const char *key, bool *dst, rg_req_error *err)
{
	json_object *v = opt(o, key);

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_boolean))
		return rg_req_failp(err, key, 400, "validation", "%s must be a boolean", key);
	*dst = json_object_get_boolean(v);
	return RG_OK;
}

/* An integer in [lo, hi]; *set (may be NULL) tells whether it was there. json-c reads integers
 * past the 64-bit range as the nearest bound, which the range check then refuses. */
static rg_status get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *dst,
			 bool *set, rg_req_error *err)
{
	json_object *v = opt(o, key);
	int64_t x;

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_int))
		return rg_req_failp(err, key, 400, "validation", "%s must be an integer", key);
	x = json_object_get_int64(v);
	if (x == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX)
		return rg_req_failp(err, key, 400, "validation", "%s must be in [%lld, %lld], got %llu",
				 key, (long long)lo, (long long)hi,
				 (unsigned long long)json_object_get_uint64(v));
	if (x < lo || x > hi)
		return rg_req_failp(err, key, 400, "validation", "%s must be in [%lld, %lld], got %lld",
				 key, (long long)lo, (long long)hi, (long long)x);
	*dst = x;
	if (set)
		*set = true;
	return RG_OK;
}

static rg_status get_int32(json_object *o, const char *key, int64_t lo, int64_t hi, int *dst,
			   bool *set, rg_req_error *err)
{
	int64_t x = *dst;
	rg_status st = get_int(o, key, lo, hi, &x, set, err);

	*dst = (int)x;
	return st;
}

enum { LO_OPEN = 1, HI_OPEN = 2 };

/* A finite number in the range lo..hi (open ends per `open`; hi INFINITY: no upper bound),
 * checked as the float it is stored as (1e300 is no finite float, 1e-60 no positive one). The
 * message writes the range as the APIs' documents do: "[0, 2]", "(0, 1]", "> 0". */
static rg_status get_num(json_object *o, const char *key, double lo, double hi, unsigned open,
			 float *dst, bool *set, rg_req_error *err)
{
	json_object *v = opt(o, key);
	double x;
	float f;
	char range[64];

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return rg_req_failp(err, key, 400, "validation", "%s must be a number", key);
	x = json_object_get_double(v);
	f = fabs(x) <= FLT_MAX ? (float)x : (float)INFINITY; /* no out-of-range conversion */
	if (isfinite(f) && (open & LO_OPEN ? f > lo : f >= lo) &&
	    (open & HI_OPEN ? f < hi : f <= hi)) {
		*dst = f;
		if (set)
			*set = true;
		return RG_OK;
	}
	if (isinf(hi))
		snprintf(range, sizeof(range), "%s %g", open & LO_OPEN ? ">" : ">=", lo);
	else
		snprintf(range, sizeof(range), "in %c%g, %g%c", open & LO_OPEN ? '(' : '[', lo, hi,
			 open & HI_OPEN ? ')' : ']');
	return rg_req_failp(err, key, 400, "validation", "%s must be %s and finite, got %g", key,
			 range, x);
}

/* A JSON string into (*dst, *len): valid UTF-8, non-empty unless allow_empty, no NUL byte
 * unless allow_nul (a C string field cannot carry one); a NUL-terminated copy. */
static rg_status copy_str(json_object *s, const char *param, bool allow_empty, bool allow_nul,
			  char **dst, size_t *len, rg_req_error *err)
{
	const char *p;
	size_t n;

	if (!json_object_is_type(s, json_type_string))
		return rg_req_failp(err, param, 400, "validation", "%s must be a string", param);
	p = json_object_get_string(s);
	n = (size_t)json_object_get_string_len(s);
	if (n == 0 && !allow_empty)
		return rg_req_failp(err, param, 400, "validation", "%s is an empty string", param);
	if (!rg_utf8_valid(p, n))
		return rg_req_failp(err, param, 400, "validation", "%s is not valid UTF-8", param);
	if (!allow_nul && memchr(p, '\0', n))
		return rg_req_failp(err, param, 400, "validation", "%s contains a NUL character",
				 param);
	if (!(*dst = malloc(n + 1)))
		return oom(err);
	memcpy(*dst, p, n);
	(*dst)[n] = '\0';
	if (len)
		*len = n;
	return RG_OK;
}

/* An optional string field (null: absent) into *dst (NULL stays when absent). */
static rg_status get_str(json_object *o, const char *key, char **dst, rg_req_error *err)
{
	json_object *v = opt(o, key);

	return v ? copy_str(v, key, true, false, dst, NULL, err) : RG_OK;
}

/* A field that must be one of the JSON types in `types` (bit mask of 1 << json_type) or null;
 * the value itself is ignored (OpenAI's harmless bookkeeping fields). */
static rg_status check_type(json_object *o, const char *key, unsigned types, const char *what,
			    rg_req_error *err)
{
	json_object *v = opt(o, key);

	if (v && !(types & (1u << json_object_get_type(v))))
		return rg_req_failp(err, key, 400, "validation", "%s must be %s", key, what);
	return RG_OK;
}

/* A JSON array of token ids, each in [0, vocab), into a new array; empty arrays refused. */
static rg_status copy_ids(json_object *arr, const char *param, const rg_gen_limits *lim,
			  int32_t **dst, int *n_dst, rg_req_error *err)
{
	size_t n = json_object_array_length(arr);

	if (n == 0)
		return rg_req_failp(err, param, 400, "validation", "%s is an empty token array", param);
	if (n > INT_MAX)
		return rg_req_failp(err, param, 413, "payload_too_large", "%s has too many tokens",
				 param);
	if (!(*dst = malloc(n * sizeof(**dst))))
		return oom(err);
	*n_dst = (int)n;
	for (size_t k = 0; k < n; k++) {
		json_object *v = json_object_array_get_idx(arr, k);
		int64_t id;

		if (!json_object_is_type(v, json_type_int))
			return rg_req_failp(err, param, 400, "validation",
					 "%s: token %zu is not an integer", param, k);
		id = json_object_get_int64(v);
		if (id < 0 || id >= lim->vocab_size)
			return rg_req_failp(err, param, 400, "validation",
					 "%s: token id %lld out of range [0, %d)", param,
					 (long long)id, lim->vocab_size);
		(*dst)[k] = (int32_t)id;
	}
	return RG_OK;
}

/* ---- prompts and messages ------------------------------------------------------------------ */

static rg_status alloc_prompts(rg_gen_request *r, size_t n, const rg_gen_limits *lim,
			       const char *param, rg_req_error *err)
{
	if (n > (size_t)lim->max_prompts)
		return rg_req_failp(err, param, 413, "payload_too_large",
				 "%s has %zu prompts; at most %d per request", param, n,
				 lim->max_prompts);
	r->texts = calloc(n, sizeof(*r->texts));
	r->text_lens = calloc(n, sizeof(*r->text_lens));
	r->ids = calloc(n, sizeof(*r->ids));
	r->n_ids = calloc(n, sizeof(*r->n_ids));
	if (!r->texts || !r->text_lens || !r->ids || !r->n_ids)
		return oom(err);
	r->n_prompts = (int)n;
	return RG_OK;
}

/* Completions' "prompt" (and /translate's "inputs": key names the field): a string, [string],
 * [int] (one prompt of ids) or [[int]]. The list forms are not mixed (OpenAI's schema is one of
 * the four). r->inputs_list: a list of prompts (not one string or one list of ids). */
static rg_status parse_prompt(json_object *root, const char *key, const rg_gen_limits *lim,
			      rg_gen_request *r, rg_req_error *err)
{
	json_object *v = opt(root, key), *e0;
	char param[48];
	size_t n;
	bool strings;
	rg_status st;

	if (!v)
		return rg_req_failp(err, key, 400, "validation", "missing %s", key);
	if (json_object_is_type(v, json_type_string)) {
		if ((st = alloc_prompts(r, 1, lim, key, err)) != RG_OK)
			return st;
		return copy_str(v, key, false, true, &r->texts[0], &r->text_lens[0], err);
	}
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, key, 400, "validation",
				 "%s must be a string, a list of strings, a list of token ids "
				 "or a list of lists of token ids", key);
	if ((n = json_object_array_length(v)) == 0)
		return rg_req_failp(err, key, 400, "validation", "%s is an empty list", key);
	e0 = json_object_array_get_idx(v, 0);
	if (json_object_is_type(e0, json_type_int)) {
		if ((st = alloc_prompts(r, 1, lim, key, err)) != RG_OK)
			return st;
		return copy_ids(v, key, lim, &r->ids[0], &r->n_ids[0], err);
	}
	strings = json_object_is_type(e0, json_type_string);
	snprintf(param, sizeof(param), "%s[0]", key);
	if (!strings && !json_object_is_type(e0, json_type_array))
		return rg_req_failp(err, param, 400, "validation",
				 "%s must be a string, a token id or a list of token ids", param);
	if ((st = alloc_prompts(r, n, lim, key, err)) != RG_OK)
		return st;
	r->inputs_list = true;
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(v, i);

		snprintf(param, sizeof(param), "%s[%zu]", key, i);
		if (strings)
			st = copy_str(e, param, false, true, &r->texts[i], &r->text_lens[i], err);
		else if (json_object_is_type(e, json_type_array))
			st = copy_ids(e, param, lim, &r->ids[i], &r->n_ids[i], err);
		else
			st = rg_req_failp(err, param, 400, "validation",
				       "%s must be a list of token ids like %s[0]", param, key);
		if (st != RG_OK)
			return st;
	}
	return RG_OK;
}

/* One message's "content": a string, or a list of {"type": "text", "text": str} parts joined
 * with no separator; null or absent only for an assistant message (a reply that called tools,
 * read as ""). */
static rg_status parse_content(json_object *m, size_t i, bool assistant, rg_gen_message *msg,
			       rg_req_error *err)
{
	json_object *v = opt(m, "content");
	char param[48];
	size_t n, total = 0;

	snprintf(param, sizeof(param), "messages[%zu].content", i);
	if (!v && assistant) {
		if (!(msg->content = calloc(1, 1)))
			return oom(err);
		return RG_OK;
	}
	if (!v)
		return rg_req_failp(err, param, 400, "validation", "%s is missing", param);
	if (json_object_is_type(v, json_type_string))
		return copy_str(v, param, true, true, &msg->content, &msg->content_len, err);
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, param, 400, "validation",
				 "%s must be a string or a list of text parts", param);
	n = json_object_array_length(v);
	for (size_t k = 0; k < n; k++) {
		json_object *p = json_object_array_get_idx(v, k), *t;

		if (!json_object_is_type(p, json_type_object) || !(t = opt(p, "type")) ||
		    !json_object_is_type(t, json_type_string))
			return rg_req_failp(err, param, 400, "validation",
					 "%s[%zu] must be an object with a \"type\"", param, k);
		if (strcmp(json_object_get_string(t), "text"))
			return rg_req_failp(err, param, 400, "validation",
					 "%s[%zu]: content part type \"%.32s\" is not supported "
					 "(text only)", param, k, json_object_get_string(t));
		if (!(t = opt(p, "text")) || !json_object_is_type(t, json_type_string))
			return rg_req_failp(err, param, 400, "validation",
					 "%s[%zu].text must be a string", param, k);
		if (!rg_utf8_valid(json_object_get_string(t), (size_t)json_object_get_string_len(t)))
			return rg_req_failp(err, param, 400, "validation",
					 "%s[%zu].text is not valid UTF-8", param, k);
		total += (size_t)json_object_get_string_len(t);
	}
	if (!(msg->content = malloc(total + 1)))
		return oom(err);
	msg->content_len = 0;
	for (size_t k = 0; k < n; k++) {
		json_object *t = opt(json_object_array_get_idx(v, k), "text");
		size_t len = (size_t)json_object_get_string_len(t);

		memcpy(msg->content + msg->content_len, json_object_get_string(t), len);
		msg->content_len += len;
	}
	msg->content[total] = '\0';
	return RG_OK;
}

/* An assistant message's "tool_calls" (param names it): a list of {"id": str, "type":
 * "function", "function": {"name": str, "arguments": str}} (OpenAI's shape; the arguments' JSON
 * is checked by the template renderer, which parses it), kept as JSON text; null and [] are
 * none. */
static rg_status parse_tool_calls(json_object *tc, const char *param, rg_gen_message *msg,
				  rg_req_error *err)
{
	size_t n;

	if (!tc || (json_object_is_type(tc, json_type_array) && !json_object_array_length(tc)))
		return RG_OK;
	if (!json_object_is_type(tc, json_type_array))
		return rg_req_failp(err, param, 400, "validation", "%s must be a list", param);
	n = json_object_array_length(tc);
	for (size_t k = 0; k < n; k++) {
		json_object *c = json_object_array_get_idx(tc, k), *fn = opt(c, "function");
		json_object *name = opt(fn, "name"), *args = opt(fn, "arguments"), *t = opt(c, "type");

		if (!json_object_is_type(c, json_type_object) ||
		    !json_object_is_type(fn, json_type_object) ||
		    !json_object_is_type(name, json_type_string) ||
		    !json_object_is_type(args, json_type_string) ||
		    (t && (!json_object_is_type(t, json_type_string) ||
			   strcmp(json_object_get_string(t), "function"))))
			return rg_req_failp(err, param, 400, "validation",
					 "%s[%zu] must be {\"id\", \"type\": \"function\", "
					 "\"function\": {\"name\": string, \"arguments\": string}}",
					 param, k);
	}
	if (!(msg->tool_calls = strdup(json_object_to_json_string_ext(
		      tc, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE))))
		return oom(err);
	return RG_OK;
}

/* Chat's "messages": 1..max_messages objects with a known role and a content. An assistant's
 * "tool_calls" and a tool message's "tool_call_id" are kept; other keys ("name", "refusal")
 * are accepted and not used. */
static rg_status parse_messages(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
				rg_req_error *err)
{
	static const char *const roles[] = { "system", "developer", "user", "assistant", "tool" };
	json_object *v = opt(root, "messages");
	char param[48];
	size_t n;
	rg_status st;

	if (!v)
		return rg_req_failp(err, "messages", 400, "validation", "missing messages");
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, "messages", 400, "validation", "messages must be a list");
	if ((n = json_object_array_length(v)) == 0)
		return rg_req_failp(err, "messages", 400, "validation", "messages is an empty list");
	if (n > (size_t)lim->max_messages)
		return rg_req_failp(err, "messages", 413, "payload_too_large",
				 "%zu messages; at most %d per request", n, lim->max_messages);
	if (!(r->messages = calloc(n, sizeof(*r->messages))))
		return oom(err);
	r->n_messages = (int)n;
	for (size_t i = 0; i < n; i++) {
		json_object *m = json_object_array_get_idx(v, i), *role, *tc;
		size_t k = 0;

		snprintf(param, sizeof(param), "messages[%zu]", i);
		if (!json_object_is_type(m, json_type_object))
			return rg_req_failp(err, param, 400, "validation", "%s must be an object", param);
		snprintf(param, sizeof(param), "messages[%zu].role", i);
		role = opt(m, "role");
		while (role && json_object_is_type(role, json_type_string) && k < 5 &&
		       strcmp(json_object_get_string(role), roles[k]))
			k++;
		if (!role || !json_object_is_type(role, json_type_string) || k == 5)
			return rg_req_failp(err, param, 400, "validation",
					 "%s must be one of \"system\", \"developer\", \"user\", "
					 "\"assistant\", \"tool\"", param);
		if (!(r->messages[i].role = strdup(roles[k])))
			return oom(err);
		tc = opt(m, "tool_calls");
		snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
		if (tc && k != 3)
			return rg_req_failp(err, param, 400, "validation",
					 "%s: only assistant messages have tool_calls", param);
		if ((st = parse_tool_calls(tc, param, &r->messages[i], err)) != RG_OK)
			return st;
		if (k == 4) {
			snprintf(param, sizeof(param), "messages[%zu].tool_call_id", i);
			if (!opt(m, "tool_call_id"))
				return rg_req_failp(err, param, 400, "validation",
						 "%s is missing (a tool message answers a call)",
						 param);
			if ((st = get_str(m, "tool_call_id", &r->messages[i].tool_call_id, err)))
				return st;
		}
		if ((st = parse_content(m, i, k == 3, &r->messages[i], err)) != RG_OK)
			return st;
	}
	return RG_OK;
}

/* ---- tools ---------------------------------------------------------------------------------- */

/* OpenAI's function names: [a-zA-Z0-9_-]{1,64}. */
static bool tool_name_ok(const char *s, size_t n)
{
	if (n < 1 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

static json_object *tool_params(json_object *tool)
{
	return opt(opt(tool, "function"), "parameters");
}

/* The JSON Schema of tool_choice "required", as vLLM's _get_json_schema_from_tool builds it:
 * a list (at least one; at most one without parallel_tool_calls) of {"name": that tool's name,
 * "parameters": its parameters schema}, one alternative per tool. New reference, NULL on OOM. */
static json_object *required_schema(json_object *tools, bool parallel)
{
	json_object *any = json_object_new_array(), *items = json_object_new_object();
	json_object *root = json_object_new_object();
	size_t n = json_object_array_length(tools);

	if (!any || !items || !root)
		goto out_fail;
	for (size_t k = 0; k < n; k++) {
		json_object *t = json_object_array_get_idx(tools, k), *one = json_object_new_object();
		json_object *props = json_object_new_object(), *name = json_object_new_object();
		json_object *en = json_object_new_array(), *req = json_object_new_array();
		json_object *p = tool_params(t);

		if (!one || !props || !name || !en || !req) {
			json_object_put(one);
			json_object_put(props);
			json_object_put(name);
			json_object_put(en);
			json_object_put(req);
			goto out_fail;
		}
		json_object_object_add(name, "type", json_object_new_string("string"));
		json_object_array_add(en, json_object_get(opt(opt(t, "function"), "name")));
		json_object_object_add(name, "enum", en);
		json_object_object_add(props, "name", name);
		json_object_object_add(props, "parameters",
				       p ? json_object_get(p) : json_object_new_object());
		json_object_object_add(one, "type", json_object_new_string("object"));
		json_object_object_add(one, "properties", props);
		json_object_array_add(req, json_object_new_string("name"));
		json_object_array_add(req, json_object_new_string("parameters"));
		json_object_object_add(one, "required", req);
		json_object_array_add(any, one);
	}
	json_object_object_add(items, "anyOf", any);
	json_object_object_add(root, "type", json_object_new_string("array"));
	json_object_object_add(root, "minItems", json_object_new_int(1));
	if (!parallel)
		json_object_object_add(root, "maxItems", json_object_new_int(1));
	json_object_object_add(root, "items", items);
	return root;
out_fail:
	json_object_put(any);
	json_object_put(items);
	json_object_put(root);
	return NULL;
}

static rg_status set_grammar(rg_gen_request *r, const rg_gen_limits *lim, const char *param,
			     rg_grammar_kind kind, json_object *v, rg_req_error *err);

/* Chat's "tools", "tool_choice" and "parallel_tool_calls" (OpenAI's; vLLM's rules): tools a
 * list of function tools with distinct valid names and object parameters; tool_choice "none",
 * "auto" (the default with tools), "required" or {"type": "function", "function": {"name"}}
 * naming one of them; a choice other than "none" without tools is a 400 (OpenAI's). Required
 * and named set the grammar (a schema the grammar engine refuses is a 400 naming
 * tool_choice). */
static rg_status parse_tools(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
			     rg_req_error *err)
{
	json_object *tools = opt(root, "tools"), *tc = opt(root, "tool_choice"), *pt;
	size_t n = 0;
	char param[64];
	rg_status st;

	r->parallel_tool_calls = true;
	if ((pt = opt(root, "parallel_tool_calls")))
		r->parallel_tool_calls = json_object_get_boolean(pt);
	if (tools && !json_object_is_type(tools, json_type_array))
		return rg_req_failp(err, "tools", 400, "validation", "tools must be a list");
	n = tools ? json_object_array_length(tools) : 0;
	for (size_t k = 0; k < n; k++) {
		json_object *t = json_object_array_get_idx(tools, k), *fn, *name, *p, *ty;

		snprintf(param, sizeof(param), "tools[%zu]", k);
		if (!json_object_is_type(t, json_type_object))
			return rg_req_failp(err, param, 400, "validation", "%s must be an object",
					 param);
		ty = opt(t, "type");
		if (!ty || !json_object_is_type(ty, json_type_string) ||
		    strcmp(json_object_get_string(ty), "function"))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.type must be \"function\"", param);
		fn = opt(t, "function");
		if (!json_object_is_type(fn, json_type_object))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.function must be an object", param);
		name = opt(fn, "name");
		if (!json_object_is_type(name, json_type_string) ||
		    !tool_name_ok(json_object_get_string(name),
				  (size_t)json_object_get_string_len(name)))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.function.name must be 1 to 64 of a-z, A-Z, 0-9, _ "
					 "and -", param);
		for (size_t q = 0; q < k; q++)
			if (!strcmp(json_object_get_string(name), json_object_get_string(opt(opt(
				    json_object_array_get_idx(tools, q), "function"), "name"))))
				return rg_req_failp(err, param, 400, "validation",
						 "%s.function.name \"%s\" is also tools[%zu]'s",
						 param, json_object_get_string(name), q);
		if ((p = opt(fn, "description")) && !json_object_is_type(p, json_type_string))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.function.description must be a string", param);
		if ((p = opt(fn, "strict")) && !json_object_is_type(p, json_type_boolean))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.function.strict must be a boolean", param);
		if ((p = tool_params(t)) && !json_object_is_type(p, json_type_object))
			return rg_req_failp(err, param, 400, "validation",
					 "%s.function.parameters must be a JSON Schema object",
					 param);
	}
	if (n && !(r->tools = strdup(json_object_to_json_string_ext(
			   tools, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE))))
		return oom(err);
	r->tool_choice = n ? RG_GEN_TOOL_AUTO : RG_GEN_TOOL_NONE;
	if (!tc)
		return RG_OK;
	if (json_object_is_type(tc, json_type_string)) {
		const char *c = json_object_get_string(tc);

		if (!strcmp(c, "none")) {
			r->tool_choice = RG_GEN_TOOL_NONE;
			return RG_OK;
		}
		if (strcmp(c, "auto") && strcmp(c, "required"))
			return rg_req_failp(err, "tool_choice", 400, "validation",
					 "tool_choice must be \"none\", \"auto\", \"required\" "
					 "or {\"type\": \"function\", \"function\": {\"name\": "
					 "...}}, got \"%.40s\"", c);
		if (!n)
			return rg_req_failp(err, "tool_choice", 400, "validation",
					 "tool_choice \"%s\" needs tools", c);
		if (!strcmp(c, "auto"))
			return RG_OK;
		r->tool_choice = RG_GEN_TOOL_REQUIRED;
		{
			json_object *schema = required_schema(tools, r->parallel_tool_calls);

			if (!schema)
				return oom(err);
			st = set_grammar(r, lim, "tool_choice", RG_GRAMMAR_JSON_SCHEMA, schema, err);
			json_object_put(schema);
			return st;
		}
	}
	{
		json_object *ty = opt(tc, "type"), *name = opt(opt(tc, "function"), "name");

		if (!json_object_is_type(tc, json_type_object) ||
		    !json_object_is_type(ty, json_type_string) ||
		    strcmp(json_object_get_string(ty), "function") ||
		    !json_object_is_type(name, json_type_string))
			return rg_req_failp(err, "tool_choice", 400, "validation",
					 "tool_choice must be \"none\", \"auto\", \"required\" "
					 "or {\"type\": \"function\", \"function\": {\"name\": "
					 "...}}");
		if (!n)
			return rg_req_failp(err, "tool_choice", 400, "validation",
					 "tool_choice names a function but there are no tools");
		for (size_t k = 0; k < n; k++) {
			json_object *t = json_object_array_get_idx(tools, k), *p;

			if (strcmp(json_object_get_string(opt(opt(t, "function"), "name")),
				   json_object_get_string(name)))
				continue;
			if (!(r->tool_name = strdup(json_object_get_string(name))))
				return oom(err);
			r->tool_choice = RG_GEN_TOOL_NAMED;
			if ((p = tool_params(t)))
				return set_grammar(r, lim, "tool_choice", RG_GRAMMAR_JSON_SCHEMA, p,
						   err);
			return set_grammar(r, lim, "tool_choice", RG_GRAMMAR_JSON_OBJECT, NULL,
					   err);
		}
		return rg_req_failp(err, "tool_choice.function.name", 400, "validation",
				 "tool_choice.function.name \"%.64s\" is not among the tools",
				 json_object_get_string(name));
	}
}

/* ---- options shared by the OpenAI routes --------------------------------------------------- */

/* "stop": a string or a list of at most lim->max_stop strings (OpenAI); TGI: a list only. */
static rg_status parse_stop(json_object *o, bool list_only, const rg_gen_limits *lim,
			    rg_gen_request *r, rg_req_error *err)
{
	json_object *v = opt(o, "stop");
	size_t n;
	rg_status st;

	if (!v)
		return RG_OK;
	if (json_object_is_type(v, json_type_string) && !list_only) {
		if (!(r->stop = calloc(1, sizeof(*r->stop))))
			return oom(err);
		r->n_stop = 1;
		return copy_str(v, "stop", false, false, &r->stop[0], NULL, err);
	}
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, "stop", 400, "validation", "stop must be %s",
				 list_only ? "a list of strings" : "a string or a list of strings");
	n = json_object_array_length(v);
	if (n > (size_t)lim->max_stop)
		return rg_req_failp(err, "stop", 400, "validation",
				 "stop supports up to %d stop sequences, got %zu", lim->max_stop, n);
	if (n && !(r->stop = calloc(n, sizeof(*r->stop))))
		return oom(err);
	r->n_stop = (int)n;
	for (size_t i = 0; i < n; i++)
		if ((st = copy_str(json_object_array_get_idx(v, i), "stop", false, false,
				   &r->stop[i], NULL, err)) != RG_OK)
			return st;
	return RG_OK;
}

/* vLLM's "stop_token_ids": a list of ids in the vocabulary (may be empty). */
static rg_status parse_stop_ids(json_object *o, const rg_gen_limits *lim, rg_gen_request *r,
				rg_req_error *err)
{
	json_object *v = opt(o, "stop_token_ids");

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_array))
		return rg_req_failp(err, "stop_token_ids", 400, "validation",
				 "stop_token_ids must be a list of token ids");
	if (json_object_array_length(v) == 0)
		return RG_OK;
	return copy_ids(v, "stop_token_ids", lim, &r->stop_token_ids, &r->n_stop_token_ids, err);
}

/* OpenAI's "logit_bias": {"<token id in decimal>": bias in [-100, 100]}. */
static rg_status parse_logit_bias(json_object *o, const rg_gen_limits *lim, rg_gen_request *r,
				  rg_req_error *err)
{
	const char *k = "logit_bias";
	json_object *v = opt(o, k);
	int n, i = 0;

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_object))
		return rg_req_failp(err, k, 400, "validation",
				 "logit_bias must be an object of token id -> bias");
	if ((n = json_object_object_length(v)) == 0)
		return RG_OK;
	r->bias_ids = malloc((size_t)n * sizeof(*r->bias_ids));
	r->bias_values = malloc((size_t)n * sizeof(*r->bias_values));
	if (!r->bias_ids || !r->bias_values)
		return oom(err);
	json_object_object_foreach(v, key, val) {
		long long id = 0;
		double b;
		size_t d = 0;

		for (; key[d] >= '0' && key[d] <= '9' && d < 12; d++)
			id = id * 10 + (key[d] - '0');
		if (d == 0 || key[d] || id >= lim->vocab_size)
			return rg_req_failp(err, k, 400, "validation",
					 "logit_bias: key \"%.32s\" is not a token id in [0, %d)",
					 key, lim->vocab_size);
		if (!json_object_is_type(val, json_type_double) &&
		    !json_object_is_type(val, json_type_int))
			return rg_req_failp(err, k, 400, "validation",
					 "logit_bias[\"%s\"] must be a number", key);
		b = json_object_get_double(val);
		if (!(b >= -100 && b <= 100))
			return rg_req_failp(err, k, 400, "validation",
					 "logit_bias[\"%s\"] must be in [-100, 100], got %g", key, b);
		r->bias_ids[i] = (int32_t)id;
		r->bias_values[i] = (float)b;
		r->n_bias = ++i;
	}
	return RG_OK;
}

/* A field ragged does not implement: accepted when null (opt) or equal to one of the given
 * harmless values ("none", [], ["text"], ""), else a 400 naming it. */
enum { OK_NONE_STR = 1, OK_EMPTY_LIST = 2, OK_TEXT_MODALITY = 8,
       OK_EMPTY_STR = 16 };

static rg_status refuse_feature(json_object *o, const char *key, unsigned ok, const char *why,
				rg_req_error *err)
{
	json_object *v = opt(o, key), *t;
	bool arr, str;

	if (!v)
		return RG_OK;
	arr = json_object_is_type(v, json_type_array);
	str = json_object_is_type(v, json_type_string);
	if ((ok & OK_NONE_STR) && str && !strcmp(json_object_get_string(v), "none"))
		return RG_OK;
	if ((ok & OK_EMPTY_STR) && str && json_object_get_string_len(v) == 0)
		return RG_OK;
	if ((ok & OK_EMPTY_LIST) && arr && json_object_array_length(v) == 0)
		return RG_OK;
	if ((ok & OK_TEXT_MODALITY) && arr && json_object_array_length(v) == 1 &&
	    json_object_is_type((t = json_object_array_get_idx(v, 0)), json_type_string) &&
	    !strcmp(json_object_get_string(t), "text"))
		return RG_OK;
	return rg_req_failp(err, key, 400, "validation", "%s is not supported: %s", key, why);
}

/* "src_lang" / "tgt_lang" (HF's translation pipeline names): language codes, strings of 1..64
 * bytes, in o or in p (/translate's "parameters"; NULL elsewhere), not in both. Whether the model
 * has the code is the route's to check (the parser knows no model). */
static rg_status parse_langs(json_object *o, json_object *p, rg_gen_request *r,
			     rg_req_error *err)
{
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "tgt_lang" : "src_lang";
		json_object *v = opt(o, key), *w = opt(p, key);
		char **dst = k ? &r->tgt_lang : &r->src_lang;
		size_t n = 0;
		rg_status st;

		if (v && w)
			return rg_req_failp(err, key, 400, "validation",
					 "%s is given twice (at the top level and in parameters)",
					 key);
		if (!v && !w)
			continue;
		if ((st = copy_str(v ? v : w, key, false, false, dst, &n, err)) != RG_OK)
			return st;
		if (n > 64)
			return rg_req_failp(err, key, 400, "validation",
					 "%s is %zu bytes; a language code has at most 64", key, n);
	}
	return RG_OK;
}

/* One grammar of the request (param names the field): kind and its text, checked by compiling
 * it (rg_grammar_compile_check), the message of a bad one naming param. A second grammar in
 * one request is a 400. v: a string (its text), or for a schema / choices the JSON value. */
static rg_status set_grammar(rg_gen_request *r, const rg_gen_limits *lim, const char *param,
			     rg_grammar_kind kind, json_object *v, rg_req_error *err)
{
	const char *text = NULL;
	char msg[400];
	rg_status st;

	if (r->grammar_kind != RG_GRAMMAR_NONE)
		return rg_req_failp(err, param, 400, "validation",
				 "%s: only one structured-output constraint per request "
				 "(response_format, guided_*, structured_outputs, grammar)", param);
	if (kind == RG_GRAMMAR_REGEX && !json_object_is_type(v, json_type_string))
		return rg_req_failp(err, param, 400, "validation", "%s must be a string (a regex)",
				 param);
	if (kind == RG_GRAMMAR_CHOICE) {
		size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;

		if (!n)
			return rg_req_failp(err, param, 400, "validation",
					 "%s must be a non-empty list of strings", param);
		for (size_t i = 0; i < n; i++)
			if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_string))
				return rg_req_failp(err, param, 400, "validation",
						 "%s[%zu] must be a string", param, i);
	}
	if (kind == RG_GRAMMAR_JSON_SCHEMA && !json_object_is_type(v, json_type_object) &&
	    !json_object_is_type(v, json_type_boolean) && !json_object_is_type(v, json_type_string))
		return rg_req_failp(err, param, 400, "validation",
				 "%s must be a JSON Schema (an object, or its JSON text)", param);
	if (v && kind != RG_GRAMMAR_JSON_OBJECT)
		text = json_object_is_type(v, json_type_string)
			       ? json_object_get_string(v)
			       : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
	if ((st = rg_grammar_compile_check(kind, text, lim->max_grammar_states, NULL, NULL)) != RG_OK) {
		snprintf(msg, sizeof(msg), "%s", rg_last_error());
		return rg_req_failp(err, param, 400, "validation", "%s: %s", param, msg);
	}
	if (text && !(r->grammar = strdup(text)))
		return rg_req_failp(err, param, 500, "internal", "out of memory");
	r->grammar_kind = kind;
	return RG_OK;
}

/* OpenAI's "response_format": text (nothing), json_object, or json_schema {"name", "schema",
 * "strict", "description"} (a json_schema without "schema": any JSON object). */
static rg_status parse_response_format(json_object *root, const rg_gen_limits *lim,
				       rg_gen_request *r, rg_req_error *err)
{
	const char *k = "response_format";
	json_object *v = opt(root, k), *t, *js, *schema;
	const char *type;

	if (!v)
		return RG_OK;
	if (!json_object_is_type(v, json_type_object) || !(t = opt(v, "type")) ||
	    !json_object_is_type(t, json_type_string))
		return rg_req_failp(err, k, 400, "validation",
				 "response_format must be an object with a \"type\"");
	type = json_object_get_string(t);
	if (!strcmp(type, "text"))
		return RG_OK;
	if (!strcmp(type, "json_object"))
		return set_grammar(r, lim, k, RG_GRAMMAR_JSON_OBJECT, NULL, err);
	if (strcmp(type, "json_schema"))
		return rg_req_failp(err, k, 400, "validation",
				 "response_format.type must be \"text\", \"json_object\" or "
				 "\"json_schema\", got \"%.40s\"", type);
	if (!(js = opt(v, "json_schema")) || !json_object_is_type(js, json_type_object))
		return rg_req_failp(err, "response_format.json_schema", 400, "validation",
				 "response_format.json_schema must be an object with the schema");
	json_object_object_foreach(js, key, val) {
		(void)val;
		if (strcmp(key, "name") && strcmp(key, "schema") && strcmp(key, "strict") &&
		    strcmp(key, "description"))
			return rg_req_failp(err, "response_format.json_schema", 400, "validation",
					 "response_format.json_schema: unrecognized field %.60s", key);
	}
	if (!(schema = opt(js, "schema")))
		return set_grammar(r, lim, k, RG_GRAMMAR_JSON_OBJECT, NULL, err);
	return set_grammar(r, lim, "response_format.json_schema.schema", RG_GRAMMAR_JSON_SCHEMA,
			   schema, err);
}

/* vLLM's guided decoding fields: guided_json, guided_regex, guided_choice, and
 * structured_outputs {"json" | "regex" | "choice" | "json_object": true}; guided_grammar and
 * the "grammar" / "structural_tag" forms (context-free grammars) are refused. */
static rg_status parse_guided(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
			      rg_req_error *err)
{
	json_object *v, *so;
	rg_status st;

	if ((v = opt(root, "guided_json")) &&
	    (st = set_grammar(r, lim, "guided_json", RG_GRAMMAR_JSON_SCHEMA, v, err)) != RG_OK)
		return st;
	if ((v = opt(root, "guided_regex")) &&
	    (st = set_grammar(r, lim, "guided_regex", RG_GRAMMAR_REGEX, v, err)) != RG_OK)
		return st;
	if ((v = opt(root, "guided_choice")) &&
	    (st = set_grammar(r, lim, "guided_choice", RG_GRAMMAR_CHOICE, v, err)) != RG_OK)
		return st;
	if (opt(root, "guided_grammar"))
		return rg_req_failp(err, "guided_grammar", 400, "validation",
				 "guided_grammar is not supported: no context-free grammars "
				 "(guided_json, guided_regex and guided_choice are)");
	if ((st = check_type(root, "guided_decoding_backend", 1u << json_type_string, "a string",
			     err)) != RG_OK ||
	    (st = check_type(root, "guided_whitespace_pattern", 1u << json_type_string, "a string",
			     err)) != RG_OK)
		return st;
	if (opt(root, "guided_whitespace_pattern"))
		return rg_req_failp(err, "guided_whitespace_pattern", 400, "validation",
				 "guided_whitespace_pattern is not supported (whitespace is [ ]?)");
	if (!(so = opt(root, "structured_outputs")))
		return RG_OK;
	if (!json_object_is_type(so, json_type_object))
		return rg_req_failp(err, "structured_outputs", 400, "validation",
				 "structured_outputs must be an object");
	json_object_object_foreach(so, key, val) {
		if (json_object_is_type(val, json_type_null))
			continue;
		if (!strcmp(key, "json"))
			st = set_grammar(r, lim, "structured_outputs.json", RG_GRAMMAR_JSON_SCHEMA,
					 val, err);
		else if (!strcmp(key, "regex"))
			st = set_grammar(r, lim, "structured_outputs.regex", RG_GRAMMAR_REGEX,
					 val, err);
		else if (!strcmp(key, "choice"))
			st = set_grammar(r, lim, "structured_outputs.choice", RG_GRAMMAR_CHOICE,
					 val, err);
		else if (!strcmp(key, "json_object"))
			st = json_object_is_type(val, json_type_boolean) && json_object_get_boolean(val)
				     ? set_grammar(r, lim, "structured_outputs.json_object",
						   RG_GRAMMAR_JSON_OBJECT, NULL, err)
				     : RG_OK;
		else if (!strcmp(key, "disable_any_whitespace") || !strcmp(key, "disable_fallback") ||
			 !strcmp(key, "disable_additional_properties") ||
			 !strcmp(key, "whitespace_pattern") || !strcmp(key, "backend"))
			st = RG_OK; /* backend options: ragged has one backend */
		else
			st = rg_req_failp(err, "structured_outputs", 400, "validation",
					  "structured_outputs.%.40s is not supported (json, regex, "
					  "choice and json_object are)", key);
		if (st != RG_OK)
			return st;
	}
	return RG_OK;
}

/* TGI's "parameters.grammar": {"type": "json" | "regex", "value": schema | regex}. */
static rg_status parse_tgi_grammar(json_object *p, const rg_gen_limits *lim, rg_gen_request *r,
				   rg_req_error *err)
{
	const char *k = "grammar";
	json_object *g = opt(p, k), *t, *v;
	const char *type;

	if (!g)
		return RG_OK;
	if (!json_object_is_type(g, json_type_object) || !(t = opt(g, "type")) ||
	    !json_object_is_type(t, json_type_string) || !(v = opt(g, "value")))
		return rg_req_failp(err, k, 400, "validation",
				 "grammar must be {\"type\": \"json\" | \"regex\", \"value\": ...}");
	type = json_object_get_string(t);
	if (!strcmp(type, "json") || !strcmp(type, "json_schema"))
		return set_grammar(r, lim, "grammar.value", RG_GRAMMAR_JSON_SCHEMA, v, err);
	if (!strcmp(type, "regex"))
		return set_grammar(r, lim, "grammar.value", RG_GRAMMAR_REGEX, v, err);
	return rg_req_failp(err, k, 400, "validation",
			 "grammar.type must be \"json\" or \"regex\", got \"%.40s\"", type);
}

/* The keys each OpenAI route knows; anything else is OpenAI's 400 "unrecognized request
 * argument". C: completions only, H: chat only, B: both. */
static const struct {
	const char *key;
	char api;
} openai_keys[] = {
	{ "model", 'B' }, { "stream", 'B' }, { "stream_options", 'B' }, { "n", 'B' },
	{ "max_tokens", 'B' }, { "temperature", 'B' }, { "top_p", 'B' },
	{ "frequency_penalty", 'B' }, { "presence_penalty", 'B' }, { "seed", 'B' },
	{ "stop", 'B' }, { "logit_bias", 'B' }, { "logprobs", 'B' }, { "user", 'B' },
	{ "metadata", 'B' }, { "store", 'B' }, { "service_tier", 'B' },
	/* vLLM's extensions */
	{ "ignore_eos", 'B' }, { "min_tokens", 'B' }, { "top_k", 'B' }, { "min_p", 'B' },
	{ "repetition_penalty", 'B' }, { "use_beam_search", 'B' }, { "length_penalty", 'B' },
	{ "early_stopping", 'B' }, { "skip_special_tokens", 'B' }, { "stop_token_ids", 'B' },
	{ "priority", 'B' }, { "prompt_logprobs", 'B' }, { "guided_json", 'B' }, { "guided_regex", 'B' },
	{ "guided_choice", 'B' }, { "guided_grammar", 'B' }, { "guided_decoding_backend", 'B' },
	{ "guided_whitespace_pattern", 'B' }, { "structured_outputs", 'B' },
	{ "response_format", 'B' }, /* OpenAI's on chat; vLLM takes it on completions too */
	/* ragged's */
	{ "deadline_ms", 'B' }, { "tpot_ms", 'B' },
	/* completions */
	{ "prompt", 'C' }, { "best_of", 'C' }, { "echo", 'C' }, { "suffix", 'C' },
	{ "src_lang", 'C' }, { "tgt_lang", 'C' }, /* encoder-decoders' language codes */
	/* chat */
	{ "messages", 'H' }, { "max_completion_tokens", 'H' }, { "top_logprobs", 'H' },
	{ "add_generation_prompt", 'H' }, { "tools", 'H' }, { "tool_choice", 'H' },
	{ "functions", 'H' }, { "function_call", 'H' },
	{ "audio", 'H' }, { "modalities", 'H' }, { "prediction", 'H' },
	{ "parallel_tool_calls", 'H' }, { "continue_final_message", 'H' },
	{ "chat_template", 'H' }, { "chat_template_kwargs", 'H' },
};

/* vLLM's chat_template_kwargs: an object (or null) whose add_generation_prompt and
 * continue_final_message (booleans) override the top-level fields, as vLLM's update of the
 * template's arguments does; its other keys are kept by name (the route refuses those the
 * template reads, since ragged renders templates by family, not by Jinja). */
static rg_status parse_template_kwargs(json_object *root, rg_gen_request *r, rg_req_error *err)
{
	json_object *kw = opt(root, "chat_template_kwargs");
	size_t n;

	if (!kw)
		return RG_OK;
	if (!json_object_is_type(kw, json_type_object))
		return rg_req_failp(err, "chat_template_kwargs", 400, "validation",
				    "chat_template_kwargs must be an object");
	n = (size_t)json_object_object_length(kw);
	if (n && !(r->template_vars = calloc(n, sizeof(char *))))
		return rg_req_failp(err, "chat_template_kwargs", 500, "backend", "out of memory");
	json_object_object_foreach(kw, key, val) {
		bool *dst = !strcmp(key, "add_generation_prompt") ? &r->add_generation_prompt
			    : !strcmp(key, "continue_final_message") ? &r->continue_final_message
								      : NULL;

		if (dst) {
			if (!json_object_is_type(val, json_type_boolean))
				return rg_req_failp(err, "chat_template_kwargs", 400, "validation",
						    "chat_template_kwargs.%s must be a boolean", key);
			*dst = json_object_get_boolean(val);
			continue;
		}
		if (!(r->template_vars[r->n_template_vars] = strdup(key)))
			return rg_req_failp(err, "chat_template_kwargs", 500, "backend",
					    "out of memory");
		r->n_template_vars++;
	}
	return RG_OK;
}

static rg_status refuse_unknown(json_object *root, bool chat, rg_req_error *err)
{
	const size_t n_keys = sizeof(openai_keys) / sizeof(openai_keys[0]);

	json_object_object_foreach(root, key, val) {
		size_t k = 0;

		(void)val;
		while (k < n_keys && (strcmp(key, openai_keys[k].key) ||
				      openai_keys[k].api == (chat ? 'C' : 'H')))
			k++;
		if (k == n_keys)
			return rg_req_failp(err, key, 400, "validation",
					 "unrecognized request argument supplied: %.100s", key);
	}
	return RG_OK;
}

/* "stream_options": {"include_usage": bool, "include_obfuscation": bool}, only with stream. */
static rg_status parse_stream_options(json_object *root, rg_gen_request *r, rg_req_error *err)
{
	const char *k = "stream_options";
	json_object *v = opt(root, k);

	if (!v)
		return RG_OK;
	if (!r->stream)
		return rg_req_failp(err, k, 400, "validation",
				 "stream_options is only allowed when stream is true");
	if (!json_object_is_type(v, json_type_object))
		return rg_req_failp(err, k, 400, "validation", "stream_options must be an object");
	json_object_object_foreach(v, key, val) {
		(void)val;
		if (strcmp(key, "include_usage") && strcmp(key, "include_obfuscation"))
			return rg_req_failp(err, k, 400, "validation",
					 "stream_options: unrecognized argument %.64s", key);
	}
	if (check_type(v, "include_obfuscation", 1u << json_type_boolean, "a boolean", err) ||
	    get_bool(v, "include_usage", &r->include_usage, err)) {
		char inner[sizeof(err->msg)]; /* "<key> must be a boolean" */

		memcpy(inner, err->msg, sizeof(inner));
		return rg_req_failp(err, k, 400, "validation", "stream_options.%s", inner);
	}
	return RG_OK;
}

/* "early_stopping": true, false or "never" (vLLM / HF). */
static rg_status parse_early_stopping(json_object *o, rg_gen_request *r, rg_req_error *err)
{
	json_object *v = opt(o, "early_stopping");

	if (!v)
		return RG_OK;
	if (json_object_is_type(v, json_type_boolean))
		r->early_stopping = json_object_get_boolean(v) ? 1 : 0;
	else if (json_object_is_type(v, json_type_string) &&
		 !strcmp(json_object_get_string(v), "never"))
		r->early_stopping = 2;
	else
		return rg_req_failp(err, "early_stopping", 400, "validation",
				 "early_stopping must be true, false or \"never\"");
	return RG_OK;
}

/* ragged's admission targets, in both APIs: "deadline_ms", "tpot_ms" (> 0), "priority". */
static rg_status parse_targets(json_object *o, rg_gen_request *r, rg_req_error *err)
{
	float d = 0, t = 0;
	rg_status st;

	if ((st = get_num(o, "deadline_ms", 0, INFINITY, LO_OPEN, &d, NULL, err)) != RG_OK ||
	    (st = get_num(o, "tpot_ms", 0, INFINITY, LO_OPEN, &t, NULL, err)) != RG_OK ||
	    (st = get_int32(o, "priority", INT32_MIN, INT32_MAX, &r->priority, NULL, err)) != RG_OK)
		return st;
	r->deadline_ms = d;
	r->tpot_ms = t;
	return RG_OK;
}

/* The OpenAI routes: completions and chat. */
static rg_status parse_openai(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
			      rg_req_error *err)
{
	bool chat = r->api == RG_GEN_API_CHAT, set_t = false, set_p = false, set_k = false;
	bool set_minp = false, set_lp = false, set_beam = false, set_mt = false, set_mct = false;
	bool want_lp = false;
	int64_t seed = 0, mct = 0;
	int top_logprobs = 0;
	rg_status st;

	if ((st = refuse_unknown(root, chat, err)) != RG_OK)
		return st;
	if ((st = get_str(root, "model", &r->model, err)) != RG_OK ||
	    (st = chat ? parse_messages(root, lim, r, err) : parse_prompt(root, "prompt", lim, r, err)))
		return st;
	/* harmless bookkeeping, type-checked and ignored */
	if (!chat && (st = parse_langs(root, NULL, r, err)) != RG_OK)
		return st;
	if ((st = get_str(root, "user", &r->user, err)) != RG_OK ||
	    (st = check_type(root, "metadata", 1u << json_type_object, "an object", err)) ||
	    (st = check_type(root, "store", 1u << json_type_boolean, "a boolean", err)) ||
	    (st = check_type(root, "service_tier", 1u << json_type_string, "a string", err)) ||
	    (st = check_type(root, "parallel_tool_calls", 1u << json_type_boolean, "a boolean",
			     err)))
		return st;
	/* features ragged does not have */
	if (!chat && (st = get_str(root, "suffix", &r->suffix, err)) != RG_OK)
		return st;
	if (!chat && r->suffix && !r->suffix[0]) { /* "": no suffix, as OpenAI takes it */
		free(r->suffix);
		r->suffix = NULL;
	}
	if ((chat && (st = refuse_feature(root, "suffix", OK_EMPTY_STR, "no fill-in-the-middle",
					  err))) ||
	    (st = refuse_feature(root, "functions", OK_EMPTY_LIST, "the deprecated form of "
				 "tools; send tools", err)) ||
	    (st = refuse_feature(root, "function_call", OK_NONE_STR, "the deprecated form of "
				 "tool_choice; send tool_choice", err)) ||
	    (st = refuse_feature(root, "audio", 0, "text output only", err)) ||
	    (st = refuse_feature(root, "modalities", OK_TEXT_MODALITY, "text output only", err)) ||
	    (st = refuse_feature(root, "prediction", 0, "no predicted outputs", err)))
		return st;
	if ((st = get_bool(root, "stream", &r->stream, err)) != RG_OK ||
	    (st = parse_stream_options(root, r, err)) != RG_OK ||
	    (st = get_int32(root, "n", 1, lim->max_n, &r->n, NULL, err)) != RG_OK ||
	    (st = get_int32(root, "max_tokens", 0, INT32_MAX, &r->max_tokens, &set_mt, err)) ||
	    (st = get_int32(root, "prompt_logprobs", 0, RG_GEN_MAX_LOGPROBS, &r->prompt_logprobs,
			    NULL, err)) ||
	    (st = get_int(root, "max_completion_tokens", 1, INT32_MAX, &mct, &set_mct, err)) ||
	    (st = get_int32(root, "min_tokens", 0, INT32_MAX, &r->min_tokens, NULL, err)) ||
	    (st = get_num(root, "temperature", 0, 2, 0, &r->temperature, &set_t, err)) ||
	    (st = get_num(root, "top_p", 0, 1, LO_OPEN, &r->top_p, &set_p, err)) ||
	    (st = get_int32(root, "top_k", -1, INT32_MAX, &r->top_k, &set_k, err)) ||
	    (st = get_num(root, "min_p", 0, 1, 0, &r->min_p, &set_minp, err)) ||
	    (st = get_num(root, "presence_penalty", -2, 2, 0, &r->presence_penalty, NULL, err)) ||
	    (st = get_num(root, "frequency_penalty", -2, 2, 0, &r->frequency_penalty, NULL,
			  err)) ||
	    (st = get_num(root, "repetition_penalty", 0, INFINITY, LO_OPEN,
			  &r->repetition_penalty, NULL, err)) ||
	    (st = get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, err)) ||
	    (st = parse_stop(root, false, lim, r, err)) ||
	    (st = parse_stop_ids(root, lim, r, err)) ||
	    (st = parse_logit_bias(root, lim, r, err)) ||
	    (st = get_bool(root, "ignore_eos", &r->ignore_eos, err)) ||
	    (st = get_bool(root, "skip_special_tokens", &r->skip_special_tokens, err)) ||
	    (st = get_bool(root, "use_beam_search", &r->use_beam_search, err)) ||
	    (st = get_num(root, "length_penalty", -INFINITY, INFINITY, 0, &r->length_penalty,
			  NULL, err)) ||
	    (st = parse_early_stopping(root, r, err)) ||
	    (st = parse_targets(root, r, err)) ||
	    (st = parse_response_format(root, lim, r, err)) ||
	    (st = parse_guided(root, lim, r, err)) ||
	    (chat && (st = parse_tools(root, lim, r, err))))
		return st;
	r->seed = (uint64_t)seed;
	if (r->top_k == -1)
		r->top_k = 0; /* vLLM: -1 disables top-k, as 0 does */
	if (chat) {
		if ((st = get_bool(root, "add_generation_prompt", &r->add_generation_prompt,
				   err)) ||
		    (st = get_bool(root, "continue_final_message", &r->continue_final_message,
				   err)) ||
		    (st = get_str(root, "chat_template", &r->chat_template, err)) ||
		    (st = parse_template_kwargs(root, r, err)) ||
		    (st = get_bool(root, "logprobs", &want_lp, err)) ||
		    (st = get_int32(root, "top_logprobs", 0, RG_GEN_MAX_LOGPROBS, &top_logprobs,
				    &set_lp, err)))
			return st;
		if (set_lp && !want_lp)
			return rg_req_failp(err, "top_logprobs", 400, "validation",
					 "top_logprobs needs logprobs set to true");
		r->logprobs = want_lp ? top_logprobs : -1;
		if (r->continue_final_message && r->add_generation_prompt)
			return rg_req_failp(err, "continue_final_message", 400, "validation",
					 "Cannot set both `continue_final_message` and "
					 "`add_generation_prompt` to True.");
		if (set_mct && set_mt && mct != r->max_tokens)
			return rg_req_failp(err, "max_completion_tokens", 400, "validation",
					 "max_completion_tokens (%lld) and max_tokens (%d) differ; "
					 "send one", (long long)mct, r->max_tokens);
		if (set_mct)
			r->max_tokens = (int)mct;
	} else {
		if ((st = get_int32(root, "logprobs", 0, lim->max_logprobs, &r->logprobs, NULL,
				    err)) ||
		    (st = get_bool(root, "echo", &r->echo, err)) ||
		    (st = get_int32(root, "best_of", 1, lim->max_n, &r->best_of, NULL, err)))
			return st;
		if (r->best_of && r->best_of < r->n)
			return rg_req_failp(err, "best_of", 400, "validation",
					 "best_of (%d) must be at least n (%d)", r->best_of, r->n);
		if (r->best_of > 1 && r->stream)
			return rg_req_failp(err, "best_of", 400, "validation",
					 "best_of > 1 cannot be streamed");
		if (!set_mt)
			r->max_tokens = 16; /* OpenAI completions' default */
	}
	/* prompt scoring (vLLM): max_tokens 0 scores the prompt alone; no stream of it */
	if (set_mt && r->max_tokens == 0 && !r->echo && r->prompt_logprobs < 0)
		return rg_req_failp(err, "max_tokens", 400, "validation",
				 "max_tokens must be at least 1, got 0 (0 only with echo or "
				 "prompt_logprobs: the prompt scored alone)");
	if (r->stream && r->prompt_logprobs >= 0)
		return rg_req_failp(err, "prompt_logprobs", 400, "validation",
				 "prompt_logprobs cannot be streamed (as vLLM); send stream false");
	if (r->max_tokens == 0 && r->use_beam_search)
		return rg_req_failp(err, "max_tokens", 400, "validation",
				 "max_tokens 0 (the prompt scored alone) does not go with "
				 "use_beam_search");
	if (r->max_tokens >= 0 && r->min_tokens > r->max_tokens)
		return rg_req_failp(err, "min_tokens", 400, "validation",
				 "min_tokens (%d) must be at most max_tokens (%d)", r->min_tokens,
				 r->max_tokens);
	set_beam = r->use_beam_search;
	if (set_beam) {
		/* vLLM's SamplingParams._verify_beam_search */
		if (r->temperature != 0 && set_t)
			return rg_req_failp(err, "temperature", 400, "validation",
					 "temperature must be 0 with use_beam_search");
		if (set_p && r->top_p != 1)
			return rg_req_failp(err, "top_p", 400, "validation",
					 "top_p must be 1 with use_beam_search");
		if (set_k && r->top_k != 0)
			return rg_req_failp(err, "top_k", 400, "validation",
					 "top_k must be -1 or 0 with use_beam_search");
		if (set_minp && r->min_p != 0)
			return rg_req_failp(err, "min_p", 400, "validation",
					 "min_p must be 0 with use_beam_search");
		r->temperature = 0;
	} else if (r->length_penalty != 1) {
		return rg_req_failp(err, "length_penalty", 400, "validation",
				 "length_penalty needs use_beam_search");
	} else if (r->early_stopping) {
		return rg_req_failp(err, "early_stopping", 400, "validation",
				 "early_stopping needs use_beam_search");
	}
	r->do_sample = !set_beam && r->temperature > 0;
	return RG_OK;
}

/* ---- TGI ----------------------------------------------------------------------------------- */

/* TGI's /generate and /generate_stream: {"inputs": str, "parameters": {...}}; unknown keys are
 * ignored at both levels, as serde does for TGI's structs. */
static rg_status parse_tgi(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
			   rg_req_error *err)
{
	json_object *v, *p;
	bool set_t = false, set_p = false, set_k = false, set_n = false, set_typ = false;
	bool do_sample, set_trunc = false, watermark = false;
	float typical_p = 1;
	int64_t truncate = 0, top_n = 0;
	rg_status st;

	if (!(v = opt(root, "inputs")))
		return rg_req_failp(err, "inputs", 400, "validation", "missing inputs");
	if ((st = alloc_prompts(r, 1, lim, "inputs", err)) != RG_OK ||
	    (st = copy_str(v, "inputs", false, true, &r->texts[0], &r->text_lens[0], err)))
		return st;
	/* TGI's compat route (POST /) streams when the body says "stream": true
	 * (CompatGenerateRequest); /generate and /generate_stream ignore it */
	if (r->api == RG_GEN_API_TGI && (st = get_bool(root, "stream", &r->stream, err)))
		return st;
	/* TGI: without "parameters" the defaults are default_parameters(), which sample */
	p = opt(root, "parameters");
	if (p && !json_object_is_type(p, json_type_object))
		return rg_req_failp(err, "parameters", 400, "validation",
				 "parameters must be an object");
	do_sample = !p;
	r->max_tokens = 100;
	if ((st = get_int32(p, "best_of", 1, lim->max_n, &r->best_of, NULL, err)) ||
	    (st = get_num(p, "temperature", 0, INFINITY, LO_OPEN, &r->temperature, &set_t, err)) ||
	    (st = get_num(p, "repetition_penalty", 0, INFINITY, LO_OPEN, &r->repetition_penalty,
			  NULL, err)) ||
	    (st = get_num(p, "frequency_penalty", -2, 2, 0, &r->frequency_penalty, NULL, err)) ||
	    (st = get_int32(p, "top_k", 1, INT32_MAX, &r->top_k, &set_k, err)) ||
	    (st = get_num(p, "top_p", 0, 1, LO_OPEN | HI_OPEN, &r->top_p, &set_p, err)) ||
	    (st = get_num(p, "typical_p", 0, 1, LO_OPEN, &typical_p, &set_typ, err)) ||
	    (st = get_bool(p, "do_sample", &do_sample, err)) ||
	    (st = get_int32(p, "max_new_tokens", 1, INT32_MAX, &r->max_tokens, NULL, err)) ||
	    (st = get_bool(p, "return_full_text", &r->return_full_text, err)) ||
	    (st = parse_stop(p, true, lim, r, err)) ||
	    (st = get_int(p, "truncate", 1, INT32_MAX, &truncate, &set_trunc, err)) ||
	    (st = get_bool(p, "watermark", &watermark, err)) ||
	    (st = get_bool(p, "details", &r->details, err)) ||
	    (st = get_bool(p, "decoder_input_details", &r->decoder_input_details, err)) ||
	    (st = get_int(p, "top_n_tokens", 0, RG_GEN_MAX_LOGPROBS, &top_n, &set_n, err)) ||
	    (st = parse_tgi_grammar(p, lim, r, err)) ||
	    (st = refuse_feature(p, "adapter_id", 0, "no LoRA adapters", err)) ||
	    (st = parse_targets(p, r, err)))
		return st;
	if ((v = opt(p, "seed"))) {
		/* u64 in TGI; an integer past 2^64 - 1 never gets here (rg_req_parse_object
		 * refuses what json-c would saturate) */
		if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
			return rg_req_failp(err, "seed", 400, "validation",
					 "seed must be an integer in [0, 2^64)");
		r->has_seed = true;
		r->seed = json_object_get_uint64(v);
	}
	if (typical_p != 1) /* 1 (and null) leave the distribution as it is */
		return rg_req_failp(err, "typical_p", 400, "validation",
				 "typical_p is not supported (no typical decoding); send null or 1");
	if (watermark)
		return rg_req_failp(err, "watermark", 400, "validation",
				 "watermark is not supported; send false");
	r->top_n_tokens = (int)top_n;
	r->truncate = set_trunc ? (int)truncate : 0;
	if (r->api == RG_GEN_API_TGI_STREAM && r->decoder_input_details)
		return rg_req_failp(err, "decoder_input_details", 400, "validation",
				 "decoder_input_details == true is not supported when streaming "
				 "tokens");
	if (r->best_of > 1) {
		/* TGI's router: sampling is do_sample or any warper given (even at its default) */
		if (!(do_sample || set_t || set_k || set_p || set_typ))
			return rg_req_failp(err, "best_of", 400, "validation",
					 "you must use sampling when best_of is > 1");
		if (r->api == RG_GEN_API_TGI_STREAM)
			return rg_req_failp(err, "best_of", 400, "validation",
					 "best_of != 1 is not supported when streaming tokens");
		if (r->has_seed)
			return rg_req_failp(err, "seed", 400, "validation",
					 "seed must not be set when best_of > 1");
	}
	/* TGI's NextTokenChooser: sampling when asked or when a warper changes the distribution */
	r->do_sample = do_sample || r->temperature != 1 || r->top_k != 0 || r->top_p < 1;
	/* /generate answers details when either flag asks (server.rs generate) */
	if (r->api == RG_GEN_API_TGI)
		r->details = r->details || r->decoder_input_details;
	r->logprobs = r->details || r->api == RG_GEN_API_TGI_STREAM ? r->top_n_tokens : -1;
	return RG_OK;
}

/* ---- /translate ---------------------------------------------------------------------------- */

/* The keys /translate reads: top level, and in "parameters". */
static const char *const translate_keys[] = {"inputs", "parameters", "stream", "src_lang",
					      "tgt_lang"};
static const char *const translate_params[] = {
	"max_new_tokens", "num_beams", "do_sample", "temperature", "top_k", "top_p",
	"repetition_penalty", "seed", "length_penalty", "early_stopping", "no_repeat_ngram_size",
	"stop", "details", "deadline_ms", "tpot_ms", "priority", "src_lang", "tgt_lang",
};

/* 400 naming the first key of o not in keys[n] (where: "" at the top, "parameters."). */
static rg_status refuse_other_keys(json_object *o, const char *const *keys, size_t n,
				   const char *where, rg_req_error *err)
{
	json_object_object_foreach(o, key, val) {
		size_t k = 0;

		(void)val;
		while (k < n && strcmp(key, keys[k]))
			k++;
		if (k == n)
			return rg_req_failp(err, key, 400, "validation",
					 "unknown parameter %s%.100s (/translate reads %s)", where, key,
					 *where ? "max_new_tokens, num_beams, do_sample, temperature, "
						  "top_k, top_p, repetition_penalty, seed, "
						  "length_penalty, early_stopping, "
						  "no_repeat_ngram_size, stop, details, deadline_ms, "
						  "tpot_ms, priority, src_lang, tgt_lang"
						: "inputs, parameters, stream, src_lang, tgt_lang");
	}
	return RG_OK;
}

/* POST /translate (encoder-decoders): the body documented at rg_gen_request_parse, mapped onto
 * the fields the generation routes share (beams: use_beam_search with best_of = num_beams and
 * n = 1, as fill_params reads them). */
static rg_status parse_translate(json_object *root, const rg_gen_limits *lim, rg_gen_request *r,
				 rg_req_error *err)
{
	json_object *p;
	int num_beams = 1;
	rg_status st;

	p = opt(root, "parameters");
	if (p && !json_object_is_type(p, json_type_object))
		return rg_req_failp(err, "parameters", 400, "validation",
				 "parameters must be an object");
	if ((st = parse_langs(root, p, r, err)) != RG_OK)
		return st;
	if ((st = refuse_other_keys(root, translate_keys,
				    sizeof(translate_keys) / sizeof(translate_keys[0]), "", err)))
		return st;
	if (p && (st = refuse_other_keys(p, translate_params,
					 sizeof(translate_params) / sizeof(translate_params[0]),
					 "parameters.", err)))
		return st;
	if ((st = parse_prompt(root, "inputs", lim, r, err)) ||
	    (st = get_bool(root, "stream", &r->stream, err)) ||
	    (st = get_int32(p, "max_new_tokens", 1, INT32_MAX, &r->max_tokens, NULL, err)) ||
	    (st = get_int32(p, "num_beams", 1, lim->max_n, &num_beams, NULL, err)) ||
	    (st = get_bool(p, "do_sample", &r->do_sample, err)) ||
	    (st = get_num(p, "temperature", 0, INFINITY, LO_OPEN, &r->temperature, NULL, err)) ||
	    (st = get_int32(p, "top_k", 0, INT32_MAX, &r->top_k, NULL, err)) ||
	    (st = get_num(p, "top_p", 0, 1, LO_OPEN, &r->top_p, NULL, err)) ||
	    (st = get_num(p, "repetition_penalty", 0, INFINITY, LO_OPEN, &r->repetition_penalty,
			  NULL, err)) ||
	    (st = get_num(p, "length_penalty", -INFINITY, INFINITY, 0, &r->length_penalty,
			  NULL, err)) ||
	    (st = parse_early_stopping(p, r, err)) ||
	    (st = get_int32(p, "no_repeat_ngram_size", 0, INT32_MAX, &r->no_repeat_ngram_size,
			    NULL, err)) ||
	    (st = parse_stop(p, false, lim, r, err)) ||
	    (st = get_bool(p, "details", &r->details, err)) ||
	    (st = parse_targets(p, r, err)))
		return st;
	if (opt(p, "seed")) {
		json_object *v = opt(p, "seed");

		if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
			return rg_req_failp(err, "seed", 400, "validation",
					 "seed must be an integer in [0, 2^64)");
		r->has_seed = true;
		r->seed = json_object_get_uint64(v);
	}
	/* the warpers act only when sampling (HF's generate ignores them otherwise, with a
	 * warning): a value other than the default without do_sample is refused, not ignored */
	if (!r->do_sample && (r->temperature != 1 || r->top_k != 0 || r->top_p != 1))
		return rg_req_failp(err, r->temperature != 1 ? "temperature"
					 : r->top_k != 0 ? "top_k" : "top_p", 400, "validation",
				 "%s needs \"do_sample\": true (greedy and beam search do not "
				 "read it)", r->temperature != 1 ? "temperature"
					     : r->top_k != 0 ? "top_k" : "top_p");
	if (num_beams > 1) {
		if (r->do_sample)
			return rg_req_failp(err, "num_beams", 400, "validation",
					 "num_beams > 1 with do_sample (beam sampling) is not "
					 "supported");
		if (r->n_stop)
			return rg_req_failp(err, "stop", 400, "validation",
					 "stop strings are not supported with num_beams > 1");
		if (r->stream)
			return rg_req_failp(err, "stream", 400, "validation",
					 "streaming needs num_beams 1 (a beam search's best "
					 "hypothesis is known only at its end)");
		r->use_beam_search = true;
		r->best_of = num_beams;
	} else if (r->length_penalty != 1 || r->early_stopping) {
		return rg_req_failp(err, r->length_penalty != 1 ? "length_penalty"
					 : "early_stopping", 400, "validation", "%s needs num_beams > 1",
				 r->length_penalty != 1 ? "length_penalty" : "early_stopping");
	}
	if (r->stream && r->inputs_list)
		return rg_req_failp(err, "inputs", 400, "validation",
				 "streaming takes one input; inputs is a list (send a string or one "
				 "list of token ids)");
	if (!r->do_sample)
		r->temperature = 0;
	r->logprobs = -1;
	return RG_OK;
}

/* ---- the body ------------------------------------------------------------------------------ */


rg_status rg_gen_request_parse(rg_gen_api api, const char *body, size_t len,
			       const rg_gen_limits *lim, rg_gen_request *out, rg_req_error *err)
{
	json_object *root = NULL;
	rg_status st;

	memset(out, 0, sizeof(*out));
	err->http_status = 0;
	err->type = "";
	err->msg[0] = '\0';
	err->param[0] = '\0';
	if (api != RG_GEN_API_COMPLETIONS && api != RG_GEN_API_CHAT && api != RG_GEN_API_TGI &&
	    api != RG_GEN_API_TGI_STREAM && api != RG_GEN_API_TRANSLATE)
		return rg_req_fail(err, 400, "validation", "not a generation route");
	out->api = api;
	out->add_generation_prompt = true;
	out->stream = api == RG_GEN_API_TGI_STREAM;
	out->n = 1;
	out->length_penalty = 1;
	out->max_tokens = -1;
	out->temperature = 1;
	out->top_p = 1;
	out->repetition_penalty = 1;
	out->logprobs = -1;
	out->prompt_logprobs = -1;
	out->skip_special_tokens = true;
	if ((st = rg_req_parse_object(body, len, lim->max_depth, &root, err)) != RG_OK)
		goto out_free_request;
	if (api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM)
		st = parse_tgi(root, lim, out, err);
	else if (api == RG_GEN_API_TRANSLATE)
		st = parse_translate(root, lim, out, err);
	else
		st = parse_openai(root, lim, out, err);
	json_object_put(root);
out_free_request:
	if (st != RG_OK)
		rg_gen_request_free(out);
	return st;
}

void rg_gen_request_free(rg_gen_request *r)
{
	for (int i = 0; i < r->n_prompts; i++) {
		if (r->texts)
			free(r->texts[i]);
		if (r->ids)
			free(r->ids[i]);
	}
	free(r->texts);
	free(r->text_lens);
	free(r->ids);
	free(r->n_ids);
	for (int i = 0; r->messages && i < r->n_messages; i++) {
		free(r->messages[i].role);
		free(r->messages[i].content);
		free(r->messages[i].tool_calls);
		free(r->messages[i].tool_call_id);
	}
	free(r->messages);
	for (int i = 0; r->stop && i < r->n_stop; i++)
		free(r->stop[i]);
	free(r->stop);
	free(r->stop_token_ids);
	free(r->bias_ids);
	free(r->bias_values);
	free(r->model);
	free(r->chat_template);
	for (int i = 0; i < r->n_template_vars; i++)
		free(r->template_vars[i]);
	free(r->template_vars);
	free(r->user);
	free(r->suffix);
	free(r->src_lang);
	free(r->tgt_lang);
	free(r->grammar);
	free(r->tools);
	free(r->tool_name);
	memset(r, 0, sizeof(*r));
}

bool rg_gen_request_truncate_ids(const rg_gen_request *r, int32_t *ids, int *n)
{
	if (r->truncate <= 0 || *n <= r->truncate)
		return false;
	memmove(ids, ids + (*n - r->truncate), (size_t)r->truncate * sizeof(*ids));
	*n = r->truncate;
	return true;
}

/* ---- answers ------------------------------------------------------------------------------- */

/* A JSON string of s[0..n) with every byte that does not start a valid UTF-8 sequence replaced
 * by U+FFFD (one per byte, as Python's errors="replace" does for stray bytes); NULL: "". */
static void put_str(rg_buf *b, const char *s, size_t n)
{
	char *t;
	size_t m = 0;

	if (!s)
		n = 0;
	if (rg_utf8_valid(s, n)) {
		rg_buf_json_str(b, s ? s : "", n);
		return;
	}
	if (!(t = malloc(3 * n))) {
		b->oom = true;
		return;
	}
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = rg_utf8_next(s, n, i, &cp);

		if (k) {
			memcpy(t + m, s + i, k);
			m += k;
			i += k;
		} else {
			memcpy(t + m, "\xEF\xBF\xBD", 3);
			m += 3;
			i++;
		}
	}
	rg_buf_json_str(b, t, m);
	free(t);
}

static void put_cstr(rg_buf *b, const char *s)
{
	if (s)
		put_str(b, s, strlen(s));
	else
		rg_buf_puts(b, "null");
}

/* A log-probability: -inf (and any non-finite value unless nan_null) as vLLM's -9999.0; NaN as
 * null where the schema allows it (TGI's prefill, completions' token_logprobs). */
static void put_lp(rg_buf *b, float v, bool nan_null)
{
	if (isnan(v) && nan_null)
		rg_buf_puts(b, "null");
	else if (!isfinite(v))
		rg_buf_puts(b, LP_FLOOR);
	else
		rg_buf_float(b, v);
}

const char *rg_gen_finish_name(rg_gen_api api, rg_gen_finish f)
{
	bool tgi = api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM ||
		   api == RG_GEN_API_TRANSLATE;

	switch (f) {
	case RG_GEN_FINISH_NONE:
		return NULL;
	case RG_GEN_FINISH_EOS:
		return tgi ? "eos_token" : "stop";
	case RG_GEN_FINISH_STOP:
		return tgi ? "stop_sequence" : "stop";
	case RG_GEN_FINISH_LENGTH:
		return "length";
	case RG_GEN_FINISH_TOOL_CALLS:
		return tgi ? "eos_token" : "tool_calls";
	case RG_GEN_FINISH_ABORT:
		return tgi ? NULL : "abort"; /* TGI's stream ends with an error event instead */
	}
	return NULL;
}

/* {"id", "object", "created", "model", "system_fingerprint", "choices":[  -- of every OpenAI
 * answer and chunk. */
static void openai_head(rg_buf *b, const rg_gen_answer_ctx *ctx, const char *object)
{
	rg_buf_puts(b, "{\"id\":");
	put_str(b, ctx->id, ctx->id ? strlen(ctx->id) : 0);
	rg_buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, ctx->created);
	put_str(b, ctx->model, ctx->model ? strlen(ctx->model) : 0);
	rg_buf_puts(b, ",\"system_fingerprint\":");
	put_cstr(b, ctx->fingerprint);
	rg_buf_puts(b, ",\"choices\":[");
}

static void put_usage(rg_buf *b, const rg_gen_usage *u)
{
	if (!u) {
		rg_buf_puts(b, "null");
		return;
	}
	rg_buf_printf(b,
		      "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
		      "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
		      u->prompt_tokens, u->completion_tokens,
		      u->prompt_tokens + u->completion_tokens, u->cached_tokens);
}

/* Completions' logprobs object of n tokens; offsets NULL: each token's offset from the first
 * (the pieces' lengths summed). */
static void completions_logprobs(rg_buf *b, const rg_gen_lp *lps, int n, const size_t *offsets)
{
	size_t off = 0;

	rg_buf_puts(b, "{\"tokens\":[");
	for (int i = 0; i < n; i++) {
		if (i)
			rg_buf_puts(b, ",");
		put_str(b, lps[i].tok.piece, lps[i].tok.piece_len);
	}
	rg_buf_puts(b, "],\"token_logprobs\":[");
	for (int i = 0; i < n; i++) {
		if (i)
			rg_buf_puts(b, ",");
		put_lp(b, lps[i].tok.logprob, true);
	}
	rg_buf_puts(b, "],\"top_logprobs\":[");
	for (int i = 0; i < n; i++) {
		if (lps[i].n_top < 0) { /* an echoed prompt's first token */
			rg_buf_puts(b, i ? ",null" : "null");
			continue;
		}
		rg_buf_puts(b, i ? ",{" : "{");
		for (int k = 0; k < lps[i].n_top; k++) {
			if (k)
				rg_buf_puts(b, ",");
			put_str(b, lps[i].top[k].piece, lps[i].top[k].piece_len);
			rg_buf_puts(b, ":");
			put_lp(b, lps[i].top[k].logprob, false);
		}
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "],\"text_offset\":[");
	for (int i = 0; i < n; i++) {
		rg_buf_printf(b, i ? ",%zu" : "%zu", offsets ? offsets[i] : off);
		off += lps[i].tok.piece_len;
	}
	rg_buf_puts(b, "]}");
}

/* One entry of vLLM's prompt_logprobs: "id":{"logprob","rank","decoded_token"} */
static void prompt_lp_entry(rg_buf *b, const rg_gen_tok *t, int rank)
{
	rg_buf_printf(b, "\"%d\":{\"logprob\":", (int)t->id);
	put_lp(b, t->logprob, false);
	rg_buf_printf(b, ",\"rank\":%d,\"decoded_token\":", rank);
	put_str(b, t->piece, t->piece_len);
	rg_buf_puts(b, "}");
}

/* vLLM's prompt_logprobs list: null for the first token (n_top < 0), else the token's entry
 * then its alternatives' (the token once: vLLM's dict of token id -> Logprob). */
static void prompt_logprobs_list(rg_buf *b, const rg_gen_lp *lps, int n)
{
	rg_buf_puts(b, "[");
	for (int i = 0; i < n; i++) {
		if (i)
			rg_buf_puts(b, ",");
		if (lps[i].n_top < 0) {
			rg_buf_puts(b, "null");
			continue;
		}
		rg_buf_puts(b, "{");
		prompt_lp_entry(b, &lps[i].tok, lps[i].rank);
		for (int k = 0; k < lps[i].n_top; k++)
			if (lps[i].top[k].id != lps[i].tok.id) {
				rg_buf_puts(b, ",");
				prompt_lp_entry(b, &lps[i].top[k], k + 1);
			}
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "]");
}

/* Chat's {"token", "logprob", "bytes": the piece's raw bytes} */
static void chat_tok(rg_buf *b, const rg_gen_tok *t)
{
	rg_buf_puts(b, "{\"token\":");
	put_str(b, t->piece, t->piece_len);
	rg_buf_puts(b, ",\"logprob\":");
	put_lp(b, t->logprob, false);
	rg_buf_puts(b, ",\"bytes\":[");
	for (size_t k = 0; k < t->piece_len; k++)
		rg_buf_printf(b, k ? ",%u" : "%u", (unsigned)(unsigned char)t->piece[k]);
	rg_buf_puts(b, "]");
}

static void chat_logprobs(rg_buf *b, const rg_gen_lp *lps, int n)
{
	rg_buf_puts(b, "{\"content\":[");
	for (int i = 0; i < n; i++) {
		if (i)
			rg_buf_puts(b, ",");
		chat_tok(b, &lps[i].tok);
		rg_buf_puts(b, ",\"top_logprobs\":[");
		for (int k = 0; k < lps[i].n_top; k++) {
			if (k)
				rg_buf_puts(b, ",");
			chat_tok(b, &lps[i].top[k]);
			rg_buf_puts(b, "}");
		}
		rg_buf_puts(b, "]}");
	}
	rg_buf_puts(b, "],\"refusal\":null}");
}

/* TGI's Token {"id", "text", "logprob", "special"}; text given apart (the stream's delta). */
static void tgi_tok(rg_buf *b, const rg_gen_tok *t, const char *text, size_t text_len)
{
	rg_buf_printf(b, "{\"id\":%d,\"text\":", (int)t->id);
	put_str(b, text, text_len);
	rg_buf_puts(b, ",\"logprob\":");
	put_lp(b, t->logprob, true);
	rg_buf_printf(b, ",\"special\":%s}", t->special ? "true" : "false");
}

static void tgi_tok_list(rg_buf *b, const rg_gen_tok *t, int n)
{
	rg_buf_puts(b, "[");
	for (int k = 0; k < n; k++) {
		if (k)
			rg_buf_puts(b, ",");
		tgi_tok(b, &t[k], t[k].piece, t[k].piece_len);
	}
	rg_buf_puts(b, "]");
}

static void put_seed(rg_buf *b, bool has_seed, uint64_t seed)
{
	if (has_seed)
		rg_buf_printf(b, "%llu", (unsigned long long)seed);
	else
		rg_buf_puts(b, "null");
}

/* The body of TGI's Details / BestOfSequence for one choice (without the braces):
 * finish_reason, generated_tokens, seed, prefill, tokens, top_tokens (when top_n). */
static void tgi_details(rg_buf *b, const rg_gen_choice *c, int top_n)
{
	rg_buf_puts(b, "\"finish_reason\":");
	put_cstr(b, rg_gen_finish_name(RG_GEN_API_TGI, c->finish));
	rg_buf_printf(b, ",\"generated_tokens\":%lld,\"seed\":", c->n_generated);
	put_seed(b, c->has_seed, c->seed);
	rg_buf_puts(b, ",\"prefill\":[");
	for (int i = 0; c->prefill && i < c->n_prefill; i++) {
		rg_buf_printf(b, i ? ",{\"id\":%d,\"text\":" : "{\"id\":%d,\"text\":",
			      (int)c->prefill[i].id);
		put_str(b, c->prefill[i].piece, c->prefill[i].piece_len);
		rg_buf_puts(b, ",\"logprob\":");
		put_lp(b, c->prefill[i].logprob, true);
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "],\"tokens\":[");
	for (int i = 0; c->lps && i < c->n_lps; i++) {
		if (i)
			rg_buf_puts(b, ",");
		tgi_tok(b, &c->lps[i].tok, c->lps[i].tok.piece, c->lps[i].tok.piece_len);
	}
	rg_buf_puts(b, "]");
	if (top_n > 0) {
		rg_buf_puts(b, ",\"top_tokens\":[");
		for (int i = 0; c->lps && i < c->n_lps; i++) {
			if (i)
				rg_buf_puts(b, ",");
			tgi_tok_list(b, c->lps[i].top, c->lps[i].n_top);
		}
		rg_buf_puts(b, "]");
	}
}

void rg_gen_answer_json(rg_buf *b, const rg_gen_answer_ctx *ctx, const rg_gen_choice *choices,
			int n_choices, const rg_gen_usage *usage, bool details, int top_n)
{
	bool chat = ctx->api == RG_GEN_API_CHAT;

	if (ctx->api == RG_GEN_API_TRANSLATE) {
		rg_buf_puts(b, ctx->list ? "[" : "");
		for (int i = 0; i < (ctx->list ? n_choices : n_choices > 0); i++) {
			const rg_gen_choice *c = &choices[i];

			rg_buf_puts(b, i ? ",{\"translation_text\":" : "{\"translation_text\":");
			put_str(b, c->text, c->text_len);
			rg_buf_printf(b, ",\"generated_tokens\":%lld,\"finish_reason\":",
				      c->n_generated);
			put_cstr(b, rg_gen_finish_name(ctx->api, c->finish));
			rg_buf_puts(b, ",\"details\":");
			if (details) {
				rg_buf_puts(b, "{");
				tgi_details(b, c, top_n);
				rg_buf_puts(b, "}}");
			} else {
				rg_buf_puts(b, "null}");
			}
		}
		rg_buf_puts(b, ctx->list ? "]" : "");
		return;
	}
	if (ctx->api == RG_GEN_API_TGI || ctx->api == RG_GEN_API_TGI_STREAM) {
		rg_buf_puts(b, "{\"generated_text\":");
		put_str(b, n_choices ? choices[0].text : "", n_choices ? choices[0].text_len : 0);
		rg_buf_puts(b, ",\"details\":");
		if (!details || !n_choices) {
			rg_buf_puts(b, "null}");
			return;
		}
		rg_buf_puts(b, "{");
		tgi_details(b, &choices[0], top_n);
		if (n_choices > 1) {
			rg_buf_puts(b, ",\"best_of_sequences\":[");
			for (int i = 1; i < n_choices; i++) {
				rg_buf_puts(b, i > 1 ? ",{\"generated_text\":" :
						       "{\"generated_text\":");
				put_str(b, choices[i].text, choices[i].text_len);
				rg_buf_puts(b, ",");
				tgi_details(b, &choices[i], top_n);
				rg_buf_puts(b, "}");
			}
			rg_buf_puts(b, "]");
		}
		rg_buf_puts(b, "}}");
		return;
	}
	openai_head(b, ctx, chat ? "chat.completion" : "text_completion");
	for (int i = 0; i < n_choices; i++) {
		const rg_gen_choice *c = &choices[i];

		rg_buf_printf(b, i ? ",{\"index\":%d," : "{\"index\":%d,", c->index);
		if (chat) {
			rg_buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
			if (c->tools && !c->text_len)
				rg_buf_puts(b, "null");
			else
				put_str(b, c->text, c->text_len);
			if (c->n_calls) {
				rg_buf_puts(b, ",\"tool_calls\":[");
				for (int k = 0; k < c->n_calls; k++) {
					char id[64];

					rg_tool_call_id(id, sizeof(id), ctx->id, c->index, k,
							ctx->tool_ids_nine);
					rg_buf_puts(b, k ? ",{\"id\":" : "{\"id\":");
					put_cstr(b, id);
					rg_buf_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
					put_cstr(b, c->calls[k].name);
					rg_buf_puts(b, ",\"arguments\":");
					put_cstr(b, c->calls[k].arguments);
					rg_buf_puts(b, "}}");
				}
				rg_buf_puts(b, "]");
			}
			rg_buf_puts(b, "},\"logprobs\":");
			if (c->lps)
				chat_logprobs(b, c->lps, c->n_lps);
			else
				rg_buf_puts(b, "null");
		} else {
			rg_buf_puts(b, "\"text\":");
			put_str(b, c->text, c->text_len);
			rg_buf_puts(b, ",\"logprobs\":");
			if (c->lps)
				completions_logprobs(b, c->lps, c->n_lps, c->text_offset);
			else
				rg_buf_puts(b, "null");
		}
		rg_buf_puts(b, ",\"finish_reason\":");
		put_cstr(b, rg_gen_finish_name(ctx->api, c->finish));
		rg_buf_puts(b, ",\"stop_reason\":");
		put_cstr(b, c->stop_str);
		if (!chat && c->prompt_lps) {
			rg_buf_puts(b, ",\"prompt_logprobs\":");
			prompt_logprobs_list(b, c->prompt_lps, c->n_prompt_lps);
		}
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "],\"usage\":");
	put_usage(b, usage);
	if (chat && n_choices > 0 && choices[0].prompt_lps) {
		/* vLLM's: the answer's, beside usage */
		rg_buf_puts(b, ",\"prompt_logprobs\":");
		prompt_logprobs_list(b, choices[0].prompt_lps, choices[0].n_prompt_lps);
	}
	rg_buf_puts(b, "}");
}

void rg_gen_answer_event(rg_buf *b, const rg_gen_answer_ctx *ctx, int index, bool first,
			 const char *delta, size_t delta_len, const rg_gen_lp *lps, int n_lps,
			 bool want_logprobs, rg_gen_finish finish, const char *stop_str,
			 const char *full_text, size_t full_len, long long n_generated,
			 bool has_seed, uint64_t seed)
{
	const char *fin = rg_gen_finish_name(ctx->api, finish);

	rg_buf_puts(b, "data: ");
	/* TRANSLATE streams as TGI_STREAM (the route switches the api; here too, for safety) */
	if (ctx->api == RG_GEN_API_TGI || ctx->api == RG_GEN_API_TGI_STREAM ||
	    ctx->api == RG_GEN_API_TRANSLATE) {
		static const rg_gen_tok none = { 0 };
		const rg_gen_tok *t = n_lps > 0 && lps ? &lps[0].tok : &none;

		rg_buf_printf(b, "{\"index\":%d,\"token\":", index);
		tgi_tok(b, t, delta ? delta : t->piece, delta ? delta_len : t->piece_len);
		if (n_lps > 0 && lps && lps[0].n_top > 0) {
			rg_buf_puts(b, ",\"top_tokens\":");
			tgi_tok_list(b, lps[0].top, lps[0].n_top);
		}
		rg_buf_puts(b, ",\"generated_text\":");
		if (fin)
			put_str(b, full_text, full_len);
		else
			rg_buf_puts(b, "null");
		rg_buf_puts(b, ",\"details\":");
		if (fin) {
			rg_buf_printf(b, "{\"finish_reason\":\"%s\",\"generated_tokens\":%lld,"
				      "\"seed\":", fin, n_generated);
			put_seed(b, has_seed, seed);
			rg_buf_printf(b, ",\"input_length\":%lld}", ctx->prompt_tokens);
		} else {
			rg_buf_puts(b, "null");
		}
		rg_buf_puts(b, "}\n\n");
		return;
	}
	if (ctx->api == RG_GEN_API_CHAT) {
		openai_head(b, ctx, "chat.completion.chunk");
		rg_buf_printf(b, "{\"index\":%d,\"delta\":", index);
		if (first) {
			rg_buf_puts(b, "{\"role\":\"assistant\",\"content\":");
			put_str(b, delta, delta_len);
			rg_buf_puts(b, "}");
		} else if (delta_len) {
			rg_buf_puts(b, "{\"content\":");
			put_str(b, delta, delta_len);
			rg_buf_puts(b, "}");
		} else {
			rg_buf_puts(b, "{}");
		}
		rg_buf_puts(b, ",\"logprobs\":");
		if (want_logprobs)
			chat_logprobs(b, lps, lps ? n_lps : 0);
		else
			rg_buf_puts(b, "null");
	} else {
		openai_head(b, ctx, "text_completion");
		rg_buf_printf(b, "{\"index\":%d,\"text\":", index);
		put_str(b, delta, delta_len);
		rg_buf_puts(b, ",\"logprobs\":");
		if (want_logprobs)
			completions_logprobs(b, lps, lps ? n_lps : 0, NULL);
		else
			rg_buf_puts(b, "null");
	}
	rg_buf_puts(b, ",\"finish_reason\":");
	put_cstr(b, fin);
	rg_buf_puts(b, ",\"stop_reason\":");
	put_cstr(b, stop_str);
	rg_buf_puts(b, "}]}\n\n");
}

void rg_gen_answer_tool_event(rg_buf *b, const rg_gen_answer_ctx *ctx, int index,
			      int tool_index, const char *id, const char *name, const char *args,
			      size_t args_len)
{
	rg_buf_puts(b, "data: ");
	openai_head(b, ctx, "chat.completion.chunk");
	rg_buf_printf(b, "{\"index\":%d,\"delta\":{\"tool_calls\":[{\"index\":%d,", index,
		      tool_index);
	if (name) {
		rg_buf_puts(b, "\"id\":");
		put_cstr(b, id);
		rg_buf_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
		put_cstr(b, name);
		rg_buf_puts(b, ",\"arguments\":\"\"}");
	} else {
		rg_buf_puts(b, "\"function\":{\"arguments\":");
		put_str(b, args, args_len);
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
}

void rg_gen_answer_usage_event(rg_buf *b, const rg_gen_answer_ctx *ctx, const rg_gen_usage *u)
{
	if (ctx->api != RG_GEN_API_COMPLETIONS && ctx->api != RG_GEN_API_CHAT)
		return; /* TGI has no usage chunk */
	rg_buf_puts(b, "data: ");
	openai_head(b, ctx, ctx->api == RG_GEN_API_CHAT ? "chat.completion.chunk"
							 : "text_completion");
	rg_buf_puts(b, "],\"usage\":");
	put_usage(b, u);
	rg_buf_puts(b, "}\n\n");
}

void rg_gen_answer_error_event(rg_buf *b, rg_gen_api api, const char *type, const char *msg)
{
	rg_buf_puts(b, "data: ");
	if (api == RG_GEN_API_TGI || api == RG_GEN_API_TGI_STREAM || api == RG_GEN_API_TRANSLATE)
		rg_json_error_body(b, msg ? msg : "", type ? type : "");
	else
		rg_json_openai_error_body(b, msg ? msg : "", type ? type : "", NULL, NULL);
	rg_buf_puts(b, "\n\n");
}

void rg_gen_answer_done_event(rg_buf *b)
{
	rg_buf_puts(b, "data: [DONE]\n\n");
}
