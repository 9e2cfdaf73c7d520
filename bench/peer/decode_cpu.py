#!/usr/bin/env python3
"""CPU greedy decode, ragged against HF transformers `generate`, each runtime alone in its own
process on the same cores (issue 19: "CPU: SmolLM2-135M fp32 greedy at least 2x HF generate
(static cache) on the same cores, each in its own process").

Models: random weights (seed 0) at SmolLM2-135M's shape (Llama: 30 layers, hidden 576, 9 heads,
3 KV heads, intermediate 1536, vocab 49152, tied embeddings) and GPT-2 small's, built with
transformers and saved once as HF directories (safetensors + config.json) that both runtimes load.

Cells: model x threads (--threads, default 1,2) x batch (--batches, default 1,4); prompts of
PROMPT = 32 random ids, --new (default 64) new tokens, greedy, fp32, no EOS (every run makes all
its tokens). Runtimes, each in a child process (threads of two runtimes in one process fight):
  - ragged: include/ragged.h's step API through tests/py/ragged_ctypes.py: one packed prefill step
    of the batch, then one decode step per token, the greedy choice on the "device"
    (rg_model_step's greedy path: only ids cross back); paged KV cache, blocks of 16, bookkeeping in
    Python (tests/gpu/dec_util.Seqs) and part of the time, as a server's loop would be;
    RAGGED_NUM_THREADS = n.
  - hf_static: `model.generate(ids, do_sample=False, cache_implementation="static")`,
    torch.set_num_threads(n), set_num_interop_threads(1), under torch.inference_mode().
  - hf_dynamic: the same with the default dynamic cache.
  Every child: load, one warm-up run, then --reps timed runs; the parent runs the three runtimes of
  a cell one after another, --rounds times (the host is shared: rounds interleave the runtimes so
  a burst of load hits them alike); a cell's time is the median over every timed run.
  tok/s = batch * new / seconds (prefill included, as issue 19's tables). ragged also reports its
  prefill and mean decode-step times. The greedy ids of ragged and hf_static are compared (same
  weights, fp32): the report gives the fraction of identical ids per cell (random weights give
  near-ties that fp32 rounding can flip, after which the two continuations diverge).

Napkin math (in the report): one decode step reads every weight once (fp32: 4 bytes x params,
the tied LM head once) plus the KV cache; the floor is bytes / bandwidth. Bandwidth is measured in
the same run in its own child per thread count: NumPy copies of 256 MiB split over the threads
(read + write bytes) and an sgemv of a (49152, 576) float32 matrix (NumPy's BLAS, OPENBLAS/OMP
threads = n), the shape of the LM head.

Output: OUT_DIR/decode_cpu_<N>core-<cpu>_<YYYYMMDD-HHMM>.json and .md, with host CPU, load
average before and after, versions, commit and date; rewritten after every cell.

Needs torch and transformers (CPU use only; not in scripts/install-deps.sh): e.g. a venv with
`pip install torch transformers` (PyPI's torch wheel also pulls the CUDA runtime packages, ~3 GB,
which `import torch` needs even on a CPU-only host).

Usage: RAGGED_LIB=build/libragged.so python3 bench/peer/decode_cpu.py [--threads 1,2]
        [--batches 1,4] [--models smollm2,gpt2] [--new 64] [--reps 3] [--rounds 2]
        [--out-dir bench/results] [--model-dir DIR]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPT = 32
RUNTIMES = ("ragged", "hf_static", "hf_dynamic")
TARGET = 2.0  # ragged tok/s over hf_static tok/s


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ models

def build_models(names, base):
    """HF directories for the named shapes under base (built once, reused)."""
    dirs = {}
    for name in names:
        d = os.path.join(base, name)
        dirs[name] = d
        if os.path.exists(os.path.join(d, "config.json")):
            continue
        import torch
        import transformers as tf
        torch.manual_seed(0)
        if name == "gpt2":
            cfg = tf.GPT2Config(n_embd=768, n_head=12, n_layer=12, vocab_size=50257,
                                n_positions=1024)
            m = tf.GPT2LMHeadModel(cfg)
        else:
            cfg = tf.LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                                 num_hidden_layers=30, intermediate_size=1536, vocab_size=49152,
                                 tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5,
                                 max_position_embeddings=8192, hidden_act="silu")
            m = tf.LlamaForCausalLM(cfg)
        m.save_pretrained(d, safe_serialization=True)
        # transformers >= 5 writes RoPE settings only in "rope_parameters"; add the top-level
        # rope_theta too (as tests/gpu/decoder_hf.py does)
        p = os.path.join(d, "config.json")
        with open(p) as f:
            c = json.load(f)
        rp = c.get("rope_parameters") or {}
        if "rope_theta" in rp and "rope_theta" not in c:
            c["rope_theta"] = rp["rope_theta"]
            with open(p, "w") as f:
                json.dump(c, f, indent=1)
        log(f"built {name} in {d}")
    return dirs


def model_facts(d):
    """(params, weight bytes read per decode step, kv bytes per token) from config.json."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    if c.get("model_type") == "gpt2":
        H, L, V, P = c["n_embd"], c["n_layer"], c["vocab_size"], c["n_positions"]
        per_layer = 4 * H * H + 4 * H + 2 * H * 4 * H + 4 * H + H + 4 * H
        params = V * H + P * H + L * per_layer + 2 * H
        step = params - P * H + H  # one position row, not the whole table
        kv = 2 * L * H * 4
    else:
        H, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        I, nh, nkv = c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
        hd = H // nh
        per_layer = H * (nh + 2 * nkv) * hd + nh * hd * H + 3 * H * I + 2 * H
        params = V * H + L * per_layer + H
        step = params  # the tied head reads the embedding matrix once; its gather, B rows
        kv = 2 * L * nkv * hd * 4
    return params, step * 4, kv


# ------------------------------------------------------------------ children

def child_ragged(a):
    sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    from ragged_ctypes import Model
    from dec_util import BS, Seqs
    prompts = np.load(a.prompts)
    B, new = prompts.shape[0], a.new
    blocks = B * ((PROMPT + new + BS - 1) // BS) + 8
    m = Model(a.model, device="cpu", dtype="fp32", max_batch_tokens=max(B * PROMPT, 64))
    m.kv_init(BS, blocks)

    def run():
        s = Seqs(blocks, 0)
        out = [[] for _ in range(B)]
        t0 = time.perf_counter()
        ids, _ = s.step(m, [(i, [int(x) for x in prompts[i]]) for i in range(B)], argmax=True)
        t1 = time.perf_counter()
        for k in range(new):
            for i in range(B):
                out[i].append(int(ids[i]))
            if k == new - 1:
                break
            ids, _ = s.step(m, [(i, [out[i][-1]]) for i in range(B)], argmax=True)
        t2 = time.perf_counter()
        return t2 - t0, t1 - t0, (t2 - t1) / max(new - 1, 1), out

    run()
    runs = [run() for _ in range(a.reps)]
    m.close()
    return {"s": [r[0] for r in runs], "prefill_s": [r[1] for r in runs],
            "step_s": [r[2] for r in runs], "ids": runs[0][3]}


def child_hf(a, static):
    import torch
    import transformers as tf
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    prompts = np.load(a.prompts)
    B = prompts.shape[0]
    hf = tf.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    x = torch.tensor(prompts, dtype=torch.long)
    mask = torch.ones_like(x)
    kw = dict(max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, pad_token_id=0,
              attention_mask=mask)
    if static:
        kw["cache_implementation"] = "static"

    def run():
        with torch.inference_mode():
            t0 = time.perf_counter()
            y = hf.generate(x, **kw)
            return time.perf_counter() - t0, y[:, PROMPT:].tolist()

    run()
    runs = [run() for _ in range(a.reps)]
    return {"s": [r[0] for r in runs], "ids": runs[0][1], "torch": torch.__version__,
            "transformers": tf.__version__}


def child_bw(a):
    """Copy bandwidth over a.threads threads and the LM-head-shaped sgemv rate."""
    import threading
    n = 64 << 20  # floats: 256 MiB
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    T = a.threads
    parts = [(i * n // T, (i + 1) * n // T) for i in range(T)]

    def cp(lo, hi):
        np.copyto(dst[lo:hi], src[lo:hi])

    ts = []
    for _ in range(5):
        th = [threading.Thread(target=cp, args=p) for p in parts]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        ts.append(time.perf_counter() - t0)
    copy_gbs = 2 * n * 4 / min(ts) / 1e9
    W = np.random.default_rng(0).standard_normal((49152, 576)).astype(np.float32)
    v = np.ones(576, np.float32)
    W @ v
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        W @ v
        ts.append(time.perf_counter() - t0)
    return {"copy_gbs": copy_gbs, "sgemv_gbs": W.nbytes / min(ts) / 1e9,
            "sgemv_ms": min(ts) * 1e3}


def child_main(a):
    fn = {"ragged": child_ragged, "ragged_base": child_ragged, "hf_static": lambda x: child_hf(x, True),
          "hf_dynamic": lambda x: child_hf(x, False), "bw": child_bw}[a.child]
    print("RESULT " + json.dumps(fn(a)), flush=True)


def spawn(runtime, threads, model, prompts, a, timeout=900):
    env = dict(os.environ)
    if runtime == "ragged_base":
        env["RAGGED_LIB"] = a.base_lib
    for k in ("RAGGED_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", runtime, "--threads",
           str(threads), "--model", model or "", "--prompts", prompts or "", "--new", str(a.new),
           "--reps", str(a.reps)]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-600:]}


# ------------------------------------------------------------------ report

def host_info():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                f = set(line.split(":", 1)[1].split())
                flags = " ".join(x for x in ("avx2", "fma", "avx512f", "avx512_bf16") if x in f)
                break
    except OSError:
        pass
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "flags": flags, "platform": platform.platform(), "python": platform.python_version()}


def commit():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return r.stdout.strip() + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def med(x):
    return float(np.median(x)) if x else float("nan")


def render(res):
    h = res["host"]
    L = [f"# CPU greedy decode: ragged vs HF transformers generate, {h['cpu']}", "",
         f"- host: {h['cpu']}, {h['logical_cpus']} logical CPUs (affinity {h['affinity']}); "
         f"flags {h['flags']}; load average before {res['load_before']}, after "
         f"{res.get('load_after', '?')} (the host is shared with other developers)",
         f"- date: {res['date']}  commit: `{res['commit']}`  torch {res.get('torch', '?')}  "
         f"transformers {res.get('transformers', '?')}  numpy {np.__version__}"
         + (f"; before = `{res['base_lib']}` built from {res['base_commit']}, run in the same "
            "rounds" if res.get("base_lib") else ""),
         f"- random weights, fp32, greedy, prompt {PROMPT}, {res['new']} new tokens, no EOS; each "
         f"runtime in its own process; {res['reps']} timed runs per child after a warm-up, "
         f"{res['rounds']} round(s) of the three runtimes per cell; time = median of all timed "
         "runs; tok/s = batch x new / time (prefill included); ragged = step API with the "
         "greedy id chosen in the library (rg_model_step, greedy path); x static = ragged tok/s / "
         "hf_static tok/s (target >= 2)", "",
         "## Bandwidth (measured in this run, its own child per thread count)", "",
         "| threads | copy GB/s (read + write) | sgemv (49152 x 576 f32) GB/s |", "|---:|---:|---:|"]
    for t, b in sorted(res["bw"].items()):
        L.append(f"| {t} | {b.get('copy_gbs', float('nan')):.1f} | "
                 f"{b.get('sgemv_gbs', float('nan')):.1f} |")
    L += ["", "## Cells", "",
          "| model | threads | batch | ragged tok/s | hf static tok/s | hf dynamic tok/s | "
          "x static | x dynamic | ragged before tok/s | after / before | before step ms | "
          "ragged prefill ms | ragged step ms | weights MB/step | ragged GB/s | "
          "floor ms/step (sgemv rate) | same ids |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in res["cells"]:
        r = c.get("ragged", {})
        bw = res["bw"].get(str(c["threads"]), {})
        step = r.get("step_ms", float("nan"))
        gbs = c["weight_bytes"] / (step / 1e3) / 1e9 if step == step else float("nan")
        floor = c["weight_bytes"] / (bw.get("sgemv_gbs", float("nan")) * 1e9) * 1e3
        L.append(
            f"| {c['model']} | {c['threads']} | {c['batch']} | {r.get('tok_s', float('nan')):.1f} "
            f"| {c.get('hf_static', {}).get('tok_s', float('nan')):.1f} "
            f"| {c.get('hf_dynamic', {}).get('tok_s', float('nan')):.1f} "
            f"| {c.get('x_static', float('nan')):.2f} | {c.get('x_dynamic', float('nan')):.2f} "
            f"| {c.get('ragged_base', {}).get('tok_s', float('nan')):.1f} "
            f"| {c.get('x_before', float('nan')):.2f} "
            f"| {c.get('ragged_base', {}).get('step_ms', float('nan')):.2f} "
            f"| {r.get('prefill_ms', float('nan')):.1f} | {step:.2f} "
            f"| {c['weight_bytes'] / 1e6:.0f} | {gbs:.1f} | {floor:.1f} "
            f"| {c.get('same_ids', float('nan')):.2f} |")
    errs = [(c["model"], c["threads"], c["batch"], k, c[k]["error"]) for c in res["cells"]
            for k in RUNTIMES + ("ragged_base",) if "error" in c.get(k, {})]
    if errs:
        L += ["", "## Errors", ""] + [f"- {m} {t}t b{b} {k}: `{e[-300:]}`"
                                      for m, t, b, k, e in errs]
    L += ["", "Napkin math: a decode step of batch B reads every weight once (weights MB/step, fp32, "
          "the tied LM head once) plus B x context x KV bytes; the floor at the measured sgemv "
          "rate is weights / rate; ragged GB/s = weights / ragged's mean decode step "
          "(attention, norms, Python loop and the thread pool's handoffs included)."]
    return "\n".join(L)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child")
    p.add_argument("--model")
    p.add_argument("--prompts")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--models", default="smollm2,gpt2")
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--runtimes", default=",".join(RUNTIMES))
    p.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--model-dir", default="/tmp/ragged_decode_cpu_models")
    p.add_argument("--tag", default="", help="file name part after the date (-TAG)")
    p.add_argument("--base-commit", default="", help="the commit --base-lib was built from")
    p.add_argument("--base-lib", default="",
                   help="a libragged.so of an earlier commit, run as runtime ragged_base in the "
                        "same rounds (before/after on the same load)")
    a = p.parse_args()
    if a.child:
        a.threads = int(a.threads)
        child_main(a)
        return
    threads = [int(x) for x in a.threads.split(",")]
    batches = [int(x) for x in a.batches.split(",")]
    runtimes = a.runtimes.split(",")
    if a.base_lib:
        runtimes = ["ragged_base"] + runtimes
        res_base = {"base_lib": a.base_lib, "base_commit": a.base_commit}
    else:
        res_base = {}
    dirs = build_models(a.models.split(","), a.model_dir)
    host = host_info()
    sys.path.insert(0, HERE)
    from bench_graphed import cpu_device, result_base  # the results' naming scheme
    base = result_base(a.out_dir, "decode", cpu_device(host["affinity"], host["cpu"]), a.tag)
    res = {"host": host, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "commit": commit(), "new": a.new, "reps": a.reps, "rounds": a.rounds,
           "load_before": " ".join(open("/proc/loadavg").read().split()[:3]), "bw": {},
           "cells": [], **res_base}
    for t in threads:
        res["bw"][str(t)] = spawn("bw", t, None, None, a)
        log(f"bw {t} threads: {res['bw'][str(t)]}")

    def write():
        res["load_after"] = " ".join(open("/proc/loadavg").read().split()[:3])
        for path, text in ((base + ".json", json.dumps(res, indent=1)), (base + ".md", render(res))):
            with open(path + ".tmp", "w") as f:
                f.write(text + "\n")
            os.replace(path + ".tmp", path)

    for name, d in dirs.items():
        params, wbytes, kvb = model_facts(d)
        vocab = 49152 if name != "gpt2" else 50257
        for t in threads:
            for B in batches:
                pr = os.path.join(a.model_dir, f"prompts_{name}_{B}.npy")
                np.save(pr, np.random.default_rng(B).integers(0, vocab, (B, PROMPT)))
                cell = {"model": name, "threads": t, "batch": B, "params": params,
                        "weight_bytes": wbytes, "kv_bytes_per_token": kvb}
                raw = {k: [] for k in runtimes}
                for rnd in range(a.rounds):
                    for k in runtimes:
                        r = spawn(k, t, d, pr, a)
                        if "error" in r:
                            cell[k] = r
                            log(f"{name} {t}t b{B} {k}: ERROR {r['error'][-300:]}")
                            continue
                        raw[k].append(r)
                        log(f"{name} {t}t b{B} {k} round {rnd}: "
                            f"{B * a.new / med(r['s']):.1f} tok/s")
                for k in runtimes:
                    if not raw[k]:
                        continue
                    s = [x for r in raw[k] for x in r["s"]]
                    cell[k] = {"s": s, "median_s": med(s), "tok_s": B * a.new / med(s)}
                    if k in ("ragged", "ragged_base"):
                        cell[k]["prefill_ms"] = 1e3 * med([x for r in raw[k] for x in r["prefill_s"]])
                        cell[k]["step_ms"] = 1e3 * med([x for r in raw[k] for x in r["step_s"]])
                    else:
                        res["torch"], res["transformers"] = raw[k][0]["torch"], raw[k][0]["transformers"]
                    cell[k]["ids"] = raw[k][0]["ids"]
                if "tok_s" in cell.get("ragged", {}) and "tok_s" in cell.get("ragged_base", {}):
                    cell["x_before"] = cell["ragged"]["tok_s"] / cell["ragged_base"]["tok_s"]
                for k, x in (("hf_static", "x_static"), ("hf_dynamic", "x_dynamic")):
                    if "tok_s" in cell.get("ragged", {}) and "tok_s" in cell.get(k, {}):
                        cell[x] = cell["ragged"]["tok_s"] / cell[k]["tok_s"]
                if "ids" in cell.get("ragged", {}) and "ids" in cell.get("hf_static", {}):
                    g, h = np.array(cell["ragged"]["ids"]), np.array(cell["hf_static"]["ids"])
                    cell["same_ids"] = float(np.mean(g == h)) if g.shape == h.shape else 0.0
                res["cells"].append(cell)
                write()
    write()
    log(f"wrote {base}.json and .md")


if __name__ == "__main__":
    main()
