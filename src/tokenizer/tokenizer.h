/* BERT WordPiece tokenizer, byte-for-byte compatible with HF `tokenizers`
 * (BertNormalizer + BertPreTokenizer + WordPiece + TemplateProcessing [CLS] A [SEP]). */
#ifndef RG_TOKENIZER_H
#define RG_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"

typedef struct rg_tokenizer rg_tokenizer;

/* Load from <dir>/tokenizer.json (model type WordPiece, normalizer BertNormalizer, pre_tokenizer
 * BertPreTokenizer, post_processor TemplateProcessing or BertProcessing), else from <dir>/vocab.txt
 * plus <dir>/tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars).
 * Unsupported components are refused with RG_ERR_UNSUPPORTED naming them. Free with rg_tokenizer_free. */
rg_status rg_tokenizer_load(const char *dir, rg_tokenizer **out);
void rg_tokenizer_free(rg_tokenizer *t);

/* Encode text (len bytes of UTF-8) into *ids = [CLS] wordpieces [SEP] (malloc'd; caller frees).
 * No truncation here. RG_ERR_INVALID_UTF8 names the byte offset of the first invalid sequence. */
rg_status rg_tokenizer_encode(const rg_tokenizer *t, const char *text, size_t len, int32_t **ids,
			      size_t *n_ids);

int32_t rg_tokenizer_cls_id(const rg_tokenizer *t);
int32_t rg_tokenizer_sep_id(const rg_tokenizer *t);
int32_t rg_tokenizer_vocab_size(const rg_tokenizer *t);

/* Test hooks (used by tests/py/test_tokenizer.py to compare with HF component by component).
 * rg_tokenizer_normalize: text through the normalizer only; *out is malloc'd UTF-8 of *out_len
 * bytes (NUL-terminated). rg_tokenizer_pretokenize: text (taken as already normalized) through the
 * pre-tokenizer only; *out holds the words, each followed by a NUL, *out_len bytes in all.
 * Both return RG_ERR_INVALID_UTF8 for bad input; caller frees *out. */
rg_status rg_tokenizer_normalize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				 size_t *out_len);
rg_status rg_tokenizer_pretokenize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				   size_t *out_len);
#endif
