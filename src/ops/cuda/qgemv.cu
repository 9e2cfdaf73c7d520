/* GEMMs on GGUF-quantized weights (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): the table of quantized weights,
 * the small-M kernel that reads the blocks as they are, and the dequantization into a scratch
 * weight for larger M. Contract in qgemv.cuh; block formats (ggml's) in src/ops/cpu/qweight.h and
 * src/core/gguf.c (deq_q4_k, deq_q6_k), and at "block decoding" below.
 *
 * Why: a decode step streams every weight once per token, so a 4.5-bit Q4_0 weight (18 bytes per
 * 32 values) moves 3.6x fewer bytes than its fp16 copy (64), Q8_0 (34) 1.9x fewer; and the file's
 * bytes are all that stays resident.
 *
 * Small M (qgemv_kernel, M <= 16): the structure of gemv.cu's kernel (its header explains it),
 * with the W fragment produced in registers from the blocks instead of loaded:
 *  - CTA b owns the 8 rows n = 8b .. 8b+7 of W; its warps split the K / 32 steps of 32 values of
 *    those rows (a block; a K-quant's sub-block) in interleaved steps (warp w takes steps w,
 *    w + warps, ...); one step is one block (sub-block) per row:
 *    lane (g = lane / 4, t = lane % 4) reads row n0 + g's block scale(s) and its 4 (Q4) or 8 (Q8)
 *    bytes of quants -- the values k = 4t .. 4t+3 and 16+4t .. 16+4t+3 of the block, the low and
 *    high nibbles of the same 4 bytes for Q4_0 / Q4_1 (ggml's nibble order), so no byte is read
 *    twice -- and A[m][k0 + 4t .. +4), A[m][k0 + 16 + 4t .. +4) for rows m = g, g + 8 (8-byte
 *    loads). The two mma.sync.m16n8k16 of the step take the first and the second group of four:
 *    a dot product's k may be summed in any order, and the order is the same for A and W because
 *    it depends on t only (gemv.cu's argument). Q4_K lanes also read the super-block's 12 bytes
 *    of packed 6-bit scales and mins, Q6_K lanes the 4-bit and 2-bit parts of their values and
 *    the sub-block's two int8 scales (see "block decoding");
 *  - the values are dequantized in fp32 (d * q, d * (q - 8), d * q + m, (d sc) q - (dmin m),
 *    (d sc) (q - 32): the formulas of ggml's dequantize_row_*) and rounded once to the act
 *    dtype, i.e. the weight that `--weights dequantize` would have uploaded (up to fp32 FMA
 *    contraction of a multiply-add), then multiplied on the tensor cores, fp32 accumulation;
 *  - loads: block fields are only 2-byte aligned in 34-, 18- and 210-byte blocks (Q4_1's 20 and
 *    Q4_K's 144 keep 4), so quants are read as 16-bit (Q8_0, Q4_0, Q6_K) or 32-bit (Q4_1, Q4_K)
 *    pieces with ld.global.cs (streamed once per call); batches of U steps are loaded one batch ahead, as in gemv.cu, to keep the
 *    loads in flight;
 *  - the epilogue (cross-warp sum, bias, activation, one rounding, stores) is gemv.cu's.
 * Why not llama.cpp's MMVQ scheme (mmvq.cu / vecdotq.cuh: activations quantized to q8_1 by a
 * separate kernel, then dp4a integer dot products per block, scales applied per block): ragged's
 * activations arrive as fp16 / bf16 in one stream, and keeping them so costs no extra kernel or
 * buffer per GEMM (a decode step's GEMMs are launch-bound at SmolLM2's size), adds no rounding of
 * A to 8 bits, and the mma does 16 rows of M at the price of one, where dp4a's work grows with M.
 * The cost is the dequantization ALU work per weight (an int->float, a multiply, half a pack per
 * value and lane), which at M <= 16 stays below the time of the weight stream.
 * Napkin math per call at M = 1: bytes = N K (34 | 18 | 20) / 32 + 2 N (out); SmolLM2-135M's
 * layer (K = 576: N = 960, 576, 3072; K = 1536, N = 576) reads 0.6-1.8 MB in Q8_0, 0.3-1.0 MB
 * in Q4_0: all of it well under the ~2.4 us launch-and-latency floor gemv.cu measured; the win is
 * at the 1B-8B shapes (Llama-3.2-1B's head: 128256 x 2048 = 279 MB Q8_0, 148 MB Q4_0, against
 * 525 MB of fp16).
 *
 * Larger M (prefill): qdequant_kernel writes dequant(W) (same formulas, same rounding) into the
 * context's scratch (N K elements of the act dtype, sized at prepare time for the largest weight,
 * so the step allocates nothing), then gemm.cu runs its cuBLASLt GEMM on it: 2 N K bytes written
 * and read again per GEMM, small next to a prefill's M x 2 N K FLOPs. A tiled GEMM that
 * dequantizes into shared memory (llama.cpp's MMQ) is later work. */
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/common.cuh"
extern "C" {
#include "core/gguf.h"
#include "core/tuning.h"
}
#include "ops/cuda/qgemv.cuh"

#define QGEMV_MAX_WARPS 16

static bool g_qgemv_on = true;

static void qmv_attrs(int device); /* below, with qmv_kernel */

extern "C" void rg_cuda_qgemv_set(bool on)
{
	g_qgemv_on = on;
}

extern "C" size_t rg_cuda_qtype_block_bytes(int type)
{
	switch (type) {
	case RG_GGUF_Q8_0:
		return 34;
	case RG_GGUF_Q4_0:
		return 18;
	case RG_GGUF_Q4_1:
		return 20;
	case RG_GGUF_Q4_K:
		return 144;
	case RG_GGUF_Q6_K:
		return 210;
	default:
		return 0;
	}
}

/* Values per block: 256 for the K-quants' super-blocks, else 32. */
static int qtype_values(int type)
{
	return type == RG_GGUF_Q4_K || type == RG_GGUF_Q6_K ? 256 : 32;
}

/* ---- the table of quantized weights: sorted by address, binary search (a few hundred entries,
 * one look-up per GEMM) ---- */

static int qw_index(const rg_cuda_ctx *c, const void *W, bool *found)
{
	int lo = 0, hi = c->qw_n;

	while (lo < hi) {
		const int mid = (lo + hi) / 2;

		if ((uintptr_t)c->qw[mid].W < (uintptr_t)W)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < c->qw_n && c->qw[lo].W == W;
	return lo;
}

static const rg_cuda_qweight *qw_find(const rg_cuda_ctx *c, const void *W)
{
	bool found;
	int i;

	if (!c->qw_n || !W)
		return NULL;
	i = qw_index(c, W, &found);
	return found ? &c->qw[i] : NULL;
}

/* Make the scratch at least `bytes` large: the new buffer is allocated before the old one is
 * freed, so a failure leaves the scratch as it was. cudaFree waits for kernels still using it. */
static rg_status qscratch_reserve(rg_cuda_ctx *c, size_t bytes)
{
	void *p = NULL;
	cudaError_t e;

	if (bytes <= c->qscratch_bytes)
		return RG_OK;
	e = cudaMalloc(&p, bytes);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		return rg_errorf(RG_ERR_OOM, "cannot allocate the %zu-byte dequantization scratch of "
				 "quantized weights on CUDA device %d", bytes, c->device);
	}
	cudaFree(c->qscratch_d);
	(void)cudaGetLastError();
	c->qscratch_d = p;
	c->qscratch_bytes = bytes;
	return RG_OK;
}

extern "C" rg_status rg_cuda_prepare_qweight(rg_cuda_ctx *ctx, void *W, int type, int N, int K)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	bool found;
	int i;
	rg_status st;

	if (!rg_cuda_qtype_block_bytes(type))
		return rg_errorf(RG_ERR_UNSUPPORTED, "cuda: no quantized GEMM for ggml type %d (%s)",
				 type, rg_gguf_type_name((uint32_t)type));
	if (!W)
		return RG_OK;
	if (N <= 0 || K <= 0 || K % qtype_values(type))
		return rg_errorf(RG_ERR_INVALID_INPUT, "cuda prepare_qweight: bad shape N=%d K=%d "
				 "(K a multiple of %d for %s)", N, K, qtype_values(type),
				 rg_gguf_type_name((uint32_t)type));
	if (c->capturing)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cuda prepare_qweight: called while capturing "
				 "a graph");
	i = qw_index(c, W, &found);
	if (found)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cuda prepare_qweight: weight %p already "
				 "declared", W);
	if ((st = rg_cuda_enter(c)) != RG_OK ||
	    (st = qscratch_reserve(c, (size_t)N * (size_t)K * (c->dt == RG_DTYPE_F32 ? 4 : 2))) !=
		    RG_OK)
		return st;
	qmv_attrs(c->device);
	if (c->qw_n == c->qw_cap) {
		const int cap = c->qw_cap ? 2 * c->qw_cap : 64;
		rg_cuda_qweight *q = (rg_cuda_qweight *)realloc(c->qw, (size_t)cap * sizeof(*q));

		if (!q)
			return rg_errorf(RG_ERR_OOM, "cannot grow the table of quantized weights");
		c->qw = q;
		c->qw_cap = cap;
	}
	memmove(&c->qw[i + 1], &c->qw[i], (size_t)(c->qw_n - i) * sizeof(c->qw[0]));
	c->qw[i] = (rg_cuda_qweight){W, type, N, K};
	c->qw_n++;
	return RG_OK;
}

extern "C" void rg_cuda_qweight_release(rg_cuda_ctx *ctx, const void *W)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	bool found;
	int i;

	if (!c->qw_n || !W)
		return;
	i = qw_index(c, W, &found);
	if (!found)
		return;
	memmove(&c->qw[i], &c->qw[i + 1], (size_t)(c->qw_n - i - 1) * sizeof(c->qw[0]));
	c->qw_n--;
}

extern "C" void rg_cuda_qweight_free_all(rg_cuda_ctx *ctx)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;

	free(c->qw);
	c->qw = NULL;
	c->qw_n = c->qw_cap = 0;
	cudaFree(c->qscratch_d);
	(void)cudaGetLastError();
	c->qscratch_d = NULL;
	c->qscratch_bytes = 0;
}

/* ---- block decoding, shared by both kernels ----
 * A "step" is 32 consecutive values of a row: one block of Q8_0 / Q4_0 / Q4_1, sub-block j = s % 8
 * of super-block s / 8 for Q4_K / Q6_K (rows hold whole super-blocks, so step s of a row, or of
 * the whole tensor, is found the same way). qraw: what lane t reads of step s, its values
 * 4t .. 4t+3 and 16+4t .. 16+4t+3 (the two groups of the lane's mma operands):
 *   Q8_0: dm = fp16 d; q0, q1 = the int8 quants of the two groups;
 *   Q4_0 / Q4_1: dm = d (Q4_1: d | m << 16); q0 = the 4 bytes whose low nibbles are the first
 *     group and high nibbles the second (ggml's order: qs[l] holds values l and l + 16);
 *   Q4_K: dm = d | dmin << 16; sc0..sc2 = the 12 bytes of packed 6-bit scales and mins
 *     (get_scale_min_k4); q0, q1 = the bytes of qs whose nibble (j odd: high) holds each group;
 *   Q6_K: dm = d; sc0 = the two int8 scales of the sub-block (one per 16 values); q0, q1 = the
 *     ql bytes (low 4 bits in a nibble), q2, q3 = the qh bytes (2 bits at 2 (j % 4)).
 * The formulas are those of ggml's dequantize_row_* (src/core/gguf.c's deq_*). */
struct qraw {
	uint32_t dm, q0, q1, q2, q3, sc0, sc1, sc2;
	int j;
};

template <int QT> struct qtype_traits;
template <> struct qtype_traits<RG_GGUF_Q8_0> { static constexpr int bytes = 34, values = 32; };
template <> struct qtype_traits<RG_GGUF_Q4_0> { static constexpr int bytes = 18, values = 32; };
template <> struct qtype_traits<RG_GGUF_Q4_1> { static constexpr int bytes = 20, values = 32; };
template <> struct qtype_traits<RG_GGUF_Q4_K> { static constexpr int bytes = 144, values = 256; };
template <> struct qtype_traits<RG_GGUF_Q6_K> { static constexpr int bytes = 210, values = 256; };

__device__ __forceinline__ uint32_t ld_u16(const char *p)
{
	return __ldcs((const unsigned short *)p);
}

__device__ __forceinline__ uint32_t ld_u16x2(const char *p) /* 4 bytes at a 2-byte boundary */
{
	return ld_u16(p) | ld_u16(p + 2) << 16;
}

__device__ __forceinline__ uint32_t ld_u32(const char *p) /* 4 bytes at a 4-byte boundary */
{
	return __ldcs((const unsigned int *)p);
}

/* Lane t's part of step s of the row (or tensor) starting at p. */
template <int QT> __device__ __forceinline__ qraw qload(const char *p, long long s, int t);
template <> __device__ __forceinline__ qraw qload<RG_GGUF_Q8_0>(const char *p, long long s, int t)
{
	const char *bp = p + (size_t)s * 34;
	qraw r = {};
	r.dm = ld_u16(bp);
	r.q0 = ld_u16x2(bp + 2 + 4 * t);
	r.q1 = ld_u16x2(bp + 18 + 4 * t);
	return r;
}
template <> __device__ __forceinline__ qraw qload<RG_GGUF_Q4_0>(const char *p, long long s, int t)
{
	const char *bp = p + (size_t)s * 18;
	qraw r = {};
	r.dm = ld_u16(bp);
	r.q0 = ld_u16x2(bp + 2 + 4 * t);
	return r;
}
template <> __device__ __forceinline__ qraw qload<RG_GGUF_Q4_1>(const char *p, long long s, int t)
{
	const char *bp = p + (size_t)s * 20;
	qraw r = {};
	r.dm = ld_u32(bp);
	r.q0 = ld_u32(bp + 4 + 4 * t);
	return r;
}
template <> __device__ __forceinline__ qraw qload<RG_GGUF_Q4_K>(const char *p, long long s, int t)
{
	const char *bp = p + (size_t)(s >> 3) * 144;
	const int j = (int)(s & 7);
	qraw r = {};
	r.dm = ld_u32(bp);
	r.sc0 = ld_u32(bp + 4);
	r.sc1 = ld_u32(bp + 8);
	r.sc2 = ld_u32(bp + 12);
	r.q0 = ld_u32(bp + 16 + 32 * (j >> 1) + 4 * t);
	r.q1 = ld_u32(bp + 16 + 32 * (j >> 1) + 16 + 4 * t);
	r.j = j;
	return r;
}
template <> __device__ __forceinline__ qraw qload<RG_GGUF_Q6_K>(const char *p, long long s, int t)
{
	const char *bp = p + (size_t)(s >> 3) * 210;
	const int j = (int)(s & 7), h = j >> 2;
	qraw r = {};
	r.q0 = ld_u16x2(bp + 64 * h + 32 * (j & 1) + 4 * t);
	r.q1 = ld_u16x2(bp + 64 * h + 32 * (j & 1) + 16 + 4 * t);
	r.q2 = ld_u16x2(bp + 128 + 32 * h + 4 * t);
	r.q3 = ld_u16x2(bp + 128 + 32 * h + 16 + 4 * t);
	r.sc0 = ld_u16(bp + 192 + 2 * j);
	r.dm = ld_u16(bp + 208);
	r.j = j;
	return r;
}

__device__ __forceinline__ float f16_bits(uint32_t h)
{
	return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int i)
{
	return (w >> (8 * i)) & 0xffu;
}

/* v[0..4) = the values 4t .. 4t+3 of the step, v[4..8) = 16+4t .. 16+4t+3, in fp32. */
template <int QT> __device__ __forceinline__ void qdeq(const qraw &r, float (&v)[8]);
template <> __device__ __forceinline__ void qdeq<RG_GGUF_Q8_0>(const qraw &r, float (&v)[8])
{
	const float d = f16_bits(r.dm);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[i] = d * (float)(int8_t)(r.q0 >> (8 * i));
		v[4 + i] = d * (float)(int8_t)(r.q1 >> (8 * i));
	}
}
template <> __device__ __forceinline__ void qdeq<RG_GGUF_Q4_0>(const qraw &r, float (&v)[8])
{
	const float d = f16_bits(r.dm);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[i] = d * (float)((int)((r.q0 >> (8 * i)) & 15u) - 8);
		v[4 + i] = d * (float)((int)((r.q0 >> (8 * i + 4)) & 15u) - 8);
	}
}
template <> __device__ __forceinline__ void qdeq<RG_GGUF_Q4_1>(const qraw &r, float (&v)[8])
{
	const float d = f16_bits(r.dm), m = f16_bits(r.dm >> 16);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[i] = d * (float)((r.q0 >> (8 * i)) & 15u) + m;
		v[4 + i] = d * (float)((r.q0 >> (8 * i + 4)) & 15u) + m;
	}
}
template <> __device__ __forceinline__ void qdeq<RG_GGUF_Q4_K>(const qraw &r, float (&v)[8])
{
	const int j = r.j, jj = j & 3, sh = 4 * (j & 1);
	uint32_t sc, mn;

	if (j < 4) { /* get_scale_min_k4 */
		sc = byte_of(r.sc0, jj) & 63u;
		mn = byte_of(r.sc1, jj) & 63u;
	} else {
		sc = (byte_of(r.sc2, jj) & 15u) | ((byte_of(r.sc0, jj) >> 2) & 0x30u);
		mn = (byte_of(r.sc2, jj) >> 4) | ((byte_of(r.sc1, jj) >> 2) & 0x30u);
	}
	const float dl = f16_bits(r.dm) * (float)sc, ml = f16_bits(r.dm >> 16) * (float)mn;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[i] = dl * (float)((r.q0 >> (8 * i + sh)) & 15u) - ml;
		v[4 + i] = dl * (float)((r.q1 >> (8 * i + sh)) & 15u) - ml;
	}
}
template <> __device__ __forceinline__ void qdeq<RG_GGUF_Q6_K>(const qraw &r, float (&v)[8])
{
	const float d = f16_bits(r.dm);
	const float da = d * (float)(int8_t)(r.sc0 & 0xffu), db = d * (float)(int8_t)(r.sc0 >> 8);
	const int lsh = 4 * ((r.j >> 1) & 1), hsh = 2 * (r.j & 3);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int a = (int)(((r.q0 >> (8 * i + lsh)) & 15u) |
				    ((r.q2 >> (8 * i + hsh)) & 3u) << 4);
		const int b = (int)(((r.q1 >> (8 * i + lsh)) & 15u) |
				    ((r.q3 >> (8 * i + hsh)) & 3u) << 4);
		v[i] = da * (float)(a - 32);
		v[4 + i] = db * (float)(b - 32);
	}
}

/* Two values rounded to T, packed as one 32-bit mma operand (a in the low half). */
template <typename T> __device__ __forceinline__ uint32_t pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float a, float b)
{
	__half2 h = __floats2half2_rn(a, b);
	return *(uint32_t *)&h;
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(a, b);
	return *(uint32_t *)&h;
}

/* ---- small M: the quantized twin of gemv.cu's kernel ---- */

/* c += a (16 x 16, row) x b (16 x 8, col), fp32 accumulators (PTX ISA, mma.m16n8k16 fragments). */
template <typename T>
__device__ __forceinline__ void qmma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
				     uint32_t a3, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void qmma<__half>(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
					     uint32_t a3, uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void qmma<__nv_bfloat16>(float (&c)[4], uint32_t a0, uint32_t a1,
						    uint32_t a2, uint32_t a3, uint32_t b0,
						    uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
	    "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* out[row][col], out[row][col + 1] (those < N); one 4-byte store when pair and col + 1 < N. */
template <typename T>
__device__ __forceinline__ void qstore(T *__restrict__ out, int row, int col, int N, bool pair,
				       float v0, float v1)
{
	T *o = out + (size_t)row * N + col;

	if (pair && col + 1 < N) {
		union { uint32_t u; T e[2]; } p;
		p.e[0] = rg_from_f<T>(v0);
		p.e[1] = rg_from_f<T>(v1);
		*(uint32_t *)o = p.u;
		return;
	}
	if (col < N)
		o[0] = rg_from_f<T>(v0);
	if (col + 1 < N)
		o[1] = rg_from_f<T>(v1);
}

/* U steps of one warp: this lane's block fields and its two 8-byte pieces of A rows g, g + 8. */
template <int U> struct qbatch {
	qraw w[U];
	uint2 xa0[U], xb0[U], xa1[U], xb1[U];
};

/* Load steps s0, s0 + warps, ... (U of them). Steps past the last read block 0 (their mma is
 * skipped); rows past N or M read row 0 (the callers' pointers), never stored. */
template <int QT, bool M16, int U>
__device__ __forceinline__ void qbatch_load(qbatch<U> &b, const char *wp, const uint2 *ap0,
					    const uint2 *ap1, int s0, int warps, int t, int steps)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int s = s0 + u * warps, ss = s < steps ? s : 0;
		const int e = ss * 8 + t; /* uint2 index of A[.][32 ss + 4 t] */

		b.w[u] = qload<QT>(wp, ss, t);
		b.xa0[u] = __ldg(ap0 + e);
		b.xb0[u] = __ldg(ap0 + e + 4);
		b.xa1[u] = M16 ? __ldg(ap1 + e) : make_uint2(0u, 0u);
		b.xb1[u] = M16 ? __ldg(ap1 + e + 4) : make_uint2(0u, 0u);
	}
}

template <typename T, int QT, int U>
__device__ __forceinline__ void qbatch_mma(float (&c)[4], const qbatch<U> &b, int s0, int warps,
					   int steps)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		float v[8];

		if (s0 + u * warps >= steps) /* warp-uniform: the mma.sync stay converged */
			break;
		qdeq<QT>(b.w[u], v);
		qmma<T>(c, b.xa0[u].x, b.xa1[u].x, b.xa0[u].y, b.xa1[u].y, pack2<T>(v[0], v[1]),
			pack2<T>(v[2], v[3]));
		qmma<T>(c, b.xb0[u].x, b.xb1[u].x, b.xb0[u].y, b.xb1[u].y, pack2<T>(v[4], v[5]),
			pack2<T>(v[6], v[7]));
	}
}

/* One CTA per 8 rows of W; blockDim.x = 32 x warps. M16: M > 8. K % 32 == 0, A 8-byte aligned. */
template <typename T, int QT, bool M16, int U>
__global__ void __launch_bounds__(32 * QGEMV_MAX_WARPS)
qgemv_kernel(const T *__restrict__ A, const char *__restrict__ W, const T *__restrict__ bias,
	     T *__restrict__ out, int M, int N, int K, rg_act act, bool pair)
{
	__shared__ float4 red[QGEMV_MAX_WARPS][32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
	const int g = lane >> 2, t = lane & 3;
	const int n0 = blockIdx.x * 8, steps = K >> 5;
	const bool a0_ok = g < M, a1_ok = M16 && g + 8 < M;
	const char *wp = W + (size_t)(n0 + g < N ? n0 + g : 0) * (K / qtype_traits<QT>::values) *
				     qtype_traits<QT>::bytes;
	const uint2 *ap0 = (const uint2 *)(A + (size_t)(a0_ok ? g : 0) * K);
	const uint2 *ap1 = (const uint2 *)(A + (size_t)(a1_ok ? g + 8 : 0) * K);
	float c[4] = {0.f, 0.f, 0.f, 0.f};
	qbatch<U> cur, nxt;

	rg_pdl_wait(); /* A comes from the kernel just before (programmatic launch) */
	qbatch_load<QT, M16, U>(cur, wp, ap0, ap1, warp, warps, t, steps);
	for (int s0 = warp; s0 < steps; s0 += U * warps) {
		const int s1 = s0 + U * warps;
		if (s1 < steps)
			qbatch_load<QT, M16, U>(nxt, wp, ap0, ap1, s1, warps, t, steps);
		qbatch_mma<T, QT, U>(c, cur, s0, warps, steps);
		cur = nxt;
	}
	if (warps > 1) {
		red[warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
		__syncthreads();
		if (warp != 0)
			return;
		for (int w = 1; w < warps; w++) {
			const float4 p = red[w][lane];
			c[0] += p.x;
			c[1] += p.y;
			c[2] += p.z;
			c[3] += p.w;
		}
	}
	/* c[0], c[1]: row g, columns n0 + 2t, n0 + 2t + 1; c[2], c[3]: row g + 8, same columns */
	const int col = n0 + 2 * t;
	float b0 = 0.f, b1 = 0.f;
	if (bias) {
		if (col < N)
			b0 = rg_to_f(bias[col]);
		if (col + 1 < N)
			b1 = rg_to_f(bias[col + 1]);
	}
	if (a0_ok)
		qstore(out, g, col, N, pair, rg_act_apply(c[0] + b0, act),
		       rg_act_apply(c[1] + b1, act));
	if (a1_ok)
		qstore(out, g + 8, col, N, pair, rg_act_apply(c[2] + b0, act),
		       rg_act_apply(c[3] + b1, act));
}

/* Warps per CTA: gemv.cu's rule (gemv_pick) on the number of 32-wide steps: 16 for few CTAs
 * and a long K, 4 for very many CTAs (an LM head), else 8; never more warps than steps. Not
 * swept for the quantized kernel yet. */
static int qgemv_warps(const rg_cuda_ctx *c, int N, int K)
{
	const int nct = (N + 7) / 8, steps = K / 32;
	int w = nct >= 8 * c->num_sms ? 4 : nct < 2 * c->num_sms && steps >= 32 ? 16 : 8;

	while (w > 4 && w > steps)
		w /= 2;
	return w;
}

template <typename T, int QT>
static cudaError_t qgemv_launch(const rg_cuda_ctx *c, const void *A, const void *W,
				const void *bias, void *out, int M, int N, int K, rg_act act)
{
	const bool pair = N % 2 == 0 && (uintptr_t)out % 4 == 0;
	const dim3 grid((unsigned)((N + 7) / 8)), block((unsigned)(32 * qgemv_warps(c, N, K)));

	if (M > 8)
		return rg_launch(c, qgemv_kernel<T, QT, true, 2>, grid, block, 0, (const T *)A,
				 (const char *)W, (const T *)bias, (T *)out, M, N, K, act, pair);
	return rg_launch(c, qgemv_kernel<T, QT, false, 2>, grid, block, 0, (const T *)A,
			 (const char *)W, (const T *)bias, (T *)out, M, N, K, act, pair);
}

template <typename T>
static cudaError_t qgemv_dispatch(const rg_cuda_ctx *c, int type, const void *A, const void *W,
				  const void *bias, void *out, int M, int N, int K, rg_act act)
{
	switch (type) {
	case RG_GGUF_Q8_0:
		return qgemv_launch<T, RG_GGUF_Q8_0>(c, A, W, bias, out, M, N, K, act);
	case RG_GGUF_Q4_0:
		return qgemv_launch<T, RG_GGUF_Q4_0>(c, A, W, bias, out, M, N, K, act);
	case RG_GGUF_Q4_K:
		return qgemv_launch<T, RG_GGUF_Q4_K>(c, A, W, bias, out, M, N, K, act);
	case RG_GGUF_Q6_K:
		return qgemv_launch<T, RG_GGUF_Q6_K>(c, A, W, bias, out, M, N, K, act);
	default: /* RG_GGUF_Q4_1: the table holds no other type */
		return qgemv_launch<T, RG_GGUF_Q4_1>(c, A, W, bias, out, M, N, K, act);
	}
}

/* ---- very small M (M <= 4): int8 dot products on the raw blocks (qmv_kernel) ----
 * The tensor-core kernel above keeps too few bytes in flight at batch 1: 4 lanes share one row's
 * 16 bytes of quants per step, loaded as 2-byte pieces, and every lane also loads 32 bytes of A
 * per step; at the 1B shape's Q4_0 step that is 0.57 TB/s, 12% of an H200
 * (bench/results/decode_quant_h200_20261203-1228.md). This kernel follows the structure of
 * llama.cpp's MMVQ (ggml-cuda mmvq.cu: activations quantized to 8 bits per 32 values, integer
 * dp4a dot products against the weight's quants, the block scales applied per block), with the
 * the activation quantization done in the kernel itself:
 *  - CTA b owns R consecutive rows of W (about 4 CTAs an SM); before it waits for the kernel
 *    before (griddepcontrol.wait), it prefetches the first 32 KB of its rows into L2: the weights
 *    do not depend on that kernel, so with programmatic dependent launch their first loads
 *    overlap its tail.
 *  - Then the CTA quantizes A (M rows) into shared memory, as int8 per 32 values with
 *    d = amax / 127 and s = d x sum(q) (ggml's q8_1): M K values of work, 1/R of the dot
 *    products', and no extra kernel or buffer per GEMM (a separate quantization kernel would add
 *    ~65 launches to a 1B decode step).
 *  - A warp takes a row, its lanes the row's "units" in turn: a block (Q8_0 / Q4_0 / Q4_1: 32
 *    values) or a quarter of a super-block (Q4_K: sub-blocks 2j, 2j + 1, which share their 32
 *    bytes of nibbles; Q6_K: 64 values that share their ql and qh bytes), loaded straight from
 *    global memory in 2- or 4-byte pieces (the blocks are only 2-byte aligned), two units a lane
 *    in flight, and dotted with __dp4a against the int8 A: Q8_0 d_w d_a sum(q_w q_a);
 *    Q4_0 d_w (d_a sum(q_w q_a) - 8 s_a); Q4_1 d_w d_a sum + m_w s_a; Q4_K per sub-block
 *    d sc d_a sum - dmin mn s_a; Q6_K per 16 values d sc d_a sum((q - 32) q_a).
 *  - The lanes' sums are added with shuffles in a fixed order (the result is deterministic: a
 *    graph replay equals the eager call bitwise); lane 0 applies bias and act and rounds once.
 * A first version streamed each CTA's rows through a cp.async shared-memory ring with a
 * __syncthreads per 4 KB slot: 0.7-1.3 TB/s at the 8B shapes (bench/kernels/qgemv_bench.c, H200
 * 2026-12-03 15:20), no faster than the tensor-core kernel.
 * Error: A is rounded to 8 bits per 32 values (relative ~1/254 of the block's largest value), as
 * llama.cpp's CUDA decode and ragged's CPU quantized GEMMs (qgemm.c) round it; the products are
 * exact integers, summed in fp32. */
#define QMV_THREADS 256
#define QMV_MAX_M 4
#define QMV_MAX_SMEM (200 * 1024)

static bool g_qmv_on = true;
static int g_qmv_cps = 4; /* CTAs per SM the rows per CTA aim at (rg_cuda_qmv_tune) */

extern "C" void rg_cuda_qmv_set(bool on)
{
	g_qmv_on = on;
}

extern "C" void rg_cuda_qmv_tune(int ctas_per_sm)
{
	g_qmv_cps = ctas_per_sm > 0 ? ctas_per_sm : 4;
}

/* Units per block, bytes per block. */
template <int QT> struct qmv_traits;
template <> struct qmv_traits<RG_GGUF_Q8_0> { static constexpr int upb = 1; };
template <> struct qmv_traits<RG_GGUF_Q4_0> { static constexpr int upb = 1; };
template <> struct qmv_traits<RG_GGUF_Q4_1> { static constexpr int upb = 1; };
template <> struct qmv_traits<RG_GGUF_Q4_K> { static constexpr int upb = 4; };
template <> struct qmv_traits<RG_GGUF_Q6_K> { static constexpr int upb = 4; };

/* 2- and 4-byte pieces of one row of W at byte x (x even / a multiple of 4), streamed
 * (ld.global.cs: read once per call). */
struct qmv_row {
	const char *p;
	__device__ __forceinline__ uint32_t u16(unsigned x) const
	{
		return __ldcs((const unsigned short *)(p + x));
	}
	__device__ __forceinline__ uint32_t u16x2(unsigned x) const
	{
		return u16(x) | u16(x + 2) << 16;
	}
	__device__ __forceinline__ uint32_t u32(unsigned x) const
	{
		return __ldcs((const unsigned int *)(p + x));
	}
};

/* The 8 ints (32 int8) of A's block kb of row m, and its (d, s). */
struct qmv_a {
	const int8_t *qa;
	const float2 *ds;
	int K;
	__device__ __forceinline__ void get(int m, int kb, int (&a)[8], float2 &f) const
	{
		const int4 *p = (const int4 *)(qa + (size_t)m * K + 32 * kb);
		const int4 x = p[0], y = p[1];

		a[0] = x.x; a[1] = x.y; a[2] = x.z; a[3] = x.w;
		a[4] = y.x; a[5] = y.y; a[6] = y.z; a[7] = y.w;
		f = ds[(size_t)m * (K / 32) + kb];
	}
};

/* qmv_do<QT, MT>::unit: acc[m] += the dot of one unit with A row m; x = the unit's block's CTA
 * byte offset, kb0 = that block's first 32-value block of A in its row, j = the unit in the
 * block. */
#define QMV_MLOOP for (int m = 0; m < MT; m++) if (m < M)

template <int QT, int MT> struct qmv_do;

template <int MT> struct qmv_do<RG_GGUF_Q8_0, MT> {
	static __device__ __forceinline__ void unit(float (&acc)[MT], const qmv_row &r,
						    const qmv_a &A, int M, unsigned x, int kb0, int)
	{
		int w[8], a[8];
		float2 f;
		const float d = f16_bits(r.u16(x));

#pragma unroll
		for (int i = 0; i < 8; i++)
			w[i] = (int)r.u16x2(x + 2 + 4 * i);
#pragma unroll
		QMV_MLOOP {
			int s = 0;
			A.get(m, kb0, a, f);
#pragma unroll
			for (int i = 0; i < 8; i++)
				s = __dp4a(w[i], a[i], s);
			acc[m] += d * f.x * (float)s;
		}
	}
};

/* Q4_0 / Q4_1: the 16 bytes of nibbles (qs[l]: value l low, l + 16 high) and the block's (d, m);
 * Q4_0 (Q40 true) values d (q - 8): acc += d (d_a sum(q q_a) - 8 s_a); Q4_1 values d q + m:
 * acc += d d_a sum(q q_a) + m s_a. */
template <int MT, bool Q40>
__device__ __forceinline__ void qmv_q4(float (&acc)[MT], const int (&w)[4], float d, float mn,
				       const qmv_a &A, int M, int kb0)
{
	int a[8];
	float2 f;

#pragma unroll
	QMV_MLOOP {
		int s = 0;
		A.get(m, kb0, a, f);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			s = __dp4a(w[i] & 0x0f0f0f0f, a[i], s);
			s = __dp4a((w[i] >> 4) & 0x0f0f0f0f, a[4 + i], s);
		}
		acc[m] += Q40 ? d * (f.x * (float)s - 8.f * f.y) : d * f.x * (float)s + mn * f.y;
	}
}

template <int MT> struct qmv_do<RG_GGUF_Q4_0, MT> {
	static __device__ __forceinline__ void unit(float (&acc)[MT], const qmv_row &r,
						    const qmv_a &A, int M, unsigned x, int kb0, int)
	{
		int w[4];
		const float d = f16_bits(r.u16(x));

#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = (int)r.u16x2(x + 2 + 4 * i);
		qmv_q4<MT, true>(acc, w, d, 0.f, A, M, kb0);
	}
};

template <int MT> struct qmv_do<RG_GGUF_Q4_1, MT> {
	static __device__ __forceinline__ void unit(float (&acc)[MT], const qmv_row &r,
						    const qmv_a &A, int M, unsigned x, int kb0, int)
	{
		int w[4];
		const uint32_t dm = r.u32(x);

#pragma unroll
		for (int i = 0; i < 4; i++)
			w[i] = (int)r.u32(x + 4 + 4 * i);
		qmv_q4<MT, false>(acc, w, f16_bits(dm), f16_bits(dm >> 16), A, M, kb0);
	}
};

/* Q4_K unit j: sub-blocks 2j (low nibbles of qs[32j ..)) and 2j + 1 (high nibbles). */
template <int MT> struct qmv_do<RG_GGUF_Q4_K, MT> {
	static __device__ __forceinline__ void unit(float (&acc)[MT], const qmv_row &r,
						    const qmv_a &A, int M, unsigned x, int kb0, int j)
	{
		int w[8], a[8];
		float2 f;
		const uint32_t dm = r.u32(x), s0 = r.u32(x + 4), s1 = r.u32(x + 8), s2 = r.u32(x + 12);
		const float d = f16_bits(dm), dmin = f16_bits(dm >> 16);
		float dl[2], ml[2];

#pragma unroll
		for (int h = 0; h < 2; h++) { /* get_scale_min_k4 of sub-block 2j + h */
			const int sb = 2 * j + h, jj = sb & 3;
			uint32_t sc, mn;
			if (sb < 4) {
				sc = byte_of(s0, jj) & 63u;
				mn = byte_of(s1, jj) & 63u;
			} else {
				sc = (byte_of(s2, jj) & 15u) | ((byte_of(s0, jj) >> 2) & 0x30u);
				mn = (byte_of(s2, jj) >> 4) | ((byte_of(s1, jj) >> 2) & 0x30u);
			}
			dl[h] = d * (float)sc;
			ml[h] = dmin * (float)mn;
		}
#pragma unroll
		for (int i = 0; i < 8; i++)
			w[i] = (int)r.u32(x + 16 + 32 * j + 4 * i);
#pragma unroll
		QMV_MLOOP {
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int s = 0;
				A.get(m, kb0 + 2 * j + h, a, f);
#pragma unroll
				for (int i = 0; i < 8; i++)
					s = __dp4a((w[i] >> (4 * h)) & 0x0f0f0f0f, a[i], s);
				acc[m] += dl[h] * f.x * (float)s - ml[h] * f.y;
			}
		}
	}
};

/* Q6_K unit j = 2h + p: values 128h + 32p + l (low nibbles of ql[64h + 32p + l], qh bits 2p) and
 * 128h + 64 + 32p + l (high nibbles, qh bits 4 + 2p), l < 32; one int8 scale per 16 values. */
template <int MT> struct qmv_do<RG_GGUF_Q6_K, MT> {
	static __device__ __forceinline__ void unit(float (&acc)[MT], const qmv_row &r,
						    const qmv_a &A, int M, unsigned x, int kb0, int j)
	{
		const int h = j >> 1, p = j & 1;
		int ql[8], qh[8], a[8];
		float2 f;
		const float d = f16_bits(r.u16(x + 208));
		const uint32_t sc_lo = r.u16(x + 192 + 8 * h + 2 * p);
		const uint32_t sc_hi = r.u16(x + 192 + 8 * h + 4 + 2 * p);

#pragma unroll
		for (int i = 0; i < 8; i++) {
			ql[i] = (int)r.u16x2(x + 64 * h + 32 * p + 4 * i);
			qh[i] = (int)r.u16x2(x + 128 + 32 * h + 4 * i);
		}
#pragma unroll
		QMV_MLOOP {
#pragma unroll
			for (int g = 0; g < 2; g++) { /* g 0: low nibbles, g 1: high */
				const uint32_t sc = g ? sc_hi : sc_lo;
				int s0 = 0, s1 = 0;
				A.get(m, kb0 + 4 * h + p + 2 * g, a, f);
#pragma unroll
				for (int i = 0; i < 8; i++) {
					const int q = ((ql[i] >> (4 * g)) & 0x0f0f0f0f) |
						      (((qh[i] >> (2 * p + 4 * g)) & 0x03030303) << 4);
					const int qs = (int)__vsub4((unsigned)q, 0x20202020u);
					if (i < 4)
						s0 = __dp4a(qs, a[i], s0);
					else
						s1 = __dp4a(qs, a[i], s1);
				}
				acc[m] += d * f.x *
					  ((float)(int8_t)(sc & 0xffu) * (float)s0 +
					   (float)(int8_t)(sc >> 8) * (float)s1);
			}
		}
	}
};

/* One CTA per R rows of W, QMV_THREADS threads; dynamic shared memory: MT x K int8 of A and
 * MT x K / 32 float2 (d, s). GLU: A is (M, 2K), gate half then up half, and the values quantized
 * are glu_act(gate) * up rounded to T (act is glu_act; no output activation, no bias):
 * rg_cuda_qgemm_glu, bit-identical to rg_op_act_mul then the plain call. */
template <typename T, int QT, int MT, bool GLU>
__global__ void __launch_bounds__(QMV_THREADS)
qmv_kernel(const T *__restrict__ A, const char *__restrict__ W, const T *__restrict__ bias,
	   T *__restrict__ out, int M, int N, int K, int R, rg_act act)
{
	extern __shared__ __align__(16) unsigned char qmv_smem[];
	constexpr int BB = qtype_traits<QT>::bytes, UPB = qmv_traits<QT>::upb;
	constexpr int VPB = qtype_traits<QT>::values;
	const int tid = threadIdx.x, kblocks = K / 32, bpr = K / VPB, upr = bpr * UPB;
	const int warp = tid >> 5, lane = tid & 31;
	const int n0 = blockIdx.x * R, nr = N - n0 < R ? N - n0 : R;
	const size_t rb = (size_t)bpr * BB;
	const char *wc = W + (size_t)n0 * rb;
	int8_t *qa = (int8_t *)qmv_smem;
	float2 *ds = (float2 *)(qa + (size_t)MT * K);
	const qmv_a qv = {qa, ds, K};

	/* the CTA's first 32 KB of W into L2 while A is quantized (W does not depend on the
	 * kernel before: with programmatic launch this overlaps its tail) */
	for (size_t off = (size_t)tid * 128; off < (size_t)nr * rb && off < 32768;
	     off += (size_t)QMV_THREADS * 128)
		asm volatile("prefetch.global.L2 [%0];" ::"l"(wc + off));
	rg_pdl_wait(); /* A comes from the kernel just before */
	for (int i = tid; i < M * kblocks; i += QMV_THREADS) { /* A's q8_1 blocks */
		const int m = i / kblocks, kb = i - m * kblocks;
		const uint2 *ap = (const uint2 *)(A + (size_t)m * (GLU ? 2 * K : K) + 32 * kb);
		float v[32], amax = 0.f, id, dd;
		int sum = 0;
		uint32_t *qo = (uint32_t *)(qa + (size_t)m * K + 32 * kb);

#pragma unroll
		for (int e = 0; e < 8; e++) {
			union { uint2 u; T t[4]; } x, up;
			x.u = __ldg(ap + e);
			if (GLU)
				up.u = __ldg(ap + K / 4 + e); /* K values further: the up half */
#pragma unroll
			for (int k = 0; k < 4; k++) {
				float f = rg_to_f(x.t[k]);
				if (GLU) /* as act_mul_kernel stores it: rounded to T */
					f = rg_to_f(rg_from_f<T>(
						(act == RG_ACT_SILU ? f / (1.f + __expf(-f))
								    : rg_act_apply(f, act)) *
						rg_to_f(up.t[k])));
				v[4 * e + k] = f;
				amax = fmaxf(amax, fabsf(v[4 * e + k]));
			}
		}
		dd = amax / 127.f;
		id = amax > 0.f ? 127.f / amax : 0.f;
#pragma unroll
		for (int e = 0; e < 8; e++) {
			uint32_t pk = 0;
#pragma unroll
			for (int k = 0; k < 4; k++) {
				const int q = __float2int_rn(v[4 * e + k] * id);
				sum += q;
				pk |= (uint32_t)(q & 0xff) << (8 * k);
			}
			qo[e] = pk;
		}
		ds[(size_t)m * kblocks + kb] = make_float2(dd, dd * (float)sum);
	}
	__syncthreads();
	for (int r = warp; r < nr; r += QMV_THREADS / 32) { /* a warp per row, lanes over units */
		const qmv_row wr = {wc + (size_t)r * rb};
		float acc[MT];

#pragma unroll
		for (int m = 0; m < MT; m++)
			acc[m] = 0.f;
#pragma unroll 2
		for (int uu = lane; uu < upr; uu += 32)
			qmv_do<QT, MT>::unit(acc, wr, qv, M, (unsigned)(uu / UPB) * BB,
					     (uu / UPB) * (VPB / 32), uu % UPB);
#pragma unroll
		for (int m = 0; m < MT; m++) {
			const float v = rg_warp_sum(acc[m]); /* a fixed order: deterministic */
			if (m < M && lane == 0) {
				const int n = n0 + r;
				out[(size_t)m * N + n] = rg_from_f<T>(rg_act_apply(
					v + (bias ? rg_to_f(bias[n]) : 0.f), GLU ? RG_ACT_NONE : act));
			}
		}
	}
}

/* The launch shape: rows per CTA (a multiple of 8, about g_qmv_cps CTAs an SM) and dynamic
 * shared memory; false when it does not fit (the tensor-core kernel runs then). */
static bool qmv_shape(const rg_cuda_ctx *c, int type, int M, int N, int K, int *R,
		      size_t *smem)
{
	const int target = g_qmv_cps * (c && c->num_sms > 0 ? c->num_sms : 132);
	const int mt = M <= 1 ? 1 : M <= 2 ? 2 : 4;
	int r = 8 * ((N + 8 * target - 1) / (8 * target));

	(void)type;
	*R = r < 8 ? 8 : r;
	*smem = (size_t)mt * K + (size_t)mt * (K / 32) * 8;
	return *smem <= QMV_MAX_SMEM;
}

template <typename T, int QT, int MT, bool GLU>
static cudaError_t qmv_launch_mt(const rg_cuda_ctx *c, const void *A, const void *W,
				 const void *bias, void *out, int M, int N, int K, rg_act act,
				 int R, size_t smem)
{
	return rg_launch(c, qmv_kernel<T, QT, MT, GLU>, dim3((unsigned)((N + R - 1) / R)),
			 dim3(QMV_THREADS), smem, (const T *)A, (const char *)W, (const T *)bias,
			 (T *)out, M, N, K, R, act);
}

template <typename T, int QT, bool GLU>
static cudaError_t qmv_launch_t(const rg_cuda_ctx *c, const void *A, const void *W,
				const void *bias, void *out, int M, int N, int K, rg_act act, int R,
				size_t smem)
{
	if (M <= 1)
		return qmv_launch_mt<T, QT, 1, GLU>(c, A, W, bias, out, M, N, K, act, R, smem);
	if (M <= 2)
		return qmv_launch_mt<T, QT, 2, GLU>(c, A, W, bias, out, M, N, K, act, R, smem);
	return qmv_launch_mt<T, QT, 4, GLU>(c, A, W, bias, out, M, N, K, act, R, smem);
}

template <typename T, bool GLU = false>
static cudaError_t qmv_dispatch(const rg_cuda_ctx *c, int type, const void *A, const void *W,
				const void *bias, void *out, int M, int N, int K, rg_act act, int R,
				size_t smem)
{
#define QMV_T(QT) qmv_launch_t<T, QT, GLU>(c, A, W, bias, out, M, N, K, act, R, smem)
	switch (type) {
	case RG_GGUF_Q8_0: return QMV_T(RG_GGUF_Q8_0);
	case RG_GGUF_Q4_0: return QMV_T(RG_GGUF_Q4_0);
	case RG_GGUF_Q4_K: return QMV_T(RG_GGUF_Q4_K);
	case RG_GGUF_Q6_K: return QMV_T(RG_GGUF_Q6_K);
	default: return QMV_T(RG_GGUF_Q4_1);
	}
#undef QMV_T
}

/* Allow every instantiation QMV_MAX_SMEM of dynamic shared memory (current device; once per
 * device and process; at prepare time, never while capturing). */
template <typename T, int QT, bool GLU>
static void qmv_attr_g(void)
{
	cudaFuncSetAttribute(qmv_kernel<T, QT, 1, GLU>,
			     cudaFuncAttributeMaxDynamicSharedMemorySize, QMV_MAX_SMEM);
	cudaFuncSetAttribute(qmv_kernel<T, QT, 2, GLU>,
			     cudaFuncAttributeMaxDynamicSharedMemorySize, QMV_MAX_SMEM);
	cudaFuncSetAttribute(qmv_kernel<T, QT, 4, GLU>,
			     cudaFuncAttributeMaxDynamicSharedMemorySize, QMV_MAX_SMEM);
}

template <typename T, int QT>
static void qmv_attr_t(void)
{
	qmv_attr_g<T, QT, false>();
	qmv_attr_g<T, QT, true>();
}

static void qmv_attrs(int device)
{
	static bool done[64];

	if (device < 0 || device >= 64 || done[device])
		return;
	done[device] = true;
	qmv_attr_t<__half, RG_GGUF_Q8_0>(); qmv_attr_t<__half, RG_GGUF_Q4_0>();
	qmv_attr_t<__half, RG_GGUF_Q4_1>(); qmv_attr_t<__half, RG_GGUF_Q4_K>();
	qmv_attr_t<__half, RG_GGUF_Q6_K>();
	qmv_attr_t<__nv_bfloat16, RG_GGUF_Q8_0>(); qmv_attr_t<__nv_bfloat16, RG_GGUF_Q4_0>();
	qmv_attr_t<__nv_bfloat16, RG_GGUF_Q4_1>(); qmv_attr_t<__nv_bfloat16, RG_GGUF_Q4_K>();
	qmv_attr_t<__nv_bfloat16, RG_GGUF_Q6_K>();
	(void)cudaGetLastError();
}

/* Whether qmv_kernel takes the call, and its launch shape (qgemv.cuh: rg_cuda_qmv_applies). */
static bool qmv_takes(const rg_cuda_ctx *c, rg_dtype dt, int type, const void *A, const void *W,
		      int M, int N, int K, int *R, size_t *smem)
{
	/* qmv's work grows with M (a dp4a pass per row of A) where the tensor-core kernel's does not:
	 * on an H200 (qgemv_bench, 2026-12-03 15:18) qmv was 1.3-3.1x faster at M = 1 on every
	 * 1B / 8B shape and type, and at M = 4 1.0-1.4x faster for K <= 4096 but 0.63-0.79x at
	 * K = 8192 / 14336: so M <= 4 up to K = 4096, M <= 2 up to 8192, else M = 1 */
	const int max_m = K <= 4096 ? QMV_MAX_M : K <= 8192 ? 2 : 1;

	/* the live switch (an environment read) last: only for calls the kernel would take */
	return g_qgemv_on && g_qmv_on && (dt == RG_DTYPE_F16 || dt == RG_DTYPE_BF16) && M >= 1 &&
	       M <= max_m && (uintptr_t)A % 8 == 0 && (uintptr_t)W % 16 == 0 &&
	       rg_cuda_qtype_block_bytes(type) && qmv_shape(c, type, M, N, K, R, smem) &&
	       rg_tuning_bool(RG_TUNE_QMV);
}

extern "C" bool rg_cuda_qmv_applies(const rg_cuda_ctx *ctx, rg_dtype dt, int type, const void *A,
				    const void *W, int M, int N, int K)
{
	int R;
	size_t smem;

	return qmv_takes(ctx, dt, type, A, W, M, N, K, &R, &smem);
}

extern "C" rg_status rg_cuda_qgemm_glu(rg_cuda_ctx *ctx, rg_dtype dt, const void *x,
				       const void *W, void *out, int M, int N, int K, rg_act act,
				       bool *quantized, bool *done)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	const rg_cuda_qweight *q = qw_find(c, W);
	cudaError_t e;
	int R;
	size_t smem;

	*done = false;
	*quantized = q != NULL;
	if (!q || q->N != N || q->K != K || !qmv_takes(c, dt, q->type, x, W, M, N, K, &R, &smem))
		return RG_OK; /* the caller runs act_mul, then the plain GEMM */
	e = dt == RG_DTYPE_F16
		    ? qmv_dispatch<__half, true>(c, q->type, x, W, NULL, out, M, N, K, act, R, smem)
		    : qmv_dispatch<__nv_bfloat16, true>(c, q->type, x, W, NULL, out, M, N, K, act,
							R, smem);
	if (e != cudaSuccess)
		return rg_cuda_err(e, "launch of qmv_kernel (GLU input)");
	*done = true;
	return rg_cuda_launch_check("qmv_kernel (GLU input)");
}

/* ---- larger M: dequantize into the scratch ---- */

/* out (nsteps x 32) T = the values of the weight's nsteps 32-value steps: one thread per step,
 * 32 values as 16-byte stores. */
template <typename T, int QT>
__global__ void qdequant_kernel(const char *__restrict__ W, T *__restrict__ out, long long nblocks)
{
	constexpr int VEC = 16 / sizeof(T);

	/* programmatic launch: the previous GEMM on the scratch must be done before it is rewritten */
	rg_pdl_wait();
	for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks;
	     b += (long long)gridDim.x * blockDim.x) {
		float v[32], v8[8];

#pragma unroll
		for (int t = 0; t < 4; t++) {
			qdeq<QT>(qload<QT>(W, b, t), v8);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				v[4 * t + i] = v8[i];
				v[16 + 4 * t + i] = v8[4 + i];
			}
		}
#pragma unroll
		for (int i = 0; i < 32; i += VEC) {
			float f[VEC];
#pragma unroll
			for (int j = 0; j < VEC; j++)
				f[j] = v[i + j];
			rg_store_vec<T, VEC>(out + b * 32 + i, f);
		}
	}
}

template <typename T>
static cudaError_t qdequant_launch(const rg_cuda_ctx *c, int type, const void *W, void *out,
				   long long nblocks)
{
	const long long want = (nblocks + 255) / 256, cap = 16LL * c->num_sms;
	const dim3 grid((unsigned)(want < cap ? want : cap)), block(256);

	switch (type) {
	case RG_GGUF_Q8_0:
		return rg_launch(c, qdequant_kernel<T, RG_GGUF_Q8_0>, grid, block, 0,
				 (const char *)W, (T *)out, nblocks);
	case RG_GGUF_Q4_0:
		return rg_launch(c, qdequant_kernel<T, RG_GGUF_Q4_0>, grid, block, 0,
				 (const char *)W, (T *)out, nblocks);
	case RG_GGUF_Q4_K:
		return rg_launch(c, qdequant_kernel<T, RG_GGUF_Q4_K>, grid, block, 0,
				 (const char *)W, (T *)out, nblocks);
	case RG_GGUF_Q6_K:
		return rg_launch(c, qdequant_kernel<T, RG_GGUF_Q6_K>, grid, block, 0,
				 (const char *)W, (T *)out, nblocks);
	default:
		return rg_launch(c, qdequant_kernel<T, RG_GGUF_Q4_1>, grid, block, 0,
				 (const char *)W, (T *)out, nblocks);
	}
}

extern "C" rg_status rg_cuda_qgemm(rg_cuda_ctx *ctx, rg_dtype dt, const void *A, const void **W,
				   const void *bias, void *out, int M, int N, int K, rg_act act,
				   bool *done)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	const rg_cuda_qweight *q = qw_find(c, *W);
	const size_t esz = dt == RG_DTYPE_F32 ? 4 : 2;
	cudaError_t e;
	int R;
	size_t smem;

	*done = false;
	if (!q)
		return RG_OK;
	if (q->N != N || q->K != K)
		return rg_errorf(RG_ERR_INVALID_INPUT, "gemm: quantized weight declared (%d, %d), "
				 "called with N=%d K=%d", q->N, q->K, N, K);
	if (qmv_takes(c, dt, q->type, A, *W, M, N, K, &R, &smem)) {
		e = dt == RG_DTYPE_F16
			    ? qmv_dispatch<__half>(c, q->type, A, *W, bias, out, M, N, K, act, R,
						   smem)
			    : qmv_dispatch<__nv_bfloat16>(c, q->type, A, *W, bias, out, M, N, K,
							  act, R, smem);
		if (e != cudaSuccess)
			return rg_cuda_err(e, "launch of qmv_kernel");
		*done = true;
		return rg_cuda_launch_check("qmv_kernel");
	}
	if (g_qgemv_on && (dt == RG_DTYPE_F16 || dt == RG_DTYPE_BF16) && M >= 1 &&
	    M <= RG_QGEMV_MAX_M && (uintptr_t)A % 8 == 0) {
		e = dt == RG_DTYPE_F16
			    ? qgemv_dispatch<__half>(c, q->type, A, *W, bias, out, M, N, K, act)
			    : qgemv_dispatch<__nv_bfloat16>(c, q->type, A, *W, bias, out, M, N, K,
							    act);
		if (e != cudaSuccess)
			return rg_cuda_err(e, "launch of qgemv_kernel");
		*done = true;
		return rg_cuda_launch_check("qgemv_kernel");
	}
	if ((size_t)N * (size_t)K * esz > c->qscratch_bytes)
		return rg_errorf(RG_ERR_INTERNAL, "gemm: the dequantization scratch (%zu bytes) is "
				 "smaller than a (%d, %d) weight of dtype %d", c->qscratch_bytes, N,
				 K, (int)dt);
#define QDEQ(T) qdequant_launch<T>(c, q->type, *W, c->qscratch_d, (long long)N * (K / 32))
	e = RG_CUDA_DISPATCH_DT(dt, QDEQ);
#undef QDEQ
	if (e != cudaSuccess)
		return rg_cuda_err(e, "launch of qdequant_kernel");
	*W = c->qscratch_d;
	return rg_cuda_launch_check("qdequant_kernel");
}
