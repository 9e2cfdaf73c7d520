#!/usr/bin/env bash
# Issue 27 on a lent GPU machine, in one device call: build (sm_90a), the generation checks of
# the one engine on CUDA (tests/gpu/generate_cuda.py: greedy / seeded samples / beams equal the
# CPU's; decoder_hf.py: greedy and 4-beam ids equal HF generate), then the per-token time of the
# three entry points (bench/peer/entry_points.py) on random SmolLM2-135M and GPT-2 small shapes
# (bench/serving/make_gen_model.py), fp16 on the GPU at batch 1, 16 and 64, fp32 on the CPU at
# batch 1 and 16. Needs .gpu_carry (CARRY_MODEL=0 scripts/pack-gpu-carry.sh). Results in $OUT.
# STAGES (default "build check bench cpu"; "ops" adds build/test_ops_cuda, the op and GEMM
# parity against the CPU). GGUF=1: SmolLM2 runs from the F16 GGUF file of the same weights
# (make_gen_model.py --gguf), as the issue measured it; GPT-2 stays a safetensors directory.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/gpu_results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
CARRY=$ROOT/.gpu_carry
STAGES=${STAGES:-build check bench cpu}
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
record() { if [ "$2" -eq 0 ]; then echo "--- $1: PASS"; else echo "--- $1: FAIL ($2)"; fi; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
export RAGGED_COMMIT=$(cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)
export RAGGED_GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "commit: $RAGGED_COMMIT date: $(date -u +%FT%TZ) stages: $STAGES"
source tests/gpu/setup-env.sh >/dev/null
if has build || [ ! -x build/ragged ]; then
	t0=$SECONDS
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		all >"$OUT/build.log" 2>&1; st=$?; tail -2 "$OUT/build.log"
	record "build ($((SECONDS - t0)) s)" $st
	[ $st -eq 0 ] || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so RAGGED_BIN=$ROOT/build/ragged
if has ops; then
	make -j"$(nproc)" CUDA_ARCHS=sm_90a "NVCC_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
		build/test_ops_cuda >>"$OUT/build.log" 2>&1 &&
		RAGGED_NUM_THREADS=4 timeout 180 build/test_ops_cuda --json "$OUT/test_ops_cuda.json" \
			>"$OUT/test_ops_cuda.log" 2>&1
	record "test_ops_cuda (fp32/fp16/bf16)" $?
	tail -3 "$OUT/test_ops_cuda.log"
fi
if has check; then
	timeout 300 python3 tests/gpu/generate_cuda.py >"$OUT/generate_cuda.log" 2>&1
	record "generate_cuda.py" $?
	grep -c PASS "$OUT/generate_cuda.log"; grep FAIL "$OUT/generate_cuda.log" | head
	timeout 240 python3 tests/gpu/decoder_hf.py "$OUT/decoder_hf.json" gpt2,llama \
		>"$OUT/decoder_hf.log" 2>&1
	record "decoder_hf.py gpt2,llama" $?
	tail -4 "$OUT/decoder_hf.log"
	# Qwen3 and Phi-3 (issue 27 item 5): the new CUDA ops against the CPU, and HF generate
	timeout 200 python3 tests/gpu/decoder_cuda_cpu.py >"$OUT/decoder_cuda_cpu.log" 2>&1
	record "decoder_cuda_cpu.py" $?
	tail -4 "$OUT/decoder_cuda_cpu.log"
	timeout 240 python3 tests/gpu/decoder_hf.py "$OUT/decoder_hf_qwen3_phi3.json" \
		qwen3,phi3 >"$OUT/decoder_hf_qwen3_phi3.log" 2>&1
	record "decoder_hf.py qwen3,phi3" $?
	tail -6 "$OUT/decoder_hf_qwen3_phi3.log"
fi
M=/tmp/rg27
mkdir -p $M
if has bench || has cpu; then
	python3 bench/serving/make_gen_model.py smollm2 $M/smollm2 >/dev/null &&
	python3 bench/serving/make_gen_model.py gpt2 $M/gpt2 >/dev/null
	record "models" $?
fi
SMOL=$M/smollm2
if [ "${GGUF:-0}" = 1 ] && { has bench || has cpu; }; then
	SMOL=$(python3 bench/serving/make_gen_model.py smollm2 $M/smollm2 --gguf)
	record "smollm2 F16 GGUF ($(du -m "$SMOL" | cut -f1) MB)" $?
fi
model_of() { if [ "$1" = smollm2 ]; then echo "$SMOL"; else echo "$M/$1"; fi; }
label_of() { if [ "$1" = smollm2 ] && [ "$SMOL" != "$M/smollm2" ]; then echo smollm2-gguf-f16; else echo "$1"; fi; }
if has bench; then
	for k in smollm2 gpt2; do
		timeout 420 python3 bench/peer/entry_points.py "$OUT/entry_points_gpu.json" \
			--model "$(model_of $k)" --label "$(label_of $k)" --device cuda --batches 1,16,64
		record "entry points $k cuda" $?
	done
fi
if has cpu; then
	for k in smollm2 gpt2; do
		timeout 300 python3 bench/peer/entry_points.py "$OUT/entry_points_cpu.json" \
			--model "$(model_of $k)" --label "$(label_of $k)" --device cpu --batches 1,16
		record "entry points $k cpu" $?
	done
fi
