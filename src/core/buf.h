/* ragged's one growable byte buffer, with the JSON writers every module shares: string
 * literals with escapes, float32 numbers that round-trip in the fewest digits, float arrays,
 * base64. An append that cannot allocate sets `oom` and every later append is a no-op, so a
 * writer checks once at the end. */
#ifndef RG_CORE_BUF_H
#define RG_CORE_BUF_H
#include <stdbool.h>
#include <stddef.h>

/* Growable byte buffer (response bodies, request bodies, JSON text). data is malloc'd and
 * NUL-terminated, owned by the buffer until taken. */
typedef struct rg_buf {
	char *data;
	size_t len, cap;
	bool oom;       /* set once an append failed; later appends are no-ops */
} rg_buf;

void rg_buf_init(rg_buf *b);
void rg_buf_free(rg_buf *b);
/* Room for extra more bytes (and the NUL) so the caller may write b->data[b->len...] directly;
 * false (and oom set) when allocation fails. */
bool rg_buf_reserve(rg_buf *b, size_t extra);
void rg_buf_put(rg_buf *b, const char *s, size_t n);
void rg_buf_puts(rg_buf *b, const char *s);
void rg_buf_printf(rg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* JSON string literal with escapes (input must be valid UTF-8). */
void rg_buf_json_str(rg_buf *b, const char *s, size_t n);
/* Longest text rg_f32_json writes: "-1.23456789e-38" (15 bytes, as "%.9g" at most). */
#define RG_F32_JSON_MAX 15
/* A float32 as a JSON number, written at out (room for RG_F32_JSON_MAX bytes; no NUL): the
 * fewest digits that read back (strtof, or a double parser then a cast to float) as exactly v,
 * the closest such when several (Dragonbox, core/f32_shortest.h), laid out as "%g" lays out 9
 * digits: fixed for decimal exponents -4 to 8 ("0.0123", "1234.5", "100"), else d.ddde±XX
 * ("1e-05", "3.4028235e+38"); -0 stays "-0"; NaN and infinities are written as null (JSON has
 * none). Returns the bytes written. Was snprintf("%.9g"): 9 digits always, 10x slower. */
size_t rg_f32_json(char *out, float v);
/* rg_f32_json appended. */
void rg_buf_float(rg_buf *b, float v);
/* JSON array of n floats: [a,b,...], each as rg_f32_json writes it. */
void rg_buf_float_array(rg_buf *b, const float *v, size_t n);
/* Standard base64 (RFC 4648, with padding) of n bytes. */
void rg_buf_base64(rg_buf *b, const void *data, size_t n);
#endif
