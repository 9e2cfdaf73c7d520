/* beam_step_host.c: host time of one rg_beam_step (src/gen/beam.h) for 4 beams over a vocabulary
 * of V columns (argv[1], default 50257), 200 steps on random logits, one thread: the per-step
 * work a beam search adds on the host when its rows' logits come from the model.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -o build/beam_step_host
 *        bench/kernels/beam_step_host.c build/libragged.a $(LIBS of build/config) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gen/beam.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){
	int V = argc>1?atoi(argv[1]):50257, nb=4, steps=200;
	int32_t prompt[32]; for(int i=0;i<32;i++) prompt[i]=i+5;
	float *lg=malloc((size_t)nb*V*4); const float *rows[4]; int32_t par[4],tok[4]; bool done;
	srand(1); for(size_t i=0;i<(size_t)nb*V;i++) lg[i]=(float)rand()/RAND_MAX*10-5;
	rg_beam_params bp={.num_beams=nb,.num_beam_groups=1,.length_penalty=1,.early_stopping=RG_EARLY_STOPPING_NEVER,.num_return_sequences=1,.n_eos=0,.pad_id=0,.max_new_tokens=steps+10};
	rg_beam_search *b; rg_beam_init(&b,&bp,prompt,32,V);
	for(int j=0;j<nb;j++) rows[j]=lg+(size_t)j*V;
	double t0=now(); for(int s=0;s<steps;s++){ lg[s%V]+=0.01f; rg_beam_step(b,rows,par,tok,&done);} double t1=now();
	printf("V=%d beams=%d: %.3f ms per rg_beam_step\n",V,nb,(t1-t0)/steps*1e3);
	rg_beam_free(b); return 0;}
