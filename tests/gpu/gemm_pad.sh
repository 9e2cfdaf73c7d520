#!/usr/bin/env bash
# The padded-output GEMM (RAGGED_GEMM_PAD, src/ops/cuda/gemm.cu) on a lent GPU, in one device call:
# build (sm_90a); test_ops_cuda --quick --no-gemm in fp16 and fp32 (its odd-N GEMM cases take the
# padded route: N = 58101 and 50257 against the CPU GEMM); then the A/B RAGGED_GEMM_PAD=1 / 0 with
# graphs on: ragged.Translator on opus-mt-en-de (vocab 58101; batches 32 and 128, greedy and 4
# beams; ids of both kept and compared) and bench/peer/decode_bench.py's GPT-2 small rows
# (vocab 50257; DECODE_BATCHES, default 64,128) with the graphed PyTorch peer beside pad=1.
# Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh). Results in $OUT.
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
source tests/gpu/setup-env.sh >/dev/null
if [ ! -x build/ragged ]; then
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all build/test_ops_cuda >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
	record build $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
if [ "${OPS:-1}" = 1 ]; then
	for dt in fp16 fp32; do
		timeout 240 build/test_ops_cuda --quick --no-gemm --dtype $dt >"$OUT/ops_$dt.log" 2>&1
		st=$?; grep -E "58101|50257|N=7 " "$OUT/ops_$dt.log" | head -12; tail -3 "$OUT/ops_$dt.log"
		record "test_ops_cuda --quick --no-gemm --dtype $dt" $st
	done
fi
M=/tmp/gp_opus
python3 -c "import sys; sys.path.insert(0, 'tests/py'); import make_seq2seq; make_seq2seq.make_spec('opus-mt-en-de', sys.argv[1], seed=3)" "$M"
for p in 1 0; do
	RAGGED_GEMM_PAD=$p timeout 150 python3 bench/peer/translate_bench.py --runtime ragged --model "$M" \
		--device cuda --dtype fp16 --batches 32,128 --budget-s 2 --out "$OUT/translate_pad$p.json" \
		--ids-out "$OUT/translate_ids_pad$p.json" 2>&1 | grep -v -i warn | tail -6
	record "translate pad=$p" ${PIPESTATUS[0]}
done
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
a, b = json.load(open(f"{o}/translate_ids_pad1.json")), json.load(open(f"{o}/translate_ids_pad0.json"))
keys = a.keys() if isinstance(a, dict) else range(len(a))
for k in keys:
    x, y = a[k], b[k]
    print(f"translate ids pad1 == pad0 [{k}]: {sum(p == q for p, q in zip(x, y))}/{len(x)}")
PY
for p in 1 0; do
	skip=ragged,ragged_device_greedy,hf_dynamic,hf_static
	[ $p = 0 ] && skip=$skip,torch_graphed
	RAGGED_GEMM_PAD=$p DECODE_BENCH_BATCHES=${DECODE_BATCHES:-64,128} DECODE_BENCH_SKIP=$skip \
		DECODE_BENCH_IDS=$OUT/decode_ids_pad$p.json timeout 200 python3 bench/peer/decode_bench.py \
		"$OUT/decode_pad$p.json" fp16 >"$OUT/decode_pad$p.log" 2>&1
	record "decode_bench pad=$p" $?
	grep -i gpt2 "$OUT/decode_pad$p.log" | tail -4
done
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
a, b = json.load(open(f"{o}/decode_ids_pad1.json")), json.load(open(f"{o}/decode_ids_pad0.json"))
for k in a:
    print(f"decode ids pad1 == pad0 {k}: {sum(x == y for x, y in zip(a[k], b.get(k, [])))}/{len(a[k])}")
PY
