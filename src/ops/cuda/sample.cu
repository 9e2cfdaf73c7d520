/* Sampling and top-k on the device: rg_op_sample_rows and rg_op_topk_rows (src/ops/ops.h has the
 * contracts; src/ops/cpu/sample_cpu.c is the CPU twin). rg_op_sample_rows has two paths.
 *
 * The fast path (issue 19: beam search's greedy rows with top_n, and top-k sampling, at a cost
 * near greedy's) takes greedy rows (any top_n) and sampled rows with 1 <= top_k <= FAST_K (64)
 * and any temperature / top-p / min-p / penalties / bias. It is two launches:
 *  1. sample_slice_kernel, grid (M, S): a row is cut into S slices of W ~ 2,048 columns (at most
 *     FAST_SMAX = 101 slices, at most 4,096 columns each). A CTA of 256 threads loads its slice
 *     (NaN -> -inf, never +inf) into shared memory, applies the bias and penalty entries that fall
 *     in it (one warp reads the lists 32 entries at a time and applies its hits in list order,
 *     the same float steps as the full algorithm's thread 0), divides by the temperature for
 *     sampled rows, and writes its top C keys (value, then lower id, as one unique 64-bit key;
 *     C = top_k + 1 + FAST_TIES (16) for sampled rows, so that stage 2 sees up to 16 ties at the
 *     k-th value and one key past them, max(top_n, 1) for greedy rows) and, for greedy rows, its float64 sum of exp(l - slice max). The top C of
 *     the slice come from cta_top: an exact radix select of the C-th value (4 passes of 8-bit
 *     shared histograms over the keys in registers, stopping early when a bin holds exactly the
 *     keys still needed), one block scan to compact the keys above it and the first ties, and a
 *     rank by comparison of those C keys. Rows the fast path does not take return at once.
 *  2. sample_merge_kernel, one CTA of 512 threads per row: cta_top over the S x C keys of the
 *     row (the global top C: each slice's top C holds its part of them). Greedy: the id is the
 *     first key (lowest id among equal maxima), lse = max + log(sum_s sum_s exp(max_s - max)),
 *     top_n the first keys. Sampled with k = top_k: the contract keeps every value equal to the
 *     k-th (fp16 logits tie there often: on an H200 with 4 rows of 50,257 the old one-more-key
 *     check sent nearly every row of a random-weight GPT-2 to the full algorithm, 154 us a step),
 *     so the survivors are the merged keys >= the k-th value; when all C merged keys are, or a
 *     slice's C-th key is (it may hold more), or the k-th is -inf, the row runs the full algorithm
 *     below in the same CTA; else the survivors, already in the host's sorted order, go to one
 *     thread: top-p's total and walk in that order, min-p, and the draw over the survivors
 *     sorted by id, in the host chain's own summation orders.
 *  Cost per row: x read once from HBM by S CTAs (the SMs work at batch 1: 25 slices at 50,257
 *  columns, 75 at 151,936), everything else in shared memory and registers; no pass over the
 *  row in L2. The slice outputs (S x 81 keys, S sums) live in the row's own part of the workspace
 *  (its int32 and f32 rows), so a row that falls back overwrites only its own.
 *  It runs when every condition holds: RAGGED_SAMPLE_FAST is not "0" (read at each call: A/B in
 *  one process; a captured graph keeps the choice of its capture), and the rows are wide enough
 *  for the slice outputs (N >= ~170) and at most 101 x 4,096 columns. The launcher cannot see the
 *  rows (backend memory, read by captured graphs), so each row chooses on the device: stage 1
 *  skips the rows it does not take and stage 2 runs the full algorithm for them. Rows with top_k
 *  0 or > 64 at temperature > 0 (nucleus sampling over the whole vocabulary) thus cost what they
 *  did, plus one near-empty launch.
 *
 * The full algorithm (sample_row_full): one CTA of SB = RG_SAMPLE_GROUPS threads per row; the
 * row's processed logits live in the workspace (f32, L2-resident for one row).
 * Building blocks (every one is called by all threads of the CTA and ends synchronised):
 *  - fkey: the order-preserving map float -> uint32 (radix keys);
 *  - block_topk: LightSeq's hierarchical retrieve-and-rerank (sec. 2.2). Thread t's strided
 *    group {t, t + SB, ...} gives its maximum; R = the k-th largest of the SB group maxima (one
 *    block radix sort), so at least k elements are >= R and the top k are among them; the
 *    candidates >= R are compacted in id order (block scans) and reranked by one stable block
 *    radix sort (value descending; ties keep id order). Cost: 2 reads of the row + 2 small
 *    sorts; a random row of 50257 keeps ~k..3k candidates. Past RG_SAMPLE_CAND candidates (a
 *    tie-heavy row) the k-th value comes from radix_find instead;
 *  - radix_find: the exact key K with weight(> K) < target <= weight(>= K), 4 passes of 8-bit
 *    histograms (shared-memory atomics) over the row; weight = 1 (k-th largest: top-k) or
 *    exp(l - l_max) in float64 (top-p's cut, found without sorting the row);
 *  - the draw: each thread sums exp(l - l_max) over a contiguous slice, an exclusive block scan
 *    gives every slice's start, and the one slice where the running sum passes u x total walks
 *    its elements in id order.
 * Cost per row (N = vocab): the load reads x once from HBM and writes the f32 row to the
 * workspace; every later pass reads that row back, from L2 while rows x N x 4 bytes fit (one
 * 50257 row is 200 KB, one 151936 row 600 KB). Greedy: 3 passes (+2 for top-N). top-k: +2 passes
 * and two 4096-key block sorts. top-p: ~8 passes (max, float64 exp-sum, 4 radix passes with
 * float64 exp and shared atomics spread over 8 histogram copies, tie count, mark). min-p: 1. The
 * draw: 1 pass plus one slice. One CTA per row leaves SMs idle when rows are few (batch 1 uses
 * one SM of 132): the fast path above splits the rows it can.
 * Float64 sums run in another order than the host chain's (the full algorithm: every sum; the
 * fast path: a greedy row's log-sum-exp, summed per slice then rescaled): a draw or a top-p cut
 * within rounding (~1e-16 relative) of a boundary may differ from the CPU twin, and log-probs by
 * as much; nothing else does. (Both paths also use the device's exp, within 1 ulp of the host's.)
 * The fast path keys -0 as +0 (the host holds them equal, ties by id); the full algorithm's
 * radix keys put +0 before -0, so on a tie between the two only the fast path orders as the
 * host does. */
#include <cub/cub.cuh>
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "core/tuning.h"
#include "ops/cuda/common.cuh"

#define SB RG_SAMPLE_GROUPS
#define SITEMS (RG_SAMPLE_CAND / RG_SAMPLE_GROUPS)
#define HCOPIES 8 /* radix_find's histogram copies (fewer shared-atomic collisions) */

/* keys (fkey(value) << 32) | ~id: unique, so a descending sort gives value descending, ties
 * by ascending id, whatever the sort's stability */
typedef cub::BlockRadixSort<unsigned long long, SB, SITEMS> SortT;
typedef cub::BlockScan<int, SB> ScanI;
typedef cub::BlockScan<double, SB> ScanD;
typedef cub::BlockReduce<double, SB> RedD;
typedef cub::BlockReduce<unsigned long long, SB> RedU;
typedef cub::BlockReduce<int, SB> RedI;

struct MaxU {
	__device__ __forceinline__ unsigned long long operator()(unsigned long long a,
								 unsigned long long b) const
	{
		return a > b ? a : b;
	}
};

struct SampleSmem {
	union {
		typename SortT::TempStorage sort;
		typename ScanI::TempStorage scani;
		typename ScanD::TempStorage scand;
		typename RedD::TempStorage redd;
		typename RedU::TempStorage redu;
		typename RedI::TempStorage redi;
		double hist[HCOPIES][256]; /* radix_find: one copy per pair of warps */
	} u;
	double d0, d1;
	unsigned long long u0;
	int i0, i1;
	uint32_t key;
};

__device__ __forceinline__ uint32_t fkey(float f)
{
	const uint32_t u = __float_as_uint(f);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float fval(uint32_t k)
{
	return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* max of w (N) over the CTA: as a key pair (larger value, then lower id) -> id; value via w */
__device__ int block_argmax(const float *w, int N, SampleSmem &sm)
{
	unsigned long long best = 0;

	for (int j = threadIdx.x; j < N; j += SB) {
		const unsigned long long k =
			((unsigned long long)fkey(w[j]) << 32) | (uint32_t)(0x7fffffff - j);
		best = k > best ? k : best;
	}
	best = RedU(sm.u.redu).Reduce(best, MaxU());
	if (threadIdx.x == 0)
		sm.u0 = best;
	__syncthreads();
	best = sm.u0;
	__syncthreads();
	return 0x7fffffff - (int)(uint32_t)(best & 0xffffffffu);
}

__device__ double block_sum_d(double v, SampleSmem &sm)
{
	v = RedD(sm.u.redd).Sum(v);
	if (threadIdx.x == 0)
		sm.d0 = v;
	__syncthreads();
	v = sm.d0;
	__syncthreads();
	return v;
}

__device__ int block_sum_i(int v, SampleSmem &sm)
{
	v = RedI(sm.u.redi).Sum(v);
	if (threadIdx.x == 0)
		sm.i0 = v;
	__syncthreads();
	v = sm.i0;
	__syncthreads();
	return v;
}

/* The key K of w (N) with weight(> K) < target <= weight(>= K) (weight 1, or exp(w - mx) when
 * mass); *above = weight(> K). A target over the total weight gives the smallest key seen. */
__device__ uint32_t radix_find(const float *w, int N, bool mass, double mx, double target,
			       double *above, SampleSmem &sm)
{
	uint32_t prefix = 0, mask = 0;
	double acc = 0.0;

	double *h = sm.u.hist[(threadIdx.x >> 5) % HCOPIES];

	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int b = threadIdx.x; b < HCOPIES * 256; b += SB)
			sm.u.hist[b / 256][b % 256] = 0.0;
		__syncthreads();
		for (int j = threadIdx.x; j < N; j += SB) {
			const float v = w[j];
			const uint32_t k = fkey(v);
			if ((k & mask) == prefix && !(mass && v == -INFINITY)) /* -inf: no mass */
				atomicAdd(&h[(k >> shift) & 255u], mass ? exp((double)v - mx) : 1.0);
		}
		__syncthreads();
		for (int b = threadIdx.x; b < 256; b += SB) {
			double t = 0.0;
			for (int c = 0; c < HCOPIES; c++) /* fixed order: the sum is deterministic */
				t += sm.u.hist[c][b];
			sm.u.hist[0][b] = t;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			int sel = -1;
			for (int b = 255; b >= 0 && sel < 0; b--) {
				if (sm.u.hist[0][b] > 0.0 && acc + sm.u.hist[0][b] >= target)
					sel = b;
				else
					acc += sm.u.hist[0][b];
			}
			for (int b = 0; b < 256 && sel < 0; b++) /* over the total: the lowest */
				if (sm.u.hist[0][b] > 0.0) {
					sel = b;
					acc -= sm.u.hist[0][b];
				}
			sel = sel < 0 ? 0 : sel;
			sm.i1 = sel;
			sm.d1 = acc;
		}
		__syncthreads();
		prefix |= (uint32_t)sm.i1 << shift;
		mask |= 255u << shift;
		acc = sm.d1;
		__syncthreads();
	}
	*above = acc;
	return prefix;
}

/* Append, in id order, the j < N with pred(j) to out[*n..], at most cap - *n of them (*n counts
 * all). All threads return the same *n. */
template <typename P>
__device__ void compact(int N, P pred, int32_t *out, int *n, int cap, SampleSmem &sm)
{
	int base = *n;

	for (int t0 = 0; t0 < N; t0 += SB) {
		const int j = t0 + threadIdx.x;
		const int f = j < N && pred(j) ? 1 : 0;
		int r, agg;

		ScanI(sm.u.scani).ExclusiveSum(f, r, agg);
		if (f && base + r < cap)
			out[base + r] = j;
		base += agg;
		__syncthreads();
	}
	*n = base;
}

/* Descending sort of the first n (<= RG_SAMPLE_CAND) ids of cand by (w, then lower id); the
 * first k (<= n) sorted ids written back to cand[0..k). */
__device__ void rerank(const float *w, int32_t *cand, int n, int k, SampleSmem &sm)
{
	unsigned long long keys[SITEMS];

	for (int i = 0; i < SITEMS; i++) {
		const int rnk = threadIdx.x * SITEMS + i;
		keys[i] = 0ull; /* padding: below every real key (fkey(-inf) > 0) */
		if (rnk < n) {
			const int32_t id = cand[rnk];
			keys[i] = ((unsigned long long)fkey(w[id]) << 32) | (uint32_t)~(uint32_t)id;
		}
	}
	__syncthreads();
	SortT(sm.u.sort).SortDescending(keys);
	for (int i = 0; i < SITEMS; i++) {
		const int rnk = threadIdx.x * SITEMS + i;
		if (rnk < k)
			cand[rnk] = (int32_t)~(uint32_t)(keys[i] & 0xffffffffull);
	}
	__syncthreads();
}

/* The k-th largest group maximum (k <= SB, k <= N): LightSeq's R. */
__device__ float group_bound(const float *w, int N, int k, SampleSmem &sm)
{
	unsigned long long keys[SITEMS];
	float mx = -INFINITY;
	bool any = false;

	for (int j = threadIdx.x; j < N; j += SB) {
		mx = fmaxf(mx, w[j]);
		any = true;
	}
	for (int i = 0; i < SITEMS; i++)
		keys[i] = i == 0 && any ? (unsigned long long)fkey(mx) << 32 : 0ull;
	SortT(sm.u.sort).SortDescending(keys, 32, 64);
	for (int i = 0; i < SITEMS; i++)
		if (threadIdx.x * SITEMS + i == k - 1)
			sm.key = (uint32_t)(keys[i] >> 32);
	__syncthreads();
	mx = fval(sm.key);
	__syncthreads();
	return mx;
}

/* The top k (1 <= k <= min(N, SB)) of w (N) by value descending, ties by id: cand[0..k);
 * cand has room for N. Returns the k-th value. */
__device__ float block_topk(const float *w, int N, int k, int32_t *cand, SampleSmem &sm)
{
	const float R = group_bound(w, N, k, sm);
	int n = 0;

	compact(N, [&](int j) { return w[j] >= R; }, cand, &n, N, sm);
	if (n > RG_SAMPLE_CAND) { /* ties: the exact k-th value, then > K and the first ties */
		double above;
		const float K = fval(radix_find(w, N, false, 0.0, (double)k, &above, sm));

		n = 0; /* fewer than k above K, then the ties in id order up to k */
		compact(N, [&](int j) { return w[j] > K; }, cand, &n, N, sm);
		compact(N, [&](int j) { return w[j] == K; }, cand, &n, k, sm);
		n = k;
	}
	rerank(w, cand, n, k, sm);
	return w[cand[k - 1]];
}

/* The k-th largest value of w (N), 1 <= k < N: block_topk's retrieve and rerank for k <= SB,
 * radix_find past it. */
__device__ float block_kth(const float *w, int N, int k, int32_t *cand, SampleSmem &sm)
{
	double above;

	if (k <= SB)
		return block_topk(w, N, k, cand, sm);
	return fval(radix_find(w, N, false, 0.0, (double)k, &above, sm));
}

/* Steps 2-3 of the contract (bias, penalties, the bias clamp; each list in order, with the host's
 * float rounding) on w, which holds the columns [j0, j1) of row r: w[j - j0]; entries for other
 * columns are skipped. One thread (the full algorithm: the whole row); apply_lists_warp is the
 * slices' form of it, with the same float steps. */
__device__ void apply_lists(float *w, int j0, int j1, const rg_sample_args &a,
			    const rg_sample_row &p, int r)
{
	if (a.bias_off)
		for (int e = a.bias_off[r]; e < a.bias_off[r + 1]; e++)
			if (a.bias[e].token >= j0 && a.bias[e].token < j1)
				w[a.bias[e].token - j0] += a.bias[e].bias;
	if (a.pen_off)
		for (int e = a.pen_off[r]; e < a.pen_off[r + 1]; e++) {
			const rg_sample_pen q = a.pen[e];
			float d;
			if (q.token < j0 || q.token >= j1)
				continue;
			d = w[q.token - j0];
			if (p.repetition_penalty != 1.f && (q.count > 0 || q.in_prompt))
				d = d < 0.f ? d * p.repetition_penalty : d / p.repetition_penalty;
			if (q.count > 0) {
				/* no FMA contraction: the host rounds the product */
				d = __fsub_rn(d, __fmul_rn((float)q.count, p.frequency_penalty));
				d = __fsub_rn(d, p.presence_penalty);
			}
			w[q.token - j0] = fminf(d, FLT_MAX);
		}
	if (a.bias_off)
		for (int e = a.bias_off[r]; e < a.bias_off[r + 1]; e++)
			if (a.bias[e].token >= j0 && a.bias[e].token < j1)
				w[a.bias[e].token - j0] = fminf(w[a.bias[e].token - j0], FLT_MAX);
}

/* The whole chain for row r by one CTA of SB threads (the full algorithm above): rows the fast
 * path does not take, and every row when it is off. */
template <typename T>
__device__ void sample_row_full(const T *__restrict__ x, int M, int N, const rg_sample_args &a,
				int r, SampleSmem &sm)
{
	float *w = (float *)a.work + (size_t)r * N;
	int32_t *cand = (int32_t *)((float *)a.work + (size_t)M * N) + (size_t)r * N;
	const T *row = x + (size_t)r * N;
	int id;
	float mx;
	const rg_sample_row p = a.rows[r];
	const bool greedy = !(p.temperature > 0.f);
	/* 1-3: load (NaN -> -inf, never +inf), bias, penalties: one thread, in list order */
	const uint64_t *mk = a.mask ? a.mask + (size_t)r * ((N + 63) / 64) : NULL;
	for (int j = threadIdx.x; j < N; j += SB) {
		const float v = rg_to_f(row[j]);
		w[j] = v != v || (mk && !(mk[j >> 6] >> (j & 63) & 1)) ? -INFINITY : fminf(v, FLT_MAX);
	}
	__syncthreads();
	if (threadIdx.x == 0)
		apply_lists(w, 0, N, a, p, r);
	__syncthreads();
	if (!greedy) {
		if (p.temperature != 1.f) {
			for (int j = threadIdx.x; j < N; j += SB)
				w[j] = fminf(__fdiv_rn(w[j], p.temperature), FLT_MAX);
			__syncthreads();
		}
		if (p.top_k > 0 && p.top_k < N) {
			const float kth = block_kth(w, N, p.top_k, cand, sm);
			for (int j = threadIdx.x; j < N; j += SB)
				if (!(w[j] >= kth))
					w[j] = -INFINITY;
			__syncthreads();
		}
		if (p.top_p < 1.f) {
			mx = w[block_argmax(w, N, sm)];
			if (mx > -INFINITY) {
				double part = 0.0, above, total, P;
				int n_ties, keep = 0;
				for (int j = threadIdx.x; j < N; j += SB)
					if (w[j] > -INFINITY)
						part += exp((double)w[j] - (double)mx);
				total = block_sum_d(part, sm);
				P = (double)p.top_p * total;
				const float K = fval(radix_find(w, N, true, mx, P, &above, sm));
				n_ties = 0;
				for (int j = threadIdx.x; j < N; j += SB)
					n_ties += w[j] == K;
				n_ties = block_sum_i(n_ties, sm);
				if (threadIdx.x == 0) { /* the host's walk over the ties at K */
					const double e = exp((double)K - (double)mx);
					double before = above;
					while (keep < n_ties && (before < P || (keep == 0 && above == 0.0))) {
						before += e;
						keep++;
					}
					sm.i1 = keep;
				}
				__syncthreads();
				keep = sm.i1;
				__syncthreads();
				int base = 0;
				for (int t0 = 0; t0 < N; t0 += SB) {
					const int j = t0 + threadIdx.x;
					const float v = j < N ? w[j] : -INFINITY;
					const int f = j < N && v == K;
					int rk, agg;
					ScanI(sm.u.scani).ExclusiveSum(f, rk, agg);
					if (j < N && (v < K || (f && base + rk >= keep)))
						w[j] = -INFINITY;
					base += agg;
					__syncthreads();
				}
			}
		}
	}
	mx = w[block_argmax(w, N, sm)];
	if (!greedy && p.min_p > 0.f) {
		for (int j = threadIdx.x; j < N; j += SB)
			if (w[j] > -INFINITY && exp((double)w[j] - (double)mx) < (double)p.min_p)
				w[j] = -INFINITY;
		__syncthreads();
	}
	if (!(mx > -INFINITY)) { /* nothing to draw from */
		if (threadIdx.x == 0) {
			a.ids[r] = 0;
			if (a.logprobs)
				a.logprobs[r] = NAN;
		}
		for (int j = threadIdx.x; j < a.top_n; j += SB) {
			a.top_ids[(size_t)r * a.top_n + j] = -1;
			a.top_logprobs[(size_t)r * a.top_n + j] = -INFINITY;
		}
		return;
	}
	/* the draw: contiguous slices, an exclusive scan of their sums, one slice walks */
	const int L = (N + SB - 1) / SB, lo = threadIdx.x * L, hi = min(N, lo + L);
	double s = 0.0, pre, total;
	int last = -1;
	for (int j = lo; j < hi; j++)
		if (w[j] > -INFINITY) {
			s += exp((double)w[j] - (double)mx);
			last = j;
		}
	ScanD(sm.u.scand).ExclusiveSum(s, pre, total);
	__syncthreads();
	if (threadIdx.x == 0) {
		sm.d0 = total;
		sm.i0 = 0x7fffffff;
		sm.i1 = -1;
	}
	__syncthreads();
	total = sm.d0;
	if (greedy) {
		id = block_argmax(w, N, sm);
	} else {
		const double target = p.u * total;
		if (last >= 0)
			atomicMax(&sm.i1, last);
		if (last >= 0 && pre <= target && pre + s > target) {
			double run = pre;
			int pick = last;
			for (int j = lo; j < hi; j++)
				if (w[j] > -INFINITY) {
					run += exp((double)w[j] - (double)mx);
					if (run > target) {
						pick = j;
						break;
					}
				}
			atomicMin(&sm.i0, pick);
		}
		__syncthreads();
		id = sm.i0 != 0x7fffffff ? sm.i0 : sm.i1;
		__syncthreads();
	}
	const double lse = (double)mx + log(total);
	if (threadIdx.x == 0) {
		a.ids[r] = id;
		if (a.logprobs)
			a.logprobs[r] = (float)((double)w[id] - lse);
	}
	if (a.top_n > 0) {
		const int k = a.top_n < N ? a.top_n : N;
		block_topk(w, N, k, cand, sm);
		for (int j = threadIdx.x; j < a.top_n; j += SB) {
			const bool ok = j < k && w[cand[j]] > -INFINITY;
			a.top_ids[(size_t)r * a.top_n + j] = ok ? cand[j] : -1;
			a.top_logprobs[(size_t)r * a.top_n + j] =
				ok ? (float)((double)w[cand[j]] - lse) : -INFINITY;
		}
	}
}

template <typename T>
__global__ void __launch_bounds__(SB)
sample_rows_kernel(const T *__restrict__ x, int M, int N, rg_sample_args a)
{
	__shared__ SampleSmem sm;

	rg_pdl_wait();
	sample_row_full(x, M, N, a, blockIdx.x, sm);
}

/* ---- the fast path: slices, then a merge of their top candidates (see the head comment) ---- */
#define FAST_K 64                            /* largest top_k a sampled row takes it with */
#define FAST_TIES 16                         /* ties past the k-th value a sampled row can hold */
#define FAST_C (FAST_K + 1 + FAST_TIES)      /* candidate slots of a slice: k, its ties, one more */
#define FT1 256                              /* threads of a slice CTA */
#define FAST_SLICE 2048                      /* columns of a slice, as argmax_rows */
#define FAST_W 4096                          /* widest slice (wider rows: more slices) */
#define FAST_IPT1 (FAST_W / FT1)             /* keys per thread of a slice CTA */
#define FAST_IPT2 16                         /* keys per thread of the merge */
#define FAST_SMAX (SB * FAST_IPT2 / FAST_C)  /* 101 slices: S x FAST_C keys fit the merge */

typedef unsigned long long u64;

/* Candidate slots a fast row needs per slice, 0 for a row the full algorithm takes: greedy rows
 * their top_n (at least 1: the argmax), sampled rows with 1 <= top_k <= FAST_K, k + 1 +
 * FAST_TIES (and a min_p within its range [0, 1]: the maximum always survives). */
__device__ __forceinline__ int fast_cands(const rg_sample_row &p, int top_n, int N)
{
	if (!(p.temperature > 0.f))
		return top_n > 1 ? top_n : 1;
	return p.top_k >= 1 && p.top_k <= FAST_K && p.top_k < N && !(p.min_p > 1.f)
		       ? p.top_k + 1 + FAST_TIES
		       : 0;
}

/* (value, id) as one unique key, larger = first in the host's order (value descending, ties by
 * ascending id). -0 is keyed as +0: the host's comparisons hold them equal (ties by id), and no
 * output tells them apart (exp and the log-probs give the same numbers). */
__device__ __forceinline__ u64 fast_key(float v, int j)
{
	return ((u64)fkey(v == 0.f ? 0.f : v) << 32) | (uint32_t)~(uint32_t)j;
}

__device__ __forceinline__ float key_val(u64 k) { return fval((uint32_t)(k >> 32)); }
__device__ __forceinline__ int key_id(u64 k) { return (int)~(uint32_t)k; }

/* A row's slice outputs live in its own part of the workspace (rows the merge hands to the full
 * algorithm overwrite only their own): keys (S, FAST_C) u64 in the row's int32 part, sums (S) f64
 * in its f32 part, each aligned to 8 bytes (the launcher checks that they fit: 4 N - 4 bytes). */
__device__ __forceinline__ u64 *fast_keys(const rg_sample_args &a, int M, int N, int r)
{
	const uintptr_t q = (uintptr_t)((int32_t *)((float *)a.work + (size_t)M * N) + (size_t)r * N);
	return (u64 *)((q + 7) & ~(uintptr_t)7);
}

__device__ __forceinline__ double *fast_sums(const rg_sample_args &a, int N, int r)
{
	const uintptr_t q = (uintptr_t)((float *)a.work + (size_t)r * N);
	return (double *)((q + 7) & ~(uintptr_t)7);
}

/* apply_lists for one warp (a slice CTA's warp 0): the lists read 32 entries at a time, the
 * entries that fall in [j0, j1) applied one after another in list order (the same float steps),
 * so a slice walks a long penalty list (every distinct generated token) in 1/32 of the loads. */
__device__ void apply_lists_warp(float *w, int j0, int j1, const rg_sample_args &a,
				 const rg_sample_row &p, int r)
{
	const int lane = threadIdx.x & 31;

	for (int pass = 0; pass < 3; pass++) { /* bias, penalties, the bias clamp */
		const int32_t *off = pass == 1 ? a.pen_off : a.bias_off;
		if (!off)
			continue;
		const int e1 = off[r + 1];
		for (int b = off[r]; b < e1; b += 32) {
			const int e = b + lane;
			int tok = -1;
			if (e < e1)
				tok = pass == 1 ? a.pen[e].token : a.bias[e].token;
			unsigned hit = __ballot_sync(0xffffffffu, tok >= j0 && tok < j1);
			while (hit) {
				const int src = __ffs(hit) - 1;
				hit &= hit - 1;
				if (lane == src) {
					float *d = &w[tok - j0];
					if (pass == 0) {
						*d += a.bias[e].bias;
					} else if (pass == 2) {
						*d = fminf(*d, FLT_MAX);
					} else {
						const rg_sample_pen q = a.pen[e];
						float v = *d;
						if (p.repetition_penalty != 1.f && (q.count > 0 || q.in_prompt))
							v = v < 0.f ? v * p.repetition_penalty
								    : v / p.repetition_penalty;
						if (q.count > 0) {
							v = __fsub_rn(v, __fmul_rn((float)q.count,
										  p.frequency_penalty));
							v = __fsub_rn(v, p.presence_penalty);
						}
						*d = fminf(v, FLT_MAX);
					}
				}
				__syncwarp();
			}
		}
	}
}

template <int BT> struct TopSmem {
	int hist[256];
	typename cub::BlockScan<int, BT>::TempStorage scan;
	u64 cand[FAST_C];
	u64 wmax[BT / 32];
	int sel, above, done;
};

/* The largest m = min(C, n) of n unique keys (C <= FAST_C) into out[0..m), descending; returns
 * m. Thread t holds the keys at list positions [lo, lo + cnt) in k[0..cnt), the threads' ranges
 * in thread order. An exact radix select on the keys' value halves (4 passes of 8 bits over
 * shared histograms; it stops early when a bin holds exactly the keys still needed) gives the
 * value K of the C-th key; the keys above K and the first ties at K in list order (the lowest
 * ids: list order is id order for equal values, see the callers) are compacted by one block
 * scan, then ranked by comparison. All threads call it; it ends synchronised. */
template <int BT, int IPT>
__device__ int cta_top(const u64 (&k)[IPT], int lo, int cnt, int n, int C, u64 *out,
		       TopSmem<BT> &ts)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int m = C < n ? C : n;

	if (m == 1) { /* the largest key */
		u64 b = 0;
#pragma unroll
		for (int i = 0; i < IPT; i++)
			if (i < cnt)
				b = k[i] > b ? k[i] : b;
		for (int o = 16; o > 0; o >>= 1) {
			const u64 y = __shfl_xor_sync(0xffffffffu, b, o);
			b = y > b ? y : b;
		}
		if (lane == 0)
			ts.wmax[warp] = b;
		__syncthreads();
		if (threadIdx.x == 0) {
			b = ts.wmax[0];
			for (int w = 1; w < BT / 32; w++)
				b = ts.wmax[w] > b ? ts.wmax[w] : b;
			out[0] = b;
		}
		__syncthreads();
		return 1;
	}
	if (C >= n) { /* every key is a candidate */
#pragma unroll
		for (int i = 0; i < IPT; i++)
			if (i < cnt)
				ts.cand[lo + i] = k[i];
	} else {
		uint32_t prefix = 0, mask = 0;
		int above = 0;

		for (int shift = 24; shift >= 0; shift -= 8) {
			for (int b = threadIdx.x; b < 256; b += BT)
				ts.hist[b] = 0;
			if (threadIdx.x == 0)
				ts.done = 0;
			__syncthreads();
#pragma unroll
			for (int i = 0; i < IPT; i++) {
				const uint32_t h = (uint32_t)(k[i] >> 32);
				if (i < cnt && (h & mask) == prefix)
					atomicAdd(&ts.hist[(h >> shift) & 255u], 1);
			}
			__syncthreads();
			if (warp == 0) { /* bins high to low, 8 a lane: the bin holding the need-th key */
				const int need = C - above;
				int c8 = 0, incl;
				for (int q = 0; q < 8; q++)
					c8 += ts.hist[255 - lane * 8 - q];
				incl = c8;
				for (int o = 1; o < 32; o <<= 1) {
					const int y = __shfl_up_sync(0xffffffffu, incl, o);
					incl += lane >= o ? y : 0;
				}
				if (incl - c8 < need && need <= incl) {
					int acc = incl - c8;
					for (int q = 0; q < 8; q++) {
						const int b = 255 - lane * 8 - q;
						if (acc + ts.hist[b] >= need) {
							ts.sel = b;
							ts.above = above + acc;
							ts.done = acc + ts.hist[b] == need;
							break;
						}
						acc += ts.hist[b];
					}
				}
			}
			__syncthreads();
			prefix |= (uint32_t)ts.sel << shift;
			mask |= 255u << shift;
			above = ts.above;
			if (ts.done) /* the bin holds exactly the keys still needed: take it whole */
				break;
		}
		/* keys above the bin, then the bin's keys in list order up to C (all of them when done) */
		int gt = 0, eq = 0, pre;
#pragma unroll
		for (int i = 0; i < IPT; i++) {
			const uint32_t h = (uint32_t)(k[i] >> 32) & mask;
			gt += i < cnt && h > prefix;
			eq += i < cnt && h == prefix;
		}
		cub::BlockScan<int, BT>(ts.scan).ExclusiveSum(gt | eq << 16, pre);
		gt = pre & 0xffff;
		eq = above + (pre >> 16);
#pragma unroll
		for (int i = 0; i < IPT; i++) {
			const uint32_t h = (uint32_t)(k[i] >> 32) & mask;
			if (i < cnt && h > prefix)
				ts.cand[gt++] = k[i];
			else if (i < cnt && h == prefix && eq < C)
				ts.cand[eq++] = k[i];
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; i < m; i += BT) {
		const u64 me = ts.cand[i];
		int rk = 0;
		for (int j = 0; j < m; j++)
			rk += ts.cand[j] > me;
		out[rk] = me;
	}
	__syncthreads();
	return m;
}

/* Stage 1, grid (M, S), FT1 threads: the CTA (r, s) loads columns [s W, s W + W) of row r (NaN ->
 * -inf, never +inf), applies the bias and penalty entries that fall in them (apply_lists_warp)
 * and, for sampled rows, the temperature; writes the slice's top C keys (C = fast_cands; slots
 * past the slice's width hold 0, below every key) and, for greedy rows, the slice's sum of
 * exp(l - slice max) in float64. Rows the fast path does not take return at once. */
template <typename T>
__global__ void __launch_bounds__(FT1)
sample_slice_kernel(const T *__restrict__ x, int M, int N, rg_sample_args a, int W)
{
	__shared__ float sv[FAST_W];
	__shared__ TopSmem<FT1> ts;
	__shared__ u64 top[FAST_C];
	__shared__ double part[FT1 / 32];
	const int r = blockIdx.x, s = blockIdx.y;
	const int j0 = s * W, j1 = min(N, j0 + W), n = j1 - j0;
	const T *row = x + (size_t)r * N;

	rg_pdl_wait();
	const rg_sample_row p = a.rows[r];
	const int C = fast_cands(p, a.top_n, N);
	const bool greedy = !(p.temperature > 0.f);
	if (C == 0)
		return;
	const uint64_t *mk = a.mask ? a.mask + (size_t)r * ((N + 63) / 64) : NULL;
	for (int j = threadIdx.x; j < n; j += FT1) {
		const int c = j0 + j;
		const float v = rg_to_f(row[c]);
		sv[j] = v != v || (mk && !(mk[c >> 6] >> (c & 63) & 1)) ? -INFINITY
									: fminf(v, FLT_MAX);
	}
	__syncthreads();
	if (threadIdx.x < 32)
		apply_lists_warp(sv, j0, j1, a, p, r);
	__syncthreads();
	/* thread t: the contiguous columns [lo, lo + cnt) of the slice, as keys in registers */
	const int ipt = (n + FT1 - 1) / FT1, lo = min(n, (int)threadIdx.x * ipt),
		  cnt = min(n - lo, ipt);
	const bool scale = !greedy && p.temperature != 1.f;
	u64 k[FAST_IPT1];
#pragma unroll
	for (int i = 0; i < FAST_IPT1; i++) {
		float v = i < cnt ? sv[lo + i] : 0.f;
		if (scale)
			v = fminf(__fdiv_rn(v, p.temperature), FLT_MAX);
		k[i] = i < cnt ? fast_key(v, j0 + lo + i) : 0ull;
	}
	const int m = cta_top<FT1, FAST_IPT1>(k, lo, cnt, n, C, top, ts);
	u64 *ko = fast_keys(a, M, N, r) + (size_t)s * FAST_C;
	for (int i = threadIdx.x; i < C; i += FT1)
		ko[i] = i < m ? top[i] : 0ull;
	if (greedy) { /* sum of exp(l - slice max), float64, for the row's log-sum-exp */
		const float mx = key_val(top[0]);
		double sum = 0.0;
#pragma unroll
		for (int i = 0; i < FAST_IPT1; i++) {
			const float v = key_val(k[i]);
			if (i < cnt && v > -INFINITY)
				sum += exp((double)v - (double)mx);
		}
		for (int o = 16; o > 0; o >>= 1)
			sum += __shfl_xor_sync(0xffffffffu, sum, o);
		if ((threadIdx.x & 31) == 0)
			part[threadIdx.x >> 5] = sum;
		__syncthreads();
		if (threadIdx.x == 0) {
			sum = 0.0;
			for (int w = 0; w < FT1 / 32; w++)
				sum += part[w];
			fast_sums(a, N, r)[s] = sum;
		}
	}
}

struct MergeSmem {
	TopSmem<SB> ts;
	u64 top[FAST_C];      /* the row's top C keys, descending */
	double e[FAST_C];     /* exp(l - l_max) of the top k */
	double term[FAST_SMAX];
	int pos[FAST_C];      /* the survivors in ascending id order (indices into top) */
	int keep;
	double lse;
};

/* Stage 2 for a fast row r (C = fast_cands): the S slices' keys merged (cta_top over S x C keys;
 * equal values appear in id order in that list: slices are id ranges, each sorted), then
 *  - greedy: the id of the largest key; lse from the slice maxima and sums; top_n the first keys;
 *  - sampled (k = top_k): the survivors are the keys >= the k-th value (its ties stay); when they
 *    may not all be among the merged keys (C of them tie or exceed it, a slice's list is full of
 *    them, or the k-th is -inf) returns false and the caller runs the full algorithm. Else they
 *    are the first K keys, already in the host's sorted order: top-p's total and walk in that
 *    order, min-p, then the draw over the survivors in ascending id order (one thread, <= 80
 *    terms: the host's summation orders exactly).
 * Returns true when the row's outputs are written. All threads; uniform result. */
__device__ bool fast_row(int M, int N, const rg_sample_args &a, int r, const rg_sample_row &p,
			 int C, int S, MergeSmem &sm)
{
	const u64 *kin = fast_keys(a, M, N, r);
	const int n = S * C, ipt = (n + SB - 1) / SB, lo = min(n, (int)threadIdx.x * ipt),
		  cnt = min(n - lo, ipt), tn = a.top_n;
	u64 k[FAST_IPT2];

#pragma unroll
	for (int i = 0; i < FAST_IPT2; i++)
		k[i] = i < cnt ? kin[(size_t)((lo + i) / C) * FAST_C + (lo + i) % C] : 0ull;
	const int m = cta_top<SB, FAST_IPT2>(k, lo, cnt, n, C, sm.top, sm.ts);
	const float mx = key_val(sm.top[0]);

	if (!(mx > -INFINITY)) /* a row of -inf: greedy (a sampled row has a tie at -inf) */
		return false;
	if (!(p.temperature > 0.f)) {
		const double *sums = fast_sums(a, N, r);
		for (int s = threadIdx.x; s < S; s += SB) {
			const float ms = key_val(kin[(size_t)s * FAST_C]);
			sm.term[s] = ms > -INFINITY ? sums[s] * exp((double)ms - (double)mx) : 0.0;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			double total = 0.0;
			for (int s = 0; s < S; s++)
				total += sm.term[s];
			sm.lse = (double)mx + log(total);
			a.ids[r] = key_id(sm.top[0]);
			if (a.logprobs)
				a.logprobs[r] = (float)((double)mx - sm.lse);
		}
		__syncthreads();
		for (int j = threadIdx.x; j < tn; j += SB) {
			const bool ok = j < m && key_val(sm.top[j]) > -INFINITY;
			a.top_ids[(size_t)r * tn + j] = ok ? key_id(sm.top[j]) : -1;
			a.top_logprobs[(size_t)r * tn + j] =
				ok ? (float)((double)key_val(sm.top[j]) - sm.lse) : -INFINITY;
		}
		return true;
	}
	/* top-k keeps every value equal to the k-th (fp16 logits tie often): the survivors are the
	 * merged keys >= it, when they are all here: fewer than C of them, and no slice's list full
	 * of keys >= it (its C-th key below it; a short slice pads with keys below everything) */
	const float kv = key_val(sm.top[p.top_k - 1]);
	int K = p.top_k;
	if (!(kv > -INFINITY)) /* a k-th of -inf: ties among the -inf */
		return false;
	while (K < m && key_val(sm.top[K]) == kv)
		K++;
	if (threadIdx.x == 0)
		sm.keep = K < C;
	__syncthreads();
	for (int s = threadIdx.x; s < S; s += SB)
		if (key_val(kin[(size_t)s * FAST_C + C - 1]) >= kv)
			sm.keep = 0;
	__syncthreads();
	if (!sm.keep)
		return false;
	__syncthreads();
	for (int i = threadIdx.x; i < K; i += SB)
		sm.e[i] = exp((double)key_val(sm.top[i]) - (double)mx);
	__syncthreads();
	if (threadIdx.x == 0) { /* top-p: the host's walk, its total in sorted order */
		int keep = K;
		if (p.top_p < 1.f && K > 1) {
			double total = 0.0, before = 0.0;
			for (int i = 0; i < K; i++)
				total += sm.e[i];
			keep = 0;
			while (keep < K && (keep == 0 || before < (double)p.top_p * total))
				before += sm.e[keep++];
		}
		sm.keep = keep;
	}
	__syncthreads();
	/* min-p (the maximum stays: e = 1), then each survivor's place in id order */
	const int keep = sm.keep;
	const bool mp = p.min_p > 0.f;
	const double minp = (double)p.min_p;
	for (int i = threadIdx.x; i < keep; i += SB) {
		const int id = key_id(sm.top[i]);
		int rk = 0;
		if (mp && sm.e[i] < minp)
			continue;
		for (int j = 0; j < keep; j++)
			rk += !(mp && sm.e[j] < minp) && key_id(sm.top[j]) < id;
		sm.pos[rk] = i;
	}
	__syncthreads();
	if (threadIdx.x == 0) { /* the draw in ascending id order; total and lse in that order */
		int na = 0, pick;
		double total = 0.0, run = 0.0, target;
		for (int j = 0; j < keep; j++)
			na += !(mp && sm.e[j] < minp);
		for (int q = 0; q < na; q++)
			total += sm.e[sm.pos[q]];
		target = p.u * total;
		pick = sm.pos[na - 1];
		for (int q = 0; q < na; q++) {
			run += sm.e[sm.pos[q]];
			if (run > target) {
				pick = sm.pos[q];
				break;
			}
		}
		sm.lse = (double)mx + log(total);
		a.ids[r] = key_id(sm.top[pick]);
		if (a.logprobs)
			a.logprobs[r] = (float)((double)key_val(sm.top[pick]) - sm.lse);
		sm.keep = na;
	}
	__syncthreads();
	/* top_n: the survivors by value (top's order), -1 / -inf past them */
	const int na = sm.keep;
	for (int i = threadIdx.x; i < keep; i += SB) {
		int vr = 0;
		if (mp && sm.e[i] < minp)
			continue;
		for (int j = 0; j < i; j++)
			vr += !(mp && sm.e[j] < minp);
		if (vr < tn) {
			a.top_ids[(size_t)r * tn + vr] = key_id(sm.top[i]);
			a.top_logprobs[(size_t)r * tn + vr] =
				(float)((double)key_val(sm.top[i]) - sm.lse);
		}
	}
	for (int j = na + threadIdx.x; j < tn; j += SB) {
		a.top_ids[(size_t)r * tn + j] = -1;
		a.top_logprobs[(size_t)r * tn + j] = -INFINITY;
	}
	return true;
}

/* Stage 2, one CTA of SB threads per row: fast_row for the rows stage 1 took, the full algorithm
 * (sample_row_full) for the others and for the rows fast_row hands back. */
template <typename T>
__global__ void __launch_bounds__(SB)
sample_merge_kernel(const T *__restrict__ x, int M, int N, rg_sample_args a, int S)
{
	__shared__ union {
		SampleSmem full;
		MergeSmem fast;
	} sm;
	const int r = blockIdx.x;

	rg_pdl_wait();
	const rg_sample_row p = a.rows[r];
	const int C = fast_cands(p, a.top_n, N);
	if (C > 0 && fast_row(M, N, a, r, p, C, S, sm.fast))
		return;
	__syncthreads(); /* sm.fast is done with: sm.full reuses it */
	sample_row_full(x, M, N, a, r, sm.full);
}

/* RAGGED_SAMPLE_FAST=0 turns the fast path off (every row takes the full algorithm: A/B runs, a
 * fallback). Read at every call (a getenv is noise next to a launch; core/tuning.c), so a test
 * or a benchmark can switch it in one process; a captured graph keeps the choice made at
 * capture. */
static bool sample_fast_on(void)
{
	return rg_tuning_bool(RG_TUNE_SAMPLE_FAST);
}

/* The fast path's slices of a row of N columns: S slices of W columns, every one non-empty,
 * about FAST_SLICE wide (at most FAST_SMAX of them, at most FAST_W wide); 0 when it does not
 * apply: rows too wide, or too short for a row's slice outputs to fit its 4 N bytes of workspace
 * (N under ~140: those rows gain nothing from slices anyway). */
static int fast_slices(int N, int *W)
{
	int S = (N + FAST_SLICE - 1) / FAST_SLICE, w;

	S = S < FAST_SMAX ? S : FAST_SMAX;
	w = (N + S - 1) / S;
	S = (N + w - 1) / w;
	if (w > FAST_W || (size_t)S * FAST_C * sizeof(u64) + 8 > (size_t)N * 4)
		return 0;
	*W = w;
	return S;
}

extern "C" rg_status rg_cuda_sample_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
					 const rg_sample_args *a)
{
	rg_status st;
	cudaError_t e;
	int S = 0, W = 0;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "sample_rows: unknown dtype %d", (int)dt);
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	if (sample_fast_on())
		S = fast_slices(N, &W);
	if (S == 0) {
#define LAUNCH(T) rg_launch(c, sample_rows_kernel<T>, dim3(M), dim3(SB), 0, (const T *)x, M, N, *a)
		e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
		return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "sample_rows_kernel launch");
	}
#define LAUNCH(T)                                                                                \
	rg_launch(c, sample_slice_kernel<T>, dim3(M, S), dim3(FT1), 0, (const T *)x, M, N, *a, W)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	if (e != cudaSuccess)
		return rg_cuda_err(e, "sample_slice_kernel launch");
#define LAUNCH(T)                                                                                \
	rg_launch(c, sample_merge_kernel<T>, dim3(M), dim3(SB), 0, (const T *)x, M, N, *a, S)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "sample_merge_kernel launch");
}

/* ---- rg_op_topk_rows ---- */
template <typename T>
__global__ void __launch_bounds__(SB)
topk_hier_kernel(const T *__restrict__ x, int M, int N, int k, float *work, int32_t *idx,
		 float *val)
{
	__shared__ SampleSmem sm;
	const int r = blockIdx.x;
	float *w = work + (size_t)r * N;
	int32_t *cand = (int32_t *)(work + (size_t)M * N) + (size_t)r * N;
	const T *row = x + (size_t)r * N;

	rg_pdl_wait();
	for (int j = threadIdx.x; j < N; j += SB)
		w[j] = rg_to_f(row[j]);
	__syncthreads();
	block_topk(w, N, k, cand, sm);
	for (int j = threadIdx.x; j < k; j += SB) {
		idx[(size_t)r * k + j] = cand[j];
		if (val)
			val[(size_t)r * k + j] = w[cand[j]];
	}
}

/* keys (M N) f32 from x, values 0..N-1 per row, offsets (M + 1) */
template <typename T>
__global__ void topk_sort_prep(const T *__restrict__ x, int M, int N, float *keys, int32_t *vals,
			       int32_t *off)
{
	const size_t n = (size_t)M * N;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		keys[i] = rg_to_f(x[i]);
		vals[i] = (int32_t)(i % (size_t)N);
	}
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i <= (size_t)M;
	     i += (size_t)gridDim.x * blockDim.x)
		off[i] = (int32_t)(i * (size_t)N);
}

__global__ void topk_sort_take(const float *keys, const int32_t *vals, int N, int k, int32_t *idx,
			       float *val)
{
	const int r = blockIdx.x;

	for (int j = threadIdx.x; j < k; j += blockDim.x) {
		idx[(size_t)r * k + j] = vals[(size_t)r * N + j];
		if (val)
			val[(size_t)r * k + j] = keys[(size_t)r * N + j];
	}
}

extern "C" rg_status rg_cuda_topk_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
				       int k, rg_topk_method method, void *work, int32_t *idx,
				       float *val)
{
	const size_t n = (size_t)M * N;
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "topk_rows: unknown dtype %d", (int)dt);
	if ((size_t)N * M > (size_t)INT32_MAX)
		return rg_errorf(RG_ERR_INVALID_INPUT, "topk_rows: %d x %d is over 2^31", M, N);
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	if (method == RG_TOPK_HIER && k <= SB && k <= N) {
#define LAUNCH(T)                                                                                \
	rg_launch(c, topk_hier_kernel<T>, dim3(M), dim3(SB), 0, (const T *)x, M, N, k,          \
		  (float *)work, idx, val)
		e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
		return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "topk_hier_kernel launch");
	}
	/* a full stable sort of every row (CUB), then the first k: RG_TOPK_SORT, and k > SB */
	{
		float *keys = (float *)work, *keys_out = keys + n;
		int32_t *vals = (int32_t *)(keys_out + n), *vals_out = vals + n;
		int32_t *off = vals_out + n;
		char *tmp = (char *)(((uintptr_t)(off + M + 1) + 255) & ~(uintptr_t)255);
		const size_t have = rg_topk_work_bytes(M, N) - (size_t)(tmp - (char *)work);
		size_t need = 0;
		const int grid = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);

		e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
			nullptr, need, keys, keys_out, vals, vals_out, (int)n, M, off, off + 1, 0, 32,
			c->stream);
		if (e != cudaSuccess)
			return rg_cuda_err(e, "topk_rows: CUB temporary storage query");
		if (need > have)
			return rg_errorf(RG_ERR_INTERNAL, "topk_rows: CUB wants %zu bytes, %zu left",
					 need, have);
#define LAUNCH(T)                                                                                \
	(topk_sort_prep<T><<<grid, 256, 0, c->stream>>>((const T *)x, M, N, keys, vals, off),    \
	 cudaGetLastError())
		e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
		if (e != cudaSuccess)
			return rg_cuda_err(e, "topk_sort_prep launch");
		e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
			tmp, need, keys, keys_out, vals, vals_out, (int)n, M, off, off + 1, 0, 32,
			c->stream);
		if (e != cudaSuccess)
			return rg_cuda_err(e, "topk_rows: CUB segmented sort");
		topk_sort_take<<<M, 256, 0, c->stream>>>(keys_out, vals_out, N, k, idx, val);
		e = cudaGetLastError();
		return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "topk_sort_take launch");
	}
}
