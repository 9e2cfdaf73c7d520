#!/usr/bin/env bash
# Kernel traces of BERT-base (random weights at the public shapes, fp16) against the graphed packed
# PyTorch peer (bench/peer/trace.py: CUPTI through torch.profiler, kernel time per call by kind
# and top kernels, both sides on the same batches), in one device call: an sm_90a build
# (BUILD_ARCH=sm_90a) or the default one, the model, then the cells of CELLS (default: issue 21
# item 1's large-batch cells). Results in $OUT: trace_<gpu>_<date>.md / .json, run.log,
# build.log. Needs .gpu_carry (tests/gpu/setup-env.sh).
#   OUT=... bash tests/gpu/encoder_trace.sh BUILD_ARCH=sm_90a
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
CARRY=$ROOT/.gpu_carry
export CARRY
source tests/gpu/setup-env.sh >/dev/null
CELLS=${CELLS:-bert-base:fp16:u1_128:128,bert-base:fp16:u1_512:8,bert-base:fp16:u1_512:32,bert-base:fp16:u1_512:64,bert-base:fp16:u5_500:128}
ARCHFLAGS=()
[ "${BUILD_ARCH:-}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
make -j"$(nproc)" "${ARCHFLAGS[@]}" all >"$OUT/build.log" 2>&1 || { echo "build failed"; exit 1; }
BB=build/models/bert-base-random
if [ ! -f "$BB/model.safetensors" ] || [ ! -f "$BB/1_Pooling/config.json" ]; then
	python3 bench/serving/make_bert_base.py "$BB" --synthetic-vocab >/dev/null || exit 1
fi
export RAGGED_LIB=build/libragged.so
timeout 400 python3 bench/peer/trace.py --models "bert-base=$BB" --cells "$CELLS" \
	--n "${TRACE_N:-20}" --out-dir "$OUT"
