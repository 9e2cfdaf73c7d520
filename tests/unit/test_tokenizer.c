/* Unit tests for the BERT WordPiece tokenizer (src/tokenizer/) on a tiny hand-written vocabulary.
 * Every expected id list below was worked out by hand from the vocabulary in TINY_JSON and the
 * WordPiece rules (greedy longest match first, "##" continuation, unmatched piece or a word longer
 * than max_input_chars_per_word -> one [UNK]). HF parity on real data is in tests/py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

enum {
	PAD,
	UNK,
	CLS,
	SEP,
	MASK,
	UN,
	UNA,
	FF,
	AFF,
	ABLE,
	A_CONT,
	HELLO,
	COMMA,
	BANG,
	CAF,
	E_CONT,
	CAFE,
	X,
	X_CONT,
	ZHE,
	ZHE_CONT,
	N_VOCAB
};

static const char *VOCAB[N_VOCAB] = {
	"[PAD]",      "[UNK]", "[CLS]", "[SEP]", "[MASK]",
	"un",	      "una",   "##ff",	"##aff", "##able",
	"##a",	      "hello", ",",	"!",	 "caf",
	"##e",	      "cafe",  "x",	"##x",	 "\xd0\xb6" /* ж */,
	"##\xd0\xb6",
};

#define RG_TMP_PREFIX "rg_tok_test"
#include "test_tmpdir.h"

static void write_file(const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", g_dir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* tokenizer.json with the tiny vocab; model_extra / normalizer are spliced in. */
static void write_tiny_json(const char *model_type, int max_chars, const char *normalizer)
{
	char buf[8192];
	int n = snprintf(buf, sizeof(buf), "{\"version\": \"1.0\", \"added_tokens\": [");
	for (int i = PAD; i <= MASK; i++)
		n += snprintf(buf + n, sizeof(buf) - n,
			      "%s{\"id\": %d, \"content\": \"%s\", \"special\": true, "
			      "\"normalized\": false, \"lstrip\": false, \"rstrip\": false, "
			      "\"single_word\": false}",
			      i ? ", " : "", i, VOCAB[i]);
	n += snprintf(buf + n, sizeof(buf) - n,
		      "], \"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
		      "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
		      "{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, "
		      "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
		      "{\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], \"pair\": [], "
		      "\"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [%d], "
		      "\"tokens\": [\"[CLS]\"]}, \"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [%d], "
		      "\"tokens\": [\"[SEP]\"]}}}, "
		      "\"model\": {\"type\": \"%s\", \"unk_token\": \"[UNK]\", "
		      "\"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": %d, "
		      "\"vocab\": {",
		      normalizer, CLS, SEP, model_type, max_chars);
	for (int i = 0; i < N_VOCAB; i++)
		n += snprintf(buf + n, sizeof(buf) - n, "%s\"%s\": %d", i ? ", " : "", VOCAB[i], i);
	snprintf(buf + n, sizeof(buf) - n, "}}}");
	write_file("tokenizer.json", buf);
}

static const char *BERT_NORM = "{\"type\": \"BertNormalizer\", \"clean_text\": true, "
			       "\"handle_chinese_chars\": true, \"strip_accents\": null, "
			       "\"lowercase\": true}";

static rg_tokenizer *load_ok(void)
{
	rg_tokenizer *t = NULL;
	rg_status st = rg_tokenizer_load(g_dir, &t);
	if (st != RG_OK)
		fail_msg("load: %s: %s", rg_status_name(st), rg_last_error());
	return t;
}

/* Encode text and compare with want[0..n_want). */
static void check(const rg_tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
	int32_t *ids = NULL;
	size_t n = 0;
	rg_status st = rg_tokenizer_encode(t, text, strlen(text), &ids, &n);
	if (st != RG_OK)
		fail_msg("encode \"%s\": %s: %s", text, rg_status_name(st), rg_last_error());
	assert_non_null(ids);
	if (n != n_want)
		fail_msg("\"%s\": %zu ids, want %zu", text, n, n_want);
	for (size_t i = 0; i < n; i++)
		if (ids[i] != want[i])
			fail_msg("\"%s\": id %zu is %d, want %d", text, i, ids[i], want[i]);
	free(ids);
}

#define CHECK(t, text, ...)                                                                        \
	do {                                                                                       \
		const int32_t w_[] = { __VA_ARGS__ };                                              \
		check(t, text, w_, sizeof(w_) / sizeof(w_[0]));                                    \
	} while (0)

static void test_greedy_longest_match(void **state)
{
	(void)state;
	write_tiny_json("WordPiece", 100, BERT_NORM);
	rg_tokenizer *t = load_ok();
	/* "una" beats "un"; then "##ff" (no "##ffable"), then "##able" */
	CHECK(t, "unaffable", CLS, UNA, FF, ABLE, SEP);
	CHECK(t, "una", CLS, UNA, SEP);
	CHECK(t, "unx", CLS, UN, X_CONT, SEP);
	CHECK(t, "cafe caf", CLS, CAFE, CAF, SEP);
	CHECK(t, "cafee", CLS, CAFE, E_CONT, SEP);
	/* lowercase + strip accents (strip_accents null follows lowercase) */
	CHECK(t, "Caf\xc3\xa9 HELLO", CLS, CAFE, HELLO, SEP);
	/* punctuation is isolated, whitespace removed */
	CHECK(t, "hello,hello!", CLS, HELLO, COMMA, HELLO, BANG, SEP);
	CHECK(t, " \t hello \xe3\x80\x80 ! ", CLS, HELLO, BANG, SEP);
	/* control / zero-width chars are dropped by clean_text */
	CHECK(t, "hel\xe2\x80\x8blo\x07", CLS, HELLO, SEP);
	rg_tokenizer_free(t);
}

/* Encode "hello" with a language code (rg_tok_params.lang_*: [MASK] standing in for one) and
 * compare with want[0..n). */
static void check_lang(const rg_tokenizer *t, int slot, bool special, const int32_t *want,
		       size_t n)
{
	rg_tok_params p = {.add_special_tokens = special, .lang_set = true, .lang_slot = slot,
			   .lang_id = MASK};
	rg_encoding e;
	rg_status st = rg_tokenizer_encode_ex(t, "hello", 5, NULL, 0, &p, &e);

	if (st != RG_OK)
		fail_msg("slot %d: %s: %s", slot, rg_status_name(st), rg_last_error());
	assert_int_equal(e.n, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(e.ids[i], want[i]);
		assert_int_equal(e.special[i], want[i] != HELLO);
	}
	rg_encoding_free(&e);
}

/* The source language code of mBART / NLLB / M2M100 (model/lang.c) in the single template: in
 * the slot of a template token (before or after the text), first when the slot is -1 (or out
 * of the template), nothing without special tokens; a pair is refused. The template and the
 * added tokens as the model reads them. */
static void test_lang_code_slot(void **state)
{
	const int32_t *pre, *post;
	int n_pre, n_post;
	int32_t id;
	bool special;
	rg_tok_params p = {.add_special_tokens = true, .lang_set = true, .lang_id = MASK};
	rg_encoding e;

	(void)state;
	write_tiny_json("WordPiece", 100, BERT_NORM);
	rg_tokenizer *t = load_ok();
	check_lang(t, 0, true, (const int32_t[]){MASK, HELLO, SEP}, 3);
	check_lang(t, 1, true, (const int32_t[]){CLS, HELLO, MASK}, 3);
	check_lang(t, -1, true, (const int32_t[]){MASK, CLS, HELLO, SEP}, 4);
	check_lang(t, 2, true, (const int32_t[]){MASK, CLS, HELLO, SEP}, 4);
	check_lang(t, 0, false, (const int32_t[]){HELLO}, 1);
	CHECK(t, "hello", CLS, HELLO, SEP); /* the tokenizer itself is unchanged */
	assert_int_equal(rg_tokenizer_encode_ex(t, "a", 1, "b", 1, &p, &e), RG_ERR_UNSUPPORTED);
	assert_int_equal(e.n, 0);
	rg_tokenizer_template(t, &pre, &n_pre, &post, &n_post);
	assert_int_equal(n_pre, 1);
	assert_int_equal(pre[0], CLS);
	assert_int_equal(n_post, 1);
	assert_int_equal(post[0], SEP);
	assert_int_equal(rg_tokenizer_n_added(t), MASK + 1);
	assert_string_equal(rg_tokenizer_added(t, MASK, &id, &special), "[MASK]");
	assert_int_equal(id, MASK);
	assert_true(special);
	assert_null(rg_tokenizer_added(t, MASK + 1, &id, &special));
	rg_tokenizer_free(t);
}

static void test_unk_rules(void **state)
{
	(void)state;
	write_tiny_json("WordPiece", 5, BERT_NORM);
	rg_tokenizer *t = load_ok();
	/* a piece with no match turns the whole word into one [UNK], earlier pieces dropped */
	CHECK(t, "unxz", CLS, UNK, SEP);
	CHECK(t, "zun", CLS, UNK, SEP);
	CHECK(t, "hello world", CLS, HELLO, UNK, SEP);
	/* max_input_chars_per_word = 5 counts chars, not bytes */
	CHECK(t, "xxxxx", CLS, X, X_CONT, X_CONT, X_CONT, X_CONT, SEP);
	CHECK(t, "xxxxxx", CLS, UNK, SEP);
	CHECK(t, "\xd0\xb6\xd0\xb6\xd0\xb6\xd0\xb6\xd0\xb6", CLS, ZHE, ZHE_CONT, ZHE_CONT, ZHE_CONT,
	      ZHE_CONT, SEP);
	/* Жжжжжж */
	CHECK(t, "\xd0\x96\xd0\xb6\xd0\xb6\xd0\xb6\xd0\xb6\xd0\xb6", CLS, UNK, SEP);
	/* special tokens in the text resolve to their ids, before normalization */
	CHECK(t, "un[SEP]un", CLS, UN, SEP, UN, SEP);
	/* "[mask]" is not special once lowercase: "[", "mask", "]" are three unknown words */
	CHECK(t, "[MASK][mask]", CLS, MASK, UNK, UNK, UNK, SEP);
	rg_tokenizer_free(t);
}

static void test_empty_and_ids(void **state)
{
	(void)state;
	write_tiny_json("WordPiece", 100, BERT_NORM);
	rg_tokenizer *t = load_ok();
	CHECK(t, "", CLS, SEP);
	CHECK(t, "   \xef\xbb\xbf ", CLS, SEP);
	int32_t *ids = NULL;
	size_t n = 99;
	assert_int_equal(rg_tokenizer_encode(t, NULL, 0, &ids, &n), RG_OK);
	assert_int_equal(n, 2);
	free(ids);
	assert_int_equal(rg_tokenizer_cls_id(t), CLS);
	assert_int_equal(rg_tokenizer_sep_id(t), SEP);
	assert_int_equal(rg_tokenizer_vocab_size(t), N_VOCAB);
	{ /* "pair": [] in the template: pairs are refused, nothing is returned */
		int32_t *pi = (int32_t *)0x1, *pt = (int32_t *)0x1;
		bool cut = true;

		assert_int_equal(rg_tokenizer_encode_pair(t, "a", 1, "b", 1, 0, &pi, &pt, &n, &cut),
				 RG_ERR_UNSUPPORTED);
		assert_null(pi);
		assert_null(pt);
		assert_int_equal(n, 0);
	}
	rg_tokenizer_free(t);
}

static void expect_bad_utf8(const rg_tokenizer *t, const char *text, size_t len, size_t offset)
{
	int32_t *ids = (int32_t *)0x1;
	size_t n = 7;
	char want[64];
	assert_int_equal(rg_tokenizer_encode(t, text, len, &ids, &n), RG_ERR_INVALID_UTF8);
	assert_null(ids);
	assert_int_equal(n, 0);
	snprintf(want, sizeof(want), "offset %zu ", offset);
	if (!strstr(rg_last_error(), want))
		fail_msg("message \"%s\" lacks \"%s\"", rg_last_error(), want);
}

static void test_invalid_utf8(void **state)
{
	(void)state;
	write_tiny_json("WordPiece", 100, BERT_NORM);
	rg_tokenizer *t = load_ok();
	expect_bad_utf8(t,
			"ab\xff"
			"c",
			4, 2);
	expect_bad_utf8(t, "hello \xc3", 7, 6);	      /* truncated at the end */
	expect_bad_utf8(t, "\xc0\x80", 2, 0);	      /* overlong NUL */
	expect_bad_utf8(t, "x\xe0\x80\x80", 4, 1);    /* overlong 3-byte */
	expect_bad_utf8(t, "un\xed\xa0\x80", 5, 2);   /* UTF-16 surrogate */
	expect_bad_utf8(t, "\xf4\x90\x80\x80", 4, 0); /* > U+10FFFF */
	expect_bad_utf8(t, "caf\xc3\xa9 \x80", 7, 6); /* stray continuation byte */
	expect_bad_utf8(t, "[SEP]\xfe", 6, 5);	      /* after a special token */
	/* an embedded NUL is valid UTF-8 (and dropped by clean_text) */
	CHECK(t, "", CLS, SEP);
	const int32_t w[] = { CLS, HELLO, SEP };
	int32_t *ids;
	size_t n;
	assert_int_equal(rg_tokenizer_encode(t, "hel\0lo", 6, &ids, &n), RG_OK);
	assert_int_equal(n, 3);
	assert_memory_equal(ids, w, sizeof(w));
	free(ids);
	rg_tokenizer_free(t);
}

static void expect_load_error(rg_status want, const char *needle)
{
	rg_tokenizer *t = (rg_tokenizer *)0x1;
	rg_status st = rg_tokenizer_load(g_dir, &t);
	if (st != want)
		fail_msg("load gave %s (%s), want %s", rg_status_name(st), rg_last_error(),
			 rg_status_name(want));
	assert_null(t);
	if (needle && !strstr(rg_last_error(), needle))
		fail_msg("message \"%s\" lacks \"%s\"", rg_last_error(), needle);
}

static void test_load_errors(void **state)
{
	(void)state;
	expect_load_error(RG_ERR_IO, "vocab.txt"); /* empty directory */
	write_file("tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0,");
	expect_load_error(RG_ERR_FORMAT, "tokenizer.json");
	write_file("tokenizer.json", "[1, 2, 3]");
	expect_load_error(RG_ERR_UNSUPPORTED, "model type");
	write_tiny_json("WordLevel", 100, BERT_NORM);
	expect_load_error(RG_ERR_UNSUPPORTED, "WordLevel");
	write_tiny_json("WordPiece", 100, "{\"type\": \"Nmt\"}");
	expect_load_error(RG_ERR_UNSUPPORTED, "Nmt");
	write_tiny_json("WordPiece", 100, "{\"type\": \"BertNormalizer\", \"lowercase\": 3}");
	expect_load_error(RG_ERR_FORMAT, "lowercase");
}

static void test_missing_dir(void **state)
{
	(void)state;
	rg_tokenizer *t = NULL;
	assert_int_equal(rg_tokenizer_load("/nonexistent/rg_tok_dir", &t), RG_ERR_IO);
	assert_null(t);
}

static void test_vocab_txt_fallback(void **state)
{
	(void)state;
	char buf[1024] = "";
	for (int i = 0; i < N_VOCAB; i++) {
		strcat(buf, VOCAB[i]);
		strcat(buf, i == HELLO ? " \r\n" : "\n"); /* trailing whitespace is trimmed */
	}
	write_file("vocab.txt", buf);
	write_file("tokenizer_config.json", "{\"do_lower_case\": false}");
	rg_tokenizer *t = load_ok();
	CHECK(t, "hello Hello", CLS, HELLO, UNK, SEP);
	CHECK(t, "cafe caf\xc3\xa9", CLS, CAFE, UNK, SEP); /* cased: accents kept */
	CHECK(t, "[CLS]", CLS, CLS, SEP);
	assert_int_equal(rg_tokenizer_vocab_size(t), N_VOCAB);
	rg_tokenizer_free(t);

	write_file("tokenizer_config.json", "{\"do_lower_case\": true}");
	t = load_ok();
	CHECK(t, "HELLO Caf\xc3\xa9", CLS, HELLO, CAFE, SEP);
	rg_tokenizer_free(t);

	write_file("tokenizer_config.json", "{\"do_lower_case\": tru");
	expect_load_error(RG_ERR_FORMAT, "tokenizer_config.json");
}

/* A byte-level BPE tokenizer.json: vocab a b ab Ġ, merges given verbatim, model_extra spliced in. */
static void write_bpe_json(const char *merges, const char *model_extra, const char *normalizer)
{
	char buf[2048];
	snprintf(buf, sizeof(buf),
		 "{\"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
		 "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
		 "\"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 1], "
		 "\"cls\": [\"<s>\", 0]}, \"model\": {\"type\": \"BPE\", %s \"vocab\": "
		 "{\"<s>\": 0, \"</s>\": 1, \"a\": 2, \"b\": 3, \"ab\": 4, \"\xc4\xa0\": 5, "
		 "\"\xc4\xa0" "a\": 6}, \"merges\": %s}}",
		 normalizer, model_extra, merges);
	write_file("tokenizer.json", buf);
}

static void test_bpe_encode(void **state)
{
	(void)state;
	/* "ab" merges before "Ġa" (rank 0 < 1); chars outside the vocab are dropped (no unk) */
	write_bpe_json("[\"a b\", \"\xc4\xa0 a\"]", "", "null");
	rg_tokenizer *t = load_ok();
	CHECK(t, "ab", 0, 4, 1);
	CHECK(t, "ab a", 0, 4, 6, 1);
	CHECK(t, "aab b", 0, 2, 4, 5, 3, 1);
	CHECK(t, "", 0, 1);
	CHECK(t, "zab", 0, 4, 1);
	expect_bad_utf8(t, "ab\xff", 3, 2);
	expect_bad_utf8(t, "a\xe2\x82", 3, 1);
	assert_int_equal(rg_tokenizer_cls_id(t), 0);
	assert_int_equal(rg_tokenizer_sep_id(t), 1);
	assert_int_equal(rg_tokenizer_vocab_size(t), 7);
	rg_tokenizer_free(t);
	/* the same merges as pairs */
	write_bpe_json("[[\"a\", \"b\"], [\"\xc4\xa0\", \"a\"]]", "", "null");
	t = load_ok();
	CHECK(t, "ab a", 0, 4, 6, 1);
	rg_tokenizer_free(t);
}

static void test_bpe_load_errors(void **state)
{
	(void)state;
	write_bpe_json("[\"a b c\"]", "", "null");
	expect_load_error(RG_ERR_FORMAT, "merges[0]");
	write_bpe_json("[\"ab\"]", "", "null");
	expect_load_error(RG_ERR_FORMAT, "merges[0]");
	write_bpe_json("[\"a q\"]", "", "null");
	expect_load_error(RG_ERR_FORMAT, "\"q\"");
	write_bpe_json("[\"b a\"]", "", "null"); /* "ba" is not in the vocabulary */
	expect_load_error(RG_ERR_FORMAT, "merged token");
	write_bpe_json("[[\"a\", \"b\"], \"a b\"]", "", "null");
	expect_load_error(RG_ERR_FORMAT, "mix");
	write_bpe_json("[7]", "", "null");
	expect_load_error(RG_ERR_FORMAT, "merges[0]");
	write_bpe_json("{}", "", "null");
	expect_load_error(RG_ERR_FORMAT, "merges");
	write_bpe_json("[]", "\"dropout\": 0.1,", "null");
	expect_load_error(RG_ERR_UNSUPPORTED, "dropout");
	write_bpe_json("[]", "\"byte_fallback\": true,", "null");
	expect_load_error(RG_ERR_UNSUPPORTED, "byte_fallback");
	write_bpe_json("[]", "\"unk_token\": \"<unk>\",", "null");
	expect_load_error(RG_ERR_FORMAT, "unk_token");
	/* precompiled_charsmap: not base64, truncated base64, a trie longer than the blob */
	write_bpe_json("[]", "", "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"@@@@\"}");
	expect_load_error(RG_ERR_FORMAT, "base64");
	write_bpe_json("[]", "", "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAAAAA\"}");
	expect_load_error(RG_ERR_FORMAT, "base64");
	write_bpe_json("[]", "", "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAA=\"}");
	expect_load_error(RG_ERR_FORMAT, "truncated");
	write_bpe_json("[]", "",
		       "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"EAAAAAAAAAA=\"}");
	expect_load_error(RG_ERR_FORMAT, "truncated");
	write_bpe_json("[]", "", "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"a|b\"}, "
				 "\"content\": \"\"}");
	expect_load_error(RG_ERR_UNSUPPORTED, "Regex");
	write_file("tokenizer.json", "{\"model\": {\"type\": \"Nonesuch\"}}");
	expect_load_error(RG_ERR_UNSUPPORTED, "Nonesuch");
}

/* Unigram: pieces and scores chosen so that Viterbi, not greediness, decides. */
static void test_unigram(void **state)
{
	(void)state;
	write_file("tokenizer.json",
		   "{\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
		   "\"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true}, "
		   "\"post_processor\": null, \"model\": {\"type\": \"Unigram\", \"unk_id\": 0, "
		   "\"vocab\": [[\"<unk>\", 0.0], [\"\xe2\x96\x81\", -1.0], [\"a\", -2.0], [\"b\", -2.0], "
		   "[\"ab\", -5.0], [\"\xe2\x96\x81" "a\", -1.5], [\"abb\", -3.0]]}}");
	rg_tokenizer *t = load_ok();
	/* "▁abb": ▁a + b + b = -5.5 loses to ▁ + abb = -4.0 */
	CHECK(t, "abb", 1, 6);
	/* "▁ab": ▁a + b = -3.5 beats ▁ + ab = -6.0 */
	CHECK(t, "ab", 5, 3);
	/* unknown chars (unk score = -5 - 10) fuse into one <unk> */
	CHECK(t, "zzq", 1, 0);
	CHECK(t, "azzb", 5, 0, 3);
	CHECK(t, "", );
	expect_bad_utf8(t, "a\xc0\x80", 3, 1);
	rg_tokenizer_free(t);
	write_file("tokenizer.json",
		   "{\"model\": {\"type\": \"Unigram\", \"unk_id\": null, \"vocab\": [[\"a\", 0.0]]}}");
	expect_load_error(RG_ERR_UNSUPPORTED, "unk_id");
	write_file("tokenizer.json",
		   "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 3, \"vocab\": [[\"a\", 0.0]]}}");
	expect_load_error(RG_ERR_FORMAT, "unk_id");
	write_file("tokenizer.json",
		   "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"a\"]]}}");
	expect_load_error(RG_ERR_FORMAT, "vocab[0]");
}

struct thread_arg {
	const rg_tokenizer *t;
	int bad;
};

static void *encode_loop(void *p)
{
	struct thread_arg *a = p;
	static const char *texts[] = { "unaffable hello", "Caf\xc3\xa9, xxx!",
				       "unxz \xd0\xb6\xd0\xb6" };
	static const int32_t want[3][8] = { { CLS, UNA, FF, ABLE, HELLO, SEP },
					    { CLS, CAFE, COMMA, X, X_CONT, X_CONT, BANG, SEP },
					    { CLS, UNK, ZHE, ZHE_CONT, SEP } };
	static const size_t nw[3] = { 6, 8, 5 };
	for (int it = 0; it < 2000; it++) {
		int k = it % 3;
		int32_t *ids;
		size_t n;
		if (rg_tokenizer_encode(a->t, texts[k], strlen(texts[k]), &ids, &n) != RG_OK ||
		    n != nw[k]) {
			a->bad++;
			continue;
		}
		for (size_t i = 0; i < n; i++)
			if (ids[i] != want[k][i])
				a->bad++;
		free(ids);
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	write_tiny_json("WordPiece", 100, BERT_NORM);
	rg_tokenizer *t = load_ok();
	pthread_t th[4];
	struct thread_arg args[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){ t, 0 };
		assert_int_equal(pthread_create(&th[i], NULL, encode_loop, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(args[i].bad, 0);
	}
	rg_tokenizer_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_greedy_longest_match, case_setup),
		cmocka_unit_test_setup(test_unk_rules, case_setup),
		cmocka_unit_test_setup(test_empty_and_ids, case_setup),
		cmocka_unit_test_setup(test_invalid_utf8, case_setup),
		cmocka_unit_test_setup(test_load_errors, case_setup),
		cmocka_unit_test(test_missing_dir),
		cmocka_unit_test_setup(test_vocab_txt_fallback, case_setup),
		cmocka_unit_test_setup(test_threads, case_setup),
		cmocka_unit_test_setup(test_lang_code_slot, case_setup),
		cmocka_unit_test_setup(test_bpe_encode, case_setup),
		cmocka_unit_test_setup(test_bpe_load_errors, case_setup),
		cmocka_unit_test_setup(test_unigram, case_setup),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
