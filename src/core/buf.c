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

static const uint32_t pow10_u32[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
				       100000000};

/* "00".."99": two digits per table look-up */
static const char digits2[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* The n decimal digits of d (n = its digit count) ending just before end. */
static inline void put_digits(char *end, uint32_t d, int n)
{
	while (n >= 2) {
		uint32_t r = d % 100;

		d /= 100;
		end -= 2;
		memcpy(end, digits2 + 2 * r, 2);
		n -= 2;
	}
	if (n)
		end[-1] = (char)('0' + d);
}

static inline int count_digits(uint32_t d) /* d < 10^9: a float32's at most 9 digits */
{
	int n = 1;

	while (n < 9 && d >= pow10_u32[n])
		n++;
	return n;
}

/* Writes in place, never past out + RG_F32_JSON_MAX: rg_buf_float_array relies on it. */
size_t rg_f32_json(char *out, float v)
{
	char *p = out;
	uint32_t d;
	int e10, n, E;

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
	n = count_digits(d);
	E = e10 + n - 1; /* v = d.ddd x 10^E */
	if (E < 0 && E >= -4) { /* 0.000ddd: what unit-norm embeddings hold */
		memcpy(p, "0.000", 5);
		p += 1 - E;
		put_digits(p + n, d, n);
		return (size_t)(p + n - out);
	}
	if (E >= 0 && E < 9 && n <= E + 1) { /* an integer: the digits, then zeros */
		put_digits(p + n, d, n);
		for (int i = n; i <= E; i++)
			p[i] = '0';
		return (size_t)(p + E + 1 - out);
	}
	/* the digits one place to the right, then the leading ones moved back over the gap */
	put_digits(p + 1 + n, d, n);
	if (E >= 0 && E < 9) { /* ddd.ddd */
		for (int i = 0; i <= E; i++)
			p[i] = p[i + 1];
		p[E + 1] = '.';
		return (size_t)(p + n + 1 - out);
	}
	/* d.ddde-XX */
	p[0] = p[1];
	if (n > 1)
		p[1] = '.', p += n + 1;
	else
		p += 1;
	*p++ = 'e';
	*p++ = E < 0 ? '-' : '+';
	memcpy(p, digits2 + 2 * (E < 0 ? -E : E), 2); /* |E| <= 45 for a float32 */
	return (size_t)(p + 2 - out);
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
