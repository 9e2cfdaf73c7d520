/* libFuzzer target for the header checks of `ragged serve` (src/server/http_guard.c). The input
 * is a request head as the HTTP parser hands it over: lines "name:value" (split at the first
 * colon, as libmicrohttpd does, so "Content-Length : 5" gives the name "Content-Length "), the
 * first byte choosing HTTP/1.0 or 1.1. Checks the contract on every input: the verdict is 0, 400
 * or 501 with a message exactly when it is not 0; a verdict of 0 means at most one distinct
 * Content-Length, not both length and transfer coding, and chunked alone; the value checks
 * (media type, bearer, CORS) return without fault on every line. Seeds: tests/fuzz/run_fuzz.sh
 * (the request-smuggling cases of issue 9). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text, *line, *save = NULL, msg[160];
	bool http10;
	rg_framing f;
	int st;

	if (size < 1)
		return 0;
	http10 = data[0] & 1;
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
