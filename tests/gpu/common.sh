# The preamble of the tests/gpu/*.sh device scripts, sourced by them (not run on its own):
# ROOT (the checkout), cd there, OUT (default build/gpu_results, created), every line of output
# also into $OUT/run.log, CARRY (.gpu_carry), CUDA on PATH, record NAME STATUS (prints
# "--- NAME: PASS" or "--- NAME: FAIL (STATUS)"), build_sm90a [TARGETS] (make all and TARGETS for
# sm_90a alone into $OUT/build.log, recorded; its status), the GPU's line, RAGGED_COMMIT (the carry's
# commit) and RAGGED_GPU (the GPU's name) exported, and the commit and date printed.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; fi; }
build_sm90a() {
	local t0=$SECONDS st
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all "$@" >>"$OUT/build.log" 2>&1
	st=$?
	tail -2 "$OUT/build.log"
	record "build ($((SECONDS - t0)) s)" $st
	return $st
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
export RAGGED_GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ)"
