/* Offset planner for activation tensors: one arena, tensors whose lifetimes do not overlap share bytes.
 *
 * Source: TurboTransformers (Fang et al., PPoPP'21), sec. 4.2 "Memory Manager", Algorithm 1
 * (sequence-length-aware allocator, FindGapFromchunk), itself a variant of Greedy by Size for Offset
 * Calculation (Pisarchyk and Lee, 2020). The planner runs again whenever the batch's sequence lengths
 * change: the caller recomputes the byte sizes and plans again (O(n^2) in the number of tensors).
 * The paper spreads tensors over 2 MB chunks; ragged has one arena, so this is Algorithm 1 with a
 * single chunk of unbounded size, whose final extent is the arena size.
 */
#ifndef RG_CORE_MEM_PLAN_H
#define RG_CORE_MEM_PLAN_H
#include <stddef.h>
#include "ragged.h"

typedef struct rg_mem_tensor {
	const char *name; /* for reports, not owned */
	size_t bytes;     /* size in bytes (0 allowed: gets offset 0, takes no space) */
	int first, last;  /* lifetime: index of the first and last op that uses it, first <= last; inclusive */
	size_t offset;    /* out: byte offset in the arena, a multiple of align */
} rg_mem_tensor;

/* Assign t[i].offset for all n tensors so that any two tensors whose lifetimes overlap (the inclusive
 * intervals [first, last] intersect) occupy disjoint byte ranges [offset, offset + round_up(bytes)).
 *
 * Algorithm (sec. 4.2, Algorithm 1): tensors are taken by decreasing size (ties: earlier first, then
 * lower index). Each one scans the already-placed tensors whose lifetimes it overlaps, in offset order,
 * and goes into the smallest gap between them that fits it (best fit; the lowest such gap on a tie);
 * if no gap fits, it goes right after the highest of them. Sizes are rounded up to align, so every
 * offset is a multiple of align.
 *
 * t: (n) caller-owned; only .offset is written. align: power of two >= 1, in bytes.
 * *total: arena bytes needed = max(offset + round_up(bytes)), a multiple of align; 0 when n == 0.
 * Errors (with a message): RG_ERR_INVALID_INPUT when total is NULL, t is NULL with n > 0, n < 0, align
 * is not a power of two, some first > last, or a size or offset overflows size_t; RG_ERR_OOM.
 * On error *total is 0 (when total is not NULL) and offsets are unspecified.
 * Allocates scratch internally and frees it on every path; nothing is left for the caller to free. */
rg_status rg_mem_plan(rg_mem_tensor *t, int n, size_t align, size_t *total);

/* Sum over the n tensors of bytes rounded up to align: what one buffer per tensor would need, the
 * baseline a plan is reported against. 0 when t is NULL, n <= 0 or align is not a power of two;
 * SIZE_MAX when the sum overflows. */
size_t rg_mem_plan_naive(const rg_mem_tensor *t, int n, size_t align);
#endif
