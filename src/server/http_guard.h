/* What `ragged serve` checks in a request's headers before it reads the body, as pure functions
 * of the header text (no libmicrohttpd, so the unit tests and the fuzzer call them directly):
 *   - framing (RFC 9112 sec. 6): one unambiguous body length, or the request is refused and the
 *     connection closed, since a proxy in front may have read the length differently (request
 *     smuggling);
 *   - the media type of a JSON body (415 otherwise);
 *   - a bearer token (RFC 6750), compared in constant time;
 *   - a CORS origin against the allowed list.
 * routes.c applies them; server.c documents the behaviour. */
#ifndef RG_SERVER_HTTP_GUARD_H
#define RG_SERVER_HTTP_GUARD_H
#include <stdbool.h>
#include <stddef.h>

/* What a request's header fields say about its body, fed one field at a time. */
typedef struct rg_framing {
	int n_content_length;       /* Content-Length fields */
	int n_transfer_encoding;    /* Transfer-Encoding fields */
	bool content_length_bad;    /* a value not all digits, too large, or unlike the first */
	unsigned long long content_length; /* the first valid value */
	bool chunked_only;          /* every Transfer-Encoding value is exactly "chunked" */
	bool bad_name;              /* a field name that is not an RFC 9110 token ("Content-Length "
				       with the space before the colon, an empty name) */
	bool expect_continue;       /* Expect: 100-continue */
} rg_framing;

void rg_framing_init(rg_framing *f);

/* Account for one header field (name and value as the HTTP parser split them, NUL-terminated). */
void rg_framing_add(rg_framing *f, const char *name, const char *value);

/* 0 when the body's length is unambiguous, else the status to answer before closing the
 * connection, with the reason in msg (NUL-terminated, n > 0):
 *   400: a field name with whitespace or other non-token bytes (RFC 9112 sec. 5.1), two
 *        Content-Length values that differ or one that is not a number (sec. 6.3), both
 *        Content-Length and Transfer-Encoding (sec. 6.1), more than one Transfer-Encoding field,
 *        Transfer-Encoding in an HTTP/1.0 request (http10 = true);
 *   501: a transfer coding other than chunked (sec. 6.1).
 * Repeated Content-Length fields of one value are accepted (sec. 6.3 allows it). */
int rg_framing_check(const rg_framing *f, bool http10, char *msg, size_t n);

/* Whether a POST body of this Content-Type is read as JSON: application/json or an
 * application/<x>+json type (RFC 6839, as axum/TEI accept), any case, with parameters; a charset
 * parameter must say UTF-8 (RFC 8259 sec. 8.1). NULL (no Content-Type) is accepted: curl's
 * --data-binary with -H, Python requests' data= and http.client send none, and a body that is not
 * JSON still gets 400. text/plain, application/x-www-form-urlencoded (what curl -d sends without
 * -H) and multipart/form-data, the types a web page can post cross-origin without a preflight,
 * are refused. */
bool rg_content_type_is_json(const char *content_type);

/* Whether an Authorization value is "Bearer <key>" (scheme any case, RFC 6750 sec. 2.1). The
 * comparison takes the same time wherever the token differs from the key (it depends on the
 * key's length only). key is non-empty; authorization may be NULL. */
bool rg_bearer_matches(const char *authorization, const char *key);

/* The Access-Control-Allow-Origin value for a request's Origin under the allowed list
 * (--cors-allow-origin: "*" or origins separated by commas, compared byte for byte after trimming
 * blanks): "*", origin itself (borrowed), or NULL when origin is NULL or not in the list. */
const char *rg_cors_allow(const char *list, const char *origin);
#endif
