"""Decode-step GEMMs (issue 19): ragged's small-M kernel (src/ops/cuda/gemv.cu) vs cuBLASLt
(ragged's own call with the kernel off, as RAGGED_GEMV=0) vs torch.nn.functional.linear, on the
layer GEMMs of GPT-2 small and SmolLM2-135M at M = 1, 4, 16 rows, fp16.

rg_op_gemm is not exported to ctypes (libragged_internal.so exports only RG_TEST_API), so the two
ragged columns come from build/bench_gemv (bench/kernels/gemv_bench.c, which states the method:
S weight copies >= 128 MB so every call streams W from HBM, S calls per CUDA graph, median of
--reps); this script times torch the same way (torch.cuda.CUDAGraph of S F.linear calls, each on
its own weight copy; F.linear(A, W, bias) only: GPT-2's fc GELU is a separate kernel in torch and
is left out of its time) and prints one table: time per call and weight GB/s = 2 N K / time.
Usage: make CUDA=1 build/bench_gemv && python3 bench/kernels/gemv_bench.py [--json out.json]
       [--reps 5] [--bin build/bench_gemv] [--sweep]   (torch optional: its column is left empty)"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ROT_BYTES = 128 << 20


def torch_time(N, K, M, bias, reps):
    import torch
    import torch.nn.functional as F
    wb = 2 * N * K
    S = min(1024, ROT_BYTES // wb + 1)
    g = torch.Generator(device="cuda").manual_seed(0)
    w0 = torch.rand(N, K, device="cuda", dtype=torch.float16, generator=g) - 0.5
    ws = [w0.clone() for _ in range(S)]
    a = torch.rand(M, K, device="cuda", dtype=torch.float16, generator=g) - 0.5
    b = torch.rand(N, device="cuda", dtype=torch.float16, generator=g) if bias else None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for w in ws[:3]:
            F.linear(a, w, b)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [F.linear(a, w, b) for w in ws]
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    G = max(2, min(200, int(4e-3 / (time.perf_counter() - t0 + 1e-9))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(G):
            graph.replay()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / (G * S))
    del outs, graph, ws
    torch.cuda.empty_cache()
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench_gemv"))
    ap.add_argument("--sweep", action="store_true", help="also the kernel at every (warps, unroll)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        jpath = os.path.join(d, "gemv.json")
        cmd = [a.bin, "--json", jpath, "--reps", str(a.reps)] + (["--sweep"] if a.sweep else [])
        p = subprocess.run(cmd, text=True, capture_output=True)
        sys.stderr.write(p.stderr)
        if p.returncode == 77:
            print(p.stdout.strip())
            sys.exit(77)
        if p.returncode != 0 or not os.path.exists(jpath):
            print(p.stdout)
            sys.exit(f"bench_gemv failed with status {p.returncode}")
        res = json.load(open(jpath))
    try:
        import torch  # noqa: F401
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    res["torch"] = None
    if have_torch:
        import torch
        res["torch"] = torch.__version__
    by = {}
    for r in res["rows"]:
        by.setdefault((r["model"], r["gemm"], r["N"], r["K"], r["M"], r["bias"], r["act"]), []).append(r)
    print(f"{res['gpu']}, {res['dtype']}, commit {res['commit']}, {res['date']}; "
          f"copy ceiling {res['copy_gbs']:.0f} GB/s; torch {res['torch']}")
    modes = sorted({r["mode"] for r in res["rows"]}, key=lambda m: (m != "ragged gemv", m != "cuBLASLt", m))
    cols = modes + (["torch F.linear"] if have_torch else [])
    print("| model | GEMM | N x K | M | " + " | ".join(cols) + " | gemv speedup vs cuBLASLt |")
    print("|---|---|---|---|" + "---|" * len(cols) + "---|")
    for key, rows in by.items():
        model, gemm, N, K, M, bias, act = key
        cell = {r["mode"]: r for r in rows}
        if have_torch:
            t = torch_time(N, K, M, bias, a.reps)
            tr = {"model": model, "gemm": gemm, "N": N, "K": K, "M": M, "bias": bias, "act": act,
                  "mode": "torch F.linear", "us": t * 1e6, "weight_gbs": 2 * N * K / t / 1e9}
            res["rows"].append(tr)
            cell["torch F.linear"] = tr
        txt = [f"{cell[c]['us']:.2f} us, {cell[c]['weight_gbs']:.0f} GB/s" if c in cell else "-" for c in cols]
        sp = (f"{cell['cuBLASLt']['us'] / cell['ragged gemv']['us']:.2f}x"
              if "cuBLASLt" in cell and "ragged gemv" in cell else "-")
        name = gemm + ("+bias" if bias else "") + ("+" + act if act != "none" else "")
        print(f"| {model} | {name} | {N} x {K} | {M} | " + " | ".join(txt) + f" | {sp} |", flush=True)
    if a.json:
        res["written"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
