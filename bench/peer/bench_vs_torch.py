#!/usr/bin/env python3
"""Side-by-side: ragged (packed, padding-free) vs PyTorch + HF transformers (padded, SDPA) on the
same device, the same weights and the same token batches, end to end (token ids in, pooled
float32 embeddings on the host out).

PyTorch path (what a PyTorch user writes): pad the batch to its longest sequence on the host,
attention_mask, .to(device), BertModel (attn_implementation="sdpa", add_pooling_layer=False)
forward under torch.inference_mode(), pool as the model's sentence-transformers config says (MEAN
over the mask / CLS / MAX, in fp32), L2-normalize when the model has a Normalize module, .cpu().
ragged path: tests/py/ragged_ctypes.py Model.embed_ids(seqs, H) -> rg_model_embed (packed tokens,
H2D + D2H copies included).

Both load the same model.safetensors (HF through from_pretrained, with a check that no weight is
missing). Correctness, per row: cosine(ragged(dtype), torch fp32) must be >= 0.99999 for fp32 and
>= 0.999 for fp16/bf16; the minimum per config is recorded and the exit status is 1 when a config
falls below (after the results are written). cosine(ragged(dtype), torch(dtype)) is recorded too.

Timing per config (model x dtype x length distribution x batch size): K pre-generated batches,
rotated; warm-up, then N timed repetitions per side (N from --budget-s), each bracketed by
torch.cuda.synchronize(); median / p90 ms per batch, real tokens/s, speedup = torch / ragged
median, padding ratio = padded tokens / real tokens. Memory: torch peak
torch.cuda.max_memory_allocated (and reserved) per config; ragged: device memory delta
(cudaMemGetInfo through torch.cuda.mem_get_info) from before its load to after its largest batch,
and rg_model_memory (device-wide used bytes) - ragged's activation arena is fixed at load
(max_batch_tokens), so its footprint does not vary per batch.

Results are rewritten after every config (a timeout keeps what was measured):
  OUT_DIR/peer_<gpu-slug>_<YYYYMMDD-HHMM>[-<tag>].json and .md (bench/results/README.md).

Usage:
  python3 bench/peer/bench_vs_torch.py --models minilm=DIR,bert-base=DIR [--device cuda]
         [--dtypes fp32,fp16] [--budget-s 200] [--out-dir DIR] [--quick]
  CPU smoke test: --device cpu --quick --models minilm=DIR --dtypes fp32
"""
import argparse
import ctypes
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
import ragged_ctypes as rc  # noqa: E402

COS_MIN = {"fp32": 0.99999, "fp16": 0.999, "bf16": 0.99}
POOL_NAMES = {0: "mean", 1: "cls", 2: "max"}


def ragged_info(model):
    i = model.info()
    return {"hidden_size": i.hidden_size, "layers": i.num_hidden_layers,
            "heads": i.num_attention_heads, "vocab_size": i.vocab_size,
            "max_position_embeddings": i.max_position_embeddings,
            "pooling": POOL_NAMES.get(i.pooling, str(i.pooling)), "normalize": bool(i.normalize),
            "max_batch_tokens": i.max_batch_tokens}


def ragged_memory(model):
    try:
        return model.memory()
    except rc.RaggedError:
        return None, None


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ---------------------------------------------------------------- workloads

def draw_lengths(dist, n, rng, max_len):
    if dist == "u5_500":
        lens = rng.integers(5, 501, size=n)
    elif dist == "u2_100":
        lens = rng.integers(2, 101, size=n)
    elif dist == "n20_20":
        lens = np.clip(np.rint(rng.normal(20, 20, size=n)), 3, 100).astype(np.int64)
    else:
        raise ValueError(dist)
    return np.minimum(lens, max_len)


def make_batch(lens, vocab, rng):
    """[101, random ids in [1000, vocab), 102] per length (lengths >= 2)."""
    seqs = []
    for n in lens:
        mid = rng.integers(1000, vocab, size=int(n) - 2).tolist()
        seqs.append([101] + mid + [102])
    return seqs


# ---------------------------------------------------------------- torch side

class TorchSide:
    def __init__(self, model_dir, device, dtype, pooling, normalize):
        import torch
        from transformers import BertModel
        self.torch = torch
        self.device = device
        tdt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        m, info = BertModel.from_pretrained(model_dir, dtype=tdt, attn_implementation="sdpa",
                                            add_pooling_layer=False, output_loading_info=True)
        self.loading = {k: sorted(v) if isinstance(v, (set, list)) else str(v)
                        for k, v in info.items()}
        if info.get("missing_keys") or info.get("mismatched_keys"):
            raise RuntimeError(f"HF load of {model_dir}: missing {info.get('missing_keys')} "
                               f"mismatched {info.get('mismatched_keys')}")
        self.model = m.to(device).eval()
        self.attn = getattr(m.config, "_attn_implementation", None)
        self.pooling = pooling
        self.normalize = normalize

    def embed(self, seqs):
        """list of token-id lists -> (n, H) float32 numpy, host; padded batch, as a user does."""
        torch = self.torch
        n = len(seqs)
        L = max(len(s) for s in seqs)
        ids = np.zeros((n, L), np.int64)
        mask = np.zeros((n, L), np.int64)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1
        with torch.inference_mode():
            ids_t = torch.from_numpy(ids).to(self.device)
            mask_t = torch.from_numpy(mask).to(self.device)
            h = self.model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state.float()
            if self.pooling == "mean":
                mf = mask_t.unsqueeze(-1).float()
                p = (h * mf).sum(1) / mf.sum(1).clamp(min=1e-9)
            elif self.pooling == "cls":
                p = h[:, 0]
            elif self.pooling == "max":
                p = h.masked_fill(mask_t.unsqueeze(-1) == 0, float("-inf")).max(1).values
            else:
                raise ValueError(self.pooling)
            if self.normalize:
                p = torch.nn.functional.normalize(p, p=2, dim=1)
            return p.cpu().numpy()


# ---------------------------------------------------------------- helpers

# shared with the graphed side-by-side benchmark
from bench_graphed import (commit_id, cpu_device, md_notes, pct,  # noqa: E402,F401
                           result_base, row_cos, slug)


def fmt_mib(b):
    return "-" if b is None else f"{b / 2**20:.0f}"


def render_md(res):
    meta = res["meta"]
    lines = [f"# ragged vs PyTorch {meta['torch']} + transformers {meta['transformers']}"
             f" (SDPA), {meta['device_name']}", "",
             f"- date: {meta['date']}  commit: `{meta['commit']}`  device: {meta['device']}"
             f"  budget: {meta['budget_s']} s{'  (quick)' if meta['quick'] else ''}",
             f"- torch fp32 matmul precision: {meta.get('float32_matmul_precision')}; ragged fp32"
             " GEMMs: CUBLAS_COMPUTE_32F (no TF32)",
             "- end to end, token ids in -> pooled float32 on the host out; torch pads to the "
             "batch's longest sequence (attention_mask), ragged packs. ms = median of the timed "
             "repetitions (p90 in the JSON); speedup = torch ms / ragged ms; pad = padded / real "
             "tokens; cos = min per-row cosine(ragged, torch fp32) (vs torch same dtype in "
             "brackets)",
             "- memory (MiB): torch = max_memory_allocated during the config; ragged = device "
             "memory delta from before load to after its largest batch (fixed arena)", ""]
    for run in res["runs"]:
        lines.append(f"## {run['model']} {run['dtype']} ({run['info']['layers']} layers, "
                     f"hidden {run['info']['hidden_size']}, pooling {run['info']['pooling']}"
                     f"{' + normalize' if run['info']['normalize'] else ''})")
        lines.append("")
        rm = run.get("ragged_mem", {})
        lines.append(f"ragged: max_batch_tokens {run['info']['max_batch_tokens']}, device delta "
                     f"{fmt_mib(rm.get('delta_bytes'))} MiB (weights+arena after load "
                     f"{fmt_mib(rm.get('load_delta_bytes'))} MiB); torch weights "
                     f"{fmt_mib(run.get('torch_weights_bytes'))} MiB")
        lines.append("")
        lines.append("| dist | batch | real tok | pad | torch ms | ragged ms | speedup | "
                     "torch tok/s | ragged tok/s | torch peak MiB | min cos | reps |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
        for c in run["configs"]:
            if c.get("skipped"):
                lines.append(f"| {c['dist']} | {c['batch']} | | | skipped: {c['skipped']} "
                             "| | | | | | | |")
                continue
            t, r = c["torch"], c["ragged"]
            cos = f"{c['min_cos_vs_torch_fp32']:.7f} ({c['min_cos_vs_torch_same']:.7f})"
            if not c["pass"]:
                cos += " FAIL"
            lines.append(
                f"| {c['dist']} | {c['batch']} | {c['real_tokens_mean']:.0f} | "
                f"{c['padding_ratio']:.2f} | {t['median_ms']:.2f} | {r['median_ms']:.2f} | "
                f"{c['speedup']:.2f}x | {t['tokens_per_s']:.0f} | {r['tokens_per_s']:.0f} | "
                f"{fmt_mib(c.get('torch_peak_alloc_bytes'))} | {cos} | "
                f"{t['reps']}/{r['reps']} |")
        lines.append("")
    return "\n".join(lines + md_notes({"failures": res.get("failures")}, "Correctness failures"))


def write_results(res, json_path, md_path):
    with open(json_path + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.replace(json_path + ".tmp", json_path)
    with open(md_path + ".tmp", "w") as f:
        f.write(render_md(res) + "\n")
    os.replace(md_path + ".tmp", md_path)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True,
                    help="comma-separated NAME=DIR (e.g. minilm=DIR,bert-base=DIR)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtypes", default="fp32,fp16",
                    help="comma-separated; fp32 is run first (it is the cosine reference)")
    ap.add_argument("--dists", default="u5_500,u2_100,n20_20")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="wall-clock target for the whole run; shrinks repetitions")
    ap.add_argument("--max-padded-tokens", type=int, default=70000,
                    help="skip a config whose padded batch exceeds this")
    ap.add_argument("--k", type=int, default=4, help="pre-generated batches per config")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=40)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: batches 1,8, K=2, 2 reps, small budget")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", os.path.join(ROOT, "build",
                                                                             "peer")))
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    ap.add_argument("--seed", type=int, default=20261121)
    a = ap.parse_args()
    t_start = time.monotonic()
    if a.quick:
        a.batches = "1,8" if a.batches == "1,8,32,128" else a.batches
        a.k, a.min_reps, a.max_reps = 2, 2, 3
        a.budget_s = min(a.budget_s, 60.0)

    import torch
    import transformers
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    models = []
    for item in a.models.split(","):
        name, _, d = item.partition("=")
        if not d or not os.path.exists(os.path.join(d, "config.json")):
            sys.exit(f"--models: {item!r}: no config.json in {d!r}")
        models.append((name, d))
    dtypes = a.dtypes.split(",")
    if "fp32" in dtypes:
        dtypes = ["fp32"] + [d for d in dtypes if d != "fp32"]
    else:
        sys.exit("--dtypes must include fp32 (the cosine reference)")
    dists = a.dists.split(",")
    bss = [int(x) for x in a.batches.split(",")]

    dev_name = torch.cuda.get_device_name(0) if a.device == "cuda" else (
        platform.processor() or platform.machine() or "cpu")
    now = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(a.out_dir, exist_ok=True)
    base = result_base(a.out_dir, "peer", slug(dev_name) if a.device == "cuda" else cpu_device(),
                       a.tag, now)
    json_path, md_path = base + ".json", base + ".md"

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    res = {"meta": {
        "date": now.isoformat(timespec="seconds"), "commit": commit_id(), "device": a.device,
        "device_name": dev_name, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__, "numpy": np.__version__,
        "python": platform.python_version(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch_threads": torch.get_num_threads(), "budget_s": a.budget_s, "quick": a.quick,
        "k_batches": a.k, "seed": a.seed, "attn_implementation": "sdpa",
        "cos_min": COS_MIN, "argv": sys.argv[1:],
        "ragged_cuda_archs": None,
    }, "runs": [], "failures": []}
    try:
        l = rc.lib()
        l.rg_build_cuda_archs.restype = ctypes.c_char_p
        res["meta"]["ragged_cuda_archs"] = l.rg_build_cuda_archs().decode()
    except Exception:
        pass
    log(f"device {dev_name}; torch {torch.__version__} transformers {transformers.__version__};"
        f" out {json_path}")

    # workloads: the same batches for every model/dtype/side
    rng = np.random.default_rng(a.seed)
    work = {}
    for dist in dists:
        for bs in bss:
            bl = []
            for _ in range(a.k):
                lens = draw_lengths(dist, bs, rng, 512)
                bl.append(make_batch(lens, 30522, rng))
            work[(dist, bs)] = bl
    configs = [(m, dt, dist, bs) for m, _ in models for dt in dtypes for dist in dists
               for bs in bss]
    n_total = len(configs)
    n_done = 0
    ref = {}  # (model, dist, bs, k) -> torch fp32 pooled output

    for mname, mdir in models:
        cfg = json.load(open(os.path.join(mdir, "config.json")))
        vocab = cfg["vocab_size"]
        assert vocab > 1000, "random ids are drawn from [1000, vocab)"
        for dt in dtypes:
            run = {"model": mname, "model_dir": mdir, "dtype": dt, "configs": []}
            res["runs"].append(run)
            keep = []
            for dist in dists:
                for bs in bss:
                    padded = max(bs * max(len(s) for s in b) for b in work[(dist, bs)])
                    if padded > a.max_padded_tokens:
                        run["configs"].append({"dist": dist, "batch": bs, "skipped":
                                               f"padded {padded} > {a.max_padded_tokens}"})
                        n_done += 1
                    else:
                        keep.append((dist, bs))
            if not keep:
                run["info"] = {"layers": cfg["num_hidden_layers"], "hidden_size":
                               cfg["hidden_size"], "pooling": "?", "normalize": False,
                               "max_batch_tokens": 0}
                continue
            need = max(sum(len(s) for s in b) for k_ in keep for b in work[k_])
            mbt = max(1024, int(math.ceil(need / 256.0)) * 256)

            # ragged first, alone on the device: its memory is measured around load + largest batch
            if a.device == "cuda":
                torch.cuda.empty_cache()
                sync()
                free0, _ = torch.cuda.mem_get_info()
            log(f"{mname} {dt}: loading ragged (max_batch_tokens {mbt})")
            rg = rc.Model(mdir, device=a.device, dtype=dt, max_batch_tokens=mbt)
            info = ragged_info(rg)
            run["info"] = info
            H = info["hidden_size"]
            rmem = {}
            if a.device == "cuda":
                free1, _ = torch.cuda.mem_get_info()
                big = max(keep, key=lambda k_: sum(len(s) for s in work[k_][0]))
                rg.embed_ids(work[big][0], H)
                free2, _ = torch.cuda.mem_get_info()
                rmem = {"load_delta_bytes": free0 - free1, "delta_bytes": free0 - free2}
            used, total = ragged_memory(rg)
            rmem.update({"rg_model_memory_used_bytes": used, "rg_model_memory_total_bytes": total})
            run["ragged_mem"] = rmem

            log(f"{mname} {dt}: loading HF BertModel (sdpa)")
            if a.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
                base_alloc = torch.cuda.memory_allocated()
            ts = TorchSide(mdir, a.device, dt, info["pooling"], info["normalize"])
            run["hf_loading_info"] = ts.loading
            run["torch_attn_implementation"] = ts.attn
            if a.device == "cuda":
                run["torch_weights_bytes"] = torch.cuda.memory_allocated() - base_alloc

            for dist, bs in keep:
                batches = work[(dist, bs)]
                c = {"dist": dist, "batch": bs}
                real = [sum(len(s) for s in b) for b in batches]
                padded = [len(b) * max(len(s) for s in b) for b in batches]
                c["real_tokens_mean"] = float(np.mean(real))
                c["padded_tokens_mean"] = float(np.mean(padded))
                c["padding_ratio"] = float(np.sum(padded) / np.sum(real))
                if a.device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                # correctness (and first warm-up): every batch once per side
                t0 = time.monotonic()
                cos_ref, cos_same, maxabs = [], [], []
                for ki, b in enumerate(batches):
                    yt = ts.embed(b)
                    yr = rg.embed_ids(b, H)
                    if dt == "fp32":
                        ref[(mname, dist, bs, ki)] = yt
                    yref = ref.get((mname, dist, bs, ki))
                    if yref is None:  # fp32 run skipped this config
                        yref = yt
                    ok_fin = bool(np.isfinite(yr).all() and np.isfinite(yt).all())
                    cos_ref.append(float(np.min(row_cos(yr, yref))) if ok_fin else float("nan"))
                    cos_same.append(float(np.min(row_cos(yr, yt))) if ok_fin else float("nan"))
                    maxabs.append(float(np.max(np.abs(yr - yref))))
                t_first = (time.monotonic() - t0) / (2 * len(batches))
                c["min_cos_vs_torch_fp32"] = min(cos_ref)
                c["min_cos_vs_torch_same"] = min(cos_same)
                c["max_abs_vs_torch_fp32"] = max(maxabs)
                thr = COS_MIN.get(dt, 0.999)
                c["cos_threshold"] = thr
                c["pass"] = bool(c["min_cos_vs_torch_fp32"] >= thr)  # NaN fails
                if not c["pass"]:
                    res["failures"].append(f"{mname} {dt} {dist} bs{bs}: min cos "
                                           f"{c['min_cos_vs_torch_fp32']:.6f} < {thr}")

                # second warm-up round, timed to size the repetitions
                est = {}
                for side, fn in (("torch", ts.embed), ("ragged", lambda b: rg.embed_ids(b, H))):
                    sync()
                    t0 = time.perf_counter()
                    for b in batches:
                        fn(b)
                    sync()
                    est[side] = (time.perf_counter() - t0) / len(batches)
                left = a.budget_s - (time.monotonic() - t_start)
                per_cfg = max(left, 0.0) / max(n_total - n_done, 1)
                reps = int(per_cfg / max(est["torch"] + est["ragged"], 1e-6))
                reps = max(a.min_reps, min(a.max_reps, reps))

                # timed: alternate the two sides per repetition, rotating the batches
                times = {"torch": [], "ragged": []}
                for i in range(reps):
                    b = batches[i % len(batches)]
                    order = (("torch", ts.embed), ("ragged", lambda x: rg.embed_ids(x, H)))
                    if i % 2:
                        order = order[::-1]
                    for side, fn in order:
                        sync()
                        t0 = time.perf_counter()
                        fn(b)
                        sync()
                        times[side].append((time.perf_counter() - t0) * 1e3)
                tok = float(np.mean([real[i % len(batches)] for i in range(reps)]))
                for side in ("torch", "ragged"):
                    ms = times[side]
                    c[side] = {"reps": reps, "median_ms": pct(ms, 50), "p90_ms": pct(ms, 90),
                               "mean_ms": float(np.mean(ms)), "min_ms": float(np.min(ms)),
                               "tokens_per_s": tok / (pct(ms, 50) / 1e3), "times_ms": ms}
                c["speedup"] = c["torch"]["median_ms"] / c["ragged"]["median_ms"]
                if a.device == "cuda":
                    c["torch_peak_alloc_bytes"] = torch.cuda.max_memory_allocated()
                    c["torch_peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
                c["first_call_s"] = t_first
                run["configs"].append(c)
                run["configs"].sort(key=lambda x: (dists.index(x["dist"]), bss.index(x["batch"])))
                n_done += 1
                log(f"[{n_done}/{n_total}] {mname} {dt} {dist} bs{bs}: torch "
                    f"{c['torch']['median_ms']:.2f} ms, ragged {c['ragged']['median_ms']:.2f} ms"
                    f" ({c['speedup']:.2f}x, pad {c['padding_ratio']:.2f}, reps {reps}); min cos"
                    f" {c['min_cos_vs_torch_fp32']:.6f}{'' if c['pass'] else ' FAIL'}")
                write_results(res, json_path, md_path)

            del ts
            gc.collect()
            rg.close()
            if a.device == "cuda":
                torch.cuda.empty_cache()
            write_results(res, json_path, md_path)

    res["meta"]["wall_s"] = time.monotonic() - t_start
    write_results(res, json_path, md_path)
    print()
    print(render_md(res), flush=True)
    log(f"wrote {json_path} and {md_path} ({res['meta']['wall_s']:.0f} s)")
    if res["failures"]:
        log("CORRECTNESS FAILURES: " + "; ".join(res["failures"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
