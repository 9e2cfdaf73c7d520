/* Test helper: rg_op_attention through its descriptor, from the arguments it used to take one
 * by one (shared by tests/unit/test_ops_cpu.c and tests/gpu/test_ops_cuda.c). */
#ifndef RG_TEST_ATTN_H
#define RG_TEST_ATTN_H
#include "ops/ops.h"

static inline rg_status attn_op(rg_backend *be, const void *qkv, const int32_t *cu,
				const int32_t *cu_h, int n_seq, int max_len, int nh, int hd,
				float scale, const int32_t *seg, const float *rb, int rel_max,
				const rg_attn_disent *dis, void *out)
{
	rg_attn_desc d = rg_attn_packed(n_seq, cu, cu_h, max_len, nh, hd, scale);

	d.seg = seg;
	d.rel_bias = rb;
	d.rel_max = rel_max;
	d.dis = dis;
	return rg_op_attention(be, &d, qkv, out);
}

#endif
