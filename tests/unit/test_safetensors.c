/* Unit tests for the validating safetensors reader (src/core/safetensors.c).
 * Every malformed-file test asserts both the status and that the message names the culprit
 * (file and tensor). Expected float values are exact IEEE constants written by hand, not output
 * of the code under test. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/safetensors.h"

#define RG_TMP_PREFIX "rg_st_test"
#include "test_tmpdir.h"

static void path_in(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", g_dir, name);
}

static void write_raw(const char *name, const void *bytes, size_t len)
{
	char p[512];
	FILE *f;
	path_in(p, sizeof(p), name);
	f = fopen(p, "wb");
	assert_non_null(f);
	if (len)
		assert_int_equal(fwrite(bytes, 1, len, f), len);
	fclose(f);
}

/* Write a safetensors file: LE u64 header length (hlen_override if non-zero, else the real one),
 * the header padded with spaces to a multiple of 8, then data. */
static void write_st_ex(const char *name, const char *header, const void *data, size_t data_len,
			uint64_t hlen_override)
{
	size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
	size_t total = 8 + padded + data_len;
	uint8_t *buf = malloc(total);
	uint64_t hlen = hlen_override ? hlen_override : padded;
	assert_non_null(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)(hlen >> (8 * i));
	memset(buf + 8, ' ', padded);
	memcpy(buf + 8, header, hl);
	if (data_len)
		memcpy(buf + 8 + padded, data, data_len);
	write_raw(name, buf, total);
	free(buf);
}

static void write_st(const char *name, const char *header, const void *data, size_t data_len)
{
	write_st_ex(name, header, data, data_len, 0);
}

/* Open <g_dir>/name and expect failure with status want and message containing every needle. */
static void expect_fail_file(const char *name, rg_status want, ...)
{
	char p[512];
	rg_st *st = (rg_st *)0x1;
	rg_status s;
	va_list ap;
	const char *needle;

	path_in(p, sizeof(p), name);
	rg_error_clear();
	s = rg_st_open_file(p, &st);
	if (s != want)
		fail_msg("status %s, want %s; message: %s", rg_status_name(s), rg_status_name(want),
			 rg_last_error());
	assert_null(st);
	va_start(ap, want);
	while ((needle = va_arg(ap, const char *)) != NULL) {
		if (!strstr(rg_last_error(), needle))
			fail_msg("message '%s' does not contain '%s'", rg_last_error(), needle);
	}
	va_end(ap);
}

static void expect_fail_dir(rg_status want, ...)
{
	rg_st *st = (rg_st *)0x1;
	rg_status s;
	va_list ap;
	const char *needle;

	rg_error_clear();
	s = rg_st_open_dir(g_dir, &st);
	if (s != want)
		fail_msg("status %s, want %s; message: %s", rg_status_name(s), rg_status_name(want),
			 rg_last_error());
	assert_null(st);
	va_start(ap, want);
	while ((needle = va_arg(ap, const char *)) != NULL) {
		if (!strstr(rg_last_error(), needle))
			fail_msg("message '%s' does not contain '%s'", rg_last_error(), needle);
	}
	va_end(ap);
}

static void assert_same_float(float got, float want)
{
	uint32_t g, w;
	if (isnan(want)) {
		if (!isnan(got))
			fail_msg("got %a, want NaN", (double)got);
		return;
	}
	memcpy(&g, &got, 4);
	memcpy(&w, &want, 4);
	if (g != w)
		fail_msg("got %a (0x%08x), want %a (0x%08x)", (double)got, g, (double)want, w);
}

/* ---------------------------------------------------------------------------------------------- */

static const float k_f32[4] = {1.0f, -2.5f, 0x1p-149f, 3.0e38f};
static const uint16_t k_f16[12] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x0400, 0x7BFF,
				   0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3555, 0x0000};
static const uint16_t k_bf16[6] = {0x3F80, 0xC040, 0x4049, 0x0001, 0x7F80, 0xFFC0};

static void write_valid(const char *name)
{
	uint8_t data[16 + 24 + 12];
	memcpy(data, k_f32, 16);
	for (int i = 0; i < 12; i++) {
		data[16 + 2 * i] = (uint8_t)(k_f16[i] & 0xff);
		data[16 + 2 * i + 1] = (uint8_t)(k_f16[i] >> 8);
	}
	for (int i = 0; i < 6; i++) {
		data[40 + 2 * i] = (uint8_t)(k_bf16[i] & 0xff);
		data[40 + 2 * i + 1] = (uint8_t)(k_bf16[i] >> 8);
	}
	write_st(name,
		 "{\"__metadata__\":{\"format\":\"pt\"},"
		 "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
		 "\"w.f16\":{\"dtype\":\"F16\",\"shape\":[3,1,4],\"data_offsets\":[16,40]},"
		 "\"w.bf16\":{\"dtype\":\"BF16\",\"shape\":[6],\"data_offsets\":[40,52]}}",
		 data, sizeof(data));
}

static void test_valid_file(void **state)
{
	char p[512];
	rg_st *st = NULL;
	const rg_st_tensor *t;
	float out[12];
	/* independent expectations: the IEEE values of the bit patterns above */
	const float want_f16[12] = {1.0f, -2.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f, 65504.0f,
				    INFINITY, -INFINITY, NAN, -0.0f, 0.333251953125f, 0.0f};
	const float want_bf16[6] = {1.0f, -3.0f, 3.140625f, 0x1p-133f, INFINITY, NAN};
	(void)state;

	write_valid("model.safetensors");
	path_in(p, sizeof(p), "model.safetensors");
	assert_int_equal(rg_st_open_file(p, &st), RG_OK);
	assert_non_null(st);
	assert_int_equal(rg_st_count(st), 3);
	assert_null(rg_st_find(st, "__metadata__"));
	assert_null(rg_st_find(st, "missing"));
	assert_null(rg_st_at(st, 3));

	t = rg_st_find(st, "w.f32");
	assert_non_null(t);
	assert_string_equal(t->name, "w.f32");
	assert_int_equal(t->dtype, RG_DTYPE_F32);
	assert_int_equal(t->ndim, 2);
	assert_int_equal(t->shape[0], 2);
	assert_int_equal(t->shape[1], 2);
	assert_int_equal(t->nbytes, 16);
	assert_int_equal(rg_st_numel(t), 4);
	rg_st_to_f32(t, out);
	for (int i = 0; i < 4; i++)
		assert_same_float(out[i], k_f32[i]);

	t = rg_st_find(st, "w.f16");
	assert_non_null(t);
	assert_int_equal(t->dtype, RG_DTYPE_F16);
	assert_int_equal(t->ndim, 3);
	assert_int_equal(t->shape[2], 4);
	assert_int_equal(rg_st_numel(t), 12);
	assert_int_equal(t->nbytes, 24);
	rg_st_to_f32(t, out);
	for (int i = 0; i < 12; i++)
		assert_same_float(out[i], want_f16[i]);

	t = rg_st_find(st, "w.bf16");
	assert_non_null(t);
	assert_int_equal(t->dtype, RG_DTYPE_BF16);
	assert_int_equal(rg_st_numel(t), 6);
	rg_st_to_f32(t, out);
	for (int i = 0; i < 6; i++)
		assert_same_float(out[i], want_bf16[i]);

	/* rg_st_at visits every tensor exactly once */
	{
		int seen = 0;
		for (size_t i = 0; i < rg_st_count(st); i++) {
			const char *n = rg_st_at(st, i)->name;
			seen |= !strcmp(n, "w.f32") ? 1 : !strcmp(n, "w.f16") ? 2 :
				!strcmp(n, "w.bf16") ? 4 : 8;
		}
		assert_int_equal(seen, 7);
	}
	rg_st_free(st);
	rg_st_free(NULL);
}

static void test_scalar_and_empty_tensor(void **state)
{
	char p[512];
	rg_st *st = NULL;
	float v = 7.0f;
	(void)state;
	/* 0-d scalar holds one element; a [0,3] tensor holds none and may sit anywhere */
	write_st("x.safetensors",
		 "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
		 "\"e\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[2,2]}}",
		 &v, 4);
	path_in(p, sizeof(p), "x.safetensors");
	assert_int_equal(rg_st_open_file(p, &st), RG_OK);
	assert_int_equal(rg_st_numel(rg_st_find(st, "s")), 1);
	assert_int_equal(rg_st_numel(rg_st_find(st, "e")), 0);
	rg_st_free(st);
}

static void test_truncated_data(void **state)
{
	(void)state;
	uint8_t data[16] = {0};
	/* header claims 16 bytes, file holds 10 */
	write_st("t.safetensors",
		 "{\"enc.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data,
		 10);
	expect_fail_file("t.safetensors", RG_ERR_FORMAT, "t.safetensors", "'enc.weight'",
			 "exceed data size 10", NULL);
}

static void test_truncated_header(void **state)
{
	const char *h = "{\"enc.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
	uint8_t buf[8 + 20];
	uint64_t hl = 72;
	(void)state;
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)(hl >> (8 * i));
	memcpy(buf + 8, h, 20);
	write_raw("th.safetensors", buf, sizeof(buf));
	expect_fail_file("th.safetensors", RG_ERR_FORMAT, "th.safetensors", "header length 72",
			 "exceeds", NULL);
}

static void test_header_len_larger_than_file(void **state)
{
	(void)state;
	write_st_ex("l.safetensors", "{}", NULL, 0, 9);
	expect_fail_file("l.safetensors", RG_ERR_FORMAT, "l.safetensors", "header length 9",
			 "exceeds the 8 bytes", NULL);
}

static void test_header_len_huge(void **state)
{
	(void)state;
	write_st_ex("h.safetensors", "{}", NULL, 0, (uint64_t)1 << 60);
	expect_fail_file("h.safetensors", RG_ERR_FORMAT, "h.safetensors",
			 "header length 1152921504606846976", "limit", NULL);
	write_st_ex("h2.safetensors", "{}", NULL, 0, UINT64_MAX);
	expect_fail_file("h2.safetensors", RG_ERR_FORMAT, "h2.safetensors",
			 "header length 18446744073709551615", NULL);
}

static void test_header_not_json(void **state)
{
	(void)state;
	write_st("j.safetensors", "{not json at all}", NULL, 0);
	expect_fail_file("j.safetensors", RG_ERR_FORMAT, "j.safetensors", "header",
			 "not valid JSON", NULL);
	/* a valid object followed by garbage */
	write_st("j2.safetensors", "{}garbage", NULL, 0);
	expect_fail_file("j2.safetensors", RG_ERR_FORMAT, "j2.safetensors", "not valid JSON",
			 NULL);
	/* NUL byte inside the header */
	{
		uint8_t raw[8 + 8] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' '};
		write_raw("j3.safetensors", raw, sizeof(raw));
	}
	expect_fail_file("j3.safetensors", RG_ERR_FORMAT, "j3.safetensors", "NUL", NULL);
	/* invalid UTF-8 in a tensor name */
	write_st("j4.safetensors",
		 "{\"bad\xff\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", NULL, 0);
	expect_fail_file("j4.safetensors", RG_ERR_FORMAT, "j4.safetensors", "not valid JSON",
			 NULL);
}

static void test_header_not_object(void **state)
{
	(void)state;
	write_st("a.safetensors", "[1, 2, 3]", NULL, 0);
	expect_fail_file("a.safetensors", RG_ERR_FORMAT, "a.safetensors", "not an object", NULL);
	write_st("b.safetensors", "{\"enc.bias\": 5}", NULL, 0);
	expect_fail_file("b.safetensors", RG_ERR_FORMAT, "b.safetensors", "'enc.bias'",
			 "not a JSON object", NULL);
}

static void test_unknown_dtype(void **state)
{
	uint8_t data[8] = {0};
	(void)state;
	write_st("d.safetensors",
		 "{\"ok\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
		 "\"enc.layer.0.ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
		 data, 8);
	expect_fail_file("d.safetensors", RG_ERR_UNSUPPORTED, "d.safetensors", "'enc.layer.0.ids'",
			 "I64", NULL);
	write_st("d2.safetensors",
		 "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data, 8);
	expect_fail_file("d2.safetensors", RG_ERR_UNSUPPORTED, "'w'", "F64", NULL);
	write_st("d3.safetensors",
		 "{\"q\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", data, 8);
	expect_fail_file("d3.safetensors", RG_ERR_UNSUPPORTED, "'q'", "U8", NULL);
	write_st("d5.safetensors",
		 "{\"q\":{\"dtype\":\"Q4_K\",\"shape\":[8],\"data_offsets\":[0,8]}}", data, 8);
	expect_fail_file("d5.safetensors", RG_ERR_UNSUPPORTED, "'q'", "unknown dtype Q4_K", NULL);
	write_st("d4.safetensors", "{\"q\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}",
		 data, 8);
	expect_fail_file("d4.safetensors", RG_ERR_FORMAT, "'q'", "dtype", NULL);
}

/* transformers < 4.31 saved BertEmbeddings.position_ids (I64) with the weights: such a buffer is
 * validated like any tensor, then left out of the table rather than refusing the model. */
static void test_integer_buffer_skipped(void **state)
{
	char p[512];
	rg_st *st = NULL;
	uint8_t data[24] = {0};
	(void)state;
	write_st("pb.safetensors",
		 "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,2],"
		 "\"data_offsets\":[0,16]},"
		 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
		 data, 24);
	path_in(p, sizeof(p), "pb.safetensors");
	assert_int_equal(rg_st_open_file(p, &st), RG_OK);
	assert_int_equal(rg_st_count(st), 1);
	assert_string_equal(rg_st_at(st, 0)->name, "w");
	assert_null(rg_st_find(st, "embeddings.position_ids"));
	rg_st_free(st);
	/* still validated: wrong size and overlap are refused */
	write_st("pb2.safetensors",
		 "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,3],"
		 "\"data_offsets\":[0,16]}}",
		 data, 24);
	expect_fail_file("pb2.safetensors", RG_ERR_FORMAT, "'embeddings.position_ids'", "24 bytes",
			 NULL);
	write_st("pb3.safetensors",
		 "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,2],"
		 "\"data_offsets\":[0,16]},"
		 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		 data, 24);
	expect_fail_file("pb3.safetensors", RG_ERR_FORMAT, "'embeddings.position_ids'", "'w'",
			 "overlap", NULL);
	/* the name must really be the buffer, not merely end in those letters */
	write_st("pb4.safetensors",
		 "{\"myposition_ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
		 data, 24);
	expect_fail_file("pb4.safetensors", RG_ERR_UNSUPPORTED, "'myposition_ids'", "I64", NULL);
}

static void test_shape_size_mismatch(void **state)
{
	uint8_t data[12] = {0};
	(void)state;
	write_st("s.safetensors",
		 "{\"layer.0.w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 12);
	expect_fail_file("s.safetensors", RG_ERR_FORMAT, "s.safetensors", "'layer.0.w'",
			 "12 bytes", "[0,8]", NULL);
	/* shape product overflowing 64 bits */
	write_st("s2.safetensors",
		 "{\"big\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
		 "\"data_offsets\":[0,8]}}",
		 data, 12);
	expect_fail_file("s2.safetensors", RG_ERR_FORMAT, "'big'", "overflow", NULL);
	/* too many dimensions */
	write_st("s3.safetensors",
		 "{\"nd\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
		 data, 12);
	expect_fail_file("s3.safetensors", RG_ERR_UNSUPPORTED, "'nd'", "9 dimensions", NULL);
	/* non-integer dimension */
	write_st("s4.safetensors",
		 "{\"fl\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", data, 12);
	expect_fail_file("s4.safetensors", RG_ERR_FORMAT, "'fl'", "shape[0]", NULL);
}

static void test_offsets_beyond_data(void **state)
{
	uint8_t data[8] = {0};
	(void)state;
	write_st("o.safetensors",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"encoder.layer.0.attention.self.query.weight\":"
		 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		 data, 8);
	expect_fail_file("o.safetensors", RG_ERR_FORMAT, "o.safetensors",
			 "'encoder.layer.0.attention.self.query.weight'",
			 "data_offsets [8,16] exceed data size 8", NULL);
	write_st("o2.safetensors", "{\"r\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
		 data, 8);
	expect_fail_file("o2.safetensors", RG_ERR_FORMAT, "'r'", "begin > end", NULL);
	write_st("o3.safetensors", "{\"n\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[-4,0]}}",
		 data, 8);
	expect_fail_file("o3.safetensors", RG_ERR_FORMAT, "'n'", "data_offsets", NULL);
	write_st("o4.safetensors", "{\"n3\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}",
		 data, 8);
	expect_fail_file("o4.safetensors", RG_ERR_FORMAT, "'n3'", "data_offsets", NULL);
	/* an offset beyond uint64 range parses as a huge number and must still be refused */
	write_st("o5.safetensors",
		 "{\"u\":{\"dtype\":\"F32\",\"shape\":[2],"
		 "\"data_offsets\":[18446744073709551615,18446744073709551615]}}",
		 data, 8);
	expect_fail_file("o5.safetensors", RG_ERR_FORMAT, "'u'", NULL);
}

static void test_overlapping_tensors(void **state)
{
	uint8_t data[16] = {0};
	(void)state;
	write_st("ov.safetensors",
		 "{\"first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
		 data, 16);
	expect_fail_file("ov.safetensors", RG_ERR_FORMAT, "ov.safetensors", "'second'", "'first'",
			 "overlap", NULL);
	/* a tensor fully inside another, listed first */
	write_st("ov2.safetensors",
		 "{\"inner\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
		 "\"outer\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
		 data, 16);
	expect_fail_file("ov2.safetensors", RG_ERR_FORMAT, "'inner'", "'outer'", "overlap", NULL);
	/* identical ranges */
	write_st("ov3.safetensors",
		 "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"y\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}",
		 data, 16);
	expect_fail_file("ov3.safetensors", RG_ERR_FORMAT, "overlap", NULL);
}

static void test_negative_shape(void **state)
{
	uint8_t data[8] = {0};
	(void)state;
	write_st("n.safetensors",
		 "{\"neg.weight\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8);
	expect_fail_file("n.safetensors", RG_ERR_FORMAT, "n.safetensors", "'neg.weight'",
			 "shape[0] = -2", NULL);
}

static void test_duplicate_names(void **state)
{
	uint8_t data[16] = {0};
	(void)state;
	write_st("dup.safetensors",
		 "{\"twice\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"other\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
		 "\"twice\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
		 data, 16);
	expect_fail_file("dup.safetensors", RG_ERR_FORMAT, "dup.safetensors", "'twice'",
			 "appears twice", NULL);
	/* a string value that looks like a key does not count as a duplicate */
	write_st("dup2.safetensors",
		 "{\"__metadata__\":{\"k\":\"twice\"},"
		 "\"twice\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
		 data, 16);
	{
		char p[512];
		rg_st *st = NULL;
		path_in(p, sizeof(p), "dup2.safetensors");
		assert_int_equal(rg_st_open_file(p, &st), RG_OK);
		rg_st_free(st);
	}
}

static void test_tiny_files(void **state)
{
	uint8_t seven[7] = {2, 0, 0, 0, 0, 0, 0};
	(void)state;
	write_raw("empty.safetensors", NULL, 0);
	expect_fail_file("empty.safetensors", RG_ERR_FORMAT, "empty.safetensors", "0 bytes",
			 NULL);
	write_raw("seven.safetensors", seven, 7);
	expect_fail_file("seven.safetensors", RG_ERR_FORMAT, "seven.safetensors", "7 bytes",
			 NULL);
	/* header length zero: no room for "{}" */
	write_st_ex("zero.safetensors", "", NULL, 0, 0);
	expect_fail_file("zero.safetensors", RG_ERR_FORMAT, "zero.safetensors", "too small", NULL);
}

static void test_missing_and_not_regular(void **state)
{
	char p[512];
	(void)state;
	expect_fail_file("nope.safetensors", RG_ERR_IO, "nope.safetensors", "cannot open", NULL);
	path_in(p, sizeof(p), "adir.safetensors");
	assert_int_equal(mkdir(p, 0700), 0);
	expect_fail_file("adir.safetensors", RG_ERR_IO, "adir.safetensors", "not a regular file",
			 NULL);
	/* a model directory with no weights at all */
	expect_fail_dir(RG_ERR_IO, g_dir, "model.safetensors", NULL);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sharded checkpoints */

static void write_two_shards(void)
{
	float a[2] = {1.0f, 2.0f}, b[3] = {3.0f, 4.0f, 5.0f};
	write_st("model-00001-of-00002.safetensors",
		 "{\"emb.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8);
	write_st("model-00002-of-00002.safetensors",
		 "{\"pool.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", b, 12);
}

static void write_index(const char *weight_map)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "{\"metadata\":{\"total_size\":20},\"weight_map\":%s}",
		 weight_map);
	write_raw("model.safetensors.index.json", buf, strlen(buf));
}

static void test_sharded_valid(void **state)
{
	rg_st *st = NULL;
	const rg_st_tensor *t;
	float out[3];
	(void)state;
	write_two_shards();
	write_index("{\"emb.weight\":\"model-00001-of-00002.safetensors\","
		    "\"pool.weight\":\"model-00002-of-00002.safetensors\"}");
	assert_int_equal(rg_st_open_dir(g_dir, &st), RG_OK);
	assert_int_equal(rg_st_count(st), 2);
	t = rg_st_find(st, "pool.weight");
	assert_non_null(t);
	rg_st_to_f32(t, out);
	assert_same_float(out[0], 3.0f);
	assert_same_float(out[2], 5.0f);
	t = rg_st_find(st, "emb.weight");
	assert_non_null(t);
	rg_st_to_f32(t, out);
	assert_same_float(out[1], 2.0f);
	rg_st_free(st);
}

static void test_single_file_preferred(void **state)
{
	rg_st *st = NULL;
	(void)state;
	write_valid("model.safetensors");
	/* a broken index next to model.safetensors is never read */
	write_raw("model.safetensors.index.json", "garbage", 7);
	assert_int_equal(rg_st_open_dir(g_dir, &st), RG_OK);
	assert_int_equal(rg_st_count(st), 3);
	rg_st_free(st);
}

static void test_sharded_missing_shard(void **state)
{
	float a[2] = {1.0f, 2.0f};
	(void)state;
	write_st("model-00001-of-00002.safetensors",
		 "{\"emb.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8);
	write_index("{\"emb.weight\":\"model-00001-of-00002.safetensors\","
		    "\"pool.weight\":\"model-00002-of-00002.safetensors\"}");
	expect_fail_dir(RG_ERR_IO, "model-00002-of-00002.safetensors", "cannot open", NULL);
}

static void test_sharded_tensor_not_in_shard(void **state)
{
	(void)state;
	write_two_shards();
	/* the index claims pool.weight is in shard 1; it is in shard 2 */
	write_index("{\"emb.weight\":\"model-00001-of-00002.safetensors\","
		    "\"pool.weight\":\"model-00001-of-00002.safetensors\","
		    "\"other\":\"model-00002-of-00002.safetensors\"}");
	expect_fail_dir(RG_ERR_FORMAT, "'pool.weight'", "model-00001-of-00002.safetensors", NULL);
}

static void test_sharded_tensor_absent(void **state)
{
	(void)state;
	write_two_shards();
	write_index("{\"emb.weight\":\"model-00001-of-00002.safetensors\","
		    "\"pool.weight\":\"model-00002-of-00002.safetensors\","
		    "\"ghost.bias\":\"model-00002-of-00002.safetensors\"}");
	expect_fail_dir(RG_ERR_FORMAT, "'ghost.bias'", "model-00002-of-00002.safetensors", NULL);
}

static void test_sharded_bad_index(void **state)
{
	(void)state;
	write_two_shards();
	write_index("{\"emb.weight\":\"../model-00001-of-00002.safetensors\"}");
	expect_fail_dir(RG_ERR_FORMAT, "'emb.weight'", "../model-00001-of-00002.safetensors",
			NULL);
	write_index("{\"emb.weight\":\"sub/x.safetensors\"}");
	expect_fail_dir(RG_ERR_FORMAT, "sub/x.safetensors", NULL);
	write_index("{\"emb.weight\":3}");
	expect_fail_dir(RG_ERR_FORMAT, "'emb.weight'", "not a string", NULL);
	write_raw("model.safetensors.index.json", "{\"metadata\":{}}", 15);
	expect_fail_dir(RG_ERR_FORMAT, "weight_map", NULL);
	write_raw("model.safetensors.index.json", "{\"weight_map\":", 14);
	expect_fail_dir(RG_ERR_FORMAT, "model.safetensors.index.json", "not valid JSON", NULL);
}

static void test_sharded_duplicate_across_shards(void **state)
{
	float a[2] = {1.0f, 2.0f};
	(void)state;
	write_st("s1.safetensors",
		 "{\"emb.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8);
	write_st("s2.safetensors",
		 "{\"emb.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8);
	write_index("{\"emb.weight\":\"s1.safetensors\",\"x\":\"s2.safetensors\"}");
	expect_fail_dir(RG_ERR_FORMAT, "'emb.weight'", "s1.safetensors", "s2.safetensors", NULL);
}

static void test_sharded_corrupt_shard(void **state)
{
	float a[2] = {1.0f, 2.0f};
	(void)state;
	write_st("s1.safetensors",
		 "{\"emb.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", a, 8);
	write_st("s2.safetensors",
		 "{\"pos\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", a, 8);
	write_index("{\"emb.weight\":\"s1.safetensors\",\"pos\":\"s2.safetensors\"}");
	expect_fail_dir(RG_ERR_UNSUPPORTED, "s2.safetensors", "'pos'", "I64", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_valid_file, case_setup),
		cmocka_unit_test_setup(test_scalar_and_empty_tensor, case_setup),
		cmocka_unit_test_setup(test_truncated_data, case_setup),
		cmocka_unit_test_setup(test_truncated_header, case_setup),
		cmocka_unit_test_setup(test_header_len_larger_than_file, case_setup),
		cmocka_unit_test_setup(test_header_len_huge, case_setup),
		cmocka_unit_test_setup(test_header_not_json, case_setup),
		cmocka_unit_test_setup(test_header_not_object, case_setup),
		cmocka_unit_test_setup(test_unknown_dtype, case_setup),
		cmocka_unit_test_setup(test_integer_buffer_skipped, case_setup),
		cmocka_unit_test_setup(test_shape_size_mismatch, case_setup),
		cmocka_unit_test_setup(test_offsets_beyond_data, case_setup),
		cmocka_unit_test_setup(test_overlapping_tensors, case_setup),
		cmocka_unit_test_setup(test_negative_shape, case_setup),
		cmocka_unit_test_setup(test_duplicate_names, case_setup),
		cmocka_unit_test_setup(test_tiny_files, case_setup),
		cmocka_unit_test_setup(test_missing_and_not_regular, case_setup),
		cmocka_unit_test_setup(test_sharded_valid, case_setup),
		cmocka_unit_test_setup(test_single_file_preferred, case_setup),
		cmocka_unit_test_setup(test_sharded_missing_shard, case_setup),
		cmocka_unit_test_setup(test_sharded_tensor_not_in_shard, case_setup),
		cmocka_unit_test_setup(test_sharded_tensor_absent, case_setup),
		cmocka_unit_test_setup(test_sharded_bad_index, case_setup),
		cmocka_unit_test_setup(test_sharded_duplicate_across_shards, case_setup),
		cmocka_unit_test_setup(test_sharded_corrupt_shard, case_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
