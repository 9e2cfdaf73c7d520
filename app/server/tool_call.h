/* OpenAI tool calls out of generated text (issue 31 item 2): the model's text, as its chat
 * template taught it to call tools, split into the calls (name + arguments as JSON text) and the
 * text outside them (the message's content). Pure functions, no model, no I/O; the same scan
 * serves whole answers (final) and streams (the text so far, rescanned at each step: what it
 * returns only grows, so a stream sends the new content bytes and the new calls).
 *
 * Formats, after vLLM's tool parsers (vllm/entrypoints/openai/tool_parsers: hermes, llama3_json)
 * and its forced tool choice (serving_chat: required / named through guided JSON):
 *   HERMES  Qwen2.5 / Hermes ChatML: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
 *           one or more; content is the text before the first call (and any text that is not
 *           white space between or after calls). Parsing stops at the first call that is not
 *           {"name": string, "arguments": object} JSON, or not closed at the end: from its
 *           <tool_call> on, the text stays content (no calls found: the whole text is content).
 *   LLAMA3  Llama 3.1-3.3 JSON calls: the whole text (white space and an optional <|python_tag|>
 *           first) is {"name": string, "parameters" | "arguments": object} objects separated by
 *           ';'; anything else, or a malformed object, and the whole text is content.
 *   MISTRAL Mistral v0.3: content, then [TOOL_CALLS] and a JSON list of {"name", "arguments":
 *           object}; a list that is not that, and the whole text is content. (The route keeps
 *           special tokens in the text for it, as vLLM's mistral parser does: [TOOL_CALLS] is
 *           one.) Its call ids are 9 characters, which the template wants back.
 *   LIST    tool_choice "required" (the grammar makes it so): a JSON list of {"name",
 *           "parameters"} objects, at least one.
 *   NAMED   tool_choice {"function": {"name"}}: the whole text is the arguments of that call.
 * Streams: HERMES content is sent up to where a "<tool_call>" could begin, each call once its
 * </tool_call> is in; MISTRAL content up to where "[TOOL_CALLS]" could begin, the list at the
 * end; LLAMA3 and LIST hold the text until the end (LLAMA3 streams content at
 * once when the text does not open with '{'); NAMED streams the text as argument fragments. */
#ifndef RG_SERVER_TOOL_CALL_H
#define RG_SERVER_TOOL_CALL_H
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

typedef enum rg_tool_fmt {
	RG_TOOL_FMT_NONE = 0, /* no tools offered to the parser: the text is content */
	RG_TOOL_FMT_HERMES,
	RG_TOOL_FMT_LLAMA3,
	RG_TOOL_FMT_MISTRAL,
	RG_TOOL_FMT_LIST,
	RG_TOOL_FMT_NAMED,
} rg_tool_fmt;

typedef struct rg_tool_call {
	char *name;          /* NUL-terminated, malloc'd */
	char *arguments;     /* JSON text of the arguments (json.dumps' form, as vLLM writes it;
			      * NAMED: the generated text as it is), malloc'd */
} rg_tool_call;

typedef struct rg_tool_scan {
	rg_buf content;      /* the content so far (UTF-8 as the text is) */
	rg_tool_call *calls; /* (n_calls) complete calls, in order */
	int n_calls;
	bool oom;
} rg_tool_scan;

/* Scan text[0..len) of format fmt into *out (zeroed by the caller, or a previous scan freed
 * with rg_tool_scan_free). final: the text is complete (unclosed calls become content); else
 * content stops before anything that may still turn into a call. named: NAMED's function name
 * (NUL-terminated; ignored by other formats). NAMED yields one call whose arguments are the
 * text so far. Never fails but for memory (out->oom). */
void rg_tool_scan_text(rg_tool_fmt fmt, const char *named, const char *text, size_t len,
		       bool final, rg_tool_scan *out);

/* Free a scan's buffers; leaves *s zeroed. */
void rg_tool_scan_free(rg_tool_scan *s);

/* The parser of a chat family (rg_chat_template_family's names): "chatml" HERMES, "llama3"
 * LLAMA3, "mistral" MISTRAL; NONE for the others (their text stays content). */
rg_tool_fmt rg_tool_fmt_of_family(const char *family);

/* The id of call k of choice `choice` in answer answer_id ("chatcmpl-<hex>"), into buf (n
 * bytes): OpenAI's shape, "call_" + the id's hex + choice and k; nine (Mistral's): 9 hex
 * characters (5 of the id's, choice, k), what Mistral v0.3's template accepts back. */
void rg_tool_call_id(char *buf, size_t n, const char *answer_id, int choice, int k, bool nine);
#endif
