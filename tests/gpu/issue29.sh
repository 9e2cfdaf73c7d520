#!/usr/bin/env bash
# Issue 29 on a lent GPU machine, in one device call: build (sm_90a), then
# tests/gpu/translate_cuda.py (Translator on CUDA against the float64 reference; fp16 against
# fp32 on the opus-mt-en-de shape), tests/gpu/translate_hf_public.py (fp32 ids against
# transformers' generate() at the public shapes; HF_PUBLIC_NAMES picks models), then, with BENCH=1
# (the default), bench/peer/translate_gpu.sh (against CTranslate2). Needs .gpu_carry
# (CARRY_MODEL=0 CARRY_WHEELS=ctranslate2-...-cp312-...whl scripts/pack-gpu-carry.sh).
# Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; fi; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
export RAGGED_GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ)"
source tests/gpu/setup-env.sh >/dev/null
if [ ! -x build/ragged ]; then
	t0=$SECONDS
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
	record "build ($((SECONDS - t0)) s)" $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
timeout 300 python3 tests/gpu/translate_cuda.py "$OUT/translate_cuda.json" >"$OUT/translate_cuda.log" 2>&1
record "translate_cuda.py" $?
cat "$OUT/translate_cuda.log" | tail -8
# fp32 ids against transformers' generate() at the public shapes (random weights)
timeout 330 python3 tests/gpu/translate_hf_public.py "$OUT/translate_hf_public.json" ${HF_PUBLIC_NAMES:-} \
	>"$OUT/translate_hf_public.log" 2>&1
record "translate_hf_public.py" $?
grep -E "^(PASS|FAIL|SKIP)|equal HF" "$OUT/translate_hf_public.log"
# the benchmark against CTranslate2 (bench/peer/translate_gpu.sh), when BENCH=1
if [ "${BENCH:-1}" = 1 ]; then
	OUT=$OUT/bench timeout ${BENCH_LIMIT_S:-300} bash bench/peer/translate_gpu.sh
	record "translate_gpu.sh" $?
fi
