/* The tokenizer of MarianMT checkpoints (Helsinki-NLP/opus-mt-*; Junczys-Dowmunt et al. 2018,
 * "Marian: Fast Neural Machine Translation in C++"; Tiedemann & Thottingal 2020, OPUS-MT), which
 * ship no tokenizer.json but two SentencePiece models and one vocabulary:
 *   source.spm, target.spm   SentencePiece models of the source and target language (spm.h);
 *   vocab.json               {piece: id} shared by source and target: the model's ids, which are
 *                            NOT the .spm files' own ids;
 *   tokenizer_config.json    optional: eos_token ("</s>"), unk_token ("<unk>"), pad_token
 *                            ("<pad>"), additional_special_tokens ([]), each a string or a
 *                            {"content": ...} object; separate_vocabs (false: true reads the
 *                            target side's {piece: id} from target_vocab.json);
 *                            clean_up_tokenization_spaces (false).
 * Behaviour is transformers' MarianTokenizer (models/marian/tokenization_marian.py) on the slow
 * PreTrainedTokenizer path, which is the only one Marian has:
 *   encode  the special tokens (eos, unk, pad, additional) are split out of the text whole
 *           (PreTrainedTokenizer.tokenize's added-token split; since transformers 4.34 they
 *           strip no whitespace around them); in each
 *           other stretch a language code, ">>" up to the first "<<" at the very start of the
 *           stretch (">>de<<", ">>fra<<": remove_language_code), is one token looked up whole;
 *           the rest goes through the side's .spm (source.spm for the source text, target.spm
 *           for labels / forced decoding) to pieces, each mapped through vocab.json (a piece, or
 *           a language code, missing from it gives unk's id); eos is appended
 *           (build_inputs_with_special_tokens). No Moses punctuation normalization: transformers
 *           defines one (sacremoses) but its tokenize() never calls it.
 *   decode  ids -> pieces through the target side's vocabulary inverted (an id with none gives
 *           the unk token's text, which no skip flag drops: transformers skips by id); the ids of
 *           special tokens dropped on request; then convert_tokens_to_string:
 *           runs of ordinary pieces through target.spm's decoder, each special token's own text
 *           plus a space between them; every "▁" (U+2581) a space, whitespace stripped at both
 *           ends (Python str.strip), then transformers' clean_up_tokenization when the config
 *           asks for it.
 * Where transformers' current main branch differs, this follows the 4.x behaviour, on
 * purpose: for a piece missing from vocab.json it falls back to the .spm file's own id (an id of
 * another numbering) where this gives unk; for an id missing from the vocabulary it takes the
 * .spm piece of that id where this gives the unk token; and it decodes with source.spm when the
 * vocabulary is shared (target.spm here; since the .spm decoder copies a piece it lacks as it
 * is, the two differ only where a piece is in one model and not the other).
 *
 * Read-only after load: concurrent encode / decode calls on one tokenizer are safe. */
#ifndef RG_TOKENIZER_MARIAN_H
#define RG_TOKENIZER_MARIAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/export.h"
#include "ragged.h"

typedef struct rg_marian_tok rg_marian_tok;

/* Which side's SentencePiece model (and, with separate_vocabs, vocabulary) encodes: the source
 * text (the encoder's input) or target text (labels, a forced decoder prefix). */
typedef enum rg_marian_side {
	RG_MARIAN_SOURCE = 0,
	RG_MARIAN_TARGET = 1,
} rg_marian_side;

/* Load <dir>/source.spm, <dir>/target.spm, <dir>/vocab.json and the optional
 * <dir>/tokenizer_config.json (and <dir>/target_vocab.json with separate_vocabs).
 * On success *out is the caller's (rg_marian_tok_free); on failure *out = NULL.
 * Errors, each naming the file: RG_ERR_INVALID_INPUT (NULL argument), RG_ERR_IO (a required file
 * missing or unreadable), RG_ERR_FORMAT (a .spm that is not a SentencePiece model, malformed
 * JSON, vocab.json not an object of non-negative integer ids below 2^24, a config field of the
 * wrong type, the unk / eos / pad / an additional special token not in vocab.json),
 * RG_ERR_UNSUPPORTED (built without libsentencepiece), RG_ERR_OOM. */
RG_TEST_API rg_status rg_marian_tok_load(const char *dir, rg_marian_tok **out);

/* Frees everything the tokenizer owns. Accepts NULL. */
RG_TEST_API void rg_marian_tok_free(rg_marian_tok *t);

/* Encode text (len bytes of UTF-8, not necessarily NUL-terminated; NULL allowed when len == 0)
 * as MarianTokenizer does (the header's "encode"): side RG_MARIAN_SOURCE is tokenizer(text),
 * RG_MARIAN_TARGET is tokenizer(text_target=text). add_eos: append eos' id
 * (add_special_tokens=True). *ids: (*n_ids) int32 ids of vocab.json (target_vocab.json for the
 * target side with separate_vocabs), malloc'd, the caller's (never NULL on success; "" gives
 * [eos] or nothing). No truncation. Errors: RG_ERR_INVALID_INPUT (NULL arguments, a side out of
 * range), RG_ERR_INVALID_UTF8 (the message names the byte offset), RG_ERR_OOM; then *ids = NULL
 * and *n_ids = 0. */
RG_TEST_API rg_status rg_marian_tok_encode(const rg_marian_tok *t, rg_marian_side side,
					   const char *text, size_t len, bool add_eos,
					   int32_t **ids, size_t *n_ids);

/* Decode target ids (the decoder's output) to text as MarianTokenizer.decode(ids,
 * skip_special_tokens) does (the header's "decode"). skip_special: leave out eos, pad and the
 * additional special tokens; skip_unk: leave out unk's id too (transformers'
 * skip_special_tokens=True is both; its special-tokens mask counts unk as "only sometimes
 * special"). *text: NUL-terminated, *len bytes, malloc'd, the caller's. Errors:
 * RG_ERR_INVALID_INPUT (NULL arguments, a negative id: the message names its index), RG_ERR_OOM;
 * then *text = NULL, *len = 0. */
RG_TEST_API rg_status rg_marian_tok_decode(const rg_marian_tok *t, const int32_t *ids, size_t n,
					   bool skip_special, bool skip_unk, char **text,
					   size_t *len);

/* Id of the token tok[0..len) in vocab.json (a piece, a special token, a language code such as
 * ">>de<<"), or -1 when it has none. */
RG_TEST_API int32_t rg_marian_tok_token_to_id(const rg_marian_tok *t, const char *tok,
					      size_t len);

/* The target vocabulary's token of id, NUL-terminated, *len bytes (len may be NULL); owned by
 * the tokenizer. NULL when no token has that id. */
RG_TEST_API const char *rg_marian_tok_id_to_token(const rg_marian_tok *t, int32_t id,
						  size_t *len);

/* vocab.json's ids of eos, unk and pad (pad is also Marian's decoder_start_token_id in the
 * checkpoints' config.json), and len(vocab.json) (MarianTokenizer.vocab_size: the number of
 * entries, not 1 + the largest id). */
RG_TEST_API int32_t rg_marian_tok_eos_id(const rg_marian_tok *t);
RG_TEST_API int32_t rg_marian_tok_unk_id(const rg_marian_tok *t);
RG_TEST_API int32_t rg_marian_tok_pad_id(const rg_marian_tok *t);
RG_TEST_API int32_t rg_marian_tok_vocab_size(const rg_marian_tok *t);

/* The largest id of vocab.json (and target_vocab.json with separate_vocabs): ids range over
 * [0, max_id], which a model's vocab_size must cover. -1 for NULL. */
RG_TEST_API int32_t rg_marian_tok_max_id(const rg_marian_tok *t);

/* Whether id is one of the special tokens (eos, unk, pad, additional_special_tokens). */
RG_TEST_API bool rg_marian_tok_is_special(const rg_marian_tok *t, int32_t id);
#endif
