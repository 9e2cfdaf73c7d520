#!/usr/bin/env bash
# ragged vs PyTorch + HF transformers on a lent GPU machine, in one device call (< 5.5 min):
# set up the build dependencies (tests/gpu/setup-env.sh: .gpu_carry/ supplies what the machine
# lacks, and the fp16-rounded MiniLM), build, write a random-weight BERT-base, then
# bench/peer/bench_vs_torch.py on MiniLM and BERT-base, fp32 and fp16.
#   OUT=... bench/peer/gpu.sh [extra bench_vs_torch.py args]
# $OUT gets 4 files: run.log, build.log, peer_<gpu>_<date>.json, peer_<gpu>_<date>.md.
# Exit status: the benchmark's (1 when a correctness check failed), or 1 when the build failed.
set -u
T0=$SECONDS
LIMIT=${PEER_LIMIT_S:-325}   # whole script, seconds
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CARRY=$ROOT/.gpu_carry
OUT=${OUT:-$ROOT/build/gpu_peer}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "commit: $(bash scripts/commit-id.sh "$ROOT")"
source tests/gpu/setup-env.sh
echo "=== $(date +%T) build (make all)"
timeout 200 make -j"$(nproc)" all >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "built in $((SECONDS - T0)) s"
BB=build/models/bert-base-random
if [ ! -f "$BB/model.safetensors" ] || [ ! -f "$BB/1_Pooling/config.json" ]; then
	echo "=== $(date +%T) random BERT-base -> $BB"
	python3 bench/serving/make_bert_base.py "$BB" --vocab-from "$RAGGED_MODEL_DIR" || exit 1
fi
LEFT=$((LIMIT - (SECONDS - T0)))
BUDGET=$((LEFT - 70))
[ $BUDGET -gt 200 ] && BUDGET=200
[ $BUDGET -lt 20 ] && BUDGET=20
echo "=== $(date +%T) bench_vs_torch: ${LEFT} s left, budget ${BUDGET} s"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=false
timeout -k 5 $((LEFT - 8)) python3 bench/peer/bench_vs_torch.py --device cuda \
	--models "minilm=$RAGGED_MODEL_DIR,bert-base=$BB" --dtypes fp32,fp16 \
	--budget-s "$BUDGET" --out-dir "$OUT" "$@"
st=$?
echo "=== $(date +%T) bench_vs_torch exit status $st (124: timed out; partial results kept)"
ls -l "$OUT"
exit $st
