/* kern.h compiled for AVX2 with FMA: 8 float32 lanes. */
#if defined(__x86_64__) || defined(__i386__)
#include <math.h>
#include <stdint.h>
#pragma GCC target("avx2,fma,bmi2")
#define RG_VW 8
#define RG_ISA avx2
#define RG_ISA_NAME "avx2"
#include "ops/cpu/kern.h"
#else
#include "ops/cpu/cpu_kern.h"
/* not an x86 build: an empty table that rg_cpu_kern_select never picks */
const rg_cpu_kern rg_cpu_kern_avx2 = {.isa = NULL};
#endif
