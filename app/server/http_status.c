/* rg_status -> HTTP status and TEI error type; see http_status.h. */
#include "server/http_status.h"

rg_http_error rg_http_error_for(rg_status st, bool stopping)
{
	switch (st) {
	case RG_OK:
		return (rg_http_error){200, NULL};
	case RG_ERR_INVALID_INPUT:
	case RG_ERR_INVALID_UTF8:
		return (rg_http_error){400, "validation"};
	case RG_ERR_TOO_LONG:
		return (rg_http_error){422, "validation"};
	case RG_ERR_BUSY:
		return stopping ? (rg_http_error){503, "unhealthy"}
				: (rg_http_error){429, "overloaded"};
	case RG_ERR_IO:
	case RG_ERR_FORMAT:
	case RG_ERR_UNSUPPORTED:
	case RG_ERR_OOM:
	case RG_ERR_CUDA:
	case RG_ERR_INTERNAL:
		return (rg_http_error){500, "backend"};
	}
	return (rg_http_error){500, "backend"}; /* a value outside the enum */
}
