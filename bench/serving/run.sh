#!/usr/bin/env bash
# Serving benchmark: every scheduler x length distribution, open-loop Poisson rate sweep to
# saturation with `ragged loadgen` against `ragged serve`; JSON + markdown + PNG plots land in
# bench/results/. Builds build/ragged when missing. All arguments go to bench/serving/sweep.py
# (see `bench/serving/run.sh --help`).
#
#   bench/serving/run.sh --quick                                     # small CPU run (~4 min)
#   bench/serving/run.sh --model bert-base --device cuda --dtype fp16 --budget-s 480
#   bench/serving/run.sh --model minilm --device cuda --budget-s 300 --schedulers token,das
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ ! -x build/ragged ]; then
	echo "run.sh: building build/ragged"
	make -j"$(nproc)" build/ragged >/dev/null
fi
exec "$PY" bench/serving/sweep.py "$@"
