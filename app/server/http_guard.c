/* Header checks of `ragged serve`; see http_guard.h. */
#include "server/http_guard.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 sec. 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" /
 * "_" / "`" / "|" / "~" / DIGIT / ALPHA */
static bool is_tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

bool rg_http_token(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!is_tchar((unsigned char)*s))
			return false;
	return true;
}

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* s[0..n) with blanks trimmed on both sides: *start, returns the length. */
static size_t trim(const char *s, size_t n, const char **start)
{
	while (n && is_blank(*s))
		s++, n--;
	while (n && is_blank(s[n - 1]))
		n--;
	*start = s;
	return n;
}

/* A Content-Length value: digits only (blanks around allowed), no overflow. */
static bool parse_length(const char *v, unsigned long long *out)
{
	const char *p;
	size_t n = trim(v, strlen(v), &p);
	unsigned long long x = 0;

	if (!n)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9' || x > (UINT64_MAX - 9) / 10)
			return false;
		x = x * 10 + (unsigned long long)(p[i] - '0');
	}
	*out = x;
	return true;
}

void rg_framing_init(rg_framing *f)
{
	memset(f, 0, sizeof(*f));
	f->chunked_only = true;
}

void rg_framing_add(rg_framing *f, const char *name, const char *value)
{
	const char *v;
	size_t n;

	if (!rg_http_token(name)) {
		f->bad_name = true;
		return;
	}
	if (!value)
		value = "";
	if (!strcasecmp(name, "Content-Length")) {
		unsigned long long x;

		if (!parse_length(value, &x) || (f->n_content_length && x != f->content_length))
			f->content_length_bad = true;
		else if (!f->n_content_length)
			f->content_length = x;
		f->n_content_length++;
	} else if (!strcasecmp(name, "Transfer-Encoding")) {
		n = trim(value, strlen(value), &v);
		if (n != 7 || strncasecmp(v, "chunked", 7))
			f->chunked_only = false;
		f->n_transfer_encoding++;
	} else if (!strcasecmp(name, "Expect")) {
		n = trim(value, strlen(value), &v);
		if (n == 12 && !strncasecmp(v, "100-continue", 12))
			f->expect_continue = true;
	}
}

int rg_framing_check(const rg_framing *f, bool http10, char *msg, size_t n)
{
	msg[0] = '\0';
	if (f->bad_name) {
		snprintf(msg, n, "malformed header field name (empty, or whitespace before the "
			 "colon?)");
		return 400;
	}
	if (f->n_content_length && f->n_transfer_encoding) {
		snprintf(msg, n, "both Content-Length and Transfer-Encoding");
		return 400;
	}
	if (f->content_length_bad) {
		snprintf(msg, n, "%s Content-Length", f->n_content_length > 1 ? "conflicting"
									 : "invalid");
		return 400;
	}
	if (f->n_transfer_encoding && http10) {
		snprintf(msg, n, "Transfer-Encoding in an HTTP/1.0 request");
		return 400;
	}
	if (f->n_transfer_encoding > 1) {
		snprintf(msg, n, "more than one Transfer-Encoding field");
		return 400;
	}
	if (f->n_transfer_encoding && !f->chunked_only) {
		snprintf(msg, n, "only Transfer-Encoding: chunked is supported");
		return 501;
	}
	return 0;
}

bool rg_content_type_is_json(const char *ct)
{
	const char *semi, *p, *type;
	size_t n;

	if (!ct)
		return true;
	semi = strchr(ct, ';');
	n = trim(ct, semi ? (size_t)(semi - ct) : strlen(ct), &type);
	if (n < 16 || strncasecmp(type, "application/", 12))
		return false;
	if (!(n == 16 && !strncasecmp(type + 12, "json", 4)) &&
	    !(n > 17 && !strncasecmp(type + n - 5, "+json", 5)))
		return false;
	/* parameters: ; name=value ... ; only charset is looked at */
	for (p = semi; p; p = strchr(p + 1, ';')) {
		const char *name, *val, *eq = strchr(p + 1, '='), *end = strchr(p + 1, ';');
		size_t nn, nv;

		if (!eq || (end && eq > end))
			continue;
		nn = trim(p + 1, (size_t)(eq - p - 1), &name);
		if (nn != 7 || strncasecmp(name, "charset", 7))
			continue;
		nv = trim(eq + 1, end ? (size_t)(end - eq - 1) : strlen(eq + 1), &val);
		if (nv >= 2 && val[0] == '"' && val[nv - 1] == '"')
			val++, nv -= 2;
		if (!((nv == 5 && !strncasecmp(val, "utf-8", 5)) ||
		      (nv == 4 && !strncasecmp(val, "utf8", 4))))
			return false;
	}
	return true;
}

bool rg_bearer_matches(const char *auth, const char *key)
{
	const char *tok;
	size_t kn = strlen(key), tn;
	unsigned char diff;

	if (!auth || strncasecmp(auth, "Bearer", 6) || !is_blank(auth[6]))
		return false;
	tn = trim(auth + 6, strlen(auth + 6), &tok);
	/* Walk the key's length whatever the token is, so the time tells nothing about where the
	 * first difference lies; a token of another length differs anyway. */
	diff = (unsigned char)(tn != kn);
	for (size_t i = 0; i < kn; i++)
		diff |= (unsigned char)key[i] ^ (unsigned char)(tn ? tok[i % tn] : 0);
	return diff == 0;
}

const char *rg_cors_allow(const char *list, const char *origin)
{
	size_t on;

	if (!list || !origin)
		return NULL;
	on = strlen(origin);
	for (const char *p = list; *p;) {
		const char *comma = strchr(p, ','), *item;
		size_t n = trim(p, comma ? (size_t)(comma - p) : strlen(p), &item);

		if (n == 1 && item[0] == '*')
			return "*";
		if (n == on && !memcmp(item, origin, n))
			return origin;
		if (!comma)
			break;
		p = comma + 1;
	}
	return NULL;
}

bool rg_field_value_ok(const char *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];

		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return false;
	}
	return true;
}

/* Whether b..b+n (n bytes) are all in set (NUL-terminated list; "" matches only n == 0). */
static bool all_in(const char *b, size_t n, const char *set, bool nul)
{
	for (size_t i = 0; i < n; i++)
		if (!(nul && !b[i]) && !(b[i] && strchr(set, b[i])))
			return false;
	return true;
}

int rg_header_layout_check(const rg_header_span *h, size_t n, const char *block_end,
			   size_t max_gap, char *msg, size_t msg_n)
{
	msg[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		uintptr_t kend = (uintptr_t)h[i].key + h[i].klen + 1, v = (uintptr_t)h[i].value;

		/* "key\0" then optional blanks then the value: a key moved away (obs-fold) breaks it */
		if (v < kend || v - kend > max_gap ||
		    !all_in(h[i].key + h[i].klen + 1, v - kend, " \t", false)) {
			snprintf(msg, msg_n, "obs-fold (a header line that starts with a space or tab, "
				 "RFC 9112 sec. 5.2) in field %.40s", h[i].key);
			return 400;
		}
		if (i + 1 < n) {
			uintptr_t vend = v + h[i].vlen, next = (uintptr_t)h[i + 1].key;

			/* the value's NUL (CR or LF), maybe another (LF), then the next key */
			if (next < vend + 1 || next > vend + 2 ||
			    !all_in(h[i].value + h[i].vlen, next - vend, "", true)) {
				snprintf(msg, msg_n, "obs-fold (a header line that starts with a space "
					 "or tab, RFC 9112 sec. 5.2) or a NUL byte after field %.40s",
					 h[i].key);
				return 400;
			}
		} else if (h[i].value[h[i].vlen + 1] != '\0') {
			/* the last line's end and the blank line: two NULs at least */
			snprintf(msg, msg_n, "a NUL byte in the value of field %.40s", h[i].key);
			return 400;
		} else if (block_end) {
			/* the last line's end and the blank line, 2 to 4 NULs, end the block; a
			 * line ": a" (or ":" ended by CRLF after a CRLF line) ended it instead */
			uintptr_t vend = v + h[i].vlen, end = (uintptr_t)block_end;

			if (end < vend + 2 || end - vend > 4 ||
			    !all_in(h[i].value + h[i].vlen, end - vend, "", true)) {
				snprintf(msg, msg_n, "a header line with an empty field name (\": "
					 "value\") or a NUL byte after field %.40s (RFC 9110 sec. 5.1: "
					 "a field name is a token)", h[i].key);
				return 400;
			}
		}
	}
	return 0;
}

/* host without its port: [v6] keeps its brackets; *len its length. */
static const char *host_name(const char *host, size_t *len)
{
	const char *colon;

	if (host[0] == '[') {
		const char *close = strchr(host, ']');

		*len = close ? (size_t)(close - host) + 1 : strlen(host);
		return host;
	}
	colon = strchr(host, ':');
	/* two colons: an IPv6 literal without brackets, which a Host cannot be; kept whole */
	*len = colon && !strchr(colon + 1, ':') ? (size_t)(colon - host) : strlen(host);
	return host;
}

bool rg_host_allowed(const char *list, const char *host)
{
	const char *name;
	size_t hn;

	if (!list)
		return true;
	for (const char *p = list; *p;) {
		const char *comma = strchr(p, ','), *item;
		size_t n = trim(p, comma ? (size_t)(comma - p) : strlen(p), &item);

		if (n == 1 && item[0] == '*')
			return true;
		if (host && *host) {
			const char *h = host;

			name = host_name(h, &hn);
			/* a fully qualified name may end in a dot ("localhost.") */
			if (hn > 1 && name[hn - 1] == '.')
				hn--;
			if (n == hn && !strncasecmp(item, name, n))
				return true;
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	return false;
}

void rg_allowed_hosts_default(const char *bind, char *out, size_t n)
{
	static const char base[] = "localhost,127.0.0.1,[::1]";
	bool loop = bind && (!strncmp(bind, "127.", 4) || !strcasecmp(bind, "localhost") ||
			     !strcmp(bind, "::1") || !strcmp(bind, "[::1]"));

	if (!loop) {
		snprintf(out, n, "*");
		return;
	}
	if (!strcmp(bind, "127.0.0.1") || !strcasecmp(bind, "localhost") || !strcmp(bind, "::1") ||
	    !strcmp(bind, "[::1]"))
		snprintf(out, n, "%s", base);
	else
		snprintf(out, n, "%s,%s", base, bind); /* 127.0.0.2 ... */
}

const char *rg_target_path(const char *target, char *authority, size_t n)
{
	const char *a, *slash;
	size_t an;

	authority[0] = '\0';
	if (target[0] == '/')
		return target;
	if (!strncasecmp(target, "http://", 7))
		a = target + 7;
	else if (!strncasecmp(target, "https://", 8))
		a = target + 8;
	else
		return NULL;
	an = strcspn(a, "/?#");
	if (an == 0 || a[an] == '#')
		return NULL;
	snprintf(authority, n, "%.*s", (int)an, a);
	slash = a + an;
	/* no path ("http://h" or "http://h?q"): the path is "/" (RFC 9112 sec. 3.2.1) */
	return *slash == '/' ? slash : "/";
}

bool rg_target_bad(const char *raw, char *msg, size_t n)
{
	for (const char *p = raw; *p; p++) {
		unsigned char ch = (unsigned char)*p;

		if (ch <= 0x20 || ch == 0x7f) {
			snprintf(msg, n, "request target holds a %s", ch == ' ' ? "space"
								: "control byte");
			return true;
		}
		if (ch == '%' && p[1] == '0' && p[2] == '0') {
			snprintf(msg, n, "request target holds %%00 (a NUL byte)");
			return true;
		}
	}
	return false;
}
