#!/usr/bin/env bash
# GPU verification and benchmark of the decoder path (issue 19), in one device call: build, CUDA vs
# CPU step parity (tests/gpu/decoder_cuda_cpu.py) plain and under compute-sanitizer memcheck,
# parity and greedy identity against transformers (tests/gpu/decoder_hf.py), and the decode
# throughput against HF generate (bench/peer/decode_bench.py). Needs .gpu_carry (CARRY_MODEL=0
# scripts/pack-gpu-carry.sh). Results in $OUT: run.log build.log decoder_hf.json decode_bench.json
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
export PATH=$PATH:/usr/local/cuda/bin
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; FAILED+=("$1"); fi; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ)"
source tests/gpu/setup-env.sh
make -j"$(nproc)" all >"$OUT/build.log" 2>&1; st=$?; tail -3 "$OUT/build.log"; record build $st
[ $st -eq 0 ] || exit 1
export RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged
timeout 300 python3 tests/gpu/decoder_cuda_cpu.py; record "CUDA vs CPU step parity" $?
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
	python3 tests/gpu/decoder_cuda_cpu.py 2>&1 | tail -25; record "memcheck (decoder_cuda_cpu)" ${PIPESTATUS[0]}
timeout 400 python3 tests/gpu/decoder_hf.py "$OUT/decoder_hf.json"; record "transformers parity" $?
[ "${SKIP_BENCH:-0}" = 1 ] || { timeout 500 python3 bench/peer/decode_bench.py "$OUT/decode_bench.json" fp16; record "decode bench" $?; }
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
