/* libFuzzer target for the generation routes' JSON (app/server/gen_request.c). The first input
 * byte picks the API (completions / chat / TGI generate / TGI generate_stream) and the limits;
 * the rest is the body. Checks the parser's contract on every input: RG_OK leaves a request
 * within the header's ranges (prompts or messages within the limits, every text valid UTF-8
 * and NUL-terminated, every id in the vocabulary, every option in range), an error leaves a
 * zeroed request and a 400/413/500 status with a message; and the answer writers, fed the
 * parsed texts and the raw body as token pieces, always write valid UTF-8 JSON events; the
 * tool-call scanner (app/server/tool_call.c), fed the raw body as generated text in every
 * format, gives calls whose arguments are JSON, content that is part of the text, a scan of
 * a prefix that is a prefix of the whole's, and chat answers with those calls that are valid
 * JSON.
 * Build and run: tests/fuzz/run_fuzz.sh. */
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "server/gen_request.h"

static bool text_ok(const char *s, size_t n, bool allow_empty)
{
	return s && (n || allow_empty) && rg_utf8_valid(s, n) && s[n] == '\0';
}

static bool in(double v, double lo, double hi)
{
	return v >= lo && v <= hi;
}

/* One JSON value, all of [s, s + n). */
static bool json_ok(const char *s, size_t n)
{
	json_tokener *tok = json_tokener_new();
	json_object *o;
	bool ok;

	if (!tok)
		return true; /* out of memory: nothing to check */
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, s, (int)n);
	ok = o && json_tokener_get_error(tok) == json_tokener_success &&
	     json_tokener_get_parse_end(tok) == n;
	json_object_put(o);
	json_tokener_free(tok);
	return ok;
}

/* Every "data: X\n\n" event of b holds one JSON value X (or [DONE]). */
static void check_events(const rg_buf *b)
{
	size_t i = 0;

	if (b->oom)
		return;
	if (!rg_utf8_valid(b->data, b->len))
		abort();
	while (i < b->len) {
		const char *s = b->data + i, *end = strstr(s, "\n\n");

		if (strncmp(s, "data: ", 6) || !end || memchr(s, '\n', (size_t)(end - s)))
			abort();
		if (strncmp(s + 6, "[DONE]\n\n", 8) && !json_ok(s + 6, (size_t)(end - s) - 6))
			abort();
		i = (size_t)(end - b->data) + 2;
	}
}

static void check_request(const rg_gen_request *r, const rg_gen_limits *lim)
{
	bool tgi = r->api == RG_GEN_API_TGI || r->api == RG_GEN_API_TGI_STREAM;
	bool trn = r->api == RG_GEN_API_TRANSLATE;

	if (r->api == RG_GEN_API_CHAT) {
		if (r->n_prompts || r->n_messages < 1 || r->n_messages > lim->max_messages)
			abort();
		for (int i = 0; i < r->n_messages; i++) {
			const char *role = r->messages[i].role;

			if (!role || (strcmp(role, "system") && strcmp(role, "developer") &&
				      strcmp(role, "user") && strcmp(role, "assistant") &&
				      strcmp(role, "tool")))
				abort();
			if (!text_ok(r->messages[i].content, r->messages[i].content_len, true))
				abort();
		}
	} else {
		if (r->n_messages || r->n_prompts < 1 || r->n_prompts > lim->max_prompts ||
		    (tgi && r->n_prompts != 1))
			abort();
		for (int i = 0; i < r->n_prompts; i++) {
			if (!r->texts[i] == !r->ids[i] || (tgi && !r->texts[i]))
				abort();
			if (r->texts[i] && !text_ok(r->texts[i], r->text_lens[i], false))
				abort();
			if (r->ids[i] && r->n_ids[i] < 1)
				abort();
			for (int k = 0; r->ids[i] && k < r->n_ids[i]; k++)
				if (r->ids[i][k] < 0 || r->ids[i][k] >= lim->vocab_size)
					abort();
		}
	}
	/* /generate_stream always streams; /generate reads "stream" (TGI's POST / streams with it) */
	if (r->api == RG_GEN_API_TGI_STREAM && !r->stream)
		abort();
	if (r->include_usage && !r->stream)
		abort();
	if (r->n < 1 || r->n > lim->max_n || (tgi && r->n != 1))
		abort();
	if (r->best_of && (r->best_of < r->n || r->best_of > lim->max_n ||
			   (r->best_of > 1 && r->stream)))
		abort();
	/* max_tokens 0: the prompt scored alone (echo or prompt_logprobs, never beams) */
	if (r->max_tokens < 1 && !(r->max_tokens == -1 && (r->api == RG_GEN_API_CHAT || trn)) &&
	    !(r->max_tokens == 0 && (r->echo || r->prompt_logprobs >= 0) && !r->use_beam_search))
		abort();
	if (r->min_tokens < 0 || (r->max_tokens >= 0 && r->min_tokens > r->max_tokens))
		abort();
	if (r->prompt_logprobs < -1 || r->prompt_logprobs > RG_GEN_MAX_LOGPROBS ||
	    (r->prompt_logprobs >= 0 && (r->stream || tgi || trn)))
		abort();
	if (!in(r->temperature, 0, tgi || trn ? INFINITY : 2) || (tgi && r->temperature <= 0))
		abort();
	/* /translate: greedy at temperature 0, a stream of one input and one beam */
	if (trn && (r->do_sample == (r->temperature == 0) ||
		    (r->stream && (r->inputs_list || r->use_beam_search)) || r->n != 1))
		abort();
	if (!(r->top_p > 0 && r->top_p <= 1) || r->top_k < 0 || !in(r->min_p, 0, 1))
		abort();
	if (!in(r->presence_penalty, -2, 2) || !in(r->frequency_penalty, -2, 2) ||
	    !(r->repetition_penalty > 0 && isfinite(r->repetition_penalty)))
		abort();
	if (!isfinite(r->length_penalty) || r->early_stopping < 0 || r->early_stopping > 2)
		abort();
	if (r->use_beam_search && r->do_sample)
		abort();
	if (r->n_stop < 0 || r->n_stop > lim->max_stop || (r->n_stop && !r->stop))
		abort();
	for (int i = 0; i < r->n_stop; i++)
		if (!text_ok(r->stop[i], strlen(r->stop[i]), false))
			abort();
	for (int i = 0; i < r->n_stop_token_ids; i++)
		if (r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= lim->vocab_size)
			abort();
	for (int i = 0; i < r->n_bias; i++)
		if (r->bias_ids[i] < 0 || r->bias_ids[i] >= lim->vocab_size ||
		    !in(r->bias_values[i], -100, 100))
			abort();
	if (r->logprobs < -1 || r->logprobs > (r->api == RG_GEN_API_COMPLETIONS
						       ? lim->max_logprobs : RG_GEN_MAX_LOGPROBS))
		abort();
	if (r->top_n_tokens < 0 || r->top_n_tokens > RG_GEN_MAX_LOGPROBS)
		abort();
	if (r->deadline_ms < 0 || r->tpot_ms < 0 || !isfinite(r->deadline_ms) ||
	    !isfinite(r->tpot_ms))
		abort();
	if (r->model && !rg_utf8_valid(r->model, strlen(r->model)))
		abort();
	if (r->user && !rg_utf8_valid(r->user, strlen(r->user)))
		abort();
}

/* The tool-call scanner on the raw bytes as a model's text (see the head of this file). */
static void check_tool_scan(const uint8_t *data, size_t size)
{
	const char *t = (const char *)data;
	rg_gen_answer_ctx ctx = { .api = RG_GEN_API_CHAT, .id = "chatcmpl-1", .model = "m" };

	for (int f = RG_TOOL_FMT_NONE; f <= RG_TOOL_FMT_NAMED; f++) {
		rg_tool_scan whole = { 0 }, part = { 0 };
		rg_gen_choice c = { .text = "", .finish = RG_GEN_FINISH_TOOL_CALLS, .tools = true };
		rg_buf b;

		rg_tool_scan_text((rg_tool_fmt)f, "fn", t, size, true, &whole);
		rg_tool_scan_text((rg_tool_fmt)f, "fn", t, size / 2, false, &part);
		if (whole.oom || part.oom)
			goto out_free;
		if (whole.content.len > size || part.content.len > whole.content.len ||
		    (part.content.len &&
		     memcmp(part.content.data, whole.content.data, part.content.len)))
			abort();
		if (rg_utf8_valid(t, size) && whole.content.len &&
		    !rg_utf8_valid(whole.content.data, whole.content.len))
			abort();
		for (int k = 0; f != RG_TOOL_FMT_NAMED && k < whole.n_calls; k++)
			if (!json_ok(whole.calls[k].arguments, strlen(whole.calls[k].arguments)) ||
			    (k < part.n_calls &&
			     strcmp(part.calls[k].arguments, whole.calls[k].arguments)))
				abort();
		if (f != RG_TOOL_FMT_NAMED && part.n_calls > whole.n_calls)
			abort();
		c.text = whole.content.data ? whole.content.data : "";
		c.text_len = whole.content.len;
		c.calls = whole.calls;
		c.n_calls = whole.n_calls;
		rg_buf_init(&b);
		rg_gen_answer_json(&b, &ctx, &c, 1, NULL, false, 0);
		if (!b.oom && (!rg_utf8_valid(b.data, b.len) || !json_ok(b.data, b.len)))
			abort();
		rg_buf_free(&b);
out_free:
		rg_tool_scan_free(&whole);
		rg_tool_scan_free(&part);
	}
}

/* The writers, fed the request's texts and the fuzzer's raw bytes as pieces. */
static void check_answers(const rg_gen_request *r, const uint8_t *data, size_t size)
{
	const char *raw = (const char *)data;
	const char *text = r->n_prompts && r->texts[0] ? r->texts[0] : raw;
	size_t text_len = r->n_prompts && r->texts[0] ? r->text_lens[0] : size;
	char *z = malloc(size + 1); /* the raw bytes, NUL-terminated: for the C-string fields */
	rg_gen_tok top[2] = { { 1, raw, size / 2, -INFINITY, false },
			      { 2, raw + size / 2, size - size / 2, NAN, true } };
	rg_gen_lp lp[2] = { { { 3, raw, size, -1.0f, false }, 2, top, 0 },
			    { { 4, text, text_len, 0.0f, true }, 1, top + 1, 0 } };
	/* a prompt's entries (echo, prompt_logprobs): the first without alternatives (null) */
	rg_gen_lp plp[2] = { { { 5, raw, size, NAN, false }, -1, NULL, 0 },
			     { { 2, text, text_len, -2.0f, false }, 2, top, 7 } };
	rg_gen_choice c[2] = {
		{ .index = 0, .text = text, .text_len = text_len, .finish = RG_GEN_FINISH_STOP,
		  .lps = lp, .n_lps = 2, .n_generated = 2, .prefill = top, .n_prefill = 2,
		  .has_seed = r->has_seed, .seed = r->seed, .prompt_lps = plp, .n_prompt_lps = 2 },
		{ .index = 1, .text = raw, .text_len = size, .finish = RG_GEN_FINISH_LENGTH },
	};
	rg_gen_answer_ctx ctx = { r->api, "cmpl-1", 1, r->model, NULL, 7, r->inputs_list };
	rg_gen_usage u = { 1, 2, 0 };
	rg_buf b;

	if (!z)
		return;
	memcpy(z, raw, size);
	z[size] = '\0';
	c[0].stop_str = r->n_stop ? r->stop[0] : z;
	ctx.fingerprint = z;
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &ctx, c, 2, &u, r->details, r->top_n_tokens);
	if (!b.oom && (!rg_utf8_valid(b.data, b.len) || !json_ok(b.data, b.len)))
		abort();
	rg_buf_free(&b);
	rg_buf_init(&b);
	rg_gen_answer_event(&b, &ctx, 0, true, text, text_len, lp, 2, r->logprobs >= 0,
			    RG_GEN_FINISH_NONE, NULL, NULL, 0, 1, false, 0);
	rg_gen_answer_event(&b, &ctx, 1, false, raw, size, lp + 1, 1, true, RG_GEN_FINISH_LENGTH,
			    z, raw, size, 2, r->has_seed, r->seed);
	rg_gen_answer_event(&b, &ctx, 0, false, text, text_len, plp, 2, true,
			    RG_GEN_FINISH_NONE, NULL, NULL, 0, 1, false, 0);
	rg_gen_answer_usage_event(&b, &ctx, &u);
	rg_gen_answer_error_event(&b, r->api, "validation", z);
	rg_gen_answer_done_event(&b);
	check_events(&b);
	rg_buf_free(&b);
	free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const rg_gen_api apis[5] = { RG_GEN_API_COMPLETIONS, RG_GEN_API_CHAT,
					    RG_GEN_API_TGI, RG_GEN_API_TGI_STREAM,
					    RG_GEN_API_TRANSLATE };
	static const rg_gen_request zero;
	rg_gen_limits lim = { .vocab_size = 50257, .max_n = 4, .max_prompts = 4, .max_stop = 4,
			      .max_logprobs = 5, .max_messages = 8, .max_depth = 16 };
	rg_gen_request req;
	rg_req_error err;
	rg_status st;

	if (size < 1)
		return 0;
	check_tool_scan(data + 1, size - 1);
	lim.max_prompts = 1 + (data[0] >> 2) % 8;
	lim.max_messages = 1 + (data[0] >> 5) % 8;
	st = rg_gen_request_parse(apis[data[0] % 5], (const char *)data + 1, size - 1, &lim, &req,
				  &err);
	if (st != RG_OK) {
		if (memcmp(&req, &zero, sizeof(req)))
			abort();
		if (err.http_status != 400 && err.http_status != 413 && err.http_status != 500)
			abort();
		if (!err.msg[0] || !err.type || !memchr(err.param, '\0', sizeof(err.param)))
			abort();
		return 0;
	}
	check_request(&req, &lim);
	check_answers(&req, data + 1, size - 1);
	rg_gen_request_free(&req);
	if (memcmp(&req, &zero, sizeof(req)))
		abort();
	return 0;
}
