/* beam_step_host.c: host time of one rg_beam_step (src/gen/beam.h) for 4 beams over a vocabulary
 * of V columns (argv[1], default 50257), 200 steps on random logits, one thread: the per-step
 * work a beam search adds on the host when its rows' logits come from the model
 * (bench/results/decode_modes_cpu_2core-amd-epyc_20261126-0040-summary.md).
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -o build/beam_step_host \
 *        bench/kernels/beam_step_host.c build/libragged.a -ldnnl -lgomp -lopenblas -lutf8proc \
 *        -ljson-c -lm -lpthread
 * Output: one line, "V=... beams=4: X ms per rg_beam_step". Exit status 1 on a search error. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gen/beam.h"

#define BEAMS 4
#define STEPS 200

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	const int V = argc > 1 ? atoi(argv[1]) : 50257;
	int32_t prompt[32], parent[BEAMS], token[BEAMS];
	const float *rows[BEAMS];
	float *lg = malloc((size_t)BEAMS * (size_t)V * sizeof(float));
	rg_beam_params bp = {
		.num_beams = BEAMS, .num_beam_groups = 1, .length_penalty = 1,
		.early_stopping = RG_EARLY_STOPPING_NEVER, .num_return_sequences = 1,
		.pad_id = 0, .max_new_tokens = STEPS + 10,
	};
	rg_beam_search *b;
	bool done;
	double t0;

	if (!lg || V < 2)
		return 1;
	for (int i = 0; i < 32; i++)
		prompt[i] = i + 5;
	srand(1);
	for (size_t i = 0; i < (size_t)BEAMS * (size_t)V; i++)
		lg[i] = (float)rand() / (float)RAND_MAX * 10.0f - 5.0f;
	if (rg_beam_init(&b, &bp, prompt, 32, V) != RG_OK)
		return 1;
	for (int j = 0; j < BEAMS; j++)
		rows[j] = lg + (size_t)j * V;
	t0 = now_s();
	for (int s = 0; s < STEPS; s++) {
		lg[s % V] += 0.01f; /* the rows change a little from step to step */
		if (rg_beam_step(b, rows, parent, token, &done) != RG_OK)
			return 1;
	}
	printf("V=%d beams=%d: %.3f ms per rg_beam_step\n", V, BEAMS, (now_s() - t0) / STEPS * 1e3);
	rg_beam_free(b);
	free(lg);
	return 0;
}
