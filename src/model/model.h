/* Internal interface between the model runtime (model.c: the public rg_model_* API, the
 * encoders' arena, execution paths, pooling; decoder.c: the decoders' step runner and paged KV
 * cache; decoder_embed.c: a decoder's embedding pass) and the architectures (bert.c, gpt2.c, llama.c; registered in arch.c): the model struct,
 * the arena tensors, one forward's pointers, and the hooks an architecture provides (rg_arch),
 * as llama.cpp's per-model files provide theirs. */
#ifndef RG_MODEL_MODEL_H
#define RG_MODEL_MODEL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/mem_plan.h"
#include "core/safetensors.h"
#include "model/bucket.h"
#include "model/config.h"
#include "model/tsrc.h"
#include "ops/ops.h"
#include "ragged.h"
#include "tokenizer/tokenizer.h"

/* Tensors of the activation arena, planned together (rg_arena_plan). */
enum {
	RG_A_HIDDEN,   /* (T, H) act: the residual stream */
	RG_A_QKV,      /* (T, 3H) act */
	RG_A_CTX,      /* (T, H) act: attention output */
	RG_A_ATTN_OUT, /* (T, H) act: output projection before LN1 */
	RG_A_INTER,    /* (T, I) act */
	RG_A_FFN_OUT,  /* (T, H) act: FFN down projection before LN2 */
	RG_A_GATHERED, /* (T, H) act: layout modes, rows back in packed order */
	RG_A_POOLED,   /* (S, H) f32 */
	RG_A_C2P,      /* (T, heads, 2 att_span) act: DeBERTa's c2p table; 0 bytes elsewhere */
	RG_A_P2C,      /* (T, heads, 2 att_span) act: DeBERTa's p2c table; 0 bytes elsewhere */
	RG_ARENA_N
};

/* graphs kept per model besides those of rg_model_graph_warmup (kept for the model's life): a
 * server's steady stream of 4k-16k-token batches spreads over ~50 token buckets x 2-3 sequence
 * buckets; 48 slots thrashed there (178 captures in a 10 s step on an H200, p99 225 ms:
 * bench/results/short_requests_h200_20261126-0254.md). A graph is a few KB of host and device
 * state: the arena is shared. */
#define RG_GRAPH_CACHE 192
#define RG_GRAPH_SEEN 64      /* buckets seen once and not captured, remembered (FIFO) */
#define RG_GRAPH_MAX_SEQ 1024 /* larger batches run eagerly (pinned output rows) */

/* One captured bucket. */
typedef struct rg_bucket_graph {
	int T, S, L;             /* bucket: tokens, sequences, longest sequence */
	rg_graph *g;             /* NULL: slot free */
	bool pinned;             /* captured by rg_model_graph_warmup: never evicted */
	unsigned long long last_use;
} rg_bucket_graph;


/* A sequence classifier's head, on the host in float32: out = W2 act(W1 x + b1) + b2 of the
 * first token's last hidden state x. */
typedef struct rg_cls_head {
	float *w1, *b1;          /* (H, H), (H): BERT pooler.dense / RoBERTa classifier.dense /
				  * DistilBERT pre_classifier */
	enum { RG_HEAD_TANH, RG_HEAD_RELU, RG_HEAD_GELU } act; /* tanh (BERT, RoBERTa), ReLU
				  * (DistilBERT), exact GELU (DeBERTa's ContextPooler) */
	float *w2, *b2;          /* (num_labels, H), (num_labels) */
} rg_cls_head;

/* out (n, num_labels) = W2 act(W1 x + b1) + b2 for x (n, H), all f32 host; mid: (n, H) scratch.
 * Two single-threaded sgemm calls (src/model/head.c). */
/* out (n, N) = x (n, K) W^T + b, W (N, K), b (N) or NULL, all f32 host: one sgemm
 * (src/model/head.c). */
void rg_host_linear(const float *x, int n, int K, const float *W, const float *b, int N,
		    float *out);
void rg_cls_head_apply(const rg_cls_head *h, int H, int num_labels, int n, const float *x,
		       float *mid, float *out);

/* Decoder state (decoder.c): the step's arena, staging and the paged KV cache. */
enum {
	RG_D_HIDDEN, /* (T, H) act: the residual stream */
	RG_D_NORMED, /* (T, H) act: norm(residual), the input of a projection / the LM head
		      * (lifetimes and sharing: decoder.c, alloc_step_arena) */
	RG_D_QKV,    /* (T, qd + 2 kvd) act: [Q | K | V], qd = heads * hd, kvd = kv_heads * hd */
	RG_D_CTX,    /* (T, qd) act: attention output */
	RG_D_DELTA,  /* (T, H) act: a branch's output, added to the residual by the next norm */
	RG_D_INTER,  /* (T, 2 I) act: FFN up (Llama: [gate | up]) */
	RG_D_MLP,    /* (T, I) act: silu(gate) * up */
	RG_D_ROWS,   /* (RG_LOGITS_CHUNK, H) act: normed rows whose logits are wanted */
	RG_D_LOGITS, /* (RG_LOGITS_CHUNK, vocab) act */
	RG_D_ROPE,   /* (T, head_dim) f32: the step's RoPE table, cos | sin per token
		      * (rg_op_rope_table); 0 bytes for a model without RoPE (rope_theta 0) */
	RG_DEC_N
};
#define RG_LOGITS_CHUNK 64 /* logits rows per LM head GEMM */
#define RG_DEC_GRAPHS 32   /* decode-step graphs kept per model */
#define RG_GRAPH_MAX_ROWS 256 /* the largest graphed decode step (sequences, padded) */

typedef struct rg_dec_state {
	rg_decoder_config cfg;
	void *lm_head;          /* (vocab, H) act, the architecture's (may be its embedding table) */
	void *lm_bias;          /* (vocab) act added to the logits (BART / Marian final_logits_bias),
				 * the architecture's, or NULL */
	int32_t *enc_d, *enc_h; /* encoder-decoders: encoder pass staging (4 T + 2) int32: tokens,
				 * positions, slots (T each), cu_seqlens (T + 1) */
	int32_t *x_d, *x_h;     /* encoder-decoders: the step's cross descriptor arrays (x_cap) */
	size_t x_cap;
	void *arena_d;          /* the step arena (arena_bytes), planned for max_tokens rows */
	size_t arena_bytes;
	void *a[RG_DEC_N];      /* the tensors at their planned offsets in arena_d */
	int32_t *ids_d;         /* staging in backend memory, (6 T + 2) int32: tokens (T),
				 * positions (T), slots (T), logits rows (T), cu_seqlens_q (T + 1),
				 * context_lens (T + 1) */
	int32_t *ids_h;         /* pinned twin of ids_d */
	int32_t *bt_d, *bt_h;   /* block tables (grown to the largest step seen) */
	size_t bt_cap;          /* int32 entries of bt_d / bt_h */
	/* the paged KV cache: for layer l, K at kv_d + (2 l) * layer_bytes and V at
	 * kv_d + (2 l + 1) * layer_bytes, each (n_blocks, block_size, kv_heads, head_dim) act */
	void *kv_d;
	int block_size;
	int n_blocks;
	size_t layer_bytes;
	uint8_t *slot_seen;     /* (n_blocks * block_size / 8) bitmap: one writer per slot */
	int32_t *am_d;          /* (2 T) greedy outputs: ids (T) int32, then their log-probs (T) f32 */
	int32_t *am_h;          /* pinned twin of am_d */
	void *lg_h;             /* pinned (RG_LOGITS_CHUNK, vocab) act: a graphed step's logits */
	/* the sampler path's buffers (allocated at its first step; _h pinned twins) */
	rg_sample_row *smp_rows_d, *smp_rows_h; /* (T) per-row parameters */
	int32_t *smp_off_d, *smp_off_h;         /* (2 (T + 1)): penalty, then bias CSR offsets */
	rg_sample_pen *smp_pen_d, *smp_pen_h;   /* (smp_pen_cap) */
	rg_sample_bias *smp_bias_d, *smp_bias_h; /* (smp_bias_cap) */
	size_t smp_pen_cap, smp_bias_cap;
	int32_t *smp_out_d, *smp_out_h;         /* (T (2 + 2 RG_SAMPLE_MAX_TOP)): ids (T), log-probs
						 * (T) f32, top ids (T, 20), top log-probs (T, 20) */
	void *smp_work_d;                       /* rg_sample_work_bytes(RG_LOGITS_CHUNK, vocab) */
	/* CUDA graphs of decode-only steps (one new token per sequence, every row's logits), keyed
	 * by the padded sequence count B, the block-table width MB and the output (logits / ids);
	 * LRU; a key is captured the second time it is seen (its first run is eager) */
	struct rg_dec_graph {
		int B, MB, XB, mode, seen; /* XB: cross columns (encoder-decoders), else 0 */
		rg_graph *g;
		unsigned long long last_use;
	} graphs[RG_DEC_GRAPHS];
	unsigned long long graph_clock;
	bool use_graphs;        /* backend has graphs and RAGGED_CUDA_GRAPHS != 0 */
	long long graph_steps;  /* steps run through a graph (tests and benchmarks read it) */
	/* embeddings (decoder_embed.c, issue 31). embeds: the directory has sentence-transformers
	 * pooling files (modules.json / 1_Pooling), so rg_model_run embeds (rg_model_info.pooling,
	 * normalize, output_dim = hidden_size). The pass's KV pools: one layer's K and V, which
	 * every layer writes and then reads in turn (layer_k in decoder.c while emb_on), grown to
	 * the largest batch seen (at most 2 max_batch_tokens slots), freed with the model. */
	bool embeds;
	bool emb_on;            /* an embedding pass is in flight: the forward uses emb_kv_d */
	void *emb_kv_d;         /* (2, emb_slots, kv_heads, head_dim) act: K pool, then V pool */
	int64_t emb_slots;
	float *emb_pool_d;      /* (RG_LOGITS_CHUNK, H) f32: one chunk's pooled rows */
	int32_t *emb_cu_d;      /* (RG_LOGITS_CHUNK + 1) int32: 0, 1, ...: one row per sequence */
} rg_dec_state;

/* One step's pointers for an architecture's forward (backend memory unless _h). */
typedef struct rg_dec_fwd {
	int n;                           /* new tokens */
	const int32_t *tokens, *positions, *slots; /* (n) */
	rg_attn_desc attn;               /* the step's attention descriptor; causal, paged; scale
					  * and heads filled per layer by rg_dec_attention */
	/* encoder-decoders: cross-attention over each sequence's source keys, one pseudo-sequence
	 * per query row (its sequence's cross table, context = its source length, the query at
	 * the last position): the causal paged kernel then sees every source key of a row, for any
	 * number of new rows per sequence, with no kernel of its own (rg_dec_cross_attend) */
	bool has_cross;
	rg_attn_desc cross;
} rg_dec_fwd;

/* An encoder-decoder's encoder pass (rg_model_encode_cross) over n packed source tokens
 * (backend memory unless _h). */
typedef struct rg_enc_fwd {
	int n, n_seq, max_len;
	const int32_t *tokens, *positions;   /* (n); positions 0.. within each source (not
					      * advanced by cfg.enc_pos_skip_token) */
	const int32_t *cu, *cu_h;            /* (n_seq + 1) */
	const int32_t *slots;                /* (n) cross K / V slots of the cache */
} rg_enc_fwd;

struct rg_model {
	rg_model_info info;
	char *dir;               /* resolved model directory */
	char *act_name;          /* hidden_act as text */
	rg_encoder_config cfg;
	rg_head_config head_cfg;  /* classifier or not, labels */
	rg_cls_head head;         /* classifiers only */
	float *head_in;           /* (max_tokens, H) f32 host: pooled first tokens (classifiers) */
	float *head_mid;          /* (max_tokens, H) f32 host: after the dense layer */
	/* sentence-transformers Dense modules after pooling, on the host in f32 (embeddings) */
	int n_dense;
	rg_dense_config dense_cfg[RG_MAX_DENSE];
	float *dense_w[RG_MAX_DENSE];  /* (out_features, in_features) as nn.Linear keeps it */
	float *dense_b[RG_MAX_DENSE];  /* (out_features), NULL without bias */
	float *dense_buf[2];      /* (max_tokens, widest) f32 host: pooled rows, then between
				   * modules */
	rg_tokenizer *tok;
	rg_backend *be;
	size_t esz;              /* bytes per act element */

	/* the architecture's weights, owned by it (arch->free_weights) */
	const struct rg_arch *arch;
	void *weights;

	/* activation arena, T = max_batch_tokens rows: one backend buffer, tensors at planned offsets */
	int max_tokens;
	void *arena_d;           /* arena_bytes */
	size_t arena_bytes;      /* rg_mem_plan for T tokens and T sequences */
	size_t arena_naive;      /* one buffer per tensor (the layout before the planner) */
	rg_mem_tensor plan_max[RG_ARENA_N]; /* offsets for T: valid for any smaller batch too */
	int32_t *ids_d;          /* (3T+1) int32: [tokens (n)][positions (n)][cu (s+1)] of a batch */
	int32_t *ids_h;          /* (3T+1) pinned staging of ids_d */
	float *out_h;            /* (RG_GRAPH_MAX_SEQ, H) pinned f32: pooled rows */
	int32_t *seg_d;          /* (T) segment ids for masked layouts */
	int32_t *idx_d;          /* (T) packed token -> row-major slot for the gather */
	int32_t *cu_pool_d;      /* (T+1) requests (layout modes) */
	/* host staging of the layout modes' index buffers */
	int32_t *tokens_h, *positions_h, *seg_h, *idx_h, *cu_attn_h; /* (T), cu: (T+1) */
	/* CUDA graphs per bucket (model/bucket.h): the warm-up's pinned, then up to
	 * RG_GRAPH_CACHE more, least recently used first out */
	bool graphs;             /* backend has graphs and RAGGED_CUDA_GRAPHS != 0 */
	rg_bucket_policy bucket; /* how batches round to buckets (the warm-up sets an envelope) */
	rg_bucket_graph *graph_cache; /* (graph_cap) */
	int graph_cap;           /* RG_GRAPH_CACHE + graph_pinned */
	int graph_pinned;        /* graphs captured by rg_model_graph_warmup */
	long long graph_replays; /* packed batches answered by a graph replay */
	long long graph_eager;   /* packed batches of the graph path run eagerly (no graph yet) */
	int graph_seen[RG_GRAPH_SEEN][3]; /* (T, S, L) of buckets run once, eagerly; T 0: empty */
	int graph_seen_next;              /* the FIFO's next slot */
	unsigned long long graph_clock;
	long long graph_captures; /* graphs captured so far (tests read it through the env report) */
	rg_dec_state dec;         /* decoders only */
	bool keep_quant;          /* rg_model_params.weights AUTO: GEMM weights the backend reads
				   * in their GGUF blocks stay so (layers.c) */
	rg_quantize quantize;     /* rg_model_params.quantize for a decoder-only model (NONE
				   * elsewhere): float GEMM weights quantized at load (layers.c) */
	char *chat_template;      /* decoders: GGUF tokenizer.chat_template or
				   * tokenizer_config.json's, NULL when none */
	char *chat_bos, *chat_eos; /* decoders: tokenizer_config.json's bos_token / eos_token (a
				   * string or an AddedToken's content), NULL when absent */
	int32_t gen_eos[8];       /* decoders: the ids rg_generate stops at by default (config.json /
				   * generation_config.json eos_token_id, an id or a list; GGUF's) */
	int n_gen_eos;
	int32_t gen_bad[8];       /* decoders: single tokens generate never produces (generation
				   * config's bad_words_ids; Marian's pad) */
	int n_gen_bad;
	int32_t gen_forced_eos;   /* decoders: forced_eos_token_id, the token forced as the last one
				   * a length limit allows; -1 none */
	struct rg_model *draft;   /* decoders: the speculative drafts' model (rg_model_set_draft,
				   * borrowed), NULL: none */
	int32_t gen_forced_bos;   /* decoders: forced_bos_token_id, the token forced right after a
				   * one-token prompt (an encoder-decoder's decoder_start: mBART's
				   * and NLLB's target language); -1 none */
	/* encoder-decoders: the language codes of mBART / NLLB / M2M100 tokenizers (model/lang.c),
	 * in the order tokenizer_config.json lists them */
	struct rg_lang_code *langs; /* (n_langs) */
	int n_langs;
	int lang_slot;            /* the template's special token that holds the source's code
				   * (rg_tok_params.lang_slot), -1: none (the code goes first) */
	int lang_default;         /* index in langs of the source code a text without src_lang
				   * gets (tokenizer_config.json's src_lang, else its tokenizer
				   * class's default), -1: the tokenizer.json template as it is */
	/* State the generation layer keeps per model, opaque here (src/gen/generate_api.c:
	 * rg_generate's block pool and the KV cache it made); rg_model_free calls gen_free(gen).
	 * model/ never reads it: the runner knows nothing of requests. */
	void *gen;
	void (*gen_free)(void *gen);
};

typedef struct rg_fwd {
	void *a[RG_ARENA_N];             /* arena tensors (arena_ptrs) */
	const int32_t *tokens, *positions; /* (n) */
	const int32_t *cu;               /* (n_att + 1) attention sequences */
	const int32_t *cu_h;             /* the same on the host (validation), or NULL */
	const int32_t *seg;              /* (n) or NULL */
} rg_fwd;

/* An architecture: the hooks of one model_type (model.c and decoder.c run everything else).
 * arch.c holds the one registry; a new architecture is one file of hooks plus one line there.
 * What a format needs to know of the architecture is here too: the GGUF architecture it serves
 * and its tensor-name table, so gguf_model.c / tsrc.c keep only the format's reading.
 *
 * Every kind loads the same way (model.c rg_model_load, gguf_model.c): hparams over the
 * checkpoint's hyper-parameter source, then, once the backend exists, load over its tensor
 * source; free_weights at the end. The kind says which forward hooks are set and which API
 * serves the model: an encoder sets encode (rg_model_embed / rg_model_run), a decoder decode
 * (rg_model_step), an encoder-decoder decode and encode_cross (rg_model_encode_cross). */
typedef struct rg_arch {
	const char *model_type; /* config.json model_type it serves ("bert") */
	rg_model_kind kind;     /* encoder, decoder or encoder-decoder: which forwards are set */
	const char *gguf_arch;  /* GGUF general.architecture it serves ("llama"), or NULL */
	const rg_tensor_names *gguf; /* Hugging Face -> GGUF tensor names (with gguf_arch) */

	/* ---- every kind ---- */
	/* Read the hyper-parameters from cfg (config.json, or the GGUF metadata of gguf_arch),
	 * refusing by name (RG_ERR_UNSUPPORTED / RG_ERR_FORMAT, naming the key and cfg->path) what
	 * the forward does not implement. Encoders fill m->cfg (rg_encoder_config_read; config.json
	 * only: GGUF is RG_ERR_UNSUPPORTED), decoders m->dec.cfg, where model_type is set and bos /
	 * eos ids are -1 on entry. Nothing is allocated; cfg stays the caller's. */
	rg_status (*hparams)(rg_model *m, const rg_cfg_src *cfg);
	/* Load and check every weight from src into m->weights (backend memory, the compute dtype
	 * or f32; owned by the architecture, freed by free_weights, also after a failed load).
	 * The hyper-parameters, m->be and m->esz are set; src->cfg is the checkpoint's
	 * hyper-parameter source (arrays such as LongRoPE's factors). Shapes are checked against
	 * the hyper-parameters: RG_ERR_FORMAT naming the tensor. Decoders also set
	 * m->dec.lm_head. src (and the file under it) lives for the load only (load, then
	 * load_head): nothing may point into it afterwards. */
	rg_status (*load)(rg_model *m, const rg_tsrc *src);
	/* Free m->weights (backend memory through rg_backend_dealloc) and set it to NULL. */
	void (*free_weights)(rg_model *m);

	/* ---- encoders (and an encoder-decoder's encoder) ---- */
	/* Embeddings and every layer over n rows as backend ops only (a CUDA graph may capture
	 * them): attention sequences f->cu (n_att of them, longest max_len), optional f->seg; the
	 * result in f->a[RG_A_HIDDEN]. */
	rg_status (*encode)(rg_model *m, const rg_fwd *f, int n, int n_att, int max_len);
	/* Optional: a sequence classifier's head (config.json's *ForSequenceClassification), after
	 * load, from the same src: m->head's w1 (H, H), b1 (H), w2 (num_labels, H), b2
	 * (num_labels) as malloc'd host f32 (model.c frees them) and its activation. m->head_cfg
	 * is set. NULL: classifiers of this architecture are refused (RG_ERR_UNSUPPORTED). */
	rg_status (*load_head)(rg_model *m, const rg_tsrc *src);

	/* ---- decoders (and an encoder-decoder's decoder) ---- */
	/* Every layer over the step's f->n new tokens as backend ops: the final norm's output in
	 * m->dec.a[RG_D_NORMED] (decoder.c gathers the wanted rows and applies the LM head). Each
	 * layer's attention through rg_dec_attention (KV write + paged attention), or, for RoPE
	 * families, rg_dec_rope_kv_write then rg_dec_attend. (An encoder-decoder's decoder takes
	 * this hook too, its cross-attention through f.) */
	rg_status (*decode)(rg_model *m, rg_dec_fwd *f);

	/* ---- encoder-decoders ---- */
	/* The encoder over f's packed sources as backend ops, then every decoder layer's cross K
	 * and V of its output written at f->slots (rg_dec_cross_write). The step arena is free to
	 * use (no step is in flight). */
	rg_status (*encode_cross)(rg_model *m, const rg_enc_fwd *f);
} rg_arch;

/* The architecture serving model_type, or NULL (arch.c). */
const rg_arch *rg_arch_find(const char *model_type);
/* The architecture serving GGUF general.architecture gguf_arch, or NULL (arch.c). */
const rg_arch *rg_arch_find_gguf(const char *gguf_arch);
/* The registry's i-th architecture, NULL past its end (arch.c; tests walk it). */
const rg_arch *rg_arch_at(size_t i);
/* The hooks of a's kind are set, and only those: hparams, load, free_weights always; encode
 * (and optionally load_head) for an encoder, decode for a decoder, both for an
 * encoder-decoder; gguf_arch with gguf. RG_ERR_INTERNAL naming the architecture and the hook
 * otherwise (a registry mistake, caught at load rather than crashed on). */
rg_status rg_arch_check(const rg_arch *a);
/* rg_arch_check for a load (what names the checkpoint: config.json's path, the GGUF file). */
rg_status rg_arch_servable(const rg_arch *a, const char *what);
/* The model_types served, comma-separated, for messages (arch.c). Static string. */
const char *rg_arch_names(void);
/* The GGUF architectures served, comma-separated, for messages (arch.c). Static string. */
const char *rg_arch_gguf_names(void);

extern const rg_arch rg_arch_bert, rg_arch_roberta, rg_arch_xlm_roberta, rg_arch_distilbert,
	rg_arch_albert, rg_arch_mpnet, rg_arch_deberta_v2, rg_arch_gpt2, rg_arch_llama,
	rg_arch_mistral, rg_arch_qwen2, rg_arch_qwen3, rg_arch_phi3, rg_arch_marian,
	rg_arch_bart, rg_arch_mbart, rg_arch_m2m100, rg_arch_t5, rg_arch_mt5;

/* ---- the load, every kind (model.c) ---- */
/* Clear m->cfg and m->dec.cfg (dec.cfg.model_type = m->arch's, bos / eos ids -1), then
 * m->arch->hparams(m, cfg). */
rg_status rg_model_hparams(rg_model *m, const rg_cfg_src *cfg);
/* The backend (p's device and index, compute dtype dt; m->be, m->esz), then
 * m->arch->load(m, src). The hyper-parameters are read. */
rg_status rg_model_load_weights(rg_model *m, const rg_model_params *p, rg_dtype dt,
				const rg_tsrc *src);

/* ---- decoder helpers (decoder.c) ---- */
/* What a decoder loaded from a Hugging Face directory needs besides its hyper-parameters and
 * weights: the tokenizer, if dir has one (the step API takes ids). */
rg_status rg_decoder_prepare(rg_model *m, const char *dir);
/* The format-independent rest of a decoder load: backend and weights from src
 * (rg_model_load_weights), step arena, rg_model_info. m->arch, m->dec.cfg (rg_model_hparams:
 * from config.json, or from GGUF metadata), m->dir, m->max_tokens and optionally m->tok are
 * set. A GGUF loader is: rg_model_hparams over the metadata, build a tensor source (tsrc.h),
 * call this. */
rg_status rg_decoder_init(rg_model *m, const rg_model_params *p, const rg_tsrc *src);
void rg_decoder_free(rg_model *m);
/* Load a decoder from a GGUF file (gguf_model.c): m->arch, m->dec.cfg, m->tok and
 * m->chat_template from the metadata, then rg_decoder_init over a GGUF tensor source. m->dir and
 * m->max_tokens are set. */
rg_status rg_gguf_model_load(rg_model *m, const char *path, const rg_model_params *p);
/* One layer's attention for a decoder forward: write the K and V columns of qkv (n rows of
 * qd + 2 kvd act) into layer l's cache at f->slots, then causal paged attention of the Q columns
 * into ctx (n, qd) act, with the given scale. */
rg_status rg_dec_attention(rg_model *m, rg_dec_fwd *f, int l, void *qkv, float scale,
			   void *ctx);
/* RoPE and the KV write of layer l in one op (rg_op_rope_kv_write): turn the Q and K heads of qkv
 * (n rows of qd + 2 kvd act) in place by the step's table cos_sin (m->dec.a[RG_D_ROPE], filled
 * by rg_op_rope_table before the first layer), then write the turned K and V into layer l's
 * cache at f->slots. Follow with rg_dec_attend. */
rg_status rg_dec_rope_kv_write(rg_model *m, rg_dec_fwd *f, int l, void *qkv,
			       const float *cos_sin);
/* rg_dec_attention without its KV write: causal paged attention of the Q columns of qkv into
 * ctx (n, qd) act over layer l's cache, which already holds this step's keys and values. */
rg_status rg_dec_attend(rg_model *m, rg_dec_fwd *f, int l, void *qkv, float scale, void *ctx);
/* Encoder-decoders: cross-attention of layer l for the step's query rows q (f->n rows of
 * num_heads * head_dim act, row stride ldq) over each row's source keys (f->cross) into ctx
 * (n, qd) act. */
rg_status rg_dec_cross_attend(rg_model *m, rg_dec_fwd *f, int l, const void *q, int ldq,
			      float scale, void *ctx);
/* Encoder-decoders: write kv (n rows: K in columns [0, kvd), V in [kvd, 2 kvd), row stride ld)
 * into layer l's cache at slots (n) -- the encoder pass's cross K / V. */
rg_status rg_dec_cross_write(rg_model *m, int l, const void *kv, int ld, const int32_t *slots,
			     int n);
/* Free every captured decode graph (buffers they read are about to change). */
void rg_dec_graphs_free(rg_model *m);
/* The staged block tables (m->dec.bt_d device, bt_h pinned host; int32) grown to hold entries
 * entries: at least 4096, twice the need when it grows; growing syncs, frees the old buffers and
 * the CUDA graphs that read them. Shared by decode steps and the decoder-embedding pass.
 * RG_ERR_OOM naming the size. */
rg_status rg_dec_bt_reserve(rg_model *m, size_t entries);

/* The embedding pass of a decoder (decoder_embed.c, issue 31): one packed, padding-free prefill
 * of n_seq fresh sequences (tokens, cu_seqlens as rg_model_embed's, validated here: every length
 * in [1, max_seq_len], n <= max_batch_tokens) through the architecture's own forward (causal
 * attention within each sequence, through the pass's one-layer KV pools: nothing is cached), then
 * each sequence's final-norm states pooled as pool says (LAST: its last token), not normalized,
 * into out (n_seq, H) f32 host; hidden_out (n, H) f32 host, or NULL: every token's final-norm
 * state. Not on an encoder-decoder (RG_ERR_UNSUPPORTED). */
rg_status rg_dec_embed(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens, int n_seq,
		       rg_pooling pool, float *out, float *hidden_out);
/* Free the embedding pass's buffers (rg_decoder_free calls it). */
void rg_dec_embed_free(rg_model *m);

/* Rows of the sampling buffers: max_tokens + RG_LOGITS_CHUNK (a graph pads to its bucket). */
size_t rg_dec_sample_rows(const rg_model *m);
/* The sampler path of rg_model_step (decoder_sample.c). */
/* Every row of out->rows (not NULL) against rg_row_sampling's ranges; RG_ERR_INVALID_INPUT
 * names the row and field. */
rg_status rg_dec_sample_check(const rg_model *m, int n_logits, const rg_step_out *out);
/* Stage n rows' parameters and lists (out->rows; NULL: greedy rows), padded to nl greedy rows;
 * allocates at the first call (and grows the lists, freeing the graphs). Asynchronous copies on
 * the backend's stream. */
rg_status rg_dec_sample_stage(rg_model *m, int n, int nl, const rg_step_out *out);
/* rg_op_sample_rows' arguments for logits rows r0.. of the staged step. */
rg_sample_args rg_dec_sample_args(rg_model *m, int r0, int top_n);
void rg_dec_sample_free(rg_model *m);
/* Upload a host f32 array (n values) as a constant tensor in the compute dtype (as_act) or f32,
 * and free the host array (also on error). */
rg_status rg_dec_upload(rg_model *m, float *host, size_t n, bool as_act, void **dst);

/* Weight-loading helpers for the encoders (model.c), over a tensor source. Names are a base
 * model's; each is looked up as it is or under a base-model prefix ("bert.", "roberta.",
 * "distilbert.", "albert.", "mpnet.", "deberta.": the layout of *For* task checkpoints), and
 * alt (the old TF-converted gamma / beta LayerNorm names), when not NULL, after name. Shapes
 * are (d0) (d1 < 0) or (d0, d1). Errors: RG_ERR_FORMAT "<file>: missing tensor <name> (also
 * looked under the prefixes ...)" or "tensor <name as found> has shape [..], config.json implies
 * [..]"; RG_ERR_OOM. */
/* Read the tensor as f32 into dst (d0 or d0 * d1 floats), converting from its storage dtype. */
rg_status rg_model_read_tensor(const rg_tsrc *src, const char *name, const char *alt, int64_t d0,
			       int64_t d1, float *dst);
/* Allocate backend memory for n values and fill it from host f32 src, in the compute dtype
 * (as_act) or as f32. */
rg_status rg_model_upload(rg_model *m, const float *src, size_t n, bool as_act, void **dst);
/* Count bytes of weights just allocated on the backend into m->info.weight_bytes (and one
 * quantized GEMM weight into quantized_weights when quantized). */
void rg_model_count_weight(rg_model *m, size_t bytes, bool quantized);
/* rg_model_read_tensor into a malloc'd f32 host array *dst (caller frees; NULL on error). */
rg_status rg_model_host_tensor(const rg_tsrc *src, const char *name, int64_t d0, int64_t d1,
			       float **dst);
/* rg_model_read_tensor into scratch (>= numel floats), then rg_model_upload. */
rg_status rg_model_load_tensor(rg_model *m, const rg_tsrc *src, const char *name, const char *alt,
			       int64_t d0, int64_t d1, bool as_act, float *scratch, void **dst);

/* One language code (model/lang.c). */
typedef struct rg_lang_code {
	char *code;   /* what a caller passes: "en_XX", "eng_Latn", M2M100's "en" */
	char *token;  /* its special token: the code, or M2M100's "__en__" */
	int32_t id;
} rg_lang_code;

/* Fill m->langs / n_langs / lang_slot from dir's tokenizer files (model/lang.c's rules); none
 * for a model whose family takes no codes. RG_ERR_OOM. */
rg_status rg_model_langs_load(rg_model *m, const char *dir);
void rg_model_langs_free(rg_model *m);
/* tp's language fields for the source code src_lang; NULL: the model's default source code
 * (m->lang_default) when it has one, else tp unchanged. RG_ERR_INVALID_INPUT naming the model's
 * codes for an unknown one. */
rg_status rg_model_lang_params(const rg_model *m, const char *src_lang, rg_tok_params *tp);

#endif
