#!/usr/bin/env bash
# rg_generate on CUDA (issue 19), one device call: build, tests/gpu/generate_cuda.py plain and
# under compute-sanitizer memcheck. Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh).
# Results in $OUT: run.log build.log.
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
echo "commit: $(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown) date: $(date -u +%FT%TZ)"
source tests/gpu/setup-env.sh
make -j"$(nproc)" all >"$OUT/build.log" 2>&1; st=$?; tail -3 "$OUT/build.log"; record build $st
[ $st -eq 0 ] || exit 1
export RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged
timeout 300 python3 tests/gpu/generate_cuda.py; record "generate CUDA vs CPU" $?
timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
	python3 tests/gpu/generate_cuda.py 2>&1 | tail -8; record "memcheck (generate_cuda)" ${PIPESTATUS[0]}
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
