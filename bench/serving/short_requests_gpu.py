#!/usr/bin/env python3
"""Issue 21, item 4 on a GPU: the pieces of bench/serving/short_requests_gpu.sh that are Python.

  start-rate OFFLINE_JSON   a sweep's first rate: --fraction x the best offline requests/s
  sat SWEEP_DIR             the saturation throughput (successful requests/s, the best step) of
                            the sweep JSON in SWEEP_DIR, empty when there is none
  fixed ...                 one `ragged serve` (sweep.py's Server, the sweep's flags), then
                            `ragged loadgen` at fixed rates: --rate for --duration s (the p99 at
                            80% of saturation), then optionally --overload-rate: per step the
                            latency, the server's CPU per request by thread (/proc/PID/task: HTTP
                            threads, accept thread, engine worker, teller, the rest), the
                            loadgen's own CPU (one thread: near 1 core it is the bottleneck),
                            GPU busy % (nvidia-smi), and the engine's batches, tokens and CUDA
                            graph captures (/metrics deltas)
  report ...                one markdown + one JSON from what the stages left: offline tokens/s
                            per batch size, each accept mode's saturation, served / offline at
                            the served mean batch size, the fixed-rate steps, and the issue's two
                            targets (served >= 85% of offline tokens/s; p99 < 50 ms at 80% of the
                            saturation load), each marked met or not

Needs Python 3 with numpy (no torch). Usage: see short_requests_gpu.sh, or SUBCOMMAND --help.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import offline_embed  # noqa: E402
import sweep  # noqa: E402
from gen_serving import GpuSampler, parse_prom  # noqa: E402
from short_requests_cpu import thread_group, thread_times  # noqa: E402

TARGET_RATIO = 0.85   # served tokens/s >= 85% of offline (issue 21, item 4)
TARGET_P99_MS = 50.0  # p99 under 50 ms ...
TARGET_LOAD = 0.80    # ... at 80% of the saturation load


def log(msg):
    print(f"[short_requests {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return None


# ------------------------------------------------------------------ start-rate, sat

def best_offline_rps(doc):
    rows = [r["requests_per_s"] for r in (doc or {}).get("sizes", []) if r.get("requests_per_s")]
    return max(rows) if rows else None


def sweep_doc(sweep_dir):
    """The newest serving_*.json sweep.py wrote into sweep_dir, or None."""
    paths = sorted(glob.glob(os.path.join(sweep_dir or "", "serving_*.json")),
                   key=os.path.getmtime)
    return load_json(paths[-1]) if paths else None


def sweep_run(doc, scheduler="token", dist="u2_100"):
    for r in (doc or {}).get("runs", []):
        if r["scheduler"] == scheduler and r["dist"] == dist and r.get("steps"):
            return r
    return None


def sat_step(run):
    """The step of the best throughput (sweep.summarize's `max`): the saturation point."""
    return max(run["steps"], key=lambda s: s["throughput_rps"]) if run else None


def cmd_start_rate(a):
    rps = best_offline_rps(load_json(a.offline))
    print(f"{a.fraction * rps:.0f}" if rps else f"{a.default:g}")
    return 0


def cmd_sat(a):
    st = sat_step(sweep_run(sweep_doc(a.sweep_dir)))
    if st and st["throughput_rps"] > 0:
        print(f"{st['throughput_rps']:.1f}")
    return 0


# ------------------------------------------------------------------ fixed

def prom_sum(m, name):
    """Sum of a metric over all its label sets in a parse_prom dict."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def metrics_of(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            return parse_prom(r.read().decode(errors="replace"))
    except OSError:
        return {}


SLOW_MS = 50.0  # the p99 bound: where the slow requests of a step fall in time


def slow_requests(path, limit_ms):
    """When a step's measured requests over limit_ms (latency from the scheduled send time)
    happened: their count and share, the window's start and end, and 100 ms bins holding them
    (the bins with the most first), so that one stall reads differently from a steady tail."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("measured") and r.get("done_ms") is not None \
                        and r.get("sched_ms") is not None:
                    rows.append((r["sched_ms"], r["done_ms"] - r["sched_ms"]))
    except (OSError, ValueError):
        return None
    if not rows:
        return None
    t_lo = min(t for t, _ in rows)
    slow = [(t - t_lo, ms) for t, ms in rows if ms > limit_ms]
    bins = {}
    for t, _ in slow:
        bins[int(t // 100)] = bins.get(int(t // 100), 0) + 1
    top = sorted(bins.items(), key=lambda kv: -kv[1])[:5]
    return {"limit_ms": limit_ms, "n": len(slow), "share": len(slow) / len(rows),
            "window_ms": max(t for t, _ in rows) - t_lo,
            "first_ms": min((t for t, _ in slow), default=None),
            "last_ms": max((t for t, _ in slow), default=None),
            "bins_100ms": [[b * 100, n] for b, n in top]}


def run_step(a, server, label, rate, duration, warmup_s, seed):
    """One fixed-rate step against the running server; returns its record."""
    lg = [a.ragged, "loadgen", "--url", server.url, "--route", "/v1/embeddings",
          "--dist", a.dist, "--connections", str(a.connections),
          "--timeout-ms", str(a.timeout_ms), "--quiet"]
    # nvidia-smi from before the warm-up: its start (NVML initialisation) falls outside the
    # measured window; only the window's samples are kept (gpu.stop)
    gpu = GpuSampler(a.device == "cuda")
    if warmup_s > 0:  # connections opened, allocator and graphs warm; another seed, not measured
        subprocess.run(lg + ["--rate", f"{rate:.6g}", "--duration", f"{warmup_s:g}",
                             "--seed", str(seed + 1000)],
                       stdout=subprocess.DEVNULL, timeout=warmup_s + a.timeout_ms / 1e3 + 30)
    out_json = os.path.join(a.log_dir, f"loadgen_{label}.json")
    per_req = os.path.join(a.log_dir, f"loadgen_{label}_requests.jsonl")
    m0, t0 = metrics_of(server.url), thread_times(server.proc.pid)
    w0 = time.monotonic()
    # the measured loadgen's own --warmup opens its connections before the window (a fresh
    # process would otherwise connect 512 sockets inside it)
    p = subprocess.Popen(lg + ["--rate", f"{rate:.6g}", "--duration", f"{duration:g}",
                              "--warmup", f"{min(max(warmup_s, 0.0), 1.0):g}",
                              "--seed", str(seed), "--json", out_json,
                              "--per-request", per_req],
                         stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - w0
    m1, t1 = metrics_of(server.url), thread_times(server.proc.pid)
    util = gpu.stop(w0, w0 + wall)
    res = load_json(out_json)
    if status != 0 or not res:
        return {"label": label, "rate": rate, "error": f"loadgen exit status {status}"}
    hz = os.sysconf("SC_CLK_TCK")
    d = lambda name: prom_sum(m1, name) - prom_sum(m0, name)  # noqa: E731
    ok = d('ragged_requests_total{route="v1_embeddings",code="200"}') or res["requests"]["ok"]
    groups, http, total = {}, [], 0
    for tid, (comm, ticks) in t1.items():
        dt = ticks - t0.get(tid, (comm, 0))[1]
        total += dt
        g = thread_group(comm)
        groups[g] = groups.get(g, 0) + dt
        if comm.startswith("MHD"):
            http.append(dt / hz / max(ok, 1) * 1e6)
    batches = d("ragged_batches_total")
    lg_cpu = ru.ru_utime + ru.ru_stime
    rec = {
        "label": label, "rate": rate, "duration_s": duration, "warmup_s": warmup_s,
        "seed": seed, "wall_s": wall, "loadgen": res,
        "server_ok_answers": ok,
        "server_cores": total / hz / wall,
        "server_us_per_req": total / hz / max(ok, 1) * 1e6,
        "threads_us_per_req": {g: v / hz / max(ok, 1) * 1e6 for g, v in sorted(groups.items())},
        "http_threads_us_per_req": sorted(round(x, 1) for x in http),
        "loadgen_cores": lg_cpu / wall,
        "loadgen_us_per_req": lg_cpu / max(res["requests"]["sent"], 1) * 1e6,
        "gpu_busy_pct": util["mean"] if util else None,
        "batches": batches,
        "tokens_per_batch": d("ragged_real_tokens_total") / batches if batches else None,
        "graph_captures": d("ragged_device_graph_captures_total"),
        # what the engine thread did besides replaying a graph: eager runs (a bucket without a
        # graph yet) and GEMM plans built (each autotuned); absent from an older server
        "eager_batches": d("ragged_device_eager_batches_total"),
        "graph_replays": d("ragged_device_graph_replays_total"),
        "gemm_plans": d("ragged_device_gemm_plans_total"),
    }
    rec["slow"] = slow_requests(per_req, SLOW_MS)
    lat = res["latency_ms"]
    log(f"  {label}: offered {res['offered_rps']:.0f}/s, throughput {res['throughput_rps']:.0f}/s,"
        f" p50 {lat['p50']} p99 {lat['p99']} ms, failed {res['requests']['failed']},"
        f" batch {res['server']['batch_size_mean']}, server {rec['server_cores']:.2f} cores,"
        f" loadgen {rec['loadgen_cores']:.2f} cores, graph captures {rec['graph_captures']:.0f},"
        f" eager batches {rec['eager_batches']:.0f}, GEMM plans {rec['gemm_plans']:.0f}")
    return rec


def cmd_fixed(a):
    # the server runs in its own session: a SIGTERM becomes an exception, so `finally` stops it
    signal.signal(signal.SIGTERM, sweep._terminate)
    os.makedirs(a.log_dir, exist_ok=True)
    a.cost_table = None
    doc = {"meta": {"tool": "bench/serving/short_requests_gpu.py fixed",
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                        timespec="seconds"),
                    "model": a.model, "device": a.device, "dtype": a.dtype,
                    "connections": a.connections, "dist": a.dist,
                    "serve_args": a.serve_arg, "timeout_ms": a.timeout_ms},
           "steps": []}

    def save():
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)

    server = sweep.Server(a, "token", sweep.free_port(), os.path.join(a.log_dir, "serve_fixed.log"))
    doc["meta"]["serve_cmd"] = " ".join(server.cmd)
    t0 = time.monotonic()
    try:
        if not server.wait_healthy(a.start_timeout_s):
            doc["error"] = f"server not healthy after {time.monotonic() - t0:.0f} s"
            log(doc["error"])
            save()
            return 1
        doc["meta"]["startup_s"] = time.monotonic() - t0
        m = metrics_of(server.url)
        doc["meta"]["graphs_warm"] = prom_sum(m, "ragged_device_graphs_warm")
        doc["meta"]["gemm_plans_at_start"] = prom_sum(m, "ragged_device_gemm_plans_total")
        log(f"server up in {doc['meta']['startup_s']:.1f} s, {doc['meta']['graphs_warm']:.0f}"
            f" CUDA graphs captured at start-up, {doc['meta']['gemm_plans_at_start']:.0f}"
            " GEMM plans")
        doc["steps"].append(run_step(a, server, "load80", a.rate, a.duration, a.warmup, a.seed))
        save()
        if a.overload_rate and a.overload_duration > 0:
            doc["steps"].append(run_step(a, server, "overload", a.overload_rate,
                                         a.overload_duration, 0, a.seed + 1))
            save()
    finally:
        rc = server.stop()
        doc["meta"]["server_exit"] = rc
        save()
    return 0 if all("error" not in s for s in doc["steps"]) else 1


# ------------------------------------------------------------------ report

def fmt(x, p=1, unit=""):
    return "-" if x is None else f"{x:,.{p}f}{unit}"


def verdict(ok):
    return "-" if ok is None else ("**met**" if ok else "**not met**")


def build(a):
    """Everything the report says, as one dict (also the JSON written beside the markdown)."""
    off = load_json(a.offline)
    fixed = load_json(a.fixed)
    rep = {"meta": {
        "tool": "bench/serving/short_requests_gpu.sh", "issue": "21, item 4",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("RAGGED_COMMIT") or sweep.git_commit(),
        "device": a.device, "dtype": a.dtype, "gpus": sweep.gpu_names() if a.device == "cuda"
        else [], "cpu": sweep.cpu_name(), "cpu_count": os.cpu_count(),
        "host": platform.node(), "model": a.model, "budget_s": a.budget_s,
        "wall_s": a.wall_s, "connections": a.connections, "seed": a.seed,
        "stages": a.stages}, "offline": off, "sweeps": {}, "fixed": fixed}
    for spec in a.sweep:
        name, _, d = spec.partition("=")
        doc = sweep_doc(d)
        run = sweep_run(doc)
        st = sat_step(run)
        s = {"dir": d, "found": doc is not None}
        if doc:
            s["meta"] = doc["meta"]
            s["run"] = run or next(iter(doc.get("runs", [])), None)
            prom = os.path.join(doc["meta"].get("log_dir", ""), "metrics_token.prom")
            if os.path.exists(prom):
                with open(prom) as f:
                    m = parse_prom(f.read())
                s["graph_captures_whole_run"] = prom_sum(m, "ragged_device_graph_captures_total")
                s["batches_whole_run"] = prom_sum(m, "ragged_batches_total")
        if st:
            srv = st["server"]
            b = srv.get("batch_size_mean")
            ref, how = offline_embed.tokens_per_s_at(off or {}, b)
            best = max((r["tokens_per_s"] for r in (off or {}).get("sizes", [])
                        if r.get("tokens_per_s")), default=None)
            s["saturation"] = {
                "throughput_rps": st["throughput_rps"], "tokens_per_s": st["tokens_per_s"],
                "offered_rps": st["offered_rps"], "p50_ms": st["latency_ms"]["p50"],
                "p99_ms": st["latency_ms"]["p99"], "batch_size_mean": b,
                "queue_ms_mean": srv.get("queue_ms_mean"),
                "inference_ms_mean": srv.get("inference_ms_mean"),
                "total_ms_mean": srv.get("total_ms_mean"), "failed": st["requests"]["failed"],
                "send_lag_ms": st.get("send_lag_ms"),
                "offline_tokens_per_s_at_batch": ref, "offline_at_batch_how": how,
                "ratio": st["tokens_per_s"] / ref if ref else None,
                "offline_best_tokens_per_s": best,
                "ratio_to_best": st["tokens_per_s"] / best if best else None,
            }
            stable = sweep.summarize(run["steps"])["stable"]
            s["stable"] = stable
        rep["sweeps"][name] = s
    # the targets, judged on the first sweep (the server's default accept mode)
    first = next(iter(rep["sweeps"].values()), {}).get("saturation")
    t1 = {"what": f"served tokens/s >= {TARGET_RATIO:.0%} of offline tokens/s at the served mean "
                  "batch size (default accept mode)", "ok": None}
    if first and first["ratio"] is not None:
        t1.update(served=first["tokens_per_s"], offline=first["offline_tokens_per_s_at_batch"],
                  ratio=first["ratio"], ok=first["ratio"] >= TARGET_RATIO)
    t2 = {"what": f"p99 < {TARGET_P99_MS:.0f} ms at {TARGET_LOAD:.0%} of the saturation load",
          "ok": None}
    st80 = next((s for s in (fixed or {}).get("steps", []) if s.get("label") == "load80"), None)
    if st80 and "loadgen" in st80:
        lg = st80["loadgen"]
        kept = lg["throughput_rps"] >= 0.95 * lg["offered_rps"] and not lg["requests"]["failed"]
        t2.update(rate=st80["rate"], offered=lg["offered_rps"], throughput=lg["throughput_rps"],
                  p99_ms=lg["latency_ms"]["p99"], failed=lg["requests"]["failed"],
                  kept_up=kept,
                  ok=bool(lg["latency_ms"]["p99"] is not None and kept and
                          lg["latency_ms"]["p99"] < TARGET_P99_MS))
    rep["targets"] = [t1, t2]
    return rep


def markdown(rep):
    m = rep["meta"]
    off = rep.get("offline") or {}
    om = off.get("meta", {})
    dev = "; ".join(m["gpus"]) if m["gpus"] else f"{m['cpu']} (no GPU: device {m['device']})"
    L = [f"# Short embedding requests through `ragged serve` vs the engine offline "
         f"(issue 21, item 4)", "",
         f"- device: {dev}; device {m['device']}, dtype {m['dtype']}",
         f"- host: {m['cpu']}, {m['cpu_count']} cores (`{m['host']}`)",
         f"- commit `{m['commit']}`, date {m['date']}",
         f"- model: `{m['model']}`"
         + (f" ({om['model_config']})" if om.get("model_config") else ""),
         f"- requests: `ragged loadgen` token ids, lengths uniform 2-100 tokens ([CLS] and [SEP] "
         f"included), seed {m['seed']}; {m['connections']} connections on the same host",
         f"- stages run: {m['stages'] or '-'}; budget {m['budget_s']} s,"
         f" wall {fmt(m['wall_s'], 0)} s",
         "", "## Targets", "",
         "| target | measured | |", "|---|---|---|"]
    t1, t2 = rep["targets"]
    m1 = "not measured"
    if t1.get("ratio") is not None:
        m1 = (f"{t1['served'] / 1e6:.3f} M / {t1['offline'] / 1e6:.3f} M tokens/s"
              f" = {t1['ratio']:.1%}")
    m2 = "not measured"
    if "p99_ms" in t2:
        m2 = (f"p99 {fmt(t2['p99_ms'])} ms at {fmt(t2['throughput'], 0)} of"
              f" {fmt(t2['offered'], 0)} req/s offered (rate {fmt(t2['rate'], 0)}),"
              f" {t2['failed']} failed" + ("" if t2["kept_up"] else "; did not keep up"))
    L.append(f"| {t1['what']} | {m1} | {verdict(t1['ok'])} |")
    L.append(f"| {t2['what']} | {m2} | {verdict(t2['ok'])} |")
    L += ["", "## Offline: the same engine, `rg_model_embed` on packed batches", ""]
    if off.get("sizes"):
        L += [f"Batches of the loadgen's own requests ({om.get('requests')}, seed"
              f" {om.get('seed')}), {om.get('batches_per_size')} batches per size, rotated;"
              f" {om.get('warmup')} warm-up calls per batch; median of up to"
              f" {om.get('rounds_max')} rounds. Timed: {om.get('timed')}. Model loaded with"
              f" max_batch_tokens {om.get('max_batch_tokens')}.",
              "", offline_embed.render_table(off)]
    else:
        L.append(f"not measured ({off.get('error', 'no result')})")
    L += ["", "## Served: saturation of `ragged serve --scheduler token` (sweep.py)", "",
          "Saturation = the step of the best throughput (2xx per second in the measured window);"
          " offline at batch = offline tokens/s at the saturation step's mean batch size (server"
          " headers), interpolated in log(batch).", "",
          "| accept mode | req/s | tokens/s | p50 / p99 ms | mean batch | server queue / inference /"
          " total ms | offline tokens/s at batch | served / offline | served / best offline |"
          " stable (not saturated) req/s, p99 ms | graph captures (whole run) | steps, stop |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in rep["sweeps"].items():
        sat = s.get("saturation")
        if not sat:
            err = (s.get("run") or {}).get("error") if s.get("found") else "no sweep result"
            L.append(f"| {name} | {err or 'no step'} |" + " - |" * 10)
            continue
        st = s.get("stable")
        run = s["run"]
        L.append(
            f"| {name} | {fmt(sat['throughput_rps'], 0)} | {fmt(sat['tokens_per_s'] / 1e6, 3)} M |"
            f" {fmt(sat['p50_ms'])} / {fmt(sat['p99_ms'])} | {fmt(sat['batch_size_mean'])} |"
            f" {fmt(sat['queue_ms_mean'])} / {fmt(sat['inference_ms_mean'])} /"
            f" {fmt(sat['total_ms_mean'])} |"
            f" {fmt((sat['offline_tokens_per_s_at_batch'] or 0) / 1e6, 3)} M"
            f" ({sat['offline_at_batch_how']}) |"
            f" {fmt(100 * sat['ratio'] if sat['ratio'] else None)}% |"
            f" {fmt(100 * sat['ratio_to_best'] if sat['ratio_to_best'] else None)}% |"
            f" {'-' if not st else fmt(st['throughput_rps'], 0) + ', ' + fmt(st['p99_ms'])} |"
            f" {fmt(s.get('graph_captures_whole_run'), 0)} of {fmt(s.get('batches_whole_run'), 0)}"
            f" batches | {len(run['steps'])}, {run.get('stop_reason')} |")
    for name, s in rep["sweeps"].items():
        if not s.get("run") or not s["run"].get("steps"):
            continue
        L += ["", f"### {name}: every rate step", "",
              "| offered req/s | throughput req/s | tokens/s | p50 | p90 | p99 ms | mean batch |"
              " queue ms | inference ms | failed | send lag mean/max ms | saturated |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for st in s["run"]["steps"]:
            lat, srv, lag = st["latency_ms"], st["server"], st.get("send_lag_ms") or {}
            L.append(f"| {fmt(st['offered_rps'], 0)} | {fmt(st['throughput_rps'], 0)} |"
                     f" {fmt(st['tokens_per_s'], 0)} | {fmt(lat['p50'])} | {fmt(lat['p90'])} |"
                     f" {fmt(lat['p99'])} | {fmt(srv['batch_size_mean'])} |"
                     f" {fmt(srv['queue_ms_mean'])} | {fmt(srv['inference_ms_mean'])} |"
                     f" {st['requests']['failed']} | {fmt(lag.get('mean'), 2)} /"
                     f" {fmt(lag.get('max'), 1)} | {st.get('saturated') or ''} |")
    fx = rep.get("fixed") or {}
    L += ["", "## Fixed rates on the default server (`short_requests_gpu.py fixed`)", ""]
    if not fx.get("steps"):
        L.append(f"not measured ({fx.get('error', 'no result')})")
    else:
        L += [f"`{fx['meta'].get('serve_cmd', '')}`; server up in "
              f"{fmt(fx['meta'].get('startup_s'))} s"
              f" ({fmt(fx['meta'].get('graphs_warm'), 0)} CUDA graphs captured at start-up,"
              f" {fmt(fx['meta'].get('gemm_plans_at_start'), 0)} GEMM plans). load80: {TARGET_LOAD:.0%} of the default "
              "mode's saturation throughput (after a warm-up at the same rate); overload: above "
              "saturation. CPU from /proc (utime + stime) over the step, per 2xx answer.", "",
              "| | " + " | ".join(s["label"] for s in fx["steps"]) + " |",
              "|---|" + "---|" * len(fx["steps"])]

        def row(title, f):
            L.append(f"| {title} | " + " | ".join(
                "error: " + s["error"] if "error" in s else f(s) for s in fx["steps"]) + " |")
        row("offered / throughput req/s", lambda s: f"{fmt(s['loadgen']['offered_rps'], 0)} / "
            f"{fmt(s['loadgen']['throughput_rps'], 0)}")
        row("tokens/s", lambda s: f"{fmt(s['loadgen']['tokens_per_s'] / 1e6, 3)} M")
        row("latency p50 / p90 / p99 / max ms", lambda s: " / ".join(
            fmt(s["loadgen"]["latency_ms"].get(k)) for k in ("p50", "p90", "p99", "max")))
        row("failed (status codes)", lambda s: f"{s['loadgen']['requests']['failed']} "
            f"{s['loadgen']['errors']['status'] or ''}")
        row("server mean batch; queue / inference / total ms", lambda s: (
            f"{fmt(s['loadgen']['server']['batch_size_mean'])}; "
            + " / ".join(fmt(s["loadgen"]["server"][k]) for k in
                         ("queue_ms_mean", "inference_ms_mean", "total_ms_mean"))))
        row("batches, tokens per batch", lambda s: f"{fmt(s['batches'], 0)}, "
            f"{fmt(s['tokens_per_batch'], 0)}")
        row("CUDA graph captures in the step", lambda s: fmt(s["graph_captures"], 0))
        row("eager batches (no graph yet) / graph replays in the step",
            lambda s: f"{fmt(s.get('eager_batches'), 0)} / {fmt(s.get('graph_replays'), 0)}")
        row("GEMM plans built (autotuned) in the step", lambda s: fmt(s.get("gemm_plans"), 0))
        row("GPU busy % (nvidia-smi)", lambda s: fmt(s["gpu_busy_pct"]))

        def slow_cell(s):
            w = s.get("slow")
            if not w:
                return "-"
            if not w["n"]:
                return f"none of {w['window_ms'] / 1e3:.1f} s"
            return (f"{w['n']} ({100 * w['share']:.2f}%), at {w['first_ms'] / 1e3:.2f}-"
                    f"{w['last_ms'] / 1e3:.2f} s of {w['window_ms'] / 1e3:.1f} s; busiest 100 ms "
                    "bins: " + ", ".join(f"{t / 1e3:.1f} s: {n}" for t, n in w["bins_100ms"]))
        row(f"requests over {SLOW_MS:g} ms: how many, and when (from the window's start)",
            slow_cell)
        row("server cores; CPU us per request", lambda s: f"{fmt(s['server_cores'], 2)}; "
            f"{fmt(s['server_us_per_req'])}")
        groups = sorted({g for s in fx["steps"] if "error" not in s
                         for g in s["threads_us_per_req"]})
        for g in groups:
            row(f"&nbsp; {g}, us/req", lambda s, g=g: fmt(s["threads_us_per_req"].get(g)))
        row("&nbsp; per HTTP thread, us/req (sorted)", lambda s: " ".join(
            f"{x:.0f}" for x in s["http_threads_us_per_req"]))
        row("loadgen cores; CPU us per request; send lag mean/max ms",
            lambda s: f"{fmt(s['loadgen_cores'], 2)}; {fmt(s['loadgen_us_per_req'])}; "
            f"{fmt(s['loadgen']['send_lag_ms']['mean'], 2)} / "
            f"{fmt(s['loadgen']['send_lag_ms']['max'], 1)}")
        over = next((s for s in fx["steps"] if s.get("label") == "overload" and "loadgen" in s),
                    None)
        sat = next(iter(rep["sweeps"].values()), {}).get("saturation")
        if over and sat and over["loadgen"]["throughput_rps"] > 1.02 * sat["throughput_rps"]:
            L += ["", f"**The overload step served {over['loadgen']['throughput_rps']:,.0f} req/s,"
                  f" more than the sweep's saturation ({sat['throughput_rps']:,.0f}): the sweep"
                  " underestimates the capacity, and the 80% load above is lower than 80% of"
                  " it.**"]
    L += ["", "## Notes", "",
          "- The ratio compares the served tokens/s at saturation with the offline tokens/s at "
          "the same mean batch size (the issue's comparison); served / best offline uses the "
          "best batch size measured instead.",
          "- Offline calls include the ids' copy to the device and the pooled vectors' copy back "
          "to host memory (what the server must do too) and are synchronised; they do not "
          "include HTTP, JSON, the queue, or the per-request L2 normalisation the server does "
          "on the host.",
          "- The servers run with the default --max-batch-tokens (16384) unless their extra"
          " arguments say otherwise (" + "; ".join(
              f"{n}: {' '.join((s.get('meta') or {}).get('serve_args') or []) or 'none'}"
              for n, s in rep["sweeps"].items()) + "), so a batch holds at most 16384 tokens"
          " (about 320 of these requests); the offline model takes the largest batch whole.",
          "- `ragged loadgen` is one thread: a loadgen near 1.0 core, or a large send lag, "
          "means the load generator, not the server, set the pace of that step."]
    return "\n".join(L) + "\n"


def cmd_report(a):
    rep = build(a)
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, a.name + ".json"), "w") as f:
        json.dump(rep, f, indent=1)
    with open(os.path.join(a.out_dir, a.name + ".md"), "w") as f:
        f.write(markdown(rep))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("start-rate")
    p.add_argument("offline")
    p.add_argument("--fraction", type=float, default=0.25)
    p.add_argument("--default", type=float, default=100.0, help="without an offline result")
    p = sub.add_parser("sat")
    p.add_argument("sweep_dir")
    p = sub.add_parser("fixed")
    p.add_argument("--ragged", default=os.path.join(ROOT, "build", "ragged"))
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default="fp16", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--rate", type=float, required=True, help="offered requests/s")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before, unmeasured")
    p.add_argument("--overload-rate", type=float, default=None)
    p.add_argument("--overload-duration", type=float, default=4.0)
    p.add_argument("--connections", type=int, default=512)
    p.add_argument("--dist", default="uniform:2:100")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout-ms", type=int, default=5000)
    p.add_argument("--start-timeout-s", type=float, default=120.0)
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra `ragged serve` arguments (repeatable, split on spaces)")
    p.add_argument("--log-dir", required=True, help="server log and loadgen JSON go here")
    p.add_argument("--json", required=True)
    p = sub.add_parser("report")
    p.add_argument("--offline", default=None)
    p.add_argument("--sweep", action="append", default=[], help="NAME=DIR (repeatable)")
    p.add_argument("--fixed", default=None)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--name", required=True, help="file name of the .md and .json, no suffix")
    p.add_argument("--model", default="")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="fp16")
    p.add_argument("--connections", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=None)
    p.add_argument("--wall-s", type=float, default=None)
    p.add_argument("--stages", default="")
    a = ap.parse_args(argv)
    return {"start-rate": cmd_start_rate, "sat": cmd_sat, "fixed": cmd_fixed,
            "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
