/* The one UTF-8 module (src/core/utf8.c): RFC 3629 strictness on the classic bad cases, and
 * encode -> decode round trips at every length boundary. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/utf8.h"

static void test_valid_and_invalid(void **state)
{
	static const struct {
		const char *s;
		bool ok;
	} cases[] = {
		{"", true},
		{"plain ascii", true},
		{"caf\xc3\xa9", true},
		{"\xe2\x82\xac", true},         /* U+20AC */
		{"\xf0\x9f\x98\x80", true},     /* U+1F600 */
		{"\xf4\x8f\xbf\xbf", true},     /* U+10FFFF */
		{"\xc0\x80", false},            /* overlong NUL */
		{"\xe0\x80\xaf", false},        /* overlong '/' */
		{"\xed\xa0\x80", false},        /* surrogate U+D800 */
		{"\xf4\x90\x80\x80", false},    /* U+110000 */
		{"\xe2\x82", false},            /* truncated */
		{"\x80", false},                /* lone continuation */
		{"a\xff", false},
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (rg_utf8_valid(cases[i].s, strlen(cases[i].s)) != cases[i].ok)
			fail_msg("case %zu: expected %s", i, cases[i].ok ? "valid" : "invalid");
}

static void test_round_trip(void **state)
{
	static const uint32_t cps[] = {0,      0x7F,   0x80,   0x7FF,   0x800,    0xD7FF,
				       0xE000, 0xFFFF, 0x10000, 0x10FFFF, 0x20AC, 0x1F600};
	(void)state;

	for (size_t i = 0; i < sizeof(cps) / sizeof(cps[0]); i++) {
		char buf[4];
		uint32_t back = 0xFFFFFFFF;
		size_t n = rg_utf8_put(cps[i], buf);

		assert_int_equal(n, cps[i] < 0x80 ? 1 : cps[i] < 0x800 ? 2 : cps[i] < 0x10000 ? 3 : 4);
		assert_int_equal(rg_utf8_next(buf, n, 0, &back), n);
		assert_int_equal(back, cps[i]);
		assert_int_equal(rg_utf8_len_valid((unsigned char)buf[0]), n);
		assert_int_equal(rg_utf8_get_valid((const unsigned char *)buf), cps[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_and_invalid),
		cmocka_unit_test(test_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
