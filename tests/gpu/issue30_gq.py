"""Issue 30 item 1 on the GPU: GGUF weights kept quantized on CUDA (src/ops/cuda/qgemv.cu), at
public shapes with random weights (tests/py/make_decoder.py; the gguf package's own quantizer
through tests/py/hf_to_gguf.py, as llama-quantize stores the blocks).

For each shape (GQ_MODELS, default smollm2-135m,llama-3.2-1b) the files written are F16, Q8_0,
Q4_0 and, where every K is a multiple of 256, Q4_K (every 2-D tensor quantized, the tied
embedding too). Then, on CUDA in fp16, each quantized file is run three ways: weights
"dequantize", "quantized" (the default: qmv_kernel for M <= 4, the tensor-core kernel up to 16)
and "quantized-tc" (RAGGED_QMV=0: the tensor-core kernel alone):
- correctness: greedy ids of the quantized variants against weights="dequantize" on the same
  file and GPU, 4 prompts of 32 random ids, 48 new tokens. The tensor-core kernel differs from
  the dequantized upload only in summation order (it rounds each weight to fp16 exactly as the
  upload does), so its ids must be equal; a row may differ from its first differing token on
  only where the dequantized run's top-2 logprobs there are within GQ_TIE (0.05 nats) of each
  other and the quantized run took the runner-up (a near tie). qmv_kernel also rounds the
  activations to 8 bits per 32 values (as llama.cpp's CUDA decode does), so its gap may reach
  GQ_TIE_Q8 (0.3 nats);
- resident weight bytes (rg_model_info.weight_bytes) and the count of quantized GEMM weights:
  the quantized load must hold fewer bytes than the dequantized one and quantize > 0 weights;
- speed: decode tok/s at batch 1, 4 and 16 (prompts of 32 tokens, 128 new tokens, greedy, prefill
  included, as issue 30's table: batch x 128 / seconds; median of GQ_REPEATS runs after a
  warm-up that also captures the decode graphs) for the F16 file, Q8_0 and Q4_0 quantized, and
  Q8_0 / Q4_0 dequantized (the A/B).
Writes OUTDIR/decode_quant_<gpu>_<YYYYMMDD-HHMM>.json and .md (bench/results naming); the .md
table is printed too. Exit status 0 when every check passed.

Usage: RAGGED_LIB=build/libragged.so python3 tests/gpu/issue30_gq.py OUTDIR"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import gguf  # noqa: E402
import hf_to_gguf  # noqa: E402
import make_decoder  # noqa: E402
from ragged._lib import lib  # noqa: E402
from ragged.generate import Generator  # noqa: E402

SHAPES = {  # the public configs' widths (HF config.json), random weights
    "smollm2-135m": dict(H=576, heads=9, kv_heads=3, layers=30, inter=1536, vocab=49152,
                         tie=True, rope_theta=100000.0, max_pos=2048),
    "llama-3.2-1b": dict(H=2048, heads=32, kv_heads=8, layers=16, inter=8192, vocab=128256,
                         tie=True, rope_theta=500000.0, max_pos=2048),
}
SHAPES["tiny"] = dict(H=64, heads=4, kv_heads=2, layers=2, inter=128, vocab=160, tie=True)
PROMPT, NEW, CHECK_NEW = 32, 128, 48
# GQ_DEVICE=cpu GQ_MODELS=tiny: a dry run of the script's own logic on a machine without a GPU
# (the CPU's quantized path rounds activations to int8 too, so its ids may differ more)
DEVICE = os.environ.get("GQ_DEVICE", "cuda")
DTYPE = "fp16" if DEVICE == "cuda" else "fp32"
REPEATS = int(os.environ.get("GQ_REPEATS", "3"))
TIE = float(os.environ.get("GQ_TIE", "0.05"))
FILES = [("F16", None), ("Q8_0", gguf.GGMLQuantizationType.Q8_0),
         ("Q4_0", gguf.GGMLQuantizationType.Q4_0), ("Q4_K", gguf.GGMLQuantizationType.Q4_K)]
# qmv_kernel (M <= 4) rounds activations to 8 bits per 32 values, so its ids may leave the
# dequantized run's at a gap larger than a summation-order tie: GQ_TIE_Q8 (nats) bounds it
TIE_Q8 = float(os.environ.get("GQ_TIE_Q8", "0.3"))
BATCHES = (1, 4, 16)
# the quantized variants: (label, RAGGED_QMV); "quantized-tc" is the tensor-core kernel alone
VARIANTS = [("dequantize", "1"), ("quantized", "1"), ("quantized-tc", "0")]
fails, checks = [], []


def check(what, ok, detail=""):
    checks.append({"check": what, "ok": bool(ok), "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f" ({detail})" if detail else ""), flush=True)
    if not ok:
        fails.append(what)


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "unknown"


def slug(name):  # bench/serving/sweep.py's device_slug for a GPU: "NVIDIA H200" -> "h200"
    return re.sub(r"[^a-z0-9]+", "-", name.replace("NVIDIA", "").lower()).strip("-")


def info(g):
    i = lib().rg_model_get_info(g._handle()).contents
    return int(i.weight_bytes), int(i.quantized_weights)


def first_diff(a, b):
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)


def ids_check(name, prompts, ref, got, rinfo, qinfo, tie=None):
    """Quantized vs dequantized greedy ids (and resident bytes) of one file."""
    tie = TIE if tie is None else tie
    equal, ties, bad = 0, [], []
    for r, (o_ref, o_q) in enumerate(zip(ref, got)):
        j = first_diff(o_ref["ids"], o_q["ids"])
        if j is None and len(o_ref["ids"]) == len(o_q["ids"]):
            equal += 1
            continue
        if j is None:
            bad.append(f"row {r}: {len(o_ref['ids'])} ids against {len(o_q['ids'])}")
            continue
        lp = dict(o_ref["top_logprobs"][j])
        gap = max(lp.values()) - lp[o_q["ids"][j]] if o_q["ids"][j] in lp else float("inf")
        (ties if gap <= tie else bad).append(f"row {r} token {j}: logprob gap {gap:.4f}")
    check(f"{name}: quantized greedy ids == dequantize (or a tie within {tie} nats)", not bad,
          f"{equal} of {len(prompts)} rows equal" + (f"; near ties: {ties}" if ties else "") +
          (f"; not ties: {bad}" if bad else ""))
    check(f"{name}: quantized load keeps GEMM weights quantized and holds fewer bytes",
          qinfo[1] > 0 and rinfo[1] == 0 and qinfo[0] < rinfo[0],
          f"quantized {qinfo[0]} bytes ({qinfo[1]} quantized weights), dequantize {rinfo[0]}")


def tok_s(g, rng, vocab, batch):
    prompts = [rng.integers(3, vocab, PROMPT).tolist() for _ in range(batch)]
    g.generate(prompts, max_tokens=NEW, ignore_eos=True)  # warm-up: plans, graphs
    ts = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        out = g.generate(prompts, max_tokens=NEW, ignore_eos=True)
        ts.append(time.perf_counter() - t)
        assert all(len(o["ids"]) == NEW for o in out)
    return batch * NEW / statistics.median(ts)


def write(outdir, base, meta, rows):
    with open(os.path.join(outdir, base + ".json"), "w") as f:
        json.dump(dict(meta, rows=rows, checks=checks), f, indent=1)
    lines = [f"# Decode with GGUF weights kept quantized on the GPU (issue 30 item 1)", "",
             f"{meta['gpu']}, commit {meta['commit']}, {meta['date']}; random weights at the "
             f"public shapes, {meta['dtype']} activations on {meta['device']}, prompts of {PROMPT} tokens, {NEW} new tokens, "
             f"greedy, prefill included (batch x {NEW} / s, median of {REPEATS}); "
             "tests/gpu/issue30_gq.py.", "",
             "| model | file | weights | file bytes | resident weight bytes | quantized GEMM "
             "weights | batch 1 tok/s | batch 4 tok/s | batch 16 tok/s | vs F16 file, batch 1 | "
             "vs F16, batch 4 | vs F16, batch 16 | batch 1 file bytes x tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f16 = next((x for x in rows if x["model"] == r["model"] and x["file"] == "F16"), None)
        rel = [f"{r[k] / f16[k]:.2f}x" if f16 and f16.get(k) and r.get(k) else "" for k in
               ("tok_s_b1", "tok_s_b4", "tok_s_b16")]
        lines.append(f"| {r['model']} | {r['file']} | {r['weights']} | {r['file_bytes']:,} | "
                     f"{r['weight_bytes']:,} | "
                     f"{r['quantized_weights']} | {r.get('tok_s_b1', 0):,.0f} | "
                     f"{r.get('tok_s_b4', 0):,.0f} | "
                     f"{r.get('tok_s_b16', 0):,.0f} | {rel[0]} | {rel[1]} | {rel[2]} | "
                     f"{r['file_bytes'] * r.get('tok_s_b1', 0) / 1e12:.2f} TB/s |")
    lines += ["", f"checks: {len(checks) - len(fails)} of {len(checks)} passed" +
              (f"; failed: {fails}" if fails else "")]
    with open(os.path.join(outdir, base + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return "\n".join(lines)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(outdir, exist_ok=True)
    gpu = gpu_name()
    base = f"decode_quant_{slug(gpu)}_{time.strftime('%Y%m%d-%H%M', time.gmtime())}"
    meta = dict(gpu=gpu, commit=os.environ.get("RAGGED_COMMIT", "unknown"),
                date=time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), prompt=PROMPT, new=NEW,
                repeats=REPEATS, dtype=DTYPE, device=DEVICE)
    names = os.environ.get("GQ_MODELS", "smollm2-135m,llama-3.2-1b").split(",")
    rows = []
    tmp = tempfile.mkdtemp(prefix="gq_")
    for name in names:
        t0 = time.time()
        rng = np.random.default_rng(30)
        cfg, w, _ = make_decoder.llama(rng, **SHAPES[name])
        paths = {}
        files = [(l, q) for l, q in FILES if l != "Q4_K" or SHAPES[name]["H"] % 256 == 0 and
                 SHAPES[name]["inter"] % 256 == 0]
        for label, qt in files:
            paths[label] = hf_to_gguf.write(os.path.join(tmp, f"{name}-{label}.gguf"), cfg, w,
                                            f16=qt is None, qtype=qt)
        del w
        print(f"info {name}: GGUF files written in {time.time() - t0:.0f} s", flush=True)
        vocab = SHAPES[name]["vocab"]
        prompts = [rng.integers(3, vocab, PROMPT).tolist() for _ in range(4)]
        for label, qt in files:
            outs = {}
            for weights, qmv in ([("file", "1")] if qt is None else VARIANTS):
                os.environ["RAGGED_QMV"] = qmv  # read at every GEMM call (a "live" switch)
                g = Generator(paths[label], device=DEVICE, dtype=DTYPE,
                              weights="dequantize" if weights == "dequantize" else "quantized")
                wb, nq = info(g)
                if qt is not None:  # the ids first (the dequantized run with its top-2)
                    outs[weights] = (g.generate(prompts, max_tokens=CHECK_NEW, ignore_eos=True,
                                                logprobs=2 if weights == "dequantize" else 0),
                                     (wb, nq))
                row = dict(model=name, file=label, weights=weights, weight_bytes=wb,
                           quantized_weights=nq, file_bytes=os.path.getsize(paths[label]))
                for b in BATCHES:
                    row[f"tok_s_b{b}"] = tok_s(g, rng, vocab, b)
                g.close()
                rows.append(row)
                print(f"info {name} {label} {weights}: {wb:,} weight bytes, "
                      f"{row['tok_s_b1']:,.0f} tok/s at batch 1, {row['tok_s_b16']:,.0f} at 16",
                      flush=True)
                write(outdir, base, meta, rows)  # a run stopped at its limit keeps its rows
            os.environ["RAGGED_QMV"] = "1"
            if qt is not None:
                ids_check(f"{name} {label} tensor-core kernel", prompts,
                          outs["dequantize"][0], outs["quantized-tc"][0],
                          outs["dequantize"][1], outs["quantized-tc"][1])
                ids_check(f"{name} {label} qmv (8-bit activations)", prompts,
                          outs["dequantize"][0], outs["quantized"][0], outs["dequantize"][1],
                          outs["quantized"][1], tie=TIE_Q8)
        for p in paths.values():
            os.remove(p)
    print(write(outdir, base, meta, rows))
    print(f"{len(checks) - len(fails)} of {len(checks)} checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
