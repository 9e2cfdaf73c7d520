/* grammar_row_host.c: host time of one constrained row's draw (src/gen/engine.c's host_sample,
 * issue 31 item 1) over SmolLM2's 49152-token vocabulary, one thread: the path before 0ce7988
 * (the row's masked logits set to -inf, then rg_sampler_sample over all V) against the paths
 * after it (the allowed set as a bitmask, then rg_sampler_masked_argmax for greedy, or
 * rg_token_array_fill_masked + rg_sampler_sample_cand for a sampling chain). The masks are the
 * real ones of grammar_overhead.py's grammars at a state inside their output. Both columns call
 * the library as built: "before" is the old masking around today's sampler (since 9bb093e its
 * dist step computes each exp once), so the sampled columns compare the masking only.
 * Tokens: a JSON list of GPT-2 byte-level token strings, decompressed
 * (xz -dc /tmp/smollm2_tokens.json.xz > /tmp/smollm2_tokens.json; grammar_overhead.py
 * --extract writes the .xz).
 * Build: make build/bench_grammar_row   Run: build/bench_grammar_row /tmp/smollm2_tokens.json
 * Output: a table, us per row, the best of 7 runs of 200 rows each. Exit status 1 on an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "core/error.h"
#include "core/rng.h"
#include "gen/grammar.h"
#include "gen/sampler.h"

#define ROWS 200
#define RUNS 7

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + 1e-3 * (double)t.tv_nsec;
}

/* GPT-2's bytes_to_unicode inverted: code point -> byte, -1 if none */
static int byte_of(unsigned cp)
{
	static int tab[324];
	static int init;

	if (!init) {
		int n = 0;

		for (int i = 0; i < 324; i++)
			tab[i] = -1;
		for (int b = 0; b < 256; b++) {
			if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
				tab[b] = b;
			else
				tab[256 + n++] = b;
		}
		init = 1;
	}
	return cp < 324 ? tab[cp] : -1;
}

/* token string (UTF-8 of byte-level code points) -> bytes; returns the length */
static size_t decode(const char *s, char *out)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		unsigned cp;
		int b;

		if (*p < 0x80)
			cp = *p++;
		else if ((*p & 0xe0) == 0xc0)
			cp = (unsigned)(p[0] & 0x1f) << 6 | (p[1] & 0x3f), p += 2;
		else if ((*p & 0xf0) == 0xe0)
			cp = (unsigned)(p[0] & 0x0f) << 12 | (unsigned)(p[1] & 0x3f) << 6 | (p[2] & 0x3f),
			p += 3;
		else
			cp = 0x110000, p += 4;
		if ((b = byte_of(cp)) < 0)
			return 0; /* a special token: no bytes */
		out[n++] = (char)b;
	}
	return n;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* the old engine's grammar_mask (EOS handling left out: none here) + rg_sampler_sample */
static void old_row(rg_sampler *s, const float *src, float *row, const uint64_t *m, int V,
		    rg_rng *rng, rg_token_array *work, int32_t *id, float *lp)
{
	int n_ok = 0;

	memcpy(row, src, (size_t)V * sizeof(float));
	for (int v = 0; v < V; v++) {
		if (m[v >> 6] >> (v & 63) & 1)
			n_ok++;
		else
			row[v] = -INFINITY;
	}
	if (!n_ok || rg_sampler_sample(s, row, V, rng, work, 0, id, lp, NULL, NULL) != RG_OK)
		exit(1);
}

/* the new engine's grammar_allowed (copy + popcount) + the draw */
static void new_row(rg_sampler *s, bool greedy, const float *src, float *row, const uint64_t *m,
		    uint64_t *bits, int V, rg_rng *rng, rg_token_array *work, int32_t *id,
		    float *lp)
{
	const int words = (V + 63) / 64;
	int n_ok = 0;

	memcpy(row, src, (size_t)V * sizeof(float)); /* as the old path, for the same cost */
	memcpy(bits, m, (size_t)words * sizeof(uint64_t));
	for (int w = 0; w < words; w++)
		n_ok += __builtin_popcountll(bits[w]);
	if (!n_ok)
		exit(1);
	if (greedy) {
		if (rg_sampler_masked_argmax(row, V, bits, id, lp) != RG_OK)
			exit(1);
		return;
	}
	rg_token_array_fill_masked(work, row, V, bits);
	if (rg_sampler_sample_cand(s, work, rng, 0, id, lp, NULL, NULL) != RG_OK)
		exit(1);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		rg_grammar_kind kind;
		const char *text, *prefix; /* the state: after prefix's bytes */
	} G[] = {
		{"regex [a-z ]*", RG_GRAMMAR_REGEX, "[a-z ]*", "the "},
		{"json_schema, open string", RG_GRAMMAR_JSON_SCHEMA,
		 "{\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\"}}, "
		 "\"required\": [\"text\"]}",
		 "{\"text\": \"hello"},
		{"json_object", RG_GRAMMAR_JSON_OBJECT, NULL, "{\"a\": \"x"},
		{"json_object (value start)", RG_GRAMMAR_JSON_OBJECT, NULL, "{\"a\": "},
	};
	json_object *js = argc > 1 ? json_object_from_file(argv[1]) : NULL;
	int V;
	char **bytes;
	size_t *lens;
	rg_token_trie *trie;
	rg_sampling_params pg, ps;
	rg_sampler *sg, *ss;
	float *src, *row;
	uint64_t *bits;
	rg_token_array work;
	rg_rng rng;

	if (!js || !json_object_is_type(js, json_type_array)) {
		fprintf(stderr, "usage: %s TOKENS.json (a JSON list of byte-level tokens)\n", argv[0]);
		return 1;
	}
	V = (int)json_object_array_length(js);
	bytes = calloc((size_t)V, sizeof(*bytes));
	lens = calloc((size_t)V, sizeof(*lens));
	for (int i = 0; i < V; i++) {
		const char *t = json_object_get_string(json_object_array_get_idx(js, i));

		bytes[i] = malloc(strlen(t) + 1);
		lens[i] = decode(t, bytes[i]);
	}
	if (rg_token_trie_build((const char *const *)bytes, lens, V, &trie) != RG_OK) {
		fprintf(stderr, "trie: %s\n", rg_last_error());
		return 1;
	}
	rg_sampling_params_default(&pg);
	rg_sampling_params_default(&ps);
	ps.do_sample = true;
	if (rg_sampler_from_params(&pg, V, NULL, 0, &sg) != RG_OK ||
	    rg_sampler_from_params(&ps, V, NULL, 0, &ss) != RG_OK)
		return 1;
	src = malloc((size_t)V * sizeof(float));
	row = malloc((size_t)V * sizeof(float));
	bits = malloc((size_t)((V + 63) / 64) * sizeof(uint64_t));
	work.data = malloc((size_t)V * sizeof(rg_token_data));
	rg_rng_seed(&rng, 31);
	for (int v = 0; v < V; v++)
		src[v] = (float)(rg_rng_uniform(&rng) * 8.0 - 4.0);
	printf("V=%d, one thread, us per row (best of %d runs of %d rows: the machine may be "
	       "shared); before: -inf over the row + rg_sampler_sample; after: bitmask + masked "
	       "argmax / gathered candidates\n\n",
	       V, RUNS, ROWS);
	printf("| grammar | allowed | greedy before | greedy after | sampled before | "
	       "sampled after |\n|---|---|---|---|---|---|\n");
	for (size_t gi = 0; gi < sizeof(G) / sizeof(G[0]); gi++) {
		rg_grammar *g;
		const uint64_t *m;
		int s, n_ok = 0;
		double t[4][RUNS];
		int32_t id[4];
		float lp[4];

		if (rg_grammar_from_params(G[gi].kind, G[gi].text, trie, 0, &g) != RG_OK) {
			fprintf(stderr, "%s: %s\n", G[gi].name, rg_last_error());
			return 1;
		}
		s = rg_dfa_start(rg_grammar_dfa(g));
		for (const char *p = G[gi].prefix; *p; p++)
			s = rg_dfa_next(rg_grammar_dfa(g), s, (uint8_t)*p);
		if (s < 0 || !(m = rg_grammar_mask(g, s))) {
			fprintf(stderr, "%s: no state after the prefix\n", G[gi].name);
			return 1;
		}
		for (int w = 0; w < (V + 63) / 64; w++)
			n_ok += __builtin_popcountll(m[w]);
		for (int run = 0; run < RUNS; run++) {
			double t0 = now_us();

			for (int i = 0; i < ROWS; i++)
				old_row(sg, src, row, m, V, &rng, &work, &id[0], &lp[0]);
			t[0][run] = (now_us() - t0) / ROWS;
			t0 = now_us();
			for (int i = 0; i < ROWS; i++)
				new_row(sg, true, src, row, m, bits, V, &rng, &work, &id[1], &lp[1]);
			t[1][run] = (now_us() - t0) / ROWS;
			t0 = now_us();
			for (int i = 0; i < ROWS; i++)
				old_row(ss, src, row, m, V, &rng, &work, &id[2], &lp[2]);
			t[2][run] = (now_us() - t0) / ROWS;
			t0 = now_us();
			for (int i = 0; i < ROWS; i++)
				new_row(ss, false, src, row, m, bits, V, &rng, &work, &id[3], &lp[3]);
			t[3][run] = (now_us() - t0) / ROWS;
		}
		if (id[0] != id[1] || lp[0] != lp[1]) {
			fprintf(stderr, "%s: greedy differs\n", G[gi].name);
			return 1;
		}
		for (int k = 0; k < 4; k++)
			qsort(t[k], RUNS, sizeof(double), cmp_d);
		printf("| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", G[gi].name, n_ok,
		       t[0][0], t[1][0], t[2][0], t[3][0]);
		rg_grammar_unref(g);
	}
	return 0;
}
