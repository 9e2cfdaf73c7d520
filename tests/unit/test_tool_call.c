/* Tool calls out of generated text (app/server/tool_call.c) on fixed strings per format, the
 * expected calls and content written out by hand from the formats (Qwen2.5's Hermes template,
 * Llama 3.1's JSON calls, vLLM's hermes / llama3_json parsers' rules: arguments re-written as
 * json.dumps writes them; a malformed call stays text), and the stream property: the scan of
 * every prefix of a text is a prefix of the scan of the whole (content and calls only grow), so
 * a stream sends exactly what the whole answer holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/tool_call.h"

typedef struct want {
	const char *text;
	const char *content;    /* the content, "" for none */
	int n_calls;
	const char *calls[3][2]; /* name, arguments */
} want;

static void check(rg_tool_fmt fmt, const want *w)
{
	rg_tool_scan s = {0};
	char why[600];

	rg_tool_scan_text(fmt, "fn", w->text, strlen(w->text), true, &s);
	snprintf(why, sizeof(why), "text %s", w->text);
	assert_false(s.oom);
	if (s.content.len != strlen(w->content) ||
	    memcmp(s.content.data ? s.content.data : "", w->content, s.content.len))
		fail_msg("%s: content \"%.*s\", want \"%s\"", why, (int)s.content.len,
			 s.content.data ? s.content.data : "", w->content);
	if (s.n_calls != w->n_calls)
		fail_msg("%s: %d calls, want %d", why, s.n_calls, w->n_calls);
	for (int k = 0; k < s.n_calls; k++) {
		assert_string_equal(s.calls[k].name, w->calls[k][0]);
		assert_string_equal(s.calls[k].arguments, w->calls[k][1]);
	}
	rg_tool_scan_free(&s);
}

/* Every prefix's scan (not final) is a prefix of the whole text's (final) scan. */
static void check_stream(rg_tool_fmt fmt, const char *text)
{
	rg_tool_scan whole = {0}, part = {0};
	size_t n = strlen(text);

	rg_tool_scan_text(fmt, "fn", text, n, true, &whole);
	for (size_t len = 0; len <= n; len++) {
		rg_tool_scan_text(fmt, "fn", text, len, false, &part);
		assert_false(part.oom);
		if (part.content.len > whole.content.len ||
		    memcmp(part.content.data ? part.content.data : "",
			   whole.content.data ? whole.content.data : "", part.content.len))
			fail_msg("prefix %zu of %s: content \"%.*s\" is not a prefix of \"%.*s\"",
				 len, text, (int)part.content.len, part.content.data,
				 (int)whole.content.len, whole.content.data);
		if (fmt == RG_TOOL_FMT_NAMED)
			continue;   /* one call whose arguments are the text so far */
		assert_true(part.n_calls <= whole.n_calls);
		for (int k = 0; k < part.n_calls; k++) {
			assert_string_equal(part.calls[k].name, whole.calls[k].name);
			assert_string_equal(part.calls[k].arguments, whole.calls[k].arguments);
		}
		if (len < n && strstr(text, "<tool_call>") && part.content.len &&
		    strstr(part.content.data, "<tool_"))
			fail_msg("prefix %zu of %s: markup in the content", len, text);
	}
	rg_tool_scan_free(&part);
	rg_tool_scan_free(&whole);
}

static const want HERMES[] = {
	{"plain text, no call", "plain text, no call", 0, {{0}}},
	{"", "", 0, {{0}}},
	{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\xc3\xbcrich\"}}\n"
	 "</tool_call>", "", 1, {{"get_weather", "{\"city\": \"Z\xc3\xbcrich\"}"}}},
	/* content before the call; the arguments re-written (spacing, floats) as json.dumps */
	{"Let me check.\n<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2.50,"
	 "\"c\":[true,null,{}]}}\n</tool_call>",
	 "Let me check.\n", 1, {{"add", "{\"a\": 1, \"b\": 2.5, \"c\": [true, null, {}]}"}}},
	/* parallel calls, white space between and after them dropped */
	{"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
	 "{\"name\": \"b\", \"arguments\": {\"x\": \"<tool_call>\"}}\n</tool_call>\n",
	 "", 2, {{"a", "{}"}, {"b", "{\"x\": \"<tool_call>\"}"}}},
	/* text after the calls that is not white space stays content */
	{"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> done", " done", 1,
	 {{"a", "{}"}}},
	/* malformed: bad JSON, no name, arguments not an object, not closed: text */
	{"x<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>",
	 "x<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>", 0, {{0}}},
	{"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
	 0, {{0}}},
	{"<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>",
	 "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>", 0, {{0}}},
	{"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", "<tool_call>\n{\"name\": \"a\", "
	 "\"arguments\": {}}", 0, {{0}}},
	/* a good call, then a malformed one: the call kept, the rest text from its tag */
	{"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>oops",
	 "<tool_call>oops", 1, {{"a", "{}"}}},
	/* a partial tag at the end is text when the text is complete */
	{"the end <tool_ca", "the end <tool_ca", 0, {{0}}},
};

static const want LLAMA3[] = {
	{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", 1,
	 {{"get_weather", "{\"city\": \"Paris\"}"}}},
	{" <|python_tag|>{\"name\": \"a\", \"arguments\": {\"k\": 1e2}}", "", 1,
	 {{"a", "{\"k\": 100.0}"}}},
	{"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}\n",
	 "", 2, {{"a", "{}"}, {"b", "{\"x\": 1}"}}},
	{"It is sunny.", "It is sunny.", 0, {{0}}},
	{"{\"name\": \"a\"}", "{\"name\": \"a\"}", 0, {{0}}},
	{"{\"name\": \"a\", \"parameters\": {}} and more", "{\"name\": \"a\", \"parameters\": {}} "
	 "and more", 0, {{0}}},
	{"{\"name\": \"a\", \"parameters\": {", "{\"name\": \"a\", \"parameters\": {", 0, {{0}}},
};

static const want MISTRAL[] = {
	{"[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1}}, {\"name\": \"w\", "
	 "\"arguments\": {}}]", "", 2, {{"add", "{\"a\": 1}"}, {"w", "{}"}}},
	{"Let me see.[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{\"a\":[1,2]}}]",
	 "Let me see.", 1, {{"add", "{\"a\": [1, 2]}"}}},
	{"No tools needed.", "No tools needed.", 0, {{0}}},
	{"x [TOOL_CALLS] [{\"name\": \"add\"}]", "x [TOOL_CALLS] [{\"name\": \"add\"}]", 0, {{0}}},
	{"[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {", "[TOOL_CALLS] [{\"name\": \"add\", "
	 "\"arguments\": {", 0, {{0}}},
	{"almost [TOOL_CA", "almost [TOOL_CA", 0, {{0}}},
};

static const want LIST[] = {
	{"[{\"name\": \"add\", \"parameters\": {\"a\": 1}}, {\"name\": \"w\", \"parameters\": {}}]",
	 "", 2, {{"add", "{\"a\": 1}"}, {"w", "{}"}}},
	{"[]", "[]", 0, {{0}}},
	{"[{\"name\": \"add\", \"parameters\": {\"a\":", "[{\"name\": \"add\", \"parameters\": "
	 "{\"a\":", 0, {{0}}},
};

static void test_hermes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(HERMES) / sizeof(HERMES[0]); i++) {
		check(RG_TOOL_FMT_HERMES, &HERMES[i]);
		check_stream(RG_TOOL_FMT_HERMES, HERMES[i].text);
	}
}

static void test_llama3(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(LLAMA3) / sizeof(LLAMA3[0]); i++) {
		check(RG_TOOL_FMT_LLAMA3, &LLAMA3[i]);
		check_stream(RG_TOOL_FMT_LLAMA3, LLAMA3[i].text);
	}
}

static void test_mistral(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(MISTRAL) / sizeof(MISTRAL[0]); i++) {
		check(RG_TOOL_FMT_MISTRAL, &MISTRAL[i]);
		check_stream(RG_TOOL_FMT_MISTRAL, MISTRAL[i].text);
	}
}

static void test_list_named_none(void **state)
{
	const want named = {"{\"a\" :1}", "", 1, {{"fn", "{\"a\" :1}"}}};
	const want none = {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
			   "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", 0, {{0}}};

	(void)state;
	for (size_t i = 0; i < sizeof(LIST) / sizeof(LIST[0]); i++) {
		check(RG_TOOL_FMT_LIST, &LIST[i]);
		check_stream(RG_TOOL_FMT_LIST, LIST[i].text);
	}
	check(RG_TOOL_FMT_NAMED, &named);
	check_stream(RG_TOOL_FMT_NAMED, named.text);
	check(RG_TOOL_FMT_NONE, &none);
}

static void test_stream_holds_back(void **state)
{
	rg_tool_scan s = {0};
	const char *t = "Sure <tool_c";

	(void)state;
	/* a tag that may be arriving is held back, and released when the text ends */
	rg_tool_scan_text(RG_TOOL_FMT_HERMES, NULL, t, strlen(t), false, &s);
	assert_int_equal(s.content.len, 5);
	assert_memory_equal(s.content.data, "Sure ", 5);
	rg_tool_scan_text(RG_TOOL_FMT_HERMES, NULL, t, strlen(t), true, &s);
	assert_int_equal(s.content.len, strlen(t));
	/* Llama's JSON is held until the end; plain text goes at once */
	t = "{\"name\": \"a\", \"parameters\": {}}";
	rg_tool_scan_text(RG_TOOL_FMT_LLAMA3, NULL, t, strlen(t), false, &s);
	assert_int_equal(s.content.len, 0);
	assert_int_equal(s.n_calls, 0);
	rg_tool_scan_text(RG_TOOL_FMT_LLAMA3, NULL, "Hi", 2, false, &s);
	assert_int_equal(s.content.len, 2);
	rg_tool_scan_free(&s);
}

static void test_ids_and_families(void **state)
{
	char id[64], id2[64];

	(void)state;
	rg_tool_call_id(id, sizeof(id), "chatcmpl-0123456789abcdef01234567", 1, 2, false);
	assert_string_equal(id, "call_0123456789abcdef01230102");
	rg_tool_call_id(id2, sizeof(id2), "chatcmpl-0123456789abcdef01234567", 1, 3, false);
	assert_string_not_equal(id, id2);
	rg_tool_call_id(id, sizeof(id), "chatcmpl-0123456789abcdef01234567", 1, 2, true);
	assert_string_equal(id, "012340102");   /* Mistral's template wants 9 characters */
	assert_int_equal(rg_tool_fmt_of_family("mistral"), RG_TOOL_FMT_MISTRAL);
	assert_int_equal(rg_tool_fmt_of_family("chatml"), RG_TOOL_FMT_HERMES);
	assert_int_equal(rg_tool_fmt_of_family("llama3"), RG_TOOL_FMT_LLAMA3);
	assert_int_equal(rg_tool_fmt_of_family("gemma"), RG_TOOL_FMT_NONE);
	assert_int_equal(rg_tool_fmt_of_family(NULL), RG_TOOL_FMT_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hermes),
		cmocka_unit_test(test_llama3),
		cmocka_unit_test(test_mistral),
		cmocka_unit_test(test_list_named_none),
		cmocka_unit_test(test_stream_holds_back),
		cmocka_unit_test(test_ids_and_families),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
