/* Activation functions: the enum, and the one scalar formula of each that the CPU kernels
 * (scalar tails, src/ops/cpu/kern.h) and the CUDA kernels (src/ops/cuda/elementwise.cu) both
 * evaluate, so host and device cannot drift apart. The CPU vector bodies compute the same
 * formulas with their own vector erf/tanh, whose error bounds kern.h states.
 *   gelu:      exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel);
 *   gelu_new:  the tanh form of GPT-2, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)));
 *   relu:      max(x, 0);
 *   silu:      x / (1 + e^-x) (swish; Marian's activation_function "swish"). */
#ifndef RG_OPS_ACT_H
#define RG_OPS_ACT_H

typedef enum rg_act {
	RG_ACT_NONE = 0,
	RG_ACT_GELU,
	RG_ACT_GELU_NEW,
	RG_ACT_RELU,
	RG_ACT_SILU,
} rg_act;

#ifdef __cplusplus
extern "C" {
#endif
/* "none", "gelu", "gelu_new", "relu", "silu" ("unknown" outside the enum). Static string. */
const char *rg_act_name(rg_act a);
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#define RG_ACT_FN static __host__ __device__ __forceinline__
#else
#include <math.h>
#define RG_ACT_FN static inline
#endif

/* act(v) in float32. */
RG_ACT_FN float rg_act_apply(float v, rg_act act)
{
	switch (act) {
	case RG_ACT_NONE:
		return v;
	case RG_ACT_GELU:
		return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
	case RG_ACT_GELU_NEW:
		return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
	case RG_ACT_RELU:
		return v > 0.f ? v : 0.f;
	case RG_ACT_SILU:
		return v / (1.f + expf(-v));
	}
	return v;
}
#undef RG_ACT_FN
#endif
