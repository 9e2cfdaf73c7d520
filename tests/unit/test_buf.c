/* The one byte buffer and its JSON writers (src/core/buf.c), and the array growth rule
 * (src/core/vec.c), against hand-written expected text: escapes, float round trips, base64
 * (RFC 4648 test vectors), direct writes after a reserve. The float writer (Dragonbox's
 * shortest digits) against a reference built here from the definition: glibc's exact decimal
 * expansion of the float, cut to k digits and rounded down and up, the first k at which one
 * of the two reads back (strtof) as the float, the closer of the two when both do. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/vec.h"
#include "test_rng.h"

static void test_json_writers(void **state)
{
	rg_buf b;
	(void)state;

	rg_buf_init(&b);
	rg_buf_json_str(&b, "a\"b\\c\n\x01", 7);
	assert_string_equal(b.data, "\"a\\\"b\\\\c\\u000a\\u0001\"");
	b.len = 0;
	const float v[] = {1.f, -0.1f, NAN, 3.4028235e38f};
	rg_buf_float_array(&b, v, 4);
	assert_string_equal(b.data, "[1,-0.1,null,3.4028235e+38]");
	float back = strtof(b.data + 3, NULL); /* "-0.1" round-trips to -0.1f */
	assert_true(back == -0.1f);
	b.len = 0;
	rg_buf_printf(&b, "%s=%d", "n", 42);
	rg_buf_puts(&b, "!");
	assert_string_equal(b.data, "n=42!");
	assert_int_equal(b.len, 5);
	assert_false(b.oom);
	rg_buf_free(&b);
}

/* The shortest round-tripping digits of a finite nonzero |v| by the definition (see the head
 * of this file): digits (no trailing zeros) into dig, returns the decimal exponent E of
 * d.ddd x 10^E. */
static int ref_shortest(float v, char *dig)
{
	char exact[160], cand[40];
	int e0;

	v = fabsf(v);
	/* glibc prints the exact binary value: 120 digits cover every float32 */
	snprintf(exact, sizeof(exact), "%.120e", (double)v);
	e0 = atoi(strchr(exact, 'e') + 1);
	memmove(exact + 1, exact + 2, 121); /* drop the point: 121 digits */
	exact[121] = '\0';
	for (int k = 1; k <= 9; k++) {
		char down[12], up[12];
		int eu = e0, carry = 1;
		bool ok_down, ok_up, tail_zero = true;
		int cmp_half; /* the cut tail against one half unit of the k-th digit */

		memcpy(down, exact, (size_t)k);
		down[k] = '\0';
		memcpy(up, down, (size_t)k + 1);
		for (int i = k - 1; i >= 0 && carry; i--) {
			if (up[i] == '9') {
				up[i] = '0';
			} else {
				up[i]++;
				carry = 0;
			}
		}
		if (carry) { /* 99..9 + 1: one digit more, exponent + 1 */
			memmove(up + 1, up, (size_t)k + 1);
			up[0] = '1';
			up[k] = '\0';
			eu++;
		}
		for (int i = k + 1; i < 121; i++)
			tail_zero &= exact[i] == '0';
		cmp_half = exact[k] < '5' ? -1 : exact[k] > '5' ? 1 : tail_zero ? 0 : 1;
		snprintf(cand, sizeof(cand), "0.%se%d", down, e0 + 1);
		ok_down = strtof(cand, NULL) == v;
		snprintf(cand, sizeof(cand), "0.%se%d", up, eu + 1);
		ok_up = strtof(cand, NULL) == v;
		if (!ok_down && !ok_up)
			continue;
		bool take_up = ok_up && (!ok_down || cmp_half > 0 ||
					 (cmp_half == 0 && (down[k - 1] - '0') % 2 == 1));
		const char *d = take_up ? up : down;
		int n = (int)strlen(d);

		while (n > 1 && d[n - 1] == '0')
			n--;
		memcpy(dig, d, (size_t)n);
		dig[n] = '\0';
		return take_up ? eu : e0;
	}
	fail_msg("no 9-digit decimal reads back as %a", (double)v);
	return 0;
}

/* Check rg_f32_json's text of v: JSON number grammar, the layout rule, at most RG_F32_JSON_MAX
 * bytes, strtof gives v bit for bit, and its digits and exponent are ref_shortest's. */
static void check_f32(float v)
{
	char out[RG_F32_JSON_MAX + 8], want[16], got[24];
	const char *p = out;
	size_t len;
	int E, gE, ng = 0, point_at = -1, lead_zeros = 0;
	uint32_t vb, bb;
	float back;

	memset(out, 'X', sizeof(out));
	len = rg_f32_json(out, v);
	assert_true(len <= RG_F32_JSON_MAX);
	for (size_t i = RG_F32_JSON_MAX; i < sizeof(out); i++)
		assert_int_equal(out[i], 'X'); /* wrote within RG_F32_JSON_MAX bytes */
	out[len] = '\0';
	back = strtof(out, NULL);
	memcpy(&vb, &v, 4);
	memcpy(&bb, &back, 4);
	if (vb != bb)
		fail_msg("%a written as %s reads back as %a", (double)v, out, (double)back);
	if (v == 0) {
		assert_string_equal(out, signbit(v) ? "-0" : "0");
		return;
	}
	E = ref_shortest(v, want);
	/* grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?(e[+-][0-9]{2})? and collect the digits */
	if (*p == '-')
		p++;
	assert_true(*p >= '0' && *p <= '9');
	assert_false(p[0] == '0' && p[1] >= '0' && p[1] <= '9'); /* no leading zero */
	for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
		if (*p == '.') {
			assert_int_equal(point_at, -1);
			assert_true(p[1] >= '0' && p[1] <= '9');
			point_at = ng + lead_zeros;
			continue;
		}
		if (*p == '0' && ng == 0) {
			lead_zeros++;
			continue;
		}
		got[ng++] = *p;
	}
	while (ng > 1 && got[ng - 1] == '0' && point_at == -1 && *p == 'e')
		ng--; /* (never: the exponent form has no trailing zeros; checked below) */
	if (*p == 'e') {
		assert_true(p[1] == '+' || p[1] == '-');
		assert_true(strlen(p + 2) == 2 && p[2] >= '0' && p[2] <= '9' && p[3] >= '0' &&
			    p[3] <= '9');
		assert_true(lead_zeros == 0 && (point_at == -1 ? ng == 1 : point_at == 1));
		gE = atoi(p + 1);
		assert_false(E >= -4 && E < 9); /* fixed form there */
	} else {
		int int_digits = point_at == -1 ? ng + lead_zeros : point_at;

		assert_true(*p == '\0');
		/* 0.000ddd: E = -(zeros after the point) - 1; else the digits before the point */
		gE = int_digits > 0 && lead_zeros == 0 ? int_digits - 1 : -(lead_zeros - 1) - 1;
		if (lead_zeros)
			assert_int_equal(point_at, 1); /* "0." then zeros then digits */
		assert_true(E >= -4 && E < 9);
	}
	while (ng > 1 && got[ng - 1] == '0')
		ng--; /* an integer's trailing zeros are not digits of the decimal */
	got[ng] = '\0';
	if (strcmp(got, want) || gE != E)
		fail_msg("%a: wrote %s (digits %s, exponent %d), shortest is %se%d", (double)v, out,
			 got, gE, want, E);
}

static void test_f32_shortest_cases(void **state)
{
	static const struct {
		float v;
		const char *text;
	} cases[] = {
		{1.f, "1"}, {-2.5f, "-2.5"}, {0.1f, "0.1"}, {100.f, "100"}, {123456789.f, "123456790"} /* = 123456792 */,
		{1e9f, "1e+09"}, {0.0001f, "0.0001"}, {0.00001f, "1e-05"}, {-0.f, "-0"}, {0.f, "0"},
		{FLT_MAX, "3.4028235e+38"}, {FLT_MIN, "1.1754944e-38"}, {FLT_TRUE_MIN, "1e-45"},
		{16777216.f, "16777216"}, {0.3f, "0.3"}, {2.f / 3.f, "0.6666667"},
		{1.0e-10f, "1e-10"}, {12345.678f, "12345.678"},
	};
	char out[RG_F32_JSON_MAX + 1];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		out[rg_f32_json(out, cases[i].v)] = '\0';
		assert_string_equal(out, cases[i].text);
		check_f32(cases[i].v);
	}
	out[rg_f32_json(out, NAN)] = '\0';
	assert_string_equal(out, "null");
	out[rg_f32_json(out, -INFINITY)] = '\0';
	assert_string_equal(out, "null");
}

/* Every power of two and its neighbours (the asymmetric rounding interval at a binade's
 * bottom), subnormals, and random bit patterns over every exponent. */
static void test_f32_shortest_round_trip(void **state)
{
	(void)state;
	rng = 0x5eedf10a7ULL;
	for (int e = -149; e <= 127; e++) {
		float p = ldexpf(1.f, e);

		check_f32(p);
		check_f32(-p);
		check_f32(nextafterf(p, 0));
		check_f32(nextafterf(p, INFINITY));
	}
	for (uint32_t b = 1; b < 2000; b++) { /* the smallest subnormals */
		float v;

		memcpy(&v, &b, 4);
		check_f32(v);
	}
	for (int i = 0; i < 200000; i++) {
		uint32_t b = (uint32_t)next_u64();
		float v;

		memcpy(&v, &b, 4);
		if (isfinite(v))
			check_f32(v);
	}
	/* what embeddings hold: unit-norm vector components */
	for (int i = 0; i < 100000; i++) {
		float v = (float)((int32_t)(next_u64() >> 32)) / 2147483648.f * 0.2f;

		check_f32(v);
	}
}

/* rg_buf_float_array writes in place after one reserve: the same text as rg_f32_json's, joined,
 * whatever the buffer held before. */
static void test_float_array_in_place(void **state)
{
	float v[1000];
	char one[RG_F32_JSON_MAX + 1];
	rg_buf b, want;
	(void)state;

	rng = 12345;
	for (int i = 0; i < 1000; i++) {
		uint32_t bits = (uint32_t)next_u64();

		memcpy(&v[i], &bits, 4);
	}
	rg_buf_init(&b);
	rg_buf_init(&want);
	for (int i = irand(1, 300); i > 0; i--) { /* a prefix of random length: any boundary */
		rg_buf_put(&b, "x", 1);
		rg_buf_put(&want, "x", 1);
	}
	rg_buf_put(&want, "[", 1);
	for (int i = 0; i < 1000; i++) {
		if (i)
			rg_buf_put(&want, ",", 1);
		rg_buf_put(&want, one, rg_f32_json(one, v[i]));
	}
	rg_buf_put(&want, "]", 1);
	rg_buf_float_array(&b, v, 1000);
	assert_int_equal(b.len, want.len);
	assert_int_equal(strlen(b.data), b.len);
	assert_string_equal(b.data, want.data);
	b.len = 0;
	rg_buf_float_array(&b, v, 0);
	assert_string_equal(b.data, "[]");
	rg_buf_free(&b);
	rg_buf_free(&want);
}

static void test_base64_vectors(void **state)
{
	static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
	static const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
	(void)state;

	for (size_t i = 0; i < 7; i++) {
		rg_buf b;

		rg_buf_init(&b);
		rg_buf_base64(&b, in[i], strlen(in[i]));
		assert_string_equal(b.len ? b.data : "", out[i]);
		rg_buf_free(&b);
	}
}

static void test_reserve_then_direct_writes(void **state)
{
	rg_buf b;
	(void)state;

	rg_buf_init(&b);
	rg_buf_puts(&b, "x");
	assert_true(rg_buf_reserve(&b, 100000));
	assert_true(b.cap >= b.len + 100001);
	memset(b.data + b.len, 'y', 100000);
	b.len += 100000;
	b.data[b.len] = '\0';
	rg_buf_puts(&b, "z");
	assert_int_equal(strlen(b.data), 100002);
	assert_int_equal(b.data[100001], 'z');
	rg_buf_free(&b);
}

static void test_vec_reserve(void **state)
{
	int *a = NULL;
	size_t cap = 0;
	(void)state;

	assert_true(rg_vec_reserve((void **)&a, &cap, 1, sizeof(*a), 4));
	assert_int_equal(cap, 4);
	for (int i = 0; i < 1000; i++) {
		assert_true(rg_vec_reserve((void **)&a, &cap, (size_t)i + 1, sizeof(*a), 4));
		a[i] = i;
	}
	assert_int_equal(cap, 1024); /* doubling from 4 */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(a[i], i);
	/* an impossible size fails and leaves the array as it was */
	int *keep = a;
	assert_false(rg_vec_reserve((void **)&a, &cap, SIZE_MAX / 2, sizeof(*a), 4));
	assert_ptr_equal(a, keep);
	assert_int_equal(cap, 1024);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_writers),
		cmocka_unit_test(test_f32_shortest_cases),
		cmocka_unit_test(test_f32_shortest_round_trip),
		cmocka_unit_test(test_float_array_in_place),
		cmocka_unit_test(test_base64_vectors),
		cmocka_unit_test(test_reserve_then_direct_writes),
		cmocka_unit_test(test_vec_reserve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
