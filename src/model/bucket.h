/* Buckets of packed encoder batches for CUDA graphs (model.c's graph path): pure policy, no
 * backend, so that it is tested on its own (tests/unit/test_bucket.c).
 *
 * A packed batch of n tokens in n_seq sequences whose longest has max_len tokens runs in the
 * bucket (T, S, L) that rounds each up; one CUDA graph is captured per bucket and replayed for
 * every later batch of it (model.c). Tokens n..T are padding rows, sequences n_seq..S have length
 * 0, L only sizes the attention grid.
 *
 *   T  n rounded up to 16 (n <= 256), 64 (<= 4096), 256 (<= 16384), else 1024 -- at most ~6%
 *      padding past 1024 tokens, ~3% past 2048 --, capped at max_tokens;
 *   S  the next power of two >= n_seq; with an envelope (env_seqs > 0) at least
 *      rg_bucket_env_seqs(T): so every batch of the envelope (below) in token bucket T shares one
 *      S, and the token buckets alone decide how many graphs a server needs; capped at max_seq;
 *   L  the next power of two >= max(max_len, 64), capped at max_len_model (and never below
 *      max_len).
 *
 * The envelope: batches of at most env_seqs sequences averaging at least RG_BUCKET_MIN_AVG_LEN
 * tokens each. Without it, S follows n_seq alone, and one token bucket holds up to
 * log2(max_seq) graphs; a server's batch sizes wander over all of them (bench/results/
 * short_requests_h200_20261126-0258.md: 103 captures in a 10 s step at a fixed rate). With it,
 * rg_bucket_ladder enumerates every bucket such a batch can fall in (one per token bucket and
 * longest-length bucket), which rg_model_graph_warmup captures before serving. The price: the
 * attention and pooling grids run over S rows of which n_seq are real (the rest exit at once);
 * S <= T / RG_BUCKET_MIN_AVG_LEN rounded up, and <= env_seqs rounded up. */
#ifndef RG_MODEL_BUCKET_H
#define RG_MODEL_BUCKET_H

#define RG_BUCKET_MIN_AVG_LEN 8 /* envelope: sequences average at least this many tokens */

typedef struct rg_bucket_policy {
	int max_tokens;    /* the model's max_batch_tokens (>= 1): T never exceeds it */
	int max_len_model; /* the model's max_seq_len (>= 1): L never exceeds it */
	int max_seq;       /* most sequences a bucket holds (>= 1; the pinned output rows) */
	int env_seqs;      /* the envelope's most sequences per batch; 0: no envelope */
} rg_bucket_policy;

typedef struct rg_bucket {
	int T, S, L; /* tokens, sequences, longest sequence */
} rg_bucket;

/* The bucket of a batch of n tokens (1 <= n <= max_tokens) in n_seq sequences (1 <= n_seq <=
 * min(n, max_seq)) whose longest has max_len tokens (1 <= max_len <= min(n, max_len_model)). */
rg_bucket rg_bucket_of(const rg_bucket_policy *p, int n, int n_seq, int max_len);

/* The envelope's least S for token bucket T: min(pow2 >= ceil(T / RG_BUCKET_MIN_AVG_LEN),
 * pow2 >= env_seqs, max_seq); 0 without an envelope. */
int rg_bucket_env_seqs(const rg_bucket_policy *p, int T);

/* The token bucket after T (0 <= T < max_tokens; 0 gives the first), or 0 past max_tokens. */
int rg_bucket_next_tokens(const rg_bucket_policy *p, int T);

/* Every bucket of the envelope whose longest-length bucket is at most rg_bucket_of's L for
 * max_len (1 <= max_len <= max_len_model), in increasing (T, L) order: for each token bucket T,
 * S = rg_bucket_env_seqs(T), and each L some batch of the envelope in T reaches (its lengths in
 * L's range fit T tokens and S sequences). Writes at most cap of them into out (out may be NULL
 * with cap 0) and returns how many there are (call twice to size out); 0 without an envelope. */
int rg_bucket_ladder(const rg_bucket_policy *p, int max_len, rg_bucket *out, int cap);

/* A batch of the envelope that falls in bucket b of rg_bucket_ladder: *n tokens in *n_seq
 * sequences, lens[i] tokens each (lens: room for b.S), the longest first. */
void rg_bucket_example(const rg_bucket_policy *p, rg_bucket b, int *n, int *n_seq, int *lens);
#endif
