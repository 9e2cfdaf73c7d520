/* Status names and the thread-local last-error message. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RG_ERRMSG_MAX 512
static _Thread_local char rg_errmsg[RG_ERRMSG_MAX];

const char *rg_status_name(rg_status st)
{
	switch (st) {
	case RG_OK: return "RG_OK";
	case RG_ERR_INVALID_INPUT: return "RG_ERR_INVALID_INPUT";
	case RG_ERR_INVALID_UTF8: return "RG_ERR_INVALID_UTF8";
	case RG_ERR_TOO_LONG: return "RG_ERR_TOO_LONG";
	case RG_ERR_IO: return "RG_ERR_IO";
	case RG_ERR_FORMAT: return "RG_ERR_FORMAT";
	case RG_ERR_UNSUPPORTED: return "RG_ERR_UNSUPPORTED";
	case RG_ERR_OOM: return "RG_ERR_OOM";
	case RG_ERR_CUDA: return "RG_ERR_CUDA";
	case RG_ERR_BUSY: return "RG_ERR_BUSY";
	case RG_ERR_INTERNAL: return "RG_ERR_INTERNAL";
	}
	return "RG_ERR_UNKNOWN";
}

const char *rg_last_error(void) { return rg_errmsg; }

void rg_error_clear(void) { rg_errmsg[0] = '\0'; }

rg_status rg_errorf(rg_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rg_errmsg, sizeof(rg_errmsg), fmt, ap);
	va_end(ap);
	return st;
}

rg_status rg_error_wrap(rg_status st, const char *fmt, ...)
{
	char prefix[RG_ERRMSG_MAX], old[RG_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, rg_errmsg, sizeof(old));
	snprintf(rg_errmsg, sizeof(rg_errmsg), "%.200s: %.300s", prefix, old);
	return st;
}
