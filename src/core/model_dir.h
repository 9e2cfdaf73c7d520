/* Model directories (model_dir.c): the name a served model goes by. The resolution itself
 * (rg_default_model_dir, rg_model_dir_resolve) is public, in ragged.h. */
#ifndef RG_CORE_MODEL_DIR_H
#define RG_CORE_MODEL_DIR_H
#include <stddef.h>

/* The model's name for /info, /v1/models and OpenAI answers, written to out (n bytes,
 * truncated, always terminated), from the --model argument `arg` (NULL: none given) and the
 * directory `dir` it resolved to:
 * - an HF id given as "org/name" (rg_model_dir_resolve's rule: not an existing directory);
 * - a hub cache snapshot .../models--org--name/snapshots/<rev>: "org/name";
 * - the default model's package directory: its hub id, sentence-transformers/all-MiniLM-L6-v2;
 * - else the directory's base name ("model" when there is none). */
void rg_model_id(const char *arg, const char *dir, char *out, size_t n);
#endif
