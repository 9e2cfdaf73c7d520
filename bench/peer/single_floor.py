#!/usr/bin/env python3
"""One sentence on the CPU: how much of each runtime's time is its GEMMs, and what that bounds.

For each model and length T, two runtimes, each in its own process, interleaved in rounds
(ragged, torch, ragged, torch, ...; a fresh process per round, so that the host's drift between
processes moves both alike):
  - ragged: build/bench_cpu_single (bench/kernels/cpu_single.c): rg_model_embed of one T-token
    sentence (model_ms), and the model's linear layers alone through rg_op_gemm_bias_act with
    oneDNN-prepared weights (gemm_ms);
  - torch: HF BertModel (SDPA, fp32, inference_mode, mean pooling + normalize, as
    bench_cpu.py's torch side) on the same sentence (model_ms), and the same model's own
    nn.Linear weights alone, F.linear layer after layer on a (1, T, H) input (gemm_ms): the
    GEMMs PyTorch's forward runs (MKL or oneDNN, whichever torch dispatches to), with nothing else.
Both at --threads (ragged: RAGGED_NUM_THREADS; torch: set_num_threads). Times are medians of
repetitions after warm-up; per (runtime, T) the reported value is the median over the rounds.

What it bounds: a runtime whose GEMMs take gemm_ms cannot finish a sentence in less than gemm_ms.
So torch model_ms / ragged gemm_ms is the most that ragged's ratio to PyTorch could reach if every
non-GEMM op were free, and torch model_ms / torch gemm_ms is the same bound for a runtime that
had PyTorch's GEMMs. The issue's target is 1.5.

Output: OUT_DIR/single_floor_cpu_<N>core-<cpu>_<YYYYMMDD-HHMM>[-<tag>].json and .md
(bench/results/README.md; host CPU, commit, date, every round's numbers).
Usage: python3 bench/peer/single_floor.py --model minilm=DIR --model bert-base=DIR
       [--tokens 30,64,130] [--threads 1] [--rounds 3] [--budget 1.0] [--out-dir DIR] [--tag T]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (its ONNX export, host description and commit id)
TARGET = 1.5


def median_ms(fn, budget_s):
    """Median ms of fn() over repetitions filling budget_s (at least 5), after 3 warm-ups."""
    for _ in range(3):
        fn()
    ts, end = [], time.perf_counter() + budget_s
    while len(ts) < 5 or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def torch_child(a):
    import torch
    import torch.nn.functional as F
    from transformers import BertModel
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    model = BertModel.from_pretrained(a.model, attn_implementation="sdpa",
                                      torch_dtype=torch.float32).eval()
    cfg = model.config
    g = torch.Generator().manual_seed(20261123)
    linears = [(m.weight, m.bias) for layer in model.encoder.layer
               for m in (layer.attention.self.query, layer.attention.self.key,
                         layer.attention.self.value, layer.attention.output.dense,
                         layer.intermediate.dense, layer.output.dense)]

    with torch.inference_mode():
        for T in a.tokens:
            ids = torch.randint(1000, cfg.vocab_size, (1, T), generator=g)
            ids[0, 0], ids[0, -1] = 101, 102
            mask = torch.ones_like(ids)

            def whole():
                h = model(input_ids=ids, attention_mask=mask).last_hidden_state
                v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                return F.normalize(v, dim=-1)
            x = {cfg.hidden_size: torch.randn(1, T, cfg.hidden_size, generator=g),
                 cfg.intermediate_size: torch.randn(1, T, cfg.intermediate_size, generator=g)}

            def gemms():
                for w, b in linears:
                    F.linear(x[w.shape[1]], w, b)
            print(json.dumps({"T": T, "model_ms": median_ms(whole, a.budget),
                              "gemm_ms": median_ms(gemms, a.budget),
                              "torch": torch.__version__,
                              "blas": "mkl" if torch.backends.mkl.is_available() else "other",
                              "mkldnn": torch.backends.mkldnn.is_available()}), flush=True)


def ort_child(a):
    """ORT side: the exported model (bench_cpu.py's export) on one T-token sentence, whole
    (model_ms, with mean pooling + normalize in numpy as bench_cpu.py's ORT side), then a
    profiled session: per run, the kernel time of the linear layers' MatMul / Gemm nodes (a
    constant or 2-D second input; attention's 4-D MatMuls are not counted) as gemm_ms, and every
    op type's time."""
    import glob
    import numpy as np
    import onnxruntime as ort

    def session(profile):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(a.tmp, f"ort_prof_{os.getpid()}")
        return ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])

    sess = session(False)
    rng = np.random.default_rng(20261123)
    for T in a.tokens:
        ids = rng.integers(1000, 30000, (1, T)).astype(np.int64)
        ids[0, 0], ids[0, -1] = 101, 102
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids)}

        def whole():
            h = sess.run(["last_hidden_state"], feed)[0]
            v = h.mean(1)
            return v / np.linalg.norm(v, axis=-1, keepdims=True)
        model_ms = median_ms(whole, a.budget)
        ps = session(True)
        n_prof = 20
        for _ in range(3 + n_prof):
            ps.run(["last_hidden_state"], feed)
        path = ps.end_profiling()
        ev = json.load(open(path))
        os.remove(path)
        # per node: its kernel times in run order; the last n_prof are the measured runs
        per_node, ops = {}, {}
        for e in ev:
            if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
                continue
            args = e.get("args", {})
            per_node.setdefault(e["name"], []).append(
                (e["dur"], args.get("op_name"), args.get("input_type_shape", [])))
        gemm_us = 0.0
        for name, runs in per_node.items():
            for dur, op, shapes in runs[-n_prof:]:
                ops[op] = ops.get(op, 0.0) + dur / n_prof / 1e3
                dims = [list(x.values())[0] for x in shapes] if shapes else []
                # a constant weight is not listed among the inputs' shapes
                if op in ("MatMul", "Gemm", "FusedMatMul") and (
                        len(dims) == 1 or (len(dims) > 1 and len(dims[1]) == 2)):
                    gemm_us += dur / n_prof
        print(json.dumps({"T": T, "model_ms": model_ms, "gemm_ms": gemm_us / 1e3,
                          "ops_ms": ops, "ort": ort.__version__}), flush=True)
    for f in glob.glob(os.path.join(a.tmp, f"ort_prof_{os.getpid()}*")):
        os.remove(f)


def export_onnx(a, name, d):
    """bench_cpu.py's ONNX export (cached in --onnx-cache, shared with bench_cpu.py), or None."""
    os.makedirs(a.onnx_cache, exist_ok=True)
    path = bench_cpu.onnx_path_for(a.onnx_cache, name, d)
    if not os.path.exists(path):
        p = subprocess.run([sys.executable, bench_cpu.__file__, "--child", "export", "--work",
                            a.onnx_cache, "--threads-n", "1", "--model", f"{name}={d}",
                            "--onnx", path], capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or not os.path.exists(path):
            print(f"ONNX export of {name} failed: {p.stderr[-1500:]}", file=sys.stderr)
            return None
    return path


def run_side(side, a, name, d, onnx=None):
    env = dict(os.environ, RAGGED_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS=str(a.threads))
    toks = ",".join(str(t) for t in a.tokens)
    if side == "ragged":
        cmd = [os.path.join(ROOT, "build", "bench_cpu_single"), d, "--tokens", toks,
               "--budget", str(a.budget)]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", side, "--model-dir", d,
               "--tokens", toks, "--threads", str(a.threads), "--budget", str(a.budget),
               "--onnx", onnx or "", "--tmp", a.onnx_cache]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(rows) != len(a.tokens):
        raise SystemExit(f"{side} {name}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return rows


NO_ORT = ("ONNX Runtime was not run here (--no-ort, or its export failed), so this file compares "
          "ragged with PyTorch alone. bench_cpu.py's peer runs (peer_cpu_*.md) and a "
          "single_floor run without --no-ort put ragged beside both PyTorch and ONNX Runtime.")


def render(res):
    m = res["meta"]
    out = [f"# One sentence on the CPU: each runtime's GEMMs against its whole forward, "
           f"{m['cpu']}", "",
           f"- date {m['date']}, commit `{m['commit']}`, {m['threads']} thread(s), "
           f"{m['rounds']} rounds (ragged, torch, ragged, ...; a fresh process each), "
           f"values are medians over the rounds; torch {m.get('torch')} "
           f"(MKL: {m.get('blas') == 'mkl'}), fp32",
           "- model = one T-token sentence, ids to normalised vector; gemm = the same "
           "model's linear layers alone on (T, H) activations",
           f"- bound = torch model ms / a runtime's gemm ms: the most that runtime's speed-up "
           f"over PyTorch could be if everything but its GEMMs took no time (target "
           f"{TARGET})", "",
           "| model | T | ragged ms | ragged gemm ms | ragged GEMM share | torch ms | "
           "torch gemm ms | torch GEMM share | ragged/torch | bound, ragged GEMMs | "
           "bound, torch GEMMs | GEMM GFLOP/s ragged / torch |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, rows in res["results"].items():
        for r in rows:
            out.append(
                f"| {name} | {r['T']} | {r['ragged_model_ms']:.2f} | {r['ragged_gemm_ms']:.2f} "
                f"| {100 * r['ragged_gemm_ms'] / r['ragged_model_ms']:.0f}% | "
                f"{r['torch_model_ms']:.2f} | {r['torch_gemm_ms']:.2f} | "
                f"{100 * r['torch_gemm_ms'] / r['torch_model_ms']:.0f}% | "
                f"{r['torch_model_ms'] / r['ragged_model_ms']:.2f} | "
                f"{r['torch_model_ms'] / r['ragged_gemm_ms']:.2f} | "
                f"{r['torch_model_ms'] / r['torch_gemm_ms']:.2f} | "
                f"{r['gflop'] / r['ragged_gemm_ms']:.0f} / {r['gflop'] / r['torch_gemm_ms']:.0f} |")
    if any("ort_model_ms" in r for rows in res["results"].values() for r in rows):
        out += ["", f"ONNX Runtime {m.get('ort')} on the same sentence (bench_cpu.py's export, "
                "ORT_ENABLE_ALL, mean pooling + normalize in numpy); its gemm = the kernel time "
                "of the linear layers' MatMul/Gemm nodes in a profiled session (attention's "
                "MatMuls not counted):", "",
                "| model | T | ragged ms | ort ms | ragged/ort | ragged gemm ms | ort gemm ms | "
                "GEMM GFLOP/s ragged / ort | ragged non-GEMM ms | ort non-GEMM ms |",
                "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for name, rows in res["results"].items():
            for r in rows:
                if "ort_model_ms" not in r:
                    continue
                out.append(
                    f"| {name} | {r['T']} | {r['ragged_model_ms']:.2f} | {r['ort_model_ms']:.2f} "
                    f"| {r['ort_model_ms'] / r['ragged_model_ms']:.2f} | "
                    f"{r['ragged_gemm_ms']:.2f} | {r['ort_gemm_ms']:.2f} | "
                    f"{r['gflop'] / r['ragged_gemm_ms']:.0f} / {r['gflop'] / r['ort_gemm_ms']:.0f} "
                    f"| {r['ragged_model_ms'] - r['ragged_gemm_ms']:.2f} | "
                    f"{r['ort_model_ms'] - r['ort_gemm_ms']:.2f} |")
    else:
        out += ["", NO_ORT]
    out += ["", "Each op kind alone, ms per sentence over all layers (medians over the rounds; "
            "ragged: bench_cpu_single's ops; ort: profiled kernel time per op type):", ""]
    for name, rows in res["results"].items():
        for r in rows:
            for sd, o in r.get("ops_ms", {}).items():
                out.append(f"- {name} T={r['T']} {sd}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in sorted(o.items(), key=lambda kv: -kv[1])
                    if v >= 0.005))
    out += ["", "Rounds (ms, in the order run):", ""]
    for name, rows in res["results"].items():
        for r in rows:
            out.append(f"- {name} T={r['T']}: ragged " + " ".join(
                f"{x:.2f}/{y:.2f}" for x, y in zip(r["rounds"]["ragged_model_ms"],
                                                   r["rounds"]["ragged_gemm_ms"]))
                + "; torch " + " ".join(
                f"{x:.2f}/{y:.2f}" for x, y in zip(r["rounds"]["torch_model_ms"],
                                                   r["rounds"]["torch_gemm_ms"]))
                + " (model/gemm)")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="NAME=DIR (repeatable)")
    ap.add_argument("--tokens", default="30,64,130")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per timed case")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    ap.add_argument("--onnx-cache", default=os.path.join(ROOT, "build", "onnx"),
                    help="where bench_cpu.py's ONNX exports are kept (shared with it)")
    ap.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    ap.add_argument("--child", choices=("torch", "ort"), help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.tokens = [int(t) for t in a.tokens.split(",")]
    if a.child == "torch":
        a.model = a.model_dir
        return torch_child(a)
    if a.child == "ort":
        return ort_child(a)
    now = datetime.datetime.now(datetime.timezone.utc)
    host = bench_cpu.host_info()
    res = {"meta": {"date": now.isoformat(timespec="seconds"), "commit": bench_cpu.commit_id(),
                    "cpu": host["cpu_model"], "threads": a.threads,
                    "rounds": a.rounds,
                    "budget_s": a.budget}, "results": {}}
    base = bench_cpu.result_base(a.out_dir, "single_floor", bench_cpu.host_tag(host), a.tag, now)
    os.makedirs(a.out_dir, exist_ok=True)
    for spec in a.model:
        name, d = spec.split("=", 1)
        cfg = json.load(open(os.path.join(d, "config.json")))
        H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
        onnx = None if a.no_ort else export_onnx(a, name, d)
        sides = ("ragged", "torch") + (("ort",) if onnx else ())
        rounds = {f"{sd}_{k}": {T: [] for T in a.tokens} for sd in sides
                  for k in ("model_ms", "gemm_ms")}
        ops = {sd: {T: [] for T in a.tokens} for sd in ("ragged", "ort")}
        for rnd in range(a.rounds):
            for side in sides:
                for row in run_side(side, a, name, d, onnx):
                    rounds[f"{side}_model_ms"][row["T"]].append(row["model_ms"])
                    rounds[f"{side}_gemm_ms"][row["T"]].append(row["gemm_ms"])
                    if side in ops:
                        ops[side][row["T"]].append(row["ops_ms"])
                    if side == "torch":
                        res["meta"].update(torch=row["torch"], blas=row["blas"])
                    if side == "ort":
                        res["meta"].update(ort=row["ort"])
                print(f"{name} round {rnd + 1} {side}: done", file=sys.stderr, flush=True)
        res["results"][name] = [dict(
            {k: statistics.median(v[T]) for k, v in rounds.items()}, T=T,
            gflop=L * 2.0 * T * (4 * H * H + 2 * H * I) / 1e6,  # MFLOP: / ms gives GFLOP/s
            rounds={k: v[T] for k, v in rounds.items()},
            ops_ms={sd: {k: statistics.median(o.get(k, 0.0) for o in ops[sd][T])
                         for k in sorted({k for o in ops[sd][T] for k in o})}
                    for sd in ops if ops[sd][T]}) for T in a.tokens]
        with open(base + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(render(res))
    sys.stdout.write(render(res))


if __name__ == "__main__":
    sys.exit(main())
