/* Response cache of `ragged serve` (TurboTransformers, PPoPP'21, sec. 5: identical requests are
 * answered from a cache instead of the model).
 *
 * One entry per input sequence: key = (model tag, token ids after truncation), value = the model's
 * output vector (hidden_size float32, before any server-side normalization). Keying on token ids
 * rather than text lets a text input and the equivalent token-id input share an entry, and makes
 * options that do not change the model output (normalize, encoding_format) not part of the key.
 *
 * In memory: an LRU of at most `capacity` entries (chained hash map on FNV-1a 64 of the key +
 * doubly-linked recency list). The stored ids are compared on every hit, so a hash collision can
 * never return a wrong vector. Optionally backed by SQLite in WAL mode (db_path): a RAM miss
 * looks in SQLite, and every put is queued for a writer thread. Thread-safe.
 *
 * The database (shared by restarts and by several models: rows carry the model tag):
 *  - the caller makes model_tag a fingerprint of the model's bytes (weights, tokenizer, configs)
 *    and of the settings that change its vectors (device, dtype), never a path alone, so a
 *    model changed in place never gets another model's vectors;
 *  - writes are off the caller's thread: rg_cache_put copies the entry into a bounded queue
 *    (at most min(capacity, 4096) entries; a full queue drops the write) that one writer thread
 *    commits in one transaction per round. A database locked by another process stalls the
 *    writer (1 s per try), never the engine; reads wait at most 5 ms for a lock, then miss;
 *  - pruned to `capacity` rows (all models together, least recently written or read first) in
 *    the same transaction as each round of writes, and once at open;
 *  - a file that is not a sound database (garbage, failed quick_check) is moved aside to
 *    "<db_path>.corrupt-<unix time>" with a warning on stderr, and an empty one is created.
 * rg_cache_free commits what is queued before it returns. */
#ifndef RG_SERVER_CACHE_H
#define RG_SERVER_CACHE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ragged.h"

typedef struct rg_cache rg_cache;

/* capacity: entries in RAM and rows in the database (>= 1); dim: floats per vector; model_tag:
 * identifies the model's bytes and settings (copied); db_path: SQLite file or NULL for RAM only. Returns NULL and sets *st
 * (RG_ERR_INVALID_INPUT, RG_ERR_OOM, RG_ERR_IO with rg_last_error()) on failure. */
rg_cache *rg_cache_create(size_t capacity, int dim, const char *model_tag, const char *db_path,
			  rg_status *st);
void rg_cache_free(rg_cache *c); /* accepts NULL */

/* Copy the vector for ids[0..n) into out (dim floats) and return true on a hit. */
bool rg_cache_get(rg_cache *c, const int32_t *ids, size_t n, float *out);
/* Insert or refresh; evicts the least recently used entry when full. OOM is ignored (a cache). */
void rg_cache_put(rg_cache *c, const int32_t *ids, size_t n, const float *vec);
/* Entries in RAM. */
size_t rg_cache_size(rg_cache *c);
#endif
