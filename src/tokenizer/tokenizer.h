/* BERT WordPiece tokenizer, byte-for-byte compatible with HF `tokenizers`
 * (BertNormalizer + BertPreTokenizer + WordPiece + TemplateProcessing [CLS] A [SEP]). */
#ifndef RG_TOKENIZER_H
#define RG_TOKENIZER_H
#include "core/export.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"

typedef struct rg_tokenizer rg_tokenizer;

/* Load from <dir>/tokenizer.json (model type WordPiece, normalizer BertNormalizer or null,
 * pre_tokenizer BertPreTokenizer or null, post_processor TemplateProcessing, BertProcessing or
 * null, added_tokens with their lstrip/rstrip/single_word/normalized flags), else from
 * <dir>/vocab.txt (one token per line, id = line index, trailing whitespace trimmed, a repeated
 * token keeps its last index) plus the optional <dir>/tokenizer_config.json (do_lower_case = true,
 * strip_accents = null -> follows do_lower_case, tokenize_chinese_chars = true; [UNK] [SEP] [CLS]
 * [PAD] [MASK] or the *_token names given there become special added tokens), as transformers'
 * BertTokenizerFast does. Errors: RG_ERR_IO (neither file can be opened), RG_ERR_FORMAT (malformed
 * JSON, wrong field types, unk_token not in the vocabulary, vocab.txt not UTF-8),
 * RG_ERR_UNSUPPORTED (any other model / normalizer / pre_tokenizer / post_processor type, named in
 * the message), RG_ERR_OOM. On success *out is owned by the caller (free with rg_tokenizer_free);
 * on failure *out = NULL. The tokenizer is read-only after load: concurrent rg_tokenizer_encode
 * calls are safe. */
RG_TEST_API rg_status rg_tokenizer_load(const char *dir, rg_tokenizer **out);

/* Frees everything the tokenizer owns. Accepts NULL. */
RG_TEST_API void rg_tokenizer_free(rg_tokenizer *t);

/* Encode text (len bytes of UTF-8, not necessarily NUL-terminated; NULL allowed when len == 0) as
 * HF `tokenizers` Tokenizer.encode(text).ids does with truncation and padding off: added tokens
 * split out, BertNormalizer, BertPreTokenizer, WordPiece (greedy longest match first, "##"
 * continuations, [UNK] for a word of more than max_input_chars_per_word chars or with an unmatched
 * piece; Wu et al. 2016 sec. 4.1 / Devlin et al. 2019), then the template ([CLS] A [SEP]). On
 * success *ids is malloc'd (caller frees; never NULL) and holds *n_ids int32 ids; "" gives [CLS]
 * [SEP]. Errors: RG_ERR_INVALID_UTF8 (message names the byte offset of the first invalid sequence:
 * overlong forms, surrogates and code points > U+10FFFF are invalid), RG_ERR_INVALID_INPUT (NULL
 * arguments), RG_ERR_OOM; then *ids = NULL and *n_ids = 0. No truncation here. */
RG_TEST_API
rg_status rg_tokenizer_encode(const rg_tokenizer *t, const char *text, size_t len, int32_t **ids,
			      size_t *n_ids);

/* First id the template puts before the text ([CLS]) / last id after it ([SEP]); -1 when the
 * post-processor adds none. */
int32_t rg_tokenizer_cls_id(const rg_tokenizer *t);
int32_t rg_tokenizer_sep_id(const rg_tokenizer *t);
/* 1 + the largest id the tokenizer can emit (vocabulary, added tokens, template). */
int32_t rg_tokenizer_vocab_size(const rg_tokenizer *t);

/* Test hooks (used by tests/py/test_tokenizer.py to compare with HF component by component).
 * rg_tokenizer_normalize: text through the normalizer only; *out is malloc'd UTF-8 of *out_len
 * bytes (NUL-terminated). rg_tokenizer_pretokenize: text (taken as already normalized) through the
 * pre-tokenizer only; *out holds the words, each followed by a NUL, *out_len bytes in all.
 * Both return RG_ERR_INVALID_UTF8 for bad input; caller frees *out. */
RG_TEST_API
rg_status rg_tokenizer_normalize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				 size_t *out_len);
RG_TEST_API
rg_status rg_tokenizer_pretokenize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				   size_t *out_len);
#endif
