/* Operations of BERT-family encoders and of decoder-only models (GPT-2, Llama: the decoder ops
 * at the end) on a packed (padding-free) batch, one entry point per operation, dispatched to a
 * backend (CPU reference in src/ops/cpu, CUDA in src/ops/cuda).
 *
 * Conventions for every op:
 *  - all tensor pointers live in the backend's memory (host memory for CPU, device memory for CUDA),
 *    allocated with rg_backend_alloc; row-major;
 *  - "act" tensors (activations, GEMM weights, embedding tables) have the backend's compute dtype
 *    `dt` (F32 on CPU; F32/F16/BF16 on CUDA); "f32" tensors (biases, LayerNorm gamma/beta, pooled
 *    output) are always float32; index tensors are int32;
 *  - every reduction (dot products, softmax, LayerNorm statistics) accumulates in float32;
 *  - ops are asynchronous on CUDA (one stream per backend); rg_backend_sync waits.
 * Every CUDA op has a CPU twin with the same arguments, and tests compare the two.
 * This header includes no CUDA header. */
#ifndef RG_OPS_H
#define RG_OPS_H
#include "core/export.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"
#include "ops/act.h"

typedef struct rg_backend rg_backend;

/* Create a backend. CUDA: RG_ERR_UNSUPPORTED when built without CUDA or no device is present.
 * dt: compute dtype. CPU: F32, or BF16 where rg_dnnl_bf16_supported() (activations stay f32,
 * rg_backend_dtype reports F32, and the prepared GEMM weights are bf16); F16 and an unsupported
 * BF16 are RG_ERR_UNSUPPORTED. */
RG_TEST_API
rg_status rg_backend_init(rg_device dev, int device_index, rg_dtype dt, rg_backend **out);
RG_TEST_API void rg_backend_free(rg_backend *be); /* accepts NULL */
rg_device rg_backend_device(const rg_backend *be);
rg_dtype rg_backend_dtype(const rg_backend *be); /* the dtype activations are stored in */
size_t rg_dtype_size(rg_dtype dt);

/* Backend memory. alloc returns RG_ERR_OOM on failure; dealloc accepts NULL. */
RG_TEST_API rg_status rg_backend_alloc(rg_backend *be, size_t bytes, void **ptr);
RG_TEST_API void rg_backend_dealloc(rg_backend *be, void *ptr);
/* Host <-> backend copies of raw bytes (synchronous w.r.t. the host buffer). */
RG_TEST_API rg_status rg_backend_upload(rg_backend *be, void *dst, const void *src_host,
				      size_t bytes);
RG_TEST_API rg_status rg_backend_download(rg_backend *be, void *dst_host, const void *src,
					size_t bytes);
/* Upload n float32 values converting to the backend dtype dt (for weights / tables). */
rg_status rg_backend_upload_f32_as(rg_backend *be, void *dst, const float *src_host, size_t n,
				   rg_dtype dt);
RG_TEST_API rg_status rg_backend_sync(rg_backend *be);
/* Set bytes of backend memory to zero (CUDA: asynchronous on the stream). */
rg_status rg_backend_zero(rg_backend *be, void *ptr, size_t bytes);

/* Pinned (page-locked) host memory for staging: CUDA cudaHostAlloc (mapped: with unified
 * addressing an op may also read or write it directly through the same pointer, e.g. a pooled
 * result written straight to the host), CPU malloc. RG_ERR_OOM on failure; host_free accepts
 * NULL. The only host memory the async copies and graphs may use. */
rg_status rg_backend_host_alloc(rg_backend *be, size_t bytes, void **ptr);
void rg_backend_host_free(rg_backend *be, void *ptr);
/* Asynchronous copies on the backend's stream between pinned host memory (host_alloc) and backend
 * memory: ordered with the ops, finished at the next rg_backend_sync, and allowed while capturing
 * a graph (CPU: plain memcpy). */
rg_status rg_backend_upload_async(rg_backend *be, void *dst, const void *src_pinned, size_t bytes);
rg_status rg_backend_download_async(rg_backend *be, void *dst_pinned, const void *src, size_t bytes);

/* Graphs of ops (CUDA graphs; TurboTransformers and every serving system replay one launch per
 * shape instead of ~100 kernel launches). Between capture_begin and capture_end every op, async
 * copy and rg_op_* call on this backend is recorded instead of run; pointers and shapes are frozen,
 * so whatever changes per batch must live in backend buffers written before the launch.
 * capture_end instantiates the graph (*out, owned by the caller, freed with graph_free) and, on
 * any failure during the capture, returns that error with *out = NULL and the backend back in
 * normal mode. graph_launch runs it asynchronously (rg_backend_sync waits).
 * CPU: capture_begin returns RG_ERR_UNSUPPORTED. Not thread-safe: one capture per backend. */
typedef struct rg_graph rg_graph;
RG_TEST_API rg_status rg_backend_capture_begin(rg_backend *be);
RG_TEST_API rg_status rg_backend_capture_end(rg_backend *be, rg_graph **out);
RG_TEST_API rg_status rg_backend_graph_launch(rg_backend *be, rg_graph *g);
RG_TEST_API void rg_backend_graph_free(rg_backend *be, rg_graph *g); /* accepts NULL */
/* True when the backend supports graphs (CUDA). */
bool rg_backend_has_graphs(const rg_backend *be);
/* GELU in fused GEMM epilogues on reduced-precision backends: false (default) lets fp16/bf16 use
 * cuBLASLt's tanh-form GELU epilogue for exact-GELU models (its error is below fp16/bf16 rounding,
 * see bench/results); true forces the exact erf form (one extra pass). No effect on CPU or fp32. */
void rg_backend_set_exact_gelu(rg_backend *be, bool exact);
/* Bytes in use / total on the device (CUDA: cudaMemGetInfo); CPU: process RSS and MemTotal. */
rg_status rg_backend_mem_info(rg_backend *be, size_t *used, size_t *total);
/* GEMM plans the backend has built so far (CUDA: cuBLASLt plans, each one autotuned over the
 * heuristic's candidates outside graph capture, src/ops/cuda/gemm.cu; a plan evicted from the
 * cache and needed again is built again). A count that rises under steady load means GEMMs are
 * being autotuned between batches. CPU: 0. */
unsigned long long rg_backend_gemm_plans(const rg_backend *be);

/* Embeddings + LayerNorm (BERT): out[t] = LN(word[tokens[t]] + pos[positions[t]] + type[0]).
 * tokens, positions: (n_tokens) int32; word: (vocab, H) act; pos: (max_pos, H) act;
 * type0: (H) act (row 0 of token_type_embeddings); gamma, beta: (H) f32; out: (n_tokens, H) act.
 * Indices must already be validated by the caller (0 <= token < vocab, 0 <= position < max_pos). */
rg_status rg_op_embed_layernorm(rg_backend *be, const int32_t *tokens, const int32_t *positions,
				int n_tokens, const void *word, const void *pos, const void *type0,
				const float *gamma, const float *beta, float eps, int H, void *out);

/* out (M, N) act = A (M, K) act x W^T, W (N, K) act (the torch.nn.Linear layout).
 * CPU: oneDNN matmul tiles for a prepared W (rg_op_prepare_weight), else OpenBLAS sgemm tiles;
 * CUDA: cuBLASLt with fp32 accumulation, except decode-sized fp16 / bf16 products (M <= 16, K %
 * 8 == 0, 16-byte aligned A and W: src/ops/cuda/gemv.cuh) on ragged's small-M tensor-core kernel,
 * which streams W once (RAGGED_GEMV=0: cuBLASLt for those too). */
rg_status rg_op_gemm(rg_backend *be, const void *A, const void *W, void *out, int M, int N, int K);

/* Declare W (N, K) act, backend memory, a constant weight of rg_op_gemm / rg_op_gemm_bias_act,
 * so the backend may store it the way its GEMM reads fastest. CPU with oneDNN: reordered in place
 * into oneDNN's blocked layout (src/ops/cpu/gemm_dnnl.h), after which W's bytes are no longer
 * row-major and W may only be passed to those GEMMs (with the same N, K) and rg_backend_dealloc;
 * CPU backend created for bf16: a bf16 copy in oneDNN's layout (W untouched), and the GEMMs on it
 * round A to bf16 and accumulate in f32 (PyTorch CPU autocast's precision).
 * CPU without oneDNN, CUDA: no change. Call once per weight, after its upload.
 * Errors: RG_ERR_INVALID_INPUT (bad shape, already prepared), RG_ERR_OOM, RG_ERR_INTERNAL,
 * RG_ERR_UNSUPPORTED (bf16 without a native bf16 kernel for this shape). */
rg_status rg_op_prepare_weight(rg_backend *be, void *W, int N, int K);

/* Quantized GEMM weights (issue 30): true when be's rg_op_gemm / rg_op_gemm_bias_act can read a
 * weight kept in GGUF blocks of ggml type `type` (rg_gguf_type numbers). CPU: Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (src/ops/cpu/qweight.h); CUDA: Q8_0, Q4_0, Q4_1, Q4_K, Q6_K
 * (src/ops/cuda/qgemv.cuh). */
bool rg_backend_qtype_supported(const rg_backend *be, int type);

/* Declare W (backend memory: N rows of K / 32 ggml blocks of `type` (K-quants: K / 256
 * super-blocks, K % 256 == 0), rows back to back, the bytes of a GGUF tensor with ne = {K, N})
 * a constant weight of rg_op_gemm / rg_op_gemm_bias_act with that N and K: those GEMMs then
 * compute A x dequant(W)^T. CPU: A rounded to int8 blocks of 32 (one fp32 scale each) and
 * integer block dot products accumulated in fp32 (llama.cpp's vec_dot_q8_0_q8_0 / q4_0_q8_0 /
 * q4_K_q8_K scheme). CUDA: the weight's values rounded to the act dtype (as a dequantized upload
 * would be) times A on the tensor cores, fp32 accumulation: dequantized in registers by a
 * small-M kernel for M <= 16, into a scratch copy (N K act elements, allocated here for the
 * largest weight declared) before cuBLASLt for larger M. W stays owned by the caller
 * (rg_backend_dealloc). Errors: RG_ERR_UNSUPPORTED (not rg_backend_qtype_supported),
 * RG_ERR_INVALID_INPUT (bad shape, K not a multiple of the type's block, already declared),
 * RG_ERR_OOM. */
rg_status rg_op_prepare_qweight(rg_backend *be, void *W, int type, int N, int K);
/* The same for a stack of n parts of different types (part i: rows[i] rows of types[i], blocks
 * after part i - 1's; a GGUF Q4_K_M file's fused QKV with a Q6_K V): one GEMM weight of N =
 * sum(rows) rows, each part's rows computed with its own type's kernel. Errors as
 * rg_op_prepare_qweight; RG_ERR_UNSUPPORTED where !rg_backend_qparts_supported (the CPU
 * takes it, CUDA not: callers dequantize such a stack on CUDA). */
rg_status rg_op_prepare_qweight_parts(rg_backend *be, void *W, int n, const int *types,
				      const int *rows, int K);
/* Whether the backend takes rg_op_prepare_qweight_parts. */
bool rg_backend_qparts_supported(const rg_backend *be);

/* Fused GEMM + epilogue (ByteTransformer sec. III-C/D: bias and activation applied in the GEMM's
 * epilogue instead of a separate pass over the output):
 * out (M, N) act = act_fn(A (M, K) x W^T + bias), W (N, K) act, bias (N) act or NULL (no bias);
 * CUDA wants the bias 16-byte aligned (RG_ERR_INVALID_INPUT otherwise; backend allocations are).
 * CUDA: one cuBLASLt matmul with the BIAS / GELU_BIAS / RELU_BIAS epilogue (GELU_NEW is exactly
 * cuBLASLt's tanh form); exact GELU (erf) uses the tanh epilogue in fp16/bf16 unless
 * rg_backend_set_exact_gelu, else the BIAS epilogue and one in-place exact pass. CPU: sgemm + one
 * pass. act RG_ACT_NONE with bias NULL is rg_op_gemm. */
rg_status rg_op_gemm_bias_act(rg_backend *be, const void *A, const void *W, const void *bias,
			      void *out, int M, int N, int K, rg_act act);

/* In place x (M, N) act = act_fn(x + bias), bias (N) f32 or NULL. gelu = exact erf form, gelu_new = tanh form. */
rg_status rg_op_bias_act(rg_backend *be, void *x, const float *bias, int M, int N, rg_act act);

/* out (M, N) act = LN(x + bias + residual) * gamma + beta, row-wise over N, statistics in f32.
 * x, residual: (M, N) act; bias (N) f32 or NULL (already added by a GEMM epilogue); gamma, beta:
 * (N) f32. CUDA: one warp per row for N = 32 * 8 * k <= 2048 in fp16/bf16, <= 1024 in fp32 (16- or 8-byte accesses, E[x] and E[x^2] reduced
 * together, TurboTransformers sec. 4.1.2). out may alias residual or x
 * (fused add-bias + LayerNorm, ByteTransformer sec. III-C). */
rg_status rg_op_bias_residual_layernorm(rg_backend *be, const void *x, const float *bias,
					const void *residual, const float *gamma, const float *beta,
					float eps, int M, int N, void *out);

/* DeBERTa's disentangled terms for rg_op_attention (below). */
typedef struct rg_attn_disent {
	const void *c2p;    /* (n_tokens, num_heads, width) act, already times scale; or NULL */
	const void *p2c;    /* (n_tokens, num_heads, width) act, already times scale; or NULL */
	const int32_t *idx; /* (2 R + 1) int32 in backend memory, values in [0, width) */
	int width;          /* > 0: 2 * att_span */
	int R;              /* >= 0: distances past R share the ends of idx */
} rg_attn_disent;

/* What an attention reads besides Q, K and V: one descriptor instead of a growing argument
 * list (issue 19, "Structure first" 3), for both attention ops:
 *  - rg_op_attention (encoders: bidirectional, keys and values beside the queries in one packed
 *    QKV buffer): causal false, num_kv_heads == num_heads, n_seq, cu_seqlens_q(_h),
 *    max_seqlen_q, scale and the optional extras seg / rel_bias / dis; the paged fields unused;
 *  - rg_op_paged_attention (decoders: causal, grouped KV heads, keys and values in a paged
 *    cache): keys and values of sequence i, position p, live in slot
 *    block_tables[i][p / block_size] * block_size + p % block_size of the cache.
 * Zero it (memset / = {0}) and set what the op reads. */
typedef struct rg_attn_desc {
	bool causal;                   /* query at position p sees keys 0..p (paged: must be true) */
	int num_heads;                 /* query heads */
	int num_kv_heads;              /* KV heads, num_heads % num_kv_heads == 0 (GQA: query head
					* h reads KV head h / (num_heads / num_kv_heads)) */
	int head_dim;
	float scale;                   /* scores = scale * q.k */
	int n_seq;
	const int32_t *cu_seqlens_q;   /* (n_seq + 1) backend: new (query) rows of each sequence */
	const int32_t *cu_seqlens_q_h; /* the same on the host */
	int max_seqlen_q;              /* rg_op_attention: the longest sequence's rows */
	const int32_t *context_lens;   /* (n_seq) backend: keys of each sequence (cached + new);
					* query row j of sequence i sits at position
					* context_lens[i] - n_new_i + j */
	const int32_t *context_lens_h; /* the same on the host */
	int max_context_len;           /* max of context_lens */
	const int32_t *block_tables;   /* (n_seq, max_blocks_per_seq) int32 backend, row-major */
	int max_blocks_per_seq;
	int block_size;                /* positions per block, >= 1 */
	int64_t n_blocks;              /* blocks in the cache: every table entry read is below */
	const void *k_new, *v_new;     /* optional: this step's keys and values as written to the
					* cache, rows of stride ldq (the fused QKV output's column
					* blocks). A backend may read a fresh sequence's keys (no
					* cached ones: context_lens == its new rows) from here (CUDA:
					* tensor-core causal prefill); NULL: the cache only */
	/* rg_op_attention's extras (encoder families; NULL for the others) */
	const int32_t *seg;            /* (n_tokens) segment ids of a masked mode, or NULL */
	const float *rel_bias;         /* MPNet's relative position bias table, or NULL */
	int rel_max;                   /* its largest distance, >= 0 when rel_bias is set */
	const rg_attn_disent *dis;     /* DeBERTa's disentangled terms, or NULL */
} rg_attn_desc;

/* A descriptor for rg_op_attention over n_seq packed sequences (bidirectional, equal KV heads, no
 * extras: set seg / rel_bias / rel_max / dis on the result when a family needs them). */
static inline rg_attn_desc rg_attn_packed(int n_seq, const int32_t *cu_seqlens,
					  const int32_t *cu_seqlens_h, int max_seqlen,
					  int num_heads, int head_dim, float scale)
{
	rg_attn_desc d = {0};

	d.num_heads = d.num_kv_heads = num_heads;
	d.head_dim = head_dim;
	d.scale = scale;
	d.n_seq = n_seq;
	d.cu_seqlens_q = cu_seqlens;
	d.cu_seqlens_q_h = cu_seqlens_h;
	d.max_seqlen_q = max_seqlen;
	return d;
}

/* Variable-length multi-head self-attention over packed sequences (no padded token computed), the
 * shape and extras in the descriptor d (rg_attn_desc below: causal false, num_kv_heads ==
 * num_heads, no block table).
 * qkv: (n_tokens, 3*H) act, columns [Q | K | V], head h uses columns h*head_dim..(h+1)*head_dim-1
 * of each block; out: (n_tokens, H) act, H = num_heads * head_dim.
 * d->cu_seqlens_q: (n_seq+1) int32 in backend memory, d->cu_seqlens_q_h: the same on the host;
 * d->max_seqlen_q: longest sequence. Token i of sequence s attends to every token of s,
 * softmax(QK^T*scale). The extras (d->seg, d->rel_bias with d->rel_max, d->dis):
 * seg: NULL, or (n_tokens) int32 segment ids for masked modes: query i sees key j only when
 * seg[i] == seg[j] and seg[j] >= 0 (block-diagonal ConcatBatching mask, TCB sec. 4; -1 marks padding);
 * a query with no visible key gets zeros.
 * rel_bias: NULL (BERT, RoBERTa, ...: nothing is added and nothing is read), or a relative
 * position bias (MPNet, T5-style buckets): (num_heads, 2*rel_max + 1) f32 in backend memory, added
 * to the scaled score of query i and key j of one attention sequence (i, j its token indices, so
 * positions relative within the sequence, as MPNet's compute_position_bias counts them):
 *   score(i, j) = scale * q_i.k_j + rel_bias[h * (2*rel_max + 1) + rel_max + clamp(j - i, -rel_max, rel_max)]
 * Distances past rel_max share the table's end values (exact for a bucket function that
 * saturates by then; MPNet's does at max_distance 128). rel_max >= 0, ignored when rel_bias is
 * NULL; RG_ERR_INVALID_INPUT otherwise.
 * dis: NULL (every family but DeBERTa: nothing more is read), or DeBERTa-v2's disentangled
 * terms (transformers' DisentangledSelfAttention.disentangled_attention_bias), added to the
 * scaled score of query i and key j (token indices within their attention sequence, rows t0 + i
 * and t0 + j of the packed batch) with e = idx[R + clamp(i - j, -R, R)]:
 *   score(i, j) += c2p[t0 + i][h][e] + p2c[t0 + j][h][e]
 * (c2p: content to position, the query's row; p2c: position to content, the key's row; either may
 * be NULL). transformers gathers p2c at -bucket(j - i), which is bucket(i - j) because its bucket
 * function is odd, so one index table serves both. rel_bias and dis are not both given.
 * CUDA: with dis, fp16 / bf16 with head_dim 32 or 64 take the tensor-core kernel (the terms
 * gathered per 64 x 64 tile into shared memory, src/ops/cuda/attention_tc.cu); fp32 and other
 * head_dims the CUDA-core kernel; RAGGED_DEBERTA_TC=0 (or "tables") forces the CUDA-core kernel.
 * fp16/bf16 problems with head_dim 64 or 128 and no seg, rel_bias or dis on a Hopper GPU (sm_90a
 * build) go to the wgmma kernel (attention_wgmma.cu) instead of the mma.sync one;
 * RAGGED_ATTN_WGMMA=0 keeps them on mma.sync. */
RG_TEST_API
rg_status rg_op_attention(rg_backend *be, const rg_attn_desc *d, const void *qkv, void *out);

/* DeBERTa's per-token relative tables for rg_op_attention's dis, from the packed qkv (n_tokens,
 * 3H) act of rg_op_attention and a layer's projected relative embeddings pos_key, pos_query
 * (width, H) act (K / Q projections of LayerNorm(rel_embeddings), share_att_key):
 *   c2p[t][h][w] = scale * Q[t, head h] . pos_key[w, head h columns]
 *   p2c[t][h][w] = scale * K[t, head h] . pos_query[w, head h columns]
 * c2p, p2c: (n_tokens, num_heads, width) act; a NULL pos_* skips its table. One GEMM per head
 * (CPU: sgemm tiles on the strided rows; CUDA: one cuBLASLt strided-batched GEMM per table over
 * the heads, f32 accumulation, tensor cores in fp16 / bf16; RAGGED_DEBERTA_TC=0 (or "attn"): the
 * old shared-memory tiled CUDA-core kernel). CUDA errors: RG_ERR_CUDA when cuBLASLt has no
 * algorithm for the shape or fails. */
RG_TEST_API
rg_status rg_op_rel_tables(rg_backend *be, const void *qkv, int n_tokens, int num_heads,
			   int head_dim, const void *pos_key, const void *pos_query, int width,
			   float scale, void *c2p, void *p2c);

/* Pool each sequence of x (n_tokens, H) act into out (n_seq, H) f32 using cu_seqlens (n_seq+1,
 * backend memory): MEAN over its tokens, CLS = its first token, MAX elementwise; then L2-normalize
 * each row when normalize (a zero row stays zero). A sequence of length 0 (the padding sequences
 * of a graph bucket) pools to a zero row; a negative length is an error (CUDA: device flag).
 * CUDA: one CTA per sequence, threads over tokens and 16-byte column groups. */
rg_status rg_op_pool(rg_backend *be, const void *x, const int32_t *cu_seqlens, int n_seq, int H,
		     rg_pooling mode, bool normalize, float *out);

/* Scaled token embedding plus position embedding (the encoder-decoders' input, transformers'
 * BartScaledWordEmbedding / MarianSinusoidalPositionalEmbedding, in one pass):
 * out[t] = scale * table[tokens[t]] + (pos ? pos[positions[t]] : 0), t < n; table (vocab, H) act,
 * pos (max_pos, H) act or NULL, tokens / positions (n) int32 backend memory, validated by the
 * caller; out (n, H) act. Sum in f32. A token equal to no_pos_token (>= 0; -1: none) gets no
 * position row (M2M100SinusoidalPositionalEmbedding's padding_idx row, which is zero). */
rg_status rg_op_embed_scale_add(rg_backend *be, const void *table, const int32_t *tokens,
				float scale, const void *pos, const int32_t *positions,
				int32_t no_pos_token, int n, int H, void *out);

/* Row gather: dst[i] = src[idx[i]] for i < n_dst; src (n_src, H) act, idx (n_dst) int32 (backend
 * memory), dst (n_dst, H) act. Used to bring padded / concatenated rows back to packed order. */
rg_status rg_op_gather_rows(rg_backend *be, const void *src, const int32_t *idx, int n_dst, int H,
			    void *dst);
/* ---------------------------------------------------------------------------------------------
 * Decoder ops (issue 19): the layers of GPT-2 / Llama-family decoders over a packed mixed batch of
 * prefill chunks and decode tokens, reading and writing a paged KV cache (PagedAttention, Kwon et
 * al. SOSP'23). The CUDA backend does not have them yet (RG_ERR_UNSUPPORTED). */

typedef enum rg_norm_kind {
	RG_NORM_LAYER = 0, /* LayerNorm: (r - mean) / sqrt(var + eps) * gamma + beta */
	RG_NORM_RMS = 1,   /* RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm):
			    * r / sqrt(mean(r^2) + eps) * gamma */
} rg_norm_kind;

/* Fused residual add + norm (vLLM's fused_add_rms_norm; pre-LN decoders): when x != NULL,
 * residual (M, N) act += x (M, N) act, in place; then out (M, N) act = norm(residual), row-wise,
 * statistics in f32. gamma (N) f32; beta (N) f32 or NULL (RMS ignores it). out must not alias
 * residual (it may alias x). */
rg_status rg_op_add_norm(rg_backend *be, const void *x, void *residual, const float *gamma,
			 const float *beta, float eps, rg_norm_kind kind, int M, int N, void *out);

/* Rotary position embedding in place (Su et al., RoFormer; HF apply_rotary_pos_emb) on n_heads
 * heads of head_dim columns (even) in each of n_tokens rows of x (act, row stride ld elements,
 * head h at columns h * head_dim). Pair i < head_dim / 2 of token t turns by the angle
 * positions[t] * inv_freq[i] (computed in double, cos and sin in f32):
 *   interleaved false ("neox", HF rotate_half): columns (i, i + head_dim / 2);
 *   interleaved true ("normal", GPT-J, llama.cpp over GGUF's permuted q/k rows): (2i, 2i + 1).
 * positions (n_tokens) int32 and inv_freq (head_dim / 2) f32 in backend memory. */
rg_status rg_op_rope(rg_backend *be, void *x, int ld, int n_tokens, int n_heads, int head_dim,
		     const int32_t *positions, const float *inv_freq, bool interleaved);

/* The cos / sin table of a step's RoPE (RoFormer; HF LlamaRotaryEmbedding.forward), computed once
 * per forward and read by every layer's rg_op_rope_kv_write: for token t < n_tokens and pair
 * i < head_dim / 2, with the angle a = positions[t] * inv_freq[i] formed and turned in double
 * exactly as rg_op_rope does (so the values are rg_op_rope's, bit for bit),
 *   cos_sin[t * head_dim + i] = (float)cos(a),  cos_sin[t * head_dim + head_dim / 2 + i] = (float)sin(a).
 * positions (n_tokens) int32, inv_freq (head_dim / 2) f32, cos_sin (n_tokens, head_dim) f32, all
 * backend memory. head_dim even and > 0, else RG_ERR_INVALID_INPUT. */
rg_status rg_op_rope_table(rg_backend *be, const int32_t *positions, int n_tokens,
			   const float *inv_freq, int head_dim, float *cos_sin);

/* rg_op_rope_table with per-position frequency sets and a magnitude scale (LongRoPE, Ding et al.
 * 2024, as transformers' _compute_longrope_parameters / Phi3RotaryEmbedding compute it): token t
 * turns by inv_freq (the short factors folded in) when positions[t] < long_from, else by
 * inv_freq_long (NULL: inv_freq for every position), and both values are scaled by mscale (the
 * attention factor sqrt(1 + ln(s) / ln(original_max)); 1: none):
 *   cos_sin[t * head_dim + i] = (float)(cos(a) * mscale), the sin likewise (a in double).
 * With inv_freq_long NULL and mscale 1 it is rg_op_rope_table, bit for bit. inv_freq and
 * inv_freq_long (head_dim / 2) f32 backend memory; mscale finite and > 0. */
rg_status rg_op_rope_table_scaled(rg_backend *be, const int32_t *positions, int n_tokens,
				  const float *inv_freq, const float *inv_freq_long,
				  int32_t long_from, float mscale, int head_dim, float *cos_sin);

/* Per-head RMSNorm of Q and K in place (Qwen3's q_norm / k_norm, transformers' Qwen3Attention:
 * after the projections, before RoPE): in each of n_tokens rows of qkv (act, row stride ld >=
 * (n_heads + n_kv_heads) head_dim, [Q | K | ...]), every Q head h (columns h * head_dim ..) becomes
 *   x / sqrt(mean(x^2) + eps) * q_gamma      (statistics in f32),
 * and every K head (after the n_heads Q heads) the same with k_gamma. q_gamma, k_gamma
 * (head_dim) f32 backend memory. The V columns are not touched. */
rg_status rg_op_qk_norm(rg_backend *be, void *qkv, int ld, int n_tokens, int n_heads,
			int n_kv_heads, int head_dim, const float *q_gamma, const float *k_gamma,
			float eps);

/* RoPE and the KV write of one decoder layer in one pass (vLLM's rotary + reshape_and_cache,
 * fused): each of n_tokens rows of qkv (act, row stride ld >= (n_heads + 2 n_kv_heads) head_dim,
 * the fused QKV output [Q | K | V], Q of n_heads heads and K, V of n_kv_heads heads of head_dim
 * columns) has its Q and K heads turned in place by rg_op_rope's rule, the angles read from
 * cos_sin (rg_op_rope_table's (n_tokens, head_dim) f32 for the same positions), and then
 *   k_cache[slots[t]] = K[t] (turned), v_cache[slots[t]] = V[t]   (kv_dim = n_kv_heads * head_dim)
 * as rg_op_kv_write: k_cache, v_cache (n_slots, kv_dim) act, slots (n_tokens) int32 backend
 * memory. The turned K stays in qkv too (an attention may read a fresh sequence's keys from there,
 * rg_attn_desc.k_new). Equal, element for element, to rg_op_rope over the n_heads + n_kv_heads
 * heads then rg_op_kv_write. Errors: RG_ERR_INVALID_INPUT for a bad shape, or a slot outside
 * [0, n_slots) (the CPU checks every slot before writing anything; CUDA writes no cache row for
 * such a token and reports it at the next sync, as rg_op_kv_write). */
rg_status rg_op_rope_kv_write(rg_backend *be, void *qkv, int ld, int n_tokens, int n_heads,
			      int n_kv_heads, int head_dim, const float *cos_sin, bool interleaved,
			      const int32_t *slots, void *k_cache, void *v_cache, int64_t n_slots);

/* The gate of a gated FFN (Shazeer 2020, "GLU Variants Improve Transformer"): out (M, N) act =
 * act_fn(x[:, :N]) * x[:, N:2N] for x (M, 2N) act (the gate and up projections as one GEMM),
 * act_fn one of src/ops/act.h (rg_act_apply's formula): RG_ACT_SILU for SwiGLU (HF LlamaMLP),
 * RG_ACT_GELU_NEW for T5 v1.1's gated-gelu (T5DenseGatedActDense), RG_ACT_NONE a bilinear gate.
 * CUDA: a 2-D grid (rows x column blocks, no per-element index division), 16-byte accesses when
 * N is a multiple of 16 / sizeof(act) and x, out are 16-byte aligned; silu with __expf. */
rg_status rg_op_act_mul(rg_backend *be, const void *x, int M, int N, rg_act act, void *out);

/* The down projection of a gated FFN with its gate folded in: out (M, N) act =
 * (act_fn(x[:, :K]) * x[:, K:2K]) W^T, i.e. rg_op_act_mul(x, M, K, act) into scratch, then
 * rg_op_gemm(scratch, W, out, M, N, K). x (M, 2K) act; W (N, K) as rg_op_gemm takes it (dense or
 * a prepared quantized weight); scratch (M, K) act, caller-owned, used only where the backend
 * does not fuse (its contents are unspecified after the call either way); out (M, N) act.
 * Fused where the backend can: CUDA decode rows (M <= 16 fp16/bf16 dense, the small-M GEMV; a
 * GGUF-quantized W on qmv_kernel, M <= 4) read act_fn(gate) * up, rounded to act, straight
 * from x in the GEMM's loads: one kernel fewer a layer and equal bit for bit to the two calls
 * (RAGGED_GLU_GEMV=1 turns it on: off by default until it has run on a GPU; the fusion of a
 * decode step's "gate/up GEMV with SiLU-mul", issue 30 item 2). Errors: as rg_op_act_mul and rg_op_gemm. */
rg_status rg_op_act_mul_gemm(rg_backend *be, const void *x, const void *W, void *out, int M,
			     int N, int K, rg_act act, void *scratch);

/* Scatter new keys and values into a paged cache: for t < n_tokens,
 *   k_cache[slots[t]] = k[t], v_cache[slots[t]] = v[t]   (kv_dim = n_kv_heads * head_dim values)
 * k, v: n_tokens rows of kv_dim act with row stride ld (column blocks of a fused QKV output);
 * k_cache, v_cache: (n_slots, kv_dim) act, i.e. (n_blocks, block_size, n_kv_heads, head_dim);
 * slots (n_tokens) int32 backend memory. A slot outside [0, n_slots) is RG_ERR_INVALID_INPUT
 * (callers validate first; the kernel checks again rather than write out of bounds). */
rg_status rg_op_kv_write(rg_backend *be, const void *k, const void *v, int ld,
			 const int32_t *slots, int n_tokens, int kv_dim, void *k_cache,
			 void *v_cache, int64_t n_slots);


/* Causal attention of a mixed batch (prefill chunks and decode tokens) over a paged KV cache:
 * out[t, head h] = softmax_k(scale * q[t, h] . K[k, h'] + bias) V[k, h'] over the keys k <= the
 * query's position p of its sequence, h' = h / (num_heads / num_kv_heads), bias 0 unless
 * d->rel_bias is set: then d->rel_bias[h * (2 rel_max + 1) + rel_max + clamp(k - p, -rel_max,
 * rel_max)] (rg_op_attention's relative position table, here with the key's and the query's
 * absolute positions: T5's decoder self-attention, whose unidirectional buckets saturate by
 * relative_attention_max_distance). d->seg and d->dis must be NULL.
 * q: n_tokens = cu_seqlens_q[n_seq] rows of num_heads * head_dim act, row stride ldq; k_cache,
 * v_cache (n_blocks * block_size, num_kv_heads * head_dim) act (after rg_op_kv_write of this step's
 * keys); out (n_tokens, num_heads * head_dim) act. Scores, softmax and the weighted sum in f32.
 * Errors: RG_ERR_INVALID_INPUT for a bad descriptor, a block id outside [0, n_blocks) or context
 * shorter than its new rows, a rel_bias with rel_max < 0, seg or dis set. CPU: one task per
 * (token, head), keys read through the table.
 * CUDA: prefill chunks of >= 16 new rows (fp16 / bf16, head_dim 32 / 64 / 128, d->k_new and
 * d->v_new set) on tensor cores (FlashAttention-2 with a causal mask, attention_tc.cu): keys from
 * this step's QKV rows when every such chunk is a fresh sequence, else every key through the block
 * table (a prompt's later chunks, the rest after a prefix-cache hit); the decode rows through the
 * table on CUDA cores (paged_attention.cu). RAGGED_PREFILL_TC=0 sends every row through the
 * table's CUDA-core kernel, "fresh" / "paged" force one tensor-core form (A/B runs). With a
 * rel_bias every row takes the CUDA-core kernel (the tensor-core kernels add no bias). */
rg_status rg_op_paged_attention(rg_backend *be, const rg_attn_desc *d, const void *q, int ldq,
				const void *k_cache, const void *v_cache, void *out);

/* Copy whole blocks inside each of n_pools pools of blocks of block_bytes bytes (copy-on-write
 * for beams and parallel samples; vLLM's copy_blocks): in pool p (at pool + p * pool_stride
 * bytes), block dst_h[i] = block src_h[i] for i < n, as if in order; src_h, dst_h host int32
 * arrays of block indices, validated by the caller. CUDA: one kernel for every pool and pair
 * (128 pairs a launch, 16-byte moves) when no dst is also a src and the pools are 16-byte
 * aligned, else one cudaMemcpyAsync per block in order; CPU: memcpy in order. Asynchronous on
 * the backend's stream. RG_ERR_INVALID_INPUT for n < 0, n_pools < 1 or NULL arrays. */
rg_status rg_op_copy_blocks(rg_backend *be, void *pool, size_t block_bytes, int n_pools,
			    size_t pool_stride, const int32_t *src_h, const int32_t *dst_h, int n);

/* Greedy choice on the device (the step's logits never leave it): for each row r of x (M, N) act,
 * ids[r] = the column of its largest value (the lowest such column on ties; NaN never wins) and,
 * when logprob != NULL, logprob[r] = its log-softmax value, x[r][ids[r]] - log(sum_j exp(x[r][j])),
 * in f32. ids (M) int32 and logprob (M) f32 in backend memory or, on CUDA, mapped pinned host
 * memory (rg_backend_host_alloc). A row of only NaN gives id 0. CUDA: a row is cut into slices
 * of 2,048 columns (at most 64; one CTA each, partials in the backend's GEMM workspace) merged by
 * one warp per row. */
RG_TEST_API rg_status rg_op_argmax_rows(rg_backend *be, const void *x, int M, int N,
					int32_t *ids, float *logprob);
/* Sampling on the device (issue 19, "On CUDA, logits processing and sampling run on the device"):
 * per row r of x (M, N) act, the chain of src/gen/sampler.h with the same order of steps, tie
 * rules and draw, so that for the same logits and uniform u the CPU twin equals the host chain:
 *   1. x converted to f32, NaN -> -inf, and no value is ever +inf: +inf and whatever
 *      overflows in steps 2-4 becomes FLT_MAX (the host chain refuses NaN and gives NaN on +inf;
 *      these are this op's own rules; finite rows that do not overflow are unaffected);
 *   2. logit bias entries bias[bias_off[r] .. bias_off[r+1]) in list order: l[token] += bias;
 *   3. penalties pen[pen_off[r] .. pen_off[r+1]) (one entry per token): repetition when
 *      count > 0 or in_prompt (l < 0 ? l * rep : l / rep), then l -= count * frequency,
 *      l -= presence when count > 0, in float32;
 *   then greedy when !(temperature > 0): the largest l, lowest id on ties, log-probs of the
 *   log-softmax of l over all N; or sampling:
 *   4. l /= temperature (when != 1);
 *   5. top-k (0 < k < N): keep l >= the k-th largest (ties at the k-th kept). The k-th largest
 *      comes from LightSeq's hierarchical retrieve-and-rerank (Wang et al. 2021, sec. 2.2):
 *      RG_SAMPLE_GROUPS strided groups, R = the k-th largest group maximum (k groups hold an
 *      element >= R, so the top k are among x >= R), retrieve the candidates >= R, rerank them
 *      (CUDA: a block radix sort of up to RG_SAMPLE_CAND; past it, and for k > RG_SAMPLE_GROUPS,
 *      an exact 4-pass 8-bit radix select of the k-th value);
 *   6. top-p (< 1): by l descending, ties by ascending id, keep each token while the mass
 *      strictly before it (exp(l - l_max) summed in float64) is < p * total (at least one);
 *      CUDA finds the cut without sorting: a 4-pass radix search over the float keys for the
 *      value K with mass(> K) < p * total <= mass(>= K), then the ties at K in id order;
 *   7. min-p (> 0): drop exp(l - l_max) < min_p (float64);
 *   8. draw: walk the survivors (l > -inf) in ascending id order summing exp(l - l_max) in
 *      float64 and take the first whose running sum exceeds u * total (the last if none).
 * Outputs: ids[r] (int32), logprobs[r] (f32) = l[id] - log-sum-exp over the survivors (the
 * processed distribution, as rg_sampler_sample), and when top_n > 0 top_ids / top_logprobs
 * (M, top_n) the top_n survivors by l descending, ties by id (id -1, -inf past the survivors).
 * A row whose values are all -inf/NaN gives id 0 and log-prob NaN.
 * CUDA (sample.cu's header has the costs): greedy rows and rows with 1 <= top_k <= 64 take a
 * two-stage path (slices of ~2048 columns per CTA, then one CTA per row merging the slices'
 * candidates; 18-30 us for 1-16 rows of 50257 on an H200), other rows (top-p over the whole
 * vocabulary, a tie at the k-th value) one CTA per row over the whole row (RAGGED_SAMPLE_FAST=0:
 * every row); float64 sums in another order than the host's, so a draw or cut that falls within
 * rounding (~1e-16 relative) of a boundary may differ from the CPU twin. */
#define RG_SAMPLE_MAX_TOP 20   /* top_n limit */
#define RG_SAMPLE_GROUPS 512   /* strided groups of the hierarchical top-k (CUDA threads) */
#define RG_SAMPLE_CAND 4096    /* candidates the CUDA rerank sorts in shared memory */

typedef struct rg_sample_row {
	double u;                 /* uniform draw in [0, 1) from the request's rg_rng */
	float temperature;        /* not > 0: greedy */
	float top_p;              /* (0, 1]; 1: off */
	float min_p;              /* [0, 1]; 0: off */
	float repetition_penalty; /* > 0; 1: off */
	float presence_penalty;
	float frequency_penalty;
	int32_t top_k;            /* 0: off */
	int32_t reserved;         /* 0 */
} rg_sample_row;

typedef struct rg_sample_pen {
	int32_t token;     /* in [0, N); entries with a token outside are skipped */
	int32_t count;     /* occurrences among the generated tokens, >= 0 */
	int32_t in_prompt; /* nonzero: the token is in the prompt */
} rg_sample_pen;

typedef struct rg_sample_bias {
	int32_t token;     /* in [0, N); entries with a token outside are skipped */
	float bias;        /* added to the logit */
} rg_sample_bias;

typedef struct rg_sample_args {
	const rg_sample_row *rows;  /* (M) backend memory */
	const int32_t *pen_off;     /* (M + 1) backend, non-decreasing, or NULL: no penalties */
	const rg_sample_pen *pen;   /* (pen_off[M]) backend */
	const int32_t *bias_off;    /* (M + 1) backend, or NULL: no bias */
	const rg_sample_bias *bias; /* (bias_off[M]) backend */
	int top_n;                  /* [0, RG_SAMPLE_MAX_TOP] */
	void *work;                 /* rg_sample_work_bytes(M, N) bytes of backend memory */
	int32_t *ids;               /* (M) backend or, on CUDA, mapped pinned memory */
	float *logprobs;            /* (M) same, or NULL */
	int32_t *top_ids;           /* (M, top_n) same, or NULL when top_n is 0 */
	float *top_logprobs;        /* (M, top_n) same, or NULL when top_n is 0 */
	/* structured outputs (issue 31): (M, (N + 63) / 64) backend, or NULL: no mask; column j of
	 * row r is allowed when bit j & 63 of word r * ((N + 63) / 64) + (j >> 6) is set, and a
	 * column not allowed loads as -inf (step 1, so bias and penalties leave it -inf: the host
	 * chain's -inf after its steps). Last, so positional initializers may leave it out. */
	const uint64_t *mask;
} rg_sample_args;

/* Workspace of rg_op_sample_rows: (M, N) f32 processed logits and (M, N) int32 candidates. */
RG_TEST_API size_t rg_sample_work_bytes(int M, int N);
RG_TEST_API rg_status rg_op_sample_rows(rg_backend *be, const void *x, int M, int N,
					const rg_sample_args *a);
/* The k largest of each row of x (M, N) act: idx (M, k) int32 and val (M, k) f32 (val may be
 * NULL), by value descending, ties by ascending column (a stable full sort's order), 1 <= k <= N;
 * x holds no NaN. method RG_TOPK_HIER: LightSeq's hierarchical retrieve-and-rerank (the top-k of
 * rg_op_sample_rows, see above); RG_TOPK_SORT: a full sort of each row (CUDA: CUB's segmented
 * radix sort; the reference and the benchmark's baseline). work: rg_topk_work_bytes(M, N).
 * CUDA: RG_TOPK_HIER is one CTA per row; k > RG_SAMPLE_GROUPS or more than RG_SAMPLE_CAND
 * candidates (tie-heavy rows) take an exact radix select, then the rerank. */
typedef enum rg_topk_method { RG_TOPK_HIER = 0, RG_TOPK_SORT = 1 } rg_topk_method;
RG_TEST_API size_t rg_topk_work_bytes(int M, int N);
RG_TEST_API rg_status rg_op_topk_rows(rg_backend *be, const void *x, int M, int N, int k,
				      rg_topk_method method, void *work, int32_t *idx, float *val);
#endif
