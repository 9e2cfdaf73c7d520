/* Tensor-core fused variable-length multi-head attention for fp16 / bf16 activations (the fast path
 * of rg_op_attention on CUDA; semantics: src/ops/ops.h, rg_op_attention, incl. the seg mask).
 *
 * Algorithm: FlashAttention-2 (Dao, 2023: online softmax, one CTA per query tile, warps split the
 * queries so no inter-warp reduction is needed) over packed sequences without padding, the fused
 * MHA of ByteTransformer (Zhai et al., IPDPS'23, sec. III-E): only the real tokens of each sequence
 * are read, scored and written.
 *  - grid (n_seq, num_heads, ceil(max_seqlen / BQ)); one CTA of 4 warps owns BQ = 64 * MT queries
 *    of one head of one sequence (CTAs past the end of a shorter sequence exit at once); warp w owns
 *    MT m16 tiles of query rows; MT = 2 (128-query tiles, FlashAttention-2's) for head_dim <= 64
 *    and sequences over 64 tokens, so each K/V fragment loaded from shared memory feeds two mma.
 *  - the Q tile and, tile by tile, 64 keys and values of the same sequence and head are copied to
 *    shared memory with 16-byte cp.async (rows past the sequence zero-filled), K/V double buffered:
 *    tile t+1 is in flight while tile t is computed. Rows are padded by 16 bytes so the ldmatrix
 *    row addresses of one 8x8 matrix hit distinct banks.
 *  - S = Q K^T with mma.sync.m16n8k16 (fp16/bf16 inputs, fp32 accumulators; Q fragments stay in
 *    registers for the whole CTA, K fragments by ldmatrix); masked keys (past the sequence, seg
 *    mismatch, seg < 0; checked only in a tile that reaches past the sequence or under a seg mask)
 *    get -inf; online softmax in fp32 on the raw scores (row max over the 4 lanes of a quad by
 *    shuffles, rescale of the running sum and accumulator), the scale * log2(e) folded into one
 *    FMA before exp2 as FlashAttention-2 does: P = exp2(S * qscale - m * qscale) rounded to the input dtype straight from the accumulator registers into
 *    A-fragments (the C layout of two n8 tiles is the A layout of one k16 step), O += P V with
 *    V fragments by ldmatrix.trans. The running sum l adds P in fp32 before rounding, as
 *    FlashAttention-2 does.
 *  - a relative position bias (MPNet; BIAS = TC_BIAS_REL) is added to the raw scores right after
 *    S = Q K^T, before the mask, as rel_bias[h][clamp(key - query)] / scale, so that the scale
 *    folded into exp2 turns it back into + bias: each thread reads the table entries of its own
 *    fragment elements through the read-only cache. BIAS = TC_BIAS_NONE, the instantiation the
 *    other families run, has no bias code (its registers, and so its speed, are as before).
 *  - DeBERTa's disentangled terms (BIAS = TC_BIAS_DIS, 64-query tiles, head_dim 32 / 64): the
 *    same place and units, (c2p[query row][h][e] + p2c[key row][h][e]) / scale with e =
 *    idx[R + clamp(query - key, -R, R)] (the semantics of attention.cu's DIS kernel). Read per
 *    fragment element from global memory, those gathers cost more than the rest of the tile
 *    (issue 21 item 2: the kernel that gathered them so took 7.6 ms of a 15 ms DeBERTa-v3-base
 *    call, 64 sequences of 5-500 tokens on an H200). Instead, as idx is monotone in
 *    the distance (buckets only merge distances), a 64 x 64 tile, whose 127 distances form one
 *    run, needs only a run of at most 127 table columns: the CTA copies that window of its 64
 *    query rows of c2p and of the tile's 64 key rows of p2c into shared memory with 16-byte
 *    cp.async (17 per thread per tile instead of 64 two-byte gathers + 64 idx loads), plus the
 *    tile's distance -> window column map (127 ints); each score element then reads map, c2p
 *    and p2c from shared memory (tc_dis_window; where idx steps by one column per distance over
 *    the whole tile, the exact distances near the diagonal, the column is computed, no map
 *    read). Tile t+1's windows are issued after a barrier
 *    that follows tile t's bias reads, so they load during tile t's softmax and P V (one
 *    buffer; K/V stay double buffered). A CTA whose distances idx does not map monotonically,
 *    with tables not 16-byte aligned or width % 8 != 0, or a tile whose window would be wider than
 *    17 chunks, gathers that tile element by element instead (tc_dis_gather; the test's random
 *    index): the same values either way, added in the same order.
 *  - end: O / l (a row that never saw a key has l = 0 and writes zeros), stored in the act dtype.
 *  - CAUSAL = true (a decoder's prefill, rg_cuda_prefill_attention_tc): query i of a sequence sees
 *    keys 0..i, so a CTA loads only the key tiles up to its last query and masks inside the tiles
 *    that cross the diagonal; Q, K and V are separate column blocks of one row (the fused QKV
 *    output: row stride ld, any head counts) and query head h reads KV head h / group (grouped-
 *    query attention). Only "fresh" sequences run (context_lens[s] == their new rows >=
 *    fresh_min: no cached keys before them); the CTAs of the others return at once, and the paged
 *    kernel takes those.
 *  - PAGED = true (with CAUSAL): a prefill chunk with cached keys before it (a prompt's later
 *    chunks, the remainder after a prefix-cache hit). Its n new rows sit at positions ctx - n ..
 *    ctx - 1 of its sequence; every key, cached or new, is read from the paged KV cache through
 *    the block table (after this step's KV write), one 16-byte row chunk at a time. Sequences
 *    of >= fresh_min new rows run, fresh or not.
 * Registers (head_dim 128, the largest): 64 accumulator + 32 Q-fragment + 32 score floats per thread.
 * Shared memory: (64 + 4 * 64) * (head_dim + 8) * 2 bytes + 512 (about 46 KiB at head_dim 64);
 * TC_BIAS_DIS adds 2 * 64 * 136 * 2 + 512 (34.5 KiB: 80 KiB at head_dim 64, 2 CTAs per SM). */
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/attention_wgmma.cuh"
#include "ops/cuda/tc_ptx.cuh"

#define TC_WARPS 4
#define TC_BK 64 /* keys per shared-memory tile */
#define TC_DIS_PAD 8 /* elements of padding per row of the gathered DIS bias tiles */
#define TC_DIS_WC 17 /* 16-byte chunks of a DIS window row: 127 distances + 7 of alignment */
/* Row stride (elements) of the DIS windows: 68 words = 4 banks per row, so the p2c reads of a
 * warp (8 distances x 4 key rows) are conflict-free and the c2p reads at most 2-way */
#define TC_DIS_LDW (TC_DIS_WC * 8)

/* What the kernel adds to the raw scores: nothing, MPNet's relative position bias, or DeBERTa's
 * disentangled c2p / p2c terms. */
enum { TC_BIAS_NONE = 0, TC_BIAS_REL = 1, TC_BIAS_DIS = 2 };

/* Where Q, K, V and the output live: row stride ld of the q / k / v rows (elements; the encoder's
 * fused QKV: 3 * H), out_ld of the output rows, query heads per KV head, and (CAUSAL) the fewest
 * new rows of a sequence the kernel takes. */
struct tc_layout {
	int ld, out_ld, group, fresh_min;
};

/* PAGED: the layer's K and V caches ((n_blocks * block_size) slots of `row` elements: KV head
 * kvh at column kvh * head_dim) and the (n_seq, max_blocks) block table. */
struct tc_paged {
	const void *k_cache, *v_cache;
	const int32_t *block_tables;
	int max_blocks, block_size, row;
};

/* TC_BIAS_DIS: DeBERTa's per-token tables (n_tokens, num_heads, width) act, already times scale
 * (either may be NULL), and idx, the (2 R + 1) table column of each clamped distance query - key
 * (rg_attn_disent, src/ops/ops.h). */
struct tc_dis {
	const void *c2p, *p2c;
	const int32_t *idx;
	int width, R;
};

/* ---- PTX wrappers (cp.async, exp2, packing: tc_ptx.cuh) ---- */
__device__ __forceinline__ void tc_ldsm_x4(uint32_t r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(rg_smem_addr(p)));
}

__device__ __forceinline__ void tc_ldsm_x4_t(uint32_t r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(rg_smem_addr(p)));
}

/* c (16x8 f32) += a (16x16) * b (16x8), a row-major, b column-major. */
template <typename T> __device__ __forceinline__ void tc_mma(float c[4], const uint32_t a[4],
							       uint32_t b0, uint32_t b1);

template <> __device__ __forceinline__ void tc_mma<__half>(float c[4], const uint32_t a[4],
							    uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <> __device__ __forceinline__ void tc_mma<__nv_bfloat16>(float c[4], const uint32_t a[4],
								   uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Round (x, y) to the dtype as one packed register (x in the low half); *sum += x + y (fp32, as
 * FlashAttention-2 sums the unrounded probabilities). */
template <typename T> __device__ __forceinline__ uint32_t tc_pack(float x, float y, float *sum)
{
	const uint32_t h = rg_pack2<T>(x, y);

	*sum += x + y;
	return h;
}

/* Shared memory of one CTA: the Q tile (BQ rows), K and V double buffered (BK rows each), segs;
 * with DeBERTa's terms (dis, BQ = BK = 64) their two windows of one tile, 64 x TC_DIS_LDW each
 * (or, aliased on them, the two gathered tiles of 64 x (64 + pad)), and the tile's 127-entry
 * distance -> window column map. */
static size_t tc_smem_bytes(int D, int MT, bool dis)
{
	const size_t bq = TC_WARPS * 16 * MT;
	return (bq + 4 * TC_BK) * (D + 8) * 2 + 2 * TC_BK * sizeof(int) +
	       (dis ? 2 * TC_BK * TC_DIS_LDW * 2 + 2 * TC_BK * sizeof(int) : 0);
}

/* Issue the cp.async copies of keys/values k0..k0+63 (zero rows past L) into buffer buf and the
 * segment ids of those keys (-1 past L) into segk; all threads of the CTA call it. kbase, vbase:
 * the sequence's key and value rows (stride ld elements) of this head. */
template <typename T, int D>
__device__ __forceinline__ void tc_load_kv(const T *kbase, const T *vbase, size_t ld, int k0,
					   int L, T *Kb, T *Vb, const int32_t *segs, int *segk)
{
	constexpr int LDS = D + 8, CPR = D / 8;
	for (int e = threadIdx.x; e < TC_BK * CPR; e += TC_WARPS * 32) {
		const int r = e / CPR, c = (e % CPR) * 8;
		const bool v = k0 + r < L;
		const size_t off = (size_t)(v ? k0 + r : 0) * ld + c;
		rg_cp16(Kb + r * LDS + c, kbase + off, v);
		rg_cp16(Vb + r * LDS + c, vbase + off, v);
	}
	if (segs)
		for (int r = threadIdx.x; r < TC_BK; r += TC_WARPS * 32)
			segk[r] = k0 + r < L ? segs[k0 + r] : -1;
}

/* The same through a block table: key position p lives in slot bt[p / bs] * bs + p % bs of the
 * caches (rows of `row` elements, this KV head at column kvh * D). */
template <typename T, int D>
__device__ __forceinline__ void tc_load_kv_paged(const T *kc, const T *vc, const int32_t *bt,
						 int bs, size_t row, int kvh, int k0, int L,
						 T *Kb, T *Vb)
{
	constexpr int LDS = D + 8, CPR = D / 8;
	for (int e = threadIdx.x; e < TC_BK * CPR; e += TC_WARPS * 32) {
		const int r = e / CPR, c = (e % CPR) * 8, pos = k0 + r;
		const bool v = pos < L;
		const size_t slot = v ? (size_t)bt[pos / bs] * bs + pos % bs : 0;
		const size_t off = slot * row + (size_t)kvh * D + c;
		rg_cp16(Kb + r * LDS + c, kc + off, v);
		rg_cp16(Vb + r * LDS + c, vc + off, v);
	}
}

/* The act-dtype value of raw 16-bit bits (the DIS tiles are moved as bits). */
template <typename T> __device__ __forceinline__ float tc_bits_f(uint32_t u);

template <> __device__ __forceinline__ float tc_bits_f<__half>(uint32_t u)
{
	return __half2float(__ushort_as_half((unsigned short)u));
}

template <> __device__ __forceinline__ float tc_bits_f<__nv_bfloat16>(uint32_t u)
{
	return __uint_as_float((u & 0xffffu) << 16);
}

/* The idx entries tc_dis_window needs for the tile (q0, k0): at the tile's least and greatest
 * distance and at this thread's map entry, distances clamped both ways (a tile may lie wholly
 * past R); loaded ahead of their use. idx_c: idx + R. */
struct tc_dis_ix {
	int first, last, own;
};

__device__ __forceinline__ tc_dis_ix tc_dis_idx(const int32_t *idx_c, int R, int q0, int k0)
{
	const int dq = q0 - k0;
	return { __ldg(idx_c + min(max(dq - (TC_BK - 1), -R), R)),
		 __ldg(idx_c + min(max(dq + TC_BK - 1, -R), R)),
		 __ldg(idx_c + min(max(dq + (int)threadIdx.x - (TC_BK - 1), -R), R)) };
}

/* DeBERTa's terms of one 64 x 64 (query, key) tile, the window way. The tile's distances are d =
 * q0 - k0 + dl - 63, dl in [0, 127) (query row - key column + 63, both tile-relative); where idx
 * is monotone over them (win_ok: checked once per CTA), the tile reads only the table columns
 * idx[dmin] .. idx[dmax] (at most 127 of them, fewer where buckets are logarithmic). When that
 * run, its start aligned down to 8 columns (lo), fits TC_DIS_WC 16-byte chunks, the CTA copies
 * those columns of its 64 query rows of c2p into Wc and of the tile's 64 key rows of p2c into Wp
 * ([64][TC_DIS_LDW] each) with cp.async (rows past the sequence zero-filled; the caller commits)
 * and writes M[dl] = 2 (idx[R + clamp(d)] - lo) (a byte offset into a row), so that the term of
 * (query row qr, key column kc) is Wc[qr][M[qr - kc + 63] / 2] + Wp[kc][M[qr - kc + 63] / 2].
 * Returns TC_DIS_GATHER, having issued nothing, when the window does not fit (or !win_ok): the
 * caller gathers the tile instead (tc_dis_gather); TC_DIS_UNIT when idx steps by one column per
 * distance over the whole tile (exact distances, no clamping: unit_ok, idx steps of at most one
 * over the CTA's distances, and 126 columns from the least distance to the greatest), where M[dl]
 * = *m0 + 2 dl, so the reads need no map; TC_DIS_MAP otherwise. ix: tc_dis_idx of the tile;
 * c2p_h, p2c_h: the sequence's row 0 of this head (NULL: that term is absent), rows ldt elements
 * apart, 16-byte aligned when win_ok. */
enum { TC_DIS_GATHER = 0, TC_DIS_MAP = 1, TC_DIS_UNIT = 2 };

__device__ __forceinline__ int tc_dis_window(bool win_ok, bool unit_ok, tc_dis_ix ix,
					     const unsigned short *c2p_h,
					     const unsigned short *p2c_h, size_t ldt, int q0, int k0,
					     int nq, int L, unsigned short *Wc, unsigned short *Wp,
					     int *M, int *m0)
{
	const int lo = ix.first & ~7, hi = ix.last, tid = threadIdx.x;

	if (!win_ok || hi - lo >= TC_DIS_WC * 8) /* warp-uniform (CTA-uniform) */
		return TC_DIS_GATHER;
	*m0 = 2 * (ix.first - lo);
	const int nch = (hi - lo) / 8 + 1; /* chunks any distance of the tile reads */
	if (tid < 2 * TC_BK - 1)
		M[tid] = 2 * (ix.own - lo);
	for (int e = tid; e < TC_BK * TC_DIS_WC; e += TC_WARPS * 32) {
		const int r = e / TC_DIS_WC, c = e - r * TC_DIS_WC;
		if (c >= nch)
			continue;
		if (c2p_h) {
			const bool v = r < nq;
			rg_cp16(Wc + r * TC_DIS_LDW + c * 8,
				c2p_h + (size_t)(q0 + (v ? r : 0)) * ldt + lo + c * 8, v);
		}
		if (p2c_h) {
			const bool v = k0 + r < L;
			rg_cp16(Wp + r * TC_DIS_LDW + c * 8,
				p2c_h + (size_t)(k0 + (v ? r : 0)) * ldt + lo + c * 8, v);
		}
	}
	return unit_ok && hi - ix.first == 2 * TC_BK - 2 ? TC_DIS_UNIT : TC_DIS_MAP;
}

/* The same tile gathered element by element, for any idx, width and alignment (the fallback, not
 * the fast path: synchronous 2-byte loads): Bc [64][64 + pad] query-major (a warp: consecutive
 * keys of one query row), Bp [64][64 + pad] key-major (a warp: consecutive queries of one key
 * row), elements outside the sequence 0. */
__device__ __forceinline__ void tc_dis_gather(const unsigned short *c2p_h,
					       const unsigned short *p2c_h, size_t ldt,
					       const int32_t *idx_c, int R, int q0, int k0, int nq,
					       int L, unsigned short *Bc, unsigned short *Bp)
{
#pragma unroll 1
	for (int i = threadIdx.x; i < TC_BK * TC_BK; i += TC_WARPS * 32) {
		const int a = i / TC_BK, b = i % TC_BK;
		if (c2p_h) { /* query a, key b */
			unsigned short v = 0;
			if (a < nq && k0 + b < L)
				v = __ldg(c2p_h + (size_t)(q0 + a) * ldt +
					  __ldg(idx_c + min(max(q0 + a - (k0 + b), -R), R)));
			Bc[a * (TC_BK + TC_DIS_PAD) + b] = v;
		}
		if (p2c_h) { /* key a, query b */
			unsigned short v = 0;
			if (b < nq && k0 + a < L)
				v = __ldg(p2c_h + (size_t)(k0 + a) * ldt +
					  __ldg(idx_c + min(max(q0 + b - (k0 + a), -R), R)));
			Bp[a * (TC_BK + TC_DIS_PAD) + b] = v;
		}
	}
}

/* Add DeBERTa's terms, / scale, to a warp's 16 x 64 scores of one tile: sc[j][e] is (query row
 * qg + 8 (e >> 1), key column 8 j + 2 tig + (e & 1)), tile-relative (the mma C layout; qg = the
 * warp's first row + g). Each term is the act dtype's value rounded to fp32, c2p + p2c in fp32,
 * then one fmaf into the score: the same values and order from either buffer kind. From the
 * windows (tc_dis_window): the map entry of (qr, kc) is M[qr - kc + 63], a byte offset into row
 * qr of Wc and row kc of Wp; UNIT: it is m0 + 2 (qr - kc + 63), no map read. The constant parts
 * of the addresses are immediates of the loads. */
template <typename T, bool UNIT>
__device__ __forceinline__ void tc_dis_add_window(float (&sc)[TC_BK / 8][4],
						  const unsigned short *Wc,
						  const unsigned short *Wp, const int *M, int m0,
						  bool c2p, bool p2c, int qg, int tig,
						  float inv_scale)
{
	const int dl0 = qg - 2 * tig + TC_BK - 1;
	const char *wc0 = (const char *)(Wc + qg * TC_DIS_LDW);
	const char *wp0 = (const char *)(Wp + 2 * tig * TC_DIS_LDW);
#pragma unroll
	for (int j = 0; j < TC_BK / 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int r = e >> 1, c = e & 1;
			const int dl = dl0 + 8 * r - 8 * j - c;
			const int off = UNIT ? m0 + 2 * dl : M[dl];
			float b = 0.f;
			if (c2p)
				b = tc_bits_f<T>(*(const unsigned short *)(wc0 + 8 * r * TC_DIS_LDW * 2 +
									   off));
			if (p2c)
				b += tc_bits_f<T>(*(const unsigned short *)(
					wp0 + (8 * j + c) * TC_DIS_LDW * 2 + off));
			sc[j][e] = fmaf(b, inv_scale, sc[j][e]);
		}
}

/* The same from the gathered tiles (tc_dis_gather): c2p as one 32-bit pair (kc, kc + 1), p2c one
 * element per key row. */
template <typename T>
__device__ __forceinline__ void tc_dis_add_gathered(float (&sc)[TC_BK / 8][4],
						    const unsigned short *Bc,
						    const unsigned short *Bp, bool c2p, bool p2c,
						    int qg, int tig, float inv_scale)
{
	constexpr int LD = TC_BK + TC_DIS_PAD;
#pragma unroll
	for (int j = 0; j < TC_BK / 8; j++)
#pragma unroll
		for (int r = 0; r < 2; r++) {
			const int qr = qg + 8 * r, kc = j * 8 + tig * 2;
			float b0 = 0.f, b1 = 0.f;
			if (c2p) {
				const uint32_t w = *(const uint32_t *)(Bc + qr * LD + kc);
				b0 = tc_bits_f<T>(w);
				b1 = tc_bits_f<T>(w >> 16);
			}
			if (p2c) {
				b0 += tc_bits_f<T>(Bp[kc * LD + qr]);
				b1 += tc_bits_f<T>(Bp[(kc + 1) * LD + qr]);
			}
			sc[j][2 * r] = fmaf(b0, inv_scale, sc[j][2 * r]);
			sc[j][2 * r + 1] = fmaf(b1, inv_scale, sc[j][2 * r + 1]);
		}
}

/* MT: m16 query tiles per warp (BQ = 64 * MT queries per CTA). Each K / V fragment read from shared
 * memory with ldmatrix feeds MT mma instructions, so MT = 2 halves the shared-memory traffic per
 * FLOP (as FlashAttention-2's 128-query tiles do); MT = 1 wastes less on short sequences. */
template <typename T, int D, int MT, int BIAS, bool CAUSAL, bool PAGED>
__global__ void __launch_bounds__(TC_WARPS * 32, 2)
attention_tc_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
		    tc_layout lay, tc_paged pg, const int32_t *__restrict__ cu_seqlens,
		    const int32_t *__restrict__ seg, const int32_t *__restrict__ ctx_lens,
		    const float *__restrict__ rel_bias, int rel_max, tc_dis dis, int max_seqlen,
		    int num_heads, float qscale, float inv_scale, T *__restrict__ out, int *flag)
{
	constexpr bool REL = BIAS == TC_BIAS_REL, DIS = BIAS == TC_BIAS_DIS;
	constexpr int LDS = D + 8;    /* shared row stride, elements */
	constexpr int CPR = D / 8;    /* 16-byte chunks per row */
	constexpr int KD = D / 16;    /* k16 steps over head_dim (S = Q K^T) */
	constexpr int ND = D / 8;     /* n8 tiles over head_dim (O = P V) */
	constexpr int NK = TC_BK / 8; /* n8 tiles over the keys of a tile */
	constexpr int BQ = TC_WARPS * 16 * MT;
	static_assert(!DIS || (MT == 1 && !CAUSAL && !PAGED), "DIS: 64-query tiles, encoder only");
	static_assert(!DIS || (BQ == TC_BK && TC_WARPS * 32 >= 2 * TC_BK - 1 &&
			       TC_BK * (TC_BK + TC_DIS_PAD) <= TC_BK * TC_DIS_LDW),
		      "DIS: 64 x 64 tiles, one map entry per thread, gathered tiles fit the windows");
	static_assert(!(REL && DIS), "one bias kind");
	extern __shared__ __align__(16) unsigned char tc_sm[];
	T *Qs = (T *)tc_sm;                          /* [BQ][LDS] */
	T *Ks = Qs + BQ * LDS;                       /* [2][BK][LDS] */
	T *Vs = Ks + 2 * TC_BK * LDS;                /* [2][BK][LDS] */
	int *segk = (int *)(Vs + 2 * TC_BK * LDS);   /* [2][BK] */
	/* DIS (bits of the act dtype): the c2p window [BQ][TC_DIS_LDW] and the p2c window
	 * [BK][TC_DIS_LDW] of one tile, or aliased on them the gathered tiles, c2p [BQ][BK + pad]
	 * and p2c [BK][BQ + pad]; the tile's distance -> window column map [2 BK] */
	unsigned short *Wc = (unsigned short *)(segk + 2 * TC_BK);
	unsigned short *Wp = Wc + BQ * TC_DIS_LDW;
	int *Mw = (int *)(Wp + TC_BK * TC_DIS_LDW);

	const int s = blockIdx.x, h = blockIdx.y, q0 = blockIdx.z * BQ;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, tig = lane & 3; /* mma fragment row group, thread in group */
	const size_t ld = (size_t)lay.ld;
	rg_pdl_wait(); /* qkv comes from the GEMM just before (programmatic launch) */
	const int t0 = cu_seqlens[s], L = cu_seqlens[s + 1] - t0;

	if (CAUSAL && (L < lay.fresh_min || (!PAGED && ctx_lens[s] != L)))
		return; /* too short, or (not PAGED) cached keys before it: the paged kernel's */
	/* keys that exist (PAGED: cached + new) and the position of this CTA's first query */
	const int klim = PAGED ? ctx_lens[s] : L;
	const int qpos0 = (PAGED ? klim - L : 0) + q0;
	if (L < 0 || L > max_seqlen) {
		/* Only the host-unchecked device copy of cu_seqlens can get here. */
		if (tid == 0 && h == 0 && blockIdx.z == 0)
			atomicOr(flag, RG_CUDA_FLAG_BAD_SEQLEN);
		if (L < 0)
			return;
	}
	if (q0 >= L)
		return;
	const int nq = min(BQ, L - q0);
	const T *base = q + (size_t)t0 * ld + (size_t)h * D; /* Q of token 0, head h */
	const int kvh = h / lay.group;
	const T *kbase = PAGED ? NULL : k + (size_t)t0 * ld + (size_t)kvh * D;
	const T *vbase = PAGED ? NULL : v + (size_t)t0 * ld + (size_t)kvh * D;
	const int32_t *bt = PAGED ? pg.block_tables + (size_t)s * pg.max_blocks : NULL;
	const int32_t *segs = seg ? seg + t0 : NULL;
	/* REL: this head's bias table centred on distance 0 */
	const float *rel_h = REL ? rel_bias + (size_t)h * (2 * rel_max + 1) + rel_max : NULL;
	/* DIS: this sequence's row 0 of this head in each table, the index table centred on 0 */
	const size_t ldt = DIS ? (size_t)num_heads * dis.width : 0;
	const unsigned short *c2p_h =
		DIS && dis.c2p ? (const unsigned short *)dis.c2p + (size_t)t0 * ldt +
					 (size_t)h * dis.width
			       : NULL;
	const unsigned short *p2c_h =
		DIS && dis.p2c ? (const unsigned short *)dis.p2c + (size_t)t0 * ldt +
					 (size_t)h * dis.width
			       : NULL;
	const int32_t *idx_c = DIS ? dis.idx + dis.R : NULL;

	/* group 0: the Q tile and K/V tile 0 */
	for (int e = tid; e < BQ * CPR; e += TC_WARPS * 32) {
		const int r = e / CPR, c = (e % CPR) * 8;
		const bool v = r < nq;
		rg_cp16(Qs + r * LDS + c, base + (size_t)(v ? q0 + r : 0) * ld + c, v);
	}
	if (PAGED)
		tc_load_kv_paged<T, D>((const T *)pg.k_cache, (const T *)pg.v_cache, bt, pg.block_size,
				       (size_t)pg.row, kvh, 0, klim, Ks, Vs);
	else
		tc_load_kv<T, D>(kbase, vbase, ld, 0, L, Ks, Vs, segs, segk);
	rg_cp_commit();
	/* DIS: win_ok, the CTA may use windows: 16-byte aligned table rows and idx monotone over
	 * every distance the CTA meets, q0 - (64 * tiles - 1) .. q0 + 63 (clamped; the check reads
	 * idx once per CTA, from L2); unit_ok: idx steps by at most one column there; win: how the
	 * terms of the tile in the shared buffers came (tc_dis_window), m0 its UNIT map base */
	bool win_ok = false, unit_ok = false;
	int win = TC_DIS_GATHER, m0 = 0; /* DIS: how the tile's terms came (tc_dis_window) */
	tc_dis_ix ixn = { 0, 0, 0 }; /* DIS: the next tile's idx entries */
	if constexpr (DIS) {
		const int da = max(q0 - ((L + TC_BK - 1) / TC_BK) * TC_BK + 1, -dis.R);
		const int db = min(q0 + BQ - 1, dis.R);
		bool bad = (((uintptr_t)dis.c2p | (uintptr_t)dis.p2c) & 15) != 0 ||
			   (dis.width & 7) != 0;
		bool steep = false; /* a step of more than one column */
#pragma unroll 4
		for (int d = da + tid; d < db; d += TC_WARPS * 32) {
			const int step = __ldg(idx_c + d + 1) - __ldg(idx_c + d);
			bad |= step < 0;
			steep |= step > 1;
		}
		win_ok = !__syncthreads_or(bad);
		unit_ok = !__syncthreads_or(steep);
		/* tile 0's terms (their own cp.async group): visible after the first barrier of the
		 * loop */
		win = tc_dis_window(win_ok, unit_ok, tc_dis_idx(idx_c, dis.R, q0, 0), c2p_h, p2c_h,
				    ldt, q0, 0, nq, L, Wc, Wp, Mw, &m0);
		if (win == TC_DIS_GATHER)
			tc_dis_gather(c2p_h, p2c_h, ldt, idx_c, dis.R, q0, 0, nq, L, Wc, Wp);
		rg_cp_commit();
	}

	/* this thread's query rows: warp*16*MT + mt*16 + g and + 8 (tile-relative) */
	const int qw = warp * 16 * MT;
	int sq[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		const int r0 = qw + mt * 16 + g;
		sq[mt][0] = segs ? (r0 < nq ? segs[q0 + r0] : -1) : 0;
		sq[mt][1] = segs ? (r0 + 8 < nq ? segs[q0 + r0 + 8] : -1) : 0;
	}
	const bool active = qw < nq; /* warp-uniform: the warp has a real query row */

	uint32_t qf[MT][KD][4];
	float o[MT][ND][4];
	float m[MT][2], l[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
		m[mt][0] = m[mt][1] = -INFINITY;
		l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
		for (int j = 0; j < ND; j++)
			o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
	}

	/* causal: keys up to this CTA's last query */
	const int ntiles = ((CAUSAL ? min(klim, qpos0 + nq) : L) + TC_BK - 1) / TC_BK;
	for (int t = 0; t < ntiles; t++) {
		const int buf = t & 1, k0 = t * TC_BK;
		if (t + 1 < ntiles) {
			/* buffer buf^1 was released by the barrier at the end of iteration t-1 */
			if (PAGED)
				tc_load_kv_paged<T, D>((const T *)pg.k_cache, (const T *)pg.v_cache, bt,
						       pg.block_size, (size_t)pg.row, kvh,
						       k0 + TC_BK, klim,
						       Ks + (buf ^ 1) * TC_BK * LDS,
						       Vs + (buf ^ 1) * TC_BK * LDS);
			else
				tc_load_kv<T, D>(kbase, vbase, ld, k0 + TC_BK, L,
						 Ks + (buf ^ 1) * TC_BK * LDS,
						 Vs + (buf ^ 1) * TC_BK * LDS, segs,
						 segk + (buf ^ 1) * TC_BK);
			rg_cp_commit();
			if constexpr (DIS) /* tile t+1's idx entries, loaded through tile t's S */
				ixn = tc_dis_idx(idx_c, dis.R, q0, k0 + TC_BK);
			/* all but this group: K/V of tile t (and DIS: tile t's terms, committed
			 * before it) */
			rg_cp_wait<1>();
		} else {
			rg_cp_wait<0>();
		}
		__syncthreads(); /* tile t (and Q, segk) visible to every warp */

		const T *Kb = Ks + buf * TC_BK * LDS, *Vb = Vs + buf * TC_BK * LDS;
		const int *sk = segk + buf * TC_BK;
		float sc[MT][NK][4]; /* the scores of tile t */
		if (active) {
			if (t == 0) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int kk = 0; kk < KD; kk++)
						tc_ldsm_x4(qf[mt][kk],
							   Qs + (qw + mt * 16 + (lane & 15)) * LDS +
								   kk * 16 + (lane >> 4) * 8);
			}
			/* S = Q K^T (raw scores; the scale is folded into exp2 below) */
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int j = 0; j < NK; j++)
					sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.f;
#pragma unroll
			for (int kk = 0; kk < KD; kk++) {
#pragma unroll
				for (int nn = 0; nn < NK / 2; nn++) {
					uint32_t b[4];
					tc_ldsm_x4(b, Kb + (nn * 16 + (lane >> 4) * 8 + (lane & 7)) * LDS +
							      kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						tc_mma<T>(sc[mt][2 * nn], qf[mt][kk], b[0], b[1]);
						tc_mma<T>(sc[mt][2 * nn + 1], qf[mt][kk], b[2], b[3]);
					}
				}
			}
			/* relative position bias of (query row, key column) of each fragment element:
			 * row qw + mt*16 + g (+ 8 for e >= 2), key column j*8 + tig*2 + (e & 1) */
			if (REL) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++)
#pragma unroll
					for (int j = 0; j < NK; j++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int qi = q0 + qw + mt * 16 + g + 8 * (e >> 1);
							const int kj = k0 + j * 8 + tig * 2 + (e & 1);
							const int dist =
								min(max(kj - qi, -rel_max), rel_max);
							sc[mt][j][e] = fmaf(__ldg(rel_h + dist), inv_scale,
									    sc[mt][j][e]);
						}
			}
			/* DeBERTa's terms of the same elements from the shared buffers */
			if constexpr (DIS) {
				if (win == TC_DIS_UNIT) /* warp-uniform */
					tc_dis_add_window<T, true>(sc[0], Wc, Wp, Mw, m0, c2p_h != NULL,
								   p2c_h != NULL, qw + g, tig,
								   inv_scale);
				else if (win == TC_DIS_MAP)
					tc_dis_add_window<T, false>(sc[0], Wc, Wp, Mw, m0, c2p_h != NULL,
								    p2c_h != NULL, qw + g, tig,
								    inv_scale);
				else
					tc_dis_add_gathered<T>(sc[0], Wc, Wp, c2p_h != NULL,
							       p2c_h != NULL, qw + g, tig, inv_scale);
			}
		}
		if constexpr (DIS) {
			if (t + 1 < ntiles) { /* tile t+1's terms, in flight through tile t's P V */
				__syncthreads(); /* every warp has read tile t's terms */
				win = tc_dis_window(win_ok, unit_ok, ixn, c2p_h, p2c_h, ldt, q0,
						    k0 + TC_BK, nq, L, Wc, Wp, Mw, &m0);
				if (win == TC_DIS_GATHER)
					tc_dis_gather(c2p_h, p2c_h, ldt, idx_c, dis.R, q0, k0 + TC_BK,
						      nq, L, Wc, Wp);
				rg_cp_commit();
			}
		}
		if (active) {
			/* mask (only a tile that reaches past L, crosses the causal diagonal, or a seg
			 * mask needs it), tile row max */
			const bool full = k0 + TC_BK <= klim && !segs &&
					  (!CAUSAL || k0 + TC_BK - 1 <= qpos0); /* warp-uniform */
			float msub[MT][2];
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				float tmax[2] = { -INFINITY, -INFINITY };
#pragma unroll
				for (int j = 0; j < NK; j++) {
#pragma unroll
					for (int e = 0; e < 4; e++) {
						if (!full) {
							const int kc = j * 8 + tig * 2 + (e & 1);
							bool vis = k0 + kc < klim;
							if (CAUSAL)
								vis = vis &&
								      k0 + kc <= qpos0 + qw + mt * 16 +
										 g + 8 * (e >> 1);
							if (segs) {
								const int sv = sk[kc];
								vis = vis && sv >= 0 && sv == sq[mt][e >> 1];
							}
							if (!vis)
								sc[mt][j][e] = -INFINITY;
						}
						tmax[e >> 1] = fmaxf(tmax[e >> 1], sc[mt][j][e]);
					}
				}
#pragma unroll
				for (int r = 0; r < 2; r++) {
					tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
					tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
					/* m: running max of the raw scores; msub: it in exp2 units */
					const float mnew = fmaxf(m[mt][r], tmax[r]);
					msub[mt][r] = mnew == -INFINITY ? 0.f : mnew * qscale;
					const float corr = rg_exp2_approx(m[mt][r] == -INFINITY
									 ? -INFINITY
									 : m[mt][r] * qscale - msub[mt][r]);
					m[mt][r] = mnew;
					l[mt][r] *= corr;
#pragma unroll
					for (int j = 0; j < ND; j++) {
						o[mt][j][2 * r] *= corr;
						o[mt][j][2 * r + 1] *= corr;
					}
				}
			}
			/* O += P V, 16 keys (one k16 step) at a time; P = exp2(S * qscale - msub) */
#pragma unroll
			for (int kk = 0; kk < TC_BK / 16; kk++) {
				uint32_t a[MT][4];
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					const float *s0 = sc[mt][2 * kk], *s1 = sc[mt][2 * kk + 1];
					const float m0 = msub[mt][0], m1 = msub[mt][1];
					a[mt][0] = tc_pack<T>(rg_exp2_approx(fmaf(s0[0], qscale, -m0)),
							      rg_exp2_approx(fmaf(s0[1], qscale, -m0)), &l[mt][0]);
					a[mt][1] = tc_pack<T>(rg_exp2_approx(fmaf(s0[2], qscale, -m1)),
							      rg_exp2_approx(fmaf(s0[3], qscale, -m1)), &l[mt][1]);
					a[mt][2] = tc_pack<T>(rg_exp2_approx(fmaf(s1[0], qscale, -m0)),
							      rg_exp2_approx(fmaf(s1[1], qscale, -m0)), &l[mt][0]);
					a[mt][3] = tc_pack<T>(rg_exp2_approx(fmaf(s1[2], qscale, -m1)),
							      rg_exp2_approx(fmaf(s1[3], qscale, -m1)), &l[mt][1]);
				}
#pragma unroll
				for (int dd = 0; dd < ND / 2; dd++) {
					uint32_t b[4];
					tc_ldsm_x4_t(b, Vb + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) *
								 LDS + dd * 16 + (lane >> 4) * 8);
#pragma unroll
					for (int mt = 0; mt < MT; mt++) {
						tc_mma<T>(o[mt][2 * dd], a[mt], b[0], b[1]);
						tc_mma<T>(o[mt][2 * dd + 1], a[mt], b[2], b[3]);
					}
				}
			}
		}
		__syncthreads(); /* every warp is done with buffer buf before it is refilled */
	}

	if (!active)
		return;
	T *ob = out + (size_t)t0 * lay.out_ld + (size_t)h * D;
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int r = 0; r < 2; r++) {
			float lt = l[mt][r];
			lt += __shfl_xor_sync(0xffffffffu, lt, 1);
			lt += __shfl_xor_sync(0xffffffffu, lt, 2);
			const float inv = lt > 0.f ? 1.f / lt : 0.f;
			const int qr = qw + mt * 16 + g + 8 * r;
			if (qr < nq) {
				T *orow = ob + (size_t)(q0 + qr) * lay.out_ld + tig * 2;
#pragma unroll
				for (int j = 0; j < ND; j++)
					rg_store2<T>(orow + j * 8, o[mt][j][2 * r] * inv,
						     o[mt][j][2 * r + 1] * inv);
			}
		}
	}
}

bool rg_cuda_attention_tc_ok(rg_dtype dt, int head_dim, const void *qkv, const void *out)
{
	if (dt != RG_DTYPE_F16 && dt != RG_DTYPE_BF16)
		return false;
	if (head_dim != 32 && head_dim != 64 && head_dim != 128)
		return false;
	/* 16-byte cp.async of every row: base pointers aligned (row strides 3H and H are multiples of
	 * 8 elements for these head_dims) */
	return ((uintptr_t)qkv % 16) == 0 && ((uintptr_t)out % 16) == 0;
}

/* One launch's arguments (host side). */
struct tc_call {
	const void *q, *k, *v;
	tc_layout lay;
	tc_paged pg;
	const int32_t *cu_seqlens, *seg, *ctx_lens;
	const float *rel_bias;
	int rel_max;
	tc_dis dis; /* DeBERTa's terms: c2p and p2c NULL when there are none */
	int n_seq, max_seqlen, num_heads;
	float qscale, inv_scale;
	void *out;
};

template <typename T, int D, int MT, int BIAS, bool CAUSAL, bool PAGED>
static rg_status tc_launch_k(rg_cuda_ctx *c, int bit, const tc_call *a)
{
	constexpr int BQ = TC_WARPS * 16 * MT;
	const size_t smem = tc_smem_bytes(D, MT, BIAS == TC_BIAS_DIS);
	dim3 grid(a->n_seq, a->num_heads, (a->max_seqlen + BQ - 1) / BQ);

	if (smem > 48 * 1024 && !(c->attn_tc_smem_set & (1ull << bit))) {
		if ((int)smem > c->max_smem_optin)
			return rg_errorf(RG_ERR_UNSUPPORTED, "attention: head_dim %d needs %zu bytes of "
					 "shared memory, device allows %d", D, smem,
					 c->max_smem_optin);
		rg_status st = rg_cuda_err(
			cudaFuncSetAttribute(attention_tc_kernel<T, D, MT, BIAS, CAUSAL, PAGED>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
			"cudaFuncSetAttribute(attention_tc)");
		if (st != RG_OK)
			return st;
		c->attn_tc_smem_set |= 1ull << bit;
	}
	rg_launch(c, attention_tc_kernel<T, D, MT, BIAS, CAUSAL, PAGED>, grid, TC_WARPS * 32, smem,
		  (const T *)a->q, (const T *)a->k, (const T *)a->v, a->lay, a->pg, a->cu_seqlens, a->seg,
		  a->ctx_lens, a->rel_bias, a->rel_max, a->dis, a->max_seqlen, a->num_heads, a->qscale,
		  a->inv_scale, (T *)a->out, c->flag_d);
	return rg_cuda_launch_check("attention_tc_kernel");
}

/* The instantiation with the bias code only when there is a table (its smem bits 10 higher); the
 * causal one (no bias) 20 higher, the causal one over the block table 30 higher; DeBERTa's terms
 * (64-query tiles and head_dim <= 64 only: rg_cuda_attention_tc_dis_ok) 40 higher. */
template <typename T, int D, int MT>
static rg_status tc_launch(rg_cuda_ctx *c, int bit, bool causal, const tc_call *a)
{
	if (causal && a->pg.k_cache)
		return tc_launch_k<T, D, MT, TC_BIAS_NONE, true, true>(c, bit + 30, a);
	if (causal)
		return tc_launch_k<T, D, MT, TC_BIAS_NONE, true, false>(c, bit + 20, a);
	if (a->dis.c2p || a->dis.p2c) {
		if constexpr (MT == 1 && D <= 64)
			return tc_launch_k<T, D, MT, TC_BIAS_DIS, false, false>(c, bit + 40, a);
		return rg_errorf(RG_ERR_INTERNAL, "attention_tc: no disentangled instantiation for "
				 "head_dim %d, %d-query tiles", D, 64 * MT);
	}
	if (a->rel_bias)
		return tc_launch_k<T, D, MT, TC_BIAS_REL, false, false>(c, bit + 10, a);
	return tc_launch_k<T, D, MT, TC_BIAS_NONE, false, false>(c, bit, a);
}

/* Query tiles of 128 (MT = 2) for head_dim <= 64 when the grid still has >= 8 CTAs per SM of 64-query
 * tiles (so halving it keeps every SM busy) and sequences are longer than 64 tokens; 64 otherwise
 * (few or short sequences: more CTAs, less waste; head_dim 128 with MT = 2 would spill registers).
 * DeBERTa's terms always take 64 (their shared windows are per 64 x 64 tile). */
template <typename T>
static rg_status tc_dispatch_d(rg_cuda_ctx *c, int bit0, bool causal, int head_dim,
			       const tc_call *a)
{
	const long tiles64 = (long)a->n_seq * a->num_heads * ((a->max_seqlen + 63) / 64);
	const bool dis = a->dis.c2p || a->dis.p2c;
	const bool wide = !dis && a->max_seqlen > 64 && tiles64 >= 8L * c->num_sms;

	switch (head_dim) {
	case 32:
		return wide ? tc_launch<T, 32, 2>(c, bit0 + 3, causal, a)
			    : tc_launch<T, 32, 1>(c, bit0 + 0, causal, a);
	case 64:
		return wide ? tc_launch<T, 64, 2>(c, bit0 + 4, causal, a)
			    : tc_launch<T, 64, 1>(c, bit0 + 1, causal, a);
	case 128:
		return tc_launch<T, 128, 1>(c, bit0 + 2, causal, a);
	}
	return rg_errorf(RG_ERR_UNSUPPORTED, "attention_tc: head_dim %d", head_dim);
}

/* bits 0..49 of attn_tc_smem_set: {0..4} fp16, 5 + {0..4} bf16; + 10 with a bias table, + 20
 * causal, + 30 causal over the block table, + 40 with DeBERTa's terms */
static rg_status tc_dispatch(rg_cuda_ctx *c, rg_dtype dt, bool causal, int head_dim,
			     const tc_call *a)
{
	if (dt == RG_DTYPE_F16)
		return tc_dispatch_d<__half>(c, 0, causal, head_dim, a);
	if (dt == RG_DTYPE_BF16)
		return tc_dispatch_d<__nv_bfloat16>(c, 5, causal, head_dim, a);
	return rg_errorf(RG_ERR_UNSUPPORTED, "attention_tc: dtype %d", (int)dt);
}

bool rg_cuda_attention_tc_dis_ok(rg_dtype dt, int head_dim, const void *qkv, const void *out)
{
	return rg_cuda_attention_tc_ok(dt, head_dim, qkv, out) && head_dim <= 64;
}

rg_status rg_cuda_attention_tc(rg_cuda_ctx *c, rg_dtype dt, const void *qkv,
			       const int32_t *cu_seqlens, const int32_t *seg, const float *rel_bias,
			       int rel_max, const rg_attn_disent *dis, int n_seq, int max_seqlen,
			       int num_heads, int head_dim, float qscale, float inv_scale, void *out)
{
	const int H = num_heads * head_dim;
	const size_t esz = 2; /* fp16 / bf16 */
	/* Hopper: the wgmma kernel for the plain case (no seg mask, no bias, no DeBERTa terms),
	 * unless switched off */
	if (!seg && !rel_bias && !dis && rg_cuda_attention_wgmma_ok(c, dt, head_dim))
		return rg_cuda_attention_wgmma(c, dt, qkv, cu_seqlens, n_seq, max_seqlen, num_heads,
					       head_dim, qscale, out);
	tc_call a = {qkv, (const char *)qkv + (size_t)H * esz, (const char *)qkv + 2 * (size_t)H * esz,
		     {3 * H, H, 1, 0}, {NULL, NULL, NULL, 0, 0, 0}, cu_seqlens, seg, NULL, rel_bias,
		     rel_bias ? rel_max : 0,
		     {dis ? dis->c2p : NULL, dis ? dis->p2c : NULL, dis ? dis->idx : NULL,
		      dis ? dis->width : 0, dis ? dis->R : 0},
		     n_seq, max_seqlen, num_heads, qscale, inv_scale, out};

	if (dis && !rg_cuda_attention_tc_dis_ok(dt, head_dim, qkv, out))
		return rg_errorf(RG_ERR_INTERNAL, "attention_tc: disentangled terms with head_dim %d",
				 head_dim);
	return tc_dispatch(c, dt, false, head_dim, &a);
}

bool rg_cuda_prefill_tc_ok(rg_dtype dt, int head_dim, const void *q, const void *k, const void *v,
			   int ld, const void *out)
{
	return (dt == RG_DTYPE_F16 || dt == RG_DTYPE_BF16) &&
	       (head_dim == 32 || head_dim == 64 || head_dim == 128) && ld % 8 == 0 &&
	       ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out) % 16 == 0;
}

rg_status rg_cuda_prefill_attention_tc(rg_cuda_ctx *c, rg_dtype dt, const void *q, const void *k,
				       const void *v, int ld, const rg_attn_desc *paged,
				       const void *k_cache, const void *v_cache,
				       const int32_t *cu_seqlens, const int32_t *context_lens,
				       int fresh_min, int n_seq, int max_seqlen, int num_heads,
				       int num_kv_heads, int head_dim, float scale, void *out)
{
	tc_call a = {q, k, v, {ld, num_heads * head_dim, num_heads / num_kv_heads, fresh_min},
		     {paged ? k_cache : NULL, paged ? v_cache : NULL,
		      paged ? paged->block_tables : NULL, paged ? paged->max_blocks_per_seq : 0,
		      paged ? paged->block_size : 0, num_kv_heads * head_dim},
		     cu_seqlens, NULL, context_lens, NULL, 0, {NULL, NULL, NULL, 0, 0}, n_seq,
		     max_seqlen, num_heads, scale * 1.4426950408889634f, 1.f / scale, out};

	return tc_dispatch(c, dt, true, head_dim, &a);
}
