# Sourced by scripts/run-tests.sh (and by tests/py/test_run_tests.py): running test suites and
# counting their cases. Needs bash. State: pass, fail, skip, desel (case counts), failed (names
# of failed suites), LOG (a scratch file the caller creates and removes).
#   run NAME CMD...        one suite in the foreground; its time printed when it ends
#   start_bg NAME CMD...   one suite in the background (RAGGED_TEST_SERIAL=1: in the foreground)
#   finish_bg              wait for the background suites; print each one's log, then its time,
#                          measured in the suite itself when it ended (not when it was waited for)
#   summary                the closing line: "N passed, N failed, N skipped, N deselected"; CI
#                          parses its beginning, "N passed, N failed"
pass=0; fail=0; skip=0; desel=0; failed=()

count() { # count PATTERN LOGFILE: sum of the numbers before PATTERN in the suite's log
	grep -oE "[0-9]+ $1" "$2" | awk '{s += $1} END {print s + 0}'
}

cmocka_count() { # cmocka_count WORD LOGFILE: "[  PASSED  ] N test(s)." and the like
	grep -oE "\[  $1 *\] [0-9]+" "$2" | awk '{s += $NF} END {print s + 0}'
}

tally() { # tally NAME STATUS LOGFILE: count the cases of one finished suite
	local name=$1 st=$2 log=$3 p f
	# cmocka: "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s), listed below:" /
	# "[  SKIPPED ] N test(s)"; pytest: "N passed, N failed, N error, N skipped, N deselected"
	p=$(( $(cmocka_count PASSED "$log") + $(count passed "$log") ))
	f=$(( $(cmocka_count FAILED "$log") + $(count failed "$log") + $(count error "$log") ))
	[ "$st" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	[ "$st" -eq 0 ] && [ "$p" -eq 0 ] && p=1 # a suite with no case counts (the fuzzer) is one test
	pass=$((pass + p)); fail=$((fail + f))
	skip=$((skip + $(cmocka_count SKIPPED "$log") + $(count skipped "$log")))
	desel=$((desel + $(count deselected "$log")))
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
# whole when it ends, and its own time: the seconds from its start to its end, written by the
# background job itself (finish_bg waits for the suites in order, so a suite that ended first
# would otherwise be timed when the ones before it ended).
BG_NAMES=(); BG_PIDS=(); BG_LOGS=()
start_bg() { # name, command...
	local name=$1 log; shift
	if [ "${RAGGED_TEST_SERIAL:-0}" = 1 ]; then
		run "$name" "$@"
		return
	fi
	log=$(mktemp)
	echo "=== $name (started; its output follows when it ends)"
	( t0=$(date +%s); "$@"; st=$?; echo $(( $(date +%s) - t0 )) >"$log.time"; exit $st ) \
		>"$log" 2>&1 &
	BG_NAMES+=("$name"); BG_PIDS+=($!); BG_LOGS+=("$log")
}
finish_bg() {
	local i st t
	for i in "${!BG_PIDS[@]}"; do
		wait "${BG_PIDS[$i]}"
		st=$?
		echo "=== ${BG_NAMES[$i]}"
		cat "${BG_LOGS[$i]}"
		tally "${BG_NAMES[$i]}" "$st" "${BG_LOGS[$i]}"
		t=$(cat "${BG_LOGS[$i]}.time" 2>/dev/null || echo "?")
		echo "--- ${BG_NAMES[$i]}: $t s (from its start to its end)"
		rm -f "${BG_LOGS[$i]}" "${BG_LOGS[$i]}.time"
	done
	BG_NAMES=(); BG_PIDS=(); BG_LOGS=()
}

summary() {
	[ ${#failed[@]} -gt 0 ] && printf 'FAILED: %s\n' "${failed[@]}"
	echo "$pass passed, $fail failed, $skip skipped, $desel deselected"
}
