/* The OpenAPI 3 document of `ragged serve` (GET /openapi.json), generated from the route table
 * (routes.h): each row's path, method, summary, request body schema, 200 answer, other answers
 * and error statuses. The request body schemas and the error answers (TEI's shape, and OpenAI's
 * on the OpenAI routes) are the components below. tests/py/test_server_compat.py checks that
 * every route the server answers is described and that the document parses; tests/unit/
 * test_routes.c that it is valid JSON naming every row's path and schema. */
#include "server/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The properties /v1/completions and /v1/chat/completions share (JSON members). */
#define GEN_COMMON_PROPS \
	"\"model\":{\"type\":\"string\",\"description\":\"The served model (another: 404 " \
	"model_not_found).\"},\"stream\"" \
	":{\"type\":\"boolean\",\"default\":false,\"description\":\"Server-sent events.\"},\"" \
	"stream_options\":{\"type\":\"object\",\"properties\":{\"include_usage\":{\"type\":\"" \
	"boolean\"}}},\"n\":{\"type\":\"integer\",\"minimum\":1,\"default\":1},\"max_tokens\"" \
	":{\"type\":\"integer\",\"minimum\":0,\"description\":\"0 only with echo or " \
	"prompt_logprobs: the prompt scored alone.\"},\"prompt_logprobs\":{\"type\":\"integer\"" \
	",\"minimum\":0,\"maximum\":20,\"description\":\"vLLM's: each prompt token's " \
	"log-probability, rank and that many alternatives (completions: per choice; chat: beside " \
	"usage); not with stream.\"},\"temperature\":{\"type\":\"number\",\"minimum" \
	"\":0,\"maximum\":2,\"default\":1},\"top_p\":{\"type\":\"number\",\"exclusiveMinimum" \
	"\":0,\"maximum\":1,\"default\":1},\"top_k\":{\"type\":\"integer\",\"default\":0,\"de" \
	"scription\":\"vLLM's; 0 or -1: off.\"},\"min_p\":{\"type\":\"number\",\"minimum\":0," \
	"\"maximum\":1,\"default\":0},\"presence_penalty\":{\"type\":\"number\",\"minimum\":-" \
	"2,\"maximum\":2,\"default\":0},\"frequency_penalty\":{\"type\":\"number\",\"minimum" \
	"\":-2,\"maximum\":2,\"default\":0},\"repetition_penalty\":{\"type\":\"number\",\"exc" \
	"lusiveMinimum\":0,\"default\":1},\"seed\":{\"type\":\"integer\"},\"stop\":{\"oneOf\"" \
	":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}}],\"desc" \
	"ription\":\"Stop strings: the text ends before the first found.\"},\"stop_token_ids" \
	"\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},\"logit_bias\":{\"type\":\"" \
	"object\",\"additionalProperties\":{\"type\":\"number\",\"minimum\":-100,\"maximum\":" \
	"100}},\"ignore_eos\":{\"type\":\"boolean\"},\"min_tokens\":{\"type\":\"integer\"},\"" \
	"skip_special_tokens\":{\"type\":\"boolean\"},\"use_beam_search\":{\"type\":\"boolean" \
	"\",\"description\":\"vLLM's: beam search with max(n, best_of) beams.\"},\"length_pen" \
	"alty\":{\"type\":\"number\"},\"deadline_ms\":{\"type\":\"number\",\"description\":\"" \
	"ragged: time-to-first-token target (ms from arrival); a request that cannot meet it " \
	"is refused with 429 at once.\"},\"tpot_ms\":{\"type\":\"number\",\"description\":\"r" \
	"agged: mean time per output token target (ms).\"},\"user\":{\"type\":\"string\"}" \
	",\"response_format\":{\"type\":\"object\",\"required\":[\"type\"],\"properties\":{\"ty" \
	"pe\":{\"type\":\"string\",\"enum\":[\"text\",\"json_object\",\"json_schema\"]},\"json_" \
	"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"schema" \
	"\":{\"type\":\"object\"},\"strict\":{\"type\":\"boolean\"}}}},\"description\":\"Struct" \
	"ured output: the reply is constrained to JSON (json_object) or to the schema (json_sch" \
	"ema); vLLM takes it on completions too.\"},\"structured_outputs\":{\"type\":\"object\"" \
	",\"properties\":{\"json\":{},\"regex\":{\"type\":\"string\"},\"choice\":{\"type\":\"ar" \
	"ray\",\"items\":{\"type\":\"string\"}},\"grammar\":{\"type\":\"string\"}},\"descriptio" \
	"n\":\"vLLM's: one of json (a schema), regex, choice or grammar constrains the output." \
	"\"},\"guided_json\":{\"description\":\"vLLM's older form of structured_outputs.json.\"" \
	"},\"guided_regex\":{\"type\":\"string\"},\"guided_choice\":{\"type\":\"array\",\"items" \
	"\":{\"type\":\"string\"}}"

/* components/schemas: name, JSON schema. A row's "schema" names one. */
static const struct {
	const char *name, *json;
} schemas[] = {
	{"ErrorResponse",
	 "{\"type\":\"object\",\"properties\":{\"error\":{\"type\":\"string\"},\"error_type\":{"
	 "\"type\":\"string\"}}}"},
	{"OpenAIErrorResponse",
	 "{\"type\":\"object\",\"properties\":{\"error\":{\"type\":\"object\",\"properties\":{\""
	 "message\":{\"type\":\"string\"},\"type\":{\"type\":\"string\"},\"param\":{\"type\":\"s"
	 "tring\",\"nullable\":true},\"code\":{\"type\":\"string\",\"nullable\":true}}}}}"},
	{"EmbedRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"oneOf\":["
	 "{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems"
	 "\":1},{\"type\":\"array\",\"items\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"arra"
	 "y\",\"items\":{\"type\":\"integer\"},\"minItems\":1}]},\"minItems\":1}],\"description"
	 "\":\"A text, token ids (used as given, as TEI's), or a batch of them.\"},\"normalize\""
	 ":{\"type\":\"boolean\",\"default\":true,\"description\":\"L2-normalize the pooled vect"
	 "or (false: the raw pooled vector).\"},\"truncate\":{\"type\":\"boolean\",\"default\":f"
	 "alse,\"description\":\"Cut over-long inputs to the model's maximum instead of answerin"
	 "g 422 (default: --auto-truncate).\"},\"truncation_direction\":{\"type\":\"string\",\"e"
	 "num\":[\"left\",\"right\",\"Left\",\"Right\"],\"default\":\"right\"},\"prompt_name\":{"
	 "\"type\":\"string\",\"nullable\":true,\"description\":\"A prompt of config_sentence_tr"
	 "ansformers.json, prepended to every text; default: the file's default_prompt_name.\"},"
	 "\"dimensions\":{\"type\":\"integer\",\"minimum\":1,\"nullable\":true,\"description\":"
	 "\"Keep the first d components (Matryoshka), then normalize.\"},\"encoding_format\":{\""
	 "type\":\"string\",\"enum\":[\"float\"],\"description\":\"Only float here (base64 on /v"
	 "1/embeddings).\"}}}"},
	{"OpenAIRequest",
	 "{\"type\":\"object\",\"required\":[\"input\"],\"properties\":{\"input\":{\"oneOf\":[{"
	 "\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}},{\"type\":\""
	 "array\",\"items\":{\"type\":\"integer\",\"minimum\":0}},{\"type\":\"array\",\"items\":"
	 "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}}}],\"description\":"
	 "\"Text(s) or token id array(s) (used as given).\"},\"model\":{\"type\":\"string\",\"de"
	 "scription\":\"The served model, echoed (another: 404 model_not_found).\"},\"encoding_format\":{\"type\":\"string\",\"enum"
	 "\":[\"float\",\"base64\"],\"default\":\"float\",\"description\":\"base64: little-endia"
	 "n float32 bytes.\"},\"dimensions\":{\"type\":\"integer\",\"minimum\":1},\"user\":{\"ty"
	 "pe\":\"string\",\"description\":\"Accepted and ignored, as OpenAI does.\"},\"normalize"
	 "\":{\"type\":\"boolean\",\"default\":true},\"truncate\":{\"type\":\"boolean\",\"defaul"
	 "t\":false},\"truncation_direction\":{\"type\":\"string\",\"enum\":[\"left\",\"right\","
	 "\"Left\",\"Right\"],\"default\":\"right\"},\"prompt_name\":{\"type\":\"string\"}}}"},
	{"OpenAIResponse",
	 "{\"type\":\"object\",\"properties\":{\"object\":{\"type\":\"string\",\"enum\":[\"list"
	 "\"]},\"data\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"obj"
	 "ect\":{\"type\":\"string\",\"enum\":[\"embedding\"]},\"index\":{\"type\":\"integer\"},"
	 "\"embedding\":{\"oneOf\":[{\"type\":\"array\",\"items\":{\"type\":\"number\",\"format"
	 "\":\"float\"}},{\"type\":\"string\"}]}}}},\"model\":{\"type\":\"string\"},\"usage\":{"
	 "\"type\":\"object\",\"properties\":{\"prompt_tokens\":{\"type\":\"integer\"},\"total_t"
	 "okens\":{\"type\":\"integer\"}}}}}"},
	{"EmbedAllRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"oneOf\":["
	 "{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\""
	 ":1}],\"description\":\"A text or a batch of texts.\"},\"truncate\":{\"type\":\"boolean"
	 "\"},\"truncation_direction\":{\"type\":\"string\",\"enum\":[\"left\",\"right\",\"Left"
	 "\",\"Right\"],\"default\":\"right\"},\"prompt_name\":{\"type\":\"string\"}}}"},
	{"SimilarityRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"type\":\""
	 "object\",\"required\":[\"source_sentence\",\"sentences\"],\"properties\":{\"source_sen"
	 "tence\":{\"type\":\"string\"},\"sentences\":{\"type\":\"array\",\"items\":{\"type\":\""
	 "string\"},\"minItems\":1}}},\"parameters\":{\"type\":\"object\",\"nullable\":true,\"pr"
	 "operties\":{\"truncate\":{\"type\":\"boolean\"},\"truncation_direction\":{\"type\":\"s"
	 "tring\",\"enum\":[\"left\",\"right\",\"Left\",\"Right\"],\"default\":\"right\"},\"prom"
	 "pt_name\":{\"type\":\"string\"}}}}}"},
	{"PredictRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"descripti"
	 "on\":\"A text, a pair [a, b], or a batch of [text] / [a, b] lists.\",\"oneOf\":[{\"typ"
	 "e\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"m"
	 "axItems\":2},{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"s"
	 "tring\"},\"minItems\":1,\"maxItems\":2}}]},\"raw_scores\":{\"type\":\"boolean\"},\"tru"
	 "ncate\":{\"type\":\"boolean\"},\"truncation_direction\":{\"type\":\"string\",\"enum\":"
	 "[\"left\",\"right\",\"Left\",\"Right\"],\"default\":\"right\"}}}"},
	{"RerankRequest",
	 "{\"type\":\"object\",\"required\":[\"query\",\"texts\"],\"properties\":{\"query\":{\"t"
	 "ype\":\"string\"},\"texts\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minI"
	 "tems\":1},\"raw_scores\":{\"type\":\"boolean\"},\"return_text\":{\"type\":\"boolean\"}"
	 ",\"truncate\":{\"type\":\"boolean\"},\"truncation_direction\":{\"type\":\"string\",\"e"
	 "num\":[\"left\",\"right\",\"Left\",\"Right\"],\"default\":\"right\"}}}"},
	{"CompletionRequest",
	 "{\"type\":\"object\",\"required\":[\"prompt\"],\"properties\":{"
	 GEN_COMMON_PROPS
	 ",\"prompt\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type"
	 "\":\"string\"}},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},{\"type\":\"ar"
	 "ray\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}]},\"best_of\""
	 ":{\"type\":\"integer\"},\"echo\":{\"type\":\"boolean\"},\"logprobs\":{\"type\":\"int"
	 "eger\",\"minimum\":0,\"maximum\":20},\"src_lang\":{\"type\":\"string\",\"description\""
	 ":\"Encoder-decoders: the source's language code, as /translate's.\"},\"tgt_lang\":{\"typ"
	 "e\":\"string\",\"description\":\"Encoder-decoders: the target's language code, as /tran"
	 "slate's.\"}}}"},
	{"ChatCompletionRequest",
	 "{\"type\":\"object\",\"required\":[\"messages\"],\"properties\":{"
	 GEN_COMMON_PROPS
	 ",\"messages\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"rol"
	 "e\"],\"properties\":{\"role\":{\"type\":\"string\",\"enum\":[\"system\",\"developer"
	 "\",\"user\",\"assistant\",\"tool\"]},\"content\":{\"oneOf\":[{\"type\":\"string\"},{"
	 "\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"type\":{\"type\""
	 ":\"string\",\"enum\":[\"text\"]},\"text\":{\"type\":\"string\"}}}}],\"nullable\":tru"
	 "e}"
	 ",\"name\":{\"type\":\"string\"},\"tool_call_id\":{\"type\":\"string\"},\"tool_calls\":"
	 "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\""
	 "string\"},\"type\":{\"type\":\"string\",\"enum\":[\"function\"]},\"function\":{\"type"
	 "\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"arguments\":{\"type\":"
	 "\"string\"}}}}}}"
	 "}},\"minItems\":1},\"max_completion_tokens\":{\"type\":\"integer\"},\"logprobs\":{"
	 "\"type\":\"boolean\"},\"top_logprobs\":{\"type\":\"integer\",\"minimum\":0,\"maximum"
	 "\":20},\"add_generation_prompt\":{\"type\":\"boolean\",\"default\":true},"
	 "\"continue_final_message\":{\"type\":\"boolean\",\"default\":false,\"description\":"
	 "\"vLLM's assistant prefill: the last message left open (needs add_generation_prompt "
	 "false).\"},\"chat_template\":{\"type\":\"string\",\"description\":\"A Jinja chat "
	 "template of a family ragged renders, instead of the model's.\"},"
	 "\"chat_template_kwargs\":{\"type\":\"object\",\"description\":\"add_generation_prompt "
	 "and continue_final_message override the fields; another key the template reads: "
	 "400.\"}"
	 ",\"tools\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"type\","
	 "\"function\"],\"properties\":{\"type\":{\"type\":\"string\",\"enum\":[\"function\"]},"
	 "\"function\":{\"type\":\"object\",\"required\":[\"name\"],\"properties\":{\"name\":{\""
	 "type\":\"string\"},\"description\":{\"type\":\"string\"},\"parameters\":{\"type\":\"ob"
	 "ject\"},\"strict\":{\"type\":\"boolean\"}}}}},\"description\":\"Functions the model ma"
	 "y call, rendered by the chat templates that take tools (Qwen2.5 Hermes, Llama 3.1-3.3,"
	 " Mistral v0.3); another template: 400.\"},\"tool_choice\":{\"oneOf\":[{\"type\":\"stri"
	 "ng\",\"enum\":[\"none\",\"auto\",\"required\"]},{\"type\":\"object\",\"required\":[\"t"
	 "ype\",\"function\"],\"properties\":{\"type\":{\"type\":\"string\",\"enum\":[\"function"
	 "\"]},\"function\":{\"type\":\"object\",\"required\":[\"name\"],\"properties\":{\"name"
	 "\":{\"type\":\"string\"}}}}}],\"description\":\"required and a named function are cons"
	 "trained by the grammar, so their arguments parse.\"},\"parallel_tool_calls\":{\"type\""
	 ":\"boolean\"}"
	 "}}"},
	{"TranslateRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"additionalProperties\":false,\"descript"
	 "ion\":\"Translation by an encoder-decoder model. Only these keys are read; any other is "
	 "answered 400 naming it.\",\"properties\":{\"inputs\":{\"oneOf\":[{\"type\":\"string\",\""
	 "minLength\":1},{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1},\"min"
	 "Items\":1},{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0},\"minItems"
	 "\":1},{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\","
	 "\"minimum\":0},\"minItems\":1},\"minItems\":1}],\"description\":\"The source: a text (to"
	 "kenized by the model's tokenizer, the eos appended as MarianTokenizer does), token ids e"
	 "nding with the model's eos, or a list of either (the answer is then a list in order). At"
	 " most max_source_positions tokens (/info), else 400.\"},\"src_lang\":{\"type\":\"string"
	 "\",\"minLength\":1,\"maxLength\":64,\"description\":\"The source texts' language code (H"
	 "F's translation pipeline src_lang; mBART-50 en_XX, NLLB eng_Latn, M2M100 en; /info langu"
	 "ages): put in the tokenizer's template in place of its own ([code] tokens </s>). Text in"
	 "puts only. Here or in parameters, not both. A code the model does not have, or any code "
	 "for a model without them (Marian, BART): 400 naming the model's codes.\"},\"tgt_lang\":{"
	 "\"type\":\"string\",\"minLength\":1,\"maxLength\":64,\"description\":\"The target langua"
	 "ge code, forced as the first generated token (its id as forced_bos_token_id, as HF's pip"
	 "eline sets it); absent: the model's generation_config forced_bos_token_id. Here or in pa"
	 "rameters, not both. Unknown: 400 naming the model's codes.\"},\"stream\":{\"type\":\"boo"
	 "lean\",\"default\":false,\"description\":\"Server-sent events as /generate_stream sends "
	 "them (one input, num_beams 1): one event per token {index, token: {id, text, logprob, sp"
	 "ecial}, generated_text: null, details: null}, the last with generated_text (the whole tr"
	 "anslation) and details {finish_reason, generated_tokens, seed, input_length}.\"},\"param"
	 "eters\":{\"type\":\"object\",\"properties\":{\"max_new_tokens\":{\"type\":\"integer\",\""
	 "minimum\":1,\"description\":\"Default and cap: the decoder's room (/info max_new_tokens)"
	 ".\"},\"num_beams\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":16,\"default\":1},\"d"
	 "o_sample\":{\"type\":\"boolean\",\"default\":false},\"temperature\":{\"type\":\"number\""
	 ",\"exclusiveMinimum\":0,\"default\":1,\"description\":\"With do_sample only.\"},\"top_k"
	 "\":{\"type\":\"integer\",\"minimum\":0,\"default\":0,\"description\":\"With do_sample on"
	 "ly; 0: off.\"},\"top_p\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1,\"def"
	 "ault\":1,\"description\":\"With do_sample only.\"},\"repetition_penalty\":{\"type\":\"nu"
	 "mber\",\"exclusiveMinimum\":0,\"default\":1},\"seed\":{\"type\":\"integer\",\"minimum\":"
	 "0},\"length_penalty\":{\"type\":\"number\",\"default\":1,\"description\":\"Beams only.\""
	 "},\"early_stopping\":{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"string\",\"enum\":["
	 "\"never\"]}],\"default\":false,\"description\":\"Beams only.\"},\"no_repeat_ngram_size\""
	 ":{\"type\":\"integer\",\"minimum\":0,\"default\":0},\"stop\":{\"oneOf\":[{\"type\":\"str"
	 "ing\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}}],\"description\":\"Not with "
	 "beams.\"},\"details\":{\"type\":\"boolean\",\"default\":false,\"description\":\"The deta"
	 "ils object (TGI's: finish_reason, generated_tokens, seed, prefill, tokens with ids).\"},"
	 "\"deadline_ms\":{\"type\":\"number\"},\"tpot_ms\":{\"type\":\"number\"},\"priority\":{\""
	 "type\":\"integer\"},\"src_lang\":{\"type\":\"string\",\"description\":\"As src_lang at t"
	 "he top level.\"},\"tgt_lang\":{\"type\":\"string\",\"description\":\"As tgt_lang at the "
	 "top level.\"}}}}}"},
	{"TranslateResponse",
	 "{\"type\":\"object\",\"properties\":{\"translation_text\":{\"type\":\"string\"},\"genera"
	 "ted_tokens\":{\"type\":\"integer\",\"description\":\"Target tokens generated (the final "
	 "eos included).\"},\"finish_reason\":{\"type\":\"string\",\"enum\":[\"eos_token\",\"stop_"
	 "sequence\",\"length\"]},\"details\":{\"type\":\"object\",\"nullable\":true,\"description"
	 "\":\"With parameters.details: TGI's details (finish_reason, generated_tokens, seed, pref"
	 "ill [], tokens [{id, text, logprob, special}]).\"}}}"},
	{"GenerateRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"type\":"
	 "\"string\"},\"stream\":{\"type\":\"boolean\",\"description\":\"POST / only: stream a"
	 "s /generate_stream.\"},\"parameters\":{\"type\":\"object\",\"properties\":{\"max_new"
	 "_tokens\":{\"type\":\"integer\",\"minimum\":1,\"default\":100},\"do_sample\":{\"type"
	 "\":\"boolean\"},\"temperature\":{\"type\":\"number\",\"exclusiveMinimum\":0},\"top_k"
	 "\":{\"type\":\"integer\",\"minimum\":1},\"top_p\":{\"type\":\"number\",\"exclusiveMi"
	 "nimum\":0,\"exclusiveMaximum\":1},\"repetition_penalty\":{\"type\":\"number\",\"excl"
	 "usiveMinimum\":0},\"frequency_penalty\":{\"type\":\"number\"},\"seed\":{\"type\":\"i"
	 "nteger\"},\"stop\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},\"details\":"
	 "{\"type\":\"boolean\"},\"decoder_input_details\":{\"type\":\"boolean\"},\"return_ful"
	 "l_text\":{\"type\":\"boolean\"},\"best_of\":{\"type\":\"integer\"},\"top_n_tokens\":"
	 "{\"type\":\"integer\"},\"truncate\":{\"type\":\"integer\",\"nullable\":true},\"deadl"
	 "ine_ms\":{\"type\":\"number\"},\"tpot_ms\":{\"type\":\"number\"}}}}}"},
	{"GenTokenizeRequest",
	 "{\"type\":\"object\",\"properties\":{\"prompt\":{\"type\":\"string\"},\"messages\":{"
	 "\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"role\"],\"properti"
	 "es\":{\"role\":{\"type\":\"string\",\"enum\":[\"system\",\"developer\",\"user\",\"as"
	 "sistant\",\"tool\"]},\"content\":{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"array"
	 "\",\"items\":{\"type\":\"object\",\"properties\":{\"type\":{\"type\":\"string\",\"en"
	 "um\":[\"text\"]},\"text\":{\"type\":\"string\"}}}}],\"nullable\":true}}},\"minItems"
	 "\":1},\"add_special_tokens\":{\"type\":\"boolean\",\"default\":true},\"add_generatio"
	 "n_prompt\":{\"type\":\"boolean\",\"default\":true},\"inputs\":{\"oneOf\":[{\"type\":"
	 "\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}}],\"description\":\""
	 "TEI's shape: token objects per input.\"}}}"},
	{"DetokenizeRequest",
	 "{\"type\":\"object\",\"required\":[\"tokens\"],\"properties\":{\"tokens\":{\"type\":"
	 "\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}},\"model\":{\"type\":\"stri"
	 "ng\"}}}"},
	{"TokenizeRequest",
	 "{\"type\":\"object\",\"required\":[\"inputs\"],\"properties\":{\"inputs\":{\"oneOf\":["
	 "{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\""
	 ":1}],\"description\":\"A text or a batch of texts.\"},\"add_special_tokens\":{\"type\""
	 ":\"boolean\",\"default\":true},\"prompt_name\":{\"type\":\"string\"},\"truncate\":{\"t"
	 "ype\":\"boolean\"},\"truncation_direction\":{\"type\":\"string\",\"enum\":[\"left\",\""
	 "right\",\"Left\",\"Right\"],\"default\":\"right\"}}}"},
	{"SimpleToken",
	 "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"text\":{\"type\":"
	 "\"string\"},\"special\":{\"type\":\"boolean\"},\"start\":{\"type\":\"integer\",\"nulla"
	 "ble\":true,\"description\":\"Byte offset in the (prompted) input; null for special tok"
	 "ens.\"},\"stop\":{\"type\":\"integer\",\"nullable\":true}}}"},
	{"DecodeRequest",
	 "{\"type\":\"object\",\"required\":[\"ids\"],\"properties\":{\"ids\":{\"oneOf\":[{\"typ"
	 "e\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}},{\"type\":\"array\",\"it"
	 "ems\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0}}}]},\"skip_sp"
	 "ecial_tokens\":{\"type\":\"boolean\",\"default\":true}}}"},
};

/* components/responses: the error statuses rows list, each as E<status> (TEI's error shape) and
 * OpenAIE<status> (OpenAI's). */
static const struct {
	int status;
	const char *desc;
} errors[] = {
	{400, "Bad request (the offending field is named)"},
	{401, "Missing or wrong API key"},
	{404, "No such route"},
	{405, "Method not allowed"},
	{413, "Body or batch too large"},
	{422, "Input too long (set truncate)"},
	{429, "Queue full (Retry-After)"},
	{500, "Server error"},
	{501, "Not implemented for this tokenizer"},
	{503, "Loading or shutting down (Retry-After)"},
	{504, "Deadline passed"},
};

static void put_str(rg_buf *b, const char *s)
{
	rg_buf_json_str(b, s, strlen(s));
}

/* An error answer's component: {"description", "content": {"application/json": {"schema":
 * {"$ref": ErrorResponse | OpenAIErrorResponse}}}}. */
static void put_error_response(rg_buf *b, const char *desc, bool openai)
{
	rg_buf_puts(b, "{\"description\":");
	put_str(b, desc);
	rg_buf_printf(b, ",\"content\":{\"application/json\":{\"schema\":{\"$ref\":"
			 "\"#/components/schemas/%sErrorResponse\"}}}}", openai ? "OpenAI" : "");
}

/* One operation of row: summary, parameters, requestBody, responses. */
static void put_operation(rg_buf *b, const rg_route_def *r)
{
	rg_buf_puts(b, "{\"summary\":");
	put_str(b, r->summary);
	if (r->params)
		rg_buf_printf(b, ",\"parameters\":%s", r->params);
	if (r->schema)
		rg_buf_printf(b, ",\"requestBody\":{\"required\":true,\"content\":{\"application/json\":"
				 "{\"schema\":{\"$ref\":\"#/components/schemas/%s\"}}}}", r->schema);
	rg_buf_puts(b, ",\"responses\":{\"200\":{\"description\":");
	put_str(b, r->ok_desc ? r->ok_desc : "OK");
	rg_buf_puts(b, ",\"content\":{");
	put_str(b, r->ok_type ? r->ok_type : "application/json");
	rg_buf_printf(b, ":{\"schema\":%s}}}", r->ok_schema);
	if (r->responses)
		rg_buf_printf(b, ",%s", r->responses);
	for (const char *p = r->errors; p && *p;) {
		char *end;
		long st = strtol(p, &end, 10);

		if (end == p)
			break;
		rg_buf_printf(b, ",\"%ld\":{\"$ref\":\"#/components/responses/%sE%ld\"}", st,
			       r->openai ? "OpenAI" : "", st);
		p = end;
	}
	rg_buf_puts(b, "}}");
}

void rg_openapi_write(rg_buf *b)
{
	size_t n;
	const rg_route_def *t = rg_routes(&n);

	rg_buf_puts(b, "{\"openapi\":\"3.0.3\",\"info\":{\"title\":\"ragged serve\",\"version\":\""
		       RAGGED_VERSION "\",\"description\":\"Text-embeddings-inference and OpenAI "
		       "compatible embedding server.\"},\"paths\":{");
	for (size_t i = 0; i < n; i++) {
		bool first = !i || strcmp(t[i].path, t[i - 1].path);

		/* rows of one path are adjacent in the table: one path item, an operation each */
		rg_buf_puts(b, first ? (i ? "}," : "") : ",");
		if (first) {
			put_str(b, t[i].path);
			rg_buf_puts(b, ":{");
		}
		if (t[i].methods & RG_METHOD_GET) {
			rg_buf_puts(b, "\"get\":");
			put_operation(b, &t[i]);
		}
		if (t[i].methods & RG_METHOD_POST) {
			rg_buf_puts(b, t[i].methods & RG_METHOD_GET ? ",\"post\":" : "\"post\":");
			put_operation(b, &t[i]);
		}
	}
	rg_buf_puts(b, n ? "}},\"components\":{\"schemas\":{" : "},\"components\":{\"schemas\":{");
	for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
		rg_buf_puts(b, i ? "," : "");
		put_str(b, schemas[i].name);
		rg_buf_printf(b, ":%s", schemas[i].json);
	}
	rg_buf_puts(b, "},\"responses\":{");
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		rg_buf_printf(b, "%s\"E%d\":", i ? "," : "", errors[i].status);
		put_error_response(b, errors[i].desc, false);
		rg_buf_printf(b, ",\"OpenAIE%d\":", errors[i].status);
		put_error_response(b, errors[i].desc, true);
	}
	rg_buf_puts(b, "}}}");
}
