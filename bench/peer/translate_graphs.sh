#!/usr/bin/env bash
# Issue 29 on a lent GPU machine: encoder-decoder decode steps as CUDA graphs, A/B in one run.
# For each model (MODELS, default opus-mt-en-de t5-small; random weights at the public shapes from
# tests/py/make_seq2seq.py): ragged.Translator fp16 with graphs (the default) and with
# RAGGED_CUDA_GRAPHS=0, and HF generate (static cache) fp16 beside them, each in its own process
# (bench/peer/translate_bench.py), batches 1 / 32 / 128 (HF 1 / 32), greedy and 4 beams.
# Expects ragged built with CUDA. Results: $OUT/graphs_<runtime>_<model>.json, ids beside them.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/translate_graphs}
mkdir -p "$OUT"
B=bench/peer/translate_bench.py
for name in ${MODELS:-opus-mt-en-de t5-small}; do
	M=/tmp/tg_$name
	rm -rf "$M"
	python3 -c "import sys; sys.path.insert(0, 'tests/py'); import make_seq2seq; make_seq2seq.make_spec(sys.argv[1], sys.argv[2], seed=3)" "$name" "$M" || continue
	for g in 1 0; do
		RAGGED_CUDA_GRAPHS=$g timeout 150 python3 $B --runtime ragged --model "$M" --device cuda \
			--dtype fp16 --budget-s 2 --out "$OUT/graphs_ragged_g${g}_$name.json" \
			--ids-out "$OUT/ids_ragged_g${g}_$name.json" 2>&1 | grep -v -i warn
	done
	timeout 150 python3 $B --runtime hf --model "$M" --device cuda --dtype fp16 --batches 1,32 \
		--budget-s 2 --out "$OUT/graphs_hf_$name.json" --ids-out "$OUT/ids_hf_$name.json" 2>&1 |
		grep -v -i "warn\|Loading"
	rm -rf "$M"
done
