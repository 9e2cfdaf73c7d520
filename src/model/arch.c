/* The architecture registry: model_type (config.json) or general.architecture (GGUF) -> the
 * hooks that load and run it (model.h rg_arch). A new architecture is its file plus one line
 * here, of any kind: encoder, decoder, or encoder-decoder. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
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
	/* encoder-decoders */
	&rg_arch_marian, /* bart.c: MarianMT (opus-mt) */
	&rg_arch_bart, &rg_arch_mbart,
	&rg_arch_m2m100, /* bart.c: M2M100, NLLB-200 */
	&rg_arch_t5,     /* t5.c: T5, T5 v1.1, FLAN-T5 */
	&rg_arch_mt5,
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

const rg_arch *rg_arch_at(size_t i)
{
	return i < N_ARCHS ? ARCHS[i] : NULL;
}

rg_status rg_arch_check(const rg_arch *a)
{
	const bool enc = a->kind == RG_MODEL_ENCODER;
	const bool dec = a->kind == RG_MODEL_DECODER || a->kind == RG_MODEL_ENC_DEC;
	const bool ed = a->kind == RG_MODEL_ENC_DEC;
	const char *missing = !a->model_type ? "model_type"
			      : !a->hparams	? "hparams"
			      : !a->load	? "load"
			      : !a->free_weights ? "free_weights"
			      : enc && !a->encode ? "encode"
			      : dec && !a->decode ? "decode"
			      : ed && !a->encode_cross ? "encode_cross"
						  : NULL;

	if (!enc && !dec)
		return rg_errorf(RG_ERR_INTERNAL, "architecture %s: kind %d is not an rg_model_kind",
				 a->model_type ? a->model_type : "?", (int)a->kind);
	if (missing)
		return rg_errorf(RG_ERR_INTERNAL, "architecture %s: no %s hook for its kind",
				 a->model_type ? a->model_type : "?", missing);
	if ((!enc && (a->encode || a->load_head)) || (!dec && a->decode) || (!ed && a->encode_cross))
		return rg_errorf(RG_ERR_INTERNAL, "architecture %s: a forward hook of another kind",
				 a->model_type);
	if (!a->gguf_arch != !a->gguf)
		return rg_errorf(RG_ERR_INTERNAL,
				 "architecture %s: gguf_arch and its tensor-name table go together",
				 a->model_type);
	return RG_OK;
}

rg_status rg_arch_servable(const rg_arch *a, const char *what)
{
	rg_status s = rg_arch_check(a);

	(void)what;
	return s;
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
