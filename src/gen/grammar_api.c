/* The public face of constrained decoding (include/ragged.h rg_grammar_kind,
 * rg_grammar_compile_check, rg_regex_fullmatch) and the one path from a request's grammar to
 * its compiled rg_grammar (grammar.h). */
#include <json-c/json.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/error.h"
#include "gen/grammar.h"

#define MAX_CHOICES 4096
#define CACHE_N 32
#define CACHE_BYTES ((size_t)64 << 20)

/* The last compiled DFAs by (kind, text, max_states), least recently used evicted: each entry
 * holds a reference. */
static struct {
	rg_grammar_kind kind;
	int max_states;
	char *text;
	rg_dfa *d;
	size_t bytes;
	unsigned long long used;
} cache[CACHE_N];
static size_t cache_bytes;
static unsigned long long cache_clock;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static rg_dfa *cache_get(rg_grammar_kind kind, const char *text, int max_states)
{
	rg_dfa *d = NULL;

	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_N; i++)
		if (cache[i].d && cache[i].kind == kind && cache[i].max_states == max_states &&
		    !strcmp(cache[i].text, text)) {
			cache[i].used = ++cache_clock;
			d = rg_dfa_ref(cache[i].d);
			break;
		}
	pthread_mutex_unlock(&cache_mu);
	return d;
}

static void cache_drop(int i)
{
	cache_bytes -= cache[i].bytes;
	rg_dfa_free(cache[i].d);
	free(cache[i].text);
	cache[i].d = NULL;
	cache[i].text = NULL;
}

/* Keep d (a new reference) for (kind, text, max_states); nothing when it does not fit. */
static void cache_put(rg_grammar_kind kind, const char *text, int max_states, rg_dfa *d)
{
	size_t bytes = rg_dfa_bytes(d);
	char *t;

	if (bytes > CACHE_BYTES / 4 || !(t = strdup(text)))
		return;
	pthread_mutex_lock(&cache_mu);
	for (int i = 0; i < CACHE_N; i++)
		if (cache[i].d && cache[i].kind == kind && cache[i].max_states == max_states &&
		    !strcmp(cache[i].text, text)) {
			pthread_mutex_unlock(&cache_mu); /* another thread compiled it meanwhile */
			free(t);
			return;
		}
	for (;;) {
		int victim = -1, n_used = 0;

		for (int i = 0; i < CACHE_N; i++)
			if (cache[i].d) {
				n_used++;
				if (victim < 0 || cache[i].used < cache[victim].used)
					victim = i;
			}
		if (n_used < CACHE_N && cache_bytes + bytes <= CACHE_BYTES)
			break;
		cache_drop(victim);
	}
	for (int i = 0; i < CACHE_N; i++)
		if (!cache[i].d) {
			cache[i].kind = kind;
			cache[i].max_states = max_states;
			cache[i].text = t;
			cache[i].d = rg_dfa_ref(d);
			cache[i].bytes = bytes;
			cache[i].used = ++cache_clock;
			cache_bytes += bytes;
			break;
		}
	pthread_mutex_unlock(&cache_mu);
}

/* The regex of a JSON list of strings: their escaped alternation. */
static rg_status choice_regex(const char *text, char **out)
{
	json_object *root = json_tokener_parse(text);
	size_t n;
	rg_buf b;

	if (!root || !json_object_is_type(root, json_type_array)) {
		json_object_put(root);
		return rg_errorf(RG_ERR_INVALID_INPUT, "choice: must be a JSON list of strings");
	}
	n = json_object_array_length(root);
	if (n < 1 || n > MAX_CHOICES) {
		json_object_put(root);
		return rg_errorf(RG_ERR_INVALID_INPUT, "choice: %zu strings; 1 to %d are allowed", n,
				 MAX_CHOICES);
	}
	rg_buf_init(&b);
	for (size_t i = 0; i < n; i++) {
		json_object *v = json_object_array_get_idx(root, i);

		if (!json_object_is_type(v, json_type_string)) {
			rg_buf_free(&b);
			json_object_put(root);
			return rg_errorf(RG_ERR_INVALID_INPUT, "choice: entry %zu is not a string", i);
		}
		if (i)
			rg_buf_puts(&b, "|");
		rg_buf_puts(&b, "(?:");
		rg_regex_escape(&b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		rg_buf_puts(&b, ")");
	}
	json_object_put(root);
	if (b.oom) {
		rg_buf_free(&b);
		return rg_errorf(RG_ERR_OOM, "choice: out of memory");
	}
	*out = b.data;
	return RG_OK;
}

/* The regex of grammar (kind, text), malloc'd. */
static rg_status grammar_regex(rg_grammar_kind kind, const char *text, char **out)
{
	*out = NULL;
	switch (kind) {
	case RG_GRAMMAR_NONE:
		return rg_errorf(RG_ERR_INVALID_INPUT, "grammar: no grammar");
	case RG_GRAMMAR_JSON_OBJECT:
		return rg_json_any_regex(3, out);
	case RG_GRAMMAR_REGEX:
	case RG_GRAMMAR_JSON_SCHEMA:
	case RG_GRAMMAR_CHOICE:
		break;
	}
	if (!text)
		return rg_errorf(RG_ERR_INVALID_INPUT, "grammar: no text for a regex, schema or "
				 "choice");
	if (kind == RG_GRAMMAR_REGEX) {
		if (!(*out = strdup(text)))
			return rg_errorf(RG_ERR_OOM, "grammar: out of memory");
		return RG_OK;
	}
	if (kind == RG_GRAMMAR_CHOICE)
		return choice_regex(text, out);
	if (kind == RG_GRAMMAR_JSON_SCHEMA)
		return rg_json_schema_regex(text, strlen(text), out);
	return rg_errorf(RG_ERR_INVALID_INPUT, "grammar: unknown kind %d", (int)kind);
}

/* The DFA of (kind, text): the cache's, else compiled (and cached). regex (may be NULL): the
 * regex it stands for, malloc'd. */
static rg_status compile(rg_grammar_kind kind, const char *text, int max_states, char **regex,
			 rg_dfa **d)
{
	const char *key = text ? text : "";
	char *re = NULL;
	rg_status st;

	*d = NULL;
	if (max_states <= 0)
		max_states = RG_GRAMMAR_MAX_STATES;
	if (!regex && (*d = cache_get(kind, key, max_states)))
		return RG_OK;
	if ((st = grammar_regex(kind, text, &re)) != RG_OK)
		return st;
	st = rg_dfa_compile(re, strlen(re), max_states, d);
	if (st == RG_OK)
		cache_put(kind, key, max_states, *d);
	if (st == RG_OK && regex)
		*regex = re;
	else
		free(re);
	return st;
}

rg_status rg_grammar_compile_check(rg_grammar_kind kind, const char *text, int max_states,
				   char **regex, int *n_states)
{
	rg_dfa *d;
	rg_status st;

	if (regex)
		*regex = NULL;
	if (n_states)
		*n_states = 0;
	if ((st = compile(kind, text, max_states, regex, &d)) != RG_OK)
		return st;
	if (n_states)
		*n_states = rg_dfa_n_states(d);
	rg_dfa_free(d);
	return RG_OK;
}

rg_status rg_regex_fullmatch(const char *pattern, const char *s, size_t len, bool *match)
{
	rg_dfa *d;
	rg_status st;

	if (!match || !pattern || (!s && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "regex: NULL argument");
	*match = false;
	if ((st = rg_dfa_compile(pattern, strlen(pattern), 0, &d)) != RG_OK)
		return st;
	*match = rg_dfa_match(d, s ? s : "", len);
	rg_dfa_free(d);
	return RG_OK;
}

rg_status rg_grammar_from_params(rg_grammar_kind kind, const char *text,
				 const rg_token_trie *trie, int max_states, rg_grammar **out)
{
	rg_dfa *d;
	rg_status st;

	*out = NULL;
	if ((st = compile(kind, text, max_states, NULL, &d)) != RG_OK)
		return st;
	if ((st = rg_grammar_new(d, trie, out)) != RG_OK)
		rg_dfa_free(d);
	return st;
}
