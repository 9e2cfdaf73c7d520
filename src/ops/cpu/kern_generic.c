/* kern.h compiled for the build's baseline (SSE2 on x86-64; any GCC target): 4 float32 lanes. */
#include <math.h>
#include <stdint.h>
#define RG_VW 4
#define RG_ISA generic
#define RG_ISA_NAME "generic"
#include "ops/cpu/kern.h"
