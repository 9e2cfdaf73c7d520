/* The one mapping from a library status (rg_status) to the HTTP answer the server gives for it:
 * the status code and TEI's error "error_type". Every route answers a failed library call
 * through it. */
#ifndef RG_SERVER_HTTP_STATUS_H
#define RG_SERVER_HTTP_STATUS_H
#include <stdbool.h>
#include "ragged.h"

typedef struct rg_http_error {
	int code;         /* HTTP status: 200 for RG_OK */
	const char *type; /* "validation", "overloaded", "unhealthy", "backend"; NULL for RG_OK */
} rg_http_error;

/* Bad client data: 400 (invalid input or UTF-8) or 422 (too long, TEI's answer);
 * RG_ERR_BUSY: 429, or 503 while the server is stopping (stopping = true);
 * anything the server did wrong or lacks (I/O, format, unsupported, OOM, CUDA, internal): 500. */
rg_http_error rg_http_error_for(rg_status st, bool stopping);
#endif
