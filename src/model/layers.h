/* Shared layer builders of the decoder architectures (layers.c): the weight loaders and op
 * sequences that gpt2.c, llama.c, qwen3.c and phi3.c have in common, so that a new decoder family
 * is its hooks plus calls to these (llama.cpp's llm_graph_context::build_norm / build_attn /
 * build_ffn; llm.c's ten calls per layer).
 *
 * Loaders read Hugging Face names through a tensor source (tsrc.h: safetensors or GGUF), check
 * shapes, convert to the compute dtype and upload (backend memory owned by the architecture's
 * weights, freed with rg_backend_dealloc). Errors name the tensor. */
#ifndef RG_MODEL_LAYERS_H
#define RG_MODEL_LAYERS_H
#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* The token embedding table and the LM head (transformers' tie_weights / _tied_weights_keys as
 * transformers 5 loads them): embed (vocab, H) from embed_name under prefixes; the head from
 * head_name under head_prefixes when the file holds it -- whatever tie_word_embeddings says
 * (a checkpoint with tie true and a distinct lm_head.weight runs with the file's head, as
 * transformers 5 loads it; GGUF: output.weight present), shared with the embedding when tied and
 * absent, or when its values equal the embedding's bit for bit (no second copy). Untied and
 * absent: RG_ERR_FORMAT naming the head. Sets *embed_d (act, unprepared: the gather reads it),
 * *head_d (act, prepared for the GEMM, or NULL when shared), m->dec.lm_head, and
 * m->dec.cfg.tie_word_embeddings to whether the head is the embedding (what rg_model_info
 * reports). When m keeps quantized weights (issue 30) and the head's blocks -- the file's head,
 * or the embedding's when tied -- are of a type the backend reads, *head_d is those blocks
 * (rg_op_prepare_qweight) even when tied: the f32 table serves the gather, the blocks the head
 * GEMM (the step's largest read) -- except where gather_only (the caller reads the table with
 * rg_op_gather_rows alone) and the backend is the CPU, whose gather dequantizes rows of a
 * quantized weight itself: there a tied table is kept once, as the file's blocks, and *embed_d
 * is those blocks (head_d NULL), so the resident bytes are the file's (issue 30's memory
 * target; SmolLM2's Q4_1 file: 210 -> 97 MB). Under rg_model_params.quantize a float head
 * (the file's, or the table's when tied) is quantized to Q8_0 into *head_d and the table stays
 * in the compute dtype for the gather, on every backend (the head's blocks are never shared with
 * the gather there); tie_word_embeddings then reports false for a stored head equal to the
 * table. */
rg_status rg_layer_load_embed_head(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				   const char *embed_name, const char *const *head_prefixes,
				   const char *head_name, bool gather_only, void **embed_d,
				   void **head_d);

/* Rows of k tensors names[i] (d0[i], d1) stacked into one (sum d0, d1) weight (d1 < 0: 1-D
 * vectors of d0[i]), uploaded in the compute dtype; prepare: also rg_op_prepare_weight (a GEMM
 * weight). k = 1 loads one tensor. */
rg_status rg_layer_load_stacked(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
				const char *const names[], const int64_t d0[], int k, int64_t d1,
				bool prepare, void **dst);
/* One GEMM weight name (d0, d1), uploaded in the compute dtype and prepared. */
rg_status rg_layer_load_linear(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       const char *name, int64_t d0, int64_t d1, void **dst);
/* rg_model_params.quantize (issue 30 item 1): true when m quantizes a float GEMM weight of
 * (rows, k) to Q8_0 at load -- quantize Q8_0, k a multiple of 32, rows and k within int, and
 * a backend with Q8_0 GEMMs (rg_backend_qtype_supported). */
bool rg_layer_quantizes(const rg_model *m, int64_t rows, int64_t k);
/* w (rows, k) f32 row-major host memory (borrowed) quantized to Q8_0 (rg_gguf_quantize_q8_0:
 * rows * k / 32 blocks of 34 bytes, row after row) into a new backend buffer *dst (owned by the
 * caller's weights, freed with rg_backend_dealloc, also when set on an error), declared with
 * rg_op_prepare_qweight(RG_GGUF_Q8_0, rows, k) and counted by rg_model_count_weight. Callers
 * check rg_layer_quantizes first. Errors: RG_ERR_OOM (host or backend), the backend's. */
rg_status rg_layer_upload_q8_0(rg_model *m, const float *w, int64_t rows, int64_t k,
			       void **dst);
/* One vector name (n) as f32 (a norm's gamma / beta) or in the compute dtype (act: a bias). */
rg_status rg_layer_load_vec(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			    const char *name, int64_t n, bool act, void **dst);

/* ---- the Llama-shaped decoder block (RMSNorm, RoPE attention, SwiGLU): llama.c, qwen3.c,
 * phi3.c ---- */

/* One layer's attention weights. */
typedef struct rg_attn_w {
	void *qkv_w;   /* (qd + 2 kvd, H) act: rows [Wq; Wk; Wv], qd = heads * hd, kvd = kv_heads hd */
	void *qkv_b;   /* (qd + 2 kvd) act, or NULL (Qwen2, attention_bias) */
	float *q_norm; /* (hd) f32, or NULL: per-head RMSNorm of q before RoPE (Qwen3) */
	float *k_norm; /* (hd) f32, or NULL: the same for k */
	void *o_w;     /* (H, qd) act */
} rg_attn_w;

/* One layer's SwiGLU MLP. */
typedef struct rg_swiglu_w {
	void *gate_up_w; /* (2 I, H) act: rows [Wgate; Wup] */
	void *down_w;    /* (H, I) act */
} rg_swiglu_w;

/* The model's RoPE frequencies (backend memory, f32). */
typedef struct rg_rope_w {
	float *inv_freq;      /* (hd / 2) */
	float *inv_freq_long; /* (hd / 2) from position long_from on, or NULL (LongRoPE only) */
	int32_t long_from;
	float mscale;         /* cos / sin scale (LongRoPE's attention factor; 1 elsewhere) */
} rg_rope_w;

/* Options of rg_layer_llama_hparams for families that read some keys themselves. */
typedef struct rg_llama_hp_opts {
	bool own_rope_scaling;   /* the family reads rope_scaling (Phi-3's LongRoPE) */
	bool own_sliding_window; /* the family reads sliding_window (Phi-3) */
	bool qkv_bias;           /* q/k/v biases whatever attention_bias says (Qwen2) */
} rg_llama_hp_opts;

/* The hyper-parameters of a Llama-shaped decoder (LlamaConfig's keys and defaults, and
 * llama.cpp's <arch>.* metadata) into m->dec.cfg: sizes, GQA, head_dim (explicit or
 * hidden / heads), rms_norm_eps, rope_theta, rope_scaling default / llama3 (transformers 5's
 * rope_parameters too), tie_word_embeddings, attention_bias, bos / eos. Refuses by name what the
 * block does not compute: mixtures of experts, sliding windows (Qwen2 / Qwen3: only with
 * use_sliding_window), mlp_bias, partial_rotary_factor != 1, activations other than silu, other
 * RoPE scalings; GGUF: expert_count, rope.dimension_count != head_dim, rope.scaling.type other
 * than none, rope_freqs.weight. */
rg_status rg_layer_llama_hparams(rg_model *m, const rg_cfg_src *cf, const rg_llama_hp_opts *o);

/* inv_freq[i] = theta^(-2i / hd) (transformers' _compute_default_rope_parameters) and Llama-3's
 * frequency-dependent scaling (_compute_llama3_parameters) when c->rope_llama3, in double,
 * into a malloc'd (hd / 2) f32 array (NULL: out of memory). */
float *rg_layer_rope_inv_freq(const rg_decoder_config *c);

/* Layer l's attention weights by Hugging Face names: self_attn.{q,k,v}_proj (stacked), o_proj,
 * their biases when c->attention_bias, and self_attn.{q,k}_norm when qk_norm. */
rg_status rg_layer_load_attn(rg_model *m, const rg_tsrc *src, const char *const *prefixes, int l,
			     bool qk_norm, rg_attn_w *a);
/* Layer l's mlp.{gate,up,down}_proj. */
rg_status rg_layer_load_swiglu(rg_model *m, const rg_tsrc *src, const char *const *prefixes,
			       int l, rg_swiglu_w *w);
void rg_layer_free_attn(rg_model *m, rg_attn_w *a);
void rg_layer_free_swiglu(rg_model *m, rg_swiglu_w *w);
void rg_layer_free_rope(rg_model *m, rg_rope_w *r);

/* The step's cos / sin table into m->dec.a[RG_D_ROPE] (rg_op_rope_table, or
 * rg_op_rope_table_scaled for LongRoPE), once before the first layer. */
rg_status rg_layer_rope_table(rg_model *m, const rg_dec_fwd *f, const rg_rope_w *r);
/* Self-attention of layer l on x (n, H) act (the normed residual): qkv = x Wqkv^T (+ b) into
 * m->dec.a[RG_D_QKV]; per-head RMSNorm of q and k when a->q_norm (eps); RoPE from the step's
 * table and the KV write (one op); causal paged attention (1 / sqrt(hd)) into RG_D_CTX; out
 * (n, H) act = ctx Wo^T. */
rg_status rg_layer_attn_rope(rg_model *m, rg_dec_fwd *f, int l, const rg_attn_w *a,
			     const void *x, float eps, void *out);
/* The SwiGLU MLP (transformers' LlamaMLP): out (n, H) act = (silu(x Wg^T) * (x Wu^T)) Wd^T
 * through m->dec.a[RG_D_INTER] and RG_D_MLP. */
rg_status rg_layer_ffn_swiglu(rg_model *m, int n, const rg_swiglu_w *w, const void *x,
			      void *out);

/* ---- the encoder-decoders' residual stream (bart.c, t5.c) ----
 * Post-LN (Marian, BART): a sublayer's norm is y = LN(r + delta), then r and y swap. Pre-LN
 * (mBART, M2M100, T5): r += pend and y = norm(r) as the next sublayer's input (one fused
 * rg_op_add_norm, vLLM's fused_add_rms_norm pattern); the stack's final norm into y. */
typedef struct rg_s2s_rs {
	void *r, *y;       /* (T, H) act: the residual and the other arena buffer */
	const void *pend;  /* pre-LN: the last sublayer's output (n, H) act not yet added, or NULL */
	bool pre;          /* pre-LN blocks */
	rg_norm_kind norm; /* RG_NORM_LAYER (BART family, eps and beta) or RG_NORM_RMS (T5) */
} rg_s2s_rs;

/* A sublayer's input *x over n rows: pre-LN, norm(r + pend) (gamma g, beta b or NULL) into y;
 * post-LN, r. eps: m->dec.cfg.norm_eps. */
rg_status rg_s2s_sub_in(rg_model *m, int n, rg_s2s_rs *rs, const float *g, const float *b,
			const void **x);
/* A sublayer's output delta (n, H) act: pre-LN, pending for the next norm; post-LN, r =
 * LN(r + delta) (g, b: the sublayer's norm). */
rg_status rg_s2s_sub_out(rg_model *m, int n, rg_s2s_rs *rs, const void *delta, const float *g,
			 const float *b);
/* The stack's output *out: pre-LN, its final norm (g, b) of r + pend into y; post-LN, r. */
rg_status rg_s2s_stack_out(rg_model *m, int n, rg_s2s_rs *rs, const float *g, const float *b,
			   void **out);
/* One decoder layer's cross K / V of the encoder output enc (n, H) act: [K | V] = enc W^T + b
 * (W (2 kvd, H) act, b (2 kvd) act or NULL) into m->dec.a[RG_D_QKV], then written to layer l's
 * cache at slots (n) (rg_dec_cross_write). */
rg_status rg_s2s_cross_kv(rg_model *m, const void *enc, int n, int l, const void *w,
			  const void *b, const int32_t *slots);

/* ---- the Llama-shaped model (llama.c), whose hooks Qwen3 and Phi-3 reuse ---- */
typedef struct rg_llama_layer {
	float *in_norm;      /* (H) f32 */
	rg_attn_w attn;
	float *post_norm;    /* (H) f32 */
	rg_swiglu_w mlp;
} rg_llama_layer;

typedef struct rg_llama_weights {
	void *embed;             /* (vocab, H) act */
	void *lm_head;           /* (vocab, H) act; NULL when the embedding serves */
	float *norm;             /* (H) f32 */
	rg_rope_w rope;
	rg_llama_layer *layers;  /* (num_hidden_layers) */
} rg_llama_weights;

/* The part every Llama-family loader shares: m->weights = a new rg_llama_weights (*out, its
 * layers allocated, unfilled), the token embedding, the LM head (the file's lm_head.weight when
 * it has one, else the tied embedding: rg_layer_load_embed_head) and the final norm, by Hugging
 * Face names (model. prefix optional). Errors name the tensor; RG_ERR_OOM. On error what was
 * loaded stays on m->weights for the arch's free_weights. */
rg_status rg_llama_load_top(rg_model *m, const rg_tsrc *src, rg_llama_weights **out);
/* llama.c's weights by Hugging Face Llama names into m->weights (rg_llama_weights), with
 * self_attn.{q,k}_norm when qk_norm (Qwen3); RoPE from rg_layer_rope_inv_freq. */
rg_status rg_llama_load(rg_model *m, const rg_tsrc *src, bool qk_norm);
/* The forward of an rg_llama_weights model (rg_arch.decode). */
rg_status rg_llama_forward(rg_model *m, rg_dec_fwd *f);
/* Free an rg_llama_weights model (rg_arch.free_weights). */
void rg_llama_free(rg_model *m);
/* llama.cpp's Llama / Qwen2 / Qwen3 tensor names: with q/k rows permuted (GGUF "llama") and
 * unpermuted (NEOX RoPE: "qwen2", "qwen3"). */
extern const rg_tensor_names rg_llama_gguf_names, rg_llama_gguf_names_neox;
#endif
