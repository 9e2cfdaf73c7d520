#!/usr/bin/env bash
# Issue 30 item 2's SwiGLU fusion on a lent GPU, with issues 30 / 31's CUDA checks, in one device
# call (about 6 minutes): tests/gpu/issue30_31.sh (build, issue30_31.py, prompt_score_cuda.py),
# then build/test_ops_cuda --qgemm (the quantized GEMMs and rg_op_act_mul_gemm: fused equal to
# unfused byte for byte, dense against the CPU), then tests/gpu/glu_ab.py (greedy ids fused ==
# unfused and tok/s with RAGGED_GLU_GEMV=1 against 0 on SmolLM2- and Llama-3.2-1B-shaped F16 and
# Q4_0 files). Results in $OUT (run.log, build.log, issue30_31.log/.json, prompt_score.log,
# test_ops_cuda_qgemm.log, glu_ab_<gpu>_<stamp>.json/.md). Exit status: the stages that failed.
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
bad=0
bash tests/gpu/issue30_31.sh || bad=$((bad + 1))
source tests/gpu/setup-env.sh >/dev/null
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
build_sm90a build/test_ops_cuda || { echo "test_ops_cuda did not build"; exit 9; }
t0=$SECONDS
timeout 240 build/test_ops_cuda --qgemm ${QGEMM_ARGS:-} >"$OUT/test_ops_cuda_qgemm.log" 2>&1
st=$?
grep -E "act_mul_gemm|FAIL|differ|test_ops_cuda:" "$OUT/test_ops_cuda_qgemm.log" | head -40
record "test_ops_cuda --qgemm ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || bad=$((bad + 1))
t0=$SECONDS
timeout ${GLU_TIMEOUT:-260} python3 tests/gpu/glu_ab.py "$OUT" >"$OUT/glu_ab.log" 2>&1
st=$?
grep -vE "^info" "$OUT/glu_ab.log" | tail -14
record "glu_ab.py ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || bad=$((bad + 1))
exit $bad
