#!/usr/bin/env python3
"""Kernel-time trace of ragged and the graphed packed PyTorch peer on the same batches (CUPTI through
torch.profiler, which records every kernel of the process: ragged's graph replays included).

For each cell (model, dtype, length distribution, batch size): the same batch runs on both sides
(bench_graphed.py's RaggedRunner / PeerRunner, the peer captured in one CUDA graph), warmed up,
then each side runs N times under its own profiler session. Reported per side: wall ms per call
(host clock, synchronised), GPU-busy ms per call (sum of kernel durations / N), the gap between
them (launch, copy and host time), and kernel time per call grouped by kind (GEMM, attention,
LayerNorm, pooling, elementwise, copies, other) with the top kernels by name. Also the activation
memory: ragged's planned arena for the batch (rg_model_arena_bytes: planned vs one buffer per
tensor) against the peer's torch.cuda.max_memory_allocated above its weights.

  python3 bench/peer/trace.py --models minilm=DIR,bert-base=DIR --cells bert-base:fp16:u5_500:8,...
Writes OUT_DIR/trace_<gpu>_<date>.md and .json.
"""
import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_graphed as bg  # noqa: E402

KINDS = [("attention", ("attention", "flash", "fmha", "attn")),  # before gemm: FA names cutlass
         ("gemm", ("gemm", "nvjet", "cutlass", "sm90_xmma", "ampere_", "cublas", "matmul")),
         ("layernorm", ("layernorm", "layer_norm")),
         ("pool", ("pool", "index_add", "scatter", "segment", "reduce")),
         ("copy", ("memcpy", "copy")),
         ("elementwise", ("elementwise", "gelu", "add", "mul", "div", "norm", "bias", "act"))]


def kind_of(name):
    n = name.lower()
    for k, keys in KINDS:
        if any(x in n for x in keys):
            return k
    return "other"


def profile(torch, fn, batch, n):
    from torch.profiler import ProfilerActivity, profile as tprofile
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            fn(batch)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n
    kernels = {}
    for e in prof.events():
        dev_t = getattr(e, "device_type", None)
        if dev_t is None or "CUDA" not in str(dev_t):
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        if us <= 0:
            continue
        kernels[e.name] = kernels.get(e.name, 0.0) + us
    return wall * 1e3, {k: v / n / 1e3 for k, v in kernels.items()}  # ms per call


def summarize(kern):
    by = {}
    for name, ms in kern.items():
        by[kind_of(name)] = by.get(kind_of(name), 0.0) + ms
    top = sorted(kern.items(), key=lambda kv: -kv[1])[:8]
    return by, top


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--cells", required=True,
                    help="comma-separated MODEL:DTYPE:DIST:BATCH, e.g. bert-base:fp16:u5_500:8")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "build/trace"))
    ap.add_argument("--seed", type=int, default=20261122)
    a = ap.parse_args()
    import torch
    models = dict(item.split("=", 1) for item in a.models.split(","))
    rng = np.random.default_rng(a.seed)
    now = datetime.datetime.now(datetime.timezone.utc)
    dev = torch.cuda.get_device_name(0)
    res = {"meta": {"date": now.isoformat(timespec="seconds"), "commit": bg.commit_id(),
                    "device_name": dev, "torch": torch.__version__, "n": a.n}, "cells": []}
    lines = [f"# Kernel trace: ragged vs the graphed packed PyTorch peer, {dev}", "",
             f"- date {res['meta']['date']}  commit `{res['meta']['commit']}`  torch "
             f"{torch.__version__}; CUPTI via torch.profiler, {a.n} calls per side, ms per call",
             "- wall: host clock around the call (ids in, pooled fp32 on the host out); GPU: sum "
             "of kernel and copy durations; gap = wall - GPU (launch, host staging, sync)", ""]
    for cell in a.cells.split(","):
        mname, dt, dist, bs = cell.split(":")
        bs = int(bs)
        d = models[mname]
        cfg = json.load(open(os.path.join(d, "config.json")))
        batch = bg.make_batch(bg.draw_lengths(dist, bs, rng), cfg["vocab_size"], rng)
        rg = bg.RaggedRunner(d, "cuda", dt, max(1024, (batch.T + 1023) // 1024 * 1024))
        pooling, normalize = bg.st_pooling(d)
        attn = bg.select_attention(torch, "cuda")
        torch.cuda.reset_peak_memory_stats()
        base_mem = torch.cuda.memory_allocated()
        peer = bg.PeerBert(torch, d, cfg, "cuda", bg.torch_dtype(torch, dt), pooling, normalize,
                           attn)
        w_mem = torch.cuda.memory_allocated() - base_mem
        torch.cuda.reset_peak_memory_stats()
        pr = bg.PeerRunner(torch, peer, batch)
        peer_act = torch.cuda.max_memory_allocated() - base_mem - w_mem
        for _ in range(3):
            rg(batch)
            pr(batch)
        sides = {}
        for side, fn in (("ragged", rg), ("peer", pr)):
            wall, kern = profile(torch, fn, batch, a.n)
            by, top = summarize(kern)
            sides[side] = {"wall_ms": wall, "gpu_ms": sum(kern.values()), "by_kind": by,
                           "top": top}
        planned, naive = rg.model.arena_bytes(batch.T, batch.n)
        res["cells"].append({"cell": cell, "tokens": batch.T, "n_seq": batch.n,
                             "max_len": batch.max_len, "sides": sides,
                             "ragged_arena_planned": planned, "ragged_arena_naive": naive,
                             "peer_activation_peak": peer_act})
        r, p = sides["ragged"], sides["peer"]
        lines += [f"## {cell}: {batch.n} sequences, {batch.T} tokens, longest {batch.max_len}", "",
                  "| | ragged | peer |", "|---|---:|---:|",
                  f"| wall ms | {r['wall_ms']:.3f} | {p['wall_ms']:.3f} |",
                  f"| GPU ms | {r['gpu_ms']:.3f} | {p['gpu_ms']:.3f} |",
                  f"| gap ms | {r['wall_ms'] - r['gpu_ms']:.3f} | "
                  f"{p['wall_ms'] - p['gpu_ms']:.3f} |"]
        for k in sorted(set(r["by_kind"]) | set(p["by_kind"])):
            lines.append(f"| {k} ms | {r['by_kind'].get(k, 0):.3f} | {p['by_kind'].get(k, 0):.3f} |")
        lines += [f"| activation MiB | {planned / 2**20:.1f} planned ({naive / 2**20:.1f} one "
                  f"buffer per tensor) | {peer_act / 2**20:.1f} (peak above weights) |", ""]
        for side in ("ragged", "peer"):
            lines.append(f"top kernels, {side}: " + "; ".join(
                f"`{n[:60]}` {ms * 1e3:.1f} us" for n, ms in sides[side]["top"]))
            lines.append("")
        rg.close()
        del pr, peer
        torch.cuda.empty_cache()
    os.makedirs(a.out_dir, exist_ok=True)
    base = os.path.join(a.out_dir, f"trace_{bg.slug(dev)}_{now:%Y%m%d-%H%M}")
    json.dump(res, open(base + ".json", "w"), indent=1)
    open(base + ".md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
