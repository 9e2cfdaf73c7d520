#!/usr/bin/env python3
"""One sentence on the CPU, side by side (issue 21 item 3): ragged, PyTorch and ONNX Runtime, and
optionally an earlier ragged build, each in its own process, interleaved in rounds.

Per round, per thread count, every side runs once in a fresh process over every length T of
--tokens (the order of the sides rotates from round to round, so that a busy moment of a shared
host does not always fall on the same side):
  - ragged: build/bench_cpu_single (bench/kernels/cpu_single.c) of this checkout: rg_model_embed
    of one T-token sentence, ids to the pooled, normalised vector (model_ms); the model's linear
    layers alone (gemm_ms); each op kind alone (ops_ms). Threads: RAGGED_NUM_THREADS.
  - ragged_base (--ragged-base BIN): the same program built from an earlier commit (the "before"
    of a change), on the same model directory.
  - ragged_<name> (--ragged-env NAME:VAR=VALUE[,VAR=VALUE...], repeatable): this checkout's
    program under extra environment variables (an A/B of a RAGGED_* switch in the same run).
  - torch: HF BertModel (SDPA, fp32, inference_mode, mean pooling + normalize), and its own
    nn.Linear weights alone (single_floor.py's child). Threads: torch.set_num_threads(n),
    one inter-op thread.
  - ort: the model exported by bench_cpu.py (TorchScript exporter, ORT_ENABLE_ALL), mean pooling
    + normalize in numpy (single_floor.py's child). Threads: intra_op_num_threads=n, one inter-op
    thread.
Every time is the median of repetitions filling --budget seconds; a cell is the median over the
rounds. The host's 1-minute load average is recorded before each round: on a shared machine the
other load moves every side, and more so at as many threads as cores.

Napkin math, measured in the same run before the rounds: the read bandwidth of ragged's pool on
n threads over a buffer the size of the model's fp32 linear weights (bench_cpu_single
--read-bw: vector loads, prefetched ahead), and the sgemm ceiling (1024^3 and 2048^3 through
NumPy's BLAS and libragged's OpenBLAS: bench_cpu.py's ceilings child). A forward
must read every weight once (BERT-base: 340 MB of fp32 linear-layer weights), so
weights / read bandwidth is a floor at any T, and FLOPs / sgemm ceiling another.

Output: OUT_DIR/single_sentence_cpu_<N>core-<cpu>_<YYYYMMDD-HHMM>[-<tag>].json and .md
(bench/results/README.md; host, commits, date, versions, every round).
Usage: python3 bench/peer/single_sentence.py --model DIR [--tokens 5,12,30,64,130]
       [--threads 1,2] [--rounds 5] [--budget 0.5] [--ragged-base BIN] [--base-commit SHA]
       [--out-dir DIR] [--tag T]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_cpu  # noqa: E402  (host description, ceilings child, ONNX export, commit id)
import single_floor  # noqa: E402  (the torch and ort children)

TARGET_TORCH, TARGET_ORT = 1.5, 1.0   # from 2 threads up; at 1 thread: >= 1.0x the faster peer


def env_for(threads, extra=None):
    env = bench_cpu.child_env(threads)
    env.update(RAGGED_NUM_THREADS=str(threads))
    env.update(extra or {})
    return env


def parse_variants(specs):
    """--ragged-env NAME:VAR=VALUE[,VAR=VALUE...] -> {"ragged_NAME": {VAR: VALUE, ...}}."""
    out = {}
    for spec in specs or []:
        name, sep, assigns = spec.partition(":")
        if not sep or not name.isidentifier():
            raise SystemExit(f"--ragged-env {spec!r}: expected NAME:VAR=VALUE[,VAR=VALUE...]")
        env = {}
        for kv in assigns.split(","):
            k, eq, v = kv.partition("=")
            if not eq or not k:
                raise SystemExit(f"--ragged-env {spec!r}: {kv!r} is not VAR=VALUE")
            env[k] = v
        out["ragged_" + name] = env
    return out


def run_side(side, a, threads, onnx):
    """One fresh process of one side over every T: list of row dicts (one per T)."""
    toks = ",".join(str(t) for t in a.tokens)
    extra = a.variants.get(side)
    if side in ("ragged", "ragged_base") or extra is not None:
        binary = a.ragged_base if side == "ragged_base" else os.path.join(ROOT, "build",
                                                                          "bench_cpu_single")
        cmd = [binary, a.model, "--tokens", toks, "--budget", str(a.budget)]
    else:
        cmd = [sys.executable, single_floor.__file__, "--child", side, "--model-dir", a.model,
               "--tokens", toks, "--threads", str(threads), "--budget", str(a.budget),
               "--onnx", onnx or "", "--tmp", a.onnx_cache]
    p = subprocess.run(cmd, env=env_for(threads, extra), capture_output=True, text=True,
                       timeout=a.timeout)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or len(rows) != len(a.tokens):
        raise SystemExit(f"{side} at {threads} thread(s): exit {p.returncode}\n"
                         f"{p.stderr[-2000:]}")
    return rows


def read_bandwidth(threads, mb):
    """GB/s of ragged's pool reading mb megabytes once (bench_cpu_single --read-bw)."""
    p = subprocess.run([os.path.join(ROOT, "build", "bench_cpu_single"), "--read-bw", f"{mb:.1f}"],
                       env=env_for(threads), capture_output=True, text=True, timeout=120)
    return json.loads(p.stdout)["read_gbps"] if p.returncode == 0 else None


def ceilings(threads, weight_mb):
    got = {}
    st, err = bench_cpu.run_child(["--child", "ceilings", "--work", "/tmp", "--threads-n",
                                   str(threads), "--k", "1", "--dtype", "fp32"], threads, 180,
                                  lambda tag, obj: got.update(obj) if tag == "CEIL" else None)
    out = {k: round(v["gflops"], 1) for k, v in got.get("sgemm", {}).items()}
    out["read_gbps"] = read_bandwidth(threads, weight_mb)
    if err:
        out["error"] = err
    return out


def model_numbers(model_dir, T):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    lin = L * (4 * H * H + 2 * H * I)
    return {"weight_mb": lin * 4 / 1e6, "gflop": (2.0 * T * lin + L * 4.0 * H * T * T) / 1e9}


def fmt_ratio(x, target):
    return f"**{x:.2f}**" if x >= target else f"{x:.2f}"


def render(res):
    m, sides = res["meta"], res["meta"]["sides"]
    base = "ragged_base" in sides
    out = [f"# One sentence on the CPU: ragged vs PyTorch vs ONNX Runtime, {m['host']['cpu_model']}",
           "",
           f"- date {m['date']}; ragged at `{m['commit']}`"
           + (f", ragged_base (before) at `{m.get('base_commit', '?')}`" if base else "")
           + f"; model {m['model']} (fp32); {m['rounds']} rounds, sides interleaved (order "
           "rotated per round), a fresh process per side per round; each time the median of "
           f"repetitions filling {m['budget']} s; cells are medians over the rounds",
           f"- host: {m['host']['affinity_cpus']} CPUs ({m['host']['physical_cores']} cores), "
           f"{m['host']['mem_total_gib']} GiB, flags {' '.join(m['host']['flags'])}; "
           f"versions: {', '.join(f'{k} {v}' for k, v in m['versions'].items() if v)}",
           f"- 1-minute load average before each round: {m['load_avg']}",
           f"- targets (issue 21): from 2 threads up ragged/torch >= {TARGET_TORCH} and "
           f"ragged/ort >= {TARGET_ORT}; at 1 thread ragged >= 1.0x the faster of the two "
           "(bold: met)", ""]
    for th in m["threads"]:
        c = m["ceilings"].get(str(th), {})
        out += [f"## {th} thread(s)", "",
                f"Ceilings: read bandwidth {c.get('read_gbps')} GB/s; sgemm "
                + ", ".join(f"{k} {v}" for k, v in c.items() if k.startswith(("numpy", "openblas")))
                + " GFLOP/s", "",
                "| T | " + ("ragged before ms | " if base else "") + "ragged ms | torch ms | "
                "ort ms | ragged/torch | ragged/ort | ragged / faster peer | "
                + ("after/before | " if base else "")
                + "floor ms (weights / read BW) | ragged / floor | ragged GEMM share |",
                "|---:|" + ("---:|" if base else "") + "---:|---:|---:|---:|---:|---:|"
                + ("---:|" if base else "") + "---:|---:|---:|"]
        for r in res["results"][str(th)]:
            md = {s: r[s]["model_ms"] for s in sides}
            rg = md["ragged"]
            fast = min(md["torch"], md["ort"])
            floor = r["weight_mb"] / c["read_gbps"] if c.get("read_gbps") else float("nan")
            out.append(
                f"| {r['T']} | " + (f"{md['ragged_base']:.2f} | " if base else "")
                + f"{rg:.2f} | {md['torch']:.2f} | {md['ort']:.2f} | "
                + (fmt_ratio(md['torch'] / rg, TARGET_TORCH) if th >= 2
                   else f"{md['torch'] / rg:.2f}") + " | "
                + (fmt_ratio(md['ort'] / rg, TARGET_ORT) if th >= 2
                   else f"{md['ort'] / rg:.2f}") + " | "
                + (fmt_ratio(fast / rg, 1.0) if th == 1 else f"{fast / rg:.2f}") + " | "
                + (f"{md['ragged_base'] / rg:.2f} | " if base else "")
                + f"{floor:.2f} | {rg / floor:.2f} | "
                f"{100 * r['ragged']['gemm_ms'] / rg:.0f}% |")
        out.append("")
        variants = list(m.get("variants", {}))
        if variants:
            out += [f"A/B at {th} thread(s): ragged under each variant's environment (ms; "
                    "ratio = default / variant, > 1: the variant is faster; the peers' ratios "
                    "use the variant's time)", "",
                    "| T | ragged (default) ms | " + " | ".join(
                        f"{v} ms ({', '.join(f'{k}={x}' for k, x in m['variants'][v].items())})"
                        f" | default/{v} | torch/{v} | ort/{v}" for v in variants) + " |",
                    "|---:|---:|" + "---:|---:|---:|---:|" * len(variants)]
            for r in res["results"][str(th)]:
                rg = r["ragged"]["model_ms"]
                out.append(f"| {r['T']} | {rg:.2f} | " + " | ".join(
                    f"{r[v]['model_ms']:.2f} | {rg / r[v]['model_ms']:.2f} | "
                    f"{r['torch']['model_ms'] / r[v]['model_ms']:.2f} | "
                    f"{r['ort']['model_ms'] / r[v]['model_ms']:.2f}" for v in variants) + " |")
            out.append("")
    out += ["## ragged's ops, each alone over all layers (ms, medians over the rounds)", ""]
    for th in m["threads"]:
        for r in res["results"][str(th)]:
            for s in [x for x in sides if x.startswith("ragged")]:
                ops = r[s].get("ops_ms", {})
                out.append(f"- {th} thread(s), T={r['T']}, {s}: model {r[s]['model_ms']:.2f}, "
                           f"linear layers alone {r[s]['gemm_ms']:.2f}; "
                           + ", ".join(f"{k} {v:.2f}" for k, v in ops.items()))
    out += ["", "## Every round (model ms, in round order)", ""]
    for th in m["threads"]:
        for r in res["results"][str(th)]:
            out.append(f"- {th} thread(s), T={r['T']}: " + "; ".join(
                f"{s} " + " ".join(f"{x:.2f}" for x in r[s]["rounds"]) for s in sides))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model directory (BERT-base shape)")
    ap.add_argument("--tokens", default="5,12,30,64,130")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.5, help="seconds per timed case")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--ragged-base", help="bench_cpu_single built from an earlier commit")
    ap.add_argument("--base-commit", help="the commit --ragged-base was built from")
    ap.add_argument("--ragged-env", action="append", metavar="NAME:VAR=VALUE[,...]",
                    help="an extra ragged side, ragged_NAME, under these environment variables")
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--onnx-cache", default=os.path.join(ROOT, "build", "onnx"))
    ap.add_argument("--tag", default=None, help="file name part after the date (-TAG)")
    a = ap.parse_args()
    a.model = os.path.abspath(a.model)
    a.variants = parse_variants(a.ragged_env)
    a.tokens = [int(t) for t in a.tokens.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    now = datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(a.out_dir, exist_ok=True)
    base_path = bench_cpu.result_base(a.out_dir, "single_sentence",
                                      bench_cpu.host_tag(bench_cpu.host_info()), a.tag, now)
    a.onnx_cache = os.path.abspath(a.onnx_cache)
    os.makedirs(a.onnx_cache, exist_ok=True)
    onnx = single_floor.export_onnx(a, "bert-base", a.model)
    if not onnx:
        raise SystemExit("ONNX export failed")
    sides = ((["ragged_base"] if a.ragged_base else []) + ["ragged"] + list(a.variants)
             + ["torch", "ort"])
    res = {"meta": {"date": now.isoformat(timespec="seconds"), "commit": bench_cpu.commit_id(),
                    "base_commit": a.base_commit, "host": bench_cpu.host_info(),
                    "versions": bench_cpu.versions(), "model": a.model, "tokens": a.tokens,
                    "threads": threads, "rounds": a.rounds, "variants": a.variants, "budget": a.budget, "sides": sides,
                    "onnx": onnx, "ceilings": {}, "load_avg": []},
           "results": {}}
    if not a.no_ceilings:
        for th in threads:
            res["meta"]["ceilings"][str(th)] = ceilings(
                th, model_numbers(a.model, 1)["weight_mb"])
            print(f"ceilings, {th} thread(s): {res['meta']['ceilings'][str(th)]}",
                  file=sys.stderr, flush=True)
    got = {th: {s: {T: [] for T in a.tokens} for s in sides} for th in threads}
    for rnd in range(a.rounds):
        order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
        res["meta"]["load_avg"].append(round(os.getloadavg()[0], 2))
        for th in threads:
            for s in order:
                for row in run_side(s, a, th, onnx):
                    got[th][s][row["T"]].append(row)
                print(f"round {rnd + 1}, {th} thread(s), {s}: "
                      + " ".join(f"{x[-1]['model_ms']:.1f}" for x in got[th][s].values()),
                      file=sys.stderr, flush=True)
        for th in threads:
            res["results"][str(th)] = []
            for T in a.tokens:
                cell = dict(model_numbers(a.model, T), T=T)
                for s in sides:
                    rows = got[th][s][T]
                    cell[s] = {"model_ms": statistics.median(x["model_ms"] for x in rows),
                               "gemm_ms": statistics.median(x["gemm_ms"] for x in rows),
                               "rounds": [round(x["model_ms"], 3) for x in rows]}
                    if "ops_ms" in rows[0]:
                        cell[s]["ops_ms"] = {k: statistics.median(x["ops_ms"].get(k, 0.0)
                                                                  for x in rows)
                                             for k in rows[0]["ops_ms"]}
                res["results"][str(th)].append(cell)
        res["meta"]["rounds_done"] = rnd + 1
        with open(base_path + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(base_path + ".md", "w") as f:
            f.write(render(res))
    sys.stdout.write(render(res))


if __name__ == "__main__":
    sys.exit(main())
