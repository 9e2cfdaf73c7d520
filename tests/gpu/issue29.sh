#!/usr/bin/env bash
# Issue 29 on a lent GPU machine, in one device call: build (sm_90a), then
# tests/gpu/translate_cuda.py (Translator on CUDA against the float64 reference; fp16 against
# fp32 on the opus-mt-en-de shape), tests/gpu/translate_hf_public.py (fp32 ids against
# transformers' generate() at the public shapes; HF_PUBLIC_NAMES picks models), then, with BENCH=1
# (the default), bench/peer/translate_gpu.sh (against CTranslate2). Needs .gpu_carry
# (CARRY_MODEL=0 CARRY_WHEELS=ctranslate2-...-cp312-...whl scripts/pack-gpu-carry.sh).
# Results in $OUT.
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
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
