/* Activation names; the formulas are in act.h. */
#include "ops/act.h"

const char *rg_act_name(rg_act a)
{
	switch (a) {
	case RG_ACT_NONE: return "none";
	case RG_ACT_GELU: return "gelu";
	case RG_ACT_GELU_NEW: return "gelu_new";
	case RG_ACT_RELU: return "relu";
	case RG_ACT_SILU: return "silu";
	}
	return "unknown";
}
