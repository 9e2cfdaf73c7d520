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
