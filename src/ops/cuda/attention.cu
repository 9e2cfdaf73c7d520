/* Variable-length multi-head self-attention over packed sequences (cu_seqlens), with the optional
 * segment mask of ConcatBatching (TCB sec. 4). Semantics: src/ops/ops.h, rg_op_attention.
 *
 * Algorithm: FlashAttention-style tiling with an online softmax (Dao et al., FlashAttention,
 * sec. 3.1; the varlen grid of FlashAttention-2 / ByteTransformer's fused MHA): no score matrix is
 * ever stored, so any sequence length works in O(tile) shared memory.
 *  - grid (n_seq, num_heads, ceil(max_seqlen / 32)); one CTA (4 warps) owns 32 queries of one head
 *    of one sequence; CTAs past the end of a shorter sequence exit at once, so only real tokens
 *    are computed (padding-free).
 *  - the CTA stages its Q tile (pre-multiplied by scale * log2(e), so exp2 gives e^x) and then,
 *    tile by tile, 32 keys and values of the same sequence and head in shared memory as float32.
 *  - each warp owns 8 queries; for one query, lane j scores key j of the tile (a dot product of
 *    head_dim terms; K rows are padded by one float so the 32 lanes hit 32 banks), the warp takes
 *    the tile's max, rescales its running sum and accumulator (online softmax, in f32), and adds
 *    p_j * V_j with p_j broadcast by shuffles; lane l accumulates output dims l, l+32, l+64, l+96.
 *  - masked keys (past the sequence, or seg mismatch / seg < 0) score -inf; a query that never sees
 *    a key keeps l = 0 and writes zeros.
 *  - with a relative position bias (MPNet; REL = true), lane j adds log2(e) *
 *    rel_bias[h][clamp(key - query)] (read through the read-only cache: the table is a few KiB)
 *    to its score; REL = false, the instantiation the other families run, has no bias code.
 *  - with DeBERTa's disentangled terms (DIS = true), lane j adds log2(e) * (c2p[query row][h][e]
 *    + p2c[key row][h][e]), e = idx[clamp(query - key)], to its score (the tables are per token,
 *    read through the cache); DIS = true serves fp32, and fp16/bf16 where the tensor-core kernel
 *    does not take the terms (head_dim 128 or not 32/64, or RAGGED_DEBERTA_TC below).
 * head_dim: any value 1..128 (NCH = ceil(head_dim / 32) output dims per lane). CUDA cores, f32.
 * fp16/bf16 with head_dim 32, 64 or 128 (16-byte aligned buffers) go to the tensor-core kernel of
 * attention_tc.cu instead (with DeBERTa's terms: head_dim 32 or 64); this kernel serves fp32 and
 * the other head_dims. */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/common.cuh"

#define RG_ATT_WARPS 4
#define RG_ATT_QPW 8                               /* queries per warp */
#define RG_ATT_BQ (RG_ATT_WARPS * RG_ATT_QPW)      /* queries per CTA */
#define RG_ATT_BK 32                               /* keys per tile (= lanes) */
#define RG_ATT_MAX_D 128
#define RG_ATT_LOG2E 1.4426950408889634f           /* softmax through exp2 */

/* RAGGED_DEBERTA_TC, DeBERTa's fast paths (issue 21): unset or "1", both on; "0" both off (the
 * CUDA-core tables kernel and the CUDA-core DIS attention, for A/B runs); "tables" only the
 * cuBLASLt tables; "attn" only the tensor-core attention; anything else warns and means "1"
 * (core/tuning.c). Read at every call (a getenv per layer is noise next to a launch), so a
 * benchmark can switch it in one process; a CUDA graph keeps the path it was captured with. */
enum { DTC_TABLES = 1, DTC_ATTN = 2 };

static int deberta_tc_mode(void)
{
	switch (rg_tuning_enum(RG_TUNE_DEBERTA_TC)) {
	case RG_DEBERTA_TC_OFF: return 0;
	case RG_DEBERTA_TC_TABLES: return DTC_TABLES;
	case RG_DEBERTA_TC_ATTN: return DTC_ATTN;
	case RG_DEBERTA_TC_ON: break;
	}
	return DTC_TABLES | DTC_ATTN;
}

static size_t attn_smem_bytes(int D)
{
	return sizeof(float) * ((size_t)RG_ATT_BQ * D + (size_t)RG_ATT_BK * (D + 1) +
				(size_t)RG_ATT_BK * D) + sizeof(int) * (RG_ATT_BQ + RG_ATT_BK);
}

template <typename T, int NCH, bool REL, bool DIS>
__global__ void __launch_bounds__(RG_ATT_WARPS * 32, 4)
attention_kernel(const T *__restrict__ qkv, const int32_t *__restrict__ cu_seqlens,
		 const int32_t *__restrict__ seg, const float *__restrict__ rel_bias, int rel_max,
		 rg_attn_disent dis, int max_seqlen, int num_heads, int D, float qscale,
		 T *__restrict__ out, int *flag)
{
	extern __shared__ float sm[];
	float *Qs = sm;                                  /* [BQ][D]   */
	float *Ks = Qs + RG_ATT_BQ * D;                  /* [BK][D+1] */
	float *Vs = Ks + RG_ATT_BK * (D + 1);            /* [BK][D]   */
	int *segq = (int *)(Vs + RG_ATT_BK * D);         /* [BQ]      */
	int *segk = segq + RG_ATT_BQ;                    /* [BK]      */

	const int s = blockIdx.x, h = blockIdx.y, q0 = blockIdx.z * RG_ATT_BQ;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int H = num_heads * D;
	const size_t ld = (size_t)3 * H;
	const int t0 = cu_seqlens[s], L = cu_seqlens[s + 1] - t0;

	if (L < 0 || L > max_seqlen) {
		/* Only the host-unchecked device copy of cu_seqlens can get here. */
		if (tid == 0 && h == 0 && blockIdx.z == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_SEQLEN);
		if (L < 0)
			return;
	}
	if (q0 >= L)
		return;
	const int nq = min(RG_ATT_BQ, L - q0);
	const T *base = qkv + (size_t)t0 * ld + (size_t)h * D; /* Q of token 0, head h */
	/* REL: this head's bias table centred on distance 0 */
	const float *rel_h = REL ? rel_bias + (size_t)h * (2 * rel_max + 1) + rel_max : NULL;

	for (int e = tid; e < RG_ATT_BQ * D; e += blockDim.x) {
		int r = e / D, col = e - r * D;
		Qs[e] = r < nq ? rg_to_f(base[(size_t)(q0 + r) * ld + col]) * qscale : 0.f;
	}
	for (int r = tid; r < RG_ATT_BQ; r += blockDim.x)
		segq[r] = seg ? (r < nq ? seg[t0 + q0 + r] : -1) : 0;

	float m[RG_ATT_QPW], l[RG_ATT_QPW], acc[RG_ATT_QPW][NCH];
#pragma unroll
	for (int i = 0; i < RG_ATT_QPW; i++) {
		m[i] = -INFINITY;
		l[i] = 0.f;
#pragma unroll
		for (int c = 0; c < NCH; c++)
			acc[i][c] = 0.f;
	}

	for (int k0 = 0; k0 < L; k0 += RG_ATT_BK) {
		__syncthreads(); /* the previous tile is consumed (and Qs/segq are written) */
		for (int e = tid; e < RG_ATT_BK * D; e += blockDim.x) {
			int r = e / D, col = e - r * D;
			float kv = 0.f, vv = 0.f;
			if (k0 + r < L) {
				const T *row = base + (size_t)(k0 + r) * ld + col;
				kv = rg_to_f(row[H]);
				vv = rg_to_f(row[2 * H]);
			}
			Ks[r * (D + 1) + col] = kv;
			Vs[r * D + col] = vv;
		}
		for (int r = tid; r < RG_ATT_BK; r += blockDim.x)
			segk[r] = seg ? (k0 + r < L ? seg[t0 + k0 + r] : -1) : 0;
		__syncthreads();

		const bool in_seq = k0 + lane < L;
#pragma unroll
		for (int i = 0; i < RG_ATT_QPW; i++) {
			const int qr = warp * RG_ATT_QPW + i;
			if (qr >= nq)
				break; /* warp-uniform */
			const bool vis = in_seq && (!seg || (segk[lane] >= 0 && segk[lane] == segq[qr]));
			float sc = -INFINITY;
			if (vis) {
				const float *q = Qs + qr * D, *k = Ks + lane * (D + 1);
				float dot = 0.f;
#pragma unroll 8
				for (int d = 0; d < D; d++)
					dot = fmaf(q[d], k[d], dot);
				sc = dot;
				if (REL) {
					const int dist = min(max(k0 + lane - (q0 + qr), -rel_max),
							     rel_max);
					sc = fmaf(__ldg(rel_h + dist), RG_ATT_LOG2E, dot);
				}
				if (DIS) {
					/* distance query - key; rows of the packed batch */
					const int dist = min(max(q0 + qr - (k0 + lane), -dis.R), dis.R);
					const int e = __ldg(dis.idx + dis.R + dist);
					const size_t ldt = (size_t)num_heads * dis.width;
					const size_t col = (size_t)h * dis.width + e;
					float b = 0.f;

					if (dis.c2p)
						b = rg_to_f(((const T *)dis.c2p)[(size_t)(t0 + q0 + qr) *
										 ldt + col]);
					if (dis.p2c)
						b += rg_to_f(((const T *)dis.p2c)[(size_t)(t0 + k0 + lane) *
										  ldt + col]);
					sc = fmaf(b, RG_ATT_LOG2E, sc);
				}
			}
			const float m_new = fmaxf(m[i], rg_warp_max(sc));
			if (m_new == -INFINITY)
				continue; /* nothing visible so far for this query (warp-uniform) */
			const float p = vis ? exp2f(sc - m_new) : 0.f;
			const float corr = exp2f(m[i] - m_new); /* 0 when m[i] = -inf */
			l[i] = l[i] * corr + rg_warp_sum(p);
			m[i] = m_new;
#pragma unroll
			for (int c = 0; c < NCH; c++)
				acc[i][c] *= corr;
#pragma unroll 4
			for (int j = 0; j < RG_ATT_BK; j++) {
				const float pj = __shfl_sync(0xffffffffu, p, j);
				const float *v = Vs + j * D;
#pragma unroll
				for (int c = 0; c < NCH; c++) {
					const int d = lane + 32 * c;
					if (d < D)
						acc[i][c] = fmaf(pj, v[d], acc[i][c]);
				}
			}
		}
	}

#pragma unroll
	for (int i = 0; i < RG_ATT_QPW; i++) {
		const int qr = warp * RG_ATT_QPW + i;
		if (qr >= nq)
			break;
		const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
		T *o = out + (size_t)(t0 + q0 + qr) * H + (size_t)h * D;
#pragma unroll
		for (int c = 0; c < NCH; c++) {
			const int d = lane + 32 * c;
			if (d < D)
				o[d] = rg_from_f<T>(acc[i][c] * inv);
		}
	}
}

/* Raise the dynamic shared-memory limit of one instantiation when it needs more than 48 KiB
 * (head_dim > ~120). Done once per context and instantiation (bit: 0..35 of attn_smem_set). */
template <typename T, int NCH, bool REL, bool DIS>
static rg_status attn_launch(rg_cuda_ctx *c, int bit, const void *qkv, const int32_t *cu_seqlens,
			     const int32_t *seg, const float *rel_bias, int rel_max,
			     const rg_attn_disent &dis, int n_seq, int max_seqlen, int num_heads, int D,
			     float qscale, void *out)
{
	size_t smem = attn_smem_bytes(D);
	dim3 grid(n_seq, num_heads, (max_seqlen + RG_ATT_BQ - 1) / RG_ATT_BQ);

	if (smem > 48 * 1024 && !(c->attn_smem_set & (1ull << bit))) {
		if ((int)smem > c->max_smem_optin)
			return rg_errorf(RG_ERR_UNSUPPORTED, "attention: head_dim %d needs %zu bytes of "
					 "shared memory, device allows %d", D, smem,
					 c->max_smem_optin);
		rg_status st = rg_cuda_err(cudaFuncSetAttribute(attention_kernel<T, NCH, REL, DIS>,
					   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
					   "cudaFuncSetAttribute(attention)");
		if (st != RG_OK)
			return st;
		c->attn_smem_set |= 1ull << bit;
	}
	attention_kernel<T, NCH, REL, DIS><<<grid, RG_ATT_WARPS * 32, smem, c->stream>>>(
		(const T *)qkv, cu_seqlens, seg, rel_bias, rel_max, dis, max_seqlen, num_heads, D,
		qscale, (T *)out, c->flag_d);
	return rg_cuda_launch_check("attention_kernel");
}

/* The instantiation with the bias code only when there is a table (its smem bits 12 higher), the
 * one with the disentangled terms only when there are some (24 higher; the tensor-core kernel
 * keeps its own bits, attn_tc_smem_set). */
template <typename T, int NCH>
static rg_status attn_launch_rel(rg_cuda_ctx *c, int bit, const void *qkv,
				 const int32_t *cu_seqlens, const int32_t *seg, const float *rel_bias,
				 int rel_max, const rg_attn_disent *dis, int n_seq, int max_seqlen,
				 int num_heads, int D, float qscale, void *out)
{
	const rg_attn_disent none = {NULL, NULL, NULL, 0, 0};

	if (dis)
		return attn_launch<T, NCH, false, true>(c, bit + 24, qkv, cu_seqlens, seg, NULL, 0,
							*dis, n_seq, max_seqlen, num_heads, D,
							qscale, out);
	if (rel_bias)
		return attn_launch<T, NCH, true, false>(c, bit + 12, qkv, cu_seqlens, seg, rel_bias,
							rel_max, none, n_seq, max_seqlen,
							num_heads, D, qscale, out);
	return attn_launch<T, NCH, false, false>(c, bit, qkv, cu_seqlens, seg, NULL, 0, none, n_seq,
						 max_seqlen, num_heads, D, qscale, out);
}

template <typename T>
static rg_status attn_dispatch_nch(rg_cuda_ctx *c, int dtbit, const void *qkv,
				   const int32_t *cu_seqlens, const int32_t *seg,
				   const float *rel_bias, int rel_max, const rg_attn_disent *dis,
				   int n_seq, int max_seqlen, int num_heads, int D, float qscale,
				   void *out)
{
	switch ((D + 31) / 32) {
	case 1:
		return attn_launch_rel<T, 1>(c, dtbit * 4 + 0, qkv, cu_seqlens, seg, rel_bias, rel_max,
					 dis, n_seq, max_seqlen, num_heads, D, qscale, out);
	case 2:
		return attn_launch_rel<T, 2>(c, dtbit * 4 + 1, qkv, cu_seqlens, seg, rel_bias, rel_max,
					 dis, n_seq, max_seqlen, num_heads, D, qscale, out);
	case 3:
		return attn_launch_rel<T, 3>(c, dtbit * 4 + 2, qkv, cu_seqlens, seg, rel_bias, rel_max,
					 dis, n_seq, max_seqlen, num_heads, D, qscale, out);
	default:
		return attn_launch_rel<T, 4>(c, dtbit * 4 + 3, qkv, cu_seqlens, seg, rel_bias, rel_max,
					 dis, n_seq, max_seqlen, num_heads, D, qscale, out);
	}
}

extern "C" rg_status rg_cuda_attention(rg_cuda_ctx *ctx, rg_dtype dt, const void *qkv,
				       const int32_t *cu_seqlens, const int32_t *cu_seqlens_h,
				       int n_seq, int max_seqlen, int num_heads, int head_dim,
				       float scale, const int32_t *seg, const float *rel_bias,
				       int rel_max, const rg_attn_disent *dis, void *out)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	const float qscale = scale * RG_ATT_LOG2E; /* softmax through exp2 */
	rg_status st;

	if (head_dim > RG_ATT_MAX_D)
		return rg_errorf(RG_ERR_UNSUPPORTED, "attention: head_dim %d > %d is not supported on "
				 "CUDA", head_dim, RG_ATT_MAX_D);
	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "attention: unknown dtype %d", (int)dt);
	if (num_heads > 65535 || (max_seqlen + RG_ATT_BQ - 1) / RG_ATT_BQ > 65535)
		return rg_errorf(RG_ERR_UNSUPPORTED, "attention: %d heads / max_seqlen %d exceed the "
				 "launch grid", num_heads, max_seqlen);
	if (cu_seqlens_h) {
		if (n_seq > 0 && cu_seqlens_h[0] != 0)
			return rg_errorf(RG_ERR_INVALID_INPUT, "attention: cu_seqlens[0] = %d, not 0",
					 cu_seqlens_h[0]);
		for (int s = 0; s < n_seq; s++) {
			int L = cu_seqlens_h[s + 1] - cu_seqlens_h[s];
			if (L < 0 || L > max_seqlen)
				return rg_errorf(RG_ERR_INVALID_INPUT, "attention: sequence %d has "
						 "length %d (max_seqlen %d)", s, L, max_seqlen);
		}
	}
	if (n_seq == 0 || max_seqlen == 0)
		return RG_OK;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	/* fp16/bf16 with head_dim 32/64/128 (DeBERTa's terms: 32/64, unless RAGGED_DEBERTA_TC
	 * says otherwise): the tensor-core kernel (attention_tc.cu), which adds the bias or the
	 * terms to the raw scores, in units of 1/scale (so they need scale != 0) */
	if (rg_cuda_attention_tc_ok(dt, head_dim, qkv, out) &&
	    (!dis || (rg_cuda_attention_tc_dis_ok(dt, head_dim, qkv, out) &&
		      (deberta_tc_mode() & DTC_ATTN))) &&
	    (!(rel_bias || dis) || scale != 0.f))
		return rg_cuda_attention_tc(c, dt, qkv, cu_seqlens, seg, rel_bias, rel_max, dis,
					    n_seq, max_seqlen, num_heads, head_dim, qscale,
					    rel_bias || dis ? 1.f / scale : 0.f, out);
	switch (dt) {
	case RG_DTYPE_F32:
		return attn_dispatch_nch<float>(c, 0, qkv, cu_seqlens, seg, rel_bias, rel_max, dis,
						n_seq,
						max_seqlen, num_heads, head_dim, qscale, out);
	case RG_DTYPE_F16:
		return attn_dispatch_nch<__half>(c, 1, qkv, cu_seqlens, seg, rel_bias, rel_max, dis,
						 n_seq,
						 max_seqlen, num_heads, head_dim, qscale, out);
	case RG_DTYPE_BF16:
		return attn_dispatch_nch<__nv_bfloat16>(c, 2, qkv, cu_seqlens, seg, rel_bias,
							rel_max, dis, n_seq, max_seqlen, num_heads,
							head_dim, qscale, out);
	}
	return rg_errorf(RG_ERR_UNSUPPORTED, "attention: unknown dtype %d", (int)dt);
}

/* rg_op_rel_tables: out[t][h][w] = scale * X[t, head h] . P[w, head h columns] for X = Q (koff 0,
 * P = pos_key) or K (koff H, P = pos_query). 2 n_tokens width head_dim FLOPs per table, about a
 * 1/(3 heads) share of the layer's QKV GEMM at width 2 * 256, head_dim 64; but with K = head_dim
 * the product is bound by writing the (n_tokens, num_heads, width) table (204 MB per table and
 * layer for deberta-v3-base at 16.6k tokens in fp16).
 *  - by default one cuBLASLt strided-batched GEMM per table (rel_tables_gemm: batch = the heads,
 *    A = the head's Q or K columns of the packed QKV rows, ld 3H, batch stride head_dim; W = the
 *    head's columns of pos_key / pos_query, ld H, batch stride head_dim; out rows of num_heads *
 *    width, batch stride width; alpha = scale; fp32 accumulation), on tensor cores in fp16/bf16;
 *  - with RAGGED_DEBERTA_TC=0 or "attn", the CUDA-core kernel below: a CTA owns 32 tokens x 32
 *    table columns of one head, both 32 x head_dim tiles staged as f32 in shared memory (rows
 *    padded by one float), 256 threads with 4 outputs each, f32 accumulation. */
#define RG_REL_BT 32

template <typename T>
__global__ void __launch_bounds__(256)
rel_tables_kernel(const T *__restrict__ qkv, const T *__restrict__ pos, int koff, int n_tokens,
		  int num_heads, int D, int width, float scale, T *__restrict__ out)
{
	extern __shared__ float sm[];
	float *Xs = sm;                         /* [32][D+1] */
	float *Ps = Xs + RG_REL_BT * (D + 1);   /* [32][D+1] */
	const int t0 = blockIdx.x * RG_REL_BT, h = blockIdx.y, w0 = blockIdx.z * RG_REL_BT;
	const int H = num_heads * D, tid = threadIdx.x;

	for (int e = tid; e < RG_REL_BT * D; e += blockDim.x) {
		const int r = e / D, col = e - r * D;
		Xs[r * (D + 1) + col] = t0 + r < n_tokens ?
			rg_to_f(qkv[(size_t)(t0 + r) * 3 * H + koff + (size_t)h * D + col]) : 0.f;
		Ps[r * (D + 1) + col] = w0 + r < width ?
			rg_to_f(pos[(size_t)(w0 + r) * H + (size_t)h * D + col]) : 0.f;
	}
	__syncthreads();
	const int r = tid >> 3, c0 = tid & 7;
	float acc[4] = {0.f, 0.f, 0.f, 0.f};

	for (int d = 0; d < D; d++) {
		const float x = Xs[r * (D + 1) + d];
#pragma unroll
		for (int k = 0; k < 4; k++)
			acc[k] = fmaf(x, Ps[(c0 + 8 * k) * (D + 1) + d], acc[k]);
	}
	if (t0 + r >= n_tokens)
		return;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const int w = w0 + c0 + 8 * k;
		if (w < width)
			out[(size_t)(t0 + r) * num_heads * width + (size_t)h * width + w] =
				rg_from_f<T>(acc[k] * scale);
	}
}

template <typename T>
static rg_status rel_tables_launch(rg_cuda_ctx *c, const void *qkv, int n_tokens, int num_heads,
				   int D, const void *pos_key, const void *pos_query, int width,
				   float scale, void *c2p, void *p2c)
{
	const size_t smem = sizeof(float) * 2 * RG_REL_BT * (size_t)(D + 1);
	dim3 grid((n_tokens + RG_REL_BT - 1) / RG_REL_BT, num_heads,
		  (width + RG_REL_BT - 1) / RG_REL_BT);
	rg_status st = RG_OK;

	if (pos_key) {
		rel_tables_kernel<T><<<grid, 256, smem, c->stream>>>(
			(const T *)qkv, (const T *)pos_key, 0, n_tokens, num_heads, D, width, scale,
			(T *)c2p);
		st = rg_cuda_launch_check("rel_tables_kernel");
	}
	if (st == RG_OK && pos_query) {
		rel_tables_kernel<T><<<grid, 256, smem, c->stream>>>(
			(const T *)qkv, (const T *)pos_query, num_heads * D, n_tokens, num_heads, D,
			width, scale, (T *)p2c);
		st = rg_cuda_launch_check("rel_tables_kernel");
	}
	return st;
}

/* One table through cuBLASLt (rg_cuda_gemm_strided, gemm.cu): out_h (n_tokens, width) = scale *
 * X_h (n_tokens, head_dim) x P_h^T, P_h (width, head_dim), for each head h. */
static rg_status rel_tables_gemm(rg_cuda_ctx *c, rg_dtype dt, const void *qkv, int koff,
				 int n_tokens, int num_heads, int D, const void *pos, int width,
				 float scale, void *out)
{
	const size_t esz = dt == RG_DTYPE_F32 ? 4 : 2;
	const int H = num_heads * D;
	const rg_cuda_gemm_shape s = {n_tokens, width, D, num_heads, 3 * H, H, num_heads * width,
				      D, D, width};

	return rg_cuda_gemm_strided(c, dt, (const char *)qkv + (size_t)koff * esz, pos, out, &s,
				    scale);
}

extern "C" rg_status rg_cuda_rel_tables(rg_cuda_ctx *ctx, rg_dtype dt, const void *qkv,
					int n_tokens, int num_heads, int head_dim,
					const void *pos_key, const void *pos_query, int width,
					float scale, void *c2p, void *p2c)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "rel_tables: unknown dtype %d", (int)dt);
	if (deberta_tc_mode() & DTC_TABLES) {
		st = RG_OK;
		if (pos_key)
			st = rel_tables_gemm(c, dt, qkv, 0, n_tokens, num_heads, head_dim, pos_key,
					     width, scale, c2p);
		if (st == RG_OK && pos_query)
			st = rel_tables_gemm(c, dt, qkv, num_heads * head_dim, n_tokens, num_heads,
					     head_dim, pos_query, width, scale, p2c);
		return st;
	}

	if (head_dim > RG_ATT_MAX_D)
		return rg_errorf(RG_ERR_UNSUPPORTED, "rel_tables: head_dim %d > %d is not supported "
				 "on CUDA", head_dim, RG_ATT_MAX_D);
	if (num_heads > 65535 || (width + RG_REL_BT - 1) / RG_REL_BT > 65535)
		return rg_errorf(RG_ERR_UNSUPPORTED, "rel_tables: %d heads / width %d exceed the "
				 "launch grid", num_heads, width);
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	switch (dt) {
	case RG_DTYPE_F32:
		return rel_tables_launch<float>(c, qkv, n_tokens, num_heads, head_dim, pos_key,
						pos_query, width, scale, c2p, p2c);
	case RG_DTYPE_F16:
		return rel_tables_launch<__half>(c, qkv, n_tokens, num_heads, head_dim, pos_key,
						 pos_query, width, scale, c2p, p2c);
	case RG_DTYPE_BF16:
		return rel_tables_launch<__nv_bfloat16>(c, qkv, n_tokens, num_heads, head_dim,
							pos_key, pos_query, width, scale, c2p,
							p2c);
	}
	return rg_errorf(RG_ERR_UNSUPPORTED, "rel_tables: unknown dtype %d", (int)dt);
}
