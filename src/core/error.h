/* Thread-local error message plumbing behind rg_last_error() (error.c). The setters,
 * rg_errorf / rg_error_wrap / rg_error_clear, are public (ragged.h): the ragged binary links
 * libragged.so and sets its own errors in the library's one message, so that rg_last_error()
 * reads the app's failures and the library's alike. This header stays the library's and the
 * app's way of saying "this file reports errors"; error.c is compiled into the library only. */
#ifndef RG_CORE_ERROR_H
#define RG_CORE_ERROR_H
#include "ragged.h"
#endif
