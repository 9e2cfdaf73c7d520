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
 * Usage: test_ops_cuda [--json FILE] [--quick] [--dtype fp32|fp16|bf16] [--skip-oom] [--no-gemm]. --quick
 * drops the {512,512,1,2} set (for compute-sanitizer runs); --dtype runs one dtype; --skip-oom
 * leaves out the deliberate 1 PiB allocation (which compute-sanitizer counts as an API error);
 * --no-gemm leaves out the cuBLASLt GEMMs, so that racecheck sees only ragged's own kernels
 * (it reports WAR hazards inside cuBLASLt's sm90 "nvjet" kernels, which are not ours to fix).
 * Prints one table row per (op, dtype) with the worst errors
 * over all length sets; exits 1 if any check failed, 77 when no CUDA device is present.
 * Build: see tests/gpu/run.sh (links build/libragged.a and the CUDA libraries). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/ops.h"

#define GUARD 256       /* guard bytes on each side of every GPU output */
#define GUARD_BYTE 0x5A
#define MAX_ROWS 128

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

/* GPU tensor of n act values drawn in [lo, hi), stored as dt; *host gets the values exactly as
 * stored (rounded), for the CPU reference. Caller frees both. */
static gbuf gact_rand(rg_dtype dt, size_t n, float lo, float hi, float **host)
{
	float *f = malloc(n * sizeof(float));
	void *raw = malloc(n * 4);
	for (size_t i = 0; i < n; i++)
		f[i] = frand(lo, hi);
	gbuf b = galloc(n * rg_dtype_size(dt));
	CK(rg_backend_upload_f32_as(g_gpu, b.p, f, n, dt));
	CK(rg_backend_download(g_gpu, raw, b.p, n * rg_dtype_size(dt)));
	decode(dt, raw, f, n);
	free(raw);
	*host = f;
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
				fprintf(stderr, "  %s %s: element %zu got %.8g ref %.8g\n", op,
					dt_name(dt), i, g, f);
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
	if (bad || guard_bad)
		g_fail = 1;
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
	}
}

/* ---- one batch shape ---- */
typedef struct batch {
	int n_seq, n_tok, max_len;
	int32_t cu[8];
} batch;

static batch make_batch(const int *lens, int n)
{
	batch b = { .n_seq = n };
	b.cu[0] = 0;
	for (int i = 0; i < n; i++) {
		b.cu[i + 1] = b.cu[i] + lens[i];
		if (lens[i] > b.max_len)
			b.max_len = lens[i];
	}
	b.n_tok = b.cu[n];
	return b;
}

/* ---- op tests ---- */
static void test_embed_ln(rg_dtype dt, const batch *b)
{
	const int H = 384, vocab = 1000, max_pos = 512, T = b->n_tok;
	float *word, *pos, *type0;
	double a, r;
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
	/* LN outputs reach ~3-4: scale atol with them */
	compare("embed_layernorm", dt, got, ref, (size_t)T * H, 2 * a, r, gguard_check(&go));
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
	compare(name, dt, got, ref, (size_t)M * N, a, r, gguard_check(&go));
	free(got); free(ref); free(A); free(W);
	gfree(&ga); gfree(&gw); gfree(&go);
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
	compare(name, dt, got, x, (size_t)M * N, a, r, gguard_check(&gx));
	free(got); free(x); free(bias);
	gfree(&gx); gfree(&gb);
}

/* alias: 0 separate out, 1 out = residual, 2 out = x. */
static void test_bias_res_ln(rg_dtype dt, const batch *b, int alias)
{
	const int M = b->n_tok, N = 384;
	float *x, *res, *bias = frand_host(N, -1, 1), *gam = frand_host(N, 0.5f, 1.5f),
			*bet = frand_host(N, -0.5f, 0.5f);
	double a, r;
	static const char *names[] = { "bias_res_ln", "bias_res_ln out=res", "bias_res_ln out=x" };

	tol_for(dt, &a, &r);
	gbuf gx = gact_rand(dt, (size_t)M * N, -2, 2, &x);
	gbuf gr = gact_rand(dt, (size_t)M * N, -2, 2, &res);
	gbuf gb = graw(bias, N * 4), gg = graw(gam, N * 4), gbe = graw(bet, N * 4);
	gbuf go = alias ? (gbuf){ 0 } : galloc((size_t)M * N * rg_dtype_size(dt));
	gbuf *out = alias == 0 ? &go : alias == 1 ? &gr : &gx;
	float *ref = nan_host((size_t)M * N);
	CK(rg_op_bias_residual_layernorm(g_gpu, gx.p, gb.p, gr.p, gg.p, gbe.p, 1e-12f, M, N,
					 out->p));
	CK(rg_op_bias_residual_layernorm(g_cpu, x, bias, res, gam, bet, 1e-12f, M, N, ref));
	float *got = gread(out, dt, (size_t)M * N);
	compare(names[alias], dt, got, ref, (size_t)M * N, 2 * a, r, gguard_check(out));
	free(got); free(ref); free(x); free(res); free(bias); free(gam); free(bet);
	gfree(&gx); gfree(&gr); gfree(&gb); gfree(&gg); gfree(&gbe);
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

static void test_attention(rg_dtype dt, const batch *b, int heads, int D, int with_seg)
{
	const int H = heads * D, T = b->n_tok;
	const float scale = 1.f / sqrtf((float)D);
	float *qkv;
	int32_t *seg = with_seg ? malloc(T * 4) : NULL;
	double a, r;
	char name[48];

	tol_for(dt, &a, &r);
	/* |q.k| * scale reaches a few units: peaked softmax, so the online rescaling matters */
	gbuf gq = gact_rand(dt, (size_t)T * 3 * H, -2, 2, &qkv);
	gbuf gcu = graw(b->cu, (b->n_seq + 1) * 4);
	gbuf gs = { 0 };
	if (seg) {
		make_seg(b, seg);
		gs = graw(seg, T * 4);
	}
	gbuf go = galloc((size_t)T * H * rg_dtype_size(dt));
	CK(rg_op_attention(g_gpu, gq.p, gcu.p, b->cu, b->n_seq, b->max_len, heads, D, scale,
			   seg ? gs.p : NULL, go.p));
	float *ref = nan_host((size_t)T * H);
	CK(rg_op_attention(g_cpu, qkv, b->cu, b->cu, b->n_seq, b->max_len, heads, D, scale, seg,
			   ref));
	float *got = gread(&go, dt, (size_t)T * H);
	snprintf(name, sizeof(name), "attention %dx%d%s", heads, D, seg ? " seg" : "");
	compare(name, dt, got, ref, (size_t)T * H, a, r, gguard_check(&go));
	free(got); free(ref); free(qkv); free(seg);
	gfree(&gq); gfree(&gcu); gfree(&go);
	if (with_seg)
		gfree(&gs);
}

static void test_pool(rg_dtype dt, const batch *b, rg_pooling mode, bool norm)
{
	const int H = 384, T = b->n_tok;
	float *x;
	static const char *mn[] = { "mean", "cls", "max" };
	char name[48];

	gbuf gx = gact_rand(dt, (size_t)T * H, -2, 2, &x);
	gbuf gcu = graw(b->cu, (b->n_seq + 1) * 4);
	gbuf go = galloc((size_t)b->n_seq * H * 4);
	CK(rg_op_pool(g_gpu, gx.p, gcu.p, b->n_seq, H, mode, norm, go.p));
	float *ref = nan_host((size_t)b->n_seq * H);
	CK(rg_op_pool(g_cpu, x, b->cu, b->n_seq, H, mode, norm, ref));
	float *got = gread(&go, RG_DTYPE_F32, (size_t)b->n_seq * H);
	snprintf(name, sizeof(name), "pool %s%s", mn[mode], norm ? " +l2" : "");
	/* the pooled output is float32 for every dtype: f32 tolerance */
	compare(name, dt, got, ref, (size_t)b->n_seq * H, 1e-6, 1e-5, gguard_check(&go));
	free(got); free(ref); free(x);
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
	long diff = 0;

	gbuf gq = gact_rand(dt, (size_t)b.n_tok * 3 * H, -2, 2, &qkv);
	gbuf gcu = graw(b.cu, 5 * 4), gcu1 = graw(cu1, 8);
	gbuf go = galloc((size_t)b.n_tok * H * es), go1 = galloc((size_t)L * H * es);
	CK(rg_op_attention(g_gpu, gq.p, gcu.p, b.cu, 4, b.max_len, heads, D, 0.17f, NULL, go.p));
	CK(rg_op_attention(g_gpu, (char *)gq.p + (size_t)t0 * 3 * H * es, gcu1.p, cu1, 1, L, heads,
			   D, 0.17f, NULL, go1.p));
	CK(rg_backend_sync(g_gpu));
	unsigned char *h = malloc((size_t)L * H * es), *h1 = malloc((size_t)L * H * es);
	CK(rg_backend_download(g_gpu, h, (char *)go.p + (size_t)t0 * H * es, (size_t)L * H * es));
	CK(rg_backend_download(g_gpu, h1, go1.p, (size_t)L * H * es));
	for (size_t i = 0; i < (size_t)L * H * es; i++)
		diff += h[i] != h1[i];
	row *r = get_row("attention alone==batched", dt);
	r->cases++;
	r->n += (long)L * H;
	r->bad += diff;
	if (diff) {
		fprintf(stderr, "  attention batch invariance %s: %ld bytes differ\n", dt_name(dt), diff);
		g_fail = 1;
	}
	free(h); free(h1); free(qkv);
	gfree(&gq); gfree(&gcu); gfree(&gcu1); gfree(&go); gfree(&go1);
}

/* ---- error paths ---- */
static int g_err_checks, g_err_fail, g_skip_oom, g_no_gemm;

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
	st = rg_op_attention(g_gpu, q.p, gcu.p, cu, 2, 20, 1, 256, 0.1f, NULL, o.p);
	expect(st == RG_ERR_UNSUPPORTED, "attention head_dim 256 -> RG_ERR_UNSUPPORTED");
	st = rg_op_attention(g_gpu, q.p, gcu.p, cu, 2, 10, 4, 64, 0.1f, NULL, o.p);
	expect(st == RG_ERR_INVALID_INPUT, "attention length 20 > max_seqlen 10 -> INVALID_INPUT");
	gbuf gi = graw(&neg, 4);
	st = rg_op_gather_rows(g_gpu, q.p, gi.p, 1, 64, o.p);
	expect(st == RG_OK, "gather with index -1 launches (the kernel reports through the flag)");
	st = rg_backend_sync(g_gpu);
	expect(st == RG_ERR_INVALID_INPUT, "sync after index -1 -> RG_ERR_INVALID_INPUT");
	st = rg_backend_sync(g_gpu);
	expect(st == RG_OK, "the flag is cleared: next sync OK");
	gfree(&q); gfree(&o); gfree(&gcu); gfree(&gi);
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

int main(int argc, char **argv)
{
	static const int l1[] = { 1 }, l2[] = { 7, 3 }, l3[] = { 128, 1, 64, 33 },
			 l4[] = { 512, 512, 1, 2 }, l5[] = { 500, 65, 63, 130, 1, 257 };
	const int *lens[] = { l1, l2, l3, l4 };
	const int nl[] = { 1, 2, 4, 4 };
	static const rg_dtype dts[] = { RG_DTYPE_F32, RG_DTYPE_F16, RG_DTYPE_BF16 };
	static const int att[][2] = { { 12, 32 }, { 6, 64 }, { 3, 128 }, { 5, 40 }, { 4, 8 } };
	static const int att_long[][2] = { { 12, 32 }, { 12, 64 }, { 3, 128 }, { 5, 40 }, { 2, 16 },
					   { 1, 64 } };
	static const int gemms[][2] = { { 1152, 384 }, { 1536, 384 }, { 384, 1536 }, { 37, 29 } };
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
		} else if (strcmp(argv[i], "--skip-oom") == 0) {
			g_skip_oom = 1;
		} else if (strcmp(argv[i], "--no-gemm") == 0) {
			g_no_gemm = 1;
		} else {
			fprintf(stderr, "usage: test_ops_cuda [--json FILE] [--quick] [--dtype D] [--skip-oom] [--no-gemm]\n");
			return 2;
		}
	}
	if (rg_cuda_device_count() < 1) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	CK(rg_backend_init(RG_DEVICE_CPU, 0, RG_DTYPE_F32, &g_cpu));
	for (int di = 0; di < 3; di++) {
		rg_dtype dt = dts[di];
		if (only_dt && strcmp(only_dt, dt_name(dt)) != 0)
			continue;
		st = rg_backend_init(RG_DEVICE_CUDA, 0, dt, &g_gpu);
		if (st != RG_OK)
			die_st(st, "rg_backend_init(cuda)");
		for (int li = 0; li < n_sets; li++) {
			batch b = make_batch(lens[li], nl[li]);
			test_embed_ln(dt, &b);
			for (int g = 0; g < 4 && !g_no_gemm; g++)
				test_gemm(dt, &b, gemms[g][0], gemms[g][1]);
			for (int a = 0; a < 4; a++)
				test_bias_act(dt, &b, (rg_act)a);
			for (int al = 0; al < 3; al++)
				test_bias_res_ln(dt, &b, al);
			for (int a = 0; a < 5; a++)
				for (int sg = 0; sg < 2; sg++)
					test_attention(dt, &b, att[a][0], att[a][1], sg);
			for (int m = 0; m < 3; m++)
				for (int nz = 0; nz < 2; nz++)
					test_pool(dt, &b, (rg_pooling)m, nz);
			test_gather(dt, &b);
		}
		/* attention alone on long ragged lengths that are not multiples of the 64-key
		 * tile of the tensor-core kernel (several tiles, partial last tiles), incl.
		 * BERT-base's 12 heads x 64 */
		const batch b5 = make_batch(l5, 6);
		for (int a = 0; a < 6 && n_sets == 4; a++)
			for (int sg = 0; sg < 2; sg++)
				test_attention(dt, &b5, att_long[a][0], att_long[a][1], sg);
		test_attention_batch_invariance(dt);
		if (only_dt || di == 0)
			test_errors();
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
	if (json)
		write_json(json);
	printf("%s\n", g_fail ? "test_ops_cuda: FAIL" : "test_ops_cuda: PASS");
	return g_fail ? 1 : 0;
}
