/* Constrained decoding (issue 31, structured outputs): a regular expression compiled to a DFA
 * over bytes, the vocabulary as a byte trie, and the token masks a sampler applies.
 *
 * Algorithm: DFA token masks as in Willard & Louf 2023 ("Efficient Guided Generation for Large
 * Language Models", outlines / outlines-core): the pattern is a regular language over UTF-8
 * bytes; a token is allowed in DFA state s when walking its bytes from s never reaches the dead
 * state. Masks are context-independent (they depend on the DFA state only), so they are cached
 * per state, as XGrammar (Dong et al. 2024) caches its context-independent tokens; a mask is
 * computed by one depth-first walk of the vocabulary's byte trie, so shared prefixes are walked
 * once.
 *
 * Regex subset (Python re / ECMA-262 syntax, matched as re.fullmatch on the whole output, the
 * pattern read as UTF-8 and matched per code point as Python matches a str):
 *   literals (any UTF-8 character), escapes \. \\ \* ... of any punctuation, \n \t \r \f \v \0,
 *   \xHH, \uHHHH, \UHHHHHHHH; classes [abc] [a-z] [^...] with escapes inside; `.` (any
 *   character but \n); \d \w \s and \D \W \S, ASCII classes ([0-9], [A-Za-z0-9_],
 *   [ \t\n\r\f\v]: Python's re.ASCII, ECMA-262's \d \w); * + ? {m} {m,} {m,n} (a trailing ? -
 *   lazy - is accepted: it does not change the language); alternation |; groups (...), (?:...)
 *   and named groups (?P<n>...) / (?<n>...); ^ at the very start and $ at the very end (no-ops
 *   under full matching). Refused with RG_ERR_UNSUPPORTED naming the construct: backreferences,
 *   look-around, word boundaries, inline flags, anchors elsewhere.
 * Limits (RG_ERR_TOO_LONG with a message): pattern 64 KiB, a counted repetition's bound 1000,
 * 2^20 NFA states, max_states DFA states (RG_GRAMMAR_MAX_STATES by default), 2^25 NFA state
 * visits while determinizing (a bound on the compile's time, about a second).
 * Threads: a compiled rg_dfa is immutable and reference-counted atomically (shared by the
 * parse-time check and the engines); an rg_grammar (its mask cache fills lazily) has one owner,
 * the engine's step. */
#ifndef RG_GEN_GRAMMAR_H
#define RG_GEN_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/export.h"
#include "ragged.h"
#include "tokenizer/tokenizer.h"

#define RG_GRAMMAR_MAX_STATES 50000 /* DFA states of one grammar, by default */
#define RG_GRAMMAR_MASK_BYTES ((size_t)32 << 20) /* cached masks of one grammar, at most */

typedef struct rg_dfa rg_dfa;
typedef struct rg_token_trie rg_token_trie;

/* Compile pattern (len bytes of UTF-8) into a DFA of at most max_states states (<= 0: the
 * default) whose every state can still reach acceptance (transitions into states that cannot are
 * dead). *out is the caller's (rg_dfa_free); NULL on error. Errors: RG_ERR_INVALID_INPUT (a
 * syntax error, or a pattern that matches no string, the message naming the offset),
 * RG_ERR_UNSUPPORTED (a construct above), RG_ERR_TOO_LONG (a limit), RG_ERR_OOM. */
RG_TEST_API rg_status rg_dfa_compile(const char *pattern, size_t len, int max_states,
				     rg_dfa **out);
/* A DFA is reference-counted (atomically: a compiled DFA is immutable, shared between threads):
 * rg_dfa_ref adds a reference, rg_dfa_free drops one and frees at 0 (accepts NULL). */
RG_TEST_API void rg_dfa_free(rg_dfa *d);
rg_dfa *rg_dfa_ref(rg_dfa *d);
/* Bytes d holds (its tables). */
size_t rg_dfa_bytes(const rg_dfa *d);
/* The start state, and the next state after byte c from s (-1: dead; s -1 gives -1). */
int rg_dfa_start(const rg_dfa *d);
int rg_dfa_next(const rg_dfa *d, int s, uint8_t c);
bool rg_dfa_accepting(const rg_dfa *d, int s);
/* Whether some byte leads from s to a live state. */
bool rg_dfa_has_out(const rg_dfa *d, int s);
int rg_dfa_n_states(const rg_dfa *d);
/* Whether the whole of s (len bytes) is accepted. */
RG_TEST_API bool rg_dfa_match(const rg_dfa *d, const char *s, size_t len);

/* The vocabulary as a byte trie: token i's bytes (lens[i] bytes of bytes[i]; NULL or 0 bytes:
 * never allowed by a mask, e.g. special tokens, which the engine handles itself). *out is the
 * caller's (rg_token_trie_free). RG_ERR_INVALID_INPUT (n < 1), RG_ERR_OOM. */
RG_TEST_API rg_status rg_token_trie_build(const char *const *bytes, const size_t *lens, int n,
					  rg_token_trie **out);
/* The trie of a tokenizer's vocabulary as its decoder writes each token (ByteLevel: the GPT-2
 * stand-ins inverted; Metaspace: U+2581 as a space; byte fallback <0xHH>: that byte); special
 * tokens have no bytes. vocab: ids [0, vocab) (the model's, which may exceed the tokenizer's).
 * Errors as rg_token_trie_build. */
rg_status rg_token_trie_from_tokenizer(const rg_tokenizer *t, int vocab, rg_token_trie **out);
RG_TEST_API void rg_token_trie_free(rg_token_trie *t); /* accepts NULL */
int rg_token_trie_vocab(const rg_token_trie *t);

/* A DFA and the mask of every state it has been asked about (bitsets of ceil(vocab / 64)
 * words: bit v of word v / 64 set when token v keeps the DFA live). Owns a reference to d; borrows trie (alive
 * while the grammar is). Reference-counted: rg_grammar_ref / rg_grammar_unref (frees at 0). */
typedef struct rg_grammar rg_grammar;
RG_TEST_API rg_status rg_grammar_new(rg_dfa *d, const rg_token_trie *trie, rg_grammar **out);
rg_grammar *rg_grammar_ref(rg_grammar *g);
RG_TEST_API void rg_grammar_unref(rg_grammar *g); /* accepts NULL */
const rg_dfa *rg_grammar_dfa(const rg_grammar *g);
/* The mask of state s (>= 0), computed on first use and cached while the grammar's masks take
 * at most RG_GRAMMAR_MASK_BYTES (past that, computed each time into a scratch mask valid until
 * the next call). NULL on OOM. Owned by g. */
RG_TEST_API const uint64_t *rg_grammar_mask(rg_grammar *g, int s);
/* The cached mask of state s, or NULL when it is not cached (never computed, or past the
 * budget). Reads only: threads may call it together while nothing calls rg_grammar_mask. */
const uint64_t *rg_grammar_mask_cached(const rg_grammar *g, int s);
/* Test hook: the cache budget of g's masks, bytes (RG_GRAMMAR_MASK_BYTES by default). */
RG_TEST_API void rg_grammar_set_mask_budget(rg_grammar *g, size_t bytes);
/* The state after token tok's bytes from s (-1: dead). */
int rg_grammar_advance(const rg_grammar *g, int s, int32_t tok);

/* The regex of a JSON value (json_schema.c): a JSON Schema (schema_len bytes of JSON text) as
 * outlines-core's build_regex_from_schema writes it, or any JSON value (kind
 * RG_GRAMMAR_JSON_OBJECT, schema NULL). *out malloc'd, NUL-terminated (caller frees). */
RG_TEST_API rg_status rg_json_schema_regex(const char *schema, size_t schema_len, char **out);
/* The regex of any JSON value, objects and arrays nested at most depth deep. */
rg_status rg_json_any_regex(int depth, char **out);
/* Append to b the regex that matches exactly the text s (len bytes): every byte that is not
 * an ASCII letter, digit, space or a byte >= 0x80 escaped. */
void rg_regex_escape(rg_buf *b, const char *s, size_t len);
/* The compiled grammar of a request's (kind, text) over trie (borrowed), at most max_states
 * DFA states (<= 0: the default). The DFA comes from a process-wide cache of the last compiled
 * ones (32, 64 MiB at most; thread-safe), which rg_grammar_compile_check fills: a server that
 * checks a request's grammar while parsing it compiles it once, outside the engine's lock.
 * Errors as rg_grammar_compile_check (include/ragged.h). */
rg_status rg_grammar_from_params(rg_grammar_kind kind, const char *text,
				 const rg_token_trie *trie, int max_states, rg_grammar **out);
#endif
