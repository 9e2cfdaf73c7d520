/* The generation routes' JSON (issue 20): parsing of OpenAI's /v1/completions and
 * /v1/chat/completions bodies and of TGI's /generate and /generate_stream bodies into one
 * rg_gen_request, and the answers in each API's shape (whole responses and server-sent events).
 * Pure functions, no I/O, no model: the HTTP side is routes_gen.c, the step loop engine_gen.c.
 * Parsing is fuzzed on its own (tests/fuzz/fuzz_gen_request.c): every byte string either parses
 * or yields an rg_req_error with the HTTP status to answer.
 *
 * Shapes followed (as the clients that must work unmodified send and read them):
 *   OpenAI Completions / Chat Completions API reference (platform.openai.com/docs/api-reference),
 *   with vLLM's extensions (ignore_eos, min_tokens, top_k, min_p, repetition_penalty,
 *   use_beam_search, length_penalty, early_stopping, skip_special_tokens, stop_token_ids);
 *   TGI's router (text-generation-inference router/src/lib.rs GenerateRequest, GenerateParameters,
 *   GenerateResponse, StreamResponse, Details, StreamDetails, Token), which
 *   huggingface_hub.InferenceClient.text_generation posts and parses. Not a public header. */
#ifndef RG_SERVER_GEN_REQUEST_H
#define RG_SERVER_GEN_REQUEST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "ragged.h"
#include "server/request.h"
#include "server/tool_call.h"

typedef enum rg_gen_api {
	RG_GEN_API_COMPLETIONS = 0, /* POST /v1/completions (and /completions) */
	RG_GEN_API_CHAT,            /* POST /v1/chat/completions (and /chat/completions) */
	RG_GEN_API_TGI,             /* POST /generate */
	RG_GEN_API_TGI_STREAM,      /* POST /generate_stream (always streams) */
	RG_GEN_API_TRANSLATE,       /* POST /translate (encoder-decoders; "stream": true is answered
				     * as TGI_STREAM: the caller switches the api after parsing) */
} rg_gen_api;

/* One chat message (copies; content is valid UTF-8, may be empty). */
typedef struct rg_gen_message {
	char *role;         /* "system", "user", "assistant", "developer" ("developer" is parsed as
			     * given; the renderer treats it as "system"), "tool" */
	char *content;      /* NUL-terminated; a list of {"type":"text","text":...} parts is joined
			     * with no separator (OpenAI's content parts); other part types: 400 */
	size_t content_len;
	char *tool_calls;   /* assistant: OpenAI's "tool_calls" as JSON text (a non-empty list of
			     * {"id", "type": "function", "function": {"name", "arguments": JSON
			     * text}}, checked), NULL when absent, null or [] */
	char *tool_call_id; /* tool: "tool_call_id" (required there, as OpenAI's), else NULL */
} rg_gen_message;

/* OpenAI's "tool_choice". */
typedef enum rg_gen_tool_choice {
	RG_GEN_TOOL_NONE = 0, /* "none", or no tools: the text is content */
	RG_GEN_TOOL_AUTO,     /* "auto" (the default with tools): the family's parser finds calls */
	RG_GEN_TOOL_REQUIRED, /* "required": a JSON list of {"name", "parameters"} (grammar) */
	RG_GEN_TOOL_NAMED,    /* {"type": "function", "function": {"name"}}: its arguments
			       * (grammar: the tool's parameters schema) */
} rg_gen_tool_choice;

/* A parsed request. Absent fields hold the defaults below. */
typedef struct rg_gen_request {
	rg_gen_api api;
	char *model;              /* "model", NULL when absent (TGI has none) */
	/* The prompts (completions: "prompt" as a string, a list of strings, a list of token ids or
	 * a list of such lists, one entry each; TGI: "inputs", one text). Entry i is a text
	 * (texts[i] != NULL, valid UTF-8, may not be empty) or token ids (ids[i] != NULL, n_ids[i]
	 * >= 1, each in [0, vocab_size)). Chat: n_prompts 0, the messages below. */
	int n_prompts;
	char **texts;             /* (n_prompts) */
	size_t *text_lens;        /* (n_prompts) */
	int32_t **ids;            /* (n_prompts) */
	int *n_ids;               /* (n_prompts) */
	bool inputs_list;         /* translate: "inputs" was a list (the answer is a list) */
	rg_gen_message *messages; /* chat: (n_messages) >= 1 */
	int n_messages;
	bool add_generation_prompt; /* chat (vLLM's extension), default true */
	bool continue_final_message; /* chat (vLLM's): the last message left open (assistant
				      * prefill); with add_generation_prompt: 400, as vLLM */
	char *chat_template;      /* chat (vLLM's): Jinja source rendered instead of the model's,
				   * NULL when absent */
	char **template_vars;     /* chat_template_kwargs' keys other than add_generation_prompt
				   * and continue_final_message (which override the top-level ones,
				   * as vLLM merges them): (n_template_vars) */
	int n_template_vars;

	bool stream;              /* OpenAI "stream"; TGI_STREAM: true; TGI: "stream" (TGI's
				   * POST / streams with it; the caller answers as TGI_STREAM) */
	bool include_usage;       /* "stream_options": {"include_usage": true} (stream only; refused
				   * without stream, as OpenAI does) */
	int n;                    /* choices per prompt, [1, limits.max_n], default 1 (TGI: 1) */
	int best_of;              /* completions / TGI "best_of": candidates of which the n (TGI: 1)
				   * best by cumulative log-probability are returned; 0 when absent;
				   * >= n; with stream: 400 as OpenAI */
	bool use_beam_search;     /* vLLM: beam search with max(n, best_of) beams; needs temperature 0
				   * or absent, no top_p/top_k/min_p */
	float length_penalty;     /* beams, default 1 */
	int early_stopping;       /* beams: 0 false (default), 1 true, 2 "never" */

	int max_tokens;           /* "max_tokens" / "max_completion_tokens" (chat; both given: they
				   * must agree) / TGI "max_new_tokens"; >= 1; -1 absent (OpenAI
				   * completions' default is 16; chat: up to the context; TGI: 100 as
				   * TGI's default) -- the parser fills those defaults, so -1 only for
				   * chat */
	int min_tokens;           /* vLLM "min_tokens", EOS and stops suppressed before, default 0 */
	int no_repeat_ngram_size; /* translate "no_repeat_ngram_size" (HF's), default 0: off */
	bool do_sample;           /* sample (else greedy): OpenAI when temperature > 0 (default 1);
				   * TGI when do_sample or a warper is set (temperature != 1, top_k,
				   * top_p < 1, typical_p < 1), as TGI's NextTokenChooser does; a TGI
				   * body without "parameters" samples (TGI's default_parameters) */
	float temperature;        /* >= 0, <= 2 (OpenAI); TGI > 0; default 1 */
	float top_p;              /* (0, 1], default 1 (TGI: (0, 1) exclusive as TGI validates) */
	int top_k;                /* >= 0 (vLLM: -1 means off too), default 0 */
	float min_p;              /* [0, 1], default 0 */
	float presence_penalty;   /* [-2, 2], default 0 */
	float frequency_penalty;  /* [-2, 2], default 0 (TGI "frequency_penalty" too) */
	float repetition_penalty; /* > 0, default 1 (vLLM / TGI) */
	bool has_seed;
	uint64_t seed;            /* "seed" (int64 in OpenAI; TGI u64) */
	char **stop;              /* (n_stop) non-empty UTF-8 strings: OpenAI "stop" (a string or a
				   * list of at most limits.max_stop), TGI "stop" (a list) */
	int n_stop;
	int32_t *stop_token_ids;  /* vLLM "stop_token_ids" (n_stop_token_ids), in the vocabulary */
	int n_stop_token_ids;
	int32_t *bias_ids;        /* OpenAI "logit_bias" {"token id": bias in [-100, 100]} */
	float *bias_values;
	int n_bias;
	int logprobs;             /* top alternatives per token, -1: no log-probabilities.
				   * completions "logprobs": int in [0, 5] (OpenAI; vLLM allows 20:
				   * limits.max_logprobs) -> that; chat "logprobs": true ->
				   * "top_logprobs" (0..20, default 0), false/absent -> -1 (and
				   * top_logprobs without logprobs: 400); TGI: "details" -> 0 (one
				   * logprob per token), "top_n_tokens" -> that */
	bool echo;                /* completions "echo": the prompt text is prepended; with
				   * "logprobs" the choice's logprobs start with the prompt's tokens
				   * (the first one's token_logprob and top_logprobs null), as
				   * OpenAI's legacy completions and vLLM answer it */
	int prompt_logprobs;      /* vLLM's "prompt_logprobs" (completions and chat): int in
				   * [0, RG_GEN_MAX_LOGPROBS], each prompt token's log-probability
				   * with that many alternatives ("prompt_logprobs": [null, {id:
				   * {"logprob", "rank", "decoded_token"}}, ...]); -1 absent. With
				   * stream: 400, as vLLM. max_tokens may be 0 with it or with echo
				   * (the prompt scored alone: lm-eval-harness's loglikelihood) */
	char *suffix;             /* completions "suffix" (fill-in-the-middle): the text after the
				   * completion, NULL when absent or "" */
	bool ignore_eos;          /* vLLM's "ignore_eos" */
	bool skip_special_tokens; /* vLLM's, default true */
	/* TGI */
	bool details;             /* "parameters.details": the details object (default false; the
				   * stream's final event has them whenever TGI sends them) */
	bool decoder_input_details; /* prefill tokens in details (accepted; ids without logprobs) */
	bool return_full_text;    /* "parameters.return_full_text": prompt + completion */
	int top_n_tokens;         /* "parameters.top_n_tokens", 0 absent */
	int truncate;             /* "parameters.truncate": only the prompt's last `truncate` tokens
				   * are kept (TGI truncates the encoding on the left); 0 absent */
	/* ragged's extensions (deadline-aware admission, issue 20) */
	double deadline_ms;       /* "deadline_ms": TTFT target from arrival, > 0; 0 absent */
	double tpot_ms;           /* "tpot_ms": mean time per output token target, > 0; 0 absent */
	int priority;             /* "priority" (vLLM), default 0 */
	char *user;               /* OpenAI "user" (echoed nowhere; accepted) */
	/* encoder-decoders' language codes (/translate, /v1/completions; HF's translation
	 * pipeline names): NULL absent. The route maps them (rg_model_lang_id): src_lang into the
	 * source's template, tgt_lang as the forced first token */
	char *src_lang;
	char *tgt_lang;
	/* structured outputs (issue 31): what the completion must match, checked (compiled) by the
	 * parser so a bad one is a 400 naming it. OpenAI "response_format" ({"type": "text"},
	 * {"type": "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema",
	 * "strict", "description"}}); vLLM "guided_json" (a schema object or its JSON text),
	 * "guided_regex", "guided_choice" (a list of strings) and "structured_outputs" ({"json" |
	 * "regex" | "choice": ...}); TGI "parameters.grammar" ({"type": "json" | "regex",
	 * "value": ...}). At most one per request. grammar_kind 0 (RG_GRAMMAR_NONE): none */
	int grammar_kind;         /* rg_grammar_kind */
	char *grammar;            /* its text (schema JSON, regex, JSON list of choices), or NULL */
	/* tool calling (chat, issue 31): "tools" (a list of {"type": "function", "function":
	 * {"name": [a-zA-Z0-9_-]{1,64}, "description": str, "parameters": object, "strict": bool}},
	 * names distinct) as JSON text for the chat template, NULL when absent, null or []; with
	 * tool_choice "required" / named the grammar above is the JSON Schema vLLM builds for them
	 * (a second constraint, e.g. response_format, is then a 400) */
	char *tools;
	int tool_choice;          /* rg_gen_tool_choice */
	char *tool_name;          /* NAMED: the function's name */
	bool parallel_tool_calls; /* default true; false: "required" allows one call */
} rg_gen_request;

typedef struct rg_gen_limits {
	int vocab_size;   /* token ids (prompts, logit_bias, stop_token_ids) in [0, vocab_size) */
	int max_n;        /* n and best_of at most (e.g. 16) */
	int max_prompts;  /* completions: prompts in one request at most (413 past it) */
	int max_stop;     /* stop strings at most (OpenAI: 4) */
	int max_logprobs; /* completions "logprobs" at most (OpenAI 5, vLLM 20); chat top_logprobs
			   * and TGI top_n_tokens at most RG_GEN_MAX_LOGPROBS */
	int max_messages; /* chat messages at most (413 past it) */
	int max_depth;    /* JSON nesting (json-c tokener depth) */
	int max_grammar_states; /* structured outputs: DFA states of a grammar (<= 0: 50000) */
} rg_gen_limits;

/* Parse body (len bytes, need not be NUL-terminated) for api into *out, with defaults filled.
 * TRANSLATE (ragged's /translate, HF's translation pipeline names): {"inputs": str | [str] |
 * [int] | [[int]], "parameters": {"max_new_tokens" (default -1: the caller fills the decoder's
 * room), "num_beams" (1..max_n; > 1 maps to use_beam_search with best_of = num_beams, n 1),
 * "do_sample" (default false: greedy, as HF), "temperature", "top_k", "top_p",
 * "repetition_penalty" (sampling only: given without do_sample, 400), "seed",
 * "length_penalty", "early_stopping" (beams only), "no_repeat_ngram_size", "stop" (a string
 * or a list; not with beams), "details", "deadline_ms", "tpot_ms", "priority"}, "stream":
 * bool (one input, one beam)}; "src_lang" / "tgt_lang" (strings of 1..64 bytes, at the top
 * level or in "parameters", not both; also completions' keys); any other key at either level:
 * 400 naming it.
 * Unknown keys: 400 naming the key on the OpenAI routes (OpenAI answers an unknown argument
 * so); OpenAI keys ragged does not implement ("functions", "function_call": the deprecated
 * forms of "tools" / "tool_choice", which are parsed as above; "audio",
 * "modalities", "prediction") are 400 naming them when set to anything but null / their
 * default; accepted and ignored when harmless ("user", "metadata", "store", "service_tier",
 * "parallel_tool_calls", "stream_options" without stream: 400 as OpenAI). TGI's routes ignore
 * unknown keys as TGI's serde structs do. A known key with a wrong type or a value out of range:
 * 400 naming it in err->param and the message (OpenAI's "param"), e.g. "temperature must be in
 * [0, 2], got 3". Texts must be valid UTF-8. More prompts or messages than the limits: 413.
 * On RG_OK *out owns copies of everything (rg_gen_request_free). On error returns
 * RG_ERR_INVALID_INPUT (or RG_ERR_OOM, status 500) and fills *err; *out is left zeroed. */
rg_status rg_gen_request_parse(rg_gen_api api, const char *body, size_t len,
			       const rg_gen_limits *lim, rg_gen_request *out, rg_req_error *err);

/* Free what rg_gen_request_parse allocated; leaves *r zeroed. Accepts a zeroed request. */
void rg_gen_request_free(rg_gen_request *r);

/* Apply TGI's "truncate" to a prompt's ids (n of them, in place): when r->truncate > 0 and the
 * prompt is longer, the last r->truncate ids move to the front and *n becomes r->truncate, as
 * TGI's validation does (encoding.truncate(truncate, 0, Left); the prompt text is the kept ids
 * decoded). Returns whether ids were dropped. */
bool rg_gen_request_truncate_ids(const rg_gen_request *r, int32_t *ids, int *n);


/* ---- answers ---------------------------------------------------------------------------- */

/* One token as the answers show it. piece: the token's bytes decoded alone (may be an
 * incomplete UTF-8 sequence for byte-level tokens; writers replace invalid bytes by U+FFFD in
 * JSON strings and give the raw bytes in OpenAI's "bytes"). */
typedef struct rg_gen_tok {
	int32_t id;
	const char *piece;
	size_t piece_len;
	float logprob;
	bool special;
} rg_gen_tok;

/* One position's log-probabilities: the chosen token and its n_top alternatives (most
 * probable first). */
typedef struct rg_gen_lp {
	rg_gen_tok tok;
	int n_top;             /* -1: no alternatives (a prompt's first token: null) */
	const rg_gen_tok *top; /* (n_top) */
	int rank;              /* prompt tokens: tok's rank (1 + tokens more probable); 0 unset */
} rg_gen_lp;

/* How a choice ended, in each API's words: OpenAI "stop" (EOS, a stop string or stop id),
 * "length"; TGI "eos_token", "stop_sequence", "length". NONE: not yet (stream chunks).
 * ABORT: drained or failed mid-stream (OpenAI "abort" as vLLM; TGI's stream ends with an error
 * event instead). */
typedef enum rg_gen_finish {
	RG_GEN_FINISH_NONE = 0,
	RG_GEN_FINISH_EOS,
	RG_GEN_FINISH_STOP,       /* a stop string or stop token id */
	RG_GEN_FINISH_LENGTH,
	RG_GEN_FINISH_ABORT,
	RG_GEN_FINISH_TOOL_CALLS, /* chat: ended (EOS / stop) with tool calls of tool_choice auto
				   * or required: "tool_calls" (a named choice ends "stop") */
} rg_gen_finish;

/* The answer's fixed part. */
typedef struct rg_gen_answer_ctx {
	rg_gen_api api;
	const char *id;           /* "cmpl-<hex>" / "chatcmpl-<hex>" */
	long long created;        /* Unix seconds */
	const char *model;        /* the served model name */
	const char *fingerprint;  /* "system_fingerprint", NULL: null */
	long long prompt_tokens;  /* TGI_STREAM: the last event's details "input_length" (TGI's
				   * StreamDetails has it; huggingface_hub's type requires it) */
	bool list;                /* TRANSLATE: answer a list (the inputs were a list) */
	bool tool_ids_nine;       /* chat: tool call ids of 9 characters (Mistral's, see
				   * rg_tool_call_id), else "call_..." */
} rg_gen_answer_ctx;

typedef struct rg_gen_usage {
	long long prompt_tokens, completion_tokens, cached_tokens; /* cached: prompt tokens taken from
				   * the prefix cache (usage.prompt_tokens_details.cached_tokens) */
} rg_gen_usage;

/* One finished choice (whole answers). */
typedef struct rg_gen_choice {
	int index;                /* OpenAI: prompt_index * n + j (completions), j (chat) */
	const char *text;         /* the completion (echo / return_full_text already applied) */
	size_t text_len;
	rg_gen_finish finish;
	const char *stop_str;     /* the stop string that ended it, or NULL (vLLM's "stop_reason") */
	const rg_gen_lp *lps;     /* (n_lps) per generated token, NULL when not asked */
	int n_lps;
	const size_t *text_offset; /* (n_lps) completions: each token's offset in text */
	const rg_gen_lp *prompt_lps; /* (n_prompt_lps) vLLM's prompt_logprobs, or NULL: entry 0
				   * (the first prompt token) is written null; the others as the
				   * token's {logprob, rank, decoded_token} then its alternatives
				   * (ranks 1..), the token itself once. Completions: per choice;
				   * chat: the answer's, from choice 0 */
	int n_prompt_lps;
	long long n_generated;    /* tokens generated (TGI "generated_tokens") */
	const rg_gen_tok *prefill; /* TGI decoder_input_details: (n_prefill) prompt tokens */
	int n_prefill;
	bool has_seed;            /* TGI "seed" (null otherwise) */
	uint64_t seed;
	/* chat with tools: text is the content outside the calls ("content": null when empty) */
	bool tools;
	const rg_tool_call *calls; /* (n_calls) "tool_calls" (omitted when none) */
	int n_calls;
} rg_gen_choice;

/* A whole answer, appended to b (UTF-8 JSON):
 *   COMPLETIONS: {"id","object":"text_completion","created","model","system_fingerprint",
 *     "choices":[{"index","text","logprobs":null|{"tokens","token_logprobs","top_logprobs":[{piece:
 *     lp}],"text_offset"},"finish_reason","stop_reason"}],"usage":{...}}
 *   CHAT: {"id","object":"chat.completion",...,"choices":[{"index","message":{"role":"assistant",
 *     "content"},"logprobs":null|{"content":[{"token","logprob","bytes","top_logprobs":[...]}]},
 *     "finish_reason","stop_reason"}],"usage":{"prompt_tokens","completion_tokens",
 *     "total_tokens","prompt_tokens_details":{"cached_tokens"}}} (chat's logprobs object also has
 *     "refusal":null as OpenAI's)
 *   TGI: {"generated_text", "details": null | {"finish_reason","generated_tokens","seed","prefill":
 *     [{"id","text","logprob"}],"tokens":[{"id","text","logprob","special"}],"top_tokens":[[...]],
 *     "best_of_sequences":[...] when best_of > 1 (choices 1.. )}} -- TGI answers a JSON object
 *     (huggingface_hub reads a list too; ragged sends the object as TGI does).
 *   TRANSLATE: per choice {"translation_text","generated_tokens","finish_reason" (TGI's names:
 *     "eos_token", "stop_sequence", "length"),"details": null | {TGI's details body}}: the
 *     first choice's object alone, or (ctx->list) a list of every choice's in input order.
 * choices: (n_choices) in index order. details: TGI and TRANSLATE. */
void rg_gen_answer_json(rg_buf *b, const rg_gen_answer_ctx *ctx, const rg_gen_choice *choices,
			int n_choices, const rg_gen_usage *usage, bool details, int top_n);

/* One streamed piece of choice `index`, as one server-sent event appended to b
 * ("data: {json}\n\n"):
 *   COMPLETIONS: {"id","object":"text_completion","created","model","choices":[{"index","text":
 *     delta,"logprobs":null|{...for these tokens...},"finish_reason":null|...}]}
 *     Its "text_offset" counts from the start of this chunk's text (the writer does not know
 *     the text before it).
 *   CHAT: {"id","object":"chat.completion.chunk",...,"choices":[{"index","delta":{"role":
 *     "assistant","content":delta} (first; delta may be empty: the role chunk OpenAI sends
 *     before any content) | {"content": delta} | {} (empty delta),"logprobs","finish_reason",
 *     "stop_reason"}]}.
 *   TGI_STREAM: one event per token: {"index","token":{"id","text","logprob","special"},
 *     "top_tokens":[...],"generated_text":null | full text (the last event),"details":null |
 *     {"finish_reason","generated_tokens","seed","input_length"} (the last event)}; the
 *     token's "text" is delta (what the client appends, as TGI's incremental decoding gives;
 *     NULL: the piece); full_text: the whole text for the last event (finish != NONE), else
 *     NULL. finish ABORT: generated_text and details stay null (send the error event next).
 * lps (n_lps): the tokens this piece covers (TGI: exactly one). finish NONE: not the last. */
void rg_gen_answer_event(rg_buf *b, const rg_gen_answer_ctx *ctx, int index, bool first,
			 const char *delta, size_t delta_len, const rg_gen_lp *lps, int n_lps,
			 bool want_logprobs, rg_gen_finish finish, const char *stop_str,
			 const char *full_text, size_t full_len, long long n_generated,
			 bool has_seed, uint64_t seed);

/* One streamed piece of tool call tool_index of chat choice `index`, as one event (OpenAI's
 * delta {"tool_calls": [...]}): name not NULL: the call's first chunk {"index", "id",
 * "type": "function", "function": {"name", "arguments": ""}}; else an arguments fragment
 * {"index", "function": {"arguments": args}} (args_len bytes). */
void rg_gen_answer_tool_event(rg_buf *b, const rg_gen_answer_ctx *ctx, int index,
			      int tool_index, const char *id, const char *name, const char *args,
			      size_t args_len);

/* The usage chunk OpenAI sends last with stream_options.include_usage:
 * "data: {...,"choices":[],"usage":{...}}\n\n". Writes nothing for the TGI APIs. */
void rg_gen_answer_usage_event(rg_buf *b, const rg_gen_answer_ctx *ctx, const rg_gen_usage *u);

/* An error in the middle of a stream (drain, a model error), as one event: OpenAI
 * "data: {"error":{"message","type","param":null,"code"}}\n\n" (vLLM's), TGI
 * "data: {"error": msg, "error_type": type}\n\n" (TGI's StreamResponse error). */
void rg_gen_answer_error_event(rg_buf *b, rg_gen_api api, const char *type, const char *msg);

/* "data: [DONE]\n\n" (OpenAI's stream end; TGI sends none). */
void rg_gen_answer_done_event(rg_buf *b);

/* OpenAI / TGI finish names: "stop" / "length" / "abort"; TGI "eos_token" / "stop_sequence" /
 * "length". NULL for NONE. */
const char *rg_gen_finish_name(rg_gen_api api, rg_gen_finish f);
#endif
