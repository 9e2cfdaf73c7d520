#!/usr/bin/env bash
# Issue 28 on a lent GPU machine, in one device call: build (sm_90a), then
# bench/serving/overload.py on a random SmolLM2-135M-shaped fp16 model (bench/serving/
# make_gen_model.py): goodput against offered rate with no deadlines, with per-request deadlines
# and with the server-wide defaults; then issue 27's entry points at 64 streams again (the GEMM
# autotune change touches prefill). Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh).
# RATES, DURATION override the ladder. GGUF=1: the model is the F16 GGUF file of the same weights
# (make_gen_model.py --gguf), as the issue ran it. Results in $OUT.
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
source tests/gpu/setup-env.sh >/dev/null
t0=$SECONDS
make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
	all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
record "build ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || exit 1
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
M=/tmp/rg28
mkdir -p $M
python3 bench/serving/make_gen_model.py smollm2 $M/smollm2 >/dev/null
record "model" $?
SMOL=$M/smollm2
if [ "${GGUF:-0}" = 1 ]; then
	SMOL=$(python3 bench/serving/make_gen_model.py smollm2 $M/smollm2 --gguf)
	record "smollm2 F16 GGUF" $?
fi
if [ -n "${RUNS:-}" ]; then
	# RUNS="name:modes:rates ...": several ladders (e.g. a finer one without deadlines)
	for r in $RUNS; do
		IFS=: read -r name modes rates <<<"$r"
		timeout 400 python3 bench/serving/overload.py "$OUT/overload_$name" \
			--model "$SMOL" --modes "$modes" --rates "$rates" --duration "${DURATION:-8}"
		record "overload $name" $?
	done
else
	timeout 480 python3 bench/serving/overload.py "$OUT/overload" --model "$SMOL" \
		--rates "${RATES:-16,48,64,96,192}" --duration "${DURATION:-8}"
	record "overload" $?
fi
if [ "${EP:-1}" = 1 ]; then
	python3 bench/serving/make_gen_model.py gpt2 $M/gpt2 >/dev/null
	timeout 150 python3 bench/peer/entry_points.py "$OUT/entry_points_gpu.json" \
		--model $M/gpt2 --label gpt2 --device cuda --batches 64 --only cli,server \
		--trace-dir "$OUT/traces"
	record "entry points gpt2 b64" $?
fi
