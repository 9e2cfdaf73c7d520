#!/usr/bin/env python3
"""Decode on a GGUF file, ragged against llama.cpp on the same file, on the CPU (issue 30: "CPU:
>= 1.2x llama.cpp at batch 1 and 16, for each of those files, on 16 threads and on 2") or on the
GPU with --device cuda ("GPU: >= 1.5x llama.cpp on the same GGUF, for F16, Q8_0, Q4_1 and Q4_K, at
batch 1, 16 and 64"), each runtime alone in its own process, one after the other, --rounds times
interleaved.

--device cuda: ragged runs in --dtype (fp16) on CUDA; llama.cpp (built with CUDA=1 by
bench/peer/llama_cpp_build.sh) with every layer offloaded (-ngl 99) and flash attention on
(-fa on), as issue 30's peer. On CUDA one process of each runtime covers every batch size (the
GPU is not shared between them: each runs alone).

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
       [--batches 1,16] [--rounds 2] [--ab-dequantize] [--device cuda]"""
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
    kw = {"dtype": a.dtype} if a.device != "cpu" else {}
    g = Generator(a.gguf, device=a.device, max_batch_tokens=4096, weights=a.weights, **kw)
    rss = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    wb = None
    try:
        from ragged._lib import lib
        wb = int(lib().rg_model_get_info(g._handle()).contents.weight_bytes)
    except (ImportError, AttributeError):
        pass
    for batch in [int(x) for x in a.batches.split(",")]:
        rnd = random.Random(0)
        hi = min(20000, g.vocab_size)
        prompts = [[rnd.randrange(hi // 20, hi) for _ in range(a.prompt)] for _ in range(batch)]
        # warm-up: plans and, on CUDA, the decode graphs of this batch size
        g.generate(prompts, max_tokens=8 if a.device == "cpu" else a.new, ignore_eos=True)
        best = None
        for _ in range(a.reps):
            r = g.generate(prompts, max_tokens=a.new, ignore_eos=True)
            tot, first = r[0]["time_total_s"], r[0]["time_first_token_s"]
            n = sum(x["completion_tokens"] for x in r)
            cell = {"decode_tok_s": (n - batch) / (tot - first), "total_tok_s": n / tot,
                    "tokens": n}
            if best is None or cell["decode_tok_s"] > best["decode_tok_s"]:
                best = cell
        best["rss_bytes"] = rss
        if wb is not None:
            best["weight_bytes"] = wb
        print(f"RESULT {batch} " + json.dumps(best), flush=True)


def run_llama(a, batches):
    """{batch: cell} of one llama-batched-bench process over the batch sizes."""
    cmd = [os.path.join(a.llama_bin, "llama-batched-bench"), "-m", a.gguf, "-c",
           str(max(batches) * (a.prompt + a.new) + 64), "-b", "2048", "-ub", "512", "-npp",
           str(a.prompt), "-ntg", str(a.new), "-npl", ",".join(map(str, batches)),
           "-t", str(a.threads)]
    if a.device != "cpu":
        cmd += ["-ngl", "99", "-fa", "on"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    rows = [ln for ln in p.stdout.splitlines() if re.match(r"^\|\s*\d+", ln)]
    if p.returncode or not rows:
        return {b: {"error": (p.stderr or p.stdout)[-400:]} for b in batches}
    got = {}
    for row in rows:
        f = [x.strip() for x in row.strip("|").split("|")]
        # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
        # S t/s counts the prompt's tokens too ((PP + TG) B / T); total_tok_s here is what
        # ragged's is, the generated tokens over the whole time: B TG / T (before 2026-12-04
        # this took S, which put llama.cpp's total 1.25x high at 32 + 128 tokens)
        b = int(f[2])
        got[b] = {"decode_tok_s": float(f[7]), "total_tok_s": b * int(f[1]) / float(f[8]),
                  "prefill_tok_s": float(f[5]), "llama_s_tok_s": float(f[9])}
    return {b: got.get(b, {"error": "no row for this batch"}) for b in batches}


def run_ragged(a, batches, weights="quantized"):
    """{batch: cell} of one ragged process over the batch sizes."""
    env = dict(os.environ, RAGGED_NUM_THREADS=str(a.threads))
    cmd = [sys.executable, __file__, "--child", "--gguf", a.gguf,
           "--batches", ",".join(map(str, batches)), "--prompt", str(a.prompt), "--new",
           str(a.new), "--reps", str(a.reps), "--weights", weights, "--device", a.device,
           "--dtype", a.dtype]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    got = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("RESULT "):
            b, js = ln[7:].split(" ", 1)
            got[int(b)] = json.loads(js)
    err = {"error": (p.stderr or p.stdout)[-400:]}
    return {b: got.get(b, err) for b in batches}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-bin")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--weights", default="quantized")
    ap.add_argument("--ab-dequantize", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp16")
    a = ap.parse_args()
    if a.child:
        return child_ragged(a)
    cells = []
    batches = [int(x) for x in a.batches.split(",")]
    # the CPU: a process per batch size (as before); CUDA: one per runtime and round
    groups = [[b] for b in batches] if a.device == "cpu" else [batches]
    for group in groups:
        rounds = {"ragged": [], "llama.cpp": []}
        if a.ab_dequantize:
            rounds["ragged_dequantize"] = []
        for _ in range(a.rounds):
            rounds["ragged"].append(run_ragged(a, group))
            rounds["llama.cpp"].append(run_llama(a, group))
            if a.ab_dequantize:
                rounds["ragged_dequantize"].append(run_ragged(a, group, "dequantize"))
        for b in group:
            cells.append(cell_of(a, b, {rt: [r[b] for r in xs] for rt, xs in rounds.items()}))
            print(json.dumps(cells[-1]), flush=True)
            write_report(a, cells)


def cell_of(a, b, got):
    """One batch size's cell: each runtime's median over the rounds, and the ratios."""
    cell = {"batch": b, "threads": a.threads, "device": a.device}
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
    return cell


def write_report(a, cells):
    rep = {"what": f"{'CPU' if a.device == 'cpu' else 'GPU'} decode on one GGUF: ragged vs "
                   "llama.cpp, each in its own process",
           "gguf": os.path.basename(a.gguf), "gguf_bytes": os.path.getsize(a.gguf),
           "host": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "device": a.device, "dtype": a.dtype if a.device != "cpu" else "fp32",
           "commit": os.environ.get("RAGGED_COMMIT", "?"),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "prompt": a.prompt, "new": a.new, "rounds": a.rounds, "cells": cells}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
