/* The generation routes' JSON (app/server/gen_request.h): parsing of OpenAI's completions and
 * chat bodies and of TGI's /generate bodies (defaults per API, every range error a 400 naming
 * its param, unknown keys, unsupported features, stream rules, prompt shapes, messages, UTF-8,
 * limits 413) and the answer writers (each answer parsed back with json-c and every field the
 * header names checked; server-sent-event framing; invalid UTF-8 and -inf made JSON-safe).
 * The expectations come from the APIs' documents and TGI's router (validation.rs), not from
 * the parser's own output.
 *
 * RG_DUMP_GEN_ANSWERS=dir writes each answer written here to dir/<api>__<name>.json (a whole
 * answer) or .sse (a stream); tests/py/test_gen_answers.py validates those files with the
 * real clients' models (openai, huggingface_hub). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "core/utf8.h"
#include "server/gen_request.h"

#define CMP RG_GEN_API_COMPLETIONS
#define CHAT RG_GEN_API_CHAT
#define TGI RG_GEN_API_TGI
#define TGIS RG_GEN_API_TGI_STREAM
#define TRN RG_GEN_API_TRANSLATE

static const rg_gen_limits LIM = {
	.vocab_size = 1000, .max_n = 8, .max_prompts = 4, .max_stop = 4, .max_logprobs = 5,
	.max_messages = 8, .max_depth = 16,
};

static rg_gen_request g_req;
static rg_req_error g_err;

static rg_status parse_n(rg_gen_api api, const char *body, size_t len)
{
	rg_gen_request_free(&g_req);
	return rg_gen_request_parse(api, body, len, &LIM, &g_req, &g_err);
}

static rg_status parse(rg_gen_api api, const char *body)
{
	return parse_n(api, body, strlen(body));
}

/* body parses; *g_req holds it */
#define OK(api, body)                                                                       \
	do {                                                                                \
		if (parse(api, body) != RG_OK)                                              \
			fail_msg("refused %s: %d %s (param %s)", body, g_err.http_status,  \
				 g_err.msg, g_err.param);                                   \
	} while (0)

/* body is refused with http and names param (in err.param and, unless it is the JSON as a
 * whole, in the message); the request is left zeroed */
static void refused_n(rg_gen_api api, const char *body, size_t len, int http, const char *param,
		      int line)
{
	static const rg_gen_request zero;
	rg_status st = parse_n(api, body, len);

	if (st == RG_OK)
		fail_msg("line %d: accepted %s", line, body);
	if (g_err.http_status != http || strcmp(g_err.param, param))
		fail_msg("line %d: %s: got %d param '%s' (%s); want %d '%s'", line, body,
			 g_err.http_status, g_err.param, g_err.msg, http, param);
	if (!g_err.msg[0] || !g_err.type || !g_err.type[0])
		fail_msg("line %d: %s: no message or type", line, body);
	if (param[0] && !strstr(g_err.msg, param))
		fail_msg("line %d: message '%s' does not name %s", line, g_err.msg, param);
	if (memcmp(&g_req, &zero, sizeof(zero)))
		fail_msg("line %d: request not zeroed after an error", line);
	assert_int_equal(st, http == 500 ? RG_ERR_OOM : RG_ERR_INVALID_INPUT);
}

#define BAD(api, body, http, param) refused_n(api, body, strlen(body), http, param, __LINE__)

/* ---- defaults ------------------------------------------------------------------------------ */

static void test_defaults_completions(void **state)
{
	(void)state;
	OK(CMP, "{\"prompt\": \"Hello\"}");
	assert_int_equal(g_req.api, CMP);
	assert_null(g_req.model);
	assert_int_equal(g_req.n_prompts, 1);
	assert_string_equal(g_req.texts[0], "Hello");
	assert_int_equal(g_req.text_lens[0], 5);
	assert_null(g_req.ids[0]);
	assert_int_equal(g_req.n_messages, 0);
	assert_false(g_req.stream);
	assert_false(g_req.include_usage);
	assert_int_equal(g_req.n, 1);
	assert_int_equal(g_req.best_of, 0);
	assert_false(g_req.use_beam_search);
	assert_true(g_req.length_penalty == 1.0f);
	assert_int_equal(g_req.early_stopping, 0);
	assert_int_equal(g_req.max_tokens, 16); /* OpenAI completions' default */
	assert_int_equal(g_req.min_tokens, 0);
	assert_true(g_req.do_sample);           /* temperature 1 */
	assert_true(g_req.temperature == 1.0f);
	assert_true(g_req.top_p == 1.0f);
	assert_int_equal(g_req.top_k, 0);
	assert_true(g_req.min_p == 0.0f);
	assert_true(g_req.presence_penalty == 0.0f);
	assert_true(g_req.frequency_penalty == 0.0f);
	assert_true(g_req.repetition_penalty == 1.0f);
	assert_false(g_req.has_seed);
	assert_int_equal(g_req.n_stop, 0);
	assert_int_equal(g_req.n_stop_token_ids, 0);
	assert_int_equal(g_req.n_bias, 0);
	assert_int_equal(g_req.logprobs, -1);
	assert_false(g_req.echo);
	assert_false(g_req.ignore_eos);
	assert_true(g_req.skip_special_tokens);
	assert_true(g_req.deadline_ms == 0 && g_req.tpot_ms == 0);
	assert_int_equal(g_req.priority, 0);
	assert_null(g_req.user);
	rg_gen_request_free(&g_req);
	assert_null(g_req.texts);
	rg_gen_request_free(&g_req); /* a zeroed request is fine */
}

static void test_defaults_chat(void **state)
{
	(void)state;
	OK(CHAT, "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
	assert_string_equal(g_req.model, "m");
	assert_int_equal(g_req.n_prompts, 0);
	assert_int_equal(g_req.n_messages, 1);
	assert_string_equal(g_req.messages[0].role, "user");
	assert_string_equal(g_req.messages[0].content, "hi");
	assert_int_equal(g_req.messages[0].content_len, 2);
	assert_true(g_req.add_generation_prompt);
	assert_int_equal(g_req.max_tokens, -1); /* up to the context */
	assert_int_equal(g_req.logprobs, -1);
	assert_true(g_req.do_sample);
	assert_int_equal(g_req.n, 1);
	assert_false(g_req.stream);
}

static void test_defaults_tgi(void **state)
{
	(void)state;
	/* TGI's default_parameters() (no "parameters") sample */
	OK(TGI, "{\"inputs\": \"Hello\"}");
	assert_int_equal(g_req.n_prompts, 1);
	assert_string_equal(g_req.texts[0], "Hello");
	assert_null(g_req.model);
	assert_true(g_req.do_sample);
	assert_int_equal(g_req.max_tokens, 100);
	assert_false(g_req.stream);
	assert_false(g_req.details);
	assert_false(g_req.return_full_text);
	assert_int_equal(g_req.top_n_tokens, 0);
	assert_int_equal(g_req.logprobs, -1);
	assert_int_equal(g_req.n, 1);
	assert_true(g_req.temperature == 1.0f && g_req.top_p == 1.0f && g_req.top_k == 0);
	/* "parameters": {} is GenerateParameters' serde defaults: do_sample false, greedy */
	OK(TGI, "{\"inputs\": \"Hello\", \"parameters\": {}}");
	assert_false(g_req.do_sample);
	OK(TGI, "{\"inputs\": \"Hello\", \"parameters\": null}");
	assert_true(g_req.do_sample);
	/* NextTokenChooser: a warper that changes the distribution samples */
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"temperature\": 0.5}}");
	assert_true(g_req.do_sample);
	assert_true(g_req.temperature == 0.5f);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"top_k\": 5}}");
	assert_true(g_req.do_sample);
	assert_int_equal(g_req.top_k, 5);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"top_p\": 0.9}}");
	assert_true(g_req.do_sample);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"temperature\": 1.0, \"typical_p\": 1}}");
	assert_false(g_req.do_sample);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"do_sample\": true}}");
	assert_true(g_req.do_sample);
	/* the stream route always streams; every token carries its logprob */
	OK(TGIS, "{\"inputs\": \"x\", \"parameters\": {\"top_n_tokens\": 3}}");
	assert_true(g_req.stream);
	assert_int_equal(g_req.logprobs, 3);
	assert_int_equal(g_req.top_n_tokens, 3);
	OK(TGIS, "{\"inputs\": \"x\"}");
	assert_int_equal(g_req.logprobs, 0);
	/* /generate: details asks for logprobs; decoder_input_details implies details */
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"details\": true, \"top_n_tokens\": 2}}");
	assert_true(g_req.details);
	assert_int_equal(g_req.logprobs, 2);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"decoder_input_details\": true}}");
	assert_true(g_req.details && g_req.decoder_input_details);
	assert_int_equal(g_req.logprobs, 0);
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"top_n_tokens\": 2}}");
	assert_int_equal(g_req.logprobs, -1); /* no details: nothing shows them */
	/* the rest of GenerateParameters */
	OK(TGI, "{\"inputs\": \"x\", \"parameters\": {\"max_new_tokens\": 7, \"return_full_text\": "
		"true, \"stop\": [\"\\n\", \"END\"], \"truncate\": 12, \"watermark\": false, "
		"\"seed\": 18446744073709551615, \"repetition_penalty\": 1.2, "
		"\"frequency_penalty\": -0.5, \"grammar\": null, \"adapter_id\": null, "
		"\"typical_p\": null, \"best_of\": 1}}");
	assert_int_equal(g_req.max_tokens, 7);
	assert_true(g_req.return_full_text);
	assert_int_equal(g_req.n_stop, 2);
	assert_string_equal(g_req.stop[0], "\n");
	assert_string_equal(g_req.stop[1], "END");
	assert_true(g_req.has_seed);
	assert_true(g_req.seed == UINT64_MAX);
	assert_true(g_req.repetition_penalty == 1.2f);
	assert_true(g_req.frequency_penalty == -0.5f);
	assert_int_equal(g_req.best_of, 1);
}

/* ---- numbers: every range error names its param ------------------------------------------ */

struct range_case {
	rg_gen_api api;
	const char *field; /* "key": value, spliced into a valid body */
	const char *param; /* NULL: accepted */
};

static void check_range(const struct range_case *c, int line)
{
	char body[512];

	if (c->api == CMP)
		snprintf(body, sizeof(body), "{\"prompt\": \"x\", %s}", c->field);
	else if (c->api == CHAT)
		snprintf(body, sizeof(body),
			 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s}", c->field);
	else
		snprintf(body, sizeof(body), "{\"inputs\": \"x\", \"parameters\": {%s}}", c->field);
	if (c->param) {
		refused_n(c->api, body, strlen(body), 400, c->param, line);
	} else if (parse(c->api, body) != RG_OK) {
		fail_msg("line %d: refused %s: %s", line, body, g_err.msg);
	}
}

static void test_openai_ranges(void **state)
{
	static const struct range_case cases[] = {
		{ CMP, "\"n\": 0", "n" }, { CMP, "\"n\": 9", "n" }, { CMP, "\"n\": 8", NULL },
		{ CMP, "\"n\": 1.5", "n" }, { CMP, "\"n\": \"2\"", "n" },
		{ CMP, "\"max_tokens\": 0", "max_tokens" },
		{ CMP, "\"max_tokens\": -1", "max_tokens" },
		{ CMP, "\"max_tokens\": 4294967296", "max_tokens" },
		{ CMP, "\"max_tokens\": 1", NULL },
		/* prompt scoring (issue 31): max_tokens 0 with echo or prompt_logprobs */
		{ CMP, "\"max_tokens\": 0, \"echo\": true", NULL },
		{ CMP, "\"max_tokens\": 0, \"prompt_logprobs\": 0", NULL },
		{ CMP, "\"max_tokens\": 0, \"echo\": true, \"min_tokens\": 1", "min_tokens" },
		{ CMP, "\"max_tokens\": 0, \"echo\": true, \"use_beam_search\": true", "max_tokens" },
		{ CMP, "\"prompt_logprobs\": -1", "prompt_logprobs" },
		{ CMP, "\"prompt_logprobs\": 21", "prompt_logprobs" },
		{ CMP, "\"prompt_logprobs\": \"1\"", "prompt_logprobs" },
		{ CMP, "\"prompt_logprobs\": 20", NULL },
		{ CMP, "\"prompt_logprobs\": null", NULL },
		{ CHAT, "\"prompt_logprobs\": 1, \"stream\": true", "prompt_logprobs" },
		{ CHAT, "\"prompt_logprobs\": 3", NULL },
		{ CMP, "\"echo\": true, \"logprobs\": 1, \"max_tokens\": 0, \"stream\": true", NULL },
		{ CHAT, "\"max_completion_tokens\": 0", "max_completion_tokens" },
		{ CMP, "\"min_tokens\": -1", "min_tokens" },
		{ CMP, "\"min_tokens\": 17", "min_tokens" }, /* > the default max_tokens 16 */
		{ CMP, "\"min_tokens\": 16", NULL },
		{ CMP, "\"temperature\": -0.1", "temperature" },
		{ CMP, "\"temperature\": 2.01", "temperature" },
		{ CMP, "\"temperature\": 1e999", "temperature" }, /* json-c reads inf */
		{ CMP, "\"temperature\": \"hot\"", "temperature" },
		{ CMP, "\"temperature\": 0", NULL }, { CMP, "\"temperature\": 2", NULL },
		{ CMP, "\"top_p\": 0", "top_p" }, { CMP, "\"top_p\": 1.01", "top_p" },
		{ CMP, "\"top_p\": 1", NULL }, { CMP, "\"top_p\": 0.01", NULL },
		{ CMP, "\"top_k\": -2", "top_k" }, { CMP, "\"top_k\": 0.5", "top_k" },
		{ CMP, "\"top_k\": -1", NULL },
		{ CMP, "\"min_p\": -0.01", "min_p" }, { CMP, "\"min_p\": 1.01", "min_p" },
		{ CMP, "\"min_p\": 1", NULL },
		{ CMP, "\"presence_penalty\": -2.01", "presence_penalty" },
		{ CMP, "\"presence_penalty\": 2.01", "presence_penalty" },
		{ CMP, "\"presence_penalty\": -2", NULL },
		{ CHAT, "\"frequency_penalty\": -2.5", "frequency_penalty" },
		{ CHAT, "\"frequency_penalty\": 2.5", "frequency_penalty" },
		{ CHAT, "\"frequency_penalty\": 2", NULL },
		{ CMP, "\"repetition_penalty\": 0", "repetition_penalty" },
		{ CMP, "\"repetition_penalty\": -1", "repetition_penalty" },
		{ CMP, "\"repetition_penalty\": 1e999", "repetition_penalty" },
		{ CMP, "\"repetition_penalty\": 0.01", NULL },
		{ CMP, "\"repetition_penalty\": 1e300", "repetition_penalty" }, /* no float */
		{ CMP, "\"temperature\": 1e-60", NULL },          /* 0 as a float: greedy */
		{ CMP, "\"top_p\": 1e-60", "top_p" },             /* 0 as a float */
		{ CMP, "\"seed\": 18446744073709551615", "seed" }, /* past int64 */
		{ CMP, "\"seed\": 1.5", "seed" },
		{ CMP, "\"seed\": -9223372036854775808", NULL },
		{ CMP, "\"logprobs\": -1", "logprobs" }, { CMP, "\"logprobs\": 6", "logprobs" },
		{ CMP, "\"logprobs\": true", "logprobs" }, { CMP, "\"logprobs\": 5", NULL },
		{ CHAT, "\"logprobs\": 3", "logprobs" },
		{ CHAT, "\"logprobs\": true, \"top_logprobs\": 21", "top_logprobs" },
		{ CHAT, "\"logprobs\": true, \"top_logprobs\": -1", "top_logprobs" },
		{ CHAT, "\"logprobs\": true, \"top_logprobs\": 20", NULL },
		{ CMP, "\"best_of\": 0", "best_of" }, { CMP, "\"best_of\": 9", "best_of" },
		{ CMP, "\"n\": 3, \"best_of\": 2", "best_of" },
		{ CMP, "\"n\": 3, \"best_of\": 3", NULL },
		{ CMP, "\"use_beam_search\": true, \"length_penalty\": 1e999", "length_penalty" },
		{ CMP, "\"length_penalty\": \"x\"", "length_penalty" },
		{ CMP, "\"priority\": 2147483648", "priority" },
		{ CMP, "\"priority\": -2147483648", NULL },
		{ CMP, "\"deadline_ms\": 0", "deadline_ms" },
		{ CMP, "\"deadline_ms\": -5", "deadline_ms" },
		{ CHAT, "\"tpot_ms\": 0", "tpot_ms" }, { CHAT, "\"tpot_ms\": 0.5", NULL },
		{ CMP, "\"stream\": 1", "stream" }, { CMP, "\"echo\": \"yes\"", "echo" },
		{ CMP, "\"ignore_eos\": 0", "ignore_eos" },
		{ CMP, "\"skip_special_tokens\": \"no\"", "skip_special_tokens" },
		{ CHAT, "\"add_generation_prompt\": 1", "add_generation_prompt" },
		{ CMP, "\"use_beam_search\": 1", "use_beam_search" },
		{ CMP, "\"model\": 5", "model" }, { CMP, "\"user\": 5", "user" },
		{ CMP, "\"model\": \"a\\u0000b\"", "model" },
		{ CMP, "\"metadata\": [1]", "metadata" }, { CMP, "\"store\": \"y\"", "store" },
		{ CMP, "\"service_tier\": 1", "service_tier" },
		{ CHAT, "\"parallel_tool_calls\": 1", "parallel_tool_calls" },
		{ CMP, "\"metadata\": {\"a\": \"b\"}, \"store\": false, \"service_tier\": \"auto\", "
		       "\"user\": \"u\"", NULL },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_range(&cases[i], __LINE__ * 1000 + (int)i);
}

static void test_tgi_ranges(void **state)
{
	static const struct range_case cases[] = {
		{ TGI, "\"temperature\": 0", "temperature" },
		{ TGI, "\"temperature\": -1", "temperature" },
		{ TGI, "\"temperature\": 1e999", "temperature" },
		{ TGI, "\"temperature\": 7", NULL }, /* TGI: no upper bound */
		{ TGI, "\"temperature\": 1e-50", "temperature" }, /* 0 as a float */
		{ TGI, "\"temperature\": 3.5e38", "temperature" }, /* past FLT_MAX */
		{ TGI, "\"repetition_penalty\": 0", "repetition_penalty" },
		{ TGI, "\"frequency_penalty\": 2.5", "frequency_penalty" },
		{ TGI, "\"frequency_penalty\": -2", NULL },
		{ TGI, "\"top_k\": 0", "top_k" }, { TGI, "\"top_k\": -1", "top_k" },
		{ TGI, "\"top_k\": 1", NULL },
		{ TGI, "\"top_p\": 0", "top_p" }, { TGI, "\"top_p\": 1", "top_p" },
		{ TGI, "\"top_p\": 0.99", NULL },
		{ TGI, "\"typical_p\": 0", "typical_p" }, { TGI, "\"typical_p\": 0.5", "typical_p" },
		{ TGI, "\"typical_p\": 1.5", "typical_p" }, { TGI, "\"typical_p\": 1", NULL },
		{ TGI, "\"max_new_tokens\": 0", "max_new_tokens" },
		{ TGI, "\"max_new_tokens\": -3", "max_new_tokens" },
		{ TGI, "\"truncate\": 0", "truncate" }, { TGI, "\"truncate\": 1.5", "truncate" },
		{ TGI, "\"truncate\": null", NULL },
		{ TGI, "\"top_n_tokens\": 21", "top_n_tokens" },
		{ TGI, "\"top_n_tokens\": -1", "top_n_tokens" },
		{ TGI, "\"top_n_tokens\": 20", NULL },
		{ TGI, "\"best_of\": 0", "best_of" }, { TGI, "\"best_of\": 9", "best_of" },
		{ TGI, "\"seed\": -1", "seed" }, { TGI, "\"seed\": 1.5", "seed" },
		{ TGI, "\"seed\": 0", NULL },
		{ TGI, "\"do_sample\": 1", "do_sample" }, { TGI, "\"details\": \"y\"", "details" },
		{ TGI, "\"return_full_text\": 1", "return_full_text" },
		{ TGI, "\"watermark\": true", "watermark" },
		{ TGI, "\"grammar\": {\"type\": \"json\", \"value\": {}}", NULL },
		{ TGI, "\"grammar\": {\"type\": \"regex\", \"value\": \"[0-9]+\"}", NULL },
		{ TGI, "\"grammar\": {\"type\": \"regex\", \"value\": \"(a\"}", "grammar.value" },
		{ TGI, "\"grammar\": {\"type\": \"regex\", \"value\": 5}", "grammar.value" },
		{ TGI, "\"grammar\": {\"type\": \"xml\", \"value\": \"a\"}", "grammar" },
		{ TGI, "\"grammar\": {\"type\": \"json\", \"value\": {\"multipleOf\": 2}}",
		  "grammar.value" },
		{ TGI, "\"adapter_id\": \"lora\"", "adapter_id" },
		{ TGI, "\"deadline_ms\": 0", "deadline_ms" }, { TGI, "\"deadline_ms\": 250", NULL },
		{ TGI, "\"stop\": \"x\"", "stop" }, /* TGI: a list */
		{ TGI, "\"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]", "stop" },
		{ TGI, "\"stop\": [\"\"]", "stop" }, { TGI, "\"stop\": [1]", "stop" },
		/* best_of > 1: sampling, no seed, not streamed (validation.rs, server.rs) */
		{ TGI, "\"best_of\": 2", "best_of" },
		{ TGI, "\"best_of\": 2, \"do_sample\": false, \"temperature\": 1.0", NULL },
		{ TGI, "\"best_of\": 2, \"do_sample\": true", NULL },
		{ TGI, "\"best_of\": 2, \"do_sample\": true, \"seed\": 3", "seed" },
		{ TGIS, "\"best_of\": 2, \"do_sample\": true", "best_of" },
		{ TGIS, "\"decoder_input_details\": true", "decoder_input_details" },
		{ TGI, "\"decoder_input_details\": true", NULL },
		/* unknown keys are ignored, as serde does */
		{ TGI, "\"presence_penalty\": 99, \"whatever\": [1]", NULL },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_range(&cases[i], __LINE__ * 1000 + (int)i);
	OK(TGI, "{\"inputs\": \"x\", \"stream\": true, \"unknown\": {}}");
	BAD(TGI, "{\"parameters\": {}}", 400, "inputs");
	BAD(TGI, "{\"inputs\": \"\"}", 400, "inputs");
	BAD(TGI, "{\"inputs\": [\"a\"]}", 400, "inputs");
	BAD(TGI, "{\"inputs\": \"x\", \"parameters\": 5}", 400, "parameters");
}

/* ---- keys ---------------------------------------------------------------------------------- */

static void test_unknown_and_unsupported(void **state)
{
	static const char *msg = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]";
	char body[512];
	static const struct {
		const char *field, *param; /* param NULL: accepted */
	} chat[] = {
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", NULL },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f g\"}}]",
		  "tools[0]" },
		{ "\"tools\": {}", "tools" },
		{ "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
		  "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}",
		  "tool_choice.function.name" },
		{ "\"tools\": null", NULL }, { "\"tools\": []", NULL },
		{ "\"tool_choice\": \"auto\"", "tool_choice" }, { "\"tool_choice\": \"none\"", NULL },
		{ "\"functions\": [{\"name\": \"f\"}]", "functions" },
		{ "\"function_call\": \"auto\"", "function_call" },
		{ "\"function_call\": null", NULL },
		{ "\"response_format\": {\"type\": \"json_object\"}", NULL },
		{ "\"response_format\": {\"type\": \"xml\"}", "response_format" },
		{ "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "
		  "\"a\", \"schema\": {\"type\": \"integer\"}, \"strict\": true}}", NULL },
		{ "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
		  "{\"type\": \"integer\", \"multipleOf\": 2}}}",
		  "response_format.json_schema.schema" },
		{ "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": 3}",
		  "response_format.json_schema" },
		{ "\"guided_regex\": \"a|b\"", NULL },
		{ "\"guided_regex\": \"a(\"", "guided_regex" },
		{ "\"guided_regex\": \"\\\\1\"", "guided_regex" },
		{ "\"guided_choice\": [\"x\", \"y\"]", NULL },
		{ "\"guided_choice\": []", "guided_choice" },
		{ "\"guided_choice\": [1]", "guided_choice" },
		{ "\"guided_json\": {\"type\": \"object\"}", NULL },
		{ "\"guided_json\": \"{not json\"", "guided_json" },
		{ "\"guided_grammar\": \"root ::= x\"", "guided_grammar" },
		{ "\"guided_regex\": \"a\", \"guided_choice\": [\"a\"]", "guided_choice" },
		{ "\"structured_outputs\": {\"regex\": \"[a-z]+\"}", NULL },
		{ "\"structured_outputs\": {\"grammar\": \"x\"}", "structured_outputs" },
		{ "\"structured_outputs\": {\"choice\": [\"a\"], \"json\": {}}",
		  "structured_outputs.json" },
		{ "\"response_format\": {\"type\": \"text\"}", NULL },
		{ "\"audio\": {\"voice\": \"alloy\", \"format\": \"wav\"}", "audio" },
		{ "\"audio\": null", NULL },
		{ "\"modalities\": [\"text\", \"audio\"]", "modalities" },
		{ "\"modalities\": [\"text\"]", NULL },
		{ "\"prediction\": {\"type\": \"content\", \"content\": \"x\"}", "prediction" },
		{ "\"parallel_tool_calls\": true", NULL },
		{ "\"echo\": true", "echo" },       /* completions' key */
		{ "\"best_of\": 2", "best_of" },    /* completions' key */
		{ "\"prompt\": \"x\"", "prompt" },
		{ "\"frobnicate\": 1", "frobnicate" },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(chat) / sizeof(chat[0]); i++) {
		snprintf(body, sizeof(body), "{%s, %s}", msg, chat[i].field);
		if (chat[i].param)
			refused_n(CHAT, body, strlen(body), 400, chat[i].param, (int)i);
		else if (parse(CHAT, body) != RG_OK)
			fail_msg("refused %s: %s", body, g_err.msg);
	}
	BAD(CMP, "{\"prompt\": \"x\", \"normalise\": true}", 400, "normalise");
	BAD(CMP, "{\"prompt\": \"x\", \"messages\": []}", 400, "messages");
	BAD(CMP, "{\"prompt\": \"x\", \"max_completion_tokens\": 5}", 400,
	    "max_completion_tokens");
	BAD(CMP, "{\"prompt\": \"x\", \"tools\": null}", 400, "tools"); /* chat's key */
	/* "suffix" (fill-in-the-middle): kept on completions ("" and null: none), refused on
	 * chat, a string only */
	OK(CMP, "{\"prompt\": \"x\", \"suffix\": \"end\"}");
	assert_non_null(g_req.suffix);
	assert_string_equal(g_req.suffix, "end");
	OK(CMP, "{\"prompt\": \"x\", \"suffix\": null}");
	assert_null(g_req.suffix);
	OK(CMP, "{\"prompt\": \"x\", \"suffix\": \"\"}");
	assert_null(g_req.suffix);
	BAD(CMP, "{\"prompt\": \"x\", \"suffix\": 3}", 400, "suffix");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"suffix\": \"e\"}",
	    400, "suffix");
}

static void test_stream_rules(void **state)
{
	(void)state;
	BAD(CMP, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 400,
	    "stream_options");
	BAD(CMP, "{\"prompt\": \"x\", \"stream\": false, \"stream_options\": {}}", 400,
	    "stream_options");
	OK(CMP, "{\"prompt\": \"x\", \"stream_options\": null}");
	assert_false(g_req.include_usage);
	OK(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": true, "
		 "\"stream_options\": {\"include_usage\": true}}");
	assert_true(g_req.stream);
	assert_true(g_req.include_usage);
	OK(CMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {}}");
	assert_false(g_req.include_usage);
	BAD(CMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": "
		 "{\"include_usage\": \"yes\"}}", 400, "stream_options");
	BAD(CMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"x\": 1}}", 400,
	    "stream_options");
	BAD(CMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}", 400,
	    "stream_options");
	/* best_of > 1 is not streamed */
	BAD(CMP, "{\"prompt\": \"x\", \"stream\": true, \"best_of\": 2}", 400, "best_of");
	OK(CMP, "{\"prompt\": \"x\", \"stream\": true, \"best_of\": 1}");
	OK(CMP, "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 4}");
	assert_int_equal(g_req.n, 2);
	assert_int_equal(g_req.best_of, 4);
}

static void test_chat_logprobs_and_max_tokens(void **state)
{
	static const char *m = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], ";
	char body[256];
	(void)state;
#define CHATB(rest) (snprintf(body, sizeof(body), "%s%s", m, rest), body)
	BAD(CHAT, CHATB("\"top_logprobs\": 2}"), 400, "top_logprobs");
	BAD(CHAT, CHATB("\"logprobs\": false, \"top_logprobs\": 2}"), 400, "top_logprobs");
	OK(CHAT, CHATB("\"logprobs\": true}"));
	assert_int_equal(g_req.logprobs, 0);
	OK(CHAT, CHATB("\"logprobs\": true, \"top_logprobs\": 4}"));
	assert_int_equal(g_req.logprobs, 4);
	OK(CHAT, CHATB("\"logprobs\": false}"));
	assert_int_equal(g_req.logprobs, -1);
	OK(CHAT, CHATB("\"max_tokens\": 9}"));
	assert_int_equal(g_req.max_tokens, 9);
	OK(CHAT, CHATB("\"max_completion_tokens\": 11}"));
	assert_int_equal(g_req.max_tokens, 11);
	OK(CHAT, CHATB("\"max_completion_tokens\": 11, \"max_tokens\": 11}"));
	assert_int_equal(g_req.max_tokens, 11);
	BAD(CHAT, CHATB("\"max_completion_tokens\": 11, \"max_tokens\": 12}"), 400,
	    "max_completion_tokens");
	BAD(CHAT, CHATB("\"max_completion_tokens\": 3, \"min_tokens\": 4}"), 400, "min_tokens");
	OK(CHAT, CHATB("\"min_tokens\": 400}")); /* no max_tokens: nothing to exceed */
	OK(CHAT, CHATB("\"add_generation_prompt\": false, \"n\": 3, \"stream\": true}"));
	assert_false(g_req.add_generation_prompt);
	assert_int_equal(g_req.n, 3);
#undef CHATB
	/* completions: logprobs is a count */
	OK(CMP, "{\"prompt\": \"x\", \"logprobs\": 0, \"echo\": true}");
	assert_int_equal(g_req.logprobs, 0);
	assert_true(g_req.echo);
	OK(CMP, "{\"prompt\": \"x\", \"logprobs\": null}");
	assert_int_equal(g_req.logprobs, -1);
}

/* vLLM's continue_final_message, chat_template and chat_template_kwargs (chat only) */
static void test_chat_template_fields(void **state)
{
	static const char *m = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], ";
	char body[512];
	(void)state;
#define CHATB(rest) (snprintf(body, sizeof(body), "%s%s", m, rest), body)
	OK(CHAT, CHATB("\"max_tokens\": 1}"));
	assert_false(g_req.continue_final_message);
	assert_null(g_req.chat_template);
	assert_int_equal(g_req.n_template_vars, 0);
	/* vLLM: both true is a 400 (add_generation_prompt defaults to true) */
	BAD(CHAT, CHATB("\"continue_final_message\": true}"), 400, "continue_final_message");
	BAD(CHAT, CHATB("\"continue_final_message\": 1, \"add_generation_prompt\": false}"), 400,
	    "continue_final_message");
	OK(CHAT, CHATB("\"continue_final_message\": true, \"add_generation_prompt\": false}"));
	assert_true(g_req.continue_final_message);
	assert_false(g_req.add_generation_prompt);
	OK(CHAT, CHATB("\"chat_template\": \"{{ x }}\"}"));
	assert_string_equal(g_req.chat_template, "{{ x }}");
	BAD(CHAT, CHATB("\"chat_template\": 3}"), 400, "chat_template");
	/* the kwargs' two flags override the fields, as vLLM merges them; other keys are kept */
	OK(CHAT, CHATB("\"chat_template_kwargs\": {\"add_generation_prompt\": false, "
		       "\"continue_final_message\": true, \"enable_thinking\": false, "
		       "\"date_string\": \"x\"}}"));
	assert_false(g_req.add_generation_prompt);
	assert_true(g_req.continue_final_message);
	assert_int_equal(g_req.n_template_vars, 2);
	assert_string_equal(g_req.template_vars[0], "enable_thinking");
	assert_string_equal(g_req.template_vars[1], "date_string");
	OK(CHAT, CHATB("\"chat_template_kwargs\": null}"));
	BAD(CHAT, CHATB("\"chat_template_kwargs\": [1]}"), 400, "chat_template_kwargs");
	BAD(CHAT, CHATB("\"chat_template_kwargs\": {\"x\": 1, \"add_generation_prompt\": 1}}"),
	    400, "chat_template_kwargs");
	BAD(CHAT, CHATB("\"chat_template_kwargs\": {\"continue_final_message\": true}}"), 400,
	    "continue_final_message");
#undef CHATB
	/* completions have none of them */
	BAD(CMP, "{\"prompt\": \"x\", \"continue_final_message\": true}", 400,
	    "continue_final_message");
	BAD(CMP, "{\"prompt\": \"x\", \"chat_template\": \"t\"}", 400, "chat_template");
}

static void test_sampling_options(void **state)
{
	(void)state;
	OK(CMP, "{\"prompt\": \"x\", \"temperature\": 0}");
	assert_false(g_req.do_sample);
	OK(CMP, "{\"prompt\": \"x\", \"temperature\": 0.7, \"top_p\": 0.9, \"top_k\": 40, "
		"\"min_p\": 0.05, \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, "
		"\"repetition_penalty\": 1.1, \"seed\": -5, \"ignore_eos\": true, "
		"\"skip_special_tokens\": false, \"min_tokens\": 2, \"max_tokens\": 30, "
		"\"priority\": -3, \"deadline_ms\": 500, \"tpot_ms\": 25.5, \"user\": \"me\", "
		"\"model\": \"gpt2\"}");
	assert_true(g_req.do_sample);
	assert_true(g_req.temperature == 0.7f && g_req.top_p == 0.9f && g_req.top_k == 40);
	assert_true(g_req.min_p == 0.05f);
	assert_true(g_req.presence_penalty == 0.5f && g_req.frequency_penalty == -0.5f);
	assert_true(g_req.repetition_penalty == 1.1f);
	assert_true(g_req.has_seed);
	assert_true(g_req.seed == (uint64_t)(int64_t)-5);
	assert_true(g_req.ignore_eos);
	assert_false(g_req.skip_special_tokens);
	assert_int_equal(g_req.min_tokens, 2);
	assert_int_equal(g_req.max_tokens, 30);
	assert_int_equal(g_req.priority, -3);
	assert_true(g_req.deadline_ms == 500 && g_req.tpot_ms == 25.5);
	assert_string_equal(g_req.user, "me");
	assert_string_equal(g_req.model, "gpt2");
	OK(CMP, "{\"prompt\": \"x\", \"top_k\": -1}");
	assert_int_equal(g_req.top_k, 0); /* vLLM: -1 is off */
	/* beam search (vLLM's _verify_beam_search) */
	OK(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"best_of\": 4, "
		"\"length_penalty\": 0.8, \"early_stopping\": \"never\"}");
	assert_true(g_req.use_beam_search);
	assert_false(g_req.do_sample);
	assert_true(g_req.temperature == 0);
	assert_true(g_req.length_penalty == 0.8f);
	assert_int_equal(g_req.early_stopping, 2);
	OK(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"early_stopping\": true, "
		"\"temperature\": 0, \"top_p\": 1, \"top_k\": -1, \"min_p\": 0}");
	assert_int_equal(g_req.early_stopping, 1);
	BAD(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"temperature\": 0.5}", 400,
	    "temperature");
	BAD(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"top_p\": 0.5}", 400, "top_p");
	BAD(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"top_k\": 5}", 400, "top_k");
	BAD(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"min_p\": 0.1}", 400, "min_p");
	BAD(CMP, "{\"prompt\": \"x\", \"length_penalty\": 2}", 400, "length_penalty");
	BAD(CMP, "{\"prompt\": \"x\", \"early_stopping\": true}", 400, "early_stopping");
	BAD(CMP, "{\"prompt\": \"x\", \"use_beam_search\": true, \"early_stopping\": \"x\"}",
	    400, "early_stopping");
	/* stop strings */
	OK(CMP, "{\"prompt\": \"x\", \"stop\": \"\\n\\n\"}");
	assert_int_equal(g_req.n_stop, 1);
	assert_string_equal(g_req.stop[0], "\n\n");
	OK(CMP, "{\"prompt\": \"x\", \"stop\": [\"a\", \"\\u00e9\", \"c\", \"d\"]}");
	assert_int_equal(g_req.n_stop, 4);
	assert_string_equal(g_req.stop[1], "\xc3\xa9");
	OK(CMP, "{\"prompt\": \"x\", \"stop\": []}");
	assert_int_equal(g_req.n_stop, 0);
	BAD(CMP, "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, "stop");
	BAD(CMP, "{\"prompt\": \"x\", \"stop\": \"\"}", 400, "stop");
	BAD(CMP, "{\"prompt\": \"x\", \"stop\": [\"a\", 3]}", 400, "stop");
	BAD(CMP, "{\"prompt\": \"x\", \"stop\": [\"a\\u0000b\"]}", 400, "stop");
	BAD(CMP, "{\"prompt\": \"x\", \"stop\": 3}", 400, "stop");
	/* stop_token_ids */
	OK(CMP, "{\"prompt\": \"x\", \"stop_token_ids\": [0, 999]}");
	assert_int_equal(g_req.n_stop_token_ids, 2);
	assert_int_equal(g_req.stop_token_ids[1], 999);
	BAD(CMP, "{\"prompt\": \"x\", \"stop_token_ids\": [1000]}", 400, "stop_token_ids");
	BAD(CMP, "{\"prompt\": \"x\", \"stop_token_ids\": [-1]}", 400, "stop_token_ids");
	BAD(CMP, "{\"prompt\": \"x\", \"stop_token_ids\": 5}", 400, "stop_token_ids");
	/* logit_bias: decimal token ids -> [-100, 100] */
	OK(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 10, \"999\": -100, \"0\": 2.5}}");
	assert_int_equal(g_req.n_bias, 3);
	for (int i = 0; i < 3; i++) {
		if (g_req.bias_ids[i] == 5)
			assert_true(g_req.bias_values[i] == 10.0f);
		else if (g_req.bias_ids[i] == 999)
			assert_true(g_req.bias_values[i] == -100.0f);
		else if (g_req.bias_ids[i] == 0)
			assert_true(g_req.bias_values[i] == 2.5f);
		else
			fail_msg("unexpected bias id %d", g_req.bias_ids[i]);
	}
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"1000\": 1}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 1}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"\": 1}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 100.5}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"1\"}}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": [1]}", 400, "logit_bias");
	BAD(CMP, "{\"prompt\": \"x\", \"logit_bias\": {\"99999999999999999999\": 1}}", 400,
	    "logit_bias");
}

/* ---- prompts, messages, UTF-8, limits ------------------------------------------------------ */

static void test_prompt_shapes(void **state)
{
	(void)state;
	OK(CMP, "{\"prompt\": [\"a\", \"bc\"]}");
	assert_int_equal(g_req.n_prompts, 2);
	assert_string_equal(g_req.texts[1], "bc");
	assert_int_equal(g_req.text_lens[1], 2);
	assert_null(g_req.ids[1]);
	OK(CMP, "{\"prompt\": [1, 2, 999]}");
	assert_int_equal(g_req.n_prompts, 1);
	assert_null(g_req.texts[0]);
	assert_int_equal(g_req.n_ids[0], 3);
	assert_int_equal(g_req.ids[0][2], 999);
	OK(CMP, "{\"prompt\": [[1], [2, 3], [4, 5, 6], [7]]}"); /* max_prompts 4 */
	assert_int_equal(g_req.n_prompts, 4);
	assert_int_equal(g_req.n_ids[2], 3);
	assert_int_equal(g_req.ids[2][0], 4);
	assert_int_equal(g_req.ids[3][0], 7);
	OK(CMP, "{\"prompt\": \"a\\u0000b\"}"); /* inner NUL kept: text_lens says 3 */
	assert_int_equal(g_req.text_lens[0], 3);
	BAD(CMP, "{\"prompt\": []}", 400, "prompt");
	BAD(CMP, "{\"prompt\": [[]]}", 400, "prompt[0]");
	BAD(CMP, "{\"prompt\": [[1], []]}", 400, "prompt[1]");
	BAD(CMP, "{\"prompt\": \"\"}", 400, "prompt");
	BAD(CMP, "{\"prompt\": [\"a\", \"\"]}", 400, "prompt[1]");
	BAD(CMP, "{\"prompt\": [\"a\", [1]]}", 400, "prompt[1]");
	BAD(CMP, "{\"prompt\": [[1], \"a\"]}", 400, "prompt[1]");
	BAD(CMP, "{\"prompt\": [1, \"a\"]}", 400, "prompt");
	BAD(CMP, "{\"prompt\": [1, 1000]}", 400, "prompt");
	BAD(CMP, "{\"prompt\": [-1]}", 400, "prompt");
	BAD(CMP, "{\"prompt\": [[1], [1000]]}", 400, "prompt[1]");
	BAD(CMP, "{\"prompt\": [1.5]}", 400, "prompt[0]");
	BAD(CMP, "{\"prompt\": 5}", 400, "prompt");
	BAD(CMP, "{\"prompt\": null}", 400, "prompt");
	BAD(CMP, "{\"model\": \"m\"}", 400, "prompt");
	/* more prompts than the limit: 413 */
	BAD(CMP, "{\"prompt\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 413, "prompt");
	BAD(CMP, "{\"prompt\": [[1], [2], [3], [4], [5]]}", 413, "prompt");
	OK(CMP, "{\"prompt\": [1, 2, 3, 4, 5, 6, 7]}"); /* one prompt of ids */
}

/* tools / tool_choice: the choice, the grammar vLLM's schemas give, and the answers' shapes
 * (OpenAI's ChatCompletionMessageToolCall and its stream delta). */
static void test_tools(void **state)
{
	static const char *T = "\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
			       "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
			       "\"add\", \"parameters\": {\"type\": \"object\", \"properties\": "
			       "{\"a\": {\"type\": \"integer\"}}}}}, {\"type\": \"function\", "
			       "\"function\": {\"name\": \"now\"}}]";
	const rg_tool_call calls[] = {{"add", "{\"a\": 1}"}, {"now", "{}"}};
	rg_gen_answer_ctx ctx = {.api = RG_GEN_API_CHAT, .id = "chatcmpl-00ff", .model = "m"};
	rg_gen_choice ch = {.index = 0, .text = "", .finish = RG_GEN_FINISH_TOOL_CALLS,
			    .tools = true, .calls = calls, .n_calls = 2};
	char body[1024];
	rg_buf b;

	(void)state;
	snprintf(body, sizeof(body), "{%s}", T);
	OK(CHAT, body);
	assert_int_equal(g_req.tool_choice, RG_GEN_TOOL_AUTO);
	assert_int_equal(g_req.grammar_kind, RG_GRAMMAR_NONE);
	assert_non_null(strstr(g_req.tools, "\"name\":\"now\""));
	snprintf(body, sizeof(body), "{%s, \"tool_choice\": \"none\"}", T);
	OK(CHAT, body);
	assert_int_equal(g_req.tool_choice, RG_GEN_TOOL_NONE);
	assert_non_null(g_req.tools);  /* still rendered, as vLLM */
	snprintf(body, sizeof(body), "{%s, \"tool_choice\": \"required\", "
		 "\"parallel_tool_calls\": false}", T);
	OK(CHAT, body);
	assert_int_equal(g_req.tool_choice, RG_GEN_TOOL_REQUIRED);
	assert_int_equal(g_req.grammar_kind, RG_GRAMMAR_JSON_SCHEMA);
	assert_non_null(strstr(g_req.grammar, "\"minItems\":1,\"maxItems\":1"));
	assert_non_null(strstr(g_req.grammar, "\"enum\":[\"now\"]"));
	snprintf(body, sizeof(body), "{%s, \"tool_choice\": {\"type\": \"function\", "
		 "\"function\": {\"name\": \"add\"}}}", T);
	OK(CHAT, body);
	assert_int_equal(g_req.tool_choice, RG_GEN_TOOL_NAMED);
	assert_string_equal(g_req.tool_name, "add");
	assert_string_equal(g_req.grammar, "{\"type\":\"object\",\"properties\":{\"a\":"
			    "{\"type\":\"integer\"}}}");
	snprintf(body, sizeof(body), "{%s, \"tool_choice\": {\"type\": \"function\", "
		 "\"function\": {\"name\": \"now\"}}}", T);
	OK(CHAT, body);
	assert_int_equal(g_req.grammar_kind, RG_GRAMMAR_JSON_OBJECT);
	snprintf(body, sizeof(body), "{%s, \"tool_choice\": \"required\", \"guided_regex\": "
		 "\"a\"}", T);
	BAD(CHAT, body, 400, "tool_choice");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
		  "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}",
	    400, "tool_choice");
	/* answers */
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &ctx, &ch, 1, NULL, false, 0);
	assert_false(b.oom);
	assert_non_null(strstr(b.data, "\"message\":{\"role\":\"assistant\",\"content\":null,"
				       "\"tool_calls\":[{\"id\":\"call_00ff0000\",\"type\":"
				       "\"function\",\"function\":{\"name\":\"add\",\"arguments\":"
				       "\"{\\\"a\\\": 1}\"}},{\"id\":\"call_00ff0001\""));
	assert_non_null(strstr(b.data, "\"finish_reason\":\"tool_calls\""));
	b.len = 0;
	rg_gen_answer_tool_event(&b, &ctx, 0, 1, "call_x", "now", NULL, 0);
	assert_non_null(strstr(b.data, "\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":"
				       "\"call_x\",\"type\":\"function\",\"function\":{\"name\":"
				       "\"now\",\"arguments\":\"\"}}]}"));
	b.len = 0;
	rg_gen_answer_tool_event(&b, &ctx, 0, 1, NULL, NULL, "{\"a\"", 4);
	assert_non_null(strstr(b.data, "{\"tool_calls\":[{\"index\":1,\"function\":"
				       "{\"arguments\":\"{\\\"a\\\"\"}}]}"));
	assert_non_null(strstr(b.data, "\"finish_reason\":null}]}\n\n"));
	rg_buf_free(&b);
}

static void test_messages(void **state)
{
	(void)state;
	OK(CHAT, "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, "
		 "{\"role\": \"developer\", \"content\": \"D\"}, "
		 "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"ab\"}, "
		 "{\"type\": \"text\", \"text\": \"c\\u00e9\"}], \"name\": \"bob\"}, "
		 "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}, "
		 "{\"role\": \"assistant\"}, "
		 "{\"role\": \"tool\", \"content\": \"\", \"tool_call_id\": \"t1\"}]}");
	assert_int_equal(g_req.n_messages, 6);
	assert_string_equal(g_req.messages[0].role, "system");
	assert_string_equal(g_req.messages[1].role, "developer");
	assert_string_equal(g_req.messages[2].content, "abc\xc3\xa9");
	assert_int_equal(g_req.messages[2].content_len, 5);
	assert_string_equal(g_req.messages[3].role, "assistant");
	assert_string_equal(g_req.messages[3].content, "");
	assert_int_equal(g_req.messages[3].content_len, 0);
	assert_string_equal(g_req.messages[4].content, "");
	assert_string_equal(g_req.messages[5].role, "tool");
	assert_int_equal(g_req.messages[5].content_len, 0);
	OK(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": []}]}");
	assert_int_equal(g_req.messages[0].content_len, 0);
	BAD(CHAT, "{\"messages\": []}", 400, "messages");
	BAD(CHAT, "{\"messages\": {}}", 400, "messages");
	BAD(CHAT, "{\"model\": \"m\"}", 400, "messages");
	BAD(CHAT, "{\"messages\": [5]}", 400, "messages[0]");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, "
		  "{\"role\": \"bot\", \"content\": \"y\"}]}", 400, "messages[1].role");
	BAD(CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"y\"}]}", 400,
	    "messages[0].role");
	BAD(CHAT, "{\"messages\": [{\"content\": \"y\"}]}", 400, "messages[0].role");
	BAD(CHAT, "{\"messages\": [{\"role\": 1, \"content\": \"y\"}]}", 400, "messages[0].role");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": null}]}", 400,
	    "messages[0].content");
	BAD(CHAT, "{\"messages\": [{\"role\": \"system\"}]}", 400, "messages[0].content");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400,
	    "messages[0].content");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", "
		  "\"image_url\": {\"url\": \"http://x\"}}]}]}", 400, "messages[0].content");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"a\"}]}]}", 400,
	    "messages[0].content");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
		  "\"text\": 1}]}]}", 400, "messages[0].content");
	OK(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
		 "[{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
		 "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"r\", "
		 "\"tool_call_id\": \"c\"}]}");
	assert_non_null(g_req.messages[0].tool_calls);
	assert_non_null(strstr(g_req.messages[0].tool_calls, "\"name\":\"f\""));
	assert_string_equal(g_req.messages[1].tool_call_id, "c");
	assert_null(g_req.messages[1].tool_calls);
	BAD(CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
		  "[{\"id\": \"c\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
		  "\"arguments\": {}}}]}]}", 400, "messages[0].tool_calls");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": "
		  "[]}]}", 400, "messages[0].tool_calls");
	BAD(CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400,
	    "messages[0].tool_call_id");
	/* max_messages 8: 9 is a 413 */
	OK(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"1\"}, {\"role\": \"user\", "
		 "\"content\": \"2\"}, {\"role\": \"user\", \"content\": \"3\"}, {\"role\": "
		 "\"user\", \"content\": \"4\"}, {\"role\": \"user\", \"content\": \"5\"}, "
		 "{\"role\": \"user\", \"content\": \"6\"}, {\"role\": \"user\", \"content\": "
		 "\"7\"}, {\"role\": \"user\", \"content\": \"8\"}]}");
	BAD(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"1\"}, {\"role\": \"user\", "
		  "\"content\": \"2\"}, {\"role\": \"user\", \"content\": \"3\"}, {\"role\": "
		  "\"user\", \"content\": \"4\"}, {\"role\": \"user\", \"content\": \"5\"}, "
		  "{\"role\": \"user\", \"content\": \"6\"}, {\"role\": \"user\", \"content\": "
		  "\"7\"}, {\"role\": \"user\", \"content\": \"8\"}, {\"role\": \"user\", "
		  "\"content\": \"9\"}]}", 413, "messages");
}

static void test_utf8_and_json(void **state)
{
	static const char bad_prompt[] = "{\"prompt\": \"a\xff" "b\"}";
	static const char bad_msg[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\"}]}";
	static const char bad_part[] = "{\"messages\": [{\"role\": \"user\", \"content\": "
				       "[{\"type\": \"text\", \"text\": \"\xed\xa0\x80\"}]}]}";
	static const char bad_stop[] = "{\"prompt\": \"x\", \"stop\": [\"\xc0\xaf\"]}";
	static const char bad_tgi[] = "{\"inputs\": \"\xf4\x90\x80\x80\"}";
	static const char bad_model[] = "{\"prompt\": \"x\", \"model\": \"\xfe\"}";
	static const char nul_body[] = "{\"prompt\": \"x\"}\0";
	(void)state;
	refused_n(CMP, bad_prompt, sizeof(bad_prompt) - 1, 400, "prompt", __LINE__);
	refused_n(CHAT, bad_msg, sizeof(bad_msg) - 1, 400, "messages[0].content", __LINE__);
	refused_n(CHAT, bad_part, sizeof(bad_part) - 1, 400, "messages[0].content", __LINE__);
	refused_n(CMP, bad_stop, sizeof(bad_stop) - 1, 400, "stop", __LINE__);
	refused_n(TGI, bad_tgi, sizeof(bad_tgi) - 1, 400, "inputs", __LINE__);
	refused_n(CMP, bad_model, sizeof(bad_model) - 1, 400, "model", __LINE__);
	/* escapes: a pair is one code point; a lone surrogate is refused as serde_json does */
	OK(CMP, "{\"prompt\": \"\\ud83d\\ude00\"}");
	assert_int_equal(g_req.text_lens[0], 4);
	assert_memory_equal(g_req.texts[0], "\xf0\x9f\x98\x80", 4);
	BAD(CMP, "{\"prompt\": \"\\ud83d x\"}", 400, "");
	BAD(TGI, "{\"inputs\": \"\\ude00\"}", 400, "");
	/* the body as a whole */
	BAD(CMP, "", 400, "");
	BAD(CMP, "{\"prompt\": \"x\"", 400, "");
	BAD(CMP, "{\"prompt\": \"x\"} {}", 400, "");
	BAD(CMP, "[\"prompt\"]", 400, "");
	/* json-c reads NaN even in strict mode: the range check refuses it */
	BAD(CMP, "{\"prompt\": \"x\", \"temperature\": NaN}", 400, "temperature");
	BAD(TGI, "{\"inputs\": \"x\", \"parameters\": {\"temperature\": NaN}}", 400,
	    "temperature");
	BAD(CMP, "{\"prompt\": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}", 400, "");
	refused_n(CMP, nul_body, sizeof(nul_body) - 1, 400, "", __LINE__);
	OK(CMP, "  {\"prompt\": \"x\"}\r\n\t ");
	/* a route that is not a generation route */
	rg_gen_request_free(&g_req); /* parse overwrites its output */
	assert_int_equal(rg_gen_request_parse((rg_gen_api)9, "{}", 2, &LIM, &g_req, &g_err),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(g_err.http_status, 400);
	rg_gen_request_free(&g_req);
}

/* ---- answers ------------------------------------------------------------------------------- */

/* RG_DUMP_GEN_ANSWERS=dir: dir/<name> gets the bytes of b. */
static void dump(const char *name, const rg_buf *b)
{
	const char *dir = getenv("RG_DUMP_GEN_ANSWERS");
	char path[1024];
	FILE *f;

	if (!dir || !*dir)
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (!(f = fopen(path, "wb")))
		fail_msg("cannot write %s", path);
	if (fwrite(b->data, 1, b->len, f) != b->len)
		fail_msg("short write to %s", path);
	fclose(f);
}

/* Parse a whole answer: valid UTF-8, one JSON object and nothing else. */
static json_object *parse_json(const char *s, size_t n)
{
	json_tokener *tok = json_tokener_new();
	json_object *o;

	assert_true(rg_utf8_valid(s, n));
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, s, (int)n);
	if (!o || json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != n)
		fail_msg("not one JSON value: %.*s", (int)n, s);
	json_tokener_free(tok);
	assert_true(json_object_is_type(o, json_type_object));
	return o;
}

/* The events of a stream: each exactly "data: " + one line of JSON + "\n\n"; returns the
 * parsed objects (n_out of them; "[DONE]" gives NULL). */
static int parse_events(const rg_buf *b, json_object **out, int max)
{
	size_t i = 0;
	int n = 0;

	assert_true(rg_utf8_valid(b->data, b->len));
	while (i < b->len) {
		const char *s = b->data + i, *end;

		assert_true(n < max);
		assert_true(b->len - i > 8);
		assert_memory_equal(s, "data: ", 6);
		end = strstr(s, "\n\n");
		assert_non_null(end);
		/* the JSON holds no raw newline: the event is one data line */
		assert_null(memchr(s, '\n', (size_t)(end - s)));
		if (end - s == 12 && !memcmp(s + 6, "[DONE]", 6))
			out[n++] = NULL;
		else
			out[n++] = parse_json(s + 6, (size_t)(end - s - 6));
		i = (size_t)(end - b->data) + 2;
	}
	return n;
}

static json_object *get(json_object *o, const char *path)
{
	/* "a.b.0.c": keys and array indexes */
	char buf[256], *save = NULL, *k;

	snprintf(buf, sizeof(buf), "%s", path);
	for (k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) {
		if (json_object_is_type(o, json_type_array)) {
			o = json_object_array_get_idx(o, (size_t)atoi(k));
		} else if (!json_object_object_get_ex(o, k, &o)) {
			fail_msg("no %s (at %s) in %s", path, k, json_object_to_json_string(o));
			return NULL;
		}
		if (!o && strtok_r(NULL, ".", &save))
			fail_msg("%s: null before the end", path);
	}
	return o;
}

static void expect_str(json_object *o, const char *path, const char *want)
{
	json_object *v = get(o, path);

	if (!json_object_is_type(v, json_type_string) || strcmp(json_object_get_string(v), want))
		fail_msg("%s: got %s, want \"%s\"", path, json_object_to_json_string(v), want);
}

static void expect_null(json_object *o, const char *path)
{
	json_object *v = get(o, path);

	if (v)
		fail_msg("%s: got %s, want null", path, json_object_to_json_string(v));
}

static void expect_int(json_object *o, const char *path, long long want)
{
	json_object *v = get(o, path);

	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) != want)
		fail_msg("%s: got %s, want %lld", path, json_object_to_json_string(v), want);
}

static void expect_num(json_object *o, const char *path, double want)
{
	json_object *v = get(o, path);

	if (!(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) ||
	    !(fabs(json_object_get_double(v) - want) <= 1e-6 * fabs(want)))
		fail_msg("%s: got %s, want %.9g", path, json_object_to_json_string(v), want);
}

static void expect_bool(json_object *o, const char *path, bool want)
{
	json_object *v = get(o, path);

	if (!json_object_is_type(v, json_type_boolean) || json_object_get_boolean(v) != want)
		fail_msg("%s: got %s, want %s", path, json_object_to_json_string(v),
			 want ? "true" : "false");
}

static size_t len_of(json_object *o, const char *path)
{
	json_object *v = get(o, path);

	if (json_object_is_type(v, json_type_array))
		return json_object_array_length(v);
	if (json_object_is_type(v, json_type_object))
		return (size_t)json_object_object_length(v);
	fail_msg("%s is not an array or object", path);
	return 0;
}

/* Tokens for the answers: "Hel" "lo" and a byte-level token that is half of "€" (E2 82 AC),
 * plus alternatives; one logprob is -inf. */
static const rg_gen_tok TOP0[2] = { { 9, "Hel", 3, -0.25f, false }, { 7, "He", 2, -1.5f, false } };
static const rg_gen_tok TOP1[2] = { { 11, "lo", 2, -0.5f, false }, { 12, "\xe2\x82", 2, -INFINITY,
									  false } };
static const rg_gen_lp LPS[3] = {
	{ { 9, "Hel", 3, -0.25f, false }, 2, TOP0, 0 },
	{ { 12, "\xe2\x82", 2, -INFINITY, false }, 2, TOP1, 0 },
	{ { 2, "</s>", 4, -0.125f, true }, 0, NULL, 0 },
};
static const size_t OFFS[3] = { 0, 3, 5 };

static const rg_gen_answer_ctx CTX_CMP = { CMP, "cmpl-abc", 1700000000, "tiny", "fp_1", 0, false, false };
static const rg_gen_answer_ctx CTX_CHAT = { CHAT, "chatcmpl-abc", 1700000001, "tiny", NULL, 0, false, false };
static const rg_gen_answer_ctx CTX_TGI = { TGI, NULL, 0, NULL, NULL, 0, false, false };
static const rg_gen_answer_ctx CTX_TGIS = { TGIS, NULL, 0, NULL, NULL, 6, false, false };

static void test_answer_completions(void **state)
{
	rg_gen_choice c[2] = {
		{ .index = 0, .text = "Hel\xe2\x82</s>", .text_len = 9,
		  .finish = RG_GEN_FINISH_STOP, .stop_str = "\n\n", .lps = LPS, .n_lps = 3,
		  .text_offset = OFFS, .n_generated = 3 },
		{ .index = 1, .text = "ab\"\\\n\x01", .text_len = 6, .finish = RG_GEN_FINISH_LENGTH,
		  .n_generated = 16 },
	};
	rg_gen_usage u = { 5, 19, 2 };
	rg_buf b;
	json_object *o;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_CMP, c, 2, &u, false, 0);
	assert_false(b.oom);
	dump("completion__logprobs.json", &b);
	o = parse_json(b.data, b.len);
	expect_str(o, "id", "cmpl-abc");
	expect_str(o, "object", "text_completion");
	expect_int(o, "created", 1700000000);
	expect_str(o, "model", "tiny");
	expect_str(o, "system_fingerprint", "fp_1");
	assert_int_equal(len_of(o, "choices"), 2);
	expect_int(o, "choices.0.index", 0);
	/* the half "€" is one U+FFFD per stray byte */
	expect_str(o, "choices.0.text", "Hel\xef\xbf\xbd\xef\xbf\xbd</s>");
	expect_str(o, "choices.0.finish_reason", "stop");
	expect_str(o, "choices.0.stop_reason", "\n\n");
	expect_str(o, "choices.0.logprobs.tokens.0", "Hel");
	expect_str(o, "choices.0.logprobs.tokens.1", "\xef\xbf\xbd\xef\xbf\xbd");
	expect_str(o, "choices.0.logprobs.tokens.2", "</s>");
	expect_num(o, "choices.0.logprobs.token_logprobs.0", -0.25);
	expect_num(o, "choices.0.logprobs.token_logprobs.1", -9999.0); /* -inf, as vLLM */
	expect_num(o, "choices.0.logprobs.token_logprobs.2", -0.125);
	assert_int_equal(len_of(o, "choices.0.logprobs.top_logprobs"), 3);
	assert_int_equal(len_of(o, "choices.0.logprobs.top_logprobs.0"), 2);
	expect_num(o, "choices.0.logprobs.top_logprobs.0.Hel", -0.25);
	expect_num(o, "choices.0.logprobs.top_logprobs.0.He", -1.5);
	expect_num(o, "choices.0.logprobs.top_logprobs.1.lo", -0.5);
	expect_num(o, "choices.0.logprobs.top_logprobs.1.\xef\xbf\xbd\xef\xbf\xbd", -9999.0);
	assert_int_equal(len_of(o, "choices.0.logprobs.top_logprobs.2"), 0);
	expect_int(o, "choices.0.logprobs.text_offset.0", 0);
	expect_int(o, "choices.0.logprobs.text_offset.1", 3);
	expect_int(o, "choices.0.logprobs.text_offset.2", 5);
	expect_int(o, "choices.1.index", 1);
	expect_str(o, "choices.1.text", "ab\"\\\n\x01");
	expect_null(o, "choices.1.logprobs");
	expect_str(o, "choices.1.finish_reason", "length");
	expect_null(o, "choices.1.stop_reason");
	expect_int(o, "usage.prompt_tokens", 5);
	expect_int(o, "usage.completion_tokens", 19);
	expect_int(o, "usage.total_tokens", 24);
	expect_int(o, "usage.prompt_tokens_details.cached_tokens", 2);
	json_object_put(o);
	rg_buf_free(&b);

	/* text_offset NULL: the pieces' lengths summed */
	c[0].text_offset = NULL;
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_CMP, c, 1, &u, false, 0);
	o = parse_json(b.data, b.len);
	expect_int(o, "choices.0.logprobs.text_offset.2", 5);
	json_object_put(o);
	rg_buf_free(&b);
}

static void test_answer_chat(void **state)
{
	rg_gen_choice c[2] = {
		{ .index = 0, .text = "Hel\xe2\x82", .text_len = 5, .finish = RG_GEN_FINISH_EOS,
		  .lps = LPS, .n_lps = 2, .n_generated = 2 },
		{ .index = 1, .text = "", .text_len = 0, .finish = RG_GEN_FINISH_LENGTH,
		  .lps = LPS, .n_lps = 0 },
	};
	rg_gen_usage u = { 7, 2, 0 };
	rg_buf b;
	json_object *o;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_CHAT, c, 2, &u, false, 0);
	dump("chat__logprobs.json", &b);
	o = parse_json(b.data, b.len);
	expect_str(o, "id", "chatcmpl-abc");
	expect_str(o, "object", "chat.completion");
	expect_int(o, "created", 1700000001);
	expect_str(o, "model", "tiny");
	expect_null(o, "system_fingerprint");
	expect_int(o, "choices.0.index", 0);
	expect_str(o, "choices.0.message.role", "assistant");
	expect_str(o, "choices.0.message.content", "Hel\xef\xbf\xbd\xef\xbf\xbd");
	expect_str(o, "choices.0.finish_reason", "stop");
	expect_null(o, "choices.0.stop_reason");
	assert_int_equal(len_of(o, "choices.0.logprobs.content"), 2);
	expect_str(o, "choices.0.logprobs.content.0.token", "Hel");
	expect_num(o, "choices.0.logprobs.content.0.logprob", -0.25);
	assert_int_equal(len_of(o, "choices.0.logprobs.content.0.bytes"), 3);
	expect_int(o, "choices.0.logprobs.content.0.bytes.0", 'H');
	expect_int(o, "choices.0.logprobs.content.0.bytes.2", 'l');
	/* the raw bytes of the half character, not U+FFFD's */
	expect_str(o, "choices.0.logprobs.content.1.token", "\xef\xbf\xbd\xef\xbf\xbd");
	expect_num(o, "choices.0.logprobs.content.1.logprob", -9999.0);
	assert_int_equal(len_of(o, "choices.0.logprobs.content.1.bytes"), 2);
	expect_int(o, "choices.0.logprobs.content.1.bytes.0", 0xe2);
	expect_int(o, "choices.0.logprobs.content.1.bytes.1", 0x82);
	assert_int_equal(len_of(o, "choices.0.logprobs.content.0.top_logprobs"), 2);
	expect_str(o, "choices.0.logprobs.content.0.top_logprobs.1.token", "He");
	expect_num(o, "choices.0.logprobs.content.0.top_logprobs.1.logprob", -1.5);
	expect_int(o, "choices.0.logprobs.content.0.top_logprobs.1.bytes.1", 'e');
	expect_num(o, "choices.0.logprobs.content.1.top_logprobs.1.logprob", -9999.0);
	expect_int(o, "choices.0.logprobs.content.1.top_logprobs.1.bytes.0", 0xe2);
	expect_null(o, "choices.0.logprobs.refusal");
	expect_str(o, "choices.1.message.content", "");
	expect_str(o, "choices.1.finish_reason", "length");
	assert_int_equal(len_of(o, "choices.1.logprobs.content"), 0);
	expect_int(o, "usage.total_tokens", 9);
	expect_int(o, "usage.prompt_tokens_details.cached_tokens", 0);
	json_object_put(o);
	rg_buf_free(&b);

	/* no logprobs asked; usage absent is null */
	c[0].lps = NULL;
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_CHAT, c, 1, &u, false, 0);
	dump("chat__plain.json", &b);
	o = parse_json(b.data, b.len);
	expect_null(o, "choices.0.logprobs");
	assert_int_equal(len_of(o, "choices"), 1);
	json_object_put(o);
	rg_buf_free(&b);
}

static void test_answer_tgi(void **state)
{
	static const rg_gen_tok prefill[2] = { { 1, "<s>", 3, NAN, true },
					       { 5, "Hi", 2, -2.0f, false } };
	rg_gen_choice c[3] = {
		{ .text = "Hi Hel\xe2\x82", .text_len = 8, .finish = RG_GEN_FINISH_LENGTH,
		  .lps = LPS, .n_lps = 2, .n_generated = 2, .prefill = prefill, .n_prefill = 2,
		  .has_seed = true, .seed = UINT64_MAX },
		{ .text = "Hi x", .text_len = 4, .finish = RG_GEN_FINISH_EOS, .lps = LPS + 2,
		  .n_lps = 1, .n_generated = 1, .has_seed = true, .seed = 3 },
		{ .text = "Hi y", .text_len = 4, .finish = RG_GEN_FINISH_STOP, .lps = LPS,
		  .n_lps = 1, .n_generated = 1 },
	};
	rg_buf b;
	json_object *o;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_TGI, c, 1, NULL, false, 0);
	dump("tgi__plain.json", &b);
	o = parse_json(b.data, b.len);
	expect_str(o, "generated_text", "Hi Hel\xef\xbf\xbd\xef\xbf\xbd");
	expect_null(o, "details");
	assert_int_equal(json_object_object_length(o), 2);
	json_object_put(o);
	rg_buf_free(&b);

	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_TGI, c, 3, NULL, true, 2);
	dump("tgi__details.json", &b);
	o = parse_json(b.data, b.len);
	expect_str(o, "generated_text", "Hi Hel\xef\xbf\xbd\xef\xbf\xbd");
	expect_str(o, "details.finish_reason", "length");
	expect_int(o, "details.generated_tokens", 2);
	assert_true(json_object_get_uint64(get(o, "details.seed")) == UINT64_MAX);
	assert_int_equal(len_of(o, "details.prefill"), 2);
	expect_int(o, "details.prefill.0.id", 1);
	expect_str(o, "details.prefill.0.text", "<s>");
	expect_null(o, "details.prefill.0.logprob"); /* NaN: TGI writes null */
	expect_num(o, "details.prefill.1.logprob", -2.0);
	assert_int_equal(len_of(o, "details.tokens"), 2);
	expect_int(o, "details.tokens.0.id", 9);
	expect_str(o, "details.tokens.0.text", "Hel");
	expect_num(o, "details.tokens.0.logprob", -0.25);
	expect_bool(o, "details.tokens.0.special", false);
	expect_num(o, "details.tokens.1.logprob", -9999.0);
	assert_int_equal(len_of(o, "details.top_tokens"), 2);
	assert_int_equal(len_of(o, "details.top_tokens.0"), 2);
	expect_int(o, "details.top_tokens.0.1.id", 7);
	expect_str(o, "details.top_tokens.0.1.text", "He");
	expect_bool(o, "details.top_tokens.0.1.special", false);
	assert_int_equal(len_of(o, "details.best_of_sequences"), 2);
	expect_str(o, "details.best_of_sequences.0.generated_text", "Hi x");
	expect_str(o, "details.best_of_sequences.0.finish_reason", "eos_token");
	expect_int(o, "details.best_of_sequences.0.generated_tokens", 1);
	expect_int(o, "details.best_of_sequences.0.seed", 3);
	assert_int_equal(len_of(o, "details.best_of_sequences.0.prefill"), 0);
	expect_bool(o, "details.best_of_sequences.0.tokens.0.special", true);
	assert_int_equal(len_of(o, "details.best_of_sequences.0.top_tokens.0"), 0);
	expect_str(o, "details.best_of_sequences.1.finish_reason", "stop_sequence");
	expect_null(o, "details.best_of_sequences.1.seed");
	json_object_put(o);
	rg_buf_free(&b);

	/* details without top_n and one choice: no top_tokens, no best_of_sequences (TGI skips
	 * them when empty) */
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &CTX_TGI, c + 1, 1, NULL, true, 0);
	dump("tgi__details_eos.json", &b);
	o = parse_json(b.data, b.len);
	assert_false(json_object_object_get_ex(get(o, "details"), "top_tokens", NULL));
	assert_false(json_object_object_get_ex(get(o, "details"), "best_of_sequences", NULL));
	expect_str(o, "details.finish_reason", "eos_token");
	json_object_put(o);
	rg_buf_free(&b);
}

static void test_events_completions(void **state)
{
	json_object *ev[8];
	rg_gen_usage u = { 4, 3, 1 };
	rg_buf b;
	int n;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_CMP, 0, true, "Hel", 3, LPS, 1, true, RG_GEN_FINISH_NONE,
			    NULL, NULL, 0, 1, false, 0);
	rg_gen_answer_event(&b, &CTX_CMP, 0, false, "\xe2\x82", 2, LPS + 1, 2, true,
			    RG_GEN_FINISH_STOP, "</s>", "Hel\xe2\x82", 5, 3, false, 0);
	rg_gen_answer_usage_event(&b, &CTX_CMP, &u);
	rg_gen_answer_done_event(&b);
	dump("completion__stream.sse", &b);
	n = parse_events(&b, ev, 8);
	assert_int_equal(n, 4);
	expect_str(ev[0], "id", "cmpl-abc");
	expect_str(ev[0], "object", "text_completion");
	expect_int(ev[0], "created", 1700000000);
	expect_str(ev[0], "model", "tiny");
	expect_int(ev[0], "choices.0.index", 0);
	expect_str(ev[0], "choices.0.text", "Hel");
	expect_null(ev[0], "choices.0.finish_reason");
	expect_str(ev[0], "choices.0.logprobs.tokens.0", "Hel");
	expect_num(ev[0], "choices.0.logprobs.top_logprobs.0.He", -1.5);
	expect_str(ev[1], "choices.0.text", "\xef\xbf\xbd\xef\xbf\xbd");
	expect_str(ev[1], "choices.0.finish_reason", "stop");
	expect_str(ev[1], "choices.0.stop_reason", "</s>");
	assert_int_equal(len_of(ev[1], "choices.0.logprobs.tokens"), 2);
	expect_int(ev[1], "choices.0.logprobs.text_offset.1", 2); /* from the chunk's start */
	expect_num(ev[1], "choices.0.logprobs.token_logprobs.0", -9999.0);
	assert_int_equal(len_of(ev[2], "choices"), 0);
	expect_int(ev[2], "usage.prompt_tokens", 4);
	expect_int(ev[2], "usage.total_tokens", 7);
	expect_str(ev[2], "object", "text_completion");
	assert_null(ev[3]);
	for (int i = 0; i < 3; i++)
		json_object_put(ev[i]);
	rg_buf_free(&b);
	/* the exact framing of one event */
	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_CMP, 2, false, "x", 1, NULL, 0, false, RG_GEN_FINISH_NONE,
			    NULL, NULL, 0, 1, false, 0);
	assert_string_equal(b.data,
			    "data: {\"id\":\"cmpl-abc\",\"object\":\"text_completion\",\"created\":"
			    "1700000000,\"model\":\"tiny\",\"system_fingerprint\":\"fp_1\","
			    "\"choices\":[{\"index\":2,\"text\":\"x\",\"logprobs\":null,"
			    "\"finish_reason\":null,\"stop_reason\":null}]}\n\n");
	rg_buf_free(&b);
	rg_buf_init(&b);
	rg_gen_answer_done_event(&b);
	assert_string_equal(b.data, "data: [DONE]\n\n");
	rg_buf_free(&b);
}

static void test_events_chat(void **state)
{
	json_object *ev[8];
	rg_gen_usage u = { 4, 2, 0 };
	rg_buf b;
	int n;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_CHAT, 0, true, "", 0, NULL, 0, true, RG_GEN_FINISH_NONE, NULL,
			    NULL, 0, 0, false, 0);
	rg_gen_answer_event(&b, &CTX_CHAT, 0, false, "Hel", 3, LPS, 1, true, RG_GEN_FINISH_NONE,
			    NULL, NULL, 0, 1, false, 0);
	rg_gen_answer_event(&b, &CTX_CHAT, 0, false, "", 0, LPS + 1, 1, true,
			    RG_GEN_FINISH_NONE, NULL, NULL, 0, 2, false, 0);
	rg_gen_answer_event(&b, &CTX_CHAT, 0, false, "", 0, NULL, 0, true, RG_GEN_FINISH_LENGTH,
			    NULL, "Hel", 3, 2, false, 0);
	rg_gen_answer_usage_event(&b, &CTX_CHAT, &u);
	rg_gen_answer_done_event(&b);
	dump("chat__stream.sse", &b);
	n = parse_events(&b, ev, 8);
	assert_int_equal(n, 6);
	expect_str(ev[0], "object", "chat.completion.chunk");
	expect_str(ev[0], "id", "chatcmpl-abc");
	expect_null(ev[0], "system_fingerprint");
	expect_str(ev[0], "choices.0.delta.role", "assistant");
	expect_str(ev[0], "choices.0.delta.content", "");
	expect_null(ev[0], "choices.0.finish_reason");
	assert_int_equal(len_of(ev[0], "choices.0.logprobs.content"), 0);
	assert_false(json_object_object_get_ex(get(ev[1], "choices.0.delta"), "role", NULL));
	expect_str(ev[1], "choices.0.delta.content", "Hel");
	expect_str(ev[1], "choices.0.logprobs.content.0.token", "Hel");
	expect_num(ev[1], "choices.0.logprobs.content.0.top_logprobs.1.logprob", -1.5);
	assert_int_equal(len_of(ev[2], "choices.0.delta"), 0); /* an empty delta is {} */
	expect_int(ev[2], "choices.0.logprobs.content.0.bytes.0", 0xe2);
	expect_str(ev[3], "choices.0.finish_reason", "length");
	assert_int_equal(len_of(ev[4], "choices"), 0);
	expect_str(ev[4], "object", "chat.completion.chunk");
	expect_int(ev[4], "usage.completion_tokens", 2);
	expect_int(ev[4], "usage.total_tokens", 6);
	assert_null(ev[5]);
	for (int i = 0; i < 5; i++)
		json_object_put(ev[i]);
	rg_buf_free(&b);
	/* want_logprobs false: logprobs null */
	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_CHAT, 1, false, "a", 1, LPS, 1, false, RG_GEN_FINISH_EOS, NULL,
			    NULL, 0, 1, false, 0);
	n = parse_events(&b, ev, 8);
	expect_null(ev[0], "choices.0.logprobs");
	expect_int(ev[0], "choices.0.index", 1);
	expect_str(ev[0], "choices.0.finish_reason", "stop");
	json_object_put(ev[0]);
	rg_buf_free(&b);
}

static void test_events_tgi(void **state)
{
	json_object *ev[8];
	rg_buf b;
	int n;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_TGIS, 0, true, "Hel", 3, LPS, 1, true, RG_GEN_FINISH_NONE,
			    NULL, NULL, 0, 1, true, 42);
	rg_gen_answer_event(&b, &CTX_TGIS, 0, false, "", 0, LPS + 1, 1, true, RG_GEN_FINISH_NONE,
			    NULL, NULL, 0, 2, true, 42);
	rg_gen_answer_event(&b, &CTX_TGIS, 0, false, "\xe2\x82", 2, LPS + 2, 1, true,
			    RG_GEN_FINISH_EOS, NULL, "Hel\xe2\x82", 5, 3, true, 42);
	dump("tgi__stream.sse", &b);
	n = parse_events(&b, ev, 8);
	assert_int_equal(n, 3);
	expect_int(ev[0], "index", 0);
	expect_int(ev[0], "token.id", 9);
	expect_str(ev[0], "token.text", "Hel");
	expect_num(ev[0], "token.logprob", -0.25);
	expect_bool(ev[0], "token.special", false);
	assert_int_equal(len_of(ev[0], "top_tokens"), 2);
	expect_str(ev[0], "top_tokens.1.text", "He");
	expect_null(ev[0], "generated_text");
	expect_null(ev[0], "details");
	expect_str(ev[1], "token.text", ""); /* the delta: incomplete UTF-8 waits */
	expect_num(ev[1], "token.logprob", -9999.0);
	expect_int(ev[2], "token.id", 2);
	expect_bool(ev[2], "token.special", true);
	assert_false(json_object_object_get_ex(ev[2], "top_tokens", NULL));
	expect_str(ev[2], "generated_text", "Hel\xef\xbf\xbd\xef\xbf\xbd");
	expect_str(ev[2], "details.finish_reason", "eos_token");
	expect_int(ev[2], "details.generated_tokens", 3);
	expect_int(ev[2], "details.seed", 42);
	expect_int(ev[2], "details.input_length", 6);
	for (int i = 0; i < n; i++)
		json_object_put(ev[i]);
	rg_buf_free(&b);
	/* an aborted stream: no details, then TGI's error event */
	rg_buf_init(&b);
	rg_gen_answer_event(&b, &CTX_TGIS, 0, false, "a", 1, LPS, 1, true, RG_GEN_FINISH_ABORT,
			    NULL, NULL, 0, 1, false, 0);
	rg_gen_answer_error_event(&b, TGIS, "overloaded", "server is draining \xff");
	dump("tgi__error.sse", &b);
	n = parse_events(&b, ev, 8);
	assert_int_equal(n, 2);
	expect_null(ev[0], "details");
	expect_null(ev[0], "generated_text");
	expect_str(ev[1], "error_type", "overloaded");
	assert_true(json_object_is_type(get(ev[1], "error"), json_type_string));
	for (int i = 0; i < n; i++)
		json_object_put(ev[i]);
	rg_buf_free(&b);
	/* TGI has no usage chunk */
	rg_buf_init(&b);
	rg_gen_answer_usage_event(&b, &CTX_TGIS, &(rg_gen_usage){ 1, 1, 0 });
	assert_int_equal(b.len, 0);
	rg_buf_free(&b);
}

static void test_error_event_and_finish_names(void **state)
{
	json_object *ev[2];
	rg_buf b;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_error_event(&b, CHAT, "server_error", "model failed: \"x\"");
	dump("chat__error.sse", &b);
	assert_int_equal(parse_events(&b, ev, 2), 1);
	expect_str(ev[0], "error.message", "model failed: \"x\"");
	expect_str(ev[0], "error.type", "server_error");
	expect_null(ev[0], "error.param");
	json_object_put(ev[0]);
	rg_buf_free(&b);

	assert_null(rg_gen_finish_name(CMP, RG_GEN_FINISH_NONE));
	assert_string_equal(rg_gen_finish_name(CMP, RG_GEN_FINISH_EOS), "stop");
	assert_string_equal(rg_gen_finish_name(CHAT, RG_GEN_FINISH_STOP), "stop");
	assert_string_equal(rg_gen_finish_name(CHAT, RG_GEN_FINISH_LENGTH), "length");
	assert_string_equal(rg_gen_finish_name(CMP, RG_GEN_FINISH_ABORT), "abort");
	assert_null(rg_gen_finish_name(TGI, RG_GEN_FINISH_NONE));
	assert_string_equal(rg_gen_finish_name(TGI, RG_GEN_FINISH_EOS), "eos_token");
	assert_string_equal(rg_gen_finish_name(TGIS, RG_GEN_FINISH_STOP), "stop_sequence");
	assert_string_equal(rg_gen_finish_name(TGI, RG_GEN_FINISH_LENGTH), "length");
	assert_null(rg_gen_finish_name(TGIS, RG_GEN_FINISH_ABORT));
}

/* Every answer stays valid UTF-8 JSON whatever bytes the pieces, texts and names hold. */
static void test_answers_any_bytes(void **state)
{
	char junk[256];
	rg_gen_tok top[1];
	rg_gen_lp lp[1];
	rg_gen_choice c;
	rg_gen_answer_ctx ctx;
	rg_buf b;
	json_object *ev[4];
	(void)state;

	for (int i = 0; i < 256; i++)
		junk[i] = (char)(255 - i);
	top[0] = (rg_gen_tok){ 1, junk, 256, NAN, false };
	lp[0] = (rg_gen_lp){ { 2, junk + 100, 156, -INFINITY, true }, 1, top, 0 };
	for (int api = 0; api < 5; api++) {
		json_object *o;

		ctx = (rg_gen_answer_ctx){ (rg_gen_api)api, junk + 1, -1, junk + 2, junk + 3, 1, false, false };
		/* the strings of ctx are NUL-terminated at junk[255] */
		c = (rg_gen_choice){ .text = junk, .text_len = 256, .finish = RG_GEN_FINISH_STOP,
				     .stop_str = junk + 5, .lps = lp, .n_lps = 1,
				     .prefill = top, .n_prefill = 1 };
		rg_buf_init(&b);
		rg_gen_answer_json(&b, &ctx, &c, 1, &(rg_gen_usage){ 0 }, true, 1);
		assert_false(b.oom);
		o = parse_json(b.data, b.len);
		json_object_put(o);
		rg_buf_free(&b);
		rg_buf_init(&b);
		rg_gen_answer_event(&b, &ctx, 0, true, junk, 256, lp, 1, true, RG_GEN_FINISH_LENGTH,
				    junk, junk, 256, 1, false, 0);
		rg_gen_answer_error_event(&b, (rg_gen_api)api, "t", junk);
		assert_int_equal(parse_events(&b, ev, 4), 2);
		json_object_put(ev[0]);
		json_object_put(ev[1]);
		rg_buf_free(&b);
	}
}

/* /translate (issue 29): inputs' shapes, HF's parameter names onto the shared fields, the
 * language codes kept for the route, the refusals (unknown keys, warpers without do_sample,
 * beam rules, stream). */
static void test_translate_parse(void **state)
{
	(void)state;
	OK(TRN, "{\"inputs\": \"Hello\"}");
	assert_int_equal(g_req.n_prompts, 1);
	assert_false(g_req.inputs_list);
	assert_false(g_req.do_sample);
	assert_false(g_req.stream);
	assert_int_equal(g_req.max_tokens, -1);
	assert_int_equal(g_req.logprobs, -1);
	assert_false(g_req.use_beam_search);
	OK(TRN, "{\"inputs\": [\"a\", \"b\"], \"parameters\": {\"max_new_tokens\": 7, "
		"\"num_beams\": 3, \"length_penalty\": 0.5, \"early_stopping\": \"never\", "
		"\"no_repeat_ngram_size\": 2, \"details\": true}}");
	assert_int_equal(g_req.n_prompts, 2);
	assert_true(g_req.inputs_list);
	assert_int_equal(g_req.max_tokens, 7);
	assert_true(g_req.use_beam_search);
	assert_int_equal(g_req.best_of, 3);
	assert_int_equal(g_req.n, 1);
	assert_true(g_req.length_penalty == 0.5f);
	assert_int_equal(g_req.early_stopping, 2);
	assert_int_equal(g_req.no_repeat_ngram_size, 2);
	assert_true(g_req.details);
	OK(TRN, "{\"inputs\": [5, 6, 0]}");
	assert_false(g_req.inputs_list);
	assert_int_equal(g_req.n_ids[0], 3);
	OK(TRN, "{\"inputs\": [[5, 0], [7, 8, 0]], \"stream\": false}");
	assert_true(g_req.inputs_list);
	OK(TRN, "{\"inputs\": \"x\", \"stream\": true, \"parameters\": {\"do_sample\": true, "
		"\"temperature\": 0.7, \"top_k\": 4, \"top_p\": 0.9, \"seed\": 5, "
		"\"stop\": \"zz\"}}");
	assert_true(g_req.stream && g_req.do_sample && g_req.has_seed);
	assert_int_equal(g_req.n_stop, 1);
	/* defaults given explicitly are fine without do_sample / beams */
	OK(TRN, "{\"inputs\": \"x\", \"parameters\": {\"temperature\": 1, \"early_stopping\": "
		"false, \"length_penalty\": 1, \"repetition_penalty\": 1.2}}");
	BAD(TRN, "{\"inputs\": \"\"}", 400, "inputs");
	BAD(TRN, "{\"inputs\": []}", 400, "inputs");
	BAD(TRN, "{}", 400, "inputs");
	BAD(TRN, "{\"inputs\": [\"a\", 3]}", 400, "inputs[1]");
	/* language codes: strings kept for the route (which checks them against the model) */
	OK(TRN, "{\"inputs\": \"x\", \"src_lang\": \"en_XX\", \"parameters\": {\"tgt_lang\": "
		"\"de_DE\"}}");
	assert_string_equal(g_req.src_lang, "en_XX");
	assert_string_equal(g_req.tgt_lang, "de_DE");
	OK(TRN, "{\"inputs\": \"x\", \"tgt_lang\": \"fra_Latn\"}");
	assert_null(g_req.src_lang);
	assert_string_equal(g_req.tgt_lang, "fra_Latn");
	OK(CMP, "{\"prompt\": \"x\", \"src_lang\": \"en\", "
		"\"tgt_lang\": \"fr\"}");
	assert_string_equal(g_req.src_lang, "en");
	assert_string_equal(g_req.tgt_lang, "fr");
	BAD(TRN, "{\"inputs\": \"x\", \"src_lang\": \"en\", \"parameters\": {\"src_lang\": "
	    "\"en\"}}", 400, "src_lang");
	BAD(TRN, "{\"inputs\": \"x\", \"src_lang\": \"\"}", 400, "src_lang");
	BAD(TRN, "{\"inputs\": \"x\", \"src_lang\": 3}", 400, "src_lang");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"tgt_lang\": \"aaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}", 400, "tgt_lang");
	BAD(RG_GEN_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	    "\"tgt_lang\": \"fr\"}", 400, "tgt_lang");
	BAD(TRN, "{\"inputs\": \"x\", \"prompt\": \"y\"}", 400, "prompt");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"best_of\": 2}}", 400, "best_of");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"temperature\": 0.5}}", 400,
	    "temperature");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"top_k\": 3}}", 400, "top_k");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"length_penalty\": 2}}", 400,
	    "length_penalty");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"early_stopping\": true}}", 400,
	    "early_stopping");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"num_beams\": 2, \"do_sample\": true}}",
	    400, "num_beams");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"num_beams\": 9}}", 400, "num_beams");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"num_beams\": 2, \"stop\": [\"a\"]}}",
	    400, "stop");
	BAD(TRN, "{\"inputs\": \"x\", \"stream\": true, \"parameters\": {\"num_beams\": 2}}", 400,
	    "stream");
	BAD(TRN, "{\"inputs\": [\"x\", \"y\"], \"stream\": true}", 400, "inputs");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": [1]}", 400, "parameters");
	BAD(TRN, "{\"inputs\": \"x\", \"parameters\": {\"max_new_tokens\": 0}}", 400,
	    "max_new_tokens");
	BAD(TRN, "{\"inputs\": [1, 1000]}", 400, "inputs");
	BAD(TRN, "{\"inputs\": \"x\"", 400, "");
	rg_gen_request_free(&g_req);
}

static void test_answer_translate(void **state)
{
	rg_gen_choice c[2] = {
		{ .text = "Hallo", .text_len = 5, .finish = RG_GEN_FINISH_EOS, .lps = LPS,
		  .n_lps = 2, .n_generated = 2 },
		{ .text = "Welt", .text_len = 4, .finish = RG_GEN_FINISH_LENGTH, .lps = LPS + 2,
		  .n_lps = 1, .n_generated = 1 },
	};
	rg_gen_answer_ctx ctx = { TRN, NULL, 0, NULL, NULL, 3, false, false };
	rg_buf b;
	json_object *o;
	(void)state;

	rg_buf_init(&b);
	rg_gen_answer_json(&b, &ctx, c, 1, NULL, false, 0);
	o = parse_json(b.data, b.len);
	expect_str(o, "translation_text", "Hallo");
	expect_int(o, "generated_tokens", 2);
	expect_str(o, "finish_reason", "eos_token");
	expect_null(o, "details");
	json_object_put(o);
	rg_buf_free(&b);
	/* a list: a JSON array in order, details with the token ids */
	ctx.list = true;
	rg_buf_init(&b);
	rg_gen_answer_json(&b, &ctx, c, 2, NULL, true, 0);
	assert_true(b.len > 2 && b.data[0] == '[' && b.data[b.len - 1] == ']');
	{
		json_object *arr = json_tokener_parse(b.data);

		assert_true(json_object_is_type(arr, json_type_array));
		assert_int_equal(json_object_array_length(arr), 2);
		expect_str(arr, "1.translation_text", "Welt");
		expect_str(arr, "1.finish_reason", "length");
		expect_str(arr, "0.details.finish_reason", "eos_token");
		expect_int(arr, "0.details.tokens.1.id", LPS[1].tok.id);
		assert_int_equal(len_of(arr, "0.details.tokens"), 2);
		json_object_put(arr);
	}
	rg_buf_free(&b);
}

/* Each API's structured-output field lands in grammar_kind / grammar. */
static void test_grammars(void **state)
{
	static const struct {
		rg_gen_api api;
		const char *body;
		int kind;
		const char *text; /* NULL: none */
	} cases[] = {
		{ CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
			"\"response_format\": {\"type\": \"json_object\"}}", RG_GRAMMAR_JSON_OBJECT, NULL },
		{ CMP, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", "
		       "\"json_schema\": {\"name\": \"n\", \"schema\": {\"type\": \"boolean\"}}}}",
		  RG_GRAMMAR_JSON_SCHEMA, "{\"type\":\"boolean\"}" },
		{ CMP, "{\"prompt\": \"x\", \"guided_regex\": \"[ab]+\"}", RG_GRAMMAR_REGEX, "[ab]+" },
		{ CMP, "{\"prompt\": \"x\", \"guided_choice\": [\"a\", \"b c\"]}",
		  RG_GRAMMAR_CHOICE, "[\"a\",\"b c\"]" },
		{ CMP, "{\"prompt\": \"x\", \"guided_json\": \"{\\\"type\\\": \\\"null\\\"}\"}",
		  RG_GRAMMAR_JSON_SCHEMA, "{\"type\": \"null\"}" },
		{ CMP, "{\"prompt\": \"x\", \"structured_outputs\": {\"choice\": [\"q\"]}}",
		  RG_GRAMMAR_CHOICE, "[\"q\"]" },
		{ TGI, "{\"inputs\": \"x\", \"parameters\": {\"grammar\": {\"type\": \"regex\", "
		       "\"value\": \"\\\\d+\"}}}", RG_GRAMMAR_REGEX, "\\d+" },
		{ CMP, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}",
		  RG_GRAMMAR_NONE, NULL },
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		OK(cases[i].api, cases[i].body);
		if (g_req.grammar_kind != cases[i].kind)
			fail_msg("case %zu: kind %d, want %d", i, g_req.grammar_kind, cases[i].kind);
		if (!cases[i].text != !g_req.grammar ||
		    (cases[i].text && strcmp(cases[i].text, g_req.grammar)))
			fail_msg("case %zu: grammar '%s', want '%s'", i,
				 g_req.grammar ? g_req.grammar : "(null)",
				 cases[i].text ? cases[i].text : "(null)");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_completions),
		cmocka_unit_test(test_defaults_chat),
		cmocka_unit_test(test_defaults_tgi),
		cmocka_unit_test(test_translate_parse),
		cmocka_unit_test(test_answer_translate),
		cmocka_unit_test(test_openai_ranges),
		cmocka_unit_test(test_tgi_ranges),
		cmocka_unit_test(test_unknown_and_unsupported),
		cmocka_unit_test(test_grammars),
		cmocka_unit_test(test_stream_rules),
		cmocka_unit_test(test_chat_logprobs_and_max_tokens),
		cmocka_unit_test(test_chat_template_fields),
		cmocka_unit_test(test_sampling_options),
		cmocka_unit_test(test_prompt_shapes),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_tools),
		cmocka_unit_test(test_utf8_and_json),
		cmocka_unit_test(test_answer_completions),
		cmocka_unit_test(test_answer_chat),
		cmocka_unit_test(test_answer_tgi),
		cmocka_unit_test(test_events_completions),
		cmocka_unit_test(test_events_chat),
		cmocka_unit_test(test_events_tgi),
		cmocka_unit_test(test_error_event_and_finish_names),
		cmocka_unit_test(test_answers_any_bytes),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);

	rg_gen_request_free(&g_req);
	return rc;
}
