/* The Split pre-tokenizer regexes of the decoder families, matched by hand (no regex engine), with
 * the semantics HF `tokenizers` gives them (Oniguruma, leftmost alternative first; Split with
 * behavior Isolated: every match is a piece). The classes are the ones the GPT-2 regex uses in
 * pretokenizers.c: \p{L} rg_hf_is_letter, \p{N} rg_hf_is_number, \s rg_bert_is_whitespace.
 *
 * Llama 3 (its tokenizer.json; llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3, "llama-bpe"):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2 (LLAMA_VOCAB_PRE_TYPE_QWEN2, "qwen2"): the same with \p{N} instead of \p{N}{1,3}.
 * Both alternations match at every position (each char is a letter, a number, a space or another
 * char), so the matches tile the text. */
#include <string.h>

#include "core/utf8.h"
#include "tokenizer/tok_internal.h"

const char *const rg_split_llama3_regex =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const rg_split_qwen2_regex =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* llama.cpp's rewrite of the same patterns (for engines without (?i:)): identical matches */
static const char *const llama3_cpp =
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	"\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen2_cpp =
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	"\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int rg_split_regex_lookup(const char *pattern)
{
	if (strcmp(pattern, rg_split_llama3_regex) == 0 || strcmp(pattern, llama3_cpp) == 0)
		return RG_SPLIT_LLAMA3;
	if (strcmp(pattern, rg_split_qwen2_regex) == 0 || strcmp(pattern, qwen2_cpp) == 0)
		return RG_SPLIT_QWEN2;
	return -1;
}

enum { CLS_LETTER, CLS_NUMBER, CLS_SPACE, CLS_OTHER };

static uint32_t cp_at(const char *s, size_t i)
{
	return rg_utf8_get_valid((const unsigned char *)s + i);
}

static int cls_of(uint32_t c)
{
	if (rg_hf_is_letter(c))
		return CLS_LETTER;
	if (rg_hf_is_number(c))
		return CLS_NUMBER;
	if (rg_bert_is_whitespace(c))
		return CLS_SPACE;
	return CLS_OTHER;
}

static size_t nxt(const char *s, size_t i)
{
	return i + rg_utf8_len_valid((unsigned char)s[i]);
}

static size_t run_of(const char *s, size_t n, size_t i, int cls)
{
	while (i < n && cls_of(cp_at(s, i)) == cls)
		i = nxt(s, i);
	return i;
}

/* The char at i folded for (?i:) on the contraction letters: ASCII lower case, and U+017F LATIN
 * SMALL LETTER LONG S, which folds to 's' (Oniguruma's case-insensitive match); else 0. */
static char fold_at(const char *s, size_t n, size_t i, size_t *end)
{
	if (i >= n)
		return 0;
	uint32_t c = cp_at(s, i);
	*end = nxt(s, i);
	if (c == 0x17F)
		return 's';
	if (c < 0x80)
		return (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
	return 0;
}

size_t rg_split_regex_match(int which, const char *s, size_t n, size_t i)
{
	uint32_t c = cp_at(s, i);
	int cls = cls_of(c);
	size_t e = 0, e2 = 0;

	/* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
	if (c == '\'') {
		char a = fold_at(s, n, i + 1, &e);
		if (a == 's' || a == 't' || a == 'm' || a == 'd')
			return e;
		char b = a ? fold_at(s, n, e, &e2) : 0;
		if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
			return e2;
	}
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	if (cls == CLS_LETTER)
		return run_of(s, n, i, CLS_LETTER);
	if (c != '\r' && c != '\n' && cls != CLS_NUMBER && nxt(s, i) < n &&
	    cls_of(cp_at(s, nxt(s, i))) == CLS_LETTER)
		return run_of(s, n, nxt(s, i), CLS_LETTER);
	/* \p{N}{1,3} (Qwen2: \p{N}) */
	if (cls == CLS_NUMBER) {
		e = nxt(s, i);
		for (int k = 1; which == RG_SPLIT_LLAMA3 && k < 3 && e < n &&
				cls_of(cp_at(s, e)) == CLS_NUMBER;
		     k++)
			e = nxt(s, e);
		return e;
	}
	/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
	e = i;
	if (c == ' ' && i + 1 < n && cls_of(cp_at(s, i + 1)) == CLS_OTHER)
		e = i + 1;
	if (cls_of(cp_at(s, e)) == CLS_OTHER) {
		e = run_of(s, n, e, CLS_OTHER);
		while (e < n && (s[e] == '\r' || s[e] == '\n'))
			e++;
		return e;
	}
	/* here c is whitespace. \s*[\r\n]+: up to the last \r or \n of the whitespace run */
	e = run_of(s, n, i, CLS_SPACE);
	for (size_t k = e; k > i; k--)
		if (s[k - 1] == '\r' || s[k - 1] == '\n')
			return k;
	/* \s+(?!\S), else \s+ */
	if (e == n)
		return e;
	size_t last = e - 1;
	while (((unsigned char)s[last] & 0xC0) == 0x80)
		last--;
	return last > i ? last : e;
}
