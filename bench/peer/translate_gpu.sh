#!/usr/bin/env bash
# Issue 29's benchmark on a lent GPU machine: ragged.Translator against CTranslate2 on random
# weights at the opus-mt-en-de shape (and t5-small where ragged loads T5), through
# bench/peer/translate_bench.py, each runtime in its own process:
#   GPU fp16 (and fp32 for the ids agreement), batches 1 / 32 / 128, greedy and 4 beams;
#   CPU fp32 on all cores (CTranslate2 int8 too, as its CPU default), batches 1 / 32.
# CTranslate2 comes from .gpu_carry/wheels (CARRY_WHEELS=ctranslate2-...-cp312-...whl
# scripts/pack-gpu-carry.sh); it needs cuBLAS 12, found in the machine's PyTorch wheels.
# HF generate (static cache) fp16 on the GPU at batches 1 and 32.
# Expects ragged built (build/libragged.so). Results: $OUT/translate_bench.json (every run's cells
# and the batch-32 ids agreement), the run log on stdout.
# Usage: OUT=... [MODELS="opus-mt-en-de t5-small"] [GPU=1] [CPU=1] [CPU_RUNS="ragged:fp32 ct2:fp32 ct2:int8"] bench/peer/translate_gpu.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/build/translate_bench}
mkdir -p "$OUT"
CARRY=$ROOT/.gpu_carry
[ -n "${RAGGED_LIB:-}" ] || { source tests/gpu/setup-env.sh >/dev/null; export RAGGED_LIB=$ROOT/build/libragged.so; }
# cuBLAS 12 for CTranslate2 (its wheel links CUDA 12): from the pip nvidia-* packages, if any
NV=$(python3 -c 'import nvidia,os;print(os.path.dirname(nvidia.__path__[0]) if hasattr(nvidia,"__path__") else "")' 2>/dev/null)
for d in "$NV"/nvidia/*/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d; done
if ! python3 -c "import ctypes; ctypes.CDLL('libcublas.so.12')" 2>/dev/null; then
	c12=$(timeout 30 find / -xdev \( -path /proc -o -path /sys \) -prune -o -name 'libcublas.so.12*' -print 2>/dev/null | head -1)
	[ -n "$c12" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(dirname "$c12")
	echo "libcublas.so.12: ${c12:-not on this machine (CTranslate2 runs on the CPU only)}"
fi
python3 -c "import ctranslate2 as c; print('ctranslate2', c.__version__, 'cuda devices', c.get_cuda_device_count())" || echo "ctranslate2: not importable"
B=bench/peer/translate_bench.py
for name in ${MODELS:-opus-mt-en-de t5-small}; do
	M=/tmp/tb_$name
	rm -rf "$M" "$M.ct2"
	python3 -c "import sys; sys.path.insert(0, 'tests/py'); import make_seq2seq; make_seq2seq.make_spec(sys.argv[1], sys.argv[2], seed=3)" "$name" "$M" || continue
	python3 $B --convert "$M" "$M.ct2" >"$OUT/convert_$name.log" 2>&1 || { echo "ct2 convert $name failed"; tail -3 "$OUT/convert_$name.log"; }
	if [ "${GPU:-1}" = 1 ]; then
	timeout 150 python3 $B --runtime hf --model "$M" --device cuda --dtype fp16 --batches 1,32 \
		--budget-s 2 --out "$OUT/translate_hf_cuda_fp16_$name.json" --ids-out "$OUT/ids_hf_cuda_fp16_$name.json" 2>&1 | grep -v -i "warn\|Loading"
	for rt in ragged ct2; do
		timeout 150 python3 $B --runtime $rt --model "$M" --ct2-dir "$M.ct2" --device cuda --dtype fp16 \
			--budget-s 2 --out "$OUT/translate_${rt}_cuda_fp16_$name.json" --ids-out "$OUT/ids_${rt}_cuda_fp16_$name.json" 2>&1 | grep -v -i warn
		timeout 60 python3 $B --runtime $rt --model "$M" --ct2-dir "$M.ct2" --device cuda --dtype fp32 \
			--batches 32 --budget-s 1 --out "$OUT/translate_${rt}_cuda_fp32_$name.json" --ids-out "$OUT/ids_${rt}_cuda_fp32_$name.json" 2>&1 | grep -v -i warn
	done
	fi
	if [ "${CPU:-1}" = 1 ]; then
		for rt_dt in ${CPU_RUNS:-ragged:fp32 ct2:fp32 ct2:int8}; do
			rt=${rt_dt%%:*}; dt=${rt_dt#*:}
			timeout 150 python3 $B --runtime $rt --model "$M" --ct2-dir "$M.ct2" --device cpu --dtype $dt \
				--threads "$(nproc)" --batches 1,32 --budget-s 2 --out "$OUT/translate_${rt}_cpu_${dt}_$name.json" \
				--ids-out "$OUT/ids_${rt}_cpu_${dt}_$name.json" 2>&1 | grep -v -i warn
		done
	fi
	rm -rf "$M" "$M.ct2"
done
python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
runs, agree = [], {}
for f in sorted(glob.glob(os.path.join(out, "translate_*_*.json"))):
    runs.append(json.load(open(f)))
ids = {os.path.basename(f)[4:-5]: json.load(open(f)) for f in glob.glob(os.path.join(out, "ids_*.json"))}
for key, a in ids.items():
    if not key.startswith("ragged_"):
        continue
    for peer in ("ct2", "hf"):
        b = ids.get(peer + key[len("ragged"):])
        if b:
            agree[f"{key} vs {peer}"] = {k: f"{sum(x == y for x, y in zip(a[k], b.get(k, [])))}/{len(a[k])}"
                                         for k in a if k in b}
for k, v in sorted(agree.items()):
    print("ids equal:", k, v)
json.dump({"runs": runs, "ids_equal_batch32": agree}, open(os.path.join(out, "translate_bench.json"), "w"), indent=1)
for f in glob.glob(os.path.join(out, "translate_*_*.json")) + glob.glob(os.path.join(out, "ids_*.json")):
    os.remove(f)
EOF
