/* ragged's one JSON loader (json-c): the rules every configuration, tokenizer and checkpoint
 * file is read under. The HTTP request parser (app/server/request.c) has its own limits and
 * answers. */
#ifndef RG_CORE_JSON_H
#define RG_CORE_JSON_H
#include <json-c/json.h>
#include <stddef.h>
#include <sys/types.h>
#include "core/buf.h"
#include "ragged.h"

/* Parse len bytes of JSON text that must be exactly one value: only whitespace may follow it,
 * and a NUL byte anywhere is refused. flags: json-c tokener flags (JSON_TOKENER_VALIDATE_UTF8
 * to refuse invalid UTF-8 in strings). Messages read "<path>: <what> is not valid JSON:
 * <reason> at byte N" (what NULL: "<path>: not valid JSON: ..."). *out: one new reference,
 * released by the caller with json_object_put; NULL on error.
 * Errors: RG_ERR_FORMAT (not JSON, trailing data, NUL byte, over 2 GiB), RG_ERR_OOM. */
rg_status rg_json_parse(const char *text, size_t len, int flags, const char *path,
			const char *what, json_object **out);

/* rg_file_read(path, limit) then rg_json_parse of the whole file with UTF-8 validation.
 * Errors: RG_ERR_IO (missing, unreadable, not a regular file), RG_ERR_FORMAT (over limit bytes,
 * not JSON), RG_ERR_OOM; messages name the path. */
rg_status rg_json_read_file(const char *path, off_t limit, json_object **out);

/* What json-c's tree hides about the text it was parsed from. text (len bytes) must be the
 * valid JSON that json-c parsed to root. Checks, in one pass over the text with no allocation
 * (a second, with one json-c object per open object, only when a duplicate is present):
 *   - a key repeated within one object (json-c keeps the last value): the text's keys, counted,
 *     must number the tree's, since each repeat drops at least one; the repeated key is then
 *     found by decoding the keys of each object in turn (keys compared as json-c stores them,
 *     up to a NUL);
 *   - an integer literal outside [-2^63, 2^64 - 1], which json-c saturates to the bound (so a
 *     seed of 2^64 would read as 2^64 - 1).
 * Returns RG_OK when there is neither; else RG_ERR_INVALID_INPUT with the reason in msg
 * (n > 0): "duplicate key 'x'" (the key also copied to key, key_n > 0, cut to fit) or
 * "\"seed\": integer ... at byte N is outside [-2^63, 2^64), ..." (key: the last key before
 * the integer, as written, or ""); RG_ERR_OOM (msg says so). rg_last_error is
 * not set. RFC 8259 sec. 4 leaves repeated names' meaning open; every request body ragged reads
 * is refused on them instead of taking the last (issue 28). */
rg_status rg_json_text_check(const char *text, size_t len, json_object *root, char *msg, size_t n,
			     char *key, size_t key_n);
#endif

/* Append v as Python's json.dumps(v, ensure_ascii=False, indent=indent) writes it (what
 * transformers' chat-template tojson filter and vLLM's tool parsers write): ", " and ": "
 * separators (indent < 0: one line; indent >= 0: "," and ": ", a newline and indent spaces per
 * level, "[]" / "{}" when empty); keys in the order json-c holds them (the text's order);
 * strings with only '"', '\\' and the C0 controls escaped (\n \r \t \b \f, else \u00XX);
 * integers as json-c read them; doubles as Python's repr(float) (the shortest text that reads
 * back, "1.0", "1e-05", "1e+16", "NaN" / "Infinity" as Python writes them); NULL as null.
 * Errors go to b's oom flag only. */
void rg_json_dump_py(rg_buf *b, json_object *v, int indent);
