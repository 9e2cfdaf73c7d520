/* ragged's one JSON loader (json-c): the rules every configuration, tokenizer and checkpoint
 * file is read under. The HTTP request parser (app/server/request.c) has its own limits and
 * answers. */
#ifndef RG_CORE_JSON_H
#define RG_CORE_JSON_H
#include <json-c/json.h>
#include <stddef.h>
#include <sys/types.h>
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
#endif
