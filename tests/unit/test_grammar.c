/* Constrained decoding's automata (src/gen/grammar.c, json_schema.c): regexes compiled to byte
 * DFAs accept and reject hand-checked strings (tests/py/test_structured.py compares many more
 * against Python's re.fullmatch), refused constructs are named, limits are errors, and the token
 * masks of a toy vocabulary equal a brute-force walk of every token from every state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/error.h"
#include "gen/grammar.h"

static rg_dfa *compile(const char *re)
{
	rg_dfa *d = NULL;
	rg_status st = rg_dfa_compile(re, strlen(re), 0, &d);

	if (st != RG_OK)
		fail_msg("compile %s: %s", re, rg_last_error());
	return d;
}

static void test_accept_reject(void **state)
{
	static const struct {
		const char *re, *s;
		bool ok;
	} cases[] = {
		{"abc", "abc", true}, {"abc", "ab", false}, {"abc", "abcd", false},
		{"a|bc", "bc", true}, {"a|bc", "ac", false}, {"(a|b)*c", "ababbc", true},
		{"(a|b)*c", "", false}, {"a+", "", false}, {"a+", "aaa", true}, {"a?b", "b", true},
		{"a{2,3}", "a", false}, {"a{2,3}", "aa", true}, {"a{2,3}", "aaaa", false},
		{"a{2}", "aa", true}, {"a{2,}", "aaaaaaa", true}, {"a{,2}", "", true},
		{"[a-c]+", "cab", true}, {"[a-c]+", "cad", false}, {"[^a-c]", "d", true},
		{"[^a-c]", "b", false}, {"[^a]", "\xc3\xa9", true},  /* one code point, 2 bytes */
		{"[^a]", "\xc3", false},                              /* not a whole character */
		{".", "\xe2\x82\xac", true}, {".", "\n", false}, {"..", "\xe2\x82\xac", false},
		{"\\d+", "0123", true}, {"\\d", "x", false}, {"\\w+", "a_Z9", true},
		{"\\w", "-", false}, {"\\s", "\t", true}, {"\\S", " ", false}, {"\\D", "7", false},
		{"[\\d.]+", "1.5", true}, {"\\.", "x", false}, {"\\.", ".", true},
		{"\\x41\\u00e9", "A\xc3\xa9", true}, {"[\xc3\xa9-\xc3\xbc]", "\xc3\xb6", true},
		{"[\xc3\xa9-\xc3\xbc]", "\xc3\xa8", false},
		{"\xf0\x9f\x98\x80+", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", true},
		{"^ab$", "ab", true}, {"(?:x|y)z", "yz", true}, {"(?P<n>q)r", "qr", true},
		{"[]a]", "]", true}, {"[a-]", "-", true}, {"a{", "a{", true}, {"()", "", true},
		{"(a|)b", "b", true}, {"a*?b", "aab", true}, {"(ab){2}c", "ababc", true},
		{"(ab){2}c", "abc", false}, {"[\\\\\"]", "\"", true}, {"\\[x\\]", "[x]", true},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rg_dfa *d = compile(cases[i].re);

		if (rg_dfa_match(d, cases[i].s, strlen(cases[i].s)) != cases[i].ok)
			fail_msg("case %zu: /%s/ on '%s': want %s", i, cases[i].re, cases[i].s,
				 cases[i].ok ? "match" : "no match");
		rg_dfa_free(d);
	}
}

static void test_refused(void **state)
{
	static const struct {
		const char *re;
		rg_status st;
		const char *msg;
	} cases[] = {
		{"(a", RG_ERR_INVALID_INPUT, "unterminated group"},
		{"a)", RG_ERR_INVALID_INPUT, "unbalanced"},
		{"*a", RG_ERR_INVALID_INPUT, "nothing to repeat"},
		{"a**", RG_ERR_INVALID_INPUT, "multiple repeat"},
		{"[a", RG_ERR_INVALID_INPUT, "unterminated character class"},
		{"[z-a]", RG_ERR_INVALID_INPUT, "bad character range"},
		{"a{3,2}", RG_ERR_INVALID_INPUT, "min repeat"},
		{"a\\", RG_ERR_INVALID_INPUT, "trailing backslash"},
		{"\\q", RG_ERR_INVALID_INPUT, "unknown escape"},
		{"(a)\\1", RG_ERR_UNSUPPORTED, "backreferences"},
		{"\\bx", RG_ERR_UNSUPPORTED, "word boundaries"},
		{"(?=a)", RG_ERR_UNSUPPORTED, "look-around"},
		{"a^b", RG_ERR_UNSUPPORTED, "anchors"},
		{"a{1001}", RG_ERR_TOO_LONG, "over 1000"},
		{"[^\\s\\S]", RG_ERR_INVALID_INPUT, "matches no string"},
		{"(.{0,1000}){1000}", RG_ERR_TOO_LONG, "NFA states"},
		{"(.{0,50}){50}", RG_ERR_TOO_LONG, "too complex"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rg_dfa *d = (rg_dfa *)1;
		rg_status st = rg_dfa_compile(cases[i].re, strlen(cases[i].re), 0, &d);

		if (st != cases[i].st || d != NULL || !strstr(rg_last_error(), cases[i].msg))
			fail_msg("case %zu /%s/: status %d '%s', want %d '%s'", i, cases[i].re, st,
				 rg_last_error(), cases[i].st, cases[i].msg);
	}
	/* the DFA's state bound: (a|b)*a(a|b){12} needs 2^13 states */
	{
		const char *re = "(a|b)*a(a|b){12}";
		rg_dfa *d = NULL;

		assert_int_equal(rg_dfa_compile(re, strlen(re), 1000, &d), RG_ERR_TOO_LONG);
		assert_null(d);
		assert_non_null(strstr(rg_last_error(), "over 1000 states"));
		assert_int_equal(rg_dfa_compile(re, strlen(re), 0, &d), RG_OK);
		assert_true(rg_dfa_n_states(d) >= 8192);
		rg_dfa_free(d);
	}
}

/* Token masks on a toy vocabulary: the trie walk's mask of every reachable state equals the
 * brute-force walk of each token's bytes; rg_grammar_advance agrees with byte steps. */
static void test_token_masks(void **state)
{
	static const char *toks[] = {"a", "b", "ab", "ba", "abc", "c", "cc", "", "x", "\"",
				     "{\"", "\":", "1", "12", "123", "-", "}", "aab", "b1", NULL};
	const int V = (int)(sizeof(toks) / sizeof(toks[0]));
	const char *res[] = {"(ab|c)+", "a*b?c{2,3}", "\\{\"[a-c]{1,3}\":-?[0-9]{1,4}\\}",
			     "[ab]*1"};
	const char *b[32];
	size_t lens[32];
	rg_token_trie *trie;
	(void)state;

	for (int i = 0; i < V; i++) {
		b[i] = toks[i];
		lens[i] = toks[i] ? strlen(toks[i]) : 0;
	}
	assert_int_equal(rg_token_trie_build(b, lens, V, &trie), RG_OK);
	/* each pattern twice: masks cached, then past a zero budget (computed each time) */
	const size_t NR = sizeof(res) / sizeof(res[0]);
	for (size_t r = 0; r < 2 * NR; r++) {
		const bool uncached = r >= NR;
		rg_dfa *d = compile(res[r % NR]);
		rg_grammar *g;
		int n_allowed = 0;

		assert_int_equal(rg_grammar_new(d, trie, &g), RG_OK);
		if (uncached)
			rg_grammar_set_mask_budget(g, 0);
		for (int s = 0; s < rg_dfa_n_states(d); s++) {
			const uint64_t *m = rg_grammar_mask(g, s);

			assert_non_null(m);
			if (!uncached)
				assert_ptr_equal(m, rg_grammar_mask(g, s)); /* cached */
			for (int v = 0; v < V; v++) {
				int q = s;
				bool want = toks[v] && toks[v][0];

				for (size_t k = 0; want && k < lens[v] && q >= 0; k++)
					q = rg_dfa_next(d, q, (uint8_t)toks[v][k]);
				want = want && q >= 0;
				if (((m[v >> 6] >> (v & 63)) & 1) != want)
					fail_msg("/%s/ state %d token %d '%s': mask %d, want %d",
						 res[r % NR], s, v, toks[v] ? toks[v] : "(none)",
						 (int)((m[v >> 6] >> (v & 63)) & 1), want);
				if (want && rg_grammar_advance(g, s, v) != q)
					fail_msg("/%s/ advance mismatch", res[r % NR]);
				n_allowed += want;
			}
		}
		assert_true(n_allowed > 0);
		rg_grammar_unref(g); /* frees d */
	}
	rg_token_trie_free(trie);
}

/* JSON Schema regexes accept the instances they should and reject the others (a few
 * hand-checked; tests/py/test_structured.py validates generated outputs with jsonschema). */
static void test_schema_regex(void **state)
{
	static const struct {
		const char *schema, *yes, *no;
	} cases[] = {
		{"{\"type\":\"integer\"}", "-12", "012"},
		{"{\"type\":\"number\"}", "1.5e3", "1."},
		{"{\"type\":\"boolean\"}", "false", "False"},
		{"{\"type\":\"null\"}", "null", "nil"},
		{"{\"type\":\"string\",\"maxLength\":3}", "\"a\\nb\"", "\"abcd\""},
		{"{\"type\":\"string\",\"minLength\":2}", "\"ab\"", "\"a\""},
		{"{\"type\":\"string\",\"pattern\":\"^[0-9]{3}$\"}", "\"123\"", "\"12\""},
		{"{\"enum\":[\"a\\\"b\",1,null]}", "\"a\\\"b\"", "2"},
		{"{\"const\":{\"k\":[1,2]}}", "{\"k\":[1,2]}", "{\"k\":[1]}"},
		{"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}",
		 "[1, 2]", "[]"},
		{"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":2}", "[]",
		 "[1,2,3]"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":"
		 "{\"type\":\"boolean\"}},\"required\":[\"b\"]}", "{\"a\": 1, \"b\": true}",
		 "{\"a\": 1}"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":"
		 "{\"type\":\"boolean\"}},\"required\":[\"b\"]}", "{\"b\":false}", "{\"b\":1}"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":"
		 "{\"type\":\"integer\"}}}", "{\"b\":2}", "{\"b\":2,\"a\":1}"},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{}", "{,}"},
		{"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", "\"x\"",
		 "true"},
		{"{\"type\":[\"integer\",\"null\"]}", "null", "\"1\""},
		{"{\"$defs\":{\"p\":{\"type\":\"integer\"}},\"type\":\"object\",\"properties\":{\"x\":"
		 "{\"$ref\":\"#/$defs/p\"}},\"required\":[\"x\"]}", "{\"x\":3}", "{\"x\":\"3\"}"},
		{"{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-29\"", "\"2024-13-01\""},
		{"{}", "[{\"a\":[1]}]", "[{\"a\":[[[1]]]}]"}, /* any value, nested 3 deep */
		{"{\"type\":\"integer\",\"minimum\":-3,\"maximum\":120}", "-3", "-4"},
		{"{\"type\":\"integer\",\"minimum\":-3,\"maximum\":120}", "120", "121"},
		{"{\"type\":\"integer\",\"exclusiveMinimum\":9}", "10", "9"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *re = NULL;
		rg_dfa *d;

		if (rg_json_schema_regex(cases[i].schema, strlen(cases[i].schema), &re) != RG_OK)
			fail_msg("schema %zu: %s", i, rg_last_error());
		d = compile(re);
		if (!rg_dfa_match(d, cases[i].yes, strlen(cases[i].yes)))
			fail_msg("schema %zu %s rejects %s (regex %s)", i, cases[i].schema,
				 cases[i].yes, re);
		if (rg_dfa_match(d, cases[i].no, strlen(cases[i].no)))
			fail_msg("schema %zu %s accepts %s", i, cases[i].schema, cases[i].no);
		rg_dfa_free(d);
		free(re);
	}
	/* refused, by name */
	{
		static const char *bad[][2] = {
			{"{\"type\":\"number\",\"minimum\":0}", "on a number"},
			{"{\"type\":\"integer\",\"multipleOf\":2}", "multipleOf"},
			{"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer"},
			{"{\"type\":\"string\",\"format\":\"email\"}", "email"},
			{"{\"type\":\"frob\"}", "unknown type"},
			{"{\"$ref\":\"#/$defs/none\"}", "names no definition"},
			{"{\"type\":", "not valid JSON"},
			{"{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},"
			 "\"$ref\":\"#/$defs/t\"}", "nested over 16"},
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			char *re = NULL;

			if (rg_json_schema_regex(bad[i][0], strlen(bad[i][0]), &re) == RG_OK ||
			    re || !strstr(rg_last_error(), bad[i][1]))
				fail_msg("bad schema %zu accepted or unnamed: %s", i, rg_last_error());
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_reject),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_token_masks),
		cmocka_unit_test(test_schema_regex),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
