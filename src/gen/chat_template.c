/* Chat templates by family (chat_template.h). A template is read once per call into a style
 * (family, variant, flags, the literals it carries); the renderers below write the text each
 * family's real templates write, with their whitespace handling: Jinja's trim filter and
 * Python's str.strip() remove Unicode whitespace (str.isspace) at both ends. */
#include "gen/chat_template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"

enum chat_role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

enum chat_variant {
	VAR_BASE = 0,
	VAR_LLAMA31,        /* Llama 3.1+: always a system block with knowledge and date lines */
	VAR_MISTRAL_LEGACY, /* "[INST] " ... " [/INST]", content + eos [+ " "], no system */
	VAR_MISTRAL_V1,     /* " [INST] " ... " [/INST]", " " + content + eos */
	VAR_MISTRAL_V3,     /* "[INST] " ... "[/INST]", " " + trim(content) + eos */
	VAR_PHI3_LEGACY,    /* no <|system|>, <|assistant|> opened after every user turn */
};

typedef struct chat_style {
	rg_chat_family family;
	enum chat_variant variant;
	bool bos;           /* the template writes bos_token (where the family's templates differ) */
	bool sys_last;      /* Mistral v3: the system message goes with the last user message */
	bool sys_first;     /* Mistral v1: ... with the first */
	bool eos_space;     /* Mistral legacy: eos_token + ' ' after an assistant message */
	bool skip_empty_system; /* Phi-3.5: a system message of empty content is not written */
	char *default_system;   /* ChatML: the whole system turn written when messages[0] is not a
				 * system message ("<|im_start|>system\n...<|im_end|>\n"), or NULL */
	char *knowledge;    /* Llama 3.1: "Cutting Knowledge Date: December 2023\n" */
	char *date;         /* Llama 3.1: date_string's literal ("26 Jul 2024"), or NULL */
	char *date_fmt;     /* Llama 3.2: strftime_now's format ("%d %b %Y"), or NULL */
	/* tools (Qwen2.5's Hermes ChatML; Llama 3.1+'s JSON calls): where the template reads them */
	bool hermes;        /* ChatML with a <tools> block, <tool_call> and <tool_response> */
	char *tools_head;   /* Hermes: "\n\n# Tools\n\n...<tools>" after the system text */
	char *tools_tail;   /* Hermes: "\n</tools>\n\nFor each function call, ...<|im_end|>\n" */
	char *tools_system; /* Hermes: the system text when messages[0] is not a system message */
	bool llama_tools;   /* Llama 3.1+: tools in the first user turn, ipython results */
	bool mistral_tools; /* Mistral v0.3: [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS] */
	bool reads_tools;   /* the source names "tools" */
} chat_style;

static void style_free(chat_style *st)
{
	free(st->default_system);
	free(st->knowledge);
	free(st->date);
	free(st->date_fmt);
	free(st->tools_head);
	free(st->tools_tail);
	free(st->tools_system);
}

const char *rg_chat_family_name(rg_chat_family f)
{
	switch (f) {
	case RG_CHAT_UNKNOWN: return "unknown";
	case RG_CHAT_CHATML: return "chatml";
	case RG_CHAT_LLAMA2: return "llama2";
	case RG_CHAT_LLAMA3: return "llama3";
	case RG_CHAT_MISTRAL: return "mistral";
	case RG_CHAT_GEMMA: return "gemma";
	case RG_CHAT_PHI3: return "phi3";
	case RG_CHAT_ZEPHYR: return "zephyr";
	}
	return "unknown";
}

/* ---- string literals of the Jinja source --------------------------------------------------- */

/* Decode the Jinja string literal whose opening quote is at s[0] into *out (malloc'd); returns
 * the bytes consumed (through the closing quote), 0 when it is unterminated or holds a bad
 * escape (and when an allocation failed: *oom set then). Jinja's lexer
 * normalizes newlines and then applies Python's unicode-escape: \n \t \r \\ \' \" \a \b \f \v,
 * \xhh, \uhhhh, \Uhhhhhhhh, a backslash-newline is dropped, other escapes stay as written. */
static size_t literal_decode(const char *s, char **out, bool *oom)
{
	const char q = s[0];
	size_t i = 1;
	rg_buf b;

	rg_buf_init(&b);
	for (;; i++) {
		char c = s[i], e;

		if (!c)
			goto out_fail;
		if (c == q)
			break;
		if (c == '\r') {        /* \r\n and \r become \n */
			if (s[i + 1] == '\n')
				i++;
			rg_buf_put(&b, "\n", 1);
			continue;
		}
		if (c != '\\') {
			rg_buf_put(&b, &c, 1);
			continue;
		}
		e = s[++i];
		switch (e) {
		case 'n': rg_buf_put(&b, "\n", 1); break;
		case 't': rg_buf_put(&b, "\t", 1); break;
		case 'r': rg_buf_put(&b, "\r", 1); break;
		case 'a': rg_buf_put(&b, "\a", 1); break;
		case 'b': rg_buf_put(&b, "\b", 1); break;
		case 'f': rg_buf_put(&b, "\f", 1); break;
		case 'v': rg_buf_put(&b, "\v", 1); break;
		case '\\': case '\'': case '"': rg_buf_put(&b, &e, 1); break;
		case '\n': break;
		case 'x': case 'u': case 'U': {
			int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
			uint32_t cp = 0;
			char u[4];
			int k;

			for (k = 0; k < nd; k++) {
				char h = s[i + 1 + k];
				int v = h >= '0' && h <= '9' ? h - '0' :
					h >= 'a' && h <= 'f' ? h - 'a' + 10 :
					h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
				if (v < 0)
					break;
				cp = cp << 4 | (uint32_t)v;
			}
			if (k < nd || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
				goto out_fail; /* Python raises on these: not a template to read */
			rg_buf_put(&b, u, rg_utf8_put(cp, u));
			i += (size_t)nd;
			break;
		}
		case '\0':
			goto out_fail;
		default:
			rg_buf_put(&b, s + i - 1, 2);
		}
	}
	if (b.oom || !rg_buf_reserve(&b, 0)) {
		*oom = true;
		goto out_fail;
	}
	*out = b.data;
	return i + 1;
out_fail:
	rg_buf_free(&b);
	*out = NULL;
	return 0;
}

/* The first string literal inside a Jinja tag ({{ }} or {% %}; comments and template data are
 * skipped) whose decoded text starts with prefix and contains needle (NULL: any), malloc'd;
 * NULL when none. *oom is set when an allocation failed. */
static char *literal_find(const char *j, const char *prefix, const char *needle, bool *oom)
{
	bool in_tag = false;

	for (size_t i = 0; j[i];) {
		if (!in_tag) {
			if (j[i] == '{' && (j[i + 1] == '{' || j[i + 1] == '%')) {
				in_tag = true;
				i += 2;
			} else if (j[i] == '{' && j[i + 1] == '#') {
				const char *e = strstr(j + i + 2, "#}");

				if (!e)
					return NULL;
				i = (size_t)(e - j) + 2;
			} else {
				i++;
			}
			continue;
		}
		if ((j[i] == '}' || j[i] == '%') && j[i + 1] == '}') {
			in_tag = false;
			i += 2;
		} else if (j[i] == '\'' || j[i] == '"') {
			char *lit;
			size_t used = literal_decode(j + i, &lit, oom);

			if (!used)
				return NULL;
			if (!strncmp(lit, prefix, strlen(prefix)) && (!needle || strstr(lit, needle)))
				return lit;
			free(lit);
			i += used;
		} else {
			i++;
		}
	}
	return NULL;
}

/* The string literal that follows the first occurrence of key in j (spaces skipped), malloc'd;
 * NULL when key is absent or not followed by a literal. */
static char *literal_after(const char *j, const char *key, bool *oom)
{
	const char *p = strstr(j, key);
	char *lit;

	if (!p)
		return NULL;
	for (p += strlen(key); *p == ' '; p++)
		;
	if (*p != '\'' && *p != '"')
		return NULL;
	return literal_decode(p, &lit, oom) ? lit : NULL;
}

/* ---- recognizing a template ---------------------------------------------------------------- */

static bool has(const char *j, const char *s)
{
	return strstr(j, s) != NULL;
}

/* A literal (quote, then s) somewhere in j, in either quote style. */
static bool has_lit(const char *j, const char *s)
{
	char q[64];

	snprintf(q, sizeof(q), "'%s", s);
	if (has(j, q))
		return true;
	snprintf(q, sizeof(q), "\"%s", s);
	return has(j, q);
}

static rg_status unsupported(const char *j, const char *why)
{
	return rg_errorf(RG_ERR_UNSUPPORTED,
			 "chat template not rendered (%s); it begins \"%.40s\"", why, j);
}

static rg_status oom(void)
{
	return rg_errorf(RG_ERR_OOM, "out of host memory");
}

/* Llama 3.1-3.3's tool instructions (tools_in_user_message, their default), as the templates
 * write them (tests/data/chat_templates/Llama-3.3-70B-Instruct.jinja); each is looked for in the
 * source as written there, so a template that words them otherwise renders without tools. */
#define LLAMA_TOOLS_1 "Given the following functions, please respond with a JSON for a " \
	"function call "
#define LLAMA_TOOLS_2 "with its proper arguments that best answers the given prompt."
#define LLAMA_TOOLS_3 "Respond in the format {\"name\": function name, \"parameters\": " \
	"dictionary of argument name and its value}."
#define LLAMA_TOOLS_4 "Do not use variables."

/* Family, variant and literals of template j into *st (style_free after RG_OK). */
static rg_status style_parse(const char *j, chat_style *st)
{
	bool o = false;

	memset(st, 0, sizeof(*st));
	st->bos = has(j, "bos_token");
	st->reads_tools = has(j, "tools");
	if (has(j, "<|im_start|>") && has(j, "<|im_end|>")) {
		st->family = RG_CHAT_CHATML;
		st->default_system = literal_find(j, "<|im_start|>system", "<|im_end|>", &o);
		if (!o && has(j, "<tool_call>") && has(j, "<tool_response>") &&
		    has(j, "tool_call.arguments | tojson") && has(j, "message.tool_calls")) {
			st->tools_head = literal_find(j, "\n\n# Tools", "<tools>", &o);
			st->tools_tail = literal_find(j, "\n</tools>", "<|im_end|>", &o);
			st->tools_system = literal_find(j, "You are", NULL, &o);
			/* another Hermes-like template (Qwen3's: no default system text, thinking
			 * turns) renders as ChatML without tools; tools are refused there
			 * (reads_tools), not dropped */
			st->hermes = !o && st->tools_head && st->tools_tail && st->tools_system;
		}
		return o ? oom() : RG_OK;
	}
	if (has(j, "<|start_header_id|>") && has(j, "<|end_header_id|>") && has(j, "<|eot_id|>")) {
		st->family = RG_CHAT_LLAMA3;
		if (!has(j, "Cutting Knowledge Date"))
			return RG_OK;
		st->variant = VAR_LLAMA31;
		st->knowledge = literal_find(j, "Cutting Knowledge Date", NULL, &o);
		st->date_fmt = literal_after(j, "strftime_now(", &o);
		st->date = literal_after(j, "date_string = ", &o);
		if (o)
			return oom();
		if (!st->knowledge || (!st->date && !st->date_fmt) || !has(j, "Today Date: "))
			return unsupported(j, "a Llama 3.1 system block without its knowledge or "
					   "date literals");
		st->llama_tools = has(j, "tools_in_user_message") &&
				  has(j, "Environment: ipython") && has(j, LLAMA_TOOLS_1) &&
				  has(j, LLAMA_TOOLS_2 "\\n\\n") &&
				  has(j, LLAMA_TOOLS_3) && has(j, LLAMA_TOOLS_4 "\\n\\n") && has(j, "tojson(indent=4)");
		return RG_OK;
	}
	if (has(j, "<start_of_turn>") && has(j, "<end_of_turn>")) {
		st->family = RG_CHAT_GEMMA;
		return RG_OK;
	}
	if (has(j, "[INST]") && has(j, "[/INST]") && has(j, "<<SYS>>")) {
		st->family = RG_CHAT_LLAMA2;
		return RG_OK;
	}
	if (has(j, "[INST]") && has(j, "[/INST]") && has(j, "eos_token") && st->bos) {
		st->family = RG_CHAT_MISTRAL;
		st->sys_first = has(j, "loop.first and system_message");
		st->sys_last = has(j, "loop.last and system_message");
		if (has_lit(j, " [INST] ") && has_lit(j, " [/INST]"))
			st->variant = VAR_MISTRAL_V1;
		else if (has_lit(j, "[INST] ") && has_lit(j, " [/INST]") && !st->sys_first &&
			 !st->sys_last) {
			st->variant = VAR_MISTRAL_LEGACY;
			st->eos_space = has(j, "eos_token + ' '") || has(j, "eos_token + \" \"");
		} else if (has_lit(j, "[INST] ") && has_lit(j, "[/INST]")) {
			st->variant = VAR_MISTRAL_V3;
			st->mistral_tools = has(j, "[AVAILABLE_TOOLS] [") && has(j, "[TOOL_CALLS] [") &&
					    has(j, "[TOOL_RESULTS] {\"content\": ") &&
					    has(j, "tool_call.id|length != 9") &&
					    has(j, "message == user_messages[-1]");
		} else {
			return unsupported(j, "a Mistral [INST] template of unknown spacing");
		}
		return RG_OK;
	}
	if (has(j, "<|user|>") && has(j, "<|assistant|>") && has(j, "<|end|>")) {
		st->family = RG_CHAT_PHI3;
		if (!has(j, "<|system|>")) {
			if (has(j, "add_generation_prompt"))
				return unsupported(j, "a Phi-3 template without <|system|> that reads "
						   "add_generation_prompt");
			st->variant = VAR_PHI3_LEGACY;
		}
		st->skip_empty_system = has(j, "'system' and message['content']") ||
					has(j, "\"system\" and message[\"content\"]") ||
					has(j, "'system' and message.content");
		return RG_OK;
	}
	if (has(j, "<|user|>") && has(j, "<|assistant|>") && has(j, "<|system|>") &&
	    has(j, "eos_token")) {
		st->family = RG_CHAT_ZEPHYR;
		return RG_OK;
	}
	return unsupported(j, "not ChatML, Llama 2, Llama 3, Mistral, Gemma, Phi-3 or Zephyr");
}

rg_chat_family rg_chat_template_detect(const char *jinja)
{
	chat_style st;
	rg_chat_family f;

	if (!jinja)
		return RG_CHAT_UNKNOWN;
	if (style_parse(jinja, &st) != RG_OK) {
		style_free(&st);
		return RG_CHAT_UNKNOWN;
	}
	f = st.family;
	style_free(&st);
	return f;
}

/* ---- rendering ------------------------------------------------------------------------------ */

/* Python's str.isspace() over the code points of UTF-8 text (what Jinja's trim and str.strip()
 * remove): the C0 separators and blanks, U+0085, U+00A0, U+1680, U+2000-200A, U+2028/2029,
 * U+202F, U+205F, U+3000. */
static bool is_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Append s[0..n) (valid UTF-8) stripped of whitespace at both ends. */
static void put_trim(rg_buf *b, const char *s, size_t n)
{
	size_t i = 0, start = n, end = 0, k;
	uint32_t c;

	while (i < n) {
		k = rg_utf8_next(s, n, i, &c);
		if (!k)   /* validated before; keep the byte rather than loop */
			k = 1, c = (unsigned char)s[i];
		if (!is_space(c)) {
			if (start == n)
				start = i;
			end = i + k;
		}
		i += k;
	}
	if (start < end)
		rg_buf_put(b, s + start, end - start);
}

static void put(rg_buf *b, const char *s)
{
	rg_buf_puts(b, s);
}

/* A rendering's buffer and, when asked, where message content landed in it: every buffer the
 * renderers write to is one of these (buf first, so put_content finds the spans from the
 * rg_buf it is given). */
typedef struct chat_out {
	rg_buf buf;
	bool rec;        /* record content spans */
	bool oom;
	size_t *spans;   /* (2 * n) [start, end) byte offsets into buf, ascending */
	size_t n, cap;
} chat_out;

static void out_span(rg_buf *b, size_t start, size_t end)
{
	chat_out *o = (chat_out *)b;

	if (!o->rec || start >= end)
		return;
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 8, *ns = realloc(o->spans, 2 * cap * sizeof(*ns));

		if (!ns) {
			o->oom = true;
			return;
		}
		o->spans = ns;
		o->cap = cap;
	}
	o->spans[2 * o->n] = start;
	o->spans[2 * o->n + 1] = end;
	o->n++;
}

static void put_content(rg_buf *b, const rg_chat_message *m)
{
	size_t at = b->len;

	rg_buf_put(b, m->content ? m->content : "", m->content_len);
	out_span(b, at, b->len);
}

static void put_content_trim(rg_buf *b, const rg_chat_message *m)
{
	size_t at = b->len;

	put_trim(b, m->content ? m->content : "", m->content_len);
	out_span(b, at, b->len);
}

/* put_trim of all of tmp into b, tmp's content spans moved along (cut to what the trim kept);
 * tmp is emptied. */
static void put_trim_out(rg_buf *b, rg_buf *tmp)
{
	chat_out *t = (chat_out *)tmp;
	size_t at = b->len, lead = 0, kept;

	while (lead < tmp->len) {
		uint32_t c;
		size_t k = rg_utf8_next(tmp->data, tmp->len, lead, &c);

		if (!k || !is_space(c))
			break;
		lead += k;
	}
	put_trim(b, tmp->data ? tmp->data : "", tmp->len);
	kept = b->len - at;
	for (size_t k = 0; k < t->n; k++) {
		size_t s0 = t->spans[2 * k] > lead ? t->spans[2 * k] - lead : 0;
		size_t e0 = t->spans[2 * k + 1] > lead ? t->spans[2 * k + 1] - lead : 0;

		out_span(b, at + (s0 < kept ? s0 : kept), at + (e0 < kept ? e0 : kept));
	}
	t->oom |= ((chat_out *)b)->oom;
	tmp->len = 0;
	t->n = 0;
}

static rg_status bad(int i, const char *family, const char *why)
{
	return rg_errorf(RG_ERR_INVALID_INPUT, "messages[%d]: %s (the %s chat template)", i, why,
			 family);
}

/* Roles alternate user/assistant/... from msgs[from] on, as the Llama 2, Mistral and Gemma
 * templates demand (they raise otherwise); a system message there is refused with sys_why. */
static rg_status check_alternate(const enum chat_role *r, int from, int n, const char *family,
				 const char *sys_why)
{
	for (int i = from; i < n; i++) {
		enum chat_role want = (i - from) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;

		if (r[i] == ROLE_SYSTEM)
			return bad(i, family, sys_why);
		if (r[i] != want)
			return bad(i, family, "Conversation roles must alternate "
				   "user/assistant/user/assistant/...");
	}
	return RG_OK;
}

static const char *const role_name[] = {"system", "user", "assistant", "tool"};

/* The parsed tools and tool calls of one rendering: tools a non-empty JSON list or NULL;
 * calls[i] message i's tool_calls list (each call's function.arguments parsed in place into
 * its JSON value, as vLLM hands them to the template) or NULL. */
typedef struct chat_tools {
	json_object *tools;
	json_object **calls; /* (n) */
} chat_tools;

/* v as transformers' tojson(indent) writes it, recorded as content (it is the request's). */
static void put_json(rg_buf *b, json_object *v, int indent)
{
	size_t at = b->len;

	rg_json_dump_py(b, v, indent);
	out_span(b, at, b->len);
}

static void put_str_span(rg_buf *b, const char *s)
{
	size_t at = b->len;

	put(b, s);
	out_span(b, at, b->len);
}

static json_object *call_fn(json_object *calls, size_t k, const char *key)
{
	json_object *fn = NULL, *v = NULL;

	json_object_object_get_ex(json_object_array_get_idx(calls, k), "function", &fn);
	json_object_object_get_ex(fn, key, &v);
	return v;
}

/* ChatML; with Qwen2.5's Hermes tool branches (tests/data/chat_templates/Qwen2.5-0.5B-Instruct
 * .jinja): the tools listed one per line in <tools> inside the system turn, an assistant's
 * calls as <tool_call> JSON after its content, consecutive tool results as <tool_response>
 * blocks of one user turn. */
static void render_chatml(rg_buf *b, const chat_style *st, const rg_chat_message *m,
			  const enum chat_role *r, int n, bool gen, const chat_tools *t)
{
	int i = 0;

	if (st->hermes && t->tools) {
		put(b, "<|im_start|>system\n");
		if (r[0] == ROLE_SYSTEM)
			put_content(b, &m[i++]);
		else
			put(b, st->tools_system);
		put(b, st->tools_head);
		for (size_t k = 0; k < json_object_array_length(t->tools); k++) {
			put(b, "\n");
			put_json(b, json_object_array_get_idx(t->tools, k), -1);
		}
		put(b, st->tools_tail);
	} else if (st->default_system && r[0] != ROLE_SYSTEM) {
		put(b, st->default_system);
	}
	for (; i < n; i++) {
		if (r[i] == ROLE_TOOL) {
			if (i == 0 || r[i - 1] != ROLE_TOOL)
				put(b, "<|im_start|>user");
			put(b, "\n<tool_response>\n");
			put_content(b, &m[i]);
			put(b, "\n</tool_response>");
			if (i == n - 1 || r[i + 1] != ROLE_TOOL)
				put(b, "<|im_end|>\n");
			continue;
		}
		if (t->calls[i]) {
			put(b, "<|im_start|>assistant");
			if (m[i].content_len) {
				put(b, "\n");
				put_content(b, &m[i]);
			}
			for (size_t k = 0; k < json_object_array_length(t->calls[i]); k++) {
				put(b, "\n<tool_call>\n{\"name\": \"");
				put_str_span(b, json_object_get_string(call_fn(t->calls[i], k, "name")));
				put(b, "\", \"arguments\": ");
				put_json(b, call_fn(t->calls[i], k, "arguments"), -1);
				put(b, "}\n</tool_call>");
			}
			put(b, "<|im_end|>\n");
			continue;
		}
		put(b, "<|im_start|>");
		put(b, role_name[r[i]]);
		put(b, "\n");
		put_content(b, &m[i]);
		put(b, "<|im_end|>\n");
	}
	if (gen)
		put(b, "<|im_start|>assistant\n");
}

static void llama3_turn(rg_buf *b, const char *role, const rg_chat_message *m)
{
	put(b, "<|start_header_id|>");
	put(b, role);
	put(b, "<|end_header_id|>\n\n");
	put_content_trim(b, m);
	put(b, "<|eot_id|>");
}

/* Llama 3 / 3.1+; the 3.1+ templates' tool branches (Llama-3.3-70B-Instruct.jinja, with
 * tools_in_user_message true, their default): "Environment: ipython" in the system block, the
 * tools as tojson(indent=4) with the instructions in the first user turn (the message after
 * the system one, whatever its role), an assistant's one call as {"name": ..., "parameters":
 * ...}, a tool result in an ipython turn written as a JSON string (the template's "content is
 * iterable" test holds for a string). */
static rg_status render_llama3(rg_buf *b, const chat_style *st, const rg_chat_message *m,
			       const enum chat_role *r, int n, bool gen, const char *bos,
			       const chat_tools *t)
{
	const bool tools = st->llama_tools && t->tools;
	int i = 0;

	if (st->variant == VAR_LLAMA31) {
		char date[64];

		if (st->date_fmt) {   /* transformers' strftime_now: datetime.now().strftime */
			time_t now = time(NULL);
			struct tm tm;

			if (!localtime_r(&now, &tm) || !strftime(date, sizeof(date), st->date_fmt, &tm))
				return rg_errorf(RG_ERR_INVALID_INPUT,
						 "the chat template's date format \"%s\" gives no "
						 "date", st->date_fmt);
		} else {
			snprintf(date, sizeof(date), "%s", st->date);
		}
		if (st->bos)
			put(b, bos);
		put(b, "<|start_header_id|>system<|end_header_id|>\n\n");
		if (tools)
			put(b, "Environment: ipython\n");
		put(b, st->knowledge);
		put(b, "Today Date: ");
		put(b, date);
		put(b, "\n\n");
		if (r[0] == ROLE_SYSTEM)
			put_content_trim(b, &m[i++]);
		put(b, "<|eot_id|>");
	} else if (st->bos) {
		put(b, bos);
	}
	if (tools) {
		if (i == n)
			return rg_errorf(RG_ERR_INVALID_INPUT, "Cannot put tools in the first user "
					 "message when there's no first user message! (the llama3 "
					 "chat template)");
		put(b, "<|start_header_id|>user<|end_header_id|>\n\n");
		put(b, LLAMA_TOOLS_1 LLAMA_TOOLS_2 "\n\n" LLAMA_TOOLS_3 LLAMA_TOOLS_4 "\n\n");
		for (size_t k = 0; k < json_object_array_length(t->tools); k++) {
			put_json(b, json_object_array_get_idx(t->tools, k), 4);
			put(b, "\n\n");
		}
		put_content_trim(b, &m[i++]);
		put(b, "<|eot_id|>");
	}
	for (; i < n; i++) {
		if (t->calls[i]) {
			if (json_object_array_length(t->calls[i]) != 1)
				return bad(i, "llama3", "This model only supports single tool-calls "
					   "at once!");
			put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
			put_str_span(b, json_object_get_string(call_fn(t->calls[i], 0, "name")));
			put(b, "\", \"parameters\": ");
			put_json(b, call_fn(t->calls[i], 0, "arguments"), -1);
			put(b, "}<|eot_id|>");
		} else if (r[i] == ROLE_TOOL) {
			json_object *c = json_object_new_string_len(m[i].content ? m[i].content : "",
								    (int)m[i].content_len);

			if (!c)
				return oom();
			put(b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
			put_json(b, c, -1);
			put(b, "<|eot_id|>");
			json_object_put(c);
		} else {
			llama3_turn(b, role_name[r[i]], &m[i]);
		}
	}
	if (gen)
		put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return RG_OK;
}

static void render_llama2(rg_buf *b, const rg_chat_message *m, const enum chat_role *r, int n,
			  const char *bos, const char *eos, rg_buf *tmp)
{
	const int from = r[0] == ROLE_SYSTEM;

	for (int i = from; i < n; i++) {
		if (r[i] == ROLE_ASSISTANT) {
			put(b, " ");
			put_content_trim(b, &m[i]);
			put(b, " ");
			put(b, eos);
			continue;
		}
		/* the system message goes inside the first user turn, and the whole is strip()ped */
		tmp->len = 0;
		if (i == from && from) {
			put(tmp, "<<SYS>>\n");
			put_content(tmp, &m[0]);
			put(tmp, "\n<</SYS>>\n\n");
		}
		put_content(tmp, &m[i]);
		put(b, bos);
		put(b, "[INST] ");
		put_trim_out(b, tmp);
		put(b, " [/INST]");
	}
}

/* Whether messages a and b are equal as Jinja compares the dicts vLLM builds (role, content and
 * the absent tool fields): Mistral v0.3 writes the tools before every user message equal to
 * the last one. */
static bool same_message(const rg_chat_message *a, const rg_chat_message *b)
{
	return !strcmp(a->role, b->role) && a->content_len == b->content_len &&
	       (!a->content_len || !memcmp(a->content, b->content, a->content_len)) &&
	       !a->tool_calls && !b->tool_calls && !a->tool_call_id && !b->tool_call_id;
}

static rg_status ids_of_nine(int i)
{
	return bad(i, "mistral", "Tool call IDs should be alphanumeric strings with length 9!");
}

/* Mistral v0.3's tool branches (Mistral-7B-Instruct-v0.3.jinja): [AVAILABLE_TOOLS] before the
 * last user message (each function's keys but "return": a string written raw in quotes, others
 * by tojson), an assistant's calls as [TOOL_CALLS] [function JSON with its "id"], a result as
 * [TOOL_RESULTS] {"content": raw, "call_id": ...}; call ids of 9 characters, or it raises. */
static rg_status mistral_tools_turn(rg_buf *b, const rg_chat_message *m, int i,
				    const chat_tools *t, const char *eos)
{
	if (m[i].tool_calls) {
		json_object *c = t->calls[i];
		size_t nc = json_object_array_length(c);

		put(b, "[TOOL_CALLS] [");
		for (size_t k = 0; k < nc; k++) {
			json_object *call = json_object_array_get_idx(c, k), *fn = NULL, *id = NULL;
			size_t at = b->len;
			rg_buf fj;

			json_object_object_get_ex(call, "function", &fn);
			json_object_object_get_ex(call, "id", &id);
			rg_buf_init(&fj);   /* out[:-1]: the function's JSON but its closing brace */
			rg_json_dump_py(&fj, fn, -1);
			b->oom |= fj.oom;
			rg_buf_put(b, fj.data ? fj.data : "", fj.len ? fj.len - 1 : 0);
			out_span(b, at, b->len);
			rg_buf_free(&fj);
			if (!json_object_is_type(id, json_type_string) ||
			    json_object_get_string_len(id) != 9)
				return ids_of_nine(i);
			put(b, ", \"id\": \"");
			put_str_span(b, json_object_get_string(id));
			put(b, k + 1 < nc ? "\"}, " : "\"}]");
		}
		put(b, eos);
		return RG_OK;
	}
	if (!m[i].tool_call_id || strlen(m[i].tool_call_id) != 9)
		return ids_of_nine(i);
	put(b, "[TOOL_RESULTS] {\"content\": ");
	put_content(b, &m[i]);
	put(b, ", \"call_id\": \"");
	put_str_span(b, m[i].tool_call_id);
	put(b, "\"}[/TOOL_RESULTS]");
	return RG_OK;
}

static void mistral_available_tools(rg_buf *b, const chat_tools *t)
{
	size_t n = json_object_array_length(t->tools);

	put(b, "[AVAILABLE_TOOLS] [");
	for (size_t k = 0; k < n; k++) {
		json_object *fn = NULL;
		bool first = true;

		json_object_object_get_ex(json_object_array_get_idx(t->tools, k), "function", &fn);
		put(b, "{\"type\": \"function\", \"function\": {");
		json_object_object_foreach(fn, key, val) {
			if (!strcmp(key, "return"))
				continue;
			if (!first)
				put(b, ", ");
			first = false;
			put(b, "\"");
			put_str_span(b, key);
			put(b, "\": ");
			if (json_object_is_type(val, json_type_string)) {
				put(b, "\"");
				put_str_span(b, json_object_get_string(val));
				put(b, "\"");
			} else {
				put_json(b, val, -1);
			}
		}
		put(b, "}}");
		put(b, k + 1 < n ? ", " : "]");
	}
	put(b, "[/AVAILABLE_TOOLS]");
}

static rg_status render_mistral(rg_buf *b, const chat_style *st, const rg_chat_message *m,
				const enum chat_role *r, int n, const char *bos, const char *eos,
				const chat_tools *t)
{
	const int from = r[0] == ROLE_SYSTEM;
	int last_user = -1;
	rg_status s;

	for (int i = from; i < n; i++)
		if (r[i] == ROLE_USER)
			last_user = i;
	put(b, bos);
	for (int i = from; i < n; i++) {
		bool sys = from && ((st->sys_first && i == from) || (st->sys_last && i == n - 1));

		if (st->mistral_tools && r[i] == ROLE_USER && t->tools &&
		    same_message(&m[i], &m[last_user]))
			mistral_available_tools(b, t);
		if (st->mistral_tools && (r[i] == ROLE_TOOL || m[i].tool_calls)) {
			if ((s = mistral_tools_turn(b, m, i, t, eos)) != RG_OK)
				return s;
			continue;
		}
		if (r[i] == ROLE_USER) {
			put(b, st->variant == VAR_MISTRAL_V1 ? " [INST] " : "[INST] ");
			if (sys) {
				put_content(b, &m[0]);
				put(b, "\n\n");
			}
			put_content(b, &m[i]);
			put(b, st->variant == VAR_MISTRAL_V3 ? "[/INST]" : " [/INST]");
		} else if (st->variant == VAR_MISTRAL_LEGACY) {
			put_content(b, &m[i]);
			put(b, eos);
			if (st->eos_space)
				put(b, " ");
		} else {
			put(b, " ");
			if (st->variant == VAR_MISTRAL_V3)
				put_content_trim(b, &m[i]);
			else
				put_content(b, &m[i]);
			put(b, eos);
		}
	}
	return RG_OK;
}

static void render_gemma(rg_buf *b, const chat_style *st, const rg_chat_message *m,
			 const enum chat_role *r, int n, bool gen, const char *bos)
{
	if (st->bos)
		put(b, bos);
	for (int i = 0; i < n; i++) {
		put(b, r[i] == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
		put_content_trim(b, &m[i]);
		put(b, "<end_of_turn>\n");
	}
	if (gen)
		put(b, "<start_of_turn>model\n");
}

static void render_phi3(rg_buf *b, const chat_style *st, const rg_chat_message *m,
			const enum chat_role *r, int n, bool gen, const char *bos,
			const char *eos)
{
	static const char *const tag[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};

	if (st->variant == VAR_PHI3_LEGACY) {
		if (st->bos)
			put(b, bos);
		for (int i = 0; i < n; i++) {
			if (r[i] == ROLE_USER)
				put(b, "<|user|>\n");
			put_content(b, &m[i]);
			put(b, r[i] == ROLE_USER ? "<|end|>\n<|assistant|>\n" : "<|end|>\n");
		}
		return;
	}
	for (int i = 0; i < n; i++) {
		if (r[i] == ROLE_SYSTEM && st->skip_empty_system && m[i].content_len == 0)
			continue;
		put(b, tag[r[i]]);
		put_content(b, &m[i]);
		put(b, "<|end|>\n");
	}
	put(b, gen ? "<|assistant|>\n" : eos);
}

static void render_zephyr(rg_buf *b, const rg_chat_message *m, const enum chat_role *r, int n,
			  bool gen, const char *eos)
{
	static const char *const tag[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"};

	for (int i = 0; i < n; i++) {
		put(b, tag[r[i]]);
		put_content(b, &m[i]);
		put(b, eos);
		put(b, "\n");
	}
	if (gen)
		put(b, "<|assistant|>\n");
}

/* Roles of msgs into r, each content checked; then the family's rules on roles. */
static rg_status check_messages(const chat_style *st, const rg_chat_message *m, int n,
				enum chat_role *r)
{
	static const char *const ONLY_FIRST = "a system message is allowed only first";
	const char *fam = rg_chat_family_name(st->family);

	for (int i = 0; i < n; i++) {
		const char *role = m[i].role;

		if (!role)
			return bad(i, fam, "role is NULL");
		if (!strcmp(role, "system"))
			r[i] = ROLE_SYSTEM;
		else if (!strcmp(role, "user"))
			r[i] = ROLE_USER;
		else if (!strcmp(role, "assistant"))
			r[i] = ROLE_ASSISTANT;
		else if (!strcmp(role, "tool") && (st->hermes || st->llama_tools || st->mistral_tools))
			r[i] = ROLE_TOOL;
		else if (!strcmp(role, "tool"))
			return bad(i, fam, "role \"tool\" is not rendered by this template (it has "
				   "no tool branches; ragged renders tools for Qwen2.5's Hermes "
				   "ChatML and Llama 3.1-3.3)");
		else
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "messages[%d]: role \"%.40s\" is not supported (system, "
					 "user, assistant, tool)", i, role);
		if (m[i].tool_calls && r[i] != ROLE_ASSISTANT)
			return bad(i, fam, "tool_calls are for assistant messages");
		if (m[i].tool_calls && !st->hermes && !st->llama_tools && !st->mistral_tools)
			return bad(i, fam, "tool_calls are not rendered by this template (it has no "
				   "tool branches; ragged renders tools for Qwen2.5's Hermes ChatML "
				   "and Llama 3.1-3.3)");
		if (!m[i].content && m[i].content_len)
			return bad(i, fam, "content is NULL");
		if (m[i].content_len && memchr(m[i].content, 0, m[i].content_len))
			return bad(i, fam, "content holds a NUL byte");
		if (m[i].content_len && !rg_utf8_valid(m[i].content, m[i].content_len))
			return rg_errorf(RG_ERR_INVALID_UTF8, "messages[%d]: content is not valid "
					 "UTF-8", i);
	}
	switch (st->family) {
	case RG_CHAT_LLAMA2:
		return check_alternate(r, r[0] == ROLE_SYSTEM, n, fam, ONLY_FIRST);
	case RG_CHAT_MISTRAL:
		if (r[0] == ROLE_SYSTEM && st->variant == VAR_MISTRAL_LEGACY)
			return bad(0, fam, "this Mistral template supports only user and "
				   "assistant roles");
		if (r[0] == ROLE_SYSTEM && !st->sys_first && !st->sys_last)
			return bad(0, fam, "this Mistral template has no place for a system "
				   "message");
		if (st->mistral_tools)   /* v0.3 skips tool results and calls in its check */
			for (int i = r[0] == ROLE_SYSTEM, k = 0; i < n; i++) {
				if (r[i] == ROLE_TOOL || m[i].tool_calls)
					continue;
				if ((r[i] == ROLE_USER) != (k++ % 2 == 0) || r[i] == ROLE_SYSTEM)
					return bad(i, fam, "After the optional system message, "
						   "conversation roles must alternate "
						   "user/assistant/user/assistant/...");
			}
		if (st->mistral_tools)
			return RG_OK;
		return check_alternate(r, r[0] == ROLE_SYSTEM, n, fam, ONLY_FIRST);
	case RG_CHAT_GEMMA:
		return check_alternate(r, 0, n, fam, "System role not supported");
	case RG_CHAT_PHI3:
		if (st->variant != VAR_PHI3_LEGACY)
			return RG_OK;
		for (int i = 0; i < n; i++)
			if (r[i] == ROLE_SYSTEM)
				return bad(i, fam, "this Phi-3 template drops system messages");
		return RG_OK;
	case RG_CHAT_CHATML:
	case RG_CHAT_LLAMA3:
	case RG_CHAT_ZEPHYR:
	case RG_CHAT_UNKNOWN:
		break;
	}
	return RG_OK;
}

/* JSON text s (what names it) parsed into *out; RG_ERR_INVALID_INPUT when it is not JSON. */
static rg_status parse_json(const char *s, const char *what, int i, json_object **out)
{
	char why[200];
	rg_status st = rg_json_parse(s, strlen(s), JSON_TOKENER_VALIDATE_UTF8, "chat", what, out);

	if (st != RG_ERR_FORMAT)
		return st;
	snprintf(why, sizeof(why), "%s", rg_last_error());
	if (i < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "%s", why);
	return rg_errorf(RG_ERR_INVALID_INPUT, "messages[%d]: %s", i, why);
}

/* tools (NULL or JSON text) and each message's tool_calls into *t, checked: tools a list of
 * objects; tool_calls a non-empty list of {"function": {"name": string, "arguments": JSON text
 * (or an object)}}, the arguments parsed in place. */
static rg_status tools_parse(const char *tools, const rg_chat_message *m, int n, chat_tools *t)
{
	rg_status s;

	if (!(t->calls = calloc((size_t)n, sizeof(*t->calls))))
		return oom();
	if (tools) {
		if ((s = parse_json(tools, "tools", -1, &t->tools)) != RG_OK)
			return s;
		if (!json_object_is_type(t->tools, json_type_array))
			return rg_errorf(RG_ERR_INVALID_INPUT, "tools must be a list");
		for (size_t k = 0; k < json_object_array_length(t->tools); k++)
			if (!json_object_is_type(json_object_array_get_idx(t->tools, k),
						 json_type_object))
				return rg_errorf(RG_ERR_INVALID_INPUT, "tools[%zu] must be an "
						 "object", k);
		if (!json_object_array_length(t->tools)) {   /* [] is no tools, as vLLM */
			json_object_put(t->tools);
			t->tools = NULL;
		}
	}
	for (int i = 0; i < n; i++) {
		json_object *c;

		if (!m[i].tool_calls)
			continue;
		if ((s = parse_json(m[i].tool_calls, "tool_calls", i, &t->calls[i])) != RG_OK)
			return s;
		c = t->calls[i];
		if (!json_object_is_type(c, json_type_array) || !json_object_array_length(c))
			return rg_errorf(RG_ERR_INVALID_INPUT, "messages[%d].tool_calls must be a "
					 "non-empty list", i);
		for (size_t k = 0; k < json_object_array_length(c); k++) {
			json_object *fn = NULL, *name = NULL, *args = NULL, *v;

			json_object_object_get_ex(json_object_array_get_idx(c, k), "function", &fn);
			json_object_object_get_ex(fn, "name", &name);
			json_object_object_get_ex(fn, "arguments", &args);
			if (!json_object_is_type(fn, json_type_object) ||
			    !json_object_is_type(name, json_type_string))
				return rg_errorf(RG_ERR_INVALID_INPUT, "messages[%d].tool_calls[%zu] "
						 "needs a function with a name", i, k);
			if (!json_object_is_type(args, json_type_string))
				continue;   /* an object already (or absent: written as null) */
			s = rg_json_parse(json_object_get_string(args),
					  (size_t)json_object_get_string_len(args),
					  JSON_TOKENER_VALIDATE_UTF8, "chat", "arguments", &v);
			if (s != RG_OK)
				return rg_errorf(s == RG_ERR_OOM ? s : RG_ERR_INVALID_INPUT,
						 "messages[%d].tool_calls[%zu].function.arguments is "
						 "not JSON text", i, k);
			json_object_object_add(fn, "arguments", v);
		}
	}
	return RG_OK;
}

static void tools_free(chat_tools *t, int n)
{
	json_object_put(t->tools);
	for (int i = 0; t->calls && i < n; i++)
		json_object_put(t->calls[i]);
	free(t->calls);
}

rg_status rg_chat_template_render_spans(const char *jinja, const rg_chat_message *msgs, int n,
					const char *bos, const char *eos,
					bool add_generation_prompt, char **out, size_t *out_len,
					size_t **spans, size_t *n_spans)
{
	return rg_chat_template_render_tools(jinja, msgs, n, NULL, bos, eos,
					     add_generation_prompt, out, out_len, spans, n_spans);
}

rg_status rg_chat_template_render_tools(const char *jinja, const rg_chat_message *msgs, int n,
					const char *tools, const char *bos, const char *eos,
					bool add_generation_prompt, char **out, size_t *out_len,
					size_t **spans, size_t *n_spans)
{
	enum chat_role *r = NULL;
	chat_tools tl = {0};
	chat_style st;
	chat_out bo = {.rec = spans != NULL}, to = {.rec = spans != NULL};
	rg_buf *b = &bo.buf, *tmp = &to.buf;
	rg_status s;

	if (out)
		*out = NULL;
	if (out_len)
		*out_len = 0;
	if (spans)
		*spans = NULL;
	if (n_spans)
		*n_spans = 0;
	if (!jinja || !msgs || !out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_chat_template_render: NULL argument");
	if (n < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT, "a chat needs at least one message, got %d",
				 n);
	bos = bos ? bos : "";
	eos = eos ? eos : "";
	if ((s = style_parse(jinja, &st)) != RG_OK)
		goto out_free_style;
	if (!(r = malloc((size_t)n * sizeof(*r)))) {
		s = oom();
		goto out_free_style;
	}
	if ((s = check_messages(&st, msgs, n, r)) != RG_OK ||
	    (s = tools_parse(tools, msgs, n, &tl)) != RG_OK)
		goto out_free_roles;
	if (tl.tools && st.reads_tools && !st.hermes && !st.llama_tools && !st.mistral_tools) {
		/* its Jinja would write them somewhere ragged does not: refused, not dropped */
		s = rg_errorf(RG_ERR_INVALID_INPUT, "tools: this %s chat template reads tools in a "
			      "form ragged does not render (tools are rendered for Qwen2.5's Hermes "
			      "ChatML and Llama 3.1-3.3)", rg_chat_family_name(st.family));
		goto out_free_roles;
	}
	rg_buf_init(b);
	rg_buf_init(tmp);
	switch (st.family) {
	case RG_CHAT_CHATML:
		render_chatml(b, &st, msgs, r, n, add_generation_prompt, &tl);
		break;
	case RG_CHAT_LLAMA3:
		s = render_llama3(b, &st, msgs, r, n, add_generation_prompt, bos, &tl);
		break;
	case RG_CHAT_LLAMA2:
		render_llama2(b, msgs, r, n, bos, eos, tmp);
		break;
	case RG_CHAT_MISTRAL:
		s = render_mistral(b, &st, msgs, r, n, bos, eos, &tl);
		break;
	case RG_CHAT_GEMMA:
		render_gemma(b, &st, msgs, r, n, add_generation_prompt, bos);
		break;
	case RG_CHAT_PHI3:
		render_phi3(b, &st, msgs, r, n, add_generation_prompt, bos, eos);
		break;
	case RG_CHAT_ZEPHYR:
		render_zephyr(b, msgs, r, n, add_generation_prompt, eos);
		break;
	case RG_CHAT_UNKNOWN:
		s = rg_errorf(RG_ERR_INTERNAL, "chat template parsed to no family");
		break;
	}
	if (s == RG_OK && (b->oom || tmp->oom || bo.oom || to.oom || !rg_buf_reserve(b, 0)))
		s = oom();
	rg_buf_free(tmp);
	free(to.spans);
	if (s != RG_OK) {
		rg_buf_free(b);
		free(bo.spans);
		goto out_free_roles;
	}
	*out = b->data;
	if (out_len)
		*out_len = b->len;
	if (spans) {
		*spans = bo.spans;
		*n_spans = bo.n;
	}
out_free_roles:
	tools_free(&tl, n);
	free(r);
out_free_style:
	style_free(&st);
	return s;
}

rg_status rg_chat_template_render(const char *jinja, const rg_chat_message *msgs, int n,
				  const char *bos, const char *eos, bool add_generation_prompt,
				  char **out, size_t *out_len)
{
	return rg_chat_template_render_spans(jinja, msgs, n, bos, eos, add_generation_prompt, out,
					     out_len, NULL, NULL);
}
