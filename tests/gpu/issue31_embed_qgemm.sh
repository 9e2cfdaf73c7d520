#!/usr/bin/env bash
# One device call (2026-12-03): the rebuilt test_ops_cuda --qgemm (reference rounded to the act
# dtype) and tests/gpu/decoder_embed_cuda.py (decoder embeddings on CUDA). Results in $OUT.
source tests/gpu/common.sh
source tests/gpu/setup-env.sh >/dev/null
make -j16 CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" all build/test_ops_cuda >"$OUT/build.log" 2>&1; record build $?
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
timeout 200 build/test_ops_cuda --qgemm --json "$OUT/qgemm.json" > "$OUT/qgemm.log" 2>&1; st=$?
grep -E "FAIL|test_ops_cuda:" "$OUT/qgemm.log" | head; record "test_ops_cuda --qgemm" $st
timeout 200 python3 tests/gpu/decoder_embed_cuda.py 2>&1 | tee "$OUT/decoder_embed_cuda.log" | grep -v -i warn; record decoder_embed_cuda ${PIPESTATUS[0]}
