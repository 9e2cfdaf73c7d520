#!/usr/bin/env bash
# Issue 21 item 1 on a lent Hopper GPU, in one device call (about 4-5 minutes): the wgmma encoder
# attention (src/ops/cuda/attention_wgmma.cu, on by default, RAGGED_ATTN_WGMMA=0 turns it off).
#  1. build for sm_90a only (BUILD_ARCH=sm_90a, the default here; BUILD_ARCH=all: the Makefile's
#     three architectures, so that the probe's choice of cubin is what a release build gets);
#  2. build/test_ops_cuda --attn-wgmma: the wgmma kernel against the CPU twin and the mma.sync
#     kernel, fp16 and bf16, 12 x 64 and 4 x 128, lengths 1..1000 alone and in mixed batches, batch
#     invariance; fails unless every case launched the wgmma kernel;
#  3. compute-sanitizer memcheck (and synccheck) on its --quick subset, fp16; racecheck as
#     information (whether it models wgmma's shared-memory reads is not known);
#  4. bench/peer/attn_bench.py: RAGGED_ATTN_WGMMA=0 (mma.sync) vs 1 (wgmma) vs varlen_attn at
#     BERT-base's 12 x 64 and at 8 x 128, fp16 and bf16, 8 / 32 / 128 sequences of uniform 5-500
#     tokens and 64 x 512 (TFLOP/s, ratios, errors against fp32 SDPA);
#  5. FULL=1 only: the whole build/test_ops_cuda with RAGGED_ATTN_WGMMA=1 (every attention test
#     that fits the path runs it);
#  6. E2E=1 only: bench/peer/bench_graphed.py on a random-weight BERT-base, fp16, 32 and 128
#     sequences of 5-500 tokens, with RAGGED_ATTN_WGMMA=0 and 1 (about 3 more minutes; E2E_S:
#     each run's budget, default 60 s).
# Results in $OUT (8 files at most): run.log, build.log, test_wgmma.log, sanitizer.log,
# attn_<gpu>_<YYYYMMDD-HHMM>-wgmma-ab.json / .md, (if the bench failed) bench.log, (FULL=1)
# test_full.log, (E2E=1) e2e.tar.xz. Needs .gpu_carry (tests/gpu/setup-env.sh). The benchmark
# files go to bench/results/, the logs to tests/gpu/results/ (names: bench/results/README.md).
# BENCH_S: attn_bench's budget in seconds (default 100).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
CARRY=$ROOT/.gpu_carry
source tests/gpu/setup-env.sh >/dev/null
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; FAILED+=("$1"); fi; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
ARCHFLAGS=()
[ "${BUILD_ARCH:-sm_90a}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
echo "=== $(date +%T) build (${BUILD_ARCH:-sm_90a})"
make -j"$(nproc)" "${ARCHFLAGS[@]}" all build/test_ops_cuda >"$OUT/build.log" 2>&1; record build $?

# (info) which cubin the driver loads from a fatbin of the Makefile's default three architectures:
# the wgmma path runs only where it is the sm_90a one (rg_cuda_attention_wgmma_probe)
P=$(mktemp -d /tmp/sm90a_probe.XXXXXX)
cat >"$P/p.cu" <<'PROBE'
#include <cstdio>
__global__ void k(int *o)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	*o = 1;
#else
	*o = 0;
#endif
}
int main()
{
	int *d, h = -1;
	cudaMalloc(&d, 4);
	k<<<1, 1>>>(d);
	cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
	printf("(info) default 3-architecture fatbin: the driver loads the %s cubin\n",
	       h == 1 ? "sm_90a" : h == 0 ? "sm_80/sm_90 (not sm_90a)" : "(error)");
	return 0;
}
PROBE
nvcc -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
	-gencode=arch=compute_90a,code=sm_90a -o "$P/p" "$P/p.cu" >/dev/null 2>&1 && "$P/p"
rm -rf "$P"

echo "=== $(date +%T) test_ops_cuda --attn-wgmma"
timeout 240 build/test_ops_cuda --attn-wgmma >"$OUT/test_wgmma.log" 2>&1; st=$?
grep -i "wgmma\|FAIL\|got " "$OUT/test_wgmma.log" | grep -v "^| .*PASS |$" | head -20
grep "^| attention wgmma" "$OUT/test_wgmma.log"
record "test_ops_cuda --attn-wgmma" $st

echo "=== $(date +%T) compute-sanitizer (--attn-wgmma --quick --dtype fp16)"
{
	for tool in memcheck synccheck; do
		echo "--- $tool"
		timeout 150 compute-sanitizer --tool $tool --print-limit 30 --error-exitcode 9 \
			build/test_ops_cuda --attn-wgmma --quick --dtype fp16 2>&1 |
			grep -v '^| \|^$' | head -80
		echo "status ${PIPESTATUS[0]}"
	done
	echo "--- (info) racecheck"
	timeout 100 compute-sanitizer --tool racecheck --print-limit 30 \
		build/test_ops_cuda --attn-wgmma --quick --dtype fp16 2>&1 | grep -v '^| \|^$' | head -60
	echo "info-status ${PIPESTATUS[0]}"
} >"$OUT/sanitizer.log" 2>&1
grep -A3 "^--- \|ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT/sanitizer.log" | grep "^---\|SUMMARY\|status" | head -12
for tool in memcheck synccheck; do
	s=$(sed -n "/^--- $tool/,/^status/p" "$OUT/sanitizer.log" | sed -n 's/^status //p')
	record "$tool" "${s:-1}"
done

echo "=== $(date +%T) attn_bench: RAGGED_ATTN_WGMMA=0 vs 1 vs varlen_attn"
BS=${BENCH_S:-100}
timeout -k 5 $((BS + 90)) python3 bench/peer/attn_bench.py --shapes bert-base,d128 \
	--dtypes fp16,bf16 --ragged-env RAGGED_ATTN_WGMMA=0,1 \
	--cells u5_500:8,u5_500:32,u5_500:128,f512:64 --budget-s "$BS" --out-dir "$OUT" \
	--tag wgmma_ab >"$OUT/bench.log" 2>&1
st=$?
grep "ERROR\|FLAG\|ceilings" "$OUT/bench.log" | tail -20
for f in "$OUT"/attn_*-wgmma-ab.md; do [ -f "$f" ] && sed -n '/^## ragged A\/B/,$p' "$f"; done
record "attn_bench" $st
[ $st -eq 0 ] && rm -f "$OUT/bench.log" # kept only when it failed (8 files at most come back)

if [ "${FULL:-0}" = 1 ]; then
	echo "=== $(date +%T) test_ops_cuda (all ops) with RAGGED_ATTN_WGMMA=1"
	RAGGED_ATTN_WGMMA=1 timeout 300 build/test_ops_cuda >"$OUT/test_full.log" 2>&1; st=$?
	grep "FAIL\|wgmma attention:" "$OUT/test_full.log" | head -20
	record "test_ops_cuda RAGGED_ATTN_WGMMA=1" $st
fi
if [ "${E2E:-0}" = 1 ]; then
	# end to end: random-weight BERT-base, ragged (attention by mma.sync, then by wgmma) vs the
	# CUDA-graphed packed PyTorch peer, fp16, uniform 5-500 tokens, 32 and 128 sequences
	BB=build/models/bert-base-random
	# the vocabulary: the carried MiniLM's, else (a carry without model_f16) a synthetic
	# 30522-token one (the benchmark feeds token ids)
	V=${RAGGED_MODEL_DIR:-}
	if [ -z "$V" ] || [ ! -f "$V/vocab.txt" ]; then
		V=build/models/vocab-synthetic
		mkdir -p "$V"
		python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' >"$V/vocab.txt"
	fi
	if [ ! -f "$BB/model.safetensors" ] || [ ! -f "$BB/1_Pooling/config.json" ]; then
		python3 bench/serving/make_bert_base.py "$BB" --vocab-from "$V" >/dev/null
	fi
	E=$(mktemp -d /tmp/e2e.XXXXXX)
	for w in 0 1; do
		echo "=== $(date +%T) bench_graphed BERT-base fp16, RAGGED_ATTN_WGMMA=$w"
		RAGGED_ATTN_WGMMA=$w PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false timeout -k 5 200 \
			python3 bench/peer/bench_graphed.py --models "bert-base=$BB" --dtypes fp16 \
			--dists "${E2E_DISTS:-u5_500}" --batches "${E2E_BATCHES:-32,128}" --budget-s "${E2E_S:-60}" --out-dir "$E" \
			--tag "wgmma$w" >"$E/stdout$w.log" 2>&1
		record "bench_graphed RAGGED_ATTN_WGMMA=$w" $?
		cat "$E"/peer_graphed_*-wgmma$w.md 2>/dev/null | grep "^| " | head -12
	done
	tar -C "$E" -cJf "$OUT/e2e.tar.xz" . && rm -rf "$E"
fi
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
