/* SentencePiece models (Kudo & Richardson 2018, "SentencePiece: A simple and language independent
 * subword tokenizer and detokenizer for Neural Text Processing"; unigram: Kudo 2018, BPE:
 * Sennrich et al. 2016) read and run by the reference implementation itself, Google's
 * libsentencepiece (Debian libsentencepiece-dev), through one C++ unit (spm.cc). This is the
 * reader for the .model / .spm files that ship without a tokenizer.json (MarianMT's source.spm
 * and target.spm, marian.h): the file's own normalizer (its precompiled charsmap, dummy prefix,
 * whitespace rules), its model and its decoder are the library's, so ids and pieces are those of
 * the Python `sentencepiece` package's SentencePieceProcessor(model_file=...).encode(text) with
 * the default options (no BOS / EOS added, no sampling) of the same version (Debian: 0.1.97).
 * The PyPI package (0.2.x, what transformers runs) agrees id for id on BPE models, and on
 * unigram models but where two segmentations of a stretch score exactly the same ("000" as
 * "0" "00" or "00" "0"): the versions break such ties differently (tests/py/
 * test_tokenizer_spm.py bounds them: about 0.5 % of fortune texts with its small models).
 *
 * Built without the library (the Makefile's SPM=0, automatic when its header is missing) every
 * function below answers RG_ERR_UNSUPPORTED naming the missing package.
 *
 * An rg_spm is read-only after load: the library's Encode / Decode are const methods, so
 * concurrent encode and decode calls on one model are safe. Text in is UTF-8 of len bytes, not
 * necessarily NUL-terminated (NULL allowed when len == 0); invalid UTF-8 is refused
 * (RG_ERR_INVALID_UTF8, the message naming the byte offset) rather than replaced by U+FFFD as the
 * library would. Every output buffer is malloc'd and the caller's (free()); on error the outputs
 * are NULL / 0 and rg_last_error() holds the message. */
#ifndef RG_TOKENIZER_SPM_H
#define RG_TOKENIZER_SPM_H
#include <stddef.h>
#include <stdint.h>

#include "core/export.h"
#include "ragged.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rg_spm rg_spm;

/* Load the serialized SentencePiece ModelProto at path (a .model / .spm file, at most 512 MiB).
 * On success *out is the caller's (rg_spm_free); on failure *out = NULL. Errors, each message
 * naming the path: RG_ERR_INVALID_INPUT (NULL path or out), RG_ERR_IO (missing, unreadable, not a
 * regular file: a directory or FIFO is refused, never read), RG_ERR_FORMAT (empty, over the
 * limit, or not a SentencePiece model: the protobuf does not parse or the library refuses the
 * model, its reason quoted), RG_ERR_UNSUPPORTED (built without libsentencepiece), RG_ERR_OOM. */
RG_TEST_API rg_status rg_spm_load(const char *path, rg_spm **out);

/* Frees the model. Accepts NULL. */
RG_TEST_API void rg_spm_free(rg_spm *s);

/* Number of pieces (ids are 0 .. size-1); 0 for NULL. */
RG_TEST_API int32_t rg_spm_vocab_size(const rg_spm *s);

/* Id of the piece p[0..len) (exact bytes, e.g. "\xe2\x96\x81the" for "▁the"), or -1 when the
 * model has no such piece (the library itself answers unk_id then; -1 tells the two apart). */
RG_TEST_API int32_t rg_spm_piece_to_id(const rg_spm *s, const char *p, size_t len);

/* The piece of id, NUL-terminated, *len bytes (len may be NULL); owned by the model, valid until
 * rg_spm_free. NULL when id is outside [0, vocab size). */
RG_TEST_API const char *rg_spm_id_to_piece(const rg_spm *s, int32_t id, size_t *len);

/* Encode text to ids: SentencePieceProcessor::Encode(text, &ids). *ids: (*n_ids) int32, malloc'd
 * (never NULL on success, even for n_ids 0: "" and all-whitespace text give no ids).
 * Errors: RG_ERR_INVALID_INPUT (NULL arguments), RG_ERR_INVALID_UTF8, RG_ERR_OOM. */
RG_TEST_API rg_status rg_spm_encode_ids(const rg_spm *s, const char *text, size_t len,
					int32_t **ids, size_t *n_ids);

/* Encode text to pieces: SentencePieceProcessor::Encode(text, &pieces) (a character the model
 * lacks comes out as its own surface, its id unk_id). Packed as one string buffer and its
 * offsets, both malloc'd:
 *   *pieces: the pieces back to back, each followed by a NUL byte;
 *   *starts: (*n + 1) size_t, piece i = (*pieces)[starts[i] .. starts[i+1] - 1) (the NUL at
 *            starts[i+1] - 1 not counted; a piece may itself hold a NUL byte), starts[0] = 0.
 * Errors as rg_spm_encode_ids. */
RG_TEST_API rg_status rg_spm_encode_pieces(const rg_spm *s, const char *text, size_t len,
					   char **pieces, size_t **starts, size_t *n);

/* Decode ids to text: SentencePieceProcessor::Decode(ids) (control pieces such as <s> </s> give
 * nothing, <unk> gives " \xe2\x81\x87 " (U+2047), "▁" becomes a space and the leading one is
 * dropped). *text: NUL-terminated, *len bytes, malloc'd. Errors: RG_ERR_INVALID_INPUT (NULL
 * arguments, an id outside [0, vocab size): the message names its index), RG_ERR_OOM. */
RG_TEST_API rg_status rg_spm_decode_ids(const rg_spm *s, const int32_t *ids, size_t n,
					char **text, size_t *len);

/* Decode pieces to text: SentencePieceProcessor::Decode(pieces). pieces: n strings of lens[i]
 * bytes (lens NULL: NUL-terminated); a string that is no piece of the model is copied as it is
 * ("▁" inside it kept), as the library does. Output and errors as rg_spm_decode_ids (a NULL
 * string: RG_ERR_INVALID_INPUT). */
RG_TEST_API rg_status rg_spm_decode_pieces(const rg_spm *s, const char *const *pieces,
					   const size_t *lens, size_t n, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
