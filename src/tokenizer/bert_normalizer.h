/* Internal to src/tokenizer/: BERT text normalization and pre-tokenization on code points,
 * matching HF `tokenizers` BertNormalizer and BertPreTokenizer (tokenizers 0.2x, Rust). */
#ifndef RG_TOKENIZER_BERT_NORMALIZER_H
#define RG_TOKENIZER_BERT_NORMALIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/utf8.h"
#include "ragged.h"

/* A growable array of code points; grows geometrically, freed with rg_cpvec_free. */
typedef struct rg_cpvec {
	uint32_t *v;
	size_t n, cap;
} rg_cpvec;

rg_status rg_cpvec_reserve(rg_cpvec *a, size_t cap);
void rg_cpvec_free(rg_cpvec *a);

/* The bytes [a, b) of the original text that a code point or byte of a derived string comes from
 * (HF NormalizedString's alignments), and a growable array of them (tok_util.c). */
typedef struct rg_span {
	uint32_t a, b;
} rg_span;

typedef struct rg_spanvec {
	rg_span *v;
	size_t n, cap;
} rg_spanvec;

typedef struct rg_bert_norm {
	bool enabled;		   /* false: identity (normalizer null in tokenizer.json) */
	bool clean_text;	   /* drop \0, U+FFFD, Cc/Cf/Co (not \t\n\r); whitespace -> ' ' */
	bool handle_chinese_chars; /* ' ' around CJK ideographs */
	bool strip_accents;	   /* NFD then drop Mn (already resolved: null -> lowercase) */
	bool lowercase;		   /* Rust char::to_lowercase per char */
} rg_bert_norm;

/* Decode len bytes of strict UTF-8 (no overlongs, surrogates or > U+10FFFF) and append the code
 * points to out. RG_ERR_INVALID_UTF8 names the byte offset (base + local offset) of the first bad
 * sequence. */
rg_status rg_utf8_decode(const char *s, size_t len, size_t base, rg_cpvec *out);


/* Normalize in[0..n) into out (cleared first), using tmp as scratch. Never fails except OOM. */
rg_status rg_bert_normalize(const rg_bert_norm *cfg, const uint32_t *in, size_t n, rg_cpvec *out,
			    rg_cpvec *tmp);
/* The same, carrying one span per code point: in_sp (n), *out_sp (out->n), tmp_sp scratch. Each
 * output code point takes the span of the input code point it comes from, which is what HF's
 * filter / map / transform / NFD / lowercase alignments give for these steps. */
rg_status rg_bert_normalize_al(const rg_bert_norm *cfg, const uint32_t *in, const rg_span *in_sp,
			       size_t n, rg_cpvec *out, rg_spanvec *out_sp, rg_cpvec *tmp,
			       rg_spanvec *tmp_sp);

/* Character classes as HF's BertPreTokenizer sees them. */
bool rg_bert_is_whitespace(uint32_t c); /* Rust char::is_whitespace */
bool rg_bert_is_punct(uint32_t c);	/* ASCII punctuation or Unicode P* */

/* Classes of HF's other components (tables generated from HF: hf_unicode_tables_ext.h). */
bool rg_hf_is_letter(uint32_t c); /* \p{L} of the GPT-2 regex (Oniguruma) */
bool rg_hf_is_number(uint32_t c); /* \p{N} of the GPT-2 regex */
bool rg_hf_is_mark(uint32_t c);	  /* dropped by the StripAccents normalizer */

/* Canonical (compat: compatibility) decomposition of in[0..n) into out (cleared first), with the
 * canonical ordering of combining marks: HF's NFD / NFKD, whose Unicode data is older than
 * utf8proc's (the code points it leaves alone are kept). */
rg_status rg_unicode_decompose(const uint32_t *in, size_t n, bool compat, rg_cpvec *out);
/* The same carrying spans (in_sp: n; *out_sp: out->n, or both NULL): every code point of a
 * decomposition takes its source's span, and the canonical reordering moves spans along. */
rg_status rg_unicode_decompose_al(const uint32_t *in, const rg_span *in_sp, size_t n, bool compat,
				  rg_cpvec *out, rg_spanvec *out_sp);
/* Canonical composition (NFC's second half) of in[0..n) (already canonically decomposed) into
 * out, as utf8proc composes, composition exclusions left decomposed; each composite takes its
 * starter's span (HF: it replaces the starter and removes the marks). Spans optional as above. */
rg_status rg_unicode_compose_al(const uint32_t *in, const rg_span *in_sp, size_t n, rg_cpvec *out,
				rg_spanvec *out_sp);
#endif
