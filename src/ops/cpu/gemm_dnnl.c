/* oneDNN matmul for the CPU linear layers: see gemm_dnnl.h for the why and the contract.
 *
 * Layout facts this file relies on (oneDNN 2.6, checked at prepare time, never assumed):
 * - a matmul primitive created with weights in format "any" reports the blocked layout its
 *   kernels want; for fp32 on AVX-512 that is BA16a64b, i.e. (N/64, K/16, 16, 64) with the
 *   64-column blocks outermost, so the columns [n0, n0 + nb) with n0 and nb multiples of 64 are
 *   one contiguous sub-array with the same strides: a tile's weights are a pointer offset;
 * - the brgemm kernels accept only dense src/dst, so a tile narrower than N writes a per-thread
 *   buffer that is copied into the output rows (at most 256 x nb floats, in L2);
 * - primitives take a fixed M. A tile of r >= 64 rows runs the primitive for r & ~15 rows, then
 *   the one for r & 15 rows (the second call re-reads weights the first left in L2). A tile of
 *   r < 64 rows (a short sentence, the latency case) runs one primitive made for exactly r rows:
 *   one call and one pass over the weights instead of two. On the 2-core EPYC, one MiniLM
 *   sentence of 30 / 50 tokens took 9% / 6% less time at 1 thread and 15% / 11% less at 2
 *   (130 tokens: unchanged). A weight shape then needs at most 76 primitives per width over
 *   the process's life (M in 1..63 and the multiples of 16 up to 256). Every length of 2-256
 *   tokens, run once, grew the RSS by 10 MiB more than the split did. Exact primitives up to 256
 *   rows would add 44-100 MiB for 6% at 130 tokens, so they were not taken;
 * - with gemm_blk on (rg_cpu_smallm_max() > 0, f32 weights in 64-column blocks), products of up
 *   to that many rows run it alone (blk_run), and in larger ones it takes the rows the exact
 *   primitives took: a tile's r & 15 remainder and a last tile under 64 rows (part_blk). The
 *   primitives are then only the multiples of 16 from 64 to 256 rows (13 per width), all met
 *   by the first large batches; before, each new remainder made its own, and a server's RSS grew
 *   by one primitive (a few hundred KiB of JIT code and tables) whenever a batch of a new length
 *   first came, long after warm-up. BERT-base at 200-500 tokens on 2 threads: the same time. */
#include "ops/cpu/gemm_dnnl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "core/tuning.h"
#include "core/vec.h"
#include "ops/cpu/cpu_kern.h"

#ifndef RG_WITH_DNNL

bool rg_dnnl_enabled(void)
{
	return false;
}

const char *rg_dnnl_describe(void)
{
	return "openblas";
}

bool rg_dnnl_bf16_supported(void)
{
	return false;
}

rg_status rg_dnnl_prepare(float *W, int N, int K, rg_dtype dt)
{
	(void)W;
	(void)N;
	(void)K;
	if (dt != RG_DTYPE_F32)
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm: bf16 weights need oneDNN");
	return RG_OK;
}

void rg_dnnl_release(const float *W)
{
	(void)W;
}

const rg_dnnl_weight *rg_dnnl_find(const float *W)
{
	(void)W;
	return NULL;
}

rg_status rg_dnnl_gemm(const rg_dnnl_weight *w, const float *A, const float *bias, float *out,
		       int M, int N, int K, rg_act act)
{
	return rg_errorf(RG_ERR_UNSUPPORTED, "gemm: this build has no oneDNN");
}

#else

#include <oneapi/dnnl/dnnl.h>

/* libgomp (libdnnl's OpenMP runtime): the calling thread's team size for oneDNN's parallel
 * regions. Declared here rather than through <omp.h> so the build needs no -fopenmp. */
extern void omp_set_num_threads(int n);

#define ROW_BLOCK 256 /* rows per tile when M > ROW_BLOCK; a multiple of 16 */
#define EXACT_M 64    /* tiles of fewer rows run one primitive made for their exact row count */

struct rg_dnnl_weight {
	const float *key;        /* the caller's W */
	void *data;              /* the blocked weights: W itself, or owned when `owned` */
	bool owned;
	bool bf16;               /* data holds bf16 (the activations are rounded to bf16 per call) */
	int N, K;
	int bn;                  /* columns per block of the layout (64; 1 for a plain one) */
	dnnl_dim_t n_stride;     /* elements from one column block to the next */
	dnnl_memory_desc_t md;   /* the whole (K, N) weights in the blocked layout */
	int gemv_kb;             /* f32 <kb>a64b layout: K rows per block, for the GEMV; 0: none */
	size_t gemv_kstride;     /* elements from one K block to the next (strides[0]) */
};

/* One cached primitive: M rows x nb columns of one weight layout (f32 or bf16 weights and
 * source, f32 bias and destination), with its epilogue. */
typedef struct {
	dnnl_memory_desc_t wmd, src_md, dst_md, bias_md, scratch_md;
	int m, K, nb;
	rg_act act;
	bool bias;
	dnnl_primitive_t prim;
	size_t scratch;
} prim_entry;

static struct {
	bool ok;                 /* library initialised and enabled */
	char describe[96];
	dnnl_engine_t engine;
	pthread_key_t tls;
	pthread_mutex_t lock;    /* guards weights[] and prims[] */
	rg_dnnl_weight **weights;
	int n_weights;
	size_t cap_weights;
	prim_entry **prims;
	int n_prims;
	size_t cap_prims;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Per OS thread: its stream, scratchpad and bounce buffer (freed when the thread exits). */
typedef struct {
	dnnl_stream_t stream;
	void *scratch;
	size_t scratch_n;
	float *bounce;
	size_t bounce_n;
	uint16_t *a16;           /* the calling thread's bf16 copy of A (bf16 weights only) */
	size_t a16_n;
} thread_state;

static void thread_state_free(void *p)
{
	thread_state *t = p;

	if (!t)
		return;
	if (t->stream)
		dnnl_stream_destroy(t->stream);
	free(t->scratch);
	free(t->bounce);
	free(t->a16);
	free(t);
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
	switch (isa) {
	case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
	case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
	case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
	case dnnl_cpu_isa_avx512_core: return "avx512_core";
	case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
	case dnnl_cpu_isa_avx2: return "avx2";
	default: return "older";
	}
}

static void lib_init(void)
{
	const dnnl_version_t *v = dnnl_version();

	snprintf(g.describe, sizeof(g.describe), "openblas");
	/* a value other than onednn / openblas: core/tuning.c warns and takes onednn */
	if (rg_tuning_enum(RG_TUNE_CPU_GEMM) == RG_CPU_GEMM_OPENBLAS)
		return;
	if (dnnl_engine_create(&g.engine, dnnl_cpu, 0) != dnnl_success) {
		fprintf(stderr, "ragged: warning: oneDNN engine unavailable; GEMMs use OpenBLAS\n");
		return;
	}
	if (pthread_key_create(&g.tls, thread_state_free) != 0)
		return;
	snprintf(g.describe, sizeof(g.describe), "onednn %d.%d.%d (%s)", v->major, v->minor,
		 v->patch, isa_name(dnnl_get_effective_cpu_isa()));
	g.ok = true;
}

bool rg_dnnl_enabled(void)
{
	pthread_once(&g_once, lib_init);
	return g.ok;
}

const char *rg_dnnl_describe(void)
{
	pthread_once(&g_once, lib_init);
	return g.describe;
}

bool rg_dnnl_bf16_supported(void)
{
	const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;

	return rg_dnnl_enabled() && ((unsigned)dnnl_get_effective_cpu_isa() & bf16) == bf16;
}

/* This thread's state, created on first use; oneDNN's team on this thread set to one thread
 * (ragged's pool is the parallelism). NULL on OOM. */
static thread_state *thread_get(void)
{
	thread_state *t = pthread_getspecific(g.tls);

	if (t)
		return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	if (dnnl_stream_create(&t->stream, g.engine, dnnl_stream_default_flags) != dnnl_success ||
	    pthread_setspecific(g.tls, t) != 0) {
		thread_state_free(t);
		return NULL;
	}
	omp_set_num_threads(1);
	return t;
}

/* Grow *buf to n bytes. */
static bool ensure(void **buf, size_t *have, size_t n)
{
	void *p;

	if (n <= *have)
		return true;
	p = aligned_alloc(64, (n + 63) / 64 * 64);
	if (!p)
		return false;
	free(*buf);
	*buf = p;
	*have = n;
	return true;
}

static dnnl_alg_kind_t act_alg(rg_act act)
{
	switch (act) {
	case RG_ACT_GELU: return dnnl_eltwise_gelu_erf;
	case RG_ACT_GELU_NEW: return dnnl_eltwise_gelu_tanh;
	case RG_ACT_RELU: return dnnl_eltwise_relu;
	case RG_ACT_SILU: return dnnl_eltwise_swish;
	case RG_ACT_NONE: return dnnl_alg_kind_undef;
	}
	return dnnl_alg_kind_undef;
}

/* The weights sub-layout of columns [n0, n0 + nb): the parent's strides, nb columns. */
static dnnl_memory_desc_t sub_md(const rg_dnnl_weight *w, int nb)
{
	dnnl_memory_desc_t md = w->md;

	md.dims[1] = nb;
	md.padded_dims[1] = (nb + w->bn - 1) / w->bn * w->bn;
	return md;
}

/* Create a primitive for m x nb with weights layout wmd. *impl receives the implementation
 * name. Caller holds nothing; returns NULL with the reason in err. */
static prim_entry *prim_create(const dnnl_memory_desc_t *wmd, int m, int K, int nb, rg_act act,
			       bool bias, bool bf16, bool any_weights, const char **impl, char *err,
			       size_t n)
{
	const dnnl_data_type_t in_dt = bf16 ? dnnl_bf16 : dnnl_f32;
	prim_entry *e = calloc(1, sizeof(*e));
	dnnl_matmul_desc_t mm;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	const dnnl_dims_t sd = {m, K}, dd = {m, nb}, bd = {1, nb}, wd = {K, nb};
	dnnl_alg_kind_t alg = act_alg(act);
	bool ok = false;

	if (!e) {
		snprintf(err, n, "out of memory");
		return NULL;
	}
	e->m = m;
	e->K = K;
	e->nb = nb;
	e->act = act;
	e->bias = bias;
	if (any_weights)
		dnnl_memory_desc_init_by_tag(&e->wmd, 2, wd, in_dt, dnnl_format_tag_any);
	else
		e->wmd = *wmd;
	dnnl_memory_desc_init_by_tag(&e->src_md, 2, sd, in_dt, dnnl_ab);
	dnnl_memory_desc_init_by_tag(&e->dst_md, 2, dd, dnnl_f32, dnnl_ab);
	dnnl_memory_desc_init_by_tag(&e->bias_md, 2, bd, dnnl_f32, dnnl_ab);
	if (dnnl_matmul_desc_init(&mm, &e->src_md, &e->wmd, bias ? &e->bias_md : NULL,
				  &e->dst_md) != dnnl_success ||
	    dnnl_primitive_attr_create(&attr) != dnnl_success ||
	    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) !=
		    dnnl_success) {
		snprintf(err, n, "oneDNN matmul descriptor (%d x %d x %d) rejected", m, nb, K);
		goto out;
	}
	if (alg != dnnl_alg_kind_undef &&
	    (dnnl_post_ops_create(&po) != dnnl_success ||
	     dnnl_post_ops_append_eltwise(po, 1.f, alg, alg == dnnl_eltwise_swish ? 1.f : 0.f, 0.f) != dnnl_success ||
	     dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)) {
		snprintf(err, n, "oneDNN post-op for activation %d rejected", (int)act);
		goto out;
	}
	if (dnnl_primitive_desc_create(&pd, &mm, attr, g.engine, NULL) != dnnl_success) {
		snprintf(err, n, "no oneDNN matmul for %d x %d x %d in this layout", m, nb, K);
		goto out;
	}
	dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
	if (any_weights)
		e->wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	e->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	e->scratch = dnnl_memory_desc_get_size(&e->scratch_md);
	if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) {
		snprintf(err, n, "oneDNN primitive_create (%d x %d x %d) failed", m, nb, K);
		goto out;
	}
	ok = true;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (!ok) {
		free(e);
		return NULL;
	}
	return e;
}

/* The cached primitive for (layout of w, m rows, nb columns, act, bias); created on a miss.
 * NULL with the reason in rg_last_error(). */
static prim_entry *prim_get(const rg_dnnl_weight *w, int m, int nb, rg_act act, bool bias)
{
	dnnl_memory_desc_t wmd = sub_md(w, nb);
	prim_entry *e = NULL;
	const char *impl = "?";
	char err[160];

	pthread_mutex_lock(&g.lock);
	for (int i = 0; i < g.n_prims; i++) {
		prim_entry *c = g.prims[i];

		if (c->m == m && c->nb == nb && c->K == w->K && c->act == act && c->bias == bias &&
		    dnnl_memory_desc_equal(&c->wmd, &wmd)) {
			e = c;
			break;
		}
	}
	if (e)
		goto out_unlock;
	if (!rg_vec_reserve((void **)&g.prims, &g.cap_prims, (size_t)g.n_prims + 1,
			    sizeof(*g.prims), 64)) {
		rg_errorf(RG_ERR_OOM, "gemm: cannot grow the oneDNN primitive cache");
		e = NULL;
		goto out_unlock;
	}
	e = prim_create(&wmd, m, w->K, nb, act, bias, w->bf16, false, &impl, err, sizeof(err));
	if (!e) {
		rg_errorf(RG_ERR_INTERNAL, "gemm: %s", err);
		goto out_unlock;
	}
	g.prims[g.n_prims++] = e;
out_unlock:
	pthread_mutex_unlock(&g.lock);
	return e;
}

static int find_index(const float *W)
{
	for (int i = 0; i < g.n_weights; i++)
		if (g.weights[i]->key == W)
			return i;
	return -1;
}

const rg_dnnl_weight *rg_dnnl_find(const float *W)
{
	const rg_dnnl_weight *w = NULL;
	int i;

	if (!W || !rg_dnnl_enabled())
		return NULL;
	pthread_mutex_lock(&g.lock);
	i = find_index(W);
	if (i >= 0)
		w = g.weights[i];
	pthread_mutex_unlock(&g.lock);
	return w;
}

/* Run one reorder from src_md/src to dst_md/dst on this thread. */
static bool reorder(const dnnl_memory_desc_t *src_md, void *src, const dnnl_memory_desc_t *dst_md,
		    void *dst)
{
	dnnl_primitive_desc_t rpd = NULL;
	dnnl_primitive_t rp = NULL;
	dnnl_memory_t ms = NULL, md = NULL;
	thread_state *t = thread_get();
	bool ok = t &&
		  dnnl_memory_create(&ms, src_md, g.engine, src) == dnnl_success &&
		  dnnl_memory_create(&md, dst_md, g.engine, dst) == dnnl_success &&
		  dnnl_reorder_primitive_desc_create(&rpd, src_md, g.engine, dst_md, g.engine,
						     NULL) == dnnl_success &&
		  dnnl_primitive_create(&rp, rpd) == dnnl_success;

	if (ok) {
		dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};

		ok = dnnl_primitive_execute(rp, t->stream, 2, args) == dnnl_success &&
		     dnnl_stream_wait(t->stream) == dnnl_success;
	}
	if (rp)
		dnnl_primitive_destroy(rp);
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	if (md)
		dnnl_memory_destroy(md);
	if (ms)
		dnnl_memory_destroy(ms);
	return ok;
}

/* Blocked layouts we can cut into column tiles: dims (K, N), the N blocks (if any) outermost. */
static bool layout_usable(const dnnl_memory_desc_t *md, int *bn, dnnl_dim_t *n_stride)
{
	const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
	int kb = 1;

	if (md->format_kind != dnnl_blocked || md->ndims != 2 || md->offset0 != 0)
		return false;
	*bn = 1;
	for (int i = 0; i < b->inner_nblks; i++) {
		if (b->inner_idxs[i] == 1)
			*bn *= (int)b->inner_blks[i];
		else
			kb *= (int)b->inner_blks[i];
	}
	*n_stride = b->strides[1];
	/* plain, any strides: column n0 starts n0 * strides[1] in; blocked: N blocks outermost */
	if (b->inner_nblks == 0)
		return true;
	return *bn > 1 && b->strides[1] >= b->strides[0] * (md->padded_dims[0] / kb);
}

rg_status rg_dnnl_prepare(float *W, int N, int K, rg_dtype dt)
{
	rg_dnnl_weight *w;
	prim_entry *probe;
	dnnl_memory_desc_t user_md;
	const dnnl_dims_t wd = {K, N}, ws = {1, K}; /* W (N, K) row-major read as (K, N) */
	const bool bf16 = dt == RG_DTYPE_BF16;
	const char *impl = "?";
	char err[160];
	size_t bytes;
	void *tmp = NULL;
	rg_status st = RG_OK;

	if (!W || N <= 0 || K <= 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm weight: bad shape N=%d K=%d", N, K);
	if (dt != RG_DTYPE_F32 && !bf16)
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm weight: the CPU GEMMs run fp32 or bf16");
	if (bf16 && !rg_dnnl_bf16_supported())
		return rg_errorf(RG_ERR_UNSUPPORTED, "gemm weight: bf16 needs oneDNN on a CPU with "
				 "AVX512-BF16 or AMX (%s)", rg_dnnl_describe());
	if (!rg_dnnl_enabled())
		return RG_OK;
	if (rg_dnnl_find(W))
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm weight %p is already prepared",
				 (const void *)W);
	/* the layout the kernels want for a 16-row tile over all N */
	probe = prim_create(NULL, 16, K, N, RG_ACT_NONE, true, bf16, true, &impl, err, sizeof(err));
	if (!probe) {
		if (bf16)
			return rg_errorf(RG_ERR_UNSUPPORTED, "gemm weight: %s", err);
		return RG_OK; /* oneDNN cannot run this shape: OpenBLAS will */
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		st = rg_errorf(RG_ERR_OOM, "gemm weight: out of memory");
		goto out_free_probe;
	}
	w->key = W;
	w->N = N;
	w->K = K;
	w->bf16 = bf16;
	w->md = probe->wmd;
	if (strncmp(impl, "ref", 3) == 0 || !layout_usable(&w->md, &w->bn, &w->n_stride)) {
		free(w); /* reference kernels or an unknown layout: keep OpenBLAS (fp32) */
		w = NULL;
		if (bf16)
			st = rg_errorf(RG_ERR_UNSUPPORTED, "gemm weight: oneDNN offers no fast bf16 "
				       "kernel for N=%d K=%d (%s)", N, K, impl);
		goto out_free_probe;
	}
	{
		/* the GEMV reads (k, n) at (k / kb) * strides[0] + (n / 64) * strides[1] +
		 * (k % kb) * 64 + n % 64: f32, blocks kb of K then 64 of N, innermost last */
		const dnnl_blocking_desc_t *b = &w->md.format_desc.blocking;

		if (!bf16 && w->bn == 64 && b->inner_nblks == 2 && b->inner_idxs[0] == 0 &&
		    b->inner_idxs[1] == 1 && b->inner_blks[1] == 64 && b->inner_blks[0] >= 1) {
			w->gemv_kb = (int)b->inner_blks[0];
			w->gemv_kstride = (size_t)b->strides[0];
		}
	}
	dnnl_memory_desc_init_by_strides(&user_md, 2, wd, dnnl_f32, ws);
	bytes = dnnl_memory_desc_get_size(&w->md);
	if (!bf16 && bytes == (size_t)N * K * sizeof(float)) {
		/* same size: reorder through a temporary copy back into W */
		tmp = malloc(bytes);
		if (!tmp) {
			st = rg_errorf(RG_ERR_OOM, "gemm weight: cannot allocate %zu bytes", bytes);
			goto out_free_w;
		}
		memcpy(tmp, W, bytes);
		w->data = W;
		if (!reorder(&user_md, tmp, &w->md, W)) {
			memcpy(W, tmp, bytes);
			st = rg_errorf(RG_ERR_INTERNAL, "gemm weight: oneDNN reorder failed");
			goto out_free_w;
		}
	} else {
		/* a padded layout, or bf16 (the reorder rounds to nearest even): a buffer of our
		 * own; W stays row-major f32 */
		w->data = aligned_alloc(64, (bytes + 63) / 64 * 64);
		w->owned = true;
		if (!w->data) {
			st = rg_errorf(RG_ERR_OOM, "gemm weight: cannot allocate %zu bytes", bytes);
			goto out_free_w;
		}
		memset(w->data, 0, bytes); /* the padding columns */
		if (!reorder(&user_md, W, &w->md, w->data)) {
			st = rg_errorf(RG_ERR_INTERNAL, "gemm weight: oneDNN reorder failed");
			goto out_free_w;
		}
	}
	pthread_mutex_lock(&g.lock);
	if (!rg_vec_reserve((void **)&g.weights, &g.cap_weights, (size_t)g.n_weights + 1,
			    sizeof(*g.weights), 64)) {
		pthread_mutex_unlock(&g.lock);
		st = rg_errorf(RG_ERR_OOM, "gemm weight: cannot grow the registry");
		if (!w->owned)
			memcpy(W, tmp, bytes);
		goto out_free_w;
	}
	g.weights[g.n_weights++] = w;
	pthread_mutex_unlock(&g.lock);
	w = NULL;
out_free_w:
	if (w) {
		if (w->owned)
			free(w->data);
		free(w);
	}
out_free_probe:
	free(tmp);
	dnnl_primitive_destroy(probe->prim);
	free(probe);
	return st;
}

void rg_dnnl_release(const float *W)
{
	rg_dnnl_weight *w = NULL;
	int i;

	if (!W || !rg_dnnl_enabled())
		return;
	pthread_mutex_lock(&g.lock);
	i = find_index(W);
	if (i >= 0) {
		w = g.weights[i];
		g.weights[i] = g.weights[--g.n_weights];
	}
	pthread_mutex_unlock(&g.lock);
	if (w && w->owned)
		free(w->data);
	free(w);
}

/* The (M, N) output in tiles of mb rows x nb columns for T threads (nb a multiple of the
 * layout's column block, or of 16 for a plain layout).
 * - M <= ROW_BLOCK (a few sentences): whole rows, the columns in at most T even runs of blocks;
 *   rows halved (multiples of 16) until there are T tiles. Measured on the 16-core Xeon
 *   (bench/results/cpu_speed_cpu_16core-xeon_20261122-1928.md): a cost model that kept whole
 *   rows and left threads idle (12 tiles of 64 rows rather than 24 of 32 for BERT-base's N = 768
 *   at M = 64) was 10% slower at best and far noisier, so every thread gets a tile.
 * - Larger M: ROW_BLOCK-row blocks, then narrower column blocks (>= 2 blocks of the layout)
 *   until every thread has two tiles, then shorter row blocks (>= 16 rows). */
static void tiles(int M, int N, int bn, int T, int *mb, int *nb)
{
	const int unit = bn > 1 ? bn : 16;
	const int blocks = (N + unit - 1) / unit;
	int m = M < ROW_BLOCK ? M : ROW_BLOCK, n = N;

	if (M <= ROW_BLOCK) {
		const int per = (blocks + T - 1) / T;

		n = per * unit < N ? per * unit : N;
		while ((long)((M + m - 1) / m) * ((N + n - 1) / n) < T && m > 16)
			m = (m / 2 + 15) / 16 * 16;
		*mb = m;
		*nb = n;
		return;
	}
	while ((long)((M + m - 1) / m) * ((N + n - 1) / n) < 2L * T) {
		if (n >= 2 * unit)
			n = (n / 2 + unit - 1) / unit * unit;
		else if (m > 16)
			m = (m / 2 + 15) / 16 * 16;
		else
			break;
	}
	*mb = m;
	*nb = n;
}

/* Columns per call when a tile's rows take two primitives (r & ~15, then r & 15): both calls
 * read the same weights, so the tile goes through them in column slices whose weights stay in
 * L2 for the second call (about 1 MiB of weights per slice). */
static int l2_cols(int K, int unit)
{
	int c = (int)((1u << 20) / ((unsigned)K * sizeof(float))) / unit * unit;

	return c < unit ? unit : c;
}

#define MAX_WIDTHS 4

struct job {
	const rg_dnnl_weight *w;
	const void *A;                 /* (M, K): f32, or bf16 for bf16 weights */
	size_t a_esz;
	const float *bias;
	float *out;
	int M, N, K, mb, nb, n_nt;
	int slice[2];                  /* columns per call: [last row tile] */
	int widths[MAX_WIDTHS], n_widths; /* every call's column count */
	/* [last row tile][0: rows & ~15, 1: rows & 15][index into widths] */
	prim_entry *prim[2][2][MAX_WIDTHS];
	rg_act act;
	const rg_cpu_kern *k;          /* non-NULL: row chunks of < 16 rows, and tiles of fewer
					* than EXACT_M rows, run gemm_blk (blk_cols), no primitive */
	volatile int failed;
};

/* Run e on rows [r0, r0 + e->m) of A, columns [n0, n0 + e->nb), writing dst (dense e->m x nb). */
static bool exec_chunk(const struct job *j, thread_state *t, const prim_entry *e, int r0, int n0,
		       float *dst)
{
	dnnl_memory_t src = NULL, wei = NULL, bias = NULL, out = NULL, scr = NULL;
	const rg_dnnl_weight *w = j->w;
	char *wp = (char *)w->data +
		   (size_t)(n0 / w->bn) * (size_t)w->n_stride * (w->bf16 ? 2u : 4u);
	dnnl_exec_arg_t args[5];
	int n = 0;
	bool ok;

	if (!ensure(&t->scratch, &t->scratch_n, e->scratch))
		return false;
	ok = dnnl_memory_create(&src, &e->src_md, g.engine,
				(char *)j->A + (size_t)r0 * j->K * j->a_esz) ==
		     dnnl_success &&
	     dnnl_memory_create(&wei, &e->wmd, g.engine, wp) == dnnl_success &&
	     dnnl_memory_create(&out, &e->dst_md, g.engine, dst) == dnnl_success &&
	     dnnl_memory_create(&scr, &e->scratch_md, g.engine, t->scratch) == dnnl_success &&
	     (!e->bias || dnnl_memory_create(&bias, &e->bias_md, g.engine,
					     (void *)(j->bias + n0)) == dnnl_success);
	if (ok) {
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, src};
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wei};
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, out};
		args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scr};
		if (bias)
			args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
		ok = dnnl_primitive_execute(e->prim, t->stream, n, args) == dnnl_success;
	}
	if (src)
		dnnl_memory_destroy(src);
	if (wei)
		dnnl_memory_destroy(wei);
	if (out)
		dnnl_memory_destroy(out);
	if (scr)
		dnnl_memory_destroy(scr);
	if (bias)
		dnnl_memory_destroy(bias);
	return ok;
}

static int width_index(const struct job *j, int cols)
{
	for (int i = 0; i < j->n_widths; i++)
		if (j->widths[i] == cols)
			return i;
	return -1;
}

/* The row chunks of a tile of r rows (see the file comment): r whole below EXACT_M rows, else
 * r & ~15 then r & 15. */
static void row_parts(int r, int part[2])
{
	if (r < EXACT_M) {
		part[0] = r;
		part[1] = 0;
	} else {
		part[0] = r & ~15;
		part[1] = r & 15;
	}
}

/* Whether chunk c of a tile's row parts runs gemm_blk instead of a primitive (job.k set):
 * the r & 15 remainder, and a whole tile of fewer than EXACT_M rows. The primitives then exist
 * only for multiples of 16 from EXACT_M to ROW_BLOCK rows (13 row counts per width), all met by
 * the first large batches, instead of one per remainder and per short last tile (up to 76 per
 * width), each met first whenever a batch of a new length comes, long after start-up. */
static bool part_blk(const struct job *j, int rows, int c)
{
	return j->k && (c == 1 || rows < EXACT_M);
}

#define BLK_TMP_ROWS 32 /* rows per slice of a block narrower than 64 columns */

/* out (M rows of stride ldo; its column 0 is the weight's column c0) = A (M, K; stride K) x the
 * columns [c0, c0 + cols) of a blocked f32 weight (c0 a multiple of 64), then bias and act: the
 * blocked kernels (gemv_blk up to RG_CPU_GEMV_MAX rows, gemm_blk above) one 64-column block at a
 * time, a last narrower block through a stack buffer. */
static void blk_cols(const rg_cpu_kern *k, const rg_dnnl_weight *w, const float *A, int M,
		     int c0, int cols, const float *bias, rg_act act, float *out, size_t ldo)
{
	void (*const kern)(const float *, size_t, int, const float *, int, int, size_t, float *,
			   size_t) = M <= RG_CPU_GEMV_MAX ? k->gemv_blk : k->gemm_blk;
	float tmp[BLK_TMP_ROWS * 64];

	for (int n0 = c0; n0 < c0 + cols; n0 += 64) {
		const float *wb = (const float *)w->data + (size_t)(n0 / 64) * (size_t)w->n_stride;
		const int nc = c0 + cols - n0 < 64 ? c0 + cols - n0 : 64;
		float *o = out + (n0 - c0);

		if (nc == 64) {
			kern(A, (size_t)w->K, M, wb, w->K, w->gemv_kb, w->gemv_kstride, o, ldo);
		} else {
			for (int m0 = 0; m0 < M; m0 += BLK_TMP_ROWS) {
				const int mr = M - m0 < BLK_TMP_ROWS ? M - m0 : BLK_TMP_ROWS;

				kern(A + (size_t)m0 * w->K, (size_t)w->K, mr, wb, w->K, w->gemv_kb,
				     w->gemv_kstride, tmp, 64);
				for (int m = 0; m < mr; m++)
					memcpy(o + (size_t)(m0 + m) * ldo, tmp + (size_t)m * 64,
					       (size_t)nc * sizeof(float));
			}
		}
		if (bias || act != RG_ACT_NONE)
			k->bias_act_rows(o, ldo, bias ? bias + n0 : NULL, M, nc, act);
	}
}

static void task(void *ctx, int ti, int thread)
{
	struct job *j = ctx;
	const int mt = ti / j->n_nt, nt = ti % j->n_nt;
	const int m0 = mt * j->mb, n0 = nt * j->nb;
	const int rows = j->M - m0 < j->mb ? j->M - m0 : j->mb;
	const int cols = j->N - n0 < j->nb ? j->N - n0 : j->nb;
	const int lm = rows != j->mb, slice = j->slice[lm];
	thread_state *t = thread_get();

	if (!t || (slice < j->N && !ensure((void **)&t->bounce, &t->bounce_n,
					   (size_t)rows * slice * sizeof(float)))) {
		j->failed = 1;
		return;
	}
	for (int c0 = n0; c0 < n0 + cols; c0 += slice) {
		const int w = n0 + cols - c0 < slice ? n0 + cols - c0 : slice;
		const int wi = width_index(j, w);
		const bool direct = w == j->N; /* whole rows: write the output in place */
		int r = m0, part[2];

		row_parts(rows, part);
		for (int c = 0; c < 2; c++) {
			const prim_entry *e = wi < 0 ? NULL : j->prim[lm][c][wi];
			float *dst = direct ? j->out + (size_t)r * j->N
					    : t->bounce + (size_t)(r - m0) * w;

			if (part[c] == 0)
				continue;
			if (part_blk(j, rows, c)) {
				blk_cols(j->k, j->w, (const float *)j->A + (size_t)r * j->K, part[c],
					 c0, w, j->bias, j->act, dst,
					 direct ? (size_t)j->N : (size_t)w);
				r += part[c];
				continue;
			}
			if (!e || !exec_chunk(j, t, e, r, c0, dst)) {
				j->failed = 1;
				return;
			}
			r += e->m;
		}
		if (!direct)
			for (int i = 0; i < rows; i++)
				memcpy(j->out + (size_t)(m0 + i) * j->N + c0,
				       t->bounce + (size_t)i * w, (size_t)w * sizeof(float));
	}
}

/* Add cols to the job's width set (at most MAX_WIDTHS distinct values by construction). */
static void add_width(struct job *j, int cols)
{
	if (width_index(j, cols) < 0 && j->n_widths < MAX_WIDTHS)
		j->widths[j->n_widths++] = cols;
}

struct cvt_job {
	const rg_cpu_kern *k;
	const float *src;
	uint16_t *dst;
	size_t n, chunk;
};

static void cvt_task(void *ctx, int ti, int thread)
{
	const struct cvt_job *c = ctx;
	const size_t a = (size_t)ti * c->chunk, b = a + c->chunk < c->n ? a + c->chunk : c->n;

	(void)thread;
	c->k->f32_to_bf16(c->src + a, c->dst + a, b - a);
}

/* A (M, K) f32 rounded to bf16 into the calling thread's buffer, converted on the pool. NULL
 * on OOM. */
static const uint16_t *a_to_bf16(rg_threadpool *pool, const float *A, int M, int K)
{
	thread_state *t = thread_get();
	const size_t n = (size_t)M * K;
	struct cvt_job c = {.k = rg_cpu_kern_select(), .src = A, .n = n, .chunk = 16384};

	if (!t || !ensure((void **)&t->a16, &t->a16_n, n * sizeof(uint16_t)))
		return NULL;
	c.dst = t->a16;
	rg_threadpool_run(pool, (int)((n + c.chunk - 1) / c.chunk), cvt_task, &c);
	return t->a16;
}

struct blk_job {
	const rg_cpu_kern *k;
	const rg_dnnl_weight *w;
	const float *A, *bias;
	float *out;
	int M, blocks_per_task, n_parts;
	rg_act act;
};

/* Task t: column blocks [(t / n_parts) * blocks_per_task, ...) for row part t % n_parts of a
 * small-M product over the blocked weights (the parts of one run of blocks are neighbours in
 * the claim order, so they tend to run at once and share its weights through the L3):
 * gemv_blk for a decode step's M <= RG_CPU_GEMV_MAX rows, gemm_blk above. */
static void blk_task(void *ctx, int task, int thread)
{
	const struct blk_job *j = ctx;
	const rg_dnnl_weight *w = j->w;
	const int nblk = (w->N + 63) / 64, part = task % j->n_parts;
	const int b0 = task / j->n_parts * j->blocks_per_task;
	const int b1 = b0 + j->blocks_per_task < nblk ? b0 + j->blocks_per_task : nblk;
	const int r0 = (int)((long)j->M * part / j->n_parts);
	const int M = (int)((long)j->M * (part + 1) / j->n_parts) - r0;
	const int c0 = b0 * 64, c1 = b1 * 64 < w->N ? b1 * 64 : w->N;

	(void)thread;
	blk_cols(j->k, w, j->A + (size_t)r0 * w->K, M, c0, c1 - c0, j->bias, j->act,
		 j->out + (size_t)r0 * w->N + c0, (size_t)w->N);
}

/* Rows per part at least, and parts at most: below BLK_PART_ROWS rows a part's time is its
 * weight stream, which a second reader of the same blocks does not shorten. */
#define BLK_PART_ROWS 8
#define BLK_MAX_PARTS 4

/* The split of a small-M product into tasks of bpt consecutive column blocks x one of parts
 * row parts, for T threads: the least makespan in block-units, ceil(tasks / T) * bpt / parts
 * (tasks are claimed dynamically and cost about the same), with bpt at most
 * ceil(nblk / (2 T)), about two tasks per thread or more (on the 2-core EPYC one block per
 * task, which loses the prefetch across blocks, was 5-10% slower at M = 12 on 2 threads); ties
 * go to fewer parts (each part reads its blocks again), then to longer runs (one contiguous
 * weight stream). Parts only past RG_CPU_GEMV_MAX rows, of BLK_PART_ROWS rows or more. BERT-base
 * on 2 threads: 4 tasks of a quarter of the blocks, whole rows, at every M. On 16 threads:
 * N = 3072 in 48 one-block tasks (3 per thread; runs of 2 would leave 8 threads with 4 blocks),
 * N = 2304 at M = 64 in single blocks x 4 row parts (144 tasks, 9 per thread), N = 768 at
 * M = 12 in its 12 blocks (4 threads idle: more readers of a block would not stream it faster). */
static void blk_split(int nblk, int M, int T, int *bpt, int *parts)
{
	const int most_b = (nblk + 2 * T - 1) / (2 * T);
	int most_p = M > RG_CPU_GEMV_MAX ? M / BLK_PART_ROWS : 1;
	double best = 0;

	most_p = most_p < 1 ? 1 : most_p > BLK_MAX_PARTS ? BLK_MAX_PARTS : most_p;
	*bpt = most_b;
	*parts = 1;
	for (int p = 1; p <= most_p; p++)
		for (int b = most_b; b >= 1; b--) {
			const int tasks = (nblk + b - 1) / b * p;
			const double span = (double)((tasks + T - 1) / T) * b / p;

			if (span < best * (1 - 1e-9) || (b == most_b && p == 1)) {
				best = span;
				*bpt = b;
				*parts = p;
			}
		}
}

/* M <= rg_cpu_smallm_max() (decode steps, one short sentence): the weights stream once through
 * the kernel table's blocked kernels, tasks of consecutive column blocks (and row parts, when
 * that evens the threads' shares: blk_split) spread over the pool; no primitive, no dnnl_memory
 * objects per call. */
static rg_status blk_run(const rg_dnnl_weight *w, const float *A, const float *bias, float *out,
			 int M, rg_act act)
{
	rg_threadpool *pool = rg_threadpool_global();
	const int nblk = (w->N + 63) / 64;
	struct blk_job j = {rg_cpu_kern_select(), w, A, bias, out, M, 0, 1, act};

	blk_split(nblk, M, rg_threadpool_size(pool), &j.blocks_per_task, &j.n_parts);
	rg_threadpool_run(pool, (nblk + j.blocks_per_task - 1) / j.blocks_per_task * j.n_parts,
			  blk_task, &j);
	return RG_OK;
}

rg_status rg_dnnl_gemm(const rg_dnnl_weight *w, const float *A, const float *bias, float *out,
		       int M, int N, int K, rg_act act)
{
	rg_threadpool *pool = rg_threadpool_global();
	struct job j = {.w = w, .A = A, .a_esz = sizeof(float), .bias = bias, .out = out, .M = M,
			.N = w->N, .K = w->K};
	int n_mt;

	if (M < 0 || N != w->N || K != w->K)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm: shape M=%d N=%d K=%d, but the prepared "
				 "weight is N=%d K=%d", M, N, K, w->N, w->K);
	if (M == 0)
		return RG_OK;
	if (w->gemv_kb > 0 && (M <= RG_CPU_GEMV_MAX || M <= rg_cpu_smallm_max()))
		return blk_run(w, A, bias, out, M, act);
	if (w->bf16) {
		if (!(j.A = a_to_bf16(pool, A, M, K)))
			return rg_errorf(RG_ERR_OOM, "gemm: cannot allocate the bf16 copy of A "
					 "(%d x %d)", M, K);
		j.a_esz = sizeof(uint16_t);
	}
	j.act = act;
	if (w->gemv_kb > 0 && rg_cpu_smallm_max() > 0) /* f32 in 64-column blocks */
		j.k = rg_cpu_kern_select();

	tiles(M, j.N, w->bn, rg_threadpool_size(pool), &j.mb, &j.nb);
	n_mt = (M + j.mb - 1) / j.mb;
	j.n_nt = (j.N + j.nb - 1) / j.nb;
	/* the column counts of every call: tile widths, cut into L2 slices when two row chunks */
	for (int lm = 0; lm < 2; lm++) {
		const int rows = lm ? M - (n_mt - 1) * j.mb : j.mb;
		const int last = j.N - (j.n_nt - 1) * j.nb;

		int part[2];

		row_parts(rows, part);
		j.slice[lm] = j.nb;
		if (part[0] && part[1]) {
			int sl = l2_cols(j.K, w->bn > 1 ? w->bn : 16);

			j.slice[lm] = sl < j.nb ? sl : j.nb;
		}
		if (lm && rows == j.mb) {
			j.slice[1] = j.slice[0];
			continue;
		}
		for (int tw = 0; tw < 2; tw++) {
			const int width = tw ? last : j.nb, sl = j.slice[lm];

			if (width >= sl)
				add_width(&j, sl);
			if (width % sl)
				add_width(&j, width % sl);
		}
	}
	for (int lm = 0; lm < 2; lm++) {
		const int rows = lm ? M - (n_mt - 1) * j.mb : j.mb;
		int part[2];

		row_parts(rows, part);
		if (lm && rows == j.mb) {
			memcpy(j.prim[1], j.prim[0], sizeof(j.prim[0]));
			continue;
		}
		for (int c = 0; c < 2; c++)
			for (int wi = 0; part[c] && !part_blk(&j, rows, c) && wi < j.n_widths; wi++)
				if (!(j.prim[lm][c][wi] = prim_get(w, part[c], j.widths[wi], act,
								   bias != NULL)))
					return RG_ERR_INTERNAL;
	}
	rg_threadpool_run(pool, n_mt * j.n_nt, task, &j);
	if (j.failed)
		return rg_errorf(RG_ERR_INTERNAL, "gemm: oneDNN matmul execution failed (M=%d N=%d "
				 "K=%d)", M, j.N, j.K);
	return RG_OK;
}
#endif
