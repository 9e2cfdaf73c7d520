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
