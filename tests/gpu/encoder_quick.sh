#!/usr/bin/env bash
# The encoder's CUDA checks that need no model files (so that they fit a device call whose carry
# has no model_f16, CARRY_MODEL=0): build/test_ops_cuda (every op against the CPU backend, fp32 /
# fp16 / bf16) and tests/gpu/families.py (five encoder families at their public sizes, random
# weights, against the float64 reference, graphs and eager, every layout) on a random-weight
# MiniLM whose tokenizer files are a synthetic 30522-token vocabulary. Used to re-check the
# encoder after a backend-wide change (e.g. programmatic dependent launch on by default), under
# whatever RAGGED_* environment the caller sets. Results in $OUT: test_ops_cuda.log,
# families.json, run.log. Needs .gpu_carry (tests/gpu/setup-env.sh) and build/ from make all.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
CARRY=$ROOT/.gpu_carry
source tests/gpu/setup-env.sh >/dev/null
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; FAILED+=("$1"); fi; }
ARCHFLAGS=()
[ "${BUILD_ARCH:-}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
make -j"$(nproc)" "${ARCHFLAGS[@]}" all build/test_ops_cuda >"$OUT/build.log" 2>&1; record build $?
echo "RAGGED_PDL=${RAGGED_PDL:-unset (on)}"
timeout 300 build/test_ops_cuda >"$OUT/test_ops_cuda.log" 2>&1; st=$?
tail -3 "$OUT/test_ops_cuda.log"; record "test_ops_cuda" $st
V=build/models/vocab-synthetic
mkdir -p "$V"
python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' >"$V/vocab.txt"
M=build/models/minilm-random
[ -f "$M/config.json" ] || python3 bench/serving/make_bert_base.py "$M" --arch minilm --vocab-from "$V" >/dev/null
export RAGGED_LIB=build/libragged.so
timeout 400 python3 tests/gpu/families.py --minilm "$M" --out "$OUT/families.json" 2>&1 | tail -8
record "families" ${PIPESTATUS[0]}
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
