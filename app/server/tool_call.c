/* Tool calls out of generated text (tool_call.h). */
#include "server/tool_call.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
static const char PY_TAG[] = "<|python_tag|>";
static const char MISTRAL_TAG[] = "[TOOL_CALLS]";

static bool ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool all_ws(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!ws(s[i]))
			return false;
	return true;
}

/* The first occurrence of needle in s[0..n), or NULL. */
static const char *find(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);

	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(s + i, needle, k))
			return s + i;
	return NULL;
}

/* Bytes at the end of s[0..n) that are a proper prefix of tag (a tag that may be arriving). */
static size_t partial_tag(const char *s, size_t n, const char *tag)
{
	size_t k = strlen(tag);

	for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
		if (!memcmp(s + n - m, tag, m))
			return m;
	return 0;
}

static void scan_reset(rg_tool_scan *s)
{
	rg_tool_scan_free(s);
	rg_buf_init(&s->content);
}

void rg_tool_scan_free(rg_tool_scan *s)
{
	for (int i = 0; i < s->n_calls; i++) {
		free(s->calls[i].name);
		free(s->calls[i].arguments);
	}
	free(s->calls);
	rg_buf_free(&s->content);
	memset(s, 0, sizeof(*s));
}

/* The n bytes at p as a NUL-terminated copy (malloc'd; NULL when out of memory). Not strndup:
 * p is a span of the model's text, not NUL-terminated, and strndup's NUL search may read past
 * it (AddressSanitizer's strict_string_checks, scripts/run-tests.sh, flags exactly that). */
static char *dup_span(const char *p, size_t n)
{
	char *r = malloc(n + 1);

	if (r) {
		memcpy(r, p, n);
		r[n] = '\0';
	}
	return r;
}

static void add_call(rg_tool_scan *s, const char *name, size_t name_len, const char *args,
		     size_t args_len)
{
	rg_tool_call *nc = realloc(s->calls, (size_t)(s->n_calls + 1) * sizeof(*nc));

	if (!nc) {
		s->oom = true;
		return;
	}
	s->calls = nc;
	nc[s->n_calls].name = dup_span(name, name_len);
	nc[s->n_calls].arguments = dup_span(args, args_len);
	if (!nc[s->n_calls].name || !nc[s->n_calls].arguments) {
		free(nc[s->n_calls].name);
		free(nc[s->n_calls].arguments);
		s->oom = true;
		return;
	}
	s->n_calls++;
}

/* o is {"name": string, args_key: object, ...} (args_key2 tried too when not NULL): the call
 * added, its arguments written as json.dumps writes them. Returns whether it was one. */
static bool add_json_call(rg_tool_scan *s, json_object *o, const char *args_key,
			  const char *args_key2)
{
	json_object *name = NULL, *args = NULL;
	rg_buf b;

	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, "name", &name) ||
	    !json_object_is_type(name, json_type_string))
		return false;
	if (!json_object_object_get_ex(o, args_key, &args) && args_key2)
		json_object_object_get_ex(o, args_key2, &args);
	if (!json_object_is_type(args, json_type_object))
		return false;
	rg_buf_init(&b);
	rg_json_dump_py(&b, args, -1);
	if (b.oom)
		s->oom = true;
	else
		add_call(s, json_object_get_string(name), (size_t)json_object_get_string_len(name),
			 b.data ? b.data : "{}", b.len);
	rg_buf_free(&b);
	return true;
}

/* One JSON value, the whole of s[0..n) but white space; NULL when it is not. */
static json_object *parse_whole(const char *s, size_t n)
{
	json_object *o = NULL;

	while (n && ws(*s))
		s++, n--;
	if (!n || rg_json_parse(s, n, JSON_TOKENER_VALIDATE_UTF8, "tool call", NULL, &o) != RG_OK)
		return NULL;
	return o;
}

static void scan_hermes(const char *t, size_t len, bool final, rg_tool_scan *s)
{
	const char *p = find(t, len, OPEN), *end = t + len;

	if (!p) {   /* content, but a "<tool_call>" that may be arriving */
		rg_buf_put(&s->content, t, final ? len : len - partial_tag(t, len, OPEN));
		return;
	}
	rg_buf_put(&s->content, t, (size_t)(p - t));
	for (;;) {
		const char *body = p + strlen(OPEN), *q = find(body, (size_t)(end - body), CLOSE);
		const char *next;
		json_object *o;
		bool ok;

		if (!q) {   /* not closed (yet) */
			if (final)
				rg_buf_put(&s->content, p, (size_t)(end - p));
			return;
		}
		o = parse_whole(body, (size_t)(q - body));
		ok = o && add_json_call(s, o, "arguments", NULL);
		json_object_put(o);
		if (!ok) {  /* malformed: the rest is content, as it comes */
			rg_buf_put(&s->content, p, (size_t)(end - p));
			return;
		}
		p = q + strlen(CLOSE);
		next = find(p, (size_t)(end - p), OPEN);
		if (!next) {
			/* text after the last call: content when final and not white space; else
			 * held (it may be the white space before the next call) */
			if (final && !all_ws(p, (size_t)(end - p)))
				rg_buf_put(&s->content, p, (size_t)(end - p));
			return;
		}
		if (!all_ws(p, (size_t)(next - p)))
			rg_buf_put(&s->content, p, (size_t)(next - p));
		p = next;
	}
}

/* Llama 3.1's JSON calls: objects separated by ';', the whole text. Returns whether it was. */
static bool llama3_calls(const char *t, size_t len, rg_tool_scan *s)
{
	struct json_tokener *tok = json_tokener_new();
	size_t i = 0;
	bool ok = true, any = false;

	if (!tok) {
		s->oom = true;
		return false;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
					    JSON_TOKENER_VALIDATE_UTF8);
	while (ok) {
		json_object *o;

		while (i < len && ws(t[i]))
			i++;
		if (i == len) {
			ok = any;
			break;
		}
		if (any) {
			if (t[i] != ';') {
				ok = false;
				break;
			}
			for (i++; i < len && ws(t[i]); i++)
				;
		}
		json_tokener_reset(tok);
		o = json_tokener_parse_ex(tok, t + i, (int)(len - i));
		if (!o || json_tokener_get_error(tok) != json_tokener_success) {
			json_object_put(o);
			ok = false;
			break;
		}
		i += json_tokener_get_parse_end(tok);
		ok = add_json_call(s, o, "parameters", "arguments");
		json_object_put(o);
		any = true;
	}
	json_tokener_free(tok);
	return ok;
}

static void scan_llama3(const char *t, size_t len, bool final, rg_tool_scan *s)
{
	size_t i = 0, k = strlen(PY_TAG);

	while (i < len && ws(t[i]))
		i++;
	if (len - i >= k && !memcmp(t + i, PY_TAG, k))
		i += k;
	else if (len - i < k && !memcmp(t + i, PY_TAG, len - i) && !final)
		return;     /* a python tag may be arriving */
	while (i < len && ws(t[i]))
		i++;
	if (i == len && !final)
		return;
	if (i < len && t[i] == '{') {
		if (!final)
			return;
		if (llama3_calls(t + i, len - i, s))
			return;
		scan_reset(s);
	}
	rg_buf_put(&s->content, t, len);
}

/* Content before [TOOL_CALLS], then the list (vLLM's mistral parser); not a list of calls: the
 * whole text is content. */
static void scan_mistral(const char *t, size_t len, bool final, rg_tool_scan *s)
{
	const char *p = find(t, len, MISTRAL_TAG);
	json_object *o;
	size_t n, at;
	bool ok = true;

	if (!p) {
		rg_buf_put(&s->content, t, final ? len : len - partial_tag(t, len, MISTRAL_TAG));
		return;
	}
	at = (size_t)(p - t);
	rg_buf_put(&s->content, t, at);
	if (!final)
		return;
	o = parse_whole(p + strlen(MISTRAL_TAG), len - at - strlen(MISTRAL_TAG));
	n = json_object_is_type(o, json_type_array) ? json_object_array_length(o) : 0;
	for (size_t k = 0; k < n && ok; k++)
		ok = add_json_call(s, json_object_array_get_idx(o, k), "arguments", NULL);
	json_object_put(o);
	if (!n || !ok) {
		scan_reset(s);
		rg_buf_put(&s->content, t, len);
	}
}

static void scan_list(const char *t, size_t len, bool final, rg_tool_scan *s)
{
	json_object *o;
	size_t n;
	bool ok = true;

	if (!final)
		return;
	o = parse_whole(t, len);
	n = json_object_is_type(o, json_type_array) ? json_object_array_length(o) : 0;
	for (size_t k = 0; k < n && ok; k++)
		ok = add_json_call(s, json_object_array_get_idx(o, k), "parameters", NULL);
	json_object_put(o);
	if (!n || !ok) {
		scan_reset(s);
		rg_buf_put(&s->content, t, len);
	}
}

void rg_tool_scan_text(rg_tool_fmt fmt, const char *named, const char *text, size_t len,
		       bool final, rg_tool_scan *out)
{
	scan_reset(out);
	if (!text)
		text = "", len = 0;
	switch (fmt) {
	case RG_TOOL_FMT_NONE:
		rg_buf_put(&out->content, text, len);
		break;
	case RG_TOOL_FMT_HERMES:
		scan_hermes(text, len, final, out);
		break;
	case RG_TOOL_FMT_LLAMA3:
		scan_llama3(text, len, final, out);
		break;
	case RG_TOOL_FMT_MISTRAL:
		scan_mistral(text, len, final, out);
		break;
	case RG_TOOL_FMT_LIST:
		scan_list(text, len, final, out);
		break;
	case RG_TOOL_FMT_NAMED:
		add_call(out, named ? named : "", named ? strlen(named) : 0, text, len);
		break;
	}
	out->oom |= out->content.oom;
}

rg_tool_fmt rg_tool_fmt_of_family(const char *family)
{
	if (family && !strcmp(family, "chatml"))
		return RG_TOOL_FMT_HERMES;
	if (family && !strcmp(family, "llama3"))
		return RG_TOOL_FMT_LLAMA3;
	if (family && !strcmp(family, "mistral"))
		return RG_TOOL_FMT_MISTRAL;
	return RG_TOOL_FMT_NONE;
}

void rg_tool_call_id(char *buf, size_t n, const char *answer_id, int choice, int k, bool nine)
{
	const char *h = answer_id ? strchr(answer_id, '-') : NULL;
	const char *hex = h ? h + 1 : (answer_id ? answer_id : "");

	if (nine)
		snprintf(buf, n, "%.5s%02x%02x", strlen(hex) >= 5 ? hex : "00000",
			 (unsigned)choice & 0xff, (unsigned)k & 0xff);
	else
		snprintf(buf, n, "call_%.20s%02x%02x", hex, (unsigned)choice & 0xff,
			 (unsigned)k & 0xff);
}
