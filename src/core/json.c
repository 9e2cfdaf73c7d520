/* See json.h. */
#include "core/json.h"

#include <limits.h>
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

static int hex4(const char *p, size_t avail)
{
	int v = 0;

	if (avail < 4)
		return -1;
	for (int k = 0; k < 4; k++) {
		char c = p[k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* Byte offset of the first \u escape inside a JSON string that encodes an unpaired UTF-16
 * surrogate (a high one not followed by \uDC00-\uDFFF, or a lone low one), or -1 when there is
 * none. json-c would silently turn such an escape into U+FFFD; like serde_json (TEI) we refuse it,
 * since the text the client meant is not Unicode. Malformed escapes are left to the parser. */
long rg_json_find_unpaired_surrogate(const char *b, size_t len)
{
	bool in_str = false;

	for (size_t i = 0; i < len; i++) {
		int cp, lo;

		if (!in_str) {
			in_str = b[i] == '"';
			continue;
		}
		if (b[i] == '"') {
			in_str = false;
			continue;
		}
		if (b[i] != '\\' || i + 1 >= len)
			continue;
		if (b[i + 1] != 'u') {
			i++; /* \" \\ \n ...: skip the escaped character */
			continue;
		}
		cp = hex4(b + i + 2, len - i - 2);
		if (cp < 0) {
			i++;
			continue;
		}
		if (cp >= 0xDC00 && cp <= 0xDFFF)
			return (long)i;
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			lo = i + 11 < len && b[i + 6] == '\\' && b[i + 7] == 'u'
				     ? hex4(b + i + 8, len - i - 8)
				     : -1;
			if (lo < 0xDC00 || lo > 0xDFFF)
				return (long)i;
			i += 11;
			continue;
		}
		i += 5;
	}
	return -1;
}
