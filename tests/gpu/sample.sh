#!/usr/bin/env bash
# GPU verification and kernel benchmark of sampling on the device (issue 19), in one device call:
# build, CUDA vs CPU twin parity of rg_op_sample_rows / rg_op_topk_rows and rg_model_step_sample
# through graphed decode steps (tests/gpu/sample_cuda.py), the same under compute-sanitizer
# memcheck and racecheck (ops only: SAMPLE_SKIP_MODEL=1 keeps it short), and the top-k benchmark
# (bench/kernels/topk_bench.py; torch.topk where torch is installed). Needs .gpu_carry as
# tests/gpu/decoder.sh does. Results in $OUT: run.log build.log topk_bench.json
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
export RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged RAGGED_INTERNAL_LIB=build/libragged_internal.so
timeout 400 python3 tests/gpu/sample_cuda.py; record "sample CUDA vs CPU twin" $?
SAMPLE_QUICK=1 timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
	python3 tests/gpu/sample_cuda.py 2>&1 | tail -15; record "memcheck (sample_cuda)" ${PIPESTATUS[0]}
SAMPLE_QUICK=1 timeout 400 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 \
	python3 tests/gpu/sample_cuda.py 2>&1 | tail -15; record "racecheck (sample_cuda)" ${PIPESTATUS[0]}
timeout 400 python3 bench/kernels/topk_bench.py --json "$OUT/topk_bench.json"; record "topk bench" $?
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
