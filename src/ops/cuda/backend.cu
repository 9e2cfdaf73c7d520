/* CUDA backend context and memory: device selection, the one stream, the cuBLASLt handle and its
 * 32 MiB workspace (allocated once), the device error flag, allocations and host<->device copies. */
#include <stdlib.h>
#include <string.h>

#include "core/tuning.h"
#include "ops/cuda/attention_wgmma.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/qgemv.cuh"

extern "C" int rg_cuda_count_devices(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

/* Create the context for device `device_index` computing in `dt` (F32, F16 or BF16).
 * Errors: RG_ERR_UNSUPPORTED (no such device, compute capability < 8.0, bad dtype),
 * RG_ERR_OOM (workspace), RG_ERR_CUDA. On error nothing is left allocated. Free with
 * rg_cuda_backend_free. */
extern "C" rg_status rg_cuda_backend_init(int device_index, rg_dtype dt, rg_cuda_ctx **out)
{
	rg_cuda_ctx *c;
	cudaDeviceProp prop;
	int n = rg_cuda_count_devices();
	rg_status st;

	*out = NULL;
	if (!rg_cuda_dt_valid(dt))
		return rg_errorf(RG_ERR_UNSUPPORTED, "CUDA backend: unknown dtype %d", (int)dt);
	if (n <= 0)
		return rg_errorf(RG_ERR_UNSUPPORTED, "no CUDA device is available");
	if (device_index < 0 || device_index >= n)
		return rg_errorf(RG_ERR_UNSUPPORTED, "CUDA device %d does not exist (%d present)",
				 device_index, n);
	st = rg_cuda_err(cudaGetDeviceProperties(&prop, device_index), "cudaGetDeviceProperties");
	if (st != RG_OK)
		return st;
	if (prop.major < 8)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "CUDA device %d (%s) has compute capability %d.%d; ragged is built "
				 "for sm_80 and newer", device_index, prop.name, prop.major, prop.minor);
	c = (rg_cuda_ctx *)calloc(1, sizeof(*c));
	if (!c)
		return rg_errorf(RG_ERR_OOM, "out of host memory");
	c->device = device_index;
	c->dt = dt;
	c->num_sms = prop.multiProcessorCount;
	st = rg_cuda_err(cudaSetDevice(device_index), "cudaSetDevice");
	if (st != RG_OK)
		goto out_free_ctx;
	st = rg_cuda_err(cudaDeviceGetAttribute(&c->max_smem_optin,
						cudaDevAttrMaxSharedMemoryPerBlockOptin,
						device_index), "cudaDeviceGetAttribute");
	if (st != RG_OK)
		goto out_free_ctx;
	st = rg_cuda_err(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
			 "cudaStreamCreate");
	if (st != RG_OK)
		goto out_free_ctx;
	if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
		st = rg_errorf(RG_ERR_CUDA, "cublasLtCreate failed");
		goto out_free_stream;
	}
	if (cudaMalloc(&c->workspace_d, RG_CUDA_WORKSPACE_BYTES) != cudaSuccess) {
		(void)cudaGetLastError();
		st = rg_errorf(RG_ERR_OOM, "cannot allocate the 32 MiB cuBLASLt workspace on device %d",
			       device_index);
		goto out_free_lt;
	}
	if (cudaMalloc(&c->flag_d, sizeof(int)) != cudaSuccess) {
		(void)cudaGetLastError();
		st = rg_errorf(RG_ERR_OOM, "cannot allocate the device error flag");
		goto out_free_ws;
	}
	st = rg_cuda_err(cudaMemset(c->flag_d, 0, sizeof(int)), "cudaMemset(flag)");
	if (st != RG_OK)
		goto out_free_flag;
	if (cudaHostAlloc((void **)&c->flag_h, sizeof(int), cudaHostAllocDefault) != cudaSuccess) {
		(void)cudaGetLastError();
		st = rg_errorf(RG_ERR_OOM, "cannot allocate the pinned error flag");
		goto out_free_flag;
	}
	c->autotune = rg_tuning_bool(RG_TUNE_GEMM_AUTOTUNE);
	/* on by default since every kernel of a decode step is ragged's own (the small-M GEMM
	 * replaced cuBLASLt there): decode steps 5-9% faster on an H200
	 * (bench/results/decode_modes_h200_20261126-0249-*-pdl[01]); RAGGED_PDL=0: off */
	c->pdl = prop.major >= 9 && rg_tuning_bool(RG_TUNE_PDL);
	/* Hopper's wgmma attention needs the sm_90a cubin to be the one loaded (after the workspace
	 * exists: the probe writes its answer there) */
	c->wgmma = prop.major == 9 && prop.minor == 0 && rg_cuda_attention_wgmma_probe(c);
	*out = c;
	return RG_OK;

out_free_flag:
	cudaFree(c->flag_d);
out_free_ws:
	cudaFree(c->workspace_d);
out_free_lt:
	cublasLtDestroy(c->lt);
out_free_stream:
	cudaStreamDestroy(c->stream);
out_free_ctx:
	free(c);
	(void)cudaGetLastError();
	return st;
}

/* Defined in gemm.cu: destroys the cached cuBLASLt descriptors. */
void rg_cuda_gemm_cache_free(rg_cuda_ctx *c);

extern "C" void rg_cuda_backend_free(rg_cuda_ctx *ctx)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	if (!c)
		return;
	cudaSetDevice(c->device);
	cudaStreamSynchronize(c->stream);
	rg_cuda_gemm_cache_free(c);
	rg_cuda_qweight_free_all(c);
	cudaFreeHost(c->flag_h);
	cudaFree(c->flag_d);
	cudaFree(c->workspace_d);
	cublasLtDestroy(c->lt);
	cudaStreamDestroy(c->stream);
	(void)cudaGetLastError();
	free(c);
}

/* cudaMalloc; RG_ERR_OOM (with the size and the free memory) when the device is full. */
extern "C" rg_status rg_cuda_alloc(rg_cuda_ctx *ctx, size_t bytes, void **ptr)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	cudaError_t e;
	rg_status st;

	*ptr = NULL;
	st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	e = cudaMalloc(ptr, bytes ? bytes : 1);
	if (e == cudaSuccess)
		return RG_OK;
	(void)cudaGetLastError();
	*ptr = NULL;
	if (e == cudaErrorMemoryAllocation) {
		size_t fr = 0, tot = 0;
		cudaMemGetInfo(&fr, &tot);
		(void)cudaGetLastError();
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu bytes on CUDA device %d (%zu of %zu "
				 "bytes free)", bytes, c->device, fr, tot);
	}
	return rg_errorf(RG_ERR_CUDA, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
}

extern "C" void rg_cuda_dealloc(rg_cuda_ctx *ctx, void *ptr)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	if (!ptr)
		return;
	cudaSetDevice(c->device);
	rg_cuda_qweight_release(c, ptr); /* a quantized weight's entry dies with its memory */
	/* cudaFree synchronizes the device, so kernels still reading ptr finish first. */
	cudaFree(ptr);
	(void)cudaGetLastError();
}

/* Copies run on the backend's stream (so they are ordered after queued kernels) and return once
 * the copy has finished. */
extern "C" rg_status rg_cuda_upload(rg_cuda_ctx *ctx, void *dst, const void *src_host, size_t bytes)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);
	if (st != RG_OK || bytes == 0)
		return st;
	st = rg_cuda_err(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->stream),
			 "cudaMemcpyAsync(host to device)");
	if (st != RG_OK)
		return st;
	return rg_cuda_err(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after upload");
}

extern "C" rg_status rg_cuda_download(rg_cuda_ctx *ctx, void *dst_host, const void *src, size_t bytes)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);
	if (st != RG_OK || bytes == 0)
		return st;
	st = rg_cuda_err(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream),
			 "cudaMemcpyAsync(device to host)");
	if (st != RG_OK)
		return st;
	return rg_cuda_err(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after download");
}

/* Upload n float32 values as dt: converted on the host (round to nearest even) in chunks of 1M
 * values through one bounded staging buffer, then copied. */
extern "C" rg_status rg_cuda_upload_f32_as(rg_cuda_ctx *ctx, void *dst, const float *src_host, size_t n,
					   rg_dtype dt)
{
	const size_t chunk = (size_t)1 << 20;
	uint16_t *stage;
	rg_status st = RG_OK;

	if (dt == RG_DTYPE_F32)
		return rg_cuda_upload(ctx, dst, src_host, n * sizeof(float));
	if (dt != RG_DTYPE_F16 && dt != RG_DTYPE_BF16)
		return rg_errorf(RG_ERR_UNSUPPORTED, "upload_f32_as: unknown dtype %d", (int)dt);
	if (n == 0)
		return RG_OK;
	stage = (uint16_t *)malloc((n < chunk ? n : chunk) * sizeof(uint16_t));
	if (!stage)
		return rg_errorf(RG_ERR_OOM, "out of host memory (upload staging buffer)");
	for (size_t off = 0; off < n && st == RG_OK; off += chunk) {
		size_t m = n - off < chunk ? n - off : chunk;
		if (dt == RG_DTYPE_F16) {
			for (size_t i = 0; i < m; i++) {
				__half h = __float2half_rn(src_host[off + i]);
				memcpy(&stage[i], &h, 2);
			}
		} else {
			for (size_t i = 0; i < m; i++) {
				__nv_bfloat16 b = __float2bfloat16_rn(src_host[off + i]);
				memcpy(&stage[i], &b, 2);
			}
		}
		st = rg_cuda_upload(ctx, (uint16_t *)dst + off, stage, m * sizeof(uint16_t));
	}
	free(stage);
	return st;
}

/* Wait for every queued op, then read and clear the device error flag: a kernel that met
 * inconsistent indices reports it here as RG_ERR_INVALID_INPUT. */
extern "C" rg_status rg_cuda_sync(rg_cuda_ctx *ctx)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	int flag = 0;
	rg_status st = rg_cuda_enter(c);
	if (st != RG_OK)
		return st;
	if (c->capturing)
		return rg_errorf(RG_ERR_INTERNAL, "rg_backend_sync called while capturing a graph");
	st = rg_cuda_err(cudaMemcpyAsync(c->flag_h, c->flag_d, sizeof(int), cudaMemcpyDeviceToHost,
					 c->stream), "cudaMemcpyAsync(error flag)");
	if (st != RG_OK)
		return st;
	st = rg_cuda_err(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
	if (st != RG_OK)
		return st;
	flag = *c->flag_h;
	if (flag == 0)
		return RG_OK;
	st = rg_cuda_err(cudaMemsetAsync(c->flag_d, 0, sizeof(int), c->stream), "cudaMemset(flag)");
	if (st != RG_OK)
		return st;
	if (flag & RG_CUDA_FLAG_BAD_INDEX)
		return rg_errorf(RG_ERR_INVALID_INPUT, "a CUDA kernel saw a negative row index");
	return rg_errorf(RG_ERR_INVALID_INPUT, "a CUDA kernel saw a sequence longer than max_seqlen "
			 "or a decreasing cu_seqlens");
}

extern "C" rg_status rg_cuda_mem_info(rg_cuda_ctx *ctx, size_t *used, size_t *total)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	size_t fr = 0, tot = 0;
	rg_status st = rg_cuda_enter(c);

	*used = 0;
	*total = 0;
	if (st != RG_OK)
		return st;
	st = rg_cuda_err(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
	if (st != RG_OK)
		return st;
	*used = tot - fr;
	*total = tot;
	return RG_OK;
}

/* ---------------------------------------------------------------- pinned memory, async copies */

extern "C" rg_status rg_cuda_zero(rg_cuda_ctx *ctx, void *ptr, size_t bytes)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);
	if (st != RG_OK || bytes == 0)
		return st;
	return rg_cuda_err(cudaMemsetAsync(ptr, 0, bytes, c->stream), "cudaMemsetAsync");
}

extern "C" rg_status rg_cuda_host_alloc(rg_cuda_ctx *ctx, size_t bytes, void **ptr)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);

	*ptr = NULL;
	if (st != RG_OK)
		return st;
	/* mapped: kernels may read and write it through the same pointer (UVA) */
	if (cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocMapped) != cudaSuccess) {
		(void)cudaGetLastError();
		*ptr = NULL;
		return rg_errorf(RG_ERR_OOM, "cannot allocate %zu bytes of pinned host memory", bytes);
	}
	return RG_OK;
}

extern "C" void rg_cuda_host_free(rg_cuda_ctx *ctx, void *ptr)
{
	(void)ctx;
	if (ptr)
		cudaFreeHost(ptr);
	(void)cudaGetLastError();
}

extern "C" rg_status rg_cuda_upload_async(rg_cuda_ctx *ctx, void *dst, const void *src_pinned, size_t bytes)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	if (bytes == 0)
		return RG_OK;
	return rg_cuda_err(cudaMemcpyAsync(dst, src_pinned, bytes, cudaMemcpyHostToDevice, c->stream),
			   "cudaMemcpyAsync(host to device, async)");
}

extern "C" rg_status rg_cuda_download_async(rg_cuda_ctx *ctx, void *dst_pinned, const void *src,
					    size_t bytes)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	if (bytes == 0)
		return RG_OK;
	return rg_cuda_err(cudaMemcpyAsync(dst_pinned, src, bytes, cudaMemcpyDeviceToHost, c->stream),
			   "cudaMemcpyAsync(device to host, async)");
}

/* ---------------------------------------------------------------- graphs */

/* Thread-local capture: only this thread's calls are recorded, and another thread's unrelated
 * CUDA calls (the server's other workers) do not invalidate the capture. */
extern "C" rg_status rg_cuda_capture_begin(rg_cuda_ctx *ctx)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);

	if (st != RG_OK)
		return st;
	if (c->capturing)
		return rg_errorf(RG_ERR_INTERNAL, "graph capture already in progress");
	st = rg_cuda_err(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
			 "cudaStreamBeginCapture");
	if (st == RG_OK)
		c->capturing = true;
	return st;
}

extern "C" rg_status rg_cuda_capture_end(rg_cuda_ctx *ctx, void **graph_exec)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;
	cudaError_t e;
	rg_status st;

	*graph_exec = NULL;
	if (!c->capturing)
		return rg_errorf(RG_ERR_INTERNAL, "capture_end without capture_begin");
	c->capturing = false;
	e = cudaStreamEndCapture(c->stream, &g);
	if (e != cudaSuccess) {
		if (g)
			cudaGraphDestroy(g);
		return rg_cuda_err(e, "cudaStreamEndCapture");
	}
	st = rg_cuda_err(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
	cudaGraphDestroy(g);
	if (st != RG_OK)
		return st;
	/* upload once now so the first launch does not pay for it */
	st = rg_cuda_err(cudaGraphUpload(ge, c->stream), "cudaGraphUpload");
	if (st != RG_OK) {
		cudaGraphExecDestroy(ge);
		return st;
	}
	*graph_exec = ge;
	return RG_OK;
}

extern "C" rg_status rg_cuda_graph_launch(rg_cuda_ctx *ctx, void *graph_exec)
{
	rg_cuda_ctx *c = (rg_cuda_ctx *)ctx;
	rg_status st = rg_cuda_enter(c);

	if (st != RG_OK)
		return st;
	return rg_cuda_err(cudaGraphLaunch((cudaGraphExec_t)graph_exec, c->stream),
			   "cudaGraphLaunch");
}

extern "C" void rg_cuda_graph_free(rg_cuda_ctx *ctx, void *graph_exec)
{
	(void)ctx;
	if (graph_exec)
		cudaGraphExecDestroy((cudaGraphExec_t)graph_exec);
	(void)cudaGetLastError();
}

extern "C" void rg_cuda_set_exact_gelu(rg_cuda_ctx *ctx, bool exact)
{
	((rg_cuda_ctx *)ctx)->exact_gelu = exact;
}

extern "C" unsigned long long rg_cuda_gemm_plans(rg_cuda_ctx *ctx)
{
	return ((rg_cuda_ctx *)ctx)->gemm_plans_built;
}

/* The table ops.c dispatches through (src/ops/backend.h); the CUDA entry points themselves are
 * spread over backend.cu, gemm.cu, layernorm.cu, elementwise.cu and attention.cu. */
static rg_backend_ops make_cuda_ops(void)
{
	rg_backend_ops t;

	memset(&t, 0, sizeof(t));
	t.name = "cuda";
	t.free = rg_cuda_backend_free;
	t.alloc = rg_cuda_alloc;
	t.dealloc = rg_cuda_dealloc;
	t.upload = rg_cuda_upload;
	t.download = rg_cuda_download;
	t.upload_f32_as = rg_cuda_upload_f32_as;
	t.zero = rg_cuda_zero;
	t.host_alloc = rg_cuda_host_alloc;
	t.host_free = rg_cuda_host_free;
	t.upload_async = rg_cuda_upload_async;
	t.download_async = rg_cuda_download_async;
	t.sync = rg_cuda_sync;
	t.mem_info = rg_cuda_mem_info;
	t.capture_begin = rg_cuda_capture_begin;
	t.capture_end = rg_cuda_capture_end;
	t.graph_launch = rg_cuda_graph_launch;
	t.graph_free = rg_cuda_graph_free;
	t.set_exact_gelu = rg_cuda_set_exact_gelu;
	t.gemm_plans = rg_cuda_gemm_plans;
	t.embed_layernorm = rg_cuda_embed_layernorm;
	t.gemm = rg_cuda_gemm;
	t.prepare_weight = rg_cuda_prepare_weight;
	t.prepare_qweight = rg_cuda_prepare_qweight;
	t.gemm_bias_act = rg_cuda_gemm_bias_act;
	t.bias_act = rg_cuda_bias_act;
	t.bias_residual_layernorm = rg_cuda_bias_residual_layernorm;
	t.attention = rg_cuda_attention;
	t.rel_tables = rg_cuda_rel_tables;
	t.pool = rg_cuda_pool;
	t.gather_rows = rg_cuda_gather_rows;
	t.embed_scale_add = rg_cuda_embed_scale_add;
	t.add_norm = rg_cuda_add_norm;
	t.rope = rg_cuda_rope;
	t.rope_table = rg_cuda_rope_table;
	t.qk_norm = rg_cuda_qk_norm;
	t.rope_kv_write = rg_cuda_rope_kv_write;
	t.act_mul = rg_cuda_act_mul;
	t.act_mul_gemm = rg_cuda_act_mul_gemm;
	t.kv_write = rg_cuda_kv_write;
	t.paged_attention = rg_cuda_paged_attention;
	t.copy_blocks = rg_cuda_copy_blocks;
	t.argmax_rows = rg_cuda_argmax_rows;
	t.sample_rows = rg_cuda_sample_rows;
	t.topk_rows = rg_cuda_topk_rows;
	return t;
}

/* cuBLASLt reads W as it is: nothing to prepare. */
extern "C" rg_status rg_cuda_prepare_weight(rg_cuda_ctx *ctx, rg_dtype dt, void *W, int N, int K)
{
	(void)ctx;
	(void)dt;
	(void)W;
	(void)N;
	(void)K;
	return RG_OK;
}

extern "C" const rg_backend_ops *rg_cuda_backend_ops(void)
{
	static const rg_backend_ops table = make_cuda_ops(); /* thread-safe static init */

	return &table;
}
