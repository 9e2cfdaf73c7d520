#!/usr/bin/env python3
"""Attention kernel alone: ragged's rg_op_attention vs torch.nn.attention.varlen.varlen_attn
(FlashAttention varlen) on the same packed QKV, in one process.

Both read the same (T, 3H) tensor (columns [Q | K | V], head h at columns h*D..(h+1)*D-1 of each
block; varlen_attn gets strided (T, heads, D) views of it) and cu_seqlens (int32, device); ragged
writes (T, H) through build/libragged_internal.so's internal symbols (ctypes, torch tensors' data_ptr()
as device pointers: same process, same CUDA context; ragged runs on its own stream, so every
hand-over is bracketed by torch.cuda.synchronize() / rg_backend_sync).

Timing: 20 calls captured in one graph per side (ragged: rg_backend_capture_begin/_end on its own
stream; torch: torch.cuda.CUDAGraph), replayed R times; host wall clock around launch + sync,
divided by 20; median over the replays. If this libragged.so has no capture API (or capture fails)
ragged's 20 calls are launched directly (noted). Reported per cell: us per call, TFLOP/s
(4 * H * sum L^2 per call: QK^T and PV, 2 * L^2 * head_dim each per head), effective GB/s
(the minimum traffic: QKV read once + output written once), next to the device's dense GEMM rate
and copy bandwidth measured at the start of the same run; ratio = varlen us / ragged us (> 1:
ragged faster). Agreement: max abs difference and min per-row cosine of each side vs a float32
reference (torch SDPA per sequence on the same inputs upcast to fp32); a side below
0.9999 (fp16) / 0.999 (bf16) is flagged (exit status 1 after the results are written).

Shapes: BERT-base (12 heads x 64) and MiniLM (12 heads x 32); fp16 and bf16; lengths uniform
[1,32], [1,64], [1,128], [1,512], [5,500]; batch 1, 8, 32, 128 (one seeded batch per cell).
Also on request: shape d128 (8 heads x 128), lengths f512 (every sequence 512 tokens), and
--cells DIST:BATCH,... instead of every dist x batch.
Output, rewritten after every cell: OUT_DIR/attn_<gpu-slug>_<YYYYMMDD-HHMM>[-<tag>].json and .md

A/B of ragged's own kernels: --ragged-env VAR=V1,V2,... times ragged once per value of the
environment variable VAR (set while the call is made and its graph captured; the switch must be
one ragged reads at every call, e.g. RAGGED_ATTN_WGMMA=0,1), each against the same varlen_attn
calls; the table then has one us / TFLOP/s / error column per value, and "ragged" in the JSON is
the first value's.

Usage:  python3 bench/peer/attn_bench.py [--budget-s 90] [--out-dir DIR]
        python3 bench/peer/attn_bench.py --shapes bert-base,d128 --ragged-env RAGGED_ATTN_WGMMA=0,1 \
            --cells u5_500:8,u5_500:32,u5_500:128,f512:64
CPU smoke test (ragged's CPU fp32 kernel vs per-sequence SDPA; no graphs; timings meaningless):
        python3 bench/peer/attn_bench.py --device cpu --quick --out-dir /tmp/x
"""
import argparse
import ctypes
import datetime
import inspect
import math
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_graphed as bg  # noqa: E402  (workloads, ceilings, output helpers)
from bench_graphed import rc  # noqa: E402

SHAPES = {"bert-base": (12, 64), "minilm": (12, 32), "d128": (8, 128)}
DEFAULT_SHAPES = "bert-base,minilm"
DISTS = {"u1_32": (1, 32), "u1_64": (1, 64), "u1_128": (1, 128), "u1_512": (1, 512),
         "u5_500": (5, 500), "f512": (512, 512)}
DEFAULT_DISTS = "u1_32,u1_64,u1_128,u1_512,u5_500"
COS_MIN = {"fp16": 0.9999, "bf16": 0.999, "fp32": 0.99999}
CALLS = 20


def log(*a):
    bg.log(*a)


# ------------------------------------------------------------------ ragged through ctypes

class RaggedOps:
    """rg_backend_* and rg_op_attention from libragged_internal.so (RG_TEST_API symbols)."""

    def __init__(self, device, dtype):
        l = rc.lib()
        self.l = l
        vp, i32 = ctypes.c_void_p, ctypes.c_int
        l.rg_backend_init.argtypes = [i32, i32, i32, ctypes.POINTER(vp)]
        l.rg_backend_init.restype = i32
        l.rg_backend_free.argtypes = [vp]
        l.rg_backend_free.restype = None
        l.rg_backend_sync.argtypes = [vp]
        l.rg_backend_sync.restype = i32
        l.rg_op_attention.argtypes = [vp, ctypes.POINTER(rc.AttnDesc), vp, vp]
        l.rg_op_attention.restype = i32
        self.has_capture = all(hasattr(l, s) for s in (
            "rg_backend_capture_begin", "rg_backend_capture_end", "rg_backend_graph_launch",
            "rg_backend_graph_free"))
        if self.has_capture:
            l.rg_backend_capture_begin.argtypes = [vp]
            l.rg_backend_capture_begin.restype = i32
            l.rg_backend_capture_end.argtypes = [vp, ctypes.POINTER(vp)]
            l.rg_backend_capture_end.restype = i32
            l.rg_backend_graph_launch.argtypes = [vp, vp]
            l.rg_backend_graph_launch.restype = i32
            l.rg_backend_graph_free.argtypes = [vp, vp]
            l.rg_backend_graph_free.restype = None
        self.be = vp()
        self.check(l.rg_backend_init(rc.DEVICE[device], 0, rc.DTYPE[dtype],
                                     ctypes.byref(self.be)), "rg_backend_init")

    def check(self, st, what):
        if st != rc.RG_OK:
            raise RuntimeError(f"{what}: {self.l.rg_status_name(st).decode()}: "
                               f"{self.l.rg_last_error().decode(errors='replace')}")

    def attention(self, qkv_ptr, cu_d_ptr, cu_h_ptr, n_seq, max_len, heads, D, scale, out_ptr):
        d = rc.AttnDesc(num_heads=heads, num_kv_heads=heads, head_dim=D, scale=scale,
                        n_seq=n_seq, cu_seqlens_q=cu_d_ptr, cu_seqlens_q_h=cu_h_ptr,
                        max_seqlen_q=max_len)
        self.check(self.l.rg_op_attention(self.be, ctypes.byref(d), qkv_ptr, out_ptr),
                   "rg_op_attention")

    def sync(self):
        self.check(self.l.rg_backend_sync(self.be), "rg_backend_sync")

    def capture(self, fn):
        """Graph of fn()'s ops on ragged's stream, or raises."""
        self.check(self.l.rg_backend_capture_begin(self.be), "rg_backend_capture_begin")
        err = None
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (end the capture before re-raising)
            err = e
        g = ctypes.c_void_p()
        st = self.l.rg_backend_capture_end(self.be, ctypes.byref(g))
        if err is not None:
            if g:
                self.l.rg_backend_graph_free(self.be, g)
            raise err
        self.check(st, "rg_backend_capture_end")
        return g

    def launch(self, g):
        self.check(self.l.rg_backend_graph_launch(self.be, g), "rg_backend_graph_launch")

    def graph_free(self, g):
        if g:
            self.l.rg_backend_graph_free(self.be, g)

    def close(self):
        if self.be:
            self.l.rg_backend_free(self.be)
            self.be = ctypes.c_void_p()


# ------------------------------------------------------------------ helpers

def cell_lengths(dist, bs, seed):
    lo, hi = DISTS[dist]
    rng = np.random.default_rng([seed, list(DISTS).index(dist), bs])
    return rng.integers(lo, hi + 1, size=bs).astype(np.int64)


def attn_flops(H, lens):
    return bg.attention_flops(H, lens)


def attn_bytes(T, H, elem):
    return float(T) * (3 * H + H) * elem


def render_md(res):
    m = res["meta"]
    c = res.get("ceilings", {})
    g = c.get("gemm_tflops", {})
    lines = [f"# Attention kernel: ragged rg_op_attention vs {m.get('peer_attention')}, "
             f"{m['device_name']}", "",
             f"- date: {m['date']}  commit: `{m['commit']}`  driver: {m['driver']}  torch: "
             f"{m['torch']}  budget: {m['budget_s']} s{'  (quick)' if m['quick'] else ''}",
             f"- ceilings (this run): copy {bg.fmt(c.get('copy_gbps'), '.0f')} GB/s (read + "
             "write); dense GEMM " + ", ".join(f"{k} {bg.fmt(v, '.0f')} TFLOP/s"
                                               for k, v in g.items()),
             f"- us = median per call over graph replays of {CALLS} calls (ragged graphed: "
             f"{m.get('ragged_graphed')}); TFLOP/s = 4*H*sum(L^2) / time; GB/s = (QKV read + "
             "output written) / time; % GEMM = TFLOP/s / dense GEMM rate; ratio = varlen us / "
             "ragged us (> 1: ragged faster); err = max abs / min row cosine vs fp32 SDPA",
             ""]
    if m["device"] != "cuda":
        lines.insert(2, "- **CPU smoke test**: ragged's CPU kernel vs per-sequence SDPA, fp32, "
                        "no graphs; the timings mean nothing")
    for run in res["runs"]:
        lines.append(f"## {run['shape']} ({run['heads']} heads x {run['head_dim']}) {run['dtype']}")
        lines.append("")
        lines.append("| cell | T | max L | ragged us | varlen us | ratio | ragged TFLOP/s | "
                     "varlen TFLOP/s | % GEMM r / v | ragged GB/s | varlen GB/s | "
                     "ragged err | varlen err |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
        for cc in run["cells"]:
            name = f"{cc['dist']} b{cc['batch']}"
            if cc.get("error"):
                lines.append(f"| {name} | {cc.get('T', '')} | | error: {cc['error'][:90]} "
                             "| | | | | | | | | |")
                continue
            r, v = cc["ragged"], cc["varlen"]
            flag_r = "" if r["pass"] else " **FLAG**"
            flag_v = "" if v["pass"] else " **FLAG**"
            lines.append(
                f"| {name} | {cc['T']} | {cc['max_len']} | {r['us']:.1f} | {v['us']:.1f} | "
                f"{cc['ratio']:.2f}x | {r['tflops']:.1f} | {v['tflops']:.1f} | "
                f"{bg.fmt(r.get('gemm_pct'), '.0f')} / {bg.fmt(v.get('gemm_pct'), '.0f')} | "
                f"{r['gbps']:.0f} | {v['gbps']:.0f} | {r['max_abs']:.1e} / "
                f"{r['min_cos']:.6f}{flag_r} | {v['max_abs']:.1e} / {v['min_cos']:.6f}{flag_v} |")
        lines.append("")
    if m.get("ragged_variants"):
        lines += render_variants(res)
    return "\n".join(lines + bg.md_notes(res, "Flagged"))


def render_variants(res):
    """One table per run: each --ragged-env value's us, TFLOP/s and error next to varlen_attn's;
    speedup = the first value's us / each value's."""
    names = res["meta"]["ragged_variants"]
    lines = ["## ragged A/B: " + " vs ".join(names), ""]
    for run in res["runs"]:
        lines.append(f"### {run['shape']} ({run['heads']} heads x {run['head_dim']}) "
                     f"{run['dtype']}")
        lines.append("")
        lines.append("| cell | T | max L | " + " | ".join(f"{n} us" for n in names) +
                     " | varlen us | " + " | ".join(f"{n} TFLOP/s" for n in names) +
                     " | varlen TFLOP/s | " + " | ".join(f"vs varlen {n}" for n in names) +
                     " | " + " | ".join(f"speedup {n}" for n in names[1:]) + " | " +
                     " | ".join(f"err {n}" for n in names) + " |")
        lines.append("|---|---:|---:|" + "---:|" * (3 * len(names) + 2 + len(names) - 1) +
                     "---|" * len(names))
        for cc in run["cells"]:
            name = f"{cc['dist']} b{cc['batch']}"
            vs = cc.get("variants")
            if cc.get("error") or not vs:
                lines.append(f"| {name} | {cc.get('T', '')} | | error: "
                             f"{cc.get('error', 'no variants')[:90]} |")
                continue
            first = vs[names[0]]["us"]
            lines.append(
                f"| {name} | {cc['T']} | {cc['max_len']} | " +
                " | ".join(f"{vs[n]['us']:.1f}" for n in names) + f" | {cc['varlen']['us']:.1f} | " +
                " | ".join(f"{vs[n]['tflops']:.1f}" for n in names) +
                f" | {cc['varlen']['tflops']:.1f} | " +
                " | ".join(f"{vs[n]['ratio']:.2f}x" for n in names) + " | " +
                " | ".join(f"{first / vs[n]['us']:.2f}x" for n in names[1:]) + " | " +
                " | ".join(f"{vs[n]['max_abs']:.1e} / {vs[n]['min_cos']:.6f}"
                           + ("" if vs[n]["pass"] else " **FLAG**") for n in names) + " |")
        lines.append("")
    return lines


def rows_check(out, ref):
    o = out.detach().float().reshape(ref.shape[0], -1).cpu().numpy().astype(np.float64)
    r = ref.reshape(ref.shape[0], -1).cpu().numpy().astype(np.float64)
    return float(np.max(np.abs(o - r))) if o.size else 0.0, bg.min_cos(o, r) if o.size else 1.0


# ------------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--dists", default=DEFAULT_DISTS)
    ap.add_argument("--cells", default=None,
                    help="DIST:BATCH,... (instead of every --dists x --batches)")
    ap.add_argument("--ragged-env", default=None,
                    help="VAR=V1,V2,...: time ragged once per value of VAR")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--budget-s", type=float, default=90.0)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--max-reps", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", os.path.join(bg.ROOT, "build",
                                                                             "peer")))
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    ap.add_argument("--seed", type=int, default=20261122)
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    if a.quick:
        if a.batches == "1,8,32,128":
            a.batches = "1,8"
        if a.dists == DEFAULT_DISTS:
            a.dists = "u1_32,u5_500"
        a.min_reps = a.max_reps = 3
        a.budget_s = min(a.budget_s, 30.0)

    import torch
    import torch.nn.functional as F
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = [s for s in a.shapes.split(",") if s]
    dtypes = [d for d in a.dtypes.split(",") if d]
    notes = []
    if not cuda:
        if dtypes != ["fp32"]:
            notes.append(f"CPU smoke test: dtypes {dtypes} replaced by fp32")
        dtypes = ["fp32"]
    dists = [d for d in a.dists.split(",") if d]
    for d in dists:
        if d not in DISTS:
            sys.exit(f"--dists: unknown {d}")
    bss = [int(x) for x in a.batches.split(",")]
    if a.cells:
        cells = []
        for cell in a.cells.split(","):
            d, _, b = cell.partition(":")
            if d not in DISTS or not b.isdigit():
                sys.exit(f"--cells: bad cell {cell!r} (DIST:BATCH)")
            cells.append((d, int(b)))
    else:
        cells = [(d, b) for d in dists for b in bss]
    variants = [None]
    if a.ragged_env:
        var, _, vals = a.ragged_env.partition("=")
        if not var or not vals:
            sys.exit("--ragged-env: VAR=V1,V2,...")
        variants = [(var, v) for v in vals.split(",")]

    dev_name = torch.cuda.get_device_name(0) if cuda else (platform.machine() or "cpu")
    now = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(a.out_dir, exist_ok=True)
    base = bg.result_base(a.out_dir, "attn", bg.slug(dev_name) if cuda else bg.cpu_device(),
                          a.tag if cuda else "-".join(filter(None, ("smoke", a.tag))), now)

    varlen, varlen_kw, peer_name = None, {}, "per-sequence SDPA (CPU smoke test)"
    if cuda:
        try:
            from torch.nn.attention.varlen import varlen_attn as varlen
            sig = inspect.signature(varlen)
            peer_name = "torch.nn.attention.varlen.varlen_attn"
            varlen_kw = {"scale": None} if "scale" in sig.parameters else {}
            notes.append(f"varlen_attn signature: {sig}")
        except ImportError as e:
            notes.append(f"varlen_attn unavailable ({e}): aten._flash_attention_forward used")
            peer_name = "torch.ops.aten._flash_attention_forward (varlen_attn unavailable)"
            log("NOTE: " + notes[-1])

    res = {"meta": {
        "date": now.isoformat(timespec="seconds"), "commit": bg.commit_id(), "device": a.device,
        "device_name": dev_name, "driver": bg.gpu_driver() if cuda else "-",
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "budget_s": a.budget_s,
        "quick": a.quick, "seed": a.seed, "calls_per_graph": CALLS, "cos_min": COS_MIN,
        "peer_attention": peer_name, "ragged_graphed": None,
        "ragged_variants": [f"{v[0]}={v[1]}" for v in variants if v],
        "argv": sys.argv[1:] if argv is None else argv,
    }, "ceilings": {}, "runs": [], "notes": notes, "failures": []}
    log(f"device {dev_name}; torch {torch.__version__}; out {base}.json/.md")
    if not cuda:
        log("CPU SMOKE TEST: ragged CPU kernel vs per-sequence SDPA, fp32, no graphs")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    n_total = len(shapes) * len(dtypes) * len(cells)
    n_done = 0
    with torch.no_grad():
        res["ceilings"] = bg.measure_ceilings(torch, a.device,
                                              [d for d in ("fp16", "bf16") if cuda] or ["fp32"],
                                              a.quick)
        c = res["ceilings"]
        log(f"ceilings: copy {c['copy_gbps']:.0f} GB/s; GEMM " + ", ".join(
            f"{k} {v:.1f} TFLOP/s" for k, v in c["gemm_tflops"].items()))
        bg.write_results(res, base, render_md)
        for dt in dtypes:
            tdt = bg.torch_dtype(torch, dt)
            elem = torch.tensor([], dtype=tdt).element_size()
            ops = RaggedOps(a.device, dt)
            graphed = cuda and ops.has_capture
            if cuda and not ops.has_capture:
                notes.append("this libragged.so has no rg_backend_capture_* : ragged's 20 calls "
                             "are launched directly (launch overhead included)")
                log("NOTE: " + notes[-1])
            for shape in shapes:
                heads, D = SHAPES[shape]
                H = heads * D
                scale = 1.0 / math.sqrt(D)
                run = {"shape": shape, "heads": heads, "head_dim": D, "dtype": dt, "cells": []}
                res["runs"].append(run)
                for dist, bs in cells:
                    t_cell = time.monotonic()
                    lens = cell_lengths(dist, bs, a.seed)
                    cu_h = np.zeros(bs + 1, np.int32)
                    cu_h[1:] = np.cumsum(lens)
                    T, max_len = int(cu_h[-1]), int(lens.max())
                    cc = {"dist": dist, "batch": bs, "T": T, "max_len": max_len,
                          "sum_sq": int(np.sum(lens * lens))}
                    try:
                        cc.update(run_cell(torch, F, a, cuda, ops, graphed, varlen, varlen_kw,
                                           dt, tdt, elem, heads, D, H, scale, lens, cu_h,
                                           res["ceilings"]["gemm_tflops"].get(dt),
                                           res["ceilings"]["copy_gbps"], t_start, t_cell,
                                           n_total - n_done, notes, variants))
                        if graphed and not cc.get("ragged_graphed", True):
                            res["meta"]["ragged_graphed"] = False
                        elif res["meta"]["ragged_graphed"] is None:
                            res["meta"]["ragged_graphed"] = cc.get("ragged_graphed", False)
                        checked = [("ragged", cc["ragged"]), ("varlen", cc["varlen"])]
                        checked += [(f"ragged {k}", v)
                                    for k, v in cc.get("variants", {}).items()]
                        for side, cs in checked:
                            if not cs["pass"]:
                                res["failures"].append(
                                    f"{shape} {dt} {dist} b{bs} {side}: min cos "
                                    f"{cs['min_cos']:.6f} < {COS_MIN[dt]}")
                    except Exception as e:  # noqa: BLE001
                        cc["error"] = f"{type(e).__name__}: {e}"
                        res["failures"].append(f"{shape} {dt} {dist} b{bs}: {cc['error']}")
                        log(f"ERROR {shape} {dt} {dist} b{bs}: {cc['error']}")
                        sync()
                    n_done += 1
                    if not cc.get("error"):
                        for k, v in cc.get("variants", {}).items():
                            log(f"    ragged {k}: {v['us']:.1f} us ({v['tflops']:.1f} "
                                f"TFLOP/s), cos {v['min_cos']:.6f}")
                        log(f"[{n_done}/{n_total}] {shape} {dt} {dist} b{bs}: T {T}, ragged "
                            f"{cc['ragged']['us']:.1f} us ({cc['ragged']['tflops']:.1f} "
                            f"TFLOP/s), varlen {cc['varlen']['us']:.1f} us "
                            f"({cc['varlen']['tflops']:.1f} TFLOP/s), {cc['ratio']:.2f}x; "
                            f"cos {cc['ragged']['min_cos']:.6f}/"
                            f"{cc['varlen']['min_cos']:.6f}, reps {cc['reps']}")
                    run["cells"].append(cc)
                    res["meta"]["wall_s"] = time.monotonic() - t_start
                    bg.write_results(res, base, render_md)
            ops.close()
    return bg.finish(res, base, render_md, t_start)


def run_cell(torch, F, a, cuda, ops, graphed, varlen, varlen_kw, dt, tdt, elem, heads, D, H,
             scale, lens, cu_h, gemm_rate, copy_gbps, t_start, t_cell, cells_left, notes,
             variants=(None,)):
    dev = a.device
    T, n, max_len = int(cu_h[-1]), len(lens), int(lens.max())
    g = torch.Generator(device=dev).manual_seed(int(T * 131 + n))
    qkv = torch.randn(T, 3 * H, generator=g, device=dev).to(tdt).contiguous()
    cu_d = torch.from_numpy(cu_h).to(dev)
    out_r = torch.full((T, H), float("nan"), device=dev, dtype=tdt)
    q, k, v = qkv.view(T, 3, heads, D).unbind(1)
    cu_h_ptr = cu_h.ctypes.data

    def ragged_call():
        ops.attention(qkv.data_ptr(), cu_d.data_ptr(), cu_h_ptr, n, max_len, heads, D, scale,
                      out_r.data_ptr())

    def set_variant(v):
        """Set (v = (VAR, value)) or leave (None) the environment of ragged's calls."""
        if v is not None:
            os.environ[v[0]] = v[1]

    if varlen is not None:
        kw = {"scale": scale} if "scale" in varlen_kw else {}

        def peer_call():
            return varlen(q, k, v, cu_d, cu_d, max_len, max_len, **kw)
    elif cuda:
        def peer_call():
            return torch.ops.aten._flash_attention_forward(q, k, v, cu_d, cu_d, max_len, max_len,
                                                           0.0, False, False)[0]
    else:
        def peer_call():
            o = torch.empty(T, heads, D, dtype=tdt)
            for s in range(n):
                lo, hi = int(cu_h[s]), int(cu_h[s + 1])
                o[lo:hi] = F.scaled_dot_product_attention(
                    q[lo:hi].transpose(0, 1), k[lo:hi].transpose(0, 1), v[lo:hi].transpose(0, 1),
                    scale=scale).transpose(0, 1)
            return o

    # correctness: fp32 SDPA per sequence on the same (rounded) inputs
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    outs = []  # ragged's output per variant
    for var in variants:  # not "v": peer_call reads the value tensor v
        set_variant(var)
        out_r.fill_(float("nan"))
        sync()
        ragged_call()
        ops.sync()
        outs.append(out_r.clone())
    out_v = peer_call()
    sync()
    ref = torch.empty(T, heads, D, dtype=torch.float32, device=dev)
    qf, kf, vf = q.float(), k.float(), v.float()
    for s in range(n):
        lo, hi = int(cu_h[s]), int(cu_h[s + 1])
        ref[lo:hi] = F.scaled_dot_product_attention(
            qf[lo:hi].transpose(0, 1), kf[lo:hi].transpose(0, 1), vf[lo:hi].transpose(0, 1),
            scale=scale).transpose(0, 1)
    sync()
    vname = [f"{var[0]}={var[1]}" if var else "ragged" for var in variants]
    sides = {"varlen": {}}
    for name in vname:
        sides[name] = {}
    for side, o in [("varlen", out_v)] + list(zip(vname, outs)):
        mabs, mcos = rows_check(o, ref)
        sides[side].update(max_abs=mabs, min_cos=mcos, graphed=False)
        sides[side]["pass"] = bool(mcos >= COS_MIN[dt])  # NaN fails
    c = {"ragged": sides[vname[0]], "varlen": sides["varlen"]}
    if variants[0] is not None:
        c["variants"] = {name: sides[name] for name in vname}
        c["max_abs_variants"] = rows_check(outs[-1], outs[0].float())[0]
    c["max_abs_ragged_varlen"] = rows_check(outs[0], out_v.float())[0]
    del outs
    del ref, qf, kf, vf

    # graphs of CALLS calls per side
    r_graphs, t_graph = {name: None for name in vname}, None
    c["ragged_graphed"] = False
    if graphed:
        try:
            for var, name in zip(variants, vname):
                set_variant(var)
                r_graphs[name] = ops.capture(lambda: [ragged_call() for _ in range(CALLS)])
            c["ragged_graphed"] = True
        except Exception as e:  # noqa: BLE001
            msg = f"ragged capture failed ({e}); direct launches timed"
            if msg not in notes:
                notes.append(msg)
            for name in vname:
                ops.graph_free(r_graphs[name])
                r_graphs[name] = None
    keep = []
    if cuda:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    peer_call()
            torch.cuda.current_stream().wait_stream(s)
            sync()
            t_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(t_graph):
                for _ in range(CALLS):
                    keep.append(peer_call())
        except Exception as e:  # noqa: BLE001
            msg = f"torch capture failed ({e}); direct calls timed"
            if msg not in notes:
                notes.append(msg)
            t_graph = None
            sync()
    c["varlen_graphed"] = c["varlen"]["graphed"] = t_graph is not None
    for name in vname:
        sides[name]["graphed"] = r_graphs[name] is not None

    def run_ragged(name):
        set_variant(variants[vname.index(name)])
        sync()
        t0 = time.perf_counter()
        if r_graphs[name] is not None:
            ops.launch(r_graphs[name])
        else:
            for _ in range(CALLS):
                ragged_call()
        ops.sync()
        return (time.perf_counter() - t0) / CALLS * 1e6

    def run_varlen():
        sync()
        t0 = time.perf_counter()
        if t_graph is not None:
            t_graph.replay()
        else:
            for _ in range(CALLS):
                peer_call()
        sync()
        return (time.perf_counter() - t0) / CALLS * 1e6

    def run_side(side):
        return run_varlen() if side == "varlen" else run_ragged(side)

    order = vname + ["varlen"]
    est = {side: min(run_side(side) for _ in range(2)) for side in order}
    left = a.budget_s - (time.monotonic() - t_start)
    avail = max(left, 0.0) / max(cells_left, 1) - (time.monotonic() - t_cell)
    reps = int(avail / max(sum(est.values()) * CALLS / 1e6, 1e-7))
    reps = max(a.min_reps, min(a.max_reps, reps))
    ts = {side: [] for side in order}
    for i in range(reps):
        for side in (order if i % 2 == 0 else order[::-1]):
            ts[side].append(run_side(side))
    fl = attn_flops(H, lens)
    by = attn_bytes(T, H, elem)
    for side in order:
        us = float(np.median(ts[side]))
        d = sides[side]
        d.update(us=us, p90_us=bg.pct(ts[side], 90), min_us=float(np.min(ts[side])),
                 tflops=fl / (us / 1e6) / 1e12, gbps=by / (us / 1e6) / 1e9)
        if gemm_rate:
            d["gemm_pct"] = 100.0 * d["tflops"] / gemm_rate
        if copy_gbps:
            d["copy_pct"] = 100.0 * d["gbps"] / copy_gbps
    c["ratio"] = c["varlen"]["us"] / c["ragged"]["us"]
    for name in vname:
        sides[name]["ratio"] = c["varlen"]["us"] / sides[name]["us"]
    c["reps"] = reps
    c["flops"] = fl
    c["bytes_min"] = by
    ops.sync()
    for name in vname:
        ops.graph_free(r_graphs[name])
    del t_graph, keep
    return c


if __name__ == "__main__":
    sys.exit(main())
