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

/* The rendering of rg_model_chat_apply by template jinja (NULL: the model's), with the content
 * spans when spans is not NULL. */
static rg_status chat_render(const rg_model *m, const char *jinja, const rg_chat_message *msgs,
			     int n, const char *tools, bool add_generation_prompt, char **out,
			     size_t *len, size_t **spans, size_t *n_spans)
{
	char *bos = NULL, *eos = NULL;
	rg_status s;

	if (!jinja && (s = chat_template_of(m)) != RG_OK)
		return s;
	if (!m)
		return rg_errorf(RG_ERR_INVALID_INPUT, "model is NULL");
	if ((s = chat_special(m, m->chat_bos, m->info.bos_token_id, &bos)) != RG_OK ||
	    (s = chat_special(m, m->chat_eos, m->info.eos_token_id, &eos)) != RG_OK)
		goto out_free;
	s = rg_chat_template_render_tools(jinja ? jinja : m->chat_template, msgs, n, tools, bos,
					  eos, add_generation_prompt, out, len, spans, n_spans);
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
	return chat_render(m, NULL, msgs, n, NULL, add_generation_prompt, out, NULL, NULL, NULL);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The last occurrence of needle[0..nn) in hay[0..nh), or -1 (rindex). */
static long last_index(const char *hay, size_t nh, const char *needle, size_t nn)
{
	if (nn > nh)
		return -1;
	for (size_t i = nh - nn + 1; i-- > 0;)
		if (!memcmp(hay + i, needle, nn))
			return (long)i;
	return -1;
}

/* transformers' continue_final_message cut of chat[0..*len) after final[0..fl), in place
 * (apply_chat_template, transformers 4.5x): see rg_model_chat_encode_opts. Content spans past the
 * cut are clipped. */
static rg_status cut_after_final(char *chat, size_t *len, const char *final, size_t fl,
				 size_t *spans, size_t *n_spans)
{
	size_t a = 0, z = fl, cut;
	long loc;

	while (a < z && is_space(final[a]))
		a++;
	while (z > a && is_space(final[z - 1]))
		z--;
	loc = last_index(chat, *len, final + a, z - a);
	if (loc < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "continue_final_message is set but the final "
				 "message does not appear in the chat after applying the chat "
				 "template");
	/* the rendering holds the content unchanged (its leading white space aside) */
	if ((size_t)loc + (fl - a) <= *len && fl - a == fl && !memcmp(chat + loc, final, fl))
		cut = (size_t)loc + (fl - a);
	else
		cut = (size_t)loc + (z - a);
	chat[cut] = '\0';
	*len = cut;
	if (spans) {
		size_t k = 0;

		for (size_t i = 0; i < *n_spans; i++) {
			if (spans[2 * i] >= cut)
				continue;
			spans[2 * k] = spans[2 * i];
			spans[2 * k + 1] = spans[2 * i + 1] < cut ? spans[2 * i + 1] : cut;
			k++;
		}
		*n_spans = k;
	}
	return RG_OK;
}

rg_status rg_model_chat_encode(const rg_model *m, const rg_chat_message *msgs, int n,
			       bool add_generation_prompt, bool content_as_text, char **text,
			       rg_encoding *out)
{
	rg_chat_opts o = {.add_generation_prompt = add_generation_prompt,
			  .content_as_text = content_as_text};

	return rg_model_chat_encode_opts(m, msgs, n, &o, text, out);
}

const char *rg_chat_template_family(const char *jinja)
{
	rg_chat_family f;

	if (!jinja) {
		rg_errorf(RG_ERR_INVALID_INPUT, "chat template is NULL");
		return NULL;
	}
	f = rg_chat_template_detect(jinja);
	return f == RG_CHAT_UNKNOWN ? NULL : rg_chat_family_name(f);
}

rg_status rg_model_chat_encode_opts(const rg_model *m, const rg_chat_message *msgs, int n,
				    const rg_chat_opts *o, char **text, rg_encoding *out)
{
	static const rg_chat_opts dflt = {.add_generation_prompt = true};
	rg_tok_params tp = {.truncation = RG_TRUNCATE_NONE};
	size_t *spans = NULL, n_spans = 0, len = 0;
	char *chat = NULL;
	rg_status s;

	if (text)
		*text = NULL;
	if (out)
		memset(out, 0, sizeof(*out));
	if (!msgs || (!out && !text))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_chat_encode: NULL argument");
	if (!o)
		o = &dflt;
	if (o->continue_final_message && o->add_generation_prompt)
		return rg_errorf(RG_ERR_INVALID_INPUT, "Cannot set both continue_final_message and "
				 "add_generation_prompt to true");
	if ((s = chat_render(m, o->chat_template, msgs, n, o->tools, o->add_generation_prompt,
			     &chat, &len, o->content_as_text ? &spans : NULL, &n_spans)) != RG_OK)
		return s;
	if (o->continue_final_message &&
	    (s = cut_after_final(chat, &len, msgs[n - 1].content ? msgs[n - 1].content : "",
				 msgs[n - 1].content_len, spans, &n_spans)) != RG_OK)
		goto out_free;
	if (!out) { /* the prompt text alone: no tokenizer needed */
		*text = chat;
		chat = NULL;
		goto out_free;
	}
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
		msgs[n++] = (rg_chat_message){.role = "system", .content = system,
					      .content_len = strlen(system)};
	msgs[n++] = (rg_chat_message){.role = "user", .content = user,
				      .content_len = strlen(user)};
	return rg_model_chat_apply(m, msgs, n, true, out);
}
