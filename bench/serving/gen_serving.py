#!/usr/bin/env python3
"""Generation serving benchmark (issue 20, "Benchmarks and targets"): `ragged serve`'s continuous
batching against static batching (HF `generate` with a static cache, fixed batches of 16, each
run to its longest output) on the same weights and the SAME arrival schedule, side by side in one
run.

One run, for each request rate of --rates:
  1. start `ragged serve --model M --device D --dtype T` (own session, log in
     build/serving_logs/<run>/), wait for /health, snapshot /metrics;
  2. drive it with `ragged loadgen --mode generate`: Poisson arrivals, prompts --prompt-len
     (uniform:16:512), outputs --output-len (uniform:16:256, "max_tokens" with "ignore_eos"),
     --shared-prefix-frac (0.2) of the requests starting with one --shared-prefix-len (256) token
     prefix, streaming, SLO --slo-ttft-ms (200) and --slo-tpot-ms (20); --warmup s of load, then
     --duration s measured; the loadgen's --json and --per-request outputs are kept; on CUDA
     `nvidia-smi` samples GPU utilisation every 100 ms meanwhile;
  3. snapshot /metrics again (the difference: steps, mean step time, tokens per step, prefix-cache
     hit tokens, preemptions, KV blocks), stop the server.
Then (unless --no-prefix-ab) the lowest rate again with --no-prefix-caching (the TTFT of the
shared-prefix requests with and without the cache), an "offline" point (--offline N requests
all sent at once: the engine's step throughput with its batch full, the bar for the saturation
target), and the baseline: bench/serving/static_baseline.py in its own process (--torch-python:
PyTorch + transformers; fp16 on CUDA, fp32 on the CPU) replays every rate's per-request schedule
(the loadgen's own arrival times and length draws) with fixed batches of --baseline-batch (16),
under both batch-filling rules (--baseline-fill: "full", the issue's: a batch waits for its 16th
request; "available": a batch takes what has arrived, up to 16, when the device frees).

Both systems' numbers come from per-request records by the same code (the loadgen's rules:
TTFT from the scheduled send time, TPOT = (last token - first) / (tokens - 1), goodput = requests
meeting both SLOs that completed inside the measured window, per second; p99s nearest-rank over
the measured requests, a failed request counting as infinitely late).

Reported per rate and system: goodput (req/s meeting both SLOs), TTFT and TPOT p50 / p99, output
tokens/s; per system: the highest rate whose p99 TTFT and p99 TPOT meet the SLO, the best
goodput (and ragged's over the baseline's: the issue's target is >= 5x), saturation throughput
(the best output tokens/s; ragged's against its offline step throughput: target >= 80%); the
shared-prefix requests' TTFT against the others' and against the same requests without the
prefix cache (target: the cache cuts it >= 3x); and napkin math per rate (weight + KV bytes read
per decode step against the measured copy bandwidth, FLOPs per step).

Outputs: bench/results/gen_serving_<device>_<YYYYMMDD-HHMM>-<model>-<commit>[-<tag>].json and
.md (bench/results/README.md; --out-dir, --tag); the per-request records, server and loadgen
logs stay in build/serving_logs/<same name>/ (raw.json; --render RAW_JSON redoes the results
from it).

Models (--model): smollm2 (SmolLM2-135M's public config), gpt2 (GPT-2 small), tiny (a 4-layer
Llama for the CPU), written once under build/models/gen-<kind>/ by make_gen_model.py with random
weights and a synthetic byte-level tokenizer, or any HF decoder directory.

The baseline needs torch + transformers, which are not in scripts/install-deps.sh (benchmarks are
not part of `make test`). On the 2-core development CPU they live in a venv under /tmp:
    python3 -m venv --system-site-packages /tmp/genbench_venv
    /tmp/genbench_venv/bin/pip install torch transformers
    python3 bench/serving/gen_serving.py --model tiny --rates 2,8 --duration 40 \\
        --torch-python /tmp/genbench_venv/bin/python
On the GPU machine (tests/gpu/issue20.sh): --device cuda --dtype fp16 with the system python3.
"""
import argparse
import datetime
import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from static_baseline import sys_busy_s, wait_quiet  # noqa: E402
from sweep import cpu_name, device_slug, free_port, git_commit, gpu_names, slug  # noqa: E402

import make_gen_model  # noqa: E402


def log(msg):
    print(f"[gen_serving {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- server, metrics, GPU sampler

class GenServer:
    """`ragged serve` for a decoder, in its own session (stop() takes the whole group down)."""

    def __init__(self, a, port, log_path, extra=()):
        self.url = f"http://127.0.0.1:{port}"
        cmd = [a.ragged, "serve", "--model", a.model, "--device", a.device, "--dtype", a.dtype,
               "--host", "127.0.0.1", "--port", str(port),
               "--max-num-seqs", str(a.max_num_seqs),
               "--max-num-batched-tokens", str(a.max_num_batched_tokens),
               "--request-timeout-ms", str(int(a.timeout_ms))]
        for s in a.serve_arg:
            cmd += s.split()
        cmd += list(extra)
        self.cmd = cmd
        self.logf = open(log_path, "wb")
        self.logf.write((" ".join(cmd) + "\n").encode())
        self.logf.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)

    def get(self, path, timeout=5):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.read().decode(errors="replace")

    def wait_healthy(self, timeout_s):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                return False
            try:
                self.get("/health", 2)
                return True
            except OSError:
                time.sleep(0.25)
        return False

    def metrics(self):
        try:
            return parse_prom(self.get("/metrics"))
        except OSError:
            return {}

    def stop(self):
        if self.logf.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.logf.close()
        return self.proc.returncode


def parse_prom(text):
    """Prometheus text -> {"name{labels}": value} (comments skipped)."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        k, _, v = line.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def metrics_delta(m0, m1):
    """The engine's work between two /metrics snapshots."""
    d = lambda k: m1.get(k, 0.0) - m0.get(k, 0.0)  # noqa: E731
    steps = d("ragged_gen_step_duration_seconds_count")
    st = {
        "steps": steps,
        "step_ms_mean": 1e3 * d("ragged_gen_step_duration_seconds_sum") / steps if steps else None,
        "step_s_total": d("ragged_gen_step_duration_seconds_sum"),
        "tokens_per_step": d("ragged_gen_step_tokens_sum") / steps if steps else None,
        "prompt_tokens": d("ragged_gen_prompt_tokens_total"),
        "generation_tokens": d("ragged_gen_generation_tokens_total"),
        "prefix_cache_hit_tokens": d("ragged_gen_prefix_cache_hit_tokens_total"),
        "prefix_cache_hits": d("ragged_gen_prefix_cache_hits_total"),
        "prefix_cache_queries": d("ragged_gen_prefix_cache_queries_total"),
        "preemptions": d("ragged_gen_preemptions_total"),
        "refused": d("ragged_gen_requests_refused_total"),
        "aborted": d("ragged_gen_requests_aborted_total"),
        "finished": d("ragged_gen_requests_finished_total"),
        "kv_blocks_used_end": m1.get("ragged_gen_kv_blocks_used"),
        "kv_blocks_free_end": m1.get("ragged_gen_kv_blocks_free"),
    }
    return st


class GpuSampler:
    """nvidia-smi utilization.gpu every 100 ms while running (CUDA only)."""

    def __init__(self, enabled):
        self.samples, self.proc, self.th = [], None, None
        if not enabled:
            return
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append((time.monotonic(), float(line.split(",")[0])))
            except ValueError:
                pass

    def stop(self, t0=None, t1=None):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.th.join(timeout=5)
        v = [u for t, u in self.samples if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
        return {"mean": sum(v) / len(v), "n": len(v)} if v else None


# ---------------------------------------------------------------- one ragged run

def proc_cpu_s(pid):
    """CPU seconds (user + system, all threads) of process pid so far, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_point(a, run_dir, name, rate, extra_serve=(), requests=0):
    """Start a server, run the loadgen at `rate` (or `requests` all at once), return the point."""
    quiet = None
    if a.wait_quiet_s > 0:
        waited, busy = wait_quiet(a.wait_quiet_s)
        quiet = {"waited_s": waited, "other_cores_before": busy}
        if waited > 6:
            log(f"waited {waited:.0f} s for a quiet host (other processes: {busy:.2f} cores)")
    port = free_port()
    srv = GenServer(a, port, os.path.join(run_dir, f"serve_{name}.log"), extra_serve)
    pt = {"name": name, "rate": rate, "serve_cmd": " ".join(srv.cmd), "quiet": quiet}
    try:
        if not srv.wait_healthy(a.start_timeout_s):
            pt["error"] = f"server did not start (see serve_{name}.log)"
            log(pt["error"])
            return pt
        m0 = srv.metrics()
        lg_json = os.path.join(run_dir, f"loadgen_{name}.json")
        per_req = os.path.join(run_dir, f"per_request_{name}.jsonl")
        cmd = [a.ragged, "loadgen", "--mode", "generate", "--url", srv.url,
               "--prompt-len", a.prompt_len, "--output-len", a.output_len,
               "--shared-prefix-frac", str(a.shared_prefix_frac),
               "--shared-prefix-len", str(a.shared_prefix_len),
               "--token-ids", f"3:{a.vocab}", "--seed", str(a.seed),
               "--slo-ttft-ms", str(a.slo_ttft_ms), "--slo-tpot-ms", str(a.slo_tpot_ms),
               "--timeout-ms", str(int(a.timeout_ms)), "--json", lg_json,
               "--per-request", per_req, "--quiet"]
        if requests:
            cmd += ["--rate", "1000000", "--requests", str(requests),
                    "--connections", str(requests)]
        else:
            cmd += ["--rate", f"{rate:.6g}", "--duration", str(a.duration),
                    "--warmup", str(a.warmup), "--connections", str(a.connections)]
        gpu = GpuSampler(a.device == "cuda")
        b0, s0 = sys_busy_s(), proc_cpu_s(srv.proc.pid)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=a.warmup + a.duration + a.timeout_ms / 1e3 + 120)
        t1 = time.monotonic()
        b1, s1 = sys_busy_s(), proc_cpu_s(srv.proc.pid)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if None not in (b0, b1, s0, s1):
            lg_cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            # cores kept busy by other processes than the server and the loadgen: the noise of
            # a shared host
            pt["other_cpu_cores"] = ((b1 - b0) - (s1 - s0) - lg_cpu) / (t1 - t0)
            pt["server_cpu_cores"] = (s1 - s0) / (t1 - t0)
        # GPU busy over the measured window (the warm-up and the drain tail left out)
        pt["gpu_busy"] = gpu.stop(t0 + (0 if requests else a.warmup),
                                  t1 if requests else t0 + a.warmup + a.duration)
        m1 = srv.metrics()
        pt["loadgen_wall_s"] = t1 - t0
        if p.returncode != 0 or not os.path.exists(lg_json):
            pt["error"] = f"loadgen exit {p.returncode}: {p.stderr.strip()[-400:]}"
            log(pt["error"])
            return pt
        with open(lg_json) as f:
            pt["loadgen"] = json.load(f)
        pt["per_request_file"] = per_req
        with open(per_req) as f:
            pt["per_request"] = [json.loads(x) for x in f if x.strip()]
        pt["server"] = metrics_delta(m0, m1)
        pt["engine_busy"] = pt["server"]["step_s_total"] / max(t1 - t0, 1e-9)
    finally:
        pt["serve_exit"] = srv.stop()
    return pt


# ---------------------------------------------------------------- summaries (both systems)

def pct(v, p):
    """Nearest-rank percentile (the loadgen's rule); None when empty."""
    if not v:
        return None
    v = sorted(v)
    k = min(max(int(math.ceil(p / 100 * len(v))), 1), len(v))
    return v[k - 1]


def ok(r):
    return r.get("status") is not None and 200 <= r["status"] <= 299


def meets(r, a):
    return ok(r) and r.get("ttft_ms") is not None and r["ttft_ms"] <= a["slo_ttft_ms"] and \
        (r.get("tpot_ms") or 0.0) <= a["slo_tpot_ms"]


def summarize(recs, a, duration_s=None, warmup_s=0.0):
    """Per-request records -> the report's numbers. With duration_s the rates are per second of
    the measured window [warmup, warmup + duration) and count completions inside it (the
    loadgen's steady-state rule); without (the offline point) they are over first arrival to
    last completion."""
    meas = [r for r in recs if r.get("measured", True)]
    good = [r for r in meas if ok(r)]
    inf = float("inf")
    ttft = [r["ttft_ms"] for r in good if r.get("ttft_ms") is not None]
    tpot = [r["tpot_ms"] for r in good if r.get("tpot_ms") is not None]
    ttft_all = ttft + [inf] * (len(meas) - len(ttft))
    tpot_all = tpot + [inf] * (len(meas) - len(tpot))
    if duration_s:
        w0, w1 = warmup_s * 1e3, (warmup_s + duration_s) * 1e3
        inwin = [r for r in recs if ok(r) and r.get("done_ms") is not None and
                 w0 <= r["done_ms"] < w1]
        span = duration_s
    else:
        inwin = [r for r in recs if ok(r)]
        t0 = min((r["sched_ms"] for r in recs), default=0)
        t1 = max((r["done_ms"] for r in inwin), default=t0 + 1)
        span = max((t1 - t0) / 1e3, 1e-9)
    pre = [r["ttft_ms"] for r in good if r.get("prefixed") and r.get("ttft_ms") is not None]
    oth = [r["ttft_ms"] for r in good if not r.get("prefixed") and r.get("ttft_ms") is not None]
    errs = {}
    for r in meas:
        if not ok(r):
            e = r.get("error") or str(r.get("status"))
            errs[e] = errs.get(e, 0) + 1
    return {
        "n": len(meas), "ok": len(good), "errors": errs,
        "goodput_rps": sum(meets(r, a) for r in inwin) / span,
        "goodput_frac": sum(meets(r, a) for r in meas) / len(meas) if meas else None,
        "throughput_rps": len(inwin) / span,
        "output_tok_s": sum(r.get("output_tokens") or 0 for r in inwin) / span,
        "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft_all, 99),
        "tpot_p50": pct(tpot, 50), "tpot_p99": pct(tpot_all, 99),
        "e2e_p50": pct([r["done_ms"] - r["sched_ms"] for r in good], 50),
        "slo_p99_met": bool(meas) and pct(ttft_all, 99) <= a["slo_ttft_ms"] and
        pct(tpot_all, 99) <= a["slo_tpot_ms"],
        "prefixed_n": len(pre), "ttft_p50_prefixed": pct(pre, 50),
        "ttft_p50_other": pct(oth, 50),
        "ttft_per_prompt_tok_prefixed": _per_tok(good, True),
        "ttft_per_prompt_tok_other": _per_tok(good, False),
    }


def _per_tok(good, prefixed):
    """Median TTFT per prompt token (ms): the prefix cache should make a prefixed request's
    TTFT per token smaller than the others'."""
    v = [r["ttft_ms"] / r["len"] for r in good
         if bool(r.get("prefixed")) == prefixed and r.get("ttft_ms") is not None and r["len"]]
    return pct(v, 50)


# ---------------------------------------------------------------- napkin math

def model_facts(model_dir, dtype):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    H = c.get("hidden_size") or c.get("n_embd")
    L = c.get("num_hidden_layers") or c.get("n_layer")
    nh = c.get("num_attention_heads") or c.get("n_head")
    kvh = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or H // nh
    inter = c.get("intermediate_size") or c.get("n_inner") or 4 * H
    V = c["vocab_size"]
    if c.get("model_type") == "gpt2":
        per_layer = 4 * H * H + 2 * H * inter
        embed = V * H + c.get("n_positions", 1024) * H
        tied = True
        n_mlp = 2
    else:
        per_layer = H * nh * hd + 2 * H * kvh * hd + nh * hd * H + 3 * H * inter
        embed = V * H
        tied = c.get("tie_word_embeddings", False)
        n_mlp = 3
    body = L * per_layer
    head = V * H
    params = body + embed + (0 if tied else head)
    eb = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    return {"params": params, "layers": L, "hidden": H, "kv_heads": kvh, "head_dim": hd,
            "vocab": V, "mlp_mats": n_mlp,
            # a decode step reads every matrix once: the layers and the LM head (the embedding
            # rows it gathers are negligible)
            "step_weight_bytes": (body + head) * eb,
            "kv_bytes_per_token": 2 * L * kvh * hd * eb,
            "flops_per_token": 2 * (body + head), "elem_bytes": eb}


def napkin(pt, facts, bw_gbs, a):
    """Bytes and FLOPs per step at this point, against the measured step time."""
    s = pt.get("server") or {}
    if not s.get("step_ms_mean"):
        return None
    lg = pt["loadgen"]
    tps = s["tokens_per_step"]
    # mean context a decoding sequence attends over: its prompt + half its output
    mean_prompt = lg["tokens"]["prompt"] / max(lg["requests"]["ok"], 1) if "tokens" in lg else 0
    mean_out = (lg.get("output_length") or {}).get("mean") or 0
    ctx = mean_prompt + mean_out / 2
    decode_rows = s["generation_tokens"] / s["steps"] if s["steps"] else 0
    kv_read = decode_rows * ctx * facts["kv_bytes_per_token"]
    byts = facts["step_weight_bytes"] + kv_read
    step_s = s["step_ms_mean"] / 1e3
    return {"tokens_per_step": tps, "decode_rows_per_step": decode_rows, "mean_ctx": ctx,
            "weight_MB": facts["step_weight_bytes"] / 1e6, "kv_read_MB": kv_read / 1e6,
            "step_ms": s["step_ms_mean"], "GB_s": byts / step_s / 1e9,
            "bandwidth_GB_s": bw_gbs,
            "floor_ms": byts / (bw_gbs * 1e9) * 1e3 if bw_gbs else None,
            "GFLOP_step": facts["flops_per_token"] * tps / 1e9,
            "TFLOP_s": facts["flops_per_token"] * tps / step_s / 1e12}


def cpu_bandwidth_gbs():
    """NumPy copy bandwidth (read + write), 256 MiB, best of 5: the baseline's CPU figure when
    the baseline did not run."""
    import numpy as np
    x = np.ones(1 << 26, dtype=np.float32)
    y = np.empty_like(x)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(y, x)
        best = min(best, time.perf_counter() - t0)
    return 2 * x.nbytes / best / 1e9


# ---------------------------------------------------------------- report

def fmt(v, d=1):
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{d}f}"


def build_report(rep):
    """Summaries, verdicts and the markdown, from the raw run (also used by --render)."""
    a = rep["args"]
    out = {"rates": []}
    facts = rep["model_facts"]
    bw = (rep.get("baseline") or {}).get("bandwidth_gbs") or rep.get("cpu_bandwidth_gbs")
    base_runs = {}
    for run in (rep.get("baseline") or {}).get("runs", []):
        base_runs[(os.path.basename(run["schedule"]), run["fill"])] = run
    fills = a["baseline_fill"].split(",") if rep.get("baseline") else []
    for pt in rep["points"]:
        if pt["name"].startswith("rate") and "per_request" in pt:
            row = {"rate": pt["rate"],
                   "ragged": summarize(pt["per_request"], a, a["duration"], a["warmup"]),
                   "server": pt["server"], "gpu_busy": pt.get("gpu_busy"),
                   "engine_busy": pt.get("engine_busy"),
                   "other_cpu_cores": pt.get("other_cpu_cores"),
                   "offered_rps": pt["loadgen"].get("offered_rps"),
                   "napkin": napkin(pt, facts, bw, a)}
            for fill in fills:
                run = base_runs.get((os.path.basename(pt["per_request_file"]), fill))
                if run:
                    s = summarize(run["requests"], a, a["duration"], a["warmup"])
                    w0, w1 = a["warmup"] * 1e3, (a["warmup"] + a["duration"]) * 1e3
                    busy = sum(max(0.0, min(b["start_ms"] + b["seconds"] * 1e3, w1) -
                                   max(b["start_ms"], w0)) for b in run["batches"])
                    s["device_busy"] = busy / (w1 - w0)
                    s["cut"] = run["cut"]
                    s["other_cpu_cores"] = run.get("other_cpu_cores")
                    s["retried_batches"] = sum(1 for b in run["batches"] if b.get("tries", 1) > 1)
                    s["disturbed_batches"] = sum(1 for b in run["batches"]
                                                 if (b.get("other_cpu_cores") or 0) >= 0.3)
                    s["batches"] = len(run["batches"])
                    s["mean_batch"] = (sum(b["size"] for b in run["batches"]) /
                                       len(run["batches"]) if run["batches"] else None)
                    # output tokens per second of compute (its offline rate at these batches;
                    # padding rows that ran past their own max_tokens are not counted)
                    sec = sum(b["seconds"] for b in run["batches"])
                    s["tok_per_compute_s"] = (sum(b.get("useful_tokens", 0) for b in
                                                  run["batches"]) / sec if sec else None)
                    row["static_" + fill] = s
            out["rates"].append(row)
    for r in out["rates"]:
        # saturated: the server no longer keeps up with the offered rate, or its steps fill the
        # time (GPU busy or step time over 90% of the wall clock)
        busy = ((r.get("gpu_busy") or {}).get("mean") or 0) / 100
        # (against the arrivals actually drawn: a Poisson window holds +-1/sqrt(n) of the rate)
        offered = r.get("offered_rps") or r["rate"]
        r["ragged_saturated"] = (r["ragged"]["throughput_rps"] < 0.85 * offered or
                                 max(busy, r.get("engine_busy") or 0) > 0.9)
    systems = ["ragged"] + ["static_" + f for f in fills]
    best = {}
    for sysn in systems:
        rows = [r for r in out["rates"] if sysn in r]
        slo_rates = [r["rate"] for r in rows if r[sysn]["slo_p99_met"]]
        best[sysn] = {
            "max_rate_meeting_slo": max(slo_rates) if slo_rates else None,
            "best_goodput_rps": max((r[sysn]["goodput_rps"] for r in rows), default=None),
            "saturation_output_tok_s": max((r[sysn]["output_tok_s"] for r in rows), default=None),
            # the baseline's rate per second of its own compute (independent of a cut)
            "best_tok_per_compute_s": max((r[sysn].get("tok_per_compute_s") or 0 for r in rows),
                                          default=None) if sysn != "ragged" else None,
        }
    sat = [r["rate"] for r in out["rates"] if r["ragged_saturated"]]
    best["ragged"]["saturated_from_rate"] = min(sat) if sat else None
    out["best"] = best
    off = next((p for p in rep["points"] if p["name"] == "offline" and "per_request" in p), None)
    if off:
        s = summarize(off["per_request"], a)
        out["offline"] = {"requests": off["loadgen"]["requests"]["ok"],
                          "output_tok_s": off["loadgen"].get("output_tokens_per_s"),
                          "summary": s, "server": off["server"], "gpu_busy": off.get("gpu_busy")}
    ab = next((p for p in rep["points"] if p["name"].startswith("noprefix") and
               "per_request" in p), None)
    if ab:
        with_c = next((r for r in out["rates"] if r["rate"] == ab["rate"]), None)
        wo = summarize(ab["per_request"], a, a["duration"], a["warmup"])
        out["prefix_ab"] = {"rate": ab["rate"], "without_cache": wo,
                            "with_cache": with_c["ragged"] if with_c else None,
                            "server_without": ab["server"]}
        # the same seed draws the same requests in both runs: pair them by index
        pw = next((p for p in rep["points"] if p["name"] == f"rate{ab['rate']:g}" and
                   "per_request" in p), None)
        if pw:
            a_by = {r["i"]: r for r in pw["per_request"]}
            pairs = []
            for r in ab["per_request"]:
                w = a_by.get(r["i"])
                if (r.get("prefixed") and r.get("measured") and w and w.get("prefixed") and
                        ok(r) and ok(w) and w.get("ttft_ms") and r.get("ttft_ms") is not None):
                    pairs.append((r["len"] - a["shared_prefix_len"], r["ttft_ms"] / w["ttft_ms"]))
            short = [x for n, x in pairs if n <= 128]
            out["prefix_ab"]["paired"] = {
                "n": len(pairs), "ratio_p50": pct([x for _, x in pairs], 50),
                "n_suffix_le_128": len(short), "ratio_p50_suffix_le_128": pct(short, 50),
                "pairs": pairs}
    out["targets"] = targets(out, systems)
    return out


def ratio(x, y):
    if x is None or y is None:
        return None
    if y == 0:
        return float("inf") if x > 0 else None
    return x / y


def targets(out, systems):
    t = {}
    b = out["best"]
    for sysn in systems[1:]:
        t["goodput_x_" + sysn] = ratio(b["ragged"]["best_goodput_rps"], b[sysn]["best_goodput_rps"])
    if "offline" in out:
        # meaningful only once a rate saturated the server (else it measures the offered load)
        t["saturation_over_offline"] = (ratio(b["ragged"]["saturation_output_tok_s"],
                                              out["offline"]["output_tok_s"])
                                        if b["ragged"]["saturated_from_rate"] else None)
    if "prefix_ab" in out and out["prefix_ab"]["with_cache"]:
        w = out["prefix_ab"]["with_cache"]["ttft_p50_prefixed"]
        wo = out["prefix_ab"]["without_cache"]["ttft_p50_prefixed"]
        t["prefix_ttft_cut_x"] = ratio(wo, w)
        pr = out["prefix_ab"].get("paired") or {}
        if pr.get("n"):
            t["prefix_ttft_cut_x_paired_p50"] = pr["ratio_p50"]
    return t


def markdown(rep, out):
    a = rep["args"]
    m = rep["meta"]
    L = [f"# Generation serving: ragged continuous batching vs static batching ({m['device_name']})",
         "",
         f"- date {m['date']}, commit {m['commit']}, host CPU {m['cpu']} ({m['cpus']} CPUs), "
         f"load average at start {m['loadavg']}",
         f"- model {a['model_name']} ({rep['model_facts']['params'] / 1e6:.1f} M parameters, "
         f"random weights), device {a['device']}, dtype {a['dtype']}; "
         f"`{rep['points'][0].get('serve_cmd', '') if rep['points'] else ''}`",
         f"- load: Poisson, prompts {a['prompt_len']} tokens, outputs {a['output_len']} "
         f"(ignore_eos), {a['shared_prefix_frac'] * 100:.0f}% with a {a['shared_prefix_len']}-token "
         f"shared prefix in front, streaming; {a['warmup']} s warm-up + {a['duration']} s measured "
         f"per rate, seed {a['seed']}; SLO p99 TTFT <= {a['slo_ttft_ms']} ms and p99 TPOT <= "
         f"{a['slo_tpot_ms']} ms",
         ]
    bl = rep.get("baseline")
    if bl:
        L.append(f"- baseline: HF transformers {bl['transformers']} `generate` (torch "
                 f"{bl['torch']}, {bl['threads']} threads, {bl['dtype']}), static cache, batches of "
                 f"{bl['batch']} run to their longest output, "
                 f"{'torch.compile by transformers' if bl.get('hf_compile') else 'eager'}, "
                 f"the same per-request schedule "
                 f"(static_baseline.py); `full`: a batch waits for its {bl['batch']}th request (the "
                 f"issue's rule), `available`: it takes what has arrived when the device frees")
    else:
        L.append(f"- baseline: not run ({rep.get('baseline_error', 'disabled')})")
    L += ["", "## Per rate", "",
          "| rate/s | system | goodput/s | met % | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | "
          "out tok/s | busy % | notes |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["rates"]:
        for sysn in [k for k in r if k == "ragged" or k.startswith("static_")]:
            s = r[sysn]
            if sysn == "ragged":
                busy = (r["gpu_busy"] or {}).get("mean") if r.get("gpu_busy") else None
                busy_s = fmt(busy, 0) + " (GPU)" if busy is not None else \
                    fmt(100 * (r["engine_busy"] or 0), 0) + " (steps)"
                sv = r["server"]
                note = (f"{fmt(sv['tokens_per_step'])} tok/step, step {fmt(sv['step_ms_mean'], 2)}"
                        f" ms, prefix hits {sv['prefix_cache_hit_tokens']:.0f} tok, preempt "
                        f"{sv['preemptions']:.0f}")
                if r.get("other_cpu_cores") is not None:
                    note += f"; other processes {r['other_cpu_cores']:.2f} cores"
            else:
                busy_s = fmt(100 * s["device_busy"], 0) + " (batches)"
                note = (f"{s['batches']} batches of {fmt(s['mean_batch'])}, "
                        f"{fmt(s['tok_per_compute_s'], 0)} out tok/s of compute")
                if s.get("other_cpu_cores") is not None:
                    note += (f"; other processes {s['other_cpu_cores']:.2f} cores over the pass, "
                             f"{s['retried_batches']} batches re-run, "
                             f"{s['disturbed_batches']} kept disturbed")
                if s["cut"]:
                    note += "; CUT: " + s["cut"]
            if s["errors"]:
                note += "; errors " + ", ".join(f"{k} {v}" for k, v in s["errors"].items())
            L.append(f"| {r['rate']:g} | {sysn} | {fmt(s['goodput_rps'], 2)} | "
                     f"{fmt(100 * s['goodput_frac'] if s['goodput_frac'] is not None else None, 0)}"
                     f" | {fmt(s['ttft_p50'])} | {fmt(s['ttft_p99'])} | {fmt(s['tpot_p50'], 2)} | "
                     f"{fmt(s['tpot_p99'], 2)} | {fmt(s['output_tok_s'], 0)} | {busy_s} | {note} |")
    L += ["", "Latencies in ms. goodput/s: requests meeting both SLOs that completed inside the "
          "measured window, per second; met %: the share of the measured requests meeting both. "
          "p99 counts a failed request as infinitely late. Baseline TTFT/TPOT are as if each "
          "request streamed from its batch (its own first and last token), the most favourable "
          "reading of static batching.", "", "## Per system", "",
          "| system | highest rate meeting the SLO (p99) | best goodput/s | saturation out tok/s "
          "(in the window) | best out tok/s of compute |",
          "|---|---|---|---|---|"]
    sat = out["best"]["ragged"].get("saturated_from_rate")
    L_sat = (f"ragged saturated from {sat:g} req/s (throughput < 0.85 x the arrivals drawn, or busy > 90%)"
             if sat else "no rate saturated ragged")
    for sysn, b in out["best"].items():
        L.append(f"| {sysn} | {fmt(b['max_rate_meeting_slo'], 2) if b['max_rate_meeting_slo'] else 'none of the rates run'}"
                 f" | {fmt(b['best_goodput_rps'], 2)} | {fmt(b['saturation_output_tok_s'], 0)} | "
                 f"{fmt(b.get('best_tok_per_compute_s'), 0)} |")
    L += ["", L_sat + "."]
    if "offline" in out:
        o = out["offline"]
        L += ["", f"Offline step throughput (ragged, {o['requests']} requests sent at once, the "
              f"engine's batch full): {fmt(o['output_tok_s'], 0)} output tok/s, "
              f"{fmt(o['server']['tokens_per_step'])} tokens per step, step "
              f"{fmt(o['server']['step_ms_mean'], 2)} ms."]
    if "prefix_ab" in out:
        p = out["prefix_ab"]
        w, wo = p["with_cache"] or {}, p["without_cache"]
        L += ["", f"## Prefix cache (rate {p['rate']:g}/s)", "",
              "| | TTFT p50 prefixed | TTFT p50 others | TTFT/prompt token p50 prefixed | others |",
              "|---|---|---|---|---|",
              f"| with the cache | {fmt(w.get('ttft_p50_prefixed'))} ({w.get('prefixed_n')} req) | "
              f"{fmt(w.get('ttft_p50_other'))} | {fmt(w.get('ttft_per_prompt_tok_prefixed'), 3)} | "
              f"{fmt(w.get('ttft_per_prompt_tok_other'), 3)} |",
              f"| --no-prefix-caching | {fmt(wo['ttft_p50_prefixed'])} ({wo['prefixed_n']} req) | "
              f"{fmt(wo['ttft_p50_other'])} | {fmt(wo['ttft_per_prompt_tok_prefixed'], 3)} | "
              f"{fmt(wo['ttft_per_prompt_tok_other'], 3)} |"]
        pr = p.get("paired")
        if pr:
            L += ["", f"The same requests in both runs (same seed), paired: TTFT without the cache /"
                  f" with it, median over the {pr['n']} shared-prefix requests "
                  f"{fmt(pr['ratio_p50'], 2)}x; over the {pr['n_suffix_le_128']} whose own part "
                  f"after the {a['shared_prefix_len']}-token prefix is <= 128 tokens "
                  f"{fmt(pr['ratio_p50_suffix_le_128'], 2)}x. The cache can only skip the prefix: "
                  f"with a {a['prompt_len']} token remainder L, the computed prompt shrinks from "
                  f"{a['shared_prefix_len']} + L to L tokens."]
    t = out["targets"]
    L += ["", "## Targets (issue 20)", ""]
    for k, v in t.items():
        goal = {"saturation_over_offline": ">= 0.8", "prefix_ttft_cut_x": ">= 3",
                "prefix_ttft_cut_x_paired_p50": ">= 3"}.get(
            k, ">= 5" if k.startswith("goodput_x") else "")
        thr = float(goal.split()[-1]) if goal else None
        verdict = "-" if v is None else ("met" if thr is not None and v >= thr else "MISSED")
        if k == "saturation_over_offline" and v is None:
            verdict = "not measured: no rate saturated ragged (add higher rates)"
        L.append(f"- {k}: {fmt(v, 2)} (target {goal}): {verdict}")
    nap = [r for r in out["rates"] if r.get("napkin")]
    if nap:
        f = rep["model_facts"]
        L += ["", "## Napkin math (ragged, per step)", "",
              f"A decode step reads every weight matrix once ({f['step_weight_bytes'] / 1e6:.1f} MB"
              f" in {a['dtype']}) plus the KV of every decoding sequence "
              f"({f['kv_bytes_per_token'] / 1e3:.1f} kB per cached token x mean context = prompt + "
              f"half the output); 2 x params FLOPs per token. Bandwidth: a device copy measured in "
              f"the same run ({fmt((rep.get('baseline') or {}).get('bandwidth_gbs') or rep.get('cpu_bandwidth_gbs'), 0)} GB/s).",
              "", "| rate/s | tok/step | decode rows | weights MB | KV MB | step ms | GB/s | "
              "floor ms | GFLOP/step | TFLOP/s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in nap:
            n = r["napkin"]
            L.append(f"| {r['rate']:g} | {fmt(n['tokens_per_step'])} | "
                     f"{fmt(n['decode_rows_per_step'])} | {fmt(n['weight_MB'])} | "
                     f"{fmt(n['kv_read_MB'])} | {fmt(n['step_ms'], 2)} | {fmt(n['GB_s'])} | "
                     f"{fmt(n['floor_ms'], 2)} | {fmt(n['GFLOP_step'], 2)} | {fmt(n['TFLOP_s'], 3)} |")
    if rep.get("notes"):
        L += ["", "## Notes", ""] + [f"- {n}" for n in rep["notes"]]
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- main

def slim(rep):
    """The recorded JSON: everything but the per-request records (they stay in the run's log
    folder, raw.json, which --render reads)."""
    r = dict(rep)
    r["points"] = [{k: v for k, v in p.items() if k != "per_request"} for p in rep["points"]]
    if rep.get("baseline"):
        r["baseline"] = dict(rep["baseline"])
        r["baseline"]["runs"] = [{k: v for k, v in run.items() if k != "requests"}
                                 for run in rep["baseline"]["runs"]]
    return r


def write_results(rep, out_json):
    """raw.json in the run folder, the slim JSON and the markdown in the results folder."""
    with open(os.path.join(rep["run_dir"], "raw.json"), "w") as f:
        json.dump(rep, f)
    with open(out_json, "w") as f:
        json.dump(slim(rep), f, indent=1)
    if "summary" in rep:
        with open(out_json[:-5] + ".md", "w") as f:
            f.write(markdown(rep, rep["summary"]))


def resolve_model(arg):
    if arg in make_gen_model.SPECS:
        d = os.path.join(ROOT, "build", "models", f"gen-{arg}")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            log(f"writing the random-weight {arg} model to {d}")
        make_gen_model.make(arg, d)
        return d, f"{arg}-shape" if arg != "tiny" else "tiny"
    if not os.path.exists(os.path.join(arg, "config.json")):
        sys.exit(f"gen_serving: {arg} has no config.json")
    return arg, os.path.basename(os.path.normpath(arg))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="fp16 on cuda, fp32 on cpu by default")
    ap.add_argument("--rates", default="1,2,4", help="request rates, req/s (comma list)")
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--prompt-len", default="uniform:16:512")
    ap.add_argument("--output-len", default="uniform:16:256")
    ap.add_argument("--shared-prefix-frac", type=float, default=0.2)
    ap.add_argument("--shared-prefix-len", type=int, default=256)
    ap.add_argument("--slo-ttft-ms", type=float, default=200)
    ap.add_argument("--slo-tpot-ms", type=float, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=1024)
    ap.add_argument("--timeout-ms", type=float, default=30000)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra `ragged serve` arguments (repeatable)")
    ap.add_argument("--start-timeout-s", type=float, default=300)
    ap.add_argument("--offline", type=int, default=128,
                    help="requests of the offline point (0: skip)")
    ap.add_argument("--no-prefix-ab", action="store_true",
                    help="skip the --no-prefix-caching run (the prefix-cache A/B)")
    ap.add_argument("--prefix-ab-rate", type=float, default=0,
                    help="rate of the prefix-cache A/B (default: the lowest of --rates at which "
                         "about 20 shared-prefix requests arrive in --duration, else the highest)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--torch-python", default=sys.executable,
                    help="python with torch + transformers for the baseline")
    ap.add_argument("--baseline-batch", type=int, default=16)
    ap.add_argument("--baseline-fill", default="full,available")
    ap.add_argument("--baseline-budget-s", type=float, default=180,
                    help="real compute per schedule and fill rule before the baseline is cut")
    ap.add_argument("--baseline-threads", type=int, default=0)
    ap.add_argument("--baseline-hf-compile", action="store_true",
                    help="let transformers compile the baseline's forward (static_baseline.py)")
    ap.add_argument("--ragged", default=os.path.join(ROOT, "build", "ragged"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    ap.add_argument("--wait-quiet-s", type=float, default=0,
                    help="on a shared host: before each point (and each baseline schedule), wait "
                         "up to this long for other processes to use < 0.3 cores")
    ap.add_argument("--baseline-only", metavar="RAW_JSON",
                    help="run the baseline again on a run's recorded schedules (e.g. after a "
                         "first pass overlapped other load on a shared host), then --render")
    ap.add_argument("--render", metavar="RAW_JSON",
                    help="rewrite a run's results from its build/serving_logs/<run>/raw.json")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    if a.baseline_only:
        with open(a.baseline_only) as f:
            rep = json.load(f)
        ra = argparse.Namespace(**rep["args"])
        for k in ("torch_python", "baseline_budget_s", "baseline_threads", "baseline_hf_compile",
                  "wait_quiet_s"):
            setattr(ra, k, getattr(a, k))
        rep["args"].update({k: getattr(a, k) for k in ("baseline_budget_s", "baseline_threads",
                                                       "baseline_hf_compile")})
        rep.pop("baseline", None)
        rep.pop("baseline_error", None)
        rep["notes"] = [n for n in rep.get("notes", []) if not n.startswith("baseline per_")]
        rep["notes"].append(f"baseline re-run on the recorded schedules at "
                            f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}"
                            f" (--baseline-only)")
        rep["notes"] += a.note
        run_baseline(ra, rep, rep["run_dir"])
        rep["summary"] = build_report(rep)
        write_results(rep, rep["out_json"])
        log(f"rewrote {rep['out_json']} and .md")
        return 0
    if a.render:
        with open(a.render) as f:
            rep = json.load(f)
        rep["summary"] = build_report(rep)
        write_results(rep, rep["out_json"])
        return 0
    a.dtype = a.dtype or ("fp16" if a.device == "cuda" else "fp32")
    a.model, model_name = resolve_model(a.model)
    facts = model_facts(a.model, a.dtype)
    a.vocab = facts["vocab"]
    rates = [float(x) for x in a.rates.split(",") if x]
    gpus = gpu_names() if a.device == "cuda" else []
    ncpu = os.cpu_count()
    dev = device_slug(gpus if a.device == "cuda" else [])
    commit = git_commit()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
    base = f"gen_serving_{dev}_{stamp}-{slug(model_name)}-{commit.split('+')[0][:7]}"
    if a.tag:
        base += "-" + slug(a.tag)
    run_dir = os.path.join(ROOT, "build", "serving_logs", base)
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(a.out_dir, exist_ok=True)
    args_rec = {k: v for k, v in vars(a).items() if k not in ("render",)}
    args_rec["model_name"] = model_name
    rep = {"meta": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "commit": commit, "cpu": cpu_name(), "cpus": ncpu, "gpus": gpus,
                    "device_name": gpus[0] if gpus else f"{ncpu}-core {cpu_name()}",
                    "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())},
           "args": args_rec, "model_facts": facts, "points": [], "notes": list(a.note)}
    out_json = os.path.join(a.out_dir, base + ".json")
    rep["run_dir"], rep["out_json"] = run_dir, out_json
    log(f"run {base}: model {a.model}, rates {rates}")

    def save():
        write_results(rep, out_json)

    for rate in rates:
        log(f"ragged at {rate:g} req/s")
        rep["points"].append(run_point(a, run_dir, f"rate{rate:g}", rate))
        save()
    if not a.no_prefix_ab and rates:
        # the lowest rate with enough shared-prefix requests to pair (>= 20 at the 20% default):
        # at 2 req/s x 10 s there are about 4, too few to say anything
        want = 20 / max(a.shared_prefix_frac, 1e-9) / a.duration
        ab = a.prefix_ab_rate or next((r for r in sorted(rates) if r >= want), max(rates))
        log(f"ragged --no-prefix-caching at {ab:g} req/s")
        rep["points"].append(run_point(a, run_dir, f"noprefix{ab:g}", ab,
                                       ["--no-prefix-caching"]))
        save()
    if a.offline:
        log(f"ragged offline: {a.offline} requests at once")
        rep["points"].append(run_point(a, run_dir, "offline", None, requests=a.offline))
        save()
    if not a.no_baseline:
        run_baseline(a, rep, run_dir)
    if not rep.get("baseline"):
        rep["cpu_bandwidth_gbs"] = cpu_bandwidth_gbs() if a.device == "cpu" else None
    rep["summary"] = build_report(rep)
    save()
    log(f"wrote {out_json} and .md (raw records: {run_dir}/raw.json)")
    print(markdown(rep, rep["summary"]))
    return 0


def run_baseline(a, rep, run_dir):
    """static_baseline.py in its own process over every rate's per-request schedule."""
    scheds = [p["per_request_file"] for p in rep["points"]
              if p["name"].startswith("rate") and "per_request_file" in p]
    bl_json = os.path.join(run_dir, "baseline.json")
    cmd = [a.torch_python, os.path.join(HERE, "static_baseline.py"), "--model", a.model,
           "--device", a.device, "--dtype", a.dtype, "--batch", str(a.baseline_batch),
           "--fill", a.baseline_fill, "--prefix-len", str(a.shared_prefix_len),
           "--timeout-ms", str(a.timeout_ms), "--budget-s", str(a.baseline_budget_s),
           "--threads", str(a.baseline_threads), "--seed", str(a.seed), "--out", bl_json]
    if a.baseline_hf_compile:
        cmd.append("--hf-compile")
    if getattr(a, "wait_quiet_s", 0) > 0:
        waited, busy = wait_quiet(a.wait_quiet_s)
        rep["baseline_quiet"] = {"waited_s": waited, "other_cores_before": busy}
        # the baseline's timeline is virtual: it can wait for quiet before every batch and
        # run a batch again that others disturbed, at no cost to its numbers
        cmd += ["--wait-quiet-s", str(a.wait_quiet_s), "--batch-quiet-s", "30",
                "--batch-retries", "3"]
    log("baseline: " + " ".join(cmd[:2]) + " ...")
    with open(os.path.join(run_dir, "baseline.log"), "w") as lf:
        p = subprocess.run(cmd + scheds, stdout=lf, stderr=subprocess.STDOUT)
    if os.path.exists(bl_json):
        with open(bl_json) as f:
            rep["baseline"] = json.load(f)
        for run in rep["baseline"]["runs"]:
            if run["cut"]:
                rep["notes"].append(f"baseline {os.path.basename(run['schedule'])} "
                                    f"{run['fill']} was cut: {run['cut']}")
    if p.returncode != 0:
        rep["baseline_error"] = f"static_baseline.py exit {p.returncode} (see baseline.log)"
        log(rep["baseline_error"])


if __name__ == "__main__":
    sys.exit(main())
