#!/usr/bin/env bash
# Issue 27's last gap on a lent GPU machine, in one device call: the server's per-token time at
# 16-64 streams against the CLI's. Build (sm_90a); the GPU paths merged since the last GPU run
# (tests/gpu/generate_cuda.py, sample_cuda.py, decoder_hf.py gpt2,llama: the seq_table, app/
# and gen/params.c changes); then bench/peer/entry_points.py on random GPT-2 and SmolLM2 shapes
# at batch 16 and 64: the CLI, and the server with its defaults and with --no-prefix-caching, with
# the server's model time per step, its wall clock per step and the clients' steady decode gap
# (events 32..96), so that the server's own work between steps shows apart from the model's.
# NOPC=0 leaves the --no-prefix-caching rows out. Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh). Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
STAGES=${STAGES:-build check bench}
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; fi; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
export RAGGED_GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ) stages: $STAGES"
source tests/gpu/setup-env.sh >/dev/null
if has build || [ ! -x build/ragged ]; then
	t0=$SECONDS
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
	record "build ($((SECONDS - t0)) s)" $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
export RAGGED_INTERNAL_LIB=$ROOT/build/libragged_internal.so
if has check; then
	timeout 300 python3 tests/gpu/generate_cuda.py >"$OUT/generate_cuda.log" 2>&1
	record "generate_cuda.py" $?
	grep -c PASS "$OUT/generate_cuda.log"; grep FAIL "$OUT/generate_cuda.log" | head
	timeout 300 python3 tests/gpu/sample_cuda.py >"$OUT/sample_cuda.log" 2>&1
	record "sample_cuda.py" $?
	tail -3 "$OUT/sample_cuda.log"
	timeout 240 python3 tests/gpu/decoder_hf.py "$OUT/decoder_hf.json" gpt2,llama \
		>"$OUT/decoder_hf.log" 2>&1
	record "decoder_hf.py gpt2,llama" $?
	tail -4 "$OUT/decoder_hf.log"
fi
M=/tmp/rg27
mkdir -p $M
if has bench; then
	python3 bench/serving/make_gen_model.py smollm2 $M/smollm2 >/dev/null &&
	python3 bench/serving/make_gen_model.py gpt2 $M/gpt2 >/dev/null
	record "models" $?
	for k in gpt2 smollm2; do
		timeout 200 python3 bench/peer/entry_points.py "$OUT/entry_points_gpu.json" \
			--model $M/$k --label $k --device cuda --batches 16,64 --only cli,server \
			--trace-dir "$OUT/traces"
		record "entry points $k cli+server" $?
		[ "${NOPC:-1}" = 1 ] || continue
		timeout 150 python3 bench/peer/entry_points.py "$OUT/entry_points_gpu.json" \
			--model $M/$k --label $k --device cuda --batches 16,64 --only server \
			--server-args=--no-prefix-caching
		record "entry points $k server --no-prefix-caching" $?
	done
fi
# perf (when the machine has it): where the server's CPU time goes at 64 GPT-2 streams, with
# rounds of 1,500 new tokens so that the steady decode dominates; flat self time by symbol of
# the ragged process's threads
if has perf; then
	if command -v perf >/dev/null; then
		EP_NEW=1500 timeout 200 perf record -F 2000 -g -o "$OUT/perf.data" -- \
			python3 bench/peer/entry_points.py "$OUT/entry_points_perf.json" \
			--model $M/gpt2 --label gpt2-perf --device cuda --batches 64 --only server \
			--trace-dir "$OUT/traces_perf" >/dev/null 2>&1
		record "perf record" $?
		perf report -i "$OUT/perf.data" --comm ragged --no-children --sort symbol \
			--stdio 2>/dev/null | grep -E "^ +[0-9.]+%" | head -60 >"$OUT/perf_top.txt"
		perf report -i "$OUT/perf.data" --comm ragged --no-children --sort tid \
			--stdio 2>/dev/null | grep -E "^ +[0-9.]+%" | head -30 >"$OUT/perf_tid.txt"
		rm -f "$OUT/perf.data"
		head -30 "$OUT/perf_top.txt"
	else
		echo "--- perf: not on this machine"
	fi
fi
