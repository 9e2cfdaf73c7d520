"""Kernel benchmark of LightSeq's hierarchical retrieve-and-rerank top-k (sec. 2.2) on the device:
rg_op_topk_rows(RG_TOPK_HIER) against a full sort of every row (rg_op_topk_rows(RG_TOPK_SORT):
CUB's stable segmented radix sort, then the first k) and against torch.topk (when torch is
importable), on (rows, vocab) = (1, 50257), (16, 50257), (64, 151936) and k = 1, 8, 50, fp32
logits (gaussian, as a LM head's). Also times rg_op_sample_rows (top-k 50 + top-p 0.9 sampling,
and top-p 0.9 alone) on the same shapes: the per-step cost of sampling on the device; and, at
issue 19's decode shapes (rows 1, 4, 16 x vocab 50257), its fast path (src/ops/cuda/sample.cu:
slices then a merge; greedy rows with top_n, top-k <= 64) against the full algorithm
(RAGGED_SAMPLE_FAST=0) on the same logits, for top-k 50 + top-p 0.9 (temperature 0.8) and greedy
rows with top_n 8 (beam search's request); the check: both paths give the same ids and top ids.

Method (STYLE.md rule 10): each timed call reads its own copy of the logits, S copies so that a
launch touches >= 2 x 50 MB (L2 of an H100) and HBM is measured; S calls captured in one CUDA graph
(torch: torch.cuda.CUDAGraph), one warm launch, then G launches timed with a host clock around
launch + synchronize; time per call = total / (S G); --reps 5, median reported. Napkin math: a
top-k must read the logits once, rows x vocab x 4 bytes; GB/s = that / time, against ~3,350 GB/s
(H100 SXM HBM3; ~3 TB/s in practice). The hierarchical kernel reads a row twice (group maxima,
then the candidates >= R), the second read from L2 for one row per CTA.
Checks: the hierarchical ids equal the sort's (exactly: value descending, ties by lower index)
and torch.topk's values.
Usage: RAGGED_INTERNAL_LIB=build/libragged_internal.so python3 bench/kernels/topk_bench.py \
         [--json out.json] [--reps 5]"""
import argparse
import ctypes
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
from sample_cuda import SampleArgs, load  # noqa: E402

SHAPES = ((1, 50257), (16, 50257), (64, 151936))
KS = (1, 8, 50)
L2 = 50 << 20
PEAK = 3350.0


class Be:
    def __init__(self, L):
        self.L = L
        self.be = ctypes.c_void_p()
        st = L.rg_backend_init(1, 0, 0, ctypes.byref(self.be))
        if st != 0:
            print("no CUDA device:", L.rg_last_error().decode())
            sys.exit(77)
        for f in ("rg_backend_capture_begin", "rg_backend_graph_launch", "rg_backend_graph_free"):
            getattr(L, f).argtypes = [ctypes.c_void_p] + ([ctypes.c_void_p] if f != "rg_backend_capture_begin" else [])
        L.rg_backend_capture_end.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        self.bufs = []

    def alloc(self, n):
        p = ctypes.c_void_p()
        assert self.L.rg_backend_alloc(self.be, max(n, 1), ctypes.byref(p)) == 0, "out of memory"
        self.bufs.append(p)
        return p

    def put(self, a):
        p = self.alloc(a.nbytes)
        assert self.L.rg_backend_upload(self.be, p, a.ctypes.data, a.nbytes) == 0
        return p

    def get(self, p, shape, dtype):
        out = np.empty(shape, dtype)
        self.L.rg_backend_sync(self.be)
        self.L.rg_backend_download(self.be, out.ctypes.data, p, out.nbytes)
        return out

    def free_all(self):
        self.L.rg_backend_sync(self.be)
        for p in self.bufs:
            self.L.rg_backend_dealloc(self.be, p)
        self.bufs = []

    def time_graph(self, calls, G, reps):
        """calls: list of zero-argument functions, each one op launch; captured as one graph."""
        L = self.L
        assert L.rg_backend_capture_begin(self.be) == 0, L.rg_last_error()
        for c in calls:
            c()
        g = ctypes.c_void_p()
        assert L.rg_backend_capture_end(self.be, ctypes.byref(g)) == 0, L.rg_last_error()
        L.rg_backend_graph_launch(self.be, g)
        L.rg_backend_sync(self.be)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(G):
                L.rg_backend_graph_launch(self.be, g)
            L.rg_backend_sync(self.be)
            ts.append((time.perf_counter() - t0) / (G * len(calls)))
        L.rg_backend_graph_free(self.be, g)
        return float(np.median(ts))


def torch_time(xs_np, k, G, reps):
    try:
        import torch
    except ImportError:
        return None, None
    xs = [torch.from_numpy(x).cuda() for x in xs_np]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for x in xs[:3]:
            torch.topk(x, k, dim=1)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [torch.topk(x, k, dim=1) for x in xs]
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(G):
            g.replay()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / (G * len(xs)))
    vals = outs[0][0].cpu().numpy()
    return float(np.median(ts)), vals


def sample_paths(L, be, rng, a, res):
    """rg_op_sample_rows' fast path against the full algorithm (RAGGED_SAMPLE_FAST=0, read by
    the launcher at capture) at decode shapes; returns whether both gave the same ids."""
    ok = True
    N = 50257
    print("| rows x vocab | case | path | time | GB/s of ~3350 | check |")
    print("|---|---|---|---|---|---|")
    for M in (1, 4, 16):
        nbytes = M * N * 4
        S = int(min(256, max(1, -(-2 * L2 // nbytes))))
        G = max(2, int(2000 // S))
        xd = [be.put((rng.standard_normal((M, N)) * 3).astype(np.float32)) for _ in range(S)]
        swork = be.alloc(L.rg_sample_work_bytes(M, N))
        for label, temp, kk, pp, tn in (("top-k 50 + top-p 0.9", 0.8, 50, 0.9, 0),
                                        ("greedy, top_n 8", 0.0, 0, 1.0, 8)):
            rows = np.zeros(M, dtype=np.dtype([("u", np.float64)] + [(f, np.float32) for f in (
                "temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                "frequency_penalty")] + [("top_k", np.int32), ("reserved", np.int32)]))
            rows["u"], rows["temperature"], rows["top_p"] = rng.random(M), temp, pp
            rows["repetition_penalty"], rows["top_k"] = 1.0, kk
            tops = (be.alloc(4 * M * tn), be.alloc(4 * M * tn)) if tn else (None, None)
            sa = SampleArgs(be.put(rows), None, None, None, None, tn, swork, be.alloc(4 * M),
                            be.alloc(4 * M), *tops)
            times, outs = {}, {}
            for path, env in (("fast path", "1"), ("full (RAGGED_SAMPLE_FAST=0)", "0")):
                os.environ["RAGGED_SAMPLE_FAST"] = env
                calls = [lambda x=x: L.rg_op_sample_rows(be.be, x, M, N, ctypes.byref(sa))
                         for x in xd]
                times[path] = be.time_graph(calls, max(2, G // 4), a.reps)
                assert L.rg_op_sample_rows(be.be, xd[0], M, N, ctypes.byref(sa)) == 0
                outs[path] = (be.get(sa.ids, M, np.int32),
                              be.get(sa.top_ids, (M, tn), np.int32) if tn else None)
            os.environ.pop("RAGGED_SAMPLE_FAST", None)
            f, g = outs.values()
            same = np.array_equal(f[0], g[0]) and (not tn or np.array_equal(f[1], g[1]))
            ok &= bool(same)
            for path, t in times.items():
                gbs = nbytes / t / 1e9
                chk = ("ids == full" if same else "IDS DIFFER") if path == "fast path" else ""
                print(f"| {M} x {N} | {label} | {path} | {t * 1e3:.4f} ms | {gbs:.0f} GB/s of "
                      f"{PEAK:.0f} | {chk} |", flush=True)
                res["rows"].append({"rows": M, "vocab": N, "k": kk, "top_n": tn,
                                    "method": f"sample {label}: {path}", "ms": t * 1e3,
                                    "gbs": gbs, "check": chk})
        be.free_all()
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    L = load()
    L.rg_op_topk_rows.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 4 + [ctypes.c_void_p] * 3
    be = Be(L)
    rng = np.random.default_rng(0)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["bash", os.path.join(ROOT, "scripts", "commit-id.sh"), ROOT],
                            capture_output=True, text=True).stdout.strip() or os.environ.get("RAGGED_COMMIT", "unknown")
    res = {"gpu": gpu, "commit": commit, "date": datetime.datetime.utcnow().isoformat() + "Z",
           "peak_gbs": PEAK, "rows": []}
    print(f"{gpu}, commit {commit}")
    print("| rows x vocab | k | method | time | GB/s of ~3350 | check |")
    print("|---|---|---|---|---|---|")
    ok = True
    for M, N in SHAPES:
        nbytes = M * N * 4
        S = int(min(256, max(1, -(-2 * L2 // nbytes))))
        G = max(2, int(2000 // S))
        xs = [(rng.standard_normal((M, N)) * 3).astype(np.float32) for _ in range(S)]
        xd = [be.put(x) for x in xs]
        work = [be.alloc(L.rg_topk_work_bytes(M, N)) for _ in range(1)]
        for k in KS:
            idx = be.alloc(4 * M * k)
            val = be.alloc(4 * M * k)
            times, ids = {}, {}
            for name, method in (("hierarchical", 0), ("CUB full sort", 1)):
                calls = [lambda x=x, method=method: L.rg_op_topk_rows(be.be, x, M, N, k, method,
                                                                      work[0], idx, val)
                         for x in xd]
                try:
                    times[name] = be.time_graph(calls, G if method == 0 else max(2, G // 8),
                                                a.reps)
                except AssertionError as e:  # CUB's scratch over the backend's workspace
                    if method == 0:
                        raise
                    print(f"| {M} x {N} | {k} | {name} | skipped: {e} |", flush=True)
                    continue
                assert L.rg_op_topk_rows(be.be, xd[0], M, N, k, method, work[0], idx, val) == 0
                ids[name] = be.get(idx, (M, k), np.int32)
            same = np.array_equal(ids["hierarchical"], ids.get("CUB full sort", ids["hierarchical"]))
            ok &= same
            tt, tv = torch_time(xs, k, G, a.reps)
            if tt is not None:
                times["torch.topk"] = tt
                tv_ok = np.array_equal(np.take_along_axis(xs[0], ids["hierarchical"], 1), tv)
                ok &= bool(tv_ok)
            for name, t in times.items():
                gbs = nbytes / t / 1e9
                chk = ("ids == sort" if same else "IDS DIFFER") if name != "torch.topk" else \
                      ("values == ours" if tv_ok else "VALUES DIFFER")
                print(f"| {M} x {N} | {k} | {name} | {t * 1e3:.4f} ms | {gbs:.0f} GB/s of {PEAK:.0f} | {chk} |",
                      flush=True)
                res["rows"].append({"rows": M, "vocab": N, "k": k, "method": name, "ms": t * 1e3,
                                    "gbs": gbs, "check": chk})
        # sampling on the device: the per-step cost of rg_op_sample_rows
        for label, kk, pp in (("sample top-k 50 + top-p 0.9", 50, 0.9), ("sample top-p 0.9", 0, 0.9)):
            rows = np.zeros(M, dtype=np.dtype([("u", np.float64)] + [(f, np.float32) for f in (
                "temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                "frequency_penalty")] + [("top_k", np.int32), ("reserved", np.int32)]))
            rows["u"], rows["temperature"], rows["top_p"] = 0.5, 0.8, pp
            rows["repetition_penalty"], rows["top_k"] = 1.0, kk
            swork = be.alloc(L.rg_sample_work_bytes(M, N))
            sa = SampleArgs(be.put(rows), None, None, None, None, 0, swork, be.alloc(4 * M),
                            be.alloc(4 * M), None, None)
            calls = [lambda x=x: L.rg_op_sample_rows(be.be, x, M, N, ctypes.byref(sa)) for x in xd]
            t = be.time_graph(calls, max(2, G // 4), a.reps)
            gbs = nbytes / t / 1e9
            print(f"| {M} x {N} | {kk or '-'} | {label} | {t * 1e3:.4f} ms | {gbs:.0f} GB/s of {PEAK:.0f} | |",
                  flush=True)
            res["rows"].append({"rows": M, "vocab": N, "k": kk, "method": label, "ms": t * 1e3,
                                "gbs": gbs})
        be.free_all()
    ok &= sample_paths(L, be, rng, a, res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print("checks:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
