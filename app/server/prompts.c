/* Sentence-transformers prompts; see prompts.h. */
#include "server/prompts.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"

void rg_prompts_free(rg_prompts *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->names[i]);
		free(p->texts[i]);
	}
	free(p->names);
	free(p->texts);
	free(p->lens);
	memset(p, 0, sizeof(*p));
	p->dflt = -1;
}

int rg_prompts_find(const rg_prompts *p, const char *name)
{
	for (size_t i = 0; name && i < p->n; i++)
		if (strcmp(p->names[i], name) == 0)
			return (int)i;
	return -1;
}

rg_status rg_prompts_load(const char *dir, rg_prompts *p)
{
	char path[4200];
	json_object *root = NULL, *prompts, *dflt;
	struct stat sb;
	rg_status st;
	size_t n, i = 0;

	memset(p, 0, sizeof(*p));
	p->dflt = -1;
	snprintf(path, sizeof(path), "%s/config_sentence_transformers.json", dir);
	if (stat(path, &sb) != 0 && errno == ENOENT)
		return RG_OK;
	if ((st = rg_json_read_file(path, 1 << 20, &root)) != RG_OK)
		return st;
	if (!json_object_object_get_ex(root, "prompts", &prompts) ||
	    json_object_is_type(prompts, json_type_null)) {
		st = RG_OK;
		goto out;
	}
	if (!json_object_is_type(prompts, json_type_object)) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: \"prompts\" must be an object", path);
		goto out;
	}
	n = (size_t)json_object_object_length(prompts);
	p->names = calloc(n ? n : 1, sizeof(*p->names));
	p->texts = calloc(n ? n : 1, sizeof(*p->texts));
	p->lens = calloc(n ? n : 1, sizeof(*p->lens));
	if (!p->names || !p->texts || !p->lens) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
		goto out;
	}
	json_object_object_foreach(prompts, name, text)
	{
		size_t len = json_object_is_type(text, json_type_string)
				     ? (size_t)json_object_get_string_len(text)
				     : 0;

		if (!json_object_is_type(text, json_type_string) ||
		    !rg_utf8_valid(json_object_get_string(text), len) ||
		    memchr(json_object_get_string(text), '\0', len)) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: prompt \"%s\" must be a UTF-8 string", path,
				       name);
			goto out;
		}
		p->names[i] = strdup(name);
		p->texts[i] = strndup(json_object_get_string(text), len);
		p->lens[i] = len;
		p->n = ++i;
		if (!p->names[i - 1] || !p->texts[i - 1]) {
			st = rg_errorf(RG_ERR_OOM, "%s: out of memory", path);
			goto out;
		}
	}
	if (json_object_object_get_ex(root, "default_prompt_name", &dflt) &&
	    !json_object_is_type(dflt, json_type_null)) {
		const char *d = json_object_get_string(dflt);

		if (!json_object_is_type(dflt, json_type_string) ||
		    (p->dflt = rg_prompts_find(p, d)) < 0) {
			st = rg_errorf(RG_ERR_FORMAT,
				       "%s: default_prompt_name \"%s\" is not one of the prompts", path,
				       json_object_is_type(dflt, json_type_string) ? d : "?");
			goto out;
		}
	}
	st = RG_OK;
out:
	json_object_put(root);
	if (st != RG_OK)
		rg_prompts_free(p);
	return st;
}
