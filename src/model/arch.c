/* The architecture registry: model_type (config.json) or general.architecture (GGUF) -> the
 * hooks that load and run it (model.h rg_arch). A new architecture is its file plus one line
 * here. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

static const rg_arch *const ARCHS[] = {
	/* encoders (bert.c) */
	&rg_arch_bert, &rg_arch_roberta, &rg_arch_xlm_roberta, &rg_arch_distilbert,
	&rg_arch_albert, &rg_arch_mpnet, &rg_arch_deberta_v2,
	/* decoders */
	&rg_arch_gpt2,  /* gpt2.c */
	&rg_arch_llama, /* llama.c: Llama 2/3, SmolLM/SmolLM2 */
	&rg_arch_mistral, &rg_arch_qwen2,
	&rg_arch_qwen3, /* qwen3.c */
	&rg_arch_phi3,  /* phi3.c */
};
#define N_ARCHS (sizeof(ARCHS) / sizeof(ARCHS[0]))

const rg_arch *rg_arch_find(const char *model_type)
{
	for (size_t i = 0; model_type && i < N_ARCHS; i++)
		if (strcmp(ARCHS[i]->model_type, model_type) == 0)
			return ARCHS[i];
	return NULL;
}

const rg_arch *rg_arch_find_gguf(const char *gguf_arch)
{
	for (size_t i = 0; gguf_arch && i < N_ARCHS; i++)
		if (ARCHS[i]->gguf_arch && strcmp(ARCHS[i]->gguf_arch, gguf_arch) == 0)
			return ARCHS[i];
	return NULL;
}

static char g_names[512], g_gguf_names[256];
static pthread_once_t g_names_once = PTHREAD_ONCE_INIT;

static void names_init(void)
{
	size_t off = 0, goff = 0;

	for (size_t i = 0; i < N_ARCHS && off < sizeof(g_names); i++)
		off += (size_t)snprintf(g_names + off, sizeof(g_names) - off, "%s%s", i ? ", " : "",
					ARCHS[i]->model_type);
	for (size_t i = 0; i < N_ARCHS && goff < sizeof(g_gguf_names); i++)
		if (ARCHS[i]->gguf_arch)
			goff += (size_t)snprintf(g_gguf_names + goff, sizeof(g_gguf_names) - goff,
						 "%s%s", goff ? ", " : "", ARCHS[i]->gguf_arch);
}

const char *rg_arch_names(void)
{
	pthread_once(&g_names_once, names_init);
	return g_names;
}

const char *rg_arch_gguf_names(void)
{
	pthread_once(&g_names_once, names_init);
	return g_gguf_names;
}
