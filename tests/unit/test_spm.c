/* SentencePiece through libsentencepiece (src/tokenizer/spm.h) and the Marian tokenizer over it
 * (src/tokenizer/marian.h), from C: every load error path (so that the ASan pass of
 * scripts/run-tests.sh, with leak detection on, sees each one free what it took), encode /
 * decode round trips, the language-code prefix and eos. The parity with the Python
 * `sentencepiece` package and transformers' MarianTokenizer is tests/py/test_tokenizer_spm.py's.
 * The models are trained in the group setup by spm_train (Debian package sentencepiece) on a
 * generated text; without spm_train, or in a build without libsentencepiece (SPM=0), the cases
 * are skipped. */
/* Paths are mkdtemp directories under /tmp, far shorter than the buffers: snprintf truncation
 * (which would only fail a case) cannot happen, so its warning is off here. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "tokenizer/marian.h"
#include "tokenizer/spm.h"
#define RG_TMP_PREFIX "rg_spm_test"
#include "test_tmpdir.h"

static char g_model[300], g_bpe[300], g_marian[300];
static bool g_have; /* models trained and the library built with SentencePiece */
static bool g_skip; /* built without SentencePiece (SPM=0) */
static char g_why[200] = "group setup failed";

static void write_file(const char *path, const char *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0)
		fail_msg("cannot write %s", path);
}

static void write_str(const char *dir, const char *name, const char *s)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	write_file(p, s, strlen(s));
}

static int copy_file(const char *from, const char *to)
{
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	return system(cmd);
}

/* vocab.json for a Marian directory: </s> 0, <unk> 1, the model's ordinary pieces, >>de<<,
 * <pad> last. */
static void write_vocab(const char *dir, const rg_spm *s)
{
	rg_buf b;
	int id = 2;
	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"</s>\": 0, \"<unk>\": 1");
	for (int32_t i = 0; i < rg_spm_vocab_size(s); i++) {
		size_t n;
		const char *p = rg_spm_id_to_piece(s, i, &n);
		if (!strcmp(p, "<unk>") || !strcmp(p, "<s>") || !strcmp(p, "</s>"))
			continue;
		rg_buf_puts(&b, ", ");
		rg_buf_json_str(&b, p, n);
		rg_buf_printf(&b, ": %d", id++);
	}
	rg_buf_printf(&b, ", \">>de<<\": %d, \"<pad>\": %d}", id, id + 1);
	assert_false(b.oom);
	write_str(dir, "vocab.json", b.data);
	rg_buf_free(&b);
}

static int setup(void **state)
{
	static const char *const words[] = { "the", "quick", "brown", "fox", "jumps", "over",
					     "lazy", "dog", "hello", "world", "translate", "this",
					     "sentence", "into", "German", "please", "thank", "you" };
	char path[400], cmd[1200];
	rg_spm *s = NULL;
	unsigned r = 12345;

	if (group_setup(state) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/train.txt", g_root);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	for (int line = 0; line < 400; line++) {
		int n = 3 + line % 9;
		for (int w = 0; w < n; w++) {
			r = r * 1103515245u + 12345u;
			fprintf(f, "%s%s", w ? " " : "", words[(r >> 16) % 18]);
		}
		fprintf(f, "%s\n", line % 5 ? "." : "?");
	}
	fclose(f);
	snprintf(g_model, sizeof(g_model), "%s/uni.model", g_root);
	snprintf(g_bpe, sizeof(g_bpe), "%s/bpe.model", g_root);
	snprintf(cmd, sizeof(cmd),
		 "spm_train --input=%s --model_prefix=%s/uni --vocab_size=120 --model_type=unigram "
		 "--hard_vocab_limit=false --num_threads=1 --minloglevel=2 >/dev/null 2>&1 && "
		 "spm_train --input=%s --model_prefix=%s/bpe --vocab_size=100 --model_type=bpe "
		 "--num_threads=1 --minloglevel=2 >/dev/null 2>&1",
		 path, g_root, path, g_root);
	if (system(cmd) != 0) {
		snprintf(g_why, sizeof(g_why), "spm_train failed or is missing: run "
			 "scripts/install-deps.sh (Debian package sentencepiece)");
		return 0;
	}
	if (rg_spm_load(g_model, &s) != RG_OK) { /* SPM=0: RG_ERR_UNSUPPORTED, cases skipped */
		g_skip = true;
		fprintf(stderr, "test_spm: %s: cases skipped\n", rg_last_error());
		return 0;
	}
	snprintf(g_marian, sizeof(g_marian), "%s/marian", g_root);
	mkdir(g_marian, 0700);
	snprintf(path, sizeof(path), "%s/source.spm", g_marian);
	copy_file(g_model, path);
	snprintf(path, sizeof(path), "%s/target.spm", g_marian);
	copy_file(g_model, path);
	write_vocab(g_marian, s);
	write_str(g_marian, "tokenizer_config.json", "{\"source_lang\": \"en\", \"target_lang\": \"de\"}");
	rg_spm_free(s);
	g_have = true;
	return 0;
}

#define NEED_MODELS()                                                                             \
	do {                                                                                      \
		if (g_skip)                                                                       \
			skip();                                                                   \
		if (!g_have)                                                                      \
			fail_msg("%s", g_why);                                                     \
	} while (0)

static void test_spm_round_trip(void **state)
{
	static const char *const texts[] = { "hello world.", "the lazy dog jumps over the fox?",
					     "  please   translate this  ", "", "xyz unknown zz",
					     "caf\xc3\xa9 \xe4\xb8\xad" };
	static const char *const want[] = { "hello world.", "the lazy dog jumps over the fox?",
					    "please translate this", "", NULL, NULL };
	(void)state;
	NEED_MODELS();
	const char *paths[2] = { g_model, g_bpe };
	for (int m = 0; m < 2; m++) {
		rg_spm *s = (rg_spm *)1;
		assert_int_equal(rg_spm_load(paths[m], &s), RG_OK);
		assert_non_null(s);
		assert_true(rg_spm_vocab_size(s) > 50);
		for (size_t k = 0; k < sizeof(texts) / sizeof(*texts); k++) {
			int32_t *ids;
			size_t n, np, tn;
			char *pieces, *text;
			size_t *starts;
			const char *t = texts[k];
			assert_int_equal(rg_spm_encode_ids(s, t, strlen(t), &ids, &n), RG_OK);
			assert_non_null(ids);
			assert_int_equal(rg_spm_encode_pieces(s, t, strlen(t), &pieces, &starts, &np),
					 RG_OK);
			assert_int_equal(np, n);
			assert_int_equal(starts[0], 0);
			for (size_t i = 0; i < n; i++) {
				size_t pl;
				const char *p = rg_spm_id_to_piece(s, ids[i], &pl);
				assert_non_null(p);
				/* pieces are their ids' pieces, but an unknown char's own text */
				if (rg_spm_piece_to_id(s, pieces + starts[i],
						       starts[i + 1] - starts[i] - 1) >= 0) {
					assert_int_equal(pl, starts[i + 1] - starts[i] - 1);
					assert_memory_equal(p, pieces + starts[i], pl);
					assert_int_equal(rg_spm_piece_to_id(s, p, pl), ids[i]);
				}
				assert_int_equal(pieces[starts[i + 1] - 1], '\0');
			}
			assert_int_equal(rg_spm_decode_ids(s, ids, n, &text, &tn), RG_OK);
			assert_int_equal(strlen(text), tn);
			if (want[k])
				assert_string_equal(text, want[k]);
			free(text);
			const char **pv = malloc((n ? n : 1) * sizeof(*pv));
			for (size_t i = 0; i < n; i++)
				pv[i] = pieces + starts[i];
			assert_int_equal(rg_spm_decode_pieces(s, pv, NULL, n, &text, &tn), RG_OK);
			if (want[k])
				assert_string_equal(text, want[k]);
			free(text);
			free(pv);
			free(ids);
			free(pieces);
			free(starts);
		}
		assert_null(rg_spm_id_to_piece(s, -1, NULL));
		assert_null(rg_spm_id_to_piece(s, rg_spm_vocab_size(s), NULL));
		assert_int_equal(rg_spm_piece_to_id(s, "no such piece", 13), -1);
		rg_spm_free(s);
	}
	rg_spm_free(NULL);
}

static void test_spm_bad_input(void **state)
{
	rg_spm *s;
	int32_t *ids = (int32_t *)1, bad[2] = { 3, 100000 };
	size_t n = 7;
	char *text = (char *)1;
	(void)state;
	NEED_MODELS();
	assert_int_equal(rg_spm_load(g_model, &s), RG_OK);
	assert_int_equal(rg_spm_encode_ids(s, "ok\xff", 3, &ids, &n), RG_ERR_INVALID_UTF8);
	assert_null(ids);
	assert_int_equal(n, 0);
	assert_non_null(strstr(rg_last_error(), "offset 2"));
	assert_int_equal(rg_spm_encode_ids(s, NULL, 3, &ids, &n), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_spm_encode_ids(s, NULL, 0, &ids, &n), RG_OK);
	assert_int_equal(n, 0);
	free(ids);
	assert_int_equal(rg_spm_decode_ids(s, bad, 2, &text, &n), RG_ERR_INVALID_INPUT);
	assert_null(text);
	assert_non_null(strstr(rg_last_error(), "index 1"));
	const char *pv[2] = { "a", NULL };
	assert_int_equal(rg_spm_decode_pieces(s, pv, NULL, 2, &text, &n), RG_ERR_INVALID_INPUT);
	rg_spm_free(s);
}

static void expect_load(const char *path, rg_status want, const char *needle)
{
	rg_spm *s = (rg_spm *)1;
	assert_int_equal(rg_spm_load(path, &s), want);
	assert_null(s);
	if (!strstr(rg_last_error(), path) || !strstr(rg_last_error(), needle))
		fail_msg("message '%s' lacks '%s' or the path", rg_last_error(), needle);
}

static void test_spm_load_errors(void **state)
{
	char p[400];
	(void)state;
	NEED_MODELS();
	snprintf(p, sizeof(p), "%s/missing.model", g_dir);
	expect_load(p, RG_ERR_IO, "missing.model");
	expect_load(g_dir, RG_ERR_IO, g_dir);
	snprintf(p, sizeof(p), "%s/garbage.model", g_dir);
	write_file(p, "\x0a\x05hello garbage \xff\xff\xff\xff", 20);
	expect_load(p, RG_ERR_FORMAT, "not a SentencePiece model");
	snprintf(p, sizeof(p), "%s/empty.model", g_dir);
	write_file(p, "", 0);
	expect_load(p, RG_ERR_FORMAT, "empty file");
	rg_spm *s = (rg_spm *)1;
	assert_int_equal(rg_spm_load(NULL, &s), RG_ERR_INVALID_INPUT);
	assert_null(s);
	assert_int_equal(rg_spm_load(g_model, NULL), RG_ERR_INVALID_INPUT);
}

static void test_marian_encode_decode(void **state)
{
	rg_marian_tok *t;
	int32_t *ids, *ids2;
	size_t n, n2, tn;
	char *text;
	(void)state;
	NEED_MODELS();
	assert_int_equal(rg_marian_tok_load(g_marian, &t), RG_OK);
	int32_t eos = rg_marian_tok_eos_id(t), unk = rg_marian_tok_unk_id(t);
	int32_t pad = rg_marian_tok_pad_id(t), de = rg_marian_tok_token_to_id(t, ">>de<<", 6);
	assert_int_equal(eos, 0);
	assert_int_equal(unk, 1);
	assert_int_equal(pad, rg_marian_tok_vocab_size(t) - 1);
	assert_int_equal(de, pad - 1);
	assert_string_equal(rg_marian_tok_id_to_token(t, pad, NULL), "<pad>");

	const char *src = ">>de<< hello world.";
	assert_int_equal(rg_marian_tok_encode(t, RG_MARIAN_SOURCE, src, strlen(src), true, &ids, &n),
			 RG_OK);
	assert_true(n >= 4);
	assert_int_equal(ids[0], de);
	assert_int_equal(ids[n - 1], eos);
	/* the same text without the code: the same ids after it */
	assert_int_equal(rg_marian_tok_encode(t, RG_MARIAN_TARGET, src + 6, strlen(src) - 6, false,
					      &ids2, &n2),
			 RG_OK);
	assert_int_equal(n2, n - 2);
	assert_memory_equal(ids2, ids + 1, n2 * sizeof(*ids2));
	assert_int_equal(rg_marian_tok_decode(t, ids2, n2, true, true, &text, &tn), RG_OK);
	assert_string_equal(text, "hello world.");
	free(text);
	assert_int_equal(rg_marian_tok_decode(t, ids, n, false, false, &text, &tn), RG_OK);
	assert_string_equal(text, ">>de<< hello world.</s>");
	free(text);
	free(ids);
	free(ids2);

	/* special tokens in the text; an unknown word's pieces */
	const char *sp = "hello</s>zzq<pad>";
	assert_int_equal(rg_marian_tok_encode(t, RG_MARIAN_SOURCE, sp, strlen(sp), true, &ids, &n),
			 RG_OK);
	assert_int_equal(ids[n - 1], eos);
	assert_int_equal(ids[n - 2], pad);
	free(ids);
	int32_t specials[] = { pad, unk, eos, 999999 };
	assert_int_equal(rg_marian_tok_decode(t, specials, 4, true, false, &text, &tn), RG_OK);
	assert_string_equal(text, "<unk> <unk>");
	free(text);
	assert_int_equal(rg_marian_tok_decode(t, specials, 3, true, true, &text, &tn), RG_OK);
	assert_string_equal(text, "");
	free(text);
	int32_t neg = -1;
	assert_int_equal(rg_marian_tok_decode(t, &neg, 1, true, true, &text, &tn),
			 RG_ERR_INVALID_INPUT);
	assert_null(text);
	assert_int_equal(rg_marian_tok_encode(t, (rg_marian_side)2, "a", 1, true, &ids, &n),
			 RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_marian_tok_encode(t, RG_MARIAN_SOURCE, "\xc3", 1, true, &ids, &n),
			 RG_ERR_INVALID_UTF8);
	assert_null(ids);
	rg_marian_tok_free(t);
	rg_marian_tok_free(NULL);
}

/* A copy of the Marian directory with one file replaced (data NULL: removed). */
static void marian_variant(const char *name, const char *data)
{
	char cmd[800], p[400];
	snprintf(cmd, sizeof(cmd), "cp %s/* '%s'/", g_marian, g_dir);
	assert_int_equal(system(cmd), 0);
	snprintf(p, sizeof(p), "%s/%s", g_dir, name);
	if (data)
		write_file(p, data, strlen(data));
	else
		remove(p);
}

static void expect_marian(rg_status want, const char *needle)
{
	rg_marian_tok *t = (rg_marian_tok *)1;
	assert_int_equal(rg_marian_tok_load(g_dir, &t), want);
	assert_null(t);
	if (!strstr(rg_last_error(), needle))
		fail_msg("message '%s' lacks '%s'", rg_last_error(), needle);
}

static void test_marian_load_errors(void **state)
{
	static const struct {
		const char *file, *data;
		rg_status want;
		const char *needle;
	} cases[] = {
		{ "source.spm", NULL, RG_ERR_IO, "source.spm" },
		{ "target.spm", NULL, RG_ERR_IO, "target.spm" },
		{ "target.spm", "not a model", RG_ERR_FORMAT, "not a SentencePiece model" },
		{ "vocab.json", NULL, RG_ERR_IO, "vocab.json" },
		{ "vocab.json", "[1, 2]", RG_ERR_FORMAT, "vocab.json" },
		{ "vocab.json", "{\"</s>\": 0, \"<unk>\": \"1\"}", RG_ERR_FORMAT, "<unk>" },
		{ "vocab.json", "{\"</s>\": 0, \"<pad>\": 2}", RG_ERR_FORMAT, "\"<unk>\" is not" },
		{ "vocab.json", "{\"</s>\": 0, \"<unk>\": 1}", RG_ERR_FORMAT, "\"<pad>\" is not" },
		{ "vocab.json", "{\"</s>\": 0", RG_ERR_FORMAT, "vocab.json" },
		{ "tokenizer_config.json", "{\"unk_token\": []}", RG_ERR_FORMAT, "unk_token" },
		{ "tokenizer_config.json", "[]", RG_ERR_FORMAT, "tokenizer_config.json" },
		{ "tokenizer_config.json", "{\"additional_special_tokens\": [\"<x>\"]}",
		  RG_ERR_FORMAT, "<x>" },
		{ "tokenizer_config.json", "{\"additional_special_tokens\": [3]}", RG_ERR_FORMAT,
		  "additional_special_tokens[0]" },
		{ "tokenizer_config.json", "{\"clean_up_tokenization_spaces\": 1}", RG_ERR_FORMAT,
		  "clean_up_tokenization_spaces" },
		{ "tokenizer_config.json", "{\"separate_vocabs\": true}", RG_ERR_IO,
		  "target_vocab.json" },
	};
	(void)state;
	NEED_MODELS();
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char sub[sizeof(g_dir)];
		snprintf(sub, sizeof(sub), "%.200s/v%zu", g_dir, i);
		mkdir(sub, 0700);
		char keep[sizeof(g_dir)];
		snprintf(keep, sizeof(keep), "%s", g_dir);
		snprintf(g_dir, sizeof(g_dir), "%s", sub);
		marian_variant(cases[i].file, cases[i].data);
		expect_marian(cases[i].want, cases[i].needle);
		snprintf(g_dir, sizeof(g_dir), "%s", keep);
	}
	rg_marian_tok *t = (rg_marian_tok *)1;
	assert_int_equal(rg_marian_tok_load(NULL, &t), RG_ERR_INVALID_INPUT);
	assert_null(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_spm_round_trip, case_setup),
		cmocka_unit_test_setup(test_spm_bad_input, case_setup),
		cmocka_unit_test_setup(test_spm_load_errors, case_setup),
		cmocka_unit_test_setup(test_marian_encode_decode, case_setup),
		cmocka_unit_test_setup(test_marian_load_errors, case_setup),
	};
	return cmocka_run_group_tests(tests, setup, group_teardown);
}
