/* The activations of src/ops/act.h in double, for the op tests' references (test_ops_cpu.c's
 * bias_act, test_decoder_ops.c's act_mul). */
#ifndef RG_TEST_ACT_REF_H
#define RG_TEST_ACT_REF_H
#include <math.h>

#include "ops/act.h"

static inline double ref_act(double v, rg_act act)
{
	switch (act) {
	case RG_ACT_NONE: return v;
	case RG_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
	case RG_ACT_GELU_NEW:
		return 0.5 * v * (1 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
	case RG_ACT_RELU: return v > 0 ? v : 0;
	case RG_ACT_SILU: return v / (1 + exp(-v));
	}
	return NAN;
}
#endif
