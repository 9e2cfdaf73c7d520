/* Regex -> NFA (Thompson) -> DFA (subset construction over byte classes), the vocabulary trie
 * and the per-state token masks (grammar.h has the contract and the sources).
 *
 * Code points become UTF-8 byte sequences: a class (a set of code point ranges) is split into
 * ranges whose encodings are sequences of byte ranges (the split of Rust's regex-syntax
 * Utf8Sequences), so the automaton runs over bytes and matches per code point. */
#include "gen/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"

#define MAX_PATTERN (64 * 1024)
#define MAX_REPEAT 1000
#define MAX_NFA (1 << 20)
#define MAX_CP 0x10FFFF
#define MAX_WORK ((size_t)1 << 25) /* NFA states visited by the subset construction, at most
				    * (about a second): a pattern that needs more is refused */

/* ---- the parse tree ------------------------------------------------------------------------ */

enum { N_EMPTY, N_SET, N_CAT, N_ALT, N_REP };

typedef struct cprange {
	uint32_t lo, hi;
} cprange;

typedef struct node {
	int type;
	int a, b;          /* children (CAT, ALT: a b; REP: a) */
	int min, max;      /* REP: max -1 unbounded */
	int r0, nr;        /* SET: ranges[r0 .. r0 + nr) sorted, disjoint */
} node;

typedef struct parser {
	const char *s;
	size_t len, i;
	node *nodes;
	int n_nodes, cap_nodes;
	cprange *ranges;
	int n_ranges, cap_ranges;
	rg_status st;
	char err[200];
} parser;

static int fail(parser *p, rg_status st, const char *fmt, const char *what)
{
	if (p->st == RG_OK) {
		p->st = st;
		snprintf(p->err, sizeof(p->err), fmt, what, p->i);
	}
	return -1;
}

static int new_node(parser *p, int type)
{
	if (p->n_nodes == p->cap_nodes) {
		int cap = p->cap_nodes ? 2 * p->cap_nodes : 64;
		node *n;

		if (cap > MAX_NFA)
			return fail(p, RG_ERR_TOO_LONG, "regex: %s (offset %zu)", "too many nodes");
		if (!(n = realloc(p->nodes, (size_t)cap * sizeof(*n))))
			return fail(p, RG_ERR_OOM, "regex: %s (offset %zu)", "out of memory");
		p->nodes = n;
		p->cap_nodes = cap;
	}
	p->nodes[p->n_nodes] = (node){.type = type, .a = -1, .b = -1};
	return p->n_nodes++;
}

static int bin(parser *p, int type, int a, int b)
{
	int n;

	if (a < 0 || b < 0 || (n = new_node(p, type)) < 0)
		return -1;
	p->nodes[n].a = a;
	p->nodes[n].b = b;
	return n;
}

/* A class under construction: ranges appended, then normalized (sorted, merged). */
typedef struct cset {
	cprange *r;
	int n, cap;
	bool oom;
} cset;

static void cset_add(cset *c, uint32_t lo, uint32_t hi)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 8;
		cprange *r = realloc(c->r, (size_t)cap * sizeof(*r));

		if (!r) {
			c->oom = true;
			return;
		}
		c->r = r;
		c->cap = cap;
	}
	c->r[c->n++] = (cprange){lo, hi};
}

static int cmp_range(const void *x, const void *y)
{
	const cprange *a = x, *b = y;

	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static void cset_normalize(cset *c)
{
	int k = 0;

	if (!c->n)
		return;
	qsort(c->r, (size_t)c->n, sizeof(cprange), cmp_range);
	for (int i = 1; i < c->n; i++) {
		if (c->r[i].lo <= c->r[k].hi + 1) {
			if (c->r[i].hi > c->r[k].hi)
				c->r[k].hi = c->r[i].hi;
		} else {
			c->r[++k] = c->r[i];
		}
	}
	c->n = k + 1;
}

/* The complement of a normalized set within [0, MAX_CP]. */
static void cset_negate(cset *c)
{
	cset o = {0};
	uint32_t next = 0;

	for (int i = 0; i < c->n; i++) {
		if (c->r[i].lo > next)
			cset_add(&o, next, c->r[i].lo - 1);
		next = c->r[i].hi + 1;
	}
	if (next <= MAX_CP)
		cset_add(&o, next, MAX_CP);
	free(c->r);
	o.oom |= c->oom;
	*c = o;
}

/* A SET node of c (freed). */
static int set_node(parser *p, cset *c)
{
	int n;

	cset_normalize(c);
	if (c->oom) {
		free(c->r);
		return fail(p, RG_ERR_OOM, "regex: %s (offset %zu)", "out of memory");
	}
	if (p->n_ranges + c->n > p->cap_ranges) {
		int cap = p->cap_ranges ? 2 * p->cap_ranges : 64;
		cprange *r;

		while (cap < p->n_ranges + c->n)
			cap *= 2;
		if (!(r = realloc(p->ranges, (size_t)cap * sizeof(*r)))) {
			free(c->r);
			return fail(p, RG_ERR_OOM, "regex: %s (offset %zu)", "out of memory");
		}
		p->ranges = r;
		p->cap_ranges = cap;
	}
	if ((n = new_node(p, N_SET)) < 0) {
		free(c->r);
		return -1;
	}
	if (c->n)
		memcpy(p->ranges + p->n_ranges, c->r, (size_t)c->n * sizeof(cprange));
	p->nodes[n].r0 = p->n_ranges;
	p->nodes[n].nr = c->n;
	p->n_ranges += c->n;
	free(c->r);
	return n;
}

static bool at_end(const parser *p) { return p->i >= p->len; }
static char peek(const parser *p) { return at_end(p) ? '\0' : p->s[p->i]; }

/* The next code point of the pattern (invalid UTF-8: an error). */
static int next_cp(parser *p, uint32_t *cp)
{
	size_t n = rg_utf8_next(p->s, p->len, p->i, cp);

	if (!n)
		return fail(p, RG_ERR_INVALID_INPUT, "regex: %s at offset %zu", "invalid UTF-8");
	p->i += n;
	return 0;
}

static int hex_digits(parser *p, int n, uint32_t *cp)
{
	uint32_t v = 0;

	for (int k = 0; k < n; k++) {
		char c = peek(p);
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;

		if (d < 0)
			return fail(p, RG_ERR_INVALID_INPUT, "regex: %s at offset %zu",
				    "bad hexadecimal escape");
		v = v * 16 + (uint32_t)d;
		p->i++;
	}
	if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
		return fail(p, RG_ERR_INVALID_INPUT, "regex: %s at offset %zu",
			    "escape outside Unicode scalar values");
	*cp = v;
	return 0;
}

static void add_perl_class(cset *c, char k)
{
	cset t = {0};
	bool neg = k == 'D' || k == 'W' || k == 'S';

	switch (k | 0x20) {
	case 'd':
		cset_add(&t, '0', '9');
		break;
	case 'w':
		cset_add(&t, '0', '9');
		cset_add(&t, 'A', 'Z');
		cset_add(&t, 'a', 'z');
		cset_add(&t, '_', '_');
		break;
	default: /* s */
		cset_add(&t, '\t', '\r');
		cset_add(&t, ' ', ' ');
		break;
	}
	cset_normalize(&t);
	if (neg)
		cset_negate(&t);
	for (int i = 0; i < t.n; i++)
		cset_add(c, t.r[i].lo, t.r[i].hi);
	c->oom |= t.oom;
	free(t.r);
}

/* After a backslash: a class (\d ...: *is_class, added to c) or one code point (*cp).
 * in_class: inside [...] (\b is a backspace there). */
static int escape(parser *p, bool in_class, cset *c, bool *is_class, uint32_t *cp)
{
	char k;

	*is_class = false;
	if (at_end(p))
		return fail(p, RG_ERR_INVALID_INPUT, "regex: %s at offset %zu", "trailing backslash");
	k = p->s[p->i++];
	switch (k) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		add_perl_class(c, k);
		*is_class = true;
		return 0;
	case 'n': *cp = '\n'; return 0;
	case 't': *cp = '\t'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 'f': *cp = '\f'; return 0;
	case 'v': *cp = '\v'; return 0;
	case 'a': *cp = '\a'; return 0;
	case '0': *cp = 0; return 0;
	case 'x': return hex_digits(p, 2, cp);
	case 'u': return hex_digits(p, 4, cp);
	case 'U': return hex_digits(p, 8, cp);
	case 'b':
		if (in_class) {
			*cp = '\b';
			return 0;
		}
		return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
			    "word boundaries (\\b) are not supported");
	default:
		break;
	}
	if ((k >= '1' && k <= '9') || k == 'k')
		return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
			    "backreferences are not supported");
	if (k == 'B' || k == 'A' || k == 'Z' || k == 'z' || k == 'G')
		return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
			    "anchors other than a leading ^ and a trailing $ are not supported");
	if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z'))
		return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)", "unknown escape");
	p->i--;
	return next_cp(p, cp); /* an escaped punctuation or other character: itself */
}

static int parse_class(parser *p)
{
	cset c = {0};
	bool neg = false, first = true;

	p->i++; /* [ */
	if (peek(p) == '^') {
		neg = true;
		p->i++;
	}
	for (;;) {
		uint32_t lo, hi;
		bool is_class;

		if (at_end(p)) {
			free(c.r);
			return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
				    "unterminated character class");
		}
		if (peek(p) == ']' && !first)
			break;
		first = false;
		if (peek(p) == '\\') {
			p->i++;
			if (escape(p, true, &c, &is_class, &lo) < 0)
				goto out_free;
			if (is_class)
				continue;
		} else if (next_cp(p, &lo) < 0) {
			goto out_free;
		}
		hi = lo;
		if (peek(p) == '-' && p->i + 1 < p->len && p->s[p->i + 1] != ']') {
			p->i++;
			if (peek(p) == '\\') {
				p->i++;
				if (escape(p, true, &c, &is_class, &hi) < 0)
					goto out_free;
				if (is_class) {
					free(c.r);
					return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
						    "a class escape cannot end a range");
				}
			} else if (next_cp(p, &hi) < 0) {
				goto out_free;
			}
			if (hi < lo) {
				free(c.r);
				return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
					    "bad character range");
			}
		}
		cset_add(&c, lo, hi);
	}
	p->i++; /* ] */
	cset_normalize(&c);
	if (neg)
		cset_negate(&c);
	return set_node(p, &c);
out_free:
	free(c.r);
	return -1;
}

static int parse_alt(parser *p, int depth);
static bool parse_braces(parser *p, int *mn, int *mx);

static int parse_atom(parser *p, int depth)
{
	char c = peek(p);
	cset cs = {0};
	uint32_t cp;
	bool is_class;
	int n;

	switch (c) {
	case '(':
		p->i++;
		if (peek(p) == '?') {
			p->i++;
			if (peek(p) == ':') {
				p->i++;
			} else if (peek(p) == 'P' || peek(p) == '<') {
				if (peek(p) == 'P')
					p->i++;
				if (peek(p) != '<' || (p->i + 1 < p->len && (p->s[p->i + 1] == '=' ||
									   p->s[p->i + 1] == '!')))
					return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
						    "look-behind and (?P=name) are not supported");
				while (!at_end(p) && peek(p) != '>')
					p->i++;
				if (at_end(p))
					return fail(p, RG_ERR_INVALID_INPUT,
						    "regex: %s (offset %zu)", "unterminated group name");
				p->i++;
			} else {
				return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
					    "look-around and inline flags are not supported");
			}
		}
		if (depth > 200)
			return fail(p, RG_ERR_TOO_LONG, "regex: %s (offset %zu)",
				    "groups nested over 200 deep");
		n = parse_alt(p, depth + 1);
		if (n < 0)
			return -1;
		if (peek(p) != ')')
			return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
				    "missing ), unterminated group");
		p->i++;
		return n;
	case '[':
		return parse_class(p);
	case '.':
		p->i++;
		cset_add(&cs, '\n', '\n');
		cset_negate(&cs);
		return set_node(p, &cs);
	case '\\':
		p->i++;
		if (escape(p, false, &cs, &is_class, &cp) < 0) {
			free(cs.r);
			return -1;
		}
		if (!is_class)
			cset_add(&cs, cp, cp);
		return set_node(p, &cs);
	case '^': case '$':
		return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
			    "anchors other than a leading ^ and a trailing $ are not supported");
	case '{': {
		int mn, mx;
		size_t at = p->i;

		if (parse_braces(p, &mn, &mx)) {
			p->i = at;
			return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
				    "nothing to repeat");
		}
		p->i++; /* a '{' that starts no repetition is itself (Python) */
		cset_add(&cs, '{', '{');
		return set_node(p, &cs);
	}
	case '*': case '+': case '?':
		return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
			    "nothing to repeat");
	default:
		if (next_cp(p, &cp) < 0)
			return -1;
		cset_add(&cs, cp, cp);
		return set_node(p, &cs);
	}
}

/* {m}, {m,}, {m,n} at p->i ('{'): true with *mn, *mx when it is one; else false and p->i
 * unmoved (a literal '{', as Python reads one that starts no repetition). */
static bool parse_braces(parser *p, int *mn, int *mx)
{
	size_t i = p->i + 1;
	long a = -1, b = -1;

	while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
		a = (a < 0 ? 0 : a) * 10 + (p->s[i++] - '0');
		if (a > 1000000)
			a = 1000000;
	}
	if (i < p->len && p->s[i] == ',') {
		i++;
		while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
			b = (b < 0 ? 0 : b) * 10 + (p->s[i++] - '0');
			if (b > 1000000)
				b = 1000000;
		}
		if (a < 0)
			a = 0; /* {,n} (Python) */
	} else {
		if (a < 0)
			return false;
		b = a;
	}
	if (i >= p->len || p->s[i] != '}')
		return false;
	p->i = i + 1;
	*mn = (int)a;
	*mx = (int)b; /* -1: unbounded */
	return true;
}

static int parse_repeat(parser *p, int depth)
{
	int n = parse_atom(p, depth);

	while (n >= 0 && !at_end(p)) {
		char c = peek(p);
		int mn, mx, r;

		if (c == '*') {
			mn = 0, mx = -1;
			p->i++;
		} else if (c == '+') {
			mn = 1, mx = -1;
			p->i++;
		} else if (c == '?') {
			mn = 0, mx = 1;
			p->i++;
		} else if (c == '{' && parse_braces(p, &mn, &mx)) {
			if (mx >= 0 && mx < mn)
				return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
					    "min repeat greater than max repeat");
			if (mn > MAX_REPEAT || mx > MAX_REPEAT)
				return fail(p, RG_ERR_TOO_LONG, "regex: %s (offset %zu)",
					    "a counted repetition over 1000");
		} else {
			break;
		}
		if (peek(p) == '?')
			p->i++; /* lazy: the same language */
		else if (peek(p) == '+')
			return fail(p, RG_ERR_UNSUPPORTED, "regex: %s (offset %zu)",
				    "possessive quantifiers are not supported");
		if ((r = new_node(p, N_REP)) < 0)
			return -1;
		p->nodes[r].a = n;
		p->nodes[r].min = mn;
		p->nodes[r].max = mx;
		n = r;
		if (!at_end(p) && (peek(p) == '*' || peek(p) == '+'))
			return fail(p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)",
				    "multiple repeat");
	}
	return n;
}

static int parse_cat(parser *p, int depth)
{
	int n = -1;

	while (!at_end(p) && peek(p) != '|' && peek(p) != ')') {
		int a;

		if (peek(p) == '$' && p->i + 1 == p->len) {
			p->i++; /* a trailing $: full matching has it */
			break;
		}
		if ((a = parse_repeat(p, depth)) < 0)
			return -1;
		n = n < 0 ? a : bin(p, N_CAT, n, a);
		if (n < 0)
			return -1;
	}
	return n < 0 ? new_node(p, N_EMPTY) : n;
}

static int parse_alt(parser *p, int depth)
{
	int n = parse_cat(p, depth);

	while (n >= 0 && peek(p) == '|') {
		p->i++;
		n = bin(p, N_ALT, n, parse_cat(p, depth));
	}
	return n;
}

/* ---- the NFA ------------------------------------------------------------------------------- */

enum { S_SPLIT, S_BYTE, S_MATCH };

typedef struct nstate {
	uint8_t type, lo, hi;
	int out, out1; /* BYTE: out; SPLIT: out, out1 */
} nstate;

typedef struct nfa {
	nstate *s;
	int n, cap;
	rg_status st;
} nfa;

static int nfa_add(nfa *a, int type, int lo, int hi, int out, int out1)
{
	if (a->st != RG_OK)
		return -1;
	if (a->n == a->cap) {
		int cap = a->cap ? 2 * a->cap : 256;
		nstate *s;

		if (cap > MAX_NFA) {
			a->st = rg_errorf(RG_ERR_TOO_LONG, "regex: over %d NFA states (counted "
					  "repetitions expand: lower their bounds)", MAX_NFA);
			return -1;
		}
		if (!(s = realloc(a->s, (size_t)cap * sizeof(*s)))) {
			a->st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
			return -1;
		}
		a->s = s;
		a->cap = cap;
	}
	a->s[a->n] = (nstate){(uint8_t)type, (uint8_t)lo, (uint8_t)hi, out, out1};
	return a->n++;
}

/* One UTF-8 sequence of byte ranges (lo[i]..hi[i], i < n) ending at next. */
static int nfa_seq(nfa *a, const uint8_t *lo, const uint8_t *hi, int n, int next)
{
	for (int i = n - 1; i >= 0 && next >= 0; i--)
		next = nfa_add(a, S_BYTE, lo[i], hi[i], next, -1);
	return next;
}

static int alt2(nfa *a, int x, int y)
{
	if (x < 0)
		return y;
	if (y < 0)
		return x;
	return nfa_add(a, S_SPLIT, 0, 0, x, y);
}

/* The fragment of code points lo..hi (no surrogates) ending at next, alternatives joined into
 * *head. */
static void utf8_ranges(nfa *a, uint32_t lo, uint32_t hi, int next, int *head)
{
	static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
	uint8_t bl[4], bh[4];
	char el[4], eh[4];
	size_t n;

	if (a->st != RG_OK || lo > hi)
		return;
	if (lo < 0xD800 && hi > 0xDFFF) {
		utf8_ranges(a, lo, 0xD7FF, next, head);
		utf8_ranges(a, 0xE000, hi, next, head);
		return;
	}
	if (lo >= 0xD800 && lo <= 0xDFFF)
		lo = 0xE000;
	if (hi >= 0xD800 && hi <= 0xDFFF)
		hi = 0xD7FF;
	if (lo > hi)
		return;
	for (int k = 0; k < 3; k++)
		if (lo <= bounds[k] && hi > bounds[k]) {
			utf8_ranges(a, lo, bounds[k], next, head);
			utf8_ranges(a, bounds[k] + 1, hi, next, head);
			return;
		}
	if (hi > 0x7F)
		for (int i = 1; i < 4; i++) {
			uint32_t m = (1u << (6 * i)) - 1;

			if ((lo & ~m) != (hi & ~m)) {
				if ((lo & m) != 0) {
					utf8_ranges(a, lo, lo | m, next, head);
					utf8_ranges(a, (lo | m) + 1, hi, next, head);
					return;
				}
				if ((hi & m) != m) {
					utf8_ranges(a, lo, (hi & ~m) - 1, next, head);
					utf8_ranges(a, hi & ~m, hi, next, head);
					return;
				}
			}
		}
	n = rg_utf8_put(lo, el);
	rg_utf8_put(hi, eh);
	for (size_t i = 0; i < n; i++) {
		bl[i] = (uint8_t)el[i];
		bh[i] = (uint8_t)eh[i];
	}
	*head = alt2(a, *head, nfa_seq(a, bl, bh, (int)n, next));
}

/* Node n's fragment, continuing to next; its start state (-1 on error). Built backwards. */
static int build(nfa *a, const parser *p, int n, int next)
{
	const node *x = &p->nodes[n];
	int head = -1, t;

	if (a->st != RG_OK)
		return -1;
	switch (x->type) {
	case N_EMPTY:
		return next;
	case N_SET:
		for (int i = 0; i < x->nr; i++)
			utf8_ranges(a, p->ranges[x->r0 + i].lo, p->ranges[x->r0 + i].hi, next, &head);
		if (head < 0 && a->st == RG_OK) /* the empty class: matches nothing */
			head = nfa_add(a, S_BYTE, 1, 0, next, -1);
		return head;
	case N_CAT:
		return build(a, p, x->a, build(a, p, x->b, next));
	case N_ALT: {
		int l = build(a, p, x->a, next), r = build(a, p, x->b, next);

		return l < 0 || r < 0 ? -1 : nfa_add(a, S_SPLIT, 0, 0, l, r);
	}
	default: /* N_REP */
		t = next;
		if (x->max < 0) {
			int s = nfa_add(a, S_SPLIT, 0, 0, -1, next), body;

			if (s < 0 || (body = build(a, p, x->a, s)) < 0)
				return -1;
			a->s[s].out = body;
			t = s;
		} else {
			for (int i = 0; i < x->max - x->min && t >= 0; i++) {
				int body = build(a, p, x->a, t);

				t = body < 0 ? -1 : nfa_add(a, S_SPLIT, 0, 0, body, next);
			}
		}
		for (int i = 0; i < x->min && t >= 0; i++)
			t = build(a, p, x->a, t);
		return t;
	}
}

/* ---- the DFA ------------------------------------------------------------------------------- */

struct rg_dfa {
	int refs; /* atomic: a compiled DFA is shared read-only (grammar_api.c's cache) */
	int n_states, n_classes, start;
	uint8_t class_of[256];
	int32_t *trans;   /* (n_states, n_classes), -1 dead */
	uint8_t *accept;  /* (n_states) */
	uint8_t *has_out; /* (n_states) */
};

typedef struct subset {
	nfa *a;
	int *stack, *mark, stamp;
	/* the sets: pool of NFA ids, per DFA state (off, len) and hash */
	int *pool;
	size_t n_pool, cap_pool;
	size_t *off;
	int *len;
	uint32_t *hash;
	int n, cap;
	int *table; /* open addressing, -1 empty */
	size_t table_cap;
} subset;

static uint32_t hash_set(const int *s, int n)
{
	uint32_t h = 2166136261u;

	for (int i = 0; i < n; i++)
		h = (h ^ (uint32_t)s[i]) * 16777619u;
	return h;
}

static int cmp_int(const void *x, const void *y)
{
	int a = *(const int *)x, b = *(const int *)y;

	return a < b ? -1 : a > b;
}

/* The epsilon closure of seeds (n) into out (BYTE and MATCH states only, sorted). */
static int closure(subset *S, const int *seeds, int n, int *out)
{
	int sp = 0, k = 0;

	S->stamp++;
	for (int i = n - 1; i >= 0; i--)
		if (seeds[i] >= 0 && S->mark[seeds[i]] != S->stamp) {
			S->mark[seeds[i]] = S->stamp;
			S->stack[sp++] = seeds[i];
		}
	while (sp) {
		int v = S->stack[--sp];
		const nstate *x = &S->a->s[v];

		if (x->type == S_SPLIT) {
			int o[2] = {x->out1, x->out};

			for (int j = 0; j < 2; j++)
				if (o[j] >= 0 && S->mark[o[j]] != S->stamp) {
					S->mark[o[j]] = S->stamp;
					S->stack[sp++] = o[j];
				}
		} else {
			out[k++] = v;
		}
	}
	qsort(out, (size_t)k, sizeof(int), cmp_int);
	return k;
}

/* The DFA state of set (n), added when new: its id, -1 on OOM, -2 over max. */
static int intern(subset *S, const int *set, int n, int max_states)
{
	uint32_t h = hash_set(set, n);
	size_t i;

	if ((size_t)S->n * 2 >= S->table_cap) {
		size_t cap = S->table_cap ? 2 * S->table_cap : 1024;
		int *t = malloc(cap * sizeof(int));

		if (!t)
			return -1;
		for (size_t j = 0; j < cap; j++)
			t[j] = -1;
		for (int d = 0; d < S->n; d++) {
			size_t j = S->hash[d] & (cap - 1);

			while (t[j] >= 0)
				j = (j + 1) & (cap - 1);
			t[j] = d;
		}
		free(S->table);
		S->table = t;
		S->table_cap = cap;
	}
	for (i = h & (S->table_cap - 1); S->table[i] >= 0; i = (i + 1) & (S->table_cap - 1)) {
		int d = S->table[i];

		if (S->hash[d] == h && S->len[d] == n &&
		    !memcmp(S->pool + S->off[d], set, (size_t)n * sizeof(int)))
			return d;
	}
	if (S->n >= max_states)
		return -2;
	if (S->n == S->cap) {
		int cap = S->cap ? 2 * S->cap : 256;
		size_t *off = realloc(S->off, (size_t)cap * sizeof(size_t));
		int *len;
		uint32_t *hs;

		if (!off)
			return -1;
		S->off = off;
		if (!(len = realloc(S->len, (size_t)cap * sizeof(int))))
			return -1;
		S->len = len;
		if (!(hs = realloc(S->hash, (size_t)cap * sizeof(uint32_t))))
			return -1;
		S->hash = hs;
		S->cap = cap;
	}
	if (S->n_pool + (size_t)n > S->cap_pool) {
		size_t cap = S->cap_pool ? 2 * S->cap_pool : 4096;
		int *pool;

		while (cap < S->n_pool + (size_t)n)
			cap *= 2;
		if (!(pool = realloc(S->pool, cap * sizeof(int))))
			return -1;
		S->pool = pool;
		S->cap_pool = cap;
	}
	memcpy(S->pool + S->n_pool, set, (size_t)n * sizeof(int));
	S->off[S->n] = S->n_pool;
	S->len[S->n] = n;
	S->hash[S->n] = h;
	S->n_pool += (size_t)n;
	S->table[i] = S->n;
	return S->n++;
}

static void subset_free(subset *S)
{
	free(S->stack);
	free(S->mark);
	free(S->pool);
	free(S->off);
	free(S->len);
	free(S->hash);
	free(S->table);
}

/* Keep only states that reach acceptance (a fixed point of backward steps; each pass is
 * O(states x classes)); transitions elsewhere become -1, and a dead start becomes -1. */
static rg_status prune_dead(rg_dfa *d)
{
	const int C = d->n_classes;
	uint8_t *live = malloc((size_t)d->n_states);
	bool changed = true;

	if (!live)
		return rg_errorf(RG_ERR_OOM, "regex: out of memory");
	for (int s = 0; s < d->n_states; s++)
		live[s] = d->accept[s];
	while (changed) {
		changed = false;
		for (int s = d->n_states - 1; s >= 0; s--) {
			if (live[s])
				continue;
			for (int c = 0; c < C; c++) {
				int t = d->trans[(size_t)s * C + c];

				if (t >= 0 && live[t]) {
					live[s] = 1;
					changed = true;
					break;
				}
			}
		}
	}
	for (size_t i = 0; i < (size_t)d->n_states * C; i++)
		if (d->trans[i] >= 0 && !live[d->trans[i]])
			d->trans[i] = -1;
	for (int s = 0; s < d->n_states; s++) {
		bool out = false;

		for (int c = 0; c < C && !out; c++)
			out = d->trans[(size_t)s * C + c] >= 0;
		d->has_out[s] = live[s] && out;
	}
	if (!live[d->start])
		d->start = -1;
	free(live);
	return RG_OK;
}

rg_status rg_dfa_compile(const char *pattern, size_t len, int max_states, rg_dfa **out)
{
	parser p = {.s = pattern, .len = len};
	nfa a = {0};
	subset S = {0};
	rg_dfa *d = NULL;
	int root, start, match, *set = NULL, *moves = NULL;
	size_t cap_trans = 0, work = 0;
	rg_status st = RG_OK;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "regex: NULL out");
	*out = NULL;
	if (!pattern)
		return rg_errorf(RG_ERR_INVALID_INPUT, "regex: NULL pattern");
	if (len > MAX_PATTERN)
		return rg_errorf(RG_ERR_TOO_LONG, "regex: the pattern is %zu bytes, at most %d", len,
				 MAX_PATTERN);
	if (max_states <= 0)
		max_states = RG_GRAMMAR_MAX_STATES;
	if (p.len && p.s[0] == '^')
		p.i = 1; /* a leading ^: full matching has it */
	root = parse_alt(&p, 0);
	if (root >= 0 && !at_end(&p))
		fail(&p, RG_ERR_INVALID_INPUT, "regex: %s (offset %zu)", "unbalanced parenthesis");
	if (p.st != RG_OK) {
		st = rg_errorf(p.st, "%s", p.err);
		goto out_free_parse;
	}
	match = nfa_add(&a, S_MATCH, 0, 0, -1, -1);
	start = build(&a, &p, root, match);
	if (a.st != RG_OK || start < 0) {
		st = a.st != RG_OK ? a.st : rg_errorf(RG_ERR_INTERNAL, "regex: no start state");
		goto out_free_nfa;
	}
	if (!(d = calloc(1, sizeof(*d)))) {
		st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
		goto out_free_nfa;
	}
	d->refs = 1;
	/* byte classes: bytes no range boundary separates behave alike */
	{
		uint8_t cut[257] = {0};
		int c = 0;

		for (int i = 0; i < a.n; i++)
			if (a.s[i].type == S_BYTE && a.s[i].lo <= a.s[i].hi) {
				cut[a.s[i].lo] = 1;
				cut[a.s[i].hi + 1] = 1;
			}
		for (int b = 0; b < 256; b++) {
			if (b > 0 && cut[b])
				c++;
			d->class_of[b] = (uint8_t)c;
		}
		d->n_classes = c + 1;
	}
	S.a = &a;
	S.stack = malloc((size_t)a.n * sizeof(int));
	S.mark = calloc((size_t)a.n, sizeof(int));
	set = malloc((size_t)a.n * sizeof(int));
	moves = malloc((size_t)a.n * sizeof(int));
	if (!S.stack || !S.mark || !set || !moves) {
		st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
		goto out_free_dfa;
	}
	{
		int n = closure(&S, &start, 1, set);

		if (intern(&S, set, n, max_states) != 0) {
			st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
			goto out_free_dfa;
		}
	}
	d->start = 0;
	for (int s = 0; s < S.n; s++) {
		const int C = d->n_classes;

		if ((size_t)S.n * C > cap_trans) {
			size_t cap = cap_trans ? 2 * cap_trans : (size_t)256 * C;
			int32_t *t;
			uint8_t *acc;

			while (cap < (size_t)S.n * C)
				cap *= 2;
			t = realloc(d->trans, cap * sizeof(int32_t));
			if (!t) {
				st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
				goto out_free_dfa;
			}
			d->trans = t;
			acc = realloc(d->accept, cap / C + 1);
			if (!acc) {
				st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
				goto out_free_dfa;
			}
			d->accept = acc;
			cap_trans = cap;
		}
		d->accept[s] = 0;
		/* per class c, the BYTE states of s whose range covers it: their outs */
		for (int c = 0; c < C; c++) {
			int nm = 0, ns, t;
			size_t off = S.off[s];
			const int len_s = S.len[s];

			for (int i = 0; i < len_s; i++) {
				const nstate *x = &a.s[S.pool[off + i]];

				if (x->type == S_MATCH) {
					d->accept[s] = 1;
					continue;
				}
				if (x->lo <= x->hi && d->class_of[x->lo] <= c &&
				    d->class_of[x->hi] >= c)
					moves[nm++] = x->out;
			}
			if (!nm) {
				d->trans[(size_t)s * C + c] = -1;
				continue;
			}
			ns = closure(&S, moves, nm, set);
			work += (size_t)len_s + (size_t)ns;
			if (work > MAX_WORK) {
				st = rg_errorf(RG_ERR_TOO_LONG, "regex: too complex to compile (over "
					       "%zu NFA state visits; simplify nested repetitions)",
					       MAX_WORK);
				goto out_free_dfa;
			}
			t = intern(&S, set, ns, max_states);
			if (t == -1) {
				st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
				goto out_free_dfa;
			}
			if (t == -2) {
				st = rg_errorf(RG_ERR_TOO_LONG,
					       "regex: the DFA has over %d states (lower the "
					       "pattern's counted repetitions or lengths)", max_states);
				goto out_free_dfa;
			}
			d->trans[(size_t)s * C + c] = t;
		}
	}
	d->n_states = S.n;
	if (!(d->has_out = malloc((size_t)S.n))) {
		st = rg_errorf(RG_ERR_OOM, "regex: out of memory");
		goto out_free_dfa;
	}
	if ((st = prune_dead(d)) != RG_OK)
		goto out_free_dfa;
	if (d->start < 0) {
		st = rg_errorf(RG_ERR_INVALID_INPUT, "regex: the pattern matches no string");
		goto out_free_dfa;
	}
	*out = d;
	d = NULL;
out_free_dfa:
	rg_dfa_free(d);
	subset_free(&S);
	free(set);
	free(moves);
out_free_nfa:
	free(a.s);
out_free_parse:
	free(p.nodes);
	free(p.ranges);
	return st;
}

rg_dfa *rg_dfa_ref(rg_dfa *d)
{
	if (d)
		__atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
	return d;
}

size_t rg_dfa_bytes(const rg_dfa *d)
{
	return sizeof(*d) + (size_t)d->n_states * ((size_t)d->n_classes * sizeof(int32_t) + 2);
}

void rg_dfa_free(rg_dfa *d)
{
	if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	free(d->trans);
	free(d->accept);
	free(d->has_out);
	free(d);
}

int rg_dfa_start(const rg_dfa *d) { return d->start; }
int rg_dfa_n_states(const rg_dfa *d) { return d->n_states; }

int rg_dfa_next(const rg_dfa *d, int s, uint8_t c)
{
	return s < 0 ? -1 : d->trans[(size_t)s * d->n_classes + d->class_of[c]];
}

bool rg_dfa_accepting(const rg_dfa *d, int s) { return s >= 0 && d->accept[s]; }
bool rg_dfa_has_out(const rg_dfa *d, int s) { return s >= 0 && d->has_out[s]; }

bool rg_dfa_match(const rg_dfa *d, const char *s, size_t len)
{
	int q = d->start;

	for (size_t i = 0; i < len && q >= 0; i++)
		q = rg_dfa_next(d, q, (uint8_t)s[i]);
	return rg_dfa_accepting(d, q);
}

/* ---- the vocabulary trie ------------------------------------------------------------------- */

/* Node i's children are edges[first[i] .. first[i] + n_child[i]) (sorted by byte); the tokens
 * ending at node i are toks[tok0[i] .. tok0[i] + n_tok[i]). Node 0 is the root. */
struct rg_token_trie {
	int vocab;
	int n_nodes;
	int32_t *first, *n_child, *tok0, *n_tok;
	uint8_t *edge_byte; /* (n_nodes) the byte of the edge into node i */
	int32_t *edge_to;   /* child node ids, grouped by parent */
	int32_t *toks;
	uint8_t **bytes;    /* (vocab) token bytes (for advance), NULL: none */
	uint32_t *lens;
};

typedef struct tok_ref {
	const uint8_t *b;
	uint32_t n;
	int32_t id;
} tok_ref;

static int cmp_tok(const void *x, const void *y)
{
	const tok_ref *a = x, *b = y;
	uint32_t n = a->n < b->n ? a->n : b->n;
	int c = memcmp(a->b, b->b, n);

	if (c)
		return c;
	if (a->n != b->n)
		return a->n < b->n ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

void rg_token_trie_free(rg_token_trie *t)
{
	if (!t)
		return;
	if (t->bytes)
		for (int i = 0; i < t->vocab; i++)
			free(t->bytes[i]);
	free(t->bytes);
	free(t->lens);
	free(t->first);
	free(t->n_child);
	free(t->tok0);
	free(t->n_tok);
	free(t->edge_byte);
	free(t->edge_to);
	free(t->toks);
	free(t);
}

int rg_token_trie_vocab(const rg_token_trie *t) { return t->vocab; }

/* Built from the tokens sorted by bytes: a node per distinct prefix, children in byte order;
 * nodes are numbered in DFS pre-order, so a node's children are built in one pass with a stack
 * of the current path. */
rg_status rg_token_trie_build(const char *const *bytes, const size_t *lens, int n,
			      rg_token_trie **out)
{
	rg_token_trie *t;
	tok_ref *r = NULL;
	int nr = 0;
	size_t total = 0;
	int32_t *parent = NULL;
	rg_status st = RG_OK;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "token trie: NULL out");
	*out = NULL;
	if (n < 1 || !bytes || !lens)
		return rg_errorf(RG_ERR_INVALID_INPUT, "token trie: no vocabulary");
	if (!(t = calloc(1, sizeof(*t))))
		return rg_errorf(RG_ERR_OOM, "token trie: out of memory");
	t->vocab = n;
	t->bytes = calloc((size_t)n, sizeof(uint8_t *));
	t->lens = calloc((size_t)n, sizeof(uint32_t));
	r = malloc((size_t)n * sizeof(*r));
	if (!t->bytes || !t->lens || !r)
		goto out_oom;
	for (int i = 0; i < n; i++) {
		if (!bytes[i] || !lens[i])
			continue;
		if (!(t->bytes[i] = malloc(lens[i])))
			goto out_oom;
		memcpy(t->bytes[i], bytes[i], lens[i]);
		t->lens[i] = (uint32_t)lens[i];
		r[nr++] = (tok_ref){t->bytes[i], (uint32_t)lens[i], i};
		total += lens[i];
	}
	qsort(r, (size_t)nr, sizeof(*r), cmp_tok);
	/* nodes: at most total + 1 */
	{
		size_t cap = total + 1;
		int32_t path[4096];
		uint32_t depth = 0;
		int nn = 1;

		t->first = calloc(cap, sizeof(int32_t));
		t->n_child = calloc(cap, sizeof(int32_t));
		t->tok0 = calloc(cap, sizeof(int32_t));
		t->n_tok = calloc(cap, sizeof(int32_t));
		t->edge_byte = calloc(cap, 1);
		t->toks = malloc((size_t)(nr ? nr : 1) * sizeof(int32_t));
		parent = malloc(cap * sizeof(int32_t));
		if (!t->first || !t->n_child || !t->tok0 || !t->n_tok || !t->edge_byte || !t->toks ||
		    !parent)
			goto out_oom;
		path[0] = 0;
		parent[0] = -1;
		for (int k = 0; k < nr; k++) {
			uint32_t common = 0;

			if (r[k].n >= 4096) {
				st = rg_errorf(RG_ERR_TOO_LONG, "token trie: token %d is %u bytes",
					       r[k].id, r[k].n);
				goto out_free;
			}
			if (k > 0) {
				while (common < r[k].n && common < r[k - 1].n &&
				       common < depth && r[k].b[common] == r[k - 1].b[common])
					common++;
			}
			depth = common;
			for (uint32_t j = common; j < r[k].n; j++) {
				int v = nn++;

				t->edge_byte[v] = r[k].b[j];
				parent[v] = path[j];
				t->tok0[v] = k;
				path[j + 1] = v;
			}
			depth = r[k].n;
			{
				int v = path[r[k].n];

				if (t->n_tok[v] == 0)
					t->tok0[v] = k;
				t->n_tok[v]++;
				t->toks[k] = r[k].id;
			}
		}
		t->n_nodes = nn;
		/* children lists: pre-order numbering puts siblings in byte order */
		t->edge_to = malloc((size_t)nn * sizeof(int32_t));
		if (!t->edge_to)
			goto out_oom;
		for (int v = 1; v < nn; v++)
			t->n_child[parent[v]]++;
		{
			int acc = 0;

			for (int v = 0; v < nn; v++) {
				t->first[v] = acc;
				acc += t->n_child[v];
				t->n_child[v] = 0;
			}
		}
		for (int v = 1; v < nn; v++) {
			int u = parent[v];

			t->edge_to[t->first[u] + t->n_child[u]++] = v;
		}
	}
	free(r);
	free(parent);
	*out = t;
	return RG_OK;
out_oom:
	st = rg_errorf(RG_ERR_OOM, "token trie: out of memory");
out_free:
	free(r);
	free(parent);
	rg_token_trie_free(t);
	return st;
}

/* ---- grammars and masks -------------------------------------------------------------------- */

struct rg_grammar {
	int refs;
	rg_dfa *d;
	const rg_token_trie *trie;
	int words;        /* per mask */
	uint64_t **masks; /* (n_states) lazily */
	size_t cached_bytes; /* of masks, at most budget */
	size_t budget;       /* RG_GRAMMAR_MASK_BYTES unless a test sets it */
	uint64_t *scratch;   /* the mask of a state past that budget (not cached) */
	int32_t *stack;   /* DFS scratch: (node, state) pairs */
	size_t cap_stack;
};

rg_status rg_grammar_new(rg_dfa *d, const rg_token_trie *trie, rg_grammar **out)
{
	rg_grammar *g;

	*out = NULL;
	if (!d || !trie)
		return rg_errorf(RG_ERR_INVALID_INPUT, "grammar: no DFA or trie");
	if (!(g = calloc(1, sizeof(*g))) ||
	    !(g->masks = calloc((size_t)d->n_states, sizeof(uint64_t *)))) {
		free(g);
		return rg_errorf(RG_ERR_OOM, "grammar: out of memory");
	}
	g->refs = 1;
	g->d = d;
	g->trie = trie;
	g->words = (trie->vocab + 63) / 64;
	g->budget = RG_GRAMMAR_MASK_BYTES;
	*out = g;
	return RG_OK;
}

rg_grammar *rg_grammar_ref(rg_grammar *g)
{
	if (g)
		g->refs++;
	return g;
}

void rg_grammar_unref(rg_grammar *g)
{
	if (!g || --g->refs > 0)
		return;
	for (int s = 0; s < g->d->n_states; s++)
		free(g->masks[s]);
	free(g->masks);
	free(g->scratch);
	free(g->stack);
	rg_dfa_free(g->d);
	free(g);
}

const rg_dfa *rg_grammar_dfa(const rg_grammar *g) { return g->d; }

void rg_grammar_set_mask_budget(rg_grammar *g, size_t bytes) { g->budget = bytes; }

const uint64_t *rg_grammar_mask_cached(const rg_grammar *g, int s)
{
	return s >= 0 && s < g->d->n_states ? g->masks[s] : NULL;
}

/* One DFS over the trie from the root with DFA state s: every node reached alive allows its
 * tokens; a dead state prunes the subtree. */
const uint64_t *rg_grammar_mask(rg_grammar *g, int s)
{
	const rg_token_trie *t = g->trie;
	uint64_t *m;
	size_t sp = 0;

	if (s < 0 || s >= g->d->n_states)
		return NULL;
	const size_t bytes = (size_t)g->words * sizeof(uint64_t);
	bool cache = g->cached_bytes + bytes <= g->budget;

	if (g->masks[s])
		return g->masks[s];
	if (cache) {
		if (!(m = calloc((size_t)g->words, sizeof(uint64_t))))
			return NULL;
	} else {
		if (!g->scratch && !(g->scratch = malloc(bytes)))
			return NULL;
		m = g->scratch;
		memset(m, 0, bytes);
	}
	if (g->cap_stack < 2 * (size_t)t->n_nodes) {
		int32_t *st = realloc(g->stack, 2 * (size_t)t->n_nodes * sizeof(int32_t));

		if (!st) {
			if (cache)
				free(m);
			return NULL;
		}
		g->stack = st;
		g->cap_stack = 2 * (size_t)t->n_nodes;
	}
	g->stack[sp++] = 0;
	g->stack[sp++] = s;
	while (sp) {
		int q = g->stack[--sp], v = g->stack[--sp];

		for (int k = 0; k < t->n_tok[v]; k++) {
			int32_t id = t->toks[t->tok0[v] + k];

			m[id >> 6] |= 1ull << (id & 63);
		}
		for (int k = 0; k < t->n_child[v]; k++) {
			int c = t->edge_to[t->first[v] + k];
			int r = rg_dfa_next(g->d, q, t->edge_byte[c]);

			if (r >= 0) {
				g->stack[sp++] = c;
				g->stack[sp++] = r;
			}
		}
	}
	if (cache) {
		g->masks[s] = m;
		g->cached_bytes += bytes;
	}
	return m;
}

int rg_grammar_advance(const rg_grammar *g, int s, int32_t tok)
{
	const rg_token_trie *t = g->trie;

	if (tok < 0 || tok >= t->vocab || !t->bytes[tok])
		return -1;
	for (uint32_t i = 0; i < t->lens[tok] && s >= 0; i++)
		s = rg_dfa_next(g->d, s, t->bytes[tok][i]);
	return s;
}

void rg_regex_escape(rg_buf *b, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == ' ' || c >= 0x80 || c == '_') {
			rg_buf_put(b, (const char *)&c, 1);
		} else if (c < 0x20 || c == 0x7F) {
			rg_buf_printf(b, "\\x%02x", c);
		} else {
			char e[2] = {'\\', (char)c};

			rg_buf_put(b, e, 2);
		}
	}
}
