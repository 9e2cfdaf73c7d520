/* Quantized GGUF weights on the CPU (qweight.h): the registry of weights kept in their file's
 * blocks, and the GEMM over them (activations quantized to int8 blocks, integer block dot
 * products, fp32 accumulation: llama.cpp's ggml_vec_dot_q*_q8 scheme, written anew). Every
 * type's dot kernel takes the activation row as K / 32 rg_q8a blocks (nb); a K-quant row is
 * nb / 8 super-blocks. F16 weights (a GGUF F16 file's) are kept too, as "blocks" of 32 halves:
 * their dot takes the activation row in f32 (hdot_tile_f16), half the bytes of the f32 copy a
 * dequantizing load makes, and no int8 rounding of the activations. */
#include "ops/cpu/qweight.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/gguf.h"
#include "core/threadpool.h"
#include "ops/cpu/cpu_kern.h"

size_t rg_cpu_qtype_block_bytes(int type)
{
	switch (type) {
	case RG_GGUF_Q8_0:
		return 34;
	case RG_GGUF_Q4_0:
		return 18;
	case RG_GGUF_Q4_1:
		return 20;
	case RG_GGUF_Q5_0:
		return 22;
	case RG_GGUF_Q5_1:
		return 24;
	case RG_GGUF_Q4_K:
		return 144;
	case RG_GGUF_Q5_K:
		return 176;
	case RG_GGUF_Q6_K:
		return 210;
	case RG_GGUF_F16:
		return 64;
	}
	return 0;
}

int rg_cpu_qtype_block_values(int type)
{
	switch (type) {
	case RG_GGUF_Q8_0:
	case RG_GGUF_Q4_0:
	case RG_GGUF_Q4_1:
	case RG_GGUF_Q5_0:
	case RG_GGUF_Q5_1:
	case RG_GGUF_F16:
		return RG_QK;
	case RG_GGUF_Q4_K:
	case RG_GGUF_Q5_K:
	case RG_GGUF_Q6_K:
		return RG_QK_K;
	}
	return 0;
}

bool rg_cpu_qtype_supported(int type)
{
	return rg_cpu_qtype_block_bytes(type) > 0;
}

/* ---------------------------------------------------------------- registry */

/* A flat array: a model holds a few hundred GEMM weights, and a lookup per GEMM is a scan far
 * cheaper than the product. */
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static rg_cpu_qweight *g_reg;
static size_t g_reg_n, g_reg_cap;

static long reg_index(const void *W)
{
	for (size_t i = 0; i < g_reg_n; i++)
		if (g_reg[i].W == W)
			return (long)i;
	return -1;
}

rg_status rg_cpu_qweight_register(const void *W, int type, int N, int K)
{
	return rg_cpu_qweight_register_parts(W, 1, &type, &N, K);
}

rg_status rg_cpu_qweight_register_parts(const void *W, int n, const int *types, const int *rows,
					int K)
{
	rg_cpu_qweight e = {W, n == 1 ? types[0] : -1, 0, K, n, {0}, {0}};
	rg_status s = RG_OK;

	if (n < 1 || n > RG_CPU_QPARTS)
		return rg_errorf(RG_ERR_INVALID_INPUT, "quantized weight: %d parts (1..%d)", n,
				 RG_CPU_QPARTS);
	for (int i = 0; i < n; i++) {
		const int type = types[i], N = rows[i];

		if (!W || N <= 0 || K <= 0 || !rg_cpu_qtype_supported(type) ||
		    K % rg_cpu_qtype_block_values(type) || e.N > INT32_MAX - N)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "quantized weight: type %d, N=%d, K=%d not supported (Q8_0, "
					 "Q4_0, Q4_1, Q5_0, Q5_1, F16 with K a multiple of 32; Q4_K, "
					 "Q5_K, Q6_K with K a multiple of 256)", type, N, K);
		e.part_type[i] = type;
		e.part_rows[i] = N;
		e.N += N;
	}
	pthread_mutex_lock(&g_reg_lock);
	if (reg_index(W) >= 0) {
		s = rg_errorf(RG_ERR_INVALID_INPUT, "quantized weight %p already registered", W);
		goto out_unlock;
	}
	if (g_reg_n == g_reg_cap) {
		size_t cap = g_reg_cap ? 2 * g_reg_cap : 256;
		rg_cpu_qweight *r = realloc(g_reg, cap * sizeof(*r));

		if (!r) {
			s = rg_errorf(RG_ERR_OOM, "out of host memory for the weight registry");
			goto out_unlock;
		}
		g_reg = r;
		g_reg_cap = cap;
	}
	g_reg[g_reg_n++] = e;
out_unlock:
	pthread_mutex_unlock(&g_reg_lock);
	return s;
}

void rg_cpu_qweight_release(const void *W)
{
	long i;

	if (!W)
		return;
	pthread_mutex_lock(&g_reg_lock);
	if ((i = reg_index(W)) >= 0)
		g_reg[i] = g_reg[--g_reg_n];
	if (!g_reg_n) { /* the last model is gone: give the array back too */
		free(g_reg);
		g_reg = NULL;
		g_reg_cap = 0;
	}
	pthread_mutex_unlock(&g_reg_lock);
}

bool rg_cpu_qweight_find(const void *W, rg_cpu_qweight *out)
{
	long i;

	if (!g_reg_n) /* racy read, harmless: no quantized weight has ever been registered */
		return false;
	pthread_mutex_lock(&g_reg_lock);
	i = reg_index(W);
	if (i >= 0)
		*out = g_reg[i];
	pthread_mutex_unlock(&g_reg_lock);
	return i >= 0;
}

/* ---------------------------------------------------------------- GEMM */

/* Per-thread scratch kept for the next call (as gemm_dnnl.c keeps its bf16 copy of A), in a
 * thread-specific value whose destructor frees it when the thread ends (a server's step thread: a
 * __thread pointer would leak its buffer then): TLS_AQ, the calling thread's quantized copy of
 * A; TLS_WF, a pool thread's widened F16 weight rows (below); TLS_AP, the calling thread's
 * packed activation pairs (tables with q8_pack_row). */
enum { TLS_AQ, TLS_WF, TLS_AP, N_TLS };

typedef struct tls_buf {
	void *p;
	size_t cap; /* bytes */
} tls_buf;

static pthread_once_t g_tls_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_tls_key[N_TLS];
static bool g_tls_ok;

static void tls_free(void *v)
{
	tls_buf *b = v;

	if (b)
		free(b->p);
	free(b);
}

static void tls_init(void)
{
	g_tls_ok = true;
	for (int k = 0; k < N_TLS; k++)
		g_tls_ok &= pthread_key_create(&g_tls_key[k], tls_free) == 0;
}

/* The calling thread's scratch `which` of at least bytes bytes, or NULL (out of memory). */
static void *tls_get(int which, size_t bytes)
{
	tls_buf *b;

	pthread_once(&g_tls_once, tls_init);
	if (!g_tls_ok)
		return NULL;
	b = pthread_getspecific(g_tls_key[which]);
	if (!b) {
		if (!(b = calloc(1, sizeof(*b))))
			return NULL;
		if (pthread_setspecific(g_tls_key[which], b) != 0) {
			free(b);
			return NULL;
		}
	}
	if (bytes > b->cap) {
		void *p = realloc(b->p, bytes);

		if (!p)
			return NULL;
		b->p = p;
		b->cap = bytes;
	}
	return b->p;
}

/* F16 weights in a GEMM of more than F16_DOT_MAX rows of A (a prefill chunk): each task widens
 * up to F16_CHUNK weight rows at a time into the calling thread's f32 scratch (f16_to_f32) and runs
 * one single-threaded OpenBLAS SGEMM of all M rows against them (compute-bound: the widening is
 * K operations per weight row against M K multiply-adds). Up to F16_DOT_MAX rows (decode steps)
 * hdot_tile_f16 reads each weight row once for every row of A instead. On the 2-core EPYC (2
 * threads), the real SmolLM2 F16 file's prefill of 16 prompts of 32 tokens took 2.19 s through
 * hdot_tile_f16 against 1.07 s dequantized at load; this way 1.09 s, and one prompt of 32 / 128 /
 * 512 tokens 108 / 323 / ~1400 ms against 105 / 359 / 1447 ms dequantized (a scalar widening
 * cost 150 ms more per call), with chunks of 64 rows; chunks of 256 took 10-11% less than 64 at
 * 512 tokens in two paired runs (1629 / 1438 ms against 1830 / 1591 ms: this VM's spread is
 * 15%), the scratch then 1.5 MiB a thread at K = 1536. */
#define F16_DOT_MAX 16
#define F16_CHUNK 256

typedef float (*qdot_fn)(const void *w, const rg_q8a *a, int nb);

/* One part of the weight (all of it unless a mixed stack): rows [n0, n1) at W, row_bytes each. */
struct qgemm_part {
	const uint8_t *W;
	qdot_fn dot;
	rg_qdotr_fn dotr; /* the same over up to the table's qrows rows of A */
	rg_qdotp_fn dotp; /* over packed pairs (NULL: the table has none); every M takes it */
	bool f16;         /* F16 rows: hdot_tile_f16 over the f32 rows of A, not dot / dotr */
	size_t row_bytes;
	int n0, n1;
};

struct qgemm_job {
	const rg_cpu_kern *k;
	const float *A, *bias;
	struct qgemm_part part[RG_CPU_QPARTS];
	int n_parts;
	rg_q8a *aq;
	rg_q8p *ap; /* A's rows as packed pairs, npairs apart (or NULL) */
	int npairs;
	float *out;
	int M, N, K, nb, rows; /* rows: of A per quantize task, of W per GEMM task */
	rg_act act;
	atomic_bool oom; /* a task's F16 scratch could not be had (the product is incomplete) */
};

static void quant_task(void *ctx, int task, int thread)
{
	const struct qgemm_job *j = ctx;
	const int m1 = (task + 1) * j->rows < j->M ? (task + 1) * j->rows : j->M;

	(void)thread;
	for (int m = task * j->rows; m < m1; m++) {
		j->k->q8_quant_row(j->A + (size_t)m * j->K, j->K, j->aq + (size_t)m * j->nb);
		if (j->ap)
			j->k->q8_pack_row(j->aq + (size_t)m * j->nb, j->nb,
					  j->ap + (size_t)m * j->npairs);
	}
}

/* Rows [n0, n1) of W against every row of A: each W row is read from memory once (a decode
 * step's cost), its M dot products run while it is in L1, the table's qrows rows of A per call
 * of the multi-row dot (each weight block decoded once per group, not once per row); a single
 * row (batch 1) takes the single-row dot, which gives it the same bits (tables with packed
 * pairs: the packed multi-row dot at every M, R = 1 included). */
static void qgemm_task(void *ctx, int task, int thread)
{
	const struct qgemm_job *j = ctx;
	const int n0 = task * j->rows, n1 = n0 + j->rows < j->N ? n0 + j->rows : j->N;
	const int qr = j->k->qrows; /* rows per multi-row dot call */

	(void)thread;
	for (int p = 0; p < j->n_parts; p++) {
		const struct qgemm_part *q = &j->part[p];
		const int a = n0 > q->n0 ? n0 : q->n0, b = n1 < q->n1 ? n1 : q->n1;

		for (int n = a; n < b; n++) {
			const uint8_t *w = q->W + (size_t)(n - q->n0) * q->row_bytes;

			if (q->f16 && j->M > F16_DOT_MAX) { /* widened, then one SGEMM */
				const int c = b - n < F16_CHUNK ? b - n : F16_CHUNK;
				float *wf = tls_get(TLS_WF, (size_t)c * (size_t)j->K * sizeof(float));
				const uint16_t *h = (const uint16_t *)(const void *)w;

				if (!wf) {
					atomic_store(&((struct qgemm_job *)ctx)->oom, true);
					return;
				}
				j->k->f16_to_f32(h, wf, (size_t)c * (size_t)j->K);
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, c, j->K, 1.f,
					    j->A, j->K, wf, j->K, 0.f, j->out + n, j->N);
				n += c - 1;
				continue;
			}
			if (q->f16) { /* register tiles of RG_HDOT_W x RG_HDOT_R */
				const int nw = b - n < RG_HDOT_W ? b - n : RG_HDOT_W;

				for (int m = 0; m < j->M; m += RG_HDOT_R)
					j->k->hdot_tile_f16((const uint16_t *)(const void *)w,
							    q->row_bytes / 2, nw,
							    j->A + (size_t)m * j->K, (size_t)j->K,
							    j->K,
							    j->M - m < RG_HDOT_R ? j->M - m
										 : RG_HDOT_R,
							    j->out + (size_t)m * j->N + n,
							    (size_t)j->N);
				n += nw - 1;
				continue;
			}
			if (q->dotp && j->ap) { /* packed pairs, M = 1 too (the same bits) */
				for (int m = 0; m < j->M; m += qr) {
					const int R = j->M - m < qr ? j->M - m : qr;
					float o[RG_QDOT_ROWS];

					q->dotp(w, j->aq + (size_t)m * j->nb,
						j->ap + (size_t)m * j->npairs, (size_t)j->nb,
						(size_t)j->npairs, j->nb, R, o);
					for (int r = 0; r < R; r++)
						j->out[(size_t)(m + r) * j->N + n] = o[r];
				}
				continue;
			}
			if (j->M == 1) {
				j->out[n] = q->dot(w, j->aq, j->nb);
				continue;
			}
			for (int m = 0; m < j->M; m += qr) {
				const int R = j->M - m < qr ? j->M - m : qr;
				float o[RG_QDOT_ROWS];

				q->dotr(w, j->aq + (size_t)m * j->nb, (size_t)j->nb, j->nb, R, o);
				for (int r = 0; r < R; r++)
					j->out[(size_t)(m + r) * j->N + n] = o[r];
			}
		}
	}
	if (j->bias || j->act != RG_ACT_NONE)
		j->k->bias_act_rows(j->out + n0, (size_t)j->N, j->bias ? j->bias + n0 : NULL, j->M,
				    n1 - n0, j->act);
}

rg_status rg_cpu_qgemm(const struct rg_cpu_kern *kern, const rg_cpu_qweight *w, const float *A,
		       const float *bias, float *out, int M, int N, int K, rg_act act)
{
	rg_threadpool *pool = rg_threadpool_global();
	const int T = rg_threadpool_size(pool);
	struct qgemm_job j = {0};
	const uint8_t *W = w->W;
	size_t need;
	int n0 = 0;
	bool any_q = false; /* a part that dots against quantized rows of A */

	if (N != w->N || K != w->K || M < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "quantized gemm: shape N=%d K=%d, the weight is N=%d K=%d", N, K,
				 w->N, w->K);
	if (M == 0)
		return RG_OK;
	j.k = kern ? kern : rg_cpu_kern_select();
	j.A = A;
	j.bias = bias;
	j.out = out;
	j.M = M;
	j.N = N;
	j.K = K;
	j.nb = K / RG_QK;
	j.act = act;
	/* n_parts 0 (a registration written by hand, {W, type, N, K}): one part of w->type */
	j.n_parts = w->n_parts > 0 ? w->n_parts : 1;
	for (int p = 0; p < j.n_parts; p++) {
		struct qgemm_part *q = &j.part[p];
		const int type = w->n_parts > 0 ? w->part_type[p] : w->type;
		const int rows = w->n_parts > 0 ? w->part_rows[p] : w->N;

#define QK(T, t) case RG_GGUF_##T: q->dot = j.k->qdot_##t, q->dotr = j.k->qdotr_##t, \
			q->dotp = j.k->qdotp_##t; break
		switch (type) {
		QK(Q8_0, q8_0);
		QK(Q4_0, q4_0);
		QK(Q4_1, q4_1);
		QK(Q5_0, q5_0);
		QK(Q5_1, q5_1);
		QK(Q4_K, q4_k);
		QK(Q5_K, q5_k);
		QK(Q6_K, q6_k);
#undef QK
		case RG_GGUF_F16: q->f16 = true; break;
		default:
			return rg_errorf(RG_ERR_INTERNAL, "quantized gemm: type %d registered", type);
		}
		any_q |= !q->f16;
		q->W = W;
		q->row_bytes = (size_t)(K / rg_cpu_qtype_block_values(type)) *
			       rg_cpu_qtype_block_bytes(type);
		q->n0 = n0;
		q->n1 = n0 += rows;
		W += (size_t)rows * q->row_bytes;
	}
	need = (size_t)M * (size_t)j.nb;
	if (any_q && !(j.aq = tls_get(TLS_AQ, need * sizeof(rg_q8a))))
		return rg_errorf(RG_ERR_OOM, "out of host memory for %d quantized rows", M);
	j.npairs = (j.nb + 1) / 2;
	if (any_q && j.k->q8_pack_row &&
	    !(j.ap = tls_get(TLS_AP, (size_t)M * (size_t)j.npairs * sizeof(rg_q8p))))
		return rg_errorf(RG_ERR_OOM, "out of host memory for %d packed rows", M);
	/* quantize A: one task per row beyond a few rows (a decode step's 1..4 rows inline) */
	j.rows = M <= 4 ? M : (M + 2 * T - 1) / (2 * T);
	if (!any_q)
		; /* F16 weights only: A as it is */
	else if (M <= 4)
		quant_task(&j, 0, 0);
	else
		rg_threadpool_run(pool, (M + j.rows - 1) / j.rows, quant_task, &j);
	/* W rows per task: 4 tasks per thread (a late thread still balances), >= 16 rows */
	j.rows = (N + 4 * T - 1) / (4 * T);
	j.rows = j.rows < 16 ? 16 : j.rows;
	rg_threadpool_run(pool, (N + j.rows - 1) / j.rows, qgemm_task, &j);
	if (atomic_load(&j.oom))
		return rg_errorf(RG_ERR_OOM, "out of host memory for widened F16 weight rows");
	return RG_OK;
}
