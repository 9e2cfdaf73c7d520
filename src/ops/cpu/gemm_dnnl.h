/* The CPU linear layers through oneDNN matmul (Debian libdnnl 2.6): weights reordered once, at
 * load, into the blocked layout the library's AVX-512/AMX "brgemm" kernels read, and bias +
 * activation run as the matmul's post-op while the tile is in registers.
 *
 * Why: every small-M OpenBLAS call packs its whole weight panel again; measured on the 2-core
 * Zen 5 and the 16-core Sapphire Rapids, oneDNN with pre-reordered weights is the fastest library
 * on every BERT layer shape (bench/results/gemm_libs_cpu_2core-amd-epyc_20261122-1901.md: 1.7x
 * at M = 64 and up to 3.7x at M = 12 per layer against the OpenBLAS tiles).
 *
 * Threads: oneDNN is run single-threaded (its OpenMP team is set to 1 on every ragged pool
 * thread), one primitive per output tile, so ragged's pool stays the only set of math threads
 * (issue 7). Compiled to stubs that report "unavailable" without RG_WITH_DNNL. */
#ifndef RG_OPS_CPU_GEMM_DNNL_H
#define RG_OPS_CPU_GEMM_DNNL_H
#include <stdbool.h>
#include "ragged.h"
#include "ops/act.h"

/* A weight matrix prepared for oneDNN. Opaque; owned by the registry in gemm_dnnl.c. */
typedef struct rg_dnnl_weight rg_dnnl_weight;

/* True when this build links oneDNN, the library initialised, its kernels for this CPU are not
 * the reference ones, and RAGGED_CPU_GEMM is not "openblas". */
bool rg_dnnl_enabled(void);

/* "onednn <version> (<isa>)" or "openblas": the library that runs registered linear layers. */
const char *rg_dnnl_describe(void);

/* True when oneDNN is enabled and the CPU has AVX512-BF16 (Zen 4/5, Cooper Lake) or AMX
 * (Sapphire Rapids and later): the ISAs whose bf16 matmul kernels are native. */
bool rg_dnnl_bf16_supported(void);

/* Prepare W (N, K) float32 row-major (PyTorch's nn.Linear layout) for rg_dnnl_gemm, with weights
 * of dtype dt (RG_DTYPE_F32 or RG_DTYPE_BF16):
 * - f32: reorder it into oneDNN's blocked layout, in place when that layout is the same size (N
 *   a multiple of the kernel's 64-column block), else into a buffer the registry owns. After
 *   RG_OK, W's bytes are no longer row-major: only rg_dnnl_find / rg_dnnl_gemm may read them
 *   until rg_dnnl_release. When oneDNN is not enabled, or offers only reference kernels for this
 *   shape, W is left untouched and the call returns RG_OK without registering (OpenBLAS runs
 *   it).
 * - bf16: W rounded to nearest even into a blocked bf16 buffer the registry owns (N*K*2 bytes
 *   plus padding); W itself is left untouched. Every rg_dnnl_gemm on it rounds A to bf16 and
 *   accumulates in f32 (bias and activation in f32): the "autocast" mixed precision of PyTorch
 *   on the CPU, run by AMX tiles or AVX512-BF16 dot products.
 * Errors: RG_ERR_INVALID_INPUT (bad shape, W already registered), RG_ERR_OOM, RG_ERR_UNSUPPORTED
 * (bf16 without rg_dnnl_bf16_supported(), or no native bf16 kernel for this shape). */
rg_status rg_dnnl_prepare(float *W, int N, int K, rg_dtype dt);

/* Forget W: frees what rg_dnnl_prepare allocated. W's bytes stay in the blocked layout.
 * Unknown or NULL W: no-op. */
void rg_dnnl_release(const float *W);

/* The prepared weight registered for W, or NULL. Thread-safe. */
const rg_dnnl_weight *rg_dnnl_find(const float *W);

/* out (M, N) = A (M, K) * W^T [+ bias (N)], then act, float32 row-major, on ragged's thread pool.
 * Tiles: whole rows and 64-aligned column blocks, one per thread, for M <= 256; 256-row blocks
 * otherwise. Each tile runs one cached primitive for its largest multiple of 16 rows and one for
 * the remainder (at most 31 primitives per weight shape, created on first use, 0.3 ms each).
 * With bf16 weights, A is first rounded to bf16 into a buffer of the calling thread (M*K*2
 * bytes, kept for the next call), on the pool.
 * N, K must be the ones W was prepared with (RG_ERR_INVALID_INPUT otherwise: its bytes are not
 * row-major any more, so no other path can run it).
 * Smaller M on f32 weights in oneDNN's <kb>a64b layout runs no primitive: the kernel table
 * streams each 64-column block once, tasks of consecutive blocks (and row parts where that
 * evens out the threads) spread over the pool, through gemv_blk for M <= RG_CPU_GEMV_MAX (a
 * decode step of a few sequences) and gemm_blk up to rg_cpu_smallm_max() rows (192 on 1-2
 * threads, 32 on more; RAGGED_CPU_SMALLM=0 turns it off), which also take the few remainder
 * rows of larger products' tiles: for one short sentence the weights come from DRAM on every
 * call, and oneDNN's brgemm streamed them at 55-60% of the core's read bandwidth
 * (bench/results/single_sentence_cpu_2core-amd-epyc_20261125-2217.md).
 * Errors: RG_ERR_INTERNAL when oneDNN fails (message names the call). */
rg_status rg_dnnl_gemm(const rg_dnnl_weight *w, const float *A, const float *bias, float *out,
		       int M, int N, int K, rg_act act);
#endif
