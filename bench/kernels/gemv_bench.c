/* Kernel benchmark of the decode-step GEMMs (issue 19): ragged's small-M kernel
 * (src/ops/cuda/gemv.cu) against cuBLASLt (the same rg_op_gemm / rg_op_gemm_bias_act call with
 * the kernel switched off through rg_cuda_gemv_set, as RAGGED_GEMV=0 does), on the layer GEMMs of
 * GPT-2 small (K = 768: N = 2304 qkv, 768 o, 3072 fc + gelu_new; K = 3072: N = 768 proj; all with
 * bias) and SmolLM2-135M (K = 576: N = 960 qkv, 576 o, 3072 gate_up; K = 1536: N = 576 down; no
 * bias), M in {1, 4, 16}, fp16 (--dtype bf16 for bf16); and GPT-2's LM head (N = 50257, 77 MB:
 * the steady streaming rate, where launch and DRAM latency no longer dominate). bench/kernels/gemv_bench.py runs this and
 * adds torch.nn.functional.linear beside it.
 *
 * Method (STYLE.md rule 10, like bench_ops.c): S copies of W, S chosen so that the copies
 * together are >= 128 MB (> 2 x the 50-60 MB L2 of an H100 / H200: every call streams its W from
 * HBM, as a decode step does); one eager call per mode (cuBLASLt autotunes a new shape outside
 * capture), S calls (one per copy) captured in one CUDA graph, one warm launch, then G launches
 * timed with CLOCK_MONOTONIC around `graph_launch x G + sync`; time per call = total / (S G);
 * --reps (5) repeats, median reported. Napkin math: a call must read W once, 2 N K bytes;
 * "GB/s" = 2 N K / time (weights only; A, bias and out add < 1%), against the device-to-device
 * copy rate measured in the same run (bytes read + written, 1 GiB).
 * --sweep adds the kernel at every (warps, unroll) the hook accepts, for tuning gemv_pick.
 * Output: a markdown table; --json FILE writes the rows with the GPU, commit and date.
 * Exit: 0; 1 if a call failed; 2 bad usage; 77 without a CUDA device.
 * Usage: make CUDA=1 build/bench_gemv && build/bench_gemv [--json F] [--reps N] [--dtype D]
 *        [--sweep] [--commit SHA] */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "ops/ops.h"
#include "bench_util.h"
#include "ops/cuda/gemv.cuh"

#define ROT_BYTES (128.0 * 1024 * 1024)
#define MAX_S 1024
#define MAX_ROWS 512

typedef struct shape {
	const char *model, *name;
	int N, K;
	bool bias;
	rg_act act;
} shape;

static const shape SHAPES[] = {
	{ "gpt2", "qkv", 2304, 768, true, RG_ACT_NONE },
	{ "gpt2", "o", 768, 768, true, RG_ACT_NONE },
	{ "gpt2", "fc", 3072, 768, true, RG_ACT_GELU_NEW },
	{ "gpt2", "proj", 768, 3072, true, RG_ACT_NONE },
	{ "smollm2", "qkv", 960, 576, false, RG_ACT_NONE },
	{ "smollm2", "o", 576, 576, false, RG_ACT_NONE },
	{ "smollm2", "gate_up", 3072, 576, false, RG_ACT_NONE },
	{ "smollm2", "down", 576, 1536, false, RG_ACT_NONE },
	{ "gpt2", "lm_head", 50257, 768, false, RG_ACT_NONE }, /* the streaming rate */
};
#define N_SHAPES ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))
static const int MS[] = { 1, 4, 16 };

typedef struct row {
	const shape *s;
	int M;
	char mode[24];
	double us, gbs;
} row;

static row g_rows[MAX_ROWS];
static int g_nrows, g_failed;


typedef struct bufs {
	void *A, *bias, *out, *W[MAX_S];
	int S;
} bufs;

static rg_status call(rg_backend *be, const shape *s, const bufs *b, int M, int i)
{
	if (!s->bias && s->act == RG_ACT_NONE)
		return rg_op_gemm(be, b->A, b->W[i], b->out, M, s->N, s->K);
	return rg_op_gemm_bias_act(be, b->A, b->W[i], s->bias ? b->bias : NULL, b->out, M, s->N,
				   s->K, s->act);
}

struct call_ctx {
	const shape *s;
	const bufs *b;
	int M;
};

static rg_status call_i(rg_backend *be, void *ctx, int i)
{
	const struct call_ctx *c = ctx;

	return call(be, c->s, c->b, c->M, i);
}

/* Median seconds per call of the S calls of one graph (bench_util.h); < 0 on failure
 * (printed). */
static double time_mode(rg_backend *be, const shape *s, const bufs *b, int M, int reps)
{
	struct call_ctx c = { s, b, M };
	rg_status st;
	double sec = bench_time_graph(be, call_i, &c, b->S, reps, &st);

	if (sec < 0) {
		fprintf(stderr, "%s %s M=%d: %s: %s\n", s->model, s->name, M, rg_status_name(st),
			rg_last_error());
		g_failed = 1;
	}
	return sec;
}

static void add_row(const shape *s, int M, const char *mode, double sec)
{
	row *r;

	if (sec < 0 || g_nrows == MAX_ROWS)
		return;
	r = &g_rows[g_nrows++];
	r->s = s;
	r->M = M;
	snprintf(r->mode, sizeof(r->mode), "%s", mode);
	r->us = sec * 1e6;
	r->gbs = 2.0 * s->N * s->K / sec / 1e9;
}


int main(int argc, char **argv)
{
	const char *json = NULL, *dts = "fp16", *commit = getenv("RAGGED_COMMIT");
	int reps = 5, sweep = 0;
	rg_dtype dt;
	rg_backend *be = NULL;
	struct cudaDeviceProp prop;
	double ceil_gbs;
	char date[32];
	time_t tnow = time(NULL);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json") && v) {
			json = v;
			i++;
		} else if (!strcmp(a, "--reps") && v) {
			reps = atoi(v);
			i++;
		} else if (!strcmp(a, "--dtype") && v) {
			dts = v;
			i++;
		} else if (!strcmp(a, "--commit") && v) {
			commit = v;
			i++;
		} else if (!strcmp(a, "--sweep")) {
			sweep = 1;
		} else {
			fprintf(stderr, "usage: bench_gemv [--json FILE] [--reps N] [--dtype fp16|bf16] "
					"[--sweep] [--commit SHA]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > BENCH_MAX_REPS || (strcmp(dts, "fp16") && strcmp(dts, "bf16"))) {
		fprintf(stderr, "bench_gemv: --reps 1..%d, --dtype fp16 or bf16\n", BENCH_MAX_REPS);
		return 2;
	}
	dt = strcmp(dts, "fp16") ? RG_DTYPE_BF16 : RG_DTYPE_F16;
	if (!commit || !commit[0])
		commit = "unknown";
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&tnow));
	if (rg_backend_init(RG_DEVICE_CUDA, 0, dt, &be) != RG_OK ||
	    cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
		printf("no CUDA device: skipped (%s)\n", rg_last_error());
		return 77;
	}
	ceil_gbs = copy_gbs();
	printf("%s, %d SMs, %s, commit %s, %s; copy ceiling %.0f GB/s\n", prop.name,
	       prop.multiProcessorCount, dts, commit, date, ceil_gbs);
	printf("| model | GEMM | N x K | M | mode | time/call | weights GB/s | %% of copy |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	for (int si = 0; si < N_SHAPES; si++) {
		const shape *s = &SHAPES[si];
		const size_t es = rg_dtype_size(dt), wb = (size_t)s->N * s->K * es;
		bufs b;
		float *h;
		size_t hn = (size_t)16 * s->K > (size_t)s->N * s->K ? (size_t)16 * s->K
								      : (size_t)s->N * s->K;

		memset(&b, 0, sizeof(b));
		b.S = (int)(ROT_BYTES / (double)wb) + 1;
		b.S = b.S > MAX_S ? MAX_S : b.S;
		h = malloc(hn * sizeof(float));
		for (size_t i = 0; i < hn; i++) /* random, never zeros */
			h[i] = (float)((i * 2654435761u) % 2001) / 1000.f - 1.f;
		if (rg_backend_alloc(be, (size_t)16 * s->K * es, &b.A) != RG_OK ||
		    rg_backend_alloc(be, (size_t)s->N * es, &b.bias) != RG_OK ||
		    rg_backend_alloc(be, (size_t)16 * s->N * es, &b.out) != RG_OK ||
		    rg_backend_upload_f32_as(be, b.A, h, (size_t)16 * s->K, dt) != RG_OK ||
		    rg_backend_upload_f32_as(be, b.bias, h, (size_t)s->N, dt) != RG_OK) {
			fprintf(stderr, "bench_gemv: %s\n", rg_last_error());
			return 1;
		}
		for (int i = 0; i < b.S; i++) {
			if (rg_backend_alloc(be, wb, &b.W[i]) != RG_OK) {
				fprintf(stderr, "bench_gemv: %s\n", rg_last_error());
				return 1;
			}
			if (i == 0)
				rg_backend_upload_f32_as(be, b.W[0], h, (size_t)s->N * s->K, dt);
			else
				cudaMemcpy(b.W[i], b.W[0], wb, cudaMemcpyDeviceToDevice);
		}
		free(h);
		for (int mi = 0; mi < 3; mi++) {
			const int M = MS[mi];
			char mode[24];
			int nmodes = sweep ? 2 + 6 : 2;

			for (int md = 0; md < nmodes; md++) {
				static const int sw[6][2] = { { 4, 2 }, { 4, 4 }, { 8, 2 }, { 8, 4 },
							      { 16, 2 }, { 16, 4 } };
				if (md == 0) {
					rg_cuda_gemv_set(true, 0, 0);
					snprintf(mode, sizeof(mode), "ragged gemv");
				} else if (md == 1) {
					rg_cuda_gemv_set(false, 0, 0);
					snprintf(mode, sizeof(mode), "cuBLASLt");
				} else {
					rg_cuda_gemv_set(true, sw[md - 2][0], sw[md - 2][1]);
					snprintf(mode, sizeof(mode), "gemv w%d u%d", sw[md - 2][0],
						 sw[md - 2][1]);
				}
				double sec = time_mode(be, s, &b, M, reps);
				add_row(s, M, mode, sec);
				if (sec > 0)
					printf("| %s | %s%s | %d x %d | %d | %s | %.2f us | %.0f | %.0f%% |\n",
					       s->model, s->name,
					       s->act == RG_ACT_GELU_NEW ? "+bias+gelu_new"
					       : s->bias		 ? "+bias"
									 : "",
					       s->N, s->K, M, mode, sec * 1e6,
					       2.0 * s->N * s->K / sec / 1e9,
					       100.0 * 2.0 * s->N * s->K / sec / 1e9 / ceil_gbs);
				fflush(stdout);
			}
		}
		rg_cuda_gemv_set(true, 0, 0);
		rg_backend_sync(be);
		for (int i = 0; i < b.S; i++)
			rg_backend_dealloc(be, b.W[i]);
		rg_backend_dealloc(be, b.A);
		rg_backend_dealloc(be, b.bias);
		rg_backend_dealloc(be, b.out);
	}
	if (json) {
		FILE *f = fopen(json, "w");
		if (!f) {
			perror(json);
			return 1;
		}
		fprintf(f, "{\"gpu\": \"%s\", \"sms\": %d, \"dtype\": \"%s\", \"commit\": \"%s\", "
			   "\"date\": \"%s\", \"copy_gbs\": %.1f, \"rows\": [",
			prop.name, prop.multiProcessorCount, dts, commit, date, ceil_gbs);
		for (int i = 0; i < g_nrows; i++) {
			const row *r = &g_rows[i];
			fprintf(f, "%s\n  {\"model\": \"%s\", \"gemm\": \"%s\", \"N\": %d, \"K\": %d, "
				   "\"M\": %d, \"bias\": %s, \"act\": \"%s\", \"mode\": \"%s\", "
				   "\"us\": %.3f, \"weight_gbs\": %.1f}",
				i ? "," : "", r->s->model, r->s->name, r->s->N, r->s->K, r->M,
				r->s->bias ? "true" : "false", rg_act_name(r->s->act), r->mode, r->us,
				r->gbs);
		}
		fprintf(f, "\n]}\n");
		fclose(f);
	}
	rg_backend_free(be);
	return g_failed;
}
