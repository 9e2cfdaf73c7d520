/* The architecture registry (src/model/arch.c): every registered architecture sets the hooks of
 * its kind (rg_arch_check): an encoder-decoder its decoder forward and its encoder pass
 * (encode_cross), never the encoders' forward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/model.h"

static rg_status fake_hparams(rg_model *m, const rg_cfg_src *cfg)
{
	(void)m;
	(void)cfg;
	return RG_OK;
}

static rg_status fake_load(rg_model *m, const rg_tsrc *src)
{
	(void)m;
	(void)src;
	return RG_OK;
}

static void fake_free(rg_model *m)
{
	(void)m;
}

static rg_status fake_encode(rg_model *m, const rg_fwd *f, int n, int n_att, int max_len)
{
	(void)m;
	(void)f;
	(void)n;
	(void)n_att;
	(void)max_len;
	return RG_OK;
}

static rg_status fake_decode(rg_model *m, rg_dec_fwd *f)
{
	(void)m;
	(void)f;
	return RG_OK;
}

static void test_registry_hooks_match_kinds(void **state)
{
	size_t n = 0;

	(void)state;
	for (const rg_arch *a; (a = rg_arch_at(n)); n++) {
		if (rg_arch_check(a) != RG_OK)
			fail_msg("%s", rg_last_error());
		assert_int_equal(rg_arch_servable(a, "config.json"), RG_OK);
		assert_ptr_equal(rg_arch_find(a->model_type), a);
	}
	assert_true(n >= 14); /* 7 encoders, 6 decoders, Marian */
}

static rg_status fake_encode_cross(rg_model *m, const rg_enc_fwd *f)
{
	(void)m;
	(void)f;
	return RG_OK;
}

/* An encoder-decoder is served with its decoder's forward and its encoder pass, and not with the
 * encoders' forward (whose arena and outputs it does not use). */
static void test_enc_dec_hooks(void **state)
{
	rg_arch ed = {
		.model_type = "marian",
		.kind = RG_MODEL_ENC_DEC,
		.hparams = fake_hparams,
		.load = fake_load,
		.free_weights = fake_free,
		.decode = fake_decode,
		.encode_cross = fake_encode_cross,
	};

	(void)state;
	assert_int_equal(rg_arch_check(&ed), RG_OK);
	assert_int_equal(rg_arch_servable(&ed, "/m/config.json"), RG_OK);
	ed.encode_cross = NULL;
	assert_int_equal(rg_arch_check(&ed), RG_ERR_INTERNAL);
	assert_non_null(strstr(rg_last_error(), "no encode_cross hook"));
	ed.encode_cross = fake_encode_cross;
	ed.encode = fake_encode;
	assert_int_equal(rg_arch_check(&ed), RG_ERR_INTERNAL);
	ed.encode = NULL;
	ed.kind = RG_MODEL_DECODER; /* a decoder-only model with an encoder pass */
	assert_int_equal(rg_arch_check(&ed), RG_ERR_INTERNAL);
	/* the registry serves one */
	assert_non_null(rg_arch_find("marian"));
	assert_int_equal(rg_arch_find("marian")->kind, RG_MODEL_ENC_DEC);
}

static void test_missing_or_foreign_hooks(void **state)
{
	rg_arch a = {
		.model_type = "x",
		.kind = RG_MODEL_ENC_DEC,
		.hparams = fake_hparams,
		.load = fake_load,
		.free_weights = fake_free,
		.encode_cross = fake_encode_cross,
	};

	(void)state;
	/* an encoder-decoder needs both forwards */
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
	assert_non_null(strstr(rg_last_error(), "no decode hook"));
	/* an encoder with a decoder's forward */
	a.kind = RG_MODEL_ENCODER;
	a.encode_cross = NULL;
	a.encode = fake_encode;
	a.decode = fake_decode;
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
	a.decode = NULL;
	assert_int_equal(rg_arch_check(&a), RG_OK);
	/* every kind reads its hyper-parameters and weights through the same hooks */
	a.hparams = NULL;
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
	assert_non_null(strstr(rg_last_error(), "no hparams hook"));
	a.hparams = fake_hparams;
	a.load = NULL;
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
	assert_non_null(strstr(rg_last_error(), "no load hook"));
	a.load = fake_load;
	a.kind = (rg_model_kind)7;
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry_hooks_match_kinds),
		cmocka_unit_test(test_enc_dec_hooks),
		cmocka_unit_test(test_missing_or_foreign_hooks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
