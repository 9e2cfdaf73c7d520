#!/usr/bin/env python3
"""DeBERTa-v3 on the GPU (issue 21, item 2): ragged's DeBERTa against ragged's RoBERTa and
DistilBERT at the same shapes, and against Hugging Face transformers' DeBERTa (eager, padded), in
one process, interleaved.

Models: random weights at the public configs' sizes (deberta-v3-base, roberta-base,
distilbert-base-uncased; the shapes tests/gpu/families.py checks against the float64 reference),
written by tests/py/make_tiny.py in fp16 into --model-dir (kept between runs); no network. The
tokenizer files are a synthetic 30522-token vocabulary (ids are fed directly).

Runners (each a callable: token ids on the host in, mean-pooled float32 (n_seq, 768) on the host
out, timed by wall clock):
  deberta          ragged, rg_model_embed on pre-packed int32 ids + cu_seqlens (one call), fp16,
                   the default path (cuBLASLt relative tables + tensor-core attention)
  deberta_old      the same model with RAGGED_DEBERTA_TC=0 (CUDA-core tables and attention: the
                   path the issue measured at 81.5 ms)
  deberta_tables   RAGGED_DEBERTA_TC=tables (cuBLASLt tables, CUDA-core attention)
  deberta_attn     RAGGED_DEBERTA_TC=attn (CUDA-core tables, tensor-core attention)
  roberta          ragged RoBERTa-base, same call
  distilbert       ragged DistilBERT-base, same call
  hf_eager         transformers DebertaV2Model, attn_implementation="eager", fp16: the batch padded
                   to its longest sequence with an attention mask, ids copied to the GPU, forward
                   under inference_mode, mean pooling over the mask in fp32, .cpu()
RAGGED_DEBERTA_TC is read by the library at every call and a CUDA graph keeps the path it was
captured with, so each DeBERTa variant is its own model instance and the variable is set before
each of its calls (load, warm-up and capture included).

Workload: batches of --batches sequences (default 1, 8, 32, 64, 128), lengths uniform in [5, 500]
(seeded), ids [101, random in [1000, 30000), 102]; K = 3 batches per size, rotated. Warm-up: every
runner sees every batch 3 times (ragged: eager + GEMM autotuning, graph capture, replay). Then
rounds: in each round, for each size, every runner (in an order rotated per round) runs the
round's batch once. Reported per (runner, size): median and p90 ms over the rounds. Rounds stop at
--rounds or when --budget-s is spent (at least 3).

Targets (issue 21): ragged DeBERTa <= 1.6 x ragged RoBERTa's time at the same batch, and >= 5 x
faster than HF eager, at every batch; each marked met / not met. Correctness (recorded, and the
exit status is 1 when one fails, after the results are written): min per-row cosine of ragged
DeBERTa's new path against its old path (>= 0.9999) and against HF eager fp16 (>= 0.999), on
every size's first batch, all outputs finite.

Output: OUT_DIR/deberta_<gpu-slug>_<YYYYMMDD-HHMM>.json and .md (UTC; bench/results/README.md;
GPU name, driver, commit, date, versions), rewritten after the run.

Usage (GPU):  python3 bench/peer/deberta_bench.py --out-dir $OUT [--batches 1,8,32,64,128]
CPU smoke test (plumbing only, shrunken models, no HF unless torch is there; timings meaningless):
  python3 bench/peer/deberta_bench.py --device cpu --small --batches 1,4 --rounds 2 --no-hf
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import make_tiny  # noqa: E402
import ragged_ctypes as rc  # noqa: E402
from bench_graphed import (commit_id, cpu_device, gpu_driver, result_base,  # noqa: E402
                           slug)  # (results' naming)

# the public configs' sizes, as tests/gpu/families.py PUBLIC has them; fp16 weights
SPECS = {
    "deberta-v3-base": dict(family="deberta-v2", H=768, heads=12, layers=12, inter=3072,
                            act="gelu", pooling="mean", max_pos=512, vocab=128100,
                            position_buckets=256, pos_att_type=["p2c", "c2p"], dtype="F16"),
    "roberta-base": dict(family="roberta", H=768, heads=12, layers=12, inter=3072, act="gelu",
                         pooling="mean", max_pos=514, pad=1, vocab=50265, dtype="F16"),
    "distilbert-base-uncased": dict(family="distilbert", H=768, heads=12, layers=6, inter=3072,
                                    act="gelu", pooling="mean", max_pos=512, vocab=30522,
                                    dtype="F16"),
}
# ragged runners: name -> (model, RAGGED_DEBERTA_TC value or None: unset)
RAGGED_RUNNERS = {
    "deberta": ("deberta-v3-base", None),
    "deberta_old": ("deberta-v3-base", "0"),
    "deberta_tables": ("deberta-v3-base", "tables"),
    "deberta_attn": ("deberta-v3-base", "attn"),
    "roberta": ("roberta-base", None),
    "distilbert": ("distilbert-base-uncased", None),
}
TARGET_VS_ROBERTA = 1.6
TARGET_VS_HF = 5.0
COS_NEW_OLD, COS_NEW_HF = 0.9999, 0.999
K = 3
CLS_ID, SEP_ID = 101, 102


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def synthetic_vocab(path):
    """BERT uncased's special tokens at their ids and placeholder words: 30522 entries."""
    os.makedirs(path, exist_ok=True)
    t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    with open(os.path.join(path, "vocab.txt"), "w") as f:
        f.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")
    return path


def build_models(model_dir, small):
    """name -> directory; written once (config.json present: kept)."""
    vocab = synthetic_vocab(os.path.join(model_dir, "vocab-synthetic"))
    out = {}
    for i, (name, spec) in enumerate(SPECS.items()):
        spec = dict(spec)
        if small:
            spec.update(H=64, heads=4, layers=2, inter=128)
        d = os.path.join(model_dir, name + ("-small" if small else "") + "-random")
        if not os.path.exists(os.path.join(d, "config.json")):
            t0 = time.time()
            make_tiny.make_tiny(d, spec, vocab, seed=700 + i)
            log(f"wrote {d} ({time.time() - t0:.0f} s)")
        out[name] = d
    return out


class Batch:
    """One packed batch: ids (T,) int32, cu (n+1,) int32, lens (n,)."""

    def __init__(self, lens, rng):
        self.lens = np.asarray(lens, np.int64)
        cu = np.zeros(len(lens) + 1, np.int64)
        cu[1:] = np.cumsum(self.lens)
        ids = rng.integers(1000, 30000, size=int(cu[-1])).astype(np.int32)
        ids[cu[:-1]] = CLS_ID
        ids[(cu[1:] - 1)[self.lens >= 2]] = SEP_ID
        self.ids, self.cu = np.ascontiguousarray(ids), cu.astype(np.int32)
        self.n, self.T, self.max_len = len(lens), int(cu[-1]), int(self.lens.max())
        # the padded form (HF): pad id 0, mask
        self.pad_ids = np.zeros((self.n, self.max_len), np.int64)
        self.mask = np.zeros((self.n, self.max_len), np.int64)
        for s in range(self.n):
            L = int(self.lens[s])
            self.pad_ids[s, :L] = self.ids[cu[s]:cu[s] + L]
            self.mask[s, :L] = 1


def make_workload(batch_sizes, lo, hi, seed):
    rng = np.random.default_rng(seed)
    return {bs: [Batch(rng.integers(lo, hi + 1, size=bs), rng) for _ in range(K)]
            for bs in batch_sizes}


def set_tc_env(value):
    if value is None:
        os.environ.pop("RAGGED_DEBERTA_TC", None)
    else:
        os.environ["RAGGED_DEBERTA_TC"] = value


class RaggedRunner:
    """rg_model_embed on pre-packed int32 arrays into a preallocated float32 array, with
    RAGGED_DEBERTA_TC set as this runner wants it around every call."""

    def __init__(self, model_dir, device, dtype, max_batch_tokens, tc_env):
        self.tc_env = tc_env
        set_tc_env(tc_env)
        try:
            self.model = rc.Model(model_dir, device=device, dtype=dtype,
                                  max_batch_tokens=max_batch_tokens)
        finally:
            set_tc_env(None)
        self.lib = rc.lib()
        self.H = self.model.info().output_dim
        self._out = {}

    def __call__(self, batch):
        out = self._out.get(id(batch))
        if out is None or out[0] is not batch:
            out = (batch, np.empty((batch.n, self.H), np.float32))
            self._out[id(batch)] = out
        set_tc_env(self.tc_env)
        try:
            st = self.lib.rg_model_embed(self.model._h, batch.ids.ctypes.data,
                                         batch.cu.ctypes.data, batch.n, out[1].ctypes.data)
        finally:
            set_tc_env(None)
        if st != rc.RG_OK:
            raise rc._err(st)
        return out[1]

    def close(self):
        self._out.clear()
        self.model.close()


class HFRunner:
    """transformers' DeBERTa-v2 eager, padded, fp16 (fp32 on the CPU), mean pooling."""

    def __init__(self, torch, model_dir, device):
        from transformers import AutoModel
        self.torch, self.device = torch, device
        dt = torch.float16 if device == "cuda" else torch.float32
        try:
            m = AutoModel.from_pretrained(model_dir, dtype=dt, attn_implementation="eager")
        except TypeError:  # transformers < 4.56 names it torch_dtype
            m = AutoModel.from_pretrained(model_dir, torch_dtype=dt, attn_implementation="eager")
        # older transformers may take an unknown dtype= as a config field: cast regardless
        self.model = m.to(device=device, dtype=dt).eval()
        self.dtype = str(next(self.model.parameters()).dtype)

    def __call__(self, batch):
        torch = self.torch
        with torch.inference_mode():
            ids = torch.from_numpy(batch.pad_ids).to(self.device)
            mask = torch.from_numpy(batch.mask).to(self.device)
            h = self.model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            m = mask.unsqueeze(-1).float()
            pooled = (h * m).sum(1) / m.sum(1)
            return pooled.cpu().numpy()


def row_cos_min(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    c = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-300)
    return float(c.min())


def fmt(x, spec, dash="-"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return dash
    return format(x, spec)


def render_md(res):
    m = res["meta"]
    lines = [f"# DeBERTa-v3 on the GPU: ragged vs RoBERTa, DistilBERT and HF eager "
             f"(issue 21), {m['device_name']}", "",
             f"- date: {m['date']}  commit: `{m['commit']}`  driver: {m['driver']}  torch: "
             f"{m.get('torch', '-')}  transformers: {m.get('transformers', '-')}  dtype: "
             f"{m['dtype']}{'  (small models: smoke test)' if m['small'] else ''}",
             f"- models: random weights at {', '.join(SPECS)} sizes (tests/py/make_tiny.py); "
             f"lengths uniform {m['len_lo']}-{m['len_hi']} (seed {m['seed']}), {K} batches per "
             f"size rotated; {m['rounds']} interleaved rounds after 3 warm-up passes; ms = median "
             "wall time of one call (ids on the host in, pooled float32 on the host out)",
             "- ragged: one rg_model_embed per batch (CUDA graphs, the library's default); "
             "deberta = default path, old = RAGGED_DEBERTA_TC=0 (CUDA-core tables + attention), "
             "tables / attn = only that fast path; HF = DebertaV2Model eager, padded, "
             "inference_mode",
             "- peer: HF DebertaV2Model eager, padded (issue 21's comparison). Packed PyTorch in "
             "a CUDA graph, the encoder peer elsewhere, does not exist for DeBERTa (varlen_attn "
             "takes no per-pair position terms); a graph-captured padded HF DeBERTa was not "
             "measured. RoBERTa and DistilBERT are ragged's own models at the same shapes, not "
             "peers.", "",
             f"Targets: DeBERTa <= {TARGET_VS_ROBERTA}x RoBERTa's time: "
             f"**{res['targets']['vs_roberta']}**; DeBERTa >= {TARGET_VS_HF}x faster than HF "
             f"eager: **{res['targets']['vs_hf']}** (at every batch).", ""]
    names = [n for n in ("deberta", "deberta_old", "deberta_tables", "deberta_attn", "roberta",
                         "distilbert", "hf_eager") if n in res["runners"]]
    lines.append("| batch | tokens | " + " | ".join(f"{n} ms" for n in names) +
                 " | DeBERTa / RoBERTa (x) | HF / DeBERTa (x) | old / new (x) | targets |")
    lines.append("|---:|---:|" + "---:|" * len(names) + "---:|---:|---:|---|")
    for c in res["cells"]:
        t = c["ms"]
        met = []
        if c.get("ratio_vs_roberta") is not None:
            met.append(("met" if c["met_vs_roberta"] else "NOT met") + " (RoBERTa)")
        if c.get("speedup_vs_hf") is not None:
            met.append(("met" if c["met_vs_hf"] else "NOT met") + " (HF)")
        lines.append(f"| {c['batch']} | {c['tokens_mean']:.0f} | " +
                     " | ".join(fmt(t.get(n), ".2f") for n in names) +
                     f" | {fmt(c.get('ratio_vs_roberta'), '.2f')}"
                     f" | {fmt(c.get('speedup_vs_hf'), '.1f')}"
                     f" | {fmt(c.get('speedup_vs_old'), '.1f')} | {', '.join(met)} |")
    lines += ["", "p90 ms per runner and batch, and every sample, are in the JSON.", "",
              "Correctness (each size's first batch, min per-row cosine): "
              f"new vs old path >= {COS_NEW_OLD}, new vs HF eager >= {COS_NEW_HF}.", "",
              "| batch | new vs old | new vs tables-only | new vs attn-only | new vs HF | pass |",
              "|---:|---:|---:|---:|---:|---|"]
    for c in res["cells"]:
        k = c["cos"]
        lines.append(f"| {c['batch']} | {fmt(k.get('deberta_old'), '.7f')} | "
                     f"{fmt(k.get('deberta_tables'), '.7f')} | {fmt(k.get('deberta_attn'), '.7f')}"
                     f" | {fmt(k.get('hf_eager'), '.7f')} | {'PASS' if c['cos_pass'] else 'FAIL'} |")
    if res.get("trace"):
        lines += render_trace(res["trace"])
    if res.get("notes"):
        lines += ["", "Notes: " + "; ".join(res["notes"])]
    return "\n".join(lines) + "\n"


def trace_runners(torch, runners, batch, bs, n=10):
    """Kernel time per call of each ragged runner on one batch (bench/peer/trace.py's CUPTI
    profile through torch.profiler: graph replays included), by kind and top kernels."""
    import importlib.util  # bench/peer/trace.py by path (the standard library has a "trace")
    spec = importlib.util.spec_from_file_location("rg_peer_trace", os.path.join(HERE, "trace.py"))
    tr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tr)
    out = {"batch": bs, "tokens": batch.T, "calls": n, "runners": {}}
    for name, fn in runners.items():
        if not isinstance(fn, RaggedRunner):
            continue
        wall, kern = tr.profile(torch, fn, batch, n)
        by, top = tr.summarize(kern)
        out["runners"][name] = {"wall_ms": wall, "gpu_ms": sum(kern.values()), "by_kind": by,
                                "top": [[k, v] for k, v in sorted(kern.items(),
                                                                 key=lambda kv: -kv[1])[:12]]}
        log(f"trace {name} b{bs}: wall {wall:.2f} ms, GPU {sum(kern.values()):.2f} ms; " +
            ", ".join(f"{k} {v:.2f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
    return out


def render_trace(t):
    lines = ["", f"## Kernel trace, batch {t['batch']} ({t['tokens']} tokens), ms per call "
             f"(CUPTI via torch.profiler, {t['calls']} calls)", ""]
    kinds = sorted({k for r in t["runners"].values() for k in r["by_kind"]})
    lines.append("| runner | wall | GPU | " + " | ".join(kinds) + " |")
    lines.append("|---|---:|---:|" + "---:|" * len(kinds))
    for name, r in t["runners"].items():
        lines.append(f"| {name} | {r['wall_ms']:.2f} | {r['gpu_ms']:.2f} | " +
                     " | ".join(f"{r['by_kind'].get(k, 0.0):.2f}" for k in kinds) + " |")
    for name, r in t["runners"].items():
        lines += ["", f"{name}, top kernels: " + "; ".join(
            f"{k[:70]} {v:.3f}" for k, v in r["top"])]
    return lines


def write_results(res, base):
    for path, text in ((base + ".json", json.dumps(res, indent=1)), (base + ".md", render_md(res))):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--len-lo", type=int, default=5)
    ap.add_argument("--len-hi", type=int, default=500)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=150, help="time for the timed rounds")
    ap.add_argument("--runners", default=",".join(list(RAGGED_RUNNERS) + ["hf_eager"]))
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--small", action="store_true", help="shrunken models (a smoke test)")
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "models"))
    ap.add_argument("--trace", type=int, default=0, metavar="BATCH",
                    help="after the rounds, a CUPTI kernel trace (torch.profiler) of the ragged "
                    "runners on this batch size's first batch (CUDA only)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", os.path.join(ROOT, "build")))
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    dtype = "fp16" if a.device == "cuda" else "fp32"
    batch_sizes = [int(x) for x in a.batches.split(",")]
    runners_wanted = a.runners.split(",")
    if a.no_hf and "hf_eager" in runners_wanted:
        runners_wanted.remove("hf_eager")
    unknown = set(runners_wanted) - set(RAGGED_RUNNERS) - {"hf_eager"}
    if unknown:
        ap.error(f"unknown runners {sorted(unknown)}")
    os.makedirs(a.out_dir, exist_ok=True)

    torch = None
    if "hf_eager" in runners_wanted or a.device == "cuda":
        import torch  # noqa: F811  (the GPU machine has it; --no-hf on the CPU does without)
    dev_name = (torch.cuda.get_device_name(0) if a.device == "cuda"
                else platform.processor() or platform.machine())
    meta = {"device": a.device, "device_name": dev_name, "driver": gpu_driver()
            if a.device == "cuda" else "-", "commit": commit_id(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "dtype": dtype, "small": a.small, "len_lo": a.len_lo, "len_hi": a.len_hi,
            "seed": a.seed, "batches": batch_sizes, "k": K, "python": platform.python_version()}
    if torch is not None:
        meta["torch"] = torch.__version__
    if "hf_eager" in runners_wanted:
        import transformers
        meta["transformers"] = transformers.__version__
    base = result_base(a.out_dir, "deberta",
                       slug(dev_name) if a.device == "cuda" else cpu_device())
    log(f"device {dev_name}, commit {meta['commit']}, results {base}.json/.md")

    dirs = build_models(a.model_dir, a.small)
    work = make_workload(batch_sizes, a.len_lo, a.len_hi, a.seed)
    max_tokens = max(b.T for bs in work.values() for b in bs)
    runners = {}
    for name in runners_wanted:
        t0 = time.time()
        if name == "hf_eager":
            runners[name] = HFRunner(torch, dirs["deberta-v3-base"], a.device)
            meta["hf_dtype"] = runners[name].dtype
        else:
            model, env = RAGGED_RUNNERS[name]
            runners[name] = RaggedRunner(dirs[model], a.device, dtype, max_tokens, env)
        log(f"loaded {name} ({time.time() - t0:.1f} s)")
    res = {"meta": meta, "runners": list(runners), "cells": [], "samples": {}, "notes": []}

    # warm-up (ragged: eager + autotune, capture, replay) and the outputs for the cosines
    first = {}
    for name, fn in runners.items():
        t0 = time.time()
        for rep in range(3):
            for bs in batch_sizes:
                for k, b in enumerate(work[bs]):
                    out = fn(b)
                    if rep == 0 and k == 0:
                        first[(name, bs)] = np.array(out, copy=True)
        log(f"warmed up {name} ({time.time() - t0:.1f} s)")

    # timed rounds, interleaved
    samples = {(n, bs): [] for n in runners for bs in batch_sizes}
    names = list(runners)
    t_rounds = time.monotonic()
    rounds = 0
    while rounds < a.rounds and (rounds < 3 or time.monotonic() - t_rounds < a.budget_s):
        for bs in batch_sizes:
            b = work[bs][rounds % K]
            order = names[rounds % len(names):] + names[:rounds % len(names)]
            for n in order:
                if torch is not None and a.device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                runners[n](b)
                samples[(n, bs)].append((time.perf_counter() - t0) * 1e3)
        rounds += 1
    meta["rounds"] = rounds
    log(f"{rounds} rounds in {time.monotonic() - t_rounds:.0f} s")

    vs_rob, vs_hf, cos_ok = [], [], True
    for bs in batch_sizes:
        cell = {"batch": bs, "tokens_mean": float(np.mean([b.T for b in work[bs]])),
                "tokens": [b.T for b in work[bs]], "max_len": [b.max_len for b in work[bs]],
                "ms": {}, "p90_ms": {}, "cos": {}}
        for n in runners:
            xs = samples[(n, bs)]
            cell["ms"][n] = float(np.median(xs))
            cell["p90_ms"][n] = float(np.percentile(xs, 90))
            res["samples"][f"{n}/b{bs}"] = xs
        ms = cell["ms"]
        if "deberta" in ms and "roberta" in ms:
            cell["ratio_vs_roberta"] = ms["deberta"] / ms["roberta"]
            cell["met_vs_roberta"] = cell["ratio_vs_roberta"] <= TARGET_VS_ROBERTA
            vs_rob.append(cell["met_vs_roberta"])
        if "deberta" in ms and "hf_eager" in ms:
            cell["speedup_vs_hf"] = ms["hf_eager"] / ms["deberta"]
            cell["met_vs_hf"] = cell["speedup_vs_hf"] >= TARGET_VS_HF
            vs_hf.append(cell["met_vs_hf"])
        if "deberta" in ms and "deberta_old" in ms:
            cell["speedup_vs_old"] = ms["deberta_old"] / ms["deberta"]
        ok = True
        if "deberta" in runners:
            new = first[("deberta", bs)]
            ok = bool(np.isfinite(new).all())
            for other, lim in (("deberta_old", COS_NEW_OLD), ("deberta_tables", COS_NEW_OLD),
                               ("deberta_attn", COS_NEW_OLD), ("hf_eager", COS_NEW_HF)):
                if other in runners:
                    c = row_cos_min(new, first[(other, bs)])
                    cell["cos"][other] = c
                    ok = ok and c >= lim  # NaN fails
        cell["cos_pass"] = ok
        cos_ok = cos_ok and ok
        res["cells"].append(cell)
    res["targets"] = {
        "vs_roberta": "-" if not vs_rob else "met" if all(vs_rob) else "not met",
        "vs_hf": "-" if not vs_hf else "met" if all(vs_hf) else "not met"}
    if a.device != "cuda":
        res["notes"].append("CPU smoke test: the timings mean nothing")
    if a.trace and a.device == "cuda" and a.trace in work:
        res["trace"] = trace_runners(torch, runners, work[a.trace][0], a.trace)
    meta["wall_s"] = time.monotonic() - t_start
    write_results(res, base)
    print()
    print(render_md(res), flush=True)
    log(f"wrote {base}.json and .md ({meta['wall_s']:.0f} s)")
    for r in runners.values():
        if isinstance(r, RaggedRunner):
            r.close()
    if not cos_ok:
        log("CORRECTNESS CHECK FAILED (see the cosine table)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
