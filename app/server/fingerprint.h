/* Model fingerprint: a SHA-256 over the bytes that decide a model's vectors, for keys that must
 * change when the model changes in place (the response cache's database, the DP cost table's
 * per-user cache).
 *
 * Hashed, in this order, each as (name, NUL, 8-byte little-endian size, bytes) or (name, NUL,
 * "absent"): config.json, tokenizer.json, vocab.txt, tokenizer_config.json,
 * special_tokens_map.json, modules.json, sentence_bert_config.json,
 * config_sentence_transformers.json, 1_Pooling/config.json, model.safetensors.index.json, then
 * every *.safetensors file of the directory in name order (the single file or all shards).
 *
 * The weights are hashed in full, not sampled: a sample (the headers and a few pages) would miss
 * a fine-tune of one layer saved with the same shapes, which is exactly the in-place change to
 * catch. SHA-256 (OpenSSL libcrypto, SHA-NI where the CPU has it) runs at 1-2 GB/s, so the
 * 90 MB of all-MiniLM-L6-v2 cost ~0.05-0.1 s at start, read from the page cache the load just
 * filled. Every file is opened with rg_file_open_regular (a FIFO is refused, never waited on). */
#ifndef RG_SERVER_FINGERPRINT_H
#define RG_SERVER_FINGERPRINT_H
#include "ragged.h"

/* Write the fingerprint of model directory dir to out as 64 lowercase hex digits + NUL.
 * Errors: RG_ERR_IO (a listed file present but unreadable or not a regular file; the message
 * names it), RG_ERR_OOM. */
rg_status rg_model_fingerprint(const char *dir, char out[65]);
#endif
