/* See json.h. */
#include "core/json.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/file.h"

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

rg_status rg_json_parse(const char *text, size_t len, int flags, const char *path,
			const char *what, json_object **out)
{
	enum json_tokener_error jerr;
	json_tokener *tok;
	json_object *obj;
	char lead[512]; /* "<path>:" or "<path>: <what> is" */
	size_t end;

	*out = NULL;
	if (what)
		snprintf(lead, sizeof(lead), "%s: %s is", path, what);
	else
		snprintf(lead, sizeof(lead), "%s:", path);
	if (len > INT_MAX)
		return rg_errorf(RG_ERR_FORMAT, "%s not valid JSON: larger than 2 GiB", lead);
	if (memchr(text, '\0', len))
		return rg_errorf(RG_ERR_FORMAT, "%s not valid JSON: contains a NUL byte", lead);
	tok = json_tokener_new();
	if (!tok)
		return rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
	json_tokener_set_flags(tok, flags);
	obj = json_tokener_parse_ex(tok, text, (int)len);
	jerr = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!obj || jerr != json_tokener_success) {
		json_object_put(obj);
		return rg_errorf(RG_ERR_FORMAT, "%s not valid JSON: %s at byte %zu", lead,
				 !obj && jerr == json_tokener_continue
					 ? "unexpected end"
					 : json_tokener_error_desc(jerr),
				 end);
	}
	for (size_t i = end; i < len; i++)
		if (!is_ws(text[i])) {
			json_object_put(obj);
			return rg_errorf(RG_ERR_FORMAT, "%s not valid JSON: trailing data at byte %zu",
					 lead, i);
		}
	*out = obj;
	return RG_OK;
}

rg_status rg_json_read_file(const char *path, off_t limit, json_object **out)
{
	char *buf = NULL;
	size_t len = 0;
	rg_status s;

	*out = NULL;
	if ((s = rg_file_read(path, limit, &buf, &len)) != RG_OK)
		return s;
	s = rg_json_parse(buf, len, JSON_TOKENER_VALIDATE_UTF8, path, NULL, out);
	free(buf);
	return s;
}

/* ---- what the tree hides: repeated keys, saturated integers ------------------------------- */

typedef struct text_span {
	size_t a, b; /* text[a..b) */
} text_span;

/* Whether the integer literal digits d[0..nd) (no sign, no leading zero) exceeds max (digits). */
static bool digits_over(const char *d, size_t nd, const char *max)
{
	size_t nm = strlen(max);

	return nd != nm ? nd > nm : memcmp(d, max, nd) > 0;
}

/* End of the string literal whose opening quote is at text[i] (a '"', or a '\'': json-c takes
 * single-quoted names even in strict mode): the index after its closing quote, len when there
 * is none. memchr finds each quote; one after an odd run of backslashes is escaped. */
static size_t string_end(const char *text, size_t len, size_t i)
{
	char quote = text[i];

	for (i++; i < len;) {
		const char *q = memchr(text + i, quote, len - i);
		size_t k, bs = 0;

		if (!q)
			return len;
		k = (size_t)(q - text);
		while (k - bs > i && text[k - bs - 1] == '\\')
			bs++;
		if (!(bs & 1))
			return k + 1;
		i = k + 1;
	}
	return len;
}

/* The keys of the text's objects, counted (SIZE_MAX when it nests deeper than 64, past which
 * this count does not tell keys from values), and its objects in *n_obj; *bad_int the byte
 * offset of the first integer literal json-c would saturate (SIZE_MAX: none), *bad_key the
 * literal of the last key before it (its key, or the key of the array holding it; 0 length:
 * none). */
static size_t count_keys(const char *text, size_t len, size_t *n_obj, size_t *bad_int,
			 text_span *bad_key)
{
	text_span last = {0, 0};
	size_t keys = 0;
	char prev = 0; /* the last structural byte: '{' or ',' before a key, ':' before a value */
	int depth = 0;
	uint64_t in_obj = 0; /* bit d: the container at depth d is an object (depth < 64) */
	bool deep = false;

	*bad_int = SIZE_MAX;
	*bad_key = last;
	*n_obj = 0;
	for (size_t i = 0; i < len;) {
		char c = text[i];

		if (c == '"' || c == '\'') {
			bool obj = depth > 0 && depth <= 64 && ((in_obj >> (depth - 1)) & 1);

			size_t e = string_end(text, len, i);

			if (obj && (prev == '{' || prev == ',')) {
				keys++;
				last = (text_span){i, e};
			}
			prev = '"';
			i = e;
			continue;
		}
		if (c == '-' || (c >= '0' && c <= '9')) {
			size_t s = i + (c == '-'), e = s;

			while (e < len && text[e] >= '0' && text[e] <= '9')
				e++;
			if (e - s >= 19 && *bad_int == SIZE_MAX &&
			    !(e < len && (text[e] == '.' || text[e] == 'e' || text[e] == 'E')) &&
			    digits_over(text + s, e - s, c == '-' ? "9223372036854775808"
								  : "18446744073709551615")) {
				*bad_int = i;
				*bad_key = last;
			}
			prev = '0';
			i = e;
			continue;
		}
		if (c == '{' || c == '[') {
			*n_obj += c == '{';
			if (depth >= 0 && depth < 64) {
				if (c == '{')
					in_obj |= (uint64_t)1 << depth;
				else
					in_obj &= ~((uint64_t)1 << depth);
			} else {
				deep = true;
			}
			depth++;
		} else if ((c == '}' || c == ']') && depth > 0) {
			depth--;
		}
		if (c == '{' || c == '[' || c == '}' || c == ']' || c == ',' || c == ':')
			prev = c;
		i++;
	}
	return deep ? SIZE_MAX : keys;
}

/* The keys of the objects under o, as json-c holds them (distinct per object), in pre-order
 * until *left objects have been seen: the text has no more, so the walk stops there (a body of
 * token-id arrays is not walked element by element). */
static size_t tree_keys(json_object *o, size_t *left)
{
	size_t n = 0;

	if (!*left)
		return 0;
	if (json_object_is_type(o, json_type_object)) {
		--*left;
		n = (size_t)json_object_object_length(o);
		json_object_object_foreach(o, k, v) {
			(void)k;
			if (!*left)
				break;
			n += tree_keys(v, left);
		}
	} else if (json_object_is_type(o, json_type_array)) {
		size_t m = json_object_array_length(o);

		for (size_t i = 0; i < m && *left; i++)
			n += tree_keys(json_object_array_get_idx(o, i), left);
	}
	return n;
}

/* The first key repeated within one object of text, into key (key_n > 0): 1; 0 when there is
 * none; -1 when memory ran out. Each open object gets a json-c object as the set of its keys so
 * far; a key literal is decoded by json-c itself. */
static int find_repeated_key(const char *text, size_t len, char *key, size_t key_n)
{
	json_object **sets = NULL; /* (cap) one per open container; NULL for an array */
	json_tokener *tok = json_tokener_new();
	int depth = 0, cap = 0, found = tok ? 0 : -1;
	char prev = 0;

	key[0] = '\0';
	for (size_t i = 0; !found && i < len;) {
		char c = text[i];

		if (c == '"' || c == '\'') {
			size_t e = string_end(text, len, i);
			json_object *set = depth > 0 ? sets[depth - 1] : NULL;

			if (set && (prev == '{' || prev == ',')) {
				json_object *s;
				const char *k;

				json_tokener_reset(tok);
				s = json_tokener_parse_ex(tok, text + i, (int)(e - i));
				k = s ? json_object_get_string(s) : NULL;

				if (!k) {
					json_object_put(s);
					found = -1;
					break;
				}
				if (json_object_object_get_ex(set, k, NULL)) {
					snprintf(key, key_n, "%s", k);
					found = 1;
				} else if (json_object_object_add(set, k, NULL)) {
					found = -1;
				}
				json_object_put(s);
			}
			prev = '"';
			i = e;
			continue;
		}
		if (c == '{' || c == '[') {
			if (depth == cap) {
				json_object **ns = realloc(sets, (size_t)(cap ? 2 * cap : 16) *
								  sizeof(*ns));
				if (!ns) {
					found = -1;
					break;
				}
				sets = ns;
				cap = cap ? 2 * cap : 16;
			}
			sets[depth++] = c == '{' ? json_object_new_object() : NULL;
			if (c == '{' && !sets[depth - 1]) {
				found = -1;
				break;
			}
		} else if ((c == '}' || c == ']') && depth > 0) {
			json_object_put(sets[--depth]);
		}
		if (c == '{' || c == '[' || c == '}' || c == ']' || c == ',' || c == ':')
			prev = c;
		i++;
	}
	while (depth > 0)
		json_object_put(sets[--depth]);
	free(sets);
	if (tok)
		json_tokener_free(tok);
	return found;
}

rg_status rg_json_text_check(const char *text, size_t len, json_object *root, char *msg, size_t n,
			     char *key, size_t key_n)
{
	text_span bk;
	size_t bad_int, n_obj, keys = count_keys(text, len, &n_obj, &bad_int, &bk);
	int found;

	msg[0] = '\0';
	key[0] = '\0';
	if (bad_int != SIZE_MAX) {
		size_t e = bad_int + 1;
		int kl = bk.b - bk.a >= 2 ? (int)(bk.b - bk.a - 2) : 0; /* without the quotes */

		while (e < len && text[e] >= '0' && text[e] <= '9')
			e++;
		if (kl)
			snprintf(key, key_n, "%.*s", kl, text + bk.a + 1);
		snprintf(msg, n, "%s%.*s%sinteger %.*s%s at byte %zu is outside [-2^63, 2^64), the "
			 "integers JSON is read with", kl ? "\"" : "", kl > 60 ? 60 : kl,
			 text + bk.a + 1, kl ? "\": " : "", (int)(e - bad_int < 24 ? e - bad_int : 24),
			 text + bad_int, e - bad_int < 24 ? "" : "...", bad_int);
		return RG_ERR_INVALID_INPUT;
	}
	if (keys != SIZE_MAX && keys == tree_keys(root, &n_obj))
		return RG_OK;
	found = find_repeated_key(text, len, key, key_n);
	if (found < 0) {
		snprintf(msg, n, "out of memory checking the keys");
		return RG_ERR_OOM;
	}
	if (found)
		snprintf(msg, n, "duplicate key '%.100s'", key);
	return found ? RG_ERR_INVALID_INPUT : RG_OK;
}

/* Python's repr(float) (float_repr_style 'short'): the fewest significant digits that read
 * back to v, in positional notation when the decimal exponent is in [-4, 16), else
 * d[.ddd]e+XX. */
static void dump_double(rg_buf *b, double v)
{
	char e[40], digits[24];
	int p, nd = 0, exp10, decpt;
	const char *s;

	if (isnan(v)) {
		rg_buf_puts(b, "NaN");
		return;
	}
	if (isinf(v)) {
		rg_buf_puts(b, v < 0 ? "-Infinity" : "Infinity");
		return;
	}
	for (p = 1; p <= 17; p++) {
		snprintf(e, sizeof(e), "%.*e", p - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	s = e;
	if (*s == '-') {
		rg_buf_puts(b, "-");
		s++;
	}
	for (; *s && *s != 'e'; s++)
		if (*s >= '0' && *s <= '9')
			digits[nd++] = *s;
	exp10 = atoi(s + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	decpt = exp10 + 1;
	if (decpt <= -4 || decpt > 16) {
		rg_buf_put(b, digits, 1);
		if (nd > 1) {
			rg_buf_puts(b, ".");
			rg_buf_put(b, digits + 1, (size_t)nd - 1);
		}
		rg_buf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
	} else if (decpt <= 0) {
		rg_buf_puts(b, "0.");
		for (int k = 0; k < -decpt; k++)
			rg_buf_puts(b, "0");
		rg_buf_put(b, digits, (size_t)nd);
	} else if (decpt >= nd) {
		rg_buf_put(b, digits, (size_t)nd);
		for (int k = nd; k < decpt; k++)
			rg_buf_puts(b, "0");
		rg_buf_puts(b, ".0");
	} else {
		rg_buf_put(b, digits, (size_t)decpt);
		rg_buf_puts(b, ".");
		rg_buf_put(b, digits + decpt, (size_t)(nd - decpt));
	}
}

/* json.dumps' string with ensure_ascii=False: '"', '\\' and the C0 controls escaped. */
static void dump_string(rg_buf *b, const char *s, size_t n)
{
	size_t run = 0;

	rg_buf_puts(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[8];

		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c == '\b')
			esc = "\\b";
		else if (c == '\f')
			esc = "\\f";
		else if (c < 0x20)
			snprintf(u, sizeof(u), "\\u%04x", c), esc = u;
		if (!esc)
			continue;
		rg_buf_put(b, s + run, i - run);
		rg_buf_puts(b, esc);
		run = i + 1;
	}
	rg_buf_put(b, s + run, n - run);
	rg_buf_puts(b, "\"");
}

static void dump_newline(rg_buf *b, int indent, int level)
{
	rg_buf_puts(b, "\n");
	for (int k = 0; k < indent * level; k++)
		rg_buf_puts(b, " ");
}

static void dump_py(rg_buf *b, json_object *v, int indent, int level)
{
	const char *sep = indent < 0 ? ", " : ",";
	bool first = true;

	switch (json_object_get_type(v)) {
	case json_type_null:
		rg_buf_puts(b, "null");
		return;
	case json_type_boolean:
		rg_buf_puts(b, json_object_get_boolean(v) ? "true" : "false");
		return;
	case json_type_int:
		if (json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) > INT64_MAX)
			rg_buf_printf(b, "%llu", (unsigned long long)json_object_get_uint64(v));
		else
			rg_buf_printf(b, "%lld", (long long)json_object_get_int64(v));
		return;
	case json_type_double:
		dump_double(b, json_object_get_double(v));
		return;
	case json_type_string:
		dump_string(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
		return;
	case json_type_array: {
		size_t n = json_object_array_length(v);

		rg_buf_puts(b, "[");
		for (size_t i = 0; i < n; i++) {
			if (i)
				rg_buf_puts(b, sep);
			if (indent >= 0)
				dump_newline(b, indent, level + 1);
			dump_py(b, json_object_array_get_idx(v, i), indent, level + 1);
		}
		if (n && indent >= 0)
			dump_newline(b, indent, level);
		rg_buf_puts(b, "]");
		return;
	}
	case json_type_object:
		rg_buf_puts(b, "{");
		json_object_object_foreach(v, key, val) {
			if (!first)
				rg_buf_puts(b, sep);
			if (indent >= 0)
				dump_newline(b, indent, level + 1);
			dump_string(b, key, strlen(key));
			rg_buf_puts(b, ": ");
			dump_py(b, val, indent, level + 1);
			first = false;
		}
		if (!first && indent >= 0)
			dump_newline(b, indent, level);
		rg_buf_puts(b, "}");
		return;
	}
}

void rg_json_dump_py(rg_buf *b, json_object *v, int indent)
{
	dump_py(b, v, indent, 0);
}
