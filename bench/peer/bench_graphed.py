#!/usr/bin/env python3
"""ragged vs a graphed, packed (padding-free) PyTorch BERT, side by side in one process.

The peer is the strongest plain-PyTorch packed encoder we could write, not what a user gets out of
the box (that is bench_vs_torch.py):
  - packed [T, H] tokens, no padding anywhere; Q/K/V fused into one Linear; F.linear (cuBLAS /
    cuBLASLt with the bias epilogue); exact GELU (F.gelu) / tanh GELU (gelu_new) / ReLU as config
    says; LayerNorm eps from the config; token_type row 0 added;
  - attention through torch.nn.attention.varlen.varlen_attn (FlashAttention varlen); when that
    module is absent: torch.ops.aten._flash_attention_forward, else per-sequence SDPA (printed and
    recorded in the results' meta.attention);
  - per batch shape one torch.cuda.CUDAGraph holding: the copy of the ids + cu_seqlens from pinned
    host memory, positions / segment ids computed on the device, the encoder, pooling (mean / cls /
    max from 1_Pooling/config.json) and L2 normalisation (Normalize in modules.json), and the copy
    of the (n_seq, H) float32 result into pinned host memory. A timed call writes the batch into
    the pinned input (numpy -> pinned), replays, synchronizes and returns the host array.
ragged: rg_model_embed through ctypes on the same prebuilt numpy int32 ids + cu_seqlens, into a
preallocated float32 (n_seq, H) array (no Python list conversion on either side).

Cells: model x dtype (fp16, bf16) x lengths (uniform u1_32, u1_128, u1_512, u5_500) x batch size
(1, 8, 32, 128); K = 3 seeded batches per cell, rotated, the same for both sides. Per cell:
median / p90 ms of each side (alternating, warm-up and graph capture not timed), ratio = peer ms /
ragged ms (> 1: ragged faster), tokens/s, and the fraction of the GEMM roofline: FLOPs = layers *
(2*T*H*4H + 2*T*2*H*I + 4*H*sum(L_i^2)), roofline time = FLOPs / dense GEMM rate measured at the
start of the same run (8192^3 torch.matmul, median of 10; the model's own GEMM shapes too), next
to the device-to-device copy bandwidth (1 GiB copy, bytes read + written, median of 10).
Correctness per cell: per-row cosine ragged vs peer, and both vs an fp32 eager run of the peer
(per-sequence SDPA, no TF32); a cell below 0.9999 (fp16) / 0.999 (bf16) vs fp32 is flagged and
the exit status is 1 (after the results are written). Peer memory: torch.cuda.max_memory_allocated
during the cell minus what was allocated before it (weights): the activation + graph-pool peak.

Output, rewritten after every cell (a timeout keeps what was measured):
  OUT_DIR/peer_graphed_<gpu-slug>_<YYYYMMDD-HHMM>[-<tag>].json and .md (bench/results/README.md)

Usage (GPU):
  python3 bench/peer/bench_graphed.py --models minilm=DIR,bert-base=DIR [--dtypes fp16,bf16]
        [--dists u1_32,u1_128,u1_512,u5_500] [--batches 1,8,32,128] [--budget-s 240]
        [--out-dir DIR]
CPU smoke test only (no graphs, no varlen_attn, fp32 on both sides, timings meaningless):
  python3 bench/peer/bench_graphed.py --device cpu --quick --models minilm=DIR --out-dir /tmp/x
"""
import argparse
import ctypes
import datetime
import gc
import inspect
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
import ragged_ctypes as rc  # noqa: E402

DISTS = {"u1_32": (1, 32), "u1_128": (1, 128), "u1_512": (1, 512), "u5_500": (5, 500)}
COS_MIN = {"fp16": 0.9999, "bf16": 0.999, "fp32": 0.99999}
POOL_NAMES = {0: "mean", 1: "cls", 2: "max"}
CLS_ID, SEP_ID = 101, 102


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ------------------------------------------------------------------ workloads (numpy only)

class Batch:
    """One packed batch: ids (T,) int32, cu (n+1,) int32, lens (n,) int64."""

    def __init__(self, seqs_lens, ids, cu):
        self.lens = np.asarray(seqs_lens, np.int64)
        self.ids = np.ascontiguousarray(ids, np.int32)
        self.cu = np.ascontiguousarray(cu, np.int32)
        self.n = int(len(self.lens))
        self.T = int(self.cu[-1])
        self.max_len = int(self.lens.max())
        self.sum_sq = int(np.sum(self.lens * self.lens))


def draw_lengths(dist, n, rng, max_len=512):
    lo, hi = DISTS[dist]
    return np.minimum(rng.integers(lo, hi + 1, size=n), max_len).astype(np.int64)


def make_batch(lens, vocab, rng):
    """[101, random ids in [1000, vocab), 102] per length; a length-1 sequence is just [101]."""
    lens = np.asarray(lens, np.int64)
    cu = np.zeros(len(lens) + 1, np.int64)
    cu[1:] = np.cumsum(lens)
    ids = rng.integers(1000, vocab, size=int(cu[-1])).astype(np.int32)
    ids[cu[:-1]] = CLS_ID
    two = lens >= 2
    ids[(cu[1:] - 1)[two]] = SEP_ID
    return Batch(lens, ids, cu.astype(np.int32))


def make_workloads(dists, batch_sizes, k, seed, vocab, max_len):
    """(dist, bs) -> list of K Batches; one seeded stream, so every model/dtype/side shares them."""
    rng = np.random.default_rng(seed)
    work = {}
    for dist in dists:
        for bs in batch_sizes:
            work[(dist, bs)] = [make_batch(draw_lengths(dist, bs, rng, max_len), vocab, rng)
                                for _ in range(k)]
    return work


def model_flops(layers, H, I, lens):
    """Dense FLOPs of one forward pass: QKV + output projection, FFN, and QK^T + PV."""
    lens = np.asarray(lens, np.int64)
    T = int(lens.sum())
    return float(layers) * (2.0 * T * H * (3 * H + H) + 2.0 * T * 2 * H * I
                            + 4.0 * H * float(np.sum(lens * lens)))


def attention_flops(H, lens):
    lens = np.asarray(lens, np.int64)
    return 4.0 * H * float(np.sum(lens * lens))


def row_cos(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return num / np.maximum(den, 1e-300)


def min_cos(a, b):
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    return float(np.min(row_cos(a, b)))


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, np.float64), q))


def slug(s):
    s = s.lower().replace("nvidia", "").strip()
    out = "".join(c if c.isalnum() else "-" for c in s)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-") or "gpu"


CPU_JUNK = ("(R)", "(TM)", "(tm)", "CPU", "Processor", "Intel", "with Radeon Graphics", "-Core")


def cpu_device(ncpu=None, model=None):
    """A CPU's part of a result's name: cpu_<N>core-<cpu> (cpu_16core-xeon, cpu_2core-amd-epyc),
    N = the CPUs this process may run on (bench/results/README.md, the naming scheme)."""
    if ncpu is None:
        ncpu = len(os.sched_getaffinity(0))
    if model is None:
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f
                              if ln.startswith("model name")), model)
        except OSError:
            pass
    for junk in CPU_JUNK:
        model = model.replace(junk, " ")
    return f"cpu_{ncpu}core-{slug(model.split('@')[0])[:24].strip('-') or 'cpu'}"


def result_base(out_dir, what, device, tag=None, now=None):
    """OUT_DIR/<what>_<device>_<YYYYMMDD-HHMM>[-<tag>], the stamp in UTC, without the extension:
    bench/results' naming scheme (bench/results/README.md). A --tag goes after the stamp."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    name = f"{what}_{device}_{now:%Y%m%d-%H%M}"
    tag = "".join(c if c.isalnum() else "-" for c in (tag or "").lower()).strip("-")
    while "--" in tag:
        tag = tag.replace("--", "-")
    return os.path.join(out_dir, name + (f"-{tag}" if tag else ""))


def commit_id():
    """The commit results name: scripts/commit-id.sh (the carry's COMMIT on a GPU machine, this
    checkout's HEAD when it descends from a stale carry)."""
    try:
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "commit-id.sh"), ROOT],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except Exception:
        pass
    return "unknown"


def gpu_driver():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            return r.stdout.strip().splitlines()[0]
    except Exception:
        pass
    return "unknown"


def st_pooling(model_dir):
    """(pooling, normalize) from the sentence-transformers files, as rg_model_get_info reads them:
    mean when there is no Pooling module; normalize when modules.json lists a Normalize module."""
    pooling, normalize = "mean", False
    mpath = os.path.join(model_dir, "modules.json")
    if not os.path.exists(mpath):
        return pooling, normalize
    mods = json.load(open(mpath))
    for m in mods:
        t = m.get("type", "")
        if t.endswith("Normalize"):
            normalize = True
        if t.endswith("Pooling"):
            pc = os.path.join(model_dir, m.get("path", ""), "config.json")
            if os.path.exists(pc):
                c = json.load(open(pc))
                if c.get("pooling_mode_cls_token"):
                    pooling = "cls"
                elif c.get("pooling_mode_max_tokens"):
                    pooling = "max"
                else:
                    pooling = "mean"
    return pooling, normalize


# ------------------------------------------------------------------ output

def fmt(x, spec, dash="-"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return dash
    return format(x, spec)


def md_notes(res, failures_label):
    """The closing lines of a results file: its notes and its flagged cells, if any."""
    out = []
    if res.get("notes"):
        out += ["Notes: " + "; ".join(res["notes"]), ""]
    if res.get("failures"):
        out += [f"**{failures_label}:** " + "; ".join(res["failures"]), ""]
    return out


def finish(res, base, render, t_start):
    """Write the final results, print the table, and return the exit status (1: a cell flagged)."""
    res["meta"]["wall_s"] = time.monotonic() - t_start
    write_results(res, base, render)
    print()
    print(render(res), flush=True)
    log(f"wrote {base}.json and .md ({res['meta']['wall_s']:.0f} s)")
    if res["failures"]:
        log("FLAGGED: " + "; ".join(res["failures"]))
        return 1
    return 0


def render_md(res):
    m = res["meta"]
    c = res.get("ceilings", {})
    g = c.get("gemm_tflops", {})
    lines = [f"# ragged vs graphed packed PyTorch peer, {m['device_name']}", "",
             f"- date: {m['date']}  commit: `{m['commit']}`  driver: {m['driver']}  torch: "
             f"{m['torch']} (CUDA {m['torch_cuda']})  budget: {m['budget_s']} s"
             f"{'  (quick)' if m['quick'] else ''}",
             f"- peer attention: {m.get('attention', {}).get('mode')} "
             f"({m.get('attention', {}).get('note', '')}); peer: one CUDA graph per batch "
             "(id copy + encoder + pooling + normalize + copy to pinned host)"
             if m["device"] == "cuda" else
             "- **CPU smoke test**: no graphs, per-sequence SDPA, fp32 on both sides; the "
             "timings mean nothing",
             f"- ceilings (measured in this run): copy {fmt(c.get('copy_gbps'), '.0f')} GB/s "
             "(device-to-device, read + write); dense GEMM "
             + ", ".join(f"{k} {fmt(v, '.0f')} TFLOP/s" for k, v in g.items())
             + f" ({c.get('gemm_shape', '')})",
             "- ms = median of the timed calls (token ids on the host in, pooled float32 on the "
             "host out, wall clock); ratio = peer ms / ragged ms (> 1: ragged faster); roof % = "
             "FLOPs / dense GEMM rate / ms (ragged / peer); cos = min per-row cosine ragged vs "
             "fp32 peer / peer vs fp32 peer / ragged vs peer; peer act = peer peak allocation "
             "above its weights (graph pools included)", ""]
    for run in res["runs"]:
        info = run.get("info", {})
        mg = run.get("model_gemm", {})
        lines.append(f"## {run['model']} {run['dtype']} ({info.get('layers')} layers, hidden "
                     f"{info.get('hidden_size')}, intermediate {info.get('intermediate_size')}, "
                     f"{info.get('heads')} heads, pooling {info.get('pooling')}"
                     f"{' + normalize' if info.get('normalize') else ''})")
        lines.append("")
        extra = []
        if mg.get("tflops") is not None:
            extra.append(f"GEMM rate at the model's shapes (T={mg.get('tokens')}): "
                         f"{mg['tflops']:.0f} TFLOP/s")
        if run.get("peer_weights_bytes") is not None:
            extra.append(f"peer weights {run['peer_weights_bytes'] / 2**20:.0f} MiB")
        if run.get("ragged_load_bytes") is not None:
            extra.append(f"ragged weights + arena {run['ragged_load_bytes'] / 2**20:.0f} MiB "
                         f"(max_batch_tokens {info.get('max_batch_tokens')})")
        if extra:
            lines += ["; ".join(extra), ""]
        lines.append("| cell | tokens | ragged ms | peer ms | ratio | ragged Mtok/s | "
                     "peer Mtok/s | roof % ragged / peer | min cos r-fp32 / p-fp32 / r-p | "
                     "peer act MiB | reps |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
        for cc in run["cells"]:
            name = f"{cc['dist']} b{cc['batch']}"
            if cc.get("error"):
                lines.append(f"| {name} | | | | | | | | error: {cc['error'][:80]} | | |")
                continue
            r, p = cc["ragged"], cc["peer"]
            cos = (f"{fmt(cc['min_cos_ragged_fp32'], '.7f')} / {fmt(cc['min_cos_peer_fp32'], '.7f')}"
                   f" / {fmt(cc['min_cos_ragged_peer'], '.7f')}")
            if not cc["pass"]:
                cos += " **FLAG**"
            if not p.get("graphed", True) and m["device"] == "cuda":
                name += " (peer eager)"
            lines.append(
                f"| {name} | {cc['tokens_mean']:.0f} | {r['median_ms']:.3f} | "
                f"{p['median_ms']:.3f} | {cc['ratio']:.2f}x | {r['tokens_per_s'] / 1e6:.2f} | "
                f"{p['tokens_per_s'] / 1e6:.2f} | {fmt(r.get('roofline_pct'), '.1f')} / "
                f"{fmt(p.get('roofline_pct'), '.1f')} | {cos} | "
                f"{fmt(cc.get('peer_act_peak_bytes') and cc['peer_act_peak_bytes'] / 2**20, '.0f')}"
                f" | {r['reps']} |")
        lines.append("")
    return "\n".join(lines + md_notes(res, "Flagged cells"))


def write_results(res, base, render=render_md):
    for path, text in ((base + ".json", json.dumps(res, indent=1)),
                       (base + ".md", render(res) + "\n")):
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


# ------------------------------------------------------------------ torch side

def torch_dtype(torch, name):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def load_weights(model_dir):
    """name -> torch tensor (CPU), with a leading "bert." stripped and gamma/beta renamed."""
    from safetensors import safe_open
    files = []
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        files = [single]
    else:
        idx = json.load(open(os.path.join(model_dir, "model.safetensors.index.json")))
        files = [os.path.join(model_dir, f) for f in sorted(set(idx["weight_map"].values()))]
    out = {}
    for fn in files:
        with safe_open(fn, framework="pt") as f:
            for k in f.keys():
                name = k[5:] if k.startswith("bert.") else k
                if name.endswith(".gamma"):
                    name = name[:-6] + ".weight"
                elif name.endswith(".beta"):
                    name = name[:-5] + ".bias"
                out[name] = f.get_tensor(k)
    return out


def select_attention(torch, device, log_fn=log):
    """Pick the peer's attention: varlen_attn, else aten._flash_attention_forward, else per-sequence
    SDPA. Probes the choice on a small packed batch against a float32 reference."""
    import torch.nn.functional as F
    info = {"mode": "sdpa_seq", "note": "", "varlen_signature": None}
    if device != "cuda":
        info["note"] = "CPU smoke test: per-sequence SDPA"
        return info
    lens = [1, 7, 64, 200]
    nh, D = 4, 64
    T = sum(lens)
    cu_h = np.zeros(len(lens) + 1, np.int32)
    cu_h[1:] = np.cumsum(lens)
    cu = torch.from_numpy(cu_h).to(device)
    g = torch.Generator(device="cpu").manual_seed(1)
    qkv = torch.randn(T, 3 * nh * D, generator=g).to(device, torch.float16)
    q, k, v = qkv.view(T, 3, nh, D).unbind(1)
    ref = torch.empty(T, nh, D, device=device)
    for s in range(len(lens)):
        a, b = int(cu_h[s]), int(cu_h[s + 1])
        ref[a:b] = F.scaled_dot_product_attention(
            q[a:b].float().transpose(0, 1), k[a:b].float().transpose(0, 1),
            v[a:b].float().transpose(0, 1)).transpose(0, 1)
    notes = []

    def check(fn, contiguous):
        qq, kk, vv = (t.contiguous() for t in (q, k, v)) if contiguous else (q, k, v)
        o = fn(qq, kk, vv, cu, max(lens))
        torch.cuda.synchronize()
        err = float((o.float() - ref).abs().max())
        if not err < 2e-2:
            raise RuntimeError(f"max abs error {err:.3g} vs fp32 SDPA")
        return err

    try:
        from torch.nn.attention.varlen import varlen_attn
        sig = inspect.signature(varlen_attn)
        info["varlen_signature"] = str(sig)
        kw = {}
        if "scale" in sig.parameters:
            kw["scale"] = None  # default 1/sqrt(head_dim), BERT's

        def varlen_fn(qq, kk, vv, cu_, m):
            return varlen_attn(qq, kk, vv, cu_, cu_, m, m, **kw)
        for contiguous in (False, True):
            try:
                err = check(varlen_fn, contiguous)
                info.update(mode="varlen", contiguous_qkv=contiguous, probe_max_abs=err,
                            note="torch.nn.attention.varlen.varlen_attn"
                            + (" (q/k/v made contiguous)" if contiguous else
                               " on strided q/k/v views of the fused QKV output"))
                return info
            except Exception as e:  # noqa: BLE001
                notes.append(f"varlen_attn (contiguous={contiguous}) failed: {e}")
    except ImportError as e:
        notes.append(f"torch.nn.attention.varlen unavailable: {e}")

    def flash_fn(qq, kk, vv, cu_, m):
        return torch.ops.aten._flash_attention_forward(qq, kk, vv, cu_, cu_, m, m, 0.0, False,
                                                       False)[0]
    for contiguous in (False, True):
        try:
            err = check(flash_fn, contiguous)
            info.update(mode="flash_fwd", contiguous_qkv=contiguous, probe_max_abs=err,
                        note="FALLBACK torch.ops.aten._flash_attention_forward: "
                        + " | ".join(notes))
            log_fn("NOTE: peer attention falls back to aten._flash_attention_forward: "
                   + " | ".join(notes))
            return info
        except Exception as e:  # noqa: BLE001
            notes.append(f"_flash_attention_forward (contiguous={contiguous}) failed: {e}")
    info["note"] = "FALLBACK per-sequence SDPA (not graphable): " + " | ".join(notes)
    log_fn("NOTE: peer attention falls back to per-sequence SDPA: " + " | ".join(notes))
    return info


class PeerBert:
    """Packed BERT encoder + pooling in plain PyTorch. forward(ids, cu, max_seqlen, n_seq) takes
    device tensors: ids (T,) int32, cu (n_seq+1,) int32; returns (n_seq, H) float32."""

    def __init__(self, torch, model_dir, cfg, device, dtype, pooling, normalize, attn):
        import torch.nn.functional as F
        self.torch, self.F = torch, F
        self.device, self.dtype = device, dtype
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.D = self.H // self.nh
        self.I = cfg["intermediate_size"]
        self.L = cfg["num_hidden_layers"]
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        act = cfg.get("hidden_act", "gelu")
        if act == "gelu":
            self.act = lambda x: F.gelu(x)
        elif act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
            self.act = lambda x: F.gelu(x, approximate="tanh")
        elif act == "relu":
            self.act = F.relu
        else:
            raise ValueError(f"hidden_act {act!r} not supported")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings")
        self.pooling, self.normalize = pooling, normalize
        self.attn = attn
        w = load_weights(model_dir)

        def t(name, dt=dtype):
            if name not in w:
                raise KeyError(f"{model_dir}: weight {name} missing")
            return w[name].to(torch.float32).to(device=device, dtype=dt).contiguous()

        self.word = t("embeddings.word_embeddings.weight")
        pos = w["embeddings.position_embeddings.weight"].float()
        tt = w.get("embeddings.token_type_embeddings.weight")
        type0 = tt[0].float() if tt is not None else torch.zeros(self.H)
        # position + token_type row 0, summed once in fp32
        self.pos_type = (pos + type0[None, :]).to(device=device, dtype=dtype).contiguous()
        self.emb_ln = (t("embeddings.LayerNorm.weight"), t("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(self.L):
            p = f"encoder.layer.{i}."
            qkv_w = torch.cat([w[p + f"attention.self.{n}.weight"].float()
                               for n in ("query", "key", "value")], 0)
            qkv_b = torch.cat([w[p + f"attention.self.{n}.bias"].float()
                               for n in ("query", "key", "value")], 0)
            self.layers.append({
                "qkv_w": qkv_w.to(device=device, dtype=dtype).contiguous(),
                "qkv_b": qkv_b.to(device=device, dtype=dtype).contiguous(),
                "o_w": t(p + "attention.output.dense.weight"),
                "o_b": t(p + "attention.output.dense.bias"),
                "ln1": (t(p + "attention.output.LayerNorm.weight"),
                        t(p + "attention.output.LayerNorm.bias")),
                "i_w": t(p + "intermediate.dense.weight"), "i_b": t(p + "intermediate.dense.bias"),
                "f_w": t(p + "output.dense.weight"), "f_b": t(p + "output.dense.bias"),
                "ln2": (t(p + "output.LayerNorm.weight"), t(p + "output.LayerNorm.bias")),
            })
        del w
        self.scale = 1.0 / math.sqrt(self.D)
        self._varlen_kw = {}
        if attn["mode"] == "varlen":
            from torch.nn.attention.varlen import varlen_attn
            self._varlen = varlen_attn
            if "scale" in inspect.signature(varlen_attn).parameters:
                self._varlen_kw = {"scale": self.scale}

    def attention(self, qkv, cu, max_seqlen, cu_host):
        torch, F = self.torch, self.F
        T = qkv.shape[0]
        q, k, v = qkv.view(T, 3, self.nh, self.D).unbind(1)
        mode = self.attn["mode"]
        if mode in ("varlen", "flash_fwd") and self.attn.get("contiguous_qkv"):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        if mode == "varlen":
            o = self._varlen(q, k, v, cu, cu, max_seqlen, max_seqlen, **self._varlen_kw)
        elif mode == "flash_fwd":
            o = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_seqlen, max_seqlen,
                                                        0.0, False, False, scale=self.scale)[0]
        else:  # per-sequence SDPA (needs the host cu_seqlens; not graphable)
            if cu_host is None:
                raise RuntimeError("per-sequence SDPA needs cu_seqlens on the host")
            o = torch.empty(T, self.nh, self.D, device=qkv.device, dtype=qkv.dtype)
            for s in range(len(cu_host) - 1):
                a, b = int(cu_host[s]), int(cu_host[s + 1])
                o[a:b] = F.scaled_dot_product_attention(
                    q[a:b].transpose(0, 1), k[a:b].transpose(0, 1),
                    v[a:b].transpose(0, 1), scale=self.scale).transpose(0, 1)
        return o.reshape(T, self.H)

    def forward(self, ids, cu, max_seqlen, n_seq, cu_host=None):
        torch, F = self.torch, self.F
        H = self.H
        T = ids.shape[0]
        cu64 = cu.long()
        ar = torch.arange(T, device=ids.device)
        seg = torch.searchsorted(cu64[1:], ar, right=True)  # sequence of each token
        pos = ar - cu64.index_select(0, seg)
        x = F.embedding(ids, self.word) + F.embedding(pos, self.pos_type)
        x = F.layer_norm(x, (H,), *self.emb_ln, self.eps)
        for ly in self.layers:
            qkv = F.linear(x, ly["qkv_w"], ly["qkv_b"])
            a = self.attention(qkv, cu, max_seqlen, cu_host)
            x = F.layer_norm(F.linear(a, ly["o_w"], ly["o_b"]) + x, (H,), *ly["ln1"], self.eps)
            h = self.act(F.linear(x, ly["i_w"], ly["i_b"]))
            x = F.layer_norm(F.linear(h, ly["f_w"], ly["f_b"]) + x, (H,), *ly["ln2"], self.eps)
        xf = x.float()
        if self.pooling == "mean":
            lens = (cu64[1:] - cu64[:-1]).float().clamp(min=1.0)
            p = torch.zeros(n_seq, H, device=x.device, dtype=torch.float32).index_add_(
                0, seg, xf) / lens[:, None]
        elif self.pooling == "cls":
            p = xf.index_select(0, cu64[:-1])
        elif self.pooling == "max":
            p = torch.full((n_seq, H), float("-inf"), device=x.device,
                           dtype=torch.float32).scatter_reduce_(
                0, seg[:, None].expand(T, H), xf, "amax", include_self=True)
        else:
            raise ValueError(self.pooling)
        if self.normalize:
            p = F.normalize(p, p=2.0, dim=1)
        return p

    def gemm_shapes(self):
        """(name, N, K) of the encoder's GEMMs: out = x (T, K) @ W(N, K)^T + b."""
        H, I = self.H, self.I
        return [("qkv", 3 * H, H), ("attn_out", H, H), ("ffn_in", I, H), ("ffn_out", H, I)]


class PeerRunner:
    """The peer for one batch shape: pinned host input [ids | cu_seqlens] and output, the whole
    call captured in one CUDA graph (CUDA) or run eagerly (CPU / capture failure)."""

    def __init__(self, torch, peer, batch, graph=True, pool=None):
        self.torch = torch
        self.peer = peer
        self.T, self.n = batch.T, batch.n
        self.max_len = batch.max_len
        dev = peer.device
        cuda = dev == "cuda"
        self.cuda = cuda
        self.h_in = torch.empty(self.T + self.n + 1, dtype=torch.int32, pin_memory=cuda)
        self.h_in_np = self.h_in.numpy()
        self.d_in = torch.empty(self.T + self.n + 1, dtype=torch.int32, device=dev)
        self.h_out = torch.empty(self.n, peer.H, dtype=torch.float32, pin_memory=cuda)
        self.h_out_np = self.h_out.numpy()
        self.cu_host = None if peer.attn["mode"] != "sdpa_seq" else batch.cu.tolist()
        self.graph = None
        self.error = None
        self.fill(batch)
        if cuda and graph and peer.attn["mode"] != "sdpa_seq":
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        self._step()
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    self._step()
                self.graph = g
            except Exception as e:  # noqa: BLE001
                self.error = f"graph capture failed, peer runs eagerly: {e}"
                self.graph = None
                torch.cuda.synchronize()

    def fill(self, batch):
        self.h_in_np[:self.T] = batch.ids
        self.h_in_np[self.T:] = batch.cu

    def _step(self):
        self.d_in.copy_(self.h_in, non_blocking=True)
        out = self.peer.forward(self.d_in[:self.T], self.d_in[self.T:], self.max_len, self.n,
                                self.cu_host)
        self.h_out.copy_(out, non_blocking=True)

    def __call__(self, batch):
        """numpy in (the batch), numpy (n, H) float32 out; the returned array is reused."""
        self.fill(batch)
        if self.graph is not None:
            self.graph.replay()
        else:
            self._step()
        if self.cuda:
            self.torch.cuda.current_stream().synchronize()
        return self.h_out_np


class RaggedRunner:
    """rg_model_embed on prebuilt int32 arrays into a preallocated float32 array."""

    def __init__(self, model_dir, device, dtype, max_batch_tokens):
        self.model = rc.Model(model_dir, device=device, dtype=dtype,
                              max_batch_tokens=max_batch_tokens)
        self.lib = rc.lib()
        i = self.model.info()
        self.H = i.hidden_size
        self.info = {"hidden_size": i.hidden_size, "layers": i.num_hidden_layers,
                     "heads": i.num_attention_heads, "intermediate_size": i.intermediate_size,
                     "vocab_size": i.vocab_size, "hidden_act": i.hidden_act.decode(),
                     "layer_norm_eps": i.layer_norm_eps,
                     "max_position_embeddings": i.max_position_embeddings,
                     "pooling": POOL_NAMES.get(i.pooling, str(i.pooling)),
                     "normalize": bool(i.normalize), "max_batch_tokens": i.max_batch_tokens}
        self._out = {}

    def __call__(self, batch):
        # keyed by id(batch) with the batch kept alive beside its output: a freed batch's id can
        # be reused by a larger one, which would then be written past a too-small array
        kept = self._out.get(id(batch))
        if kept is None or kept[0] is not batch:
            kept = (batch, np.empty((batch.n, self.H), np.float32))
            self._out[id(batch)] = kept
        out = kept[1]
        st = self.lib.rg_model_embed(self.model._h, batch.ids.ctypes.data, batch.cu.ctypes.data,
                                     batch.n, out.ctypes.data)
        if st != rc.RG_OK:
            raise rc._err(st)
        return out

    def close(self):
        self._out.clear()
        self.model.close()


# ------------------------------------------------------------------ ceilings

def time_fn(torch, device, fn, reps, warm=2):
    """Median ms of fn(): CUDA events per call on CUDA, perf_counter on CPU."""
    for _ in range(warm):
        fn()
    ts = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts)), ts


def measure_ceilings(torch, device, dtypes, quick=False):
    """Device-to-device copy bandwidth (bytes read + written) and dense GEMM rate per dtype."""
    cuda = device == "cuda"
    nbytes = (1 << 30) if cuda else (64 << 20)
    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    a.fill_(1)
    b = torch.empty_like(a)
    ms, ts = time_fn(torch, device, lambda: b.copy_(a), 10)
    res = {"copy_bytes": nbytes, "copy_ms": ms, "copy_gbps": 2.0 * nbytes / (ms / 1e3) / 1e9,
           "copy_ms_all": ts, "gemm_tflops": {}, "gemm_ms": {}}
    del a, b
    n = 8192 if cuda else (512 if quick else 1024)
    res["gemm_shape"] = f"{n}^3 torch.matmul"
    for dt in dtypes:
        tdt = torch_dtype(torch, dt)
        g = torch.Generator(device=device).manual_seed(0)
        A = torch.randn(n, n, device=device, dtype=tdt, generator=g)
        B = torch.randn(n, n, device=device, dtype=tdt, generator=g)
        C = torch.empty(n, n, device=device, dtype=tdt)
        ms, ts = time_fn(torch, device, lambda: torch.matmul(A, B, out=C), 10, warm=3)
        res["gemm_ms"][dt] = ms
        res["gemm_tflops"][dt] = 2.0 * n ** 3 / (ms / 1e3) / 1e12
        del A, B, C
    if cuda:
        torch.cuda.empty_cache()
    return res


def measure_model_gemms(torch, peer, tokens, reps=10):
    """Rate of the encoder's own GEMMs (F.linear with bias) at `tokens` rows."""
    import torch.nn.functional as F
    dev = peer.device
    ly = peer.layers[0]
    x = {"H": torch.randn(tokens, peer.H, device=dev, dtype=peer.dtype),
         "I": torch.randn(tokens, peer.I, device=dev, dtype=peer.dtype)}
    ws = {"qkv": (ly["qkv_w"], ly["qkv_b"], "H"), "attn_out": (ly["o_w"], ly["o_b"], "H"),
          "ffn_in": (ly["i_w"], ly["i_b"], "H"), "ffn_out": (ly["f_w"], ly["f_b"], "I")}
    shapes = []
    tot_f, tot_ms = 0.0, 0.0
    for name, N, K in peer.gemm_shapes():
        w, bias, xin = ws[name]
        ms, _ = time_fn(torch, dev, lambda: F.linear(x[xin], w, bias), reps)
        f = 2.0 * tokens * N * K
        shapes.append({"name": name, "M": tokens, "N": N, "K": K, "ms": ms,
                       "tflops": f / (ms / 1e3) / 1e12})
        tot_f += f
        tot_ms += ms
    del x
    return {"tokens": tokens, "shapes": shapes, "tflops": tot_f / (tot_ms / 1e3) / 1e12}


# ------------------------------------------------------------------ main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="comma-separated NAME=DIR")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: smoke test only (no graphs, fp32)")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--dists", default=",".join(DISTS))
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="wall-clock target for the whole run (sizes the repetitions)")
    ap.add_argument("--k", type=int, default=3, help="pre-generated batches per cell")
    ap.add_argument("--min-reps", type=int, default=6)
    ap.add_argument("--max-reps", type=int, default=300)
    ap.add_argument("--quick", action="store_true",
                    help="a few small cells, K=2, 3 reps (plumbing check)")
    ap.add_argument("--no-graph", action="store_true", help="peer eager (for debugging)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", os.path.join(ROOT, "build",
                                                                             "peer")))
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    ap.add_argument("--seed", type=int, default=20261122)
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    if a.quick:
        if a.batches == "1,8,32,128":
            a.batches = "1,8"
        if a.dists == ",".join(DISTS):
            a.dists = "u1_32,u5_500"
        a.k, a.min_reps, a.max_reps = 2, 3, 3
        a.budget_s = min(a.budget_s, 60.0)

    import torch
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = []
    for item in a.models.split(","):
        name, _, d = item.partition("=")
        if not d or not os.path.exists(os.path.join(d, "config.json")):
            sys.exit(f"--models: {item!r}: no config.json in {d!r}")
        models.append((name, d))
    dtypes = [d for d in a.dtypes.split(",") if d]
    notes = []
    if not cuda:
        if dtypes != ["fp32"]:
            notes.append(f"CPU smoke test: dtypes {dtypes} replaced by fp32 (ragged's CPU "
                         "backend is fp32 only)")
        dtypes = ["fp32"]
    for d in dtypes:
        if d not in COS_MIN:
            sys.exit(f"--dtypes: unknown {d}")
    dists = [d for d in a.dists.split(",") if d]
    for d in dists:
        if d not in DISTS:
            sys.exit(f"--dists: unknown {d} (known: {', '.join(DISTS)})")
    bss = [int(x) for x in a.batches.split(",")]

    cfgs = {name: json.load(open(os.path.join(d, "config.json"))) for name, d in models}
    vocab = min(c["vocab_size"] for c in cfgs.values())
    max_len = min(512, min(c.get("max_position_embeddings", 512) for c in cfgs.values()))
    assert vocab > 1000, "random ids are drawn from [1000, vocab)"

    dev_name = torch.cuda.get_device_name(0) if cuda else (
        platform.processor() or platform.machine() or "cpu")
    now = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(a.out_dir, exist_ok=True)
    base = result_base(a.out_dir, "peer_graphed", slug(dev_name) if cuda else cpu_device(),
                       a.tag if cuda else "-".join(filter(None, ("smoke", a.tag))), now)

    res = {"meta": {
        "date": now.isoformat(timespec="seconds"), "commit": commit_id(), "device": a.device,
        "device_name": dev_name, "driver": gpu_driver() if cuda else "-",
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "numpy": np.__version__,
        "python": platform.python_version(), "budget_s": a.budget_s, "quick": a.quick,
        "k_batches": a.k, "seed": a.seed, "cos_min": COS_MIN, "argv": sys.argv[1:] if argv is
        None else argv, "vocab_for_ids": vocab, "max_len": max_len,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "ragged_cuda_archs": None, "graphs": cuda and not a.no_graph,
    }, "ceilings": {}, "runs": [], "notes": notes, "failures": []}
    try:
        l = rc.lib()
        l.rg_build_cuda_archs.restype = ctypes.c_char_p
        res["meta"]["ragged_cuda_archs"] = l.rg_build_cuda_archs().decode()
    except Exception:
        pass
    log(f"device {dev_name}; torch {torch.__version__}; out {base}.json/.md")
    if not cuda:
        log("CPU SMOKE TEST: no CUDA graphs, no varlen_attn, fp32; timings are meaningless")

    with torch.no_grad():
        # ceilings first, on an idle device
        t0 = time.monotonic()
        res["ceilings"] = measure_ceilings(torch, a.device,
                                           [d for d in ("fp16", "bf16") if cuda] or ["fp32"],
                                           a.quick)
        c = res["ceilings"]
        log(f"ceilings: copy {c['copy_gbps']:.0f} GB/s; GEMM " + ", ".join(
            f"{k} {v:.1f} TFLOP/s" for k, v in c["gemm_tflops"].items())
            + f" ({time.monotonic() - t0:.1f} s)")
        attn = select_attention(torch, a.device)
        res["meta"]["attention"] = attn
        log(f"peer attention: {attn['mode']} ({attn['note']})")
        if attn["mode"] == "sdpa_seq" and cuda:
            notes.append("peer attention is per-sequence SDPA: not graphed")
        write_results(res, base)

        work = make_workloads(dists, bss, a.k, a.seed, vocab, max_len)
        n_total = len(models) * len(dtypes) * len(dists) * len(bss)
        n_done = 0
        need = max(b.T for bl in work.values() for b in bl)
        mbt = max(1024, int(math.ceil(need / 1024.0)) * 1024)

        for mname, mdir in models:
            cfg = cfgs[mname]
            pooling, normalize = st_pooling(mdir)
            # fp32 references: the peer, eager, per-sequence SDPA, no TF32
            t0 = time.monotonic()
            ref_attn = {"mode": "sdpa_seq", "note": "fp32 reference"}
            ref_model = PeerBert(torch, mdir, cfg, a.device, torch.float32, pooling, normalize,
                                 ref_attn)
            refs = {}
            for (dist, bs), bl in work.items():
                for ki, b in enumerate(bl):
                    ids = torch.from_numpy(b.ids).to(a.device)
                    cu = torch.from_numpy(b.cu).to(a.device)
                    refs[(dist, bs, ki)] = ref_model.forward(
                        ids, cu, b.max_len, b.n, b.cu.tolist()).cpu().numpy()
            del ref_model
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            log(f"{mname}: fp32 references for {len(refs)} batches in "
                f"{time.monotonic() - t0:.1f} s (pooling {pooling}, normalize {normalize})")

            for dt in dtypes:
                run = {"model": mname, "model_dir": mdir, "dtype": dt, "cells": []}
                res["runs"].append(run)
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    free0 = torch.cuda.mem_get_info()[0]
                log(f"{mname} {dt}: loading ragged (max_batch_tokens {mbt})")
                rg = RaggedRunner(mdir, a.device, dt, mbt)
                if cuda:
                    run["ragged_load_bytes"] = free0 - torch.cuda.mem_get_info()[0]
                info = dict(rg.info)
                run["info"] = info
                if (info["pooling"], info["normalize"]) != (pooling, normalize):
                    msg = (f"{mname}: pooling mismatch: ragged {info['pooling']}/"
                           f"{info['normalize']}, peer {pooling}/{normalize}")
                    res["failures"].append(msg)
                    log("WARNING " + msg)
                base_alloc = torch.cuda.memory_allocated() if cuda else 0
                peer = PeerBert(torch, mdir, cfg, a.device, torch_dtype(torch, dt), pooling,
                                normalize, attn)
                if cuda:
                    run["peer_weights_bytes"] = torch.cuda.memory_allocated() - base_alloc
                    try:
                        run["model_gemm"] = measure_model_gemms(torch, peer, 8192)
                        log(f"{mname} {dt}: GEMM rate at the model's shapes "
                            f"{run['model_gemm']['tflops']:.0f} TFLOP/s")
                    except Exception as e:  # noqa: BLE001
                        run["model_gemm"] = {"error": str(e)}
                rate = res["ceilings"]["gemm_tflops"].get(dt)
                mrate = run.get("model_gemm", {}).get("tflops")

                for dist in dists:
                    for bs in bss:
                        t_cell = time.monotonic()
                        batches = work[(dist, bs)]
                        cc = {"dist": dist, "batch": bs}
                        try:
                            cc.update(run_cell(torch, a, cuda, rg, peer, batches, refs, dist, bs,
                                               dt, info, rate, mrate, t_start, t_cell,
                                               n_total - n_done))
                        except Exception as e:  # noqa: BLE001
                            cc["error"] = f"{type(e).__name__}: {e}"
                            cc["pass"] = False
                            res["failures"].append(f"{mname} {dt} {dist} b{bs}: {cc['error']}")
                            log(f"ERROR {mname} {dt} {dist} b{bs}: {cc['error']}")
                            if cuda:
                                torch.cuda.synchronize()
                        n_done += 1
                        if not cc.get("error"):
                            if cc.get("peer_note"):
                                notes.append(f"{mname} {dt} {dist} b{bs}: {cc['peer_note']}")
                            if not cc["pass"]:
                                res["failures"].append(
                                    f"{mname} {dt} {dist} b{bs}: min cos vs fp32 ragged "
                                    f"{cc['min_cos_ragged_fp32']:.6f} peer "
                                    f"{cc['min_cos_peer_fp32']:.6f} < {COS_MIN[dt]}")
                            log(f"[{n_done}/{n_total}] {mname} {dt} {dist} b{bs}: "
                                f"T {cc['tokens_mean']:.0f}, ragged "
                                f"{cc['ragged']['median_ms']:.3f} ms, peer "
                                f"{cc['peer']['median_ms']:.3f} ms ({cc['ratio']:.2f}x), "
                                f"roof {fmt(cc['ragged'].get('roofline_pct'), '.1f')}% / "
                                f"{fmt(cc['peer'].get('roofline_pct'), '.1f')}%, cos "
                                f"{cc['min_cos_ragged_fp32']:.6f}/{cc['min_cos_peer_fp32']:.6f}"
                                f"{'' if cc['pass'] else ' FLAG'}, reps {cc['ragged']['reps']}"
                                f" ({time.monotonic() - t_cell:.1f} s)")
                        run["cells"].append(cc)
                        res["meta"]["wall_s"] = time.monotonic() - t_start
                        write_results(res, base)
                del peer
                rg.close()
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()

    return finish(res, base, render_md, t_start)


def run_cell(torch, a, cuda, rg, peer, batches, refs, dist, bs, dt, info, rate, mrate, t_start,
             t_cell, cells_left):
    """One cell: capture the peer's graphs, check both sides, time them alternately."""
    c = {}
    c["tokens_mean"] = float(np.mean([b.T for b in batches]))
    c["tokens"] = [b.T for b in batches]
    c["max_len"] = [b.max_len for b in batches]
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        alloc0 = torch.cuda.memory_allocated()
        pool = torch.cuda.graph_pool_handle()
    else:
        pool = None
    t0 = time.monotonic()
    runners = [PeerRunner(torch, peer, b, graph=cuda and not a.no_graph, pool=pool)
               for b in batches]
    c["capture_s"] = time.monotonic() - t0
    errs = [r.error for r in runners if r.error]
    c["peer"] = {"graphed": all(r.graph is not None for r in runners)}
    if errs:
        c["peer_note"] = errs[0]

    # correctness (and first warm-up)
    cr, cp, crp, mabs = [], [], [], []
    for ki, (b, pr) in enumerate(zip(batches, runners)):
        yp = pr(b).copy()
        yr = rg(b).copy()
        ref = refs[(dist, bs, ki)]
        cr.append(min_cos(yr, ref))
        cp.append(min_cos(yp, ref))
        crp.append(min_cos(yr, yp))
        mabs.append(float(np.max(np.abs(yr.astype(np.float64) - ref))))
    c["min_cos_ragged_fp32"] = float(np.min(cr))
    c["min_cos_peer_fp32"] = float(np.min(cp))
    c["min_cos_ragged_peer"] = float(np.min(crp))
    c["max_abs_ragged_fp32"] = float(np.max(mabs))
    thr = COS_MIN[dt]
    c["cos_threshold"] = thr
    # NaN compares False: a non-finite output fails
    c["pass"] = bool(c["min_cos_ragged_fp32"] >= thr and c["min_cos_peer_fp32"] >= thr)

    # warm-up, timed to size the repetitions
    est = {}
    sides = {"peer": lambda k: runners[k](batches[k]), "ragged": lambda k: rg(batches[k])}
    for side, fn in sides.items():
        t0 = time.perf_counter()
        for _ in range(2):
            for k in range(len(batches)):
                fn(k)
        est[side] = (time.perf_counter() - t0) / (2 * len(batches))
    left = a.budget_s - (time.monotonic() - t_start)
    per_cell = max(left, 0.0) / max(cells_left, 1)
    avail = per_cell - (time.monotonic() - t_cell)
    reps = int(avail / max(est["peer"] + est["ragged"], 1e-6))
    reps = max(a.min_reps, min(a.max_reps, reps))

    times = {"peer": [], "ragged": []}
    order = ("peer", "ragged")
    for i in range(reps):
        k = i % len(batches)
        for side in (order if i % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            sides[side](k)
            times[side].append((time.perf_counter() - t0) * 1e3)
    tok = float(np.mean([batches[i % len(batches)].T for i in range(reps)]))
    flops = float(np.mean([model_flops(info["layers"], info["hidden_size"],
                                       info["intermediate_size"], batches[i % len(batches)].lens)
                           for i in range(reps)]))
    c["flops_mean"] = flops
    c["attention_flop_share"] = float(np.mean(
        [attention_flops(info["hidden_size"], b.lens) * info["layers"] /
         model_flops(info["layers"], info["hidden_size"], info["intermediate_size"], b.lens)
         for b in batches]))
    for side in ("ragged", "peer"):
        ms = times[side]
        med = pct(ms, 50)
        d = c.setdefault(side, {})
        d.update({"reps": reps, "median_ms": med, "p90_ms": pct(ms, 90),
                  "mean_ms": float(np.mean(ms)), "min_ms": float(np.min(ms)),
                  "tokens_per_s": tok / (med / 1e3), "times_ms": [round(x, 4) for x in ms]})
        if rate:
            d["roofline_ms"] = flops / (rate * 1e12) * 1e3
            d["roofline_pct"] = 100.0 * d["roofline_ms"] / med
        if mrate:
            d["roofline_model_gemm_pct"] = 100.0 * flops / (mrate * 1e12) * 1e3 / med
    c["ratio"] = c["peer"]["median_ms"] / c["ragged"]["median_ms"]
    if cuda:
        c["peer_peak_alloc_bytes"] = torch.cuda.max_memory_allocated()
        c["peer_act_peak_bytes"] = torch.cuda.max_memory_allocated() - alloc0
    del runners
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return c


if __name__ == "__main__":
    sys.exit(main())
