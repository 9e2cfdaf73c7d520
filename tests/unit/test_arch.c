/* The architecture registry (src/model/arch.c): every registered architecture sets the hooks of
 * its kind (rg_arch_check), and an encoder-decoder, which the load does not serve yet, is refused
 * by name (rg_arch_servable) instead of being run as an encoder or a decoder. */
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
	assert_true(n >= 13); /* 7 encoders, 6 decoders */
}

static void test_enc_dec_refused(void **state)
{
	const rg_arch ed = {
		.model_type = "marian",
		.kind = RG_MODEL_ENC_DEC,
		.hparams = fake_hparams,
		.load = fake_load,
		.free_weights = fake_free,
		.encode = fake_encode,
		.decode = fake_decode,
	};

	(void)state;
	assert_int_equal(rg_arch_check(&ed), RG_OK);
	assert_int_equal(rg_arch_servable(&ed, "/m/config.json"), RG_ERR_UNSUPPORTED);
	assert_non_null(strstr(rg_last_error(), "/m/config.json: model_type \"marian\""));
	assert_non_null(strstr(rg_last_error(), "encoder-decoder models are not served yet"));
}

static void test_missing_or_foreign_hooks(void **state)
{
	rg_arch a = {
		.model_type = "x",
		.kind = RG_MODEL_ENC_DEC,
		.hparams = fake_hparams,
		.load = fake_load,
		.free_weights = fake_free,
		.encode = fake_encode,
	};

	(void)state;
	/* an encoder-decoder needs both forwards */
	assert_int_equal(rg_arch_check(&a), RG_ERR_INTERNAL);
	assert_non_null(strstr(rg_last_error(), "no decode hook"));
	/* an encoder with a decoder's forward */
	a.kind = RG_MODEL_ENCODER;
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
		cmocka_unit_test(test_enc_dec_refused),
		cmocka_unit_test(test_missing_or_foreign_hooks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
