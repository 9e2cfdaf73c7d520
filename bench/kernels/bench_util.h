/* Helpers of the CUDA kernel benchmarks (gemv_bench.c, qgemv_bench.c): a monotonic clock, a
 * comparison for qsort of doubles, and the device-to-device copy ceiling. Header-only (static
 * functions): each benchmark is one translation unit. */
#ifndef RG_BENCH_KERNELS_BENCH_UTIL_H
#define RG_BENCH_KERNELS_BENCH_UTIL_H
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "ops/ops.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Device-to-device copy of 1 GiB, bytes read + written per second (median of 5). */
static double copy_gbs(void)
{
	const size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	double t[5];

	if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
		(void)cudaGetLastError();
		cudaFree(a);
		return 0;
	}
	cudaMemset(a, 1, n);
	cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
	cudaDeviceSynchronize();
	for (int r = 0; r < 5; r++) {
		double t0 = now_s();
		cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
		cudaDeviceSynchronize();
		t[r] = now_s() - t0;
	}
	cudaFree(a);
	cudaFree(b);
	qsort(t, 5, sizeof(double), cmp_d);
	return 2.0 * n / t[2] / 1e9;
}


#define BENCH_MAX_REPS 21
#define BENCH_TARGET_S 4e-3 /* one timed repeat: G launches of about this long */

/* One call of a benchmark: copy i (0 <= i < S) of its weight. */
typedef rg_status (*bench_call_fn)(rg_backend *be, void *ctx, int i);

/* Median seconds per call: one eager call (warm-up, cuBLASLt's autotuning), the S calls
 * captured in one CUDA graph, one warm launch, then reps repeats (<= BENCH_MAX_REPS) of G
 * launches (G sized so a repeat lasts about BENCH_TARGET_S) timed around launch x G + sync:
 * total / (S G). < 0 on failure, with the status in *st (the graph freed). */
static double bench_time_graph(rg_backend *be, bench_call_fn call, void *ctx, int S, int reps,
			       rg_status *st)
{
	rg_graph *g = NULL;
	double t[BENCH_MAX_REPS], t0 = 0;
	int G;

	*st = call(be, ctx, 0);
	if (*st == RG_OK)
		*st = rg_backend_sync(be);
	if (*st == RG_OK)
		*st = rg_backend_capture_begin(be);
	if (*st == RG_OK) {
		rg_status st2 = RG_OK;
		for (int i = 0; i < S && st2 == RG_OK; i++)
			st2 = call(be, ctx, i);
		*st = rg_backend_capture_end(be, &g);
		if (*st == RG_OK)
			*st = st2;
	}
	if (*st == RG_OK) {
		t0 = now_s();
		*st = rg_backend_graph_launch(be, g);
		if (*st == RG_OK)
			*st = rg_backend_sync(be);
	}
	if (*st != RG_OK) {
		rg_backend_graph_free(be, g);
		return -1;
	}
	G = (int)(BENCH_TARGET_S / (now_s() - t0 + 1e-9));
	G = G < 2 ? 2 : G > 200 ? 200 : G;
	reps = reps < 1 ? 1 : reps > BENCH_MAX_REPS ? BENCH_MAX_REPS : reps;
	for (int r = 0; r < reps; r++) {
		t0 = now_s();
		for (int i = 0; i < G; i++)
			rg_backend_graph_launch(be, g);
		rg_backend_sync(be);
		t[r] = (now_s() - t0) / ((double)G * S);
	}
	rg_backend_graph_free(be, g);
	qsort(t, (size_t)reps, sizeof(double), cmp_d);
	return t[reps / 2];
}
#endif
