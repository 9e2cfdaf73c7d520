/* GGUF-quantized GEMM weights on the CPU (issue 30, item 1): the blocks stay as the file stores
 * them (ggml's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K, Q6_K), and the GEMM
 * quantizes each activation row to int8 blocks of 32 with one fp32 scale, multiplies block by
 * block in integers and accumulates the per-block products in fp32 -- the scheme of llama.cpp's
 * ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / q4_1_q8_1 / q4_K_q8_K (ggml-cpu/quants.c), written anew
 * here. Internal to src/ops/cpu/.
 *
 * Block formats (ggml's, little-endian, per 32 consecutive values of one weight row):
 *   Q8_0 (34 B): fp16 d, int8 q[32];             w[j] = d * q[j]
 *   Q4_0 (18 B): fp16 d, uint8 qs[16];           w[j] = d * ((qs[j] & 15) - 8),
 *                                                 w[j + 16] = d * ((qs[j] >> 4) - 8), j < 16
 *   Q4_1 (20 B): fp16 d, fp16 m, uint8 qs[16];   w[j] = d * (qs[j] & 15) + m, w[j + 16] with >> 4
 *   Q5_0 (22 B): fp16 d, uint32 qh, uint8 qs[16]; q = Q4_0's nibble | (bit j of qh) << 4 for
 *                value j (j < 32: values j + 16 take the high nibbles); w = d * (q - 16)
 *   Q5_1 (24 B): fp16 d, fp16 m, uint32 qh, uint8 qs[16]; q as Q5_0's; w = d * q + m
 * K-quants, per super-block of 256 values (8 sub-blocks of 32, each one activation block; the
 * layouts of src/core/gguf.c's dequantizers and gguf-py's quants.py):
 *   Q4_K (144 B): fp16 d, fp16 dmin, uint8 scales[12] (8 6-bit scales sc and mins mn,
 *                 rg_q_k4_scales), uint8 qs[128]; sub-block s takes the low nibbles of
 *                 qs[32 (s / 2) + l] (s even) or the high ones (s odd), l < 32;
 *                 w = d sc[s] q - dmin mn[s]
 *   Q5_K (176 B): fp16 d, fp16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]; as Q4_K with
 *                 a fifth bit, bit s of qh[l]: q = nibble | ((qh[l] >> s) & 1) << 4
 *   Q6_K (210 B): uint8 ql[128], uint8 qh[64], int8 scales[16] (one per 16 values), fp16 d;
 *                 value e = 128 h + r: q = (ql[64 h + r % 64] >> 4 (r / 64)) & 15
 *                 | ((qh[32 h + r % 32] >> 2 (r / 32)) & 3) << 4; w = d scales[e / 16] (q - 32)
 * A weight (N, K) is N rows of K / 32 (K-quants: K / 256) blocks each, rows back to back
 * (GGUF's layout of a 2-D tensor with ne = {K, N}). The dot of a weight row with a quantized
 * activation row: per 32 values an integer sum q_w . q_a, times d_w d_a (Q4_1, Q5_1: plus m_w s_a;
 * Q4_K / Q5_K: d sc[s] d_a isum - dmin mn[s] s_a; Q6_K: two integer sums per activation block,
 * one per 16-value scale). */
#ifndef RG_OPS_CPU_QWEIGHT_H
#define RG_OPS_CPU_QWEIGHT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/export.h"
#include "ops/act.h"
#include "ragged.h"

#define RG_QK 32	/* values per block of Q8_0 / Q4_0 / Q4_1, and per activation block */
#define RG_QK_K 256 /* values per K-quant super-block (8 activation blocks) */

/* One activation block (ggml's block_q8_1 in spirit, fp32 fields): x[j] ~= d * q[j], with
 * d = max |x| / 127 and q[j] = round-half-even(x[j] / d) in [-127, 127] (all zero when the
 * block is); s = d * sum(q), which Q4_1's offset m multiplies. 40 bytes. */
typedef struct rg_q8a {
	float d, s;
	int8_t q[RG_QK];
} rg_q8a;

/* IEEE binary16 bits -> float (exact; subnormals, inf and NaN kept). */
static inline float rg_q_f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu, bits;
	float f;

	if (e == 0x1f)
		bits = sign | 0x7f800000u | (m << 13);
	else if (e)
		bits = sign | ((e + 112) << 23) | (m << 13);
	else if (!m)
		bits = sign;
	else { /* subnormal: m * 2^-24 */
		f = (float)m * 5.9604644775390625e-8f;
		memcpy(&bits, &f, 4);
		bits |= sign;
	}
	memcpy(&f, &bits, 4);
	return f;
}

/* The 8 6-bit scales and mins of a Q4_K / Q5_K super-block, packed in the 12 bytes at q
 * (ggml's get_scale_min_k4: for j < 4, sc[j] = q[j] & 63, mn[j] = q[j + 4] & 63,
 * sc[j + 4] = (q[j + 8] & 15) | (q[j] >> 6) << 4, mn[j + 4] = (q[j + 8] >> 4) | (q[j + 4] >> 6)
 * << 4), four bytes at a time in 32-bit words (little-endian host, as GGUF assumes): a shift moves
 * a neighbour byte's bits in only where the mask clears them. */
static inline void rg_q_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
	uint32_t w0, w1, w2, o[4];

	memcpy(&w0, q, 4);
	memcpy(&w1, q + 4, 4);
	memcpy(&w2, q + 8, 4);
	o[0] = w0 & 0x3f3f3f3fu;
	o[1] = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
	o[2] = w1 & 0x3f3f3f3fu;
	o[3] = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
	memcpy(sc, o, 8);
	memcpy(mn, o + 2, 8);
}

/* Bytes of one block of ggml type t (RG_GGUF_Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K /
 * Q6_K numbers), 0 for another type. */
RG_TEST_API size_t rg_cpu_qtype_block_bytes(int type);
/* Values per block of ggml type t: 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), 256 (Q4_K, Q5_K, Q6_K), 0
 * for another type. */
RG_TEST_API int rg_cpu_qtype_block_values(int type);
/* True when the CPU GEMM reads weights of ggml type t as they are (rg_cpu_qtype_block_bytes > 0). */
bool rg_cpu_qtype_supported(int type);

/* Register W (backend memory, N rows of K / rg_cpu_qtype_block_values(type) blocks of ggml type
 * `type`, as above) as a quantized GEMM weight: rg_cpu_gemm / rg_cpu_gemm_bias_act on W then run
 * rg_cpu_qgemm. The registry keeps the pointer only; W stays owned by the caller
 * (rg_cpu_qweight_release before freeing it; backend_cpu.c's dealloc does). K-quant rows need
 * K % 256 == 0, which every GGUF K-quant tensor has (its ne[0] is a whole number of
 * super-blocks, checked at rg_gguf_open); llama-quantize stores rows of other lengths in
 * Q5_0 / Q5_1 / Q8_0 etc. instead (kept quantized too). A type this registry refuses stays on
 * the dequantize-at-load path (src/model/layers.c asks rg_backend_qtype_supported first). Errors: RG_ERR_INVALID_INPUT (unsupported type, K not a multiple
 * of the type's block, N or K <= 0, W already registered), RG_ERR_OOM. Thread-safe. */
RG_TEST_API rg_status rg_cpu_qweight_register(const void *W, int type, int N, int K);
/* Register W as a stack of n parts of different types (a fused QKV whose V is Q6_K beside Q4_K
 * Q and K, as llama-quantize's Q4_K_M writes some layers): part i is rows[i] rows of ggml type
 * types[i], its blocks right after part i - 1's, every part K wide. The GEMM on W (N = the sum of
 * rows) runs each part's rows with its own kernel. n = 1 is rg_cpu_qweight_register. Errors as
 * there, and RG_ERR_INVALID_INPUT for n outside [1, RG_CPU_QPARTS] or a row count <= 0. */
#define RG_CPU_QPARTS 4
RG_TEST_API rg_status rg_cpu_qweight_register_parts(const void *W, int n, const int *types,
						    const int *rows, int K);
/* Forget W (unknown or NULL: no-op). */
RG_TEST_API void rg_cpu_qweight_release(const void *W);

/* What was registered for W: N rows in n_parts parts (part i: part_rows[i] rows of
 * part_type[i]); type is the one type of a single-part weight, -1 for a mixed stack. A struct
 * written by hand as {W, type, N, K} (n_parts 0) is one part of type. */
typedef struct rg_cpu_qweight {
	const void *W;
	int type, N, K;
	int n_parts;
	int part_type[RG_CPU_QPARTS], part_rows[RG_CPU_QPARTS];
} rg_cpu_qweight;
/* The registration of W (copied into *out) or false. Thread-safe. */
RG_TEST_API bool rg_cpu_qweight_find(const void *W, rg_cpu_qweight *out);

/* out (M, N) f32 = act(A (M, K) f32 x dequant(W)^T + bias (N) f32 or NULL), row-major, on
 * ragged's thread pool: the rows of A quantized to rg_q8a blocks (kern->q8_quant_row, into a
 * buffer of the calling thread kept for the next call), then tasks of consecutive rows of W,
 * each W row read once for all M rows (kern->qdot_*), then bias and activation on the task's
 * columns. kern: the kernel table (NULL: rg_cpu_kern_select()). The error against the exact
 * product is that of rounding A to 8 bits per block (|err| <= sum_j |w_j| d_block / 2) plus fp32
 * accumulation. Errors: RG_ERR_INVALID_INPUT (shape not the registered one), RG_ERR_OOM. */
struct rg_cpu_kern;
RG_TEST_API rg_status rg_cpu_qgemm(const struct rg_cpu_kern *kern, const rg_cpu_qweight *w,
				   const float *A, const float *bias, float *out, int M, int N,
				   int K, rg_act act);
#endif
