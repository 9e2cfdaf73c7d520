#!/usr/bin/env python3
"""CPU decode on a GGUF file, ragged against llama.cpp on the same file (issue 30: "CPU: >= 1.2x
llama.cpp at batch 1 and 16, for each of those files, on 16 threads and on 2"), each runtime alone
in its own process on the same cores, one after the other, --rounds times interleaved.

Shape (issue 30's): prompts of --prompt (32) tokens, --new (128) new tokens, greedy, no EOS, batch
B of --batches (1,16). llama.cpp: `llama-batched-bench -npp P -ntg N -npl B -t T` (built by
bench/peer/llama_cpp_build.sh, GGML_NATIVE); its S_TG t/s (decode: B * N / T_TG) and S t/s (with
the prompt). ragged: ragged.Generator on the file (weights kept quantized: CPU Q8_0 / Q4_0 / Q4_1
and what the build reads), RAGGED_NUM_THREADS = T, B prompts of P random ids in one call,
ignore_eos; decode tok/s = B * (N - 1) / (time_total - time_first_token), total tok/s = B * N /
time_total; and its resident set after load (VmRSS) beside the file's size.

--ab-dequantize adds ragged with weights="dequantize" (every tensor f32 at load: the behaviour
before the file's type was kept) to each round, as "ragged_dequantize".

Usage: python3 bench/peer/gguf_cpu.py OUT.json --gguf FILE --llama-bin DIR [--threads 2]
       [--batches 1,16] [--rounds 2] [--ab-dequantize]"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def child_ragged(a):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from ragged.generate import Generator
    import random
    g = Generator(a.gguf, device="cpu", max_batch_tokens=4096, weights=a.weights)
    rss = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    rnd = random.Random(0)
    prompts = [[rnd.randrange(1000, 20000) for _ in range(a.prompt)] for _ in range(a.batch)]
    g.generate(prompts[:1], max_tokens=8, ignore_eos=True)  # warm-up
    best = None
    for _ in range(a.reps):
        r = g.generate(prompts, max_tokens=a.new, ignore_eos=True)
        tot, first = r[0]["time_total_s"], r[0]["time_first_token_s"]
        n = sum(x["completion_tokens"] for x in r)
        cell = {"decode_tok_s": (n - a.batch) / (tot - first), "total_tok_s": n / tot,
                "tokens": n}
        if best is None or cell["decode_tok_s"] > best["decode_tok_s"]:
            best = cell
    best["rss_bytes"] = rss
    print("RESULT " + json.dumps(best), flush=True)


def run_llama(a, batch):
    cmd = [os.path.join(a.llama_bin, "llama-batched-bench"), "-m", a.gguf, "-c",
           str(batch * (a.prompt + a.new) + 64), "-b", "2048", "-ub", "512", "-npp",
           str(a.prompt), "-ntg", str(a.new), "-npl", str(batch), "-t", str(a.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rows = [ln for ln in p.stdout.splitlines() if re.match(r"^\|\s*\d+", ln)]
    if p.returncode or not rows:
        return {"error": (p.stderr or p.stdout)[-400:]}
    f = [x.strip() for x in rows[-1].strip("|").split("|")]
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    return {"decode_tok_s": float(f[7]), "total_tok_s": float(f[9]), "prefill_tok_s": float(f[5])}


def run_ragged(a, batch, weights="quantized"):
    env = dict(os.environ, RAGGED_NUM_THREADS=str(a.threads))
    cmd = [sys.executable, __file__, "--child", "--gguf", a.gguf, "--batch", str(batch),
           "--prompt", str(a.prompt), "--new", str(a.new), "--reps", str(a.reps),
           "--weights", weights]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    for ln in p.stdout.splitlines():
        if ln.startswith("RESULT "):
            return json.loads(ln[7:])
    return {"error": (p.stderr or p.stdout)[-400:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-bin")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--weights", default="quantized")
    ap.add_argument("--ab-dequantize", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child_ragged(a)
    cells = []
    for b in [int(x) for x in a.batches.split(",")]:
        got = {"ragged": [], "llama.cpp": []}
        if a.ab_dequantize:
            got["ragged_dequantize"] = []
        for _ in range(a.rounds):
            got["ragged"].append(run_ragged(a, b))
            got["llama.cpp"].append(run_llama(a, b))
            if a.ab_dequantize:
                got["ragged_dequantize"].append(run_ragged(a, b, "dequantize"))
        cell = {"batch": b, "threads": a.threads}
        for rt, xs in got.items():
            ok = [x for x in xs if "error" not in x]
            if not ok:
                cell[rt] = {"error": xs[-1]["error"]}
                continue
            cell[rt] = {k: statistics.median(x[k] for x in ok) for k in ok[0]
                        if isinstance(ok[0][k], (int, float))}
        if "error" not in cell["ragged"] and "error" not in cell["llama.cpp"]:
            cell["decode_ratio"] = (cell["ragged"]["decode_tok_s"] /
                                    cell["llama.cpp"]["decode_tok_s"])
            cell["total_ratio"] = cell["ragged"]["total_tok_s"] / cell["llama.cpp"]["total_tok_s"]
        cells.append(cell)
        print(json.dumps(cell), flush=True)
        rep = {"what": "CPU decode on one GGUF: ragged vs llama.cpp, each in its own process",
               "gguf": os.path.basename(a.gguf), "gguf_bytes": os.path.getsize(a.gguf),
               "host": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "commit": os.environ.get("RAGGED_COMMIT", "?"),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "prompt": a.prompt, "new": a.new, "rounds": a.rounds, "cells": cells}
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
