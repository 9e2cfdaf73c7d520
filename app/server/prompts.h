/* Sentence-transformers prompts of `ragged serve` (TEI's prompt_name): the "prompts" of the model
 * directory's config_sentence_transformers.json ({"query": "query: ", ...}) and its
 * "default_prompt_name". A request's prompt text is prepended to each of its texts before
 * tokenizing, as sentence-transformers' encode(prompt_name=...) does. */
#ifndef RG_SERVER_PROMPTS_H
#define RG_SERVER_PROMPTS_H
#include <stddef.h>
#include "ragged.h"

typedef struct rg_prompts {
	size_t n;
	char **names;     /* (n) NUL-terminated */
	char **texts;     /* (n) UTF-8, NUL-terminated; may be "" */
	size_t *lens;     /* (n) bytes of each text */
	int dflt;         /* index of default_prompt_name, -1 when none */
} rg_prompts;

/* Read <dir>/config_sentence_transformers.json. No file, or a file without "prompts": no prompts,
 * RG_OK. RG_ERR_FORMAT naming the problem for malformed JSON, "prompts" not an object of
 * strings (valid UTF-8), or a default_prompt_name that is not one of them (TEI refuses to start
 * on those too); RG_ERR_OOM. On error *p is empty. Free with rg_prompts_free. */
rg_status rg_prompts_load(const char *dir, rg_prompts *p);
void rg_prompts_free(rg_prompts *p); /* accepts a zeroed struct */
/* The index of the prompt called name, or -1. */
int rg_prompts_find(const rg_prompts *p, const char *name);
#endif
