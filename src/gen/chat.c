/* The chat API of include/ragged.h (rg_model_chat_template, rg_model_chat_apply,
 * rg_model_chat_family, rg_model_chat_format): the model's chat template (tokenizer_config.json's
 * or GGUF's tokenizer.chat_template, kept by the loaders) rendered by src/gen/chat_template.c with
 * the model's BOS and EOS texts. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/chat_template.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

const char *rg_model_chat_template(const rg_model *m)
{
	return m ? m->chat_template : NULL;
}

/* The text of a special token for the chat template: tokenizer_config.json's (cfg) when the
 * model has it, else the vocabulary string of id; into *out (malloc'd, NULL when neither). */
static rg_status chat_special(const rg_model *m, const char *cfg, int32_t id, char **out)
{
	const char *t;
	size_t len = 0;

	*out = NULL;
	if (cfg)
		t = cfg, len = strlen(cfg);
	else if (id < 0 || !(t = rg_model_token(m, id, &len)))
		return RG_OK;
	if (!(*out = strndup(t, len)))
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	return RG_OK;
}

static rg_status chat_template_of(const rg_model *m)
{
	if (!m)
		return rg_errorf(RG_ERR_INVALID_INPUT, "model is NULL");
	if (!m->chat_template)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s has no chat template", m->dir);
	return RG_OK;
}

/* The rendering of rg_model_chat_apply, with the content spans when spans is not NULL. */
static rg_status chat_render(const rg_model *m, const rg_chat_message *msgs, int n,
			     bool add_generation_prompt, char **out, size_t *len, size_t **spans,
			     size_t *n_spans)
{
	char *bos = NULL, *eos = NULL;
	rg_status s;

	if ((s = chat_template_of(m)) != RG_OK)
		return s;
	if ((s = chat_special(m, m->chat_bos, m->info.bos_token_id, &bos)) != RG_OK ||
	    (s = chat_special(m, m->chat_eos, m->info.eos_token_id, &eos)) != RG_OK)
		goto out_free;
	s = rg_chat_template_render_spans(m->chat_template, msgs, n, bos, eos,
					  add_generation_prompt, out, len, spans, n_spans);
	if (s != RG_OK)
		rg_error_wrap(s, "%s", m->dir);
out_free:
	free(bos);
	free(eos);
	return s;
}

rg_status rg_model_chat_apply(const rg_model *m, const rg_chat_message *msgs, int n,
			      bool add_generation_prompt, char **out)
{
	if (out)
		*out = NULL;
	if (!out || !msgs)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_chat_apply: NULL argument");
	return chat_render(m, msgs, n, add_generation_prompt, out, NULL, NULL, NULL);
}

rg_status rg_model_chat_encode(const rg_model *m, const rg_chat_message *msgs, int n,
			       bool add_generation_prompt, bool content_as_text, char **text,
			       rg_encoding *out)
{
	rg_tok_params tp = {.truncation = RG_TRUNCATE_NONE};
	size_t *spans = NULL, n_spans = 0, len = 0;
	char *chat = NULL;
	rg_status s;

	if (text)
		*text = NULL;
	if (out)
		memset(out, 0, sizeof(*out));
	if (!msgs || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_chat_encode: NULL argument");
	if ((s = chat_render(m, msgs, n, add_generation_prompt, &chat, &len,
			     content_as_text ? &spans : NULL, &n_spans)) != RG_OK)
		return s;
	if (!m->tok) {
		s = rg_errorf(RG_ERR_UNSUPPORTED, "%s has no tokenizer", m->dir);
		goto out_free;
	}
	tp.plain = spans;
	tp.n_plain = n_spans;
	if ((s = rg_tokenizer_encode_ex(m->tok, chat, len, NULL, 0, &tp, out)) != RG_OK)
		goto out_free;
	if (text) {
		*text = chat;
		chat = NULL;
	}
out_free:
	free(spans);
	free(chat);
	return s;
}

const char *rg_model_chat_family(const rg_model *m)
{
	rg_chat_family f;

	if (chat_template_of(m) != RG_OK)
		return NULL;
	f = rg_chat_template_detect(m->chat_template);
	return f == RG_CHAT_UNKNOWN ? NULL : rg_chat_family_name(f);
}

rg_status rg_model_chat_format(const rg_model *m, const char *system, const char *user,
			       char **out)
{
	rg_chat_message msgs[2];
	int n = 0;

	if (out)
		*out = NULL;
	if (!m || !user || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_chat_format: NULL argument");
	if (system)
		msgs[n++] = (rg_chat_message){"system", system, strlen(system)};
	msgs[n++] = (rg_chat_message){"user", user, strlen(user)};
	return rg_model_chat_apply(m, msgs, n, true, out);
}
