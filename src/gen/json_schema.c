/* JSON Schema -> regex (grammar.h), as outlines-core's build_regex_from_schema does it
 * (Willard & Louf 2023, sec. 4.2): every value's regex in the grammar.h subset, objects with
 * their properties in the schema's order, whitespace bounded ("[ ]?" between tokens) so that
 * the language stays small and a model cannot pad forever.
 *
 * Supported keywords: type (a name or a list), properties, required, additionalProperties
 * (false, or a schema when there are no properties: any keys), items, minItems, maxItems,
 * enum, const, anyOf, oneOf (as anyOf: alternatives, exclusivity not enforced), allOf of one
 * schema, $ref to "#", "#/$defs/..." and "#/definitions/..." (nesting bounded), pattern
 * (anchors stripped, matched whole), minLength, maxLength, format (date-time, date, time,
 * uuid), minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers (a digit-range
 * regex of the integers between), and the annotations (title, description, default,
 * examples, $schema, $id, $comment, readOnly, writeOnly, deprecated), which change nothing.
 * Any other keyword is refused with RG_ERR_UNSUPPORTED naming it (bounds on numbers, multipleOf, uniqueItems, patternProperties,
 * not, if/then/else, ...), never silently ignored.
 * Bounded by construction (documented, not JSON Schema's semantics): integers have at most 16
 * digits, fractions 16, exponents 3; a schema without a type (or {}, true) and an object or
 * array without properties / items is any JSON value nested at most JSON_ANY_DEPTH deep. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/error.h"
#include "gen/grammar.h"

#define WS "[ ]?"
#define MAX_DEPTH 16     /* schema nesting ($ref included) */
#define JSON_ANY_DEPTH 3 /* nesting of an unconstrained value */

/* One JSON string's character: unescaped (not ", \ or a control character) or an escape
 * (\uXXXX outside the surrogates, so that each counts as one character). */
#define STR_CHAR                                                                                 \
	"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|"                                      \
	"\\\\u(?:[0-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"
#define STRING "\"" STR_CHAR "*\""
#define INTEGER "-?(?:0|[1-9][0-9]{0,15})"
#define NUMBER INTEGER "(?:\\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,3})?"
#define BOOLEAN "(?:true|false)"
#define NUL "null"

typedef struct ctx {
	json_object *root;
	rg_buf *b;
	rg_status st;
} ctx;

static rg_status bad(ctx *c, rg_status st, const char *fmt, const char *what)
{
	if (c->st == RG_OK)
		c->st = rg_errorf(st, fmt, what);
	return c->st;
}

static void any_value(rg_buf *b, int depth)
{
	rg_buf_puts(b, "(?:" STRING "|" NUMBER "|" BOOLEAN "|" NUL);
	if (depth > 0) {
		rg_buf_puts(b, "|\\[" WS "(?:");
		any_value(b, depth - 1);
		rg_buf_puts(b, "(?:" WS "," WS);
		any_value(b, depth - 1);
		rg_buf_puts(b, ")*)?" WS "\\]|\\{" WS "(?:" STRING WS ":" WS);
		any_value(b, depth - 1);
		rg_buf_puts(b, "(?:" WS "," WS STRING WS ":" WS);
		any_value(b, depth - 1);
		rg_buf_puts(b, ")*)?" WS "\\}");
	}
	rg_buf_puts(b, ")");
}

static void any_object(rg_buf *b, int depth)
{
	rg_buf_puts(b, "\\{" WS "(?:" STRING WS ":" WS);
	any_value(b, depth - 1);
	rg_buf_puts(b, "(?:" WS "," WS STRING WS ":" WS);
	any_value(b, depth - 1);
	rg_buf_puts(b, ")*)?" WS "\\}");
}

rg_status rg_json_any_regex(int depth, char **out)
{
	rg_buf b;

	rg_buf_init(&b);
	any_object(&b, depth);
	if (b.oom) {
		rg_buf_free(&b);
		return rg_errorf(RG_ERR_OOM, "json: out of memory");
	}
	*out = b.data;
	return RG_OK;
}

static void literal_json(ctx *c, json_object *v)
{
	const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							  JSON_C_TO_STRING_NOSLASHESCAPE);

	rg_regex_escape(c->b, s, strlen(s));
}

static rg_status value(ctx *c, json_object *s, int depth);

#define INT_MAX16 9999999999999999LL /* the largest integer the regexes write (16 digits) */

/* Decimal digits of v >= 0 into d (most significant first); their count. */
static int digits(long long v, char *d)
{
	char t[20];
	int n = 0;

	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (int i = 0; i < n; i++)
		d[i] = t[n - 1 - i];
	return n;
}

/* The regex of the integers x..y (0 <= x <= y, the same number of digits n), without leading
 * zeros: the usual split on the first digit (x's first digit with the rest of x's range, the
 * digits between with any rest, y's first digit with the rest of y's range). */
static void same_len_range(rg_buf *b, const char *x, const char *y, int n)
{
	bool x_low = true, y_high = true;

	if (n == 1) {
		if (x[0] == y[0])
			rg_buf_put(b, x, 1);
		else
			rg_buf_printf(b, "[%c-%c]", x[0], y[0]);
		return;
	}
	if (x[0] == y[0]) {
		rg_buf_put(b, x, 1);
		same_len_range(b, x + 1, y + 1, n - 1);
		return;
	}
	for (int i = 1; i < n; i++) {
		x_low &= x[i] == '0';
		y_high &= y[i] == '9';
	}
	rg_buf_puts(b, "(?:");
	{
		char lo = x_low ? x[0] : (char)(x[0] + 1), hi = y_high ? y[0] : (char)(y[0] - 1);
		bool sep = false;

		if (!x_low) {
			char nines[20];

			memset(nines, '9', sizeof(nines));
			rg_buf_put(b, x, 1);
			same_len_range(b, x + 1, nines, n - 1);
			sep = true;
		}
		if (lo <= hi) {
			if (sep)
				rg_buf_puts(b, "|");
			if (lo == hi)
				rg_buf_printf(b, "%c[0-9]{%d}", lo, n - 1);
			else
				rg_buf_printf(b, "[%c-%c][0-9]{%d}", lo, hi, n - 1);
			sep = true;
		}
		if (!y_high) {
			char zeros[20];

			memset(zeros, '0', sizeof(zeros));
			if (sep)
				rg_buf_puts(b, "|");
			rg_buf_put(b, y, 1);
			same_len_range(b, zeros, y + 1, n - 1);
		}
	}
	rg_buf_puts(b, ")");
}

/* The integers x..y, 0 <= x <= y, as alternatives per number of digits. */
static void nonneg_range(rg_buf *b, long long x, long long y, bool *sep)
{
	long long p = 1;

	for (int n = 1; n <= 16; n++, p *= 10) {
		long long lo = n == 1 ? 0 : p, hi = p * 10 - 1;
		char dx[20], dy[20];

		if (x > lo)
			lo = x;
		if (y < hi)
			hi = y;
		if (lo > hi)
			continue;
		digits(lo, dx);
		digits(hi, dy);
		if (*sep)
			rg_buf_puts(b, "|");
		same_len_range(b, dx, dy, n);
		*sep = true;
	}
}

/* An integer's regex under minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers;
 * the bounds on the integers they allow), unbounded sides at 16 digits. */
static void integer_re(ctx *c, json_object *s)
{
	static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum",
					   "exclusiveMaximum"};
	long long lo = -INT_MAX16, hi = INT_MAX16;
	bool any = false, sep = false;

	for (int k = 0; k < 4; k++) {
		json_object *v;
		double x, r;

		if (!json_object_object_get_ex(s, keys[k], &v))
			continue;
		if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) {
			bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be a number", keys[k]);
			return;
		}
		any = true;
		x = json_object_get_double(v);
		if (!(x > -1e16 && x < 1e16)) {
			bad(c, RG_ERR_UNSUPPORTED, "json schema: %s beyond 16 digits is not supported",
			    keys[k]);
			return;
		}
		if (k == 0)
			r = ceil(x);
		else if (k == 1)
			r = floor(x) + 1;
		else if (k == 2)
			r = floor(x);
		else
			r = ceil(x) - 1;
		if (k < 2 && (long long)r > lo)
			lo = (long long)r;
		if (k >= 2 && (long long)r < hi)
			hi = (long long)r;
	}
	if (!any) {
		rg_buf_puts(c->b, INTEGER);
		return;
	}
	if (lo > hi) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s", "no integer between the minimum and "
		    "the maximum");
		return;
	}
	rg_buf_puts(c->b, "(?:");
	if (lo < 0) { /* -k for k in max(1, -hi) .. -lo */
		rg_buf_puts(c->b, "-(?:");
		nonneg_range(c->b, hi < 0 ? -hi : 1, -lo, &sep);
		rg_buf_puts(c->b, ")");
	}
	if (hi >= 0) {
		sep = lo < 0;
		nonneg_range(c->b, lo > 0 ? lo : 0, hi, &sep);
	}
	rg_buf_puts(c->b, ")");
}

static bool get_count(ctx *c, json_object *s, const char *key, long *out)
{
	json_object *v;

	if (!json_object_object_get_ex(s, key, &v))
		return false;
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
	    json_object_get_int64(v) > 1000) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be an integer in [0, 1000]", key);
		return false;
	}
	*out = (long)json_object_get_int64(v);
	return true;
}

static void string_re(ctx *c, json_object *s)
{
	json_object *pat, *fmt;
	long mn = 0, mx = -1;

	if (json_object_object_get_ex(s, "pattern", &pat)) {
		const char *p;
		size_t n;

		if (!json_object_is_type(pat, json_type_string)) {
			bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be a string", "pattern");
			return;
		}
		p = json_object_get_string(pat);
		n = (size_t)json_object_get_string_len(pat);
		if (n && p[0] == '^')
			p++, n--;
		if (n && p[n - 1] == '$' && !(n >= 2 && p[n - 2] == '\\'))
			n--;
		rg_buf_puts(c->b, "\"(?:");
		rg_buf_put(c->b, p, n);
		rg_buf_puts(c->b, ")\"");
		return;
	}
	if (json_object_object_get_ex(s, "format", &fmt)) {
		const char *f = json_object_get_string(fmt);
		static const struct {
			const char *name, *re;
		} fmts[] = {
			{"uuid", "\"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
				 "[0-9a-fA-F]{12}\""},
			{"date", "\"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])\""},
			{"time", "\"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?"
				 "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?\""},
			{"date-time", "\"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T"
				      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?"
				      "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])\""},
		};

		for (size_t k = 0; k < sizeof(fmts) / sizeof(fmts[0]); k++)
			if (f && !strcmp(f, fmts[k].name)) {
				rg_buf_puts(c->b, fmts[k].re);
				return;
			}
		bad(c, RG_ERR_UNSUPPORTED, "json schema: string format \"%.60s\" is not supported "
		    "(date-time, date, time, uuid are)", f ? f : "?");
		return;
	}
	get_count(c, s, "minLength", &mn);
	get_count(c, s, "maxLength", &mx);
	if (mx >= 0 && mx < mn) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s", "maxLength < minLength");
		return;
	}
	if (mn == 0 && mx < 0)
		rg_buf_puts(c->b, STRING);
	else if (mx < 0)
		rg_buf_printf(c->b, "\"" STR_CHAR "{%ld,}\"", mn);
	else
		rg_buf_printf(c->b, "\"" STR_CHAR "{%ld,%ld}\"", mn, mx);
}

static void array_re(ctx *c, json_object *s, int depth)
{
	json_object *items;
	long mn = 0, mx = -1;
	size_t at;
	char *item;
	bool have = json_object_object_get_ex(s, "items", &items);

	get_count(c, s, "minItems", &mn);
	get_count(c, s, "maxItems", &mx);
	if (c->st != RG_OK)
		return;
	if (mx >= 0 && mx < mn) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s", "maxItems < minItems");
		return;
	}
	/* the item's regex, written once, then copied */
	at = c->b->len;
	if (have) {
		if (value(c, items, depth + 1) != RG_OK)
			return;
	} else {
		any_value(c->b, JSON_ANY_DEPTH - 1);
	}
	if (c->b->oom || !(item = strndup(c->b->data + at, c->b->len - at))) {
		bad(c, RG_ERR_OOM, "json schema: %s", "out of memory");
		return;
	}
	c->b->len = at;
	rg_buf_puts(c->b, "\\[" WS);
	if (mx != 0) {
		if (mn == 0)
			rg_buf_puts(c->b, "(?:");
		rg_buf_printf(c->b, "(?:%s)(?:" WS "," WS "(?:%s))", item, item);
		if (mx < 0)
			rg_buf_printf(c->b, "{%ld,}", mn > 0 ? mn - 1 : 0);
		else
			rg_buf_printf(c->b, "{%ld,%ld}", mn > 0 ? mn - 1 : 0, mx - 1);
		if (mn == 0)
			rg_buf_puts(c->b, ")?");
	}
	rg_buf_puts(c->b, WS "\\]");
	free(item);
}

static bool is_required(json_object *req, const char *name)
{
	size_t n = req ? json_object_array_length(req) : 0;

	for (size_t i = 0; i < n; i++) {
		const char *r = json_object_get_string(json_object_array_get_idx(req, i));

		if (r && !strcmp(r, name))
			return true;
	}
	return false;
}

/* "name" WS : WS value, into a malloc'd string (NULL on error). */
static char *property(ctx *c, const char *name, json_object *sub, int depth)
{
	size_t at = c->b->len;
	char *r;

	rg_buf_puts(c->b, "\"");
	rg_regex_escape(c->b, name, strlen(name));
	rg_buf_puts(c->b, "\"" WS ":" WS);
	if (value(c, sub, depth + 1) != RG_OK)
		return NULL;
	if (c->b->oom || !(r = strndup(c->b->data + at, c->b->len - at))) {
		bad(c, RG_ERR_OOM, "json schema: %s", "out of memory");
		return NULL;
	}
	c->b->len = at;
	return r;
}

static void object_re(ctx *c, json_object *s, int depth)
{
	json_object *props, *req = NULL, *addl;
	char **p = NULL;
	bool *rq = NULL;
	int n = 0, first_req = -1;

	if (json_object_object_get_ex(s, "required", &req) &&
	    !json_object_is_type(req, json_type_array)) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be a list", "required");
		return;
	}
	if (!json_object_object_get_ex(s, "properties", &props) ||
	    json_object_object_length(props) == 0) {
		/* no properties: any keys, values of additionalProperties' schema (or any) */
		if (json_object_object_get_ex(s, "additionalProperties", &addl) &&
		    json_object_is_type(addl, json_type_boolean) && !json_object_get_boolean(addl)) {
			rg_buf_puts(c->b, "\\{" WS "\\}");
			return;
		}
		if (!json_object_object_get_ex(s, "additionalProperties", &addl) ||
		    json_object_is_type(addl, json_type_boolean)) {
			any_object(c->b, JSON_ANY_DEPTH);
			return;
		}
		{
			size_t at = c->b->len;
			char *v;

			if (value(c, addl, depth + 1) != RG_OK)
				return;
			if (c->b->oom || !(v = strndup(c->b->data + at, c->b->len - at))) {
				bad(c, RG_ERR_OOM, "json schema: %s", "out of memory");
				return;
			}
			c->b->len = at;
			rg_buf_printf(c->b, "\\{" WS "(?:" STRING WS ":" WS "(?:%s)(?:" WS "," WS
				      STRING WS ":" WS "(?:%s))*)?" WS "\\}", v, v);
			free(v);
		}
		return;
	}
	if (!json_object_is_type(props, json_type_object)) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be an object", "properties");
		return;
	}
	if (json_object_object_get_ex(s, "additionalProperties", &addl) &&
	    !(json_object_is_type(addl, json_type_boolean) && !json_object_get_boolean(addl)) &&
	    !json_object_is_type(addl, json_type_boolean)) {
		bad(c, RG_ERR_UNSUPPORTED, "json schema: %s", "additionalProperties as a schema "
		    "beside properties is not supported (false is: no other keys)");
		return;
	}
	n = json_object_object_length(props);
	p = calloc((size_t)n, sizeof(char *));
	rq = calloc((size_t)n, sizeof(bool));
	if (!p || !rq) {
		bad(c, RG_ERR_OOM, "json schema: %s", "out of memory");
		goto out_free;
	}
	{
		int i = 0;

		json_object_object_foreach(props, key, sub) {
			if (!(p[i] = property(c, key, sub, depth)))
				goto out_free;
			rq[i] = is_required(req, key);
			if (rq[i] && first_req < 0)
				first_req = i;
			i++;
		}
	}
	rg_buf_puts(c->b, "\\{" WS);
	if (first_req >= 0) {
		/* optional ones before the first required each end with a comma; those after
		 * each start with one */
		for (int i = 0; i < first_req; i++)
			rg_buf_printf(c->b, "(?:%s" WS "," WS ")?", p[i]);
		rg_buf_puts(c->b, p[first_req]);
		for (int i = first_req + 1; i < n; i++)
			rg_buf_printf(c->b, rq[i] ? "(?:" WS "," WS "%s)" : "(?:" WS "," WS "%s)?",
				      p[i]);
	} else {
		/* none required: empty, or the first present one i then any of the later ones */
		rg_buf_puts(c->b, "(?:");
		for (int i = 0; i < n; i++) {
			if (i)
				rg_buf_puts(c->b, "|");
			rg_buf_puts(c->b, p[i]);
			for (int j = i + 1; j < n; j++)
				rg_buf_printf(c->b, "(?:" WS "," WS "%s)?", p[j]);
		}
		rg_buf_puts(c->b, ")?");
	}
	rg_buf_puts(c->b, WS "\\}");
out_free:
	for (int i = 0; p && i < n; i++)
		free(p[i]);
	free(p);
	free(rq);
}

static json_object *resolve_ref(ctx *c, const char *ref)
{
	json_object *v = NULL, *defs;
	const char *name;

	if (!strcmp(ref, "#"))
		return c->root;
	if (!strncmp(ref, "#/$defs/", 8))
		name = ref + 8, json_object_object_get_ex(c->root, "$defs", &defs);
	else if (!strncmp(ref, "#/definitions/", 14))
		name = ref + 14, json_object_object_get_ex(c->root, "definitions", &defs);
	else
		name = NULL, defs = NULL;
	if (!name || strchr(name, '/')) {
		bad(c, RG_ERR_UNSUPPORTED, "json schema: $ref \"%.80s\" is not supported (only "
		    "\"#\", \"#/$defs/name\" and \"#/definitions/name\")", ref);
		return NULL;
	}
	if (!defs || !json_object_object_get_ex(defs, name, &v)) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: $ref \"%.80s\" names no definition", ref);
		return NULL;
	}
	return v;
}

static const char *const known[] = {
	"type", "properties", "required", "additionalProperties", "items", "minItems",
	"maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
	"pattern", "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum",
	"exclusiveMaximum",
	/* annotations */
	"title", "description", "default", "examples", "$schema", "$id", "$comment", "readOnly",
	"writeOnly", "deprecated",
};

/* The regex of the type named t under schema s. */
static void typed(ctx *c, json_object *s, const char *t, int depth)
{
	if (!strcmp(t, "string"))
		string_re(c, s);
	else if (!strcmp(t, "integer"))
		integer_re(c, s);
	else if (!strcmp(t, "number") && (json_object_object_get_ex(s, "minimum", NULL) ||
					  json_object_object_get_ex(s, "maximum", NULL) ||
					  json_object_object_get_ex(s, "exclusiveMinimum", NULL) ||
					  json_object_object_get_ex(s, "exclusiveMaximum", NULL)))
		bad(c, RG_ERR_UNSUPPORTED, "json schema: %s", "minimum / maximum on a number are not "
		    "supported (on an integer they are)");
	else if (!strcmp(t, "number"))
		rg_buf_puts(c->b, NUMBER);
	else if (!strcmp(t, "boolean"))
		rg_buf_puts(c->b, BOOLEAN);
	else if (!strcmp(t, "null"))
		rg_buf_puts(c->b, NUL);
	else if (!strcmp(t, "array"))
		array_re(c, s, depth);
	else if (!strcmp(t, "object"))
		object_re(c, s, depth);
	else
		bad(c, RG_ERR_INVALID_INPUT, "json schema: unknown type \"%.60s\"", t);
}

static void alternatives(ctx *c, json_object *list, const char *key, int depth)
{
	size_t n;

	if (!json_object_is_type(list, json_type_array) || !(n = json_object_array_length(list))) {
		bad(c, RG_ERR_INVALID_INPUT, "json schema: %s must be a non-empty list", key);
		return;
	}
	rg_buf_puts(c->b, "(?:");
	for (size_t i = 0; i < n && c->st == RG_OK; i++) {
		if (i)
			rg_buf_puts(c->b, "|");
		if (!strcmp(key, "enum")) {
			literal_json(c, json_object_array_get_idx(list, i));
		} else {
			rg_buf_puts(c->b, "(?:");
			value(c, json_object_array_get_idx(list, i), depth + 1);
			rg_buf_puts(c->b, ")");
		}
	}
	rg_buf_puts(c->b, ")");
}

static rg_status value(ctx *c, json_object *s, int depth)
{
	json_object *v;

	if (c->st != RG_OK)
		return c->st;
	if (depth > MAX_DEPTH)
		return bad(c, RG_ERR_TOO_LONG, "json schema: %s", "nested over 16 levels "
			   "(a recursive $ref?)");
	if (json_object_is_type(s, json_type_boolean)) {
		if (!json_object_get_boolean(s))
			return bad(c, RG_ERR_UNSUPPORTED, "json schema: %s", "false (no value) "
				   "is not supported");
		any_value(c->b, JSON_ANY_DEPTH);
		return RG_OK;
	}
	if (!json_object_is_type(s, json_type_object))
		return bad(c, RG_ERR_INVALID_INPUT, "json schema: %s", "a schema must be an object "
			   "or a boolean");
	json_object_object_foreach(s, key, val) {
		size_t k = 0;

		(void)val;
		while (k < sizeof(known) / sizeof(known[0]) && strcmp(key, known[k]))
			k++;
		if (k == sizeof(known) / sizeof(known[0]))
			return bad(c, RG_ERR_UNSUPPORTED, "json schema: the keyword \"%.60s\" is not "
				   "supported", key);
	}
	if (json_object_object_get_ex(s, "$ref", &v)) {
		json_object *t = resolve_ref(c, json_object_get_string(v) ? json_object_get_string(v)
									  : "");

		return t ? value(c, t, depth + 1) : c->st;
	}
	if (json_object_object_get_ex(s, "const", &v)) {
		literal_json(c, v);
		return c->st;
	}
	if (json_object_object_get_ex(s, "enum", &v)) {
		alternatives(c, v, "enum", depth);
		return c->st;
	}
	if (json_object_object_get_ex(s, "anyOf", &v) || json_object_object_get_ex(s, "oneOf", &v)) {
		alternatives(c, v, "anyOf", depth);
		return c->st;
	}
	if (json_object_object_get_ex(s, "allOf", &v)) {
		if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 1)
			return bad(c, RG_ERR_UNSUPPORTED, "json schema: %s", "allOf of more than one "
				   "schema is not supported");
		return value(c, json_object_array_get_idx(v, 0), depth + 1);
	}
	if (json_object_object_get_ex(s, "type", &v)) {
		if (json_object_is_type(v, json_type_string)) {
			typed(c, s, json_object_get_string(v), depth);
		} else if (json_object_is_type(v, json_type_array) && json_object_array_length(v)) {
			rg_buf_puts(c->b, "(?:");
			for (size_t i = 0; i < json_object_array_length(v) && c->st == RG_OK; i++) {
				const char *t = json_object_get_string(json_object_array_get_idx(v, i));

				if (i)
					rg_buf_puts(c->b, "|");
				typed(c, s, t ? t : "?", depth);
			}
			rg_buf_puts(c->b, ")");
		} else {
			return bad(c, RG_ERR_INVALID_INPUT, "json schema: %s", "type must be a name or "
				   "a non-empty list of names");
		}
		return c->st;
	}
	/* no type: the keywords say which (properties: an object, items: an array), else any */
	if (json_object_object_get_ex(s, "properties", &v))
		object_re(c, s, depth);
	else if (json_object_object_get_ex(s, "items", &v))
		array_re(c, s, depth);
	else if (json_object_object_get_ex(s, "pattern", &v) ||
		 json_object_object_get_ex(s, "minLength", &v) ||
		 json_object_object_get_ex(s, "maxLength", &v))
		string_re(c, s);
	else
		any_value(c->b, JSON_ANY_DEPTH);
	return c->st;
}

rg_status rg_json_schema_regex(const char *schema, size_t schema_len, char **out)
{
	json_tokener *tk;
	json_object *root;
	rg_buf b;
	ctx c = {0};

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "json schema: NULL out");
	*out = NULL;
	if (!schema)
		return rg_errorf(RG_ERR_INVALID_INPUT, "json schema: NULL schema");
	if (!(tk = json_tokener_new_ex(64)))
		return rg_errorf(RG_ERR_OOM, "json schema: out of memory");
	root = json_tokener_parse_ex(tk, schema, (int)schema_len);
	if (root && json_tokener_get_error(tk) == json_tokener_success)
		for (size_t i = json_tokener_get_parse_end(tk); i < schema_len; i++)
			if (!strchr(" \t\r\n", schema[i])) {
				json_object_put(root);
				root = NULL; /* text after the schema */
				break;
			}
	if (!root || json_tokener_get_error(tk) != json_tokener_success) {
		json_object_put(root);
		json_tokener_free(tk);
		return rg_errorf(RG_ERR_INVALID_INPUT, "json schema: not valid JSON");
	}
	json_tokener_free(tk);
	rg_buf_init(&b);
	c.root = root;
	c.b = &b;
	value(&c, root, 0);
	json_object_put(root);
	if (c.st == RG_OK && b.oom)
		c.st = rg_errorf(RG_ERR_OOM, "json schema: out of memory");
	if (c.st != RG_OK) {
		rg_buf_free(&b);
		return c.st;
	}
	*out = b.data;
	return RG_OK;
}
