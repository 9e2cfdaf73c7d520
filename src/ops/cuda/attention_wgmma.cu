/* Encoder attention (non-causal, packed variable-length sequences, no seg mask, no bias) on
 * Hopper's warpgroup MMA (wgmma.mma_async), fp16 / bf16, head_dim 64 or 128. Semantics: those of
 * rg_op_attention (src/ops/ops.h) for that case; the mma.sync kernel of attention_tc.cu keeps
 * every other case and every other GPU.
 *
 * Algorithm: FlashAttention-2's online softmax (Dao, 2023) on the instructions FlashAttention-3
 * uses for its GEMMs (Shah et al., 2024: wgmma with both S = Q K^T operands in shared memory, and
 * P V with P straight from the registers of the S accumulator), without FA3's warp specialisation
 * and TMA: every thread of the CTA copies K/V tiles with 16-byte cp.async (double buffered, one
 * tile in flight while the other is computed), which keeps the variable-length rows of the packed
 * QKV (row stride 3 * H) free of per-sequence tensor maps.
 *  - grid (n_seq, num_heads, ceil(max_seqlen / BQ)); a CTA of NWG warpgroups (128 threads each)
 *    owns BQ = 64 * NWG queries of one head of one sequence; warpgroup w owns query rows
 *    64w..64w+63 of the tile (all of them in every wgmma: M = 64). CTAs past a sequence's end exit.
 *  - per key tile of BN keys (BN = 128 at head_dim 64, 64 at head_dim 128):
 *      S (64 x BN, f32) = Q (64 x D) K^T: D/16 wgmma m64nBNk16, A = Q and B = K from shared memory
 *      (both "K-major": head_dim contiguous);
 *      keys >= L get -inf (only in the last, partial tile); row max over the 4 lanes of a quad;
 *      running max / sum / rescale of O in f32; P = exp2(S * qscale - m * qscale) (the softmax
 *      scale folded into one FMA, as FA2) rounded to the input dtype into A-operand registers;
 *      O (64 x D, f32) += P V: BN/16 wgmma m64nDk16, A = P from registers, B = V from shared
 *      memory, which is stored [key][head_dim] ("MN-major" for this product: the transpose bit).
 *  - end: O / l in the act dtype, rows past the sequence not written.
 *
 * Shared-memory layout (the canonical 128-byte-swizzled wgmma layout, CUTLASS's
 * Layout_K_SW128_Atom / Layout_MN_SW128_Atom for 16-bit types): a tile of R rows x D columns is
 * D/64 column blocks of R x 64 elements, one after the other (R * 128 bytes each); in a block, row r
 * is 128 contiguous bytes at r * 128, and its 16-byte chunk c (columns 8c..8c+7) is stored at chunk
 * position c ^ (r & 7). Every block starts 1024-byte aligned, so the XOR the hardware applies to
 * address bits [4,7) from bits [7,10) is exactly r & 7. The same bytes serve as a K-major operand
 * (Q, K: rows = M or N, columns = the reduction) and as an MN-major one (V: rows = the reduction).
 * Matrix descriptors (PTX ISA "matrix-descriptor-encode"; CUTLASS GmmaDescriptor):
 *   bits [0,14) start address >> 4; [16,30) leading byte offset >> 4; [32,46) stride byte offset
 *   >> 4; [49,52) base offset (0: blocks are 1024-aligned); [62,64) swizzle (1 = 128 bytes).
 *   K-major (Q, K): SBO = 1024 (from one group of 8 rows to the next); LBO unused with 128-byte
 *   swizzling (1); the k16 step kk inside a 64-column block advances the start address by 32 * kk
 *   bytes (the hardware swizzles the computed address), the next column block by R * 128 bytes.
 *   MN-major (V): SBO = 1024 (from 8 keys to the next 8), LBO = BN * 128 (from one 64-column block
 *   of head_dim to the next: used by n128); key step kk starts at row 16 kk (+2048 * kk bytes).
 *
 * Register fragments (PTX ISA "wgmma register fragments", m64nNk16, f32 accumulator, 16-bit A):
 * warp i of the warpgroup (i = (thread % 128) / 32) holds rows 16i..16i+15; with lane = 4g + t
 * (g = lane / 4, t = lane % 4), accumulator register 4j + e (j < N / 8, e < 4) is
 *   row 16i + g + 8 * (e / 2), column 8j + 2t + (e % 2)
 * (the mma.sync m16n8 C layout repeated over N / 8 column tiles). So a row's N values are spread
 * over the 4 lanes of one quad: row max / sum reduce with two xor-shuffles (1, 2). The A fragment
 * of one k16 step (4 registers of 2 halves) is
 *   a0 = (row g, cols 2t, 2t+1), a1 = (row g+8, cols 2t, 2t+1),
 *   a2 = (row g, cols 8+2t, 9+2t), a3 = (row g+8, cols 8+2t, 9+2t)   (+16i on rows),
 * i.e. the accumulator registers 4j..4j+3 of column tiles j = 2kk and 2kk+1 packed in pairs:
 * a0 = pack(s[2kk][0], s[2kk][1]), a1 = pack(s[2kk][2], s[2kk][3]), a2 = pack(s[2kk+1][0..1]),
 * a3 = pack(s[2kk+1][2..3]); no data moves between threads (as in FA2 with mma.sync and FA3's
 * 16-bit case).
 *
 * Ordering: cp.async writes are generic-proxy writes and wgmma reads shared memory through the
 * async proxy, so each thread waits for its copies, fences (fence.proxy.async.shared::cta), and
 * the CTA barrier follows before any wgmma reads the tile; a buffer is refilled only after the
 * barrier that follows every warpgroup's wait for the wgmmas that read it. wgmma.fence precedes
 * each batch of wgmmas (their accumulator and A registers were written by ordinary instructions);
 * after wgmma.wait_group 0 every accumulator register goes through an empty volatile asm, so the
 * compiler cannot hoist a read of it above the wait.
 *
 * Registers per thread (head_dim 64): 64 S + 32 O + 32 P; (128): 32 S + 64 O + 16 P.
 * Shared memory: (BQ * D + 4 * BN * D) * 2 bytes + 1 KiB alignment slack: 81 KiB (64, two
 * warpgroups), 97 KiB (128, two warpgroups). */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "ops/cuda/attention_wgmma.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/tc_ptx.cuh"

/* Device code with wgmma exists only in the sm_90a compilation; elsewhere the kernel is empty and
 * the probe reports false, so the host never launches it. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#else
#define WG_ON 0
#endif

/* Keys per shared-memory tile: 128 at head_dim 64 (S = 64 registers), 64 at head_dim 128 (O is
 * already 64). */
#define WG_BN(D) ((D) == 64 ? 128 : 64)

static size_t wg_smem_bytes(int D, int nwg)
{
	return (size_t)(nwg * 64 * D + 4 * WG_BN(D) * D) * 2 + 1024;
}

/* ---- PTX wrappers (cp.async, exp2, packing: tc_ptx.cuh) ---- */
/* This thread's generic-proxy shared-memory writes become visible to the async proxy (wgmma). */
__device__ __forceinline__ void wg_fence_proxy_async(void)
{
#if WG_ON
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wg_fence(void)
{
#if WG_ON
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wg_commit(void)
{
#if WG_ON
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wg_wait_all(void)
{
#if WG_ON
	asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

/* Pin n accumulator registers after a wait (see the ordering note at the top). */
template <int N> __device__ __forceinline__ void wg_fence_regs(float *r)
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(r[i])::"memory");
}

/* Matrix descriptor of a 128-byte-swizzled operand at shared address addr (layout above). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
	       ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

/* Operand lists of the wgmma wrappers: accumulator registers d[0..n) as "+f". */
#define WG_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F16(d, i) WG_F4(d, i), WG_F4(d, i + 4), WG_F4(d, i + 8), WG_F4(d, i + 12)
#define WG_F32(d, i) WG_F16(d, i), WG_F16(d, i + 16)
#define WG_F64(d) WG_F32(d, 0), WG_F32(d, 32)
#define WG_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
	"%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
	"%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
	"%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
	"%54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* d (64 x N f32) = (acc ? d : 0) + A (64 x 16, descriptor da, K-major) * B (16 x N, descriptor
 * db, K-major: stored N x 16). TY: "f16" or "bf16"; IA, IB, IC: the operand numbers of da, db,
 * acc (after the N/2 accumulator registers). */
#define WG_SS(N, RL, OPS, IA, IB, IC, TY)                                                        \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IC ", 0;\n"                          \
		     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " RL           \
		     ", %" #IA ", %" #IB ", p, 1, 1, 0, 0;\n}\n"                                  \
		     : OPS                                                                        \
		     : "l"(da), "l"(db), "r"(acc))
/* d (64 x N f32) += A (64 x 16 from registers a[0..4)) * B (16 x N, descriptor db, MN-major:
 * stored 16 x N, the transpose bit set). A0..A3, IB, IC: operand numbers of a, db, the constant 1. */
#define WG_RS(N, RL, OPS, A0, A1, A2, A3, IB, IC, TY)                                            \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IC ", 0;\n"                          \
		     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " RL           \
		     ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #IB ", p, 1, 1, 1;\n}\n"    \
		     : OPS                                                                        \
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))

template <typename T, int N> struct wg_mma;

template <> struct wg_mma<__half, 64> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc)
	{
#if WG_ON
		WG_SS(64, WG_R32, WG_F32(d, 0), 32, 33, 34, "f16");
#endif
	}
	static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t db)
	{
#if WG_ON
		WG_RS(64, WG_R32, WG_F32(d, 0), 32, 33, 34, 35, 36, 37, "f16");
#endif
	}
};

template <> struct wg_mma<__half, 128> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc)
	{
#if WG_ON
		WG_SS(128, WG_R64, WG_F64(d), 64, 65, 66, "f16");
#endif
	}
	static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t db)
	{
#if WG_ON
		WG_RS(128, WG_R64, WG_F64(d), 64, 65, 66, 67, 68, 69, "f16");
#endif
	}
};

template <> struct wg_mma<__nv_bfloat16, 64> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc)
	{
#if WG_ON
		WG_SS(64, WG_R32, WG_F32(d, 0), 32, 33, 34, "bf16");
#endif
	}
	static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t db)
	{
#if WG_ON
		WG_RS(64, WG_R32, WG_F32(d, 0), 32, 33, 34, 35, 36, 37, "bf16");
#endif
	}
};

template <> struct wg_mma<__nv_bfloat16, 128> {
	static __device__ __forceinline__ void ss(float *d, uint64_t da, uint64_t db, int acc)
	{
#if WG_ON
		WG_SS(128, WG_R64, WG_F64(d), 64, 65, 66, "bf16");
#endif
	}
	static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t db)
	{
#if WG_ON
		WG_RS(128, WG_R64, WG_F64(d), 64, 65, 66, 67, 68, 69, "bf16");
#endif
	}
};

/* Issue the cp.async copies of rows r0..r0+R-1 (of stride ld elements from src; rows >= L
 * zero-filled) of D columns into the swizzled tile at shared address dst; all NT threads call it. */
template <typename T, int D, int R, int NT>
__device__ __forceinline__ void wg_load_tile(uint32_t dst, const T *src, size_t ld, int r0, int L)
{
	constexpr int CPR = D / 8; /* 16-byte chunks per row */
	for (int e = threadIdx.x; e < R * CPR; e += NT) {
		const int r = e / CPR, c = e % CPR;
		const bool v = r0 + r < L;
		const uint32_t d = dst + (uint32_t)((c >> 3) * (R * 128) + r * 128 +
						    (((c & 7) ^ (r & 7)) << 4));
		rg_cp16(d, src + (size_t)(v ? r0 + r : 0) * ld + c * 8, v);
	}
}

template <typename T, int D, int NWG>
__global__ void __launch_bounds__(NWG * 128, NWG == 2 ? 2 : 3)
attention_wgmma_kernel(const T *__restrict__ qkv, const int32_t *__restrict__ cu_seqlens,
		       int max_seqlen, int num_heads, float qscale, T *__restrict__ out, int *flag)
{
#if WG_ON
	constexpr int BN = WG_BN(D), BQ = NWG * 64, NT = NWG * 128;
	constexpr int QBYTES = BQ * D * 2, KVBYTES = BN * D * 2; /* Q tile; one K or V buffer */
	constexpr int NS = BN / 8, NO = D / 8;                    /* n8 column tiles of S and O */
	extern __shared__ unsigned char wg_sm[];
	const uint32_t sm0 = (rg_smem_addr(wg_sm) + 1023u) & ~1023u;
	const uint32_t Qs = sm0, Ks = Qs + QBYTES, Vs = Ks + 2 * KVBYTES;

	const int s = blockIdx.x, h = blockIdx.y, q0 = blockIdx.z * BQ;
	const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
	const int g = lane >> 2, tig = lane & 3;
	const int H = num_heads * D;
	const size_t ld = 3 * (size_t)H;
	rg_pdl_wait(); /* qkv comes from the GEMM just before (programmatic launch) */
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
	const int nq = min(BQ, L - q0);
	const T *qb = qkv + (size_t)t0 * ld + (size_t)h * D, *kb = qb + H, *vb = qb + 2 * H;

	/* group 0: the Q tile and K/V tile 0 */
	wg_load_tile<T, D, BQ, NT>(Qs, qb, ld, q0, L);
	wg_load_tile<T, D, BN, NT>(Ks, kb, ld, 0, L);
	wg_load_tile<T, D, BN, NT>(Vs, vb, ld, 0, L);
	rg_cp_commit();

	const bool active = wg * 64 < nq; /* warpgroup-uniform: it has a real query row */
	float o[NO][4];
	float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.f, 0.f };
#pragma unroll
	for (int j = 0; j < NO; j++)
		o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

	const int ntiles = (L + BN - 1) / BN;
	for (int t = 0; t < ntiles; t++) {
		const int buf = t & 1, k0 = t * BN;
		rg_cp_wait<0>();
		wg_fence_proxy_async();
		__syncthreads(); /* tile t visible to every warpgroup's wgmma; tile t-1's reads done */
		if (t + 1 < ntiles) {
			wg_load_tile<T, D, BN, NT>(Ks + (buf ^ 1) * KVBYTES, kb, ld, k0 + BN, L);
			wg_load_tile<T, D, BN, NT>(Vs + (buf ^ 1) * KVBYTES, vb, ld, k0 + BN, L);
			rg_cp_commit();
		}
		if (!active)
			continue;

		/* S = Q K^T (raw scores) */
		float sc[NS][4];
#pragma unroll
		for (int j = 0; j < NS; j++)
			sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
		const uint32_t kbuf = Ks + buf * KVBYTES, vbuf = Vs + buf * KVBYTES;
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			const uint32_t cb = kk >> 2, ko = (kk & 3) * 32;
			const uint64_t da = wg_desc(Qs + cb * (BQ * 128) + wg * (64 * 128) + ko, 16,
						    1024);
			const uint64_t db = wg_desc(kbuf + cb * (BN * 128) + ko, 16, 1024);
			wg_mma<T, BN>::ss(&sc[0][0], da, db, kk > 0);
		}
		wg_commit();
		wg_wait_all();
		wg_fence_regs<NS * 4>(&sc[0][0]);

		/* mask keys past L (only the last tile can have them); running max and rescale */
		const bool full = k0 + BN <= L; /* CTA-uniform */
		float tmax[2] = { -INFINITY, -INFINITY };
#pragma unroll
		for (int j = 0; j < NS; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				if (!full && k0 + j * 8 + tig * 2 + (e & 1) >= L)
					sc[j][e] = -INFINITY;
				tmax[e >> 1] = fmaxf(tmax[e >> 1], sc[j][e]);
			}
		float msub[2];
#pragma unroll
		for (int r = 0; r < 2; r++) {
			tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
			tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
			/* m: running max of the raw scores; msub: it in exp2 units */
			const float mnew = fmaxf(m[r], tmax[r]);
			msub[r] = mnew == -INFINITY ? 0.f : mnew * qscale;
			const float corr = rg_exp2_approx(m[r] == -INFINITY ? -INFINITY
								     : m[r] * qscale - msub[r]);
			m[r] = mnew;
			l[r] *= corr;
#pragma unroll
			for (int j = 0; j < NO; j++) {
				o[j][2 * r] *= corr;
				o[j][2 * r + 1] *= corr;
			}
		}
		/* P = exp2(S * qscale - msub) as A fragments (layout note at the top); l sums P in
		 * f32 before rounding, as FA2 */
		uint32_t p[BN / 16][4];
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
			float x[8];
#pragma unroll
			for (int e = 0; e < 4; e++) {
				x[e] = rg_exp2_approx(fmaf(sc[2 * kk][e], qscale, -msub[e >> 1]));
				x[4 + e] = rg_exp2_approx(fmaf(sc[2 * kk + 1][e], qscale, -msub[e >> 1]));
			}
			l[0] += x[0] + x[1] + x[4] + x[5];
			l[1] += x[2] + x[3] + x[6] + x[7];
			p[kk][0] = rg_pack2<T>(x[0], x[1]);
			p[kk][1] = rg_pack2<T>(x[2], x[3]);
			p[kk][2] = rg_pack2<T>(x[4], x[5]);
			p[kk][3] = rg_pack2<T>(x[6], x[7]);
		}
		/* O += P V */
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++)
			wg_mma<T, D>::rs(&o[0][0], p[kk],
					 wg_desc(vbuf + kk * (16 * 128), BN * 128, 1024));
		wg_commit();
		wg_wait_all();
		wg_fence_regs<NO * 4>(&o[0][0]);
	}

	if (!active)
		return;
	T *ob = out + (size_t)t0 * H + (size_t)h * D;
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float lt = l[r];
		lt += __shfl_xor_sync(0xffffffffu, lt, 1);
		lt += __shfl_xor_sync(0xffffffffu, lt, 2);
		const float inv = lt > 0.f ? 1.f / lt : 0.f;
		const int qr = wg * 64 + warp * 16 + g + 8 * r;
		if (qr < nq) {
			T *orow = ob + (size_t)(q0 + qr) * H + tig * 2;
#pragma unroll
			for (int j = 0; j < NO; j++)
				rg_store2<T>(orow + j * 8, o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
		}
	}
#endif
}

__global__ void attention_wgmma_probe_kernel(int *out)
{
	*out = WG_ON;
}

extern "C" bool rg_cuda_attention_wgmma_probe(rg_cuda_ctx *c)
{
	int v = 0;

	if (cudaSetDevice(c->device) != cudaSuccess)
		goto out_clear;
	attention_wgmma_probe_kernel<<<1, 1, 0, c->stream>>>((int *)c->workspace_d);
	if (cudaGetLastError() != cudaSuccess)
		goto out_clear;
	if (cudaMemcpyAsync(&v, c->workspace_d, sizeof(v), cudaMemcpyDeviceToHost, c->stream) !=
		    cudaSuccess ||
	    cudaStreamSynchronize(c->stream) != cudaSuccess)
		goto out_clear;
	return v == 1;

out_clear:
	(void)cudaGetLastError();
	return false;
}

static int g_wg_nwg = 0;
static unsigned long g_wg_launches;

extern "C" void rg_cuda_attention_wgmma_set(int on, int warpgroups)
{
	/* valid values: cannot fail */
	(void)rg_tuning_set("RAGGED_ATTN_WGMMA", on < 0 ? NULL : on ? "1" : "0");
	g_wg_nwg = warpgroups;
}

extern "C" unsigned long rg_cuda_attention_wgmma_launches(void)
{
	return __atomic_load_n(&g_wg_launches, __ATOMIC_RELAXED);
}

extern "C" bool rg_cuda_attention_wgmma_ok(const rg_cuda_ctx *c, rg_dtype dt, int head_dim)
{
	if (!c->wgmma || (dt != RG_DTYPE_F16 && dt != RG_DTYPE_BF16) ||
	    (head_dim != 64 && head_dim != 128))
		return false;
	return rg_tuning_bool(RG_TUNE_ATTN_WGMMA); /* an rg_cuda_attention_wgmma_set override, or
						      * the environment at every call */
}

template <typename T, int D, int NWG>
static rg_status wg_launch(rg_cuda_ctx *c, int bit, const void *qkv, const int32_t *cu_seqlens,
			   int n_seq, int max_seqlen, int num_heads, float qscale, void *out)
{
	const size_t smem = wg_smem_bytes(D, NWG);
	dim3 grid(n_seq, num_heads, (max_seqlen + NWG * 64 - 1) / (NWG * 64));

	if (!(c->wgmma_smem_set & (1u << bit))) {
		if ((int)smem > c->max_smem_optin)
			return rg_errorf(RG_ERR_UNSUPPORTED, "attention (wgmma): head_dim %d needs %zu "
					 "bytes of shared memory, device allows %d", D, smem,
					 c->max_smem_optin);
		rg_status st = rg_cuda_err(
			cudaFuncSetAttribute(attention_wgmma_kernel<T, D, NWG>,
					     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
			"cudaFuncSetAttribute(attention_wgmma)");
		if (st != RG_OK)
			return st;
		c->wgmma_smem_set |= 1u << bit;
	}
	rg_launch(c, attention_wgmma_kernel<T, D, NWG>, grid, NWG * 128, smem, (const T *)qkv,
		  cu_seqlens, max_seqlen, num_heads, qscale, (T *)out, c->flag_d);
	__atomic_add_fetch(&g_wg_launches, 1, __ATOMIC_RELAXED);
	return rg_cuda_launch_check("attention_wgmma_kernel");
}

/* Two warpgroups (128-query tiles: each K/V tile copied once for 128 queries) when the grid of
 * 64-query tiles has >= 8 CTAs per SM and sequences are longer than 64 tokens (the rule of
 * attention_tc.cu's MT = 2); one otherwise (few or short sequences: more CTAs, less waste).
 * wgmma_smem_set bits: D 64 -> 0 + (nwg - 1), D 128 -> 2 + ..., bf16 + 4. */
template <typename T>
static rg_status wg_dispatch(rg_cuda_ctx *c, int bit0, const void *qkv, const int32_t *cu_seqlens,
			     int n_seq, int max_seqlen, int num_heads, int head_dim, float qscale,
			     void *out)
{
	const long tiles64 = (long)n_seq * num_heads * ((max_seqlen + 63) / 64);
	const bool two = g_wg_nwg ? g_wg_nwg == 2 : max_seqlen > 64 && tiles64 >= 8L * c->num_sms;

	if (head_dim == 64)
		return two ? wg_launch<T, 64, 2>(c, bit0 + 1, qkv, cu_seqlens, n_seq, max_seqlen,
						 num_heads, qscale, out)
			   : wg_launch<T, 64, 1>(c, bit0 + 0, qkv, cu_seqlens, n_seq, max_seqlen,
						 num_heads, qscale, out);
	if (head_dim == 128)
		return two ? wg_launch<T, 128, 2>(c, bit0 + 3, qkv, cu_seqlens, n_seq, max_seqlen,
						  num_heads, qscale, out)
			   : wg_launch<T, 128, 1>(c, bit0 + 2, qkv, cu_seqlens, n_seq, max_seqlen,
						  num_heads, qscale, out);
	return rg_errorf(RG_ERR_UNSUPPORTED, "attention (wgmma): head_dim %d", head_dim);
}

extern "C" rg_status rg_cuda_attention_wgmma(rg_cuda_ctx *c, rg_dtype dt, const void *qkv,
					     const int32_t *cu_seqlens, int n_seq, int max_seqlen,
					     int num_heads, int head_dim, float qscale, void *out)
{
	if (dt == RG_DTYPE_F16)
		return wg_dispatch<__half>(c, 0, qkv, cu_seqlens, n_seq, max_seqlen, num_heads,
					   head_dim, qscale, out);
	if (dt == RG_DTYPE_BF16)
		return wg_dispatch<__nv_bfloat16>(c, 4, qkv, cu_seqlens, n_seq, max_seqlen,
						  num_heads, head_dim, qscale, out);
	return rg_errorf(RG_ERR_UNSUPPORTED, "attention (wgmma): dtype %d", (int)dt);
}
