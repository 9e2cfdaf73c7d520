/* Unit tests for the validating GGUF reader (src/core/gguf.c).
 * Files are built byte by byte here (the layout of ggml/docs/gguf.md), written to a temporary
 * directory and opened. Every hostile file must be refused with its status and a message that
 * names the file and the culprit; the ASan build runs the same cases. Expected dequantized values
 * are worked out by hand from the block layouts (ggml-common.h), not taken from the code under
 * test; tests/py/test_gguf.py compares against gguf-py bit for bit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gguf.h"

#define RG_TMP_PREFIX "rg_gguf_test"
#include "test_tmpdir.h"

/* ---- a byte builder ------------------------------------------------------------------------ */

typedef struct gb {
	uint8_t *b;
	size_t n, cap;
} gb;

static void gb_put(gb *g, const void *p, size_t n)
{
	if (g->n + n > g->cap) {
		size_t cap = g->cap ? g->cap : 256;
		while (cap < g->n + n)
			cap *= 2;
		g->b = realloc(g->b, cap);
		assert_non_null(g->b);
		g->cap = cap;
	}
	if (n)
		memcpy(g->b + g->n, p, n);
	g->n += n;
}

static void gb_u8(gb *g, uint8_t v) { gb_put(g, &v, 1); }
static void gb_u16(gb *g, uint16_t v) { gb_put(g, &v, 2); }
static void gb_u32(gb *g, uint32_t v) { gb_put(g, &v, 4); }
static void gb_u64(gb *g, uint64_t v) { gb_put(g, &v, 8); }
static void gb_f32(gb *g, float v) { gb_put(g, &v, 4); }

static void gb_strn(gb *g, const char *s, size_t n)
{
	gb_u64(g, n);
	gb_put(g, s, n);
}

static void gb_str(gb *g, const char *s) { gb_strn(g, s, strlen(s)); }

static void gb_zeros(gb *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		gb_u8(g, 0);
}

static void gb_pad(gb *g, size_t align) { gb_zeros(g, (align - g->n % align) % align); }

static void gb_header(gb *g, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	gb_put(g, "GGUF", 4);
	gb_u32(g, version);
	gb_u64(g, n_tensors);
	gb_u64(g, n_kv);
}

static void gb_kv_u32(gb *g, const char *key, uint32_t v)
{
	gb_str(g, key);
	gb_u32(g, RG_GGUF_VT_UINT32);
	gb_u32(g, v);
}

static void gb_kv_str(gb *g, const char *key, const char *v)
{
	gb_str(g, key);
	gb_u32(g, RG_GGUF_VT_STRING);
	gb_str(g, v);
}

/* Tensor info; ne has n_dims entries. */
static void gb_tinfo(gb *g, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
		     uint64_t off)
{
	gb_str(g, name);
	gb_u32(g, n_dims);
	for (uint32_t d = 0; d < n_dims; d++)
		gb_u64(g, ne[d]);
	gb_u32(g, type);
	gb_u64(g, off);
}

static void path_in(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", g_dir, name);
}

static void gb_write(gb *g, const char *name)
{
	char p[512];
	FILE *f;
	path_in(p, sizeof(p), name);
	f = fopen(p, "wb");
	assert_non_null(f);
	if (g->n)
		assert_int_equal(fwrite(g->b, 1, g->n, f), g->n);
	fclose(f);
}

static void gb_free(gb *g)
{
	free(g->b);
	memset(g, 0, sizeof(*g));
}

/* Open <g_dir>/name; expect status want and every needle (NULL-terminated list) in the message,
 * which must also name the file. */
static void expect_fail(const char *name, rg_status want, ...)
{
	char p[512];
	rg_gguf *g = (rg_gguf *)0x1;
	rg_status s;
	va_list ap;
	const char *needle;

	path_in(p, sizeof(p), name);
	rg_error_clear();
	s = rg_gguf_open(p, &g);
	if (s != want)
		fail_msg("%s: status %s, want %s; message: %s", name, rg_status_name(s),
			 rg_status_name(want), rg_last_error());
	assert_null(g);
	if (!strstr(rg_last_error(), p))
		fail_msg("message '%s' does not name the file %s", rg_last_error(), p);
	va_start(ap, want);
	while ((needle = va_arg(ap, const char *)) != NULL) {
		if (!strstr(rg_last_error(), needle))
			fail_msg("message '%s' does not contain '%s'", rg_last_error(), needle);
	}
	va_end(ap);
}

/* Write g as name and expect the failure. */
#define EXPECT_FAIL(g, want, ...)                                                                  \
	do {                                                                                       \
		gb_write(g, "f.gguf");                                                             \
		expect_fail("f.gguf", want, __VA_ARGS__, NULL);                                    \
		gb_free(g);                                                                        \
	} while (0)

static rg_gguf *open_ok(const char *name)
{
	char p[512];
	rg_gguf *g = NULL;
	rg_status s;

	path_in(p, sizeof(p), name);
	s = rg_gguf_open(p, &g);
	if (s != RG_OK)
		fail_msg("%s: %s: %s", name, rg_status_name(s), rg_last_error());
	assert_non_null(g);
	return g;
}

static void assert_same_float(float got, float want)
{
	uint32_t a, b;
	memcpy(&a, &got, 4);
	memcpy(&b, &want, 4);
	if (a != b)
		fail_msg("got %a (0x%08x), want %a (0x%08x)", (double)got, a, (double)want, b);
}

/* ---- the valid file ------------------------------------------------------------------------ *
 * 5 metadata entries, 3 tensors (alignment 32):
 *   "q8"  ne [32, 2] Q8_0 at 0:   block 0 d = 1.0, qs = -16..15; block 1 d = -0.5, qs = 2
 *   "q4k" ne [256]   Q4_K at 96:  d = 1.0, dmin = 0.5, scales as in the expectations below
 *   "f32" ne [3]     F32  at 256: 1.5, -2, 0x1p-149; the file ends with it */

static void build_valid(gb *g)
{
	const uint64_t ne_q8[2] = {32, 2}, ne_q4k[1] = {256}, ne_f32[1] = {3};
	uint8_t scales[12] = {0};

	gb_header(g, 3, 3, 5);
	gb_kv_str(g, "general.architecture", "llama");
	gb_kv_u32(g, "llama.block_count", 30);
	gb_str(g, "tok.tokens");
	gb_u32(g, RG_GGUF_VT_ARRAY);
	gb_u32(g, RG_GGUF_VT_STRING);
	gb_u64(g, 3);
	gb_str(g, "a");
	gb_str(g, "");
	gb_str(g, "bc");
	gb_str(g, "tok.types");
	gb_u32(g, RG_GGUF_VT_ARRAY);
	gb_u32(g, RG_GGUF_VT_INT32);
	gb_u64(g, 3);
	gb_u32(g, 1);
	gb_u32(g, (uint32_t)-3);
	gb_u32(g, 2);
	gb_str(g, "x.f64");
	gb_u32(g, RG_GGUF_VT_FLOAT64);
	{
		double d = 0.25;
		gb_put(g, &d, 8);
	}
	gb_tinfo(g, "q8", 2, ne_q8, RG_GGUF_Q8_0, 0);
	gb_tinfo(g, "q4k", 1, ne_q4k, RG_GGUF_Q4_K, 96);
	gb_tinfo(g, "f32", 1, ne_f32, RG_GGUF_F32, 256);
	gb_pad(g, 32);
	/* q8: two blocks of {f16 d; i8 qs[32]} */
	gb_u16(g, 0x3C00);
	for (int j = 0; j < 32; j++)
		gb_u8(g, (uint8_t)(int8_t)(j - 16));
	gb_u16(g, 0xB800); /* -0.5 */
	for (int j = 0; j < 32; j++)
		gb_u8(g, 2);
	gb_zeros(g, 96 - 68);
	/* q4k: {f16 d, dmin; scales[12]; qs[128]}. scales[0] = 2 (sc[0]), scales[4] = 3 (mn[0]),
	 * scales[8] = 0x45 (sc[4] = 5, mn[4] = 4); every qs byte 0x21 (low nibble 1, high 2). */
	gb_u16(g, 0x3C00);
	gb_u16(g, 0x3800);
	scales[0] = 2;
	scales[4] = 3;
	scales[8] = 0x45;
	gb_put(g, scales, 12);
	for (int j = 0; j < 128; j++)
		gb_u8(g, 0x21);
	gb_zeros(g, 256 - 240);
	gb_f32(g, 1.5f);
	gb_f32(g, -2.0f);
	gb_f32(g, 0x1p-149f);
}

static void test_valid_file(void **state)
{
	gb b = {0};
	rg_gguf *g;
	const rg_gguf_tensor *t;
	const char *s;
	size_t len;
	uint32_t u, et;
	uint64_t n;
	int32_t i32;
	int64_t i64;
	float f, out[256];
	(void)state;

	build_valid(&b);
	gb_write(&b, "v.gguf");
	gb_free(&b);
	g = open_ok("v.gguf");
	assert_int_equal(rg_gguf_version(g), 3);
	assert_int_equal(rg_gguf_alignment(g), 32);
	assert_int_equal(rg_gguf_n_kv(g), 5);
	assert_string_equal(rg_gguf_kv_key(g, 0), "general.architecture");
	assert_string_equal(rg_gguf_kv_key(g, 4), "x.f64");
	assert_null(rg_gguf_kv_key(g, 5));
	assert_int_equal(rg_gguf_get_str(g, "general.architecture", &s, &len), RG_OK);
	assert_string_equal(s, "llama");
	assert_int_equal(len, 5);
	assert_int_equal(rg_gguf_get_u32(g, "llama.block_count", &u), RG_OK);
	assert_int_equal(u, 30);
	assert_int_equal(rg_gguf_get_i64(g, "llama.block_count", &i64), RG_OK);
	assert_int_equal(i64, 30);
	assert_int_equal(rg_gguf_get_f32(g, "x.f64", &f), RG_OK);
	assert_same_float(f, 0.25f);
	assert_true(rg_gguf_has(g, "tok.tokens"));
	assert_false(rg_gguf_has(g, "tok.token"));
	assert_int_equal(rg_gguf_get_arr(g, "tok.tokens", &et, &n), RG_OK);
	assert_int_equal(et, RG_GGUF_VT_STRING);
	assert_int_equal(n, 3);
	assert_int_equal(rg_gguf_arr_str(g, "tok.tokens", 1, &s, &len), RG_OK);
	assert_string_equal(s, "");
	assert_int_equal(len, 0);
	assert_int_equal(rg_gguf_arr_str(g, "tok.tokens", 2, &s, &len), RG_OK);
	assert_string_equal(s, "bc");
	assert_int_equal(len, 2);
	assert_int_equal(rg_gguf_arr_str(g, "tok.tokens", 3, &s, &len), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_gguf_arr_i32(g, "tok.types", 1, &i32), RG_OK);
	assert_int_equal(i32, -3);
	/* type mismatches and absent keys */
	assert_int_equal(rg_gguf_get_u32(g, "general.architecture", &u), RG_ERR_FORMAT);
	assert_non_null(strstr(rg_last_error(), "general.architecture"));
	assert_int_equal(rg_gguf_get_str(g, "llama.block_count", &s, &len), RG_ERR_FORMAT);
	assert_int_equal(rg_gguf_arr_i32(g, "tok.tokens", 0, &i32), RG_ERR_FORMAT);
	assert_int_equal(rg_gguf_get_u32(g, "nope", &u), RG_ERR_INVALID_INPUT);
	assert_non_null(strstr(rg_last_error(), "'nope'"));

	assert_int_equal(rg_gguf_n_tensors(g), 3);
	t = rg_gguf_tensor_at(g, 0);
	assert_string_equal(t->name, "q8");
	assert_ptr_equal(rg_gguf_find(g, "q8"), t);
	assert_null(rg_gguf_find(g, "q9"));
	assert_null(rg_gguf_tensor_at(g, 3));
	assert_int_equal(t->n_dims, 2);
	assert_int_equal(t->ne[0], 32);
	assert_int_equal(t->ne[1], 2);
	assert_int_equal(t->ne[2], 1);
	assert_int_equal(t->numel, 64);
	assert_int_equal(t->nbytes, 68);
	assert_int_equal((uintptr_t)t->data % 32, 0);
	assert_int_equal(rg_gguf_to_f32(t, out), RG_OK);
	for (int j = 0; j < 32; j++)
		assert_same_float(out[j], (float)(j - 16));
	for (int j = 32; j < 64; j++)
		assert_same_float(out[j], -1.0f);

	t = rg_gguf_find(g, "q4k");
	assert_non_null(t);
	assert_int_equal(t->nbytes, 144);
	assert_int_equal(rg_gguf_to_f32(t, out), RG_OK);
	/* sub-block 0: sc 2, min 3: 1*2*1 - 0.5*3 = 0.5; sub-block 1: sc = min = 0: 0;
	 * sub-block 4 (low nibbles of qs[64..96)): sc 5, min 4: 5*1 - 0.5*4 = 3 */
	for (int j = 0; j < 32; j++) {
		assert_same_float(out[j], 0.5f);
		assert_same_float(out[32 + j], 0.0f);
		assert_same_float(out[128 + j], 3.0f);
	}
	t = rg_gguf_find(g, "f32");
	assert_int_equal(rg_gguf_to_f32(t, out), RG_OK);
	assert_same_float(out[0], 1.5f);
	assert_same_float(out[1], -2.0f);
	assert_same_float(out[2], 0x1p-149f);
	rg_gguf_close(g);
	rg_gguf_close(NULL);
}

/* Hand-made blocks of the other dequantizable types, one tensor each. */
static void test_dequant_by_hand(void **state)
{
	const uint64_t ne32[1] = {32}, ne256[1] = {256}, ne2[1] = {2};
	gb b = {0};
	rg_gguf *g;
	float out[256];
	uint8_t q6[210] = {0};
	(void)state;

	gb_header(&b, 3, 5, 0);
	gb_tinfo(&b, "q4_0", 1, ne32, RG_GGUF_Q4_0, 0);
	gb_tinfo(&b, "q4_1", 1, ne32, RG_GGUF_Q4_1, 32);
	gb_tinfo(&b, "f16", 1, ne2, RG_GGUF_F16, 64);
	gb_tinfo(&b, "bf16", 1, ne2, RG_GGUF_BF16, 96);
	gb_tinfo(&b, "q6k", 1, ne256, RG_GGUF_Q6_K, 128);
	gb_pad(&b, 32);
	/* q4_0: d = 0.5, qs = 0x1F: low 15 -> (15-8)*0.5 = 3.5, high 1 -> (1-8)*0.5 = -3.5 */
	gb_u16(&b, 0x3800);
	for (int j = 0; j < 16; j++)
		gb_u8(&b, 0x1F);
	gb_zeros(&b, 32 - 18);
	/* q4_1: d = 2, m = -1, qs = 0x30: low 0 -> -1, high 3 -> 5 */
	gb_u16(&b, 0x4000);
	gb_u16(&b, 0xBC00);
	for (int j = 0; j < 16; j++)
		gb_u8(&b, 0x30);
	gb_zeros(&b, 32 - 20);
	gb_u16(&b, 0x0001); /* smallest subnormal half: 2^-24 */
	gb_u16(&b, 0xFC00); /* -inf */
	gb_zeros(&b, 28);
	gb_u16(&b, 0x3F80); /* bf16 1.0 */
	gb_u16(&b, 0xC040); /* bf16 -3.0 */
	gb_zeros(&b, 28);
	/* q6k {ql[128]; qh[64]; i8 scales[16]; f16 d}: d = 1, scales[0] = 2, scales[4] = -1;
	 * ql[0] = 0x0F, qh[0] = 0x01: element 0 = 2 * ((15 | 1 << 4) - 32) = -2,
	 * element 64 (high nibble of ql[0] = 0, bits 4..5 of qh[0] = 0) = -1 * (0 - 32) = 32;
	 * every other element of sub-block 0 (ql = qh = 0) is 2 * -32 = -64 */
	q6[0] = 0x0F;
	q6[128] = 0x01;
	q6[192] = 2;
	q6[192 + 4] = (uint8_t)-1;
	q6[208] = 0x00;
	q6[209] = 0x3C;
	gb_put(&b, q6, sizeof(q6));
	gb_write(&b, "h.gguf");
	gb_free(&b);

	g = open_ok("h.gguf");
	assert_int_equal(rg_gguf_to_f32(rg_gguf_find(g, "q4_0"), out), RG_OK);
	for (int j = 0; j < 16; j++) {
		assert_same_float(out[j], 3.5f);
		assert_same_float(out[16 + j], -3.5f);
	}
	assert_int_equal(rg_gguf_to_f32(rg_gguf_find(g, "q4_1"), out), RG_OK);
	for (int j = 0; j < 16; j++) {
		assert_same_float(out[j], -1.0f);
		assert_same_float(out[16 + j], 5.0f);
	}
	assert_int_equal(rg_gguf_to_f32(rg_gguf_find(g, "f16"), out), RG_OK);
	assert_same_float(out[0], 0x1p-24f);
	assert_same_float(out[1], -INFINITY);
	assert_int_equal(rg_gguf_to_f32(rg_gguf_find(g, "bf16"), out), RG_OK);
	assert_same_float(out[0], 1.0f);
	assert_same_float(out[1], -3.0f);
	assert_int_equal(rg_gguf_to_f32(rg_gguf_find(g, "q6k"), out), RG_OK);
	assert_same_float(out[0], -2.0f);
	assert_same_float(out[1], -64.0f);
	assert_same_float(out[15], -64.0f);
	assert_same_float(out[64], 32.0f);
	assert_int_equal(rg_gguf_to_f32(NULL, out), RG_ERR_INVALID_INPUT);
	rg_gguf_close(g);
}

/* The valid file cut at every byte: each prefix is RG_ERR_FORMAT naming the file. */
static void test_truncated_everywhere(void **state)
{
	gb b = {0};
	(void)state;

	build_valid(&b);
	for (size_t n = 0; n < b.n; n++) {
		gb c = {0};
		gb_put(&c, b.b, n);
		gb_write(&c, "t.gguf");
		gb_free(&c);
		expect_fail("t.gguf", RG_ERR_FORMAT, NULL);
	}
	gb_free(&b);
}

static void test_magic_and_version(void **state)
{
	gb b = {0};
	(void)state;

	gb_put(&b, "GGML", 4);
	gb_u32(&b, 3);
	gb_u64(&b, 0);
	gb_u64(&b, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "not a GGUF file");
	gb_header(&b, 1, 0, 0);
	EXPECT_FAIL(&b, RG_ERR_UNSUPPORTED, "version 1");
	gb_header(&b, 0x03000000, 0, 0);
	EXPECT_FAIL(&b, RG_ERR_UNSUPPORTED, "big-endian");
	gb_header(&b, 7, 0, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "unknown GGUF version 7");
	/* v2 and v3 with nothing in them are valid */
	gb_header(&b, 2, 0, 0);
	gb_write(&b, "e.gguf");
	gb_free(&b);
	rg_gguf_close(open_ok("e.gguf"));
}

static void test_lying_counts(void **state)
{
	gb b = {0};
	(void)state;

	gb_header(&b, 3, 0, UINT64_MAX);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "cannot hold", "18446744073709551615 metadata");
	gb_header(&b, 3, (uint64_t)1 << 40, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "cannot hold");
	/* one entry more than written: the count fits the bytes, the entries run out */
	gb_header(&b, 3, 0, 2);
	gb_kv_u32(&b, "a", 1);
	for (int i = 0; i < 9; i++)
		gb_u8(&b, 0xFF);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "metadata entry 1", "key length");
}

static void test_lying_lengths(void **state)
{
	gb b = {0};
	(void)state;

	/* key length past the end */
	gb_header(&b, 3, 0, 1);
	gb_u64(&b, 1000);
	gb_put(&b, "abcdefghijklmnopqrstu", 21);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "key length 1000");
	/* string value length UINT64_MAX */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_STRING);
	gb_u64(&b, UINT64_MAX);
	gb_zeros(&b, 8);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "string value length");
	/* numeric array: 2^61 uint64 elements (2^64 bytes: the product must not wrap) */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u32(&b, RG_GGUF_VT_UINT64);
	gb_u64(&b, (uint64_t)1 << 61);
	gb_zeros(&b, 16);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "array of 2305843009213693952 uint64");
	/* string array longer than the file could hold */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u32(&b, RG_GGUF_VT_STRING);
	gb_u64(&b, 1000000);
	gb_str(&b, "x");
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "1000000 strings");
	/* string array whose count fits but whose second element lies */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u32(&b, RG_GGUF_VT_STRING);
	gb_u64(&b, 2);
	gb_str(&b, "x");
	gb_u64(&b, 99);
	gb_zeros(&b, 8);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "element 1", "array string length 99");
}

static void test_bad_values(void **state)
{
	gb b = {0};
	(void)state;

	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, 13);
	gb_u32(&b, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "unknown value type 13");
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u64(&b, 1);
	gb_u32(&b, RG_GGUF_VT_UINT8);
	gb_u64(&b, 1);
	gb_u8(&b, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "nested arrays");
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_ARRAY);
	gb_u32(&b, 99);
	gb_u64(&b, 1);
	gb_zeros(&b, 8);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "unknown array element type 99");
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, RG_GGUF_VT_BOOL);
	gb_u8(&b, 2);
	gb_zeros(&b, 12);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'k'", "bool value is 2");
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "line\nbreak");
	gb_u32(&b, 77);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'line?break'", "unknown value type 77");
	gb_header(&b, 3, 0, 1);
	gb_strn(&b, "a\0b", 3);
	gb_u32(&b, RG_GGUF_VT_UINT8);
	gb_u8(&b, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "NUL");
}

static void test_duplicate_keys(void **state)
{
	gb b = {0};
	(void)state;

	gb_header(&b, 3, 0, 3);
	gb_kv_u32(&b, "b", 1);
	gb_kv_u32(&b, "dup.key", 2);
	gb_kv_str(&b, "dup.key", "x");
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "duplicate metadata key 'dup.key'", "entries 1 and 2");
}

static void test_alignment(void **state)
{
	const uint64_t ne[1] = {4};
	gb b = {0};
	rg_gguf *g;
	(void)state;

	gb_header(&b, 3, 0, 1);
	gb_kv_u32(&b, "general.alignment", 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "general.alignment = 0 is not a power of two");
	gb_header(&b, 3, 0, 1);
	gb_kv_u32(&b, "general.alignment", 48);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "48 is not a power of two");
	gb_header(&b, 3, 0, 1);
	gb_kv_str(&b, "general.alignment", "32");
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "general.alignment", "string");
	/* a valid alignment of 64: the second tensor at 64 */
	gb_header(&b, 3, 2, 1);
	gb_kv_u32(&b, "general.alignment", 64);
	gb_tinfo(&b, "a", 1, ne, RG_GGUF_F32, 0);
	gb_tinfo(&b, "b", 1, ne, RG_GGUF_F32, 64);
	gb_pad(&b, 64);
	gb_zeros(&b, 64 + 16);
	gb_write(&b, "a64.gguf");
	gb_free(&b);
	g = open_ok("a64.gguf");
	assert_int_equal(rg_gguf_alignment(g), 64);
	assert_int_equal((const char *)rg_gguf_find(g, "b")->data -
			 (const char *)rg_gguf_find(g, "a")->data, 64);
	rg_gguf_close(g);
	/* the same tensor at 32 is misaligned under 64 */
	gb_header(&b, 3, 1, 1);
	gb_kv_u32(&b, "general.alignment", 64);
	gb_tinfo(&b, "b", 1, ne, RG_GGUF_F32, 32);
	gb_pad(&b, 64);
	gb_zeros(&b, 64);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'b'", "offset 32 is not a multiple of the alignment 64");
}

/* One tensor (no metadata), data_len zero bytes after the padding. */
static void one_tensor(gb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
		       size_t data_len)
{
	gb_header(b, 3, 1, 0);
	gb_tinfo(b, "w", n_dims, ne, type, off);
	gb_pad(b, 32);
	gb_zeros(b, data_len);
}

static void test_bad_dims(void **state)
{
	const uint64_t ne5[5] = {1, 1, 1, 1, 1}, zero[2] = {4, 0}, neg[1] = {(uint64_t)-4},
		       prod[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32},
		       bytes[1] = {(uint64_t)1 << 62}, q8_33[1] = {33}, q4k[2] = {128, 2};
	gb b = {0};
	(void)state;

	one_tensor(&b, 5, ne5, RG_GGUF_F32, 0, 4);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "5 dimensions");
	one_tensor(&b, 2, zero, RG_GGUF_F32, 0, 16);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "ne[1] = 0 is not positive");
	one_tensor(&b, 1, neg, RG_GGUF_F32, 0, 16);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "ne[0] = -4 is not positive");
	one_tensor(&b, 2, prod, RG_GGUF_F32, 0, 16);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "element count overflows");
	one_tensor(&b, 1, bytes, RG_GGUF_F32, 0, 16);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "byte size overflows");
	one_tensor(&b, 1, q8_33, RG_GGUF_Q8_0, 0, 68);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "ne[0] = 33 is not a multiple of Q8_0's block size 32");
	one_tensor(&b, 2, q4k, RG_GGUF_Q4_K, 0, 288);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "Q4_K's block size 256");
}

static void test_bad_types(void **state)
{
	const uint64_t ne[1] = {32};
	gb b = {0};
	rg_gguf *g;
	float out[32];
	(void)state;

	one_tensor(&b, 1, ne, 200, 0, 128);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "tensor 0 ('w')", "unknown ggml tensor type 200");
	one_tensor(&b, 1, ne, 4, 0, 128); /* a number ggml retired (Q4_2) */
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "unknown ggml tensor type 4");
	/* a type ggml knows but ragged does not dequantize: opens, to_f32 refuses by name */
	one_tensor(&b, 1, ne, 20 /* IQ4_NL */, 0, 18);
	gb_write(&b, "iq4.gguf");
	gb_free(&b);
	g = open_ok("iq4.gguf");
	assert_int_equal(rg_gguf_tensor_at(g, 0)->nbytes, 18);
	assert_int_equal(rg_gguf_to_f32(rg_gguf_tensor_at(g, 0), out), RG_ERR_UNSUPPORTED);
	assert_non_null(strstr(rg_last_error(), "'w'"));
	assert_non_null(strstr(rg_last_error(), "IQ4_NL"));
	rg_gguf_close(g);
}

static void test_bad_offsets(void **state)
{
	const uint64_t ne[1] = {8};
	gb b = {0};
	(void)state;

	one_tensor(&b, 1, ne, RG_GGUF_F32, 4, 64);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "offset 4 is not a multiple of the alignment 32");
	one_tensor(&b, 1, ne, RG_GGUF_F32, 32, 48);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "exceeds the data section");
	one_tensor(&b, 1, ne, RG_GGUF_F32, (uint64_t)1 << 40, 32);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "exceeds");
	one_tensor(&b, 1, ne, RG_GGUF_F32, UINT64_MAX - 31, 32); /* aligned, offset + size wraps */
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "exceeds");
	/* no data section at all (the padding is missing too) */
	gb_header(&b, 3, 1, 0);
	gb_tinfo(&b, "w", 1, ne, RG_GGUF_F32, 0);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'w'", "exceeds");
}

static void test_overlap_and_duplicate_names(void **state)
{
	const uint64_t ne[1] = {16};
	gb b = {0};
	(void)state;

	gb_header(&b, 3, 3, 0);
	gb_tinfo(&b, "a", 1, ne, RG_GGUF_F32, 0);
	gb_tinfo(&b, "c", 1, ne, RG_GGUF_F32, 96); /* [96, 160) overlaps b [64, 128) */
	gb_tinfo(&b, "b", 1, ne, RG_GGUF_F32, 64);
	gb_pad(&b, 32);
	gb_zeros(&b, 160);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "'c' [96, +64) overlaps tensor 'b' [64, +64)");
	gb_header(&b, 3, 2, 0);
	gb_tinfo(&b, "same", 1, ne, RG_GGUF_F32, 0);
	gb_tinfo(&b, "same", 1, ne, RG_GGUF_F32, 64);
	gb_pad(&b, 32);
	gb_zeros(&b, 128);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "duplicate tensor name 'same'", "tensors 0 and 1");
	gb_header(&b, 3, 1, 0);
	gb_strn(&b, "w\0x", 3);
	gb_u32(&b, 1);
	gb_u64(&b, 16);
	gb_u32(&b, RG_GGUF_F32);
	gb_u64(&b, 0);
	gb_pad(&b, 32);
	gb_zeros(&b, 64);
	EXPECT_FAIL(&b, RG_ERR_FORMAT, "name contains a NUL byte");
}

static void test_not_a_file(void **state)
{
	char p[512];
	rg_gguf *g = (rg_gguf *)0x1;
	(void)state;

	path_in(p, sizeof(p), "missing.gguf");
	assert_int_equal(rg_gguf_open(p, &g), RG_ERR_IO);
	assert_null(g);
	assert_non_null(strstr(rg_last_error(), "missing.gguf"));
	g = (rg_gguf *)0x1;
	assert_int_equal(rg_gguf_open(g_dir, &g), RG_ERR_IO); /* a directory */
	assert_null(g);
	path_in(p, sizeof(p), "fifo.gguf");
	assert_int_equal(mkfifo(p, 0600), 0);
	assert_int_equal(rg_gguf_open(p, &g), RG_ERR_IO); /* refused without blocking */
	assert_int_equal(rg_gguf_open(NULL, &g), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_gguf_open(p, NULL), RG_ERR_INVALID_INPUT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_valid_file, case_setup),
		cmocka_unit_test_setup(test_dequant_by_hand, case_setup),
		cmocka_unit_test_setup(test_truncated_everywhere, case_setup),
		cmocka_unit_test_setup(test_magic_and_version, case_setup),
		cmocka_unit_test_setup(test_lying_counts, case_setup),
		cmocka_unit_test_setup(test_lying_lengths, case_setup),
		cmocka_unit_test_setup(test_bad_values, case_setup),
		cmocka_unit_test_setup(test_duplicate_keys, case_setup),
		cmocka_unit_test_setup(test_alignment, case_setup),
		cmocka_unit_test_setup(test_bad_dims, case_setup),
		cmocka_unit_test_setup(test_bad_types, case_setup),
		cmocka_unit_test_setup(test_bad_offsets, case_setup),
		cmocka_unit_test_setup(test_overlap_and_duplicate_names, case_setup),
		cmocka_unit_test_setup(test_not_a_file, case_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
