/* The decoder runner (issue 19): load a decoder-only model, own its paged KV cache, and run one
 * step of a mixed batch (include/ragged.h, rg_step_batch / rg_model_step) -- stage and validate
 * the step, run the architecture's forward (gpt2.c, llama.c: op sequences only), gather the rows
 * whose logits are wanted and apply the LM head to them alone.
 *
 * KV cache (PagedAttention, Kwon et al. SOSP'23): one backend allocation; layer l's K and V are
 * (n_blocks, block_size, kv_heads, head_dim) each in the compute dtype, at 2l and 2l+1 times
 * layer_bytes. Which blocks a sequence owns is the caller's (src/kv/); the runner checks every id
 * it is given and writes only where the sequence's own table puts each new position.
 *
 * Step arena: one buffer per tensor for max_batch_tokens rows, allocated at load (nothing is
 * allocated per step except when a step's block tables outgrow the largest seen so far). Logits
 * are computed RG_LOGITS_CHUNK rows at a time: (rows, H) x (vocab, H)^T, then copied out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/file.h"
#include "core/mem_plan.h"
#include "core/tuning.h"
#include "model/model.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

#define RG_KV_DEFAULT_BYTES ((size_t)256 << 20) /* n_blocks 0: a 256 MiB cache */
#define RG_KV_MAX_BLOCK 4096

static size_t kv_token_bytes(const rg_model *m)
{
	const rg_decoder_config *c = &m->dec.cfg;

	return 2 * (size_t)c->num_hidden_layers * c->num_key_value_heads * c->head_dim * m->esz;
}

/* ---------------------------------------------------------------- load / free */

rg_status rg_dec_bt_reserve(rg_model *m, size_t entries)
{
	size_t cap = entries < 4096 ? 4096 : entries * 2;
	rg_status s;

	if (entries <= m->dec.bt_cap)
		return RG_OK;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;
	rg_backend_dealloc(m->be, m->dec.bt_d);
	rg_backend_host_free(m->be, m->dec.bt_h);
	m->dec.bt_d = m->dec.bt_h = NULL;
	m->dec.bt_cap = 0;
	rg_dec_graphs_free(m); /* they read the old table buffer */
	if ((s = rg_backend_alloc(m->be, cap * 4, (void **)&m->dec.bt_d)) != RG_OK ||
	    (s = rg_backend_host_alloc(m->be, cap * 4, (void **)&m->dec.bt_h)) != RG_OK)
		return rg_error_wrap(s, "block tables of %zu entries", cap);
	m->dec.bt_cap = cap;
	return RG_OK;
}

rg_status rg_dec_upload(rg_model *m, float *host, size_t n, bool as_act, void **dst)
{
	rg_status s = rg_model_upload(m, host, n, as_act, dst);

	free(host);
	return s;
}

/* The step arena for max_batch_tokens rows, planned with rg_mem_plan (TurboTransformers'
 * Algorithm 1) over one layer's lifetimes: op 0 norm, 1 QKV GEMM, 2 RoPE + attention, 3 output
 * GEMM, 4 norm, 5 FFN up, 6 act * mul, 7 FFN down, 8 logits gather, 9 LM head. The residual,
 * the norm output and delta cross layers (kept whole), and so does the RoPE table (written
 * before the first layer, dead after the last); QKV / ctx and the FFN's tensors share bytes, and
 * so do the logits buffers, which run after the forward. */
static rg_status alloc_step_arena(rg_model *m)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const size_t T = (size_t)m->max_tokens, H = (size_t)c->hidden_size;
	const size_t qd = (size_t)c->num_attention_heads * c->head_dim;
	const size_t kvd = (size_t)c->num_key_value_heads * c->head_dim;
	const size_t I = (size_t)c->intermediate_size, e = m->esz;
	const size_t rope = c->rope_theta > 0 ? T * (size_t)c->head_dim * sizeof(float) : 0;
	rg_mem_tensor t[RG_DEC_N] = {
		[RG_D_HIDDEN] = {"hidden", T * H * e, 0, 9, 0},
		[RG_D_NORMED] = {"normed", T * H * e, 0, 9, 0},
		[RG_D_QKV] = {"qkv", T * (qd + 2 * kvd) * e, 1, 2, 0},
		[RG_D_CTX] = {"ctx", T * qd * e, 2, 3, 0},
		[RG_D_DELTA] = {"delta", T * H * e, 0, 9, 0},
		[RG_D_INTER] = {"inter", T * 2 * I * e, 5, 7, 0}, /* GPT-2: up to the down GEMM */
		[RG_D_MLP] = {"mlp", T * I * e, 6, 7, 0},
		[RG_D_ROWS] = {"rows", RG_LOGITS_CHUNK * H * e, 8, 9, 0},
		[RG_D_LOGITS] = {"logits", RG_LOGITS_CHUNK * (size_t)c->vocab_size * e, 9, 9, 0},
		[RG_D_ROPE] = {"rope", rope, 0, 7, 0},
	};
	size_t total = 0;
	rg_status s;

	if ((s = rg_mem_plan(t, RG_DEC_N, 256, &total)) != RG_OK)
		return rg_error_wrap(s, "decoder step arena plan for %d tokens", m->max_tokens);
	if ((s = rg_backend_alloc(m->be, total, &m->dec.arena_d)) != RG_OK)
		return rg_error_wrap(s, "decoder step arena for %d tokens (%zu bytes)",
				     m->max_tokens, total);
	m->dec.arena_bytes = total;
	for (int i = 0; i < RG_DEC_N; i++)
		m->dec.a[i] = (char *)m->dec.arena_d + t[i].offset;
	if ((s = rg_backend_alloc(m->be, (6 * T + 2) * 4, (void **)&m->dec.ids_d)) != RG_OK ||
	    (s = rg_backend_host_alloc(m->be, (6 * T + 2) * 4, (void **)&m->dec.ids_h)) != RG_OK ||
	    (s = rg_backend_alloc(m->be, 2 * T * 4, (void **)&m->dec.am_d)) != RG_OK ||
	    (s = rg_backend_host_alloc(m->be, 2 * T * 4, (void **)&m->dec.am_h)) != RG_OK)
		return rg_error_wrap(s, "decoder staging for %d tokens", m->max_tokens);
	if (m->arch->kind == RG_MODEL_ENC_DEC &&
	    ((s = rg_backend_alloc(m->be, (4 * T + 2) * 4, (void **)&m->dec.enc_d)) != RG_OK ||
	     (s = rg_backend_host_alloc(m->be, (4 * T + 2) * 4, (void **)&m->dec.enc_h)) != RG_OK))
		return rg_error_wrap(s, "encoder staging for %d tokens", m->max_tokens);
	/* encoder-decoder steps too: their cross width is in the graph's key (XB) */
	m->dec.use_graphs = rg_backend_has_graphs(m->be) && rg_tuning_bool(RG_TUNE_CUDA_GRAPHS);
	return RG_OK;
}

void rg_dec_graphs_free(rg_model *m)
{
	for (int i = 0; i < RG_DEC_GRAPHS; i++) {
		rg_backend_graph_free(m->be, m->dec.graphs[i].g);
		memset(&m->dec.graphs[i], 0, sizeof(m->dec.graphs[i]));
	}
}

static void kv_free(rg_model *m)
{
	rg_backend_dealloc(m->be, m->dec.kv_d);
	free(m->dec.slot_seen);
	m->dec.kv_d = NULL;
	m->dec.slot_seen = NULL;
	m->dec.n_blocks = 0;
	m->dec.block_size = 0;
	m->dec.layer_bytes = 0;
}

void rg_decoder_free(rg_model *m)
{
	if (!m->be)
		return;
	kv_free(m);
	rg_dec_embed_free(m);
	rg_dec_graphs_free(m);
	rg_backend_dealloc(m->be, m->dec.am_d);
	rg_backend_host_free(m->be, m->dec.am_h);
	rg_backend_host_free(m->be, m->dec.lg_h);
	m->dec.am_d = m->dec.am_h = NULL;
	m->dec.lg_h = NULL;
	rg_dec_sample_free(m);
	rg_backend_dealloc(m->be, m->dec.arena_d);
	m->dec.arena_d = NULL;
	rg_backend_dealloc(m->be, m->dec.ids_d);
	rg_backend_host_free(m->be, m->dec.ids_h);
	rg_backend_dealloc(m->be, m->dec.bt_d);
	rg_backend_host_free(m->be, m->dec.bt_h);
	rg_backend_dealloc(m->be, m->dec.enc_d);
	rg_backend_host_free(m->be, m->dec.enc_h);
	rg_backend_dealloc(m->be, m->dec.x_d);
	rg_backend_host_free(m->be, m->dec.x_h);
	m->dec.enc_d = m->dec.enc_h = m->dec.x_d = m->dec.x_h = NULL;
	m->dec.x_cap = 0;
	memset(&m->dec.a, 0, sizeof(m->dec.a));
	m->dec.ids_d = m->dec.ids_h = m->dec.bt_d = m->dec.bt_h = NULL;
}

/* The decoder's compute dtype: fp32 on the CPU; on CUDA fp16, or bf16 for a bf16 checkpoint. */
static rg_dtype dec_dtype(const rg_model_params *p, const rg_tsrc *src)
{
	if (p->dtype != RG_DTYPE_AUTO)
		return p->dtype;
	if (p->device != RG_DEVICE_CUDA)
		return RG_DTYPE_F32;
	return src->weight_dtype == RG_DTYPE_BF16 ? RG_DTYPE_BF16 : RG_DTYPE_F16;
}

rg_status rg_decoder_init(rg_model *m, const rg_model_params *p, const rg_tsrc *src)
{
	rg_decoder_config *c = &m->dec.cfg;
	const rg_dtype dt = dec_dtype(p, src);
	rg_status s;

	c->rope_interleaved = src->rope_interleaved;
	if (p->weights != RG_WEIGHTS_AUTO && p->weights != RG_WEIGHTS_DEQUANTIZE)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_params.weights: unknown value %d",
				 (int)p->weights);
	m->keep_quant = p->weights == RG_WEIGHTS_AUTO;
	/* encoder-decoders load unquantized; rg_model_load then refuses the parameter */
	m->quantize = m->arch->kind == RG_MODEL_DECODER ? p->quantize : RG_QUANTIZE_NONE;
	if ((s = rg_model_load_weights(m, p, dt, src)) != RG_OK)
		return s;
	if ((s = alloc_step_arena(m)) != RG_OK)
		return s;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;

	m->info.model_dir = m->dir;
	m->info.model_type = m->arch->model_type;
	m->info.vocab_size = c->vocab_size;
	m->info.hidden_size = c->hidden_size;
	m->info.num_attention_heads = c->num_attention_heads;
	m->info.num_hidden_layers = c->num_hidden_layers;
	m->info.intermediate_size = c->intermediate_size;
	m->info.max_position_embeddings = c->max_position_embeddings;
	m->info.type_vocab_size = 0;
	m->info.hidden_act = c->act_name;
	m->info.layer_norm_eps = c->norm_eps;
	m->info.pooling = RG_POOL_MEAN;
	m->info.normalize = false;
	m->info.device = p->device;
	m->info.dtype = dt;
	m->info.max_batch_tokens = m->max_tokens;
	m->info.max_seq_len = c->max_position_embeddings;
	m->info.num_labels = 0;
	m->info.labels = NULL;
	m->info.multi_label = false;
	m->info.output_dim = c->vocab_size;
	m->info.kind = m->arch->kind;
	m->info.decoder_start_token_id =
		m->arch->kind == RG_MODEL_ENC_DEC ? c->decoder_start_token_id : -1;
	m->info.max_source_positions =
		m->arch->kind == RG_MODEL_ENC_DEC ? c->max_source_positions : 0;
	m->info.num_key_value_heads = c->num_key_value_heads;
	m->info.head_dim = c->head_dim;
	m->info.bos_token_id = c->bos_token_id;
	m->info.eos_token_id = c->eos_token_id;
	m->info.tie_word_embeddings = c->tie_word_embeddings;
	return RG_OK;
}

rg_status rg_decoder_prepare(rg_model *m, const char *dir)
{
	char *tok_path = rg_path_join(dir, "tokenizer.json");
	char *spm_path = rg_path_join(dir, "source.spm");
	struct stat sb;
	rg_status s = RG_OK;

	/* the tokenizer is optional for a decoder (the step API takes ids); MarianMT ships
	 * source.spm / target.spm / vocab.json instead of tokenizer.json (tokenizer/marian.h) */
	if (!tok_path || !spm_path)
		s = rg_errorf(RG_ERR_OOM, "out of host memory");
	else if (stat(tok_path, &sb) == 0 || stat(spm_path, &sb) == 0)
		s = rg_tokenizer_load(dir, &m->tok);
	free(tok_path);
	free(spm_path);
	return s;
}

/* ---------------------------------------------------------------- KV cache */

static rg_status need_decoder(const rg_model *m, const char *fn)
{
	if (!m)
		return rg_errorf(RG_ERR_INVALID_INPUT, "%s: NULL model", fn);
	if (m->info.kind != RG_MODEL_DECODER && m->info.kind != RG_MODEL_ENC_DEC)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "%s: %s is an encoder (%s); it has no KV cache and no step (use "
				 "rg_model_embed / rg_model_run)",
				 fn, m->dir, m->info.model_type);
	return RG_OK;
}

rg_status rg_model_kv_init(rg_model *m, int block_size, int n_blocks)
{
	size_t per_block, bytes;
	int64_t slots;
	rg_status s;

	if ((s = need_decoder(m, "rg_model_kv_init")) != RG_OK)
		return s;
	if (block_size < 1 || block_size > RG_KV_MAX_BLOCK || n_blocks < 0)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_kv_init: block_size %d must be in [1, %d] and n_blocks %d "
				 ">= 0",
				 block_size, RG_KV_MAX_BLOCK, n_blocks);
	per_block = kv_token_bytes(m) * (size_t)block_size;
	if (n_blocks == 0) {
		size_t nb = RG_KV_DEFAULT_BYTES / per_block;
		size_t one = ((size_t)m->dec.cfg.max_position_embeddings + block_size - 1) /
			     (size_t)block_size;

		nb = nb < one ? one : nb;
		n_blocks = nb > (size_t)(1 << 30) / (size_t)block_size ?
				   (1 << 30) / block_size : (int)nb;
	}
	slots = (int64_t)n_blocks * block_size;
	if (slots > ((int64_t)1 << 31) - 1)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_kv_init: %d blocks of %d are over 2^31 slots", n_blocks,
				 block_size);
	kv_free(m);
	/* one more block than the caller's: the scratch block n_blocks, which the padding rows of
	 * a graphed decode step write and read (never in a caller's table) */
	bytes = per_block * ((size_t)n_blocks + 1);
	if ((s = rg_backend_alloc(m->be, bytes, &m->dec.kv_d)) != RG_OK)
		return rg_error_wrap(s, "KV cache of %d blocks of %d positions (%zu bytes)",
				     n_blocks, block_size, bytes);
	/* zeros, so a block read before it is written holds no garbage (NaN) */
	if ((s = rg_backend_zero(m->be, m->dec.kv_d, bytes)) != RG_OK) {
		kv_free(m);
		return s;
	}
	m->dec.slot_seen = calloc((size_t)(slots + 7) / 8, 1);
	if (!m->dec.slot_seen) {
		kv_free(m);
		return rg_errorf(RG_ERR_OOM, "out of host memory for the KV slot map");
	}
	m->dec.block_size = block_size;
	m->dec.n_blocks = n_blocks;
	m->dec.layer_bytes = per_block / (2 * (size_t)m->dec.cfg.num_hidden_layers) *
			     ((size_t)n_blocks + 1);
	rg_dec_graphs_free(m); /* captured against the old cache */
	return RG_OK;
}

rg_status rg_model_kv_init_bytes(rg_model *m, int block_size, size_t bytes)
{
	size_t per_block, nb;
	rg_status s;

	if ((s = need_decoder(m, "rg_model_kv_init_bytes")) != RG_OK)
		return s;
	if (block_size < 1 || block_size > RG_KV_MAX_BLOCK)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_kv_init_bytes: block_size %d must be in [1, %d]",
				 block_size, RG_KV_MAX_BLOCK);
	per_block = kv_token_bytes(m) * (size_t)block_size;
	nb = bytes / per_block;
	nb = nb < 1 ? 1 : nb;
	if (nb > (size_t)(1 << 30) / (size_t)block_size)
		nb = (size_t)(1 << 30) / (size_t)block_size;
	return rg_model_kv_init(m, block_size, (int)nb);
}

rg_status rg_model_kv_init_fraction(rg_model *m, int block_size, double fraction)
{
	size_t used = 0, total = 0;
	rg_status s;

	if ((s = need_decoder(m, "rg_model_kv_init_fraction")) != RG_OK)
		return s;
	if (!(fraction > 0.0 && fraction <= 1.0))
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_kv_init_fraction: fraction %g must be in (0, 1]", fraction);
	kv_free(m); /* the old cache is free memory too */
	if ((s = rg_backend_sync(m->be)) != RG_OK ||
	    (s = rg_backend_mem_info(m->be, &used, &total)) != RG_OK)
		return s;
	return rg_model_kv_init_bytes(m, block_size,
				      (size_t)(fraction * (double)(total > used ? total - used : 0)));
}

int32_t rg_model_eos_id(const rg_model *m)
{
	if (!m || (m->info.kind != RG_MODEL_DECODER && m->info.kind != RG_MODEL_ENC_DEC))
		return -1;
	return m->dec.cfg.eos_token_id;
}

rg_status rg_model_kv_info(const rg_model *m, rg_kv_info *out)
{
	rg_status s;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_kv_info: NULL argument");
	memset(out, 0, sizeof(*out));
	if ((s = need_decoder(m, "rg_model_kv_info")) != RG_OK)
		return s;
	out->block_size = m->dec.block_size;
	out->n_blocks = m->dec.n_blocks;
	out->num_layers = m->dec.cfg.num_hidden_layers;
	out->num_kv_heads = m->dec.cfg.num_key_value_heads;
	out->head_dim = m->dec.cfg.head_dim;
	out->bytes_per_token = kv_token_bytes(m);
	out->bytes_per_block = out->bytes_per_token * (size_t)out->block_size;
	out->bytes = out->bytes_per_block * (size_t)out->n_blocks;
	return RG_OK;
}

rg_status rg_model_kv_copy_blocks(rg_model *m, const int32_t *src, const int32_t *dst, int n)
{
	const size_t block_bytes = m ? m->dec.layer_bytes / ((size_t)m->dec.n_blocks + 1) : 0;
	rg_status s;

	if ((s = need_decoder(m, "rg_model_kv_copy_blocks")) != RG_OK)
		return s;
	if (!m->dec.kv_d)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "rg_model_kv_copy_blocks: no KV cache (rg_model_kv_init first)");
	if (n < 0 || (n > 0 && (!src || !dst)))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_kv_copy_blocks: bad arguments n=%d",
				 n);
	for (int i = 0; i < n; i++)
		if (src[i] < 0 || src[i] >= m->dec.n_blocks || dst[i] < 0 ||
		    dst[i] >= m->dec.n_blocks)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "rg_model_kv_copy_blocks: copy %d is block %d -> %d, outside "
					 "[0, %d)",
					 i, src[i], dst[i], m->dec.n_blocks);
	/* each layer's K and V is one pool of n_blocks (+ scratch) blocks, layer_bytes apart */
	if ((s = rg_op_copy_blocks(m->be, m->dec.kv_d, block_bytes, 2 * m->dec.cfg.num_hidden_layers,
				   m->dec.layer_bytes, src, dst, n)) != RG_OK)
		return s;
	return rg_backend_sync(m->be);
}

/* ---------------------------------------------------------------- step */

#define BAD(...) rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_step: " __VA_ARGS__)
#define BAD_ENC(...) rg_errorf(RG_ERR_INVALID_INPUT, "rg_model_encode_cross: " __VA_ARGS__)

/* Every field of b against the model and its cache (ragged.h lists the checks). On success
 * *max_ctx is the longest context and *mb_used the most blocks a sequence reads. */
static rg_status step_validate(rg_model *m, const rg_step_batch *b, int *max_ctx, int *mb_used)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int bs = m->dec.block_size;
	rg_status s = RG_OK;
	int t;

	if (!b)
		return BAD("NULL batch");
	if (!m->dec.kv_d)
		return BAD("the model has no KV cache (call rg_model_kv_init first)");
	if (b->n_tokens < 1)
		return BAD("n_tokens %d < 1", b->n_tokens);
	if (b->n_tokens > m->max_tokens)
		return rg_errorf(RG_ERR_TOO_LONG,
				 "rg_model_step: %d new tokens are over max_batch_tokens %d",
				 b->n_tokens, m->max_tokens);
	if (b->n_seq < 1 || b->n_seq > b->n_tokens)
		return BAD("n_seq %d must be in [1, n_tokens %d]", b->n_seq, b->n_tokens);
	if (!b->tokens || !b->positions || !b->cu_seqlens_q || !b->context_lens ||
	    !b->block_tables || !b->slot_mapping)
		return BAD("tokens, positions, cu_seqlens_q, context_lens, block_tables and "
			   "slot_mapping must not be NULL");
	if (b->n_logits < 0 || b->n_logits > b->n_tokens)
		return BAD("n_logits %d must be in [0, n_tokens %d]", b->n_logits, b->n_tokens);
	if (b->n_logits > 0 && !b->logits_rows)
		return BAD("logits_rows must not be NULL when n_logits > 0");
	if (b->max_blocks_per_seq < 1)
		return BAD("max_blocks_per_seq %d < 1", b->max_blocks_per_seq);
	for (t = 0; t < b->n_tokens; t++)
		if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size)
			return BAD("tokens[%d] = %d is outside the vocabulary [0, %d)", t,
				   b->tokens[t], c->vocab_size);
	if (b->cu_seqlens_q[0] != 0)
		return BAD("cu_seqlens_q[0] = %d, must be 0", b->cu_seqlens_q[0]);
	if (b->cu_seqlens_q[b->n_seq] != b->n_tokens)
		return BAD("cu_seqlens_q[n_seq] = %d, must be n_tokens %d",
			   b->cu_seqlens_q[b->n_seq], b->n_tokens);
	*max_ctx = 0;
	*mb_used = 1;
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t q0 = b->cu_seqlens_q[i], q1 = b->cu_seqlens_q[i + 1];
		const int32_t ctx = b->context_lens[i];
		const int32_t *bt = b->block_tables + (size_t)i * b->max_blocks_per_seq;
		int nb;

		if (q1 <= q0 || q1 > b->n_tokens)
			return BAD("cu_seqlens_q[%d..%d] = %d, %d: every sequence needs >= 1 new "
				   "token and the sums must stay <= n_tokens %d",
				   i, i + 1, q0, q1, b->n_tokens);
		if (ctx < q1 - q0 || ctx > c->max_position_embeddings)
			return BAD("context_lens[%d] = %d must be in [its %d new tokens, "
				   "max_position_embeddings %d]",
				   i, ctx, q1 - q0, c->max_position_embeddings);
		if ((int64_t)ctx > (int64_t)b->max_blocks_per_seq * bs)
			return BAD("context_lens[%d] = %d needs more than max_blocks_per_seq %d "
				   "blocks of %d",
				   i, ctx, b->max_blocks_per_seq, bs);
		nb = (ctx + bs - 1) / bs;
		for (int k = 0; k < nb; k++)
			if (bt[k] < 0 || bt[k] >= m->dec.n_blocks)
				return BAD("block_tables[%d][%d] = %d is outside the cache's blocks "
					   "[0, %d)",
					   i, k, bt[k], m->dec.n_blocks);
		for (t = q0; t < q1; t++) {
			const int32_t pos = ctx - (q1 - q0) + (t - q0);
			const int64_t slot = (int64_t)bt[pos / bs] * bs + pos % bs;

			if (b->positions[t] != pos)
				return BAD("positions[%d] = %d, but sequence %d's new token %d sits "
					   "at %d (context_lens %d, %d new)",
					   t, b->positions[t], i, t - q0, pos, ctx, q1 - q0);
			if (b->slot_mapping[t] != slot)
				return BAD("slot_mapping[%d] = %d, but sequence %d's block table "
					   "puts position %d in slot %lld",
					   t, b->slot_mapping[t], i, pos, (long long)slot);
		}
		*max_ctx = ctx > *max_ctx ? ctx : *max_ctx;
		*mb_used = nb > *mb_used ? nb : *mb_used;
	}
	if (m->info.kind == RG_MODEL_ENC_DEC) {
		if (!b->cross_lens || !b->cross_block_tables || b->max_cross_blocks_per_seq < 1)
			return BAD("an encoder-decoder step needs cross_lens, cross_block_tables and "
				   "max_cross_blocks_per_seq >= 1 (rg_model_encode_cross's blocks)");
		for (int i = 0; i < b->n_seq; i++) {
			const int32_t xl = b->cross_lens[i];
			const int32_t *xt = b->cross_block_tables + (size_t)i * b->max_cross_blocks_per_seq;

			if (xl < 1 || xl > c->max_source_positions)
				return BAD("cross_lens[%d] = %d must be in [1, max_source_positions %d]",
					   i, xl, c->max_source_positions);
			if ((int64_t)xl > (int64_t)b->max_cross_blocks_per_seq * bs)
				return BAD("cross_lens[%d] = %d needs more than max_cross_blocks_per_seq "
					   "%d blocks of %d", i, xl, b->max_cross_blocks_per_seq, bs);
			for (int k = 0; k < (xl + bs - 1) / bs; k++)
				if (xt[k] < 0 || xt[k] >= m->dec.n_blocks)
					return BAD("cross_block_tables[%d][%d] = %d is outside the "
						   "cache's blocks [0, %d)", i, k, xt[k], m->dec.n_blocks);
		}
	}
	/* one writer per slot (block tables that alias a block being written) */
	for (t = 0; t < b->n_tokens && s == RG_OK; t++) {
		const int32_t sl = b->slot_mapping[t];

		if (m->dec.slot_seen[sl >> 3] & (1u << (sl & 7)))
			s = BAD("slot %d is written by two new tokens (the second is token %d)", sl,
				t);
		m->dec.slot_seen[sl >> 3] |= (uint8_t)(1u << (sl & 7));
	}
	for (int u = 0; u < t; u++)
		m->dec.slot_seen[b->slot_mapping[u] >> 3] = 0;
	if (s != RG_OK)
		return s;
	for (int r = 0; r < b->n_logits; r++)
		if (b->logits_rows[r] < 0 || b->logits_rows[r] >= b->n_tokens)
			return BAD("logits_rows[%d] = %d is outside [0, n_tokens %d)", r,
				   b->logits_rows[r], b->n_tokens);
	return RG_OK;
}

/* Layer l's K pool in the cache; its V pool follows, layer_bytes on. During an embedding pass
 * (m->dec.emb_on, decoder_embed.c) every layer's pools are the pass's one pair: each layer
 * writes its keys and values there, then attends, before the next layer writes. */
static char *layer_k(rg_model *m, int l)
{
	if (m->dec.emb_on)
		return m->dec.emb_kv_d;
	return (char *)m->dec.kv_d + 2 * (size_t)l * m->dec.layer_bytes;
}

/* Slots of one pool, the scratch block's included (an embedding pass: its pools'). */
static int64_t cache_slots(const rg_model *m)
{
	if (m->dec.emb_on)
		return m->dec.emb_slots;
	return ((int64_t)m->dec.n_blocks + 1) * m->dec.block_size;
}

/* Layer l's V pool. */
static char *layer_v(rg_model *m, int l)
{
	const rg_decoder_config *c = &m->dec.cfg;

	if (m->dec.emb_on)
		return (char *)m->dec.emb_kv_d + (size_t)m->dec.emb_slots * c->num_key_value_heads *
							 c->head_dim * m->esz;
	return layer_k(m, l) + m->dec.layer_bytes;
}

rg_status rg_dec_attention(rg_model *m, rg_dec_fwd *f, int l, void *qkv, float scale, void *ctx)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int qd = c->num_attention_heads * c->head_dim;
	const int kvd = c->num_key_value_heads * c->head_dim, ld = qd + 2 * kvd;
	char *base = qkv, *kc = layer_k(m, l);
	rg_status s;

	s = rg_op_kv_write(m->be, base + (size_t)qd * m->esz, base + (size_t)(qd + kvd) * m->esz, ld,
			   f->slots, f->n, kvd, kc, layer_v(m, l), cache_slots(m));
	if (s != RG_OK)
		return s;
	return rg_dec_attend(m, f, l, qkv, scale, ctx);
}

rg_status rg_dec_rope_kv_write(rg_model *m, rg_dec_fwd *f, int l, void *qkv,
			       const float *cos_sin)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int ld = (c->num_attention_heads + 2 * c->num_key_value_heads) * c->head_dim;
	char *kc = layer_k(m, l);

	return rg_op_rope_kv_write(m->be, qkv, ld, f->n, c->num_attention_heads,
				   c->num_key_value_heads, c->head_dim, cos_sin,
				   c->rope_interleaved, f->slots, kc, layer_v(m, l),
				   cache_slots(m));
}

rg_status rg_dec_attend(rg_model *m, rg_dec_fwd *f, int l, void *qkv, float scale, void *ctx)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int qd = c->num_attention_heads * c->head_dim;
	const int kvd = c->num_key_value_heads * c->head_dim, ld = qd + 2 * kvd;
	char *base = qkv, *kc = layer_k(m, l);

	f->attn.num_heads = c->num_attention_heads;
	f->attn.num_kv_heads = c->num_key_value_heads;
	f->attn.head_dim = c->head_dim;
	f->attn.scale = scale;
	f->attn.k_new = base + (size_t)qd * m->esz;
	f->attn.v_new = base + (size_t)(qd + kvd) * m->esz;
	return rg_op_paged_attention(m->be, &f->attn, qkv, ld, kc, layer_v(m, l), ctx);
}

rg_status rg_dec_cross_attend(rg_model *m, rg_dec_fwd *f, int l, const void *q, int ldq,
			      float scale, void *ctx)
{
	const rg_decoder_config *c = &m->dec.cfg;
	char *kc = layer_k(m, l);
	rg_attn_desc d;

	if (!f->has_cross)
		return rg_errorf(RG_ERR_INTERNAL, "cross-attention in a step without cross arrays");
	d = f->cross;
	d.num_heads = c->num_attention_heads;
	d.num_kv_heads = c->num_key_value_heads;
	d.head_dim = c->head_dim;
	d.scale = scale;
	d.k_new = d.v_new = NULL; /* every key from the cache */
	return rg_op_paged_attention(m->be, &d, q, ldq, kc, layer_v(m, l), ctx);
}

rg_status rg_dec_cross_write(rg_model *m, int l, const void *kv, int ld, const int32_t *slots,
			     int n)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const int kvd = c->num_key_value_heads * c->head_dim;
	char *kc = layer_k(m, l);

	return rg_op_kv_write(m->be, kv, (const char *)kv + (size_t)kvd * m->esz, ld, slots, n,
			      kvd, kc, layer_v(m, l), cache_slots(m));
}

/* The cross block-table width of b's sequences (columns) and their longest source. */
static void cross_width(const rg_model *m, const rg_step_batch *b, int *width, int *max_len)
{
	const int bs = m->dec.block_size;

	*width = 1;
	*max_len = 0;
	for (int i = 0; i < b->n_seq; i++) {
		const int nb = (b->cross_lens[i] + bs - 1) / bs;

		*width = nb > *width ? nb : *width;
		*max_len = b->cross_lens[i] > *max_len ? b->cross_lens[i] : *max_len;
	}
}

/* Stage the cross descriptor of an encoder-decoder step: one pseudo-sequence per new token
 * (rg_dec_fwd.cross), [cu (n + 1) | context (n) | tables (n, width)] in x_h -> x_d. B > 0 (a
 * graphed step): n = B rows, the padding rows a one-key source in the scratch block, XB
 * columns and a max_context_len of XB blocks, so that the captured launches fit every step of
 * the key. Growing x_d frees the graphs (they read the old buffer). */
static rg_status cross_stage(rg_model *m, const rg_step_batch *b, rg_dec_fwd *f, int B, int XB)
{
	const int n = B ? B : b->n_tokens, bs = m->dec.block_size;
	int width, max_len;
	size_t need;
	int32_t *xh;
	rg_status s;

	cross_width(m, b, &width, &max_len);
	if (B) {
		width = XB;
		max_len = XB * bs;
	}
	need = (size_t)2 * n + 1 + (size_t)n * width;
	if (need > m->dec.x_cap) {
		size_t cap = need < 4096 ? 4096 : need * 2;

		if ((s = rg_backend_sync(m->be)) != RG_OK)
			return s;
		rg_dec_graphs_free(m);
		rg_backend_dealloc(m->be, m->dec.x_d);
		rg_backend_host_free(m->be, m->dec.x_h);
		m->dec.x_d = m->dec.x_h = NULL;
		m->dec.x_cap = 0;
		if ((s = rg_backend_alloc(m->be, cap * 4, (void **)&m->dec.x_d)) != RG_OK ||
		    (s = rg_backend_host_alloc(m->be, cap * 4, (void **)&m->dec.x_h)) != RG_OK)
			return rg_error_wrap(s, "cross tables of %zu entries", cap);
		m->dec.x_cap = cap;
	}
	xh = m->dec.x_h;
	for (int i = 0; i < b->n_seq; i++) {
		const int32_t *src = b->cross_block_tables + (size_t)i * b->max_cross_blocks_per_seq;
		const int nb = (b->cross_lens[i] + bs - 1) / bs;

		for (int t = b->cu_seqlens_q[i]; t < b->cu_seqlens_q[i + 1]; t++) {
			int32_t *row = xh + 2 * n + 1 + (size_t)t * width;

			xh[t] = t;
			xh[n + 1 + t] = b->cross_lens[i];
			memcpy(row, src, (size_t)nb * 4);
			for (int k = nb; k < width; k++)
				row[k] = 0; /* never read */
		}
	}
	for (int t = b->n_tokens; t < n; t++) { /* padding rows: one key, the scratch block */
		int32_t *row = xh + 2 * n + 1 + (size_t)t * width;

		xh[t] = t;
		xh[n + 1 + t] = 1;
		row[0] = m->dec.n_blocks;
		for (int k = 1; k < width; k++)
			row[k] = 0;
	}
	xh[n] = n;
	if ((s = rg_backend_upload_async(m->be, m->dec.x_d, xh, need * 4)) != RG_OK)
		return s;
	memset(&f->cross, 0, sizeof(f->cross));
	f->has_cross = true;
	f->cross.causal = true; /* one query at the last position: it sees every source key */
	f->cross.n_seq = n;
	f->cross.cu_seqlens_q = m->dec.x_d;
	f->cross.cu_seqlens_q_h = xh;
	f->cross.max_seqlen_q = 1;
	f->cross.context_lens = m->dec.x_d + n + 1;
	f->cross.context_lens_h = xh + n + 1;
	f->cross.max_context_len = max_len;
	f->cross.block_tables = m->dec.x_d + 2 * n + 1;
	f->cross.max_blocks_per_seq = width;
	f->cross.block_size = bs;
	f->cross.n_blocks = (int64_t)m->dec.n_blocks + 1;
	return RG_OK;
}

rg_status rg_model_encode_cross(rg_model *m, int n_tokens, const int32_t *tokens, int n_seq,
				const int32_t *cu_seqlens, const int32_t *slot_mapping)
{
	const size_t T = m ? (size_t)m->max_tokens : 0;
	int32_t *h;
	int max_len = 0;
	rg_enc_fwd f;
	rg_status s;

	if (!m)
		return BAD_ENC("NULL model");
	if (m->info.kind != RG_MODEL_ENC_DEC)
		return rg_errorf(RG_ERR_UNSUPPORTED, "rg_model_encode_cross: %s (%s) is not an "
				 "encoder-decoder", m->dir, m->info.model_type);
	if (!m->dec.kv_d)
		return BAD_ENC("the model has no KV cache (call rg_model_kv_init first)");
	if (!tokens || !cu_seqlens || !slot_mapping || n_seq < 1 || n_tokens < 1)
		return BAD_ENC("tokens, cu_seqlens and slot_mapping must be set, n_seq and n_tokens "
			       ">= 1");
	if (n_tokens > m->max_tokens)
		return rg_errorf(RG_ERR_TOO_LONG, "rg_model_encode_cross: %d source tokens are over "
				 "max_batch_tokens %d", n_tokens, m->max_tokens);
	if (n_seq > n_tokens || cu_seqlens[0] != 0 || cu_seqlens[n_seq] != n_tokens)
		return BAD_ENC("cu_seqlens must start at 0 and end at n_tokens %d (n_seq %d)",
			       n_tokens, n_seq);
	for (int i = 0; i < n_seq; i++) {
		const int len = cu_seqlens[i + 1] - cu_seqlens[i];

		if (len < 1)
			return BAD_ENC("source %d is empty (cu_seqlens not increasing)", i);
		if (len > m->dec.cfg.max_source_positions)
			return rg_errorf(RG_ERR_TOO_LONG, "rg_model_encode_cross: source %d has %d "
					 "tokens, over max_source_positions %d", i, len,
					 m->dec.cfg.max_source_positions);
		max_len = len > max_len ? len : max_len;
	}
	for (int t = 0; t < n_tokens; t++) {
		if (tokens[t] < 0 || tokens[t] >= m->dec.cfg.vocab_size)
			return BAD_ENC("tokens[%d] = %d is outside the vocabulary [0, %d)", t,
				       tokens[t], m->dec.cfg.vocab_size);
		if (slot_mapping[t] < 0 ||
		    (int64_t)slot_mapping[t] >= (int64_t)m->dec.n_blocks * m->dec.block_size)
			return BAD_ENC("slot_mapping[%d] = %d is outside the cache", t,
				       slot_mapping[t]);
	}
	h = m->dec.enc_h;
	memcpy(h, tokens, (size_t)n_tokens * 4);
	/* positions 0.. within each source; a skipped token (M2M100's pad) takes none */
	for (int i = 0; i < n_seq; i++) {
		const int skip = m->dec.cfg.enc_pos_skip_token;
		int p = 0;

		for (int t = cu_seqlens[i]; t < cu_seqlens[i + 1]; t++)
			h[T + t] = tokens[t] == skip ? 0 : p++;
	}
	memcpy(h + 2 * T, slot_mapping, (size_t)n_tokens * 4);
	memcpy(h + 3 * T, cu_seqlens, (size_t)(n_seq + 1) * 4);
	{
		const size_t off[] = {0, T, 2 * T, 3 * T};
		const size_t cnt[] = {(size_t)n_tokens, (size_t)n_tokens, (size_t)n_tokens,
				      (size_t)n_seq + 1};

		for (int i = 0; i < 4; i++)
			if ((s = rg_backend_upload_async(m->be, m->dec.enc_d + off[i], h + off[i],
							 cnt[i] * 4)) != RG_OK)
				return s;
	}
	f = (rg_enc_fwd){.n = n_tokens, .n_seq = n_seq, .max_len = max_len,
			 .tokens = m->dec.enc_d, .positions = m->dec.enc_d + T,
			 .slots = m->dec.enc_d + 2 * T, .cu = m->dec.enc_d + 3 * T,
			 .cu_h = h + 3 * T};
	if ((s = m->arch->encode_cross(m, &f)) != RG_OK)
		return s;
	return rg_backend_sync(m->be);
}

/* The step's path (rg_model_step's docstring) and its graph key: STEP_SAMPLE + top_n for the
 * sampler (a graph per top_n). */
enum { STEP_LOGITS = 0, STEP_ARGMAX = 1, STEP_SAMPLE = 2 };
_Static_assert(RG_SAMPLE_MAX_TOP == RG_GEN_MAX_LOGPROBS,
	       "rg_step_out.top_n's bound in ragged.h is the device sampler's");

static int step_mode(const rg_step_batch *b, const rg_step_out *o)
{
	if (!o || !o->ids || b->n_logits == 0) /* n_logits 0: nothing to choose */
		return STEP_LOGITS;
	if (!o->rows && o->top_n == 0)
		return STEP_ARGMAX;
	return STEP_SAMPLE + o->top_n;
}

/* The output descriptor against rg_model_step's rules (ragged.h); the rows' parameters after
 * it (rg_dec_sample_check). Array fields may be NULL when n_logits is 0. */
static rg_status step_out_check(const rg_model *m, const rg_step_batch *b, const rg_step_out *o)
{
	const int n = b->n_logits;

	if (!o)
		return n > 0 ? BAD("out is NULL with n_logits %d > 0", n) : RG_OK;
	if (o->top_n < 0 || o->top_n > RG_SAMPLE_MAX_TOP)
		return BAD("out.top_n %d must be in [0, %d]", o->top_n, RG_SAMPLE_MAX_TOP);
	if (!o->ids && (o->rows || o->logprobs || o->top_n > 0))
		return BAD("out.rows, out.logprobs and out.top_n > 0 need out.ids (the chosen "
			   "tokens)");
	if (o->want_logits && !o->logits)
		return BAD("out.want_logits is set but out.logits is NULL");
	if (n > 0 && !o->ids && !o->logits)
		return BAD("neither out.ids nor out.logits is set (n_logits %d > 0)", n);
	if (n > 0 && o->top_n > 0 && (!o->top_ids || !o->top_logprobs))
		return BAD("out.top_ids and out.top_logprobs must not be NULL when out.top_n %d > 0",
			   o->top_n);
	return o->rows ? rg_dec_sample_check(m, n, o) : RG_OK;
}

/* n values of the logits chunk from value off on, widened to f32 into dst (synchronous). */
static rg_status logits_download(rg_model *m, float *dst, size_t off, size_t n)
{
	const char *src = (const char *)m->dec.a[RG_D_LOGITS] + off * m->esz;
	rg_status s;

	if (m->esz == 4)
		return rg_backend_download(m->be, dst, src, n * 4);
	s = rg_backend_download(m->be, (char *)dst + 2 * n, src, n * 2);
	if (s == RG_OK)
		rg_widen16_tail(dst, n, rg_backend_dtype(m->be));
	return s;
}

/* The end of the run of wanted rows that starts at r (want NULL: every row), rows < n. */
static int want_run_end(const uint8_t *want, int r, int n)
{
	while (r < n && (!want || want[r]))
		r++;
	return r;
}

/* Chunk rows r0 .. r0 + nr - 1 that want names (NULL: all) into logits f32, one synchronous
 * download per run of consecutive wanted rows (one per chunk when want is NULL). */
static rg_status logits_download_rows(rg_model *m, float *logits, int r0, int nr,
				      const uint8_t *want)
{
	const size_t V = (size_t)m->dec.cfg.vocab_size;
	rg_status s;

	for (int r = 0; r < nr;) {
		int e;

		if (want && !want[r0 + r]) {
			r++;
			continue;
		}
		e = want_run_end(want, r0 + r, r0 + nr) - r0;
		if ((s = logits_download(m, logits + (size_t)(r0 + r) * V, (size_t)r * V,
					 (size_t)(e - r) * V)) != RG_OK)
			return s;
		r = e;
	}
	return RG_OK;
}

/* The tail of a step on the device, after the forward: for the n_logits wanted rows (their
 * indices rows_d, backend memory), RG_LOGITS_CHUNK at a time: gather the final norm's rows, one
 * GEMM against the LM head, then the logits out -- to lg (pinned, act dtype, the whole chunk,
 * asynchronously: a graphed logits-only step) or to logits f32 (the rows want names, NULL:
 * every row; synchronously) -- and the choice of the mode: (STEP_ARGMAX) the greedy id and its
 * log-prob into am_d, (STEP_SAMPLE) the sampler. Capturable in a graph when logits is NULL. */
static rg_status step_tail(rg_model *m, const int32_t *rows_d, int n_logits, int mode,
			   float *logits, const uint8_t *want, void *lg)
{
	const int H = m->dec.cfg.hidden_size, V = m->dec.cfg.vocab_size;
	const int T = m->max_tokens;
	rg_status s;

	for (int r0 = 0; r0 < n_logits; r0 += RG_LOGITS_CHUNK) {
		const int nr = n_logits - r0 < RG_LOGITS_CHUNK ? n_logits - r0 : RG_LOGITS_CHUNK;
		const size_t n = (size_t)nr * V;

		if ((s = rg_op_gather_rows(m->be, m->dec.a[RG_D_NORMED], rows_d + r0, nr, H,
					   m->dec.a[RG_D_ROWS])) != RG_OK ||
		    (s = rg_op_gemm_bias_act(m->be, m->dec.a[RG_D_ROWS], m->dec.lm_head,
					     m->dec.lm_bias, m->dec.a[RG_D_LOGITS], nr, V, H,
					     RG_ACT_NONE)) != RG_OK)
			return s;
		if (lg) { /* one chunk at most (logits-only graphs: B <= RG_LOGITS_CHUNK) */
			if ((s = rg_backend_download_async(m->be, lg, m->dec.a[RG_D_LOGITS],
							   n * m->esz)) != RG_OK)
				return s;
		} else if (logits && (s = logits_download_rows(m, logits, r0, nr, want)) != RG_OK) {
			return s;
		}
		if (mode == STEP_ARGMAX &&
		    (s = rg_op_argmax_rows(m->be, m->dec.a[RG_D_LOGITS], nr, V, m->dec.am_d + r0,
					   (float *)(m->dec.am_d + T) + r0)) != RG_OK)
			return s;
		if (mode >= STEP_SAMPLE) {
			const rg_sample_args a = rg_dec_sample_args(m, r0, mode - STEP_SAMPLE);

			if ((s = rg_op_sample_rows(m->be, m->dec.a[RG_D_LOGITS], nr, V, &a)) != RG_OK)
				return s;
		}
	}
	if (mode == STEP_ARGMAX && n_logits > 0) {
		if ((s = rg_backend_download_async(m->be, m->dec.am_h, m->dec.am_d,
						   (size_t)n_logits * 4)) != RG_OK ||
		    (s = rg_backend_download_async(m->be, m->dec.am_h + T, m->dec.am_d + T,
						   (size_t)n_logits * 4)) != RG_OK)
			return s;
	}
	if (mode >= STEP_SAMPLE && n_logits > 0) {
		const size_t C = rg_dec_sample_rows(m), tn = (size_t)(mode - STEP_SAMPLE);
		const size_t off[] = {0, C, 2 * C, (2 + RG_SAMPLE_MAX_TOP) * C};
		const size_t cnt[] = {(size_t)n_logits, (size_t)n_logits, n_logits * tn,
				      n_logits * tn};

		for (int i = 0; i < 4; i++)
			if (cnt[i] && (s = rg_backend_download_async(m->be, m->dec.smp_out_h + off[i],
								     m->dec.smp_out_d + off[i],
								     cnt[i] * 4)) != RG_OK)
				return s;
	}
	return RG_OK;
}

/* Graph buckets of the padded sequence count: decode batches of up to RG_GRAPH_MAX_ROWS rows
 * (a logits-only step: RG_LOGITS_CHUNK, its pinned logits buffer). */
static int graph_bucket(int n)
{
	static const int b[] = {1,  2,  4,  8,   12,  16,  24,  32,  40,  48,
				56, 64, 80, 96, 112, 128, 160, 192, 224, RG_GRAPH_MAX_ROWS};

	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
		if (n <= b[i])
			return b[i];
	return 0;
}

/* A decode-only step that may run as a graph: one new token per sequence, every row's logits
 * in order, its bucket within the staging's max_tokens rows (and within RG_LOGITS_CHUNK for a
 * logits-only step). */
static bool graph_eligible(const rg_model *m, const rg_step_batch *b, int mode)
{
	const int B = graph_bucket(b->n_seq);

	if (!m->dec.use_graphs || b->n_tokens != b->n_seq || b->n_logits != b->n_seq || !B ||
	    B > m->max_tokens || (mode == STEP_LOGITS && B > RG_LOGITS_CHUNK))
		return false;
	for (int i = 0; i < b->n_logits; i++)
		if (b->logits_rows[i] != i)
			return false;
	return true;
}

/* The graph slot for (B, MB, XB, mode): found, or a free / least recently used one (freed). */
static struct rg_dec_graph *graph_slot(rg_model *m, int B, int MB, int XB, int mode)
{
	struct rg_dec_graph *lru = NULL, *g;

	for (int i = 0; i < RG_DEC_GRAPHS; i++) {
		g = &m->dec.graphs[i];
		if (g->B == B && g->MB == MB && g->XB == XB && g->mode == mode)
			return g;
		if (!lru || g->last_use < lru->last_use)
			lru = g;
	}
	rg_backend_graph_free(m->be, lru->g);
	memset(lru, 0, sizeof(*lru));
	lru->B = B;
	lru->MB = MB;
	lru->XB = XB;
	lru->mode = mode;
	return lru;
}

/* Stage a step into the staging buffers (pinned ids_h -> ids_d, block tables), padded to B
 * sequences and MB block-table columns when B > 0 (a graphed decode step: padding rows are
 * token 0 at position 0 of a one-token context in the scratch block). */
static rg_status step_stage(rg_model *m, const rg_step_batch *b, int mb_used, int B, int MB)
{
	const size_t T = (size_t)m->max_tokens;
	const int n = b->n_tokens, bs = m->dec.block_size, scratch = m->dec.n_blocks;
	const int ns = B ? B : b->n_seq, nt = B ? B : n, nl = B ? B : b->n_logits;
	const int width = B ? MB : mb_used;
	int32_t *ih = m->dec.ids_h, *id = m->dec.ids_d;
	rg_status s;

	/* staging: tokens | positions | slots | logits rows | cu_seqlens_q | context_lens */
	memcpy(ih, b->tokens, (size_t)n * 4);
	memcpy(ih + T, b->positions, (size_t)n * 4);
	memcpy(ih + 2 * T, b->slot_mapping, (size_t)n * 4);
	if (b->n_logits)
		memcpy(ih + 3 * T, b->logits_rows, (size_t)b->n_logits * 4);
	memcpy(ih + 4 * T, b->cu_seqlens_q, (size_t)(b->n_seq + 1) * 4);
	memcpy(ih + 5 * T + 1, b->context_lens, (size_t)b->n_seq * 4);
	for (int i = n; i < nt; i++) { /* padding rows (graphs: one token per sequence) */
		ih[i] = 0;
		ih[T + i] = 0;
		ih[2 * T + i] = scratch * bs;
		ih[3 * T + i] = i;
		ih[4 * T + i + 1] = i + 1;
		ih[5 * T + 1 + i] = 1;
	}
	{
		const size_t off[] = {0, T, 2 * T, 3 * T, 4 * T, 5 * T + 1};
		const size_t cnt[] = {(size_t)nt, (size_t)nt, (size_t)nt, (size_t)nl,
				      (size_t)ns + 1, (size_t)ns};

		for (int i = 0; i < 6; i++)
			if (cnt[i] && (s = rg_backend_upload_async(m->be, id + off[i], ih + off[i],
								   cnt[i] * 4)) != RG_OK)
				return s;
	}
	/* block tables compacted to width columns (grown when a step needs more) */
	{
		const size_t need = (size_t)ns * (size_t)width;

		if ((s = rg_dec_bt_reserve(m, need)) != RG_OK)
			return s;
		for (int i = 0; i < ns; i++) {
			int32_t *dst = m->dec.bt_h + (size_t)i * width;
			int nb = 0;

			if (i < b->n_seq) {
				nb = (b->context_lens[i] + bs - 1) / bs;
				memcpy(dst, b->block_tables + (size_t)i * b->max_blocks_per_seq,
				       (size_t)nb * 4);
			} else {
				dst[0] = scratch;
				nb = 1;
			}
			for (int k = nb; k < width; k++)
				dst[k] = 0; /* never read */
		}
		return rg_backend_upload_async(m->be, m->dec.bt_d, m->dec.bt_h, need * 4);
	}
}

/* The forward's pointers for ns sequences of nt new tokens over the staged buffers. */
static void step_fwd(rg_model *m, rg_dec_fwd *f, int nt, int ns, int width, int max_ctx)
{
	const size_t T = (size_t)m->max_tokens;
	int32_t *ih = m->dec.ids_h, *id = m->dec.ids_d;

	memset(f, 0, sizeof(*f));
	f->n = nt;
	f->tokens = id;
	f->positions = id + T;
	f->slots = id + 2 * T;
	f->attn.causal = true;
	f->attn.n_seq = ns;
	f->attn.cu_seqlens_q = id + 4 * T;
	f->attn.cu_seqlens_q_h = ih + 4 * T;
	f->attn.context_lens = id + 5 * T + 1;
	f->attn.context_lens_h = ih + 5 * T + 1;
	f->attn.max_context_len = max_ctx;
	f->attn.block_tables = m->dec.bt_d;
	f->attn.max_blocks_per_seq = width;
	f->attn.block_size = m->dec.block_size;
	f->attn.n_blocks = (int64_t)m->dec.n_blocks + 1; /* the scratch block too */
}

/* Copy a finished step's outputs to the caller: ids / log-probs (STEP_ARGMAX, STEP_SAMPLE and
 * its top-N) or, for a graphed STEP_LOGITS step, the wanted rows of the pinned logits widened to
 * f32. */
static void step_out(rg_model *m, int n_logits, int mode, const rg_step_out *o, bool graphed)
{
	const size_t T = (size_t)m->max_tokens, V = (size_t)m->dec.cfg.vocab_size;

	if (mode >= STEP_SAMPLE) {
		const size_t C = rg_dec_sample_rows(m), tn = (size_t)o->top_n;

		memcpy(o->ids, m->dec.smp_out_h, (size_t)n_logits * 4);
		if (o->logprobs)
			memcpy(o->logprobs, m->dec.smp_out_h + C, (size_t)n_logits * 4);
		if (tn) {
			memcpy(o->top_ids, m->dec.smp_out_h + 2 * C, n_logits * tn * 4);
			memcpy(o->top_logprobs, m->dec.smp_out_h + (2 + RG_SAMPLE_MAX_TOP) * C,
			       n_logits * tn * 4);
		}
		return;
	}

	if (mode == STEP_ARGMAX) {
		memcpy(o->ids, m->dec.am_h, (size_t)n_logits * 4);
		if (o->logprobs)
			memcpy(o->logprobs, m->dec.am_h + T, (size_t)n_logits * 4);
		return;
	}
	if (!graphed)
		return;
	for (int r = 0; r < n_logits;) {
		const uint8_t *want = o->want_logits;
		const char *src = (const char *)m->dec.lg_h + (size_t)r * V * m->esz;
		float *dst = o->logits + (size_t)r * V;
		size_t n;
		int e;

		if (want && !want[r]) {
			r++;
			continue;
		}
		e = want_run_end(want, r, n_logits);
		n = (size_t)(e - r) * V;
		if (m->esz == 4) {
			memcpy(dst, src, n * 4);
		} else {
			memcpy((char *)dst + 2 * n, src, n * 2);
			rg_widen16_tail(dst, n, rg_backend_dtype(m->be));
		}
		r = e;
	}
}

/* One step: validate the batch and the descriptor, stage, run (a graph for an eligible
 * decode-only step on CUDA, else eagerly), then the outputs of the path. */
rg_status rg_model_step(rg_model *m, const rg_step_batch *b, const rg_step_out *o)
{
	const size_t T = m ? (size_t)m->max_tokens : 0;
	int max_ctx = 0, mb_used = 1, mode;
	float *logits;
	const uint8_t *want;
	rg_dec_fwd f;
	rg_status s;

	if ((s = need_decoder(m, "rg_model_step")) != RG_OK)
		return s;
	if ((s = step_validate(m, b, &max_ctx, &mb_used)) != RG_OK ||
	    (s = step_out_check(m, b, o)) != RG_OK)
		return s;
	if (b->n_logits > 0 && !m->dec.lm_head)
		return rg_errorf(RG_ERR_UNSUPPORTED,
				 "rg_model_step: %s has no LM head (an embedding checkpoint without "
				 "lm_head.weight): it embeds (rg_model_embed_decoder), it has no "
				 "logits", m->dir);
	mode = step_mode(b, o);
	logits = o && b->n_logits ? o->logits : NULL;
	want = logits ? o->want_logits : NULL;
	/* graphs take no logits out beside a choice (those steps run eagerly) */
	if (graph_eligible(m, b, mode) && !(mode != STEP_LOGITS && logits)) {
		const int B = graph_bucket(b->n_seq);
		const int max_mb = (m->dec.cfg.max_position_embeddings + m->dec.block_size - 1) /
				   m->dec.block_size;
		void *lg;
		int MB = 4;
		struct rg_dec_graph *g;

		while (MB < mb_used)
			MB *= 2;
		if (MB > max_mb && mb_used <= max_mb)
			MB = max_mb;
		if (mode == STEP_LOGITS && !m->dec.lg_h &&
		    (s = rg_backend_host_alloc(m->be, (size_t)RG_LOGITS_CHUNK *
							  m->dec.cfg.vocab_size * m->esz,
					       &m->dec.lg_h)) != RG_OK)
			return s;
		lg = mode == STEP_LOGITS ? m->dec.lg_h : NULL;
		int XB = 0; /* encoder-decoders: cross columns, a power of two >= 4 */

		if (m->info.kind == RG_MODEL_ENC_DEC) {
			const int max_xb = (m->dec.cfg.max_source_positions + m->dec.block_size -
					    1) / m->dec.block_size;
			int xw, xl;

			cross_width(m, b, &xw, &xl);
			for (XB = 4; XB < xw; XB *= 2)
				;
			if (XB > max_xb && xw <= max_xb)
				XB = max_xb;
		}
		if ((s = step_stage(m, b, mb_used, B, MB)) != RG_OK ||
		    (mode >= STEP_SAMPLE && (s = rg_dec_sample_stage(m, b->n_logits, B, o)) != RG_OK))
			return s;
		step_fwd(m, &f, B, B, MB, MB * m->dec.block_size);
		if (XB && (s = cross_stage(m, b, &f, B, XB)) != RG_OK)
			return s;
		g = graph_slot(m, B, MB, XB, mode); /* after staging, which may free the graphs */
		g->last_use = ++m->dec.graph_clock;
		if (!g->g && g->seen++ >= 1) { /* second sight: capture */
			rg_graph *gr = NULL;

			if ((s = rg_backend_capture_begin(m->be)) != RG_OK)
				return s;
			s = m->arch->decode(m, &f);
			if (s == RG_OK)
				s = step_tail(m, m->dec.ids_d + 3 * T, B, mode, NULL, NULL, lg);
			{
				rg_status s2 = rg_backend_capture_end(m->be, &gr);

				s = s != RG_OK ? s : s2;
			}
			if (s != RG_OK)
				return s;
			g->g = gr;
		}
		if (g->g) {
			if ((s = rg_backend_graph_launch(m->be, g->g)) != RG_OK ||
			    (s = rg_backend_sync(m->be)) != RG_OK)
				return s;
			m->dec.graph_steps++;
			step_out(m, b->n_logits, mode, o, true);
			return RG_OK;
		}
		/* first sight: eager, over the same padded staging */
		if ((s = m->arch->decode(m, &f)) != RG_OK ||
		    (s = step_tail(m, m->dec.ids_d + 3 * T, B, mode, NULL, NULL, lg)) != RG_OK ||
		    (s = rg_backend_sync(m->be)) != RG_OK)
			return s;
		step_out(m, b->n_logits, mode, o, true);
		return RG_OK;
	}
	if ((s = step_stage(m, b, mb_used, 0, 0)) != RG_OK ||
	    (mode >= STEP_SAMPLE &&
	     (s = rg_dec_sample_stage(m, b->n_logits, b->n_logits, o)) != RG_OK))
		return s;
	step_fwd(m, &f, b->n_tokens, b->n_seq, mb_used, max_ctx);
	if (m->info.kind == RG_MODEL_ENC_DEC && (s = cross_stage(m, b, &f, 0, 0)) != RG_OK)
		return s;
	if ((s = m->arch->decode(m, &f)) != RG_OK)
		return s;
	if (b->n_logits &&
	    (s = step_tail(m, m->dec.ids_d + 3 * T, b->n_logits, mode, logits, want, NULL)) != RG_OK)
		return s;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;
	step_out(m, b->n_logits, mode, o, false);
	return RG_OK;
}
