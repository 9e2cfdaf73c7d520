/* CPU kernels for the BERT encoder ops (float32): ragged's thread pool (core/threadpool.h) runs
 * every op; GEMMs are tiles of single-threaded OpenBLAS sgemm, each followed by its bias and
 * activation while the tile is in cache; LayerNorm, activations, pooling and attention are the
 * vectorised bodies of kern.h, chosen at run time for the CPU (AVX-512, AVX2 or baseline);
 * attention is two sgemm calls per (query block, head) around a vectorised row softmax (after
 * the optional relative position bias is added to the scores).
 *
 * Each function has exactly the semantics documented for its rg_op_* twin in src/ops/ops.h; the
 * CUDA kernels are tested against these. Reductions accumulate in float32 as the contract says
 * (the float64 NumPy model in tests/py/ref_bert.py is the independent check of these kernels).
 * Pointers are host memory; sizes are elements. rg_cpu_attention allocates one scratch block per
 * pool thread for the call; nothing else allocates. */
#include "ops/cpu/ops_cpu.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/gguf.h"
#include "core/threadpool.h"
#include "core/tuning.h"
#include "ops/cpu/cpu_kern.h"
#include "ops/cpu/gemm_dnnl.h"

/* The kernel tables, narrowest first; g_best indexes the widest this CPU runs. */
static const rg_cpu_kern *const g_tables[] = {&rg_cpu_kern_generic, &rg_cpu_kern_avx2,
					       &rg_cpu_kern_avx512};
static int g_best;
static const rg_cpu_kern *g_kern;
static pthread_once_t g_kern_once = PTHREAD_ONCE_INIT;

/* The table named isa if this CPU runs it (it is no wider than g_best), else NULL. */
static const rg_cpu_kern *table_named(const char *isa)
{
	for (int i = 0; isa && i <= g_best; i++)
		if (strcmp(g_tables[i]->isa, isa) == 0)
			return g_tables[i];
	return NULL;
}

static void kern_init(void)
{
	const rg_cpu_kern *want;

	g_best = 0;
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	/* f16c: the quantized kernels' fp16 block scales (every AVX2 CPU has it) */
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c"))
		g_best = 1;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw"))
		g_best = 2;
#endif
	/* a narrower table on request (never a wider one than the CPU runs) */
	if (rg_tuning_enum(RG_TUNE_CPU_ISA) == RG_CPU_ISA_AUTO) {
		g_kern = g_tables[g_best];
		return;
	}
	want = table_named(rg_tuning_str(RG_TUNE_CPU_ISA));
	if (!want)
		fprintf(stderr, "ragged: warning: RAGGED_CPU_ISA=%s: this CPU does not run it; using "
			"%s\n", rg_tuning_str(RG_TUNE_CPU_ISA), g_tables[g_best]->isa);
	g_kern = want ? want : g_tables[g_best];
}

static pthread_once_t g_warn_once = PTHREAD_ONCE_INIT;

/* Once per process, at the first GEMM: say so when OpenBLAS runs pre-AVX2 kernels here. */
static void blas_warn(void)
{
	const char *fix = rg_cpu_blas_coretype_fix();

	if (fix && !getenv("OPENBLAS_CORETYPE"))
		fprintf(stderr,
			"ragged: warning: OpenBLAS runs its %s kernels on this %s CPU (several times "
			"slower); set OPENBLAS_CORETYPE=%s before the process starts\n",
			rg_cpu_blas_core(), rg_cpu_isa(), fix);
}

const rg_cpu_kern *rg_cpu_kern_select(void)
{
	pthread_once(&g_kern_once, kern_init);
	return g_kern;
}

rg_status rg_cpu_force_isa(const char *isa)
{
	const rg_cpu_kern *t;

	pthread_once(&g_kern_once, kern_init);
	t = table_named(isa);
	if (!t)
		return rg_errorf(RG_ERR_UNSUPPORTED, "cpu isa %s: not run by this CPU (best: %s)",
				 isa ? isa : "(null)", g_tables[g_best]->isa);
	g_kern = t;
	return RG_OK;
}

/* OpenBLAS core names whose sgemm kernels use neither AVX2 nor AVX-512 */
static bool blas_core_is_pre_avx2(const char *core)
{
	static const char *const old[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
					  "Atom", "Sandybridge", "Bulldozer", "Piledriver",
					  "Steamroller", "Excavator", "Barcelona", "Opteron",
					  "Katmai", "Coppermine", "Northwood", "Banias", "Unknown"};

	for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
		if (strcasecmp(core, old[i]) == 0)
			return true;
	return false;
}

const char *rg_cpu_blas_core(void)
{
	const char *c = openblas_get_corename();

	return c ? c : "unknown";
}

const char *rg_cpu_blas_coretype_fix(void)
{
	const rg_cpu_kern *k = rg_cpu_kern_select();

	if (!blas_core_is_pre_avx2(rg_cpu_blas_core()))
		return NULL;
	if (strcmp(k->isa, "avx512") == 0)
		return "SkylakeX";
	if (strcmp(k->isa, "avx2") == 0)
		return "Haswell";
	return NULL;
}

const char *rg_cpu_isa(void)
{
	return rg_cpu_kern_select()->isa;
}

const char *rg_cpu_gemm_lib(void)
{
	return rg_dnnl_describe();
}

int rg_cpu_num_threads(void)
{
	return rg_threadpool_size(rg_threadpool_global());
}

/* Rows per task for the row-parallel ops: enough rows that a task outweighs its dispatch
 * (about 8 K floats), few enough that every thread gets some. */
static int rows_per_task(int M, int N)
{
	int T = rg_threadpool_size(rg_threadpool_global());
	int r = (8192 + N - 1) / N;
	int per = (M + T - 1) / T;

	if (r > per)
		r = per;
	return r < 1 ? 1 : r;
}

struct embed_job {
	const int32_t *tokens, *positions;
	const float *word, *pos, *type0, *gamma, *beta;
	float eps;
	int n, H, rows;
	float *out;
};

static void embed_task(void *ctx, int task, int thread)
{
	const struct embed_job *j = ctx;
	const rg_cpu_kern *k = rg_cpu_kern_select();
	int t1 = (task + 1) * j->rows < j->n ? (task + 1) * j->rows : j->n;

	for (int t = task * j->rows; t < t1; t++)
		k->add_ln_row(j->word + (size_t)j->tokens[t] * j->H,
			      j->pos + (size_t)j->positions[t] * j->H, j->type0, j->gamma, j->beta,
			      j->eps, j->H, j->out + (size_t)t * j->H);
}

rg_status rg_cpu_embed_layernorm(const int32_t *tokens, const int32_t *positions, int n_tokens,
				 const float *word, const float *pos, const float *type0,
				 const float *gamma, const float *beta, float eps, int H, float *out)
{
	struct embed_job j = {tokens, positions, word, pos, type0, gamma, beta, eps, n_tokens, H,
			      0, out};

	if (n_tokens == 0)
		return RG_OK;
	j.rows = rows_per_task(n_tokens, H);
	rg_threadpool_run(rg_threadpool_global(), (n_tokens + j.rows - 1) / j.rows, embed_task, &j);
	return RG_OK;
}

struct gemm_job {
	const float *A, *W, *bias;
	float *out;
	int M, N, K, mb, nb, n_nt;
	rg_act act;
};

static void gemm_task(void *ctx, int task, int thread)
{
	const struct gemm_job *j = ctx;
	const int m0 = task / j->n_nt * j->mb, n0 = task % j->n_nt * j->nb;
	const int rows = j->M - m0 < j->mb ? j->M - m0 : j->mb;
	const int cols = j->N - n0 < j->nb ? j->N - n0 : j->nb;
	float *o = j->out + (size_t)m0 * j->N + n0;

	/* o (rows, cols) = A[m0:] (rows, K) * W[n0:]^T, W stored (N, K) row-major */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, j->K, 1.f,
		    j->A + (size_t)m0 * j->K, j->K, j->W + (size_t)n0 * j->K, j->K, 0.f, o, j->N);
	if (j->bias || j->act != RG_ACT_NONE)
		rg_cpu_kern_select()->bias_act_rows(o, (size_t)j->N, j->bias ? j->bias + n0 : NULL,
						    rows, cols, j->act);
}

/* Tile the (M, N) output for T threads.
 * - M <= 256 (a few sentences: the weights dominate): whole rows, N cut into T column blocks
 *   (multiples of 8), so every weight row is packed by exactly one tile and the tiles are even;
 *   row blocks are halved only when N has too few columns for T blocks.
 * - Larger M: 256-row blocks, then narrower column blocks (>= 64 columns, multiples of 16)
 *   until every thread has two tiles, then shorter row blocks (>= 16 rows). */
static void gemm_tiles(int M, int N, int T, int *mb, int *nb)
{
	int m = M < 256 ? M : 256, n = N;

	if (M <= 256) {
		n = ((N + T - 1) / T + 7) / 8 * 8;
		while ((long)((M + m - 1) / m) * ((N + n - 1) / n) < T && m > 16)
			m = (m + 1) / 2;
		*mb = m;
		*nb = n;
		return;
	}
	while ((long)((M + m - 1) / m) * ((N + n - 1) / n) < 2L * T) {
		if (n >= 128)
			n = (n / 2 + 15) / 16 * 16;
		else if (m > 16)
			m = (m + 1) / 2;
		else
			break;
	}
	*mb = m;
	*nb = n;
}

/* Rows up to which gemm_blk replaces oneDNN by default (rg_cpu_smallm_max says more): 192 on a
 * pool of up to RG_CPU_SMALLM_FEW_THREADS threads, 32 (one short sentence) on a larger one. */
#define RG_CPU_SMALLM_DEFAULT 192
#define RG_CPU_SMALLM_MANY_THREADS 32
#define RG_CPU_SMALLM_FEW_THREADS 2

int rg_cpu_smallm_max(void)
{
	const int n = rg_tuning_int(RG_TUNE_CPU_SMALLM); /* -1: auto, the default by pool size */

	if (n >= 0)
		return n < RG_CPU_SMALLM_MAX ? n : RG_CPU_SMALLM_MAX;
	return rg_threadpool_size(rg_threadpool_global()) <= RG_CPU_SMALLM_FEW_THREADS
		       ? RG_CPU_SMALLM_DEFAULT
		       : RG_CPU_SMALLM_MANY_THREADS;
}

struct gemv_job {
	const rg_cpu_kern *k;
	const float *A, *W, *bias;
	float *out;
	int M, N, K, rows; /* rows of W per task, a multiple of 4 */
	rg_act act;
};

static void gemv_task(void *ctx, int task, int thread)
{
	const struct gemv_job *j = ctx;
	const int n0 = task * j->rows, n1 = n0 + j->rows < j->N ? n0 + j->rows : j->N;

	(void)thread;
	j->k->gemv_rm(j->A, (size_t)j->K, j->M, j->W, (size_t)j->K, j->K, n0, n1, j->out,
		      (size_t)j->N);
	if (j->bias || j->act != RG_ACT_NONE)
		j->k->bias_act_rows(j->out + n0, (size_t)j->N, j->bias ? j->bias + n0 : NULL, j->M,
				    n1 - n0, j->act);
}

/* M <= RG_CPU_GEMV_MAX rows over a row-major (unprepared) W, e.g. a tied LM head in a decode
 * step: OpenBLAS would pack the whole W for one row; the GEMV reads it once. Rows of W in 4
 * tasks per thread (multiples of 4 rows), so a thread that starts late still balances. */
static rg_status gemv_run(const float *A, const float *W, const float *bias, float *out, int M,
			  int N, int K, rg_act act)
{
	rg_threadpool *pool = rg_threadpool_global();
	const int T = rg_threadpool_size(pool);
	struct gemv_job j = {rg_cpu_kern_select(), A, W, bias, out, M, N, K, 0, act};

	j.rows = ((N + 4 * T - 1) / (4 * T) + 3) / 4 * 4;
	j.rows = j.rows < 64 ? 64 : j.rows;
	rg_threadpool_run(pool, (N + j.rows - 1) / j.rows, gemv_task, &j);
	return RG_OK;
}

static rg_status gemm_run(const float *A, const float *W, const float *bias, float *out, int M,
			  int N, int K, rg_act act)
{
	rg_threadpool *pool = rg_threadpool_global();
	struct gemm_job j = {A, W, bias, out, M, N, K, 0, 0, 0, act};
	const rg_dnnl_weight *dw;
	rg_cpu_qweight qw;
	int n_mt;

	if (M == 0)
		return RG_OK;
	if (rg_cpu_qweight_find(W, &qw))
		return rg_cpu_qgemm(NULL, &qw, A, bias, out, M, N, K, act);
	dw = rg_dnnl_find(W);
	if (dw)
		return rg_dnnl_gemm(dw, A, bias, out, M, N, K, act);
	if (M <= RG_CPU_GEMV_MAX)
		return gemv_run(A, W, bias, out, M, N, K, act);
	pthread_once(&g_warn_once, blas_warn);
	gemm_tiles(M, N, rg_threadpool_size(pool), &j.mb, &j.nb);
	n_mt = (M + j.mb - 1) / j.mb;
	j.n_nt = (N + j.nb - 1) / j.nb;
	rg_threadpool_run(pool, n_mt * j.n_nt, gemm_task, &j);
	return RG_OK;
}

rg_status rg_cpu_gemm(const float *A, const float *W, float *out, int M, int N, int K)
{
	return gemm_run(A, W, NULL, out, M, N, K, RG_ACT_NONE);
}

rg_status rg_cpu_gemm_bias_act(const float *A, const float *W, const float *bias, float *out,
			       int M, int N, int K, rg_act act)
{
	return gemm_run(A, W, bias, out, M, N, K, act);
}

struct rows_job {
	float *x;
	const float *bias, *residual, *gamma, *beta;
	float eps;
	int M, N, rows;
	rg_act act;
	float *out;
};

static void bias_act_task(void *ctx, int task, int thread)
{
	const struct rows_job *j = ctx;
	int r0 = task * j->rows, n = j->M - r0 < j->rows ? j->M - r0 : j->rows;

	rg_cpu_kern_select()->bias_act_rows(j->x + (size_t)r0 * j->N, (size_t)j->N, j->bias, n, j->N,
					    j->act);
}

rg_status rg_cpu_bias_act(float *x, const float *bias, int M, int N, rg_act act)
{
	struct rows_job j = {.x = x, .bias = bias, .M = M, .N = N, .act = act};

	if (M == 0)
		return RG_OK;
	j.rows = rows_per_task(M, N);
	rg_threadpool_run(rg_threadpool_global(), (M + j.rows - 1) / j.rows, bias_act_task, &j);
	return RG_OK;
}

static void residual_ln_task(void *ctx, int task, int thread)
{
	const struct rows_job *j = ctx;
	const rg_cpu_kern *k = rg_cpu_kern_select();
	int r1 = (task + 1) * j->rows < j->M ? (task + 1) * j->rows : j->M;

	for (int r = task * j->rows; r < r1; r++)
		k->add_ln_row(j->x + (size_t)r * j->N, j->bias, j->residual + (size_t)r * j->N,
			      j->gamma, j->beta, j->eps, j->N, j->out + (size_t)r * j->N);
}

rg_status rg_cpu_bias_residual_layernorm(const float *x, const float *bias, const float *residual,
					 const float *gamma, const float *beta, float eps, int M,
					 int N, float *out)
{
	/* out may alias x or residual: each row is summed completely into out before it is
	 * normalized in place, and rows are independent. */
	struct rows_job j = {(float *)x, bias, residual, gamma, beta, eps, M, N, 0, RG_ACT_NONE,
			     out};

	if (M == 0)
		return RG_OK;
	j.rows = rows_per_task(M, N);
	rg_threadpool_run(rg_threadpool_global(), (M + j.rows - 1) / j.rows, residual_ln_task, &j);
	return RG_OK;
}

/* Query rows per attention task: whole sequences up to 160 tokens, else blocks of 128 rows, so
 * that the scores of one task (rows x max_seqlen floats) stay in L2. */
#define RG_ATTN_QBLOCK 128
#define RG_ATTN_WHOLE 160

struct attn_job {
	const float *qkv;
	const int32_t *cu_seqlens, *seg;
	const float *rel_bias; /* (num_heads, 2 rel_max + 1) or NULL */
	int rel_max;
	const rg_attn_disent *dis; /* DeBERTa's c2p / p2c tables, or NULL */
	const int *blk_prefix; /* (n_seq + 1): query blocks before each sequence */
	int n_seq, num_heads, head_dim, H;
	float scale;
	float *scratch; /* one block of scratch_floats per pool thread: the scores */
	size_t scratch_floats;
	float *out;
	bool blas;      /* both products through OpenBLAS (see attn_use_blas) */
};

/* The kernel tiles from this head_dim up: the A/B on the 16-core Sapphire Rapids
 * (bench/results/cpu_speed_cpu_16core-xeon_20261122-1928.md, 2026-11-23) had them 1.1-2x faster
 * than the OpenBLAS pair at head_dim 64 (BERT-base, fp32 and bf16) and slower at 32 (MiniLM),
 * where a 32-long reduction leaves the tiles' stores and the K^T packing uncovered. */
#define RG_ATTN_TILES_MIN_HD 64

/* Attention's two products through OpenBLAS rather than the kernel table's register tiles: below
 * RG_ATTN_TILES_MIN_HD, or always with RAGGED_CPU_ATTN=openblas (RAGGED_CPU_ATTN=tiles: always
 * the tiles; the environment is read once, for A/B comparisons). */
static bool attn_use_blas(int head_dim)
{
	const int v = rg_tuning_enum(RG_TUNE_CPU_ATTN);

	return v == RG_CPU_ATTN_OPENBLAS ||
	       (v == RG_CPU_ATTN_AUTO && head_dim < RG_ATTN_TILES_MIN_HD);
}

static int seq_qblock(int L)
{
	return L <= RG_ATTN_WHOLE ? L : RG_ATTN_QBLOCK;
}

/* Add the relative position bias to the scores sc (nq rows of stride Lp, keys [0, L)) of queries
 * q0.. of one sequence: tb is the head's table centred on distance 0 (tb[d], d in [-R, R]). An
 * O(L^2) pass beside the O(L^2 head_dim) GEMMs. */
static void add_rel_bias(float *sc, int nq, int L, int Lp, int q0, const float *tb, int R)
{
	for (int i = 0; i < nq; i++) {
		float *row = sc + (size_t)i * Lp;
		const int qi = q0 + i;

		for (int c = 0; c < L; c++) {
			const int d = c - qi;

			row[c] += tb[d < -R ? -R : d > R ? R : d];
		}
	}
}

/* Add DeBERTa's disentangled terms (rg_op_attention's dis) to the scores sc (nq rows of stride
 * Lp, keys [0, L)) of queries q0.. of one sequence starting at packed row t0, head h: the query's
 * c2p row and each key's p2c row, read at the index of the clamped distance query - key. */
static void add_disent(float *sc, int nq, int L, int Lp, int q0, int t0, int h, int num_heads,
		       const rg_attn_disent *d)
{
	const size_t ld = (size_t)num_heads * d->width;
	const float *c2p = d->c2p, *p2c = d->p2c;
	const int32_t *idx = d->idx + d->R; /* idx[dist], dist in [-R, R] */
	const int R = d->R;

	for (int i = 0; i < nq; i++) {
		float *row = sc + (size_t)i * Lp;
		const int qi = q0 + i;
		const float *cq = c2p ? c2p + (size_t)(t0 + qi) * ld + (size_t)h * d->width : NULL;

		for (int c = 0; c < L; c++) {
			const int dist = qi - c, e = idx[dist < -R ? -R : dist > R ? R : dist];
			float b = cq ? cq[e] : 0.f;

			if (p2c)
				b += p2c[(size_t)(t0 + c) * ld + (size_t)h * d->width + e];
			row[c] += b;
		}
	}
}

/* One (query block, head): S = (scale Q) Kᵀ and O = P V as two single-threaded sgemm calls on the
 * packed rows in place (row stride 3H), the masked row softmax vectorised in between. A fused
 * register-blocked loop (K packed transposed, 4 rows x 2 vectors) ran at 12 GFLOP/s on one Zen 4
 * core against 45-56 for this at L >= 64 and was removed. */
static void attn_task(void *ctx, int task, int thread)
{
	const struct attn_job *j = ctx;
	const rg_cpu_kern *k = rg_cpu_kern_select();
	const int g = task / j->num_heads, h = task % j->num_heads;
	const size_t ld = (size_t)3 * j->H;
	int lo = 0, hi = j->n_seq, s, t0, L, Lp, qb, q0, nq;
	const float *base;
	const int32_t *sg;
	float *sc = j->scratch + (size_t)thread * j->scratch_floats;

	/* the sequence whose query blocks hold global block g: blk_prefix[s] <= g < [s + 1] */
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;

		if (j->blk_prefix[mid] <= g)
			lo = mid;
		else
			hi = mid;
	}
	s = lo;
	t0 = j->cu_seqlens[s];
	L = j->cu_seqlens[s + 1] - t0;
	Lp = (L + 15) / 16 * 16;
	qb = seq_qblock(L);
	q0 = (g - j->blk_prefix[s]) * qb;
	nq = q0 + qb < L ? qb : L - q0;
	base = j->qkv + (size_t)t0 * ld + (size_t)h * j->head_dim;
	sg = j->seg ? j->seg + t0 : NULL;
	if (j->blas)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, L, j->head_dim, j->scale,
			    base + (size_t)q0 * ld, (int)ld, base + j->H, (int)ld, 0.f, sc, Lp);
	else
		k->attn_qk(base + (size_t)q0 * ld, ld, base + j->H, ld, nq, L, Lp, j->head_dim,
			   j->scale, sc + (size_t)RG_ATTN_WHOLE * Lp, sc);
	if (j->rel_bias)
		add_rel_bias(sc, nq, L, Lp, q0,
			     j->rel_bias + (size_t)h * (2 * j->rel_max + 1) + j->rel_max, j->rel_max);
	if (j->dis)
		add_disent(sc, nq, L, Lp, q0, t0, h, j->num_heads, j->dis);
	for (int i = 0; i < nq; i++)
		k->softmax_row(sc + (size_t)i * Lp, L, Lp, sg, sg ? sg[q0 + i] : 0);
	if (!j->blas && j->head_dim % k->vw == 0)
		k->attn_pv(sc, Lp, base + 2 * j->H, ld, nq, L, j->head_dim,
			   j->out + (size_t)(t0 + q0) * j->H + (size_t)h * j->head_dim, j->H);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, j->head_dim, L, 1.f, sc,
			    Lp, base + 2 * j->H, (int)ld, 0.f,
			    j->out + (size_t)(t0 + q0) * j->H + (size_t)h * j->head_dim, j->H);
}

rg_status rg_cpu_attention(const float *qkv, const int32_t *cu_seqlens, int n_seq, int max_seqlen,
			   int num_heads, int head_dim, float scale, const int32_t *seg,
			   const float *rel_bias, int rel_max, const rg_attn_disent *dis,
			   float *out)
{
	rg_threadpool *pool = rg_threadpool_global();
	struct attn_job j = {qkv, cu_seqlens, seg, rel_bias, rel_max, dis, NULL, n_seq, num_heads,
			     head_dim, num_heads * head_dim, scale, NULL, 0, out, false};
	size_t Lp = ((size_t)max_seqlen + 15) / 16 * 16;
	int *prefix;
	int s, T = rg_threadpool_size(pool);

	for (s = 0; s < n_seq; s++) {
		int L = cu_seqlens[s + 1] - cu_seqlens[s];
		if (L < 0 || L > max_seqlen)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "attention: sequence %d has length %d (max_seqlen %d)", s, L,
					 max_seqlen);
	}
	if (n_seq == 0 || max_seqlen == 0)
		return RG_OK;

	/* scores of the largest task, rounded to 64-byte blocks */
	/* per thread: the scores of the largest task, then K^T (head_dim, Lp) at RG_ATTN_WHOLE rows */
	j.scratch_floats = ((size_t)RG_ATTN_WHOLE + head_dim) * Lp;
	j.scratch_floats = (j.scratch_floats + 15) / 16 * 16;
	prefix = malloc(((size_t)n_seq + 1) * sizeof(*prefix));
	j.scratch = aligned_alloc(64, (size_t)T * j.scratch_floats * sizeof(float));
	if (!prefix || !j.scratch) {
		free(prefix);
		free(j.scratch);
		return rg_errorf(RG_ERR_OOM, "attention: cannot allocate %zu floats of scratch",
				 (size_t)T * j.scratch_floats);
	}
	prefix[0] = 0;
	for (s = 0; s < n_seq; s++) {
		int L = cu_seqlens[s + 1] - cu_seqlens[s];

		prefix[s + 1] = prefix[s] + (L == 0 ? 0 : (L + seq_qblock(L) - 1) / seq_qblock(L));
	}
	j.blk_prefix = prefix;
	j.blas = attn_use_blas(head_dim);
	rg_threadpool_run(pool, prefix[n_seq] * num_heads, attn_task, &j);
	free(prefix);
	free(j.scratch);
	return RG_OK;
}

/* rg_op_rel_tables: one task per (head, block of 256 tokens), each one or two single-threaded
 * sgemm calls on the strided rows of qkv (Q at column h * head_dim, K at H + h * head_dim) and
 * the head's columns of pos_key / pos_query, written with row stride num_heads * width. */
#define RG_REL_TOKENS 256

struct rel_job {
	const float *qkv, *pos_key, *pos_query;
	int n_tokens, num_heads, head_dim, width;
	float scale;
	float *c2p, *p2c;
};

static void rel_task(void *ctx, int task, int thread)
{
	const struct rel_job *j = ctx;
	const int h = task % j->num_heads, t0 = task / j->num_heads * RG_REL_TOKENS;
	const int n = j->n_tokens - t0 < RG_REL_TOKENS ? j->n_tokens - t0 : RG_REL_TOKENS;
	const int H = j->num_heads * j->head_dim, ldo = j->num_heads * j->width;
	const float *q = j->qkv + (size_t)t0 * 3 * H + (size_t)h * j->head_dim;
	const size_t o = (size_t)t0 * ldo + (size_t)h * j->width;

	(void)thread;
	if (j->pos_key)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, j->width, j->head_dim,
			    j->scale, q, 3 * H, j->pos_key + (size_t)h * j->head_dim, H, 0.f,
			    j->c2p + o, ldo);
	if (j->pos_query)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, j->width, j->head_dim,
			    j->scale, q + H, 3 * H, j->pos_query + (size_t)h * j->head_dim, H, 0.f,
			    j->p2c + o, ldo);
}

rg_status rg_cpu_rel_tables(const float *qkv, int n_tokens, int num_heads, int head_dim,
			    const float *pos_key, const float *pos_query, int width, float scale,
			    float *c2p, float *p2c)
{
	struct rel_job j = {qkv,	pos_key, pos_query, n_tokens, num_heads,
			    head_dim, width,   scale,	    c2p,      p2c};
	const int blocks = (n_tokens + RG_REL_TOKENS - 1) / RG_REL_TOKENS;

	rg_threadpool_run(rg_threadpool_global(), blocks * num_heads, rel_task, &j);
	return RG_OK;
}

struct pool_job {
	const float *x;
	const int32_t *cu_seqlens;
	int H;
	rg_pooling mode;
	bool normalize;
	float *out;
};

static void pool_task(void *ctx, int s, int thread)
{
	const struct pool_job *j = ctx;
	const int t0 = j->cu_seqlens[s], L = j->cu_seqlens[s + 1] - t0;
	float *o = j->out + (size_t)s * j->H;

	if (L == 0) {
		/* a padding sequence (graph bucket): zero row */
		memset(o, 0, (size_t)j->H * sizeof(float));
		return;
	}
	rg_cpu_kern_select()->pool_seq(j->x + (size_t)t0 * j->H, L, j->H, j->mode, j->normalize, o);
}

rg_status rg_cpu_pool(const float *x, const int32_t *cu_seqlens, int n_seq, int H, rg_pooling mode,
		      bool normalize, float *out)
{
	struct pool_job j = {x, cu_seqlens, H, mode, normalize, out};
	int s;

	for (s = 0; s < n_seq; s++)
		if (cu_seqlens[s + 1] - cu_seqlens[s] < 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "pool: sequence %d has a negative length",
					 s);
	rg_threadpool_run(rg_threadpool_global(), n_seq, pool_task, &j);
	return RG_OK;
}

struct gather_job {
	const float *src;
	const int32_t *idx;
	int H;
	float *dst;
};

static void gather_task(void *ctx, int i, int thread)
{
	const struct gather_job *j = ctx;

	memcpy(j->dst + (size_t)i * j->H, j->src + (size_t)j->idx[i] * j->H,
	       (size_t)j->H * sizeof(float));
}

rg_status rg_cpu_embed_scale_add(const float *table, const int32_t *tokens, float scale,
				 const float *pos, const int32_t *positions, int32_t no_pos_token,
				 int n, int H, float *out)
{
	for (int t = 0; t < n; t++) {
		const float *e = table + (size_t)tokens[t] * H;
		const float *p = pos && tokens[t] != no_pos_token ? pos + (size_t)positions[t] * H
								  : NULL;
		float *o = out + (size_t)t * H;

		for (int i = 0; i < H; i++)
			o[i] = scale * e[i] + (p ? p[i] : 0.f);
	}
	return RG_OK;
}

rg_status rg_cpu_gather_rows_quant(const rg_cpu_qweight *w, const int32_t *idx, int n_dst, int H,
				   float *dst)
{
	int64_t bs;
	size_t ts, row;

	if (H != w->K || !rg_gguf_type_size((uint32_t)w->type, &bs, &ts) || H % bs)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gather_rows: H=%d on a quantized table of "
				 "rows of %d (ggml type %d)", H, w->K, w->type);
	row = (size_t)(H / bs) * ts;
	for (int i = 0; i < n_dst; i++) {
		rg_gguf_tensor t = {.name = "embedding row", .n_dims = 1, .ne = {H, 1, 1, 1},
				    .type = (uint32_t)w->type, .nbytes = row, .numel = H};
		rg_status s;

		if (idx[i] < 0 || idx[i] >= w->N)
			return rg_errorf(RG_ERR_INVALID_INPUT, "gather_rows: row %d of a quantized "
					 "table of %d rows", idx[i], w->N);
		t.data = (const uint8_t *)w->W + (size_t)idx[i] * row;
		if ((s = rg_gguf_to_f32(&t, dst + (size_t)i * H)) != RG_OK)
			return s;
	}
	return RG_OK;
}

rg_status rg_cpu_gather_rows(const float *src, const int32_t *idx, int n_dst, int H, float *dst)
{
	struct gather_job j = {src, idx, H, dst};

	/* a copy at memory speed: one thread keeps up unless the batch is large */
	if ((size_t)n_dst * (size_t)H < ((size_t)1 << 20)) {
		for (int i = 0; i < n_dst; i++)
			gather_task(&j, i, 0);
		return RG_OK;
	}
	rg_threadpool_run(rg_threadpool_global(), n_dst, gather_task, &j);
	return RG_OK;
}
