"""Per-step cost of beam search and of top-k / top-p sampling against greedy at the same number of
sequences (issue 19's target: "Beam 4 and top-k/top-p: per-step cost within 15% of greedy at
the same number of sequences"), through rg_generate (ragged.Generator), on the CPU or a GPU.

Random weights at a public shape (SmolLM2-135M or GPT-2 small; tests/py/make_decoder.py), prompts
of 32 random ids, NEW new tokens with EOS ignored (so that every mode runs the same number of
steps: a beam hypothesis never finishes early), four sequences in every mode:
  - greedy: 4 prompts;
  - topk_topp: 4 prompts, temperature 0.8, top_k 50, top_p 0.9 (sampling on the device);
  - beam4: 1 prompt, num_beams 4 (the beams share the prompt's blocks; each step the device gives
    every row's 8 best tokens and their log-softmax, rg_beam_step_cand, and the host search picks
    among those; RAGGED_GEN_DEVICE_SAMPLE=0: the logits of the 4 rows go to the host instead).
Decode step ms = (wall time of rg_generate with NEW tokens - that with 1 token) / (NEW - 1), the
prefill and the first token cancelling out (a beam search returns its tokens only at the end, so
its first-token time says nothing), median of REPEATS pairs of calls after a warm-up round, the
modes interleaved round by round. The minimum over rounds is reported too: on a shared host it
is the least disturbed estimate. The ratio to
greedy is the target's number. Single process: no peer is involved (the target compares ragged
with itself).

Usage: RAGGED_LIB=build/libragged.so python3 bench/peer/decode_modes.py OUT.json
       [--device cpu|cuda] [--dtype fp32|fp16] [--shape smollm2|gpt2] [--new 64] [--repeats 3]
Writes OUT.json and OUT.md (GPU / CPU name, commit, date)."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import numpy as np  # noqa: E402

import make_decoder  # noqa: E402
import ragged  # noqa: E402

SHAPES = {
    "smollm2": ("llama", dict(H=576, heads=9, kv_heads=3, layers=30, inter=1536, vocab=49152,
                              max_pos=2048, tie=True)),
    "gpt2": ("gpt2", dict(H=768, heads=12, layers=12, vocab=50257, n_pos=1024)),
}
MODES = [
    ("greedy", 4, {}),
    ("topk_topp", 4, dict(temperature=0.8, top_k=50, top_p=0.9, seed=1)),
    ("beam4", 1, dict(num_beams=4, n=1, early_stopping="never")),
]


def host_name(device):
    if device == "cuda":
        try:
            return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                  capture_output=True, text=True).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "cuda"
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return f"{ln.split(':', 1)[1].strip()} x {os.cpu_count()}"
    except OSError:
        pass
    return platform.processor() or "cpu"


def trace_mode(g, prompts, new, kw):
    """One generate() of `new` tokens under torch.profiler (decode_trace.profiled): per generated
    step (the prefill included, spread over the steps), wall and GPU time, kernels and copies, and
    the top ones by time."""
    import torch
    from decode_trace import profiled
    g.generate(prompts, max_tokens=new, ignore_eos=True, **kw)  # graphs of every shape captured
    torch.cuda.synchronize()
    return profiled(lambda: g.generate(prompts, max_tokens=new, ignore_eos=True, **kw), 1,
                    per=new)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--shape", default="smollm2", choices=sorted(SHAPES))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", action="store_true",
                    help="cuda: also one run per mode under torch.profiler (CUPTI): GPU busy and "
                         "kernels per step, the top kernels and copies")
    a = ap.parse_args()
    family, spec = SHAPES[a.shape]
    d = tempfile.mkdtemp(prefix=f"modes_{a.shape}_")
    make_decoder.make(d, family, seed=3, **spec)
    g = ragged.Generator(d, device=a.device, dtype=a.dtype)
    rng = np.random.default_rng(7)
    prompts = [[int(v) for v in rng.integers(3, spec["vocab"], 32)] for _ in range(4)]
    times = {name: [] for name, _, _ in MODES}
    # rounds: every mode once per round, so that a busy moment of a shared host hits them alike
    for rep in range(a.repeats + 1):
        for name, n_prompts, kw in MODES:
            t0 = time.perf_counter()
            g.generate(prompts[:n_prompts], max_tokens=1, ignore_eos=True, **kw)
            t1 = time.perf_counter()
            out = g.generate(prompts[:n_prompts], max_tokens=a.new, ignore_eos=True, **kw)
            t2 = time.perf_counter()
            assert all(o["completion_tokens"] == a.new for o in out), name
            if rep:
                times[name].append(((t2 - t1) - (t1 - t0)) / (a.new - 1) * 1e3)
    rows = []
    for name, _, _ in MODES:
        rows.append({"mode": name, "sequences": 4, "step_ms": float(np.median(times[name])),
                     "step_ms_min": float(np.min(times[name])), "step_ms_all": times[name]})
        print(f"{name}: {rows[-1]['step_ms']:.3f} ms/step", flush=True)
    if a.trace and a.device == "cuda":
        for r, (name, n_prompts, kw) in zip(rows, MODES):
            r["trace"] = trace_mode(g, prompts[:n_prompts], a.new, kw)
            t = r["trace"]
            print(f"{name}: traced {t['gpu_busy_us_per_step']:.0f} us GPU busy, "
                  f"{t['kernels_per_step']:.1f} kernels/copies per step; top: "
                  + "; ".join(f"{k['kernel'][:48]} {k['us_per_step']:.1f} us "
                              f"x{k['calls_per_step']:.1f}"
                              for k in t["top"][:6]), flush=True)
    base = rows[0]["step_ms"]
    for r in rows:
        r["vs_greedy"] = r["step_ms"] / base
        r["vs_greedy_min"] = r["step_ms_min"] / rows[0]["step_ms_min"]
    # the GPU machine's copy of the tree: .gpu_carry/COMMIT, exported by the GPU scripts
    commit = os.environ.get("RAGGED_COMMIT", "")[:7] or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=ROOT).stdout.strip()
    rep = {"host": host_name(a.device), "device": a.device, "dtype": a.dtype, "shape": a.shape,
           "prompt": 32, "new": a.new, "repeats": a.repeats, "commit": commit,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "threads": os.environ.get("RAGGED_NUM_THREADS", "default"), "rows": rows}
    with open(a.out, "w") as f:
        json.dump(rep, f, indent=1)
    md = [f"# Decode step cost by decoding mode, {a.shape} shape, {a.dtype} on {rep['host']}",
          "", f"commit {commit}, {rep['date']}, prompt 32, {a.new} new tokens, EOS ignored, "
          f"4 sequences per mode, median of {a.repeats} interleaved rounds "
          f"(bench/peer/decode_modes.py); "
          f"RAGGED_NUM_THREADS={rep['threads']}", "",
          "Peers: none. The target compares ragged's decoding modes with its own greedy steps "
          "(the same process and rounds); ragged against PyTorch decoders is in the decode "
          "files.", "",
          "| mode | sequences | decode step ms, median | vs greedy | min | vs greedy (min) |",
          "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['mode']} | 4 | {r['step_ms']:.3f} | {r['vs_greedy']:.3f} | "
                  f"{r['step_ms_min']:.3f} | {r['vs_greedy_min']:.3f} |")
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
