/* libFuzzer target for the header checks of `ragged serve` (app/server/http_guard.c). The input
 * is a request head as the HTTP parser hands it over: lines "name:value" (split at the first
 * colon, as libmicrohttpd does, so "Content-Length : 5" gives the name "Content-Length "), the
 * first byte choosing HTTP/1.0 or 1.1. Checks the contract on every input: the verdict is 0, 400
 * or 501 with a message exactly when it is not 0; a verdict of 0 means at most one distinct
 * Content-Length, not both length and transfer coding, and chunked alone; the value checks
 * (media type, bearer, CORS, field values, Host, request target) return without fault on every
 * line. Issue 18: the same bytes, parsed in place as libmicrohttpd 0.9.75 does (mhd_parse), go
 * through rg_header_layout_check: a block without obs-fold lines or NUL bytes passes, one with
 * an obs-fold line never does. Seeds: tests/fuzz/run_fuzz.sh (the request-smuggling cases of
 * issues 9 and 18). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_guard.h"

/* libmicrohttpd 0.9.75's in-place header parse (see tests/unit/test_http_guard.c): lines end at
 * LF (a CR before it dropped) and become NUL-terminated, the colon a NUL, blanks after it
 * skipped; an obs-fold line is appended to the previous field's name, moved to the pool's end;
 * a line with an empty name after the first field ends the block unstored (issue 28).
 * raw (n bytes) is parsed until a blank line; returns the fields (at most cap), 0 when the
 * block is not one this parser takes (a line without a colon, no blank line, a first line that
 * is folded), the block's end, whether a fold or a NUL byte was seen, and whether an
 * empty-name line ended it (*empty: 1 for ":" alone, 2 for one with more after the colon). */
static size_t mhd_parse(const char *raw, size_t n, char *pool, size_t pool_n, rg_header_span *sp,
			size_t cap, const char **end, bool *fold, bool *nul, int *empty)
{
	size_t top = n + 8, ns = 0, i = 0;
	char *key = NULL, *val = NULL;

	*fold = *nul = false;
	*empty = 0;
	if (top >= pool_n)
		return 0;
	memcpy(pool, raw, n);
	memset(pool + n, 'Z', pool_n - n);
	while (i < n) {
		char *line = pool + i;
		size_t e = i, len;

		while (e < n && pool[e] != '\n')
			e++;
		if (e == n)
			return 0; /* no line end: the parser waits for more */
		len = e - i - (e > i && pool[e - 1] == '\r');
		if (memchr(line, '\0', len))
			*nul = true;
		line[len] = '\0';
		pool[e] = '\0';
		i = e + 1;
		if (line[0] == ' ' || line[0] == '\t') {
			const char *t = line;
			size_t kl;

			if (!key)
				return 0;
			kl = strlen(key);
			while (*t == ' ' || *t == '\t')
				t++;
			if (top + kl + strlen(t) + 1 >= pool_n)
				return 0;
			memmove(pool + top, key, kl);
			strcpy(pool + top + kl, t);
			key = pool + top;
			top += kl + strlen(t) + 1;
			*fold = true;
			continue;
		}
		if (key) {
			if (ns == cap)
				return 0;
			sp[ns++] = (rg_header_span){key, strlen(key), val, strlen(val)};
			key = NULL;
			if (line[0] == ':') {
				*empty = len > 1 ? 2 : 1;
				*end = pool + i;
				return ns;
			}
		}
		if (!len) {
			*end = pool + i;
			return ns;
		}
		if (!(val = strchr(line, ':')))
			return 0;
		*val++ = '\0';
		while (*val == ' ' || *val == '\t')
			val++;
		key = line;
	}
	return 0;
}

static void check_layout(const uint8_t *data, size_t size)
{
	static char pool[4096];
	rg_header_span sp[64];
	char msg[200];
	const char *end;
	bool fold, nul;
	int empty, st;
	size_t ns = mhd_parse((const char *)data, size, pool, sizeof(pool), sp, 64, &end, &fold,
			      &nul, &empty);

	if (!ns)
		return;
	st = rg_header_layout_check(sp, ns, end, 4096, msg, sizeof(msg));
	if ((st != 0 && st != 400) || (st != 0) != (msg[0] != '\0'))
		abort();
	/* a fold or an empty name with a value never passes (":" alone may: http_guard.h);
	 * a block with neither, nor a NUL, always does */
	if (((fold || empty == 2) && st == 0) || (!fold && !nul && !empty && st != 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char authority[64];
	char *text, *line, *save = NULL, msg[160];
	bool http10;
	rg_framing f;
	int st;

	if (size < 1)
		return 0;
	http10 = data[0] & 1;
	check_layout(data + 1, size - 1);
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	rg_framing_init(&f);
	for (line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		char *colon = strchr(line, ':');
		const char *value;

		(void)rg_content_type_is_json(line);
		(void)rg_bearer_matches(line, "k3y");
		(void)rg_cors_allow(line, "http://a.example");
		(void)rg_cors_allow("http://b.example, *", line);
		(void)rg_field_value_ok(line, strlen(line));
		(void)rg_host_allowed("localhost,127.0.0.1,[::1]", line);
		(void)rg_host_allowed(line, "localhost:8080");
		(void)rg_target_bad(line, msg, sizeof(msg));
		if (rg_target_path(line, authority, sizeof(authority)) &&
		    strlen(authority) >= sizeof(authority))
			abort();
		if (!colon)
			continue;
		*colon = '\0';
		value = colon + 1;
		while (*value == ' ' || *value == '\t')
			value++;
		rg_framing_add(&f, line, value);
	}
	st = rg_framing_check(&f, http10, msg, sizeof(msg));
	if (st != 0 && st != 400 && st != 501)
		abort();
	if ((st != 0) != (msg[0] != '\0'))
		abort();
	if (st == 0 && (f.bad_name || f.content_length_bad || f.n_transfer_encoding > 1 ||
			(f.n_transfer_encoding && (f.n_content_length || !f.chunked_only || http10))))
		abort();
	free(text);
	return 0;
}
