/* Chat templates by family, without a Jinja engine. A model ships its chat template as Jinja
 * (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template) and transformers'
 * apply_chat_template renders it with jinja2 (ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, bos_token / eos_token / add_generation_prompt as variables). ragged recognizes
 * the template's FAMILY by the marker strings its real templates use, picks the variant of that
 * family by structure too (Mistral's spacing, Llama 3.1's system block, Phi-3 vs Phi-3.5, whether
 * bos_token is written), reads the literals a template carries (ChatML's default system message,
 * Llama 3.1's knowledge and date lines) from its source, and renders the messages in C so that
 * the text equals the template's own rendering byte for byte. What a template would raise on
 * comes back as RG_ERR_INVALID_INPUT with the template's reason; what a template would drop
 * without a word (a system message for legacy Phi-3, a system message past the first for Llama
 * 2 / Mistral / Gemma) is refused as well, rather than lost.
 *
 * Families and the templates they were checked against (tests/data/chat_templates/, rendered by
 * jinja2 in tests/py/test_chat_template.py):
 *   chatml  <|im_start|> / <|im_end|>            SmolLM2-135M-Instruct, Qwen2-0.5B-Instruct
 *   llama2  [INST] with <<SYS>>                   Llama-2-7b-chat
 *   llama3  <|start_header_id|> / <|eot_id|>      Meta-Llama-3-8B-Instruct; Llama 3.1-3.3 (the
 *                                                 "Cutting Knowledge Date" system block)
 *   mistral [INST] / [/INST] without <<SYS>>      Mistral-7B-Instruct v0.1 (legacy and current),
 *                                                 v0.3, Mixtral-8x7B-Instruct (legacy)
 *   gemma   <start_of_turn> / <end_of_turn>       gemma-2-2b-it, gemma-7b-it (legacy, no BOS)
 *   phi3    <|user|> / <|end|>                    Phi-3-mini-4k-instruct (legacy and current),
 *                                                 Phi-3.5-mini-instruct
 *   zephyr  <|user|> / eos_token, no <|end|>      TinyLlama-1.1B-Chat-v1.0 (zephyr-7b-beta's)
 * Tools (OpenAI's "tools", "tool" messages, assistant "tool_calls") are rendered where the
 * template has tool branches: Qwen2.5's Hermes ChatML (Qwen2.5-0.5B-Instruct: <tools> in the
 * system turn, <tool_call> JSON, <tool_response> in user turns), Llama 3.1-3.3 (JSON calls,
 * ipython results, tools_in_user_message at its default) and Mistral v0.3 ([AVAILABLE_TOOLS],
 * [TOOL_CALLS], [TOOL_RESULTS], 9-character call ids). A template that never reads tools
 * renders without them, as transformers does; one that reads them in another form (Qwen3's)
 * refuses them; a "tool" message or tool_calls for a template without tool branches is
 * refused, rather than dropped. */
#ifndef RG_GEN_CHAT_TEMPLATE_H
#define RG_GEN_CHAT_TEMPLATE_H
#include <stdbool.h>
#include <stddef.h>

#include "core/export.h"
#include "ragged.h"   /* rg_status, rg_chat_message */

typedef enum rg_chat_family {
	RG_CHAT_UNKNOWN = 0,
	RG_CHAT_CHATML,
	RG_CHAT_LLAMA2,
	RG_CHAT_LLAMA3,
	RG_CHAT_MISTRAL,
	RG_CHAT_GEMMA,
	RG_CHAT_PHI3,
	RG_CHAT_ZEPHYR,
} rg_chat_family;

/* The family of Jinja template source jinja (NUL-terminated): RG_CHAT_UNKNOWN for NULL, for a
 * template of no known family and for one of a known family in a variant that is not rendered
 * (rg_last_error says which, naming the template by its first 40 bytes). */
RG_TEST_API rg_chat_family rg_chat_template_detect(const char *jinja);

/* "chatml", "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr"; "unknown" for
 * RG_CHAT_UNKNOWN and anything outside the enum. Static. */
RG_TEST_API const char *rg_chat_family_name(rg_chat_family f);

/* Render msgs[0..n) as template jinja does in transformers' apply_chat_template (see the head of
 * this file). bos / eos: the model's BOS / EOS token text (NUL-terminated; NULL for none, taken
 * as ""). add_generation_prompt as HF's: open the assistant's turn at the end (templates that
 * ignore it, Llama 2 and legacy Phi-3, ignore it here too). Llama 3.2's template asks for today's
 * date (strftime_now): the local date is used, as transformers does.
 * On success *out is malloc'd, NUL-terminated, *out_len bytes (out_len may be NULL); caller
 * frees. Errors (*out NULL): RG_ERR_UNSUPPORTED for a template of no known family / variant;
 * RG_ERR_INVALID_INPUT for NULL arguments, n < 1, a NULL role, an unknown role, roles out of the
 * family's order, a refused system message, a NULL content with content_len > 0, a NUL byte in
 * a content (each naming the message index and the reason); RG_ERR_INVALID_UTF8 for a content
 * that is not UTF-8; RG_ERR_OOM. */
RG_TEST_API rg_status rg_chat_template_render(const char *jinja, const rg_chat_message *msgs,
					      int n, const char *bos, const char *eos,
					      bool add_generation_prompt, char **out,
					      size_t *out_len);

/* rg_chat_template_render, and where the messages' content landed in *out: *spans (malloc'd,
 * caller frees; NULL when there is none) holds *n_spans [start, end) byte ranges, ascending,
 * 2 entries each, of content bytes (as the template wrote them: trimmed where it trims; a
 * content written twice, as Mistral's system message, twice). What is outside them is the
 * template's markup. The tokenizer is given them so that special tokens are matched in the
 * markup only (rg_model_chat_encode). */
RG_TEST_API rg_status rg_chat_template_render_spans(const char *jinja,
						    const rg_chat_message *msgs, int n,
						    const char *bos, const char *eos,
						    bool add_generation_prompt, char **out,
						    size_t *out_len, size_t **spans,
						    size_t *n_spans);

/* rg_chat_template_render_spans with OpenAI's tools: tools is their JSON text (a list of
 * objects, NUL-terminated) or NULL; "[]" is none, as vLLM passes it. Each tool is written as
 * transformers' tojson writes it (json.dumps, ensure_ascii False; Llama: indent=4), keys in
 * the text's order; msgs[i].tool_calls' arguments (JSON text) are parsed and written the same
 * way (vLLM hands the template the parsed object). Errors as rg_chat_template_render_spans,
 * and RG_ERR_INVALID_INPUT for tools or tool_calls that are not JSON of that shape, a
 * tool message or tool_calls for a template without tool branches, tools for a template that
 * reads them in a form not rendered, the template's own raises (Llama: more than one call in
 * a message, tools and no user message; Mistral: a call id or tool_call_id not 9 characters
 * long, roles out of order around the tool turns), each naming the message. */
RG_TEST_API rg_status rg_chat_template_render_tools(const char *jinja,
						    const rg_chat_message *msgs, int n,
						    const char *tools, const char *bos,
						    const char *eos, bool add_generation_prompt,
						    char **out, size_t *out_len, size_t **spans,
						    size_t *n_spans);
#endif
