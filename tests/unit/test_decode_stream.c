/* Unit tests for the GGUF-array BPE constructor (src/tokenizer/bpe_gguf.c) and the streaming
 * detokenizer (src/tokenizer/decode_stream.c) on a tiny hand-made byte-level vocabulary: ids
 * 0..255 are the bytes (GPT-2 bytes_to_unicode stand-ins, written out here from GPT-2's
 * encoder.py), then "he", "ll", "hell", "hello", "12", a control token and a user-defined one.
 * Expected ids and texts are worked out by hand from the merges and the pre-tokenizer rules;
 * UTF-8 expectations follow Unicode's "U+FFFD substitution of maximal subparts". HF parity on the
 * real SmolLM2 vocabulary is in tests/py/test_tokenizer_decoder_bpe.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/decode_stream.h"
#include "tokenizer/tokenizer.h"

#define RG_TMP_PREFIX "rg_detok_test"
#include "test_tmpdir.h"

enum { HE = 256, LL, HELL, HELLO, T12, IM_END, USER_TOK, N_TOK };

static char tok_buf[N_TOK][16];
static const char *toks[N_TOK];
static int32_t types[N_TOK];
static const char *merges[] = { "h e", "l l", "he ll", "hell o", "1 2" };
#define N_MERGES ((int)(sizeof(merges) / sizeof(merges[0])))

static size_t put_utf8(uint32_t c, char *o)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	o[0] = (char)(0xC0 | (c >> 6));
	o[1] = (char)(0x80 | (c & 0x3F));
	return 2;
}

/* GPT-2 encoder.py bytes_to_unicode: printable Latin-1 bytes are themselves, the other bytes get
 * 256, 257, ... in byte order. */
static int tok_setup(void **state)
{
	uint32_t n = 0;
	for (int b = 0; b < 256; b++) {
		int self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		size_t k = put_utf8(self ? (uint32_t)b : 256 + n++, tok_buf[b]);
		tok_buf[b][k] = '\0';
		types[b] = 1;
	}
	strcpy(tok_buf[HE], "he");
	strcpy(tok_buf[LL], "ll");
	strcpy(tok_buf[HELL], "hell");
	strcpy(tok_buf[HELLO], "hello");
	strcpy(tok_buf[T12], "12");
	strcpy(tok_buf[IM_END], "<|im_end|>");
	strcpy(tok_buf[USER_TOK], "<u>");
	for (int i = 0; i < N_TOK; i++) {
		toks[i] = tok_buf[i];
		types[i] = i == IM_END ? 3 : i == USER_TOK ? 4 : 1;
	}
	return group_setup(state);
}

static rg_tokenizer *make(const char *pre, bool add_bos)
{
	rg_tokenizer *t = NULL;
	rg_status st = rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, merges, NULL, N_MERGES, types,
						    pre, add_bos ? HE : -1, -1, add_bos, &t);
	assert_int_equal(st, RG_OK);
	assert_non_null(t);
	return t;
}

static void expect_ids(rg_tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
	int32_t *ids = NULL;
	size_t n = 0;
	assert_int_equal(rg_tokenizer_encode(t, text, strlen(text), &ids, &n), RG_OK);
	assert_int_equal(n, n_want);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(ids[i], want[i]);
	free(ids);
}

static void test_encode_pretokenizers(void **state)
{
	(void)state;
	rg_tokenizer *t = make("smollm", false);
	/* Digits(individual): "hello ", "1", "2"; then GPT-2's regex: "hello", " " (trailing) */
	expect_ids(t, "hello 12", (const int32_t[]){ HELLO, ' ', '1', '2' }, 4);
	/* the control and user-defined tokens whole; bytes for the rest */
	expect_ids(t, "hi<|im_end|><u>", (const int32_t[]){ 'h', 'i', IM_END, USER_TOK }, 4);
	expect_ids(t, "<|im_end", (const int32_t[]){ '<', '|', 'i', 'm', '_', 'e', 'n', 'd' }, 8);
	expect_ids(t, "", NULL, 0);
	rg_tokenizer_free(t);

	t = make("gpt2", false);
	/* " 12" is one word: bytes 'Ġ' '1' '2', merged "1 2" */
	expect_ids(t, "hello 12", (const int32_t[]){ HELLO, ' ', T12 }, 3);
	rg_tokenizer_free(t);

	t = make("llama-bpe", false);
	/* Llama 3: "hello", " hello" ([^\r\n\p{L}\p{N}]?\p{L}+), " " (\s+), "123" (\p{N}{1,3}) */
	expect_ids(t, "hello hello 123", (const int32_t[]){ HELLO, ' ', HELLO, ' ', T12, '3' }, 6);
	rg_tokenizer_free(t);

	t = make("qwen2", false);
	expect_ids(t, "x 12", (const int32_t[]){ 'x', ' ', '1', '2' }, 4);
	rg_tokenizer_free(t);

	t = make("smollm", true); /* add_bos: HE stands in for the bos id */
	expect_ids(t, "hello", (const int32_t[]){ HE, HELLO }, 2);
	rg_tokenizer_free(t);
}

static void test_constructor_errors(void **state)
{
	(void)state;
	rg_tokenizer *t = (rg_tokenizer *)1;
	assert_int_equal(rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, merges, NULL, N_MERGES,
						      types, "default", -1, -1, false, &t),
			 RG_ERR_UNSUPPORTED);
	assert_null(t);
	assert_non_null(strstr(rg_last_error(), "default"));
	assert_int_equal(rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, merges, NULL, N_MERGES,
						      types, NULL, -1, -1, false, &t),
			 RG_ERR_UNSUPPORTED);
	assert_int_equal(rg_tokenizer_from_bpe_arrays(NULL, NULL, 0, NULL, NULL, 0, NULL, "gpt2", -1,
						      -1, false, &t),
			 RG_ERR_INVALID_INPUT);
	const char *bad_merge[] = { "h zz" };
	assert_int_equal(rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, bad_merge, NULL, 1, types,
						      "gpt2", -1, -1, false, &t),
			 RG_ERR_FORMAT);
	assert_int_equal(rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, merges, NULL, N_MERGES,
						      types, "gpt2", N_TOK, -1, false, &t),
			 RG_ERR_FORMAT);
	const char *bad_utf8[] = { "a", "\xff" };
	assert_int_equal(rg_tokenizer_from_bpe_arrays(bad_utf8, NULL, 2, NULL, NULL, 0, NULL, "gpt2",
						      -1, -1, false, &t),
			 RG_ERR_FORMAT);
	int32_t bad_types[N_TOK];
	memcpy(bad_types, types, sizeof(bad_types));
	bad_types[5] = 7;
	assert_int_equal(rg_tokenizer_from_bpe_arrays(toks, NULL, N_TOK, merges, NULL, N_MERGES,
						      bad_types, "gpt2", -1, -1, false, &t),
			 RG_ERR_FORMAT);
	assert_null(t);
}

/* Push ids one by one; the pieces must be exactly want[0..n_ids] (the last: the flush), and
 * their concatenation rg_tokenizer_decode of the ids. */
static void expect_stream(rg_tokenizer *t, bool skip, const int32_t *ids, size_t n_ids,
			  const char *const *want)
{
	rg_detok_stream *s = NULL;
	const char *out;
	size_t len;
	char cat[256] = "";
	assert_int_equal(rg_detok_stream_init(t, skip, &s), RG_OK);
	for (size_t i = 0; i <= n_ids; i++) {
		if (i < n_ids)
			assert_int_equal(rg_detok_stream_push(s, ids[i], &out, &len), RG_OK);
		else
			assert_int_equal(rg_detok_stream_flush(s, &out, &len), RG_OK);
		assert_int_equal(len, strlen(want[i]));
		assert_memory_equal(out, want[i], len);
		assert_int_equal(out[len], '\0');
		strncat(cat, out, sizeof(cat) - strlen(cat) - 1);
	}
	rg_detok_stream_free(s);
	char *full = NULL;
	assert_int_equal(rg_tokenizer_decode(t, ids, n_ids, skip, &full, &len), RG_OK);
	assert_string_equal(full, cat);
	free(full);
}

#define FFFD "\xEF\xBF\xBD"

static void test_stream(void **state)
{
	(void)state;
	rg_tokenizer *t = make("smollm", false);
	/* U+1F600 as its four byte tokens: held until the last */
	expect_stream(t, false, (const int32_t[]){ 0xF0, 0x9F, 0x98, 0x80 }, 4,
		      (const char *const[]){ "", "", "", "\xF0\x9F\x98\x80", "" });
	/* é split over two tokens after a whole word */
	expect_stream(t, false, (const int32_t[]){ HELLO, 0xC3, 0xA9, ' ' }, 4,
		      (const char *const[]){ "hello", "", "\xC3\xA9", " ", "" });
	/* an unfinished character at the end: one U+FFFD at the flush */
	expect_stream(t, false, (const int32_t[]){ 'a', 0xF0, 0x9F }, 3,
		      (const char *const[]){ "a", "", "", FFFD });
	/* a lead byte then ASCII: U+FFFD as soon as the ASCII arrives */
	expect_stream(t, false, (const int32_t[]){ 0xE2, 'a' }, 2,
		      (const char *const[]){ "", FFFD "a", "" });
	/* a stray continuation byte; E0 80 (overlong): two maximal subparts; F4 90 (> U+10FFFF) */
	expect_stream(t, false, (const int32_t[]){ 0x80, 0xE0, 0x80, 0xF4, 0x90, 'z' }, 6,
		      (const char *const[]){ FFFD, "", FFFD FFFD, "", FFFD FFFD, "z", "" });
	/* special tokens: text unless skipped; ids outside the vocabulary give nothing */
	expect_stream(t, false, (const int32_t[]){ 'h', IM_END, USER_TOK, -5, N_TOK + 3 }, 5,
		      (const char *const[]){ "h", "<|im_end|>", "<u>", "", "", "" });
	expect_stream(t, true, (const int32_t[]){ 'h', IM_END, USER_TOK }, 3,
		      (const char *const[]){ "h", "", "<u>", "" });
	/* a control token in the middle of a split character ends it (as the full decode does) */
	expect_stream(t, false, (const int32_t[]){ 0xC3, IM_END }, 2,
		      (const char *const[]){ "", FFFD "<|im_end|>", "" });
	expect_stream(t, false, NULL, 0, (const char *const[]){ "" });

	rg_detok_stream *s = NULL;
	assert_int_equal(rg_detok_stream_init(NULL, false, &s), RG_ERR_INVALID_INPUT);
	assert_null(s);
	rg_detok_stream_free(NULL);
	rg_tokenizer_free(t);
}

static void write_file(const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", g_dir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* GPT-2's vocab.json + merges.txt: the same vocabulary, <|endoftext|> = N_TOK special. */
static void test_gpt2_files(void **state)
{
	(void)state;
	char *json = malloc(16 * N_TOK + 64), *o = json;
	o += sprintf(o, "{");
	for (int i = 0; i < N_TOK; i++) {
		o += sprintf(o, "\"");
		for (const char *c = toks[i]; *c; c++) {
			if (*c == '"' || *c == '\\')
				*o++ = '\\';
			*o++ = *c;
		}
		o += sprintf(o, "\": %d, ", i);
	}
	sprintf(o, "\"<|endoftext|>\": %d}", N_TOK);
	write_file("vocab.json", json);
	free(json);
	write_file("merges.txt", "#version: 0.2\nh e\nl l\r\nhe ll\nhell o\n1 2\n");
	rg_tokenizer *t = NULL;
	assert_int_equal(rg_tokenizer_load(g_dir, &t), RG_OK);
	expect_ids(t, "hello 12<|endoftext|>", (const int32_t[]){ HELLO, ' ', T12, N_TOK }, 4);
	/* only <|endoftext|> is an added token here */
	expect_ids(t, "<u>", (const int32_t[]){ '<', 'u', '>' }, 3);
	expect_ids(t, "\"\\", (const int32_t[]){ '"', '\\' }, 2);
	char *text = NULL;
	size_t len;
	assert_int_equal(rg_tokenizer_decode(t, (const int32_t[]){ HELLO, N_TOK, ' ' }, 3, true,
					     &text, &len),
			 RG_OK);
	assert_string_equal(text, "hello ");
	free(text);
	rg_tokenizer_free(t);

	write_file("merges.txt", "h e\nh zz\n");
	assert_int_equal(rg_tokenizer_load(g_dir, &t), RG_ERR_FORMAT);
	assert_non_null(strstr(rg_last_error(), "zz"));
	write_file("merges.txt", "h e x\n");
	assert_int_equal(rg_tokenizer_load(g_dir, &t), RG_ERR_FORMAT);
	write_file("vocab.json", "[1]");
	assert_int_equal(rg_tokenizer_load(g_dir, &t), RG_ERR_FORMAT);
	assert_null(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_pretokenizers),
		cmocka_unit_test(test_constructor_errors),
		cmocka_unit_test(test_stream),
		cmocka_unit_test_setup(test_gpt2_files, case_setup),
	};
	return cmocka_run_group_tests(tests, tok_setup, group_teardown);
}
