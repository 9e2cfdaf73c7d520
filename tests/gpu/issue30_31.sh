#!/usr/bin/env bash
# Issues 30 and 31's CUDA checks in one device call (about 3 minutes with the build): build
# (sm_90a), then tests/gpu/issue30_31.py (structured outputs, prompt-lookup and draft-model
# speculation, GGUF Q8_0 and F16 on CUDA against the CPU) and tests/gpu/prompt_score_cuda.py
# (prompt scoring on CUDA against the CPU). Results in $OUT: run.log, build.log,
# issue30_31.log/.json, prompt_score.log. Exit status 0 when both passed.
# Usage: bash tests/gpu/issue30_31.sh        (run tool: carry [".gpu_carry"])
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
source tests/gpu/setup-env.sh >/dev/null
fail=0
build_sm90a || exit 1
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
timeout 200 python3 tests/gpu/issue30_31.py "$OUT/issue30_31.json" >"$OUT/issue30_31.log" 2>&1
st=$?; grep -vE "^PASS" "$OUT/issue30_31.log" | tail -20
record "issue30_31.py" $st
[ $st -eq 0 ] || fail=1
timeout 120 python3 tests/gpu/prompt_score_cuda.py >"$OUT/prompt_score.log" 2>&1
st=$?; grep -vE "^PASS" "$OUT/prompt_score.log" | tail -10
record "prompt_score_cuda.py" $st
[ $st -eq 0 ] || fail=1
exit $fail
