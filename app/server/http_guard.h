/* What `ragged serve` checks in a request's headers before it reads the body, as pure functions
 * of the header text (no libmicrohttpd, so the unit tests and the fuzzer call them directly):
 *   - framing (RFC 9112 sec. 6): one unambiguous body length, or the request is refused and the
 *     connection closed, since a proxy in front may have read the length differently (request
 *     smuggling);
 *   - the media type of a JSON body (415 otherwise);
 *   - a bearer token (RFC 6750), compared in constant time;
 *   - a CORS origin against the allowed list;
 *   - the header block as libmicrohttpd 0.9.70-0.9.76 left it in its read buffer: obs-fold lines
 *     (RFC 9112 sec. 5.2) and NUL bytes, which that parser hides (issue 18, items 13 and 17);
 *   - control characters in field values (RFC 9110 sec. 5.5), the Host field and the
 *     --allowed-hosts list (DNS rebinding), the request target (absolute-form, NUL, space).
 * http.c applies them; server.c documents the behaviour. */
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

/* Whether a field value holds only what RFC 9110 sec. 5.5 allows: visible bytes, obs-text
 * (0x80-0xFF), SP and HTAB; false on NUL, a bare CR or LF, or another control byte. */
bool rg_field_value_ok(const char *v, size_t n);

/* One header field as libmicrohttpd handed it (MHD_get_connection_values_n): pointers into its
 * per-connection memory pool, lengths without the terminating NUL. */
typedef struct rg_header_span {
	const char *key;
	size_t klen;
	const char *value;
	size_t vlen;
} rg_header_span;

/* Check fields (n >= 1, in the order received) against the layout libmicrohttpd 0.9.70-0.9.76
 * leaves in its read buffer after parsing a header block in place: each line is
 * "key\0[SP/HTAB...]value" and ends in "\0\0" (CRLF) or "\0" (bare LF), the next key right
 * after it, and a blank line ("\0\0" or "\0") after the last. That parser appends an obs-fold
 * line ("Content-Length:\r\n 35") to the previous field's *name*, moved elsewhere in the pool
 * (so the length is lost and a body is read as the next request), and cuts a value at a NUL
 * byte; both break the layout. It also ends the block at a line with an empty name (": a")
 * after the first field, without storing that line (the lines after it are parsed as the next
 * request: request smuggling behind a proxy that forwards the line); block_end, the end of the
 * block (the request line's start plus MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE), exposes it:
 * between the last value and block_end there must be only the two line ends, 2 to 4 NULs.
 * block_end NULL skips that check. One case stays invisible: a line ":" with nothing after the
 * colon, ended by a bare LF or after a field ended by one (LF + ":" CRLF is "\0\0\0\0", as
 * CRLF CRLF is); http.c refuses a method that is not a token, which is what the line after it
 * would have to start with for a proxy that checks field names to have read it as a field.
 * Only bytes between two of the given pointers (one pool) are read, and only when they are in
 * order and at most max_gap bytes apart.
 * Returns 0, or 400 with the reason in msg (NUL-terminated, n > 0). Call it only for a
 * libmicrohttpd whose layout this is (server.c checks the version at start). */
int rg_header_layout_check(const rg_header_span *h, size_t n, const char *block_end,
			   size_t max_gap, char *msg, size_t msg_n);

/* Whether s is an RFC 9110 token (sec. 5.6.2): one or more tchars. A request method (sec. 9.1)
 * and a field name (sec. 5.1) must be one. */
bool rg_http_token(const char *s);

/* Whether a Host value (host, host:port, [v6] or [v6]:port) names one of the hosts of list
 * (--allowed-hosts: "*" or names separated by commas, compared without case and without the
 * port, IPv6 literals in brackets). false for a NULL or empty host unless list is "*". */
bool rg_host_allowed(const char *list, const char *host);

/* The default --allowed-hosts for the listen address bind, into out (n > 0): for a loopback
 * address (127.0.0.0/8, ::1, localhost) "localhost,127.0.0.1,[::1]" and bind itself; else "*"
 * (a server bound to 0.0.0.0 or a public address is reached by names it cannot know). */
void rg_allowed_hosts_default(const char *bind, char *out, size_t n);

/* The origin-form path of a request target (RFC 9112 sec. 3.2): target itself when it starts
 * with '/', else for absolute-form ("http://host:port/path?q", scheme http or https, any case)
 * the part from the path on ("/" when there is none), with the authority copied to authority
 * (n > 0, cut to fit). NULL for any other form (authority-form, asterisk-form, garbage). */
const char *rg_target_path(const char *target, char *authority, size_t n);

/* Whether a raw (not yet percent-decoded) request target is refused: a SP, a control byte or
 * %00 (a NUL once decoded: "/embed%00" must not be served as "/embed"). The reason goes to msg. */
bool rg_target_bad(const char *raw, char *msg, size_t n);
#endif
