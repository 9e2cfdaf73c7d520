/* cpu_gemm_libs.c: which CPU library should run ragged's fp32 linear layers?
 *
 * A linear layer computes out(M,N) = act(A(M,K) · Wᵀ + bias), with A (M,K) row-major (M = tokens
 * in the batch), W (N,K) row-major (torch.nn.Linear layout), bias (N), and act the identity or
 * exact GELU 0.5·x·(1+erf(x/√2)). Each candidate is called the way a runtime would call it:
 *
 *   openblas-mt       OpenBLAS (pthread build) on its own T threads: one cblas_sgemm for the whole
 *                     GEMM, then a separate bias(+GELU) pass on a pthread pool of T threads.
 *   openblas-tiles    OpenBLAS forced to one thread; the output is cut into tiles that a pthread
 *                     pool of T threads (the caller included) takes from an atomic counter. A tile
 *                     is one single-threaded cblas_sgemm on sub-blocks (full strides) followed by
 *                     bias(+GELU) on the tile while it is in cache. Policy "MBxQ": M blocks of at
 *                     most MB rows, N blocks (multiples of 16) so that there are >= Q tiles/thread.
 *   blis              BLIS (OpenMP build) on T threads: one cblas_sgemm, then the same separate
 *                     bias(+GELU) pass run on OpenMP, i.e. on the team BLIS has just used.
 *   onednn            oneDNN matmul: src (M,K) "ab", weights (K,N) with strides {1,K} ("ba", the
 *                     (N,K) buffer as is), bias (1,N), eltwise_gelu_erf post-op. The primitive is
 *                     created once per shape, outside the timing.
 *   onednn-reord      the same, with weights (format_tag any) reordered once up front to the
 *                     layout the primitive prefers, as a runtime would do at load time.
 *
 * The two separate passes run the same kernel (bias_act_tile) over the same items; only the
 * threads differ (the pool for OpenBLAS, OpenMP for BLIS), so that no pass competes with the
 * spinning threads of another runtime. OpenBLAS and BLIS both export cblas_sgemm, so every
 * library is dlopen'ed RTLD_LOCAL and called through dlsym; a missing library skips its
 * candidates with a note. The oneDNN calls need its 2.x headers at build time (RG_INCDIR).
 *
 * Weights and bias rotate over S copies so that one call's weights come from DRAM, as the 12
 * layers of a real model would (S·weight bytes >= 2·LLC); activations stay where the previous
 * op left them. Shape by shape, every candidate is timed on the same buffers, with a pause
 * between cells for the last runtime's idle threads to fall asleep. Each cell: warm-up, then
 * repetitions for --budget seconds (>= --min-reps); the median is reported with
 * 2·M·N·K / median in GFLOP/s, beside the share of the CPUs other processes took meanwhile.
 * Every candidate is first checked against a float64 naive reference at M = --verify-m on every
 * layer shape (max |err| / max |ref| <= 1e-4).
 *
 * Build and run: bench/kernels/cpu_gemm_libs.sh [options]; see bench/kernels/README.md.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(RG_NO_DNNL) && defined(__has_include)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define RG_HAVE_DNNL 1
#else
#define RG_DNNL_BUILD_NOTE "oneDNN headers are not 2.x; this bench speaks the 2.x C API"
#endif
#else
#define RG_DNNL_BUILD_NOTE "no <oneapi/dnnl/dnnl.h> at build time (set RG_INCDIR)"
#endif
#endif
#ifndef RG_HAVE_DNNL
#define RG_HAVE_DNNL 0
#endif
#ifndef RG_DNNL_BUILD_NOTE
#define RG_DNNL_BUILD_NOTE "built without oneDNN (RG_NO_DNNL)"
#endif
#ifndef RG_BUILD_FLAGS
#define RG_BUILD_FLAGS "unknown"
#endif

#define MAX_CANDS 12
#define MAX_SHAPES 136 /* 2 models x 16 token counts x 4 layers, and the ceiling */
#define MAX_COPIES 64
#define VERIFY_TOL 1e-4

/* ---------------------------------------------------------------- small helpers */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 64) != 0) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1); /* a benchmark with no memory has nothing left to say */
	}
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Deterministic fill in [-scale, scale] (splitmix64): every candidate sees the same data. */
static void fill_uniform(float *x, size_t n, uint64_t seed, float scale)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		uint64_t z = (s += 0x9E3779B97F4A7C15ull);
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
		z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
		z ^= z >> 31;
		x[i] = scale * (2.f * (float)(z >> 40) / 16777216.f - 1.f);
	}
}

/* ---------------------------------------------------------------- bias + exact GELU epilogue */

typedef enum { EPI_NONE, EPI_BIAS, EPI_BIAS_GELU } epi_kind;

/* e^z for z in [-17, 0] (the range erf needs): Cody-Waite reduction by ln2, the Cephes expf
 * polynomial, 2^n put into the exponent bits. Max relative error ~1e-7. Branch-free so that
 * the loops that inline it vectorise. */
static inline __attribute__((always_inline)) float exp_neg(float z)
{
	union {
		float f;
		int32_t i;
	} r, p;
	r.f = z * 1.44269504088896341f + 12582912.f; /* 1.5·2^23: rounds to nearest */
	const float n = r.f - 12582912.f;
	float f = z - n * 0.693359375f;
	f = f - n * -2.12194440e-4f;
	p.f = 1.9875691500e-4f;
	p.f = p.f * f + 1.3981999507e-3f;
	p.f = p.f * f + 8.3334519073e-3f;
	p.f = p.f * f + 4.1665795894e-2f;
	p.f = p.f * f + 1.6666665459e-1f;
	p.f = p.f * f + 5.0000001201e-1f;
	p.f = p.f * f * f + f + 1.f;
	p.i += (r.i - 0x4B400000) * (1 << 23);
	return p.f;
}

/* erf(x) in fp32, branch-free (Cephes erff/erfcf coefficients): |x| < 1: x·T(x²);
 * 1 <= |x| < 2 and 2 <= |x| <= 4: 1 - e^(-x²)/|x|·P(1/x²) with a per-lane choice of P;
 * |x| > 4 is clamped to 4 (erf(4) rounds to 1 in fp32). The max abs error, measured against
 * double erf at start-up, is printed in the report (~1.5e-7). */
static inline __attribute__((always_inline)) float rg_erf(float x)
{
	float ax = fabsf(x);
	ax = ax < 4.f ? ax : 4.f;
	const float x2 = ax * ax;
	float t = 7.853861353153693e-5f;
	t = t * x2 - 8.010193625184903e-4f;
	t = t * x2 + 5.188327685732524e-3f;
	t = t * x2 - 2.685381193529856e-2f;
	t = t * x2 + 1.128358514861418e-1f;
	t = t * x2 - 3.761262582423300e-1f;
	t = t * x2 + 1.128379165726710e+0f;
	const float small = ax * t;
	const bool b = ax >= 2.f;
	const float y = 1.f / x2;
	float p = b ? 0.f : 2.326819970068386e-2f;
	p = p * y + (b ? -1.047766399936249e+1f : -1.387039388740657e-1f);
	p = p * y + (b ? 1.297719955372516e+1f : 3.687424674597105e-1f);
	p = p * y + (b ? -7.495518717768503e+0f : -5.824733027278666e-1f);
	p = p * y + (b ? 2.921019019210786e+0f : 6.210004621745983e-1f);
	p = p * y + (b ? -1.015265279202700e+0f : -4.944515323274145e-1f);
	p = p * y + (b ? 4.218463358204948e-1f : 3.404879937665872e-1f);
	p = p * y + (b ? -2.820767439740514e-1f : -2.741127028184656e-1f);
	p = p * y + (b ? 5.641895067754075e-1f : 5.638259427386472e-1f);
	const float large = 1.f - exp_neg(-x2) / ax * p;
	const float r = ax < 1.f ? small : large;
	return x < 0.f ? -r : r;
}

static inline __attribute__((always_inline)) float gelu_erf(float x)
{
	return 0.5f * x * (1.f + rg_erf(x * 0.70710678118654752f));
}

/* c (rows, cols), row stride ldc: c[i][j] = act(c[i][j] + bias[j]). Every candidate that needs
 * an epilogue outside the library runs this function. The loops carry RG_SIMD_LOOP so that
 * cpu_gemm_libs.sh can check in gcc's -fopt-info that they were vectorised. */
static void bias_act_tile(float *c, int ldc, int rows, int cols, const float *bias, epi_kind epi)
{
	if (epi == EPI_NONE)
		return;
	for (int i = 0; i < rows; i++) {
		float *restrict row = c + (size_t)i * ldc;
		if (epi == EPI_BIAS_GELU) {
#pragma omp simd
			for (int j = 0; j < cols; j++) /* RG_SIMD_LOOP */
				row[j] = gelu_erf(row[j] + bias[j]);
		} else {
#pragma omp simd
			for (int j = 0; j < cols; j++) /* RG_SIMD_LOOP */
				row[j] += bias[j];
		}
	}
}

/* Max |rg_erf(x) - erf(x)| over [-10, 10] in steps of 2e-5, in double. */
static double erf_max_abs_err(void)
{
	double worst = 0;
	for (int i = -500000; i <= 500000; i++) {
		const float x = (float)(i * 2e-5);
		const double e = fabs((double)rg_erf(x) - erf((double)x));
		if (!(e <= worst))
			worst = e;
	}
	return worst;
}

/* ---------------------------------------------------------------- pthread pool */

typedef void (*pool_fn)(void *ctx, int item);

typedef struct {
	_Atomic unsigned v;
	char pad[60];
} padded_gen;

/* A fork-join pool: n_workers persistent threads plus the caller. pool_run publishes a job by
 * bumping gen; everyone takes items from an atomic counter; the caller returns once each
 * worker has acknowledged the generation, so the job fields are never rewritten under a
 * worker. Idle workers spin with sched_yield for spin_s, then sleep on a condition variable. */
typedef struct {
	int n_workers;
	pthread_t *threads;
	padded_gen *done;       /* (n_workers) last generation each worker finished */
	_Atomic unsigned gen;
	_Atomic int next;
	_Atomic int n_sleeping;
	_Atomic bool quit;
	int n_items;
	pool_fn fn;
	void *ctx;
	double spin_s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
} rg_pool;

typedef struct {
	rg_pool *p;
	int idx;
} pool_worker_arg;

static void pool_drain(rg_pool *p)
{
	int i;
	while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_items)
		p->fn(p->ctx, i);
}

static unsigned pool_wait_gen(rg_pool *p, unsigned seen)
{
	const double t0 = now_s();
	unsigned g;
	while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
		if (now_s() - t0 > p->spin_s) {
			pthread_mutex_lock(&p->mu);
			atomic_fetch_add(&p->n_sleeping, 1);
			while ((g = atomic_load(&p->gen)) == seen)
				pthread_cond_wait(&p->cv, &p->mu);
			atomic_fetch_sub(&p->n_sleeping, 1);
			pthread_mutex_unlock(&p->mu);
			return g;
		}
		sched_yield();
	}
	return g;
}

static void *pool_worker(void *arg)
{
	pool_worker_arg *wa = arg;
	rg_pool *p = wa->p;
	unsigned seen = 0;
	for (;;) {
		seen = pool_wait_gen(p, seen);
		if (atomic_load(&p->quit))
			break;
		pool_drain(p);
		atomic_store_explicit(&p->done[wa->idx].v, seen, memory_order_release);
	}
	free(wa);
	return NULL;
}

static rg_pool *rg_pool_init(int n_threads, double spin_s)
{
	rg_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
	p->spin_s = spin_s;
	p->threads = calloc((size_t)p->n_workers + 1, sizeof(pthread_t));
	p->done = xmalloc(sizeof(padded_gen) * ((size_t)p->n_workers + 1));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (int w = 0; w < p->n_workers; w++) {
		atomic_init(&p->done[w].v, 0);
		pool_worker_arg *wa = malloc(sizeof(*wa));
		wa->p = p;
		wa->idx = w;
		if (pthread_create(&p->threads[w], NULL, pool_worker, wa) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			exit(1);
		}
	}
	return p;
}

static void rg_pool_run(rg_pool *p, int n_items, pool_fn fn, void *ctx)
{
	if (p->n_workers == 0 || n_items <= 1) {
		for (int i = 0; i < n_items; i++)
			fn(ctx, i);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	p->n_items = n_items;
	atomic_store_explicit(&p->next, 0, memory_order_relaxed);
	const unsigned g = atomic_fetch_add(&p->gen, 1) + 1;
	if (atomic_load(&p->n_sleeping) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	pool_drain(p);
	for (int w = 0; w < p->n_workers; w++)
		while (atomic_load_explicit(&p->done[w].v, memory_order_acquire) != g)
			sched_yield();
}

static void rg_pool_free(rg_pool *p)
{
	if (!p)
		return;
	atomic_store(&p->quit, true);
	atomic_fetch_add(&p->gen, 1);
	pthread_mutex_lock(&p->mu);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int w = 0; w < p->n_workers; w++)
		pthread_join(p->threads[w], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->threads);
	free(p->done);
	free(p);
}

/* ---------------------------------------------------------------- libraries (dlopen) */

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int layout, int transa, int transb, int m, int n, int k,
			       float alpha, const float *a, int lda, const float *b, int ldb,
			       float beta, float *c, int ldc);

typedef struct {
	const char *path;
	void *so;
	char err[256];
	cblas_sgemm_fn sgemm;
	void (*set_num_threads)(int);
	char *(*get_corename)(void);
	char *(*get_config)(void);
	int (*get_num_procs)(void);
} openblas_lib;

typedef struct {
	const char *path;
	void *so;
	char err[256];
	cblas_sgemm_fn sgemm;
	void (*set_num_threads)(long);
	const char *(*version)(void);
	int (*arch_query_id)(void);
	const char *(*arch_string)(int);
	long (*enable_openmp)(void);
} blis_lib;

static openblas_lib g_ob;
static blis_lib g_blis;

static void *dl_open(const char *path, char *err, size_t n)
{
	if (!path || !*path) { /* dlopen("") would hand back the main program */
		snprintf(err, n, "not found (set RG_LIBDIR, or the library's path)");
		return NULL;
	}
	void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!so)
		snprintf(err, n, "%s", dlerror());
	return so;
}

static void *dl_sym(void *so, const char *name, char *err, size_t n)
{
	void *f = dlsym(so, name);
	if (!f && !err[0])
		snprintf(err, n, "missing symbol %s", name);
	return f;
}

static bool openblas_load(openblas_lib *L)
{
	if (!(L->so = dl_open(L->path, L->err, sizeof(L->err))))
		return false;
	L->sgemm = (cblas_sgemm_fn)dl_sym(L->so, "cblas_sgemm", L->err, sizeof(L->err));
	L->set_num_threads = (void (*)(int))dl_sym(L->so, "openblas_set_num_threads", L->err,
						   sizeof(L->err));
	L->get_corename = (char *(*)(void))dlsym(L->so, "openblas_get_corename");
	L->get_config = (char *(*)(void))dlsym(L->so, "openblas_get_config");
	L->get_num_procs = (int (*)(void))dlsym(L->so, "openblas_get_num_procs");
	return L->sgemm && L->set_num_threads;
}

static bool blis_load(blis_lib *L)
{
	if (!(L->so = dl_open(L->path, L->err, sizeof(L->err))))
		return false;
	L->sgemm = (cblas_sgemm_fn)dl_sym(L->so, "cblas_sgemm", L->err, sizeof(L->err));
	L->set_num_threads = (void (*)(long))dl_sym(L->so, "bli_thread_set_num_threads", L->err,
						    sizeof(L->err));
	L->version = (const char *(*)(void))dlsym(L->so, "bli_info_get_version_str");
	L->arch_query_id = (int (*)(void))dlsym(L->so, "bli_arch_query_id");
	L->arch_string = (const char *(*)(int))dlsym(L->so, "bli_arch_string");
	L->enable_openmp = (long (*)(void))dlsym(L->so, "bli_info_get_enable_openmp");
	return L->sgemm && L->set_num_threads;
}

#if RG_HAVE_DNNL
/* Every oneDNN entry point used, typed from the header, resolved with dlsym. */
#define DNNL_FNS(X) \
	X(dnnl_version) X(dnnl_get_effective_cpu_isa) X(dnnl_engine_create) X(dnnl_engine_destroy) \
	X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_stream_wait) \
	X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_init_by_strides) \
	X(dnnl_memory_desc_equal) X(dnnl_matmul_desc_init) X(dnnl_reorder_primitive_desc_create) \
	X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy) \
	X(dnnl_primitive_attr_set_post_ops) X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) \
	X(dnnl_post_ops_append_eltwise) X(dnnl_primitive_desc_create) \
	X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) \
	X(dnnl_primitive_desc_query_md) X(dnnl_primitive_create) X(dnnl_primitive_destroy) \
	X(dnnl_primitive_execute) X(dnnl_memory_create) X(dnnl_memory_destroy)

typedef struct {
	const char *path;
	void *so;
	char err[256];
	dnnl_engine_t engine;
	dnnl_stream_t stream;
#define X(f) __typeof__(f) *f;
	DNNL_FNS(X)
#undef X
} dnnl_lib;

static dnnl_lib g_dnnl;
#define DN(f) (g_dnnl.f)

static bool dnnl_load(dnnl_lib *L)
{
	if (!(L->so = dl_open(L->path, L->err, sizeof(L->err))))
		return false;
#define X(f) L->f = (__typeof__(f) *)dl_sym(L->so, #f, L->err, sizeof(L->err));
	DNNL_FNS(X)
#undef X
	if (L->err[0])
		return false;
	const dnnl_version_t *v = L->dnnl_version();
	if (v->major != DNNL_VERSION_MAJOR) {
		snprintf(L->err, sizeof(L->err), "library is oneDNN %d.%d, headers are %d.x", v->major,
			 v->minor, DNNL_VERSION_MAJOR);
		return false;
	}
	if (L->dnnl_engine_create(&L->engine, dnnl_cpu, 0) != dnnl_success ||
	    L->dnnl_stream_create(&L->stream, L->engine, dnnl_stream_default_flags) != dnnl_success) {
		snprintf(L->err, sizeof(L->err), "engine/stream creation failed");
		return false;
	}
	return true;
}

static const char *dnnl_isa_name(dnnl_cpu_isa_t isa)
{
	switch ((int)isa) {
	case dnnl_cpu_isa_all: return "all";
	case dnnl_cpu_isa_sse41: return "sse41";
	case dnnl_cpu_isa_avx: return "avx";
	case dnnl_cpu_isa_avx2: return "avx2";
	case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
	case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
	case dnnl_cpu_isa_avx512_core: return "avx512_core";
	case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
	case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
	case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
	case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
	}
	return "unknown";
}
#endif

/* ---------------------------------------------------------------- shapes, candidates, cells */

typedef struct {
	char model[16];
	char layer[16];
	int M, N, K;
	epi_kind epi;
} gemm_shape;

typedef enum {
	CAND_OPENBLAS_MT,
	CAND_OPENBLAS_TILES,
	CAND_BLIS,
	CAND_ONEDNN,
	CAND_ONEDNN_REORD,
	CAND_PASS_POOL, /* the separate bias(+GELU) pass alone, on the pool */
	CAND_PASS_OMP,  /* the same, on OpenMP */
} cand_kind;

typedef struct {
	char name[32];
	cand_kind kind;
	int tile_mb, tile_q; /* openblas-tiles policy */
	bool available;
	char why[300];       /* why not available */
	bool verified_ok;
	double verify_err;
	int verify_fail_layers;
	double other_pct, steal_pct, wall_s; /* load by others while it was timed; time timed */
} cand;

#define MAX_ROUNDS 8

typedef struct {
	bool ran;
	double median_ms, min_ms, create_ms;
	int reps;
	double other_pct;               /* CPUs taken by other processes while it ran */
	int n_rounds;
	double round_ms[MAX_ROUNDS];    /* the median of every round */
	char impl[64];
} cell_result;

/* One shape's operands: S copies of weights and bias, one A and one C. */
typedef struct {
	gemm_shape s;
	int n_copies;
	float *a;                 /* (M, K) */
	float *w[MAX_COPIES];     /* (N, K) each */
	float *bias[MAX_COPIES];  /* (N) each */
	float *c;                 /* (M, N) */
} cell_bufs;

static void cell_bufs_init(cell_bufs *b, const gemm_shape *s, int n_copies, uint64_t seed)
{
	memset(b, 0, sizeof(*b));
	b->s = *s;
	b->n_copies = n_copies;
	b->a = xmalloc(sizeof(float) * (size_t)s->M * s->K);
	b->c = xmalloc(sizeof(float) * (size_t)s->M * s->N);
	fill_uniform(b->a, (size_t)s->M * s->K, seed, 1.f);
	memset(b->c, 0, sizeof(float) * (size_t)s->M * s->N);
	for (int i = 0; i < n_copies; i++) {
		b->w[i] = xmalloc(sizeof(float) * (size_t)s->N * s->K);
		b->bias[i] = xmalloc(sizeof(float) * (size_t)s->N);
		/* copy 0 is what the reference sees; the others only have to be distinct memory */
		fill_uniform(b->w[i], (size_t)s->N * s->K, seed * 31 + 7 + i, 1.f / sqrtf((float)s->K));
		fill_uniform(b->bias[i], (size_t)s->N, seed * 31 + 1000 + i, 0.5f);
	}
}

static void cell_bufs_free(cell_bufs *b)
{
	free(b->a);
	free(b->c);
	for (int i = 0; i < b->n_copies; i++) {
		free(b->w[i]);
		free(b->bias[i]);
	}
}

/* How the separate bias(+GELU) pass splits (M, N): row blocks when M allows, else 16-aligned
 * column blocks; at most 4 items per thread and at least 16 Ki elements per item. */
typedef struct {
	float *c;
	const float *bias;
	int M, N;
	epi_kind epi;
	bool by_rows;
	int per, n_items;
} pass_plan;

static void pass_plan_init(pass_plan *pp, float *c, const float *bias, int M, int N, epi_kind epi,
			   int T)
{
	pp->c = c;
	pp->bias = bias;
	pp->M = M;
	pp->N = N;
	pp->epi = epi;
	long want = ((long)M * N + 16383) / 16384;
	if (want > 4L * T)
		want = 4L * T;
	if (want < 1)
		want = 1;
	pp->by_rows = M >= want;
	if (pp->by_rows) {
		pp->per = (int)((M + want - 1) / want);
		pp->n_items = (M + pp->per - 1) / pp->per;
	} else {
		pp->per = (int)(((N + want - 1) / want + 15) / 16 * 16);
		pp->n_items = (N + pp->per - 1) / pp->per;
	}
}

static void pass_item(void *ctx, int it)
{
	const pass_plan *pp = ctx;
	if (pp->by_rows) {
		const int r0 = it * pp->per, rows = pp->M - r0 < pp->per ? pp->M - r0 : pp->per;
		bias_act_tile(pp->c + (size_t)r0 * pp->N, pp->N, rows, pp->N, pp->bias, pp->epi);
	} else {
		const int c0 = it * pp->per, cols = pp->N - c0 < pp->per ? pp->N - c0 : pp->per;
		bias_act_tile(pp->c + c0, pp->N, pp->M, cols, pp->bias + c0, pp->epi);
	}
}

static void pass_run_omp(pass_plan *pp)
{
	if (pp->n_items <= 1) {
		pass_item(pp, 0);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int it = 0; it < pp->n_items; it++)
		pass_item(pp, it);
}

/* Per-cell state of one candidate. */
typedef struct {
	const cand *cd;
	cell_bufs *b;
	rg_pool *pool;
	int T;
	int copy;
	/* openblas-tiles */
	int mb, nb, m_blocks, n_blocks;
	double create_ms;
	char impl[64];
#if RG_HAVE_DNNL
	dnnl_primitive_t prim;
	dnnl_memory_t src, dst;
	dnnl_memory_t wei[MAX_COPIES], bias[MAX_COPIES];
#endif
} runner;

static void tile_item(void *ctx, int t)
{
	const runner *r = ctx;
	const cell_bufs *b = r->b;
	const int M = b->s.M, N = b->s.N, K = b->s.K;
	const int mi = t / r->n_blocks, ni = t % r->n_blocks;
	const int r0 = mi * r->mb, c0 = ni * r->nb;
	const int rows = M - r0 < r->mb ? M - r0 : r->mb;
	const int cols = N - c0 < r->nb ? N - c0 : r->nb;
	float *c = b->c + (size_t)r0 * N + c0;
	g_ob.sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, rows, cols, K, 1.f,
		   b->a + (size_t)r0 * K, K, b->w[r->copy] + (size_t)c0 * K, K, 0.f, c, N);
	bias_act_tile(c, N, rows, cols, b->bias[r->copy] + c0, b->s.epi);
}

static void tiles_plan(runner *r)
{
	const int M = r->b->s.M, N = r->b->s.N;
	r->mb = M < r->cd->tile_mb ? M : r->cd->tile_mb;
	r->m_blocks = (M + r->mb - 1) / r->mb;
	int want_n = (r->cd->tile_q * r->T + r->m_blocks - 1) / r->m_blocks;
	if (want_n < 1)
		want_n = 1;
	r->nb = ((N + want_n - 1) / want_n + 15) / 16 * 16;
	if (r->nb > N)
		r->nb = N;
	r->n_blocks = (N + r->nb - 1) / r->nb;
	snprintf(r->impl, sizeof(r->impl), "%dx%d tiles of %dx%d", r->m_blocks, r->n_blocks, r->mb,
		 r->nb);
}

#if RG_HAVE_DNNL
static void dnnl_runner_free(runner *r)
{
	if (r->prim)
		DN(dnnl_primitive_destroy)(r->prim);
	if (r->src)
		DN(dnnl_memory_destroy)(r->src);
	if (r->dst)
		DN(dnnl_memory_destroy)(r->dst);
	for (int i = 0; i < MAX_COPIES; i++) {
		if (r->wei[i])
			DN(dnnl_memory_destroy)(r->wei[i]);
		if (r->bias[i])
			DN(dnnl_memory_destroy)(r->bias[i]);
	}
	r->prim = NULL;
	r->src = r->dst = NULL;
	memset(r->wei, 0, sizeof(r->wei));
	memset(r->bias, 0, sizeof(r->bias));
}

/* Create the matmul primitive for this shape (timed into create_ms, not into the cell) and
 * the memory objects of every weight copy; for onednn-reord, reorder each copy from "ba" to
 * the primitive's weights layout. Returns false with a message in err. */
static bool dnnl_runner_init(runner *r, char *err, size_t n)
{
	const gemm_shape *s = &r->b->s;
	const bool reord = r->cd->kind == CAND_ONEDNN_REORD;
	dnnl_memory_desc_t src_md, wei_md, wei_user_md, bias_md, dst_md;
	dnnl_matmul_desc_t mm;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	bool ok = false;
	const dnnl_dims_t sd = {s->M, s->K}, wd = {s->K, s->N}, ws = {1, s->K}, bd = {1, s->N},
			  dd = {s->M, s->N};
	DN(dnnl_memory_desc_init_by_tag)(&src_md, 2, sd, dnnl_f32, dnnl_ab);
	DN(dnnl_memory_desc_init_by_strides)(&wei_user_md, 2, wd, dnnl_f32, ws);
	if (reord)
		DN(dnnl_memory_desc_init_by_tag)(&wei_md, 2, wd, dnnl_f32, dnnl_format_tag_any);
	else
		wei_md = wei_user_md;
	DN(dnnl_memory_desc_init_by_tag)(&bias_md, 2, bd, dnnl_f32, dnnl_ab);
	DN(dnnl_memory_desc_init_by_tag)(&dst_md, 2, dd, dnnl_f32, dnnl_ab);

	const double t0 = now_s();
	if (DN(dnnl_matmul_desc_init)(&mm, &src_md, &wei_md, s->epi == EPI_NONE ? NULL : &bias_md,
				      &dst_md) != dnnl_success) {
		snprintf(err, n, "dnnl_matmul_desc_init failed");
		goto out_free_attr;
	}
	if (DN(dnnl_primitive_attr_create)(&attr) != dnnl_success) {
		snprintf(err, n, "dnnl_primitive_attr_create failed");
		goto out_free_attr;
	}
	if (s->epi == EPI_BIAS_GELU) {
		if (DN(dnnl_post_ops_create)(&po) != dnnl_success ||
		    DN(dnnl_post_ops_append_eltwise)(po, 1.f, dnnl_eltwise_gelu_erf, 0.f, 0.f) !=
			    dnnl_success ||
		    DN(dnnl_primitive_attr_set_post_ops)(attr, po) != dnnl_success) {
			snprintf(err, n, "gelu_erf post-op rejected");
			goto out_free_attr;
		}
	}
	if (DN(dnnl_primitive_desc_create)(&pd, &mm, attr, g_dnnl.engine, NULL) != dnnl_success) {
		snprintf(err, n, "no matmul implementation for %dx%dx%d", s->M, s->N, s->K);
		goto out_free_attr;
	}
	if (DN(dnnl_primitive_create)(&r->prim, pd) != dnnl_success) {
		snprintf(err, n, "dnnl_primitive_create failed");
		goto out_free_pd;
	}
	r->create_ms = 1e3 * (now_s() - t0);
	const char *impl = NULL;
	DN(dnnl_primitive_desc_query)(pd, dnnl_query_impl_info_str, 0, &impl);
	snprintf(r->impl, sizeof(r->impl), "%s", impl ? impl : "?");
	const dnnl_memory_desc_t *wei_pd_md = DN(dnnl_primitive_desc_query_md)(pd,
									     dnnl_query_weights_md, 0);
	if (reord && !DN(dnnl_memory_desc_equal)(wei_pd_md, &wei_user_md)) {
		size_t len = strlen(r->impl);
		snprintf(r->impl + len, sizeof(r->impl) - len, " +reord");
	}

	DN(dnnl_memory_create)(&r->src, &src_md, g_dnnl.engine, r->b->a);
	DN(dnnl_memory_create)(&r->dst, &dst_md, g_dnnl.engine, r->b->c);
	for (int i = 0; i < r->b->n_copies; i++) {
		if (s->epi != EPI_NONE)
			DN(dnnl_memory_create)(&r->bias[i], &bias_md, g_dnnl.engine, r->b->bias[i]);
		if (!reord) {
			DN(dnnl_memory_create)(&r->wei[i], &wei_user_md, g_dnnl.engine, r->b->w[i]);
			continue;
		}
		dnnl_memory_t user = NULL;
		dnnl_primitive_desc_t rpd = NULL;
		dnnl_primitive_t rp = NULL;
		bool rok = DN(dnnl_memory_create)(&r->wei[i], wei_pd_md, g_dnnl.engine,
						  DNNL_MEMORY_ALLOCATE) == dnnl_success &&
			   DN(dnnl_memory_create)(&user, &wei_user_md, g_dnnl.engine, r->b->w[i]) ==
				   dnnl_success &&
			   DN(dnnl_reorder_primitive_desc_create)(&rpd, &wei_user_md, g_dnnl.engine,
								  wei_pd_md, g_dnnl.engine,
								  NULL) == dnnl_success &&
			   DN(dnnl_primitive_create)(&rp, rpd) == dnnl_success;
		if (rok) {
			dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, r->wei[i]}};
			rok = DN(dnnl_primitive_execute)(rp, g_dnnl.stream, 2, args) == dnnl_success &&
			      DN(dnnl_stream_wait)(g_dnnl.stream) == dnnl_success;
		}
		if (rp)
			DN(dnnl_primitive_destroy)(rp);
		if (rpd)
			DN(dnnl_primitive_desc_destroy)(rpd);
		if (user)
			DN(dnnl_memory_destroy)(user);
		if (!rok) {
			snprintf(err, n, "weights reorder failed");
			goto out_free_pd;
		}
	}
	ok = true;
out_free_pd:
	DN(dnnl_primitive_desc_destroy)(pd);
out_free_attr:
	if (po)
		DN(dnnl_post_ops_destroy)(po);
	if (attr)
		DN(dnnl_primitive_attr_destroy)(attr);
	if (!ok)
		dnnl_runner_free(r);
	return ok;
}
#endif

static bool runner_init(runner *r, const cand *cd, cell_bufs *b, rg_pool *pool, int T, char *err,
			size_t n)
{
	memset(r, 0, sizeof(*r));
	r->cd = cd;
	r->b = b;
	r->pool = pool;
	r->T = T;
	switch (cd->kind) {
	case CAND_OPENBLAS_TILES:
		tiles_plan(r);
		return true;
	case CAND_OPENBLAS_MT:
	case CAND_BLIS:
		snprintf(r->impl, sizeof(r->impl), "sgemm + pass");
		return true;
	case CAND_PASS_POOL:
	case CAND_PASS_OMP:
		snprintf(r->impl, sizeof(r->impl), "pass only");
		return true;
	case CAND_ONEDNN:
	case CAND_ONEDNN_REORD:
#if RG_HAVE_DNNL
		return dnnl_runner_init(r, err, n);
#else
		snprintf(err, n, "%s", RG_DNNL_BUILD_NOTE);
		return false;
#endif
	}
	return false;
}

static void runner_free(runner *r)
{
#if RG_HAVE_DNNL
	if (r->cd->kind == CAND_ONEDNN || r->cd->kind == CAND_ONEDNN_REORD)
		dnnl_runner_free(r);
#else
	(void)r;
#endif
}

/* One call of the layer, as production would make it, on weight copy `copy`. */
static void runner_call(runner *r, int copy)
{
	cell_bufs *b = r->b;
	const gemm_shape *s = &b->s;
	pass_plan pp;
	r->copy = copy;
	switch (r->cd->kind) {
	case CAND_OPENBLAS_MT:
		g_ob.sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, s->M, s->N, s->K, 1.f, b->a,
			   s->K, b->w[copy], s->K, 0.f, b->c, s->N);
		if (s->epi != EPI_NONE) {
			pass_plan_init(&pp, b->c, b->bias[copy], s->M, s->N, s->epi, r->T);
			rg_pool_run(r->pool, pp.n_items, pass_item, &pp);
		}
		return;
	case CAND_OPENBLAS_TILES:
		rg_pool_run(r->pool, r->m_blocks * r->n_blocks, tile_item, r);
		return;
	case CAND_BLIS:
		g_blis.sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, s->M, s->N, s->K, 1.f, b->a,
			     s->K, b->w[copy], s->K, 0.f, b->c, s->N);
		if (s->epi != EPI_NONE) {
			pass_plan_init(&pp, b->c, b->bias[copy], s->M, s->N, s->epi, r->T);
			pass_run_omp(&pp);
		}
		return;
	case CAND_ONEDNN:
	case CAND_ONEDNN_REORD: {
#if RG_HAVE_DNNL
		dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, r->src},
					   {DNNL_ARG_WEIGHTS, r->wei[copy]},
					   {DNNL_ARG_DST, r->dst},
					   {DNNL_ARG_BIAS, r->bias[copy]}};
		if (DN(dnnl_primitive_execute)(r->prim, g_dnnl.stream, s->epi == EPI_NONE ? 3 : 4,
					       args) != dnnl_success ||
		    DN(dnnl_stream_wait)(g_dnnl.stream) != dnnl_success) {
			fprintf(stderr, "dnnl_primitive_execute failed\n");
			abort(); /* the same primitive ran in verification: a broken invariant */
		}
#endif
		return;
	}
	case CAND_PASS_POOL:
	case CAND_PASS_OMP:
		pass_plan_init(&pp, b->c, b->bias[copy], s->M, s->N, s->epi, r->T);
		if (r->cd->kind == CAND_PASS_POOL)
			rg_pool_run(r->pool, pp.n_items, pass_item, &pp);
		else
			pass_run_omp(&pp);
		return;
	}
}

/* Set every runtime's thread count for candidate cd. */
static void cand_set_threads(const cand *cd, int T)
{
	omp_set_num_threads(T);
	if (g_ob.so && g_ob.set_num_threads)
		g_ob.set_num_threads(cd->kind == CAND_OPENBLAS_TILES ? 1 : T);
	if (g_blis.so && g_blis.set_num_threads)
		g_blis.set_num_threads(T);
}

/* ---------------------------------------------------------------- reference and timing */

static double gelu_ref(double x)
{
	return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

/* ref (M, N) in double from copy 0 of b. */
static void reference(const cell_bufs *b, double *ref)
{
	const gemm_shape *s = &b->s;
	for (int i = 0; i < s->M; i++)
		for (int j = 0; j < s->N; j++) {
			const float *a = b->a + (size_t)i * s->K, *w = b->w[0] + (size_t)j * s->K;
			double acc = 0;
			for (int k = 0; k < s->K; k++)
				acc += (double)a[k] * (double)w[k];
			if (s->epi != EPI_NONE)
				acc += b->bias[0][j];
			if (s->epi == EPI_BIAS_GELU)
				acc = gelu_ref(acc);
			ref[(size_t)i * s->N + j] = acc;
		}
}

/* max |c - ref| / max |ref|; NaN in c gives +inf. */
static double rel_max_err(const float *c, const double *ref, size_t n)
{
	double md = 0, mr = 0;
	for (size_t i = 0; i < n; i++) {
		const double d = fabs((double)c[i] - ref[i]);
		if (!(d <= md))
			md = isnan(d) ? INFINITY : d;
		if (fabs(ref[i]) > mr)
			mr = fabs(ref[i]);
	}
	return mr > 0 ? md / mr : md;
}

typedef struct {
	double budget_s, cell_cap_s;
	int min_reps, max_reps;
} timing_opts;

/* Warm-up (one call, more until 10% of the budget has passed), then repetitions for the budget,
 * at least min_reps. A cell whose repetitions would pass cell_cap_s gets fewer (at least one);
 * a call longer than cell_cap_s is its own only sample, so that a crippled library (BLIS on its
 * generic kernels) cannot eat the run. Weight copies rotate call by call. */
static void measure(runner *r, const timing_opts *to, cell_result *res)
{
	const int S = r->b->n_copies;
	int copy = 0, reps = 1;
	double t0 = now_s();
	runner_call(r, copy++ % S);
	double est = now_s() - t0;
	double *t = NULL;
	if (est > to->cell_cap_s) {
		t = xmalloc(sizeof(double));
		t[0] = est;
		goto out_sort;
	}
	const double warm_end = t0 + 0.1 * to->budget_s;
	while (now_s() < warm_end) {
		t0 = now_s();
		runner_call(r, copy++ % S);
		est = now_s() - t0;
	}
	reps = est > 0 ? (int)(to->budget_s / est) : to->max_reps;
	if (reps < to->min_reps)
		reps = to->min_reps;
	if (reps > to->max_reps)
		reps = to->max_reps;
	if (est > 0 && reps * est > to->cell_cap_s)
		reps = (int)(to->cell_cap_s / est) > 1 ? (int)(to->cell_cap_s / est) : 1;
	t = xmalloc(sizeof(double) * (size_t)reps);
	for (int i = 0; i < reps; i++) {
		t0 = now_s();
		runner_call(r, copy++ % S);
		t[i] = now_s() - t0;
	}
out_sort:
	qsort(t, (size_t)reps, sizeof(double), cmp_double);
	res->ran = true;
	res->reps = reps;
	res->median_ms = 1e3 * (reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]));
	res->min_ms = 1e3 * t[0];
	res->create_ms = r->create_ms;
	snprintf(res->impl, sizeof(res->impl), "%s", r->impl);
	free(t);
}

/* ---------------------------------------------------------------- report */

static const struct {
	const char *name;
	int H, I;
} MODELS[] = {{"minilm", 384, 1536}, {"bert-base", 768, 3072}};
#define N_MODELS ((int)(sizeof(MODELS) / sizeof(MODELS[0])))
#define N_LAYERS 4

static void model_layer(int mi, int li, int M, gemm_shape *s)
{
	const int H = MODELS[mi].H, I = MODELS[mi].I;
	static const char *names[N_LAYERS] = {"qkv", "attn-out", "ffn-up", "ffn-down"};
	const int N[N_LAYERS] = {3 * H, H, I, H}, K[N_LAYERS] = {H, H, H, I};
	snprintf(s->model, sizeof(s->model), "%s", MODELS[mi].name);
	snprintf(s->layer, sizeof(s->layer), "%s", names[li]);
	s->M = M;
	s->N = N[li];
	s->K = K[li];
	s->epi = li == 2 ? EPI_BIAS_GELU : EPI_BIAS;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void read_cpu_name(char *out, size_t n)
{
	snprintf(out, n, "unknown");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *p = strchr(line, ':');
			if (p) {
				p += 1 + (p[1] == ' ');
				p[strcspn(p, "\n")] = 0;
				snprintf(out, n, "%s", p);
			}
			break;
		}
	}
	fclose(f);
}

/* The last-level cache that cpu0 sees: sysfs first, since a VM's cpuid may describe the whole
 * package (here glibc says 384 MiB where the guest has 32 MiB). */
static size_t llc_bytes(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
	size_t kb = 0;
	if (f) {
		if (fscanf(f, "%zuK", &kb) != 1)
			kb = 0;
		fclose(f);
	}
	if (kb)
		return kb * 1024;
	long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
	return v > 0 ? (size_t)v : (size_t)32 << 20;
}

/* CPU time of the whole machine (busy and steal, /proc/stat) and of this process, to tell how
 * much of the CPUs other processes took while a candidate ran. */
typedef struct {
	double busy_s, steal_s, self_s, wall_s;
} cpu_snap;

static void cpu_snap_take(cpu_snap *c)
{
	unsigned long long v[10] = {0};
	const double hz = (double)sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/stat", "r");
	if (f) {
		if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
			   &v[4], &v[5], &v[6], &v[7]) != 8)
			memset(v, 0, sizeof(v));
		fclose(f);
	}
	/* user nice system idle iowait irq softirq steal */
	c->busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / hz;
	c->steal_s = (double)v[7] / hz;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	c->self_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
		    (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
	c->wall_s = now_s();
}

/* Percent of all online CPUs used by other processes (and stolen by the hypervisor) between
 * two snapshots. */
static void cpu_snap_diff(const cpu_snap *a, const cpu_snap *b, double *other_pct,
			  double *steal_pct)
{
	const double cap = (b->wall_s - a->wall_s) * (double)sysconf(_SC_NPROCESSORS_ONLN);
	double other = (b->busy_s - a->busy_s) - (b->self_s - a->self_s);
	*other_pct = cap > 0 ? 100.0 * (other > 0 ? other : 0) / cap : 0;
	*steal_pct = cap > 0 ? 100.0 * (b->steal_s - a->steal_s) / cap : 0;
}

static int parse_int_list(const char *s, int *out, int max)
{
	int n = 0;
	while (*s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v <= 0)
			return -1;
		out[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_cpu_gemm_libs [options]\n"
		"  -t, --threads T     threads for every candidate (default: CPUs in the affinity mask)\n"
		"  --budget S          seconds of timed repetitions per cell (default 0.2)\n"
		"  --min-reps N        at least N timed repetitions per cell (default 3)\n"
		"  --cell-cap S        at most ~S seconds of repetitions per cell (default 2)\n"
		"  --rounds R          repeat the sweep R times (<= 8), keep each cell's best median\n"
		"  --quick             M in {12, 600, 2048}, budget 0.1 s\n"
		"  --tokens LIST       M values, e.g. 12,64,600,2048,8192 (the default)\n"
		"  --models LIST       minilm,bert-base (default both)\n"
		"  --cands LIST        openblas-mt,openblas-tiles,blis,onednn,onednn-reord (default all)\n"
		"  --tiles LIST        openblas-tiles policies MBxQ (default 256x2,64x4)\n"
		"  --verify-m M        M of the float64 check (default 137)\n"
		"  --no-rotate         one copy of the weights (they stay in cache)\n"
		"  --spin-us U         pool workers spin U us before sleeping (default 50)\n"
		"  --openblas PATH     (env RG_OPENBLAS) default %s\n"
		"  --blis PATH         (env RG_BLIS) default %s\n"
		"  --dnnl PATH         (env RG_DNNL) default %s\n"
		"  --json FILE         also write the results as JSON\n"
		"  --commit STR        recorded in the JSON (else $RAGGED_COMMIT)\n",
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
		"/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "libdnnl.so.2");
}

static bool list_has(const char *list, const char *name)
{
	if (!list)
		return true;
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	int T = 0, tokens[16] = {12, 64, 600, 2048, 8192}, n_tokens = 5, verify_m = 137, rounds = 1;
	int tile_mb[8] = {256, 64}, tile_q[8] = {2, 4}, n_tiles = 2;
	bool quick = false, rotate = true, tokens_set = false, budget_set = false;
	timing_opts to = {0.2, 2.0, 3, 100000};
	double spin_us = 50;
	const char *json_path = NULL, *models = NULL, *cands_list = NULL;
	const char *commit = getenv("RAGGED_COMMIT");
	g_ob.path = getenv("RG_OPENBLAS");
	g_blis.path = getenv("RG_BLIS");
	const char *dnnl_path = getenv("RG_DNNL");
	if (!g_ob.path)
		g_ob.path = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
	if (!g_blis.path)
		g_blis.path = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
	if (!dnnl_path)
		dnnl_path = "libdnnl.so.2";

	enum { O_BUDGET = 256, O_MINREPS, O_CAP, O_ROUNDS, O_QUICK, O_TOKENS, O_MODELS, O_CANDS,
	       O_TILES, O_VERIFY, O_NOROT, O_SPIN, O_OB, O_BLIS, O_DNNL, O_JSON, O_COMMIT };
	static const struct option lo[] = {
		{"threads", 1, 0, 't'},       {"budget", 1, 0, O_BUDGET},  {"min-reps", 1, 0, O_MINREPS},
		{"cell-cap", 1, 0, O_CAP},    {"rounds", 1, 0, O_ROUNDS},  {"quick", 0, 0, O_QUICK},
		{"tokens", 1, 0, O_TOKENS},   {"models", 1, 0, O_MODELS},  {"cands", 1, 0, O_CANDS},
		{"tiles", 1, 0, O_TILES},     {"verify-m", 1, 0, O_VERIFY}, {"no-rotate", 0, 0, O_NOROT},
		{"spin-us", 1, 0, O_SPIN},    {"openblas", 1, 0, O_OB},    {"blis", 1, 0, O_BLIS},
		{"dnnl", 1, 0, O_DNNL},       {"json", 1, 0, O_JSON},      {"commit", 1, 0, O_COMMIT},
		{"help", 0, 0, 'h'},          {0, 0, 0, 0}};
	int o;
	while ((o = getopt_long(argc, argv, "t:h", lo, NULL)) != -1) {
		switch (o) {
		case 't': T = atoi(optarg); break;
		case O_BUDGET: to.budget_s = atof(optarg); budget_set = true; break;
		case O_MINREPS: to.min_reps = atoi(optarg); break;
		case O_CAP: to.cell_cap_s = atof(optarg); break;
		case O_ROUNDS: rounds = atoi(optarg); break;
		case O_QUICK: quick = true; break;
		case O_TOKENS:
			n_tokens = parse_int_list(optarg, tokens, 16);
			tokens_set = true;
			break;
		case O_MODELS: models = optarg; break;
		case O_CANDS: cands_list = optarg; break;
		case O_TILES: {
			n_tiles = 0;
			for (const char *p = optarg; *p && n_tiles < 8;) {
				int mb, q, used;
				if (sscanf(p, "%dx%d%n", &mb, &q, &used) != 2 || mb < 1 || q < 1) {
					n_tiles = -1;
					break;
				}
				tile_mb[n_tiles] = mb;
				tile_q[n_tiles++] = q;
				p += used;
				if (*p == ',')
					p++;
			}
			break;
		}
		case O_VERIFY: verify_m = atoi(optarg); break;
		case O_NOROT: rotate = false; break;
		case O_SPIN: spin_us = atof(optarg); break;
		case O_OB: g_ob.path = optarg; break;
		case O_BLIS: g_blis.path = optarg; break;
		case O_DNNL: dnnl_path = optarg; break;
		case O_JSON: json_path = optarg; break;
		case O_COMMIT: commit = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc || n_tokens < 1 || n_tiles < 1 || to.budget_s <= 0 || to.min_reps < 1 ||
	    to.cell_cap_s <= 0 || verify_m < 1 || T < 0 || rounds < 1 || rounds > MAX_ROUNDS) {
		usage(stderr);
		return 2;
	}
	if (quick && !tokens_set) {
		const int q[3] = {12, 600, 2048};
		memcpy(tokens, q, sizeof(q));
		n_tokens = 3;
	}
	if (quick && !budget_set)
		to.budget_s = 0.1;
	if (T == 0) {
		cpu_set_t cs;
		T = sched_getaffinity(0, sizeof(cs), &cs) == 0 ? CPU_COUNT(&cs) : 1;
	}

	/* libraries */
	const bool ob_ok = openblas_load(&g_ob);
	const bool blis_ok = blis_load(&g_blis);
	bool dnnl_ok = false;
	char dnnl_err[300] = "";
#if RG_HAVE_DNNL
	g_dnnl.path = dnnl_path;
	dnnl_ok = dnnl_load(&g_dnnl);
	if (!dnnl_ok)
		snprintf(dnnl_err, sizeof(dnnl_err), "%s: %s", dnnl_path, g_dnnl.err);
#else
	snprintf(dnnl_err, sizeof(dnnl_err), "%s", RG_DNNL_BUILD_NOTE);
#endif

	/* candidates */
	cand cands[MAX_CANDS];
	int nc = 0;
#define ADD_CAND(nm, kd, ok, err, mb, q)                                                       \
	do {                                                                                   \
		memset(&cands[nc], 0, sizeof(cand));                                           \
		snprintf(cands[nc].name, sizeof(cands[nc].name), "%s", nm);                    \
		cands[nc].kind = kd;                                                           \
		cands[nc].available = ok;                                                      \
		cands[nc].tile_mb = mb;                                                        \
		cands[nc].tile_q = q;                                                          \
		if (!(ok))                                                                     \
			snprintf(cands[nc].why, sizeof(cands[nc].why), "%s", err);             \
		nc++;                                                                          \
	} while (0)
	char oberr[300], blerr[300];
	snprintf(oberr, sizeof(oberr), "%s: %s", *g_ob.path ? g_ob.path : "OpenBLAS", g_ob.err);
	snprintf(blerr, sizeof(blerr), "%s: %s", *g_blis.path ? g_blis.path : "BLIS", g_blis.err);
	if (list_has(cands_list, "openblas-mt"))
		ADD_CAND("openblas-mt", CAND_OPENBLAS_MT, ob_ok, oberr, 0, 0);
	if (list_has(cands_list, "openblas-tiles"))
		for (int i = 0; i < n_tiles && nc < MAX_CANDS - 3; i++) {
			char nm[32];
			snprintf(nm, sizeof(nm), "ob-tiles %dx%d", tile_mb[i], tile_q[i]);
			ADD_CAND(nm, CAND_OPENBLAS_TILES, ob_ok, oberr, tile_mb[i], tile_q[i]);
		}
	if (list_has(cands_list, "blis"))
		ADD_CAND("blis", CAND_BLIS, blis_ok, blerr, 0, 0);
	if (list_has(cands_list, "onednn"))
		ADD_CAND("onednn", CAND_ONEDNN, dnnl_ok, dnnl_err, 0, 0);
	if (list_has(cands_list, "onednn-reord"))
		ADD_CAND("onednn-reord", CAND_ONEDNN_REORD, dnnl_ok, dnnl_err, 0, 0);
#undef ADD_CAND
	if (nc == 0) {
		fprintf(stderr, "no candidate selected\n");
		return 2;
	}

	/* shapes: per model, per M, the 4 layers; then the 1024^3 ceiling */
	gemm_shape shapes[MAX_SHAPES];
	int ns = 0;
	for (int mi = 0; mi < N_MODELS; mi++) {
		if (!list_has(models, MODELS[mi].name))
			continue;
		for (int ti = 0; ti < n_tokens; ti++)
			for (int li = 0; li < N_LAYERS && ns < MAX_SHAPES - 1; li++)
				model_layer(mi, li, tokens[ti], &shapes[ns++]);
	}
	const int ceil_idx = ns;
	shapes[ns] = (gemm_shape){"sgemm", "1024^3", 1024, 1024, 1024, EPI_NONE};
	ns++;

	/* report header */
	char cpu[256], date[64];
	read_cpu_name(cpu, sizeof(cpu));
	time_t now = time(NULL);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S%z", localtime(&now));
	const size_t llc = llc_bytes();
	const double erf_err = erf_max_abs_err();
	printf("# CPU GEMM libraries for ragged's fp32 linear layers\n\n");
	printf("- host: %s, %ld CPUs online, T = %d threads, LLC %zu MiB, %s\n", cpu,
	       sysconf(_SC_NPROCESSORS_ONLN), T, llc >> 20, date);
	printf("- build: gcc %s, flags `%s`\n", __VERSION__, RG_BUILD_FLAGS);
	if (ob_ok)
		printf("- OpenBLAS: %s; core `%s`; config `%s`; %d procs\n", g_ob.path,
		       g_ob.get_corename ? g_ob.get_corename() : "?",
		       g_ob.get_config ? g_ob.get_config() : "?",
		       g_ob.get_num_procs ? g_ob.get_num_procs() : -1);
	else
		printf("- OpenBLAS: not loaded (%s)\n", oberr);
	if (blis_ok)
		printf("- BLIS: %s; version %s; arch `%s`; OpenMP %s\n", g_blis.path,
		       g_blis.version ? g_blis.version() : "?",
		       g_blis.arch_string && g_blis.arch_query_id
			       ? g_blis.arch_string(g_blis.arch_query_id())
			       : "?",
		       g_blis.enable_openmp ? (g_blis.enable_openmp() ? "yes" : "no") : "?");
	else
		printf("- BLIS: not loaded (%s)\n", blerr);
#if RG_HAVE_DNNL
	if (dnnl_ok) {
		const dnnl_version_t *v = DN(dnnl_version)();
		printf("- oneDNN: %s; version %d.%d.%d (%s); effective ISA `%s`; CPU runtime %s\n",
		       dnnl_path, v->major, v->minor, v->patch, v->hash,
		       dnnl_isa_name(DN(dnnl_get_effective_cpu_isa)()),
		       v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
	} else
#endif
		printf("- oneDNN: not loaded (%s)\n", dnnl_err);
	printf("- epilogue (openblas-mt, ob-tiles, blis): bias + exact GELU, erf = branch-free "
	       "Cephes-style approximation (|x|<1: x*T(x^2); else 1 - exp(-x^2)/|x|*P(1/x^2), own "
	       "exp), max |err| vs double erf = %.2g; `#pragma omp simd` loops\n",
	       erf_err);
	printf("- oneDNN epilogue: bias + `eltwise_gelu_erf` post-op inside the matmul\n");
	printf("- env:");
	const char *envs[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
			      "OMP_NUM_THREADS",
			      "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BLIS_ARCH_TYPE", "DNNL_VERBOSE",
			      "DNNL_MAX_CPU_ISA", "RG_LIBDIR"};
	int n_env = 0;
	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++)
		if (getenv(envs[i]))
			printf("%s %s=%s", n_env++ ? "," : "", envs[i], getenv(envs[i]));
	printf("%s\n", n_env ? "" : " (none of the tuning variables set)");
	printf("- timing: shape by shape, the candidates one after the other on the same buffers; "
	       "median of >= %d reps over %.2f s per cell after warm-up (fewer past %.1f s a cell); "
	       "%d round(s), best median kept; weights rotate over copies covering >= 2x LLC%s; pool "
	       "workers spin %.0f us\n\n",
	       to.min_reps, to.budget_s, to.cell_cap_s, rounds, rotate ? "" : " (off: --no-rotate)",
	       spin_us);
	fflush(stdout);

	static cell_result res[MAX_CANDS][MAX_SHAPES];
	memset(res, 0, sizeof(res));
	rg_pool *pool = rg_pool_init(T, spin_us * 1e-6);
	int rc = 0;
	const double t_start = now_s();

	/* float64 references at M = verify_m, one per distinct layer shape */
	double *refs[MAX_SHAPES] = {0};
	gemm_shape vshapes[MAX_SHAPES];
	int nv = 0;
	for (int mi = 0; mi < N_MODELS; mi++)
		if (list_has(models, MODELS[mi].name))
			for (int li = 0; li < N_LAYERS; li++)
				model_layer(mi, li, verify_m, &vshapes[nv++]);
	for (int v = 0; v < nv; v++) {
		cell_bufs b;
		cell_bufs_init(&b, &vshapes[v], 1, 1000 + v);
		refs[v] = xmalloc(sizeof(double) * (size_t)vshapes[v].M * vshapes[v].N);
		reference(&b, refs[v]);
		cell_bufs_free(&b);
	}

	/* verification: every candidate on every layer shape at M = verify_m */
	for (int ci = 0; ci < nc; ci++) {
		cand *cd = &cands[ci];
		if (!cd->available)
			continue;
		cand_set_threads(cd, T);
		cd->verified_ok = true;
		for (int v = 0; v < nv; v++) {
			cell_bufs b;
			runner r;
			char err[300] = "";
			cell_bufs_init(&b, &vshapes[v], 1, 1000 + v);
			if (!runner_init(&r, cd, &b, pool, T, err, sizeof(err))) {
				cd->available = false;
				snprintf(cd->why, sizeof(cd->why), "%s", err);
				cell_bufs_free(&b);
				break;
			}
			runner_call(&r, 0);
			const double e = rel_max_err(b.c, refs[v], (size_t)b.s.M * b.s.N);
			if (!(e <= cd->verify_err))
				cd->verify_err = e;
			if (!(e <= VERIFY_TOL)) {
				cd->verified_ok = false;
				cd->verify_fail_layers++;
			}
			runner_free(&r);
			cell_bufs_free(&b);
		}
		if (cd->available && !cd->verified_ok)
			rc = 1;
	}

	/* the separate bias+GELU pass alone, on every FFN-up output, on both thread runtimes */
	cand pass_cands[2];
	static cell_result pass_res[2][MAX_SHAPES];
	memset(pass_cands, 0, sizeof(pass_cands));
	memset(pass_res, 0, sizeof(pass_res));
	snprintf(pass_cands[0].name, sizeof(pass_cands[0].name), "pass on pool");
	pass_cands[0].kind = CAND_PASS_POOL;
	snprintf(pass_cands[1].name, sizeof(pass_cands[1].name), "pass on OpenMP");
	pass_cands[1].kind = CAND_PASS_OMP;

	/* Timing, shape by shape: every candidate times the same buffers, one after the other, so
	 * that a slow drift of the host (clocks, neighbours) hits all candidates of a shape alike.
	 * Between cells a pause lets the last runtime's idle threads fall asleep (OpenBLAS's
	 * workers spin about 0.1 s, libgomp's a few ms, the pool's 50 us). With --rounds the
	 * sweep repeats and each cell keeps its fastest median. */
	double other_s[MAX_CANDS] = {0}, steal_s[MAX_CANDS] = {0}, cap_s[MAX_CANDS] = {0};
	cand_kind prev = CAND_PASS_OMP;
	for (int round = 0; round < rounds; round++) {
		for (int si = 0; si < ns; si++) {
			const gemm_shape *s = &shapes[si];
			const size_t wbytes = sizeof(float) * ((size_t)s->N * s->K + s->N);
			int S = 1;
			if (rotate && si != ceil_idx) {
				S = (int)((2 * llc + wbytes - 1) / wbytes);
				if (S > MAX_COPIES)
					S = MAX_COPIES;
				if ((size_t)S * wbytes > ((size_t)1 << 30))
					S = (int)(((size_t)1 << 30) / wbytes);
				if (S < 1)
					S = 1;
			}
			cell_bufs b;
			cell_bufs_init(&b, s, S, 7 + si);
			for (int k = 0; k < nc + 2; k++) {
				const bool is_pass = k >= nc;
				cand *cd = is_pass ? &pass_cands[k - nc] : &cands[k];
				cell_result *dst = is_pass ? &pass_res[k - nc][si] : &res[k][si];
				if (is_pass ? s->epi != EPI_BIAS_GELU : !cd->available)
					continue;
				if (is_pass) /* a GEMM output's worth of values for the pass to chew on */
					fill_uniform(b.c, (size_t)s->M * s->N, 99, 3.f);
				cand_set_threads(cd, T);
				usleep(prev == CAND_OPENBLAS_MT ? 120000 : 20000);
				prev = cd->kind;
				runner r;
				char err[300] = "";
				if (!runner_init(&r, cd, &b, pool, T, err, sizeof(err))) {
					fprintf(stderr, "%s %s %s M=%d: %s\n", cd->name, s->model, s->layer,
						s->M, err);
					rc = 1;
					continue;
				}
				cell_result cr = {0};
				cpu_snap a0, a1;
				cpu_snap_take(&a0);
				measure(&r, &to, &cr);
				cpu_snap_take(&a1);
				runner_free(&r);
				double steal;
				cpu_snap_diff(&a0, &a1, &cr.other_pct, &steal);
				if (!is_pass) {
					const double cap = (a1.wall_s - a0.wall_s) *
							   (double)sysconf(_SC_NPROCESSORS_ONLN);
					other_s[k] += cr.other_pct * cap / 100;
					steal_s[k] += steal * cap / 100;
					cap_s[k] += cap;
					cd->wall_s += a1.wall_s - a0.wall_s;
				}
				const int n_rounds = dst->n_rounds;
				double round_ms[MAX_ROUNDS];
				memcpy(round_ms, dst->round_ms, sizeof(round_ms));
				if (!dst->ran || cr.median_ms < dst->median_ms)
					*dst = cr;
				memcpy(dst->round_ms, round_ms, sizeof(round_ms));
				dst->round_ms[n_rounds] = cr.median_ms;
				dst->n_rounds = n_rounds + 1;
			}
			cell_bufs_free(&b);
			if (si % N_LAYERS == N_LAYERS - 1 || si == ceil_idx)
				fprintf(stderr, "[%6.1f s] round %d: %s M=%d done\n", now_s() - t_start,
					round + 1, s->model, s->M);
		}
	}
	for (int ci = 0; ci < nc; ci++)
		if (cap_s[ci] > 0) {
			cands[ci].other_pct = 100 * other_s[ci] / cap_s[ci];
			cands[ci].steal_pct = 100 * steal_s[ci] / cap_s[ci];
		}
	rg_pool_free(pool);

	/* verification table */
	printf("## Verification (M = %d, every layer shape, float64 naive reference, max|err|/max|ref| "
	       "<= %.0e)\n\n| candidate | result | worst rel err | timed s | other processes / steal "
	       "(%% of CPUs) |\n|---|---|---|---|---|\n",
	       verify_m, VERIFY_TOL);
	double worst_other = 0;
	for (int ci = 0; ci < nc; ci++) {
		const cand *cd = &cands[ci];
		if (!cd->available) {
			printf("| %s | SKIP | %s | | |\n", cd->name, cd->why);
			continue;
		}
		printf("| %s | %s | %.2e | %.1f | %.0f / %.0f |\n", cd->name,
		       nv == 0 ? "- (no layer shape)" : cd->verified_ok ? "PASS" : "FAIL", cd->verify_err,
		       cd->wall_s, cd->other_pct, cd->steal_pct);
		if (cd->other_pct + cd->steal_pct > worst_other)
			worst_other = cd->other_pct + cd->steal_pct;
	}
	if (worst_other > 5)
		printf("\n**Warning: other processes (or the hypervisor) took %.0f%% of the CPUs while a "
		       "candidate ran; cells marked † saw more than 10%%. Those times are not clean.**\n",
		       worst_other);

	/* per-GEMM table */
	printf("\n## Per GEMM: median ms (GFLOP/s), T = %d\n\n| model | layer | M | N | K |", T);
	for (int ci = 0; ci < nc; ci++)
		printf(" %s |", cands[ci].name);
	printf(" best |\n|---|---|---|---|---|");
	for (int ci = 0; ci < nc; ci++)
		printf("---|");
	printf("---|\n");
	for (int si = 0; si < ns; si++) {
		const gemm_shape *s = &shapes[si];
		const double flop = 2.0 * s->M * s->N * s->K;
		int best = -1;
		for (int ci = 0; ci < nc; ci++)
			if (res[ci][si].ran && cands[ci].verified_ok &&
			    (best < 0 || res[ci][si].median_ms < res[best][si].median_ms))
				best = ci;
		printf("| %s | %s%s | %d | %d | %d |", s->model, s->layer,
		       s->epi == EPI_BIAS_GELU ? "+gelu" : "", s->M, s->N, s->K);
		for (int ci = 0; ci < nc; ci++) {
			const cell_result *cr = &res[ci][si];
			if (!cr->ran)
				printf(" - |");
			else
				printf(ci == best ? " **%.3f (%.0f)**%s |" : " %.3f (%.0f)%s |",
				       cr->median_ms, flop / (cr->median_ms * 1e6),
				       cr->other_pct > 10 ? "†" : "");
		}
		printf(" %s |\n", best >= 0 ? cands[best].name : "-");
	}

	/* per-layer totals */
	printf("\n## Per encoder layer (sum of the 4 GEMMs): median ms, T = %d\n\n| model | M |", T);
	for (int ci = 0; ci < nc; ci++)
		printf(" %s |", cands[ci].name);
	printf(" best | openblas-mt / best |\n|---|---|");
	for (int ci = 0; ci < nc; ci++)
		printf("---|");
	printf("---|---|\n");
	for (int si = 0; si + N_LAYERS <= ceil_idx; si += N_LAYERS) {
		double tot[MAX_CANDS];
		int best = -1, obmt = -1;
		for (int ci = 0; ci < nc; ci++) {
			tot[ci] = 0;
			for (int li = 0; li < N_LAYERS; li++)
				tot[ci] = res[ci][si + li].ran ? tot[ci] + res[ci][si + li].median_ms : NAN;
			if (!isnan(tot[ci]) && cands[ci].verified_ok && (best < 0 || tot[ci] < tot[best]))
				best = ci;
			if (cands[ci].kind == CAND_OPENBLAS_MT && !isnan(tot[ci]))
				obmt = ci;
		}
		printf("| %s | %d |", shapes[si].model, shapes[si].M);
		for (int ci = 0; ci < nc; ci++)
			printf(isnan(tot[ci]) ? " - |" : ci == best ? " **%.3f** |" : " %.3f |", tot[ci]);
		if (best >= 0 && obmt >= 0)
			printf(" %s | %.2fx |\n", cands[best].name, tot[obmt] / tot[best]);
		else
			printf(" %s | - |\n", best >= 0 ? cands[best].name : "-");
	}

	printf("\n## The separate bias+GELU pass alone (FFN-up output), T = %d\n\n| model | M | N | "
	       "on pool ms | on OpenMP ms | GB/s (pool) |\n|---|---|---|---|---|---|\n",
	       T);
	for (int si = 0; si < ceil_idx; si++) {
		if (shapes[si].epi != EPI_BIAS_GELU || !pass_res[0][si].ran || !pass_res[1][si].ran)
			continue;
		const double bytes = 4.0 * (2.0 * shapes[si].M * shapes[si].N + shapes[si].N);
		printf("| %s | %d | %d | %.3f | %.3f | %.1f |\n", shapes[si].model, shapes[si].M,
		       shapes[si].N, pass_res[0][si].median_ms, pass_res[1][si].median_ms,
		       bytes / (pass_res[0][si].median_ms * 1e6));
	}

	/* implementation notes: oneDNN kernels and primitive creation cost, tile plans */
	printf("\n## Implementations chosen\n\n");
	for (int ci = 0; ci < nc; ci++) {
		if (cands[ci].kind != CAND_ONEDNN && cands[ci].kind != CAND_ONEDNN_REORD)
			continue;
		double cmax = 0, csum = 0;
		int n = 0;
		for (int si = 0; si < ns; si++)
			if (res[ci][si].ran) {
				csum += res[ci][si].create_ms;
				cmax = res[ci][si].create_ms > cmax ? res[ci][si].create_ms : cmax;
				n++;
			}
		if (!n)
			continue;
		printf("- %s: primitive creation mean %.2f ms, max %.2f ms per shape; kernels:", cands[ci].name,
		       csum / n, cmax);
		char seen[MAX_SHAPES][64];
		int nseen = 0;
		for (int si = 0; si < ns; si++) {
			if (!res[ci][si].ran)
				continue;
			bool dup = false;
			for (int k = 0; k < nseen; k++)
				dup |= strcmp(seen[k], res[ci][si].impl) == 0;
			if (!dup) {
				snprintf(seen[nseen++], 64, "%s", res[ci][si].impl);
				printf(" `%s`", res[ci][si].impl);
			}
		}
		printf("\n");
	}
	printf("- ob-tiles plans (M blocks x N blocks of rows x cols) are in the JSON (`impl`).\n");
	printf("\nwall time %.1f s\n", now_s() - t_start);

	if (json_path) {
		FILE *f = fopen(json_path, "w");
		if (!f) {
			perror(json_path);
			return 1;
		}
		fprintf(f, "{\n  \"bench\": \"cpu_gemm_libs\",\n  \"date\": ");
		json_str(f, date);
		fprintf(f, ",\n  \"commit\": ");
		json_str(f, commit ? commit : "unknown");
		fprintf(f, ",\n  \"cpu\": ");
		json_str(f, cpu);
		fprintf(f, ",\n  \"cpus_online\": %ld,\n  \"threads\": %d,\n  \"llc_bytes\": %zu,\n",
			sysconf(_SC_NPROCESSORS_ONLN), T, llc);
		fprintf(f, "  \"budget_s\": %g,\n  \"min_reps\": %d,\n  \"rounds\": %d,\n  \"rotate\": %s,\n",
			to.budget_s, to.min_reps, rounds, rotate ? "true" : "false");
		fprintf(f, "  \"build_flags\": ");
		json_str(f, RG_BUILD_FLAGS);
		fprintf(f, ",\n  \"erf_max_abs_err\": %.3g,\n  \"openblas\": {\"path\": ", erf_err);
		json_str(f, g_ob.path);
		fprintf(f, ", \"loaded\": %s, \"corename\": ", ob_ok ? "true" : "false");
		json_str(f, ob_ok && g_ob.get_corename ? g_ob.get_corename() : "");
		fprintf(f, ", \"config\": ");
		json_str(f, ob_ok && g_ob.get_config ? g_ob.get_config() : "");
		fprintf(f, "},\n  \"blis\": {\"path\": ");
		json_str(f, g_blis.path);
		fprintf(f, ", \"loaded\": %s, \"version\": ", blis_ok ? "true" : "false");
		json_str(f, blis_ok && g_blis.version ? g_blis.version() : "");
		fprintf(f, ", \"arch\": ");
		json_str(f, blis_ok && g_blis.arch_string && g_blis.arch_query_id
				    ? g_blis.arch_string(g_blis.arch_query_id())
				    : "");
		fprintf(f, "},\n  \"onednn\": {\"path\": ");
		json_str(f, dnnl_path);
		fprintf(f, ", \"loaded\": %s, \"isa\": ", dnnl_ok ? "true" : "false");
#if RG_HAVE_DNNL
		json_str(f, dnnl_ok ? dnnl_isa_name(DN(dnnl_get_effective_cpu_isa)()) : "");
#else
		json_str(f, "");
#endif
		fprintf(f, ", \"note\": ");
		json_str(f, dnnl_err);
		fprintf(f, "},\n  \"candidates\": [");
		for (int ci = 0; ci < nc; ci++) {
			fprintf(f, "%s\n    {\"name\": ", ci ? "," : "");
			json_str(f, cands[ci].name);
			fprintf(f, ", \"available\": %s, \"why\": ", cands[ci].available ? "true" : "false");
			json_str(f, cands[ci].why);
			fprintf(f, ", \"verify\": ");
			json_str(f, !cands[ci].available ? "SKIP" : cands[ci].verified_ok ? "PASS" : "FAIL");
			fprintf(f,
				", \"verify_rel_err\": %.3g, \"verify_m\": %d, \"verify_fail_layers\": %d, "
				"\"timed_s\": %.2f, \"other_cpu_pct\": %.1f, \"steal_pct\": %.1f}",
				cands[ci].verify_err, verify_m, cands[ci].verify_fail_layers,
				cands[ci].wall_s, cands[ci].other_pct, cands[ci].steal_pct);
		}
		fprintf(f, "\n  ],\n  \"cells\": [");
		int first = 1;
		for (int ci = 0; ci < nc; ci++)
			for (int si = 0; si < ns; si++) {
				const cell_result *cr = &res[ci][si];
				const gemm_shape *s = &shapes[si];
				if (!cr->ran)
					continue;
				fprintf(f, "%s\n    {\"cand\": ", first ? "" : ",");
				first = 0;
				json_str(f, cands[ci].name);
				fprintf(f, ", \"model\": ");
				json_str(f, s->model);
				fprintf(f, ", \"layer\": ");
				json_str(f, s->layer);
				fprintf(f,
					", \"M\": %d, \"N\": %d, \"K\": %d, \"gelu\": %s, \"median_ms\": "
					"%.5f, \"min_ms\": %.5f, \"reps\": %d, \"gflops\": %.2f, "
					"\"create_ms\": %.3f, \"other_cpu_pct\": %.1f, \"round_median_ms\": [",
					s->M, s->N, s->K, s->epi == EPI_BIAS_GELU ? "true" : "false",
					cr->median_ms, cr->min_ms, cr->reps,
					2.0 * s->M * s->N * s->K / (cr->median_ms * 1e6), cr->create_ms,
					cr->other_pct);
				for (int k = 0; k < cr->n_rounds; k++)
					fprintf(f, "%s%.5f", k ? ", " : "", cr->round_ms[k]);
				fprintf(f, "], \"impl\": ");
				json_str(f, cr->impl);
				fprintf(f, "}");
			}
		fprintf(f, "\n  ],\n  \"epilogue_pass\": [");
		first = 1;
		for (int pi = 0; pi < 2; pi++)
			for (int si = 0; si < ceil_idx; si++) {
				const cell_result *cr = &pass_res[pi][si];
				if (!cr->ran)
					continue;
				fprintf(f, "%s\n    {\"threads_runtime\": \"%s\", \"model\": \"%s\", \"M\": "
					"%d, \"N\": %d, \"median_ms\": %.5f, \"min_ms\": %.5f, \"reps\": %d}",
					first ? "" : ",", pi == 0 ? "pool" : "openmp", shapes[si].model,
					shapes[si].M, shapes[si].N, cr->median_ms, cr->min_ms, cr->reps);
				first = 0;
			}
		fprintf(f, "\n  ]\n}\n");
		fclose(f);
	}
	for (int v = 0; v < nv; v++)
		free(refs[v]);
	return rc;
}
