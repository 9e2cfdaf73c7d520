#!/usr/bin/env bash
# Runs every test: C unit tests (release and ASan+UBSan builds), then the Python suites against the
# release build and, for the CLI/model/tokenizer/server paths, against the ASan build.
# Prints a closing line "N passed, N failed, N skipped, N deselected" counting individual test
# cases (cmocka and pytest; CI parses "N passed, N failed"); a suite that fails without reporting
# a failed case (a crash) counts as one failed test; a skipped case or step is not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# run / start_bg / finish_bg / summary, and the counts; the two pytest passes and the fuzzer
# overlap on the 2-core machines: much of a server test is waiting (start-up, sockets, sleeps),
# so two passes fill the cores that one leaves idle. RAGGED_TEST_SERIAL=1 runs them one after
# another instead.
source scripts/tally.sh

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in build/tests/test_*; do
	[ -x "$t" ] && run "unit $(basename "$t")" "$t"
done
# the attention tiles at every head_dim (by default they run from head_dim 64 up)
run "unit test_ops_cpu, RAGGED_CPU_ATTN=tiles" env RAGGED_CPU_ATTN=tiles build/tests/test_ops_cpu
# a 16-thread pool on this host: the small-M GEMM's split into row parts (blk_split in
# gemm_dnnl.c) happens only with more threads than a weight has column blocks
run "unit test_ops_cpu, RAGGED_NUM_THREADS=16" env RAGGED_NUM_THREADS=16 build/tests/test_ops_cpu
# every prepared-weight row through oneDNN primitives (gemm_blk off: exact primitives below 64 rows
# and for remainders, as RAGGED_CPU_SMALLM=0 runs the library)
run "unit test_ops_cpu, RAGGED_CPU_SMALLM=0" env RAGGED_CPU_SMALLM=0 build/tests/test_ops_cpu
run "vector asm (kern_avx512.o, kern_avx2.o)" bash scripts/check-vector-asm.sh build/obj/ops/cpu
for t in build/asan/tests/test_*; do
	[ -x "$t" ] && run "unit-asan $(basename "$t")" "$t"
done

# Python suites against the release build.
T_PY=$SECONDS
# The server's request parser under libFuzzer + ASan/UBSan, bounded in time (beside the pytest
# passes; it uses one core).
start_bg "fuzz request parser (${RAGGED_FUZZ_SECONDS:-30} s)" bash tests/fuzz/run_fuzz.sh "${RAGGED_FUZZ_SECONDS:-30}"
start_bg "pytest (release)" env RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged \
	$PY -m pytest -q -p no:cacheprovider tests/py

# The same suites against the ASan+UBSan build. Python itself is not instrumented: preload the runtime
# and leave leak detection to the C programs (LSan would report the interpreter's own allocations).
ASAN_RT=$(gcc -print-file-name=libasan.so)
UBSAN_RT=$(gcc -print-file-name=libubsan.so)
start_bg "pytest (asan+ubsan)" env RAGGED_LIB=build/asan/libragged.so RAGGED_BIN=build/asan/ragged \
	RAGGED_ASAN=1 LD_PRELOAD="$ASAN_RT $UBSAN_RT" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	$PY -m pytest -q -p no:cacheprovider -m "not slow" tests/py
finish_bg
echo "--- pytest passes and fuzzer: $((SECONDS - T_PY)) s"

# The container images: built and started where a Docker daemon answers (scripts/docker-test.sh);
# elsewhere the step is skipped with its reason and counts neither as passed nor as failed, but as
# one skipped.
if [ "${RAGGED_SKIP_DOCKER:-0}" = 1 ]; then
	echo "=== docker build: skipped (RAGGED_SKIP_DOCKER=1); counted as skipped"
	skip=$((skip + 1))
elif ! command -v docker >/dev/null 2>&1; then
	echo "=== docker build: skipped (docker is not installed); counted as skipped"
	skip=$((skip + 1))
elif ! timeout 30 docker info >/dev/null 2>&1; then
	echo "=== docker build: skipped (no Docker daemon answers: docker info fails); counted as skipped"
	skip=$((skip + 1))
else
	run "docker build + health (Dockerfile)" bash scripts/docker-test.sh
fi

echo
summary
[ "$fail" -eq 0 ] && [ ${#failed[@]} -eq 0 ]
