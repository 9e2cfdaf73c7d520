/* CUDA op parity test: every rg_op_* on a CUDA backend against the CPU reference backend
 * (src/ops/cpu, itself tested against double loops in tests/unit/test_ops_cpu.c), for fp32, fp16
 * and bf16, on ragged batches (lengths {1}, {7,3}, {128,1,64,33}, {512,512,1,2}; attention also on
 * {500,65,63,130,1,257}, lengths off the 64-key tile of the tensor-core kernel).
 *
 * Method (STYLE.md rule 6, device/METHOD.md): fresh random inputs for every case; low-precision
 * inputs are made on the GPU with rg_backend_upload_f32_as and read back, so the CPU reference
 * computes on exactly the rounded values the GPU sees; outputs are poisoned with NaN bytes first and
 * surrounded by guard bytes that must stay intact; the comparison is
 * `if (!(fabs(got - ref) <= atol + rtol * fabs(ref)))`, so NaN or an unwritten element fails.
 * Also checks error paths (OOM, unsupported head_dim, bad cu_seqlens, the device error flag) and
 * that a sequence computed alone equals the same sequence inside a batch (bitwise, on the GPU).
 *
 * Coverage of the fused / fast paths:
 *  - gemm_bias_act: the model's shapes (N = 3H, H, I with H 384 and 768, K = H or I) for every
 *    act with an act-dtype bias and with bias NULL, M from the ragged batches plus 64 and 333;
 *    exact GELU twice: with the default (fp16/bf16: cuBLASLt's tanh-form epilogue, compared with
 *    the exact CPU GELU at the dtype's tolerance in its own row "gemm_bias_gelu(tanh-epilogue)")
 *    and with rg_backend_set_exact_gelu (row "gemm_bias_act gelu(erf)");
 *  - residual LayerNorm with and without bias, out separate / = residual / = x, for N = 384, 768,
 *    1024 (warp-per-row kernel) and 100, 2312 (block kernel); embeddings LayerNorm for H = 384,
 *    768 (warp) and 99 (block);
 *  - pool for H = 384, 768 (16-byte column groups) and 99 (one element per thread), including
 *    zero-length sequences inside and at the end of a batch (zero rows, no error flag) and
 *    500-token sequences;
 *  - graphs: embed LN -> GEMM + bias -> residual LN (out = residual) -> pool -> async download to
 *    pinned memory, captured once and replayed on two different input sets written into the same
 *    buffers (each replay equals the CPU reference of its own inputs); capture error paths;
 *  - decode-step GEMMs (fp16, bf16; src/ops/cuda/gemv.cu for M <= 16): rg_op_gemm and every
 *    act with and without bias on GPT-2 small's and SmolLM2-135M's shapes and the LM head
 *    (N = 50257), M in {1,2,3,4,7,8,15,16} and {17,32} (cuBLASLt), K tails, N < 8, and the
 *    fallbacks (K % 8 != 0, A not 16-byte aligned); each kernel case also equals the same call
 *    on cuBLASLt (rg_cuda_gemv_set), and a captured replay equals the eager call bitwise;
 *  - GEMMs on GGUF-quantized weights (issue 30; src/ops/cuda/qgemv.cu): random valid Q8_0, Q4_0,
 *    Q4_1, Q4_K, Q6_K blocks, M in {1,3,8,16,33,300} on SmolLM2 / Llama-3.2-1B layer shapes and LM heads,
 *    every act with and without bias, against the CPU GEMM on rg_gguf_to_f32's dequantized
 *    weight; the small-M kernel against the dequantize + cuBLASLt path; graph replays; the
 *    prepare_qweight contract (types, shapes, double declaration, release on free);
 *  - DeBERTa (issue 21): rg_op_rel_tables (cuBLASLt strided-batched GEMMs) and rg_op_attention
 *    with the disentangled terms on the short batches and on {500,65,63,130,1,64,5}, c2p alone,
 *    p2c alone and both, window / log-bucket / random index tables, and on
 *    {512,257,256,255,129,128,127} (test_disent_edges: the tensor-core kernel's table windows
 *    and their gathered fallback); the attention rows name the kernel that takes the case
 *    ("tc": the tensor-core kernel, fp16 / bf16 with head_dim 32 or 64; "cuda-core";
 *    "RAGGED_DEBERTA_TC=0": the old path forced, tables too); batch invariance.
 * Rows are named by op and shape/variant; a failing element prints the case (lengths, N, alias).
 *
 * Usage: test_ops_cuda [--json FILE] [--quick] [--dtype fp32|fp16|bf16] [--skip-oom] [--no-gemm]
 *        [--small-m] [--attn-wgmma] [--deberta] [--qgemm].
 * --qgemm runs only the quantized-weight GEMMs (every dtype, or --dtype's).
 * --attn-wgmma runs only the Hopper wgmma attention cases (test_attention_wgmma; fp16 and bf16)
 * and fails unless every one of them launched the wgmma kernel (so: Hopper, sm_90a build);
 * with --quick, a subset of its lengths (1, 65, 129 and the batches of at most 300 tokens a
 * sequence, for compute-sanitizer). --deberta runs only DeBERTa's ops (tests/gpu/deberta.sh).
 * --quick drops the {512,512,1,2} set and most fused-GEMM cases (H = 384 on 1 and 226 rows only),
 * for compute-sanitizer runs; --dtype runs one dtype; --skip-oom leaves out the deliberate 1 PiB
 * allocation and the deliberate illegal call during a graph capture (compute-sanitizer counts both
 * as API errors); --no-gemm leaves out the cuBLASLt GEMMs (in the captured graph too, whose GEMM
 * output is then an uploaded input), so that racecheck sees only ragged's own kernels (it reports
 * WAR hazards inside cuBLASLt's sm90 "nvjet" kernels, which are not ours to fix); --deberta runs
 * only the DeBERTa cases (tests/gpu/deberta.sh).
 * Prints one table row per (op, dtype) with the worst errors over all length sets; exits 1 if any
 * check failed, 77 when no CUDA device is present.
 * Build: see tests/gpu/run.sh (links build/libragged.a and the CUDA libraries). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gguf.h"
#include "core/tuning.h"
#include "ops/ops.h"
#include "ops/cuda/attention_wgmma.cuh"
#include "ops/cuda/gemv.cuh"
#include "ops/cuda/qgemv.cuh"
#include "../unit/test_attn.h"

#define GUARD 256       /* guard bytes on each side of every GPU output */
#define GUARD_BYTE 0x5A
#define MAX_ROWS 512

/* ---- results table ---- */
typedef struct row {
	char op[48];
	rg_dtype dt;
	int cases;
	long n;          /* elements compared */
	double max_abs;  /* max |got - ref| */
	double max_rel;  /* max |got - ref| / max(|ref|, 1e-3) */
	double num, den; /* for ||got - ref|| / ||ref|| */
	double worst;    /* max |got - ref| / (atol + rtol |ref|): pass iff <= 1 (and no NaN) */
	long bad;        /* elements failing the check */
	int guard_bad;   /* guard bytes overwritten */
} row;

static row g_rows[MAX_ROWS];
static int g_nrows;
static int g_fail;
static int g_err_checks, g_err_fail, g_skip_oom, g_no_gemm, g_quick, g_small_m_only, g_wgmma_only;
static int g_qgemm_only;   /* --qgemm: the quantized-weight GEMMs alone (tests/gpu/issue30_gq.sh) */
static int g_deberta_only; /* --deberta: DeBERTa's ops alone (tests/gpu/deberta.sh) */
static char g_case[128]; /* the current case (lengths, variant), printed with a failing element */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static const char *dt_name(rg_dtype dt)
{
	return dt == RG_DTYPE_F32 ? "fp32" : dt == RG_DTYPE_F16 ? "fp16" : "bf16";
}

static row *get_row(const char *op, rg_dtype dt)
{
	for (int i = 0; i < g_nrows; i++)
		if (g_rows[i].dt == dt && strcmp(g_rows[i].op, op) == 0)
			return &g_rows[i];
	if (g_nrows == MAX_ROWS) {
		fprintf(stderr, "too many table rows\n");
		exit(2);
	}
	row *r = &g_rows[g_nrows++];
	memset(r, 0, sizeof(*r));
	snprintf(r->op, sizeof(r->op), "%s", op);
	r->dt = dt;
	return r;
}

/* Describe the current case for failure messages; compare() clears it. */
static void set_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_case(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_case, sizeof(g_case), fmt, ap);
	va_end(ap);
}

/* Count a failed check that is not an element comparison (an op or a sync returned an error,
 * a zero row was not zero) in the row (op, dt). */
static void row_fail(const char *op, rg_dtype dt, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- random numbers (xorshift64*), uniform in [lo, hi) ---- */
static double urand(void)
{
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return (double)((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }
static int irand(int n) { return (int)(urand() * n); }

/* ---- half / bfloat16 decoding on the host ---- */
static float bits_f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static float half_to_f(uint16_t h)
{
	uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
	if (e == 0) /* zero / subnormal: m * 2^-24 */
		return (s ? -1.f : 1.f) * (float)m * 5.9604644775390625e-8f;
	if (e == 31)
		return bits_f(s | 0x7F800000u | (m << 13));
	return bits_f(s | ((e + 112) << 23) | (m << 13));
}

static float bf16_to_f(uint16_t b) { return bits_f((uint32_t)b << 16); }

static void decode(rg_dtype dt, const void *raw, float *out, size_t n)
{
	if (dt == RG_DTYPE_F32) {
		memcpy(out, raw, n * 4);
		return;
	}
	const uint16_t *u = raw;
	for (size_t i = 0; i < n; i++)
		out[i] = dt == RG_DTYPE_F16 ? half_to_f(u[i]) : bf16_to_f(u[i]);
}

/* ---- GPU buffers with guards ---- */
typedef struct gbuf {
	unsigned char *base; /* device allocation: GUARD | payload | GUARD */
	void *p;             /* payload */
	size_t bytes;
} gbuf;

static rg_backend *g_gpu, *g_cpu;
static rg_dtype g_dt; /* the GPU backend's dtype */

static void die_st(rg_status st, const char *what)
{
	fprintf(stderr, "FATAL %s: %s: %s\n", what, rg_status_name(st), rg_last_error());
	exit(1);
}

#define CK(call)                                                                                 \
	do {                                                                                     \
		rg_status st_ = (call);                                                          \
		if (st_ != RG_OK)                                                                \
			die_st(st_, #call);                                                      \
	} while (0)

/* Allocate `bytes` on the GPU with guards set to GUARD_BYTE and the payload set to 0xFF (NaN for
 * f32, f16 and bf16 alike). */
static gbuf galloc(size_t bytes)
{
	gbuf b;
	unsigned char *h = malloc(bytes + 2 * GUARD);
	void *vp;

	b.bytes = bytes;
	CK(rg_backend_alloc(g_gpu, bytes + 2 * GUARD, &vp));
	b.base = vp;
	b.p = b.base + GUARD;
	memset(h, GUARD_BYTE, bytes + 2 * GUARD);
	memset(h + GUARD, 0xFF, bytes);
	CK(rg_backend_upload(g_gpu, b.base, h, bytes + 2 * GUARD));
	free(h);
	return b;
}

/* Number of guard bytes that changed. */
static int gguard_check(const gbuf *b)
{
	unsigned char g[2 * GUARD];
	int bad = 0;
	CK(rg_backend_download(g_gpu, g, b->base, GUARD));
	CK(rg_backend_download(g_gpu, g + GUARD, (unsigned char *)b->p + b->bytes, GUARD));
	for (int i = 0; i < 2 * GUARD; i++)
		bad += g[i] != GUARD_BYTE;
	return bad;
}

static void gfree(gbuf *b)
{
	rg_backend_dealloc(g_gpu, b->base);
	b->base = NULL;
}

/* Fill the first n act values of the GPU buffer dst with values drawn in [lo, hi), stored as dt;
 * returns them exactly as stored (rounded), for the CPU reference (caller frees). */
static float *gact_fill(rg_dtype dt, void *dst, size_t n, float lo, float hi)
{
	float *f = malloc(n * sizeof(float));
	void *raw = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		f[i] = frand(lo, hi);
	CK(rg_backend_upload_f32_as(g_gpu, dst, f, n, dt));
	CK(rg_backend_download(g_gpu, raw, dst, n * rg_dtype_size(dt)));
	decode(dt, raw, f, n);
	free(raw);
	return f;
}

/* Round the n host values x to dt in place, as rg_backend_upload_f32_as stores them (an upload
 * and a read-back): the reference's copy of a weight the GPU holds in dt. */
static void round_to_dt(rg_dtype dt, float *x, size_t n)
{
	gbuf b;
	void *raw;

	if (dt == RG_DTYPE_F32)
		return;
	b = galloc(n * rg_dtype_size(dt));
	raw = malloc(n * 4);
	CK(rg_backend_upload_f32_as(g_gpu, b.p, x, n, dt));
	CK(rg_backend_download(g_gpu, raw, b.p, n * rg_dtype_size(dt)));
	decode(dt, raw, x, n);
	free(raw);
	gfree(&b);
}

/* GPU tensor of n act values drawn in [lo, hi), stored as dt; *host gets the values exactly as
 * stored (rounded), for the CPU reference. Caller frees both. */
static gbuf gact_rand(rg_dtype dt, size_t n, float lo, float hi, float **host)
{
	gbuf b = galloc(n * rg_dtype_size(dt));
	*host = gact_fill(dt, b.p, n, lo, hi);
	return b;
}

/* GPU copy of a host array (f32 or int32). */
static gbuf graw(const void *h, size_t bytes)
{
	gbuf b = galloc(bytes);
	CK(rg_backend_upload(g_gpu, b.p, h, bytes));
	return b;
}

static float *frand_host(size_t n, float lo, float hi)
{
	float *f = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		f[i] = frand(lo, hi);
	return f;
}

/* Read back n values of GPU output (dtype odt) as float. */
static float *gread(const gbuf *b, rg_dtype odt, size_t n)
{
	void *raw = malloc(n * 4);
	float *f = malloc(n * sizeof(float));
	CK(rg_backend_sync(g_gpu));
	CK(rg_backend_download(g_gpu, raw, b->p, n * rg_dtype_size(odt)));
	decode(odt, raw, f, n);
	free(raw);
	return f;
}

static float *nan_host(size_t n)
{
	float *f = malloc(n * sizeof(float));
	memset(f, 0xFF, n * sizeof(float));
	return f;
}

/* Compare got against ref into the table row (op, dt); NaN anywhere fails. */
static void compare(const char *op, rg_dtype dt, const float *got, const float *ref, size_t n,
		    double atol, double rtol, int guard_bad)
{
	row *r = get_row(op, dt);
	long bad = 0;

	r->cases++;
	r->n += (long)n;
	r->guard_bad += guard_bad;
	for (size_t i = 0; i < n; i++) {
		double g = got[i], f = ref[i], d = fabs(g - f);
		double tol = atol + rtol * fabs(f);
		if (!(d <= tol)) {
			if (bad < 3)
				fprintf(stderr, "  %s %s: element %zu got %.8g ref %.8g [%s]\n", op,
					dt_name(dt), i, g, f, g_case);
			bad++;
		}
		if (isnan(d)) {
			r->max_abs = r->max_rel = r->worst = INFINITY;
			continue;
		}
		if (d > r->max_abs)
			r->max_abs = d;
		if (d / fmax(fabs(f), 1e-3) > r->max_rel)
			r->max_rel = d / fmax(fabs(f), 1e-3);
		if (d / tol > r->worst)
			r->worst = d / tol;
		r->num += d * d;
		r->den += f * f;
	}
	r->bad += bad;
	if (guard_bad)
		fprintf(stderr, "  %s %s: %d guard bytes overwritten [%s]\n", op, dt_name(dt),
			guard_bad, g_case);
	if (bad || guard_bad)
		g_fail = 1;
	g_case[0] = 0;
}

static void row_fail(const char *op, rg_dtype dt, const char *fmt, ...)
{
	row *r = get_row(op, dt);
	va_list ap;

	r->bad++;
	g_fail = 1;
	fprintf(stderr, "  %s %s: ", op, dt_name(dt));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " [%s]\n", g_case);
}

/* True when a GPU op returned RG_OK; otherwise the failure is counted in the row (op, dt) (the
 * test goes on: one broken path must not hide the others). */
static int op_ok(rg_status st, const char *op, rg_dtype dt, const char *call)
{
	if (st == RG_OK)
		return 1;
	row_fail(op, dt, "%s returned %s: %s", call, rg_status_name(st), rg_last_error());
	get_row(op, dt)->cases++;
	return 0;
}

/* Output tolerances: the GPU output is rounded to dt (half an ulp: 2^-11 fp16, 2^-8 bf16), the
 * rest is float32 reordering. */
static void tol_for(rg_dtype dt, double *atol, double *rtol)
{
	*atol = 0;
	*rtol = 0;
	switch (dt) {
	case RG_DTYPE_F32: *atol = 2e-5; *rtol = 1e-4; return;
	case RG_DTYPE_F16: *atol = 1e-3; *rtol = 2e-3; return;
	case RG_DTYPE_BF16: *atol = 8e-3; *rtol = 1.6e-2; return;
	case RG_DTYPE_AUTO: return; /* a load parameter, never a backend's dtype */
	}
}

/* ---- one batch shape ---- */
typedef struct batch {
	int n_seq, n_tok, max_len;
	int32_t cu[8];
	char name[64]; /* "lens {7,3}" */
} batch;

/* n <= 7 sequences; lengths may be 0 (the padding sequences of a graph bucket). */
static batch make_batch(const int *lens, int n)
{
	batch b = { .n_seq = n };
	size_t k;

	b.cu[0] = 0;
	k = (size_t)snprintf(b.name, sizeof(b.name), "lens {");
	for (int i = 0; i < n; i++) {
		b.cu[i + 1] = b.cu[i] + lens[i];
		if (lens[i] > b.max_len)
			b.max_len = lens[i];
		if (k < sizeof(b.name))
			k += (size_t)snprintf(b.name + k, sizeof(b.name) - k, "%s%d", i ? "," : "",
					      lens[i]);
	}
	if (k < sizeof(b.name))
		snprintf(b.name + k, sizeof(b.name) - k, "}");
	b.n_tok = b.cu[n];
	return b;
}

/* ---- op tests ---- */
/* H = 32 * VEC * nv (384, 768) takes the warp-per-row kernel, other H (99) the block kernel. */
static void test_embed_ln(rg_dtype dt, const batch *b, int H)
{
	const int vocab = 1000, max_pos = 512, T = b->n_tok;
	float *word, *pos, *type0;
	double a, r;
	char name[48];
	int32_t *tok = malloc(T * 4), *ps = malloc(T * 4);
	float *gam = frand_host(H, 0.5f, 1.5f), *bet = frand_host(H, -0.5f, 0.5f);

	tol_for(dt, &a, &r);
	for (int s = 0; s < b->n_seq; s++)
		for (int t = b->cu[s]; t < b->cu[s + 1]; t++) {
			tok[t] = irand(vocab);
			ps[t] = t - b->cu[s];
		}
	gbuf gw = gact_rand(dt, (size_t)vocab * H, -1, 1, &word);
	gbuf gp = gact_rand(dt, (size_t)max_pos * H, -1, 1, &pos);
	gbuf gt = gact_rand(dt, H, -1, 1, &type0);
	gbuf gtok = graw(tok, T * 4), gps = graw(ps, T * 4), gg = graw(gam, H * 4),
	     gb = graw(bet, H * 4);
	gbuf go = galloc((size_t)T * H * rg_dtype_size(dt));
	CK(rg_op_embed_layernorm(g_gpu, gtok.p, gps.p, T, gw.p, gp.p, gt.p, gg.p, gb.p, 1e-12f, H,
				 go.p));
	float *ref = nan_host((size_t)T * H);
	CK(rg_op_embed_layernorm(g_cpu, tok, ps, T, word, pos, type0, gam, bet, 1e-12f, H, ref));
	float *got = gread(&go, dt, (size_t)T * H);
	snprintf(name, sizeof(name), "embed_layernorm H=%d", H);
	set_case("%s", b->name);
	/* LN outputs reach ~3-4: scale atol with them */
	compare(name, dt, got, ref, (size_t)T * H, 2 * a, r, gguard_check(&go));
	free(got);
	free(ref);
	gfree(&go); gfree(&gw); gfree(&gp); gfree(&gt); gfree(&gtok); gfree(&gps); gfree(&gg);
	gfree(&gb);
	free(word); free(pos); free(type0); free(tok); free(ps); free(gam); free(bet);
}

static void test_gemm(rg_dtype dt, const batch *b, int N, int K)
{
	const int M = b->n_tok;
	const float ws = 1.f / sqrtf((float)K);
	float *A, *W;
	double a, r;
	char name[48];

	tol_for(dt, &a, &r);
	gbuf ga = gact_rand(dt, (size_t)M * K, -1, 1, &A);
	gbuf gw = gact_rand(dt, (size_t)N * K, -ws * 1.7f, ws * 1.7f, &W);
	gbuf go = galloc((size_t)M * N * rg_dtype_size(dt));
	CK(rg_op_gemm(g_gpu, ga.p, gw.p, go.p, M, N, K));
	float *ref = nan_host((size_t)M * N);
	CK(rg_op_gemm(g_cpu, A, W, ref, M, N, K));
	float *got = gread(&go, dt, (size_t)M * N);
	snprintf(name, sizeof(name), "gemm N=%d K=%d", N, K);
	set_case("%s", b->name);
	compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
	free(got); free(ref); free(A); free(W);
	gfree(&ga); gfree(&gw); gfree(&go);
}

/* out (M, N) = act(A W^T + bias) with bias (N) in the act dtype or NULL. exact: run with
 * rg_backend_set_exact_gelu(true). Exact GELU without it on fp16/bf16 is cuBLASLt's tanh-form
 * epilogue: compared with the exact CPU GELU at the dtype's tolerance, in a row of its own. */
static void test_gemm_bias_act(rg_dtype dt, int M, int N, int K, rg_act act, int with_bias,
			       int exact)
{
	const float ws = 1.f / sqrtf((float)K);
	const int tanh_epi = act == RG_ACT_GELU && dt != RG_DTYPE_F32 && !exact;
	float *A, *W, *bias = NULL;
	double a, r;
	char name[48];
	rg_status st;

	tol_for(dt, &a, &r);
	if (tanh_epi)
		snprintf(name, sizeof(name), "%s", with_bias ? "gemm_bias_gelu(tanh-epilogue)"
							     : "gemm_gelu(tanh-epilogue) nobias");
	else
		snprintf(name, sizeof(name), "%s %s%s", with_bias ? "gemm_bias_act" : "gemm_act",
			 act == RG_ACT_GELU ? "gelu(erf)" : rg_act_name(act),
			 with_bias ? "" : " nobias");
	set_case("M=%d N=%d K=%d%s", M, N, K, exact ? " exact_gelu" : "");
	gbuf ga = gact_rand(dt, (size_t)M * K, -1, 1, &A);
	gbuf gw = gact_rand(dt, (size_t)N * K, -ws * 1.7f, ws * 1.7f, &W);
	/* the bias is act dtype (cuBLASLt's epilogue wants D's type), read back for the reference */
	gbuf gb = with_bias ? gact_rand(dt, (size_t)N, -1, 1, &bias) : (gbuf){ 0 };
	gbuf go = galloc((size_t)M * N * rg_dtype_size(dt));
	rg_backend_set_exact_gelu(g_gpu, exact != 0);
	st = rg_op_gemm_bias_act(g_gpu, ga.p, gw.p, with_bias ? gb.p : NULL, go.p, M, N, K, act);
	rg_backend_set_exact_gelu(g_gpu, false);
	if (op_ok(st, name, dt, "rg_op_gemm_bias_act")) {
		float *ref = nan_host((size_t)M * N);
		CK(rg_op_gemm_bias_act(g_cpu, A, W, bias, ref, M, N, K, act));
		float *got = gread(&go, dt, (size_t)M * N);
		compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
		free(got);
		free(ref);
	}
	g_case[0] = 0;
	free(A); free(W); free(bias);
	gfree(&ga); gfree(&gw); gfree(&go);
	if (with_bias)
		gfree(&gb);
}

/* The model's GEMMs for hidden size H (I = 4H) on M rows: QKV (3H, H), attention output (H, H)
 * and FFN2 (H, I) with bias; FFN1 (I, H) with bias and every activation, exact GELU both ways;
 * with_nobias adds the same without bias (bias NULL). */
static void test_gemm_bias_act_model(rg_dtype dt, int M, int H, int with_nobias)
{
	const int I = 4 * H;
	static const rg_act acts[] = { RG_ACT_RELU, RG_ACT_GELU_NEW, RG_ACT_GELU };

	test_gemm_bias_act(dt, M, 3 * H, H, RG_ACT_NONE, 1, 0);
	test_gemm_bias_act(dt, M, H, H, RG_ACT_NONE, 1, 0);
	test_gemm_bias_act(dt, M, H, I, RG_ACT_NONE, 1, 0);
	for (int bi = 1; bi >= (with_nobias ? 0 : 1); bi--) {
		if (!bi)
			test_gemm_bias_act(dt, M, H, H, RG_ACT_NONE, 0, 0);
		for (int k = 0; k < 3; k++)
			test_gemm_bias_act(dt, M, I, H, acts[k], bi, 0);
		test_gemm_bias_act(dt, M, I, H, RG_ACT_GELU, bi, 1);
	}
}

/* ---- decode-step GEMMs: M <= RG_GEMV_MAX_M rows (src/ops/cuda/gemv.cu) ----
 * g_gemv: the small-M kernel is on (RAGGED_GEMV unset or not "0"). A case takes it when M <= 16,
 * K % 8 == 0 and A is 16-byte aligned (fp16 / bf16); else cuBLASLt (the row's name says which).
 * Each gemv case is also run with the kernel switched off (rg_cuda_gemv_set) and the two
 * outputs compared at the same tolerance (each is within half an ulp of the exact value, plus
 * cuBLASLt's tanh-form GELU epilogue for exact GELU). */
static int g_gemv;

static bool gemv_path(rg_dtype dt, int M, int K, size_t a_off)
{
	return g_gemv && dt != RG_DTYPE_F32 && M <= RG_GEMV_MAX_M && K % 8 == 0 && a_off % 16 == 0;
}

/* out (M, N) = act(A W^T + bias) through rg_op_gemm (plain: act NONE, no bias) or
 * rg_op_gemm_bias_act, against the CPU backend; A starts a_off bytes into its buffer (a_off 8:
 * misaligned for the 16-byte loads, the cuBLASLt fallback). */
static void test_small_m(rg_dtype dt, int M, int N, int K, rg_act act, int with_bias, int plain,
			 size_t a_off)
{
	const float ws = 1.f / sqrtf((float)K);
	const size_t es = rg_dtype_size(dt), a_skip = a_off / es;
	const bool gv = gemv_path(dt, M, K, a_off);
	float *A, *W, *bias = NULL;
	double a, r;
	char name[48], name2[48];
	rg_status st;

	if (g_no_gemm && !gv)
		return; /* --no-gemm: ragged's own kernel only */
	tol_for(dt, &a, &r);
	snprintf(name, sizeof(name), "%s %s%s%s", gv ? "gemv" : "small-M cublaslt",
		 plain ? "gemm" : act == RG_ACT_GELU ? "gelu(erf)" : rg_act_name(act),
		 !plain && with_bias ? "+bias" : "", a_off ? " A+8B" : "");
	set_case("M=%d N=%d K=%d", M, N, K);
	gbuf ga = gact_rand(dt, (size_t)M * K + a_skip, -1, 1, &A);
	gbuf gw = gact_rand(dt, (size_t)N * K, -ws * 1.7f, ws * 1.7f, &W);
	gbuf gb = with_bias ? gact_rand(dt, (size_t)N, -1, 1, &bias) : (gbuf){ 0 };
	gbuf go = galloc((size_t)M * N * es);
	const void *ap = (const char *)ga.p + a_off;
	const void *bp = with_bias ? gb.p : NULL;

	st = plain ? rg_op_gemm(g_gpu, ap, gw.p, go.p, M, N, K)
		   : rg_op_gemm_bias_act(g_gpu, ap, gw.p, bp, go.p, M, N, K, act);
	if (op_ok(st, name, dt, plain ? "rg_op_gemm" : "rg_op_gemm_bias_act")) {
		float *ref = nan_host((size_t)M * N);
		float *got = gread(&go, dt, (size_t)M * N);
		if (plain)
			CK(rg_op_gemm(g_cpu, A + a_skip, W, ref, M, N, K));
		else
			CK(rg_op_gemm_bias_act(g_cpu, A + a_skip, W, bias, ref, M, N, K, act));
		compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
		if (gv && !g_no_gemm) { /* the same call on cuBLASLt */
			gbuf go2 = galloc((size_t)M * N * es);
			rg_cuda_gemv_set(false, 0, 0);
			st = plain ? rg_op_gemm(g_gpu, ap, gw.p, go2.p, M, N, K)
				   : rg_op_gemm_bias_act(g_gpu, ap, gw.p, bp, go2.p, M, N, K, act);
			rg_cuda_gemv_set(true, 0, 0);
			snprintf(name2, sizeof(name2), "gemv vs cublaslt");
			if (op_ok(st, name2, dt, "rg_op_gemm* (RAGGED_GEMV=0)")) {
				float *lt = gread(&go2, dt, (size_t)M * N);
				set_case("M=%d N=%d K=%d act %s%s", M, N, K, rg_act_name(act),
					 with_bias ? " bias" : "");
				compare(name2, dt, got, lt, (size_t)M * N, a, r, gguard_check(&go2));
				free(lt);
			}
			gfree(&go2);
		}
		free(got);
		free(ref);
	}
	g_case[0] = 0;
	free(A); free(W); free(bias);
	gfree(&ga); gfree(&gw); gfree(&go);
	if (with_bias)
		gfree(&gb);
}

/* The small-M GEMM captured in a graph and replayed equals the eager call bitwise. */
static void test_small_m_graph(rg_dtype dt)
{
	const char *op = "gemv graph replay";
	const int M = 4, N = 960, K = 576;
	const size_t es = rg_dtype_size(dt), n = (size_t)M * N * es;
	float *A, *W, *bias;
	rg_graph *g = NULL;
	rg_status st;

	if (g_no_gemm && !gemv_path(dt, M, K, 0))
		return;
	gbuf ga = gact_rand(dt, (size_t)M * K, -1, 1, &A);
	gbuf gw = gact_rand(dt, (size_t)N * K, -0.07f, 0.07f, &W);
	gbuf gb = gact_rand(dt, (size_t)N, -1, 1, &bias);
	gbuf ge = galloc(n), gr = galloc(n);
	CK(rg_op_gemm_bias_act(g_gpu, ga.p, gw.p, gb.p, ge.p, M, N, K, RG_ACT_GELU_NEW));
	st = rg_backend_capture_begin(g_gpu);
	if (op_ok(st, op, dt, "rg_backend_capture_begin")) {
		rg_status st2 = rg_op_gemm_bias_act(g_gpu, ga.p, gw.p, gb.p, gr.p, M, N, K,
						    RG_ACT_GELU_NEW);
		st = rg_backend_capture_end(g_gpu, &g);
		if (op_ok(st2, op, dt, "rg_op_gemm_bias_act (capture)") &&
		    op_ok(st, op, dt, "rg_backend_capture_end") &&
		    op_ok(rg_backend_graph_launch(g_gpu, g), op, dt, "rg_backend_graph_launch")) {
			unsigned char *he = malloc(n), *hr = malloc(n);
			CK(rg_backend_sync(g_gpu));
			CK(rg_backend_download(g_gpu, he, ge.p, n));
			CK(rg_backend_download(g_gpu, hr, gr.p, n));
			get_row(op, dt)->cases++;
			if (memcmp(he, hr, n) != 0)
				row_fail(op, dt, "replay differs from the eager call");
			free(he);
			free(hr);
		}
		rg_backend_graph_free(g_gpu, g);
	}
	free(A); free(W); free(bias);
	gfree(&ga); gfree(&gw); gfree(&gb); gfree(&ge); gfree(&gr);
}

/* Decode shapes (GPT-2 small: K 768 / 3072; SmolLM2-135M: K 576 / 1536; the LM head's odd N),
 * M from 1 to 32 (17 and 32: cuBLASLt), every act with and without bias, and the fallbacks:
 * K % 8 != 0, a misaligned A; K tails (K % 32 = 8, 24; K < 32) and N < 8 for the kernel's
 * partial steps and tiles. */
static void test_small_m_all(rg_dtype dt)
{
	static const int ms[] = { 1, 2, 3, 4, 7, 8, 15, 16, 17, 32 };
	static const int shp[][2] = { { 2304, 768 }, { 768, 768 }, { 3072, 768 }, { 768, 3072 },
				      { 960, 576 }, { 576, 576 }, { 3072, 576 }, { 576, 1536 } };
	static const int odd[][3] = { /* M, N, K */
		{ 1, 768, 776 }, { 16, 576, 584 }, { 5, 100, 24 }, { 9, 5, 8 }, { 3, 1001, 1544 },
		{ 1, 768, 100 }, { 16, 576, 772 }, { 4, 13, 30 } };
	const int ns = (int)(sizeof(shp) / sizeof(shp[0]));
	const int nm = g_quick ? 2 : (int)(sizeof(ms) / sizeof(ms[0])); /* --quick: M 1, 2 */

	for (int i = 0; i < nm; i++) {
		for (int j = 0; j < ns; j++)
			test_small_m(dt, ms[i], shp[j][0], shp[j][1], RG_ACT_NONE, 0, 1, 0);
		for (int a = 0; a < 4; a++)
			for (int bi = 0; bi < 2; bi++) {
				const int j = (ms[i] + 2 * a + bi) % ns;
				test_small_m(dt, ms[i], shp[j][0], shp[j][1], (rg_act)a, bi, 0, 0);
			}
	}
	/* the LM head: N = 50257 (odd: element stores, a partial last tile) */
	for (int i = 0; i < (g_quick ? 1 : 4); i++)
		test_small_m(dt, (const int[]){ 1, 4, 16, 17 }[i], 50257, 768, RG_ACT_NONE, 0, 1, 0);
	if (!g_quick)
		test_small_m(dt, 7, 50257, 768, RG_ACT_GELU_NEW, 1, 0, 0);
	for (int i = 0; i < (int)(sizeof(odd) / sizeof(odd[0])); i++) {
		test_small_m(dt, odd[i][0], odd[i][1], odd[i][2], RG_ACT_NONE, 0, 1, 0);
		test_small_m(dt, odd[i][0], odd[i][1], odd[i][2], (rg_act)(i % 4), 1, 0, 0);
	}
	test_small_m(dt, 4, 768, 768, RG_ACT_NONE, 0, 1, 8);
	test_small_m(dt, 4, 768, 768, RG_ACT_GELU, 1, 0, 8);
	test_small_m_graph(dt);
}

/* ---- GEMMs on GGUF-quantized weights (issue 30; src/ops/cuda/qgemv.cu) ----
 * Random valid blocks of Q8_0 / Q4_0 / Q4_1 / Q4_K / Q6_K (random fp16 scales, random quants,
 * minimums and K-quant sub-block scales), declared with rg_op_prepare_qweight; the reference is
 * the CPU backend's f32 GEMM (+ bias + act) on the weight dequantized by src/core/gguf.c's
 * rg_gguf_to_f32 (bit-exact with ggml's dequantize_row_*) and rounded to the act dtype, as the GPU
 * holds it, times the same rounded activations, at the dtype's tolerance.
 * M <= 16 takes the small-M kernel (fp16 / bf16, A 8-byte aligned), larger M (and fp32, and the
 * hook rg_cuda_qgemv_set(false)) the dequantize + cuBLASLt path; each small-M case is also run on
 * the other path and the two compared. */

/* float -> IEEE binary16 bits, round to nearest even (normal and subnormal results; |x| < 65504). */
static uint16_t f_to_half(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	const uint32_t sign = (u >> 16) & 0x8000u;
	const float a = fabsf(x);
	if (a < 6.103515625e-05f) /* subnormal: a multiple of 2^-24 */
		return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.f));
	int e;
	const float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
	uint32_t mant = (uint32_t)lrintf((m * 2.f - 1.f) * 1024.f), ex = (uint32_t)(e - 1 + 15);
	if (mant == 1024) {
		mant = 0;
		ex++;
	}
	return (uint16_t)(sign | ex << 10 | mant);
}

static const char *qname(int type)
{
	switch (type) {
	case RG_GGUF_Q8_0: return "q8_0";
	case RG_GGUF_Q4_0: return "q4_0";
	case RG_GGUF_Q4_1: return "q4_1";
	case RG_GGUF_Q4_K: return "q4_k";
	case RG_GGUF_Q6_K: return "q6_k";
	}
	return "?";
}

static bool qtype_k(int type) { return type == RG_GGUF_Q4_K || type == RG_GGUF_Q6_K; }

/* N rows of K / 32 (K-quants: K / 256) random blocks of `type` whose values are about +-amp; *w
 * gets them dequantized by rg_gguf_to_f32 ((N, K) f32, caller frees). Returns the blocks (caller
 * frees). Every byte but the fp16 scales is random: any bit pattern of quants, 6-bit scales and
 * mins (Q4_K) or int8 scales (Q6_K) is a valid block. */
static unsigned char *qblocks_rand(int type, int N, int K, float amp, float **w, size_t *bytes)
{
	int64_t per;
	size_t bb;
	if (!rg_gguf_type_size((uint32_t)type, &per, &bb))
		abort();
	const size_t nb = (size_t)N * (size_t)(K / per);
	unsigned char *q = malloc(nb * bb);
	rg_gguf_tensor t;

	for (size_t b = 0; b < nb; b++) {
		unsigned char *p = q + b * bb;
		const float sgn = urand() < 0.5 ? -1.f : 1.f;
		uint16_t d, m;

		switch (type) {
		case RG_GGUF_Q8_0:
			d = f_to_half(sgn * frand(0.3f, 1.f) * amp / 127.f);
			memcpy(p, &d, 2);
			for (int j = 0; j < 32; j++)
				p[2 + j] = (unsigned char)(irand(256)); /* -128 .. 127 */
			break;
		case RG_GGUF_Q4_0:
			d = f_to_half(sgn * frand(0.3f, 1.f) * amp / 8.f);
			memcpy(p, &d, 2);
			for (int j = 0; j < 16; j++)
				p[2 + j] = (unsigned char)irand(256);
			break;
		case RG_GGUF_Q4_1: /* values m .. m + 15 d */
			d = f_to_half(frand(0.3f, 1.f) * amp / 7.5f);
			m = f_to_half(-frand(0.5f, 1.5f) * amp);
			memcpy(p, &d, 2);
			memcpy(p + 2, &m, 2);
			for (int j = 0; j < 16; j++)
				p[4 + j] = (unsigned char)irand(256);
			break;
		case RG_GGUF_Q4_K: /* (d sc) q - (dmin mn), sc and mn 0..63 (mean ~32), q 0..15 */
			for (size_t j = 4; j < bb; j++)
				p[j] = (unsigned char)irand(256);
			d = f_to_half(frand(0.3f, 1.f) * amp / (32.f * 7.5f));
			m = f_to_half(frand(0.5f, 1.5f) * amp / 32.f);
			memcpy(p, &d, 2);
			memcpy(p + 2, &m, 2);
			break;
		default: /* Q6_K: (d sc) (q - 32), sc int8, q 0..63 */
			for (size_t j = 0; j < 208; j++)
				p[j] = (unsigned char)irand(256);
			d = f_to_half(sgn * frand(0.3f, 1.f) * amp / (64.f * 16.f));
			memcpy(p + 208, &d, 2);
			break;
		}
	}
	memset(&t, 0, sizeof(t));
	t.name = "w";
	t.n_dims = 2;
	t.ne[0] = K;
	t.ne[1] = N;
	t.ne[2] = t.ne[3] = 1;
	t.type = (uint32_t)type;
	t.data = q;
	t.nbytes = nb * bb;
	t.numel = (int64_t)N * K;
	*w = malloc((size_t)N * K * sizeof(float));
	CK(rg_gguf_to_f32(&t, *w));
	*bytes = nb * bb;
	return q;
}

/* GPU copy of quantized blocks in an allocation of its own (no guards: the table of quantized
 * weights knows W by the address rg_backend_alloc returned, which rg_backend_dealloc forgets). */
static gbuf gqraw(const void *h, size_t bytes)
{
	gbuf b;
	void *vp;

	CK(rg_backend_alloc(g_gpu, bytes, &vp));
	b.base = vp;
	b.p = vp;
	b.bytes = bytes;
	CK(rg_backend_upload(g_gpu, b.p, h, bytes));
	return b;
}

/* A (M, K) rounded as qmv_kernel rounds it (qgemv.cuh): per 32 values d = amax / 127,
 * q = rint(a x (127 / amax)), a' = q d, in fp32. Returns a malloc'd copy. */
static float *q8_round_rows(const float *A, int M, int K)
{
	float *o = malloc((size_t)M * K * sizeof(float));

	for (size_t b = 0; b < (size_t)M * K; b += 32) {
		float amax = 0.f, id, d;
		for (int i = 0; i < 32; i++)
			amax = fmaxf(amax, fabsf(A[b + i]));
		d = amax / 127.f;
		id = amax > 0.f ? 127.f / amax : 0.f;
		for (int i = 0; i < 32; i++)
			o[b + i] = (float)(int)rintf(A[b + i] * id) * d;
	}
	return o;
}

/* out (M, N) = act(A dequant(W)^T + bias) on a quantized W through rg_op_gemm (plain) or
 * rg_op_gemm_bias_act, against the CPU; A starts a_off bytes into its buffer (4: misaligned for
 * the small-M kernel's 8-byte loads). */
static void test_qgemm(rg_dtype dt, int type, int M, int N, int K, rg_act act, int with_bias,
		       int plain, size_t a_off)
{
	const size_t es = rg_dtype_size(dt), a_skip = a_off / es;
	const bool small = dt != RG_DTYPE_F32 && M <= RG_QGEMV_MAX_M && a_off % 8 == 0;
	float *A, *W, *bias = NULL;
	size_t qbytes;
	double a, r;
	char name[48], name2[48];
	rg_status st;

	tol_for(dt, &a, &r);
	snprintf(name, sizeof(name), "qgemm %s %s %s%s%s", qname(type),
		 small ? "qgemv" : "dequant+lt",
		 plain ? "gemm" : act == RG_ACT_GELU ? "gelu(erf)" : rg_act_name(act),
		 !plain && with_bias ? "+bias" : "", a_off ? " A+off" : "");
	set_case("%s M=%d N=%d K=%d", qname(type), M, N, K);
	unsigned char *qh = qblocks_rand(type, N, K, 1.7f / sqrtf((float)K), &W, &qbytes);
	gbuf ga = gact_rand(dt, (size_t)M * K + a_skip, -1, 1, &A);
	gbuf gw = gqraw(qh, qbytes);
	/* M <= 4 (qmv_kernel): integer products of the exact block values with A rounded to 8 bits
	 * per 32 values, so the reference rounds A the same way and keeps W exact */
	const bool qmv = small && rg_cuda_qmv_applies(NULL, dt, type, (const char *)ga.p + a_off,
						      gw.p, M, N, K);
	float *Wx = qmv ? malloc((size_t)N * K * sizeof(float)) : NULL;
	if (qmv) {
		memcpy(Wx, W, (size_t)N * K * sizeof(float));
		snprintf(name, sizeof(name), "qgemm %s qmv %s%s%s", qname(type),
			 plain ? "gemm" : act == RG_ACT_GELU ? "gelu(erf)" : rg_act_name(act),
			 !plain && with_bias ? "+bias" : "", a_off ? " A+off" : "");
	}
	/* the GPU multiplies the weight's values rounded to dt (what --weights dequantize uploads):
	 * so does the reference (K-quant values at fp16 / bf16 otherwise differ by a rounding of
	 * each weight, past the GEMM tolerance in 3 of ~1M elements: H200 run 2026-12-03 12:28) */
	round_to_dt(dt, W, (size_t)N * K);
	gbuf gb = with_bias ? gact_rand(dt, (size_t)N, -1, 1, &bias) : (gbuf){ 0 };
	gbuf go = galloc((size_t)M * N * es);
	const void *ap = (const char *)ga.p + a_off;
	const void *bp = with_bias ? gb.p : NULL;

	st = rg_op_prepare_qweight(g_gpu, gw.p, type, N, K);
	if (!op_ok(st, name, dt, "rg_op_prepare_qweight"))
		goto out_free;
	st = plain ? rg_op_gemm(g_gpu, ap, gw.p, go.p, M, N, K)
		   : rg_op_gemm_bias_act(g_gpu, ap, gw.p, bp, go.p, M, N, K, act);
	if (op_ok(st, name, dt, plain ? "rg_op_gemm" : "rg_op_gemm_bias_act")) {
		float *ref = nan_host((size_t)M * N);
		float *got = gread(&go, dt, (size_t)M * N);
		float *Aq = qmv ? q8_round_rows(A + a_skip, M, K) : NULL;
		if (plain)
			CK(rg_op_gemm(g_cpu, qmv ? Aq : A + a_skip, qmv ? Wx : W, ref, M, N, K));
		else
			CK(rg_op_gemm_bias_act(g_cpu, qmv ? Aq : A + a_skip, qmv ? Wx : W, bias, ref,
					       M, N, K, act));
		compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
		free(Aq);
		if (qmv) { /* the dequantize + cuBLASLt call below: against the unrounded A */
			if (plain)
				CK(rg_op_gemm(g_cpu, A + a_skip, W, ref, M, N, K));
			else
				CK(rg_op_gemm_bias_act(g_cpu, A + a_skip, W, bias, ref, M, N, K,
						       act));
		}
		if (small) { /* the same call on the dequantize + cuBLASLt path */
			gbuf go2 = galloc((size_t)M * N * es);
			rg_cuda_qgemv_set(false);
			st = plain ? rg_op_gemm(g_gpu, ap, gw.p, go2.p, M, N, K)
				   : rg_op_gemm_bias_act(g_gpu, ap, gw.p, bp, go2.p, M, N, K, act);
			rg_cuda_qgemv_set(true);
			snprintf(name2, sizeof(name2),
				 qmv ? "dequant+lt vs cpu" : "qgemv vs dequant+lt");
			if (op_ok(st, name2, dt, "rg_op_gemm* (qgemv off)")) {
				float *lt = gread(&go2, dt, (size_t)M * N);
				set_case("%s M=%d N=%d K=%d act %s%s", qname(type), M, N, K,
					 rg_act_name(act), with_bias ? " bias" : "");
				compare(name2, dt, qmv ? ref : got, lt, (size_t)M * N, a, r,
					gguard_check(&go2));
				free(lt);
			}
			gfree(&go2);
		}
		free(got);
		free(ref);
	}
out_free:
	g_case[0] = 0;
	free(qh); free(A); free(W); free(Wx); free(bias);
	gfree(&ga); gfree(&gw); gfree(&go);
	if (with_bias)
		gfree(&gb);
}

/* A quantized GEMM captured in a graph (M = 4: small-M kernel; M = 33: dequantize + cuBLASLt,
 * on the scratch) and replayed equals the eager call bitwise. */
static void test_qgemm_graph(rg_dtype dt, int type, int M)
{
	const char *op = "qgemm graph replay";
	const int N = 960, K = qtype_k(type) ? 768 : 576;
	const size_t es = rg_dtype_size(dt), n = (size_t)M * N * es;
	float *A, *W, *bias;
	size_t qbytes;
	rg_graph *g = NULL;
	rg_status st;

	set_case("%s M=%d", qname(type), M);
	unsigned char *qh = qblocks_rand(type, N, K, 0.07f, &W, &qbytes);
	gbuf ga = gact_rand(dt, (size_t)M * K, -1, 1, &A);
	gbuf gw = gqraw(qh, qbytes);
	gbuf gb = gact_rand(dt, (size_t)N, -1, 1, &bias);
	gbuf ge = galloc(n), gr = galloc(n);
	CK(rg_op_prepare_qweight(g_gpu, gw.p, type, N, K));
	CK(rg_op_gemm_bias_act(g_gpu, ga.p, gw.p, gb.p, ge.p, M, N, K, RG_ACT_SILU));
	st = rg_backend_capture_begin(g_gpu);
	if (op_ok(st, op, dt, "rg_backend_capture_begin")) {
		rg_status st2 = rg_op_gemm_bias_act(g_gpu, ga.p, gw.p, gb.p, gr.p, M, N, K,
						    RG_ACT_SILU);
		st = rg_backend_capture_end(g_gpu, &g);
		if (op_ok(st2, op, dt, "rg_op_gemm_bias_act (capture)") &&
		    op_ok(st, op, dt, "rg_backend_capture_end") &&
		    op_ok(rg_backend_graph_launch(g_gpu, g), op, dt, "rg_backend_graph_launch")) {
			unsigned char *he = malloc(n), *hr = malloc(n);
			CK(rg_backend_sync(g_gpu));
			CK(rg_backend_download(g_gpu, he, ge.p, n));
			CK(rg_backend_download(g_gpu, hr, gr.p, n));
			get_row(op, dt)->cases++;
			if (memcmp(he, hr, n) != 0)
				row_fail(op, dt, "replay differs from the eager call");
			free(he);
			free(hr);
		}
		rg_backend_graph_free(g_gpu, g);
	}
	g_case[0] = 0;
	free(qh); free(A); free(W); free(bias);
	gfree(&ga); gfree(&gw); gfree(&gb); gfree(&ge); gfree(&gr);
}

/* Contract checks: supported types, bad shapes, a second declaration, a GEMM with another shape,
 * and that freeing a declared weight forgets it (a plain weight at a reused address is read as
 * act values again). */
static void test_qgemm_errors(rg_dtype dt)
{
	const char *op = "qgemm contract";
	row *r = get_row(op, dt);
	const int N = 64, K = 128;
	float *W, *A, *Wf;
	size_t qbytes;
	void *p, *p2;
	int bad = 0;

	for (int t = 0; t < 16; t++) {
		const bool want = t == RG_GGUF_Q8_0 || t == RG_GGUF_Q4_0 || t == RG_GGUF_Q4_1 ||
				  t == RG_GGUF_Q4_K || t == RG_GGUF_Q6_K;
		bad += rg_backend_qtype_supported(g_gpu, t) != want;
	}
	unsigned char *qh = qblocks_rand(RG_GGUF_Q8_0, N, K, 0.1f, &W, &qbytes);
	gbuf gw = gqraw(qh, qbytes);
	gbuf ga = gact_rand(dt, (size_t)4 * K, -1, 1, &A);
	gbuf go = galloc((size_t)4 * N * rg_dtype_size(dt));
	bad += rg_op_prepare_qweight(g_gpu, gw.p, RG_GGUF_Q5_K, N, 256) != RG_ERR_UNSUPPORTED;
	bad += rg_op_prepare_qweight(g_gpu, gw.p, RG_GGUF_Q4_K, N, K) != RG_ERR_INVALID_INPUT;
	bad += rg_op_prepare_qweight(g_gpu, gw.p, RG_GGUF_Q8_0, N, K + 8) != RG_ERR_INVALID_INPUT;
	bad += rg_op_prepare_qweight(g_gpu, gw.p, RG_GGUF_Q8_0, N, K) != RG_OK;
	bad += rg_op_prepare_qweight(g_gpu, gw.p, RG_GGUF_Q8_0, N, K) != RG_ERR_INVALID_INPUT;
	bad += rg_op_gemm(g_gpu, ga.p, gw.p, go.p, 4, N / 2, K) != RG_ERR_INVALID_INPUT;
	bad += rg_op_gemm(g_gpu, ga.p, gw.p, go.p, 4, N, K) != RG_OK;
	p = gw.base;
	gfree(&gw);
	/* a plain act weight, likely at the freed address: must be read as act values */
	gbuf gw2;
	CK(rg_backend_alloc(g_gpu, (size_t)N * K * rg_dtype_size(dt), &p2));
	gw2.base = p2;
	gw2.p = p2;
	gw2.bytes = (size_t)N * K * rg_dtype_size(dt);
	Wf = gact_fill(dt, gw2.p, (size_t)N * K, -0.1f, 0.1f);
	if (rg_op_gemm(g_gpu, ga.p, gw2.p, go.p, 4, N, K) == RG_OK) {
		float *got = gread(&go, dt, (size_t)4 * N), *ref = nan_host((size_t)4 * N);
		double a, rt;
		tol_for(dt, &a, &rt);
		CK(rg_op_gemm(g_cpu, A, Wf, ref, 4, N, K));
		set_case("plain weight after a freed quantized one (same address: %s)",
			 gw2.base == p ? "yes" : "no");
		compare("qgemm freed weight forgotten", dt, got, ref, (size_t)4 * N, a, rt, 0);
		free(got);
		free(ref);
	} else {
		bad++;
	}
	r->cases++;
	if (bad)
		row_fail(op, dt, "%d contract checks failed", bad);
	free(qh); free(W); free(A); free(Wf);
	gfree(&gw2); gfree(&ga); gfree(&go);
}

/* M in {1, 3, 8, 16, 33, 300} on SmolLM2-135M's and Llama-3.2-1B's layer shapes (K-quants: those
 * with K % 256 == 0, and Llama-3.2-1B's), an LM head, every act with and without bias, the
 * misaligned-A fallback, graph replays. --quick: fewer shapes. */
static void test_qgemm_all(rg_dtype dt)
{
	static const int types[] = { RG_GGUF_Q8_0, RG_GGUF_Q4_0, RG_GGUF_Q4_1, RG_GGUF_Q4_K,
				     RG_GGUF_Q6_K };
	static const int ms[] = { 1, 3, 8, 16, 33, 300 };
	static const int shp32[][2] = { { 960, 576 }, { 576, 1536 }, { 3072, 576 }, { 3072, 2048 },
					{ 2048, 8192 }, { 40, 64 }, { 13, 32 } };
	static const int shp256[][2] = { { 576, 1536 }, { 3072, 2048 }, { 512, 2048 },
					 { 2048, 8192 }, { 1536, 768 }, { 40, 256 }, { 13, 512 } };
	const int ns = g_quick ? 2 : 7;

	for (int ti = 0; ti < 5; ti++) {
		const int type = types[ti];
		const int(*shp)[2] = qtype_k(type) ? shp256 : shp32;
		const int hk = qtype_k(type) ? 512 : 576; /* the LM head's K */
		for (int i = 0; i < (int)(sizeof(ms) / sizeof(ms[0])); i++) {
			for (int j = 0; j < ns; j++)
				if (ms[i] <= 33 || shp[j][0] * shp[j][1] <= 3072 * 576)
					test_qgemm(dt, type, ms[i], shp[j][0], shp[j][1],
						   RG_ACT_NONE, 0, 1, 0);
			for (int a = 0; a < 5; a++) {
				const int j = (i + a) % ns;
				test_qgemm(dt, type, ms[i], shp[j][0], shp[j][1], (rg_act)a, a % 2,
					   0, 0);
			}
		}
		/* an LM head: SmolLM2's 49152 rows (and Llama-3.2-1B's 128256 x 2048: fp16, not
		 * --quick) */
		test_qgemm(dt, type, 1, 49152, hk, RG_ACT_NONE, 0, 1, 0);
		test_qgemm(dt, type, 16, 49152, hk, RG_ACT_NONE, 0, 1, 0);
		if (!g_quick && dt == RG_DTYPE_F16)
			test_qgemm(dt, type, 3, 128256, 2048, RG_ACT_NONE, 0, 1, 0);
		test_qgemm(dt, type, 4, 960, qtype_k(type) ? 768 : 576, RG_ACT_NONE, 0, 1, 4);
		if (dt != RG_DTYPE_F32) {
			test_qgemm_graph(dt, type, 4);
			test_qgemm_graph(dt, type, 33);
		}
	}
	test_qgemm_errors(dt);
}

/* ---- the gated FFN's down projection with its gate folded in (rg_op_act_mul_gemm) ----
 * x (M, 2K) random, W dense (type < 0) or random blocks of a GGUF type; the fused call
 * (RAGGED_GLU_GEMV=1, set here: the small-M GEMV, or qmv_kernel, reading silu(gate) * up from
 * x) must equal the unfused one (RAGGED_GLU_GEMV=0: act_mul into the scratch, then the GEMM)
 * byte for byte, since both multiply the same act-rounded values in the same order; a dense W
 * is also checked against the CPU backend at the dtype's tolerance. M up to 17 (17: no small-M
 * path, unfused either way), both ways also inside a CUDA graph for M = 4. */
static void check_bitwise_equal(const char *name, rg_dtype dt, const void *batched_d,
				const void *alone_d, size_t n_elem, const char *label);

static void test_act_mul_gemm(rg_dtype dt, int type, int M, int N, int K, rg_act act)
{
	const size_t es = rg_dtype_size(dt);
	char name[48];
	float *X, *W = NULL;
	unsigned char *qh = NULL;
	size_t qbytes = 0;
	double a, r;

	tol_for(dt, &a, &r);
	snprintf(name, sizeof(name), "act_mul_gemm %s %s", type < 0 ? "dense" : qname(type),
		 rg_act_name(act));
	set_case("%s M=%d N=%d K=%d", type < 0 ? "dense" : qname(type), M, N, K);
	gbuf gx = gact_rand(dt, (size_t)M * 2 * K, -3, 3, &X);
	gbuf gw;
	if (type < 0) {
		const float ws = 1.7f / sqrtf((float)K);
		gw = gact_rand(dt, (size_t)N * K, -ws, ws, &W);
	} else {
		qh = qblocks_rand(type, N, K, 1.7f / sqrtf((float)K), &W, &qbytes);
		gw = gqraw(qh, qbytes);
		if (!op_ok(rg_op_prepare_qweight(g_gpu, gw.p, type, N, K), name, dt,
			   "rg_op_prepare_qweight"))
			goto out;
	}
	gbuf go = galloc((size_t)M * N * es), go2 = galloc((size_t)M * N * es);
	gbuf gs = galloc((size_t)M * K * es);
	(void)rg_tuning_set("RAGGED_GLU_GEMV", "1"); /* fused (off by default) */
	rg_status st = rg_op_act_mul_gemm(g_gpu, gx.p, gw.p, go.p, M, N, K, act, gs.p);
	if (op_ok(st, name, dt, "rg_op_act_mul_gemm")) {
		(void)rg_tuning_set("RAGGED_GLU_GEMV", "0");
		st = rg_op_act_mul_gemm(g_gpu, gx.p, gw.p, go2.p, M, N, K, act, gs.p);
		(void)rg_tuning_set("RAGGED_GLU_GEMV", "1");
		if (op_ok(st, "act_mul_gemm fused == unfused", dt, "rg_op_act_mul_gemm (off)"))
			check_bitwise_equal("act_mul_gemm fused == unfused", dt, go.p, go2.p,
					    (size_t)M * N, g_case);
		if (type < 0) {
			float *ref = nan_host((size_t)M * N), *scr = nan_host((size_t)M * K);
			float *got = gread(&go, dt, (size_t)M * N);
			CK(rg_op_act_mul_gemm(g_cpu, X, W, ref, M, N, K, act, scr));
			compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
			free(ref);
			free(scr);
			free(got);
		}
	}
	if (M == 4) { /* captured and replayed: equal to the eager fused call */
		rg_graph *g = NULL;
		const char *op = "act_mul_gemm graph replay";
		st = rg_backend_capture_begin(g_gpu);
		if (op_ok(st, op, dt, "rg_backend_capture_begin")) {
			rg_status st2 = rg_op_act_mul_gemm(g_gpu, gx.p, gw.p, go2.p, M, N, K, act,
							   gs.p);
			st = rg_backend_capture_end(g_gpu, &g);
			if (op_ok(st2, op, dt, "rg_op_act_mul_gemm (capture)") &&
			    op_ok(st, op, dt, "rg_backend_capture_end") &&
			    op_ok(rg_backend_graph_launch(g_gpu, g), op, dt,
				  "rg_backend_graph_launch")) {
				CK(rg_backend_sync(g_gpu));
				check_bitwise_equal(op, dt, go.p, go2.p, (size_t)M * N, g_case);
			}
			rg_backend_graph_free(g_gpu, g);
		}
	}
	(void)rg_tuning_set("RAGGED_GLU_GEMV", NULL);
	gfree(&go); gfree(&go2); gfree(&gs);
out:
	g_case[0] = 0;
	free(X); free(W); free(qh);
	gfree(&gx); gfree(&gw);
}

static void test_act_mul_gemm_all(rg_dtype dt)
{
	static const int ms[] = { 1, 2, 3, 4, 8, 9, 16, 17 };
	static const int shp[][2] = { { 576, 1536 }, { 2048, 8192 }, { 768, 3072 }, { 40, 64 } };
	static const int types[] = { -1, RG_GGUF_Q8_0, RG_GGUF_Q4_0, RG_GGUF_Q4_1, RG_GGUF_Q4_K,
				     RG_GGUF_Q6_K };

	if (dt == RG_DTYPE_F32)
		return;
	for (int ti = 0; ti < 6; ti++)
		for (int i = 0; i < (g_quick ? 3 : 8); i++)
			for (int j = 0; j < 4; j++) {
				const int N = shp[j][0], K = shp[j][1];
				if (types[ti] >= 0 && qtype_k(types[ti]) && K % 256)
					continue;
				test_act_mul_gemm(dt, types[ti], ms[i], N, K,
						  j == 3 ? RG_ACT_GELU_NEW : RG_ACT_SILU);
			}
}

static void test_bias_act(rg_dtype dt, const batch *b, rg_act act)
{
	const int M = b->n_tok, N = 1536;
	float *x, *bias = frand_host(N, -1, 1);
	double a, r;
	char name[48];

	tol_for(dt, &a, &r);
	gbuf gx = gact_rand(dt, (size_t)M * N, -3, 3, &x);
	gbuf gb = graw(bias, N * 4);
	CK(rg_op_bias_act(g_gpu, gx.p, gb.p, M, N, act));
	CK(rg_op_bias_act(g_cpu, x, bias, M, N, act));
	float *got = gread(&gx, dt, (size_t)M * N);
	snprintf(name, sizeof(name), "bias_act %s", rg_act_name(act));
	set_case("%s", b->name);
	compare(name, dt, got, x, (size_t)M * N, a, r, gguard_check(&gx));
	free(got); free(x); free(bias);
	gfree(&gx); gfree(&gb);
}

/* N = 32 * VEC * nv (384, 768, 1024) takes the warp-per-row kernel, other N (100, 2312) the block
 * kernel. with_bias 0 passes bias NULL (the model's case: the bias came with the GEMM epilogue).
 * alias: 0 separate out, 1 out = residual (the model's case), 2 out = x. */
static void test_bias_res_ln(rg_dtype dt, const batch *b, int N, int with_bias, int alias)
{
	const int M = b->n_tok;
	float *x, *res, *bias = with_bias ? frand_host(N, -1, 1) : NULL,
			*gam = frand_host(N, 0.5f, 1.5f), *bet = frand_host(N, -0.5f, 0.5f);
	double a, r;
	char name[48];
	static const char *an[] = { "out separate", "out=res", "out=x" };
	rg_status st;

	tol_for(dt, &a, &r);
	snprintf(name, sizeof(name), "%s N=%d%s", with_bias ? "bias_res_ln" : "res_ln", N,
		 with_bias ? "" : " nobias");
	set_case("%s %s", b->name, an[alias]);
	gbuf gx = gact_rand(dt, (size_t)M * N, -2, 2, &x);
	gbuf gr = gact_rand(dt, (size_t)M * N, -2, 2, &res);
	gbuf gb = with_bias ? graw(bias, N * 4) : (gbuf){ 0 };
	gbuf gg = graw(gam, N * 4), gbe = graw(bet, N * 4);
	gbuf go = alias ? (gbuf){ 0 } : galloc((size_t)M * N * rg_dtype_size(dt));
	gbuf *out = alias == 0 ? &go : alias == 1 ? &gr : &gx;
	st = rg_op_bias_residual_layernorm(g_gpu, gx.p, with_bias ? gb.p : NULL, gr.p, gg.p, gbe.p,
					   1e-12f, M, N, out->p);
	if (op_ok(st, name, dt, "rg_op_bias_residual_layernorm")) {
		float *ref = nan_host((size_t)M * N);
		CK(rg_op_bias_residual_layernorm(g_cpu, x, bias, res, gam, bet, 1e-12f, M, N, ref));
		float *got = gread(out, dt, (size_t)M * N);
		compare(name, dt, got, ref, (size_t)M * N, 2 * a, r, gguard_check(out));
		free(got);
		free(ref);
	}
	g_case[0] = 0;
	free(x); free(res); free(bias); free(gam); free(bet);
	gfree(&gx); gfree(&gr); gfree(&gg); gfree(&gbe);
	if (with_bias)
		gfree(&gb);
	if (!alias)
		gfree(&go);
}

/* Segment ids for a masked mode: each sequence is cut into runs of random length with their own id;
 * about one run in five is padding (-1). */
static void make_seg(const batch *b, int32_t *seg)
{
	int id = 0;
	for (int s = 0; s < b->n_seq; s++) {
		int t = b->cu[s];
		while (t < b->cu[s + 1]) {
			int run = 1 + irand(40), v = irand(5) == 0 ? -1 : id++;
			for (int k = 0; k < run && t < b->cu[s + 1]; k++)
				seg[t++] = v;
		}
	}
}

/* rel_max < 0: no relative position bias; else a random (heads, 2 rel_max + 1) table (MPNet's),
 * the same on both backends, so the CUDA kernels' indexing by clamped key - query distance is
 * checked against the CPU twin: the CUDA-core kernel (fp32, other head_dims) and the tensor-core
 * kernel (fp16/bf16 with head_dim 32/64/128, both query-tile widths). */
static void test_attention(rg_dtype dt, const batch *b, int heads, int D, int with_seg,
			   int rel_max)
{
	const int H = heads * D, T = b->n_tok;
	const float scale = 1.f / sqrtf((float)D);
	const size_t nrb = rel_max >= 0 ? (size_t)heads * (2 * rel_max + 1) : 0;
	float *qkv, *rb = nrb ? frand_host(nrb, -2, 2) : NULL;
	int32_t *seg = with_seg ? malloc(T * 4) : NULL;
	double a, r;
	char name[64];

	tol_for(dt, &a, &r);
	/* |q.k| * scale reaches a few units: peaked softmax, so the online rescaling matters */
	gbuf gq = gact_rand(dt, (size_t)T * 3 * H, -2, 2, &qkv);
	gbuf gcu = graw(b->cu, (b->n_seq + 1) * 4);
	gbuf gs = { 0 };
	if (seg) {
		make_seg(b, seg);
		gs = graw(seg, T * 4);
	}
	gbuf grb = { 0 };
	if (rb)
		grb = graw(rb, nrb * 4);
	gbuf go = galloc((size_t)T * H * rg_dtype_size(dt));
	CK(attn_op(g_gpu, gq.p, gcu.p, b->cu, b->n_seq, b->max_len, heads, D, scale,
			   seg ? gs.p : NULL, rb ? grb.p : NULL, rel_max, NULL, go.p));
	float *ref = nan_host((size_t)T * H);
	CK(attn_op(g_cpu, qkv, b->cu, b->cu, b->n_seq, b->max_len, heads, D, scale, seg,
			   rb, rel_max, NULL, ref));
	float *got = gread(&go, dt, (size_t)T * H);
	snprintf(name, sizeof(name), "attention %dx%d%s%s", heads, D, seg ? " seg" : "",
		 rb ? " relbias" : "");
	set_case("%s rel_max %d", b->name, rel_max);
	compare(name, dt, got, ref, (size_t)T * H, a, r, gguard_check(&go));
	free(got); free(ref); free(qkv); free(seg); free(rb);
	gfree(&gq); gfree(&gcu); gfree(&go);
	if (with_seg)
		gfree(&gs);
	if (nrb)
		gfree(&grb);
}

/* DeBERTa's index tables (rg_attn_disent.idx, 2 R + 1 entries over distances query - key in
 * [-R, R]), as test inputs:
 *  IDX_WINDOW: W / 2 columns each side of distance 0, clamped to the table (v2 without buckets);
 *  IDX_LOG:    deberta-v3's log buckets (transformers' make_log_bucket_position with
 *              position_buckets = W / 2 and max_position = R, plus att_span = W / 2, clamped to
 *              the table), written out here independently of src/model/bert.c;
 *  IDX_RANDOM: any column for any distance, so no kernel may assume a monotone map. */
enum { IDX_WINDOW, IDX_LOG, IDX_RANDOM };
static const char *idx_name[] = { "window", "log", "random" };

static void make_dis_idx(int kind, int W, int R, int32_t *idx)
{
	const int span = W / 2, mid = span / 2;

	for (int d = -R; d <= R; d++) {
		int e = d;
		if (kind == IDX_LOG && mid > 0) {
			const int a = d < mid && d > -mid ? mid - 1 : abs(d);
			if (a > mid) {
				const double lp = ceil(log((double)a / mid) / log((double)(R - 1) / mid) *
						       (mid - 1)) + mid;
				e = (d < 0 ? -1 : 1) * (int)lp;
			}
		}
		e += span;
		idx[R + d] = kind == IDX_RANDOM ? irand(W) : e < 0 ? 0 : e > W - 1 ? W - 1 : e;
	}
}

/* The attention kernel that takes DeBERTa's terms (attention.cu's dispatch): the tensor-core one
 * for fp16 / bf16 with head_dim 32 or 64, unless RAGGED_DEBERTA_TC=0. */
static const char *disent_path(rg_dtype dt, int D, int old_path)
{
	if (old_path)
		return "RAGGED_DEBERTA_TC=0";
	return dt != RG_DTYPE_F32 && (D == 32 || D == 64) ? "tc" : "cuda-core";
}

/* DeBERTa's disentangled terms: rg_op_rel_tables (c2p from Q and pos_key, p2c from K and
 * pos_query) and rg_op_attention with them, CUDA against the CPU twin on the same rounded inputs;
 * which: 1 c2p, 2 p2c, 3 both; idx of the given kind (make_dis_idx) over distances up to R (R <
 * the longest sequence: clamped distances too). The GPU tables (cuBLASLt, act dtype) feed the
 * GPU attention, the CPU tables (f32) the CPU one. old_path: both run with RAGGED_DEBERTA_TC=0
 * (the CUDA-core tables kernel and the CUDA-core DIS attention), rows named so; otherwise the
 * attention row names the kernel that should take the case (disent_path). */
static void test_attention_disent(rg_dtype dt, const batch *b, int heads, int D, int W, int R,
				  int which, int idx_kind, int old_path)
{
	const int H = heads * D, T = b->n_tok;
	const size_t ntab = (size_t)T * heads * W;
	const float scale = 1.f / sqrtf((float)(D * 3));
	int32_t *idx = malloc((2 * (size_t)R + 1) * 4);
	float *qkv, *pk, *pq;
	double a, r;
	char name[80];

	make_dis_idx(idx_kind, W, R, idx);
	tol_for(dt, &a, &r);
	gbuf gq = gact_rand(dt, (size_t)T * 3 * H, -2, 2, &qkv);
	gbuf gpk = gact_rand(dt, (size_t)W * H, -1, 1, &pk);
	gbuf gpq = gact_rand(dt, (size_t)W * H, -1, 1, &pq);
	gbuf gi = graw(idx, (2 * (size_t)R + 1) * 4);
	gbuf gcu = graw(b->cu, (b->n_seq + 1) * 4);
	gbuf gc = galloc(ntab * rg_dtype_size(dt)), gp = galloc(ntab * rg_dtype_size(dt));
	gbuf go = galloc((size_t)T * H * rg_dtype_size(dt));
	float *c2p = nan_host(ntab), *p2c = nan_host(ntab), *ref = nan_host((size_t)T * H);
	const rg_attn_disent gdis = {which & 1 ? gc.p : NULL, which & 2 ? gp.p : NULL, gi.p, W, R};
	const rg_attn_disent cdis = {which & 1 ? c2p : NULL, which & 2 ? p2c : NULL, idx, W, R};

	if (old_path)
		setenv("RAGGED_DEBERTA_TC", "0", 1);
	CK(rg_op_rel_tables(g_gpu, gq.p, T, heads, D, which & 1 ? gpk.p : NULL,
			    which & 2 ? gpq.p : NULL, W, scale, gc.p, gp.p));
	CK(attn_op(g_gpu, gq.p, gcu.p, b->cu, b->n_seq, b->max_len, heads, D, scale, NULL,
			   NULL, 0, &gdis, go.p));
	CK(rg_backend_sync(g_gpu));
	if (old_path)
		unsetenv("RAGGED_DEBERTA_TC");
	CK(rg_op_rel_tables(g_cpu, qkv, T, heads, D, which & 1 ? pk : NULL, which & 2 ? pq : NULL,
			    W, scale, c2p, p2c));
	CK(attn_op(g_cpu, qkv, b->cu, b->cu, b->n_seq, b->max_len, heads, D, scale, NULL,
			   NULL, 0, &cdis, ref));
	for (int k = 0; k < 2; k++) {
		if (!(which & (1 << k)))
			continue;
		float *got = gread(k ? &gp : &gc, dt, ntab);
		snprintf(name, sizeof(name), "rel_tables %dx%d %s%s", heads, D, k ? "p2c" : "c2p",
			 old_path ? " RAGGED_DEBERTA_TC=0" : "");
		set_case("%s W %d R %d which %d", b->name, W, R, which);
		compare(name, dt, got, k ? p2c : c2p, ntab, a, r, gguard_check(k ? &gp : &gc));
		free(got);
	}
	float *got = gread(&go, dt, (size_t)T * H);
	snprintf(name, sizeof(name), "attention %dx%d disent. %s", heads, D,
		 disent_path(dt, D, old_path));
	set_case("%s W %d R %d which %d idx %s", b->name, W, R, which, idx_name[idx_kind]);
	compare(name, dt, got, ref, (size_t)T * H, a, r, gguard_check(&go));
	free(got); free(ref); free(c2p); free(p2c); free(qkv); free(pk); free(pq); free(idx);
	gfree(&gq); gfree(&gpk); gfree(&gpq); gfree(&gi); gfree(&gcu); gfree(&gc); gfree(&gp);
	gfree(&go);
}

/* Head shapes of the DeBERTa cases: 12 x 32 and 6 x 64 (tensor cores in fp16 / bf16), 3 x 128
 * (the CUDA-core kernel in every dtype), 5 x 40 and 4 x 8 (no tensor-core head_dim). */
static const int dis_att[][2] = { { 12, 32 }, { 6, 64 }, { 3, 128 }, { 5, 40 }, { 4, 8 } };

/* The DeBERTa cases of one of the short ragged batches: v3's width 512 with every distance in
 * the window, and width 16 with most distances clamped (each term alone). */
static void test_disent_batch(rg_dtype dt, const batch *b)
{
	for (int a = 0; a < (g_quick ? 2 : 5); a++) /* --quick: the sanitizers' runs */
		for (int w = 0; w < 3; w++)
			test_attention_disent(dt, b, dis_att[a][0], dis_att[a][1], w ? 16 : 512,
					      w ? 40 : 512, w == 2 ? 1 + (a & 1) : 3, IDX_WINDOW, 0);
}

/* Batch invariance: the n_elem act elements of dtype dt at batched_d (a sequence's rows of a
 * batched result) and at alone_d (the same sequence run alone), both device memory, must be
 * equal bitwise. Row `name` gains one case of n_elem elements; bad counts the differing bytes. */
static void check_bitwise_equal(const char *name, rg_dtype dt, const void *batched_d,
				const void *alone_d, size_t n_elem, const char *label)
{
	const size_t bytes = n_elem * rg_dtype_size(dt);
	unsigned char *h = malloc(bytes), *h1 = malloc(bytes);
	long diff = 0;

	CK(rg_backend_download(g_gpu, h, batched_d, bytes));
	CK(rg_backend_download(g_gpu, h1, alone_d, bytes));
	for (size_t i = 0; i < bytes; i++)
		diff += h[i] != h1[i];
	row *r = get_row(name, dt);
	r->cases++;
	r->n += (long)n_elem;
	r->bad += diff;
	if (diff) {
		fprintf(stderr, "  %s %s: %ld bytes differ%s%s%s\n", name, dt_name(dt), diff,
			label ? " [" : "", label ? label : "", label ? "]" : "");
		g_fail = 1;
	}
	free(h);
	free(h1);
}

/* DeBERTa's terms on long ragged lengths around the 64-query / 64-key tiles of the tensor-core
 * kernel ({500, 65, 63, 130, 1, 64, 5}: several tiles, partial last tiles, a one-token and a
 * five-token sequence), deberta-v3-base's 12 x 64 heads with its log-bucketed index (width 512,
 * R 512) for c2p alone, p2c alone and both; the same both ways with RAGGED_DEBERTA_TC=0; 12 x 64
 * with most distances clamped (width 16, R 40) and with a random index (width 64, R 100); 4 x 32
 * (tensor cores) and 2 x 128 (the CUDA-core fallback) with both terms. */
static void test_disent_long(rg_dtype dt)
{
	static const int lens[] = { 500, 65, 63, 130, 1, 64, 5 };
	const batch b = make_batch(lens, 7);

	for (int which = 1; which <= 3; which++)
		test_attention_disent(dt, &b, 12, 64, 512, 512, which, IDX_LOG, 0);
	test_attention_disent(dt, &b, 12, 64, 512, 512, 3, IDX_LOG, 1);
	test_attention_disent(dt, &b, 12, 64, 16, 40, 3, IDX_WINDOW, 0);
	test_attention_disent(dt, &b, 12, 64, 64, 100, 3, IDX_RANDOM, 0);
	test_attention_disent(dt, &b, 4, 32, 512, 512, 3, IDX_LOG, 0);
	test_attention_disent(dt, &b, 2, 128, 512, 512, 3, IDX_LOG, 0);
}

/* The tensor-core kernel's table windows (attention_tc.cu, tc_dis_window) at their edges, 12 x 64
 * heads, both terms: lengths on either side of 128 and 256 and the longest, 512 (with the long
 * batch above: 1, 5, 63, 64, 65, 130, 500), so windows at the ends of sequences and of the tables;
 * deberta-v3's log buckets (width 512, R 512: exact distances within 128, a sequence longer than
 * that) and the exact index (width 512, R 512: distances past 255 clamped to the table's end
 * columns); log buckets over R 200 (between distances 128 and 200 a bucket step is more than one
 * column, so some tiles need more columns than a window holds and are gathered, beside windowed
 * tiles of the same CTA; longer distances clamped); c2p alone and p2c alone through windows.
 * (test_disent_long's random index takes the gathered fallback for every tile.) */
static void test_disent_edges(rg_dtype dt)
{
	static const int lens[] = { 512, 257, 256, 255, 129, 128, 127 };
	const batch b = make_batch(lens, 7);

	test_attention_disent(dt, &b, 12, 64, 512, 512, 3, IDX_LOG, 0);
	test_attention_disent(dt, &b, 12, 64, 512, 512, 3, IDX_WINDOW, 0);
	test_attention_disent(dt, &b, 12, 64, 512, 200, 3, IDX_LOG, 0);
	test_attention_disent(dt, &b, 12, 64, 512, 512, 1, IDX_WINDOW, 0);
	test_attention_disent(dt, &b, 12, 64, 512, 512, 2, IDX_LOG, 0);
}

/* Batch invariance of the attention with DeBERTa's terms: the 130-token sequence of the long
 * batch alone (its rows of qkv and of the batch's tables) equals, bitwise, its rows of the
 * batched result (12 x 64: tensor cores in fp16 / bf16). */
static void test_disent_invariance(rg_dtype dt)
{
	static const int lens[] = { 500, 65, 63, 130, 1, 64, 5 };
	const batch b = make_batch(lens, 7);
	const int heads = 12, D = 64, H = heads * D, W = 512, R = 512;
	const int es = (int)rg_dtype_size(dt), s = 3, t0 = b.cu[s], L = lens[s];
	const size_t ntab = (size_t)b.n_tok * heads * W, trow = (size_t)heads * W * es;
	const float scale = 1.f / sqrtf((float)(D * 3));
	int32_t *idx = malloc((2 * (size_t)R + 1) * 4), cu1[2] = { 0, L };
	float *qkv, *pk, *pq;

	make_dis_idx(IDX_LOG, W, R, idx);
	gbuf gq = gact_rand(dt, (size_t)b.n_tok * 3 * H, -2, 2, &qkv);
	gbuf gpk = gact_rand(dt, (size_t)W * H, -1, 1, &pk);
	gbuf gpq = gact_rand(dt, (size_t)W * H, -1, 1, &pq);
	gbuf gi = graw(idx, (2 * (size_t)R + 1) * 4);
	gbuf gcu = graw(b.cu, (b.n_seq + 1) * 4), gcu1 = graw(cu1, 8);
	gbuf gc = galloc(ntab * es), gp = galloc(ntab * es);
	gbuf go = galloc((size_t)b.n_tok * H * es), go1 = galloc((size_t)L * H * es);
	const rg_attn_disent dis = {gc.p, gp.p, gi.p, W, R};
	const rg_attn_disent dis1 = {(char *)gc.p + t0 * trow, (char *)gp.p + t0 * trow, gi.p, W, R};

	CK(rg_op_rel_tables(g_gpu, gq.p, b.n_tok, heads, D, gpk.p, gpq.p, W, scale, gc.p, gp.p));
	CK(attn_op(g_gpu, gq.p, gcu.p, b.cu, b.n_seq, b.max_len, heads, D, scale, NULL, NULL, 0,
		   &dis, go.p));
	CK(attn_op(g_gpu, (char *)gq.p + (size_t)t0 * 3 * H * es, gcu1.p, cu1, 1, L, heads, D,
		   scale, NULL, NULL, 0, &dis1, go1.p));
	CK(rg_backend_sync(g_gpu));
	check_bitwise_equal("attention disent. alone==batched", dt,
			    (char *)go.p + (size_t)t0 * H * es, go1.p, (size_t)L * H, NULL);
	free(qkv); free(pk); free(pq); free(idx);
	gfree(&gq); gfree(&gpk); gfree(&gpq); gfree(&gi); gfree(&gcu); gfree(&gcu1); gfree(&gc);
	gfree(&gp); gfree(&go); gfree(&go1);
}

/* H a multiple of 16 bytes of elements (384, 768) takes the 16-byte column groups, other H (99)
 * one element per thread. Sequences of length 0 must give zero rows (exactly) and leave the
 * device error flag clear: rg_backend_sync returns RG_OK. */
static void test_pool(rg_dtype dt, const batch *b, int H, rg_pooling mode, bool norm)
{
	const int T = b->n_tok;
	float *x;
	static const char *mn[] = { "mean", "cls", "max" };
	char name[48];
	rg_status st;

	snprintf(name, sizeof(name), "pool %s%s H=%d", mn[mode], norm ? " +l2" : "", H);
	set_case("%s", b->name);
	gbuf gx = gact_rand(dt, (size_t)T * H, -2, 2, &x);
	gbuf gcu = graw(b->cu, (b->n_seq + 1) * 4);
	gbuf go = galloc((size_t)b->n_seq * H * 4);
	st = rg_op_pool(g_gpu, gx.p, gcu.p, b->n_seq, H, mode, norm, go.p);
	if (op_ok(st, name, dt, "rg_op_pool")) {
		st = rg_backend_sync(g_gpu);
		if (st != RG_OK)
			row_fail(name, dt, "rg_backend_sync after pool returned %s: %s",
				 rg_status_name(st), rg_last_error());
		float *ref = nan_host((size_t)b->n_seq * H);
		CK(rg_op_pool(g_cpu, x, b->cu, b->n_seq, H, mode, norm, ref));
		float *got = gread(&go, RG_DTYPE_F32, (size_t)b->n_seq * H);
		for (int s = 0; s < b->n_seq; s++) {
			long nz = 0;
			if (b->cu[s + 1] != b->cu[s])
				continue;
			for (int i = 0; i < H; i++)
				nz += got[(size_t)s * H + i] != 0.f;
			if (nz)
				row_fail(name, dt, "sequence %d has length 0 but %ld nonzero outputs",
					 s, nz);
		}
		/* the pooled output is float32 for every dtype: f32 tolerance */
		compare(name, dt, got, ref, (size_t)b->n_seq * H, 1e-6, 1e-5, gguard_check(&go));
		free(got);
		free(ref);
	}
	g_case[0] = 0;
	free(x);
	gfree(&gx); gfree(&gcu); gfree(&go);
}

static void test_gather(rg_dtype dt, const batch *b)
{
	const int H = 384, T = b->n_tok;
	float *src;
	int32_t *idx = malloc(T * 4);

	for (int i = 0; i < T; i++)
		idx[i] = i;
	for (int i = T - 1; i > 0; i--) {
		int j = irand(i + 1), t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
	gbuf gs = gact_rand(dt, (size_t)T * H, -2, 2, &src);
	gbuf gi = graw(idx, T * 4);
	gbuf go = galloc((size_t)T * H * rg_dtype_size(dt));
	CK(rg_op_gather_rows(g_gpu, gs.p, gi.p, T, H, go.p));
	float *ref = nan_host((size_t)T * H);
	CK(rg_op_gather_rows(g_cpu, src, idx, T, H, ref));
	float *got = gread(&go, dt, (size_t)T * H);
	set_case("%s", b->name);
	compare("gather_rows (exact)", dt, got, ref, (size_t)T * H, 0, 0, gguard_check(&go));
	free(got); free(ref); free(src); free(idx);
	gfree(&gs); gfree(&gi); gfree(&go);
}

/* A sequence attended alone must give bitwise the same rows as inside a batch (no cross-sequence
 * dependence in the kernel). */
static void test_attention_batch_invariance(rg_dtype dt)
{
	static const int lens[] = { 128, 1, 64, 33 };
	batch b = make_batch(lens, 4);
	const int heads = 12, D = 32, H = heads * D, es = (int)rg_dtype_size(dt);
	const int s = 2, t0 = b.cu[s], L = lens[s];
	float *qkv;
	int32_t cu1[2] = { 0, L };

	gbuf gq = gact_rand(dt, (size_t)b.n_tok * 3 * H, -2, 2, &qkv);
	gbuf gcu = graw(b.cu, 5 * 4), gcu1 = graw(cu1, 8);
	gbuf go = galloc((size_t)b.n_tok * H * es), go1 = galloc((size_t)L * H * es);
	CK(attn_op(g_gpu, gq.p, gcu.p, b.cu, 4, b.max_len, heads, D, 0.17f, NULL, NULL, 0,
			   NULL, go.p));
	CK(attn_op(g_gpu, (char *)gq.p + (size_t)t0 * 3 * H * es, gcu1.p, cu1, 1, L, heads,
			   D, 0.17f, NULL, NULL, 0, NULL, go1.p));
	CK(rg_backend_sync(g_gpu));
	check_bitwise_equal("attention alone==batched", dt, (char *)go.p + (size_t)t0 * H * es,
			    go1.p, (size_t)L * H, NULL);
	free(qkv);
	gfree(&gq); gfree(&gcu); gfree(&gcu1); gfree(&go); gfree(&go1);
}

/* ---- Hopper's wgmma attention (src/ops/cuda/attention_wgmma.cu) ---- */
static int g_wg_cases, g_wg_taken; /* cases run with the path forced on; of them, launched it */

/* One packed batch of n sequences (lens; a length may be 0) through rg_op_attention three ways:
 * the wgmma kernel (forced on through the test hook, nwg warpgroups per CTA: 0 = the launcher's
 * choice), the mma.sync kernel (forced off) and the CPU twin; the wgmma output is compared with
 * the CPU's at the dtype's tolerance and with the mma.sync one at twice it (each is within one
 * tolerance of the reference). max_len may exceed the longest length (a graph bucket's). With
 * alone >= 0, sequence `alone` is also run by itself and must equal its rows in the batch bitwise. */
static void attn_wgmma_case(rg_dtype dt, const char *label, const int *lens, int n, int max_len,
			    int heads, int D, int nwg, int alone)
{
	const int H = heads * D, es = (int)rg_dtype_size(dt);
	const float scale = 1.f / sqrtf((float)D);
	int32_t *cu = malloc((size_t)(n + 1) * 4);
	double a, r;
	char name[48];

	cu[0] = 0;
	for (int i = 0; i < n; i++) {
		cu[i + 1] = cu[i] + lens[i];
		if (lens[i] > max_len)
			max_len = lens[i];
	}
	const int T = cu[n];
	tol_for(dt, &a, &r);
	float *qkv;
	gbuf gq = gact_rand(dt, (size_t)T * 3 * H, -2, 2, &qkv);
	gbuf gcu = graw(cu, (size_t)(n + 1) * 4);
	gbuf gw = galloc((size_t)T * H * es), gm = galloc((size_t)T * H * es);
	const unsigned long before = rg_cuda_attention_wgmma_launches();
	snprintf(name, sizeof(name), "attention wgmma %dx%d vs cpu", heads, D);
	set_case("%s (max_len %d, warpgroups %d)", label, max_len, nwg);
	rg_cuda_attention_wgmma_set(1, nwg);
	int ok = op_ok(attn_op(g_gpu, gq.p, gcu.p, cu, n, max_len, heads, D, scale, NULL, NULL, 0,
			       NULL, gw.p), name, dt, "rg_op_attention (wgmma on)");
	const int taken = rg_cuda_attention_wgmma_launches() > before;
	rg_cuda_attention_wgmma_set(0, 0);
	ok = ok && op_ok(attn_op(g_gpu, gq.p, gcu.p, cu, n, max_len, heads, D, scale, NULL, NULL,
				 0, NULL, gm.p), name, dt, "rg_op_attention (wgmma off)");
	g_wg_cases++;
	g_wg_taken += taken;
	if (ok) {
		float *ref = nan_host((size_t)T * H);
		CK(attn_op(g_cpu, qkv, cu, cu, n, max_len, heads, D, scale, NULL, NULL, 0, NULL,
			   ref));
		float *gotw = gread(&gw, dt, (size_t)T * H), *gotm = gread(&gm, dt, (size_t)T * H);
		set_case("%s (max_len %d, warpgroups %d)", label, max_len, nwg);
		compare(name, dt, gotw, ref, (size_t)T * H, a, r, gguard_check(&gw));
		snprintf(name, sizeof(name), "attention wgmma %dx%d vs mma.sync", heads, D);
		set_case("%s (max_len %d, warpgroups %d)", label, max_len, nwg);
		compare(name, dt, gotw, gotm, (size_t)T * H, 2 * a, 2 * r, gguard_check(&gm));
		free(ref); free(gotw); free(gotm);
	}
	if (ok && alone >= 0 && lens[alone] > 0) {
		const int t0 = cu[alone], L = lens[alone];
		int32_t cu1[2] = { 0, L };
		gbuf gcu1 = graw(cu1, 8), go1 = galloc((size_t)L * H * es);
		rg_cuda_attention_wgmma_set(1, 0);
		CK(attn_op(g_gpu, (char *)gq.p + (size_t)t0 * 3 * H * es, gcu1.p, cu1, 1, L, heads,
			   D, scale, NULL, NULL, 0, NULL, go1.p));
		rg_cuda_attention_wgmma_set(1, nwg);
		CK(attn_op(g_gpu, gq.p, gcu.p, cu, n, max_len, heads, D, scale, NULL, NULL, 0, NULL,
			   gw.p));
		CK(rg_backend_sync(g_gpu));
		check_bitwise_equal("attention wgmma alone==batched", dt,
				    (char *)gw.p + (size_t)t0 * H * es, go1.p, (size_t)L * H, label);
		gfree(&gcu1); gfree(&go1);
	}
	rg_cuda_attention_wgmma_set(-1, 0);
	free(cu); free(qkv);
	gfree(&gq); gfree(&gcu); gfree(&gw); gfree(&gm);
}

/* The wgmma kernel (fp16 / bf16, head_dim 64 as BERT-base's 12 x 64, and 128 as 4 x 128) on each
 * of the lengths {1, 2, 15, 63, 64, 65, 127, 128, 129, 500, 512, 1000} alone (around the 64-query
 * and 64/128-key tiles, both CTA widths), and on mixed batches: all of them together, with
 * zero-length sequences, with max_seqlen past the longest (a graph bucket), and 40 lengths drawn
 * from [5, 500] (the benchmark's distribution). Only on a device and build that have the path
 * (Hopper, sm_90a cubin); elsewhere the cases still run (both calls take mma.sync) and a note
 * says so. */
static void test_attention_wgmma(rg_dtype dt)
{
	static const int single[] = { 1, 2, 15, 63, 64, 65, 127, 128, 129, 500, 512, 1000 };
	static const int mixed[] = { 1000, 1, 65, 512, 2, 129, 63, 15, 127, 128, 64, 500 };
	static const int zeros[] = { 0, 65, 0, 1, 300, 0 };
	static const int hd[][2] = { { 12, 64 }, { 4, 128 } };
	int rnd[40];
	char label[64];

	for (int i = 0; i < 40; i++)
		rnd[i] = 5 + irand(496);
	for (int d = 0; d < 2; d++) {
		const int heads = hd[d][0], D = hd[d][1];
		for (int i = 0; i < 12; i++)
			for (int w = 1; w <= 2; w++) {
				if (g_quick && i != 0 && i != 5 && i != 8)
					continue; /* --quick (sanitizers): 1, 65, 129 */
				snprintf(label, sizeof(label), "wgmma lens {%d}", single[i]);
				attn_wgmma_case(dt, label, &single[i], 1, 0, heads, D, w, -1);
			}
		for (int w = 0; w <= 2; w++) {
			if (!g_quick)
				attn_wgmma_case(dt, "wgmma mixed 12", mixed, 12, 0, heads, D, w, 3);
			attn_wgmma_case(dt, "wgmma zero-length", zeros, 6, 0, heads, D, w, 4);
			attn_wgmma_case(dt, "wgmma bucket max_len 700", zeros, 6, 700, heads, D, w, -1);
			if (!g_quick)
				attn_wgmma_case(dt, "wgmma 40 x [5,500]", rnd, 40, 0, heads, D, w, 7);
		}
	}
}

/* ---- error paths ---- */

static void expect(int ok, const char *what)
{
	g_err_checks++;
	if (!ok) {
		g_err_fail++;
		g_fail = 1;
	}
	printf("  [%s] %s\n", ok ? "ok" : "FAIL", what);
}

static void test_errors(void)
{
	void *p = NULL;
	size_t used = 0, total = 0;
	rg_status st;
	int32_t cu[3] = { 0, 10, 30 }, neg = -1;

	printf("error paths:\n");
	if (!g_skip_oom) {
		st = rg_backend_alloc(g_gpu, (size_t)1 << 50, &p);
		expect(st == RG_ERR_OOM && p == NULL && rg_last_error()[0] != 0,
		       "1 PiB allocation -> RG_ERR_OOM with a message");
	}
	st = rg_backend_mem_info(g_gpu, &used, &total);
	expect(st == RG_OK && used > 0 && total >= used, "mem_info after OOM reports used <= total");
	gbuf q = galloc(30 * 3 * 256 * 2), o = galloc(30 * 256 * 2), gcu = graw(cu, 12);
	st = attn_op(g_gpu, q.p, gcu.p, cu, 2, 20, 1, 256, 0.1f, NULL, NULL, 0, NULL, o.p);
	expect(st == RG_ERR_UNSUPPORTED, "attention head_dim 256 -> RG_ERR_UNSUPPORTED");
	st = attn_op(g_gpu, q.p, gcu.p, cu, 2, 10, 4, 64, 0.1f, NULL, NULL, 0, NULL, o.p);
	expect(st == RG_ERR_INVALID_INPUT, "attention length 20 > max_seqlen 10 -> INVALID_INPUT");
	st = attn_op(g_gpu, q.p, gcu.p, cu, 2, 20, 4, 64, 0.1f, NULL, (const float *)o.p,
			     -1, NULL, o.p);
	expect(st == RG_ERR_INVALID_INPUT, "attention bias table with rel_max -1 -> INVALID_INPUT");
	gbuf gi = graw(&neg, 4);
	st = rg_op_gather_rows(g_gpu, q.p, gi.p, 1, 64, o.p);
	expect(st == RG_OK, "gather with index -1 launches (the kernel reports through the flag)");
	st = rg_backend_sync(g_gpu);
	expect(st == RG_ERR_INVALID_INPUT, "sync after index -1 -> RG_ERR_INVALID_INPUT");
	st = rg_backend_sync(g_gpu);
	expect(st == RG_OK, "the flag is cleared: next sync OK");
	gfree(&q); gfree(&o); gfree(&gcu); gfree(&gi);

	/* pool: a negative length is flagged on the device and pools to a zero row */
	{
		const int H = 64;
		int32_t pcu[3] = { 0, 5, 3 };
		float *x, got[2 * 64];
		int nz = 0;
		gbuf gx = gact_rand(g_dt, 5 * H, -1, 1, &x), gpc = graw(pcu, 12),
		     gpo = galloc(2 * H * 4);
		st = rg_op_pool(g_gpu, gx.p, gpc.p, 2, H, RG_POOL_MEAN, true, gpo.p);
		expect(st == RG_OK, "pool with a negative length launches (the kernel flags it)");
		st = rg_backend_sync(g_gpu);
		expect(st == RG_ERR_INVALID_INPUT, "sync after a negative length -> INVALID_INPUT");
		CK(rg_backend_download(g_gpu, got, gpo.p, sizeof(got)));
		for (int i = 0; i < H; i++)
			nz += got[H + i] != 0.f;
		expect(nz == 0 && rg_backend_sync(g_gpu) == RG_OK,
		       "the negative-length sequence pools to a zero row; next sync OK");
		free(x);
		gfree(&gx); gfree(&gpc); gfree(&gpo);
	}
}

/* ---- graphs ---- */

/* The captured chain: embeddings + LN -> GEMM + bias (H x H) -> residual LN written over the
 * residual (as the model does) -> MEAN + L2 pool -> async download to pinned memory. The device
 * buffers are fixed; each input set is written into them before a launch. */
enum { GR_H = 384, GR_T = 40, GR_S = 5, GR_V = 300, GR_P = 64 };

typedef struct graph_bufs {
	gbuf tok, pos, cu, word, posemb, type0, g1, b1, w, bias, g2, b2, u, h, pooled;
	float *out_h; /* (GR_S * GR_H + GUARD floats) pinned: pooled rows then a sentinel guard */
} graph_bufs;

typedef struct graph_in { /* one input set, as the GPU holds it (rounded to dt) */
	int32_t tok[GR_T], pos[GR_T], cu[GR_S + 1];
	float *word, *posemb, *type0, *g1, *b1, *w, *bias, *g2, *b2, *u;
} graph_in;

#define GR_SENTINEL (-12345.25f)

static void graph_in_free(graph_in *in)
{
	free(in->word); free(in->posemb); free(in->type0); free(in->g1); free(in->b1);
	free(in->w); free(in->bias); free(in->g2); free(in->b2); free(in->u);
	memset(in, 0, sizeof(*in));
}

/* Write input set `set` (fresh random values, lengths of its own with zero-length sequences as a
 * graph bucket pads them; tokens past cu[S] are padding at position 0) into the buffers. */
static void graph_fill(rg_dtype dt, graph_bufs *gb, graph_in *in, int set)
{
	static const int32_t cus[2][GR_S + 1] = { { 0, 12, 12, 30, 37, 37 },
						   { 0, 9, 20, 33, 33, 33 } };
	const float ws = 1.7f / sqrtf((float)GR_H);

	graph_in_free(in);
	memcpy(in->cu, cus[set], sizeof(in->cu));
	for (int t = 0; t < GR_T; t++) {
		in->tok[t] = irand(GR_V);
		in->pos[t] = 0;
	}
	for (int s = 0; s < GR_S; s++)
		for (int t = in->cu[s]; t < in->cu[s + 1]; t++)
			in->pos[t] = t - in->cu[s];
	CK(rg_backend_upload(g_gpu, gb->tok.p, in->tok, sizeof(in->tok)));
	CK(rg_backend_upload(g_gpu, gb->pos.p, in->pos, sizeof(in->pos)));
	CK(rg_backend_upload(g_gpu, gb->cu.p, in->cu, sizeof(in->cu)));
	in->word = gact_fill(dt, gb->word.p, (size_t)GR_V * GR_H, -1, 1);
	in->posemb = gact_fill(dt, gb->posemb.p, (size_t)GR_P * GR_H, -1, 1);
	in->type0 = gact_fill(dt, gb->type0.p, GR_H, -1, 1);
	in->w = gact_fill(dt, gb->w.p, (size_t)GR_H * GR_H, -ws, ws);
	in->bias = gact_fill(dt, gb->bias.p, GR_H, -1, 1);
	/* u is the GEMM's output, or an input under --no-gemm */
	in->u = gact_fill(dt, gb->u.p, (size_t)GR_T * GR_H, -2, 2);
	in->g1 = frand_host(GR_H, 0.5f, 1.5f);
	in->b1 = frand_host(GR_H, -0.5f, 0.5f);
	in->g2 = frand_host(GR_H, 0.5f, 1.5f);
	in->b2 = frand_host(GR_H, -0.5f, 0.5f);
	CK(rg_backend_upload(g_gpu, gb->g1.p, in->g1, GR_H * 4));
	CK(rg_backend_upload(g_gpu, gb->b1.p, in->b1, GR_H * 4));
	CK(rg_backend_upload(g_gpu, gb->g2.p, in->g2, GR_H * 4));
	CK(rg_backend_upload(g_gpu, gb->b2.p, in->b2, GR_H * 4));
}

/* The chain on the GPU (eager, or recorded while capturing); stops at the first error. */
static rg_status graph_chain_gpu(graph_bufs *gb)
{
	rg_status st;

	st = rg_op_embed_layernorm(g_gpu, gb->tok.p, gb->pos.p, GR_T, gb->word.p, gb->posemb.p,
				   gb->type0.p, gb->g1.p, gb->b1.p, 1e-12f, GR_H, gb->h.p);
	if (st == RG_OK && !g_no_gemm)
		st = rg_op_gemm_bias_act(g_gpu, gb->h.p, gb->w.p, gb->bias.p, gb->u.p, GR_T, GR_H,
					 GR_H, RG_ACT_NONE);
	if (st == RG_OK)
		st = rg_op_bias_residual_layernorm(g_gpu, gb->u.p, NULL, gb->h.p, gb->g2.p,
						   gb->b2.p, 1e-12f, GR_T, GR_H, gb->h.p);
	if (st == RG_OK)
		st = rg_op_pool(g_gpu, gb->h.p, gb->cu.p, GR_S, GR_H, RG_POOL_MEAN, true,
				gb->pooled.p);
	if (st == RG_OK)
		st = rg_backend_download_async(g_gpu, gb->out_h, gb->pooled.p,
					       (size_t)GR_S * GR_H * sizeof(float));
	return st;
}

/* The same chain on the CPU backend: (GR_S, GR_H) pooled rows, caller frees. */
static float *graph_chain_cpu(const graph_in *in)
{
	float *h = nan_host((size_t)GR_T * GR_H), *u = in->u, *pooled = nan_host(GR_S * GR_H);

	CK(rg_op_embed_layernorm(g_cpu, in->tok, in->pos, GR_T, in->word, in->posemb, in->type0,
				 in->g1, in->b1, 1e-12f, GR_H, h));
	if (!g_no_gemm) {
		u = nan_host((size_t)GR_T * GR_H);
		CK(rg_op_gemm_bias_act(g_cpu, h, in->w, in->bias, u, GR_T, GR_H, GR_H,
				       RG_ACT_NONE));
	}
	CK(rg_op_bias_residual_layernorm(g_cpu, u, NULL, h, in->g2, in->b2, 1e-12f, GR_T, GR_H, h));
	CK(rg_op_pool(g_cpu, h, in->cu, GR_S, GR_H, RG_POOL_MEAN, true, pooled));
	if (u != in->u)
		free(u);
	free(h);
	return pooled;
}

/* Set the payload of a GPU buffer to 0xFF bytes (NaN in every dtype). */
static void gpoison(const gbuf *b)
{
	unsigned char *h = malloc(b->bytes);
	memset(h, 0xFF, b->bytes);
	CK(rg_backend_upload(g_gpu, b->p, h, b->bytes));
	free(h);
}

/* Poison the pinned output and every buffer the chain writes (NaN), so that a stage that did
 * not run leaves NaN rather than the previous run's values; reset the pinned guard. */
static void graph_poison(graph_bufs *gb)
{
	memset(gb->out_h, 0xFF, (size_t)GR_S * GR_H * sizeof(float));
	for (int i = 0; i < GUARD; i++)
		gb->out_h[GR_S * GR_H + i] = GR_SENTINEL;
	gpoison(&gb->h);
	gpoison(&gb->pooled);
	if (!g_no_gemm)
		gpoison(&gb->u); /* else u is an input */
}

/* Compare the pinned output with the CPU chain on `in`; the pinned guard and the device
 * buffer's guards must be intact. The chain's intermediates are rounded to dt on the GPU only,
 * and the pooled rows are L2-normalized (elements ~0.05): the dtype's tolerance covers it. */
static void graph_check(const char *op, rg_dtype dt, graph_bufs *gb, const graph_in *in)
{
	double a, r;
	int guard = gguard_check(&gb->pooled) + gguard_check(&gb->h);
	float *ref = graph_chain_cpu(in);

	tol_for(dt, &a, &r);
	for (int i = 0; i < GUARD; i++)
		guard += gb->out_h[GR_S * GR_H + i] != GR_SENTINEL;
	for (int s = 0; s < GR_S; s++)
		for (int i = 0; in->cu[s + 1] == in->cu[s] && i < GR_H; i++)
			if (gb->out_h[s * GR_H + i] != 0.f) {
				row_fail(op, dt, "zero-length sequence %d: element %d is %g", s, i,
					 gb->out_h[s * GR_H + i]);
				break;
			}
	compare(op, dt, gb->out_h, ref, (size_t)GR_S * GR_H, a, r, guard);
	free(ref);
}

/* Eager run, capture, then two replays on two input sets written into the same buffers: each
 * replay must equal the CPU reference of its own inputs (replays read the buffers, they do not
 * reuse values seen at capture time). */
static void test_graph(rg_dtype dt)
{
	const char *op_e = "graph chain eager", *op_g = "graph chain replay";
	const size_t es = rg_dtype_size(dt);
	graph_bufs gb;
	graph_in in;
	rg_graph *g = NULL;
	rg_status st, st2;
	void *vp = NULL;

	memset(&in, 0, sizeof(in));
	gb.tok = galloc(GR_T * 4);
	gb.pos = galloc(GR_T * 4);
	gb.cu = galloc((GR_S + 1) * 4);
	gb.word = galloc((size_t)GR_V * GR_H * es);
	gb.posemb = galloc((size_t)GR_P * GR_H * es);
	gb.type0 = galloc(GR_H * es);
	gb.g1 = galloc(GR_H * 4);
	gb.b1 = galloc(GR_H * 4);
	gb.w = galloc((size_t)GR_H * GR_H * es);
	gb.bias = galloc(GR_H * es);
	gb.g2 = galloc(GR_H * 4);
	gb.b2 = galloc(GR_H * 4);
	gb.u = galloc((size_t)GR_T * GR_H * es);
	gb.h = galloc((size_t)GR_T * GR_H * es);
	gb.pooled = galloc((size_t)GR_S * GR_H * 4);
	CK(rg_backend_host_alloc(g_gpu, ((size_t)GR_S * GR_H + GUARD) * sizeof(float), &vp));
	gb.out_h = vp;

	/* eager first, as the model runs a new bucket (and so the GEMM plan is autotuned) */
	graph_fill(dt, &gb, &in, 0);
	graph_poison(&gb);
	set_case("eager, input set 0");
	st = graph_chain_gpu(&gb);
	if (op_ok(st, op_e, dt, "eager chain")) {
		CK(rg_backend_sync(g_gpu));
		set_case("eager, input set 0");
		graph_check(op_e, dt, &gb, &in);
	}

	set_case("capture");
	st = rg_backend_capture_begin(g_gpu);
	if (!op_ok(st, op_g, dt, "rg_backend_capture_begin"))
		goto out_free;
	st = graph_chain_gpu(&gb);
	st2 = rg_backend_capture_end(g_gpu, &g);
	if (!op_ok(st, op_g, dt, "chain while capturing") ||
	    !op_ok(st2, op_g, dt, "rg_backend_capture_end"))
		goto out_free;
	if (!g) {
		set_case("capture");
		row_fail(op_g, dt, "capture_end returned RG_OK and no graph");
		goto out_free;
	}
	for (int set = 0; set < 2; set++) {
		if (set == 1)
			graph_fill(dt, &gb, &in, 1); /* new values in the same buffers */
		graph_poison(&gb);
		st = rg_backend_graph_launch(g_gpu, g);
		if (st == RG_OK)
			st = rg_backend_sync(g_gpu);
		set_case("replay %d, input set %d", set + 1, set);
		if (!op_ok(st, op_g, dt, "graph launch + sync"))
			break;
		set_case("replay %d, input set %d", set + 1, set);
		graph_check(op_g, dt, &gb, &in);
	}

out_free:
	g_case[0] = 0;
	rg_backend_graph_free(g_gpu, g);
	rg_backend_host_free(g_gpu, gb.out_h);
	graph_in_free(&in);
	gfree(&gb.tok); gfree(&gb.pos); gfree(&gb.cu); gfree(&gb.word); gfree(&gb.posemb);
	gfree(&gb.type0); gfree(&gb.g1); gfree(&gb.b1); gfree(&gb.w); gfree(&gb.bias);
	gfree(&gb.g2); gfree(&gb.b2); gfree(&gb.u); gfree(&gb.h); gfree(&gb.pooled);
}

/* All elements of the (4, 64) act buffer x equal v (exactly representable). */
static int all_equal(const gbuf *x, float v)
{
	float *got = gread(x, g_dt, 4 * 64);
	int ok = 1;
	for (int i = 0; i < 4 * 64; i++)
		ok &= got[i] == v;
	free(got);
	return ok;
}

/* Capture error paths: the CPU backend has no graphs; misuse is refused without entering
 * capture; an op that fails while capturing makes capture_end fail (ops.h: "on any failure during
 * the capture, returns that error with *out = NULL and the backend back in normal mode"), and the
 * backend then runs ops eagerly again, the recorded ones never having run. */
static void test_graph_errors(void)
{
	rg_graph *g = (rg_graph *)&g; /* non-NULL: capture_end must reset it */
	float zeros[4 * 64] = { 0 }, ones[64];
	rg_status st;
	int n_runs = 0;

	printf("graph capture error paths:\n");
	for (int i = 0; i < 64; i++)
		ones[i] = 1.f;
	expect(!rg_backend_has_graphs(g_cpu) && rg_backend_has_graphs(g_gpu),
	       "has_graphs: false on CPU, true on CUDA");
	st = rg_backend_capture_begin(g_cpu);
	expect(st == RG_ERR_UNSUPPORTED, "capture_begin on the CPU backend -> RG_ERR_UNSUPPORTED");
	st = rg_backend_capture_end(g_cpu, &g);
	expect(st == RG_ERR_UNSUPPORTED && g == NULL,
	       "capture_end on the CPU backend -> RG_ERR_UNSUPPORTED, no graph");
	g = (rg_graph *)&g;
	st = rg_backend_capture_end(g_gpu, &g);
	expect(st != RG_OK && g == NULL, "capture_end without capture_begin -> error, no graph");

	gbuf x = galloc(4 * 64 * rg_dtype_size(g_dt)), bias = graw(ones, sizeof(ones));
	CK(rg_backend_upload_f32_as(g_gpu, x.p, zeros, 4 * 64, g_dt));

	/* an op refused on the host (gemm M < 0 is rejected before any CUDA call) */
	st = rg_backend_capture_begin(g_gpu);
	expect(st == RG_OK, "capture_begin on CUDA");
	expect(rg_backend_capture_begin(g_gpu) != RG_OK,
	       "a second capture_begin while capturing -> error");
	st = rg_backend_sync(g_gpu);
	expect(st == RG_ERR_INTERNAL, "sync while capturing -> RG_ERR_INTERNAL");
	st = rg_op_bias_act(g_gpu, x.p, bias.p, 4, 64, RG_ACT_NONE);
	expect(st == RG_OK, "bias_act while capturing is recorded");
	st = rg_op_gemm_bias_act(g_gpu, x.p, x.p, NULL, x.p, -1, 64, 64, RG_ACT_NONE);
	expect(st == RG_ERR_INVALID_INPUT, "gemm_bias_act M = -1 while capturing -> INVALID_INPUT");
	g = (rg_graph *)&g;
	st = rg_backend_capture_end(g_gpu, &g);
	expect(st != RG_OK && g == NULL,
	       "capture_end after an op failed while capturing -> error, no graph (ops.h)");
	if (st == RG_OK)
		rg_backend_graph_free(g_gpu, g); /* never launched */
	st = rg_op_bias_act(g_gpu, x.p, bias.p, 4, 64, RG_ACT_NONE);
	n_runs++;
	expect(st == RG_OK && rg_backend_sync(g_gpu) == RG_OK && all_equal(&x, (float)n_runs),
	       "after it: eager op + sync OK, and the recorded op never ran");

	/* a CUDA call that is illegal while capturing (a synchronous copy: cudaStreamSynchronize
	 * on the capturing stream) invalidates the capture; compute-sanitizer reports the API
	 * error, hence --skip-oom leaves it out */
	if (!g_skip_oom) {
		unsigned char xr[4 * 64 * 4];
		/* x's own bytes: x is unchanged whether or not the copy would have run */
		CK(rg_backend_download(g_gpu, xr, x.p, 4 * 64 * rg_dtype_size(g_dt)));
		st = rg_backend_capture_begin(g_gpu);
		expect(st == RG_OK, "capture_begin on CUDA (again)");
		st = rg_backend_upload(g_gpu, x.p, xr, 4 * 64 * rg_dtype_size(g_dt));
		expect(st != RG_OK, "synchronous upload while capturing -> error");
		g = (rg_graph *)&g;
		st = rg_backend_capture_end(g_gpu, &g);
		expect(st != RG_OK && g == NULL,
		       "capture_end after an invalidated capture -> error, no graph");
		if (st == RG_OK)
			rg_backend_graph_free(g_gpu, g);
		st = rg_op_bias_act(g_gpu, x.p, bias.p, 4, 64, RG_ACT_NONE);
		n_runs++;
		expect(st == RG_OK && rg_backend_sync(g_gpu) == RG_OK &&
			       all_equal(&x, (float)n_runs),
		       "after it: eager op + sync OK on the same backend");
	}
	gfree(&x); gfree(&bias);
}

static void write_json(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "cannot write %s\n", path);
		return;
	}
	fprintf(f, "{\"pass\": %s, \"error_checks\": %d, \"error_failures\": %d, \"rows\": [\n",
		g_fail ? "false" : "true", g_err_checks, g_err_fail);
	for (int i = 0; i < g_nrows; i++) {
		const row *r = &g_rows[i];
		double nr = r->den > 0 ? sqrt(r->num / r->den) : 0;
		fprintf(f, "  {\"op\": \"%s\", \"dtype\": \"%s\", \"cases\": %d, \"elements\": %ld, "
			"\"max_abs_err\": %.3e, \"max_rel_err\": %.3e, \"norm_rel_err\": %.3e, "
			"\"worst_over_tol\": %.3f, \"bad\": %ld, \"guard_bytes_bad\": %d}%s\n",
			r->op, dt_name(r->dt), r->cases, r->n, isinf(r->max_abs) ? 1e308 : r->max_abs,
			isinf(r->max_rel) ? 1e308 : r->max_rel, nr,
			isinf(r->worst) ? 1e308 : r->worst, r->bad, r->guard_bad,
			i + 1 < g_nrows ? "," : "");
	}
	fprintf(f, "]}\n");
	fclose(f);
}

/* rg_op_copy_blocks on the GPU against the same copies done in order on the host: 12 pools of
 * 9 blocks of 4 KiB in one call (the batched kernel), a chain whose dst is a later src and a
 * 24-byte block (both the in-order memcpy path), guards around the pools. */
static void test_copy_blocks_gpu(void)
{
	static const struct { size_t bb; int pools, n; int32_t src[4], dst[4]; } cases[] = {
		{ 4096, 12, 3, { 0, 3, 8 }, { 5, 7, 1 } },
		{ 4096, 4, 2, { 3, 1 }, { 1, 6 } },
		{ 24, 3, 3, { 0, 4, 2 }, { 5, 1, 2 } },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const size_t bb = cases[c].bb, stride = 9 * bb, bytes = stride * cases[c].pools;
		unsigned char *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
		gbuf g = galloc(bytes);
		row *r = get_row("copy_blocks", g_dt);

		for (size_t i = 0; i < bytes; i++)
			h[i] = (unsigned char)irand(256);
		memcpy(want, h, bytes);
		for (int p = 0; p < cases[c].pools; p++)
			for (int i = 0; i < cases[c].n; i++)
				memmove(want + p * stride + (size_t)cases[c].dst[i] * bb,
					want + p * stride + (size_t)cases[c].src[i] * bb, bb);
		CK(rg_backend_upload(g_gpu, g.p, h, bytes));
		CK(rg_op_copy_blocks(g_gpu, g.p, bb, cases[c].pools, stride, cases[c].src,
				     cases[c].dst, cases[c].n));
		CK(rg_backend_sync(g_gpu));
		CK(rg_backend_download(g_gpu, got, g.p, bytes));
		r->cases++;
		r->n += (long)bytes;
		if (memcmp(got, want, bytes))
			row_fail("copy_blocks", g_dt, "case %zu: the pools differ from the host's copies",
				 c);
		r->guard_bad += gguard_check(&g);
		gfree(&g);
		free(h);
		free(want);
		free(got);
	}
}

int main(int argc, char **argv)
{
	static const int l1[] = { 1 }, l2[] = { 7, 3 }, l3[] = { 128, 1, 64, 33 },
			 l4[] = { 512, 512, 1, 2 }, l5[] = { 500, 65, 63, 130, 1, 257 };
	/* pool: zero-length sequences inside and at the end of a batch (cu {0,5,5,9,9}, ...), and
	 * 500-token sequences */
	static const int z1[] = { 5, 0, 4, 0 }, z2[] = { 0, 3, 0, 0 },
			 z3[] = { 500, 0, 257, 0, 1, 0 };
	const int *lens[] = { l1, l2, l3, l4 };
	const int nl[] = { 1, 2, 4, 4 };
	const int *zlens[] = { z1, z2, z3 };
	const int nz[] = { 4, 4, 6 };
	static const rg_dtype dts[] = { RG_DTYPE_F32, RG_DTYPE_F16, RG_DTYPE_BF16 };
	static const int att[][2] = { { 12, 32 }, { 6, 64 }, { 3, 128 }, { 5, 40 }, { 4, 8 } };
	static const int att_long[][2] = { { 12, 32 }, { 12, 64 }, { 3, 128 }, { 5, 40 }, { 2, 16 },
					   { 1, 64 } };
	static const int gemms[][2] = { { 1152, 384 }, { 1536, 384 }, { 384, 1536 }, { 37, 29 } };
	/* LayerNorm row lengths: warp-per-row kernel (384, 768, 1024), block kernel (100, 2312) */
	static const int ln_n[] = { 384, 768, 1024, 100, 2304 + 8 };
	/* hidden sizes: 16-byte paths (384, 768), scalar / block paths (99) */
	static const int hs[] = { 384, 768, 99 };
	const char *json = NULL, *only_dt = NULL;
	int n_sets = 4;
	rg_status st;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
			json = argv[++i];
		} else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
			only_dt = argv[++i];
		} else if (strcmp(argv[i], "--quick") == 0) {
			n_sets = 3;
			g_quick = 1;
		} else if (strcmp(argv[i], "--skip-oom") == 0) {
			g_skip_oom = 1;
		} else if (strcmp(argv[i], "--no-gemm") == 0) {
			g_no_gemm = 1;
		} else if (strcmp(argv[i], "--small-m") == 0) {
			g_small_m_only = 1;
		} else if (strcmp(argv[i], "--attn-wgmma") == 0) {
			g_wgmma_only = 1;
		} else if (strcmp(argv[i], "--deberta") == 0) {
			g_deberta_only = 1;
		} else if (strcmp(argv[i], "--qgemm") == 0) {
			g_qgemm_only = 1;
		} else {
			fprintf(stderr, "usage: test_ops_cuda [--json FILE] [--quick] [--dtype D] [--skip-oom] [--no-gemm] [--small-m] [--attn-wgmma] [--deberta] [--qgemm]\n");
			return 2;
		}
	}
	if (rg_cuda_device_count() < 1) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	{
		const char *e = getenv("RAGGED_GEMV"); /* the library's own rule (gemv.cu) */
		g_gemv = !(e && e[0] == '0');
	}
	CK(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &g_cpu));
	for (int di = 0; di < 3; di++) {
		rg_dtype dt = dts[di];
		if (only_dt && strcmp(only_dt, dt_name(dt)) != 0)
			continue;
		if ((g_small_m_only || g_wgmma_only) && dt == RG_DTYPE_F32)
			continue;
		st = rg_backend_init(RG_DEVICE_CUDA, 0, dt, &g_gpu);
		if (st != RG_OK)
			die_st(st, "rg_backend_init(cuda)");
		g_dt = dt;
		if (g_qgemm_only) {
			test_qgemm_all(dt);
			test_act_mul_gemm_all(dt);
			rg_backend_free(g_gpu);
			g_gpu = NULL;
			continue;
		}
		if (g_deberta_only) {
			for (int li = 0; li < n_sets; li++) {
				batch b = make_batch(lens[li], nl[li]);
				test_disent_batch(dt, &b);
			}
			test_disent_long(dt);
			test_disent_edges(dt);
			test_disent_invariance(dt);
			rg_backend_free(g_gpu);
			g_gpu = NULL;
			continue;
		}
		if (dt != RG_DTYPE_F32)
			test_attention_wgmma(dt);
		if (g_wgmma_only) {
			rg_backend_free(g_gpu);
			g_gpu = NULL;
			continue;
		}
		/* decode-step GEMMs (fp32 has no small-M kernel: its GEMMs are the ones below) */
		if (dt != RG_DTYPE_F32)
			test_small_m_all(dt);
		if (!g_no_gemm) {
			test_qgemm_all(dt);
			test_act_mul_gemm_all(dt);
		}
		if (g_small_m_only) {
			rg_backend_free(g_gpu);
			g_gpu = NULL;
			continue;
		}
		for (int li = 0; li < n_sets; li++) {
			batch b = make_batch(lens[li], nl[li]);
			for (int h = 0; h < 3; h++)
				test_embed_ln(dt, &b, hs[h]);
			for (int g = 0; g < 4 && !g_no_gemm; g++)
				test_gemm(dt, &b, gemms[g][0], gemms[g][1]);
			/* the model's fused GEMMs on this batch's tokens; bias NULL on H 384
			 * (--quick: H 384 on 1 and 226 rows, for memcheck's time) */
			for (int h = 0; h < (g_quick ? 1 : 2) && !g_no_gemm &&
					!(g_quick && li == 1);
			     h++)
				test_gemm_bias_act_model(dt, b.n_tok, hs[h], h == 0);
			for (int a = 0; a < 4; a++)
				test_bias_act(dt, &b, (rg_act)a);
			for (int n = 0; n < 5; n++)
				for (int bi = 0; bi < 2; bi++)
					for (int al = 0; al < 3; al++)
						test_bias_res_ln(dt, &b, ln_n[n], bi, al);
			/* relative position bias: rel_max 128 (MPNet's, past most lengths) and 5
			 * (most keys clamped to the table's ends) */
			for (int a = 0; a < 5; a++)
				for (int sg = 0; sg < 2; sg++)
					for (int rb = 0; rb < 3; rb++)
						test_attention(dt, &b, att[a][0], att[a][1], sg,
							       rb == 0 ? -1 : rb == 1 ? 128 : 5);
			/* DeBERTa's c2p / p2c */
			test_disent_batch(dt, &b);
			for (int h = 0; h < 3; h++)
				for (int m = 0; m < 3; m++)
					for (int nm = 0; nm < 2; nm++)
						test_pool(dt, &b, hs[h], (rg_pooling)m, nm);
			test_gather(dt, &b);
		}
		/* output rows that are not 16-byte aligned (odd N: Marian's and GPT-2's vocab_size:
		 * cuBLASLt's align-1 kernels) against the CPU GEMM; every mode, --no-gemm too */
		for (int k = 0; k < 3; k++) {
			const int M = k == 0 ? 40 : k == 1 ? 64 : 333;
			test_gemm_bias_act(dt, M, 58101, 64, RG_ACT_NONE, k != 1, 0);
		}
		test_gemm_bias_act(dt, 48, 50257, 64, RG_ACT_GELU_NEW, 1, 0);
		test_gemm_bias_act(dt, 17, 7, 64, RG_ACT_NONE, 1, 0);
		/* GEMM rows that are a multiple of 8 and not (the batches above give 1, 10, 226,
		 * 1026), bias and GELU epilogues */
		for (int k = 0; k < 2 && !g_no_gemm && !g_quick; k++) {
			const int M = k ? 333 : 64;
			test_gemm_bias_act(dt, M, 1152, 384, RG_ACT_NONE, 1, 0);
			test_gemm_bias_act(dt, M, 1536, 384, RG_ACT_GELU, 1, 0);
			test_gemm_bias_act(dt, M, 1536, 384, RG_ACT_GELU, 1, 1);
			test_gemm_bias_act(dt, M, 1536, 384, RG_ACT_GELU_NEW, 0, 0);
		}
		for (int zi = 0; zi < 3; zi++) {
			batch b = make_batch(zlens[zi], nz[zi]);
			for (int h = 0; h < 3; h++)
				for (int m = 0; m < 3; m++)
					for (int nm = 0; nm < 2; nm++)
						test_pool(dt, &b, hs[h], (rg_pooling)m, nm);
		}
		/* attention alone on long ragged lengths that are not multiples of the 64-key
		 * tile of the tensor-core kernel (several tiles, partial last tiles), incl.
		 * BERT-base's 12 heads x 64 */
		const batch b5 = make_batch(l5, 6);
		for (int a = 0; a < 6 && n_sets == 4; a++)
			for (int sg = 0; sg < 2; sg++)
				for (int rb = 0; rb < 2; rb++)
					test_attention(dt, &b5, att_long[a][0], att_long[a][1], sg,
						       rb ? 128 : -1);
		test_attention_batch_invariance(dt);
		if (n_sets == 4) {
			test_disent_long(dt);
			test_disent_edges(dt);
			test_disent_invariance(dt);
		}
		test_graph(dt);
		if (only_dt || di == 0) {
			test_errors();
			test_graph_errors();
			test_copy_blocks_gpu();
		}
		rg_backend_free(g_gpu);
		g_gpu = NULL;
	}
	rg_backend_free(g_cpu);

	printf("\n| op | dtype | cases | elements | max abs err | max rel err | norm rel err | "
	       "worst/tol | bad | guards | result |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < g_nrows; i++) {
		const row *r = &g_rows[i];
		int ok = r->bad == 0 && r->guard_bad == 0;
		printf("| %s | %s | %d | %ld | %.2e | %.2e | %.2e | %.3f | %ld | %d | %s |\n", r->op,
		       dt_name(r->dt), r->cases, r->n, r->max_abs, r->max_rel,
		       r->den > 0 ? sqrt(r->num / r->den) : 0.0, r->worst, r->bad, r->guard_bad,
		       ok ? "PASS" : "FAIL");
	}
	printf("\nerror-path checks: %d, failed: %d\n", g_err_checks, g_err_fail);
	printf("wgmma attention: %d of %d cases launched the wgmma kernel%s\n", g_wg_taken,
	       g_wg_cases, g_wg_taken ? "" : " (not Hopper, or no sm_90a cubin: mma.sync both times)");
	if (g_wgmma_only && g_wg_taken < g_wg_cases) {
		printf("--attn-wgmma: every case must launch the wgmma kernel\n");
		g_fail = 1;
	}
	if (json)
		write_json(json);
	printf("%s\n", g_fail ? "test_ops_cuda: FAIL" : "test_ops_cuda: PASS");
	return g_fail ? 1 : 0;
}
