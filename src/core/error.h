/* Thread-local error message plumbing behind rg_last_error(). */
#ifndef RG_CORE_ERROR_H
#define RG_CORE_ERROR_H
#include "ragged.h"

/* Set this thread's last-error message (printf format) and return st, so callers can write
 * `return rg_errorf(RG_ERR_IO, "cannot open %s: %s", path, strerror(errno));`.
 * Messages longer than 511 bytes are truncated. */
rg_status rg_errorf(rg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current message with "prefix: " (for adding context on the way up); returns st. */
rg_status rg_error_wrap(rg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear the message. */
void rg_error_clear(void);
#endif
