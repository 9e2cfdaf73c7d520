#!/usr/bin/env bash
# One-off A/B on a lent machine (2026-11-23;
# result: bench/results/gemm_tiles_ab_cpu_16core-xeon_20261123-0723.md):
# ragged's oneDNN GEMM tiles for a few sentences (M <= 256) as committed (O: whole rows in
# 64-column tiles, rows halved until every thread has a tile) against a cost-model planner
# (tile_planner.patch: src/ops/cpu/gemm_tiles.c, least estimated makespan over row x column
# splits) with three weight-stream rates B (bytes/ns per core: 10, 25, 60). All four are built
# from the same tree and alternated, ROUNDS times; bench_cpu_single at THREADS (16) threads.
# JSON lines on stdout. Not landed: the planner was slower (0.79x at BERT-base, 130 tokens).
source "$(dirname "$0")/../ab_common.sh" # ROOT (cwd), CARRY, O, ab_build, ab_models, ab_rounds
AB=bench/kernels/tile_ab # (not D: setup-env.sh sets D)
ROUNDS=${ROUNDS:-3}
ab_build $AB O
cp src/ops/cpu/gemm_dnnl.c /tmp/gemm_dnnl_orig.c
git apply $AB/tile_planner.patch 2>/dev/null || patch -s -p1 <$AB/tile_planner.patch || exit 1
cp src/ops/cpu/gemm_tiles.c /tmp/gemm_tiles_new.c
for b in 10 25 60; do
	sed "s/^#define RG_GEMM_TILE_WBYTES_NS .*/#define RG_GEMM_TILE_WBYTES_NS $b.0/" /tmp/gemm_tiles_new.c >src/ops/cpu/gemm_tiles.c
	ab_build $AB B$b
done
# back to the tree as it came
cp /tmp/gemm_dnnl_orig.c src/ops/cpu/gemm_dnnl.c
rm -f src/ops/cpu/gemm_tiles.[ch] tests/unit/test_gemm_tiles.c
git checkout -- scripts/run-tests.sh 2>/dev/null || patch -s -R -p1 --include=scripts/run-tests.sh <$AB/tile_planner.patch
cmp -s $AB/bcs_O $AB/bcs_B25 && { echo "O and B25 are one binary: no A/B" >&2; exit 1; }
ab_models
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); commit $(cat .gpu_carry/COMMIT 2>/dev/null)" >&2
ab_rounds $AB "$ROUNDS" "O B10 B25 B60" "${THREADS:-16}" 30,64,130,163,250
