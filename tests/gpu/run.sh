#!/usr/bin/env bash
# GPU verification of the CUDA backend, in one go (one device call): build, op parity
# (tests/gpu/test_ops_cuda), the model-level pytest suite on CUDA for fp32/fp16/bf16 (with the
# raw pooled vectors and per-token hidden states of rg_model_run_ex),
# compute-sanitizer (memcheck + racecheck on the ops, memcheck on a model run) and a 10,000-batch
# memory soak (bench/soak.py). Results go to $OUT (default build/gpu_results), at most 9 files:
#   run.log  build.log  test_ops_cuda.json  sanitizer.log  pytest_fp32.log  pytest_fp16.log
#   pytest_bf16.log  soak.json  families.json
# To keep them, copy them into tests/gpu/results/ as
# gpu_test_<gpu>_<YYYYMMDD-HHMM>-<label>-<file> (tests/gpu/results/README.md).
#
# On a machine without ragged's build dependencies or the model (the lent GPU machines have no
# network), the git-ignored folder .gpu_carry/ supplies them:
#   deps.tar.xz      headers + shared libraries (OpenBLAS, json-c, utf8proc, microhttpd, sqlite3,
#                    cmocka) from the Debian build machine, used only where the system lacks them;
#   model_f16/       all-MiniLM-L6-v2 with its weights rounded to F16 (the 90 MB F32 file does not
#                    fit the 64 MiB transfer); the tests compare against the float64 reference
#                    computed from the same files, so the rounding does not enter the comparison;
#   fortunes.tar.xz  the English sentences the model tests read from /usr/share/games/fortunes;
#   COMMIT           the commit hash (the transferred tree has no .git).
# Exit status: 0 when every stage passed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
J=$(nproc)
export PATH=$PATH:/usr/local/cuda/bin
FAILED=()
step() { echo; echo "=== $(date +%T) $*"; }
record() { # record NAME STATUS
	if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL (status $2)"; FAILED+=("$1"); fi
}

step "machine"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version | tail -2
echo "commit: $(bash scripts/commit-id.sh "$ROOT")"
echo "date: $(date -u +%FT%TZ)  cpus: $J  python: $(python3 --version 2>&1)"

step "dependencies"
source tests/gpu/setup-env.sh
python3 -c 'import numpy, safetensors, tokenizers, pytest; print("numpy", numpy.__version__, "tokenizers", tokenizers.__version__)'

step "build (make all)"
make -j"$J" all >"$OUT/build.log" 2>&1
st=$?
tail -5 "$OUT/build.log"
record build $st
[ $st -eq 0 ] || { echo "build failed: see build.log"; exit 1; }
cuobjdump --list-elf build/libragged.so | grep -o 'sm_[0-9]*a\?' | sort | uniq -c
make -j"$J" build/test_ops_cuda >>"$OUT/build.log" 2>&1
record "build test_ops_cuda" $?

step "soak: 10,000 random ragged batches, fp16 (alone on the GPU: it reads device-wide memory)"
timeout 150 python3 bench/soak.py "$MODEL" --device cuda --dtype fp16 --batches 10000 --json "$OUT/soak.json"
record "soak fp16" $?

step "model tests on CUDA (fp32, fp16, bf16 in parallel) + op parity + compute-sanitizer"
XD=""
python3 -c 'import xdist' 2>/dev/null && XD="-n 4"
declare -A PYPID
for dt in fp32 fp16 bf16; do
	RAGGED_TEST_DEVICE=cuda RAGGED_TEST_DTYPE=$dt RAGGED_NUM_THREADS=2 \
		timeout 300 python3 -m pytest -q -rfE -p no:cacheprovider $XD --durations=5 -m "not slow" \
		tests/py/test_model.py tests/py/test_server_compat.py::test_lib_run_ex_raw_and_hidden \
		>"$OUT/pytest_$dt.log" 2>&1 &
	PYPID[$dt]=$!
done

{
	shuf -n 40 --random-source=<(yes) <(cat /usr/share/games/fortunes/* 2>/dev/null | tr -s '\n%' '\n' | grep -E '.{20,200}') >/tmp/sents.txt
	# the op test's own table and [ok] lines are dropped: only the sanitizer's report is kept
	echo "--- memcheck (leak check): test_ops_cuda --quick --skip-oom"
	RAGGED_NUM_THREADS=4 timeout 120 compute-sanitizer --tool memcheck --leak-check full \
		--print-limit 30 --error-exitcode 9 build/test_ops_cuda --quick --skip-oom 2>&1 |
		grep -v '^| \|^  \[ok\]\|^$' | head -150
	echo "status ${PIPESTATUS[0]}"
	# racecheck/synccheck/initcheck on ragged's own kernels (cuBLASLt left out: --no-gemm)
	for tool in racecheck synccheck initcheck; do
		echo "--- $tool: test_ops_cuda --quick --skip-oom --no-gemm (fp32, fp16, bf16)"
		RAGGED_NUM_THREADS=4 timeout 120 compute-sanitizer --tool $tool --print-limit 30 \
			--error-exitcode 9 build/test_ops_cuda --quick --skip-oom --no-gemm 2>&1 |
			grep -v '^| \|^  \[ok\]\|^$' | head -80
		echo "status ${PIPESTATUS[0]}"
	done
	# informational: racecheck over the GEMMs too; hazards are counted per kernel name
	echo "--- (info) racecheck incl. cuBLASLt: test_ops_cuda --quick --skip-oom --dtype fp16"
	RAGGED_NUM_THREADS=4 timeout 80 compute-sanitizer --tool racecheck --print-limit 100000 \
		build/test_ops_cuda --quick --skip-oom --dtype fp16 2>&1 |
		grep -oE 'Potential [A-Z]+ hazard|Thread \([0-9,]+\) at [A-Za-z0-9_]+|RACECHECK SUMMARY.*' |
		sed -E 's/Thread \([0-9,]+\) at /kernel /' | sort | uniq -c | sort -rn | head -20
	echo "info-status ${PIPESTATUS[0]}"
	echo "--- memcheck: ragged embed, MiniLM, $(wc -l </tmp/sents.txt) sentences, fp16 and fp32"
	for dt in fp16 fp32; do
		timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 build/ragged embed \
			--model "$MODEL" --device cuda --dtype $dt --input /tmp/sents.txt \
			--output /tmp/emb_$dt.jsonl 2>&1 | tail -8
		echo "status ${PIPESTATUS[0]} lines $(wc -l </tmp/emb_$dt.jsonl 2>/dev/null)"
	done
} >"$OUT/sanitizer.log" 2>&1 &
SANPID=$!

RAGGED_NUM_THREADS=4 timeout 180 build/test_ops_cuda --json "$OUT/test_ops_cuda.json"
record "test_ops_cuda (fp32/fp16/bf16)" $?

wait $SANPID
echo "compute-sanitizer:"
grep -E "^---|^status|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log"
bad=$(grep -c '^status [^0]' "$OUT/sanitizer.log")
record "compute-sanitizer" "$bad"

for dt in fp32 fp16 bf16; do
	wait "${PYPID[$dt]}"
	st=$?
	echo "pytest $dt:"; grep -E "passed|failed|error" "$OUT/pytest_$dt.log" | tail -3
	grep -E "^FAILED|^ERROR" "$OUT/pytest_$dt.log" | head -20
	record "pytest test_model.py $dt" $st
done

step "encoder families at their public sizes: HF float64 vs reference, ragged CPU and CUDA"
RAGGED_NUM_THREADS=8 timeout 300 python3 tests/gpu/families.py --minilm "$MODEL" \
	--out "$OUT/families.json"
record "families (families.json)" $?

step "summary"
if [ ${#FAILED[@]} -eq 0 ]; then echo "ALL STAGES PASSED"; exit 0; fi
echo "FAILED STAGES: ${FAILED[*]}"
exit 1
