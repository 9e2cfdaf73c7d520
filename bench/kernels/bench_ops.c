/* Kernel benchmark of ragged's GPU ops, in the style of llm.c's dev/cuda: every op timed alone on
 * the shapes of BERT-base and MiniLM, printed with its napkin math (FLOPs, bytes moved) next to
 * ceilings measured in the same run (STYLE.md rule 10): `| 0.0412 ms | 2450 GB/s of 2900 |`.
 *
 * Ceilings: device-to-device copy bandwidth (cudaMemcpyAsync of 1 GiB, bytes read + written,
 * median of 10) for the memory-bound ops; rg_op_gemm at 8192 x 8192 x 8192 per dtype for the
 * GEMMs and attention.
 * Method, per (op, shape, dtype): one eager call (warm-up; cuBLASLt autotunes a new GEMM shape
 * outside capture), R back-to-back calls captured into one CUDA graph, one warm launch, then G
 * launches timed with CLOCK_MONOTONIC around `graph_launch x G + rg_backend_sync`; time per call =
 * total / (R*G); --reps repeats (5), median and min reported. The R calls rotate over S copies of
 * every per-call operand (weights included, as the layers of a model are), with S chosen so that a
 * launch touches at least 2 x L2: HBM is measured, not L2. The "data" column says where a launch's
 * working set lives (L2 when it fits, which only happens for the smallest shapes).
 * Random operands everywhere (never zeros); inputs are uniform in [-1, 1].
 * Exit status: 0; 77 when no CUDA device is usable; 1 when any op or measurement failed (the
 * others still run and print); 2 on a bad command line.
 * `--cpu` runs the same sweep on the CPU reference backend (fp32, eager calls, no graphs): a check
 * of the benchmark itself on a machine without a GPU, not a measurement to quote.
 * Usage: make build/bench_ops && build/bench_ops --json out.json   (bench/kernels/README.md) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops.h"

#define MAX_SETS 1024		/* operand copies one graph rotates over */
#define MAX_TENSORS 4		/* per-call tensors of one case */
#define MAX_SHARED 6		/* tensors shared by every call of one case */
#define MAX_REPS 21
#define MAX_TOKENS 8
#define R_MIN 20		/* calls captured per graph, at least (unless one call is slow) */
#define GRAPH_MAX_S 20e-3	/* a graph launch lasts at most about this long when R > 1 */
#define REP_TARGET_S 3e-3	/* one timed repeat: G launches lasting about this long in all */
#define G_MIN 2
#define G_MAX 50
#define POOL_ELEMS (1u << 22)	/* random act values that operand fills are tiled from */
#define COPY_BYTES ((size_t)1 << 30)
#define COPY_BYTES_CPU ((size_t)1 << 28)
#define COPY_REPS 10
#define CEIL_GEMM 8192
#define CEIL_GEMM_CPU 1024
#define VOCAB 30522		/* bert-base-uncased and MiniLM */
#define MAX_POS 512
#define LN_EPS 1e-12f

typedef struct model_shape {
	const char *name;
	int H, heads, head_dim, I;
} model_shape;

static const model_shape MODELS[] = {
	{"bert-base", 768, 12, 64, 3072},
	{"minilm", 384, 12, 32, 1536},
};
#define N_MODELS ((int)(sizeof(MODELS) / sizeof(MODELS[0])))

/* One printed row: an (op, shape, dtype) measurement, or a failure. */
typedef struct bench_row {
	char op[48];
	char model[16];
	char dtype[8];
	char shape[64];
	char where[8];		/* "HBM", "L2", "L2+HBM", "host" */
	int T, n_seq;
	int sets, R, G;		/* operand copies used, calls per graph, launches per repeat */
	double med_s, min_s;	/* per call */
	double flops, bytes;	/* napkin math of one call */
	double ws;		/* bytes a graph launch touches */
	bool compute;		/* rate in TFLOP/s vs the GEMM ceiling, else GB/s vs copy */
	double ceiling;		/* TFLOP/s or GB/s; NAN when not measured */
	rg_status st;
	char err[256];
} bench_row;

/* A backend of one compute dtype and its random-value pool. */
typedef struct dtype_ctx {
	rg_dtype dt;
	const char *name;
	size_t esz;
	rg_backend *be;		/* NULL when this dtype could not be set up */
	void *pool;		/* (POOL_ELEMS) act, backend memory */
	double gemm_tflops;	/* ceiling; NAN when not measured */
	bench_row gemm_row;
} dtype_ctx;

typedef struct bench {
	bool cpu;
	int device, reps;
	int tokens[MAX_TOKENS], n_tokens;
	double l2_bytes;
	double rot_target;	/* rotate operands until a launch touches this many bytes */
	double copy_gbs, copy_med_s, copy_min_s; /* ceiling; NAN when not measured */
	size_t copy_bytes;
	cudaStream_t fill_stream; /* GPU: fills and the copy ceiling; NULL on CPU */
	uint64_t rng;
	dtype_ctx dts[3];
	int n_dts;
	bench_row *rows;
	int n_rows, cap_rows;
	int failures;
} bench;

typedef struct op_case op_case;

/* One benchmark case: what a builder fills in, then what case_alloc adds. */
struct op_case {
	bench *b;
	dtype_ctx *d;
	const model_shape *m;	/* NULL for the GEMM ceiling */
	char op[48], shape[64];
	int T;
	rg_status (*call)(const op_case *c, int set); /* one op call on operand copy `set` */
	rg_status (*init)(op_case *c); /* uploads what random act values cannot be (indices, f32) */
	size_t set_bytes[MAX_TENSORS];	/* each per-call tensor, 0 = none */
	bool set_fill[MAX_TENSORS];	/* fill with random act values (inputs) */
	size_t shared_bytes[MAX_SHARED];
	bool shared_fill[MAX_SHARED];
	double flops, bytes;
	/* working set of a launch over n copies: n*set_ws + min(n*capped_ws, cap) + shared_ws */
	double set_ws, capped_ws, cap, shared_ws;
	bool compute;
	/* op parameters */
	int M, N, K;
	rg_act act;
	bool has_bias, plain;
	int n_seq, max_seqlen;
	int32_t *cu_h;		/* (n_seq+1) host */
	/* filled by case_alloc */
	int S;
	void *block[MAX_TENSORS];	/* S copies of tensor j, stride round256(set_bytes[j]) */
	void *set[MAX_SETS][MAX_TENSORS];
	void *shared[MAX_SHARED];
	char err[256];
};

/* ---------------------------------------------------------------- small helpers */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s, float lo, float hi)
{
	return lo + (hi - lo) * (float)((double)(rng_next(s) >> 40) / 16777216.0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median and min of v (n >= 1), sorting v. */
static void median_min(double *v, int n, double *med, double *mn)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	*mn = v[0];
	*med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static size_t round256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

static const char *dtype_name(rg_dtype dt)
{
	switch (dt) {
	case RG_DTYPE_F32: return "fp32";
	case RG_DTYPE_F16: return "fp16";
	case RG_DTYPE_BF16: return "bf16";
	case RG_DTYPE_AUTO: return "auto";
	}
	return "?";
}

/* Record the failure of an rg_* call in c->err (the first one wins); returns st. */
static rg_status case_err(op_case *c, rg_status st, const char *what)
{
	if (st != RG_OK && !c->err[0])
		snprintf(c->err, sizeof(c->err), "%s: %s: %s", what, rg_status_name(st),
			 rg_last_error());
	return st;
}

/* The same for a CUDA runtime call; clears CUDA's last error. */
static rg_status case_cuda(op_case *c, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return RG_OK;
	(void)cudaGetLastError();
	if (!c->err[0])
		snprintf(c->err, sizeof(c->err), "%s: %s", what, cudaGetErrorString(e));
	return RG_ERR_CUDA;
}

/* Sequence lengths adding up to exactly T: all `fixed` long (the last one shorter when fixed does
 * not divide T) or, with fixed == 0, uniform in lo..hi drawn from `seed` (the last one cut to
 * fit). Returns cu_seqlens (n_seq+1) malloc'd, or NULL when out of host memory. */
static int32_t *make_cu(int T, int fixed, int lo, int hi, uint64_t seed, int *n_seq,
			int *max_len, double *sum_sq)
{
	int32_t *cu = malloc(((size_t)T + 1) * sizeof(*cu));
	int n = 0, mx = 0;
	double sq = 0;

	if (!cu)
		return NULL;
	cu[0] = 0;
	while (cu[n] < T) {
		int L = fixed > 0 ? fixed : lo + (int)(rng_next(&seed) % (uint64_t)(hi - lo + 1));
		if (L > T - cu[n])
			L = T - cu[n];
		cu[n + 1] = cu[n] + L;
		n++;
		mx = L > mx ? L : mx;
		sq += (double)L * L;
	}
	*n_seq = n;
	*max_len = mx;
	*sum_sq = sq;
	return cu;
}

/* ---------------------------------------------------------------- operands */

/* Working set of one launch that rotates over n operand copies. */
static double case_ws(const op_case *c, int n)
{
	double capped = n * c->capped_ws;
	return n * c->set_ws + (capped < c->cap ? capped : c->cap) + c->shared_ws;
}

/* Fill n act values at dst with random values tiled from the dtype's pool (GPU: device-to-device
 * copies on the fill stream; the caller synchronizes it). */
static rg_status fill_act(op_case *c, void *dst, size_t n)
{
	const size_t esz = c->d->esz;
	size_t done = 0;

	while (done < n) {
		size_t off = (size_t)(rng_next(&c->b->rng) % (POOL_ELEMS / 2)) & ~(size_t)127;
		size_t m = n - done < POOL_ELEMS - off ? n - done : POOL_ELEMS - off;
		char *to = (char *)dst + done * esz;
		const char *from = (const char *)c->d->pool + off * esz;

		if (c->b->cpu)
			memcpy(to, from, m * esz);
		else if (case_cuda(c, cudaMemcpyAsync(to, from, m * esz, cudaMemcpyDeviceToDevice,
						      c->b->fill_stream), "fill: cudaMemcpyAsync"))
			return RG_ERR_CUDA;
		done += m;
	}
	return RG_OK;
}

/* Upload n float32 values uniform in [lo, hi] to dst (an f32 tensor). */
static rg_status upload_f32(op_case *c, void *dst, size_t n, float lo, float hi)
{
	float *h = malloc(n * sizeof(*h));
	rg_status st;

	if (!h) {
		snprintf(c->err, sizeof(c->err), "out of host memory (%zu floats)", n);
		return RG_ERR_OOM;
	}
	for (size_t i = 0; i < n; i++)
		h[i] = rng_uniform(&c->b->rng, lo, hi);
	st = case_err(c, rg_backend_upload(c->d->be, dst, h, n * sizeof(*h)), "upload f32");
	free(h);
	return st;
}

static void case_free(op_case *c)
{
	for (int j = 0; j < MAX_TENSORS; j++)
		rg_backend_dealloc(c->d->be, c->block[j]);
	for (int k = 0; k < MAX_SHARED; k++)
		rg_backend_dealloc(c->d->be, c->shared[k]);
	free(c->cu_h);
	free(c);
}

/* Choose S (the fewest copies whose launch touches rot_target bytes, at most MAX_SETS), allocate
 * one block per tensor (S copies) and each shared tensor, and fill the inputs with random values. */
static rg_status case_alloc(op_case *c)
{
	rg_backend *be = c->d->be;
	rg_status st;

	c->S = 1;
	while (c->S < MAX_SETS && case_ws(c, c->S) < c->b->rot_target)
		c->S++;
	for (int j = 0; j < MAX_TENSORS; j++) {
		size_t stride = round256(c->set_bytes[j]);
		if (!c->set_bytes[j])
			continue;
		st = case_err(c, rg_backend_alloc(be, stride * (size_t)c->S, &c->block[j]),
			      "alloc operands");
		if (st != RG_OK)
			return st;
		for (int s = 0; s < c->S; s++)
			c->set[s][j] = (char *)c->block[j] + stride * (size_t)s;
		if (c->set_fill[j] && (st = fill_act(c, c->block[j],
						     stride * (size_t)c->S / c->d->esz)) != RG_OK)
			return st;
	}
	for (int k = 0; k < MAX_SHARED; k++) {
		if (!c->shared_bytes[k])
			continue;
		st = case_err(c, rg_backend_alloc(be, c->shared_bytes[k], &c->shared[k]),
			      "alloc shared operands");
		if (st != RG_OK)
			return st;
		if (c->shared_fill[k] &&
		    (st = fill_act(c, c->shared[k], c->shared_bytes[k] / c->d->esz)) != RG_OK)
			return st;
	}
	if (!c->b->cpu)
		return case_cuda(c, cudaStreamSynchronize(c->b->fill_stream), "fill: synchronize");
	return RG_OK;
}

/* ---------------------------------------------------------------- the ops */

static rg_status call_gemm(const op_case *c, int s)
{
	void *const *t = c->set[s];
	if (c->plain)
		return rg_op_gemm(c->d->be, t[0], t[1], t[3], c->M, c->N, c->K);
	return rg_op_gemm_bias_act(c->d->be, t[0], t[1], c->has_bias ? t[2] : NULL, t[3], c->M,
				   c->N, c->K, c->act);
}

/* out (M, N) = act(A (M, K) x W^T (N, K) + bias (N)): A, W, bias and out rotate, as per layer. */
static void build_gemm(op_case *c, const char *what, int M, int N, int K, bool bias, rg_act act,
		       bool plain)
{
	const double esz = (double)c->d->esz;

	snprintf(c->op, sizeof(c->op), "%s %s", plain ? "gemm" : "gemm_bias_act", what);
	snprintf(c->shape, sizeof(c->shape), "%dx%dx%d%s%s", M, N, K, bias ? " +bias" : "",
		 act == RG_ACT_GELU ? "+gelu" : "");
	c->call = call_gemm;
	c->M = M;
	c->N = N;
	c->K = K;
	c->act = act;
	c->has_bias = bias;
	c->plain = plain;
	c->set_bytes[0] = (size_t)M * K * c->d->esz;
	c->set_bytes[1] = (size_t)N * K * c->d->esz;
	c->set_bytes[2] = bias ? (size_t)N * c->d->esz : 0;
	c->set_bytes[3] = (size_t)M * N * c->d->esz;
	c->set_fill[0] = c->set_fill[1] = c->set_fill[2] = true;
	c->flops = 2.0 * M * N * K;
	c->bytes = ((double)M * K + (double)N * K + (double)M * N + (bias ? N : 0)) * esz;
	c->set_ws = c->bytes;
	c->compute = true;
}

static rg_status call_ln(const op_case *c, int s)
{
	void *const *t = c->set[s];
	return rg_op_bias_residual_layernorm(c->d->be, t[0], NULL, t[1], c->shared[0], c->shared[1],
					     LN_EPS, c->T, c->m->H, t[1]);
}

static rg_status init_ln(op_case *c)
{
	rg_status st = upload_f32(c, c->shared[0], (size_t)c->m->H, 0.5f, 1.5f);
	return st ? st : upload_f32(c, c->shared[1], (size_t)c->m->H, -0.5f, 0.5f);
}

/* residual (T, H) = LN(x + residual), bias NULL (added by the GEMM epilogue), out aliasing the
 * residual as in the model: reads x and residual, writes out. */
static void build_ln(op_case *c)
{
	const size_t act = (size_t)c->T * c->m->H * c->d->esz;

	snprintf(c->op, sizeof(c->op), "residual_layernorm");
	snprintf(c->shape, sizeof(c->shape), "%dx%d in place", c->T, c->m->H);
	c->call = call_ln;
	c->init = init_ln;
	c->set_bytes[0] = c->set_bytes[1] = act;
	c->set_fill[0] = c->set_fill[1] = true;
	c->shared_bytes[0] = c->shared_bytes[1] = (size_t)c->m->H * sizeof(float);
	c->bytes = 3.0 * (double)act + 8.0 * c->m->H;
	c->set_ws = 2.0 * (double)act;
	c->shared_ws = 8.0 * c->m->H;
}

static rg_status call_embed(const op_case *c, int s)
{
	void *const *t = c->set[s];
	void *const *sh = c->shared;
	return rg_op_embed_layernorm(c->d->be, t[0], sh[0], c->T, sh[1], sh[2], sh[3], sh[4], sh[5],
				     LN_EPS, c->m->H, t[1]);
}

/* Random token ids per copy; positions 0..127 repeating (sequences of 128). */
static rg_status init_embed(op_case *c)
{
	int32_t *h = malloc((size_t)c->T * sizeof(*h));
	rg_status st = RG_OK;

	if (!h) {
		snprintf(c->err, sizeof(c->err), "out of host memory");
		return RG_ERR_OOM;
	}
	for (int s = 0; s < c->S && st == RG_OK; s++) {
		for (int i = 0; i < c->T; i++)
			h[i] = (int32_t)(rng_next(&c->b->rng) % VOCAB);
		st = case_err(c, rg_backend_upload(c->d->be, c->set[s][0], h,
						   (size_t)c->T * sizeof(*h)), "upload tokens");
	}
	for (int i = 0; i < c->T; i++)
		h[i] = i % 128;
	if (st == RG_OK)
		st = case_err(c, rg_backend_upload(c->d->be, c->shared[0], h,
						   (size_t)c->T * sizeof(*h)), "upload positions");
	free(h);
	if (st == RG_OK)
		st = upload_f32(c, c->shared[4], (size_t)c->m->H, 0.5f, 1.5f);
	if (st == RG_OK)
		st = upload_f32(c, c->shared[5], (size_t)c->m->H, -0.5f, 0.5f);
	return st;
}

/* out (T, H) = LN(word[tok] + pos[p] + type0): the word table has the real vocabulary, so the
 * rows a launch gathers stop adding to its working set once they cover the table. */
static void build_embed(op_case *c)
{
	const size_t row = (size_t)c->m->H * c->d->esz;
	const size_t act = (size_t)c->T * row;

	snprintf(c->op, sizeof(c->op), "embed_layernorm");
	snprintf(c->shape, sizeof(c->shape), "%dx%d, vocab %d", c->T, c->m->H, VOCAB);
	c->call = call_embed;
	c->init = init_embed;
	c->set_bytes[0] = (size_t)c->T * sizeof(int32_t);
	c->set_bytes[1] = act;
	c->shared_bytes[0] = (size_t)c->T * sizeof(int32_t);
	c->shared_bytes[1] = (size_t)VOCAB * row;
	c->shared_bytes[2] = (size_t)MAX_POS * row;
	c->shared_bytes[3] = row;
	c->shared_bytes[4] = c->shared_bytes[5] = (size_t)c->m->H * sizeof(float);
	c->shared_fill[1] = c->shared_fill[2] = c->shared_fill[3] = true;
	c->bytes = 3.0 * (double)act + 8.0 * c->T;
	c->set_ws = (double)act + 4.0 * c->T;
	c->capped_ws = (double)act;
	c->cap = (double)VOCAB * (double)row;
	c->shared_ws = 4.0 * c->T + 128.0 * (double)row + (double)row + 8.0 * c->m->H;
}

static rg_status call_pool(const op_case *c, int s)
{
	void *const *t = c->set[s];
	return rg_op_pool(c->d->be, t[0], c->shared[0], c->n_seq, c->m->H, RG_POOL_MEAN, true,
			  t[1]);
}

static rg_status init_cu(op_case *c)
{
	return case_err(c, rg_backend_upload(c->d->be, c->shared[0], c->cu_h,
					     ((size_t)c->n_seq + 1) * sizeof(int32_t)),
			"upload cu_seqlens");
}

/* out (n_seq, H) f32 = L2-normalized mean of each sequence of x (T, H). */
static rg_status build_pool(op_case *c, int L)
{
	const size_t act = (size_t)c->T * c->m->H * c->d->esz;
	double sq;

	c->cu_h = make_cu(c->T, L, 0, 0, 0, &c->n_seq, &c->max_seqlen, &sq);
	if (!c->cu_h)
		return RG_ERR_OOM;
	snprintf(c->op, sizeof(c->op), "pool mean+normalize L=%d", L);
	snprintf(c->shape, sizeof(c->shape), "%dx%d, %d seq%s", c->T, c->m->H, c->n_seq,
		 c->n_seq == 1 ? "" : "s");
	c->call = call_pool;
	c->init = init_cu;
	c->set_bytes[0] = act;
	c->set_bytes[1] = (size_t)c->n_seq * c->m->H * sizeof(float);
	c->set_fill[0] = true;
	c->shared_bytes[0] = ((size_t)c->n_seq + 1) * sizeof(int32_t);
	c->bytes = (double)act + 4.0 * c->n_seq * c->m->H + 4.0 * (c->n_seq + 1);
	c->set_ws = (double)act + 4.0 * c->n_seq * c->m->H;
	c->shared_ws = 4.0 * (c->n_seq + 1);
	return RG_OK;
}

static rg_status call_attention(const op_case *c, int s)
{
	void *const *t = c->set[s];
	const rg_attn_desc ad = rg_attn_packed(c->n_seq, c->shared[0], c->cu_h, c->max_seqlen,
					       c->m->heads, c->m->head_dim,
					       1.0f / sqrtf((float)c->m->head_dim));

	return rg_op_attention(c->d->be, &ad, t[0], t[1]);
}

/* out (T, H) = softmax(Q K^T / sqrt(d)) V per sequence and head, qkv (T, 3H).
 * fixed > 0: sequences of `fixed` tokens; else uniform 5..500 (seeded by T). */
static rg_status build_attention(op_case *c, int fixed)
{
	const int H = c->m->H;
	double sq;

	c->cu_h = make_cu(c->T, fixed, 5, 500, 0x5eed0000u + (uint64_t)c->T, &c->n_seq,
			  &c->max_seqlen, &sq);
	if (!c->cu_h)
		return RG_ERR_OOM;
	snprintf(c->op, sizeof(c->op), "attention %s", fixed ? "fixed" : "U(5,500)");
	if (fixed)
		snprintf(c->shape, sizeof(c->shape), "%d seq%s x %d%s, %dx%d", c->n_seq,
			 c->n_seq == 1 ? "" : "s", c->max_seqlen, c->T % fixed ? " (last shorter)" : "",
			 c->m->heads, c->m->head_dim);
	else
		snprintf(c->shape, sizeof(c->shape), "%d seq%s, max %d, %dx%d", c->n_seq,
			 c->n_seq == 1 ? "" : "s", c->max_seqlen, c->m->heads, c->m->head_dim);
	c->call = call_attention;
	c->init = init_cu;
	c->set_bytes[0] = (size_t)c->T * 3 * H * c->d->esz;
	c->set_bytes[1] = (size_t)c->T * H * c->d->esz;
	c->set_fill[0] = true;
	c->shared_bytes[0] = ((size_t)c->n_seq + 1) * sizeof(int32_t);
	c->flops = 4.0 * H * sq; /* QK^T and PV, 2 FLOPs per multiply-add each */
	c->bytes = 4.0 * c->T * H * (double)c->d->esz;
	c->set_ws = c->bytes;
	c->shared_ws = 4.0 * (c->n_seq + 1);
	c->compute = true;
	return RG_OK;
}

static rg_status call_gather(const op_case *c, int s)
{
	void *const *t = c->set[s];
	return rg_op_gather_rows(c->d->be, t[0], c->shared[0], c->T, c->m->H, t[1]);
}

/* A random permutation of 0..T-1 (Fisher-Yates). */
static rg_status init_gather(op_case *c)
{
	int32_t *h = malloc((size_t)c->T * sizeof(*h));
	rg_status st;

	if (!h) {
		snprintf(c->err, sizeof(c->err), "out of host memory");
		return RG_ERR_OOM;
	}
	for (int i = 0; i < c->T; i++)
		h[i] = i;
	for (int i = c->T - 1; i > 0; i--) {
		int k = (int)(rng_next(&c->b->rng) % (uint64_t)(i + 1));
		int32_t v = h[i];
		h[i] = h[k];
		h[k] = v;
	}
	st = case_err(c, rg_backend_upload(c->d->be, c->shared[0], h, (size_t)c->T * sizeof(*h)),
		      "upload gather indices");
	free(h);
	return st;
}

/* dst (T, H) = src[perm] (bringing padded / concatenated rows back to packed order). */
static void build_gather(op_case *c)
{
	const size_t act = (size_t)c->T * c->m->H * c->d->esz;

	snprintf(c->op, sizeof(c->op), "gather_rows");
	snprintf(c->shape, sizeof(c->shape), "%dx%d, permutation", c->T, c->m->H);
	c->call = call_gather;
	c->init = init_gather;
	c->set_bytes[0] = c->set_bytes[1] = act;
	c->set_fill[0] = true;
	c->shared_bytes[0] = (size_t)c->T * sizeof(int32_t);
	c->bytes = 2.0 * (double)act + 4.0 * c->T;
	c->set_ws = 2.0 * (double)act;
	c->shared_ws = 4.0 * c->T;
}

static rg_status call_bias_act(const op_case *c, int s)
{
	return rg_op_bias_act(c->d->be, c->set[s][0], c->shared[0], c->T, c->m->I, RG_ACT_GELU);
}

static rg_status init_bias_act(op_case *c)
{
	/* small: the pass runs in place thousands of times on the same values */
	return upload_f32(c, c->shared[0], (size_t)c->m->I, -0.01f, 0.01f);
}

/* x (T, I) = gelu_erf(x + bias) in place: the separate exact-GELU pass that follows the BIAS
 * epilogue in fp32 or with rg_backend_set_exact_gelu (the default fp16/bf16 path fuses it). */
static void build_bias_act(op_case *c)
{
	const size_t act = (size_t)c->T * c->m->I * c->d->esz;

	snprintf(c->op, sizeof(c->op), "bias_act gelu (exact pass)");
	snprintf(c->shape, sizeof(c->shape), "%dx%d in place", c->T, c->m->I);
	c->call = call_bias_act;
	c->init = init_bias_act;
	c->set_bytes[0] = act;
	c->set_fill[0] = true;
	c->shared_bytes[0] = (size_t)c->m->I * sizeof(float);
	c->bytes = 2.0 * (double)act + 4.0 * c->m->I;
	c->set_ws = (double)act;
	c->shared_ws = 4.0 * c->m->I;
}

/* ---------------------------------------------------------------- timing */

/* R calls: one graph launch, or (CPU, no graphs) R eager calls. */
static rg_status case_launch(const op_case *c, rg_graph *g, int R)
{
	rg_status st = RG_OK;
	if (g)
		return rg_backend_graph_launch(c->d->be, g);
	for (int r = 0; r < R && st == RG_OK; r++)
		st = c->call(c, r % c->S);
	return st;
}

/* Time c as the header describes; fills r's timing fields. */
static rg_status case_time(op_case *c, bench_row *r)
{
	rg_backend *be = c->d->be;
	const int k = c->S < 4 ? c->S : 4;
	double times[MAX_REPS], t0, t_est, t_launch;
	rg_graph *g = NULL;
	rg_status st, st_end;
	int R, G, n;

	/* warm-up outside capture: module loading, cuBLASLt autotuning of a new GEMM shape */
	st = case_err(c, c->call(c, 0), "warm-up call");
	if (st == RG_OK)
		st = case_err(c, rg_backend_sync(be), "sync after warm-up");
	if (st != RG_OK)
		return st;
	/* an estimate of one call, to keep a slow op's graph short */
	t0 = now_s();
	for (int i = 0; i < k && st == RG_OK; i++)
		st = case_err(c, c->call(c, i), "eager call");
	if (st == RG_OK)
		st = case_err(c, rg_backend_sync(be), "sync after eager calls");
	if (st != RG_OK)
		return st;
	t_est = (now_s() - t0) / k;
	R = c->S > R_MIN ? c->S : R_MIN;
	if (t_est * R > GRAPH_MAX_S) {
		R = (int)(GRAPH_MAX_S / t_est);
		R = R < 1 ? 1 : R;
	}
	if (rg_backend_has_graphs(be)) {
		st = case_err(c, rg_backend_capture_begin(be), "capture_begin");
		if (st != RG_OK)
			return st;
		for (int i = 0; i < R && st == RG_OK; i++)
			st = case_err(c, c->call(c, i % c->S), "call during capture");
		st_end = case_err(c, rg_backend_capture_end(be, &g), "capture_end");
		if (st == RG_OK)
			st = st_end;
		if (st != RG_OK)
			goto out_free_graph;
	}
	/* warm launch, which also sizes G */
	t0 = now_s();
	st = case_err(c, case_launch(c, g, R), "warm launch");
	if (st == RG_OK)
		st = case_err(c, rg_backend_sync(be), "sync after warm launch");
	if (st != RG_OK)
		goto out_free_graph;
	t_launch = now_s() - t0;
	G = (int)ceil(REP_TARGET_S / (t_launch > 1e-7 ? t_launch : 1e-7));
	G = G < G_MIN ? G_MIN : G > G_MAX ? G_MAX : G;
	n = c->b->reps;
	for (int rep = 0; rep < n; rep++) {
		t0 = now_s();
		for (int i = 0; i < G && st == RG_OK; i++)
			st = case_err(c, case_launch(c, g, R), "launch");
		if (st == RG_OK)
			st = case_err(c, rg_backend_sync(be), "sync after launches");
		if (st != RG_OK)
			goto out_free_graph;
		times[rep] = (now_s() - t0) / ((double)R * G);
	}
	median_min(times, n, &r->med_s, &r->min_s);
	r->sets = R < c->S ? R : c->S;
	r->R = R;
	r->G = G;
	r->ws = case_ws(c, r->sets);
out_free_graph:
	rg_backend_graph_free(be, g);
	return st;
}

/* ---------------------------------------------------------------- output */

static void fmt_time(char *buf, size_t n, double s)
{
	if (s < 1e-4)
		snprintf(buf, n, "%.2f µs", s * 1e6);
	else
		snprintf(buf, n, "%.4f ms", s * 1e3);
}

static double row_rate(const bench_row *r) /* TFLOP/s or GB/s */
{
	return r->compute ? r->flops / r->med_s / 1e12 : r->bytes / r->med_s / 1e9;
}

static void row_print(const bench_row *r)
{
	char med[32], mn[32], rate[96], pct[16], data[32], of[32] = "";

	if (r->st != RG_OK) {
		printf("| %s | %s | %s | %d | %s | - | FAILED | - | %s | - |\n", r->op, r->model,
		       r->dtype, r->T, r->shape, r->err);
		fflush(stdout);
		return;
	}
	fmt_time(med, sizeof(med), r->med_s);
	fmt_time(mn, sizeof(mn), r->min_s);
	snprintf(data, sizeof(data), "%s %.*f MB", r->where, r->ws < 10e6 ? 1 : 0, r->ws / 1e6);
	if (isfinite(r->ceiling) && r->ceiling > 0) {
		snprintf(of, sizeof(of), r->ceiling >= 10 ? " of %.0f" : " of %.3g", r->ceiling);
		snprintf(pct, sizeof(pct), "%.0f%%", 100.0 * row_rate(r) / r->ceiling);
	} else {
		snprintf(pct, sizeof(pct), "-");
	}
	if (r->compute)
		snprintf(rate, sizeof(rate), "%.1f TFLOP/s%s, %.0f GB/s", row_rate(r), of,
			 r->bytes / r->med_s / 1e9);
	else
		snprintf(rate, sizeof(rate), "%.0f GB/s%s", row_rate(r), of);
	printf("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", r->op, r->model, r->dtype,
	       r->T, r->shape, data, med, mn, rate, pct);
	fflush(stdout);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

static void json_row(FILE *f, const bench_row *r)
{
	bool ok = r->st == RG_OK;

	fputs("{\"op\": ", f);
	json_str(f, r->op);
	fputs(", \"model\": ", f);
	json_str(f, r->model);
	fputs(", \"dtype\": ", f);
	json_str(f, r->dtype);
	fprintf(f, ", \"tokens\": %d, \"n_seq\": %d, \"shape\": ", r->T, r->n_seq);
	json_str(f, r->shape);
	fputs(", \"status\": ", f);
	json_str(f, rg_status_name(r->st));
	fputs(", \"error\": ", f);
	json_str(f, r->err);
	fputs(", \"median_ms\": ", f);
	json_num(f, ok ? r->med_s * 1e3 : NAN);
	fputs(", \"min_ms\": ", f);
	json_num(f, ok ? r->min_s * 1e3 : NAN);
	fputs(", \"flops\": ", f);
	json_num(f, r->flops);
	fputs(", \"bytes\": ", f);
	json_num(f, r->bytes);
	fputs(", \"tflops\": ", f);
	json_num(f, ok && r->flops > 0 ? r->flops / r->med_s / 1e12 : NAN);
	fputs(", \"gbs\": ", f);
	json_num(f, ok ? r->bytes / r->med_s / 1e9 : NAN);
	fprintf(f, ", \"ceiling_unit\": \"%s\", \"ceiling\": ", r->compute ? "TFLOP/s" : "GB/s");
	json_num(f, r->ceiling);
	fputs(", \"pct_of_ceiling\": ", f);
	json_num(f, ok && r->ceiling > 0 ? 100.0 * row_rate(r) / r->ceiling : NAN);
	fputs(", \"where\": ", f);
	json_str(f, ok ? r->where : "");
	fputs(", \"working_set_bytes\": ", f);
	json_num(f, ok ? r->ws : NAN);
	fprintf(f, ", \"sets\": %d, \"calls_per_graph\": %d, \"launches_per_rep\": %d}", r->sets,
		r->R, r->G);
}

static int json_write(const bench *b, const char *path, const char *gpu, const char *commit,
		      const char *date)
{
	FILE *f = fopen(path, "w");
	int first = 1;

	if (!f) {
		perror(path);
		return -1;
	}
	fputs("{\"bench\": \"bench_ops\", \"gpu\": ", f);
	json_str(f, gpu);
	fputs(", \"commit\": ", f);
	json_str(f, commit);
	fputs(", \"date\": ", f);
	json_str(f, date);
	fputs(", \"backend\": ", f);
	json_str(f, b->cpu ? "cpu" : "cuda");
	fputs(", \"cuda_archs\": ", f);
	json_str(f, rg_build_cuda_archs());
	fputs(", \"l2_bytes\": ", f);
	json_num(f, b->l2_bytes);
	fprintf(f, ",\n \"method\": {\"reps\": %d, \"rotate_until_bytes\": ", b->reps);
	json_num(f, b->rot_target);
	fputs(", \"timing\": \"per call = host clock around (graph of R calls) x G + sync, / (R*G); "
	      "median and min of reps\"},\n \"ceilings\": {\"copy_gbs\": ", f);
	json_num(f, b->copy_gbs);
	fputs(", \"copy_bytes\": ", f);
	json_num(f, (double)b->copy_bytes);
	fputs(", \"copy_median_ms\": ", f);
	json_num(f, b->copy_med_s * 1e3);
	fputs(", \"copy_min_ms\": ", f);
	json_num(f, b->copy_min_s * 1e3);
	fputs(", \"gemm_tflops\": {", f);
	for (int i = 0; i < b->n_dts; i++) {
		fprintf(f, "%s\"%s\": ", i ? ", " : "", b->dts[i].name);
		json_num(f, b->dts[i].gemm_tflops);
	}
	fputs("}, \"gemm_rows\": [", f);
	for (int i = 0; i < b->n_dts; i++) {
		if (!b->dts[i].be)
			continue;
		fputs(first ? "\n  " : ",\n  ", f);
		first = 0;
		json_row(f, &b->dts[i].gemm_row);
	}
	fputs("]},\n \"rows\": [", f);
	first = 1;
	for (int i = 0; i < b->n_rows; i++) {
		fputs(first ? "\n  " : ",\n  ", f);
		first = 0;
		json_row(f, &b->rows[i]);
	}
	fputs("\n]}\n", f);
	if (fclose(f) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

static void rows_push(bench *b, const bench_row *r)
{
	if (b->n_rows == b->cap_rows) {
		int cap = b->cap_rows ? 2 * b->cap_rows : 64;
		bench_row *p = realloc(b->rows, (size_t)cap * sizeof(*p));
		if (!p) {
			fprintf(stderr, "bench_ops: out of host memory: row not kept for --json\n");
			return;
		}
		b->rows = p;
		b->cap_rows = cap;
	}
	b->rows[b->n_rows++] = *r;
}

/* ---------------------------------------------------------------- cases */

static op_case *case_new(bench *b, dtype_ctx *d, const model_shape *m, int T)
{
	op_case *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->b = b;
	c->d = d;
	c->m = m;
	c->T = T;
	return c;
}

/* Allocate, initialize, time and free c (built, or NULL when the builder failed); fills r and
 * prints it. Returns r->st. */
static rg_status case_run(bench *b, op_case *c, rg_status built, bench_row *r)
{
	rg_status st = built;

	memset(r, 0, sizeof(*r));
	r->ceiling = NAN;
	if (!c) {
		snprintf(r->op, sizeof(r->op), "(case)");
		snprintf(r->err, sizeof(r->err), "out of host memory");
		r->st = RG_ERR_OOM;
		goto out_print;
	}
	snprintf(r->op, sizeof(r->op), "%s", c->op);
	snprintf(r->model, sizeof(r->model), "%s", c->m ? c->m->name : "-");
	snprintf(r->dtype, sizeof(r->dtype), "%s", c->d->name);
	snprintf(r->shape, sizeof(r->shape), "%s", c->shape);
	r->T = c->T;
	r->n_seq = c->n_seq;
	r->flops = c->flops;
	r->bytes = c->bytes;
	r->compute = c->compute;
	r->ceiling = c->compute ? c->d->gemm_tflops : b->copy_gbs;
	if (st != RG_OK)
		snprintf(c->err, sizeof(c->err), "building the case: out of host memory");
	if (st == RG_OK)
		st = case_alloc(c);
	if (st == RG_OK && c->init)
		st = c->init(c);
	if (st == RG_OK)
		st = case_time(c, r);
	r->st = st;
	snprintf(r->err, sizeof(r->err), "%s", c->err);
	if (st == RG_OK)
		snprintf(r->where, sizeof(r->where), "%s", b->cpu ? "host" :
			 r->ws <= b->l2_bytes ? "L2" : r->ws < b->rot_target ? "L2+HBM" : "HBM");
	else if (!r->err[0])
		snprintf(r->err, sizeof(r->err), "%s: %s", rg_status_name(st), rg_last_error());
	case_free(c);
out_print:
	row_print(r);
	if (r->st != RG_OK) {
		fprintf(stderr, "bench_ops: FAILED %s %s %s T=%d: %s\n", r->op, r->model, r->dtype,
			r->T, r->err);
		b->failures++;
	}
	return r->st;
}

enum case_kind {
	CASE_QKV, CASE_O, CASE_UP, CASE_UP_PLAIN, CASE_DOWN, CASE_LN, CASE_EMBED, CASE_POOL128,
	CASE_POOL500, CASE_ATT128, CASE_ATT_UNIFORM, CASE_GATHER, CASE_BIAS_ACT, CASE_N
};

static rg_status build_case(op_case *c, enum case_kind kind)
{
	const model_shape *m = c->m;
	const int T = c->T;

	switch (kind) {
	case CASE_QKV: build_gemm(c, "QKV", T, 3 * m->H, m->H, true, RG_ACT_NONE, false); break;
	case CASE_O: build_gemm(c, "O", T, m->H, m->H, true, RG_ACT_NONE, false); break;
	case CASE_UP: build_gemm(c, "FFN-up", T, m->I, m->H, true, RG_ACT_GELU, false); break;
	case CASE_UP_PLAIN: build_gemm(c, "FFN-up (no epilogue)", T, m->I, m->H, false,
				       RG_ACT_NONE, true); break;
	case CASE_DOWN: build_gemm(c, "FFN-down", T, m->H, m->I, true, RG_ACT_NONE, false); break;
	case CASE_LN: build_ln(c); break;
	case CASE_EMBED: build_embed(c); break;
	case CASE_POOL128: return build_pool(c, 128);
	case CASE_POOL500: return build_pool(c, 500);
	case CASE_ATT128: return build_attention(c, 128);
	case CASE_ATT_UNIFORM: return build_attention(c, 0);
	case CASE_GATHER: build_gather(c); break;
	case CASE_BIAS_ACT: build_bias_act(c); break;
	case CASE_N: break;
	}
	return RG_OK;
}

static void sweep_dtype(bench *b, dtype_ctx *d)
{
	bench_row r;

	for (int mi = 0; mi < N_MODELS; mi++) {
		const model_shape *m = &MODELS[mi];
		for (int kind = 0; kind < CASE_N; kind++) {
			for (int ti = 0; ti < b->n_tokens; ti++) {
				op_case *c = case_new(b, d, m, b->tokens[ti]);
				rg_status st = c ? build_case(c, (enum case_kind)kind) : RG_OK;
				case_run(b, c, st, &r);
				rows_push(b, &r);
			}
		}
		/* latency: one sequence of 64 tokens */
		{
			op_case *c = case_new(b, d, m, 64);
			rg_status st = c ? build_attention(c, 64) : RG_OK;
			if (c)
				snprintf(c->op, sizeof(c->op), "attention 1 seq (latency)");
			case_run(b, c, st, &r);
			rows_push(b, &r);
		}
	}
}

/* ---------------------------------------------------------------- ceilings */

/* 2 warm-up copies, then COPY_REPS timed ones (events on the fill stream) into times. On failure
 * returns the error and names the call in *what. */
static cudaError_t copy_run(bench *b, void *src, void *dst, cudaEvent_t ev[2], double *times,
			    const char **what)
{
	cudaStream_t s = b->fill_stream;
	cudaError_t e;

	*what = "cudaMemsetAsync";
	if ((e = cudaMemsetAsync(src, 0x3c, b->copy_bytes, s)) != cudaSuccess)
		return e;
	for (int i = 0; i < 2 + COPY_REPS; i++) {
		float ms = 0.f;

		*what = "cudaEventRecord";
		if ((e = cudaEventRecord(ev[0], s)) != cudaSuccess)
			return e;
		*what = "cudaMemcpyAsync(device to device)";
		if ((e = cudaMemcpyAsync(dst, src, b->copy_bytes, cudaMemcpyDeviceToDevice, s)) !=
		    cudaSuccess)
			return e;
		*what = "cudaEventRecord";
		if ((e = cudaEventRecord(ev[1], s)) != cudaSuccess)
			return e;
		*what = "cudaEventSynchronize";
		if ((e = cudaEventSynchronize(ev[1])) != cudaSuccess)
			return e;
		*what = "cudaEventElapsedTime";
		if ((e = cudaEventElapsedTime(&ms, ev[0], ev[1])) != cudaSuccess)
			return e;
		if (i >= 2)
			times[i - 2] = ms * 1e-3;
	}
	return cudaSuccess;
}

/* The CPU twin of copy_run: memcpy, host clock. */
static int copy_run_cpu(bench *b, double *times)
{
	char *src = malloc(b->copy_bytes), *dst = malloc(b->copy_bytes);
	int rc = -1;

	if (!src || !dst) {
		fprintf(stderr, "bench_ops: copy ceiling: out of host memory\n");
		goto out_free;
	}
	memset(src, 0x3c, b->copy_bytes);
	for (int i = 0; i < 2 + COPY_REPS; i++) {
		double t0 = now_s();
		memcpy(dst, src, b->copy_bytes);
		if (i >= 2)
			times[i - 2] = now_s() - t0;
	}
	rc = 0;
out_free:
	free(src);
	free(dst);
	return rc;
}

/* Copy of b->copy_bytes, median of COPY_REPS; bytes read + written count. GPU: cudaMemcpyAsync
 * device to device, timed with events; CPU: memcpy, host clock. Returns 0, or -1 (printed). */
static int measure_copy(bench *b)
{
	double times[COPY_REPS];
	void *src = NULL, *dst = NULL;
	cudaEvent_t ev[2] = {NULL, NULL};
	cudaError_t e = cudaSuccess;
	const char *what = "cudaMalloc";
	int rc = -1;

	if (b->cpu) {
		rc = copy_run_cpu(b, times);
		goto out_result;
	}
	if ((e = cudaMalloc(&src, b->copy_bytes)) != cudaSuccess ||
	    (e = cudaMalloc(&dst, b->copy_bytes)) != cudaSuccess)
		goto out_report;
	what = "cudaEventCreate";
	if ((e = cudaEventCreate(&ev[0])) != cudaSuccess ||
	    (e = cudaEventCreate(&ev[1])) != cudaSuccess)
		goto out_report;
	e = copy_run(b, src, dst, ev, times, &what);
	if (e == cudaSuccess)
		rc = 0;
out_report:
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		fprintf(stderr, "bench_ops: copy ceiling: %s failed: %s\n", what,
			cudaGetErrorString(e));
	}
	if (ev[0])
		cudaEventDestroy(ev[0]);
	if (ev[1])
		cudaEventDestroy(ev[1]);
	cudaFree(src);
	cudaFree(dst);
	(void)cudaGetLastError();
out_result:
	if (rc == 0) {
		median_min(times, COPY_REPS, &b->copy_med_s, &b->copy_min_s);
		b->copy_gbs = 2.0 * (double)b->copy_bytes / b->copy_med_s / 1e9;
	}
	return rc;
}

/* rg_op_gemm at n x n x n on random operands, timed like every case. */
static int measure_gemm(bench *b, dtype_ctx *d)
{
	const int n = b->cpu ? CEIL_GEMM_CPU : CEIL_GEMM;
	op_case *c = case_new(b, d, NULL, n);
	bench_row *r = &d->gemm_row;

	if (c)
		build_gemm(c, "ceiling", n, n, n, false, RG_ACT_NONE, true);
	if (case_run(b, c, RG_OK, r) != RG_OK)
		return -1;
	d->gemm_tflops = r->flops / r->med_s / 1e12;
	return 0;
}

/* ---------------------------------------------------------------- main */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_ops [--json FILE] [--commit SHA] [--quick] [--fp32] [--tokens LIST]\n"
		"                 [--reps N] [--device N] [--cpu]\n"
		"  --json FILE    also write rows, ceilings, GPU, commit and date as JSON\n"
		"  --commit SHA   commit to record (default: $RAGGED_COMMIT, else \"unknown\")\n"
		"  --quick        T = 2048 only and 3 repeats (about a third of the sweep)\n"
		"  --fp32         add the fp32 backend to fp16 and bf16\n"
		"  --tokens LIST  comma-separated token counts (default 128,2048,32768)\n"
		"  --reps N       timed repeats per case, 1..%d (default 5)\n"
		"  --device N     CUDA device (default 0)\n"
		"  --cpu          run on the CPU reference backend (fp32, no graphs), to check the\n"
		"                 benchmark itself without a GPU; default tokens 128\n"
		"Exit status: 0 ok, 1 some op or measurement failed, 2 usage, 77 no CUDA device.\n",
		MAX_REPS);
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int parse_tokens(bench *b, const char *s)
{
	char buf[256], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	b->n_tokens = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (b->n_tokens == MAX_TOKENS || parse_int(tok, 1, 1 << 20, &b->tokens[b->n_tokens]))
			return -1;
		b->n_tokens++;
	}
	return b->n_tokens ? 0 : -1;
}

/* Backend and random pool of one dtype; on failure d->be stays NULL and the dtype is skipped. */
static int dtype_setup(bench *b, dtype_ctx *d, rg_dtype dt)
{
	float *h;
	rg_status st;

	d->dt = dt;
	d->name = dtype_name(dt);
	d->esz = rg_dtype_size(dt);
	d->gemm_tflops = NAN;
	st = rg_backend_init(b->cpu ? RG_DEVICE_CPU : RG_DEVICE_CUDA, b->device, dt, &d->be);
	if (st != RG_OK) {
		d->be = NULL;
		return st == RG_ERR_UNSUPPORTED ? 77 : -1;
	}
	h = malloc(POOL_ELEMS * sizeof(*h));
	if (!h) {
		fprintf(stderr, "bench_ops: out of host memory\n");
		goto out_free_backend;
	}
	for (size_t i = 0; i < POOL_ELEMS; i++)
		h[i] = rng_uniform(&b->rng, -1.f, 1.f);
	st = rg_backend_alloc(d->be, POOL_ELEMS * d->esz, &d->pool);
	if (st == RG_OK)
		st = rg_backend_upload_f32_as(d->be, d->pool, h, POOL_ELEMS, dt);
	free(h);
	if (st != RG_OK) {
		fprintf(stderr, "bench_ops: %s random pool: %s: %s\n", d->name, rg_status_name(st),
			rg_last_error());
		goto out_free_pool;
	}
	return 0;

out_free_pool:
	rg_backend_dealloc(d->be, d->pool);
	d->pool = NULL;
out_free_backend:
	rg_backend_free(d->be);
	d->be = NULL;
	return -1;
}

int main(int argc, char **argv)
{
	bench b;
	struct cudaDeviceProp prop;
	const char *json = NULL, *commit = getenv("RAGGED_COMMIT");
	char gpu[320], date[32];
	bool fp32 = false, quick = false, tokens_given = false;
	double t_start = now_s();
	time_t now = time(NULL);
	int rc;

	memset(&b, 0, sizeof(b));
	memset(&prop, 0, sizeof(prop));
	b.reps = 5;
	b.rng = 0x7a99edull;
	b.copy_gbs = b.copy_med_s = b.copy_min_s = NAN;
	b.tokens[0] = 128;
	b.tokens[1] = 2048;
	b.tokens[2] = 32768;
	b.n_tokens = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json") && v) {
			json = v;
			i++;
		} else if (!strcmp(a, "--commit") && v) {
			commit = v;
			i++;
		} else if (!strcmp(a, "--tokens") && v) {
			if (parse_tokens(&b, v)) {
				fprintf(stderr, "bench_ops: bad --tokens %s\n", v);
				return 2;
			}
			tokens_given = true;
			i++;
		} else if (!strcmp(a, "--reps") && v) {
			if (parse_int(v, 1, MAX_REPS, &b.reps)) {
				fprintf(stderr, "bench_ops: bad --reps %s\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--device") && v) {
			if (parse_int(v, 0, 1023, &b.device)) {
				fprintf(stderr, "bench_ops: bad --device %s\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--quick")) {
			quick = true;
		} else if (!strcmp(a, "--fp32")) {
			fp32 = true;
		} else if (!strcmp(a, "--cpu")) {
			b.cpu = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "bench_ops: unknown or incomplete option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!commit || !commit[0])
		commit = "unknown";
	if (quick && !tokens_given) {
		b.tokens[0] = 2048;
		b.n_tokens = 1;
	}
	if (quick && b.reps > 3)
		b.reps = 3;
	if (b.cpu && !tokens_given) {
		b.tokens[0] = 128;
		b.n_tokens = 1;
	}
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

	/* backends: the first tells whether there is a device at all */
	if (b.cpu) {
		rc = dtype_setup(&b, &b.dts[b.n_dts++], RG_DTYPE_F32);
	} else {
		rc = dtype_setup(&b, &b.dts[b.n_dts++], RG_DTYPE_F16);
		if (rc == 77) {
			fprintf(stderr, "bench_ops: no usable CUDA device (%s); nothing to measure\n",
				rg_last_error());
			return 77;
		}
	}
	if (rc != 0) {
		fprintf(stderr, "bench_ops: cannot set up the %s backend: %s\n", b.dts[0].name,
			rg_last_error());
		return 1;
	}
	if (b.cpu) {
		snprintf(gpu, sizeof(gpu), "CPU (reference backend)");
		b.l2_bytes = 1 << 20; /* small, so that rotation is exercised */
		b.copy_bytes = COPY_BYTES_CPU;
	} else {
		cudaError_t e = cudaGetDeviceProperties(&prop, b.device);
		if (e == cudaSuccess)
			e = cudaSetDevice(b.device);
		if (e == cudaSuccess)
			e = cudaStreamCreateWithFlags(&b.fill_stream, cudaStreamNonBlocking);
		if (e != cudaSuccess) {
			fprintf(stderr, "bench_ops: CUDA device %d: %s\n", b.device,
				cudaGetErrorString(e));
			rg_backend_dealloc(b.dts[0].be, b.dts[0].pool);
			rg_backend_free(b.dts[0].be);
			return 1;
		}
		snprintf(gpu, sizeof(gpu), "%s", prop.name);
		b.l2_bytes = prop.l2CacheSize > 0 ? (double)prop.l2CacheSize : 50e6;
		b.copy_bytes = COPY_BYTES;
		if (dtype_setup(&b, &b.dts[b.n_dts++], RG_DTYPE_BF16) != 0) {
			fprintf(stderr, "bench_ops: bf16 backend: %s (skipped)\n", rg_last_error());
			b.failures++;
		}
		if (fp32 && dtype_setup(&b, &b.dts[b.n_dts++], RG_DTYPE_F32) != 0) {
			fprintf(stderr, "bench_ops: fp32 backend: %s (skipped)\n", rg_last_error());
			b.failures++;
		}
	}
	b.rot_target = 2.0 * b.l2_bytes;

	printf("# ragged kernel benchmark (bench/kernels/bench_ops.c)\n\n");
	if (b.cpu)
		printf("device: %s -- a check of the benchmark, not a measurement\n", gpu);
	else
		printf("GPU: %s (cc %d.%d, %d SMs, L2 %.0f MB, %.1f GiB); build archs %s\n", gpu,
		       prop.major, prop.minor, prop.multiProcessorCount, b.l2_bytes / 1e6,
		       (double)prop.totalGlobalMem / (1 << 30), rg_build_cuda_archs());
	printf("commit: %s   date: %s\n", commit, date);
	printf("method: per call = host clock around (graph of R calls) x G launches + sync, / (R*G);"
	       " median and min of %d repeats; operands rotate over copies until a launch touches "
	       "%.0f MB (2 x L2); inputs uniform in [-1, 1]\n\n", b.reps, b.rot_target / 1e6);

	/* ceilings, measured in this run */
	printf("## Ceilings\n\n| ceiling | what | time | rate |\n|---|---|---|---|\n");
	fflush(stdout);
	if (measure_copy(&b) == 0) {
		char t[32];
		fmt_time(t, sizeof(t), b.copy_med_s);
		printf("| copy | %s of %.0f MiB, read + written, median of %d | %s | %.0f GB/s |\n",
		       b.cpu ? "memcpy" : "cudaMemcpyAsync device to device",
		       (double)b.copy_bytes / (1 << 20), COPY_REPS, t, b.copy_gbs);
	} else {
		printf("| copy | FAILED (see stderr) | - | - |\n");
		b.failures++;
	}
	printf("\n");
	fflush(stdout);
	printf("| op | model | dtype | T | shape | data | time/call | min | achieved | %% |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < b.n_dts; i++)
		if (b.dts[i].be)
			measure_gemm(&b, &b.dts[i]);
	printf("\n## Ops (achieved vs the ceilings above: GEMM rate of the dtype for GEMMs and "
	       "attention, copy bandwidth for the rest)\n\n");
	printf("| op | model | dtype | T | shape | data | time/call | min | achieved | %% |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	fflush(stdout);
	for (int i = 0; i < b.n_dts; i++)
		if (b.dts[i].be)
			sweep_dtype(&b, &b.dts[i]);

	printf("\n%d rows, %d failures, %.1f s\n", b.n_rows, b.failures, now_s() - t_start);
	if (json) {
		if (json_write(&b, json, gpu, commit, date) == 0)
			printf("wrote %s\n", json);
		else
			b.failures++;
	}
	for (int i = 0; i < b.n_dts; i++) {
		if (!b.dts[i].be)
			continue;
		rg_backend_dealloc(b.dts[i].be, b.dts[i].pool);
		rg_backend_free(b.dts[i].be);
	}
	if (b.fill_stream)
		cudaStreamDestroy(b.fill_stream);
	free(b.rows);
	return b.failures ? 1 : 0;
}
