/* cpu_single.c: where one sentence's time goes on the CPU backend, whole model against its GEMMs.
 *
 * For each length T of --tokens, in this process on RAGGED_NUM_THREADS threads (ragged's pool):
 *   model_ms  rg_model_embed of one sentence of T random ids ([CLS] ... [SEP]) through the model in
 *             DIR (fp32): the whole forward, embeddings to the pooled, normalised vector;
 *   gemm_ms   the same model's linear layers alone: per layer QKV (3H x H), output (H x H), FFN up
 *             (I x H, bias + exact GELU) and down (H x I), each its own prepared weight (random,
 *             the model's shapes, one copy per layer as the model holds them, so the weights come
 *             from memory as they do in the forward), through rg_op_gemm_bias_act on (T, H)
 *             activations: the GEMM work ragged's forward does, with nothing else.
 * Each time is the median of repetitions lasting --budget seconds (at least 5) after 3 warm-ups.
 * The difference model_ms - gemm_ms is what the non-GEMM ops (embeddings, attention, LayerNorm,
 * pooling) and the per-call overheads cost. bench/peer/single_floor.py runs this beside the same
 * split for PyTorch, in rounds, to bound what any runtime built on these GEMMs can reach.
 *
 * Then each op kind alone over every layer (ops_ms): the four linear layers, attention of the
 * one sequence (rg_op_attention on the QKV output) and the two residual LayerNorms, each the
 * median over --budget / 3 seconds.
 * Output: one JSON object per T on stdout:
 *   {"T":64,"model_ms":..,"gemm_ms":..,"gemm_gflops":..,"model_gflops":..,"layers":6,...,
 *    "ops_ms":{"qkv":..,"out":..,"up_gelu":..,"down":..,"attention":..,"layernorm":..}}
 * GFLOP/s count the linear layers' 2*T*(4H^2 + 2HI) per layer (model_gflops adds attention's
 * 4*H*T^2). Exit status 0, 1 on a load or run failure, 2 on a bad command line.
 * With --read-bw MB: no model; the read bandwidth of ragged's pool instead, the floor of a
 * forward that must read every weight once: an MB-megabyte buffer (the model's fp32 linear
 * weights: 340 for BERT-base) summed as 64-bit words, one slice per pool thread, the median of
 * 9 passes after one that faults the pages in: {"read_mb":340,"threads":2,"read_gbps":...}.
 * Usage: make build/bench_cpu_single && RAGGED_NUM_THREADS=1 build/bench_cpu_single DIR
 *        [--tokens 30,64,130] [--budget 1.0]
 *        RAGGED_NUM_THREADS=2 build/bench_cpu_single --read-bw 340 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/threadpool.h"
#include "ops/ops.h"
#include "ragged.h"

#define MAX_T 16
#define MAX_REPS 100000

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median seconds of fn(ctx) over repetitions filling budget_s (>= 5), after 3 warm-ups;
 * negative when fn fails. */
static double median_s(int (*fn)(void *), void *ctx, double budget_s)
{
	static double t[MAX_REPS];
	double t_end;
	int n = 0;

	for (int i = 0; i < 3; i++)
		if (fn(ctx))
			return -1;
	t_end = now_s() + budget_s;
	while (n < MAX_REPS && (n < 5 || now_s() < t_end)) {
		const double t0 = now_s();

		if (fn(ctx))
			return -1;
		t[n++] = now_s() - t0;
	}
	qsort(t, (size_t)n, sizeof(double), cmp_d);
	return t[n / 2];
}

struct model_run {
	rg_model *m;
	const int32_t *ids;
	int32_t cu[2];
	float *out;
};

static int model_once(void *ctx)
{
	struct model_run *r = ctx;

	return rg_model_embed(r->m, r->ids, r->cu, 1, r->out) != RG_OK;
}

struct layer {
	float *qkv, *o, *up, *down;
	float *b_qkv, *b_o, *b_up, *b_down;
};

struct gemm_run {
	rg_backend *be;
	struct layer *L;
	int n_layers, T, H, I;
	float *x, *qkv, *up, *y;
	float *gamma, *beta;
};

static int gemms_once(void *ctx)
{
	const struct gemm_run *g = ctx;
	const int T = g->T, H = g->H, I = g->I;

	for (int l = 0; l < g->n_layers; l++) {
		const struct layer *L = &g->L[l];

		if (rg_op_gemm_bias_act(g->be, g->x, L->qkv, L->b_qkv, g->qkv, T, 3 * H, H,
					RG_ACT_NONE) ||
		    rg_op_gemm_bias_act(g->be, g->qkv, L->o, L->b_o, g->y, T, H, H, RG_ACT_NONE) ||
		    rg_op_gemm_bias_act(g->be, g->y, L->up, L->b_up, g->up, T, I, H, RG_ACT_GELU) ||
		    rg_op_gemm_bias_act(g->be, g->up, L->down, L->b_down, g->x, T, H, I,
					RG_ACT_NONE))
			return 1;
	}
	return 0;
}

/* One op kind of the forward, alone, for every layer: which is 0..3 the linear layers (QKV,
 * output, FFN up with GELU, FFN down), 4 attention on the sequence, 5 the two residual
 * LayerNorms of a layer. */
struct op_run {
	struct gemm_run *g;
	int which, n_heads;
	int32_t cu[2];
	float *gamma, *beta;
};

static int op_once(void *ctx)
{
	const struct op_run *o = ctx;
	const struct gemm_run *g = o->g;
	const int T = g->T, H = g->H, I = g->I, hd = H / o->n_heads;
	rg_status s = RG_OK;

	for (int l = 0; l < g->n_layers && s == RG_OK; l++) {
		const struct layer *L = &g->L[l];

		switch (o->which) {
		case 0:
			s = rg_op_gemm_bias_act(g->be, g->x, L->qkv, L->b_qkv, g->qkv, T, 3 * H, H,
						RG_ACT_NONE);
			break;
		case 1:
			s = rg_op_gemm_bias_act(g->be, g->y, L->o, L->b_o, g->x, T, H, H, RG_ACT_NONE);
			break;
		case 2:
			s = rg_op_gemm_bias_act(g->be, g->x, L->up, L->b_up, g->up, T, I, H,
						RG_ACT_GELU);
			break;
		case 3:
			s = rg_op_gemm_bias_act(g->be, g->up, L->down, L->b_down, g->y, T, H, I,
						RG_ACT_NONE);
			break;
		case 4:
		{
			const rg_attn_desc ad = rg_attn_packed(1, o->cu, o->cu, T, o->n_heads, hd,
							       1.f / sqrtf((float)hd));

			s = rg_op_attention(g->be, &ad, g->qkv, g->y);
			break;
		}
		default:
			s = rg_op_bias_residual_layernorm(g->be, g->y, L->b_o, g->x, o->gamma,
							  o->beta, 1e-12f, T, H, g->y);
			if (s == RG_OK)
				s = rg_op_bias_residual_layernorm(g->be, g->y, L->b_down, g->x,
								  o->gamma, o->beta, 1e-12f, T, H,
								  g->y);
		}
	}
	return s != RG_OK;
}

static float *rand_buf(size_t n, float scale, unsigned *seed)
{
	float *p = malloc(n * sizeof(float));

	for (size_t i = 0; p && i < n; i++)
		p[i] = scale * ((float)rand_r(seed) / (float)RAND_MAX - 0.5f);
	return p;
}

/* A prepared (N, K) weight in backend memory (freed by rg_backend_dealloc, which forgets the
 * preparation) and its (N) bias (malloc); false on failure. */
static bool make_weight(rg_backend *be, int N, int K, unsigned *seed, float **w, float **b)
{
	float *host = rand_buf((size_t)N * K, 0.1f, seed);
	bool ok = host && rg_backend_alloc(be, (size_t)N * K * sizeof(float), (void **)w) == RG_OK &&
		  rg_backend_upload(be, *w, host, (size_t)N * K * sizeof(float)) == RG_OK &&
		  rg_op_prepare_weight(be, *w, N, K) == RG_OK;

	free(host);
	*b = rand_buf((size_t)N, 0.1f, seed);
	return ok && *b;
}

struct read_job {
	const uint64_t *buf;
	size_t n; /* words */
	int parts;
	uint64_t sums[256];
};

/* Sum words [a, b) of buf (multiples of 8: whole lines) in vectors of vb bytes, a line per step,
 * prefetched 4 KiB ahead as the GEMM kernels prefetch their weights. */
#define READ_BODY(vb)                                                                        \
	{                                                                                    \
		typedef uint64_t vu __attribute__((vector_size(vb), aligned(vb)));          \
		const vu *v = (const vu *)buf;                                               \
		const size_t per = 64 / (vb);                                                \
		vu s0 = {0}, s1 = {0};                                                       \
                                                                                             \
		for (size_t i = a / (vb / 8); i < b / (vb / 8); i += per) {                  \
			__builtin_prefetch(v + i + 64 * per, 0, 2);                          \
			for (size_t k = 0; k < per; k += 2) {                                \
				s0 += v[i + k];                                              \
				s1 += per > 1 ? v[i + k + 1] : (vu){0};                      \
			}                                                                    \
		}                                                                            \
		s0 += s1;                                                                    \
		return s0[0];                                                                \
	}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint64_t *buf, size_t a,
								 size_t b)
READ_BODY(64)
#endif

static uint64_t read_plain(const uint64_t *buf, size_t a, size_t b)
READ_BODY(16)

static void read_task(void *ctx, int task, int thread)
{
	struct read_job *j = ctx;
	const size_t a = j->n * (size_t)task / (size_t)j->parts / 8 * 8;
	const size_t b = j->n * (size_t)(task + 1) / (size_t)j->parts / 8 * 8;

	(void)thread;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx512f")) {
		j->sums[task] = read_avx512(j->buf, a, b);
		return;
	}
#endif
	j->sums[task] = read_plain(j->buf, a, b);
}

/* --read-bw: GB/s of ragged's pool reading mb megabytes once (see the file comment). */
static int read_bw(double mb)
{
	rg_threadpool *pool = rg_threadpool_global();
	struct read_job j = {.n = (size_t)(mb * 1e6) / 8, .parts = rg_threadpool_size(pool)};
	uint64_t *buf;
	double t[9];

	if (j.parts > 256 || j.n < 1024 || !(buf = aligned_alloc(64, j.n * 8)))
		return 1;
	for (size_t i = 0; i < j.n; i++)
		buf[i] = i;
	j.buf = buf;
	rg_threadpool_run(pool, j.parts, read_task, &j);
	for (int r = 0; r < 9; r++) {
		const double t0 = now_s();

		rg_threadpool_run(pool, j.parts, read_task, &j);
		t[r] = now_s() - t0;
	}
	qsort(t, 9, sizeof(double), cmp_d);
	printf("{\"read_mb\":%.1f,\"threads\":%d,\"read_gbps\":%.2f,\"check\":%llu}\n", mb,
	       j.parts, (double)j.n * 8 / t[4] * 1e-9, (unsigned long long)j.sums[0] % 10);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int tokens[MAX_T] = {30, 64, 130}, n_t = 3;
	double budget = 1.0;
	const char *dir = NULL;
	unsigned seed = 20261123;

	if (argc == 3 && !strcmp(argv[1], "--read-bw"))
		return read_bw(atof(argv[2]));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
			char *p = argv[++i];

			n_t = 0;
			while (*p && n_t < MAX_T) {
				tokens[n_t++] = (int)strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
		} else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
			budget = atof(argv[++i]);
		} else if (argv[i][0] != '-' && !dir) {
			dir = argv[i];
		} else {
			fprintf(stderr, "usage: %s DIR [--tokens 30,64,130] [--budget S]\n", argv[0]);
			return 2;
		}
	}
	if (!dir || n_t < 1 || budget <= 0) {
		fprintf(stderr, "usage: %s DIR [--tokens 30,64,130] [--budget S]\n", argv[0]);
		return 2;
	}
	int max_t = 0;
	for (int i = 0; i < n_t; i++) {
		if (tokens[i] < 2) {
			fprintf(stderr, "--tokens: every length >= 2\n");
			return 2;
		}
		max_t = tokens[i] > max_t ? tokens[i] : max_t;
	}

	rg_model_params mp = rg_model_params_default();
	rg_status st;
	mp.device = RG_DEVICE_CPU;
	mp.dtype = RG_DTYPE_F32;
	mp.max_batch_tokens = max_t;
	rg_model *m = rg_model_load(dir, &mp, &st);
	if (!m) {
		fprintf(stderr, "load %s: %s\n", dir, rg_last_error());
		return 1;
	}
	const rg_model_info *info = rg_model_get_info(m);
	const int H = info->hidden_size, I = info->intermediate_size;
	const int n_layers = info->num_hidden_layers;

	rg_backend *be = NULL;
	struct layer *L = calloc((size_t)n_layers, sizeof(*L));
	struct gemm_run g = {.n_layers = n_layers, .H = H, .I = I, .L = L};
	int rc = 0;

	if (!L || rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &be) != RG_OK) {
		fprintf(stderr, "backend: %s\n", rg_last_error());
		return 1;
	}
	g.be = be;
	for (int l = 0; l < n_layers; l++)
		if (!make_weight(be, 3 * H, H, &seed, &L[l].qkv, &L[l].b_qkv) ||
		    !make_weight(be, H, H, &seed, &L[l].o, &L[l].b_o) ||
		    !make_weight(be, I, H, &seed, &L[l].up, &L[l].b_up) ||
		    !make_weight(be, H, I, &seed, &L[l].down, &L[l].b_down)) {
			fprintf(stderr, "weights: %s\n", rg_last_error());
			return 1;
		}
	g.x = rand_buf((size_t)max_t * H, 1.f, &seed);
	g.qkv = calloc((size_t)max_t * 3 * H, sizeof(float));
	g.up = calloc((size_t)max_t * I, sizeof(float));
	g.y = calloc((size_t)max_t * H, sizeof(float));
	int32_t *ids = malloc((size_t)max_t * sizeof(int32_t));
	float *out = malloc((size_t)info->output_dim * sizeof(float));
	g.gamma = rand_buf((size_t)H, 1.f, &seed);
	g.beta = rand_buf((size_t)H, 1.f, &seed);
	if (!g.x || !g.qkv || !g.up || !g.y || !g.gamma || !g.beta || !ids || !out)
		return 1;

	for (int ti = 0; ti < n_t; ti++) {
		const int T = tokens[ti];
		struct model_run r = {m, ids, {0, T}, out};

		ids[0] = 101;
		for (int i = 1; i < T - 1; i++)
			ids[i] = 1000 + (int)(rand_r(&seed) % 20000u);
		ids[T - 1] = 102;
		g.T = T;
		/* the GEMMs overwrite x with the last layer's output; refill it per length so the
		 * values stay bounded */
		for (size_t i = 0; i < (size_t)T * H; i++)
			g.x[i] = (float)rand_r(&seed) / (float)RAND_MAX - 0.5f;
		const double tm = median_s(model_once, &r, budget);
		const double tg = median_s(gemms_once, &g, budget);
		if (tm < 0 || tg < 0) {
			fprintf(stderr, "T=%d: %s\n", T, rg_last_error());
			rc = 1;
			continue;
		}
		static const char *const op_names[6] = {"qkv", "out", "up_gelu", "down",
							 "attention", "layernorm"};
		double op_ms[6];
		struct op_run o = {&g, 0, info->num_attention_heads, {0, T}, g.gamma, g.beta};

		for (int k = 0; k < 6 && rc == 0; k++) {
			o.which = k;
			op_ms[k] = 1e3 * median_s(op_once, &o, budget / 3);
			if (op_ms[k] < 0) {
				fprintf(stderr, "T=%d %s: %s\n", T, op_names[k], rg_last_error());
				rc = 1;
			}
		}
		if (rc)
			continue;
		const double lin = (double)n_layers * 2.0 * T * (4.0 * H * H + 2.0 * H * I);
		const double attn = (double)n_layers * 4.0 * H * (double)T * T;
		printf("{\"T\":%d,\"model_ms\":%.4f,\"gemm_ms\":%.4f,\"gemm_gflops\":%.2f,"
		       "\"model_gflops\":%.2f,\"layers\":%d,\"hidden_size\":%d,"
		       "\"intermediate_size\":%d,\"ops_ms\":{",
		       T, tm * 1e3, tg * 1e3, lin / tg * 1e-9, (lin + attn) / tm * 1e-9, n_layers, H,
		       I);
		for (int k = 0; k < 6; k++)
			printf("%s\"%s\":%.4f", k ? "," : "", op_names[k], op_ms[k]);
		printf("}}\n");
		fflush(stdout);
	}
	for (int l = 0; l < n_layers; l++) {
		rg_backend_dealloc(be, L[l].qkv), rg_backend_dealloc(be, L[l].o);
		rg_backend_dealloc(be, L[l].up), rg_backend_dealloc(be, L[l].down);
		free(L[l].b_qkv), free(L[l].b_o), free(L[l].b_up), free(L[l].b_down);
	}
	free(L), free(g.x), free(g.qkv), free(g.up), free(g.y), free(g.gamma), free(g.beta);
	free(ids), free(out);
	rg_backend_free(be);
	rg_model_free(m);
	return rc;
}
