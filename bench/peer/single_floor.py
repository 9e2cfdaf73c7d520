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

Output: OUT_DIR/single_floor_<tag>.json and .md (host CPU, commit, date, every round's numbers).
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
TARGET = 1.5


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

    def median_ms(fn):
        for _ in range(3):
            fn()
        ts, end = [], time.perf_counter() + a.budget
        while len(ts) < 5 or time.perf_counter() < end:
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

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
            print(json.dumps({"T": T, "model_ms": median_ms(whole), "gemm_ms": median_ms(gemms),
                              "torch": torch.__version__,
                              "blas": "mkl" if torch.backends.mkl.is_available() else "other",
                              "mkldnn": torch.backends.mkldnn.is_available()}), flush=True)


def run_side(side, a, name, d):
    env = dict(os.environ, RAGGED_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS=str(a.threads))
    toks = ",".join(str(t) for t in a.tokens)
    if side == "ragged":
        cmd = [os.path.join(ROOT, "build", "bench_cpu_single"), d, "--tokens", toks,
               "--budget", str(a.budget)]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model-dir", d,
               "--tokens", toks, "--threads", str(a.threads), "--budget", str(a.budget)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(rows) != len(a.tokens):
        raise SystemExit(f"{side} {name}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return rows


def host_cpu():
    for ln in open("/proc/cpuinfo"):
        if ln.startswith("model name"):
            return ln.split(":", 1)[1].strip()
    return "unknown"


def commit():
    try:
        return subprocess.run(["bash", os.path.join(ROOT, "scripts", "commit-id.sh"), ROOT],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


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
    ap.add_argument("--tag", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.tokens = [int(t) for t in a.tokens.split(",")]
    if a.child:
        a.model = a.model_dir
        return torch_child(a)
    now = datetime.datetime.now(datetime.timezone.utc)
    res = {"meta": {"date": now.isoformat(timespec="seconds"), "commit": commit(),
                    "cpu": host_cpu(), "threads": a.threads, "rounds": a.rounds,
                    "budget_s": a.budget}, "results": {}}
    tag = a.tag or f"{now:%Y%m%d-%H%M}"
    base = os.path.join(a.out_dir, f"single_floor_{tag}")
    os.makedirs(a.out_dir, exist_ok=True)
    for spec in a.model:
        name, d = spec.split("=", 1)
        cfg = json.load(open(os.path.join(d, "config.json")))
        H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
        rounds = {k: {T: [] for T in a.tokens} for k in
                  ("ragged_model_ms", "ragged_gemm_ms", "torch_model_ms", "torch_gemm_ms")}
        for rnd in range(a.rounds):
            for side in ("ragged", "torch"):
                for row in run_side(side, a, name, d):
                    rounds[f"{side}_model_ms"][row["T"]].append(row["model_ms"])
                    rounds[f"{side}_gemm_ms"][row["T"]].append(row["gemm_ms"])
                    if side == "torch":
                        res["meta"].update(torch=row["torch"], blas=row["blas"])
                print(f"{name} round {rnd + 1} {side}: done", file=sys.stderr, flush=True)
        res["results"][name] = [dict(
            {k: statistics.median(v[T]) for k, v in rounds.items()}, T=T,
            gflop=L * 2.0 * T * (4 * H * H + 2 * H * I) / 1e6,  # MFLOP: / ms gives GFLOP/s
            rounds={k: v[T] for k, v in rounds.items()}) for T in a.tokens]
        with open(base + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(render(res))
    sys.stdout.write(render(res))


if __name__ == "__main__":
    sys.exit(main())
