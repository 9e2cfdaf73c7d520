#!/usr/bin/env bash
# Issue 30's GPU side-by-side on the same GGUF files: ragged against llama.cpp (CUDA, all layers
# offloaded, flash attention), each runtime alone in its own process, in one device call.
#  1. llama.cpp's tools from .gpu_carry/llama_cuda.tar.xz (compiled on the development machine:
#     CUDA=1 bench/peer/llama_cpp_build.sh DIR, then CARRY_LLAMA=DIR scripts/pack-gpu-carry.sh);
#     LLAMA_BIN overrides (a directory holding llama-batched-bench and llama-quantize);
#  2. ragged's build (sm_90a) unless SKIP_BUILD=1 (a script earlier in the call built it);
#  3. random-weight F16 GGUF files at public shapes (bench/peer/gguf_peer_files.py; GG_MODELS,
#     default smollm2-135m,llama-3.2-1b), then llama-quantize makes GG_TYPES (default Q8_0 Q4_1
#     Q4_K_M) from each, as a llama.cpp user makes them;
#  4. bench/peer/gguf_cpu.py --device cuda on every file: prompts of 32 tokens, 128 new, greedy,
#     batch 1, 16, 64 (GG_BATCHES), GG_ROUNDS (1) interleaved rounds, GG_REPS (2) runs a cell;
#  5. the table: gguf_gpu_<gpu>_<YYYYMMDD-HHMM>.md and .json in $OUT.
# Exit status 0 when every cell ran for both runtimes.
source "$(dirname "$0")/../../tests/gpu/common.sh" # ROOT, OUT, run.log, CARRY, record
source tests/gpu/setup-env.sh >/dev/null
LB=${LLAMA_BIN:-}
if [ -z "$LB" ]; then
	[ -f "$CARRY/llama_cuda.tar.xz" ] || { echo "no $CARRY/llama_cuda.tar.xz (CARRY_LLAMA)"; exit 1; }
	mkdir -p /tmp/llama_cuda && tar -C /tmp/llama_cuda -xJf "$CARRY/llama_cuda.tar.xz"
	LB=/tmp/llama_cuda/bin
fi
export LD_LIBRARY_PATH=$LB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
	build_sm90a || exit 1
fi
export RAGGED_LIB=$ROOT/build/libragged.so
W=$(mktemp -d /tmp/gguf_gpu.XXXXXX)
t0=$SECONDS
python3 bench/peer/gguf_peer_files.py "$W" "${GG_MODELS:-smollm2-135m,llama-3.2-1b}" >"$W/files" ||
	{ echo "gguf_peer_files.py failed"; exit 1; }
files=()
while read -r f16; do
	files+=("$f16")
	for t in ${GG_TYPES:-Q8_0 Q4_1 Q4_K_M}; do
		q=${f16%-F16.gguf}-$t.gguf
		"$LB/llama-quantize" "$f16" "$q" "$t" "$(nproc)" >"$W/quantize.log" 2>&1 ||
			{ tail -5 "$W/quantize.log"; continue; }
		files+=("$q")
	done
done <"$W/files"
echo "files in $((SECONDS - t0)) s: ${files[*]##*/}"
bad=0
for f in "${files[@]}"; do
	b=$(basename "$f" .gguf)
	timeout 600 python3 bench/peer/gguf_cpu.py "$W/cell-$b.json" --gguf "$f" --llama-bin "$LB" \
		--device cuda --dtype fp16 --threads "$(nproc)" --batches "${GG_BATCHES:-1,16,64}" \
		--rounds "${GG_ROUNDS:-1}" --reps "${GG_REPS:-2}" >"$W/cell-$b.log" 2>&1 || bad=1
	tail -3 "$W/cell-$b.log"
done
python3 - "$W" "$OUT" <<'PY' || bad=1
import glob, json, os, re, sys, time
w, out = sys.argv[1:3]
gpu = os.environ.get("RAGGED_GPU", "gpu")
slug = re.sub(r"[^a-z0-9]+", "-", gpu.replace("NVIDIA", "").lower()).strip("-")
base = f"gguf_gpu_{slug}_{time.strftime('%Y%m%d-%H%M', time.gmtime())}"
reps = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(w, "cell-*.json")))]
lines = [f"# GPU decode on the same GGUF files: ragged against llama.cpp (issue 30)", "",
         f"{gpu}, commit {os.environ.get('RAGGED_COMMIT', '?')}, "
         f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}; bench/peer/gguf_gpu.sh: random "
         "weights at public shapes (F16 from bench/peer/gguf_peer_files.py, the rest by "
         "llama-quantize), prompts of 32 tokens, 128 new, greedy; ragged.Generator fp16 on CUDA, "
         "llama-batched-bench -ngl 99 -fa on; each runtime in its own process. decode = tokens "
         "after the first / decode time (llama.cpp's S_TG); total includes the prefill (S).", "",
         "| file | bytes | batch | ragged decode tok/s | llama.cpp decode tok/s | decode ratio | "
         "ragged total tok/s | llama.cpp total tok/s | total ratio | ragged resident weight bytes |",
         "|---|---|---|---|---|---|---|---|---|---|"]
bad = 0
for r in reps:
    for c in r["cells"]:
        rg, lc = c.get("ragged", {}), c.get("llama.cpp", {})
        if "error" in rg or "error" in lc:
            bad += 1
            lines.append(f"| {r['gguf']} | {r['gguf_bytes']:,} | {c['batch']} | "
                         f"{rg.get('error', '')[-80:]!r} | {lc.get('error', '')[-80:]!r} | | | | | |")
            continue
        lines.append(f"| {r['gguf']} | {r['gguf_bytes']:,} | {c['batch']} | "
                     f"{rg['decode_tok_s']:,.0f} | {lc['decode_tok_s']:,.0f} | "
                     f"{c['decode_ratio']:.2f}x | {rg['total_tok_s']:,.0f} | "
                     f"{lc['total_tok_s']:,.0f} | {c['total_ratio']:.2f}x | "
                     f"{int(rg.get('weight_bytes', 0)):,} |")
json.dump({"gpu": gpu, "commit": os.environ.get("RAGGED_COMMIT"), "runs": reps},
          open(os.path.join(out, base + ".json"), "w"), indent=1)
open(os.path.join(out, base + ".md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
PY
st=$?
[ $st -eq 0 ] || bad=1
exit $bad
