/* The JSON float formatting of one embedding answer, per request: hidden-size float32 vectors
 * (768 by default, BERT-base) of unit norm written as a JSON array, by
 *   snprintf %.9g   ragged's writer before (9 significant digits, glibc's exact printf),
 *   rg_buf_float_array   ragged's writer now (Dragonbox's shortest digits, core/f32_shortest.h),
 *   json-c          json_object_new_double per value + json_object_to_json_string_ext (the JSON
 *                   library ragged parses with; it prints doubles with "%.17g"),
 * each checked to read back (strtof) as the same floats; and Dragonbox's to_decimal alone (the
 * digits, no text) for the split of the second. Prints µs per vector, ns per float and
 * bytes per vector, the median of --rounds rounds of --reps vectors.
 * Usage: make build/bench_float_format && build/bench_float_format [--hidden 768] [--reps 2000]
 *        [--rounds 7] */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/f32_shortest.h"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ragged's rg_buf_float_array before: one snprintf("%.9g") per float */
static void old_float_array(rg_buf *b, const float *v, size_t n)
{
	char tmp[32];

	rg_buf_reserve(b, n * 17 + 2);
	rg_buf_put(b, "[", 1);
	for (size_t i = 0; i < n; i++) {
		int k;

		if (i)
			rg_buf_put(b, ",", 1);
		if (!isfinite(v[i])) {
			rg_buf_put(b, "null", 4);
			continue;
		}
		k = snprintf(tmp, sizeof(tmp), "%.9g", (double)v[i]);
		rg_buf_put(b, tmp, (size_t)k);
	}
	rg_buf_put(b, "]", 1);
}

static size_t json_c_array(rg_buf *b, const float *v, size_t n)
{
	json_object *a = json_object_new_array_ext((int)n);
	const char *s;
	size_t len;

	for (size_t i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_double((double)v[i]));
	s = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN);
	len = strlen(s);
	rg_buf_put(b, s, len);
	json_object_put(a);
	return len;
}

/* Every number of the array text reads back (strtof) as v; false on the first that does not. */
static int reads_back(const char *s, const float *v, size_t n)
{
	const char *p = s + 1;

	for (size_t i = 0; i < n; i++) {
		char *end;
		float f = strtof(p, &end);

		if (end == p || f != v[i])
			return 0;
		p = end + 1;
	}
	return 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int hidden = 768, reps = 2000, rounds = 7;
	const char *names[] = {"snprintf %.9g (before)", "rg_buf_float_array (Dragonbox)",
			       "json-c (%.17g doubles)", "Dragonbox to_decimal alone (no text)"};
	volatile uint32_t sink = 0;
	float *v;
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--hidden"))
			hidden = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	if (hidden < 1 || reps < 1 || rounds < 1 || rounds > 99) {
		fprintf(stderr, "usage: %s [--hidden N] [--reps N] [--rounds N<100]\n", argv[0]);
		return 2;
	}
	/* 64 different unit-norm vectors (normal components, Box-Muller) */
	v = malloc(sizeof(float) * (size_t)hidden * 64);
	if (!v)
		return 1;
	for (int r = 0; r < 64; r++) {
		double ss = 0;

		for (int i = 0; i < hidden; i++) {
			double u1, u2;

			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			u1 = ((x >> 11) + 1.0) / 9007199254740993.0;
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			u2 = (x >> 11) / 9007199254740992.0;
			v[r * hidden + i] = (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
			ss += (double)v[r * hidden + i] * v[r * hidden + i];
		}
		for (int i = 0; i < hidden; i++)
			v[r * hidden + i] = (float)(v[r * hidden + i] / sqrt(ss));
	}
	printf("| writer | us / vector of %d | ns / float | bytes / vector | reads back |\n", hidden);
	printf("|---|---|---|---|---|\n");
	for (int w = 0; w < 4; w++) {
		double t[100];
		size_t bytes = 0;
		int ok = 1;
		rg_buf b;

		rg_buf_init(&b);
		for (int r = 0; r < rounds; r++) {
			double t0 = now_us();

			for (int k = 0; k < reps; k++) {
				const float *vk = v + (size_t)(k % 64) * hidden;

				b.len = 0;
				if (w == 0)
					old_float_array(&b, vk, (size_t)hidden);
				else if (w == 1)
					rg_buf_float_array(&b, vk, (size_t)hidden);
				else if (w == 2)
					json_c_array(&b, vk, (size_t)hidden);
				else
					for (int i = 0; i < hidden; i++) {
						uint32_t d;
						int e;

						rg_f32_shortest(vk[i], &d, &e);
						sink += d + (uint32_t)e;
					}
				if (r == 0 && k < 64 && w < 3) {
					ok &= reads_back(b.data, vk, (size_t)hidden);
					bytes += b.len;
				}
			}
			t[r] = (now_us() - t0) / reps;
		}
		qsort(t, (size_t)rounds, sizeof(double), cmp_double);
		if (w == 3)
			printf("| %s | %.2f | %.1f | - | - |\n", names[w], t[rounds / 2],
			       t[rounds / 2] * 1e3 / hidden);
		else
			printf("| %s | %.2f | %.1f | %zu | %s |\n", names[w], t[rounds / 2],
			       t[rounds / 2] * 1e3 / hidden, bytes / (reps < 64 ? (size_t)reps : 64),
			       ok ? "yes" : "NO");
		rg_buf_free(&b);
	}
	free(v);
	return 0;
}
