#!/usr/bin/env bash
# Graphed decode steps above 64 rows (graph buckets up to RG_GRAPH_MAX_ROWS), on a lent GPU, in
# one device call: build (sm_90a); bench/peer/translate_graphs.sh on opus-mt-en-de (4 beams x 32
# sentences = 128 rows a step, graphed now); bench/peer/decode_bench.py at DECODE_BATCHES
# (default 64,128,256) with graphs on (ragged.Generator and the graphed PyTorch peer, side by side)
# and with RAGGED_CUDA_GRAPHS=0 (ragged only), the greedy ids of both kept for the A/B. Needs
# .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh). Results in $OUT.
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
source tests/gpu/setup-env.sh >/dev/null
if [ ! -x build/ragged ]; then
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"; record build $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
if [ "${TRANSLATE:-1}" = 1 ]; then
	MODELS=${MODELS:-opus-mt-en-de} OUT=$OUT/translate timeout 200 bash bench/peer/translate_graphs.sh
	record translate_graphs.sh $?
fi
for g in 1 0; do
	skip=ragged,ragged_device_greedy,hf_dynamic,hf_static
	[ $g = 0 ] && skip=$skip,torch_graphed
	RAGGED_CUDA_GRAPHS=$g DECODE_BENCH_BATCHES=${DECODE_BATCHES:-64,128,256} DECODE_BENCH_SKIP=$skip \
		DECODE_BENCH_IDS=$OUT/decode_ids_g$g.json timeout 200 python3 bench/peer/decode_bench.py \
		"$OUT/decode_g$g.json" fp16 >"$OUT/decode_g$g.log" 2>&1
	record "decode_bench graphs=$g" $?
	tail -7 "$OUT/decode_g$g.log"
done
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
a, b = json.load(open(f"{o}/decode_ids_g1.json")), json.load(open(f"{o}/decode_ids_g0.json"))
for k in a:
    eq = sum(x == y for x, y in zip(a[k], b.get(k, [])))
    print(f"ids graphs == eager {k}: {eq}/{len(a[k])}")
PY
