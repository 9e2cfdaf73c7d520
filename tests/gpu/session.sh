#!/usr/bin/env bash
# Several GPU scripts' stages in one device call (a call has 10 minutes and brings back at most 8
# files): each argument is one job, "SCRIPT [VAR=VALUE ...]", run in order with its own results
# folder and the given environment; a job is skipped once fewer than SKIP_UNDER_S (default 90)
# seconds are left of BUDGET_S (default 560), and a job still running 15 s before the budget ends
# is killed. A job written "? SCRIPT ..." runs only when every earlier job passed. At the end every job's results are packed into
# $OUT/results.tar.xz and the combined log stays in $OUT/session.log.
#   OUT=... tests/gpu/session.sh "tests/gpu/issue19.sh STAGES='bench trace' BUILD_ARCH=sm_90a" \
#       "tests/gpu/issue20.sh STAGES=smollm2 DURATION=10"
# Exit status: the number of jobs that failed or were skipped.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
BUDGET_S=${BUDGET_S:-560}
SKIP_UNDER_S=${SKIP_UNDER_S:-90}
RES=$(mktemp -d /tmp/gpu_session.XXXXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
bad=0
n=0
for job in "$@"; do
	n=$((n + 1))
	left=$((BUDGET_S - SECONDS))
	case "$job" in
	"? "*)
		job=${job#\? }
		if [ "$bad" -gt 0 ]; then
			echo "=== job $n skipped (an earlier job failed): $job"; bad=$((bad + 1)); continue
		fi
		;;
	esac
	if [ "$left" -lt "$SKIP_UNDER_S" ]; then
		echo "=== job $n skipped ($left s left): $job"; bad=$((bad + 1)); continue
	fi
	echo "=== $(date -u +%T) job $n ($left s left): $job"
	mkdir -p "$RES/job$n"
	# shellcheck disable=SC2086
	eval "timeout -k 10 $((left - 15)) env OUT=$RES/job$n $(echo "$job" | sed -E 's/^([^ ]+)(.*)$/\2 bash \1/')"
	st=$?
	echo "=== $(date -u +%T) job $n exit $st after $SECONDS s"
	[ "$st" -eq 0 ] || bad=$((bad + 1))
done
tar -C "$RES" -cJf "$OUT/results.tar.xz" . && ls -la "$OUT"
exit "$bad"
