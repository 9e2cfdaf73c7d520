/* See buf.h. */
#include "core/buf.h"

#include "core/f32_shortest.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rg_buf_init(rg_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void rg_buf_free(rg_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

bool rg_buf_reserve(rg_buf *b, size_t extra)
{
	size_t cap;
	char *p;

	if (b->oom)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

void rg_buf_put(rg_buf *b, const char *s, size_t n)
{
	if (!rg_buf_reserve(b, n))
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void rg_buf_puts(rg_buf *b, const char *s)
{
	rg_buf_put(b, s, strlen(s));
}

void rg_buf_printf(rg_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !rg_buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void rg_buf_json_str(rg_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	rg_buf_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };

		if (c == '"' || c == '\\') {
			char e[2] = { '\\', (char)c };
			rg_buf_put(b, e, 2);
		} else if (c < 0x20) {
			rg_buf_put(b, esc, 6);
		} else {
			rg_buf_put(b, (const char *)&s[i], 1);
		}
	}
	rg_buf_put(b, "\"", 1);
}

size_t rg_f32_json(char *out, float v)
{
	char dig[10];
	char *p = out;
	uint32_t d;
	int e10, k = 10, n, E;

	if (!isfinite(v)) {
		memcpy(out, "null", 4);
		return 4;
	}
	if (signbit(v))
		*p++ = '-';
	if (v == 0) {
		*p++ = '0';
		return (size_t)(p - out);
	}
	rg_f32_shortest(v, &d, &e10);
	do {
		dig[--k] = (char)('0' + d % 10);
		d /= 10;
	} while (d);
	n = 10 - k;          /* digits in dig[k..9] */
	E = e10 + n - 1;     /* v = d.ddd x 10^E */
	if (E >= 0 && E < 9) {
		if (n <= E + 1) { /* an integer: the digits, then zeros */
			memcpy(p, dig + k, (size_t)n);
			p += n;
			memset(p, '0', (size_t)(E + 1 - n));
			p += E + 1 - n;
		} else {
			memcpy(p, dig + k, (size_t)E + 1);
			p += E + 1;
			*p++ = '.';
			memcpy(p, dig + k + E + 1, (size_t)(n - E - 1));
			p += n - E - 1;
		}
	} else if (E < 0 && E >= -4) {
		*p++ = '0';
		*p++ = '.';
		memset(p, '0', (size_t)(-E - 1));
		p += -E - 1;
		memcpy(p, dig + k, (size_t)n);
		p += n;
	} else {
		unsigned a = (unsigned)(E < 0 ? -E : E);

		*p++ = dig[k];
		if (n > 1) {
			*p++ = '.';
			memcpy(p, dig + k + 1, (size_t)n - 1);
			p += n - 1;
		}
		*p++ = 'e';
		*p++ = E < 0 ? '-' : '+';
		if (a >= 10) /* |E| <= 45 for a float32 */
			*p++ = (char)('0' + a / 10);
		else
			*p++ = '0';
		*p++ = (char)('0' + a % 10);
	}
	return (size_t)(p - out);
}

void rg_buf_float(rg_buf *b, float v)
{
	if (!rg_buf_reserve(b, RG_F32_JSON_MAX))
		return;
	b->len += rg_f32_json(b->data + b->len, v);
	b->data[b->len] = '\0';
}

void rg_buf_float_array(rg_buf *b, const float *v, size_t n)
{
	char *p;

	/* 17 bytes a float: at most RG_F32_JSON_MAX (15) and the comma, and the slack that
	 * routes_compat.c's /embed_all bound counts on; reserved once, written in place */
	if (!rg_buf_reserve(b, n * 17 + 2))
		return;
	p = b->data + b->len;
	*p++ = '[';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		p += rg_f32_json(p, v[i]);
	}
	*p++ = ']';
	*p = '\0';
	b->len = (size_t)(p - b->data);
}

void rg_buf_base64(rg_buf *b, const void *data, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	size_t i;

	if (!rg_buf_reserve(b, (n + 2) / 3 * 4))
		return;
	for (i = 0; i + 3 <= n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
		char o[4] = { tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63], tab[v & 63] };
		rg_buf_put(b, o, 4);
	}
	if (n - i == 1) {
		unsigned v = (unsigned)p[i] << 16;
		char o[4] = { tab[v >> 18], tab[(v >> 12) & 63], '=', '=' };
		rg_buf_put(b, o, 4);
	} else if (n - i == 2) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
		char o[4] = { tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63], '=' };
		rg_buf_put(b, o, 4);
	}
}
