#!/usr/bin/env bash
# Issue 19 on a lent GPU machine, in one device call: build (BUILD_ARCH=sm_90a builds for Hopper
# only, to save device time), then the checks and measurements named in STAGES (default: all):
#   parity    tests/gpu/decoder_cuda_cpu.py (CUDA vs CPU step) plain and under memcheck
#   generate  tests/gpu/generate_cuda.py (rg_generate CUDA vs CPU: greedy, seeded sampling, beams)
#             plain and under memcheck
#   ref       tests/gpu/ref_vs_hf.py (the float64 reference vs transformers in float64)
#   hf        tests/gpu/decoder_hf.py (transformers parity, greedy and beam identity)
#   sample    tests/gpu/sample_cuda.py (device sampling vs its CPU twin) plain and under memcheck
#             (SAMPLE_QUICK=1: a smaller set of cases under the sanitizer)
#   bench     bench/peer/decode_bench.py (greedy tok/s vs HF generate and a graphed PyTorch loop)
#   trace     bench/peer/decode_trace.py (kernel trace of a decode step)
#   topk      bench/kernels/topk_bench.py (hierarchical top-k vs full sort vs torch.topk)
#   modes     bench/peer/decode_modes.py on CUDA fp16, GPT-2 and SmolLM2 shapes (beam 4 and
#             top-k/top-p per-step cost vs greedy; MODES_NEW, MODES_REPEATS)
# MEMCHECK="parity sample" (say) limits the compute-sanitizer passes to those stages; SAMPLE_QUICK=1
# makes the plain sampling pass the small one too.
# Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh). Results in $OUT: keep the benchmark
# JSON (decode_bench, decode_trace, topk_bench, decode_modes_*) in bench/results/ and run.log,
# ref_vs_hf.json and decoder_hf.json in tests/gpu/results/, each renamed
# <what>_<gpu>_<YYYYMMDD-HHMM>[-<qualifier>].<ext> (bench/results/README.md).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
STAGES=${STAGES:-parity generate ref hf sample bench trace topk}
export PATH=$PATH:/usr/local/cuda/bin
FAILED=()
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS (at $SECONDS s)"; else echo "--- $1: FAIL ($2, at $SECONDS s)"; FAILED+=("$1"); fi; }
# MEMCHECK: the stages whose compute-sanitizer memcheck pass runs (default: all that have one)
MEMCHECK=${MEMCHECK:-parity generate sample}
mc() { case " $MEMCHECK " in *" $1 "*) return 0 ;; esac; return 1; }
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ) stages: $STAGES"
source tests/gpu/setup-env.sh >/dev/null
ARCHFLAGS=()
[ "${BUILD_ARCH:-}" = sm_90a ] && ARCHFLAGS=(CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
t0=$SECONDS
make -j"$(nproc)" "${ARCHFLAGS[@]}" all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
record "build ($((SECONDS - t0)) s)" $st
[ $st -eq 0 ] || exit 1
export RAGGED_LIB=build/libragged.so RAGGED_BIN=build/ragged RAGGED_INTERNAL_LIB=build/libragged_internal.so
MC=(compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20)
if has parity; then
	timeout 200 python3 tests/gpu/decoder_cuda_cpu.py | tail -12; record "CUDA vs CPU step" ${PIPESTATUS[0]}
	for tc in paged fresh; do
		RAGGED_PREFILL_TC=$tc timeout 200 python3 tests/gpu/decoder_cuda_cpu.py | tail -12; record "CUDA vs CPU step, RAGGED_PREFILL_TC=$tc" ${PIPESTATUS[0]}
	done
	if mc parity; then
		# MC_PREFILL_TC=paged: the sanitizer pass runs the block-table tensor-core prefill
		RAGGED_PREFILL_TC=${MC_PREFILL_TC:-} timeout 200 "${MC[@]}" python3 tests/gpu/decoder_cuda_cpu.py 2>&1 | tail -3
		record "memcheck step${MC_PREFILL_TC:+ (RAGGED_PREFILL_TC=$MC_PREFILL_TC)}" ${PIPESTATUS[0]}
	fi
fi
if has generate; then
	timeout 200 python3 tests/gpu/generate_cuda.py | tail -30; record "rg_generate CUDA vs CPU" ${PIPESTATUS[0]}
	if mc generate; then
		timeout 240 "${MC[@]}" python3 tests/gpu/generate_cuda.py 2>&1 | tail -3; record "memcheck rg_generate" ${PIPESTATUS[0]}
	fi
fi
if has ref; then
	timeout 150 python3 tests/gpu/ref_vs_hf.py "$OUT/ref_vs_hf.json"; record "float64 reference vs transformers" $?
fi
if has hf; then
	# HF_KINDS: decoder_hf.py's kinds (default gpt2,llama; e.g. qwen3_tiny,qwen3,phi3_tiny,phi3)
	timeout 300 python3 tests/gpu/decoder_hf.py "$OUT/decoder_hf.json" ${HF_KINDS:-} 2>&1 | grep -v "Writing model"; record "transformers parity" ${PIPESTATUS[0]}
fi
if has sample && [ -f tests/gpu/sample_cuda.py ]; then
	timeout 200 python3 tests/gpu/sample_cuda.py 2>&1 | grep -v "PASS$" | tail -20; record "device sampling vs CPU twin" ${PIPESTATUS[0]}
	if mc sample; then
		SAMPLE_QUICK=1 timeout 200 "${MC[@]}" python3 tests/gpu/sample_cuda.py 2>&1 | tail -3; record "memcheck sampling" ${PIPESTATUS[0]}
	fi
fi
if has bench; then
	timeout 300 python3 bench/peer/decode_bench.py "$OUT/decode_bench.json" fp16 2>&1 | grep -v "Writing model\|warn"; record "decode bench" ${PIPESTATUS[0]}
fi
if has trace; then
	timeout 200 python3 bench/peer/decode_trace.py "$OUT/decode_trace.json" 2>&1 | grep -v "Writing model\|warn"; record "decode trace" ${PIPESTATUS[0]}
fi
if has modes; then
	for shape in gpt2 smollm2; do
		timeout 200 python3 bench/peer/decode_modes.py "$OUT/decode_modes_$shape.json" --device cuda \
			--dtype fp16 --shape "$shape" --new "${MODES_NEW:-64}" --repeats "${MODES_REPEATS:-3}" ${MODES_TRACE:+--trace} 2>&1 |
			grep -v "Writing model\|warn" | tail -12; record "decode modes $shape" ${PIPESTATUS[0]}
	done
fi
if has topk && [ -f bench/kernels/topk_bench.py ]; then
	timeout 150 python3 bench/kernels/topk_bench.py --json "$OUT/topk_bench.json" 2>&1 | tail -30; record "top-k bench" ${PIPESTATUS[0]}
fi
echo; [ ${#FAILED[@]} -gt 0 ] && printf 'FAILED: %s\n' "${FAILED[@]}"
[ ${#FAILED[@]} -eq 0 ]
