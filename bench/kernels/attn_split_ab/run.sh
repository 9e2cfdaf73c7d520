#!/usr/bin/env bash
# One-off A/B on a lent machine (2026-11-23;
# result: bench/results/attn_split_ab_cpu_16core-xeon_20261123-0734.md):
# CPU attention with query blocks cut for a batch with few (block, head) tasks (N: the tree with
# attn_split.patch applied) against whole query blocks per (sequence, head) as committed (O).
# Both built from the same tree (the patch applied or reversed, whichever the tree lacks) and
# alternated ROUNDS times; bench_cpu_single at THREADS threads (default "16 8"). JSON lines on
# stdout. Not landed: no whole-model gain beyond noise, attention 2x slower at 64 tokens.
source "$(dirname "$0")/../ab_common.sh" # ROOT (cwd), CARRY, O, ab_build, ab_models, ab_rounds
AB=bench/kernels/attn_split_ab # (not D: setup-env.sh sets D)
ROUNDS=${ROUNDS:-5}
if patch -s -p1 --dry-run -R <$AB/attn_split.patch >/dev/null 2>&1; then
	ab_build $AB N
	patch -s -p1 -R <$AB/attn_split.patch || exit 1
	ab_build $AB O
	patch -s -p1 <$AB/attn_split.patch || exit 1
else
	ab_build $AB O
	patch -s -p1 <$AB/attn_split.patch || exit 1
	ab_build $AB N
	patch -s -p1 -R <$AB/attn_split.patch || exit 1
fi
cmp -s $AB/bcs_O $AB/bcs_N && { echo "O and N are one binary: no A/B" >&2; exit 1; }
ab_models
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); commit $(cat .gpu_carry/COMMIT 2>/dev/null)" >&2
ab_rounds $AB "$ROUNDS" "O N" "${THREADS:-16 8}" 30,64,130,163,250
