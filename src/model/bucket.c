/* Buckets of packed encoder batches for CUDA graphs; see bucket.h. */
#include "model/bucket.h"

#include <stddef.h>

static int pow2_at_least(int x)
{
	int p = 1;

	while (p < x)
		p *= 2;
	return p;
}

static int min_int(int a, int b)
{
	return a < b ? a : b;
}

int rg_bucket_env_seqs(const rg_bucket_policy *p, int T)
{
	int s;

	if (p->env_seqs <= 0)
		return 0;
	s = pow2_at_least((T + RG_BUCKET_MIN_AVG_LEN - 1) / RG_BUCKET_MIN_AVG_LEN);
	s = min_int(s, pow2_at_least(p->env_seqs));
	return min_int(s, p->max_seq);
}

rg_bucket rg_bucket_of(const rg_bucket_policy *p, int n, int n_seq, int max_len)
{
	int q = n <= 256 ? 16 : n <= 4096 ? 64 : n <= 16384 ? 256 : 1024;
	int t = (n + q - 1) / q * q, s = pow2_at_least(n_seq), l = pow2_at_least(max_len);
	rg_bucket b;

	b.T = min_int(t, p->max_tokens);
	if (s < rg_bucket_env_seqs(p, b.T))
		s = rg_bucket_env_seqs(p, b.T);
	/* never more rows than the staging and pinned output buffers hold */
	b.S = min_int(s, p->max_seq);
	b.L = min_int(l < 64 ? 64 : l, p->max_len_model);
	if (b.L < max_len)
		b.L = max_len;
	return b;
}

int rg_bucket_next_tokens(const rg_bucket_policy *p, int T)
{
	if (T >= p->max_tokens)
		return 0;
	return rg_bucket_of(p, T + 1, 1, 1).T;
}

/* A witness that some batch of the envelope falls in (T, S_env(T), Lb), where prev is the token
 * bucket before T and [lo, Lb] the longest lengths that round to Lb: the first n from T down
 * with the fewest sequences of at most min(Lb, n) tokens. *n 0: none. */
static void witness(const rg_bucket_policy *p, int prev, int T, int lo, int Lb, int *n,
		    int *n_seq, int *ml)
{
	for (int k = T; k > prev; k--) {
		int m = min_int(Lb, k), s = (k + m - 1) / m;
		rg_bucket b;

		if (m < lo || s > p->env_seqs || s > p->max_seq)
			continue;
		b = rg_bucket_of(p, k, s, m);
		if (b.T == T && b.S == rg_bucket_env_seqs(p, T) && b.L == Lb) {
			*n = k, *n_seq = s, *ml = m;
			return;
		}
	}
	*n = 0;
}

/* Calls fn(b, prev, lo, arg) for each bucket of the ladder up to longest-length bucket Lmax; stops
 * when fn returns nonzero. Returns the buckets visited. */
static int ladder_walk(const rg_bucket_policy *p, int Lmax,
		       int (*fn)(rg_bucket b, int prev, int lo, void *arg), void *arg)
{
	int count = 0;

	if (p->env_seqs <= 0)
		return 0;
	for (int prev = 0, T = rg_bucket_next_tokens(p, 0); T > 0;
	     prev = T, T = rg_bucket_next_tokens(p, T)) {
		for (int l = 64;; l *= 2) {
			int Lb = min_int(l, p->max_len_model), lo = l == 64 ? 1 : l / 2 + 1;
			int n, s, m;
			rg_bucket b;

			if (lo > p->max_len_model || Lb > Lmax)
				break;
			witness(p, prev, T, lo, Lb, &n, &s, &m);
			if (n > 0) {
				b.T = T, b.S = rg_bucket_env_seqs(p, T), b.L = Lb;
				count++;
				if (fn && fn(b, prev, lo, arg))
					return count;
			}
			if (Lb >= p->max_len_model)
				break;
		}
	}
	return count;
}

typedef struct ladder_out {
	rg_bucket *out;
	int cap, n;
} ladder_out;

static int ladder_put(rg_bucket b, int prev, int lo, void *arg)
{
	ladder_out *o = arg;

	(void)prev, (void)lo;
	if (o->n < o->cap)
		o->out[o->n] = b;
	o->n++;
	return 0;
}

int rg_bucket_ladder(const rg_bucket_policy *p, int max_len, rg_bucket *out, int cap)
{
	ladder_out o = {out, out ? cap : 0, 0};

	return ladder_walk(p, rg_bucket_of(p, max_len, 1, max_len).L, ladder_put, &o);
}

typedef struct example_find {
	rg_bucket want;
	int prev, lo;
	int found;
} example_find;

static int example_match(rg_bucket b, int prev, int lo, void *arg)
{
	example_find *f = arg;

	if (b.T != f->want.T || b.S != f->want.S || b.L != f->want.L)
		return 0;
	f->prev = prev, f->lo = lo, f->found = 1;
	return 1;
}

void rg_bucket_example(const rg_bucket_policy *p, rg_bucket b, int *n, int *n_seq, int *lens)
{
	example_find f = {b, 0, 0, 0};
	int m = 0;

	*n = *n_seq = 0;
	ladder_walk(p, b.L, example_match, &f);
	if (!f.found)
		return;
	witness(p, f.prev, b.T, f.lo, b.L, n, n_seq, &m);
	for (int i = 0, left = *n; i < *n_seq; i++, left -= m)
		lens[i] = min_int(m, left);
}
