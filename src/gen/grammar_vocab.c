/* The vocabulary of a tokenizer as constrained decoding's byte trie (grammar.h
 * rg_token_trie_from_tokenizer): each token's bytes as its decoder writes them. Apart from
 * grammar.c so that the automata need no tokenizer (the request parser's fuzzer links them
 * alone). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"
#include "gen/grammar.h"
#include "tokenizer/tok_internal.h"

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

rg_status rg_token_trie_from_tokenizer(const rg_tokenizer *tk, int vocab, rg_token_trie **out)
{
	char **b = NULL;
	size_t *lens = NULL;
	int16_t inv[0x200];
	char map[256][3];
	bool bl;
	rg_status st;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "token trie: NULL out");
	*out = NULL;
	if (!tk || vocab < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "token trie: no tokenizer");
	bl = rg_tokenizer_byte_level_decoder(tk);
	for (int k = 0; k < 0x200; k++)
		inv[k] = -1;
	rg_byte_level_map(map);
	for (int k = 0; k < 256; k++)
		inv[rg_utf8_get_valid((const unsigned char *)map[k])] = (int16_t)k;
	b = calloc((size_t)vocab, sizeof(char *));
	lens = calloc((size_t)vocab, sizeof(size_t));
	if (!b || !lens) {
		st = rg_errorf(RG_ERR_OOM, "token trie: out of memory");
		goto out_free;
	}
	for (int id = 0; id < vocab; id++) {
		size_t n, k = 0, m = 0;
		const char *s = rg_tokenizer_id_to_token(tk, id, &n);
		bool all = bl;

		if (!s || !n || rg_tokenizer_is_special(tk, id))
			continue;
		if (!(b[id] = malloc(n + 1))) {
			st = rg_errorf(RG_ERR_OOM, "token trie: out of memory");
			goto out_free;
		}
		if (bl) { /* all chars stand-ins: their bytes; else the token's own (decode_stream.c) */
			for (k = 0; k < n; k += rg_utf8_len_valid((unsigned char)s[k])) {
				uint32_t cp = rg_utf8_get_valid((const unsigned char *)s + k);

				if (cp >= 0x200 || inv[cp] < 0) {
					all = false;
					break;
				}
			}
		}
		if (all) {
			for (k = 0; k < n; k += rg_utf8_len_valid((unsigned char)s[k]))
				b[id][m++] = (char)inv[rg_utf8_get_valid((const unsigned char *)s + k)];
		} else if (!bl && n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' &&
			   s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
			b[id][m++] = (char)(hexval(s[3]) * 16 + hexval(s[4])); /* byte fallback */
		} else if (!bl) {
			for (k = 0; k < n; k++) { /* Metaspace: U+2581 is a space */
				if (k + 2 < n && (unsigned char)s[k] == 0xE2 &&
				    (unsigned char)s[k + 1] == 0x96 && (unsigned char)s[k + 2] == 0x81) {
					b[id][m++] = ' ';
					k += 2;
				} else {
					b[id][m++] = s[k];
				}
			}
		} else {
			memcpy(b[id], s, n);
			m = n;
		}
		lens[id] = m;
	}
	st = rg_token_trie_build((const char *const *)b, lens, vocab, out);
out_free:
	if (b)
		for (int id = 0; id < vocab; id++)
			free(b[id]);
	free(b);
	free(lens);
	return st;
}
