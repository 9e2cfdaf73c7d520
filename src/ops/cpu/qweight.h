/* GGUF-quantized GEMM weights on the CPU (issue 30, item 1): the blocks stay as the file stores
 * them (ggml's Q8_0, Q4_0, Q4_1), and the GEMM quantizes each activation row to int8 blocks of
 * 32 with one fp32 scale, multiplies block by block in integers and accumulates the per-block
 * products in fp32 -- the scheme of llama.cpp's ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / q4_1_q8_1
 * (ggml-cpu/quants.c), written anew here. Internal to src/ops/cpu/.
 *
 * Block formats (ggml's, little-endian, per 32 consecutive values of one weight row):
 *   Q8_0 (34 B): fp16 d, int8 q[32];             w[j] = d * q[j]
 *   Q4_0 (18 B): fp16 d, uint8 qs[16];           w[j] = d * ((qs[j] & 15) - 8),
 *                                                 w[j + 16] = d * ((qs[j] >> 4) - 8), j < 16
 *   Q4_1 (20 B): fp16 d, fp16 m, uint8 qs[16];   w[j] = d * (qs[j] & 15) + m, w[j + 16] with >> 4
 * A weight (N, K) is N rows of K / 32 blocks each, rows back to back (GGUF's layout of a 2-D
 * tensor with ne = {K, N}). */
#ifndef RG_OPS_CPU_QWEIGHT_H
#define RG_OPS_CPU_QWEIGHT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/export.h"
#include "ops/act.h"
#include "ragged.h"

#define RG_QK 32 /* values per block, every supported type */

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

/* Bytes of one block of ggml type t (RG_GGUF_Q8_0 / Q4_0 / Q4_1 numbers), 0 for another type. */
RG_TEST_API size_t rg_cpu_qtype_block_bytes(int type);
/* True when the CPU GEMM reads weights of ggml type t as they are (rg_cpu_qtype_block_bytes > 0). */
bool rg_cpu_qtype_supported(int type);

/* Register W (backend memory, N rows of K / 32 blocks of ggml type `type`, as above) as a
 * quantized GEMM weight: rg_cpu_gemm / rg_cpu_gemm_bias_act on W then run rg_cpu_qgemm. The
 * registry keeps the pointer only; W stays owned by the caller (rg_cpu_qweight_release before
 * freeing it; backend_cpu.c's dealloc does). Errors: RG_ERR_INVALID_INPUT (unsupported type, K not
 * a multiple of 32, N or K <= 0, W already registered), RG_ERR_OOM. Thread-safe. */
RG_TEST_API rg_status rg_cpu_qweight_register(const void *W, int type, int N, int K);
/* Forget W (unknown or NULL: no-op). */
RG_TEST_API void rg_cpu_qweight_release(const void *W);

/* What was registered for W. */
typedef struct rg_cpu_qweight {
	const void *W;
	int type, N, K;
} rg_cpu_qweight;
/* The registration of W (copied into *out) or false. Thread-safe. */
bool rg_cpu_qweight_find(const void *W, rg_cpu_qweight *out);

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
