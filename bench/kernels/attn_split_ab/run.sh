#!/usr/bin/env bash
# One-off A/B on a lent machine (2026-11-23; result: bench/results/attn_split_ab_xeon_20261123.md):
# CPU attention with query blocks cut for a batch with few (block, head) tasks (N: the tree with
# attn_split.patch applied) against whole query blocks per (sequence, head) as committed (O).
# Both built from the same tree (the patch applied or reversed, whichever the tree lacks) and
# alternated ROUNDS times; bench_cpu_single at THREADS threads (default "16 8"). JSON lines on
# stdout. Not landed: no whole-model gain beyond noise, attention 2x slower at 64 tokens.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); CARRY=$ROOT/.gpu_carry; cd "$ROOT"
AB=bench/kernels/attn_split_ab # (not D: setup-env.sh sets D)
source tests/gpu/setup-env.sh >/dev/null
O=${OUT:-/tmp}
ROUNDS=${ROUNDS:-5}
build() { # variant: build bench_cpu_single into $AB/bcs_<variant>
	make -j16 CUDA=0 build/bench_cpu_single >>$O/build.log 2>&1 || { tail $O/build.log; exit 1; }
	cp build/bench_cpu_single $AB/bcs_$1
}
if patch -s -p1 --dry-run -R <$AB/attn_split.patch >/dev/null 2>&1; then
	build N
	patch -s -p1 -R <$AB/attn_split.patch || exit 1
	build O
	patch -s -p1 <$AB/attn_split.patch || exit 1
else
	build O
	patch -s -p1 <$AB/attn_split.patch || exit 1
	build N
	patch -s -p1 -R <$AB/attn_split.patch || exit 1
fi
cmp -s $AB/bcs_O $AB/bcs_N && { echo "O and N are one binary: no A/B" >&2; exit 1; }
V=build/models/vocab-synthetic; mkdir -p $V
python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' >$V/vocab.txt
python3 bench/serving/make_bert_base.py build/models/minilm-random --arch minilm --vocab-from $V >/dev/null || exit 1
python3 bench/serving/make_bert_base.py build/models/bert-base-random --vocab-from $V >/dev/null || exit 1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); commit $(cat .gpu_carry/COMMIT 2>/dev/null)" >&2
for i in $(seq $ROUNDS); do
	for v in O N; do
		for m in minilm bert-base; do
			for t in ${THREADS:-16 8}; do
				RAGGED_NUM_THREADS=$t OMP_NUM_THREADS=1 $AB/bcs_$v build/models/$m-random --tokens 30,64,130,163,250 --budget 0.25 |
					sed "s/^/{\"v\":\"$v\",\"m\":\"$m\",\"threads\":$t,\"round\":$i,\"r\":/; s/}\$/}}/"
			done
		done
	done
done
