#!/usr/bin/env bash
# Issue 20's generation serving benchmarks on a lent GPU machine (H100), one device call per
# stage group (each call has 10 minutes; the build stays between calls): build (BUILD_ARCH=sm_90a
# builds for Hopper only, to save device time), then the stages named in STAGES (default: all;
# run e.g. STAGES=build, then STAGES=smollm2, then STAGES="gpt2 chunked"):
#   build    make all (CUDA)
#   smollm2  bench/serving/gen_serving.py on the SmolLM2-135M shape (random weights), fp16:
#            ragged serve's continuous batching vs the static-batching baseline (HF generate,
#            static cache, batches of 16) on the same arrival schedules, RATES req/s
#   gpt2     the same on GPT-2 small's shape
#   chunked  bench/serving/chunked_prefill.py on the SmolLM2 shape (8,192 positions): 32
#            decoding streams, a 2,000-token prompt joins, chunked (512) vs unchunked (4096)
# Knobs (environment): RATES (default 4,16,48,128), DURATION (20 s measured per rate), WARMUP
# (3 s), TIMEOUT_MS (10000: past the 200 ms TTFT SLO anything slower is a miss anyway, and it
# bounds the baseline's overloaded runs), BASELINE_BUDGET_S (20 s of compute per rate and fill
# rule), DTYPE (fp16).
# Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh) and python3 with torch +
# transformers + numpy + safetensors (the GPU machine's). Results (JSON + markdown, and the run
# folders' logs as serving_logs.tar.xz) in $OUT, to be copied into bench/results/ (run.log into
# tests/gpu/results/; names: bench/results/README.md).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
STAGES=${STAGES:-build smollm2 gpt2 chunked}
RATES=${RATES:-4,16,48,128}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-3}
TIMEOUT_MS=${TIMEOUT_MS:-10000}
BASELINE_BUDGET_S=${BASELINE_BUDGET_S:-20}
DTYPE=${DTYPE:-fp16}
export PATH=$PATH:/usr/local/cuda/bin
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; FAILED+=("$1"); fi; }
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ) stages: $STAGES"
source tests/gpu/setup-env.sh >/dev/null
ARCHFLAGS=()
[ "${BUILD_ARCH:-}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
if has build || [ ! -x build/ragged ]; then
	t0=$SECONDS
	make -j"$(nproc)" "${ARCHFLAGS[@]}" all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
	record "build ($((SECONDS - t0)) s)" $st
	[ $st -eq 0 ] || exit 1
fi
export PYTHONUNBUFFERED=1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
GEN=(python3 bench/serving/gen_serving.py --device cuda --dtype "$DTYPE" --rates "$RATES"
	--duration "$DURATION" --warmup "$WARMUP" --timeout-ms "$TIMEOUT_MS"
	--baseline-budget-s "$BASELINE_BUDGET_S" --torch-python python3 --out-dir "$OUT")
if has smollm2; then
	timeout 560 "${GEN[@]}" --model smollm2 2>&1 | grep -v "^|"; record "gen_serving smollm2" ${PIPESTATUS[0]}
fi
if has gpt2; then
	timeout 560 "${GEN[@]}" --model gpt2 2>&1 | grep -v "^|"; record "gen_serving gpt2" ${PIPESTATUS[0]}
fi
if has chunked; then
	# exit 1 = the check failed (reported in the file), still a measurement
	timeout 300 python3 bench/serving/chunked_prefill.py --model smollm2 --device cuda \
		--dtype "$DTYPE" --reps 5 --out-dir "$OUT"; record "chunked prefill" $?
fi
ls -d build/serving_logs/gen_serving_* build/serving_logs/chunked_prefill_* >/dev/null 2>&1 &&
	tar -C build -cJf "$OUT/serving_logs.tar.xz" --exclude=raw.json serving_logs 2>/dev/null
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
