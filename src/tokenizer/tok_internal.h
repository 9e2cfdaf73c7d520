/* Internal to src/tokenizer/: the pieces tokenizer.c assembles into a HF `tokenizers` pipeline
 * (normalizer -> pre-tokenizer -> model -> post-processor) and the helpers they share.
 * Every component is read-only after load; per-call scratch lives in the caller's structs, so
 * concurrent encodes are safe. Load functions take the component's JSON object and the file path
 * (for messages) and answer RG_ERR_FORMAT (malformed), RG_ERR_UNSUPPORTED (a type or option not
 * implemented, named in the message) or RG_ERR_OOM. */
#ifndef RG_TOKENIZER_TOK_INTERNAL_H
#define RG_TOKENIZER_TOK_INTERNAL_H
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "ragged.h"
#include "tokenizer/bert_normalizer.h"
#include "tokenizer/tokenizer.h"

/* ---- JSON field access (tokenizer.json conventions: absent and null mean "default") ---- */

/* o[key], or NULL when o is not an object or lacks key. */
json_object *rg_tok_jget(json_object *o, const char *key);
/* o["type"] when it is a string, else NULL. */
const char *rg_tok_jtype(json_object *o);
/* Boolean field: absent or null -> dflt; non-boolean -> RG_ERR_FORMAT naming where and key. */
rg_status rg_tok_jbool(json_object *o, const char *key, bool dflt, bool *out, const char *where);
/* True when v is absent or JSON null. */
bool rg_tok_jnull(json_object *v);

/* ---- open-addressing string -> id map (the last put of a key wins, as Rust's insert) ---- */

typedef struct rg_strmap_ent {
	uint32_t off, len; /* key bytes in the arena */
	int32_t id;
	uint32_t hash;
} rg_strmap_ent;

typedef struct rg_strmap {
	rg_strmap_ent *ents; /* (n_ents) */
	size_t n_ents, cap_ents;
	char *arena; /* keys, each NUL-terminated */
	size_t arena_n, arena_cap;
	uint32_t *slots; /* (mask + 1) index into ents + 1; 0 = empty */
	size_t mask;
	uint32_t max_len; /* longest key in bytes */
} rg_strmap;

void rg_strmap_free(rg_strmap *m);
/* id of key s[0..n), or -1. */
int32_t rg_strmap_get(const rg_strmap *m, const char *s, size_t n);
rg_status rg_strmap_put(rg_strmap *m, const char *s, size_t n, int32_t id);

/* ---- ids ---- */

typedef struct rg_idvec {
	int32_t *v;
	size_t n, cap;
	uint32_t *len; /* (n) with_len only: bytes of the word each id covers (HF Token offsets) */
	size_t cap_len;
	bool with_len;
} rg_idvec;

/* Append id; with_len: the model says how many bytes of its word the id covers (the word's
 * tokens cover it left to right, as HF's models report offsets: cumulative lengths). */
rg_status rg_idvec_push_len(rg_idvec *a, int32_t id, uint32_t len);
static inline rg_status rg_idvec_push(rg_idvec *a, int32_t id)
{
	return rg_idvec_push_len(a, id, 0);
}
void rg_idvec_free(rg_idvec *a);

/* ---- alignments (token offsets) ---- */

/* rg_span (bert_normalizer.h): per byte of a derived string (normalized text, a pre-tokenized
 * word) the bytes of the original text it comes from, HF NormalizedString's alignments. Every
 * byte of one char carries the same span. */
/* Make room for n spans (v->n unchanged); RG_ERR_OOM. */
rg_status rg_spanvec_reserve(rg_spanvec *v, size_t n);
void rg_spanvec_free(rg_spanvec *v);
/* Append the span of every byte of s[0..n) (valid UTF-8) when s is the original text at byte
 * offset base: each byte gets its char's range. */
rg_status rg_spanvec_identity(rg_spanvec *v, const char *s, size_t n, size_t base);

/* One char of a transformation, as HF NormalizedString::transform takes it: change 0 replaces
 * the next input char (and takes its span), -k replaces it and removes the k chars after it,
 * +1 inserts a char (with the span of the input byte before the current position). */
typedef struct rg_change {
	uint32_t cp;
	int32_t change;
} rg_change;

typedef struct rg_chgvec {
	rg_change *v;
	size_t n, cap;
} rg_chgvec;

rg_status rg_chgvec_push(rg_chgvec *v, uint32_t cp, int32_t change);
void rg_chgvec_free(rg_chgvec *v);

/* HF NormalizedString::transform over the whole of in[0..n) (spans in_al, n of them): the chars
 * of ch, skipping `initial` input chars first, into out / out_al (cleared first). */
rg_status rg_align_transform(const char *in, size_t n, const rg_span *in_al, const rg_chgvec *ch,
			     size_t initial, rg_buf *out, rg_spanvec *out_al);

/* ---- normalizers (normalizers.c, precompiled.c) ---- */

typedef struct rg_normalizer rg_normalizer;

/* Scratch for rg_normalizer_apply; zero-initialise, free with rg_norm_scratch_free. */
typedef struct rg_norm_scratch {
	rg_buf tmp;
	rg_cpvec a, b, c;
	/* aligned mode: the other ping-pong text and its spans, per-code-point spans of a, b, c,
	 * one transformation list */
	rg_buf ubuf;
	rg_spanvec tal, ual, sp_a, sp_b, sp_c;
	rg_chgvec chg;
} rg_norm_scratch;

void rg_norm_scratch_free(rg_norm_scratch *s);

/* j: tokenizer.json "normalizer" (NULL / null: identity, *out = NULL). Supported: BertNormalizer,
 * Sequence, Precompiled, Replace (String pattern; Regex only of the form "<char>{n,}" or
 * "<char>+"), Strip, StripAccents, Lowercase, NFC, NFD, NFKC, NFKD. */
rg_status rg_normalizer_load(json_object *j, const char *path, rg_normalizer **out);
void rg_normalizer_free(rg_normalizer *n);
/* Normalize s[0..len) (valid UTF-8) into out (cleared first; valid UTF-8). nz NULL: copy. */
rg_status rg_normalizer_apply(const rg_normalizer *nz, const char *s, size_t len, rg_buf *out,
			      rg_norm_scratch *sc);
/* As rg_normalizer_apply, keeping alignments as HF does: in_al (len spans) are the input bytes'
 * original spans, *out_al gets one span per output byte (cleared first). The text is the same as
 * rg_normalizer_apply's. */
rg_status rg_normalizer_apply_al(const rg_normalizer *nz, const char *s, size_t len,
				 const rg_span *in_al, rg_buf *out, rg_spanvec *out_al,
				 rg_norm_scratch *sc);

/* SentencePiece precompiled_charsmap (precompiled.c). blob: the decoded bytes. */
typedef struct rg_precompiled rg_precompiled;
rg_status rg_precompiled_load(const char *b64, const char *path, rg_precompiled **out);
void rg_precompiled_free(rg_precompiled *p);
/* HF `tokenizers` Precompiled::normalize of s[0..len) (valid UTF-8), appended to out. */
void rg_precompiled_apply(const rg_precompiled *p, const char *s, size_t len, rg_buf *out);
/* The same as HF's transformation list (for alignments): appended to ch; *modified false when
 * no rule applied (HF then leaves the string, and its alignments, alone). */
rg_status rg_precompiled_changes(const rg_precompiled *p, const char *s, size_t len, rg_chgvec *ch,
				 bool *modified);

/* ---- pre-tokenizers (pretokenizers.c) ---- */

typedef struct rg_pretok rg_pretok;

#define RG_PRETOK_MAX_DEPTH 8
typedef struct rg_pretok_scratch {
	rg_buf lvl[RG_PRETOK_MAX_DEPTH]; /* the output of the step at that depth */
	rg_buf aux[RG_PRETOK_MAX_DEPTH]; /* its intermediate text (ByteLevel's prefixed piece) */
	rg_spanvec lal[RG_PRETOK_MAX_DEPTH], aal[RG_PRETOK_MAX_DEPTH]; /* their spans (aligned) */
} rg_pretok_scratch;

void rg_pretok_scratch_free(rg_pretok_scratch *s);

/* Called once per word the pre-tokenizer emits (n > 0, valid UTF-8); al: the span of each of
 * its bytes (n of them) when the caller gave spans, else NULL. */
typedef rg_status (*rg_word_fn)(void *ctx, const char *w, size_t n, const rg_span *al);

/* j: tokenizer.json "pre_tokenizer" (NULL / null: none, *out = NULL: the whole piece is one
 * word). Supported: BertPreTokenizer, ByteLevel, Metaspace, WhitespaceSplit, Sequence. */
rg_status rg_pretok_load(json_object *j, const char *path, rg_pretok **out);
void rg_pretok_free(rg_pretok *p);
/* Split s[0..len) (valid UTF-8, already normalized) into words. at_start: the piece starts at
 * offset 0 of the original text (Metaspace prepend_scheme "first"). */
/* True when a Metaspace step uses prepend_scheme "first" (it needs original offsets). */
bool rg_pretok_prepends_first(const rg_pretok *p);
/* al: the spans of s's bytes (len of them) to carry into the words, or NULL. */
rg_status rg_pretok_apply(const rg_pretok *p, const char *s, size_t len, bool at_start,
			  const rg_span *al, rg_pretok_scratch *sc, rg_word_fn emit, void *ctx);
/* GPT-2 bytes_to_unicode: each byte's printable stand-in as UTF-8 (1-2 bytes, NUL-ended); the
 * ByteLevel pre-tokenizer's map, which its decoder inverts. */
void rg_byte_level_map(char map[256][3]);

/* Split regexes known to pretok_llama.c (matched by hand): a Split step accepts a pattern only
 * when rg_split_regex_lookup knows it. */
enum { RG_SPLIT_LLAMA3, RG_SPLIT_QWEN2 };
extern const char *const rg_split_llama3_regex; /* Llama 3's tokenizer.json pattern */
extern const char *const rg_split_qwen2_regex;	/* Qwen2's */
/* RG_SPLIT_* of pattern (the HF or llama.cpp spelling), or -1. */
int rg_split_regex_lookup(const char *pattern);
/* End of the match of regex `which` that starts at i < n in s (valid UTF-8); always > i. */
size_t rg_split_regex_match(int which, const char *s, size_t n, size_t i);

/* ---- models ---- */

typedef struct rg_bpe rg_bpe;

typedef struct rg_bpe_sym {
	int32_t c;	     /* token id */
	int32_t prev, next; /* symbol indices, -1 none */
	uint32_t len;	     /* bytes covered; 0 = merged away */
} rg_bpe_sym;

typedef struct rg_bpe_merge {
	uint32_t rank, pos;
	int32_t new_id;
} rg_bpe_merge;

typedef struct rg_bpe_scratch {
	rg_bpe_sym *sym;
	size_t n_sym, cap_sym;
	rg_bpe_merge *heap;
	size_t n_heap, cap_heap;
	char *piece; /* prefix + char + suffix */
	size_t cap_piece;
} rg_bpe_scratch;

void rg_bpe_scratch_free(rg_bpe_scratch *s);
/* model: tokenizer.json "model" of type BPE. */
rg_status rg_bpe_load(json_object *model, const char *path, rg_bpe **out);
void rg_bpe_free(rg_bpe *b);
int32_t rg_bpe_max_id(const rg_bpe *b);
/* The vocabulary (token -> id), for id -> token tables. */
const rg_strmap *rg_bpe_vocab(const rg_bpe *b);
/* Appends the ids of word w[0..n) (valid UTF-8, n > 0) to ids. */
rg_status rg_bpe_encode(const rg_bpe *b, const char *w, size_t n, rg_bpe_scratch *sc,
			rg_idvec *ids);

typedef struct rg_unigram rg_unigram;

typedef struct rg_uni_node {
	double score;
	int32_t id;
	int32_t start; /* byte offset where the best path's last piece starts; -1 none */
} rg_uni_node;

typedef struct rg_uni_scratch {
	rg_uni_node *best; /* (n + 1) */
	size_t cap_best;
	uint32_t *ends; /* piece ends found on the back-trace */
	size_t cap_ends;
} rg_uni_scratch;

void rg_uni_scratch_free(rg_uni_scratch *s);
/* model: tokenizer.json "model" of type Unigram. */
rg_status rg_unigram_load(json_object *model, const char *path, rg_unigram **out);
void rg_unigram_free(rg_unigram *u);
int32_t rg_unigram_max_id(const rg_unigram *u);
const rg_strmap *rg_unigram_pieces(const rg_unigram *u);
rg_status rg_unigram_encode(const rg_unigram *u, const char *w, size_t n, rg_uni_scratch *sc,
			    rg_idvec *ids);

/* ---- tokenizers built from other sources (bpe_gguf.c) and shared with tokenizer.c ---- */

/* A tokenizer from a parsed tokenizer.json tree (borrowed; the caller still puts it); where names
 * it in messages. Errors as rg_tokenizer_load. */
rg_status rg_tokenizer_from_json(json_object *root, const char *where, rg_tokenizer **out);
/* GPT-2's <dir>/vocab.json + <dir>/merges.txt as the tokenizer.json tree they stand for (*out
 * owned by the caller); *out = NULL with RG_OK when either file is absent. RG_ERR_IO /
 * RG_ERR_FORMAT / RG_ERR_OOM for unreadable or malformed files. */
rg_status rg_tok_gpt2_files_json(const char *dir, json_object **out);
/* True when decoding is exactly the ByteLevel decoder (stand-ins -> bytes, lossy UTF-8). */
bool rg_tokenizer_byte_level_decoder(const rg_tokenizer *t);
/* True when id is a special added token (left out by decode with skip_special). */
bool rg_tokenizer_is_special(const rg_tokenizer *t, int32_t id);
#endif
