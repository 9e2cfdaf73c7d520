/* Validating reader for GGUF files (v3 as llama.cpp writes it; v2 is the same layout and accepted).
 * Format reference: ggml/docs/gguf.md and ggml/src/gguf.cpp (llama.cpp); the `gguf` Python
 * package (gguf_reader.py, constants.py) for the type numbering and block sizes.
 *
 * Layout (all little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv metadata entries
 * (string key, u32 value type, value); n_tensors tensor infos (string name, u32 n_dims,
 * u64 ne[n_dims], u32 ggml type, u64 offset); padding to general.alignment (default 32); the data
 * section, each tensor at data_start + offset. A string is u64 length + bytes (no NUL); an array
 * is u32 element type + u64 count + elements.
 *
 * Like the safetensors reader, the file is read whole into a private 64-byte-aligned copy with
 * pread, not mapped: a file truncated or rewritten while in use would be SIGBUS under a mapping;
 * here it is a short read and RG_ERR_IO. Everything is validated in rg_gguf_open, before any
 * value or tensor is handed out:
 *   - magic, version (2 or 3; a byte-swapped version names big-endian files), n_kv and n_tensors
 *     bounded by what the file could hold (every entry has a minimum size);
 *   - every string and array length bounded by the bytes left; value types known; arrays of
 *     arrays refused; bool values 0 or 1; keys and tensor names without NUL bytes; no key and no
 *     tensor name twice;
 *   - general.alignment, when present, an integer power of two that fits u32;
 *   - per tensor: 0 <= n_dims <= 4, every ne in [1, INT64_MAX], the element count and byte size
 *     without overflow, ne[0] a multiple of the type's block size, the ggml type known (its
 *     number appears in ggml's table), offset a multiple of the alignment, the bytes inside the
 *     file, and no two tensors overlapping.
 * Errors from rg_gguf_open (message names the file and, where there is one, the entry / tensor):
 *   RG_ERR_IO      missing, unreadable, not a regular file, shrank while read;
 *   RG_ERR_FORMAT  anything malformed, truncated or lying (including unknown tensor types);
 *   RG_ERR_OOM.
 * Tensor types that ggml knows but rg_gguf_to_f32 cannot dequantize (Q2_K, IQ*, ...) open fine,
 * so the metadata (tokenizer) of any GGUF is readable; rg_gguf_to_f32 refuses them with
 * RG_ERR_UNSUPPORTED naming the tensor and type.
 *
 * Strings (keys, string values, string-array elements, tensor names) are copied out with a NUL
 * terminator (the length is still reported: a value may contain NUL bytes) and live as long as
 * the rg_gguf. Lookups are binary searches over sorted indexes (O(log n)); array elements are
 * O(1) each (string arrays have their offsets precomputed at open).
 * Not thread-safe to open/close concurrently with use; concurrent readers of an open rg_gguf are
 * fine (nothing is mutated after open). Assumes a little-endian host, as ggml does. */
#ifndef RG_CORE_GGUF_H
#define RG_CORE_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/export.h"
#include "ragged.h"

#define RG_GGUF_MAX_DIMS 4
#define RG_GGUF_DEFAULT_ALIGNMENT 32

typedef struct rg_gguf rg_gguf;

/* ggml tensor types, llama.cpp's numbering (ggml.h enum ggml_type). The ones rg_gguf_to_f32
 * dequantizes; any other number ggml defines is accepted at open (see rg_gguf_type_name). */
typedef enum rg_gguf_type {
	RG_GGUF_F32 = 0,
	RG_GGUF_F16 = 1,
	RG_GGUF_Q4_0 = 2,
	RG_GGUF_Q4_1 = 3,
	RG_GGUF_Q5_0 = 6,
	RG_GGUF_Q5_1 = 7,
	RG_GGUF_Q8_0 = 8,
	RG_GGUF_Q4_K = 12,
	RG_GGUF_Q5_K = 13,
	RG_GGUF_Q6_K = 14,
	RG_GGUF_BF16 = 30,
} rg_gguf_type;

/* Metadata value types (gguf.md, enum gguf_metadata_value_type). */
typedef enum rg_gguf_vtype {
	RG_GGUF_VT_UINT8 = 0,
	RG_GGUF_VT_INT8 = 1,
	RG_GGUF_VT_UINT16 = 2,
	RG_GGUF_VT_INT16 = 3,
	RG_GGUF_VT_UINT32 = 4,
	RG_GGUF_VT_INT32 = 5,
	RG_GGUF_VT_FLOAT32 = 6,
	RG_GGUF_VT_BOOL = 7,
	RG_GGUF_VT_STRING = 8,
	RG_GGUF_VT_ARRAY = 9,
	RG_GGUF_VT_UINT64 = 10,
	RG_GGUF_VT_INT64 = 11,
	RG_GGUF_VT_FLOAT64 = 12,
} rg_gguf_vtype;

typedef struct rg_gguf_tensor {
	const char *name;   /* NUL-terminated, owned by the rg_gguf */
	int n_dims;         /* 0..4 as stored; ne[i] = 1 for i >= n_dims */
	int64_t ne[4];      /* ggml order: ne[0] is the fastest (row length); the numpy/PyTorch shape
			     * is ne reversed, (ne[n_dims-1], ..., ne[0]) */
	uint32_t type;      /* ggml type number (rg_gguf_type for the dequantizable ones) */
	const void *data;   /* nbytes, inside the rg_gguf's copy of the file; aligned to
			     * min(general.alignment, 64) bytes */
	size_t nbytes;      /* ne[0]/block_size * type_size * ne[1] * ne[2] * ne[3] */
	int64_t numel;      /* ne[0] * ne[1] * ne[2] * ne[3] */
} rg_gguf_tensor;

/* Open and validate path (see the contract above). *out owned by the caller, free with
 * rg_gguf_close; NULL on error. */
RG_TEST_API rg_status rg_gguf_open(const char *path, rg_gguf **out);
/* Accepts NULL. */
RG_TEST_API void rg_gguf_close(rg_gguf *g);

/* The file's GGUF version (2 or 3) and alignment (general.alignment or 32). */
RG_TEST_API uint32_t rg_gguf_version(const rg_gguf *g);
RG_TEST_API uint32_t rg_gguf_alignment(const rg_gguf *g);

/* ---- metadata ----
 * Getters: RG_ERR_INVALID_INPUT (message names the key) when the key is absent (use rg_gguf_has
 * for optional keys) or an array index is out of range; RG_ERR_FORMAT when the stored type does
 * not convert (message names key, stored type and wanted type). Returned strings are owned by g,
 * NUL-terminated, len excludes the NUL. */
RG_TEST_API bool rg_gguf_has(const rg_gguf *g, const char *key);
/* Number of metadata entries, and the i-th key in file order (NULL when out of range). */
RG_TEST_API int rg_gguf_n_kv(const rg_gguf *g);
RG_TEST_API const char *rg_gguf_kv_key(const rg_gguf *g, int i);
/* Stored value type (rg_gguf_vtype) of key. */
RG_TEST_API rg_status rg_gguf_get_type(const rg_gguf *g, const char *key, uint32_t *type);
/* Any integer type whose value fits (u8..u64, i8..i64); bool is not an integer. */
RG_TEST_API rg_status rg_gguf_get_u32(const rg_gguf *g, const char *key, uint32_t *out);
RG_TEST_API rg_status rg_gguf_get_i64(const rg_gguf *g, const char *key, int64_t *out);
RG_TEST_API rg_status rg_gguf_get_u64(const rg_gguf *g, const char *key, uint64_t *out);
/* f32, or f64 rounded to nearest float. */
RG_TEST_API rg_status rg_gguf_get_f32(const rg_gguf *g, const char *key, float *out);
RG_TEST_API rg_status rg_gguf_get_bool(const rg_gguf *g, const char *key, bool *out);
RG_TEST_API rg_status rg_gguf_get_str(const rg_gguf *g, const char *key, const char **s,
				      size_t *len);
/* Arrays: element type (rg_gguf_vtype; never ARRAY) and count. RG_ERR_FORMAT when key is not an
 * array. elem_type and n may be NULL. */
RG_TEST_API rg_status rg_gguf_get_arr(const rg_gguf *g, const char *key, uint32_t *elem_type,
				      uint64_t *n);
/* Element i of a string array. O(1). len may be NULL. */
RG_TEST_API rg_status rg_gguf_arr_str(const rg_gguf *g, const char *key, uint64_t i,
				      const char **s, size_t *len);
/* Element i of an integer array as int32: i32, or any other integer type whose value fits. */
RG_TEST_API rg_status rg_gguf_arr_i32(const rg_gguf *g, const char *key, uint64_t i,
				      int32_t *out);
/* Element i of any integer array as int64 (u64 values above INT64_MAX are RG_ERR_FORMAT). */
RG_TEST_API rg_status rg_gguf_arr_int(const rg_gguf *g, const char *key, uint64_t i,
				      int64_t *out);
/* Element i of an f32 or f64 array as float. */
RG_TEST_API rg_status rg_gguf_arr_f32(const rg_gguf *g, const char *key, uint64_t i,
				      float *out);

/* ---- tensors ---- */
RG_TEST_API int rg_gguf_n_tensors(const rg_gguf *g);
/* i-th tensor in file order; NULL when out of range. */
RG_TEST_API const rg_gguf_tensor *rg_gguf_tensor_at(const rg_gguf *g, int i);
/* Lookup by exact name, O(log n); NULL if absent. */
RG_TEST_API const rg_gguf_tensor *rg_gguf_find(const rg_gguf *g, const char *name);

/* Name of a ggml type ("Q4_K"), NULL for a number ggml does not define. */
RG_TEST_API const char *rg_gguf_type_name(uint32_t type);
/* Block size (elements) and bytes per block of a ggml type; false for an unknown number. */
RG_TEST_API bool rg_gguf_type_size(uint32_t type, int64_t *block_size, size_t *type_size);

/* Dequantize a whole tensor (t->numel values, in storage order: ne[0] fastest) to float32 into
 * out (caller-owned, numel floats). Bit-identical to gguf.quants.dequantize of the `gguf` Python
 * package (0.19) and to ggml's dequantize_row_* (one float32 rounding per multiply and per
 * add/subtract, never fused: -std=c11 turns contraction off). F16 and BF16 widen exactly.
 * RG_ERR_UNSUPPORTED (naming tensor and type) for types other than F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; RG_ERR_INVALID_INPUT for NULL arguments. */
RG_TEST_API rg_status rg_gguf_to_f32(const rg_gguf_tensor *t, float *out);

/* Quantize n floats x (n % 32 == 0; a weight row's K values, rows one after another) to n / 32
 * Q8_0 blocks of 34 bytes each into dst (caller-owned, n / 32 * 34 bytes, no alignment needed):
 * per block d = max|x| / 127 as fp16 (round to nearest even), then q[j] = roundf(x[j] / d) as
 * int8, with 1 / d taken from the float32 d before its fp16 rounding -- ggml-quants.c
 * quantize_row_q8_0_ref, and bit-identical to gguf.quants.quantize(x, Q8_0) of the `gguf` Python
 * package (its Q8_0.quantize_blocks, float32 throughout); an all-zero block gets d = 0, q = 0.
 * A non-finite input gives whatever those formulas give (no check). Errors: none (n not a
 * multiple of 32 is a broken invariant of the caller: the tail is ignored). */
RG_TEST_API void rg_gguf_quantize_q8_0(const float *x, int64_t n, void *dst);
/* IEEE 754 binary32 -> binary16, round to nearest even (overflow to inf, subnormals kept, NaN
 * stays NaN): NumPy's astype(np.float16). */
RG_TEST_API uint16_t rg_float_to_half(float f);
#endif
