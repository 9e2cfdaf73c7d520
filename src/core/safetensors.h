/* Validating reader for Hugging Face safetensors files (single file or sharded with
 * model.safetensors.index.json).
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data region. Each file is read whole into memory with pread (not mapped: a file
 * truncated while in use would be SIGBUS under a mapping, here it is a short read and RG_ERR_IO);
 * the copy is freed with the rg_st. Everything is validated at open time, before any tensor is used:
 *   - N bounded (<= 100 MiB) and 8 + N <= file size; header is valid UTF-8 JSON object;
 *   - dtype one of F32/F16/BF16 (others -> RG_ERR_UNSUPPORTED naming tensor and dtype);
 *   - shape entries non-negative, product * element size == end - begin (no overflow);
 *   - 0 <= begin <= end <= data size; ranges of different tensors do not overlap;
 *   - no tensor name twice (in one header, or across shards).
 * Exception: integer buffers named "position_ids" / "token_type_ids" (or ending in
 * ".position_ids" / ".token_type_ids"; older transformers versions save BertEmbeddings'
 * position_ids as I64) are validated like every tensor, then left out of the table: rg_st_find
 * returns NULL for them and rg_st_count does not count them.
 * Errors carry a message naming the file and the offending tensor:
 *   RG_ERR_IO      file or shard missing / unreadable / not a regular file (a FIFO is refused
 *                  without blocking) / shrank while read;
 *   RG_ERR_FORMAT  anything malformed (lengths, JSON, shapes, offsets, overlap, duplicates, index);
 *   RG_ERR_UNSUPPORTED  unsupported or unknown dtype, more than RG_ST_MAX_DIMS dimensions;
 *   RG_ERR_OOM.
 * Tensor data is only as aligned as the writer made it (writers pad the header to 8 bytes, so
 * F32 data is normally 4-byte aligned); rg_st_to_f32 works for any alignment. */
#ifndef RG_CORE_SAFETENSORS_H
#define RG_CORE_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "core/export.h"
#include "ragged.h"

#define RG_ST_MAX_DIMS 8

typedef struct rg_st_tensor {
	char *name;                      /* owned by the rg_st */
	rg_dtype dtype;                  /* F32 / F16 / BF16 */
	int ndim;
	int64_t shape[RG_ST_MAX_DIMS];
	const void *data;                /* points into the rg_st's copy of the file */
	size_t nbytes;
} rg_st_tensor;

typedef struct rg_st rg_st;

/* Open one .safetensors file. *out owned by caller, free with rg_st_free. */
rg_status rg_st_open_file(const char *path, rg_st **out);

/* Open a model directory: model.safetensors if present, else model.safetensors.index.json and every
 * shard it names (each validated; a tensor named in the index must be in the shard the index says). */
rg_status rg_st_open_dir(const char *dir, rg_st **out);

/* Lookup by exact name; NULL when absent. */
const rg_st_tensor *rg_st_find(const rg_st *st, const char *name);

size_t rg_st_count(const rg_st *st);
const rg_st_tensor *rg_st_at(const rg_st *st, size_t i);

/* Convert a tensor's elements to float32 into dst (numel floats, caller-owned). Exact: F16 as
 * IEEE 754 binary16 (subnormals, +-inf, NaN kept), BF16 as the top 16 bits of a binary32. */
void rg_st_to_f32(const rg_st_tensor *t, float *dst);
/* IEEE 754 binary16 -> binary32, exact for every input. */
float rg_half_to_float(uint16_t h);
/* Widen n 16-bit floats (dt F16 or BF16) that sit in the second half of buf (bytes [2n, 4n) of
 * a 4n-byte buffer, e.g. downloaded there) into n float32 at its start, in place: element i's
 * source is read before its 4 bytes (4i) are written, and those never reach a later source. */
RG_TEST_API void rg_widen16_tail(void *buf, size_t n, rg_dtype dt);

/* Number of elements (product of shape). */
size_t rg_st_numel(const rg_st_tensor *t);

/* Frees the tables and the file copies. Accepts NULL. */
void rg_st_free(rg_st *st);
#endif
