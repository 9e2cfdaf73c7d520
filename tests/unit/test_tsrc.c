/* The tensor-source helpers of src/model/tsrc.h: the Hugging Face -> GGUF name maps the
 * architectures keep (rg_arch.gguf: llama.cpp's tensor names for Llama / Qwen2 / Qwen3 and
 * Phi-3), through which a GGUF source serves their loaders' requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/layers.h"
#include "model/tsrc.h"

static void test_gguf_llama_names(void **state)
{
	static const char *const pairs[][2] = {
		{"model.embed_tokens.weight", "token_embd.weight"},
		{"embed_tokens.weight", "token_embd.weight"},
		{"model.norm.weight", "output_norm.weight"},
		{"lm_head.weight", "output.weight"},
		{"layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
		{"model.layers.12.self_attn.k_proj.bias", "blk.12.attn_k.bias"},
		{"layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
		{"layers.29.self_attn.o_proj.weight", "blk.29.attn_output.weight"},
		{"layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight"},
		{"layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"},
		{"layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
		{"layers.7.input_layernorm.weight", "blk.7.attn_norm.weight"},
		{"layers.7.post_attention_layernorm.weight", "blk.7.ffn_norm.weight"},
		{"layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
		{"layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"},
	};
	static const char *const none[] = {"layers.0.self_attn.rotary_emb.inv_freq",
					   "layers.0.mlp.gate_proj", "wte.weight",
					   "layers.x.mlp.up_proj.weight", "norm_x.weight"};
	char buf[64];

	(void)state;
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		const char *got = rg_tsrc_gguf_name(&rg_llama_gguf_names, pairs[i][0], buf,
						    sizeof(buf));

		assert_non_null(got);
		assert_string_equal(got, pairs[i][1]);
	}
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
		assert_null(rg_tsrc_gguf_name(&rg_llama_gguf_names, none[i], buf, sizeof(buf)));
}

/* The registry's GGUF side: which architecture serves which general.architecture, and Phi-3's
 * fused names. */
static void test_gguf_archs(void **state)
{
	static const char *const pairs[][2] = {
		{"model.layers.0.self_attn.qkv_proj.weight", "blk.0.attn_qkv.weight"},
		{"model.layers.4.mlp.gate_up_proj.weight", "blk.4.ffn_up.weight"},
		{"model.layers.4.mlp.down_proj.weight", "blk.4.ffn_down.weight"},
		{"lm_head.weight", "output.weight"},
	};
	char buf[64];

	(void)state;
	assert_ptr_equal(rg_arch_find_gguf("llama"), &rg_arch_llama);
	assert_ptr_equal(rg_arch_find_gguf("qwen2"), &rg_arch_qwen2);
	assert_ptr_equal(rg_arch_find_gguf("qwen3"), &rg_arch_qwen3);
	assert_ptr_equal(rg_arch_find_gguf("phi3"), &rg_arch_phi3);
	assert_null(rg_arch_find_gguf("gpt2"));
	assert_null(rg_arch_find_gguf(NULL));
	assert_true(rg_arch_llama.gguf->rope_interleaved);
	assert_false(rg_arch_qwen3.gguf->rope_interleaved || rg_arch_phi3.gguf->rope_interleaved);
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		const char *got = rg_tsrc_gguf_name(rg_arch_phi3.gguf, pairs[i][0], buf, sizeof(buf));

		assert_non_null(got);
		assert_string_equal(got, pairs[i][1]);
	}
	assert_null(rg_tsrc_gguf_name(rg_arch_phi3.gguf, "layers.0.self_attn.q_proj.weight", buf,
				      sizeof(buf)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gguf_llama_names),
		cmocka_unit_test(test_gguf_archs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
