/* Encoder attention on Hopper's warpgroup tensor-core instructions (src/ops/cuda/attention_wgmma.cu),
 * taken by rg_cuda_attention_tc (attention_tc.cu) for the plain non-causal packed case when
 * rg_cuda_attention_wgmma_ok says so. Internal to src/ops/cuda, plus the test hooks at the end.
 * Plain C (no CUDA types), so that tests/gpu/test_ops_cuda.c can include it. */
#ifndef RG_OPS_CUDA_ATTENTION_WGMMA_CUH
#define RG_OPS_CUDA_ATTENTION_WGMMA_CUH
#include <stdbool.h>
#include "ops/cuda/ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run once by rg_cuda_backend_init on a compute capability 9.0 device: launches a probe kernel and
 * returns true when the cubin the driver picked for this build is the sm_90a one (wgmma exists
 * only there; a build without sm_90a, or a driver that picks the sm_90 cubin, gets false and the
 * mma.sync kernel). Never fails: any CUDA error reads as false (and is cleared). */
bool rg_cuda_attention_wgmma_probe(rg_cuda_ctx *c);

/* True when rg_cuda_attention_wgmma takes this problem: the context's probe said yes, dt F16 or
 * BF16, head_dim 64 or 128, and the path is on: the test hook's setting, else the environment
 * variable RAGGED_ATTN_WGMMA ("0": off; unset or "1": on; anything else warns and means on:
 * core/tuning.c), read at every call so that a benchmark can switch it in one process. On by
 * default since its H200 run (bench/results/attn_wgmma_h200_20261126-0435.md: 1.07-1.41x the
 * mma.sync kernel alone, BERT-base end to end 1.20-1.36x the graphed PyTorch peer against
 * 1.16-1.32x). The caller has already checked that there is no seg mask, no bias table and no
 * causal mask, and that qkv and out are 16-byte aligned (rg_cuda_attention_tc_ok). */
bool rg_cuda_attention_wgmma_ok(const rg_cuda_ctx *c, rg_dtype dt, int head_dim);

/* The contract of rg_cuda_attention_tc (attention_tc.cuh) without seg and rel_bias:
 * qkv (T, 3 * num_heads * head_dim) act, rows [Q | K | V], head h at columns h * head_dim of each
 * block; cu_seqlens (n_seq + 1) int32 device; out (T, num_heads * head_dim) act, head h at
 * columns h * head_dim; rows of queries past a sequence's end are not written. qscale = scale *
 * log2(e). Launches on c->stream (graph-capturable); RG_ERR_CUDA on a launch failure,
 * RG_ERR_UNSUPPORTED when the device lacks the shared memory (about 97 KiB at head_dim 128). */
rg_status rg_cuda_attention_wgmma(rg_cuda_ctx *c, rg_dtype dt, const void *qkv,
				  const int32_t *cu_seqlens, int n_seq, int max_seqlen, int num_heads,
				  int head_dim, float qscale, void *out);

/* Test hooks, process-wide, not thread-safe against concurrent attention calls:
 * rg_cuda_attention_wgmma_set(on, warpgroups): on = -1 follows RAGGED_ATTN_WGMMA, 0 forces the
 * path off, 1 on (where the device and the problem allow it; it is rg_tuning_set of that row);
 * warpgroups = 0 lets the launcher choose 64- or 128-query tiles, 1 or 2 forces one. rg_cuda_attention_wgmma_launches(): the wgmma
 * kernel launches since the process started (so a test can tell that the path really ran). */
void rg_cuda_attention_wgmma_set(int on, int warpgroups);
unsigned long rg_cuda_attention_wgmma_launches(void);

#ifdef __cplusplus
}
#endif
#endif
