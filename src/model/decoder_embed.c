/* Embeddings from a decoder (issue 31: Qwen3-Embedding, gte-Qwen2, e5-mistral, as TEI and
 * sentence-transformers serve them): one packed, padding-free prefill of every sequence of the
 * batch through the architecture's own forward (m->arch->decode, the forward rg_model_step runs:
 * no second implementation), then each sequence's final-norm states pooled on the device.
 *
 * The forward writes each layer's keys and values into a paged cache and attends through block
 * tables (decoder.c). A batch of fresh sequences needs no cache beyond the layer being computed:
 * while m->dec.emb_on, every layer's pools are one pair (emb_kv_d, decoder.c's layer_k), which
 * layer l writes and reads before layer l + 1 overwrites it (the ops run in order on one stream).
 * So the pass keeps nothing afterwards, and its memory is 1 / num_layers of a cache for the same
 * tokens: (2, slots, kv_heads, head_dim) in the compute dtype.
 *
 * Layout of one pass: sequence i takes whole blocks of B positions from block first_i on
 * (first_i = sum over j < i of ceil(len_j / B)), its table row first_i, first_i + 1, ...; token
 * j of it sits at position j, slot first_i * B + j, context len_i, so the paged kernel's causal
 * mask is exactly "token j sees tokens 0..j of its own sequence". B is 16 unless the padding of
 * the last blocks would not fit 2 max_batch_tokens slots (many short sequences): then 8, 4, 2
 * or 1 (1 always fits). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "ops/ops.h"

void rg_dec_embed_free(rg_model *m)
{
	if (!m->be)
		return;
	rg_backend_dealloc(m->be, m->dec.emb_kv_d);
	rg_backend_dealloc(m->be, m->dec.emb_pool_d);
	rg_backend_dealloc(m->be, m->dec.emb_cu_d);
	m->dec.emb_kv_d = NULL;
	m->dec.emb_pool_d = NULL;
	m->dec.emb_cu_d = NULL;
	m->dec.emb_slots = 0;
}

/* Slots n_seq sequences of lengths cu take in blocks of B positions. */
static int64_t slots_needed(const int32_t *cu, int n_seq, int B)
{
	int64_t need = 0;

	for (int i = 0; i < n_seq; i++)
		need += (int64_t)(cu[i + 1] - cu[i] + B - 1) / B * B;
	return need;
}

/* The pass's buffers for `need` slots: the KV pools grown (rounded up to 4096 slots, at most
 * cap), the chunk buffers at the first call. */
static rg_status emb_alloc(rg_model *m, int64_t need, int64_t cap)
{
	const rg_decoder_config *c = &m->dec.cfg;
	const size_t row = (size_t)c->num_key_value_heads * c->head_dim * m->esz;
	rg_status s;

	if (!m->dec.emb_pool_d) {
		int32_t ident[RG_LOGITS_CHUNK + 1];

		for (int i = 0; i <= RG_LOGITS_CHUNK; i++)
			ident[i] = i;
		if ((s = rg_backend_alloc(m->be, (size_t)RG_LOGITS_CHUNK * c->hidden_size * 4,
					  (void **)&m->dec.emb_pool_d)) != RG_OK ||
		    (s = rg_backend_alloc(m->be, sizeof(ident), (void **)&m->dec.emb_cu_d)) != RG_OK ||
		    (s = rg_backend_upload(m->be, m->dec.emb_cu_d, ident, sizeof(ident))) != RG_OK)
			return rg_error_wrap(s, "embedding pass buffers");
	}
	if (need <= m->dec.emb_slots)
		return RG_OK;
	need = (need + 4095) / 4096 * 4096;
	need = need < cap ? need : cap;
	if ((s = rg_backend_sync(m->be)) != RG_OK)
		return s;
	rg_backend_dealloc(m->be, m->dec.emb_kv_d);
	m->dec.emb_kv_d = NULL;
	m->dec.emb_slots = 0;
	if ((s = rg_backend_alloc(m->be, 2 * (size_t)need * row, &m->dec.emb_kv_d)) != RG_OK)
		return rg_error_wrap(s, "embedding pass KV pools of %lld positions (%zu bytes)",
				     (long long)need, 2 * (size_t)need * row);
	m->dec.emb_slots = need;
	return RG_OK;
}

static rg_status validate(const rg_model *m, const int32_t *tokens, const int32_t *cu, int n_seq,
			  int *n_tokens, int *max_len)
{
	const int V = m->dec.cfg.vocab_size, L = m->info.max_seq_len;

	if (!tokens || !cu || n_seq < 1)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "decoder embedding: tokens and cu_seqlens must be set and n_seq "
				 ">= 1 (got %d)", n_seq);
	if (cu[0] != 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "cu_seqlens[0] = %d, must be 0", cu[0]);
	*max_len = 0;
	for (int i = 0; i < n_seq; i++) {
		const int64_t len = (int64_t)cu[i + 1] - cu[i];

		if (len < 1)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "sequence %d is empty or cu_seqlens decreases (%d -> %d)", i,
					 cu[i], cu[i + 1]);
		if (len > L)
			return rg_errorf(RG_ERR_TOO_LONG, "sequence %d has %lld tokens, over "
					 "max_seq_len %d", i, (long long)len, L);
		if ((int64_t)cu[i + 1] > m->max_tokens)
			return rg_errorf(RG_ERR_TOO_LONG, "the batch's tokens are over "
					 "max_batch_tokens %d", m->max_tokens);
		*max_len = (int)len > *max_len ? (int)len : *max_len;
	}
	*n_tokens = cu[n_seq];
	for (int t = 0; t < *n_tokens; t++)
		if (tokens[t] < 0 || tokens[t] >= V)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "token %d is id %d, outside the vocabulary [0, %d)", t,
					 tokens[t], V);
	return RG_OK;
}

/* Stage the pass (ids_h -> ids_d as rg_model_step stages a step: tokens | positions | slots |
 * last rows | cu_seqlens_q | context_lens, and the block tables) and point f at it. */
static rg_status stage(rg_model *m, const int32_t *tokens, const int32_t *cu, int n_seq, int n,
		       int max_len, int B, rg_dec_fwd *f)
{
	const size_t T = (size_t)m->max_tokens;
	const int width = (max_len + B - 1) / B;
	int32_t *ih = m->dec.ids_h, *id = m->dec.ids_d, first = 0;
	rg_status s;

	if ((s = rg_dec_bt_reserve(m, (size_t)n_seq * width)) != RG_OK)
		return s;
	memcpy(ih, tokens, (size_t)n * 4);
	memcpy(ih + 4 * T, cu, (size_t)(n_seq + 1) * 4);
	for (int i = 0; i < n_seq; i++) {
		const int len = cu[i + 1] - cu[i], nb = (len + B - 1) / B;
		int32_t *row = m->dec.bt_h + (size_t)i * width;

		for (int j = 0; j < len; j++) {
			ih[T + cu[i] + j] = j;
			ih[2 * T + cu[i] + j] = first * B + j;
		}
		ih[3 * T + i] = cu[i + 1] - 1;
		ih[5 * T + 1 + i] = len;
		for (int k = 0; k < width; k++)
			row[k] = k < nb ? first + k : 0; /* past nb: never read */
		first += nb;
	}
	{
		const size_t off[] = {0, T, 2 * T, 3 * T, 4 * T, 5 * T + 1};
		const size_t cnt[] = {(size_t)n, (size_t)n, (size_t)n, (size_t)n_seq,
				      (size_t)n_seq + 1, (size_t)n_seq};

		for (int i = 0; i < 6; i++)
			if ((s = rg_backend_upload_async(m->be, id + off[i], ih + off[i],
							 cnt[i] * 4)) != RG_OK)
				return s;
	}
	if ((s = rg_backend_upload_async(m->be, m->dec.bt_d, m->dec.bt_h,
					 (size_t)n_seq * width * 4)) != RG_OK)
		return s;
	memset(f, 0, sizeof(*f));
	f->n = n;
	f->tokens = id;
	f->positions = id + T;
	f->slots = id + 2 * T;
	f->attn.causal = true;
	f->attn.n_seq = n_seq;
	f->attn.cu_seqlens_q = id + 4 * T;
	f->attn.cu_seqlens_q_h = ih + 4 * T;
	f->attn.max_seqlen_q = max_len;
	f->attn.context_lens = id + 5 * T + 1;
	f->attn.context_lens_h = ih + 5 * T + 1;
	f->attn.max_context_len = max_len;
	f->attn.block_tables = m->dec.bt_d;
	f->attn.max_blocks_per_seq = width;
	f->attn.block_size = B;
	f->attn.n_blocks = m->dec.emb_slots / B;
	return RG_OK;
}

/* Pool the final-norm rows of the staged pass into out (n_seq, H) f32 host, RG_LOGITS_CHUNK
 * sequences at a time: LAST gathers each sequence's last row (staged at ids_d + 3T) and takes
 * it as a one-row sequence; the other modes are rg_op_pool over the batch's cu_seqlens. */
static rg_status pool_rows(rg_model *m, int n_seq, rg_pooling pool, float *out)
{
	const size_t T = (size_t)m->max_tokens;
	const int H = m->dec.cfg.hidden_size;
	void *x = m->dec.a[RG_D_NORMED];
	rg_status s;

	for (int r0 = 0; r0 < n_seq; r0 += RG_LOGITS_CHUNK) {
		const int nc = n_seq - r0 < RG_LOGITS_CHUNK ? n_seq - r0 : RG_LOGITS_CHUNK;

		if (pool == RG_POOL_LAST) {
			if ((s = rg_op_gather_rows(m->be, x, m->dec.ids_d + 3 * T + r0, nc, H,
						   m->dec.a[RG_D_ROWS])) != RG_OK ||
			    (s = rg_op_pool(m->be, m->dec.a[RG_D_ROWS], m->dec.emb_cu_d, nc, H,
					    RG_POOL_CLS, false, m->dec.emb_pool_d)) != RG_OK)
				return s;
		} else if ((s = rg_op_pool(m->be, x, m->dec.ids_d + 4 * T + r0, nc, H, pool, false,
					   m->dec.emb_pool_d)) != RG_OK) {
			return s;
		}
		if ((s = rg_backend_download(m->be, out + (size_t)r0 * H, m->dec.emb_pool_d,
					     (size_t)nc * H * 4)) != RG_OK)
			return s;
	}
	return RG_OK;
}

rg_status rg_dec_embed(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens, int n_seq,
		       rg_pooling pool, float *out, float *hidden_out)
{
	const int64_t cap = 2 * (int64_t)m->max_tokens;
	int n = 0, max_len = 0, B = 16;
	rg_dec_fwd f;
	rg_status s;

	if (m->info.kind != RG_MODEL_DECODER)
		return rg_errorf(RG_ERR_UNSUPPORTED, "%s (%s): embeddings need a decoder-only model",
				 m->dir, m->info.model_type);
	if (pool != RG_POOL_MEAN && pool != RG_POOL_CLS && pool != RG_POOL_MAX &&
	    pool != RG_POOL_LAST)
		return rg_errorf(RG_ERR_INVALID_INPUT, "pooling %d is not an rg_pooling", (int)pool);
	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "decoder embedding: out is NULL");
	if ((s = validate(m, tokens, cu_seqlens, n_seq, &n, &max_len)) != RG_OK)
		return s;
	while (B > 1 && slots_needed(cu_seqlens, n_seq, B) > cap)
		B /= 2;
	if ((s = emb_alloc(m, slots_needed(cu_seqlens, n_seq, B), cap)) != RG_OK ||
	    (s = stage(m, tokens, cu_seqlens, n_seq, n, max_len, B, &f)) != RG_OK)
		return s;
	m->dec.emb_on = true;
	s = m->arch->decode(m, &f);
	m->dec.emb_on = false;
	if (s != RG_OK)
		return rg_error_wrap(s, "decoder embedding pass of %d sequences, %d tokens", n_seq,
				     n);
	if ((s = pool_rows(m, n_seq, pool, out)) != RG_OK)
		return s;
	if (hidden_out) {
		const size_t cnt = (size_t)n * m->dec.cfg.hidden_size;
		const void *x = m->dec.a[RG_D_NORMED];

		if (m->esz == 4) {
			s = rg_backend_download(m->be, hidden_out, x, cnt * 4);
		} else if ((s = rg_backend_download(m->be, (char *)hidden_out + 2 * cnt, x,
						    cnt * 2)) == RG_OK) {
			rg_widen16_tail(hidden_out, cnt, rg_backend_dtype(m->be));
		}
		if (s != RG_OK)
			return s;
	}
	return rg_backend_sync(m->be);
}
