#!/usr/bin/env bash
# The serving benchmark on a lent GPU machine, in one device call: set up the build dependencies
# (tests/gpu/setup-env.sh), build, then bench/serving/run.sh on a random-weight BERT-base.
#   OUT=... bench/serving/gpu.sh SCHEDULERS BUDGET_S [DTYPE] [extra sweep.py args]
# Results (JSON, markdown, PNG) go to $OUT, to be copied into bench/results/ as they are named.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CARRY=$ROOT/.gpu_carry
OUT=${OUT:-$ROOT/build/gpu_serving}
SCHEDS=${1:?schedulers}
BUDGET=${2:?budget seconds}
DTYPE=${3:-fp16}
shift 3 2>/dev/null || shift $#
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
source tests/gpu/setup-env.sh
make -j"$(nproc)" all >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
export PYTHONUNBUFFERED=1
bench/serving/run.sh --model bert-base --device cuda --dtype "$DTYPE" --budget-s "$BUDGET" \
	--schedulers "$SCHEDS" --out-dir "$OUT" --tag "$(echo "$SCHEDS" | tr ',' '-')" "$@"
