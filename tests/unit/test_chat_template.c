/* Chat templates by family (src/gen/chat_template.c): detection by structure, refusals with the
 * message index and the reason, and a few renders written out by hand from the real templates
 * (tests/py/test_chat_template.py compares every family with jinja2 at length). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gen/chat_template.h"

/* Qwen2-0.5B-Instruct's template (tokenizer_config.json), newlines as \n escapes */
static const char QWEN2[] =
	"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
	"{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
	"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
	"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/* gemma-2-2b-it's */
static const char GEMMA2[] =
	"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
	"not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user')"
	" != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	"user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}"
	"{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
	"{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
	"{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

/* Mistral-7B-Instruct-v0.1's first template */
static const char MISTRAL_LEGACY[] =
	"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
	"(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
	"user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
	"{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
	"{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and "
	"assistant roles are supported!') }}{% endif %}{% endfor %}";

#define MSG(r, c) {.role = r, .content = c, .content_len = sizeof(c) - 1}

static char *render_ok(const char *t, const rg_chat_message *m, int n, bool gen)
{
	char *out = NULL;
	size_t len = 0;
	rg_status s = rg_chat_template_render(t, m, n, "<s>", "</s>", gen, &out, &len);

	if (s != RG_OK)
		fail_msg("render: %s: %s", rg_status_name(s), rg_last_error());
	assert_non_null(out);
	assert_int_equal(strlen(out), len);
	return out;
}

static void expect_error(const char *t, const rg_chat_message *m, int n, rg_status want,
			 const char *needle)
{
	char *out = (char *)1;
	size_t len = 7;
	rg_status s = rg_chat_template_render(t, m, n, "<s>", "</s>", true, &out, &len);

	if (s != want)
		fail_msg("want %s, got %s: %s", rg_status_name(want), rg_status_name(s),
			 rg_last_error());
	assert_null(out);
	assert_int_equal(len, 0);
	if (needle && !strstr(rg_last_error(), needle))
		fail_msg("\"%s\" not in \"%s\"", needle, rg_last_error());
}

static void test_detect(void **state)
{
	static const struct {
		const char *t;
		rg_chat_family f;
	} cases[] = {
		{QWEN2, RG_CHAT_CHATML},
		{GEMMA2, RG_CHAT_GEMMA},
		{MISTRAL_LEGACY, RG_CHAT_MISTRAL},
		{"{{ bos_token }}{% if x %}<<SYS>>{% endif %}[INST] {{ y }} [/INST]", RG_CHAT_LLAMA2},
		{"{{'<|start_header_id|>' + r + '<|end_header_id|>\n\n' + c + '<|eot_id|>'}}",
		 RG_CHAT_LLAMA3},
		{"{{'<|system|>\n' + c + '<|end|>\n'}}{{'<|user|>'}}{{'<|assistant|>'}}", RG_CHAT_PHI3},
		{"{{'<|system|>\n' + c + eos_token}}{{'<|user|>'}}{{'<|assistant|>'}}",
		 RG_CHAT_ZEPHYR},
		/* [INST] without eos_token: not a Mistral template ragged knows */
		{"{{ bos_token }}[INST] {{ messages[0].content }} [/INST]", RG_CHAT_UNKNOWN},
		{"{% for m in messages %}{{ m.content }}{% endfor %}", RG_CHAT_UNKNOWN},
		{"", RG_CHAT_UNKNOWN},
		{NULL, RG_CHAT_UNKNOWN},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (rg_chat_template_detect(cases[i].t) != cases[i].f)
			fail_msg("case %zu: want %s, got %s", i, rg_chat_family_name(cases[i].f),
				 rg_chat_family_name(rg_chat_template_detect(cases[i].t)));
	assert_string_equal(rg_chat_family_name(RG_CHAT_LLAMA3), "llama3");
	assert_string_equal(rg_chat_family_name((rg_chat_family)99), "unknown");
}

static void test_render_by_hand(void **state)
{
	const rg_chat_message conv[] = {
		MSG("user", " Hi\xe3\x80\x80"),     /* U+3000 ideographic space: trimmed by Gemma */
		MSG("assistant", "\xc2\xa0Yo\n"),   /* U+00A0 */
		MSG("user", "q"),
	};
	char *s;
	(void)state;

	s = render_ok(QWEN2, conv, 3, true);
	assert_string_equal(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
			    "<|im_start|>user\n Hi\xe3\x80\x80<|im_end|>\n"
			    "<|im_start|>assistant\n\xc2\xa0Yo\n<|im_end|>\n"
			    "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n");
	free(s);
	s = render_ok(GEMMA2, conv, 3, false);
	assert_string_equal(s, "<s><start_of_turn>user\nHi<end_of_turn>\n"
			    "<start_of_turn>model\nYo<end_of_turn>\n"
			    "<start_of_turn>user\nq<end_of_turn>\n");
	free(s);
	s = render_ok(MISTRAL_LEGACY, conv, 3, true);
	assert_string_equal(s, "<s>[INST]  Hi\xe3\x80\x80 [/INST]\xc2\xa0Yo\n</s> [INST] q [/INST]");
	free(s);
}

static void test_refusals(void **state)
{
	const rg_chat_message sys_first[] = {MSG("system", "S"), MSG("user", "u")};
	const rg_chat_message two_users[] = {MSG("user", "a"), MSG("user", "b")};
	const rg_chat_message tool[] = {MSG("user", "a"), MSG("tool", "b")};
	const rg_chat_message bad_utf8[] = {MSG("user", "ok"), MSG("assistant", "a\xff")};
	const rg_chat_message nul[] = {MSG("user", "a\0b")};
	const rg_chat_message null_role[] = {{.role = NULL, .content = "a", .content_len = 1}};
	const rg_chat_message null_content[] = {{.role = "user", .content = NULL, .content_len = 3}};
	const rg_chat_message empty[] = {{.role = "user", .content = NULL, .content_len = 0}};
	char *out;
	(void)state;

	expect_error(GEMMA2, sys_first, 2, RG_ERR_INVALID_INPUT,
		     "messages[0]: System role not supported");
	expect_error(GEMMA2, two_users, 2, RG_ERR_INVALID_INPUT,
		     "messages[1]: Conversation roles must alternate");
	expect_error(MISTRAL_LEGACY, sys_first, 2, RG_ERR_INVALID_INPUT, "messages[0]");
	expect_error(MISTRAL_LEGACY, two_users, 2, RG_ERR_INVALID_INPUT, "messages[1]");
	expect_error(QWEN2, tool, 2, RG_ERR_INVALID_INPUT, "messages[1]: role \"tool\"");
	expect_error(QWEN2, bad_utf8, 2, RG_ERR_INVALID_UTF8, "messages[1]");
	expect_error(QWEN2, nul, 1, RG_ERR_INVALID_INPUT, "NUL");
	expect_error(QWEN2, null_role, 1, RG_ERR_INVALID_INPUT, "messages[0]");
	expect_error(QWEN2, null_content, 1, RG_ERR_INVALID_INPUT, "messages[0]");
	expect_error(QWEN2, two_users, 0, RG_ERR_INVALID_INPUT, "at least one");
	expect_error(NULL, two_users, 2, RG_ERR_INVALID_INPUT, NULL);
	expect_error(QWEN2, NULL, 2, RG_ERR_INVALID_INPUT, NULL);
	expect_error("{{ messages }} ### a made-up one", two_users, 2, RG_ERR_UNSUPPORTED,
		     "{{ messages }} ### a made-up one");
	/* a Mistral template of spacing none of the real ones has */
	expect_error("{{ bos_token }}{{ '[INST]' + c + '[/INST]' + eos_token }}", two_users, 1,
		     RG_ERR_UNSUPPORTED, "Mistral");
	assert_int_equal(rg_chat_template_render(QWEN2, two_users, 1, NULL, NULL, true, NULL, NULL),
			 RG_ERR_INVALID_INPUT);
	/* an empty content may come as NULL; no BOS/EOS is "" */
	out = render_ok(QWEN2, empty, 1, false);
	assert_string_equal(out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
			    "<|im_start|>user\n<|im_end|>\n");
	free(out);
	assert_int_equal(rg_chat_template_render(GEMMA2, empty, 1, NULL, NULL, true, &out, NULL),
			 RG_OK);
	assert_string_equal(out, "<start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n");
	free(out);
}

/* The default system literal is found only inside a tag, decoded with Jinja's escapes; an
 * unterminated literal or a bad escape means no default rather than a crash. */
static void test_literals(void **state)
{
	const rg_chat_message u[] = {MSG("user", "x")};
	static const struct {
		const char *t, *want;
	} cases[] = {
		{"{{ \"<|im_start|>system\\nA \\\"q\\\" \\u00e9\\x41\\\\<|im_end|>\\n\" }}<|im_end|>",
		 "<|im_start|>system\nA \"q\" \xc3\xa9" "A\\<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"},
		/* in template data or a comment: not a literal the template writes */
		{"'<|im_start|>system\nD<|im_end|>\n'{# '<|im_start|>system\nC<|im_end|>' #}",
		 "<|im_start|>user\nx<|im_end|>\n"},
		{"<|im_end|>{{ '<|im_start|>system\nno end", "<|im_start|>user\nx<|im_end|>\n"},
		{"{{ '<|im_start|>system\\uZZZZ<|im_end|>' }}", "<|im_start|>user\nx<|im_end|>\n"},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *s = render_ok(cases[i].t, u, 1, false);

		if (strcmp(s, cases[i].want))
			fail_msg("case %zu: got \"%s\"", i, s);
		free(s);
	}
}

/* rg_chat_template_render_spans on every real template of tests/data/chat_templates: the spans
 * are ascending, inside the text, and each one is a content as the template wrote it: within
 * that content, holding all of it but the blanks a trim may take. */
static void test_content_spans(void **state)
{
	static const char *const files[] = {
		"Llama-2-7b-chat-hf", "Llama-3.2-3B-Instruct", "Meta-Llama-3-8B-Instruct",
		"Mistral-7B-Instruct-v0.1-legacy", "Mistral-7B-Instruct-v0.1",
		"Mistral-7B-Instruct-v0.3", "Phi-3-mini-4k-instruct-legacy",
		"Phi-3-mini-4k-instruct", "Phi-3.5-mini-instruct", "Qwen2-0.5B-Instruct",
		"SmolLM2-135M-Instruct", "TinyLlama-1.1B-Chat-v1.0", "gemma-2-2b-it",
	};
	const rg_chat_message with_sys[] = {MSG("system", "  S1 <|im_start|> "),
					    MSG("user", " U1 [INST]\t"), MSG("assistant", "A1 "),
					    MSG("user", "U2")};
	const char *core[] = {"S1 <|im_start|>", "U1 [INST]", "A1", "U2"};
	(void)state;

	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		char path[256], *t, *out = NULL;
		size_t *sp = NULL, ns = 0, len = 0, tn;
		FILE *fp;
		rg_status st;
		int first = 0;

		snprintf(path, sizeof(path), "tests/data/chat_templates/%s.jinja", files[f]);
		fp = fopen(path, "rb");
		assert_non_null(fp);
		t = calloc(1, 1 << 16);
		tn = fread(t, 1, (1 << 16) - 1, fp);
		fclose(fp);
		t[tn] = '\0';
		st = rg_chat_template_render_spans(t, with_sys, 4, "<s>", "</s>", true, &out, &len,
						   &sp, &ns);
		if (st != RG_OK) { /* a template without a system role */
			first = 1;
			st = rg_chat_template_render_spans(t, with_sys + 1, 3, "<s>", "</s>", true,
							   &out, &len, &sp, &ns);
		}
		if (st != RG_OK)
			fail_msg("%s: %s", files[f], rg_last_error());
		if (ns < (size_t)(4 - first))
			fail_msg("%s: %zu spans", files[f], ns);
		for (size_t k = 0; k < ns; k++) {
			size_t a = sp[2 * k], b = sp[2 * k + 1];
			bool ok = false;

			assert_true(a < b && b <= len && (k == 0 || sp[2 * k - 1] <= a));
			for (int i = first; i < 4 && !ok; i++) {
				const char *c = with_sys[i].content;

				ok = b - a <= with_sys[i].content_len &&
				     memmem(c, with_sys[i].content_len, out + a, b - a) &&
				     memmem(out + a, b - a, core[i], strlen(core[i]));
			}
			if (!ok)
				fail_msg("%s: span %zu \"%.*s\" is no content", files[f], k,
					 (int)(b - a), out + a);
		}
		free(sp);
		free(out);
		free(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_detect),
		cmocka_unit_test(test_render_by_hand),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_literals),
		cmocka_unit_test(test_content_spans),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
