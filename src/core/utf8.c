/* See utf8.h. */
#include "core/utf8.h"

bool rg_utf8_valid(const char *s, size_t len)
{
	uint32_t cp;

	for (size_t i = 0, k; i < len; i += k)
		if ((k = rg_utf8_next(s, len, i, &cp)) == 0)
			return false;
	return true;
}

size_t rg_utf8_put(uint32_t c, char *buf)
{
	unsigned char *b = (unsigned char *)buf;

	if (c < 0x80) {
		b[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		b[0] = (unsigned char)(0xC0 | (c >> 6));
		b[1] = (unsigned char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		b[0] = (unsigned char)(0xE0 | (c >> 12));
		b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
		b[2] = (unsigned char)(0x80 | (c & 0x3F));
		return 3;
	}
	b[0] = (unsigned char)(0xF0 | (c >> 18));
	b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
	b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
	b[3] = (unsigned char)(0x80 | (c & 0x3F));
	return 4;
}

static int hex4(const char *p, size_t avail)
{
	int v = 0;

	if (avail < 4)
		return -1;
	for (int k = 0; k < 4; k++) {
		char c = p[k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/* Byte offset of the first \u escape inside a JSON string that encodes an unpaired UTF-16
 * surrogate (a high one not followed by \uDC00-\uDFFF, or a lone low one), or -1 when there is
 * none. json-c would silently turn such an escape into U+FFFD; like serde_json (TEI) we refuse it,
 * since the text the client meant is not Unicode. Malformed escapes are left to the parser. */
long rg_json_find_unpaired_surrogate(const char *b, size_t len)
{
	bool in_str = false;

	for (size_t i = 0; i < len; i++) {
		int cp, lo;

		if (!in_str) {
			in_str = b[i] == '"';
			continue;
		}
		if (b[i] == '"') {
			in_str = false;
			continue;
		}
		if (b[i] != '\\' || i + 1 >= len)
			continue;
		if (b[i + 1] != 'u') {
			i++; /* \" \\ \n ...: skip the escaped character */
			continue;
		}
		cp = hex4(b + i + 2, len - i - 2);
		if (cp < 0) {
			i++;
			continue;
		}
		if (cp >= 0xDC00 && cp <= 0xDFFF)
			return (long)i;
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			lo = i + 11 < len && b[i + 6] == '\\' && b[i + 7] == 'u'
				     ? hex4(b + i + 8, len - i - 8)
				     : -1;
			if (lo < 0xDC00 || lo > 0xDFFF)
				return (long)i;
			i += 11;
			continue;
		}
		i += 5;
	}
	return -1;
}
