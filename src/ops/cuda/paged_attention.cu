/* Causal attention of a decoder step over the paged KV cache (PagedAttention, Kwon et al.
 * SOSP'23), for a mixed batch of prefill chunks and decode tokens, with split-KV
 * (flash-decoding) when the batch has too few (token, KV head) pairs to fill the GPU: the split
 * count follows the batch's shape (n_tokens, KV heads, the longest context), and each token's
 * own keys are cut evenly into that many ranges.
 *
 * Work decomposition: one CTA per (new token t, KV head kvh, key split z). The CTA holds the
 * G = num_heads / num_kv_heads query heads that share kvh (grouped-query attention: each K and V
 * row is read once for the whole group) and walks the keys 0..positions[t] of t's sequence
 * that fall in split z, C_KEYS at a time, through the block table:
 *   1. scores: one thread per key reads the key's head_dim values and dots them with the G
 *      query vectors (in shared memory, scaled), plus the relative position bias when the
 *      descriptor has one (T5's decoder; such batches skip the tensor-core prefill);
 *   2. per head, the chunk's max and exp-sum, merged into a running (max, sum) (online softmax,
 *      Milakov & Gimelshein 2018; FlashAttention's rescaling);
 *   3. each warp takes every NW-th key of the chunk and its lanes the head dims (lane, lane + 32,
 *      ...): acc[g][d] += p[g][k] * V[k][d] in registers, several keys in flight per warp (the
 *      loop is unrolled), V read once for the whole group; the NW warps' sums are added once, at
 *      the end, through shared memory. (The first version had one thread per (head, dim) walk
 *      all the chunk's keys in turn: 128 dependent loads per thread, 11-12 us per layer at 32-160
 *      keys on an H100, the largest kernel of a decode step in the 2026-11-25 trace.)
 * With one split the CTA writes the normalised output; with several, each split writes its
 * (max, sum, acc) to a float32 workspace and paged_attn_combine merges them (FlashDecoding,
 * Dao et al. 2023). All arithmetic in float32.
 *
 * Fresh sequences (no cached keys: a prompt's first chunk) of at least PA_FRESH_MIN rows go to the
 * tensor-core causal kernel instead (rg_cuda_prefill_attention_tc, when the descriptor carries
 * this step's keys and values): for a 512-token prompt this kernel, one CTA per query row,
 * re-reads every key once per query (55 us per layer at SmolLM2's shape, 157 at GPT-2's, in the
 * 2026-11-25 H100 trace). Its CTAs of such sequences then return at once (skip_min). */
#include "ops/cuda/attention_tc.cuh"

#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"

#define PA_THREADS 128
#define PA_KEYS 128    /* keys per chunk: one per thread in the score phase */
#define PA_MAX_GROUP 8 /* query heads per KV head */
#define PA_SPLIT_MIN 64 /* fewest keys a split is cut for */
#define PA_FRESH_MIN 16 /* fewest new rows of a fresh sequence for the tensor-core prefill */

template <typename T, int HD>
__global__ void __launch_bounds__(PA_THREADS)
paged_attn_kernel(const T *__restrict__ q, int q_stride, const T *__restrict__ k_cache,
		  const T *__restrict__ v_cache, const int32_t *__restrict__ block_tables,
		  int max_blocks, int block_size, const int32_t *__restrict__ cu_q, int n_seq,
		  const int32_t *__restrict__ context_lens, int num_heads, int num_kv_heads,
		  float scale, const float *__restrict__ rel_bias, int rel_max, int n_splits,
		  float *__restrict__ part, T *__restrict__ out, int out_stride, int skip_min,
		  int skip_all)
{
	constexpr int NW = PA_THREADS / 32;
	constexpr int DPL = (HD + 31) / 32; /* head dims per lane in the p V phase */
	__shared__ float q_s[PA_MAX_GROUP][HD];
	__shared__ float s_s[PA_MAX_GROUP][PA_KEYS];
	__shared__ float m_s[PA_MAX_GROUP], l_s[PA_MAX_GROUP], r_s[PA_MAX_GROUP];
	__shared__ int blk_s[PA_KEYS];
	__shared__ float red_s[NW][PA_MAX_GROUP * HD]; /* the warps' p V sums, added at the end */

	const int t = blockIdx.x, kvh = blockIdx.y, z = blockIdx.z;
	const int G = num_heads / num_kv_heads, h0 = kvh * G;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	int lo = 0, hi = n_seq - 1; /* the sequence of row t: cu_q[seq] <= t < cu_q[seq + 1] */
	while (lo < hi) {
		const int mid = (lo + hi + 1) >> 1;
		if (__ldg(cu_q + mid) <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	const int seq = lo;
	if (skip_min && cu_q[seq + 1] - cu_q[seq] >= skip_min &&
	    (skip_all || context_lens[seq] == cu_q[seq + 1] - cu_q[seq]))
		return; /* the tensor-core prefill wrote its rows */
	/* keys 0..position of row t: causal within the sequence */
	const int ctx = context_lens[seq] - (cu_q[seq + 1] - t) + 1;
	/* this token's keys cut into n_splits ranges of a multiple of 16 keys (the split count is
	 * fixed per launch, so a CUDA graph holds for any context length; empty ranges write an
	 * empty partial) */
	const int per = ((ctx + n_splits - 1) / n_splits + 15) & ~15;
	const int k_begin = z * per;
	const int k_end = min(ctx, k_begin + per);
	const int32_t *bt = block_tables + (size_t)seq * max_blocks;
	const size_t row = (size_t)num_kv_heads * HD; /* elements per cache slot */
	float acc[PA_MAX_GROUP][DPL];

	rg_pdl_wait();
	for (int i = tid; i < G * HD; i += PA_THREADS) {
		int g = i / HD, d = i - g * HD;
		q_s[g][d] = rg_to_f(q[(size_t)t * q_stride + (size_t)(h0 + g) * HD + d]) * scale;
	}
	if (tid < G) {
		m_s[tid] = -INFINITY;
		l_s[tid] = 0.f;
	}
#pragma unroll
	for (int g = 0; g < PA_MAX_GROUP; g++)
#pragma unroll
		for (int i = 0; i < DPL; i++)
			acc[g][i] = 0.f;
	__syncthreads();

	for (int c0 = k_begin; c0 < k_end; c0 += PA_KEYS) {
		const int nk = min(PA_KEYS, k_end - c0);
		/* 1. scores of this chunk */
		if (tid < nk) {
			const int j = c0 + tid;
			const int b = bt[j / block_size];
			const size_t slot = (size_t)b * block_size + (j % block_size);
			const T *kr = k_cache + slot * row + (size_t)kvh * HD;
			float dot[PA_MAX_GROUP];

			blk_s[tid] = (int)slot;
#pragma unroll
			for (int g = 0; g < PA_MAX_GROUP; g++)
				dot[g] = 0.f;
			constexpr int VEC = 16 / sizeof(T) < HD ? 16 / sizeof(T) : HD;
#pragma unroll 4
			for (int d = 0; d < HD; d += VEC) {
				float kv[VEC];
				rg_load_vec<T, VEC>(kr + d, kv);
#pragma unroll
				for (int g = 0; g < PA_MAX_GROUP; g++) {
					if (g < G) {
#pragma unroll
						for (int e = 0; e < VEC; e++)
							dot[g] += q_s[g][d + e] * kv[e];
					}
				}
			}
			if (rel_bias) { /* T5: the bias at distance j - (ctx - 1), clamped */
				const int r = max(j - (ctx - 1), -rel_max) + rel_max;
#pragma unroll
				for (int g = 0; g < PA_MAX_GROUP; g++)
					if (g < G)
						dot[g] += __ldg(rel_bias + (size_t)(h0 + g) *
								       (2 * rel_max + 1) + r);
			}
#pragma unroll
			for (int g = 0; g < PA_MAX_GROUP; g++)
				if (g < G)
					s_s[g][tid] = dot[g];
		}
		__syncthreads();
		/* 2. online softmax per head: warp w takes heads w, w + 4, ... */
		for (int g = warp; g < G; g += PA_THREADS / 32) {
			float mx = -INFINITY, sum = 0.f;
			for (int i = lane; i < nk; i += 32)
				mx = fmaxf(mx, s_s[g][i]);
			mx = rg_warp_max(mx);
			const float m_new = fmaxf(m_s[g], mx);
			for (int i = lane; i < nk; i += 32) {
				float e = __expf(s_s[g][i] - m_new);
				s_s[g][i] = e;
				sum += e;
			}
			sum = rg_warp_sum(sum);
			if (lane == 0) {
				const float r = __expf(m_s[g] - m_new); /* 0 on the first chunk */
				r_s[g] = r;
				l_s[g] = l_s[g] * r + sum;
				m_s[g] = m_new;
			}
		}
		__syncthreads();
		/* 3. acc = acc * r + p V: warp w takes keys w, w + NW, ...; lane the dims lane + 32 i */
#pragma unroll
		for (int g = 0; g < PA_MAX_GROUP; g++) {
			const float r = g < G ? r_s[g] : 0.f;
#pragma unroll
			for (int i = 0; i < DPL; i++)
				acc[g][i] *= r;
		}
		{
			const T *vb = v_cache + (size_t)kvh * HD;
#pragma unroll 8
			for (int k = warp; k < nk; k += NW) {
				const T *vr = vb + (size_t)blk_s[k] * row;
				float v[DPL];
#pragma unroll
				for (int i = 0; i < DPL; i++) {
					const int d = lane + 32 * i;
					v[i] = (HD % 32 == 0 || d < HD) ? rg_to_f(vr[d]) : 0.f;
				}
#pragma unroll
				for (int g = 0; g < PA_MAX_GROUP; g++) {
					if (g < G) {
						const float p = s_s[g][k];
#pragma unroll
						for (int i = 0; i < DPL; i++)
							acc[g][i] += p * v[i];
					}
				}
			}
		}
		__syncthreads();
	}

	/* add the warps' sums */
#pragma unroll
	for (int g = 0; g < PA_MAX_GROUP; g++) {
		if (g < G) {
#pragma unroll
			for (int i = 0; i < DPL; i++) {
				const int d = lane + 32 * i;
				if (HD % 32 == 0 || d < HD)
					red_s[warp][g * HD + d] = acc[g][i];
			}
		}
	}
	__syncthreads();
	for (int i = tid; i < G * HD; i += PA_THREADS) {
		const int g = i / HD, d = i - g * HD, h = h0 + g;
		float a = 0.f;
#pragma unroll
		for (int w = 0; w < NW; w++)
			a += red_s[w][i];
		if (n_splits == 1) {
			const float l = l_s[g];
			out[(size_t)t * out_stride + (size_t)h * HD + d] =
				rg_from_f<T>(l > 0.f ? a / l : 0.f);
		} else {
			/* partial (t, h, z): [m, l, acc[HD]] */
			float *pp = part + (((size_t)t * num_heads + h) * n_splits + z) * (HD + 2);
			if (d == 0) {
				pp[0] = m_s[g];
				pp[1] = l_s[g];
			}
			pp[2 + d] = a;
		}
	}
}

/* Merge the n_splits partials of (t, h): one CTA per (t, h), threads over head_dim. */
template <typename T, int HD>
__global__ void paged_attn_combine(const float *__restrict__ part, int num_heads, int n_splits,
				   T *__restrict__ out, int out_stride)
{
	const int t = blockIdx.x, h = blockIdx.y;
	const float *pp = part + ((size_t)t * num_heads + h) * n_splits * (HD + 2);
	float m = -INFINITY, l = 0.f;

	for (int z = 0; z < n_splits; z++)
		m = fmaxf(m, pp[z * (HD + 2)]);
	for (int d = threadIdx.x; d < HD; d += blockDim.x) {
		float a = 0.f;
		l = 0.f;
		for (int z = 0; z < n_splits; z++) {
			const float mz = pp[z * (HD + 2)];
			const float w = mz == -INFINITY ? 0.f : __expf(mz - m);
			l += pp[z * (HD + 2) + 1] * w;
			a += pp[z * (HD + 2) + 2 + d] * w;
		}
		out[(size_t)t * out_stride + (size_t)h * HD + d] = rg_from_f<T>(l > 0.f ? a / l : 0.f);
	}
}

/* How many key splits a batch of n_tokens x num_kv_heads CTAs should use so that about two
 * waves of CTAs cover the SMs, each split at least PA_SPLIT_MIN keys and at most max_splits. */
static int paged_attn_splits(const rg_cuda_ctx *c, int n_tokens, int num_kv_heads,
			     int max_context, int max_splits)
{
	long long ctas = (long long)n_tokens * num_kv_heads;
	int want = (int)((2LL * c->num_sms + ctas - 1) / ctas);
	int most = (max_context + PA_SPLIT_MIN - 1) / PA_SPLIT_MIN;

	if (want > most)
		want = most;
	if (want > max_splits)
		want = max_splits;
	return want < 1 ? 1 : want;
}

template <typename T, int HD>
static rg_status paged_attn_launch(rg_cuda_ctx *c, const rg_attn_desc *d, const void *q, int ldq,
				   const void *k_cache, const void *v_cache, void *out, int skip_min,
				   int skip_all)
{
	const size_t ws_floats = RG_CUDA_WORKSPACE_BYTES / sizeof(float);
	const int n_tokens = d->cu_seqlens_q_h[d->n_seq], ld_out = d->num_heads * HD;
	/* with fresh rows skipped, one split (the combine would overwrite their output) */
	int splits = skip_min ? 1
			      : paged_attn_splits(c, n_tokens, d->num_kv_heads, d->max_context_len, 64);
	float *ws = (float *)c->workspace_d;

	/* the workspace (cuBLASLt's, free between GEMMs on this stream) bounds the splits:
	 * n_tokens * num_heads * splits * (HD + 2) floats */
	while (splits > 1 && (size_t)n_tokens * d->num_heads * splits * (HD + 2) > ws_floats)
		splits--;
	dim3 grid(n_tokens, d->num_kv_heads, splits);
	cudaError_t e = rg_launch(c, paged_attn_kernel<T, HD>, grid, dim3(PA_THREADS), 0, (const T *)q,
				  ldq, (const T *)k_cache, (const T *)v_cache, d->block_tables,
				  d->max_blocks_per_seq, d->block_size, d->cu_seqlens_q, d->n_seq,
				  d->context_lens, d->num_heads, d->num_kv_heads, d->scale,
				  d->rel_bias, d->rel_max, splits, ws, (T *)out, ld_out, skip_min,
				  skip_all);
	if (e != cudaSuccess)
		return rg_cuda_err(e, "paged_attn_kernel launch");
	if (splits > 1) {
		paged_attn_combine<T, HD><<<dim3(n_tokens, d->num_heads), HD < 128 ? HD : 128, 0,
					    c->stream>>>(ws, d->num_heads, splits, (T *)out, ld_out);
		return rg_cuda_launch_check("paged_attn_combine");
	}
	return RG_OK;
}

/* RAGGED_PREFILL_TC: "0" turns the tensor-core prefill off (A/B runs, a fallback); "fresh" sends
 * only fresh sequences (no cached keys) to it, their keys read from this step's QKV rows;
 * "paged" sends every prefill chunk of >= PA_FRESH_MIN rows, keys read through the block table;
 * unset, "auto" or "1" (the default; anything else warns and means "auto", core/tuning.c):
 * "paged" when some such chunk has cached keys (a prompt's later chunks, the rest of a prompt
 * after a prefix-cache hit), else "fresh" (verified on an H200 2026-11-26:
 * tests/gpu/decoder_cuda_cpu.py plain and under memcheck). Read at every call (a getenv per
 * layer is noise next to a launch), so a benchmark can switch it in one process. */
enum { PTC_OFF = 0, PTC_FRESH = 1, PTC_PAGED = 2, PTC_AUTO = 3 };

static int prefill_tc_mode(void)
{
	switch (rg_tuning_enum(RG_TUNE_PREFILL_TC)) {
	case RG_PREFILL_TC_OFF: return PTC_OFF;
	case RG_PREFILL_TC_FRESH: return PTC_FRESH;
	case RG_PREFILL_TC_PAGED: return PTC_PAGED;
	case RG_PREFILL_TC_AUTO:
	case RG_PREFILL_TC_ON: break;
	}
	return PTC_AUTO;
}

/* The sequences of >= PA_FRESH_MIN new rows (fresh ones only, unless the mode resolves to
 * "paged") on tensor cores, when the descriptor allows it. *skip_min: 0 when none ran (the paged
 * kernel takes every row), PA_FRESH_MIN when some did (its CTAs skip them; *skip_all: every
 * sequence of that many rows, not only the fresh ones), -1 when every sequence did (no paged
 * launch). */
static rg_status prefill_tc(rg_cuda_ctx *c, rg_dtype dt, const rg_attn_desc *d, const void *q,
			    int ldq, const void *k_cache, const void *v_cache, void *out,
			    int *skip_min, int *skip_all)
{
	int mode = prefill_tc_mode();
	int n_run = 0, max_n = 0;
	rg_status st;

	*skip_min = 0;
	*skip_all = 0;
	if (mode == PTC_OFF || d->rel_bias || !d->k_new || !d->v_new || !d->context_lens_h ||
	    !rg_cuda_prefill_tc_ok(dt, d->head_dim, q, d->k_new, d->v_new, ldq, out))
		return RG_OK;
	if (((uintptr_t)k_cache | (uintptr_t)v_cache) % 16) {
		if (mode == PTC_PAGED)
			return RG_OK;
		mode = PTC_FRESH;
	}
	if (mode == PTC_AUTO) {
		mode = PTC_FRESH;
		for (int i = 0; i < d->n_seq; i++) {
			const int n = d->cu_seqlens_q_h[i + 1] - d->cu_seqlens_q_h[i];

			if (n >= PA_FRESH_MIN && d->context_lens_h[i] > n)
				mode = PTC_PAGED;
		}
	}
	*skip_all = mode == PTC_PAGED;
	for (int i = 0; i < d->n_seq; i++) {
		const int n = d->cu_seqlens_q_h[i + 1] - d->cu_seqlens_q_h[i];

		if (n >= PA_FRESH_MIN && (mode == PTC_PAGED || d->context_lens_h[i] == n)) {
			n_run++;
			max_n = n > max_n ? n : max_n;
		}
	}
	if (!n_run)
		return RG_OK;
	st = rg_cuda_prefill_attention_tc(c, dt, q, d->k_new, d->v_new, ldq, mode == PTC_PAGED ? d : NULL,
					  k_cache, v_cache, d->cu_seqlens_q, d->context_lens,
					  PA_FRESH_MIN, d->n_seq, max_n, d->num_heads,
					  d->num_kv_heads, d->head_dim, d->scale, out);
	*skip_min = n_run == d->n_seq ? -1 : PA_FRESH_MIN;
	return st;
}

extern "C" rg_status rg_cuda_paged_attention(rg_cuda_ctx *c, rg_dtype dt, const rg_attn_desc *d,
					     const void *q, int ldq, const void *k_cache,
					     const void *v_cache, void *out)
{
	rg_status st;
	int skip_min, skip_all;

	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "paged_attention: unknown dtype %d", (int)dt);
	if (d->num_kv_heads <= 0 || d->num_heads % d->num_kv_heads ||
	    d->num_heads / d->num_kv_heads > PA_MAX_GROUP)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "paged_attention: %d query heads per KV head (CUDA takes 1..%d)",
				 d->num_kv_heads > 0 ? d->num_heads / d->num_kv_heads : 0,
				 PA_MAX_GROUP);
	if (!d->cu_seqlens_q_h || d->n_seq <= 0 || d->cu_seqlens_q_h[d->n_seq] == 0)
		return RG_OK;
	if ((st = rg_cuda_enter(c)) != RG_OK)
		return st;
	if ((st = prefill_tc(c, dt, d, q, ldq, k_cache, v_cache, out, &skip_min, &skip_all)) !=
		    RG_OK ||
	    skip_min < 0)
		return st;
#define PA_HD(HD)                                                                                \
	case HD:                                                                                 \
		return dt == RG_DTYPE_F32   ? paged_attn_launch<float, HD>(c, d, q, ldq, k_cache, v_cache, out, skip_min, skip_all) \
		       : dt == RG_DTYPE_F16 ? paged_attn_launch<__half, HD>(c, d, q, ldq, k_cache, v_cache, out, skip_min, skip_all) \
					    : paged_attn_launch<__nv_bfloat16, HD>(c, d, q, ldq, k_cache, v_cache, out, skip_min, skip_all);
	switch (d->head_dim) {
		PA_HD(16)
		PA_HD(32)
		PA_HD(64)
		PA_HD(80)
		PA_HD(96)
		PA_HD(128)
	}
#undef PA_HD
	return rg_errorf(RG_ERR_UNSUPPORTED,
			 "paged_attention: head_dim %d (CUDA takes 16, 32, 64, 80, 96, 128)",
			 d->head_dim);
}
