/* Greedy-by-size offset planner (TurboTransformers PPoPP'21 sec. 4.2, Algorithm 1); see mem_plan.h. */
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/mem_plan.h"

struct plan_item {
	size_t size;      /* bytes rounded up to align */
	size_t off;       /* assigned offset */
	int first, last;  /* inclusive lifetime */
	int idx;          /* index in the caller's array */
};

static bool align_ok(size_t align)
{
	return align != 0 && (align & (align - 1)) == 0;
}

/* Round bytes up to align; false on overflow. */
static bool round_up(size_t bytes, size_t align, size_t *out)
{
	if (bytes > SIZE_MAX - (align - 1))
		return false;
	*out = (bytes + align - 1) & ~(align - 1);
	return true;
}

/* Decreasing size, then earlier first op, then lower index (qsort is not stable). */
static int cmp_item(const void *a, const void *b)
{
	const struct plan_item *x = a, *y = b;

	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

/* FindGapFromchunk (Algorithm 1, L1-L22) over one unbounded chunk: placed (np) is sorted by offset.
 * Returns the offset for it, or false when the end offset overflows size_t. */
static bool find_gap(const struct plan_item *it, struct plan_item **placed, int np, size_t *off)
{
	size_t prev = 0, best = SIZE_MAX, smallest = SIZE_MAX;

	for (int i = 0; i < np; i++) {
		const struct plan_item *x = placed[i];

		if (x->first > it->last || it->first > x->last)
			continue; /* lifetimes disjoint: may share bytes */
		if (x->off >= prev && x->off - prev >= it->size && x->off - prev < smallest) {
			smallest = x->off - prev;
			best = prev;
		}
		if (x->off + x->size > prev)
			prev = x->off + x->size;
	}
	if (smallest == SIZE_MAX) {
		if (prev > SIZE_MAX - it->size)
			return false;
		best = prev; /* no gap fits: after the highest conflicting tensor */
	}
	*off = best;
	return true;
}

rg_status rg_mem_plan(rg_mem_tensor *t, int n, size_t align, size_t *total)
{
	struct plan_item *items = NULL, **placed = NULL;
	rg_status st = RG_OK;
	size_t end = 0;
	int np = 0;

	if (!total)
		return rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: total is NULL");
	*total = 0;
	if (n < 0 || (n > 0 && !t))
		return rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: bad tensor list (n = %d)", n);
	if (!align_ok(align))
		return rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: align %zu is not a power of two", align);
	if (n == 0)
		return RG_OK;

	items = malloc((size_t)n * sizeof(*items));
	placed = malloc((size_t)n * sizeof(*placed));
	if (!items || !placed) {
		st = rg_errorf(RG_ERR_OOM, "mem_plan: cannot allocate scratch for %d tensors", n);
		goto out_free;
	}
	for (int i = 0; i < n; i++) {
		const char *name = t[i].name ? t[i].name : "?";
		size_t sz;

		if (t[i].first > t[i].last) {
			st = rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: tensor %d (%s): first %d > last %d",
				       i, name, t[i].first, t[i].last);
			goto out_free;
		}
		if (!round_up(t[i].bytes, align, &sz)) {
			st = rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: tensor %d (%s): %zu bytes overflow",
				       i, name, t[i].bytes);
			goto out_free;
		}
		items[i] = (struct plan_item){ .size = sz, .first = t[i].first, .last = t[i].last, .idx = i };
	}
	qsort(items, (size_t)n, sizeof(*items), cmp_item);

	for (int i = 0; i < n; i++) {
		struct plan_item *it = &items[i];
		int j;

		if (it->size == 0)
			continue; /* takes no space; offset 0 */
		if (!find_gap(it, placed, np, &it->off)) {
			st = rg_errorf(RG_ERR_INVALID_INPUT, "mem_plan: arena size overflows size_t");
			goto out_free;
		}
		for (j = np; j > 0 && placed[j - 1]->off > it->off; j--)
			placed[j] = placed[j - 1]; /* keep placed sorted by offset */
		placed[j] = it;
		np++;
		if (it->off + it->size > end)
			end = it->off + it->size;
	}
	for (int i = 0; i < n; i++)
		t[items[i].idx].offset = items[i].off;
	*total = end; /* every offset and size is a multiple of align, so end is too */
out_free:
	free(placed);
	free(items);
	return st;
}

size_t rg_mem_plan_naive(const rg_mem_tensor *t, int n, size_t align)
{
	size_t sum = 0, sz;

	if (!t || n <= 0 || !align_ok(align))
		return 0;
	for (int i = 0; i < n; i++) {
		if (!round_up(t[i].bytes, align, &sz) || sz > SIZE_MAX - sum)
			return SIZE_MAX;
		sum += sz;
	}
	return sum;
}
