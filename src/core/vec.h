/* Growable arrays: the one growth rule (doubling) every module's arrays use. */
#ifndef RG_CORE_VEC_H
#define RG_CORE_VEC_H
#include <stdbool.h>
#include <stddef.h>

/* Make the array *p of elem-byte elements hold at least need elements; *cap is its capacity in
 * elements, grown by doubling from at least first. Returns false when out of memory (or on size
 * overflow), leaving *p and *cap as they were; the caller still owns *p and frees it. */
bool rg_vec_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first);
#endif
