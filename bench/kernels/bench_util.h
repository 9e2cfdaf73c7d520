/* Helpers of the CUDA kernel benchmarks (gemv_bench.c, qgemv_bench.c): a monotonic clock, a
 * comparison for qsort of doubles, and the device-to-device copy ceiling. Header-only (static
 * functions): each benchmark is one translation unit. */
#ifndef RG_BENCH_KERNELS_BENCH_UTIL_H
#define RG_BENCH_KERNELS_BENCH_UTIL_H
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <time.h>

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

#endif
