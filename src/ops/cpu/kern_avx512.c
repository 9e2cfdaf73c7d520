/* kern.h compiled for AVX-512 (F, VL, DQ, BW) with FMA: 16 float32 lanes. */
#if defined(__x86_64__) || defined(__i386__)
#include <math.h>
#include <stdint.h>
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma,avx2,bmi2")
#define RG_VW 16
#define RG_ISA avx512
#define RG_QISA avx2 /* no AVX-512 quantized kernels yet: the AVX2 ones */
#define RG_ISA_NAME "avx512"
#include "ops/cpu/kern.h"
#else
#include "ops/cpu/cpu_kern.h"
/* not an x86 build: an empty table that rg_cpu_kern_select never picks */
const rg_cpu_kern rg_cpu_kern_avx512 = {.isa = NULL};
#endif
