/* PTX wrappers the tensor-core attention kernels share (attention_tc.cu: mma.sync,
 * attention_wgmma.cu: Hopper wgmma): cp.async copies into shared memory, exp2 on the SFU, and
 * the packing and storing of two fp32 values as one fp16 / bf16 pair. Internal to src/ops/cuda;
 * device code only. */
#ifndef RG_OPS_CUDA_TC_PTX_CUH
#define RG_OPS_CUDA_TC_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* The shared-state-space address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t rg_smem_addr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy to the shared address dst; when !valid nothing is read and the
 * 16 bytes are zero-filled. */
__device__ __forceinline__ void rg_cp16(uint32_t dst, const void *src, bool valid)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
		     "r"(valid ? 16 : 0)
		     : "memory");
}

/* The same to the shared memory that the generic pointer dst points into. */
__device__ __forceinline__ void rg_cp16(void *dst, const void *src, bool valid)
{
	rg_cp16(rg_smem_addr(dst), src, valid);
}

__device__ __forceinline__ void rg_cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most N of this thread's committed cp.async groups are in flight. */
template <int N> __device__ __forceinline__ void rg_cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* 2^x on the SFU (ex2.approx.ftz: relative error ~2^-22, -inf -> +0), what exp2f becomes under
 * --use_fast_math, without exp2f's extra range handling. */
__device__ __forceinline__ float rg_exp2_approx(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* Round (x, y) to T (__half or __nv_bfloat16) as one packed register, x in the low half. */
template <typename T> __device__ __forceinline__ uint32_t rg_pack2(float x, float y);

template <> __device__ __forceinline__ uint32_t rg_pack2<__half>(float x, float y)
{
	__half2 h = __floats2half2_rn(x, y);
	return *(uint32_t *)&h;
}

template <> __device__ __forceinline__ uint32_t rg_pack2<__nv_bfloat16>(float x, float y)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(x, y);
	return *(uint32_t *)&h;
}

/* p[0], p[1] = x, y rounded to T (p 4-byte aligned). */
template <typename T> __device__ __forceinline__ void rg_store2(T *p, float x, float y);

template <> __device__ __forceinline__ void rg_store2<__half>(__half *p, float x, float y)
{
	*(__half2 *)p = __floats2half2_rn(x, y);
}

template <> __device__ __forceinline__ void rg_store2<__nv_bfloat16>(__nv_bfloat16 *p, float x,
								      float y)
{
	*(__nv_bfloat162 *)p = __floats2bfloat162_rn(x, y);
}

#endif
