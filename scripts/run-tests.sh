#!/usr/bin/env bash
# Runs every test: C unit tests (release and ASan+UBSan builds), then the Python suites against the
# release build and, for the CLI/model/tokenizer/server paths, against the ASan build.
# Prints a closing line "N passed, N failed" counting individual test cases (cmocka and pytest);
# a suite that fails without reporting a failed case (a crash) counts as one failed test.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pass=0; fail=0; failed=()
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

count() { # count PATTERN LOGFILE: sum of the numbers before PATTERN in the suite's log
	grep -oE "[0-9]+ $1" "$2" | awk '{s += $1} END {print s + 0}'
}

tally() { # tally NAME STATUS LOGFILE: count the cases of one finished suite
	local name=$1 st=$2 log=$3 p f
	# cmocka: "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s), listed below:"
	p=$(( $(grep -oE '\[  PASSED  \] [0-9]+' "$log" | awk '{s += $NF} END {print s + 0}') + $(count passed "$log") ))
	f=$(( $(grep -oE '\[  FAILED  \] [0-9]+' "$log" | awk '{s += $NF} END {print s + 0}') + $(count failed "$log") + $(count error "$log") ))
	[ "$st" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	[ "$st" -eq 0 ] && [ "$p" -eq 0 ] && p=1 # a suite with no case counts (the fuzzer) is one test
	pass=$((pass + p)); fail=$((fail + f))
	[ "$st" -eq 0 ] || failed+=("$name")
}

run() { # name, command...: one suite in the foreground
	local name=$1 t0=$SECONDS; shift
	echo "=== $name"
	"$@" 2>&1 | tee "$LOG"
	local st=${PIPESTATUS[0]}
	tally "$name" "$st" "$LOG"
	echo "--- $name: $((SECONDS - t0)) s"
}

# Suites that run side by side (start_bg ... then finish_bg): each writes its own log, printed
# whole when it ends. The two pytest passes and the fuzzer overlap on the 2-core machines: much
# of a server test is waiting (start-up, sockets, sleeps), so two passes fill the cores that one
# leaves idle. RAGGED_TEST_SERIAL=1 runs them one after another instead.
BG_NAMES=(); BG_PIDS=(); BG_LOGS=(); BG_T0=()
start_bg() { # name, command...
	local name=$1 log; shift
	if [ "${RAGGED_TEST_SERIAL:-0}" = 1 ]; then
		run "$name" "$@"
		return
	fi
	log=$(mktemp)
	echo "=== $name (started; its output follows when it ends)"
	"$@" >"$log" 2>&1 &
	BG_NAMES+=("$name"); BG_PIDS+=($!); BG_LOGS+=("$log"); BG_T0+=($SECONDS)
}
finish_bg() {
	local i st
	for i in "${!BG_PIDS[@]}"; do
		wait "${BG_PIDS[$i]}"
		st=$?
		echo "=== ${BG_NAMES[$i]}"
		cat "${BG_LOGS[$i]}"
		tally "${BG_NAMES[$i]}" "$st" "${BG_LOGS[$i]}"
		echo "--- ${BG_NAMES[$i]}: ended $((SECONDS - BG_T0[i])) s after its start"
		rm -f "${BG_LOGS[$i]}"
	done
	BG_NAMES=(); BG_PIDS=(); BG_LOGS=(); BG_T0=()
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in build/tests/test_*; do
	[ -x "$t" ] && run "unit $(basename "$t")" "$t"
done
# the attention tiles at every head_dim (by default they run from head_dim 64 up)
run "unit test_ops_cpu, RAGGED_CPU_ATTN=tiles" env RAGGED_CPU_ATTN=tiles build/tests/test_ops_cpu
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
# elsewhere the step is skipped with its reason and counts neither as passed nor as failed.
if [ "${RAGGED_SKIP_DOCKER:-0}" = 1 ]; then
	echo "=== docker build: skipped (RAGGED_SKIP_DOCKER=1); not counted"
elif ! command -v docker >/dev/null 2>&1; then
	echo "=== docker build: skipped (docker is not installed); not counted"
elif ! timeout 30 docker info >/dev/null 2>&1; then
	echo "=== docker build: skipped (no Docker daemon answers: docker info fails); not counted"
else
	run "docker build + health (Dockerfile)" bash scripts/docker-test.sh
fi

echo
[ ${#failed[@]} -gt 0 ] && printf 'FAILED: %s\n' "${failed[@]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ ${#failed[@]} -eq 0 ]
