#!/usr/bin/env bash
# The performance run on a lent GPU machine, in ONE device call (< 10 min including the build):
#   OUT=... bench/gpu.sh            (run tool: carry [".gpu_carry"], made by scripts/pack-gpu-carry.sh)
# 1. tests/gpu/setup-env.sh: build dependencies, fortunes and the fp16-rounded MiniLM from the
#    git-ignored .gpu_carry/ where the machine lacks them; exports RAGGED_MODEL_DIR;
# 2. make -j all (-> build.log); a random-weight BERT-base (bench/serving/make_bert_base.py);
# 3. (a) build/bench_ops, the C kernel benchmark (bench/kernels/; `make build/bench_ops`), when
#        this tree has it (-> kernels.txt, its markdown table, and kernels.json);
#    (b) bench/peer/attn_bench.py: attention alone, ragged vs varlen_attn (-> attn_*.json/.md);
#    (c) bench/peer/bench_graphed.py: end to end, ragged vs the graphed packed PyTorch peer on
#        MiniLM and BERT-base, fp16 and bf16 (-> peer_graphed_*.json/.md);
#    each under `timeout`, with budgets that fit the whole script into BENCH_LIMIT_S (default 560 s);
# 4. a short summary, last.
# $OUT (default build/gpu_bench) gets at most 8 files: run.log, build.log, kernels.txt,
# kernels.json, attn_<gpu>_<YYYYMMDD-HHMM>.json/.md and peer_graphed_<gpu>_<YYYYMMDD-HHMM>.json/.md;
# the two Python benchmarks rewrite their json/md after every cell, so a timeout keeps what was
# measured. Copy the json and md files into bench/results/ as they are, and the kernel table as
# kernels_<gpu>_<YYYYMMDD-HHMM>.md / .json (the naming scheme: bench/results/README.md).
# Environment overrides: BENCH_LIMIT_S (whole script), KERNELS_S (bench_ops timeout, 90),
# ATTN_BUDGET_S (attn_bench budget, 60), GRAPHED_BUDGET_S (bench_graphed budget; default: what is
# left), GRAPHED_ARGS / ATTN_ARGS / KERNELS_ARGS (extra arguments); BENCH_DEVICE=cpu only to
# dry-run the script's plumbing on a machine without a GPU (with ATTN_ARGS=--quick
# GRAPHED_ARGS=--quick).
# Exit status: 0 when every stage ran and no correctness check was flagged; 1 otherwise.
set -u
T0=$SECONDS
LIMIT=${BENCH_LIMIT_S:-560}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
CARRY=$ROOT/.gpu_carry
OUT=${OUT:-$ROOT/build/gpu_bench}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
export PATH=$PATH:/usr/local/cuda/bin
STATUS=()
record() { # record NAME STATUS
	STATUS+=("$1: $2")
	echo "--- $1: exit status $2$([ "$2" = 124 ] && echo ' (timed out; partial results kept)')"
}
left() { echo $((LIMIT - (SECONDS - T0))); }

echo "=== $(date +%T) machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
# the carry's COMMIT first: the device's copy of the tree may hold a stale .git
RAGGED_COMMIT=$(bash scripts/commit-id.sh "$ROOT")
export RAGGED_COMMIT
echo "commit: $RAGGED_COMMIT"
echo "cpus: $(nproc)  python: $(python3 --version 2>&1)  limit: ${LIMIT} s"
# shellcheck source=tests/gpu/setup-env.sh
source tests/gpu/setup-env.sh
python3 -c 'import torch, numpy, safetensors; print("torch", torch.__version__, "cuda", torch.version.cuda)'

echo "=== $(date +%T) build (make all)"
timeout 240 make -j"$(nproc)" all >"$OUT/build.log" 2>&1
st=$?
if [ $st -ne 0 ]; then
	tail -20 "$OUT/build.log"
	echo "build failed (status $st): see build.log"
	exit 1
fi
if make -n build/bench_ops >/dev/null 2>&1; then
	timeout 120 make -j"$(nproc)" build/bench_ops >>"$OUT/build.log" 2>&1 || echo "(build/bench_ops did not build)"
fi
echo "built in $((SECONDS - T0)) s"

BB=build/models/bert-base-random
if [ ! -f "$BB/model.safetensors" ] || [ ! -f "$BB/1_Pooling/config.json" ]; then
	echo "=== $(date +%T) random BERT-base -> $BB"
	python3 bench/serving/make_bert_base.py "$BB" --vocab-from "$RAGGED_MODEL_DIR" || exit 1
fi

export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
DEV=${BENCH_DEVICE:-cuda}

# (a) kernel benchmark (C), when present
if [ -x build/bench_ops ]; then
	KS=${KERNELS_S:-90}
	echo "=== $(date +%T) build/bench_ops (timeout ${KS} s) -> kernels.txt, kernels.json"
	# shellcheck disable=SC2086
	timeout -k 5 "$KS" build/bench_ops --json "$OUT/kernels.json" ${KERNELS_ARGS:-} \
		>"$OUT/kernels.txt" 2>&1
	record bench_ops $?
	tail -40 "$OUT/kernels.txt"
else
	echo "=== build/bench_ops absent in this tree: skipped"
fi

# (b) attention kernel: ragged vs varlen_attn
AB=${ATTN_BUDGET_S:-60}
L=$(left)
[ "$AB" -gt $((L - 200)) ] && AB=$((L - 200))
[ "$AB" -lt 15 ] && AB=15
echo "=== $(date +%T) attn_bench: budget ${AB} s, $(left) s left"
# shellcheck disable=SC2086
timeout -k 5 $((AB + 60)) python3 bench/peer/attn_bench.py --device "$DEV" --budget-s "$AB" \
	--out-dir "$OUT" ${ATTN_ARGS:-}
record attn_bench $?

# (c) end to end: ragged vs the graphed packed PyTorch peer
L=$(left)
GB=${GRAPHED_BUDGET_S:-$((L - 45))}
[ "$GB" -gt $((L - 45)) ] && GB=$((L - 45))
[ "$GB" -lt 20 ] && GB=20
TO=$((L - 8))
[ "$TO" -lt 30 ] && TO=30
echo "=== $(date +%T) bench_graphed: budget ${GB} s, timeout ${TO} s"
# shellcheck disable=SC2086
timeout -k 5 "$TO" python3 bench/peer/bench_graphed.py --device "$DEV" \
	--models "minilm=$RAGGED_MODEL_DIR,bert-base=$BB" --dtypes fp16,bf16 \
	--budget-s "$GB" --out-dir "$OUT" ${GRAPHED_ARGS:-}
record bench_graphed $?

echo
echo "=== $(date +%T) summary ($((SECONDS - T0)) s)"
python3 - "$OUT" <<'EOF'
import glob, json, math, os, sys
out = sys.argv[1]
def gmean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
for p in sorted(glob.glob(os.path.join(out, "attn_*.json"))):
    r = json.load(open(p))
    c = r.get("ceilings", {})
    print(f"{os.path.basename(p)}: copy {c.get('copy_gbps', 0):.0f} GB/s, GEMM "
          + ", ".join(f"{k} {v:.0f}" for k, v in c.get("gemm_tflops", {}).items()) + " TFLOP/s")
    for run in r["runs"]:
        cells = [x for x in run["cells"] if not x.get("error")]
        if not cells:
            continue
        best = max(cells, key=lambda x: x["ragged"]["tflops"])
        print(f"  attn {run['shape']:9s} {run['dtype']}: {len(cells)} cells, varlen/ragged time "
              f"geomean {gmean([x['ratio'] for x in cells]):.2f}x, ragged peak "
              f"{best['ragged']['tflops']:.0f} TFLOP/s ({best['dist']} b{best['batch']}), "
              f"min cos {min(x['ragged']['min_cos'] for x in cells):.6f}")
    print(f"  flagged: {len(r.get('failures', []))}")
for p in sorted(glob.glob(os.path.join(out, "peer_graphed_*.json"))):
    r = json.load(open(p))
    print(f"{os.path.basename(p)}: peer attention {r['meta'].get('attention', {}).get('mode')}")
    for run in r["runs"]:
        cells = [x for x in run["cells"] if not x.get("error")]
        if not cells:
            continue
        big = max(cells, key=lambda x: x["tokens_mean"])
        print(f"  {run['model']:9s} {run['dtype']}: {len(cells)} cells, peer/ragged time geomean "
              f"{gmean([x['ratio'] for x in cells]):.2f}x (min {min(x['ratio'] for x in cells):.2f},"
              f" max {max(x['ratio'] for x in cells):.2f}); largest cell {big['dist']} "
              f"b{big['batch']}: ragged {big['ragged']['median_ms']:.2f} ms "
              f"({big['ragged'].get('roofline_pct', float('nan')):.0f}% of GEMM roofline), peer "
              f"{big['peer']['median_ms']:.2f} ms; min cos vs fp32 "
              f"{min(x['min_cos_ragged_fp32'] for x in cells):.6f}")
    print(f"  flagged: {len(r.get('failures', []))}")
EOF
printf '%s\n' "${STATUS[@]}"
ls -l "$OUT"
echo "copy the json/md files above into bench/results/ (kernels.*: kernels_<gpu>_<YYYYMMDD-HHMM>.*)"
for s in "${STATUS[@]}"; do
	[ "${s##*: }" = 0 ] || exit 1
done
exit 0
