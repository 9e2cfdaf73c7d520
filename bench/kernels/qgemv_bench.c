/* Kernel benchmark of the decode GEMMs on GGUF-quantized weights (issue 30 item 1;
 * src/ops/cuda/qgemv.cu): qmv_kernel (int8 dp4a, M <= 4), the tensor-core kernel that dequantizes
 * in registers (rg_cuda_qmv_set(false), as RAGGED_QMV=0) and ragged's fp16 small-M kernel on the
 * dense fp16 weight of the same shape (gemv.cu), on Llama-3.2-1B's and Llama-3-8B's layer GEMMs
 * and the 1B LM head, Q8_0 / Q4_0 / Q4_K / Q6_K, M in {1, 2, 4}, fp16 activations. "qmv" is
 * the default dispatch (the tensor-core kernel where qmv_kernel does not take the shape).
 * --sweep adds qmv_kernel at 2, 8 and 16 CTAs per SM (rg_cuda_qmv_tune; default 4).
 *
 * Method as bench/kernels/gemv_bench.c (STYLE.md rule 10): S copies of W, together >= 128 MB
 * (> 2 x the H200's L2, so every call streams W from HBM as a decode step does), S calls in one
 * CUDA graph, G timed launches, time per call = total / (S G), the median of --reps. "GB/s" is
 * the weight's bytes (the file's: N K x block bytes / block values) per second, against the
 * device-to-device copy rate of the same run. The blocks are random bytes with their fp16 scales
 * set to small values (timing does not depend on the values).
 * Usage: make CUDA=1 build/bench_qgemv && build/bench_qgemv [--reps N] [--sweep] [--commit SHA]
 * Exit: 0; 1 if a call failed; 77 without a CUDA device. */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/gguf.h"
#include "ops/ops.h"
#include "bench_util.h"
#include "ops/cuda/qgemv.cuh"

#define ROT_BYTES (128.0 * 1024 * 1024)
#define MAX_S 1024

typedef struct shape {
	const char *model, *name;
	int N, K;
} shape;

static const shape SHAPES[] = {
	{ "llama-1b", "qkv", 3072, 2048 },   { "llama-1b", "o", 2048, 2048 },
	{ "llama-1b", "gate_up", 16384, 2048 }, { "llama-1b", "down", 2048, 8192 },
	{ "llama-1b", "lm_head", 128256, 2048 }, { "llama-8b", "qkv", 6144, 4096 },
	{ "llama-8b", "gate_up", 28672, 4096 }, { "llama-8b", "down", 4096, 14336 },
};
#define N_SHAPES ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))
static const int TYPES[] = { RG_GGUF_Q8_0, RG_GGUF_Q4_0, RG_GGUF_Q4_K, RG_GGUF_Q6_K };
static const int MS[] = { 1, 2, 4 };
static int g_failed;




typedef struct bufs {
	void *A, *out, *W[MAX_S];
	int S;
} bufs;

struct call_ctx {
	const bufs *b;
	int M, N, K;
};

static rg_status call_i(rg_backend *be, void *ctx, int i)
{
	const struct call_ctx *c = ctx;

	return rg_op_gemm(be, c->b->A, c->b->W[i], c->b->out, c->M, c->N, c->K);
}

/* Median seconds per call of S calls (one per copy) in one graph (bench_util.h); < 0 on
 * failure (printed). */
static double time_calls(rg_backend *be, const bufs *b, int M, int N, int K, int reps)
{
	struct call_ctx c = { b, M, N, K };
	rg_status st;
	double sec = bench_time_graph(be, call_i, &c, b->S, reps, &st);

	if (sec < 0) {
		fprintf(stderr, "N=%d K=%d M=%d: %s: %s\n", N, K, M, rg_status_name(st),
			rg_last_error());
		g_failed = 1;
	}
	return sec;
}

static size_t qbytes(int type, int N, int K)
{
	const int vals = type == RG_GGUF_Q4_K || type == RG_GGUF_Q6_K ? 256 : 32;
	return (size_t)N * (size_t)(K / vals) * rg_cuda_qtype_block_bytes(type);
}

/* Random blocks with each fp16 scale field set to 2^-10 (finite, small). */
static void fill_blocks(unsigned char *p, size_t bytes, int type)
{
	const size_t bb = rg_cuda_qtype_block_bytes(type);
	uint32_t x = 2463534242u;

	for (size_t i = 0; i < bytes; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		p[i] = (unsigned char)x;
	}
	for (size_t b = 0; b + bb <= bytes; b += bb) {
		const unsigned char h[2] = { 0x00, 0x14 }; /* 2^-10 */
		const size_t off = type == RG_GGUF_Q6_K ? 208 : 0;
		memcpy(p + b + off, h, 2);
		if (type == RG_GGUF_Q4_1 || type == RG_GGUF_Q4_K)
			memcpy(p + b + 2, h, 2);
	}
}

static void print_row(const shape *s, int type, int M, const char *mode, double sec, size_t wb,
		      double ceil_gbs)
{
	if (sec <= 0)
		return;
	printf("| %s | %s | %d x %d | %s | %d | %s | %.2f us | %.0f | %.0f%% |\n", s->model, s->name,
	       s->N, s->K, type < 0 ? "F16" : rg_gguf_type_name((uint32_t)type), M, mode, sec * 1e6,
	       wb / sec / 1e9, 100.0 * wb / sec / 1e9 / ceil_gbs);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *commit = getenv("RAGGED_COMMIT");
	int reps = 5, sweep = 0;
	rg_backend *be = NULL;
	struct cudaDeviceProp prop;
	double ceil_gbs;
	char date[32];
	time_t tnow = time(NULL);

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--commit") && i + 1 < argc)
			commit = argv[++i];
		else if (!strcmp(argv[i], "--sweep"))
			sweep = 1;
		else {
			fprintf(stderr, "usage: bench_qgemv [--reps N] [--sweep] [--commit SHA]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > BENCH_MAX_REPS)
		reps = 5;
	if (!commit || !commit[0])
		commit = "unknown";
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&tnow));
	if (rg_backend_init(RG_DEVICE_CUDA, 0, RG_DTYPE_F16, &be) != RG_OK ||
	    cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
		printf("no CUDA device: skipped (%s)\n", rg_last_error());
		return 77;
	}
	ceil_gbs = copy_gbs();
	printf("%s, %d SMs, fp16, commit %s, %s; copy ceiling %.0f GB/s\n", prop.name,
	       prop.multiProcessorCount, commit, date, ceil_gbs);
	printf("| model | GEMM | N x K | weight | M | kernel | time/call | weight GB/s | %% of copy |\n");
	printf("|---|---|---|---|---|---|---|---|---|\n");
	for (int si = 0; si < N_SHAPES; si++) {
		const shape *s = &SHAPES[si];
		float *h = malloc((size_t)4 * s->K * sizeof(float));
		bufs b;

		memset(&b, 0, sizeof(b));
		for (int i = 0; i < 4 * s->K; i++)
			h[i] = (float)((i * 2654435761u) % 2001) / 1000.f - 1.f;
		if (rg_backend_alloc(be, (size_t)4 * s->K * 2, &b.A) != RG_OK ||
		    rg_backend_alloc(be, (size_t)4 * s->N * 2, &b.out) != RG_OK ||
		    rg_backend_upload_f32_as(be, b.A, h, (size_t)4 * s->K, RG_DTYPE_F16) != RG_OK) {
			fprintf(stderr, "bench_qgemv: %s\n", rg_last_error());
			return 1;
		}
		free(h);
		for (int ti = -1; ti < (int)(sizeof(TYPES) / sizeof(TYPES[0])); ti++) {
			const int type = ti < 0 ? -1 : TYPES[ti];
			const size_t wb = type < 0 ? (size_t)s->N * s->K * 2 : qbytes(type, s->N, s->K);
			unsigned char *hq = NULL;
			bool ok = true;

			if (type >= 0 && (s->K % (type == RG_GGUF_Q4_K || type == RG_GGUF_Q6_K ? 256 : 32)))
				continue;
			b.S = (int)(ROT_BYTES / (double)wb) + 1;
			b.S = b.S > MAX_S ? MAX_S : b.S;
			hq = malloc(wb);
			if (type >= 0)
				fill_blocks(hq, wb, type);
			else
				memset(hq, 0x11, wb); /* fp16 values ~5e-4 */
			for (int i = 0; i < b.S && ok; i++) {
				ok = rg_backend_alloc(be, wb, &b.W[i]) == RG_OK &&
				     rg_backend_upload(be, b.W[i], hq, wb) == RG_OK &&
				     (type < 0 || rg_op_prepare_qweight(be, b.W[i], type, s->N, s->K) ==
							  RG_OK);
			}
			free(hq);
			if (!ok) {
				fprintf(stderr, "bench_qgemv: %s\n", rg_last_error());
				return 1;
			}
			for (int mi = 0; mi < 3; mi++) {
				const int M = MS[mi];
				if (type < 0) {
					print_row(s, type, M, "fp16 gemv", time_calls(be, &b, M, s->N, s->K, reps),
						  wb, ceil_gbs);
					continue;
				}
				rg_cuda_qmv_set(true);
				print_row(s, type, M, "qmv", time_calls(be, &b, M, s->N, s->K, reps), wb,
					  ceil_gbs);
				for (int k = 0; sweep && k < 3; k++) {
					static const int cps[3] = { 2, 8, 16 };
					char mode[24];
					rg_cuda_qmv_tune(cps[k]);
					snprintf(mode, sizeof(mode), "qmv %d CTA/SM", cps[k]);
					print_row(s, type, M, mode, time_calls(be, &b, M, s->N, s->K, reps),
						  wb, ceil_gbs);
				}
				rg_cuda_qmv_tune(0);
				rg_cuda_qmv_set(false);
				print_row(s, type, M, "tensor-core", time_calls(be, &b, M, s->N, s->K, reps),
					  wb, ceil_gbs);
				rg_cuda_qmv_set(true);
			}
			rg_backend_sync(be);
			for (int i = 0; i < b.S; i++)
				rg_backend_dealloc(be, b.W[i]);
		}
		rg_backend_dealloc(be, b.A);
		rg_backend_dealloc(be, b.out);
	}
	rg_backend_free(be);
	return g_failed;
}
