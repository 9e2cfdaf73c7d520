/* UTF-8, once: the strict decoder every module uses (the request parser's validation, the
 * tokenizer's decode to code points) and the encoder, plus the unchecked reads the tokenizer's
 * hot loops use on text already validated. Strict = RFC 3629: no overlong forms, no surrogates
 * (U+D800..DFFF), nothing past U+10FFFF, no truncated sequence. */
#ifndef RG_CORE_UTF8_H
#define RG_CORE_UTF8_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the code point at s[i] (i < len) into *cp. Returns its length in bytes (1-4), or 0
 * when the bytes at i are not a valid UTF-8 sequence. */
static inline size_t rg_utf8_next(const char *str, size_t len, size_t i, uint32_t *cp)
{
	const unsigned char *s = (const unsigned char *)str;
	uint32_t c = s[i], min;
	size_t need;

	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xE0) == 0xC0) {
		need = 1, c &= 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		need = 2, c &= 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		need = 3, c &= 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len - i <= need)
		return 0;
	for (size_t k = 1; k <= need; k++) {
		if ((s[i + k] & 0xC0) != 0x80)
			return 0;
		c = (c << 6) | (s[i + k] & 0x3F);
	}
	if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
		return 0;
	*cp = c;
	return need + 1;
}

/* True when s[0..len) is entirely valid UTF-8 (len 0: true). */
bool rg_utf8_valid(const char *s, size_t len);

/* Write c (<= 0x10FFFF) as UTF-8 into buf (room for 4 bytes); returns the bytes written. */
size_t rg_utf8_put(uint32_t c, char *buf);

/* Unchecked, for text already validated: the length of the sequence that lead byte b starts,
 * and the code point at p. */
static inline size_t rg_utf8_len_valid(unsigned char b)
{
	return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

static inline uint32_t rg_utf8_get_valid(const unsigned char *p)
{
	if (p[0] < 0x80)
		return p[0];
	if (p[0] < 0xE0)
		return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
	if (p[0] < 0xF0)
		return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) |
		       (p[2] & 0x3F);
	return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
	       ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

/* Byte offset of the first \u escape inside a JSON string of b (len bytes) that encodes an
 * unpaired UTF-16 surrogate (a high one not followed by \uDC00-\uDFFF, or a lone low one), or -1
 * when there is none. json-c would silently turn such an escape into U+FFFD; like serde_json
 * (TEI, TGI) the HTTP parsers refuse it, since the text the client meant is not Unicode.
 * Malformed escapes are left to the parser. */
long rg_json_find_unpaired_surrogate(const char *b, size_t len);
#endif
