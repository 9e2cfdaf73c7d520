#!/usr/bin/env bash
# Runs every test: C unit tests (release and ASan+UBSan builds), then the Python suites against the
# release build and, for the CLI/model/tokenizer/server paths, against the ASan build.
# Prints a closing line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pass=0; fail=0; failed=()

run() { # name, command...
	local name=$1; shift
	echo "=== $name"
	if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name"); fi
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in build/tests/test_*; do
	[ -x "$t" ] && run "unit $(basename "$t")" "$t"
done
for t in build/asan/tests/test_*; do
	[ -x "$t" ] && run "unit-asan $(basename "$t")" "$t"
done

# Python suites against the release build.
run "pytest (release)" env RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged \
	$PY -m pytest -q -p no:cacheprovider tests/py

# The same suites against the ASan+UBSan build. Python itself is not instrumented: preload the runtime
# and leave leak detection to the C programs (LSan would report the interpreter's own allocations).
ASAN_RT=$(gcc -print-file-name=libasan.so)
UBSAN_RT=$(gcc -print-file-name=libubsan.so)
run "pytest (asan+ubsan)" env RAGGED_LIB=build/asan/libragged.so RAGGED_BIN=build/asan/ragged \
	RAGGED_ASAN=1 LD_PRELOAD="$ASAN_RT $UBSAN_RT" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	$PY -m pytest -q -p no:cacheprovider -m "not slow" tests/py

echo
[ ${#failed[@]} -gt 0 ] && printf 'FAILED: %s\n' "${failed[@]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
