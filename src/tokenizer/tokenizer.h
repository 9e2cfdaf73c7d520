/* Tokenizers of Hugging Face encoder families, id for id compatible with HF `tokenizers`
 * (Tokenizer.from_file(...).encode(text).ids, truncation and padding off). Three models:
 *   WordPiece (BERT, MiniLM, MPNet; Wu et al. 2016 sec. 4.1 / Devlin et al. 2019),
 *   byte-level BPE (RoBERTa, GPT-2; Sennrich et al. 2016, Radford et al. 2019),
 *   Unigram (XLM-RoBERTa, ALBERT, multilingual E5; Kudo 2018, SentencePiece). */
#ifndef RG_TOKENIZER_H
#define RG_TOKENIZER_H
#include "core/export.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"

typedef struct rg_tokenizer rg_tokenizer;

/* Load from <dir>/tokenizer.json, else from MarianMT's <dir>/source.spm + target.spm + vocab.json
 * (tokenizer/marian.h: encode is the source side with eos as the template's token, decode the
 * target side; no pairs, no offsets, no streaming decoder), else from GPT-2's
 * <dir>/vocab.json + <dir>/merges.txt (as
 * HF BPE.from_file with the ByteLevel pre-tokenizer (add_prefix_space false, GPT-2's regex) and
 * decoder, <|endoftext|> a special added token when in the vocabulary, no BOS; merges.txt's
 * "#version" and empty lines skipped), else from <dir>/vocab.txt (WordPiece only, below).
 * tokenizer.json, an unmodified HF file:
 *   model: WordPiece (vocab object, unk_token, continuing_subword_prefix,
 *     max_input_chars_per_word); BPE (vocab object, merges as "a b" strings or ["a", "b"] pairs,
 *     unk_token, fuse_unk, continuing_subword_prefix, end_of_word_suffix, ignore_merges; dropout
 *     must be null or 0 and byte_fallback false); Unigram (vocab as [piece, score] pairs, id =
 *     index; unk_id must be set; byte_fallback false);
 *   normalizer: null, BertNormalizer, or Sequence of Precompiled (SentencePiece
 *     precompiled_charsmap, base64), Replace (String pattern; Regex only "<char>{n,}" / "<char>+"),
 *     Strip, StripAccents, Lowercase, NFC, NFD, NFKC, NFKD, BertNormalizer;
 *   pre_tokenizer: null, BertPreTokenizer, ByteLevel (add_prefix_space, use_regex: the GPT-2
 *     regex), Metaspace (replacement, prepend_scheme always / first / never or the older
 *     add_prefix_space, split; "first" only without a normalizer), WhitespaceSplit, or a Sequence;
 *   post_processor: null, TemplateProcessing (its single template), BertProcessing,
 *     RobertaProcessing, ByteLevel (no ids), or a Sequence of them with one adding ids;
 *   added_tokens with their lstrip/rstrip/single_word/normalized flags; decoder ignored.
 * vocab.txt: one token per line, id = line index, trailing whitespace trimmed, a repeated token
 * keeps its last index, plus the optional <dir>/tokenizer_config.json (do_lower_case = true,
 * strip_accents = null -> follows do_lower_case, tokenize_chinese_chars = true; [UNK] [SEP] [CLS]
 * [PAD] [MASK] or the *_token names given there become special added tokens), as transformers'
 * BertTokenizerFast does. Errors: RG_ERR_IO (none of the files can be opened), RG_ERR_FORMAT
 * (malformed JSON, wrong field types, unk_token not in the vocabulary, a merge whose tokens or
 * result are not in the vocabulary, bad base64 or a truncated precompiled_charsmap, vocab.txt not
 * UTF-8), RG_ERR_UNSUPPORTED (any other model / normalizer / pre_tokenizer / post_processor type or
 * option, named in the message), RG_ERR_OOM. On success *out is owned by the caller (free with
 * rg_tokenizer_free); on failure *out = NULL. The tokenizer is read-only after load (no caches):
 * concurrent rg_tokenizer_encode calls are safe. */
RG_TEST_API rg_status rg_tokenizer_load(const char *dir, rg_tokenizer **out);

/* A byte-level BPE tokenizer from a GGUF file's tokenizer metadata (tokenizer.ggml.model
 * "gpt2"); the GGUF reader passes its arrays. tokens: n strings of token_lens[i] bytes (the
 * byte-level stand-in form, as in GPT-2's vocab.json; token_lens NULL: NUL-terminated), id =
 * index; merges: n_merges "a b" strings (merge_lens NULL: NUL-terminated), rank = index;
 * token_type: n int32 (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte) or
 * NULL (all normal); control (3) and user-defined (4) tokens are matched whole in the text
 * before pre-tokenization (HF added tokens / llama.cpp's special-token partition), control ones
 * special (left out by decode with skip_special). pre: tokenizer.ggml.pre, the pre-tokenizer
 * llama.cpp (src/llama-vocab.cpp) selects by it, as the model's original tokenizer.json has it:
 *   "gpt2" ("gpt-2", "phi-2", "mpt", "olmo")   ByteLevel (GPT-2's regex)
 *   "smollm" ("starcoder", "refact", "command-r", "codeshell")
 *                                   Digits(individual) then ByteLevel (GPT-2's regex)
 *   "llama-bpe" ("llama3", "llama-v3", "falcon3"; "dbrx", "smaug-bpe")
 *                                   Split(Llama 3's regex) then ByteLevel without regex;
 *                                   BPE ignore_merges (not for dbrx, smaug-bpe), as llama.cpp
 *   "qwen2" ("deepseek-r1-qwen", "megrez", "stablelm2")
 *                                   Split(Qwen2's regex) then ByteLevel without regex
 * ("default" and every other value: RG_ERR_UNSUPPORTED.)
 * The decoder is ByteLevel. bos / eos: token ids or -1; add_bos (tokenizer.ggml.add_bos_token):
 * every encode starts with bos (TemplateProcessing "<bos> $A"). The arrays are copied.
 * Errors: RG_ERR_INVALID_INPUT (NULL arrays, n <= 0), RG_ERR_FORMAT (a token not UTF-8 or with a
 * NUL, a type outside 1..6, bos / eos outside [-1, n), add_bos without bos, a merge that is not
 * "a b" of vocabulary tokens whose concatenation is a token), RG_ERR_UNSUPPORTED (any other pre,
 * or NULL, named), RG_ERR_OOM. On success *out is the caller's (rg_tokenizer_free). */
RG_TEST_API
rg_status rg_tokenizer_from_bpe_arrays(const char *const *tokens, const size_t *token_lens, int n,
				       const char *const *merges, const size_t *merge_lens,
				       int n_merges, const int32_t *token_type, const char *pre,
				       int32_t bos, int32_t eos, bool add_bos, rg_tokenizer **out);

/* Frees everything the tokenizer owns. Accepts NULL. */
RG_TEST_API void rg_tokenizer_free(rg_tokenizer *t);

/* Encode text (len bytes of UTF-8, not necessarily NUL-terminated; NULL allowed when len == 0) as
 * HF `tokenizers` Tokenizer.encode(text).ids does with truncation and padding off: added tokens
 * split out, the normalizer, the pre-tokenizer, the model on every word, then the post-processor's
 * ids around them. WordPiece: greedy longest match first, "##" continuations, [UNK] for a word of
 * more than max_input_chars_per_word chars or with an unmatched piece. BPE: the word's chars
 * (byte-level: its bytes' GPT-2 stand-ins) merged lowest rank first. Unigram: the Viterbi
 * segmentation maximising the sum of piece scores, a char without a piece scoring min - 10,
 * consecutive unknown chars fused into one unk. On success *ids is malloc'd (caller frees; never
 * NULL) and holds *n_ids int32 ids; "" gives only the template's ids ([CLS] [SEP], <s> </s>).
 * Errors: RG_ERR_INVALID_UTF8 (message names the byte offset of the first invalid sequence:
 * overlong forms, surrogates and code points > U+10FFFF are invalid), RG_ERR_INVALID_INPUT (NULL
 * arguments), RG_ERR_OOM; then *ids = NULL and *n_ids = 0. No truncation here. */
RG_TEST_API
rg_status rg_tokenizer_encode(const rg_tokenizer *t, const char *text, size_t len, int32_t **ids,
			      size_t *n_ids);

/* Encode a text pair (a, b) as Tokenizer.encode(a, b) does: both texts through added tokens,
 * normalizer, pre-tokenizer and model, then the post-processor's pair template
 * (TemplateProcessing "pair"; BertProcessing: [CLS] A [SEP] B [SEP] with token types 0 for
 * [CLS] A [SEP] and 1 for B [SEP]; RobertaProcessing: <s> A </s></s> B </s>, all type 0;
 * without a post-processor A then B, types 0 and 1). max_len > 0: when longer, tokens are
 * dropped from the ends of the texts as HF's longest_first does (the shorter text keeps its
 * length when the longer can take the rest, else each gets half, the odd token to the longer)
 * and *truncated is set; RG_ERR_TOO_LONG if the template alone does not fit.
 * On success *ids and *types are malloc'd (caller frees both; never NULL) with *n_ids int32
 * each. Errors as rg_tokenizer_encode (the message names the offending text's byte offset). */
RG_TEST_API
rg_status rg_tokenizer_encode_pair(const rg_tokenizer *t, const char *a, size_t a_len,
				   const char *b, size_t b_len, size_t max_len, int32_t **ids,
				   int32_t **types, size_t *n_ids, bool *truncated);

/* Options of rg_tokenizer_encode_ex. */
typedef struct rg_tok_params {
	rg_truncation truncation; /* with max_len > 0: drop content tokens (HF truncation, the
				   * template's tokens kept; pairs: HF's longest_first) */
	size_t max_len;           /* limit in tokens, the template's included; 0: none */
	bool add_special_tokens;  /* the post-processor's template ([CLS] ... [SEP]) */
	bool offsets;             /* fill start / stop (alignment bookkeeping through the
				   * normalizer and pre-tokenizer, as HF keeps it) */
	const size_t *plain;      /* (2 * n_plain) byte ranges [plain[2k], plain[2k+1]) of text a,
				   * ascending, in which special added tokens are not matched: their
				   * text there is tokenized as any other (HF's split_special_tokens /
				   * encode_special_tokens, for those bytes only; non-special added
				   * tokens still match). A special token of the normalized set (rare:
				   * special tokens are normalized=false in practice) is not matched
				   * anywhere in a piece between raw added tokens that overlaps one.
				   * NULL: none. Pairs: a only. */
	size_t n_plain;
	/* A source language code for the single template (mBART-50, NLLB-200, M2M100: the HF
	 * tokenizer's src_lang, model/lang.c). lang_set: the template's special token number
	 * lang_slot (counting those before the text first, then those after) becomes lang_id;
	 * lang_slot -1 (a template without a code): lang_id goes first, as transformers' default
	 * prefix_tokens = [src_lang_code]. Single texts with add_special_tokens only: with a pair
	 * or a MarianMT tokenizer it is RG_ERR_UNSUPPORTED. A zeroed struct sets none. */
	bool lang_set;
	int lang_slot;
	int32_t lang_id;
} rg_tok_params;

/* Encode a text, or a pair when b != NULL, as HF Tokenizer.encode(a[, b], add_special_tokens)
 * does with truncation (max_length, direction) and no padding. *out (zeroed first) gets n tokens:
 * ids, token types, HF's special-tokens mask (the template's tokens; an added token found in the
 * text is not in it) and, with
 * p->offsets, byte offsets [start, stop) into the token's own text (HF's offsets, in bytes
 * rather than chars; template tokens (0, 0); ByteLevel / RobertaProcessing trim_offsets
 * applied). out->truncated when tokens were dropped. Errors as rg_tokenizer_encode_pair; on error
 * *out is empty. Free with rg_encoding_free. */
RG_TEST_API
rg_status rg_tokenizer_encode_ex(const rg_tokenizer *t, const char *a, size_t a_len, const char *b,
				 size_t b_len, const rg_tok_params *p, rg_encoding *out);

/* Decode ids to text as HF Tokenizer.decode(ids, skip_special_tokens) does: each id's token (an
 * added token's text, else the model's piece; ids without one are left out), special added
 * tokens left out when skip_special, then the tokenizer.json decoder (WordPiece, ByteLevel,
 * Metaspace, BPEDecoder, Replace, ByteFallback, Fuse, Strip, Sequence), or the tokens joined by
 * spaces without one. On success *text is malloc'd, NUL-terminated (caller frees), *len bytes.
 * RG_ERR_UNSUPPORTED when the file's decoder is not one of those (named), RG_ERR_OOM. */
RG_TEST_API
rg_status rg_tokenizer_decode(const rg_tokenizer *t, const int32_t *ids, size_t n,
			      bool skip_special, char **text, size_t *len);

/* The token string of id (an added token's text, else the model's piece), *len bytes, not
 * NUL-terminated; NULL when the id has none. Owned by the tokenizer. */
RG_TEST_API const char *rg_tokenizer_id_to_token(const rg_tokenizer *t, int32_t id, size_t *len);

/* The single template's special tokens: *pre (*n_pre ids put before the text) and *post
 * (*n_post after it), owned by the tokenizer (MarianMT: none; tokenizer/marian.h appends
 * its eos). */
RG_TEST_API void rg_tokenizer_template(const rg_tokenizer *t, const int32_t **pre, int *n_pre,
				       const int32_t **post, int *n_post);

/* Added token i of rg_tokenizer_n_added (tokenizer.json "added_tokens" in file order): its text
 * as written there (NUL-terminated, owned by the tokenizer), *id and *special (may be NULL);
 * NULL for i out of range. MarianMT's tokenizer has none. */
RG_TEST_API size_t rg_tokenizer_n_added(const rg_tokenizer *t);
RG_TEST_API const char *rg_tokenizer_added(const rg_tokenizer *t, size_t i, int32_t *id,
					   bool *special);

/* First id the post-processor puts before the text ([CLS], <s>) / last id after it ([SEP],
 * </s>); -1 when it adds none. */
RG_TEST_API int32_t rg_tokenizer_cls_id(const rg_tokenizer *t);
RG_TEST_API int32_t rg_tokenizer_sep_id(const rg_tokenizer *t);
/* 1 + the largest id the tokenizer can emit (vocabulary, added tokens, template). */
RG_TEST_API int32_t rg_tokenizer_vocab_size(const rg_tokenizer *t);

/* Test hooks (used by tests/py/test_tokenizer.py to compare with HF component by component).
 * rg_tokenizer_normalize: text through the normalizer only; *out is malloc'd UTF-8 of *out_len
 * bytes (NUL-terminated). rg_tokenizer_pretokenize: text (taken as already normalized) through the
 * pre-tokenizer only; *out holds the words (ByteLevel: as byte stand-ins, Metaspace: with the
 * replacement char), each followed by a NUL, *out_len bytes in all.
 * Both return RG_ERR_INVALID_UTF8 for bad input; caller frees *out. */
RG_TEST_API
rg_status rg_tokenizer_normalize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				 size_t *out_len);
RG_TEST_API
rg_status rg_tokenizer_pretokenize(const rg_tokenizer *t, const char *text, size_t len, char **out,
				   size_t *out_len);
#endif
