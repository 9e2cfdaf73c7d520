#!/usr/bin/env bash
# Issue 21 item 2 (DeBERTa-v3 attention on the GPU) in one device call, about 6 minutes on an H100
# including the build: the stages named in STAGES (default "build ops bench families"), in that
# order, each under its own timeout so a slow one cannot eat the others' time:
#   build     make all + build/test_ops_cuda (BUILD_ARCH=sm_90a: Hopper only, faster)
#   ops       build/test_ops_cuda --deberta: rg_op_rel_tables (cuBLASLt) and the attention with
#             the disentangled terms against the CPU backend, fp32 / fp16 / bf16, the
#             tensor-core path, the CUDA-core fallbacks and RAGGED_DEBERTA_TC=0 (rows name the
#             path), long ragged lengths, index kinds, batch invariance
#   bench     bench/peer/deberta_bench.py: ragged DeBERTa-v3-base (default path, old path and
#             each fast path alone) vs ragged RoBERTa-base / DistilBERT and HF eager DeBERTa,
#             fp16, batches 1-128 of 5-500 tokens, interleaved; targets marked met / not met
#   families  tests/gpu/families.py --models deberta-v3-base,deberta-v3-reranker: ragged (CPU
#             fp32; CUDA fp32 / fp16 / bf16, graphs and eager, every layout) against the float64
#             reference, and the reference against HF float64
#   ops_full  (not by default) the whole build/test_ops_cuda, for the other attention kinds
# Knobs: BENCH_BUDGET_S (60: seconds of timed rounds), BENCH_BATCHES (1,8,32,64,128),
# BENCH_ARGS (more deberta_bench.py arguments, e.g. "--trace 64 --runners deberta,roberta").
# Results in $OUT: run.log, build.log, test_ops_cuda_deberta.log / .json, deberta_<gpu>_*.json /
# .md, families_deberta.json (copy the bench files into bench/results/, the test logs and JSON into
# tests/gpu/results/, named as bench/results/README.md says). Needs .gpu_carry
# (tests/gpu/setup-env.sh) and python3 with torch + transformers + numpy + safetensors.
# Usage: OUT=... bash tests/gpu/deberta.sh, or through tests/gpu/session.sh:
#   OUT=... tests/gpu/session.sh "tests/gpu/deberta.sh BUILD_ARCH=sm_90a"
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
CARRY=$ROOT/.gpu_carry # read by setup-env.sh
export CARRY
STAGES=${STAGES:-build ops bench families}
BENCH_BUDGET_S=${BENCH_BUDGET_S:-60}
BENCH_BATCHES=${BENCH_BATCHES:-1,8,32,64,128}
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; FAILED+=("$1"); fi; }
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
RAGGED_COMMIT=$(bash scripts/commit-id.sh "$ROOT")
export RAGGED_COMMIT
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ) stages: $STAGES"
source tests/gpu/setup-env.sh >/dev/null
ARCHFLAGS=()
[ "${BUILD_ARCH:-}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
if has build || [ ! -x build/test_ops_cuda ]; then
	t0=$SECONDS
	make -j"$(nproc)" "${ARCHFLAGS[@]}" all build/test_ops_cuda >"$OUT/build.log" 2>&1; st=$?
	tail -2 "$OUT/build.log"; record "build ($((SECONDS - t0)) s)" $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=build/libragged.so PYTHONUNBUFFERED=1
if has ops; then
	t0=$SECONDS
	timeout 180 build/test_ops_cuda --deberta --json "$OUT/test_ops_cuda_deberta.json" \
		>"$OUT/test_ops_cuda_deberta.log" 2>&1; st=$?
	sed -n '/^| op |/,$p' "$OUT/test_ops_cuda_deberta.log" | tail -60
	record "test_ops_cuda --deberta ($((SECONDS - t0)) s)" $st
fi
if has bench; then
	t0=$SECONDS
	python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
	timeout 200 python3 bench/peer/deberta_bench.py --out-dir "$OUT" --budget-s "$BENCH_BUDGET_S" \
		--batches "$BENCH_BATCHES" --model-dir build/models ${BENCH_ARGS:-} 2>&1 | grep -v "^\[.*\] \(loaded\|warmed\)"
	record "deberta_bench ($((SECONDS - t0)) s)" "${PIPESTATUS[0]}"
fi
if has families; then
	t0=$SECONDS
	V=build/models/vocab-synthetic
	mkdir -p "$V"
	python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' >"$V/vocab.txt"
	timeout 170 python3 tests/gpu/families.py --minilm "$V" --models deberta-v3-base,deberta-v3-reranker \
		--out "$OUT/families_deberta.json" 2>&1 | tail -4
	record "families deberta ($((SECONDS - t0)) s)" "${PIPESTATUS[0]}"
fi
if has ops_full; then
	t0=$SECONDS
	timeout 300 build/test_ops_cuda >"$OUT/test_ops_cuda.log" 2>&1; st=$?
	tail -3 "$OUT/test_ops_cuda.log"; record "test_ops_cuda ($((SECONDS - t0)) s)" $st
fi
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
