#!/usr/bin/env bash
# One server over two GPUs (issue 9, item 17) on a lent 2-GPU machine, in one device call: set up
# the build dependencies from .gpu_carry (tests/gpu/setup-env.sh), build the ragged binary, write a
# random-weight BERT-base (bench/serving/make_bert_base.py, fp16 weights, the carried MiniLM
# tokenizer), then tests/gpu/multi_gpu.py: correctness of `--devices 0,1` against HF transformers
# float32, both GPUs used, and throughput of --devices 0 vs 0,1.
#   OUT=... bash tests/gpu/multi_gpu.sh [REQUESTS]
# Writes OUT/run.log, OUT/build.log, OUT/multi_gpu.json, OUT/server_*.log, OUT/loadgen_*.json.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_multi}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
export PATH=$PATH:/usr/local/cuda/bin
echo "=== $(date +%T) machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
echo "commit: $(bash scripts/commit-id.sh "$ROOT")  date: $(date -u +%FT%TZ)  cpus: $(nproc)"
source tests/gpu/setup-env.sh
echo "=== $(date +%T) build"
make -j"$(nproc)" build/ragged >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
grep -q cudaSetDevice build/ragged 2>/dev/null || ldd build/ragged | grep -qi cud || echo "warning: binary may lack CUDA"
echo "=== $(date +%T) model"
python3 bench/serving/make_bert_base.py /tmp/bert_base --dtype f16 --vocab-from "$RAGGED_MODEL_DIR" || exit 1
echo "=== $(date +%T) multi_gpu.py"
python3 tests/gpu/multi_gpu.py --bin build/ragged --model /tmp/bert_base --out "$OUT" \
	--devices 0,1 --dtype fp16 --requests "${1:-20000}"
rc=$?
echo "=== $(date +%T) done, status $rc"
exit $rc
