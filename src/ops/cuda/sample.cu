/* Sampling and top-k on the device: rg_op_sample_rows and rg_op_topk_rows (src/ops/ops.h has the
 * contracts; src/ops/cpu/sample_cpu.c is the CPU twin). One CTA of SB = RG_SAMPLE_GROUPS threads
 * per row; the row's processed logits live in the workspace (f32, L2-resident for one row).
 *
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
 * one SM of 132): a row split over several CTAs is the next step if the benchmark shows it.
 * Float64 sums run in another order than the host chain's: a draw or a top-p cut within rounding
 * (~1e-16 relative) of a boundary may differ from the CPU twin; nothing else does. */
#include <cub/cub.cuh>
#include <float.h>
#include <math.h>

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

template <typename T>
__global__ void __launch_bounds__(SB)
sample_rows_kernel(const T *__restrict__ x, int M, int N, rg_sample_args a)
{
	__shared__ SampleSmem sm;
	const int r = blockIdx.x;
	float *w = (float *)a.work + (size_t)r * N;
	int32_t *cand = (int32_t *)((float *)a.work + (size_t)M * N) + (size_t)r * N;
	const T *row = x + (size_t)r * N;
	int id;
	float mx;

	rg_pdl_wait();
	const rg_sample_row p = a.rows[r];
	const bool greedy = !(p.temperature > 0.f);
	/* 1-3: load (NaN -> -inf, never +inf), bias, penalties: one thread, in list order */
	for (int j = threadIdx.x; j < N; j += SB) {
		const float v = rg_to_f(row[j]);
		w[j] = v != v ? -INFINITY : fminf(v, FLT_MAX);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		if (a.bias_off)
			for (int e = a.bias_off[r]; e < a.bias_off[r + 1]; e++)
				if (a.bias[e].token >= 0 && a.bias[e].token < N)
					w[a.bias[e].token] += a.bias[e].bias;
		if (a.pen_off)
			for (int e = a.pen_off[r]; e < a.pen_off[r + 1]; e++) {
				const rg_sample_pen q = a.pen[e];
				float d;
				if (q.token < 0 || q.token >= N)
					continue;
				d = w[q.token];
				if (p.repetition_penalty != 1.f && (q.count > 0 || q.in_prompt))
					d = d < 0.f ? d * p.repetition_penalty
						    : d / p.repetition_penalty;
				if (q.count > 0) {
					/* no FMA contraction: the host rounds the product */
					d = __fsub_rn(d, __fmul_rn((float)q.count,
								  p.frequency_penalty));
					d = __fsub_rn(d, p.presence_penalty);
				}
				w[q.token] = fminf(d, FLT_MAX);
			}
		if (a.bias_off)
			for (int e = a.bias_off[r]; e < a.bias_off[r + 1]; e++)
				if (a.bias[e].token >= 0 && a.bias[e].token < N)
					w[a.bias[e].token] = fminf(w[a.bias[e].token], FLT_MAX);
	}
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

extern "C" rg_status rg_cuda_sample_rows(rg_cuda_ctx *c, rg_dtype dt, const void *x, int M, int N,
					 const rg_sample_args *a)
{
	rg_status st;
	cudaError_t e;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "sample_rows: unknown dtype %d", (int)dt);
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
#define LAUNCH(T) rg_launch(c, sample_rows_kernel<T>, dim3(M), dim3(SB), 0, (const T *)x, M, N, *a)
	e = RG_CUDA_DISPATCH_DT(dt, LAUNCH);
#undef LAUNCH
	return e == cudaSuccess ? RG_OK : rg_cuda_err(e, "sample_rows_kernel launch");
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
