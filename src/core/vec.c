/* See vec.h. */
#include "core/vec.h"

#include <stdint.h>
#include <stdlib.h>

bool rg_vec_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
	size_t c = *cap ? *cap : (first ? first : 1);
	void *q;

	if (need <= *cap)
		return true;
	while (c < need) {
		if (c > SIZE_MAX / 2)
			return false;
		c *= 2;
	}
	if (elem && c > SIZE_MAX / elem)
		return false;
	q = realloc(*p, c * elem);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}
