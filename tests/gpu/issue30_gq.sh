#!/usr/bin/env bash
# Issue 30 item 1 on a lent GPU machine (one H200), in one device call, about 6 minutes: GGUF
# weights kept quantized on CUDA (src/ops/cuda/qgemv.cu).
#  1. build (sm_90a only) and build/test_ops_cuda;
#  2. test_ops_cuda --qgemm: GEMMs on random Q8_0 / Q4_0 / Q4_1 / Q4_K / Q6_K blocks (M 1..300:
#     qmv_kernel, the tensor-core small-M kernel and the dequantize + cuBLASLt path, every act,
#     graphs, the prepare contract) against the CPU GEMM on rg_gguf_to_f32's weights, fp32 / fp16
#     / bf16; then whether the ctypes test library loads after numpy;
#  3. tests/gpu/issue30_gq.py: random SmolLM2-135M- and Llama-3.2-1B-shaped GGUF files (F16, Q8_0,
#     Q4_0): quantized greedy ids == --weights dequantize (or a near tie), resident weight bytes,
#     decode tok/s at batch 1 and 16; writes decode_quant_<gpu>_<stamp>.json / .md into $OUT.
# QUICK=1: test_ops_cuda --quick and the SmolLM2 shape only (GQ_MODELS overrides the shapes).
# Results in $OUT (run.log, build.log, test_ops_cuda_qgemm.log/.json, issue30_gq.log, the bench
# files). Usage: bash tests/gpu/issue30_gq.sh
source "$(dirname "$0")/common.sh" # ROOT, OUT, run.log, CARRY, record, RAGGED_COMMIT
source tests/gpu/setup-env.sh >/dev/null
QUICK=${QUICK:-0}
fail=0
t0=$SECONDS
make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
	all build/test_ops_cuda >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
record "build ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || exit 1
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
t0=$SECONDS
q=""; [ "$QUICK" = 1 ] && q="--quick"
timeout 240 build/test_ops_cuda --qgemm $q --json "$OUT/test_ops_cuda_qgemm.json" \
	>"$OUT/test_ops_cuda_qgemm.log" 2>&1; st=$?
grep -E "^\| (qgemm|qgemv)|FAIL|error-path|test_ops_cuda:" "$OUT/test_ops_cuda_qgemm.log" | head -80
record "test_ops_cuda --qgemm ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || fail=1
# the ctypes test library dlopen'ed after numpy (it crashed in libsentencepiece's initializer on
# this machine before build/internal.map kept its C++ symbols local)
python3 -c "import numpy, sys; sys.path.insert(0, 'tests/py'); import ragged_ctypes; print('ragged_ctypes loaded after numpy')" \
	>"$OUT/internal_lib.log" 2>&1; st=$?; tail -1 "$OUT/internal_lib.log"
record "libragged_internal.so loads after numpy" $st
t0=$SECONDS
models=${GQ_MODELS:-smollm2-135m,llama-3.2-1b}
[ "$QUICK" = 1 ] && models=${GQ_MODELS:-smollm2-135m}
GQ_MODELS=$models timeout ${GQ_TIMEOUT:-400} python3 tests/gpu/issue30_gq.py "$OUT" >"$OUT/issue30_gq.log" 2>&1; st=$?
cat "$OUT/issue30_gq.log" | grep -vE "^info .*GGUF files" | tail -40
record "issue30_gq.py ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || fail=1
exit $fail
