#!/usr/bin/env bash
# One-off A/B on a lent machine (run 2026-11-23 as xeon_ab/run.sh, with the patched file copied
# in; result: bench/results/pad_tiles_ab_cpu_16core-xeon_20261123-0629.md): ragged's oneDNN tiles
# as committed (A: r & ~15 then r & 15 rows) against every tile in one call over zero-padded rows (P:
# pad_tiles.patch), built from the same tree, alternating 4 times, bench_cpu_single at 1 thread
# (pinned to CPU 5) and 16 threads. JSON lines on stdout. Not landed: P was slower.
source "$(dirname "$0")/../ab_common.sh" # ROOT (cwd), CARRY, O, ab_build, ab_models, ab_rounds
ab_build bench/kernels/pad_ab A
cp src/ops/cpu/gemm_dnnl.c /tmp/gemm_dnnl_orig.c
patch -s -o /tmp/gemm_dnnl_pad.c src/ops/cpu/gemm_dnnl.c bench/kernels/pad_ab/pad_tiles.patch || exit 1
cp /tmp/gemm_dnnl_pad.c src/ops/cpu/gemm_dnnl.c
ab_build bench/kernels/pad_ab P
cp /tmp/gemm_dnnl_orig.c src/ops/cpu/gemm_dnnl.c
ab_models
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); commit $(cat .gpu_carry/COMMIT)"
for i in 1 2 3 4; do
	for v in A P; do
		for m in minilm bert-base; do
			T=64,100,130,163; [ $m = bert-base ] && T=64,130
			RAGGED_NUM_THREADS=1 OMP_NUM_THREADS=1 taskset -c 5 bench/kernels/pad_ab/bcs_$v build/models/$m-random --tokens $T --budget 0.3 | sed "s/^/{\"v\":\"$v\",\"m\":\"$m\",\"threads\":1,\"round\":$i,\"r\":/; s/}\$/}}/"
			RAGGED_NUM_THREADS=16 OMP_NUM_THREADS=1 bench/kernels/pad_ab/bcs_$v build/models/$m-random --tokens 130 --budget 0.3 | sed "s/^/{\"v\":\"$v\",\"m\":\"$m\",\"threads\":16,\"round\":$i,\"r\":/; s/}\$/}}/"
		done
	done
done
